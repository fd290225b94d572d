/* Golden cases from PyTorch (tools/make_golden.py): every case in
 * tests/golden/cases.txt is compiled, bound from its safetensors file by
 * name (with its prefix), run on both backends in both kernel forms
 * (fast and plain) and compared with the
 * float64 `out` the script computed: 1e-5 absolute + 1e-4 relative for
 * f32, 1e-12 + 1e-10 for f64, DESIGN.md's NMSE and elementwise bounds for
 * bf16 and f16 (printing attnc's NMSE beside PyTorch's own bf16 result's),
 * NaN where PyTorch has NaN.
 *
 * The training cases (tests/golden/train.txt) run forward and backward
 * (attnc_grad) on both backends with 1 and 2 threads, and compare out and
 * every gradient with PyTorch's float64 autograd: within 1e-9 of each
 * gradient's rms plus 1e-9 relative for f64 kernels, 1e-4 for f32 (DESIGN.md's
 * gradient rows).  The float64 reference is held to the same golden data
 * (its dropout, and its finite-difference gradients), and dropout's keep
 * mask is checked bit for bit against the bits the script's own Philox drew. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "checker.h"
#include "reference.h"
#include "testutil.h"

/* 1 (printed) if the output got differs from the file's tensor `want`
 * beyond atol + rtol |want| anywhere. */
static int other_output(const char *name, const attnc_safetensors *f, const char *want, const attnc_tensor *got,
                        const char *label, double atol, double rtol)
{
  attnc_tensor wt;
  size_t n = 0, m = 0, where = 0;
  double *g, *w;
  int bad;
  assert_int_equal(attnc_st_find(f, want, &wt), ATTNC_OK);
  g = tu_to_double(got, &n);
  w = tu_to_double(&wt, &m);
  assert_non_null(g);
  assert_non_null(w);
  assert_int_equal(n, m);
  bad = tu_compare(g, w, n, atol, rtol, &where) > 1;
  if (bad) fprintf(stderr, "MISMATCH %s %s element %zu: got %.9g want %.9g\n", name, label, where, g[where], w[where]);
  free(g);
  free(w);
  return bad;
}

