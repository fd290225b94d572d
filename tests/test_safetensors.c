/* Tests for runtime/safetensors.c: round trips, lookups, and one test per
 * kind of malformed file, each checking the status and the message. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnc.h"

/* ---------------------------------------------------------------- helpers */

#define assert_contains(text, word)                                          \
  do {                                                                       \
    const char *t_ = (text), *w_ = (word);                                   \
    if (!strstr(t_, w_)) fail_msg("message \"%s\" lacks \"%s\"", t_, w_);    \
  } while (0)

/* A safetensors image: 8-byte LE length, header, data.  Caller frees. */
static unsigned char *image(const char *header, const void *data, size_t dlen, size_t *n)
{
  size_t hn = strlen(header), i;
  unsigned char *p = malloc(8 + hn + dlen + 1);
  assert_non_null(p);
  for (i = 0; i < 8; i++) p[i] = (unsigned char)(((uint64_t)hn >> (8 * i)) & 0xFF);
  memcpy(p + 8, header, hn);
  if (dlen) memcpy(p + 8 + hn, data, dlen);
  *n = 8 + hn + dlen;
  return p;
}

/* Parse header+data from memory; expect EFORMAT and a message with w1 (and w2). */
static void expect_bad(const char *header, size_t dlen, const char *w1, const char *w2)
{
  unsigned char data[64];
  size_t n;
  unsigned char *p;
  attnc_error err;
  attnc_safetensors *f;
  memset(data, 0x5A, sizeof data);
  assert_true(dlen <= sizeof data);
  p = image(header, data, dlen, &n);
  memset(&err, 0, sizeof err);
  f = attnc_st_from_memory(p, n, &err);
  free(p);
  if (f) {
    attnc_st_close(f);
    fail_msg("header accepted: %s", header);
  }
  assert_int_equal(err.code, ATTNC_EFORMAT);
  assert_contains(err.message, w1);
  if (w2) assert_contains(err.message, w2);
}

static char *make_dir(void)
{
  char *d = malloc(64);
  assert_non_null(d);
  strcpy(d, "/tmp/attnc_st_test_XXXXXX");
  assert_non_null(mkdtemp(d));
  return d;
}

static char *join(const char *dir, const char *name)
{
  char *p = malloc(strlen(dir) + strlen(name) + 2);
  assert_non_null(p);
  sprintf(p, "%s/%s", dir, name);
  return p;
}

/* Entries in dir other than . and .. */
static int dir_entries(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  assert_non_null(d);
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static unsigned char *slurp(const char *path, size_t *n)
{
  FILE *fp = fopen(path, "rb");
  unsigned char *p;
  long len;
  assert_non_null(fp);
  assert_int_equal(fseek(fp, 0, SEEK_END), 0);
  len = ftell(fp);
  assert_true(len >= 0);
  rewind(fp);
  p = malloc((size_t)len + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)len, fp), (size_t)len);
  fclose(fp);
  *n = (size_t)len;
  return p;
}

static void spit(const char *path, const void *p, size_t n)
{
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  if (n) assert_int_equal(fwrite(p, 1, n, fp), n);
  assert_int_equal(fclose(fp), 0);
}

static size_t nbytes(const attnc_tensor *t)
{
  size_t n = attnc_dtype_size(t->dtype);
  int i;
  for (i = 0; i < t->rank; i++) n *= (size_t)t->shape[i];
  return n;
}

/* ------------------------------------------------------------------ dtypes */

