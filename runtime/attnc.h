/* attnc: an attention-operator compiler.
 *
 * A spec string names one attention variant and its shapes; attnc_compile
 * turns it into a kernel (generated C, compiled by libtcc or the system C
 * compiler).  Bind weights and inputs by name, then run.  Nothing here
 * prints or exits: every failure comes back as an attnc_status and, where
 * an attnc_error is passed, a message with a position and a fix.
 */
#ifndef ATTNC_H
#define ATTNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNC_VERSION_MAJOR 0
#define ATTNC_VERSION_MINOR 1
#define ATTNC_VERSION_PATCH 0
#define ATTNC_VERSION "0.1.0"

#define ATTNC_MAX_RANK 8

typedef enum attnc_status {
  ATTNC_OK = 0,
  ATTNC_ESPEC,      /* the spec is malformed or impossible */
  ATTNC_EGEN,       /* the generator failed (a bug: please report) */
  ATTNC_ECOMPILE,   /* the C compiler rejected the generated code */
  ATTNC_EBIND,      /* a tensor has the wrong name, shape or dtype */
  ATTNC_EMISSING,   /* a tensor the kernel needs was not bound */
  ATTNC_EIO,        /* a file could not be read or written */
  ATTNC_EFORMAT,    /* a file is not valid safetensors */
  ATTNC_ENOMEM,     /* out of memory */
  ATTNC_EARG        /* a bad argument to an API call */
} attnc_status;

typedef struct attnc_error {
  attnc_status code;
  char where[256];   /* "spec:1:12" for spec errors, "" otherwise */
  int line, col;     /* 1-based position in the spec, 0 when none */
  char message[1024];/* what is wrong and how to fix it */
} attnc_error;

typedef enum attnc_dtype {
  ATTNC_F32 = 0, ATTNC_F64, ATTNC_F16, ATTNC_BF16,
  ATTNC_I8, ATTNC_I16, ATTNC_I32, ATTNC_I64,
  ATTNC_U8, ATTNC_U16, ATTNC_U32, ATTNC_U64, ATTNC_BOOL
} attnc_dtype;

/* A view of a dense row-major tensor; attnc never frees data. */
typedef struct attnc_tensor {
  attnc_dtype dtype;
  int rank;
  int64_t shape[ATTNC_MAX_RANK];
  void *data;
} attnc_tensor;

typedef enum attnc_backend {
  ATTNC_BACKEND_DEFAULT = 0, /* ATTNC_BACKEND env var, else tcc */
  ATTNC_BACKEND_TCC,         /* libtcc, in memory */
  ATTNC_BACKEND_CC           /* system C compiler -> shared object */
} attnc_backend;

typedef enum attnc_form {
  ATTNC_FORM_FAST = 0,      /* phases, tiles and vectorised primitives, on the thread pool */
  ATTNC_FORM_PLAIN          /* the algorithm alone: one function per step, one thread, for reading */
} attnc_form;

typedef struct attnc_options {
  attnc_backend backend;
  int threads;              /* default threads of the kernel's bindings; 0: ATTNC_THREADS, else all CPUs */
  const char *spec_name;    /* position prefix in errors; NULL: "spec" */
  attnc_form form;          /* which form of the kernel to generate (both compute the same) */
} attnc_options;

typedef struct attnc_kernel attnc_kernel;
typedef struct attnc_bindings attnc_bindings;
typedef struct attnc_safetensors attnc_safetensors;

/* ---- compiling ---- */
/* Compile a spec; NULL and a filled err on failure.  Equal canonical specs share one kernel. */
attnc_kernel *attnc_compile(const char *spec, const attnc_options *opts, attnc_error *err);
/* The generated C of a kernel. */
const char *attnc_source(const attnc_kernel *k);
/* The generated header of a kernel (for AOT builds). */
const char *attnc_header(const attnc_kernel *k);
/* The canonical spec: equal for every spelling of the same variant. */
const char *attnc_canonical(const attnc_kernel *k);
/* The C symbol prefix of the kernel (spec key `name`). */
const char *attnc_name(const attnc_kernel *k);
/* Which backend compiled it. */
attnc_backend attnc_kernel_backend(const attnc_kernel *k);
/* Drop one reference; the last one frees the kernel. */
void attnc_release(attnc_kernel *k);

/* Parse and canonicalise a spec without compiling; writes at most n bytes. */
attnc_status attnc_spec_canonical(const char *spec, const attnc_options *opts,
                                  char *buf, size_t n, attnc_error *err);
/* Generate C and header without compiling (caller frees both with free()). */
attnc_status attnc_generate(const char *spec, const attnc_options *opts,
                            char **source, char **header, attnc_error *err);
