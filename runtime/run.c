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
    size_t n = 1;
    if (!b->k->gen.used[slot] || !b->from[slot] || slot == ATTNC_SLOT_MASK || t->dtype == kd || kd == ATTNC_I64 ||
        attnc_slot_is_cache(slot))
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
    attnc_convert(t->data, t->dtype, b->conv[slot], kd, n);
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

/* Pack the weights for the primitives (in f32) once; again only if rebound. */
static attnc_status pack_weights(attnc_bindings *b, attnc_args *args, attnc_error *err)
{
  static const int w[] = { ATTNC_SLOT_WQ, ATTNC_SLOT_WK, ATTNC_SLOT_WV, ATTNC_SLOT_WG, ATTNC_SLOT_WO };
  size_t i;
  for (i = 0; i < sizeof w / sizeof w[0]; i++) {
    int slot = w[i];
    const attnc_tensor *t = &b->t[slot]; /* as bound; args->t[slot] holds it as the kernel reads it */
    if (!b->k->gen.used[slot]) continue;
    if (b->packed_from[slot] != t->data || !b->packed[slot]) {
      const long rows = (long)t->shape[0], cols = (long)t->shape[1];
      long n = attnc_prims_pack_size(rows, cols);
      void *p = NULL;
      float *f32 = NULL;
      /* 64-byte aligned, so that no vector load of a panel spans two cache
       * lines (malloc gives 16 bytes past a page for a large block) */
      if (posix_memalign(&p, 64, sizeof(float) * (size_t)n) != 0) p = NULL;
      if (p && attnc_slot_dtype(&b->k->gen, slot) != ATTNC_F32 && !(f32 = weight_f32(b, args, slot, (size_t)rows, (size_t)cols))) {
        free(p);
        p = NULL;
      }
      if (!p) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory packing '%s'", attnc_slot_name(slot));
      free(b->packed[slot]);
      attnc_prims_pack(f32 ? f32 : (const float *)args->t[slot], rows, cols, p);
      free(f32);
      b->packed[slot] = p;
      b->packed_from[slot] = t->data;
    }
    args->packed[slot] = b->packed[slot];
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

attnc_status attnc_run(attnc_bindings *b, attnc_tensor *out, attnc_error *err)
{
  attnc_tensor want;
  attnc_args args;
  long dims[64], bytes;
  attnc_status s;
  int i, phase;
  if (!out) return attnc_err_set(err, ATTNC_EARG, "attnc_run needs an output tensor");
  s = attnc_output_shape(b, &want, err);
  if (s != ATTNC_OK) return s;
  if (out->dtype != want.dtype || out->rank != want.rank)
    return attnc_err_set(err, ATTNC_EBIND, "output must be %s with %d dims", attnc_dtype_name(want.dtype), want.rank);
  for (i = 0; i < want.rank; i++)
    if (out->shape[i] != want.shape[i]) {
      char w[256];
      attnc_bindings_shape_text(want.shape, want.rank, w, sizeof w);
      return attnc_err_set(err, ATTNC_EBIND, "output axis %d is %lld but must be %lld: the output is %s", i,
                           (long long)out->shape[i], (long long)want.shape[i], w);
    }
  if (!out->data) return attnc_err_set(err, ATTNC_EARG, "output has no data");
  if ((s = attnc_bindings_check_aligned("the output", out, err)) != ATTNC_OK) return s;
  if ((s = attnc_bindings_check_outputs(b, err)) != ATTNC_OK) return s;
  if (b->k->gen.has_cache && (s = check_cache_len(b, err)) != ATTNC_OK) return s;
  /* from here on nothing fails but running out of memory, which the
   * allocations below report before the kernel writes anything */
  memset(&args, 0, sizeof args);
  for (i = 0; i < b->k->gen.ndims && i < 64; i++) dims[i] = (long)b->dims[i];
  args.dims = dims;
  for (i = 0; i < ATTNC_SLOT_COUNT; i++)
    if (b->k->gen.used[i] && b->from[i]) args.t[i] = b->t[i].data; /* an unbound optional input stays NULL */
  if ((s = convert_tensors(b, &args, err)) != ATTNC_OK) return s;
  if (b->k->gen.has_positions) { /* the dense int64 copies attnc_output_shape made */
    args.t[ATTNC_SLOT_Q_POS] = b->from[ATTNC_SLOT_Q_POS] ? b->pos[0] : NULL;
    args.t[ATTNC_SLOT_K_POS] = b->from[ATTNC_SLOT_K_POS] ? b->pos[1] : NULL;
  }
  if (b->k->gen.has_mask) {
    args.t[ATTNC_SLOT_MASK] = b->mask_u8;
    memcpy(args.mask_stride, b->mask_stride, sizeof args.mask_stride);
  }
  if (b->k->gen.has_cache) /* the dense int64 copy attnc_output_shape made; the caches are bound as they are */
    args.t[ATTNC_SLOT_CACHE_LEN] = b->cache_len;
  args.out = out->data;
  if (b->k->gen.has_lse) args.lse = b->lse.data;
  if (b->k->gen.has_attn) args.attn = b->attn.data;
  if (b->k->gen.plain) /* the plain form: one call, on this thread, its own buffers */
    return b->k->fns.run(&args) == 0 ? ATTNC_OK : attnc_err_set(err, ATTNC_ENOMEM, "out of memory in the plain kernel");
  if (b->k->gen.dtype != ATTNC_F64 && !getenv("ATTNC_NO_PRIMS")) { /* the primitives compute in f32 */
    args.prims = attnc_prims_get();
    if (!b->k->gen.core && (s = pack_weights(b, &args, err)) != ATTNC_OK) return s;
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
