/* AVX512-BF16 without AMX: linear_bf16 and attend_bf16 on vdpbf16ps,
 * which sums two bf16 products into each f32 lane.  On AMD's Zen 4 and
 * Zen 5 it retires as many lanes per cycle as an f32 FMA, so it does
 * twice the arithmetic (build/fma_peak measures both; docs/performance.md
 * has the readings); Intel's AMX parts run it at half their FMA rate, and
 * prims.c takes their tiles there instead.  The same contract as the
 * f32-widening AVX-512 versions (templates/abi.h): x, q, k, v and p may
 * be rounded to bf16, products are summed in f32.  Compiled with
 * per-function target attributes, so the file builds anywhere. */
#include <math.h>
#include <string.h>

#include "prims.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <cpuid.h>

#include "prims_bf16.h"

#define NR ATTNC_PACK_NR

/* CPUID leaf 7 sub-leaf 1: AVX512-BF16 (EAX bit 5), with the AVX-512
 * subsets the helpers use (which also say the OS saves the ZMM state) */
int attnc_prims_bf16_ready(void)
{
  unsigned a, b, c, d;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
    return 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
}

/* ---- linear_bf16 ---- */

enum { XC = 512, XR = 48 }; /* x rounded to bf16 for XR rows (a pass) by XC inputs at a time, on the stack */

/* c (MR rows by the panel's 32 outputs, m0 and m1 the live ones) plus
 * (unless first) c's old values, plus bias (when given: the last chunk of
 * inputs), += npair pairs of inputs: MR rows of xb (bf16 pairs, XC / 2
 * apart) times the panel's pairs from wp (pair kk's 32 outputs at wp + kk
 * * 128, each lane the output's weights for inputs 2kk and 2kk + 1: the
 * pair layout vdpbf16ps multiplies). */
BF16 static inline __attribute__((always_inline)) void lin_dp_kernel(const int MR, long npair, const unsigned *xb,
                                                                       const unsigned char *wp, float *c, long ldc, int first,
                                                                       const float *bias, __mmask16 m0, __mmask16 m1)
{
  __m512 acc0[12], acc1[12];
  long kk;
  int i;
  for (i = 0; i < MR; i++) {
    acc0[i] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, c + i * ldc);
    acc1[i] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
  }
  for (kk = 0; kk < npair; kk++) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wp + kk * 128), w1 = (__m512bh)_mm512_loadu_si512(wp + kk * 128 + 64);
    for (i = 0; i < MR; i++) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xb[i * (XC / 2) + kk]);
      acc0[i] = _mm512_dpbf16_ps(acc0[i], xv, w0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], xv, w1);
    }
  }
  {
    const __m512 c0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 c1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (i = 0; i < MR; i++) {
      _mm512_mask_storeu_ps(c + i * ldc, m0, _mm512_add_ps(acc0[i], c0));
      _mm512_mask_storeu_ps(c + i * ldc + 16, m1, _mm512_add_ps(acc1[i], c1));
    }
  }
}

/* Rows in blocks of up to 12, the blocks in passes of four (XR rows) that
 * each sweep every panel: a pass's x is rounded to bf16 pairs once per
 * XC inputs, onto the stack, and stays in L1 while the panels stream
 * from L2.  Inputs past n_in read as 0, where the panels are 0 too. */
