/* AVX512-VNNI (AMX parts too): linear_q8 (int8 weights) on vpdpbusd, which
 * sums four u8 x s8 products into each i32 lane: four times the lanes of
 * an f32 FMA per instruction.  Each row of x is quantised on the fly in
 * three levels: s1 = max|x| / 127, q1 = round(x / s1) in -127..127
 * (vpdpbusd's signed operand), then the remainder x - s1 q1 (at most s1 /
 * 2) as s2 = s1 / 254, q2 = round((x - s1 q1) / s2) in -127..127, and the
 * remainder of that as s3 = s2 / 254.  The weights are the unsigned
 * operand, stored as w + 128, and the 128 is taken back out through each
 * level's sum of q.  So y = scale[n] * sum over levels l of sl (accl -
 * 128 sum(ql)) + b, within s3 / 2 * sum_k |w[n][k]| of the exact product
 * (max|x| / 16387064 a value, about f32's own rounding).  Fewer levels
 * (one, as PyTorch's dynamic quantisation: max|x| / 254 a value; two:
 * max|x| / 64516) lost DESIGN.md's int8 bound wherever a softmax is sharp
 * enough to magnify q's and k's errors, with outlier channels or large
 * weights; docs/spec.md has the measurements, test_runtime.c
 * (test_runtime_int8_outlier_channel) holds the kernel to the bound, and
 * tools/int8_levels.py models each choice.
 * The weights come regrouped for vpdpbusd (attnc_prims_pack_q8_vnni) when
 * n_in is a multiple of 4 up to 16384 (where i32 sums could overflow);
 * other widths are regrouped at each call, from attnc_prims_pack_q8's
 * panels.  A row that is not finite goes to f32 arithmetic, as do fewer
 * than 32 rows of weights regrouped at each call, and n_in past 16384.
 * Compiled with per-function target attributes, so the file builds
 * anywhere. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prims.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <cpuid.h>
#include <immintrin.h>

#define NR ATTNC_PACK_NR
#define VNNI __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,prfchw")))
#define VB 12          /* levels a block (4 rows of 3): 24 sums, two weight vectors and a broadcast in registers */
#define LEVELS 3       /* of each row of x */
#define VR 24          /* rows quantised at a time (a pass) */
#define VNNI_MAX_IN 16384 /* 4096 steps of at most 4 * 255 * 128: within i32 */
/* Fewer rows of weights regrouped at each call go to the f32 linear_q8:
 * the regrouping (one pass over the weights, about 12 instructions a 128
 * bytes) is repaid several times over by 32 rows' products, not by a
 * decoding step's 1 row, which reads each weight once either way */
#define VNNI_MIN_ROWS 32

/* CPUID leaf 7: AVX512-VNNI (ECX bit 11), with the AVX-512 subsets used */
int attnc_prims_vnni_ready(void)
{
  unsigned a, b, c, d;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
    return 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((c >> 11) & 1);
}

/* 1 when attnc_prims_pack_q8_vnni regroups an n_in-wide weight at bind
 * time: its 32 scales and the regrouped panel (128 bytes a 4 inputs) then
 * fill no more than ATTNC_Q8_PANEL(n_in), the offsets kernels compute */
static int grouped(long n_in)
{
  return n_in > 0 && n_in % 4 == 0 && n_in <= VNNI_MAX_IN;
}

/* A panel's weights (k-major, 32 outputs a k) regrouped for vpdpbusd: w +
 * 128, for each 4 inputs k4 the 32 outputs' 4 weights side by side
 * (outputs 0-15 in the first 64 bytes, 16-31 in the next, one i32 lane
 * each), weight 0 past n_in.  Group k4 reads and writes only bytes
 * [128 k4, 128 k4 + 128), all read before any is written, so out may be
 * wq itself. */
