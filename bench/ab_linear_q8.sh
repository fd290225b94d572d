#!/bin/sh
# usage: bench/ab_linear_q8.sh REV ROWS N_IN N_OUT REPS [HEAD_W [COPIES]]
#
# Times this tree's AVX512-VNNI linear_q8 (build/libattnc.a: run make
# first) against revision REV's, interleaved in one process by
# bench/ab_linear_q8.c, on one thread; see bench/ab_build.sh for how REV's
# primitives are built.  HEAD_W: the outputs split into heads that wide
# (this tree's linear_heads_q8 against REV's linear_q8 once per head).
# COPIES: cycle through that many copies of x and y (see ab_linear_q8.c).
# Example: bench/ab_linear_q8.sh HEAD 96 512 512 200 64
set -eu
[ $# -ge 5 ] && [ $# -le 7 ] || { sed -n '2,2p' "$0" | sed 's/^# //' >&2; exit 2; }
# shellcheck source=bench/ab_build.sh
. "$(dirname "$0")/ab_build.sh"
rev=$1; shift
ab_run "$rev" ab_linear_q8.c "$@"
