/* A plain-C model of the AVX-512 intrinsics that runtime/prims_avx512.c
 * uses, so that its code can run, and be tested, on a CPU without
 * AVX-512 (make check-avx512-emu).  Force-included (-include) ahead of
 * the file: <immintrin.h> is read first, then each intrinsic and vector
 * type is renamed to a model below, so the file's own #include of
 * <immintrin.h> changes nothing.
 *
 * Each model does what Intel's intrinsics guide says the instruction does,
 * lane by lane.  Alignment rules are checked (an unaligned load_ps or
 * store_ps aborts, as the real one faults), and masked loads and stores
 * touch only the lanes their mask selects, so AddressSanitizer sees what
 * the hardware would.  A use of anything not modelled here fails to
 * compile: the real intrinsic needs -mavx512f, which this build omits. */
#ifndef ATTNC_AVX512_EMU_H
#define ATTNC_AVX512_EMU_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  float f[16];
} emu_m512;
typedef struct {
  int32_t i[16];
} emu_m512i;

#define EMU static inline
#define EMU_EACH for (int l = 0; l < 16; l++)
#define EMU_ON(k) (((unsigned)(k) >> l) & 1u)

EMU void emu_aligned(const void *p)
{
  if ((uintptr_t)p & 63) abort(); /* the real aligned load or store faults */
}

/* ---- loads, stores, constants ---- */
EMU emu_m512 emu_set1_ps(float a)
{
  emu_m512 r;
  EMU_EACH r.f[l] = a;
  return r;
}
EMU emu_m512 emu_setzero_ps(void) { return emu_set1_ps(0.0f); }
EMU emu_m512 emu_loadu_ps(const void *p)
{
  emu_m512 r;
  memcpy(r.f, p, sizeof r.f);
  return r;
}
EMU emu_m512 emu_load_ps(const void *p)
{
  emu_aligned(p);
  return emu_loadu_ps(p);
}
EMU void emu_storeu_ps(void *p, emu_m512 a) { memcpy(p, a.f, sizeof a.f); }
EMU void emu_store_ps(void *p, emu_m512 a)
{
  emu_aligned(p);
  emu_storeu_ps(p, a);
}
EMU emu_m512 emu_maskz_loadu_ps(__mmask16 k, const void *p)
{
  emu_m512 r;
  EMU_EACH r.f[l] = EMU_ON(k) ? ((const float *)p)[l] : 0.0f;
  return r;
}
EMU void emu_mask_storeu_ps(void *p, __mmask16 k, emu_m512 a)
{
  EMU_EACH if (EMU_ON(k)) ((float *)p)[l] = a.f[l];
}
/* the 128-bit forms (AVX-512VL): __m128 is SSE's own type */
EMU void emu_mask_storeu_ps128(void *p, __mmask8 k, __m128 a)
{
  float f[4];
  _mm_storeu_ps(f, a);
  for (int l = 0; l < 4; l++)
    if (EMU_ON(k)) ((float *)p)[l] = f[l];
}
EMU emu_m512i emu_set1_epi32(int a)
{
  emu_m512i r;
  EMU_EACH r.i[l] = a;
  return r;
}
EMU emu_m512i emu_setzero_si512(void) { return emu_set1_epi32(0); }
EMU emu_m512i emu_setr_epi32(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, int a9, int a10,
                             int a11, int a12, int a13, int a14, int a15)
{
  emu_m512i r = {{a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15}};
  return r;
}
EMU emu_m512i emu_load_si512(const void *p)
{
  emu_m512i r;
  emu_aligned(p);
  memcpy(r.i, p, sizeof r.i);
  return r;
}
EMU __m128i emu_maskz_loadu_epi8(__mmask16 k, const void *p)
{
  unsigned char b[16];
  EMU_EACH b[l] = EMU_ON(k) ? ((const unsigned char *)p)[l] : 0;
  return _mm_loadu_si128((const __m128i *)b);
}
EMU emu_m512i emu_cvtepu8_epi32(__m128i a)
{
  unsigned char b[16];
  emu_m512i r;
  _mm_storeu_si128((__m128i *)b, a);
  EMU_EACH r.i[l] = b[l];
  return r;
}
/* _mm512_maskz_loadu_epi16: 32 16-bit lanes (AVX-512BW), only the selected ones read */
EMU emu_m512i emu_maskz_loadu_epi16_512(__mmask32 k, const void *p)
{
  uint16_t h[32];
  emu_m512i r;
  for (int l = 0; l < 32; l++) h[l] = EMU_ON(k) ? ((const uint16_t *)p)[l] : 0;
  memcpy(r.i, h, sizeof r.i);
  return r;
}
EMU emu_m512 emu_mask_i32gather_ps(emu_m512 src, __mmask16 k, emu_m512i idx, const void *base, int scale)
{
  EMU_EACH if (EMU_ON(k)) memcpy(&src.f[l], (const char *)base + (long)idx.i[l] * scale, sizeof(float));
  return src;
}

