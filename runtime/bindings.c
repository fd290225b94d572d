/* Bindings: tensors bound to a kernel by name, named dims, every shape
 * checked, in_proj_* split and the mask prepared, the output's shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Every name a tensor goes by: AlphaFold/OpenFold, Hugging Face, torch MHA. */
static const struct { const char *name; int slot; } NAMES[] = {
  { "x", ATTNC_SLOT_X }, { "kv", ATTNC_SLOT_KV }, { "bias", ATTNC_SLOT_BIAS }, { "mask", ATTNC_SLOT_MASK },
  { "q", ATTNC_SLOT_Q }, { "k", ATTNC_SLOT_K }, { "v", ATTNC_SLOT_V }, { "sinks", ATTNC_SLOT_SINKS },
  { "rope_freqs", ATTNC_SLOT_ROPE_FREQS }, { "q_pos", ATTNC_SLOT_Q_POS }, { "k_pos", ATTNC_SLOT_K_POS },
  { "k_cache", ATTNC_SLOT_K_CACHE }, { "v_cache", ATTNC_SLOT_V_CACHE }, { "cache_len", ATTNC_SLOT_CACHE_LEN },
  { "k_cache_scale", ATTNC_SLOT_K_CACHE_SCALE }, { "v_cache_scale", ATTNC_SLOT_V_CACHE_SCALE },
  { "linear_q.weight", ATTNC_SLOT_WQ }, { "linear_q.bias", ATTNC_SLOT_BQ },
  { "linear_k.weight", ATTNC_SLOT_WK }, { "linear_k.bias", ATTNC_SLOT_BK },
  { "linear_v.weight", ATTNC_SLOT_WV }, { "linear_v.bias", ATTNC_SLOT_BV },
  { "linear_g.weight", ATTNC_SLOT_WG }, { "linear_g.bias", ATTNC_SLOT_BG },
  { "linear_o.weight", ATTNC_SLOT_WO }, { "linear_o.bias", ATTNC_SLOT_BO },
  { "q_proj.weight", ATTNC_SLOT_WQ }, { "q_proj.bias", ATTNC_SLOT_BQ },
  { "k_proj.weight", ATTNC_SLOT_WK }, { "k_proj.bias", ATTNC_SLOT_BK },
  { "v_proj.weight", ATTNC_SLOT_WV }, { "v_proj.bias", ATTNC_SLOT_BV },
  { "o_proj.weight", ATTNC_SLOT_WO }, { "o_proj.bias", ATTNC_SLOT_BO },
  { "out_proj.weight", ATTNC_SLOT_WO }, { "out_proj.bias", ATTNC_SLOT_BO },
  { "q_proj_weight", ATTNC_SLOT_WQ }, { "k_proj_weight", ATTNC_SLOT_WK }, { "v_proj_weight", ATTNC_SLOT_WV },
};

/* The most elements one tensor may have: the spec's limit (gen/spec.lua
 * MAX_ELEMS), applied again to the sizes bound at run time.  A shape above
 * it cannot be real memory; refusing it keeps every size product below
 * 2^63 and nothing is allocated or read for it. */
#define MAX_ELEMS 1099511627776.0 /* 2^40 */

/* Elements of a shape, in double: exact below 2^53, never overflows. */
static double elems_of(const int64_t *shape, int rank)
{
  double n = 1;
  int a;
  for (a = 0; a < rank; a++) n *= (double)shape[a];
  return n;
}

static const char *slot_aliases(int slot)
{
  switch (slot) {
  case ATTNC_SLOT_WQ: return "linear_q.weight, q_proj.weight or in_proj_weight";
  case ATTNC_SLOT_BQ: return "linear_q.bias, q_proj.bias or in_proj_bias";
  case ATTNC_SLOT_WK: return "linear_k.weight, k_proj.weight or in_proj_weight";
  case ATTNC_SLOT_BK: return "linear_k.bias, k_proj.bias or in_proj_bias";
  case ATTNC_SLOT_WV: return "linear_v.weight, v_proj.weight or in_proj_weight";
  case ATTNC_SLOT_BV: return "linear_v.bias, v_proj.bias or in_proj_bias";
  case ATTNC_SLOT_WG: return "linear_g.weight";
  case ATTNC_SLOT_BG: return "linear_g.bias";
  case ATTNC_SLOT_WO: return "linear_o.weight, o_proj.weight or out_proj.weight";
  case ATTNC_SLOT_BO: return "linear_o.bias, o_proj.bias or out_proj.bias";
  case ATTNC_SLOT_WQ_SCALE: return "linear_q.weight_scale, q_proj.weight_scale or in_proj_weight_scale";
  case ATTNC_SLOT_WK_SCALE: return "linear_k.weight_scale, k_proj.weight_scale or in_proj_weight_scale";
  case ATTNC_SLOT_WV_SCALE: return "linear_v.weight_scale, v_proj.weight_scale or in_proj_weight_scale";
  case ATTNC_SLOT_WG_SCALE: return "linear_g.weight_scale";
  case ATTNC_SLOT_WO_SCALE: return "linear_o.weight_scale, o_proj.weight_scale or out_proj.weight_scale";
  default: return attnc_slot_name(slot);
  }
}

attnc_bindings *attnc_bindings_new(attnc_kernel *k)
{
  attnc_bindings *b;
  if (!k) return NULL;
  b = calloc(1, sizeof *b);
  if (!b) return NULL;
  attnc_kernel_retain(k);
  b->k = k;
  b->threads = k->threads > 0 ? k->threads : attnc_pool_default_threads();
  return b;
}

const attnc_tensor *attnc_bindings_slot(const attnc_bindings *b, int slot)
{
  return (b && slot >= 0 && slot < ATTNC_SLOT_COUNT && b->from[slot]) ? &b->t[slot] : NULL;
}
const unsigned char *attnc_bindings_mask_u8(const attnc_bindings *b) { return b ? b->mask_u8 : NULL; }

int attnc_bindings_threads(const attnc_bindings *b) { return b ? b->threads : 0; }
long attnc_bindings_scratch_bytes(const attnc_bindings *b) { return b ? b->scratch_bytes : 0; }

attnc_status attnc_bindings_set_threads(attnc_bindings *b, int threads, attnc_error *err)
{
  attnc_err_clear(err);
  if (!b || threads < 0 || threads > 1024) return attnc_err_set(err, ATTNC_EARG, "threads must be 0 (default) .. 1024");
  b->threads = threads > 0 ? threads : attnc_pool_default_threads();
  return ATTNC_OK;
}

attnc_status attnc_bindings_set_seed(attnc_bindings *b, uint64_t seed, attnc_error *err)
{
  attnc_err_clear(err);
  if (!b) return attnc_err_set(err, ATTNC_EARG, "attnc_bindings_set_seed needs bindings");
  b->seed = seed;
  return ATTNC_OK;
}

uint64_t attnc_bindings_seed(const attnc_bindings *b) { return b ? b->seed : 0; }

void attnc_bindings_free(attnc_bindings *b)
{
  int i;
  if (!b) return;
  for (i = 0; i < ATTNC_SLOT_COUNT; i++) {
    free(b->packed[i]);
    free(b->packed32[i]);
    free(b->conv[i]);
    free(b->grad[i]);
  }
  free(b->grad_stacked[0]);
  free(b->grad_stacked[1]);
  free(b->dout_conv);
  free(b->grad_work);
  for (i = 0; i < 4; i++) free(b->cache_copy[i]);
  free(b->pos[0]);
  free(b->pos[1]);
  free(b->cache_len);
  free(b->scratch);
  free(b->mask_u8);
  attnc_release(b->k);
  free(b);
}

