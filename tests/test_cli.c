/* Tests of the `attnc` command line, run as a separate process.
 *
 * The binary is $ATTNC (default build/attnc).  Every command runs through
 * popen in a mkdtemp work folder: stdout is read from the pipe, stderr goes
 * to a file, and the exit status comes from pclose.  ATTNC_CACHE_DIR points
 * inside the work folder so the cc backend starts from an empty cache.
 *
 * The safetensors files for `attnc run` are written and read here by hand
 * (8-byte little-endian header length, JSON header, raw little-endian data),
 * so these tests do not depend on the library's own safetensors code. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

static char g_dir[PATH_MAX];   /* the mkdtemp work folder */
static char g_attnc[PATH_MAX]; /* absolute path of the binary */

/* ------------------------------------------------------------------ */
/* running the CLI                                                     */

typedef struct cli_result {
  int status;  /* exit status; 128+signal when killed */
  char *out;   /* stdout */
  char *err;   /* stderr */
} cli_result;

static char *slurp(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t n = 0, cap = 0;
  if (!f) return NULL;
  for (;;) {
    size_t got;
    if (cap - n < 4096) {
      char *p = realloc(buf, cap = cap ? cap * 2 : 8192);
      if (!p) { free(buf); fclose(f); return NULL; }
      buf = p;
    }
    got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  fclose(f);
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

/* Append s to cmd in single quotes, escaping embedded quotes. */
static void append_quoted(char *cmd, size_t cap, const char *s)
{
  size_t n = strlen(cmd);
  if (n + 1 < cap) cmd[n++] = '\'';
  for (; *s && n + 5 < cap; s++) {
    if (*s == '\'') { memcpy(cmd + n, "'\\''", 4); n += 4; }
    else cmd[n++] = *s;
  }
  if (n + 1 < cap) cmd[n++] = '\'';
  cmd[n] = '\0';
}

static void append(char *cmd, size_t cap, const char *s)
{
  size_t n = strlen(cmd);
  snprintf(cmd + n, cap - n, "%s", s);
}

/* Run the shell command cmd, whose stderr goes to errpath: stdout from the
 * pipe, stderr from that file. */
static void shell_run(cli_result *r, const char *cmd, const char *errpath)
{
  FILE *p;
  size_t n = 0, cap = 0;
  int st;
  memset(r, 0, sizeof *r);
  fflush(NULL);
  p = popen(cmd, "r");
  assert_non_null(p);
  for (;;) {
    size_t got;
    if (cap - n < 4096) {
      char *q = realloc(r->out, cap = cap ? cap * 2 : 16384);
      assert_non_null(q);
      r->out = q;
    }
    got = fread(r->out + n, 1, cap - n - 1, p);
    n += got;
    if (got == 0) break;
  }
  r->out[n] = '\0';
  st = pclose(p);
  assert_true(st != -1);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  r->err = slurp(errpath, NULL);
  if (!r->err) r->err = strdup("");
  assert_non_null(r->err);
}

/* Run `attnc ARGS...` (NULL-terminated) in the work folder. */
static void cli_run(cli_result *r, const char *const *args)
{
  static char cmd[65536];
  char errpath[PATH_MAX + 32];
  int i;
  snprintf(errpath, sizeof errpath, "%s/.stderr", g_dir);
  cmd[0] = '\0';
  append(cmd, sizeof cmd, "cd ");
  append_quoted(cmd, sizeof cmd, g_dir);
  append(cmd, sizeof cmd, " && exec ");
  append_quoted(cmd, sizeof cmd, g_attnc);
  for (i = 0; args[i]; i++) {
    append(cmd, sizeof cmd, " ");
    append_quoted(cmd, sizeof cmd, args[i]);
  }
  append(cmd, sizeof cmd, " 2>");
  append_quoted(cmd, sizeof cmd, errpath);
  append(cmd, sizeof cmd, " </dev/null");
  shell_run(r, cmd, errpath);
}

#define CLI(r, ...) cli_run(&(r), (const char *const[]){ __VA_ARGS__, NULL })

static void cli_free(cli_result *r)
{
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}

static void dump(const char *what, const cli_result *r)
{
  print_error("%s: exit %d\n--- stdout ---\n%.4000s\n--- stderr ---\n%.4000s\n", what, r->status, r->out, r->err);
}

#define EXPECT_EXIT0(r, what) do { if ((r).status != 0) { dump(what, &(r)); fail_msg("%s: expected exit 0", what); } } while (0)
#define EXPECT_FAIL(r, what) do { if ((r).status == 0) { dump(what, &(r)); fail_msg("%s: expected a non-zero exit", what); } } while (0)
#define EXPECT_HAS(r, text, needle, what) do { if (!strstr((text), (needle))) { dump(what, &(r)); fail_msg("%s: expected to find \"%s\"", what, needle); } } while (0)
#define EXPECT_LACKS(r, text, needle, what) do { if (strstr((text), (needle))) { dump(what, &(r)); fail_msg("%s: did not expect \"%s\"", what, needle); } } while (0)

/* Every line of stderr that reports an error starts as the design says. */
static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Paths in the work folder. */
static const char *wpath(char *buf, size_t n, const char *name)
{
  snprintf(buf, n, "%s/%s", g_dir, name);
  return buf;
}

static void write_text_file(const char *name, const char *text)
{
  char path[PATH_MAX + 64];
  FILE *f = fopen(wpath(path, sizeof path, name), "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
}

static int file_exists(const char *name)
{
  char path[PATH_MAX + 64];
  struct stat sb;
  return stat(wpath(path, sizeof path, name), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0;
}

/* The "canonical: ..." line of `attnc explain` (caller frees). */
static char *canonical_of(const char *spec)
{
  cli_result r;
  const char *p, *e;
  char *c;
  CLI(r, "explain", spec);
  EXPECT_EXIT0(r, "explain for the canonical spec");
  p = strstr(r.out, "canonical:");
  if (!p) { dump("explain", &r); fail_msg("explain printed no canonical: line"); }
  p += strlen("canonical:");
  while (*p == ' ') p++;
  e = strchr(p, '\n');
  if (!e) e = p + strlen(p);
  c = strndup(p, (size_t)(e - p));
  cli_free(&r);
  assert_non_null(c);
  assert_true(strlen(c) > 0);
  return c;
}

/* The value of `name=` in a canonical spec (caller frees). */
static char *canonical_key(const char *canon, const char *key)
{
  char pat[64];
  const char *p;
  size_t n;
  snprintf(pat, sizeof pat, " %s=", key);
  p = strstr(canon, pat);
  if (!p) return NULL;
  p += strlen(pat);
  n = strcspn(p, " \n");
  return strndup(p, n);
}

/* ------------------------------------------------------------------ */
/* safetensors, by hand                                                */

typedef struct st_tensor {
  const char *name;
  int rank;
  int64_t shape[4];
  const float *data;   /* prod(shape) floats */
  const unsigned char *u8; /* instead of data: one byte per element, dtype U8 (or BOOL if bool_) */
  int bool_;
  int bf16;            /* write data as BF16 (the top half of each float) */
  const int64_t *i64;  /* instead of data: dtype I64 */
} st_tensor;

static size_t st_count(const st_tensor *t)
{
  size_t n = 1;
  int a;
  for (a = 0; a < t->rank; a++) n *= (size_t)t->shape[a];
  return n;
}

/* A tensor of rank 1..3 (unused dims ignored). */
static st_tensor tens(const char *name, const float *data, int rank, int64_t d0, int64_t d1, int64_t d2)
{
  st_tensor t;
  memset(&t, 0, sizeof t);
  t.name = name;
  t.data = data;
  t.rank = rank;
  t.shape[0] = d0; t.shape[1] = d1; t.shape[2] = d2;
  return t;
}

static void put_f32le(unsigned char *p, float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  p[0] = (unsigned char)u; p[1] = (unsigned char)(u >> 8); p[2] = (unsigned char)(u >> 16); p[3] = (unsigned char)(u >> 24);
}

static float get_f32le(const unsigned char *p)
{
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void st_write(const char *name, const st_tensor *t, int n)
{
  char path[PATH_MAX + 64], header[8192];
  size_t hlen = 0, off = 0, total, i;
  unsigned char len8[8];
  FILE *f;
  int k, a;
  hlen += (size_t)snprintf(header + hlen, sizeof header - hlen, "{");
  for (k = 0; k < n; k++) {
    size_t bytes = st_count(&t[k]) * (t[k].u8 ? 1 : t[k].bf16 ? 2 : t[k].i64 ? 8 : 4);
    const char *dt = t[k].u8 ? (t[k].bool_ ? "BOOL" : "U8") : t[k].bf16 ? "BF16" : t[k].i64 ? "I64" : "F32";
    hlen += (size_t)snprintf(header + hlen, sizeof header - hlen, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", k ? "," : "", t[k].name, dt);
    for (a = 0; a < t[k].rank; a++)
      hlen += (size_t)snprintf(header + hlen, sizeof header - hlen, "%s%lld", a ? "," : "", (long long)t[k].shape[a]);
    hlen += (size_t)snprintf(header + hlen, sizeof header - hlen, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
    off += bytes;
  }
  hlen += (size_t)snprintf(header + hlen, sizeof header - hlen, "}");
  while (hlen % 8) header[hlen++] = ' ';
  assert_true(hlen < sizeof header);
  total = hlen;
  for (i = 0; i < 8; i++) len8[i] = (unsigned char)(total >> (8 * i));
  f = fopen(wpath(path, sizeof path, name), "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(len8, 1, 8, f), 8);
  assert_int_equal(fwrite(header, 1, hlen, f), hlen);
  for (k = 0; k < n; k++) {
    size_t m = st_count(&t[k]);
    if (t[k].u8) {
      assert_int_equal(fwrite(t[k].u8, 1, m, f), m);
      continue;
    }
    for (i = 0; t[k].i64 && i < m; i++) {
      unsigned char b[8];
      int q;
      for (q = 0; q < 8; q++) b[q] = (unsigned char)((uint64_t)t[k].i64[i] >> (8 * q));
      assert_int_equal(fwrite(b, 1, 8, f), 8);
    }
    if (t[k].i64) continue;
    for (i = 0; i < m; i++) {
      unsigned char b[4];
      put_f32le(b, t[k].data[i]);
      if (t[k].bf16) assert_int_equal(fwrite(b + 2, 1, 2, f), 2);
      else assert_int_equal(fwrite(b, 1, 4, f), 4);
    }
  }
  assert_int_equal(fclose(f), 0);
}

/* Skip white space. */
static const char *ws(const char *p) { while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++; return p; }

/* Find "key" (a JSON object key) in [p, end); return the char after its ':'. */
static const char *json_key(const char *p, const char *end, const char *key)
{
  char pat[128];
  size_t n;
  snprintf(pat, sizeof pat, "\"%s\"", key);
  n = strlen(pat);
  for (; p + n <= end; p++)
    if (memcmp(p, pat, n) == 0) {
      const char *q = ws(p + n);
      if (*q == ':') return ws(q + 1);
    }
  return NULL;
}

/* Parse "[a, b, ...]" of integers; returns count or -1. */
static int json_ints(const char *p, int64_t *v, int max)
{
  int n = 0;
  if (*p != '[') return -1;
  p = ws(p + 1);
  if (*p == ']') return 0;
  for (;;) {
    char *e;
    long long x = strtoll(p, &e, 10);
    if (e == p || n == max) return -1;
    v[n++] = x;
    p = ws(e);
    if (*p == ']') return n;
    if (*p != ',') return -1;
    p = ws(p + 1);
  }
}

/* Read tensor `want` (F32) from a safetensors file in the work folder. */
static float *st_read(const char *name, const char *want, int *rank, int64_t *shape)
{
  char path[PATH_MAX + 64], *buf, *hdr;
  const unsigned char *u;
  const char *obj, *end, *p;
  size_t len, i, count = 1, es;
  uint64_t hlen = 0;
  int64_t offs[2];
  float *data;
  int a, f64;
  buf = slurp(wpath(path, sizeof path, name), &len);
  if (!buf) fail_msg("cannot read %s", name);
  if (len < 8) fail_msg("%s: %zu bytes, shorter than the 8-byte header length", name, len);
  u = (const unsigned char *)buf;
  for (i = 0; i < 8; i++) hlen |= (uint64_t)u[i] << (8 * i);
  if (hlen > len - 8) fail_msg("%s: header length %llu exceeds the file (%zu bytes)", name, (unsigned long long)hlen, len);
  hdr = strndup(buf + 8, (size_t)hlen);
  assert_non_null(hdr);
  if (*ws(hdr) != '{') fail_msg("%s: the header does not start with '{': %.200s", name, hdr);
  obj = json_key(hdr, hdr + hlen, want);
  if (!obj || *obj != '{') fail_msg("%s: no tensor \"%s\" in header %.500s", name, want, hdr);
  end = strchr(obj, '}');
  if (!end) fail_msg("%s: unterminated header", name);
  p = json_key(obj, end, "dtype");
  if (!p || (strncmp(p, "\"F32\"", 5) != 0 && strncmp(p, "\"I64\"", 5) != 0 && strncmp(p, "\"F64\"", 5) != 0))
    fail_msg("%s: %s is not F32 (or I64, F64): %.200s", name, want, obj);
  es = strncmp(p, "\"F32\"", 5) == 0 ? 4 : 8;
  f64 = strncmp(p, "\"F64\"", 5) == 0;
  p = json_key(obj, end, "shape");
  if (!p || (*rank = json_ints(p, shape, 8)) < 0) fail_msg("%s: bad shape for %s: %.200s", name, want, obj);
  p = json_key(obj, end, "data_offsets");
  if (!p || json_ints(p, offs, 2) != 2) fail_msg("%s: bad data_offsets for %s: %.200s", name, want, obj);
  for (a = 0; a < *rank; a++) count *= (size_t)shape[a];
  if (offs[0] < 0 || offs[1] < offs[0] || (uint64_t)offs[1] > len - 8 - hlen)
    fail_msg("%s: data_offsets [%lld, %lld] outside the data (%zu bytes)", name, (long long)offs[0], (long long)offs[1],
             (size_t)(len - 8 - hlen));
  if ((size_t)(offs[1] - offs[0]) != count * es)
    fail_msg("%s: %s holds %lld bytes but its shape needs %zu", name, want, (long long)(offs[1] - offs[0]), count * es);
  data = malloc(count * 4 + 4);
  assert_non_null(data);
  for (i = 0; i < count; i++) {
    const unsigned char *q = u + 8 + hlen + (size_t)offs[0] + es * i;
    if (es == 4) {
      data[i] = get_f32le(q);
    } else {
      uint64_t v = 0;
      int b;
      for (b = 0; b < 8; b++) v |= (uint64_t)q[b] << (8 * b);
      if (f64) {
        double d;
        memcpy(&d, &v, sizeof d);
        data[i] = (float)d;
      } else {
        data[i] = (float)(int64_t)v;
      }
    }
  }
  free(hdr);
  free(buf);
  return data;
}

/* ------------------------------------------------------------------ */
/* fixture                                                             */

static int setup(void **state)
{
  const char *bin = getenv("ATTNC");
  const char *tmp = getenv("TMPDIR");
  char cache[PATH_MAX + 32];
  (void)state;
  if (!bin || !*bin) bin = "build/attnc";
  if (!realpath(bin, g_attnc)) {
    fprintf(stderr, "test_cli: cannot find the attnc binary '%s' (set ATTNC): %s\n", bin, strerror(errno));
    return -1;
  }
  if (access(g_attnc, X_OK) != 0) {
    fprintf(stderr, "test_cli: '%s' is not executable\n", g_attnc);
    return -1;
  }
  snprintf(g_dir, sizeof g_dir, "%s/attnc_test_cli_XXXXXX", (tmp && *tmp) ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "test_cli: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  snprintf(cache, sizeof cache, "%s/cache", g_dir);
  mkdir(cache, 0755);
  setenv("ATTNC_CACHE_DIR", cache, 1);
  unsetenv("ATTNC_BACKEND");
  unsetenv("ATTNC_THREADS");
  return 0;
}

static int teardown(void **state)
{
  char cmd[PATH_MAX + 32] = "rm -rf ";
  (void)state;
  if (!g_dir[0] || getenv("ATTNC_TEST_KEEP")) return 0;
  append_quoted(cmd, sizeof cmd, g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* `make ARGS` in the source tree, where the tests run.  Without the
 * MAKEFLAGS of a `make test` around it, which would hand it a jobserver. */
static void make_run(cli_result *r, const char *args)
{
  char cmd[2 * PATH_MAX + 256], errpath[PATH_MAX + 32], cwd[PATH_MAX];
  assert_non_null(getcwd(cwd, sizeof cwd));
  snprintf(errpath, sizeof errpath, "%s/.stderr", g_dir);
  cmd[0] = '\0';
  append(cmd, sizeof cmd, "cd ");
  append_quoted(cmd, sizeof cmd, cwd);
  append(cmd, sizeof cmd, " && exec env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory ");
  append(cmd, sizeof cmd, args);
  append(cmd, sizeof cmd, " 2>");
  append_quoted(cmd, sizeof cmd, errpath);
  append(cmd, sizeof cmd, " </dev/null");
  shell_run(r, cmd, errpath);
}

/* ------------------------------------------------------------------ */
/* help and commands                                                   */

static void test_cli_help_every_command(void **state)
{
  static const char *const cmds[] = { "run", "grad", "check", "gen", "show", "explain", "bench" };
  size_t i;
  (void)state;
  for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    cli_result r;
    char usage[64];
    snprintf(usage, sizeof usage, "usage: attnc %s", cmds[i]);
    CLI(r, cmds[i], "--help");
    EXPECT_EXIT0(r, cmds[i]);
    EXPECT_HAS(r, r.out, usage, cmds[i]);
    cli_free(&r);
  }
}

static void test_cli_help_top_level(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "--help");
  EXPECT_EXIT0(r, "attnc --help");
  EXPECT_HAS(r, r.out, "usage: attnc", "attnc --help");
  EXPECT_HAS(r, r.out, "explain", "attnc --help lists the commands");
  cli_free(&r);
}

static void test_cli_unknown_command(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "frobnicate", "mha x=2,5,128 heads=4");
  EXPECT_FAIL(r, "unknown command");
  if (!starts_with(r.err, "attnc: error:")) { dump("unknown command", &r); fail_msg("stderr must start with 'attnc: error:'"); }
  EXPECT_HAS(r, r.err, "frobnicate", "unknown command is named");
  cli_free(&r);
}

static void test_cli_unknown_option(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "show", "mha x=2,5,128 heads=4", "--frob");
  EXPECT_FAIL(r, "unknown option");
  EXPECT_HAS(r, r.err, "attnc: error:", "unknown option");
  EXPECT_HAS(r, r.err, "--frob", "unknown option is named");
  cli_free(&r);
}

/* ------------------------------------------------------------------ */
/* spec errors                                                         */

static void test_cli_spec_error_position(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "show", "mha x=2,5,128 haeds=4");
  EXPECT_FAIL(r, "unknown key");
  if (!starts_with(r.err, "spec:1:15: error: unknown key 'haeds' (did you mean 'heads'?)")) {
    dump("unknown key", &r);
    fail_msg("expected spec:1:15: error: unknown key 'haeds' (did you mean 'heads'?)");
  }
  EXPECT_LACKS(r, r.out, "_run(", "no C on a spec error");
  cli_free(&r);
}

static void test_cli_spec_errors_have_position(void **state)
{
  static const char *const bad[] = {
    "mha x=2,5,128 heads=4 kv_heads=3",
    "mha x=2,5,128 heads=4 causal=sideways",
    "mha x=2,5,128 heads=4 attn_dim=-1",
    "mha x=2,5,128 heads=4 name=1abc",
    "mha heads=4",
  };
  static const char *const cmds[] = { "show", "explain", "check", "gen", "bench", "run" };
  size_t i;
  (void)state;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cli_result r;
    int line, col;
    char rest[16];
    const char *cmd = cmds[i % (sizeof cmds / sizeof cmds[0])];
    if (strcmp(cmd, "gen") == 0) CLI(r, cmd, bad[i], "-o", "gen_bad");
    else if (strcmp(cmd, "run") == 0) CLI(r, cmd, bad[i], "--tensors", "none.safetensors", "--out", "o.safetensors");
    else CLI(r, cmd, bad[i]);
    EXPECT_FAIL(r, bad[i]);
    if (sscanf(r.err, "spec:%d:%d: error%8[:]", &line, &col, rest) != 3 || line != 1 || col < 1 || col > (int)strlen(bad[i]) + 1) {
      dump(bad[i], &r);
      fail_msg("%s %s: expected 'spec:1:COL: error: ...' on stderr", cmd, bad[i]);
    }
    cli_free(&r);
  }
}

static void test_cli_spec_file_error_uses_path(void **state)
{
  cli_result r;
  (void)state;
  write_text_file("bad.attn", "# decoder self-attention\nmha x=B,S,64   # the input\n  heads=4 causal\n    haeds=4\n");
  CLI(r, "show", "@bad.attn");
  EXPECT_FAIL(r, "@bad.attn");
  if (!starts_with(r.err, "bad.attn:4:5: error: unknown key 'haeds' (did you mean 'heads'?)")) {
    dump("@bad.attn", &r);
    fail_msg("expected bad.attn:4:5: error: unknown key 'haeds' ...");
  }
  cli_free(&r);
}

static void test_cli_spec_file_missing(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "show", "@no_such_spec.attn");
  EXPECT_FAIL(r, "missing @FILE");
  assert_int_equal(r.status, 1); /* a file error, not bad usage (attnc --help) */
  if (!starts_with(r.err, "attnc: error: cannot read spec file ")) {
    dump("missing @FILE", &r);
    fail_msg("expected 'attnc: error: cannot read spec file ...'");
  }
  EXPECT_HAS(r, r.err, "no_such_spec.attn", "missing @FILE is named");
  cli_free(&r);
}

static void test_cli_spec_file_equals_string(void **state)
{
  cli_result a, b;
  (void)state;
  write_text_file("good.attn", "# decoder self-attention\nmha x=B,S,64   # the input\n  heads=4\n  causal\n");
  CLI(a, "show", "@good.attn");
  EXPECT_EXIT0(a, "show @good.attn");
  CLI(b, "show", "mha x=B,S,64 heads=4 causal");
  EXPECT_EXIT0(b, "show SPEC");
  assert_string_equal(a.out, b.out);
  cli_free(&a);
  cli_free(&b);
}

static void test_cli_no_arguments(void **state)
{
  cli_result r;
  (void)state;
  cli_run(&r, (const char *const[]){ NULL });
  EXPECT_FAIL(r, "attnc with no arguments");
  EXPECT_HAS(r, r.err, "usage: attnc", "attnc with no arguments prints the usage on stderr");
  cli_free(&r);
  CLI(r, "show");
  EXPECT_FAIL(r, "attnc show without SPEC");
  EXPECT_HAS(r, r.err, "usage: attnc show", "attnc show without SPEC");
  cli_free(&r);
}

static void test_cli_version(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "--version");
  EXPECT_EXIT0(r, "--version");
  EXPECT_HAS(r, r.out, "attnc ", "--version");
  cli_free(&r);
}

/* Numeric option values are checked like --dim's: no silent fallback. */
static void test_cli_bad_numbers(void **state)
{
  static const char *const bad[][2] = {
    { "--runs", "abc" }, { "--runs", "-3" }, { "--seed", "x1" }, { "--threads", "2x" }, { "--threads", "0" },
    { "--warmup-ms", "-1" }, { "--warmup-ms", "5ms" },
  };
  size_t i;
  int failures = 0;
  (void)state;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cli_result r;
    char what[64];
    const char *cmd = strcmp(bad[i][0], "--seed") == 0 ? "check" : "bench";
    snprintf(what, sizeof what, "%s %s %s", cmd, bad[i][0], bad[i][1]);
    if (strcmp(bad[i][0], "--threads") == 0) CLI(r, cmd, "mha x=1,3,4 heads=1", bad[i][0], bad[i][1], "--runs", "1");
    else CLI(r, cmd, "mha x=1,3,4 heads=1", bad[i][0], bad[i][1]);
    if (r.status == 0 || !strstr(r.err, "attnc: error:") || !strstr(r.err, bad[i][0])) {
      dump(what, &r);
      print_error("%s: expected a non-zero exit and 'attnc: error: ... %s ...'\n", what, bad[i][0]);
      failures++;
    }
    cli_free(&r);
  }
  if (failures) fail_msg("%d bad numeric option values were accepted", failures);
}

static void test_cli_spec_file_is_directory(void **state)
{
  char path[PATH_MAX + 64];
  cli_result r;
  (void)state;
  mkdir(wpath(path, sizeof path, "spec_dir.attn"), 0755);
  CLI(r, "show", "@spec_dir.attn");
  EXPECT_FAIL(r, "@DIR");
  EXPECT_HAS(r, r.err, "attnc: error: cannot read spec file spec_dir.attn", "@DIR");
  EXPECT_HAS(r, r.err, "directory", "@DIR: the reason is that it is a directory");
  cli_free(&r);
}

/* ------------------------------------------------------------------ */
/* show                                                                */

static void test_cli_show(void **state)
{
  static const char *const steps[] = { "Project", "Split heads", "Scores", "Softmax", "Weighted sum", "Output projection" };
  const char *spec = "mha x=B,S,64 heads=4 causal";
  char *canon = canonical_of(spec), *name = canonical_key(canon, "name"), run[128];
  cli_result r;
  size_t i;
  (void)state;
  assert_non_null(name);
  CLI(r, "show", spec);
  EXPECT_EXIT0(r, "show");
  EXPECT_HAS(r, r.out, canon, "show: the banner holds the canonical spec");
  assert_true(strstr(r.out, canon) < strstr(r.out, "_run("));
  snprintf(run, sizeof run, "%s_run(", name);
  EXPECT_HAS(r, r.out, run, "show: the kernel entry point");
  for (i = 0; i < sizeof steps / sizeof steps[0]; i++) EXPECT_HAS(r, r.out, steps[i], "show: step comments");
  assert_string_equal(r.err, "");
  cli_free(&r);
  free(name);
  free(canon);
}

static size_t count_lines(const char *text)
{
  size_t n = 0;
  for (; *text; text++) n += *text == '\n';
  return n;
}

/* show --plain: the algorithm of exactly this spec, in the worksheet's
 * order, in one screenful or two, with none of the fast form's schedule;
 * and the fast form's banner says how to get it. */
static void test_cli_show_plain(void **state)
{
  static const char *const steps[] = { "1. Project", "2. Split heads", "3. Scale", "4. Scores", "5. Bias", "6. Mask",
                                       "7. Softmax", "8. Weighted sum", "9. Merge heads", "10. Gate", "11. Output projection" };
  static const char *const schedule[] = { "tile", "thread", "prims", "phase", "scratch", "attend", "QT", "pragma", "online" };
  static const char *const absent[] = { "apply_mask", "mask_b", "add_bias", "INFINITY", "gate(", "Gate", "HEADS_PER_KV", "inner" };
  char cwd[PATH_MAX], path[PATH_MAX + 32];
  cli_result r;
  const char *at;
  size_t i;
  (void)state;
  CLI(r, "show", "--plain", "mha x=B,S,64 heads=4");
  EXPECT_EXIT0(r, "show --plain mha");
  if (count_lines(r.out) > 150) { dump("show --plain mha", &r); fail_msg("%zu lines, more than 150", count_lines(r.out)); }
  EXPECT_HAS(r, r.out, "/* q: (B, S, H*c) = (B, S, 64) */", "a shape comment with this spec's numbers");
  for (i = 0; i < sizeof schedule / sizeof schedule[0]; i++) EXPECT_LACKS(r, r.out, schedule[i], "no schedule in the plain form");
  for (i = 0; i < sizeof absent / sizeof absent[0]; i++) EXPECT_LACKS(r, r.out, absent[i], "nothing the spec does not ask for");
  cli_free(&r);

  if (!getcwd(cwd, sizeof cwd)) fail_msg("getcwd failed");
  snprintf(path, sizeof path, "@%s/specs/af_msa_row.attn", cwd); /* the tests run from the source tree */
  CLI(r, "show", "--plain", path);
  EXPECT_EXIT0(r, "show --plain af_msa_row");
  if (count_lines(r.out) > 220) { dump("show --plain af_msa_row", &r); fail_msg("%zu lines, more than 220", count_lines(r.out)); }
  for (i = 0, at = r.out; i < sizeof steps / sizeof steps[0]; i++) {
    const char *p = strstr(at, steps[i]);
    if (!p) { dump("show --plain af_msa_row", &r); fail_msg("step \"%s\" missing or out of the worksheet's order", steps[i]); }
    at = p;
  }
  for (i = 0; i < sizeof schedule / sizeof schedule[0]; i++) EXPECT_LACKS(r, r.out, schedule[i], "no schedule in the plain form");
  cli_free(&r);

  CLI(r, "show", "mha x=B,S,64 heads=4");
  EXPECT_EXIT0(r, "show");
  EXPECT_HAS(r, r.out, "attnc show --plain SPEC", "the fast form's banner names the plain form");
  EXPECT_HAS(r, r.out, "attnc_tile", "show prints the fast form");
  cli_free(&r);
}

/* The library embeds its Lua as bytecode (tools/embed.c); ATTNC_SRC_DIR
 * makes it load the text from the tree instead.  Both must generate the
 * same C, byte for byte. */
static void test_cli_show_bytecode_equals_text(void **state)
{
  static const char *const specs[] = { "mha x=B,S,64 heads=4 causal",
                                       "alphafold x=B,R,S,16 heads=2 gated global global_mean=masked mask=key",
                                       "gqa x=B,S,40 heads=4 kv_heads=2 mask=key window=3,0 bias=B,4,S,S" };
  char cwd[PATH_MAX], probe[PATH_MAX + 32];
  size_t i;
  (void)state;
  if (!getcwd(cwd, sizeof cwd)) fail_msg("getcwd failed");
  snprintf(probe, sizeof probe, "%s/gen/spec.lua", cwd);
  if (access(probe, R_OK) != 0) {
    print_message("skipped: the tests do not run from the source tree (%s has no gen/spec.lua)\n", cwd);
    skip();
  }
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    cli_result a, b;
    unsetenv("ATTNC_SRC_DIR");
    CLI(a, "show", specs[i]);
    EXPECT_EXIT0(a, "show (embedded bytecode)");
    setenv("ATTNC_SRC_DIR", cwd, 1);
    CLI(b, "show", specs[i]);
    unsetenv("ATTNC_SRC_DIR");
    EXPECT_EXIT0(b, "show (ATTNC_SRC_DIR text)");
    if (strcmp(a.out, b.out) != 0) fail_msg("%s: the embedded bytecode and the source text generate different C", specs[i]);
    assert_true(strlen(a.out) > 1000);
    cli_free(&a);
    cli_free(&b);
  }
}

static void test_cli_show_header(void **state)
{
  const char *spec = "mha x=B,S,64 heads=4 name=my_hdr";
  cli_result r;
  (void)state;
  CLI(r, "show", spec, "--header");
  EXPECT_EXIT0(r, "show --header");
  EXPECT_HAS(r, r.out, "attnc_args", "show --header");
  EXPECT_HAS(r, r.out, "my_hdr_run(", "show --header declares the entry point");
  EXPECT_HAS(r, r.out, "#ifndef", "show --header has an include guard");
  EXPECT_LACKS(r, r.out, "Softmax", "show --header is the header, not the source");
  cli_free(&r);
}

/* ------------------------------------------------------------------ */
/* explain                                                             */

/* The number before " bytes" on the line of tensor `t` (-1 if none). */
static long long explain_bytes(const char *text, const char *t)
{
  char pat[32];
  const char *p, *e, *b;
  snprintf(pat, sizeof pat, "\n  %s ", t);
  p = strstr(text, pat);
  if (!p) return -1;
  p += 1;
  e = strchr(p, '\n');
  if (!e) e = p + strlen(p);
  b = strstr(p, " bytes");
  if (!b || b > e) return -1;
  while (b > p && b[-1] >= '0' && b[-1] <= '9') b--;
  return strtoll(b, NULL, 10);
}

static void test_cli_explain(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "explain", "mha x=2,5,128 heads=4");
  EXPECT_EXIT0(r, "explain");
  EXPECT_HAS(r, r.out, "canonical:", "explain");
  EXPECT_HAS(r, r.out, "heads=4", "explain canonical");
  EXPECT_HAS(r, r.out, "FLOPs", "explain");
  EXPECT_HAS(r, r.out, "(2, 5, 128)", "explain x shape");
  assert_int_equal(explain_bytes(r.out, "x"), 2LL * 5 * 128 * 4);
  assert_int_equal(explain_bytes(r.out, "out"), 2LL * 5 * 128 * 4);
  assert_int_equal(explain_bytes(r.out, "wq"), 128LL * 128 * 4);
  cli_free(&r);
}

