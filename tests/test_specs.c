/* Every spec file in specs/ (specs/NAME.attn), end to end.
 *
 *   test_specs_files      there are at least 11; each starts with a `#`
 *                         comment, parses, and names its kernel (`name=`),
 *                         and no two files share a name (they share one
 *                         AOT library in `make aot`)
 *   test_specs_tcc        JIT with libtcc, checked against the float64
 *   test_specs_cc         reference (check/checker.c) with every named dim
 *                         small: all 5, all 1 (lengths of one), and all
 *                         different (2, 3, 4, ...: catches mixed-up dims)
 *   test_specs_aot_gcc    attnc_generate -> NAME.c / NAME.h in a mkdtemp
 *   test_specs_aot_clang  folder -> `CC -std=c99 -Wall -Wextra -Werror
 *                         -pedantic -c`, at -O0 and at -O2, plus a file
 *                         that includes the header twice; clang missing is
 *                         a skip, not a failure
 *
 * Run from the top of the source tree (or set ATTNC_ROOT); set
 * ATTNC_CACHE_DIR for the cc backend's kernel cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <unistd.h>

#include "checker.h"
#include "testutil.h"

#define MAX_SPECS 256
#define MIN_SPECS 11

typedef struct spec_file {
  char file[256];   /* "gpt_decoder.attn" */
  char path[1280];  /* "./specs/gpt_decoder.attn": the position prefix of errors */
  char *text;
} spec_file;

static spec_file g_specs[MAX_SPECS];
static int g_nspecs = -1;  /* -1: not loaded yet */

static char *read_text(const char *path)
{
  FILE *f = fopen(path, "rb");
  char *s;
  long n;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return NULL;
  }
  s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = '\0';
  fclose(f);
  return s;
}

static int by_file(const void *a, const void *b)
{
  return strcmp(((const spec_file *)a)->file, ((const spec_file *)b)->file);
}

/* Read every specs/NAME.attn once, sorted by name. */
static int load_specs(void)
{
  char dir[1024];
  DIR *d;
  struct dirent *de;
  if (g_nspecs >= 0) return g_nspecs;
  g_nspecs = 0;
  snprintf(dir, sizeof dir, "%s/specs", tu_root());
  d = opendir(dir);
  if (!d) {
    fprintf(stderr, "test_specs: cannot open %s (run from the source tree or set ATTNC_ROOT)\n", dir);
    return 0;
  }
  while ((de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name);
    spec_file *s;
    if (de->d_name[0] == '.' || n <= 5 || strcmp(de->d_name + n - 5, ".attn") != 0) continue;
    if (g_nspecs == MAX_SPECS || n >= sizeof s->file) {
      fprintf(stderr, "test_specs: skipping %s (too many spec files or too long a name)\n", de->d_name);
      continue;
    }
    s = &g_specs[g_nspecs];
    snprintf(s->file, sizeof s->file, "%s", de->d_name);
    snprintf(s->path, sizeof s->path, "%s/%s", dir, de->d_name);
    s->text = read_text(s->path);
    if (!s->text) {
      fprintf(stderr, "test_specs: cannot read %s\n", s->path);
      continue;
    }
    g_nspecs++;
  }
  closedir(d);
  qsort(g_specs, (size_t)g_nspecs, sizeof g_specs[0], by_file);
  return g_nspecs;
}

static const char *backend_name(attnc_backend be)
{
  return be == ATTNC_BACKEND_CC ? "cc" : be == ATTNC_BACKEND_TCC ? "tcc" : "default";
}

/* The kernel name of a spec (from its canonical form); 0 on failure. */
static int spec_name_of(const spec_file *s, char *name, size_t n, attnc_error *e)
{
  char canon[8192];
  attnc_options o = { ATTNC_BACKEND_TCC, 0, s->path, ATTNC_FORM_FAST };
  const char *p;
  size_t len;
  if (attnc_spec_canonical(s->text, &o, canon, sizeof canon, e) != ATTNC_OK) return 0;
  p = strstr(canon, " name=");
  if (!p) return 0;
  p += 6;
  len = strcspn(p, " ");
  if (len == 0 || len >= n) return 0;
  memcpy(name, p, len);
  name[len] = '\0';
  return 1;
}

