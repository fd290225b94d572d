/* The float64 reference every generated kernel is checked against.
 *
 * It follows the AlphaFold worksheet's MultiHeadAttention (prepare_qkv,
 * prepare_qkv_global, forward) step by step, with the extensions of
 * docs/spec.md (GQA/MQA, cross-attention, causal, window, empty rows,
 * core mode).  Nothing here is fast on purpose: one batch at a time, one
 * query row at a time, plain loops, so that a reader can check each line
 * against the math.  Semantics decided here that the design leaves open are
 * marked "Decision:". */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A problem's shapes, resolved and checked once so that the loops below can
 * trust every index they compute. */
typedef struct geom {
  int nb;                       /* number of batch axes */
  long batch[REF_MAX_RANK];     /* their sizes, in the input's axis order */
  long nbatch;                  /* product of batch[] (1 when nb == 0) */
  long Sq, Sk;                  /* query and key counts on the attention axis */
  long Sl;                      /* logit rows per (batch, head): Sq, or 1 for global */
  long Sout;                    /* output length on the attention axis */
  long c_in, c_kv;              /* full mode: widths of x and kv */
  int H, G, c;                  /* heads, kv heads, head dim */
  long kvw;                     /* width of a projected k/v row: G*c, or c for global */
  int out_rank;
  long out[REF_MAX_RANK];
} geom;

/* Index into a dim that may be broadcast (size 1). */
static long bcast(long dim, long idx) { return dim == 1 ? 0 : idx; }

static int dims_positive(const long *d, int n)
{
  for (int a = 0; a < n; a++)
    if (d[a] < 1) return 0;
  return 1;
}

static int resolve_full(const ref_problem *p, geom *g)
{
  int r = p->rank;
  /* The logits have rank r+1 (batch axes, H, Sq, Sk); a full bias must fit
   * in REF_MAX_RANK dims, hence r <= REF_MAX_RANK-1. */
  if (r < 2 || r > REF_MAX_RANK - 1) return -1;
  if (!dims_positive(p->x, r) || !dims_positive(p->kv, r)) return -1;
  if (p->attn_axis < 0 || p->attn_axis > r - 2) return -1;
  if (p->H < 1 || p->G < 1 || p->c < 1) return -1;
  if (p->global) {
    /* Decision: global k/v have one head regardless of G; the spec forbids
     * kv_heads with global, so accept only the two values a filler could
     * leave (1, or the default G = H). */
    if (p->G != 1 && p->G != p->H) return -1;
  } else if (p->H % p->G != 0) {
    return -1;
  }
  g->nb = 0;
  for (int a = 0; a < r - 1; a++) {
    if (a == p->attn_axis) continue;
    if (p->kv[a] != p->x[a]) return -1;   /* kv must share x's batch dims */
    g->batch[g->nb++] = p->x[a];
  }
  g->Sq = p->x[p->attn_axis];
  g->Sk = p->kv[p->attn_axis];
  g->c_in = p->x[r - 1];
  g->c_kv = p->kv[r - 1];
  g->H = p->H;
  g->G = p->G;
  g->c = p->c;
  g->kvw = p->global ? (long)p->c : (long)p->G * p->c;
  g->Sl = p->global ? 1 : g->Sq;
  g->Sout = (p->global && !p->gated) ? 1 : g->Sq;
  /* The masked mean reads the key mask at query positions, which only makes
   * sense when the queries are the keys. */
  if (p->global && p->global_masked && p->has_mask)
    for (int a = 0; a < r; a++)
      if (p->kv[a] != p->x[a]) return -1;
  g->out_rank = r;
  for (int a = 0; a < r; a++) g->out[a] = p->x[a];
  g->out[p->attn_axis] = g->Sout;
  return 0;
}

