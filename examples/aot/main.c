/* An ahead-of-time attnc kernel in a plain C program.
 *
 * The kernel comes from specs/gpt_decoder.attn (GPT-2 style causal decoder
 * self-attention with a padding mask: x=B,S,768 heads=12 causal mask=key):
 *
 *     attnc gen @specs/gpt_decoder.attn -o DIR     ->  DIR/gpt_decoder.c, DIR/gpt_decoder.h
 *     cc -std=c99 -O2 -IDIR main.c DIR/gpt_decoder.c -lm
 *
 * Nothing else is linked: no attnc library, no Lua, no tcc.
 *
 * The program fills the attnc_args of the generated header (named dims B and
 * S, weights in PyTorch's Linear layout (out, in), a key mask), runs the
 * kernel, prints a checksum, and checks properties that hold exactly, bit
 * for bit, without a reference implementation:
 *   1. all q/k/v/o weights and q/k/v biases zero: out equals the output bias
 *      in every row (also in a row whose only key is masked out);
 *   2. determinism: the same inputs give the same bits twice;
 *   3. causality: changing the last token of sequence 0 changes only its own
 *      output row; every earlier row and the whole of sequence 1 stay put;
 *   4. the key mask: changing a masked token of sequence 1 changes only its
 *      own row (no query sees it as a key); unmasking it changes later rows.
 * Exit status 0 when every check passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_decoder.h"

/* Sizes.  768 is fixed by the spec (the generated header lists every
 * tensor's shape); B and S are chosen here, at run time. */
enum { C_IN = 768, HC = 768 }; /* model width; heads * head_dim = 12 * 64 */
#define N_B 2L                 /* sequences in the batch */
#define N_S 7L                 /* tokens per sequence */
#define MASKED_KEY 4L          /* a padded position of sequence 1 */

static int failures;

