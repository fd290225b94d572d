/* Backends that turn generated C into a callable kernel.
 *
 * tcc: libtcc compiles in memory.  libtcc keeps global state, so every
 *      compile holds tcc_lock.  The kernel is compiled with -nostdlib and
 *      the few C library symbols it uses are handed over explicitly, so no
 *      header or libtcc1.a has to exist on the machine.
 * cc:  the system C compiler builds a shared object that is cached on disk
 *      under a key of the generated source + compiler + flags + CPU, written
 *      atomically (temp dir + rename) and checked when loaded. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <libtcc.h>

#include "internal.h"

static pthread_mutex_t tcc_lock = PTHREAD_MUTEX_INITIALIZER;

struct tcc_errors {
  char text[1024];
  size_t len;
};

static void tcc_on_error(void *opaque, const char *msg)
{
  struct tcc_errors *e = opaque;
  size_t room = sizeof e->text - e->len;
  int n;
  if (room <= 1) return;
  n = snprintf(e->text + e->len, room, "%s%s", e->len ? "; " : "", msg);
  if (n > 0) e->len += ((size_t)n < room) ? (size_t)n : room - 1;
}

static char *concat3(const char *a, const char *b, const char *c)
{
  size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
  char *s = malloc(la + lb + lc + 1);
  if (!s) return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb);
  memcpy(s + la + lb, c, lc + 1);
  return s;
}

/* Remove C comments from text in place, keeping newlines (so line numbers
 * in libtcc's messages still match the generated source) and string and
 * character literals.  The generated code explains itself in comments; a
 * cold libtcc spends about a third of its compile time skipping them. */
static void strip_comments(char *text)
{
  char *r = text, *w = text;
  while (*r) {
    if (r[0] == '/' && r[1] == '*') {
      r += 2;
      while (*r && !(r[0] == '*' && r[1] == '/')) {
        if (*r == '\n') *w++ = '\n';
        r++;
      }
      if (*r) r += 2;
      *w++ = ' ';
    } else if (r[0] == '/' && r[1] == '/') {
      while (*r && *r != '\n') r++;
    } else if (*r == '"' || *r == '\'') {
      const char q = *r;
      *w++ = *r++;
      while (*r && *r != q && *r != '\n') {
        if (*r == '\\' && r[1]) *w++ = *r++;
        *w++ = *r++;
      }
      if (*r == q) *w++ = *r++;
    } else {
      *w++ = *r++;
    }
  }
  *w = '\0';
}

/* Look up the kernel's four entry points (the plain form's one) with get(handle, symbol). */
static int find_fns(const attnc_gen *g, void *(*get)(void *, const char *), void *h, attnc_kernel_fns *fns)
{
  char sym[160];
  snprintf(sym, sizeof sym, "%s_run", g->name);
  *(void **)&fns->run = get(h, sym);
  if (g->plain) return fns->run != NULL; /* the plain form has no phases */
  snprintf(sym, sizeof sym, "%s_scratch_bytes", g->name);
  *(void **)&fns->scratch_bytes = get(h, sym);
  snprintf(sym, sizeof sym, "%s_phase_items", g->name);
  *(void **)&fns->phase_items = get(h, sym);
  snprintf(sym, sizeof sym, "%s_phase", g->name);
  *(void **)&fns->phase = get(h, sym);
  return fns->run && fns->scratch_bytes && fns->phase_items && fns->phase;
}

static void *tcc_get(void *h, const char *name) { return tcc_get_symbol((TCCState *)h, name); }
static void *dl_get(void *h, const char *name) { return dlsym(h, name); }