static int resolve_core(const ref_problem *p, geom *g)
{
  int r = p->rank;
  if (r < 3 || r > REF_MAX_RANK) return -1;
  if (!dims_positive(p->x, r) || !dims_positive(p->kv, r)) return -1;
  /* Core mode is the bare softmax(q k^T) v: there is no x to gate or pool.
   * Decision: gated/global here are errors, but qkv_bias/out_bias are
   * ignored, because the mha preset and the out_bias default set them. */
  if (p->gated || p->global) return -1;
  g->nb = r - 3;
  for (int a = 0; a < g->nb; a++) {
    if (p->kv[a] != p->x[a]) return -1;
    g->batch[a] = p->x[a];
  }
  /* (*, H, S, c), or (*, S, H, c) with layout bshc */
  const int hd = p->bshc ? r - 2 : r - 3, sd = p->bshc ? r - 3 : r - 2;
  long H = p->x[hd], G = p->kv[hd], c = p->x[r - 1];
  if (p->kv[r - 1] != c) return -1;
  if (H % G != 0) return -1;
  /* The shapes are the truth; H/G/c in the problem, when set, must agree. */
  if ((p->H && p->H != H) || (p->G && p->G != G) || (p->c && p->c != c)) return -1;
  g->H = (int)H;
  g->G = (int)G;
  g->c = (int)c;
  g->Sq = p->x[sd];
  g->Sk = p->kv[sd];
  g->Sl = g->Sq;
  g->Sout = g->Sq;
  g->kvw = c;
  g->out_rank = r;
  for (int a = 0; a < r; a++) g->out[a] = p->x[a];
  return 0;
}

/* Bias (*bb, H', Sq', Sk'): *bb left-aligned with the batch axes (the seed's
 * bias.view(bbs + (1,)*k + last3)); mask (*mb, Sk): right-aligned (the seed's
 * mask[..., None, None, :]).  Every dim equals its target or is 1. */
static int check_bias_mask(const ref_problem *p, const geom *g)
{
  if (p->has_bias) {
    int nbb = p->bias_rank - 3;
    if (nbb < 0 || nbb > g->nb || p->bias_rank > REF_MAX_RANK) return -1;
    for (int k = 0; k < nbb; k++)
      if (p->bias[k] != g->batch[k] && p->bias[k] != 1) return -1;
    long want[3] = { g->H, g->Sl, g->Sk };
    for (int k = 0; k < 3; k++)
      if (p->bias[nbb + k] != want[k] && p->bias[nbb + k] != 1) return -1;
  }
  if (p->has_mask) {
    int nmb = p->mask_rank - 1;
    if (nmb < 0 || nmb > g->nb || p->mask_rank > REF_MAX_RANK) return -1;
    for (int k = 0; k < nmb; k++) {
      long target = g->batch[g->nb - nmb + k];
      if (p->mask[k] != target && p->mask[k] != 1) return -1;
    }
    /* Decision: the key dim must be exactly Sk; a key mask of width 1 is
     * not a key mask. */
    if (p->mask[nmb] != g->Sk) return -1;
  }
  return 0;
}

static int resolve(const ref_problem *p, geom *g)
{
  memset(g, 0, sizeof *g);
  if (!p) return -1;
  if (p->causal < REF_CAUSAL_NONE || p->causal > REF_CAUSAL_BOTTOM_RIGHT) return -1;
  if (p->empty_rows < REF_EMPTY_ZERO || p->empty_rows > REF_EMPTY_NAN) return -1;
  if ((p->core ? resolve_core(p, g) : resolve_full(p, g)) != 0) return -1;
  g->nbatch = 1;
  for (int k = 0; k < g->nb; k++) g->nbatch *= g->batch[k];
  return check_bias_mask(p, g);
}

long ref_output_shape(const ref_problem *p, int *rank, long *shape)
{
  geom g;
  if (resolve(p, &g) != 0) return -1;
  long n = 1;
  for (int a = 0; a < g.out_rank; a++) {
    if (shape) shape[a] = g.out[a];
    n *= g.out[a];
  }
  if (rank) *rank = g.out_rank;
  return n;
}

/* ---- element access ------------------------------------------------------ */

static double bias_at(const ref_problem *p, const ref_tensors *t, const long *bidx,
                      int h, long i, long j)
{
  int nbb = p->bias_rank - 3;
  const long *d = p->bias;
  long off = 0;
  for (int k = 0; k < nbb; k++) off = off * d[k] + bcast(d[k], bidx[k]);
  off = off * d[nbb] + bcast(d[nbb], h);
  off = off * d[nbb + 1] + bcast(d[nbb + 1], i);
  off = off * d[nbb + 2] + bcast(d[nbb + 2], j);
  return t->bias[off];
}