BF16 void attnc_prims_linear_bf16_dp(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                     const float *b, float *y, long y_stride)
{
  const long panels = (n_out + NR - 1) / NR, nblk = (rows + 11) / 12, npass = (nblk + 3) / 4;
  unsigned xb[XR * (XC / 2)] __attribute__((aligned(64)));
  long pass, p, bk, k0, r, q;
  for (pass = 0; pass < npass; pass++) {
    const long b0 = pass * nblk / npass, b1 = (pass + 1) * nblk / npass;
    const long pr0 = b0 * rows / nblk, prows = b1 * rows / nblk - pr0;
    for (k0 = 0; k0 < n_in; k0 += XC) {
      const long nk = n_in - k0 < XC ? n_in - k0 : XC, npair = (nk + 1) / 2;
      for (r = 0; r < prows; r++)
        for (q = 0; q < nk; q += 32) {
          const long n = nk - q;
          const __mmask16 lo = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
          const __mmask16 hi = n >= 32 ? (__mmask16)0xFFFF : n <= 16 ? (__mmask16)0 : (__mmask16)((1u << (n - 16)) - 1u);
          const float *ar = x + (pr0 + r) * x_stride + k0 + q;
          _mm512_store_si512(xb + r * (XC / 2) + q / 2,
                             (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, ar + 16), _mm512_maskz_loadu_ps(lo, ar)));
        }
      for (p = 0; p < panels; p++) {
        const unsigned char *wp = (const unsigned char *)packed + p * ATTNC_BF16_PANEL(n_in) + k0 / 2 * 128;
        const long nv = n_out - p * NR;
        const __mmask16 m0 = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1u);
        const __mmask16 m1 = nv >= 32 ? (__mmask16)0xFFFF : nv <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nv - 16)) - 1u);
        const float *bias = b && k0 + XC >= n_in ? b + p * NR : NULL;
        const int first = k0 == 0;
        for (bk = b0; bk < b1; bk++) {
          const long r0 = bk * rows / nblk, mr = (bk + 1) * rows / nblk - r0;
          const unsigned *xr = xb + (r0 - pr0) * (XC / 2);
          float *c = y + r0 * y_stride + p * NR;
#define LINDP_CASE(MR) \
  case MR: lin_dp_kernel(MR, npair, xr, wp, c, y_stride, first, bias, m0, m1); break;
          switch (mr) {
            LINDP_CASE(12) LINDP_CASE(11) LINDP_CASE(10) LINDP_CASE(9) LINDP_CASE(8) LINDP_CASE(7) LINDP_CASE(6)
            LINDP_CASE(5) LINDP_CASE(4) LINDP_CASE(3) LINDP_CASE(2)
          default: lin_dp_kernel(1, npair, xr, wp, c, y_stride, first, bias, m0, m1); break;
          }
#undef LINDP_CASE
        }
      }
    }
  }
}

/* ---- attend_bf16 ---- */

/* 2^x for x <= 0 (0 for -inf), to 7.5e-5 of itself: a degree-3
 * polynomial on [0, 1), the scale by 2^floor(x) exact.  Its p is rounded
 * to bf16 (2^-9) next, so the error is 4% of that rounding's, for two
 * fewer multiply-adds than exp2_neg's degree 5; a row's largest p,
 * 0.99993, still rounds to 1.  The coefficients are a relative-error fit
 * (iteratively reweighted least squares). */
BF16 static inline __m512 exp2_neg_p(__m512 x)
{
  const __m512 r = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(0.078024022f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.226067066f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.695833981f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.999925137f));
  return _mm512_scalef_ps(p, x);
}

enum { KC = 128 }; /* keys of k and v rounded to bf16 at a time, for all of a call's rows */

/* attend_bf16 on vdpbf16ps, in the transposed form of prims_amx.c's
 * attend_cols16 (whose rules it keeps): each 16-lane vector is one key's
 * score, or one dim of O, across 16 query rows, so the softmax's max and
 * sum over keys are lane-wise.
 *   S^T: for key j, sum over dim pairs dd of k's pair (broadcast) times
 *        Q^T's row dd (16 rows' dims 2dd, 2dd + 1);
 *   O^T: for dim d, sum over key pairs jj of v's pair (keys 2jj, 2jj + 1
 *        of dim d, broadcast) times P^T's row jj (16 rows' p of both).
 * O^T stays in the work region (c vectors a group of 16 rows) and is read
 * and written once per 32 keys, so rescaling it when a row's max grows
 * costs a multiply as it is read: unlike the tiles' version the max is
 * kept exact (not rounded up to an integer), and a row's largest p is 1,
 * exact in bf16 (with head dim 128, where few keys dominate a row, the
 * rounded max's p erred past the test's bound).  p is rounded to bf16 and
 * summed as rounded.
 * Work (floats): O^T (r16 x c), M, L (r16), Q^T (r16 x c / 2), K and V
 * pairs (KC x c), S (512), P (256), B (512), LO, HI, BO (r16 int). */