static int run_case(const char *name, const char *prefix, const char *spec, attnc_backend be, attnc_form form)
{
  char path[1024];
  attnc_options o = { be, 0, name, form };
  attnc_error e;
  attnc_safetensors *f;
  attnc_kernel *k;
  attnc_bindings *b;
  attnc_tensor out, want, lse, attn, caches[4];
  const char *cache_names[4];
  double *got, *exp_;
  size_t n, m, where;
  double worst, atol, rtol;
  int nbound = 0, fails = 0, ncache = 0;
  /* int8 weights or an int8 cache: DESIGN.md's weights=int8 row */
  const int int8 = strstr(spec, "weights=int8") || strstr(spec, "kv_dtype=int8");

  snprintf(path, sizeof path, "%s/tests/golden/%s.safetensors", tu_root(), name);
  f = attnc_st_open(path, &e);
  assert_non_null(f);
  k = attnc_compile(spec, &o, &e);
  if (!k) fprintf(stderr, "%s: %s: %s\n", name, e.where, e.message);
  assert_non_null(k);
  b = attnc_bindings_new(k);
  assert_non_null(b);
  assert_int_equal(attnc_bind_safetensors(b, f, strcmp(prefix, "-") ? prefix : NULL, &nbound, &e), ATTNC_OK);
  assert_true(nbound > 0);
  /* a cache spec's caches, which the kernel writes in place: writable copies of the file's */
  for (int i = 0; i < 4; i++) {
    const char *cn = attnc_inplace_name(k, i, NULL);
    size_t bytes;
    void *copy;
    if (!cn) break;
    assert_int_equal(attnc_st_find(f, cn, &caches[ncache]), ATTNC_OK);
    bytes = attnc_dtype_size(caches[ncache].dtype);
    for (int a = 0; a < caches[ncache].rank; a++) bytes *= (size_t)caches[ncache].shape[a];
    copy = malloc(bytes + 1);
    assert_non_null(copy);
    memcpy(copy, caches[ncache].data, bytes);
    caches[ncache].data = copy;
    assert_int_equal(attnc_bind(b, cn, &caches[ncache], &e), ATTNC_OK);
    cache_names[ncache++] = cn;
  }
  if (attnc_output_shape(b, &out, &e) != ATTNC_OK) fprintf(stderr, "%s: %s\n", name, e.message);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
  assert_int_equal(attnc_st_find(f, "out", &want), ATTNC_OK);
  assert_int_equal(out.rank, want.rank);
  assert_memory_equal(out.shape, want.shape, sizeof(int64_t) * (size_t)out.rank);
  n = 1;
  for (int a = 0; a < out.rank; a++) n *= (size_t)out.shape[a];
  out.data = malloc(n * attnc_dtype_size(out.dtype) + 1);
  assert_non_null(out.data);
  memset(&lse, 0, sizeof lse);
  if (attnc_output_info(b, "lse", &lse, &e) == ATTNC_OK) { /* the spec has lse: the file has PyTorch's logsumexp */
    size_t nl = 1;
    for (int a = 0; a < lse.rank; a++) nl *= (size_t)lse.shape[a];
    lse.data = malloc(nl * sizeof(float) + 1);
    assert_non_null(lse.data);
    assert_int_equal(attnc_bind_output(b, "lse", &lse, &e), ATTNC_OK);
  }
  memset(&attn, 0, sizeof attn);
  if (attnc_output_info(b, "attn", &attn, &e) == ATTNC_OK) { /* weights_out: the file has PyTorch's probabilities */
    size_t na = 1;
    for (int a = 0; a < attn.rank; a++) na *= (size_t)attn.shape[a];
    attn.data = malloc(na * sizeof(float) + 1);
    assert_non_null(attn.data);
    assert_int_equal(attnc_bind_output(b, "attn", &attn, &e), ATTNC_OK);
  }
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  if (attn.data) {
    fails |= other_output(name, f, "attn", &attn, "attn", 1e-5, 1e-4);
    free(attn.data);
  }
  /* the caches as the run left them: the file's expect.NAME (the new rows
   * written, the others as they were); an int8 row's values may round
   * the other way by one where f32 and float64 projections straddle a half */
  for (int i = 0; i < ncache; i++) {
    char ename[64];
    const int i8 = caches[i].dtype == ATTNC_I8, scale = strstr(cache_names[i], "_scale") != NULL;
    snprintf(ename, sizeof ename, "expect.%s", cache_names[i]);
    fails |= other_output(name, f, ename, &caches[i], cache_names[i], i8 ? 1.0 : scale ? 0 : 1e-5, i8 ? 0 : scale ? 1e-5 : 1e-4);
    free(caches[i].data);
  }
  if (lse.data) {
    fails |= other_output(name, f, "lse", &lse, "lse", 1e-5, 1e-4);
    free(lse.data);
  }
  got = tu_to_double(&out, &n);
  exp_ = tu_to_double(&want, &m);
  assert_int_equal(n, m);
  if ((out.dtype == ATTNC_F32 && !int8) || out.dtype == ATTNC_F64) {
    atol = out.dtype == ATTNC_F32 ? 1e-5 : 1e-12;
    rtol = out.dtype == ATTNC_F32 ? 1e-4 : 1e-10;
  } else { /* bf16, f16, int8: DESIGN.md's bounds, with the rms of the truth */
    double nmse_max, a_rms, r2 = 0, d2 = 0, nm;
    size_t j, nf = 0;
    checker_bounds(int8 ? ATTNC_I8 : out.dtype, &nmse_max, &atol, &a_rms, &rtol);
    for (j = 0; j < n; j++)
      if (exp_[j] == exp_[j]) {
        r2 += exp_[j] * exp_[j];
        d2 += (got[j] - exp_[j]) * (got[j] - exp_[j]);
        nf++;
      }
    atol += a_rms * sqrt(r2 / (double)(nf ? nf : 1));
    nm = r2 > 0 ? d2 / r2 : 0;
    if (nm > nmse_max) {
      fprintf(stderr, "MISMATCH %s: NMSE %.3g above %.0e\n", name, nm, nmse_max);
      fails = 1;
    }
    if (be == ATTNC_BACKEND_TCC && form == ATTNC_FORM_FAST && int8) {
      printf("golden %s: NMSE against the float64 truth: attnc %.3g (DESIGN.md's int8 bound %.0e)\n", name, nm, nmse_max);
    } else if (be == ATTNC_BACKEND_TCC && form == ATTNC_FORM_FAST) { /* once per case: attnc beside PyTorch's own rounding */
      attnc_tensor tt;
      if (attnc_st_find(f, "out_torch", &tt) == ATTNC_OK) {
        size_t mt = 0;
        double *pt = tu_to_double(&tt, &mt), t2 = 0;
        for (j = 0; j < mt && j < n; j++)
          if (exp_[j] == exp_[j]) t2 += (pt[j] - exp_[j]) * (pt[j] - exp_[j]);
        printf("golden %s: NMSE against the float64 truth: attnc %.3g, PyTorch's %s %.3g\n", name, nm,
               attnc_dtype_name(out.dtype), r2 > 0 ? t2 / r2 : 0);
        free(pt);
      } else {
        printf("golden %s: NMSE against the float64 truth: attnc %.3g (PyTorch has no %s CPU kernels to compare)\n", name,
               nm, attnc_dtype_name(out.dtype));
      }
    }
  }
  worst = tu_compare(got, exp_, n, atol, rtol, &where);
  if (worst > 1) {
    fprintf(stderr, "MISMATCH %s (%s backend, %s form): element %zu got %.9g want %.9g\n  spec: %s\n", name,
            be == ATTNC_BACKEND_CC ? "cc" : "tcc", form == ATTNC_FORM_PLAIN ? "plain" : "fast", where, got[where], exp_[where], spec);
    fails = 1;
  }
  free(got);
  free(exp_);
  free(out.data);
  attnc_bindings_free(b);
  attnc_release(k);
  attnc_st_close(f);
  return fails;
}

