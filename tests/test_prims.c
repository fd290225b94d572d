/* The vectorised primitives, directly: packed linear and attention tiles
 * (with key splits and combine) against double-precision loops, for the
 * portable versions and, when the CPU has them, AVX-512 and AVX2.  Shapes cover tails
 * (widths not multiples of 16 or 32, odd row counts) and every visibility
 * rule a tile can carry. */
#include <fenv.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cpuid.h>

#include "prims.h"
#include "testutil.h"

static uint64_t rng = 88172645463325252ULL;
static float frand(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Each check draws its inputs from a stream of its own, keyed by what it
 * checks: every ISA sees the same inputs, and the inputs do not depend on
 * which ISAs this CPU has.  (With one stream for all, a CPU without
 * AVX-512 drew other inputs for the AVX2 checks than this one did.) */
static void reseed(uint64_t key)
{
  rng = 88172645463325252ULL ^ ((key + 1) * 0x9E3779B97F4A7C15ULL);
  if (!rng) rng = 88172645463325252ULL;
}

static float *alloc64(long n)
{
  void *p = NULL;
  return posix_memalign(&p, 64, sizeof(float) * (size_t)((n + 15) & ~15L)) == 0 ? p : NULL;
}

static int have_avx512(void)
{
  return strcmp(attnc_prims_get()->isa, "avx512") == 0;
}

/* AVX512-BF16 (CPUID leaf 7 sub-leaf 1, EAX bit 5): vdpbf16ps */
static int have_avx512_bf16(void)
{
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
}

/* the AVX2 versions are checked directly wherever the CPU can run them,
 * whichever set the dispatcher chose */
static int have_avx2(void)
{
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

typedef void (*linear_fn)(const float *, long, long, long, const float *, long, const float *, float *, long);
typedef void (*pack_fn)(const float *, long, long, float *);

/* x's rows xs floats apart (0: n_in + 3) */
static int check_linear(linear_fn f, pack_fn pack, long rows, long n_in, long n_out, int bias, long xs)
{
  float *x, *w = malloc(sizeof(float) * n_out * n_in);
  float *b = malloc(sizeof(float) * n_out), *y = malloc(sizeof(float) * rows * (n_out + 5));
  float *p = alloc64(attnc_prims_pack_size(n_out, n_in));
  double worst = 0;
  long r, n, k, ys = n_out + 5; /* strided rows */
  if (xs == 0) xs = n_in + 3;
  x = malloc(sizeof(float) * rows * xs);
  reseed((uint64_t)(((rows * 4099 + n_in) * 4099 + n_out) * 4099 + xs) * 2 + (uint64_t)bias);
  for (r = 0; r < rows * xs; r++) x[r] = frand();
  for (r = 0; r < n_out * n_in; r++) w[r] = frand();
  for (r = 0; r < n_out; r++) b[r] = frand();
  for (r = 0; r < rows * ys; r++) y[r] = 12345.0f; /* the gaps between rows must survive */
  pack(w, n_out, n_in, p);
  f(x, rows, xs, n_in, p, n_out, bias ? b : NULL, y, ys);
  for (r = 0; r < rows; r++) {
    for (n = 0; n < n_out; n++) {
      double want = bias ? b[n] : 0, mag = fabs(want);
      for (k = 0; k < n_in; k++) {
        want += (double)x[r * xs + k] * w[n * n_in + k];
        mag += fabs((double)x[r * xs + k] * w[n * n_in + k]);
      }
      double e = fabs(y[r * ys + n] - want) / (1e-6 * mag + 1e-30);
      if (e > worst) worst = e;
    }
    for (n = n_out; n < ys; n++)
      if (y[r * ys + n] != 12345.0f) worst = INFINITY;
  }
  free(x); free(w); free(b); free(y); free(p);
  if (worst > 1)
    fprintf(stderr, "linear rows=%ld in=%ld out=%ld bias=%d x_stride=%ld: error %.3g of tolerance\n", rows, n_in, n_out, bias, xs, worst);
  return worst <= 1;
}

static void test_prims_linear(void **state)
{
  /* n_in past 1024 (2049): more than one pass over the inputs, each adding to y;
   * 128 rows: blocks of 13 and 12 (AVX-512), of 6 and 5 (AVX2), in three passes;
   * rows 1024 and 2048 floats apart: the AVX-512 GEMM copies them (rows_alias),
   * 600 inputs in passes of 256, 256 and 88 */
  static const long shapes[][4] = { { 1, 1, 1, 0 },      { 5, 7, 3, 0 },       { 12, 64, 32, 0 },    { 13, 300, 33, 0 },
                                    { 25, 513, 64, 0 },  { 96, 256, 100, 0 },  { 14, 2049, 40, 0 },  { 7, 40, 20, 0 },
                                    { 200, 300, 40, 0 }, { 128, 96, 64, 0 },   { 30, 600, 70, 1024 }, { 61, 1030, 64, 2048 },
                                    { 3, 1024, 32, 1024 } };
  size_t i;
  int b, fails = 0;
  (void)state;
  for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (b = 0; b < 2; b++) {
      const long *z = shapes[i];
      fails += !check_linear(attnc_prims_linear_generic, attnc_prims_pack32, z[0], z[1], z[2], b, z[3]);
      if (have_avx512()) fails += !check_linear(attnc_prims_linear_avx512, attnc_prims_pack32, z[0], z[1], z[2], b, z[3]);
      if (have_avx2()) fails += !check_linear(attnc_prims_linear_avx2, attnc_prims_pack16, z[0], z[1], z[2], b, z[3]);
      /* and the table's pair, as the runtime binds weights */
      fails += !check_linear(attnc_prims_get()->linear, attnc_prims_pack, z[0], z[1], z[2], b, z[3]);
    }
  if (!have_avx512()) printf("SKIP avx512 linear: this CPU has no AVX-512 (generic checked)\n");
  if (!have_avx2()) printf("SKIP avx2 linear: this CPU has no AVX2 and FMA (generic checked)\n");
  assert_int_equal(fails, 0);
}

/* The same rows give the same bits however a call splits them (one call,
 * one row per call, 7 per call): kernels rely on it for thread-count
 * independence and for the fused plan matching the phase-by-phase one. */
static int check_linear_splits(const char *isa, linear_fn f, pack_fn pack, long xs)
{
  const long rows = 20, n_in = 600, n_out = 72;
  float *x = malloc(sizeof(float) * rows * xs), *w = malloc(sizeof(float) * n_out * n_in), *b = malloc(sizeof(float) * n_out);
  float *y1 = malloc(sizeof(float) * rows * n_out), *y2 = malloc(sizeof(float) * rows * n_out), *y3 = malloc(sizeof(float) * rows * n_out);
  float *p = alloc64(attnc_prims_pack_size(n_out, n_in));
  long r, same;
  reseed(1000003 + (uint64_t)xs);
  for (r = 0; r < rows * xs; r++) x[r] = frand();
  for (r = 0; r < n_out * n_in; r++) w[r] = frand();
  for (r = 0; r < n_out; r++) b[r] = frand();
  pack(w, n_out, n_in, p);
  f(x, rows, xs, n_in, p, n_out, b, y1, n_out);
  for (r = 0; r < rows; r++) f(x + r * xs, 1, xs, n_in, p, n_out, b, y2 + r * n_out, n_out);
  for (r = 0; r < rows; r += 7) f(x + r * xs, rows - r < 7 ? rows - r : 7, xs, n_in, p, n_out, b, y3 + r * n_out, n_out);
  same = memcmp(y1, y2, sizeof(float) * rows * n_out) == 0 && memcmp(y1, y3, sizeof(float) * rows * n_out) == 0;
  if (!same) fprintf(stderr, "linear [%s, x_stride %ld]: the bits depend on how the rows are split\n", isa, xs);
  free(x); free(w); free(b); free(y1); free(y2); free(y3); free(p);
  return (int)same;
}

static void test_prims_linear_splits(void **state)
{
  int fails = 0;
  long xs;
  (void)state;
  for (xs = 600; xs <= 1024; xs += 424) { /* 1024: the AVX-512 GEMM copies the rows */
    fails += !check_linear_splits("generic", attnc_prims_linear_generic, attnc_prims_pack32, xs);
    if (have_avx512()) fails += !check_linear_splits("avx512", attnc_prims_linear_avx512, attnc_prims_pack32, xs);
    if (have_avx2()) fails += !check_linear_splits("avx2", attnc_prims_linear_avx2, attnc_prims_pack16, xs);
  }
  assert_int_equal(fails, 0);
}

/* linear_heads puts each column where the head-major layout wants it,
 * with the bits of the plain linear: 96 columns from column 32 of a
 * 160-wide weight, heads 64 wide and a stride with a gap between them. */
typedef void (*linear_heads_fn)(const float *, long, long, long, const float *, long, const float *, float *, long, long,
                                long, long);

static int check_linear_heads(const char *isa, linear_heads_fn fh, linear_fn f, pack_fn pack)
{
  const long rows = 13, n_in = 70, n_out = 160, col0 = 32, nn = 96, hw = 64, hs = rows * hw + 7, heads = 3;
  float *x = malloc(sizeof(float) * rows * n_in), *w = malloc(sizeof(float) * n_out * n_in), *b = malloc(sizeof(float) * n_out);
  float *y = malloc(sizeof(float) * rows * n_out), *yh = malloc(sizeof(float) * heads * hs);
  float *p = alloc64(attnc_prims_pack_size(n_out, n_in));
  long r, n, bad = 0;
  reseed(1000001);
  for (r = 0; r < rows * n_in; r++) x[r] = frand();
  for (r = 0; r < n_out * n_in; r++) w[r] = frand();
  for (r = 0; r < n_out; r++) b[r] = frand();
  for (r = 0; r < heads * hs; r++) yh[r] = 12345.0f;
  pack(w, n_out, n_in, p);
  f(x, rows, n_in, n_in, p, n_out, b, y, n_out);
  fh(x, rows, n_in, n_in, p + col0 * n_in, nn, b + col0, yh, hw, col0, hw, hs);
  for (r = 0; r < rows; r++)
    for (n = 0; n < n_out; n++) {
      const float got = yh[n / hw * hs + r * hw + n % hw];
      if (n >= col0 && n < col0 + nn ? memcmp(&got, &y[r * n_out + n], sizeof got) != 0 : got != 12345.0f) bad++;
    }
  for (n = 0; n < heads; n++) /* the gaps after each head */
    for (r = rows * hw; r < hs; r++) bad += yh[n * hs + r] != 12345.0f;
  if (bad) fprintf(stderr, "linear_heads [%s]: %ld values wrong or misplaced\n", isa, bad);
  free(x); free(w); free(b); free(y); free(yh); free(p);
  return bad == 0;
}

static void test_prims_linear_heads(void **state)
{
  int fails = 0;
  (void)state;
  fails += !check_linear_heads("generic", attnc_prims_linear_heads_generic, attnc_prims_linear_generic, attnc_prims_pack32);
  if (have_avx512())
    fails += !check_linear_heads("avx512", attnc_prims_linear_heads_avx512, attnc_prims_linear_avx512, attnc_prims_pack32);
  if (have_avx2()) fails += !check_linear_heads("avx2", attnc_prims_linear_heads_avx2, attnc_prims_linear_avx2, attnc_prims_pack16);
  if (!have_avx512()) printf("SKIP avx512 linear_heads: this CPU has no AVX-512 (generic checked)\n");
  if (!have_avx2()) printf("SKIP avx2 linear_heads: this CPU has no AVX2 and FMA (generic checked)\n");
  fails += !check_linear_heads("table", attnc_prims_get()->linear_heads, attnc_prims_get()->linear, attnc_prims_pack);
  assert_int_equal(fails, 0);
}

/* linear_q8 (and, over two heads, linear_heads_q8) of int8 weights,
 * packed by pack, against a float64 loop over q * scale: rows 1
 * (decoding) to 2 passes of row blocks, n_in 1 to 130 (64 and 128
 * regrouped at packing by VNNI's pack, the others at each call), n_out
 * across panel tails, strides past the rows, with and without a bias.
 * xq (VNNI): x's rows quantised in three levels, each value within
 * max|x| / 16387064; from n_in 128 on, every fifth row (and a single
 * row) holds an outlier (100, the others within 1), as LLM activations
 * do. */
static int check_linear_q8(const char *isa, void (*lin)(const float *, long, long, long, const void *, long,
                                                          const float *, float *, long),
                           void (*pack)(const signed char *, const float *, long, long, void *), double rel, int xq)
{
  static const long R[] = { 1, 3, 14, 15, 57, 113 }, K[] = { 1, 7, 64, 128, 130 }, N[] = { 1, 31, 32, 33, 100 };
  size_t ri, ki, ni;
  int bad = 0;
  for (ri = 0; ri < sizeof R / sizeof R[0]; ri++)
    for (ki = 0; ki < sizeof K / sizeof K[0]; ki++)
      for (ni = 0; ni < sizeof N / sizeof N[0]; ni++) {
        const long rows = R[ri], n_in = K[ki], n_out = N[ni], xs = n_in + 3, ys = n_out + 5;
        const int with_b = (int)((ri + ki + ni) % 2);
        float *x = malloc(sizeof(float) * rows * xs), *y = malloc(sizeof(float) * rows * ys);
        float *scale = malloc(sizeof(float) * n_out), *b = malloc(sizeof(float) * n_out);
        signed char *q = malloc((size_t)(n_out * n_in));
        void *packed = NULL;
        long i, r, n, k;
        if (posix_memalign(&packed, 64, (size_t)attnc_prims_pack_q8_size(n_out, n_in)) != 0) abort();
        reseed((uint64_t)((rows * 131 + n_in) * 131 + n_out) * 2 + (uint64_t)with_b + 5000000);
        for (i = 0; i < rows * xs; i++) x[i] = frand();
        if (xq && n_in >= 128) /* every fifth row from the third, and a decoding step's one */
          for (r = rows == 1 ? 0 : 2; r < rows; r += 5) x[r * xs + n_in / 2] = 100.0f;
        for (i = 0; i < rows * ys; i++) y[i] = 12345.0f; /* past n_out: must stay */
        for (i = 0; i < n_out * n_in; i++) q[i] = (signed char)(frand() * 127.5f);
        q[0] = -128; /* the full range */
        for (i = 0; i < n_out; i++) {
          scale[i] = (0.5f + frand()) / 127;
          b[i] = frand();
        }
        pack(q, scale, n_out, n_in, packed);
        lin(x, rows, xs, n_in, packed, n_out, with_b ? b : NULL, y, ys);
        for (r = 0; r < rows; r++)
          for (n = 0; n < ys; n++) {
            double want = with_b ? b[n < n_out ? n : 0] : 0, mag = fabs(want), got = y[r * ys + n];
            if (n >= n_out) {
              if (got != 12345.0f) bad++;
              continue;
            }
            double amax = 0, wsum = 0;
            for (k = 0; k < n_in; k++) {
              const double term = (double)x[r * xs + k] * q[n * n_in + k] * scale[n];
              want += term;
              mag += fabs(term);
              wsum += fabs((double)q[n * n_in + k] * scale[n]);
              if (fabs(x[r * xs + k]) > amax) amax = fabs(x[r * xs + k]);
            }
            /* xq: x quantised per row, each value within half the last
             * level's step of itself */
            const double step = 16387064.0;
            if (!(fabs(got - want) <= rel * mag + 1e-7 + (xq ? amax / step * wsum * (1 + 1e-3) : 0))) {
              if (bad++ < 5)
                fprintf(stderr, "linear_q8 [%s] rows=%ld n_in=%ld n_out=%ld bias=%d: y[%ld][%ld] = %.9g, want %.9g\n", isa,
                        rows, n_in, n_out, with_b, r, n, got, want);
            }
          }
        free(x); free(y); free(scale); free(b); free(q); free(packed);
      }
  return bad == 0;
}

static void test_prims_linear_q8(void **state)
{
  const attnc_prims *P = attnc_prims_get();
  int fails = 0;
  (void)state;
  fails += !check_linear_q8("generic", attnc_prims_linear_q8_generic, attnc_prims_pack_q8, 1e-6, 0);
  if (have_avx512()) fails += !check_linear_q8("avx512", attnc_prims_linear_q8_avx512, attnc_prims_pack_q8, 1e-6, 0);
  else printf("SKIP avx512 linear_q8: this CPU has no AVX-512 (generic checked)\n");
  if (have_avx2()) fails += !check_linear_q8("avx2", attnc_prims_linear_q8_avx2, attnc_prims_pack_q8, 1e-6, 0);
  else printf("SKIP avx2 linear_q8: this CPU has no AVX2 and FMA (generic checked)\n");
  /* VNNI quantises x per row (every row when its pack regrouped the weights) */
  if (attnc_prims_vnni_ready()) fails += !check_linear_q8("vnni", attnc_prims_linear_q8_vnni, attnc_prims_pack_q8_vnni, 1e-6, 1);
  else printf("SKIP vnni linear_q8: this CPU has no AVX512-VNNI (the other paths checked)\n");
  /* and the table takes it wherever the CPU has it, AMX parts included
   * (whose tiles would round x to bf16: docs/spec.md); not under the C
   * model of check-avx512-emu, nor with ATTNC_ISA set */
  if (attnc_prims_vnni_ready() && !getenv("ATTNC_ISA") && !getenv("ATTNC_TEST_MODEL"))
    assert_true(P->linear_q8 == attnc_prims_linear_q8_vnni);
  for (int wide = 0; wide < 2; wide++) {
    /* a NaN and an infinity in x (which VNNI cannot quantise): their rows'
     * outputs are not finite, the other rows' are; n_in 64 and 66, which
     * VNNI's pack regroups and leaves */
    const long rows = 40, n_in = wide ? 66 : 64, n_out = 32;
    float x[40 * 66], y[40 * 32], scale[32];
    signed char q[32 * 66];
    void *packed = NULL;
    long i, r, n;
    if (posix_memalign(&packed, 64, (size_t)attnc_prims_pack_q8_size(n_out, n_in)) != 0) abort();
    reseed(5200000);
    for (i = 0; i < rows * n_in; i++) x[i] = frand();
    for (i = 0; i < n_out * n_in; i++) q[i] = (signed char)(frand() * 127);
    for (i = 0; i < n_out; i++) scale[i] = 0.01f;
    x[5 * n_in + 3] = NAN;
    x[30 * n_in] = INFINITY;
    /* row 30's outputs: infinity times the first weight, a NaN when it is 0 */
    q[0] = 0;
    q[n_in] = -1;
    q[2 * n_in] = 1;
    P->pack_q8(q, scale, n_out, n_in, packed);
    P->linear_q8(x, rows, n_in, n_in, packed, n_out, NULL, y, n_out);
    for (r = 0; r < rows; r++)
      for (n = 0; n < n_out; n++)
        if ((r == 5 || r == 30) == (isfinite(y[r * n_out + n]) != 0) ||
            (r == 30 && (q[n * n_in] == 0 ? !isnan(y[r * n_out + n]) : (y[r * n_out + n] > 0) != (q[n * n_in] > 0)))) {
          if (fails++ < 5) fprintf(stderr, "linear_q8 [%s] n_in=%ld: y[%ld][%ld] = %g with x's row %s\n", P->isa, n_in, r, n, y[r * n_out + n],
                                   r == 5 ? "holding a NaN" : r == 30 ? "holding an infinity" : "finite");
        }
    free(packed);
  }
  { /* linear_heads_q8: 96 columns from col0 32 as heads of 64, each head's block 3000 floats apart; 40
     * rows, enough for the dot-product paths (which quantise each row once for all its heads), two
     * of VNNI's passes of rows; row 20 holds an outlier */
    const long rows = 40, n_in = 80, n_out = 96, col0 = 32, hw = 64, hs = 3000;
    static float x[40 * 80], y[3 * 3000], yl[40 * 96];
    float scale[128], b[128];
    signed char q[128 * 80];
    void *packed = NULL;
    long i, r, n;
    if (posix_memalign(&packed, 64, (size_t)attnc_prims_pack_q8_size(128, n_in)) != 0) abort();
    reseed(5100000);
    for (i = 0; i < rows * n_in; i++) x[i] = frand();
    x[20 * n_in + 5] = 100.0f;
    for (i = 0; i < 128 * n_in; i++) q[i] = (signed char)(frand() * 127);
    for (i = 0; i < 128; i++) { scale[i] = 0.01f + 0.001f * (float)i; b[i] = frand(); }
    for (i = 0; i < 3 * 3000; i++) y[i] = 0;
    P->pack_q8(q, scale, 128, n_in, packed);
    /* the whole weight's columns col0.. as one plain product, then by heads */
    P->linear_q8(x, rows, n_in, n_in, (const unsigned char *)packed + ATTNC_Q8_PANEL(n_in), n_out, b + col0, yl, n_out);
    P->linear_heads_q8(x, rows, n_in, n_in, (const unsigned char *)packed + ATTNC_Q8_PANEL(n_in), n_out, b + col0, y, 64,
                       col0, hw, hs);
    for (r = 0; r < rows; r++)
      for (n = 0; n < n_out; n++) {
        const long col = col0 + n;
        if (y[col / hw * hs + r * 64 + col % hw] != yl[r * n_out + n]) fails++;
      }
    if (P->linear_heads_q8_xq) {
      /* x's rows prepared once (q8_quantise, into records a few bytes
       * further apart than they need), then linear_heads_q8_xq: the same
       * bits as linear_heads_q8, a row holding a NaN included */
      const long xqs = P->q8_row_bytes(n_in) + 8;
      static float y2[3 * 3000];
      unsigned char *xq = malloc((size_t)(rows * xqs));
      x[7 * n_in + 2] = NAN;
      P->linear_heads_q8(x, rows, n_in, n_in, (const unsigned char *)packed + ATTNC_Q8_PANEL(n_in), n_out, b + col0, y, 64,
                         col0, hw, hs);
      P->q8_quantise(x, rows, n_in, n_in, xq, xqs);
      for (i = 0; i < 3 * 3000; i++) y2[i] = 0;
      P->linear_heads_q8_xq(xq, xqs, x, rows, n_in, n_in, (const unsigned char *)packed + ATTNC_Q8_PANEL(n_in), n_out,
                            b + col0, y2, 64, col0, hw, hs);
      for (r = 0; r < rows; r++)
        for (n = 0; n < n_out; n++) {
          const long col = col0 + n, at = col / hw * hs + r * 64 + col % hw;
          if (memcmp(&y[at], &y2[at], sizeof y[at]) != 0 || (r == 7) != (isnan(y2[at]) != 0)) {
            if (fails++ < 5) fprintf(stderr, "linear_heads_q8_xq: y[%ld][%ld] = %g, linear_heads_q8 gave %g\n", r, n, y2[at], y[at]);
          }
        }
      free(xq);
    } else {
      printf("SKIP linear_heads_q8_xq: not in this table (%s; it comes with AVX512-VNNI)\n", P->isa);
    }
    free(packed);
  }
  assert_int_equal(fails, 0);
}

/* linear_bf16 of bf16 weights against a float64 loop: rows 1 to 2 passes
 * of AMX's 32-row blocks, n_in odd, across AMX's 32-input chunks and past vdpbf16ps's 512, n_out
 * across panel tails, strides past the rows, with and without a bias.
 * x16: x's values are bf16 (as in a bf16 kernel), so an AMX path's
 * rounding of x is exact; else an AMX path is held to bf16's rounding of x. */
static unsigned short to_bf16(float f)
{
  unsigned u;
  memcpy(&u, &f, sizeof u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(unsigned short h)
{
  unsigned u = (unsigned)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static int check_linear_bf16(const char *isa, void (*lin)(const float *, long, long, long, const void *, long,
                                                            const float *, float *, long), int x16, double rel)
{
  static const long R[] = { 1, 5, 16, 17, 40, 70 }, K[] = { 1, 7, 32, 33, 100, 600 }, N[] = { 1, 31, 33, 64, 70 };
  size_t ri, ki, ni;
  int bad = 0;
  for (ri = 0; ri < sizeof R / sizeof R[0]; ri++)
    for (ki = 0; ki < sizeof K / sizeof K[0]; ki++)
      for (ni = 0; ni < sizeof N / sizeof N[0]; ni++) {
        const long rows = R[ri], n_in = K[ki], n_out = N[ni], xs = n_in + 3, ys = n_out + 5;
        const int with_b = (int)((ri + ki + ni) % 2);
        float *x = malloc(sizeof(float) * rows * xs), *y = malloc(sizeof(float) * rows * ys), *b = malloc(sizeof(float) * n_out);
        unsigned short *w = malloc(sizeof(unsigned short) * n_out * n_in);
        void *packed = NULL;
        long i, r, n, k;
        if (posix_memalign(&packed, 64, (size_t)attnc_prims_pack_bf16_size(n_out, n_in)) != 0) abort();
        reseed((uint64_t)((rows * 131 + n_in) * 131 + n_out) * 2 + (uint64_t)with_b + 6000000);
        for (i = 0; i < rows * xs; i++) x[i] = x16 ? from_bf16(to_bf16(frand())) : frand();
        for (i = 0; i < rows * ys; i++) y[i] = 12345.0f;
        for (i = 0; i < n_out * n_in; i++) w[i] = to_bf16(frand() * 0.5f);
        for (i = 0; i < n_out; i++) b[i] = frand();
        attnc_prims_pack_bf16(w, n_out, n_in, packed);
        lin(x, rows, xs, n_in, packed, n_out, with_b ? b : NULL, y, ys);
        for (r = 0; r < rows; r++)
          for (n = 0; n < ys; n++) {
            double want = with_b && n < n_out ? b[n] : 0, mag = fabs(want), got = y[r * ys + n];
            if (n >= n_out) {
              if (got != 12345.0f) bad++;
              continue;
            }
            for (k = 0; k < n_in; k++) {
              const double term = (double)x[r * xs + k] * from_bf16(w[n * n_in + k]);
              want += term;
              mag += fabs(term);
            }
            if (!(fabs(got - want) <= rel * mag + 1e-7)) {
              if (bad++ < 5)
                fprintf(stderr, "linear_bf16 [%s%s] rows=%ld n_in=%ld n_out=%ld bias=%d: y[%ld][%ld] = %.9g, want %.9g\n",
                        isa, x16 ? "" : " x not bf16", rows, n_in, n_out, with_b, r, n, got, want);
            }
          }
        free(x); free(y); free(b); free(w); free(packed);
      }
  return bad == 0;
}

static void test_prims_linear_bf16(void **state)
{
  const attnc_prims *P = attnc_prims_get();
  int fails = 0;
  (void)state;
  fails += !check_linear_bf16("generic", attnc_prims_linear_bf16_generic, 0, 1e-6);
  if (have_avx512()) fails += !check_linear_bf16("avx512", attnc_prims_linear_bf16_avx512, 0, 1e-6);
  else printf("SKIP avx512 linear_bf16: this CPU has no AVX-512 (generic checked)\n");
  if (have_avx2()) fails += !check_linear_bf16("avx2", attnc_prims_linear_bf16_avx2, 0, 1e-6);
  else printf("SKIP avx2 linear_bf16: this CPU has no AVX2 and FMA (generic checked)\n");
  if (have_avx512() && attnc_prims_amx_ready()) {
    fails += !check_linear_bf16("amx", attnc_prims_linear_bf16_amx, 1, 1e-6);
    fails += !check_linear_bf16("amx", attnc_prims_linear_bf16_amx, 0, 1.0 / 256); /* x rounded: 2^-9 each */
  } else {
    printf("SKIP amx linear_bf16: this CPU or kernel gives no AMX-BF16 tiles (the other paths checked)\n");
  }
  if (attnc_prims_bf16_ready()) {
    fails += !check_linear_bf16("avx512bf16", attnc_prims_linear_bf16_dp, 1, 1e-6);
    fails += !check_linear_bf16("avx512bf16", attnc_prims_linear_bf16_dp, 0, 1.0 / 256); /* x rounded: 2^-9 each */
  } else {
    printf("SKIP avx512bf16 linear_bf16: this CPU has no AVX512-BF16 (the other paths checked)\n");
  }
  fails += !check_linear_bf16(P->isa, P->linear_bf16, 1, 1e-6);
  { /* linear_heads_bf16 against linear_bf16, as test_prims_linear_q8 does */
    const long rows = 20, n_in = 40, n_out = 96, col0 = 32, hw = 64, hs = 2000;
    float x[20 * 40], y[20 * 4000], yl[20 * 96], b[128];
    unsigned short w[128 * 40];
    void *packed = NULL;
    long i, r, n;
    if (posix_memalign(&packed, 64, (size_t)attnc_prims_pack_bf16_size(128, n_in)) != 0) abort();
    reseed(6100000);
    for (i = 0; i < rows * n_in; i++) x[i] = from_bf16(to_bf16(frand()));
    for (i = 0; i < 128 * n_in; i++) w[i] = to_bf16(frand());
    for (i = 0; i < 128; i++) b[i] = frand();
    for (i = 0; i < 20 * 4000; i++) y[i] = 0;
    attnc_prims_pack_bf16(w, 128, n_in, packed);
    P->linear_bf16(x, rows, n_in, n_in, (const unsigned char *)packed + ATTNC_BF16_PANEL(n_in), n_out, b + col0, yl, n_out);
    P->linear_heads_bf16(x, rows, n_in, n_in, (const unsigned char *)packed + ATTNC_BF16_PANEL(n_in), n_out, b + col0, y,
                         64, col0, hw, hs);
    for (r = 0; r < rows; r++)
      for (n = 0; n < n_out; n++) {
        const long col = col0 + n;
        if (y[col / hw * hs + r * 64 + col % hw] != yl[r * n_out + n]) fails++;
      }
    free(packed);
  }
  assert_int_equal(fails, 0);
}

/* widen16 and narrow16 against the portable ones, bit for bit: every
 * 16-bit pattern widened (a NaN only as a NaN: vcvtph2ps quiets it), and
 * narrowed floats around every rounding edge (ties, the largest finite
 * values, subnormals, infinities, NaNs) plus random ones, in an odd count
 * (a masked tail). */
static int check_convert16(const char *isa, void (*widen)(int, const void *, float *, long),
                           void (*narrow)(int, const float *, void *, long))
{
  enum { N = 65536 + 4001 };
  static unsigned short h[65536], h1[N], h2[N];
  static float f1[65536], f2[65536], src[N];
  int f16, bad = 0;
  long i;
  for (i = 0; i < 65536; i++) h[i] = (unsigned short)i;
  reseed(7000000);
  for (f16 = 0; f16 < 2; f16++) {
    attnc_prims_widen16_generic(f16, h, f1, 65536);
    widen(f16, h, f2, 65535); /* the last lane of the last vector masked off */
    f2[65535] = f1[65535];
    for (i = 0; i < 65536; i++)
      if (isnan(f1[i]) ? !isnan(f2[i]) : memcmp(&f1[i], &f2[i], 4) != 0) {
        if (bad++ < 5) fprintf(stderr, "widen16 [%s] f16=%d: 0x%04lx gives %g, want %g\n", isa, f16, i, f2[i], f1[i]);
      }
    /* every widened value (so every exact 16-bit value and its
     * neighbours' halfway points), then random floats of every scale */
    for (i = 0; i < 65536; i++) {
      unsigned u;
      memcpy(&u, &f1[i], 4);
      u += (i % 3 == 0) ? 0 : (i % 3 == 1) ? (f16 ? 0x1000u : 0x8000u) : 1u; /* exact, a tie, just past one */
      memcpy(&src[i], &u, 4);
    }
    for (; i < N; i++) src[i] = ldexpf(frand(), (int)(frand() * 140));
    attnc_prims_narrow16_generic(f16, src, h1, N);
    narrow(f16, src, h2, N);
    for (i = 0; i < N; i++)
      if (h1[i] != h2[i] && bad++ < 10)
        fprintf(stderr, "narrow16 [%s] f16=%d: %a gives 0x%04x, want 0x%04x\n", isa, f16, src[i], h2[i], h1[i]);
  }
  return bad == 0;
}

static void test_prims_convert16(void **state)
{
  int fails = 0;
  (void)state;
  if (have_avx512()) fails += !check_convert16("avx512", attnc_prims_widen16_avx512, attnc_prims_narrow16_avx512);
  else printf("SKIP avx512 widen16/narrow16: this CPU has no AVX-512 (the portable ones are the reference)\n");
  if (have_avx2() && __builtin_cpu_supports("f16c"))
    fails += !check_convert16("avx2", attnc_prims_widen16_avx2, attnc_prims_narrow16_avx2);
  else printf("SKIP avx2 widen16/narrow16: this CPU has no AVX2 with F16C (the portable ones are the reference)\n");
  fails += !check_convert16(attnc_prims_get()->isa, attnc_prims_get()->widen16, attnc_prims_get()->narrow16);
  assert_int_equal(fails, 0);
}

struct case_ {
  long rows, group, c, nk, i0;
  int has_lo, has_hi;
  long lo_off, hi_off;
  int bias, mask, empty;
  long splits;
  int ramp; /* 1: keys from 64 on 4 times as long; 2: key j (1 + j / 32) times as long */
  float cap; /* > 0: the softcap, s = cap * tanh(s / cap) before the bias */
};

/* Double-precision attention of one tile (same visibility rules). */
static void ref_tile(const attnc_tile *t, double *out)
{
  long r, j, d;
  for (r = 0; r < t->rows; r++) {
    long i = t->i0 + r / t->q_group, hh = r % t->q_group, lo = 0, hi = t->nk - 1;
    const float *q = t->q + (r / t->q_group) * t->q_stride + hh * t->q_hstride;
    double m = -INFINITY, l = 0, *o = out + r * t->c;
    if (t->has_lo && i + t->lo_off > lo) lo = i + t->lo_off;
    if (t->has_hi && i + t->hi_off < hi) hi = i + t->hi_off;
    for (j = lo; j <= hi; j++) {
      double s = 0;
      if (t->mask && !t->mask[j * t->mask_j]) continue;
      for (d = 0; d < t->c; d++) s += (double)q[d] * t->k[j * t->k_stride + d];
      s *= t->scale;
      if (t->softcap > 0) s = t->softcap * tanh(s / t->softcap);
      s += t->bias ? t->bias[hh * t->bias_h + i * t->bias_i + j * t->bias_j] : 0;
      if (s > m) m = s;
    }
    for (d = 0; d < t->c; d++) o[d] = 0;
    if (m == -INFINITY) {
      for (d = 0; d < t->c; d++) {
        if (t->empty_rows == 2) o[d] = NAN;
        else if (t->empty_rows == 1)
          for (j = 0; j < t->nk; j++) o[d] += t->v[j * t->v_stride + d] / (double)t->nk;
      }
      continue;
    }
    for (j = lo; j <= hi; j++) {
      double s = 0, p;
      if (t->mask && !t->mask[j * t->mask_j]) continue;
      for (d = 0; d < t->c; d++) s += (double)q[d] * t->k[j * t->k_stride + d];
      s *= t->scale;
      if (t->softcap > 0) s = t->softcap * tanh(s / t->softcap);
      s += t->bias ? t->bias[hh * t->bias_h + i * t->bias_i + j * t->bias_j] : 0;
      p = exp(s - m);
      l += p;
      for (d = 0; d < t->c; d++) o[d] += p * t->v[j * t->v_stride + d];
    }
    for (d = 0; d < t->c; d++) o[d] /= l;
  }
}

/* key_bias 1: the bias is contiguous along the keys (bias_j = 1); 0: one
 * value per row, broadcast over keys (bias_j = 0: the AVX-512 gather path);
 * 2: contiguous along the query rows (bias_i = 1), rows of an odd length
 * apart, as a kernel lays out a shared bias it transposed */
/* how many times the f32 tolerance an attend may take (attend_bf16: its
 * inputs are made exact in bf16, and p is rounded to bf16) */
static double attend_tol = 1;
/* 1: attend is attend_pack, whose copy of k and v (t.k_pack, t.v_pack)
 * must hold every key of [k_begin, k_end) afterwards, seen by a row or not */
static int attend_packs = 0;

static int check_attend(const char *isa, void (*attend)(const attnc_tile *), const struct case_ *cs, int key_bias,
                        long id)
{
  long npos = (cs->rows + cs->group - 1) / cs->group, rows = npos * cs->group;
  long c = cs->c, nk = cs->nk, qs = cs->group * (c + 1), ks = c + 2, n, r, d, s;
  float *q = malloc(sizeof(float) * npos * qs), *k = malloc(sizeof(float) * nk * ks), *v = malloc(sizeof(float) * nk * ks);
  const long ld = cs->i0 + npos + 3; /* key_bias 2: floats from one key's rows to the next's */
  float *bias = malloc(sizeof(float) * cs->group * ld * nk + 1);
  float *o = malloc(sizeof(float) * rows * c), *part = malloc(sizeof(float) * cs->splits * rows * (c + 2));
  unsigned char *mask = malloc((size_t)nk);
  double *want = malloc(sizeof(double) * rows * c), worst = 0;
  int invalid = 0;
  float *work = alloc64(attnc_prims_attend_work(rows, c));
  float *kp = malloc(sizeof(float) * nk * c), *vp = malloc(sizeof(float) * nk * c);
  attnc_tile t;
  reseed(2000000 + (uint64_t)id * 3 + (uint64_t)key_bias);
  for (n = 0; n < npos * qs; n++) q[n] = frand() * 2;
  for (n = 0; n < nk * ks; n++) {
    const long j = n / ks; /* scores that jump, or keep growing, from one key tile to the next */
    k[n] = frand() * 2 * (cs->ramp == 1 ? (j >= 64 ? 4.0f : 1.0f) : cs->ramp == 2 ? 1.0f + (float)j / 32 : 1.0f);
    v[n] = frand();
  }
  if (attend_tol > 1) { /* attend_bf16: q, k and v exact in bf16, as a bf16 kernel's core inputs are */
    for (n = 0; n < nk * ks; n++) {
      k[n] = from_bf16(to_bf16(k[n]));
      v[n] = from_bf16(to_bf16(v[n]));
    }
    for (n = 0; n < npos * qs; n++) q[n] = from_bf16(to_bf16(q[n]));
  }
  for (n = 0; n < cs->group * ld * nk; n++) bias[n] = frand();
  for (n = 0; n < nk; n++) mask[n] = frand() > -0.4f;
  memset(&t, 0, sizeof t);
  t.q = q; t.q_stride = qs; t.q_hstride = c + 1; t.q_group = cs->group;
  t.k = k; t.k_stride = ks; t.v = v; t.v_stride = ks;
  t.o = o; t.o_stride = cs->group * c; t.o_hstride = c;
  t.rows = rows; t.i0 = cs->i0; t.c = c; t.nk = nk; t.k_begin = 0; t.k_end = nk;
  t.scale = 0.3f;
  t.softcap = cs->cap;
  if (cs->bias && key_bias == 2) { t.bias = bias; t.bias_h = ld * nk; t.bias_i = 1; t.bias_j = ld; }
  else if (cs->bias) { t.bias = bias; t.bias_h = (cs->i0 + npos) * nk; t.bias_i = nk; t.bias_j = key_bias ? 1 : 0; }
  if (cs->mask) { t.mask = mask; t.mask_j = 1; }
  t.has_lo = cs->has_lo; t.lo_off = cs->lo_off; t.has_hi = cs->has_hi; t.hi_off = cs->hi_off;
  t.empty_rows = cs->empty;
  t.work = work;
  if (attend_packs) {
    for (n = 0; n < nk * c; n++) kp[n] = vp[n] = NAN;
    t.k_pack = kp;
    t.v_pack = vp;
  }
  ref_tile(&t, want);
  /* masked and causal scores are -inf inside the kernels: their
   * exponentials must come out 0 without raising the invalid-operation
   * flag (-inf - -inf), so that a caller who traps on it (feenableexcept)
   * is not stopped inside a correct attention */
  feclearexcept(FE_INVALID);
  if (cs->splits <= 1) {
    attend(&t);
  } else {
    /* split the keys, keep partial results, combine them */
    long chunk = (nk + cs->splits - 1) / cs->splits;
    float *pm = part + cs->splits * rows * c, *pl = pm + cs->splits * rows;
    for (s = 0; s < cs->splits; s++) {
      attnc_tile ts = t;
      ts.k_begin = s * chunk;
      ts.k_end = (s + 1) * chunk < nk ? (s + 1) * chunk : nk;
      ts.o = part + s * rows * c; ts.o_stride = cs->group * c; ts.o_hstride = c;
      ts.m_out = pm + s * rows;
      ts.l_out = pl + s * rows;
      attend(&ts);
    }
    attnc_prims_get()->combine(&t, cs->splits, part, pm, pl);
  }
  if (fetestexcept(FE_INVALID)) worst = INFINITY, invalid = 1;
  for (r = 0; r < rows; r++)
    for (d = 0; d < c; d++) {
      double got = o[r * c + d], w = want[r * c + d], e;
      if (isnan(w) || isnan(got)) e = (isnan(w) && isnan(got)) ? 0 : INFINITY;
      else e = fabs(got - w) / (attend_tol * (1e-5 + 1e-4 * fabs(w)));
      if (e > worst) worst = e;
    }
  if (attend_packs)
    for (n = 0; n < nk; n++)
      for (d = 0; d < c; d++)
        if (memcmp(&kp[n * c + d], &k[n * ks + d], sizeof(float)) || memcmp(&vp[n * c + d], &v[n * ks + d], sizeof(float))) {
          if (worst <= 1)
            fprintf(stderr, "attend_pack [%s] rows=%ld c=%ld nk=%ld splits=%ld: key %ld's copy differs at %ld\n", isa, rows, c, nk,
                    cs->splits, n, d);
          worst = INFINITY;
        }
  if (worst > 1)
    fprintf(stderr, "attend [%s%s] rows=%ld group=%ld c=%ld nk=%ld i0=%ld lo=%d:%ld hi=%d:%ld bias=%d mask=%d empty=%d splits=%ld cap=%g: error %.3g of tolerance%s\n",
            isa, key_bias == 2 ? " bias_i=1" : key_bias ? "" : " bias_j=0", rows, cs->group, c, nk, cs->i0, cs->has_lo, cs->lo_off, cs->has_hi, cs->hi_off, cs->bias, cs->mask, cs->empty,
            cs->splits, cs->cap, worst, invalid ? " (raised the invalid-operation flag)" : "");
  free(q); free(k); free(v); free(bias); free(o); free(part); free(mask); free(want); free(work); free(kp); free(vp);
  return worst <= 1;
}

static void test_prims_attend(void **state)
{
  static const struct case_ cases[] = {
    { 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0 },
    { 7, 1, 16, 33, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0 },     /* causal */
    { 64, 1, 64, 200, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0 },   /* bias + mask, several key tiles */
    { 64, 4, 64, 130, 5, 1, 1, -3, 2, 1, 1, 1, 1, 0, 0 },  /* GQA group, window, uniform empties */
    { 30, 2, 24, 65, 40, 0, 1, 0, 25, 0, 1, 2, 1, 0, 0 },  /* c not a multiple of 16, bottom-right offsets */
    { 33, 1, 130, 70, 0, 1, 1, -2, 1, 1, 1, 2, 1, 0, 0 },  /* c > 128 */
    { 8, 8, 128, 4096, 0, 0, 0, 0, 0, 0, 1, 0, 8, 0, 0 },  /* decode with key splits */
    { 4, 4, 64, 1500, 0, 0, 1, 0, 1400, 1, 1, 1, 3, 0, 0 },/* splits with a causal end */
    { 6, 2, 40, 131, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0 },   /* decode: rows 4 + 2, keys in 4s + 3, c = 16k + 8 */
    { 3, 1, 20, 66, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0 },    /* decode: 3 rows, keys in 4s + 2 */
    { 16, 1, 32, 50, 0, 1, 1, 60, 70, 0, 0, 2, 1, 0, 0 },  /* every row empty: NaN */
    { 16, 1, 32, 50, 0, 1, 1, 60, 70, 0, 0, 1, 4, 0, 0 },  /* every row empty, split: uniform */
    { 11, 1, 40, 77, 3, 1, 1, -5, 0, 1, 1, 0, 1, 0, 0 },   /* rows in one partial vector, causal window */
    { 256, 4, 64, 150, 0, 0, 1, 0, 20, 1, 1, 1, 1, 0, 0 }, /* GQA: 16 row vectors, bottom-right causal */
    { 80, 8, 16, 64, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0 },    /* 5 row vectors of narrow heads */
    { 45, 1, 19, 140, 0, 0, 1, 0, 3, 0, 0, 0, 1, 0, 0 },   /* c = 4k + 3, rows in 6 vectors (AVX2 p.v blocks) */
    /* no mask (and a bias laid out like the scores, or none): the AVX2
     * kernel's stale max (STALE_MAX) after the first key tile, and the
     * AVX-512 kernel's for heads wider than 32 */
    { 64, 1, 64, 300, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0 },
    { 24, 2, 32, 600, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0 }, /* and key splits */
    { 24, 2, 64, 600, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0 }, /* the same for the AVX-512 kernel's, wide heads only */
    { 40, 1, 64, 260, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0 }, /* scores jump at the second tile: scored again */
    { 64, 1, 48, 330, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0 }, /* scores keep growing */
    /* wide heads, whose AVX-512 q.k takes 6 keys a block: a last key
     * tile of 11 keys (6 + 5) and of 9 (6 + 3) */
    { 24, 1, 64, 75, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0 },
    { 17, 1, 96, 73, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0 },
    /* the softcap, with scores of a few units against caps that put
     * s / cap on both sides of ATTNC_TANH_SMALL (both ways to tanh) */
    { 64, 1, 64, 200, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 2.0f },  /* bias + mask, several key tiles */
    { 40, 1, 64, 300, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3.0f },  /* nothing masked: the stale max */
    { 40, 1, 64, 260, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 4.0f },  /* scores jump at the second tile */
    { 24, 2, 32, 600, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 1.0f },  /* narrow heads, key splits */
    { 33, 1, 130, 70, 0, 1, 1, -2, 1, 1, 1, 2, 1, 0, 1.5f }, /* c > 128, window, NaN empties */
    { 6, 2, 40, 131, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0.7f },   /* decode */
    { 3, 1, 20, 66, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 5.0f },    /* decode, a mask */
  };
  size_t i;
  int fails = 0, kb;
  (void)state;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (kb = 0; kb < 3; kb++) { /* each bias layout (check_attend's key_bias) */
      fails += !check_attend("generic", attnc_prims_attend_generic, &cases[i], kb, (long)i);
      if (have_avx512()) fails += !check_attend("avx512", attnc_prims_attend_avx512, &cases[i], kb, (long)i);
      if (have_avx2()) fails += !check_attend("avx2", attnc_prims_attend_avx2, &cases[i], kb, (long)i);
      if (have_avx512()) { /* and attend_pack (layout bshc's first tile of a kv head) */
        attend_packs = 1;
        fails += !check_attend("avx512 pack", attnc_prims_attend_pack_avx512, &cases[i], kb, (long)i);
        attend_packs = 0;
      }
    }
  if (!have_avx512()) printf("SKIP avx512 attend: this CPU has no AVX-512 (generic checked)\n");
  if (!have_avx2()) printf("SKIP avx2 attend: this CPU has no AVX2 and FMA (generic checked)\n");
  assert_int_equal(fails, 0);
}

/* attend_bf16 on AMX or on vdpbf16ps: the tiles they take (16 rows or
 * more, head dim a multiple of 32, no key split) across row and key counts, GQA groups,
 * causal and window ranges, empty rows, a bias and mask and the key tail,
 * against the float64 tile on q, k and v exact in bf16, held to 200 times
 * the f32 tolerance (p rounded to bf16; a misplaced element errs by far
 * more).  Head dims 32 and 64 take the transposed form: 300 keys span
 * three of its 128-key conversions, and the plain cases alternate with
 * scores that grow key by key (ramp 2), so that its rows' maxima pass
 * integers and O^T is rescaled (in the tiles, or in the work region). */
static int check_attend_bf16(const char *isa, void (*attend)(const attnc_tile *))
{
  static const long rows_[] = { 16, 17, 33, 64, 200, 256 }, c_[] = { 32, 64, 128 }, nk_[] = { 1, 31, 32, 33, 100, 300 };
  size_t a, b2, c2;
  int fails = 0;
  long id = 0;
  attend_tol = 200;
  for (a = 0; a < sizeof rows_ / sizeof rows_[0]; a++)
    for (b2 = 0; b2 < sizeof c_ / sizeof c_[0]; b2++)
      for (c2 = 0; c2 < sizeof nk_ / sizeof nk_[0]; c2++, id++) {
        /* alternate: plain; GQA group 4 with a causal end; a window with NaN
         * empties; a bias along the keys with a key mask */
        const int kind = (int)(id % 4);
        struct case_ cs;
        memset(&cs, 0, sizeof cs);
        cs.rows = rows_[a];
        cs.group = kind == 1 ? 4 : 1;
        cs.c = c_[b2];
        cs.nk = nk_[c2];
        cs.splits = 1;
        if (kind == 0) cs.ramp = (int)(c2 % 2) * 2;
        if (kind == 1) { cs.has_hi = 1; cs.hi_off = 2; }
        if (kind == 2) { cs.has_lo = 1; cs.lo_off = -3; cs.has_hi = 1; cs.hi_off = 0; cs.i0 = 5; cs.empty = 2; }
        if (kind == 3) { cs.bias = 1; cs.mask = 1; cs.group = 2; cs.i0 = 3; }
        fails += !check_attend(isa, attend, &cs, 1, id);
        if (kind == 3) { /* the bias laid out along the rows, one head */
          cs.group = 1;
          fails += !check_attend(isa, attend, &cs, 2, id);
        }
      }
  attend_tol = 1;
  return fails;
}

static void test_prims_attend_bf16(void **state)
{
  int fails = 0;
  (void)state;
  if (have_avx512() && attnc_prims_amx_ready()) fails += check_attend_bf16("amx", attnc_prims_attend_bf16_amx);
  else printf("SKIP amx attend_bf16: this CPU or kernel gives no AMX-BF16 tiles\n");
  if (attnc_prims_bf16_ready()) fails += check_attend_bf16("avx512bf16", attnc_prims_attend_bf16_dp);
  else printf("SKIP avx512bf16 attend_bf16: this CPU has no AVX512-BF16\n");
  assert_int_equal(fails, 0);
}

/* attend_kv: a tile of `rows` rows (one query position per q_group
 * heads, as in decoding) against nk keys stored as bf16, f16 (a fifth of
 * the keys' values f16 subnormals, a seventh of the values' 300 to 1000,
 * so that an f16 element read as anything else shows) or int8 with per-row
 * scales, in rows of c + 3 elements; against a float64 loop over the
 * stored values widened exactly.  feature: 0 none; 1 key mask and a
 * bias; 2 causal (the last position sees every key) in 3 key splits and
 * the combine; 3 a window that leaves some rows no key, empty rows NaN;
 * 4 a softcap of 3 (scores of a few units), with a key mask.  The key
 * splits' row maxima and sums are checked too, to f32's precision. */
static const char *kv_name(int kv_type)
{
  return kv_type == ATTNC_KV_BF16 ? "bf16" : kv_type == ATTNC_KV_BF16_ROUND ? "bf16, q and p bf16"
         : kv_type == ATTNC_KV_F16 ? "f16" : "int8";
}

static int check_attend_kv(const char *isa,
                           void (*fn)(const attnc_tile *, int, const void *, const float *, const void *, const float *),
                           int kv_type, long rows, long c, long nk, int feature, long id)
{
  const long ks = c + 3, group = feature == 2 || feature == 3 ? 1 : rows, npos = rows / group, splits = feature == 2 ? 3 : 1;
  unsigned short *kb = malloc(sizeof(short) * nk * ks), *vb = malloc(sizeof(short) * nk * ks);
  signed char *ki = malloc((size_t)(nk * ks)), *vi = malloc((size_t)(nk * ks));
  float *ksc = malloc(sizeof(float) * nk), *vsc = malloc(sizeof(float) * nk);
  float *kf = malloc(sizeof(float) * nk * ks), *vf = malloc(sizeof(float) * nk * ks); /* exact widened copies */
  float *q = malloc(sizeof(float) * rows * c), *o = malloc(sizeof(float) * rows * c);
  float *bias = malloc(sizeof(float) * rows * nk), *part = malloc(sizeof(float) * splits * rows * (c + 2));
  float *work = alloc64(attnc_prims_attend_work(rows, c));
  unsigned char *mask = malloc((size_t)nk);
  double *want = malloc(sizeof(double) * rows * c), worst = 0, p_err = 0;
  const int bf = kv_type == ATTNC_KV_BF16 || kv_type == ATTNC_KV_BF16_ROUND;
  long n, r, d, sp;
  attnc_tile t;
  reseed(5000000 + (uint64_t)id);
  for (n = 0; n < rows * c; n++) q[n] = frand() * 2;
  if (kv_type == ATTNC_KV_BF16_ROUND && id % 2) /* a core bf16 kernel's q is bf16 (one part); a projection's is not (two) */
    for (n = 0; n < rows * c; n++) {
      unsigned short h;
      attnc_prims_narrow16_generic(0, &q[n], &h, 1);
      attnc_prims_widen16_generic(0, &h, &q[n], 1);
    }
  for (n = 0; n < nk; n++) {
    ksc[n] = 0.004f + 0.02f * (frand() + 1);
    vsc[n] = 0.004f + 0.02f * (frand() + 1);
    mask[n] = frand() > -0.5f;
  }
  for (n = 0; n < rows * nk; n++) bias[n] = frand();
  for (n = 0; n < nk * ks; n++) {
    union { float f; uint32_t u; } a, b;
    a.f = frand() * 2;
    b.f = frand();
    kb[n] = (unsigned short)(a.u >> 16);
    vb[n] = (unsigned short)(b.u >> 16);
    ki[n] = (signed char)(long)(frand() * 127);
    vi[n] = (signed char)(long)(frand() * 127);
    a.u = (uint32_t)kb[n] << 16;
    b.u = (uint32_t)vb[n] << 16;
    kf[n] = bf ? a.f : (float)ki[n] * ksc[n / ks];
    vf[n] = bf ? b.f : (float)vi[n] * vsc[n / ks];
    /* BF16_ROUND may round each p to bf16 (2^-8 of it): the output moves
     * by at most 2^-8 of the largest |v| (the p sum to 1) */
    if (kv_type == ATTNC_KV_BF16_ROUND && fabs(vf[n]) / 256 > p_err) p_err = fabs(vf[n]) / 256;
    if (kv_type == ATTNC_KV_F16) {
      a.f = frand() * (n % 5 == 0 ? 4e-5f : 2.0f);
      b.f = n % 7 == 0 ? 300.0f + 700.0f * fabsf(frand()) : frand(); /* positive: no cancellation in the sums */
      attnc_prims_narrow16_generic(1, &a.f, &kb[n], 1);
      attnc_prims_narrow16_generic(1, &b.f, &vb[n], 1);
      attnc_prims_widen16_generic(1, &kb[n], &kf[n], 1);
      attnc_prims_widen16_generic(1, &vb[n], &vf[n], 1);
    }
  }
  memset(&t, 0, sizeof t);
  t.q = q; t.q_stride = group * c; t.q_hstride = c; t.q_group = group;
  t.k = kf; t.k_stride = ks; t.v = vf; t.v_stride = ks; /* for the reference only */
  t.o = o; t.o_stride = group * c; t.o_hstride = c;
  t.rows = rows; t.c = c; t.nk = nk; t.k_begin = 0; t.k_end = nk;
  t.i0 = feature == 2 ? nk - npos : feature == 3 ? nk / 2 : 0;
  t.scale = 1.0f / sqrtf((float)c);
  if (feature == 1) {
    t.bias = bias; t.bias_h = nk; t.bias_i = group * nk; t.bias_j = 1;
    t.mask = mask; t.mask_j = 1;
  }
  if (feature == 2) { t.has_hi = 1; t.hi_off = 0; }
  if (feature == 4) { t.softcap = 3.0f; t.scale = 2.0f / sqrtf((float)c); t.mask = mask; t.mask_j = 1; }
  if (feature == 3) { t.has_lo = 1; t.lo_off = -3; t.has_hi = 1; t.hi_off = 2 - (long)rows; t.empty_rows = ATTNC_EMPTY_NAN; }
  t.work = work;
  ref_tile(&t, want);
  {
    const void *k = kv_type == ATTNC_KV_INT8 ? (const void *)ki : (const void *)kb;
    const void *v = kv_type == ATTNC_KV_INT8 ? (const void *)vi : (const void *)vb;
    t.k = t.v = NULL; /* the primitive reads the stored rows only */
    if (splits <= 1) {
      fn(&t, kv_type, k, ksc, v, vsc);
    } else {
      const long chunk = (nk + splits - 1) / splits;
      float *pm = part + splits * rows * c, *pl = pm + splits * rows;
      for (sp = 0; sp < splits; sp++) {
        attnc_tile ts = t;
        ts.k_begin = sp * chunk < nk ? sp * chunk : nk;
        ts.k_end = (sp + 1) * chunk < nk ? (sp + 1) * chunk : nk;
        ts.o = part + sp * rows * c; ts.o_stride = group * c; ts.o_hstride = c;
        ts.m_out = pm + sp * rows;
        ts.l_out = pl + sp * rows;
        fn(&ts, kv_type, k, ksc, v, vsc);
        /* each split's row max and sum (base e) against float64: a wrong
         * score shows here, before the combine can average it away */
        for (r = 0; r < rows; r++) {
          double m = -INFINITY, l = 0;
          long j;
          int pass;
          for (pass = 0; pass < 2; pass++)
            for (j = ts.k_begin; j < ts.k_end && j <= ts.i0 + r; j++) {
              double dot = 0;
              for (d = 0; d < c; d++) dot += (double)q[r * c + d] * kf[j * ks + d];
              dot *= t.scale;
              if (pass == 0) m = dot > m ? dot : m;
              else l += exp(dot - m);
            }
          if (m == -INFINITY ? ts.m_out[r] != -INFINITY || ts.l_out[r] != 0
                             : fabs(ts.m_out[r] - m) > 1e-5 * (1 + fabs(m)) || fabs(ts.l_out[r] - l) > 1e-4 * l)
            worst = INFINITY;
        }
      }
      attnc_prims_combine_generic(&t, splits, part, pm, pl);
    }
  }
  for (r = 0; r < rows; r++)
    for (d = 0; d < c; d++) {
      double got = o[r * c + d], w = want[r * c + d], e;
      if (isnan(w) || isnan(got)) e = (isnan(w) && isnan(got)) ? 0 : INFINITY;
      else e = fabs(got - w) / (1e-5 + 1e-4 * fabs(w) + p_err);
      if (e > worst) worst = e;
    }
  if (worst > 1)
    fprintf(stderr, "attend_kv [%s %s] rows=%ld c=%ld nk=%ld feature=%d: error %.3g of tolerance\n", isa,
            kv_name(kv_type), rows, c, nk, feature, worst);
  free(kb); free(vb); free(ki); free(vi); free(ksc); free(vsc); free(kf); free(vf); free(q); free(o);
  free(bias); free(part); free(work); free(mask); free(want);
  return worst <= 1;
}

static void test_prims_attend_kv(void **state)
{
  /* c: one to eight whole 16-lane vectors, 40 and 20 leave the last one part full (20: a part-full 8-lane one);
   * 32, 64, 96, 128: one to four whole 32-value chunks (vdpbf16ps: 96 ends on a pass of one chunk) */
  static const long nks[] = { 1, 63, 65, 1000 }, cs[] = { 16, 20, 32, 40, 64, 96, 128 };
  static const int kts[] = { ATTNC_KV_BF16, ATTNC_KV_F16, ATTNC_KV_INT8, ATTNC_KV_BF16_ROUND };
  const int avx2 = have_avx2() && __builtin_cpu_supports("f16c"); /* its attend_kv is compiled for F16C */
  const int dp = have_avx512() && have_avx512_bf16();
  int fails = 0, kt, f;
  long id = 0, rows;
  size_t a, b, i;
  (void)state;
  for (i = 0; i < sizeof kts / sizeof kts[0]; i++)
    for (a = 0; a < sizeof nks / sizeof nks[0]; a++)
      for (b = 0; b < sizeof cs / sizeof cs[0]; b++)
        for (rows = 1; rows <= 8; rows++)
          for (f = 0; f < 5; f++, id++) {
            if (f > 0 && (rows + f + (long)a + (long)b) % 3) continue; /* the features on a third of the shapes */
            kt = kts[i];
            fails += !check_attend_kv("generic", attnc_prims_attend_kv_generic, kt, rows, cs[b], nks[a], f, id);
            if (have_avx512())
              fails += !check_attend_kv("avx512", attnc_prims_attend_kv_avx512, kt, rows, cs[b], nks[a], f, id);
            if (avx2) fails += !check_attend_kv("avx2", attnc_prims_attend_kv_avx2, kt, rows, cs[b], nks[a], f, id);
            /* vdpbf16ps wherever the CPU has it, whether or not the table takes it (AMX parts) */
            if (dp) fails += !check_attend_kv("avx512-bf16", attnc_prims_attend_kv_bf16dp, kt, rows, cs[b], nks[a], f, id);
          }
  if (!have_avx512()) printf("SKIP avx512 attend_kv: this CPU has no AVX-512 (generic checked)\n");
  if (!avx2) printf("SKIP avx2 attend_kv: this CPU has no AVX2 with F16C (generic checked)\n");
  if (!dp) printf("SKIP avx512-bf16 attend_kv: this CPU has no AVX512-BF16 (the f32 paths checked)\n");
  assert_int_equal(fails, 0);
}

static int check_sigmoid_mul(const char *isa, void (*f)(const float *, float *, long))
{
  float g[37], o[37], o2[37];
  long i;
  int bad = 0;
  reseed(3000000);
  for (i = 0; i < 37; i++) { g[i] = frand() * 30; o[i] = o2[i] = frand(); }
  g[3] = 200; g[4] = -200; /* past where e^-g over- and underflows */
  f(g, o, 37);
  for (i = 0; i < 37; i++) {
    double want = o2[i] / (1 + exp(-(double)g[i]));
    if (!(fabs(o[i] - want) <= 1e-6 + 1e-5 * fabs(want))) {
      fprintf(stderr, "sigmoid_mul [%s] g=%g o=%g: got %g, want %g\n", isa, g[i], o2[i], o[i], want);
      bad++;
    }
  }
  return bad == 0;
}

static void test_prims_sigmoid_mul(void **state)
{
  int fails = 0;
  (void)state;
  fails += !check_sigmoid_mul("generic", attnc_prims_sigmoid_mul_generic);
  fails += !check_sigmoid_mul(attnc_prims_get()->isa, attnc_prims_get()->sigmoid_mul);
  if (have_avx2()) fails += !check_sigmoid_mul("avx2", attnc_prims_sigmoid_mul_avx2);
  assert_int_equal(fails, 0);
}

typedef void (*matmul_fn)(long, long, long, const float *, long, long, const float *, long, float *, long, int);

/* c (m x n, rows n + 3 apart) = a b (+ c when acc) against a double loop,
 * a read as a (m x k) matrix (trans 0: rows k + 1 apart) or as the
 * transpose of a (k x m) one (trans 1: a backward's p^T dO); the gaps
 * between c's rows must survive.  Then the same product one row and one
 * column block at a time must give the same bits (the backward's tiles
 * and items split it so). */
static int check_matmul(const char *isa, matmul_fn f, long m, long n, long k, int trans, int acc)
{
  const long lda = trans ? m + 2 : k + 1, ldb = n + 5, ldc = n + 3;
  const long a_rs = trans ? 1 : lda, a_cs = trans ? lda : 1;
  float *a = malloc(sizeof(float) * (size_t)((trans ? k : m) * lda)), *b = malloc(sizeof(float) * (size_t)(k * ldb));
  float *c = malloc(sizeof(float) * (size_t)(m * ldc)), *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
  float *c2 = malloc(sizeof(float) * (size_t)(m * ldc));
  double worst = 0;
  long i, j, p, same = 1;
  reseed((uint64_t)(((m * 4099 + n) * 4099 + k) * 4 + trans * 2 + acc) + 7000001);
  for (i = 0; i < (trans ? k : m) * lda; i++) a[i] = frand();
  for (i = 0; i < k * ldb; i++) b[i] = frand();
  for (i = 0; i < m * ldc; i++) c0[i] = i % ldc < n ? frand() : 12345.0f;
  memcpy(c, c0, sizeof(float) * (size_t)(m * ldc));
  f(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, acc);
  for (i = 0; i < m; i++) {
    for (j = 0; j < n; j++) {
      double want = acc ? c0[i * ldc + j] : 0, mag = fabs(want), e;
      for (p = 0; p < k; p++) {
        const double t = (double)a[i * a_rs + p * a_cs] * b[p * ldb + j];
        want += t;
        mag += fabs(t);
      }
      e = fabs(c[i * ldc + j] - want) / (1e-6 * mag + 1e-30);
      if (e > worst) worst = e;
    }
    for (j = n; j < ldc; j++)
      if (c[i * ldc + j] != 12345.0f) worst = INFINITY;
  }
  memcpy(c2, c0, sizeof(float) * (size_t)(m * ldc));
  for (i = 0; i < m; i++)
    for (j = 0; j < n; j += 17) /* odd column blocks: vectors start anywhere */
      f(1, n - j < 17 ? n - j : 17, k, a + i * a_rs, a_rs, a_cs, b + j, ldb, c2 + i * ldc + j, ldc, acc);
  for (i = 0; i < m * ldc; i++) same &= c[i] == c2[i] || (c[i] != c[i] && c2[i] != c2[i]);
  free(a); free(b); free(c); free(c0); free(c2);
  if (worst > 1 || !same)
    fprintf(stderr, "matmul [%s] m=%ld n=%ld k=%ld trans=%d acc=%d: error %.3g of tolerance%s\n", isa, m, n, k, trans, acc,
            worst, same ? "" : "; the bits depend on the split");
  return worst <= 1 && same;
}

/* The shapes a backward's tiles give it: rows (1, 7, 17) against keys
 * (1, 63, 65) with head widths c (16, 40, 64, 128): s = q k^T and dp =
 * dO v^T (rows x keys over c), dq += ds k (rows x c over keys), dv += p^T
 * dO and dk += ds^T q (keys x c over rows, a transposed). */
static void test_prims_matmul(void **state)
{
  static const long rows[] = { 1, 7, 17 }, keys[] = { 1, 63, 65 }, cs[] = { 16, 40, 64, 128 };
  struct { const char *isa; matmul_fn f; int on; } fns[3];
  size_t r, j, d, u;
  int acc, fails = 0;
  (void)state;
  fns[0].isa = "generic"; fns[0].f = attnc_prims_matmul_generic; fns[0].on = 1;
  fns[1].isa = "avx512"; fns[1].f = attnc_prims_matmul_avx512; fns[1].on = have_avx512();
  fns[2].isa = "avx2"; fns[2].f = attnc_prims_matmul_avx2; fns[2].on = have_avx2();
  assert_non_null(attnc_prims_get()->matmul);
  for (u = 0; u < 3; u++) {
    if (!fns[u].on) continue;
    for (r = 0; r < 3; r++)
      for (j = 0; j < 3; j++)
        for (d = 0; d < 4; d++)
          for (acc = 0; acc < 2; acc++) {
            fails += !check_matmul(fns[u].isa, fns[u].f, rows[r], keys[j], cs[d], 0, acc);
            fails += !check_matmul(fns[u].isa, fns[u].f, rows[r], cs[d], keys[j], 0, acc);
            fails += !check_matmul(fns[u].isa, fns[u].f, keys[j], cs[d], rows[r], 1, acc);
          }
  }
  fails += !check_matmul("table", attnc_prims_get()->matmul, 16, 64, 64, 0, 1);
  if (!have_avx512()) printf("SKIP avx512 matmul: this CPU has no AVX-512 (generic checked)\n");
  if (!have_avx2()) printf("SKIP avx2 matmul: this CPU has no AVX2 and FMA (generic checked)\n");
  assert_int_equal(fails, 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_prims_linear),
    cmocka_unit_test(test_prims_linear_splits),
    cmocka_unit_test(test_prims_linear_heads),
    cmocka_unit_test(test_prims_linear_q8),
    cmocka_unit_test(test_prims_linear_bf16),
    cmocka_unit_test(test_prims_convert16),
    cmocka_unit_test(test_prims_attend),
    cmocka_unit_test(test_prims_attend_bf16),
    cmocka_unit_test(test_prims_attend_kv),
    cmocka_unit_test(test_prims_sigmoid_mul),
    cmocka_unit_test(test_prims_matmul),
  };
  printf("primitives in use: %s\n", attnc_prims_get()->isa);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