VNNI static void regroup(const signed char *wq, long n_in, long k4n, unsigned char *out)
{
  long k4, k;
  const __m512i bias = _mm512_set1_epi8((char)0x80);
  for (k4 = 0; k4 < k4n; k4++) {
    __m256i r[4], ab_lo, ab_hi, cd_lo, cd_hi, q0, q1, q2, q3;
    for (k = 0; k < 4; k++)
      r[k] = 4 * k4 + k < n_in ? _mm256_loadu_si256((const __m256i *)(wq + (4 * k4 + k) * NR)) : _mm256_setzero_si256();
    /* bytes of inputs 4k4..4k4+3 for each output, side by side */
    ab_lo = _mm256_unpacklo_epi8(r[0], r[1]);
    ab_hi = _mm256_unpackhi_epi8(r[0], r[1]);
    cd_lo = _mm256_unpacklo_epi8(r[2], r[3]);
    cd_hi = _mm256_unpackhi_epi8(r[2], r[3]);
    q0 = _mm256_unpacklo_epi16(ab_lo, cd_lo); /* outputs 0-3 | 16-19 */
    q1 = _mm256_unpackhi_epi16(ab_lo, cd_lo); /* 4-7 | 20-23 */
    q2 = _mm256_unpacklo_epi16(ab_hi, cd_hi); /* 8-11 | 24-27 */
    q3 = _mm256_unpackhi_epi16(ab_hi, cd_hi); /* 12-15 | 28-31 */
    {
      const __m512i w0 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(q0, q1, 0x20)),
                                            _mm256_permute2x128_si256(q2, q3, 0x20), 1);
      const __m512i w1 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(q0, q1, 0x31)),
                                            _mm256_permute2x128_si256(q2, q3, 0x31), 1);
      /* + 128 is the top bit flipped */
      _mm512_store_si512(out + k4 * 128, _mm512_xor_si512(w0, bias));
      _mm512_store_si512(out + k4 * 128 + 64, _mm512_xor_si512(w1, bias));
    }
  }
}

/* At bind time, grouped widths: attnc_prims_pack_q8's panels, each
 * regrouped where it lies (weight 0, 128, to the panel's end) */
void attnc_prims_pack_q8_vnni(const signed char *q, const float *scale, long n_out, long n_in, void *packed)
{
  const long panels = (n_out + NR - 1) / NR, k4n = n_in / 4, wbytes = ATTNC_Q8_PANEL(n_in) - NR * (long)sizeof(float);
  long p;
  attnc_prims_pack_q8(q, scale, n_out, n_in, packed);
  if (!grouped(n_in)) return;
  for (p = 0; p < panels; p++) {
    unsigned char *wg = (unsigned char *)packed + p * ATTNC_Q8_PANEL(n_in) + NR * sizeof(float);
    regroup((const signed char *)wg, n_in, k4n, wg);
    memset(wg + k4n * 128, 128, (size_t)(wbytes - k4n * 128));
  }
}

/* A quantised row is two records, its levels: q1, then q2 right after it
 * (each xs + 16 bytes, xs the bytes of its values rounded up to 16; rows
 * themselves may lie further apart): the level's n_in
 * s8 values (0 from n_in to xs), then its scale (f32), 128 times the sum
 * of its values (i32) and, in the first, 1 when x's row is summed in f32
 * instead (it held a NaN or an infinity, or was too small to scale; i32),
 * whose values are then 0 */
#define REC_TAIL 16
static long rec_xs(long n_in)
{
  return ((n_in + 3) / 4 * 4 + 15) / 16 * 16;
}
static float rec_scale(const signed char *r, long xs)
{
  float v;
  memcpy(&v, r + xs, sizeof v);
  return v;
}
/* the record's i-th integer: 0 the sum, 1 the flag */
static int rec_int(const signed char *r, long xs, int i)
{
  int v;
  memcpy(&v, r + xs + 4 + 4 * i, sizeof v);
  return v;
}

