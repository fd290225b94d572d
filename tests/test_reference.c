/* Tests of the float64 reference itself, on cases small enough to work out
 * by hand (or, for the broadcasting rules, against a brute-force loop written
 * directly over the original axes).  If the reference is wrong, every kernel
 * check built on it is meaningless, so each rule gets its own case. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "reference.h"

/* cmocka's assert_float_equal rounds to float; these cases need doubles. */
#define assert_near(got, want, tol)                                             \
  do {                                                                          \
    double got_ = (got), want_ = (want);                                        \
    if (!(fabs(got_ - want_) <= (tol))) {                                       \
      print_error("%s = %.17g, want %.17g (tol %g)\n", #got, got_, want_,       \
                  (double)(tol));                                               \
      fail();                                                                   \
    }                                                                           \
  } while (0)

#define TOL 1e-12
#define LN2 0.69314718055994530942

/* Full mode, self-attention, no options: the caller turns on what it tests. */
static ref_problem full_problem(int rank, const long *x, int attn_axis, int H, int G, int c)
{
  ref_problem p;
  memset(&p, 0, sizeof p);
  p.rank = rank;
  for (int a = 0; a < rank; a++) p.x[a] = p.kv[a] = x[a];
  p.attn_axis = attn_axis;
  p.H = H;
  p.G = G;
  p.c = c;
  p.scale = 1.0 / sqrt((double)c);
  return p;
}

static ref_problem core_problem(int rank, const long *q, const long *kv)
{
  ref_problem p;
  memset(&p, 0, sizeof p);
  p.core = 1;
  p.rank = rank;
  for (int a = 0; a < rank; a++) {
    p.x[a] = q[a];
    p.kv[a] = kv[a];
  }
  p.H = (int)q[rank - 3];
  p.G = (int)kv[rank - 3];
  p.c = (int)q[rank - 1];
  p.scale = 1.0 / sqrt((double)p.c);
  return p;
}

static ref_tensors no_tensors(void)
{
  ref_tensors t;
  memset(&t, 0, sizeof t);
  return t;
}

/* One head, c = 1, all projections 1: q = k = v = x.  With scale = ln 2 the
 * softmax weights are powers of two, so the answer is a small fraction. */
static void test_reference_one_head_by_hand(void **state)
{
  (void)state;
  long xs[] = { 3, 1 };
  ref_problem p = full_problem(2, xs, 0, 1, 1, 1);
  p.scale = LN2;
  p.out_bias = 1;
  double x[] = { 0, 1, 2 }, one[] = { 1 }, wo[] = { 2 }, bo[] = { 0.5 };
  ref_tensors t = no_tensors();
  t.x = x;
  t.wq = t.wk = t.wv = one;
  t.wo = wo;
  t.bo = bo;
  double out[3];
  assert_int_equal(ref_attention(&p, &t, out), 0);
  /* row 0: logits all 0 -> mean of v = 1
   * row 1: weights 1:2:4 -> (0 + 2 + 8) / 7
   * row 2: weights 1:4:16 -> (0 + 4 + 32) / 21;  out = 2 o + 0.5 */
  assert_near(out[0], 2.0 * 1.0 + 0.5, TOL);
  assert_near(out[1], 2.0 * 10.0 / 7.0 + 0.5, TOL);
  assert_near(out[2], 2.0 * 36.0 / 21.0 + 0.5, TOL);
}

/* Cross-attention: kv has its own length (3) and width (2); Wk reads kv
 * column 0, Wv column 1. */
static void test_reference_cross_attention_by_hand(void **state)
{
  (void)state;
  long xs[] = { 2, 1 };
  ref_problem p = full_problem(2, xs, 0, 1, 1, 1);
  p.kv[0] = 3;
  p.kv[1] = 2;
  p.scale = LN2;
  double x[] = { 0, 1 }, kv[] = { 0, 3, 1, 5, 2, 7 };
  double one[] = { 1 }, wk[] = { 1, 0 }, wv[] = { 0, 1 };
  ref_tensors t = no_tensors();
  t.x = x;
  t.kv = kv;
  t.wq = t.wo = one;
  t.wk = wk;
  t.wv = wv;
  double out[2];
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_near(out[0], (3.0 + 5.0 + 7.0) / 3.0, TOL);             /* uniform */
  assert_near(out[1], (1 * 3.0 + 2 * 5.0 + 4 * 7.0) / 7.0, TOL); /* 1:2:4 */
}

/* x (2 batches, 2 positions, width 1), identity projections, so out = o.
 * Batch 0 keeps key 0 only; batch 1 masks every key: its rows are empty. */
static void run_empty_rows(int mode, double *out)
{
  long xs[] = { 2, 2, 1 };
  ref_problem p = full_problem(3, xs, 1, 1, 1, 1);
  p.has_mask = 1;
  p.mask_rank = 2;
  p.mask[0] = 2;
  p.mask[1] = 2;
  p.empty_rows = mode;
  double x[] = { 1, 2, 3, 5 }, one[] = { 1 }, mask[] = { 1, 0, 0, 0 };
  ref_tensors t = no_tensors();
  t.x = x;
  t.mask = mask;
  t.wq = t.wk = t.wv = t.wo = one;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  /* batch 0 sees only key 0 (v = 1), whatever the mode */
  assert_near(out[0], 1.0, TOL);
  assert_near(out[1], 1.0, TOL);
}

static void test_reference_empty_rows_zero(void **state)
{
  (void)state;
  double out[4];
  run_empty_rows(REF_EMPTY_ZERO, out);
  assert_true(out[2] == 0.0 && out[3] == 0.0);
}

static void test_reference_empty_rows_uniform(void **state)
{
  (void)state;
  double out[4];
  run_empty_rows(REF_EMPTY_UNIFORM, out);
  assert_near(out[2], (3.0 + 5.0) / 2.0, TOL);   /* mean of v over all keys */
  assert_near(out[3], (3.0 + 5.0) / 2.0, TOL);
}

static void test_reference_empty_rows_nan(void **state)
{
  (void)state;
  double out[4];
  run_empty_rows(REF_EMPTY_NAN, out);
  assert_true(isnan(out[2]) && isnan(out[3]));
}

/* Core mode, one head, q = k = 0 so every visible key has the same logit,
 * v = one-hot rows: o[i][j] = 1/n if row i sees key j (of n), else 0.  This
 * reads the visibility pattern straight off the output, and ref_visible
 * must give the same pattern. */
static void check_pattern(int causal, int has_window, long wl, long wr, long Sq, long Sk,
                          const double *want)
{
  long qs[] = { 1, Sq, Sk }, kvs[] = { 1, Sk, Sk };
  ref_problem p = core_problem(3, qs, kvs);
  p.causal = causal;
  p.has_window = has_window;
  p.wl = wl;
  p.wr = wr;
  double q[64] = { 0 }, k[64] = { 0 }, v[64] = { 0 }, out[64];
  for (long j = 0; j < Sk; j++) v[j * Sk + j] = 1.0;
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (long e = 0; e < Sq * Sk; e++) assert_near(out[e], want[e], TOL);
  unsigned char vis[64];
  assert_int_equal(ref_visible(&p, &t, vis), Sq * Sk);
  for (long e = 0; e < Sq * Sk; e++) assert_int_equal(vis[e], want[e] != 0);
}

static void test_reference_causal_top_left(void **state)
{
  (void)state;
  const double fewer_q[] = { 1, 0, 0, 0,            /* Sq=2, Sk=4: row i sees j <= i */
                             .5, .5, 0, 0 };
  check_pattern(REF_CAUSAL_TOP_LEFT, 0, 0, 0, 2, 4, fewer_q);
  const double more_q[] = { 1, 0,                   /* Sq=3, Sk=2 */
                            .5, .5,
                            .5, .5 };
  check_pattern(REF_CAUSAL_TOP_LEFT, 0, 0, 0, 3, 2, more_q);
}

static void test_reference_causal_bottom_right(void **state)
{
  (void)state;
  const double fewer_q[] = { 1. / 3, 1. / 3, 1. / 3, 0,   /* j <= i + 2 */
                             .25, .25, .25, .25 };
  check_pattern(REF_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 2, 4, fewer_q);
  const double more_q[] = { 0, 0,     /* j <= i - 1: row 0 sees nothing (ZERO) */
                            1, 0,
                            .5, .5 };
  check_pattern(REF_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 3, 2, more_q);
}

static void test_reference_window(void **state)
{
  (void)state;
  const double one_back[] = { 1, 0, 0, 0,   /* wl=1, wr=0: keys i-1 and i */
                              .5, .5, 0, 0,
                              0, .5, .5, 0,
                              0, 0, .5, .5 };
  check_pattern(REF_CAUSAL_NONE, 1, 1, 0, 4, 4, one_back);
  /* with bottom_right, p = i + 2: causal j <= i+2 and window j >= i+1 */
  const double shifted[] = { 0, .5, .5, 0,
                             0, 0, .5, .5 };
  check_pattern(REF_CAUSAL_BOTTOM_RIGHT, 1, 1, 5, 2, 4, shifted);
}

/* ref_visible with a key mask per batch element and causal, in the
 * weights' layout (B, H, Sq, Sk); it reads the mask and nothing else. */
static void test_reference_visible_mask(void **state)
{
  (void)state;
  long qs[] = { 2, 1, 3, 4 };
  ref_problem p = core_problem(4, qs, qs);
  const double mask[] = { 1, 1, 0,
                          0, 1, 1 };
  const unsigned char want[] = { 1, 0, 0,  1, 1, 0,  1, 1, 0,    /* batch 0: key 2 padded */
                                 0, 0, 0,  0, 1, 0,  0, 1, 1 };  /* batch 1: key 0 padded */
  unsigned char vis[18];
  p.causal = REF_CAUSAL_TOP_LEFT;
  p.has_mask = 1;
  p.mask_rank = 2;
  p.mask[0] = 2;
  p.mask[1] = 3;
  ref_tensors t = no_tensors();
  assert_int_equal(ref_visible(&p, &t, vis), -1);   /* a mask without its tensor */
  t.mask = mask;
  assert_int_equal(ref_visible(&p, &t, vis), 18);
  assert_memory_equal(vis, want, sizeof want);
}

static void test_reference_global_ungated_shape(void **state)
{
  (void)state;
  long xs[] = { 2, 3, 4 };
  ref_problem p = full_problem(3, xs, 0, 2, 1, 2);
  p.global = 1;
  int rank = 0;
  long shape[REF_MAX_RANK];
  assert_int_equal(ref_output_shape(&p, &rank, shape), 1 * 3 * 4);
  assert_int_equal(rank, 3);
  assert_int_equal(shape[0], 1);
  assert_int_equal(shape[1], 3);
  assert_int_equal(shape[2], 4);
  /* gated: the one row is broadcast back over the axis */
  p.gated = 1;
  assert_int_equal(ref_output_shape(&p, &rank, shape), 2 * 3 * 4);
  assert_int_equal(shape[0], 2);
}