/* A human-readable description: tensors, shapes, bytes, FLOPs (caller frees). */
attnc_status attnc_explain(const char *spec, const attnc_options *opts,
                           const char *const *dim_names, const int64_t *dim_values, int ndims,
                           char **text, attnc_error *err);

/* ---- binding and running ---- */
/* A set of tensors for one kernel: weights, inputs, and named-dim sizes. */
attnc_bindings *attnc_bindings_new(attnc_kernel *k);
void attnc_bindings_free(attnc_bindings *b);
/* Bind a tensor by name: an input (x, kv, bias, mask, q, k, v; with a cache
 * k_cache, v_cache, cache_len, k_cache_scale, v_cache_scale) or a weight
 * under any naming scheme (linear_q.weight, q_proj.weight, in_proj_weight, ...). */
attnc_status attnc_bind(attnc_bindings *b, const char *name, const attnc_tensor *t, attnc_error *err);
/* Whether kernel k reads a tensor bound as `name`: 1 it does, 0 attnc knows
 * the name but this kernel does not read it (a mask without mask=key, a
 * gate weight without gated), -1 the name is none attnc knows.  For
 * callers that, like attnc_bind_safetensors, pass over what a spec does not use. */
int attnc_uses(const attnc_kernel *k, const char *name);
/* The spec key that makes a kernel read input `name` ("mask=key" for mask,
 * "cache=CAP" for k_cache, ...), or NULL for a name that is no input: for
 * saying why an input was passed over. */
const char *attnc_input_key(const char *name);
/* Bind every tensor of a safetensors file whose name (after prefix) the kernel uses;
 * others are ignored.  *nbound (may be NULL) gets the count. */
attnc_status attnc_bind_safetensors(attnc_bindings *b, const attnc_safetensors *f,
                                    const char *prefix, int *nbound, attnc_error *err);
/* Set a named dim (for example S) explicitly; usually inferred from the inputs. */
attnc_status attnc_bind_dim(attnc_bindings *b, const char *name, int64_t value, attnc_error *err);
/* Check everything is bound and consistent; fill the output's dtype, rank and shape. */
attnc_status attnc_output_shape(attnc_bindings *b, attnc_tensor *out, attnc_error *err);
/* The other outputs a spec may ask for, by name: "lse" (spec key lse, F32
 * (batch axes..., H, Sq)) and "attn" (spec key weights_out, F32 (batch
 * axes..., H, Sq, Sk): the attention weights the kernel computed).  attnc_output_info fills t's dtype, rank and
 * shape as attnc_output_shape does for "out" (ATTNC_EARG for a name the
 * spec does not ask for); attnc_bind_output names the tensor attnc_run
 * writes it to (its data must stay valid for every run that uses it).
 * attnc_run refuses to run a spec with such an output when none is bound. */
attnc_status attnc_output_info(attnc_bindings *b, const char *name, attnc_tensor *t, attnc_error *err);
attnc_status attnc_bind_output(attnc_bindings *b, const char *name, const attnc_tensor *t, attnc_error *err);
/* Threads for attnc_run (0: ATTNC_THREADS, else all CPUs); results do not depend on it. */
attnc_status attnc_bindings_set_threads(attnc_bindings *b, int threads, attnc_error *err);
int attnc_bindings_threads(const attnc_bindings *b);
/* Bytes of scratch held for runs: the most any run has needed (0 before the first). */
long attnc_bindings_scratch_bytes(const attnc_bindings *b);
/* The vectorised primitives this CPU uses: "avx512", "avx2" or "generic". */
const char *attnc_isa(void);
/* Run: out->data must hold the shape attnc_output_shape gives.  Weights
 * are packed on the first run after they are bound: rebind a weight after
 * changing its data.  One bindings object runs on one thread at a time.
 * A cache spec (key cache=CAP) also writes the caches bound as k_cache,
 * v_cache (and k_cache_scale, v_cache_scale) in place: rows cache_len[b]
 * .. cache_len[b] + Sq - 1; the caller then adds Sq to cache_len.  Every
 * check (0 <= cache_len[b], cache_len[b] + Sq <= CAP, shapes, dtypes) runs
 * before anything is written, so an error leaves the caches unchanged. */
attnc_status attnc_run(attnc_bindings *b, attnc_tensor *out, attnc_error *err);
/* The inputs a kernel updates in place, i = 0, 1, ...; NULL past the last:
 * with cache=CAP "k_cache", "v_cache", and with kv_dtype=int8 also
 * "k_cache_scale", "v_cache_scale".  *dtype (may be NULL) gets the dtype
 * each must be bound in, exactly (kv_dtype, I8 for int8; F32 scales): the
 * library never converts them.  They are not outputs: attnc_output_info
 * and attnc_bind_output do not take them. */
const char *attnc_inplace_name(const attnc_kernel *k, int i, attnc_dtype *dtype);

