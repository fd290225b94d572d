/* Internal declarations shared by the runtime's files; not installed. */
#ifndef ATTNC_INTERNAL_H
#define ATTNC_INTERNAL_H

#include "attnc.h"

#if defined(__GNUC__)
#define ATTNC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ATTNC_PRINTF(a, b)
#endif

/* Fill err (if not NULL) with code and a formatted message; returns code. */
attnc_status attnc_err_set(attnc_error *err, attnc_status code, const char *fmt, ...) ATTNC_PRINTF(3, 4);
/* Clear err to ATTNC_OK. */
void attnc_err_clear(attnc_error *err);

#include "../templates/abi.h"

/* A dim in a tensor signature: > 0 is a constant size; < 0 is named dim
 * number -(d + 1). */
typedef struct attnc_shape {
  int rank;
  int64_t dim[ATTNC_MAX_RANK];
} attnc_shape;

/* What the generator returns for one spec. */
typedef struct attnc_gen {
  char *canonical, *name, *source, *header;
  int plain;               /* the plain form: NAME_run only, no phases */
  attnc_dtype dtype;
  attnc_dtype wdtype;      /* the weight matrices' storage: dtype, another float type, or I8 (weights=int8) */
  attnc_dtype wstore;      /* the weights' storage as the spec declares it (weights=, else dtype): an f64 kernel
                              holds f32/bf16/f16 weights widened to f64 (wdtype F64), so binding first rounds a
                              weight given in another dtype to wstore, as the spec's storage would hold it */
  int ndims;
  char **dim_names;
  int used[ATTNC_SLOT_COUNT];
  int optional[ATTNC_SLOT_COUNT]; /* used if bound, else the kernel's default (rope_freqs: all 1) */
  attnc_shape shape[ATTNC_SLOT_COUNT];
  attnc_shape out;
  int has_mask;
  attnc_shape mask;        /* batch axes then Sk */
  /* the semantics, for the reference checker and explain */
  int core, rank, axis, self, heads, kv_heads, head_dim, qkv_bias, out_bias;
  int gated, global, global_masked, has_window, layout_bshc;
  int causal, empty_rows;  /* enum attnc_causal, enum attnc_empty_rows */
  int64_t window_l, window_r, c_in, c_kv;
  double scale;
  int has_bias;
  attnc_shape bias;
  double softcap, alibi;   /* 0: off; else the cap, and ALiBi's max_bias */
  int sinks;               /* the input sinks (H) joins every row's softmax */
  int has_lse;             /* the output lse, of shape lse: (batch axes..., H, Sq) */
  int has_attn;            /* the output attn (weights_out), of shape attn: (batch axes..., H, Sq, Sk) */
  attnc_shape attn;
  int rope, rope_dim;      /* 0 none, 1 neox, 2 gptj; r */
  int pe;                  /* sinusoidal positional encoding of x (and kv) */
  int has_positions;       /* q_pos, k_pos may be bound: their full shapes (batch axes..., S) */
  attnc_shape pos_shape[2];
  double rope_theta;
  attnc_shape lse;
  /* a KV cache (spec key cache): k_cache, v_cache (batch axes..., G, CAP,
   * c) of kv_dtype (I8 for int8, with F32 scales), written in place, and
   * cache_len (batch axes); cache_cap is CAP as a shape dim */
  int has_cache;
  attnc_dtype kv_dtype;
  int64_t cache_cap;
  /* training (spec key train): the kernel has NAME_backward; dropout p
   * (0 <= p < 1) drops attention probabilities, reproducibly from a seed */
  int train;
  double dropout;
} attnc_gen;

/* host.c: run the embedded Lua generator (plain: the plain form). */
attnc_status attnc_host_generate(const char *spec, const char *spec_name, int plain, attnc_gen *g, attnc_error *err);
attnc_status attnc_host_canonical(const char *spec, const char *spec_name, char **canonical, attnc_error *err);
void attnc_gen_free(attnc_gen *g);

/* The entry points of a compiled kernel (see templates/abi.h). */
typedef struct attnc_kernel_fns {
  int (*run)(const attnc_args *args);
  long (*scratch_bytes)(const attnc_args *args, long nthreads);
  long (*phase_items)(const attnc_args *args, int phase);
  int (*phase)(const attnc_args *args, int phase, long begin, long end, long thread);
  int (*backward)(const attnc_args *args); /* spec key train: forward again, then the gradients; else NULL */
  long (*backward_bytes)(const attnc_args *args); /* what backward allocates for args' dims; NULL without train */
} attnc_kernel_fns;

