#!/bin/sh
# Install attnc into a temporary prefix and use it the way a user would:
# pkg-config, a C program outside the source tree, no ATTNC_SRC_DIR.
#
#   usage: tests/install_check.sh        (or: make install-check)
#
# 1. `make install DESTDIR=STAGE PREFIX=/opt/attnc` stages the files under
#    STAGE and writes prefix=/opt/attnc into attnc.pc.
# 2. `make install PREFIX=TMP/prefix` installs for real; the layout is
#    checked: bin/attnc, lib/libattnc.{a,so}, include/attnc.h,
#    lib/pkgconfig/attnc.pc.
# 3. A program in TMP/app is built with `pkg-config --cflags --libs attnc`
#    (PKG_CONFIG_PATH=TMP/prefix/lib/pkgconfig) against libattnc.so and run
#    with LD_LIBRARY_PATH, then built with `pkg-config --static` against
#    libattnc.a (-l:libattnc.a) and run with no library path.  The program
#    compiles a spec, reads attnc_source, runs the kernel once, releases it,
#    and gets ATTNC_ESPEC with "did you mean 'heads'" for a misspelled key.
# 4. The installed bin/attnc runs `gen` from TMP.
# 5. The installed Python package (lib/python3.X/dist-packages/attnc) is
#    imported from TMP with PYTHONPATH at that folder alone and no
#    ATTNC_LIB: it must load the installed libattnc.so, compile, run, and
#    raise attnc.Error with the position of a misspelled key.  Skipped,
#    saying so, when PYTHON3 (default /usr/bin/python3) has no numpy.
#
# MAKE overrides make, CC the compiler (default cc).  As root, a missing
# pkg-config is installed with apt-get (Debian package pkg-config).  Prints
# `install check: OK` last; exits non-zero on any failure.
set -eu

fail() {
  echo "install check: FAILED: $*" >&2
  exit 1
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
make_cmd=${MAKE:-make}
cc=${CC:-cc}
python3=${PYTHON3:-/usr/bin/python3}

if ! command -v pkg-config >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install check: installing pkg-config"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pkg-config >/dev/null; }; then
      fail "apt-get install pkg-config failed"
    fi
  else
    fail "pkg-config not found; run: sudo apt-get install -y pkg-config"
  fi
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/attnc-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix
app=$tmp/app
mkdir -p "$app"

# A clean environment for what follows: no development overrides.
unset ATTNC_SRC_DIR ATTNC_DUMP_DIR ATTNC_BACKEND ATTNC_CC_FLAGS ATTNC_LIB PYTHONPATH 2>/dev/null || true
ATTNC_CACHE_DIR=$tmp/cache
export ATTNC_CACHE_DIR

echo "== make install DESTDIR=$tmp/stage PREFIX=/opt/attnc"
"$make_cmd" -s -C "$root" install DESTDIR="$tmp/stage" PREFIX=/opt/attnc >"$tmp/stage.log" 2>&1 ||
  { cat "$tmp/stage.log"; fail "make install with DESTDIR failed"; }
for f in bin/attnc lib/libattnc.a lib/libattnc.so include/attnc.h lib/pkgconfig/attnc.pc; do
  [ -f "$tmp/stage/opt/attnc/$f" ] || fail "DESTDIR install did not write /opt/attnc/$f under $tmp/stage"
done
grep -qx 'prefix=/opt/attnc' "$tmp/stage/opt/attnc/lib/pkgconfig/attnc.pc" ||
  fail "the staged attnc.pc does not say prefix=/opt/attnc (DESTDIR must not leak into it)"
staged_py=$(cd "$tmp/stage/opt/attnc" && ls -d lib/python3*/dist-packages/attnc 2>/dev/null | head -n 1)
[ -n "$staged_py" ] && [ -f "$tmp/stage/opt/attnc/$staged_py/__init__.py" ] ||
  fail "DESTDIR install did not write the Python package to /opt/attnc/lib/python3*/dist-packages/attnc"
grep -qx 'LIBRARY = "/opt/attnc/lib/libattnc.so"' "$tmp/stage/opt/attnc/$staged_py/_libpath.py" ||
  fail "the staged $staged_py/_libpath.py does not name /opt/attnc/lib/libattnc.so"
echo "  staged under DESTDIR; attnc.pc has prefix=/opt/attnc; $staged_py/_libpath.py names /opt/attnc/lib/libattnc.so"

echo "== make install PREFIX=$prefix"
"$make_cmd" -s -C "$root" install PREFIX="$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "make install failed"; }
for f in bin/attnc lib/libattnc.a lib/libattnc.so include/attnc.h lib/pkgconfig/attnc.pc; do
  [ -f "$prefix/$f" ] || fail "make install did not write $f"
  echo "  $f"
done
[ -x "$prefix/bin/attnc" ] || fail "bin/attnc is not executable"

PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
pkg-config --exists attnc || fail "pkg-config cannot find attnc in $PKG_CONFIG_PATH"
[ "$(pkg-config --variable=prefix attnc)" = "$prefix" ] || fail "attnc.pc has the wrong prefix: $(pkg-config --variable=prefix attnc)"
want_version=$(sed -n 's/^#define ATTNC_VERSION "\(.*\)"/\1/p' "$root/runtime/attnc.h")
[ "$(pkg-config --modversion attnc)" = "$want_version" ] || fail "attnc.pc says version $(pkg-config --modversion attnc), attnc.h $want_version"
cflags=$(pkg-config --cflags attnc)
libs=$(pkg-config --libs attnc)
slibs=$(pkg-config --static --libs attnc)
echo "  pkg-config --cflags attnc:          $cflags"
echo "  pkg-config --libs attnc:            $libs"
echo "  pkg-config --static --libs attnc:   $slibs"
for l in -lattnc -llua5.4 -ltcc -ldl -lm -lpthread; do
  case " $slibs " in *" $l "*) ;; *) fail "pkg-config --static --libs attnc lacks $l" ;; esac
