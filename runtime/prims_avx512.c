/* AVX-512 primitives.  This file is compiled with -mavx512f and friends;
 * nothing here runs unless prims.c found those features on the CPU. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "prims.h"
#include "prefetch.h"

#define NR ATTNC_PACK_NR
#define KC 1024 /* inputs per pass: one pass up to 1024 (the y block is not re-read; B streams from L2) */
#define KC_COPY 256 /* inputs per pass when x's rows are copied (rows_alias) */
#define PF_AHEAD 32 /* inputs: a panel's first block asks for its rows 4 KiB ahead */
#define KT ATTNC_ATTEND_KT
/* attend_cols' score rows (softmax_row, qk_kernel) are four vectors: 64 keys */
typedef char attnc_kt_is_64[KT == 64 ? 1 : -1];
#define INLINE static inline __attribute__((always_inline))

static long round16(long n) { return (n + 15) & ~15L; }

static __mmask16 tail_mask(long n) /* the first n of 16 lanes, n in 0..16 */
{
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* e^x for x <= 88.3 (the softmax's x <= 0); exactly 0 below -87.3 (and
 * for -inf); NaN stays NaN. */
INLINE __m512 exp512_neg(__m512 x)
{
  const __m512 lo = _mm512_set1_ps(-87.3f);
  /* lanes below -87.3 (-inf among them) are zeroed by the masked scalef;
   * a NaN compares false and stays NaN */
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
  __m512 n, r, p;
  x = _mm512_max_ps(lo, x); /* keeps -inf out of the reduction (no invalid-operation flag); NaN passes through */
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
  return _mm512_maskz_scalef_ps(keep, p, n);
}

/* The stale max: once every row has a running max m, a key tile whose
 * scores stay within m + STALE_MAX (in base 2) is exponentiated against
 * m itself, inside the q.k kernel, and m, the sums so far and o need no
 * rescaling.  Probabilities then reach 2^STALE_MAX = 256 at most, which
 * float holds as well as 1.  A tile past that is scored again and goes
 * the usual way, which moves m up.  Wide heads only (c > 32): at
 * head_dim 32 and below the q.k kernel's d loop is short against its
 * epilogue of exponentials, and the plain path is the faster. */
#define STALE_MAX 8.0f

/* attend_rows works in base 2, as prims_avx2.c's attention does
 * (ATTNC_LOG2E in prims.h): fewer vector ops per score than exp512_neg.
 *
 * 2^x for x <= 127 (the softmax's x <= 0); 0 for -inf and below -150;
 * NaN stays NaN.  2^x = 2^r * 2^floor(x), r = x - floor(x) in [0, 1]
 * (1 where x is a tiny negative): one reduce gives r, prims.h's
 * ATTNC_EXP2F_P0..P5 give 2^r, and scalef, which floors its exponent
 * itself, takes x as it is.  Six vector ops, where rounding to the
 * nearest takes eleven (a clamp, a compare for the underflow lanes, a
 * two-op round, the subtraction, a masked scalef).  No clamp is needed:
 * reduce gives +0 for an infinity and raises no flag, and scalef by -inf
 * gives 0, so a masked score (-inf) needs nothing of its own. */
INLINE __m512 exp2_512_neg(__m512 x)
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

/* e^x for any x (clamped above at 88.3, where float overflows). */
INLINE __m512 exp512(__m512 x)
{
  return exp512_neg(_mm512_min_ps(_mm512_set1_ps(88.3f), x)); /* NaN in x passes through */
}

/* The softcap, cap * tanh(s / cap), inv = 1 / cap (ATTNC_TANH_* in
 * prims.h): the Taylor series for small |s / cap|, and where any lane is
 * past it (1 - e) / (1 + e), e = e^(-2|s / cap|), divided by a reciprocal
 * estimate refined by one Newton step.  With a cap well above the
 * logits (Gemma 2's 50) every lane is small, and the series is all.  NaN
 * stays NaN; +-inf gives +-cap. */
INLINE __m512 softcap512(__m512 s, float cap, float inv)
{
  const __m512 zero = _mm512_setzero_ps();
  const __m512 x = _mm512_mul_ps(s, _mm512_set1_ps(inv)), x2 = _mm512_mul_ps(x, x);
  const __m512 a = _mm512_max_ps(x, _mm512_sub_ps(zero, x)); /* |x| (NaN stays NaN) */
  const __mmask16 big = _mm512_cmp_ps_mask(a, _mm512_set1_ps(ATTNC_TANH_SMALL), _CMP_NLT_UQ); /* and NaN */
  __m512 p = _mm512_set1_ps(ATTNC_TANH_T11);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(ATTNC_TANH_T9));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(ATTNC_TANH_T7));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(ATTNC_TANH_T5));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(ATTNC_TANH_T3));
  p = _mm512_fmadd_ps(_mm512_mul_ps(x, x2), p, x);
  if (big) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = exp2_512_neg(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f * ATTNC_LOG2E)));
    const __m512 den = _mm512_add_ps(one, e);
    __m512 y = _mm512_rcp14_ps(den), t;
    y = _mm512_mul_ps(y, _mm512_fnmadd_ps(den, y, _mm512_set1_ps(2.0f)));
    t = _mm512_mul_ps(_mm512_sub_ps(one, e), y);
    t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), t, _mm512_sub_ps(zero, t));
    p = _mm512_mask_blend_ps(big, p, t);
  }
  return _mm512_mul_ps(_mm512_set1_ps(cap), p);
}

/* ---- linear: y = x W^T + b with W packed in panels of 32 outputs ---- */

/* An MR x 32 block of y over kc inputs: 2*MR accumulators in registers.
 * pf, when set, is the next panel at the same inputs: its two lines of
 * each k are asked for into L2 as this one goes (see linear_cols). */
INLINE void lin_kernel(const int MR, long kc, const float *a, long lda, const float *bp, float *c, long ldc,
                       int first, const float *bias, __mmask16 m0, __mmask16 m1, const char *pf)
{
  __m512 acc0[14], acc1[14];
  /* row i at a3[i / 3] + i % 3 rows: five bases and three offsets (0, 1
   * and 2 rows, plus k) address the 14 rows; one pointer per row leaves
   * too few registers, and gcc then reloads row offsets from the stack
   * every k */
  const float *a3[5];
  long k;
  int i;
  for (i = 0; i < 5; i++) a3[i] = a + 3 * i * lda;
  for (i = 0; i < MR; i++) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  for (k = 0; k < kc; k++) {
    __m512 b0 = _mm512_loadu_ps(bp + k * NR), b1 = _mm512_loadu_ps(bp + k * NR + 16);
    if (pf) {
      _mm_prefetch(pf + k * 128, _MM_HINT_T1);
      _mm_prefetch(pf + k * 128 + 64, _MM_HINT_T1);
    }
    for (i = 0; i < MR; i++) {
      __m512 ai = _mm512_set1_ps(a3[i / 3][i % 3 * lda + k]);
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

/* Whether a row block's x rows, x_stride floats apart, would crowd one
 * set of L1: more than 7 of the 14 rows' lines in one set (sets repeat
 * every 4 KiB on a 32 KiB 8-way or 48 KiB 12-way L1).  Rows of 1024
 * inputs put all 14 in one set, and each k's broadcasts miss.  Such rows
 * are copied, a pass and KC_COPY inputs at a time, to a buffer whose rows
 * are 64 bytes longer, which spreads them over the sets.  Whether rows
 * are copied depends on x_stride alone, so the same rows give the same
 * bits however a call splits them. */
static int rows_alias(long x_stride)
{
  int count[64] = { 0 }, i, most = 0;
  for (i = 0; i < 14; i++) {
    int set = (int)(((unsigned long)x_stride * 4 * (unsigned long)i / 64) % 64);
    if (++count[set] > most) most = count[set];
  }
  return most > 7;
}

/* rows x kc floats of x into buf, rows ld floats apart */
static void copy_rows(const float *x, long rows, long x_stride, long kc, float *buf, long ld)
{
  long r, k;
  for (r = 0; r < rows; r++) {
    const float *s = x + r * x_stride;
    float *d = buf + r * ld;
    for (k = 0; k + 16 <= kc; k += 16) _mm512_storeu_ps(d + k, _mm512_loadu_ps(s + k));
    if (k < kc) _mm512_mask_storeu_ps(d + k, tail_mask(kc - k), _mm512_maskz_loadu_ps(tail_mask(kc - k), s + k));
  }
}

/* Column n (n + col0 of the weight) of row r at y + r * y_stride +
 * (n + col0) / head_w * head_stride + (n + col0) % head_w: a 32-wide panel
 * never spans two heads, since col0 and head_w are multiples of 32.
 * head_w = n_out and col0 = 0 is the plain layout. */
static void linear_cols(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                        const float *b, float *y, long y_stride, long col0, long head_w, long head_stride)
{
  /* Rows in blocks of at most 14, their sizes differing by at most one
   * (128 rows: 8 of 13 and 2 of 12, where blocks of 14 leave a 2-row block
   * at half the FMA rate), and the blocks in passes of at most 4, also
   * even: a pass's x (at most 56 rows, 112 KiB at 512 inputs) stays in L2
   * while every panel goes by.  Which block a row falls in never changes
   * how its outputs are summed. */
  const long panels = (n_out + NR - 1) / NR, nblk = (rows + 13) / 14, npass = (nblk + 3) / 4;
  const int copy = rows_alias(x_stride);
  const long kcmax = copy ? KC_COPY : KC;
  /* over 512 KiB of weights, every pass finds them in L3, not only the
   * first, so every pass prefetches its panels as the first does */
  const int big_w = panels * NR * n_in > (1L << 17);
  float xc[56 * (KC_COPY + 16)] __attribute__((aligned(64)));
  long pass, k0, p, bk;
  for (pass = 0; pass < npass; pass++) {
    const long b0 = pass * nblk / npass, b1 = (pass + 1) * nblk / npass;
    const long pr0 = b0 * rows / nblk, prows = b1 * rows / nblk - pr0;
    const int cold = pass == 0 || big_w;
    for (k0 = 0; k0 < n_in; k0 += kcmax) {
      long kc = n_in - k0 < kcmax ? n_in - k0 : kcmax;
      int first = k0 == 0;
      if (copy) copy_rows(x + pr0 * x_stride + k0, prows, x_stride, kc, xc, KC_COPY + 16);
      for (p = 0; p < panels; p++) {
        const float *bp = packed + p * NR * n_in + k0 * NR;
        long nv = n_out - p * NR;
        __mmask16 m0 = tail_mask(nv), m1 = tail_mask(nv > 16 ? nv - 16 : 0);
        const float *bias = b ? b + p * NR : NULL;
        const long col = col0 + p * NR;
        float *yc = y + col / head_w * head_stride + col % head_w;
        for (bk = b0; bk < b1; bk++) {
          const long r0 = bk * rows / nblk, mr = (bk + 1) * rows / nblk - r0;
          const float *a = copy ? xc + (r0 - pr0) * (KC_COPY + 16) : x + r0 * x_stride + k0;
          const long lda = copy ? KC_COPY + 16 : x_stride;
          float *c = yc + r0 * y_stride;
          /* The first pass (every pass, big_w) finds a panel in L3 when
           * the weight is larger than L2 (a projection of few rows, whose
           * items each take a share of the columns).  Its second row
           * block asks for the next panel, so the next first block does
           * not wait on L3.  The first panel, and every panel of a
           * one-block pass, is asked for by its own first block,
           * PF_AHEAD inputs ahead. */
          const char *pf = NULL;
          if (cold && bk == b0 && (p == 0 || b1 - b0 == 1)) pf = (const char *)(bp + PF_AHEAD * NR);
          else if (cold && bk == b0 + 1 && p + 1 < panels) pf = (const char *)(bp + NR * n_in);
#define LIN_CASE(MR) \
  case MR: lin_kernel(MR, kc, a, lda, bp, c, y_stride, first, bias, m0, m1, pf); break;
          switch (mr) { /* rows as a compile-time constant */
            LIN_CASE(14) LIN_CASE(13) LIN_CASE(12) LIN_CASE(11) LIN_CASE(10) LIN_CASE(9) LIN_CASE(8)
            LIN_CASE(7) LIN_CASE(6) LIN_CASE(5) LIN_CASE(4) LIN_CASE(3) LIN_CASE(2)
          default: lin_kernel(1, kc, a, lda, bp, c, y_stride, first, bias, m0, m1, pf); break;
          }
#undef LIN_CASE
        }
      }
    }
  }
}

void attnc_prims_linear_avx512(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                               const float *b, float *y, long y_stride)
{
  if (n_out > 0) linear_cols(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, 0, n_out, 0);
}

void attnc_prims_linear_heads_avx512(const float *x, long rows, long x_stride, long n_in, const float *packed,
                                     long n_out, const float *b, float *y, long y_stride, long col0, long head_w,
                                     long head_stride)
{
  linear_cols(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, col0, head_w, head_stride);
}

/* ---- linear over int8 weights kept int8 (attnc_prims_pack_q8) ----
 *
 * Each k's 32 int8 weights are widened to f32 in registers (two
 * sign-extending loads, two conversions) and meet x as the f32 kernel's
 * panels do; the row's scale multiplies the sums once, at the end.  A
 * projection of few rows (decoding) is bound by the weights' bytes, a
 * quarter of f32's; one of many rows by the FMAs, with the conversions
 * on top. */
INLINE void lin_q8_kernel(const int MR, long n_in, const float *a, long lda, const signed char *wq, const float *scale,
                          float *c, long ldc, const float *bias, __mmask16 m0, __mmask16 m1)
{
  __m512 acc0[14], acc1[14];
  const float *a3[5]; /* row i at a3[i / 3] + i % 3 rows, as lin_kernel */
  long k;
  int i;
  for (i = 0; i < 5; i++) a3[i] = a + 3 * i * lda;
  for (i = 0; i < MR; i++) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  for (k = 0; k < n_in; k++) {
    const signed char *w = wq + k * NR;
    const __m512 b0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)w)));
    const __m512 b1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + 16))));
    for (i = 0; i < MR; i++) {
      const __m512 ai = _mm512_set1_ps(a3[i / 3][i % 3 * lda + k]);
      acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
    }
  }
  {
    const __m512 s0 = _mm512_loadu_ps(scale), s1 = _mm512_loadu_ps(scale + 16);
    const __m512 c0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 c1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (i = 0; i < MR; i++) {
      _mm512_mask_storeu_ps(c + i * ldc, m0, _mm512_fmadd_ps(acc0[i], s0, c0));
      _mm512_mask_storeu_ps(c + i * ldc + 16, m1, _mm512_fmadd_ps(acc1[i], s1, c1));
    }
  }
}

