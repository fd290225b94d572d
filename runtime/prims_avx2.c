/* AVX2 + FMA primitives, for x86-64 CPUs that have those but not
 * AVX-512.  The algorithms are those of
 * prims_avx512.c on 8 lanes instead of 16: a packed, register-blocked
 * GEMM, and attention with query rows across the lanes and an online
 * softmax down the columns.  This file is compiled with -mavx2 -mfma;
 * nothing here runs unless prims.c found both on the CPU. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "prims.h"
#include "prefetch.h"

#define NR ATTNC_PACK_NR
#define KC 1024 /* inputs per pass of the GEMM */
#define MC 48   /* rows per pass of the GEMM: their x (48 KiB at 256 inputs) stays in L2 */
#define KT ATTNC_ATTEND_KT
#define INLINE static inline __attribute__((always_inline))

static long round8(long n) { return (n + 7) & ~7L; }

/* The first n of 8 lanes set (n clamped to 0..8), as maskload wants it. */
static __m256i lanes8(long n)
{
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0 ? 0 : n > 8 ? 8 : n)), iota);
}

/* n floats from p (n in 1..8), the rest 0; nothing past p[n-1] is read. */
static __m256 load_n(const float *p, long n)
{
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(n));
}

/* e^x for x <= 88.3 (sigmoid_mul clamps its argument there); exactly 0
 * below -87.3 (and for -inf); NaN stays NaN.  2^n is built in the
 * exponent bits, which holds for the n in [-126, 127] that this range
 * gives.  The attention uses exp2_neg below. */
INLINE __m256 exp256_neg(__m256 x)
{
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 n, r, p;
  __m256i e;
  x = _mm256_max_ps(lo, x); /* NaN in x passes through (maxps returns its second operand) */
  n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  /* e^r = 1 + r + r^2 P(r) on |r| <= ln2/2, P of degree 5 (Cephes expf's
   * coefficients): about 1e-7 relative error */
  p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* The attention works in base 2 (ATTNC_LOG2E in prims.h): six multiplies
 * or multiply-adds per vector instead of eleven, and no round or convert. */

/* The stale max: once every row has a running max m, a key tile whose
 * scores stay within m + STALE_MAX (in base 2) is exponentiated against
 * m itself, inside the q.k kernel, and m, the sums so far and o need no
 * rescaling.  Probabilities then reach 2^STALE_MAX = 256 at most, which
 * float holds as well as 1.  A tile past that is scored again and goes
 * the usual way, which moves m up. */
#define STALE_MAX 8.0f

/* 2^x for x <= 127 (the softmax's x <= 0); exactly 0 below -126.5 (and
 * for -inf); NaN stays NaN.  n = x rounded by adding 1.5 * 2^23 + 127,
 * whose low mantissa bits then hold n + 127, 2^n's exponent bits; 2^r on
 * |r| <= 1/2 by prims.h's ATTNC_EXP2_P0..P5.  x is clamped at -127, where those exponent
 * bits are 0: the factor is +0 and so is the result, with no compare and
 * no mask. */
INLINE __m256 exp2_neg(__m256 x)
{
  const __m256 magic = _mm256_set1_ps(12583039.0f); /* 1.5 * 2^23 + 127 */
  __m256 nf, r, p;
  x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x); /* NaN in x passes through */
  nf = _mm256_add_ps(x, magic);
  r = _mm256_sub_ps(x, _mm256_sub_ps(nf, magic));
  p = _mm256_set1_ps(ATTNC_EXP2_P5);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTNC_EXP2_P4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTNC_EXP2_P3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTNC_EXP2_P2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTNC_EXP2_P1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTNC_EXP2_P0));
  /* 2^n: (n + 127) << 23; the rest of the magic number's bits shift out */
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(nf), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* The softcap, cap * tanh(s / cap), inv = 1 / cap (ATTNC_TANH_* in
 * prims.h): the Taylor series for small |s / cap|, and where any lane is
 * past it (1 - e) / (1 + e), e = e^(-2|s / cap|), divided by a reciprocal
 * estimate refined by one Newton step, with the sign of s.  NaN stays
 * NaN. */
INLINE __m256 softcap256(__m256 s, float cap, float inv)
{
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 x = _mm256_mul_ps(s, _mm256_set1_ps(inv)), x2 = _mm256_mul_ps(x, x);
  const __m256 a = _mm256_andnot_ps(sign, x);
  const __m256 big = _mm256_cmp_ps(a, _mm256_set1_ps(ATTNC_TANH_SMALL), _CMP_NLT_UQ); /* and NaN */
  __m256 p = _mm256_set1_ps(ATTNC_TANH_T11);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(ATTNC_TANH_T9));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(ATTNC_TANH_T7));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(ATTNC_TANH_T5));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(ATTNC_TANH_T3));
  p = _mm256_fmadd_ps(_mm256_mul_ps(x, x2), p, x);
  if (_mm256_movemask_ps(big)) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp2_neg(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f * ATTNC_LOG2E)));
    const __m256 den = _mm256_add_ps(one, e);
    __m256 y = _mm256_rcp_ps(den);
    y = _mm256_mul_ps(y, _mm256_fnmadd_ps(den, y, _mm256_set1_ps(2.0f)));
    p = _mm256_blendv_ps(p, _mm256_or_ps(_mm256_mul_ps(_mm256_sub_ps(one, e), y), _mm256_and_ps(x, sign)), big);
  }
  return _mm256_mul_ps(_mm256_set1_ps(cap), p);
}

/* ---- linear: y = x W^T + b with W packed by attnc_prims_pack16 ---- */

/* An MR x 16 block of y (half a panel) over kc inputs: 2*MR accumulators.
 * nv: how many of the 16 columns are real (a tail panel has fewer). */
INLINE void lin_kernel(const int MR, long kc, const float *a, long lda, const float *bp, float *c, long ldc,
                       int first, const float *bias, long nv)
{
  __m256 acc0[6], acc1[6];
  long k;
  int i;
  for (i = 0; i < MR; i++) {
    acc0[i] = _mm256_setzero_ps();
    acc1[i] = _mm256_setzero_ps();
  }
  for (k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_loadu_ps(bp + k * 16), b1 = _mm256_loadu_ps(bp + k * 16 + 8);
    for (i = 0; i < MR; i++) {
      const __m256 ai = _mm256_broadcast_ss(a + i * lda + k);
      acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
    }
  }
  if (nv >= 16) {
    for (i = 0; i < MR; i++) {
      float *ci = c + i * ldc;
      const __m256 base0 = first ? (bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps()) : _mm256_loadu_ps(ci);
      const __m256 base1 = first ? (bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps()) : _mm256_loadu_ps(ci + 8);
      _mm256_storeu_ps(ci, _mm256_add_ps(acc0[i], base0));
      _mm256_storeu_ps(ci + 8, _mm256_add_ps(acc1[i], base1));
    }
  } else { /* the panel's tail: only nv columns exist in y and b */
    float tmp[6][16];
    long n;
    for (i = 0; i < MR; i++) { /* a loop the compiler unrolls: acc stays in registers */
      _mm256_storeu_ps(tmp[i], acc0[i]);
      _mm256_storeu_ps(tmp[i] + 8, acc1[i]);
    }
    for (i = 0; i < MR; i++)
      for (n = 0; n < nv; n++) c[i * ldc + n] = tmp[i][n] + (first ? (bias ? bias[n] : 0.0f) : c[i * ldc + n]);
  }
}

/* Column n (n + col0 of the weight) of row r at y + r * y_stride +
 * (n + col0) / head_w * head_stride + (n + col0) % head_w: a 16-wide half
 * of a panel never spans two heads, since col0 and head_w are multiples
 * of 32.  head_w = n_out and col0 = 0 is the plain layout. */
