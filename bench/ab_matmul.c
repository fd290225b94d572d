/* ab_matmul: this tree's matmul primitive (c = a b, or c += a b) against
 * another revision's, interleaved in one process (bench/ab_matmul.sh
 * builds it), as bench/ab_linear.c does for the linear primitive.  The
 * backward's products call matmul with a read along rows (a_cs = 1) or
 * down columns (a_rs = 1); CALLS products of the given shape run back to
 * back on consecutive blocks of a and c (as the backward's items do),
 * each against the same b.
 *
 *     ab_matmul M N K A_RS A_CS LDB ACC CALLS REPS
 *
 * Prints the best and median time of each and the ratios new / old (below
 * 1: the new code is faster). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prims.h"

#define AB_NAME "ab_matmul"
#include "ab_util.h"

/* the other revision's primitives, their symbols renamed by ab_build.sh */
void ab_old_matmul_avx2(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb, float *c,
                        long ldc, int acc);
void ab_old_matmul_avx512(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb, float *c,
                          long ldc, int acc);

int main(int argc, char **argv)
{
  const attnc_prims *P = attnc_prims_get();
  static double t[2][AB_MAX_REPS];
  long m, n, k, a_rs, a_cs, ldb, calls, a_size, c_size, i;
  int acc, reps, r, s;
  float *a, *b, *c[2];
  double diff = 0;
  char extra[64];
  void (*old_matmul)(long, long, long, const float *, long, long, const float *, long, float *, long, int) =
      strcmp(P->isa, "avx512") == 0 ? ab_old_matmul_avx512 : strcmp(P->isa, "avx2") == 0 ? ab_old_matmul_avx2 : NULL;
  if (argc != 10) {
    fprintf(stderr, "usage: ab_matmul M N K A_RS A_CS LDB ACC CALLS REPS\n");
    return 2;
  }
  m = arg(argv[1], 1, 1L << 14, "M"), n = arg(argv[2], 1, 1L << 14, "N"), k = arg(argv[3], 1, 1L << 16, "K");
  a_rs = arg(argv[4], 1, 1L << 16, "A_RS"), a_cs = arg(argv[5], 1, 1L << 16, "A_CS");
  ldb = arg(argv[6], n, 1L << 16, "LDB"), acc = (int)arg(argv[7], 0, 1, "ACC");
  calls = arg(argv[8], 1, 4096, "CALLS"), reps = (int)arg(argv[9], 1, AB_MAX_REPS, "REPS");
  if (!old_matmul) {
    fprintf(stderr, "ab_matmul: the %s primitives are not compared (only avx2 and avx512): ATTNC_ISA=avx512\n", P->isa);
    return 2;
  }
  /* a's elements: (m - 1) a_rs + (k - 1) a_cs + 1 a call; the calls'
   * blocks of a start m rows (a_rs = 1: m columns) apart */
  a_size = (m - 1) * a_rs + (k - 1) * a_cs + 1 + (calls - 1) * m * (a_rs > a_cs ? a_rs : 1);
  c_size = calls * m * n;
  a = floats(a_size, 1), b = floats(k * ldb, 2);
  c[0] = floats(c_size, 3), c[1] = floats(c_size, 3);
  for (r = -2; r < reps; r++) /* two warm-ups */
    for (s = 0; s < 2; s++) {
      const int w = AB_SIDE(r, s);
      const double t0 = now();
      for (i = 0; i < calls; i++) {
        const float *ai = a + i * m * (a_rs > a_cs ? a_rs : 1);
        if (w) P->matmul(m, n, k, ai, a_rs, a_cs, b, ldb, c[1] + i * m * n, n, acc);
        else old_matmul(m, n, k, ai, a_rs, a_cs, b, ldb, c[0] + i * m * n, n, acc);
      }
      if (r >= 0) t[w][r] = now() - t0;
    }
  if (!acc)
    for (i = 0; i < c_size; i++) { /* the two must agree: same sums, maybe in another order */
      const double d = c[0][i] > c[1][i] ? c[0][i] - c[1][i] : c[1][i] - c[0][i];
      if (d > diff) diff = d;
    }
  snprintf(extra, sizeof extra, acc ? "" : " (largest difference in c: %.3g)", diff);
  ab_report(t, reps, P->isa, 2.0 * (double)m * (double)n * (double)k * (double)calls, extra);
  return 0;
}