static void run_all(attnc_backend be, attnc_form form)
{
  char path[1024], line[2048];
  FILE *f;
  int cases = 0, fails = 0;
  snprintf(path, sizeof path, "%s/tests/golden/cases.txt", tu_root());
  f = fopen(path, "r");
  assert_non_null(f);
  while (fgets(line, sizeof line, f)) {
    char *name = strtok(line, "\t"), *prefix = strtok(NULL, "\t"), *spec = strtok(NULL, "\n");
    if (!name || !prefix || !spec || name[0] == '#') continue;
    fails += run_case(name, prefix, spec, be, form);
    cases++;
  }
  fclose(f);
  printf("golden: %d cases on the %s backend, %s form, %d mismatches\n", cases, be == ATTNC_BACKEND_CC ? "cc" : "tcc",
         form == ATTNC_FORM_PLAIN ? "plain" : "fast", fails);
  assert_true(cases >= 20);
  assert_int_equal(fails, 0);
}

/* ---- training cases -------------------------------------------------------- */

struct train_case {
  char name[128], spec[1024];
  uint64_t seed;
};

/* tests/golden/train.txt: NAME <TAB> SEED <TAB> SPEC; returns the count. */
static int read_train_cases(struct train_case *cs, int max)
{
  char path[1024], line[2048];
  FILE *f;
  int n = 0;
  snprintf(path, sizeof path, "%s/tests/golden/train.txt", tu_root());
  f = fopen(path, "r");
  assert_non_null(f);
  while (n < max && fgets(line, sizeof line, f)) {
    char *name = strtok(line, "\t"), *seed = strtok(NULL, "\t"), *spec = strtok(NULL, "\n");
    if (!name || !seed || !spec || name[0] == '#') continue;
    snprintf(cs[n].name, sizeof cs[n].name, "%s", name);
    snprintf(cs[n].spec, sizeof cs[n].spec, "%s", spec);
    cs[n].seed = strtoull(seed, NULL, 10);
    n++;
  }
  fclose(f);
  return n;
}

static attnc_safetensors *open_golden(const char *name)
{
  char path[1024];
  attnc_error e;
  attnc_safetensors *f;
  snprintf(path, sizeof path, "%s/tests/golden/%s.safetensors", tu_root(), name);
  f = attnc_st_open(path, &e);
  if (!f) fprintf(stderr, "%s: %s\n", path, e.message);
  assert_non_null(f);
  return f;
}