static int mask_keeps(const ref_problem *p, const ref_tensors *t, const geom *g,
                      const long *bidx, long j)
{
  int nmb = p->mask_rank - 1;
  const long *d = p->mask;
  long off = 0;
  for (int k = 0; k < nmb; k++) off = off * d[k] + bcast(d[k], bidx[g->nb - nmb + k]);
  off = off * d[nmb] + j;
  return t->mask[off] != 0.0;
}

/* May logit row i (of Sl) see key j?  Mask, causal and window must all allow
 * it.  Decision: for global attention the logits have one row (i = 0,
 * Sl = 1) and causal/window apply to it literally, as if Sq were 1. */
static int key_visible(const ref_problem *p, const ref_tensors *t, const geom *g,
                       const long *bidx, long i, long j)
{
  if (p->has_mask && !mask_keeps(p, t, g, bidx, j)) return 0;
  long pos = i;
  if (p->causal == REF_CAUSAL_BOTTOM_RIGHT) pos = i + g->Sk - g->Sl;
  if (p->causal != REF_CAUSAL_NONE && j > pos) return 0;
  if (p->has_window && (j < pos - p->wl || j > pos + p->wr)) return 0;
  return 1;
}

/* Row of a (r-1)-axis row-major tensor holding batch bidx at attention
 * position i; the batch axes are the non-attention axes in order. */
static long row_index(const long *dims, int r, int attn_axis, const long *bidx, long i)
{
  long row = 0;
  int k = 0;
  for (int a = 0; a < r - 1; a++) row = row * dims[a] + (a == attn_axis ? i : bidx[k++]);
  return row;
}

static void batch_index(const geom *g, long b, long *bidx)
{
  for (int k = g->nb - 1; k >= 0; k--) {
    bidx[k] = b % g->batch[k];
    b /= g->batch[k];
  }
}

/* ---- the math ------------------------------------------------------------ */

/* PyTorch Linear: y = W x + b, W is (n_out, n_in) row-major, b may be NULL. */
static void linear(const double *x, long n_in, const double *w, const double *b,
                   long n_out, double *y)
{
  for (long o = 0; o < n_out; o++) {
    double s = b ? b[o] : 0.0;
    for (long i = 0; i < n_in; i++) s += w[o * n_in + i] * x[i];
    y[o] = s;
  }
}

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* One logit row: o (c wide) = softmax over visible keys of
 * scale * q_i.k_j + bias, applied to v.  k and v point at key 0 of the kv
 * head, consecutive keys kv_stride apart.  w (Sk doubles) and vis (Sk chars)
 * are scratch. */
static void attend_row(const ref_problem *p, const ref_tensors *t, const geom *g,
                       const long *bidx, int h, long i, const double *q_i,
                       const double *k, const double *v, long kv_stride,
                       double *w, char *vis, double *o, double *wout)
{
  long Sk = g->Sk, c = g->c, nvis = 0;
  double m = 0.0, sum = 0.0;   /* m: row max, set by the first visible key */
  for (long j = 0; j < Sk; j++) {
    vis[j] = (char)key_visible(p, t, g, bidx, i, j);
    w[j] = 0.0;
    if (!vis[j]) continue;
    double dot = 0.0;
    for (long d = 0; d < c; d++) dot += q_i[d] * k[j * kv_stride + d];
    w[j] = p->scale * dot;
    if (p->has_bias) w[j] += bias_at(p, t, bidx, h, i, j);
    if (nvis == 0 || w[j] > m) m = w[j];
    nvis++;
  }
  if (nvis == 0) {
    if (p->empty_rows != REF_EMPTY_UNIFORM) {
      double fill = p->empty_rows == REF_EMPTY_ZERO ? 0.0 : NAN;
      for (long d = 0; d < c; d++) o[d] = fill;
      if (wout)
        for (long j = 0; j < Sk; j++) wout[j] = fill;
      return;
    }
    /* UNIFORM: every key, visible or not, gets weight 1/Sk. */
    for (long j = 0; j < Sk; j++) w[j] = 1.0;
    sum = (double)Sk;
  } else {
    /* Subtracting the row max keeps exp() <= 1: logits of ~330 would
     * overflow f32 (and ~710 f64) otherwise.  Hidden keys get exactly 0,
     * which is what both the seed's -1e8 offset and a -inf fill give for a
     * row that sees at least one key. */
    for (long j = 0; j < Sk; j++) {
      w[j] = vis[j] ? exp(w[j] - m) : 0.0;
      sum += w[j];
    }
  }
  for (long d = 0; d < c; d++) {
    double s = 0.0;
    for (long j = 0; j < Sk; j++) s += w[j] * v[j * kv_stride + d];
    o[d] = s / sum;
  }
  if (wout)
    for (long j = 0; j < Sk; j++) wout[j] = w[j] / sum;
}

