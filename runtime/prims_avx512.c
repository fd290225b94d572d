/* AVX-512 primitives.  This file is compiled with -mavx512f and friends;
 * nothing here runs unless prims.c found those features on the CPU. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "prims.h"

#define NR ATTNC_PACK_NR
#define KC 256
#define KT ATTNC_ATTEND_KT
#define INLINE static inline __attribute__((always_inline))

static long round16(long n) { return (n + 15) & ~15L; }

static __mmask16 tail_mask(long n) /* the first n of 16 lanes, n in 0..16 */
{
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* e^x for x <= ~88; exactly 0 below -87.3 (and for -inf); NaN stays NaN. */
INLINE __m512 exp512(__m512 x)
{
  const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
  __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  __m512 n, r, p;
  x = _mm512_min_ps(hi, _mm512_max_ps(lo, x)); /* NaN in x passes through */
  n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  /* e^r = 1 + r + r^2 P(r) on |r| <= ln2/2, P of degree 5 (Cephes expf's
   * coefficients): about 1e-7 relative error */
  p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps((__mmask16)~tiny, _mm512_scalef_ps(p, n));
}

/* ---- linear: y = x W^T + b with W packed in panels of 32 outputs ---- */

/* An MR x 32 block of y over kc inputs: 2*MR accumulators in registers. */
INLINE void lin_kernel(const int MR, long kc, const float *a, long lda, const float *bp, float *c, long ldc,
                       int first, const float *bias, __mmask16 m0, __mmask16 m1)
{
  __m512 acc0[12], acc1[12];
  long k;
  int i;
  for (i = 0; i < MR; i++) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  for (k = 0; k < kc; k++) {
    __m512 b0 = _mm512_loadu_ps(bp + k * NR), b1 = _mm512_loadu_ps(bp + k * NR + 16);
    for (i = 0; i < MR; i++) {
      __m512 ai = _mm512_set1_ps(a[i * lda + k]);
      acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
    }
  }
  for (i = 0; i < MR; i++) {
    float *ci = c + i * ldc;
    __m512 v0, v1;
    if (first) {
      v0 = bias ? _mm512_add_ps(acc0[i], _mm512_maskz_loadu_ps(m0, bias)) : acc0[i];
      v1 = bias ? _mm512_add_ps(acc1[i], _mm512_maskz_loadu_ps(m1, bias + 16)) : acc1[i];
    } else {
      v0 = _mm512_add_ps(acc0[i], _mm512_maskz_loadu_ps(m0, ci));
      v1 = _mm512_add_ps(acc1[i], _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, v0);
    _mm512_mask_storeu_ps(ci + 16, m1, v1);
  }
}

void attnc_prims_linear_avx512(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                               const float *b, float *y, long y_stride)
{
  long panels = (n_out + NR - 1) / NR, k0, p, r0;
  for (k0 = 0; k0 < n_in; k0 += KC) {
    long kc = n_in - k0 < KC ? n_in - k0 : KC;
    int first = k0 == 0;
    for (p = 0; p < panels; p++) {
      const float *bp = packed + p * NR * n_in + k0 * NR;
      long nv = n_out - p * NR;
      __mmask16 m0 = tail_mask(nv), m1 = tail_mask(nv > 16 ? nv - 16 : 0);
      const float *bias = b ? b + p * NR : NULL;
      for (r0 = 0; r0 < rows; r0 += 12) {
        const float *a = x + r0 * x_stride + k0;
        float *c = y + r0 * y_stride + p * NR;
        switch (rows - r0 < 12 ? rows - r0 : 12) {
        case 12: lin_kernel(12, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 11: lin_kernel(11, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 10: lin_kernel(10, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 9: lin_kernel(9, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 8: lin_kernel(8, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 7: lin_kernel(7, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 6: lin_kernel(6, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 5: lin_kernel(5, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 4: lin_kernel(4, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 3: lin_kernel(3, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        case 2: lin_kernel(2, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        default: lin_kernel(1, kc, a, x_stride, bp, c, y_stride, first, bias, m0, m1); break;
        }
      }
    }
  }
}

/* ---- attention: one tile of query rows, key tiles of KT ---- */

/* S[MR][64] = Q[MR][:c] . Kt[:c][64] (Kt is the key tile, transposed, rows ldk apart). */
INLINE void qk_kernel(const int MR, long c, const float *Q, long cp, const float *Kt, long ldk, float *S)
{
  __m512 acc[4][4];
  long d;
  int i, v;
  for (i = 0; i < MR; i++)
    for (v = 0; v < 4; v++) acc[i][v] = _mm512_setzero_ps();
  for (d = 0; d < c; d++) {
    __m512 b[4];
    for (v = 0; v < 4; v++) b[v] = _mm512_loadu_ps(Kt + d * ldk + v * 16);
    for (i = 0; i < MR; i++) {
      __m512 a = _mm512_set1_ps(Q[i * cp + d]);
      for (v = 0; v < 4; v++) acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]);
    }
  }
  for (i = 0; i < MR; i++)
    for (v = 0; v < 4; v++) _mm512_store_ps(S + i * KT + v * 16, acc[i][v]);
}

/* O[MR][cv0*16 .. +nvv*16] += P[MR][:kt] . V[:kt][...] */
INLINE void pv_kernel(const int MR, long kt, const float *P, float *O, long cp, const float *v, long v_stride,
                      long cv0, const int nvv, __mmask16 last)
{
  __m512 acc[4][4];
  long j;
  int i, u;
  for (i = 0; i < MR; i++)
    for (u = 0; u < 4; u++) acc[i][u] = u < nvv ? _mm512_load_ps(O + i * cp + (cv0 + u) * 16) : _mm512_setzero_ps();
  for (j = 0; j < kt; j++) {
    const float *vr = v + j * v_stride + cv0 * 16;
    __m512 b[4];
    for (u = 0; u < 4; u++)
      b[u] = u >= nvv ? _mm512_setzero_ps()
           : (u == nvv - 1) ? _mm512_maskz_loadu_ps(last, vr + u * 16) : _mm512_loadu_ps(vr + u * 16);
    for (i = 0; i < MR; i++) {
      __m512 p = _mm512_set1_ps(P[i * KT + j]);
      for (u = 0; u < 4; u++)
        if (u < nvv) acc[i][u] = _mm512_fmadd_ps(p, b[u], acc[i][u]);
    }
  }
  for (i = 0; i < MR; i++)
    for (u = 0; u < 4; u++)
      if (u < nvv) _mm512_store_ps(O + i * cp + (cv0 + u) * 16, acc[i][u]);
}

/* Few rows (decoding): dot products along c, no transposed key tile. */
static void qk_direct(long rows, long c, const float *Q, long cp, const float *k, long k_stride, long kt, float *S,
                      __mmask16 last)
{
  long jj, r, v, nv = cp / 16;
  for (jj = 0; jj < kt; jj++) {
    const float *kr = k + jj * k_stride;
    for (r = 0; r < rows; r++) {
      __m512 acc = _mm512_setzero_ps();
      for (v = 0; v < nv; v++) {
        __m512 kv = v == nv - 1 ? _mm512_maskz_loadu_ps(last, kr + v * 16) : _mm512_loadu_ps(kr + v * 16);
        acc = _mm512_fmadd_ps(_mm512_load_ps(Q + r * cp + v * 16), kv, acc);
      }
      S[r * KT + jj] = _mm512_reduce_add_ps(acc);
    }
  }
  for (r = 0; r < rows; r++)
    for (jj = kt; jj < KT; jj++) S[r * KT + jj] = 0;
  (void)c;
}

/* Narrow heads (c <= 32): eight rows at a time keep 16 accumulators busy. */
INLINE void pv_kernel8(const int MR, long kt, const float *P, float *O, long cp, const float *v, long v_stride,
                       const int nvv, __mmask16 last)
{
  __m512 acc[8][2];
  long j;
  int i, u;
  for (i = 0; i < MR; i++)
    for (u = 0; u < 2; u++) acc[i][u] = u < nvv ? _mm512_load_ps(O + i * cp + u * 16) : _mm512_setzero_ps();
  for (j = 0; j < kt; j++) {
    const float *vr = v + j * v_stride;
    __m512 b[2];
    for (u = 0; u < 2; u++)
      b[u] = u >= nvv ? _mm512_setzero_ps()
           : (u == nvv - 1) ? _mm512_maskz_loadu_ps(last, vr + u * 16) : _mm512_loadu_ps(vr + u * 16);
    for (i = 0; i < MR; i++) {
      __m512 p = _mm512_set1_ps(P[i * KT + j]);
      for (u = 0; u < 2; u++)
        if (u < nvv) acc[i][u] = _mm512_fmadd_ps(p, b[u], acc[i][u]);
    }
  }
  for (i = 0; i < MR; i++)
    for (u = 0; u < 2; u++)
      if (u < nvv) _mm512_store_ps(O + i * cp + u * 16, acc[i][u]);
}

/* Scores of row r in this key tile -> probabilities; updates M, L, O. */
static void softmax_row(const attnc_tile *t, long r, long j0, long kt, float *srow, float *M, float *L, float *O, long cp)
{
  long lo, hi, a, b, v, i = t->i0 + r / t->q_group, hh = r % t->q_group;
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 s[4], mx = ninf, sum = _mm512_setzero_ps();
  __mmask16 nan_lanes = 0; /* max_ps forgets NaN operands: count them apart */
  float rowmax, m_new, alpha;
  attnc_prims_row_range(t, r, &lo, &hi);
  a = (lo > j0 ? lo : j0) - j0;
  b = (hi < j0 + kt - 1 ? hi : j0 + kt - 1) - j0;
  if (a > b) {
    memset(srow, 0, sizeof(float) * KT);
    return;
  }
  if (a == 0 && b == KT - 1 && !t->bias && !t->mask) {
    /* every key of the tile is visible: no masking work */
    for (v = 0; v < 4; v++) {
      s[v] = _mm512_load_ps(srow + v * 16);
      mx = _mm512_max_ps(mx, s[v]);
      nan_lanes |= _mm512_cmp_ps_mask(s[v], s[v], _CMP_UNORD_Q);
    }
  } else
  for (v = 0; v < 4; v++) {
    __m512i jv = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(v * 16)));
    __mmask16 ok = _mm512_cmp_epi32_mask(jv, _mm512_set1_epi32((int)a), _MM_CMPINT_NLT) &
                   _mm512_cmp_epi32_mask(jv, _mm512_set1_epi32((int)b), _MM_CMPINT_LE);
    s[v] = _mm512_load_ps(srow + v * 16);
    if (ok && t->bias) {
      const float *brow = t->bias + hh * t->bias_h + i * t->bias_i + (j0 + v * 16) * t->bias_j;
      if (t->bias_j == 1) {
        s[v] = _mm512_mask_add_ps(s[v], ok, s[v], _mm512_maskz_loadu_ps(ok, brow));
      } else {
        float tmp[16];
        int q;
        for (q = 0; q < 16; q++) tmp[q] = (ok >> q) & 1 ? brow[q * t->bias_j] : 0.0f;
        s[v] = _mm512_add_ps(s[v], _mm512_loadu_ps(tmp));
      }
    }
    if (ok && t->mask) {
      const unsigned char *mrow = t->mask + (j0 + v * 16) * t->mask_j;
      if (t->mask_j == 1) {
        __m128i bytes = _mm_maskz_loadu_epi8(ok, mrow);
        ok &= _mm512_cmp_epi32_mask(_mm512_cvtepu8_epi32(bytes), _mm512_setzero_si512(), _MM_CMPINT_NE);
      } else {
        int q;
        for (q = 0; q < 16; q++)
          if (((ok >> q) & 1) && !mrow[q * t->mask_j]) ok &= (__mmask16)~(1u << q);
      }
    }
    s[v] = _mm512_mask_blend_ps(ok, ninf, s[v]);
    mx = _mm512_max_ps(mx, s[v]);
    nan_lanes |= _mm512_cmp_ps_mask(s[v], s[v], _CMP_UNORD_Q);
  }
  /* the horizontal max can drop NaN lanes: a NaN score makes the row NaN */
  rowmax = nan_lanes ? NAN : _mm512_reduce_max_ps(mx);
  if (rowmax == -INFINITY) {
    memset(srow, 0, sizeof(float) * KT);
    return;
  }
  m_new = M[r] > rowmax ? M[r] : rowmax;
  alpha = M[r] == -INFINITY ? 0.0f : expf(M[r] - m_new);
  for (v = 0; v < 4; v++) {
    __m512 p = exp512(_mm512_sub_ps(s[v], _mm512_set1_ps(m_new)));
    _mm512_store_ps(srow + v * 16, p);
    sum = _mm512_add_ps(sum, p);
  }
  L[r] = L[r] * alpha + _mm512_reduce_add_ps(sum);
  M[r] = m_new;
  if (alpha != 1.0f) {
    __m512 al = _mm512_set1_ps(alpha);
    for (v = 0; v < cp; v += 16) _mm512_store_ps(O + r * cp + v, _mm512_mul_ps(al, _mm512_load_ps(O + r * cp + v)));
  }
}

void attnc_prims_attend_avx512(const attnc_tile *t)
{
  const long rows = t->rows, c = t->c, cp = round16(c), nv = cp / 16, r16 = round16(rows);
  float *O = t->work, *M = O + r16 * cp, *L = M + r16, *S = L + r16, *Kt = S + r16 * KT, *Q = Kt + cp * KT;
  const __mmask16 last = tail_mask(c - (nv - 1) * 16);
  const __m512 scale = _mm512_set1_ps(t->scale);
  long r, d, v, jmin = t->k_end, jmax = t->k_begin - 1, j0;

  for (r = 0; r < rows; r++) {
    const float *q = t->q + (r / t->q_group) * t->q_stride + (r % t->q_group) * t->q_hstride;
    long lo, hi;
    for (v = 0; v < nv; v++) {
      __m512 x = (v == nv - 1) ? _mm512_maskz_loadu_ps(last, q + v * 16) : _mm512_loadu_ps(q + v * 16);
      _mm512_store_ps(Q + r * cp + v * 16, _mm512_mul_ps(x, scale));
      _mm512_store_ps(O + r * cp + v * 16, _mm512_setzero_ps());
    }
    M[r] = -INFINITY;
    L[r] = 0;
    attnc_prims_row_range(t, r, &lo, &hi);
    if (lo <= hi) {
      if (lo < jmin) jmin = lo;
      if (hi > jmax) jmax = hi;
    }
  }

  for (j0 = jmin; j0 <= jmax; j0 += KT) {
    long kt = jmax - j0 + 1 < KT ? jmax - j0 + 1 : KT, jj, r0, cv0;
    /* the key tile, transposed so scores vectorise along keys (done once per
     * kv head by the keys phase when t->kt is set) */
    const float *ktile = Kt;
    long ldk = KT;
    if (!t->kt && rows <= 8) {
      qk_direct(rows, c, Q, cp, t->k + j0 * t->k_stride, t->k_stride, kt, S, last);
      goto scores_done;
    }
    if (t->kt) {
      ktile = t->kt + j0;
      ldk = t->kt_stride;
    } else {
      for (jj = 0; jj < kt; jj++) {
        const float *kr = t->k + (j0 + jj) * t->k_stride;
        for (d = 0; d < c; d++) Kt[d * KT + jj] = kr[d];
      }
      for (; jj < KT; jj++)
        for (d = 0; d < c; d++) Kt[d * KT + jj] = 0;
    }
    for (r0 = 0; r0 < rows; r0 += 4) {
      switch (rows - r0 < 4 ? rows - r0 : 4) {
      case 4: qk_kernel(4, c, Q + r0 * cp, cp, ktile, ldk, S + r0 * KT); break;
      case 3: qk_kernel(3, c, Q + r0 * cp, cp, ktile, ldk, S + r0 * KT); break;
      case 2: qk_kernel(2, c, Q + r0 * cp, cp, ktile, ldk, S + r0 * KT); break;
      default: qk_kernel(1, c, Q + r0 * cp, cp, ktile, ldk, S + r0 * KT); break;
      }
    }
  scores_done:
    for (r = 0; r < rows; r++) softmax_row(t, r, j0, kt, S + r * KT, M, L, O, cp);
    if (nv <= 2) {
      for (r0 = 0; r0 < rows; r0 += 8) {
        const float *vt = t->v + j0 * t->v_stride;
#define PV8_ROWS(NVV)                                                                               \
  switch (rows - r0 < 8 ? rows - r0 : 8) {                                                          \
  case 8: pv_kernel8(8, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, NVV, last); break;       \
  case 7: pv_kernel8(7, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, NVV, last); break;       \
  case 6: pv_kernel8(6, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, NVV, last); break;       \
  case 5: pv_kernel8(5, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, NVV, last); break;       \
  case 4: pv_kernel8(4, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, NVV, last); break;       \
  case 3: pv_kernel8(3, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, NVV, last); break;       \
  case 2: pv_kernel8(2, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, NVV, last); break;       \
  default: pv_kernel8(1, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, NVV, last); break;      \
  }
        if (nv == 2) { PV8_ROWS(2) } else { PV8_ROWS(1) }
#undef PV8_ROWS
      }
    } else
    for (r0 = 0; r0 < rows; r0 += 4) {
      for (cv0 = 0; cv0 < nv; cv0 += 4) {
        long nvv = nv - cv0 < 4 ? nv - cv0 : 4;
        __mmask16 lm = (cv0 + nvv == nv) ? last : (__mmask16)0xFFFF;
        const float *vt = t->v + j0 * t->v_stride;
        /* rows and vector count as compile-time constants: no tests in the inner loop */
#define PV_ROWS(NVV)                                                                                     \
  switch (rows - r0 < 4 ? rows - r0 : 4) {                                                               \
  case 4: pv_kernel(4, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, cv0, NVV, lm); break;          \
  case 3: pv_kernel(3, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, cv0, NVV, lm); break;          \
  case 2: pv_kernel(2, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, cv0, NVV, lm); break;          \
  default: pv_kernel(1, kt, S + r0 * KT, O + r0 * cp, cp, vt, t->v_stride, cv0, NVV, lm); break;         \
  }
        switch (nvv) {
        case 4: PV_ROWS(4) break;
        case 3: PV_ROWS(3) break;
        case 2: PV_ROWS(2) break;
        default: PV_ROWS(1) break;
        }
#undef PV_ROWS
      }
    }
  }

  for (r = 0; r < rows; r++) {
    float *o = t->o + (r / t->q_group) * t->o_stride + (r % t->q_group) * t->o_hstride;
    if (t->m_out) {
      t->m_out[r] = M[r];
      t->l_out[r] = L[r];
      for (v = 0; v < nv; v++)
        _mm512_mask_storeu_ps(o + v * 16, v == nv - 1 ? last : (__mmask16)0xFFFF, _mm512_load_ps(O + r * cp + v * 16));
    } else if (M[r] != -INFINITY) { /* saw a key: normalise (a NaN stays NaN) */
      __m512 inv = _mm512_set1_ps(1.0f / L[r]);
      for (v = 0; v < nv; v++)
        _mm512_mask_storeu_ps(o + v * 16, v == nv - 1 ? last : (__mmask16)0xFFFF,
                              _mm512_mul_ps(inv, _mm512_load_ps(O + r * cp + v * 16)));
    } else {
      attnc_prims_empty_row(t, r, o);
    }
  }
}

void attnc_prims_sigmoid_mul_avx512(const float *g, float *o, long n)
{
  long i;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (i = 0; i + 16 <= n; i += 16) {
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_loadu_ps(g + i)));
    _mm512_storeu_ps(o + i, _mm512_div_ps(_mm512_loadu_ps(o + i), _mm512_add_ps(one, e)));
  }
  for (; i < n; i++) o[i] *= 1.0f / (1.0f + expf(-g[i]));
}
