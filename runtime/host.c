/* The Lua host: one Lua state holding the embedded generator, guarded by
 * a mutex (Lua states are not thread-safe).  Lua errors cross into C in
 * exactly one place, run_protected(), and become an attnc_error. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdint.h>
#include <sys/mman.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "internal.h"

extern const struct { const char *name; const char *data; size_t size; } attnc_embedded[];

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static lua_State *host_L;
static char host_failure[1024]; /* why the generator could not start */

/* With ATTNC_SRC_DIR set, read gen/ and templates/ from that folder instead
 * of the copies compiled into the library (for development). */
static char *read_source(const char *name, size_t *size)
{
  const char *dir = getenv("ATTNC_SRC_DIR");
  char path[4096];
  FILE *f;
  char *buf;
  long n;
  if (!dir || !*dir) return NULL;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "rb");
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return NULL; }
  buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
  fclose(f);
  if (buf) { buf[n] = '\0'; *size = (size_t)n; }
  return buf;
}

/* Message handler: keep spec errors (tables) as they are, add a traceback to the rest. */
static int on_error(lua_State *L)
{
  if (lua_istable(L, 1)) return 1;
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

/* Only what the generator uses: base, package (for require of the
 * embedded modules), string, table and math.  No io, os or debug, no file
 * loading (dofile, loadfile, package.path and cpath empty), so nothing in
 * the generator can reach the file system or the process even by mistake,
 * and the state starts faster. */
static void open_libs(lua_State *L)
{
  static const luaL_Reg libs[] = { { LUA_GNAME, luaopen_base }, { LUA_LOADLIBNAME, luaopen_package },
                                   { LUA_STRLIBNAME, luaopen_string }, { LUA_TABLIBNAME, luaopen_table },
                                   { LUA_MATHLIBNAME, luaopen_math }, { NULL, NULL } };
  const luaL_Reg *lib;
  for (lib = libs; lib->func; lib++) {
    luaL_requiref(L, lib->name, lib->func, 1);
    lua_pop(L, 1);
  }
  lua_pushnil(L);
  lua_setglobal(L, "dofile");
  lua_pushnil(L);
  lua_setglobal(L, "loadfile");
  lua_getglobal(L, "package");
  lua_pushliteral(L, "");
  lua_setfield(L, -2, "path");
  lua_pushliteral(L, "");
  lua_setfield(L, -2, "cpath");
  lua_pop(L, 1);
}

/* The index of the embedded entry called name, or -1. */
static int find_embedded(const char *name)
{
  int i;
  for (i = 0; attnc_embedded[i].name; i++)
    if (strcmp(attnc_embedded[i].name, name) == 0) return i;
  return -1;
}

/* Push embedded file name's bytecode ("bc:NAME", made by tools/embed.c)
 * as a function and return 1; return 0 with nothing pushed when there is
 * none or this Lua does not accept it (another Lua build). */
static int load_bytecode(lua_State *L, const char *name)
{
  char key[160];
  int bc;
  snprintf(key, sizeof key, "bc:%s", name);
  if ((bc = find_embedded(key)) < 0) return 0;
  if (luaL_loadbufferx(L, attnc_embedded[bc].data, attnc_embedded[bc].size, key, "b") == LUA_OK) return 1;
  lua_pop(L, 1);
  return 0;
}

/* Push the compiled chunk of gen/ file name: its bytecode unless the file
 * was read from disk (ATTNC_SRC_DIR), else its text.  Nonzero on a syntax
 * error (the message is pushed). */
static int load_chunk(lua_State *L, const char *name, const char *text, size_t size, int from_disk)
{
  char chunk[160];
  if (!from_disk && load_bytecode(L, name)) return 0;
  snprintf(chunk, sizeof chunk, "@%s", name);
  return luaL_loadbufferx(L, text, size, chunk, "t") != LUA_OK;
}

/* Register every embedded file: gen/X.lua as module X in package.preload,
 * templates/ files as the table module "templates", and templates compiled
 * to bytecode as functions in the module "templates_bc" (gen/emit.lua). */
static int load_modules(lua_State *L)
{
  int i;
  open_libs(L);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_newtable(L); /* templates */
  lua_newtable(L); /* templates_bc */
  for (i = 0; attnc_embedded[i].name; i++) {
    const char *name = attnc_embedded[i].name;
    size_t size = attnc_embedded[i].size;
    char *disk = read_source(name, &size);
    const char *data = disk ? disk : attnc_embedded[i].data;
    size_t len = strlen(name);
    if (strncmp(name, "gen/", 4) == 0) {
      char mod[128];
      if (len < 9 || len - 8 >= sizeof mod) { free(disk); continue; }
      memcpy(mod, name + 4, len - 8);
      mod[len - 8] = '\0';
      if (load_chunk(L, name, data, size, disk != NULL)) { free(disk); return lua_error(L); }
      lua_setfield(L, -4, mod);
    } else if (strncmp(name, "templates/", 10) == 0) {
      lua_pushlstring(L, data, size);
      lua_setfield(L, -3, name + 10);
      /* templates read from disk are compiled from their text by emit.lua */
      if (!disk && len > 5 && strcmp(name + len - 5, ".tmpl") == 0 && load_bytecode(L, name))
        lua_setfield(L, -2, name + 10);
    }
    free(disk);
  }
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "templates_bc");
  lua_pushvalue(L, -4);
  lua_setfield(L, -2, "templates");
  lua_pop(L, 6);
  lua_getglobal(L, "require");
  lua_pushstring(L, "attnc");
  lua_call(L, 1, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, "attnc.gen");
  return 0;
}

