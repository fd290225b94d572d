#!/bin/sh
# usage: bench/ab_decode.sh REV C NK KV_HEADS GROUP SPLITS REPS [SETS]
#
# Times this tree's attention primitive (build/libattnc.a: run make first)
# against revision REV's on decoding tiles, interleaved in one process by
# bench/ab_decode.c, for the vectorised set this CPU uses (ATTNC_ISA caps
# it).  Decode D's items: bench/ab_decode.sh HEAD~1 128 4096 8 4 8 100
set -eu
[ $# -ge 7 ] || { sed -n '2,2p' "$0" | sed 's/^# //' >&2; exit 2; }
# shellcheck source=bench/ab_build.sh
. "$(dirname "$0")/ab_build.sh"
rev=$1; shift
ab_run "$rev" ab_decode.c "$@"
