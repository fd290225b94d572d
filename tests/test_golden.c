/* Golden cases from PyTorch (tools/make_golden.py): every case in
 * tests/golden/cases.txt is compiled, bound from its safetensors file by
 * name (with its prefix), run on both backends in both kernel forms
 * (fast and plain) and compared with the
 * float64 `out` the script computed: 1e-5 absolute + 1e-4 relative for
 * f32, 1e-12 + 1e-10 for f64, NaN where PyTorch has NaN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

static int run_case(const char *name, const char *prefix, const char *spec, attnc_backend be, attnc_form form)
{
  char path[1024];
  attnc_options o = { be, 0, name, form };
  attnc_error e;
  attnc_safetensors *f;
  attnc_kernel *k;
  attnc_bindings *b;
  attnc_tensor out, want;
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
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  got = tu_to_double(&out, &n);
  exp_ = tu_to_double(&want, &m);
  assert_int_equal(n, m);
  atol = out.dtype == ATTNC_F32 ? 1e-5 : 1e-12;
  rtol = out.dtype == ATTNC_F32 ? 1e-4 : 1e-10;
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
