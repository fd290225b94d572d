#!/bin/sh
# usage: bench/ab_linear.sh REV ROWS N_IN N_OUT REPS [COPIES]
#
# Times this tree's linear primitive (build/libattnc.a: run make first)
# against revision REV's, interleaved in one process by bench/ab_linear.c,
# for the vectorised set this CPU uses (ATTNC_ISA caps it); see
# bench/ab_build.sh for how REV's primitives are built.
# COPIES: cycle through that many copies of the weights (see ab_linear.c),
# so that they come from L3.
# Example: bench/ab_linear.sh HEAD 2048 512 1536 20
set -eu
[ $# -eq 5 ] || [ $# -eq 6 ] || { sed -n '2,2p' "$0" | sed 's/^# //' >&2; exit 2; }
# shellcheck source=bench/ab_build.sh
. "$(dirname "$0")/ab_build.sh"
rev=$1; shift
ab_run "$rev" ab_linear.c "$@"
