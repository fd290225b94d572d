/* The checker: one spec, random tensors, kernel vs check/reference.c;
 * in gradient mode, the kernel's gradients vs the reference's finite
 * differences. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "internal.h"
#include "reference.h"

static double uniform(uint64_t *s)
{
  /* xorshift64*: reproducible from the seed, no libc rand() state */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return (double)((*s * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* Element i of a floating or integer tensor, as a double (exact). */
static double value_at(const attnc_tensor *t, size_t i)
{
  double d;
  if (t->dtype == ATTNC_I8) return ((const int8_t *)t->data)[i];
  if (t->dtype == ATTNC_I32) return ((const int32_t *)t->data)[i];
  if (t->dtype == ATTNC_I64) return (double)((const int64_t *)t->data)[i];
  attnc_convert((const char *)t->data + i * attnc_dtype_size(t->dtype), t->dtype, &d, ATTNC_F64, 1);
  return d;
}

/* An output besides out (lse, attn): its shape, an F32 buffer bound to b
 * and a double buffer for the reference's values. */
struct extra_out {
  attnc_tensor t;
  void *mem;
  double *ref;
  size_t n;
};

static attnc_status bind_extra(attnc_bindings *b, const char *name, struct extra_out *x, attnc_error *err)
{
  attnc_status s = attnc_output_info(b, name, &x->t, err);
  int i;
  if (s != ATTNC_OK) return s;
  x->n = 1;
  for (i = 0; i < x->t.rank; i++) x->n *= (size_t)x->t.shape[i];
  x->t.data = x->mem = malloc(x->n * sizeof(float) + 1);
  x->ref = malloc(x->n * sizeof(double) + 1);
  if (!x->mem || !x->ref) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
  return attnc_bind_output(b, name, &x->t, err);
}

/* Compare an extra output (F32 whatever the dtype) with the reference,
 * within the dtype's bound or f32's, the looser; -inf, inf and NaN must
 * match.  Raises *worst; names the worst element in r->err past 1. */
static void compare_extra(const char *name, const struct extra_out *x, double atol, double rtol, double *worst,
                          checker_result *r)
{
  size_t j;
  for (j = 0; j < x->n; j++) {
    const double got = ((const float *)x->mem)[j], want = x->ref[j];
    const double tol = fmax(atol + rtol * fabs(want), 1e-5 + 1e-4 * fabs(want));
    const double d = (isinf(want) || isnan(want) || isnan(got)) ? (got == want || (isnan(got) && isnan(want)) ? 0 : INFINITY)
                                                                : fabs(got - want) / tol;
    if (d > *worst) {
      *worst = d;
      if (d > 1) snprintf(r->err.message, sizeof r->err.message, "%s element %zu is %.9g, the reference %.9g", name, j, got, want);
    }
  }
}

/* DESIGN.md's accuracy bounds for a kernel's dtype: NMSE at most nmse, and
 * every element within atol + a_rms * rms + rtol * |r| (rms: the root mean
 * square of the reference). */
void checker_bounds(attnc_dtype dt, double *nmse, double *atol, double *a_rms, double *rtol)
{
  *atol = *a_rms = 0;
  switch (dt) {
  case ATTNC_F64: *nmse = INFINITY; *a_rms = 1e-9; *rtol = 1e-9; break;
  case ATTNC_BF16: *nmse = 1e-4; *a_rms = 0.03; *rtol = 0.03; break;
  case ATTNC_F16: *nmse = 1e-5; *a_rms = 0.006; *rtol = 0.006; break;
  case ATTNC_I8: *nmse = 1e-3; *a_rms = 0.1; *rtol = 0.05; break; /* weights=int8 */
  default: *nmse = 1e-10; *atol = 1e-5; *rtol = 1e-4; break;
  }
}

struct buf {
  attnc_tensor t;
  void *mem; /* what t.data points into */
  double *ref;
};

/* ---- KV caches ------------------------------------------------------------ */

static int ref_kv_dtype(attnc_dtype dt)
{
  switch (dt) {
  case ATTNC_F32: return REF_KV_F32;
  case ATTNC_BF16: return REF_KV_BF16;
  case ATTNC_F16: return REF_KV_F16;
  case ATTNC_I8: return REF_KV_INT8;
  default: return REF_KV_F64;
  }
}

/* (batch elements, G, CAP, c) of a bound cache tensor; the rows are its
 * (batch element, G, CAP) prefix. */
static void cache_dims(const attnc_tensor *t, size_t *rows, size_t *cap, size_t *c)
{
  int a;
  *rows = 1;
  for (a = 0; a < t->rank - 1; a++) *rows *= (size_t)t->shape[a];
  *cap = (size_t)t->shape[t->rank - 2];
  *c = (size_t)t->shape[t->rank - 1];
}

/* int8 caches: the reference's values are q * the row's scale. */
static void dequantise_caches(struct buf *bufs)
{
  static const int PAIR[2][2] = { { ATTNC_SLOT_K_CACHE, ATTNC_SLOT_K_CACHE_SCALE }, { ATTNC_SLOT_V_CACHE, ATTNC_SLOT_V_CACHE_SCALE } };
  int i;
  for (i = 0; i < 2; i++) {
    struct buf *cb = &bufs[PAIR[i][0]], *sb = &bufs[PAIR[i][1]];
    size_t rows, cap, c, r, d;
    if (!cb->ref || !sb->ref || cb->t.dtype != ATTNC_I8) continue;
    cache_dims(&cb->t, &rows, &cap, &c);
    for (r = 0; r < rows; r++)
      for (d = 0; d < c; d++) cb->ref[r * c + d] *= sb->ref[r];
  }
}

/* The number of batch elements, and x's length on the attention axis. */
static size_t batch_elements(const attnc_gen *g, const attnc_tensor *x, int64_t *sq)
{
  size_t n = 1;
  int a;
  for (a = 0; a < x->rank - 1; a++)
    if (a != g->axis) n *= (size_t)x->shape[a];
  *sq = x->shape[g->axis];
  return n;
}

/* cache_len, bound as a scalar or with the batch axes aligned from the
 * right (size 1 broadcasting), as one double per batch element. */
static void dense_cache_len(const attnc_gen *g, const attnc_tensor *x, const attnc_tensor *t, double *out)
{
  int64_t sq, bshape[ATTNC_MAX_RANK];
  size_t n = batch_elements(g, x, &sq), e;
  int a, nb = 0;
  for (a = 0; a < x->rank - 1; a++)
    if (a != g->axis) bshape[nb++] = x->shape[a];
  for (e = 0; e < n; e++) {
    size_t rest = e, off = 0, stride = 1;
    int k;
    for (k = nb - 1; k >= 0; k--) { /* batch index k of element e, and its place in t */
      const size_t idx = rest % (size_t)bshape[k];
      const int ta = t->rank - (nb - k);
      rest /= (size_t)bshape[k];
      if (ta < 0) continue;
      off += (t->shape[ta] == 1 ? 0 : idx) * stride;
      stride *= (size_t)t->shape[ta];
    }
    out[e] = value_at(t, off);
  }
}

/* Random cache_len: in [0, CAP - Sq] per batch element, the ends included
 * for some seeds, never all equal when there are two elements and room;
 * I32 or I64; a scalar for a third of the seeds.  Its ref holds one value
 * per batch element, whatever the bound shape.  0 or -1 (out of memory). */
static int fill_cache_len(const attnc_gen *g, struct buf *bufs, const int64_t *shape, int rank, const checker_opts *o,
                          uint64_t *rng)
{
  struct buf *lb = &bufs[ATTNC_SLOT_CACHE_LEN];
  const attnc_tensor *kc = &bufs[ATTNC_SLOT_K_CACHE].t;
  int64_t sq, room;
  const size_t nb = batch_elements(g, &bufs[ATTNC_SLOT_X].t, &sq);
  const int scalar = o->cache_len_set || o->seed % 3 == 0, wide = (o->seed / 3) % 2;
  size_t n = 1, e;
  int a;
  room = kc->shape[kc->rank - 2] - sq;
  if (room < 0) room = 0; /* CAP < Sq: the run must refuse it */
  lb->ref = malloc(nb * sizeof(double) + 1);
  if (!lb->ref) return -1;
  for (e = 0; e < nb; e++) {
    int64_t len = (int64_t)((uniform(rng) * 0.5 + 0.5) * (double)(room + 1));
    lb->ref[e] = (double)(len > room ? room : len);
  }
  if (o->seed % 4 == 1) lb->ref[0] = (double)room; /* the run fills the cache */
  if (o->seed % 4 == 2) lb->ref[nb - 1] = 0;       /* the first run: an empty cache */
  if (nb > 1 && room > 0 && lb->ref[0] == lb->ref[nb - 1]) lb->ref[nb - 1] = (double)(((int64_t)lb->ref[0] + 1) % (room + 1));
  if (scalar)
    for (e = 0; e < nb; e++) lb->ref[e] = o->cache_len_set ? (double)o->cache_len : lb->ref[0];
  lb->t.dtype = wide ? ATTNC_I64 : ATTNC_I32;
  lb->t.rank = scalar ? 0 : rank;
  for (a = 0; a < lb->t.rank; a++) n *= (size_t)(lb->t.shape[a] = shape[a]);
  lb->mem = malloc(n * 8 + 1);
  if (!lb->mem) return -1;
  lb->t.data = lb->mem;
  for (e = 0; e < n; e++) {
    if (wide) ((int64_t *)lb->mem)[e] = (int64_t)lb->ref[e];
    else ((int32_t *)lb->mem)[e] = (int32_t)lb->ref[e];
  }
  return 0;
}

/* Fill a tensor with values in [-amp, amp] (or 0/1 keeps for a mask). */
/* Tensors start on a 64-byte boundary, as a caller who cares for speed
 * allocates them (a vector load then never spans two cache lines), or
 * `misalign` elements past one, to test that nothing needs it. */
static int fill(struct buf *bf, attnc_dtype dt, int rank, const int64_t *shape, double amp, double keep, int misalign,
                uint64_t *rng)
{
  size_t n = 1, i;
  int a;
  bf->t.dtype = dt;
  bf->t.rank = rank;
  for (a = 0; a < rank; a++) {
    bf->t.shape[a] = shape[a];
    n *= (size_t)shape[a];
  }
  if (posix_memalign(&bf->mem, 64, (n + (size_t)misalign) * attnc_dtype_size(dt) + 1) != 0) bf->mem = NULL;
  bf->t.data = bf->mem ? (char *)bf->mem + (size_t)misalign * attnc_dtype_size(dt) : NULL;
  bf->ref = malloc(n * sizeof(double) + 1);
  if (!bf->t.data || !bf->ref) return -1;
  for (i = 0; i < n; i++) {
    double v = uniform(rng) * amp;
    if (keep > 0) v = (uniform(rng) * 0.5 + 0.5) < keep ? 1.0 : 0.0;
    if (dt == ATTNC_U8) {
      ((unsigned char *)bf->t.data)[i] = v != 0;
      bf->ref[i] = v;
    } else if (dt == ATTNC_I8) { /* an int8 weight: q in -127..127 (its scale multiplies ref later) */
      const double q = nearbyint(uniform(rng) * 127);
      ((int8_t *)bf->t.data)[i] = (int8_t)q;
      bf->ref[i] = q;
    } else { /* stored in dt (rounded), and the reference takes the stored value */
      attnc_convert(&v, ATTNC_F64, (char *)bf->t.data + i * attnc_dtype_size(dt), dt, 1);
      bf->ref[i] = value_at(&bf->t, i);
    }
  }
  return 0;
}

static const char *const WEIGHT_NAMES[] = {
  "linear_q.weight", "linear_q.bias", "linear_k.weight", "linear_k.bias", "linear_v.weight", "linear_v.bias",
  "linear_g.weight", "linear_g.bias", "linear_o.weight", "linear_o.bias",
  "linear_q.weight_scale", "linear_k.weight_scale", "linear_v.weight_scale", "linear_g.weight_scale",
  "linear_o.weight_scale"
};

/* The reference's view of a problem: its parameters and float64 tensors. */
static void make_problem(const attnc_gen *g, struct buf *bufs, uint64_t seed, ref_problem *p, ref_tensors *rt)
{
  int i;
  memset(p, 0, sizeof *p);
  memset(rt, 0, sizeof *rt);
  p->core = g->core;
  p->bshc = g->layout_bshc;
  if (g->core) {
    const attnc_tensor *q = &bufs[ATTNC_SLOT_Q].t, *kk = &bufs[ATTNC_SLOT_K].t;
    p->rank = q->rank;
    for (i = 0; i < q->rank; i++) { p->x[i] = (long)q->shape[i]; p->kv[i] = (long)kk->shape[i]; }
    rt->q = bufs[ATTNC_SLOT_Q].ref; rt->k = bufs[ATTNC_SLOT_K].ref; rt->v = bufs[ATTNC_SLOT_V].ref;
  } else {
    const attnc_tensor *x = &bufs[ATTNC_SLOT_X].t, *kv = g->self ? x : &bufs[ATTNC_SLOT_KV].t;
    p->rank = x->rank;
    for (i = 0; i < x->rank; i++) { p->x[i] = (long)x->shape[i]; p->kv[i] = (long)kv->shape[i]; }
    p->attn_axis = g->axis;
    rt->x = bufs[ATTNC_SLOT_X].ref;
    rt->kv = g->self ? NULL : bufs[ATTNC_SLOT_KV].ref;
    rt->wq = bufs[ATTNC_SLOT_WQ].ref; rt->bq = bufs[ATTNC_SLOT_BQ].ref;
    rt->wk = bufs[ATTNC_SLOT_WK].ref; rt->bk = bufs[ATTNC_SLOT_BK].ref;
    rt->wv = bufs[ATTNC_SLOT_WV].ref; rt->bv = bufs[ATTNC_SLOT_BV].ref;
    rt->wg = bufs[ATTNC_SLOT_WG].ref; rt->bg = bufs[ATTNC_SLOT_BG].ref;
    rt->wo = bufs[ATTNC_SLOT_WO].ref; rt->bo = bufs[ATTNC_SLOT_BO].ref;
  }
  p->H = g->heads; p->G = g->kv_heads; p->c = g->head_dim;
  p->qkv_bias = g->qkv_bias; p->out_bias = g->out_bias; p->gated = g->gated;
  p->global = g->global; p->global_masked = g->global_masked;
  if (g->has_bias) {
    const attnc_tensor *bt = &bufs[ATTNC_SLOT_BIAS].t;
    p->has_bias = 1; p->bias_rank = bt->rank;
    for (i = 0; i < bt->rank; i++) p->bias[i] = (long)bt->shape[i];
    rt->bias = bufs[ATTNC_SLOT_BIAS].ref;
  }
  if (g->has_mask) {
    const attnc_tensor *mt = &bufs[ATTNC_SLOT_MASK].t;
    p->has_mask = 1; p->mask_rank = mt->rank;
    for (i = 0; i < mt->rank; i++) p->mask[i] = (long)mt->shape[i];
    rt->mask = bufs[ATTNC_SLOT_MASK].ref;
  }
  p->causal = g->causal == ATTNC_CAUSAL_TOP_LEFT ? REF_CAUSAL_TOP_LEFT
              : g->causal == ATTNC_CAUSAL_BOTTOM_RIGHT ? REF_CAUSAL_BOTTOM_RIGHT : REF_CAUSAL_NONE;
  p->has_window = g->has_window; p->wl = (long)g->window_l; p->wr = (long)g->window_r;
  p->scale = g->scale;
  p->softcap = g->softcap;
  p->rope = g->rope == 1 ? REF_ROPE_NEOX : g->rope == 2 ? REF_ROPE_GPTJ : REF_ROPE_NONE;
  p->rope_dim = g->rope_dim;
  p->pe = g->pe ? REF_PE_SINUSOIDAL : REF_PE_NONE;
  if (bufs[ATTNC_SLOT_Q_POS].ref) {
    p->has_q_pos = 1;
    p->q_pos_rank = bufs[ATTNC_SLOT_Q_POS].t.rank;
    for (i = 0; i < p->q_pos_rank; i++) p->q_pos[i] = (long)bufs[ATTNC_SLOT_Q_POS].t.shape[i];
    rt->q_pos = bufs[ATTNC_SLOT_Q_POS].ref;
  }
  if (bufs[ATTNC_SLOT_K_POS].ref) {
    p->has_k_pos = 1;
    p->k_pos_rank = bufs[ATTNC_SLOT_K_POS].t.rank;
    for (i = 0; i < p->k_pos_rank; i++) p->k_pos[i] = (long)bufs[ATTNC_SLOT_K_POS].t.shape[i];
    rt->k_pos = bufs[ATTNC_SLOT_K_POS].ref;
  }
  p->rope_theta = g->rope_theta;
  rt->rope_freqs = bufs[ATTNC_SLOT_ROPE_FREQS].ref; /* NULL when not bound: all 1 */
  p->alibi = g->alibi;
  if (g->sinks) {
    p->sinks = 1;
    rt->sinks = bufs[ATTNC_SLOT_SINKS].ref;
  }
  p->empty_rows = g->empty_rows == ATTNC_EMPTY_UNIFORM ? REF_EMPTY_UNIFORM
                  : g->empty_rows == ATTNC_EMPTY_NAN ? REF_EMPTY_NAN : REF_EMPTY_ZERO;
  if (g->used[ATTNC_SLOT_K_CACHE]) { /* the caches as values, cache_len one per batch element */
    const attnc_tensor *kc = &bufs[ATTNC_SLOT_K_CACHE].t;
    p->cache = (long)kc->shape[kc->rank - 2];
    p->kv_dtype = ref_kv_dtype(kc->dtype);
    rt->k_cache = bufs[ATTNC_SLOT_K_CACHE].ref;
    rt->v_cache = bufs[ATTNC_SLOT_V_CACHE].ref;
    rt->cache_len = bufs[ATTNC_SLOT_CACHE_LEN].ref;
  }
  p->dropout = g->dropout;
  p->seed = seed;
}

struct checker_inputs {
  struct buf bufs[ATTNC_SLOT_COUNT];
  int64_t dims[64];
  void *before[ATTNC_SLOT_COUNT]; /* the caches and their scales as bound, before the kernel writes them */
};

void checker_inputs_free(checker_inputs *in)
{
  int slot;
  if (!in) return;
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    free(in->bufs[slot].mem);
    free(in->bufs[slot].ref);
    free(in->before[slot]);
  }
  free(in);
}

static size_t tensor_bytes(const attnc_tensor *t)
{
  size_t n = attnc_dtype_size(t->dtype);
  int a;
  for (a = 0; a < t->rank; a++) n *= (size_t)t->shape[a];
  return n;
}

/* A cache slot's random contents: k_cache, v_cache in kv_dtype (int8: q in
 * -127..127), values in [-1, 1] as projected keys have; int8 scales
 * between 0.5/127 and 1/127; cache_len as fill_cache_len says.  A copy of
 * each cache as bound is kept to find rows the run must not change. */
static int fill_cache_slot(const attnc_gen *g, checker_inputs *in, int slot, const int64_t *shape, int rank,
                           const checker_opts *o, uint64_t *rng)
{
  struct buf *bf = &in->bufs[slot];
  if (slot == ATTNC_SLOT_CACHE_LEN) return fill_cache_len(g, in->bufs, shape, rank, o, rng);
  if (slot == ATTNC_SLOT_K_CACHE || slot == ATTNC_SLOT_V_CACHE) {
    if (fill(bf, g->kv_dtype, rank, shape, 1.0, 0, o->misalign, rng) != 0) return -1;
  } else {
    size_t n = 1, e;
    int a;
    if (fill(bf, ATTNC_F32, rank, shape, 1.0, 0, o->misalign, rng) != 0) return -1;
    for (a = 0; a < rank; a++) n *= (size_t)shape[a];
    for (e = 0; e < n; e++) {
      const float sc = (float)((fabs(bf->ref[e]) * 0.5 + 0.5) / 127);
      ((float *)bf->t.data)[e] = sc;
      bf->ref[e] = sc;
    }
  }
  in->before[slot] = malloc(tensor_bytes(&bf->t) + 1);
  if (!in->before[slot]) return -1;
  memcpy(in->before[slot], bf->t.data, tensor_bytes(&bf->t));
  return 0;
}

/* The weight matrix whose int8 scales slot holds. */
static int matrix_of(int scale_slot)
{
  int m;
  for (m = 0; m < ATTNC_SLOT_COUNT; m++)
    if (attnc_slot_scale(m) == scale_slot) return m;
  return -1;
}

checker_inputs *checker_bind_random(attnc_kernel *k, attnc_bindings *b, const checker_opts *o, attnc_error *err)
{
  const attnc_gen *g = attnc_kernel_gen(k);
  checker_inputs *in = calloc(1, sizeof *in);
  int64_t shape[ATTNC_MAX_RANK];
  uint64_t rng = (o->seed + 1) * 0x9E3779B97F4A7C15ULL;
  int i, slot;
  if (!in) { attnc_err_set(err, ATTNC_ENOMEM, "out of memory"); return NULL; }
  for (i = 0; i < g->ndims && i < 64; i++) {
    int d;
    in->dims[i] = o->default_dim > 0 ? o->default_dim : 7;
    for (d = 0; d < o->ndims; d++)
      if (strcmp(o->dim_names[d], g->dim_names[i]) == 0) in->dims[i] = o->dim_values[d];
  }
  for (i = 0; i < o->ndims; i++) {
    int d, found = 0;
    for (d = 0; d < g->ndims; d++) found |= strcmp(o->dim_names[i], g->dim_names[d]) == 0;
    if (!found) {
      attnc_err_set(err, ATTNC_EARG, "the spec has no named dim '%s'", o->dim_names[i]);
      checker_inputs_free(in);
      return NULL;
    }
  }
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    const attnc_shape *sh = slot == ATTNC_SLOT_MASK ? &g->mask : &g->shape[slot];
    int rank = sh->rank, first = 0;
    double amp = 1, keep = 0;
    if (!g->used[slot]) continue;
    if (g->optional[slot] && o->seed % 2 == 0) continue; /* half the seeds leave an optional input out */
    if (slot == ATTNC_SLOT_MASK) {
      keep = o->mask_keep > 0 ? o->mask_keep : 0.8;
      if (o->mask_rank > 0 && o->mask_rank < rank) { first = rank - o->mask_rank; rank = o->mask_rank; }
    }
    for (i = 0; i < rank; i++) {
      int64_t d = sh->dim[first + i];
      shape[i] = d > 0 ? d : in->dims[-d - 1];
    }
    if (attnc_slot_is_cache(slot)) {
      if (fill_cache_slot(g, in, slot, shape, rank, o, &rng) != 0) {
        attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
        checker_inputs_free(in);
        return NULL;
      }
      if (attnc_bind(b, attnc_slot_name(slot), &in->bufs[slot].t, err) != ATTNC_OK) {
        checker_inputs_free(in);
        return NULL;
      }
      continue;
    }
    if (slot == ATTNC_SLOT_Q_POS || slot == ATTNC_SLOT_K_POS) {
      /* explicit positions: I64 of the full shape, or I32 of shape (S) broadcast over the batch, by the seed */
      struct buf *pb = &in->bufs[slot];
      const int narrow = (o->seed / 2) % 2;
      size_t n = 1, e;
      if (narrow) { shape[0] = shape[rank - 1]; rank = 1; }
      for (i = 0; i < rank; i++) n *= (size_t)shape[i];
      pb->t.dtype = narrow ? ATTNC_I32 : ATTNC_I64;
      pb->t.rank = rank;
      for (i = 0; i < rank; i++) pb->t.shape[i] = shape[i];
      pb->mem = malloc(n * 8 + 1);
      pb->ref = malloc(n * sizeof(double) + 1);
      if (!pb->mem || !pb->ref) {
        attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
        checker_inputs_free(in);
        return NULL;
      }
      pb->t.data = pb->mem;
      long long at = 0;
      for (e = 0; e < n; e++) { /* increasing along each row, from a random start below 4000, steps of 1 to 3 (packed or offset sequences) */
        long long v;
        if (e % (size_t)shape[rank - 1] == 0) at = (long long)((uniform(&rng) * 0.5 + 0.5) * 4000);
        at += 1 + (long long)((uniform(&rng) * 0.5 + 0.5) * 2.999);
        v = at;
        if (narrow) ((int32_t *)pb->mem)[e] = (int32_t)v;
        else ((int64_t *)pb->mem)[e] = v;
        pb->ref[e] = (double)v;
      }
      if (attnc_bind(b, attnc_slot_name(slot), &pb->t, err) != ATTNC_OK) {
        checker_inputs_free(in);
        return NULL;
      }
      continue;
    }
    if (slot >= ATTNC_SLOT_WQ_SCALE) {
      /* int8 scales: the matrix's amplitude / 127, each row's between half and all of it */
      const int m = matrix_of(slot);
      amp = 1.0 / sqrt((double)in->bufs[m].t.shape[1]) / 127;
    } else if (slot >= ATTNC_SLOT_WQ) {
      /* PyTorch's Linear init scale keeps outputs O(1) whatever the width */
      int is_bias = slot == ATTNC_SLOT_BQ || slot == ATTNC_SLOT_BK || slot == ATTNC_SLOT_BV ||
                    slot == ATTNC_SLOT_BG || slot == ATTNC_SLOT_BO;
      amp = 1.0 / sqrt((double)(is_bias ? 16 : shape[1]));
    } else if (slot == ATTNC_SLOT_X || slot == ATTNC_SLOT_Q) {
      amp = o->scale_inputs > 0 ? o->scale_inputs : 1;
    }
    /* in the storage the spec declares (narrower weights: what the kernel rounds them to) */
    if (fill(&in->bufs[slot], attnc_slot_store_dtype(g, slot), rank, shape, amp, keep, o->misalign, &rng) != 0) {
      attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
      checker_inputs_free(in);
      return NULL;
    }
    if (slot == ATTNC_SLOT_ROPE_FREQS) /* frequency factors between 1 and 8, as Llama 3's scaling has */
      for (size_t e = 0; e < (size_t)shape[0]; e++) {
        const float f = (float)(4.5 + 3.5 * in->bufs[slot].ref[e]);
        ((float *)in->bufs[slot].t.data)[e] = f;
        in->bufs[slot].ref[e] = f;
      }
    if (slot >= ATTNC_SLOT_WQ_SCALE) { /* positive scales; the reference's weight is q * scale */
      struct buf *sb = &in->bufs[slot], *mb = &in->bufs[matrix_of(slot)];
      const size_t cols = (size_t)mb->t.shape[1];
      size_t r, c;
      for (r = 0; r < (size_t)shape[0]; r++) {
        const float s = (float)(fabs(sb->ref[r]) * 0.5 + amp * 0.5);
        ((float *)sb->t.data)[r] = s;
        sb->ref[r] = s;
        for (c = 0; c < cols; c++) mb->ref[r * cols + c] *= s;
      }
    }
    if (attnc_bind(b, slot >= ATTNC_SLOT_WQ ? WEIGHT_NAMES[slot - ATTNC_SLOT_WQ] : attnc_slot_name(slot),
                   &in->bufs[slot].t, err) != ATTNC_OK) {
      checker_inputs_free(in);
      return NULL;
    }
  }
  dequantise_caches(in->bufs);
  return in;
}

