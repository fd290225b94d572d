/* Running bound kernels: weights packed for the primitives, scratch,
 * and each phase's items handed to the thread pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "prims.h"

const char *attnc_isa(void) { return attnc_prims_get()->isa; }

struct run_ctx {
  const attnc_kernel_fns *fns;
  const attnc_args *args;
  int phase;
};

static void run_item(void *ctx, long item, int thread)
{
  const struct run_ctx *c = ctx;
  c->fns->phase(c->args, c->phase, item, item + 1, thread);
}

/* Tensors bound in another floating dtype, in the one the kernel reads
 * them in (attnc_slot_dtype): weights once per binding (like packing:
 * rebind after changing the data), inputs on every run, since their data
 * may change between runs. */
static attnc_status convert_tensors(attnc_bindings *b, attnc_args *args, attnc_error *err)
{
  int slot, a;
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    const attnc_tensor *t = &b->t[slot];
    const attnc_dtype kd = attnc_slot_dtype(&b->k->gen, slot);
    /* a weight the spec stores narrower than the kernel holds it: rounded
     * to that storage first, unless given in it */
    const attnc_dtype sd = attnc_slot_store_dtype(&b->k->gen, slot);
    const int narrow = sd != kd && t->dtype != sd;
    size_t n = 1;
    if (!b->k->gen.used[slot] || !b->from[slot] || slot == ATTNC_SLOT_MASK || (t->dtype == kd && !narrow) ||
        kd == ATTNC_I64 || attnc_slot_is_cache(slot))
      continue; /* (the caches are bound in their own dtype: attnc_bind checks) */
    if (attnc_slot_is_weight(slot) && b->conv_from[slot] == t->data && b->conv[slot]) {
      args->t[slot] = b->conv[slot];
      continue;
    }
    for (a = 0; a < t->rank; a++) n *= (size_t)t->shape[a];
    if (n > b->conv_n[slot] || !b->conv[slot]) {
      void *p = malloc(attnc_dtype_size(kd) * (n > 0 ? n : 1));
      if (!p) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory converting '%s' to %s", b->from[slot], attnc_dtype_name(kd));
      free(b->conv[slot]);
      b->conv[slot] = p;
      b->conv_n[slot] = n;
    }
    if (narrow) { /* weights only: converted once per binding */
      void *tmp = malloc(attnc_dtype_size(sd) * (n > 0 ? n : 1));
      if (!tmp) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory converting '%s' to %s", b->from[slot], attnc_dtype_name(sd));
      attnc_convert(t->data, t->dtype, tmp, sd, n);
      attnc_convert(tmp, sd, b->conv[slot], kd, n);
      free(tmp);
    } else {
      attnc_convert(t->data, t->dtype, b->conv[slot], kd, n);
    }
    b->conv_from[slot] = t->data;
    args->t[slot] = b->conv[slot];
  }
  return ATTNC_OK;
}

/* A weight matrix as f32 for packing: converted from a 16-bit dtype, or
 * dequantised (q * its row's scale) from int8.  malloc'd. */
static float *weight_f32(const attnc_bindings *b, const attnc_args *args, int slot, size_t rows, size_t cols)
{
  const attnc_dtype wd = attnc_slot_dtype(&b->k->gen, slot);
  const size_t n = rows * cols;
  float *w = malloc(sizeof(float) * (n > 0 ? n : 1));
  size_t r, c;
  if (!w) return NULL;
  if (wd == ATTNC_I8) {
    const int8_t *q = args->t[slot];
    const float *scale = args->t[attnc_slot_scale(slot)];
    for (r = 0; r < rows; r++)
      for (c = 0; c < cols; c++) w[r * cols + c] = (float)q[r * cols + c] * scale[r];
  } else {
    attnc_convert(args->t[slot], wd, w, ATTNC_F32, n);
  }
  return w;
}

/* Pack the weights for the primitives once; again only if rebound: int8
 * weights (weights=int8) kept int8 with their scales for linear_q8, bf16
 * weights of a bf16 kernel kept bf16 for linear_bf16, any other as f32
 * for linear.  f32_panels: every float weight as f32 panels (a bf16
 * kernel's backward computes in f32), kept apart from the forward's. */
