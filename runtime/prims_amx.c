/* AMX-BF16 for linear_bf16 (a kernel whose activations and weights are
 * bf16) and linear_q8 (int8 weights, below): x rounded to bf16 in 32-row blocks, weights as packed
 * (attnc_prims_pack_bf16 lays them out as AMX's B tiles), products summed
 * in f32 by the tiles.  Chosen by prims.c when the CPU has AMX-BF16 and
 * Linux lets this process use the tiles (attnc_prims_amx_ready); compiled
 * with per-function target attributes, so the file builds anywhere. */
#include <stdlib.h>
#include <string.h>

#include "prims.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NR ATTNC_PACK_NR
#define AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define ARCH_REQ_XCOMP_PERM 0x1023 /* Linux: ask for an extended state component */
#define XFEATURE_XTILEDATA 18

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

/* CPUID leaf 7: AMX-BF16 (EDX bit 22), AMX-TILE (EDX 24); sub-leaf 1:
 * AVX512-BF16 (EAX 5), for the rounding of x.  The OS must save the tile
 * state (XCR0 bits 17 and 18), and Linux hands out the tile data only on
 * request. */
static void amx_ask(void)
{
  unsigned a, b, c, d, lo, hi;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 22) & 1) || !((d >> 24) & 1)) return;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) return;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !((c >> 27) & 1)) return; /* OSXSAVE */
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  if (((lo >> 17) & 3) != 3) return;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) return;
  amx_ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int attnc_prims_amx_ready(void)
{
  pthread_once(&amx_once, amx_ask);
  return amx_ok;
}

/* the tile configuration (palette 1): 16 rows of 64 bytes for all eight */
typedef struct {
  unsigned char palette, start_row, reserved[14];
  unsigned short colsb[16];
  unsigned char rows[16];
} tile_config;

/* rows mr (< 32: the rest zero) of x, n_in values each, to bf16 rows of k32 (zero past n_in) */
AMX static void rows_to_bf16(const float *x, long mr, long x_stride, long n_in, long k32, unsigned short *xb)
{
  long r, k;
  for (r = 0; r < 32; r++) {
    unsigned short *d = xb + r * k32;
    if (r >= mr) {
      memset(d, 0, sizeof(unsigned short) * (size_t)k32);
      continue;
    }
    for (k = 0; k < k32; k += 16) {
      const long n = n_in - k;
      const __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + r * x_stride + k));
      _mm256_storeu_si256((__m256i *)(d + k), (__m256i)h);
    }
  }
}

AMX void attnc_prims_linear_bf16_amx(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                     const float *b, float *y, long y_stride)
{
  const long k32 = (n_in + 31) / 32 * 32, panels = (n_out + NR - 1) / NR;
  float cb[32 * 32] __attribute__((aligned(64)));
  unsigned short *xb = NULL;
  tile_config cfg;
  long r0, p, kc, r;
  int t;
  /* few rows (decoding) are bound by the weights' bytes: no tiles for them */
  if (rows < 16 || posix_memalign((void **)&xb, 64, sizeof(unsigned short) * 32 * (size_t)k32) != 0) {
    attnc_prims_linear_bf16_avx512(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
    return;
  }
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (t = 0; t < 8; t++) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  /* tiles 0-3: the 32 x 32 sums (rows 0-15 and 16-31, outputs 0-15 and
   * 16-31); 4, 5: x's two 16-row halves; 6, 7: the panel's two halves */
  for (r0 = 0; r0 < rows; r0 += 32) {
    const long mr = rows - r0 < 32 ? rows - r0 : 32;
    rows_to_bf16(x + r0 * x_stride, mr, x_stride, n_in, k32, xb);
    for (p = 0; p < panels; p++) {
      const unsigned char *wp = (const unsigned char *)packed + p * ATTNC_BF16_PANEL(n_in);
      const long nv = n_out - p * NR < NR ? n_out - p * NR : NR;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (kc = 0; kc < k32; kc += 32) {
        _tile_loadd(4, xb + kc, k32 * 2);
        _tile_loadd(6, wp + kc / 2 * 128, 128);
        _tile_loadd(7, wp + kc / 2 * 128 + 64, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (mr > 16) {
          _tile_loadd(5, xb + 16 * k32 + kc, k32 * 2);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, cb, 128);
      _tile_stored(1, cb + 16, 128);
      if (mr > 16) {
        _tile_stored(2, cb + 16 * 32, 128);
        _tile_stored(3, cb + 16 * 32 + 16, 128);
      }
      {
        const __mmask16 m0 = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1u);
        const __mmask16 m1 = nv >= 32 ? (__mmask16)0xFFFF : nv <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nv - 16)) - 1u);
        const __m512 c0 = b ? _mm512_maskz_loadu_ps(m0, b + p * NR) : _mm512_setzero_ps();
        const __m512 c1 = b ? _mm512_maskz_loadu_ps(m1, b + p * NR + 16) : _mm512_setzero_ps();
        for (r = 0; r < mr; r++) {
          float *yr = y + (r0 + r) * y_stride + p * NR;
          _mm512_mask_storeu_ps(yr, m0, _mm512_add_ps(_mm512_load_ps(cb + r * 32), c0));
          _mm512_mask_storeu_ps(yr + 16, m1, _mm512_add_ps(_mm512_load_ps(cb + r * 32 + 16), c1));
        }
      }
    }
  }
  _tile_release();
  free(xb);
}