/* The slot a tensor name binds to, -2 for in_proj_weight, -3 for
 * in_proj_bias, -4 for in_proj_weight_scale, -1 for none.  A weight
 * matrix's name + "_scale" names its int8 scales (DESIGN.md). */
int attnc_bindings_lookup_name(const char *name)
{
  static const char suffix[] = "_scale";
  const size_t n = strlen(name), ns = sizeof suffix - 1;
  size_t i;
  for (i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
    if (strcmp(NAMES[i].name, name) == 0) return NAMES[i].slot;
  if (strcmp(name, "in_proj_weight") == 0) return -2;
  if (strcmp(name, "in_proj_bias") == 0) return -3;
  if (strcmp(name, "in_proj_weight_scale") == 0) return -4;
  if (n > ns && strcmp(name + n - ns, suffix) == 0)
    for (i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
      if (attnc_slot_is_matrix(NAMES[i].slot) && strlen(NAMES[i].name) == n - ns && strncmp(NAMES[i].name, name, n - ns) == 0)
        return attnc_slot_scale(NAMES[i].slot);
  return -1;
}

static attnc_status wrong_dtype(const char *name, const attnc_tensor *t, const attnc_gen *g, attnc_error *err)
{
  if (t->dtype == ATTNC_I8)
    return attnc_err_set(err, ATTNC_EBIND,
                         "tensor '%s' has dtype I8, but only weight matrices of a weights=int8 spec are int8%s", name,
                         g->core ? "" : ": add weights=int8 to the spec");
  return attnc_err_set(err, ATTNC_EBIND,
                       "tensor '%s' has dtype %s; the kernel takes F32, F64, BF16 or F16 (converted to its %s)", name,
                       attnc_dtype_name(t->dtype), attnc_dtype_name(g->dtype));
}

/* The cache tensors are written in place, so they are taken only in the
 * dtype the kernel stores (no converted copy could carry the update back);
 * cache_len is read once, as an integer. */
static attnc_status check_cache_dtype(const char *name, int slot, const attnc_tensor *t, const attnc_gen *g, attnc_error *err)
{
  const attnc_dtype want = attnc_slot_dtype(g, slot);
  if (slot == ATTNC_SLOT_CACHE_LEN) {
    if (t->dtype == ATTNC_I32 || t->dtype == ATTNC_I64) return ATTNC_OK;
    return attnc_err_set(err, ATTNC_EBIND,
                         "tensor '%s' has dtype %s; cache_len counts the positions already filled: pass I32 or I64", name,
                         attnc_dtype_name(t->dtype));
  }
  if (t->dtype == want) return ATTNC_OK;
  if (slot == ATTNC_SLOT_K_CACHE_SCALE || slot == ATTNC_SLOT_V_CACHE_SCALE)
    return attnc_err_set(err, ATTNC_EBIND,
                         "tensor '%s' has dtype %s; the int8 cache's scales are F32, one per stored row, and are written "
                         "in place, so they are not converted: pass an F32 array", name, attnc_dtype_name(t->dtype));
  return attnc_err_set(err, ATTNC_EBIND,
                       "tensor '%s' has dtype %s but the spec's cache stores %s (kv_dtype=%s%s); the kernel writes the "
                       "cache in place, so it is never converted: pass the cache as %s, or set kv_dtype to match",
                       name, attnc_dtype_name(t->dtype), attnc_dtype_name(want),
                       want == ATTNC_I8 ? "int8" : want == ATTNC_F64 ? "f64" : want == ATTNC_BF16 ? "bf16" : want == ATTNC_F16 ? "f16" : "f32",
                       g->kv_dtype == g->dtype ? ", which defaults to dtype" : "", attnc_dtype_name(want));
}

/* Can a tensor of this dtype bind to slot (-2, -4: in_proj_weight and its
 * scales)?  The weight matrices of a weights=int8 kernel only as I8, with
 * their scales; everything else in any floating dtype, converted. */
static attnc_status check_dtype(const char *name, int slot, const attnc_tensor *t, const attnc_gen *g, attnc_error *err)
{
  const int matrix = slot == -2 || (slot >= 0 && attnc_slot_is_matrix(slot));
  const int scale = slot == -4 || (slot >= ATTNC_SLOT_WQ_SCALE && attnc_slot_is_weight(slot));
  if (slot == ATTNC_SLOT_MASK) return ATTNC_OK; /* a mask may have any dtype */
  if (slot >= 0 && attnc_slot_is_cache(slot)) return check_cache_dtype(name, slot, t, g, err);
  if (slot == ATTNC_SLOT_Q_POS || slot == ATTNC_SLOT_K_POS) {
    if (t->dtype == ATTNC_I32 || t->dtype == ATTNC_I64 || t->dtype == ATTNC_I16 || t->dtype == ATTNC_I8 ||
        t->dtype == ATTNC_U8 || t->dtype == ATTNC_U16 || t->dtype == ATTNC_U32 || t->dtype == ATTNC_U64)
      return ATTNC_OK;
    return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' has dtype %s; positions are integers (I32 or I64)", name,
                         attnc_dtype_name(t->dtype));
  }
  if (matrix && g->wdtype == ATTNC_I8) {
    if (t->dtype == ATTNC_I8) return ATTNC_OK;
    return attnc_err_set(err, ATTNC_EBIND,
                         "tensor '%s' has dtype %s but the spec has weights=int8: quantise the weights first "
                         "(attnc quantize --tensors FILE --out FILE.int8) or drop weights=int8", name, attnc_dtype_name(t->dtype));
  }
  if (scale && g->wdtype != ATTNC_I8)
    return attnc_err_set(err, ATTNC_EBIND, "this kernel does not use '%s' (int8 scales: the spec has no weights=int8)", name);
  if (!attnc_convert_takes(t->dtype)) return wrong_dtype(name, t, g, err);
  return ATTNC_OK;
}

/* New int8 scales: every weight matrix is packed again on the next run. */
static void forget_packed(attnc_bindings *b)
{
  int s;
  for (s = 0; s < ATTNC_SLOT_COUNT; s++)
    if (attnc_slot_is_matrix(s)) b->packed_from[s] = b->packed32_from[s] = NULL;
}

/* One role, one name: a role given under two names (q_proj.weight and
 * linear_q.weight, or q_proj.weight beside in_proj_weight) would leave
 * one of them silently unused, and its gradient zero.  Binding the same
 * name again is how new values come in.  slot: as
 * attnc_bindings_lookup_name returns it. */
static attnc_status one_name(const attnc_bindings *b, const char *name, int slot, attnc_error *err)
{
  static const int stacked[3][3] = {
    { ATTNC_SLOT_WQ, ATTNC_SLOT_WK, ATTNC_SLOT_WV },
    { ATTNC_SLOT_BQ, ATTNC_SLOT_BK, ATTNC_SLOT_BV },
    { ATTNC_SLOT_WQ_SCALE, ATTNC_SLOT_WK_SCALE, ATTNC_SLOT_WV_SCALE },
  };
  static const char *const stacked_name[3] = { "in_proj_weight", "in_proj_bias", "in_proj_weight_scale" };
  const char *other = NULL;
  int i, j, role = slot;
  if (slot <= -2) {
    for (i = 0; i < 3 && !other; i++) {
      const int s = stacked[-slot - 2][i];
      if (b->from[s] && strcmp(b->from[s], name) != 0) other = b->from[s], role = s;
    }
  } else {
    if (b->from[slot] && strcmp(b->from[slot], name) != 0) other = b->from[slot];
    for (i = 0; i < 3 && !other; i++)
      for (j = 0; j < 3; j++)
        if (stacked[i][j] == slot && (i == 0 ? b->has_in_proj_w : i == 1 ? b->has_in_proj_b : b->has_in_proj_s))
          other = stacked_name[i];
  }
  if (!other) return ATTNC_OK;
  return attnc_err_set(err, ATTNC_EBIND,
                       "tensors '%s' and '%s' both give %s (one of %s): bind only one of them (to switch names, "
                       "make new bindings)", other, name, attnc_slot_name(role), slot_aliases(role));
}

/* Bind one tensor; quiet=1 skips names the kernel does not use. */
static attnc_status bind_named(attnc_bindings *b, const char *name, const attnc_tensor *t, int quiet, attnc_error *err)
{
  const attnc_gen *g = &b->k->gen;
  int slot = attnc_bindings_lookup_name(name);
  if (!t) return attnc_err_set(err, ATTNC_EARG, "tensor '%s' is NULL", name);
  if (t->rank < 0 || t->rank > ATTNC_MAX_RANK)
    return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' has rank %d; at most %d is supported", name, t->rank, ATTNC_MAX_RANK);
  if (attnc_dtype_size(t->dtype) == 0)
    return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' has an unknown dtype (%d)", name, (int)t->dtype);
  if (slot == -1) {
    if (quiet) return ATTNC_OK;
    return attnc_err_set(err, ATTNC_EBIND, "unknown tensor name '%s' (inputs: x, kv, bias, mask, q, k, v, sinks, q_pos, k_pos, rope_freqs, "
                         "k_cache, v_cache, cache_len; weights: linear_q.weight, q_proj.weight, in_proj_weight, ...)", name);
  }
  if (slot <= -2) {
    if (g->core || (!g->qkv_bias && slot == -3) || (g->wdtype != ATTNC_I8 && slot == -4)) {
      if (quiet) return ATTNC_OK;
      return attnc_err_set(err, ATTNC_EBIND, "this kernel does not use '%s' (%s)", name,
                           g->core ? "mode=core has no projections"
                           : slot == -3 ? "the spec has qkv_bias=false" : "int8 scales: the spec has no weights=int8");
    }
    {
      attnc_status s = check_dtype(name, slot, t, g, err);
      if (s == ATTNC_OK) s = one_name(b, name, slot, err);
      if (s != ATTNC_OK) return s;
    }
    if (slot == -2) { b->in_proj_w = *t; b->has_in_proj_w = 1; }
    else if (slot == -3) { b->in_proj_b = *t; b->has_in_proj_b = 1; }
    else { b->in_proj_s = *t; b->has_in_proj_s = 1; forget_packed(b); }
    /* forget the q/k/v views split from an earlier in_proj_* so the next run splits this one */
    for (int s = 0; s < ATTNC_SLOT_COUNT; s++)
      if (b->from[s] && strcmp(b->from[s], name) == 0) {
        b->from[s] = NULL;
        b->packed_from[s] = b->packed32_from[s] = NULL;
        b->conv_from[s] = NULL;
      }
    return ATTNC_OK;
  }
  if (!g->used[slot]) {
    if (quiet) return ATTNC_OK;
    if (slot >= ATTNC_SLOT_WQ_SCALE && attnc_slot_is_weight(slot) && g->wdtype != ATTNC_I8)
      return attnc_err_set(err, ATTNC_EBIND, "this kernel does not use '%s' (int8 scales: the spec has no weights=int8)", name);
    if (attnc_slot_is_cache(slot) && !g->has_cache)
      return attnc_err_set(err, ATTNC_EBIND, "this kernel does not use '%s' (a KV cache: add cache=CAP to the spec)", name);
    if (attnc_slot_is_cache(slot))
      return attnc_err_set(err, ATTNC_EBIND,
                           "this kernel does not use '%s' (the per-row scales of an int8 cache: the spec's cache stores %s; "
                           "add kv_dtype=int8 for an int8 cache)", name, attnc_dtype_name(g->kv_dtype));
    return attnc_err_set(err, ATTNC_EBIND, "this kernel does not use '%s' (check the spec: %s)", name, g->canonical);
  }
  {
    attnc_status s = check_dtype(name, slot, t, g, err);
    if (s == ATTNC_OK) s = one_name(b, name, slot, err);
    if (s != ATTNC_OK) return s;
  }
  b->t[slot] = *t;
  if (slot >= ATTNC_SLOT_WQ_SCALE && attnc_slot_is_weight(slot)) forget_packed(b); /* packed from the old scales */
  b->packed_from[slot] = b->packed32_from[slot] = NULL; /* repack and convert on the next run, even from the same buffer */
  b->conv_from[slot] = NULL;
  snprintf(b->from_buf[slot], sizeof b->from_buf[slot], "%s", name);
  b->from[slot] = b->from_buf[slot];
  return ATTNC_OK;
}

int attnc_uses(const attnc_kernel *k, const char *name)
{
  const attnc_gen *g;
  int slot;
  if (!k || !name) return -1;
  g = &k->gen;
  slot = attnc_bindings_lookup_name(name);
  if (slot == -1) return -1;
  if (slot <= -2) /* in_proj_weight, in_proj_bias, in_proj_weight_scale: as bind_named takes them */
    return !(g->core || (!g->qkv_bias && slot == -3) || (g->wdtype != ATTNC_I8 && slot == -4));
  return g->used[slot] ? 1 : 0;
}

const char *attnc_input_key(const char *name)
{
  static const struct { const char *name, *key; } keys[] = {
    { "x", "full mode (x=...)" }, { "kv", "kv=SHAPE (cross-attention)" }, { "bias", "bias=SHAPE" },
    { "mask", "mask=key" }, { "q", "mode=core" }, { "k", "mode=core" }, { "v", "mode=core" },
    { "sinks", "sinks" }, { "rope_freqs", "rope=neox or rope=gptj" }, { "q_pos", "rope, alibi or pe" },
    { "k_pos", "rope, alibi or pe" }, { "k_cache", "cache=CAP" }, { "v_cache", "cache=CAP" },
    { "cache_len", "cache=CAP" }, { "k_cache_scale", "cache=CAP with kv_dtype=int8" },
    { "v_cache_scale", "cache=CAP with kv_dtype=int8" },
  };
  size_t i;
  for (i = 0; name && i < sizeof keys / sizeof keys[0]; i++)
    if (strcmp(keys[i].name, name) == 0) return keys[i].key;
  return NULL;
}

attnc_status attnc_bind(attnc_bindings *b, const char *name, const attnc_tensor *t, attnc_error *err)
{
  attnc_err_clear(err);
  if (!b || !name) return attnc_err_set(err, ATTNC_EARG, "attnc_bind needs bindings and a name");
  {
    const attnc_status s = bind_named(b, name, t, 0, err);
    if (s == ATTNC_OK) b->ngrad = 0; /* the gradients of the last attnc_grad belong to the tensors bound then */
    return s;
  }
}

/* A k_cache or v_cache read from a file in another float dtype than the
 * kernel stores (a bf16 file for an f32 cache, say), or an int8 cache's
 * scales in another float dtype than F32: a file must never be refused
 * for its float dtype, and the kernel writes the cache in place, so it
 * gets a converted copy the bindings own (attnc_bindings_slot gives it,
 * updated, after a run); *t is pointed at it.  An int8 cache, or an int8
 * file, must match: their scales cannot be made up. */
static attnc_status cache_from_file(attnc_bindings *b, int slot, attnc_tensor *t, attnc_error *err)
{
  const attnc_gen *g = &b->k->gen;
  const int c = slot == ATTNC_SLOT_K_CACHE ? 0 : slot == ATTNC_SLOT_V_CACHE ? 1 : slot == ATTNC_SLOT_K_CACHE_SCALE ? 2
              : slot == ATTNC_SLOT_V_CACHE_SCALE ? 3 : -1;
  const attnc_dtype want = c >= 2 ? ATTNC_F32 : g->kv_dtype;
  double n;
  void *mem;
  if (c < 0 || !g->has_cache || t->dtype == want || want == ATTNC_I8 || (c >= 2 && g->kv_dtype != ATTNC_I8) ||
      !attnc_convert_takes(t->dtype) || t->rank < 0 || t->rank > ATTNC_MAX_RANK)
    return ATTNC_OK; /* as it is: attnc_bind's checks speak */
  n = elems_of(t->shape, t->rank);
  if (!(n >= 0 && n <= MAX_ELEMS)) return ATTNC_OK; /* a bad shape: refused by bind_named's checks */
  mem = malloc((size_t)n * attnc_dtype_size(want) + 1);
  if (!mem) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory converting '%s' to %s", attnc_slot_name(slot),
                                 attnc_dtype_name(want));
  attnc_convert(t->data, t->dtype, mem, want, (size_t)n);
  free(b->cache_copy[c]);
  b->cache_copy[c] = mem;
  t->data = mem;
  t->dtype = want;
  return ATTNC_OK;
}