/* The number after `label` at the start of a line of `text` (-1 if none). */
static double explain_number(const char *text, const char *label)
{
  char pat[64];
  const char *p;
  snprintf(pat, sizeof pat, "\n  %s ", label);
  p = strstr(text, pat);
  return p ? strtod(p + strlen(pat), NULL) : -1;
}

/* The pairs causal and window masks leave, counted by `explain`, against a
 * count over every (i, j) by the rule of docs/spec.md; and the unmasked
 * total is the dense total less the masked pairs' q.k and p.v. */
static void test_cli_explain_unmasked(void **state)
{
  static const struct { const char *spec; int causal; long wl, wr; } cases[] = {
    { "mha mode=core q=1,2,5,8 kv=1,2,7,8 causal", 1, -1, -1 },
    { "mha mode=core q=1,2,5,8 kv=1,2,7,8 causal=bottom_right", 2, -1, -1 },
    { "mha mode=core q=1,2,7,8 kv=1,2,5,8 causal=bottom_right", 2, -1, -1 },
    { "mha mode=core q=1,2,9,8 kv=1,2,9,8 window=2,1", 0, 2, 1 },
    { "mha mode=core q=1,2,5,8 kv=1,2,7,8 causal=bottom_right window=2,1", 2, 2, 1 },
    { "mha x=3,11,16 heads=2 causal window=4,0", 1, 4, 0 },
  };
  size_t c;
  (void)state;
  for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    cli_result r;
    long sq, sk, i, j, n = 0, nb, heads, hd;
    int full = strncmp(cases[c].spec, "mha x=", 6) == 0;
    if (full) { nb = 3; sq = sk = 11; heads = 2; hd = 8; }
    else if (sscanf(cases[c].spec, "mha mode=core q=%ld,%ld,%ld,%ld kv=1,2,%ld", &nb, &heads, &sq, &hd, &sk) != 5)
      fail_msg("test spec '%s' does not parse", cases[c].spec);
    for (i = 0; i < sq; i++)
      for (j = 0; j < sk; j++) {
        const long p = cases[c].causal == 2 ? i + sk - sq : i;
        int ok = !(cases[c].causal && j > p);
        if (cases[c].wl >= 0 && (j < p - cases[c].wl || j > p + cases[c].wr)) ok = 0;
        n += ok;
      }
    CLI(r, "explain", cases[c].spec);
    EXPECT_EXIT0(r, cases[c].spec);
    if (explain_number(r.out, "unmasked pairs") != (double)n) {
      dump("explain", &r);
      fail_msg("%s: explain counts %.0f unmasked pairs, the rule %ld", cases[c].spec, explain_number(r.out, "unmasked pairs"), n);
    }
    /* q.k and p.v: 2 FLOPs a multiply-add, head_dim of them a pair, per head and batch element */
    assert_true(explain_number(r.out, "total") - explain_number(r.out, "unmasked total") ==
                2.0 * 2 * hd * heads * nb * (double)(sq * sk - n));
    cli_free(&r);
  }
  { /* no causal or window mask: no unmasked lines */
    cli_result r;
    CLI(r, "explain", "mha mode=core q=1,2,5,8 kv=1,2,7,8");
    EXPECT_EXIT0(r, "explain without masks");
    EXPECT_LACKS(r, r.out, "unmasked pairs", "explain without masks");
    EXPECT_LACKS(r, r.out, "unmasked total", "explain without masks");
    cli_free(&r);
  }
}

