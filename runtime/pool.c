/* The thread pool: persistent workers that share one job at a time.  A
 * job is a count of independent items; threads take items one by one
 * from an atomic counter, so uneven items (causal tiles) balance out, and
 * the split never changes results because items never share outputs.
 * While one job runs, a second caller does not wait: it runs its job on
 * its own thread. */
#include <pthread.h>
#include <stdlib.h>
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
static long job_items, job_next, job_want;
static int job_running;

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

static void take_items(int tid)
{
  long i;
  while ((i = __atomic_fetch_add(&job_next, 1, __ATOMIC_RELAXED)) < job_items) job_fn(job_ctx, i, tid);
}

static void *worker(void *arg)
{
  int tid = (int)(long)arg;
  long seen = 0;
  pthread_mutex_lock(&state_lock);
  for (;;) {
    while (generation == seen) pthread_cond_wait(&wake, &state_lock);
    seen = generation;
    if (tid >= job_want) continue;
    pthread_mutex_unlock(&state_lock);
    take_items(tid);
    pthread_mutex_lock(&state_lock);
    if (--job_running == 0) pthread_cond_signal(&finished);
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
    if (pthread_create(&workers[nworkers], NULL, worker, (void *)(long)(nworkers + 1)) != 0) break;
    pthread_detach(workers[nworkers]);
    nworkers++;
  }
  job_fn = fn;
  job_ctx = ctx;
  job_items = items;
  job_next = 0;
  job_want = nthreads < nworkers + 1 ? nthreads : nworkers + 1;
  job_running = (int)job_want - 1;
  generation++;
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&state_lock);
  take_items(0);
  pthread_mutex_lock(&state_lock);
  while (job_running > 0) pthread_cond_wait(&finished, &state_lock);
  pthread_mutex_unlock(&state_lock);
  pthread_mutex_unlock(&pool_lock);
}