attnc_status attnc_bind_safetensors(attnc_bindings *b, const attnc_safetensors *f, const char *prefix, int *nbound, attnc_error *err)
{
  size_t i, n, plen = prefix ? strlen(prefix) : 0;
  int count = 0;
  attnc_err_clear(err);
  if (!b || !f) return attnc_err_set(err, ATTNC_EARG, "attnc_bind_safetensors needs bindings and a file");
  b->ngrad = 0;
  n = attnc_st_count(f);
  for (i = 0; i < n; i++) {
    const char *name = attnc_st_name(f, i);
    attnc_tensor t;
    attnc_status s;
    const char *key = name;
    int slot;
    if (plen && strncmp(name, prefix, plen) == 0) key = name + plen;
    else if (plen && (attnc_slot_is_weight(attnc_bindings_lookup_name(name)) || attnc_bindings_lookup_name(name) <= -2)) continue; /* a weight outside the prefix */
    slot = attnc_bindings_lookup_name(key);
    if (slot == -1) continue;
    if (slot >= 0 && !b->k->gen.used[slot]) continue;
    s = attnc_st_get(f, i, &t);
    if (s != ATTNC_OK) return attnc_err_set(err, s, "cannot read tensor '%s'", name);
    s = cache_from_file(b, slot, &t, err);
    if (s == ATTNC_OK) s = bind_named(b, key, &t, 1, err);
    if (s != ATTNC_OK) return s;
    count++;
  }
  if (nbound) *nbound = count;
  return ATTNC_OK;
}

