/* Golden cases from PyTorch (tools/make_golden.py): every case in
 * tests/golden/cases.txt is compiled, bound from its safetensors file by
 * name (with its prefix), run on both backends in both kernel forms
 * (fast and plain) and compared with the
 * float64 `out` the script computed: 1e-5 absolute + 1e-4 relative for
 * f32, 1e-12 + 1e-10 for f64, DESIGN.md's NMSE and elementwise bounds for
 * bf16 and f16 (printing attnc's NMSE beside PyTorch's own bf16 result's),
 * NaN where PyTorch has NaN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "checker.h"
#include "testutil.h"

static int run_case(const char *name, const char *prefix, const char *spec, attnc_backend be, attnc_form form)
{
  char path[1024];
  attnc_options o = { be, 0, name, form };
  attnc_error e;
  attnc_safetensors *f;
  attnc_kernel *k;
  attnc_bindings *b;
  attnc_tensor out, want, lse;
  double *got, *exp_;
  size_t n, m, where;
  double worst, atol, rtol;
  int nbound = 0, fails = 0;

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
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  if (lse.data) {
    attnc_tensor want_lse;
    size_t nl = 0, ml = 0, wl = 0;
    double *gl, *wlse;
    assert_int_equal(attnc_st_find(f, "lse", &want_lse), ATTNC_OK);
    gl = tu_to_double(&lse, &nl);
    wlse = tu_to_double(&want_lse, &ml);
    assert_int_equal(nl, ml);
    if (tu_compare(gl, wlse, nl, 1e-5, 1e-4, &wl) > 1) {
      fprintf(stderr, "MISMATCH %s lse element %zu: got %.9g want %.9g\n", name, wl, gl[wl], wlse[wl]);
      fails = 1;
    }
    free(gl);
    free(wlse);
    free(lse.data);
  }
  got = tu_to_double(&out, &n);
  exp_ = tu_to_double(&want, &m);
  assert_int_equal(n, m);
  if (out.dtype == ATTNC_F32 || out.dtype == ATTNC_F64) {
    atol = out.dtype == ATTNC_F32 ? 1e-5 : 1e-12;
    rtol = out.dtype == ATTNC_F32 ? 1e-4 : 1e-10;
  } else { /* bf16, f16: DESIGN.md's bounds, with the rms of the truth */
    double nmse_max, a_rms, r2 = 0, d2 = 0, nm;
    size_t j, nf = 0;
    checker_bounds(out.dtype, &nmse_max, &atol, &a_rms, &rtol);
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
    if (be == ATTNC_BACKEND_TCC && form == ATTNC_FORM_FAST) { /* once per case: attnc beside PyTorch's own rounding */
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
