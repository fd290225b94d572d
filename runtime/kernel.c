/* Kernels: compile (through the generator and a backend), share equal
 * canonical specs through a reference-counted cache, and read them back. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static attnc_kernel *cache_head;

static attnc_backend pick_backend(const attnc_options *opts)
{
  const char *e;
  if (opts && opts->backend != ATTNC_BACKEND_DEFAULT) return opts->backend;
  e = getenv("ATTNC_BACKEND");
  if (e && strcmp(e, "cc") == 0) return ATTNC_BACKEND_CC;
  return ATTNC_BACKEND_TCC;
}

static const char *spec_name(const attnc_options *opts)
{
  return (opts && opts->spec_name) ? opts->spec_name : "spec";
}

static int plain_form(const attnc_options *opts) { return opts && opts->form == ATTNC_FORM_PLAIN; }

/* ATTNC_OK, or an error for a form that is neither fast nor plain. */
static attnc_status check_form(const attnc_options *opts, attnc_error *err)
{
  if (!opts || opts->form == ATTNC_FORM_FAST || opts->form == ATTNC_FORM_PLAIN) return ATTNC_OK;
  return attnc_err_set(err, ATTNC_EARG, "unknown kernel form %d (use ATTNC_FORM_FAST or ATTNC_FORM_PLAIN)", (int)opts->form);
}

static void kernel_free(attnc_kernel *k)
{
  if (k->backend == ATTNC_BACKEND_CC) attnc_jit_cc_free(k->state);
  else attnc_jit_tcc_free(k->state);
  attnc_gen_free(&k->gen);
  free(k);
}

/* ATTNC_DUMP_DIR: write every compiled kernel's C there, for reading and
 * debugging.  Best effort: a failure to write never fails the compile. */
static void dump_source(const attnc_gen *g)
{
  const char *dir = getenv("ATTNC_DUMP_DIR");
  const char *text[2];
  const char *ext[2] = { "c", "h" };
  char path[4096];
  int i;
  if (!dir || !*dir) return;
  text[0] = g->source;
  text[1] = g->header;
  for (i = 0; i < 2; i++) {
    FILE *f;
    snprintf(path, sizeof path, "%s/%s.%s", dir, g->name, ext[i]);
    f = fopen(path, "w");
    if (!f) return;
    fputs(text[i], f);
    fclose(f);
  }
}

/* Is it the kernel of this backend, form and canonical spec? */
static int same_kernel(const attnc_kernel *it, attnc_backend be, const attnc_gen *g)
{
  return it->backend == be && it->gen.plain == g->plain && strcmp(it->gen.canonical, g->canonical) == 0;
}

/* The kernel of this backend with g's form and canonical spec, with a new reference, or NULL. */
static attnc_kernel *cached(attnc_backend be, const attnc_gen *g)
{
  attnc_kernel *it;
  pthread_mutex_lock(&cache_lock);
  for (it = cache_head; it; it = it->next)
    if (same_kernel(it, be, g)) {
      it->refs++;
      break;
    }
  pthread_mutex_unlock(&cache_lock);
  return it;
}

attnc_kernel *attnc_compile(const char *spec, const attnc_options *opts, attnc_error *err)
{
  attnc_gen g;
  attnc_kernel *k, *it;
  attnc_backend be = pick_backend(opts);
  attnc_status s = ATTNC_OK;
  void *state = NULL;
  attnc_kernel_fns fns;
  attnc_err_clear(err);
  if (be != ATTNC_BACKEND_TCC && be != ATTNC_BACKEND_CC) {
    attnc_err_set(err, ATTNC_EARG, "unknown backend %d (use ATTNC_BACKEND_TCC or ATTNC_BACKEND_CC)", (int)be);
    return NULL;
  }
  if (!spec) {
    attnc_err_set(err, ATTNC_EARG, "the spec is NULL");
    return NULL;
  }
  if (check_form(opts, err) != ATTNC_OK) return NULL;
  /* cc: a spec this cache has built before loads without the generator */
  if (!(be == ATTNC_BACKEND_CC && attnc_jit_cc_lookup(spec, plain_form(opts), &g, &state, &fns))) {
    state = NULL;
    if (attnc_host_generate(spec, spec_name(opts), plain_form(opts), &g, err) != ATTNC_OK) return NULL;
  }
  if ((it = cached(be, &g))) {
    if (state) attnc_jit_cc_free(state);
    attnc_gen_free(&g);
    return it;
  }
  k = calloc(1, sizeof *k);
  if (!k) {
    if (state) attnc_jit_cc_free(state);
    attnc_gen_free(&g);
    attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
    return NULL;
  }
  k->gen = g;
  k->backend = be;
  k->refs = 1;
  k->threads = opts ? opts->threads : 0;
  if (state) {
    k->state = state;
    k->fns = fns;
  } else {
    s = (be == ATTNC_BACKEND_CC) ? attnc_jit_cc(spec, &k->gen, &k->state, &k->fns, err)
                                 : attnc_jit_tcc(&k->gen, &k->state, &k->fns, err);
  }
  if (s != ATTNC_OK) {
    attnc_gen_free(&k->gen);
    free(k);
    return NULL;
  }
  dump_source(&k->gen);
  /* Another thread may have compiled the same spec meanwhile: keep one. */
  pthread_mutex_lock(&cache_lock);
  for (it = cache_head; it; it = it->next) {
    if (same_kernel(it, be, &k->gen)) {
      it->refs++;
      pthread_mutex_unlock(&cache_lock);
      kernel_free(k);
      return it;
    }
  }
  k->next = cache_head;
  cache_head = k;
  pthread_mutex_unlock(&cache_lock);
  return k;
}