/* One unit in the last place of a bf16 or f16 value of magnitude about x
 * (the larger unit where x sits on a binade's edge). */
static double ulp16(attnc_dtype dt, double x)
{
  const int bits = dt == ATTNC_BF16 ? 8 : 11, emin = dt == ATTNC_BF16 ? -126 : -14;
  int e;
  (void)frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  return ldexp(1.0, (e - 1 > emin ? e - 1 : emin) - (bits - 1));
}

/* The caches after the run against the reference's (ref_k, ref_v: values;
 * ref_s[2]: int8 scales).  Rows the run did not write (outside cache_len[b]
 * .. cache_len[b] + Sq - 1) must be bit for bit what they were, their
 * scales too.  A written value is judged by how it was made: the kernel
 * computes the new row x (projection, bias, rope) within the spec's
 * bound for its dtype and weights, atol + a_rms * rms + rtol * |x| (rms:
 * of the reference's written rows), then rounds it to kv_dtype, as the
 * reference rounds its own x.  Two roundings of values that close differ
 * by at most that bound plus one step of the stored grid: nothing more
 * for f32 and f64 (their rounding is inside the f32 bound), one unit in
 * the last place for bf16 and f16, and for int8 half a step of each
 * side's scale, (s_kernel + s_ref) / 2.  An int8 scale is max|x| / 127
 * rounded to F32, so the two scales differ by at most the bound at max|x|
 * over 127 plus one F32 rounding; with an f32 kernel's error far below a
 * step, the value bound keeps q within 1. */
