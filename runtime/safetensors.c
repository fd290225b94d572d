/* safetensors: read and write the format, and the dtype helpers.
 *
 * A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 * (possibly padded with trailing spaces), then the data section.  The JSON
 * is an object mapping tensor names to {"dtype", "shape", "data_offsets"},
 * plus an optional "__metadata__" object of strings, which is checked and
 * ignored.
 *
 * Files come from the internet, so the reader trusts nothing: the JSON
 * reader below is written for exactly this schema (strings, integers,
 * arrays and objects, nested at most three deep, no recursion), every size
 * is checked for overflow, and every failure is an ATTNC_EFORMAT naming
 * the problem and the tensor.  The whole file is held in memory; the data
 * section lives in a 64-byte aligned buffer and a tensor whose offset is
 * not a multiple of its dtype's size gets its own aligned copy.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "internal.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

/* Readers refuse longer headers (the same limit as the reference reader). */
#define ST_MAX_HEADER ((uint64_t)100000000u)
/* Alignment of the data section and of every copied tensor. */
#define ST_ALIGN 64
/* Largest single read() or write() request. */
#define ST_IO_CHUNK ((size_t)1 << 30)

/* ---------------------------------------------------------------- dtypes */

static const struct {
  const char *name;
  size_t size;
} dtype_table[] = {
  {"F32", 4}, {"F64", 8}, {"F16", 2}, {"BF16", 2},
  {"I8", 1},  {"I16", 2}, {"I32", 4}, {"I64", 8},
  {"U8", 1},  {"U16", 2}, {"U32", 4}, {"U64", 8}, {"BOOL", 1}
};
#define ST_NDTYPES (sizeof dtype_table / sizeof dtype_table[0])
#define ST_DTYPE_LIST "F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, BOOL"

static int dtype_valid(attnc_dtype d)
{
  return (int)d >= 0 && (size_t)(int)d < ST_NDTYPES;
}

const char *attnc_dtype_name(attnc_dtype d)
{
  return dtype_valid(d) ? dtype_table[(int)d].name : "?";
}

size_t attnc_dtype_size(attnc_dtype d)
{
  return dtype_valid(d) ? dtype_table[(int)d].size : 0;
}

/* Exact, case-sensitive safetensors spelling. */
int attnc_dtype_parse(const char *s, attnc_dtype *d)
{
  size_t i;
  if (!s) return 0;
  for (i = 0; i < ST_NDTYPES; i++) {
    if (strcmp(s, dtype_table[i].name) == 0) {
      if (d) *d = (attnc_dtype)i;
      return 1;
    }
  }
  return 0;
}

/* --------------------------------------------------------------- helpers */

/* n bytes aligned to ST_ALIGN; *raw gets the pointer to free().  Never
 * returns NULL for n == 0 unless out of memory. */
static void *alloc_aligned(size_t n, void **raw)
{
  unsigned char *p;
  uintptr_t a;
  *raw = NULL;
  if (n > SIZE_MAX - ST_ALIGN) return NULL;
  p = malloc(n + ST_ALIGN);
  if (!p) return NULL;
  *raw = p;
  a = ((uintptr_t)p + (ST_ALIGN - 1)) & ~(uintptr_t)(ST_ALIGN - 1);
  return p + (a - (uintptr_t)p);
}

/* Length of the valid UTF-8 sequence at p (at most avail bytes), or 0 if
 * it is malformed, overlong, a surrogate or above U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, size_t avail)
{
  unsigned c = p[0];
  uint32_t cp, min;
  size_t len, i;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
  else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
  else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
  else return 0;
  if (avail < len) return 0;
  for (i = 1; i < len; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

/* A tensor name made safe and short for a message. */
typedef struct { char s[100]; } shown;

static const char *show(shown *b, const char *name)
{
  const unsigned char *p = (const unsigned char *)name;
  size_t o = 0, len, i;
  while (*p) {
    unsigned c = *p;
    if (c < 0x20 || c == 0x7F) len = 4;            /* \xNN */
    else if (c < 0x80) len = 1;
    else if (c >= 0xF0) len = 4;
    else if (c >= 0xE0) len = 3;
    else if (c >= 0xC0) len = 2;
    else len = 1;
    if (o + len + 4 > sizeof b->s) {
      memcpy(b->s + o, "...", 4);
      return b->s;
    }
    if (c < 0x20 || c == 0x7F) {
      snprintf(b->s + o, 5, "\\x%02x", c);
      o += 4;
      p++;
      continue;
    }
    for (i = 0; i < len && p[i]; i++) b->s[o++] = (char)p[i];
    p += i;
  }
  b->s[o] = '\0';
  return b->s;
}