static attnc_status pack_weights(attnc_bindings *b, attnc_args *args, int f32_panels, attnc_error *err)
{
  float **packed = f32_panels ? b->packed32 : b->packed;
  const void **packed_from = f32_panels ? b->packed32_from : b->packed_from;
  static const int w[] = { ATTNC_SLOT_WQ, ATTNC_SLOT_WK, ATTNC_SLOT_WV, ATTNC_SLOT_WG, ATTNC_SLOT_WO };
  size_t i;
  for (i = 0; i < sizeof w / sizeof w[0]; i++) {
    int slot = w[i];
    const attnc_tensor *t = &b->t[slot]; /* as bound; args->t[slot] holds it as the kernel reads it */
    if (!b->k->gen.used[slot]) continue;
    if (packed_from[slot] != t->data || !packed[slot]) {
      const long rows = (long)t->shape[0], cols = (long)t->shape[1];
      const attnc_dtype wd = attnc_slot_dtype(&b->k->gen, slot);
      const int q8 = wd == ATTNC_I8, w16 = wd == ATTNC_BF16 && b->k->gen.dtype == ATTNC_BF16 && !f32_panels;
      size_t bytes = q8    ? (size_t)attnc_prims_pack_q8_size(rows, cols)
                     : w16 ? (size_t)attnc_prims_pack_bf16_size(rows, cols)
                           : sizeof(float) * (size_t)attnc_prims_pack_size(rows, cols);
      void *p = NULL;
      float *f32 = NULL;
      /* 64-byte aligned, so that no vector load of a panel spans two cache
       * lines (malloc gives 16 bytes past a page for a large block) */
      if (posix_memalign(&p, 64, bytes > 0 ? bytes : 64) != 0) p = NULL;
      if (p && !q8 && !w16 && wd != ATTNC_F32 &&
          !(f32 = weight_f32(b, args, slot, (size_t)rows, (size_t)cols))) {
        free(p);
        p = NULL;
      }
      if (!p) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory packing '%s'", attnc_slot_name(slot));
      free(packed[slot]);
      if (q8) attnc_prims_get()->pack_q8(args->t[slot], args->t[attnc_slot_scale(slot)], rows, cols, p);
      else if (w16) attnc_prims_pack_bf16(args->t[slot], rows, cols, p);
      else attnc_prims_pack(f32 ? f32 : (const float *)args->t[slot], rows, cols, p);
      free(f32);
      packed[slot] = p;
      packed_from[slot] = t->data;
    }
    args->packed[slot] = packed[slot];
  }
  return ATTNC_OK;
}

/* A cache spec: every cache_len[b] leaves room for the Sq new rows.
 * Checked before the kernel starts, so a bad length writes nothing. */
static attnc_status check_cache_len(const attnc_bindings *b, attnc_error *err)
{
  const attnc_gen *g = &b->k->gen;
  const int64_t *dims = attnc_bindings_dims(b);
  const attnc_shape *bs = &g->shape[ATTNC_SLOT_CACHE_LEN], *x = &g->shape[ATTNC_SLOT_X];
  const int64_t sq = x->dim[g->axis] > 0 ? x->dim[g->axis] : dims[-x->dim[g->axis] - 1];
  const int64_t cap = g->cache_cap > 0 ? g->cache_cap : dims[-g->cache_cap - 1];
  size_t i, n = 1;
  int a;
  for (a = 0; a < bs->rank; a++) n *= (size_t)(bs->dim[a] > 0 ? bs->dim[a] : dims[-bs->dim[a] - 1]);
  for (i = 0; i < n; i++) {
    const long long len = b->cache_len[i];
    char at[256];
    size_t rest = i, p = 0;
    if (len >= 0 && len <= cap - sq) continue;
    /* name the batch element: its index over the batch axes */
    at[0] = '\0';
    if (bs->rank > 0) {
      int64_t idx[ATTNC_MAX_RANK];
      for (a = bs->rank - 1; a >= 0; a--) {
        const int64_t d = bs->dim[a] > 0 ? bs->dim[a] : dims[-bs->dim[a] - 1];
        idx[a] = (int64_t)(rest % (size_t)d);
        rest /= (size_t)d;
      }
      p = (size_t)snprintf(at, sizeof at, "[");
      for (a = 0; a < bs->rank && p < sizeof at; a++)
        p += (size_t)snprintf(at + p, sizeof at - p, "%s%lld", a ? ", " : "", (long long)idx[a]);
      if (p < sizeof at) snprintf(at + p, sizeof at - p, "]");
    }
    if (len < 0)
      return attnc_err_set(err, ATTNC_EBIND,
                           "cache_len%s = %lld is negative: it counts the cache positions already filled (0 for an "
                           "empty cache); nothing was run and the caches are unchanged", at, len);
    return attnc_err_set(err, ATTNC_EBIND,
                         "cache_len%s = %lld leaves no room for the %lld new rows of x: %lld + %lld > CAP = %lld; nothing "
                         "was run and the caches are unchanged: start a new sequence (cache_len 0), give the cache more "
                         "room (a larger CAP), or pass fewer rows", at, len, (long long)sq, len, (long long)sq, (long long)cap);
  }
  return ATTNC_OK;
}

