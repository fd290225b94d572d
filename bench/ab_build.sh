# shellcheck shell=sh
# Sourced by bench/ab_attend.sh and bench/ab_linear.sh:
#   ab_run REV HARNESS.c ARGS...  builds HARNESS against REV (below) in a
#                                 temporary folder and runs it with ARGS
#   ab_build REV HARNESS.c OUT
# compiles revision REV's prims_avx2.c, prims_avx512.c (and prims_vnni.c) with REV's
# headers, the functions they define renamed from attnc_prims_X to ab_old_X
# (the helpers they share with prims.c come from this tree), and links them
# with bench/HARNESS.c and this tree's build/libattnc.a into OUT.
ab_build() {
  ab_rev=$1 ab_harness=$2 ab_out=$3
  ab_top=$(cd "$(dirname "$0")/.." && pwd)
  [ -f "$ab_top/build/libattnc.a" ] || { echo "$(basename "$0"): build/libattnc.a is missing: run make" >&2; exit 1; }
  ab_d=$(dirname "$ab_out")
  mkdir -p "$ab_d/rev"
  git -C "$ab_top" archive "$ab_rev" runtime templates | tar -x -C "$ab_d/rev"
  ab_cc=${CC:-cc}
  # the flags the Makefile builds this tree's AVX2 and AVX-512
  # primitives with, so that the two sides differ in their sources only
  ab_avx2=$(sed -n 's/^AVX2_FLAGS := //p' "$ab_top/Makefile")
  [ -n "$ab_avx2" ] || { echo "$(basename "$0"): no AVX2_FLAGS line in $ab_top/Makefile" >&2; exit 1; }
  ab_avx512=$(sed -n 's/^AVX512_FLAGS := //p' "$ab_top/Makefile")
  [ -n "$ab_avx512" ] || { echo "$(basename "$0"): no AVX512_FLAGS line in $ab_top/Makefile" >&2; exit 1; }
  for ab_f in avx2 avx512; do
    ab_isa=$ab_avx2
    [ $ab_f = avx512 ] && ab_isa=$ab_avx512
    # shellcheck disable=SC2086
    $ab_cc -std=c99 -O3 -D_POSIX_C_SOURCE=200809L -I"$ab_d/rev/runtime" $ab_isa -c -o "$ab_d/old_$ab_f.o" "$ab_d/rev/runtime/prims_$ab_f.c"
    # every function the file defines renamed attnc_prims_X -> ab_old_X (so
    # that it links beside this tree's copy, whatever REV added to the file)
    ab_ren=$(nm -g --defined-only "$ab_d/old_$ab_f.o" | awk '$3 ~ /^attnc_prims_/ { n = $3; sub(/^attnc_prims_/, "ab_old_", n); printf " --redefine-sym %s=%s", $3, n }')
    # shellcheck disable=SC2086
    objcopy $ab_ren "$ab_d/old_$ab_f.o"
  done
  # prims_vnni.c (per-function target attributes: the Makefile's DP_OBJ flags), renamed
  # the same way, for ab_linear_q8; a revision without it links none
  ab_vnni=
  if [ -f "$ab_d/rev/runtime/prims_vnni.c" ]; then
    ab_dp=$(sed -n 's/^$(DP_OBJ): CFLAGS += //p' "$ab_top/Makefile")
    [ -n "$ab_dp" ] || { echo "$(basename "$0"): no '$(DP_OBJ): CFLAGS +=' line in $ab_top/Makefile" >&2; exit 1; }
    # shellcheck disable=SC2086
    $ab_cc -std=c99 $ab_dp -D_POSIX_C_SOURCE=200809L -I"$ab_d/rev/runtime" -c -o "$ab_d/old_vnni.o" "$ab_d/rev/runtime/prims_vnni.c"
    ab_ren=$(nm -g --defined-only "$ab_d/old_vnni.o" | awk '$3 ~ /^attnc_prims_/ { n = $3; sub(/^attnc_prims_/, "ab_old_", n); printf " --redefine-sym %s=%s", $3, n }')
    # shellcheck disable=SC2086
    objcopy $ab_ren "$ab_d/old_vnni.o"
    ab_vnni=$ab_d/old_vnni.o
  fi
  $ab_cc -std=c99 -O2 -D_POSIX_C_SOURCE=200809L -I"$ab_top/runtime" -I/usr/include/lua5.4 -o "$ab_out" \
    "$ab_top/bench/$ab_harness" "$ab_d/old_avx2.o" "$ab_d/old_avx512.o" $ab_vnni "$ab_top/build/libattnc.a" -llua5.4 -ltcc -ldl -lm -lpthread
}

ab_run() {
  ab_tmp=$(mktemp -d); trap 'rm -rf "$ab_tmp"' EXIT
  ab_build "$1" "$2" "$ab_tmp/harness"
  shift 2
  "$ab_tmp/harness" "$@"
}