static int find_dim(const attnc_gen *g, const char *name)
{
  int i;
  for (i = 0; i < g->ndims; i++)
    if (strcmp(g->dim_names[i], name) == 0) return i;
  return -1;
}

attnc_status attnc_bind_dim(attnc_bindings *b, const char *name, int64_t value, attnc_error *err)
{
  int d;
  attnc_err_clear(err);
  if (!b || !name) return attnc_err_set(err, ATTNC_EARG, "attnc_bind_dim needs bindings and a name");
  d = find_dim(&b->k->gen, name);
  if (d < 0 || d >= 64) return attnc_err_set(err, ATTNC_EBIND, "the spec has no named dim '%s'", name);
  if (value < 1 || value >= ((int64_t)1 << 31))
    return attnc_err_set(err, ATTNC_EBIND, "dim %s = %lld is out of range (1 .. 2^31-1)", name, (long long)value);
  b->dims[d] = value;
  b->dim_set[d] = 1;
  snprintf(b->dim_from[d], sizeof b->dim_from[d], "attnc_bind_dim"); /* the C API's words: the CLI says --dim itself */
  return ATTNC_OK;
}

const int64_t *attnc_bindings_dims(const attnc_bindings *b) { return b ? b->dims : NULL; }

void attnc_bindings_shape_text(const int64_t *dims, int rank, char *buf, size_t n)
{
  int i;
  size_t len = 0;
  len += (size_t)snprintf(buf, n, "(");
  for (i = 0; i < rank && len < n; i++)
    len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)dims[i]);
  if (len < n) snprintf(buf + len, n - len, ")");
}

/* Data must be aligned to its element size: the kernels and primitives
 * load whole elements (and a compiler may assume the alignment). */
attnc_status attnc_bindings_check_aligned(const char *what, const attnc_tensor *t, attnc_error *err)
{
  size_t es = attnc_dtype_size(t->dtype);
  if (t->data && es > 1 && (uintptr_t)t->data % es != 0)
    return attnc_err_set(err, ATTNC_EBIND,
                         "%s data at %p is not aligned to %zu bytes (its dtype %s needs it): pass an aligned buffer",
                         what, t->data, es, attnc_dtype_name(t->dtype));
  return ATTNC_OK;
}

/* Check a tensor's shape against a signature, binding named dims. */
static attnc_status check_shape(attnc_bindings *b, const char *what, const attnc_tensor *t, const attnc_shape *want, attnc_error *err)
{
  const attnc_gen *g = &b->k->gen;
  char got[256], label[160];
  double n;
  int a;
  attnc_bindings_shape_text(t->shape, t->rank, got, sizeof got);
  if (t->rank != want->rank)
    return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' has %d dims %s but the kernel expects %d", what, t->rank, got, want->rank);
  for (a = 0; a < want->rank; a++) {
    int64_t w = want->dim[a];
    if (w > 0) {
      if (t->shape[a] != w)
        return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' %s: axis %d is %lld but the spec says %lld", what, got, a,
                             (long long)t->shape[a], (long long)w);
    } else if (w == 0 || -w > g->ndims) {
      return attnc_err_set(err, ATTNC_EBIND, "tensor '%s': the kernel's shape table is broken (axis %d: %lld); regenerate it",
                           what, a, (long long)w);
    } else {
      int d = (int)(-w - 1);
      if (b->dim_set[d]) {
        if (t->shape[a] != b->dims[d])
          return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' %s: axis %d is %lld but dim %s = %lld (from %s)", what, got, a,
                               (long long)t->shape[a], g->dim_names[d], (long long)b->dims[d], b->dim_from[d]);
      } else {
        if (t->shape[a] < 1 || t->shape[a] >= ((int64_t)1 << 31))
          return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' %s: axis %d (dim %s) must be between 1 and 2^31-1", what, got, a, g->dim_names[d]);
        b->dims[d] = t->shape[a];
        b->dim_set[d] = 1;
        snprintf(b->dim_from[d], sizeof b->dim_from[d], "%s axis %d", what, a);
      }
    }
  }
  n = elems_of(t->shape, t->rank);
  if (n > MAX_ELEMS)
    return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' %s has %.3g elements, more than the limit 2^40", what, got, n);
  if (!t->data && n > 0) return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' has no data", what);
  snprintf(label, sizeof label, "tensor '%s'", what);
  return attnc_bindings_check_aligned(label, t, err);
}

