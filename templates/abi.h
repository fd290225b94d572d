/* The calling convention shared by every generated kernel and the runtime.
 *
 * A kernel runs in ATTNC_PHASES phases (0 widen 16-bit inputs to f32,
 * 1 project, 2 rotate q and k (RoPE), 3 attend, 4 combine the key splits,
 * 5 gate and output projection, 6 narrow the output to 16 bits); each
 * phase has a number of
 * independent work items, and NAME_phase(args, phase, begin, end, thread)
 * runs items [begin, end).  The runtime spreads items
 * over its threads with a barrier between phases; NAME_run(args) runs
 * everything on the calling thread.  Item counts depend only on shapes, so
 * results are the same for any thread count. */
#ifndef ATTNC_ABI_V3
#define ATTNC_ABI_V3
/* The one list of each fact the generator, the generated code and the
 * runtime share, as ENTRY(NAME, key): the C name, and the word the spec and
 * the generator use (gen/emit.lua reads these lists from this file). */

/* The tensors a kernel may read, in slot order (the _SCALE slots: the F32
 * per-output-row scales of int8 weights, weights=int8; Q_POS and K_POS:
 * explicit positions, dense int64 (batch elements, S), NULL for the
 * defaults; the cache slots, spec key cache: k_cache and v_cache dense
 * (batch elements, G, CAP, c) in kv_dtype and their int8 scales F32
 * (batch elements, G, CAP), which the kernel writes in place, and
 * cache_len dense int64 (batch elements), which the runtime has checked:
 * 0 <= cache_len[b] and cache_len[b] + Sq <= CAP). */
#define ATTNC_SLOT_LIST(ENTRY) \
  ENTRY(X, x) ENTRY(KV, kv) ENTRY(BIAS, bias) ENTRY(MASK, mask) ENTRY(Q, q) ENTRY(K, k) ENTRY(V, v) ENTRY(SINKS, sinks) \
  ENTRY(ROPE_FREQS, rope_freqs) ENTRY(Q_POS, q_pos) ENTRY(K_POS, k_pos) \
  ENTRY(WQ, wq) ENTRY(BQ, bq) ENTRY(WK, wk) ENTRY(BK, bk) ENTRY(WV, wv) ENTRY(BV, bv) \
  ENTRY(WG, wg) ENTRY(BG, bg) ENTRY(WO, wo) ENTRY(BO, bo) \
  ENTRY(WQ_SCALE, wq_scale) ENTRY(WK_SCALE, wk_scale) ENTRY(WV_SCALE, wv_scale) ENTRY(WG_SCALE, wg_scale) \
  ENTRY(WO_SCALE, wo_scale) \
  ENTRY(K_CACHE, k_cache) ENTRY(V_CACHE, v_cache) ENTRY(CACHE_LEN, cache_len) ENTRY(K_CACHE_SCALE, k_cache_scale) \
  ENTRY(V_CACHE_SCALE, v_cache_scale)
/* The slots that have a gradient (spec key train): every tensor but the
 * mask, positions, rope_freqs, caches and int8 scales. */
#define ATTNC_GRAD_SLOT_LIST(ENTRY) \
  ENTRY(X) ENTRY(KV) ENTRY(BIAS) ENTRY(Q) ENTRY(K) ENTRY(V) ENTRY(SINKS) \
  ENTRY(WQ) ENTRY(BQ) ENTRY(WK) ENTRY(BK) ENTRY(WV) ENTRY(BV) ENTRY(WG) ENTRY(BG) ENTRY(WO) ENTRY(BO)
/* What a query that sees no key gets (spec key empty_rows): a zero output,
 * uniform weights over every key (the mean of v), or NaN. */
#define ATTNC_EMPTY_ROWS_LIST(ENTRY) ENTRY(ZERO, zero) ENTRY(UNIFORM, uniform) ENTRY(NAN, nan)
/* Which keys a causal mask leaves (spec key causal). */
#define ATTNC_CAUSAL_LIST(ENTRY) ENTRY(NONE, none) ENTRY(TOP_LEFT, top_left) ENTRY(BOTTOM_RIGHT, bottom_right)