/* A stored tensor as doubles (NULL if absent), its element count in *n. */
static double *golden_values(const attnc_safetensors *f, const char *name, size_t *n)
{
  attnc_tensor t;
  if (attnc_st_find(f, name, &t) != ATTNC_OK) return NULL;
  if (t.dtype == ATTNC_U8 || t.dtype == ATTNC_BOOL) {
    size_t m = 1, i;
    double *d;
    for (int a = 0; a < t.rank; a++) m *= (size_t)t.shape[a];
    d = malloc(m * sizeof *d + 1);
    assert_non_null(d);
    for (i = 0; i < m; i++) d[i] = ((const unsigned char *)t.data)[i] != 0;
    *n = m;
    return d;
  }
  return tu_to_double(&t, n);
}

static double rms(const double *v, size_t n)
{
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i] * v[i];
  return n ? sqrt(s / (double)n) : 0;
}

/* The scale a gradient is judged on: its rms, but for the k projection's
 * bias (0 in exact arithmetic: softmax ignores a per-row constant) the q
 * projection bias's. */
static double grad_scale(const attnc_safetensors *f, const char *gname, const double *want, size_t n)
{
  static const char *const K[] = { "grad.k_proj.bias", "grad.linear_k.bias" };
  static const char *const Q[] = { "grad.q_proj.bias", "grad.linear_q.bias" };
  for (int i = 0; i < 2; i++)
    if (strcmp(gname, K[i]) == 0) {
      size_t m = 0;
      double *q = golden_values(f, Q[i], &m), r;
      assert_non_null(q);
      r = rms(q, m);
      free(q);
      return r;
    }
  return rms(want, n);
}

/* Worst |got - want| / (tol * scale + tol * |want|) over n values. */
static double grad_ratio(const double *got, const double *want, size_t n, double scale, double tol, size_t *where)
{
  return tu_compare(got, want, n, tol * scale + 1e-300, tol, where);
}

/* One training case on one backend and thread count: attnc_grad from the
 * stored dout, out and every gradient against PyTorch's autograd; the
 * weights (before dropout, as DESIGN.md's weights_out says) where the
 * file has them.  (The keep bits are the reference's, test_golden_reference_train;
 * out shows the kernel's, and test_train holds them to the reference's.)
 * Returns the number of mismatches; *worst gets the worst ratio. */