static void test_cli_explain_dims(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "explain", "mha x=B,S,64 heads=4", "--dim", "B=2", "--dim", "S=7");
  EXPECT_EXIT0(r, "explain --dim");
  EXPECT_HAS(r, r.out, "x=B,S,64", "explain keeps the named dims in the canonical spec");
  assert_int_equal(explain_bytes(r.out, "x"), 2LL * 7 * 64 * 4);
  assert_int_equal(explain_bytes(r.out, "out"), 2LL * 7 * 64 * 4);
  EXPECT_HAS(r, r.out, "total", "explain FLOPs total");
  cli_free(&r);
}

/* explain counts RoPE's rotation (6 FLOPs a pair: 4 multiplies, 2 adds,
 * r/2 pairs a row of q's heads and k's) and the sinusoidal encoding (an
 * add per value of x and kv), and the total includes them (issue 27) */
static void test_cli_explain_positions(void **state)
{
  cli_result r, plain;
  (void)state;
  CLI(r, "explain", "gqa x=2,S,64 heads=4 kv_heads=2 rope=gptj rope_dim=8", "--dim", "S=5");
  EXPECT_EXIT0(r, "explain rope");
  EXPECT_HAS(r, r.out, "rotate q, k (RoPE)", "the rotation's line");
  assert_true(explain_number(r.out, "rotate q, k (RoPE)") == 6.0 * (8 / 2) * (2 * 5 * 4 + 2 * 5 * 2));
  CLI(plain, "explain", "gqa x=2,S,64 heads=4 kv_heads=2", "--dim", "S=5");
  assert_true(explain_number(r.out, "total") - explain_number(plain.out, "total") == explain_number(r.out, "rotate q, k (RoPE)"));
  EXPECT_LACKS(plain, plain.out, "RoPE", "no rope: no line");
  cli_free(&r);
  CLI(r, "explain", "mha x=2,S,64 kv=2,T,32 heads=4 pe=sinusoidal", "--dim", "S=5", "--dim", "T=3");
  EXPECT_EXIT0(r, "explain pe");
  assert_true(explain_number(r.out, "positional encoding") == 2.0 * 5 * 64 + 2.0 * 3 * 32);
  cli_free(&r);
  cli_free(&plain);
}

static void test_cli_explain_bad_dim(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "explain", "mha x=B,S,64 heads=4", "--dim", "Q=2");
  EXPECT_FAIL(r, "--dim Q=2");
  EXPECT_HAS(r, r.err, "attnc: error:", "--dim Q=2");
  EXPECT_HAS(r, r.err, "Q", "--dim Q=2 names the dim");
  cli_free(&r);
  CLI(r, "explain", "mha x=B,S,64 heads=4", "--dim", "B=0");
  EXPECT_FAIL(r, "--dim B=0");
  EXPECT_HAS(r, r.err, "attnc: error:", "--dim B=0");
  cli_free(&r);
  CLI(r, "explain", "mha x=B,S,64 heads=4", "--dim", "B");
  EXPECT_FAIL(r, "--dim B");
  EXPECT_HAS(r, r.err, "attnc: error:", "--dim B");
  cli_free(&r);
  CLI(r, "explain", "mha x=B,S,64 heads=4", "--dim", "B=x");
  EXPECT_FAIL(r, "--dim B=x");
  EXPECT_HAS(r, r.err, "attnc: error:", "--dim B=x");
  cli_free(&r);
}

/* ------------------------------------------------------------------ */
/* check                                                               */

static const char *const CHECK_SPECS[] = {
  "mha x=B,S,64 heads=4 causal",                                                          /* decoder self-attention */
  "gqa x=1,S,64 heads=8 kv_heads=2 causal=bottom_right",                                  /* Llama-style GQA */
  "alphafold x=S,R,16 attn_dim=-3 heads=4 head_dim=4 gated global global_mean=masked mask=key", /* extra-MSA global */
  "alphafold x=2,6,16 heads=4 head_dim=4 gated bias=4,6,6 mask=key",                      /* MSA row attention, pair bias */
  "mha mode=core q=1,8,1,16 kv=1,2,S,16",                                                 /* decode over a KV cache */
  "mha x=2,5,32 kv=2,11,24 heads=4 mask=key",                                             /* cross-attention */
};

static void check_all(const char *backend)
{
  size_t i;
  char want[32];
  snprintf(want, sizeof want, "backend %s", backend);
  for (i = 0; i < sizeof CHECK_SPECS / sizeof CHECK_SPECS[0]; i++) {
    cli_result r;
    CLI(r, "check", CHECK_SPECS[i], "--backend", backend, "--seed", "3");
    EXPECT_EXIT0(r, CHECK_SPECS[i]);
    EXPECT_HAS(r, r.out, "OK", CHECK_SPECS[i]);
    EXPECT_HAS(r, r.out, want, CHECK_SPECS[i]);
    EXPECT_HAS(r, r.out, "max abs error", CHECK_SPECS[i]);
    EXPECT_LACKS(r, r.out, "MISMATCH", CHECK_SPECS[i]);
    cli_free(&r);
  }
}

static void test_cli_check_tcc(void **state) { (void)state; check_all("tcc"); }
static void test_cli_check_cc(void **state) { (void)state; check_all("cc"); }

static void test_cli_check_dims(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "check", "mha x=B,S,16 heads=2 causal", "--dim", "B=3", "--dim", "S=5");
  EXPECT_EXIT0(r, "check --dim");
  EXPECT_HAS(r, r.out, "OK", "check --dim");
  EXPECT_HAS(r, r.out, " 240 outputs", "check --dim uses B=3, S=5: 3*5*16 outputs");
  cli_free(&r);
}

/* The tolerance check prints is the one it used: f64 is far tighter than f32. */
static void test_cli_check_f64(void **state)
{
  cli_result r;
  const char *line;
  char buf[512];
  size_t n;
  (void)state;
  CLI(r, "check", "mha x=2,S,16 heads=2 dtype=f64 causal");
  EXPECT_EXIT0(r, "check dtype=f64");
  EXPECT_HAS(r, r.out, "OK", "check dtype=f64");
  line = strstr(r.out, "max abs error");
  assert_non_null(line);
  while (line > r.out && line[-1] != '\n') line--;
  n = strcspn(line, "\n");
  snprintf(buf, sizeof buf, "%.*s", (int)n, line);
  EXPECT_LACKS(r, buf, "for f32", "check dtype=f64 must not report the f32 tolerance");
  EXPECT_LACKS(r, buf, "1e-5 + 1e-4", "check dtype=f64 must not report the f32 tolerance");
  cli_free(&r);
}

/* A compiler that fails without printing still gives a message with a cause. */
static void test_cli_check_silent_compiler(void **state)
{
  char cache[PATH_MAX + 16];
  const char *old = getenv("ATTNC_CACHE_DIR");
  char *saved = old ? strdup(old) : NULL;
  cli_result r;
  (void)state;
  snprintf(cache, sizeof cache, "%s/silent-cc", g_dir); /* empty: nothing cached */
  setenv("ATTNC_CACHE_DIR", cache, 1);
  setenv("ATTNC_CC", "false", 1);
  CLI(r, "check", "mha x=B,S,8 heads=2", "--backend", "cc");
  unsetenv("ATTNC_CC");
  if (saved) setenv("ATTNC_CACHE_DIR", saved, 1); else unsetenv("ATTNC_CACHE_DIR");
  free(saved);
  EXPECT_FAIL(r, "check with ATTNC_CC=false");
  EXPECT_HAS(r, r.err, "'false' exited with status 1 and printed nothing", "check with ATTNC_CC=false");
  cli_free(&r);
}

static void test_cli_check_bad_backend(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "check", "mha x=2,3,8 heads=2", "--backend", "foo");
  EXPECT_FAIL(r, "--backend foo");
  if (!starts_with(r.err, "attnc: error:")) { dump("--backend foo", &r); fail_msg("expected attnc: error:"); }
  EXPECT_HAS(r, r.err, "foo", "--backend foo is named");
  cli_free(&r);
}

/* ------------------------------------------------------------------ */
/* gen                                                                 */

static void cc_compile(const char *dir, const char *file)
{
  char cmd[2 * PATH_MAX + 256] = "cd ";
  int st;
  append_quoted(cmd, sizeof cmd, g_dir);
  append(cmd, sizeof cmd, "/");
  append(cmd, sizeof cmd, dir);
  append(cmd, sizeof cmd, " && cc -std=c99 -Wall -Wextra -Werror -c ");
  append(cmd, sizeof cmd, file);
  append(cmd, sizeof cmd, " -o /dev/null 2>&1");
  fflush(NULL);
  st = system(cmd);
  if (st != 0) fail_msg("cc -std=c99 -Wall -Wextra -Werror -c %s/%s failed (status %d)", dir, file, st);
}

static void gen_and_compile(const char *spec, const char *dir, const char *name)
{
  cli_result r;
  char c[256], h[256], use[256], text[512];
  CLI(r, "gen", spec, "-o", dir);
  EXPECT_EXIT0(r, spec);
  snprintf(c, sizeof c, "%s/%s.c", dir, name);
  snprintf(h, sizeof h, "%s/%s.h", dir, name);
  if (!file_exists(c) || !file_exists(h)) { dump(spec, &r); fail_msg("gen did not write %s and %s", c, h); }
  cli_free(&r);
  snprintf(c, sizeof c, "%s.c", name);
  cc_compile(dir, c);
  /* the header on its own, as a user includes it */
  snprintf(use, sizeof use, "%s/use_%s.c", dir, name);
  snprintf(text, sizeof text, "#include \"%s.h\"\nint use_it(const attnc_args *a);\nint use_it(const attnc_args *a) { return %s_run(a); }\n",
           name, name);
  write_text_file(use, text);
  snprintf(use, sizeof use, "use_%s.c", name);
  cc_compile(dir, use);
}

static void test_cli_gen(void **state)
{
  (void)state;
  gen_and_compile("mha x=B,S,64 heads=4 causal mask=key name=my_mha", "gen_out", "my_mha");
  gen_and_compile("alphafold x=S,R,16 attn_dim=-3 heads=4 head_dim=4 gated global mask=key name=af_global", "gen_out", "af_global");
  gen_and_compile("mha mode=core q=1,8,1,16 kv=1,2,S,16 causal=bottom_right dtype=f64 name=decode64", "gen_out2", "decode64");
}

static void test_cli_gen_derived_name(void **state)
{
  const char *spec = "gqa x=1,S,64 heads=8 kv_heads=2 causal=bottom_right";
  char *canon = canonical_of(spec), *name = canonical_key(canon, "name"), c[256], h[256];
  cli_result r;
  (void)state;
  assert_non_null(name);
  CLI(r, "gen", spec, "-o", "gen_derived", "--print-name");
  EXPECT_EXIT0(r, "gen --print-name");
  EXPECT_HAS(r, r.out, name, "gen --print-name prints the canonical name");
  snprintf(c, sizeof c, "gen_derived/%s.c", name);
  snprintf(h, sizeof h, "gen_derived/%s.h", name);
  assert_true(file_exists(c));
  assert_true(file_exists(h));
  cli_free(&r);
  free(name);
  free(canon);
}

static void test_cli_gen_needs_dir(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "gen", "mha x=B,S,64 heads=4");
  EXPECT_FAIL(r, "gen without -o");
  EXPECT_HAS(r, r.err, "attnc: error:", "gen without -o");
  EXPECT_HAS(r, r.err, "-o", "gen without -o says what is missing");
  cli_free(&r);
}

/* ------------------------------------------------------------------ */
/* run                                                                 */

#define RUN_SPEC "mha x=1,3,4 heads=1 qkv_bias=false out_bias=true"

static const float ZERO44[16] = { 0 };
static const float ZERO124[48] = { 0 };
static const float BO[4] = { 1, 2, 3, 4 };
static const float EYE4[16] = { 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1 };
static const float X134[12] = { 0.5f, -1.0f, 2.0f, 0.25f, 3.0f, 1.5f, -0.75f, 1.0f, -2.0f, 0.125f, 4.0f, -1.25f };

/* Weights of RUN_SPEC under one naming scheme, with an optional prefix;
 * `omit` (may be NULL) is left out.  Returns the count. */
static int run_weights(st_tensor *t, char names[][96], const char *scheme, const char *prefix, const char *omit)
{
  static const char *const af[] = { "linear_q.weight", "linear_k.weight", "linear_v.weight", "linear_o.weight", "linear_o.bias" };
  static const char *const hf[] = { "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "o_proj.bias" };
  static const char *const th[] = { "in_proj_weight", "out_proj.weight", "out_proj.bias" };
  const char *const *list = strcmp(scheme, "af") == 0 ? af : strcmp(scheme, "hf") == 0 ? hf : th;
  int n = strcmp(scheme, "torch") == 0 ? 3 : 5, i, k = 0;
  for (i = 0; i < n; i++) {
    const char *nm = list[i];
    if (omit && strcmp(omit, nm) == 0) continue;
    snprintf(names[k], 96, "%s%s", prefix ? prefix : "", nm);
    if (strstr(nm, ".bias")) t[k] = tens(names[k], BO, 1, 4, 0, 0);
    else if (strcmp(nm, "in_proj_weight") == 0) t[k] = tens(names[k], ZERO124, 2, 12, 4, 0);
    else t[k] = tens(names[k], ZERO44, 2, 4, 4, 0);
    k++;
  }
  return k;
}

static void expect_rows_bias(const char *outfile, int64_t b, int64_t s)
{
  int rank = 0;
  int64_t shape[8];
  float *o = st_read(outfile, "out", &rank, shape);
  int64_t i;
  int j;
  assert_int_equal(rank, 3);
  assert_int_equal(shape[0], b);
  assert_int_equal(shape[1], s);
  assert_int_equal(shape[2], 4);
  for (i = 0; i < b * s; i++)
    for (j = 0; j < 4; j++)
      if (!(o[i * 4 + j] > BO[j] - 1e-6f && o[i * 4 + j] < BO[j] + 1e-6f))
        fail_msg("%s: out row %lld col %d is %g, want %g", outfile, (long long)i, j, (double)o[i * 4 + j], (double)BO[j]);
  free(o);
}

static void run_scheme(const char *scheme, const char *file, const char *outfile)
{
  st_tensor t[8];
  char names[8][96];
  int n = run_weights(t, names, scheme, NULL, NULL);
  cli_result r;
  t[n] = tens("x", X134, 3, 1, 3, 4);
  st_write(file, t, n + 1);
  CLI(r, "run", RUN_SPEC, "--tensors", file, "--out", outfile);
  EXPECT_EXIT0(r, scheme);
  cli_free(&r);
  expect_rows_bias(outfile, 1, 3);
}

/* show --diff: what changes from MHA to GQA, with the symbol names masked */
static void test_cli_show_diff(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "show", "mha x=B,S,64 heads=4", "--diff", "gqa x=B,S,64 heads=4 kv_heads=2");
  EXPECT_EXIT0(r, "show --diff");
  EXPECT_HAS(r, r.out, "--- mha x=B,S,64 heads=4", "diff header");
  EXPECT_HAS(r, r.out, "+++ gqa x=B,S,64 heads=4 kv_heads=2", "diff header");
  EXPECT_HAS(r, r.out, "\n- * 4 heads of width 16, MHA.", "the removed line");
  EXPECT_HAS(r, r.out, "\n+ * 4 heads of width 16, GQA, 2 kv heads.", "the added line");
  EXPECT_HAS(r, r.out, "\n@@ -", "a hunk");
  assert_null(strstr(r.out, "name=attnc_")); /* names are masked as NAME */
  EXPECT_HAS(r, r.out, "name=NAME", "the masked name");
  cli_free(&r);
  CLI(r, "show", "mha x=B,S,64 heads=4", "--diff", "mha x=B,S,64 haeds=4");
  assert_true(r.status != 0);
  EXPECT_HAS(r, r.err, "spec:1:14: error: unknown key 'haeds'", "an error in the second spec");
  cli_free(&r);
}

