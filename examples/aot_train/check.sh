#!/bin/sh
# Build and run the AOT training example from scratch, and prove the binary
# needs neither Lua nor tcc.
#
#   usage: examples/aot_train/check.sh PATH/TO/attnc OUTDIR
#
# Generates OUTDIR/layer_bf16.{c,h} and OUTDIR/layer_f64.{c,h} from the spec
# files beside this script, compiles them with main.c (cc -std=c99 -O2
# -Wall -Wextra -Werror -pedantic, only -lm and -lpthread), runs the program
# (its checks of the gradients), then inspects the binary with ldd and nm.
# Prints `aot training example: OK` last; exits non-zero on any failure.
# CC overrides the compiler (default cc).
set -eu

fail() {
  echo "aot training example: FAILED: $*" >&2
  exit 1
}

[ $# -eq 2 ] || { echo "usage: $0 PATH/TO/attnc OUTDIR" >&2; exit 2; }
attnc=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}

[ -x "$attnc" ] || fail "$attnc is not an executable (build it with: make build/attnc)"
mkdir -p "$out" || fail "cannot create $out"
rm -f "$out"/layer_bf16.* "$out"/layer_f64.* "$out/aot_train" "$out/aot_train.log"

for k in layer_bf16 layer_f64; do
  echo "== attnc gen @examples/aot_train/$k.attn -o $out"
  name=$("$attnc" gen "@$here/$k.attn" -o "$out" --print-name) || fail "attnc gen $k.attn failed"
  [ "$name" = "$k" ] || fail "$k.attn names its kernel '$name'; main.c includes $k.h"
done

echo "== $cc -std=c99 -O2 -Wall -Wextra -Werror -pedantic main.c layer_bf16.c layer_f64.c -lm -lpthread"
"$cc" -std=c99 -O2 -Wall -Wextra -Werror -pedantic -I"$out" -o "$out/aot_train" \
  "$here/main.c" "$out/layer_bf16.c" "$out/layer_f64.c" -lm -lpthread || fail "compiling the example failed"

echo "== $out/aot_train"
"$out/aot_train" >"$out/aot_train.log" 2>&1 || { cat "$out/aot_train.log"; fail "the example's checks failed"; }
cat "$out/aot_train.log"

sh "$here/../aot/standalone.sh" "$out/aot_train" || fail "the binary is not standalone"
echo "aot training example: OK"