/* linear_q8 on the tiles: int8 weights are exact in bf16, so each panel
 * is turned into bf16 B tiles (q as it is, the scales applied to the
 * sums), and x is rounded to bf16, which the int8 accuracy bound (DESIGN
 * says the kernel chooses how activations meet int8 weights) leaves far
 * room for: bf16 keeps each value to 2^-9, with no scale shared along a
 * row to be stretched by an outlier.  All rows are rounded first, then
 * each panel is converted once and meets every 32-row block. */
AMX void attnc_prims_linear_q8_amx(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                   const float *b, float *y, long y_stride)
{
  const long k32 = (n_in + 31) / 32 * 32, panels = (n_out + NR - 1) / NR, nblk = (rows + 31) / 32;
  float cb[32 * 32] __attribute__((aligned(64)));
  unsigned short *xb = NULL, *wb = NULL;
  tile_config cfg;
  long r0, p, kc, r, kk;
  int t;
  if (rows < 16 || posix_memalign((void **)&xb, 64, sizeof(unsigned short) * 32 * (size_t)(nblk * k32)) != 0) {
    attnc_prims_linear_q8_avx512(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
    return;
  }
  if (posix_memalign((void **)&wb, 64, sizeof(unsigned short) * 32 * (size_t)k32) != 0) {
    free(xb);
    attnc_prims_linear_q8_avx512(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
    return;
  }
  for (r0 = 0; r0 < rows; r0 += 32)
    rows_to_bf16(x + r0 * x_stride, rows - r0 < 32 ? rows - r0 : 32, x_stride, n_in, k32, xb + r0 * k32);
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (t = 0; t < 8; t++) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  for (p = 0; p < panels; p++) {
    const unsigned char *panel = (const unsigned char *)packed + p * ATTNC_Q8_PANEL(n_in);
    const float *scale = (const float *)panel;
    const signed char *wq = (const signed char *)(panel + NR * sizeof(float));
    const long nv = n_out - p * NR < NR ? n_out - p * NR : NR;
    const __mmask16 m0 = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1u);
    const __mmask16 m1 = nv >= 32 ? (__mmask16)0xFFFF : nv <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nv - 16)) - 1u);
    const __m512 s0 = _mm512_loadu_ps(scale), s1 = _mm512_loadu_ps(scale + 16);
    const __m512 c0 = b ? _mm512_maskz_loadu_ps(m0, b + p * NR) : _mm512_setzero_ps();
    const __m512 c1 = b ? _mm512_maskz_loadu_ps(m1, b + p * NR + 16) : _mm512_setzero_ps();
    /* the panel as B tiles: pair kk, output n holds bf16(q[n][2kk]) and
     * bf16(q[n][2kk + 1]) in one 32-bit lane (zero past n_in) */
    for (kk = 0; kk < k32 / 2; kk++) {
      int h;
      for (h = 0; h < 2; h++) {
        __m512i e = _mm512_setzero_si512(), o = _mm512_setzero_si512();
        if (2 * kk < n_in)
          e = _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(wq + 2 * kk * NR + h * 16)))));
        if (2 * kk + 1 < n_in)
          o = _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(wq + (2 * kk + 1) * NR + h * 16)))));
        _mm512_store_si512(wb + kk * 64 + h * 32, _mm512_or_si512(_mm512_srli_epi32(e, 16), _mm512_and_si512(o, _mm512_set1_epi32((int)0xffff0000u))));
      }
    }
    for (r0 = 0; r0 < rows; r0 += 32) {
      const long mr = rows - r0 < 32 ? rows - r0 : 32;
      const unsigned short *xr = xb + r0 * k32;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (kc = 0; kc < k32; kc += 32) {
        _tile_loadd(4, xr + kc, k32 * 2);
        _tile_loadd(6, wb + kc / 2 * 64, 128);
        _tile_loadd(7, wb + kc / 2 * 64 + 32, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (mr > 16) {
          _tile_loadd(5, xr + 16 * k32 + kc, k32 * 2);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, cb, 128);
      _tile_stored(1, cb + 16, 128);
      if (mr > 16) {
        _tile_stored(2, cb + 16 * 32, 128);
        _tile_stored(3, cb + 16 * 32 + 16, 128);
      }
      for (r = 0; r < mr; r++) {
        float *yr = y + (r0 + r) * y_stride + p * NR;
        _mm512_mask_storeu_ps(yr, m0, _mm512_fmadd_ps(_mm512_load_ps(cb + r * 32), s0, c0));
        _mm512_mask_storeu_ps(yr + 16, m1, _mm512_fmadd_ps(_mm512_load_ps(cb + r * 32 + 16), s1, c1));
      }
    }
  }
  _tile_release();
  free(wb);
  free(xb);
}

#else
int attnc_prims_amx_ready(void) { return 0; }
void attnc_prims_linear_q8_amx(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                               const float *b, float *y, long y_stride)
{
  attnc_prims_linear_q8_generic(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
}
void attnc_prims_linear_bf16_amx(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                 const float *b, float *y, long y_stride)
{
  attnc_prims_linear_bf16_generic(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
}
#endif