static void compare_caches(const checker_inputs *in, int64_t sq, const double *const ref_kv[2],
                           const double *const ref_s[2], double atol, double a_rms, double rtol, double *worst,
                           checker_result *r)
{
  static const int SLOT[2] = { ATTNC_SLOT_K_CACHE, ATTNC_SLOT_V_CACHE };
  static const int SCALE[2] = { ATTNC_SLOT_K_CACHE_SCALE, ATTNC_SLOT_V_CACHE_SCALE };
  static const char *const NAME[2] = { "k_cache", "v_cache" };
  const double *lens = in->bufs[ATTNC_SLOT_CACHE_LEN].ref;
  int which;
  for (which = 0; which < 2; which++) {
    const attnc_tensor *t = &in->bufs[SLOT[which]].t;
    const int q8 = t->dtype == ATTNC_I8;
    const float *s_got = q8 ? (const float *)in->bufs[SCALE[which]].t.data : NULL;
    const float *s_was = q8 ? (const float *)in->before[SCALE[which]] : NULL;
    const size_t es = attnc_dtype_size(t->dtype);
    const double *want = ref_kv[which];
    size_t rows, cap, c, row, d, nw = 0;
    double sum2 = 0, rms, tol0;
    cache_dims(t, &rows, &cap, &c);
    for (row = 0; row < rows; row++) {
      const double j = (double)(row % cap), len = lens[row / cap / (size_t)(t->shape[t->rank - 3])];
      if (j < len || j >= len + (double)sq) continue;
      for (d = 0; d < c; d++) sum2 += want[row * c + d] * want[row * c + d];
      nw += c;
    }
    rms = nw ? sqrt(sum2 / (double)nw) : 0;
    tol0 = atol + a_rms * rms;
    for (row = 0; row < rows; row++) {
      const size_t e = row / cap / (size_t)(t->shape[t->rank - 3]);
      const double j = (double)(row % cap), len = lens[e];
      if (j < len || j >= len + (double)sq) { /* not written: every bit as it was */
        if (memcmp((const char *)t->data + row * c * es, (const char *)in->before[SLOT[which]] + row * c * es, c * es) != 0 ||
            (q8 && memcmp(&s_got[row], &s_was[row], sizeof(float)) != 0)) {
          *worst = INFINITY;
          snprintf(r->err.message, sizeof r->err.message,
                   "%s row %zu (batch element %zu, position %.0f) changed, but the run writes positions %.0f..%.0f only",
                   NAME[which], row, e, j, len, len + (double)sq - 1);
        }
        continue;
      }
      if (q8) {
        const double sw = ref_s[which][row], sg = s_got[row];
        const double tol = (tol0 + rtol * 127 * sw) / 127 + ldexp(sw, -23), dd = fabs(sg - sw) / tol;
        if (!(dd <= *worst)) {
          *worst = isnan(dd) ? INFINITY : dd;
          if (*worst > 1)
            snprintf(r->err.message, sizeof r->err.message, "%s_scale row %zu is %.9g, the reference %.9g", NAME[which],
                     row, sg, sw);
        }
      }
      for (d = 0; d < c; d++) {
        const double w = want[row * c + d], got = value_at(t, row * c + d) * (q8 ? s_got[row] : 1);
        double step = 0, dd;
        if (t->dtype == ATTNC_BF16 || t->dtype == ATTNC_F16) step = ulp16(t->dtype, fmax(fabs(w), fabs(got)));
        if (q8) step = (s_got[row] + ref_s[which][row]) / 2;
        dd = fabs(got - w) / (tol0 + rtol * fabs(w) + step);
        if (!(dd <= *worst)) {
          *worst = isnan(dd) ? INFINITY : dd;
          if (*worst > 1)
            snprintf(r->err.message, sizeof r->err.message,
                     "%s row %zu (batch element %zu, position %.0f) element %zu is %.9g, the reference %.9g", NAME[which],
                     row, e, j, d, got, w);
        }
      }
      r->n_cache += c;
    }
  }
}