/* jit_tcc.c, jit_cc.c: compile generated C to a callable kernel. */
attnc_status attnc_jit_tcc(const attnc_gen *g, void **state, attnc_kernel_fns *fns, attnc_error *err);
void attnc_jit_tcc_free(void *state);
attnc_status attnc_jit_cc(const char *spec, const attnc_gen *g, void **handle, attnc_kernel_fns *fns, attnc_error *err);
/* cc_index.c: a warm load without the generator: 1 and g, handle, fns
 * filled when the cache's spec index knows this exact spec text; 0 otherwise. */
int attnc_jit_cc_lookup(const char *spec, int plain, attnc_gen *g, void **handle, attnc_kernel_fns *fns);
void attnc_jit_cc_free(void *handle);

/* jit_tcc.c, for both backends: 1 and fns filled when get(h, symbol) finds
 * the kernel's four entry points (the plain form's one). */
int attnc_jit_find_fns(const attnc_gen *g, void *(*get)(void *, const char *), void *h, attnc_kernel_fns *fns);

/* jit_cc.c, shared with cc_index.c: the cache folder, FNV-1a hashing, the
 * parts of every cache key (compiler, flags, CPU) and checked files. */
int attnc_cc_cache_dir(char *out, size_t n);
uint64_t attnc_cc_fnv64(uint64_t h, const char *s);
uint64_t attnc_cc_fnv64_bytes(uint64_t h, const unsigned char *p, size_t n);
uint64_t attnc_cc_cpu_key(uint64_t h);
const char *attnc_cc_compiler(void);
extern const char attnc_cc_flags[];       /* the fixed flags; ATTNC_CC_FLAGS's follow */
const char *attnc_cc_extra_flags(void);
/* A file's contents when its trailer matches (caller frees), else NULL. */
unsigned char *attnc_cc_read_checked(const char *path, size_t *n_out);
int attnc_cc_add_trailer(const char *path);
void *attnc_cc_load_checked(const char *path, const attnc_gen *g, attnc_kernel_fns *fns);

/* cc_index.c: record a spec's object and generator result (best effort). */
void attnc_cc_index_write(const char *spec, const char *object, const attnc_gen *g);

/* convert.c: 1 when a tensor of dtype d can be bound (F64, F32, BF16, F16);
 * n elements of src (dtype sd) to dst as dd (F32, F64, or BF16 or F16
 * rounded to nearest, ties to even). */
int attnc_convert_takes(attnc_dtype d);
void attnc_convert(const void *src, attnc_dtype sd, void *dst, attnc_dtype dd, size_t n);

/* kernel.c */
struct attnc_kernel {
  int refs;
  attnc_gen gen;
  attnc_backend backend;
  void *state;            /* TCCState or dlopen handle */
  attnc_kernel_fns fns;
  int threads;            /* default for new bindings; 0: ATTNC_THREADS or all CPUs */
  struct attnc_kernel *next;
};
/* Another reference to k (attnc_release drops it). */
void attnc_kernel_retain(attnc_kernel *k);
const attnc_gen *attnc_kernel_gen(const attnc_kernel *k);

