/* Training: train kernels' gradients against the float64 reference's
 * finite differences (checker_run in gradient mode) over the variants the
 * backward covers, on both backends and both kernel forms; and dropout's
 * rules on kernels: p = 0 is no dropout, the kept fraction is 1 - p
 * within 4 standard deviations, and the dropped weights are exactly the
 * reference's (ref_dropout_keeps), bit for bit, whatever the thread count.
 * A failing case prints its spec, seed, backend and form. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "checker.h"
#include "internal.h"
#include "reference.h"
#include "testutil.h"

/* Variants the way the model families use them; named dims take the
 * checker's default length (7), or S = 5 and R = 4 where set below. */
static const char *const GRAD_SPECS[] = {
  "mha x=B,S,16 heads=2 causal mask=key",
  "mha x=B,S,16 heads=2 causal mask=key dtype=f64",
  "alphafold x=B,S,16 heads=2 head_dim=4 gated bias=2,S,S mask=key dtype=f64",
  "alphafold x=2,3,5,12 attn_dim=-3 heads=2 head_dim=3 gated bias=2,2,3,3 mask=key qkv_bias=true dtype=f64",
  "mha x=2,5,24 kv=2,9,16 heads=4 mask=key dtype=f64",
  "gqa x=2,S,32 heads=4 kv_heads=2 rope=neox causal dtype=f64",
  "gqa x=2,S,32 heads=4 kv_heads=2 rope=gptj rope_dim=4 rope_theta=500000 dtype=f64",
  "mqa x=2,S,16 heads=4 causal=bottom_right window=2,1",
  "gqa x=2,S,32 heads=4 kv_heads=2 sinks window=2,0 mask=key dtype=f64",
  "mha x=2,S,24 heads=6 alibi softcap=5 causal dtype=f64",
  "mha x=2,S,16 heads=2 pe=sinusoidal mask=key dtype=f64",
  "alphafold x=S,R,12 attn_dim=-3 heads=3 head_dim=4 global global_mean=masked mask=key dtype=f64",
  "alphafold x=S,R,12 heads=2 head_dim=4 global dtype=f64",
  "mha mode=core q=2,4,5,8 kv=2,2,7,8 causal=bottom_right bias=4,5,7 dtype=f64",
  "mha mode=core layout=bshc q=2,5,4,8 kv=2,7,2,8 mask=key dtype=f64",
  "mha mode=core q=1,2,1,8 kv=1,1,S,8 causal=bottom_right",
  "mha x=2,S,16 heads=2 causal mask=key empty_rows=uniform dropout=0.3 dtype=f64",
  "mha x=2,S,16 heads=2 lse weights_out dropout=0.2 dtype=f64",
  "gqa x=2,S,32 heads=4 kv_heads=2 rope=neox causal dropout=0.1",
  "alphafold x=S,R,12 attn_dim=-3 heads=3 head_dim=4 global mask=key dropout=0.25 dtype=f64",
  "mha mode=core q=2,2,6,8 kv=2,2,6,8 causal dropout=0.5 dtype=f64",
  /* f32, whose fast backward takes the matmul primitive: the score
   * modifiers, and more than one tile of rows and of keys (with tails) */
  "mha mode=core q=2,4,5,8 kv=2,2,7,8 causal=bottom_right bias=4,5,7",
  "mha x=2,S,24 heads=6 alibi softcap=5 causal",
  "gqa x=2,S,32 heads=4 kv_heads=2 sinks window=2,0 mask=key",
  "alphafold x=S,R,12 attn_dim=-3 heads=3 head_dim=4 global global_mean=masked mask=key",
  "mha mode=core q=1,2,37,16 kv=1,1,77,16 causal=bottom_right",
  /* the fused pass's key chunks (more than 128 keys) with the bias gradient
   * owned per head (shared along the batch), per batch element, and by
   * one item (shared along the heads, GQA) */
  "alphafold x=2,2,150,8 heads=2 head_dim=4 gated bias=2,150,150 mask=key",
  "mha mode=core q=2,2,3,8 kv=2,2,150,8 bias=2,2,3,150 softcap=3",
  "gqa x=2,150,16 heads=4 kv_heads=2 bias=1,150,150 causal",
  /* float weights stored otherwise than dtype: held in dtype once bound */
  "mha x=2,S,16 heads=2 causal weights=bf16",
  "mha x=2,S,16 heads=2 mask=key dtype=f64 weights=f32",
  /* bf16 and f16: the backward computes in f32 on widened copies, and out
   * and the gradients are rounded to dtype (held to the looser of the f32
   * gradients' row and dtype's) */
  "mha x=2,S,16 heads=2 causal mask=key dtype=bf16",
  "gqa x=2,S,32 heads=4 kv_heads=2 rope=neox sinks window=2,0 dropout=0.1 dtype=bf16",
  "alphafold x=2,2,150,8 heads=2 head_dim=4 gated bias=2,150,150 mask=key dtype=bf16",
  "alphafold x=S,R,12 attn_dim=-3 heads=3 head_dim=4 global global_mean=masked mask=key dtype=bf16",
  "mha mode=core q=1,2,37,16 kv=1,1,77,16 causal=bottom_right dtype=bf16",
  "mha x=2,S,24 kv=2,9,16 heads=6 alibi softcap=5 pe=sinusoidal dtype=f16",
  "mha mode=core layout=bshc q=2,5,4,8 kv=2,7,2,8 mask=key lse weights_out dtype=f16",
};

