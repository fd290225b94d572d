/* Helpers of the interleaved A/B harnesses (bench/ab_attend.c,
 * bench/ab_linear.c): each defines AB_NAME, its program name for
 * messages, before including this. */
#ifndef AB_UTIL_H
#define AB_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prims.h"

#define AB_MAX_REPS 2000

/* Which side runs n-th (n = 0, 1) in repetition r: 0 the old, 1 the new.
 * The order swaps every repetition, so that neither side always runs in
 * the cache state the other leaves (with the old one always first, a
 * 256x256x256 linear read 4-9% slower as new than as old, the same code
 * on both sides). */
#define AB_SIDE(r, n) ((((r) & 1) ? 1 - (n) : (n)))

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* n floats in [-0.5, 0.5) from seed, 64-byte aligned, with 64 more past
 * the end (room for an offset start). */
static float *floats(long n, unsigned seed)
{
  void *p = NULL;
  float *f;
  long i;
  if (posix_memalign(&p, 64, sizeof(float) * (size_t)(n + 64)) != 0) {
    fprintf(stderr, AB_NAME ": out of memory\n");
    exit(1);
  }
  f = p;
  for (i = 0; i < n + 64; i++) {
    seed = seed * 1664525u + 1013904223u;
    f[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return f;
}

/* The other revision's attention primitives, their symbols renamed by
 * ab_build.sh (every harness links them). */
void ab_old_attend_avx2(const attnc_tile *t);
void ab_old_attend_avx512(const attnc_tile *t);
typedef void (*ab_attend_fn)(const attnc_tile *t);
void ab_old_attend_kv_avx2(const attnc_tile *t, int kv_type, const void *k, const float *k_scale, const void *v,
                           const float *v_scale);
void ab_old_attend_kv_avx512(const attnc_tile *t, int kv_type, const void *k, const float *k_scale, const void *v,
                             const float *v_scale);
typedef void (*ab_attend_kv_fn)(const attnc_tile *t, int kv_type, const void *k, const float *k_scale, const void *v,
                                const float *v_scale);

/* The other revision's attention for the set P uses; exits with 2 when
 * that set is neither avx2 nor avx512. */
static inline ab_attend_fn ab_old_attend(const attnc_prims *P)
{
  if (strcmp(P->isa, "avx512") == 0) return ab_old_attend_avx512;
  if (strcmp(P->isa, "avx2") == 0) return ab_old_attend_avx2;
  fprintf(stderr, AB_NAME ": the %s primitives are not compared (only avx2 and avx512)\n", P->isa);
  exit(2);
}

/* The other revision's attend_kv for the set P uses (as ab_old_attend). */
static inline ab_attend_kv_fn ab_old_attend_kv(const attnc_prims *P)
{
  return strcmp(P->isa, "avx512") == 0 ? ab_old_attend_kv_avx512 : ab_old_attend_kv_avx2;
}

static long arg(const char *s, long lo, long hi, const char *what)
{
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == 0 || *end != 0 || v < lo || v > hi) {
    fprintf(stderr, AB_NAME ": %s must be a whole number from %ld to %ld, got '%s'\n", what, lo, hi, s);
    exit(2);
  }
  return v;
}

static int cmp_double(const void *a, const void *b)
{
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sorts t[0] (old) and t[1] (new), reps times each, and prints the best
 * and median of each and the ratios new / old; `extra` ends that line. */
static void ab_report(double t[2][AB_MAX_REPS], int reps, const char *isa, double flops, const char *extra)
{
  int w;
  for (w = 0; w < 2; w++) {
    qsort(t[w], (size_t)reps, sizeof(double), cmp_double);
    printf("%s (%s): best %.4f ms (%.1f GFLOP/s), median %.4f ms\n", w ? "new" : "old", isa, t[w][0] * 1e3,
           flops / t[w][0] * 1e-9, t[w][reps / 2] * 1e3);
  }
  printf("new / old: best %.4f, median %.4f%s\n", t[1][0] / t[0][0], t[1][reps / 2] / t[0][reps / 2], extra);
}

#endif
