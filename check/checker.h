/* Check one spec against the float64 reference: random weights and inputs
 * (seeded), run the kernel, run check/reference.c, compare.  Used by
 * `attnc check` and by the sweep tests. */
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
} checker_opts;

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

/* Returns r->ok. */
int checker_run(const char *spec, const checker_opts *o, checker_result *r);

#endif
