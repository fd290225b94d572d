/* Lua-level coverage for libFuzzer (see lua_cov.c).  Call luacov_reset()
 * at the start of each input and luacov_collect() at its end. */
#ifndef ATTNC_FUZZ_LUA_COV_H
#define ATTNC_FUZZ_LUA_COV_H

void luacov_reset(void);
void luacov_collect(void);

#endif
