/* Check one spec against the float64 reference: random weights and inputs
 * (seeded), run the kernel, run check/reference.c, compare.  Used by
 * `attnc check` and by the sweep tests.  With checker_opts.grad (`attnc
 * check SPEC --grad`) the gradients of a train kernel are judged too,
 * against finite differences of the reference. */
#ifndef ATTNC_CHECKER_H
#define ATTNC_CHECKER_H

#include "attnc.h"

typedef struct checker_opts {
  attnc_backend backend;
  attnc_form form;                /* the fast (default) or the plain form */
  const char *spec_name;          /* for error positions; NULL: "spec" */
  const char *const *dim_names;   /* named dims to set; others default_dim */
  const int64_t *dim_values;
  int ndims;
  int64_t default_dim;            /* 0: 7 */
  unsigned long seed;
  int mask_rank;                  /* 0: the full (batch..., Sk); else that many trailing dims */
  double mask_keep;               /* probability a key is kept; 0: 0.8 */
  double scale_inputs;            /* multiply x (or q) by this; 0: 1 */
  int threads;                    /* 0: the default */
  int misalign;                   /* tensors start this many elements past a 64-byte boundary (0: on it) */
  double *out_copy;               /* if set: receives the kernel's output as doubles (out_n of them) */
  size_t out_n;
  /* a cache spec: cache_len is random in [0, CAP - Sq] per batch element
   * (bound as a scalar for some seeds), or, with cache_len_set, cache_len
   * for every batch element (attnc bench --cache-len) */
  int cache_len_set;
  int64_t cache_len;
  /* Gradient mode: compile the spec with train (appended when the spec
   * has none), bind random tensors as above, draw a random dout in [-1, 1]
   * (0 where the reference's out is NaN), run attnc_grad, judge out (and
   * lse, attn) as the forward check does, and then, for every gradient
   * attnc_grad_name lists, every element of a small tensor or 48 of a
   * large one (the first, the last and random ones) against the
   * reference's finite-difference gradient of L = sum(out * dout).  A
   * gradient element must be within the bound of checker_grad_bounds. */
  int grad;
  /* The dropout seed the bindings get (attnc_bindings_set_seed) and the
   * reference uses, for a train spec in either mode. */
  uint64_t dropout_seed;
} checker_opts;

/* One gradient's verdict in gradient mode. */
typedef struct checker_grad {
  char name[64];                  /* as bound, e.g. "x", "linear_q.weight" */
  size_t n, judged;               /* its elements, and how many were compared */
  double max_abs;                 /* max |got - want| over those */
  double rms;                     /* rms of the reference's values there (k's bias: q's bias's, see checker_grad_bounds) */
  double worst;                   /* max |got - want| / tolerance (<= 1 passes) */
  double nmse;                    /* sum (got - want)^2 / sum want^2 over the judged elements */
} checker_grad;

typedef struct checker_result {
  attnc_status status;            /* ATTNC_OK when the kernel ran */
  attnc_error err;
  size_t n;                       /* outputs compared */
  double max_abs, max_ref, tol;   /* max |got - want|, max |want|, tolerance at max |want| */
  double atol, rtol;              /* per element: |got - want| <= atol + rtol |want| */
  double rms;                     /* root mean square of the reference (atol includes its share) */
  double nmse, nmse_max;          /* sum (got - want)^2 / sum want^2, and its bound */
  size_t n_lse;                   /* lse values compared too (spec key lse), within the same elementwise bound */
  size_t n_attn;                  /* attention weights compared too (spec key weights_out) */
  size_t n_cache;                 /* cache values the run wrote, compared with the reference's rows;
                                     every other cache row (and int8 scale) must be unchanged */
  /* gradient mode: */
  size_t n_grad;                  /* gradient elements judged, over all gradients */
  int n_grads;                    /* gradients judged (entries of grads) */
  double max_grad_err;            /* the largest max_abs of grads */
  double worst_grad;              /* the largest worst of grads: <= 1 passes */
  char grad_worst_name[64];       /* the gradient with that worst */
  checker_grad grads[24];
  int ok;                         /* 1 when within tolerance and NaNs match */
  char canonical[2048];
  attnc_backend backend;
} checker_result;

/* Random tensors bound to b (weights under their AlphaFold names). */
typedef struct checker_inputs checker_inputs;
checker_inputs *checker_bind_random(attnc_kernel *k, attnc_bindings *b, const checker_opts *o, attnc_error *err);
void checker_inputs_free(checker_inputs *in);

/* The attention weights (batch axes..., H, Sq, Sk) of the tensors bound to
 * b, computed by the float64 reference; *weights is malloc'd.  0 or -1. */
int checker_weights(attnc_kernel *k, attnc_bindings *b, double **weights, int *rank, long *shape, attnc_error *err);

/* Whether query i may see key j (mask, causal, window; not the weights'
 * values) for the tensors bound to b: 1 or 0 in the weights' shape
 * (batch axes..., H, Sq, Sk); *vis is malloc'd.  0 or -1. */
int checker_visible(attnc_kernel *k, attnc_bindings *b, unsigned char **vis, int *rank, long *shape, attnc_error *err);

/* DESIGN.md's accuracy bounds for a kernel computing in dt (I8: weights=int8): NMSE at most
 * *nmse; each element within *atol + *a_rms * rms(reference) + *rtol * |r|. */
void checker_bounds(attnc_dtype dt, double *nmse, double *atol, double *a_rms, double *rtol);

/* The bound of a gradient element in gradient mode (dt: the kernel's
 * dtype): |got - want| <= atol + a_rms * rms + rtol * |want|, rms being
 * the root mean square of the reference's values over the judged
 * elements, and NMSE over them at most *nmse: DESIGN.md's f32 gradient row
 * (1e-4 rms + 1e-4 |r|, NMSE 1e-8), and for f64 its f64 row widened by
 * what the finite differences themselves miss (about 2e-10 of the scale:
 * 1e-8 rms + 1e-8 |r|).  A gradient that is 0 in exact arithmetic (the k
 * projection's bias) takes its rms from the q projection bias's, and one
 * whose judged elements are all 0 from the largest of the others'. */
void checker_grad_bounds(attnc_dtype dt, double *nmse, double *atol, double *a_rms, double *rtol);

/* Returns r->ok. */
int checker_run(const char *spec, const checker_opts *o, checker_result *r);

#endif