static void check(int ok, const char *what)
{
  printf("  %-68s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) failures++;
}

/* Deterministic values in [-amp, amp): a hash of (index, salt), quantised
 * to multiples of 1/1024 so every platform sees the same floats. */
static float value(unsigned long i, unsigned long salt, float amp)
{
  unsigned long h = (i + 1) * 2654435761UL ^ (salt + 1) * 40503UL;
  h ^= h >> 13;
  h *= 0x5bd1e995UL;
  h ^= h >> 15;
  return amp * (float)((long)(h % 2048UL) - 1024) / 1024.0f;
}

static void fill(float *p, size_t n, unsigned long salt, float amp)
{
  size_t i;
  for (i = 0; i < n; i++) p[i] = value((unsigned long)i, salt, amp);
}

static float *alloc_floats(size_t n)
{
  float *p = calloc(n, sizeof *p);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* Row r of a (B*S, C_IN) tensor. */
static const float *row(const float *t, long b, long s) { return t + (size_t)(b * N_S + s) * C_IN; }

static int rows_equal(const float *a, const float *b, long bi, long s)
{
  return memcmp(row(a, bi, s), row(b, bi, s), sizeof(float) * C_IN) == 0;
}

static int run(const attnc_args *args)
{
  int rc = gpt_decoder_run(args);
  if (rc != 0) {
    fprintf(stderr, "gpt_decoder_run failed (%d): out of memory for scratch\n", rc);
    exit(2);
  }
  return rc;
}

int main(void)
{
  const long dims[GPT_DECODER_NDIMS] = { N_B, N_S }; /* in gpt_decoder_dim_names order: B, S */
  const size_t n_x = (size_t)(N_B * N_S) * C_IN, n_w = (size_t)HC * C_IN;
  float *x = alloc_floats(n_x), *out = alloc_floats(n_x), *out2 = alloc_floats(n_x);
  float *wq = alloc_floats(n_w), *wk = alloc_floats(n_w), *wv = alloc_floats(n_w), *wo = alloc_floats(n_w);
  float *bq = alloc_floats(HC), *bk = alloc_floats(HC), *bv = alloc_floats(HC), *bo = alloc_floats(C_IN);
  unsigned char mask[N_B * N_S];
  attnc_args args;
  double checksum = 0, sum_abs = 0;
  long b, s;
  int i, same, all;
  size_t k;

  printf("kernel: %s\n", gpt_decoder_spec);
  printf("dims:   %s=%ld %s=%ld\n", gpt_decoder_dim_names[0], dims[0], gpt_decoder_dim_names[1], dims[1]);

  /* Key mask (B, S): nonzero keeps the key.  Sequence 0 hides its first
   * token (so query 0 sees no key at all: a zero attention output);
   * sequence 1 hides MASKED_KEY. */
  for (b = 0; b < N_B; b++)
    for (s = 0; s < N_S; s++) mask[b * N_S + s] = 1;
  mask[0 * N_S + 0] = 0;
  mask[1 * N_S + MASKED_KEY] = 0;

  memset(&args, 0, sizeof args);
  args.dims = dims;
  gpt_decoder_mask_strides(dims, args.mask_stride); /* a dense (B, S) mask */
  args.t[ATTNC_SLOT_X] = x;
  args.t[ATTNC_SLOT_MASK] = mask;
  args.t[ATTNC_SLOT_WQ] = wq; args.t[ATTNC_SLOT_BQ] = bq;
  args.t[ATTNC_SLOT_WK] = wk; args.t[ATTNC_SLOT_BK] = bk;
  args.t[ATTNC_SLOT_WV] = wv; args.t[ATTNC_SLOT_BV] = bv;
  args.t[ATTNC_SLOT_WO] = wo; args.t[ATTNC_SLOT_BO] = bo;
  args.out = out;

  /* 1. Zero projections: out = o Wo^T + bo = bo exactly. */
  fill(x, n_x, 1, 1.0f);
  fill(bo, C_IN, 2, 0.5f);
  run(&args);
  all = 1;
  for (b = 0; b < N_B; b++)
    for (s = 0; s < N_S; s++) all &= memcmp(row(out, b, s), bo, sizeof(float) * C_IN) == 0;
  check(all, "zero q/k/v/o weights: out == output bias in every row");

  /* Deterministic weights, scaled like PyTorch's Linear init (1/sqrt(in)). */
  fill(wq, n_w, 10, 1.0f / 27.7f); fill(bq, HC, 11, 0.05f);
  fill(wk, n_w, 12, 1.0f / 27.7f); fill(bk, HC, 13, 0.05f);
  fill(wv, n_w, 14, 1.0f / 27.7f); fill(bv, HC, 15, 0.05f);
  fill(wo, n_w, 16, 1.0f / 27.7f); fill(bo, C_IN, 17, 0.05f);
  run(&args);
  for (k = 0; k < n_x; k++) {
    checksum += out[k] * (double)((k % 7) + 1); /* position-weighted: catches swapped rows */
    sum_abs += fabs(out[k]);
  }
  printf("checksum: %.6e   mean |out|: %.6e\n", checksum, sum_abs / (double)n_x);
  for (k = 0, all = 1; k < n_x; k++) all &= isfinite(out[k]) != 0;
  check(all, "every output is finite");

  /* 2. Determinism. */
  args.out = out2;
  run(&args);
  check(memcmp(out, out2, sizeof(float) * n_x) == 0, "a second run gives the same bits");

  /* 3. Causality: perturb the last token of sequence 0. */
  for (i = 0; i < C_IN; i++) x[(size_t)(0 * N_S + N_S - 1) * C_IN + (size_t)i] += 0.25f;
  run(&args);
  for (s = 0, same = 1; s < N_S - 1; s++) same &= rows_equal(out, out2, 0, s);
  check(same, "causal: earlier rows of sequence 0 unchanged by its last token");
  check(!rows_equal(out, out2, 0, N_S - 1), "causal: the last row of sequence 0 did change");
  for (s = 0, same = 1; s < N_S; s++) same &= rows_equal(out, out2, 1, s);
  check(same, "batch: sequence 1 unchanged by a token of sequence 0");
  memcpy(out, out2, sizeof(float) * n_x); /* the new baseline */

  /* 4. Key mask: perturb the masked token of sequence 1. */
  for (i = 0; i < C_IN; i++) x[(size_t)(1 * N_S + MASKED_KEY) * C_IN + (size_t)i] -= 0.25f;
  run(&args);
  for (s = 0, same = 1; s < N_S; s++)
    if (s != MASKED_KEY) same &= rows_equal(out, out2, 1, s);
  check(same, "mask: no row of sequence 1 sees its masked token");
  check(!rows_equal(out, out2, 1, MASKED_KEY), "mask: the masked token's own query row did change");
  mask[1 * N_S + MASKED_KEY] = 1;
  memcpy(out, out2, sizeof(float) * n_x);
  run(&args);
  check(!rows_equal(out, out2, 1, N_S - 1), "mask: unmasking it changes a later row");

  free(x); free(out); free(out2);
  free(wq); free(wk); free(wv); free(wo);
  free(bq); free(bk); free(bv); free(bo);
  if (failures) {
    printf("self-check: %d FAILED\n", failures);
    return 1;
  }
  printf("self-check: all passed\n");
  return 0;
}