static void test_safetensors_dtype_helpers(void **state)
{
  static const char *names[] = {"F32", "F64", "F16", "BF16", "I8", "I16", "I32",
                                "I64", "U8", "U16", "U32", "U64", "BOOL"};
  static const size_t sizes[] = {4, 8, 2, 2, 1, 2, 4, 8, 1, 2, 4, 8, 1};
  attnc_dtype d;
  int i;
  (void)state;
  for (i = 0; i < 13; i++) {
    assert_string_equal(attnc_dtype_name((attnc_dtype)i), names[i]);
    assert_int_equal(attnc_dtype_size((attnc_dtype)i), sizes[i]);
    d = ATTNC_BOOL;
    assert_int_equal(attnc_dtype_parse(names[i], &d), 1);
    assert_int_equal(d, (attnc_dtype)i);
  }
  assert_int_equal(attnc_dtype_parse("f32", &d), 0);
  assert_int_equal(attnc_dtype_parse("F8", &d), 0);
  assert_int_equal(attnc_dtype_parse("", &d), 0);
  assert_int_equal(attnc_dtype_parse(NULL, &d), 0);
  assert_int_equal(attnc_dtype_size((attnc_dtype)13), 0);
  assert_int_equal(attnc_dtype_size((attnc_dtype)-1), 0);
  assert_non_null(attnc_dtype_name((attnc_dtype)99));
}

/* ------------------------------------------------------------- round trip */

static void test_safetensors_roundtrip(void **state)
{
  float w[6] = {1, -2, 3.5f, 4, 5, -6.25f};
  double sc = 3.14159;
  unsigned char odd[3] = {7, 8, 9};
  uint16_t half[4] = {0x3F80, 0x4000, 0xBF80, 0x0000};
  unsigned char flags[4] = {1, 0, 0, 1};
  int64_t deep[2] = {-5, INT64_MAX};
  uint16_t quoted[3] = {1, 65535, 42};
  int32_t uni[2] = {-123456, 7};
  uint64_t big[2] = {UINT64_MAX, 0};
  uint16_t f16[1] = {0x3C00};
  int16_t i16[1] = {-300};
  uint32_t u32[1] = {0xDEADBEEF};
  static const char *const names[] = {
    "weight", "scalar", "empty", "odd", "half", "flags", "deep",
    "q\"u\\o\te\n/", "\xc3\xbc" "ber.\xe2\x98\x83", "big", "f16", "i16", "u32"};
  attnc_tensor t[13];
  attnc_tensor got;
  attnc_error err;
  attnc_safetensors *f;
  char *dir = make_dir(), *path = join(dir, "rt.safetensors");
  unsigned char *raw;
  size_t n, i, hn;
  (void)state;

  memset(t, 0, sizeof t);
  t[0].dtype = ATTNC_F32; t[0].rank = 2; t[0].shape[0] = 2; t[0].shape[1] = 3; t[0].data = w;
  t[1].dtype = ATTNC_F64; t[1].rank = 0; t[1].data = &sc;
  t[2].dtype = ATTNC_I8; t[2].rank = 2; t[2].shape[0] = 0; t[2].shape[1] = 5; t[2].data = NULL;
  t[3].dtype = ATTNC_U8; t[3].rank = 1; t[3].shape[0] = 3; t[3].data = odd;
  t[4].dtype = ATTNC_BF16; t[4].rank = 3; t[4].shape[0] = 2; t[4].shape[1] = 2; t[4].shape[2] = 1; t[4].data = half;
  t[5].dtype = ATTNC_BOOL; t[5].rank = 1; t[5].shape[0] = 4; t[5].data = flags;
  t[6].dtype = ATTNC_I64; t[6].rank = 8;
  for (i = 0; i < 7; i++) t[6].shape[i] = 1;
  t[6].shape[7] = 2; t[6].data = deep;
  t[7].dtype = ATTNC_U16; t[7].rank = 1; t[7].shape[0] = 3; t[7].data = quoted;
  t[8].dtype = ATTNC_I32; t[8].rank = 1; t[8].shape[0] = 2; t[8].data = uni;
  t[9].dtype = ATTNC_U64; t[9].rank = 1; t[9].shape[0] = 2; t[9].data = big;
  t[10].dtype = ATTNC_F16; t[10].rank = 1; t[10].shape[0] = 1; t[10].data = f16;
  t[11].dtype = ATTNC_I16; t[11].rank = 1; t[11].shape[0] = 1; t[11].data = i16;
  t[12].dtype = ATTNC_U32; t[12].rank = 1; t[12].shape[0] = 1; t[12].data = u32;

  memset(&err, 0, sizeof err);
  assert_int_equal(attnc_st_write(path, 13, names, t, &err), ATTNC_OK);
  assert_int_equal(dir_entries(dir), 1); /* no temp file left */

  /* The data section starts at a multiple of 8; padding is spaces. */
  raw = slurp(path, &n);
  hn = 0;
  for (i = 0; i < 8; i++) hn |= (size_t)raw[i] << (8 * i);
  assert_true(8 + hn <= n);
  assert_int_equal((8 + hn) % 8, 0);
  assert_true(raw[8 + hn - 1] == ' ' || raw[8 + hn - 1] == '}');
  assert_int_equal(raw[8], '{');
  free(raw);

  f = attnc_st_open(path, &err);
  if (!f) fail_msg("open failed: %s", err.message);
  assert_int_equal(err.code, ATTNC_OK);
  assert_int_equal(attnc_st_count(f), 13);
  for (i = 0; i < 13; i++) {
    int d;
    assert_string_equal(attnc_st_name(f, i), names[i]);
    assert_int_equal(attnc_st_get(f, i, &got), ATTNC_OK);
    assert_int_equal(got.dtype, t[i].dtype);
    assert_int_equal(got.rank, t[i].rank);
    for (d = 0; d < t[i].rank; d++) assert_int_equal(got.shape[d], t[i].shape[d]);
    assert_non_null(got.data);
    assert_int_equal((uintptr_t)got.data % attnc_dtype_size(got.dtype), 0);
    if (nbytes(&t[i])) assert_memory_equal(got.data, t[i].data, nbytes(&t[i]));
  }
  assert_int_equal(attnc_st_get(f, 1, &got), ATTNC_OK);
  assert_true(*(double *)got.data == sc);  /* the scalar: one element */
  assert_int_equal(attnc_st_get(f, 2, &got), ATTNC_OK);
  assert_int_equal(nbytes(&got), 0);       /* the empty one */
  attnc_st_close(f);

  /* Rewriting replaces the file. */
  assert_int_equal(attnc_st_write(path, 1, names + 1, t + 1, &err), ATTNC_OK);
  f = attnc_st_open(path, &err);
  assert_non_null(f);
  assert_int_equal(attnc_st_count(f), 1);
  assert_string_equal(attnc_st_name(f, 0), "scalar");
  attnc_st_close(f);

  /* No tensors at all is a valid file too. */
  assert_int_equal(attnc_st_write(path, 0, NULL, NULL, &err), ATTNC_OK);
  f = attnc_st_open(path, &err);
  assert_non_null(f);
  assert_int_equal(attnc_st_count(f), 0);
  assert_null(attnc_st_name(f, 0));
  attnc_st_close(f);
  assert_int_equal(dir_entries(dir), 1);

  unlink(path);
  rmdir(dir);
  free(path);
  free(dir);
}