/* ---- arithmetic ---- */
#define EMU_BINARY(name, expr)                                                                                       \
  EMU emu_m512 name(emu_m512 a, emu_m512 b)                                                                          \
  {                                                                                                                  \
    emu_m512 r;                                                                                                      \
    EMU_EACH r.f[l] = (expr);                                                                                        \
    return r;                                                                                                        \
  }
EMU_BINARY(emu_add_ps, a.f[l] + b.f[l])
EMU_BINARY(emu_sub_ps, a.f[l] - b.f[l])
EMU_BINARY(emu_mul_ps, a.f[l] * b.f[l])
EMU_BINARY(emu_div_ps, a.f[l] / b.f[l])
/* vmaxps/vminps return the second operand when either is NaN */
EMU_BINARY(emu_max_ps, a.f[l] > b.f[l] ? a.f[l] : b.f[l])
EMU_BINARY(emu_min_ps, a.f[l] < b.f[l] ? a.f[l] : b.f[l])
EMU emu_m512 emu_fmadd_ps(emu_m512 a, emu_m512 b, emu_m512 c)
{
  EMU_EACH c.f[l] = fmaf(a.f[l], b.f[l], c.f[l]);
  return c;
}
EMU emu_m512 emu_fnmadd_ps(emu_m512 a, emu_m512 b, emu_m512 c)
{
  EMU_EACH c.f[l] = fmaf(-a.f[l], b.f[l], c.f[l]);
  return c;
}
EMU emu_m512i emu_add_epi32(emu_m512i a, emu_m512i b)
{
  EMU_EACH a.i[l] = (int32_t)((uint32_t)a.i[l] + (uint32_t)b.i[l]);
  return a;
}
EMU emu_m512 emu_roundscale_ps(emu_m512 a, int imm)
{
  if (imm & 0xF4) abort(); /* only scale 0 with an explicit rounding mode is modelled */
  EMU_EACH
  {
    float x = a.f[l];
    switch (imm & 3) {
    case 0: x = nearbyintf(x); break; /* the default mode: to nearest, ties to even */
    case 1: x = floorf(x); break;
    case 2: x = ceilf(x); break;
    default: x = truncf(x); break;
    }
    a.f[l] = x;
  }
  return a;
}
/* a - round(a) at scale 0 (roundscale's imm rules); an infinite lane
 * gives +0, as the hardware does (seen on a Xeon: no invalid flag) */
EMU emu_m512 emu_reduce_ps(emu_m512 a, int imm)
{
  const emu_m512 n = emu_roundscale_ps(a, imm);
  EMU_EACH a.f[l] = isinf(a.f[l]) ? 0.0f : a.f[l] - n.f[l];
  return a;
}
EMU emu_m512 emu_scalef_ps(emu_m512 a, emu_m512 b) /* a * 2^floor(b) */
{
  EMU_EACH
  {
    float e = floorf(b.f[l]);
    if (isnan(a.f[l]) || isnan(e)) a.f[l] = a.f[l] + e;
    else a.f[l] = ldexpf(a.f[l], e > 300.0f ? 300 : e < -300.0f ? -300 : (int)e);
  }
  return a;
}