struct tally {
  int cases, fails;
  double worst;
  char worst_case[512];
};

/* Does spec use the named dim (a shape's element: after '=' or ',', before
 * ',' or the end of the word)? */
static int names_dim(const char *spec, const char *name)
{
  const size_t n = strlen(name);
  for (const char *p = spec; (p = strstr(p, name)) != NULL; p++)
    if (p > spec && (p[-1] == '=' || p[-1] == ',') && (p[n] == ',' || p[n] == ' ' || p[n] == 0)) return 1;
  return 0;
}

static void one_grad(struct tally *t, const char *spec, attnc_backend be, attnc_form form, unsigned long seed)
{
  static const char *const names[] = { "S", "R", "B" };
  static const int64_t values[] = { 5, 4, 2 };
  checker_opts o;
  checker_result r;
  const char *bn = be == ATTNC_BACKEND_CC ? "cc" : "tcc", *fn = form == ATTNC_FORM_PLAIN ? "plain" : "fast";
  int nd = 0;
  memset(&o, 0, sizeof o);
  o.backend = be;
  o.form = form;
  o.seed = seed;
  o.grad = 1;
  o.dropout_seed = 0x9E3779B97F4A7C15ull * (seed + 1);
  /* only the dims the spec names */
  const char *use_names[3];
  int64_t use_values[3];
  for (int i = 0; i < 3; i++)
    if (names_dim(spec, names[i])) {
      use_names[nd] = names[i];
      use_values[nd++] = values[i];
    }
  o.dim_names = use_names;
  o.dim_values = use_values;
  o.ndims = nd;
  checker_run(spec, &o, &r);
  t->cases++;
  if (r.status != ATTNC_OK || !r.ok) {
    t->fails++;
    fprintf(stderr, "MISMATCH (%s, %s form, seed %lu): %s\n  %s\n", bn, fn, seed, spec,
            r.status != ATTNC_OK ? r.err.message : r.err.message[0] ? r.err.message : "(no message)");
    if (r.status == ATTNC_OK)
      for (int i = 0; i < r.n_grads; i++)
        if (r.grads[i].worst > 1)
          fprintf(stderr, "  grad.%s: %zu of %zu judged, max |err| %.3g, rms %.3g, %.3g of the bound, NMSE %.3g\n",
                  r.grads[i].name, r.grads[i].judged, r.grads[i].n, r.grads[i].max_abs, r.grads[i].rms, r.grads[i].worst,
                  r.grads[i].nmse);
    return;
  }
  if (r.n_grads == 0) {
    t->fails++;
    fprintf(stderr, "MISMATCH (%s, %s form, seed %lu): %s: no gradient judged\n", bn, fn, seed, spec);
    return;
  }
  if (r.worst_grad > t->worst) {
    t->worst = r.worst_grad;
    snprintf(t->worst_case, sizeof t->worst_case, "%s (grad.%s, max |err| %.3g, %s, %s form)", spec, r.grad_worst_name,
             r.max_grad_err, bn, fn);
  }
}

static void sweep(attnc_backend be, attnc_form form)
{
  struct tally t;
  memset(&t, 0, sizeof t);
  for (size_t i = 0; i < sizeof GRAD_SPECS / sizeof *GRAD_SPECS; i++) {
    struct tally ts;
    memset(&ts, 0, sizeof ts);
    for (unsigned long seed = 0; seed < 2; seed++) one_grad(&ts, GRAD_SPECS[i], be, form, seed);
    if (be == ATTNC_BACKEND_TCC && form == ATTNC_FORM_FAST) /* once: each spec's margin */
      printf("train: %.3g of the bound at worst: %s\n", ts.worst, ts.worst_case);
    t.cases += ts.cases;
    t.fails += ts.fails;
    if (ts.worst > t.worst) {
      t.worst = ts.worst;
      memcpy(t.worst_case, ts.worst_case, sizeof t.worst_case);
    }
  }
  printf("train: %d gradient checks on the %s backend, %s form, %d mismatches; the worst at %.3g of its bound: %s\n",
         t.cases, be == ATTNC_BACKEND_CC ? "cc" : "tcc", form == ATTNC_FORM_PLAIN ? "plain" : "fast", t.fails, t.worst,
         t.worst_case);
  assert_int_equal(t.fails, 0);
}