/* --------------------------------------------------------------- lookups */

static void test_safetensors_find(void **state)
{
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  static const char *const names[] = {"layer.b", "layer.a"};
  attnc_tensor t[2], got;
  attnc_error err;
  attnc_safetensors *f;
  char *dir = make_dir(), *path = join(dir, "find.safetensors");
  unsigned char *raw;
  size_t n;
  (void)state;
  memset(t, 0, sizeof t);
  t[0].dtype = ATTNC_F32; t[0].rank = 1; t[0].shape[0] = 3; t[0].data = b;
  t[1].dtype = ATTNC_F32; t[1].rank = 1; t[1].shape[0] = 2; t[1].data = a;
  assert_int_equal(attnc_st_write(path, 2, names, t, &err), ATTNC_OK);
  raw = slurp(path, &n);
  f = attnc_st_from_memory(raw, n, &err);
  free(raw); /* from_memory copied it */
  assert_non_null(f);

  memset(&got, 0, sizeof got);
  assert_int_equal(attnc_st_find(f, "layer.a", &got), ATTNC_OK);
  assert_int_equal(got.shape[0], 2);
  assert_true(((float *)got.data)[1] == 2.0f);
  assert_int_equal(attnc_st_find(f, "layer.b", &got), ATTNC_OK);
  assert_int_equal(got.shape[0], 3);
  assert_true(((float *)got.data)[2] == 5.0f);

  assert_int_equal(attnc_st_find(f, "layer.c", &got), ATTNC_EMISSING);
  assert_int_equal(attnc_st_find(f, "layer.", &got), ATTNC_EMISSING);
  assert_int_equal(attnc_st_find(f, "", &got), ATTNC_EMISSING);
  assert_int_equal(attnc_st_find(f, NULL, &got), ATTNC_EARG);
  assert_int_equal(attnc_st_find(NULL, "layer.a", &got), ATTNC_EARG);
  assert_int_equal(attnc_st_get(f, 2, &got), ATTNC_EARG);
  assert_int_equal(attnc_st_get(f, 0, NULL), ATTNC_EARG);
  assert_null(attnc_st_name(f, 2));
  assert_int_equal(attnc_st_count(NULL), 0);
  attnc_st_close(f);
  attnc_st_close(NULL);
  unlink(path);
  rmdir(dir);
  free(path);
  free(dir);
}