/* Turn the error object on top of the stack into err; pops it. */
static attnc_status lua_failure(lua_State *L, const char *spec_name, attnc_error *err)
{
  attnc_status code;
  if (lua_istable(L, -1)) {
    int line, col;
    lua_getfield(L, -1, "line");
    lua_getfield(L, -2, "col");
    lua_getfield(L, -3, "msg");
    line = (int)lua_tointeger(L, -3);
    col = (int)lua_tointeger(L, -2);
    code = attnc_err_set(err, ATTNC_ESPEC, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "invalid spec");
    if (err) {
      err->line = line;
      err->col = col;
      snprintf(err->where, sizeof err->where, "%s:%d:%d", spec_name ? spec_name : "spec", line, col);
    }
    lua_pop(L, 3);
  } else {
    const char *msg = lua_tostring(L, -1);
    code = attnc_err_set(err, ATTNC_EGEN, "generator error (please report): %s", msg ? msg : "(no message)");
  }
  lua_pop(L, 1);
  return code;
}

/* What luaL_newstate installs: a Lua error outside any protected call.
 * The host calls Lua only through lua_pcall, so this is never reached. */
static int host_panic(lua_State *L)
{
  (void)L;
  return 0;
}

/* The generator's memory.  Starting the generator and running it once
 * touches about 100 new pages, and page faults on a virtual machine are
 * slow enough to be a large part of a cold compile.  So the Lua state
 * takes its first allocations from a 1 MiB arena whose pages are
 * populated at once (one system call), bump allocated; freed arena blocks
 * are not reused (the last one is), and once the arena is used up
 * everything goes to malloc.  The state lives
 * as long as the process, so the arena is mapped once. */
#define ARENA_SIZE ((size_t)1 << 20)
#ifdef MADV_POPULATE_WRITE
#define ATTNC_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define ATTNC_MADV_POPULATE_WRITE 23 /* Linux's value; older headers lack it */
#endif
static unsigned char *arena;
static size_t arena_used, arena_last; /* the bump offset; the offset of the last block */

static int in_arena(const void *p)
{
  return arena && (const unsigned char *)p >= arena && (const unsigned char *)p < arena + ARENA_SIZE;
}

static void *arena_take(size_t n)
{
  size_t at = (arena_used + 15) & ~(size_t)15;
  if (!arena || n > ARENA_SIZE - at) return NULL;
  arena_last = at;
  arena_used = at + n;
  return arena + at;
}

static void *lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
  void *q;
  (void)ud;
  if (nsize == 0) {
    if (!in_arena(ptr)) free(ptr);
    else if ((unsigned char *)ptr == arena + arena_last) arena_used = arena_last; /* the last block: give it back */
    return NULL;
  }
  if (!ptr) return (q = arena_take(nsize)) ? q : malloc(nsize);
  if (!in_arena(ptr)) return realloc(ptr, nsize);
  if (nsize <= osize) return ptr; /* shrinking in place never fails */
  if ((unsigned char *)ptr == arena + arena_last && nsize <= ARENA_SIZE - arena_last) {
    arena_used = arena_last + nsize; /* the last block grows in place */
    return ptr;
  }
  q = arena_take(nsize);
  if (!q) q = malloc(nsize);
  if (q) memcpy(q, ptr, osize);
  return q; /* a failed growth leaves ptr as it was, as Lua requires */
}