#define ATTNC_SLOT_ENUM_(name, key) ATTNC_SLOT_##name,
#define ATTNC_EMPTY_ENUM_(name, key) ATTNC_EMPTY_##name,
#define ATTNC_CAUSAL_ENUM_(name, key) ATTNC_CAUSAL_##name,
enum attnc_slot { ATTNC_SLOT_LIST(ATTNC_SLOT_ENUM_) ATTNC_SLOT_COUNT };
enum attnc_empty_rows { ATTNC_EMPTY_ROWS_LIST(ATTNC_EMPTY_ENUM_) ATTNC_EMPTY_COUNT };
enum attnc_causal { ATTNC_CAUSAL_LIST(ATTNC_CAUSAL_ENUM_) ATTNC_CAUSAL_COUNT };
/* How a KV cache's (or a 16-bit kernel's k and v) elements are stored,
 * for attnc_prims.attend_kv: bf16 (the top half of an f32), int8 with one
 * f32 scale per row of c, or f16 (IEEE binary16).  BF16_ROUND: bf16, read
 * by a dtype=bf16 kernel, whose attention may round q and p to bf16 as
 * well (as attend_bf16; products summed in f32, the softmax in f32), where
 * an f32 kernel's bf16 cache (BF16) keeps them f32. */
enum attnc_kv_type { ATTNC_KV_BF16 = 1, ATTNC_KV_INT8 = 2, ATTNC_KV_F16 = 3, ATTNC_KV_BF16_ROUND = 4 };
#define ATTNC_ABI_MAX_RANK 8
#define ATTNC_PHASES 7 /* widen, project, rotate, attend, combine, gate and output, narrow */

/* One tile of flash attention: `rows` query rows against keys
 * [k_begin, k_end).  Row r is query position i = i0 + r / q_group of head
 * offset hh = r % q_group (the heads that share one kv head).  Key j is
 * visible to position i iff i + lo_off <= j (when has_lo), j <= i + hi_off
 * (when has_hi), and mask[j * mask_j] != 0 (when mask). */
typedef struct attnc_tile {
  const float *q; long q_stride, q_hstride, q_group;
  const float *k; long k_stride;
  const float *v; long v_stride;
  float *o; long o_stride, o_hstride;
  long rows, i0, c, nk, k_begin, k_end;
  float scale;
  const float *bias; long bias_h, bias_i, bias_j; /* + hh*bias_h + i*bias_i + j*bias_j */
  const unsigned char *mask; long mask_j;
  int has_lo, has_hi; long lo_off, hi_off;
  int empty_rows;       /* enum attnc_empty_rows (uniform: the mean of v over all nk keys) */
  float *m_out, *l_out; /* non-NULL: write unnormalised o with row max m and sum l (a key split) */
  float *work;          /* attend_work(rows, c) floats, 64-byte aligned */
  /* score modifiers and the lse output: the attend primitives take the
   * softcap; a spec with any of the rest runs its attention in the C loops,
   * or finishes the primitive's key-split rows itself (gen/plan.lua) */
  float softcap;        /* > 0: s = softcap * tanh(s / softcap), after the scale, before bias and masks */
  const float *slope;   /* ALiBi: head hh adds slope[hh] * (j - (i + pos_off)); or NULL */
  long pos_off;         /* query position i + pos_off, key position j (without q_pos, k_pos) */
  const long long *qpos, *kpos; /* explicit positions of this batch element's queries and keys, or NULL */
  const float *sink;    /* sinks: head hh's sink logit at sink[hh]; or NULL */
  float *lse;           /* row r's log-sum-exp at lse[hh * lse_h + r / q_group]; or NULL */
  long lse_h;
  float *attn;          /* row r's weights at attn + hh * attn_h + (r / q_group) * attn_ld; or NULL */
  long attn_h, attn_ld; /* attn_ld >= nk: the columns from nk on are written 0 (a KV cache's unfilled positions) */
  unsigned long long seed; /* dropout (spec key dropout, the C loops only): the seed, */
  long batch, head0;       /* the batch element, and the query head of row r % q_group == 0 */
  /* attend_pack only (others ignore them): where it leaves a contiguous
   * copy of the keys and values it reads, key j's c floats at k_pack + j * c
   * and v_pack + j * c, for every j in [k_begin, k_end) */
  float *k_pack, *v_pack;
} attnc_tile;