/* ------------------------------------------------ accepted unusual headers */

static void test_safetensors_metadata_and_padding(void **state)
{
  const char *h =
    "{\"__metadata__\":{\"format\":\"pt\",\"n\\u00e9\":\"a\\\"b\\\\c\\/d\\u263a\\ud83d\\ude00\"},"
    " \"\\u00fcber\" : {\"shape\": [2], \"data_offsets\": [0, 8], \"dtype\": \"F32\"},\n"
    "\"e\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[8,8]},"
    "\"__metadata_\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[8,9]}}        ";
  float v[2] = {0.5f, -7.0f};
  unsigned char data[9];
  attnc_tensor got;
  attnc_error err;
  attnc_safetensors *f;
  unsigned char *p;
  size_t n;
  (void)state;
  memcpy(data, v, 8);
  data[8] = 200;
  p = image(h, data, 9, &n);
  f = attnc_st_from_memory(p, n, &err);
  free(p);
  if (!f) fail_msg("rejected: %s", err.message);
  assert_int_equal(attnc_st_count(f), 3); /* __metadata__ is not a tensor */
  assert_int_equal(attnc_st_find(f, "__metadata__", &got), ATTNC_EMISSING);
  assert_int_equal(attnc_st_find(f, "\xc3\xbc" "ber", &got), ATTNC_OK);
  assert_int_equal(got.dtype, ATTNC_F32);
  assert_true(((float *)got.data)[0] == 0.5f && ((float *)got.data)[1] == -7.0f);
  assert_int_equal(attnc_st_find(f, "e", &got), ATTNC_OK);
  assert_int_equal(got.rank, 1);
  assert_int_equal(got.shape[0], 0);
  assert_int_equal(attnc_st_find(f, "__metadata_", &got), ATTNC_OK);
  assert_int_equal(got.rank, 0);
  assert_int_equal(*(unsigned char *)got.data, 200);
  attnc_st_close(f);
}

static void test_safetensors_misaligned_offset(void **state)
{
  const char *h =
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]},"
    "\"c\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[9,17]},"
    "\"d\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[17,19]}}";
  unsigned char data[19];
  float fb[2] = {1.5f, -2.25f};
  double dc = 3.125;
  int16_t sd = -4321;
  attnc_tensor got;
  attnc_error err;
  attnc_safetensors *f;
  unsigned char *p;
  size_t n;
  (void)state;
  data[0] = 0xAB;
  memcpy(data + 1, fb, 8);
  memcpy(data + 9, &dc, 8);
  memcpy(data + 17, &sd, 2);
  p = image(h, data, sizeof data, &n);
  f = attnc_st_from_memory(p, n, &err);
  free(p);
  if (!f) fail_msg("rejected: %s", err.message);
  assert_int_equal(attnc_st_find(f, "b", &got), ATTNC_OK);
  assert_int_equal((uintptr_t)got.data % 4, 0);
  assert_true(((float *)got.data)[0] == 1.5f);
  assert_true(((float *)got.data)[1] == -2.25f);
  assert_int_equal(attnc_st_find(f, "c", &got), ATTNC_OK);
  assert_int_equal((uintptr_t)got.data % 8, 0);
  assert_int_equal(got.rank, 0);
  assert_true(*(double *)got.data == 3.125);
  assert_int_equal(attnc_st_find(f, "d", &got), ATTNC_OK);
  assert_int_equal((uintptr_t)got.data % 2, 0);
  assert_int_equal(*(int16_t *)got.data, -4321);
  assert_int_equal(attnc_st_find(f, "a", &got), ATTNC_OK);
  assert_int_equal(*(unsigned char *)got.data, 0xAB);
  attnc_st_close(f);
}

