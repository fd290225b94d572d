/* Helpers shared by the test programs. */
#ifndef ATTNC_TESTUTIL_H
#define ATTNC_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

/* Largest violation of |got - want| <= atol + rtol * |want|, as a ratio
 * (<= 1 passes); NaN must match NaN.  *where gets the worst index. */
static inline double tu_compare(const double *got, const double *want, size_t n, double atol, double rtol, size_t *where)
{
  double worst = 0;
  size_t i;
  if (where) *where = 0;
  for (i = 0; i < n; i++) {
    double r;
    if (isnan(want[i]) || isnan(got[i])) {
      r = (isnan(want[i]) && isnan(got[i])) ? 0 : INFINITY;
    } else {
      r = fabs(got[i] - want[i]) / (atol + rtol * fabs(want[i]));
    }
    if (r > worst || (isinf(r) && !isinf(worst))) {
      worst = r;
      if (where) *where = i;
    }
  }
  return worst;
}

/* Copy a tensor of F32, F64, BF16, F16 or I8 into a new double array (NULL on failure). */
static inline double *tu_to_double(const attnc_tensor *t, size_t *count)
{
  size_t n = 1, i;
  double *d;
  int a;
  for (a = 0; a < t->rank; a++) n *= (size_t)t->shape[a];
  d = malloc(n * sizeof *d + 1);
  if (!d) return NULL;
  for (i = 0; i < n; i++) {
    if (t->dtype == ATTNC_BF16 || t->dtype == ATTNC_F16) {
      const unsigned h = ((const uint16_t *)t->data)[i];
      if (t->dtype == ATTNC_BF16) {
        const uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        d[i] = f;
      } else { /* binary16: sign, 5 exponent bits (bias 15), 10 fraction bits */
        const unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
        const double mag = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, (int)e - 25);
        d[i] = (h & 0x8000) ? -mag : mag;
      }
    } else {
      d[i] = t->dtype == ATTNC_F32  ? (double)((const float *)t->data)[i]
             : t->dtype == ATTNC_I8 ? (double)((const int8_t *)t->data)[i]
                                    : ((const double *)t->data)[i];
    }
  }
  if (count) *count = n;
  return d;
}

/* The directory of the source tree (tests run from the top level). */
static inline const char *tu_root(void)
{
  const char *r = getenv("ATTNC_ROOT");
  return (r && *r) ? r : ".";
}

#endif
