/* libFuzzer harness: the safetensors reader.
 *
 * The input is a whole file for attnc_st_from_memory.  Checks (any
 * failure aborts; ASan catches stray reads):
 *  - a refusal is ATTNC_EFORMAT (or ATTNC_ENOMEM) with a printable message;
 *  - an accepted file: every tensor has a known dtype, a rank 0..8 and
 *    non-negative dims whose product times the dtype size fits; every byte
 *    of every tensor is read; each tensor's bytes occur in the input's data
 *    section (they come from the file, not from outside it); tensors
 *    together are no larger than the data section (they do not overlap);
 *    names are unique and attnc_st_find finds each one, giving the same
 *    tensor as attnc_st_get.
 */
#define _GNU_SOURCE /* memmem */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "fuzz_common.h"

static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  attnc_error err;
  attnc_safetensors *f;
  size_t i, n, hn = 0, dlen = 0;
  uint64_t total = 0;
  const uint8_t *dsec = NULL;

  memset(&err, 0, sizeof err);
  f = attnc_st_from_memory(data, size, &err);
  if (!f) {
    const unsigned char *p = (const unsigned char *)err.message;
    if (err.code != ATTNC_EFORMAT && err.code != ATTNC_ENOMEM)
      fuzz_fail("attnc_st_from_memory refused with code %d (%s): %s", (int)err.code,
                attnc_strerror(err.code), err.message);
    if (!*p) fuzz_fail("attnc_st_from_memory refused without a message");
    for (; *p; p++)
      if (*p < 0x20 || *p == 0x7f) fuzz_fail("error message holds control byte 0x%02x: %s", *p, err.message);
    return 0;
  }
  if (size < 8) fuzz_fail("accepted a %zu-byte file", size);
  for (i = 8; i-- > 0;) hn = (hn << 8) | data[i];
  if (hn > size - 8) fuzz_fail("accepted a header length %zu past the end (%zu bytes)", hn, size);
  dsec = data + 8 + hn;
  dlen = size - 8 - hn;

  n = attnc_st_count(f);
  for (i = 0; i < n; i++) {
    attnc_tensor t, u;
    const char *name = attnc_st_name(f, i);
    uint64_t count = 1, bytes, b;
    size_t es;
    int d;
    if (!name) fuzz_fail("tensor %zu has no name", i);
    if (attnc_st_get(f, i, &t) != ATTNC_OK) fuzz_fail("attnc_st_get(%zu) failed", i);
    es = attnc_dtype_size(t.dtype);
    if (es == 0) fuzz_fail("tensor '%s' has dtype %d", name, (int)t.dtype);
    if (t.rank < 0 || t.rank > ATTNC_MAX_RANK) fuzz_fail("tensor '%s' has rank %d", name, t.rank);
    for (d = 0; d < t.rank; d++)
      if (t.shape[d] < 0) fuzz_fail("tensor '%s' has shape[%d] = %lld", name, d, (long long)t.shape[d]);
    for (d = 0; d < t.rank; d++) {
      if (t.shape[d] == 0) { count = 0; break; }
      if (count > UINT64_MAX / (uint64_t)t.shape[d]) count = UINT64_MAX;
      else count *= (uint64_t)t.shape[d];
    }
    if (count && count > dlen / es) fuzz_fail("tensor '%s' needs more than the %zu-byte data section", name, dlen);
    bytes = count * es;
    total += bytes;
    if (bytes && !t.data) fuzz_fail("tensor '%s' has %llu bytes but no data", name, (unsigned long long)bytes);
    for (b = 0; b < bytes; b++) sink ^= ((const uint8_t *)t.data)[b];
    if (bytes && !memmem(dsec, dlen, t.data, (size_t)bytes))
      fuzz_fail("tensor '%s': its %llu bytes are not in the data section", name, (unsigned long long)bytes);
    if (bytes >= 2 && ((uintptr_t)t.data % es) != 0)
      fuzz_fail("tensor '%s' is misaligned for its dtype (%p)", name, t.data);
    if (attnc_st_find(f, name, &u) != ATTNC_OK) fuzz_fail("attnc_st_find cannot find '%s'", name);
    if (u.data != t.data || u.dtype != t.dtype || u.rank != t.rank ||
        memcmp(u.shape, t.shape, sizeof t.shape) != 0)
      fuzz_fail("attnc_st_find('%s') gives another tensor than attnc_st_get(%zu)", name, i);
  }
  if (total > dlen) fuzz_fail("tensors total %llu bytes in a %zu-byte data section (overlap)", (unsigned long long)total, dlen);
  {
    attnc_tensor t;
    if (attnc_st_get(f, n, &t) == ATTNC_OK) fuzz_fail("attnc_st_get past the end succeeded");
    if (attnc_st_name(f, n) != NULL) fuzz_fail("attnc_st_name past the end is not NULL");
  }
  attnc_st_close(f);
  return 0;
}
