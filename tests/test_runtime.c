/* The runtime: the kernel cache, binding by name, shape checks and their
 * messages, named dims, in_proj splitting, the source dump and threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <unistd.h>

#include "testutil.h"

#define SPEC "mha x=B,S,8 heads=2 qkv_bias=false"

static float zeros[4096];
static float ones8[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

static attnc_tensor t2(int64_t a, int64_t b, void *data)
{
  attnc_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = ATTNC_F32;
  t.rank = 2;
  t.shape[0] = a;
  t.shape[1] = b;
  t.data = data;
  return t;
}

static attnc_tensor t3(int64_t a, int64_t b, int64_t c, void *data)
{
  attnc_tensor t = t2(a, b, data);
  t.rank = 3;
  t.shape[2] = c;
  return t;
}

static void test_runtime_cache_shares_equal_specs(void **state)
{
  attnc_error e;
  attnc_kernel *a, *b, *c;
  (void)state;
  a = attnc_compile("mha x=B,S,8 heads=2 causal", NULL, &e);
  b = attnc_compile("heads=2   causal=top_left mha\n x=B,S,8 # same variant", NULL, &e);
  c = attnc_compile("mha x=B,S,8 heads=2", NULL, &e);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(c);
  assert_ptr_equal(a, b);
  assert_ptr_not_equal(a, c);
  assert_string_equal(attnc_canonical(a), attnc_canonical(b));
  attnc_release(b);
  /* a is still alive: its source is readable */
  assert_non_null(strstr(attnc_source(a), "_run(const attnc_args *args)"));
  attnc_release(a);
  attnc_release(c);
}

static void test_runtime_backends_differ(void **state)
{
  attnc_options tcc = { ATTNC_BACKEND_TCC, 0, NULL, ATTNC_FORM_FAST }, cc = { ATTNC_BACKEND_CC, 0, NULL, ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *a = attnc_compile(SPEC, &tcc, &e), *b = attnc_compile(SPEC, &cc, &e);
  (void)state;
  assert_non_null(a);
  assert_non_null(b);
  assert_ptr_not_equal(a, b);
  assert_int_equal(attnc_kernel_backend(a), ATTNC_BACKEND_TCC);
  assert_int_equal(attnc_kernel_backend(b), ATTNC_BACKEND_CC);
  attnc_release(a);
  attnc_release(b);
}

/* The plain and the fast form of one spec are two kernels, each shared by
 * equal specs, on both backends (the cc spec index keeps them apart too);
 * a form that is neither is an error that names both. */
static void test_runtime_forms_differ(void **state)
{
  attnc_options plain = { ATTNC_BACKEND_TCC, 0, NULL, ATTNC_FORM_PLAIN }, bad = { ATTNC_BACKEND_TCC, 0, NULL, (attnc_form)7 };
  attnc_error e;
  int be;
  char *src = NULL;
  (void)state;
  for (be = 0; be < 2; be++) {
    attnc_options fast = { be ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC, 0, NULL, ATTNC_FORM_FAST };
    attnc_kernel *f, *p, *p2;
    plain.backend = fast.backend;
    f = attnc_compile(SPEC, &fast, &e);
    p = attnc_compile(SPEC, &plain, &e);
    p2 = attnc_compile(SPEC, &plain, &e);
    assert_non_null(f);
    assert_non_null(p);
    assert_ptr_not_equal(f, p);
    assert_ptr_equal(p, p2);
    assert_string_equal(attnc_canonical(f), attnc_canonical(p));
    assert_non_null(strstr(attnc_source(p), "the plain form"));
    assert_null(strstr(attnc_source(f), "the plain form of"));
    attnc_release(f);
    attnc_release(p);
    attnc_release(p2);
  }
  assert_null(attnc_compile(SPEC, &bad, &e));
  assert_int_equal(e.code, ATTNC_EARG);
  assert_non_null(strstr(e.message, "ATTNC_FORM_PLAIN"));
  assert_int_equal(attnc_generate(SPEC, &bad, &src, NULL, &e), ATTNC_EARG);
  assert_null(src);
}

/* Bind everything but one weight, then check the message names it. */
static void test_runtime_missing_weight(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile(SPEC, NULL, &e);
  attnc_bindings *b = attnc_bindings_new(k);
  attnc_tensor x = t3(1, 3, 8, zeros), w = t2(8, 8, zeros), out;
  (void)state;
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "q_proj.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "k_proj.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "v_proj.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "o_proj.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_EMISSING);
  assert_non_null(strstr(e.message, "missing tensor 'bo'"));
  assert_non_null(strstr(e.message, "out_proj.bias"));
  attnc_bindings_free(b);
  attnc_release(k);
}