static void linear_cols(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                        const float *b, float *y, long y_stride, long col0, long head_w, long head_stride)
{
  /* Rows in blocks of at most 6, their sizes differing by at most one
   * (128 rows: 18 of 6 and 4 of 5, not 21 of 6 and one of 2 at a third
   * of the FMA rate), in passes of at most 8 blocks (MC rows), also even:
   * a pass's x stays in L2 while every panel goes by.  Which block a row
   * falls in never changes how its outputs are summed. */
  const long panels = (n_out + NR - 1) / NR, nblk = (rows + 5) / 6, npass = (nblk + MC / 6 - 1) / (MC / 6);
  long pass, k0, p, h, bk;
  for (pass = 0; pass < npass; pass++) {
    const long b0 = pass * nblk / npass, b1 = (pass + 1) * nblk / npass;
    for (k0 = 0; k0 < n_in; k0 += KC) {
      long kc = n_in - k0 < KC ? n_in - k0 : KC;
      int first = k0 == 0;
      for (p = 0; p < panels; p++)
        for (h = 0; h < NR; h += 16) {
          const float *bp = packed + p * NR * n_in + h * n_in + k0 * 16; /* pack16: half h / 16 of panel p */
          const long nv = n_out - p * NR - h;
          const float *bias = b ? b + p * NR + h : NULL;
          const long col = col0 + p * NR + h;
          float *yc = y + col / head_w * head_stride + col % head_w;
          if (nv <= 0) break;
          for (bk = b0; bk < b1; bk++) {
            const long r0 = bk * rows / nblk, mr = (bk + 1) * rows / nblk - r0;
            const float *a = x + r0 * x_stride + k0;
            float *c = yc + r0 * y_stride;
            switch (mr) {
            case 6: lin_kernel(6, kc, a, x_stride, bp, c, y_stride, first, bias, nv); break;
            case 5: lin_kernel(5, kc, a, x_stride, bp, c, y_stride, first, bias, nv); break;
            case 4: lin_kernel(4, kc, a, x_stride, bp, c, y_stride, first, bias, nv); break;
            case 3: lin_kernel(3, kc, a, x_stride, bp, c, y_stride, first, bias, nv); break;
            case 2: lin_kernel(2, kc, a, x_stride, bp, c, y_stride, first, bias, nv); break;
            default: lin_kernel(1, kc, a, x_stride, bp, c, y_stride, first, bias, nv); break;
            }
          }
        }
    }
  }
}

void attnc_prims_linear_avx2(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                             const float *b, float *y, long y_stride)
{
  if (n_out > 0) linear_cols(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, 0, n_out, 0);
}

void attnc_prims_linear_heads_avx2(const float *x, long rows, long x_stride, long n_in, const float *packed,
                                   long n_out, const float *b, float *y, long y_stride, long col0, long head_w,
                                   long head_stride)
{
  linear_cols(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, col0, head_w, head_stride);
}

/* ---- linear over int8 weights kept int8 (attnc_prims_pack_q8) ----
 * Each k's 16 int8 weights of a half panel widened to f32 in registers;
 * the row's scale multiplies the sums at the end. */
INLINE void lin_q8_kernel(const int MR, long n_in, const float *a, long lda, const signed char *wq, const float *scale,
                          float *c, long ldc, const float *bias, long nv)
{
  __m256 acc0[6], acc1[6];
  long k, n;
  int i;
  for (i = 0; i < MR; i++) {
    acc0[i] = _mm256_setzero_ps();
    acc1[i] = _mm256_setzero_ps();
  }
  for (k = 0; k < n_in; k++) {
    const signed char *w = wq + k * NR;
    const __m256 b0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)w)));
    const __m256 b1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w + 8))));
    for (i = 0; i < MR; i++) {
      const __m256 ai = _mm256_broadcast_ss(a + i * lda + k);
      acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
    }
  }
  {
    float tmp[6][16];
    for (i = 0; i < MR; i++) {
      _mm256_storeu_ps(tmp[i], _mm256_mul_ps(acc0[i], _mm256_loadu_ps(scale)));
      _mm256_storeu_ps(tmp[i] + 8, _mm256_mul_ps(acc1[i], _mm256_loadu_ps(scale + 8)));
    }
    for (i = 0; i < MR; i++)
      for (n = 0; n < (nv < 16 ? nv : 16); n++) c[i * ldc + n] = tmp[i][n] + (bias ? bias[n] : 0.0f);
  }
}

void attnc_prims_linear_q8_avx2(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                const float *b, float *y, long y_stride)
{
  const long panels = (n_out + NR - 1) / NR, nblk = (rows + 5) / 6, npass = (nblk + MC / 6 - 1) / (MC / 6);
  long pass, p, h, bk;
  for (pass = 0; pass < npass; pass++) {
    const long b0 = pass * nblk / npass, b1 = (pass + 1) * nblk / npass;
    for (p = 0; p < panels; p++)
      for (h = 0; h < NR; h += 16) {
        const unsigned char *panel = (const unsigned char *)packed + p * ATTNC_Q8_PANEL(n_in);
        const float *scale = (const float *)panel + h;
        const signed char *wq = (const signed char *)(panel + NR * sizeof(float)) + h;
        const long nv = n_out - p * NR - h;
        const float *bias = b ? b + p * NR + h : NULL;
        if (nv <= 0) break;
        for (bk = b0; bk < b1; bk++) {
          const long r0 = bk * rows / nblk, mr = (bk + 1) * rows / nblk - r0;
          const float *a = x + r0 * x_stride;
          float *c = y + r0 * y_stride + p * NR + h;
          switch (mr) {
          case 6: lin_q8_kernel(6, n_in, a, x_stride, wq, scale, c, y_stride, bias, nv); break;
          case 5: lin_q8_kernel(5, n_in, a, x_stride, wq, scale, c, y_stride, bias, nv); break;
          case 4: lin_q8_kernel(4, n_in, a, x_stride, wq, scale, c, y_stride, bias, nv); break;
          case 3: lin_q8_kernel(3, n_in, a, x_stride, wq, scale, c, y_stride, bias, nv); break;
          case 2: lin_q8_kernel(2, n_in, a, x_stride, wq, scale, c, y_stride, bias, nv); break;
          default: lin_q8_kernel(1, n_in, a, x_stride, wq, scale, c, y_stride, bias, nv); break;
          }
        }
      }
  }
}

/* ---- linear over bf16 weights kept bf16 (attnc_prims_pack_bf16) ----
 * Half a panel (16 outputs) at a time; each 32-bit lane of a pair's row
 * holds the output's two bf16 weights (see prims_avx512.c). */
INLINE void lin_bf16_kernel(const int MR, long n_in, const float *a, long lda, const unsigned char *wp, float *c,
                            long ldc, const float *bias, long nv)
{
  __m256 acc0[5], acc1[5];
  const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
  long kk, n;
  int i;
  for (i = 0; i < MR; i++) {
    acc0[i] = _mm256_setzero_ps();
    acc1[i] = _mm256_setzero_ps();
  }
  for (kk = 0; 2 * kk < n_in; kk++) {
    const __m256i v0 = _mm256_loadu_si256((const __m256i *)(wp + kk * 128)), v1 = _mm256_loadu_si256((const __m256i *)(wp + kk * 128 + 32));
    const __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), e1 = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
    const int odd = 2 * kk + 1 < n_in;
    const __m256 o0 = _mm256_castsi256_ps(_mm256_and_si256(v0, hi)), o1 = _mm256_castsi256_ps(_mm256_and_si256(v1, hi));
    for (i = 0; i < MR; i++) {
      const __m256 xe = _mm256_broadcast_ss(a + i * lda + 2 * kk);
      acc0[i] = _mm256_fmadd_ps(xe, e0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(xe, e1, acc1[i]);
      if (odd) { /* an odd n_in: the last pair has its first input only */
        const __m256 xo = _mm256_broadcast_ss(a + i * lda + 2 * kk + 1);
        acc0[i] = _mm256_fmadd_ps(xo, o0, acc0[i]);
        acc1[i] = _mm256_fmadd_ps(xo, o1, acc1[i]);
      }
    }
  }
  {
    float tmp[5][16];
    for (i = 0; i < MR; i++) {
      _mm256_storeu_ps(tmp[i], acc0[i]);
      _mm256_storeu_ps(tmp[i] + 8, acc1[i]);
    }
    for (i = 0; i < MR; i++)
      for (n = 0; n < (nv < 16 ? nv : 16); n++) c[i * ldc + n] = tmp[i][n] + (bias ? bias[n] : 0.0f);
  }
}

void attnc_prims_linear_bf16_avx2(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                  const float *b, float *y, long y_stride)
{
  const long panels = (n_out + NR - 1) / NR, nblk = (rows + 4) / 5, npass = (nblk + 7) / 8;
  long pass, p, h, bk;
  for (pass = 0; pass < npass; pass++) {
    const long b0 = pass * nblk / npass, b1 = (pass + 1) * nblk / npass;
    for (p = 0; p < panels; p++)
      for (h = 0; h < NR; h += 16) {
        const unsigned char *wp = (const unsigned char *)packed + p * ATTNC_BF16_PANEL(n_in) + h * 4;
        const long nv = n_out - p * NR - h;
        const float *bias = b ? b + p * NR + h : NULL;
        if (nv <= 0) break;
        for (bk = b0; bk < b1; bk++) {
          const long r0 = bk * rows / nblk, mr = (bk + 1) * rows / nblk - r0;
          const float *a = x + r0 * x_stride;
          float *c = y + r0 * y_stride + p * NR + h;
          switch (mr) {
          case 5: lin_bf16_kernel(5, n_in, a, x_stride, wp, c, y_stride, bias, nv); break;
          case 4: lin_bf16_kernel(4, n_in, a, x_stride, wp, c, y_stride, bias, nv); break;
          case 3: lin_bf16_kernel(3, n_in, a, x_stride, wp, c, y_stride, bias, nv); break;
          case 2: lin_bf16_kernel(2, n_in, a, x_stride, wp, c, y_stride, bias, nv); break;
          default: lin_bf16_kernel(1, n_in, a, x_stride, wp, c, y_stride, bias, nv); break;
          }
        }
      }
  }
}

