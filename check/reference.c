/* The float64 reference every generated kernel is checked against.
 *
 * It follows the AlphaFold worksheet's MultiHeadAttention (prepare_qkv,
 * prepare_qkv_global, forward) step by step, with the extensions of
 * docs/spec.md (GQA/MQA, cross-attention, causal, window, empty rows,
 * core mode) and of DESIGN.md's spec language v2 (positions, rope, alibi,
 * softcap, sinks, pe, lse, the KV cache) and of its "Training" (dropout;
 * gradients by finite differences).  Nothing here is fast on purpose: one batch at
 * a time, one query row at a time, plain loops, so that a reader can check
 * each line against the math.  Semantics decided here that the design leaves open are
 * marked "Decision:". */
#include "reference.h"

#include <float.h>
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
  long q_pos0;                  /* default position of query 0: Sk - Sq in core mode, else 0 */
  long q_idx0;                  /* index of query 0 for causal and window: Sk - Sl bottom-right, else 0 */
  long filled;                  /* keys that exist, which empty_rows=uniform averages: Sk */
  /* With a cache the last three are per batch element (cache_len[b], and
   * cache_len[b] + Sq): run_full sets them in its copy of the geometry. */
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
  /* Self-attention lines query i up with key i + Sk - Sq = i; cross-attention
   * starts both sequences at 0. */
  g->q_pos0 = 0;
  /* The masked mean reads the key mask at query positions, which only makes
   * sense when the queries are the keys. */
  if (p->global && p->global_masked && p->has_mask)
    for (int a = 0; a < r; a++)
      if (p->kv[a] != p->x[a]) return -1;
  g->out_rank = r;
  for (int a = 0; a < r; a++) g->out[a] = p->x[a];
  g->out[p->attn_axis] = g->Sout;
  /* A cache: self-attention whose keys are the CAP cache positions; the new
   * rows must fit (cache_len + Sq <= CAP is checked per batch element). */
  if (p->cache) {
    if (p->global || p->cache < g->Sq) return -1;
    if (p->kv_dtype < REF_KV_F64 || p->kv_dtype > REF_KV_INT8) return -1;
    for (int a = 0; a < r; a++)
      if (p->kv[a] != p->x[a]) return -1;
    g->Sk = p->cache;
  }
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
  g->q_pos0 = g->Sk - g->Sq;   /* the last query lines up with the last key */
  g->out_rank = r;
  for (int a = 0; a < r; a++) g->out[a] = p->x[a];
  return 0;
}

/* A (*m, n) tensor aligned from the right with the batch axes, like the
 * seed's mask[..., None, None, :]: every dim of *m equals its batch axis or
 * is 1, and the last is exactly n. */
static int fits_right_aligned(const long *d, int rank, const geom *g, long n)
{
  int nm = rank - 1;
  if (nm < 0 || nm > g->nb || rank > REF_MAX_RANK) return 0;
  for (int k = 0; k < nm; k++) {
    long target = g->batch[g->nb - nm + k];
    if (d[k] != target && d[k] != 1) return 0;
  }
  return d[nm] == n;
}

/* Bias (*bb, H', Sq', Sk'): *bb left-aligned with the batch axes (the seed's
 * bias.view(bbs + (1,)*k + last3)), every dim its target or 1; mask (*mb, Sk),
 * q_pos (*m, Sq) and k_pos (*m, Sk): right-aligned. */
static int check_inputs(const ref_problem *p, const geom *g)
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
  /* Decision: the key dim must be exactly Sk; a key mask of width 1 is
   * not a key mask. */
  if (p->has_mask && !fits_right_aligned(p->mask, p->mask_rank, g, g->Sk)) return -1;
  /* q_pos covers x's Sq rows (for global too: pe reads them). */
  if (p->has_q_pos && !fits_right_aligned(p->q_pos, p->q_pos_rank, g, g->Sq)) return -1;
  if (p->has_k_pos && !fits_right_aligned(p->k_pos, p->k_pos_rank, g, g->Sk)) return -1;
  return 0;
}

static long rope_dim(const ref_problem *p, const geom *g) { return p->rope_dim ? p->rope_dim : g->c; }

/* The ranges DESIGN gives rope, alibi, softcap and pe, and the combinations
 * it makes spec errors. */
static int check_modifiers(const ref_problem *p, const geom *g)
{
  if (p->rope < REF_ROPE_NONE || p->rope > REF_ROPE_GPTJ) return -1;
  if (p->pe < REF_PE_NONE || p->pe > REF_PE_SINUSOIDAL) return -1;
  if (p->rope != REF_ROPE_NONE) {
    long r = rope_dim(p, g);
    if (p->global || r < 2 || r % 2 != 0 || r > g->c) return -1;
    if (p->rope_theta != 0.0 && !(p->rope_theta > 1.0)) return -1;
  }
  /* Decision: the averaged global query has no position, so alibi is an
   * error with global, as rope is. */
  if (!(p->alibi >= 0.0) || (p->alibi > 0.0 && p->global)) return -1;
  if (!(p->softcap >= 0.0)) return -1;
  if (p->sinks && p->empty_rows != REF_EMPTY_ZERO) return -1;
  if (!(p->dropout >= 0.0 && p->dropout < 1.0)) return -1;
  /* Decision: kv gets the encoding of its own width, which must be even too. */
  if (p->pe != REF_PE_NONE && (p->core || g->c_in % 2 != 0 || g->c_kv % 2 != 0)) return -1;
  return 0;
}