/* ------------------------------------------------------- malformed files */

#define OK_W "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_safetensors_short_file(void **state)
{
  attnc_error err;
  char *dir = make_dir(), *path = join(dir, "short.safetensors");
  (void)state;
  assert_null(attnc_st_from_memory("abcde", 5, &err));
  assert_int_equal(err.code, ATTNC_EFORMAT);
  assert_contains(err.message, "too short");
  assert_null(attnc_st_from_memory("", 0, &err));
  assert_int_equal(err.code, ATTNC_EFORMAT);
  spit(path, "\x02\x00\x00", 3);
  assert_null(attnc_st_open(path, &err));
  assert_int_equal(err.code, ATTNC_EFORMAT);
  assert_contains(err.message, "too short");
  assert_contains(err.message, path);
  unlink(path);
  rmdir(dir);
  free(path);
  free(dir);
}

static void test_safetensors_missing_file(void **state)
{
  attnc_error err;
  char *dir = make_dir(), *path = join(dir, "nope.safetensors");
  (void)state;
  assert_null(attnc_st_open(path, &err));
  assert_int_equal(err.code, ATTNC_EIO);
  assert_contains(err.message, path);
  assert_contains(err.message, strerror(ENOENT));
  assert_null(attnc_st_open(dir, &err)); /* a directory */
  assert_int_equal(err.code, ATTNC_EIO);
  assert_contains(err.message, dir);
  assert_null(attnc_st_open(NULL, &err));
  assert_int_equal(err.code, ATTNC_EARG);
  rmdir(dir);
  free(path);
  free(dir);
}

static void test_safetensors_header_past_end(void **state)
{
  unsigned char buf[8 + 10] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  attnc_error err;
  (void)state;
  assert_null(attnc_st_from_memory(buf, sizeof buf, &err));
  assert_int_equal(err.code, ATTNC_EFORMAT);
  assert_contains(err.message, "header length 100");
  assert_contains(err.message, "past the end");
  buf[0] = 11; /* one more than there is */
  assert_null(attnc_st_from_memory(buf, sizeof buf, &err));
  assert_contains(err.message, "past the end");
}

static void test_safetensors_header_too_large(void **state)
{
  unsigned char buf[16] = {0, 0, 0, 0, 0, 1, 0, 0, '{', '}'}; /* 2^40 */
  attnc_error err;
  (void)state;
  assert_null(attnc_st_from_memory(buf, sizeof buf, &err));
  assert_int_equal(err.code, ATTNC_EFORMAT);
  assert_contains(err.message, "exceeds the limit");
  memset(buf, 0xFF, 8);
  assert_null(attnc_st_from_memory(buf, sizeof buf, &err));
  assert_contains(err.message, "exceeds the limit");
}

static void test_safetensors_invalid_json(void **state)
{
  static const char *const bad[] = {
    "",
    "   ",
    "[]",
    "{",
    "{" OK_W ",}",
    "{" OK_W "}x",
    "{" OK_W "}  x",
    "{" OK_W " " OK_W "}",
    "{'w':{}}",
    "{\"w\":{\"dtype\":\"F32\"",
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,],\"data_offsets\":[0,8]}}",
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}",
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2] \"data_offsets\":[0,8]}}",
    "{\"w\" {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    "{\"w\\x\":{}}",
    "{\"w\\u12\":{}}",
    "{\"w\\ud800\":{}}",
    "{\"w\\udc00x\":{}}",
    "{\"w\\ud800\\u0041\":{}}",
    "{\"w\xff\":{}}",
    "{\"w\xc0\xaf\":{}}",
    "{\"w\xed\xa0\x80\":{}}",
    "{\"w\xe2\x98\":{}}",
    "{\"w\tx\":{}}",
    "{\"w",
    "{\"w\\",
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.],\"data_offsets\":[0,8]}}",
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[-],\"data_offsets\":[0,8]}}",
  };
  size_t i;
  (void)state;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_bad(bad[i], 8, "invalid JSON", NULL);
}

