/* Element conversions between the floating dtypes a kernel may be bound
 * with (F64, F32, BF16, F16) and the dtype it computes in, so that a bf16
 * or f16 checkpoint binds to any kernel.  Portable C: the bit layouts of
 * IEEE binary16 and bfloat16 are handled by hand (no _Float16), and a
 * kernel computing in bf16 or f16 takes any of them rounded to its dtype. */
#include <math.h>
#include <string.h>

#include "internal.h"

int attnc_convert_takes(attnc_dtype d)
{
  return d == ATTNC_F64 || d == ATTNC_F32 || d == ATTNC_BF16 || d == ATTNC_F16;
}

static float from_bits(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* bfloat16 is the top half of a binary32: exact. */
static float bf16_to_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

/* binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits; exact in binary32. */
static float f16_to_f32(uint16_t h)
{
  const uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return from_bits(sign | 0x7f800000u | (m << 13)); /* inf, or NaN keeping its payload */
  if (e != 0) return from_bits(sign | ((e + 112) << 23) | (m << 13));
  {
    const float v = (float)m * 0x1p-24f; /* zero or subnormal: m * 2^-24 */
    return sign ? -v : v;
  }
}

/* One element of src (dtype sd) at index i, as a double (exact for every dtype taken). */
static double element(const void *src, attnc_dtype sd, size_t i)
{
  switch (sd) {
  case ATTNC_F64: return ((const double *)src)[i];
  case ATTNC_F32: return ((const float *)src)[i];
  case ATTNC_BF16: return bf16_to_f32(((const uint16_t *)src)[i]);
  default: return f16_to_f32(((const uint16_t *)src)[i]);
  }
}

static uint32_t to_bits(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* A binary32 rounded to bfloat16, to nearest with ties to even; NaN stays
 * NaN (quiet), infinities and overflow go to infinity. */
static uint16_t f32_to_bf16(float f)
{
  const uint32_t u = to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* A binary32 rounded to binary16, to nearest with ties to even, through
 * subnormals; NaN stays NaN (quiet), overflow goes to infinity. */
static uint16_t f32_to_f16(float f)
{
  const uint32_t u = to_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ff));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
  if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or zero */
    /* m * 2^-24 with m = round(|f| * 2^24): the exponent aligns the bits */
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift, q, rest, half;
    if (e < 102) return (uint16_t)sign; /* below 2^-25: rounds to zero */
    shift = 126 - e;                     /* 14 + (113 - e) - ... : bits of m below 2^-24 */
    q = m >> shift;
    rest = m & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
  }
  {
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1); /* round the 13 dropped bits */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
  }
}

/* A double as the binary32 nearest it with ties to odd (the last bit set
 * when inexact): rounding that again to a narrower type gives the same as
 * rounding the double once. */
static float f64_to_f32_odd(double d)
{
  float f = (float)d;
  if ((double)f != d && d == d && !isinf(f)) {
    uint32_t u = to_bits(f);
    if (fabs((double)f) > fabs(d)) u--; /* rounded away from zero: step back toward it */
    u |= 1;
    f = from_bits(u);
  }
  return f;
}

void attnc_convert(const void *src, attnc_dtype sd, void *dst, attnc_dtype dd, size_t n)
{
  size_t i;
  if (dd == ATTNC_F64) {
    double *o = dst;
    for (i = 0; i < n; i++) o[i] = element(src, sd, i);
  } else if (dd == ATTNC_F32) { /* rounded to nearest from F64, exact from the 16-bit types */
    float *o = dst;
    for (i = 0; i < n; i++) o[i] = (float)element(src, sd, i);
  } else { /* BF16 or F16: rounded once to nearest, ties to even */
    uint16_t *o = dst;
    for (i = 0; i < n; i++) {
      const float f = sd == ATTNC_F64 ? f64_to_f32_odd(((const double *)src)[i]) : (float)element(src, sd, i);
      o[i] = dd == ATTNC_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
    }
  }
}