void attnc_release(attnc_kernel *k)
{
  attnc_kernel **pp;
  if (!k) return;
  pthread_mutex_lock(&cache_lock);
  if (--k->refs > 0) {
    pthread_mutex_unlock(&cache_lock);
    return;
  }
  for (pp = &cache_head; *pp; pp = &(*pp)->next) {
    if (*pp == k) { *pp = k->next; break; }
  }
  pthread_mutex_unlock(&cache_lock);
  kernel_free(k);
}

/* Another reference to k (the bindings made on it hold one). */
void attnc_kernel_retain(attnc_kernel *k)
{
  pthread_mutex_lock(&cache_lock);
  k->refs++;
  pthread_mutex_unlock(&cache_lock);
}

const char *attnc_source(const attnc_kernel *k) { return k ? k->gen.source : NULL; }
const char *attnc_header(const attnc_kernel *k) { return k ? k->gen.header : NULL; }
const char *attnc_canonical(const attnc_kernel *k) { return k ? k->gen.canonical : NULL; }
const char *attnc_name(const attnc_kernel *k) { return k ? k->gen.name : NULL; }
attnc_backend attnc_kernel_backend(const attnc_kernel *k) { return k ? k->backend : ATTNC_BACKEND_DEFAULT; }
const attnc_gen *attnc_kernel_gen(const attnc_kernel *k) { return k ? &k->gen : NULL; }
int attnc_kernel_trains(const attnc_kernel *k) { return k && k->gen.train && k->fns.backward ? 1 : 0; }
int attnc_dim_count(const attnc_kernel *k) { return k ? k->gen.ndims : 0; }
const char *attnc_dim_name(const attnc_kernel *k, int i)
{
  return (k && i >= 0 && i < k->gen.ndims) ? k->gen.dim_names[i] : NULL;
}

const char *attnc_inplace_name(const attnc_kernel *k, int i, attnc_dtype *dtype)
{
  static const int slots[] = { ATTNC_SLOT_K_CACHE, ATTNC_SLOT_V_CACHE, ATTNC_SLOT_K_CACHE_SCALE, ATTNC_SLOT_V_CACHE_SCALE };
  int j, n = 0;
  if (!k || i < 0) return NULL;
  for (j = 0; j < 4; j++)
    if (k->gen.used[slots[j]] && n++ == i) {
      if (dtype) *dtype = attnc_slot_dtype(&k->gen, slots[j]);
      return attnc_slot_name(slots[j]);
    }
  return NULL;
}

attnc_status attnc_spec_canonical(const char *spec, const attnc_options *opts, char *buf, size_t n, attnc_error *err)
{
  char *c = NULL;
  attnc_status s;
  attnc_err_clear(err);
  s = attnc_host_canonical(spec, spec_name(opts), &c, err);
  if (s != ATTNC_OK) return s;
  if (!buf || strlen(c) + 1 > n) {
    free(c);
    return attnc_err_set(err, ATTNC_EARG, "buffer too small for the canonical spec");
  }
  memcpy(buf, c, strlen(c) + 1);
  free(c);
  return ATTNC_OK;
}

attnc_status attnc_generate(const char *spec, const attnc_options *opts, char **source, char **header, attnc_error *err)
{
  attnc_gen g;
  attnc_status s;
  attnc_err_clear(err);
  if ((s = check_form(opts, err)) != ATTNC_OK) return s;
  s = attnc_host_generate(spec, spec_name(opts), plain_form(opts), &g, err);
  if (s != ATTNC_OK) return s;
  if (source) { *source = g.source; g.source = NULL; }
  if (header) { *header = g.header; g.header = NULL; }
  attnc_gen_free(&g);
  return ATTNC_OK;
}