done
case " $libs " in
  *" -ltcc "* | *" -llua5.4 "*) fail "pkg-config --libs (shared) should not name -ltcc or -llua5.4" ;;
esac

cat >"$app/app.c" <<'EOF'
/* A user's program: only <attnc.h> and what pkg-config says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnc.h>

int main(void)
{
  attnc_error err;
  attnc_kernel *k;
  attnc_bindings *b;
  const char *src;
  float x[1 * 3 * 8], w[8 * 8], bias[8], out_data[1 * 3 * 8];
  attnc_tensor tx = { ATTNC_F32, 3, { 1, 3, 8 }, x };
  attnc_tensor tw = { ATTNC_F32, 2, { 8, 8 }, w };
  attnc_tensor tb = { ATTNC_F32, 1, { 8 }, bias };
  attnc_tensor out;
  const char *weights[] = { "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight" };
  const char *biases[] = { "q_proj.bias", "k_proj.bias", "v_proj.bias" };
  int i, ok = 1;

  printf("attnc %s, %s primitives\n", ATTNC_VERSION, attnc_isa());
  k = attnc_compile("mha x=B,S,8 heads=2 causal", NULL, &err);
  if (!k) {
    printf("compile failed: %s: %s\n", err.where, err.message);
    return 1;
  }
  src = attnc_source(k);
  printf("name: %s\n", attnc_name(k));
  printf("canonical: %s\n", attnc_canonical(k));
  printf("source: %zu bytes, has %s_run: %s\n", strlen(src), attnc_name(k),
         strstr(src, "_run(const attnc_args *args)") ? "yes" : "no");

  /* Zero projections: every output row is the output bias. */
  memset(x, 0, sizeof x);
  memset(w, 0, sizeof w);
  for (i = 0; i < 24; i++) x[i] = (float)i / 10.0f;
  for (i = 0; i < 8; i++) bias[i] = (float)(i + 1) / 4.0f;
  b = attnc_bindings_new(k);
  if (!b) return 1;
  if (attnc_bind(b, "x", &tx, &err) != ATTNC_OK) goto bad;
  for (i = 0; i < 4; i++)
    if (attnc_bind(b, weights[i], &tw, &err) != ATTNC_OK) goto bad;
  for (i = 0; i < 3; i++)
    if (attnc_bind(b, biases[i], &tb, &err) != ATTNC_OK) goto bad;
  if (attnc_bind(b, "o_proj.bias", &tb, &err) != ATTNC_OK) goto bad;
  if (attnc_output_shape(b, &out, &err) != ATTNC_OK) goto bad;
  out.data = out_data;
  if (attnc_run(b, &out, &err) != ATTNC_OK) goto bad;
  for (i = 0; i < 24; i++) ok &= out_data[i] == bias[i % 8];
  printf("run: out (%lld, %lld, %lld) == output bias: %s\n", (long long)out.shape[0], (long long)out.shape[1],
         (long long)out.shape[2], ok ? "yes" : "no");
  attnc_bindings_free(b);
  attnc_release(k);

  k = attnc_compile("mha x=B,S,8 haeds=2", NULL, &err);
  if (k) {
    printf("misspelled key: compiled?!\n");
    attnc_release(k);
    return 1;
  }
  printf("misspelled key: %s (%s) at %s: %s\n", err.code == ATTNC_ESPEC ? "ATTNC_ESPEC" : "another status",
         attnc_strerror(err.code), err.where, err.message);
  return ok && err.code == ATTNC_ESPEC ? 0 : 1;
bad:
  printf("error: %s\n", err.message);
  return 1;
}
EOF

check_output() { # $1: log file
  grep -q '^source: [0-9]* bytes, has attnc_[0-9a-f]*_run: yes$' "$1" || fail "attnc_source did not return the kernel's C"
  grep -q '^run: out (1, 3, 8) == output bias: yes$' "$1" || fail "the kernel did not compute the expected output"
  grep -q "^misspelled key: ATTNC_ESPEC (invalid spec) at spec:1:[0-9]*: unknown key 'haeds' (did you mean 'heads'?)\$" "$1" ||
    fail "the misspelled key did not give ATTNC_ESPEC with \"did you mean 'heads'\""
}