/* ---- the files themselves ---- */

static void test_specs_files(void **state)
{
  static char names[MAX_SPECS][64];
  int n = load_specs(), i, j, fails = 0;
  (void)state;
  printf("specs: %d files in %s/specs\n", n, tu_root());
  assert_true(n >= MIN_SPECS);
  for (i = 0; i < n; i++) {
    const spec_file *s = &g_specs[i];
    attnc_error e;
    memset(&e, 0, sizeof e);
    if (s->text[0] != '#') {
      fprintf(stderr, "FAIL %s: must start with `#` comment lines (what it is, which model, what the dims mean)\n", s->path);
      fails++;
    }
    if (!strstr(s->text, "name=")) {
      fprintf(stderr, "FAIL %s: set name= to a C identifier (the AOT symbol prefix)\n", s->path);
      fails++;
    }
    if (!spec_name_of(s, names[i], sizeof names[i], &e)) {
      fprintf(stderr, "FAIL %s: %s: %s\n", s->path, e.where, e.message);
      names[i][0] = '\0';
      fails++;
      continue;
    }
    for (j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0) {
        fprintf(stderr, "FAIL %s: name=%s is also used by %s (one AOT library holds them all)\n", s->path, names[i],
                g_specs[j].path);
        fails++;
      }
  }
  assert_int_equal(fails, 0);
}

/* ---- numerics against the float64 reference ---- */

/* One checker run; prints a line and returns 1 on failure. */
static int check_one(const spec_file *s, attnc_backend be, attnc_form form, const char *what, const char *const *names,
                     const int64_t *values, int nd, int64_t default_dim, unsigned long seed, double *max_abs)
{
  checker_opts o;
  checker_result r;
  memset(&o, 0, sizeof o);
  o.backend = be;
  o.form = form;
  o.spec_name = s->path;
  o.dim_names = names;
  o.dim_values = values;
  o.ndims = nd;
  o.default_dim = default_dim;
  o.seed = seed;
  if (checker_run(s->text, &o, &r)) {
    if (r.max_abs > *max_abs) *max_abs = r.max_abs;
    return 0;
  }
  if (r.status != ATTNC_OK) {
    fprintf(stderr, "FAIL %s [%s backend, %s]: %s (%s%s%s)\n", s->path, backend_name(be), what, r.err.message,
            attnc_strerror(r.status), r.err.where[0] ? " at " : "", r.err.where);
  } else {
    fprintf(stderr,
            "MISMATCH %s [%s backend, %s, seed %lu]: %zu outputs, max abs error %.3g, tolerance %.3g (max |ref| %.3g)\n"
            "  canonical: %s\n",
            s->path, backend_name(be), what, seed, r.n, r.max_abs, r.tol, r.max_ref, r.canonical);
  }
  return 1;
}

