#!/bin/sh
# usage: bench/mca_exp.sh [REV]
#
# A static estimate, not a measurement: llvm-mca's cycles per vector for
# the softmax pass (load a score vector, subtract the max, exponentiate,
# store, add to the sum) with each exponential of the primitives, taken
# from this tree or from revision REV: exp256_neg and exp2_neg of
# prims_avx2.c on the znver3 model, exp512_neg and exp2_512_neg of
# prims_avx512.c on the icelake-server model (llvm-mca 14 has no AVX-512
# AMD model).  For a machine that lacks the ISA, this is the only number
# there is; how the estimates track measured times is in
# the git history of docs/performance.md.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
command -v llvm-mca >/dev/null || { echo "mca_exp: llvm-mca is missing (Debian: apt-get install llvm)" >&2; exit 1; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
rev=${1:-}
# the sources (with their headers: prims.h holds the polynomial's constants)
if [ -n "$rev" ]; then git -C "$top" archive "$rev" runtime templates | tar -x -C "$d"; else cp -r "$top/runtime" "$top/templates" "$d"; fi

# one(FILE, FUNCTION, VECTOR TYPE, PREFIX, ISA FLAGS, CPU)
one() {
  f=$1 fn=$2 ty=$3 pf=$4 flags=$5 cpu=$6
  if ! grep -q "^INLINE $ty $fn(" "$d/runtime/$f"; then echo "$fn: not in this revision"; return; fi
  {
    echo '#include <immintrin.h>'
    echo '#include "prims.h"'
    echo '#define INLINE static inline __attribute__((always_inline))'
    sed -n "/^INLINE $ty $fn(/,/^}/p" "$d/runtime/$f"
    cat <<EOF
void pass(float *st, long kt, long stride, $ty m, float *sum_out);
void pass(float *st, long kt, long stride, $ty m, float *sum_out)
{
  $ty sum = ${pf}_setzero_ps();
  long j;
  for (j = 0; j < kt; j++) {
    __asm__ volatile("# LLVM-MCA-BEGIN");
    const $ty p = $fn(${pf}_sub_ps(${pf}_load_ps(st + j * stride), m));
    ${pf}_store_ps(st + j * stride, p);
    sum = ${pf}_add_ps(sum, p);
    __asm__ volatile("# LLVM-MCA-END");
  }
  ${pf}_store_ps(sum_out, sum);
}
EOF
  } > "$d/$fn.c"
  # shellcheck disable=SC2086
  clang -std=c99 -O3 -D_POSIX_C_SOURCE=200809L -I"$d/runtime" $flags -S -o "$d/$fn.s" "$d/$fn.c"
  printf '%-14s %-15s ' "$fn" "$cpu"
  llvm-mca -mcpu="$cpu" "$d/$fn.s" 2>/dev/null | awk '
    /^Instructions:/ && !i { i = $2 } /^Iterations:/ && !n { n = $2 }
    /^Block RThroughput:/ && !t { t = $3 }
    END { printf "%s instructions, %s cycles per vector (block reciprocal throughput)\n", i / n, t }'
}

one prims_avx2.c exp256_neg __m256 _mm256 "-mavx2 -mfma" znver3
one prims_avx2.c exp2_neg __m256 _mm256 "-mavx2 -mfma" znver3
one prims_avx512.c exp512_neg __m512 _mm512 "-mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma" icelake-server
one prims_avx512.c exp2_512_neg __m512 _mm512 "-mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma" icelake-server