static void test_runtime_shape_errors_name_tensor_and_axis(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile(SPEC, NULL, &e);
  attnc_bindings *b = attnc_bindings_new(k);
  attnc_tensor x = t3(1, 3, 8, zeros), bad = t2(8, 7, zeros), w = t2(8, 8, zeros), bo = t2(8, 1, zeros), out;
  attnc_tensor f64 = x;
  (void)state;
  bo.rank = 1;
  f64.dtype = ATTNC_F64;
  assert_int_equal(attnc_bind(b, "x", &f64, &e), ATTNC_EBIND);
  assert_non_null(strstr(e.message, "dtype F64"));
  assert_int_equal(attnc_bind(b, "linear_g.weight", &w, &e), ATTNC_EBIND); /* not gated */
  assert_non_null(strstr(e.message, "does not use 'linear_g.weight'"));
  assert_int_equal(attnc_bind(b, "haeds", &w, &e), ATTNC_EBIND);
  assert_non_null(strstr(e.message, "unknown tensor name 'haeds'"));
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "linear_q.weight", &bad, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "linear_k.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "linear_v.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "linear_o.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "linear_o.bias", &bo, &e), ATTNC_OK);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_EBIND);
  assert_non_null(strstr(e.message, "tensor 'linear_q.weight' (8, 7): axis 1 is 7 but the spec says 8"));
  assert_int_equal(attnc_bind(b, "linear_q.weight", &w, &e), ATTNC_OK);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
  assert_int_equal(out.rank, 3);
  assert_int_equal(out.shape[0], 1);
  assert_int_equal(out.shape[1], 3);
  assert_int_equal(out.shape[2], 8);
  /* a named dim bound to two sizes */
  assert_int_equal(attnc_bind_dim(b, "S", 4, &e), ATTNC_OK);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_EBIND);
  assert_non_null(strstr(e.message, "axis 1 is 3 but dim S = 4"));
  assert_int_equal(attnc_bind_dim(b, "Q", 4, &e), ATTNC_EBIND);
  assert_non_null(strstr(e.message, "no named dim 'Q'"));
  attnc_bindings_free(b);
  attnc_release(k);
}

/* Zero projections and an output bias: every row of out is that bias. */
static void check_bias_rows(attnc_bindings *b, attnc_error *e)
{
  float outbuf[3 * 8];
  attnc_tensor out;
  int i;
  assert_int_equal(attnc_output_shape(b, &out, e), ATTNC_OK);
  out.data = outbuf;
  assert_int_equal(attnc_run(b, &out, e), ATTNC_OK);
  for (i = 0; i < 3 * 8; i++) assert_true(outbuf[i] == ones8[i % 8]);
}

static void test_runtime_torch_in_proj_and_output_check(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile("mha x=1,3,8 heads=2", NULL, &e);
  attnc_bindings *b = attnc_bindings_new(k);
  attnc_tensor x = t3(1, 3, 8, ones8), inw = t2(24, 8, zeros), inb = t2(24, 1, zeros), ow = t2(8, 8, zeros),
               ob = t2(8, 1, ones8), out;
  float outbuf[24];
  (void)state;
  x.data = zeros;
  inb.rank = 1;
  ob.rank = 1;
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "in_proj_weight", &inw, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "in_proj_bias", &inb, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "out_proj.weight", &ow, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "out_proj.bias", &ob, &e), ATTNC_OK);
  check_bias_rows(b, &e);
  /* a wrong output shape is refused with the shape it must have */
  out = t3(1, 4, 8, outbuf);
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_EBIND);
  assert_non_null(strstr(e.message, "output axis 1 is 4 but must be 3"));
  /* a stacked in_proj_weight of the wrong size */
  inw.shape[0] = 23;
  assert_int_equal(attnc_bind(b, "in_proj_weight", &inw, &e), ATTNC_OK);
  attnc_bindings_free(b);
  b = attnc_bindings_new(k);
  assert_int_equal(attnc_bind(b, "x", &x, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "in_proj_weight", &inw, &e), ATTNC_OK);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_EBIND);
  assert_non_null(strstr(e.message, "in_proj_weight must be (24, 8)"));
  attnc_bindings_free(b);
  attnc_release(k);
}