static void check_all(attnc_backend be, attnc_form form)
{
  const char *fname = form == ATTNC_FORM_PLAIN ? "plain" : "fast";
  int n = load_specs(), i, fails = 0, runs = 0;
  assert_true(n >= MIN_SPECS);
  for (i = 0; i < n; i++) {
    const spec_file *s = &g_specs[i];
    attnc_options ko = { be, 0, s->path, form };
    attnc_error e;
    attnc_kernel *k;
    const char *names[16];
    int64_t values[16];
    char what[256];
    size_t wl;
    double max_abs = 0;
    int nd, d, f = 0;

    /* the named dims, to give each a different size */
    k = attnc_compile(s->text, &ko, &e);
    if (!k) {
      fprintf(stderr, "FAIL %s [%s backend]: %s: %s\n", s->path, backend_name(be), e.where, e.message);
      fails++;
      continue;
    }
    nd = attnc_dim_count(k);
    if (nd > 16) nd = 16;
    snprintf(what, sizeof what, "dims");
    for (d = 0; d < nd; d++) {
      names[d] = attnc_dim_name(k, d);
      values[d] = 2 + d;
      wl = strlen(what);
      snprintf(what + wl, sizeof what - wl, "%s%s=%d", d ? "," : " ", names[d], 2 + d);
    }

    f += check_one(s, be, form, "all dims 5", NULL, NULL, 0, 5, 1, &max_abs);
    f += check_one(s, be, form, "all dims 1", NULL, NULL, 0, 1, 2, &max_abs);
    if (nd > 0) f += check_one(s, be, form, what, names, values, nd, 0, 3, &max_abs);
    runs += nd > 0 ? 3 : 2;
    printf("%-4s %-5s %-28s %d named dim%s  max abs error %.3g  %s\n", backend_name(be), fname, s->file, nd, nd == 1 ? " " : "s",
           max_abs, f ? "FAILED" : "OK");
    fflush(stdout);
    attnc_release(k);
    fails += f;
  }
  printf("specs on %s, %s form: %d files, %d checks, %d failed\n", backend_name(be), fname, n, runs, fails);
  fflush(stdout);
  assert_int_equal(fails, 0);
}

static void test_specs_tcc(void **state) { (void)state; check_all(ATTNC_BACKEND_TCC, ATTNC_FORM_FAST); }
static void test_specs_cc(void **state) { (void)state; check_all(ATTNC_BACKEND_CC, ATTNC_FORM_FAST); }
static void test_specs_plain_tcc(void **state) { (void)state; check_all(ATTNC_BACKEND_TCC, ATTNC_FORM_PLAIN); }
static void test_specs_plain_cc(void **state) { (void)state; check_all(ATTNC_BACKEND_CC, ATTNC_FORM_PLAIN); }

/* ---- AOT: generated .c/.h through a strict C99 compiler ---- */

static int write_text(const char *path, const char *text)
{
  FILE *f = fopen(path, "wb");
  size_t n = strlen(text);
  int ok;
  if (!f) return 0;
  ok = fwrite(text, 1, n, f) == n;
  ok &= fclose(f) == 0;
  return ok;
}

/* Run a shell command; its output goes to `log`. 0 on success. */
static int run_cmd(const char *cmd, const char *log)
{
  char full[16384];
  int rc;
  snprintf(full, sizeof full, "%s >'%s' 2>&1", cmd, log);
  rc = system(full);
  return rc == 0 ? 0 : 1;
}

static void print_file(const char *path)
{
  char *t = read_text(path);
  if (t) fputs(t, stderr);
  free(t);
}