static int run_train_case(const struct train_case *c, attnc_backend be, int threads, double *worst, char *worst_name)
{
  attnc_options o = { be, 0, c->name, ATTNC_FORM_FAST };
  attnc_error e;
  attnc_safetensors *f = open_golden(c->name);
  attnc_kernel *k = attnc_compile(c->spec, &o, &e);
  attnc_bindings *b;
  attnc_tensor out, dout, attn, gt;
  double *got, *want, tol;
  size_t n, m, where, ngrads_file = 0;
  int nbound = 0, fails = 0, i;
  const char *name;
  const char *be_name = be == ATTNC_BACKEND_CC ? "cc" : "tcc";

  if (!k) { /* a mismatch, not an abort: the other cases still run */
    fprintf(stderr, "MISMATCH %s (%s): does not compile: %s\n", c->name, be_name, e.message);
    attnc_st_close(f);
    return 1;
  }
  assert_true(attnc_kernel_trains(k));
  b = attnc_bindings_new(k);
  assert_non_null(b);
  assert_int_equal(attnc_bindings_set_threads(b, threads, &e), ATTNC_OK);
  assert_int_equal(attnc_bindings_set_seed(b, c->seed, &e), ATTNC_OK);
  assert_true(attnc_bindings_seed(b) == c->seed);
  assert_int_equal(attnc_bind_safetensors(b, f, NULL, &nbound, &e), ATTNC_OK);
  assert_true(nbound > 0);
  if (attnc_output_shape(b, &out, &e) != ATTNC_OK) fprintf(stderr, "%s: %s\n", c->name, e.message);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
  n = 1;
  for (int a = 0; a < out.rank; a++) n *= (size_t)out.shape[a];
  out.data = malloc(n * attnc_dtype_size(out.dtype) + 1);
  assert_non_null(out.data);
  /* f32: 1e-4; bf16, f16: their rows (looser), for out and the gradients stored in them */
  if (out.dtype == ATTNC_F64) {
    tol = 1e-9;
  } else {
    double nmse, atol, a_rms;
    checker_grad_bounds(out.dtype, &nmse, &atol, &a_rms, &tol);
  }
  memset(&attn, 0, sizeof attn);
  if (attnc_output_info(b, "attn", &attn, &e) == ATTNC_OK) {
    size_t na = 1;
    for (int a = 0; a < attn.rank; a++) na *= (size_t)attn.shape[a];
    attn.data = malloc(na * attnc_dtype_size(attn.dtype) + 1);
    assert_non_null(attn.data);
    assert_int_equal(attnc_bind_output(b, "attn", &attn, &e), ATTNC_OK);
  }
  assert_int_equal(attnc_st_find(f, "dout", &dout), ATTNC_OK);
  if (attnc_grad(b, &out, &dout, &e) != ATTNC_OK) fprintf(stderr, "%s: attnc_grad: %s\n", c->name, e.message);
  assert_int_equal(attnc_grad(b, &out, &dout, &e), ATTNC_OK);

  /* out */
  got = tu_to_double(&out, &n);
  want = golden_values(f, "out", &m);
  assert_non_null(want);
  assert_int_equal(n, m);
  {
    double r = grad_ratio(got, want, n, rms(want, n), tol, &where);
    if (r > 1) {
      fprintf(stderr, "MISMATCH %s (%s, %d threads): out element %zu is %.17g, PyTorch %.17g\n", c->name, be_name,
              threads, where, got[where], want[where]);
      fails++;
    }
    if (r > *worst) {
      *worst = r;
      snprintf(worst_name, 64, "out");
    }
  }
  free(got);
  free(want);

  /* the weights before dropout (F32) */
  if (attn.data) {
    got = tu_to_double(&attn, &n);
    want = golden_values(f, "attn", &m);
    assert_non_null(want);
    assert_int_equal(n, m);
    if (tu_compare(got, want, n, 1e-6, 1e-5, &where) > 1) {
      fprintf(stderr, "MISMATCH %s (%s, %d threads): attn element %zu is %.9g, PyTorch %.9g\n", c->name, be_name, threads,
              where, got[where], want[where]);
      fails++;
    }
    free(got);
    free(want);
    free(attn.data);
  }

  /* every gradient attnc_grad computed has a golden twin, and the other way */
  for (i = 0; (name = attnc_grad_name(b, i)) != NULL; i++) {
    char gname[160];
    double r, scale;
    snprintf(gname, sizeof gname, "grad.%s", name);
    want = golden_values(f, gname, &m);
    if (!want) {
      fprintf(stderr, "MISMATCH %s: attnc_grad computed a gradient for '%s', which PyTorch's has not\n", c->name, name);
      fails++;
      continue;
    }
    assert_int_equal(attnc_grad_get(b, name, &gt, &e), ATTNC_OK);
    got = tu_to_double(&gt, &n);
    assert_int_equal(n, m);
    scale = grad_scale(f, gname, want, n);
    r = grad_ratio(got, want, n, scale, tol, &where);
    if (r > 1) {
      fprintf(stderr, "MISMATCH %s (%s, %d threads): %s element %zu is %.17g, PyTorch %.17g (scale %.3g)\n", c->name,
              be_name, threads, gname, where, got[where], want[where], scale);
      fails++;
    }
    if (r > *worst) {
      *worst = r;
      snprintf(worst_name, 64, "%s", gname);
    }
    free(got);
    free(want);
  }
  for (size_t j = 0; j < attnc_st_count(f); j++)
    if (strncmp(attnc_st_name(f, j), "grad.", 5) == 0) ngrads_file++;
  if ((size_t)i != ngrads_file) {
    fprintf(stderr, "MISMATCH %s: attnc_grad computed %d gradients, PyTorch %zu\n", c->name, i, ngrads_file);
    fails++;
  }
  free(out.data);
  attnc_bindings_free(b);
  attnc_release(k);
  attnc_st_close(f);
  return fails;
}

static void run_train_all(attnc_backend be)
{
  struct train_case cs[64];
  int n = read_train_cases(cs, 64), fails = 0;
  assert_true(n >= 8);
  for (int c = 0; c < n; c++) {
    double worst = 0;
    char worst_name[64] = "";
    for (int threads = 1; threads <= 2; threads++) fails += run_train_case(&cs[c], be, threads, &worst, worst_name);
    printf("golden train %-30s %s: worst %.3g of the bound (%s)\n", cs[c].name, be == ATTNC_BACKEND_CC ? "cc" : "tcc",
           worst, worst_name);
  }
  printf("golden train: %d cases on the %s backend, 1 and 2 threads, %d mismatches\n", n,
         be == ATTNC_BACKEND_CC ? "cc" : "tcc", fails);
  assert_int_equal(fails, 0);
}

