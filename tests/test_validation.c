/* Run-time validation and limits: every bad input is a clear error (status
 * and a message naming the tensor, axis and sizes), never a crash or a
 * silent wrong answer.
 *
 *   - shape, rank and dtype mismatches, a missing weight, a named dim bound
 *     to two sizes, through attnc_bind / attnc_output_shape / attnc_run;
 *   - misaligned pointers: data offset by one element runs and gives the
 *     aligned run's exact bits; data offset by one byte is refused;
 *   - malformed safetensors through attnc_st_from_memory and through
 *     `attnc run` (exit status 1..127, "error" on stderr, no crash);
 *   - extra tensors in a checkpoint are ignored;
 *   - NaN and Inf inputs propagate to exactly the outputs that depend on
 *     them (the rest are bit-identical to a clean run), without crashing;
 *   - limits: overflowing products, zero/negative dims, absurd head_dim,
 *     duplicate keys (spec side), and tensors or scratch too large to
 *     exist (run side) are refused by name -- in a child process whose
 *     address space is capped, so that nothing can allocate in proportion
 *     to a bogus number before it is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "reference.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define assert_contains(text, word)                                           \
  do {                                                                        \
    const char *t_ = (text), *w_ = (word);                                    \
    if (!strstr(t_, w_)) fail_msg("message \"%s\" lacks \"%s\"", t_, w_);     \
  } while (0)

/* Expect status `want` and a message holding every word (NULL-terminated). */
static void expect_err(attnc_status got, const attnc_error *e, attnc_status want, const char *const *words)
{
  int i;
  if (got != want)
    fail_msg("status %d (%s), expected %d (%s); message: %s", (int)got, attnc_strerror(got), (int)want,
             attnc_strerror(want), e->message);
  assert_int_equal(e->code, want);
  for (i = 0; words[i]; i++) assert_contains(e->message, words[i]);
}
#define EXPECT_ERR(call, e, want, ...) expect_err((call), (e), (want), (const char *const[]){ __VA_ARGS__, NULL })

/* ------------------------------------------------------------------ */
/* A problem: a compiled kernel, random tensors for every slot it uses,  */
/* bound under the AlphaFold names, and the float64 reference.          */

static const char *const WEIGHT_NAMES[] = {
  "linear_q.weight", "linear_q.bias", "linear_k.weight", "linear_k.bias", "linear_v.weight", "linear_v.bias",
  "linear_g.weight", "linear_g.bias", "linear_o.weight", "linear_o.bias"
};

static const char *slot_bind_name(int slot)
{
  return attnc_slot_is_weight(slot) ? WEIGHT_NAMES[slot - ATTNC_SLOT_WQ] : attnc_slot_name(slot);
}

typedef struct prob {
  attnc_kernel *k;
  attnc_bindings *b;
  const attnc_gen *g;
  attnc_tensor t[ATTNC_SLOT_COUNT];
  void *raw[ATTNC_SLOT_COUNT];      /* malloc'd blocks behind t[].data */
  double *ref[ATTNC_SLOT_COUNT];    /* the same values as doubles */
  int64_t dims[64];
  attnc_tensor out;
  size_t n_out;
} prob;

static uint64_t rng_next(uint64_t *s)
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

static double uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0; }

static size_t tensor_count(const attnc_tensor *t)
{
  size_t n = 1;
  int a;
  for (a = 0; a < t->rank; a++) n *= (size_t)t->shape[a];
  return n;
}

/* Compile spec, make and bind tensors (named dims from names/values, others 5). */
static void prob_init(prob *p, const char *spec, attnc_backend be, const char *const *names, const int64_t *values,
                      int ndims, unsigned long seed)
{
  attnc_options o = { be, 0, NULL, ATTNC_FORM_FAST };
  attnc_error e;
  uint64_t rng = (seed + 1) * 0x9E3779B97F4A7C15ULL;
  int slot, i, d;
  memset(p, 0, sizeof *p);
  p->k = attnc_compile(spec, &o, &e);
  if (!p->k) fail_msg("compile %s: %s", spec, e.message);
  p->g = attnc_kernel_gen(p->k);
  p->b = attnc_bindings_new(p->k);
  assert_non_null(p->b);
  for (i = 0; i < p->g->ndims; i++) {
    p->dims[i] = 5;
    for (d = 0; d < ndims; d++)
      if (strcmp(names[d], p->g->dim_names[i]) == 0) p->dims[i] = values[d];
  }
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    const attnc_shape *sh = slot == ATTNC_SLOT_MASK ? &p->g->mask : &p->g->shape[slot];
    attnc_tensor *t = &p->t[slot];
    size_t n, j, es;
    double amp = 1;
    if (!p->g->used[slot]) continue;
    t->dtype = slot == ATTNC_SLOT_MASK ? ATTNC_U8 : p->g->dtype;
    t->rank = sh->rank;
    for (i = 0; i < sh->rank; i++) t->shape[i] = sh->dim[i] > 0 ? sh->dim[i] : p->dims[-sh->dim[i] - 1];
    n = tensor_count(t);
    es = attnc_dtype_size(t->dtype);
    p->raw[slot] = malloc(n * es + 64);
    p->ref[slot] = malloc(n * sizeof(double) + 8);
    assert_non_null(p->raw[slot]);
    assert_non_null(p->ref[slot]);
    t->data = p->raw[slot];
    if (attnc_slot_is_weight(slot)) amp = 1.0 / sqrt((double)(t->rank == 2 ? t->shape[1] : 16));
    for (j = 0; j < n; j++) {
      double v = uniform(&rng) * amp;
      if (slot == ATTNC_SLOT_MASK) v = (j % 5) != 3; /* a fixed pattern, every fifth key hidden */
      if (t->dtype == ATTNC_F32) { ((float *)t->data)[j] = (float)v; v = (double)(float)v; }
      else if (t->dtype == ATTNC_F64) ((double *)t->data)[j] = v;
      else ((unsigned char *)t->data)[j] = (unsigned char)(v != 0);
      p->ref[slot][j] = v;
    }
    if (attnc_bind(p->b, slot_bind_name(slot), t, &e) != ATTNC_OK) fail_msg("bind %s: %s", slot_bind_name(slot), e.message);
  }
  if (attnc_output_shape(p->b, &p->out, &e) != ATTNC_OK) fail_msg("output_shape: %s", e.message);
  p->n_out = tensor_count(&p->out);
  p->out.data = malloc(p->n_out * attnc_dtype_size(p->out.dtype) + 64);
  assert_non_null(p->out.data);
}

static void prob_free(prob *p)
{
  int slot;
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    free(p->raw[slot]);
    free(p->ref[slot]);
  }
  free(p->out.data);
  attnc_bindings_free(p->b);
  attnc_release(p->k);
  memset(p, 0, sizeof *p);
}

/* Refresh the double copy of slot after its data changed. */
static void prob_sync_ref(prob *p, int slot)
{
  size_t n = tensor_count(&p->t[slot]), j;
  for (j = 0; j < n; j++)
    p->ref[slot][j] = p->t[slot].dtype == ATTNC_F32 ? (double)((float *)p->t[slot].data)[j] : ((double *)p->t[slot].data)[j];
}

static void prob_run(prob *p)
{
  attnc_error e;
  if (attnc_run(p->b, &p->out, &e) != ATTNC_OK) fail_msg("run: %s", e.message);
}

static double out_at(const prob *p, size_t i)
{
  return p->out.dtype == ATTNC_F32 ? (double)((const float *)p->out.data)[i] : ((const double *)p->out.data)[i];
}

/* The float64 reference of a full-mode problem (out: n_out doubles). */
static void prob_reference(const prob *p, double *out)
{
  const attnc_gen *g = p->g;
  ref_problem rp;
  ref_tensors rt;
  const attnc_tensor *x = &p->t[ATTNC_SLOT_X], *kv = g->self ? x : &p->t[ATTNC_SLOT_KV];
  int i;
  assert_false(g->core);
  memset(&rp, 0, sizeof rp);
  memset(&rt, 0, sizeof rt);
  rp.rank = x->rank;
  for (i = 0; i < x->rank; i++) { rp.x[i] = (long)x->shape[i]; rp.kv[i] = (long)kv->shape[i]; }
  rp.attn_axis = g->axis;
  rp.H = g->heads; rp.G = g->kv_heads; rp.c = g->head_dim;
  rp.qkv_bias = g->qkv_bias; rp.out_bias = g->out_bias; rp.gated = g->gated;
  rp.global = g->global; rp.global_masked = g->global_masked;
  rp.causal = g->causal;
  rp.has_window = g->has_window; rp.wl = (long)g->window_l; rp.wr = (long)g->window_r;
  rp.scale = g->scale;
  rp.empty_rows = g->empty_rows;
  rt.x = p->ref[ATTNC_SLOT_X];
  rt.kv = g->self ? NULL : p->ref[ATTNC_SLOT_KV];
  rt.wq = p->ref[ATTNC_SLOT_WQ]; rt.bq = p->ref[ATTNC_SLOT_BQ];
  rt.wk = p->ref[ATTNC_SLOT_WK]; rt.bk = p->ref[ATTNC_SLOT_BK];
  rt.wv = p->ref[ATTNC_SLOT_WV]; rt.bv = p->ref[ATTNC_SLOT_BV];
  rt.wg = p->ref[ATTNC_SLOT_WG]; rt.bg = p->ref[ATTNC_SLOT_BG];
  rt.wo = p->ref[ATTNC_SLOT_WO]; rt.bo = p->ref[ATTNC_SLOT_BO];
  if (g->has_bias) {
    const attnc_tensor *bt = &p->t[ATTNC_SLOT_BIAS];
    rp.has_bias = 1; rp.bias_rank = bt->rank;
    for (i = 0; i < bt->rank; i++) rp.bias[i] = (long)bt->shape[i];
    rt.bias = p->ref[ATTNC_SLOT_BIAS];
  }
  if (g->has_mask) {
    const attnc_tensor *mt = &p->t[ATTNC_SLOT_MASK];
    rp.has_mask = 1; rp.mask_rank = mt->rank;
    for (i = 0; i < mt->rank; i++) rp.mask[i] = (long)mt->shape[i];
    rt.mask = p->ref[ATTNC_SLOT_MASK];
  }
  assert_int_equal(ref_attention(&rp, &rt, out), 0);
}