static int run_core(const ref_problem *p, const ref_tensors *t, const geom *g, double *out)
{
  long H = g->H, G = g->G, Sq = g->Sq, Sk = g->Sk, c = g->c;
  double *w = malloc((size_t)Sk * sizeof *w);
  char *vis = malloc((size_t)Sk);
  if (!w || !vis) {
    free(w);
    free(vis);
    return -1;
  }
  long bidx[REF_MAX_RANK];
  for (long b = 0; b < g->nbatch; b++) {
    batch_index(g, b, bidx);
    /* q_b: (H, Sq, c); k_b, v_b: (G, Sk, c); out_b: (H, Sq, c); or with
     * layout bshc (Sq, H, c), (Sk, G, c), (Sq, H, c) */
    const double *q_b = t->q + b * H * Sq * c;
    const double *k_b = t->k + b * G * Sk * c;
    const double *v_b = t->v + b * G * Sk * c;
    double *o_b = out + b * H * Sq * c;
    for (int h = 0; h < H; h++) {
      long kvh = h / (H / G);   /* GQA: H/G consecutive query heads share one kv head */
      for (long i = 0; i < Sq; i++)
        attend_row(p, t, g, bidx, h, i, q_b + (p->bshc ? i * H + h : h * Sq + i) * c,
                   k_b + kvh * (p->bshc ? 1 : Sk) * c, v_b + kvh * (p->bshc ? 1 : Sk) * c, p->bshc ? G * c : c, w, vis,
                   o_b + (p->bshc ? i * H + h : h * Sq + i) * c,
                   t->weights ? t->weights + ((b * H + h) * Sq + i) * Sk : NULL);
    }
  }
  free(w);
  free(vis);
  return 0;
}

