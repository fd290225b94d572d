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
 * it errs low.  GFLOP/s counts an FMA as two FLOPs per lane.
 *
 * Where the CPU has them, the same loop measures the 16-bit and 8-bit dot
 * products the narrow kernels would use: AVX512-BF16's vdpbf16ps (two
 * bf16 products added into each of 16 f32 lanes: 64 FLOPs an instruction)
 * as "bf16_gflops", and AVX512-VNNI's vpdpbusd (four u8 x s8 products into
 * each of 16 i32 lanes: 128 operations) as "vnni_gops"; null where the
 * CPU lacks them.  Where the CPU has AMX-BF16 and Linux grants the tiles,
 * "amx_bf16_gflops" is tdpbf16ps's (16 x 16 f32 sums of 32 bf16 products
 * each: 16384 FLOPs an instruction), four independent accumulator tiles;
 * the bf16 kernels' projections and attention use it (runtime/prims_amx.c). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* syscall, for the AMX grant */
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

/* vdpbf16ps chains: acc += a.b over pairs of bf16 (the values stay small) */
__attribute__((target("avx512f,avx512bf16"))) static float run_bf16(void)
{
  __m512 a[CHAINS], s;
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
  long k;
  int i;
  for (i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps(1.0f + (float)i * 1e-3f);
  for (k = 0; k < ITERS; k++) {
#pragma GCC unroll 24
    for (i = 0; i < CHAINS; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  }
  s = a[0];
  for (i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

/* vpdpbusd as inline assembly: gcc 12 copies and spills the sums around
 * _mm512_dpbusd_epi32, which made this loop read well under the
 * instruction's rate (the readings are in the commit that changed it;
 * runtime/prims_vnni.c says the same of its kernel) */
__attribute__((target("avx512f,avx512vnni"))) static inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b)
{
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

/* vpdpbusd chains: acc += u8 . s8 over groups of four (the sums wrap harmlessly) */
__attribute__((target("avx512f,avx512vnni"))) static float run_vnni(void)
{
  __m512i a[CHAINS], s;
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  long k;
  int i;
  for (i = 0; i < CHAINS; i++) a[i] = _mm512_set1_epi32(i);
  for (k = 0; k < ITERS; k++) {
#pragma GCC unroll 24
    for (i = 0; i < CHAINS; i++) a[i] = dpbusd(a[i], x, y);
  }
  s = a[0];
  for (i = 1; i < CHAINS; i++) s = _mm512_add_epi32(s, a[i]);
  return (float)_mm512_reduce_add_epi32(s);
}

/* tdpbf16ps on four accumulator tiles from two A and two B tiles, ITERS / 64 times */
#if defined(__GNUC__) && !defined(__clang__)
#include <sys/syscall.h>
#include <unistd.h>
#include <string.h>
struct amx_cfg { unsigned char palette, start_row, reserved[14]; unsigned short colsb[16]; unsigned char rows[16]; };
__attribute__((target("amx-tile,amx-bf16"))) static float run_amx(void)
{
  static unsigned short a[16 * 32], b[16 * 32];
  float c[16 * 16];
  struct amx_cfg cfg;
  long k;
  int i;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (i = 0; i < 8; i++) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  for (i = 0; i < 16 * 32; i++) a[i] = b[i] = 0x3a83; /* 1e-3 in bf16 */
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  for (k = 0; k < ITERS / 64; k++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}

/* AMX-BF16 and AMX-TILE (CPUID 7: EDX bits 22, 24) and Linux's grant of the tile data */
static int amx_usable(void)
{
  unsigned a, b, c, d;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  if (!((d >> 22) & 1) || !((d >> 24) & 1)) return 0;
  return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}
#endif

static int lanes;
static float (*kernel)(void);
static volatile float sink;

static void *worker(void *arg)
{
  double *seconds = arg, t0 = now();
  sink = kernel();
  *seconds = now() - t0;
  return NULL;
}

/* The best of five trials of fn on every thread, in operations a second:
 * all threads' work (ops_per_call each) over the slowest thread's time. */
static double peak(int threads, float (*fn)(void), double ops_per_call)
{
  double best = 0, secs[256];
  pthread_t tid[256];
  int trial, i;
  kernel = fn;
  for (trial = 0; trial < 5; trial++) {
    double slowest = 0, g;
    for (i = 0; i < threads; i++)
      if (pthread_create(&tid[i], NULL, worker, &secs[i]) != 0) {
        fprintf(stderr, "fma_peak: cannot start thread %d\n", i);
        exit(1);
      }
    for (i = 0; i < threads; i++) {
      pthread_join(tid[i], NULL);
      if (secs[i] > slowest) slowest = secs[i];
    }
    g = threads * ops_per_call / slowest / 1e9;
    if (g > best) best = g;
  }
  return best;
}

int main(int argc, char **argv)
{
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  double best;
  char bf16[32] = "null", vnni[32] = "null", amx[32] = "null";
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
  best = peak(threads, lanes == 16 ? run_avx512 : run_avx2, 2.0 * lanes * (lanes == 16 ? CHAINS : CHAINS2) * (double)ITERS);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"))
    snprintf(bf16, sizeof bf16, "%.1f", peak(threads, run_bf16, 64.0 * CHAINS * (double)ITERS));
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"))
    snprintf(vnni, sizeof vnni, "%.1f", peak(threads, run_vnni, 128.0 * CHAINS * (double)ITERS));
#if defined(__GNUC__) && !defined(__clang__)
  if (amx_usable()) snprintf(amx, sizeof amx, "%.1f", peak(threads, run_amx, 4.0 * 16384.0 * (double)(ITERS / 64)));
#endif
  printf("{\"threads\": %d, \"gflops\": %.1f, \"lanes\": %d, \"isa\": \"%s\", \"bf16_gflops\": %s, \"vnni_gops\": %s, "
         "\"amx_bf16_gflops\": %s}\n",
         threads, best, lanes, lanes == 16 ? "avx512" : "avx2", bf16, vnni, amx);
  return 0;
}