/* out against the shape the bindings give (which checks every binding),
 * and the other outputs bound: what attnc_run and attnc_grad both need
 * before anything is written.  *want gets out's dtype and shape. */
static attnc_status check_run(attnc_bindings *b, const char *fn, attnc_tensor *out, attnc_tensor *want, attnc_error *err)
{
  attnc_status s;
  int i;
  if (!out) return attnc_err_set(err, ATTNC_EARG, "%s needs an output tensor", fn);
  s = attnc_output_shape(b, want, err);
  if (s != ATTNC_OK) return s;
  if (out->dtype != want->dtype || out->rank != want->rank)
    return attnc_err_set(err, ATTNC_EBIND, "output must be %s with %d dims", attnc_dtype_name(want->dtype), want->rank);
  for (i = 0; i < want->rank; i++)
    if (out->shape[i] != want->shape[i]) {
      char w[256];
      attnc_bindings_shape_text(want->shape, want->rank, w, sizeof w);
      return attnc_err_set(err, ATTNC_EBIND, "output axis %d is %lld but must be %lld: the output is %s", i,
                           (long long)out->shape[i], (long long)want->shape[i], w);
    }
  if (!out->data) return attnc_err_set(err, ATTNC_EARG, "output has no data");
  if ((s = attnc_bindings_check_aligned("the output", out, err)) != ATTNC_OK) return s;
  if ((s = attnc_bindings_check_outputs(b, err)) != ATTNC_OK) return s;
  if (b->k->gen.has_cache && (s = check_cache_len(b, err)) != ATTNC_OK) return s;
  return ATTNC_OK;
}

/* The arguments of one run, tensors as the kernel reads them (converted
 * where bound in another dtype); dims must outlive args. */
static attnc_status build_args(attnc_bindings *b, attnc_tensor *out, attnc_args *args, long *dims, attnc_error *err)
{
  attnc_status s;
  int i;
  memset(args, 0, sizeof *args);
  for (i = 0; i < b->k->gen.ndims && i < 64; i++) dims[i] = (long)b->dims[i];
  args->dims = dims;
  for (i = 0; i < ATTNC_SLOT_COUNT; i++)
    if (b->k->gen.used[i] && b->from[i]) args->t[i] = b->t[i].data; /* an unbound optional input stays NULL */
  if ((s = convert_tensors(b, args, err)) != ATTNC_OK) return s;
  if (b->k->gen.has_positions) { /* the dense int64 copies attnc_output_shape made */
    args->t[ATTNC_SLOT_Q_POS] = b->from[ATTNC_SLOT_Q_POS] ? b->pos[0] : NULL;
    args->t[ATTNC_SLOT_K_POS] = b->from[ATTNC_SLOT_K_POS] ? b->pos[1] : NULL;
  }
  if (b->k->gen.has_mask) {
    args->t[ATTNC_SLOT_MASK] = b->mask_u8;
    memcpy(args->mask_stride, b->mask_stride, sizeof args->mask_stride);
  }
  if (b->k->gen.has_cache) /* the dense int64 copy attnc_output_shape made; the caches are bound as they are */
    args->t[ATTNC_SLOT_CACHE_LEN] = b->cache_len;
  args->out = out->data;
  if (b->k->gen.has_lse) args->lse = b->lse.data;
  if (b->k->gen.has_attn) args->attn = b->attn.data;
  args->seed = b->seed;
  args->nthreads = 1;
  return ATTNC_OK;
}

