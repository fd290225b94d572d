/* ab_attend: this tree's attention primitive against another revision's,
 * interleaved in one process (bench/ab_attend.sh builds it).  On a shared
 * machine whose speed drifts from minute to minute, two programs timed
 * one after the other compare the minutes, not the code; here each
 * repetition runs both primitives on the same tensors, one right after
 * the other (which goes first swaps: AB_SIDE), so both see the same
 * machine.
 *
 *     ab_attend C NK V_OFFSET REPS HEADS [BIAS [CAUSAL]]
 *
 * HEADS heads of NK queries (in 64-row tiles) against NK keys of C floats,
 * each head one contiguous block; k and v start V_OFFSET floats past a
 * 64-byte boundary (4: a caller's malloc'd tensor).  BIAS = 1 adds a bias
 * laid out like the scores, one for all heads (in cache, as AlphaFold's
 * pair bias is across a batch when heads run one by one); BIAS = 2 one
 * per head (HEADS x NK x NK floats streamed, as a batch element's heads
 * read them).  CAUSAL = 1: key j visible to query i iff j <= i, each tile's
 * keys ending at its last row (the work counted is still dense).  Prints
 * the best and median time of each and the ratios new / old (below 1: the
 * new code is faster).  AB_ROWS_OLD and AB_ROWS_NEW (default 64) set each
 * side's query rows per tile, so `bench/ab_attend.sh HEAD ...` with
 * AB_ROWS_NEW=48 compares tile sizes. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prims.h"

#define AB_NAME "ab_attend"
#include "ab_util.h"

int main(int argc, char **argv)
{
  const attnc_prims *P = attnc_prims_get();
  static double t[2][AB_MAX_REPS];
  long rows_of[2], c, nk, off, heads, h, i0;
  int reps, r, n, bias, causal;
  float *q, *k, *v, *o, *b, *work;
  double flops;
  ab_attend_fn old_attend;
  if (argc < 6 || argc > 8) {
    fprintf(stderr, "usage: ab_attend C NK V_OFFSET REPS HEADS [BIAS [CAUSAL]]\n");
    return 2;
  }
  c = arg(argv[1], 1, 4096, "C"), nk = arg(argv[2], 1, 1L << 16, "NK"), off = arg(argv[3], 0, 63, "V_OFFSET");
  reps = (int)arg(argv[4], 1, AB_MAX_REPS, "REPS"), heads = arg(argv[5], 1, 256, "HEADS");
  bias = argc >= 7 ? (int)arg(argv[6], 0, 2, "BIAS") : 0;
  causal = argc == 8 ? (int)arg(argv[7], 0, 1, "CAUSAL") : 0;
  old_attend = ab_old_attend(P);
  rows_of[0] = getenv("AB_ROWS_OLD") ? arg(getenv("AB_ROWS_OLD"), 1, 512, "AB_ROWS_OLD") : 64;
  rows_of[1] = getenv("AB_ROWS_NEW") ? arg(getenv("AB_ROWS_NEW"), 1, 512, "AB_ROWS_NEW") : 64;
  q = floats(heads * nk * c, 1), k = floats(heads * nk * c, 2) + off, v = floats(heads * nk * c, 3) + off;
  o = floats(heads * nk * c, 4), b = floats((bias == 2 ? heads : 1) * nk * nk, 5), work = floats(P->attend_work(rows_of[0] > rows_of[1] ? rows_of[0] : rows_of[1], c), 6);
  for (r = -2; r < reps; r++) /* two warm-ups */
    for (n = 0; n < 2; n++) {
      const int w = AB_SIDE(r, n);
      const long rows = rows_of[w];
      const double a = now();
      for (h = 0; h < heads; h++)
        for (i0 = 0; i0 < nk; i0 += rows) {
          const long hb = h * nk * c;
          attnc_tile tile;
          memset(&tile, 0, sizeof tile);
          tile.q = q + hb + i0 * c, tile.q_stride = c, tile.q_hstride = c, tile.q_group = 1;
          tile.k = k + hb, tile.k_stride = c, tile.v = v + hb, tile.v_stride = c;
          tile.o = o + hb + i0 * c, tile.o_stride = c, tile.o_hstride = c;
          tile.rows = nk - i0 < rows ? nk - i0 : rows, tile.i0 = i0, tile.c = c;
          tile.nk = nk, tile.k_begin = 0, tile.k_end = nk, tile.scale = 0.125f, tile.work = work;
          if (causal) tile.has_hi = 1, tile.hi_off = 0, tile.k_end = i0 + tile.rows;
          if (bias) /* bias[j][i]: along the rows */
            tile.bias = b + (bias == 2 ? h * nk * nk : 0), tile.bias_i = 1, tile.bias_j = nk;
          if (w) P->attend(&tile);
          else old_attend(&tile);
        }
      if (r >= 0) t[w][r] = now() - a;
    }
  flops = 4.0 * (double)nk * (double)nk * (double)c * (double)heads;
  ab_report(t, reps, P->isa, flops, "");
  return 0;
}
