/* The one float64 reference for every attnc variant.  Plain loops, no
 * tricks: obviously correct is the point.  Semantics: docs/spec.md
 * (and the AlphaFold worksheet it grew from); positions, score modifiers
 * and lse as DESIGN.md's spec language v2 words them. */
#ifndef ATTNC_REFERENCE_H
#define ATTNC_REFERENCE_H

#include <stdint.h>

#define REF_MAX_RANK 8

enum { REF_CAUSAL_NONE = 0, REF_CAUSAL_TOP_LEFT, REF_CAUSAL_BOTTOM_RIGHT };
enum { REF_EMPTY_ZERO = 0, REF_EMPTY_UNIFORM, REF_EMPTY_NAN };
enum { REF_ROPE_NONE = 0, REF_ROPE_NEOX, REF_ROPE_GPTJ };
enum { REF_PE_NONE = 0, REF_PE_SINUSOIDAL };
/* How a KV cache stores the rows a run writes: exactly (f64), or rounded to
 * nearest, ties to even, to f32, bf16 or f16, or quantised per row of c
 * values to int8 with a symmetric F32 scale. */
enum { REF_KV_F64 = 0, REF_KV_F32, REF_KV_BF16, REF_KV_F16, REF_KV_INT8 };

typedef struct ref_problem {
  int core;                 /* mode=core: q (*,H,Sq,c), k and v (*,G,Sk,c) */
  int bshc;                 /* mode=core, layout=bshc: q (*,Sq,H,c), k and v (*,Sk,G,c), out like q */
  /* full mode: x and kv shapes (kv = x for self-attention), last dim = width */
  int rank;                 /* rank of x (and kv); in core mode rank of q (and k, v) */
  long x[REF_MAX_RANK];     /* full: x shape; core: q shape */
  long kv[REF_MAX_RANK];    /* full: kv shape; core: k/v shape */
  int attn_axis;            /* full mode: axis index in 0..rank-2 (non-negative) */
  int H, G, c;              /* heads, kv heads, head dim (full mode) */
  int qkv_bias, out_bias, gated, global, global_masked;
  int has_bias; int bias_rank; long bias[REF_MAX_RANK];  /* (*b, H, Sq, Sk) */
  int has_mask; int mask_rank; long mask[REF_MAX_RANK];  /* (*m, Sk), right-aligned */
  int causal;               /* REF_CAUSAL_* */
  int has_window; long wl, wr;
  double scale;
  int empty_rows;           /* REF_EMPTY_* */
  /* Everything below is off when zero, so a memset problem keeps v1's meaning.
   * Positions feed rope, alibi and pe only; causal and window use indices.
   * Default positions: key j at j, query i at i + Sk - Sq (self-attention,
   * core mode), or at i (full-mode cross-attention, where both start at 0). */
  int has_q_pos; int q_pos_rank; long q_pos[REF_MAX_RANK];  /* (*m, Sq), right-aligned like the mask */
  int has_k_pos; int k_pos_rank; long k_pos[REF_MAX_RANK];  /* (*m, Sk), likewise */
  int rope;                 /* REF_ROPE_*: rotate q and k after projection and bias, before the scale */
  int rope_dim;             /* r, even, <= head dim: features from r on stay as they are; 0 = head dim */
  double rope_theta;        /* angle base theta (> 1); 0 = 10000 */
  double alibi;             /* max_bias > 0 adds slope[h] * (pos_k - pos_q) to the logits; 0 = off */
  double softcap;           /* cap > 0: s = cap * tanh(s / cap) on the scaled logits (Gemma 2); 0 = off */
  int sinks;                /* per-head sink logits join each softmax denominator (gpt-oss); empty_rows zero */
  int pe;                   /* REF_PE_*: full mode, added to x and kv rows before the projections */
  /* A KV cache (full-mode self-attention, DESIGN.md "Decoding with a KV
   * cache"): the keys are the cache's CAP positions (Sk = CAP); x's Sq rows
   * are new, projected, rotated at cache_len[b] + i, rounded as kv_dtype
   * stores them and placed at cache_len[b] + i; query i has index
   * cache_len[b] + i and sees keys j <= cache_len[b] + i (causal always). */
  long cache;               /* CAP; 0 = no cache */
  int kv_dtype;             /* REF_KV_*: the storage the new rows are rounded to */
  /* Dropout (DESIGN.md "Training"): in every row that sees a key, after
   * the softmax (a sink keeps its share, and gives the output nothing),
   * key j's probability is kept, times 1/(1-p), iff ref_dropout_keeps(p,
   * seed, b, h, i, j), else 0; b is the batch element (flattened
   * row-major), i the logit row (0 for global).  lse is unaffected; the
   * weights output holds the probabilities before dropout (DESIGN.md). */
  double dropout;           /* p, 0 <= p < 1; 0 = off */
  uint64_t seed;            /* the dropout seed */
} ref_problem;

/* Tensors, all row-major float64, in PyTorch layout (Linear weight = (out, in)).
 * Unused ones may be NULL.  mask: nonzero keeps the key. */