static void test_train_grad_tcc(void **state) { (void)state; sweep(ATTNC_BACKEND_TCC, ATTNC_FORM_FAST); }
static void test_train_grad_cc(void **state) { (void)state; sweep(ATTNC_BACKEND_CC, ATTNC_FORM_FAST); }
static void test_train_grad_plain_tcc(void **state) { (void)state; sweep(ATTNC_BACKEND_TCC, ATTNC_FORM_PLAIN); }

/* A spec without train is compiled with it in gradient mode, and a
 * spec that cannot train is refused with the spec's own error. */
static void test_train_grad_adds_train(void **state)
{
  (void)state;
  checker_opts o;
  checker_result r;
  memset(&o, 0, sizeof o);
  o.backend = ATTNC_BACKEND_TCC;
  o.grad = 1;
  assert_true(checker_run("mha x=2,4,8 heads=2 dtype=f64  # a comment to the end", &o, &r));
  assert_non_null(strstr(r.canonical, "train=true"));
  assert_true(r.n_grads > 0 && r.n_grad > 0);
  assert_false(checker_run("mha x=2,4,8 heads=2 weights=int8", &o, &r));
  assert_int_equal(r.status, ATTNC_ESPEC);
  assert_non_null(strstr(r.err.message, "train"));
}

/* check --grad of spec on tcc with one seed: fails the test with the checker's message */
static void grad_ok(const char *spec, unsigned long seed)
{
  checker_opts o;
  checker_result r;
  memset(&o, 0, sizeof o);
  o.backend = ATTNC_BACKEND_TCC;
  o.grad = 1;
  o.seed = seed;
  if (!checker_run(spec, &o, &r)) fail_msg("%s seed %lu: %s", spec, seed, r.err.message);
}

/* With one key per row (Sq = Sk = 1) the softmax is 1 whatever the logits,
 * so q's and k's projections have gradients that are exactly 0: judged on
 * a borrowed scale by the elementwise bound, not by an NMSE against 0
 * that no rounding could meet. */
static void test_train_grad_one_key(void **state)
{
  static const char *const specs[] = {
    "mha x=1,8 heads=2 train",
    "mha x=3,1,8 heads=2 mask=key causal train",
    /* a bias of one number per row (Sk dim 1) is such a constant too */
    "mode=core q=3,8,3 kv=1,8,3 bias=3,8,1 causal train dropout=0.25 dtype=f64",
  };
  (void)state;
  for (int i = 0; i < 3; i++)
    for (unsigned long seed = 0; seed < 4; seed++) grad_ok(specs[i], seed);
}


/* empty_rows=nan: a row that sees no key is NaN in out, and the backward
 * lets that NaN reach the gradients it feeds (dv of its keys, the output
 * projection's weight), as PyTorch's backward through an all -inf softmax
 * does.  The checker judges the gradients' numbers and lets those NaNs be;
 * these seeds draw key masks that leave some rows empty (the checker
 * refused them before). */
static void test_train_grad_nan_rows(void **state)
{
  static const struct { const char *spec; unsigned long seed; } cases[] = {
    { "mha x=2,3,8 kv=2,1,8 heads=1 mask=key empty_rows=nan train", 1 },
    { "mode=core q=1,1,2,1 kv=1,1,1,1 mask=key empty_rows=nan train", 341 },
  };
  (void)state;
  for (int i = 0; i < 2; i++) grad_ok(cases[i].spec, cases[i].seed);
}

/* A bias whose strides name a run-time dim (bias=..,S,S): the backward's
 * forward pass on the attend primitive reads those strides, so it must
 * declare the named dims as the other passes do (tcc refused the code). */
static void test_train_grad_named_bias(void **state)
{
  static const char *const specs[] = {
    "mode=core q=1,2,S,1 bias=1,2,S,S train",
    "mha x=S,3,4 attn_dim=-3 heads=4 head_dim=8 bias=3,4,S,S causal train",
    "mode=core q=B,2,S,4 bias=B,2,S,S mask=key train dropout=0.25",
  };
  static const char *const names[] = { "S", "B" };
  static const int64_t values[] = { 7, 2 };
  (void)state;
  for (int i = 0; i < 3; i++)
    for (int be = 0; be < 2; be++) {
      checker_opts o;
      checker_result r;
      memset(&o, 0, sizeof o);
      o.backend = be ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC;
      o.grad = 1;
      o.seed = (unsigned long)i;
      o.dim_names = names;
      o.dim_values = values;
      o.ndims = i == 2 ? 2 : 1;
      if (!checker_run(specs[i], &o, &r)) fail_msg("%s [%s]: %s", specs[i], be ? "cc" : "tcc", r.err.message);
    }
}
/* ---- dropout on kernels ------------------------------------------------ */

/* q = k = 0 gives every visible key the weight 1/Sk, and v = the identity
 * (head dim c = Sk) makes out[.., i, d] = key d's weight after dropout:
 * 1/(Sk (1-p)) or exactly 0, so out shows the mask (weights_out holds the
 * probabilities before dropout, as DESIGN.md says).  Runs spec (core mode,
 * q (B,H,Sq,c), kv (B,H,Sk,c)) forward with seed and returns out as F32
 * (malloc'd), its count in *n. */