/* Weights are packed on the first run: rebinding the same buffer after
 * changing it, or a new in_proj_weight, must be seen by the next run. */
static void test_runtime_rebind_repacks(void **state)
{
  attnc_error e;
  attnc_kernel *k = attnc_compile("mha x=1,3,8 heads=2", NULL, &e);
  attnc_bindings *b = attnc_bindings_new(k);
  static float x[24], inw[24 * 8], inw2[24 * 8], inb[24], ow[64], ob[8], outbuf[24];
  attnc_tensor tx = t3(1, 3, 8, x), tw = t2(24, 8, inw), tb = t2(24, 1, inb), tow = t2(8, 8, ow), tob = t2(8, 1, ob), out;
  int i;
  (void)state;
  tb.rank = 1;
  tob.rank = 1;
  for (i = 0; i < 24; i++) x[i] = 1;
  for (i = 0; i < 24 * 8; i++) { inw[i] = 0; inw2[i] = 0.5f; }
  for (i = 0; i < 64; i++) ow[i] = (i % 9 == 0); /* identity */
  assert_int_equal(attnc_bind(b, "x", &tx, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "in_proj_weight", &tw, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "in_proj_bias", &tb, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "out_proj.weight", &tow, &e), ATTNC_OK);
  assert_int_equal(attnc_bind(b, "out_proj.bias", &tob, &e), ATTNC_OK);
  assert_int_equal(attnc_output_shape(b, &out, &e), ATTNC_OK);
  out.data = outbuf;
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  assert_true(outbuf[0] == 0.0f); /* v = 0 */
  /* change the output weight in place and rebind the same buffer */
  for (i = 0; i < 64; i++) ow[i] = 2 * (i % 9 == 0);
  for (i = 0; i < 8; i++) ob[i] = 1;
  assert_int_equal(attnc_bind(b, "out_proj.weight", &tow, &e), ATTNC_OK);
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  assert_true(outbuf[0] == 1.0f); /* 2 * 0 + 1 */
  /* a new stacked in_proj_weight: v = x . 0.5 * 8 = 4, out = 2 * 4 + 1 */
  tw.data = inw2;
  assert_int_equal(attnc_bind(b, "in_proj_weight", &tw, &e), ATTNC_OK);
  assert_int_equal(attnc_run(b, &out, &e), ATTNC_OK);
  for (i = 0; i < 24; i++) assert_true(fabs(outbuf[i] - 9.0f) < 1e-5);
  attnc_bindings_free(b);
  attnc_release(k);
}

static void test_runtime_safetensors_prefix(void **state)
{
  attnc_error e;
  char dir[] = "/tmp/attnc-rt-XXXXXX", path[256];
  const char *names[] = { "x", "layers.1.linear_q.weight", "layers.1.linear_k.weight", "layers.1.linear_v.weight",
                          "layers.1.linear_o.weight", "layers.1.linear_o.bias", "layers.0.linear_o.bias", "unrelated" };
  attnc_tensor ts[8];
  attnc_safetensors *f;
  attnc_kernel *k;
  attnc_bindings *b;
  int n = 0;
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  ts[0] = t3(1, 3, 8, zeros);
  ts[1] = ts[2] = ts[3] = ts[4] = t2(8, 8, zeros);
  ts[5] = t2(8, 1, ones8);
  ts[5].rank = 1;
  ts[6] = t2(8, 1, zeros); /* another layer's bias: must not be picked */
  ts[6].rank = 1;
  ts[7] = t2(2, 2, zeros);
  assert_int_equal(attnc_st_write(path, 8, names, ts, &e), ATTNC_OK);
  f = attnc_st_open(path, &e);
  assert_non_null(f);
  k = attnc_compile("alphafold x=1,S,8 heads=2", NULL, &e);
  assert_non_null(k);
  b = attnc_bindings_new(k);
  assert_int_equal(attnc_bind_safetensors(b, f, "layers.1.", &n, &e), ATTNC_OK);
  assert_int_equal(n, 6);
  check_bias_rows(b, &e);
  attnc_bindings_free(b);
  attnc_release(k);
  attnc_st_close(f);
  unlink(path);
  rmdir(dir);
}

