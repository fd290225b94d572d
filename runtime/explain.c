/* attnc_explain: what a spec computes, in numbers: every tensor with its
 * shape and bytes, FLOPs per step (2 per multiply-add), scratch memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct text {
  char *buf;
  size_t len, cap;
  int oom;
};

static void put(struct text *t, const char *fmt, ...) ATTNC_PRINTF(2, 3);

#include <stdarg.h>
static void put(struct text *t, const char *fmt, ...)
{
  va_list ap;
  int n;
  if (t->oom) return;
  for (;;) {
    size_t room = t->cap - t->len;
    va_start(ap, fmt);
    n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { t->oom = 1; return; }
    if (t->buf && (size_t)n < room) { t->len += (size_t)n; return; }
    {
      size_t cap = (t->cap + (size_t)n + 256) * 2;
      char *p = realloc(t->buf, cap);
      if (!p) { t->oom = 1; return; }
      t->buf = p;
      t->cap = cap;
    }
  }
}

/* Resolve a signature dim with the given named values; 0 if unknown. */
static double dimval(const attnc_gen *g, int64_t d, const char *const *names, const int64_t *values, int n)
{
  int i;
  if (d > 0) return (double)d;
  for (i = 0; i < n; i++)
    if (strcmp(names[i], g->dim_names[-d - 1]) == 0) return (double)values[i];
  return 0;
}

static void shape_line(struct text *t, const attnc_gen *g, const char *label, const attnc_shape *sh, size_t es,
                       const char *const *names, const int64_t *values, int n, double *total)
{
  int i, known = 1;
  double elems = 1;
  put(t, "  %-6s (", label);
  for (i = 0; i < sh->rank; i++) {
    double v = dimval(g, sh->dim[i], names, values, n);
    if (sh->dim[i] > 0) put(t, "%s%lld", i ? ", " : "", (long long)sh->dim[i]);
    else if (v > 0) put(t, "%s%s=%.0f", i ? ", " : "", g->dim_names[-sh->dim[i] - 1], v);
    else put(t, "%s%s", i ? ", " : "", g->dim_names[-sh->dim[i] - 1]);
    if (v <= 0) known = 0;
    elems *= v;
  }
  put(t, ")");
  if (known) {
    put(t, "  %.0f elements, %.0f bytes\n", elems, elems * (double)es);
    if (total) *total += elems * (double)es;
  } else {
    put(t, "  (bytes depend on unbound dims; pass --dim NAME=N)\n");
  }
}

/* The (query, key) pairs that causal and window masks leave visible, over
 * sq query positions and sk keys (docs/spec.md: p = i, or i + Sk - Sq with
 * causal=bottom_right; causal keeps j <= p, a window p-L <= j <= p+R, and
 * both hold together).  A key mask depends on the data and is not counted.
 * One step per query position, not per pair. */
static double visible_pairs(const attnc_gen *g, double sq, double sk)
{
  double n = 0, i;
  if (!g->causal && !g->has_window) return sq * sk;
  for (i = 0; i < sq; i++) {
    const double p = g->causal == ATTNC_CAUSAL_BOTTOM_RIGHT ? i + sk - sq : i;
    double lo = 0, hi = sk - 1;
    if (g->causal && p < hi) hi = p;
    if (g->has_window) {
      if (p - (double)g->window_l > lo) lo = p - (double)g->window_l;
      if (p + (double)g->window_r < hi) hi = p + (double)g->window_r;
    }
    if (hi >= lo) n += hi - lo + 1;
  }
  return n;
}

