/* Portable primitives and the run-time dispatcher.  The portable versions
 * follow the same algorithms as the AVX-512 and AVX2 ones (packed GEMM, flash
 * attention with an online softmax over key tiles), so every path shares
 * one structure and one set of tests. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "prims.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

long attnc_prims_pack_size(long n_out, long n_in)
{
  long panels = (n_out + ATTNC_PACK_NR - 1) / ATTNC_PACK_NR;
  return panels * ATTNC_PACK_NR * n_in;
}

/* Panels of ATTNC_PACK_NR outputs; inside a panel, for each input k,
 * `width` outputs side by side, and ATTNC_PACK_NR / width such strips one
 * after the other (width 32: one strip; 16: two halves of n_in rows). */
static void pack_strips(const float *w, long n_out, long n_in, long width, float *packed)
{
  long p, s, k, j, panels = (n_out + ATTNC_PACK_NR - 1) / ATTNC_PACK_NR;
  for (p = 0; p < panels; p++)
    for (s = 0; s < ATTNC_PACK_NR / width; s++) {
      float *dst = packed + p * ATTNC_PACK_NR * n_in + s * width * n_in;
      for (k = 0; k < n_in; k++)
        for (j = 0; j < width; j++) {
          long n = p * ATTNC_PACK_NR + s * width + j;
          dst[k * width + j] = n < n_out ? w[n * n_in + k] : 0.0f;
        }
    }
}

void attnc_prims_pack32(const float *w, long n_out, long n_in, float *packed)
{
  pack_strips(w, n_out, n_in, ATTNC_PACK_NR, packed);
}

void attnc_prims_pack16(const float *w, long n_out, long n_in, float *packed)
{
  pack_strips(w, n_out, n_in, 16, packed);
}

void attnc_prims_pack(const float *w, long n_out, long n_in, float *packed)
{
  if (attnc_prims_get()->linear == attnc_prims_linear_avx2) attnc_prims_pack16(w, n_out, n_in, packed);
  else attnc_prims_pack32(w, n_out, n_in, packed);
}

void attnc_prims_linear_generic(const float *x, long rows, long x_stride, long n_in, const float *packed, long n_out,
                                const float *b, float *y, long y_stride)
{
  long r, p, k, j, panels = (n_out + ATTNC_PACK_NR - 1) / ATTNC_PACK_NR;
  for (r = 0; r < rows; r++) {
    const float *xr = x + r * x_stride;
    for (p = 0; p < panels; p++) {
      const float *w = packed + p * ATTNC_PACK_NR * n_in;
      float acc[ATTNC_PACK_NR];
      long nv = n_out - p * ATTNC_PACK_NR;
      if (nv > ATTNC_PACK_NR) nv = ATTNC_PACK_NR;
      for (j = 0; j < ATTNC_PACK_NR; j++) acc[j] = 0;
      for (k = 0; k < n_in; k++)
        for (j = 0; j < ATTNC_PACK_NR; j++) acc[j] += xr[k] * w[k * ATTNC_PACK_NR + j];
      for (j = 0; j < nv; j++) y[r * y_stride + p * ATTNC_PACK_NR + j] = acc[j] + (b ? b[p * ATTNC_PACK_NR + j] : 0.0f);
    }
  }
}

static long round16(long n) { return (n + 15) & ~15L; }

/* work: O (rows x cp), m, l (rows each), S (rows x KT), Kt (cp x KT), Q (rows x cp) */
long attnc_prims_attend_work(long rows, long c)
{
  long cp = round16(c), r16 = round16(rows);
  /* the larger of the two AVX-512 layouts (attend_cols: O, M, L, S, Kt, Q;
   * attend_rows: O, QT, ST, M, L, A, LO, HI, BO, MX), the AVX2 one (those
   * of attend_rows, then TS) and the generic one; and room for AMX's
   * attend_cols16 (prims_amx.c), whose k and v take 128 keys at a time */
  return r16 * cp + 8 * r16 + r16 * ATTNC_ATTEND_KT + cp * ATTNC_ATTEND_KT + r16 * cp + 64 + 64 * cp + 2048;
}

