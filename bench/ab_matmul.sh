#!/bin/sh
# usage: bench/ab_matmul.sh REV M N K A_RS A_CS LDB ACC CALLS REPS
#
# Times this tree's matmul primitive (build/libattnc.a: run make first)
# against revision REV's, interleaved in one process by bench/ab_matmul.c,
# for the vectorised set this CPU uses (ATTNC_ISA caps it; the dot-product
# sets report their own name: run with ATTNC_ISA=avx512 or avx2); see
# bench/ab_build.sh for how REV's primitives are built.
# Examples, the backward's shapes for a 256-wide projection:
#   dx rows:  bench/ab_matmul.sh HEAD 64 256 256 256 1 256 1 32 50
#   dW chunk: bench/ab_matmul.sh HEAD 128 256 128 1 256 256 1 16 50
set -eu
[ $# -eq 10 ] || { sed -n '2,2p' "$0" | sed 's/^# //' >&2; exit 2; }
# shellcheck source=bench/ab_build.sh
. "$(dirname "$0")/ab_build.sh"
rev=$1; shift
ab_run "$rev" ab_matmul.c "$@"