static float *dropout_weights(const char *spec, attnc_backend be, int threads, uint64_t seed, size_t *n)
{
  attnc_options ko = { be, 0, "spec", ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *k = attnc_compile(spec, &ko, &e);
  attnc_bindings *b;
  attnc_tensor q, kk, vv, out;
  float *zeros, *eye, *w;
  size_t nq = 1, nk = 1;
  long Sk, c;
  if (!k) fprintf(stderr, "%s: %s\n", spec, e.message);
  assert_non_null(k);
  b = attnc_bindings_new(k);
  assert_non_null(b);
  assert_int_equal(attnc_bindings_set_threads(b, threads, &e), ATTNC_OK);
  assert_int_equal(attnc_bindings_set_seed(b, seed, &e), ATTNC_OK);
  memset(&q, 0, sizeof q);
  memset(&kk, 0, sizeof kk);
  {
    const attnc_gen *g = attnc_kernel_gen(k);
    q.dtype = kk.dtype = ATTNC_F32;
    q.rank = kk.rank = g->shape[ATTNC_SLOT_Q].rank;
    for (int a = 0; a < q.rank; a++) {
      nq *= (size_t)(q.shape[a] = g->shape[ATTNC_SLOT_Q].dim[a]);
      nk *= (size_t)(kk.shape[a] = g->shape[ATTNC_SLOT_K].dim[a]);
    }
  }
  Sk = (long)kk.shape[kk.rank - 2];
  c = (long)kk.shape[kk.rank - 1];
  assert_int_equal(Sk, c); /* v = the identity needs c = Sk */
  zeros = calloc(nq > nk ? nq : nk, sizeof *zeros);
  eye = calloc(nk, sizeof *eye);
  assert_non_null(zeros);
  assert_non_null(eye);
  for (size_t x = 0; x < nk; x++) eye[x] = (x / (size_t)c) % (size_t)Sk == x % (size_t)c ? 1.0f : 0.0f;
  q.data = zeros;
  kk.data = zeros;
  vv = kk;
  vv.data = eye;
  assert_int_equal(attnc_bind(b, "q", &q, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "k", &kk, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "v", &vv, &e), ATTNC_OK);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
  w = malloc(nq * sizeof *w);
  assert_non_null(w);
  out.data = w;
  if (attnc_run(b, &out, &e) != ATTNC_OK) fprintf(stderr, "%s: %s\n", spec, e.message);
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  free(zeros);
  free(eye);
  attnc_bindings_free(b);
  attnc_release(k);
  *n = nq;
  return w;
}

/* On 65536 weights (B 2, H 4, Sq 32, Sk 256): the dropped ones are exactly
 * where ref_dropout_keeps says, on both backends and 1 and 2 threads; the
 * kept fraction is 1 - p within 4 standard deviations; a kept weight is
 * 1/(Sk (1-p)). */
static void test_train_dropout_mask(void **state)
{
  (void)state;
  static const char spec[] = "mha mode=core q=2,4,32,256 kv=2,4,256,256 train dropout=0.3";
  const uint64_t seed = 0xDEADBEEF12345678ull;
  const double p = 0.3, kept_w = 1.0 / (256 * (1 - p));
  for (int be = 0; be < 2; be++)
    for (int threads = 1; threads <= 2; threads++) {
      size_t n, differ = 0, kept = 0, e = 0;
      float *w = dropout_weights(spec, be ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC, threads, seed, &n);
      assert_int_equal(n, 2 * 4 * 32 * 256);
      for (long b = 0; b < 2; b++)
        for (long h = 0; h < 4; h++)
          for (long i = 0; i < 32; i++)
            for (long j = 0; j < 256; j++, e++) {
              const int keep = ref_dropout_keeps(p, seed, b, h, i, j);
              differ += (w[e] != 0) != keep;
              kept += keep;
              if (keep && fabs(w[e] - kept_w) > 1e-6 * kept_w) fail_msg("weight %zu is %.9g, want %.9g", e, w[e], kept_w);
            }
      const double mean = n * (1 - p), sd = sqrt(n * p * (1 - p));
      if (be == 0 && threads == 1)
        printf("dropout %.1f: %zu of %zu kept (%.4f; 4 sigma is %.4f), every dropped weight where the reference drops it\n",
               p, kept, n, kept / (double)n, 4 * sd / n);
      assert_int_equal(differ, 0);
      assert_true(fabs(kept - mean) < 4 * sd);
      free(w);
    }
}

/* dropout=0 is the kernel without dropout (the same canonical spec), and
 * its output does not depend on the seed; with p > 0 another seed drops
 * other keys. */
static void test_train_dropout_zero(void **state)
{
  (void)state;
  attnc_options ko = { ATTNC_BACKEND_TCC, 0, "spec", ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *k0 = attnc_compile("mha mode=core q=1,2,8,16 kv=1,2,16,16 train dropout=0", &ko, &e);
  attnc_kernel *k1 = attnc_compile("mha mode=core q=1,2,8,16 kv=1,2,16,16 train", &ko, &e);
  size_t n0, n1, n2, n3;
  float *w0, *w1, *w2, *w3;
  assert_non_null(k0);
  assert_non_null(k1);
  assert_string_equal(attnc_canonical(k0), attnc_canonical(k1));
  attnc_release(k0);
  attnc_release(k1);
  w0 = dropout_weights("mha mode=core q=1,2,8,16 kv=1,2,16,16 train dropout=0", ATTNC_BACKEND_TCC, 1, 1, &n0);
  w1 = dropout_weights("mha mode=core q=1,2,8,16 kv=1,2,16,16 train dropout=0", ATTNC_BACKEND_CC, 2, 2, &n1);
  w2 = dropout_weights("mha mode=core q=1,2,8,16 kv=1,2,16,16", ATTNC_BACKEND_TCC, 1, 0, &n2);
  assert_int_equal(n0, n1);
  assert_int_equal(n0, n2);
  for (size_t j = 0; j < n0; j++) {
    assert_true(w0[j] == 1.0f / 16);
    assert_true(w1[j] == w0[j] && w2[j] == w0[j]);
  }
  free(w1);
  free(w2);
  /* p > 0: seeds 1 and 2 disagree somewhere, seed 1 twice agrees everywhere */
  w1 = dropout_weights("mha mode=core q=1,2,8,16 kv=1,2,16,16 train dropout=0.5", ATTNC_BACKEND_TCC, 1, 1, &n1);
  w2 = dropout_weights("mha mode=core q=1,2,8,16 kv=1,2,16,16 train dropout=0.5", ATTNC_BACKEND_CC, 2, 1, &n2);
  w3 = dropout_weights("mha mode=core q=1,2,8,16 kv=1,2,16,16 train dropout=0.5", ATTNC_BACKEND_TCC, 1, 2, &n3);
  assert_memory_equal(w1, w2, n1 * sizeof *w1);
  assert_true(memcmp(w1, w3, n1 * sizeof *w1) != 0);
  free(w0);
  free(w1);
  free(w2);
  free(w3);
}

/* The fast form's backward spreads its passes over the bindings' threads;
 * every item writes only its own outputs in an order the shapes fix, so
 * out and every gradient must be the same bits for 1, 2 and 3 threads
 * (a broadcast pair bias, GQA with rope and sinks, dropout, core bshc, core
 * in the heads' layout with a bias, over tiles of rows and keys with tails;
 * a bias shared along the heads or the batch over several key chunks;
 * global attention, sinusoidal encoding).  The calls after the first
 * also find the backward's buffers, which the bindings keep, holding the
 * first call's values: a buffer the backward read before writing would
 * change the bits. */
static void test_train_same_bits_any_threads(void **state)
{
  static const char *const specs[] = {
    "alphafold x=2,3,40,16 heads=2 head_dim=8 gated bias=2,1,2,40,40 mask=key train dropout=0.2",
    "gqa x=2,70,32 heads=4 kv_heads=2 rope=neox causal sinks train dropout=0.1",
    "mha mode=core q=2,33,4,8 kv=2,65,2,8 layout=bshc mask=key softcap=4 train",
    "mha mode=core q=2,4,37,16 kv=2,2,77,16 causal=bottom_right bias=4,37,77 train",
    "gqa x=2,150,16 heads=4 kv_heads=2 bias=1,150,150 causal train",
    "alphafold x=2,2,150,8 heads=2 head_dim=4 gated bias=2,150,150 mask=key train dropout=0.1",
    "alphafold x=2,3,40,16 heads=2 head_dim=8 gated global mask=key train",
    "mha x=2,70,16 kv=2,33,8 heads=2 pe=sinusoidal mask=key train",
    "mha x=2,70,16 heads=2 pe=sinusoidal causal train",
  };
  (void)state;
  for (size_t sp = 0; sp < sizeof specs / sizeof specs[0]; sp++)
    for (int be = 0; be < 2; be++) {
      attnc_options ko = { 0 };
      attnc_error e;
      attnc_kernel *k;
      attnc_bindings *b;
      checker_opts o;
      checker_inputs *in;
      attnc_tensor out, dout;
      float *first[32] = { 0 }, *out1 = NULL;
      size_t nfirst[32] = { 0 }, n_out = 1;
      ko.backend = be ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC;
      k = attnc_compile(specs[sp], &ko, &e);
      if (!k) fail_msg("%s: %s", specs[sp], e.message);
      b = attnc_bindings_new(k);
      memset(&o, 0, sizeof o);
      o.seed = 5 + sp;
      in = checker_bind_random(k, b, &o, &e);
      if (!in) fail_msg("%s: %s", specs[sp], e.message);
      assert_int_equal(attnc_bindings_set_seed(b, 1234567 + sp, &e), ATTNC_OK);
      assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
      for (int a = 0; a < out.rank; a++) n_out *= (size_t)out.shape[a];
      out.data = malloc(n_out * sizeof(float));
      dout = out;
      dout.data = malloc(n_out * sizeof(float));
      assert_non_null(out.data);
      assert_non_null(dout.data);
      for (size_t i = 0; i < n_out; i++) ((float *)dout.data)[i] = (float)sin(0.37 * (double)i + 0.1);
      for (int threads = 1; threads <= 3; threads++) {
        const char *name;
        assert_int_equal(attnc_bindings_set_threads(b, threads, &e), ATTNC_OK);
        if (attnc_grad(b, &out, &dout, &e) != ATTNC_OK) fail_msg("%s: %s", specs[sp], e.message);
        if (threads == 1) {
          out1 = malloc(n_out * sizeof(float));
          assert_non_null(out1);
          memcpy(out1, out.data, n_out * sizeof(float));
        } else if (memcmp(out1, out.data, n_out * sizeof(float)) != 0) {
          fail_msg("%s [%s]: out differs between 1 and %d threads", specs[sp], be ? "cc" : "tcc", threads);
        }
        for (int i = 0; (name = attnc_grad_name(b, i)) != NULL; i++) {
          attnc_tensor g;
          size_t n = 1;
          assert_true(i < 32);
          assert_int_equal(attnc_grad_get(b, name, &g, &e), ATTNC_OK);
          for (int a = 0; a < g.rank; a++) n *= (size_t)g.shape[a];
          if (threads == 1) {
            first[i] = malloc(n * sizeof(float));
            assert_non_null(first[i]);
            memcpy(first[i], g.data, n * sizeof(float));
            nfirst[i] = n;
          } else if (n != nfirst[i] || memcmp(first[i], g.data, n * sizeof(float)) != 0) {
            fail_msg("%s [%s]: grad.%s differs between 1 and %d threads", specs[sp], be ? "cc" : "tcc", name, threads);
          }
        }
      }
      printf("%s [%s]: out and every gradient the same bits on 1, 2 and 3 threads\n", specs[sp], be ? "cc" : "tcc");
      for (int i = 0; i < 32; i++) free(first[i]);
      free(out1);
      free(out.data);
      free(dout.data);
      checker_inputs_free(in);
      attnc_bindings_free(b);
      attnc_release(k);
    }
}

/* A bf16 train kernel keeps two packings of its weights on one set of
 * bindings: bf16 panels for the forward (attnc_run), f32 panels for the
 * backward (attnc_grad).  Runs and gradients alternate: each run gives the
 * same bits as the first; the backward's out (f32 arithmetic, rounded
 * once) is the run's to within bf16's bound; and every gradient is the f32
 * kernel's, on the same bf16 tensors, rounded to bf16 (within one bf16
 * step and the two f32 kernels' differences). */
static void test_train_bf16_run_grad_run(void **state)
{
  const char *spec = "gqa x=2,70,64 heads=4 kv_heads=2 causal mask=key train dtype=bf16";
  attnc_options ko = { ATTNC_BACKEND_CC, 2, "bf16_run_grad_run", ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *k = attnc_compile(spec, &ko, &e);
  attnc_bindings *b;
  checker_opts o;
  checker_inputs *in;
  attnc_tensor out, dout, g;
  size_t n = 1, ng = 0;
  unsigned char *run1, *grad1 = NULL;
  double worst = 0, top = 0;
  (void)state;
  if (!k) fail_msg("%s: %s", spec, e.message);
  b = attnc_bindings_new(k);
  assert_non_null(b);
  memset(&o, 0, sizeof o);
  o.seed = 21;
  in = checker_bind_random(k, b, &o, &e);
  if (!in) fail_msg("%s: %s", spec, e.message);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
  assert_int_equal(out.dtype, ATTNC_BF16);
  for (int a = 0; a < out.rank; a++) n *= (size_t)out.shape[a];
  out.data = malloc(2 * n);
  run1 = malloc(2 * n);
  dout = out;
  dout.data = malloc(2 * n);
  assert_non_null(out.data);
  assert_non_null(run1);
  assert_non_null(dout.data);
  for (size_t i = 0; i < n; i++) {
    const float v = (float)sin(0.37 * (double)i + 0.1);
    attnc_convert(&v, ATTNC_F32, (uint16_t *)dout.data + i, ATTNC_BF16, 1);
  }
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  memcpy(run1, out.data, 2 * n);
  /* the f32 kernel of the same spec, on the same bf16 tensors (converted at bind) */
  {
    attnc_kernel *k32 = attnc_compile("gqa x=2,70,64 heads=4 kv_heads=2 causal mask=key train", &ko, &e);
    attnc_bindings *b32;
    attnc_tensor out32 = out;
    if (!k32) fail_msg("%s", e.message);
    b32 = attnc_bindings_new(k32);
    assert_non_null(b32);
    for (int slot = 0; slot < ATTNC_SLOT_COUNT; slot++)
      if (b->k->gen.used[slot] && b->from[slot] && attnc_bind(b32, b->from[slot], &b->t[slot], &e) != ATTNC_OK)
        fail_msg("binding %s to the f32 kernel: %s", b->from[slot], e.message);
    out32.dtype = ATTNC_F32;
    out32.data = malloc(4 * n);
    assert_non_null(out32.data);
    assert_int_equal(attnc_grad(b32, &out32, &dout, &e), ATTNC_OK);
    assert_int_equal(attnc_grad(b, &out, &dout, &e), ATTNC_OK);
    for (int i = 0; attnc_grad_name(b32, i); i++) {
      const char *name = attnc_grad_name(b32, i);
      attnc_tensor g16, g32;
      size_t m = 1, bad = 0;
      assert_int_equal(attnc_grad_get(b32, name, &g32, &e), ATTNC_OK);
      if (attnc_grad_get(b, name, &g16, &e) != ATTNC_OK) fail_msg("no bf16 gradient of %s: %s", name, e.message);
      for (int a = 0; a < g32.rank; a++) m *= (size_t)g32.shape[a];
      for (size_t j = 0; j < m; j++) {
        float h;
        const float w = ((const float *)g32.data)[j];
        attnc_convert((const uint16_t *)g16.data + j, ATTNC_BF16, &h, ATTNC_F32, 1);
        if (!(fabs((double)h - w) <= 0x1p-8 * fabs((double)w) + 1e-6)) bad++;
      }
      if (bad) fail_msg("grad.%s: %zu of %zu values are not the f32 kernel's rounded to bf16", name, bad, m);
    }
    free(out32.data);
    attnc_bindings_free(b32);
    attnc_release(k32);
  }
  for (int round = 0; round < 2; round++) {
    assert_int_equal(attnc_grad(b, &out, &dout, &e), ATTNC_OK);
    for (size_t i = 0; i < n; i++) {
      float a, c;
      attnc_convert((const uint16_t *)run1 + i, ATTNC_BF16, &a, ATTNC_F32, 1);
      attnc_convert((const uint16_t *)out.data + i, ATTNC_BF16, &c, ATTNC_F32, 1);
      worst = fmax(worst, fabs((double)a - c));
      top = fmax(top, fabs((double)a));
    }
    assert_non_null(attnc_grad_name(b, 0));
    assert_int_equal(attnc_grad_get(b, attnc_grad_name(b, 0), &g, &e), ATTNC_OK);
    assert_int_equal(g.dtype, ATTNC_BF16);
    if (round == 0) {
      ng = 1;
      for (int a = 0; a < g.rank; a++) ng *= (size_t)g.shape[a];
      grad1 = malloc(2 * ng);
      assert_non_null(grad1);
      memcpy(grad1, g.data, 2 * ng);
    } else if (memcmp(grad1, g.data, 2 * ng) != 0) {
      fail_msg("grad.%s differs between two attnc_grad calls with a run between them", attnc_grad_name(b, 0));
    }
    assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
    if (memcmp(run1, out.data, 2 * n) != 0) fail_msg("attnc_run after attnc_grad differs from the first run");
  }
  printf("bf16 run, grad, run: every gradient the f32 kernel's rounded; runs and gradients repeat bit for bit; the backward's out within %.3g of the run's "
         "(largest |out| %.3g)\n", worst, top);
  assert_true(top > 0 && worst <= 0.03 * top);
  free(out.data);
  free(dout.data);
  free(run1);
  free(grad1);
  checker_inputs_free(in);
  attnc_bindings_free(b);
  attnc_release(k);
}

/* The backward as a program built ahead of time calls it: the kernel's
 * NAME_backward on an attnc_args of its own, with no primitives, no
 * threads and no grad_work (the fast form then allocates its buffers, and
 * a 16-bit kernel its f32 copies).  Its gradients are attnc_grad's (which
 * gives it all three) to within the f32 kernels' differences, and for a
 * 16-bit kernel one step of dtype. */
static void test_train_backward_called_directly(void **state)
{
  static const char *const specs[] = {
    "mha x=2,40,32 heads=2 causal mask=key train",
    "mha x=2,40,32 heads=2 causal mask=key train dtype=bf16",
    "alphafold x=2,3,20,16 heads=2 gated bias=2,2,20,20 mask=key train dtype=f16",
    "mha mode=core q=2,2,30,16 kv=2,1,40,16 causal=bottom_right train dtype=bf16",
  };
  (void)state;
  for (size_t sp = 0; sp < sizeof specs / sizeof specs[0]; sp++) {
    attnc_options ko = { ATTNC_BACKEND_CC, 2, "direct", ATTNC_FORM_FAST };
    attnc_error e;
    attnc_kernel *k = attnc_compile(specs[sp], &ko, &e);
    attnc_bindings *b;
    checker_opts o;
    checker_inputs *in;
    attnc_tensor out, dout;
    attnc_args a;
    long dims[64];
    size_t n = 1, es, compared = 0;
    double worst = 0;
    if (!k) fail_msg("%s: %s", specs[sp], e.message);
    b = attnc_bindings_new(k);
    assert_non_null(b);
    memset(&o, 0, sizeof o);
    o.seed = 31 + sp;
    in = checker_bind_random(k, b, &o, &e);
    if (!in) fail_msg("%s: %s", specs[sp], e.message);
    assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
    es = attnc_dtype_size(out.dtype);
    for (int i = 0; i < out.rank; i++) n *= (size_t)out.shape[i];
    out.data = malloc(n * es);
    dout = out;
    dout.data = malloc(n * es);
    assert_non_null(out.data);
    assert_non_null(dout.data);
    for (size_t i = 0; i < n; i++) {
      const double v = sin(0.37 * (double)i + 0.1);
      attnc_convert(&v, ATTNC_F64, (char *)dout.data + i * es, out.dtype, 1);
    }
    assert_int_equal(attnc_grad(b, &out, &dout, &e), ATTNC_OK);

    memset(&a, 0, sizeof a);
    for (int i = 0; i < k->gen.ndims && i < 64; i++) dims[i] = (long)b->dims[i];
    a.dims = dims;
    for (int slot = 0; slot < ATTNC_SLOT_COUNT; slot++)
      if (k->gen.used[slot] && b->from[slot]) a.t[slot] = b->t[slot].data;
    if (k->gen.has_mask) {
      a.t[ATTNC_SLOT_MASK] = b->mask_u8;
      memcpy(a.mask_stride, b->mask_stride, sizeof a.mask_stride);
    }
    a.out = malloc(n * es);
    a.dout = dout.data;
    a.nthreads = 1;
    assert_non_null(a.out);
    for (int slot = 0; slot < ATTNC_SLOT_COUNT; slot++)
      if (b->grad[slot]) {
        a.grad[slot] = malloc(b->grad_n[slot] * es + 1);
        assert_non_null(a.grad[slot]);
      }
    assert_int_equal(k->fns.backward(&a), 0);
    /* one scale for all: k's bias has a gradient of exactly 0 but for rounding */
    double top = 0;
    for (int slot = 0; slot < ATTNC_SLOT_COUNT; slot++)
      for (size_t j = 0; a.grad[slot] && j < b->grad_n[slot]; j++) {
        double w;
        attnc_convert((char *)b->grad[slot] + j * es, out.dtype, &w, ATTNC_F64, 1);
        top = fmax(top, fabs(w));
      }
    for (int slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
      if (!a.grad[slot]) continue;
      for (size_t j = 0; j < b->grad_n[slot]; j++) {
        double w, g;
        attnc_convert((char *)b->grad[slot] + j * es, out.dtype, &w, ATTNC_F64, 1);
        attnc_convert((char *)a.grad[slot] + j * es, out.dtype, &g, ATTNC_F64, 1);
        /* f32: the primitives' sums against C loops'; 16 bits: and one step of dtype apart */
        const double tol = (out.dtype == ATTNC_F32 ? 1e-5 : out.dtype == ATTNC_BF16 ? 0x1p-7 : 0x1p-10) * fabs(w) + 1e-5 * top;
        if (!(fabs(g - w) <= tol))
          fail_msg("%s: the direct call's gradient of slot %d element %zu is %.9g, attnc_grad's %.9g", specs[sp], slot, j, g, w);
        worst = fmax(worst, fabs(g - w) / (top > 0 ? top : 1));
        compared++;
      }
      free(a.grad[slot]);
    }
    printf("%s: NAME_backward called directly (no primitives, threads or grad_work): %zu gradient values, within %.3g "
           "of attnc_grad's (relative to the largest gradient value)\n", specs[sp], compared, worst);
    assert_true(compared > 0);
    free(a.out);
    free(out.data);
    free(dout.data);
    checker_inputs_free(in);
    attnc_bindings_free(b);
    attnc_release(k);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_train_grad_adds_train),
    cmocka_unit_test(test_train_grad_one_key),
    cmocka_unit_test(test_train_grad_named_bias),
    cmocka_unit_test(test_train_grad_nan_rows),
    cmocka_unit_test(test_train_dropout_zero),
    cmocka_unit_test(test_train_dropout_mask),
    cmocka_unit_test(test_train_grad_tcc),
    cmocka_unit_test(test_train_grad_cc),
    cmocka_unit_test(test_train_grad_plain_tcc),
    cmocka_unit_test(test_train_same_bits_any_threads),
    cmocka_unit_test(test_train_bf16_run_grad_run),
    cmocka_unit_test(test_train_backward_called_directly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