/* ---- masks, compares, blends ---- */
EMU int emu_cmp_ps_one(float a, float b, int pred)
{
  int unord = isnan(a) || isnan(b);
  switch (pred & 15) { /* the signalling bit (0x10) only changes exceptions */
  case 0: return !unord && a == b;   /* EQ_OQ */
  case 1: return !unord && a < b;    /* LT_OS */
  case 2: return !unord && a <= b;   /* LE_OS */
  case 3: return unord;              /* UNORD_Q */
  case 4: return unord || a != b;    /* NEQ_UQ */
  case 5: return unord || !(a < b);  /* NLT_US */
  case 6: return unord || !(a <= b); /* NLE_US */
  case 7: return !unord;             /* ORD_Q */
  case 8: return unord || a == b;    /* EQ_UQ */
  case 9: return unord || !(a >= b); /* NGE_US */
  case 10: return unord || !(a > b); /* NGT_US */
  case 11: return 0;                 /* FALSE_OQ */
  case 12: return !unord && a != b;  /* NEQ_OQ */
  case 13: return !unord && a >= b;  /* GE_OS */
  case 14: return !unord && a > b;   /* GT_OS */
  default: return 1;                 /* TRUE_UQ */
  }
}
EMU __mmask16 emu_cmp_ps_mask(emu_m512 a, emu_m512 b, int pred)
{
  unsigned k = 0;
  EMU_EACH k |= (unsigned)emu_cmp_ps_one(a.f[l], b.f[l], pred) << l;
  return (__mmask16)k;
}
EMU __mmask16 emu_cmp_epi32_mask(emu_m512i a, emu_m512i b, int pred)
{
  unsigned k = 0;
  EMU_EACH
  {
    int32_t x = a.i[l], y = b.i[l];
    int on;
    switch (pred & 7) {
    case 0: on = x == y; break; /* _MM_CMPINT_EQ */
    case 1: on = x < y; break;  /* LT */
    case 2: on = x <= y; break; /* LE */
    case 3: on = 0; break;      /* FALSE */
    case 4: on = x != y; break; /* NE */
    case 5: on = x >= y; break; /* NLT */
    case 6: on = x > y; break;  /* NLE */
    default: on = 1; break;     /* TRUE */
    }
    k |= (unsigned)on << l;
  }
  return (__mmask16)k;
}
EMU emu_m512 emu_mask_mov_ps(emu_m512 src, __mmask16 k, emu_m512 a)
{
  EMU_EACH if (EMU_ON(k)) src.f[l] = a.f[l];
  return src;
}
EMU emu_m512 emu_maskz_mov_ps(__mmask16 k, emu_m512 a) { return emu_mask_mov_ps(emu_setzero_ps(), k, a); }
EMU emu_m512 emu_maskz_scalef_ps(__mmask16 k, emu_m512 a, emu_m512 b) { return emu_maskz_mov_ps(k, emu_scalef_ps(a, b)); }
EMU emu_m512 emu_mask_blend_ps(__mmask16 k, emu_m512 a, emu_m512 b) { return emu_mask_mov_ps(a, k, b); }
EMU emu_m512 emu_mask_add_ps(emu_m512 src, __mmask16 k, emu_m512 a, emu_m512 b)
{
  return emu_mask_mov_ps(src, k, emu_add_ps(a, b));
}

/* ---- horizontal: GCC's sequence halves the vector each step ---- */
EMU float emu_reduce_add_ps(emu_m512 a)
{
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) a.f[l] = a.f[l] + a.f[l + w];
  return a.f[0];
}
EMU float emu_reduce_max_ps(emu_m512 a)
{
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) a.f[l] = a.f[l] > a.f[l + w] ? a.f[l] : a.f[l + w];
  return a.f[0];
}

/* ---- shuffles, within each 128-bit lane or across them ---- */
/* unpacklo (from = 0) and unpackhi (from = 2): a[f] b[f] a[f+1] b[f+1] per lane */
EMU emu_m512 emu_unpack_ps(emu_m512 a, emu_m512 b, int from)
{
  emu_m512 r;
  for (int q = 0; q < 16; q += 4) {
    r.f[q + 0] = a.f[q + from];
    r.f[q + 1] = b.f[q + from];
    r.f[q + 2] = a.f[q + from + 1];
    r.f[q + 3] = b.f[q + from + 1];
  }
  return r;
}
EMU emu_m512 emu_unpacklo_ps(emu_m512 a, emu_m512 b) { return emu_unpack_ps(a, b, 0); }
EMU emu_m512 emu_unpackhi_ps(emu_m512 a, emu_m512 b) { return emu_unpack_ps(a, b, 2); }
EMU emu_m512 emu_shuffle_ps(emu_m512 a, emu_m512 b, int imm)
{
  emu_m512 r;
  for (int q = 0; q < 16; q += 4) {
    r.f[q + 0] = a.f[q + (imm & 3)];
    r.f[q + 1] = a.f[q + ((imm >> 2) & 3)];
    r.f[q + 2] = b.f[q + ((imm >> 4) & 3)];
    r.f[q + 3] = b.f[q + ((imm >> 6) & 3)];
  }
  return r;
}
EMU emu_m512 emu_shuffle_f32x4(emu_m512 a, emu_m512 b, int imm)
{
  emu_m512 r;
  for (int q = 0; q < 4; q++) {
    const emu_m512 *s = q < 2 ? &a : &b;
    int from = (imm >> (2 * q)) & 3;
    memcpy(&r.f[4 * q], &s->f[4 * from], 4 * sizeof(float));
  }
  return r;
}