static float zeros[1 << 14];

static attnc_tensor tens(attnc_dtype dt, int rank, const int64_t *shape, void *data)
{
  attnc_tensor t;
  int i;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  for (i = 0; i < rank; i++) t.shape[i] = shape[i];
  t.data = data;
  return t;
}
#define T(dt, data, ...) tens((dt), (int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), (int64_t[]){ __VA_ARGS__ }, (data))

/* Bind the weights of "mha x=...,8 heads=2" (H*c = 8, qkv_bias) as zeros. */
static void bind_mha8_weights(attnc_bindings *b, int skip_slot)
{
  attnc_error e;
  attnc_tensor w = T(ATTNC_F32, zeros, 8, 8), bias = T(ATTNC_F32, zeros, 8);
  int slot;
  for (slot = ATTNC_SLOT_WQ; slot < ATTNC_SLOT_WQ_SCALE; slot++) { /* f32 weights: no int8 scales */
    int is_bias = slot == ATTNC_SLOT_BQ || slot == ATTNC_SLOT_BK || slot == ATTNC_SLOT_BV || slot == ATTNC_SLOT_BO;
    if (slot == skip_slot || slot == ATTNC_SLOT_WG || slot == ATTNC_SLOT_BG) continue;
    assert_int_equal(attnc_bind(b, slot_bind_name(slot), is_bias ? &bias : &w, &e), ATTNC_OK);
  }
}

/* ------------------------------------------------------------------ */
/* shapes, dtypes, missing tensors, named dims                         */

/* One role, one name: a role bound under a second name (another alias,
 * or a separate q/k/v weight beside the stacked in_proj_weight) is an
 * error naming both, whichever comes first; the same name binds again. */
static void test_validation_one_role_one_name(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile("mha x=2,3,8 heads=2", NULL, &e);
  attnc_bindings *b;
  attnc_tensor w = T(ATTNC_F32, zeros, 8, 8), stacked = T(ATTNC_F32, zeros, 24, 8), x = T(ATTNC_F32, zeros, 2, 3, 8), out;
  attnc_tensor bias = T(ATTNC_F32, zeros, 8), stacked_bias = T(ATTNC_F32, zeros, 24);
  float obuf[2 * 3 * 8];
  (void)state;
  assert_non_null(k);
  out = T(ATTNC_F32, obuf, 2, 3, 8);
  /* two aliases of one slot */
  b = attnc_bindings_new(k);
  assert_int_equal(attnc_bind(b, "linear_o.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "linear_o.weight", &w, &e), ATTNC_OK);
  EXPECT_ERR(attnc_bind(b, "o_proj.weight", &w, &e), &e, ATTNC_EBIND, "'linear_o.weight'", "'o_proj.weight'",
             "bind only one");
  attnc_bindings_free(b);
  /* in_proj_weight, then q_proj.weight; and the other way round */
  b = attnc_bindings_new(k);
  assert_int_equal(attnc_bind(b, "in_proj_weight", &stacked, &e), ATTNC_OK);
  EXPECT_ERR(attnc_bind(b, "q_proj.weight", &w, &e), &e, ATTNC_EBIND, "'in_proj_weight'", "'q_proj.weight'");
  assert_int_equal(attnc_bind(b, "in_proj_bias", &stacked_bias, &e), ATTNC_OK);
  EXPECT_ERR(attnc_bind(b, "v_proj.bias", &bias, &e), &e, ATTNC_EBIND, "'in_proj_bias'", "'v_proj.bias'");
  /* after a run has split the stacked tensors, binding them again is fine */
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "out_proj.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "out_proj.bias", &bias, &e), ATTNC_OK);
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "in_proj_weight", &stacked, &e), ATTNC_OK);
  EXPECT_ERR(attnc_bind(b, "k_proj.weight", &w, &e), &e, ATTNC_EBIND, "'in_proj_weight'", "'k_proj.weight'");
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  attnc_bindings_free(b);
  b = attnc_bindings_new(k);
  assert_int_equal(attnc_bind(b, "k_proj.weight", &w, &e), ATTNC_OK);
  EXPECT_ERR(attnc_bind(b, "in_proj_weight", &stacked, &e), &e, ATTNC_EBIND, "'k_proj.weight'", "'in_proj_weight'");
  attnc_bindings_free(b);
  attnc_release(k);
}

static void test_validation_shape_mismatch(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile("mha x=B,S,8 heads=2", NULL, &e);
  attnc_bindings *b;
  attnc_tensor x = T(ATTNC_F32, zeros, 2, 3, 8), out;
  float obuf[2 * 3 * 8];
  (void)state;
  assert_non_null(k);
  b = attnc_bindings_new(k);
  bind_mha8_weights(b, -1);
  /* the feature axis of x */
  x.shape[2] = 7;
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  out = T(ATTNC_F32, obuf, 2, 3, 8);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'x'", "(2, 3, 7)", "axis 2 is 7", "the spec says 8");
  EXPECT_ERR(attnc_output_shape(b, &out, &e), &e, ATTNC_EBIND, "tensor 'x'", "axis 2 is 7", "the spec says 8");
  /* the rank of x */
  x = T(ATTNC_F32, zeros, 3, 8);
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'x'", "has 2 dims (3, 8)", "expects 3");
  /* a weight: axis 0 of linear_o.weight */
  x = T(ATTNC_F32, zeros, 2, 3, 8);
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  {
    attnc_tensor wo = T(ATTNC_F32, zeros, 9, 8), bq = T(ATTNC_F32, zeros, 7);
    assert_int_equal(attnc_bind(b, "linear_o.weight", &wo, &e), ATTNC_OK);
    EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'linear_o.weight'", "(9, 8)", "axis 0 is 9", "the spec says 8");
    wo.shape[0] = 8;
    assert_int_equal(attnc_bind(b, "linear_o.weight", &wo, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "linear_q.bias", &bq, &e), ATTNC_OK);
    EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'linear_q.bias'", "(7)", "axis 0 is 7", "the spec says 8");
    bq.shape[0] = 8;
    assert_int_equal(attnc_bind(b, "linear_q.bias", &bq, &e), ATTNC_OK);
  }
  /* now everything fits: the output is checked next */
  out = T(ATTNC_F32, obuf, 2, 4, 8);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "output axis 1 is 4 but must be 3", "(2, 3, 8)");
  out = T(ATTNC_F64, obuf, 2, 3, 8);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "output must be F32 with 3 dims");
  out = T(ATTNC_F32, obuf, 6, 8);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "output must be F32 with 3 dims");
  out = T(ATTNC_F32, NULL, 2, 3, 8);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EARG, "output has no data");
  EXPECT_ERR(attnc_run(b, NULL, &e), &e, ATTNC_EARG, "needs an output tensor");
  out = T(ATTNC_F32, obuf, 2, 3, 8);
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  /* a tensor with a shape but no data */
  x.data = NULL;
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'x' has no data");
  /* a torch in_proj_weight, or a mask, with a shape but no data */
  attnc_bindings_free(b);
  attnc_release(k);
  k = attnc_compile("mha x=B,S,8 heads=2 mask=key", NULL, &e);
  assert_non_null(k);
  b = attnc_bindings_new(k);
  {
    attnc_tensor inw = T(ATTNC_F32, NULL, 24, 8), inb = T(ATTNC_F32, zeros, 24), ow = T(ATTNC_F32, zeros, 8, 8),
                 ob = T(ATTNC_F32, zeros, 8), m = T(ATTNC_U8, zeros, 2, 3);
    x = T(ATTNC_F32, zeros, 2, 3, 8);
    assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "in_proj_weight", &inw, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "in_proj_bias", &inb, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "out_proj.weight", &ow, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "out_proj.bias", &ob, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "mask", &m, &e), ATTNC_OK);
    EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'in_proj_weight' has no data");
    inw.data = zeros;
    inb.data = NULL;
    assert_int_equal(attnc_bind(b, "in_proj_weight", &inw, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "in_proj_bias", &inb, &e), ATTNC_OK);
    EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'in_proj_bias' has no data");
    inb.data = zeros;
    m.data = NULL;
    assert_int_equal(attnc_bind(b, "in_proj_bias", &inb, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "mask", &m, &e), ATTNC_OK);
    EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'mask' has no data");
    m.data = zeros;
    assert_int_equal(attnc_bind(b, "mask", &m, &e), ATTNC_OK);
    assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  }
  /* bad arguments to attnc_bind itself */
  x = T(ATTNC_F32, zeros, 2, 3, 8);
  x.rank = 9;
  EXPECT_ERR(attnc_bind(b, "x", &x, &e), &e, ATTNC_EBIND, "tensor 'x' has rank 9", "at most 8");
  x.rank = -1;
  EXPECT_ERR(attnc_bind(b, "x", &x, &e), &e, ATTNC_EBIND, "tensor 'x' has rank -1");
  EXPECT_ERR(attnc_bind(b, "x", NULL, &e), &e, ATTNC_EARG, "tensor 'x' is NULL");
  EXPECT_ERR(attnc_bind(b, NULL, &x, &e), &e, ATTNC_EARG, "needs bindings and a name");
  x.rank = 3;
  EXPECT_ERR(attnc_bind(b, "linear_q.weights", &x, &e), &e, ATTNC_EBIND, "unknown tensor name 'linear_q.weights'");
  attnc_bindings_free(b);
  attnc_release(k);
}