static void test_safetensors_not_an_object(void **state)
{
  (void)state;
  expect_bad("{\"w\":true}", 8, "expected an object", "'w'");
  expect_bad("{\"w\":[1]}", 8, "expected an object", "'w'");
  expect_bad("{\"__metadata__\":[]}", 8, "__metadata__", NULL);
  expect_bad("{\"__metadata__\":{\"a\":1}}", 8, "not a string", "'a'");
  expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 8, "duplicate __metadata__", NULL);
  expect_bad("{\"w\\u0000\":{}}", 8, "NUL", NULL);
}

static void test_safetensors_missing_field(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "missing field \"shape\"", "'w'");
  expect_bad("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "missing field \"dtype\"", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "missing field \"data_offsets\"", "'w'");
  expect_bad("{\"w\":{}}", 8, "missing field", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
             "appears twice", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"strides\":[1]}}", 8,
             "unknown field \"strides\"", "'w'");
}

static void test_safetensors_unknown_dtype(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype \"f32\"", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype", "'w'");
  expect_bad("{\"w\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype must be a string", "'w'");
}

static void test_safetensors_negative_shape(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}}", 8, "negative", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-99999999999999999999999],\"data_offsets\":[0,8]}}", 8,
             "negative", "'w'");
}

static void test_safetensors_noninteger_shape(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "not an integer", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", 8, "not an integer", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, "not an integer", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,8]}}", 8, "not an integer", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8, "not an integer", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "shape must be an array", "'w'");
}

static void test_safetensors_rank_too_large(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
             "rank", "'w'");
}

static void test_safetensors_shape_overflow(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
             "overflow", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[2,4611686018427387904],\"data_offsets\":[0,8]}}", 8,
             "overflow", "'w'");
  /* elements fit in int64 but bytes do not fit in 64 bits */
  expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387903],\"data_offsets\":[0,8]}}", 8,
             "overflow", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,8]}}", 8,
             "overflow", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999999],\"data_offsets\":[0,8]}}", 8,
             "too large", "'w'");
}

static void test_safetensors_zero_dim_does_not_overflow(void **state)
{
  const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}";
  attnc_error err;
  attnc_safetensors *f;
  attnc_tensor got;
  unsigned char *p;
  size_t n;
  (void)state;
  p = image(h, NULL, 0, &n);
  f = attnc_st_from_memory(p, n, &err);
  free(p);
  if (!f) fail_msg("rejected: %s", err.message);
  assert_int_equal(attnc_st_get(f, 0, &got), ATTNC_OK);
  assert_int_equal(got.shape[0], 4294967296LL);
  assert_int_equal(got.shape[2], 0);
  attnc_st_close(f);
}

static void test_safetensors_bad_offsets(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "[begin, end]", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[]}}", 8, "[begin, end]", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "[begin, end]", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":8}}", 8, "data_offsets", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}}", 8, "negative", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, "begin after end", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551616]}}", 8,
             "too large", "'w'");
}

static void test_safetensors_end_past_data(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
             "past the end of the data section", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551608,"
             "18446744073709551615]}}", 8, "past the end of the data section", "'w'");
}

static void test_safetensors_size_mismatch(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, "size mismatch", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16, "size mismatch", "'w'");
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,0]}}", 16, "size mismatch", "'w'");
}