static int64_t resolve(const attnc_bindings *b, int64_t d)
{
  return d > 0 ? d : b->dims[-d - 1];
}

/* A stacked 1-D tensor (in_proj_bias, in_proj_weight_scale) split into
 * the q, k and v slots not bound on their own: rows[] values each. */
static attnc_status split_rows(attnc_bindings *b, const attnc_tensor *t, const char *name, const char *what,
                               const int *slots, const int64_t *rows, attnc_error *err)
{
  const size_t es = attnc_dtype_size(t->dtype);
  const int64_t total = rows[0] + rows[1] + rows[2];
  int64_t off = 0;
  int i;
  if (t->rank != 1 || t->shape[0] != total)
    return attnc_err_set(err, ATTNC_EBIND, "%s must be (%lld)%s", name, (long long)total, what);
  if (!t->data) return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' has no data", name);
  for (i = 0; i < 3; i++) {
    if (!b->from[slots[i]]) {
      attnc_tensor v = { t->dtype, 1, { rows[i] }, (char *)t->data + (size_t)off * es };
      b->t[slots[i]] = v;
      b->from[slots[i]] = name;
    }
    off += rows[i];
  }
  return ATTNC_OK;
}

/* Split torch's stacked in_proj_weight [Wq; Wk; Wv] into three views. */
static attnc_status split_in_proj(attnc_bindings *b, attnc_error *err)
{
  const attnc_gen *g = &b->k->gen;
  int64_t hc = (int64_t)g->heads * g->head_dim, gc = (int64_t)g->kv_heads * g->head_dim;
  int i;
  int slots_w[3] = { ATTNC_SLOT_WQ, ATTNC_SLOT_WK, ATTNC_SLOT_WV };
  int slots_b[3] = { ATTNC_SLOT_BQ, ATTNC_SLOT_BK, ATTNC_SLOT_BV };
  int64_t rows[3] = { hc, gc, gc }, off = 0;
  if (b->has_in_proj_w) {
    const attnc_tensor *t = &b->in_proj_w;
    const size_t es = attnc_dtype_size(t->dtype);
    if (g->c_in != g->c_kv)
      return attnc_err_set(err, ATTNC_EBIND, "in_proj_weight needs q and kv of equal width (%lld vs %lld); use q_proj_weight, k_proj_weight, v_proj_weight",
                           (long long)g->c_in, (long long)g->c_kv);
    if (t->rank != 2 || t->shape[0] != hc + 2 * gc || t->shape[1] != g->c_in)
      return attnc_err_set(err, ATTNC_EBIND, "in_proj_weight must be (%lld, %lld) = [Wq; Wk; Wv]",
                           (long long)(hc + 2 * gc), (long long)g->c_in);
    if (!t->data) return attnc_err_set(err, ATTNC_EBIND, "tensor 'in_proj_weight' has no data");
    for (i = 0; i < 3; i++) {
      if (!b->from[slots_w[i]]) {
        attnc_tensor v = { t->dtype, 2, { rows[i], g->c_in }, (char *)t->data + (size_t)off * (size_t)g->c_in * es };
        b->t[slots_w[i]] = v;
        b->from[slots_w[i]] = "in_proj_weight";
      }
      off += rows[i];
    }
  }
  if (b->has_in_proj_s && g->wdtype == ATTNC_I8) {
    static const int slots_s[3] = { ATTNC_SLOT_WQ_SCALE, ATTNC_SLOT_WK_SCALE, ATTNC_SLOT_WV_SCALE };
    attnc_status s = split_rows(b, &b->in_proj_s, "in_proj_weight_scale", ", one scale per row of in_proj_weight", slots_s, rows, err);
    if (s != ATTNC_OK) return s;
  }
  if (b->has_in_proj_b && g->qkv_bias) return split_rows(b, &b->in_proj_b, "in_proj_bias", "", slots_b, rows, err);
  return ATTNC_OK;
}

static int nonzero(const void *base, size_t i, attnc_dtype d)
{
  switch (d) {
  case ATTNC_F32: return ((const float *)base)[i] != 0.0f;
  case ATTNC_F64: return ((const double *)base)[i] != 0.0;
  case ATTNC_F16: case ATTNC_BF16: return (((const uint16_t *)base)[i] & 0x7fff) != 0; /* -0 is zero */
  case ATTNC_I16: case ATTNC_U16: return ((const uint16_t *)base)[i] != 0;
  case ATTNC_I32: case ATTNC_U32: return ((const uint32_t *)base)[i] != 0;
  case ATTNC_I64: case ATTNC_U64: return ((const uint64_t *)base)[i] != 0;
  default: return ((const unsigned char *)base)[i] != 0;
  }
}

/* The mask may have fewer dims than (batch..., Sk): align from the right,
 * broadcast size-1 and missing axes with stride 0, copy it to bytes. */
static attnc_status prepare_mask(attnc_bindings *b, attnc_error *err)
{
  const attnc_gen *g = &b->k->gen;
  const attnc_tensor *t = &b->t[ATTNC_SLOT_MASK];
  int nb = g->mask.rank - 1, m = t->rank, a;
  int64_t sk = resolve(b, g->mask.dim[nb]), n = 1, stride = 1;
  char got[256];
  attnc_status s;
  attnc_bindings_shape_text(t->shape, t->rank, got, sizeof got);
  if (!t->data) return attnc_err_set(err, ATTNC_EBIND, "tensor 'mask' has no data");
  if ((s = attnc_bindings_check_aligned("tensor 'mask'", t, err)) != ATTNC_OK) return s;
  if (m < 1 || m > nb + 1)
    return attnc_err_set(err, ATTNC_EBIND, "mask %s must have between 1 and %d dims: (batch axes..., Sk), aligned from the right", got, nb + 1);
  if (t->shape[m - 1] != sk)
    return attnc_err_set(err, ATTNC_EBIND, "mask %s: its last axis must be Sk = %lld", got, (long long)sk);
  for (a = 0; a < ATTNC_ABI_MAX_RANK; a++) b->mask_stride[a] = 0;
  b->mask_stride[nb] = 1;
  stride = sk;
  for (a = m - 2; a >= 0; a--) {
    int ba = nb - (m - 1 - a); /* the batch axis this mask axis aligns with */
    int64_t want = resolve(b, g->mask.dim[ba]);
    if (t->shape[a] != want && t->shape[a] != 1)
      return attnc_err_set(err, ATTNC_EBIND, "mask %s: axis %d is %lld but must be %s%lld (batch axis %d; mask dims align from the right)",
                           got, a, (long long)t->shape[a], want == 1 ? "" : "1 or ", (long long)want, ba);
    b->mask_stride[ba] = t->shape[a] == 1 ? 0 : (long)stride;
    stride *= t->shape[a];
  }
  for (a = 0; a < m; a++) n *= t->shape[a];
  if ((size_t)n > b->mask_n) {
    unsigned char *p = realloc(b->mask_u8, (size_t)n);
    if (!p) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory for the mask");
    b->mask_u8 = p;
    b->mask_n = (size_t)n;
  }
  for (a = 0; a < n; a++) b->mask_u8[a] = (unsigned char)nonzero(t->data, (size_t)a, t->dtype);
  return ATTNC_OK;
}