static void test_validation_dtype_mismatch(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile("mha x=B,S,8 heads=2 mask=key", NULL, &e);
  attnc_bindings *b;
  attnc_tensor x = T(ATTNC_I16, zeros, 2, 3, 8), w = T(ATTNC_I32, zeros, 8, 8), out;
  float obuf[48];
  static const attnc_dtype mask_types[] = { ATTNC_U8, ATTNC_BOOL, ATTNC_I8, ATTNC_I16, ATTNC_I32, ATTNC_I64,
                                            ATTNC_U16, ATTNC_U32, ATTNC_U64, ATTNC_F16, ATTNC_BF16, ATTNC_F32, ATTNC_F64 };
  size_t i;
  (void)state;
  assert_non_null(k);
  b = attnc_bindings_new(k);
  /* floating dtypes are converted; others are refused, naming those taken */
  EXPECT_ERR(attnc_bind(b, "x", &x, &e), &e, ATTNC_EBIND, "tensor 'x' has dtype I16", "takes F32, F64, BF16 or F16");
  x.dtype = ATTNC_U8;
  EXPECT_ERR(attnc_bind(b, "x", &x, &e), &e, ATTNC_EBIND, "tensor 'x' has dtype U8", "converted to its F32");
  EXPECT_ERR(attnc_bind(b, "q_proj.weight", &w, &e), &e, ATTNC_EBIND, "tensor 'q_proj.weight' has dtype I32");
  w.dtype = ATTNC_I8;
  EXPECT_ERR(attnc_bind(b, "in_proj_weight", &w, &e), &e, ATTNC_EBIND, "tensor 'in_proj_weight' has dtype I8");
  w.dtype = (attnc_dtype)77;
  EXPECT_ERR(attnc_bind(b, "linear_k.weight", &w, &e), &e, ATTNC_EBIND, "tensor 'linear_k.weight' has an unknown dtype (77)");
  w.shape[1] = 3;
  EXPECT_ERR(attnc_bind(b, "mask", &w, &e), &e, ATTNC_EBIND, "tensor 'mask' has an unknown dtype (77)");
  /* a refused bind leaves nothing bound: the run names the missing tensor */
  bind_mha8_weights(b, ATTNC_SLOT_WK);
  x.dtype = ATTNC_F32;
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  out = T(ATTNC_F32, obuf, 2, 3, 8);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EMISSING, "missing tensor 'wk'", "linear_k.weight");
  bind_mha8_weights(b, -1);
  /* a mask of any dtype is fine (nonzero keeps) */
  for (i = 0; i < sizeof mask_types / sizeof mask_types[0]; i++) {
    attnc_tensor m = T(mask_types[i], zeros, 2, 3);
    assert_int_equal(attnc_bind(b, "mask", &m, &e), ATTNC_OK);
    assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  }
  attnc_bindings_free(b);
  attnc_release(k);
}

static void test_validation_missing_tensors(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile("mha x=B,S,8 kv=B,T,8 heads=2 mask=key", NULL, &e);
  attnc_bindings *b;
  attnc_tensor x = T(ATTNC_F32, zeros, 2, 3, 8), kv = T(ATTNC_F32, zeros, 2, 4, 8), m = T(ATTNC_U8, zeros, 2, 4), out;
  float obuf[48];
  int slot;
  (void)state;
  assert_non_null(k);
  out = T(ATTNC_F32, obuf, 2, 3, 8);
  /* leave out each weight in turn */
  for (slot = ATTNC_SLOT_WQ; slot < ATTNC_SLOT_WQ_SCALE; slot++) { /* f32 weights: no int8 scales */
    char want[64];
    if (slot == ATTNC_SLOT_WG || slot == ATTNC_SLOT_BG) continue;
    b = attnc_bindings_new(k);
    assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "kv", &kv, &e), ATTNC_OK);
    assert_int_equal(attnc_bind(b, "mask", &m, &e), ATTNC_OK);
    bind_mha8_weights(b, slot);
    snprintf(want, sizeof want, "missing tensor '%s'", attnc_slot_name(slot));
    EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EMISSING, want, slot_bind_name(slot));
    attnc_bindings_free(b);
  }
  /* inputs */
  b = attnc_bindings_new(k);
  bind_mha8_weights(b, -1);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EMISSING, "missing tensor 'x'");
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EMISSING, "missing tensor 'kv'");
  assert_int_equal(attnc_bind(b, "kv", &kv, &e), ATTNC_OK);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EMISSING, "missing tensor 'mask'", "mask=key");
  assert_int_equal(attnc_bind(b, "mask", &m, &e), ATTNC_OK);
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  attnc_bindings_free(b);
  attnc_release(k);
}

static void test_validation_named_dim_two_sizes(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile("mha x=B,S,8 kv=B,T,8 heads=2 bias=B,2,S,T", NULL, &e);
  attnc_bindings *b;
  attnc_tensor x = T(ATTNC_F32, zeros, 2, 3, 8), kv = T(ATTNC_F32, zeros, 3, 4, 8), bias = T(ATTNC_F32, zeros, 2, 2, 3, 5),
               out;
  float obuf[48];
  (void)state;
  assert_non_null(k);
  b = attnc_bindings_new(k);
  bind_mha8_weights(b, -1);
  out = T(ATTNC_F32, obuf, 2, 3, 8);
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "kv", &kv, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "bias", &bias, &e), ATTNC_OK);
  /* B is 2 from x, 3 from kv */
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'kv' (3, 4, 8)", "axis 0 is 3", "dim B = 2", "from x axis 0");
  kv.shape[0] = 2;
  assert_int_equal(attnc_bind(b, "kv", &kv, &e), ATTNC_OK);
  /* T is 4 from kv, 5 from the bias */
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'bias' (2, 2, 3, 5)", "axis 3 is 5", "dim T = 4", "from kv axis 1");
  bias.shape[3] = 4;
  assert_int_equal(attnc_bind(b, "bias", &bias, &e), ATTNC_OK);
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  /* an explicit dim that disagrees with the inputs */
  assert_int_equal(attnc_bind_dim(b, "S", 4, &e), ATTNC_OK);
  EXPECT_ERR(attnc_run(b, &out, &e), &e, ATTNC_EBIND, "tensor 'x' (2, 3, 8)", "axis 1 is 3", "dim S = 4", "from attnc_bind_dim");
  EXPECT_ERR(attnc_bind_dim(b, "S", 0, &e), &e, ATTNC_EBIND, "dim S = 0 is out of range");
  EXPECT_ERR(attnc_bind_dim(b, "S", -3, &e), &e, ATTNC_EBIND, "dim S = -3 is out of range");
  EXPECT_ERR(attnc_bind_dim(b, "S", (int64_t)1 << 31, &e), &e, ATTNC_EBIND, "dim S = 2147483648 is out of range");
  EXPECT_ERR(attnc_bind_dim(b, "Z", 3, &e), &e, ATTNC_EBIND, "no named dim 'Z'");
  attnc_bindings_free(b);
  /* a dim inferred from a tensor axis of 0 or a negative size */
  b = attnc_bindings_new(k);
  bind_mha8_weights(b, -1);
  x.shape[1] = 0;
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  EXPECT_ERR(attnc_output_shape(b, &out, &e), &e, ATTNC_EBIND, "tensor 'x' (2, 0, 8)", "axis 1 (dim S)", "between 1 and 2^31-1");
  x.shape[1] = -5;
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  EXPECT_ERR(attnc_output_shape(b, &out, &e), &e, ATTNC_EBIND, "tensor 'x' (2, -5, 8)", "axis 1 (dim S)");
  attnc_bindings_free(b);
  attnc_release(k);
}

/* ------------------------------------------------------------------ */
/* misaligned pointers                                                  */

/* A copy of t's data at `offset` bytes past a 64-byte aligned block. */
static void *shifted_copy(const attnc_tensor *t, size_t offset, void **block)
{
  size_t bytes = tensor_count(t) * attnc_dtype_size(t->dtype);
  unsigned char *p;
  assert_int_equal(posix_memalign(block, 64, bytes + 128), 0);
  p = (unsigned char *)*block + offset;
  memcpy(p, t->data, bytes);
  return p;
}

static void misaligned_by_one_element(const char *spec, attnc_backend be)
{
  static const char *const names[] = { "B", "S" };
  static const int64_t values[] = { 2, 37 };
  prob p;
  attnc_error e;
  void *want, *blocks[ATTNC_SLOT_COUNT + 1];
  attnc_tensor out;
  size_t es, bytes;
  int slot;
  prob_init(&p, spec, be, names, values, 2, 7);
  prob_run(&p);
  es = attnc_dtype_size(p.out.dtype);
  bytes = p.n_out * es;
  want = malloc(bytes);
  assert_non_null(want);
  memcpy(want, p.out.data, bytes);
  /* every input, weight and the output one element off 64-byte alignment */
  memset(blocks, 0, sizeof blocks);
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    attnc_tensor t;
    if (!p.g->used[slot]) continue;
    t = p.t[slot];
    t.data = shifted_copy(&p.t[slot], attnc_dtype_size(t.dtype), &blocks[slot]);
    assert_int_equal(attnc_bind(p.b, slot_bind_name(slot), &t, &e), ATTNC_OK);
  }
  out = p.out;
  assert_int_equal(posix_memalign(&blocks[ATTNC_SLOT_COUNT], 64, bytes + 128), 0);
  out.data = (unsigned char *)blocks[ATTNC_SLOT_COUNT] + es;
  if (attnc_run(p.b, &out, &e) != ATTNC_OK) fail_msg("%s: run with element-aligned data: %s", spec, e.message);
  if (memcmp(out.data, want, bytes) != 0) fail_msg("%s: element-aligned data changed the result", spec);
  for (slot = 0; slot <= ATTNC_SLOT_COUNT; slot++) free(blocks[slot]);
  free(want);
  prob_free(&p);
}