void attnc_prims_empty_row(const attnc_tile *t, long r, float *o_row)
{
  long d, j;
  if (t->empty_rows == ATTNC_EMPTY_UNIFORM) {
    long hh = r % t->q_group;
    (void)hh;
    for (d = 0; d < t->c; d++) o_row[d] = 0;
    for (j = 0; j < t->nk; j++)
      for (d = 0; d < t->c; d++) o_row[d] += t->v[j * t->v_stride + d] / (float)t->nk;
  } else {
    float val = 0.0f;
    if (t->empty_rows == ATTNC_EMPTY_NAN) {
      union { unsigned u; float f; } nan_bits;
      nan_bits.u = 0x7fc00000u;
      val = nan_bits.f;
    }
    for (d = 0; d < t->c; d++) o_row[d] = val;
  }
}

void attnc_prims_rows_begin(const attnc_tile *t, long r_pad, float *O, long cp, int *LO, int *HI, int *BO, float *M,
                            float *L, long *jmin, long *jmax, long *lo_max, long *hi_min)
{
  long r, i = 0, hh = 0; /* row r is position t->i0 + i of head hh of the group: r = i * q_group + hh */
  *jmin = t->k_end;
  *jmax = t->k_begin - 1;
  *lo_max = t->k_begin;
  *hi_min = t->k_end - 1;
  if (O) memset(O, 0, sizeof(float) * cp * t->rows);
  /* i and hh step along with r: a division per row (two, with the bias
   * offset) would take a large share of a tile's set-up and finish */
  for (r = 0; r < r_pad; r++) {
    long lo = 1, hi = 0; /* padding lanes see no key */
    if (r < t->rows) {
      attnc_prims_pos_range(t, t->i0 + i, &lo, &hi);
      if (lo <= hi) {
        if (lo < *jmin) *jmin = lo;
        if (hi > *jmax) *jmax = hi;
      }
      if (lo > *lo_max) *lo_max = lo;
      if (hi < *hi_min) *hi_min = hi;
      if (t->bias) BO[r] = (int)(hh * t->bias_h + i * t->bias_i);
      if (++hh == t->q_group) {
        hh = 0;
        i++;
      }
    } else if (t->bias) {
      BO[r] = 0;
    }
    LO[r] = (int)lo;
    HI[r] = (int)hi;
    M[r] = -INFINITY;
    L[r] = 0;
  }
}

int attnc_prims_fits_lanes(const attnc_tile *t)
{
  const long big = 0x7fffffffL;
  if (t->k_end >= big) return 0;
  if (t->bias && (t->q_group * t->bias_h + (t->rows / t->q_group + 1) * t->bias_i >= big)) return 0;
  return 1;
}

static float *row_out(const attnc_tile *t, long r)
{
  return t->o + (r / t->q_group) * t->o_stride + (r % t->q_group) * t->o_hstride;
}

/* One row at a time, one key at a time: the online softmax keeps a running
 * max m, sum l and unnormalised output o, rescaled when m grows. */
void attnc_prims_attend_generic(const attnc_tile *t)
{
  long rows = t->rows, c = t->c, r, j, d;
  for (r = 0; r < rows; r++) {
    long i = t->i0 + r / t->q_group, hh = r % t->q_group, lo, hi;
    const float *q = t->q + (r / t->q_group) * t->q_stride + hh * t->q_hstride;
    float *o = row_out(t, r), m = -INFINITY, l = 0;
    attnc_prims_row_range(t, r, &lo, &hi);
    for (d = 0; d < c; d++) o[d] = 0;
    for (j = lo; j <= hi; j++) {
      const float *k = t->k + j * t->k_stride, *v = t->v + j * t->v_stride;
      float s = 0, p;
      if (t->mask && !t->mask[j * t->mask_j]) continue;
      for (d = 0; d < c; d++) s += q[d] * k[d];
      s *= t->scale;
      if (t->softcap > 0) s = t->softcap * tanhf(s / t->softcap); /* before bias and masks */
      if (t->bias) s += t->bias[hh * t->bias_h + i * t->bias_i + j * t->bias_j];
      if (s != s && m == -INFINITY) m = s; /* a NaN score: the row is NaN, not empty */
      if (s > m) {
        float alpha = expf(m - s); /* 0 when m was -inf */
        l *= alpha;
        for (d = 0; d < c; d++) o[d] *= alpha;
        m = s;
      }
      p = expf(s - m);
      l += p;
      for (d = 0; d < c; d++) o[d] += p * v[d];
    }
    if (t->m_out) {
      t->m_out[r] = m;
      t->l_out[r] = l;
    } else if (m != -INFINITY) { /* saw a key: normalise (a NaN stays NaN) */
      for (d = 0; d < c; d++) o[d] /= l;
    } else {
      attnc_prims_empty_row(t, r, o);
    }
  }
}

