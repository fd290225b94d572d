/* Lua-level coverage for libFuzzer.
 *
 * The spec parser, planner and emitter are Lua (the gen/ modules, embedded
 * in the library), and liblua is not instrumented, so the compiler's
 * coverage sees only the thin C host.  This file feeds libFuzzer edge
 * coverage of the *Lua* code instead: a line hook hashes (chunk, line,
 * previous line) into an 8-bit counter array placed in the
 * __libfuzzer_extra_counters section, which libFuzzer reads after every
 * input like its own counters.
 *
 * The hook goes on the library's Lua state without touching runtime/:
 * build.sh links with -Wl,--wrap=lua_newstate, so host.c's call lands in
 * __wrap_lua_newstate below.  This file is compiled WITHOUT
 * -fsanitize=fuzzer (build.sh): instrumenting the hook would swamp the
 * signal with its own comparisons and cost more than the Lua it records.
 * ATTNC_FUZZ_NO_LUA_COV=1 turns the hook off (to compare).
 */
#include <stdint.h>
#include <stdlib.h>

#include <lua.h>

#include "attnc.h"
#include "lua_cov.h"

#define LUACOV_N (1u << 16)

__attribute__((used, section("__libfuzzer_extra_counters")))
static uint8_t luacov_counters[LUACOV_N];
static uint32_t luacov_prev;
static lua_State *luacov_L;

void luacov_reset(void) { luacov_prev = 0; }

/* Settle the library's Lua state at the end of an input, so that the
 * input's allocations are all freed within the input.  libFuzzer re-runs
 * an input and scans for leaks whenever it makes more mallocs than frees,
 * and after 1000 such scans turns leak detection off: without this, every
 * accepted spec left one string behind (Lua's lua_pushstring cache keeps
 * the last long string pushed from each address until another replaces
 * it), which made the harness 5x slower and then blind to real C leaks.
 * Parsing an empty spec evicts it; a full collection frees the rest.
 * The harnesses are single-threaded. */
void luacov_collect(void)
{
  attnc_error err;
  char buf[16];
  (void)attnc_spec_canonical("", NULL, buf, sizeof buf, &err);
  if (luacov_L) lua_gc(luacov_L, LUA_GCCOLLECT, 0);
}

static void luacov_hook(lua_State *L, lua_Debug *ar)
{
  uint32_t h = 2166136261u, idx;
  const char *s;
  int i;
  if (ar->event != LUA_HOOKLINE || !lua_getinfo(L, "S", ar)) return;
  s = ar->source ? ar->source : "";
  for (i = 0; i < 32 && s[i]; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
  h ^= (uint32_t)ar->currentline * 2654435761u;
  idx = (h ^ luacov_prev) & (LUACOV_N - 1);
  if (luacov_counters[idx] != 255) luacov_counters[idx]++;
  luacov_prev = h >> 1;
}

lua_State *__real_lua_newstate(lua_Alloc f, void *ud);
lua_State *__wrap_lua_newstate(lua_Alloc f, void *ud);
lua_State *__wrap_lua_newstate(lua_Alloc f, void *ud)
{
  lua_State *L = __real_lua_newstate(f, ud);
  const char *off = getenv("ATTNC_FUZZ_NO_LUA_COV");
  if (L && !(off && *off == '1')) lua_sethook(L, luacov_hook, LUA_MASKLINE, 0);
  luacov_L = L;
  return L;
}