/* run --save-attn / --heatmap on a golden case: causal + padding, 2 heads */
static void test_cli_run_save_attn(void **state)
{
  cli_result r;
  char tensors[1024], attn[1024], svg[1024];
  const char *spec = "mha x=B,S,16 heads=2 causal mask=key";
  attnc_error e;
  attnc_safetensors *f, *in;
  attnc_tensor w, mask;
  (void)state;
  char out[1024];
  assert_non_null(realpath("tests/golden/mha_causal_pad_inproj.safetensors", tensors));
  snprintf(attn, sizeof attn, "%s/attn.safetensors", g_dir);
  snprintf(svg, sizeof svg, "%s/heat.svg", g_dir);
  snprintf(out, sizeof out, "%s/o.safetensors", g_dir);
  CLI(r, "run", spec, "--tensors", tensors, "--out", out, "--save-attn", attn, "--heatmap", svg);
  EXPECT_EXIT0(r, "run --save-attn");
  cli_free(&r);
  f = attnc_st_open(attn, &e);
  assert_non_null(f);
  in = attnc_st_open(tensors, &e);
  assert_non_null(in);
  assert_int_equal(attnc_st_find(f, "attn", &w), ATTNC_OK);
  assert_int_equal(attnc_st_find(in, "mask", &mask), ATTNC_OK);
  assert_int_equal(w.rank, 4); /* (B, H, Sq, Sk) */
  assert_int_equal(w.shape[1], 2);
  assert_int_equal(w.shape[2], w.shape[3]);
  {
    long B = (long)w.shape[0], H = 2, S = (long)w.shape[2], b, h, i, j;
    const float *a = w.data;
    const unsigned char *m = mask.data; /* BOOL in this case */
    for (b = 0; b < B; b++)
      for (h = 0; h < H; h++)
        for (i = 0; i < S; i++) {
          double sum = 0;
          int any = 0;
          for (j = 0; j < S; j++) {
            float v = a[((b * H + h) * S + i) * S + j];
            if (j > i || !m[b * S + j]) assert_true(v == 0.0f); /* causal and padding hide the key */
            else any = 1;
            sum += v;
          }
          if (any) assert_true(fabs(sum - 1.0) < 1e-5);
          else assert_true(sum == 0.0); /* empty_rows=zero */
        }
  }
  attnc_st_close(f);
  attnc_st_close(in);
  /* with weights_out and lse in the spec, run writes them beside out */
  CLI(r, "run", "mha x=B,S,16 heads=2 causal mask=key weights_out lse", "--tensors", tensors, "--out", out);
  EXPECT_EXIT0(r, "run weights_out lse");
  cli_free(&r);
  f = attnc_st_open(out, &e);
  assert_non_null(f);
  assert_int_equal(attnc_st_find(f, "out", &w), ATTNC_OK);
  assert_int_equal(attnc_st_find(f, "lse", &w), ATTNC_OK);
  assert_int_equal(w.rank, 3);
  assert_int_equal(attnc_st_find(f, "attn", &w), ATTNC_OK);
  assert_int_equal(w.rank, 4);
  attnc_st_close(f);
  {
    FILE *fp = fopen(svg, "r");
    char buf[1 << 16];
    size_t n;
    int panels = 0;
    const char *p;
    assert_non_null(fp);
    n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    assert_true(strncmp(buf, "<?xml", 5) == 0);
    assert_non_null(strstr(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_non_null(strstr(buf, "</svg>"));
    for (p = buf; (p = strstr(p, "class=\"head\"")) != NULL; p++) panels++;
    assert_int_equal(panels, 2);
    assert_non_null(strstr(buf, "key j"));
    assert_non_null(strstr(buf, "query i"));
    assert_non_null(strstr(buf, "id=\"scale\""));
  }
}

/* The fills of panel `head`'s cells in an SVG of --heatmap, row-major
 * (they are written so), into fills[]; returns how many.  svg is the text. */
static int heatmap_fills(const char *svg, int head, char fills[][24], int max)
{
  char id[32];
  const char *p, *end;
  int n = 0;
  snprintf(id, sizeof id, "id=\"head%d\"", head);
  p = strstr(svg, id);
  if (!p) fail_msg("the heatmap has no panel %s", id);
  end = strstr(p, "</g>");
  assert_non_null(end);
  while ((p = strstr(p, "<rect ")) != NULL && p < end) {
    const char *f = strstr(p, "fill=\"");
    size_t k;
    p += 6;
    if (!f || f > end) break;
    f += 6;
    k = strcspn(f, "\"");
    if (k == 4 && strncmp(f, "none", 4) == 0) continue; /* the panel's frame */
    if (n == max || k >= sizeof fills[0]) fail_msg("heatmap panel %d: more than %d cells, or a long fill", head, max);
    memcpy(fills[n], f, k);
    fills[n++][k] = '\0';
  }
  return n;
}

static char *read_svg(const char *name)
{
  char path[PATH_MAX + 64];
  char *svg = slurp(wpath(path, sizeof path, name), NULL);
  if (!svg) fail_msg("cannot read %s", path);
  return svg;
}

#define MASKED "url(#masked)"

/* --heatmap (guard rail 8): cells whose key the spec hides are hatched,
 * apart from every weight; a visible key of weight 0 is drawn as weight 0.
 * Causal over 3 positions with zero projections: query i gives 1/(i+1) to
 * keys 0..i, and a pair bias of -1e9 takes key 0 from query 2 (weight
 * exactly 0, yet visible). */
static void test_cli_heatmap_masked(void **state)
{
  static const float bias[9] = { 0, 0, 0, 0, 0, 0, -1e9f, 0, 0 };
  const char *spec = "mha x=1,3,4 heads=1 qkv_bias=false out_bias=true causal bias=1,3,3";
  st_tensor t[8];
  char names[8][96], fills[16][24];
  cli_result r;
  char *svg;
  int n, i, j;
  (void)state;
  n = run_weights(t, names, "af", NULL, NULL);
  t[n] = tens("x", X134, 3, 1, 3, 4);
  t[n + 1] = tens("bias", bias, 3, 1, 3, 3);
  st_write("heat_in.safetensors", t, n + 2);
  CLI(r, "run", spec, "--tensors", "heat_in.safetensors", "--out", "heat_out.safetensors", "--heatmap", "causal.svg");
  EXPECT_EXIT0(r, "run --heatmap on a causal spec");
  cli_free(&r);
  svg = read_svg("causal.svg");
  assert_int_equal(heatmap_fills(svg, 0, fills, 16), 9);
  for (i = 0; i < 3; i++)
    for (j = 0; j < 3; j++) {
      const char *fl = fills[i * 3 + j];
      if (j > i && strcmp(fl, MASKED) != 0) fail_msg("query %d, key %d: above the diagonal, causal hides it, drawn %s", i, j, fl);
      if (j <= i && strcmp(fl, MASKED) == 0) fail_msg("query %d, key %d: visible, drawn masked", i, j);
    }
  assert_string_equal(fills[2 * 3 + 0], "#440154"); /* the scale's 0: visible, weight 0 */
  assert_string_equal(fills[0], "#fde725");         /* the scale's top: weight 1 */
  assert_non_null(strstr(svg, "<pattern id=\"masked\""));
  assert_non_null(strstr(strstr(svg, "id=\"legend\""), "masked"));
  free(svg);
}

/* --heatmap --batch N draws batch element N (guard rail 8).  In the golden
 * causal + padding case the two sequences differ in their inputs and
 * padding: batch 1 hides its padded keys in every row, batch 0 has none. */
static void test_cli_heatmap_batch(void **state)
{
  const char *spec = "mha x=B,S,16 heads=2 causal mask=key";
  char tensors[PATH_MAX], f0[9 * 9][24], f1[9 * 9][24];
  attnc_safetensors *in;
  attnc_tensor mask;
  attnc_error e;
  cli_result r;
  char *s0, *s1;
  int n0, n1, i, j, padded = 0, differ = 0;
  (void)state;
  assert_non_null(realpath("tests/golden/mha_causal_pad_inproj.safetensors", tensors));
  in = attnc_st_open(tensors, &e);
  assert_non_null(in);
  assert_int_equal(attnc_st_find(in, "mask", &mask), ATTNC_OK);
  assert_int_equal(mask.rank, 2);
  assert_int_equal(mask.shape[0], 2);
  assert_int_equal(mask.shape[1], 9);
  CLI(r, "run", spec, "--tensors", tensors, "--out", "b_out.safetensors", "--heatmap", "b0.svg");
  EXPECT_EXIT0(r, "--heatmap (batch 0)");
  cli_free(&r);
  CLI(r, "run", spec, "--tensors", tensors, "--out", "b_out.safetensors", "--heatmap", "b1.svg", "--batch", "1");
  EXPECT_EXIT0(r, "--heatmap --batch 1");
  cli_free(&r);
  s0 = read_svg("b0.svg");
  s1 = read_svg("b1.svg");
  n0 = heatmap_fills(s0, 0, f0, 81);
  n1 = heatmap_fills(s1, 0, f1, 81);
  assert_int_equal(n0, 81);
  assert_int_equal(n1, 81);
  assert_non_null(strstr(s0, "batch 0 of 2"));
  assert_non_null(strstr(s1, "batch 1 of 2"));
  for (i = 0; i < 9; i++)
    for (j = 0; j < 9; j++) {
      const int hidden0 = j > i || !((const unsigned char *)mask.data)[j];
      const int hidden1 = j > i || !((const unsigned char *)mask.data)[9 + j];
      padded += !((const unsigned char *)mask.data)[9 + j] && j <= i;
      if (hidden0 != (strcmp(f0[i * 9 + j], MASKED) == 0)) fail_msg("batch 0, query %d, key %d: drawn %s", i, j, f0[i * 9 + j]);
      if (hidden1 != (strcmp(f1[i * 9 + j], MASKED) == 0)) fail_msg("batch 1, query %d, key %d: drawn %s", i, j, f1[i * 9 + j]);
      differ += !hidden0 && !hidden1 && strcmp(f0[i * 9 + j], f1[i * 9 + j]) != 0;
    }
  assert_true(padded > 0); /* the case pads batch 1 below the diagonal, where causal alone would not hide */
  assert_true(differ > 0); /* and other inputs give other weights where both see the key */
  attnc_st_close(in);
  free(s0);
  free(s1);
}

/* --batch errors (guard rail 8): out of range, not a number, negative, or
 * without --heatmap; none writes --out. */
static void test_cli_heatmap_bad_batch(void **state)
{
  const char *spec = "mha x=B,S,16 heads=2 causal mask=key";
  char tensors[PATH_MAX], names[8][96];
  st_tensor t[8];
  cli_result r;
  int n;
  (void)state;
  assert_non_null(realpath("tests/golden/mha_causal_pad_inproj.safetensors", tensors));
  CLI(r, "run", spec, "--tensors", tensors, "--out", "bad_out.safetensors", "--heatmap", "bad.svg", "--batch", "2");
  assert_int_equal(r.status, 2);
  EXPECT_HAS(r, r.err, "attnc: error: --batch 2 is out of range: the attention weights (2, 2, 9, 9) have 2 batch elements, "
                       "so N is 0 to 1", "names the range");
  cli_free(&r);
  assert_false(file_exists("bad_out.safetensors"));
  assert_false(file_exists("bad.svg"));
  CLI(r, "run", spec, "--tensors", tensors, "--out", "bad_out.safetensors", "--heatmap", "bad.svg", "--batch", "one");
  assert_int_equal(r.status, 2);
  EXPECT_HAS(r, r.err, "attnc: error: --batch needs a whole number from 0 to 2147483647, got 'one'", "not a number");
  cli_free(&r);
  CLI(r, "run", spec, "--tensors", tensors, "--out", "bad_out.safetensors", "--heatmap", "bad.svg", "--batch", "-1");
  assert_int_equal(r.status, 2);
  EXPECT_HAS(r, r.err, "got '-1'", "negative");
  cli_free(&r);
  CLI(r, "run", spec, "--tensors", tensors, "--out", "bad_out.safetensors", "--batch", "1");
  assert_int_equal(r.status, 2);
  EXPECT_HAS(r, r.err, "--batch N picks the batch element that --heatmap draws: it needs --heatmap FILE.svg", "needs --heatmap");
  cli_free(&r);
  assert_false(file_exists("bad_out.safetensors"));
  n = run_weights(t, names, "af", NULL, NULL);
  t[n] = tens("x", X134, 2, 3, 4, 0);
  st_write("nobatch.safetensors", t, n + 1);
  CLI(r, "run", "mha x=3,4 heads=1 qkv_bias=false out_bias=true", "--tensors", "nobatch.safetensors", "--out",
      "bad_out.safetensors", "--heatmap", "bad.svg", "--batch", "1");
  assert_int_equal(r.status, 2);
  EXPECT_HAS(r, r.err, "the attention weights (1, 3, 3) have no batch axes, so N can only be 0", "no batch axes");
  cli_free(&r);
}

/* attnc quantize: projection weights (by the end of their names, after a
 * '.', within the prefix) become I8 with an F32 NAME_scale per row, with
 * ties rounded to even and a zero row's scale 1; every other tensor is
 * copied bit for bit. */
static void test_cli_quantize(void **state)
{
  /* row 0: max 127, so scale 1 and the halves show the rounding; row 1: zeros;
   * row 2: max 2.54, every value a multiple of the scale 0.02 */
  static const float w[12] = { 127, 2.5f, -2.5f, 1.5f, 0, 0, 0, 0, -2.54f, 0.5f, 0.02f, 1.27f };
  static const int8_t want_q[12] = { 127, 2, -2, 2, 0, 0, 0, 0, -127, 25, 1, 64 }; /* 1.27 / 0.02 = 63.5: to even */
  static const float bias[3] = { 0.25f, -1, 3 };
  uint16_t gate_bf16[4] = { 0x3f80, 0xbf80, 0x4000, 0 }; /* 1, -1, 2, 0 */
  const char *names[] = { "layers.0.attn.q_proj.weight", "layers.0.attn.q_proj.bias", "layers.1.linear_g.weight",
                          "in_proj_weight", "my_q_proj.weight", "norm.weight", "mha.k_proj_weight" };
  attnc_tensor ts[7];
  char in[PATH_MAX + 64], out[PATH_MAX + 64], out2[PATH_MAX + 64];
  attnc_error e;
  attnc_safetensors *f;
  attnc_tensor t;
  cli_result r;
  int i;
  (void)state;
  memset(ts, 0, sizeof ts);
  for (i = 0; i < 7; i++) {
    ts[i].dtype = ATTNC_F32;
    ts[i].rank = 2;
    ts[i].shape[0] = 3;
    ts[i].shape[1] = 4;
    ts[i].data = (void *)w;
  }
  ts[1].rank = 1;
  ts[1].data = (void *)bias;
  ts[2].dtype = ATTNC_BF16;
  ts[2].shape[0] = 2;
  ts[2].shape[1] = 2;
  ts[2].data = gate_bf16;
  assert_int_equal(attnc_st_write(wpath(in, sizeof in, "q_in.safetensors"), 7, names, ts, &e), ATTNC_OK);
  CLI(r, "quantize", "--tensors", "q_in.safetensors", "--out", "q_out.safetensors");
  EXPECT_EXIT0(r, "quantize");
  EXPECT_HAS(r, r.out, "quantised 4 weights", "the count of quantised weights");
  cli_free(&r);
  f = attnc_st_open(wpath(out, sizeof out, "q_out.safetensors"), &e);
  assert_non_null(f);
  assert_int_equal(attnc_st_count(f), 11); /* 7 tensors and 4 scales */
  assert_int_equal(attnc_st_find(f, "layers.0.attn.q_proj.weight", &t), ATTNC_OK);
  assert_int_equal(t.dtype, ATTNC_I8);
  assert_memory_equal(t.data, want_q, sizeof want_q);
  assert_int_equal(attnc_st_find(f, "layers.0.attn.q_proj.weight_scale", &t), ATTNC_OK);
  assert_int_equal(t.dtype, ATTNC_F32);
  assert_int_equal(t.rank, 1);
  assert_int_equal(t.shape[0], 3);
  assert_true(((float *)t.data)[0] == 1.0f && ((float *)t.data)[1] == 1.0f && ((float *)t.data)[2] == 2.54f / 127.0f);
  assert_int_equal(attnc_st_find(f, "in_proj_weight_scale", &t), ATTNC_OK);
  assert_int_equal(attnc_st_find(f, "mha.k_proj_weight_scale", &t), ATTNC_OK); /* torch's separate k weight */
  assert_int_equal(attnc_st_find(f, "layers.1.linear_g.weight", &t), ATTNC_OK); /* bf16 in, I8 out: 127, -127, 127, 0 */
  assert_int_equal(t.dtype, ATTNC_I8);
  assert_true(((int8_t *)t.data)[0] == 127 && ((int8_t *)t.data)[1] == -127 && ((int8_t *)t.data)[2] == 127 &&
              ((int8_t *)t.data)[3] == 0);
  assert_int_equal(attnc_st_find(f, "layers.0.attn.q_proj.bias", &t), ATTNC_OK); /* copied */
  assert_int_equal(t.dtype, ATTNC_F32);
  assert_memory_equal(t.data, bias, sizeof bias);
  assert_int_equal(attnc_st_find(f, "my_q_proj.weight", &t), ATTNC_OK); /* not after a '.': copied */
  assert_int_equal(t.dtype, ATTNC_F32);
  assert_int_equal(attnc_st_find(f, "norm.weight", &t), ATTNC_OK);
  assert_int_equal(t.dtype, ATTNC_F32);
  assert_int_equal(attnc_st_find(f, "norm.weight_scale", &t), ATTNC_EMISSING);
  attnc_st_close(f);

  /* with a prefix, only that layer's weights */
  CLI(r, "quantize", "--tensors", "q_in.safetensors", "--out", "q_out2.safetensors", "--prefix", "layers.0.");
  EXPECT_EXIT0(r, "quantize --prefix");
  cli_free(&r);
  f = attnc_st_open(wpath(out2, sizeof out2, "q_out2.safetensors"), &e);
  assert_non_null(f);
  assert_int_equal(attnc_st_count(f), 8);
  assert_int_equal(attnc_st_find(f, "layers.1.linear_g.weight", &t), ATTNC_OK);
  assert_int_equal(t.dtype, ATTNC_BF16);
  assert_int_equal(attnc_st_find(f, "in_proj_weight", &t), ATTNC_OK);
  assert_int_equal(t.dtype, ATTNC_F32);
  attnc_st_close(f);

  /* quantised weights are I8, not float: quantising again copies all 11 */
  CLI(r, "quantize", "--tensors", "q_out.safetensors", "--out", "q_out3.safetensors");
  EXPECT_EXIT0(r, "quantize twice");
  EXPECT_HAS(r, r.out, "quantised 0 weights to int8 with per-row scales, copied 11 other tensors", "nothing twice");
  cli_free(&r);
  /* a float weight beside a tensor already named like its scale; a NaN; a SPEC */
  {
    const char *two[2] = { "k_proj.weight", "k_proj.weight_scale" };
    attnc_tensor tw[2];
    tw[0] = ts[0];
    tw[1] = ts[1];
    assert_int_equal(attnc_st_write(wpath(out2, sizeof out2, "q_two.safetensors"), 2, two, tw, &e), ATTNC_OK);
  }
  CLI(r, "quantize", "--tensors", "q_two.safetensors", "--out", "q_out3.safetensors");
  EXPECT_FAIL(r, "a scale name taken");
  EXPECT_HAS(r, r.err, "would hold 'k_proj.weight_scale' twice", "the repeated name");
  cli_free(&r);
  gate_bf16[1] = 0x7fc0;
  assert_int_equal(attnc_st_write(in, 7, names, ts, &e), ATTNC_OK);
  CLI(r, "quantize", "--tensors", "q_in.safetensors", "--out", "q_out3.safetensors");
  EXPECT_FAIL(r, "quantize a NaN");
  EXPECT_HAS(r, r.err, "tensor 'layers.1.linear_g.weight': row 0 holds nan at column 1", "where the NaN is");
  cli_free(&r);
  CLI(r, "quantize", "mha x=B,S,8 heads=2", "--tensors", "q_in.safetensors", "--out", "q_out3.safetensors");
  EXPECT_FAIL(r, "quantize with a spec");
  EXPECT_HAS(r, r.err, "quantize takes no SPEC", "the message");
  cli_free(&r);
}

/* A bf16 checkpoint and bf16 inputs run as they are: bound and converted
 * to the kernel's f32 (the values here are exact in bf16). */
static void test_cli_run_bf16_checkpoint(void **state)
{
  st_tensor t[8];
  char names[8][96];
  int n = run_weights(t, names, "hf", NULL, NULL), i;
  cli_result r;
  (void)state;
  t[n] = tens("x", X134, 3, 1, 3, 4);
  for (i = 0; i <= n; i++) t[i].bf16 = 1;
  st_write("w_bf16.safetensors", t, n + 1);
  CLI(r, "run", RUN_SPEC, "--tensors", "w_bf16.safetensors", "--out", "out_bf16.safetensors");
  EXPECT_EXIT0(r, "run on a bf16 file");
  cli_free(&r);
  expect_rows_bias("out_bf16.safetensors", 1, 3);
}

/* The checkpoint paths of issue 26 end to end: attnc quantize, then run a
 * weights=int8 spec on its output (within DESIGN.md's int8 bound of the
 * f32 run on the float weights), and a dtype=bf16 spec that writes `out`
 * as BF16. */
static void test_cli_run_int8_and_bf16(void **state)
{
  enum { C = 8, S = 5 };
  static float w[4][C * C], x[S * C];
  st_tensor t[5];
  static const char *const names[4] = { "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight" };
  char path[PATH_MAX + 64];
  attnc_safetensors *f;
  attnc_tensor o;
  attnc_error e;
  cli_result r;
  float *o32, *o8;
  int64_t shape[8];
  int rank, m, i;
  double d2 = 0, r2 = 0;
  (void)state;
  for (m = 0; m < 4; m++) {
    for (i = 0; i < C * C; i++) w[m][i] = (float)(((i * 29 + m * 13) % 31) - 15) / 40.0f;
    t[m] = tens(names[m], w[m], 2, C, C, 0);
  }
  for (i = 0; i < S * C; i++) x[i] = (float)((i * 17 % 13) - 6) / 6.0f;
  t[4] = tens("x", x, 3, 1, S, C);
  st_write("w8_in.safetensors", t, 5);
#define SPEC8 "mha x=1,S,8 heads=2 qkv_bias=false out_bias=false causal"
  CLI(r, "run", SPEC8, "--tensors", "w8_in.safetensors", "--out", "w8_f32.safetensors");
  EXPECT_EXIT0(r, "run f32");
  cli_free(&r);
  CLI(r, "run", SPEC8 " weights=int8", "--tensors", "w8_in.safetensors", "--out", "w8_bad.safetensors");
  EXPECT_FAIL(r, "float weights to a weights=int8 spec");
  EXPECT_HAS(r, r.err, "attnc quantize", "the message names the fix");
  cli_free(&r);
  CLI(r, "quantize", "--tensors", "w8_in.safetensors", "--out", "w8_q.safetensors");
  EXPECT_EXIT0(r, "quantize");
  cli_free(&r);
  CLI(r, "run", SPEC8 " weights=int8", "--tensors", "w8_q.safetensors", "--out", "w8_int8.safetensors");
  EXPECT_EXIT0(r, "run weights=int8 on attnc quantize's output");
  cli_free(&r);
  o32 = st_read("w8_f32.safetensors", "out", &rank, shape);
  o8 = st_read("w8_int8.safetensors", "out", &rank, shape);
  for (i = 0; i < S * C; i++) {
    d2 += ((double)o8[i] - o32[i]) * ((double)o8[i] - o32[i]);
    r2 += (double)o32[i] * o32[i];
  }
  printf("weights=int8 against f32 weights: NMSE %.3g (DESIGN.md's bound 1e-3)\n", d2 / r2);
  assert_true(r2 > 0 && d2 > 0); /* quantisation changed something */
  assert_true(d2 / r2 <= 1e-3);
  free(o32);
  free(o8);

  CLI(r, "run", "mha x=1,S,8 heads=2 qkv_bias=false out_bias=false causal dtype=bf16", "--tensors", "w8_in.safetensors",
      "--out", "w8_bf16.safetensors");
  EXPECT_EXIT0(r, "run dtype=bf16");
  cli_free(&r);
  f = attnc_st_open(wpath(path, sizeof path, "w8_bf16.safetensors"), &e);
  assert_non_null(f);
  assert_int_equal(attnc_st_find(f, "out", &o), ATTNC_OK);
  assert_int_equal(o.dtype, ATTNC_BF16);
  assert_int_equal(o.rank, 3);
  assert_int_equal(o.shape[1], S);
  attnc_st_close(f);
#undef SPEC8
}

/* Guard rails (issue 30): a mistyped command suggests the nearest; an
 * input the spec does not read is ignored, as DESIGN.md says of every
 * tensor a spec does not use, but never silently: a warning names it and
 * the key that would read it (the run may differ from the model), unless
 * --allow-unused; a --prefix that matches nothing says so and lists the
 * prefixes present, nearest first. */
static void test_cli_guard_rails(void **state)
{
  st_tensor t[16];
  char names[16][96];
  cli_result r;
  int n, m;
  (void)state;
  CLI(r, "chek", "mha x=B,S,8 heads=2");
  EXPECT_FAIL(r, "a mistyped command");
  EXPECT_HAS(r, r.err, "unknown command 'chek' (did you mean 'check'?)", "the nearest command");
  EXPECT_LACKS(r, r.err, "commands:", "not the whole help");
  cli_free(&r);

  n = run_weights(t, names, "af", "layers.0.", NULL);
  m = run_weights(t + n, names + n, "af", "layers.1.", NULL);
  t[n + m] = tens("x", X134, 3, 1, 3, 4);
  t[n + m + 1] = tens("mask", X134, 2, 1, 3, 0); /* the spec has no mask=key */
  st_write("guard.safetensors", t, n + m + 2);
  CLI(r, "run", RUN_SPEC, "--tensors", "guard.safetensors", "--out", "guard_out.safetensors", "--prefix", "layers.0.");
  EXPECT_EXIT0(r, "an input the spec does not read: ignored");
  EXPECT_HAS(r, r.err, "attnc: warning: guard.safetensors holds the input 'mask', which this spec does not read (mask=key would)",
             "names the tensor and key");
  cli_free(&r);
  CLI(r, "run", RUN_SPEC, "--tensors", "guard.safetensors", "--out", "guard_out.safetensors", "--prefix", "layers.0.",
      "--allow-unused");
  EXPECT_EXIT0(r, "--allow-unused");
  EXPECT_LACKS(r, r.err, "warning", "--allow-unused: no warning");
  EXPECT_HAS(r, r.err, "attnc: ran ", "run says what it ran (guard rail 3)");
  EXPECT_HAS(r, r.err, "wrote out (1, 3, 4) to guard_out.safetensors in ", "the outputs and the time");
  cli_free(&r);
  CLI(r, "run", RUN_SPEC, "--tensors", "guard.safetensors", "--out", "guard_out.safetensors", "--prefix", "layers.0.",
      "--allow-unused", "--quiet");
  EXPECT_EXIT0(r, "--quiet");
  assert_string_equal(r.err, "");
  cli_free(&r);
  CLI(r, "run", RUN_SPEC, "--tensors", "guard.safetensors", "--out", "guard_out.safetensors", "--prefix", "layer.1.",
      "--allow-unused");
  EXPECT_FAIL(r, "a prefix that matches nothing");
  EXPECT_HAS(r, r.err, "--prefix 'layer.1.' matches no tensor", "says the prefix matched nothing");
  EXPECT_HAS(r, r.err, "nearest first: 'layers.1.', 'layers.0.'", "lists the prefixes, nearest first");
  cli_free(&r);
}

/* One name for every example (guard rail 6): `make examples` runs the AOT
 * example, the JIT ones and the Python one; `make example` is no second
 * name: it fails and names `make examples`.  `-n`: nothing is built. */
static void test_cli_make_examples(void **state)
{
  static const char *const want[] = { "examples/aot/check.sh", "af_msa_row", "gpt_decode", "cross_attn", "train_step",
                                      "examples/python/attn_heatmap.py" };
  cli_result r;
  size_t i;
  (void)state;
  if (access("Makefile", R_OK) != 0) fail_msg("no Makefile here: run test_cli from the source tree");
  make_run(&r, "-n examples");
  EXPECT_EXIT0(r, "make -n examples");
  for (i = 0; i < sizeof want / sizeof want[0]; i++) EXPECT_HAS(r, r.out, want[i], "make examples runs every example");
  cli_free(&r);
  make_run(&r, "example");
  EXPECT_FAIL(r, "make example");
  EXPECT_HAS(r, r.err, "there is no 'make example': run 'make examples'", "the one name");
  cli_free(&r);
}

/* attnc cache list | clean (guard rail 5): lists the cc kernels, deletes
 * only the files the cache writes (NAME-KEY.so, spec-KEY.idx). */
static void test_cli_cache(void **state)
{
  char dir[PATH_MAX + 16], keep[PATH_MAX + 64], keep2[PATH_MAX + 64];
  const char *old = getenv("ATTNC_CACHE_DIR");
  char *saved = old ? strdup(old) : NULL;
  cli_result r;
  FILE *f;
  (void)state;
  snprintf(dir, sizeof dir, "%s/cache_t", g_dir);
  setenv("ATTNC_CACHE_DIR", dir, 1);
  CLI(r, "check", "mha x=B,S,16 heads=2 causal", "--backend", "cc");
  EXPECT_EXIT0(r, "a cc kernel into a fresh cache");
  cli_free(&r);
  snprintf(keep, sizeof keep, "%s/notes.txt", dir);
  snprintf(keep2, sizeof keep2, "%s/mine-1234.so", dir);
  assert_non_null(f = fopen(keep, "w"));
  fputs("not attnc's\n", f);
  fclose(f);
  assert_non_null(f = fopen(keep2, "w"));
  fputs("not attnc's either\n", f);
  fclose(f);
  CLI(r, "cache", "list");
  EXPECT_EXIT0(r, "cache list");
  EXPECT_HAS(r, r.out, ": 1 kernels, ", "one kernel");
  EXPECT_HAS(r, r.out, "1 spec index entries", "its index entry");
  EXPECT_LACKS(r, r.out, "mine-1234.so", "not a cache file");
  cli_free(&r);
  CLI(r, "cache", "clean");
  EXPECT_EXIT0(r, "cache clean");
  EXPECT_HAS(r, r.out, "deleted 2 files", "the kernel and its index entry");
  cli_free(&r);
  assert_true(file_exists("cache_t/notes.txt"));
  assert_true(file_exists("cache_t/mine-1234.so"));
  CLI(r, "cache", "list");
  EXPECT_HAS(r, r.out, ": 0 kernels, ", "empty after clean");
  cli_free(&r);
  CLI(r, "cache", "purge");
  EXPECT_FAIL(r, "cache with another word");
  cli_free(&r);
  if (saved) { setenv("ATTNC_CACHE_DIR", saved, 1); free(saved); }
  else unsetenv("ATTNC_CACHE_DIR");
}

/* gen --name (guard rail 7): names a spec without name=; a spec whose
 * name= differs is an error and nothing is written. */
static void test_cli_gen_name(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "gen", "mha x=B,S,16 heads=2", "-o", "gen_name", "--name", "from_file", "--print-name");
  EXPECT_EXIT0(r, "gen --name");
  EXPECT_HAS(r, r.out, "from_file", "the name given");
  cli_free(&r);
  assert_true(file_exists("gen_name/from_file.c"));
  assert_true(file_exists("gen_name/from_file.h"));
  CLI(r, "gen", "mha x=B,S,16 heads=2 name=other", "-o", "gen_name2", "--name", "from_file");
  EXPECT_FAIL(r, "gen --name against another name=");
  EXPECT_HAS(r, r.err, "the spec says name=other but --name says from_file", "both names");
  cli_free(&r);
  assert_false(file_exists("gen_name2/other.c"));
  assert_false(file_exists("gen_name2/from_file.c"));
}

static void test_cli_run_alphafold_names(void **state) { (void)state; run_scheme("af", "w_af.safetensors", "out_af.safetensors"); }
static void test_cli_run_hf_names(void **state) { (void)state; run_scheme("hf", "w_hf.safetensors", "out_hf.safetensors"); }
static void test_cli_run_torch_names(void **state) { (void)state; run_scheme("torch", "w_torch.safetensors", "out_torch.safetensors"); }

/* gen --plain writes a plain kernel that compiles on its own; run --plain
 * and check --plain run it. */
static void test_cli_plain_gen_run_check(void **state)
{
  st_tensor t[8];
  char names[8][96];
  int n = run_weights(t, names, "hf", NULL, NULL);
  cli_result r;
  (void)state;
  CLI(r, "gen", "--plain", "mha x=B,S,64 heads=4 causal mask=key name=my_plain", "-o", "gen_plain");
  EXPECT_EXIT0(r, "gen --plain");
  cli_free(&r);
  assert_true(file_exists("gen_plain/my_plain.c"));
  cc_compile("gen_plain", "my_plain.c");
  CLI(r, "show", "--plain", "--header", "mha x=B,S,64 heads=4 causal mask=key name=my_plain");
  EXPECT_EXIT0(r, "show --plain --header");
  EXPECT_HAS(r, r.out, "int my_plain_run(const attnc_args *args);", "the plain header declares NAME_run");
  EXPECT_LACKS(r, r.out, "my_plain_phase", "the plain header has no phases");
  cli_free(&r);

  t[n] = tens("x", X134, 3, 1, 3, 4);
  st_write("w_plain.safetensors", t, n + 1);
  CLI(r, "run", "--plain", RUN_SPEC, "--tensors", "w_plain.safetensors", "--out", "out_plain.safetensors");
  EXPECT_EXIT0(r, "run --plain");
  cli_free(&r);
  expect_rows_bias("out_plain.safetensors", 1, 3);

  CLI(r, "check", "--plain", "gqa x=B,S,24 heads=4 kv_heads=2 causal=bottom_right mask=key", "--dim", "S=9");
  EXPECT_EXIT0(r, "check --plain");
  EXPECT_HAS(r, r.out, "plain form, backend tcc", "check says which form it checked");
  cli_free(&r);
}

static void test_cli_run_prefix(void **state)
{
  static const float OTHER_BO[4] = { 5, 6, 7, 8 };
  st_tensor t[16], x;
  char names[16][96];
  cli_result r;
  int n, m, i;
  (void)state;
  /* layer 0 is the one asked for; layer 1 has another output bias */
  n = run_weights(t, names, "af", "layers.0.", NULL);
  m = run_weights(t + n, names + n, "af", "layers.1.", NULL);
  for (i = n; i < n + m; i++)
    if (strstr(t[i].name, ".bias")) t[i].data = OTHER_BO;
  st_write("w_layers.safetensors", t, n + m);
  /* the input in a second file */
  x = tens("x", X134, 3, 1, 3, 4);
  st_write("x_layers.safetensors", &x, 1);
  CLI(r, "run", RUN_SPEC, "--tensors", "w_layers.safetensors", "--tensors", "x_layers.safetensors",
      "--prefix", "layers.0.", "--out", "out_layers.safetensors");
  EXPECT_EXIT0(r, "run --prefix layers.0.");
  cli_free(&r);
  expect_rows_bias("out_layers.safetensors", 1, 3);
}

/* --prefix with torch names: layer 0's stacked in_proj_weight, and an
 * unprefixed in_proj_weight (another module's) that must be ignored like
 * every other weight outside the prefix.  Wo = I, so a wrong Wv shows. */
static void test_cli_run_prefix_torch(void **state)
{
  static const float ONES[48] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
  static const float OTHER_BO[4] = { 5, 6, 7, 8 };
  st_tensor t[8];
  cli_result r;
  (void)state;
  t[0] = tens("layers.0.in_proj_weight", ZERO124, 2, 12, 4, 0);
  t[1] = tens("layers.0.out_proj.weight", EYE4, 2, 4, 4, 0);
  t[2] = tens("layers.0.out_proj.bias", BO, 1, 4, 0, 0);
  t[3] = tens("layers.1.in_proj_weight", ONES, 2, 12, 4, 0);
  t[4] = tens("layers.1.out_proj.bias", OTHER_BO, 1, 4, 0, 0);
  t[5] = tens("x", X134, 3, 1, 3, 4);
  t[6] = tens("in_proj_weight", ONES, 2, 12, 4, 0);
  t[7] = tens("out_proj.bias", OTHER_BO, 1, 4, 0, 0);
  st_write("w_prefix_torch.safetensors", t, 8);
  CLI(r, "run", RUN_SPEC, "--tensors", "w_prefix_torch.safetensors", "--prefix", "layers.0.", "--out", "out_prefix_torch.safetensors");
  EXPECT_EXIT0(r, "run --prefix with torch names");
  cli_free(&r);
  expect_rows_bias("out_prefix_torch.safetensors", 1, 3);
}

static void test_cli_run_named_dims(void **state)
{
  static const float X234[24] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12 };
  st_tensor t[8];
  char names[8][96];
  cli_result r;
  int n = run_weights(t, names, "hf", NULL, NULL);
  (void)state;
  t[n] = tens("x", X234, 3, 2, 3, 4);
  st_write("w_dims.safetensors", t, n + 1);
  CLI(r, "run", "mha x=B,S,4 heads=1 qkv_bias=false", "--tensors", "w_dims.safetensors", "--out", "out_dims.safetensors");
  EXPECT_EXIT0(r, "run with named dims");
  cli_free(&r);
  expect_rows_bias("out_dims.safetensors", 2, 3);
}