/* ---- training (spec keys train and dropout) ---- */
/* The dropout seed of every run and backward pass of these bindings
 * (default 0).  DESIGN.md's Philox4x32-10 counter makes the dropped
 * probabilities depend only on the seed and (batch element, head, query,
 * key), never on the backend, form or thread count. */
attnc_status attnc_bindings_set_seed(attnc_bindings *b, uint64_t seed, attnc_error *err);
uint64_t attnc_bindings_seed(const attnc_bindings *b);
/* 1 when the kernel has a backward pass (spec key train). */
int attnc_kernel_trains(const attnc_kernel *k);
/* Forward and backward of a train spec (the fast form on the bindings' threads, the plain form on the calling thread): writes out
 * (and lse, attn where bound) as attnc_run does, then, from dout (the
 * gradient of out: out's shape, any float dtype), the gradient of every
 * differentiable tensor bound: x, kv, q, k, v, bias, sinks, each weight
 * and projection bias (not the mask, positions, rope_freqs or caches).
 * A broadcast bias gets the sum over the axes it was broadcast along.
 * The bindings own the gradients: read them with attnc_grad_get; they stay
 * valid until the next attnc_grad, a rebind, or attnc_bindings_free.
 * ATTNC_EARG for a spec without train. */
attnc_status attnc_grad(attnc_bindings *b, attnc_tensor *out, const attnc_tensor *dout, attnc_error *err);
/* After attnc_grad: the names the gradients belong to, i = 0, 1, ...,
 * exactly as the tensors were bound (in_proj_weight stays whole); NULL
 * past the last. */
const char *attnc_grad_name(const attnc_bindings *b, int i);
/* The gradient of the tensor bound as name: the bound shape, the kernel's
 * dtype (F32 or F64), data owned by the bindings.  ATTNC_EMISSING when
 * the last attnc_grad computed none for that name. */
attnc_status attnc_grad_get(const attnc_bindings *b, const char *name, attnc_tensor *t, attnc_error *err);
/* Bytes the bindings hold for attnc_grad: the gradient buffers (one per
 * grad slot the kernel reads, the stacked in_proj_* ones) and dout
 * converted to the kernel's dtype; 0 before the first attnc_grad. */
long attnc_bindings_grad_bytes(const attnc_bindings *b);
/* Bytes the backward of the last attnc_grad used for itself (NAME_backward_bytes:
 * O(S), the forward's lse per row and projection buffers, never Sq x Sk),
 * besides the gradients: the fast form's in one region the bindings keep
 * between calls, the plain form's allocated and freed; 0 before the first. */
long attnc_bindings_grad_scratch_bytes(const attnc_bindings *b);

/* ---- names of the kernel's tensors ---- */
/* Number of dims the spec names (B, S, ...) and their names. */
int attnc_dim_count(const attnc_kernel *k);
const char *attnc_dim_name(const attnc_kernel *k, int i);

/* ---- safetensors ---- */
attnc_safetensors *attnc_st_open(const char *path, attnc_error *err);
attnc_safetensors *attnc_st_from_memory(const void *buf, size_t n, attnc_error *err);
size_t attnc_st_count(const attnc_safetensors *f);
const char *attnc_st_name(const attnc_safetensors *f, size_t i);
/* Fill t with tensor i (data points into f; valid until attnc_st_close). */
attnc_status attnc_st_get(const attnc_safetensors *f, size_t i, attnc_tensor *t);
/* Find by name; ATTNC_EMISSING if absent. */
attnc_status attnc_st_find(const attnc_safetensors *f, const char *name, attnc_tensor *t);
void attnc_st_close(attnc_safetensors *f);
/* Write n named tensors to path atomically (temp file + rename). */
attnc_status attnc_st_write(const char *path, size_t n, const char *const *names,
                            const attnc_tensor *tensors, attnc_error *err);

/* ---- int8 weights (attnc quantize) ---- */
/* 1 when t is a 2-D float tensor whose name ends with a projection weight's
 * name of any naming scheme (the whole name, or after a '.'); biases are not. */
int attnc_quantize_takes(const char *name, const attnc_tensor *t);
/* Quantise w (out, in) per output row: scale[r] = max|row r| / 127 (1 for
 * a row of zeros), q[r][c] = round-half-to-even(w / scale), in f32; so
 * w ~ q * scale.  q holds out*in values, scale out.  Non-finite weights are an error. */
attnc_status attnc_quantize_int8(const attnc_tensor *w, int8_t *q, float *scale, attnc_error *err);

/* ---- misc ---- */
const char *attnc_strerror(attnc_status s);
const char *attnc_dtype_name(attnc_dtype d);   /* "F32", ... as in safetensors */
size_t attnc_dtype_size(attnc_dtype d);
int attnc_dtype_parse(const char *s, attnc_dtype *d); /* 1 on success */

#ifdef __cplusplus
}
#endif
#endif