typedef struct ref_tensors {
  const double *x, *kv, *bias, *mask;   /* full mode inputs */
  const double *q, *k, *v;              /* core mode inputs */
  const double *wq, *bq, *wk, *bk, *wv, *bv, *wg, *bg, *wo, *bo;
  double *weights;   /* optional output: attention probabilities (a sink's share left out), ref_weights_shape() */
  const double *q_pos, *k_pos;   /* integer positions held as doubles, when has_q_pos / has_k_pos */
  const double *rope_freqs;      /* (r/2) factors f dividing the rope angles (Llama 3); NULL = all 1 */
  const double *sinks;           /* (H) sink logits, when sinks */
  double *lse;       /* optional output: log of each row's softmax denominator, ref_lse_shape() */
  /* with a cache: (batch elements, G, CAP, c) with the batch axes flattened
   * row-major, the caller's contents as values (int8: q * scale) */
  const double *k_cache, *v_cache;
  const double *cache_len;       /* (batch elements): positions already filled */
  double *k_cache_out, *v_cache_out; /* optional outputs: the caches after the run, new rows as stored */
  double *k_scale_out, *v_scale_out; /* optional, int8: (batch elements, G, CAP); the new rows' scales are
                                        written, every other entry is left as the caller had it */
} ref_tensors;

/* Output shape: rank and dims; returns element count. */
long ref_output_shape(const ref_problem *p, int *rank, long *shape);
/* Shape of the attention weights: (batch axes..., H, Sq, Sk), Sq = 1 for
 * global; returns the element count. */
long ref_weights_shape(const ref_problem *p, int *rank, long *shape);
/* Shape of lse: (batch axes..., H, Sq), Sq = 1 for global; returns the
 * element count. */
long ref_lse_shape(const ref_problem *p, int *rank, long *shape);
/* x rounded as a cache of kv_dtype stores it (REF_KV_F64..F16: to nearest,
 * ties to even, overflowing to inf).  Exposed for the checker and tests. */
double ref_round_kv(int kv_dtype, double x);
/* One row of c values quantised as an int8 cache stores it: scale =
 * max|x| / 127 rounded to F32 (1 for an all-zero row), q =
 * round-half-to-even(x / scale) within -127..127; x becomes q * scale.
 * A row holding a NaN or an infinity becomes all NaN, its scale NaN.
 * Returns the scale. */
double ref_quantize_row(double *x, long c);
/* vis[...] = 1 where query i may see key j by the mask, causal and window,
 * else 0, in the weights' shape (ref_weights_shape); only t->mask is read.
 * Returns the element count, or -1 on a bad problem. */
long ref_visible(const ref_problem *p, const ref_tensors *t, unsigned char *vis);
/* Compute out (ref_output_shape elements).  Returns 0, or -1 on a bad problem. */
int ref_attention(const ref_problem *p, const ref_tensors *t, double *out);

/* Philox4x32-10 (Salmon et al., SC'11; Random123's philox4x32): out =
 * the 4 words of counter ctr under key. */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* Whether dropout with probability p keeps key j of logit row i of head h
 * in batch element b: word[j mod 4] >= floor(p * 2^32), word = Philox of
 * the counter (floor(j/4), i, h, b) under the key (seed mod 2^32,
 * floor(seed / 2^32)).  1 or 0. */
int ref_dropout_keeps(double p, uint64_t seed, long b, long h, long i, long j);

/* The tensors that have a gradient (DESIGN.md "Training"): x, kv (cross-
 * attention), bias, q, k, v (core), sinks, and every weight and projection bias. */
enum {
  REF_G_X = 0, REF_G_KV, REF_G_BIAS, REF_G_Q, REF_G_K, REF_G_V, REF_G_SINKS,
  REF_G_WQ, REF_G_BQ, REF_G_WK, REF_G_BK, REF_G_WV, REF_G_BV, REF_G_WG, REF_G_BG, REF_G_WO, REF_G_BO,
  REF_G_COUNT
};
/* The number of elements of tensor `which` (REF_G_*) in problem p (with
 * t: kv counts only when t->kv is a tensor of its own), 0 when the problem
 * has no such tensor, -1 on a bad problem. */
long ref_grad_count(const ref_problem *p, const ref_tensors *t, int which);
/* The reference's gradient of L = sum(out * dout) with respect to element
 * idx of tensor `which`, by finite differences: the fourth-order central
 * stencil (8 (L(h) - L(-h)) - (L(2h) - L(-2h))) / 12h, h = 1e-3 *
 * max(1, |x|).  Its truncation error, O(h^4), stays far below the
 * rounding error of L over h, so the step is large: in float64 this is
 * good to about 2e-10 of the gradients' scale (the second-order stencil
 * at h = 1e-6 reaches only 1e-8; this one at 1e-4 about 2e-9).  Terms
 * whose dout is exactly 0 are left out of L (so a NaN output, which
 * empty_rows=nan gives, can be excluded); the optional outputs of t
 * (weights, lse, caches) are not written.  0, or -1 on a bad problem or
 * index, or out of memory. */
int ref_grad_fd(const ref_problem *p, const ref_tensors *t, const double *dout, int which, long idx, double *grad);

#endif