BF16 static void attend_cols16_dp(const attnc_tile *t, float s2)
{
  const long rows = t->rows, c = t->c, r16 = (rows + 15) / 16 * 16, ng = r16 / 16, nc = c / 32, np = c / 2;
  const float *bias0 = t->bias ? t->bias + t->i0 * t->bias_i : NULL;
  const int bias_rows = t->bias && t->bias_j == 1;
  float *O = t->work, *M = O + r16 * c, *L = M + r16, *S, *Bb;
  unsigned *Qt = (unsigned *)(L + r16), *Kc, *Vp, *Pb;
  int *LO, *HI, *BO;
  long jmin, jmax, lo_max, hi_min, g, c0, x, cc;
  const __m512bh ones = (__m512bh)_mm512_set1_epi32(0x3f803f80); /* 1.0 in both bf16 halves */
  Kc = Qt + r16 * np;
  Vp = Kc + KC * np;
  S = (float *)(Vp + KC * np);
  Pb = (unsigned *)(S + 512);
  Bb = (float *)(Pb + 256);
  LO = (int *)(Bb + 512);
  HI = LO + r16;
  BO = HI + r16;
  attnc_prims_rows_begin(t, r16, NULL, c, LO, HI, BO, M, L, &jmin, &jmax, &lo_max, &hi_min);
  memset(O, 0, sizeof(float) * (size_t)(r16 * c));
  cols16_qt(t, ng, Qt); /* group g, pair dd at Qt + (g * np + dd) * 16 */
  for (c0 = jmin; c0 <= jmax; c0 += KC) {
    const long c1 = jmax + 1 - c0 < KC ? jmax + 1 : c0 + KC, nblk = (c1 - c0 + 31) / 32;
    long b, jj, n16;
    /* k by 16 keys: for keys jj*16.., pair dd's 16 keys at Kc + (jj *
     * np + dd) * 16 (16 x 16 transposes of bf16 pairs), zero past the last
     * key; the score loop then broadcasts from one base */
    for (jj = 0; jj < nblk * 2; jj++)
      for (cc = 0; cc < nc; cc++) {
        __m512i w[16];
        for (x = 0; x < 16; x++) {
          const long j = c0 + jj * 16 + x;
          const float *k = t->k + j * t->k_stride + cc * 32;
          w[x] = j < c1 ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(k + 16), _mm512_loadu_ps(k)) : _mm512_setzero_si512();
        }
        transpose16_epi32(w);
        for (x = 0; x < 16; x++) _mm512_store_si512(Kc + (jj * np + cc * 16 + x) * 16, w[x]);
      }
    /* v by pairs of keys: pair jj's dim d at Vp[jj * c + d], zero past the last key */
    for (jj = 0; jj < nblk * 16; jj++)
      for (n16 = 0; n16 < c / 16; n16++) {
        const long je = c0 + 2 * jj;
        const __m512 e = je < c1 ? _mm512_loadu_ps(t->v + je * t->v_stride + n16 * 16) : _mm512_setzero_ps();
        const __m512 o = je + 1 < c1 ? _mm512_loadu_ps(t->v + (je + 1) * t->v_stride + n16 * 16) : _mm512_setzero_ps();
        _mm512_store_si512(Vp + jj * c + n16 * 16, pair_bf16(e, o));
      }
    for (g = 0; g < ng; g++) {
      const long live = rows - g * 16;
      const __m512i lov = _mm512_load_si512(LO + g * 16), hiv = _mm512_load_si512(HI + g * 16);
      const unsigned *qt = Qt + g * np * 16;
      float *Og = O + g * 16 * c;
      __m512 Mv = _mm512_load_ps(M + g * 16), Lv = _mm512_load_ps(L + g * 16);
      for (b = 0; b < nblk; b++) {
        const long j0 = c0 + b * 32, kt = c1 - j0 < 32 ? c1 - j0 : 32;
        const int inside = kt == 32 && j0 >= lo_max && j0 + 31 <= hi_min; /* every row sees every key */
        const int plain = inside && !t->mask && !t->bias;
        __m512 mx, mnew, msub, alpha, sum = _mm512_setzero_ps(), s2e;
        __mmask16 grew;
        long d0, h, dd;
        /* S^T of the block's 32 keys, 16 at a time */
        for (h = 0; h < 2; h++) {
          const unsigned *kb = Kc + (b * 2 + h) * np * 16;
          __m512 acc[16];
          for (x = 0; x < 16; x++) acc[x] = _mm512_setzero_ps();
          for (dd = 0; dd < np; dd++) {
            const __m512bh qv = (__m512bh)_mm512_load_si512(qt + dd * 16);
            for (x = 0; x < 16; x++) acc[x] = _mm512_dpbf16_ps(acc[x], (__m512bh)_mm512_set1_epi32((int)kb[dd * 16 + x]), qv);
          }
          for (x = 0; x < 16; x++) _mm512_store_ps(S + (h * 16 + x) * 16, acc[x]);
        }
        mx = cols16_scores(t, S, Bb, bias0, bias_rows, BO, lov, hiv, g, live, j0, kt, inside, plain, s2, &s2e);
        /* the new max (a NaN score makes it NaN or its p NaN, and either
         * makes the row NaN); a row's largest p is then 1, exact in bf16 */
        mnew = _mm512_max_ps(Mv, mx);
        msub = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mnew, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), mnew, _mm512_setzero_ps());
        alpha = exp2_neg(_mm512_sub_ps(Mv, msub)); /* 0 for a row that saw no key yet */
        grew = _mm512_cmp_ps_mask(mnew, Mv, _CMP_NEQ_UQ) & _mm512_cmp_ps_mask(Mv, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
        /* p = 2^(s - M), keys 2jj and 2jj + 1 paired as P^T's row jj */
        for (jj = 0; jj < 16; jj++) {
          const __m512 pe = exp2_neg_p(_mm512_fmsub_ps(_mm512_load_ps(S + 2 * jj * 16), s2e, msub));
          const __m512 po = exp2_neg_p(_mm512_fmsub_ps(_mm512_load_ps(S + (2 * jj + 1) * 16), s2e, msub));
          const __m512i w = pair_bf16(pe, po);
          _mm512_store_si512(Pb + jj * 16, w);
          sum = _mm512_dpbf16_ps(sum, (__m512bh)w, ones); /* the pair's two p, as rounded */
        }
        Lv = _mm512_fmadd_ps(Lv, alpha, sum);
        Mv = mnew;
        /* O^T = alpha O^T (rows whose max moved) + V^T P^T, 16 dims at a time */
        for (d0 = 0; d0 < c; d0 += 16) {
          const unsigned *vb = Vp + b * 16 * c + d0;
          __m512 acc[16];
          for (x = 0; x < 16; x++) {
            acc[x] = _mm512_load_ps(Og + (d0 + x) * 16);
            if (grew) acc[x] = _mm512_mul_ps(acc[x], alpha);
          }
          for (jj = 0; jj < 16; jj++) {
            const __m512bh pv = (__m512bh)_mm512_load_si512(Pb + jj * 16);
            for (x = 0; x < 16; x++) acc[x] = _mm512_dpbf16_ps(acc[x], (__m512bh)_mm512_set1_epi32((int)vb[jj * c + x]), pv);
          }
          for (x = 0; x < 16; x++) _mm512_store_ps(Og + (d0 + x) * 16, acc[x]);
        }
      }
      _mm512_store_ps(M + g * 16, Mv);
      _mm512_store_ps(L + g * 16, Lv);
    }
  }
  /* the rows out */
  cols16_out(t, ng, O, M, L);
}