static int run_full(const ref_problem *p, const ref_tensors *t, const geom *g, double *out)
{
  int r = p->rank, ax = p->attn_axis;
  long H = g->H, G = g->G, c = g->c, hc = H * c, kvw = g->kvw;
  long Sq = g->Sq, Sk = g->Sk, c_in = g->c_in, c_kv = g->c_kv;
  const double *x = t->x, *kvx = t->kv ? t->kv : t->x;

  double *q = malloc((size_t)Sq * hc * sizeof *q);      /* (Sq, H*c) */
  double *k = malloc((size_t)Sk * kvw * sizeof *k);     /* (Sk, G*c) or (Sk, c) */
  double *v = malloc((size_t)Sk * kvw * sizeof *v);
  double *o = malloc((size_t)g->Sl * hc * sizeof *o);   /* (Sl, H*c), heads h-major */
  double *w = malloc((size_t)Sk * sizeof *w);
  char *vis = malloc((size_t)Sk);
  double *o_i = malloc((size_t)hc * sizeof *o_i);
  double *gate = malloc((size_t)hc * sizeof *gate);
  int rc = (q && k && v && o && w && vis && o_i && gate) ? 0 : -1;

  long bidx[REF_MAX_RANK];
  for (long b = 0; rc == 0 && b < g->nbatch; b++) {
    batch_index(g, b, bidx);

    /* project: the seed's linear_q/k/v, one position at a time */
    for (long i = 0; i < Sq; i++)
      linear(x + row_index(p->x, r, ax, bidx, i) * c_in, c_in, t->wq,
             p->qkv_bias ? t->bq : NULL, hc, q + i * hc);
    for (long j = 0; j < Sk; j++) {
      const double *kv_j = kvx + row_index(p->kv, r, ax, bidx, j) * c_kv;
      linear(kv_j, c_kv, t->wk, p->qkv_bias ? t->bk : NULL, kvw, k + j * kvw);
      linear(kv_j, c_kv, t->wv, p->qkv_bias ? t->bv : NULL, kvw, v + j * kvw);
    }

    /* global: prepare_qkv_global's torch.mean over the attention axis, or
     * the masked mean (positions the key mask keeps; 0 if none).  The mean
     * overwrites row 0 of q, the only row the logits use.  Decision:
     * global_masked without a mask keeps every position: the plain mean. */
    if (p->global) {
      int masked = p->global_masked && p->has_mask;
      long n = 0;
      for (long e = 0; e < hc; e++) o_i[e] = 0.0;
      for (long i = 0; i < Sq; i++) {
        if (masked && !mask_keeps(p, t, g, bidx, i)) continue;
        for (long e = 0; e < hc; e++) o_i[e] += q[i * hc + e];
        n++;
      }
      for (long e = 0; e < hc; e++) q[e] = n > 0 ? o_i[e] / (double)n : 0.0;
    }

    /* scores, bias, mask, softmax, weighted sum: one logit row at a time */
    for (int h = 0; h < H; h++) {
      long kvh = p->global ? 0 : h / (H / G);
      for (long i = 0; i < g->Sl; i++)
        attend_row(p, t, g, bidx, h, i, q + i * hc + h * c, k + kvh * c, v + kvh * c,
                   kvw, w, vis, o + i * hc + h * c,
                   t->weights ? t->weights + ((b * H + h) * g->Sl + i) * Sk : NULL);
    }

    /* gate and output projection, per output position.  Global + gated
     * broadcasts the one attention row over all Sq positions. */
    for (long i = 0; i < g->Sout; i++) {
      memcpy(o_i, o + (p->global ? 0 : i) * hc, (size_t)hc * sizeof *o_i);
      if (p->gated) {
        linear(x + row_index(p->x, r, ax, bidx, i) * c_in, c_in, t->wg, t->bg, hc, gate);
        for (long e = 0; e < hc; e++) o_i[e] *= sigmoid(gate[e]);
      }
      linear(o_i, hc, t->wo, p->out_bias ? t->bo : NULL, c_in,
             out + row_index(g->out, r, ax, bidx, i) * c_in);
    }
  }
  free(q);
  free(k);
  free(v);
  free(o);
  free(w);
  free(vis);
  free(o_i);
  free(gate);
  return rc;
}

long ref_weights_shape(const ref_problem *p, int *rank, long *shape)
{
  geom g;
  long n = 1;
  int a;
  if (resolve(p, &g) != 0) return -1;
  for (a = 0; a < g.nb; a++) shape[a] = g.batch[a];
  shape[g.nb] = g.H;
  shape[g.nb + 1] = g.Sl;
  shape[g.nb + 2] = g.Sk;
  *rank = g.nb + 3;
  for (a = 0; a < *rank; a++) n *= shape[a];
  return n;
}

int ref_attention(const ref_problem *p, const ref_tensors *t, double *out)
{
  geom g;
  if (!t || !out || resolve(p, &g) != 0) return -1;
  if ((p->has_bias && !t->bias) || (p->has_mask && !t->mask)) return -1;
  if (p->core) {
    if (!t->q || !t->k || !t->v) return -1;
    return run_core(p, t, &g, out);
  }
  if (!t->x || !t->wq || !t->wk || !t->wv || !t->wo) return -1;
  if (p->qkv_bias && (!t->bq || !t->bk || !t->bv)) return -1;
  if (p->out_bias && !t->bo) return -1;
  if (p->gated && (!t->wg || !t->bg)) return -1;
  int self = !t->kv || t->kv == t->x;
  if (self)
    for (int a = 0; a < p->rank; a++)
      if (p->kv[a] != p->x[a]) return -1;   /* kv = x needs kv's shape = x's */
  if (p->global && p->global_masked && p->has_mask && !self) return -1;
  return run_full(p, t, &g, out);
}