static void test_runtime_dump_dir(void **state)
{
  attnc_error e;
  char dir[] = "/tmp/attnc-dump-XXXXXX", path[256];
  attnc_kernel *k;
  FILE *f;
  (void)state;
  assert_non_null(mkdtemp(dir));
  setenv("ATTNC_DUMP_DIR", dir, 1);
  k = attnc_compile("mha x=2,3,8 heads=2 name=dumped_kernel", NULL, &e);
  unsetenv("ATTNC_DUMP_DIR");
  assert_non_null(k);
  snprintf(path, sizeof path, "%s/dumped_kernel.c", dir);
  f = fopen(path, "r");
  assert_non_null(f);
  fclose(f);
  unlink(path);
  snprintf(path, sizeof path, "%s/dumped_kernel.h", dir);
  unlink(path);
  rmdir(dir);
  attnc_release(k);
}

struct job {
  const char *spec;
  attnc_kernel *k;
};

static void *compile_job(void *arg)
{
  struct job *j = arg;
  attnc_error e;
  j->k = attnc_compile(j->spec, NULL, &e);
  return NULL;
}

static void test_runtime_threads_compile(void **state)
{
  pthread_t th[16];
  struct job jobs[16];
  int i;
  (void)state;
  for (i = 0; i < 16; i++) {
    jobs[i].spec = (i % 2) ? "mha x=B,S,16 heads=4 causal" : "gqa x=B,S,16 heads=4 kv_heads=2 name=threaded";
    assert_int_equal(pthread_create(&th[i], NULL, compile_job, &jobs[i]), 0);
  }
  for (i = 0; i < 16; i++) pthread_join(th[i], NULL);
  for (i = 0; i < 16; i++) {
    assert_non_null(jobs[i].k);
    assert_ptr_equal(jobs[i].k, jobs[i % 2].k); /* equal specs share one kernel */
  }
  for (i = 0; i < 16; i++) attnc_release(jobs[i].k);
}

static void test_runtime_spec_error_position(void **state)
{
  attnc_error e;
  attnc_options o = { ATTNC_BACKEND_DEFAULT, 0, "specs/x.attn", ATTNC_FORM_FAST };
  (void)state;
  assert_null(attnc_compile("mha\n  x=2,5,128\n  haeds=4", &o, &e));
  assert_int_equal(e.code, ATTNC_ESPEC);
  assert_int_equal(e.line, 3);
  assert_int_equal(e.col, 3);
  assert_string_equal(e.where, "specs/x.attn:3:3");
  assert_string_equal(e.message, "unknown key 'haeds' (did you mean 'heads'?)");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_runtime_cache_shares_equal_specs),
    cmocka_unit_test(test_runtime_backends_differ),
    cmocka_unit_test(test_runtime_forms_differ),
    cmocka_unit_test(test_runtime_missing_weight),
    cmocka_unit_test(test_runtime_shape_errors_name_tensor_and_axis),
    cmocka_unit_test(test_runtime_torch_in_proj_and_output_check),
    cmocka_unit_test(test_runtime_rebind_repacks),
    cmocka_unit_test(test_runtime_safetensors_prefix),
    cmocka_unit_test(test_runtime_dump_dir),
    cmocka_unit_test(test_runtime_threads_compile),
    cmocka_unit_test(test_runtime_spec_error_position),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
