/* Training with ahead-of-time kernels: a bf16 attention layer's gradients
 * in a plain C program, checked against an f64 kernel of the same spec.
 *
 * Both kernels come from spec files beside this one, which differ only in
 * dtype (GQA, causal, RoPE, dropout 0.1, train):
 *
 *     attnc gen @layer_bf16.attn -o DIR    ->  DIR/layer_bf16.c, .h
 *     attnc gen @layer_f64.attn -o DIR     ->  DIR/layer_f64.c, .h
 *     cc -std=c99 -O2 -IDIR main.c DIR/layer_bf16.c DIR/layer_f64.c -lm -lpthread
 *
 * Nothing else is linked: no attnc library, no Lua, no tcc.  The program
 * draws every tensor as bf16 values (so the two kernels see the same
 * numbers), runs each kernel's NAME_backward, and checks:
 *   1. the f64 kernel's gradients against central finite differences of
 *      its own forward (NAME_run): the backward is the forward's gradient;
 *   2. the bf16 kernel's out and gradients against the f64 kernel's, within
 *      DESIGN.md's bf16 row (NMSE at most 1e-4, every element within
 *      0.03 * rms + 0.03 * |r|), the dropout mask being the same in both
 *      (it depends only on the seed and the indices);
 *   3. the bf16 backward twice, once on the calling thread and once with
 *      its items spread over two threads (args.parallel): the same bits.
 * Exit status 0 when every check passes. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_bf16.h"
#include "layer_f64.h"

#define SEED 0x123456789abcdefULL /* the dropout seed, past 2^32 on purpose */

/* The tensors the layer reads, with their element counts (the generated
 * headers list the shapes) and the range their values are drawn from. */
static const struct {
  int slot;
  const char *name;
  long n;
  float amp;
} TENSORS[] = {
  { ATTNC_SLOT_X, "x", 2L * 12 * 32, 1.0f },
  { ATTNC_SLOT_WQ, "q_proj.weight", 32L * 32, 0.3f },
  { ATTNC_SLOT_BQ, "q_proj.bias", 32, 0.1f },
  { ATTNC_SLOT_WK, "k_proj.weight", 16L * 32, 0.3f },
  { ATTNC_SLOT_BK, "k_proj.bias", 16, 0.1f },
  { ATTNC_SLOT_WV, "v_proj.weight", 16L * 32, 0.3f },
  { ATTNC_SLOT_BV, "v_proj.bias", 16, 0.1f },
  { ATTNC_SLOT_WO, "o_proj.weight", 32L * 32, 0.3f },
  { ATTNC_SLOT_BO, "o_proj.bias", 32, 0.1f },
};
#define N_TENSORS (sizeof TENSORS / sizeof *TENSORS)
#define N_OUT (2L * 12 * 32)

static int failures;