static void test_validation_misaligned_by_one_element(void **state)
{
  (void)state;
  misaligned_by_one_element("mha x=B,S,24 heads=3 causal", ATTNC_BACKEND_TCC);
  misaligned_by_one_element("gqa x=B,S,40 heads=4 kv_heads=2 mask=key gated bias=B,4,S,S", ATTNC_BACKEND_TCC);
  misaligned_by_one_element("mha x=B,S,24 heads=3 dtype=f64 mask=key", ATTNC_BACKEND_TCC);
  misaligned_by_one_element("gqa x=B,S,40 heads=4 kv_heads=2 mask=key gated bias=B,4,S,S", ATTNC_BACKEND_CC);
}

/* Data one byte off its dtype's alignment is refused, naming the tensor. */
static void test_validation_misaligned_by_one_byte(void **state)
{
  static const char *const names[] = { "B", "S" };
  static const int64_t values[] = { 2, 9 };
  static const char *const specs[] = { "mha x=B,S,24 heads=3 mask=key", "mha x=B,S,24 heads=3 dtype=f64 mask=key" };
  size_t s;
  (void)state;
  for (s = 0; s < 2; s++) {
    prob p;
    attnc_error e;
    void *block;
    int slot;
    prob_init(&p, specs[s], ATTNC_BACKEND_TCC, names, values, 2, 3);
    for (slot = 0; slot <= ATTNC_SLOT_COUNT; slot++) {
      attnc_tensor t = slot < ATTNC_SLOT_COUNT ? p.t[slot] : p.out;
      char want[96];
      if (slot < ATTNC_SLOT_COUNT && !p.g->used[slot]) continue;
      if (slot == ATTNC_SLOT_MASK) {
        /* a U8 mask has no alignment to keep; an F32 one does */
        t.dtype = ATTNC_F32;
        t.data = zeros;
      }
      t.data = shifted_copy(&t, 1, &block);
      if (slot < ATTNC_SLOT_COUNT) {
        snprintf(want, sizeof want, "tensor '%s'", slot_bind_name(slot));
        assert_int_equal(attnc_bind(p.b, slot_bind_name(slot), &t, &e), ATTNC_OK);
        EXPECT_ERR(attnc_run(p.b, &p.out, &e), &e, ATTNC_EBIND, want, "not aligned", t.dtype == ATTNC_F64 ? "8 bytes" : "4 bytes");
        EXPECT_ERR(attnc_output_shape(p.b, NULL, &e), &e, ATTNC_EBIND, want, "not aligned");
        t = p.t[slot];
        assert_int_equal(attnc_bind(p.b, slot_bind_name(slot), &t, &e), ATTNC_OK);
      } else {
        EXPECT_ERR(attnc_run(p.b, &t, &e), &e, ATTNC_EBIND, "output", "not aligned");
      }
      free(block);
    }
    prob_run(&p); /* everything aligned again */
    prob_free(&p);
  }
}

/* ------------------------------------------------------------------ */
/* malformed safetensors                                               */

/* A safetensors image: 8-byte LE header length, header, dlen data bytes. */
static unsigned char *image(const char *header, size_t dlen, size_t *n)
{
  size_t hn = strlen(header), i;
  unsigned char *p = malloc(8 + hn + dlen + 1);
  assert_non_null(p);
  for (i = 0; i < 8; i++) p[i] = (unsigned char)(((uint64_t)hn >> (8 * i)) & 0xFF);
  memcpy(p + 8, header, hn);
  for (i = 0; i < dlen; i++) p[8 + hn + i] = (unsigned char)(i * 7);
  *n = 8 + hn + dlen;
  return p;
}

typedef struct bad_file {
  const char *what;
  const char *header;     /* NULL: use raw */
  size_t dlen;
  const char *want1, *want2;
  const unsigned char *raw; size_t raw_n;
  uint64_t forced_len;    /* nonzero: overwrite the 8-byte length */
} bad_file;

static const unsigned char four_bytes[] = { 1, 2, 3, 4 };

static const bad_file BAD[] = {
  { "empty", NULL, 0, "too short for the 8-byte header length", NULL, four_bytes, 0, 0 },
  { "4 bytes", NULL, 0, "only 4 bytes", NULL, four_bytes, 4, 0 },
  { "header length past the end", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
    "runs past the end of the file", NULL, NULL, 0, 200 },
  { "header length 2^63", "{}", 0, "exceeds the limit", NULL, NULL, 0, (uint64_t)1 << 63 },
  { "truncated data", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3,8],\"data_offsets\":[0,192]}}", 100,
    "tensor 'x'", "past the end of the data section", NULL, 0, 0 },
  { "offsets out of range", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[18446744073709551612,18446744073709551616]}}", 8,
    "data_offsets[1] is too large", NULL, NULL, 0, 0 },
  { "end past the data", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4096,4100]}}", 8,
    "data_offsets end 4100 is past the end of the data section (8 bytes)", NULL, NULL, 0, 0 },
  { "begin after end", "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
    "has begin after end", NULL, NULL, 0, 0 },
  { "overlapping", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"linear_q.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
    "overlap in the data section", "'x'", NULL, 0, 0 },
  { "unknown dtype", "{\"x\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
    "tensor 'x': unknown dtype \"F8_E4M3\"", NULL, NULL, 0, 0 },
  { "negative shape", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,-3,8],\"data_offsets\":[0,0]}}", 0,
    "tensor 'x': shape[1] is negative (-3)", NULL, NULL, 0, 0 },
  { "size mismatch", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3,8],\"data_offsets\":[0,180]}}", 192,
    "size mismatch", "needs 192", NULL, 0, 0 },
  { "shape overflow", "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,0]}}", 0,
    "overflows", NULL, NULL, 0, 0 },
  { "rank 9", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
    "more than 8 entries", NULL, NULL, 0, 0 },
  { "not JSON", "this is not json", 0, "invalid JSON header", NULL, NULL, 0, 0 },
  { "duplicate name", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
    "duplicate tensor name 'x'", NULL, NULL, 0, 0 },
};
#define NBAD (sizeof BAD / sizeof BAD[0])

static unsigned char *bad_image(const bad_file *bf, size_t *n)
{
  unsigned char *p;
  int i;
  if (!bf->header) {
    p = malloc(bf->raw_n + 1);
    assert_non_null(p);
    memcpy(p, bf->raw, bf->raw_n);
    *n = bf->raw_n;
    return p;
  }
  p = image(bf->header, bf->dlen, n);
  if (bf->forced_len)
    for (i = 0; i < 8; i++) p[i] = (unsigned char)((bf->forced_len >> (8 * i)) & 0xFF);
  return p;
}

static void test_validation_safetensors_malformed(void **state)
{
  size_t i;
  (void)state;
  for (i = 0; i < NBAD; i++) {
    size_t n;
    unsigned char *p = bad_image(&BAD[i], &n);
    attnc_error e;
    attnc_safetensors *f;
    memset(&e, 0, sizeof e);
    f = attnc_st_from_memory(p, n, &e);
    if (f) fail_msg("%s: accepted", BAD[i].what);
    if (e.code != ATTNC_EFORMAT) fail_msg("%s: status %d, message %s", BAD[i].what, (int)e.code, e.message);
    if (!strstr(e.message, BAD[i].want1) || (BAD[i].want2 && !strstr(e.message, BAD[i].want2)))
      fail_msg("%s: message \"%s\" lacks \"%s\"", BAD[i].what, e.message, BAD[i].want1);
    free(p);
  }
}

/* Every prefix of a valid file, and every single-byte change to its
 * header, is either refused with a message or read consistently. */
static void test_validation_safetensors_every_prefix_and_byte(void **state)
{
  const char *hdr = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3,8],\"data_offsets\":[0,192]},"
                    "\"linear_q.weight\":{\"dtype\":\"F32\",\"shape\":[8,8],\"data_offsets\":[192,448]}}";
  size_t n, cut, i;
  unsigned char *p = image(hdr, 448, &n);
  attnc_error e;
  attnc_safetensors *f;
  (void)state;
  for (cut = 0; cut < n; cut++) {
    unsigned char *q = malloc(cut + 1);
    assert_non_null(q);
    memcpy(q, p, cut);
    f = attnc_st_from_memory(q, cut, &e);
    if (f) fail_msg("a file cut to %zu of %zu bytes was accepted", cut, n);
    assert_int_equal(e.code, ATTNC_EFORMAT);
    assert_true(strlen(e.message) > 10);
    free(q);
  }
  for (i = 0; i < 8 + strlen(hdr); i++) {
    int v;
    for (v = 0; v < 256; v += 17) {
      unsigned char *q = malloc(n);
      assert_non_null(q);
      memcpy(q, p, n);
      q[i] = (unsigned char)v;
      f = attnc_st_from_memory(q, n, &e);
      if (f) {
        size_t t;
        for (t = 0; t < attnc_st_count(f); t++) {
          attnc_tensor tt;
          size_t bytes;
          assert_int_equal(attnc_st_get(f, t, &tt), ATTNC_OK);
          bytes = tensor_count(&tt) * attnc_dtype_size(tt.dtype);
          assert_true(bytes <= 448);
          if (bytes) assert_int_equal((uintptr_t)tt.data % attnc_dtype_size(tt.dtype), 0);
        }
        attnc_st_close(f);
      } else {
        assert_true(e.code == ATTNC_EFORMAT || e.code == ATTNC_ENOMEM);
        assert_true(strlen(e.message) > 10);
      }
      free(q);
    }
  }
  free(p);
}