static void test_safetensors_overlap(void **state)
{
  (void)state;
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap", "'a'");
  expect_bad("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "overlap", "'b'");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8, "overlap", "'b'");
}

static void test_safetensors_duplicate_name(void **state)
{
  (void)state;
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"v\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "duplicate", "'w'");
  /* the same name spelled with an escape */
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"\\u0077\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "duplicate", "'w'");
}

/* Every truncation of a valid file is rejected, and no single-byte
 * corruption crashes or yields a tensor outside its buffer. */
static void test_safetensors_truncated_and_corrupted(void **state)
{
  const char *h =
    "{\"__metadata__\":{\"k\":\"v\"},\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
    "\"b\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[3,11]},"
    "\"c\\u00e9\":{\"dtype\":\"I16\",\"shape\":[],\"data_offsets\":[11,13]}}  ";
  unsigned char data[13];
  static const unsigned char flips[] = {0x00, 0xFF, '0', '9', '-', '"', '\\', '{', ']', ',', ' ', 0x80};
  attnc_error err;
  attnc_safetensors *f;
  unsigned char *p, *q;
  size_t n, len, i, j, k;
  volatile unsigned sum = 0;
  (void)state;
  for (i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 37 + 1);
  p = image(h, data, sizeof data, &n);
  f = attnc_st_from_memory(p, n, &err);
  if (!f) fail_msg("rejected: %s", err.message);
  assert_int_equal(attnc_st_count(f), 3);
  attnc_st_close(f);
  for (len = 0; len < n; len++) {
    q = malloc(len ? len : 1);
    assert_non_null(q);
    memcpy(q, p, len);
    err.code = ATTNC_OK;
    f = attnc_st_from_memory(q, len, &err);
    free(q);
    if (f) fail_msg("truncation to %zu bytes accepted", len);
    assert_int_equal(err.code, ATTNC_EFORMAT);
    assert_true(err.message[0] != '\0');
  }
  q = malloc(n);
  assert_non_null(q);
  for (i = 0; i < n; i++) {
    for (j = 0; j < sizeof flips; j++) {
      memcpy(q, p, n);
      q[i] = flips[j];
      f = attnc_st_from_memory(q, n, &err);
      if (!f) {
        assert_true(err.code == ATTNC_EFORMAT || err.code == ATTNC_ENOMEM);
        assert_true(err.message[0] != '\0');
        continue;
      }
      for (k = 0; k < attnc_st_count(f); k++) {
        attnc_tensor t;
        size_t b, m;
        assert_int_equal(attnc_st_get(f, k, &t), ATTNC_OK);
        b = nbytes(&t);
        assert_true(b <= sizeof data);
        assert_int_equal((uintptr_t)t.data % attnc_dtype_size(t.dtype), 0);
        for (m = 0; m < b; m++) sum += ((const unsigned char *)t.data)[m]; /* touch every byte */
      }
      attnc_st_close(f);
    }
  }
  free(q);
  free(p);
  (void)sum;
}

/* ------------------------------------------------------------ write errors */

static void test_safetensors_write_errors(void **state)
{
  float a[2] = {1, 2};
  attnc_tensor t[2];
  attnc_error err;
  attnc_safetensors *f;
  static const char *const dup[] = {"x", "x"};
  static const char *const two[] = {"x", "y"};
  static const char *const meta[] = {"__metadata__"};
  static const char *const badutf[] = {"x\xff"};
  char *dir = make_dir(), *path = join(dir, "w.safetensors"), *sub = join(dir, "sub"), *deep;
  (void)state;
  memset(t, 0, sizeof t);
  t[0].dtype = ATTNC_F32; t[0].rank = 1; t[0].shape[0] = 2; t[0].data = a;
  t[1] = t[0];

  assert_int_equal(attnc_st_write(path, 1, two, t, &err), ATTNC_OK);

  assert_int_equal(attnc_st_write(path, 2, dup, t, &err), ATTNC_EARG);
  assert_contains(err.message, "duplicate");
  assert_contains(err.message, "'x'");

  t[1].data = NULL;
  assert_int_equal(attnc_st_write(path, 2, two, t, &err), ATTNC_EARG);
  assert_contains(err.message, "NULL data");
  assert_contains(err.message, "'y'");
  t[1].shape[0] = 0; /* NULL is fine with no bytes */
  assert_int_equal(attnc_st_write(path, 2, two, t, &err), ATTNC_OK);
  t[1] = t[0];

  t[1].dtype = (attnc_dtype)42;
  assert_int_equal(attnc_st_write(path, 2, two, t, &err), ATTNC_EARG);
  assert_contains(err.message, "dtype");
  t[1] = t[0];
  t[1].rank = ATTNC_MAX_RANK + 1;
  assert_int_equal(attnc_st_write(path, 2, two, t, &err), ATTNC_EARG);
  assert_contains(err.message, "rank");
  t[1] = t[0];
  t[1].shape[0] = -1;
  assert_int_equal(attnc_st_write(path, 2, two, t, &err), ATTNC_EARG);
  assert_contains(err.message, "negative");
  t[1] = t[0];
  assert_int_equal(attnc_st_write(path, 1, meta, t, &err), ATTNC_EARG);
  assert_contains(err.message, "reserved");
  assert_int_equal(attnc_st_write(path, 1, badutf, t, &err), ATTNC_EARG);
  assert_contains(err.message, "UTF-8");
  assert_int_equal(attnc_st_write(path, 1, NULL, t, &err), ATTNC_EARG);
  assert_int_equal(attnc_st_write(NULL, 1, two, t, &err), ATTNC_EARG);

  /* The file from the last good write is untouched, and no temp files. */
  f = attnc_st_open(path, &err);
  assert_non_null(f);
  assert_int_equal(attnc_st_count(f), 2);
  attnc_st_close(f);
  assert_int_equal(dir_entries(dir), 1);

  /* I/O failures: a missing directory, and a rename onto a directory. */
  deep = join(dir, "missing/x.safetensors");
  assert_int_equal(attnc_st_write(deep, 1, two, t, &err), ATTNC_EIO);
  assert_contains(err.message, deep);
  assert_contains(err.message, strerror(ENOENT));
  assert_int_equal(mkdir(sub, 0700), 0);
  assert_int_equal(attnc_st_write(sub, 1, two, t, &err), ATTNC_EIO);
  assert_contains(err.message, sub);
  assert_contains(err.message, "rename");
  assert_int_equal(dir_entries(dir), 2); /* w.safetensors and sub: temp removed */

  rmdir(sub);
  unlink(path);
  rmdir(dir);
  free(deep);
  free(sub);
  free(path);
  free(dir);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_safetensors_dtype_helpers),
    cmocka_unit_test(test_safetensors_roundtrip),
    cmocka_unit_test(test_safetensors_find),
    cmocka_unit_test(test_safetensors_metadata_and_padding),
    cmocka_unit_test(test_safetensors_misaligned_offset),
    cmocka_unit_test(test_safetensors_short_file),
    cmocka_unit_test(test_safetensors_missing_file),
    cmocka_unit_test(test_safetensors_header_past_end),
    cmocka_unit_test(test_safetensors_header_too_large),
    cmocka_unit_test(test_safetensors_invalid_json),
    cmocka_unit_test(test_safetensors_not_an_object),
    cmocka_unit_test(test_safetensors_missing_field),
    cmocka_unit_test(test_safetensors_unknown_dtype),
    cmocka_unit_test(test_safetensors_negative_shape),
    cmocka_unit_test(test_safetensors_noninteger_shape),
    cmocka_unit_test(test_safetensors_rank_too_large),
    cmocka_unit_test(test_safetensors_shape_overflow),
    cmocka_unit_test(test_safetensors_zero_dim_does_not_overflow),
    cmocka_unit_test(test_safetensors_bad_offsets),
    cmocka_unit_test(test_safetensors_end_past_data),
    cmocka_unit_test(test_safetensors_size_mismatch),
    cmocka_unit_test(test_safetensors_overlap),
    cmocka_unit_test(test_safetensors_duplicate_name),
    cmocka_unit_test(test_safetensors_truncated_and_corrupted),
    cmocka_unit_test(test_safetensors_write_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