/* Rows in blocks of at most 14 (sizes differing by at most one), and the
 * blocks in passes of at most 4, whose x stays in L2 while every panel
 * goes by, as linear_cols arranges them. */
void attnc_prims_linear_q8_avx512(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                  const float *b, float *y, long y_stride)
{
  const long panels = (n_out + NR - 1) / NR, nblk = (rows + 13) / 14, npass = (nblk + 3) / 4;
  long pass, p, bk;
  for (pass = 0; pass < npass; pass++) {
    const long b0 = pass * nblk / npass, b1 = (pass + 1) * nblk / npass;
    for (p = 0; p < panels; p++) {
      const unsigned char *panel = (const unsigned char *)packed + p * ATTNC_Q8_PANEL(n_in);
      const float *scale = (const float *)panel;
      const signed char *wq = (const signed char *)(panel + NR * sizeof(float));
      const long nv = n_out - p * NR;
      const __mmask16 m0 = tail_mask(nv), m1 = tail_mask(nv > 16 ? nv - 16 : 0);
      const float *bias = b ? b + p * NR : NULL;
      for (bk = b0; bk < b1; bk++) {
        const long r0 = bk * rows / nblk, mr = (bk + 1) * rows / nblk - r0;
        const float *a = x + r0 * x_stride;
        float *c = y + r0 * y_stride + p * NR;
#define LINQ_CASE(MR) \
  case MR: lin_q8_kernel(MR, n_in, a, x_stride, wq, scale, c, y_stride, bias, m0, m1); break;
        switch (mr) { /* rows as a compile-time constant */
          LINQ_CASE(14) LINQ_CASE(13) LINQ_CASE(12) LINQ_CASE(11) LINQ_CASE(10) LINQ_CASE(9) LINQ_CASE(8)
          LINQ_CASE(7) LINQ_CASE(6) LINQ_CASE(5) LINQ_CASE(4) LINQ_CASE(3) LINQ_CASE(2)
        default: lin_q8_kernel(1, n_in, a, x_stride, wq, scale, c, y_stride, bias, m0, m1); break;
        }
#undef LINQ_CASE
      }
    }
  }
}

/* ---- linear over bf16 weights kept bf16 (attnc_prims_pack_bf16) ----
 * Each pair of inputs' 64-byte row of 16 outputs holds, in each 32-bit
 * lane, the output's two bf16 weights: shifted up 16 bits, the first as
 * f32; masked to its top 16, the second.  x stays f32 (no rounding). */