/* ------------------------------------------------------------------ */
/* the CLI on malformed and mismatched files                           */

static char g_dir[512];

static const char *attnc_bin(void)
{
  const char *b = getenv("ATTNC");
  return (b && *b) ? b : "build/attnc";
}

static void write_bytes(const char *path, const void *p, size_t n)
{
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static char *read_text(const char *path)
{
  FILE *f = fopen(path, "rb");
  char *t;
  long n;
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  t = calloc(1, (size_t)n + 1);
  assert_non_null(t);
  assert_int_equal(fread(t, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return t;
}

/* Run the CLI with args (NULL-terminated); stderr into *err and, when out
 * is not NULL, stdout into *out (caller frees).  Returns the exit status,
 * or 128 + signal; the child is killed after 20 s. */
static int run_cli_io(const char *const *args, char **out, char **err)
{
  char errpath[600], outpath[600];
  pid_t pid;
  int st, fd;
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", g_dir);
  snprintf(outpath, sizeof outpath, "%s/stdout.txt", g_dir);
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    char *argv[32];
    int i;
    fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, 2);
    close(fd);
    fd = open("/dev/null", O_RDWR);
    if (fd >= 0) { dup2(fd, 0); dup2(fd, 1); close(fd); }
    if (out) {
      fd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(126);
      dup2(fd, 1);
      close(fd);
    }
    argv[0] = (char *)attnc_bin();
    for (i = 0; args[i] && i < 30; i++) argv[i + 1] = (char *)args[i];
    argv[i + 1] = NULL;
    alarm(20); /* survives exec: a hang becomes SIGALRM */
    execv(argv[0], argv);
    _exit(127);
  }
  while (waitpid(pid, &st, 0) < 0) assert_int_equal(errno, EINTR);
  *err = read_text(errpath);
  if (out) *out = read_text(outpath);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int run_cli(const char *const *args, char **err) { return run_cli_io(args, NULL, err); }

static void expect_cli_refusal(const char *what, const char *const *args, const char *want)
{
  char *err = NULL, out[600];
  int st = run_cli(args, &err);
  struct stat sb;
  if (st < 1 || st > 127 || !strstr(err, "error") || (want && !strstr(err, want)))
    fail_msg("%s: exit status %d (want 1..127), stderr: %s (want \"error\"%s%s)", what, st, err, want ? " and " : "",
             want ? want : "");
  snprintf(out, sizeof out, "%s/out.safetensors", g_dir);
  if (stat(out, &sb) == 0) fail_msg("%s: an output file was written", what);
  free(err);
}

static void test_validation_cli_refuses_bad_files(void **state)
{
  static const char *spec = "mha x=B,S,8 heads=2";
  char wpath[600], bpath[600], opath[600];
  const char *names[] = { "linear_q.weight", "linear_q.bias", "linear_k.weight", "linear_k.bias", "linear_v.weight",
                          "linear_v.bias", "linear_o.weight", "linear_o.bias" };
  attnc_tensor ts[8];
  attnc_error e;
  size_t i;
  int k;
  (void)state;
  snprintf(wpath, sizeof wpath, "%s/weights.safetensors", g_dir);
  snprintf(bpath, sizeof bpath, "%s/inputs.safetensors", g_dir);
  snprintf(opath, sizeof opath, "%s/out.safetensors", g_dir);
  for (k = 0; k < 8; k++) ts[k] = (k % 2) ? T(ATTNC_F32, zeros, 8) : T(ATTNC_F32, zeros, 8, 8);
  assert_int_equal(attnc_st_write(wpath, 8, names, ts, &e), ATTNC_OK);
  /* sanity: a good input file runs */
  {
    const char *xn = "x";
    attnc_tensor x = T(ATTNC_F32, zeros, 2, 3, 8);
    char *err = NULL;
    assert_int_equal(attnc_st_write(bpath, 1, &xn, &x, &e), ATTNC_OK);
    k = run_cli((const char *const[]){ "run", spec, "--tensors", wpath, "--tensors", bpath, "--out", opath, NULL }, &err);
    if (k != 0) fail_msg("the good file: exit %d: %s", k, err);
    free(err);
    unlink(opath);
  }
  for (i = 0; i < NBAD; i++) {
    size_t n;
    unsigned char *p = bad_image(&BAD[i], &n);
    write_bytes(bpath, p, n);
    free(p);
    expect_cli_refusal(BAD[i].what,
                       (const char *const[]){ "run", spec, "--tensors", wpath, "--tensors", bpath, "--out", opath, NULL },
                       BAD[i].want1);
  }
  /* well-formed files that do not fit the kernel */
  {
    static const struct { const char *what; attnc_dtype dt; int rank; int64_t shape[3]; const char *want; } MIS[] = {
      { "x of width 7", ATTNC_F32, 3, { 2, 3, 7 }, "axis 2 is 7 but the spec says 8" },
      { "x of rank 2", ATTNC_F32, 2, { 3, 8, 0 }, "has 2 dims" },
      { "x in I32", ATTNC_I32, 3, { 2, 3, 8 }, "dtype I32" },
      { "x in U8", ATTNC_U8, 3, { 2, 3, 8 }, "dtype U8" },
    };
    for (i = 0; i < sizeof MIS / sizeof MIS[0]; i++) {
      const char *xn = "x";
      attnc_tensor x = tens(MIS[i].dt, MIS[i].rank, MIS[i].shape, zeros);
      assert_int_equal(attnc_st_write(bpath, 1, &xn, &x, &e), ATTNC_OK);
      expect_cli_refusal(MIS[i].what,
                         (const char *const[]){ "run", spec, "--tensors", wpath, "--tensors", bpath, "--out", opath, NULL },
                         MIS[i].want);
    }
  }
  /* a missing weight, a missing file, a directory */
  {
    const char *xn = "x";
    attnc_tensor x = T(ATTNC_F32, zeros, 2, 3, 8);
    assert_int_equal(attnc_st_write(bpath, 1, &xn, &x, &e), ATTNC_OK);
    assert_int_equal(attnc_st_write(wpath, 7, names, ts, &e), ATTNC_OK); /* no linear_o.bias */
    expect_cli_refusal("a missing weight",
                       (const char *const[]){ "run", spec, "--tensors", wpath, "--tensors", bpath, "--out", opath, NULL },
                       "missing tensor 'bo'");
    expect_cli_refusal("a missing file",
                       (const char *const[]){ "run", spec, "--tensors", "/nonexistent/w.safetensors", "--out", opath, NULL },
                       "cannot open");
    expect_cli_refusal("a directory", (const char *const[]){ "run", spec, "--tensors", g_dir, "--out", opath, NULL }, NULL);
  }
  unlink(wpath);
  unlink(bpath);
}

/* ------------------------------------------------------------------ */
/* hostile specs through the CLI (tests/hostile/specs.txt)            */

/* Decode \n \r \t \\ \xHH into buf; returns the length. */
static size_t unescape(const char *s, size_t n, char *buf)
{
  size_t i = 0, o = 0;
  while (i < n) {
    if (s[i] == '\\' && i + 1 < n) {
      char c = s[i + 1];
      if (c == 'n' || c == 'r' || c == 't' || c == '\\') {
        buf[o++] = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : '\\';
        i += 2;
        continue;
      }
      if (c == 'x' && i + 3 < n) {
        char hex[3] = { s[i + 2], s[i + 3], 0 };
        buf[o++] = (char)strtol(hex, NULL, 16);
        i += 4;
        continue;
      }
    }
    buf[o++] = s[i++];
  }
  return o;
}

static double wall_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One hostile spec (bytes in a spec file) through explain, show and run. */
static int refuse_everywhere(const char *what, const char *bytes, size_t n, const char *needle, const char *tensors)
{
  char path[600], arg[700], opath[600];
  const char *cmds[3] = { "explain", "show", "run" };
  int c, bad = 0;
  snprintf(path, sizeof path, "%s/hostile.attn", g_dir);
  snprintf(arg, sizeof arg, "@%s", path);
  snprintf(opath, sizeof opath, "%s/hostile-out.safetensors", g_dir);
  write_bytes(path, bytes, n);
  for (c = 0; c < 3; c++) {
    char *out = NULL, *err = NULL;
    double t0 = wall_s(), dt;
    int st = c == 2 ? run_cli_io((const char *const[]){ "run", arg, "--tensors", tensors, "--out", opath, NULL }, &out, &err)
                    : run_cli_io((const char *const[]){ cmds[c], arg, NULL }, &out, &err);
    struct stat sb;
    dt = wall_s() - t0;
    if (st < 1 || st > 127 || !strstr(err, "error") || dt > 10 || (needle && strstr(out, needle)) ||
        stat(opath, &sb) == 0) {
      print_error("hostile spec %s: attnc %s: exit %d, %.1f s, stderr: %.300s%s%s\n", what, cmds[c], st, dt, err,
                  needle && strstr(out, needle) ? " -- the injected text reached stdout: " : "",
                  needle && strstr(out, needle) ? needle : "");
      unlink(opath);
      bad++;
    }
    free(out);
    free(err);
  }
  return bad;
}

static void test_validation_hostile_specs(void **state)
{
  char *list, *line, *save = NULL, tensors[600], *big;
  int failures = 0, count = 0;
  size_t i;
  attnc_error e;
  const char *xn = "x";
  attnc_tensor x = T(ATTNC_F32, zeros, 2, 3, 8);
  (void)state;
  if (access("tests/hostile/specs.txt", R_OK) != 0) {
    print_message("skipped: tests/hostile/specs.txt is not here (run from the source tree)\n");
    skip();
  }
  snprintf(tensors, sizeof tensors, "%s/hostile-in.safetensors", g_dir);
  assert_int_equal(attnc_st_write(tensors, 1, &xn, &x, &e), ATTNC_OK);
  list = read_text("tests/hostile/specs.txt");
  for (line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char buf[1024], *tab, *needle = NULL;
    size_t n;
    if (line[0] == '#' || !line[0]) continue;
    if ((tab = strchr(line, '\t'))) {
      *tab = '\0';
      needle = tab + 1;
    }
    assert_true(strlen(line) < sizeof buf);
    n = unescape(line, strlen(line), buf);
    failures += refuse_everywhere(line, buf, n, needle, tensors);
    count++;
  }
  free(list);
  /* a NUL byte inside a spec file */
  failures += refuse_everywhere("with a NUL byte", "mha x=B,S,8 heads=2\0 name=evil", 31, "evil", tensors);
  /* 1 MiB of valid-looking words, and one 64 KiB word */
  big = malloc((size_t)1 << 20);
  assert_non_null(big);
  for (i = 0; i + 12 <= ((size_t)1 << 20); i += 12) memcpy(big + i, "heads=2     ", 12);
  memcpy(big, "mha x=B,S,8 ", 12);
  failures += refuse_everywhere("of 1 MiB", big, (size_t)1 << 20, NULL, tensors);
  memset(big, 'a', 65536);
  failures += refuse_everywhere("with a 64 KiB word", big, 65536, NULL, tensors);
  free(big);
  count += 3;
  print_message("  %d hostile specs, each through explain, show and run\n", count);
  if (failures) fail_msg("%d refusals failed (above)", failures);
  assert_true(count >= 60);
  unlink(tensors);
}

/* ------------------------------------------------------------------ */
/* extra tensors are ignored                                           */

static void test_validation_extra_tensors_ignored(void **state)
{
  static const char *const dn[] = { "B", "S" };
  static const int64_t dv[] = { 2, 6 };
  prob p, q;
  attnc_error e;
  char path[600];
  const char *names[32];
  attnc_tensor ts[32];
  attnc_safetensors *f;
  int n = 0, slot, nbound = -1;
  int64_t ids[6] = { 0, 1, 2, 3, 4, 5 };
  uint16_t half[4] = { 0x3c00, 0x4000, 0x7e00, 0xfc00 }; /* 1, 2, NaN, -Inf in F16 */
  (void)state;
  prob_init(&p, "mha x=B,S,16 heads=2 causal", ATTNC_BACKEND_TCC, dn, dv, 2, 11);
  prob_run(&p);
  /* a checkpoint holding this layer, another layer with other shapes, and unrelated tensors */
  for (slot = ATTNC_SLOT_WQ; slot < ATTNC_SLOT_COUNT; slot++) {
    static char buf[ATTNC_SLOT_COUNT][64];
    if (!p.g->used[slot]) continue;
    snprintf(buf[slot], sizeof buf[slot], "model.layers.1.attn.%s", slot_bind_name(slot));
    names[n] = buf[slot];
    ts[n++] = p.t[slot];
  }
  names[n] = "model.layers.0.attn.linear_q.weight"; ts[n++] = T(ATTNC_F32, zeros, 3, 5);
  names[n] = "model.layers.0.attn.linear_g.weight"; ts[n++] = T(ATTNC_F64, zeros, 2, 2);
  names[n] = "position_ids"; ts[n++] = T(ATTNC_I64, ids, 6);
  names[n] = "embed_tokens.weight"; ts[n++] = T(ATTNC_F16, half, 2, 2);
  names[n] = "empty"; ts[n++] = T(ATTNC_F32, zeros, 0, 4);
  names[n] = "scalar"; ts[n++] = T(ATTNC_BOOL, zeros, 1);
  names[n] = "mask"; ts[n++] = T(ATTNC_I32, zeros, 9, 9); /* the kernel has no mask: ignored */
  names[n] = "bias"; ts[n++] = T(ATTNC_F64, zeros, 9);    /* nor a bias */
  names[n] = "kv"; ts[n++] = T(ATTNC_F16, zeros, 1);      /* nor kv */
  names[n] = "linear_g.weight"; ts[n++] = T(ATTNC_I8, zeros, 3); /* nor a gate */
  snprintf(path, sizeof path, "%s/ckpt.safetensors", g_dir);
  assert_int_equal(attnc_st_write(path, (size_t)n, names, ts, &e), ATTNC_OK);
  f = attnc_st_open(path, &e);
  assert_non_null(f);
  /* the same problem, weights from the file, x bound directly */
  memset(&q, 0, sizeof q);
  q.k = p.k;
  q.b = attnc_bindings_new(p.k);
  assert_int_equal(attnc_bind(q.b, "x", &p.t[ATTNC_SLOT_X], &e), ATTNC_OK);
  if (attnc_bind_safetensors(q.b, f, "model.layers.1.attn.", &nbound, &e) != ATTNC_OK) fail_msg("bind: %s", e.message);
  assert_int_equal(nbound, 8);
  q.out = p.out;
  q.out.data = malloc(p.n_out * sizeof(float));
  assert_non_null(q.out.data);
  if (attnc_run(q.b, &q.out, &e) != ATTNC_OK) fail_msg("run: %s", e.message);
  assert_memory_equal(q.out.data, p.out.data, p.n_out * sizeof(float));
  /* without a prefix the unprefixed names bind (and the layer weights are not found) */
  attnc_bindings_free(q.b);
  q.b = attnc_bindings_new(p.k);
  assert_int_equal(attnc_bind_safetensors(q.b, f, NULL, &nbound, &e), ATTNC_OK);
  assert_int_equal(nbound, 0);
  EXPECT_ERR(attnc_output_shape(q.b, NULL, &e), &e, ATTNC_EMISSING, "missing tensor 'x'");
  attnc_bindings_free(q.b);
  free(q.out.data);
  attnc_st_close(f);
  unlink(path);
  prob_free(&p);
}

/* ------------------------------------------------------------------ */
/* NaN and Inf                                                          */

/* Does query row i of batch 0 see key j (self-attention, Sq = Sk)? */
static int key_visible(const prob *p, long i, long j)
{
  if (p->g->causal && j > i) return 0;
  if (p->g->has_window && (j < i - p->g->window_l || j > i + p->g->window_r)) return 0;
  if (p->g->has_mask && !((unsigned char *)p->t[ATTNC_SLOT_MASK].data)[j]) return 0; /* mask (B, S): batch 0 */
  return 1;
}

/* Poke `value` into x at (batch 0, position pos, feature 0) of a
 * self-attention over B=2, S=70; run and compare with a clean run: the
 * outputs of the other batch element must be bit-identical, rows of batch 0
 * that do not see key pos must be bit-identical or NaN (see below); row pos and
 * every row that sees key pos must be NaN for a NaN input and non-finite
 * for an infinite one.  Returns 0, or 1 after printing the first wrong
 * output. */
static int poison_x(const char *spec, attnc_backend be, const char *env, double value, long pos)
{
  static const char *const dn[] = { "B", "S" };
  const int64_t S = 70, dv[] = { 2, S };
  prob p;
  void *clean;
  size_t es, bytes, width, i, bad = 0, first = 0;
  char cfg[200];
  snprintf(cfg, sizeof cfg, "%s [%s%s%s], x[0][%ld][0] = %g", spec, be == ATTNC_BACKEND_CC ? "cc" : "tcc", env ? " " : "",
           env ? env : "", pos, value);
  if (env) putenv((char *)env);
  prob_init(&p, spec, be, dn, dv, 2, 5);
  prob_run(&p);
  es = attnc_dtype_size(p.out.dtype);
  bytes = p.n_out * es;
  width = (size_t)p.out.shape[2];
  clean = malloc(bytes);
  assert_non_null(clean);
  memcpy(clean, p.out.data, bytes);
  if (p.g->dtype == ATTNC_F32) ((float *)p.t[ATTNC_SLOT_X].data)[(size_t)pos * (size_t)p.t[ATTNC_SLOT_X].shape[2]] = (float)value;
  else ((double *)p.t[ATTNC_SLOT_X].data)[(size_t)pos * (size_t)p.t[ATTNC_SLOT_X].shape[2]] = value;
  prob_run(&p);
  for (i = 0; i < p.n_out; i++) {
    size_t b = i / (width * (size_t)S), row = (i / width) % (size_t)S;
    double v = out_at(&p, i);
    int depends = b == 0 && ((long)row == pos || key_visible(&p, (long)row, pos));
    /* Rows that see the poisoned key must be poisoned; other batch elements
     * must be untouched.  Rows of the same batch that cannot see it may be
     * either clean or NaN: a hidden key still meets a weight of exactly 0 in
     * the vectorised P.V tile, and 0 x NaN = NaN, as in PyTorch's masked
     * softmax followed by a full matmul (docs/reliability.md). */
    int ok = depends ? (isnan(value) ? isnan(v) : !isfinite(v))
           : b == 0 ? (isnan(v) || memcmp((char *)p.out.data + i * es, (char *)clean + i * es, es) == 0)
                    : memcmp((char *)p.out.data + i * es, (char *)clean + i * es, es) == 0;
    if (!ok && bad++ == 0) first = i;
  }
  if (bad) {
    size_t b = first / (width * (size_t)S), row = (first / width) % (size_t)S;
    fprintf(stderr, "  %s: %zu of %zu outputs wrong; first out[%zu] (batch %zu, row %zu, %s) = %g, clean %g\n", cfg, bad,
            p.n_out, first, b, row,
            b == 0 && ((long)row == pos || key_visible(&p, (long)row, pos)) ? "depends on it" : "independent of it",
            out_at(&p, first),
            p.out.dtype == ATTNC_F32 ? (double)((float *)clean)[first] : ((double *)clean)[first]);
  }
  free(clean);
  prob_free(&p);
  if (env) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(strchr(env, '=') - env), env);
    unsetenv(name);
  }
  return bad != 0;
}