/* One level's values, 16 at a time: v rounded to d, summed into *isum */
VNNI static inline __attribute__((always_inline)) void put_level(__m512 v, signed char *d, __m512i *isum)
{
  const __m512i q = _mm512_cvtps_epi32(v);
  *isum = _mm512_add_epi32(*isum, q);
  _mm_storeu_si128((__m128i *)d, _mm512_cvtepi32_epi8(q));
}

static void put_tail(signed char *d, long xs, float scale, int sum128, int flag)
{
  const int t[2] = { sum128, flag };
  memcpy(d + xs, &scale, sizeof scale);
  memcpy(d + xs + 4, t, sizeof t);
}

/* rows of x (n_in each) to three records each, its levels, rows rb bytes
 * apart (rb at least three times xs + REC_TAIL; each level xs + REC_TAIL
 * after the last).  A NaN or an infinity
 * shows in the row's sum (which, for finite values, can only overflow
 * past 3e38 times n_in / 16 and send a row that could be quantised to the
 * f32 path, which is still right).  No clamp on the first level: |x| <=
 * max|x| puts x * 127 / max|x| within a rounding of 127, and it rounds to
 * 127 at most; the remainder is within s1 / 2 (plus a rounding of x), so
 * the second is clamped to 127 only against that rounding. */
VNNI static void quantise(const float *x, long rows, long x_stride, long n_in, signed char *xq, long rb)
{
  const long n16 = n_in / 16 * 16, xs = rec_xs(n_in), half = xs + REC_TAIL;
  const __mmask16 tail = (__mmask16)((1u << (n_in - n16)) - 1u);
  long r, k;
  for (r = 0; r < rows; r++) {
    const float *xr = x + r * x_stride;
    signed char *d = xq + r * rb, *d2 = d + half, *d3 = d2 + half;
    __m512 mx0 = _mm512_setzero_ps(), mx1 = _mm512_setzero_ps(), sum = _mm512_setzero_ps(), v;
    __m512i isum = _mm512_setzero_si512(), isum2 = _mm512_setzero_si512(), isum3 = _mm512_setzero_si512();
    float amax, total, s1;
    for (k = 0; k + 32 <= n16; k += 32) {
      const __m512 a = _mm512_loadu_ps(xr + k), b = _mm512_loadu_ps(xr + k + 16);
      mx0 = _mm512_max_ps(mx0, _mm512_abs_ps(a));
      mx1 = _mm512_max_ps(mx1, _mm512_abs_ps(b));
      sum = _mm512_add_ps(sum, _mm512_add_ps(a, b));
    }
    for (; k < n_in; k += 16) {
      v = _mm512_maskz_loadu_ps(k < n16 ? (__mmask16)0xFFFF : tail, xr + k);
      mx0 = _mm512_max_ps(mx0, _mm512_abs_ps(v));
      sum = _mm512_add_ps(sum, v);
    }
    amax = _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));
    total = _mm512_reduce_add_ps(sum);
    /* a NaN or an infinity; or a row so small (below 2^-100) that 127 / max|x|
     * or the second level's 1 / s2 would overflow: summed in f32 instead */
    if (!(total - total == 0) || (amax > 0 && amax < 0x1p-100f)) {
      memset(d, 0, (size_t)xs);
      memset(d2, 0, (size_t)xs);
      memset(d3, 0, (size_t)xs);
      put_tail(d, xs, 0, 0, 1);
      put_tail(d2, xs, 0, 0, 0);
      put_tail(d3, xs, 0, 0, 0);
      continue;
    }
    s1 = amax > 0 ? amax / 127.0f : 1.0f;
    {
      const float s2 = s1 / 254.0f, s3 = s2 / 254.0f;
      const __m512 inv1 = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f), inv2 = _mm512_set1_ps(amax > 0 ? 1.0f / s2 : 0.0f);
      const __m512 inv3 = _mm512_set1_ps(amax > 0 ? 1.0f / s3 : 0.0f);
      const __m512 vs1 = _mm512_set1_ps(s1), vs2 = _mm512_set1_ps(s2), lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
      for (k = 0; k < xs; k += 16) {
        const __m512 xv = k < n16 ? _mm512_loadu_ps(xr + k) : _mm512_maskz_loadu_ps(k < n_in ? tail : (__mmask16)0, xr + k);
        const __m512 q1 = _mm512_roundscale_ps(_mm512_mul_ps(xv, inv1), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512 rem = _mm512_fnmadd_ps(q1, vs1, xv); /* x - s1 q1, one rounding */
        const __m512 q2 = _mm512_roundscale_ps(_mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(rem, inv2), lim), nlim),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512 rem2 = _mm512_fnmadd_ps(q2, vs2, rem); /* rem - s2 q2 */
        put_level(q1, d + k, &isum);
        put_level(q2, d2 + k, &isum2);
        put_level(_mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(rem2, inv3), lim), nlim), d3 + k, &isum3);
      }
      /* |sums| <= 127 * 16384 */
      put_tail(d, xs, s1, 128 * _mm512_reduce_add_epi32(isum), 0);
      put_tail(d2, xs, s2, 128 * _mm512_reduce_add_epi32(isum2), 0);
      put_tail(d3, xs, s3, 128 * _mm512_reduce_add_epi32(isum3), 0);
    }
  }
}

