/* The one float64 reference for every attnc variant.  Plain loops, no
 * tricks: obviously correct is the point.  Semantics: docs/spec.md
 * (and the AlphaFold worksheet it grew from). */
#ifndef ATTNC_REFERENCE_H
#define ATTNC_REFERENCE_H

#define REF_MAX_RANK 8

enum { REF_CAUSAL_NONE = 0, REF_CAUSAL_TOP_LEFT, REF_CAUSAL_BOTTOM_RIGHT };
enum { REF_EMPTY_ZERO = 0, REF_EMPTY_UNIFORM, REF_EMPTY_NAN };

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
} ref_problem;

/* Tensors, all row-major float64, in PyTorch layout (Linear weight = (out, in)).
 * Unused ones may be NULL.  mask: nonzero keeps the key. */
typedef struct ref_tensors {
  const double *x, *kv, *bias, *mask;   /* full mode inputs */
  const double *q, *k, *v;              /* core mode inputs */
  const double *wq, *bq, *wk, *bk, *wv, *bv, *wg, *bg, *wo, *bo;
  double *weights;   /* optional output: the attention weights, ref_weights_shape() */
} ref_tensors;

/* Output shape: rank and dims; returns element count. */
long ref_output_shape(const ref_problem *p, int *rank, long *shape);
/* Shape of the attention weights: (batch axes..., H, Sq, Sk), Sq = 1 for
 * global; returns the element count. */
long ref_weights_shape(const ref_problem *p, int *rank, long *shape);
/* Compute out (ref_output_shape elements).  Returns 0, or -1 on a bad problem. */
int ref_attention(const ref_problem *p, const ref_tensors *t, double *out);

#endif