cd "$app" # outside the source tree from here on

echo "== $cc app.c \$(pkg-config --cflags --libs attnc)   (libattnc.so)"
# shellcheck disable=SC2086
"$cc" -std=c99 -Wall -Wextra -Werror -o app_shared app.c $cflags $libs || fail "building against libattnc.so failed"
needed=$(readelf -d app_shared 2>/dev/null | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "  NEEDED: $needed"
case " $needed " in *" libattnc.so "*) ;; *) fail "app_shared does not link libattnc.so" ;; esac
LD_LIBRARY_PATH=$prefix/lib ./app_shared >shared.log 2>&1 || { cat shared.log; fail "app_shared failed"; }
sed 's/^/  /' shared.log
LD_LIBRARY_PATH=$prefix/lib ldd ./app_shared | grep -q "libattnc.so => $prefix/lib/libattnc.so" ||
  fail "app_shared did not load $prefix/lib/libattnc.so"
check_output shared.log

echo "== $cc app.c \$(pkg-config --static --cflags --libs attnc), -lattnc -> -l:libattnc.a   (libattnc.a)"
slibs_a=$(echo " $slibs " | sed 's/ -lattnc / -l:libattnc.a /')
scflags=$(pkg-config --static --cflags attnc)
# shellcheck disable=SC2086
"$cc" -std=c99 -Wall -Wextra -Werror -o app_static app.c $scflags $slibs_a ||
  fail "building against libattnc.a with pkg-config --static failed"
needed=$(readelf -d app_static 2>/dev/null | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "  NEEDED: $needed"
case " $needed " in *" libattnc.so "*) fail "app_static still needs libattnc.so" ;; esac
./app_static >static.log 2>&1 || { cat static.log; fail "app_static failed"; }
sed 's/^/  /' static.log
check_output static.log

echo "== $prefix/bin/attnc gen (from $app)"
"$prefix/bin/attnc" --version
name=$("$prefix/bin/attnc" gen "mha x=B,S,64 heads=4 name=k1" -o "$app/gen" --print-name) || fail "installed attnc gen failed"
if [ "$name" != k1 ] || [ ! -f "$app/gen/k1.c" ] || [ ! -f "$app/gen/k1.h" ]; then
  fail "installed attnc gen did not write k1.c and k1.h"
fi
"$cc" -std=c99 -Wall -Wextra -Werror -pedantic -c -o "$app/gen/k1.o" "$app/gen/k1.c" || fail "the generated kernel does not compile"
echo "  wrote and compiled gen/k1.c"

echo "== import attnc from $prefix (Python)"
py_pkg=$(cd "$prefix" && ls -d lib/python3*/dist-packages/attnc 2>/dev/null | head -n 1)
[ -n "$py_pkg" ] && [ -f "$prefix/$py_pkg/__init__.py" ] && [ -f "$prefix/$py_pkg/_libpath.py" ] ||
  fail "make install did not write lib/python3*/dist-packages/attnc/{__init__,_libpath}.py"
echo "  $py_pkg"
if [ -x "$python3" ] && "$python3" -c 'import numpy' 2>/dev/null; then
  PYTHONPATH=$prefix/${py_pkg%/attnc} PYTHONDONTWRITEBYTECODE=1 PREFIX_DIR=$prefix "$python3" - >py.log 2>&1 <<'EOF' ||
import os
import numpy as np
import attnc

prefix = os.environ["PREFIX_DIR"]
print("module:", attnc.__file__)
print("library:", attnc.library_path())
assert attnc.__file__.startswith(prefix + "/"), "imported the wrong attnc"
assert attnc.library_path() == prefix + "/lib/libattnc.so", "loaded the wrong libattnc.so"
k = attnc.compile("mha x=B,S,8 heads=2 causal")
t = {"x": np.arange(24, dtype=np.float32).reshape(1, 3, 8) / 10}
for p in ("q", "k", "v", "o"):
    t[p + "_proj.weight"] = np.zeros((8, 8), np.float32)
    t[p + "_proj.bias"] = np.arange(1, 9, dtype=np.float32) / 4
out = k.run(t)["out"]
print("run: out %s == output bias: %s" % (out.shape, "yes" if (out == t["o_proj.bias"]).all() else "no"))
try:
    attnc.compile("mha x=B,S,8 haeds=2")
except attnc.Error as e:
    print("misspelled key: %s %s" % (e.status, e))
EOF
    { cat py.log; fail "the installed Python package did not import, compile or run"; }
  sed 's/^/  /' py.log
  grep -q '^run: out (1, 3, 8) == output bias: yes$' py.log || fail "the Python run did not compute the expected output"
  grep -q "^misspelled key: ATTNC_ESPEC spec:1:13: error: unknown key 'haeds' (did you mean 'heads'?)\$" py.log ||
    fail "the misspelled key did not raise attnc.Error with its position"
else
  echo "  skipped: no $python3 with numpy; run: sudo apt-get install -y python3 python3-numpy"
fi

echo "install check: OK"