/* acc + the products of a's u8 and b's s8 bytes, four to a lane.  As
 * inline assembly: gcc 12 moves and spills the sums around
 * _mm512_dpbusd_epi32 (perf annotate: twice as many register moves and
 * stack stores as vpdpbusd in the kernel below, at 8 rows or 12) */
VNNI static inline __attribute__((always_inline)) __m512i dpbusd(__m512i acc, __m512i a, __m512i b)
{
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

/* c (MR / LV rows by 32 outputs, m0 and m1 the live ones) = MR records of
 * xq (rows rb bytes apart, each its first LV levels, xs of values, one
 * after the other) times the regrouped panel wg, scaled and biased as the
 * file says */
#define LEVEL(xq, rb, xs, LV, i) ((xq) + (i) / (LV) * (rb) + (i) % (LV) * ((xs) + REC_TAIL))
VNNI static inline __attribute__((always_inline)) void lin_vnni_kernel(const int LV, const int MR, long k4n, const signed char *xq, long rb,
                                                                         long xs, const unsigned char *wg, const float *scale,
                                                                         float *c, long ldc, const float *bias, __mmask16 m0,
                                                                         __mmask16 m1)
{
  __m512i acc0[VB], acc1[VB];
  long k4;
  int i;
  for (i = 0; i < MR; i++) {
    acc0[i] = _mm512_setzero_si512();
    acc1[i] = _mm512_setzero_si512();
    /* the outputs' lines asked for now, owned by the time the sums are
     * stored: a projection's outputs are fresh memory, past L2 */
    if (i % LV == 0) {
      __builtin_prefetch(c + i / LV * ldc, 1, 3);
      __builtin_prefetch(c + i / LV * ldc + 16, 1, 3);
    }
  }
  for (k4 = 0; k4 < k4n; k4++) {
    const __m512i w0 = _mm512_load_si512(wg + k4 * 128), w1 = _mm512_load_si512(wg + k4 * 128 + 64);
    for (i = 0; i < MR; i++) {
      int xv;
      memcpy(&xv, LEVEL(xq, rb, xs, LV, i) + k4 * 4, sizeof xv);
      const __m512i xb = _mm512_set1_epi32(xv);
      acc0[i] = dpbusd(acc0[i], w0, xb);
      acc1[i] = dpbusd(acc1[i], w1, xb);
    }
  }
  {
    const __m512 w0 = _mm512_loadu_ps(scale), w1 = _mm512_loadu_ps(scale + 16);
    const __m512 c0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 c1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (i = 0; i < MR; i += LV) {
      __m512 t0 = _mm512_setzero_ps(), t1 = _mm512_setzero_ps();
      int l;
      for (l = LV - 1; l >= 0; l--) { /* the smallest level first */
        const signed char *rl = LEVEL(xq, rb, xs, LV, i + l);
        const __m512 sl = _mm512_set1_ps(rec_scale(rl, xs));
        const __m512i zl = _mm512_set1_epi32(rec_int(rl, xs, 0));
        t0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc0[i + l], zl)), sl, t0);
        t1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc1[i + l], zl)), sl, t1);
      }
      _mm512_mask_storeu_ps(c + i / LV * ldc, m0, _mm512_fmadd_ps(t0, w0, c0));
      _mm512_mask_storeu_ps(c + i / LV * ldc + 16, m1, _mm512_fmadd_ps(t1, w1, c1));
    }
  }
}