/* Nonzero numbers: q = k = 0 makes the weights uniform over the visible keys,
 * Wv = Wo = I, so with causal row i is the mean of x rows 0..i, plus bo. */
static void test_cli_run_causal_mean(void **state)
{
  st_tensor t[6];
  cli_result r;
  int rank, i, j, k;
  int64_t shape[8];
  float *o;
  (void)state;
  t[0] = tens("linear_q.weight", ZERO44, 2, 4, 4, 0);
  t[1] = tens("linear_k.weight", ZERO44, 2, 4, 4, 0);
  t[2] = tens("linear_v.weight", EYE4, 2, 4, 4, 0);
  t[3] = tens("linear_o.weight", EYE4, 2, 4, 4, 0);
  t[4] = tens("linear_o.bias", BO, 1, 4, 0, 0);
  t[5] = tens("x", X134, 3, 1, 3, 4);
  st_write("w_causal.safetensors", t, 6);
  CLI(r, "run", RUN_SPEC " causal", "--tensors", "w_causal.safetensors", "--out", "out_causal.safetensors");
  EXPECT_EXIT0(r, "run causal");
  cli_free(&r);
  o = st_read("out_causal.safetensors", "out", &rank, shape);
  assert_int_equal(rank, 3);
  assert_int_equal(shape[1], 3);
  for (i = 0; i < 3; i++)
    for (j = 0; j < 4; j++) {
      double want = 0;
      for (k = 0; k <= i; k++) want += X134[k * 4 + j];
      want = want / (i + 1) + BO[j];
      if (!(o[i * 4 + j] > want - 1e-5 && o[i * 4 + j] < want + 1e-5))
        fail_msg("causal mean: out[0][%d][%d] = %g, want %g", i, j, (double)o[i * 4 + j], want);
    }
  free(o);
}