/* ---- attention with query rows across the lanes ----
 *
 * As in prims_avx512.c: the scores of a key tile are kept transposed,
 * ST[j][r] (8 rows per vector), so q.k broadcasts k[j][d] against 8 rows
 * of the scaled, transposed queries QT[d][r]; the online softmax runs
 * down the columns with the row max, sum and rescale factor as vectors;
 * p.v broadcasts p[r][j] = ST[j][r] against rows of v.  Scores, biases
 * and the running max are in base-2 units (times log2 e; see exp2_neg). */

/* ST[j][8u ..] for NJ keys x NQ row vectors, plus BT[j * bt_j + 8u ..]
 * when there is a bias laid out like the scores (its lanes past `live`
 * rows not read); MX[8u ..] = max(MX, these scores).  12 accumulators,
 * 3 query vectors and a key broadcast: all 16 registers.
 *
 * With NM set (-m, the rows' running max negated: see STALE_MAX), the
 * sums start at -m, so that MX gets the largest s - m, ST the
 * probabilities 2^(s - m) and TS[8u ..] their sums: each block's s - m
 * come straight back from L1 to be exponentiated, between the FMAs of
 * its neighbours, instead of in a pass of their own over the tile.
 * Starting at -m spares a load and a subtraction per score vector. */
INLINE void qkT_kernel(const int NJ, const int NQ, long c, const float *QT, long r8, const float *k, long k_stride,
                       float *ST, float *MX, const float *BT, long bt_j, long live, const float *NM, float *TS,
                       float cap, float cap_inv)
{
  __m256 acc[4][3];
  const __m256 log2e = _mm256_set1_ps(ATTNC_LOG2E);
  long d;
  int j, u;
  for (u = 0; u < NQ; u++) {
    const __m256 a0 = NM && !(cap > 0) ? _mm256_load_ps(NM + u * 8) : _mm256_setzero_ps();
    for (j = 0; j < NJ; j++) acc[j][u] = a0;
  }
  for (d = 0; d < c; d++) {
    __m256 q[3];
    for (u = 0; u < NQ; u++) q[u] = _mm256_load_ps(QT + d * r8 + u * 8);
    for (j = 0; j < NJ; j++) {
      const __m256 kb = _mm256_broadcast_ss(k + j * k_stride + d);
      for (u = 0; u < NQ; u++) acc[j][u] = _mm256_fmadd_ps(kb, q[u], acc[j][u]);
    }
  }
  for (u = 0; u < NQ; u++) {
    __m256 m = _mm256_load_ps(MX + u * 8);
    const long nl = live - u * 8;
    if (cap > 0) { /* the softcap comes before the bias, and before -m (so the sums started at 0) */
      const __m256 nm = NM ? _mm256_load_ps(NM + u * 8) : _mm256_setzero_ps();
      for (j = 0; j < NJ; j++) acc[j][u] = _mm256_add_ps(softcap256(acc[j][u], cap, cap_inv), nm);
    }
    for (j = 0; j < NJ; j++) {
      if (BT) {
        const float *bt = BT + j * bt_j + u * 8;
        acc[j][u] = _mm256_fmadd_ps(nl >= 8 ? _mm256_loadu_ps(bt) : _mm256_maskload_ps(bt, lanes8(nl)), log2e, acc[j][u]);
      }
      _mm256_store_ps(ST + j * r8 + u * 8, acc[j][u]);
      m = _mm256_max_ps(m, acc[j][u]);
    }
    _mm256_store_ps(MX + u * 8, m);
  }
  if (NM) /* s - m back from L1 (registers are all taken): to probabilities */
    for (u = 0; u < NQ; u++) {
      __m256 ts = _mm256_load_ps(TS + u * 8);
      for (j = 0; j < NJ; j++) {
        const __m256 p = exp2_neg(_mm256_load_ps(ST + j * r8 + u * 8));
        _mm256_store_ps(ST + j * r8 + u * 8, p);
        ts = _mm256_add_ps(ts, p);
      }
      _mm256_store_ps(TS + u * 8, ts);
    }
}

static void qkT_tile(long nrv, long kt, long c, const float *QT, long r8, const float *k, long k_stride, float *ST,
                     float *MX, const float *BT, long bt_j, long rows, const next_tile *nx, const float *NM, float *TS,
                     float cap, float cap_inv)
{
  long rv0, jb;
  for (rv0 = 0; rv0 < r8; rv0 += 8) _mm256_store_ps(MX + rv0, _mm256_set1_ps(-INFINITY));
  if (NM)
    for (rv0 = 0; rv0 < r8; rv0 += 8) _mm256_store_ps(TS + rv0, _mm256_setzero_ps());
  for (rv0 = 0; rv0 < nrv; rv0 += 3) {
    const long nr = nrv - rv0 < 3 ? nrv - rv0 : 3;
    for (jb = 0; jb < kt; jb += 4) {
      const long nj = kt - jb < 4 ? kt - jb : 4;
      const float *qt = QT + rv0 * 8, *kb = k + jb * k_stride, *bt = BT ? BT + jb * bt_j + rv0 * 8 : NULL;
      float *st = ST + jb * r8 + rv0 * 8, *mx = MX + rv0 * 8, *ts = TS + rv0 * 8;
      const float *nm = NM ? NM + rv0 * 8 : NULL;
      const long live = rows - rv0 * 8;
      if (rv0 == 0) prefetch_next(nx, jb, jb + 4);
      if (BT && jb + 8 < kt) { /* the bias two key blocks ahead: a shared bias comes from L3 */
        const float *bn = BT + (jb + 8) * bt_j + rv0 * 8;
        int x;
        for (x = 0; x < 4; x++) {
          _mm_prefetch((const char *)(bn + x * bt_j), _MM_HINT_T0);
          _mm_prefetch((const char *)(bn + x * bt_j + nr * 8 - 1), _MM_HINT_T0);
        }
      }
#define QK_NQ(NJ)                                                                      \
  switch (nr) {                                                                        \
  case 3: qkT_kernel(NJ, 3, c, qt, r8, kb, k_stride, st, mx, bt, bt_j, live, nm, ts, cap, cap_inv); break;   \
  case 2: qkT_kernel(NJ, 2, c, qt, r8, kb, k_stride, st, mx, bt, bt_j, live, nm, ts, cap, cap_inv); break;   \
  default: qkT_kernel(NJ, 1, c, qt, r8, kb, k_stride, st, mx, bt, bt_j, live, nm, ts, cap, cap_inv); break;  \
  }
      switch (nj) {
      case 4: QK_NQ(4) break;
      case 3: QK_NQ(3) break;
      case 2: QK_NQ(2) break;
      default: QK_NQ(1) break;
      }
#undef QK_NQ
    }
  }
}

