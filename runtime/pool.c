/* The thread pool: persistent workers that share one job at a time.  A
 * job is a count of independent items.  Each thread owns an even,
 * contiguous share of them and takes its own one by one from an atomic
 * counter; a thread whose share is done takes the rest of the others'
 * the same way, so uneven items (causal tiles) and a late thread balance
 * out.  The split never changes results because items never share
 * outputs.  Owning the same share from one job to the next keeps each
 * thread on the same data from run to run: a kernel's scratch and the
 * weights of the same heads stay in one core's cache, where items taken
 * in turn from one counter would move them between the cores every run.
 * While one job runs, a second caller does not wait: it runs its job on
 * its own thread.
 *
 * A kernel runs several jobs back to back (one per phase), and a small
 * kernel's phase lasts tens of microseconds: about what waking a sleeping
 * thread costs.  So a worker that finishes spins for up to SPIN_NS
 * watching for the next job before it sleeps, and the job's owner spins
 * the same way waiting for the workers. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getcpu, pthread_attr_setaffinity_np */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define POOL_MAX 64

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; /* held by the job's owner */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, finished = PTHREAD_COND_INITIALIZER;
static pthread_t workers[POOL_MAX];
static int nworkers;
static long generation;
static attnc_pool_fn job_fn;
static void *job_ctx;
static long job_items, job_want;
/* thread t's share: items [share_first(t), share_first(t + 1)); next[t] is the next to take */
static struct {
  long next;
  char pad[64 - sizeof(long)];
} share[POOL_MAX] __attribute__((aligned(64)));
static long job_running; /* workers still on the job */

#ifdef __linux__
/* Where a new worker starts.  Linux may start a worker on its creator's
 * CPU and leave it there for many jobs while another CPU sits idle (both
 * threads are busy, and the scheduler leaves a task it counts as
 * cache-hot).  So worker k starts on the k-th allowed CPU after the
 * creator's own (when there is another), and once running it takes back
 * every CPU it was allowed, where the scheduler then leaves it. */
static cpu_set_t worker_allowed[POOL_MAX];
static int worker_pinned[POOL_MAX];

/* attr gets worker k's first CPU; 0 when there is none to give */
static int first_cpu(int k, pthread_attr_t *attr, cpu_set_t *allowed)
{
  cpu_set_t one;
  int cur = sched_getcpu(), n = 0, i, pick;
  if (cur < 0 || pthread_getaffinity_np(pthread_self(), sizeof *allowed, allowed) != 0) return 0;
  for (i = 0; i < CPU_SETSIZE; i++) n += i != cur && CPU_ISSET(i, allowed);
  if (n == 0) return 0;
  pick = k % n;
  CPU_ZERO(&one);
  for (i = 0; i < CPU_SETSIZE; i++)
    if (i != cur && CPU_ISSET(i, allowed) && pick-- == 0) {
      CPU_SET(i, &one);
      break;
    }
  return pthread_attr_setaffinity_np(attr, sizeof one, &one) == 0;
}
#endif

/* A forked child has none of the parent's workers: start from scratch. */
static void after_fork_child(void)
{
  pthread_mutex_init(&pool_lock, NULL);
  pthread_mutex_init(&state_lock, NULL);
  pthread_cond_init(&wake, NULL);
  pthread_cond_init(&finished, NULL);
  nworkers = 0;
  job_running = 0;
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void register_fork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* ATTNC_SPIN_US: how long to spin, in microseconds (default 200; 0 never spins). */
static long spin_ns = -1;
static long get_spin_ns(void)
{
  long v = __atomic_load_n(&spin_ns, __ATOMIC_RELAXED);
  if (v < 0) {
    const char *e = getenv("ATTNC_SPIN_US");
    v = 200000L;
    if (e && *e) {
      long us = strtol(e, NULL, 10);
      v = us < 0 ? 0 : us > 100000 ? 100000000L : us * 1000L;
    }
    __atomic_store_n(&spin_ns, v, __ATOMIC_RELAXED);
  }
  return v;
}
#define SPIN_NS get_spin_ns()
/* after this long, spinning also yields the CPU: when there are more busy
 * threads than cores, the thread being waited for may be the one waiting */
#define YIELD_NS 20000L

static long now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Spin until *p != v or SPIN_NS pass; returns the last value seen. */
static long spin_while_equal(const long *p, long v)
{
  long t0 = 0, i, x, limit = SPIN_NS;
  for (i = 0;; i++) {
    if ((x = __atomic_load_n(p, __ATOMIC_ACQUIRE)) != v || !limit) return x;
    relax();
    if ((i & 63) == 63) {
      long t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > limit) return x;
      else if (t - t0 > YIELD_NS) sched_yield(); /* let a preempted thread in */
    }
  }
}