attnc_status attnc_jit_tcc(const attnc_gen *g, void **state, attnc_kernel_fns *fns, attnc_error *err)
{
  struct tcc_errors errors = { { 0 }, 0 };
  TCCState *s;
  char *text = concat3("#define ATTNC_JIT 1\n", g->header, g->source);
  if (!text) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
  strip_comments(text);
  pthread_mutex_lock(&tcc_lock);
  s = tcc_new();
  if (!s) {
    pthread_mutex_unlock(&tcc_lock);
    free(text);
    return attnc_err_set(err, ATTNC_ENOMEM, "tcc_new failed");
  }
  tcc_set_error_func(s, &errors, tcc_on_error);
  tcc_set_options(s, "-nostdlib");
  tcc_set_output_type(s, TCC_OUTPUT_MEMORY);
  if (tcc_compile_string(s, text) < 0) goto fail;
  tcc_add_symbol(s, "malloc", (const void *)malloc);
  tcc_add_symbol(s, "free", (const void *)free);
  tcc_add_symbol(s, "exp", (const void *)exp);
  tcc_add_symbol(s, "expf", (const void *)expf);
  tcc_add_symbol(s, "memset", (const void *)memset);
  tcc_add_symbol(s, "memcpy", (const void *)memcpy);
  tcc_add_symbol(s, "memmove", (const void *)memmove);
  if (tcc_relocate(s, TCC_RELOCATE_AUTO) < 0) goto fail;
  if (!find_fns(g, tcc_get, s, fns)) {
    tcc_on_error(&errors, "kernel symbols not found");
    goto fail;
  }
  pthread_mutex_unlock(&tcc_lock);
  free(text);
  *state = s;
  return ATTNC_OK;
fail:
  tcc_delete(s);
  pthread_mutex_unlock(&tcc_lock);
  free(text);
  return attnc_err_set(err, ATTNC_ECOMPILE, "libtcc rejected the generated code (a generator bug; please report): %s",
                       errors.len ? errors.text : "no message");
}

void attnc_jit_tcc_free(void *state)
{
  if (!state) return;
  pthread_mutex_lock(&tcc_lock);
  tcc_delete((TCCState *)state);
  pthread_mutex_unlock(&tcc_lock);
}

/* ---- cc ---- */

static uint64_t fnv64(uint64_t h, const char *s)
{
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

static uint64_t fnv64_bytes(uint64_t h, const unsigned char *p, size_t n)
{
  size_t i;
  for (i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

/* The CPU's identity and features: the cache key must change with the
 * machine, because the shared object is built with -march=native.  On
 * x86 this is what -march=native itself reads: CPUID (vendor, family and
 * model, the feature leaves, the brand string) and the OS-enabled register
 * state (XCR0).  It costs microseconds, where /proc/cpuinfo costs a
 * fraction of a millisecond on a cold start. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static uint64_t cpu_key(uint64_t h)
{
  static const unsigned leaves[][2] = { { 0, 0 }, { 1, 0 }, { 7, 0 }, { 7, 1 }, { 0xd, 1 },
                                        { 0x80000001, 0 }, { 0x80000002, 0 }, { 0x80000003, 0 }, { 0x80000004, 0 } };
  unsigned r[4], max = __get_cpuid_max(0, NULL), maxe = __get_cpuid_max(0x80000000, NULL);
  size_t i;
  h = fnv64(h, "cpuid");
  for (i = 0; i < sizeof leaves / sizeof leaves[0]; i++) {
    unsigned leaf = leaves[i][0];
    if (leaf < 0x80000000 ? leaf > max : leaf > maxe) continue;
    __cpuid_count(leaf, leaves[i][1], r[0], r[1], r[2], r[3]);
    if (leaf == 1) r[1] &= 0x0000ffffu; /* drop the APIC id: it differs between cores */
    h = fnv64_bytes(h, (const unsigned char *)r, sizeof r);
    if (leaf == 1 && (r[2] & (1u << 27))) { /* OSXSAVE: the register state the OS saves */
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      r[0] = lo;
      r[1] = hi;
      h = fnv64_bytes(h, (const unsigned char *)r, 2 * sizeof r[0]);
    }
  }
  return h;
}
#else
static uint64_t cpu_key(uint64_t h)
{
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  if (!f) return fnv64(h, "no-cpuinfo");
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "flags", 5) == 0 || strncmp(line, "model name", 10) == 0) h = fnv64(h, line);
    if (strncmp(line, "flags", 5) == 0) break;
  }
  fclose(f);
  return h;
}
#endif