/* Global, c = 1, projections 1: the averaged query attends to all keys. */
static void test_reference_global_by_hand(void **state)
{
  (void)state;
  long xs[] = { 3, 1 };
  ref_problem p = full_problem(2, xs, 0, 1, 1, 1);
  p.global = 1;
  p.scale = LN2;
  double x[] = { 0, 1, 2 }, one[] = { 1 }, zero[] = { 0 }, mask[] = { 1, 1, 0 };
  ref_tensors t = no_tensors();
  t.x = x;
  t.wq = t.wk = t.wv = t.wo = one;
  double out[3];

  /* plain mean q = 1: weights 1:2:4 over v = 0, 1, 2 */
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_near(out[0], 10.0 / 7.0, TOL);

  /* masked mean over positions 0, 1: q = 0.5, key 2 hidden: weights 1:sqrt2 */
  p.has_mask = 1;
  p.mask_rank = 1;
  p.mask[0] = 3;
  p.global_masked = 1;
  t.mask = mask;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_near(out[0], sqrt(2.0) / (1.0 + sqrt(2.0)), TOL);

  /* gated: the one row times sigmoid(x_i) at each position */
  p.has_mask = 0;
  p.global_masked = 0;
  p.gated = 1;
  t.wg = one;
  t.bg = zero;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (int i = 0; i < 3; i++)
    assert_near(out[i], 10.0 / 7.0 / (1.0 + exp(-x[i])), TOL);
}

/* H = 4 query heads over G = 2 kv heads: heads 0,1 read kv head 0, heads 2,3
 * read kv head 1 (h / (H/G), not h % G). */
static void test_reference_gqa_head_mapping(void **state)
{
  (void)state;
  /* core: one key, so each head's output is its kv head's v */
  long qs[] = { 4, 1, 1 }, kvs[] = { 2, 1, 1 };
  ref_problem p = core_problem(3, qs, kvs);
  double q[] = { 1, 2, 3, 4 }, k[] = { 1, 1 }, v[] = { 10, 20 }, out[4];
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_near(out[0], 10, TOL);
  assert_near(out[1], 10, TOL);
  assert_near(out[2], 20, TOL);
  assert_near(out[3], 20, TOL);

  /* full: Wv makes kv head values 10 and 20, Wo weighs the heads by
   * 1, 10, 100, 1000 so the output spells the mapping in decimal */
  long xs[] = { 1, 1 };
  ref_problem f = full_problem(2, xs, 0, 4, 2, 1);
  double x[] = { 1 }, wq[] = { 1, 1, 1, 1 }, wk[] = { 1, 1 }, wv[] = { 10, 20 };
  double wo[] = { 1, 10, 100, 1000 }, o1[1];
  ref_tensors ft = no_tensors();
  ft.x = x;
  ft.wq = wq;
  ft.wk = wk;
  ft.wv = wv;
  ft.wo = wo;
  assert_int_equal(ref_attention(&f, &ft, o1), 0);
  assert_near(o1[0], 10 * 1 + 10 * 10 + 20 * 100 + 20 * 1000, TOL);
}

/* Logits near 330 overflow exp() in f32, near 1000 in f64, and near -1000
 * underflow to 0/0: the row-max subtraction must make all three exact. */
static void test_reference_large_logits(void **state)
{
  (void)state;
  long qs[] = { 1, 1, 1 }, kvs[] = { 1, 3, 1 };
  ref_problem p = core_problem(3, qs, kvs);
  p.scale = 1.0;
  const double centre[] = { 330, 1000, -1000 };
  double want = 1.0 / (1.0 + exp(-1.0) + exp(-2.0));
  for (int n = 0; n < 3; n++) {
    double q[] = { 1 }, k[3], v[] = { 1, 0, 0 }, out[1];
    for (int j = 0; j < 3; j++) k[j] = centre[n] - j;
    ref_tensors t = no_tensors();
    t.q = q;
    t.k = k;
    t.v = v;
    assert_int_equal(ref_attention(&p, &t, out), 0);
    assert_true(isfinite(out[0]));
    assert_near(out[0], want, TOL);
  }
}

/* A small deterministic generator, so the brute-force case is reproducible. */
static double rnd(unsigned long *s)
{
  *s = *s * 6364136223846793005UL + 1442695040888963407UL;
  return (double)((*s >> 33) & 0xffff) / 32768.0 - 1.0;
}

/* Sizes of the rank-4 case: x (N0, S, N2, CIN), attention over axis 1, so
 * the batch axes are N0 and N2.  N0 != N2 makes the alignment matter: the
 * bias (N0, H, S, S) only fits left-aligned, the mask (N2, S) only
 * right-aligned. */
enum { N0 = 2, S = 4, N2 = 3, CIN = 3, NH = 2, HC = 2 };

static void fill_rank4(unsigned long seed, double *x, double *wq, double *bq, double *wk,
                       double *bk, double *wv, double *bv, double *wg, double *bg,
                       double *wo, double *bo, double *bias)
{
  for (int e = 0; e < N0 * S * N2 * CIN; e++) x[e] = rnd(&seed);
  for (int e = 0; e < NH * HC * CIN; e++) {
    wq[e] = rnd(&seed);
    wk[e] = rnd(&seed);
    wv[e] = rnd(&seed);
    wg[e] = rnd(&seed);
    wo[e] = rnd(&seed);
  }
  for (int e = 0; e < NH * HC; e++) {
    bq[e] = rnd(&seed);
    bk[e] = rnd(&seed);
    bv[e] = rnd(&seed);
    bg[e] = rnd(&seed);
  }
  for (int e = 0; e < CIN; e++) bo[e] = rnd(&seed);
  for (int e = 0; e < N0 * NH * S * S; e++) bias[e] = 3.0 * rnd(&seed);
}

static void test_reference_bias_mask_broadcast_rank4(void **state)
{
  (void)state;
  static double x[N0][S][N2][CIN], wq[NH * HC][CIN], wk[NH * HC][CIN], wv[NH * HC][CIN];
  static double wg[NH * HC][CIN], wo[CIN][NH * HC], bq[NH * HC], bk[NH * HC], bv[NH * HC];
  static double bg[NH * HC], bo[CIN], bias[N0][NH][S][S];
  static double out[N0][S][N2][CIN], want[N0][S][N2][CIN];
  const double mask[N2][S] = { { 1, 0, 1, 1 }, { 0, 0, 1, 0 }, { 1, 1, 1, 1 } };
  fill_rank4(7, &x[0][0][0][0], &wq[0][0], bq, &wk[0][0], bk, &wv[0][0], bv, &wg[0][0], bg,
             &wo[0][0], bo, &bias[0][0][0][0]);

  long xs[] = { N0, S, N2, CIN };
  ref_problem p = full_problem(4, xs, 1, NH, NH, HC);
  p.qkv_bias = p.out_bias = p.gated = 1;
  p.has_bias = 1;
  p.bias_rank = 4;
  p.bias[0] = N0;
  p.bias[1] = NH;
  p.bias[2] = S;
  p.bias[3] = S;
  p.has_mask = 1;
  p.mask_rank = 2;
  p.mask[0] = N2;
  p.mask[1] = S;
  ref_tensors t = no_tensors();
  t.x = &x[0][0][0][0];
  t.wq = &wq[0][0];
  t.bq = bq;
  t.wk = &wk[0][0];
  t.bk = bk;
  t.wv = &wv[0][0];
  t.bv = bv;
  t.wg = &wg[0][0];
  t.bg = bg;
  t.wo = &wo[0][0];
  t.bo = bo;
  t.bias = &bias[0][0][0][0];
  t.mask = &mask[0][0];
  assert_int_equal(ref_attention(&p, &t, &out[0][0][0][0]), 0);

  /* Brute force, written over the original axes with no reshaping. */
  for (int n0 = 0; n0 < N0; n0++)
    for (int n2 = 0; n2 < N2; n2++) {
      double q[S][NH * HC], k[S][NH * HC], v[S][NH * HC], o[S][NH * HC];
      for (int s = 0; s < S; s++)
        for (int f = 0; f < NH * HC; f++) {
          q[s][f] = bq[f];
          k[s][f] = bk[f];
          v[s][f] = bv[f];
          for (int e = 0; e < CIN; e++) {
            q[s][f] += wq[f][e] * x[n0][s][n2][e];
            k[s][f] += wk[f][e] * x[n0][s][n2][e];
            v[s][f] += wv[f][e] * x[n0][s][n2][e];
          }
        }
      for (int h = 0; h < NH; h++)
        for (int i = 0; i < S; i++) {
          double a[S], m = -1e300, sum = 0;
          for (int j = 0; j < S; j++) {
            a[j] = 0;
            for (int d = 0; d < HC; d++) a[j] += q[i][h * HC + d] * k[j][h * HC + d];
            a[j] = a[j] / sqrt((double)HC) + bias[n0][h][i][j];
            if (mask[n2][j] != 0 && a[j] > m) m = a[j];
          }
          for (int j = 0; j < S; j++) {
            a[j] = mask[n2][j] != 0 ? exp(a[j] - m) : 0.0;
            sum += a[j];
          }
          for (int d = 0; d < HC; d++) {
            o[i][h * HC + d] = 0;
            for (int j = 0; j < S; j++) o[i][h * HC + d] += a[j] / sum * v[j][h * HC + d];
          }
        }
      for (int i = 0; i < S; i++)
        for (int e = 0; e < CIN; e++) {
          double y = bo[e];
          for (int f = 0; f < NH * HC; f++) {
            double gz = bg[f];
            for (int u = 0; u < CIN; u++) gz += wg[f][u] * x[n0][i][n2][u];
            y += wo[e][f] * o[i][f] / (1.0 + exp(-gz));
          }
          want[n0][i][n2][e] = y;
        }
    }
  for (int n0 = 0; n0 < N0; n0++)
    for (int i = 0; i < S; i++)
      for (int n2 = 0; n2 < N2; n2++)
        for (int e = 0; e < CIN; e++)
          assert_near(out[n0][i][n2][e], want[n0][i][n2][e], 1e-12);

  /* The same shapes aligned the other way round do not broadcast. */
  p.bias[0] = N2;
  assert_int_equal(ref_attention(&p, &t, &out[0][0][0][0]), -1);
  p.bias[0] = N0;
  p.mask[0] = N0;
  assert_int_equal(ref_attention(&p, &t, &out[0][0][0][0]), -1);
}

static void test_reference_rejects_bad_problems(void **state)
{
  (void)state;
  long xs[] = { 2, 3, 6 };
  double x[36] = { 0 }, w[36] = { 0 }, out[36];
  ref_tensors t = no_tensors();
  t.x = x;
  t.wq = t.wk = t.wv = t.wo = w;
  int rank;
  long shape[REF_MAX_RANK];

  ref_problem ok = full_problem(3, xs, 1, 2, 2, 3);
  assert_int_equal(ref_attention(&ok, &t, out), 0);

  ref_problem p = full_problem(3, xs, 1, 3, 2, 2);   /* H % G != 0 */
  assert_int_equal(ref_attention(&p, &t, out), -1);
  assert_int_equal(ref_output_shape(&p, &rank, shape), -1);

  p = full_problem(3, xs, 2, 2, 2, 3);               /* attention over the width */
  assert_int_equal(ref_attention(&p, &t, out), -1);

  p = full_problem(3, xs, 1, 2, 2, 3);               /* bias Sk dim 2, neither 3 nor 1 */
  p.has_bias = 1;
  p.bias_rank = 3;
  p.bias[0] = 2;
  p.bias[1] = 3;
  p.bias[2] = 2;
  t.bias = w;
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.bias[2] = 1;                                     /* broadcast: fine */
  assert_int_equal(ref_attention(&p, &t, out), 0);

  p = full_problem(3, xs, 1, 2, 2, 3);               /* mask declared, no tensor */
  p.has_mask = 1;
  p.mask_rank = 1;
  p.mask[0] = 3;
  assert_int_equal(ref_attention(&p, &t, out), -1);

  p = full_problem(3, xs, 1, 2, 2, 3);               /* self-attention, kv shape differs */
  p.kv[1] = 4;
  assert_int_equal(ref_attention(&p, &t, out), -1);
}

/* ---- positions and score modifiers -------------------------------------- */