static void test_golden_train_tcc(void **state) { (void)state; run_train_all(ATTNC_BACKEND_TCC); }
static void test_golden_train_cc(void **state) { (void)state; run_train_all(ATTNC_BACKEND_CC); }

/* dropout=0 is no dropout: on one training case's tensors, a train
 * dropout=0 kernel's out through attnc_grad (seed 5) and attnc_run (seed
 * 6) equals the forward-only kernel's to 1e-12, on both backends. */
static void test_golden_dropout_zero(void **state)
{
  (void)state;
  static const char *const SPECS[2] = { "mha x=2,6,16 heads=2 train dropout=0 dtype=f64", "mha x=2,6,16 heads=2 dtype=f64" };
  attnc_safetensors *f = open_golden("train_dropout_weights");
  attnc_tensor dout;
  assert_int_equal(attnc_st_find(f, "dout", &dout), ATTNC_OK);
  for (int be = 0; be < 2; be++) {
    double *outs[3];
    size_t n = 0, where;
    for (int r = 0; r < 3; r++) {
      attnc_options o = { be ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC, 0, "spec", ATTNC_FORM_FAST };
      attnc_error e;
      attnc_kernel *k = attnc_compile(SPECS[r == 2], &o, &e);
      attnc_bindings *b;
      attnc_tensor out;
      int nb;
      if (!k) fprintf(stderr, "%s: %s\n", SPECS[r == 2], e.message);
      assert_non_null(k);
      b = attnc_bindings_new(k);
      assert_non_null(b);
      assert_int_equal(attnc_bind_safetensors(b, f, NULL, &nb, &e), ATTNC_OK);
      assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
      out.data = calloc(2 * 6 * 16, sizeof(double));
      assert_non_null(out.data);
      if (r < 2) assert_int_equal(attnc_bindings_set_seed(b, 5 + (uint64_t)r, &e), ATTNC_OK);
      if (r == 0) assert_int_equal(attnc_grad(b, &out, &dout, &e), ATTNC_OK);
      else assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
      outs[r] = tu_to_double(&out, &n);
      free(out.data);
      attnc_bindings_free(b);
      attnc_release(k);
    }
    for (int r = 0; r < 2; r++)
      if (tu_compare(outs[r], outs[2], n, 1e-12 * rms(outs[2], n), 1e-12, &where) > 1)
        fail_msg("dropout=0 (%s): out element %zu is %.17g, without dropout %.17g", r ? "attnc_run" : "attnc_grad", where,
                 outs[r][where], outs[2][where]);
    for (int r = 0; r < 3; r++) free(outs[r]);
  }
  attnc_st_close(f);
}

/* ---- the float64 reference against the training data ----------------------- */

static const struct train_case *find_case(const struct train_case *cs, int n, const char *name)
{
  for (int c = 0; c < n; c++)
    if (strcmp(cs[c].name, name) == 0) return &cs[c];
  fail_msg("no training case %s", name);
  return NULL;
}

/* One stored tensor of a case for the reference (freed by free_loaded). */
struct loaded {
  double *v[32];
  int n;
};

static const double *load(struct loaded *l, const attnc_safetensors *f, const char *name)
{
  size_t m;
  double *v = golden_values(f, name, &m);
  if (!v) fail_msg("the golden file has no '%s'", name);
  l->v[l->n++] = v;
  return v;
}

static void free_loaded(struct loaded *l)
{
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  l->n = 0;
}

/* The reference's out and finite-difference gradients against a case's
 * golden values: out to 1e-12, gradients (every element of a small
 * tensor, 48 of a big one) to 1e-8 of their scale. */
