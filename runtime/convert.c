/* Element conversions between the floating dtypes a kernel may be bound
 * with (F64, F32, BF16, F16) and the dtype it computes in, so that a bf16
 * or f16 checkpoint binds to any kernel.  Portable C: the bit layouts of
 * IEEE binary16 and bfloat16 are handled by hand (no _Float16). */
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

void attnc_convert(const void *src, attnc_dtype sd, void *dst, attnc_dtype dd, size_t n)
{
  size_t i;
  if (dd == ATTNC_F64) {
    double *o = dst;
    for (i = 0; i < n; i++) o[i] = element(src, sd, i);
  } else { /* F32: rounded to nearest from F64, exact from the 16-bit types */
    float *o = dst;
    for (i = 0; i < n; i++) o[i] = (float)element(src, sd, i);
  }
}
