/* Vectorised primitives that generated kernels call through attnc_prims.
 * prims.c holds portable versions and the dispatcher; prims_avx512.c the
 * AVX-512 versions and prims_avx2.c the AVX2 + FMA ones, chosen at run
 * time by what the CPU has. */
#ifndef ATTNC_PRIMS_H
#define ATTNC_PRIMS_H

#include "internal.h"

#define ATTNC_PACK_NR 32   /* output features per packed panel */
#define ATTNC_ATTEND_KT 64 /* keys per attention tile */

/* The table for this CPU (never NULL). */
const attnc_prims *attnc_prims_get(void);
/* Floats needed to pack an (n_out, n_in) weight. */
long attnc_prims_pack_size(long n_out, long n_in);
/* Pack W (n_out, n_in) for this CPU's linear (attnc_prims_get()): panels of
 * ATTNC_PACK_NR outputs, panel p at p*NR*n_in (zero padded), laid out as
 * pack32 or pack16 says. */
void attnc_prims_pack(const float *w, long n_out, long n_in, float *packed);
/* The generic and AVX-512 layout: panel p holds, for each k,
 * W[p*NR + 0..NR-1][k] contiguously. */
void attnc_prims_pack32(const float *w, long n_out, long n_in, float *packed);
/* The AVX2 layout: panel p holds two halves of 16 outputs one after the
 * other, each with W[p*NR + h*16 + 0..15][k] contiguously for each k, so
 * a 16-wide register block streams one contiguous half. */
void attnc_prims_pack16(const float *w, long n_out, long n_in, float *packed);

/* The row-across-lanes attention of prims_avx2.c and prims_avx512.c works
 * in base 2: scores are scaled by log2(e) with the queries (and biases as
 * they are added), so each probability is 2^(s - m), with no
 * multiplication by log2(e) and no two-part reduction by ln 2.  2^r on
 * |r| <= 1/2 is P0 + r (P1 + r (P2 + r (P3 + r (P4 + r P5)))), a degree-5
 * polynomial fitted to relative error (2.3e-7 at most, evaluated in
 * float). */
#define ATTNC_LOG2E 1.44269504088896341f
#define ATTNC_LN2 0.693147180559945309f
#define ATTNC_EXP2_P0 1.0000001192092896f
#define ATTNC_EXP2_P1 6.931469440460205e-1f
#define ATTNC_EXP2_P2 2.4022120237350464e-1f
#define ATTNC_EXP2_P3 5.550713464617729e-2f
#define ATTNC_EXP2_P4 9.675540961325169e-3f
#define ATTNC_EXP2_P5 1.3276470126584172e-3f
/* 2^r on [0, 1], the same degree (prims_avx512.c, which takes r = x -
 * floor(x)): 1.5e-7 relative error at most, evaluated in float;
 * fitted and checked by tools/fit_exp2.py */
#define ATTNC_EXP2F_P0 9.9999994040e-01f
#define ATTNC_EXP2F_P1 6.9315308332e-01f
#define ATTNC_EXP2F_P2 2.4015359581e-01f
#define ATTNC_EXP2F_P3 5.5826336145e-02f
#define ATTNC_EXP2F_P4 8.9893424883e-03f
#define ATTNC_EXP2F_P5 1.8775672652e-03f

/* tanh for the softcap (s = cap * tanh(s / cap)) in the vector attends:
 * below |x| = ATTNC_TANH_SMALL its Taylor series to x^11, x + x^3 (T3 +
 * x^2 (T5 + x^2 (T7 + x^2 (T9 + x^2 T11)))), whose first omitted term is
 * under 1e-8 of tanh there; above, (1 - e) / (1 + e) with e = e^(-2|x|)
 * and x's sign, where 1 - e >= 0.46 loses no accuracy to cancellation. */
#define ATTNC_TANH_SMALL 0.3125f
#define ATTNC_TANH_T3 (-3.33333333333333333e-1f)
#define ATTNC_TANH_T5 1.33333333333333333e-1f
#define ATTNC_TANH_T7 (-5.39682539682539683e-2f)
#define ATTNC_TANH_T9 2.18694885361552028e-2f
#define ATTNC_TANH_T11 (-8.86323552990219657e-3f)

/* Bytes of an (n_out, n_in) int8 weight packed for linear_q8, and the
 * packing: q (n_out, n_in) I8, scale (n_out) F32, into panels as
 * attnc_prims.linear_q8 says (templates/abi.h), 64-byte aligned. */
long attnc_prims_pack_q8_size(long n_out, long n_in);
void attnc_prims_pack_q8(const signed char *q, const float *scale, long n_out, long n_in, void *packed);
/* linear_heads_q8 for every ISA: one linear_q8 per head the columns span */
void attnc_prims_linear_heads_q8(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                 const float *b, float *y, long y_stride, long col0, long head_w, long head_stride);
void attnc_prims_linear_q8_generic(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                   const float *b, float *y, long y_stride);