/* Every configuration: the CPU's primitives (AVX-512 here when the CPU has
 * it), the plain C loops (ATTNC_NO_PRIMS), f64, both backends.  Returns the
 * number of wrong configurations. */
static int poison_all(double value)
{
  const double neg = isnan(value) ? value : -value;
  int bad = 0;
  bad += poison_x("mha x=B,S,16 heads=2 causal", ATTNC_BACKEND_TCC, NULL, value, 3);
  bad += poison_x("mha x=B,S,16 heads=2 causal", ATTNC_BACKEND_TCC, NULL, neg, 66);
  bad += poison_x("mha x=B,S,16 heads=2 causal", ATTNC_BACKEND_TCC, "ATTNC_NO_PRIMS=1", value, 3);
  bad += poison_x("mha x=B,S,16 heads=2 causal dtype=f64", ATTNC_BACKEND_TCC, NULL, neg, 5);
  bad += poison_x("gqa x=B,S,32 heads=4 kv_heads=2 causal", ATTNC_BACKEND_CC, NULL, value, 40);
  bad += poison_x("mha x=B,S,16 heads=2", ATTNC_BACKEND_TCC, NULL, value, 9);
  bad += poison_x("mha x=B,S,16 heads=2 gated", ATTNC_BACKEND_TCC, "ATTNC_NO_PRIMS=1", neg, 0);
  /* keys hidden by the mask (every fifth, from 3) or outside a window */
  bad += poison_x("mha x=B,S,16 heads=2 mask=key", ATTNC_BACKEND_TCC, NULL, value, 8);
  bad += poison_x("mha x=B,S,16 heads=2 mask=key", ATTNC_BACKEND_TCC, "ATTNC_NO_PRIMS=1", value, 8);
  bad += poison_x("mha x=B,S,16 heads=2 window=2,1", ATTNC_BACKEND_TCC, NULL, neg, 20);
  bad += poison_x("mha x=B,S,16 heads=2 window=2,1 dtype=f64", ATTNC_BACKEND_TCC, NULL, value, 20);
  return bad;
}