static void create_state(void)
{
  lua_State *L;
  if (!arena && (arena = malloc(ARENA_SIZE))) {
    /* populate its pages in one call (Linux 5.14+; elsewhere they fault in
     * as usual).  From malloc, not mmap, so leak checkers see the Lua
     * state's later malloc blocks, which only the arena points to. */
    uintptr_t lo = ((uintptr_t)arena + 4095) & ~(uintptr_t)4095, hi = ((uintptr_t)arena + ARENA_SIZE) & ~(uintptr_t)4095;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, ATTNC_MADV_POPULATE_WRITE);
  }
  L = lua_newstate(lua_alloc, NULL);
  if (L) lua_atpanic(L, host_panic);
  if (!L) {
    snprintf(host_failure, sizeof host_failure, "out of memory creating a Lua state");
    return;
  }
  lua_pushcfunction(L, on_error);
  lua_pushcfunction(L, load_modules);
  if (lua_pcall(L, 0, 0, 1) != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    snprintf(host_failure, sizeof host_failure, "%s", msg ? msg : "(no message)");
    lua_close(L);
    return;
  }
  lua_pop(L, 1);
  host_L = L;
}

/* Call attnc.FN(spec, arg) protected; leaves the result on the stack. Caller holds host_lock. */
static attnc_status run_protected(const char *fn, const char *spec, const char *arg, const char *spec_name,
                                  attnc_error *err)
{
  lua_State *L;
  if (!host_L) create_state();
  L = host_L;
  if (!L)
    return attnc_err_set(err, ATTNC_EGEN, "could not start the Lua generator%s: %s",
                         getenv("ATTNC_SRC_DIR") ? " (from ATTNC_SRC_DIR)" : "", host_failure);
  lua_pushcfunction(L, on_error);
  lua_getfield(L, LUA_REGISTRYINDEX, "attnc.gen");
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  lua_pushstring(L, spec);
  lua_pushstring(L, arg);
  if (lua_pcall(L, 2, 1, -4) != LUA_OK) {
    attnc_status s = lua_failure(L, spec_name, err);
    lua_pop(L, 1); /* handler */
    return s;
  }
  lua_remove(L, -2); /* handler */
  return ATTNC_OK;
}

static char *dup_field(lua_State *L, int idx, const char *key)
{
  const char *s;
  size_t n;
  char *out;
  lua_getfield(L, idx, key);
  s = lua_tolstring(L, -1, &n);
  out = s ? malloc(n + 1) : NULL;
  if (out) memcpy(out, s, n + 1);
  lua_pop(L, 1);
  return out;
}