attnc_status attnc_run(attnc_bindings *b, attnc_tensor *out, attnc_error *err)
{
  attnc_tensor want;
  attnc_args args;
  long dims[64], bytes;
  attnc_status s;
  int phase;
  attnc_err_clear(err);
  if (!b) return attnc_err_set(err, ATTNC_EARG, "attnc_run needs bindings");
  if ((s = check_run(b, "attnc_run", out, &want, err)) != ATTNC_OK) return s;
  /* from here on nothing fails but running out of memory, which the
   * allocations below report before the kernel writes anything */
  if ((s = build_args(b, out, &args, dims, err)) != ATTNC_OK) return s;
  if (b->k->gen.plain) /* the plain form: one call, on this thread, its own buffers */
    return b->k->fns.run(&args) == 0 ? ATTNC_OK : attnc_err_set(err, ATTNC_ENOMEM, "out of memory in the plain kernel");
  if (b->k->gen.dtype != ATTNC_F64 && !getenv("ATTNC_NO_PRIMS")) { /* the primitives compute in f32 */
    args.prims = attnc_prims_get();
    if (!b->k->gen.core && (s = pack_weights(b, &args, 0, err)) != ATTNC_OK) return s;
  }
  args.nthreads = b->threads;
  bytes = b->k->fns.scratch_bytes(&args, args.nthreads);
  if (bytes < 0) return attnc_err_set(err, ATTNC_EBIND, "the kernel's scratch size overflows");
  if (bytes > b->scratch_bytes) {
    void *p = realloc(b->scratch, (size_t)bytes);
    if (!p) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory: the kernel needs %ld bytes of scratch", bytes);
    b->scratch = p;
    b->scratch_bytes = bytes;
  }
  args.scratch = b->scratch;
  for (phase = 0; phase < ATTNC_PHASES; phase++) {
    struct run_ctx ctx;
    long items = b->k->fns.phase_items(&args, phase);
    ctx.fns = &b->k->fns;
    ctx.args = &args;
    ctx.phase = phase;
    if (items > 0) attnc_pool_run(b->threads, items, run_item, &ctx);
  }
  return ATTNC_OK;
}

/* ---- training: attnc_grad ---- */

#define GRAD_SLOT_(name) ATTNC_SLOT_##name,
static const int grad_slots[] = { ATTNC_GRAD_SLOT_LIST(GRAD_SLOT_) };

/* Room for n elements of es bytes at *p (which holds *cap): grown, never
 * shrunk, so that repeated calls on the same shapes allocate nothing. */
static int room(void **p, size_t *cap, size_t n, size_t es)
{
  void *q;
  if (*p && n <= *cap) return 1;
  if (!(q = malloc(es * (n > 0 ? n : 1)))) return 0;
  free(*p);
  *p = q;
  *cap = n;
  return 1;
}

static size_t elems(const int64_t *shape, int rank)
{
  size_t n = 1;
  int a;
  for (a = 0; a < rank; a++) n *= (size_t)shape[a];
  return n;
}

/* Expose the gradient t under name (copied: bound names live in the
 * bindings, which a rebind overwrites). */
static void expose(attnc_bindings *b, const char *name, const attnc_tensor *t)
{
  snprintf(b->grad_name[b->ngrad], sizeof b->grad_name[b->ngrad], "%s", name);
  b->grad_t[b->ngrad++] = *t;
}

/* in_proj_weight or in_proj_bias (which 0, 1): one gradient of the stacked
 * shape [q; k; v], each part copied from its slot's gradient.  A part bound
 * on its own (q_proj.weight beside in_proj_weight) was not read from the
 * stacked tensor, so its rows of the stacked gradient are 0. */
static attnc_status expose_stacked(attnc_bindings *b, int which, attnc_error *err)
{
  static const int ws[3] = { ATTNC_SLOT_WQ, ATTNC_SLOT_WK, ATTNC_SLOT_WV };
  static const int bs[3] = { ATTNC_SLOT_BQ, ATTNC_SLOT_BK, ATTNC_SLOT_BV };
  const char *name = which ? "in_proj_bias" : "in_proj_weight";
  const int *slots = which ? bs : ws;
  const attnc_tensor *bound = which ? &b->in_proj_b : &b->in_proj_w;
  const size_t es = attnc_dtype_size(b->k->gen.dtype);
  attnc_tensor t = *bound;
  size_t off = 0;
  int i;
  if (!room(&b->grad_stacked[which], &b->grad_stacked_n[which], elems(t.shape, t.rank), es))
    return attnc_err_set(err, ATTNC_ENOMEM, "out of memory for the gradient of %s", name);
  t.dtype = b->k->gen.dtype;
  t.data = b->grad_stacked[which];
  for (i = 0; i < 3; i++) { /* rows as split_in_proj splits them: H*c, G*c, G*c */
    const size_t n = (size_t)(i ? b->k->gen.kv_heads : b->k->gen.heads) * (size_t)b->k->gen.head_dim *
                     (which ? 1 : (size_t)b->k->gen.c_in) * es;
    if (b->from[slots[i]] && strcmp(b->from[slots[i]], name) == 0) memcpy((char *)t.data + off, b->grad[slots[i]], n);
    else memset((char *)t.data + off, 0, n);
    off += n;
  }
  expose(b, name, &t);
  return ATTNC_OK;
}