/* Vectorised routines compiled with the library (run-time CPU dispatch). */
typedef struct attnc_prims {
  int abi;
  const char *isa;
  /* y[r][n] = sum_k x[r][k] W[n][k] + b[n], W packed by pack(); strides in floats */
  void (*linear)(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                 const float *b, float *y, long y_stride);
  void (*attend)(const attnc_tile *t);
  long (*attend_work)(long rows, long c);
  /* merge n key splits of `rows` rows: o_part[s][r][c], m[s][r], l[s][r] -> o rows */
  void (*combine)(const attnc_tile *t, long splits, const float *o_part, const float *m, const float *l);
  /* o[i] *= sigmoid(g[i]) */
  void (*sigmoid_mul)(const float *g, float *o, long n);
  /* linear with head-major output: column n (column col0 + n of the
   * weight, col0 and head_w multiples of 32; packed and b start at col0)
   * goes to y + ((col0 + n) / head_w) * head_stride + (col0 + n) % head_w */
  void (*linear_heads)(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                       const float *b, float *y, long y_stride, long col0, long head_w, long head_stride);
  /* linear's packing of an (n_out, n_in) weight into pack_size floats, 64-byte aligned (the runtime packs
   * bound weights) */
  long (*pack_size)(long n_out, long n_in);
  void (*pack)(const float *w, long n_out, long n_in, float *packed);
  /* linear and linear_heads over int8 weights kept int8 (spec key
   * weights=int8): W as I8 rows with one f32 scale each (w = q * scale),
   * packed by the runtime with pack_q8 in panels of 32 outputs, panel p at
   * p * ATTNC_Q8_PANEL(n_in) bytes: its 32 scales, then the 32 outputs'
   * weights as these primitives read them (pack_q8).  Columns n0 on (n0 a
   * multiple of 32) start at panel n0 / 32. */
  void (*linear_q8)(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                    const float *b, float *y, long y_stride);
  void (*linear_heads_q8)(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                          const float *b, float *y, long y_stride, long col0, long head_w, long head_stride);
  /* linear and linear_heads over bf16 weights kept bf16, for kernels
   * whose activations are bf16 (dtype=bf16 with bf16 weights): x's values
   * may be rounded to bf16 (exact for a widened bf16 input), products are
   * summed in f32.  W packed by the runtime in panels of 32 outputs, panel
   * p at p * ATTNC_BF16_PANEL(n_in) bytes: for each pair of inputs 2kk,
   * 2kk + 1 (n_in rounded up to 32, zero past it) the 32 outputs' two
   * weights side by side, W[n][2kk] then W[n][2kk + 1] (AMX's B tiles). */
  void (*linear_bf16)(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                      const float *b, float *y, long y_stride);
  void (*linear_heads_bf16)(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                            const float *b, float *y, long y_stride, long col0, long head_w, long head_stride);
  /* a bf16 or f16 kernel's conversions (phase 0 and 6): dst[e] = src[e]
   * widened to f32 (exact), or src[e] rounded to 16 bits to nearest with
   * ties to even (NaN stays NaN, f16 overflows to infinity), for n
   * elements; f16: 1 for f16, 0 for bf16 */
  void (*widen16)(int f16, const void *src, float *dst, long n);
  void (*narrow16)(int f16, const float *src, void *dst, long n);
  /* attend for a dtype=bf16 kernel: q, k, v and p may be rounded to bf16
   * (AMX-BF16 tiles where the CPU has them), the rest as attend */
  void (*attend_bf16)(const attnc_tile *t);
  /* attend with the keys and values read from a KV cache stored as
   * kv_type (enum attnc_kv_type), widened to f32 as they are read: key j
   * at k + j * t->k_stride elements (int8: times k_scale[j]), value j
   * likewise from v, v_stride and v_scale; t->k and t->v are not read.
   * Tiles of at most 16 rows, empty_rows zero or nan (uniform would need
   * v widened whole).  NULL: the kernel widens the rows itself. */
  void (*attend_kv)(const attnc_tile *t, int kv_type, const void *k, const float *k_scale, const void *v,
                    const float *v_scale);
  /* the rows a dtype=bf16 kernel's attention tiles should have (at most
   * 256; 0: its own choice): AMX converts each tile's k and v once, so more
   * rows share the conversion */
  long attend_bf16_rows;
  /* c (m x n) = a (m x k) b (k x n), plus c's old values when acc: a[i][p] at a[i * a_rs + p * a_cs] (so
   * either operand order), b[p][j] at b[p * ldb + j], c[i][j] at c[i * ldc + j].  Each c[i][j] is one
   * chain of multiply-adds over p in order, so its bits do not depend on m or n (a backward's tiles) */
  void (*matmul)(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb, float *c,
                 long ldc, int acc);
  /* attend, also copying k's and v's rows into t->k_pack and t->v_pack
   * (attnc_tile) as it streams them, so that a kernel whose keys are far
   * apart (layout bshc) gets its contiguous copy of a kv head without a
   * pass of its own that would wait on memory.  NULL: the kernel copies. */
  void (*attend_pack)(const attnc_tile *t);
  /* 1 when linear_q8 and linear_heads_q8 prepare x afresh at every call
   * (quantise its rows): a kernel should then project whole rows for all
   * heads in one call rather than one kv head's columns at a time, which
   * would prepare each row once per head and projection */
  int q8_by_rows;
  /* linear_q8's packing of an (n_out, n_in) int8 weight and its scales,
   * into the panels linear_q8 says (ATTNC_Q8_PANEL(n_in) bytes each,
   * 64-byte aligned; the runtime packs bound weights).  The bytes after
   * each panel's scales are the primitives' own: for each k its 32
   * outputs' int8 weights side by side (zero past n_out), or, with
   * AVX512-VNNI, grouped for its dot product */
  void (*pack_q8)(const signed char *q, const float *scale, long n_out, long n_in, void *packed);
  /* With q8_by_rows, x's rows prepared once for several linear_heads_q8
   * (a kernel's q, k and v of one head after another): q8_quantise writes
   * rows of x to xq, q8_row_bytes(n_in) bytes a row (the primitives' own
   * form), rows xq_stride bytes apart; linear_heads_q8_xq is
   * linear_heads_q8 on the rows so prepared (x is read again only for a
   * row holding a NaN or an infinity).  NULL otherwise */
  long (*q8_row_bytes)(long n_in);
  void (*q8_quantise)(const float *x, long rows, long x_stride, long n_in, void *xq, long xq_stride);
  void (*linear_heads_q8_xq)(const void *xq, long xq_stride, const float *x, long rows, long x_stride, long n_in,
                             const void *packed, long n_out, const float *b, float *y, long y_stride, long col0,
                             long head_w, long head_stride);
} attnc_prims;
/* bytes of one bf16 panel (linear_bf16): 32 outputs x n_in rounded up to 32, two bytes each */
#define ATTNC_BF16_PANEL(n_in) (64L * (((n_in) + 31) / 32 * 32))
/* bytes of one int8 panel (linear_q8): 32 f32 scales and 32 x n_in int8, whole cache lines */
#define ATTNC_Q8_PANEL(n_in) ((32L * 4 + 32L * (n_in) + 63) / 64 * 64)

