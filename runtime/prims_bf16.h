/* Inline helpers shared by the x86 bf16 primitives (prims_amx.c,
 * prims_bf16.c).  Their target attribute names AVX512-BF16 and no more, so
 * both AMX functions and plain AVX512-BF16 ones can inline them; include
 * only where <immintrin.h> and GCC's target attributes are available. */
#ifndef ATTNC_PRIMS_BF16_H
#define ATTNC_PRIMS_BF16_H

#include <immintrin.h>
#include <math.h>

#include "prims.h"

#define BF16 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16")))

/* r[0..15] (16 lanes of 32 bits each) -> its transpose, in registers */
BF16 static inline void transpose16_epi32(__m512i *r)
{
  __m512i t[16];
  int i;
  for (i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

/* 2^x for x <= 0 (0 for -inf), as prims_avx512.c's exp2_512_neg */
BF16 static inline __m512 exp2_neg(__m512 x)
{
  const __m512 r = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(ATTNC_EXP2F_P5);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTNC_EXP2F_P4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTNC_EXP2F_P3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTNC_EXP2F_P2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTNC_EXP2F_P1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTNC_EXP2F_P0));
  return _mm512_scalef_ps(p, x);
}

/* lane i of the result: bf16 of a[i] in its low half, bf16 of b[i] in its
 * high half (rounded to nearest even): the pair layout of AMX's B tiles
 * and of vdpbf16ps's operands */
BF16 static inline __m512i pair_bf16(__m512 a, __m512 b)
{
  static const unsigned short idx[32] __attribute__((aligned(64))) = {
    0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
  };
  return _mm512_permutexvar_epi16(_mm512_load_si512(idx), (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* the sum, lane by lane, of the two bf16 halves of w's lanes as f32 */
BF16 static inline __m512 pair_sum(__m512i w)
{
  return _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
                       _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u))));
}

/* The transposed attention's block of 32 keys from j0 (kt of them real)
 * for the group of 16 rows g (live of them real), its scores S (32
 * vectors, key by key, of the rows' q.k) made ready for the online
 * softmax: with nothing to mask or add (plain), S stays raw and the
 * returned max is scaled, *s2e = s2 to scale p's exponent; else each
 * score is scaled to base 2, the bias added (bias0: along the keys, by 16
 * x 16 transposes through Bb, or along the rows) and invisible keys set
 * to -inf in place, *s2e = 1.  Returns the block's max, row by row.
 * Shared by the AMX and the vdpbf16ps kernels (prims_amx.c, prims_bf16.c). */
BF16 static inline __attribute__((always_inline)) __m512 cols16_scores(const attnc_tile *t, float *S, float *Bb, const float *bias0,
                                                                        int bias_rows, const int *BO, __m512i lov, __m512i hiv,
                                                                        long g, long live, long j0, long kt, int inside, int plain,
                                                                        float s2, __m512 *s2e)
{
  const __mmask16 lm = live >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << live) - 1u);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  long x, jj;
  if (plain) { /* the max of the raw scores, scaled after (s2 > 0) */
    __m512 m4[4];
    for (x = 0; x < 4; x++) m4[x] = _mm512_load_ps(S + x * 16);
    for (jj = 4; jj < 32; jj++) m4[jj & 3] = _mm512_max_ps(m4[jj & 3], _mm512_load_ps(S + jj * 16));
    *s2e = _mm512_set1_ps(s2);
    return _mm512_mul_ps(_mm512_max_ps(_mm512_max_ps(m4[0], m4[1]), _mm512_max_ps(m4[2], m4[3])), _mm512_set1_ps(s2));
  }
  if (bias_rows) { /* the bias along the keys, by 16 x 16 transposes */
    int h;
    for (h = 0; h < 2; h++) {
      const long nv = kt - h * 16;
      const __mmask16 km = nv >= 16 ? (__mmask16)0xFFFF : nv <= 0 ? (__mmask16)0 : (__mmask16)((1u << nv) - 1u);
      __m512i bv[16];
      for (x = 0; x < 16; x++)
        bv[x] = x < live ? _mm512_castps_si512(_mm512_maskz_loadu_ps(km, bias0 + BO[g * 16 + x] + j0 + h * 16)) : _mm512_setzero_si512();
      transpose16_epi32(bv);
      for (x = 0; x < 16; x++) _mm512_store_si512(Bb + (h * 16 + x) * 16, bv[x]);
    }
  }
  for (jj = 0; jj < 32; jj++) {
    const long j = j0 + jj;
    __m512 sc = _mm512_mul_ps(_mm512_load_ps(S + jj * 16), _mm512_set1_ps(s2));
    __mmask16 ok = jj < kt ? (__mmask16)0xFFFF : 0;
    if (!inside)
      ok &= _mm512_cmp_epi32_mask(lov, _mm512_set1_epi32((int)j), _MM_CMPINT_LE) &
            _mm512_cmp_epi32_mask(hiv, _mm512_set1_epi32((int)j), _MM_CMPINT_NLT);
    if (t->mask && ok && !t->mask[j]) ok = 0; /* the key mask, contiguous along the keys */
    if (bias_rows) sc = _mm512_fmadd_ps(_mm512_load_ps(Bb + jj * 16), _mm512_set1_ps(ATTNC_LOG2E), sc);
    else if (bias0 && ok) /* the bias along the rows */
      sc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(ok & lm, bias0 + j * t->bias_j + g * 16), _mm512_set1_ps(ATTNC_LOG2E), sc);
    sc = _mm512_mask_blend_ps(ok, _mm512_set1_ps(-INFINITY), sc);
    _mm512_store_ps(S + jj * 16, sc);
    mx = _mm512_max_ps(mx, sc);
  }
  *s2e = _mm512_set1_ps(1.0f);
  return mx;
}

