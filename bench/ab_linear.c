/* ab_linear: this tree's linear primitive (y = x W^T + b, W packed as the
 * kernels pack it) against another revision's, interleaved in one process
 * (bench/ab_linear.sh builds it), as bench/ab_attend.c does for the
 * attention.  On a shared machine a GEMM streaming its weights from L3
 * moves with the neighbours: here each repetition runs both primitives
 * on the same inputs, one right after the other (which goes first swaps:
 * AB_SIDE), each into its own output.
 *
 *     ab_linear ROWS N_IN N_OUT REPS [COPIES]
 *
 * With COPIES, each call takes the next of that many copies of the packed
 * weights: with more copies than L2 holds, the weights come from L3, as
 * a projection's do in a kernel whose weights outgrow L2.
 *
 * Prints the best and median time of each and the ratios new / old (below
 * 1: the new code is faster). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prims.h"

#define AB_NAME "ab_linear"
#include "ab_util.h"

/* the other revision's primitives, their symbols renamed by ab_build.sh */
void ab_old_linear_avx2(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                        const float *b, float *y, long y_stride);
void ab_old_linear_avx512(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                          const float *b, float *y, long y_stride);

int main(int argc, char **argv)
{
  const attnc_prims *P = attnc_prims_get();
  static double t[2][AB_MAX_REPS];
  long rows, n_in, n_out, i;
  int reps, r, n;
  long copies = 1, psize;
  float *x, *wt, *packed, *b, *y[2];
  double flops, diff = 0;
  char extra[64];
  void (*old_linear)(const float *, long, long, long, const float *, long, const float *, float *, long) =
      strcmp(P->isa, "avx512") == 0 ? ab_old_linear_avx512 : strcmp(P->isa, "avx2") == 0 ? ab_old_linear_avx2 : NULL;
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: ab_linear ROWS N_IN N_OUT REPS [COPIES]\n");
    return 2;
  }
  rows = arg(argv[1], 1, 1L << 16, "ROWS"), n_in = arg(argv[2], 1, 1L << 14, "N_IN");
  n_out = arg(argv[3], 1, 1L << 14, "N_OUT"), reps = (int)arg(argv[4], 1, AB_MAX_REPS, "REPS");
  if (argc == 6) copies = arg(argv[5], 1, 4096, "COPIES");
  if (!old_linear) {
    fprintf(stderr, "ab_linear: the %s primitives are not compared (only avx2 and avx512)\n", P->isa);
    return 2;
  }
  x = floats(rows * n_in, 1), wt = floats(n_out * n_in, 2), b = floats(n_out, 3);
  psize = (attnc_prims_pack_size(n_out, n_in) + 15) / 16 * 16; /* copies on 64-byte boundaries */
  packed = floats(psize * copies, 4);
  y[0] = floats(rows * n_out, 5), y[1] = floats(rows * n_out, 6);
  for (i = 0; i < copies; i++) attnc_prims_pack(wt, n_out, n_in, packed + i * psize);
  for (r = -2; r < reps; r++) /* two warm-ups */
    for (n = 0; n < 2; n++) {
      const int w = AB_SIDE(r, n);
      const float *pk = packed + (2 * (r + 2) + n) % copies * psize;
      const double a = now();
      if (w) P->linear(x, rows, n_in, n_in, pk, n_out, b, y[1], n_out);
      else old_linear(x, rows, n_in, n_in, pk, n_out, b, y[0], n_out);
      if (r >= 0) t[w][r] = now() - a;
    }
  for (i = 0; i < rows * n_out; i++) { /* the two must agree: same sums, maybe in another order */
    const double d = y[0][i] > y[1][i] ? y[0][i] - y[1][i] : y[1][i] - y[0][i];
    if (d > diff) diff = d;
  }
  flops = 2.0 * (double)rows * (double)n_in * (double)n_out;
  snprintf(extra, sizeof extra, " (largest difference in y: %.3g)", diff);
  ab_report(t, reps, P->isa, flops, extra);
  return 0;
}