static char g_self[4096]; /* this program, for the re-runs with ATTNC_ISA set */

/* The primitives are chosen once per process: run the same configurations
 * in a fresh process of this program with ATTNC_ISA=isa (generic: the
 * portable ones; avx2: the AVX2 ones even on an AVX-512 CPU). */
static int poison_isa(const char *isa, const char *which)
{
  pid_t pid;
  int st;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("ATTNC_ISA", isa, 1);
    execl(g_self, g_self, which, (char *)NULL);
    _exit(127);
  }
  while (waitpid(pid, &st, 0) < 0) assert_int_equal(errno, EINTR);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static void test_validation_nan_propagates(void **state)
{
  int bad, generic, avx2;
  (void)state;
  bad = poison_all(NAN);
  generic = poison_isa("generic", "--poison-nan");
  avx2 = poison_isa("avx2", "--poison-nan");
  if (bad || generic || avx2)
    fail_msg("%d configurations (and %d with ATTNC_ISA=generic, %d with ATTNC_ISA=avx2) do not propagate NaN as IEEE says (listed above)",
             bad, generic, avx2);
}

static void test_validation_inf_propagates(void **state)
{
  int bad, generic, avx2;
  (void)state;
  bad = poison_all(INFINITY);
  generic = poison_isa("generic", "--poison-inf");
  avx2 = poison_isa("avx2", "--poison-inf");
  if (bad || generic || avx2)
    fail_msg("%d configurations (and %d with ATTNC_ISA=generic, %d with ATTNC_ISA=avx2) do not propagate Inf as IEEE says (listed above)",
             bad, generic, avx2);
}

/* A -Inf logit bias hides a key (exp(-inf) = 0), like a mask: the result
 * matches the float64 reference; a NaN bias entry poisons its query row
 * and nothing else.  Returns 0, or 1 after printing what is wrong. */
static int bias_case(const char *spec, const char *env)
{
  static const char *const dn[] = { "B", "S" };
  static const int64_t dv[] = { 2, 20 };
  prob p;
  double *want, *got, ratio;
  size_t where, nb, i, n, at = (((size_t)1 * 2 + 0) * 20 + 4) * 20 + 9, w = 16;
  int f64 = strstr(spec, "f64") != NULL, bad = 0;
  if (env) putenv((char *)env);
  prob_init(&p, spec, ATTNC_BACKEND_TCC, dn, dv, 2, 9);
  nb = tensor_count(&p.t[ATTNC_SLOT_BIAS]);
  for (i = 0; i < nb; i++) /* hide keys 2, 7, 12, 17 from every query */
    if ((i % 20) % 5 == 2) {
      if (f64) ((double *)p.t[ATTNC_SLOT_BIAS].data)[i] = -INFINITY;
      else ((float *)p.t[ATTNC_SLOT_BIAS].data)[i] = -INFINITY;
    }
  prob_sync_ref(&p, ATTNC_SLOT_BIAS);
  prob_run(&p);
  n = p.n_out;
  want = malloc(n * sizeof *want);
  got = malloc(n * sizeof *got);
  assert_non_null(want);
  assert_non_null(got);
  prob_reference(&p, want);
  for (i = 0; i < n; i++) got[i] = out_at(&p, i);
  ratio = tu_compare(got, want, n, f64 ? 1e-12 : 1e-5, f64 ? 1e-10 : 1e-4, &where);
  if (ratio > 1) {
    fprintf(stderr, "  %s%s%s: -inf bias: out[%zu] = %g, reference %g\n", spec, env ? " " : "", env ? env : "", where,
            got[where], want[where]);
    bad = 1;
  }
  /* NaN in bias[b=1][h=0][i=4][j=9]: row 4 of batch 1 is NaN, nothing else changes */
  if (f64) ((double *)p.t[ATTNC_SLOT_BIAS].data)[at] = NAN;
  else ((float *)p.t[ATTNC_SLOT_BIAS].data)[at] = NAN;
  prob_run(&p);
  for (i = 0; i < n && !bad; i++) {
    double v = out_at(&p, i);
    int row4b1 = i / w == 20 + 4;
    if (row4b1 ? !isnan(v) : v != got[i]) {
      fprintf(stderr, "  %s%s%s: NaN bias at (1, 0, 4, 9): out[%zu] (row %zu) = %g, before %g\n", spec, env ? " " : "",
              env ? env : "", i, i / w, v, got[i]);
      bad = 1;
    }
  }
  free(want);
  free(got);
  prob_free(&p);
  if (env) unsetenv("ATTNC_NO_PRIMS");
  return bad;
}

static void test_validation_inf_bias_hides_keys(void **state)
{
  int bad = 0;
  (void)state;
  bad += bias_case("mha x=B,S,16 heads=2 bias=B,2,S,S dtype=f64", NULL);
  bad += bias_case("mha x=B,S,16 heads=2 bias=B,2,S,S", "ATTNC_NO_PRIMS=1");
  bad += bias_case("mha x=B,S,16 heads=2 bias=B,2,S,S", NULL);
  if (bad) fail_msg("%d configurations mishandle -inf or NaN logit biases (listed above)", bad);
}

/* ------------------------------------------------------------------ */
/* limits                                                                */

/* Run fn in a child process whose address space is capped at what it uses
 * now plus 768 MiB, so an allocation in proportion to a bogus size fails
 * (and the child reports the message it got instead of the expected one).
 * Under AddressSanitizer, whose shadow memory needs the whole address
 * space, the cap is left off and only the messages are checked. */