/* A row's final logits, read back from its weights and lse:
 * s_j = log w_j + lse, since w_j = exp(s_j) / exp(lse). */
static void logits_from(const double *w, double lse, long n, double *s)
{
  for (long j = 0; j < n; j++) s[j] = log(w[j]) + lse;
}

/* q (c features) as rope leaves it at position *pos (NULL: the default,
 * 0 + Sk - Sq = c - 1): core mode, one head, scale 1, the c keys are the
 * unit vectors held at position 0, so logit j is rotated q's feature j. */
static void rope_of(int kind, long c, int r, double theta, const double *freqs,
                    const double *q, const double *pos, double *got)
{
  long qs[] = { 1, 1, c }, kvs[] = { 1, c, c };
  ref_problem p = core_problem(3, qs, kvs);
  p.scale = 1.0;
  p.rope = kind;
  p.rope_dim = r;
  p.rope_theta = theta;
  p.has_k_pos = 1;
  p.k_pos_rank = 1;
  p.k_pos[0] = c;
  p.has_q_pos = pos != NULL;
  p.q_pos_rank = 1;
  p.q_pos[0] = 1;
  double k[64] = { 0 }, v[64] = { 0 }, k_pos[8] = { 0 }, out[8], w[8], lse;
  for (long j = 0; j < c; j++) k[j * c + j] = 1.0;
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  t.q_pos = pos;
  t.k_pos = k_pos;
  t.rope_freqs = freqs;
  t.weights = w;
  t.lse = &lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  logits_from(w, lse, c, got);
}

/* theta = 16, r = 4, pos = 2: angles 2 * 16^0 = 2 and 2 * 16^(-1/2) = 0.5.
 * neox turns the pairs (x0, x2) and (x1, x3). */
static void test_reference_rope_neox_by_hand(void **state)
{
  (void)state;
  const double q[] = { 1, 2, 3, 4 }, pos = 2;
  double got[4];
  rope_of(REF_ROPE_NEOX, 4, 0, 16.0, NULL, q, &pos, got);
  assert_near(got[0], 1 * cos(2.0) - 3 * sin(2.0), TOL);
  assert_near(got[2], 3 * cos(2.0) + 1 * sin(2.0), TOL);
  assert_near(got[1], 2 * cos(0.5) - 4 * sin(0.5), TOL);
  assert_near(got[3], 4 * cos(0.5) + 2 * sin(0.5), TOL);
}

/* The same angles; gptj turns the neighbours (x0, x1) and (x2, x3). */
static void test_reference_rope_gptj_by_hand(void **state)
{
  (void)state;
  const double q[] = { 1, 2, 3, 4 }, pos = 2;
  double got[4];
  rope_of(REF_ROPE_GPTJ, 4, 0, 16.0, NULL, q, &pos, got);
  assert_near(got[0], 1 * cos(2.0) - 2 * sin(2.0), TOL);
  assert_near(got[1], 2 * cos(2.0) + 1 * sin(2.0), TOL);
  assert_near(got[2], 3 * cos(0.5) - 4 * sin(0.5), TOL);
  assert_near(got[3], 4 * cos(0.5) + 3 * sin(0.5), TOL);
}

/* rope_dim 4 of head_dim 6: r, not c, sets the pairs and the angles, and
 * features 4 and 5 pass through. */
static void test_reference_rope_partial_dim(void **state)
{
  (void)state;
  const double q[] = { 1, 2, 3, 4, 5, 6 }, pos = 2;
  double got[6];
  rope_of(REF_ROPE_NEOX, 6, 4, 16.0, NULL, q, &pos, got);
  assert_near(got[0], 1 * cos(2.0) - 3 * sin(2.0), TOL);
  assert_near(got[1], 2 * cos(0.5) - 4 * sin(0.5), TOL);
  assert_near(got[2], 3 * cos(2.0) + 1 * sin(2.0), TOL);
  assert_near(got[3], 4 * cos(0.5) + 2 * sin(0.5), TOL);
  assert_near(got[4], 5, TOL);
  assert_near(got[5], 6, TOL);
  rope_of(REF_ROPE_GPTJ, 6, 4, 16.0, NULL, q, &pos, got);
  assert_near(got[0], 1 * cos(2.0) - 2 * sin(2.0), TOL);
  assert_near(got[3], 4 * cos(0.5) + 3 * sin(0.5), TOL);
  assert_near(got[4], 5, TOL);
  assert_near(got[5], 6, TOL);
}

/* f divides the angles: f = (2, 1/4) turns 2 and 0.5 into 1 and 2. */
static void test_reference_rope_freqs(void **state)
{
  (void)state;
  const double q[] = { 1, 2, 3, 4 }, pos = 2, f[] = { 2, 0.25 };
  double got[4];
  rope_of(REF_ROPE_GPTJ, 4, 0, 16.0, f, q, &pos, got);
  assert_near(got[0], 1 * cos(1.0) - 2 * sin(1.0), TOL);
  assert_near(got[1], 2 * cos(1.0) + 1 * sin(1.0), TOL);
  assert_near(got[2], 3 * cos(2.0) - 4 * sin(2.0), TOL);
  assert_near(got[3], 4 * cos(2.0) + 3 * sin(2.0), TOL);
}

/* theta 0 means 10000 (second angle pos / 100), and without q_pos the one
 * query of core mode sits at 0 + Sk - Sq = 3. */
static void test_reference_rope_defaults(void **state)
{
  (void)state;
  const double q[] = { 1, 2, 3, 4 };
  double got[4];
  rope_of(REF_ROPE_GPTJ, 4, 0, 0.0, NULL, q, NULL, got);
  assert_near(got[0], 1 * cos(3.0) - 2 * sin(3.0), TOL);
  assert_near(got[1], 2 * cos(3.0) + 1 * sin(3.0), TOL);
  assert_near(got[2], 3 * cos(0.03) - 4 * sin(0.03), TOL);
  assert_near(got[3], 4 * cos(0.03) + 3 * sin(0.03), TOL);
}

/* k is turned too, at its own position: with q = k = (1, 0) at the default
 * positions i and j (Sq = Sk), logit (i, j) = cos(j - i). */
static void test_reference_rope_relative(void **state)
{
  (void)state;
  long qs[] = { 1, 3, 2 }, kvs[] = { 1, 3, 2 };
  ref_problem p = core_problem(3, qs, kvs);
  p.scale = 1.0;
  p.rope = REF_ROPE_NEOX;
  double q[] = { 1, 0, 1, 0, 1, 0 }, v[6] = { 0 }, out[6], w[9], lse[3], s[3];
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = q;
  t.v = v;
  t.weights = w;
  t.lse = lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (int i = 0; i < 3; i++) {
    logits_from(w + 3 * i, lse[i], 3, s);
    for (int j = 0; j < 3; j++) assert_near(s[j], cos((double)(j - i)), TOL);
  }
}

/* Full mode: rope acts after the projection's bias.  x = 0, so q is its
 * bias (1, 0); at q_pos 2 it becomes (cos 2, sin 2).  kv rows are the unit
 * vectors at k_pos 0, read by an identity wk: logit j = rotated q's j. */
static void test_reference_rope_after_bias(void **state)
{
  (void)state;
  long xs[] = { 1, 2 };
  ref_problem p = full_problem(2, xs, 0, 1, 1, 2);
  p.kv[0] = 2;
  p.scale = 1.0;
  p.qkv_bias = 1;
  p.rope = REF_ROPE_NEOX;
  p.has_q_pos = p.has_k_pos = 1;
  p.q_pos_rank = p.k_pos_rank = 1;
  p.q_pos[0] = 1;
  p.k_pos[0] = 2;
  double x[] = { 0, 0 }, kv[] = { 1, 0, 0, 1 }, eye[] = { 1, 0, 0, 1 }, zero[] = { 0, 0 };
  double bq[] = { 1, 0 }, q_pos[] = { 2 }, k_pos[] = { 0, 0 }, out[2], w[2], lse, s[2];
  ref_tensors t = no_tensors();
  t.x = x;
  t.kv = kv;
  t.wq = t.wk = t.wv = t.wo = eye;
  t.bq = bq;
  t.bk = t.bv = zero;
  t.q_pos = q_pos;
  t.k_pos = k_pos;
  t.weights = w;
  t.lse = &lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  logits_from(w, lse, 2, s);
  assert_near(s[0], cos(2.0), TOL);
  assert_near(s[1], sin(2.0), TOL);
}

/* Core mode, H heads, c = 1, q = k = 0: the logits are the alibi term
 * alone.  The query sits at 0 + 2 - 1 = 1, the keys at 0 and 1, so key 0's
 * logit is -slope[h] and key 1's is 0. */
static void alibi_slopes(int H, double max_bias, double *slope)
{
  long qs[] = { H, 1, 1 }, kvs[] = { 1, 2, 1 };
  ref_problem p = core_problem(3, qs, kvs);
  p.alibi = max_bias;
  double q[8] = { 0 }, k[2] = { 0 }, v[2] = { 0 }, out[8], w[16], lse[8], s[2];
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  t.weights = w;
  t.lse = lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (int h = 0; h < H; h++) {
    logits_from(w + 2 * h, lse[h], 2, s);
    assert_near(s[1], 0.0, TOL);
    slope[h] = -s[0];
  }
}

/* H = 8, max_bias 8: n = 8, m0 = 1/2, slopes 1/2 .. 1/256. */
static void test_reference_alibi_power_of_two(void **state)
{
  (void)state;
  double slope[8];
  alibi_slopes(8, 8.0, slope);
  for (int h = 0; h < 8; h++) assert_near(slope[h], 1.0 / (double)(2 << h), TOL);
}

/* H = 6, max_bias 8: n = 4, m0 = 1/4 for heads 0..3; m1 = 1/2 and odd
 * powers 1, 3 for heads 4, 5. */
static void test_reference_alibi_not_power_of_two(void **state)
{
  (void)state;
  const double want[] = { 1. / 4, 1. / 16, 1. / 64, 1. / 256, 1. / 2, 1. / 8 };
  double slope[6];
  alibi_slopes(6, 8.0, slope);
  for (int h = 0; h < 6; h++) assert_near(slope[h], want[h], TOL);
}

/* Alibi reads positions: full-mode cross-attention starts x and kv at 0, so
 * the query at 0 sees logits slope * (0, 1, 2).  H = 1, max_bias 1: slope
 * 1/2.  (Core mode would put the query at 2; softmax alone cannot tell, lse
 * can.) */
static void test_reference_cross_attention_positions(void **state)
{
  (void)state;
  long xs[] = { 1, 1 };
  ref_problem p = full_problem(2, xs, 0, 1, 1, 1);
  p.kv[0] = 3;
  p.alibi = 1.0;
  double x[] = { 1 }, kv[] = { 1, 1, 1 }, zero[] = { 0 }, one[] = { 1 };
  double out[1], w[3], lse, s[3];
  ref_tensors t = no_tensors();
  t.x = x;
  t.kv = kv;
  t.wq = t.wk = zero;
  t.wv = t.wo = one;
  t.weights = w;
  t.lse = &lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  logits_from(w, lse, 3, s);
  for (int j = 0; j < 3; j++) assert_near(s[j], 0.5 * j, TOL);
}

/* q_pos (2, 1) per batch element and k_pos (2) shared, right-aligned like
 * the mask, replace the defaults: logits 1/2 (k_pos - q_pos).  They never
 * move causal, which keeps reading indices. */
