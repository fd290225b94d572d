/* libFuzzer harness: the generator (parse + plan + emit, no compiling).
 *
 * The input, as a NUL-terminated string, goes to attnc_generate.
 * Checks (any failure aborts):
 *  - the status is ATTNC_OK or ATTNC_ESPEC: a spec the parser accepts must
 *    never make the planner or emitter fail (ATTNC_EGEN);
 *  - on success, the canonical spec holds only safe bytes, and every value
 *    in it is of its kind (name= and dim names are C identifiers, numbers
 *    are numbers: fuzz_common.h);
 *  - the generated C and header are printable ASCII plus newlines, carry
 *    the canonical spec verbatim where the templates put it, and lex as
 *    C: every comment, string and character literal ends, no string spans
 *    a line, no comment opens inside a comment;
 *  - the output depends on the canonical spec only: generating from
 *    canonical(s) gives byte-identical C and header.  With the byte
 *    whitelist above, this means no other byte of the input can reach the
 *    generated code.
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
static char canon[CANON_MAX];

static void check_text(const char *what, const char *text, const char *canonical)
{
  const unsigned char *p = (const unsigned char *)text;
  enum { CODE, BLOCK, LINE, STR, CHR } state = CODE;
  size_t line = 1;
  for (; *p; p++) {
    if (!((*p >= 0x20 && *p <= 0x7e) || *p == '\n'))
      fuzz_fail("%s holds byte 0x%02x on line %zu (canonical: %s)", what, *p, line, canonical);
    switch (state) {
    case CODE:
      if (p[0] == '/' && p[1] == '*') { state = BLOCK; p++; }
      else if (p[0] == '/' && p[1] == '/') { state = LINE; p++; }
      else if (p[0] == '"') state = STR;
      else if (p[0] == '\'') state = CHR;
      break;
    case BLOCK:
      if (p[0] == '/' && p[1] == '*')
        fuzz_fail("%s opens a comment inside a comment on line %zu (canonical: %s)", what, line, canonical);
      if (p[0] == '*' && p[1] == '/') { state = CODE; p++; }
      break;
    case LINE:
      if (p[0] == '\n') state = CODE;
      break;
    case STR:
    case CHR:
      if (p[0] == '\\' && p[1] && p[1] != '\n') p++;
      else if (p[0] == '\n')
        fuzz_fail("%s has a %s literal running past line %zu (canonical: %s)", what,
                  state == STR ? "string" : "character", line, canonical);
      else if ((state == STR && p[0] == '"') || (state == CHR && p[0] == '\'')) state = CODE;
      break;
    }
    if (*p == '\n') line++;
  }
  if (state == BLOCK || state == STR || state == CHR)
    fuzz_fail("%s ends inside a %s (canonical: %s)", what,
              state == BLOCK ? "comment" : state == STR ? "string" : "character literal", canonical);
}

static void check_contains(const char *what, const char *text, const char *pre, const char *mid, const char *post)
{
  size_t n = strlen(pre) + strlen(mid) + strlen(post) + 1;
  char *needle = malloc(n);
  if (!needle) abort();
  snprintf(needle, n, "%s%s%s", pre, mid, post);
  if (!strstr(text, needle)) fuzz_fail("%s does not contain [%s]", what, needle);
  free(needle);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  attnc_error err;
  attnc_status st;
  char *spec = fuzz_cstr(data, size);
  char *src = NULL, *hdr = NULL, *src2 = NULL, *hdr2 = NULL;
  const char *name;
  size_t nlen;

  luacov_reset();
  st = attnc_generate(spec, NULL, &src, &hdr, &err);
  if (st != ATTNC_OK && st != ATTNC_ESPEC)
    fuzz_fail("attnc_generate returned %d (%s): %s\n  spec: %s", (int)st, attnc_strerror(st), err.message, spec);
  if (st == ATTNC_ESPEC) {
    check_message(&err, spec);
    free(spec);
    luacov_collect();
    return 0;
  }
  if (!src || !hdr) fuzz_fail("attnc_generate succeeded without source or header");

  st = attnc_spec_canonical(spec, NULL, canon, sizeof canon, &err);
  if (st != ATTNC_OK)
    fuzz_fail("attnc_generate accepts a spec attnc_spec_canonical refuses (%d): %s", (int)st, err.message);
  check_canonical(canon, spec);

  check_text("generated C", src, canon);
  check_text("generated header", hdr, canon);
  check_contains("generated C", src, "\n * spec:      ", canon, "\n");
  check_contains("generated header", hdr, "\n * spec:      ", canon, "\n");
  name = strstr(canon, " name=");
  if (!name) fuzz_fail("no name= in canonical [%s]", canon);
  name += 6;
  nlen = strlen(name);
  if (!is_ident_n(name, nlen)) fuzz_fail("name '%s' is not an identifier", name);
  {
    char pre[128];
    snprintf(pre, sizeof pre, "const char %s_spec[] = \"", name);
    check_contains("generated C", src, pre, canon, "\";\n");
  }

  /* Output is a function of the canonical spec alone. */
  st = attnc_generate(canon, NULL, &src2, &hdr2, &err);
  if (st != ATTNC_OK)
    fuzz_fail("generating from the canonical spec fails (%d): %s\n  canonical: %s", (int)st, err.message, canon);
  if (strcmp(src, src2) != 0) fuzz_fail("generated C differs between s and canonical(s) = %s", canon);
  if (strcmp(hdr, hdr2) != 0) fuzz_fail("generated header differs between s and canonical(s) = %s", canon);

  free(src);
  free(hdr);
  free(src2);
  free(hdr2);
  free(spec);
  luacov_collect();
  return 0;
}