/* Element i of an integer tensor. */
static long long int_at(const attnc_tensor *t, size_t i)
{
  switch (t->dtype) {
  case ATTNC_I8: return ((const int8_t *)t->data)[i];
  case ATTNC_I16: return ((const int16_t *)t->data)[i];
  case ATTNC_I32: return ((const int32_t *)t->data)[i];
  case ATTNC_U8: return ((const uint8_t *)t->data)[i];
  case ATTNC_U16: return ((const uint16_t *)t->data)[i];
  case ATTNC_U32: return ((const uint32_t *)t->data)[i];
  case ATTNC_U64: return (long long)((const uint64_t *)t->data)[i];
  default: return ((const int64_t *)t->data)[i];
  }
}

/* An integer tensor t aligned from the right with the full shape `full`
 * (size-1 axes broadcast; the last axis too unless last_exact), copied into
 * a dense int64 array of the full shape, *dst with room for *cap.  It may
 * have min_rank .. full->rank dims; `form` says what they are, for errors. */
static attnc_status broadcast_int64(attnc_bindings *b, const attnc_tensor *t, const char *name, const attnc_shape *full,
                                    int min_rank, int last_exact, const char *form, long long **dst, size_t *cap,
                                    attnc_error *err)
{
  int64_t dims[ATTNC_MAX_RANK], stride[ATTNC_MAX_RANK], st = 1, n = 1, e;
  int r = full->rank, m = t->rank, a;
  char got[256];
  attnc_status s;
  attnc_bindings_shape_text(t->shape, t->rank, got, sizeof got);
  if (!t->data) return attnc_err_set(err, ATTNC_EBIND, "tensor '%s' has no data", name);
  if ((s = attnc_bindings_check_aligned(name, t, err)) != ATTNC_OK) return s;
  for (a = 0; a < r; a++) dims[a] = resolve(b, full->dim[a]);
  if (m < min_rank || m > r)
    return min_rank > 0 ? attnc_err_set(err, ATTNC_EBIND, "%s %s must have between %d and %d dims: %s, aligned from the right",
                                        name, got, min_rank, r, form)
                        : attnc_err_set(err, ATTNC_EBIND, "%s %s must have at most %d dims: %s, aligned from the right",
                                        name, got, r, form);
  for (a = r - 1; a >= 0; a--) stride[a] = 0;
  for (a = m - 1; a >= 0; a--) {
    const int fa = r - (m - a); /* the full axis this one aligns with */
    const int exact = last_exact && fa == r - 1;
    if (t->shape[a] != dims[fa] && (t->shape[a] != 1 || exact))
      return attnc_err_set(err, ATTNC_EBIND, "%s %s: axis %d is %lld but must be %s%lld (dims align from the right)", name, got, a,
                           (long long)t->shape[a], exact || dims[fa] == 1 ? "" : "1 or ", (long long)dims[fa]);
    stride[fa] = t->shape[a] == 1 ? 0 : st;
    st *= t->shape[a];
  }
  for (a = 0; a < r; a++) n *= dims[a];
  if ((size_t)n > *cap || !*dst) {
    long long *p = realloc(*dst, sizeof *p * (size_t)(n > 0 ? n : 1));
    if (!p) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory for %s", name);
    *dst = p;
    *cap = (size_t)n;
  }
  for (e = 0; e < n; e++) { /* element e of the full shape -> its source element */
    int64_t rest = e, src = 0;
    for (a = r - 1; a >= 0; a--) {
      src += (rest % dims[a]) * stride[a];
      rest /= dims[a];
    }
    (*dst)[e] = int_at(t, (size_t)src);
  }
  return ATTNC_OK;
}

/* q_pos (which 0) or k_pos (1), of shape (S) .. (batch axes..., S) aligned
 * from the right like the mask, broadcast into a dense int64 copy of the
 * full shape, which the kernel reads. */
static attnc_status prepare_positions(attnc_bindings *b, int which, attnc_error *err)
{
  return broadcast_int64(b, &b->t[which ? ATTNC_SLOT_K_POS : ATTNC_SLOT_Q_POS], which ? "k_pos" : "q_pos",
                         &b->k->gen.pos_shape[which], 1, 1, which ? "(batch axes..., Sk)" : "(batch axes..., Sq)",
                         &b->pos[which], &b->pos_n[which], err);
}

/* cache_len: a scalar or the batch axes aligned from the right (size 1
 * broadcasts), as a dense int64 array with one entry per batch element.
 * Its values are checked by attnc_run, before the kernel writes anything. */
static attnc_status prepare_cache_len(attnc_bindings *b, attnc_error *err)
{
  const attnc_gen *g = &b->k->gen;
  char form[300], sh[256];
  {
    int64_t d[ATTNC_MAX_RANK];
    int a, r = g->shape[ATTNC_SLOT_CACHE_LEN].rank;
    for (a = 0; a < r; a++) d[a] = resolve(b, g->shape[ATTNC_SLOT_CACHE_LEN].dim[a]);
    attnc_bindings_shape_text(d, r, sh, sizeof sh);
  }
  snprintf(form, sizeof form, "a scalar, or the batch axes %s", sh);
  return broadcast_int64(b, &b->t[ATTNC_SLOT_CACHE_LEN], b->from[ATTNC_SLOT_CACHE_LEN], &g->shape[ATTNC_SLOT_CACHE_LEN], 0, 0,
                         form, &b->cache_len, &b->cache_len_n, err);
}

/* Rows (elements / last dim) of the tensor of signature sh, in double. */
static double rows_of(const attnc_bindings *b, const attnc_shape *sh)
{
  double n = 1;
  int a;
  for (a = 0; a + 1 < sh->rank; a++) n *= (double)resolve(b, sh->dim[a]);
  return n;
}

/* With every dim bound: the output and the kernel's intermediate results
 * (projected q, k, v and the attention output, each a row per row of its
 * input, at most `width` wide) must stay within the tensor limit too.
 * Every size the generated code computes (its scratch layout: a few of
 * these, rounded up to tiles, times at most 16 key splits) then fits in a
 * long with room to spare, so NAME_scratch_bytes cannot overflow. */