/* The f32 linear_q8 over the heads [col0, col0 + n_out) spans, as
 * attnc_prims_linear_heads_q8 does it, but never back into this file:
 * for weights as attnc_prims_pack_q8 leaves them. */
static void heads_f32(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out, const float *b,
                      float *y, long y_stride, long col0, long head_w, long head_stride)
{
  long n = 0;
  while (n < n_out) {
    const long a = col0 + n, d = a % head_w, w = n_out - n < head_w - d ? n_out - n : head_w - d;
    attnc_prims_linear_q8_avx512(x, rows, x_stride, n_in, (const unsigned char *)packed + n / NR * ATTNC_Q8_PANEL(n_in), w,
                                 b ? b + n : NULL, y + a / head_w * head_stride + d, y_stride);
    n += w;
  }
}

/* The same in f32 for weights regrouped at bind time (grouped(n_in)): the
 * rows that are not finite, so that their NaNs and infinities reach y as
 * a product in floats would carry them */
VNNI static void heads_f32_grouped(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                   const float *b, float *y, long y_stride, long col0, long head_w, long head_stride)
{
  const __m512i lo = _mm512_set1_epi32(0xFF);
  const __m512 off = _mm512_set1_ps(128.0f);
  long r, p, k4, j;
  for (r = 0; r < rows; r++) {
    const float *xr = x + r * x_stride;
    for (p = 0; p * NR < n_out; p++) {
      const unsigned char *panel = (const unsigned char *)packed + p * ATTNC_Q8_PANEL(n_in), *wg = panel + NR * sizeof(float);
      const long nv = n_out - p * NR, a = col0 + p * NR;
      const __mmask16 m0 = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1u);
      const __mmask16 m1 = nv >= 32 ? (__mmask16)0xFFFF : nv <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nv - 16)) - 1u);
      float *yr = y + a / head_w * head_stride + a % head_w + r * y_stride;
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
      for (k4 = 0; k4 < n_in / 4; k4++) {
        const __m512i w0 = _mm512_load_si512(wg + k4 * 128), w1 = _mm512_load_si512(wg + k4 * 128 + 64);
        for (j = 0; j < 4; j++) {
          const __m512 xv = _mm512_set1_ps(xr[4 * k4 + j]);
          const __m512 f0 = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(w0, (unsigned)(8 * j)), lo)), off);
          const __m512 f1 = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(w1, (unsigned)(8 * j)), lo)), off);
          s0 = _mm512_fmadd_ps(xv, f0, s0);
          s1 = _mm512_fmadd_ps(xv, f1, s1);
        }
      }
      s0 = _mm512_mul_ps(s0, _mm512_loadu_ps((const float *)panel));
      s1 = _mm512_mul_ps(s1, _mm512_loadu_ps((const float *)panel + 16));
      if (b) {
        s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(m0, b + p * NR));
        s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(m1, b + p * NR + 16));
      }
      _mm512_mask_storeu_ps(yr, m0, s0);
      _mm512_mask_storeu_ps(yr + 16, m1, s1);
    }
  }
}

