#!/bin/sh
# Build the libFuzzer harnesses into build/fuzz/ with clang and
# ASan + UBSan (UB aborts, so libFuzzer records it as a crash).
#
#   sh tests/fuzz/build.sh            # from the repository root (or anywhere)
#
# The library is compiled from the Makefile's LIB_SRC (runtime/*.c files)
# and build/embedded.c (made by `make build/embedded.c`, so edits to gen/
# and templates/ are picked up) with coverage instrumentation; libtcc and
# liblua are linked as they are.
# Environment: CLANG (default clang, else clang-14), FUZZ_CFLAGS (extra
# flags), FUZZ_LIB_SRC (library sources; default: the Makefile's LIB_SRC).
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=build/fuzz
OBJ=$OUT/obj

if [ -z "${CLANG:-}" ]; then
  if command -v clang >/dev/null 2>&1; then CLANG=clang
  elif command -v clang-14 >/dev/null 2>&1; then CLANG=clang-14
  else echo "fuzz: clang not found (sudo apt-get install -y clang)" >&2; exit 1
  fi
fi

${MAKE:-make} -s build/embedded.c
if [ -z "${FUZZ_LIB_SRC:-}" ]; then
  FUZZ_LIB_SRC=$(printf 'fuzz-print-lib-src:\n\t@echo $(LIB_SRC)\n' |
    ${MAKE:-make} -s --no-print-directory -f Makefile -f - fuzz-print-lib-src 2>/dev/null) || FUZZ_LIB_SRC=
  [ -n "$FUZZ_LIB_SRC" ] || FUZZ_LIB_SRC=$(echo runtime/*.c)
fi

SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
CFLAGS="-std=c99 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter $SAN ${FUZZ_CFLAGS:-}"
CPPFLAGS="-D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iruntime -I/usr/include/lua5.4"
LIBS="-llua5.4 -ltcc -ldl -lm -lpthread"

mkdir -p "$OBJ"
objs=""
for src in $FUZZ_LIB_SRC build/embedded.c; do
  base=$(basename "$src" .c)
  o=$OBJ/$base.o
  # Target flags (-mavx512f ...) the Makefile gives this object, if any.
  mflags=$(${MAKE:-make} -s -n -B V=1 "build/obj/$base.o" 2>/dev/null |
    grep -e "-o build/obj/$base.o" | tr ' ' '\n' | grep -e '^-m' | tr '\n' ' ') || mflags=
  echo "  CC      $o${mflags:+ ($mflags)}"
  # shellcheck disable=SC2086
  $CLANG $CPPFLAGS $CFLAGS $mflags -fsanitize=fuzzer-no-link -c -o "$o" "$src"
  objs="$objs $o"
done

# Lua line coverage for the spec and generator harnesses: not instrumented.
echo "  CC      $OBJ/lua_cov.o"
$CLANG $CPPFLAGS -std=c99 -g -O2 -Wall -Wextra -c -o "$OBJ/lua_cov.o" tests/fuzz/lua_cov.c

for h in fuzz_spec fuzz_gen fuzz_safetensors; do
  case $h in
    fuzz_safetensors) extra= ;;
    *) extra="$OBJ/lua_cov.o -Wl,--wrap=lua_newstate" ;;
  esac
  echo "  LD      $OUT/$h"
  # shellcheck disable=SC2086
  $CLANG $CPPFLAGS $CFLAGS -fsanitize=fuzzer -Itests/fuzz -o "$OUT/$h" "tests/fuzz/$h.c" $objs \
    $extra $LIBS
done