static int resolve(const ref_problem *p, geom *g)
{
  memset(g, 0, sizeof *g);
  if (!p) return -1;
  if (p->causal < REF_CAUSAL_NONE || p->causal > REF_CAUSAL_BOTTOM_RIGHT) return -1;
  if (p->empty_rows < REF_EMPTY_ZERO || p->empty_rows > REF_EMPTY_NAN) return -1;
  if (p->cache < 0 || (p->cache && p->core)) return -1;
  if ((p->core ? resolve_core(p, g) : resolve_full(p, g)) != 0) return -1;
  g->q_idx0 = p->causal == REF_CAUSAL_BOTTOM_RIGHT ? g->Sk - g->Sl : 0;
  g->filled = g->Sk;
  g->nbatch = 1;
  for (int k = 0; k < g->nb; k++) g->nbatch *= g->batch[k];
  if (check_inputs(p, g) != 0) return -1;
  return check_modifiers(p, g);
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

/* Offset of batch bidx, last index i, in a right-aligned (*m, n) tensor. */
static long right_aligned_offset(const long *d, int rank, const geom *g, const long *bidx, long i)
{
  int nm = rank - 1;
  long off = 0;
  for (int k = 0; k < nm; k++) off = off * d[k] + bcast(d[k], bidx[g->nb - nm + k]);
  return off * d[nm] + i;
}

static int mask_keeps(const ref_problem *p, const ref_tensors *t, const geom *g,
                      const long *bidx, long j)
{
  return t->mask[right_aligned_offset(p->mask, p->mask_rank, g, bidx, j)] != 0.0;
}

/* Position of x's row i (a query), for rope, alibi and pe only. */
static double query_pos(const ref_problem *p, const ref_tensors *t, const geom *g,
                        const long *bidx, long i)
{
  if (p->has_q_pos) return t->q_pos[right_aligned_offset(p->q_pos, p->q_pos_rank, g, bidx, i)];
  return (double)(i + g->q_pos0);
}

/* Position of key j, for rope, alibi and pe only. */
static double key_pos(const ref_problem *p, const ref_tensors *t, const geom *g,
                      const long *bidx, long j)
{
  if (p->has_k_pos) return t->k_pos[right_aligned_offset(p->k_pos, p->k_pos_rank, g, bidx, j)];
  return (double)j;
}

/* May logit row i (of Sl) see key j?  Mask, causal and window must all allow
 * it; they read indices, never positions.  Decision: for global attention
 * the logits have one row (i = 0, Sl = 1) and causal/window apply to it
 * literally, as if Sq were 1. */
static int key_visible(const ref_problem *p, const ref_tensors *t, const geom *g,
                       const long *bidx, long i, long j)
{
  if (p->has_mask && !mask_keeps(p, t, g, bidx, j)) return 0;
  long pos = i + g->q_idx0;
  /* a cache is causal whatever p->causal says: keys past the query's index
   * are not written yet (or hold an earlier sequence's rows) */
  if ((p->causal != REF_CAUSAL_NONE || p->cache) && j > pos) return 0;
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

/* Sinusoidal positional encoding: x[2i] += sin(pos * 10000^(-2i/width)),
 * x[2i+1] += cos(the same angle). */
static void add_sinusoid(double pos, long width, double *x)
{
  for (long e = 0; e < width; e++) {
    double a = pos * pow(10000.0, -2.0 * (double)(e / 2) / (double)width);
    x[e] += e % 2 == 0 ? sin(a) : cos(a);
  }
}

/* Rotary embedding of one head's c features at position pos.  For d < r/2
 * the pair (u, w) turns by a = pos * theta^(-2d/r) / f[d]; neox pairs d
 * with d + r/2, gptj 2d with 2d+1.  The angle is computed in double: at
 * large positions a float product is off by milliradians. */
static void rotate(const ref_problem *p, const ref_tensors *t, const geom *g, double pos,
                   double *x)
{
  long r = rope_dim(p, g);
  double theta = p->rope_theta != 0.0 ? p->rope_theta : 10000.0;
  for (long d = 0; d < r / 2; d++) {
    double f = t->rope_freqs ? t->rope_freqs[d] : 1.0;
    double a = pos * pow(theta, -2.0 * (double)d / (double)r) / f;
    long iu = p->rope == REF_ROPE_NEOX ? d : 2 * d;
    long iw = p->rope == REF_ROPE_NEOX ? d + r / 2 : 2 * d + 1;
    double u = x[iu], w = x[iw];
    x[iu] = u * cos(a) - w * sin(a);
    x[iw] = w * cos(a) + u * sin(a);
  }
}

/* rope on n rows of nh heads each (head e of row i at x + i*row_stride +
 * e*head_stride), at query positions, or at key positions when keys. */
static void rotate_rows(const ref_problem *p, const ref_tensors *t, const geom *g,
                        const long *bidx, int keys, double *x, long n, long nh,
                        long row_stride, long head_stride)
{
  for (long i = 0; i < n; i++) {
    double pos = keys ? key_pos(p, t, g, bidx, i) : query_pos(p, t, g, bidx, i);
    for (long e = 0; e < nh; e++) rotate(p, t, g, pos, x + i * row_stride + e * head_stride);
  }
}

/* ALiBi slope of head h: m0^(h+1) for the first n heads (n the largest power
 * of two <= H), then odd powers of m1 = sqrt(m0) for the rest. */
static double alibi_slope(double max_bias, int H, int h)
{
  int n = 1;
  while (n * 2 <= H) n *= 2;
  double m0 = pow(2.0, -max_bias / n), m1 = pow(2.0, -max_bias / (2.0 * n));
  return h < n ? pow(m0, h + 1) : pow(m1, 2 * (h - n) + 1);
}

/* One logit row: where it sits and where its results go. */
typedef struct row {
  const long *bidx;
  long b;                       /* the batch element, bidx flattened row-major */
  int h;                        /* query head */
  long i;                       /* logit row, 0..Sl-1 */
  const double *q;              /* the row's c query features, rotated and unscaled */
  const double *k, *v;          /* key 0 of the kv head; consecutive keys stride apart */
  long stride;
  double *o;                    /* c outputs */
  double *weights, *lse;        /* optional outputs: Sk probabilities, one lse */
} row;

/* The final logit of key j from q.k_j, in DESIGN's order: scale, softcap of
 * the scaled value, then bias and alibi.  Masks act after, in key_visible. */
static double logit(const ref_problem *p, const ref_tensors *t, const geom *g, const row *rw,
                    long j, double dot)
{
  double s = p->scale * dot;
  if (p->softcap > 0.0) s = p->softcap * tanh(s / p->softcap);
  if (p->has_bias) s += bias_at(p, t, rw->bidx, rw->h, rw->i, j);
  if (p->alibi > 0.0)
    s += alibi_slope(p->alibi, g->H, rw->h) *
         (key_pos(p, t, g, rw->bidx, j) - query_pos(p, t, g, rw->bidx, rw->i));
  return s;
}

/* w[j] = the logit of each visible key (0 for hidden ones), vis[j] = whether
 * it is visible.  Returns the number of visible keys, their max in *m. */
static long row_logits(const ref_problem *p, const ref_tensors *t, const geom *g, const row *rw,
                       double *w, char *vis, double *m)
{
  long nvis = 0;
  *m = 0.0;
  for (long j = 0; j < g->Sk; j++) {
    const double *k_j = rw->k + j * rw->stride;
    vis[j] = (char)key_visible(p, t, g, rw->bidx, rw->i, j);
    w[j] = 0.0;
    if (!vis[j]) continue;
    double dot = 0.0;
    for (long d = 0; d < g->c; d++) dot += rw->q[d] * k_j[d];
    w[j] = logit(p, t, g, rw, j, dot);
    if (nvis == 0 || w[j] > *m) *m = w[j];
    nvis++;
  }
  return nvis;
}

/* Softmax of w over the visible keys, a sink (when there is one) joining the
 * denominator and nothing else: w[j] becomes key j's probability, 0 when
 * hidden.  Returns the log of the denominator, the row's lse.  A sink row
 * that sees no key keeps all its mass on the sink: w = 0, lse = sink.
 * Subtracting the max keeps exp() <= 1: logits of ~330 would overflow f32
 * (and ~710 f64) otherwise.  Hidden keys get exactly 0, which is what both
 * the seed's -1e8 offset and a -inf fill give for a row that sees a key. */
static double softmax(const ref_problem *p, const ref_tensors *t, int h, long Sk, long nvis,
                      double m, double *w, const char *vis)
{
  double sum = 0.0;
  if (p->sinks) {
    double sink = t->sinks[h];
    if (nvis == 0 || sink > m) m = sink;
    sum = exp(sink - m);
  }
  for (long j = 0; j < Sk; j++) {
    w[j] = vis[j] ? exp(w[j] - m) : 0.0;
    sum += w[j];
  }
  for (long j = 0; j < Sk; j++) w[j] /= sum;
  return m + log(sum);
}

/* Weights of a row that sees no key and has no sink, as empty_rows says:
 * 0 (so the output is 0), uniform over every key that exists (the first
 * `filled` of Sk: all of them, or with a cache the ones filled after this
 * run), visible or not, or NaN. */
static void empty_row_weights(int empty_rows, long Sk, long filled, double *w)
{
  double fill = empty_rows == REF_EMPTY_UNIFORM ? 1.0 / (double)filled
                : empty_rows == REF_EMPTY_NAN   ? NAN
                                                : 0.0;
  for (long j = 0; j < Sk; j++) w[j] = j < filled ? fill : 0.0;
}

/* ---- dropout ------------------------------------------------------------- */

/* hi and lo words of the 64-bit product a * b. */
static void mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
  uint64_t prod = (uint64_t)a * b;
  *hi = (uint32_t)(prod >> 32);
  *lo = (uint32_t)prod;
}

/* Random123's philox4x32_R with R = 10: a round, then for each of the
 * other nine the key bumped by the Weyl constants and a round again. */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(0xD2511F53u, c0, &hi0, &lo0);
    mulhilo32(0xCD9E8D57u, c2, &hi1, &lo1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

int ref_dropout_keeps(double p, uint64_t seed, long b, long h, long i, long j)
{
  uint32_t ctr[4] = { (uint32_t)(j / 4), (uint32_t)i, (uint32_t)h, (uint32_t)b };
  uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) }, word[4];
  ref_philox4x32_10(ctr, key, word);
  return (double)word[j % 4] >= floor(p * 4294967296.0);
}