/* args->parallel of the backward: the kernel's items on the pool's
 * threads (pool points at the thread count). */
struct backward_ctx {
  void (*fn)(void *ctx, long item);
  void *ctx;
};

static void backward_item(void *ctx, long item, int thread)
{
  const struct backward_ctx *c = ctx;
  (void)thread;
  c->fn(c->ctx, item);
}

static void backward_items(void *pool, long items, void (*fn)(void *ctx, long item), void *ctx)
{
  struct backward_ctx c;
  c.fn = fn;
  c.ctx = ctx;
  attnc_pool_run((int)*(const long *)pool, items, backward_item, &c);
}

attnc_status attnc_grad(attnc_bindings *b, attnc_tensor *out, const attnc_tensor *dout, attnc_error *err)
{
  const attnc_gen *g;
  attnc_tensor want;
  attnc_args args;
  long dims[64];
  attnc_status s;
  size_t i, n;
  int a, stacked[2] = { 0, 0 };
  attnc_err_clear(err);
  if (!b) return attnc_err_set(err, ATTNC_EARG, "attnc_grad needs bindings");
  g = &b->k->gen;
  b->ngrad = 0;
  if (!g->train)
    return attnc_err_set(err, ATTNC_EARG,
                         "this kernel has no backward pass: its spec lacks the key train (%s); compile the spec with "
                         "train added to get gradients", g->canonical);
  if (!b->k->fns.backward)
    return attnc_err_set(err, ATTNC_EGEN, "the train kernel %s has no %s_backward: regenerate it (a bug: please report)",
                         g->name, g->name);
  if ((s = check_run(b, "attnc_grad", out, &want, err)) != ATTNC_OK) return s;
  /* dout: out's shape, any float dtype, converted to the kernel's */
  if (!dout) return attnc_err_set(err, ATTNC_EARG, "attnc_grad needs dout, the gradient of out");
  if (dout->rank != want.rank || !attnc_convert_takes(dout->dtype)) {
    char w[256];
    attnc_bindings_shape_text(want.shape, want.rank, w, sizeof w);
    return attnc_err_set(err, ATTNC_EBIND, "dout (the gradient of out) must have out's shape %s and a float dtype "
                         "(F32, F64, BF16 or F16), got %s with %d dims", w, attnc_dtype_name(dout->dtype), dout->rank);
  }
  for (a = 0; a < want.rank; a++)
    if (dout->shape[a] != want.shape[a]) {
      char w[256];
      attnc_bindings_shape_text(want.shape, want.rank, w, sizeof w);
      return attnc_err_set(err, ATTNC_EBIND, "dout axis %d is %lld but must be %lld: dout has out's shape %s", a,
                           (long long)dout->shape[a], (long long)want.shape[a], w);
    }
  n = elems(want.shape, want.rank);
  if (!dout->data && n > 0) return attnc_err_set(err, ATTNC_EARG, "dout has no data");
  if ((s = attnc_bindings_check_aligned("dout", dout, err)) != ATTNC_OK) return s;
  if ((s = build_args(b, out, &args, dims, err)) != ATTNC_OK) return s;
  /* the fast form's backward projects with the linear primitive on the
   * packed weights (f32), and runs its items on the pool */
  if (!g->plain) {
    if (g->dtype != ATTNC_F64 && !getenv("ATTNC_NO_PRIMS")) {
      args.prims = attnc_prims_get();
      if (!g->core && (s = pack_weights(b, &args, g->dtype == ATTNC_BF16, err)) != ATTNC_OK) return s;
    }
    args.nthreads = b->threads;
    args.parallel = backward_items;
    args.pool = &args.nthreads;
  }
  args.dout = dout->data;
  if (dout->dtype != g->dtype) {
    if (!room(&b->dout_conv, &b->dout_n, n, attnc_dtype_size(g->dtype)))
      return attnc_err_set(err, ATTNC_ENOMEM, "out of memory converting dout to %s", attnc_dtype_name(g->dtype));
    attnc_convert(dout->data, dout->dtype, b->dout_conv, g->dtype, n);
    args.dout = b->dout_conv;
  }
  /* a dense buffer for every grad slot the kernel reads, bound or not:
   * the kernel writes each one */
  for (i = 0; i < sizeof grad_slots / sizeof grad_slots[0]; i++) {
    const int slot = grad_slots[i];
    const attnc_shape *sh = &g->shape[slot];
    size_t m = 1;
    if (!g->used[slot]) continue;
    for (a = 0; a < sh->rank; a++) m *= (size_t)(sh->dim[a] > 0 ? sh->dim[a] : b->dims[-sh->dim[a] - 1]);
    if (!room(&b->grad[slot], &b->grad_n[slot], m, attnc_dtype_size(g->dtype)))
      return attnc_err_set(err, ATTNC_ENOMEM, "out of memory for the gradient of %s (%zu values)", attnc_slot_name(slot), m);
    args.grad[slot] = b->grad[slot];
  }
  b->grad_scratch = b->k->fns.backward_bytes ? b->k->fns.backward_bytes(&args) : 0;
  if (!g->plain && b->grad_scratch > 0) { /* the fast form carves its buffers from one region the bindings keep */
    if (!room(&b->grad_work, &b->grad_work_n, (size_t)b->grad_scratch + 64, 1))
      return attnc_err_set(err, ATTNC_ENOMEM, "out of memory for the backward pass's %ld bytes of buffers", b->grad_scratch);
    args.grad_work = (char *)b->grad_work + (64 - (size_t)((uintptr_t)b->grad_work % 64)) % 64;
  }
  if (b->k->fns.backward(&args) != 0)
    return attnc_err_set(err, ATTNC_ENOMEM, "out of memory in the backward pass (it allocates %ld bytes besides the "
                         "gradients)", b->grad_scratch);
  /* by the names the tensors were bound under, in slot order; a stacked
   * in_proj_* once, where its first part is */
  for (i = 0; i < sizeof grad_slots / sizeof grad_slots[0]; i++) {
    const int slot = grad_slots[i];
    const char *from = b->from[slot];
    attnc_tensor t;
    if (!g->used[slot] || !from) continue;
    if (strcmp(from, "in_proj_weight") == 0 || strcmp(from, "in_proj_bias") == 0) {
      const int which = from[8] == 'b';
      if (!stacked[which] && (s = expose_stacked(b, which, err)) != ATTNC_OK) return s;
      stacked[which] = 1;
      continue;
    }
    t = b->t[slot]; /* the bound shape, which is the slot's: binding takes no other */
    t.dtype = g->dtype;
    t.data = b->grad[slot];
    expose(b, from, &t);
  }
  return ATTNC_OK;
}