float attnc_prims_kv_elem(int kv_type, const void *row, long d)
{
  if (kv_type == ATTNC_KV_BF16 || kv_type == ATTNC_KV_F16)
    return attnc_prims_widen1(kv_type == ATTNC_KV_F16, ((const unsigned short *)row)[d]);
  return (float)((const signed char *)row)[d];
}

/* attend_generic's loop, each key and value element widened as it is
 * read; an int8 row's scale multiplies its dot product and its
 * probability, not each element. */
void attnc_prims_attend_kv_generic(const attnc_tile *t, int kv_type, const void *k, const float *k_scale,
                                   const void *v, const float *v_scale)
{
  const long esize = kv_type == ATTNC_KV_INT8 ? 1 : 2;
  long rows = t->rows, c = t->c, r, j, d;
  if (kv_type == ATTNC_KV_BF16_ROUND) kv_type = ATTNC_KV_BF16; /* q and p kept f32 */
  for (r = 0; r < rows; r++) {
    long i = t->i0 + r / t->q_group, hh = r % t->q_group, lo, hi;
    const float *q = t->q + (r / t->q_group) * t->q_stride + hh * t->q_hstride;
    float *o = row_out(t, r), m = -INFINITY, l = 0;
    attnc_prims_row_range(t, r, &lo, &hi);
    for (d = 0; d < c; d++) o[d] = 0;
    for (j = lo; j <= hi; j++) {
      const char *kr = (const char *)k + j * t->k_stride * esize, *vr = (const char *)v + j * t->v_stride * esize;
      float s = 0, p, pv;
      if (t->mask && !t->mask[j * t->mask_j]) continue;
      for (d = 0; d < c; d++) s += q[d] * attnc_prims_kv_elem(kv_type, kr, d);
      if (kv_type == ATTNC_KV_INT8) s *= k_scale[j];
      s *= t->scale;
      if (t->softcap > 0) s = t->softcap * tanhf(s / t->softcap); /* before bias and masks */
      if (t->bias) s += t->bias[hh * t->bias_h + i * t->bias_i + j * t->bias_j];
      if (s != s && m == -INFINITY) m = s; /* a NaN score: the row is NaN, not empty */
      if (s > m) {
        float alpha = expf(m - s); /* 0 when m was -inf */
        l *= alpha;
        for (d = 0; d < c; d++) o[d] *= alpha;
        m = s;
      }
      p = expf(s - m);
      l += p;
      pv = kv_type == ATTNC_KV_INT8 ? p * v_scale[j] : p;
      for (d = 0; d < c; d++) o[d] += pv * attnc_prims_kv_elem(kv_type, vr, d);
    }
    if (t->m_out) {
      t->m_out[r] = m;
      t->l_out[r] = l;
    } else if (m != -INFINITY) {
      for (d = 0; d < c; d++) o[d] /= l;
    } else {
      attnc_prims_empty_row(t, r, o);
    }
  }
}

void attnc_prims_combine_generic(const attnc_tile *t, long splits, const float *o_part, const float *m, const float *l)
{
  long r, s, d, rows = t->rows, c = t->c;
  for (r = 0; r < rows; r++) {
    float mx = -INFINITY, sum = 0;
    float *o = row_out(t, r);
    for (s = 0; s < splits; s++)
      if (m[s * rows + r] > mx) mx = m[s * rows + r];
    for (d = 0; d < c; d++) o[d] = 0;
    if (mx == -INFINITY) {
      attnc_prims_empty_row(t, r, o);
      continue;
    }
    for (s = 0; s < splits; s++) {
      float ms = m[s * rows + r], f;
      if (ms == -INFINITY) continue;
      f = expf(ms - mx);
      sum += l[s * rows + r] * f;
      for (d = 0; d < c; d++) o[d] += o_part[(s * rows + r) * c + d] * f;
    }
    for (d = 0; d < c; d++) o[d] /= sum;
  }
}