static void aot_all(const char *cc)
{
  char tmpl[1024], cmd[8192], path[4096], log[4096], name[64], probe[256];
  const char *tmp = getenv("TMPDIR");
  int n = load_specs(), i, fails = 0;
  assert_true(n >= MIN_SPECS);

  snprintf(probe, sizeof probe, "command -v %s >/dev/null 2>&1", cc);
  if (system(probe) != 0) {
    printf("SKIP aot with %s: `%s` is not in PATH; install it (Debian: apt-get install %s) to check the AOT output with it\n",
           cc, cc, cc);
    skip();
  }
  snprintf(tmpl, sizeof tmpl, "%s/attnc_specs_XXXXXX", (tmp && *tmp) ? tmp : "/tmp");
  assert_non_null(mkdtemp(tmpl));
  assert_null(strchr(tmpl, '\''));
  snprintf(log, sizeof log, "%s/cc.log", tmpl);

  for (i = 0; i < 2 * n; i++) { /* each spec in the fast form, then in the plain one */
    const spec_file *s = &g_specs[i % n];
    const attnc_form form = i < n ? ATTNC_FORM_FAST : ATTNC_FORM_PLAIN;
    const char *fname = form == ATTNC_FORM_PLAIN ? "plain" : "fast";
    attnc_options o = { ATTNC_BACKEND_TCC, 0, s->path, form };
    attnc_error e;
    char *src = NULL, *hdr = NULL;
    int f = 0, opt;
    memset(&e, 0, sizeof e);
    if (!spec_name_of(s, name, sizeof name, &e) || attnc_generate(s->text, &o, &src, &hdr, &e) != ATTNC_OK) {
      fprintf(stderr, "FAIL %s [aot %s]: %s: %s\n", s->path, cc, e.where, e.message);
      fails++;
      continue;
    }
    snprintf(path, sizeof path, "%s/%s.c", tmpl, name);
    f |= !write_text(path, src);
    snprintf(path, sizeof path, "%s/%s.h", tmpl, name);
    f |= !write_text(path, hdr);
    /* a second file that includes the header twice and takes the entry point's address */
    snprintf(path, sizeof path, "%s/use_%s.c", tmpl, name);
    snprintf(cmd, sizeof cmd,
             "#include \"%s.h\"\n#include \"%s.h\"\n"
             "int (*use_%s(void))(const attnc_args *);\n"
             "int (*use_%s(void))(const attnc_args *) { return %s_run; }\n",
             name, name, name, name, name);
    f |= !write_text(path, cmd);
    free(src);
    free(hdr);
    if (f) {
      fprintf(stderr, "FAIL %s [aot %s]: cannot write into %s\n", s->path, cc, tmpl);
      fails++;
      continue;
    }
    /* as written, then at -O2 as `make aot` and real builds compile it (some
     * warnings only appear once the optimiser has run) */
    for (opt = 0; opt < 2 && !f; opt++) {
      snprintf(cmd, sizeof cmd,
               "cd '%s' && %s -std=c99 -Wall -Wextra -Werror -pedantic%s -c %s.c -o %s.o && "
               "%s -std=c99 -Wall -Wextra -Werror -pedantic%s -c use_%s.c -o use_%s.o",
               tmpl, cc, opt ? " -O2" : "", name, name, cc, opt ? " -O2" : "", name, name);
      if (run_cmd(cmd, log) != 0) {
        fprintf(stderr, "FAIL %s [aot %s%s, %s form]: the generated %s.c / %s.h do not compile cleanly:\n  %s\n", s->path,
                cc, opt ? " -O2" : "", fname, name, name, cmd);
        print_file(log);
        f = 1;
      }
    }
    if (f) {
      fails++;
      continue;
    }
    printf("aot %-5s %-5s %-28s -> %s.c, %s.h: compiled cleanly (-O0, -O2)\n", cc, fname, s->file, name, name);
  }
  fflush(stdout);
  /* leave the folder for a look when something failed */
  if (fails == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    if (system(cmd) != 0) fprintf(stderr, "test_specs: could not remove %s\n", tmpl);
  } else {
    fprintf(stderr, "test_specs: generated files kept in %s\n", tmpl);
  }
  printf("aot with %s: %d files in two forms, %d failed\n", cc, n, fails);
  fflush(stdout);
  assert_int_equal(fails, 0);
}

static void test_specs_aot_gcc(void **state) { (void)state; aot_all("gcc"); }
static void test_specs_aot_clang(void **state) { (void)state; aot_all("clang"); }

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_specs_files),
    cmocka_unit_test(test_specs_tcc),
    cmocka_unit_test(test_specs_cc),
    cmocka_unit_test(test_specs_plain_tcc),
    cmocka_unit_test(test_specs_plain_cc),
    cmocka_unit_test(test_specs_aot_gcc),
    cmocka_unit_test(test_specs_aot_clang),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  int i;
  for (i = 0; i < g_nspecs; i++) free(g_specs[i].text);
  return rc;
}
