/* Concurrency and resource stress:
 *
 *   - 32 threads call attnc_compile at once, on equal and on different
 *     specs, with both backends: all succeed, equal specs share one kernel,
 *     and every kernel runs correctly;
 *   - 1000 compile / bind / run / release cycles leak nothing (malloc'd
 *     bytes stay flat; check-valgrind and check-asan add memcheck and
 *     LeakSanitizer);
 *   - one kernel run from several threads at once, each on its own
 *     bindings and buffers, gives bit-identical results to running alone;
 *   - processes compiling the same spec with the cc backend into one fresh
 *     disk cache all succeed and leave one entry; a truncated, emptied,
 *     overwritten or foreign cache entry is detected and rebuilt;
 *   - a pool worker, started on a CPU of its own, ends up allowed every CPU
 *     its creator is.
 *
 * ATTNC_TEST_FILTER=PATTERN runs only the matching tests, ATTNC_STRESS_CYCLES=N
 * sets the number of cycles (check-valgrind runs a shorter loop). */
#define _GNU_SOURCE /* pthread_getaffinity_np */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

static char g_dir[512];   /* work folder */
static char g_cache[600]; /* ATTNC_CACHE_DIR for this process */

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ */
/* A small self-attention problem: deterministic inputs for a kernel     */
/* of shape x=B,S,C (named dims B and S), weights shared read-only.      */

typedef struct work {
  attnc_bindings *b;
  float *x;
  unsigned char *mask;
  attnc_tensor out;
  size_t n_out;
  float *want;  /* the result computed alone */
} work;

static float weights[1 << 16];

static void fill(float *p, size_t n, uint64_t seed, float amp)
{
  size_t i;
  uint64_t s = (seed + 1) * 0x9E3779B97F4A7C15ULL;
  for (i = 0; i < n; i++) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    p[i] = amp * ((float)((s * 0x2545F4914F6CDD1DULL) >> 40) / 16777216.0f * 2.0f - 1.0f);
  }
}

/* Bind every tensor the kernel uses: inputs from seed, weights from the
 * shared table.  Returns 0, or fails the test. */
static void work_init(work *w, attnc_kernel *k, int64_t B, int64_t S, unsigned seed, int threads)
{
  static const char *const names[ATTNC_SLOT_COUNT] = { /* by slot, so that new slots cannot shift them */
    [ATTNC_SLOT_X] = "x", [ATTNC_SLOT_KV] = "kv", [ATTNC_SLOT_BIAS] = "bias", [ATTNC_SLOT_MASK] = "mask",
    [ATTNC_SLOT_Q] = "q", [ATTNC_SLOT_K] = "k", [ATTNC_SLOT_V] = "v",
    [ATTNC_SLOT_WQ] = "linear_q.weight", [ATTNC_SLOT_BQ] = "linear_q.bias", [ATTNC_SLOT_WK] = "linear_k.weight",
    [ATTNC_SLOT_BK] = "linear_k.bias", [ATTNC_SLOT_WV] = "linear_v.weight", [ATTNC_SLOT_BV] = "linear_v.bias",
    [ATTNC_SLOT_WG] = "linear_g.weight", [ATTNC_SLOT_BG] = "linear_g.bias", [ATTNC_SLOT_WO] = "linear_o.weight",
    [ATTNC_SLOT_BO] = "linear_o.bias",
  };
  const attnc_gen *g = attnc_kernel_gen(k);
  attnc_error e;
  int slot, a;
  memset(w, 0, sizeof *w);
  w->b = attnc_bindings_new(k);
  assert_non_null(w->b);
  assert_int_equal(attnc_bindings_set_threads(w->b, threads, &e), ATTNC_OK);
  for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++) {
    attnc_tensor t;
    const attnc_shape *sh = slot == ATTNC_SLOT_MASK ? &g->mask : &g->shape[slot];
    size_t n = 1;
    if (!g->used[slot]) continue;
    if (!names[slot]) fail_msg("the stress test binds no tensor for slot %s", attnc_slot_name(slot));
    memset(&t, 0, sizeof t);
    t.dtype = slot == ATTNC_SLOT_MASK ? ATTNC_U8 : ATTNC_F32;
    t.rank = sh->rank;
    for (a = 0; a < sh->rank; a++) {
      int64_t d = sh->dim[a];
      if (d < 0) d = strcmp(g->dim_names[-d - 1], "B") == 0 ? B : S;
      t.shape[a] = d;
      n *= (size_t)d;
    }
    if (slot == ATTNC_SLOT_X) {
      w->x = malloc(n * sizeof(float) + 1);
      assert_non_null(w->x);
      fill(w->x, n, seed, 1.0f);
      t.data = w->x;
    } else if (slot == ATTNC_SLOT_MASK) {
      size_t i;
      w->mask = malloc(n + 1);
      assert_non_null(w->mask);
      for (i = 0; i < n; i++) w->mask[i] = (unsigned char)((i * 7 + seed) % 5 != 0);
      t.data = w->mask;
    } else {
      assert_true(n <= sizeof weights / sizeof weights[0]);
      t.data = weights;
    }
    if (attnc_bind(w->b, names[slot], &t, &e) != ATTNC_OK) fail_msg("bind %s: %s", names[slot], e.message);
  }
  if (attnc_output_shape(w->b, &w->out, &e) != ATTNC_OK) fail_msg("output_shape: %s", e.message);
  w->n_out = 1;
  for (a = 0; a < w->out.rank; a++) w->n_out *= (size_t)w->out.shape[a];
  w->out.data = malloc(w->n_out * sizeof(float) + 1);
  assert_non_null(w->out.data);
}

