/* prims_bench: the primitives alone, on one thread, in cache: what share
 * of the FMA peak (build/fma_peak 1) each reaches, without a kernel,
 * threads or phases around it.
 *
 *     build/prims_bench linear ROWS N_IN N_OUT [REPS]
 *         y = x W^T for ROWS rows, W packed as the kernels pack it
 *     build/prims_bench attend ROWS C NK STRIDE [REPS]
 *         one head: NK query rows in tiles of ROWS, against NK keys and
 *         values of C floats whose rows are STRIDE floats apart (C: one
 *         contiguous block per head; H*C: heads side by side, as in a
 *         caller's (..., H*C) k and v)
 *     build/prims_bench attend_kv ROWS C NK [REPS]
 *         a decoding step's tile: ROWS query heads of one kv head (GQA)
 *         against NK keys and values stored as bf16, through the table's
 *         attend_kv, three ways, their repetitions alternated: a bf16
 *         kernel's (ATTNC_KV_BF16_ROUND) with q all bf16 values (core mode
 *         without rope), the same with an f32 q (a projection's or a
 *         rotation's), and an f32 kernel's (ATTNC_KV_BF16: k and v
 *         widened to f32)
 *
 * Prints one JSON line: the ISA (ATTNC_ISA caps it, as for the library),
 * the best and the median of REPS timed repetitions (default 20, after
 * one warm-up) and GFLOP/s of the best (2 FLOPs a multiply-add; attend
 * counts q.k and p.v).  Tensors come from posix_memalign (64 bytes). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prims.h"

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static float *alloc_floats(long n)
{
  void *p = NULL;
  if (n < 1) n = 1;
  if (posix_memalign(&p, 64, sizeof(float) * (size_t)n) != 0) {
    fprintf(stderr, "prims_bench: out of memory (%ld floats)\n", n);
    exit(1);
  }
  return p;
}

static void fill(float *p, long n, unsigned seed)
{
  long i;
  for (i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

static long arg(const char *s, const char *what)
{
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == 0 || *end != 0 || v < 1 || v > (1L << 24)) {
    fprintf(stderr, "prims_bench: %s must be a whole number from 1 to %ld, got '%s'\n", what, 1L << 24, s);
    exit(2);
  }
  return v;
}

static int cmp_double(const void *a, const void *b)
{
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *what, const double *t, int reps, double flops)
{
  double *s = malloc(sizeof(double) * (size_t)reps);
  if (!s) exit(1);
  memcpy(s, t, sizeof(double) * (size_t)reps);
  qsort(s, (size_t)reps, sizeof(double), cmp_double);
  printf("{\"what\": \"%s\", \"isa\": \"%s\", \"best_ms\": %.4f, \"median_ms\": %.4f, \"gflops\": %.1f}\n", what,
         attnc_prims_get()->isa, s[0] * 1e3, s[reps / 2] * 1e3, flops / s[0] * 1e-9);
  free(s);
}

static void usage(void)
{
  fprintf(stderr, "usage: prims_bench linear ROWS N_IN N_OUT [REPS]\n"
                  "       prims_bench attend ROWS C NK STRIDE [REPS]\n"
                  "       prims_bench attend_kv ROWS C NK [REPS]\n");
  exit(2);
}

int main(int argc, char **argv)
{
  const attnc_prims *P = attnc_prims_get();
  double t[1000];
  char what[200];
  int reps, r;
  if (argc < 2) usage();
  if (strcmp(argv[1], "linear") == 0) {
    long rows, n_in, n_out;
    float *x, *w, *packed, *y;
    if (argc != 5 && argc != 6) usage();
    rows = arg(argv[2], "ROWS"), n_in = arg(argv[3], "N_IN"), n_out = arg(argv[4], "N_OUT");
    reps = argc == 6 ? (int)arg(argv[5], "REPS") : 20;
    if (reps > 1000) reps = 1000;
    x = alloc_floats(rows * n_in), w = alloc_floats(n_out * n_in);
    packed = alloc_floats(attnc_prims_pack_size(n_out, n_in)), y = alloc_floats(rows * n_out);
    fill(x, rows * n_in, 1);
    fill(w, n_out * n_in, 2);
    attnc_prims_pack(w, n_out, n_in, packed);
    P->linear(x, rows, n_in, n_in, packed, n_out, NULL, y, n_out);
    for (r = 0; r < reps; r++) {
      const double a = now();
      P->linear(x, rows, n_in, n_in, packed, n_out, NULL, y, n_out);
      t[r] = now() - a;
    }
    snprintf(what, sizeof what, "linear %ldx%ldx%ld", rows, n_in, n_out);
    report(what, t, reps, 2.0 * rows * n_in * n_out);
    free(x), free(w), free(packed), free(y);
  } else if (strcmp(argv[1], "attend") == 0) {
    long rows, c, nk, stride, i0;
    float *q, *k, *v, *o, *work;
    if (argc != 6 && argc != 7) usage();
    rows = arg(argv[2], "ROWS"), c = arg(argv[3], "C"), nk = arg(argv[4], "NK"), stride = arg(argv[5], "STRIDE");
    reps = argc == 7 ? (int)arg(argv[6], "REPS") : 20;
    if (reps > 1000) reps = 1000;
    if (stride < c) {
      fprintf(stderr, "prims_bench: STRIDE (%ld) must be at least C (%ld)\n", stride, c);
      return 2;
    }
    q = alloc_floats(nk * stride), k = alloc_floats(nk * stride), v = alloc_floats(nk * stride);
    o = alloc_floats(nk * stride), work = alloc_floats(P->attend_work(rows, c));
    fill(q, nk * stride, 3);
    fill(k, nk * stride, 4);
    fill(v, nk * stride, 5);
    for (r = -1; r < reps; r++) { /* r = -1: the warm-up */
      const double a = now();
      for (i0 = 0; i0 < nk; i0 += rows) {
        attnc_tile tile;
        memset(&tile, 0, sizeof tile);
        tile.q = q + i0 * stride, tile.q_stride = stride, tile.q_hstride = c, tile.q_group = 1;
        tile.k = k, tile.k_stride = stride, tile.v = v, tile.v_stride = stride;
        tile.o = o + i0 * stride, tile.o_stride = stride, tile.o_hstride = c;
        tile.rows = nk - i0 < rows ? nk - i0 : rows, tile.i0 = i0, tile.c = c;
        tile.nk = nk, tile.k_begin = 0, tile.k_end = nk, tile.scale = 0.125f, tile.work = work;
        P->attend(&tile);
      }
      if (r >= 0) t[r] = now() - a;
    }
    snprintf(what, sizeof what, "attend rows=%ld c=%ld nk=%ld stride=%ld", rows, c, nk, stride);
    report(what, t, reps, 4.0 * nk * nk * c);
    free(q), free(k), free(v), free(o), free(work);
  } else if (strcmp(argv[1], "attend_kv") == 0) {
    static const char *const how[3] = { "bf16 kernel, q bf16", "bf16 kernel, q f32", "f32 kernel" };
    static double tk[3][1000];
    long rows, c, nk, n;
    float *q, *qb, *o, *work, *f;
    unsigned short *k, *v;
    int w;
    if (argc != 5 && argc != 6) usage();
    rows = arg(argv[2], "ROWS"), c = arg(argv[3], "C"), nk = arg(argv[4], "NK");
    reps = argc == 6 ? (int)arg(argv[5], "REPS") : 20;
    if (reps > 1000) reps = 1000;
    q = alloc_floats(rows * c), qb = alloc_floats(rows * c), o = alloc_floats(rows * c);
    work = alloc_floats(P->attend_work(rows, c)), f = alloc_floats(nk * c);
    k = (unsigned short *)alloc_floats((nk * c + 1) / 2), v = (unsigned short *)alloc_floats((nk * c + 1) / 2);
    fill(q, rows * c, 3);
    memcpy(qb, q, sizeof(float) * (size_t)(rows * c));
    attnc_prims_narrow16_generic(0, q, (unsigned short *)o, rows * c); /* qb: q rounded to bf16 */
    attnc_prims_widen16_generic(0, (unsigned short *)o, qb, rows * c);
    for (n = 0; n < 2; n++) {
      fill(f, nk * c, 4 + (unsigned)n);
      attnc_prims_narrow16_generic(0, f, n ? v : k, nk * c);
    }
    for (r = -1; r < reps; r++) /* r = -1: the warm-up */
      for (w = 0; w < 3; w++) {
        attnc_tile tile;
        double a;
        memset(&tile, 0, sizeof tile);
        tile.q = w == 0 ? qb : q, tile.q_stride = rows * c, tile.q_hstride = c, tile.q_group = rows;
        tile.k_stride = c, tile.v_stride = c;
        tile.o = o, tile.o_stride = rows * c, tile.o_hstride = c;
        tile.rows = rows, tile.i0 = 0, tile.c = c;
        tile.nk = nk, tile.k_begin = 0, tile.k_end = nk, tile.scale = 0.125f, tile.work = work;
        a = now();
        P->attend_kv(&tile, w < 2 ? ATTNC_KV_BF16_ROUND : ATTNC_KV_BF16, k, NULL, v, NULL);
        if (r >= 0) tk[w][r] = now() - a;
      }
    for (w = 0; w < 3; w++) {
      snprintf(what, sizeof what, "attend_kv rows=%ld c=%ld nk=%ld, %s", rows, c, nk, how[w]);
      report(what, tk[w], reps, 4.0 * rows * nk * c);
    }
    free(q), free(qb), free(o), free(work), free(f), free(k), free(v);
  } else {
    usage();
  }
  return 0;
}