/* Widen the bounds (NMSE, atol, rms share, rtol) to the looser of theirs
 * and dtype d's row (DESIGN.md's table). */
static void loosen_to(attnc_dtype d, double *nmse, double *atol, double *a_rms, double *rtol)
{
  double n2, at2, ar2, rt2;
  checker_bounds(d, &n2, &at2, &ar2, &rt2);
  *nmse = fmax(*nmse, n2);
  *atol = fmax(*atol, at2);
  *a_rms = fmax(*a_rms, ar2);
  *rtol = fmax(*rtol, rt2);
}

/* ---- gradient mode ------------------------------------------------------- */

void checker_grad_bounds(attnc_dtype dt, double *nmse, double *atol, double *a_rms, double *rtol)
{
  *atol = 0;
  if (dt == ATTNC_F64) {
    *nmse = INFINITY;
    *a_rms = *rtol = 1e-8;
  } else {
    *nmse = 1e-8;
    *a_rms = *rtol = 1e-4;
  }
  if (dt == ATTNC_BF16 || dt == ATTNC_F16) loosen_to(dt, nmse, atol, a_rms, rtol); /* gradients stored in 16 bits */
}

/* The slot a tensor was bound under by checker_bind_random, or -1. */
static int slot_of_bound_name(const char *name)
{
  int slot;
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    const char *bound = slot >= ATTNC_SLOT_WQ && slot - ATTNC_SLOT_WQ < (int)(sizeof WEIGHT_NAMES / sizeof *WEIGHT_NAMES)
                            ? WEIGHT_NAMES[slot - ATTNC_SLOT_WQ]
                            : attnc_slot_name(slot);
    if (bound && strcmp(bound, name) == 0) return slot;
  }
  return -1;
}

