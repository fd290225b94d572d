#!/bin/sh
# Build and run the AOT example from scratch, and prove the binary needs
# neither Lua nor tcc.
#
#   usage: examples/aot/check.sh PATH/TO/attnc OUTDIR
#
# Generates OUTDIR/gpt_decoder.c and .h from specs/gpt_decoder.attn, compiles
# them with examples/aot/main.c (cc -std=c99 -O2 -Wall -Wextra -Werror, only
# -lm), runs the program (its exact self-checks), then inspects the binary
# with ldd and nm.  Prints `aot example: OK` last; exits non-zero on any
# failure.  CC overrides the compiler (default cc).
set -eu

fail() {
  echo "aot example: FAILED: $*" >&2
  exit 1
}

[ $# -eq 2 ] || { echo "usage: $0 PATH/TO/attnc OUTDIR" >&2; exit 2; }
attnc=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
spec=$root/specs/gpt_decoder.attn
cc=${CC:-cc}

[ -x "$attnc" ] || fail "$attnc is not an executable (build it with: make build/attnc)"
[ -f "$spec" ] || fail "$spec is missing"

mkdir -p "$out" || fail "cannot create $out"
# from scratch: remove only what this script makes
rm -f "$out/gpt_decoder.c" "$out/gpt_decoder.h" "$out/aot_example" "$out/aot_example.log"

echo "== attnc gen @specs/gpt_decoder.attn -o $out"
name=$("$attnc" gen "@$spec" -o "$out" --print-name) || fail "attnc gen failed"
[ "$name" = gpt_decoder ] || fail "the spec's kernel is named '$name'; main.c includes gpt_decoder.h (set name=gpt_decoder)"
[ -f "$out/gpt_decoder.c" ] && [ -f "$out/gpt_decoder.h" ] || fail "attnc gen did not write $out/gpt_decoder.c and .h"

echo "== $cc -std=c99 -O2 -Wall -Wextra -Werror main.c gpt_decoder.c -lm"
"$cc" -std=c99 -O2 -Wall -Wextra -Werror -I"$out" -o "$out/aot_example" \
  "$here/main.c" "$out/gpt_decoder.c" -lm || fail "compiling the example failed"

echo "== $out/aot_example"
"$out/aot_example" >"$out/aot_example.log" 2>&1 || { cat "$out/aot_example.log"; fail "the example's self-checks failed"; }
cat "$out/aot_example.log"

sh "$here/standalone.sh" "$out/aot_example" || fail "the binary is not standalone"

echo "aot example: OK"