static attnc_status check_work(const attnc_bindings *b, attnc_error *err)
{
  const attnc_gen *g = &b->k->gen;
  static const int in[] = { ATTNC_SLOT_X, ATTNC_SLOT_KV, ATTNC_SLOT_Q, ATTNC_SLOT_K, ATTNC_SLOT_V };
  double out = 1, rows = rows_of(b, &g->out), width = 1, w[5];
  size_t i;
  int a;
  for (a = 0; a < g->out.rank; a++) out *= (double)resolve(b, g->out.dim[a]);
  if (out > MAX_ELEMS) return attnc_err_set(err, ATTNC_EBIND, "the output would have %.3g elements, more than the limit 2^40", out);
  for (i = 0; i < sizeof in / sizeof in[0]; i++)
    if (g->used[in[i]]) rows += rows_of(b, &g->shape[in[i]]);
  w[0] = (double)g->heads * g->head_dim;
  w[1] = (double)g->kv_heads * g->head_dim;
  w[2] = (double)g->c_in;
  w[3] = (double)g->c_kv;
  w[4] = (double)g->head_dim;
  for (i = 0; i < 5; i++)
    if (w[i] > width) width = w[i];
  if (rows * width > MAX_ELEMS)
    return attnc_err_set(err, ATTNC_EBIND,
                         "the kernel's intermediate results would have %.3g elements (%.3g rows of the inputs and output, "
                         "up to %.0f wide), more than the limit 2^40",
                         rows * width, rows, width);
  return ATTNC_OK;
}

/* A signature as the spec writes it: "(B, 2, CAP, 32)". */
static void sig_text(const attnc_gen *g, const attnc_shape *sh, char *buf, size_t n)
{
  size_t len = (size_t)snprintf(buf, n, "(");
  int a;
  for (a = 0; a < sh->rank && len < n; a++) {
    const int64_t d = sh->dim[a];
    if (d > 0) len += (size_t)snprintf(buf + len, n - len, "%s%lld", a ? ", " : "", (long long)d);
    else len += (size_t)snprintf(buf + len, n - len, "%s%s", a ? ", " : "", -d <= g->ndims ? g->dim_names[-d - 1] : "?");
  }
  if (len < n) snprintf(buf + len, n - len, ")");
}

/* The form of each cache tensor, for messages. */
static const char *cache_form(int slot)
{
  switch (slot) {
  case ATTNC_SLOT_K_CACHE: case ATTNC_SLOT_V_CACHE: return "(batch axes..., G, CAP, c)";
  case ATTNC_SLOT_CACHE_LEN: return "a scalar, or the batch axes";
  default: return "(batch axes..., G, CAP)";
  }
}

static attnc_status missing_cache(const attnc_gen *g, int slot, attnc_error *err)
{
  char sh[256];
  sig_text(g, &g->shape[slot], sh, sizeof sh);
  if (slot == ATTNC_SLOT_CACHE_LEN)
    return attnc_err_set(err, ATTNC_EMISSING,
                         "missing tensor 'cache_len': the spec has cache=CAP: bind the number of cache positions already "
                         "filled (0 for an empty cache), I32 or I64, a scalar or one per batch element %s (size-1 axes "
                         "broadcast)", sh);
  return attnc_err_set(err, ATTNC_EMISSING,
                       "missing tensor '%s': the spec has cache=CAP: bind the %s, %s = %s of %s, which the kernel "
                       "updates in place", attnc_slot_name(slot),
                       slot == ATTNC_SLOT_K_CACHE ? "key cache" : slot == ATTNC_SLOT_V_CACHE ? "value cache"
                       : "int8 cache's per-row scales", cache_form(slot), sh, attnc_dtype_name(attnc_slot_dtype(g, slot)));
}

/* A cache of the wrong shape: the message also says what shape it must have. */
static attnc_status cache_shape_hint(const attnc_gen *g, int slot, attnc_status s, attnc_error *err)
{
  char sh[256];
  size_t len;
  if (!err || s != ATTNC_EBIND) return s;
  sig_text(g, &g->shape[slot], sh, sizeof sh);
  len = strlen(err->message);
  if (len < sizeof err->message)
    snprintf(err->message + len, sizeof err->message - len, "; %s is %s = %s, exactly (it is written in place, never broadcast)",
             attnc_slot_name(slot), cache_form(slot), sh);
  return s;
}

/* The kernel writes the caches while it reads them: two that share memory
 * would overwrite each other's rows. */
static attnc_status check_cache_overlap(const attnc_bindings *b, attnc_error *err)
{
  static const int slots[] = { ATTNC_SLOT_K_CACHE, ATTNC_SLOT_V_CACHE, ATTNC_SLOT_K_CACHE_SCALE, ATTNC_SLOT_V_CACHE_SCALE };
  size_t i, j;
  for (i = 0; i < 4; i++)
    for (j = i + 1; j < 4; j++) {
      const attnc_tensor *x = &b->t[slots[i]], *y = &b->t[slots[j]];
      const char *xa, *ya;
      if (!b->from[slots[i]] || !b->from[slots[j]] || !x->data || !y->data) continue;
      xa = x->data;
      ya = y->data;
      if (xa < ya + (size_t)elems_of(y->shape, y->rank) * attnc_dtype_size(y->dtype) &&
          ya < xa + (size_t)elems_of(x->shape, x->rank) * attnc_dtype_size(x->dtype))
        return attnc_err_set(err, ATTNC_EBIND,
                             "tensors '%s' and '%s' share memory: the kernel writes both in place; give each its own buffer",
                             b->from[slots[i]], b->from[slots[j]]);
    }
  return ATTNC_OK;
}

/* rope_freqs divide the angles: each must be a finite number > 0 (a 0
 * would make every angle of its pair infinite, and q, k and a cache's
 * new rows NaN). */
static attnc_status check_rope_freqs(const attnc_bindings *b, attnc_error *err)
{
  const attnc_tensor *t = &b->t[ATTNC_SLOT_ROPE_FREQS];
  const double n = elems_of(t->shape, t->rank);
  long i;
  for (i = 0; i < (long)n; i++) {
    double f;
    attnc_convert((const char *)t->data + (size_t)i * attnc_dtype_size(t->dtype), t->dtype, &f, ATTNC_F64, 1);
    if (!(f > 0 && f <= 1.7976931348623157e308))
      return attnc_err_set(err, ATTNC_EBIND,
                           "%s[%ld] = %g: each frequency factor divides its pair's angle (Llama 3's are 1 to 8), so it "
                           "must be a finite number > 0; nothing was run",
                           b->from[ATTNC_SLOT_ROPE_FREQS], i, f);
  }
  return ATTNC_OK;
}

