/* fma_peak: the FP32 FMA peak of this machine, measured, for the
 * "percent of peak" column of bench/run.sh.
 *
 *     build/fma_peak [THREADS]       prints {"threads": T, "gflops": G, ...}
 *
 * Each thread runs independent chains of FMAs on registers (no loads, no
 * stores), enough to keep two FMA pipes full whatever their latency; a
 * single chain would only measure the latency.  24 chains with AVX-512's
 * 32 registers, 12 with AVX2's 16: more chains than registers spill to
 * memory and measure the stores.  The widest vector the CPU has
 * (AVX-512, else AVX2) is chosen at run time.  Five trials of about
 * 0.2 s each; the best one counts, so the peak errs high and a fraction of
 * it errs low.  GFLOP/s counts an FMA as two FLOPs per lane. */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 24   /* AVX-512: 24 of 32 registers */
#define CHAINS2 12  /* AVX2: 12 of 16 registers */
#define ITERS 4000000L

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ITERS rounds of CHAINS FMAs; returns a sum so nothing is optimised away.
 * Each chain starts from its own value, so no two chains are the same
 * computation (a compiler may merge identical chains). */
__attribute__((target("avx512f"))) static float run_avx512(void)
{
  __m512 a[CHAINS], b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f), s;
  long k;
  int i;
  for (i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps(1.0f + (float)i * 1e-3f);
  for (k = 0; k < ITERS; k++) {
#pragma GCC unroll 24
    for (i = 0; i < CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  s = a[0];
  for (i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float run_avx2(void)
{
  __m256 a[CHAINS2], b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f), s;
  float out[8], sum = 0;
  long k;
  int i;
  for (i = 0; i < CHAINS2; i++) a[i] = _mm256_set1_ps(1.0f + (float)i * 1e-3f);
  for (k = 0; k < ITERS; k++) {
#pragma GCC unroll 12
    for (i = 0; i < CHAINS2; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
  }
  s = a[0];
  for (i = 1; i < CHAINS2; i++) s = _mm256_add_ps(s, a[i]);
  _mm256_storeu_ps(out, s);
  for (i = 0; i < 8; i++) sum += out[i];
  return sum;
}

static int lanes;
static volatile float sink;

static void *worker(void *arg)
{
  double *seconds = arg, t0 = now();
  sink = lanes == 16 ? run_avx512() : run_avx2();
  *seconds = now() - t0;
  return NULL;
}

int main(int argc, char **argv)
{
  int threads = argc > 1 ? atoi(argv[1]) : 1, trial, i;
  double best = 0, secs[256];
  pthread_t tid[256];
  if (threads < 1 || threads > 256) {
    fprintf(stderr, "usage: fma_peak [THREADS 1..256]\n");
    return 2;
  }
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) lanes = 16;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lanes = 8;
  else {
    fprintf(stderr, "fma_peak: this CPU has neither AVX-512 nor AVX2 with FMA\n");
    return 1;
  }
  for (trial = 0; trial < 5; trial++) {
    double slowest = 0, g;
    for (i = 0; i < threads; i++)
      if (pthread_create(&tid[i], NULL, worker, &secs[i]) != 0) {
        fprintf(stderr, "fma_peak: cannot start thread %d\n", i);
        return 1;
      }
    for (i = 0; i < threads; i++) {
      pthread_join(tid[i], NULL);
      if (secs[i] > slowest) slowest = secs[i];
    }
    g = threads * 2.0 * lanes * (lanes == 16 ? CHAINS : CHAINS2) * (double)ITERS / slowest / 1e9; /* all threads' work over the slowest */
    if (g > best) best = g;
  }
  printf("{\"threads\": %d, \"gflops\": %.1f, \"lanes\": %d, \"isa\": \"%s\"}\n", threads, best, lanes,
         lanes == 16 ? "avx512" : "avx2");
  return 0;
}