/* The reference's REF_G_* of a slot that has a gradient, or -1. */
static int ref_grad_of_slot(int slot)
{
  switch (slot) {
  case ATTNC_SLOT_X: return REF_G_X;
  case ATTNC_SLOT_KV: return REF_G_KV;
  case ATTNC_SLOT_BIAS: return REF_G_BIAS;
  case ATTNC_SLOT_Q: return REF_G_Q;
  case ATTNC_SLOT_K: return REF_G_K;
  case ATTNC_SLOT_V: return REF_G_V;
  case ATTNC_SLOT_SINKS: return REF_G_SINKS;
  case ATTNC_SLOT_WQ: return REF_G_WQ;
  case ATTNC_SLOT_BQ: return REF_G_BQ;
  case ATTNC_SLOT_WK: return REF_G_WK;
  case ATTNC_SLOT_BK: return REF_G_BK;
  case ATTNC_SLOT_WV: return REF_G_WV;
  case ATTNC_SLOT_BV: return REF_G_BV;
  case ATTNC_SLOT_WG: return REF_G_WG;
  case ATTNC_SLOT_BG: return REF_G_BG;
  case ATTNC_SLOT_WO: return REF_G_WO;
  case ATTNC_SLOT_BO: return REF_G_BO;
  default: return -1;
  }
}

/* The elements a gradient is judged at: all of a small tensor's, else the
 * first, the last and random ones, 48 in all. */
enum { GRAD_ALL_UP_TO = 64, GRAD_SAMPLE = 48 };

struct grad_judged {
  int slot;
  size_t n, m;       /* elements, and judged ones */
  long idx[GRAD_ALL_UP_TO];
  double got[GRAD_ALL_UP_TO], want[GRAD_ALL_UP_TO];
};

/* Compute one gradient's judged elements: the kernel's values and the
 * reference's finite differences.  ATTNC_OK, or a status with r->err set. */
static attnc_status grad_sample(attnc_bindings *b, const char *name, const ref_problem *p, const ref_tensors *rt,
                                const double *dref, uint64_t *rng, struct grad_judged *gj, checker_result *r)
{
  attnc_tensor t;
  attnc_status st;
  int a, which;
  long want_n;
  size_t e;
  gj->slot = slot_of_bound_name(name);
  which = ref_grad_of_slot(gj->slot);
  if (which < 0) return attnc_err_set(&r->err, ATTNC_EGEN, "attnc_grad returned a gradient for '%s', which has none", name);
  if ((st = attnc_grad_get(b, name, &t, &r->err)) != ATTNC_OK) return st;
  gj->n = 1;
  for (a = 0; a < t.rank; a++) gj->n *= (size_t)t.shape[a];
  want_n = ref_grad_count(p, rt, which);
  if (want_n < 0 || (size_t)want_n != gj->n)
    return attnc_err_set(&r->err, ATTNC_EGEN, "the gradient of '%s' has %zu elements, the reference's %ld", name, gj->n,
                         want_n);
  if (gj->n <= GRAD_ALL_UP_TO) {
    gj->m = gj->n;
    for (e = 0; e < gj->n; e++) gj->idx[e] = (long)e;
  } else {
    gj->m = GRAD_SAMPLE;
    gj->idx[0] = 0;
    gj->idx[1] = (long)gj->n - 1;
    for (e = 2; e < gj->m; e++) gj->idx[e] = (long)((uniform(rng) * 0.5 + 0.5) * (double)gj->n) % (long)gj->n;
  }
  for (e = 0; e < gj->m; e++) {
    gj->got[e] = value_at(&t, (size_t)gj->idx[e]);
    if (ref_grad_fd(p, rt, dref, which, gj->idx[e], &gj->want[e]) != 0)
      return attnc_err_set(&r->err, ATTNC_EGEN, "the reference could not differentiate '%s'", name);
  }
  return ATTNC_OK;
}