/* The transposed attention's Q^T: for each group g of 16 rows and pair
 * of dims dd, the 16 rows' q (dims 2dd, 2dd + 1) rounded to bf16 pairs,
 * 64 bytes at qt + (g * c / 2 + dd) * 64 (16 x 16 transposes; rows past
 * t->rows zero).  The scale goes on the f32 scores, not here. */
BF16 static inline void cols16_qt(const attnc_tile *t, long ng, void *qt)
{
  long g, cc, x;
  for (g = 0; g < ng; g++) {
    const float *qr[16];
    attnc_prims_row_ptrs(t, t->q, t->q_stride, t->q_hstride, g * 16, 16, qr);
    for (cc = 0; cc < t->c / 32; cc++) {
      __m512i w[16];
      for (x = 0; x < 16; x++)
        w[x] = qr[x] ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(qr[x] + cc * 32 + 16), _mm512_loadu_ps(qr[x] + cc * 32))
                     : _mm512_setzero_si512();
      transpose16_epi32(w);
      for (x = 0; x < 16; x++) _mm512_store_si512((char *)qt + ((g * t->c / 32 + cc) * 16 + x) * 64, w[x]);
    }
  }
}

/* The transposed attention's rows out: O^T (group g's dim d at O + (g *
 * c + d) * 16) by 1 / l lane-wise, transposed 16 dims at a time; rows
 * that saw no key (M -inf, L 0) take the empty-row rule. */
BF16 static inline void cols16_out(const attnc_tile *t, long ng, const float *O, const float *M, const float *L)
{
  const long rows = t->rows, c = t->c;
  long g, x;
  for (g = 0; g < ng; g++) {
    const __m512 Lv = _mm512_load_ps(L + g * 16);
    const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(Lv, _mm512_setzero_ps(), _CMP_NEQ_UQ), _mm512_set1_ps(1.0f), Lv);
    float *orow[16];
    long n16;
    for (x = 0; x < 16; x++) {
      const long r = g * 16 + x;
      orow[x] = r < rows ? t->o + (r / t->q_group) * t->o_stride + (r % t->q_group) * t->o_hstride : NULL;
    }
    for (n16 = 0; n16 < c / 16; n16++) {
      __m512i w[16];
      for (x = 0; x < 16; x++) w[x] = _mm512_castps_si512(_mm512_mul_ps(_mm512_load_ps(O + (g * c + n16 * 16 + x) * 16), inv));
      transpose16_epi32(w);
      for (x = 0; x < 16; x++)
        if (orow[x]) _mm512_storeu_ps(orow[x] + n16 * 16, _mm512_castsi512_ps(w[x]));
    }
    for (x = 0; x < 16 && g * 16 + x < rows; x++)
      if (M[g * 16 + x] == -INFINITY && L[g * 16 + x] == 0) attnc_prims_empty_row(t, g * 16 + x, orow[x]);
  }
}

/* Rounding q and k to bf16 (each value within 2^-9 of itself) moves a
 * score by up to 2^-8 |q| |k|, s2 times that in the base-2 logits.  A
 * softmax sharp enough (large weights with outlier channels, a large
 * mean or rows of mixed size) magnifies it past DESIGN.md's bf16 row
 * (docs/spec.md, bf16 and f16 kernels).  A tile whose largest |q| |k|
 * could move a logit by more than QK_ROUNDING_MAX takes the f32
 * primitive, whose q and k are not rounded (the AMX and vdpbf16ps
 * attention both ask); random q and k at nn.Linear's init stay well
 * below it. */
#define QK_ROUNDING_MAX 0.0625f

/* the largest sum of squares of n rows of c floats (c a multiple of 16) */
BF16 static inline float max_norm2(const float *const *row, long n, long c)
{
  float best = 0;
  long i, d;
  for (i = 0; i < n; i++) {
    __m512 acc = _mm512_setzero_ps();
    float v;
    if (!row[i]) continue;
    for (d = 0; d < c; d += 16) {
      const __m512 x = _mm512_loadu_ps(row[i] + d);
      acc = _mm512_fmadd_ps(x, x, acc);
    }
    v = _mm512_reduce_add_ps(acc);
    if (!(v <= best)) best = v; /* a NaN or an infinity wins, and sends the tile to f32 */
  }
  return best;
}

/* 1 when rounding the tile's q and the keys its rows see to bf16 could
 * move a base-2 logit by more than QK_ROUNDING_MAX */
BF16 static inline int qk_rounding_too_coarse(const attnc_tile *t, float s2)
{
  const float *rows[16];
  float q2 = 0, k2 = 0;
  long r, j0, j1, lo, hi;
  for (r = 0; r < t->rows; r += 16) {
    float v;
    attnc_prims_row_ptrs(t, t->q, t->q_stride, t->q_hstride, r, 16, rows);
    v = max_norm2(rows, 16, t->c);
    if (!(v <= q2)) q2 = v;
  }
  j0 = t->k_end, j1 = t->k_begin - 1;
  for (r = 0; r < t->rows; r++) {
    attnc_prims_row_range(t, r, &lo, &hi);
    if (lo <= hi) {
      if (lo < j0) j0 = lo;
      if (hi > j1) j1 = hi;
    }
  }
  for (; j0 <= j1; j0 += 16) {
    long u;
    for (u = 0; u < 16; u++) rows[u] = j0 + u <= j1 ? t->k + (j0 + u) * t->k_stride : (const float *)0;
    {
      const float v = max_norm2(rows, 16, t->c);
      if (!(v <= k2)) k2 = v;
    }
  }
  return !(fabsf(s2) * 0x1p-8f * sqrtf(q2) * sqrtf(k2) <= QK_ROUNDING_MAX);
}

#endif