/* Dropout of a row's probabilities w: kept ones times 1/(1-p), the others 0. */
static void dropout_row(const ref_problem *p, const geom *g, const row *rw, double *w)
{
  double keep_scale = 1.0 / (1.0 - p->dropout);
  for (long j = 0; j < g->Sk; j++)
    w[j] = ref_dropout_keeps(p->dropout, p->seed, rw->b, rw->h, rw->i, j) ? w[j] * keep_scale : 0.0;
}

/* One logit row: scores, softmax, dropout, weighted sum of v.  w (Sk
 * doubles) and vis (Sk chars) are scratch. */
static void attend_row(const ref_problem *p, const ref_tensors *t, const geom *g, const row *rw,
                       double *w, char *vis)
{
  double m, lse = -INFINITY;   /* -inf: the log of an empty denominator */
  long nvis = row_logits(p, t, g, rw, w, vis, &m);
  if (nvis > 0 || p->sinks)
    lse = softmax(p, t, rw->h, g->Sk, nvis, m, w, vis);
  else
    empty_row_weights(p->empty_rows, g->Sk, g->filled, w);
  /* the weights output: the probabilities before dropout (DESIGN.md's weights_out) */
  if (rw->weights) memcpy(rw->weights, w, (size_t)g->Sk * sizeof *w);
  /* a row that sees no key follows empty_rows (or the sink) untouched */
  if (nvis > 0 && p->dropout > 0.0) dropout_row(p, g, rw, w);
  for (long d = 0; d < g->c; d++) {
    double s = 0.0;
    for (long j = 0; j < g->Sk; j++) s += w[j] * rw->v[j * rw->stride + d];
    rw->o[d] = s;
  }
  if (rw->lse) *rw->lse = lse;
}