void attnc_prims_sigmoid_mul_generic(const float *g, float *o, long n)
{
  long i;
  for (i = 0; i < n; i++) o[i] *= 1.0f / (1.0f + expf(-g[i]));
}

/* One generic linear per head the columns span. */
void attnc_prims_linear_heads_generic(const float *x, long rows, long x_stride, long n_in, const float *packed,
                                      long n_out, const float *b, float *y, long y_stride, long col0, long head_w,
                                      long head_stride)
{
  long n = 0;
  while (n < n_out) { /* the columns of one head: whole panels, since col0 and head_w are */
    const long a = col0 + n, d = a % head_w, w = n_out - n < head_w - d ? n_out - n : head_w - d;
    attnc_prims_linear_generic(x, rows, x_stride, n_in, packed + n * n_in, w, b ? b + n : NULL,
                               y + a / head_w * head_stride + d, y_stride);
    n += w;
  }
}

long attnc_prims_pack_q8_size(long n_out, long n_in)
{
  return (n_out + ATTNC_PACK_NR - 1) / ATTNC_PACK_NR * ATTNC_Q8_PANEL(n_in);
}

void attnc_prims_pack_q8(const signed char *q, const float *scale, long n_out, long n_in, void *packed)
{
  long p, k, j, panels = (n_out + ATTNC_PACK_NR - 1) / ATTNC_PACK_NR;
  for (p = 0; p < panels; p++) {
    unsigned char *panel = (unsigned char *)packed + p * ATTNC_Q8_PANEL(n_in);
    float sc[ATTNC_PACK_NR];
    signed char *w = (signed char *)(panel + sizeof sc);
    for (j = 0; j < ATTNC_PACK_NR; j++) sc[j] = p * ATTNC_PACK_NR + j < n_out ? scale[p * ATTNC_PACK_NR + j] : 0.0f;
    memcpy(panel, sc, sizeof sc);
    for (k = 0; k < n_in; k++)
      for (j = 0; j < ATTNC_PACK_NR; j++) {
        const long n = p * ATTNC_PACK_NR + j;
        w[k * ATTNC_PACK_NR + j] = n < n_out ? q[n * n_in + k] : 0;
      }
  }
}

/* One output at a time: (sum_k x[k] q[n][k]) * scale[n] + b[n], summed
 * in float. */
void attnc_prims_linear_q8_generic(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                   const float *b, float *y, long y_stride)
{
  long r, n, k;
  for (n = 0; n < n_out; n++) {
    const unsigned char *panel = (const unsigned char *)packed + n / ATTNC_PACK_NR * ATTNC_Q8_PANEL(n_in);
    const signed char *w = (const signed char *)(panel + ATTNC_PACK_NR * sizeof(float)) + n % ATTNC_PACK_NR;
    float scale;
    memcpy(&scale, panel + n % ATTNC_PACK_NR * sizeof(float), sizeof scale);
    for (r = 0; r < rows; r++) {
      const float *xr = x + r * x_stride;
      float acc = 0;
      for (k = 0; k < n_in; k++) acc += xr[k] * (float)w[k * ATTNC_PACK_NR];
      y[r * y_stride + n] = acc * scale + (b ? b[n] : 0.0f);
    }
  }
}

/* One linear_q8 per head the columns span (as linear_heads_generic). */
void attnc_prims_linear_heads_q8(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                 const float *b, float *y, long y_stride, long col0, long head_w, long head_stride)
{
  const attnc_prims *P = attnc_prims_get();
  long n = 0;
  while (n < n_out) { /* the columns of one head: whole panels, since col0 and head_w are */
    const long a = col0 + n, d = a % head_w, w = n_out - n < head_w - d ? n_out - n : head_w - d;
    P->linear_q8(x, rows, x_stride, n_in, (const unsigned char *)packed + n / ATTNC_PACK_NR * ATTNC_Q8_PANEL(n_in), w,
                 b ? b + n : NULL, y + a / head_w * head_stride + d, y_stride);
    n += w;
  }
}

