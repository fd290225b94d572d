/* AMX-BF16 for linear_bf16 (a kernel whose activations and weights are
 * bf16) and linear_q8 (int8 weights, below): x rounded to bf16 in 32-row blocks, weights as packed
 * (attnc_prims_pack_bf16 lays them out as AMX's B tiles), products summed
 * in f32 by the tiles.  Chosen by prims.c when the CPU has AMX-BF16 and
 * Linux lets this process use the tiles (attnc_prims_amx_ready); compiled
 * with per-function target attributes, so the file builds anywhere. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prims.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "prims_bf16.h"

#define NR ATTNC_PACK_NR
#define AMX __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
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

/* the tiles for the linears: 16 rows of 64 bytes for all eight */
AMX static void load_tiles(void)
{
  tile_config cfg;
  int t;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (t = 0; t < 8; t++) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

/* cb (32 x 32 f32) = mr (<= 32) rows of xr (bf16, k32 apart) times a
 * panel's B tiles (pair kk's 128 bytes at wp + kk * 128): tiles 0-3 the
 * sums (rows 0-15 and 16-31 by outputs 0-15 and 16-31), 4 and 5 x's two
 * 16-row halves, 6 and 7 the panel's two halves */
AMX static void panel_block(const unsigned short *xr, long k32, const unsigned char *wp, long mr, float *cb)
{
  long kc;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (kc = 0; kc < k32; kc += 32) {
    _tile_loadd(4, xr + kc, k32 * 2);
    _tile_loadd(6, wp + kc / 2 * 128, 128);
    _tile_loadd(7, wp + kc / 2 * 128 + 64, 128);
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
}

/* y's rows r0 .. r0 + mr - 1, columns p * 32 .. (nv of them) = cb * scale
 * (NULL: 1) + b */
AMX static void panel_out(const float *cb, long mr, long nv, const float *scale, const float *b, float *y, long y_stride)
{
  const __mmask16 m0 = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1u);
  const __mmask16 m1 = nv >= 32 ? (__mmask16)0xFFFF : nv <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nv - 16)) - 1u);
  const __m512 s0 = scale ? _mm512_loadu_ps(scale) : _mm512_set1_ps(1.0f);
  const __m512 s1 = scale ? _mm512_loadu_ps(scale + 16) : _mm512_set1_ps(1.0f);
  const __m512 c0 = b ? _mm512_maskz_loadu_ps(m0, b) : _mm512_setzero_ps();
  const __m512 c1 = b ? _mm512_maskz_loadu_ps(m1, b + 16) : _mm512_setzero_ps();
  long r;
  for (r = 0; r < mr; r++) {
    _mm512_mask_storeu_ps(y + r * y_stride, m0, _mm512_fmadd_ps(_mm512_load_ps(cb + r * 32), s0, c0));
    _mm512_mask_storeu_ps(y + r * y_stride + 16, m1, _mm512_fmadd_ps(_mm512_load_ps(cb + r * 32 + 16), s1, c1));
  }
}

