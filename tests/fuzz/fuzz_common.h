/* Checks shared by the spec and generator harnesses.  Every failed check
 * prints what was wrong and aborts, so libFuzzer records the input as a
 * crash. */
#ifndef ATTNC_FUZZ_COMMON_H
#define ATTNC_FUZZ_COMMON_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

static void fuzz_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fuzz_fail(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "\n==== attnc fuzz check failed: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  abort();
}

/* A NUL-terminated copy of the fuzz input. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

static inline int is_ident_char(int c, int first)
{
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (!first && c >= '0' && c <= '9');
}

/* [A-Za-z_][A-Za-z0-9_]*, 1..48 characters (spec.lua's MAX_NAME). */
static inline int is_ident_n(const char *s, size_t n)
{
  size_t i;
  if (n < 1 || n > 48) return 0;
  for (i = 0; i < n; i++)
    if (!is_ident_char((unsigned char)s[i], i == 0)) return 0;
  return 1;
}

static const char *const C_KEYWORDS[] = {
  "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
  "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
  "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
  "volatile", "while", "_Bool", "_Complex", "_Imaginary", "main", NULL
};

static inline int is_c_keyword_n(const char *s, size_t n)
{
  int i;
  for (i = 0; C_KEYWORDS[i]; i++)
    if (strlen(C_KEYWORDS[i]) == n && memcmp(C_KEYWORDS[i], s, n) == 0) return 1;
  return 0;
}