long attnc_prims_pack_bf16_size(long n_out, long n_in)
{
  return (n_out + ATTNC_PACK_NR - 1) / ATTNC_PACK_NR * ATTNC_BF16_PANEL(n_in);
}

void attnc_prims_pack_bf16(const unsigned short *w, long n_out, long n_in, void *packed)
{
  const long k32 = (n_in + 31) / 32 * 32;
  long p, k, j, panels = (n_out + ATTNC_PACK_NR - 1) / ATTNC_PACK_NR;
  for (p = 0; p < panels; p++) {
    unsigned short *panel = (unsigned short *)((unsigned char *)packed + p * ATTNC_BF16_PANEL(n_in));
    for (k = 0; k < k32; k++) /* weight (n, k) at pair k / 2, output n, element k % 2 */
      for (j = 0; j < ATTNC_PACK_NR; j++) {
        const long n = p * ATTNC_PACK_NR + j;
        panel[(k / 2) * 2 * ATTNC_PACK_NR + j * 2 + k % 2] = n < n_out && k < n_in ? w[n * n_in + k] : 0;
      }
  }
}

static float bf16_f32(unsigned short h)
{
  const unsigned u = (unsigned)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* One output at a time, x as it is (no rounding), summed in float. */
void attnc_prims_linear_bf16_generic(const float *x, long rows, long x_stride, long n_in, const void *packed,
                                     long n_out, const float *b, float *y, long y_stride)
{
  long r, n, k;
  for (n = 0; n < n_out; n++) {
    const unsigned short *w = (const unsigned short *)((const unsigned char *)packed + n / ATTNC_PACK_NR * ATTNC_BF16_PANEL(n_in)) +
                              n % ATTNC_PACK_NR * 2;
    for (r = 0; r < rows; r++) {
      const float *xr = x + r * x_stride;
      float acc = 0;
      for (k = 0; k < n_in; k++) acc += xr[k] * bf16_f32(w[(k / 2) * 2 * ATTNC_PACK_NR + k % 2]);
      y[r * y_stride + n] = acc + (b ? b[n] : 0.0f);
    }
  }
}

/* One linear_bf16 per head the columns span (as linear_heads_generic). */
void attnc_prims_linear_heads_bf16(const float *x, long rows, long x_stride, long n_in, const void *packed, long n_out,
                                   const float *b, float *y, long y_stride, long col0, long head_w, long head_stride)
{
  const attnc_prims *P = attnc_prims_get();
  long n = 0;
  while (n < n_out) {
    const long a = col0 + n, d = a % head_w, w = n_out - n < head_w - d ? n_out - n : head_w - d;
    P->linear_bf16(x, rows, x_stride, n_in, (const unsigned char *)packed + n / ATTNC_PACK_NR * ATTNC_BF16_PANEL(n_in), w,
                   b ? b + n : NULL, y + a / head_w * head_stride + d, y_stride);
    n += w;
  }
}

float attnc_prims_widen1(int f16, unsigned short h)
{
  unsigned u;
  float f;
  if (!f16) {
    u = (unsigned)h << 16;
  } else {
    const unsigned sign = (unsigned)(h >> 15) << 31, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m * 2^-24 */
      f = (float)m * 5.9604644775390625e-8f;
      return sign ? -f : f;
    }
    u = sign | (e == 0x1f ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  }
  memcpy(&f, &u, sizeof f);
  return f;
}

static unsigned short narrow1(int f16, float f)
{
  unsigned u, sign, a;
  memcpy(&u, &f, sizeof u);
  if (!f16) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40); /* NaN stays NaN */
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
  }
  sign = (u >> 16) & 0x8000u;
  a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN stays NaN */
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);                       /* past 65504: infinity */
  if (a < 0x38800000u) {                                                              /* below 2^-14: subnormal */
    const unsigned e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    unsigned shift, q, rest, half;
    if (e < 102) return (unsigned short)sign;
    shift = 126 - e;
    q = m >> shift;
    rest = m & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1))) q++;
    return (unsigned short)(sign | q);
  }
  return (unsigned short)(sign | ((a + 0xfffu + ((a >> 13) & 1) - 0x38000000u) >> 13));
}

