/* ab_linear_q8: this tree's AVX512-VNNI linear_q8 (int8 weights, f32
 * activations) against another revision's, interleaved in one process as
 * bench/ab_linear.c does for the f32 linear (bench/ab_linear_q8.sh builds
 * it).
 *
 *     ab_linear_q8 ROWS N_IN N_OUT REPS [HEAD_W [COPIES]]
 *
 * With HEAD_W (0: none), the outputs go to heads HEAD_W columns wide,
 * each its own block of ROWS x HEAD_W floats, as linear_heads_q8 writes
 * them: this tree through its linear_heads_q8_vnni, the other one call
 * per head.  With COPIES, each call reads the next of that many copies of
 * x and writes the next of as many outputs, so that with enough of them
 * x comes from L3 and y goes to lines not in cache, as in a kernel's
 * projection items.
 *
 * Prints the best and median time of each and the ratios new / old. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prims.h"

#define AB_NAME "ab_linear_q8"
#include "ab_util.h"

/* the other revision's, renamed by ab_build.sh */
void ab_old_linear_q8_vnni(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                           const float *b, float *y, long y_stride);
/* its packing, where it has its own (weak: an older one reads attnc_prims_pack_q8's panels) */
void ab_old_pack_q8_vnni(const signed char *q, const float *scale, long n_out, long n_in, void *packed) __attribute__((weak));

int main(int argc, char **argv)
{
  static double t[2][AB_MAX_REPS];
  long rows, n_in, n_out, head_w = 0, copies = 1, i, k;
  int reps, r, n;
  float *x, *sc, *b, *y[2];
  signed char *q;
  void *packed = NULL, *packed_old = NULL; /* as each side packs its weights */
  double flops, diff = 0;
  char extra[64];
  if (argc < 5 || argc > 7) {
    fprintf(stderr, "usage: ab_linear_q8 ROWS N_IN N_OUT REPS [HEAD_W [COPIES]]\n");
    return 2;
  }
  rows = arg(argv[1], 1, 1L << 16, "ROWS"), n_in = arg(argv[2], 1, 1L << 14, "N_IN");
  n_out = arg(argv[3], 1, 1L << 14, "N_OUT"), reps = (int)arg(argv[4], 1, AB_MAX_REPS, "REPS");
  if (argc >= 6) head_w = arg(argv[5], 0, 1L << 14, "HEAD_W");
  if (argc == 7) copies = arg(argv[6], 1, 4096, "COPIES");
  if (head_w % 32 || (head_w && n_out % head_w)) {
    fprintf(stderr, "ab_linear_q8: HEAD_W must be a multiple of 32 dividing N_OUT\n");
    return 2;
  }
  if (!attnc_prims_vnni_ready()) {
    fprintf(stderr, "ab_linear_q8: this CPU has no AVX512-VNNI\n");
    return 2;
  }
  x = floats(rows * n_in * copies, 1), sc = floats(n_out, 2), b = floats(n_out, 3);
  y[0] = floats(rows * n_out * copies, 5), y[1] = floats(rows * n_out * copies, 6);
  q = malloc((size_t)(n_out * n_in));
  if (!q || posix_memalign(&packed, 64, (size_t)attnc_prims_pack_q8_size(n_out, n_in)) != 0 ||
      posix_memalign(&packed_old, 64, (size_t)attnc_prims_pack_q8_size(n_out, n_in)) != 0) {
    fprintf(stderr, "ab_linear_q8: out of memory\n");
    return 1;
  }
  for (i = 1; i < copies; i++) memcpy(x + i * rows * n_in, x, sizeof(float) * (size_t)(rows * n_in));
  for (i = 0; i < n_out * n_in; i++) q[i] = (signed char)((i * 7919 + 13) % 255 - 127);
  for (i = 0; i < n_out; i++) sc[i] = 0.01f + 0.001f * (float)(i % 7);
  attnc_prims_pack_q8_vnni(q, sc, n_out, n_in, packed);
  if (ab_old_pack_q8_vnni) ab_old_pack_q8_vnni(q, sc, n_out, n_in, packed_old);
  else attnc_prims_pack_q8(q, sc, n_out, n_in, packed_old);
  for (r = -2; r < reps; r++) /* two warm-ups */
    for (n = 0; n < 2; n++) {
      const int w = AB_SIDE(r, n);
      /* x's copies are equal: each call reads a copy the last call did
       * not; each side writes its own outputs, the same copy in a repetition */
      const float *xc = x + (2 * (r + 2) + n) % copies * rows * n_in;
      float *yc = y[w] + (r + 2) % copies * rows * n_out;
      const double a = now();
      if (!head_w) {
        if (w) attnc_prims_linear_q8_vnni(xc, rows, n_in, n_in, packed, n_out, b, yc, n_out);
        else ab_old_linear_q8_vnni(xc, rows, n_in, n_in, packed_old, n_out, b, yc, n_out);
      } else if (w) {
        attnc_prims_linear_heads_q8_vnni(xc, rows, n_in, n_in, packed, n_out, b, yc, head_w, 0, head_w, rows * head_w);
      } else {
        for (k = 0; k < n_out; k += head_w)
          ab_old_linear_q8_vnni(xc, rows, n_in, n_in, (const unsigned char *)packed_old + k / 32 * ATTNC_Q8_PANEL(n_in), head_w,
                                b + k, yc + k / head_w * rows * head_w, head_w);
      }
      if (r >= 0) t[w][r] = now() - a;
    }
  for (i = 0; i < rows * n_out * (copies < reps + 2 ? copies : reps + 2); i++) {
    const double d = y[0][i] > y[1][i] ? y[0][i] - y[1][i] : y[1][i] - y[0][i];
    if (d > diff) diff = d;
  }
  flops = 2.0 * (double)rows * (double)n_in * (double)n_out;
  snprintf(extra, sizeof extra, " (largest difference in y: %.3g)", diff);
  ab_report(t, reps, "vnni", flops, extra);
  return 0;
}
