/* Software prefetches of the attention's key and value rows, shared by
 * prims_avx2.c and prims_avx512.c (each includes it after <immintrin.h>).
 * Rows of a k or v with its heads side by side are H*c floats apart, too
 * far for the hardware prefetcher; contiguous rows it follows, but not
 * always a whole tile ahead. */
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
 * phase), whose queries then come from L2 and not from memory.  When
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
 * Into L2 (T1), not L1: when k and v stream from memory (decoding over
 * a long cache), requests into L1 queue behind one another and hold up
 * the loads; tiles already in cache lose nothing by it. */
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
