/* int8 projection weights: which tensors of a checkpoint are projection
 * weights, and their symmetric per-output-row quantisation (docs/spec.md,
 * "int8 weights"): scale = max|row| / 127 (1 for a row of zeros),
 * q = round-half-to-even(w / scale), both computed in f32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int attnc_quantize_takes(const char *name, const attnc_tensor *t)
{
  size_t p;
  if (!t || t->rank != 2 || !attnc_convert_takes(t->dtype)) return 0;
  /* the whole name, or its part after a '.', is a projection weight's name
   * in the bindings' table of every naming scheme (spec.md, "Tensors and names") */
  for (p = 0; name[p]; p++)
    if (p == 0 || name[p - 1] == '.') {
      const int slot = attnc_bindings_lookup_name(name + p);
      if (slot == -2 || (slot >= 0 && attnc_slot_is_matrix(slot))) return 1;
    }
  return 0;
}

attnc_status attnc_quantize_int8(const attnc_tensor *w, int8_t *q, float *scale, attnc_error *err)
{
  int64_t rows, cols, r, c;
  float *row;
  if (!w || !q || !scale) return attnc_err_set(err, ATTNC_EARG, "attnc_quantize_int8 needs a tensor, q and scale");
  if (w->rank != 2 || w->shape[0] < 0 || w->shape[1] < 0)
    return attnc_err_set(err, ATTNC_EARG, "only a 2-D weight (out, in) is quantised per row; this one has rank %d", w->rank);
  if (!attnc_convert_takes(w->dtype))
    return attnc_err_set(err, ATTNC_EARG, "a weight to quantise must be F32, F64, BF16 or F16, not %s",
                         attnc_dtype_name(w->dtype));
  rows = w->shape[0];
  cols = w->shape[1];
  row = malloc(sizeof *row * (size_t)(cols > 0 ? cols : 1));
  if (!row) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory quantising a row of %lld values", (long long)cols);
  for (r = 0; r < rows; r++) {
    float mx = 0, s;
    attnc_convert((const char *)w->data + (size_t)(r * cols) * attnc_dtype_size(w->dtype), w->dtype, row, ATTNC_F32,
                  (size_t)cols);
    for (c = 0; c < cols; c++) {
      if (!isfinite(row[c])) {
        const double bad = row[c];
        free(row);
        return attnc_err_set(err, ATTNC_EARG, "row %lld holds %g at column %lld: only finite weights can be quantised",
                             (long long)r, bad, (long long)c);
      }
      if (fabsf(row[c]) > mx) mx = fabsf(row[c]);
    }
    s = mx > 0 ? mx / 127.0f : 1.0f;
    if (s == 0) s = mx; /* a row of subnormals too small to divide by 127 */
    scale[r] = s;
    for (c = 0; c < cols; c++) {
      float v = nearbyintf(row[c] / s); /* the default rounding: to nearest, ties to even */
      if (v > 127) v = 127;
      if (v < -127) v = -127;
      q[r * cols + c] = (int8_t)v;
    }
  }
  free(row);
  return ATTNC_OK;
}