static void work_free(work *w)
{
  attnc_bindings_free(w->b);
  free(w->x);
  free(w->mask);
  free(w->out.data);
  free(w->want);
  memset(w, 0, sizeof *w);
}

static attnc_status work_run(work *w, attnc_error *e)
{
  memset(w->out.data, 0xff, w->n_out * sizeof(float)); /* NaN: nothing stale survives */
  return attnc_run(w->b, &w->out, e);
}

/* ------------------------------------------------------------------ */
/* 32 threads compile at once                                           */

#define NTHREADS 32
#define NSPECS 6

static const char *const SPECS[NSPECS] = {
  "mha x=B,S,32 heads=4 causal name=stress_a",
  "gqa x=B,S,32 heads=4 kv_heads=2 mask=key name=stress_b",
  "alphafold x=B,S,32 heads=4 gated name=stress_c",
  "mqa x=B,S,32 heads=4 window=3,0 name=stress_d",
  "mha x=B,S,32 heads=2 causal name=stress_cc_a",  /* cc */
  "gqa x=B,S,32 heads=8 kv_heads=4 name=stress_cc_b", /* cc */
};

struct compile_job {
  pthread_barrier_t *start;
  int spec;
  attnc_kernel *k;
  attnc_error e;
};

static void *compile_job(void *arg)
{
  struct compile_job *j = arg;
  attnc_options o = { j->spec >= 4 ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC, 0, NULL, ATTNC_FORM_FAST };
  pthread_barrier_wait(j->start);
  j->k = attnc_compile(SPECS[j->spec], &o, &j->e);
  return NULL;
}