/* Spin until *p is 0 (returns 1) or SPIN_NS pass (returns 0). */
static int spin_until_zero(const long *p)
{
  long t0 = 0, i, limit = SPIN_NS;
  for (i = 0;; i++) {
    if (__atomic_load_n(p, __ATOMIC_ACQUIRE) == 0) return 1;
    if (!limit) return 0;
    relax();
    if ((i & 63) == 63) {
      long t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > limit) return 0;
      else if (t - t0 > YIELD_NS) sched_yield(); /* let a preempted worker in */
    }
  }
}

static long share_first(long t) { return t * job_items / job_want; }

/* This thread's share, then what is left of the others', in turn */
static void take_items(int tid)
{
  long u, i;
  for (u = 0; u < job_want; u++) {
    const long t = (tid + u) % job_want, end = share_first(t + 1);
    while ((i = __atomic_fetch_add(&share[t].next, 1, __ATOMIC_RELAXED)) < end) job_fn(job_ctx, i, tid);
  }
}

static void *worker(void *arg)
{
  int tid = (int)(long)arg;
  long seen = 0, want;
#ifdef __linux__
  if (worker_pinned[tid]) pthread_setaffinity_np(pthread_self(), sizeof worker_allowed[tid], &worker_allowed[tid]);
#endif
  for (;;) {
    /* the next job: spin a little, then sleep */
    if (spin_while_equal(&generation, seen) == seen) {
      pthread_mutex_lock(&state_lock);
      while (__atomic_load_n(&generation, __ATOMIC_ACQUIRE) == seen) pthread_cond_wait(&wake, &state_lock);
      pthread_mutex_unlock(&state_lock);
    }
    /* the job's number and thread count together, as the owner published
     * them (under state_lock): a worker that sat out one job must not read
     * the next job's count against the old number and join it twice */
    pthread_mutex_lock(&state_lock);
    seen = generation;
    want = job_want;
    pthread_mutex_unlock(&state_lock);
    if (tid >= want) continue;
    take_items(tid);
    if (__atomic_sub_fetch(&job_running, 1, __ATOMIC_ACQ_REL) == 0) {
      pthread_mutex_lock(&state_lock);
      pthread_cond_signal(&finished);
      pthread_mutex_unlock(&state_lock);
    }
  }
  return NULL;
}

int attnc_pool_default_threads(void)
{
  const char *e = getenv("ATTNC_THREADS");
  long n;
  if (e && *e) {
    n = strtol(e, NULL, 10);
    if (n >= 1) return n > POOL_MAX ? POOL_MAX : (int)n;
  }
  n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > POOL_MAX ? POOL_MAX : (int)n);
}

void attnc_pool_run(int nthreads, long items, attnc_pool_fn fn, void *ctx)
{
  long i;
  if (nthreads > POOL_MAX) nthreads = POOL_MAX;
  pthread_once(&fork_once, register_fork);
  if (nthreads <= 1 || items <= 1 || pthread_mutex_trylock(&pool_lock) != 0) {
    for (i = 0; i < items; i++) fn(ctx, i, 0);
    return;
  }
  pthread_mutex_lock(&state_lock);
  while (nworkers < nthreads - 1) {
    const int tid = nworkers + 1;
    int made = 0;
#ifdef __linux__
    pthread_attr_t attr;
    worker_pinned[tid] = 0; /* set before the worker starts, which reads it */
    if (pthread_attr_init(&attr) == 0) {
      if (first_cpu(nworkers, &attr, &worker_allowed[tid])) {
        worker_pinned[tid] = 1;
        made = pthread_create(&workers[nworkers], &attr, worker, (void *)(long)tid) == 0;
        if (!made) worker_pinned[tid] = 0;
      }
      pthread_attr_destroy(&attr);
    }
#endif
    if (!made && pthread_create(&workers[nworkers], NULL, worker, (void *)(long)tid) != 0) break;
    pthread_detach(workers[nworkers]);
    nworkers++;
  }
  job_fn = fn;
  job_ctx = ctx;
  job_items = items;
  job_want = nthreads < nworkers + 1 ? nthreads : nworkers + 1;
  for (i = 0; i < job_want; i++) share[i].next = share_first(i);
  __atomic_store_n(&job_running, job_want - 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE); /* publishes the job's fields */
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&state_lock);
  take_items(0);
  if (!spin_until_zero(&job_running)) {
    pthread_mutex_lock(&state_lock);
    while (__atomic_load_n(&job_running, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&finished, &state_lock);
    pthread_mutex_unlock(&state_lock);
  }
  pthread_mutex_unlock(&pool_lock);
}