/* The sums of a[0..7], each across its lanes, as one vector. */
INLINE __m256 hsum8(const __m256 *a)
{
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/* NK keys x MR rows of dot products along c (NK * MR <= 8), ST[j][r]:
 * each key vector is loaded once for all rows, and the 8 accumulators
 * are reduced together.  Q is row-major, rows cp apart, zero past c. */
INLINE void qkd_kernel(const int MR, const int NK, long nv, long tail, const float *Q, long cp, const float *k,
                       long k_stride, float *ST)
{
  __m256 acc[8];
  const __m256i tm = lanes8(tail);
  float sums[8];
  long v;
  int a, kk, r;
  for (a = 0; a < 8; a++) acc[a] = _mm256_setzero_ps();
  for (v = 0; v < nv; v++)
    for (kk = 0; kk < NK; kk++) {
      const float *kr = k + kk * k_stride + v * 8;
      const __m256 kv = (v == nv - 1 && tail < 8) ? _mm256_maskload_ps(kr, tm) : _mm256_loadu_ps(kr);
      for (r = 0; r < MR; r++) acc[kk * MR + r] = _mm256_fmadd_ps(_mm256_load_ps(Q + r * cp + v * 8), kv, acc[kk * MR + r]);
    }
  _mm256_storeu_ps(sums, hsum8(acc));
  for (kk = 0; kk < NK; kk++)
    for (r = 0; r < MR; r++) ST[kk * 8 + r] = sums[kk * MR + r];
}

/* Few rows (decoding, rows <= 8): ST[j][r], MX and the bias BT as
 * qkT_tile gives them, from dot products; padding lanes score 0. */
static void qkd_tile(long rows, long kt, long nv, long tail, const float *Q, long cp, const float *k, long k_stride,
                     float *ST, float *MX, const float *BT, long bt_j, const next_tile *nx, float cap, float cap_inv)
{
  const long nk = 8 / rows;
  const __m256 live = _mm256_castsi256_ps(lanes8(rows));
  __m256 mx = _mm256_set1_ps(-INFINITY);
  long jj, j;
  for (jj = 0; jj < kt;) {
    const long n = kt - jj >= nk ? nk : 1;
    const float *kj = k + jj * k_stride;
    float *st = ST + jj * 8;
    prefetch_next(nx, jj, jj + n);
#define QKD_CASE(R) \
  case R: if (n == 1) qkd_kernel(R, 1, nv, tail, Q, cp, kj, k_stride, st); else qkd_kernel(R, 8 / R, nv, tail, Q, cp, kj, k_stride, st); break;
    switch (rows) {
    QKD_CASE(1) QKD_CASE(2) QKD_CASE(3) QKD_CASE(4) QKD_CASE(5) QKD_CASE(6) QKD_CASE(7)
    default: qkd_kernel(8, 1, nv, tail, Q, cp, kj, k_stride, st); break;
    }
#undef QKD_CASE
    jj += n;
  }
  for (j = 0; j < kt; j++) {
    __m256 sv = _mm256_and_ps(_mm256_load_ps(ST + j * 8), live);
    if (cap > 0) sv = softcap256(sv, cap, cap_inv);
    if (BT) sv = _mm256_fmadd_ps(load_n(BT + j * bt_j, rows), _mm256_set1_ps(ATTNC_LOG2E), sv);
    _mm256_store_ps(ST + j * 8, sv);
    mx = _mm256_max_ps(mx, sv);
  }
  _mm256_store_ps(MX, mx);
}

/* r[0..7] (8 floats each) -> its transpose, in registers. */
INLINE void transpose8(__m256 *r)
{
  __m256 t[8], s[8];
  int i;
  for (i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

/* ST[j][8 rows of rv] += bias of those rows at keys j0 + j, j < kt, for a
 * bias contiguous along the keys: 8 x 8 blocks loaded by rows and
 * transposed in registers.  Returns the column max of the biased scores. */
static __m256 add_bias_rows(const float *bias0, const int *BO, long rv, long j0, long kt, float *st, long r8)
{
  __m256 mx = _mm256_set1_ps(-INFINITY);
  long jb;
  int x;
  for (jb = 0; jb < kt; jb += 8) {
    const long nk = kt - jb < 8 ? kt - jb : 8;
    __m256 r[8];
    for (x = 0; x < 8; x++) r[x] = load_n(bias0 + BO[rv * 8 + x] + j0 + jb, nk);
    transpose8(r);
    for (x = 0; x < nk; x++) {
      float *p = st + (jb + x) * r8;
      const __m256 sv = _mm256_fmadd_ps(r[x], _mm256_set1_ps(ATTNC_LOG2E), _mm256_load_ps(p));
      _mm256_store_ps(p, sv);
      mx = _mm256_max_ps(mx, sv);
    }
  }
  return mx;
}

/* Row i of O, scaled by alpha[i] when there is an alpha (the online
 * softmax's rescale, folded into the p.v kernel's first load). */
INLINE __m256 load_scaled(const float *o, const float *alpha, int i)
{
  return alpha ? _mm256_mul_ps(_mm256_broadcast_ss(alpha + i), _mm256_load_ps(o)) : _mm256_load_ps(o);
}

/* O[MR][8*cv0 .. +8*NVV] = alpha O + P[MR][:kt] . V[:kt][...], P[i][j] at
 * P[i * pr + j * pj]; `tail` real values in the last vector of v when
 * that vector is the row's last (tail < 8), else 8. */
INLINE void pv_kernel(const int MR, const int NVV, long kt, const float *P, long pr, long pj, float *O, long cp,
                      const float *alpha, const float *v, long v_stride, long cv0, long tail)
{
  __m256 acc[6][3]; /* MR * NVV <= 12 */
  const __m256i tm = lanes8(tail);
  long j;
  int i, u;
  for (i = 0; i < MR; i++)
    for (u = 0; u < NVV; u++) acc[i][u] = load_scaled(O + i * cp + (cv0 + u) * 8, alpha, i);
  for (j = 0; j < kt; j++) {
    const float *vr = v + j * v_stride + cv0 * 8;
    __m256 b[3];
    for (u = 0; u < NVV; u++)
      b[u] = (u == NVV - 1 && tail < 8) ? _mm256_maskload_ps(vr + u * 8, tm) : _mm256_loadu_ps(vr + u * 8);
    for (i = 0; i < MR; i++) {
      const __m256 p = _mm256_broadcast_ss(P + i * pr + j * pj);
      for (u = 0; u < NVV; u++) acc[i][u] = _mm256_fmadd_ps(p, b[u], acc[i][u]);
    }
  }
  for (i = 0; i < MR; i++)
    for (u = 0; u < NVV; u++) _mm256_store_ps(O + i * cp + (cv0 + u) * 8, acc[i][u]);
}

/* O[rows][:c] = alpha O + P[rows][:kt] . V[:kt][:c] in register blocks of
 * 6 rows x 16 values, or 4 rows (and fewer) x 24: 12 accumulators either
 * way, and a decode tile of 4 rows passes over its v rows 6 times, not 8.
 * Decode tiles (8 rows at most) only: larger ones take pvT_all. */
static void pv_all(long rows, long kt, const float *P, long pr, long pj, float *O, long cp, const float *alpha,
                   const float *v, long v_stride, long nv, long tail)
{
  long r0, cv0;
  for (r0 = 0; r0 < rows; r0 += 6) {
    const float *Pr = P + r0 * pr, *Ar = alpha ? alpha + r0 : NULL;
    float *Or = O + r0 * cp;
    const long step = rows - r0 <= 4 ? 3 : 2;
    for (cv0 = 0; cv0 < nv; cv0 += step) {
      const long nvv = nv - cv0 < step ? nv - cv0 : step, tl = cv0 + nvv == nv ? tail : 8;
#define PV_ROWS(NVV)                                                                    \
  switch (rows - r0 < 6 ? rows - r0 : 6) {                                              \
  case 6: pv_kernel(6, NVV < 3 ? NVV : 2, kt, Pr, pr, pj, Or, cp, Ar, v, v_stride, cv0, tl); break; \
  case 5: pv_kernel(5, NVV < 3 ? NVV : 2, kt, Pr, pr, pj, Or, cp, Ar, v, v_stride, cv0, tl); break; \
  case 4: pv_kernel(4, NVV, kt, Pr, pr, pj, Or, cp, Ar, v, v_stride, cv0, tl); break;   \
  case 3: pv_kernel(3, NVV, kt, Pr, pr, pj, Or, cp, Ar, v, v_stride, cv0, tl); break;   \
  case 2: pv_kernel(2, NVV, kt, Pr, pr, pj, Or, cp, Ar, v, v_stride, cv0, tl); break;   \
  default: pv_kernel(1, NVV, kt, Pr, pr, pj, Or, cp, Ar, v, v_stride, cv0, tl); break;  \
  }
      if (nvv == 3) { PV_ROWS(3) } else if (nvv == 2) { PV_ROWS(2) } else { PV_ROWS(1) }
#undef PV_ROWS
    }
  }
}

/* The same weighted sum with the output transposed like the scores:
 * OT[d][r] = alpha_r OT[d][r] + sum_j V[j][d] P[r][j], P[r][j] = ST[j][r].
 * A block of NC values x NU row vectors loads NU probability vectors and
 * broadcasts NC elements of v per key: 7 loads for 12 FMAs at 4 x 3.  A
 * broadcast reads v wherever it lies, as the q.k kernel reads k, so v
 * rows that are not 32-byte aligned (a caller's tensor from malloc is
 * 16-aligned) need no aligned copy of each key tile.  Padding lanes are
 * computed too, and never read. */
INLINE void pvT_kernel(const int NC, const int NU, long kt, const float *ST, long r8, float *OT, const float *alpha,
                       const float *v, long v_stride)
{
  __m256 acc[4][3];
  long j;
  int i, u;
  for (u = 0; u < NU; u++) {
    const __m256 a = alpha ? _mm256_load_ps(alpha + u * 8) : _mm256_setzero_ps();
    for (i = 0; i < NC; i++) {
      const __m256 o = _mm256_load_ps(OT + i * r8 + u * 8);
      acc[i][u] = alpha ? _mm256_mul_ps(a, o) : o;
    }
  }
  for (j = 0; j < kt; j++) {
    __m256 p[3];
    for (u = 0; u < NU; u++) p[u] = _mm256_load_ps(ST + j * r8 + u * 8);
    for (i = 0; i < NC; i++) {
      const __m256 vb = _mm256_broadcast_ss(v + j * v_stride + i);
      for (u = 0; u < NU; u++) acc[i][u] = _mm256_fmadd_ps(vb, p[u], acc[i][u]);
    }
  }
  for (i = 0; i < NC; i++)
    for (u = 0; u < NU; u++) _mm256_store_ps(OT + i * r8 + u * 8, acc[i][u]);
}

static void pvT_all(long nrv, long kt, const float *ST, long r8, float *OT, const float *alpha, const float *v,
                    long v_stride, long c)
{
  long rv0, d0;
  for (d0 = 0; d0 < c; d0 += 4) {
    const long nc = c - d0 < 4 ? c - d0 : 4;
    for (rv0 = 0; rv0 < nrv; rv0 += 3) {
      const long nu = nrv - rv0 < 3 ? nrv - rv0 : 3;
      const float *st = ST + rv0 * 8, *a = alpha ? alpha + rv0 * 8 : NULL;
      float *ot = OT + d0 * r8 + rv0 * 8;
      const float *vd = v + d0;
#define PVT_NU(NC)                                                          \
  switch (nu) {                                                             \
  case 3: pvT_kernel(NC, 3, kt, st, r8, ot, a, vd, v_stride); break;        \
  case 2: pvT_kernel(NC, 2, kt, st, r8, ot, a, vd, v_stride); break;        \
  default: pvT_kernel(NC, 1, kt, st, r8, ot, a, vd, v_stride); break;       \
  }
      switch (nc) {
      case 4: PVT_NU(4) break;
      case 3: PVT_NU(3) break;
      case 2: PVT_NU(2) break;
      default: PVT_NU(1) break;
      }
#undef PVT_NU
    }
  }
}

/* dst[0..c) = s * src[0..c) (src padded to whole vectors). */
static void store_row(float *dst, const float *src, long c, float s)
{
  const __m256 sv = _mm256_set1_ps(s);
  long d;
  for (d = 0; d + 8 <= c; d += 8) _mm256_storeu_ps(dst + d, _mm256_mul_ps(sv, _mm256_load_ps(src + d)));
  for (; d < c; d++) dst[d] = s * src[d];
}

/* The tile's rows out of the work buffer: normalised by the softmax sum,
 * or (a key split) unnormalised with the running max and sum; a row that
 * saw no key gets the empty-row rule. */
static void finish_rows(const attnc_tile *t, const float *O, long cp, float *M, const float *L)
{
  long r, i, hh;
  /* a row whose NaN score the max dropped has a NaN sum: it saw a key */
  for (r = 0; r < t->rows; r++)
    if (M[r] == -INFINITY && L[r] != 0) M[r] = NAN;
  for (r = 0, i = 0, hh = 0; r < t->rows; r++) {
    float *o = t->o + i * t->o_stride + hh * t->o_hstride; /* row r = i * q_group + hh */
    if (++hh == t->q_group) {
      hh = 0;
      i++;
    }
    if (t->m_out) {
      t->m_out[r] = M[r] * ATTNC_LN2; /* the combine works in base e */
      t->l_out[r] = L[r];
      store_row(o, O + r * cp, t->c, 1.0f);
    } else if (M[r] != -INFINITY) { /* saw a key: normalise (a NaN stays NaN) */
      store_row(o, O + r * cp, t->c, 1.0f / L[r]);
    } else {
      attnc_prims_empty_row(t, r, o);
    }
  }
}

static void attend_rows(const attnc_tile *t)
{
  const long rows = t->rows, c = t->c, cp = round8(c), nv = cp / 8, r8 = round8(rows), nrv = r8 / 8;
  float *O = t->work, *QT = O + r8 * cp, *ST = QT + cp * r8, *M = ST + KT * r8, *L = M + r8, *A = L + r8;
  int *LO = (int *)(A + r8), *HI = LO + r8, *BO = HI + r8;
  float *MX = (float *)(BO + r8); /* the column max of the scores, from the q.k kernel */
  float *TS = MX + r8;            /* a tile's sums of probabilities (the stale-max path) */
  const long tail = c - (nv - 1) * 8;
  const __m256 ninf = _mm256_set1_ps(-INFINITY), nan = _mm256_set1_ps(NAN), zero = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi32(-1);
  const float *bias0 = t->bias ? t->bias + t->i0 * t->bias_i : NULL;
  /* 3b. the softcap in base 2: cap * log2(e) * tanh(s / (cap * log2(e))) */
  const float cap2 = t->softcap > 0 ? t->softcap * ATTNC_LOG2E : 0.0f, cap2_inv = cap2 > 0 ? 1.0f / cap2 : 0.0f;
  /* up to 8 rows (decoding): q.k as dot products, each key loaded once
   * for all rows, instead of one broadcast per element */
  const int few = rows <= 8;
  long d, rv, j, j0, jmin, jmax, lo_max, hi_min;
  int m_finite = 0; /* every lane's running max is a number (not -inf, not NaN) */

  /* O: rows of the output (decoding), else transposed like the scores,
   * OT[d][r] (see pvT_all) */
  attnc_prims_rows_begin(t, r8, few ? O : NULL, cp, LO, HI, BO, M, L, &jmin, &jmax, &lo_max, &hi_min);
  if (!few) memset(O, 0, sizeof(float) * (size_t)(cp * r8));

  const int pf = few || t->k_stride > 2 * c || t->v_stride > 2 * c; /* contiguous rows: the hardware does it */
  if (pf && jmin <= jmax) { /* the first key tile, while the queries are transposed */
    const long j1 = jmax + 1 < jmin + KT ? jmax + 1 : jmin + KT;
    attnc_prefetch_rows(t->k, t->k_stride, jmin, j1, c);
    attnc_prefetch_rows(t->v, t->v_stride, jmin, j1, c);
  }
  /* 3. scale, 2. split heads: QT[d][r] = scale * q[r][d], 8 x 8 blocks
   * transposed in registers (padding rows are 0) */
  for (rv = 0; rv < nrv; rv++) {
    const float *qr[8];
    attnc_prims_row_ptrs(t, t->q, t->q_stride, t->q_hstride, rv * 8, 8, qr);
    for (d = 0; d < c; d += 8) {
      const long nd = c - d < 8 ? c - d : 8;
      const __m256 sc = _mm256_set1_ps(t->scale * ATTNC_LOG2E);
      __m256 x[8];
      int u;
      for (u = 0; u < 8; u++) x[u] = qr[u] ? _mm256_mul_ps(sc, load_n(qr[u] + d, nd)) : zero;
      if (few) { /* the dot-product q.k keeps q's rows: Q[r][d] in QT's place */
        for (u = 0; u < 8; u++) _mm256_store_ps(QT + u * cp + d, x[u]);
        continue;
      }
      transpose8(x);
      for (u = 0; u < nd; u++) _mm256_store_ps(QT + (d + u) * r8 + rv * 8, x[u]);
    }
  }

  /* 5. bias: one contiguous along the keys goes in by 8x8 transposes; one
   * contiguous along the query rows with the scores, 8 rows of one key a
   * vector; any other through a gather */
  const int bias_rows = t->bias && t->bias_j == 1;
  const int bias_cols = t->bias && !bias_rows && t->bias_i == 1 && t->q_group == 1;
  for (j0 = jmin; j0 <= jmax; j0 += KT) {
    const long kt = jmax - j0 + 1 < KT ? jmax - j0 + 1 : KT;
    /* every row sees every key of this tile: no per-lane range test */
    const int all_visible = lo_max <= j0 && hi_min >= j0 + kt - 1;
    /* the next tile, asked for by the q.k loop as it goes; after the
     * last one, the next query tile */
    const next_tile nx = attnc_next_tile(t, j0, jmax, pf);
    /* Nothing to mask and no bias to gather, once every lane has a
     * running max: try the stale max (STALE_MAX) */
    int stale = !few && m_finite && all_visible && !t->mask && (!t->bias || bias_cols);
    if (stale) /* -m, where the q.k kernel starts its sums: in A, as a stale tile needs no alpha */
      for (rv = 0; rv < nrv; rv++) _mm256_store_ps(A + rv * 8, _mm256_sub_ps(zero, _mm256_load_ps(M + rv * 8)));
    /* 4. scores (5. plus a bias laid out like them) */
    if (few)
      qkd_tile(rows, kt, nv, tail, QT, cp, t->k + j0 * t->k_stride, t->k_stride, ST, MX,
               bias_cols ? bias0 + j0 * t->bias_j : NULL, t->bias_j, &nx, cap2, cap2_inv);
    else
      qkT_tile(nrv, kt, c, QT, r8, t->k + j0 * t->k_stride, t->k_stride, ST, MX,
               bias_cols ? bias0 + j0 * t->bias_j : NULL, t->bias_j, rows, &nx, stale ? A : NULL, TS, cap2, cap2_inv);
    if (stale) { /* MX holds the largest s - m */
      for (rv = 0; rv < nrv && stale; rv++)
        stale = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(MX + rv * 8), _mm256_set1_ps(STALE_MAX), _CMP_LE_OQ)) == 0xff;
      if (stale) { /* 7. softmax: the probabilities and their sums are in; the max stays */
        for (rv = 0; rv < nrv; rv++)
          _mm256_store_ps(L + rv * 8, _mm256_add_ps(_mm256_load_ps(L + rv * 8), _mm256_load_ps(TS + rv * 8)));
      } else { /* a score grew too far past its row's max (or is not a number): the scores again */
        const next_tile none = { t->k, t->v, t->k_stride, t->v_stride, 0, c };
        qkT_tile(nrv, kt, c, QT, r8, t->k + j0 * t->k_stride, t->k_stride, ST, MX,
                 bias_cols ? bias0 + j0 * t->bias_j : NULL, t->bias_j, rows, &none, NULL, TS, cap2, cap2_inv);
      }
    }
    for (rv = 0; rv < nrv && !stale; rv++) {
      float *st = ST + rv * 8;
      const __m256i lov = _mm256_load_si256((const __m256i *)(LO + rv * 8)), hiv = _mm256_load_si256((const __m256i *)(HI + rv * 8));
      const __m256i bov = t->bias ? _mm256_load_si256((const __m256i *)(BO + rv * 8)) : _mm256_setzero_si256();
      __m256 mx = ninf, m_old = _mm256_load_ps(M + rv * 8), m_new, m_sub, alpha, sum = zero;
      /* 5. bias, 6. mask: masked scores become -inf; then the column max.
       * max_ps may drop a NaN score, but its p is NaN all the same, so the
       * row's sum and output turn NaN */
      __m256 bmx = ninf;
      if (bias_rows) bmx = add_bias_rows(bias0, BO, rv, j0, kt, st, r8);
      if (all_visible && !t->mask && (!t->bias || bias_cols)) {
        mx = _mm256_load_ps(MX + rv * 8); /* taken by the q.k kernel (which added a bias_cols bias) */
      } else if (all_visible && !t->mask && bias_rows) {
        mx = bmx; /* taken as the bias went in */
      } else {
        for (j = 0; j < kt; j++) {
          __m256 sv = _mm256_load_ps(st + j * r8);
          __m256i bad = _mm256_setzero_si256(); /* lanes that may not see key j0 + j */
          if (!all_visible) {
            const __m256i jv = _mm256_set1_epi32((int)(j0 + j));
            bad = _mm256_or_si256(_mm256_cmpgt_epi32(lov, jv), _mm256_cmpgt_epi32(jv, hiv));
          }
          if (t->mask && !t->mask[(j0 + j) * t->mask_j]) bad = ones;
          if (t->bias && !bias_rows && !bias_cols && !_mm256_testc_si256(bad, ones)) {
            const __m256 ok = _mm256_castsi256_ps(_mm256_xor_si256(bad, ones));
            sv = _mm256_fmadd_ps(_mm256_mask_i32gather_ps(zero, bias0 + (j0 + j) * t->bias_j, bov, ok, 4), _mm256_set1_ps(ATTNC_LOG2E), sv);
          }
          sv = _mm256_blendv_ps(sv, ninf, _mm256_castsi256_ps(bad));
          _mm256_store_ps(st + j * r8, sv);
          mx = _mm256_max_ps(mx, sv);
        }
      }
      /* 7. softmax, online: the running max grows to m_new; rows that have
       * seen no key yet keep -inf (and subtract 0, so their p are 0) */
      m_new = _mm256_blendv_ps(_mm256_max_ps(m_old, mx), nan, _mm256_cmp_ps(m_old, m_old, _CMP_UNORD_Q));
      m_sub = _mm256_blendv_ps(m_new, zero, _mm256_cmp_ps(m_new, ninf, _CMP_EQ_OQ));
      alpha = exp2_neg(_mm256_sub_ps(m_old, m_sub));
      for (j = 0; j < kt; j++) {
        const __m256 p = exp2_neg(_mm256_sub_ps(_mm256_load_ps(st + j * r8), m_sub));
        _mm256_store_ps(st + j * r8, p);
        sum = _mm256_add_ps(sum, p);
      }
      _mm256_store_ps(L + rv * 8, _mm256_fmadd_ps(_mm256_load_ps(L + rv * 8), alpha, sum));
      _mm256_store_ps(M + rv * 8, m_new);
      _mm256_store_ps(A + rv * 8, alpha); /* rows whose max grew rescale what they have summed so far */
    }
    if (!few && !stale) {
      __m256 ok = _mm256_castsi256_ps(ones);
      for (rv = 0; rv < nrv; rv++) {
        const __m256 m = _mm256_load_ps(M + rv * 8);
        ok = _mm256_and_ps(ok, _mm256_and_ps(_mm256_cmp_ps(m, m, _CMP_ORD_Q), _mm256_cmp_ps(m, ninf, _CMP_NEQ_OQ)));
      }
      m_finite = _mm256_movemask_ps(ok) == 0xff;
    }
    /* 8. weighted sum: O = alpha O + P V, P[r][j] = ST[j][r] */
    if (few) pv_all(rows, kt, ST, 1, r8, O, cp, A, t->v + j0 * t->v_stride, t->v_stride, nv, tail);
    else pvT_all(nrv, kt, ST, r8, O, stale ? NULL : A, t->v + j0 * t->v_stride, t->v_stride, c);
  }

  if (!few) { /* OT back to rows, in 8 x 8 blocks, into QT's place */
    for (rv = 0; rv < nrv; rv++)
      for (d = 0; d < cp; d += 8) {
        __m256 x[8];
        int u;
        for (u = 0; u < 8; u++) x[u] = _mm256_load_ps(O + (d + u) * r8 + rv * 8);
        transpose8(x);
        for (u = 0; u < 8; u++) _mm256_store_ps(QT + (rv * 8 + u) * cp + d, x[u]);
      }
    O = QT;
  }
  finish_rows(t, O, cp, M, L);
}

void attnc_prims_attend_avx2(const attnc_tile *t)
{
  if (attnc_prims_fits_lanes(t)) attend_rows(t);
  else attnc_prims_attend_generic(t);
}

/* ---- a bf16 or f16 kernel's conversions, with F16C (prims.c checks
 * for it) for f16; the last n % 8 elements by the portable ones ---- */

__attribute__((target("f16c"))) void attnc_prims_widen16_avx2(int f16, const void *src, float *dst, long n)
{
  const unsigned short *s = src;
  long e;
  for (e = 0; e + 8 <= n; e += 8) {
    const __m128i h = _mm_loadu_si128((const __m128i *)(s + e));
    _mm256_storeu_ps(dst + e, f16 ? _mm256_cvtph_ps(h) : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  attnc_prims_widen16_generic(f16, s + e, dst + e, n - e);
}

__attribute__((target("f16c"))) void attnc_prims_narrow16_avx2(int f16, const float *src, void *dst, long n)
{
  unsigned short *d = dst;
  long e;
  for (e = 0; e + 8 <= n; e += 8) {
    const __m256 f = _mm256_loadu_ps(src + e);
    __m128i h;
    if (f16) {
      h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else { /* as prims_avx512.c: round to nearest even, a NaN kept quiet */
      const __m256i u = _mm256_castps_si256(f);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
      r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)),
                             _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
      h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
    }
    _mm_storeu_si128((__m128i *)(d + e), h);
  }
  attnc_prims_narrow16_generic(f16, src + e, d + e, n - e);
}

void attnc_prims_sigmoid_mul_avx2(const float *g, float *o, long n)
{
  const __m256 one = _mm256_set1_ps(1.0f), hi = _mm256_set1_ps(88.3f);
  long i;
  for (i = 0; i + 8 <= n; i += 8) {
    /* e^-g, clamped where float overflows: sigmoid is 0 there all the same */
    const __m256 e = exp256_neg(_mm256_min_ps(hi, _mm256_sub_ps(_mm256_setzero_ps(), _mm256_loadu_ps(g + i))));
    _mm256_storeu_ps(o + i, _mm256_div_ps(_mm256_loadu_ps(o + i), _mm256_add_ps(one, e)));
  }
  for (; i < n; i++) o[i] *= 1.0f / (1.0f + expf(-g[i]));
}

/* ---- attention over a KV cache stored as bf16, f16 or int8 (decoding) ----
 *
 * prims_avx512.c's attend_kv on 8 lanes, for tiles of few rows: query
 * rows in registers, keys and values read as they are stored and
 * widened as they are loaded (bf16: zero-extended and shifted into the
 * top half; f16: vcvtph2ps; int8: sign-extended and converted, a row's
 * scale on its score and its probability), the next key tile asked for
 * as this one is scored.  The softmax runs along each row's scores in
 * base e.  The f16 loads need F16C, so this section is compiled for it
 * (KV_F16C, up to the entry point) and prims.c installs it only on a CPU
 * that has it; bf16 and int8 use no F16C instruction. */
#define KV_F16C __attribute__((target("f16c")))
#define KV_INLINE INLINE KV_F16C

/* Vector u (of nv) of a cache row as f32; the last one's lanes past c
 * (tail values, 1..8) read nothing and are 0. */
KV_INLINE __m256 kv_vec8(const int KVT, const char *row, long u, long nv, long tail)
{
  if (KVT == ATTNC_KV_BF16 || KVT == ATTNC_KV_F16) {
    const unsigned short *p = (const unsigned short *)row + u * 8;
    __m128i h;
    if (u == nv - 1 && tail < 8) {
      unsigned short b[8] = { 0 };
      memcpy(b, p, sizeof(short) * (size_t)tail);
      h = _mm_loadu_si128((const __m128i *)b);
    } else {
      h = _mm_loadu_si128((const __m128i *)p);
    }
    if (KVT == ATTNC_KV_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    const signed char *p = (const signed char *)row + u * 8;
    __m128i b8;
    if (u == nv - 1 && tail < 8) {
      signed char b[8] = { 0 };
      memcpy(b, p, (size_t)tail);
      b8 = _mm_loadl_epi64((const __m128i *)b);
    } else {
      b8 = _mm_loadl_epi64((const __m128i *)p);
    }
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b8));
  }
}

/* NK keys x MR rows (NK * MR <= 8) of dot products: S[r * KT + kk]. */
KV_INLINE void qkd_kv_kernel(const int KVT, const int MR, const int NK, long nv, long tail, const float *Q, long cp,
                          const char *k, long kb, float *S)
{
  __m256 acc[8];
  float sums[8];
  long v;
  int a, kk, r;
  for (a = 0; a < 8; a++) acc[a] = _mm256_setzero_ps();
  for (v = 0; v < nv; v++)
    for (kk = 0; kk < NK; kk++) {
      const __m256 kv = kv_vec8(KVT, k + kk * kb, v, nv, tail);
      for (r = 0; r < MR; r++) acc[kk * MR + r] = _mm256_fmadd_ps(_mm256_load_ps(Q + r * cp + v * 8), kv, acc[kk * MR + r]);
    }
  _mm256_storeu_ps(sums, hsum8(acc));
  for (kk = 0; kk < NK; kk++)
    for (r = 0; r < MR; r++) S[r * KT + kk] = sums[kk * MR + r];
}

/* O[MR][8*cv0 .. +8*NVV] += P[MR][:kt] . v[:kt][...], P rows KT apart. */
KV_INLINE void pv_kv_kernel(const int KVT, const int MR, const int NVV, long kt, const float *P, float *O, long cp,
                         const char *v, long vb, long cv0, long nv, long tail)
{
  __m256 acc[4][3];
  long j;
  int i, u;
  for (i = 0; i < MR; i++)
    for (u = 0; u < NVV; u++) acc[i][u] = _mm256_load_ps(O + i * cp + (cv0 + u) * 8);
  for (j = 0; j < kt; j++) {
    __m256 b[3];
    for (u = 0; u < NVV; u++) b[u] = kv_vec8(KVT, v + j * vb, cv0 + u, nv, tail);
    for (i = 0; i < MR; i++) {
      const __m256 p = _mm256_broadcast_ss(P + i * KT + j);
      for (u = 0; u < NVV; u++) acc[i][u] = _mm256_fmadd_ps(p, b[u], acc[i][u]);
    }
  }
  for (i = 0; i < MR; i++)
    for (u = 0; u < NVV; u++) _mm256_store_ps(O + i * cp + (cv0 + u) * 8, acc[i][u]);
}

/* Row r's scores S[0..kt) of the key tile at j0 -> probabilities (0 past
 * kt and for hidden keys), with the running max M, sum L and O's rescale. */
static void softmax_kv_row(const attnc_tile *t, long r, long j0, long kt, float *S, float *M, float *L, float *O,
                           long cp)
{
  const long i = t->i0 + r / t->q_group, hh = r % t->q_group;
  __m256 mx = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps();
  float m_new, alpha, row_max, part[8];
  int nan = 0;
  long lo, hi, j, d;
  attnc_prims_row_range(t, r, &lo, &hi);
  if (t->softcap > 0) /* before bias and masks */
    for (j = 0; j < KT; j += 8) _mm256_store_ps(S + j, softcap256(_mm256_load_ps(S + j), t->softcap, 1.0f / t->softcap));
  for (j = 0; j < KT; j++) {
    const long jg = j0 + j;
    if (j >= kt || jg < lo || jg > hi || (t->mask && !t->mask[jg * t->mask_j])) S[j] = -INFINITY;
    else if (t->bias) S[j] += t->bias[hh * t->bias_h + i * t->bias_i + jg * t->bias_j];
  }
  for (j = 0; j < KT; j += 8) {
    const __m256 s = _mm256_load_ps(S + j);
    nan |= _mm256_movemask_ps(_mm256_cmp_ps(s, s, _CMP_UNORD_Q));
    mx = _mm256_max_ps(mx, s);
  }
  _mm256_storeu_ps(part, mx);
  row_max = part[0];
  for (j = 1; j < 8; j++) row_max = part[j] > row_max ? part[j] : row_max;
  if (nan) row_max = NAN;
  if (row_max == -INFINITY) { /* no key of this tile: nothing to add */
    memset(S, 0, sizeof(float) * KT);
    return;
  }
  m_new = M[r] > row_max ? M[r] : row_max;
  alpha = M[r] == -INFINITY ? 0.0f : expf(M[r] - m_new);
  for (j = 0; j < KT; j += 8) {
    const __m256 p = exp256_neg(_mm256_sub_ps(_mm256_load_ps(S + j), _mm256_set1_ps(m_new)));
    _mm256_store_ps(S + j, p);
    sum = _mm256_add_ps(sum, p);
  }
  _mm256_storeu_ps(part, sum);
  L[r] = L[r] * alpha + (((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])));
  M[r] = m_new;
  if (alpha != 1.0f) {
    const __m256 a = _mm256_set1_ps(alpha);
    for (d = 0; d < cp; d += 8) _mm256_store_ps(O + r * cp + d, _mm256_mul_ps(a, _mm256_load_ps(O + r * cp + d)));
  }
}