static inline int is_uint_n(const char *s, size_t n, int allow_zero)
{
  size_t i;
  if (n < 1 || n > 10) return 0;
  for (i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  if (n > 1 && s[0] == '0') return 0;             /* canonical: no leading zeros */
  if (!allow_zero && n == 1 && s[0] == '0') return 0;
  return 1;
}

static inline int eq_n(const char *s, size_t n, const char *lit)
{
  return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static inline int one_of_n(const char *s, size_t n, const char *const *list)
{
  for (; *list; list++)
    if (eq_n(s, n, *list)) return 1;
  return 0;
}

/* Comma-separated dims, each a positive integer or a non-keyword identifier. */
static inline int is_shape_n(const char *s, size_t n)
{
  size_t i = 0;
  int count = 0;
  while (i <= n) {
    size_t j = i;
    while (j < n && s[j] != ',') j++;
    if (!(is_uint_n(s + i, j - i, 0) || (is_ident_n(s + i, j - i) && !is_c_keyword_n(s + i, j - i))))
      return 0;
    count++;
    i = j + 1;
  }
  return count >= 1 && count <= 8;
}

/* The canonical spec: single-space separated key=value words, only safe
 * bytes, known keys at most once, every value of its kind. */
static inline void check_canonical(const char *c, const char *input)
{
  static const char *const KEYS[] = {
    "mode", "x", "kv", "q", "attn_dim", "heads", "kv_heads", "head_dim", "qkv_bias", "out_bias",
    "gated", "global", "global_mean", "bias", "mask", "causal", "window", "scale", "empty_rows",
    "dtype", "name", NULL
  };
  static const char *const MUST[] = { "mode", "mask", "causal", "window", "scale", "empty_rows", "dtype", "name", NULL };
  static const char *const BOOLS[] = { "true", "false", NULL };
  static const char *const MODES[] = { "full", "core", NULL };
  static const char *const MASKS[] = { "key", "none", NULL };
  static const char *const CAUSAL[] = { "top_left", "bottom_right", "none", NULL };
  static const char *const EMPTY[] = { "zero", "uniform", "nan", NULL };
  static const char *const DTYPES[] = { "f32", "f64", NULL };
  static const char *const GMEAN[] = { "plain", "masked", NULL };
  unsigned seen = 0;
  size_t n = strlen(c), i = 0;
  int k, nwords = 0;
  const char *last_key = NULL;

  if (n == 0) fuzz_fail("empty canonical spec for input [%s]", input);
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)c[i];
    if (!(is_ident_char(ch, 0) || ch == '=' || ch == ',' || ch == '.' || ch == '+' || ch == '-' || ch == ' '))
      fuzz_fail("canonical spec holds byte 0x%02x at %zu: [%s]", ch, i, c);
  }
  i = 0;
  while (i < n) {
    size_t e = i, eq, vlen;
    const char *key, *v;
    size_t klen;
    while (e < n && c[e] != ' ') e++;
    if (e == i) fuzz_fail("empty word (double or edge space) in canonical spec [%s]", c);
    for (eq = i; eq < e && c[eq] != '='; eq++) {}
    if (eq == e) fuzz_fail("word without '=' in canonical spec [%s]", c);
    key = c + i; klen = eq - i; v = c + eq + 1; vlen = e - eq - 1;
    for (k = 0; KEYS[k]; k++)
      if (eq_n(key, klen, KEYS[k])) break;
    if (!KEYS[k]) fuzz_fail("unknown key '%.*s' in canonical spec [%s]", (int)klen, key, c);
    if (seen & (1u << k)) fuzz_fail("key '%s' twice in canonical spec [%s]", KEYS[k], c);
    seen |= 1u << k;
    if (nwords == 0 && strcmp(KEYS[k], "mode") != 0) fuzz_fail("canonical spec does not start with mode= [%s]", c);
    last_key = KEYS[k];
    nwords++;
#define BAD(what) fuzz_fail("%s value '%.*s' is not %s in canonical spec [%s]", KEYS[k], (int)vlen, v, what, c)
    if (!strcmp(KEYS[k], "x") || !strcmp(KEYS[k], "kv") || !strcmp(KEYS[k], "q") || !strcmp(KEYS[k], "bias")) {
      if (!is_shape_n(v, vlen)) BAD("a shape");
    } else if (!strcmp(KEYS[k], "attn_dim")) {
      if (!(vlen >= 2 && v[0] == '-' && is_uint_n(v + 1, vlen - 1, 0))) BAD("a negative integer");
    } else if (!strcmp(KEYS[k], "heads") || !strcmp(KEYS[k], "kv_heads") || !strcmp(KEYS[k], "head_dim")) {
      if (!is_uint_n(v, vlen, 0)) BAD("a positive integer");
    } else if (!strcmp(KEYS[k], "qkv_bias") || !strcmp(KEYS[k], "out_bias") || !strcmp(KEYS[k], "gated") ||
               !strcmp(KEYS[k], "global")) {
      if (!one_of_n(v, vlen, BOOLS)) BAD("true/false");
    } else if (!strcmp(KEYS[k], "mode")) {
      if (!one_of_n(v, vlen, MODES)) BAD("a mode");
    } else if (!strcmp(KEYS[k], "mask")) {
      if (!one_of_n(v, vlen, MASKS)) BAD("a mask kind");
    } else if (!strcmp(KEYS[k], "causal")) {
      if (!one_of_n(v, vlen, CAUSAL)) BAD("a causal kind");
    } else if (!strcmp(KEYS[k], "empty_rows")) {
      if (!one_of_n(v, vlen, EMPTY)) BAD("an empty_rows kind");
    } else if (!strcmp(KEYS[k], "dtype")) {
      if (!one_of_n(v, vlen, DTYPES)) BAD("a dtype");
    } else if (!strcmp(KEYS[k], "global_mean")) {
      if (!one_of_n(v, vlen, GMEAN)) BAD("a global_mean kind");
    } else if (!strcmp(KEYS[k], "window")) {
      size_t cm;
      for (cm = 0; cm < vlen && v[cm] != ','; cm++) {}
      if (!eq_n(v, vlen, "none") && !(cm < vlen && is_uint_n(v, cm, 1) && is_uint_n(v + cm + 1, vlen - cm - 1, 1)))
        BAD("none or L,R");
    } else if (!strcmp(KEYS[k], "scale")) {
      char tmp[64], *end;
      double d;
      size_t j;
      if (vlen == 0 || vlen >= sizeof tmp) BAD("a short number");
      for (j = 0; j < vlen; j++)
        if (!((v[j] >= '0' && v[j] <= '9') || v[j] == '.' || v[j] == 'e' || v[j] == '-' || v[j] == '+')) BAD("a decimal number");
      memcpy(tmp, v, vlen);
      tmp[vlen] = '\0';
      d = strtod(tmp, &end);
      if (*end || d != d || d > 1.7976931348623157e308 || d < -1.7976931348623157e308) BAD("a finite number");
    } else if (!strcmp(KEYS[k], "name")) {
      if (!is_ident_n(v, vlen) || is_c_keyword_n(v, vlen)) BAD("a C identifier");
    }
#undef BAD
    i = e;
    if (i < n) {
      i++;
      if (i == n) fuzz_fail("trailing space in canonical spec [%s]", c);
    }
  }
  for (k = 0; MUST[k]; k++) {
    int j;
    for (j = 0; KEYS[j] && strcmp(KEYS[j], MUST[k]); j++) {}
    if (!(seen & (1u << j))) fuzz_fail("canonical spec lacks %s= [%s]", MUST[k], c);
  }
  if (!last_key || strcmp(last_key, "name") != 0) fuzz_fail("canonical spec does not end with name= [%s]", c);
}

/* Messages are printable ASCII, never raw input bytes. */
static inline void check_message(const attnc_error *err, const char *input)
{
  const unsigned char *p = (const unsigned char *)err->message;
  if (!*p) fuzz_fail("empty error message (code %d) for input [%s]", (int)err->code, input);
  for (; *p; p++)
    if (*p < 0x20 || *p > 0x7e)
      fuzz_fail("error message holds byte 0x%02x: [%s]", *p, err->message);
}

#endif