/* sign-extend 16 int8 to int32; convert int32 lanes to float */
EMU emu_m512i emu_cvtepi8_epi32(__m128i a)
{
  int8_t b[16];
  emu_m512i r;
  _mm_storeu_si128((__m128i *)b, a);
  EMU_EACH r.i[l] = b[l];
  return r;
}
EMU emu_m512 emu_cvtepi32_ps(emu_m512i a)
{
  emu_m512 r;
  EMU_EACH r.f[l] = (float)a.i[l];
  return r;
}

EMU emu_m512i emu_loadu_si512(const void *p)
{
  emu_m512i r;
  memcpy(r.i, p, sizeof r.i);
  return r;
}
EMU emu_m512i emu_slli_epi32(emu_m512i a, unsigned n)
{
  emu_m512i r;
  EMU_EACH r.i[l] = n > 31 ? 0 : (int32_t)((uint32_t)a.i[l] << n);
  return r;
}
EMU emu_m512i emu_and_si512(emu_m512i a, emu_m512i b)
{
  emu_m512i r;
  EMU_EACH r.i[l] = a.i[l] & b.i[l];
  return r;
}
EMU emu_m512 emu_castsi512_ps(emu_m512i a)
{
  emu_m512 r;
  memcpy(r.f, a.i, sizeof r.f);
  return r;
}

/* ---- 16-bit conversions (widen16, narrow16, attend_kv): emu_m256i, sixteen 16-bit
 * lanes here, is a struct of its own, as __m512 is ---- */