INLINE void lin_bf16_kernel(const int MR, long n_in, const float *a, long lda, const unsigned char *wp, float *c,
                            long ldc, const float *bias, __mmask16 m0, __mmask16 m1)
{
  __m512 acc0[12], acc1[12];
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  long kk;
  int i;
  for (i = 0; i < MR; i++) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  for (kk = 0; 2 * kk < n_in; kk++) {
    const __m512i v0 = _mm512_loadu_si512(wp + kk * 128), v1 = _mm512_loadu_si512(wp + kk * 128 + 64);
    const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
    if (2 * kk + 1 < n_in) {
      const __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi)), o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
      for (i = 0; i < MR; i++) {
        const __m512 xe = _mm512_set1_ps(a[i * lda + 2 * kk]), xo = _mm512_set1_ps(a[i * lda + 2 * kk + 1]);
        acc0[i] = _mm512_fmadd_ps(xo, o0, _mm512_fmadd_ps(xe, e0, acc0[i]));
        acc1[i] = _mm512_fmadd_ps(xo, o1, _mm512_fmadd_ps(xe, e1, acc1[i]));
      }
    } else { /* an odd n_in: the last pair has its first input only */
      for (i = 0; i < MR; i++) {
        const __m512 xe = _mm512_set1_ps(a[i * lda + 2 * kk]);
        acc0[i] = _mm512_fmadd_ps(xe, e0, acc0[i]);
        acc1[i] = _mm512_fmadd_ps(xe, e1, acc1[i]);
      }
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

void attnc_prims_linear_bf16_avx512(const float *x, long rows, long x_stride, long n_in, const void *packed,
                                    long n_out, const float *b, float *y, long y_stride)
{
  const long panels = (n_out + NR - 1) / NR, nblk = (rows + 11) / 12, npass = (nblk + 3) / 4;
  long pass, p, bk;
  for (pass = 0; pass < npass; pass++) {
    const long b0 = pass * nblk / npass, b1 = (pass + 1) * nblk / npass;
    for (p = 0; p < panels; p++) {
      const unsigned char *wp = (const unsigned char *)packed + p * ATTNC_BF16_PANEL(n_in);
      const long nv = n_out - p * NR;
      const __mmask16 m0 = tail_mask(nv), m1 = tail_mask(nv > 16 ? nv - 16 : 0);
      const float *bias = b ? b + p * NR : NULL;
      for (bk = b0; bk < b1; bk++) {
        const long r0 = bk * rows / nblk, mr = (bk + 1) * rows / nblk - r0;
        const float *a = x + r0 * x_stride;
        float *c = y + r0 * y_stride + p * NR;
#define LINB_CASE(MR) \
  case MR: lin_bf16_kernel(MR, n_in, a, x_stride, wp, c, y_stride, bias, m0, m1); break;
        switch (mr) {
          LINB_CASE(12) LINB_CASE(11) LINB_CASE(10) LINB_CASE(9) LINB_CASE(8) LINB_CASE(7) LINB_CASE(6)
          LINB_CASE(5) LINB_CASE(4) LINB_CASE(3) LINB_CASE(2)
        default: lin_bf16_kernel(1, n_in, a, x_stride, wp, c, y_stride, bias, m0, m1); break;
        }
#undef LINB_CASE
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

/* Row i of O, scaled by alpha[i] when there is an alpha (the online
 * softmax's rescale, folded into the p.v kernels' first load). */
INLINE __m512 load_scaled(const float *o, const float *alpha, int i)
{
  return alpha ? _mm512_mul_ps(_mm512_set1_ps(alpha[i]), _mm512_load_ps(o)) : _mm512_load_ps(o);
}

/* O[MR][cv0*16 .. +nvv*16] = alpha O + P[MR][:kt] . V[:kt][...], P[i][j] at P[i * pr + j * pj] */
INLINE void pv_kernel(const int MR, long kt, const float *P, long pr, long pj, float *O, long cp, const float *alpha,
                      const float *v, long v_stride, long cv0, const int nvv, __mmask16 last)
{
  __m512 acc[6][4];
  long j;
  int i, u;
  for (i = 0; i < MR; i++)
    for (u = 0; u < 4; u++) acc[i][u] = u < nvv ? load_scaled(O + i * cp + (cv0 + u) * 16, alpha, i) : _mm512_setzero_ps();
  for (j = 0; j < kt; j++) {
    const float *vr = v + j * v_stride + cv0 * 16;
    __m512 b[4];
    for (u = 0; u < 4; u++)
      b[u] = u >= nvv ? _mm512_setzero_ps()
           : (u == nvv - 1) ? _mm512_maskz_loadu_ps(last, vr + u * 16) : _mm512_loadu_ps(vr + u * 16);
    for (i = 0; i < MR; i++) {
      __m512 p = _mm512_set1_ps(P[i * pr + j * pj]);
      for (u = 0; u < 4; u++)
        if (u < nvv) acc[i][u] = _mm512_fmadd_ps(p, b[u], acc[i][u]);
    }
  }
  for (i = 0; i < MR; i++)
    for (u = 0; u < 4; u++)
      if (u < nvv) _mm512_store_ps(O + i * cp + (cv0 + u) * 16, acc[i][u]);
}

/* The sums of a[r][k] (r, k < 4), each across its 16 lanes, as one
 * vector: lane 4r + k.  A tree of unpacks and shuffles, 45 vector ops for
 * 16 sums, where one _mm512_reduce_add_ps each takes about 8. */
INLINE __m512 hsum4x4(__m512 a[4][4])
{
  __m512 v[4], w01, w23;
  int r;
  for (r = 0; r < 4; r++) {
    /* per 128-bit chunk: keys 0 and 1 (and 2 and 3) interleaved, halves summed */
    const __m512 u01 = _mm512_add_ps(_mm512_unpacklo_ps(a[r][0], a[r][1]), _mm512_unpackhi_ps(a[r][0], a[r][1]));
    const __m512 u23 = _mm512_add_ps(_mm512_unpacklo_ps(a[r][2], a[r][3]), _mm512_unpackhi_ps(a[r][2], a[r][3]));
    /* per chunk: keys 0..3, each summed over the chunk's 4 lanes */
    v[r] = _mm512_add_ps(_mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  /* the four chunks of each row summed: chunk r of the result is row r */
  w01 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
  w23 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(v[2], v[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* NK (<= 4) keys x MR (<= 4) rows of dot products along c: 16
 * accumulators (those past NK or MR stay 0), so the FMA latency is
 * hidden and each key vector is loaded once for all rows; the 16 sums
 * reduced together (hsum4x4) into S[r * KT + k]. */
INLINE void qkd_kernel(const int NK, const int MR, long nv, const float *Q, long cp, const float *k, long k_stride,
                       float *S, __mmask16 last)
{
  __m512 acc[4][4], sums;
  long v;
  int i, r;
  for (r = 0; r < 4; r++)
    for (i = 0; i < 4; i++) acc[r][i] = _mm512_setzero_ps();
  for (v = 0; v < nv; v++) {
    __m512 kv[4];
    for (i = 0; i < NK; i++)
      kv[i] = v == nv - 1 ? _mm512_maskz_loadu_ps(last, k + i * k_stride + v * 16) : _mm512_loadu_ps(k + i * k_stride + v * 16);
    for (r = 0; r < MR; r++) {
      const __m512 q = _mm512_load_ps(Q + r * cp + v * 16);
      for (i = 0; i < NK; i++) acc[r][i] = _mm512_fmadd_ps(q, kv[i], acc[r][i]);
    }
  }
  sums = hsum4x4(acc);
  for (r = 0; r < MR; r++) _mm_mask_storeu_ps(S + r * KT, (__mmask8)((1u << NK) - 1u), _mm512_extractf32x4_ps(sums, r));
}

/* Few rows (decoding): dot products along c, no transposed key tile. */
static void qk_direct(long rows, long c, const float *Q, long cp, const float *k, long k_stride, long kt, float *S,
                      __mmask16 last, const next_tile *nx)
{
  long jj, r, r0, nv = cp / 16;
  for (jj = 0; jj < kt; jj += 4) {
    const float *kr = k + jj * k_stride;
    prefetch_next(nx, jj, jj + 4);
    for (r0 = 0; r0 < rows; r0 += 4) {
      const float *qr = Q + r0 * cp;
      float *sr = S + r0 * KT + jj;
#define QKD_ROWS(NK)                                                                  \
  switch (rows - r0 < 4 ? rows - r0 : 4) {                                            \
  case 4: qkd_kernel(NK, 4, nv, qr, cp, kr, k_stride, sr, last); break;               \
  case 3: qkd_kernel(NK, 3, nv, qr, cp, kr, k_stride, sr, last); break;               \
  case 2: qkd_kernel(NK, 2, nv, qr, cp, kr, k_stride, sr, last); break;               \
  default: qkd_kernel(NK, 1, nv, qr, cp, kr, k_stride, sr, last); break;              \
  }
      switch (kt - jj < 4 ? kt - jj : 4) {
      case 4: QKD_ROWS(4) break;
      case 3: QKD_ROWS(3) break;
      case 2: QKD_ROWS(2) break;
      default: QKD_ROWS(1) break;
      }
#undef QKD_ROWS
    }
  }
  for (r = 0; r < rows; r++)
    for (jj = kt; jj < KT; jj++) S[r * KT + jj] = 0;
  (void)c;
}

/* Narrow heads (c <= 32): eight rows at a time keep 16 accumulators busy. */
INLINE void pv_kernel8(const int MR, long kt, const float *P, long pr, long pj, float *O, long cp, const float *alpha,
                       const float *v, long v_stride, const int nvv, __mmask16 last)
{
  __m512 acc[8][2];
  long j;
  int i, u;
  for (i = 0; i < MR; i++)
    for (u = 0; u < 2; u++) acc[i][u] = u < nvv ? load_scaled(O + i * cp + u * 16, alpha, i) : _mm512_setzero_ps();
  for (j = 0; j < kt; j++) {
    const float *vr = v + j * v_stride;
    __m512 b[2];
    for (u = 0; u < 2; u++)
      b[u] = u >= nvv ? _mm512_setzero_ps()
           : (u == nvv - 1) ? _mm512_maskz_loadu_ps(last, vr + u * 16) : _mm512_loadu_ps(vr + u * 16);
    for (i = 0; i < MR; i++) {
      __m512 p = _mm512_set1_ps(P[i * pr + j * pj]);
      for (u = 0; u < 2; u++)
        if (u < nvv) acc[i][u] = _mm512_fmadd_ps(p, b[u], acc[i][u]);
    }
  }
  for (i = 0; i < MR; i++)
    for (u = 0; u < 2; u++)
      if (u < nvv) _mm512_store_ps(O + i * cp + u * 16, acc[i][u]);
}

/* O[rows][:c] = alpha O + P[rows][:kt] . V[:kt][:c], P[i][j] at P[i * pr + j * pj],
 * alpha[r] per row (NULL: 1): register blocks of 6 rows x 64 values (8 rows
 * x 32 for narrow heads).  Inlined, so that each caller's pr or pj is a
 * constant: the row offsets of P are then immediates, where as a function
 * of its own (6 or 8 offsets in registers, with the accumulators taking
 * every other) they end up in vector registers and each broadcast waits
 * for a vmovq. */
INLINE void pv_all(long rows, long kt, const float *P, long pr, long pj, float *O, long cp, const float *alpha,
                   const float *vt, long v_stride, long nv, __mmask16 last)
{
  long r0, cv0;
  if (nv <= 2) {
    for (r0 = 0; r0 < rows; r0 += 8) {
      const float *Pr = P + r0 * pr, *Ar = alpha ? alpha + r0 : NULL;
      float *Or = O + r0 * cp;
#define PV8_ROWS(NVV)                                                                 \
  switch (rows - r0 < 8 ? rows - r0 : 8) {                                            \
  case 8: pv_kernel8(8, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, NVV, last); break;      \
  case 7: pv_kernel8(7, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, NVV, last); break;      \
  case 6: pv_kernel8(6, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, NVV, last); break;      \
  case 5: pv_kernel8(5, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, NVV, last); break;      \
  case 4: pv_kernel8(4, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, NVV, last); break;      \
  case 3: pv_kernel8(3, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, NVV, last); break;      \
  case 2: pv_kernel8(2, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, NVV, last); break;      \
  default: pv_kernel8(1, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, NVV, last); break;     \
  }
      if (nv == 2) { PV8_ROWS(2) } else { PV8_ROWS(1) }
#undef PV8_ROWS
    }
    return;
  }
  for (r0 = 0; r0 < rows; r0 += 6) {
    const float *Pr = P + r0 * pr, *Ar = alpha ? alpha + r0 : NULL;
    float *Or = O + r0 * cp;
    for (cv0 = 0; cv0 < nv; cv0 += 4) {
      long nvv = nv - cv0 < 4 ? nv - cv0 : 4;
      __mmask16 lm = (cv0 + nvv == nv) ? last : (__mmask16)0xFFFF;
      /* rows and vector count as compile-time constants: no tests in the inner loop */
#define PV_ROWS(NVV)                                                                         \
  switch (rows - r0 < 6 ? rows - r0 : 6) {                                                   \
  case 6: pv_kernel(6, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, cv0, NVV, lm); break;           \
  case 5: pv_kernel(5, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, cv0, NVV, lm); break;           \
  case 4: pv_kernel(4, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, cv0, NVV, lm); break;           \
  case 3: pv_kernel(3, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, cv0, NVV, lm); break;           \
  case 2: pv_kernel(2, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, cv0, NVV, lm); break;           \
  default: pv_kernel(1, kt, Pr, pr, pj, Or, cp, Ar, vt, v_stride, cv0, NVV, lm); break;          \
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
      if (t->softcap > 0) s[v] = softcap512(s[v], t->softcap, 1.0f / t->softcap); /* 3b. softcap */
      mx = _mm512_max_ps(mx, s[v]);
      nan_lanes |= _mm512_cmp_ps_mask(s[v], s[v], _CMP_UNORD_Q);
    }
  } else
  for (v = 0; v < 4; v++) {
    __m512i jv = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(v * 16)));
    __mmask16 ok = _mm512_cmp_epi32_mask(jv, _mm512_set1_epi32((int)a), _MM_CMPINT_NLT) &
                   _mm512_cmp_epi32_mask(jv, _mm512_set1_epi32((int)b), _MM_CMPINT_LE);
    s[v] = _mm512_load_ps(srow + v * 16);
    if (t->softcap > 0) s[v] = softcap512(s[v], t->softcap, 1.0f / t->softcap); /* 3b. softcap, before bias and masks */
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

/* The tile's rows out of the work buffer: normalised by the softmax sum,
 * or (a key split) unnormalised with the running max and sum; a row that
 * saw no key gets the empty-row rule.  m_unit: what one unit of M is in
 * base e (ATTNC_LN2 from attend_rows, which works in base 2), for the combine. */
static void finish_rows(const attnc_tile *t, float *O, long cp, float *M, float *L, float m_unit)
{
  const long nv = cp / 16;
  const __mmask16 last = tail_mask(t->c - (nv - 1) * 16);
  long r, d, i, hh;
  /* a row whose NaN score the max dropped (attend_rows) has a NaN sum: seen */
  for (r = 0; r < t->rows; r++)
    if (M[r] == -INFINITY && L[r] != 0) M[r] = NAN;
  for (r = 0, i = 0, hh = 0; r < t->rows; r++) {
    float *o = t->o + i * t->o_stride + hh * t->o_hstride; /* row r = i * q_group + hh */
    if (++hh == t->q_group) {
      hh = 0;
      i++;
    }
    if (t->m_out) {
      t->m_out[r] = M[r] * m_unit;
      t->l_out[r] = L[r];
      for (d = 0; d < nv; d++)
        _mm512_mask_storeu_ps(o + d * 16, d == nv - 1 ? last : (__mmask16)0xFFFF, _mm512_load_ps(O + r * cp + d * 16));
    } else if (M[r] != -INFINITY) { /* saw a key: normalise (a NaN stays NaN) */
      __m512 inv = _mm512_set1_ps(1.0f / L[r]);
      for (d = 0; d < nv; d++)
        _mm512_mask_storeu_ps(o + d * 16, d == nv - 1 ? last : (__mmask16)0xFFFF,
                              _mm512_mul_ps(inv, _mm512_load_ps(O + r * cp + d * 16)));
    } else {
      attnc_prims_empty_row(t, r, o);
    }
  }
}

/* ---- attention with query rows across the vector lanes ----
 *
 * For tiles of more than 8 query rows.  The scores of a key tile are kept
 * transposed, ST[j][r] (16 rows per vector), so
 *   - q.k needs no transposed keys: it broadcasts k[j][d] against a vector
 *     of 16 rows of the scaled, transposed queries QT[d][r];
 *   - the online softmax runs down the columns: the max and sum over a key
 *     tile, the rescale factor and the running max and sum are vectors of
 *     16 rows, with no horizontal reductions and no scalar exp;
 *   - p.v broadcasts p[r][j] = ST[j][r] against rows of v, as pv_all does.
 * Scores, biases and the running max are in base-2 units (times log2 e;
 * see exp2_512_neg). */

/* ST[j][16*u ..] (rows 16 apart by r16) for NJ keys k[j] x NQ row vectors,
 * plus BT[j * bt_j + 16*u ..] when there is a bias laid out like the scores
 * (its lanes past `live` rows not read); MX[16*u ..] = max(MX, these
 * scores) (a NaN score may be dropped: see attend_rows).
 *
 * With NM set (-m, the rows' running max negated: see STALE_MAX), the
 * sums start at -m, so that MX gets the largest s - m, and ST the
 * probabilities 2^(s - m), taken from the registers, and TS[16*u ..]
 * their sums: no pass of its own over the tile for the softmax. */
INLINE void qkT_kernel(const int NJ, const int NQ, long c, const float *QT, long r16, const float *k, long k_stride,
                       float *ST, float *MX, const float *BT, long bt_j, long live, const float *NM, float *TS,
                       float cap, float cap_inv)
{
  __m512 acc[6][4];
  const __m512 log2e = _mm512_set1_ps(ATTNC_LOG2E);
  long d;
  int j, u;
  for (u = 0; u < NQ; u++) {
    const __m512 a0 = NM && !(cap > 0) ? _mm512_load_ps(NM + u * 16) : _mm512_setzero_ps();
    for (j = 0; j < NJ; j++) acc[j][u] = a0;
  }
  for (d = 0; d < c; d++) {
    __m512 q[4];
    for (u = 0; u < NQ; u++) q[u] = _mm512_load_ps(QT + d * r16 + u * 16);
    for (j = 0; j < NJ; j++) {
      __m512 kb = _mm512_set1_ps(k[j * k_stride + d]);
      for (u = 0; u < NQ; u++) acc[j][u] = _mm512_fmadd_ps(kb, q[u], acc[j][u]);
    }
  }
  for (u = 0; u < NQ; u++) {
    __m512 m = _mm512_load_ps(MX + u * 16);
    const __mmask16 lm = tail_mask(live - u * 16 < 0 ? 0 : live - u * 16);
    __m512 ts = NM ? _mm512_load_ps(TS + u * 16) : _mm512_setzero_ps();
    if (cap > 0) { /* the softcap comes before the bias, and before -m (so the sums started at 0) */
      const __m512 nm = NM ? _mm512_load_ps(NM + u * 16) : _mm512_setzero_ps();
      for (j = 0; j < NJ; j++) acc[j][u] = _mm512_add_ps(softcap512(acc[j][u], cap, cap_inv), nm);
    }
    for (j = 0; j < NJ; j++) {
      if (BT) acc[j][u] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(lm, BT + j * bt_j + u * 16), log2e, acc[j][u]);
      m = _mm512_max_ps(m, acc[j][u]);
      if (NM) {
        const __m512 p = exp2_512_neg(acc[j][u]);
        _mm512_store_ps(ST + j * r16 + u * 16, p);
        ts = _mm512_add_ps(ts, p);
      } else {
        _mm512_store_ps(ST + j * r16 + u * 16, acc[j][u]);
      }
    }
    _mm512_store_ps(MX + u * 16, m);
    if (NM) _mm512_store_ps(TS + u * 16, ts);
  }
}

/* QKB keys a block: 4 (16 accumulators) for narrow heads, 6 (24) for the
 * rest, where each row vector of q loaded then feeds six FMAs.  Narrow
 * heads keep four: with a d loop of 32 or less, the blocks' ends weigh
 * more than the loads six keys save. */
INLINE void qkT_tile_body(const int QKB, long nrv, long kt, long c, const float *QT, long r16, const float *k,
                          long k_stride, float *ST, float *MX, const float *BT, long bt_j, long rows, const next_tile *nx,
                          const float *NM, float *TS, float cap, float cap_inv)
{
  long rv0, jb;
  for (rv0 = 0; rv0 < r16; rv0 += 16) _mm512_store_ps(MX + rv0, _mm512_set1_ps(-INFINITY));
  if (NM)
    for (rv0 = 0; rv0 < r16; rv0 += 16) _mm512_store_ps(TS + rv0, _mm512_setzero_ps());
  for (rv0 = 0; rv0 < nrv; rv0 += 4) {
    const long nr = nrv - rv0 < 4 ? nrv - rv0 : 4;
    for (jb = 0; jb < kt; jb += QKB) {
      const long nj = kt - jb < QKB ? kt - jb : QKB;
      const float *qt = QT + rv0 * 16, *kb = k + jb * k_stride, *bt = BT ? BT + jb * bt_j + rv0 * 16 : NULL;
      float *st = ST + jb * r16 + rv0 * 16, *mx = MX + rv0 * 16, *ts = TS + rv0 * 16;
      const float *nm = NM ? NM + rv0 * 16 : NULL;
      const long live = rows - rv0 * 16;
      if (rv0 == 0) prefetch_next(nx, jb, jb + QKB);
      if (BT && jb + 8 < kt) { /* the bias two key blocks ahead: one from L3 or memory would stall the loop */
        const float *bn = BT + (jb + 8) * bt_j + rv0 * 16;
        int x, l;
        for (x = 0; x < QKB && jb + 8 + x < kt; x++)
          for (l = 0; l < nr; l++) _mm_prefetch((const char *)(bn + x * bt_j + l * 16), _MM_HINT_T0);
      }
#define QK_NQ(NJ)                                                         \
  switch (nr) {                                                           \
  case 4: qkT_kernel(NJ, 4, c, qt, r16, kb, k_stride, st, mx, bt, bt_j, live, nm, ts, cap, cap_inv); break; \
  case 3: qkT_kernel(NJ, 3, c, qt, r16, kb, k_stride, st, mx, bt, bt_j, live, nm, ts, cap, cap_inv); break; \
  case 2: qkT_kernel(NJ, 2, c, qt, r16, kb, k_stride, st, mx, bt, bt_j, live, nm, ts, cap, cap_inv); break; \
  default: qkT_kernel(NJ, 1, c, qt, r16, kb, k_stride, st, mx, bt, bt_j, live, nm, ts, cap, cap_inv); break; \
  }
      switch (nj) {
      case 6: QK_NQ(6) break;
      case 5: QK_NQ(5) break;
      case 4: QK_NQ(4) break;
      case 3: QK_NQ(3) break;
      case 2: QK_NQ(2) break;
      default: QK_NQ(1) break;
      }
#undef QK_NQ
    }
  }
}

static void qkT_tile4(long nrv, long kt, long c, const float *QT, long r16, const float *k, long k_stride, float *ST,
                      float *MX, const float *BT, long bt_j, long rows, const next_tile *nx, const float *NM, float *TS,
                      float cap, float cap_inv)
{
  qkT_tile_body(4, nrv, kt, c, QT, r16, k, k_stride, ST, MX, BT, bt_j, rows, nx, NM, TS, cap, cap_inv);
}
static void qkT_tile6(long nrv, long kt, long c, const float *QT, long r16, const float *k, long k_stride, float *ST,
                      float *MX, const float *BT, long bt_j, long rows, const next_tile *nx, const float *NM, float *TS,
                      float cap, float cap_inv)
{
  qkT_tile_body(6, nrv, kt, c, QT, r16, k, k_stride, ST, MX, BT, bt_j, rows, nx, NM, TS, cap, cap_inv);
}

/* r[0..15] (16 floats each) -> its transpose, in registers. */
INLINE void transpose16(__m512 *r)
{
  __m512 t[16];
  int i;
  for (i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

/* ST[j][16 rows of rv] += bias of those rows at keys j0 + j, j < kt, for a
 * bias contiguous along the keys: 16 x 16 blocks loaded by rows and
 * transposed in registers, far cheaper than a gather per key. */
static __m512 add_bias_rows(const float *bias0, const int *BO, long rv, long j0, long kt, float *st, long r16)
{
  __m512 mx = _mm512_set1_ps(-INFINITY); /* the column max of the biased scores */
  long jb;
  int x;
  for (jb = 0; jb < kt; jb += 16) {
    const long nk = kt - jb < 16 ? kt - jb : 16;
    const __mmask16 m = tail_mask(nk);
    __m512 r[16];
    for (x = 0; x < 16; x++) r[x] = _mm512_maskz_loadu_ps(m, bias0 + BO[rv * 16 + x] + j0 + jb);
    transpose16(r);
    for (x = 0; x < nk; x++) {
      float *p = st + (jb + x) * r16;
      const __m512 sv = _mm512_fmadd_ps(r[x], _mm512_set1_ps(ATTNC_LOG2E), _mm512_load_ps(p));
      _mm512_store_ps(p, sv);
      mx = _mm512_max_ps(mx, sv);
    }
  }
  return mx;
}

/* Rows [j0, j1) of a (rows stride floats apart, c floats each) to dst,
 * row j at dst + j * c (attend_pack's copy). */
static void pack_rows(const float *a, long stride, float *dst, long j0, long j1, long c)
{
  long j, d;
  for (j = j0; j < j1; j++)
    for (d = 0; d < c; d += 16) {
      const __mmask16 m = tail_mask(c - d);
      _mm512_mask_storeu_ps(dst + j * c + d, m, _mm512_maskz_loadu_ps(m, a + j * stride + d));
    }
}

/* pack: also leave k's and v's rows in t->k_pack and t->v_pack (attend_pack) */
INLINE void attend_rows_body(const attnc_tile *t, const int narrow, const int whole, const int pack)
{
  const long rows = t->rows, c = t->c, cp = round16(c), nv = cp / 16, r16 = round16(rows), nrv = r16 / 16;
  float *O = t->work, *QT = O + r16 * cp, *ST = QT + cp * r16, *M = ST + KT * r16, *L = M + r16, *A = L + r16;
  int *LO = (int *)(A + r16), *HI = LO + r16, *BO = HI + r16;
  float *MX = (float *)(BO + r16); /* the column max of the scores, from the q.k kernel */
  float *TS = MX + r16;            /* a tile's sums of probabilities (the stale-max path) */
  /* whole: c is a multiple of 16, the loads of v need no mask (a masked
   * load is one more vector op) */
  const __mmask16 last = whole ? (__mmask16)0xFFFF : tail_mask(c - (nv - 1) * 16);
  const __m512 ninf = _mm512_set1_ps(-INFINITY), nan = _mm512_set1_ps(NAN);
  const float *bias0 = t->bias ? t->bias + t->i0 * t->bias_i : NULL;
  /* 3b. the softcap in base 2: cap * log2(e) * tanh(s / (cap * log2(e))) */
  const float cap2 = t->softcap > 0 ? t->softcap * ATTNC_LOG2E : 0.0f, cap2_inv = cap2 > 0 ? 1.0f / cap2 : 0.0f;
  long r, d, rv, j, j0, jmin, jmax, lo_max, hi_min;
  int m_finite = 0; /* every lane's running max is a number (not -inf, not NaN) */

  attnc_prims_rows_begin(t, r16, O, cp, LO, HI, BO, M, L, &jmin, &jmax, &lo_max, &hi_min);

  /* Keys and values are prefetched whatever their layout: the hardware
   * follows contiguous rows, but not always a whole tile ahead (see
   * prefetch.h) */
  if (jmin <= jmax) { /* the first key tile, while the queries are transposed */
    const long j1 = jmax + 1 < jmin + KT ? jmax + 1 : jmin + KT;
    attnc_prefetch_rows(t->k, t->k_stride, jmin, j1, c);
    attnc_prefetch_rows(t->v, t->v_stride, jmin, j1, c);
  }
  /* 3. scale, 2. split heads: QT[d][r] = scale * q[r][d], 16 x 16 blocks
   * transposed in registers (padding rows are 0) */
  for (rv = 0; rv < nrv; rv++) {
    const float *qr[16];
    attnc_prims_row_ptrs(t, t->q, t->q_stride, t->q_hstride, rv * 16, 16, qr);
    for (d = 0; d < c; d += 16) {
      const long nd = c - d < 16 ? c - d : 16;
      const __mmask16 m = tail_mask(nd);
      const __m512 sc = _mm512_set1_ps(t->scale * ATTNC_LOG2E);
      __m512 x[16];
      int u;
      for (u = 0; u < 16; u++)
        x[u] = qr[u] ? _mm512_mul_ps(sc, _mm512_maskz_loadu_ps(m, qr[u] + d)) : _mm512_setzero_ps();
      transpose16(x);
      for (u = 0; u < nd; u++) _mm512_store_ps(QT + (d + u) * r16 + rv * 16, x[u]);
    }
  }

  /* 5. bias: one contiguous along the keys goes in by 16x16 transposes;
   * one contiguous along the query rows (transposed by the kernel), with
   * the scores, 16 rows of one key a vector */
  const int bias_rows = t->bias && t->bias_j == 1;
  const int bias_cols = t->bias && !bias_rows && t->bias_i == 1 && t->q_group == 1;
  for (j0 = jmin; j0 <= jmax; j0 += KT) {
    const long kt = jmax - j0 + 1 < KT ? jmax - j0 + 1 : KT;
    /* every row sees every key of this tile: no per-lane range test */
    const int all_visible = lo_max <= j0 && hi_min >= j0 + kt - 1;
    /* the next tile, asked for by the q.k loop as it goes; after the
     * last one, the next query tile */
    const next_tile nx = attnc_next_tile(t, j0, jmax, 1);
    const float *kj = t->k + j0 * t->k_stride, *vj = t->v + j0 * t->v_stride;
    long ks = t->k_stride, vs = t->v_stride;
    if (pack) { /* the tile's keys and values (the tile before asked for them) into the copy, then read from there */
      pack_rows(t->k, t->k_stride, t->k_pack, j0, j0 + kt, c);
      pack_rows(t->v, t->v_stride, t->v_pack, j0, j0 + kt, c);
      kj = t->k_pack + j0 * c;
      vj = t->v_pack + j0 * c;
      ks = vs = c;
    }
    if (bias_rows && j0 + KT <= jmax) /* the next tile's bias, row by row */
      for (r = 0; r < rows; r++)
        attnc_prefetch_rows(bias0 + BO[r] + j0 + KT, 0, 0, 1, jmax + 1 - (j0 + KT) < KT ? jmax + 1 - (j0 + KT) : KT);
    /* Nothing to mask and no bias to gather, once every lane has a
     * running max, and heads wider than 32: try the stale max (STALE_MAX) */
    int stale = !narrow && m_finite && all_visible && !t->mask && (!t->bias || bias_cols);
    if (stale) /* -m, where the q.k kernel starts its sums: in A, as a stale tile needs no alpha */
      for (rv = 0; rv < nrv; rv++) _mm512_store_ps(A + rv * 16, _mm512_sub_ps(_mm512_setzero_ps(), _mm512_load_ps(M + rv * 16)));
    /* 4. scores (5. plus a bias laid out like them, rows contiguous) */
    (narrow ? qkT_tile4 : qkT_tile6)(nrv, kt, c, QT, r16, kj, ks, ST, MX,
             bias_cols ? bias0 + j0 * t->bias_j : NULL, t->bias_j, rows, &nx, stale ? A : NULL, TS, cap2, cap2_inv);
    if (stale) { /* MX holds the largest s - m */
      for (rv = 0; rv < nrv && stale; rv++)
        stale = _mm512_cmp_ps_mask(_mm512_load_ps(MX + rv * 16), _mm512_set1_ps(STALE_MAX), _CMP_LE_OQ) == 0xFFFF;
      if (stale) { /* 7. softmax: the probabilities and their sums are in; the max stays */
        for (rv = 0; rv < nrv; rv++)
          _mm512_store_ps(L + rv * 16, _mm512_add_ps(_mm512_load_ps(L + rv * 16), _mm512_load_ps(TS + rv * 16)));
      } else { /* a score grew too far past its row's max (or is not a number): the scores again */
        const next_tile none = { t->k, t->v, t->k_stride, t->v_stride, 0, c };
        (narrow ? qkT_tile4 : qkT_tile6)(nrv, kt, c, QT, r16, kj, ks, ST, MX,
                 bias_cols ? bias0 + j0 * t->bias_j : NULL, t->bias_j, rows, &none, NULL, TS, cap2, cap2_inv);
      }
    }
    for (rv = 0; rv < nrv && !stale; rv++) {
      float *st = ST + rv * 16;
      const __m512i lov = _mm512_load_si512(LO + rv * 16), hiv = _mm512_load_si512(HI + rv * 16);
      const __m512i bov = t->bias ? _mm512_load_si512(BO + rv * 16) : _mm512_setzero_si512();
      __m512 mx = ninf, m_old = _mm512_load_ps(M + rv * 16), m_new, m_sub, alpha, sum = _mm512_setzero_ps();
      /* 5. bias, 6. mask: masked scores become -inf; then the column max.
       * max_ps may drop a NaN score, but its p is NaN all the same, so the
       * row's sum and output turn NaN (see the end) */
      __m512 bmx = ninf;
      if (bias_rows) bmx = add_bias_rows(bias0, BO, rv, j0, kt, st, r16);
      if (all_visible && !t->mask && (!t->bias || bias_cols)) {
        mx = _mm512_load_ps(MX + rv * 16); /* taken by the q.k kernel (which added a bias_cols bias) */
      } else if (all_visible && !t->mask && bias_rows) {
        mx = bmx; /* taken as the bias went in */
      } else {
        for (j = 0; j < kt; j++) {
          __m512 sv = _mm512_load_ps(st + j * r16);
          __mmask16 ok = 0xFFFF;
          if (!all_visible) {
            const __m512i jv = _mm512_set1_epi32((int)(j0 + j));
            ok = _mm512_cmp_epi32_mask(lov, jv, _MM_CMPINT_LE) & _mm512_cmp_epi32_mask(jv, hiv, _MM_CMPINT_LE);
          }
          if (t->mask && !t->mask[(j0 + j) * t->mask_j]) ok = 0;
          if (ok && t->bias && !bias_rows && !bias_cols)
            sv = _mm512_fmadd_ps(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), ok, bov, bias0 + (j0 + j) * t->bias_j, 4),
                                 _mm512_set1_ps(ATTNC_LOG2E), sv);
          sv = _mm512_mask_blend_ps(ok, ninf, sv);
          _mm512_store_ps(st + j * r16, sv);
          mx = _mm512_max_ps(mx, sv);
        }
      }
      /* 7. softmax, online: the running max grows to m_new; rows that have
       * seen no key yet keep -inf (and subtract 0, so their p are 0) */
      m_new = _mm512_mask_mov_ps(_mm512_max_ps(m_old, mx), _mm512_cmp_ps_mask(m_old, m_old, _CMP_UNORD_Q), nan);
      m_sub = _mm512_mask_mov_ps(m_new, _mm512_cmp_ps_mask(m_new, ninf, _CMP_EQ_OQ), _mm512_setzero_ps());
      alpha = exp2_512_neg(_mm512_sub_ps(m_old, m_sub));
      for (j = 0; j < kt; j++) {
        __m512 p = exp2_512_neg(_mm512_sub_ps(_mm512_load_ps(st + j * r16), m_sub));
        _mm512_store_ps(st + j * r16, p);
        sum = _mm512_add_ps(sum, p);
      }
      _mm512_store_ps(L + rv * 16, _mm512_fmadd_ps(_mm512_load_ps(L + rv * 16), alpha, sum));
      _mm512_store_ps(M + rv * 16, m_new);
      _mm512_store_ps(A + rv * 16, alpha); /* rows whose max grew rescale what they have summed so far */
    }
    if (!stale) {
      __mmask16 ok = 0xFFFF;
      for (rv = 0; rv < nrv; rv++) {
        const __m512 m = _mm512_load_ps(M + rv * 16);
        ok &= _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q) & _mm512_cmp_ps_mask(m, ninf, _CMP_NEQ_OQ);
      }
      m_finite = ok == 0xFFFF;
    }
    /* 8. weighted sum: O = alpha O + P V, P[r][j] = ST[j][r] */
    /* (nv as it is: the bounds only tell the compiler which p.v kernels this copy needs) */
    pv_all(rows, kt, ST, 1, r16, O, cp, stale ? NULL : A, vj, vs, narrow ? (nv < 2 ? nv : 2) : (nv > 3 ? nv : 3), last);
  }
  if (pack) { /* keys no row of this tile sees (causal, window) are copied all the same, for the tiles after */
    const long a0 = jmin <= jmax ? jmin : t->k_end, a1 = jmin <= jmax ? jmax + 1 : t->k_end;
    pack_rows(t->k, t->k_stride, t->k_pack, t->k_begin, a0, c);
    pack_rows(t->v, t->v_stride, t->v_pack, t->k_begin, a0, c);
    pack_rows(t->k, t->k_stride, t->k_pack, a1, t->k_end, c);
    pack_rows(t->v, t->v_stride, t->v_pack, a1, t->k_end, c);
  }

  finish_rows(t, O, cp, M, L, ATTNC_LN2);
}

/* Copies for narrow heads (c <= 32: the 8-row p.v kernels) and for the
 * rest (6 rows), each also for c a multiple of 16 (whole: no masked loads
 * of v): each function then holds only its own p.v kernels, and the
 * compiler allocates registers for them alone.  With both widths in one
 * function, one copy's register pressure can push the other's row
 * offsets of P to the stack (see pv_all). */
static void attend_rows_narrow(const attnc_tile *t) { attend_rows_body(t, 1, 0, 0); }
static void attend_rows_narrow_whole(const attnc_tile *t) { attend_rows_body(t, 1, 1, 0); }
static void attend_rows_wide(const attnc_tile *t) { attend_rows_body(t, 0, 0, 0); }
static void attend_rows_wide_whole(const attnc_tile *t) { attend_rows_body(t, 0, 1, 0); }
static void attend_rows_narrow_pack(const attnc_tile *t) { attend_rows_body(t, 1, 0, 1); }
static void attend_rows_narrow_whole_pack(const attnc_tile *t) { attend_rows_body(t, 1, 1, 1); }
static void attend_rows_wide_pack(const attnc_tile *t) { attend_rows_body(t, 0, 0, 1); }
static void attend_rows_wide_whole_pack(const attnc_tile *t) { attend_rows_body(t, 0, 1, 1); }

/* Tiles of up to 8 rows (decoding): one row at a time, scores along the keys. */
static void attend_cols(const attnc_tile *t)
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
    long kt = jmax - j0 + 1 < KT ? jmax - j0 + 1 : KT, jj, r0;
    /* the key tile, transposed so scores vectorise along keys */
    const float *ktile = Kt;
    const long ldk = KT;
    if (rows <= 8) { /* the next tile's keys and values asked for as the scores go */
      const next_tile nx = attnc_next_tile(t, j0, jmax, 1);
      qk_direct(rows, c, Q, cp, t->k + j0 * t->k_stride, t->k_stride, kt, S, last, &nx);
      goto scores_done;
    }
    for (jj = 0; jj < kt; jj++) {
      const float *kr = t->k + (j0 + jj) * t->k_stride;
      for (d = 0; d < c; d++) Kt[d * KT + jj] = kr[d];
    }
    for (; jj < KT; jj++)
      for (d = 0; d < c; d++) Kt[d * KT + jj] = 0;
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
    pv_all(rows, kt, S, KT, 1, O, cp, NULL, t->v + j0 * t->v_stride, t->v_stride, nv, last);
  }

  finish_rows(t, O, cp, M, L, 1.0f);
}

/* The rows path's copies by [pack][narrow (c <= 32)][whole (c % 16 == 0)]:
 * attend and attend_pack choose alike */
static void (*const attend_rows_copy[2][2][2])(const attnc_tile *) = {
  { { attend_rows_wide, attend_rows_wide_whole }, { attend_rows_narrow, attend_rows_narrow_whole } },
  { { attend_rows_wide_pack, attend_rows_wide_whole_pack }, { attend_rows_narrow_pack, attend_rows_narrow_whole_pack } },
};

static int attend_by_rows(const attnc_tile *t) { return t->rows > 8 && attnc_prims_fits_lanes(t); }

void attnc_prims_attend_avx512(const attnc_tile *t)
{
  if (attend_by_rows(t)) attend_rows_copy[0][t->c <= 32][t->c % 16 == 0](t);
  else attend_cols(t);
}

/* attend, leaving the contiguous copy of k and v (attnc_prims.attend_pack):
 * the rows path copies each key tile as it comes to it, from lines the
 * tile before prefetched, so the copy waits on no memory of its own */
void attnc_prims_attend_pack_avx512(const attnc_tile *t)
{
  if (attend_by_rows(t)) {
    attend_rows_copy[1][t->c <= 32][t->c % 16 == 0](t);
  } else { /* a short tile: the copy first, then the tile as it is */
    pack_rows(t->k, t->k_stride, t->k_pack, t->k_begin, t->k_end, t->c);
    pack_rows(t->v, t->v_stride, t->v_pack, t->k_begin, t->k_end, t->c);
    attend_cols(t);
  }
}

/* ---- a bf16 or f16 kernel's conversions ---- */

void attnc_prims_widen16_avx512(int f16, const void *src, float *dst, long n)
{
  const unsigned short *s = src;
  long e;
  for (e = 0; e < n; e += 16) {
    const __mmask16 m = tail_mask(n - e);
    const __m256i h = _mm256_maskz_loadu_epi16(m, s + e);
    const __m512 f = f16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    _mm512_mask_storeu_ps(dst + e, m, f);
  }
}

/* bf16: the top half rounded by adding 0x7fff plus the kept half's low
 * bit; a NaN keeps its top half, made quiet.  f16: vcvtps2ph, to nearest
 * with ties to even, which overflows to infinity and keeps NaN quiet with
 * the top of its payload, as prims.c's narrow1 does. */
void attnc_prims_narrow16_avx512(int f16, const float *src, void *dst, long n)
{
  unsigned short *d = dst;
  long e;
  for (e = 0; e < n; e += 16) {
    const __mmask16 m = tail_mask(n - e);
    const __m512 f = _mm512_maskz_loadu_ps(m, src + e);
    __m256i h;
    if (f16) {
      h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m512i u = _mm512_castps_si512(f);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
      r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q),
                                _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
      h = _mm512_cvtepi32_epi16(r);
    }
    _mm256_mask_storeu_epi16(d + e, m, h);
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

/* ---- attention over a KV cache stored as bf16, f16 or int8 (decoding) ----
 *
 * attend_cols' direct path (few rows, scores along the keys) with the
 * keys and values read as they are stored and widened in registers, so
 * that a decoding step over a long cache reads half (bf16, f16) or a
 * quarter (int8) of the bytes of an f32 cache, and the next key tile is asked
 * for while this one is scored, as qk_direct does.
 *
 * bf16: 32 values are loaded as 16 dwords, each holding an even value in
 * its low half and the odd one after it in its high half: a shift by 16
 * widens the even values and a mask the odd ones, one op per 16 values.
 * The queries and the output rows are kept in that order (per 32 values,
 * the 16 even ones, then the 16 odd ones) and put back in order at the
 * end.  f16: 16 values a vcvtph2ps, in order.  int8: 16 values
 * sign-extended to dwords and converted; a row's
 * scale multiplies its scores (k) and its probabilities (v), not each
 * value. */

/* Vector u (of nv) of a cache row as f32, and for bf16 vector u + 1 too
 * (u even), both from one load: in *a and *b (other types: *b is *a).
 * The last vector's lanes past c read nothing and are 0 (m32: the last
 * 32 bf16 values' mask, m16: the last 16 f16 or int8 values'; WHOLE: c
 * fills every vector, no masks). */
#define KV_STEP(KVT) ((KVT) == ATTNC_KV_BF16 ? 2 : 1)
INLINE void kv_vecs(const int KVT, const int WHOLE, const char *row, long u, long nv, __mmask32 m32, __mmask16 m16,
                    __m512 *a, __m512 *b)
{
  if (KVT == ATTNC_KV_BF16) {
    const short *p = (const short *)row + (u >> 1) * 32;
    const __m512i x = !WHOLE && u >= nv - 2 ? _mm512_maskz_loadu_epi16(m32, p) : _mm512_loadu_si512(p);
    *a = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *b = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(-65536)));
  } else if (KVT == ATTNC_KV_F16) {
    const short *p = (const short *)row + u * 16;
    *a = *b = _mm512_cvtph_ps(!WHOLE && u == nv - 1 ? _mm256_maskz_loadu_epi16(m16, p)
                                                     : _mm256_loadu_si256((const __m256i *)p));
  } else {
    const signed char *p = (const signed char *)row + u * 16;
    const __m128i x = !WHOLE && u == nv - 1 ? _mm_maskz_loadu_epi8(m16, p) : _mm_loadu_si128((const __m128i *)p);
    *a = *b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
  }
}

/* qkd_kernel on stored keys, kb bytes apart. */
INLINE void qkd_kv_kernel(const int KVT, const int WHOLE, const int NK, const int MR, long nv, const float *Q, long cp, const char *k,
                          long kb, float *S, __mmask32 m32, __mmask16 m16)
{
  __m512 acc[4][4], sums;
  long v;
  int i, r;
  for (r = 0; r < 4; r++)
    for (i = 0; i < 4; i++) acc[r][i] = _mm512_setzero_ps();
  for (v = 0; v < nv; v += KV_STEP(KVT)) {
    __m512 kv[4], kw[4];
    for (i = 0; i < NK; i++) kv_vecs(KVT, WHOLE, k + i * kb, v, nv, m32, m16, &kv[i], &kw[i]);
    for (r = 0; r < MR; r++) {
      const __m512 q = _mm512_load_ps(Q + r * cp + v * 16);
      for (i = 0; i < NK; i++) acc[r][i] = _mm512_fmadd_ps(q, kv[i], acc[r][i]);
    }
    if (KV_STEP(KVT) == 2)
      for (r = 0; r < MR; r++) {
        const __m512 q = _mm512_load_ps(Q + r * cp + (v + 1) * 16);
        for (i = 0; i < NK; i++) acc[r][i] = _mm512_fmadd_ps(q, kw[i], acc[r][i]);
      }
  }
  sums = hsum4x4(acc);
  for (r = 0; r < MR; r++) _mm_mask_storeu_ps(S + r * KT, (__mmask8)((1u << NK) - 1u), _mm512_extractf32x4_ps(sums, r));
}

/* The rows [j0, j1) of the next key tile (n rows), each row's lines of k
 * and of v, into L2 (see prefetch_next). */
INLINE void prefetch_kv(const char *k, long kb, const char *v, long vb, long row_bytes, long n, long j0, long j1)
{
  long j, b;
  if (j1 > n) j1 = n;
  for (j = j0; j < j1; j++)
    for (b = 0; b < row_bytes; b += 64) {
      _mm_prefetch(k + j * kb + b, _MM_HINT_T1);
      _mm_prefetch(v + j * vb + b, _MM_HINT_T1);
    }
}

/* S[rows][KT] = Q . k^T over kt keys (zero past kt), four keys at a time,
 * asking for the next tile's rows (kn, vn: n of them) as it goes. */
INLINE void qk_direct_kv(const int KVT, const int WHOLE, long rows, long nv, const float *Q, long cp, const char *k, long kb, long kt,
                         float *S, __mmask32 m32, __mmask16 m16, const char *kn, const char *vn, long vb,
                         long row_bytes, long n)
{
  long jj, r, r0;
  for (jj = 0; jj < kt; jj += 4) {
    const char *kr = k + jj * kb;
    prefetch_kv(kn, kb, vn, vb, row_bytes, n, jj, jj + 4);
    for (r0 = 0; r0 < rows; r0 += 4) {
      const float *qr = Q + r0 * cp;
      float *sr = S + r0 * KT + jj;
#define QKDKV_ROWS(NK)                                                                  \
  switch (rows - r0 < 4 ? rows - r0 : 4) {                                              \
  case 4: qkd_kv_kernel(KVT, WHOLE, NK, 4, nv, qr, cp, kr, kb, sr, m32, m16); break;           \
  case 3: qkd_kv_kernel(KVT, WHOLE, NK, 3, nv, qr, cp, kr, kb, sr, m32, m16); break;           \
  case 2: qkd_kv_kernel(KVT, WHOLE, NK, 2, nv, qr, cp, kr, kb, sr, m32, m16); break;           \
  default: qkd_kv_kernel(KVT, WHOLE, NK, 1, nv, qr, cp, kr, kb, sr, m32, m16); break;          \
  }
      switch (kt - jj < 4 ? kt - jj : 4) {
      case 4: QKDKV_ROWS(4) break;
      case 3: QKDKV_ROWS(3) break;
      case 2: QKDKV_ROWS(2) break;
      default: QKDKV_ROWS(1) break;
      }
#undef QKDKV_ROWS
    }
  }
  for (r = 0; r < rows; r++)
    for (jj = kt; jj < KT; jj++) S[r * KT + jj] = 0;
}

/* pv_kernel (alpha 1, P rows KT apart) on stored values, vb bytes apart. */
INLINE void pv_kv_kernel(const int KVT, const int WHOLE, const int MR, const int NVV, long kt, const float *P, float *O, long cp,
                         const char *v, long vb, long cv0, long nv, __mmask32 m32, __mmask16 m16)
{
  __m512 acc[6][4];
  long j;
  int i, u;
  for (i = 0; i < MR; i++)
    for (u = 0; u < NVV; u++) acc[i][u] = _mm512_load_ps(O + i * cp + (cv0 + u) * 16);
  for (j = 0; j < kt; j++) {
    const char *vr = v + j * vb;
    __m512 b[4];
    for (u = 0; u < NVV; u += KV_STEP(KVT)) kv_vecs(KVT, WHOLE, vr, cv0 + u, nv, m32, m16, &b[u], &b[u + KV_STEP(KVT) - 1]);
    for (i = 0; i < MR; i++) {
      const __m512 p = _mm512_set1_ps(P[i * KT + j]);
      for (u = 0; u < NVV; u++) acc[i][u] = _mm512_fmadd_ps(p, b[u], acc[i][u]);
    }
  }
  for (i = 0; i < MR; i++)
    for (u = 0; u < NVV; u++) _mm512_store_ps(O + i * cp + (cv0 + u) * 16, acc[i][u]);
}

/* O[rows][:cp] += P[rows][:kt] . v[:kt]: blocks of 6 rows x 4 vectors. */
INLINE void pv_all_kv(const int KVT, const int WHOLE, long rows, long kt, const float *P, float *O, long cp, const char *v, long vb,
                      long nv, __mmask32 m32, __mmask16 m16)
{
  long r0, cv0;
  for (r0 = 0; r0 < rows; r0 += 6)
    for (cv0 = 0; cv0 < nv; cv0 += 4) {
      const float *Pr = P + r0 * KT;
      float *Or = O + r0 * cp;
#define PVKV_ROWS(NVV)                                                                       \
  switch (rows - r0 < 6 ? rows - r0 : 6) {                                                   \
  case 6: pv_kv_kernel(KVT, WHOLE, 6, NVV, kt, Pr, Or, cp, v, vb, cv0, nv, m32, m16); break;       \
  case 5: pv_kv_kernel(KVT, WHOLE, 5, NVV, kt, Pr, Or, cp, v, vb, cv0, nv, m32, m16); break;       \
  case 4: pv_kv_kernel(KVT, WHOLE, 4, NVV, kt, Pr, Or, cp, v, vb, cv0, nv, m32, m16); break;       \
  case 3: pv_kv_kernel(KVT, WHOLE, 3, NVV, kt, Pr, Or, cp, v, vb, cv0, nv, m32, m16); break;       \
  case 2: pv_kv_kernel(KVT, WHOLE, 2, NVV, kt, Pr, Or, cp, v, vb, cv0, nv, m32, m16); break;       \
  default: pv_kv_kernel(KVT, WHOLE, 1, NVV, kt, Pr, Or, cp, v, vb, cv0, nv, m32, m16); break;      \
  }
      switch (nv - cv0 < 4 ? nv - cv0 : 4) {
      case 4: PVKV_ROWS(4) break;
      case 3: PVKV_ROWS(3) break;
      case 2: PVKV_ROWS(2) break;
      default: PVKV_ROWS(1) break;
      }
#undef PVKV_ROWS
    }
}

/* Rows [0, rows) of S (KT apart), kt keys from j0, times the rows' scales. */
static void scale_keys(float *S, long rows, long kt, const float *scale)
{
  long r, u;
  for (u = 0; u < kt; u += 16) {
    const __m512 s = _mm512_maskz_loadu_ps(tail_mask(kt - u), scale + u);
    for (r = 0; r < rows; r++) _mm512_store_ps(S + r * KT + u, _mm512_mul_ps(s, _mm512_load_ps(S + r * KT + u)));
  }
}

/* Work: O (r16 x cp), M, L (r16 each), S (r16 x KT), Q (r16 x cp), cp at
 * most round16(c) + 16: within attend_work(rows, c) for rows <= 16. */
INLINE void attend_kv_body(const int KVT, const int WHOLE, const attnc_tile *t, const char *k, const float *ks, const char *v,
                           const float *vs)
{
  const long esize = KVT == ATTNC_KV_INT8 ? 1 : 2, rows = t->rows, c = t->c, r16 = round16(rows);
  const long nv = KVT == ATTNC_KV_BF16 ? 2 * ((c + 31) / 32) : (c + 15) / 16, cp = nv * 16;
  const long kb = t->k_stride * esize, vb = t->v_stride * esize, row_bytes = c * esize;
  const long tail32 = c - ((c + 31) / 32 - 1) * 32; /* bf16 values in the last 32-value chunk, 1..32 */
  const __mmask32 m32 = tail32 >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << tail32) - 1u);
  /* the last 16-lane vector's live lanes (bf16 rounds to pairs of vectors: possibly none) */
  const __mmask16 m16 = tail_mask(c - (nv - 1) * 16 > 0 ? c - (nv - 1) * 16 : 0);
  float *O = t->work, *M = O + r16 * cp, *L = M + r16, *S = L + r16, *Q = S + r16 * KT;
  long r, d, jmin = t->k_end, jmax = t->k_begin - 1, j0;

  for (r = 0; r < rows; r++) {
    const float *q = t->q + (r / t->q_group) * t->q_stride + (r % t->q_group) * t->q_hstride;
    long lo, hi;
    memset(Q + r * cp, 0, sizeof(float) * cp);
    memset(O + r * cp, 0, sizeof(float) * cp);
    if (KVT == ATTNC_KV_BF16)
      for (d = 0; d < c; d += 32) { /* each 32 values' even ones, then their odd ones */
        const long n = c - d < 32 ? c - d : 32;
        long e;
        for (e = 0; 2 * e < n; e++) Q[r * cp + d + e] = q[d + 2 * e] * t->scale;
        for (e = 0; 2 * e + 1 < n; e++) Q[r * cp + d + 16 + e] = q[d + 2 * e + 1] * t->scale;
      }
    else
      for (d = 0; d < c; d++) Q[r * cp + d] = q[d] * t->scale;
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
    qk_direct_kv(KVT, WHOLE, rows, nv, Q, cp, k + j0 * kb, kb, kt, S, m32, m16, k + (j0 + KT) * kb, v + (j0 + KT) * vb, vb,
                 row_bytes, n);
    if (KVT == ATTNC_KV_INT8) scale_keys(S, rows, kt, ks + j0);
    for (r = 0; r < rows; r++) softmax_row(t, r, j0, kt, S + r * KT, M, L, O, cp);
    if (KVT == ATTNC_KV_INT8) scale_keys(S, rows, kt, vs + j0);
    pv_all_kv(KVT, WHOLE, rows, kt, S, O, cp, v + j0 * vb, vb, nv, m32, m16);
  }

  if (KVT == ATTNC_KV_BF16) { /* the rows back in order, round16(c) apart, for finish_rows */
    const long cp16 = round16(c);
    for (r = 0; r < rows; r++) { /* row r's new place ends before row r + 1's old one begins */
      memcpy(Q, O + r * cp, sizeof(float) * cp);
      for (d = 0; d < c; d += 32) {
        const long n = c - d < 32 ? c - d : 32;
        const float *even = Q + d, *odd = Q + d + 16;
        float *o = O + r * cp16 + d;
        long e;
        if (n == 32)
          for (e = 0; e < 16; e++) {
            o[2 * e] = even[e];
            o[2 * e + 1] = odd[e];
          }
        else
          for (e = 0; e < n; e++) o[e] = (e & 1) ? odd[e >> 1] : even[e >> 1];
      }
      for (d = c; d < cp16; d++) O[r * cp16 + d] = 0;
    }
    finish_rows(t, O, cp16, M, L, 1.0f);
  } else {
    finish_rows(t, O, cp, M, L, 1.0f);
  }
}

/* One copy per type, and per whether c fills whole vectors (the usual
 * head dims, 64 or 128: no masked loads, no tests in the inner loops). */
static void attend_kv_bf16(const attnc_tile *t, const void *k, const void *v)
{
  attend_kv_body(ATTNC_KV_BF16, 0, t, (const char *)k, NULL, (const char *)v, NULL);
}
static void attend_kv_bf16_whole(const attnc_tile *t, const void *k, const void *v)
{
  attend_kv_body(ATTNC_KV_BF16, 1, t, (const char *)k, NULL, (const char *)v, NULL);
}
static void attend_kv_f16(const attnc_tile *t, const void *k, const void *v)
{
  attend_kv_body(ATTNC_KV_F16, 0, t, (const char *)k, NULL, (const char *)v, NULL);
}
static void attend_kv_f16_whole(const attnc_tile *t, const void *k, const void *v)
{
  attend_kv_body(ATTNC_KV_F16, 1, t, (const char *)k, NULL, (const char *)v, NULL);
}
static void attend_kv_int8(const attnc_tile *t, const void *k, const float *ks, const void *v, const float *vs)
{
  attend_kv_body(ATTNC_KV_INT8, 0, t, (const char *)k, ks, (const char *)v, vs);
}
static void attend_kv_int8_whole(const attnc_tile *t, const void *k, const float *ks, const void *v, const float *vs)
{
  attend_kv_body(ATTNC_KV_INT8, 1, t, (const char *)k, ks, (const char *)v, vs);
}

void attnc_prims_attend_kv_avx512(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                  const void *v, const float *v_scale)
{
  if (kv_type == ATTNC_KV_BF16 || kv_type == ATTNC_KV_BF16_ROUND) { /* q and p kept f32 either way */
    if (t->c % 32 == 0) attend_kv_bf16_whole(t, k, v);
    else attend_kv_bf16(t, k, v);
  } else if (kv_type == ATTNC_KV_F16) {
    if (t->c % 16 == 0) attend_kv_f16_whole(t, k, v);
    else attend_kv_f16(t, k, v);
  } else {
    if (t->c % 16 == 0) attend_kv_int8_whole(t, k, k_scale, v, v_scale);
    else attend_kv_int8(t, k, k_scale, v, v_scale);
  }
}

#ifndef ATTNC_AVX512_EMU
/* ---- attend_kv for a dtype=bf16 kernel on vdpbf16ps (AVX512-BF16) ----
 *
 * kv_type ATTNC_KV_BF16_ROUND lets q and p be rounded to bf16 too (abi.h),
 * so both products can take vdpbf16ps, which multiplies 32 bf16 pairs and
 * adds them in pairs onto 16 f32 sums: on Zen 4 it issues at the FMA's
 * rate, so a decoding step's arithmetic (the bf16 path's limit: see
 * docs/performance.md, "Decode D in 16 bits") halves, and the widening ops
 * go.  prims.c takes this only where vdpbf16ps is not slower than an FMA.
 *
 * q.k: q in the order it is stored, as k is, so each 64-byte load of a
 * key row meets the matching 32 values of q; the scale goes on the f32
 * sums.  q is not rounded to bf16: a projection's or a rotation's q is f32,
 * and its rounding, times |q| |k|, moves a sharp softmax's scores past
 * DESIGN.md's bf16 row.  It goes in as two bf16 parts (split_bf16), each
 * against the same load of k; a q that is all bf16 values (a core-mode
 * bf16 q) takes one.
 * p.v: keys j and j + 1 are taken together, their value rows interleaved
 * (vpunpcklwd / vpunpckhwd) so that each 32-bit lane holds one dim's two
 * values, against the pair (p[j], p[j + 1]) broadcast.  The unpacks work
 * within 128-bit lanes, so per 32 dims the output rows hold dims 8L..8L+3
 * of 128-bit lane L in the first vector and 8L+4..8L+7 in the second;
 * they are put back in order at the end.  The softmax is f32
 * (softmax_row), its sum over the unrounded p. */
/* the key tile whose rows qk_dp asks for, in tiles ahead (2 and 3 read
 * no better on one thread from L3) */
#define DP_AHEAD 1
#define BF16DP __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/* S[r * KT + i] = scale * (q row r . key i) for NK (<= 4) keys x MR (<= 4)
 * rows, nc chunks of 32 dims, keys kb bytes apart (as qkd_kv_kernel); q is
 * Qb, plus Ql when LO (q's two bf16 parts: see attend_kv_bf16dp).  In
 * 256-bit halves: Zen 4 runs a 512-bit op as two 256-bit ones, so the
 * products cost the same, while each sum is then reduced across 8 lanes,
 * not 16: the reduction below is 42 256-bit ops for the 16 sums, where
 * hsum4x4 is 45 512-bit ones (half the time of this loop at c = 128). */
BF16DP INLINE void qk_dp_kernel(const int NK, const int MR, const int LO, long nc, const unsigned short *Qb,
                                const unsigned short *Ql, long c, const char *k, long kb, float *S, __m256 scale)
{
  __m256 acc[4][4], v[4], w01, w23;
  long u;
  int i, r;
  for (r = 0; r < 4; r++)
    for (i = 0; i < 4; i++) acc[r][i] = _mm256_setzero_ps();
  for (u = 0; u < 2 * nc; u++) {
    __m256i kv[4];
    for (i = 0; i < NK; i++) kv[i] = _mm256_loadu_si256((const __m256i *)(k + i * kb + u * 32));
    for (r = 0; r < MR; r++) {
      const __m256i q = _mm256_load_si256((const __m256i *)(Qb + r * c + u * 16));
      for (i = 0; i < NK; i++) acc[r][i] = _mm256_dpbf16_ps(acc[r][i], (__m256bh)q, (__m256bh)kv[i]);
      if (LO) {
        const __m256i ql = _mm256_load_si256((const __m256i *)(Ql + r * c + u * 16));
        for (i = 0; i < NK; i++) acc[r][i] = _mm256_dpbf16_ps(acc[r][i], (__m256bh)ql, (__m256bh)kv[i]);
      }
    }
  }
  for (r = 0; r < 4; r++) {
    /* per 128-bit chunk: keys 0 and 1 (2 and 3) interleaved, halves summed; then keys 0..3 summed over the chunk */
    const __m256 u01 = _mm256_add_ps(_mm256_unpacklo_ps(acc[r][0], acc[r][1]), _mm256_unpackhi_ps(acc[r][0], acc[r][1]));
    const __m256 u23 = _mm256_add_ps(_mm256_unpacklo_ps(acc[r][2], acc[r][3]), _mm256_unpackhi_ps(acc[r][2], acc[r][3]));
    v[r] = _mm256_add_ps(_mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  /* the two chunks of each row summed: rows 0 and 1 in w01's halves, 2 and 3 in w23's */
  w01 = _mm256_mul_ps(scale, _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20), _mm256_permute2f128_ps(v[0], v[1], 0x31)));
  w23 = _mm256_mul_ps(scale, _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20), _mm256_permute2f128_ps(v[2], v[3], 0x31)));
  for (r = 0; r < MR; r++) {
    const __m256 w = r < 2 ? w01 : w23;
    _mm_mask_storeu_ps(S + r * KT, (__mmask8)((1u << NK) - 1u), r & 1 ? _mm256_extractf128_ps(w, 1) : _mm256_castps256_ps128(w));
  }
}

/* qk_direct_kv on vdpbf16ps (c a multiple of 32); Ql: q's second bf16
 * part, or NULL when q is a bf16 value. */
BF16DP static void qk_dp(long rows, long c, const unsigned short *Qb, const unsigned short *Ql, const char *k, long kb,
                         long kt, float *S, float scale, const char *kn, const char *vn, long vb, long n)
{
  const __m256 sc = _mm256_set1_ps(scale);
  const long nc = c / 32;
  long jj, r, r0;
  for (jj = 0; jj < kt; jj += 4) {
    const char *kr = k + jj * kb;
    prefetch_kv(kn, kb, vn, vb, c * 2, n, jj, jj + 4);
    for (r0 = 0; r0 < rows; r0 += 4) {
      const unsigned short *qr = Qb + r0 * c, *ql = Ql ? Ql + r0 * c : NULL;
      float *sr = S + r0 * KT + jj;
#define QKDP_RL(NK, MR)                                                          \
  if (ql) qk_dp_kernel(NK, MR, 1, nc, qr, ql, c, kr, kb, sr, sc);                \
  else qk_dp_kernel(NK, MR, 0, nc, qr, NULL, c, kr, kb, sr, sc);
#define QKDP_ROWS(NK)                                                      \
  switch (rows - r0 < 4 ? rows - r0 : 4) {                                 \
  case 4: QKDP_RL(NK, 4) break;                                            \
  case 3: QKDP_RL(NK, 3) break;                                            \
  case 2: QKDP_RL(NK, 2) break;                                            \
  default: QKDP_RL(NK, 1) break;                                           \
  }
      switch (kt - jj < 4 ? kt - jj : 4) {
      case 4: QKDP_ROWS(4) break;
      case 3: QKDP_ROWS(3) break;
      case 2: QKDP_ROWS(2) break;
      default: QKDP_ROWS(1) break;
      }
#undef QKDP_ROWS
#undef QKDP_RL
    }
  }
  for (r = 0; r < rows; r++)
    for (jj = kt; jj < KT; jj++) S[r * KT + jj] = 0;
}

/* O rows (c floats apart, in the unpacks' order) += P (bf16, KT apart)
 * . v over kt keys, for MR (<= 6) rows and the NC (<= 2) chunks of 32
 * dims from cu0: 2 * NC vectors a row in registers.  A last odd key is
 * paired with zeros (the row after it may not exist). */
BF16DP INLINE void pv_dp_kernel(const int MR, const int NC, long kt, const unsigned short *Pb, float *O, long c,
                                const char *v, long vb, long cu0)
{
  __m512 acc[6][4];
  long j;
  int i, w, u;
  for (i = 0; i < MR; i++)
    for (w = 0; w < 2 * NC; w++) acc[i][w] = _mm512_load_ps(O + i * c + cu0 * 32 + w * 16);
  for (j = 0; j < kt; j += 2) {
    const char *v0 = v + j * vb + cu0 * 64;
    __m512i b[4];
    for (u = 0; u < NC; u++) {
      const __m512i x = _mm512_loadu_si512(v0 + u * 64);
      const __m512i y = j + 1 < kt ? _mm512_loadu_si512(v0 + vb + u * 64) : _mm512_setzero_si512();
      b[2 * u] = _mm512_unpacklo_epi16(x, y);
      b[2 * u + 1] = _mm512_unpackhi_epi16(x, y);
    }
    for (i = 0; i < MR; i++) {
      int pp;
      __m512i p;
      memcpy(&pp, Pb + i * KT + j, sizeof pp); /* p[i][j] and p[i][j + 1] (0 past kt) */
      p = _mm512_set1_epi32(pp);
      for (w = 0; w < 2 * NC; w++) acc[i][w] = _mm512_dpbf16_ps(acc[i][w], (__m512bh)b[w], (__m512bh)p);
    }
  }
  for (i = 0; i < MR; i++)
    for (w = 0; w < 2 * NC; w++) _mm512_store_ps(O + i * c + cu0 * 32 + w * 16, acc[i][w]);
}

BF16DP static void pv_dp(long rows, long kt, const unsigned short *Pb, float *O, long c, const char *v, long vb)
{
  const long nc = c / 32;
  long r0, cu0;
  for (r0 = 0; r0 < rows; r0 += 6)
    for (cu0 = 0; cu0 < nc; cu0 += 2) {
      const unsigned short *Pr = Pb + r0 * KT;
      float *Or = O + r0 * c;
#define PVDP_ROWS(NC)                                                      \
  switch (rows - r0 < 6 ? rows - r0 : 6) {                                 \
  case 6: pv_dp_kernel(6, NC, kt, Pr, Or, c, v, vb, cu0); break;           \
  case 5: pv_dp_kernel(5, NC, kt, Pr, Or, c, v, vb, cu0); break;           \
  case 4: pv_dp_kernel(4, NC, kt, Pr, Or, c, v, vb, cu0); break;           \
  case 3: pv_dp_kernel(3, NC, kt, Pr, Or, c, v, vb, cu0); break;           \
  case 2: pv_dp_kernel(2, NC, kt, Pr, Or, c, v, vb, cu0); break;           \
  default: pv_dp_kernel(1, NC, kt, Pr, Or, c, v, vb, cu0); break;          \
  }
      if (nc - cu0 >= 2) {
        PVDP_ROWS(2)
      } else {
        PVDP_ROWS(1)
      }
#undef PVDP_ROWS
    }
}

/* q as hi + lo, both bf16: hi = bf16(q), lo = bf16(q - hi) (q - hi is
 * exact in f32), so that hi + lo is q within 2^-16 of |q|.  Returns
 * whether any lo is not 0. */
BF16DP static int split_bf16(__m512 q, unsigned short *hi, unsigned short *lo)
{
  const __m256i h = (__m256i)_mm512_cvtneps_pbh(q);
  const __m512 r = _mm512_sub_ps(q, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  _mm256_store_si256((__m256i *)hi, h);
  _mm256_store_si256((__m256i *)lo, (__m256i)_mm512_cvtneps_pbh(r));
  return _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_NEQ_UQ) != 0;
}

/* Work: O (r16 x c), M, L (r16 each), S (r16 x KT), Qb and Ql (r16 x c
 * bf16 each), Pb (r16 x KT bf16): within attend_work(rows, c) for rows
 * <= 16.  Returns 0, having written nothing but work, for a tile of
 * fewer than 3 rows whose q takes two parts: widening k to f32 beats
 * the q.k twice there (docs/performance.md, "A bf16 decoding step's q in
 * two parts"). */
BF16DP static int attend_kv_bf16dp(const attnc_tile *t, const char *k, const char *v)
{
  const long rows = t->rows, c = t->c, r16 = round16(rows), kb = t->k_stride * 2, vb = t->v_stride * 2;
  float *O = t->work, *M = O + r16 * c, *L = M + r16, *S = L + r16;
  unsigned short *Qb = (unsigned short *)(S + r16 * KT), *Ql = Qb + r16 * c, *Pb = Ql + r16 * c;
  long r, d, jmin = t->k_end, jmax = t->k_begin - 1, j0;
  int q_lo = 0; /* some q is not a bf16 value: the q.k takes both parts */
  /* 32 dims' place in the unpacks' order: lane n of the result takes lane
   * idx[n] of (first vector, second vector) */
  const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);

  for (r = 0; r < rows; r++) {
    const float *q = t->q + (r / t->q_group) * t->q_stride + (r % t->q_group) * t->q_hstride;
    long lo, hi;
    for (d = 0; d < c; d += 32) {
      q_lo |= split_bf16(_mm512_loadu_ps(q + d), Qb + r * c + d, Ql + r * c + d);
      q_lo |= split_bf16(_mm512_loadu_ps(q + d + 16), Qb + r * c + d + 16, Ql + r * c + d + 16);
      _mm512_store_ps(O + r * c + d, _mm512_setzero_ps());
      _mm512_store_ps(O + r * c + d + 16, _mm512_setzero_ps());
    }
    M[r] = -INFINITY;
    L[r] = 0;
    attnc_prims_row_range(t, r, &lo, &hi);
    if (lo <= hi) {
      if (lo < jmin) jmin = lo;
      if (hi > jmax) jmax = hi;
    }
  }
  if (q_lo && rows < 3) return 0;

  for (j0 = jmin; j0 <= jmax; j0 += KT) {
    const long kt = jmax - j0 + 1 < KT ? jmax - j0 + 1 : KT, left = jmax + 1 - (j0 + DP_AHEAD * KT);
    const long n = left <= 0 ? 0 : left < KT ? left : KT;
    qk_dp(rows, c, Qb, q_lo ? Ql : NULL, k + j0 * kb, kb, kt, S, t->scale, k + (j0 + DP_AHEAD * KT) * kb, v + (j0 + DP_AHEAD * KT) * vb, vb, n);
    for (r = 0; r < rows; r++) {
      softmax_row(t, r, j0, kt, S + r * KT, M, L, O, c);
      for (d = 0; d < KT; d += 32)
        _mm512_store_si512(Pb + r * KT + d,
                           (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(S + r * KT + d + 16), _mm512_load_ps(S + r * KT + d)));
    }
    pv_dp(rows, kt, Pb, O, c, v + j0 * vb, vb);
  }

  for (r = 0; r < rows; r++) /* each 32 dims back in order, in place */
    for (d = 0; d < c; d += 32) {
      const __m512 a = _mm512_load_ps(O + r * c + d), b = _mm512_load_ps(O + r * c + d + 16);
      _mm512_store_ps(O + r * c + d, _mm512_permutex2var_ps(a, lo_idx, b));
      _mm512_store_ps(O + r * c + d + 16, _mm512_permutex2var_ps(a, hi_idx, b));
    }
  finish_rows(t, O, c, M, L, 1.0f);
  return 1;
}

/* attend_kv where the CPU has AVX512-BF16 and prims.c judged vdpbf16ps
 * worth it: a bf16 kernel's tiles (ATTNC_KV_BF16_ROUND) with c a multiple
 * of 32 take the dot products (unless they decline: see there), the rest
 * attend_kv_avx512. */
BF16DP void attnc_prims_attend_kv_bf16dp(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                         const void *v, const float *v_scale)
{
  if (!(kv_type == ATTNC_KV_BF16_ROUND && t->c % 32 == 0 && attend_kv_bf16dp(t, (const char *)k, (const char *)v)))
    attnc_prims_attend_kv_avx512(t, kv_type, k, k_scale, v, v_scale);
}
#else
/* make check-avx512-emu: the C model has no vdpbf16ps, and prims.c never
 * picks this there; the tests that call it directly get the f32 path */
void attnc_prims_attend_kv_bf16dp(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                  const void *v, const float *v_scale)
{
  attnc_prims_attend_kv_avx512(t, kv_type, k, k_scale, v, v_scale);
}
#endif

/* matmul: c's rows MM_MR at a time by up to 4 vectors (64 columns), in
 * registers over all of k: a[i][p] broadcast, b's row p loaded once for
 * the MM_MR rows.  The last vector is masked to the columns there are. */
#define MM_MR 6
INLINE void mm_block(const int MR, const int NV, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb,
                     float *c, long ldc, int acc, __mmask16 tm)
{
  __m512 s[MM_MR][4], bv[4];
  long p;
  int i, v;
  for (i = 0; i < MR; i++)
    for (v = 0; v < NV; v++)
      s[i][v] = acc ? _mm512_maskz_loadu_ps(v == NV - 1 ? tm : (__mmask16)0xFFFF, c + i * ldc + 16 * v) : _mm512_setzero_ps();
  for (p = 0; p < k; p++) {
    const float *bp = b + p * ldb, *ap = a + p * a_cs;
    for (v = 0; v < NV; v++) bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(tm, bp + 16 * v) : _mm512_loadu_ps(bp + 16 * v);
    for (i = 0; i < MR; i++) {
      const __m512 ai = _mm512_set1_ps(ap[i * a_rs]);
      for (v = 0; v < NV; v++) s[i][v] = _mm512_fmadd_ps(ai, bv[v], s[i][v]);
    }
  }
  for (i = 0; i < MR; i++)
    for (v = 0; v < NV; v++) _mm512_mask_storeu_ps(c + i * ldc + 16 * v, v == NV - 1 ? tm : (__mmask16)0xFFFF, s[i][v]);
}

#define MM_CASE(R, V) \
  case R * 8 + V: mm_block(R, V, k, ai, a_rs, a_cs, bj, ldb, cij, ldc, acc, tm); break;
#define MM_CASES(R) MM_CASE(R, 1) MM_CASE(R, 2) MM_CASE(R, 3) MM_CASE(R, 4)

void attnc_prims_matmul_avx512(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb,
                               float *c, long ldc, int acc)
{
  long i0, j0;
  for (j0 = 0; j0 < n; j0 += 64) {
    const long w = n - j0 < 64 ? n - j0 : 64, nv = (w + 15) / 16;
    const __mmask16 tm = tail_mask(w - 16 * (nv - 1));
    for (i0 = 0; i0 < m; i0 += MM_MR) {
      const long mr = m - i0 < MM_MR ? m - i0 : MM_MR;
      const float *ai = a + i0 * a_rs, *bj = b + j0;
      float *cij = c + i0 * ldc + j0;
      switch (mr * 8 + nv) {
        MM_CASES(1) MM_CASES(2) MM_CASES(3) MM_CASES(4) MM_CASES(5) MM_CASES(6)
      }
    }
  }
}