static void reference_against(const char *name, const ref_problem *p, const ref_tensors *t, const char *const *gnames,
                              const int *which, int ng)
{
  attnc_safetensors *f = open_golden(name);
  size_t n, m, where;
  double *want = golden_values(f, "out", &n), *dout = golden_values(f, "dout", &m), *out;
  double worst_g = 0;
  assert_non_null(want);
  assert_non_null(dout);
  assert_int_equal(ref_output_shape(p, NULL, NULL), (long)n);
  out = malloc(n * sizeof *out);
  assert_non_null(out);
  assert_int_equal(ref_attention(p, t, out), 0);
  if (tu_compare(out, want, n, 1e-12 * rms(want, n), 1e-12, &where) > 1)
    fail_msg("%s: the reference's out element %zu is %.17g, PyTorch's %.17g", name, where, out[where], want[where]);
  for (int g = 0; g < ng; g++) {
    double *gw = golden_values(f, gnames[g], &m), scale;
    long count = ref_grad_count(p, t, which[g]);
    assert_non_null(gw);
    assert_int_equal(count, (long)m);
    scale = grad_scale(f, gnames[g], gw, m);
    for (long e = 0, step = count <= 64 ? 1 : count / 47; e < count; e += step) {
      long idx = e + step >= count ? count - 1 : e;   /* the last element too */
      double gd;
      assert_int_equal(ref_grad_fd(p, t, dout, which[g], idx, &gd), 0);
      double r = fabs(gd - gw[idx]) / (1e-8 * scale + 1e-8 * fabs(gw[idx]));
      if (r > worst_g) worst_g = r;
      if (r > 1)
        fail_msg("%s: the reference's %s element %ld is %.17g, PyTorch's %.17g", name, gnames[g], idx, gd, gw[idx]);
      if (idx == count - 1) break;
    }
    free(gw);
  }
  printf("golden train %s: the reference's finite differences within %.3g of the bound\n", name, worst_g);
  free(out);
  free(want);
  free(dout);
  attnc_st_close(f);
}

/* The reference's dropout (its own Philox) and its finite differences
 * against two training cases, no kernel involved: MHA with the weights out
 * and the keep bits, and AlphaFold's gated row attention whose pair bias
 * is broadcast over a batch axis and whose dropout counts batch elements
 * over two axes. */