static lua_Integer int_field(lua_State *L, int idx, const char *key)
{
  lua_Integer v;
  lua_getfield(L, idx, key);
  v = lua_isboolean(L, -1) ? lua_toboolean(L, -1) : lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

static const char *str_field(lua_State *L, int idx, const char *key)
{
  const char *s;
  lua_getfield(L, idx, key);
  s = lua_tostring(L, -1); /* the table keeps it alive */
  lua_pop(L, 1);
  return s ? s : "";
}

/* Read a shape table at the top of the stack; names are looked up in g. */
static void read_shape(lua_State *L, const attnc_gen *g, attnc_shape *sh)
{
  int i, n = (int)luaL_len(L, -1);
  sh->rank = n > ATTNC_MAX_RANK ? ATTNC_MAX_RANK : n;
  for (i = 0; i < sh->rank; i++) {
    lua_geti(L, -1, i + 1);
    if (lua_isinteger(L, -1)) {
      sh->dim[i] = lua_tointeger(L, -1);
    } else {
      const char *nm = lua_tostring(L, -1);
      int d;
      sh->dim[i] = 0;
      for (d = 0; nm && d < g->ndims; d++)
        if (strcmp(g->dim_names[d], nm) == 0) sh->dim[i] = -(int64_t)(d + 1);
    }
    lua_pop(L, 1);
  }
}

/* A number field of the table at idx, or 0 when it is not a number (false: off). */
static double num_field(lua_State *L, int idx, const char *key)
{
  double v;
  lua_getfield(L, idx, key);
  v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0;
  lua_pop(L, 1);
  return v;
}

/* An optional shape field of the table at idx into *sh: 1 when present. */
static int opt_shape(lua_State *L, int idx, const char *key, const attnc_gen *g, attnc_shape *sh)
{
  int has;
  lua_getfield(L, idx, key);
  has = lua_istable(L, -1);
  if (has) read_shape(L, g, sh);
  lua_pop(L, 1);
  return has;
}

#define KEY_(name, key) #key,
static const char *const SLOT_KEYS[ATTNC_SLOT_COUNT] = { ATTNC_SLOT_LIST(KEY_) };
static const char *const EMPTY_ROWS_KEYS[ATTNC_EMPTY_COUNT] = { ATTNC_EMPTY_ROWS_LIST(KEY_) };
static const char *const CAUSAL_KEYS[ATTNC_CAUSAL_COUNT] = { ATTNC_CAUSAL_LIST(KEY_) };
#undef KEY_

/* The index of s in keys[0..n), or 0 (the generator only returns listed words). */
static int key_index(const char *const *keys, int n, const char *s)
{
  int i;
  for (i = 0; i < n; i++)
    if (strcmp(keys[i], s) == 0) return i;
  return 0;
}

const char *attnc_slot_name(int slot)
{
  return (slot >= 0 && slot < ATTNC_SLOT_COUNT) ? SLOT_KEYS[slot] : "?";
}

int attnc_slot_is_matrix(int slot)
{
  return slot == ATTNC_SLOT_WQ || slot == ATTNC_SLOT_WK || slot == ATTNC_SLOT_WV || slot == ATTNC_SLOT_WG ||
         slot == ATTNC_SLOT_WO;
}

int attnc_slot_is_weight(int slot)
{
  return slot >= ATTNC_SLOT_WQ && slot <= ATTNC_SLOT_WO_SCALE;
}

int attnc_slot_is_cache(int slot)
{
  if (slot == ATTNC_SLOT_CACHE_LEN) return 2;
  return slot == ATTNC_SLOT_K_CACHE || slot == ATTNC_SLOT_V_CACHE || slot == ATTNC_SLOT_K_CACHE_SCALE ||
         slot == ATTNC_SLOT_V_CACHE_SCALE;
}

int attnc_slot_scale(int slot)
{
  switch (slot) {
  case ATTNC_SLOT_WQ: return ATTNC_SLOT_WQ_SCALE;
  case ATTNC_SLOT_WK: return ATTNC_SLOT_WK_SCALE;
  case ATTNC_SLOT_WV: return ATTNC_SLOT_WV_SCALE;
  case ATTNC_SLOT_WG: return ATTNC_SLOT_WG_SCALE;
  case ATTNC_SLOT_WO: return ATTNC_SLOT_WO_SCALE;
  default: return -1;
  }
}

attnc_dtype attnc_slot_dtype(const attnc_gen *g, int slot)
{
  if (slot == ATTNC_SLOT_MASK) return ATTNC_U8;
  if (attnc_slot_is_matrix(slot)) return g->wdtype;
  if (slot == ATTNC_SLOT_K_CACHE || slot == ATTNC_SLOT_V_CACHE) return g->kv_dtype;
  if (slot == ATTNC_SLOT_CACHE_LEN) return ATTNC_I64;
  if (slot >= ATTNC_SLOT_WQ_SCALE || slot == ATTNC_SLOT_ROPE_FREQS) return ATTNC_F32;
  if (slot == ATTNC_SLOT_Q_POS || slot == ATTNC_SLOT_K_POS) return ATTNC_I64;
  return g->dtype;
}

attnc_dtype attnc_slot_store_dtype(const attnc_gen *g, int slot)
{
  const attnc_dtype kd = attnc_slot_dtype(g, slot);
  if (attnc_slot_is_matrix(slot) && g->wstore != ATTNC_I8 && kd != ATTNC_I8 && attnc_dtype_size(g->wstore) < attnc_dtype_size(kd))
    return g->wstore;
  return kd;
}

/* A spec's dtype word (f32, f64, bf16, f16, int8) as a tensor dtype; dflt when NULL. */
static attnc_dtype dtype_word(const char *dt, attnc_dtype dflt)
{
  if (!dt) return dflt;
  return strcmp(dt, "int8") == 0 ? ATTNC_I8 : strcmp(dt, "f64") == 0 ? ATTNC_F64 : strcmp(dt, "bf16") == 0 ? ATTNC_BF16
       : strcmp(dt, "f16") == 0 ? ATTNC_F16 : ATTNC_F32;
}

/* The dtype word in field k of the table at idx, or dflt when absent. */
static attnc_dtype dtype_field(lua_State *L, int idx, const char *k, attnc_dtype dflt)
{
  attnc_dtype d;
  lua_getfield(L, idx, k);
  d = dtype_word(lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL, dflt);
  lua_pop(L, 1);
  return d;
}

/* The cc backend's spec index (cc_index.c) stores this result as it is: when
 * what a field means changes, change INDEX_MAGIC there. */
static attnc_status read_gen(lua_State *L, attnc_gen *g, attnc_error *err)
{
  int t = lua_gettop(L), sp, i, n;
  const char *s;
  memset(g, 0, sizeof *g);
  lua_getfield(L, t, "spec"); /* the semantics, as gen/spec.lua parsed them */
  sp = lua_gettop(L);
  g->canonical = dup_field(L, t, "canonical");
  g->name = dup_field(L, t, "name");
  g->source = dup_field(L, t, "source");
  g->header = dup_field(L, t, "header");
  g->plain = (int)int_field(L, t, "plain");
  if (!g->canonical || !g->name || !g->source || !g->header) goto nomem;
  g->dtype = dtype_word(str_field(L, sp, "dtype"), ATTNC_F32);
  g->wdtype = dtype_field(L, sp, "weights", g->dtype);       /* full mode only */
  g->wstore = dtype_field(L, sp, "weights_word", g->wdtype); /* as written: the declared storage */
  g->kv_dtype = dtype_field(L, sp, "kv_dtype", g->dtype);    /* cache specs only */
  lua_getfield(L, sp, "dims");
  n = (int)luaL_len(L, -1);
  g->dim_names = calloc((size_t)(n > 0 ? n : 1), sizeof *g->dim_names);
  if (!g->dim_names) { lua_pop(L, 1); goto nomem; }
  for (i = 0; i < n; i++) {
    lua_geti(L, -1, i + 1);
    s = lua_tostring(L, -1);
    g->dim_names[i] = s ? strdup(s) : NULL;
    lua_pop(L, 1);
    if (!g->dim_names[i]) { lua_pop(L, 1); g->ndims = i; goto nomem; }
  }
  g->ndims = n;
  lua_pop(L, 1);

  lua_getfield(L, t, "inputs");
  n = (int)luaL_len(L, -1);
  for (i = 0; i < n; i++) {
    int slot;
    lua_geti(L, -1, i + 1);
    s = str_field(L, -1, "slot");
    for (slot = 0; slot < ATTNC_SLOT_COUNT; slot++)
      if (strcmp(SLOT_KEYS[slot], s) == 0) break;
    if (slot < ATTNC_SLOT_COUNT) {
      g->used[slot] = 1;
      g->optional[slot] = strcmp(str_field(L, -1, "role"), "optional") == 0;
      lua_getfield(L, -1, "shape");
      read_shape(L, g, &g->shape[slot]);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_getfield(L, t, "out");
  read_shape(L, g, &g->out);
  lua_pop(L, 1);
  lua_getfield(L, t, "mask");
  if (lua_istable(L, -1)) {
    g->has_mask = 1;
    g->used[ATTNC_SLOT_MASK] = 1;
    lua_getfield(L, -1, "batch");
    read_shape(L, g, &g->mask);
    lua_pop(L, 1);
    lua_getfield(L, -1, "Sk");
    if (g->mask.rank < ATTNC_MAX_RANK) {
      attnc_shape one;
      lua_newtable(L);
      lua_pushvalue(L, -2);
      lua_seti(L, -2, 1);
      read_shape(L, g, &one);
      lua_pop(L, 1);
      g->mask.dim[g->mask.rank++] = one.dim[0];
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);

  g->core = strcmp(str_field(L, sp, "mode"), "core") == 0;
  g->rank = (int)int_field(L, sp, "rank");
  g->axis = (int)int_field(L, sp, "axis") - 1;
  g->self = (int)int_field(L, sp, "self");
  g->heads = (int)int_field(L, sp, "heads");
  g->kv_heads = (int)int_field(L, sp, "kv_heads");
  g->head_dim = (int)int_field(L, sp, "head_dim");
  g->qkv_bias = (int)int_field(L, sp, "qkv_bias");
  g->out_bias = (int)int_field(L, sp, "out_bias");
  g->gated = (int)int_field(L, sp, "gated");
  g->global = (int)int_field(L, sp, "global");
  g->global_masked = strcmp(str_field(L, sp, "global_mean"), "masked") == 0;
  g->layout_bshc = strcmp(str_field(L, sp, "layout"), "bshc") == 0;
  s = str_field(L, sp, "causal");
  g->causal = key_index(CAUSAL_KEYS, ATTNC_CAUSAL_COUNT, s);
  s = str_field(L, sp, "empty_rows");
  g->empty_rows = key_index(EMPTY_ROWS_KEYS, ATTNC_EMPTY_COUNT, s);
  g->c_in = int_field(L, sp, "c_in");
  g->c_kv = int_field(L, sp, "c_kv");
  lua_getfield(L, sp, "scale");
  g->scale = lua_tonumber(L, -1);
  lua_pop(L, 1);
  g->softcap = num_field(L, sp, "softcap"); /* false when off: 0 */
  g->alibi = num_field(L, sp, "alibi");
  g->sinks = (int)int_field(L, sp, "sinks");
  g->train = (int)int_field(L, sp, "train");
  g->dropout = num_field(L, sp, "dropout"); /* false when off: 0 */
  s = str_field(L, sp, "rope");
  g->rope = strcmp(s, "neox") == 0 ? 1 : strcmp(s, "gptj") == 0 ? 2 : 0;
  g->rope_dim = (int)int_field(L, sp, "rope_dim");
  g->pe = strcmp(str_field(L, sp, "pe"), "sinusoidal") == 0;
  g->rope_theta = num_field(L, sp, "rope_theta");
  g->has_lse = opt_shape(L, t, "lse", g, &g->lse);
  lua_getfield(L, t, "positions");
  if (lua_istable(L, -1)) {
    g->has_positions = 1;
    lua_getfield(L, -1, "q");
    read_shape(L, g, &g->pos_shape[0]);
    lua_pop(L, 1);
    lua_getfield(L, -1, "k");
    read_shape(L, g, &g->pos_shape[1]);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  g->has_attn = opt_shape(L, t, "attn", g, &g->attn);
  if (g->used[ATTNC_SLOT_K_CACHE]) { /* CAP: the caches' second last axis, a constant or a named dim */
    const attnc_shape *kc = &g->shape[ATTNC_SLOT_K_CACHE];
    g->has_cache = 1;
    g->cache_cap = kc->rank >= 2 ? kc->dim[kc->rank - 2] : 0;
  }
  lua_getfield(L, sp, "window");
  if (lua_istable(L, -1)) {
    g->has_window = 1;
    lua_geti(L, -1, 1);
    g->window_l = lua_tointeger(L, -1);
    lua_geti(L, -2, 2);
    g->window_r = lua_tointeger(L, -1);
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  lua_getfield(L, sp, "bias");
  if (lua_istable(L, -1)) {
    g->has_bias = 1;
    read_shape(L, g, &g->bias);
  }
  lua_pop(L, 1);
  lua_settop(L, t);
  return ATTNC_OK;
nomem:
  lua_settop(L, t);
  attnc_gen_free(g);
  return attnc_err_set(err, ATTNC_ENOMEM, "out of memory reading the generator's result");
}

attnc_status attnc_host_generate(const char *spec, const char *spec_name, int plain, attnc_gen *g, attnc_error *err)
{
  attnc_status s;
  if (!spec) return attnc_err_set(err, ATTNC_EARG, "the spec is NULL");
  pthread_mutex_lock(&host_lock);
  s = run_protected("generate", spec, plain ? "plain" : "fast", spec_name, err);
  if (s == ATTNC_OK) {
    s = read_gen(host_L, g, err);
    lua_pop(host_L, 1);
    lua_gc(host_L, LUA_GCSTEP, 0); /* a step, not a full collection: keeps compiles fast */
  }
  pthread_mutex_unlock(&host_lock);
  return s;
}

attnc_status attnc_host_canonical(const char *spec, const char *spec_name, char **canonical, attnc_error *err)
{
  attnc_status s;
  if (!spec) return attnc_err_set(err, ATTNC_EARG, "the spec is NULL");
  pthread_mutex_lock(&host_lock);
  s = run_protected("canonical", spec, "", spec_name, err);
  if (s == ATTNC_OK) {
    const char *c = lua_tostring(host_L, -1);
    *canonical = c ? strdup(c) : NULL;
    lua_pop(host_L, 1);
    if (!*canonical) s = attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
  }
  pthread_mutex_unlock(&host_lock);
  return s;
}

void attnc_gen_free(attnc_gen *g)
{
  int i;
  if (!g) return;
  free(g->canonical);
  free(g->name);
  free(g->source);
  free(g->header);
  if (g->dim_names)
    for (i = 0; i < g->ndims; i++) free(g->dim_names[i]);
  free(g->dim_names);
  memset(g, 0, sizeof *g);
}
