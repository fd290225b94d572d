/* The cc backend: the system C compiler builds a shared object that is
 * cached on disk under a key of the generated source + compiler + flags +
 * CPU, written atomically (temp dir + rename) and checked when loaded.
 * Its cache helpers (attnc_cc_*) serve the spec index too (cc_index.c). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "internal.h"

uint64_t attnc_cc_fnv64(uint64_t h, const char *s)
{
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

uint64_t attnc_cc_fnv64_bytes(uint64_t h, const unsigned char *p, size_t n)
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
uint64_t attnc_cc_cpu_key(uint64_t h)
{
  static const unsigned leaves[][2] = { { 0, 0 }, { 1, 0 }, { 7, 0 }, { 7, 1 }, { 0xd, 1 },
                                        { 0x80000001, 0 }, { 0x80000002, 0 }, { 0x80000003, 0 }, { 0x80000004, 0 } };
  unsigned r[4], max = __get_cpuid_max(0, NULL), maxe = __get_cpuid_max(0x80000000, NULL);
  size_t i;
  h = attnc_cc_fnv64(h, "cpuid");
  for (i = 0; i < sizeof leaves / sizeof leaves[0]; i++) {
    unsigned leaf = leaves[i][0];
    if (leaf < 0x80000000 ? leaf > max : leaf > maxe) continue;
    __cpuid_count(leaf, leaves[i][1], r[0], r[1], r[2], r[3]);
    if (leaf == 1) r[1] &= 0x0000ffffu; /* drop the APIC id: it differs between cores */
    h = attnc_cc_fnv64_bytes(h, (const unsigned char *)r, sizeof r);
    if (leaf == 1 && (r[2] & (1u << 27))) { /* OSXSAVE: the register state the OS saves */
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      r[0] = lo;
      r[1] = hi;
      h = attnc_cc_fnv64_bytes(h, (const unsigned char *)r, 2 * sizeof r[0]);
    }
  }
  return h;
}
#else
uint64_t attnc_cc_cpu_key(uint64_t h)
{
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  if (!f) return attnc_cc_fnv64(h, "no-cpuinfo");
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "flags", 5) == 0 || strncmp(line, "model name", 10) == 0) h = attnc_cc_fnv64(h, line);
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
int attnc_cc_cache_dir(char *out, size_t n)
{
  const char *d = getenv("ATTNC_CACHE_DIR");
  if (d && *d) return snprintf(out, n, "%s", d) < (int)n ? 0 : -1;
  d = getenv("XDG_CACHE_HOME");
  if (d && *d) return snprintf(out, n, "%s/attnc", d) < (int)n ? 0 : -1;
  d = getenv("HOME");
  if (d && *d) return snprintf(out, n, "%s/.cache/attnc", d) < (int)n ? 0 : -1;
  return snprintf(out, n, "/tmp/attnc-cache-%ld", (long)getuid()) < (int)n ? 0 : -1;
}

const char *attnc_cc_compiler(void)
{
  const char *cc = getenv("ATTNC_CC");
  return (cc && *cc) ? cc : "cc";
}

const char attnc_cc_flags[] = "-std=c99 -O3 -march=native -fPIC -shared";

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
unsigned char *attnc_cc_read_checked(const char *path, size_t *n_out)
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
    h = attnc_cc_fnv64_bytes(0xcbf29ce484222325ULL, buf, (size_t)n - TRAILER_SIZE);
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
  unsigned char *buf = attnc_cc_read_checked(path, &n);
  int ok = buf && n >= 64;
  free(buf);
  return ok;
}