static void test_reference_explicit_positions(void **state)
{
  (void)state;
  long qs[] = { 2, 1, 1, 1 }, kvs[] = { 2, 1, 2, 1 };
  ref_problem p = core_problem(4, qs, kvs);
  p.alibi = 1.0;
  p.has_q_pos = p.has_k_pos = 1;
  p.q_pos_rank = 2;
  p.q_pos[0] = 2;
  p.q_pos[1] = 1;
  p.k_pos_rank = 1;
  p.k_pos[0] = 2;
  double q[2] = { 0 }, k[4] = { 0 }, v[4] = { 0 }, out[2], w[4], lse[2], s[2];
  double q_pos[] = { 5, 7 }, k_pos[] = { 1, 4 };
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  t.q_pos = q_pos;
  t.k_pos = k_pos;
  t.weights = w;
  t.lse = lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  logits_from(w, lse[0], 2, s);
  assert_near(s[0], -2.0, TOL);
  assert_near(s[1], -0.5, TOL);
  logits_from(w + 2, lse[1], 2, s);
  assert_near(s[0], -3.0, TOL);
  assert_near(s[1], -1.5, TOL);

  /* A q_pos batch dim of 1 broadcasts; one of 3 fits no batch axis. */
  p.q_pos[0] = 1;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  logits_from(w + 2, lse[1], 2, s);
  assert_near(s[0], -2.0, TOL);
  p.q_pos[0] = 3;
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.q_pos[0] = 2;
  p.k_pos[0] = 3;   /* k_pos must cover exactly Sk keys */
  assert_int_equal(ref_attention(&p, &t, out), -1);

  /* causal top_left with both queries placed at position 0: row 1 still
   * sees keys 0 and 1, by index */
  long q2[] = { 1, 2, 1 }, kv2[] = { 1, 2, 1 };
  ref_problem c = core_problem(3, q2, kv2);
  c.causal = REF_CAUSAL_TOP_LEFT;
  c.alibi = 1.0;
  c.has_q_pos = 1;
  c.q_pos_rank = 1;
  c.q_pos[0] = 2;
  double zq[2] = { 0, 0 }, w2[4];
  t = no_tensors();
  t.q = t.k = t.v = zq;
  t.q_pos = zq;
  t.weights = w2;
  assert_int_equal(ref_attention(&c, &t, out), 0);
  assert_near(w2[0], 1.0, TOL);
  assert_near(w2[1], 0.0, TOL);
  assert_true(w2[2] > 0.0 && w2[3] > 0.0);
}

/* softcap acts on the scaled logits, before the bias: scale 1/2, cap 2,
 * q.k = (3, -5), bias (10, 0): logits 2 tanh(0.75) + 10 and 2 tanh(-1.25). */
static void test_reference_softcap(void **state)
{
  (void)state;
  long qs[] = { 1, 1, 1 }, kvs[] = { 1, 2, 1 };
  ref_problem p = core_problem(3, qs, kvs);
  p.scale = 0.5;
  p.softcap = 2.0;
  p.has_bias = 1;
  p.bias_rank = 3;
  p.bias[0] = 1;
  p.bias[1] = 1;
  p.bias[2] = 2;
  double q[] = { 1 }, k[] = { 3, -5 }, v[] = { 0, 0 }, bias[] = { 10, 0 };
  double out[1], w[2], lse, s[2];
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  t.bias = bias;
  t.weights = w;
  t.lse = &lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  logits_from(w, lse, 2, s);
  assert_near(s[0], 2.0 * tanh(0.75) + 10.0, TOL);
  assert_near(s[1], 2.0 * tanh(-1.25), TOL);
}

/* Two heads over two keys of logit 0 and v = (4, 8).  Head 0's sink is
 * ln 2: the denominator is 2 + 1 + 1, each key gets 1/4, o = 3, lse = ln 4.
 * Head 1's sink is 0: 1/3 each, o = 4, lse = ln 3. */
static void test_reference_sinks(void **state)
{
  (void)state;
  long qs[] = { 2, 1, 1 }, kvs[] = { 1, 2, 1 };
  ref_problem p = core_problem(3, qs, kvs);
  p.sinks = 1;
  double q[] = { 0, 0 }, k[] = { 0, 0 }, v[] = { 4, 8 }, sinks[] = { LN2, 0 };
  double out[2], w[4], lse[2];
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  t.sinks = sinks;
  t.weights = w;
  t.lse = lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_near(w[0], 0.25, TOL);
  assert_near(w[1], 0.25, TOL);
  assert_near(out[0], 3.0, TOL);
  assert_near(lse[0], log(4.0), TOL);
  assert_near(w[2], 1.0 / 3.0, TOL);
  assert_near(out[1], 4.0, TOL);
  assert_near(lse[1], log(3.0), TOL);

  /* A sink far above the keys takes all the mass without overflowing. */
  sinks[0] = 1000.0;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_near(out[0], 0.0, TOL);
  assert_near(lse[0], 1000.0, TOL);

  /* A row that sees no key: all mass on the sink, o = 0, weights 0,
   * lse = the sink, however far below 0 it is. */
  sinks[0] = 0.5;
  sinks[1] = -1000.0;
  double mask[] = { 0, 0 };
  p.has_mask = 1;
  p.mask_rank = 1;
  p.mask[0] = 2;
  t.mask = mask;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_true(out[0] == 0.0 && out[1] == 0.0);
  for (int e = 0; e < 4; e++) assert_true(w[e] == 0.0);
  assert_near(lse[0], 0.5, TOL);
  assert_near(lse[1], -1000.0, TOL);

  /* Sinks need empty_rows zero, and their tensor. */
  p.empty_rows = REF_EMPTY_UNIFORM;
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.empty_rows = REF_EMPTY_ZERO;
  t.sinks = NULL;
  assert_int_equal(ref_attention(&p, &t, out), -1);
}

/* lse is the log of the softmax denominator over the final logits: scale
 * ln 2 and q.k = (0, 1, 2) give exp-logits 1, 2, 4, so lse = ln 7; with a
 * bias of ln 3 on every key, ln 21.  A row that sees no key gets -inf. */
static void test_reference_lse(void **state)
{
  (void)state;
  long qs[] = { 1, 2, 1 }, kvs[] = { 1, 3, 1 };
  ref_problem p = core_problem(3, qs, kvs);
  p.scale = LN2;
  p.causal = REF_CAUSAL_BOTTOM_RIGHT;   /* row 1 sees all 3 keys */
  double q[] = { 1, 1 }, k[] = { 0, 1, 2 }, v[] = { 0, 0, 0 }, out[2], lse[2];
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  t.lse = lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_near(lse[1], log(7.0), TOL);
  assert_near(lse[0], log(3.0), TOL);   /* row 0 sees keys 0, 1: 1 + 2 */

  double bias[] = { log(3.0) };
  p.has_bias = 1;
  p.bias_rank = 3;
  p.bias[0] = p.bias[1] = p.bias[2] = 1;
  t.bias = bias;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  assert_near(lse[1], log(21.0), TOL);

  /* Sq = 3 over Sk = 2, bottom_right: row 0 sees no key, in every mode */
  long q3[] = { 1, 3, 1 }, kv2[] = { 1, 2, 1 };
  ref_problem e = core_problem(3, q3, kv2);
  e.causal = REF_CAUSAL_BOTTOM_RIGHT;
  double q1[] = { 1, 1, 1 }, lse3[3], out3[3];
  t = no_tensors();
  t.q = q1;
  t.k = k;
  t.v = v;
  t.lse = lse3;
  for (int mode = REF_EMPTY_ZERO; mode <= REF_EMPTY_NAN; mode++) {
    e.empty_rows = mode;
    assert_int_equal(ref_attention(&e, &t, out3), 0);
    assert_true(isinf(lse3[0]) && lse3[0] < 0);
    assert_true(isfinite(lse3[1]) && isfinite(lse3[2]));
  }
}

/* lse has one value per logit row: (batch axes..., H, Sq), Sq = 1 for global. */
static void test_reference_lse_shape(void **state)
{
  (void)state;
  long xs[] = { 2, 5, 4 };
  ref_problem p = full_problem(3, xs, 1, 2, 2, 2);
  int rank = 0;
  long shape[REF_MAX_RANK];
  assert_int_equal(ref_lse_shape(&p, &rank, shape), 2 * 2 * 5);
  assert_int_equal(rank, 3);
  assert_int_equal(shape[0], 2);
  assert_int_equal(shape[1], 2);
  assert_int_equal(shape[2], 5);
  p.global = 1;
  assert_int_equal(ref_lse_shape(&p, &rank, shape), 2 * 2 * 1);
  assert_int_equal(shape[2], 1);
  assert_int_equal(ref_weights_shape(&p, &rank, shape), 2 * 2 * 1 * 5);
  assert_int_equal(rank, 4);
  assert_int_equal(shape[3], 5);
}

/* PE at position p for width 4: (sin p, cos p, sin(p/100), cos(p/100)). */
static void sinusoid4(double p, double *pe)
{
  pe[0] = sin(p);
  pe[1] = cos(p);
  pe[2] = sin(p / 100.0);
  pe[3] = cos(p / 100.0);
}

/* Cross-attention, width 4, identity projections, scale 1.  kv row j holds
 * e_j - PE(j), so with the encoding at key position j the key is e_j; the
 * logits then spell out x + PE(3), the query at q_pos 3. */
static void test_reference_pe_cross(void **state)
{
  (void)state;
  long xs[] = { 1, 4 };
  ref_problem p = full_problem(2, xs, 0, 1, 1, 4);
  p.kv[0] = 4;
  p.scale = 1.0;
  p.pe = REF_PE_SINUSOIDAL;
  p.has_q_pos = 1;
  p.q_pos_rank = 1;
  p.q_pos[0] = 1;
  double x[] = { 0.5, -1, 2, 0 }, kv[16], eye[16] = { 0 }, q_pos[] = { 3 };
  double out[4], w[4], lse, s[4], pe[4];
  for (int j = 0; j < 4; j++) {
    eye[j * 4 + j] = 1.0;
    sinusoid4(j, pe);
    for (int e = 0; e < 4; e++) kv[j * 4 + e] = (e == j) - pe[e];
  }
  ref_tensors t = no_tensors();
  t.x = x;
  t.kv = kv;
  t.wq = t.wk = t.wv = t.wo = eye;
  t.q_pos = q_pos;
  t.weights = w;
  t.lse = &lse;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  logits_from(w, lse, 4, s);
  sinusoid4(3, pe);
  for (int e = 0; e < 4; e++) assert_near(s[e], x[e] + pe[e], 1e-11);
}

/* Self-attention, width 2 (PE(p) = (sin p, cos p)), wq = wk = 0 so the
 * weights are uniform, wv = wo = wg = 1: every row's o is the mean of
 * x_j + PE(j), and the gate reads x_i + PE(i) as the q projection does. */
static void test_reference_pe_self(void **state)
{
  (void)state;
  long xs[] = { 2, 2 };
  ref_problem p = full_problem(2, xs, 0, 1, 1, 2);
  p.pe = REF_PE_SINUSOIDAL;
  p.gated = 1;
  double x[] = { 1, 2, -3, 0.5 }, eye[] = { 1, 0, 0, 1 }, zero[] = { 0, 0, 0, 0 };
  double out[4];
  ref_tensors t = no_tensors();
  t.x = x;
  t.wq = t.wk = zero;
  t.wv = t.wo = t.wg = eye;
  t.bg = zero;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  double o[2] = { (x[0] + 0.0 + x[2] + sin(1.0)) / 2, (x[1] + 1.0 + x[3] + cos(1.0)) / 2 };
  double xpe[4] = { x[0] + 0.0, x[1] + 1.0, x[2] + sin(1.0), x[3] + cos(1.0) };
  for (int e = 0; e < 4; e++) assert_near(out[e], o[e % 2] / (1.0 + exp(-xpe[e])), TOL);
}