static void test_golden_reference_train(void **state)
{
  (void)state;
  struct train_case cs[64];
  int ncase = read_train_cases(cs, 64);
  struct loaded l = { { 0 }, 0 };

  {
    const struct train_case *c = find_case(cs, ncase, "train_dropout_weights");
    attnc_safetensors *f = open_golden(c->name);
    ref_problem p;
    ref_tensors t;
    size_t nw, nk;
    long shape[REF_MAX_RANK];
    int rank;
    memset(&p, 0, sizeof p);
    memset(&t, 0, sizeof t);
    p.rank = 3;
    p.x[0] = p.kv[0] = 2;
    p.x[1] = p.kv[1] = 6;
    p.x[2] = p.kv[2] = 16;
    p.attn_axis = 1;
    p.H = p.G = 2;
    p.c = 8;
    p.qkv_bias = p.out_bias = 1;
    p.scale = 1 / sqrt(8.0);
    p.dropout = 0.3;
    p.seed = c->seed;
    t.x = load(&l, f, "x");
    t.wq = load(&l, f, "q_proj.weight");
    t.bq = load(&l, f, "q_proj.bias");
    t.wk = load(&l, f, "k_proj.weight");
    t.bk = load(&l, f, "k_proj.bias");
    t.wv = load(&l, f, "v_proj.weight");
    t.bv = load(&l, f, "v_proj.bias");
    t.wo = load(&l, f, "o_proj.weight");
    t.bo = load(&l, f, "o_proj.bias");
    /* the weights before dropout, and the keep rule, bit for bit */
    double *want_w = golden_values(f, "attn", &nw), *keep = golden_values(f, "keep", &nk), *out, *w;
    assert_int_equal(ref_weights_shape(&p, &rank, shape), (long)nw);
    assert_int_equal(nk, nw);
    w = malloc(nw * sizeof *w);
    out = malloc(2 * 6 * 16 * sizeof *out);
    t.weights = w;
    assert_int_equal(ref_attention(&p, &t, out), 0);
    t.weights = NULL;
    size_t where;
    if (tu_compare(w, want_w, nw, 1e-13, 1e-12, &where) > 1)
      fail_msg("the reference's weight %zu is %.17g, PyTorch's %.17g", where, w[where], want_w[where]);
    long e = 0, kept = 0;
    for (long b = 0; b < 2; b++)
      for (long h = 0; h < 2; h++)
        for (long i = 0; i < 6; i++)
          for (long j = 0; j < 6; j++, e++) {
            assert_int_equal(ref_dropout_keeps(0.3, c->seed, b, h, i, j), keep[e] != 0);
            kept += keep[e] != 0;
          }
    printf("golden train %s: the reference's keep rule equals the script's Philox on all %ld bits (%ld kept)\n", c->name,
           e, kept);
    free(w);
    free(out);
    free(want_w);
    free(keep);
    static const char *const G[] = { "grad.x", "grad.q_proj.weight", "grad.q_proj.bias", "grad.k_proj.weight",
                                     "grad.k_proj.bias", "grad.v_proj.weight", "grad.v_proj.bias", "grad.o_proj.weight",
                                     "grad.o_proj.bias" };
    static const int W[] = { REF_G_X, REF_G_WQ, REF_G_BQ, REF_G_WK, REF_G_BK, REF_G_WV, REF_G_BV, REF_G_WO, REF_G_BO };
    attnc_st_close(f);
    reference_against(c->name, &p, &t, G, W, 9);
    free_loaded(&l);
  }
  {
    const struct train_case *c = find_case(cs, ncase, "train_af_gated_pair_bias");
    attnc_safetensors *f = open_golden(c->name);
    attnc_tensor mt;
    ref_problem p;
    ref_tensors t;
    static const long xs[] = { 2, 3, 5, 16 }, bs[] = { 2, 2, 5, 5 };
    memset(&p, 0, sizeof p);
    memset(&t, 0, sizeof t);
    p.rank = 4;
    for (int a = 0; a < 4; a++) p.x[a] = p.kv[a] = xs[a];
    p.attn_axis = 2;
    p.H = p.G = 2;
    p.c = 4;
    p.gated = p.out_bias = 1;
    p.scale = 0.5;
    p.has_bias = 1;
    p.bias_rank = 4;
    for (int a = 0; a < 4; a++) p.bias[a] = bs[a];
    assert_int_equal(attnc_st_find(f, "mask", &mt), ATTNC_OK);
    p.has_mask = 1;
    p.mask_rank = mt.rank;
    for (int a = 0; a < mt.rank; a++) p.mask[a] = (long)mt.shape[a];
    p.dropout = 0.1;
    p.seed = c->seed;
    t.x = load(&l, f, "x");
    t.bias = load(&l, f, "bias");
    t.mask = load(&l, f, "mask");
    t.wq = load(&l, f, "linear_q.weight");
    t.wk = load(&l, f, "linear_k.weight");
    t.wv = load(&l, f, "linear_v.weight");
    t.wg = load(&l, f, "linear_g.weight");
    t.bg = load(&l, f, "linear_g.bias");
    t.wo = load(&l, f, "linear_o.weight");
    t.bo = load(&l, f, "linear_o.bias");
    attnc_st_close(f);
    static const char *const G[] = { "grad.x", "grad.bias", "grad.linear_q.weight", "grad.linear_k.weight",
                                     "grad.linear_v.weight", "grad.linear_g.weight", "grad.linear_g.bias",
                                     "grad.linear_o.weight", "grad.linear_o.bias" };
    static const int W[] = { REF_G_X, REF_G_BIAS, REF_G_WQ, REF_G_WK, REF_G_WV, REF_G_WG, REF_G_BG, REF_G_WO, REF_G_BO };
    reference_against(c->name, &p, &t, G, W, 9);
    free_loaded(&l);
  }
}

static void test_golden_tcc(void **state) { (void)state; run_all(ATTNC_BACKEND_TCC, ATTNC_FORM_FAST); }
static void test_golden_cc(void **state) { (void)state; run_all(ATTNC_BACKEND_CC, ATTNC_FORM_FAST); }
static void test_golden_plain_tcc(void **state) { (void)state; run_all(ATTNC_BACKEND_TCC, ATTNC_FORM_PLAIN); }
static void test_golden_plain_cc(void **state) { (void)state; run_all(ATTNC_BACKEND_CC, ATTNC_FORM_PLAIN); }

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_golden_tcc),
    cmocka_unit_test(test_golden_cc),
    cmocka_unit_test(test_golden_plain_tcc),
    cmocka_unit_test(test_golden_plain_cc),
    cmocka_unit_test(test_golden_reference_train),
    cmocka_unit_test(test_golden_dropout_zero),
    cmocka_unit_test(test_golden_train_tcc),
    cmocka_unit_test(test_golden_train_cc),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