/* Where row (b, h, i) of the weights and of lse starts, or NULL if not asked. */
static double *weights_at(const ref_tensors *t, const geom *g, long b, int h, long i)
{
  return t->weights ? t->weights + ((b * g->H + h) * g->Sl + i) * g->Sk : NULL;
}

static double *lse_at(const ref_tensors *t, const geom *g, long b, int h, long i)
{
  return t->lse ? t->lse + (b * g->H + h) * g->Sl + i : NULL;
}

/* One batch element's block of nh heads of S rows of c features, stored
 * (nh, S, c), or (S, nh, c) with layout bshc, copied out as (nh, S, c). */
static void gather_heads(const double *src, long nh, long S, long c, int bshc, double *dst)
{
  for (long e = 0; e < nh; e++)
    for (long i = 0; i < S; i++)
      memcpy(dst + (e * S + i) * c, src + (bshc ? i * nh + e : e * S + i) * c,
             (size_t)c * sizeof *dst);
}

static int run_core(const ref_problem *p, const ref_tensors *t, const geom *g, double *out)
{
  long H = g->H, G = g->G, Sq = g->Sq, Sk = g->Sk, c = g->c;
  double *q = malloc((size_t)H * Sq * c * sizeof *q);   /* (H, Sq, c) */
  double *k = malloc((size_t)G * Sk * c * sizeof *k);   /* (G, Sk, c) */
  double *v = malloc((size_t)G * Sk * c * sizeof *v);
  double *w = malloc((size_t)Sk * sizeof *w);
  char *vis = malloc((size_t)Sk);
  int rc = (q && k && v && w && vis) ? 0 : -1;
  long bidx[REF_MAX_RANK];
  for (long b = 0; rc == 0 && b < g->nbatch; b++) {
    batch_index(g, b, bidx);
    /* q_b: (H, Sq, c); k_b, v_b: (G, Sk, c); out_b: (H, Sq, c); or with
     * layout bshc (Sq, H, c), (Sk, G, c), (Sq, H, c) */
    gather_heads(t->q + b * H * Sq * c, H, Sq, c, p->bshc, q);
    gather_heads(t->k + b * G * Sk * c, G, Sk, c, p->bshc, k);
    gather_heads(t->v + b * G * Sk * c, G, Sk, c, p->bshc, v);
    double *o_b = out + b * H * Sq * c;
    if (p->rope != REF_ROPE_NONE) {
      rotate_rows(p, t, g, bidx, 0, q, Sq, H, c, Sq * c);
      rotate_rows(p, t, g, bidx, 1, k, Sk, G, c, Sk * c);
    }
    for (int h = 0; h < H; h++) {
      long kvh = h / (H / G);   /* GQA: H/G consecutive query heads share one kv head */
      for (long i = 0; i < Sq; i++) {
        row rw = { bidx, b, h, i, q + (h * Sq + i) * c, k + kvh * Sk * c, v + kvh * Sk * c, c,
                   o_b + (p->bshc ? i * H + h : h * Sq + i) * c,
                   weights_at(t, g, b, h, i), lse_at(t, g, b, h, i) };
        attend_row(p, t, g, &rw, w, vis);
      }
    }
  }
  free(q);
  free(k);
  free(v);
  free(w);
  free(vis);
  return rc;
}