typedef struct attnc_args {
  const long *dims;                     /* sizes of the named dims, in NAME_dim_names order */
  const void *t[ATTNC_SLOT_COUNT];      /* tensors by slot, dense row-major; mask is unsigned char */
  long mask_stride[ATTNC_ABI_MAX_RANK]; /* mask element stride per batch axis (0 broadcasts), then Sk's */
  void *out;                            /* the output, dense row-major */
  const attnc_prims *prims;             /* NULL: plain C loops only */
  const float *packed[ATTNC_SLOT_COUNT];/* weights packed for the primitives, or NULL (a bf16 kernel's run: for
                                         * prims->linear_bf16; NAME_backward of any kernel: for prims->linear) */
  void *scratch;                        /* NAME_scratch_bytes(args, nthreads) bytes (the kernel aligns it) */
  long nthreads;                        /* per-thread scratch regions in scratch (at least 1) */
  float *lse;                           /* spec key lse: (batch axes..., H, Sq) F32, else unused */
  float *attn;                          /* spec key weights_out: (batch axes..., H, Sq, Sk) F32, else unused */
  /* Training (spec key train).  seed: the dropout seed (spec key dropout)
   * of every run.  NAME_backward(args) runs the forward again, writing out
   * (and lse, attn where those pointers are set), then reads dout (the
   * gradient of out, like out) and overwrites grad[slot] for every
   * differentiable slot the kernel reads (ATTNC_GRAD_SLOT_LIST): dense, the
   * tensor's shape, the kernel's element type.  It runs on the calling
   * thread (its items on args->parallel's threads, below) and returns 0,
   * or 1 when memory runs out. */
  unsigned long long seed;
  const void *dout;
  void *grad[ATTNC_SLOT_COUNT];
  /* The fast form's NAME_backward runs its passes' items through this:
   * parallel(pool, items, fn, ctx) calls fn(ctx, item) once for every
   * item in [0, items), on any threads, and returns when all are done.
   * Each item writes only its own outputs, in a fixed order, so the
   * gradients do not depend on it.  NULL: the items run in order. */
  void (*parallel)(void *pool, long items, void (*fn)(void *ctx, long item), void *ctx);
  void *pool;
  /* The fast form's NAME_backward carves its own buffers from this, when
   * set: NAME_backward_bytes(args) bytes, 64-byte aligned, which the
   * caller keeps from one call to the next (so that their pages stay
   * mapped); NULL: it allocates and frees them. */
  void *grad_work;
} attnc_args;
#endif