AMX void attnc_prims_linear_bf16_amx(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                     const float *b, float *y, long y_stride)
{
  const long k32 = (n_in + 31) / 32 * 32, panels = (n_out + NR - 1) / NR;
  float cb[32 * 32] __attribute__((aligned(64)));
  unsigned short *xb = NULL;
  long r0, p;
  /* few rows (decoding) are bound by the weights' bytes: no tiles for them */
  if (rows < 16 || posix_memalign((void **)&xb, 64, sizeof(unsigned short) * 32 * (size_t)k32) != 0) {
    attnc_prims_linear_bf16_avx512(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
    return;
  }
  load_tiles();
  for (r0 = 0; r0 < rows; r0 += 32) {
    const long mr = rows - r0 < 32 ? rows - r0 : 32;
    rows_to_bf16(x + r0 * x_stride, mr, x_stride, n_in, k32, xb);
    for (p = 0; p < panels; p++) {
      panel_block(xb, k32, (const unsigned char *)packed + p * ATTNC_BF16_PANEL(n_in), mr, cb);
      panel_out(cb, mr, n_out - p * NR < NR ? n_out - p * NR : NR, NULL, b ? b + p * NR : NULL, y + r0 * y_stride + p * NR,
                y_stride);
    }
  }
  _tile_release();
  free(xb);
}

enum { KC = 128 }; /* keys of k and v converted at a time by attend_cols16 */

/* S^T (32 keys by 16 rows, f32) = the 32 keys' rows of k (bf16, c apart)
 * times Q^T (nc B tiles), into s: tiles 0 and 1 the sums, 2 and 3 the sources */
AMX static inline void scores_t(const unsigned short *kb, const unsigned short *qt, long c, float *s)
{
  long cc;
  _tile_zero(0);
  _tile_zero(1);
  for (cc = 0; cc < c / 32; cc++) {
    _tile_loadd(2, qt + cc * 512, 64);
    _tile_loadd(3, kb + cc * 32, c * 2);
    _tile_dpbf16ps(0, 3, 2);
    _tile_loadd(3, kb + 16 * c + cc * 32, c * 2);
    _tile_dpbf16ps(1, 3, 2);
  }
  _tile_stored(0, s, 64);
  _tile_stored(1, s + 256, 64);
}

/* O^T tile T (one of 4-7) times alpha, lane by lane, through buf */
#define AMX_RESCALE(T, buf, alpha)                                                             \
  do {                                                                                         \
    int x_;                                                                                    \
    _tile_stored(T, buf, 64);                                                                  \
    for (x_ = 0; x_ < 16; x_++) _mm512_store_ps(buf + x_ * 16, _mm512_mul_ps(_mm512_load_ps(buf + x_ * 16), alpha)); \
    _tile_loadd(T, buf, 64);                                                                   \
  } while (0)

/* attend_bf16 for head dims 32 and 64, with the scores transposed: the
 * tiles compute S^T = K Q^T and O^T += V^T P^T, so each 16-lane vector of
 * a score block is one key across 16 query rows and the softmax's max and
 * sum over keys are lane-wise (no horizontal reductions), k goes into A
 * tiles as rows (no transpose), p becomes P^T's B tile by pairing two
 * keys' vectors, and O^T (c/16 tiles of dims x rows) stays in tile
 * registers across the key blocks.  The running max of each row is kept
 * rounded up to an integer (base 2): p = 2^(s - M) <= 1 as before, and O
 * and l need rescaling only when a row's max passes the next integer, by
 * an exact power of two; otherwise O^T never leaves the tiles.  p is
 * rounded to bf16 and summed as rounded, as the row form does.  k and v
 * are converted KC keys at a time (k as bf16 rows, v as V^T tiles), once
 * per call for all rows.  Work (floats): O^T (r16 x c), M, L (r16), Q^T
 * (r16 x c / 2), K and V^T (KC x c), S (2 x 512), P (256), B (512), R (256),
 * LO, HI, BO (r16 int). */
AMX static void attend_cols16(const attnc_tile *t, float s2)
{
  const long rows = t->rows, c = t->c, r16 = (rows + 15) / 16 * 16, ng = r16 / 16, nc = c / 32;
  const float *bias0 = t->bias ? t->bias + t->i0 * t->bias_i : NULL;
  const int bias_rows = t->bias && t->bias_j == 1;
  float *O = t->work, *M = O + r16 * c, *L = M + r16, *Sd, *Bb, *Rb;
  unsigned short *Qt = (unsigned short *)(L + r16), *Kc, *Vt, *Pb;
  int *LO, *HI, *BO;
  long jmin, jmax, lo_max, hi_min, g, c0, x, cc;
  Kc = Qt + r16 * c;
  Vt = Kc + KC * c;
  Sd = (float *)(Vt + KC * c);
  Pb = (unsigned short *)(Sd + 1024);
  Bb = (float *)(Pb + 512);
  Rb = Bb + 512;
  LO = (int *)(Rb + 256);
  HI = LO + r16;
  BO = HI + r16;
  attnc_prims_rows_begin(t, r16, NULL, c, LO, HI, BO, M, L, &jmin, &jmax, &lo_max, &hi_min);
  memset(O, 0, sizeof(float) * (size_t)(r16 * c));
  /* Q^T as B tiles, group g (rows g*16..) and chunk cc of 32 dims: row kk
   * holds each row's dims 2kk, 2kk + 1 (a 16 x 16 transpose of bf16 pairs) */
  cols16_qt(t, ng, Qt);
  load_tiles();
  for (c0 = jmin; c0 <= jmax; c0 += KC) {
    const long c1 = jmax + 1 - c0 < KC ? jmax + 1 : c0 + KC, nblk = (c1 - c0 + 31) / 32;
    long b, jj, n16;
    /* k as bf16 rows (A tiles: 16 keys by 32 dims), zero past the last key */
    for (jj = 0; jj < nblk * 32; jj++)
      for (cc = 0; cc < nc; cc++) {
        const float *k = t->k + (c0 + jj) * t->k_stride + cc * 32;
        _mm512_store_si512(Kc + jj * c + cc * 32, c0 + jj < c1 ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(k + 16), _mm512_loadu_ps(k))
                                                                : _mm512_setzero_si512());
      }
    /* v as V^T A tiles, block b and dims n16*16..: row d holds the block's
     * 32 keys of dim d (pairs of keys, then a 16 x 16 transpose) */
    for (b = 0; b < nblk; b++)
      for (n16 = 0; n16 < c / 16; n16++) {
        __m512i w[16];
        for (x = 0; x < 16; x++) {
          const long je = c0 + b * 32 + 2 * x;
          const __m512 e = je < c1 ? _mm512_loadu_ps(t->v + je * t->v_stride + n16 * 16) : _mm512_setzero_ps();
          const __m512 o = je + 1 < c1 ? _mm512_loadu_ps(t->v + (je + 1) * t->v_stride + n16 * 16) : _mm512_setzero_ps();
          w[x] = pair_bf16(e, o);
        }
        transpose16_epi32(w);
        for (x = 0; x < 16; x++) _mm512_store_si512(Vt + ((b * (c / 16) + n16) * 16 + x) * 32, w[x]);
      }
    for (g = 0; g < ng; g++) {
      const long live = rows - g * 16;
      const __m512i lov = _mm512_load_si512(LO + g * 16), hiv = _mm512_load_si512(HI + g * 16);
      __m512 Mv = _mm512_load_ps(M + g * 16), Lv = _mm512_load_ps(L + g * 16);
      _tile_loadd(4, O + g * 16 * c, 64);
      _tile_loadd(5, O + g * 16 * c + 256, 64);
      if (c == 64) {
        _tile_loadd(6, O + g * 16 * c + 512, 64);
        _tile_loadd(7, O + g * 16 * c + 768, 64);
      }
      scores_t(Kc, Qt + g * nc * 512, c, Sd); /* S^T of the chunk's first block */
      for (b = 0; b < nblk; b++) {
        const long j0 = c0 + b * 32, kt = c1 - j0 < 32 ? c1 - j0 : 32;
        const int inside = kt == 32 && j0 >= lo_max && j0 + 31 <= hi_min; /* every row sees every key */
        const int plain = inside && !t->mask && !t->bias;
        __m512 mx, mnew, msub, alpha, sum = _mm512_setzero_ps(), s2e;
        __mmask16 grew;
        float *S = Sd + (b & 1) * 512;
        /* the next block's S^T first: its tile work overlaps this block's
         * softmax, and this block's scores were stored a block ago */
        if (b + 1 < nblk) scores_t(Kc + (b + 1) * 32 * c, Qt + g * nc * 512, c, Sd + ((b + 1) & 1) * 512);
        mx = cols16_scores(t, S, Bb, bias0, bias_rows, BO, lov, hiv, g, live, j0, kt, inside, plain, s2, &s2e);
        /* the new max, rounded up to an integer; a NaN score makes it NaN
         * or its p NaN, and either makes the row NaN */
        mnew = _mm512_max_ps(Mv, _mm512_roundscale_ps(mx, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
        msub = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mnew, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), mnew, _mm512_setzero_ps());
        alpha = _mm512_scalef_ps(_mm512_set1_ps(1.0f), _mm512_sub_ps(Mv, msub)); /* 0 for a row that saw no key yet */
        grew = _mm512_cmp_ps_mask(mnew, Mv, _CMP_NEQ_UQ) & _mm512_cmp_ps_mask(Mv, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
        if (grew) { /* rows that had keys and whose max moved: O^T by alpha */
          AMX_RESCALE(4, Rb, alpha);
          AMX_RESCALE(5, Rb, alpha);
          if (c == 64) {
            AMX_RESCALE(6, Rb, alpha);
            AMX_RESCALE(7, Rb, alpha);
          }
        }
        /* p = 2^(s - M), keys 2kk and 2kk + 1 paired as P^T's row kk */
        for (jj = 0; jj < 16; jj++) {
          const __m512 pe = exp2_neg(_mm512_fmsub_ps(_mm512_load_ps(S + 2 * jj * 16), s2e, msub));
          const __m512 po = exp2_neg(_mm512_fmsub_ps(_mm512_load_ps(S + (2 * jj + 1) * 16), s2e, msub));
          const __m512i w = pair_bf16(pe, po);
          _mm512_store_si512(Pb + jj * 32, w);
          sum = _mm512_add_ps(sum, pair_sum(w));
        }
        Lv = _mm512_fmadd_ps(Lv, alpha, sum);
        Mv = mnew;
        /* O^T += V^T P^T */
        _tile_loadd(2, Pb, 64);
        _tile_loadd(3, Vt + b * (c / 16) * 512, 64);
        _tile_dpbf16ps(4, 3, 2);
        _tile_loadd(3, Vt + (b * (c / 16) + 1) * 512, 64);
        _tile_dpbf16ps(5, 3, 2);
        if (c == 64) {
          _tile_loadd(3, Vt + (b * 4 + 2) * 512, 64);
          _tile_dpbf16ps(6, 3, 2);
          _tile_loadd(3, Vt + (b * 4 + 3) * 512, 64);
          _tile_dpbf16ps(7, 3, 2);
        }
      }
      _tile_stored(4, O + g * 16 * c, 64);
      _tile_stored(5, O + g * 16 * c + 256, 64);
      if (c == 64) {
        _tile_stored(6, O + g * 16 * c + 512, 64);
        _tile_stored(7, O + g * 16 * c + 768, 64);
      }
      _mm512_store_ps(M + g * 16, Mv);
      _mm512_store_ps(L + g * 16, Lv);
    }
  }
  _tile_release();
  /* the rows out */
  cols16_out(t, ng, O, M, L);
}
#undef AMX_RESCALE

/* attend_bf16 on the tiles: a tile of 16 rows or more, head dim a multiple
 * of 32 (up to 256), a bias contiguous along the keys or (one head) the
 * rows, a mask contiguous along the keys, no softcap or key split (the
 * rest go to the f32 primitive).  q, k and v are rounded to bf16 (exact for a bf16
 * kernel's core inputs; a projection's output as PyTorch rounds it), the
 * scores and p.v are summed in f32 by the tiles, the online softmax runs
 * in f32 over blocks of 32 keys, and p is rounded to bf16 for p.v (as
 * PyTorch's bf16 flash attention rounds it).  Head dims 32 and 64 take
 * the transposed form (attend_cols16, above); wider heads this row form,
 * whose O does not fit the tile registers.  Work, in t->work:
 * O (r16 x c f32), then Qb (r16 x c bf16), Kb (c/32 chunks x 2 x 16 x 32
 * bf16), Vb (c/16 x 16 x 32 bf16), S (r16 x 32 f32), P (r16 x 32 bf16),
 * M, L, A (r16 f32), LO, HI, BO (r16 int). */
AMX void attnc_prims_attend_bf16_amx(const attnc_tile *t)
{
  const long rows = t->rows, c = t->c, r16 = (rows + 15) / 16 * 16;
  float *O, *S, *M, *L, *A;
  unsigned short *Qb, *Kb, *Vb, *P;
  int *LO, *HI, *BO;
  long r, d, j0, jmin, jmax, lo_max, hi_min, rt, cc, n16;
  float cb[4][16 * 16] __attribute__((aligned(64)));
  const float s2 = t->scale * ATTNC_LOG2E;
  const float cap2 = t->softcap > 0 ? t->softcap * ATTNC_LOG2E : 0.0f;
  int x;
  const float *bias0 = t->bias ? t->bias + t->i0 * t->bias_i : NULL;
  /* a bias contiguous along the keys (bias_j = 1) goes in row by row; one
   * contiguous along the query rows (a kernel's transposed shared bias,
   * one head per tile) by 16 x 16 transposes */
  const int bias_rows = t->bias && t->bias_j == 1, bias_cols = t->bias && !bias_rows && t->bias_i == 1 && t->q_group == 1;
  if (rows < 16 || rows > 256 || (t->bias && !bias_rows && !bias_cols) || (t->mask && t->mask_j != 1) || t->m_out ||
      c % 32 || c > 256 || cap2 > 0 || s2 == 0 || !attnc_prims_fits_lanes(t) || qk_rounding_too_coarse(t, s2)) {
    attnc_prims_attend_avx512(t);
    return;
  }
  if (c <= 64 && s2 > 0) {
    attend_cols16(t, s2);
    return;
  }
  O = t->work;
  Qb = (unsigned short *)(O + r16 * c);
  Kb = Qb + r16 * c;
  Vb = Kb + c * 32;
  S = (float *)(Vb + c * 32);
  P = (unsigned short *)(S + r16 * 32);
  M = (float *)(P + r16 * 32);
  L = M + r16;
  A = L + r16;
  LO = (int *)(A + r16);
  HI = LO + r16;
  BO = HI + r16;
  attnc_prims_rows_begin(t, r16, NULL, c, LO, HI, BO, M, L, &jmin, &jmax, &lo_max, &hi_min);
  memset(O, 0, sizeof(float) * (size_t)(r16 * c));
  /* q rounded to bf16 as it is (the scale goes on the f32 scores) */
  for (r = 0; r < r16; r++) {
    const float *qr[1];
    attnc_prims_row_ptrs(t, t->q, t->q_stride, t->q_hstride, r, 1, qr);
    for (d = 0; d < c; d += 32) {
      __m512i h = _mm512_setzero_si512();
      if (qr[0]) h = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(qr[0] + d + 16), _mm512_loadu_ps(qr[0] + d));
      _mm512_store_si512(Qb + r * c + d, h);
    }
  }
  load_tiles();
  for (j0 = jmin; j0 <= jmax; j0 += 32) {
    const long kt = jmax - j0 + 1 < 32 ? jmax - j0 + 1 : 32;
    /* k as B tiles: chunk cc of 32 dims, keys sub*16..: row kk holds each
     * key's dims 2kk, 2kk + 1 (a 16 x 16 transpose of bf16 pairs) */
    for (cc = 0; cc < c / 32; cc++) {
      int sub;
      for (sub = 0; sub < 2; sub++) {
        __m512i kr[16];
        for (x = 0; x < 16; x++) {
          const long jj = sub * 16 + x;
          const float *k = t->k + (j0 + jj) * t->k_stride + cc * 32;
          kr[x] = jj < kt ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(k + 16), _mm512_loadu_ps(k)) : _mm512_setzero_si512();
        }
        transpose16_epi32(kr);
        for (x = 0; x < 16; x++) _mm512_store_si512(Kb + ((cc * 2 + sub) * 16 + x) * 32, kr[x]);
      }
    }
    /* v as B tiles: dims n16*16.., row kk holds keys 2kk and 2kk + 1 of each dim */
    for (n16 = 0; n16 < c / 16; n16++)
      for (x = 0; x < 16; x++) {
        const long je = 2 * x, jo = 2 * x + 1;
        const __m512i e = je < kt ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(t->v + (j0 + je) * t->v_stride + n16 * 16)))
                                  : _mm512_setzero_si512();
        const __m512i o = jo < kt ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(t->v + (j0 + jo) * t->v_stride + n16 * 16)))
                                  : _mm512_setzero_si512();
        _mm512_store_si512(Vb + (n16 * 16 + x) * 32, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
      }
    /* scores S = q.k, two row tiles by two key tiles at a time */
    for (rt = 0; rt < r16 / 16; rt += 2) {
      const int two = rt + 1 < r16 / 16;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (cc = 0; cc < c / 32; cc++) {
        _tile_loadd(4, Qb + rt * 16 * c + cc * 32, c * 2);
        _tile_loadd(6, Kb + (cc * 2) * 16 * 32, 64);
        _tile_loadd(7, Kb + (cc * 2 + 1) * 16 * 32, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
          _tile_loadd(5, Qb + (rt + 1) * 16 * c + cc * 32, c * 2);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, S + rt * 16 * 32, 128);
      _tile_stored(1, S + rt * 16 * 32 + 16, 128);
      if (two) {
        _tile_stored(2, S + (rt + 1) * 16 * 32, 128);
        _tile_stored(3, S + (rt + 1) * 16 * 32 + 16, 128);
      }
    }
    if (bias_cols) /* S[r][jj] += bias[r + (j0 + jj) * bias_j] (base 2), 16 rows by 16 keys at a time */
      for (rt = 0; rt < r16 / 16; rt++) {
        const long live = rows - rt * 16;
        const __mmask16 lm = live >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << live) - 1u);
        int h;
        for (h = 0; h < 2; h++) {
          __m512i bv[16];
          for (x = 0; x < 16; x++)
            bv[x] = h * 16 + x < kt ? _mm512_castps_si512(_mm512_maskz_loadu_ps(lm, bias0 + (j0 + h * 16 + x) * t->bias_j + rt * 16))
                                    : _mm512_setzero_si512();
          transpose16_epi32(bv);
          for (x = 0; x < 16; x++) {
            float *sr = S + (rt * 16 + x) * 32 + h * 16;
            _mm512_store_ps(sr, _mm512_fmadd_ps(_mm512_castsi512_ps(bv[x]), _mm512_set1_ps(ATTNC_LOG2E / s2), _mm512_load_ps(sr)));
          }
        }
      }
    /* the online softmax of each row over these keys, in base 2 */
    for (r = 0; r < r16; r++) {
      const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
      __m512 sv[2], mx = _mm512_set1_ps(-INFINITY), sum;
      __mmask16 nan_lanes = 0;
      float rowmax, m_new, alpha;
      int h;
      for (h = 0; h < 2; h++) {
        const __m512i jv = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(j0 + h * 16)));
        __mmask16 ok = _mm512_cmp_epi32_mask(jv, _mm512_set1_epi32(LO[r]), _MM_CMPINT_NLT) &
                       _mm512_cmp_epi32_mask(jv, _mm512_set1_epi32(HI[r]), _MM_CMPINT_LE) &
                       _mm512_cmp_epi32_mask(jv, _mm512_set1_epi32((int)(j0 + kt)), _MM_CMPINT_LT);
        __m512 sc = _mm512_mul_ps(_mm512_load_ps(S + r * 32 + h * 16), _mm512_set1_ps(s2));
        if (t->mask && ok) /* the key mask, contiguous along the keys */
          ok &= _mm512_cmp_epi32_mask(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(ok, t->mask + j0 + h * 16)),
                                      _mm512_setzero_si512(), _MM_CMPINT_NE);
        if (bias_rows && ok) /* the bias, contiguous along the keys, in base 2 */
          sc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(ok, bias0 + BO[r] + j0 + h * 16), _mm512_set1_ps(ATTNC_LOG2E), sc);
        sv[h] = _mm512_mask_blend_ps(ok, _mm512_set1_ps(-INFINITY), sc);
        nan_lanes |= _mm512_cmp_ps_mask(sv[h], sv[h], _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, sv[h]);
      }
      rowmax = nan_lanes ? NAN : _mm512_reduce_max_ps(mx);
      m_new = M[r] != M[r] || rowmax != rowmax ? NAN : M[r] > rowmax ? M[r] : rowmax;
      if (m_new == -INFINITY) { /* nothing seen yet */
        A[r] = 1;
        _mm512_store_si512(P + r * 32, _mm512_setzero_si512());
        continue;
      }
      alpha = M[r] == -INFINITY ? 0.0f : exp2f(M[r] - m_new);
      /* p rounded to bf16 for p.v, and summed as rounded: o = sum p v /
       * sum p over the same p, so a row one key dominates gets that key's
       * v whatever the rounding */
      for (h = 0; h < 2; h++) {
        const __m512i u = _mm512_castps_si512(exp2_neg(_mm512_sub_ps(sv[h], _mm512_set1_ps(m_new))));
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        sv[h] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))),
                                                     _mm512_set1_epi32((int)0xffff0000u)));
      }
      sum = _mm512_add_ps(sv[0], sv[1]);
      L[r] = L[r] * alpha + _mm512_reduce_add_ps(sum);
      M[r] = m_new;
      A[r] = alpha;
      _mm512_store_si512(P + r * 32, (__m512i)_mm512_cvtne2ps_pbh(sv[1], sv[0]));
    }
    /* O = alpha O + p.v, one 16-row tile by up to four 16-dim tiles at a
     * time: every product issued before the first result is stored */
    for (rt = 0; rt < r16 / 16; rt++)
      for (n16 = 0; n16 < c / 16; n16 += 4) {
        const long nn = c / 16 - n16 < 4 ? c / 16 - n16 : 4;
        long q;
        const unsigned short *vb = Vb + n16 * 16 * 32;
        _tile_loadd(4, P + rt * 16 * 32, 64);
        _tile_zero(0);
        _tile_zero(1);
        _tile_loadd(6, vb, 64);
        _tile_loadd(7, vb + 16 * 32, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (nn == 4) {
          _tile_zero(2);
          _tile_zero(3);
          _tile_loadd(6, vb + 2 * 16 * 32, 64);
          _tile_loadd(7, vb + 3 * 16 * 32, 64);
          _tile_dpbf16ps(2, 4, 6);
          _tile_dpbf16ps(3, 4, 7);
        }
        _tile_stored(0, cb[0], 64);
        _tile_stored(1, cb[1], 64);
        if (nn == 4) {
          _tile_stored(2, cb[2], 64);
          _tile_stored(3, cb[3], 64);
        }
        for (r = 0; r < 16; r++) {
          const __m512 al = _mm512_set1_ps(A[rt * 16 + r]);
          for (q = 0; q < nn; q++) {
            float *o = O + (rt * 16 + r) * c + (n16 + q) * 16;
            _mm512_store_ps(o, _mm512_fmadd_ps(_mm512_load_ps(o), al, _mm512_load_ps(cb[q] + r * 16)));
          }
        }
      }
  }
  _tile_release();
  /* the rows out: normalised, or the empty-row rule */
  for (r = 0; r < rows; r++) {
    float *o = t->o + (r / t->q_group) * t->o_stride + (r % t->q_group) * t->o_hstride;
    if (M[r] == -INFINITY && L[r] == 0) {
      attnc_prims_empty_row(t, r, o);
      continue;
    }
    {
      const __m512 inv = _mm512_set1_ps(1.0f / L[r]);
      for (d = 0; d < c; d += 16) _mm512_storeu_ps(o + d, _mm512_mul_ps(inv, _mm512_load_ps(O + r * c + d)));
    }
  }
}

#else
int attnc_prims_amx_ready(void) { return 0; }
void attnc_prims_attend_bf16_amx(const attnc_tile *t) { attnc_prims_attend_generic(t); }
void attnc_prims_linear_bf16_amx(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                 const float *b, float *y, long y_stride)
{
  attnc_prims_linear_bf16_generic(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
}
#endif