/* attend_bf16 on vdpbf16ps: a tile of 16 to 256 rows, head dim a multiple
 * of 32 (up to 256), a positive scale, a bias contiguous along the keys
 * or (one head) the rows, a mask contiguous along the keys, no softcap or
 * key split, and scores small enough for q and k in bf16 (above); the
 * rest go to the f32 primitive (attnc_prims_attend_avx512), as with AMX. */
BF16 void attnc_prims_attend_bf16_dp(const attnc_tile *t)
{
  const float s2 = t->scale * ATTNC_LOG2E;
  const int bias_rows = t->bias && t->bias_j == 1, bias_cols = t->bias && !bias_rows && t->bias_i == 1 && t->q_group == 1;
  if (t->rows < 16 || t->rows > 256 || (t->bias && !bias_rows && !bias_cols) || (t->mask && t->mask_j != 1) || t->m_out ||
      t->c % 32 || t->c > 256 || t->softcap > 0 || !(s2 > 0) || !attnc_prims_fits_lanes(t) || qk_rounding_too_coarse(t, s2)) {
    attnc_prims_attend_avx512(t);
    return;
  }
  attend_cols16_dp(t, s2);
}

#else
int attnc_prims_bf16_ready(void) { return 0; }
void attnc_prims_linear_bf16_dp(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                const float *b, float *y, long y_stride)
{
  attnc_prims_linear_bf16_generic(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
}
void attnc_prims_attend_bf16_dp(const attnc_tile *t) { attnc_prims_attend_generic(t); }
#endif