static int mkdir_p(const char *path)
{
  char tmp[4096];
  size_t i, n = strlen(path);
  if (n >= sizeof tmp) return -1;
  memcpy(tmp, path, n + 1);
  for (i = 1; i <= n; i++) {
    if (tmp[i] == '/' || tmp[i] == '\0') {
      char c = tmp[i];
      tmp[i] = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
      tmp[i] = c;
    }
  }
  return 0;
}

/* $ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else ~/.cache/attnc. */
static int cache_dir(char *out, size_t n)
{
  const char *d = getenv("ATTNC_CACHE_DIR");
  if (d && *d) return snprintf(out, n, "%s", d) < (int)n ? 0 : -1;
  d = getenv("XDG_CACHE_HOME");
  if (d && *d) return snprintf(out, n, "%s/attnc", d) < (int)n ? 0 : -1;
  d = getenv("HOME");
  if (d && *d) return snprintf(out, n, "%s/.cache/attnc", d) < (int)n ? 0 : -1;
  return snprintf(out, n, "/tmp/attnc-cache-%ld", (long)getuid()) < (int)n ? 0 : -1;
}

static const char *compiler(void)
{
  const char *cc = getenv("ATTNC_CC");
  return (cc && *cc) ? cc : "cc";
}

#define CC_FLAGS "-std=c99 -O3 -march=native -fPIC -shared"

static int write_file(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  size_t n = strlen(text);
  int ok;
  if (!f) return -1;
  ok = fwrite(text, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  return ok ? 0 : -1;
}

/* Every cached object ends with a trailer: the magic and the FNV-1a hash
 * of every byte before it.  The dynamic loader ignores bytes past the ELF
 * contents, and an object that is truncated, overwritten or bit-flipped
 * fails the check before dlopen ever maps it (a truncated object would
 * otherwise die of SIGBUS, flipped code of anything). */
#define TRAILER_MAGIC "ATTNCSO1"
#define TRAILER_SIZE 16
#define MAX_OBJECT ((long)256 << 20)

/* The contents of path without its trailer (*n bytes, NUL-terminated;
 * caller frees), or NULL if the trailer is missing or does not match. */
static unsigned char *read_checked(const char *path, size_t *n_out)
{
  FILE *f = fopen(path, "rb");
  unsigned char *buf;
  long n;
  uint64_t h, want = 0;
  int i, ok;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < TRAILER_SIZE || n > MAX_OBJECT || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return NULL;
  }
  buf = malloc((size_t)n + 1);
  ok = buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
  fclose(f);
  if (ok) ok = memcmp(buf + n - TRAILER_SIZE, TRAILER_MAGIC, 8) == 0;
  if (ok) {
    h = fnv64_bytes(0xcbf29ce484222325ULL, buf, (size_t)n - TRAILER_SIZE);
    for (i = 7; i >= 0; i--) want = (want << 8) | buf[n - 8 + i];
    ok = h == want;
  }
  if (!ok) { free(buf); return NULL; }
  buf[n - TRAILER_SIZE] = 0;
  *n_out = (size_t)n - TRAILER_SIZE;
  return buf;
}

/* 1 if the file at path ends with a trailer that matches its contents
 * (and is long enough to be an object). */
static int trailer_ok(const char *path)
{
  size_t n;
  unsigned char *buf = read_checked(path, &n);
  int ok = buf && n >= 64;
  free(buf);
  return ok;
}

/* Append the trailer to a freshly built object. */
static int add_trailer(const char *path)
{
  FILE *f = fopen(path, "r+b");
  unsigned char *buf, t[TRAILER_SIZE];
  long n;
  uint64_t h;
  int i, ok;
  if (!f) return -1;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 || n > MAX_OBJECT || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return -1;
  }
  buf = malloc((size_t)n);
  ok = buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
  if (ok) {
    h = fnv64_bytes(0xcbf29ce484222325ULL, buf, (size_t)n);
    memcpy(t, TRAILER_MAGIC, 8);
    for (i = 0; i < 8; i++) t[8 + i] = (unsigned char)(h >> (8 * i));
    ok = fseek(f, 0, SEEK_END) == 0 && fwrite(t, 1, TRAILER_SIZE, f) == TRAILER_SIZE;
  }
  free(buf);
  ok = (fclose(f) == 0) && ok;
  return ok ? 0 : -1;
}