/* The combinations DESIGN makes spec errors, and out-of-range values. */
static void test_reference_rejects_bad_modifiers(void **state)
{
  (void)state;
  long xs[] = { 3, 4 }, cs[] = { 1, 3, 4 };
  double x[12] = { 0 }, w[16] = { 0 }, out[12];
  ref_tensors t = no_tensors();
  t.x = x;
  t.q = t.k = t.v = x;
  t.wq = t.wk = t.wv = t.wo = w;

  ref_problem p = full_problem(2, xs, 0, 1, 1, 4);
  p.rope = REF_ROPE_NEOX;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  p.rope_dim = 3;                                    /* odd */
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.rope_dim = 6;                                    /* > head_dim */
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.rope_dim = 2;
  p.rope_theta = 1.0;                                /* theta must exceed 1 */
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.rope_theta = 0.0;
  p.global = 1;                                      /* rope with global */
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.rope = REF_ROPE_NONE;
  p.alibi = 8.0;                                     /* alibi with global */
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.global = 0;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  p.alibi = -1.0;
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.alibi = 0.0;
  p.softcap = -1.0;
  assert_int_equal(ref_attention(&p, &t, out), -1);

  p = full_problem(2, xs, 0, 1, 1, 4);
  p.pe = REF_PE_SINUSOIDAL;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  long odd[] = { 4, 3 };                             /* c_in = 3 */
  p = full_problem(2, odd, 0, 1, 1, 3);
  p.pe = REF_PE_SINUSOIDAL;
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p = core_problem(3, cs, cs);                       /* pe in core mode */
  p.pe = REF_PE_SINUSOIDAL;
  assert_int_equal(ref_attention(&p, &t, out), -1);

  p = full_problem(2, xs, 0, 1, 1, 4);               /* positions declared, no tensor */
  p.has_q_pos = 1;
  p.q_pos_rank = 1;
  p.q_pos[0] = 3;
  assert_int_equal(ref_attention(&p, &t, out), -1);
}

/* ---- the KV cache ---------------------------------------------------------- */

/* rnd() with about 60 random bits, enough to land anywhere between two f32 values */
static double rnd_fine(unsigned long *s)
{
  return rnd(s) + ldexp(rnd(s), -15) + ldexp(rnd(s), -30) + ldexp(rnd(s), -45);
}

static double *rnd_alloc(long n, double amp, unsigned long *s)
{
  double *a = malloc((size_t)n * sizeof *a + 1);
  assert_non_null(a);
  for (long i = 0; i < n; i++) a[i] = amp * rnd(s);
  return a;
}

/* One decoder layer's problem, and which modifiers it turns on. */
typedef struct cache_case {
  int B, H, G, c, cin, S, S2;   /* prefill S rows, then S2 steps of one row */
  int rope, alibi, softcap, sinks, window, mask, bias, pos, causal_unsaid;
} cache_case;

/* The modifiers of cc on p: what the one pass and the cache runs share. */
static void cache_case_modifiers(const cache_case *cc, ref_problem *p)
{
  p->qkv_bias = p->out_bias = 1;
  p->rope = cc->rope;
  p->rope_dim = cc->rope ? cc->c / 2 * 2 : 0;
  p->alibi = cc->alibi ? 4.0 : 0.0;
  p->softcap = cc->softcap ? 0.7 : 0.0;
  p->sinks = cc->sinks;
  if (cc->window) {
    p->has_window = 1;
    p->wl = 2;
    p->wr = 1;
  }
}

/* Weights, inputs and both runs' outputs of one cache case. */
typedef struct cache_run {
  long N;                                       /* S + S2 = CAP */
  double *x, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *sinks, *mask, *bias, *pos;
  double *out, *lse, *w;                        /* the one pass: (B, N, cin), (B, H, N), (B, H, N, N) */
} cache_run;

static void cache_run_free(cache_run *r)
{
  double *all[] = { r->x, r->wq, r->bq, r->wk, r->bk, r->wv, r->bv, r->wo, r->bo, r->sinks, r->mask, r->bias,
                    r->pos, r->out, r->lse, r->w };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* The tensors of the one causal pass over N rows (kv = x). */
static void one_pass_tensors(const cache_run *r, const cache_case *cc, ref_tensors *t)
{
  *t = no_tensors();
  t->x = r->x;
  t->wq = r->wq; t->bq = r->bq; t->wk = r->wk; t->bk = r->bk; t->wv = r->wv; t->bv = r->bv;
  t->wo = r->wo; t->bo = r->bo;
  t->sinks = cc->sinks ? r->sinks : NULL;
  t->mask = r->mask;
  t->bias = r->bias;
  t->q_pos = t->k_pos = r->pos;
}

/* Prefill S rows into an empty cache, then S2 single-row steps, each run
 * taking the caches the last one returned (rows past the filled ones hold
 * garbage, which causal keeps out), against one causal pass over all
 * S + S2 rows: out, lse and the weights of every row agree to rounding.
 * kv_dtype f64 stores the rows exactly, so nothing else may differ. */
static void cache_vs_one_pass(const cache_case *cc, unsigned long seed)
{
  const long B = cc->B, H = cc->H, G = cc->G, c = cc->c, cin = cc->cin, N = cc->S + cc->S2, hc = H * c, gc = G * c;
  cache_run r;
  memset(&r, 0, sizeof r);
  r.N = N;
  r.x = rnd_alloc(B * N * cin, 1.0, &seed);
  r.wq = rnd_alloc(hc * cin, 0.5, &seed); r.bq = rnd_alloc(hc, 0.2, &seed);
  r.wk = rnd_alloc(gc * cin, 0.5, &seed); r.bk = rnd_alloc(gc, 0.2, &seed);
  r.wv = rnd_alloc(gc * cin, 0.5, &seed); r.bv = rnd_alloc(gc, 0.2, &seed);
  r.wo = rnd_alloc(cin * hc, 0.5, &seed); r.bo = rnd_alloc(cin, 0.2, &seed);
  r.sinks = rnd_alloc(H, 1.0, &seed);
  r.mask = rnd_alloc(B * N, 1.0, &seed);
  for (long i = 0; i < B * N; i++) r.mask[i] = r.mask[i] > -0.5;   /* keeps about 3 in 4 */
  r.bias = rnd_alloc(B * H * N * N, 0.5, &seed);
  r.pos = malloc((size_t)(B * N) * sizeof *r.pos);
  for (long b = 0; b < B; b++)   /* increasing positions with gaps, a different start per sequence */
    for (long i = 0; i < N; i++) r.pos[b * N + i] = (double)(100 * b + 3 * i + (i % 2));
  r.out = malloc((size_t)(B * N * cin) * sizeof *r.out);
  r.lse = malloc((size_t)(B * H * N) * sizeof *r.lse);
  r.w = malloc((size_t)(B * H * N * N) * sizeof *r.w);

  long xs[] = { B, N, cin };
  ref_problem one = full_problem(3, xs, 1, (int)H, (int)G, (int)c);
  cache_case_modifiers(cc, &one);
  one.causal = REF_CAUSAL_TOP_LEFT;
  if (cc->mask) { one.has_mask = 1; one.mask_rank = 2; one.mask[0] = B; one.mask[1] = N; }
  if (cc->bias) { one.has_bias = 1; one.bias_rank = 4; one.bias[0] = B; one.bias[1] = H; one.bias[2] = N; one.bias[3] = N; }
  if (cc->pos) {
    one.has_q_pos = one.has_k_pos = 1;
    one.q_pos_rank = one.k_pos_rank = 2;
    one.q_pos[0] = one.k_pos[0] = B;
    one.q_pos[1] = one.k_pos[1] = N;
  }
  ref_tensors t1;
  one_pass_tensors(&r, cc, &t1);
  t1.lse = r.lse;
  t1.weights = r.w;
  assert_int_equal(ref_attention(&one, &t1, r.out), 0);

  double *kc = rnd_alloc(B * gc * N, 3.0, &seed), *vc = rnd_alloc(B * gc * N, 3.0, &seed);
  double *kc2 = malloc((size_t)(B * gc * N) * sizeof *kc2), *vc2 = malloc((size_t)(B * gc * N) * sizeof *vc2);
  double *xs_, *bias_, *qpos_, *out_, *lse_, *w_;
  xs_ = malloc((size_t)(B * cc->S * cin) * sizeof *xs_);
  bias_ = malloc((size_t)(B * H * cc->S * N) * sizeof *bias_);
  qpos_ = malloc((size_t)(B * cc->S) * sizeof *qpos_);
  out_ = malloc((size_t)(B * cc->S * cin) * sizeof *out_);
  lse_ = malloc((size_t)(B * H * cc->S) * sizeof *lse_);
  w_ = malloc((size_t)(B * H * cc->S * N) * sizeof *w_);
  assert_true(kc2 && vc2 && xs_ && bias_ && qpos_ && out_ && lse_ && w_);
  for (long len = 0; len < N;) {
    const long Sn = len == 0 ? cc->S : 1;
    double lens[8];
    for (long b = 0; b < B; b++) {
      lens[b] = (double)len;
      memcpy(xs_ + b * Sn * cin, r.x + (b * N + len) * cin, (size_t)(Sn * cin) * sizeof *xs_);
      memcpy(qpos_ + b * Sn, r.pos + b * N + len, (size_t)Sn * sizeof *qpos_);
      for (long h = 0; h < H; h++)
        memcpy(bias_ + (b * H + h) * Sn * N, r.bias + ((b * H + h) * N + len) * N, (size_t)(Sn * N) * sizeof *bias_);
    }
    long ss[] = { B, Sn, cin };
    ref_problem p = full_problem(3, ss, 1, (int)H, (int)G, (int)c);
    cache_case_modifiers(cc, &p);
    p.cache = N;
    p.kv_dtype = REF_KV_F64;
    p.causal = cc->causal_unsaid ? REF_CAUSAL_NONE : REF_CAUSAL_BOTTOM_RIGHT;   /* a cache is causal either way */
    p.has_mask = one.has_mask; p.mask_rank = 2; p.mask[0] = B; p.mask[1] = N;
    p.has_bias = one.has_bias; p.bias_rank = 4; p.bias[0] = B; p.bias[1] = H; p.bias[2] = Sn; p.bias[3] = N;
    p.has_q_pos = p.has_k_pos = one.has_q_pos;
    p.q_pos_rank = p.k_pos_rank = 2;
    p.q_pos[0] = p.k_pos[0] = B;
    p.q_pos[1] = Sn;
    p.k_pos[1] = N;
    ref_tensors t;
    one_pass_tensors(&r, cc, &t);
    t.x = xs_;
    t.bias = bias_;
    t.q_pos = qpos_;
    t.k_cache = kc;
    t.v_cache = vc;
    t.cache_len = lens;
    t.k_cache_out = kc2;
    t.v_cache_out = vc2;
    t.lse = lse_;
    t.weights = w_;
    assert_int_equal(ref_attention(&p, &t, out_), 0);
    for (long b = 0; b < B; b++)
      for (long i = 0; i < Sn; i++) {
        for (long e = 0; e < cin; e++) assert_near(out_[(b * Sn + i) * cin + e], r.out[(b * N + len + i) * cin + e], TOL);
        for (long h = 0; h < H; h++) {
          assert_near(lse_[(b * H + h) * Sn + i], r.lse[(b * H + h) * N + len + i], TOL);
          for (long j = 0; j < N; j++)
            assert_near(w_[((b * H + h) * Sn + i) * N + j], r.w[((b * H + h) * N + len + i) * N + j], TOL);
        }
      }
    memcpy(kc, kc2, (size_t)(B * gc * N) * sizeof *kc);
    memcpy(vc, vc2, (size_t)(B * gc * N) * sizeof *vc);
    len += Sn;
  }
  free(kc); free(vc); free(kc2); free(vc2);
  free(xs_); free(bias_); free(qpos_); free(out_); free(lse_); free(w_);
  cache_run_free(&r);
}

static void test_reference_cache_equals_one_pass(void **state)
{
  (void)state;
  /* B H G c cin S S2 | rope alibi softcap sinks window mask bias pos causal-unsaid */
  static const cache_case CASES[] = {
    { 2, 4, 2, 4, 6, 3, 3, REF_ROPE_NEOX, 1, 0, 0, 0, 0, 0, 0, 0 },   /* GQA, rope, alibi */
    { 2, 4, 1, 4, 5, 4, 2, REF_ROPE_GPTJ, 0, 1, 1, 0, 0, 0, 1, 1 },   /* MQA, explicit positions, softcap, sinks */
    { 2, 2, 2, 6, 4, 1, 4, REF_ROPE_NONE, 0, 0, 0, 1, 1, 1, 0, 0 },   /* MHA, window, mask over the cache, bias */
    { 1, 3, 3, 2, 3, 5, 1, REF_ROPE_NEOX, 1, 1, 1, 1, 1, 1, 1, 0 },   /* everything at once, H not a power of two */
  };
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) cache_vs_one_pass(&CASES[i], 77 + i);
}