/* Read `out` of shape (1, rows, 4) and compare with want (rows x 4). */
static void expect_out(const char *outfile, int rows, const double *want, const char *what)
{
  int rank = 0, i, j;
  int64_t shape[8];
  float *o = st_read(outfile, "out", &rank, shape);
  assert_int_equal(rank, 3);
  assert_int_equal(shape[0], 1);
  assert_int_equal(shape[1], rows);
  assert_int_equal(shape[2], 4);
  for (i = 0; i < rows; i++)
    for (j = 0; j < 4; j++)
      if (!(fabs((double)o[i * 4 + j] - want[i * 4 + j]) <= 1e-5 + 1e-5 * fabs(want[i * 4 + j])))
        fail_msg("%s: out[0][%d][%d] = %g, want %g", what, i, j, (double)o[i * 4 + j], want[i * 4 + j]);
  free(o);
}

/* Weights the spec does not use, and other tensors, are ignored, and so is
 * an input it does not read (kv in a self-attention spec), with a warning
 * unless --allow-unused (guard rail 1 of issue 30). */
static void test_cli_run_ignores_unused(void **state)
{
  static const float TWO[2] = { 9, 9 };
  st_tensor t[10];
  char names[8][96];
  cli_result r;
  int n = run_weights(t, names, "af", NULL, NULL);
  (void)state;
  t[n++] = tens("x", X134, 3, 1, 3, 4);
  t[n++] = tens("linear_g.weight", ZERO44, 2, 4, 4, 0);   /* the spec is not gated */
  t[n++] = tens("encoder.norm.weight", TWO, 1, 2, 0, 0);  /* not an attention tensor */
  t[n++] = tens("kv", X134, 3, 1, 3, 4);                  /* self-attention has no kv */
  st_write("w_unused.safetensors", t, n);
  CLI(r, "run", RUN_SPEC, "--tensors", "w_unused.safetensors", "--out", "out_unused.safetensors");
  EXPECT_EXIT0(r, "run with an unused input");
  EXPECT_HAS(r, r.err, "attnc: warning: w_unused.safetensors holds the input 'kv', which this spec does not read", "names the unused input");
  EXPECT_LACKS(r, r.err, "linear_g", "unused weights: no warning");
  cli_free(&r);
  expect_rows_bias("out_unused.safetensors", 1, 3);
  CLI(r, "run", RUN_SPEC, "--tensors", "w_unused.safetensors", "--out", "out_unused.safetensors", "--allow-unused");
  EXPECT_EXIT0(r, "run with unused tensors and --allow-unused");
  cli_free(&r);
  expect_rows_bias("out_unused.safetensors", 1, 3);
}

/* A key mask as U8, BOOL and F32: q = k = 0, Wv = Wo = I, key 2 masked, so
 * every row is the mean of x rows 0 and 1, plus bo. */
static void test_cli_run_mask(void **state)
{
  static const unsigned char M[3] = { 1, 1, 0 };
  static const float MF[3] = { 1, 1, 0 };
  double want[12];
  int kind, i, j;
  (void)state;
  for (i = 0; i < 3; i++)
    for (j = 0; j < 4; j++) want[i * 4 + j] = (X134[j] + X134[4 + j]) / 2 + BO[j];
  for (kind = 0; kind < 3; kind++) {
    st_tensor t[7];
    cli_result r;
    t[0] = tens("linear_q.weight", ZERO44, 2, 4, 4, 0);
    t[1] = tens("linear_k.weight", ZERO44, 2, 4, 4, 0);
    t[2] = tens("linear_v.weight", EYE4, 2, 4, 4, 0);
    t[3] = tens("linear_o.weight", EYE4, 2, 4, 4, 0);
    t[4] = tens("linear_o.bias", BO, 1, 4, 0, 0);
    t[5] = tens("x", X134, 3, 1, 3, 4);
    t[6] = tens("mask", kind == 2 ? MF : NULL, 2, 1, 3, 0);
    if (kind < 2) { t[6].u8 = M; t[6].bool_ = kind == 1; }
    st_write("w_mask.safetensors", t, 7);
    CLI(r, "run", RUN_SPEC " mask=key", "--tensors", "w_mask.safetensors", "--out", "out_mask.safetensors");
    EXPECT_EXIT0(r, kind == 0 ? "U8 mask" : kind == 1 ? "BOOL mask" : "F32 mask");
    cli_free(&r);
    expect_out("out_mask.safetensors", 3, want, kind == 0 ? "U8 mask" : kind == 1 ? "BOOL mask" : "F32 mask");
  }
}

/* GQA with torch's stacked in_proj_weight/in_proj_bias: (H*c + 2*G*c, c_in). */
static void test_cli_run_gqa_torch(void **state)
{
  static const float Z16x8[128] = { 0 }, Z16[16] = { 0 }, Z8x8[64] = { 0 };
  static const float B8[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
  float x[24];
  st_tensor t[5];
  cli_result r;
  int rank, i, j;
  int64_t shape[8];
  float *o;
  (void)state;
  for (i = 0; i < 24; i++) x[i] = (float)(i % 5) - 2.0f;
  t[0] = tens("in_proj_weight", Z16x8, 2, 16, 8, 0);
  t[1] = tens("in_proj_bias", Z16, 1, 16, 0, 0);
  t[2] = tens("out_proj.weight", Z8x8, 2, 8, 8, 0);
  t[3] = tens("out_proj.bias", B8, 1, 8, 0, 0);
  t[4] = tens("x", x, 3, 1, 3, 8);
  st_write("w_gqa.safetensors", t, 5);
  CLI(r, "run", "gqa x=1,3,8 heads=2 kv_heads=1", "--tensors", "w_gqa.safetensors", "--out", "out_gqa.safetensors");
  EXPECT_EXIT0(r, "run gqa with in_proj_weight");
  cli_free(&r);
  o = st_read("out_gqa.safetensors", "out", &rank, shape);
  assert_int_equal(rank, 3);
  assert_int_equal(shape[1], 3);
  assert_int_equal(shape[2], 8);
  for (i = 0; i < 3; i++)
    for (j = 0; j < 8; j++)
      if (o[i * 8 + j] != B8[j]) fail_msg("gqa: out[0][%d][%d] = %g, want %g", i, j, (double)o[i * 8 + j], (double)B8[j]);
  free(o);
}

/* Cross-attention: x (1,3,4), kv (1,5,6); q = k = 0 so every query averages
 * all 5 keys; Wv = [I 0] keeps kv's first 4 columns; Wo = I. */
static void test_cli_run_cross(void **state)
{
  static const float Z46[24] = { 0 };
  float kv[30], wv[24];
  double want[12];
  st_tensor t[7];
  cli_result r;
  int i, j;
  (void)state;
  for (i = 0; i < 30; i++) kv[i] = (float)((i * 7) % 11) - 5.0f;
  memset(wv, 0, sizeof wv);
  for (i = 0; i < 4; i++) wv[i * 6 + i] = 1;
  for (i = 0; i < 3; i++)
    for (j = 0; j < 4; j++) {
      double m = 0;
      int k;
      for (k = 0; k < 5; k++) m += kv[k * 6 + j];
      want[i * 4 + j] = m / 5 + BO[j];
    }
  t[0] = tens("q_proj.weight", ZERO44, 2, 4, 4, 0);
  t[1] = tens("k_proj.weight", Z46, 2, 4, 6, 0);
  t[2] = tens("v_proj.weight", wv, 2, 4, 6, 0);
  t[3] = tens("o_proj.weight", EYE4, 2, 4, 4, 0);
  t[4] = tens("o_proj.bias", BO, 1, 4, 0, 0);
  t[5] = tens("x", X134, 3, 1, 3, 4);
  t[6] = tens("kv", kv, 3, 1, 5, 6);
  st_write("w_cross.safetensors", t, 7);
  CLI(r, "run", "mha x=1,3,4 kv=1,5,6 heads=1 qkv_bias=false", "--tensors", "w_cross.safetensors", "--out", "out_cross.safetensors");
  EXPECT_EXIT0(r, "run cross-attention");
  cli_free(&r);
  expect_out("out_cross.safetensors", 3, want, "cross-attention");
}

static void test_cli_run_missing_weight(void **state)
{
  static const char *const omit[] = { "linear_o.bias", "linear_k.weight" };
  size_t i;
  (void)state;
  for (i = 0; i < 2; i++) {
    st_tensor t[8];
    char names[8][96];
    cli_result r;
    int n = run_weights(t, names, "af", NULL, omit[i]);
    t[n] = tens("x", X134, 3, 1, 3, 4);
    st_write("w_missing.safetensors", t, n + 1);
    CLI(r, "run", RUN_SPEC, "--tensors", "w_missing.safetensors", "--out", "out_missing.safetensors");
    EXPECT_FAIL(r, omit[i]);
    EXPECT_HAS(r, r.err, "error", omit[i]);
    EXPECT_HAS(r, r.err, "missing", omit[i]);
    EXPECT_HAS(r, r.err, omit[i], "the missing tensor is named");
    cli_free(&r);
  }
}

static void test_cli_run_missing_input(void **state)
{
  st_tensor t[8];
  char names[8][96];
  cli_result r;
  int n = run_weights(t, names, "af", NULL, NULL);
  (void)state;
  st_write("w_nox.safetensors", t, n);
  CLI(r, "run", RUN_SPEC, "--tensors", "w_nox.safetensors", "--out", "out_nox.safetensors");
  EXPECT_FAIL(r, "run without x");
  EXPECT_HAS(r, r.err, "'x'", "run without x names x");
  cli_free(&r);
}

static void test_cli_run_wrong_shape(void **state)
{
  static const float X135[15] = { 0 };
  st_tensor t[8];
  char names[8][96];
  cli_result r;
  int n = run_weights(t, names, "af", NULL, NULL);
  (void)state;
  t[n] = tens("x", X135, 3, 1, 3, 5);
  st_write("w_shape.safetensors", t, n + 1);
  CLI(r, "run", RUN_SPEC, "--tensors", "w_shape.safetensors", "--out", "out_shape.safetensors");
  EXPECT_FAIL(r, "wrong x shape");
  EXPECT_HAS(r, r.err, "error", "wrong x shape");
  EXPECT_HAS(r, r.err, "'x'", "wrong x shape names the tensor");
  EXPECT_HAS(r, r.err, "axis 2", "wrong x shape names the axis");
  assert_false(file_exists("out_shape.safetensors"));
  cli_free(&r);
}

static void test_cli_run_needs_out_and_tensors(void **state)
{
  st_tensor t[8];
  char names[8][96];
  cli_result r;
  int n = run_weights(t, names, "af", NULL, NULL);
  (void)state;
  t[n] = tens("x", X134, 3, 1, 3, 4);
  st_write("w_noout.safetensors", t, n + 1);
  CLI(r, "run", RUN_SPEC, "--tensors", "w_noout.safetensors");
  EXPECT_FAIL(r, "run without --out");
  EXPECT_HAS(r, r.err, "attnc: error:", "run without --out");
  EXPECT_HAS(r, r.err, "--out", "run without --out says what is missing");
  cli_free(&r);
  CLI(r, "run", RUN_SPEC, "--out", "never.safetensors");
  EXPECT_FAIL(r, "run without --tensors");
  EXPECT_HAS(r, r.err, "attnc: error:", "run without --tensors");
  EXPECT_HAS(r, r.err, "--tensors", "run without --tensors says what is missing");
  cli_free(&r);
  CLI(r, "run", RUN_SPEC, "--tensors", "no_such.safetensors", "--out", "never.safetensors");
  EXPECT_FAIL(r, "run with a missing file");
  EXPECT_HAS(r, r.err, "attnc: error:", "run with a missing file");
  EXPECT_HAS(r, r.err, "no_such.safetensors", "run with a missing file names it");
  cli_free(&r);
  assert_false(file_exists("never.safetensors"));
}

/* ------------------------------------------------------------------ */
/* bench                                                               */

/* The value after "key": in a one-line JSON object (NULL if absent). */
static const char *json_value(const char *obj, const char *key)
{
  return json_key(obj, obj + strlen(obj), key);
}

static void bench_json(const char *backend)
{
  const char *spec = "mha x=B,S,64 heads=4 causal";
  char *canon = canonical_of(spec), want[32], *nl;
  const char *p;
  cli_result r;
  static const char *const keys[] = { "median_ms", "gflops", "compile_ms", "threads" };
  size_t i;
  CLI(r, "bench", spec, "--json", "--runs", "3", "--dim", "B=1", "--dim", "S=16", "--backend", backend);
  EXPECT_EXIT0(r, "bench --json");
  /* exactly one object on one line */
  p = ws(r.out);
  if (*p != '{') { dump("bench --json", &r); fail_msg("bench --json must print a JSON object"); }
  nl = strchr(p, '\n');
  if (!nl || *ws(nl) != '\0' || nl[-1] != '}') { dump("bench --json", &r); fail_msg("bench --json must print exactly one object"); }
  for (i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const char *v = json_value(p, keys[i]);
    char *e;
    double d;
    if (!v) { dump("bench --json", &r); fail_msg("bench --json lacks \"%s\"", keys[i]); }
    d = strtod(v, &e);
    if (e == v || !(d >= 0)) { dump("bench --json", &r); fail_msg("bench --json: \"%s\" is not a number >= 0", keys[i]); }
  }
  assert_true(strtod(json_value(p, "median_ms"), NULL) > 0);
  assert_true(strtod(json_value(p, "gflops"), NULL) > 0);
  assert_true(strtod(json_value(p, "threads"), NULL) >= 1);
  /* causal: also the rate over the unmasked pairs, less than the dense one */
  if (!json_value(p, "gflops_unmasked")) { dump("bench --json", &r); fail_msg("bench --json lacks \"gflops_unmasked\" for a causal spec"); }
  assert_true(strtod(json_value(p, "gflops_unmasked"), NULL) > 0);
  assert_true(strtod(json_value(p, "gflops_unmasked"), NULL) < strtod(json_value(p, "gflops"), NULL));
  snprintf(want, sizeof want, "\"%s\"", backend);
  p = json_value(r.out, "backend");
  if (!p || strncmp(p, want, strlen(want)) != 0) { dump("bench --json", &r); fail_msg("bench --json: backend must be %s", want); }
  p = json_value(r.out, "canonical");
  if (!p || *p != '"' || strncmp(p + 1, canon, strlen(canon)) != 0 || p[1 + strlen(canon)] != '"') {
    dump("bench --json", &r);
    fail_msg("bench --json: canonical must be \"%s\"", canon);
  }
  assert_string_equal(r.err, "");
  cli_free(&r);
  free(canon);
}

static void test_cli_bench_json(void **state) { (void)state; bench_json("tcc"); }
static void test_cli_bench_json_cc(void **state) { (void)state; bench_json("cc"); }

/* The warm-up: one run with --warmup-ms 0, runs until the time has
 * passed otherwise (a 1x16x32 kernel runs in microseconds, so 30 ms
 * hold many), and the count is reported. */
static void test_cli_bench_warmup(void **state)
{
  static const char *const ms[] = { "0", "30" };
  size_t i;
  (void)state;
  for (i = 0; i < 2; i++) {
    cli_result r;
    const char *v;
    long n;
    CLI(r, "bench", "mha x=B,S,32 heads=2", "--json", "--runs", "2", "--warmup-ms", ms[i], "--dim", "B=1", "--dim", "S=16");
    EXPECT_EXIT0(r, "bench --warmup-ms");
    v = json_value(r.out, "warmups");
    if (!v) { dump("bench --warmup-ms", &r); fail_msg("bench --json lacks \"warmups\""); }
    n = strtol(v, NULL, 10);
    if (i == 0 && n != 1) { dump("bench --warmup-ms 0", &r); fail_msg("--warmup-ms 0 must warm up once, did %ld", n); }
    if (i == 1 && n < 2) { dump("bench --warmup-ms 30", &r); fail_msg("--warmup-ms 30 warmed up only %ld time(s)", n); }
    cli_free(&r);
  }
}

/* busy_cpus, CPU time over wall time of the timed runs: one thread
 * cannot keep more than one CPU busy, and a kernel running for some
 * milliseconds keeps it busy for most of them. */
static void test_cli_bench_busy_cpus(void **state)
{
  cli_result r;
  const char *v;
  double busy;
  (void)state;
  CLI(r, "bench", "mha x=B,S,64 heads=2", "--json", "--threads", "1", "--runs", "50", "--warmup-ms", "0", "--dim",
      "B=2", "--dim", "S=256");
  EXPECT_EXIT0(r, "bench --threads 1");
  v = json_value(r.out, "busy_cpus");
  if (!v) { dump("bench busy_cpus", &r); fail_msg("bench --json lacks \"busy_cpus\""); }
  busy = strtod(v, NULL);
  if (!(busy > 0.2 && busy < 1.2)) { dump("bench busy_cpus", &r); fail_msg("one thread's busy_cpus must be about 1, read %g", busy); }
  cli_free(&r);
}

static void test_cli_bench_text(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "bench", "mha x=B,S,32 heads=2", "--runs", "2", "--dim", "B=1", "--dim", "S=8");
  EXPECT_EXIT0(r, "bench");
  EXPECT_HAS(r, r.out, "median", "bench text");
  EXPECT_HAS(r, r.out, "x=B,S,32", "bench text prints the canonical spec");
  cli_free(&r);
}

/* ---- KV caches (cache=CAP) ---- */