/* linear_heads_q8 (column col0 + n to head (col0 + n) / head_w's block,
 * head_stride floats from the last; head_w and col0 whole panels) on x's
 * rows quantised: given (xq, records rb bytes apart), or else by this
 * call.  The weights as packed when grouped(n_in), else regrouped once
 * per call (n_out rounded to panels by n_in rounded to 4, in one
 * allocation with a pass's records); then passes of up to VR rows, each
 * sweeping every panel of every head in blocks of up to VB / LEVELS rows, so that
 * a row is quantised once however many heads its outputs go to.  Rows
 * that could not be quantised are done again in f32 from x; without
 * memory, every row. */
VNNI static void lin_q8(const signed char *xq_in, long rb_in, const float *x, long rows, long x_stride, long n_in,
                        const void *packed, long n_out, const float *b, float *y, long y_stride, long col0, long head_w,
                        long head_stride)
{
  const long panels = (n_out + NR - 1) / NR, npass = (rows + VR - 1) / VR, k4n = (n_in + 3) / 4;
  const int pre = grouped(n_in);
  /* from one panel's regrouped weights to the next: as packed, or as regrouped here */
  const long gstep = pre ? ATTNC_Q8_PANEL(n_in) : k4n * 128, wbytes = pre ? 0 : panels * gstep;
  const long xs = rec_xs(n_in), rb = xq_in ? rb_in : LEVELS * (xs + REC_TAIL);
  const unsigned char *wg0 = (const unsigned char *)packed + NR * sizeof(float);
  void *mem = NULL;
  long pass, p, bk, r;
  if (rows <= 0 || n_out <= 0) return;
  if (n_in > VNNI_MAX_IN || (!pre && rows < VNNI_MIN_ROWS) ||
      ((wbytes > 0 || !xq_in) && posix_memalign(&mem, 64, (size_t)(wbytes + (xq_in ? 0 : VR * rb))) != 0)) {
    if (pre) heads_f32_grouped(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, col0, head_w, head_stride);
    else heads_f32(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, col0, head_w, head_stride);
    return;
  }
  if (!pre) {
    wg0 = (const unsigned char *)mem;
    for (p = 0; p < panels; p++)
      regroup((const signed char *)packed + p * ATTNC_Q8_PANEL(n_in) + NR * sizeof(float), n_in, k4n,
              (unsigned char *)mem + p * gstep);
  }
  for (pass = 0; pass < npass; pass++) {
    const long pr0 = pass * rows / npass, prows = (pass + 1) * rows / npass - pr0;
    const signed char *xq = xq_in ? xq_in + pr0 * rb : (const signed char *)mem + wbytes;
    const long nb = (prows + VB / LEVELS - 1) / (VB / LEVELS); /* blocks of up to VB / LEVELS rows */
    if (!xq_in) quantise(x + pr0 * x_stride, prows, x_stride, n_in, (signed char *)mem + wbytes, rb);
    for (p = 0; p < panels; p++) {
      const float *scale = (const float *)((const unsigned char *)packed + p * ATTNC_Q8_PANEL(n_in));
      const long nv = n_out - p * NR, a = col0 + p * NR;
      const __mmask16 m0 = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1u);
      const __mmask16 m1 = nv >= 32 ? (__mmask16)0xFFFF : nv <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nv - 16)) - 1u);
      const float *bias = b ? b + p * NR : NULL;
      const unsigned char *wp = wg0 + p * gstep;
      float *yp = y + a / head_w * head_stride + a % head_w;
      for (bk = 0; bk < nb; bk++) {
        const long r0 = bk * prows / nb, mr = (bk + 1) * prows / nb - r0;
        const signed char *xr = xq + r0 * rb;
        float *c = yp + (pr0 + r0) * y_stride;
#define LINV_CASE(MR) \
  case MR: lin_vnni_kernel(LEVELS, LEVELS * MR, k4n, xr, rb, xs, wp, scale, c, y_stride, bias, m0, m1); break;
        switch (mr) {
          LINV_CASE(4) LINV_CASE(3) LINV_CASE(2)
        default: lin_vnni_kernel(LEVELS, LEVELS, k4n, xr, rb, xs, wp, scale, c, y_stride, bias, m0, m1); break;
        }
#undef LINV_CASE
      }
    }
    for (r = 0; r < prows; r++) /* the rows with a NaN or an infinity, in f32 */
      if (rec_int(xq + r * rb, xs, 1)) {
        const float *xr = x + (pr0 + r) * x_stride;
        float *yr = y + (pr0 + r) * y_stride;
        if (pre) heads_f32_grouped(xr, 1, x_stride, n_in, packed, n_out, b, yr, y_stride, col0, head_w, head_stride);
        else heads_f32(xr, 1, x_stride, n_in, packed, n_out, b, yr, y_stride, col0, head_w, head_stride);
      }
  }
  free(mem);
}