/* Bytes of an (n_out, n_in) bf16 weight packed for linear_bf16, and the
 * packing of w (n_out, n_in) bf16 bits, as attnc_prims.linear_bf16 says. */
long attnc_prims_pack_bf16_size(long n_out, long n_in);
void attnc_prims_pack_bf16(const unsigned short *w, long n_out, long n_in, void *packed);
void attnc_prims_linear_heads_bf16(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                   const float *b, float *y, long y_stride, long col0, long head_w, long head_stride);
void attnc_prims_linear_bf16_generic(const float *x, long rows, long x_stride, long n_in, const void *packed,
                                     long n_out, const float *b, float *y, long y_stride);
/* AMX (prims_amx.c): 1 when the CPU has AMX-BF16 and the kernel lets this
 * process use its tiles (asked once) */
int attnc_prims_amx_ready(void);

/* widen16 and narrow16 (attnc_prims), one element at a time */
void attnc_prims_widen16_generic(int f16, const void *src, float *dst, long n);
void attnc_prims_narrow16_generic(int f16, const float *src, void *dst, long n);

/* shared by the implementations */
void attnc_prims_linear_generic(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                                const float *b, float *y, long y_stride);
void attnc_prims_attend_generic(const attnc_tile *t);
long attnc_prims_attend_work(long rows, long c);
/* attend_kv (abi.h): the portable version, and element d of a cache row as f32 (int8: unscaled) */
void attnc_prims_attend_kv_generic(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                   const void *v, const float *v_scale);
float attnc_prims_kv_elem(int kv_type, const void *row, long d);
/* one bf16 (f16 0) or f16 (f16 1) value as f32, exactly */
float attnc_prims_widen1(int f16, unsigned short h);
void attnc_prims_combine_generic(const attnc_tile *t, long splits, const float *o_part, const float *m, const float *l);
void attnc_prims_sigmoid_mul_generic(const float *g, float *o, long n);
void attnc_prims_linear_heads_generic(const float *x, long rows, long x_stride, long n_in, const float *packed,
                                      long n_out, const float *b, float *y, long y_stride, long col0, long head_w,
                                      long head_stride);
/* Rows r0 .. r0 + n - 1 of a tile's q (or o): row r at base + (r /
 * q_group) * stride + (r % q_group) * hstride, NULL past t->rows.  One
 * division for the lot, not a 64-bit idiv per row and 16-float block. */
static inline void attnc_prims_row_ptrs(const attnc_tile *t, const float *base, long stride, long hstride, long r0,
                                        int n, const float **out)
{
  long i = r0 / t->q_group, hh = r0 % t->q_group;
  int u;
  for (u = 0; u < n; u++) {
    out[u] = r0 + u < t->rows ? base + i * stride + hh * hstride : (const float *)0;
    if (++hh == t->q_group) {
      hh = 0;
      i++;
    }
  }
}

/* Visible key range of query position i (t->i0 + a tile row / q_group):
 * [lo, hi] (empty when lo > hi). */
static inline void attnc_prims_pos_range(const attnc_tile *t, long i, long *lo, long *hi)
{
  long a = t->k_begin, b = t->k_end - 1;
  if (t->has_lo && i + t->lo_off > a) a = i + t->lo_off;
  if (t->has_hi && i + t->hi_off < b) b = i + t->hi_off;
  *lo = a;
  *hi = b;
}

/* Visible key range of tile row r. */
static inline void attnc_prims_row_range(const attnc_tile *t, long r, long *lo, long *hi)
{
  attnc_prims_pos_range(t, t->i0 + r / t->q_group, lo, hi);
}

/* The row-across-lanes attention (attend_rows, AVX-512 and AVX2): for each
 * of the r_pad lanes (rows, then padding), its visible key range LO..HI
 * (padding: none), bias offset BO (when there is a bias), running max
 * M = -inf and sum L = 0; O's rows zeroed (cp floats each; O = NULL:
 * none, the caller lays O out otherwise); and over the
 * real rows the keys any row sees (jmin..jmax) and those every row sees
 * (lo_max..hi_min). */
void attnc_prims_rows_begin(const attnc_tile *t, long r_pad, float *O, long cp, int *LO, int *HI, int *BO, float *M,
                            float *L, long *jmin, long *jmax, long *lo_max, long *hi_min);
/* attend_rows keeps key positions and bias offsets in 32-bit lanes: 1 if they fit */
int attnc_prims_fits_lanes(const attnc_tile *t);