#define CACHE_RUN_SPEC "mha x=1,S,4 heads=1 qkv_bias=false out_bias=true cache=CAP"
static const float KC0[24] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24 };
static const float VC0[24] = { -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13, -14, -15, -16, -17, -18, -19, -20,
                               -21, -22, -23, -24 };

/* Weights (identity projections, so the new k, v rows are x's rows), x
 * (1, 3, 4) and caches (1, 1, CAP=6, 4) holding KC0, VC0, cache_len (1) =
 * len; names under prefix.  Returns the count. */
static int cache_files(st_tensor *t, char names[][96], const char *prefix, const int64_t *len)
{
  static const char *const w[] = { "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "o_proj.bias" };
  static const char *const in[] = { "k_cache", "v_cache", "cache_len" };
  int i, k = 0;
  for (i = 0; i < 5; i++, k++) {
    snprintf(names[k], 96, "%s%s", prefix, w[i]);
    t[k] = strstr(w[i], ".bias") ? tens(names[k], BO, 1, 4, 0, 0) : tens(names[k], EYE4, 2, 4, 4, 0);
  }
  t[k++] = tens("x", X134, 3, 1, 3, 4);
  for (i = 0; i < 3; i++, k++) snprintf(names[k], 96, "%s%s", prefix, in[i]);
  t[k - 3] = tens(names[k - 3], KC0, 3, 1, 1, 6);
  t[k - 3].rank = 4;
  t[k - 3].shape[3] = 4;
  t[k - 2] = t[k - 3];
  t[k - 2].name = names[k - 2];
  t[k - 2].data = VC0;
  t[k - 1] = tens(names[k - 1], NULL, 1, 1, 0, 0);
  t[k - 1].i64 = len;
  return k;
}

/* What fails before anything runs: the caches and --out stay as they were. */
static void test_cli_run_cache_errors(void **state)
{
  st_tensor t[16];
  char names[16][96], path[PATH_MAX + 64], *before, *after;
  size_t nb, na;
  const int64_t len4 = 4, len0 = 0;
  cli_result r;
  int n;
  (void)state;
  n = cache_files(t, names, "", &len4); /* 4 + 3 new rows > CAP = 6 */
  st_write("cache_in.safetensors", t, n);
  before = slurp(wpath(path, sizeof path, "cache_in.safetensors"), &nb);
  CLI(r, "run", CACHE_RUN_SPEC, "--tensors", "cache_in.safetensors", "--out", "cache_out.safetensors");
  EXPECT_FAIL(r, "cache_len + Sn > CAP");
  EXPECT_HAS(r, r.err, "attnc: error: cache_len[0] = 4 leaves no room for the 3 new rows of x: 4 + 3 > CAP = 6; nothing was run",
             "names the batch element, the values and CAP");
  cli_free(&r);
  assert_false(file_exists("cache_out.safetensors"));
  after = slurp(wpath(path, sizeof path, "cache_in.safetensors"), &na);
  assert_int_equal(na, nb);
  assert_memory_equal(after, before, nb);
  free(after);
  free(before);

  /* the guard rail: cache tensors for a spec without a cache, with or without the prefix */
  n = cache_files(t, names, "layers.0.", &len0);
  st_write("cache_pre.safetensors", t, n);
  CLI(r, "run", "mha x=1,S,4 heads=1 qkv_bias=false out_bias=true", "--tensors", "cache_pre.safetensors", "--out",
      "cache_out.safetensors", "--prefix", "layers.0.");
  EXPECT_EXIT0(r, "caches for a spec without cache: ignored");
  EXPECT_HAS(r, r.err, "warning: cache_pre.safetensors holds the input 'layers.0.k_cache', which this spec does not read (cache=CAP would)",
             "names the tensor and the key");
  cli_free(&r);
  CLI(r, "run", CACHE_RUN_SPEC " kv_dtype=int8", "--tensors", "cache_pre.safetensors", "--out", "cache_out.safetensors",
      "--prefix", "layers.0.");
  EXPECT_FAIL(r, "f32 caches for an int8 cache");
  EXPECT_HAS(r, r.err, "tensor 'k_cache' has dtype F32 but the spec's cache stores I8 (kv_dtype=int8)", "no conversion");
  cli_free(&r);

  CLI(r, "bench", "mha x=B,S,8 heads=2", "--cache-len", "3");
  EXPECT_FAIL(r, "--cache-len without a cache");
  EXPECT_HAS(r, r.err, "--cache-len is for cache specs, and this one has no cache: add cache=CAP", "says which key");
  cli_free(&r);
  CLI(r, "bench", "--help");
  EXPECT_HAS(r, r.out, "--cache-len N", "bench --help describes --cache-len");
  cli_free(&r);
  CLI(r, "run", "--help");
  EXPECT_HAS(r, r.out, "k_cache, v_cache", "run --help describes the caches");
  cli_free(&r);
  CLI(r, "explain", CACHE_RUN_SPEC " kv_dtype=int8", "--dim", "S=1", "--dim", "CAP=16");
  EXPECT_EXIT0(r, "explain a cache spec");
  EXPECT_HAS(r, r.out, "k_cache (1, 1, CAP=16, 4)  64 elements, 64 bytes", "an int8 cache: a byte per value");
  EXPECT_HAS(r, r.out, "v_cache_scale (1, 1, CAP=16)  16 elements, 64 bytes", "F32 scales");
  EXPECT_HAS(r, r.out, "cache_len (1)  1 elements, 8 bytes", "cache_len, as the kernel reads it");
  EXPECT_HAS(r, r.out, "cache 256 bytes (k_cache, v_cache and their scales: updated in place)", "the memory line");
  cli_free(&r);
}

/* run writes the updated caches and cache_len + Sn to --out under plain
 * names, so --out is the next step's cache file.  NEEDS THE GENERATED
 * KERNEL (issue 28): until it writes the caches, this test fails. */
static void test_cli_run_cache_round_trip(void **state)
{
  st_tensor t[16];
  char names[16][96];
  const int64_t len2 = 2;
  int64_t shape[8];
  float *kc, *vc, *len;
  cli_result r;
  int n, rank = 0, p, j, f64;
  (void)state;
  n = cache_files(t, names, "layers.0.", &len2);
  st_write("cache_rt.safetensors", t, n);
  /* and the same F32 file for an f64 cache: a file is never refused for its
   * float dtype; the caches are converted on reading, written as f64 */
  for (f64 = 1; f64 >= 0; f64--) {
    CLI(r, "run", f64 ? CACHE_RUN_SPEC " kv_dtype=f64" : CACHE_RUN_SPEC, "--tensors", "cache_rt.safetensors", "--out",
        "cache_rt_out.safetensors", "--prefix", "layers.0.");
    EXPECT_EXIT0(r, "a cache run");
    EXPECT_HAS(r, r.err, "wrote out (1, 3, 4), k_cache (1, 1, 6, 4), v_cache (1, 1, 6, 4), cache_len (1) to cache_rt_out.safetensors",
               "every output, the caches under plain names");
    cli_free(&r);
    kc = st_read("cache_rt_out.safetensors", "k_cache", &rank, shape);
    assert_int_equal(rank, 4);
    vc = st_read("cache_rt_out.safetensors", "v_cache", &rank, shape);
    len = st_read("cache_rt_out.safetensors", "cache_len", &rank, shape);
    assert_int_equal(rank, 1);
    assert_true(len[0] == 5.0f); /* 2 + the 3 new rows */
    for (p = 0; p < 6; p++)
      for (j = 0; j < 4; j++) {
        const int fresh = p >= 2 && p < 5;
        const float kwant = fresh ? X134[(p - 2) * 4 + j] : KC0[p * 4 + j], vwant = fresh ? X134[(p - 2) * 4 + j] : VC0[p * 4 + j];
        /* identity projections without biases: the new rows are x's rows */
        if (fabsf(kc[p * 4 + j] - kwant) > 1e-6f || fabsf(vc[p * 4 + j] - vwant) > 1e-6f)
          fail_msg("row %d col %d: k %g v %g, want %g %g (%s, f64 cache %d)", p, j, (double)kc[p * 4 + j], (double)vc[p * 4 + j],
                   (double)kwant, (double)vwant, fresh ? "a new row" : "an old row, unchanged", f64);
      }
    free(kc);
    free(vc);
    free(len);
  }
}

/* bench --cache-len: random caches, every run from the same length.  NEEDS
 * check/checker.c's checker_bind_random to bind cache specs (it indexes
 * past its weight names for the cache slots today). */
static void test_cli_bench_cache(void **state)
{
  cli_result r;
  (void)state;
  CLI(r, "bench", "mha x=B,S,8 heads=2 cache=CAP", "--dim", "B=2", "--dim", "S=2", "--dim", "CAP=16", "--cache-len", "5",
      "--runs", "2", "--warmup-ms", "0", "--json");
  EXPECT_EXIT0(r, "bench a cache spec");
  EXPECT_HAS(r, r.out, "\"cache_len\": 5, \"cap\": 16, ", "the JSON says the length");
  cli_free(&r);
  CLI(r, "bench", "mha x=B,S,8 heads=2 cache=CAP", "--dim", "S=2", "--dim", "CAP=16", "--cache-len", "15");
  EXPECT_FAIL(r, "N + Sq > CAP");
  EXPECT_HAS(r, r.err, "--cache-len 15 leaves no room for the 2 new rows: 15 + 2 > CAP = 16", "says why");
  EXPECT_HAS(r, r.err, "pass --cache-len 14 or less, or --dim CAP=N", "and the fix");
  cli_free(&r);
  /* unset named dims: one decoding step (S = 1), and a CAP that holds it */
  CLI(r, "bench", "mha x=B,S,8 heads=2 cache=CAP", "--dim", "B=1", "--cache-len", "300", "--runs", "2", "--warmup-ms", "0",
      "--json");
  EXPECT_EXIT0(r, "bench --cache-len with S and CAP unset");
  EXPECT_HAS(r, r.out, "\"cache_len\": 300, \"cap\": 301, ", "S = 1, CAP = 301");
  cli_free(&r);
}

/* ---- training: attnc grad, run --seed, bench --grad, show --grad ---- */

/* Usage and errors, none of which needs a backward pass. */
static void test_cli_grad_usage_and_errors(void **state)
{
  st_tensor t[8];
  char names[8][96];
  char path[PATH_MAX + 64];
  cli_result r;
  int n = run_weights(t, names, "hf", NULL, NULL);
  (void)state;
  t[n] = tens("x", X134, 3, 1, 3, 4);
  st_write("w_grad_err.safetensors", t, n + 1);
  CLI(r, "grad", "--help");
  EXPECT_EXIT0(r, "grad --help");
  EXPECT_HAS(r, r.out, "usage: attnc grad SPEC --tensors FILE... --dout FILE --out FILE", "grad's usage");
  EXPECT_HAS(r, r.out, "grad.NAME", "what grad writes");
  cli_free(&r);
  CLI(r, "help");
  EXPECT_EXIT0(r, "attnc help");
  EXPECT_HAS(r, r.out, "  grad     forward and backward", "attnc help lists grad");
  cli_free(&r);
  /* --grad adds train, which dropout needs: the spec parses only with it */
  CLI(r, "show", "--grad", "mha x=B,S,16 heads=2 causal dropout=0.5");
  EXPECT_EXIT0(r, "show --grad of a dropout spec without train");
  EXPECT_HAS(r, r.out, "_backward(const attnc_args *args)", "the backward is shown");
  cli_free(&r);
  CLI(r, "show", "--grad", "mha x=B,S,16 heads=2 causal dropout=1.5");
  EXPECT_FAIL(r, "show --grad with dropout out of range");
  EXPECT_HAS(r, r.err, "spec:1:37: error: dropout must be a probability", "the spec's own error at its position");
  cli_free(&r);
  CLI(r, "check", "--help");
  EXPECT_HAS(r, r.out, "a train spec's dropout takes the same seed", "check's --seed seeds the data and the dropout");
  EXPECT_HAS(r, r.out, "--grad", "check takes --grad");
  cli_free(&r);
  CLI(r, "run", "--help");
  EXPECT_HAS(r, r.out, "--seed N            the dropout seed", "run's --seed is the dropout seed");
  cli_free(&r);
  CLI(r, "bench", "--help");
  EXPECT_HAS(r, r.out, "backward_ms", "bench --grad's fields");
  EXPECT_HAS(r, r.out, "grad_scratch_bytes", "bench --grad's fields");
  cli_free(&r);
  CLI(r, "show", "--help");
  EXPECT_HAS(r, r.out, "--grad", "show --grad");
  cli_free(&r);
  CLI(r, "gard", RUN_SPEC);
  EXPECT_FAIL(r, "a mistyped grad");
  EXPECT_HAS(r, r.err, "did you mean 'grad'?", "grad is a command");
  cli_free(&r);

  CLI(r, "grad", RUN_SPEC, "--dout", "d.safetensors", "--out", "g.safetensors");
  EXPECT_FAIL(r, "grad without --tensors");
  EXPECT_HAS(r, r.err, "grad needs --tensors FILE", "names the option");
  cli_free(&r);
  CLI(r, "grad", RUN_SPEC, "--tensors", "w_grad_err.safetensors", "--out", "g.safetensors");
  EXPECT_FAIL(r, "grad without --dout");
  EXPECT_HAS(r, r.err, "grad needs --dout FILE", "names the option");
  cli_free(&r);
  CLI(r, "grad", RUN_SPEC, "--tensors", "w_grad_err.safetensors", "--dout", "d.safetensors");
  EXPECT_FAIL(r, "grad without --out");
  EXPECT_HAS(r, r.err, "grad needs --out FILE", "names the option");
  cli_free(&r);
  CLI(r, "run", "--grad", RUN_SPEC, "--tensors", "w_grad_err.safetensors", "--out", "g.safetensors");
  EXPECT_FAIL(r, "run --grad");
  EXPECT_HAS(r, r.err, "--grad is for check, show and bench; attnc grad SPEC", "points at attnc grad");
  cli_free(&r);
  CLI(r, "check", RUN_SPEC, "--dout", "d.safetensors");
  EXPECT_FAIL(r, "check --dout");
  EXPECT_HAS(r, r.err, "--dout is for grad", "--dout belongs to grad");
  cli_free(&r);
  /* train is added, and a spec it does not fit says so without a position past the text */
  CLI(r, "show", "--grad", "mha x=1,3,8 heads=2 weights=int8");
  EXPECT_FAIL(r, "show --grad on an int8-weights spec");
  EXPECT_HAS(r, r.err, "the gradients need the key train, which this command adds", "says grad added train");
  EXPECT_HAS(r, r.err, "drop weights=int8", "and the fix");
  cli_free(&r);
  CLI(r, "bench", "--grad", "mha x=1,S,8 heads=2 cache=CAP", "--cache-len", "3");
  EXPECT_FAIL(r, "bench --grad --cache-len");
  EXPECT_HAS(r, r.err, "--grad times training, and --cache-len decoding", "the two do not mix");
  cli_free(&r);
  /* --seed: 64 bits; run lists it for every spec (DESIGN.md), and one
   * without dropout has nothing to seed */
  CLI(r, "run", RUN_SPEC, "--tensors", "w_grad_err.safetensors", "--out", "g.safetensors", "--seed", "18446744073709551615");
  EXPECT_EXIT0(r, "run --seed on a spec without dropout");
  cli_free(&r);
  assert_true(file_exists("g.safetensors"));
  unlink(wpath(path, sizeof path, "g.safetensors"));
  /* a train spec takes --seed whether or not it has dropout (DESIGN.md's
   * run row: the dropout seed of a train spec; grad implies train and
   * lists [--seed N] for every spec): nothing is dropped, the result is
   * the seedless one */
  CLI(r, "run", RUN_SPEC " train", "--tensors", "w_grad_err.safetensors", "--out", "g_seed.safetensors", "--seed", "5");
  EXPECT_EXIT0(r, "run --seed on a train spec without dropout");
  cli_free(&r);
  {
    st_tensor d = tens("dout", X134, 3, 1, 3, 4);
    st_write("d_seed.safetensors", &d, 1);
  }
  CLI(r, "grad", RUN_SPEC, "--tensors", "w_grad_err.safetensors", "--dout", "d_seed.safetensors", "--out",
      "g_seed.safetensors", "--seed", "18446744073709551615");
  EXPECT_EXIT0(r, "grad --seed on a spec without dropout");
  cli_free(&r);
  CLI(r, "grad", RUN_SPEC, "--tensors", "w_grad_err.safetensors", "--dout", "d_seed.safetensors", "--out",
      "g_noseed.safetensors");
  EXPECT_EXIT0(r, "grad without --seed");
  cli_free(&r);
  {
    static const char *const gnames[] = { "out", "grad.x", "grad.q_proj.weight" };
    size_t i;
    for (i = 0; i < sizeof gnames / sizeof gnames[0]; i++) {
      int ra, rb, j;
      int64_t sa[8], sb[8];
      float *a = st_read("g_seed.safetensors", gnames[i], &ra, sa);
      float *b = st_read("g_noseed.safetensors", gnames[i], &rb, sb);
      size_t count = 1;
      assert_int_equal(ra, rb);
      for (j = 0; j < ra; j++) { assert_true(sa[j] == sb[j]); count *= (size_t)sa[j]; }
      assert_memory_equal(a, b, count * sizeof *a); /* the seed dropped nothing */
      free(a);
      free(b);
    }
  }
  {
    static const char *const bad[] = { "-1", "18446744073709551616", "1x", "", " 1", "+1" };
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      CLI(r, "run", RUN_SPEC, "--tensors", "w_grad_err.safetensors", "--out", "g.safetensors", "--seed", bad[i]);
      EXPECT_FAIL(r, "a bad --seed");
      EXPECT_HAS(r, r.err, "--seed needs a whole number from 0 to 18446744073709551615", bad[i]);
      cli_free(&r);
    }
  }
}

/* The backward pass exists once the generator emits NAME_backward: until
 * then the tests that run it are skipped, saying so. */
static int have_backward(void)
{
  cli_result r;
  int ok;
  CLI(r, "show", "--grad", "mha x=1,3,4 heads=2");
  ok = r.status == 0 && strstr(r.out, "_backward(") != NULL;
  cli_free(&r);
  if (ok) {
    CLI(r, "bench", "--grad", "mha x=1,3,4 heads=2", "--runs", "1", "--warmup-ms", "0");
    ok = r.status == 0;
    cli_free(&r);
  }
  if (!ok) printf("skipped: the generator emits no NAME_backward yet (attnc show --grad)\n");
  return ok;
}