/* A cache problem with kv_dtype kd over B sequences of their own lengths:
 * Sn = 2 new rows, CAP = 8, H = 2, G = 1, c = 3, width 4; random tensors
 * from seed.  Fills out, the caches after the run and (int8) the scales,
 * which start at -1 so that only the run's rows change them. */
static void cache_problem(int kd, long B, const double *lens, unsigned long seed, ref_problem *p, ref_tensors *t,
                          double **out, double **kc2, double **vc2, double **ks, double **vs)
{
  const long Sn = 2, CAP = 8, H = 2, G = 1, c = 3, cin = 4;
  long xs[] = { B, Sn, cin };
  *p = full_problem(3, xs, 1, (int)H, (int)G, (int)c);
  p->cache = CAP;
  p->kv_dtype = kd;
  p->causal = REF_CAUSAL_BOTTOM_RIGHT;
  p->rope = REF_ROPE_NEOX;
  p->rope_dim = 2;
  *t = no_tensors();
  t->x = rnd_alloc(B * Sn * cin, 1.0, &seed);
  t->wq = rnd_alloc(H * c * cin, 0.7, &seed);
  t->wk = rnd_alloc(G * c * cin, 0.7, &seed);
  t->wv = rnd_alloc(G * c * cin, 0.7, &seed);
  t->wo = rnd_alloc(cin * H * c, 0.7, &seed);
  t->k_cache = rnd_alloc(B * G * CAP * c, 1.0, &seed);
  t->v_cache = rnd_alloc(B * G * CAP * c, 1.0, &seed);
  t->cache_len = lens;
  *out = malloc((size_t)(B * Sn * cin) * sizeof **out);
  t->k_cache_out = *kc2 = malloc((size_t)(B * G * CAP * c) * sizeof **kc2);
  t->v_cache_out = *vc2 = malloc((size_t)(B * G * CAP * c) * sizeof **vc2);
  t->k_scale_out = *ks = malloc((size_t)(B * G * CAP) * sizeof **ks);
  t->v_scale_out = *vs = malloc((size_t)(B * G * CAP) * sizeof **vs);
  for (long i = 0; i < B * G * CAP; i++) (*ks)[i] = (*vs)[i] = -1.0;
}

static void cache_problem_free(ref_tensors *t, double *out, double *kc2, double *vc2, double *ks, double *vs)
{
  free((void *)t->x); free((void *)t->wq); free((void *)t->wk); free((void *)t->wv); free((void *)t->wo);
  free((void *)t->k_cache); free((void *)t->v_cache);
  free(out); free(kc2); free(vc2); free(ks); free(vs);
}

/* Two sequences of different lengths in one run: each equals a run of its
 * own (batch element 1 sliced out), and only its rows len..len+1 of the
 * caches change. */
static void test_reference_cache_per_sequence(void **state)
{
  (void)state;
  const long Sn = 2, CAP = 8, c = 3, cin = 4;
  double lens[] = { 1, 5 }, out1[8];
  ref_problem p, p1;
  ref_tensors t, t1;
  double *out, *kc2, *vc2, *ks, *vs, *o1, *k1, *v1, *s1, *s2;
  cache_problem(REF_KV_F64, 2, lens, 5, &p, &t, &out, &kc2, &vc2, &ks, &vs);
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (long b = 0; b < 2; b++)
    for (long j = 0; j < CAP; j++)
      for (long d = 0; d < c; d++) {
        const long at = (b * CAP + j) * c + d;
        if (j < lens[b] || j >= lens[b] + Sn) {
          assert_true(kc2[at] == t.k_cache[at]);
          assert_true(vc2[at] == t.v_cache[at]);
        } else {
          assert_true(kc2[at] != t.k_cache[at]);
        }
      }
  { /* visibility (the heatmap's hatching): query i of element b sees keys j <= cache_len[b] + i */
    unsigned char vis[2 * 2 * 2 * 8]; /* (batch, H = 2, Sn, CAP) */
    long n = 0;
    assert_int_equal(ref_visible(&p, &t, vis), (long)sizeof vis);
    for (long b = 0; b < 2; b++)
      for (long h = 0; h < 2; h++)
        for (long i = 0; i < Sn; i++)
          for (long j = 0; j < CAP; j++) assert_int_equal(vis[n++], j <= (long)lens[b] + i);
  }
  /* batch element 1 on its own */
  cache_problem(REF_KV_F64, 1, lens + 1, 6, &p1, &t1, &o1, &k1, &v1, &s1, &s2);
  memcpy((void *)t1.x, t.x + Sn * cin, (size_t)(Sn * cin) * sizeof(double));
  memcpy((void *)t1.wq, t.wq, 2 * 3 * 4 * sizeof(double));
  memcpy((void *)t1.wk, t.wk, 3 * 4 * sizeof(double));
  memcpy((void *)t1.wv, t.wv, 3 * 4 * sizeof(double));
  memcpy((void *)t1.wo, t.wo, 4 * 2 * 3 * sizeof(double));
  memcpy((void *)t1.k_cache, t.k_cache + CAP * c, (size_t)(CAP * c) * sizeof(double));
  memcpy((void *)t1.v_cache, t.v_cache + CAP * c, (size_t)(CAP * c) * sizeof(double));
  assert_int_equal(ref_attention(&p1, &t1, out1), 0);
  for (long e = 0; e < Sn * cin; e++) assert_near(out[Sn * cin + e], out1[e], TOL);
  for (long e = 0; e < CAP * c; e++) assert_near(kc2[CAP * c + e], k1[e], 0.0);
  cache_problem_free(&t1, o1, k1, v1, s1, s2);
  cache_problem_free(&t, out, kc2, vc2, ks, vs);
}

/* The rows a run writes are the exact (kv_dtype f64) rows rounded as the
 * cache stores them: to nearest even for f32, bf16 and f16, or quantised
 * per row for int8, whose scale lands in the scale output, and only there. */
static void test_reference_cache_rounds_new_rows(void **state)
{
  (void)state;
  static const int KD[] = { REF_KV_F32, REF_KV_BF16, REF_KV_F16, REF_KV_INT8 };
  const long Sn = 2, CAP = 8, c = 3;
  double lens[] = { 0, 6 };
  ref_problem p;
  ref_tensors t;
  double *out, *kc, *vc, *ks, *vs;
  cache_problem(REF_KV_F64, 2, lens, 9, &p, &t, &out, &kc, &vc, &ks, &vs);
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (size_t k = 0; k < sizeof KD / sizeof KD[0]; k++) {
    ref_problem pk;
    ref_tensors tk;
    double *outk, *kck, *vck, *ksk, *vsk;
    cache_problem(KD[k], 2, lens, 9, &pk, &tk, &outk, &kck, &vck, &ksk, &vsk);   /* the same tensors */
    assert_int_equal(ref_attention(&pk, &tk, outk), 0);
    for (long b = 0; b < 2; b++)
      for (long j = 0; j < CAP; j++) {
        const long row = b * CAP + j;
        const int written = j >= lens[b] && j < lens[b] + Sn;
        double krow[3], vrow[3];
        memcpy(krow, kc + row * c, sizeof krow);
        memcpy(vrow, vc + row * c, sizeof vrow);
        if (written && KD[k] == REF_KV_INT8) {
          assert_near(ksk[row], ref_quantize_row(krow, c), 0.0);
          assert_near(vsk[row], ref_quantize_row(vrow, c), 0.0);
        } else {
          assert_true(ksk[row] == -1.0 && vsk[row] == -1.0);   /* scales of other rows, or other dtypes: untouched */
        }
        for (long d = 0; d < c; d++) {
          double kw = written ? (KD[k] == REF_KV_INT8 ? krow[d] : ref_round_kv(KD[k], krow[d])) : kc[row * c + d];
          double vw = written ? (KD[k] == REF_KV_INT8 ? vrow[d] : ref_round_kv(KD[k], vrow[d])) : vc[row * c + d];
          assert_near(kck[row * c + d], kw, 0.0);
          assert_near(vck[row * c + d], vw, 0.0);
          if (written && KD[k] != REF_KV_INT8) assert_true(kck[row * c + d] != kc[row * c + d]);   /* it did round */
        }
      }
    /* the rounded rows feed the attention: out moves, by about the rounding */
    double dmax = 0.0;
    for (long e = 0; e < 2 * Sn * 4; e++) dmax = fmax(dmax, fabs(outk[e] - out[e]));
    assert_true(dmax > 0.0 && dmax < 0.1);
    cache_problem_free(&tk, outk, kck, vck, ksk, vsk);
  }
  cache_problem_free(&t, out, kc, vc, ks, vs);
}

/* ref_round_kv agrees with the library's conversion (attnc_convert rounds
 * to nearest even through f32 with ties to odd, which equals one rounding)
 * on random values of every size, ties, subnormals and overflow. */
static void test_reference_cache_round_kv(void **state)
{
  (void)state;
  static const struct { int kd; attnc_dtype dt; } KD[] = {
    { REF_KV_F32, ATTNC_F32 }, { REF_KV_BF16, ATTNC_BF16 }, { REF_KV_F16, ATTNC_F16 },
  };
  unsigned long s = 31;
  for (size_t k = 0; k < sizeof KD / sizeof KD[0]; k++)
    for (int i = 0; i < 20000; i++) {
      /* magnitudes from 2^-160 to 2^140; every 7th a tie halfway between two bf16/f16 values near 1 */
      double x = ldexp(rnd_fine(&s), (int)(rnd(&s) * 150) - 10);
      if (i % 7 == 0) x = 1.0 + ldexp((double)(i % 64) + 0.5, KD[k].kd == REF_KV_BF16 ? -7 : -10) / 64.0 * 64.0;
      if (i % 7 == 1) x = ldexp(rnd_fine(&s), -140 - i % 20);
      if (i % 7 == 2) x = 65504.0 + 16.0 * (double)(i % 3);   /* f16's largest, its tie to inf, and past it */
      unsigned char buf[8];
      double back;
      attnc_convert(&x, ATTNC_F64, buf, KD[k].dt, 1);
      attnc_convert(buf, KD[k].dt, &back, ATTNC_F64, 1);
      if (!(ref_round_kv(KD[k].kd, x) == back)) {
        print_error("kv %d: x = %.17g rounds to %.17g, attnc_convert gives %.17g\n", KD[k].kd, x, ref_round_kv(KD[k].kd, x), back);
        fail();
      }
    }
  assert_near(ref_round_kv(REF_KV_F64, 0.1), 0.1, 0.0);
}