/* Load a cached shared object and check it is the kernel we asked for. */
static void *load_checked(const char *path, const attnc_gen *g, attnc_kernel_fns *fns)
{
  char sym[160];
  const char *spec;
  void *h;
  if (!trailer_ok(path)) return NULL;
  h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return NULL;
  snprintf(sym, sizeof sym, "%s_spec", g->name);
  spec = dlsym(h, sym);
  if (!spec || !find_fns(g, dl_get, h, fns) || strcmp(spec, g->canonical) != 0) {
    dlclose(h);
    return NULL;
  }
  return h;
}

/* ATTNC_CC_FLAGS: extra compiler flags, split on blanks (part of the cache key). */
static const char *extra_flags(void)
{
  const char *f = getenv("ATTNC_CC_FLAGS");
  return f ? f : "";
}

static int run_compiler(const char *dir, const char *name, char *log, size_t nlog)
{
  char src[4200], so[4200], logpath[4200], extra[1024];
  char *argv[64];
  int argc = 0, status, fd;
  pid_t pid;
  snprintf(src, sizeof src, "%s/%s.c", dir, name);
  snprintf(so, sizeof so, "%s/%s.so", dir, name);
  snprintf(logpath, sizeof logpath, "%s/cc.log", dir);
  /* CC_FLAGS (also in the cache key) then ATTNC_CC_FLAGS, split on blanks */
  snprintf(extra, sizeof extra, "%s %s", CC_FLAGS, extra_flags());
  argv[argc++] = (char *)compiler();
  {
    char *save = NULL, *tok = strtok_r(extra, " \t", &save);
    while (tok && argc < 50) {
      argv[argc++] = tok;
      tok = strtok_r(NULL, " \t", &save);
    }
  }
  argv[argc++] = "-I";
  argv[argc++] = (char *)dir;
  argv[argc++] = "-o";
  argv[argc++] = so;
  argv[argc++] = src;
  argv[argc++] = "-lm";
  argv[argc] = NULL;
  pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
    execvp(argv[0], argv);
    _exit(127);
  }
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  log[0] = '\0';
  {
    FILE *f = fopen(logpath, "r");
    if (f) {
      size_t n = fread(log, 1, nlog - 1, f);
      log[n] = '\0';
      fclose(f);
    }
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !log[0])
    snprintf(log, nlog, "could not run the C compiler '%s' (set ATTNC_CC, or install gcc)", compiler());
  else if (!log[0] && WIFEXITED(status) && WEXITSTATUS(status) != 0)
    snprintf(log, nlog, "'%s' exited with status %d and printed nothing", compiler(), WEXITSTATUS(status));
  else if (!log[0] && WIFSIGNALED(status))
    snprintf(log, nlog, "'%s' was killed by signal %d", compiler(), WTERMSIG(status));
  return (WIFEXITED(status) && WEXITSTATUS(status) == 0) ? 0 : -1;
}

static void remove_dir(const char *dir, const char *name)
{
  char p[4200];
  const char *ext[] = { ".c", ".h", ".so" };
  int i;
  for (i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s%s", dir, name, ext[i]);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/cc.log", dir);
  unlink(p);
  rmdir(dir);
}

static void write_index(const char *spec, const char *object, const attnc_gen *g);