static double rms_of(const double *v, size_t n)
{
  double s = 0;
  size_t e;
  for (e = 0; e < n; e++) s += v[e] * v[e];
  return n ? sqrt(s / (double)n) : 0;
}

/* Judge every gradient attnc_grad computed (and require one for each
 * differentiable tensor bound).  Fills r's gradient fields; returns the
 * worst ratio, or INFINITY with r->err set. */
static double judge_grads(attnc_bindings *b, const attnc_gen *g, const checker_inputs *in, const ref_problem *p,
                          const ref_tensors *rt, const double *dref, const checker_opts *o, int nan_rows,
                          checker_result *r)
{
  struct grad_judged *gj = calloc(ATTNC_SLOT_COUNT, sizeof *gj);
  uint64_t rng = (o->seed + 7) * 0x9E3779B97F4A7C15ULL;
  double nmse_max, atol, a_rms, rtol, worst = 0, bq_rms = -1;
  const char *name;
  int i, k, have[ATTNC_SLOT_COUNT] = { 0 };
  size_t e;
  if (!gj) {
    attnc_err_set(&r->err, ATTNC_ENOMEM, "out of memory");
    return INFINITY;
  }
  checker_grad_bounds(g->dtype, &nmse_max, &atol, &a_rms, &rtol);
  for (i = 0; (name = attnc_grad_name(b, i)) != NULL; i++) {
    if (i >= (int)(sizeof r->grads / sizeof *r->grads) || i >= ATTNC_SLOT_COUNT) {
      attnc_err_set(&r->err, ATTNC_EGEN, "attnc_grad returned more gradients than there are tensors");
      worst = INFINITY;
      goto done;
    }
    if (grad_sample(b, name, p, rt, dref, &rng, &gj[i], r) != ATTNC_OK) {
      worst = INFINITY;
      goto done;
    }
    if (have[gj[i].slot]++) {
      attnc_err_set(&r->err, ATTNC_EGEN, "attnc_grad listed '%s' twice", name);
      worst = INFINITY;
      goto done;
    }
    snprintf(r->grads[i].name, sizeof r->grads[i].name, "%s", name);
    if (gj[i].slot == ATTNC_SLOT_BQ) bq_rms = rms_of(gj[i].want, gj[i].m);
  }
  r->n_grads = i;
  for (k = 0; k < ATTNC_SLOT_COUNT; k++)
    if (ref_grad_of_slot(k) >= 0 && in->bufs[k].t.data && g->used[k] && !have[k]) {
      attnc_err_set(&r->err, ATTNC_EGEN, "attnc_grad computed no gradient for '%s'",
                    k >= ATTNC_SLOT_WQ ? WEIGHT_NAMES[k - ATTNC_SLOT_WQ] : attnc_slot_name(k));
      worst = INFINITY;
      goto done;
    }
  for (i = 0; i < r->n_grads; i++) {
    checker_grad *cg = &r->grads[i];
    double d2 = 0, r2 = 0, tol0;
    int borrowed;
    cg->n = gj[i].n;
    cg->judged = gj[i].m;
    /* softmax ignores a per-row constant: k's bias has no gradient, and is
     * judged on the scale of q's bias's */
    cg->rms = gj[i].slot == ATTNC_SLOT_BK && bq_rms >= 0 ? bq_rms : rms_of(gj[i].want, gj[i].m);
    /* a bias that is one number per row (its Sk dim 1) is a per-row constant too */
    const attnc_tensor *bt = &in->bufs[ATTNC_SLOT_BIAS].t;
    const int row_bias = gj[i].slot == ATTNC_SLOT_BIAS && bt->rank > 0 && bt->shape[bt->rank - 1] == 1;
    borrowed = gj[i].slot == ATTNC_SLOT_BK || row_bias || cg->rms == 0;
    if (row_bias) cg->rms = 0;
    if (cg->rms == 0) /* no scale of its own (every key hidden, say): the largest of the others' */
      for (k = 0; k < r->n_grads; k++) cg->rms = fmax(cg->rms, rms_of(gj[k].want, gj[k].m));
    tol0 = atol + a_rms * cg->rms;
    for (e = 0; e < gj[i].m; e++) {
      const double got = gj[i].got[e], want = gj[i].want[e], d = fabs(got - want);
      /* empty_rows=nan: out's NaN rows reach the gradients they feed, as
       * PyTorch's backward through an all -inf softmax carries them (NaN
       * times a dout of 0 is NaN); the finite differences leave those rows
       * out.  Such a NaN is not judged; every number still is. */
      if (nan_rows && isnan(got) && !isnan(want)) continue;
      const double ratio = isnan(got) || isnan(want) ? INFINITY : d / (tol0 + rtol * fabs(want));
      d2 += d * d;
      r2 += want * want;
      if (d > cg->max_abs || isnan(d)) cg->max_abs = isnan(d) ? INFINITY : d;
      if (ratio > cg->worst) {
        cg->worst = ratio;
        if (ratio > 1 && ratio >= worst)
          snprintf(r->err.message, sizeof r->err.message, "grad.%s element %ld is %.9g, the finite differences %.9g",
                   cg->name, gj[i].idx[e], got, want);
      }
    }
    cg->nmse = r2 > 0 ? d2 / r2 : (d2 > 0 ? INFINITY : 0);
    /* no scale of its own (k's bias; or q and k whole when each row sees at
     * most one key, so its softmax is 1 whatever the logits): the elementwise
     * bound on the borrowed scale judges it, as NMSE against 0 cannot */
    if (borrowed) cg->nmse = 0;
    if (cg->nmse > nmse_max && cg->worst <= 1) {
      cg->worst = 1 + cg->nmse; /* fails on NMSE alone */
      snprintf(r->err.message, sizeof r->err.message, "grad.%s has NMSE %.3g, above %.0e", cg->name, cg->nmse, nmse_max);
    }
    r->n_grad += cg->judged;
    if (cg->max_abs > r->max_grad_err) r->max_grad_err = cg->max_abs;
    if (cg->worst >= r->worst_grad) {
      r->worst_grad = cg->worst;
      snprintf(r->grad_worst_name, sizeof r->grad_worst_name, "%s", cg->name);
    }
    if (cg->worst > worst) worst = cg->worst;
  }
done:
  free(gj);
  return worst;
}

/* Compile spec; in gradient mode with train appended when the spec has
 * none (after a newline: it ends a comment the spec may close with), or
 * when the spec needs it to compile (dropout).  A spec that fails either
 * way reports its own error. */
static attnc_kernel *compile_for(const char *spec, const checker_opts *o, const attnc_options *ko, attnc_error *err)
{
  attnc_kernel *k = attnc_compile(spec, ko, err), *kt;
  attnc_error err2;
  char *trained;
  size_t n;
  if (!o->grad || (k && attnc_kernel_trains(k))) return k;
  n = strlen(spec);
  trained = malloc(n + 8);
  if (!trained) {
    attnc_release(k);
    attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
    return NULL;
  }
  memcpy(trained, spec, n);
  memcpy(trained + n, "\ntrain", 7);
  kt = attnc_compile(trained, ko, k ? err : &err2);
  free(trained);
  attnc_release(k);
  return kt;
}