/* One head as wide as the panels: every column in y's first block. */
void attnc_prims_linear_q8_vnni(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                const float *b, float *y, long y_stride)
{
  lin_q8(NULL, 0, x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, 0, (n_out + NR - 1) / NR * NR, 0);
}

void attnc_prims_linear_heads_q8_vnni(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                      const float *b, float *y, long y_stride, long col0, long head_w, long head_stride)
{
  lin_q8(NULL, 0, x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, col0, head_w, head_stride);
}

long attnc_prims_q8_row_bytes_vnni(long n_in)
{
  return LEVELS * (rec_xs(n_in) + REC_TAIL);
}

void attnc_prims_q8_quantise_vnni(const float *x, long rows, long x_stride, long n_in, void *xq, long xq_stride)
{
  quantise(x, rows, x_stride, n_in, (signed char *)xq, xq_stride);
}

void attnc_prims_linear_heads_q8_xq_vnni(const void *xq, long xq_stride, const float *x, long rows, long x_stride,
                                         long n_in, const void *packed, long n_out, const float *b, float *y,
                                         long y_stride, long col0, long head_w, long head_stride)
{
  lin_q8((const signed char *)xq, xq_stride, x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, col0, head_w,
         head_stride);
}

#else
int attnc_prims_vnni_ready(void) { return 0; }
void attnc_prims_pack_q8_vnni(const signed char *q, const float *scale, long n_out, long n_in, void *packed)
{
  attnc_prims_pack_q8(q, scale, n_out, n_in, packed);
}
/* never in the table without AVX512-VNNI (attnc_prims_vnni_ready is 0) */
long attnc_prims_q8_row_bytes_vnni(long n_in)
{
  return 4 * n_in + 16;
}
void attnc_prims_q8_quantise_vnni(const float *x, long rows, long x_stride, long n_in, void *xq, long xq_stride)
{
  (void)x, (void)rows, (void)x_stride, (void)n_in, (void)xq, (void)xq_stride;
}
void attnc_prims_linear_heads_q8_xq_vnni(const void *xq, long xq_stride, const float *x, long rows, long x_stride,
                                         long n_in, const void *packed, long n_out, const float *b, float *y,
                                         long y_stride, long col0, long head_w, long head_stride)
{
  (void)xq, (void)xq_stride;
  attnc_prims_linear_heads_q8(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, col0, head_w, head_stride);
}
void attnc_prims_linear_q8_vnni(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                const float *b, float *y, long y_stride)
{
  attnc_prims_linear_q8_generic(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride);
}
void attnc_prims_linear_heads_q8_vnni(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                      const float *b, float *y, long y_stride, long col0, long head_w, long head_stride)
{
  attnc_prims_linear_heads_q8(x, rows, x_stride, n_in, packed, n_out, b, y, y_stride, col0, head_w, head_stride);
}
#endif