/* Row i of x as the q projection and the gate see it: with pe, plus the
 * encoding at the row's query position (scratch holds the sum). */
static const double *x_row(const ref_problem *p, const ref_tensors *t, const geom *g,
                           const long *bidx, long i, double *scratch)
{
  const double *x_i = t->x + row_index(p->x, p->rank, p->attn_axis, bidx, i) * g->c_in;
  if (p->pe == REF_PE_NONE) return x_i;
  memcpy(scratch, x_i, (size_t)g->c_in * sizeof *scratch);
  add_sinusoid(query_pos(p, t, g, bidx, i), g->c_in, scratch);
  return scratch;
}

/* Row j of kv (x in self-attention) as the k and v projections see it:
 * with pe, plus the encoding at the key's position. */
static const double *kv_row(const ref_problem *p, const ref_tensors *t, const geom *g,
                            const long *bidx, long j, double *scratch)
{
  const double *kvx = t->kv ? t->kv : t->x;
  const double *kv_j = kvx + row_index(p->kv, p->rank, p->attn_axis, bidx, j) * g->c_kv;
  if (p->pe == REF_PE_NONE) return kv_j;
  memcpy(scratch, kv_j, (size_t)g->c_kv * sizeof *scratch);
  add_sinusoid(key_pos(p, t, g, bidx, j), g->c_kv, scratch);
  return scratch;
}

/* ---- the KV cache -------------------------------------------------------- */

/* x rounded to a binary format of `bits` significand bits (the leading one
 * included), smallest normal 2^emin and largest finite value max: to
 * nearest, ties to even (nearbyint in the default rounding mode), with
 * subnormals on the grid of 2^(emin - bits + 1) and overflow to inf. */
static double round_binary(double x, int bits, int emin, double max)
{
  if (x == 0.0 || !isfinite(x)) return x;
  int e;
  (void)frexp(x, &e);   /* |x| in [2^(e-1), 2^e) */
  int lsb = (e - 1 > emin ? e - 1 : emin) - (bits - 1);   /* the last kept bit's exponent */
  double y = ldexp(nearbyint(ldexp(x, -lsb)), lsb);
  return fabs(y) > max ? copysign(INFINITY, x) : y;
}

double ref_round_kv(int kv_dtype, double x)
{
  switch (kv_dtype) {
  case REF_KV_F32: return round_binary(x, 24, -126, FLT_MAX);
  case REF_KV_BF16: return round_binary(x, 8, -126, ldexp(255.0, 120));   /* 0x7f7f */
  case REF_KV_F16: return round_binary(x, 11, -14, 65504.0);
  default: return x;
  }
}

/* Decision: a row whose scale underflows F32 (max|x| < 2^-142) is stored
 * as an all-zero row, scale 1: at F32 precision it is one. */
double ref_quantize_row(double *x, long c)
{
  double mx = 0.0;
  for (long d = 0; d < c; d++)
    if (!isfinite(x[d])) { /* no scale: the row reads back as NaN (docs/spec.md, kv_dtype=int8) */
      for (long e = 0; e < c; e++) x[e] = NAN;
      return NAN;
    }
  for (long d = 0; d < c; d++)
    if (fabs(x[d]) > mx) mx = fabs(x[d]);
  double scale = ref_round_kv(REF_KV_F32, mx / 127.0);   /* stored as F32 */
  if (!(scale > 0.0)) scale = 1.0;
  for (long d = 0; d < c; d++) {
    double q = nearbyint(x[d] / scale);
    x[d] = fmax(-127.0, fmin(127.0, q)) * scale;
  }
  return scale;
}