static void check(int ok, const char *what)
{
  printf("  %-70s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) failures++;
}

static void *alloc(size_t n)
{
  void *p = calloc(n, 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* bf16 is the top half of an f32: round to nearest, ties to even (the
 * values here are finite), and widen back exactly. */
static unsigned short to_bf16(float f)
{
  unsigned int u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

static float from_bf16(unsigned short h)
{
  unsigned int u = (unsigned int)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Deterministic values in [-amp, amp): a hash of (index, salt). */
static float value(unsigned long i, unsigned long salt, float amp)
{
  unsigned long h = (i + 1) * 2654435761UL ^ (salt + 1) * 40503UL;
  h ^= h >> 13;
  h *= 0x5bd1e995UL;
  h ^= h >> 15;
  return amp * (float)((long)(h % 2048UL) - 1024) / 1024.0f;
}

/* The same bf16 values twice: as bits for the bf16 kernel, as doubles for
 * the f64 one. */
static void fill(unsigned short *h, double *d, long n, unsigned long salt, float amp)
{
  long i;
  for (i = 0; i < n; i++) {
    h[i] = to_bf16(value((unsigned long)i, salt, amp));
    d[i] = from_bf16(h[i]);
  }
}

/* args.parallel: fn(ctx, item) for every item, on the calling thread and
 * one more, each taking the next item from a shared counter. */
struct job {
  void (*fn)(void *ctx, long item);
  void *ctx;
  long items, next;
  pthread_mutex_t lock;
};

static void *take_items(void *arg)
{
  struct job *j = arg;
  for (;;) {
    long item;
    pthread_mutex_lock(&j->lock);
    item = j->next++;
    pthread_mutex_unlock(&j->lock);
    if (item >= j->items) return NULL;
    j->fn(j->ctx, item);
  }
}

static void two_threads(void *pool, long items, void (*fn)(void *ctx, long item), void *ctx)
{
  struct job j;
  pthread_t t;
  int started;
  (void)pool;
  j.fn = fn;
  j.ctx = ctx;
  j.items = items;
  j.next = 0;
  pthread_mutex_init(&j.lock, NULL);
  started = pthread_create(&t, NULL, take_items, &j) == 0;
  take_items(&j); /* if the thread could not start, the caller takes every item */
  if (started) pthread_join(t, NULL);
  pthread_mutex_destroy(&j.lock);
}

/* sum(out * dout) of the f64 kernel's forward: the loss whose gradient
 * NAME_backward computes. */
static double loss_f64(const attnc_args *a, const double *dout)
{
  const double *out = a->out;
  double s = 0;
  long i;
  if (layer_f64_run(a) != 0) {
    fprintf(stderr, "layer_f64_run: out of memory\n");
    exit(2);
  }
  for (i = 0; i < N_OUT; i++) s += out[i] * dout[i];
  return s;
}

/* Check 2 for one tensor: got (bf16 bits) against ref (f64). */
static void within_bf16_row(const char *name, const unsigned short *got, const double *ref, long n)
{
  double ss_err = 0, ss_ref = 0, rms, worst = 0;
  char what[128];
  long i;
  for (i = 0; i < n; i++) {
    const double e = from_bf16(got[i]) - ref[i];
    ss_err += e * e;
    ss_ref += ref[i] * ref[i];
  }
  rms = sqrt(ss_ref / n);
  for (i = 0; i < n; i++) {
    const double bound = 0.03 * rms + 0.03 * fabs(ref[i]), e = fabs(from_bf16(got[i]) - ref[i]);
    const double r = bound > 0 ? e / bound : (e == 0 ? 0 : INFINITY);
    if (!(r <= worst)) worst = r; /* a NaN stays, and fails the check */
  }
  snprintf(what, sizeof what, "%-18s NMSE %.2e (<= 1e-4), worst element %.3f of its bound", name,
           ss_ref > 0 ? ss_err / ss_ref : ss_err, worst);
  check(ss_err <= 1e-4 * ss_ref && worst <= 1.0, what);
}

int main(void)
{
  attnc_args a64, a16;
  unsigned short *h[N_TENSORS], *g16[N_TENSORS], *again[N_TENSORS], *dout16, *out16, *out16b;
  double *d[N_TENSORS], *g64[N_TENSORS], *dout64, *out64;
  size_t k;
  int same = 1;

  memset(&a64, 0, sizeof a64);
  memset(&a16, 0, sizeof a16);
  for (k = 0; k < N_TENSORS; k++) {
    const long n = TENSORS[k].n;
    h[k] = alloc(n * sizeof **h);
    g16[k] = alloc(n * sizeof **g16);
    again[k] = alloc(n * sizeof **again);
    d[k] = alloc(n * sizeof **d);
    g64[k] = alloc(n * sizeof **g64);
    fill(h[k], d[k], n, k + 1, TENSORS[k].amp);
    a16.t[TENSORS[k].slot] = h[k];
    a16.grad[TENSORS[k].slot] = g16[k];
    a64.t[TENSORS[k].slot] = d[k];
    a64.grad[TENSORS[k].slot] = g64[k];
  }
  dout16 = alloc(N_OUT * sizeof *dout16);
  out16 = alloc(N_OUT * sizeof *out16);
  out16b = alloc(N_OUT * sizeof *out16b);
  dout64 = alloc(N_OUT * sizeof *dout64);
  out64 = alloc(N_OUT * sizeof *out64);
  fill(dout16, dout64, N_OUT, 99, 1.0f);
  a16.out = out16;
  a16.dout = dout16;
  a16.seed = SEED;
  a64.out = out64;
  a64.dout = dout64;
  a64.seed = SEED;

  printf("%s\n%s\n", layer_bf16_spec, layer_f64_spec);
  if (layer_f64_backward(&a64) != 0 || layer_bf16_backward(&a16) != 0) {
    fprintf(stderr, "NAME_backward: out of memory\n");
    return 2;
  }

  printf("1. f64 gradients against central finite differences of layer_f64_run\n");
  for (k = 0; k < N_TENSORS; k++) {
    const long n = TENSORS[k].n;
    double worst = 0, ss = 0;
    char what[128];
    long probe;
    for (probe = 0; probe < n; probe++) ss += g64[k][probe] * g64[k][probe];
    for (probe = 0; probe < 3; probe++) {
      const long at = (probe * 7919L + 13L * (long)k) % n;
      const double keep = d[k][at], step = 1e-6, scale = sqrt(ss / n);
      double up, down, fd;
      d[k][at] = keep + step;
      up = loss_f64(&a64, dout64);
      d[k][at] = keep - step;
      down = loss_f64(&a64, dout64);
      d[k][at] = keep;
      fd = (up - down) / (2 * step);
      if (fabs(g64[k][at] - fd) / (1e-6 * (scale + fabs(fd))) > worst)
        worst = fabs(g64[k][at] - fd) / (1e-6 * (scale + fabs(fd)));
    }
    snprintf(what, sizeof what, "grad %-14s  3 entries, worst %.3f of 1e-6 * (rms + |fd|)", TENSORS[k].name, worst);
    check(worst <= 1.0, what);
  }

  printf("2. bf16 out and gradients against the f64 kernel's, on the same bf16 inputs\n");
  loss_f64(&a64, dout64); /* out64 from the unperturbed inputs: the f64 reference for out */
  within_bf16_row("out", out16, out64, N_OUT);
  for (k = 0; k < N_TENSORS; k++) {
    char name[64];
    snprintf(name, sizeof name, "grad.%s", TENSORS[k].name);
    within_bf16_row(name, g16[k], g64[k], TENSORS[k].n);
  }

  printf("3. bf16 backward on two threads (args.parallel): the same bits\n");
  for (k = 0; k < N_TENSORS; k++) a16.grad[TENSORS[k].slot] = again[k];
  a16.out = out16b;
  a16.parallel = two_threads;
  if (layer_bf16_backward(&a16) != 0) {
    fprintf(stderr, "layer_bf16_backward: out of memory\n");
    return 2;
  }
  same = memcmp(out16, out16b, N_OUT * sizeof *out16) == 0;
  for (k = 0; k < N_TENSORS; k++) same = same && memcmp(g16[k], again[k], TENSORS[k].n * sizeof **g16) == 0;
  check(same, "out and every gradient, bit for bit");

  for (k = 0; k < N_TENSORS; k++) {
    free(h[k]);
    free(g16[k]);
    free(again[k]);
    free(d[k]);
    free(g64[k]);
  }
  free(dout16);
  free(out16);
  free(out16b);
  free(dout64);
  free(out64);
  if (failures) {
    printf("aot training example: %d check(s) FAILED\n", failures);
    return 1;
  }
  printf("aot training example: all checks passed\n");
  return 0;
}