long attnc_bindings_grad_bytes(const attnc_bindings *b)
{
  long n = 0;
  int i;
  if (!b) return 0;
  for (i = 0; i < ATTNC_SLOT_COUNT; i++)
    if (b->grad[i]) n += (long)(b->grad_n[i] * attnc_dtype_size(b->k->gen.dtype));
  for (i = 0; i < 2; i++)
    if (b->grad_stacked[i]) n += (long)(b->grad_stacked_n[i] * attnc_dtype_size(b->k->gen.dtype));
  if (b->dout_conv) n += (long)(b->dout_n * attnc_dtype_size(b->k->gen.dtype));
  return n;
}

long attnc_bindings_grad_scratch_bytes(const attnc_bindings *b) { return b ? b->grad_scratch : 0; }

const char *attnc_grad_name(const attnc_bindings *b, int i)
{
  return b && i >= 0 && i < b->ngrad ? b->grad_name[i] : NULL;
}

attnc_status attnc_grad_get(const attnc_bindings *b, const char *name, attnc_tensor *t, attnc_error *err)
{
  int i;
  attnc_err_clear(err);
  if (!b || !name || !t) return attnc_err_set(err, ATTNC_EARG, "attnc_grad_get needs bindings, a name and a tensor");
  for (i = 0; i < b->ngrad; i++)
    if (strcmp(b->grad_name[i], name) == 0) {
      *t = b->grad_t[i];
      return ATTNC_OK;
    }
  if (!b->k->gen.train)
    return attnc_err_set(err, ATTNC_EMISSING, "no gradient of '%s': the kernel has no backward pass (its spec lacks train)", name);
  if (b->ngrad == 0)
    return attnc_err_set(err, ATTNC_EMISSING, "no gradient of '%s': call attnc_grad first (a rebind forgets the gradients "
                         "of the last one)", name);
  return attnc_err_set(err, ATTNC_EMISSING, "no gradient of '%s': the last attnc_grad computed gradients of the tensors "
                       "bound (attnc_grad_name lists them), and '%s' is not one of them (the mask, positions, rope_freqs "
                       "and caches have none)", name, name);
}
