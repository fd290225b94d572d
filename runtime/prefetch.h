/* Software prefetches of the attention's key and value rows, shared by
 * prims_avx2.c and prims_avx512.c (each includes it after <immintrin.h>).
 * Rows of a projected k or v are H*c floats apart, too far for the
 * hardware prefetcher; contiguous ones it follows, but on a Zen 5 one
 * tile's worth of them still came late (bench/ab_attend.sh ... 32 heads). */
#ifndef ATTNC_PREFETCH_H
#define ATTNC_PREFETCH_H

#include "prims.h"

/* Rows [j0, j1) of a (rows stride floats apart, c floats each), all at
 * once: for a tile's first keys.  The q.k loops ask for the next tile a
 * few rows at a time as they go (prefetch_next): a burst of a whole tile
 * overflows the queues. */
static inline void attnc_prefetch_rows(const float *a, long stride, long j0, long j1, long c)
{
  long j, d;
  for (j = j0; j < j1; j++)
    for (d = 0; d < c; d += 16) _mm_prefetch((const char *)(a + j * stride + d), _MM_HINT_T0);
}

/* The next key tile to prefetch during this one's q.k: n rows of k and v
 * (n = 0: none). */
typedef struct { const float *k, *v; long k_stride, v_stride, n, c; } next_tile;

/* After the last key tile: the next query tile's rows, as the two halves
 * of a next_tile, when the tile's rows are consecutive positions
 * of one head (q_group 1) and at least 16.  A thread's next item is most
 * often the tile just after this one (each owns a contiguous share of a
 * phase), whose queries then come from L2 and not from memory:
 * `bench/ab_attend.sh HEAD 64 512 0 30 32` (32 heads from memory)
 * 0.971-0.990 of the time, AVX2 0.955-0.970; one head in cache 0.998-1.003.
 * End to end on Zen 4 at 2 threads (alternating builds): core B
 * 0.977-0.990 in four sets, core C 1.000, full B 0.989 and 1.015,
 * AlphaFold E 0.979, 1.042 and 1.021 as the machine slowed (its fused
 * item's attention step alone 0.985 over five alternating pairs).  When
 * the guess is wrong (the last tile of a head or batch element) the
 * lines are only unused. */
static inline next_tile attnc_next_queries(const attnc_tile *t)
{
  const long half = (t->rows + 1) / 2;
  next_tile nx = { t->q, t->q, t->q_stride, t->q_stride, 0, t->c };
  if (t->q_group == 1 && t->rows >= 16) {
    nx.k = t->q + t->rows * t->q_stride;
    nx.v = nx.k + half * t->q_stride;
    nx.n = half;
  }
  return nx;
}

/* What the q.k loop of the key tile at j0 (of ATTNC_ATTEND_KT keys, the
 * last ending at jmax) of tile t asks for: the next key tile (none when
 * `on` is 0); after the last one, the next query tile. */
static inline next_tile attnc_next_tile(const attnc_tile *t, long j0, long jmax, int on)
{
  const long j1 = j0 + ATTNC_ATTEND_KT, left = jmax + 1 - j1;
  const long n = on && left > 0 ? (left < ATTNC_ATTEND_KT ? left : ATTNC_ATTEND_KT) : 0;
  const next_tile nx = { n ? t->k + j1 * t->k_stride : t->k, n ? t->v + j1 * t->v_stride : t->v, t->k_stride, t->v_stride, n, t->c };
  return left > 0 ? nx : attnc_next_queries(t);
}

/* Rows [j0, j1) of the next tile's k and v, the lines of one key's k
 * and v side by side: the q.k loop asks for a few with each block of keys.
 * Into L2 (T1), not L1: decoding from memory (4 rows, 4096 keys of 128,
 * 32 MiB of k and v), T0's requests waited on one another, and decode D
 * end to end took 0.50-0.68 of the time with T1 (Zen 4, 2 threads,
 * alternating builds; bench/ab_decode.sh 0.76-1.01 from memory, AVX2
 * 0.91-0.92).  Tiles in cache (core B, AlphaFold E's heads) read the
 * same within noise (bench/ab_attend.sh 0.99-1.01). */
static inline __attribute__((always_inline)) void prefetch_next(const next_tile *nx, long j0, long j1)
{
  long j, d;
  if (j1 > nx->n) j1 = nx->n;
  for (j = j0; j < j1; j++)
    for (d = 0; d < nx->c; d += 16) {
      _mm_prefetch((const char *)(nx->k + j * nx->k_stride + d), _MM_HINT_T1);
      _mm_prefetch((const char *)(nx->v + j * nx->v_stride + d), _MM_HINT_T1);
    }
}

#endif