/* int8 rows: the scale is max|x| / 127 as an F32 (1 for zeros), every value
 * is q * scale with q a whole number in -127..127 within half a step of x,
 * the largest |q| is 127; attnc quantize gives the same scales and the
 * same q except where x / scale sits within f32 rounding of a tie. */
static void test_reference_cache_quantize_row(void **state)
{
  (void)state;
  unsigned long s = 47;
  for (int r = 0; r < 500; r++) {
    double x[16], y[16];
    float xf[16], sc;
    int8_t q[16];
    const long c = 1 + r % 16;
    const double amp = ldexp(1.0, r % 40 - 20);
    for (long d = 0; d < c; d++) x[d] = y[d] = xf[d] = (float)(amp * rnd_fine(&s));   /* f32 values, as the library takes them */
    if (r % 50 == 0)
      for (long d = 0; d < c; d++) x[d] = y[d] = xf[d] = 0.0f;
    double scale = ref_quantize_row(y, c), mx = 0.0;
    for (long d = 0; d < c; d++) mx = fmax(mx, fabs(x[d]));
    assert_near(scale, mx > 0 ? (double)(float)(mx / 127.0) : 1.0, 0.0);
    attnc_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = ATTNC_F32;
    t.rank = 2;
    t.shape[0] = 1;
    t.shape[1] = c;
    t.data = xf;
    assert_int_equal(attnc_quantize_int8(&t, q, &sc, NULL), ATTNC_OK);
    assert_near(scale, (double)sc, 0.0);
    double qmax = 0.0;
    for (long d = 0; d < c; d++) {
      const double qd = y[d] / scale, frac = fabs(x[d] / scale - floor(x[d] / scale) - 0.5);
      assert_near(qd, nearbyint(qd), 0.0);
      assert_true(fabs(qd) <= 127.0);
      assert_true(fabs(y[d] - x[d]) <= scale / 2);
      qmax = fmax(qmax, fabs(qd));
      if (frac > 1e-5) assert_near(qd, (double)q[d], 0.0);
    }
    assert_near(qmax, mx > 0 ? 127.0 : 0.0, 0.0);
  }
}

/* empty_rows=uniform with a cache averages over the keys filled after the
 * run, 0 .. cache_len + Sn - 1, not over all CAP positions. */
static void test_reference_cache_uniform_empty_rows(void **state)
{
  (void)state;
  const long Sn = 2, CAP = 8;
  double lens[] = { 3 }, mask[8] = { 0 }, w[2 * 2 * 8];
  ref_problem p;
  ref_tensors t;
  double *out, *kc, *vc, *ks, *vs;
  cache_problem(REF_KV_F64, 1, lens, 3, &p, &t, &out, &kc, &vc, &ks, &vs);
  p.empty_rows = REF_EMPTY_UNIFORM;
  p.has_mask = 1;
  p.mask_rank = 1;
  p.mask[0] = CAP;
  t.mask = mask;   /* every key hidden */
  t.weights = w;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (long r = 0; r < 2 * Sn; r++)
    for (long j = 0; j < CAP; j++) assert_near(w[r * CAP + j], j < lens[0] + Sn ? 1.0 / (lens[0] + Sn) : 0.0, TOL);
  cache_problem_free(&t, out, kc, vc, ks, vs);
}

/* A run whose rows do not fit, a cache_len that is no position, and
 * combinations the spec language refuses (pe is not one of them). */
static void test_reference_cache_rejects(void **state)
{
  (void)state;
  ref_problem p;
  ref_tensors t;
  double *out, *kc, *vc, *ks, *vs;
  double lens[] = { 6, 0 };   /* 6 + 2 = 8 = CAP: fits */
  cache_problem(REF_KV_BF16, 2, lens, 4, &p, &t, &out, &kc, &vc, &ks, &vs);
  assert_int_equal(ref_attention(&p, &t, out), 0);
  lens[1] = 7;   /* 7 + 2 > 8 */
  assert_int_equal(ref_attention(&p, &t, out), -1);
  lens[1] = -1;
  assert_int_equal(ref_attention(&p, &t, out), -1);
  lens[1] = 0.5;
  assert_int_equal(ref_attention(&p, &t, out), -1);
  lens[1] = 0;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  ref_problem q = p;
  q.cache = 1;   /* CAP < Sn */
  assert_int_equal(ref_attention(&q, &t, out), -1);
  q = p;
  q.pe = REF_PE_SINUSOIDAL;   /* pe with a cache: x's new rows encoded at their positions */
  assert_int_equal(ref_attention(&q, &t, out), 0);
  q = p;
  q.global = 1;
  q.rope = REF_ROPE_NONE;
  q.G = 1;
  assert_int_equal(ref_attention(&q, &t, out), -1);
  q = p;
  q.kv_dtype = REF_KV_INT8 + 1;
  assert_int_equal(ref_attention(&q, &t, out), -1);
  q = p;
  q.kv[1] = 3;   /* cross-attention */
  assert_int_equal(ref_attention(&q, &t, out), -1);
  ref_tensors u = t;
  u.v_cache = NULL;
  assert_int_equal(ref_attention(&p, &u, out), -1);
  u = t;
  u.cache_len = NULL;
  assert_int_equal(ref_attention(&p, &u, out), -1);
  cache_problem_free(&t, out, kc, vc, ks, vs);
}

/* DESIGN.md's two known answers (Random123's kat_vectors for philox4x32_10). */
static void test_reference_philox_known_answers(void **state)
{
  (void)state;
  uint32_t c0[4] = { 0, 0, 0, 0 }, k0[2] = { 0, 0 }, out[4];
  uint32_t c1[4] = { 0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u }, k1[2] = { 0xa4093822u, 0x299f31d0u };
  ref_philox4x32_10(c0, k0, out);
  assert_true(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
  ref_philox4x32_10(c1, k1, out);
  assert_true(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u && out[3] == 0x24126ea1u);

  /* The same words through the keep rule: counter (j/4, i, h, b), key
   * (seed mod 2^32, seed / 2^32), word j mod 4 against floor(p 2^32). */
  const uint64_t seed = 0x299f31d0a4093822ull;
  const long j0 = 4L * 0x243f6a88L, i = 0x85a308d3L, h = 0x13198a2eL, b = 0x03707344L;
  const int half[4] = { 1, 1, 0, 0 };   /* 0xd16cfe09, 0x94fdcceb >= 2^31 > 0x5001e420, 0x24126ea1 */
  for (int m = 0; m < 4; m++) assert_int_equal(ref_dropout_keeps(0.5, seed, b, h, i, j0 + m), half[m]);
  /* the threshold is inclusive: a word equal to it is kept */
  assert_int_equal(ref_dropout_keeps(0x94fdccebu / 4294967296.0, seed, b, h, i, j0 + 1), 1);
  assert_int_equal(ref_dropout_keeps(0x94fdccecu / 4294967296.0, seed, b, h, i, j0 + 1), 0);
  assert_int_equal(ref_dropout_keeps(0.0, seed, b, h, i, j0 + 3), 1);   /* p = 0 keeps every key */
  const int zero[4] = { 0, 1, 1, 1 };   /* 0x6627e8d5 < 2^31 <= the other three */
  for (int m = 0; m < 4; m++) assert_int_equal(ref_dropout_keeps(0.5, 0, 0, 0, 0, m), zero[m]);
}

/* One query over four keys with equal logits (weights 1/4) and v the
 * identity, so out is the row of weights after dropout: with seed 0 and
 * p = 1/2 the first known answer drops key 0 and keeps keys 1..3, each
 * scaled by 2.  lse is the softmax's and the weights output the
 * probabilities before dropout (DESIGN.md's weights_out), whatever
 * dropout does. */
static void test_reference_dropout_by_hand(void **state)
{
  (void)state;
  long qs[] = { 1, 1, 1, 4 }, kvs[] = { 1, 1, 4, 4 };
  ref_problem p = core_problem(4, qs, kvs);
  double q[4] = { 0 }, k[16], v[16] = { 0 }, out[4], w[4], lse;
  for (int e = 0; e < 16; e++) k[e] = 0.1 * e;
  for (int d = 0; d < 4; d++) v[d * 4 + d] = 1.0;
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  t.weights = w;
  t.lse = &lse;
  p.dropout = 0.5;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  const double want[4] = { 0.0, 0.5, 0.5, 0.5 };
  for (int d = 0; d < 4; d++) {
    assert_near(out[d], want[d], TOL);
    assert_near(w[d], 0.25, TOL);   /* the weights output is before dropout */
  }
  assert_near(lse, log(4.0), TOL);

  /* dropout = 0 is no dropout; another seed drops other keys */
  p.dropout = 0.0;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (int d = 0; d < 4; d++) assert_near(out[d], 0.25, TOL);
  p.dropout = 0.5;
  p.seed = 1;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  for (int d = 0; d < 4; d++) assert_near(out[d], ref_dropout_keeps(0.5, 1, 0, 0, 0, d) ? 0.5 : 0.0, TOL);

  /* p outside [0, 1) is not a problem */
  p.dropout = 1.0;
  assert_int_equal(ref_attention(&p, &t, out), -1);
  p.dropout = -0.1;
  assert_int_equal(ref_attention(&p, &t, out), -1);
}

/* Dropout's counter: b the batch element flattened row-major, h the query
 * head, i the logit row, j the key; a sink keeps its share and rows that
 * see no key follow empty_rows untouched. */
static void test_reference_dropout_counter(void **state)
{
  (void)state;
  enum { NB0 = 2, NB1 = 3, H = 2, SQ = 5 };
  long qs[] = { NB0, NB1, H, SQ, SQ }, kvs[] = { NB0, NB1, H, SQ, SQ };
  ref_problem p = core_problem(5, qs, kvs);
  static double q[NB0 * NB1 * H * SQ * SQ], k[NB0 * NB1 * H * SQ * SQ], v[NB0 * NB1 * H * SQ * SQ],
      out[NB0 * NB1 * H * SQ * SQ], w[NB0 * NB1 * H * SQ * SQ], out0[NB0 * NB1 * H * SQ * SQ], w0[NB0 * NB1 * H * SQ * SQ];
  unsigned long rs = 5;
  for (int e = 0; e < NB0 * NB1 * H * SQ * SQ; e++) {
    q[e] = rnd(&rs);
    k[e] = rnd(&rs);
    v[e] = rnd(&rs);
  }
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  t.weights = w0;
  p.causal = REF_CAUSAL_TOP_LEFT;
  assert_int_equal(ref_attention(&p, &t, out0), 0);
  p.dropout = 0.3;
  p.seed = 0x123456789abcull;
  t.weights = w;
  assert_int_equal(ref_attention(&p, &t, out), 0);
  /* the weights output is the probabilities before dropout; out is the
   * sum over the keys of the kept weights over 1-p times v */
  for (long n = 0; n < NB0 * NB1 * H * SQ * SQ; n++) assert_near(w[n], w0[n], TOL);
  for (long b = 0; b < NB0 * NB1; b++)
    for (long h = 0; h < H; h++)
      for (long i = 0; i < SQ; i++)
        for (long d = 0; d < SQ; d++) {
          const long row = (b * H + h) * SQ + i;
          double want = 0;
          for (long j = 0; j < SQ; j++)
            if (ref_dropout_keeps(0.3, p.seed, b, h, i, j)) want += w0[row * SQ + j] / 0.7 * v[((b * H + h) * SQ + j) * SQ + d];
          assert_near(out[row * SQ + d], want, TOL);
        }

  /* a sink's share is not dropped (the kept keys still sum to what they
   * had over 1-p); an empty row under empty_rows=uniform keeps its 1/Sk */
  long qs1[] = { 1, 1, 1, 8 }, kvs1[] = { 1, 1, 8, 8 };
  ref_problem p1 = core_problem(4, qs1, kvs1);
  double q1[8] = { 0 }, k1[64] = { 0 }, v1[64] = { 0 }, o1[8], w1[8], sink = 0.0, mask[8] = { 0 }, lse1;
  for (int d = 0; d < 8; d++) v1[d * 8 + d] = 1.0;
  ref_tensors t1 = no_tensors();
  t1.q = q1;
  t1.k = k1;
  t1.v = v1;
  t1.weights = w1;
  t1.sinks = &sink;
  t1.lse = &lse1;
  p1.sinks = 1;
  p1.dropout = 0.25;
  assert_int_equal(ref_attention(&p1, &t1, o1), 0);
  for (int d = 0; d < 8; d++) assert_near(o1[d], ref_dropout_keeps(0.25, 0, 0, 0, 0, d) ? 1.0 / 9.0 / 0.75 : 0.0, TOL);
  assert_near(lse1, log(9.0), TOL);
  p1.sinks = 0;
  p1.empty_rows = REF_EMPTY_UNIFORM;
  p1.has_mask = 1;
  p1.mask_rank = 1;
  p1.mask[0] = 8;
  t1.mask = mask;
  t1.sinks = NULL;
  assert_int_equal(ref_attention(&p1, &t1, o1), 0);
  for (int d = 0; d < 8; d++) assert_near(o1[d], 1.0 / 8.0, TOL);
  assert_true(isinf(lse1) && lse1 < 0);
}

/* The kept fraction over 2^20 draws is 1 - p within 4 standard deviations,
 * for each p and for each word position j mod 4. */
static void test_reference_dropout_fraction(void **state)
{
  (void)state;
  const double ps[] = { 0.1, 0.5, 0.9 };
  for (int k = 0; k < 3; k++) {
    long kept[4] = { 0 }, n = 0;
    for (long b = 0; b < 4; b++)
      for (long h = 0; h < 4; h++)
        for (long i = 0; i < 128; i++)
          for (long j = 0; j < 512; j++, n++) kept[j % 4] += ref_dropout_keeps(ps[k], 77 + ((uint64_t)k << 33), b, h, i, j);
    for (int m = 0; m < 4; m++) {
      double nm = n / 4.0, sd = sqrt(nm * ps[k] * (1 - ps[k]));
      assert_true(fabs(kept[m] - nm * (1 - ps[k])) < 4 * sd);
    }
  }
}

/* Finite differences against gradients worked out by hand: one query, two
 * keys, c = 1, so out = w0 v0 + w1 v1 with w = softmax(s q k), and
 * dL/dq = dout (v0 - v1) w0 w1 s (k0 - k1); dL/dv_j = dout w_j (over 1-p
 * where dropout keeps j, else 0). */
static void test_reference_grad_fd_by_hand(void **state)
{
  (void)state;
  long qs[] = { 1, 1, 1 }, kvs[] = { 1, 2, 1 };
  ref_problem p = core_problem(3, qs, kvs);
  p.scale = 0.7;
  double q[] = { 0.9 }, k[] = { 1.3, -0.4 }, v[] = { 2.0, -1.5 }, dout[] = { 1.7 }, g;
  ref_tensors t = no_tensors();
  t.q = q;
  t.k = k;
  t.v = v;
  double s0 = exp(0.7 * 0.9 * 1.3), s1 = exp(0.7 * 0.9 * -0.4), w0 = s0 / (s0 + s1), w1 = s1 / (s0 + s1);
  assert_int_equal(ref_grad_count(&p, &t, REF_G_Q), 1);
  assert_int_equal(ref_grad_count(&p, &t, REF_G_K), 2);
  assert_int_equal(ref_grad_count(&p, &t, REF_G_X), 0);
  assert_int_equal(ref_grad_count(&p, &t, REF_G_WQ), 0);
  assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_Q, 0, &g), 0);
  assert_near(g, 1.7 * (2.0 + 1.5) * w0 * w1 * 0.7 * (1.3 + 0.4), 1e-10);
  assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_K, 0, &g), 0);
  assert_near(g, 1.7 * (2.0 + 1.5) * w0 * w1 * 0.7 * 0.9, 1e-10);
  assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_V, 1, &g), 0);
  assert_near(g, 1.7 * w1, 1e-10);
  assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_V, 2, &g), -1);   /* past the end */
  assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_WO, 0, &g), -1);  /* no such tensor */
  p.dropout = 0.5;
  for (long j = 0; j < 2; j++) {
    assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_V, j, &g), 0);
    assert_near(g, ref_dropout_keeps(0.5, 0, 0, 0, 0, j) ? 1.7 * (j ? w1 : w0) / 0.5 : 0.0, 1e-10);
  }
  /* a zero dout leaves its term (here a NaN output) out of L */
  dout[0] = 0.0;
  v[0] = NAN;
  assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_Q, 0, &g), 0);
  assert_true(g == 0.0);
}