static void format_shape(char *buf, size_t n, const int64_t *shape, int rank)
{
  size_t o = 0;
  int i;
  o += (size_t)snprintf(buf, n, "[");
  for (i = 0; i < rank && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", shape[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

/* Fill err with code and "src: message". */
static attnc_status src_fail(attnc_error *err, attnc_status code, const char *src,
                             const char *fmt, ...) ATTNC_PRINTF(4, 5);
static attnc_status src_fail(attnc_error *err, attnc_status code, const char *src,
                             const char *fmt, ...)
{
  char buf[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return attnc_err_set(err, code, "%s: %s", src, buf);
}

/* ------------------------------------------------------- the file object */

typedef struct st_entry {
  const char *name;      /* in the string pool */
  attnc_dtype dtype;
  int rank;
  int64_t shape[ATTNC_MAX_RANK];
  uint64_t begin, end;   /* data_offsets */
  void *ptr;             /* aligned data */
  void *own;             /* malloc'd block behind ptr when copied, else NULL */
} st_entry;

struct attnc_safetensors {
  st_entry *e;
  size_t n, cap;
  st_entry **by_name;    /* sorted by name, for attnc_st_find */
  char *pool;            /* every decoded header string */
  void *data_raw;        /* block behind data */
  unsigned char *data;   /* the data section, ST_ALIGN-aligned */
  size_t data_len;
};

void attnc_st_close(attnc_safetensors *f)
{
  size_t i;
  if (!f) return;
  for (i = 0; i < f->n; i++) free(f->e[i].own);
  free(f->e);
  free(f->by_name);
  free(f->pool);
  free(f->data_raw);
  free(f);
}

size_t attnc_st_count(const attnc_safetensors *f)
{
  return f ? f->n : 0;
}

const char *attnc_st_name(const attnc_safetensors *f, size_t i)
{
  return f && i < f->n ? f->e[i].name : NULL;
}

static void fill_tensor(const st_entry *e, attnc_tensor *t)
{
  int i;
  memset(t, 0, sizeof *t);
  t->dtype = e->dtype;
  t->rank = e->rank;
  for (i = 0; i < e->rank; i++) t->shape[i] = e->shape[i];
  t->data = e->ptr;
}

attnc_status attnc_st_get(const attnc_safetensors *f, size_t i, attnc_tensor *t)
{
  if (!f || !t || i >= f->n) return ATTNC_EARG;
  fill_tensor(&f->e[i], t);
  return ATTNC_OK;
}

attnc_status attnc_st_find(const attnc_safetensors *f, const char *name, attnc_tensor *t)
{
  size_t lo, hi;
  if (!f || !name || !t) return ATTNC_EARG;
  lo = 0;
  hi = f->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(name, f->by_name[mid]->name);
    if (c == 0) {
      fill_tensor(f->by_name[mid], t);
      return ATTNC_OK;
    }
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return ATTNC_EMISSING;
}

/* ------------------------------------------------------ the JSON header */

typedef struct reader {
  const unsigned char *s;  /* the header */
  size_t n, pos;
  char *pool;              /* n + 1 bytes: enough for every decoded string */
  size_t pool_used, pool_cap;
  size_t data_len;
  const char *src;         /* path or "<memory>" for messages */
  attnc_error *err;
} reader;

static attnc_status rfail(reader *r, const char *fmt, ...) ATTNC_PRINTF(2, 3);
static attnc_status rfail(reader *r, const char *fmt, ...)
{
  char buf[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return attnc_err_set(r->err, ATTNC_EFORMAT, "%s: %s", r->src, buf);
}

static int peek(const reader *r)
{
  return r->pos < r->n ? r->s[r->pos] : -1;
}

static void skip_ws(reader *r)
{
  while (r->pos < r->n) {
    unsigned char c = r->s[r->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    r->pos++;
  }
}

/* After an item of an array or object: skips spaces, then a ',' (0: more
 * items follow) or `close` (1: the list ends); -1, reading nothing, for
 * anything else. */
static int list_next(reader *r, int close)
{
  skip_ws(r);
  if (peek(r) == ',' || peek(r) == close) return r->s[r->pos++] == close;
  return -1;
}

static const char *found(const reader *r, char *buf, size_t n)
{
  int c = peek(r);
  if (c < 0) return "the end of the header";
  if (c >= 0x20 && c < 0x7F) snprintf(buf, n, "'%c'", c);
  else snprintf(buf, n, "byte 0x%02x", (unsigned)c);
  return buf;
}

/* A JSON syntax error at the current position. */
static attnc_status jfail(reader *r, const char *expected)
{
  char buf[24];
  return rfail(r, "invalid JSON header at byte %zu: expected %s, found %s",
               r->pos, expected, found(r, buf, sizeof buf));
}

static attnc_status expect_char(reader *r, int c, const char *expected)
{
  skip_ws(r);
  if (peek(r) != c) return jfail(r, expected);
  r->pos++;
  return ATTNC_OK;
}

static int hexval(int c)
{
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Four hex digits at r->pos (consumed), or -1. */
static long hex4(reader *r)
{
  long v = 0;
  int i;
  if (r->n - r->pos < 4) return -1;
  for (i = 0; i < 4; i++) {
    int h = hexval(r->s[r->pos + (size_t)i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  r->pos += 4;
  return v;
}

/* Parse a string at the current position (after whitespace) into the pool.
 * Each string decodes to at most its raw length minus one (the quotes pay
 * for the terminator), so n + 1 pool bytes hold every string of the header;
 * the bound is still checked. */
static attnc_status jstring(reader *r, char **out, size_t *outlen)
{
  size_t start, k = 0, avail;
  char *o;
  skip_ws(r);
  if (peek(r) != '"') return jfail(r, "a string");
  start = r->pos++;
  o = r->pool + r->pool_used;
  avail = r->pool_cap - r->pool_used;
  for (;;) {
    unsigned c;
    unsigned char enc[4];
    size_t elen = 0;
    if (r->pos >= r->n)
      return rfail(r, "invalid JSON header: string starting at byte %zu is not terminated", start);
    c = r->s[r->pos];
    if (c == '"') {
      r->pos++;
      break;
    }
    if (c < 0x20)
      return rfail(r, "invalid JSON header at byte %zu: control character 0x%02x inside a string (it must be escaped)",
                   r->pos, c);
    if (c == '\\') {
      int e;
      if (r->pos + 1 >= r->n)
        return rfail(r, "invalid JSON header: string starting at byte %zu is not terminated", start);
      e = r->s[r->pos + 1];
      r->pos += 2;
      switch (e) {
      case '"': enc[0] = '"'; elen = 1; break;
      case '\\': enc[0] = '\\'; elen = 1; break;
      case '/': enc[0] = '/'; elen = 1; break;
      case 'b': enc[0] = '\b'; elen = 1; break;
      case 'f': enc[0] = '\f'; elen = 1; break;
      case 'n': enc[0] = '\n'; elen = 1; break;
      case 'r': enc[0] = '\r'; elen = 1; break;
      case 't': enc[0] = '\t'; elen = 1; break;
      case 'u': {
        size_t epos = r->pos - 2;
        long cp = hex4(r), lo;
        if (cp < 0)
          return rfail(r, "invalid JSON header at byte %zu: \\u must be followed by four hex digits", epos);
        if (cp >= 0xDC00 && cp <= 0xDFFF)
          return rfail(r, "invalid JSON header at byte %zu: unpaired UTF-16 surrogate \\u%04lX", epos, cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (r->n - r->pos < 2 || r->s[r->pos] != '\\' || r->s[r->pos + 1] != 'u')
            return rfail(r, "invalid JSON header at byte %zu: unpaired UTF-16 surrogate \\u%04lX", epos, cp);
          r->pos += 2;
          lo = hex4(r);
          if (lo < 0xDC00 || lo > 0xDFFF)
            return rfail(r, "invalid JSON header at byte %zu: unpaired UTF-16 surrogate \\u%04lX", epos, cp);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp < 0x80) {
          enc[0] = (unsigned char)cp; elen = 1;
        } else if (cp < 0x800) {
          enc[0] = (unsigned char)(0xC0 | (cp >> 6));
          enc[1] = (unsigned char)(0x80 | (cp & 0x3F)); elen = 2;
        } else if (cp < 0x10000) {
          enc[0] = (unsigned char)(0xE0 | (cp >> 12));
          enc[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
          enc[2] = (unsigned char)(0x80 | (cp & 0x3F)); elen = 3;
        } else {
          enc[0] = (unsigned char)(0xF0 | (cp >> 18));
          enc[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
          enc[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
          enc[3] = (unsigned char)(0x80 | (cp & 0x3F)); elen = 4;
        }
        break;
      }
      default:
        if (e >= 0x20 && e < 0x7F)
          return rfail(r, "invalid JSON header at byte %zu: unknown escape \\%c in a string", r->pos - 2, e);
        return rfail(r, "invalid JSON header at byte %zu: unknown escape in a string", r->pos - 2);
      }
    } else if (c < 0x80) {
      enc[0] = (unsigned char)c;
      elen = 1;
      r->pos++;
    } else {
      elen = utf8_seq(r->s + r->pos, r->n - r->pos);
      if (!elen)
        return rfail(r, "invalid JSON header at byte %zu: invalid UTF-8 in a string", r->pos);
      memcpy(enc, r->s + r->pos, elen);
      r->pos += elen;
    }
    if (avail - k <= elen) /* keep room for the terminator */
      return attnc_err_set(r->err, ATTNC_EGEN, "%s: safetensors string pool overflow (a bug: please report)", r->src);
    memcpy(o + k, enc, elen);
    k += elen;
  }
  o[k] = '\0';
  r->pool_used += k + 1;
  *out = o;
  if (outlen) *outlen = k;
  return ATTNC_OK;
}

typedef struct jnum {
  int neg, is_int, big; /* big: magnitude above UINT64_MAX */
  uint64_t mag;
  size_t start, len;    /* the text, for messages */
} jnum;

static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* A JSON number at the current position (which holds '-' or a digit). */
static attnc_status jnumber(reader *r, jnum *v)
{
  v->neg = v->big = 0;
  v->is_int = 1;
  v->mag = 0;
  v->start = r->pos;
  v->len = 0;
  if (peek(r) == '-') {
    v->neg = 1;
    r->pos++;
  }
  if (!is_digit(peek(r))) return jfail(r, "a digit");
  if (peek(r) == '0') {
    r->pos++;
    if (is_digit(peek(r)))
      return rfail(r, "invalid JSON header at byte %zu: number with a leading zero", v->start);
  } else {
    while (is_digit(peek(r))) {
      unsigned d = (unsigned)(peek(r) - '0');
      if (v->mag > (UINT64_MAX - d) / 10) v->big = 1;
      else v->mag = v->mag * 10 + d;
      r->pos++;
    }
  }
  if (peek(r) == '.') {
    v->is_int = 0;
    r->pos++;
    if (!is_digit(peek(r))) return jfail(r, "a digit after '.'");
    while (is_digit(peek(r))) r->pos++;
  }
  if (peek(r) == 'e' || peek(r) == 'E') {
    v->is_int = 0;
    r->pos++;
    if (peek(r) == '+' || peek(r) == '-') r->pos++;
    if (!is_digit(peek(r))) return jfail(r, "a digit in the exponent");
    while (is_digit(peek(r))) r->pos++;
  }
  v->len = r->pos - v->start;
  return ATTNC_OK;
}

/* An array of non-negative integers, field `field` of tensor `name`.  At
 * most `max` values fit in out; *count gets how many there were.  Values
 * above `limit` are rejected. */
static attnc_status jintarray(reader *r, const char *name, const char *field,
                              uint64_t *out, size_t max, size_t *count, uint64_t limit,
                              const char *toomany)
{
  shown sn;
  size_t i = 0;
  attnc_status st;
  skip_ws(r);
  if (peek(r) != '[')
    return rfail(r, "tensor '%s': %s must be an array of integers (at header byte %zu)",
                 show(&sn, name), field, r->pos);
  r->pos++;
  skip_ws(r);
  if (peek(r) == ']') {
    r->pos++;
    *count = 0;
    return ATTNC_OK;
  }
  for (;;) {
    jnum v;
    int c;
    skip_ws(r);
    c = peek(r);
    if (c != '-' && !is_digit(c)) {
      char buf[24];
      if (c != '"' && c != '[' && c != '{' && c != 't' && c != 'f' && c != 'n')
        return jfail(r, "an integer");
      return rfail(r, "tensor '%s': %s[%zu] is not an integer (found %s at header byte %zu)",
                   show(&sn, name), field, i, found(r, buf, sizeof buf), r->pos);
    }
    if ((st = jnumber(r, &v)) != ATTNC_OK) return st;
    if (!v.is_int)
      return rfail(r, "tensor '%s': %s[%zu] is not an integer (%.*s)", show(&sn, name), field, i,
                   (int)(v.len > 40 ? 40 : v.len), (const char *)r->s + v.start);
    if (v.neg && (v.mag != 0 || v.big))
      return rfail(r, "tensor '%s': %s[%zu] is negative (%.*s)", show(&sn, name), field, i,
                   (int)(v.len > 40 ? 40 : v.len), (const char *)r->s + v.start);
    if (v.big || v.mag > limit)
      return rfail(r, "tensor '%s': %s[%zu] is too large (%.*s overflows the %" PRIu64 " limit)",
                   show(&sn, name), field, i, (int)(v.len > 40 ? 40 : v.len),
                   (const char *)r->s + v.start, limit);
    if (i >= max) return rfail(r, "tensor '%s': %s", show(&sn, name), toomany);
    out[i++] = v.mag;
    const int ended = list_next(r, ']');
    if (ended < 0) return jfail(r, "',' or ']' in an array of integers");
    if (ended) break;
  }
  *count = i;
  return ATTNC_OK;
}

static int key_is(const char *k, size_t klen, const char *lit)
{
  return klen == strlen(lit) && memcmp(k, lit, klen) == 0;
}

/* "__metadata__": an object of string values; checked, then dropped. */
static attnc_status jmetadata(reader *r)
{
  attnc_status st;
  size_t pool_mark = r->pool_used;
  skip_ws(r);
  if (peek(r) != '{')
    return rfail(r, "__metadata__ must be an object of strings (at header byte %zu)", r->pos);
  r->pos++;
  skip_ws(r);
  if (peek(r) == '}') {
    r->pos++;
    return ATTNC_OK;
  }
  for (;;) {
    char *k, *v;
    shown sk;
    skip_ws(r);
    if (peek(r) != '"') return jfail(r, "a key string in __metadata__");
    if ((st = jstring(r, &k, NULL)) != ATTNC_OK) return st;
    if ((st = expect_char(r, ':', "':' after a __metadata__ key")) != ATTNC_OK) return st;
    skip_ws(r);
    if (peek(r) != '"')
      return rfail(r, "__metadata__ value of key '%s' is not a string (at header byte %zu)",
                   show(&sk, k), r->pos);
    if ((st = jstring(r, &v, NULL)) != ATTNC_OK) return st;
    r->pool_used = pool_mark; /* not kept */
    const int ended = list_next(r, '}');
    if (ended < 0) return jfail(r, "',' or '}' in __metadata__");
    if (ended) return ATTNC_OK;
  }
}

/* One tensor entry {"dtype", "shape", "data_offsets"}; fills and checks e. */
static attnc_status jtensor(reader *r, st_entry *e)
{
  const char *name = e->name;
  shown sn;
  attnc_status st;
  int have_dtype = 0, have_shape = 0, have_off = 0, i;
  uint64_t shape[ATTNC_MAX_RANK], off[2], count, bytes, size;
  size_t rank = 0, noff = 0;
  int zero = 0;
  char sh[200];

  skip_ws(r);
  if (peek(r) != '{') {
    char buf[24];
    return rfail(r, "tensor '%s': expected an object with dtype, shape and data_offsets, found %s (at header byte %zu)",
                 show(&sn, name), found(r, buf, sizeof buf), r->pos);
  }
  r->pos++;
  skip_ws(r);
  if (peek(r) == '}') r->pos++;
  else for (;;) {
    char *k, *v;
    size_t klen, vlen, mark;
    skip_ws(r);
    if (peek(r) != '"') return jfail(r, "a field name string in a tensor entry");
    mark = r->pool_used;
    if ((st = jstring(r, &k, &klen)) != ATTNC_OK) return st;
    if ((st = expect_char(r, ':', "':' after a field name")) != ATTNC_OK) return st;
    if (key_is(k, klen, "dtype")) {
      if (have_dtype) return rfail(r, "tensor '%s': field \"dtype\" appears twice", show(&sn, name));
      have_dtype = 1;
      skip_ws(r);
      if (peek(r) != '"')
        return rfail(r, "tensor '%s': dtype must be a string such as \"F32\" (at header byte %zu)",
                     show(&sn, name), r->pos);
      if ((st = jstring(r, &v, &vlen)) != ATTNC_OK) return st;
      if (strlen(v) != vlen || !attnc_dtype_parse(v, &e->dtype)) {
        shown sd;
        return rfail(r, "tensor '%s': unknown dtype \"%s\" (expected one of " ST_DTYPE_LIST ")",
                     show(&sn, name), show(&sd, v));
      }
    } else if (key_is(k, klen, "shape")) {
      if (have_shape) return rfail(r, "tensor '%s': field \"shape\" appears twice", show(&sn, name));
      have_shape = 1;
      st = jintarray(r, name, "shape", shape, ATTNC_MAX_RANK, &rank, (uint64_t)INT64_MAX,
                     "shape has more than 8 entries (rank exceeds ATTNC_MAX_RANK = 8)");
      if (st != ATTNC_OK) return st;
    } else if (key_is(k, klen, "data_offsets")) {
      if (have_off) return rfail(r, "tensor '%s': field \"data_offsets\" appears twice", show(&sn, name));
      have_off = 1;
      st = jintarray(r, name, "data_offsets", off, 2, &noff, UINT64_MAX,
                     "data_offsets must be [begin, end] but has more than 2 entries");
      if (st != ATTNC_OK) return st;
      if (noff != 2)
        return rfail(r, "tensor '%s': data_offsets must be [begin, end] but has %zu entr%s",
                     show(&sn, name), noff, noff == 1 ? "y" : "ies");
    } else {
      shown sk;
      return rfail(r, "tensor '%s': unknown field \"%s\" (expected dtype, shape and data_offsets)",
                   show(&sn, name), show(&sk, k));
    }
    r->pool_used = mark; /* field names and dtype strings are not kept */
    const int ended = list_next(r, '}');
    if (ended < 0) return jfail(r, "',' or '}' in a tensor entry");
    if (ended) break;
  }
  if (!have_dtype) return rfail(r, "tensor '%s': missing field \"dtype\"", show(&sn, name));
  if (!have_shape) return rfail(r, "tensor '%s': missing field \"shape\"", show(&sn, name));
  if (!have_off) return rfail(r, "tensor '%s': missing field \"data_offsets\"", show(&sn, name));

  e->rank = (int)rank;
  for (i = 0; i < e->rank; i++) {
    e->shape[i] = (int64_t)shape[i];
    if (shape[i] == 0) zero = 1;
  }
  format_shape(sh, sizeof sh, e->shape, e->rank);
  size = attnc_dtype_size(e->dtype);
  count = 1;
  if (zero) count = 0;
  else for (i = 0; i < e->rank; i++) {
    if (count > (uint64_t)INT64_MAX / shape[i])
      return rfail(r, "tensor '%s': shape %s overflows (more than 2^63 elements)", show(&sn, name), sh);
    count *= shape[i];
  }
  if (count > UINT64_MAX / size)
    return rfail(r, "tensor '%s': shape %s of %s overflows (more than 2^64 bytes)",
                 show(&sn, name), sh, attnc_dtype_name(e->dtype));
  bytes = count * size;
  e->begin = off[0];
  e->end = off[1];
  if (e->begin > e->end)
    return rfail(r, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] has begin after end",
                 show(&sn, name), e->begin, e->end);
  if (e->end > r->data_len)
    return rfail(r, "tensor '%s': data_offsets end %" PRIu64 " is past the end of the data section (%zu bytes)",
                 show(&sn, name), e->end, r->data_len);
  if (e->end - e->begin != bytes)
    return rfail(r, "tensor '%s': size mismatch: data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                 " bytes but shape %s of %s needs %" PRIu64,
                 show(&sn, name), e->begin, e->end, e->end - e->begin, sh,
                 attnc_dtype_name(e->dtype), bytes);
  return ATTNC_OK;
}

static attnc_status add_entry(reader *r, attnc_safetensors *f, st_entry **out)
{
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 16;
    st_entry *e;
    if (cap < f->cap || cap > SIZE_MAX / sizeof *e)
      return attnc_err_set(r->err, ATTNC_ENOMEM, "%s: too many tensors", r->src);
    e = realloc(f->e, cap * sizeof *e);
    if (!e) return attnc_err_set(r->err, ATTNC_ENOMEM, "%s: out of memory reading the header", r->src);
    f->e = e;
    f->cap = cap;
  }
  *out = &f->e[f->n];
  memset(*out, 0, sizeof **out);
  return ATTNC_OK;
}

static attnc_status jheader(reader *r, attnc_safetensors *f)
{
  attnc_status st;
  int seen_meta = 0;
  if ((st = expect_char(r, '{', "'{' opening the header object")) != ATTNC_OK) return st;
  skip_ws(r);
  if (peek(r) == '}') r->pos++;
  else for (;;) {
    char *key;
    size_t klen, kpos;
    skip_ws(r);
    kpos = r->pos;
    if (peek(r) != '"') return jfail(r, "a tensor name string");
    if ((st = jstring(r, &key, &klen)) != ATTNC_OK) return st;
    if ((st = expect_char(r, ':', "':' after a tensor name")) != ATTNC_OK) return st;
    if (key_is(key, klen, "__metadata__")) {
      if (seen_meta) return rfail(r, "duplicate __metadata__ key at header byte %zu", kpos);
      seen_meta = 1;
      r->pool_used -= klen + 1;
      if ((st = jmetadata(r)) != ATTNC_OK) return st;
    } else {
      st_entry *e = NULL;
      if (memchr(key, 0, klen))
        return rfail(r, "the tensor name at header byte %zu contains a NUL character (\\u0000)", kpos);
      if ((st = add_entry(r, f, &e)) != ATTNC_OK) return st;
      e->name = key;
      if ((st = jtensor(r, e)) != ATTNC_OK) return st;
      f->n++;
    }
    const int ended = list_next(r, '}');
    if (ended < 0) return jfail(r, "',' or '}' after a header entry");
    if (ended) break;
  }
  skip_ws(r);
  if (r->pos != r->n) return jfail(r, "only spaces after the header object");
  return ATTNC_OK;
}

/* ------------------------------------------------- checks across tensors */

static int cmp_name(const void *a, const void *b)
{
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return x < y ? -1 : x > y;
}

static int cmp_range(const void *a, const void *b)
{
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x < y ? -1 : x > y;
}

static attnc_status check_all(attnc_safetensors *f, const char *src, attnc_error *err)
{
  st_entry **by_begin;
  const st_entry *last = NULL;
  size_t i;
  shown s1, s2;

  f->by_name = malloc((f->n ? f->n : 1) * sizeof *f->by_name);
  if (!f->by_name) return attnc_err_set(err, ATTNC_ENOMEM, "%s: out of memory indexing tensors", src);
  for (i = 0; i < f->n; i++) f->by_name[i] = &f->e[i];
  qsort(f->by_name, f->n, sizeof *f->by_name, cmp_name);
  for (i = 1; i < f->n; i++)
    if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
      return src_fail(err, ATTNC_EFORMAT, src, "duplicate tensor name '%s' in the header",
                      show(&s1, f->by_name[i]->name));

  by_begin = malloc((f->n ? f->n : 1) * sizeof *by_begin);
  if (!by_begin) return attnc_err_set(err, ATTNC_ENOMEM, "%s: out of memory indexing tensors", src);
  for (i = 0; i < f->n; i++) by_begin[i] = &f->e[i];
  qsort(by_begin, f->n, sizeof *by_begin, cmp_range);
  for (i = 0; i < f->n; i++) {
    const st_entry *e = by_begin[i];
    if (e->begin == e->end) continue; /* empty ranges overlap nothing */
    if (last && e->begin < last->end) {
      attnc_status st = src_fail(err, ATTNC_EFORMAT, src,
                                 "tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64 ", %" PRIu64
                                 ") overlap in the data section",
                                 show(&s1, last->name), last->begin, last->end,
                                 show(&s2, e->name), e->begin, e->end);
      free(by_begin);
      return st;
    }
    last = e;
  }
  free(by_begin);

  for (i = 0; i < f->n; i++) {
    st_entry *e = &f->e[i];
    size_t bytes = (size_t)(e->end - e->begin); /* <= data_len */
    if (bytes == 0) e->ptr = f->data;
    else if (e->begin % attnc_dtype_size(e->dtype) == 0) e->ptr = f->data + e->begin;
    else {
      e->ptr = alloc_aligned(bytes, &e->own);
      if (!e->ptr)
        return attnc_err_set(err, ATTNC_ENOMEM, "%s: out of memory copying misaligned tensor '%s'",
                             src, show(&s1, e->name));
      memcpy(e->ptr, f->data + e->begin, bytes);
    }
  }
  return ATTNC_OK;
}

/* Build the file object from a header and a data section (taken over). */
static attnc_safetensors *st_build(const char *src, const unsigned char *hdr, size_t hn,
                                   void *data_raw, unsigned char *data, size_t data_len,
                                   attnc_error *err)
{
  reader r;
  attnc_safetensors *f = calloc(1, sizeof *f);
  if (!f) {
    free(data_raw);
    attnc_err_set(err, ATTNC_ENOMEM, "%s: out of memory", src);
    return NULL;
  }
  f->data_raw = data_raw;
  f->data = data;
  f->data_len = data_len;
  f->pool = malloc(hn + 1);
  if (!f->pool) {
    attnc_err_set(err, ATTNC_ENOMEM, "%s: out of memory for a %zu-byte header", src, hn);
    attnc_st_close(f);
    return NULL;
  }
  memset(&r, 0, sizeof r);
  r.s = hdr;
  r.n = hn;
  r.pool = f->pool;
  r.pool_cap = hn + 1;
  r.data_len = data_len;
  r.src = src;
  r.err = err;
  if (jheader(&r, f) != ATTNC_OK || check_all(f, src, err) != ATTNC_OK) {
    attnc_st_close(f);
    return NULL;
  }
  attnc_err_clear(err);
  return f;
}

/* Check the first 8 bytes of a file of `total` bytes; *hn gets the header
 * length. */
static attnc_status check_prefix(const char *src, const unsigned char *first, uint64_t total,
                                 size_t *hn, attnc_error *err)
{
  uint64_t n = 0;
  int i;
  if (total < 8)
    return src_fail(err, ATTNC_EFORMAT, src,
                    "only %" PRIu64 " bytes, too short for the 8-byte header length (not a safetensors file?)",
                    total);
  for (i = 7; i >= 0; i--) n = (n << 8) | first[i];
  if (n > ST_MAX_HEADER)
    return src_fail(err, ATTNC_EFORMAT, src,
                    "header length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes (not a safetensors file?)",
                    n, ST_MAX_HEADER);
  if (n > total - 8)
    return src_fail(err, ATTNC_EFORMAT, src,
                    "header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes after the length)",
                    n, total - 8);
  *hn = (size_t)n;
  return ATTNC_OK;
}

attnc_safetensors *attnc_st_from_memory(const void *buf, size_t n, attnc_error *err)
{
  const char *src = "<memory>";
  const unsigned char *p = buf;
  size_t hn, dlen;
  void *raw;
  unsigned char *data;
  if (!buf && n) {
    attnc_err_set(err, ATTNC_EARG, "attnc_st_from_memory: buf is NULL but n is %zu", n);
    return NULL;
  }
  if (check_prefix(src, p, n, &hn, err) != ATTNC_OK) return NULL;
  dlen = n - 8 - hn;
  data = alloc_aligned(dlen, &raw);
  if (!data) {
    attnc_err_set(err, ATTNC_ENOMEM, "%s: out of memory for a %zu-byte data section", src, dlen);
    return NULL;
  }
  if (dlen) memcpy(data, p + 8 + hn, dlen);
  return st_build(src, p + 8, hn, raw, data, dlen, err);
}

/* Read exactly n bytes: 0 on success, 1 at an early end of file, -1 on an
 * error (errno set). */
static int read_full(int fd, void *buf, size_t n)
{
  unsigned char *p = buf;
  while (n) {
    ssize_t got = read(fd, p, n < ST_IO_CHUNK ? n : ST_IO_CHUNK);
    if (got < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (got == 0) return 1;
    p += got;
    n -= (size_t)got;
  }
  return 0;
}

attnc_safetensors *attnc_st_open(const char *path, attnc_error *err)
{
  struct stat sb;
  unsigned char first[8], extra;
  unsigned char *hdr = NULL, *data = NULL;
  void *raw = NULL;
  size_t hn, dlen;
  uint64_t total;
  int fd, rc;
  attnc_safetensors *f;

  if (!path) {
    attnc_err_set(err, ATTNC_EARG, "attnc_st_open: path is NULL");
    return NULL;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    attnc_err_set(err, ATTNC_EIO, "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  if (fstat(fd, &sb) != 0) {
    attnc_err_set(err, ATTNC_EIO, "cannot read '%s': %s", path, strerror(errno));
    goto fail;
  }
  if (S_ISDIR(sb.st_mode)) {
    attnc_err_set(err, ATTNC_EIO, "cannot read '%s': %s", path, strerror(EISDIR));
    goto fail;
  }
  if (!S_ISREG(sb.st_mode) || sb.st_size < 0) {
    attnc_err_set(err, ATTNC_EIO, "cannot read '%s': not a regular file", path);
    goto fail;
  }
  total = (uint64_t)sb.st_size;
  if (total > SIZE_MAX - ST_ALIGN) {
    attnc_err_set(err, ATTNC_ENOMEM, "cannot read '%s': %" PRIu64 " bytes do not fit in memory", path, total);
    goto fail;
  }
  rc = read_full(fd, first, total < 8 ? (size_t)total : 8);
  if (rc != 0) goto io_fail;
  if (check_prefix(path, first, total, &hn, err) != ATTNC_OK) goto fail;
  hdr = malloc(hn ? hn : 1);
  dlen = (size_t)total - 8 - hn;
  data = alloc_aligned(dlen, &raw);
  if (!hdr || !data) {
    attnc_err_set(err, ATTNC_ENOMEM, "cannot read '%s': out of memory for %" PRIu64 " bytes", path, total);
    goto fail;
  }
  if ((rc = read_full(fd, hdr, hn)) != 0 || (rc = read_full(fd, data, dlen)) != 0) goto io_fail;
  rc = read_full(fd, &extra, 1);
  if (rc == 0) {
    attnc_err_set(err, ATTNC_EIO, "cannot read '%s': the file grew while it was being read", path);
    goto fail;
  }
  if (rc < 0) goto io_fail;
  close(fd);
  f = st_build(path, hdr, hn, raw, data, dlen, err); /* takes raw */
  free(hdr);
  return f;

io_fail:
  if (rc > 0) attnc_err_set(err, ATTNC_EIO, "cannot read '%s': the file shrank while it was being read", path);
  else attnc_err_set(err, ATTNC_EIO, "cannot read '%s': %s", path, strerror(errno));
fail:
  close(fd);
  free(hdr);
  free(raw);
  return NULL;
}

/* --------------------------------------------------------------- writing */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
  if (b->oom) return;
  if (n > SIZE_MAX - b->len - 1) {
    b->oom = 1;
    return;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    char *p;
    while (cap < b->len + n + 1) {
      if (cap > SIZE_MAX / 2) {
        cap = b->len + n + 1;
        break;
      }
      cap *= 2;
    }
    p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, uint64_t v)
{
  char t[24];
  int n = snprintf(t, sizeof t, "%" PRIu64, v);
  sb_put(b, t, (size_t)n);
}

/* A JSON string literal; s is valid UTF-8. */
static void sb_json(sbuf *b, const char *s)
{
  const unsigned char *p = (const unsigned char *)s;
  sb_put(b, "\"", 1);
  for (; *p; p++) {
    char t[8];
    switch (*p) {
    case '"': sb_put(b, "\\\"", 2); break;
    case '\\': sb_put(b, "\\\\", 2); break;
    case '\n': sb_put(b, "\\n", 2); break;
    case '\r': sb_put(b, "\\r", 2); break;
    case '\t': sb_put(b, "\\t", 2); break;
    case '\b': sb_put(b, "\\b", 2); break;
    case '\f': sb_put(b, "\\f", 2); break;
    default:
      if (*p < 0x20) {
        snprintf(t, sizeof t, "\\u%04x", *p);
        sb_put(b, t, 6);
      } else {
        sb_put(b, (const char *)p, 1);
      }
    }
  }
  sb_put(b, "\"", 1);
}

static int utf8_valid(const char *s)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s), i = 0;
  while (i < n) {
    size_t k = utf8_seq(p + i, n - i);
    if (!k) return 0;
    i += k;
  }
  return 1;
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int write_full(int fd, const void *buf, size_t n)
{
  const unsigned char *p = buf;
  while (n) {
    ssize_t put = write(fd, p, n < ST_IO_CHUNK ? n : ST_IO_CHUNK);
    if (put < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (put == 0) {
      errno = EIO;
      return -1;
    }
    p += put;
    n -= (size_t)put;
  }
  return 0;
}

/* Byte size of tensor t into *bytes, or ATTNC_EARG and a message on a bad tensor. */
static attnc_status tensor_bytes(const attnc_tensor *t, const char *name, uint64_t *bytes,
                                 attnc_error *err)
{
  shown sn;
  uint64_t count = 1;
  int i, zero = 0;
  if (!dtype_valid(t->dtype))
    return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: tensor '%s' has an invalid dtype (%d)",
                         show(&sn, name), (int)t->dtype);
  if (t->rank < 0 || t->rank > ATTNC_MAX_RANK)
    return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: tensor '%s' has rank %d (must be 0..%d)",
                         show(&sn, name), t->rank, ATTNC_MAX_RANK);
  for (i = 0; i < t->rank; i++) {
    if (t->shape[i] < 0)
      return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: tensor '%s' has a negative shape[%d] (%" PRId64 ")",
                           show(&sn, name), i, t->shape[i]);
    if (t->shape[i] == 0) zero = 1;
  }
  if (zero) count = 0;
  else for (i = 0; i < t->rank; i++) {
    if (count > (uint64_t)INT64_MAX / (uint64_t)t->shape[i])
      return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: tensor '%s': the shape product overflows",
                           show(&sn, name));
    count *= (uint64_t)t->shape[i];
  }
  if (count > UINT64_MAX / attnc_dtype_size(t->dtype) ||
      count * attnc_dtype_size(t->dtype) > (uint64_t)SIZE_MAX)
    return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: tensor '%s' is too large", show(&sn, name));
  *bytes = count * attnc_dtype_size(t->dtype);
  if (*bytes && !t->data)
    return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: tensor '%s' has NULL data but %" PRIu64 " bytes",
                         show(&sn, name), *bytes);
  return ATTNC_OK;
}

attnc_status attnc_st_write(const char *path, size_t n, const char *const *names,
                            const attnc_tensor *tensors, attnc_error *err)
{
  sbuf hb;
  const char **sorted = NULL;
  uint64_t *bytes = NULL, off = 0;
  char *tmp = NULL;
  unsigned char len8[8];
  size_t i, tmplen;
  int fd = -1, k;
  attnc_status st = ATTNC_OK;
  shown sn;

  memset(&hb, 0, sizeof hb);
  if (!path || !*path) return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: path is NULL or empty");
  if (n && (!names || !tensors))
    return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: names or tensors is NULL with n = %zu", n);
  if (n > SIZE_MAX / sizeof *bytes) return attnc_err_set(err, ATTNC_EARG, "attnc_st_write: n is too large");

  bytes = malloc((n ? n : 1) * sizeof *bytes);
  sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!bytes || !sorted) {
    st = attnc_err_set(err, ATTNC_ENOMEM, "attnc_st_write: out of memory");
    goto done;
  }
  for (i = 0; i < n; i++) {
    if (!names[i]) {
      st = attnc_err_set(err, ATTNC_EARG, "attnc_st_write: names[%zu] is NULL", i);
      goto done;
    }
    if (!utf8_valid(names[i])) {
      st = attnc_err_set(err, ATTNC_EARG, "attnc_st_write: names[%zu] is not valid UTF-8", i);
      goto done;
    }
    if (strcmp(names[i], "__metadata__") == 0) {
      st = attnc_err_set(err, ATTNC_EARG, "attnc_st_write: names[%zu] is \"__metadata__\", which is reserved", i);
      goto done;
    }
    if ((st = tensor_bytes(&tensors[i], names[i], &bytes[i], err)) != ATTNC_OK) goto done;
    if (bytes[i] > UINT64_MAX - off) {
      st = attnc_err_set(err, ATTNC_EARG, "attnc_st_write: the tensors total more than 2^64 bytes");
      goto done;
    }
    off += bytes[i];
    sorted[i] = names[i];
  }
  qsort(sorted, n, sizeof *sorted, cmp_str);
  for (i = 1; i < n; i++)
    if (strcmp(sorted[i - 1], sorted[i]) == 0) {
      st = attnc_err_set(err, ATTNC_EARG, "attnc_st_write: duplicate tensor name '%s'", show(&sn, sorted[i]));
      goto done;
    }

  /* The header, keys in the given order, data packed in the same order. */
  sb_put(&hb, "{", 1);
  off = 0;
  for (i = 0; i < n; i++) {
    const attnc_tensor *t = &tensors[i];
    int d;
    if (i) sb_put(&hb, ",", 1);
    sb_json(&hb, names[i]);
    sb_str(&hb, ":{\"dtype\":\"");
    sb_str(&hb, attnc_dtype_name(t->dtype));
    sb_str(&hb, "\",\"shape\":[");
    for (d = 0; d < t->rank; d++) {
      if (d) sb_put(&hb, ",", 1);
      sb_u64(&hb, (uint64_t)t->shape[d]);
    }
    sb_str(&hb, "],\"data_offsets\":[");
    sb_u64(&hb, off);
    sb_put(&hb, ",", 1);
    off += bytes[i];
    sb_u64(&hb, off);
    sb_str(&hb, "]}");
  }
  sb_put(&hb, "}", 1);
  while (!hb.oom && hb.len % 8) sb_put(&hb, " ", 1); /* data starts at 8 + len, a multiple of 8 */
  if (hb.oom) {
    st = attnc_err_set(err, ATTNC_ENOMEM, "attnc_st_write: out of memory building the header");
    goto done;
  }
  if ((uint64_t)hb.len > ST_MAX_HEADER) {
    st = attnc_err_set(err, ATTNC_EARG, "attnc_st_write: the header would be %zu bytes, over the %" PRIu64
                       "-byte limit readers accept", hb.len, ST_MAX_HEADER);
    goto done;
  }
  for (k = 0; k < 8; k++) len8[k] = (unsigned char)(((uint64_t)hb.len >> (8 * k)) & 0xFF);

  /* A temp file beside the target, created exclusively (mode 0666 less the
   * umask), then renamed over it. */
  tmplen = strlen(path) + 48;
  tmp = malloc(tmplen);
  if (!tmp) {
    st = attnc_err_set(err, ATTNC_ENOMEM, "attnc_st_write: out of memory");
    goto done;
  }
  for (k = 0; k < 1000; k++) {
    snprintf(tmp, tmplen, "%s.tmp.%ld.%d", path, (long)getpid(), k);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) {
    st = attnc_err_set(err, ATTNC_EIO, "cannot write '%s': cannot create the temporary file '%s': %s",
                       path, tmp, strerror(errno));
    goto done;
  }
  if (write_full(fd, len8, 8) != 0 || write_full(fd, hb.p, hb.len) != 0) goto io_fail;
  for (i = 0; i < n; i++)
    if (bytes[i] && write_full(fd, tensors[i].data, (size_t)bytes[i]) != 0) goto io_fail;
  if (fsync(fd) != 0) goto io_fail;
  k = close(fd);
  fd = -1;
  if (k != 0) goto io_fail;
  if (rename(tmp, path) != 0) {
    st = attnc_err_set(err, ATTNC_EIO, "cannot write '%s': cannot rename '%s' over it: %s",
                       path, tmp, strerror(errno));
    unlink(tmp);
    goto done;
  }
  attnc_err_clear(err);
  goto done;

io_fail:
  st = attnc_err_set(err, ATTNC_EIO, "cannot write '%s' (via '%s'): %s", path, tmp, strerror(errno));
  if (fd >= 0) close(fd);
  fd = -1;
  unlink(tmp);
done:
  free(tmp);
  free(hb.p);
  free(bytes);
  free(sorted);
  return st;
}