void attnc_prims_widen16_generic(int f16, const void *src, float *dst, long n)
{
  const unsigned short *s = src;
  long e;
  for (e = 0; e < n; e++) dst[e] = attnc_prims_widen1(f16, s[e]);
}

void attnc_prims_narrow16_generic(int f16, const float *src, void *dst, long n)
{
  unsigned short *d = dst;
  long e;
  for (e = 0; e < n; e++) d[e] = narrow1(f16, src[e]);
}

/* The same order as the vector versions: each c[i][j] sums a[i][p] b[p][j]
 * over p in order, onto c[i][j] when acc. */
void attnc_prims_matmul_generic(long m, long n, long k, const float *a, long a_rs, long a_cs, const float *b, long ldb,
                                float *c, long ldc, int acc)
{
  long i, j, p;
  for (i = 0; i < m; i++) {
    float *ci = c + i * ldc;
    if (!acc)
      for (j = 0; j < n; j++) ci[j] = 0;
    for (p = 0; p < k; p++) {
      const float aip = a[i * a_rs + p * a_cs], *bp = b + p * ldb;
      for (j = 0; j < n; j++) ci[j] += aip * bp[j];
    }
  }
}

static attnc_prims table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(ATTNC_AVX512_EMU)
/* 1 when vdpbf16ps is worth taking over f32 FMAs: the CPU has AVX512-BF16
 * (CPUID leaf 7 sub-leaf 1, EAX bit 5) and no AMX-BF16 (leaf 7, EDX bit
 * 22).  Zen 4 issues a 512-bit vdpbf16ps at its 512-bit FMA rate, so each
 * does twice an FMA's products; Intel's AMX parts (Sapphire Rapids on)
 * issue it at half their FMA rate (one port of two), which leaves it no
 * faster (docs/performance.md, "Decode D in 16 bits").  Cooper Lake
 * (AVX512-BF16 without AMX) was not measured.  The caller has checked
 * AVX-512F and the OS's saving of the vector state. */
static int bf16dp_fast(void)
{
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) return 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || ((d >> 22) & 1)) return 0;
  return 1;
}
#endif