attnc_status attnc_output_shape(attnc_bindings *b, attnc_tensor *out, attnc_error *err)
{
  const attnc_gen *g;
  attnc_status s;
  int slot, i, d;
  static const int order[] = {
    ATTNC_SLOT_X, ATTNC_SLOT_KV, ATTNC_SLOT_Q, ATTNC_SLOT_K, ATTNC_SLOT_V, ATTNC_SLOT_BIAS, ATTNC_SLOT_SINKS, ATTNC_SLOT_ROPE_FREQS,
    ATTNC_SLOT_WQ, ATTNC_SLOT_BQ, ATTNC_SLOT_WK, ATTNC_SLOT_BK, ATTNC_SLOT_WV, ATTNC_SLOT_BV,
    ATTNC_SLOT_WG, ATTNC_SLOT_BG, ATTNC_SLOT_WO, ATTNC_SLOT_BO, ATTNC_SLOT_WQ_SCALE, ATTNC_SLOT_WK_SCALE,
    ATTNC_SLOT_WV_SCALE, ATTNC_SLOT_WG_SCALE, ATTNC_SLOT_WO_SCALE,
    ATTNC_SLOT_K_CACHE, ATTNC_SLOT_V_CACHE, ATTNC_SLOT_K_CACHE_SCALE, ATTNC_SLOT_V_CACHE_SCALE
  };
  attnc_err_clear(err);
  if (!b) return attnc_err_set(err, ATTNC_EARG, "bindings are NULL");
  g = &b->k->gen;
  /* named dims from the inputs, forgetting what an earlier call inferred */
  for (d = 0; d < g->ndims && d < 64; d++)
    if (b->dim_set[d] && strcmp(b->dim_from[d], "attnc_bind_dim") != 0) b->dim_set[d] = 0;
  s = split_in_proj(b, err);
  if (s != ATTNC_OK) return s;
  for (i = 0; i < (int)(sizeof order / sizeof order[0]); i++) {
    slot = order[i];
    if (!g->used[slot] || (g->optional[slot] && !b->from[slot])) continue;
    if (!b->from[slot] && attnc_slot_is_cache(slot))
      return missing_cache(g, slot, err);
    if (!b->from[slot])
      return attnc_err_set(err, ATTNC_EMISSING, "missing tensor '%s' (bind it as %s)", attnc_slot_name(slot), slot_aliases(slot));
    s = check_shape(b, b->from[slot], &b->t[slot], &g->shape[slot], err);
    if (s != ATTNC_OK) return attnc_slot_is_cache(slot) ? cache_shape_hint(g, slot, s, err) : s;
  }
  if (g->has_cache) {
    if (!b->from[ATTNC_SLOT_CACHE_LEN]) return missing_cache(g, ATTNC_SLOT_CACHE_LEN, err);
    if ((s = check_cache_overlap(b, err)) != ATTNC_OK) return s;
  }
  for (d = 0; d < g->ndims; d++)
    if (!b->dim_set[d]) return attnc_err_set(err, ATTNC_EMISSING, "named dim %s is not bound", g->dim_names[d]);
  s = check_work(b, err);
  if (s != ATTNC_OK) return s;
  for (i = 0; i < 2; i++)
    if (g->has_positions && b->from[i ? ATTNC_SLOT_K_POS : ATTNC_SLOT_Q_POS] && (s = prepare_positions(b, i, err)) != ATTNC_OK)
      return s;
  if (g->has_cache && (s = prepare_cache_len(b, err)) != ATTNC_OK) return s;
  if (g->rope && b->from[ATTNC_SLOT_ROPE_FREQS] && (s = check_rope_freqs(b, err)) != ATTNC_OK) return s;
  if (g->has_mask) {
    if (!b->from[ATTNC_SLOT_MASK])
      return attnc_err_set(err, ATTNC_EMISSING, "missing tensor 'mask' (the spec has mask=key)");
    s = prepare_mask(b, err);
    if (s != ATTNC_OK) return s;
  }
  if (out) {
    out->dtype = g->dtype;
    out->rank = g->out.rank;
    for (i = 0; i < g->out.rank; i++) out->shape[i] = resolve(b, g->out.dim[i]);
  }
  return ATTNC_OK;
}

/* The extra outputs: their name, whether the spec has each, and its shape. */
static int extra_output(const attnc_gen *g, const char *name, const attnc_shape **shape)
{
  if (strcmp(name, "lse") == 0 && g->has_lse) { *shape = &g->lse; return 1; }
  if (strcmp(name, "attn") == 0 && g->has_attn) { *shape = &g->attn; return 1; }
  return 0;
}

static attnc_status no_output(const char *name, attnc_error *err)
{
  const int slot = attnc_bindings_lookup_name(name);
  if (slot >= 0 && attnc_slot_is_cache(slot) == 1)
    return attnc_err_set(err, ATTNC_EARG,
                         "'%s' is not an output: bind the caller's %s with attnc_bind and the kernel updates it in "
                         "place (attnc_inplace_name lists such tensors)", name, name);
  return attnc_err_set(err, ATTNC_EARG, "the spec has no output '%s'%s", name,
                       strcmp(name, "lse") == 0 ? " (add the key lse)"
                       : strcmp(name, "attn") == 0 ? " (add the key weights_out)"
                       : " (outputs: out; lse with the key lse; attn with weights_out)");
}

attnc_status attnc_output_info(attnc_bindings *b, const char *name, attnc_tensor *t, attnc_error *err)
{
  const attnc_shape *sh;
  attnc_status s;
  int i;
  attnc_err_clear(err);
  if (!b || !name || !t) return attnc_err_set(err, ATTNC_EARG, "attnc_output_info needs bindings, a name and a tensor");
  if (strcmp(name, "out") == 0) return attnc_output_shape(b, t, err);
  if (!extra_output(&b->k->gen, name, &sh)) return no_output(name, err);
  s = attnc_output_shape(b, NULL, err); /* binds the named dims */
  if (s != ATTNC_OK) return s;
  t->dtype = ATTNC_F32;
  t->rank = sh->rank;
  for (i = 0; i < sh->rank; i++) t->shape[i] = resolve(b, sh->dim[i]);
  return ATTNC_OK;
}

attnc_status attnc_bind_output(attnc_bindings *b, const char *name, const attnc_tensor *t, attnc_error *err)
{
  const attnc_shape *sh;
  attnc_err_clear(err);
  if (!b || !name || !t) return attnc_err_set(err, ATTNC_EARG, "attnc_bind_output needs bindings, a name and a tensor");
  if (strcmp(name, "out") == 0) return attnc_err_set(err, ATTNC_EARG, "the spec has no output 'out' to bind: pass out to attnc_run");
  if (!extra_output(&b->k->gen, name, &sh)) return no_output(name, err);
  if (strcmp(name, "lse") == 0) { b->lse = *t; b->has_lse = 1; }
  else { b->attn = *t; b->has_attn = 1; }
  return ATTNC_OK;
}

/* One bound extra output, checked against the shape the dims give. */
static attnc_status check_output(attnc_bindings *b, const char *name, const char *key, int bound, const attnc_tensor *t,
                                 attnc_error *err)
{
  attnc_tensor want;
  attnc_status s;
  char what[64];
  int i;
  if (!bound)
    return attnc_err_set(err, ATTNC_EMISSING, "the spec has %s: bind its output with attnc_bind_output(b, \"%s\", ...) (F32, see attnc_output_info)", key, name);
  if ((s = attnc_output_info(b, name, &want, err)) != ATTNC_OK) return s;
  if (t->dtype != ATTNC_F32 || t->rank != want.rank)
    return attnc_err_set(err, ATTNC_EBIND, "output %s must be F32 with %d dims", name, want.rank);
  for (i = 0; i < want.rank; i++)
    if (t->shape[i] != want.shape[i]) {
      char w[256];
      attnc_bindings_shape_text(want.shape, want.rank, w, sizeof w);
      return attnc_err_set(err, ATTNC_EBIND, "output %s axis %d is %lld but must be %lld: %s is %s", name, i,
                           (long long)t->shape[i], (long long)want.shape[i], name, w);
    }
  if (!t->data) return attnc_err_set(err, ATTNC_EARG, "output %s has no data", name);
  snprintf(what, sizeof what, "the output %s", name);
  return attnc_bindings_check_aligned(what, t, err);
}

attnc_status attnc_bindings_check_outputs(attnc_bindings *b, attnc_error *err)
{
  attnc_status s = ATTNC_OK;
  if (b->k->gen.has_lse && (s = check_output(b, "lse", "lse", b->has_lse, &b->lse, err)) != ATTNC_OK) return s;
  if (b->k->gen.has_attn) s = check_output(b, "attn", "weights_out", b->has_attn, &b->attn, err);
  return s;
}
