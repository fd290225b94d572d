/* ab_decode: this tree's attention primitive against another revision's
 * on decoding tiles (a few query rows against many keys, the keys split
 * as the kernel splits them), interleaved in one process
 * (bench/ab_decode.sh builds it).
 *
 *     ab_decode C NK KV_HEADS GROUP SPLITS REPS [SETS]
 *
 * KV_HEADS kv heads of NK keys of C floats, each head one contiguous
 * block, GROUP query rows per kv head (the query heads that share it);
 * each head's keys in SPLITS tiles of NK / SPLITS keys that keep their
 * partial results (m_out, l_out), as decode D's items are.  SETS copies
 * of k and v (default 4) are visited in turn, so that with 32 MiB each
 * they come from memory, not from L3, as in a model whose layers each
 * have their own cache.  KV bf16 (default f32) stores k and v as bf16 and
 * times attend_kv instead: this tree's as a dtype=bf16 kernel calls it
 * (ATTNC_KV_BF16_ROUND, whatever the CPU takes for it) against REV's
 * attend_kv with ATTNC_KV_BF16.  Prints the best and median time of each
 * side and the ratios new / old (below 1: the new code is faster). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prims.h"

#define AB_NAME "ab_decode"
#include "ab_util.h"

int main(int argc, char **argv)
{
  const attnc_prims *P = attnc_prims_get();
  static double t[2][AB_MAX_REPS];
  long c, nk, g, group, splits, h, s, sets, n;
  int reps, r, w;
  float *q, *o, *m, *l, *work, *k[16], *v[16];
  unsigned short *kh[16], *vh[16];
  char extra[80];
  ab_attend_fn old_attend;
  ab_attend_kv_fn old_attend_kv;
  int kv16;
  if (argc < 7 || argc > 9 || (argc == 9 && strcmp(argv[8], "f32") != 0 && strcmp(argv[8], "bf16") != 0)) {
    fprintf(stderr, "usage: ab_decode C NK KV_HEADS GROUP SPLITS REPS [SETS [f32|bf16]]\n");
    return 2;
  }
  kv16 = argc == 9 && strcmp(argv[8], "bf16") == 0;
  c = arg(argv[1], 1, 4096, "C"), nk = arg(argv[2], 1, 1L << 20, "NK"), g = arg(argv[3], 1, 256, "KV_HEADS");
  group = arg(argv[4], 1, 8, "GROUP"), splits = arg(argv[5], 1, 64, "SPLITS");
  reps = (int)arg(argv[6], 1, AB_MAX_REPS, "REPS"), sets = argc >= 8 ? arg(argv[7], 1, 16, "SETS") : 4;
  old_attend = ab_old_attend(P);
  old_attend_kv = ab_old_attend_kv(P);
  n = g * nk * c;
  q = floats(g * group * c, 1), o = floats(g * splits * group * c, 2);
  m = floats(g * splits * group, 3), l = floats(g * splits * group, 4), work = floats(P->attend_work(group, c), 5);
  for (s = 0; s < sets; s++) {
    k[s] = floats(n, 10 + (unsigned)s), v[s] = floats(n, 30 + (unsigned)s);
    kh[s] = vh[s] = NULL;
    if (kv16) { /* the bf16 copies in the f32 buffers' first halves (rounded, so both sides read the same values) */
      kh[s] = (unsigned short *)k[s], vh[s] = (unsigned short *)v[s];
      attnc_prims_narrow16_generic(0, k[s], kh[s], n);
      attnc_prims_narrow16_generic(0, v[s], vh[s], n);
    }
  }
  for (r = -2; r < reps; r++) /* two warm-ups */
    for (w = 0; w < 2; w++) {
      const int side = AB_SIDE(r, w);
      const long set = ((r + 2) * 2 + w) % sets;
      const double a = now();
      for (h = 0; h < g; h++)
        for (s = 0; s < splits; s++) {
          const long base = (h * splits + s) * group;
          attnc_tile tile;
          memset(&tile, 0, sizeof tile);
          tile.q = q + h * group * c, tile.q_stride = group * c, tile.q_hstride = c, tile.q_group = group;
          tile.k = k[set] + h * nk * c, tile.k_stride = c, tile.v = v[set] + h * nk * c, tile.v_stride = c;
          tile.o = o + base * c, tile.o_stride = group * c, tile.o_hstride = c;
          tile.rows = group, tile.i0 = 0, tile.c = c, tile.nk = nk;
          tile.k_begin = s * nk / splits, tile.k_end = (s + 1) * nk / splits;
          tile.scale = 0.125f, tile.m_out = m + base, tile.l_out = l + base, tile.work = work;
          if (kv16) {
            const long at = h * nk * c;
            if (side) P->attend_kv(&tile, ATTNC_KV_BF16_ROUND, kh[set] + at, NULL, vh[set] + at, NULL);
            else old_attend_kv(&tile, ATTNC_KV_BF16, kh[set] + at, NULL, vh[set] + at, NULL);
          } else if (side) {
            P->attend(&tile);
          } else {
            old_attend(&tile);
          }
        }
      if (r >= 0) t[side][r] = now() - a;
    }
  snprintf(extra, sizeof extra, " (k and v: %.1f MiB a set, %s)", 2.0 * (double)n * (kv16 ? 2 : 4) / (1 << 20),
           kv16 ? "bf16, attend_kv" : "f32");
  ab_report(t, reps, P->isa, 4.0 * (double)nk * (double)c * (double)(g * group), extra);
  return 0;
}
