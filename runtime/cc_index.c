/* The cc backend's spec index: a warm load without the generator.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

extern const char attnc_generator_id[];

#define INDEX_MAGIC "ATTNCIX4"

static int index_path(const char *spec, int plain, char *out, size_t n)
{
  char dir[4000];
  uint64_t key = 0xcbf29ce484222325ULL;
  const char *src = getenv("ATTNC_SRC_DIR");
  if (src && *src) return -1;
  if (attnc_cc_cache_dir(dir, 3000) != 0) return -1;
  key = attnc_cc_fnv64(key, INDEX_MAGIC);
  key = attnc_cc_fnv64(key, ATTNC_VERSION);
  key = attnc_cc_fnv64(key, spec);
  key = attnc_cc_fnv64(key, plain ? "plain" : "fast");
  key = attnc_cc_fnv64(key, attnc_generator_id);
  key = attnc_cc_fnv64_bytes(key, (const unsigned char *)&(size_t){ sizeof(attnc_gen) }, sizeof(size_t));
  key = attnc_cc_fnv64(key, attnc_cc_compiler());
  key = attnc_cc_fnv64(key, attnc_cc_flags);
  key = attnc_cc_fnv64(key, attnc_cc_extra_flags());
  key = attnc_cc_cpu_key(key);
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

void attnc_cc_index_write(const char *spec, const char *object, const attnc_gen *g)
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
  if (!ok || attnc_cc_add_trailer(tmp) != 0 || rename(tmp, path) != 0) unlink(tmp);
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
  if (index_path(spec, plain, path, sizeof path) != 0 || !(buf = attnc_cc_read_checked(path, &n))) return 0;
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
  h = attnc_cc_load_checked(object, g, fns);
  if (!h) goto miss;
  free(buf);
  *handle = h;
  return 1;
miss:
  attnc_gen_free(g); /* dim_names is zeroed past what was read */
  free(buf);
  return 0;
}