attnc_status attnc_explain(const char *spec, const attnc_options *opts, const char *const *names,
                           const int64_t *values, int n, char **text, attnc_error *err)
{
  attnc_gen g;
  attnc_status s;
  struct text t = { NULL, 0, 0, 0 };
  size_t es;
  int slot, i, known = 1;
  double weights = 0, inputs = 0, cache = 0;
  double H, G, C, Sq, Sk, nb = 1, rows_x = 1, rows_kv = 1, rows_out = 1;
  attnc_err_clear(err);
  if (!text) return attnc_err_set(err, ATTNC_EARG, "attnc_explain needs somewhere to put the text");
  s = attnc_host_generate(spec, (opts && opts->spec_name) ? opts->spec_name : "spec", 0, &g, err);
  if (s != ATTNC_OK) return s;
  for (i = 0; i < n; i++) {
    int d, found = 0;
    for (d = 0; d < g.ndims; d++) found |= strcmp(g.dim_names[d], names[i]) == 0;
    if (!found) {
      attnc_gen_free(&g);
      return attnc_err_set(err, ATTNC_EARG, "the spec has no named dim '%s'", names[i]);
    }
  }
  es = attnc_dtype_size(g.dtype);
  put(&t, "canonical: %s\n", g.canonical);
  put(&t, "kernel:    %s_run, %s%s%s%s\n", g.name, attnc_dtype_name(g.dtype),
      g.dtype == ATTNC_BF16 || g.dtype == ATTNC_F16 ? " (computed in F32)" : "",
      g.wdtype != g.dtype ? ", weights " : "", g.wdtype != g.dtype ? attnc_dtype_name(g.wdtype) : "");
  put(&t, "tensors:\n");
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    if (!g.used[slot] || slot == ATTNC_SLOT_MASK) continue;
    shape_line(&t, &g, attnc_slot_name(slot), &g.shape[slot], attnc_dtype_size(attnc_slot_dtype(&g, slot)), names, values, n,
               attnc_slot_is_weight(slot) ? &weights : attnc_slot_is_cache(slot) == 1 ? &cache : &inputs);
  }
  if (g.has_mask) shape_line(&t, &g, "mask", &g.mask, 1, names, values, n, &inputs);
  shape_line(&t, &g, "out", &g.out, es, names, values, n, NULL);
  if (g.has_lse) shape_line(&t, &g, "lse", &g.lse, 4, names, values, n, NULL);

  H = g.heads; G = g.kv_heads; C = g.head_dim;
  for (i = 0; i < g.ndims; i++) {
    double v = dimval(&g, -(int64_t)(i + 1), names, values, n);
    if (v <= 0) known = 0;
  }
  if (!known) {
    put(&t, "FLOPs:     depend on the named dims; pass --dim NAME=N for each\n");
  } else {
    double proj = 0, scores, wsum, gate = 0, outp = 0, total, scratch, sq_eff, rot = 0, rot_rows = 0, pe = 0, pe_rows = 0;
    if (g.core) {
      const attnc_shape *q = &g.shape[ATTNC_SLOT_Q], *k = &g.shape[ATTNC_SLOT_K];
      for (i = 0; i < q->rank - 3; i++) nb *= dimval(&g, q->dim[i], names, values, n);
      Sq = dimval(&g, q->dim[q->rank - (g.layout_bshc ? 3 : 2)], names, values, n);
      Sk = dimval(&g, k->dim[k->rank - (g.layout_bshc ? 3 : 2)], names, values, n);
      scratch = Sk * (double)es;
      rot_rows = nb * (H * Sq + G * Sk); /* core mode: every row of q and k, once */
    } else {
      const attnc_shape *x = &g.shape[ATTNC_SLOT_X], *kv = g.self ? x : &g.shape[ATTNC_SLOT_KV];
      for (i = 0; i < x->rank - 1; i++) {
        double xv = dimval(&g, x->dim[i], names, values, n), kvv = dimval(&g, kv->dim[i], names, values, n);
        rows_x *= xv;
        rows_kv *= kvv;
        rows_out *= (i == g.axis && g.global && !g.gated) ? 1 : xv;
        if (i != g.axis) nb *= xv;
      }
      Sq = dimval(&g, x->dim[g.axis], names, values, n);
      Sk = dimval(&g, kv->dim[g.axis], names, values, n);
      if (g.has_cache) Sk = dimval(&g, g.cache_cap, names, values, n); /* the keys are the CAP cache positions */
      proj = 2 * rows_x * (double)g.c_in * H * C + 2 * 2 * rows_kv * (double)g.c_kv * G * C;
      if (g.gated) gate = 2 * rows_x * (double)g.c_in * H * C;
      outp = 2 * rows_out * H * C * (double)g.c_in;
      scratch = (rows_x * H * C + 2 * rows_kv * G * C + rows_out * H * C + Sk) * (double)es;
      rot_rows = rows_x * H + rows_kv * G; /* q's heads and k's, each row once (a cache: the new rows) */
      pe_rows = rows_x + (g.self ? 0 : rows_kv);
      pe = rows_x * (double)g.c_in + (g.self ? 0 : rows_kv * (double)g.c_kv);
    }
    /* RoPE: each of a row's r/2 pairs (u, w) -> (u cos - w sin, w cos + u sin), 4 multiplies and 2 adds */
    if (g.rope) rot = 6 * (g.rope_dim / 2) * rot_rows;
    sq_eff = g.global ? 1 : Sq;
    scores = 2 * nb * H * sq_eff * Sk * C;
    wsum = scores;
    total = proj + rot + pe + scores + wsum + gate + outp;
    put(&t, "FLOPs (2 per multiply-add, dense: masks not subtracted; causal and window: also unmasked):\n");
    if (g.pe) put(&t, "  positional encoding %14.0f adds (sinusoidal, %.0f rows)\n", pe, pe_rows);
    if (!g.core) put(&t, "  project q, k, v     %14.0f\n", proj);
    if (g.rope) put(&t, "  rotate q, k (RoPE)  %14.0f (%s, %d of %d dims, %.0f rows: angles once per position)\n", rot,
                    g.rope == 1 ? "neox" : "gptj", g.rope_dim, (int)C, rot_rows);
    put(&t, "  scores q.k          %14.0f\n", scores);
    if (g.softcap > 0) put(&t, "  softcap             %14.0f tanh (cap %g)\n", nb * H * sq_eff * Sk, g.softcap);
    if (g.alibi > 0) put(&t, "  alibi               %14.0f multiply-adds (max_bias %g)\n", nb * H * sq_eff * Sk, g.alibi);
    put(&t, "  softmax             %14.0f exps%s\n", nb * H * sq_eff * Sk, g.sinks ? " (and a sink per row)" : "");
    put(&t, "  weighted sum p.v    %14.0f\n", wsum);
    if (g.gated) put(&t, "  gate                %14.0f\n", gate);
    if (!g.core) put(&t, "  output projection   %14.0f\n", outp);
    put(&t, "  total               %14.0f  (%.3f GFLOP)\n", total, total / 1e9);
    if (g.causal || g.has_window) {
      /* the same sums over the pairs the masks leave: what a kernel that
       * skips the masked scores has to do (the bench's gflops_unmasked) */
      const double vis = visible_pairs(&g, sq_eff, Sk), all = sq_eff * Sk, att = (scores + wsum) * (vis / all);
      put(&t, "  unmasked pairs      %14.0f  of %.0f query-key pairs per head (%s)\n", vis, all,
          g.causal && g.has_window ? "causal and window" : g.causal ? "causal" : "window");
      put(&t, "  unmasked total      %14.0f  (%.3f GFLOP): q.k and p.v over those pairs only\n",
          total - scores - wsum + att, (total - scores - wsum + att) / 1e9);
    }
    if (g.has_cache) {
      put(&t, "  (a cache: q.k and p.v over all CAP positions; a run attends to cache_len + i + 1 of them,\n"
              "   the unmasked pairs above count a cache full after the run)\n");
      put(&t, "memory:\n  weights %.0f bytes, inputs %.0f bytes, cache %.0f bytes (k_cache, v_cache%s: updated in place), "
              "scratch %.0f bytes\n", weights, inputs, cache, g.kv_dtype == ATTNC_I8 ? " and their scales" : "", scratch);
    } else {
      put(&t, "memory:\n  weights %.0f bytes, inputs %.0f bytes, scratch %.0f bytes\n", weights, inputs, scratch);
    }
    if (g.train) {
      /* NAME_backward: the forward again (logits twice: once for lse and o,
       * once per key in the backward), then dv, dp, dq, dk over the same
       * pairs, and dW, dx for each projection (twice its forward) */
      const double sl = g.global ? 1 : Sq, rows_o = g.core ? 0 : rows_out;
      double bw = total + scores + 4 * scores + 2 * (proj + gate + outp), bytes;
      /* the fast form's NAME_backward_bytes: heads and their gradients (a
       * core kernel in the heads' layout copies only q, and k and v to
       * rotate them), k and v transposed, lse and D per row (and a sink term) */
      if (g.core && !g.layout_bshc && !g.global) bytes = nb * H * Sq * C + (g.rope ? 2 * nb * G * Sk * C : 0);
      else bytes = 2 * nb * H * Sq * C + 4 * nb * G * Sk * C + 2 * nb * H * sl * C;
      bytes += 2 * nb * H * sl + (g.sinks ? nb * H * sl : 0) + 2 * nb * G * (double)(((long)Sk + 63) / 64 * 64) * C; /* BW_TK = 64 keys per tile */
      if (g.global) bytes += 2 * nb * H * C + nb;
      if (!g.core) {
        bytes += 2 * rows_x * H * C + 4 * rows_kv * G * C + 2 * rows_o * H * C;
        if (g.gated) bytes += 3 * rows_x * H * C;
        if (g.pe) bytes += rows_x * (double)g.c_in + rows_kv * (g.self ? 2.0 * (double)g.c_in : (double)g.c_kv);
      }
      /* a 16-bit kernel's backward runs in f32, on copies of every 16-bit
       * tensor, its gradient, out and dout */
      const int wide = g.dtype == ATTNC_BF16 || g.dtype == ATTNC_F16;
      bytes *= wide ? 4.0 : (double)es;
      if (wide) bytes += 2 * 4.0 * ((weights + inputs) / (double)es + rows_out * (g.core ? 1 : (double)g.c_in));
      put(&t, "backward (train%s): %.0f FLOPs (%.3f GFLOP), the forward recomputed included%s; scratch %.0f bytes,\n"
              "  O(S): projections, heads, their gradients and one lse per query row, no Sq x Sk buffer\n",
          g.dropout > 0 ? ", dropout" : "", bw, bw / 1e9,
          wide ? ", in f32 on copies of the 16-bit tensors (out and the gradients rounded once)" : "", bytes);
    }
    put(&t, "  arithmetic intensity %.2f FLOP/byte (over weights + inputs%s + output)\n",
        total / (weights + inputs + cache + rows_out * (g.core ? 1 : (double)g.c_in) * (double)es + 1e-300),
        g.has_cache ? " + cache" : "");
  }
  attnc_gen_free(&g);
  if (t.oom) {
    free(t.buf);
    return attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
  }
  *text = t.buf;
  return ATTNC_OK;
}