attnc_status attnc_jit_cc(const char *spec, const attnc_gen *g, void **handle, attnc_kernel_fns *fn, attnc_error *err)
{
  char dir[4000], final[4200], tmp[4200], path[4200], log[2048];
  uint64_t key = 0xcbf29ce484222325ULL;
  void *h;
  if (cache_dir(dir, 3000) != 0) return attnc_err_set(err, ATTNC_EIO, "cache directory path is too long");
  key = fnv64(key, g->header);
  key = fnv64(key, g->source);
  key = fnv64(key, compiler());
  key = fnv64(key, CC_FLAGS);
  key = fnv64(key, extra_flags());
  key = cpu_key(key);
  snprintf(final, sizeof final, "%s/%s-%016llx.so", dir, g->name, (unsigned long long)key);
  h = load_checked(final, g, fn);
  if (h) {
    write_index(spec, final, g);
    *handle = h;
    return ATTNC_OK;
  }
  /* missing, truncated or foreign: rebuild */
  if (mkdir_p(dir) != 0)
    return attnc_err_set(err, ATTNC_EIO, "cannot create the kernel cache %s: %s (set ATTNC_CACHE_DIR)", dir, strerror(errno));
  snprintf(tmp, sizeof tmp, "%s/build-XXXXXX", dir);
  if (!mkdtemp(tmp)) return attnc_err_set(err, ATTNC_EIO, "cannot create a build folder in %s: %s", dir, strerror(errno));
  snprintf(path, sizeof path, "%s/%s.h", tmp, g->name);
  if (write_file(path, g->header) != 0) goto io;
  snprintf(path, sizeof path, "%s/%s.c", tmp, g->name);
  if (write_file(path, g->source) != 0) goto io;
  if (run_compiler(tmp, g->name, log, sizeof log) != 0) {
    remove_dir(tmp, g->name);
    return attnc_err_set(err, ATTNC_ECOMPILE, "the C compiler failed on the generated code: %s", log);
  }
  snprintf(path, sizeof path, "%s/%s.so", tmp, g->name);
  if (add_trailer(path) != 0) goto io;
  if (rename(path, final) != 0) goto io;
  remove_dir(tmp, g->name);
  h = load_checked(final, g, fn);
  if (!h) return attnc_err_set(err, ATTNC_ECOMPILE, "cannot load the compiled kernel %s: %s", final, dlerror());
  write_index(spec, final, g);
  *handle = h;
  return ATTNC_OK;
io:
  {
    int e = errno;
    remove_dir(tmp, g->name);
    return attnc_err_set(err, ATTNC_EIO, "cannot write to the kernel cache %s: %s", dir, strerror(e));
  }
}

/* ---- the spec index: a warm load without the generator ----
 *
 * A kernel's shared object is found by a key of its generated C, which
 * takes the Lua generator to produce (about 2 ms in a new process).  After
 * each cc compile or load we also write DIR/spec-KEY.idx, KEY a hash of
 * the spec text as given, the generator (attnc_generator_id, a hash of the
 * embedded gen/ and templates/), this library's attnc_gen layout, the
 * compiler, the flags and the CPU.  It holds the spec text (compared
 * exactly, so a hash collision is a miss), the object's file name and the
 * generator's result, and carries the same checked trailer as objects.
 * attnc_jit_cc_lookup() needs only that file and dlopen.  With
 * ATTNC_SRC_DIR set the index is neither read nor written. */

extern const char attnc_generator_id[];

#define INDEX_MAGIC "ATTNCIX2"

static int index_path(const char *spec, int plain, char *out, size_t n)
{
  char dir[4000];
  uint64_t key = 0xcbf29ce484222325ULL;
  const char *src = getenv("ATTNC_SRC_DIR");
  if (src && *src) return -1;
  if (cache_dir(dir, 3000) != 0) return -1;
  key = fnv64(key, INDEX_MAGIC);
  key = fnv64(key, ATTNC_VERSION);
  key = fnv64(key, spec);
  key = fnv64(key, plain ? "plain" : "fast");
  key = fnv64(key, attnc_generator_id);
  key = fnv64_bytes(key, (const unsigned char *)&(size_t){ sizeof(attnc_gen) }, sizeof(size_t));
  key = fnv64(key, compiler());
  key = fnv64(key, CC_FLAGS);
  key = fnv64(key, extra_flags());
  key = cpu_key(key);
  return snprintf(out, n, "%s/spec-%016llx.idx", dir, (unsigned long long)key) < (int)n ? 0 : -1;
}

/* Serialised: magic, u64 sizes, then the attnc_gen struct with its
 * pointers cleared, then spec, object path, canonical, name, source,
 * header and the dim names, each NUL-terminated. */
typedef struct { unsigned char *p; size_t n, cap; int bad; } wbuf;