static void test_stress_compile_32_threads(void **state)
{
  pthread_t th[NTHREADS];
  struct compile_job jobs[NTHREADS];
  pthread_barrier_t start;
  attnc_kernel *first[NSPECS];
  double t0 = now_s();
  int i, s;
  (void)state;
  fill(weights, sizeof weights / sizeof weights[0], 99, 0.125f);
  assert_int_equal(pthread_barrier_init(&start, NULL, NTHREADS), 0);
  for (i = 0; i < NTHREADS; i++) {
    jobs[i].start = &start;
    jobs[i].spec = i % NSPECS;
    jobs[i].k = NULL;
    assert_int_equal(pthread_create(&th[i], NULL, compile_job, &jobs[i]), 0);
  }
  for (i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  for (s = 0; s < NSPECS; s++) first[s] = NULL;
  for (i = 0; i < NTHREADS; i++) {
    if (!jobs[i].k) fail_msg("thread %d (%s): %s", i, SPECS[jobs[i].spec], jobs[i].e.message);
    if (!first[jobs[i].spec]) first[jobs[i].spec] = jobs[i].k;
    if (jobs[i].k != first[jobs[i].spec]) fail_msg("thread %d: %s compiled to a second kernel", i, SPECS[jobs[i].spec]);
  }
  for (s = 0; s < NSPECS; s++) {
    int t;
    assert_int_equal(attnc_kernel_backend(first[s]), s >= 4 ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC);
    for (t = 0; t < s; t++) assert_ptr_not_equal(first[s], first[t]);
  }
  /* every kernel runs, and the same spec on the other backend agrees */
  for (s = 0; s < NSPECS; s++) {
    attnc_options other = { s >= 4 ? ATTNC_BACKEND_TCC : ATTNC_BACKEND_CC, 0, NULL, ATTNC_FORM_FAST };
    attnc_error e;
    attnc_kernel *k2 = s >= 4 ? attnc_compile(SPECS[s], &other, &e) : NULL;
    work a, b;
    size_t n;
    work_init(&a, first[s], 2, 19, 1, 1);
    if (work_run(&a, &e) != ATTNC_OK) fail_msg("%s: %s", SPECS[s], e.message);
    for (n = 0; n < a.n_out; n++) assert_true(isfinite(((float *)a.out.data)[n]));
    if (k2) {
      double *ga = malloc(a.n_out * sizeof(double)), *gb = malloc(a.n_out * sizeof(double)), ratio;
      size_t where;
      assert_non_null(ga);
      assert_non_null(gb);
      work_init(&b, k2, 2, 19, 1, 1);
      assert_int_equal(work_run(&b, &e), ATTNC_OK);
      for (n = 0; n < a.n_out; n++) {
        ga[n] = ((float *)a.out.data)[n];
        gb[n] = ((float *)b.out.data)[n];
      }
      ratio = tu_compare(ga, gb, a.n_out, 1e-5, 1e-4, &where);
      if (ratio > 1) fail_msg("%s: cc and tcc differ at %zu: %g vs %g", SPECS[s], where, ga[where], gb[where]);
      free(ga);
      free(gb);
      work_free(&b);
      attnc_release(k2);
    }
    work_free(&a);
  }
  for (i = 0; i < NTHREADS; i++) attnc_release(jobs[i].k);
  print_message("  32 threads, %d specs (2 with cc): %.2f s\n", NSPECS, now_s() - t0);
}

/* ------------------------------------------------------------------ */
/* compile / release cycles                                             */

static long cycles(long dflt)
{
  const char *e = getenv("ATTNC_STRESS_CYCLES");
  long n = e && *e ? strtol(e, NULL, 10) : dflt;
  return n > 0 ? n : dflt;
}

static size_t heap_in_use(void)
{
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static void one_cycle(const char *spec, attnc_backend be, long i)
{
  attnc_options o = { be, 0, NULL, ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *k = attnc_compile(spec, &o, &e);
  work w;
  if (!k) fail_msg("cycle %ld: %s", i, e.message);
  work_init(&w, k, 1, 5 + i % 7, (unsigned)i, 1 + (int)(i % 2));
  if (work_run(&w, &e) != ATTNC_OK) fail_msg("cycle %ld: %s", i, e.message);
  work_free(&w);
  attnc_release(k);
}

static void test_stress_compile_release_cycles(void **state)
{
  const long n = cycles(1000), warm = n / 10 > 20 ? n / 10 : 20, n_cc = n / 10 > 5 ? n / 10 : 5;
  size_t at_warm = 0, at_end, grew;
  double t0 = now_s(), t1;
  long i;
  (void)state;
  fill(weights, sizeof weights / sizeof weights[0], 99, 0.125f);
  /* the kernel is freed by every release (nothing else holds it), so each
   * cycle generates, compiles, binds, runs and frees it again */
  for (i = 0; i < n + warm; i++) {
    one_cycle("gqa x=B,S,32 heads=4 kv_heads=2 causal mask=key name=stress_cycle", ATTNC_BACKEND_TCC, i);
    if (i == warm - 1) at_warm = heap_in_use();
  }
  at_end = heap_in_use();
  t1 = now_s();
  /* the cc backend: a disk-cache hit (dlopen / dlclose) per cycle */
  for (i = 0; i < n_cc; i++) one_cycle("mha x=B,S,32 heads=2 name=stress_cycle_cc", ATTNC_BACKEND_CC, i);
  grew = at_end > at_warm ? at_end - at_warm : 0;
  print_message("  %ld tcc cycles in %.2f s (%.1f ms each), %ld cc cycles in %.2f s; heap %zu -> %zu bytes\n", n, t1 - t0,
                (t1 - t0) * 1e3 / (double)(n + warm), n_cc, now_s() - t1, at_warm, at_end);
  /* a leak of 64 bytes per cycle would show over 1000 cycles: the bound
   * leaves room only for the Lua generator's garbage, which its collector
   * keeps bounded (about 10-20 KiB seen) */
  if (grew > ((size_t)n * 64 > 65536 ? (size_t)n * 64 : 65536))
    fail_msg("%ld cycles grew the heap by %zu bytes (%.0f per cycle)", n, grew, (double)grew / (double)n);
}

/* ------------------------------------------------------------------ */
/* one kernel, many threads, separate bindings                          */

#define NRUNNERS 8

struct runner {
  pthread_barrier_t *start;
  work *w;
  int rounds, mismatches;
  attnc_status status;
  attnc_error e;
};

static void *runner(void *arg)
{
  struct runner *r = arg;
  int i;
  pthread_barrier_wait(r->start);
  for (i = 0; i < r->rounds; i++) {
    r->status = work_run(r->w, &r->e);
    if (r->status != ATTNC_OK) break;
    if (memcmp(r->w->out.data, r->w->want, r->w->n_out * sizeof(float)) != 0) r->mismatches++;
  }
  return NULL;
}

static void shared_kernel(const char *spec, attnc_backend be)
{
  static const int64_t S[NRUNNERS] = { 1, 7, 33, 64, 100, 129, 257, 300 };
  attnc_options o = { be, 0, NULL, ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *k = attnc_compile(spec, &o, &e);
  work w[NRUNNERS];
  struct runner r[NRUNNERS];
  pthread_t th[NRUNNERS];
  pthread_barrier_t start;
  int i;
  if (!k) fail_msg("%s: %s", spec, e.message);
  /* alone, one after another: the expected results */
  for (i = 0; i < NRUNNERS; i++) {
    work_init(&w[i], k, 1 + i % 3, S[i], (unsigned)i, 1 + i % 3);
    if (work_run(&w[i], &e) != ATTNC_OK) fail_msg("%s alone: %s", spec, e.message);
    w[i].want = malloc(w[i].n_out * sizeof(float));
    assert_non_null(w[i].want);
    memcpy(w[i].want, w[i].out.data, w[i].n_out * sizeof(float));
  }
  /* the same on one thread gives the same bits */
  {
    work one;
    work_init(&one, k, 1 + 5 % 3, S[5], 5, 1);
    assert_int_equal(work_run(&one, &e), ATTNC_OK);
    assert_memory_equal(one.out.data, w[5].want, one.n_out * sizeof(float));
    work_free(&one);
  }
  /* all at once, several rounds each */
  assert_int_equal(pthread_barrier_init(&start, NULL, NRUNNERS), 0);
  for (i = 0; i < NRUNNERS; i++) {
    r[i].start = &start;
    r[i].w = &w[i];
    r[i].rounds = 12;
    r[i].mismatches = 0;
    r[i].status = ATTNC_OK;
    assert_int_equal(pthread_create(&th[i], NULL, runner, &r[i]), 0);
  }
  for (i = 0; i < NRUNNERS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  for (i = 0; i < NRUNNERS; i++) {
    if (r[i].status != ATTNC_OK) fail_msg("%s, runner %d: %s", spec, i, r[i].e.message);
    if (r[i].mismatches) fail_msg("%s, runner %d (S=%lld): %d of %d concurrent runs differ from the run alone", spec, i,
                                  (long long)S[i], r[i].mismatches, r[i].rounds);
  }
  for (i = 0; i < NRUNNERS; i++) work_free(&w[i]);
  attnc_release(k);
}

static void test_stress_one_kernel_many_threads(void **state)
{
  (void)state;
  fill(weights, sizeof weights / sizeof weights[0], 99, 0.125f);
  shared_kernel("gqa x=B,S,64 heads=8 kv_heads=2 causal mask=key name=stress_shared", ATTNC_BACKEND_TCC);
  shared_kernel("alphafold x=B,S,32 heads=4 gated name=stress_shared_af", ATTNC_BACKEND_TCC);
  shared_kernel("gqa x=B,S,64 heads=8 kv_heads=2 causal mask=key name=stress_shared", ATTNC_BACKEND_CC);
}

/* The pool starts each worker on a CPU other than its creator's (Linux
 * sometimes left both on one CPU for tens of milliseconds), then the
 * worker widens its affinity again: a worker must not stay pinned. */
static struct {
  cpu_set_t mask;
  int seen; /* a worker ran an item */
} g_aff;

static void affinity_item(void *ctx, long item, int thread)
{
  const double t0 = now_s();
  (void)ctx;
  (void)item;
  if (thread != 0 && !__atomic_load_n(&g_aff.seen, __ATOMIC_ACQUIRE)) {
    pthread_getaffinity_np(pthread_self(), sizeof g_aff.mask, &g_aff.mask);
    __atomic_store_n(&g_aff.seen, 1, __ATOMIC_RELEASE);
  }
  while (now_s() - t0 < 2e-4) { /* long enough that the worker's share is its own */
  }
}

static void test_stress_pool_worker_affinity(void **state)
{
  cpu_set_t mine;
  int tries;
  (void)state;
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof mine, &mine), 0);
  if (CPU_COUNT(&mine) < 2) {
    print_message("    skipped: this thread may run on %d CPU: a worker has no other CPU to start on\n", CPU_COUNT(&mine));
    return;
  }
  g_aff.seen = 0;
  for (tries = 0; tries < 500 && !__atomic_load_n(&g_aff.seen, __ATOMIC_ACQUIRE); tries++)
    attnc_pool_run(2, 2, affinity_item, NULL);
  if (!g_aff.seen) {
    print_message("    skipped: in 500 jobs of two 0.2 ms items the worker never took one (a busy machine)\n");
    return;
  }
  if (!CPU_EQUAL(&g_aff.mask, &mine))
    fail_msg("a pool worker may run on %d CPU(s), its creator on %d: it kept its first CPU", CPU_COUNT(&g_aff.mask),
             CPU_COUNT(&mine));
}

/* One bindings object run again and again with its thread count changing
 * every run (1..4): the pool's workers must take part in exactly the jobs
 * they are counted for, even when one sat out the job before.  Every run
 * must give the bits of the one-thread run. */
static void test_stress_thread_count_changes(void **state)
{
  attnc_options o = { ATTNC_BACKEND_TCC, 1, NULL, ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *k;
  work w;
  int i, bad = 0;
  (void)state;
  fill(weights, sizeof weights / sizeof weights[0], 7, 0.125f);
  k = attnc_compile("gqa x=B,S,64 heads=8 kv_heads=2 causal name=stress_threads", &o, &e);
  if (!k) fail_msg("compile: %s", e.message);
  work_init(&w, k, 2, 96, 3, 1);
  if (work_run(&w, &e) != ATTNC_OK) fail_msg("run: %s", e.message);
  w.want = malloc(w.n_out * sizeof(float));
  assert_non_null(w.want);
  memcpy(w.want, w.out.data, w.n_out * sizeof(float));
  for (i = 0; i < 400; i++) {
    static const int counts[] = { 3, 2, 4, 1, 2, 3, 1, 4 };
    assert_int_equal(attnc_bindings_set_threads(w.b, counts[i % 8], &e), ATTNC_OK);
    if (work_run(&w, &e) != ATTNC_OK) fail_msg("run %d: %s", i, e.message);
    if (memcmp(w.out.data, w.want, w.n_out * sizeof(float)) != 0) bad++;
  }
  work_free(&w);
  attnc_release(k);
  if (bad) fail_msg("%d of 400 runs with a changing thread count differ from the one-thread run", bad);
}

/* ------------------------------------------------------------------ */
/* processes and the disk cache                                         */

static const char *attnc_bin(void)
{
  const char *b = getenv("ATTNC");
  return (b && *b) ? b : "build/attnc";
}

/* Start n `attnc check SPEC --backend cc` processes on cache dir `cache`,
 * released together; returns how many failed (printing their output). */
static int cli_checks(int n, const char *cache, const char *spec)
{
  pid_t pid[8];
  int gate[2], i, failed = 0;
  char logs[8][700];
  assert_true(n <= 8);
  assert_int_equal(pipe(gate), 0);
  fflush(NULL);
  for (i = 0; i < n; i++) {
    snprintf(logs[i], sizeof logs[i], "%s/check%d.log", g_dir, i);
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      char c;
      int fd = open(logs[i], O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(126);
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
      close(gate[1]);
      if (read(gate[0], &c, 1) < 0) _exit(125); /* returns 0 when the parent closes the gate */
      close(gate[0]);
      setenv("ATTNC_CACHE_DIR", cache, 1);
      alarm(60);
      execl(attnc_bin(), attnc_bin(), "check", spec, "--backend", "cc", "--dim", "S=40", (char *)NULL);
      _exit(127);
    }
  }
  close(gate[0]);
  close(gate[1]); /* go */
  for (i = 0; i < n; i++) {
    int st;
    char buf[4096] = "";
    FILE *f;
    while (waitpid(pid[i], &st, 0) < 0) assert_int_equal(errno, EINTR);
    f = fopen(logs[i], "r");
    if (f) {
      size_t got = fread(buf, 1, sizeof buf - 1, f);
      buf[got] = '\0';
      fclose(f);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !strstr(buf, ": OK")) {
      failed++;
      print_error("process %d: %s %d\n%s\n", i, WIFEXITED(st) ? "exit" : "signal",
                  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), buf);
    }
    unlink(logs[i]);
  }
  return failed;
}

/* Names in dir: *so gets the number of .so files (and the path of the last
 * one), g_idx the number of spec index files (spec-*.idx), *other the
 * number of anything else. */
static int g_idx;
static void scan_cache(const char *dir, int *so, int *other, char *path, size_t n)
{
  DIR *d = opendir(dir);
  struct dirent *de;
  *so = *other = g_idx = 0;
  assert_non_null(d);
  while ((de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (len > 3 && strcmp(de->d_name + len - 3, ".so") == 0) {
      (*so)++;
      if (path) snprintf(path, n, "%s/%s", dir, de->d_name);
    } else if (strncmp(de->d_name, "spec-", 5) == 0 && len > 9 && strcmp(de->d_name + len - 4, ".idx") == 0) {
      g_idx++;
    } else {
      (*other)++;
      print_error("unexpected entry in the cache: %s\n", de->d_name);
    }
  }
  closedir(d);
}

static void fresh_dir(char *buf, size_t n, const char *name)
{
  snprintf(buf, n, "%s/%s-XXXXXX", g_dir, name);
  assert_non_null(mkdtemp(buf));
}

static void test_stress_processes_share_cc_cache(void **state)
{
  const char *spec = "gqa x=2,S,48 heads=6 kv_heads=2 causal name=stress_procs";
  double t0 = now_s();
  int round;
  (void)state;
  for (round = 0; round < 3; round++) {
    char cache[700];
    int so, other, nproc = round == 2 ? 4 : 2;
    fresh_dir(cache, sizeof cache, "procs");
    if (cli_checks(nproc, cache, spec)) fail_msg("round %d: processes sharing a fresh cache failed (above)", round);
    scan_cache(cache, &so, &other, NULL, 0);
    assert_int_equal(so, 1);    /* one entry, however many built it */
    assert_int_equal(g_idx, 1); /* and one spec index entry */
    assert_int_equal(other, 0); /* no build folders, logs or temp files left behind */
  }
  print_message("  3 rounds of 2-4 processes on one fresh cache: %.2f s\n", now_s() - t0);
}

static void read_all(const char *path, unsigned char **p, size_t *n)
{
  FILE *f = fopen(path, "rb");
  long len;
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  fseek(f, 0, SEEK_SET);
  *p = malloc((size_t)len + 1);
  assert_non_null(*p);
  assert_int_equal(fread(*p, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
}

static void write_all(const char *path, const void *p, size_t n)
{
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

#define NCORRUPT 7
static const char *const CORRUPT[NCORRUPT] = { "truncated to half", "truncated to 64 bytes", "emptied",
                                               "overwritten with text", "with its ELF header zeroed",
                                               "replaced by another kernel's object", "with code bytes flipped" };

static void test_stress_corrupt_cache_rebuilt(void **state)
{
  const char *spec = "mha x=B,S,24 heads=3 causal name=stress_corrupt";
  const char *other_spec = "mha x=B,S,24 heads=3 name=stress_corrupt"; /* same name, another kernel */
  char cache[700], so_path[1400], other_cache[700], other_path[1400];
  unsigned char *good, *foreign;
  size_t n_good, n_foreign;
  int so, other, c, failures = 0;
  double t0 = now_s();
  (void)state;
  fresh_dir(cache, sizeof cache, "corrupt");
  fresh_dir(other_cache, sizeof other_cache, "foreign");
  if (cli_checks(1, cache, spec)) fail_msg("the first build failed");
  scan_cache(cache, &so, &other, so_path, sizeof so_path);
  assert_int_equal(so, 1);
  read_all(so_path, &good, &n_good);
  assert_true(n_good > 1000);
  assert_memory_equal(good, "\177ELF", 4);
  if (cli_checks(1, other_cache, other_spec)) fail_msg("the foreign build failed");
  scan_cache(other_cache, &so, &other, other_path, sizeof other_path);
  read_all(other_path, &foreign, &n_foreign);
  for (c = 0; c < NCORRUPT; c++) {
    unsigned char *after, *bad = malloc(n_good);
    size_t n_after, i;
    assert_non_null(bad);
    memcpy(bad, good, n_good);
    switch (c) {
    case 0: write_all(so_path, good, n_good / 2); break;
    case 1: write_all(so_path, good, 64); break;
    case 2: write_all(so_path, good, 0); break;
    case 3: write_all(so_path, "this is not a shared object\n", 28); break;
    case 4: memset(bad, 0, 64); write_all(so_path, bad, n_good); break;
    case 5: write_all(so_path, foreign, n_foreign); break;
    default: /* every 7th byte of the middle half flipped: code and data */
      for (i = n_good / 4; i < n_good * 3 / 4; i += 7) bad[i] ^= 0x5a;
      write_all(so_path, bad, n_good);
      break;
    }
    free(bad);
    if (cli_checks(1, cache, spec)) {
      print_error("cache entry %s: the next process failed (above)\n", CORRUPT[c]);
      failures++;
      write_all(so_path, good, n_good);
      continue;
    }
    scan_cache(cache, &so, &other, NULL, 0);
    assert_int_equal(so, 1);
    assert_int_equal(g_idx, 1);
    assert_int_equal(other, 0);
    read_all(so_path, &after, &n_after);
    if (n_after != n_good || memcmp(after, "\177ELF", 4) != 0) {
      print_error("cache entry %s: not rebuilt (%zu bytes, was %zu)\n", CORRUPT[c], n_after, n_good);
      failures++;
    }
    free(after);
  }
  free(good);
  free(foreign);
  if (failures) fail_msg("%d of %d corrupted cache entries were not detected and rebuilt (above)", failures, NCORRUPT);
  print_message("  %d corrupted cache entries rebuilt: %.2f s\n", NCORRUPT, now_s() - t0);
}

/* The spec index (runtime/cc_index.c): a warm cc load in a new process finds
 * the object and the generator's result by the spec text, without Lua.
 * attnc_jit_cc_lookup() must give exactly what the generator gave, and
 * miss (so the generator runs) for any other text, a damaged entry, or an
 * entry copied from another spec. */
static int same_gen(const attnc_gen *a, const attnc_gen *b)
{
  attnc_gen x = *a, y = *b;
  int i;
  if (strcmp(a->canonical, b->canonical) || strcmp(a->name, b->name) || strcmp(a->source, b->source) ||
      strcmp(a->header, b->header) || a->ndims != b->ndims)
    return 0;
  for (i = 0; i < a->ndims; i++)
    if (strcmp(a->dim_names[i], b->dim_names[i])) return 0;
  x.canonical = x.name = x.source = x.header = y.canonical = y.name = y.source = y.header = NULL;
  x.dim_names = y.dim_names = NULL;
  return memcmp(&x, &y, sizeof x) == 0;
}

static char *only_idx(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *de;
  char *found = NULL;
  assert_non_null(d);
  while ((de = readdir(d)))
    if (strncmp(de->d_name, "spec-", 5) == 0) {
      assert_null(found);
      found = malloc(strlen(dir) + strlen(de->d_name) + 2);
      sprintf(found, "%s/%s", dir, de->d_name);
    }
  closedir(d);
  assert_non_null(found);
  return found;
}

static void test_stress_spec_index(void **state)
{
  const char *spec = "gqa x=B,S,32 heads=4 kv_heads=2 mask=key causal name=stress_index";
  const char *spec_b = "mha x=B,S,32 heads=4 window=2,1 name=stress_index_b";
  char cache[700], cache_b[700], *idx, *idx_b;
  const char *old = getenv("ATTNC_CACHE_DIR");
  char *saved = old ? strdup(old) : NULL;
  attnc_options o = { ATTNC_BACKEND_CC, 1, NULL, ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *k;
  attnc_gen g;
  attnc_kernel_fns fns;
  void *h;
  unsigned char *good, *other;
  size_t n_good, n_other;
  (void)state;
  fresh_dir(cache, sizeof cache, "index");
  fresh_dir(cache_b, sizeof cache_b, "index_b");
  setenv("ATTNC_CACHE_DIR", cache_b, 1);
  k = attnc_compile(spec_b, &o, &e);
  if (!k) fail_msg("compile: %s", e.message);
  attnc_release(k);
  idx_b = only_idx(cache_b);
  setenv("ATTNC_CACHE_DIR", cache, 1);
  assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 0); /* nothing built yet */
  k = attnc_compile(spec, &o, &e);
  if (!k) fail_msg("compile: %s", e.message);
  idx = only_idx(cache);
  /* a hit gives the generator's result and a working object */
  assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 1);
  if (!same_gen(&g, attnc_kernel_gen(k))) fail_msg("the spec index returned a different generator result");
  assert_non_null(fns.run);
  attnc_jit_cc_free(h);
  attnc_gen_free(&g);
  /* the same text asking for the plain form: a miss */
  assert_int_equal(attnc_jit_cc_lookup(spec, 1, &g, &h, &fns), 0);
  attnc_release(k);
  /* other text for the same kernel: a miss */
  {
    char spaced[200];
    snprintf(spaced, sizeof spaced, "%s ", spec);
    assert_int_equal(attnc_jit_cc_lookup(spaced, 0, &g, &h, &fns), 0);
  }
  read_all(idx, &good, &n_good);
  /* damaged: one byte flipped, cut short */
  good[n_good / 2] ^= 1;
  write_all(idx, good, n_good);
  assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 0);
  good[n_good / 2] ^= 1;
  write_all(idx, good, n_good - 20);
  assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 0);
  /* another spec's entry under this spec's key (as a hash collision would be) */
  read_all(idx_b, &other, &n_other);
  write_all(idx, other, n_other);
  assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 0);
  /* the next compile rewrites the entry, and it hits again */
  k = attnc_compile(spec, &o, &e);
  if (!k) fail_msg("compile after damage: %s", e.message);
  attnc_release(k);
  assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 1);
  attnc_jit_cc_free(h);
  attnc_gen_free(&g);
  /* the object gone: a miss, and the next compile rebuilds it */
  {
    char so[1400];
    int n_so, n_other_files;
    scan_cache(cache, &n_so, &n_other_files, so, sizeof so);
    assert_int_equal(unlink(so), 0);
    assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 0);
    k = attnc_compile(spec, &o, &e);
    if (!k) fail_msg("compile after the object was removed: %s", e.message);
    attnc_release(k);
    assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 1);
    attnc_jit_cc_free(h);
    attnc_gen_free(&g);
  }
  /* ATTNC_SRC_DIR (the generator read from disk) never uses the index */
  setenv("ATTNC_SRC_DIR", "/nonexistent", 1);
  assert_int_equal(attnc_jit_cc_lookup(spec, 0, &g, &h, &fns), 0);
  unsetenv("ATTNC_SRC_DIR");
  if (saved) setenv("ATTNC_CACHE_DIR", saved, 1);
  free(saved);
  free(good);
  free(other);
  free(idx);
  free(idx_b);
}

static int setup(void **state)
{
  const char *tmp = getenv("TMPDIR");
  (void)state;
  snprintf(g_dir, sizeof g_dir, "%s/attnc-stress-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) return -1;
  snprintf(g_cache, sizeof g_cache, "%s/cache", g_dir);
  return setenv("ATTNC_CACHE_DIR", g_cache, 1);
}

static int teardown(void **state)
{
  char cmd[700];
  (void)state;
  if (getenv("ATTNC_TEST_KEEP")) return 0;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    /* the processes first: fork() before this process has pool threads */
    cmocka_unit_test(test_stress_processes_share_cc_cache),
    cmocka_unit_test(test_stress_corrupt_cache_rebuilt),
    cmocka_unit_test(test_stress_spec_index),
    cmocka_unit_test(test_stress_compile_32_threads),
    cmocka_unit_test(test_stress_one_kernel_many_threads),
    cmocka_unit_test(test_stress_thread_count_changes),
    cmocka_unit_test(test_stress_pool_worker_affinity),
    cmocka_unit_test(test_stress_compile_release_cycles),
  };
  const char *filter = getenv("ATTNC_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, setup, teardown);
}