/* Append the trailer to a freshly built object. */
int attnc_cc_add_trailer(const char *path)
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
    h = attnc_cc_fnv64_bytes(0xcbf29ce484222325ULL, buf, (size_t)n);
    memcpy(t, TRAILER_MAGIC, 8);
    for (i = 0; i < 8; i++) t[8 + i] = (unsigned char)(h >> (8 * i));
    ok = fseek(f, 0, SEEK_END) == 0 && fwrite(t, 1, TRAILER_SIZE, f) == TRAILER_SIZE;
  }
  free(buf);
  ok = (fclose(f) == 0) && ok;
  return ok ? 0 : -1;
}

static void *dl_get(void *h, const char *name) { return dlsym(h, name); }

/* Load a cached shared object and check it is the kernel we asked for. */
void *attnc_cc_load_checked(const char *path, const attnc_gen *g, attnc_kernel_fns *fns)
{
  char sym[160];
  const char *spec;
  void *h;
  if (!trailer_ok(path)) return NULL;
  h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return NULL;
  snprintf(sym, sizeof sym, "%s_spec", g->name);
  spec = dlsym(h, sym);
  if (!spec || !attnc_jit_find_fns(g, dl_get, h, fns) || strcmp(spec, g->canonical) != 0) {
    dlclose(h);
    return NULL;
  }
  return h;
}

/* ATTNC_CC_FLAGS: extra compiler flags, split on blanks (part of the cache key). */
const char *attnc_cc_extra_flags(void)
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
  /* attnc_cc_flags (also in the cache key) then ATTNC_CC_FLAGS, split on blanks */
  snprintf(extra, sizeof extra, "%s %s", attnc_cc_flags, attnc_cc_extra_flags());
  argv[argc++] = (char *)attnc_cc_compiler();
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
    snprintf(log, nlog, "could not run the C compiler '%s' (set ATTNC_CC, or install gcc)", attnc_cc_compiler());
  else if (!log[0] && WIFEXITED(status) && WEXITSTATUS(status) != 0)
    snprintf(log, nlog, "'%s' exited with status %d and printed nothing", attnc_cc_compiler(), WEXITSTATUS(status));
  else if (!log[0] && WIFSIGNALED(status))
    snprintf(log, nlog, "'%s' was killed by signal %d", attnc_cc_compiler(), WTERMSIG(status));
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

attnc_status attnc_jit_cc(const char *spec, const attnc_gen *g, void **handle, attnc_kernel_fns *fn, attnc_error *err)
{
  char dir[4000], final[4200], tmp[4200], path[4200], log[2048];
  uint64_t key = 0xcbf29ce484222325ULL;
  void *h;
  if (attnc_cc_cache_dir(dir, 3000) != 0) return attnc_err_set(err, ATTNC_EIO, "cache directory path is too long");
  key = attnc_cc_fnv64(key, g->header);
  key = attnc_cc_fnv64(key, g->source);
  key = attnc_cc_fnv64(key, attnc_cc_compiler());
  key = attnc_cc_fnv64(key, attnc_cc_flags);
  key = attnc_cc_fnv64(key, attnc_cc_extra_flags());
  key = attnc_cc_cpu_key(key);
  snprintf(final, sizeof final, "%s/%s-%016llx.so", dir, g->name, (unsigned long long)key);
  h = attnc_cc_load_checked(final, g, fn);
  if (h) {
    attnc_cc_index_write(spec, final, g);
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
  if (attnc_cc_add_trailer(path) != 0) goto io;
  if (rename(path, final) != 0) goto io;
  remove_dir(tmp, g->name);
  h = attnc_cc_load_checked(final, g, fn);
  if (!h) return attnc_err_set(err, ATTNC_ECOMPILE, "cannot load the compiled kernel %s: %s", final, dlerror());
  attnc_cc_index_write(spec, final, g);
  *handle = h;
  return ATTNC_OK;
io:
  {
    int e = errno;
    remove_dir(tmp, g->name);
    return attnc_err_set(err, ATTNC_EIO, "cannot write to the kernel cache %s: %s", dir, strerror(e));
  }
}

void attnc_jit_cc_free(void *handle)
{
  if (handle) dlclose(handle);
}