/* Batch element b's keys and values with a cache: the caller's cache
 * (G, CAP, c) copied to k and v as (CAP, G*c), then x's Sq new rows
 * projected, k rotated at the key position cache_len + i, both rounded as
 * kv_dtype stores them and written at cache_len + i.  The caches after the
 * run (and the new int8 scales) go to the optional outputs. */
static void cache_keys(const ref_problem *p, const ref_tensors *t, const geom *g, long b, const long *bidx,
                       double *k, double *v, double *xr)
{
  long G = g->G, c = g->c, kvw = g->kvw, cap = g->Sk, len = g->q_idx0;
  long blk = b * G * cap * c;   /* batch element b's block of a cache */
  for (long e = 0; e < G; e++)
    for (long j = 0; j < cap; j++) {
      memcpy(k + j * kvw + e * c, t->k_cache + blk + (e * cap + j) * c, (size_t)c * sizeof *k);
      memcpy(v + j * kvw + e * c, t->v_cache + blk + (e * cap + j) * c, (size_t)c * sizeof *v);
    }
  for (long i = 0; i < g->Sq; i++) {
    /* x's new row i is key len + i: with pe, encoded at that key's position */
    const double *x_i = t->x + row_index(p->x, p->rank, p->attn_axis, bidx, i) * g->c_in;
    if (p->pe != REF_PE_NONE) {
      memcpy(xr, x_i, (size_t)g->c_in * sizeof *xr);
      add_sinusoid(key_pos(p, t, g, bidx, len + i), g->c_in, xr);
      x_i = xr;
    }
    double *k_j = k + (len + i) * kvw, *v_j = v + (len + i) * kvw;
    linear(x_i, g->c_in, t->wk, p->qkv_bias ? t->bk : NULL, kvw, k_j);
    linear(x_i, g->c_in, t->wv, p->qkv_bias ? t->bv : NULL, kvw, v_j);
    for (long e = 0; e < G; e++) {
      if (p->rope != REF_ROPE_NONE) rotate(p, t, g, key_pos(p, t, g, bidx, len + i), k_j + e * c);
      long srow = (b * G + e) * cap + len + i;   /* the row's index in a scale tensor */
      if (p->kv_dtype == REF_KV_INT8) {
        double sk = ref_quantize_row(k_j + e * c, c), sv = ref_quantize_row(v_j + e * c, c);
        if (t->k_scale_out) t->k_scale_out[srow] = sk;
        if (t->v_scale_out) t->v_scale_out[srow] = sv;
      } else {
        for (long d = 0; d < c; d++) {
          k_j[e * c + d] = ref_round_kv(p->kv_dtype, k_j[e * c + d]);
          v_j[e * c + d] = ref_round_kv(p->kv_dtype, v_j[e * c + d]);
        }
      }
    }
  }
  for (long e = 0; e < G; e++)
    for (long j = 0; j < cap; j++) {
      if (t->k_cache_out) memcpy(t->k_cache_out + blk + (e * cap + j) * c, k + j * kvw + e * c, (size_t)c * sizeof *k);
      if (t->v_cache_out) memcpy(t->v_cache_out + blk + (e * cap + j) * c, v + j * kvw + e * c, (size_t)c * sizeof *v);
    }
}

