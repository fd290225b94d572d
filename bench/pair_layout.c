/* pair_layout: a core spec in layout=bhsc against the same spec in
 * layout=bshc, their runs alternated in one process (which goes first
 * swaps every pair), so that both see the machine in the same state.
 * Issue 27 asks that bshc be no slower; the suite's bench times the two
 * one after the other, which on a shared machine compares the minutes as
 * much as the layouts.
 *
 *     pair_layout B S H G C PAIRS [EXTRA]
 *
 * B batch elements, S positions, H query heads, G kv heads, head_dim C;
 * EXTRA (one argument: "causal", "causal sinks") is added to both specs.
 * cc backend, 2 threads (ATTNC_THREADS overrides).  Prints each median
 * and the median and quartiles of the per-pair ratios bshc / bhsc (above
 * 1: bshc is slower).  PAIR_HUGE=1 puts the tensors on 2 MiB pages
 * (madvise MADV_HUGEPAGE; the kernel's transparent huge pages must be
 * `always` or `madvise`), to split what the pages cost from the rest. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "attnc.h"

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double quantile(double *v, int n, double f)
{
  qsort(v, (size_t)n, sizeof *v, cmp);
  return v[(int)(f * (n - 1) + 0.5)];
}

static float *floats(long n)
{
  const size_t huge = (size_t)2 << 20, bytes = ((size_t)n * sizeof(float) + huge - 1) / huge * huge;
  void *p = NULL;
  if (!getenv("PAIR_HUGE") || strcmp(getenv("PAIR_HUGE"), "1") != 0) return malloc((size_t)n * sizeof(float));
  if (posix_memalign(&p, huge, bytes) != 0) return NULL;
  if (madvise(p, bytes, MADV_HUGEPAGE) != 0) perror("pair_layout: madvise");
  return p;
}

static attnc_tensor t4(long a, long b, long c, long d, void *data)
{
  attnc_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = ATTNC_F32;
  t.rank = 4;
  t.shape[0] = a, t.shape[1] = b, t.shape[2] = c, t.shape[3] = d;
  t.data = data;
  return t;
}

/* one side: its kernel, bindings, inputs and output */
typedef struct side {
  attnc_kernel *k;
  attnc_bindings *b;
  attnc_tensor out;
} side;

static int make_side(side *s, int bshc, long B, long S, long H, long G, long C, const char *extra, float *q, float *kv,
                     float *o)
{
  char spec[512];
  attnc_options opt;
  attnc_error e;
  attnc_tensor tq, tk;
  memset(&opt, 0, sizeof opt);
  opt.backend = ATTNC_BACKEND_CC;
  opt.threads = getenv("ATTNC_THREADS") ? atoi(getenv("ATTNC_THREADS")) : 2;
  if (bshc) {
    snprintf(spec, sizeof spec, "mha mode=core q=%ld,%ld,%ld,%ld kv=%ld,%ld,%ld,%ld layout=bshc %s", B, S, H, C, B, S, G, C,
             extra);
    tq = t4(B, S, H, C, q), tk = t4(B, S, G, C, kv), s->out = t4(B, S, H, C, o);
  } else {
    snprintf(spec, sizeof spec, "mha mode=core q=%ld,%ld,%ld,%ld kv=%ld,%ld,%ld,%ld %s", B, H, S, C, B, G, S, C, extra);
    tq = t4(B, H, S, C, q), tk = t4(B, G, S, C, kv), s->out = t4(B, H, S, C, o);
  }
  s->k = attnc_compile(spec, &opt, &e);
  if (!s->k) {
    fprintf(stderr, "pair_layout: %s: %s\n", spec, e.message);
    return 0;
  }
  s->b = attnc_bindings_new(s->k);
  if (!s->b || attnc_bind(s->b, "q", &tq, &e) != ATTNC_OK || attnc_bind(s->b, "k", &tk, &e) != ATTNC_OK ||
      attnc_bind(s->b, "v", &tk, &e) != ATTNC_OK) {
    fprintf(stderr, "pair_layout: binding %s: %s\n", spec, s->b ? e.message : "out of memory");
    return 0;
  }
  printf("%s: %s\n", bshc ? "bshc" : "bhsc", attnc_canonical(s->k));
  return 1;
}

static double time_run(side *s)
{
  attnc_error e;
  const double t0 = now_ms();
  if (attnc_run(s->b, &s->out, &e) != ATTNC_OK) {
    fprintf(stderr, "pair_layout: %s\n", e.message);
    exit(1);
  }
  return now_ms() - t0;
}

int main(int argc, char **argv)
{
  long B, S, H, G, C, nq, nkv, i;
  int pairs, p;
  float *q, *kv, *o[2];
  double *t[2], *ratio;
  side sd[2];
  if (argc < 7 || argc > 8) {
    fprintf(stderr, "usage: pair_layout B S H G C PAIRS [EXTRA]\n");
    return 2;
  }
  B = atol(argv[1]), S = atol(argv[2]), H = atol(argv[3]), G = atol(argv[4]), C = atol(argv[5]), pairs = atoi(argv[6]);
  if (B < 1 || S < 1 || H < 1 || G < 1 || C < 1 || pairs < 1 || H % G) {
    fprintf(stderr, "pair_layout: B, S, H, G, C and PAIRS must be positive, and G must divide H\n");
    return 2;
  }
  nq = B * S * H * C, nkv = B * S * G * C;
  q = floats(nq), kv = floats(nkv), o[0] = floats(nq), o[1] = floats(nq);
  t[0] = malloc((size_t)pairs * sizeof(double)), t[1] = malloc((size_t)pairs * sizeof(double));
  ratio = malloc((size_t)pairs * sizeof(double));
  if (!q || !kv || !o[0] || !o[1] || !t[0] || !t[1] || !ratio) return 1;
  for (i = 0; i < nq; i++) q[i] = (float)((i * 7919 % 1000) - 500) / 1000.0f;
  for (i = 0; i < nkv; i++) kv[i] = (float)((i * 104729 % 1000) - 500) / 1000.0f;
  for (p = 0; p < 2; p++)
    if (!make_side(&sd[p], p, B, S, H, G, C, argc > 7 ? argv[7] : "", q, kv, o[p])) return 1;
  for (p = 0; p < 5; p++) time_run(&sd[0]), time_run(&sd[1]); /* warm-up: threads on their cores, pages mapped */
  for (p = 0; p < pairs; p++) {
    const int first = p & 1;
    t[first][p] = time_run(&sd[first]);
    t[!first][p] = time_run(&sd[!first]);
    ratio[p] = t[1][p] / t[0][p];
  }
  {
    const double q1 = quantile(ratio, pairs, 0.25), med = quantile(ratio, pairs, 0.5), q3 = quantile(ratio, pairs, 0.75);
    const double m0 = quantile(t[0], pairs, 0.5), m1 = quantile(t[1], pairs, 0.5);
    printf("%d pairs: bhsc median %.3f ms, bshc median %.3f ms; bshc / bhsc per pair: median %.4f (quartiles %.4f-%.4f)\n",
           pairs, m0, m1, med, q1, q3);
  }
  for (p = 0; p < 2; p++) attnc_bindings_free(sd[p].b), attnc_release(sd[p].k);
  free(q), free(kv), free(o[0]), free(o[1]), free(t[0]), free(t[1]), free(ratio);
  return 0;
}