/* Work: O (rows x cp), M, L (r8 each), S (rows x KT), Q (rows x cp),
 * cp = round8(c): within attend_work(rows, c). */
KV_INLINE void attend_kv_body8(const int KVT, const attnc_tile *t, const char *k, const float *ks, const char *v,
                            const float *vs)
{
  const long esize = KVT == ATTNC_KV_INT8 ? 1 : 2, rows = t->rows, c = t->c, r8 = round8(rows);
  const long cp = round8(c), nv = cp / 8, tail = c - (nv - 1) * 8;
  const long kb = t->k_stride * esize, vb = t->v_stride * esize, row_bytes = c * esize;
  float *O = t->work, *M = O + r8 * cp, *L = M + r8, *S = L + r8, *Q = S + r8 * KT;
  long r, d, jmin = t->k_end, jmax = t->k_begin - 1, j0, jj, r0, cv0;

  for (r = 0; r < rows; r++) {
    const float *q = t->q + (r / t->q_group) * t->q_stride + (r % t->q_group) * t->q_hstride;
    long lo, hi;
    for (d = 0; d < cp; d++) {
      Q[r * cp + d] = d < c ? q[d] * t->scale : 0.0f;
      O[r * cp + d] = 0;
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
    const long kt = jmax - j0 + 1 < KT ? jmax - j0 + 1 : KT, left = jmax + 1 - (j0 + KT);
    const long n = left <= 0 ? 0 : left < KT ? left : KT;
    const char *kt0 = k + j0 * kb, *vt0 = v + j0 * vb;
    /* q.k: rows in blocks of 4, two keys a block (one for a last odd key) */
    for (jj = 0; jj < kt; jj += 2) {
      const long nk = kt - jj >= 2 ? 2 : 1, p0 = jj, p1 = jj + 2 < n ? jj + 2 : n;
      long pj, b;
      for (pj = p0; pj < p1; pj++) /* the next tile's rows of k and v, into L2 */
        for (b = 0; b < row_bytes; b += 64) {
          _mm_prefetch(kt0 + (KT + pj) * kb + b, _MM_HINT_T1);
          _mm_prefetch(vt0 + (KT + pj) * vb + b, _MM_HINT_T1);
        }
      for (r0 = 0; r0 < rows; r0 += 4) {
        const float *qr = Q + r0 * cp;
        float *sr = S + r0 * KT + jj;
        const char *kr = kt0 + jj * kb;
#define QKDKV8_ROWS(NK)                                                                 \
  switch (rows - r0 < 4 ? rows - r0 : 4) {                                              \
  case 4: qkd_kv_kernel(KVT, 4, NK, nv, tail, qr, cp, kr, kb, sr); break;               \
  case 3: qkd_kv_kernel(KVT, 3, NK, nv, tail, qr, cp, kr, kb, sr); break;               \
  case 2: qkd_kv_kernel(KVT, 2, NK, nv, tail, qr, cp, kr, kb, sr); break;               \
  default: qkd_kv_kernel(KVT, 1, NK, nv, tail, qr, cp, kr, kb, sr); break;              \
  }
        if (nk == 2) { QKDKV8_ROWS(2) } else { QKDKV8_ROWS(1) }
#undef QKDKV8_ROWS
      }
    }
    if (KVT == ATTNC_KV_INT8)
      for (r = 0; r < rows; r++)
        for (jj = 0; jj < kt; jj++) S[r * KT + jj] *= ks[j0 + jj];
    for (r = 0; r < rows; r++) softmax_kv_row(t, r, j0, kt, S + r * KT, M, L, O, cp);
    if (KVT == ATTNC_KV_INT8)
      for (r = 0; r < rows; r++)
        for (jj = 0; jj < kt; jj++) S[r * KT + jj] *= vs[j0 + jj];
    /* p.v: blocks of 4 rows x 3 vectors */
    for (r0 = 0; r0 < rows; r0 += 4)
      for (cv0 = 0; cv0 < nv; cv0 += 3) {
        const float *Pr = S + r0 * KT;
        float *Or = O + r0 * cp;
#define PVKV8_ROWS(NVV)                                                                  \
  switch (rows - r0 < 4 ? rows - r0 : 4) {                                               \
  case 4: pv_kv_kernel(KVT, 4, NVV, kt, Pr, Or, cp, vt0, vb, cv0, nv, tail); break;      \
  case 3: pv_kv_kernel(KVT, 3, NVV, kt, Pr, Or, cp, vt0, vb, cv0, nv, tail); break;      \
  case 2: pv_kv_kernel(KVT, 2, NVV, kt, Pr, Or, cp, vt0, vb, cv0, nv, tail); break;      \
  default: pv_kv_kernel(KVT, 1, NVV, kt, Pr, Or, cp, vt0, vb, cv0, nv, tail); break;     \
  }
        switch (nv - cv0 < 3 ? nv - cv0 : 3) {
        case 3: PVKV8_ROWS(3) break;
        case 2: PVKV8_ROWS(2) break;
        default: PVKV8_ROWS(1) break;
        }
#undef PVKV8_ROWS
      }
  }

  for (r = 0; r < rows; r++) { /* a row whose NaN score made its max NaN has seen a key */
    float *o = t->o + (r / t->q_group) * t->o_stride + (r % t->q_group) * t->o_hstride;
    if (t->m_out) {
      t->m_out[r] = M[r];
      t->l_out[r] = L[r];
      store_row(o, O + r * cp, c, 1.0f);
    } else if (M[r] != -INFINITY) {
      store_row(o, O + r * cp, c, 1.0f / L[r]);
    } else {
      attnc_prims_empty_row(t, r, o);
    }
  }
}

static KV_F16C void attend_kv_bf16(const attnc_tile *t, const void *k, const void *v)
{
  attend_kv_body8(ATTNC_KV_BF16, t, (const char *)k, NULL, (const char *)v, NULL);
}

static KV_F16C void attend_kv_f16(const attnc_tile *t, const void *k, const void *v)
{
  attend_kv_body8(ATTNC_KV_F16, t, (const char *)k, NULL, (const char *)v, NULL);
}

static KV_F16C void attend_kv_int8(const attnc_tile *t, const void *k, const float *ks, const void *v, const float *vs)
{
  attend_kv_body8(ATTNC_KV_INT8, t, (const char *)k, ks, (const char *)v, vs);
}

KV_F16C void attnc_prims_attend_kv_avx2(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                        const void *v, const float *v_scale)
{
  if (kv_type == ATTNC_KV_BF16 || kv_type == ATTNC_KV_BF16_ROUND) attend_kv_bf16(t, k, v); /* q, p kept f32 */
  else if (kv_type == ATTNC_KV_F16) attend_kv_f16(t, k, v);
  else attend_kv_int8(t, k, k_scale, v, v_scale);
}
#undef KV_INLINE
#undef KV_F16C

/* matmul: c's rows MM_MR at a time by up to 3 vectors (24 columns), in
 * registers over all of k (12 accumulators, 3 rows of b and a broadcast:
 * the 16 registers); the last vector is masked to the columns there are. */
#define MM_MR 4
INLINE void mm_block(const int MR, const int NV, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb,
                     float *c, long ldc, int acc, long tail)
{
  const __m256i tm = lanes8(tail);
  __m256 s[MM_MR][3], bv[3];
  long p;
  int i, v;
  for (i = 0; i < MR; i++)
    for (v = 0; v < NV; v++)
      s[i][v] = acc ? (v == NV - 1 ? _mm256_maskload_ps(c + i * ldc + 8 * v, tm) : _mm256_loadu_ps(c + i * ldc + 8 * v))
                    : _mm256_setzero_ps();
  for (p = 0; p < k; p++) {
    const float *bp = b + p * ldb, *ap = a + p * a_cs;
    for (v = 0; v < NV; v++) bv[v] = v == NV - 1 ? _mm256_maskload_ps(bp + 8 * v, tm) : _mm256_loadu_ps(bp + 8 * v);
    for (i = 0; i < MR; i++) {
      const __m256 ai = _mm256_broadcast_ss(ap + i * a_rs);
      for (v = 0; v < NV; v++) s[i][v] = _mm256_fmadd_ps(ai, bv[v], s[i][v]);
    }
  }
  for (i = 0; i < MR; i++)
    for (v = 0; v < NV; v++)
      if (v == NV - 1) _mm256_maskstore_ps(c + i * ldc + 8 * v, tm, s[i][v]);
      else _mm256_storeu_ps(c + i * ldc + 8 * v, s[i][v]);
}

#define MM_CASE(R, V) \
  case R * 4 + V: mm_block(R, V, k, ai, a_rs, a_cs, bj, ldb, cij, ldc, acc, tail); break;
#define MM_CASES(R) MM_CASE(R, 1) MM_CASE(R, 2) MM_CASE(R, 3)

void attnc_prims_matmul_avx2(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb,
                             float *c, long ldc, int acc)
{
  long i0, j0;
  for (j0 = 0; j0 < n; j0 += 24) {
    const long w = n - j0 < 24 ? n - j0 : 24, nv = (w + 7) / 8, tail = w - 8 * (nv - 1);
    for (i0 = 0; i0 < m; i0 += MM_MR) {
      const long mr = m - i0 < MM_MR ? m - i0 : MM_MR;
      const float *ai = a + i0 * a_rs, *bj = b + j0;
      float *cij = c + i0 * ldc + j0;
      switch (mr * 4 + nv) { MM_CASES(1) MM_CASES(2) MM_CASES(3) MM_CASES(4) }
    }
  }
}
