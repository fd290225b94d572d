/* ab_linear: this tree's linear primitive (y = x W^T + b, W packed as the
 * kernels pack it) against another revision's, interleaved in one process
 * (bench/ab_linear.sh builds it), as bench/ab_attend.c does for the
 * attention.  On a shared machine a GEMM streaming its weights from L3
 * moves with the neighbours: here each repetition runs the old and then
 * the new primitive on the same tensors.
 *
 *     ab_linear ROWS N_IN N_OUT REPS
 *
 * Prints the best and median time of each and the ratios new / old (below
 * 1: the new code is faster). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prims.h"

/* the other revision's primitives, their symbols renamed by ab_build.sh */
void ab_old_linear_avx2(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                        const float *b, float *y, long y_stride);
void ab_old_linear_avx512(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                          const float *b, float *y, long y_stride);

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static float *floats(long n, unsigned seed)
{
  void *p = NULL;
  float *f;
  long i;
  if (posix_memalign(&p, 64, sizeof(float) * (size_t)n) != 0) {
    fprintf(stderr, "ab_linear: out of memory\n");
    exit(1);
  }
  f = p;
  for (i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    f[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return f;
}

static long arg(const char *s, long lo, long hi, const char *what)
{
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == 0 || *end != 0 || v < lo || v > hi) {
    fprintf(stderr, "ab_linear: %s must be a whole number from %ld to %ld, got '%s'\n", what, lo, hi, s);
    exit(2);
  }
  return v;
}

static int cmp_double(const void *a, const void *b)
{
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
  const attnc_prims *P = attnc_prims_get();
  static double t[2][2000];
  long rows, n_in, n_out, i;
  int reps, r, w;
  float *x, *wt, *packed, *b, *y[2];
  double flops, diff = 0;
  void (*old_linear)(const float *, long, long, long, const float *, long, const float *, float *, long) =
      strcmp(P->isa, "avx512") == 0 ? ab_old_linear_avx512 : strcmp(P->isa, "avx2") == 0 ? ab_old_linear_avx2 : NULL;
  if (argc != 5) {
    fprintf(stderr, "usage: ab_linear ROWS N_IN N_OUT REPS\n");
    return 2;
  }
  rows = arg(argv[1], 1, 1L << 16, "ROWS"), n_in = arg(argv[2], 1, 1L << 14, "N_IN");
  n_out = arg(argv[3], 1, 1L << 14, "N_OUT"), reps = (int)arg(argv[4], 1, 2000, "REPS");
  if (!old_linear) {
    fprintf(stderr, "ab_linear: the %s primitives are not compared (only avx2 and avx512)\n", P->isa);
    return 2;
  }
  x = floats(rows * n_in, 1), wt = floats(n_out * n_in, 2), b = floats(n_out, 3);
  packed = floats(attnc_prims_pack_size(n_out, n_in), 4);
  y[0] = floats(rows * n_out, 5), y[1] = floats(rows * n_out, 6);
  attnc_prims_pack(wt, n_out, n_in, packed);
  for (r = -2; r < reps; r++) /* two warm-ups */
    for (w = 0; w < 2; w++) {
      const double a = now();
      if (w) P->linear(x, rows, n_in, n_in, packed, n_out, b, y[1], n_out);
      else old_linear(x, rows, n_in, n_in, packed, n_out, b, y[0], n_out);
      if (r >= 0) t[w][r] = now() - a;
    }
  for (i = 0; i < rows * n_out; i++) { /* the two must agree: same sums, maybe in another order */
    const double d = y[0][i] > y[1][i] ? y[0][i] - y[1][i] : y[1][i] - y[0][i];
    if (d > diff) diff = d;
  }
  flops = 2.0 * (double)rows * (double)n_in * (double)n_out;
  for (w = 0; w < 2; w++) {
    qsort(t[w], (size_t)reps, sizeof(double), cmp_double);
    printf("%s (%s): best %.4f ms (%.1f GFLOP/s), median %.4f ms\n", w ? "new" : "old", P->isa, t[w][0] * 1e3,
           flops / t[w][0] * 1e-9, t[w][reps / 2] * 1e3);
  }
  printf("new / old: best %.4f, median %.4f (largest difference in y: %.3g)\n", t[1][0] / t[0][0],
         t[1][reps / 2] / t[0][reps / 2], diff);
  return 0;
}