static void in_capped_child(void (*fn)(char *msg, size_t n))
{
  int fds[2], st;
  pid_t pid;
  char msg[4096];
  ssize_t got;
  size_t len = 0;
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    char out[4096] = "";
    close(fds[0]);
    if (!UNDER_ASAN) {
      FILE *f = fopen("/proc/self/status", "r");
      char line[256];
      long vm_kb = 0;
      struct rlimit rl;
      while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld kB", &vm_kb) == 1) break;
      if (f) fclose(f);
      rl.rlim_cur = rl.rlim_max = (rlim_t)vm_kb * 1024 + ((rlim_t)768 << 20);
      if (vm_kb <= 0 || setrlimit(RLIMIT_AS, &rl) != 0) snprintf(out, sizeof out, "cannot cap the address space");
    }
    if (!out[0]) fn(out, sizeof out);
    if (write(fds[1], out, strlen(out)) < 0) _exit(3);
    _exit(out[0] ? 1 : 0);
  }
  close(fds[1]);
  while ((got = read(fds[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)got;
  msg[len] = '\0';
  close(fds[0]);
  while (waitpid(pid, &st, 0) < 0) assert_int_equal(errno, EINTR);
  if (!WIFEXITED(st)) fail_msg("the capped child died with signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  if (WEXITSTATUS(st) != 0) fail_msg("%s", msg);
}

/* In a child: report the first failed expectation into msg. */
#define CHILD_EXPECT(cond, ...) do { if (!(cond) && !msg[0]) snprintf(msg, n, __VA_ARGS__); } while (0)

static void spec_limits_child(char *msg, size_t n)
{
  static const struct { const char *spec, *want; } CASES[] = {
    { "mha x=2000000000,2000000000,64 heads=4", "more than the limit 2^40" },
    { "mha x=65536,65536,65536,65536,64 heads=4", "more than the limit 2^40" },
    { "mha x=B,S,64 kv=B,2000000000,2000000000,64 heads=4", "more than the limit 2^40" },
    { "mha x=B,S,64 heads=4 bias=1,4,1048576,1048576", "bias='1,4,1048576,1048576' has 4.4e+12 elements" },
    { "mha x=0,5,64 heads=4", "dim '0' of x must be positive" },
    { "mha x=B,-5,64 heads=4", "dim '-5' of x must be positive" },
    { "mha x=B,S,99999999999999999999 heads=4", "out of range" },
    { "mha x=B,S,2147483648 heads=4", "too large" },
    { "mha x=B,S,4194304 heads=4", "width 4194304 is more than the limit" },
    { "mha x=B,S,64 heads=4 head_dim=100000000", "head_dim must be between 1 and 4096" },
    { "mha x=B,S,64 heads=4 head_dim=0", "head_dim must be between 1 and 4096" },
    { "mha x=B,S,64 heads=100000000", "heads must be between 1 and 4096" },
    { "mha x=B,S,64 heads=-4", "heads" },
    { "mha x=B,S,64 heads=4 heads=4", "duplicate key 'heads'" },
    { "mha x=B,S,64 x=B,S,64 heads=4", "duplicate key 'x'" },
    { "mha x=B,S,64 heads=4 causal causal", "duplicate key 'causal'" },
    { "mha x=B,S,64 heads=4 window=99999999999,1", "window '99999999999' is out of range" },
    { "mha x=1,2,3,4,5,6,7,64 heads=4", "at most 6 are supported" },
    { "mode=core q=B,4,S,99999 kv=B,4,T,99999", "head_dim 99999 is more than the limit 4096" },
  };
  size_t i;
  for (i = 0; i < sizeof CASES / sizeof CASES[0] && !msg[0]; i++) {
    attnc_error e;
    attnc_kernel *k = attnc_compile(CASES[i].spec, NULL, &e);
    CHILD_EXPECT(k == NULL, "%s: compiled", CASES[i].spec);
    if (k) { attnc_release(k); continue; }
    CHILD_EXPECT(e.code == ATTNC_ESPEC, "%s: status %d (%s), expected ESPEC", CASES[i].spec, (int)e.code, e.message);
    CHILD_EXPECT(strstr(e.message, CASES[i].want) != NULL, "%s: message \"%s\" lacks \"%s\"", CASES[i].spec, e.message,
                 CASES[i].want);
    CHILD_EXPECT(e.line >= 1 && e.col >= 1, "%s: no position", CASES[i].spec);
  }
  /* explain with bogus dims computes sizes but allocates nothing for them */
  if (!msg[0]) {
    const char *dn[] = { "B", "S" };
    int64_t dv[] = { 2147483647, 2147483647 };
    char *text = NULL;
    attnc_error e;
    attnc_status s = attnc_explain("mha x=B,S,64 heads=4", NULL, dn, dv, 2, &text, &e);
    CHILD_EXPECT(s == ATTNC_OK || (s != ATTNC_ENOMEM && strlen(e.message) > 10),
                 "explain with huge dims: status %d: %s", (int)s, e.message);
    free(text);
  }
}

static void test_validation_spec_limits(void **state)
{
  (void)state;
  in_capped_child(spec_limits_child);
}

/* Shapes too large for any machine are refused by name before anything is
 * read or allocated: the tensors below have a few bytes of real data. */
static void run_limits_child(char *msg, size_t n)
{
  attnc_error e;
  attnc_tensor out;
  attnc_status s;
  float obuf[64];
  /* 1. x claims (2^31-1, 2^31-1, 8): 3.7e19 elements */
  {
    attnc_kernel *k = attnc_compile("mha x=B,S,8 heads=2", NULL, &e);
    attnc_bindings *b = attnc_bindings_new(k);
    attnc_tensor x = T(ATTNC_F32, zeros, 2147483647, 2147483647, 8);
    bind_mha8_weights(b, -1);
    attnc_bind(b, "x", &x, &e);
    s = attnc_output_shape(b, &out, &e);
    CHILD_EXPECT(s == ATTNC_EBIND && strstr(e.message, "tensor 'x'") && strstr(e.message, "(2147483647, 2147483647, 8)") &&
                 strstr(e.message, "limit 2^40"),
                 "huge x at output_shape: status %d: %s", (int)s, e.message);
    out = T(ATTNC_F32, obuf, 2147483647, 2147483647, 8);
    s = attnc_run(b, &out, &e);
    CHILD_EXPECT(s == ATTNC_EBIND && strstr(e.message, "tensor 'x'") && strstr(e.message, "limit 2^40"),
                 "huge x at run: status %d: %s", (int)s, e.message);
    /* the same through a dim bound explicitly */
    x = T(ATTNC_F32, zeros, 1048577, 1048576, 8);
    attnc_bind(b, "x", &x, &e);
    attnc_bind_dim(b, "S", 1048576, &e);
    s = attnc_output_shape(b, &out, &e);
    CHILD_EXPECT(s == ATTNC_EBIND && strstr(e.message, "tensor 'x'") && strstr(e.message, "limit 2^40"),
                 "x of 2^43 elements: status %d: %s", (int)s, e.message);
    attnc_bindings_free(b);
    attnc_release(k);
  }
  /* 2. every tensor within the 2^40 limit, but the projected q would not
   *    be: 2^40 rows of width 1 times heads * head_dim = 2^24 (the
   *    kernel's scratch would overflow a 64-bit byte count). */
  if (!msg[0]) {
    attnc_kernel *k = attnc_compile("alphafold x=B,S,1 heads=4096 head_dim=4096 out_bias=false", NULL, &e);
    attnc_bindings *b;
    attnc_tensor x = T(ATTNC_F32, zeros, 1048576, 1048576, 1), wq = T(ATTNC_F32, zeros, 16777216, 1),
                 wo = T(ATTNC_F32, zeros, 1, 16777216);
    CHILD_EXPECT(k != NULL, "the wide spec does not compile: %s", e.message);
    if (!k) return;
    b = attnc_bindings_new(k);
    attnc_bind(b, "x", &x, &e);
    attnc_bind(b, "linear_q.weight", &wq, &e);
    attnc_bind(b, "linear_k.weight", &wq, &e);
    attnc_bind(b, "linear_v.weight", &wq, &e);
    attnc_bind(b, "linear_o.weight", &wo, &e);
    s = attnc_output_shape(b, &out, &e);
    CHILD_EXPECT(s == ATTNC_EBIND && strstr(e.message, "limit 2^40"), "wide q at output_shape: status %d: %s", (int)s,
                 e.message);
    out = T(ATTNC_F32, obuf, 1048576, 1048576, 1);
    s = attnc_run(b, &out, &e);
    CHILD_EXPECT(s == ATTNC_EBIND && strstr(e.message, "limit 2^40"), "wide q at run: status %d: %s", (int)s, e.message);
    attnc_bindings_free(b);
    attnc_release(k);
  }
  /* 3. a mask whose shape is bogus is refused before it is converted */
  if (!msg[0]) {
    attnc_kernel *k = attnc_compile("mha x=B,S,8 heads=2 mask=key", NULL, &e);
    attnc_bindings *b = attnc_bindings_new(k);
    attnc_tensor x = T(ATTNC_F32, zeros, 2, 3, 8), m = T(ATTNC_U8, zeros, 2, 3);
    bind_mha8_weights(b, -1);
    attnc_bind(b, "x", &x, &e);
    m.shape[1] = 2147483647;
    attnc_bind(b, "mask", &m, &e);
    s = attnc_output_shape(b, &out, &e);
    CHILD_EXPECT(s == ATTNC_EBIND && strstr(e.message, "mask") && strstr(e.message, "Sk = 3"), "long mask: status %d: %s",
                 (int)s, e.message);
    attnc_bindings_free(b);
    attnc_release(k);
  }
}

static void test_validation_run_limits(void **state)
{
  (void)state;
  in_capped_child(run_limits_child);
}

static int setup(void **state)
{
  const char *tmp = getenv("TMPDIR");
  (void)state;
  snprintf(g_dir, sizeof g_dir, "%s/attnc-validation-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
  char cmd[700];
  (void)state;
  if (getenv("ATTNC_TEST_KEEP")) return 0;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_validation_shape_mismatch),
    cmocka_unit_test(test_validation_one_role_one_name),
    cmocka_unit_test(test_validation_dtype_mismatch),
    cmocka_unit_test(test_validation_missing_tensors),
    cmocka_unit_test(test_validation_named_dim_two_sizes),
    cmocka_unit_test(test_validation_misaligned_by_one_element),
    cmocka_unit_test(test_validation_misaligned_by_one_byte),
    cmocka_unit_test(test_validation_safetensors_malformed),
    cmocka_unit_test(test_validation_safetensors_every_prefix_and_byte),
    cmocka_unit_test(test_validation_cli_refuses_bad_files),
    cmocka_unit_test(test_validation_hostile_specs),
    cmocka_unit_test(test_validation_extra_tensors_ignored),
    cmocka_unit_test(test_validation_nan_propagates),
    cmocka_unit_test(test_validation_inf_propagates),
    cmocka_unit_test(test_validation_inf_bias_hides_keys),
    cmocka_unit_test(test_validation_spec_limits),
    cmocka_unit_test(test_validation_run_limits),
  };
  ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (n > 0) g_self[n] = '\0';
  else snprintf(g_self, sizeof g_self, "%s", argv[0]);
  if (argc == 2 && (strcmp(argv[1], "--poison-nan") == 0 || strcmp(argv[1], "--poison-inf") == 0)) {
    fprintf(stderr, "  (ATTNC_ISA=%s, primitives %s)\n", getenv("ATTNC_ISA") ? getenv("ATTNC_ISA") : "", attnc_isa());
    return poison_all(strcmp(argv[1], "--poison-nan") == 0 ? NAN : INFINITY);
  }
  return cmocka_run_group_tests(tests, setup, teardown);
}