/* F64 tensors through the library's writer, and one back. */
static void st_write64(const char *file, int n, const char *const *names, attnc_tensor *t)
{
  char path[PATH_MAX + 64];
  attnc_error e;
  if (attnc_st_write(wpath(path, sizeof path, file), (size_t)n, names, t, &e) != ATTNC_OK) fail_msg("%s: %s", file, e.message);
}

static double *st_read64(const char *file, const char *name, attnc_tensor *shape)
{
  char path[PATH_MAX + 64];
  attnc_error e;
  attnc_safetensors *f = attnc_st_open(wpath(path, sizeof path, file), &e);
  attnc_tensor t;
  double *d;
  size_t n = 1;
  int a;
  if (!f) fail_msg("%s: %s", file, e.message);
  if (attnc_st_find(f, name, &t) != ATTNC_OK) fail_msg("%s holds no tensor '%s'", file, name);
  if (t.dtype != ATTNC_F64) fail_msg("%s: '%s' is %s, want F64", file, name, attnc_dtype_name(t.dtype));
  for (a = 0; a < t.rank; a++) n *= (size_t)t.shape[a];
  d = malloc(n * sizeof *d + 1);
  assert_non_null(d);
  memcpy(d, t.data, n * sizeof *d);
  if (shape) *shape = t;
  attnc_st_close(f);
  return d;
}

/* attnc grad against finite differences of attnc run: an f64 spec, torch
 * names under a prefix (grad.NAME keeps it; in_proj_* stay whole), x
 * without it; for a few elements of every tensor, (L(w + h) - L(w - h)) /
 * 2h with L = sum(out * dout). */
static void test_cli_grad_finite_differences(void **state)
{
#define GSPEC "mha x=1,3,4 heads=2 causal dtype=f64"
  static const char *const names[] = { "l0.in_proj_weight", "l0.in_proj_bias", "l0.out_proj.weight", "l0.out_proj.bias", "x" };
  static const int64_t shapes[][3] = { { 12, 4, 0 }, { 12, 0, 0 }, { 4, 4, 0 }, { 4, 0, 0 }, { 1, 3, 4 } };
  static const int ranks[] = { 2, 1, 2, 1, 3 };
  static const int picks[][3] = { { 5, 21, 46 }, { 1, 6, 11 }, { 0, 7, 15 }, { 0, 2, 3 }, { 0, 6, 11 } };
  static double data[5][48], dout[12];
  attnc_tensor t[5], dt, gt;
  const char *dname = "dout";
  char gname[128];
  cli_result r;
  double worst = 0;
  int i, j, p;
  (void)state;
  if (!have_backward()) skip();
  for (i = 0; i < 5; i++) {
    size_t n = 1;
    memset(&t[i], 0, sizeof t[i]);
    t[i].dtype = ATTNC_F64;
    t[i].rank = ranks[i];
    for (j = 0; j < ranks[i]; j++) { t[i].shape[j] = shapes[i][j]; n *= (size_t)shapes[i][j]; }
    for (j = 0; j < (int)n; j++) data[i][j] = sin(1.7 * (i * 48 + j) + 0.3) * (i == 4 ? 1.0 : 0.6);
    t[i].data = data[i];
  }
  for (j = 0; j < 12; j++) dout[j] = cos(0.9 * j + 0.1);
  dt = t[4];
  dt.data = dout;
  st_write64("g_w.safetensors", 5, names, t);
  st_write64("g_dout.safetensors", 1, &dname, &dt);
  CLI(r, "grad", GSPEC, "--tensors", "g_w.safetensors", "--prefix", "l0.", "--dout", "g_dout.safetensors", "--out",
      "g_out.safetensors");
  EXPECT_EXIT0(r, "attnc grad");
  EXPECT_HAS(r, r.err, "wrote out (1, 3, 4), grad.x (1, 3, 4), grad.l0.in_proj_weight (12, 4), grad.l0.in_proj_bias (12), "
             "grad.l0.out_proj.weight (4, 4), grad.l0.out_proj.bias (4)", "every gradient, named as read");
  cli_free(&r);
  for (i = 0; i < 5; i++) {
    double *g;
    snprintf(gname, sizeof gname, "grad.%s", names[i]);
    g = st_read64("g_out.safetensors", gname, &gt);
    assert_int_equal(gt.rank, ranks[i]);
    for (j = 0; j < ranks[i]; j++) assert_int_equal(gt.shape[j], shapes[i][j]);
    for (p = 0; p < 3; p++) {
      const int at = picks[i][p];
      const double h = 1e-5, keep = data[i][at];
      double l[2] = { 0, 0 }, fd, err;
      int side;
      for (side = 0; side < 2; side++) {
        double *o;
        data[i][at] = keep + (side ? -h : h);
        st_write64("g_wh.safetensors", 5, names, t);
        CLI(r, "run", GSPEC, "--tensors", "g_wh.safetensors", "--prefix", "l0.", "--out", "g_oh.safetensors", "--quiet");
        EXPECT_EXIT0(r, "attnc run, perturbed");
        cli_free(&r);
        o = st_read64("g_oh.safetensors", "out", NULL);
        for (j = 0; j < 12; j++) l[side] += o[j] * dout[j];
        free(o);
      }
      data[i][at] = keep;
      fd = (l[0] - l[1]) / (2 * h);
      err = fabs(g[at] - fd) / (1e-7 + 1e-5 * fabs(fd));
      if (err > worst) worst = err;
      if (err > 1)
        fail_msg("grad.%s[%d] = %.10g but the finite difference is %.10g", names[i], at, g[at], fd);
    }
    free(g);
  }
  printf("attnc grad against finite differences of attnc run: worst %.3g of the bound\n", worst);
  /* the output is the forward's */
  {
    double *o = st_read64("g_out.safetensors", "out", NULL), *o2;
    CLI(r, "run", GSPEC, "--tensors", "g_w.safetensors", "--prefix", "l0.", "--out", "g_o2.safetensors", "--quiet");
    EXPECT_EXIT0(r, "attnc run");
    cli_free(&r);
    o2 = st_read64("g_o2.safetensors", "out", NULL);
    for (j = 0; j < 12; j++) assert_true(fabs(o[j] - o2[j]) <= 1e-12 * (1 + fabs(o2[j])));
    free(o);
    free(o2);
  }
  /* dout missing from its file */
  CLI(r, "grad", GSPEC, "--tensors", "g_w.safetensors", "--prefix", "l0.", "--dout", "g_w.safetensors", "--out",
      "g_bad.safetensors");
  EXPECT_FAIL(r, "no dout in the --dout file");
  EXPECT_HAS(r, r.err, "g_w.safetensors holds no tensor 'dout'", "names the file and the tensor");
  EXPECT_HAS(r, r.err, "shape (1, 3, 4)", "and the shape it must have");
  cli_free(&r);
  assert_false(file_exists("g_bad.safetensors"));
#undef GSPEC
}

/* run --seed: the same seed drops the same probabilities, another seed
 * others; grad --seed computes the gradient of that forward.  show --grad
 * and bench --grad on the same spec. */
static void test_cli_grad_seed_show_bench(void **state)
{
#define DSPEC "mha x=1,S,4 heads=1 qkv_bias=false dtype=f64 train dropout=0.5"
  static const char *const names[] = { "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "o_proj.bias", "x" };
  static double data[6][64], dout[64];
  attnc_tensor t[6], dt;
  const char *dname = "dout";
  cli_result r;
  double *a, *b, *c, *g;
  int i, j, same_ab = 1, same_ac = 1;
  (void)state;
  if (!have_backward()) skip();
  for (i = 0; i < 6; i++) {
    memset(&t[i], 0, sizeof t[i]);
    t[i].dtype = ATTNC_F64;
    t[i].rank = i == 4 ? 1 : 2;
    t[i].shape[0] = 4;
    t[i].shape[1] = 4;
    if (i == 5) { t[i].rank = 3; t[i].shape[0] = 1; t[i].shape[1] = 16; t[i].shape[2] = 4; }
    for (j = 0; j < 64; j++) data[i][j] = sin(2.3 * (i * 64 + j));
    t[i].data = data[i];
  }
  for (j = 0; j < 64; j++) dout[j] = 1;
  dt = t[5];
  dt.data = dout;
  st_write64("d_w.safetensors", 6, names, t);
  st_write64("d_dout.safetensors", 1, &dname, &dt);
  CLI(r, "run", DSPEC, "--tensors", "d_w.safetensors", "--out", "d_a.safetensors", "--seed", "7");
  EXPECT_EXIT0(r, "run --seed 7");
  cli_free(&r);
  CLI(r, "run", DSPEC, "--tensors", "d_w.safetensors", "--out", "d_b.safetensors", "--seed", "7", "--threads", "1");
  EXPECT_EXIT0(r, "run --seed 7 again");
  cli_free(&r);
  CLI(r, "run", DSPEC, "--tensors", "d_w.safetensors", "--out", "d_c.safetensors", "--seed", "8");
  EXPECT_EXIT0(r, "run --seed 8");
  cli_free(&r);
  a = st_read64("d_a.safetensors", "out", NULL);
  b = st_read64("d_b.safetensors", "out", NULL);
  c = st_read64("d_c.safetensors", "out", NULL);
  for (j = 0; j < 64; j++) {
    same_ab &= a[j] == b[j];
    same_ac &= a[j] == c[j];
  }
  assert_true(same_ab);  /* one seed, one result, whatever the threads */
  assert_false(same_ac); /* another seed drops other probabilities */
  CLI(r, "grad", DSPEC, "--tensors", "d_w.safetensors", "--dout", "d_dout.safetensors", "--out", "d_g.safetensors", "--seed", "7");
  EXPECT_EXIT0(r, "grad --seed 7");
  cli_free(&r);
  /* one thread or two: the same bits, gradients included */
  CLI(r, "grad", DSPEC, "--tensors", "d_w.safetensors", "--dout", "d_dout.safetensors", "--out", "d_g1.safetensors", "--seed",
      "7", "--threads", "1", "--quiet");
  EXPECT_EXIT0(r, "grad --threads 1");
  cli_free(&r);
  CLI(r, "grad", DSPEC, "--tensors", "d_w.safetensors", "--dout", "d_dout.safetensors", "--out", "d_g2.safetensors", "--seed",
      "7", "--threads", "2", "--quiet");
  EXPECT_EXIT0(r, "grad --threads 2");
  cli_free(&r);
  for (i = 0; i < 6; i++) {
    char gname[64];
    double *g1, *g2;
    snprintf(gname, sizeof gname, "grad.%s", names[i]);
    g1 = st_read64("d_g1.safetensors", gname, NULL);
    g2 = st_read64("d_g2.safetensors", gname, NULL);
    assert_memory_equal(g1, g2, sizeof(double) * (i == 4 ? 4 : i == 5 ? 64 : 16));
    free(g1);
    free(g2);
  }
  g = st_read64("d_g.safetensors", "out", NULL);
  /* the forward it differentiated is run --seed 7's (another code path,
   * so equal to rounding, where another mask would differ by far more) */
  for (j = 0; j < 64; j++) assert_true(fabs(g[j] - a[j]) <= 1e-12 * (1 + fabs(a[j])));
  free(g);
  free(a);
  free(b);
  free(c);

  CLI(r, "show", "--grad", "mha x=1,S,4 heads=1 qkv_bias=false dtype=f64 dropout=0.5 train");
  EXPECT_EXIT0(r, "show --grad");
  EXPECT_HAS(r, r.out, "_backward(const attnc_args *args)", "the backward is in the source");
  cli_free(&r);
  CLI(r, "show", "--plain", "--grad", "mha x=1,S,4 heads=1");
  EXPECT_EXIT0(r, "show --plain --grad");
  EXPECT_HAS(r, r.out, "train=true", "train was added");
  EXPECT_HAS(r, r.out, "_backward(const attnc_args *args)", "the plain form has the backward too");
  cli_free(&r);
  CLI(r, "bench", "--grad", "mha x=1,S,16 heads=2", "--dim", "S=32", "--runs", "3", "--warmup-ms", "0", "--json");
  EXPECT_EXIT0(r, "bench --grad --json");
  EXPECT_HAS(r, r.out, "\"median_ms\": ", "the pair");
  EXPECT_HAS(r, r.out, "\"forward_ms\": ", "the forward");
  EXPECT_HAS(r, r.out, "\"backward_ms\": ", "the backward");
  EXPECT_HAS(r, r.out, "\"grad_bytes\": ", "the gradients' bytes");
  EXPECT_HAS(r, r.out, "\"grad_scratch_bytes\": ", "the backward's scratch");
  EXPECT_HAS(r, r.out, "train=true", "train was added");
  {
    const char *gb = strstr(r.out, "\"grad_bytes\": ");
    /* x (1, 32, 16), the four weights (16, 16) and their biases (16), in f32 */
    assert_non_null(gb);
    assert_true(atol(gb + 14) >= (long)(4 * (32 * 16 + 4 * 256 + 4 * 16)));
    /* what the backward allocates: explain's figure, NAME_backward_bytes */
    gb = strstr(r.out, "\"grad_scratch_bytes\": ");
    assert_non_null(gb);
    assert_true(atol(gb + 22) > 0);
  }
  EXPECT_HAS(r, r.out, "\"forward_gflops\": ", "the forward's rate");
  cli_free(&r);
  CLI(r, "bench", "--grad", "mha x=1,S,16 heads=2", "--dim", "S=32", "--runs", "3", "--warmup-ms", "0");
  EXPECT_EXIT0(r, "bench --grad");
  EXPECT_HAS(r, r.out, "forward and backward: median ", "the text names the pair");
  cli_free(&r);
#undef DSPEC
}


int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cli_help_every_command),
    cmocka_unit_test(test_cli_help_top_level),
    cmocka_unit_test(test_cli_unknown_command),
    cmocka_unit_test(test_cli_unknown_option),
    cmocka_unit_test(test_cli_no_arguments),
    cmocka_unit_test(test_cli_version),
    cmocka_unit_test(test_cli_bad_numbers),
    cmocka_unit_test(test_cli_spec_error_position),
    cmocka_unit_test(test_cli_spec_errors_have_position),
    cmocka_unit_test(test_cli_spec_file_error_uses_path),
    cmocka_unit_test(test_cli_spec_file_missing),
    cmocka_unit_test(test_cli_spec_file_equals_string),
    cmocka_unit_test(test_cli_spec_file_is_directory),
    cmocka_unit_test(test_cli_show),
    cmocka_unit_test(test_cli_run_bf16_checkpoint),
    cmocka_unit_test(test_cli_quantize),
    cmocka_unit_test(test_cli_run_int8_and_bf16),
    cmocka_unit_test(test_cli_guard_rails),
    cmocka_unit_test(test_cli_run_cache_errors),
    cmocka_unit_test(test_cli_run_cache_round_trip),
    cmocka_unit_test(test_cli_bench_cache),
    cmocka_unit_test(test_cli_grad_usage_and_errors),
    cmocka_unit_test(test_cli_grad_finite_differences),
    cmocka_unit_test(test_cli_grad_seed_show_bench),
    cmocka_unit_test(test_cli_cache),
    cmocka_unit_test(test_cli_make_examples),
    cmocka_unit_test(test_cli_gen_name),
    cmocka_unit_test(test_cli_show_plain),
    cmocka_unit_test(test_cli_plain_gen_run_check),
    cmocka_unit_test(test_cli_show_bytecode_equals_text),
    cmocka_unit_test(test_cli_show_diff),
    cmocka_unit_test(test_cli_run_save_attn),
    cmocka_unit_test(test_cli_heatmap_masked),
    cmocka_unit_test(test_cli_heatmap_batch),
    cmocka_unit_test(test_cli_heatmap_bad_batch),
    cmocka_unit_test(test_cli_show_header),
    cmocka_unit_test(test_cli_explain),
    cmocka_unit_test(test_cli_explain_dims),
    cmocka_unit_test(test_cli_explain_unmasked),
    cmocka_unit_test(test_cli_explain_positions),
    cmocka_unit_test(test_cli_explain_bad_dim),
    cmocka_unit_test(test_cli_check_tcc),
    cmocka_unit_test(test_cli_check_cc),
    cmocka_unit_test(test_cli_check_dims),
    cmocka_unit_test(test_cli_check_f64),
    cmocka_unit_test(test_cli_check_bad_backend),
    cmocka_unit_test(test_cli_check_silent_compiler),
    cmocka_unit_test(test_cli_gen),
    cmocka_unit_test(test_cli_gen_derived_name),
    cmocka_unit_test(test_cli_gen_needs_dir),
    cmocka_unit_test(test_cli_run_alphafold_names),
    cmocka_unit_test(test_cli_run_hf_names),
    cmocka_unit_test(test_cli_run_torch_names),
    cmocka_unit_test(test_cli_run_prefix),
    cmocka_unit_test(test_cli_run_prefix_torch),
    cmocka_unit_test(test_cli_run_named_dims),
    cmocka_unit_test(test_cli_run_causal_mean),
    cmocka_unit_test(test_cli_run_ignores_unused),
    cmocka_unit_test(test_cli_run_mask),
    cmocka_unit_test(test_cli_run_gqa_torch),
    cmocka_unit_test(test_cli_run_cross),
    cmocka_unit_test(test_cli_run_missing_weight),
    cmocka_unit_test(test_cli_run_missing_input),
    cmocka_unit_test(test_cli_run_wrong_shape),
    cmocka_unit_test(test_cli_run_needs_out_and_tensors),
    cmocka_unit_test(test_cli_bench_json),
    cmocka_unit_test(test_cli_bench_json_cc),
    cmocka_unit_test(test_cli_bench_warmup),
    cmocka_unit_test(test_cli_bench_busy_cpus),
    cmocka_unit_test(test_cli_bench_text),
  };
  /* ATTNC_TEST_FILTER=test_cli_grad* runs only the tests it matches */
  if (getenv("ATTNC_TEST_FILTER")) cmocka_set_test_filter(getenv("ATTNC_TEST_FILTER"));
  return cmocka_run_group_tests_name("cli", tests, setup, teardown);
}