static void choose(void)
{
  const char *force = getenv("ATTNC_ISA");
  int bf16_dp = 0; /* vdpbf16ps for the bf16 linear and attention */
  table.abi = 1;
  table.isa = "generic";
  table.linear = attnc_prims_linear_generic;
  table.linear_heads = attnc_prims_linear_heads_generic;
  table.attend = attnc_prims_attend_generic;
  table.attend_work = attnc_prims_attend_work;
  table.combine = attnc_prims_combine_generic;
  table.sigmoid_mul = attnc_prims_sigmoid_mul_generic;
  table.pack_size = attnc_prims_pack_size;
  table.pack = attnc_prims_pack;
  table.linear_q8 = attnc_prims_linear_q8_generic;
  table.pack_q8 = attnc_prims_pack_q8;
  table.linear_heads_q8 = attnc_prims_linear_heads_q8;
  table.linear_bf16 = attnc_prims_linear_bf16_generic;
  table.linear_heads_bf16 = attnc_prims_linear_heads_bf16;
  table.widen16 = attnc_prims_widen16_generic;
  table.narrow16 = attnc_prims_narrow16_generic;
  table.attend_kv = attnc_prims_attend_kv_generic;
  table.attend_pack = NULL; /* the kernel copies k and v itself */
  table.matmul = attnc_prims_matmul_generic;
#if defined(__x86_64__) && defined(__GNUC__)
  /* ATTNC_ISA=generic or =avx2 caps the choice (to test the other paths) */
  const int generic_only = force && strcmp(force, "generic") == 0;
  const int avx2_at_most = generic_only || (force && strcmp(force, "avx2") == 0);
#ifdef ATTNC_AVX512_EMU
  /* make check-avx512-emu: prims_avx512.c runs on a C model of its
   * intrinsics (tests/avx512_emu.h), so any CPU can take this branch */
  const int has_avx512 = 1;
#else
  const int has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("fma");
#endif
  if (!avx2_at_most && has_avx512) {
    table.isa = "avx512";
    table.linear = attnc_prims_linear_avx512;
    table.linear_heads = attnc_prims_linear_heads_avx512;
    table.linear_q8 = attnc_prims_linear_q8_avx512;
    table.linear_bf16 = attnc_prims_linear_bf16_avx512;
    table.widen16 = attnc_prims_widen16_avx512;
    table.narrow16 = attnc_prims_narrow16_avx512;
#ifndef ATTNC_AVX512_EMU
    /* bf16: AMX-BF16 where the CPU has it (ATTNC_ISA=avx512 leaves it
     * out), else vdpbf16ps (AVX512-BF16); int8: vpdpbusd (AVX512-VNNI).
     * ATTNC_ISA=avx512 leaves the dot products out too; ATTNC_ISA=avx512dp
     * takes vdpbf16ps over AMX, to test it */
    const int plain512 = force && strcmp(force, "avx512") == 0, dp_forced = force && strcmp(force, "avx512dp") == 0;
    if (!plain512 && !dp_forced && attnc_prims_amx_ready()) {
      table.linear_bf16 = attnc_prims_linear_bf16_amx;
    } else if (!plain512 && attnc_prims_bf16_ready()) {
      table.linear_bf16 = attnc_prims_linear_bf16_dp;
      bf16_dp = 1;
    }
    /* int8 weights meet x in three int8 levels on VNNI, AMX parts
     * included: their tiles would take x in bf16, each value to 2^-9,
     * which a sharp softmax magnifies past the int8 row (docs/spec.md) */
    if (!plain512 && attnc_prims_vnni_ready()) {
      table.linear_q8 = attnc_prims_linear_q8_vnni;
      table.linear_heads_q8 = attnc_prims_linear_heads_q8_vnni;
      table.q8_by_rows = 1;
      table.pack_q8 = attnc_prims_pack_q8_vnni;
      table.q8_row_bytes = attnc_prims_q8_row_bytes_vnni;
      table.q8_quantise = attnc_prims_q8_quantise_vnni;
      table.linear_heads_q8_xq = attnc_prims_linear_heads_q8_xq_vnni;
    }
#endif
    table.attend = attnc_prims_attend_avx512;
    table.attend_pack = attnc_prims_attend_pack_avx512;
    table.sigmoid_mul = attnc_prims_sigmoid_mul_avx512;
    table.attend_kv = attnc_prims_attend_kv_avx512;
#ifndef ATTNC_AVX512_EMU
    /* a bf16 kernel's decoding tiles on vdpbf16ps where it is not slower
     * than an FMA (ATTNC_ISA=avx512 leaves it out, as it does AMX) */
    if (!(force && strcmp(force, "avx512") == 0) && bf16dp_fast()) table.attend_kv = attnc_prims_attend_kv_bf16dp;
#endif
    table.matmul = attnc_prims_matmul_avx512;
  } else if (!generic_only && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    table.isa = "avx2";
    table.linear = attnc_prims_linear_avx2;
    table.linear_heads = attnc_prims_linear_heads_avx2;
    table.linear_q8 = attnc_prims_linear_q8_avx2;
    table.linear_bf16 = attnc_prims_linear_bf16_avx2;
    if (__builtin_cpu_supports("f16c")) { /* compiled for F16C (f16's conversions) */
      table.widen16 = attnc_prims_widen16_avx2;
      table.narrow16 = attnc_prims_narrow16_avx2;
      table.attend_kv = attnc_prims_attend_kv_avx2;
    }
    table.attend = attnc_prims_attend_avx2;
    table.sigmoid_mul = attnc_prims_sigmoid_mul_avx2;
    table.matmul = attnc_prims_matmul_avx2;
  }
#endif
  /* a bf16 kernel's attention: on the tiles with the AMX linear, on
   * vdpbf16ps with that linear, else attend; the first two convert k and v
   * once per call, so their tiles take 256 rows */
  table.attend_bf16 = table.linear_bf16 == attnc_prims_linear_bf16_amx ? attnc_prims_attend_bf16_amx
                      : bf16_dp                                        ? attnc_prims_attend_bf16_dp
                                                                       : table.attend;
  table.attend_bf16_rows = table.attend_bf16 != table.attend ? 256 : 0;
}

const attnc_prims *attnc_prims_get(void)
{
  pthread_once(&table_once, choose);
  return &table;
}
