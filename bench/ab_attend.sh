#!/bin/sh
# usage: bench/ab_attend.sh REV C NK V_OFFSET REPS HEADS [BIAS [CAUSAL]]
#
# Times this tree's attention primitive (build/libattnc.a: run make first)
# against revision REV's, interleaved in one process by bench/ab_attend.c,
# for the vectorised set this CPU uses (ATTNC_ISA caps it).  REV's
# prims_avx2.c and prims_avx512.c are compiled with REV's headers and
# their exported names prefixed ab_old_; the helpers they share with
# prims.c (row set-up, empty rows) come from this tree.
# Example: bench/ab_attend.sh HEAD~1 64 512 4 200 2
set -eu
[ $# -ge 6 ] || { sed -n '2,2p' "$0" | sed 's/^# //' >&2; exit 2; }
rev=$1; shift
top=$(cd "$(dirname "$0")/.." && pwd)
b=$top/build
[ -f "$b/libattnc.a" ] || { echo "ab_attend: build/libattnc.a is missing: run make" >&2; exit 1; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
git -C "$top" archive "$rev" runtime templates | tar -x -C "$d"
cc=${CC:-cc}
flags="-std=c99 -O3 -D_POSIX_C_SOURCE=200809L -I$d/runtime"
for f in avx2 avx512; do
  ren=""
  for s in linear linear_heads attend sigmoid_mul; do ren="$ren -Dattnc_prims_${s}_$f=ab_old_${s}_$f"; done
  isa_flags="-mavx2 -mfma"
  [ $f = avx512 ] && isa_flags="-mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma"
  # shellcheck disable=SC2086
  $cc $flags $isa_flags $ren -c -o "$d/old_$f.o" "$d/runtime/prims_$f.c"
done
$cc -std=c99 -O2 -D_POSIX_C_SOURCE=200809L -I"$top/runtime" -I/usr/include/lua5.4 -o "$d/ab_attend" \
  "$top/bench/ab_attend.c" "$d/old_avx2.o" "$d/old_avx512.o" "$b/libattnc.a" -llua5.4 -ltcc -ldl -lm -lpthread
"$d/ab_attend" "$@"
