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
# shellcheck source=bench/ab_build.sh
. "$(dirname "$0")/ab_build.sh"
rev=$1; shift
ab_run "$rev" ab_attend.c "$@"