/* the empty-row rule for row r (o_row is where the result goes) */
void attnc_prims_empty_row(const attnc_tile *t, long r, float *o_row);

void attnc_prims_matmul_generic(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb,
                                float *c, long ldc, int acc);

#if defined(__x86_64__) || defined(__i386__)
void attnc_prims_linear_avx512(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                               const float *b, float *y, long y_stride);
void attnc_prims_attend_avx512(const attnc_tile *t);
void attnc_prims_attend_pack_avx512(const attnc_tile *t);
void attnc_prims_sigmoid_mul_avx512(const float *g, float *o, long n);
void attnc_prims_attend_kv_avx512(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                  const void *v, const float *v_scale);
/* attend_kv_avx512, with a bf16 kernel's tiles (ATTNC_KV_BF16_ROUND, c a
 * multiple of 32) on vdpbf16ps: for CPUs with AVX512-BF16 only */
void attnc_prims_attend_kv_bf16dp(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                  const void *v, const float *v_scale);
void attnc_prims_linear_heads_avx512(const float *x, long rows, long x_stride, long n_in, const float *packed,
                                     long n_out, const float *b, float *y, long y_stride, long col0, long head_w,
                                     long head_stride);
void attnc_prims_linear_avx2(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                             const float *b, float *y, long y_stride);
void attnc_prims_linear_q8_avx512(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                  const float *b, float *y, long y_stride);
void attnc_prims_linear_bf16_avx512(const float *x, long rows, long x_stride, long n_in, const void *packed,
                                    long n_out, const float *b, float *y, long y_stride);
void attnc_prims_linear_bf16_amx(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                 const float *b, float *y, long y_stride);
void attnc_prims_attend_bf16_amx(const attnc_tile *t);
/* AVX512-BF16 without AMX (prims_bf16.c): 1 when the CPU has AVX512-BF16 */
int attnc_prims_bf16_ready(void);
void attnc_prims_linear_bf16_dp(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                const float *b, float *y, long y_stride);
void attnc_prims_attend_bf16_dp(const attnc_tile *t);
/* AVX512-VNNI without AMX (prims_vnni.c): 1 when the CPU has AVX512-VNNI */
int attnc_prims_vnni_ready(void);
void attnc_prims_linear_q8_vnni(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                const float *b, float *y, long y_stride);
/* linear_q8_vnni's packing (the table's pack_q8 with it): panels of
 * ATTNC_Q8_PANEL(n_in) bytes, each its 32 scales, then, when n_in is a
 * multiple of 4 up to 16384, the weights + 128 regrouped for vpdpbusd
 * (for each 4 inputs, the 32 outputs' 4 weights side by side); other
 * widths as attnc_prims_pack_q8 */
void attnc_prims_pack_q8_vnni(const signed char *q, const float *scale, long n_out, long n_in, void *packed);
/* the table's q8_row_bytes, q8_quantise and linear_heads_q8_xq with AVX512-VNNI */
long attnc_prims_q8_row_bytes_vnni(long n_in);
void attnc_prims_q8_quantise_vnni(const float *x, long rows, long x_stride, long n_in, void *xq, long xq_stride);
void attnc_prims_linear_heads_q8_xq_vnni(const void *xq, long xq_stride, const float *x, long rows, long x_stride,
                                         long n_in, const void *packed, long n_out, const float *b, float *y,
                                         long y_stride, long col0, long head_w, long head_stride);
/* linear_heads_q8 quantising each row of x once for all its heads */
void attnc_prims_linear_heads_q8_vnni(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                      const float *b, float *y, long y_stride, long col0, long head_w, long head_stride);
void attnc_prims_linear_bf16_avx2(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                  const float *b, float *y, long y_stride);
void attnc_prims_widen16_avx512(int f16, const void *src, float *dst, long n);
void attnc_prims_narrow16_avx512(int f16, const float *src, void *dst, long n);
void attnc_prims_widen16_avx2(int f16, const void *src, float *dst, long n);
void attnc_prims_narrow16_avx2(int f16, const float *src, void *dst, long n);
void attnc_prims_linear_q8_avx2(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                const float *b, float *y, long y_stride);
void attnc_prims_attend_avx2(const attnc_tile *t);
void attnc_prims_sigmoid_mul_avx2(const float *g, float *o, long n);
void attnc_prims_attend_kv_avx2(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                const void *v, const float *v_scale);
void attnc_prims_linear_heads_avx2(const float *x, long rows, long x_stride, long n_in, const float *packed,
                                   long n_out, const float *b, float *y, long y_stride, long col0, long head_w,
                                   long head_stride);
void attnc_prims_matmul_avx512(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb,
                               float *c, long ldc, int acc);
void attnc_prims_matmul_avx2(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb,
                             float *c, long ldc, int acc);
#endif

#endif
