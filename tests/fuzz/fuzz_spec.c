/* libFuzzer harness: the spec parser and canonicaliser.
 *
 * The input, as a NUL-terminated string, goes to attnc_spec_canonical.
 * Checks (any failure aborts):
 *  - the status is ATTNC_OK or ATTNC_ESPEC: never ATTNC_EGEN (a Lua error
 *    that is not a spec error), never anything else;
 *  - a refusal has a printable-ASCII message and a position inside the
 *    input ("spec:LINE:COL", LINE and COL at least 1);
 *  - an accepted spec's canonical form holds only safe bytes and
 *    well-formed key=value words (fuzz_common.h), and is a fixed point:
 *    canonical(canonical(s)) == canonical(s);
 *  - appending a newline changes nothing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "fuzz_common.h"
#include "lua_cov.h"

#define CANON_MAX (256 * 1024)
static char canon1[CANON_MAX], canon2[CANON_MAX], canon3[CANON_MAX];

static void check_refusal(const char *spec, const attnc_error *err)
{
  char where[64];
  long lines = 1, len = 0, cur = 0;
  const char *p;
  check_message(err, spec);
  if (err->line < 1 || err->col < 1)
    fuzz_fail("refusal without a position (line %d, col %d): %s", err->line, err->col, err->message);
  snprintf(where, sizeof where, "spec:%d:%d", err->line, err->col);
  if (strcmp(where, err->where) != 0)
    fuzz_fail("where is '%s', expected '%s'", err->where, where);
  for (p = spec; *p; p++) {
    if (*p == '\n') {
      if (lines == err->line) len = cur;
      lines++;
      cur = 0;
    } else {
      cur++;
    }
  }
  if (lines == err->line) len = cur;
  if (err->line > lines)
    fuzz_fail("error line %d is past the last line %ld: %s", err->line, lines, err->message);
  if (err->col > len + 1)
    fuzz_fail("error column %d is past the end of line %d (%ld bytes): %s", err->col, err->line, len, err->message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  attnc_error err;
  attnc_status st, st2;
  char *spec = fuzz_cstr(data, size), *spec_nl;
  size_t n = strlen(spec);

  luacov_reset();
  st = attnc_spec_canonical(spec, NULL, canon1, sizeof canon1, &err);
  if (st != ATTNC_OK && st != ATTNC_ESPEC)
    fuzz_fail("attnc_spec_canonical returned %d (%s): %s", (int)st, attnc_strerror(st), err.message);
  if (st == ATTNC_ESPEC) {
    check_refusal(spec, &err);
  } else {
    check_canonical(canon1, spec);
    st2 = attnc_spec_canonical(canon1, NULL, canon2, sizeof canon2, &err);
    if (st2 != ATTNC_OK)
      fuzz_fail("the canonical spec is refused (%d): %s\n  canonical: %s", (int)st2, err.message, canon1);
    if (strcmp(canon1, canon2) != 0)
      fuzz_fail("canonical is not a fixed point:\n  c(s)    = %s\n  c(c(s)) = %s", canon1, canon2);
  }

  /* A trailing newline is whitespace (and ends a comment): same outcome. */
  spec_nl = malloc(n + 2);
  if (!spec_nl) abort();
  memcpy(spec_nl, spec, n);
  spec_nl[n] = '\n';
  spec_nl[n + 1] = '\0';
  st2 = attnc_spec_canonical(spec_nl, NULL, canon3, sizeof canon3, &err);
  if (st2 != st)
    fuzz_fail("appending a newline changes the status from %d to %d (%s)", (int)st, (int)st2, err.message);
  if (st == ATTNC_OK && strcmp(canon1, canon3) != 0)
    fuzz_fail("appending a newline changes the canonical spec:\n  %s\n  %s", canon1, canon3);
  free(spec_nl);
  free(spec);
  luacov_collect();
  return 0;
}