typedef struct {
  uint16_t h[16];
} emu_m256i;
EMU emu_m256i emu_maskz_loadu_epi16(__mmask16 k, const void *p)
{
  emu_m256i r;
  EMU_EACH r.h[l] = EMU_ON(k) ? ((const uint16_t *)p)[l] : 0;
  return r;
}
EMU emu_m256i emu_loadu_si256(const void *p)
{
  emu_m256i r;
  memcpy(r.h, p, sizeof r.h);
  return r;
}
EMU void emu_mask_storeu_epi16(void *p, __mmask16 k, emu_m256i a)
{
  EMU_EACH if (EMU_ON(k)) ((uint16_t *)p)[l] = a.h[l];
}
EMU emu_m512i emu_cvtepu16_epi32(emu_m256i a)
{
  emu_m512i r;
  EMU_EACH r.i[l] = a.h[l];
  return r;
}
EMU emu_m256i emu_cvtepi32_epi16(emu_m512i a)
{
  emu_m256i r;
  EMU_EACH r.h[l] = (uint16_t)a.i[l];
  return r;
}
/* vcvtph2ps: exact, a NaN made quiet */
EMU emu_m512 emu_cvtph_ps(emu_m256i a)
{
  emu_m512 r;
  EMU_EACH
  {
    const uint32_t sign = (uint32_t)(a.h[l] >> 15) << 31, e = (a.h[l] >> 10) & 0x1fu, m = a.h[l] & 0x3ffu;
    uint32_t u;
    if (e == 0) {
      r.f[l] = ldexpf((float)m, -24) * (sign ? -1.0f : 1.0f);
      continue;
    }
    u = sign | (e == 0x1f ? 0x7f800000u | (m << 13) | (m ? 0x400000u : 0) : ((e + 112) << 23) | (m << 13));
    memcpy(&r.f[l], &u, 4);
  }
  return r;
}
/* vcvtps2ph with round to nearest, ties to even (the only mode modelled) */
EMU emu_m256i emu_cvtps_ph(emu_m512 a, int mode)
{
  emu_m256i r;
  uint16_t *h = r.h;
  (void)mode;
  EMU_EACH
  {
    uint32_t u, sign, x;
    memcpy(&u, &a.f[l], 4);
    sign = (u >> 16) & 0x8000u;
    x = u & 0x7fffffffu;
    if (x > 0x7f800000u) h[l] = (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    else if (x >= 0x477ff000u) h[l] = (uint16_t)(sign | 0x7c00u);
    else if (x < 0x38800000u) { /* subnormal: the value in units of 2^-24, rounded (nearbyintf: ties to even) */
      h[l] = (uint16_t)(sign | (uint32_t)nearbyintf(ldexpf(fabsf(a.f[l]), 24)));
    } else h[l] = (uint16_t)(sign | ((x + 0xfffu + ((x >> 13) & 1) - 0x38000000u) >> 13));
  }
  return r;
}
EMU emu_m512i emu_castps_si512(emu_m512 a)
{
  emu_m512i r;
  memcpy(r.i, a.f, sizeof r.i);
  return r;
}
EMU emu_m512i emu_srli_epi32(emu_m512i a, unsigned n)
{
  emu_m512i r;
  EMU_EACH r.i[l] = n > 31 ? 0 : (int32_t)((uint32_t)a.i[l] >> n);
  return r;
}
EMU emu_m512i emu_or_si512(emu_m512i a, emu_m512i b)
{
  emu_m512i r;
  EMU_EACH r.i[l] = a.i[l] | b.i[l];
  return r;
}
EMU emu_m512i emu_mask_mov_epi32(emu_m512i src, __mmask16 k, emu_m512i a)
{
  emu_m512i r;
  EMU_EACH r.i[l] = EMU_ON(k) ? a.i[l] : src.i[l];
  return r;
}

/* a reciprocal within 2^-14 relative error: the model gives the exact one */
EMU emu_m512 emu_rcp14_ps(emu_m512 a)
{
  emu_m512 r;
  EMU_EACH r.f[l] = 1.0f / a.f[l];
  return r;
}

#undef EMU_BINARY

EMU __m128 emu_extractf32x4_ps(emu_m512 a, int imm)
{
  return _mm_loadu_ps(&a.f[4 * (imm & 3)]);
}

/* ---- the renames ---- */
#undef __m512
#undef __m512i
#undef __m256i
#define __m512 emu_m512
#define __m512i emu_m512i
#define __m256i emu_m256i
#undef _mm512_set1_ps
#undef _mm512_setzero_ps
#undef _mm512_load_ps
#undef _mm512_loadu_ps
#undef _mm512_store_ps
#undef _mm512_storeu_ps
#undef _mm512_maskz_loadu_ps
#undef _mm512_mask_storeu_ps
#undef _mm512_set1_epi32
#undef _mm512_setzero_si512
#undef _mm512_setr_epi32
#undef _mm512_load_si512
#undef _mm_maskz_loadu_epi8
#undef _mm512_cvtepu8_epi32
#undef _mm512_maskz_loadu_epi16
#undef _mm512_mask_i32gather_ps
#undef _mm512_add_ps
#undef _mm512_sub_ps
#undef _mm512_mul_ps
#undef _mm512_div_ps
#undef _mm512_rcp14_ps
#undef _mm256_maskz_loadu_epi16
#undef _mm256_mask_storeu_epi16
#undef _mm256_loadu_si256
#undef _mm512_cvtepu16_epi32
#undef _mm512_cvtepi32_epi16
#undef _mm512_cvtph_ps
#undef _mm512_cvtps_ph
#undef _mm512_castps_si512
#undef _mm512_srli_epi32
#undef _mm512_or_si512
#undef _mm512_mask_mov_epi32
#undef _mm512_loadu_si512
#undef _mm512_slli_epi32
#undef _mm512_and_si512
#undef _mm512_castsi512_ps
#undef _mm512_cvtepi8_epi32
#undef _mm512_cvtepi32_ps
#undef _mm512_max_ps
#undef _mm512_min_ps
#undef _mm512_fmadd_ps
#undef _mm512_fnmadd_ps
#undef _mm512_add_epi32
#undef _mm512_roundscale_ps
#undef _mm512_reduce_ps
#undef _mm512_scalef_ps
#undef _mm512_maskz_scalef_ps
#undef _mm512_cmp_ps_mask
#undef _mm512_cmp_epi32_mask
#undef _mm512_mask_mov_ps
#undef _mm512_maskz_mov_ps
#undef _mm512_mask_blend_ps
#undef _mm512_mask_add_ps
#undef _mm512_reduce_add_ps
#undef _mm512_reduce_max_ps
#undef _mm512_unpacklo_ps
#undef _mm512_unpackhi_ps
#undef _mm512_shuffle_ps
#undef _mm512_shuffle_f32x4
#undef _mm512_extractf32x4_ps
#undef _mm_mask_storeu_ps
#define _mm512_set1_ps emu_set1_ps
#define _mm512_setzero_ps emu_setzero_ps
#define _mm512_load_ps emu_load_ps
#define _mm512_loadu_ps emu_loadu_ps
#define _mm512_store_ps emu_store_ps
#define _mm512_storeu_ps emu_storeu_ps
#define _mm512_maskz_loadu_ps emu_maskz_loadu_ps
#define _mm512_mask_storeu_ps emu_mask_storeu_ps
#define _mm512_set1_epi32 emu_set1_epi32
#define _mm512_setzero_si512 emu_setzero_si512
#define _mm512_setr_epi32 emu_setr_epi32
#define _mm512_load_si512 emu_load_si512
#define _mm_maskz_loadu_epi8 emu_maskz_loadu_epi8
#define _mm512_cvtepu8_epi32 emu_cvtepu8_epi32
#define _mm512_maskz_loadu_epi16 emu_maskz_loadu_epi16_512
#define _mm512_mask_i32gather_ps emu_mask_i32gather_ps
#define _mm512_add_ps emu_add_ps
#define _mm512_sub_ps emu_sub_ps
#define _mm512_mul_ps emu_mul_ps
#define _mm512_div_ps emu_div_ps
#define _mm512_rcp14_ps emu_rcp14_ps
#define _mm256_maskz_loadu_epi16 emu_maskz_loadu_epi16
#define _mm256_mask_storeu_epi16 emu_mask_storeu_epi16
#define _mm256_loadu_si256 emu_loadu_si256
#define _mm512_cvtepu16_epi32 emu_cvtepu16_epi32
#define _mm512_cvtepi32_epi16 emu_cvtepi32_epi16
#define _mm512_cvtph_ps emu_cvtph_ps
#define _mm512_cvtps_ph emu_cvtps_ph
#define _mm512_castps_si512 emu_castps_si512
#define _mm512_srli_epi32 emu_srli_epi32
#define _mm512_or_si512 emu_or_si512
#define _mm512_mask_mov_epi32 emu_mask_mov_epi32
#define _mm512_loadu_si512 emu_loadu_si512
#define _mm512_slli_epi32 emu_slli_epi32
#define _mm512_and_si512 emu_and_si512
#define _mm512_castsi512_ps emu_castsi512_ps
#define _mm512_cvtepi8_epi32 emu_cvtepi8_epi32
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#define _mm512_max_ps emu_max_ps
#define _mm512_min_ps emu_min_ps
#define _mm512_fmadd_ps emu_fmadd_ps
#define _mm512_fnmadd_ps emu_fnmadd_ps
#define _mm512_add_epi32 emu_add_epi32
#define _mm512_roundscale_ps emu_roundscale_ps
#define _mm512_reduce_ps emu_reduce_ps
#define _mm512_scalef_ps emu_scalef_ps
#define _mm512_maskz_scalef_ps emu_maskz_scalef_ps
#define _mm512_cmp_ps_mask emu_cmp_ps_mask
#define _mm512_cmp_epi32_mask emu_cmp_epi32_mask
#define _mm512_mask_mov_ps emu_mask_mov_ps
#define _mm512_maskz_mov_ps emu_maskz_mov_ps
#define _mm512_mask_blend_ps emu_mask_blend_ps
#define _mm512_mask_add_ps emu_mask_add_ps
#define _mm512_reduce_add_ps emu_reduce_add_ps
#define _mm512_reduce_max_ps emu_reduce_max_ps
#define _mm512_unpacklo_ps emu_unpacklo_ps
#define _mm512_unpackhi_ps emu_unpackhi_ps
#define _mm512_shuffle_ps emu_shuffle_ps
#define _mm512_shuffle_f32x4 emu_shuffle_f32x4
#define _mm512_extractf32x4_ps emu_extractf32x4_ps
#define _mm_mask_storeu_ps emu_mask_storeu_ps128

#endif