int checker_run(const char *spec, const checker_opts *o, checker_result *r)
{
  attnc_options ko;
  attnc_kernel *k;
  attnc_bindings *b = NULL;
  checker_inputs *in = NULL;
  struct buf *bufs;
  const attnc_gen *g;
  attnc_tensor out, dout;
  ref_problem p;
  ref_tensors rt;
  struct extra_out lse, attn;
  double *ref_out = NULL, *dref = NULL, atol, rtol, a_rms, nmse_max, worst = 0, sum_d2 = 0, sum_r2 = 0;
  double *ref_cache[4] = { NULL, NULL, NULL, NULL }; /* the reference's k_cache, v_cache after the run, and int8 scales */
  double c_atol = 0, c_arms = 0, c_rtol = 0;
  size_t n_finite = 0;
  void *out_mem = NULL, *dout_mem = NULL;
  int i;
  size_t n, j;

  memset(r, 0, sizeof *r);
  memset(&out, 0, sizeof out);
  memset(&dout, 0, sizeof dout);
  memset(&lse, 0, sizeof lse);
  memset(&attn, 0, sizeof attn);
  ko.backend = o->backend;
  ko.threads = 0;
  ko.spec_name = o->spec_name;
  ko.form = o->form;
  k = compile_for(spec, o, &ko, &r->err);
  if (!k) { r->status = r->err.code; return 0; }
  r->backend = attnc_kernel_backend(k);
  snprintf(r->canonical, sizeof r->canonical, "%s", attnc_canonical(k));
  g = attnc_kernel_gen(k);
  b = attnc_bindings_new(k);
  if (!b) { r->status = attnc_err_set(&r->err, ATTNC_ENOMEM, "out of memory"); goto done; }
  if (o->threads && (r->status = attnc_bindings_set_threads(b, o->threads, &r->err)) != ATTNC_OK) goto done;
  if (g->train && (r->status = attnc_bindings_set_seed(b, o->dropout_seed, &r->err)) != ATTNC_OK) goto done;
  in = checker_bind_random(k, b, o, &r->err);
  if (!in) { r->status = r->err.code; goto done; }
  bufs = in->bufs;
  r->status = attnc_output_shape(b, &out, &r->err);
  if (r->status != ATTNC_OK) goto done;
  n = 1;
  for (i = 0; i < out.rank; i++) n *= (size_t)out.shape[i];
  if (posix_memalign(&out_mem, 64, (n + (size_t)o->misalign) * attnc_dtype_size(out.dtype) + 1) != 0) out_mem = NULL;
  out.data = out_mem ? (char *)out_mem + (size_t)o->misalign * attnc_dtype_size(out.dtype) : NULL;
  ref_out = malloc(n * sizeof(double) + 1);
  if (!out.data || !ref_out) { r->status = attnc_err_set(&r->err, ATTNC_ENOMEM, "out of memory"); goto done; }
  /* the other outputs: log-sum-exp per row, the attention weights */
  if (g->has_lse && (r->status = bind_extra(b, "lse", &lse, &r->err)) != ATTNC_OK) goto done;
  if (g->has_attn && (r->status = bind_extra(b, "attn", &attn, &r->err)) != ATTNC_OK) goto done;

  /* the reference first: in gradient mode dout is 0 where its out is NaN */
  make_problem(g, bufs, o->dropout_seed, &p, &rt);
  rt.lse = lse.ref;
  rt.weights = attn.ref;
  if (p.cache) { /* the caches after the run; the int8 scales start as bound and get the new rows' */
    const size_t nc = tensor_bytes(&bufs[ATTNC_SLOT_K_CACHE].t) / attnc_dtype_size(bufs[ATTNC_SLOT_K_CACHE].t.dtype);
    size_t rows, cap, c;
    cache_dims(&bufs[ATTNC_SLOT_K_CACHE].t, &rows, &cap, &c);
    for (i = 0; i < 4; i++) {
      const int from = i == 2 ? ATTNC_SLOT_K_CACHE_SCALE : ATTNC_SLOT_V_CACHE_SCALE;
      if (i >= 2 && !bufs[from].ref) continue;
      ref_cache[i] = malloc((i < 2 ? nc : rows) * sizeof(double) + 1);
      if (!ref_cache[i]) { r->status = attnc_err_set(&r->err, ATTNC_ENOMEM, "out of memory"); goto done; }
      if (i >= 2) memcpy(ref_cache[i], bufs[from].ref, rows * sizeof(double));
    }
    rt.k_cache_out = ref_cache[0];
    rt.v_cache_out = ref_cache[1];
    rt.k_scale_out = ref_cache[2];
    rt.v_scale_out = ref_cache[3];
  }
  if (ref_attention(&p, &rt, ref_out) != 0) {
    r->status = attnc_err_set(&r->err, ATTNC_EGEN, "the reference rejected this problem");
    goto done;
  }
  if (o->grad) { /* dout in [-1, 1], stored in out's dtype; the reference reads the stored values */
    uint64_t rng = (o->seed + 3) * 0x2545F4914F6CDD1DULL;
    dout = out;
    dout_mem = malloc(n * attnc_dtype_size(out.dtype) + 1);
    dref = malloc(n * sizeof(double) + 1);
    if (!dout_mem || !dref) { r->status = attnc_err_set(&r->err, ATTNC_ENOMEM, "out of memory"); goto done; }
    dout.data = dout_mem;
    for (j = 0; j < n; j++) {
      double v = isnan(ref_out[j]) ? 0.0 : uniform(&rng);
      attnc_convert(&v, ATTNC_F64, (char *)dout_mem + j * attnc_dtype_size(out.dtype), out.dtype, 1);
      dref[j] = value_at(&dout, j);
    }
    r->status = attnc_grad(b, &out, &dout, &r->err);
  } else {
    r->status = attnc_run(b, &out, &r->err);
  }
  if (r->status != ATTNC_OK) goto done;

  checker_bounds(g->dtype, &nmse_max, &atol, &a_rms, &rtol);
  if (g->wdtype != g->dtype) /* weights stored otherwise: the looser of the two rows */
    loosen_to(g->wdtype, &nmse_max, &atol, &a_rms, &rtol);
  c_atol = atol; /* the new cache rows are computed within these; compare_caches adds their rounding */
  c_arms = a_rms;
  c_rtol = rtol;
  if (p.cache) /* a cache stored as bf16, f16 or int8: the looser of its row and the dtype's (f32 counts as f32) */
    loosen_to(g->kv_dtype, &nmse_max, &atol, &a_rms, &rtol);
  for (j = 0; j < n; j++)
    if (!isnan(ref_out[j])) {
      sum_r2 += ref_out[j] * ref_out[j];
      n_finite++;
    }
  r->rms = n_finite ? sqrt(sum_r2 / (double)n_finite) : 0;
  atol += a_rms * r->rms;
  /* no bound below what the output dtype can hold: its smallest normal (a
   * reference of 1e-48 is 0 in f16 or bf16, whose rms-relative bound would
   * otherwise shrink to nothing with it) */
  atol = fmax(atol, out.dtype == ATTNC_F64 ? DBL_MIN : (out.dtype == ATTNC_F16 ? 6.103515625e-05 : FLT_MIN));
  for (j = 0; j < n; j++) {
    double got = value_at(&out, j);
    double want = ref_out[j], d = fabs(got - want), ratio;
    if (!isnan(want) && !isnan(got)) sum_d2 += (got - want) * (got - want);
    if (isnan(want) || isnan(got)) {
      ratio = (isnan(want) && isnan(got)) ? 0 : INFINITY;
      d = ratio;
    } else {
      ratio = d / (atol + rtol * fabs(want));
      if (fabs(want) > r->max_ref) r->max_ref = fabs(want);
    }
    if (d > r->max_abs) r->max_abs = d;
    if (ratio > worst) worst = ratio;
    if (o->out_copy && j < o->out_n) o->out_copy[j] = got;
  }
  r->n = n;
  r->tol = atol + rtol * r->max_ref;
  r->atol = atol;
  r->rtol = rtol;
  compare_extra("lse", &lse, atol, rtol, &worst, r);
  compare_extra("attn", &attn, atol, rtol, &worst, r);
  r->n_lse = lse.n;
  r->n_attn = attn.n;
  if (p.cache) {
    const double *const kv[2] = { ref_cache[0], ref_cache[1] }, *const sc[2] = { ref_cache[2], ref_cache[3] };
    int64_t sq;
    (void)batch_elements(g, &bufs[ATTNC_SLOT_X].t, &sq);
    compare_caches(in, sq, kv, sc, c_atol, c_arms, c_rtol, &worst, r);
  }
  {
    /* an error below the output dtype's smallest normal is not measurable
     * in it (a reference of 1e-74 is 0 in f32): each element adds that
     * square to the scale, so outputs that all underflow do not fail NMSE */
    const double tiny = out.dtype == ATTNC_F64 ? DBL_MIN : (out.dtype == ATTNC_F16 ? 6.103515625e-05 : FLT_MIN);
    const double scale2 = sum_r2 + (double)n_finite * tiny * tiny;
    r->nmse = scale2 > 0 ? sum_d2 / scale2 : (sum_d2 > 0 ? INFINITY : 0);
  }
  r->nmse_max = nmse_max;
  r->ok = worst <= 1 && r->nmse <= nmse_max;
  if (o->grad) {
    char forward_msg[sizeof r->err.message];
    double gw;
    memcpy(forward_msg, r->err.message, sizeof forward_msg);
    r->err.message[0] = 0;
    gw = judge_grads(b, g, in, &p, &rt, dref, o, n_finite < n, r);
    if (!r->ok && forward_msg[0]) memcpy(r->err.message, forward_msg, sizeof forward_msg); /* the forward's mismatch first */
    r->ok = r->ok && gw <= 1;
  }
done:
  for (i = 0; i < 4; i++) free(ref_cache[i]);
  checker_inputs_free(in);
  free(lse.mem);
  free(lse.ref);
  free(attn.mem);
  free(attn.ref);
  free(out_mem);
  free(dout_mem);
  free(dref);
  free(ref_out);
  attnc_bindings_free(b);
  attnc_release(k);
  return r->ok;
}