static void wput(wbuf *b, const void *p, size_t n)
{
  if (b->bad) return;
  if (b->n + n > b->cap) {
    size_t cap = (b->n + n) * 2 + 4096;
    unsigned char *q = realloc(b->p, cap);
    if (!q) { b->bad = 1; return; }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
}

static void wstr(wbuf *b, const char *s) { wput(b, s, strlen(s) + 1); }

static void write_index(const char *spec, const char *object, const attnc_gen *g)
{
  char path[4200], tmp[4300];
  attnc_gen flat = *g;
  wbuf b = { NULL, 0, 0, 0 };
  uint64_t sz = sizeof flat;
  FILE *f;
  int i, ok;
  if (index_path(spec, g->plain, path, sizeof path) != 0) return;
  flat.canonical = flat.name = flat.source = flat.header = NULL;
  flat.dim_names = NULL;
  wput(&b, INDEX_MAGIC, 8);
  wput(&b, &sz, sizeof sz);
  wput(&b, &flat, sizeof flat);
  wstr(&b, spec);
  wstr(&b, object);
  wstr(&b, g->canonical);
  wstr(&b, g->name);
  wstr(&b, g->source);
  wstr(&b, g->header);
  for (i = 0; i < g->ndims; i++) wstr(&b, g->dim_names[i]);
  if (b.bad) { free(b.p); return; }
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  f = fopen(tmp, "wb");
  if (!f) { free(b.p); return; }
  ok = fwrite(b.p, 1, b.n, f) == b.n;
  ok = (fclose(f) == 0) && ok;
  free(b.p);
  /* a failure only costs the next process a generator run */
  if (!ok || add_trailer(tmp) != 0 || rename(tmp, path) != 0) unlink(tmp);
}

/* Next NUL-terminated string of [*p, end), or NULL. */
static const char *rstr(const unsigned char **p, const unsigned char *end)
{
  const unsigned char *s = *p, *z = memchr(s, 0, (size_t)(end - s));
  if (!z) return NULL;
  *p = z + 1;
  return (const char *)s;
}

static char *dup_str(const char *s)
{
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

int attnc_jit_cc_lookup(const char *spec, int plain, attnc_gen *g, void **handle, attnc_kernel_fns *fns)
{
  char path[4200];
  unsigned char *buf;
  const unsigned char *p, *end;
  const char *spec2, *object, *canon, *name, *source, *header;
  uint64_t sz;
  size_t n;
  int i;
  void *h;
  memset(g, 0, sizeof *g);
  if (index_path(spec, plain, path, sizeof path) != 0 || !(buf = read_checked(path, &n))) return 0;
  p = buf;
  end = buf + n;
  if (n < 16 + sizeof *g || memcmp(p, INDEX_MAGIC, 8) != 0) goto miss;
  memcpy(&sz, p + 8, sizeof sz);
  if (sz != sizeof *g) goto miss;
  memcpy(g, p + 16, sizeof *g);
  p += 16 + sizeof *g;
  spec2 = rstr(&p, end);
  object = rstr(&p, end);
  canon = rstr(&p, end);
  name = rstr(&p, end);
  source = rstr(&p, end);
  header = rstr(&p, end);
  if (!header || strcmp(spec2, spec) != 0 || g->plain != plain || g->ndims < 0 || g->ndims > 64) goto miss;
  g->canonical = dup_str(canon);
  g->name = dup_str(name);
  g->source = dup_str(source);
  g->header = dup_str(header);
  g->dim_names = calloc((size_t)g->ndims + 1, sizeof *g->dim_names);
  if (!g->canonical || !g->name || !g->source || !g->header || !g->dim_names) goto miss;
  for (i = 0; i < g->ndims; i++) {
    const char *d = rstr(&p, end);
    if (!d || !(g->dim_names[i] = dup_str(d))) goto miss;
  }
  h = load_checked(object, g, fns);
  if (!h) goto miss;
  free(buf);
  *handle = h;
  return 1;
miss:
  attnc_gen_free(g); /* dim_names is zeroed past what was read */
  free(buf);
  return 0;
}

void attnc_jit_cc_free(void *handle)
{
  if (handle) dlclose(handle);
}