/* Full mode: the output bias's gradient is the sum of dout over the rows,
 * and x's gradient in self-attention counts both of x's roles (q, and k
 * and v), which a cross-attention problem with kv = a copy of x splits in two. */
static void test_reference_grad_fd_full(void **state)
{
  (void)state;
  enum { SR = 4, CF = 6, H = 2, HCF = 4 };
  long xs[] = { 2, SR, CF };
  ref_problem p = full_problem(3, xs, 1, H, H, HCF / H);
  p.qkv_bias = p.out_bias = p.gated = 1;
  p.causal = REF_CAUSAL_TOP_LEFT;
  p.dropout = 0.2;
  p.seed = 9;
  double x[2 * SR * CF], kv[2 * SR * CF], wq[HCF * CF], bq[HCF], wk[HCF * CF], bk[HCF], wv[HCF * CF], bv[HCF], wg[HCF * CF], bg[HCF],
      wo[CF * HCF], bo[CF], dout[2 * SR * CF], g, gq, gkv;
  unsigned long rs = 11;
  for (int e = 0; e < 2 * SR * CF; e++) {
    x[e] = kv[e] = rnd(&rs);
    dout[e] = rnd(&rs);
  }
  for (int e = 0; e < HCF * CF; e++) {
    wq[e] = rnd(&rs);
    wk[e] = rnd(&rs);
    wv[e] = rnd(&rs);
    wg[e] = rnd(&rs);
    wo[e] = rnd(&rs);
  }
  for (int e = 0; e < HCF; e++) {
    bq[e] = rnd(&rs);
    bk[e] = rnd(&rs);
    bv[e] = rnd(&rs);
    bg[e] = rnd(&rs);
  }
  for (int e = 0; e < CF; e++) bo[e] = rnd(&rs);
  ref_tensors t = no_tensors();
  t.x = x;
  t.wq = wq; t.bq = bq; t.wk = wk; t.bk = bk; t.wv = wv; t.bv = bv; t.wg = wg; t.bg = bg; t.wo = wo; t.bo = bo;
  assert_int_equal(ref_grad_count(&p, &t, REF_G_KV), 0);
  assert_int_equal(ref_grad_count(&p, &t, REF_G_WG), HCF * CF);
  assert_int_equal(ref_grad_count(&p, &t, REF_G_BO), CF);
  for (long e = 0; e < CF; e++) {
    double want = 0;
    for (long r = 0; r < 2 * SR; r++) want += dout[r * CF + e];
    assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_BO, e, &g), 0);
    assert_near(g, want, 1e-9);
  }
  /* softmax ignores a per-row constant: the k bias has no gradient */
  for (long e = 0; e < HCF; e++) {
    assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_BK, e, &g), 0);
    assert_near(g, 0.0, 1e-9);
  }
  ref_tensors tc = t;
  tc.kv = kv;
  assert_int_equal(ref_grad_count(&p, &tc, REF_G_KV), 2 * SR * CF);
  for (long e = 0; e < 2 * SR * CF; e += 5) {
    assert_int_equal(ref_grad_fd(&p, &t, dout, REF_G_X, e, &g), 0);
    assert_int_equal(ref_grad_fd(&p, &tc, dout, REF_G_X, e, &gq), 0);
    assert_int_equal(ref_grad_fd(&p, &tc, dout, REF_G_KV, e, &gkv), 0);
    assert_near(g, gq + gkv, 1e-9);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reference_one_head_by_hand),
    cmocka_unit_test(test_reference_cross_attention_by_hand),
    cmocka_unit_test(test_reference_empty_rows_zero),
    cmocka_unit_test(test_reference_empty_rows_uniform),
    cmocka_unit_test(test_reference_empty_rows_nan),
    cmocka_unit_test(test_reference_causal_top_left),
    cmocka_unit_test(test_reference_causal_bottom_right),
    cmocka_unit_test(test_reference_window),
    cmocka_unit_test(test_reference_visible_mask),
    cmocka_unit_test(test_reference_global_ungated_shape),
    cmocka_unit_test(test_reference_global_by_hand),
    cmocka_unit_test(test_reference_gqa_head_mapping),
    cmocka_unit_test(test_reference_large_logits),
    cmocka_unit_test(test_reference_bias_mask_broadcast_rank4),
    cmocka_unit_test(test_reference_rejects_bad_problems),
    cmocka_unit_test(test_reference_rope_neox_by_hand),
    cmocka_unit_test(test_reference_rope_gptj_by_hand),
    cmocka_unit_test(test_reference_rope_partial_dim),
    cmocka_unit_test(test_reference_rope_freqs),
    cmocka_unit_test(test_reference_rope_defaults),
    cmocka_unit_test(test_reference_rope_relative),
    cmocka_unit_test(test_reference_rope_after_bias),
    cmocka_unit_test(test_reference_alibi_power_of_two),
    cmocka_unit_test(test_reference_alibi_not_power_of_two),
    cmocka_unit_test(test_reference_cross_attention_positions),
    cmocka_unit_test(test_reference_explicit_positions),
    cmocka_unit_test(test_reference_softcap),
    cmocka_unit_test(test_reference_sinks),
    cmocka_unit_test(test_reference_lse),
    cmocka_unit_test(test_reference_lse_shape),
    cmocka_unit_test(test_reference_pe_cross),
    cmocka_unit_test(test_reference_pe_self),
    cmocka_unit_test(test_reference_rejects_bad_modifiers),
    cmocka_unit_test(test_reference_cache_equals_one_pass),
    cmocka_unit_test(test_reference_cache_per_sequence),
    cmocka_unit_test(test_reference_cache_rounds_new_rows),
    cmocka_unit_test(test_reference_cache_round_kv),
    cmocka_unit_test(test_reference_cache_quantize_row),
    cmocka_unit_test(test_reference_cache_uniform_empty_rows),
    cmocka_unit_test(test_reference_cache_rejects),
    cmocka_unit_test(test_reference_philox_known_answers),
    cmocka_unit_test(test_reference_dropout_by_hand),
    cmocka_unit_test(test_reference_dropout_counter),
    cmocka_unit_test(test_reference_dropout_fraction),
    cmocka_unit_test(test_reference_grad_fd_by_hand),
    cmocka_unit_test(test_reference_grad_fd_full),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