/* bindings.c */
struct attnc_bindings {
  attnc_kernel *k;
  attnc_tensor t[ATTNC_SLOT_COUNT];
  const char *from[ATTNC_SLOT_COUNT];  /* the name each tensor was bound under */
  char from_buf[ATTNC_SLOT_COUNT][96];
  attnc_tensor in_proj_w, in_proj_b, in_proj_s; /* in_proj_weight, _bias, and weight_scale (int8) */
  attnc_tensor lse, attn; /* the outputs lse and attn, when bound (attnc_bind_output) */
  long long *pos[2];      /* q_pos, k_pos broadcast to dense (batch elements, S) int64 */
  size_t pos_n[2];
  long long *cache_len;   /* cache_len broadcast to dense (batch elements) int64 */
  size_t cache_len_n;
  int has_lse, has_attn;
  int has_in_proj_w, has_in_proj_b, has_in_proj_s;
  int64_t dims[64];
  int dim_set[64];
  char dim_from[64][96];
  unsigned char *mask_u8;
  size_t mask_n;
  long mask_stride[ATTNC_ABI_MAX_RANK];
  float *packed[ATTNC_SLOT_COUNT];       /* weights packed for the primitives */
  const void *packed_from[ATTNC_SLOT_COUNT];
  float *packed32[ATTNC_SLOT_COUNT];     /* a bf16 kernel's weights as f32 panels, for its backward */
  const void *packed32_from[ATTNC_SLOT_COUNT];
  void *conv[ATTNC_SLOT_COUNT];          /* tensors bound in another dtype, in the kernel's */
  size_t conv_n[ATTNC_SLOT_COUNT];       /* elements conv[] holds room for */
  const void *conv_from[ATTNC_SLOT_COUNT]; /* the weight data conv[] was made from */
  void *cache_copy[4];                   /* k_cache, v_cache (and their int8 scales) read from a file in another float dtype, in kv_dtype (F32) */
  void *scratch;
  long scratch_bytes;
  int threads;
  /* training (run.c, attnc_grad): the dropout seed of every run; each
   * grad slot's gradient as the kernel writes it (dense, the kernel's
   * dtype, the slot's shape), with room for grad_n[] elements; the stacked
   * gradients of in_proj_weight and in_proj_bias; dout converted to the
   * kernel's dtype; and the gradients the last attnc_grad exposed, by the
   * names their tensors were bound under */
  unsigned long long seed;
  void *grad[ATTNC_SLOT_COUNT];
  size_t grad_n[ATTNC_SLOT_COUNT];
  void *grad_stacked[2];
  size_t grad_stacked_n[2];
  void *dout_conv;
  size_t dout_n;
  long grad_scratch;      /* what the last attnc_grad's backward used besides the gradients (NAME_backward_bytes) */
  void *grad_work;        /* the fast form's backward's buffers, kept between calls (grad_work_n bytes) */
  size_t grad_work_n;
  int ngrad;
  char grad_name[ATTNC_SLOT_COUNT][96];
  attnc_tensor grad_t[ATTNC_SLOT_COUNT];
};
/* The slot a tensor name binds to (any naming scheme), -2 for
 * in_proj_weight, -3 for in_proj_bias, -1 for none. */
int attnc_bindings_lookup_name(const char *name);
/* The outputs besides out (lse, attn) bound and of the right shape, for the spec's keys. */
attnc_status attnc_bindings_check_outputs(attnc_bindings *b, attnc_error *err);
/* The resolved named dims of bindings (after attnc_output_shape). */
const int64_t *attnc_bindings_dims(const attnc_bindings *b);
/* "(2, 3)": a shape for messages. */
void attnc_bindings_shape_text(const int64_t *dims, int rank, char *buf, size_t n);
/* ATTNC_OK, or ATTNC_EBIND when t's data is not aligned to its element size. */
attnc_status attnc_bindings_check_aligned(const char *what, const attnc_tensor *t, attnc_error *err);

/* pool.c: run fn(ctx, item, thread) for item in [0, items) on up to
 * nthreads threads (thread 0 is the caller); returns when all are done. */
typedef void (*attnc_pool_fn)(void *ctx, long item, int thread);
void attnc_pool_run(int nthreads, long items, attnc_pool_fn fn, void *ctx);
/* ATTNC_THREADS, else the number of online CPUs. */
int attnc_pool_default_threads(void);

/* The tensor bound to a slot (after attnc_output_shape), or NULL; the mask as bytes. */
const attnc_tensor *attnc_bindings_slot(const attnc_bindings *b, int slot);
const unsigned char *attnc_bindings_mask_u8(const attnc_bindings *b);

/* Slot names for messages ("x", "wq", ...). */
const char *attnc_slot_name(int slot);
/* The dtype a kernel reads slot in: the weight matrices in g->wdtype, their
 * scales in F32, the mask as U8, the rest in g->dtype. */
attnc_dtype attnc_slot_dtype(const attnc_gen *g, int slot);
/* What the spec stores a slot as, where that is narrower than what the
 * kernel holds (a weight matrix of dtype=f64 weights=f32|bf16|f16, or of
 * a train spec with weights narrower than dtype): a tensor bound in
 * another dtype is rounded to it first, then widened exactly */
attnc_dtype attnc_slot_store_dtype(const attnc_gen *g, int slot);
/* 1 for the weight matrix slots (WQ, WK, WV, WG, WO); their scale slot. */
int attnc_slot_is_matrix(int slot);
/* 1 for the weights, biases and int8 weight scales (WQ .. WO_SCALE). */
int attnc_slot_is_weight(int slot);
/* 1 for the slots a kernel writes in place (K_CACHE, V_CACHE and their
 * int8 scales); 2 for CACHE_LEN. */
int attnc_slot_is_cache(int slot);
int attnc_slot_scale(int slot);

#endif