static int run_full(const ref_problem *p, const ref_tensors *t, const geom *g0, double *out)
{
  int r = p->rank, ax = p->attn_axis;
  long H = g0->H, G = g0->G, c = g0->c, hc = H * c, kvw = g0->kvw;
  long Sq = g0->Sq, Sk = g0->Sk, c_in = g0->c_in, c_kv = g0->c_kv;

  double *q = malloc((size_t)Sq * hc * sizeof *q);      /* (Sq, H*c) */
  double *k = malloc((size_t)Sk * kvw * sizeof *k);     /* (Sk, G*c) or (Sk, c) */
  double *v = malloc((size_t)Sk * kvw * sizeof *v);
  double *o = malloc((size_t)g0->Sl * hc * sizeof *o);  /* (Sl, H*c), heads h-major */
  double *w = malloc((size_t)Sk * sizeof *w);
  char *vis = malloc((size_t)Sk);
  double *o_i = malloc((size_t)hc * sizeof *o_i);
  double *gate = malloc((size_t)hc * sizeof *gate);
  double *xr = malloc((size_t)c_in * sizeof *xr);       /* x row + PE */
  double *kvr = malloc((size_t)c_kv * sizeof *kvr);     /* kv row + PE */
  int rc = (q && k && v && o && w && vis && o_i && gate && xr && kvr) ? 0 : -1;

  long bidx[REF_MAX_RANK];
  for (long b = 0; rc == 0 && b < g0->nbatch; b++) {
    /* the geometry of batch element b: with a cache, its queries start at
     * index and position cache_len[b], and cache_len[b] + Sq keys exist */
    geom gb = *g0;
    const geom *g = &gb;
    if (p->cache) {
      gb.q_pos0 = gb.q_idx0 = (long)t->cache_len[b];
      gb.filled = gb.q_idx0 + Sq;
    }
    batch_index(g, b, bidx);

    /* (positional encoding and) project: the seed's linear_q/k/v, one
     * position at a time; rotary embedding of every q and k head (never
     * with global).  A cache projects and rotates only the new rows. */
    for (long i = 0; i < Sq; i++)
      linear(x_row(p, t, g, bidx, i, xr), c_in, t->wq, p->qkv_bias ? t->bq : NULL, hc, q + i * hc);
    if (p->rope != REF_ROPE_NONE) rotate_rows(p, t, g, bidx, 0, q, Sq, H, hc, c);
    if (p->cache) {
      cache_keys(p, t, g, b, bidx, k, v, xr);
    } else {
      for (long j = 0; j < Sk; j++) {
        const double *kv_j = kv_row(p, t, g, bidx, j, kvr);
        linear(kv_j, c_kv, t->wk, p->qkv_bias ? t->bk : NULL, kvw, k + j * kvw);
        linear(kv_j, c_kv, t->wv, p->qkv_bias ? t->bv : NULL, kvw, v + j * kvw);
      }
      if (p->rope != REF_ROPE_NONE) rotate_rows(p, t, g, bidx, 1, k, Sk, G, kvw, c);
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
      for (long i = 0; i < g->Sl; i++) {
        row rw = { bidx, b, h, i, q + i * hc + h * c, k + kvh * c, v + kvh * c, kvw,
                   o + i * hc + h * c, weights_at(t, g, b, h, i), lse_at(t, g, b, h, i) };
        attend_row(p, t, g, &rw, w, vis);
      }
    }

    /* gate and output projection, per output position.  Global + gated
     * broadcasts the one attention row over all Sq positions.  The gate
     * reads x as the q projection did, encoding included. */
    for (long i = 0; i < g->Sout; i++) {
      memcpy(o_i, o + (p->global ? 0 : i) * hc, (size_t)hc * sizeof *o_i);
      if (p->gated) {
        linear(x_row(p, t, g, bidx, i, xr), c_in, t->wg, t->bg, hc, gate);
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
  free(xr);
  free(kvr);
  return rc;
}

/* (batch axes..., H, Sl): the rows of the logits, shared by lse and the
 * weights.  Returns the element count. */
static long rows_shape(const geom *g, int *rank, long *shape)
{
  long n = 1;
  for (int a = 0; a < g->nb; a++) shape[a] = g->batch[a];
  shape[g->nb] = g->H;
  shape[g->nb + 1] = g->Sl;
  *rank = g->nb + 2;
  for (int a = 0; a < *rank; a++) n *= shape[a];
  return n;
}

long ref_lse_shape(const ref_problem *p, int *rank, long *shape)
{
  geom g;
  if (resolve(p, &g) != 0) return -1;
  return rows_shape(&g, rank, shape);
}

long ref_weights_shape(const ref_problem *p, int *rank, long *shape)
{
  geom g;
  if (resolve(p, &g) != 0) return -1;
  long n = rows_shape(&g, rank, shape);
  shape[(*rank)++] = g.Sk;
  return n * g.Sk;
}

long ref_visible(const ref_problem *p, const ref_tensors *t, unsigned char *vis)
{
  geom g;
  long bidx[REF_MAX_RANK], n = 0;
  if (!t || !vis || resolve(p, &g) != 0 || (p->has_mask && !t->mask)) return -1;
  if (p->cache && !t->cache_len) return -1;
  for (long b = 0; b < g.nbatch; b++) {
    batch_index(&g, b, bidx);
    if (p->cache) g.q_idx0 = (long)t->cache_len[b]; /* query i of this element has index cache_len + i */
    for (int h = 0; h < g.H; h++)
      for (long i = 0; i < g.Sl; i++)
        for (long j = 0; j < g.Sk; j++) vis[n++] = (unsigned char)key_visible(p, t, &g, bidx, i, j);
  }
  return n;
}

int ref_attention(const ref_problem *p, const ref_tensors *t, double *out)
{
  geom g;
  if (!t || !out || resolve(p, &g) != 0) return -1;
  if ((p->has_bias && !t->bias) || (p->has_mask && !t->mask)) return -1;
  if ((p->has_q_pos && !t->q_pos) || (p->has_k_pos && !t->k_pos)) return -1;
  if (p->sinks && !t->sinks) return -1;
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
  if (p->cache) {
    if (!self || !t->k_cache || !t->v_cache || !t->cache_len) return -1;
    for (long b = 0; b < g.nbatch; b++) {   /* whole positions, and the new rows fit */
      double len = t->cache_len[b];
      if (!(len >= 0.0) || len != floor(len) || len + (double)g.Sq > (double)g.Sk) return -1;
    }
  }
  return run_full(p, t, &g, out);
}

/* ---- gradients by finite differences -------------------------------------- */

long ref_grad_count(const ref_problem *p, const ref_tensors *t, int which)
{
  geom g;
  if (resolve(p, &g) != 0) return -1;
  long nx = 1, nkv = 1;
  for (int a = 0; a < p->rank; a++) {
    nx *= p->x[a];
    nkv *= p->kv[a];
  }
  long hc = (long)g.H * g.c;
  int full = !p->core, cross = full && t && t->kv && t->kv != t->x;
  switch (which) {
  case REF_G_X: return full ? nx : 0;
  case REF_G_KV: return cross ? nkv : 0;
  case REF_G_BIAS: {
    long n = p->has_bias;
    for (int a = 0; a < p->bias_rank && n; a++) n *= p->bias[a];
    return n;
  }
  case REF_G_Q: return p->core ? nx : 0;
  case REF_G_K: case REF_G_V: return p->core ? nkv : 0;
  case REF_G_SINKS: return p->sinks ? g.H : 0;
  case REF_G_WQ: return full ? hc * g.c_in : 0;
  case REF_G_BQ: return full && p->qkv_bias ? hc : 0;
  case REF_G_WK: case REF_G_WV: return full ? g.kvw * g.c_kv : 0;
  case REF_G_BK: case REF_G_BV: return full && p->qkv_bias ? g.kvw : 0;
  case REF_G_WG: return full && p->gated ? hc * g.c_in : 0;
  case REF_G_BG: return full && p->gated ? hc : 0;
  case REF_G_WO: return full ? g.c_in * hc : 0;
  case REF_G_BO: return full && p->out_bias ? g.c_in : 0;
  default: return -1;
  }
}

/* Where tensor `which` sits in t. */
static const double **tensor_slot(ref_tensors *t, int which)
{
  switch (which) {
  case REF_G_X: return &t->x;
  case REF_G_KV: return &t->kv;
  case REF_G_BIAS: return &t->bias;
  case REF_G_Q: return &t->q;
  case REF_G_K: return &t->k;
  case REF_G_V: return &t->v;
  case REF_G_SINKS: return &t->sinks;
  case REF_G_WQ: return &t->wq;
  case REF_G_BQ: return &t->bq;
  case REF_G_WK: return &t->wk;
  case REF_G_BK: return &t->bk;
  case REF_G_WV: return &t->wv;
  case REF_G_BV: return &t->bv;
  case REF_G_WG: return &t->wg;
  case REF_G_BG: return &t->bg;
  case REF_G_WO: return &t->wo;
  case REF_G_BO: return &t->bo;
  default: return NULL;
  }
}

/* L = sum(out * dout) over the terms whose dout is not 0. */
static int loss(const ref_problem *p, const ref_tensors *t, const double *dout, double *out, long n, double *l)
{
  if (ref_attention(p, t, out) != 0) return -1;
  double s = 0.0;
  for (long e = 0; e < n; e++)
    if (dout[e] != 0.0) s += out[e] * dout[e];
  *l = s;
  return 0;
}

int ref_grad_fd(const ref_problem *p, const ref_tensors *t, const double *dout, int which, long idx, double *grad)
{
  if (!t || !dout || !grad) return -1;
  long n = ref_grad_count(p, t, which), nout = ref_output_shape(p, NULL, NULL);
  if (n <= 0 || idx < 0 || idx >= n || nout < 0) return -1;
  /* a copy of t that writes no optional output, with a copy of the
   * tensor to perturb (in self-attention x is kv too) */
  ref_tensors tc = *t;
  tc.weights = tc.lse = tc.k_cache_out = tc.v_cache_out = tc.k_scale_out = tc.v_scale_out = NULL;
  const double **slot = tensor_slot(&tc, which);
  double *x = malloc((size_t)n * sizeof *x), *out = malloc((size_t)nout * sizeof *out + 1);
  int rc = (x && out && *slot) ? 0 : -1;
  if (rc == 0) {
    memcpy(x, *slot, (size_t)n * sizeof *x);
    if (which == REF_G_X && tc.kv == tc.x) tc.kv = x;
    *slot = x;
    const double x0 = x[idx], h = 1e-3 * fmax(1.0, fabs(x0));
    const double steps[4] = { -2 * h, -h, h, 2 * h };
    double l[4];
    for (int s = 0; rc == 0 && s < 4; s++) {
      x[idx] = x0 + steps[s];
      rc = loss(p, &tc, dout, out, nout, &l[s]);
    }
    if (rc == 0) *grad = (8.0 * (l[2] - l[1]) - (l[3] - l[0])) / (12.0 * h);
  }
  free(x);
  free(out);
  return rc;
}