/* The reference's problem for the tensors bound to b: bufs[slot].t is each
 * bound tensor and .ref its float64 values (int8 weights times their
 * scales); with mask_only, the mask's and cache_len's values alone (all that
 * visibility reads).  The caller frees every bufs[slot].ref.  0, or -1 out of memory. */
static int bound_problem(const attnc_gen *g, attnc_bindings *b, int mask_only, struct buf *bufs, ref_problem *p,
                         ref_tensors *rt)
{
  int slot;
  memset(bufs, 0, ATTNC_SLOT_COUNT * sizeof *bufs);
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    const attnc_tensor *t = attnc_bindings_slot(b, slot);
    size_t n = 1, i;
    int a;
    if (!g->used[slot] || !t) continue;
    bufs[slot].t = *t;
    if (mask_only && slot != ATTNC_SLOT_MASK && slot != ATTNC_SLOT_CACHE_LEN) continue; /* (a cache moves the causal rule) */
    for (a = 0; a < t->rank; a++) n *= (size_t)t->shape[a];
    bufs[slot].ref = malloc(n * sizeof(double) + 1);
    if (!bufs[slot].ref) return -1;
    for (i = 0; i < n; i++) {
      if (slot == ATTNC_SLOT_MASK) {
        bufs[slot].ref[i] = attnc_bindings_mask_u8(b)[i] ? 1.0 : 0.0;
      } else {
        bufs[slot].ref[i] = value_at(t, i);
      }
    }
  }
  for (slot = ATTNC_SLOT_WQ_SCALE; slot < ATTNC_SLOT_COUNT; slot++) { /* int8 weights: q * scale */
    const int m = matrix_of(slot);
    if (!bufs[slot].ref || m < 0 || !bufs[m].ref) continue;
    for (size_t row = 0; row < (size_t)bufs[m].t.shape[0]; row++)
      for (size_t c = 0; c < (size_t)bufs[m].t.shape[1]; c++)
        bufs[m].ref[row * (size_t)bufs[m].t.shape[1] + c] *= bufs[slot].ref[row];
  }
  dequantise_caches(bufs);
  if (bufs[ATTNC_SLOT_CACHE_LEN].ref && bufs[ATTNC_SLOT_X].t.data) { /* one cache_len per batch element */
    int64_t sq;
    double *dense = malloc(batch_elements(g, &bufs[ATTNC_SLOT_X].t, &sq) * sizeof(double) + 1);
    if (!dense) return -1;
    dense_cache_len(g, &bufs[ATTNC_SLOT_X].t, &bufs[ATTNC_SLOT_CACHE_LEN].t, dense);
    free(bufs[ATTNC_SLOT_CACHE_LEN].ref);
    bufs[ATTNC_SLOT_CACHE_LEN].ref = dense;
  }
  make_problem(g, bufs, attnc_bindings_seed(b), p, rt);
  return 0;
}

/* Attention weights of what b holds, by the float64 reference. */
int checker_weights(attnc_kernel *k, attnc_bindings *b, double **weights, int *rank, long *shape, attnc_error *err)
{
  const attnc_gen *g = attnc_kernel_gen(k);
  struct buf bufs[ATTNC_SLOT_COUNT];
  ref_problem p;
  ref_tensors rt;
  double *out = NULL, *w = NULL;
  long nw, no, shp[REF_MAX_RANK];
  int slot, r, rc = -1;
  attnc_tensor shape_out;
  memset(bufs, 0, sizeof bufs);
  if (attnc_output_shape(b, &shape_out, err) != ATTNC_OK) return -1;
  if (bound_problem(g, b, 0, bufs, &p, &rt) != 0) {
    attnc_err_set(err, ATTNC_ENOMEM, "out of memory for the reference's tensors");
    goto done;
  }
  nw = ref_weights_shape(&p, rank, shape);
  no = ref_output_shape(&p, &r, shp);
  if (nw < 0 || no < 0) { attnc_err_set(err, ATTNC_EBIND, "the reference rejected these tensors"); goto done; }
  w = malloc((size_t)nw * sizeof(double) + 1);
  out = malloc((size_t)no * sizeof(double) + 1);
  if (!w || !out) { attnc_err_set(err, ATTNC_ENOMEM, "out of memory for the attention weights"); goto done; }
  rt.weights = w;
  if (ref_attention(&p, &rt, out) != 0) { attnc_err_set(err, ATTNC_EBIND, "the reference rejected these tensors"); goto done; }
  *weights = w;
  w = NULL;
  rc = 0;
done:
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) free(bufs[slot].ref);
  free(w);
  free(out);
  return rc;
}

/* Which keys each query sees in what b holds, by the reference's rule. */
int checker_visible(attnc_kernel *k, attnc_bindings *b, unsigned char **vis, int *rank, long *shape, attnc_error *err)
{
  const attnc_gen *g = attnc_kernel_gen(k);
  struct buf bufs[ATTNC_SLOT_COUNT];
  ref_problem p;
  ref_tensors rt;
  unsigned char *v = NULL;
  long n;
  int slot, rc = -1;
  attnc_tensor shape_out;
  memset(bufs, 0, sizeof bufs);
  if (attnc_output_shape(b, &shape_out, err) != ATTNC_OK) return -1;
  if (bound_problem(g, b, 1, bufs, &p, &rt) != 0) {
    attnc_err_set(err, ATTNC_ENOMEM, "out of memory for the mask");
    goto done;
  }
  if ((n = ref_weights_shape(&p, rank, shape)) < 0) { attnc_err_set(err, ATTNC_EBIND, "the reference rejected these tensors"); goto done; }
  if (!(v = malloc((size_t)n + 1))) { attnc_err_set(err, ATTNC_ENOMEM, "out of memory for the visibility map"); goto done; }
  if (ref_visible(&p, &rt, v) != n) { attnc_err_set(err, ATTNC_EBIND, "the reference rejected these tensors"); goto done; }
  *vis = v;
  v = NULL;
  rc = 0;
done:
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) free(bufs[slot].ref);
  free(v);
  return rc;
}
