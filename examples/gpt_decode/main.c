/* A Llama-style grouped-query self-attention layer with rotary embeddings,
 * from a Hugging Face checkpoint, run the way a generation loop runs it:
 * the prompt in one call, then one token per call, over a KV cache that the
 * kernel itself appends to.
 *
 *     gpt_decode [DATA_DIR]        (default: examples/gpt_decode)
 *
 * DATA_DIR/checkpoint.safetensors is a two-layer model under Hugging Face
 * Llama names (model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight,
 * ..., model.layers.0.mlp.*, model.layers.1.self_attn.*, model.norm.weight).
 * The layer run here is model.layers.0.self_attn: width 64, 4 query heads of
 * 16 sharing 2 kv heads, with biases on q_proj, k_proj, v_proj and o_proj
 * (LlamaConfig attention_bias=True), RoPE with rotate_half (attnc's neox)
 * and rope_theta 10000.  DATA_DIR/inputs.safetensors holds x (1 x N x 64,
 * the layer's input for N tokens), `expected` (row t: PyTorch's output for
 * token t from the call that fed it) and expected_k_cache, expected_v_cache
 * (PyTorch's cache after the N tokens), made by tools/make_examples.py.
 *
 * One kernel, one bindings object, caches of CAP positions bound once:
 *   - prefill: x = the PROMPT prompt tokens, cache_len = 0;
 *   - then for each later token t: x = that token's row, cache_len = t.
 * Each run projects the new rows, rotates q and k at positions
 * cache_len + i, writes k and v into the caches there, attends over
 * positions 0 .. cache_len + i and writes the output rows.  Nothing is
 * copied or moved per token; the program only advances cache_len.
 *
 * The same loop runs again with kv_dtype=bf16 (a cache of half the bytes).
 * Exits 0 only if every output row, and the caches' filled positions, are
 * within the DESIGN.md bound of their storage type (f32: 1e-5 + 1e-4*|r|;
 * bf16: 0.03*rms + 0.03*|r|) and the unfilled positions are untouched. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

#define NAME "gpt_decode"
#define PREFIX "model.layers.0.self_attn."
enum { HIDDEN = 64, HEADS = 4, KV_HEADS = 2, HEAD_DIM = 16, PROMPT = 7, CAP = 16 };
/* the layer: S new rows per run (bound from x); caches of CAP = 16 positions */
#define SPEC "gqa x=1,S,64 heads=4 kv_heads=2 cache=16 rope=neox"
#define SPEC_BF16 SPEC " kv_dtype=bf16"

/* What a run of the loop is checked against. */
struct golden {
  const float *x, *out, *k_cache, *v_cache; /* x, expected (N, 64); caches (G, N, c) */
  long n;                                   /* N tokens */
  double rms_out, rms_k, rms_v;             /* root mean squares, for the bf16 bound */
};

static int fail(const char *what, const attnc_error *e)
{
  fprintf(stderr, NAME ": %s: %s%s%s\n", what, e->where, e->where[0] ? ": " : "", e->message);
  return 1;
}

/* A tensor of the file by name, checked to be F32 of the given shape. */
static int get_f32(const attnc_safetensors *f, const char *name, int rank, const int64_t *shape, const float **data)
{
  attnc_tensor t;
  attnc_status s = attnc_st_find(f, name, &t);
  if (s != ATTNC_OK) {
    fprintf(stderr, NAME ": tensor '%s': %s\n", name, attnc_strerror(s));
    return 1;
  }
  if (t.dtype != ATTNC_F32 || t.rank != rank || memcmp(t.shape, shape, sizeof(int64_t) * (size_t)rank) != 0) {
    fprintf(stderr, NAME ": tensor '%s' is not F32 of the expected shape\n", name);
    return 1;
  }
  *data = t.data;
  return 0;
}

static double rms(const float *r, size_t n)
{
  double s = 0;
  size_t i;
  for (i = 0; i < n; i++) s += (double)r[i] * r[i];
  return sqrt(s / (double)n);
}

/* The largest difference an element may have from the reference r:
 * DESIGN.md's f32 row, or for a bf16 cache the looser bf16 row. */
static double bound(attnc_dtype kv, double r, double rms_r)
{
  return kv == ATTNC_BF16 ? 0.03 * rms_r + 0.03 * fabs(r) : 1e-5 + 1e-4 * fabs(r);
}

static double cache_value(attnc_dtype kv, const void *cache, size_t i)
{
  if (kv == ATTNC_BF16) { /* the top half of an f32 */
    union { unsigned int u; float f; } w;
    w.u = (unsigned int)((const unsigned short *)cache)[i] << 16;
    return w.f;
  }
  return ((const float *)cache)[i];
}

/* Compare n values with the reference; update the running max error;
 * count those outside the bound (a NaN counts). */
static long compare(const char *what, long row, const double *got, const float *want, size_t n, attnc_dtype kv, double rms_r,
                    double *max_err)
{
  long bad = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    double d = fabs(got[i] - (double)want[i]);
    if (!(d <= bound(kv, want[i], rms_r))) {
      if (bad < 3) fprintf(stderr, NAME ": %s, row %ld, element %zu: got %.8g, expected %.8g\n", what, row, i, got[i], want[i]);
      bad++;
    }
    if (d > *max_err || d != d) *max_err = d;
  }
  return bad;
}

/* One cache (1, G, CAP, c) against PyTorch's (1, G, N, c): the N filled
 * positions within the bound, the CAP - N others still all zero bits. */
static long check_cache(const char *what, attnc_dtype kv, const void *cache, const float *want, long n, double rms_r, double *max_err)
{
  const size_t es = attnc_dtype_size(kv);
  const unsigned char *bytes = cache;
  long bad = 0, g, j;
  double got[HEAD_DIM];
  size_t i;
  int c;
  for (g = 0; g < KV_HEADS; g++) {
    for (j = 0; j < n; j++) {
      for (c = 0; c < HEAD_DIM; c++) got[c] = cache_value(kv, cache, ((size_t)(g * CAP + j)) * HEAD_DIM + (size_t)c);
      bad += compare(what, g * CAP + j, got, want + (g * n + j) * HEAD_DIM, HEAD_DIM, kv, rms_r, max_err);
    }
    for (i = (size_t)(g * CAP + n) * HEAD_DIM * es; i < (size_t)(g + 1) * CAP * HEAD_DIM * es; i++)
      if (bytes[i] != 0) {
        fprintf(stderr, NAME ": %s: position %ld of kv head %ld was written, but no token is there\n", what,
                (long)((i / es / HEAD_DIM) % CAP), g);
        return bad + 1;
      }
  }
  return bad;
}

/* The generation loop for one spec: compile, bind the checkpoint and the
 * caches once, prefill, then one token per run.  verbose prints each run.
 * Returns the number of elements out of bounds, or -1 when a call failed. */
static long generate(const char *spec, attnc_dtype kv, const attnc_safetensors *ckpt, const struct golden *gold, int verbose,
                     attnc_backend *backend)
{
  attnc_error err;
  attnc_kernel *k = NULL;
  attnc_bindings *b = NULL;
  void *k_cache = NULL, *v_cache = NULL;
  /* the caches: (batch, kv heads, CAP, head_dim), HF's layout, in exactly kv_dtype, zeroed */
  attnc_tensor kt = { kv, 4, { 1, KV_HEADS, CAP, HEAD_DIM }, NULL }, vt;
  long long cache_len = 0; /* positions already filled: the next token's position */
  long t, n, bad = -1, nb = 0;
  double max_all = 0, max_k = 0, max_v = 0;
  int nw = 0;

  if (!(k = attnc_compile(spec, NULL, &err))) { fail("attnc_compile", &err); goto done; }
  *backend = attnc_kernel_backend(k);
  if (!(b = attnc_bindings_new(k))) { fprintf(stderr, NAME ": attnc_bindings_new: out of memory\n"); goto done; }
  if (attnc_bind_safetensors(b, ckpt, PREFIX, &nw, &err) != ATTNC_OK) { fail("binding the checkpoint", &err); goto done; }
  if (nw != 8) { /* q/k/v/o_proj .weight and .bias; layer 1 and the MLP are skipped */
    fprintf(stderr, NAME ": bound %d tensors under %s, expected 8\n", nw, PREFIX);
    goto done;
  }
  k_cache = calloc(KV_HEADS * CAP * HEAD_DIM, attnc_dtype_size(kv));
  v_cache = calloc(KV_HEADS * CAP * HEAD_DIM, attnc_dtype_size(kv));
  if (!k_cache || !v_cache) { fprintf(stderr, NAME ": out of memory\n"); goto done; }
  vt = kt;
  kt.data = k_cache;
  vt.data = v_cache;
  if (attnc_bind(b, "k_cache", &kt, &err) != ATTNC_OK) { fail("attnc_bind k_cache", &err); goto done; }
  if (attnc_bind(b, "v_cache", &vt, &err) != ATTNC_OK) { fail("attnc_bind v_cache", &err); goto done; }

  for (t = 0; t < gold->n; t += n) {
    float y[PROMPT * HIDDEN];
    double got[PROMPT * HIDDEN], max_err = 0;
    /* x: the new tokens' rows, a view into the input (S = n); out likewise */
    attnc_tensor x = { ATTNC_F32, 3, { 1, 0, HIDDEN }, NULL }, out = { ATTNC_F32, 3, { 1, 0, HIDDEN }, y };
    attnc_tensor len = { ATTNC_I64, 0, { 0 }, &cache_len }; /* a scalar: one sequence */
    int i;
    n = t == 0 ? PROMPT : 1; /* the prompt at once, then one token per run */
    x.shape[1] = out.shape[1] = n;
    x.data = (void *)(gold->x + t * HIDDEN);
    if (attnc_bind(b, "x", &x, &err) != ATTNC_OK) { fail("attnc_bind x", &err); goto done; }
    if (attnc_bind(b, "cache_len", &len, &err) != ATTNC_OK) { fail("attnc_bind cache_len", &err); goto done; }
    if (attnc_run(b, &out, &err) != ATTNC_OK) { fail("attnc_run", &err); goto done; }
    for (i = 0; i < n * HIDDEN; i++) got[i] = y[i];
    nb += compare(t ? "decode" : "prefill", t, got, gold->out + t * HIDDEN, (size_t)(n * HIDDEN), kv, gold->rms_out, &max_err);
    if (verbose) {
      char toks[32];
      snprintf(toks, sizeof toks, n > 1 ? "tokens %ld..%ld" : "token %ld", t, t + n - 1);
      printf("  %-7s cache_len %2lld -> %2lld: %-12s max abs err %.1e\n", t ? "decode" : "prefill", cache_len, cache_len + n,
             toks, max_err);
    }
    if (max_err > max_all || max_err != max_err) max_all = max_err;
    cache_len += n; /* the caller's one job between runs */
  }
  nb += check_cache("k_cache", kv, k_cache, gold->k_cache, gold->n, gold->rms_k, &max_k);
  nb += check_cache("v_cache", kv, v_cache, gold->v_cache, gold->n, gold->rms_v, &max_v);
  if (verbose)
    printf("  caches: positions 0..%ld max abs err %.1e (k_cache), %.1e (v_cache); %ld..%d untouched\n", gold->n - 1, max_k,
           max_v, gold->n, CAP - 1);
  else
    printf("  %ld tokens, max abs err %.1e; caches %.1e (k_cache), %.1e (v_cache); bound 0.03*rms + 0.03*|r|\n", gold->n,
           max_all, max_k, max_v);
  bad = nb;

done:
  free(k_cache);
  free(v_cache);
  attnc_bindings_free(b);
  attnc_release(k);
  return bad;
}

int main(int argc, char **argv)
{
  const char *dir = argc > 1 ? argv[1] : "examples/" NAME;
  char path[4096];
  attnc_error err;
  attnc_safetensors *ckpt = NULL, *inputs = NULL;
  attnc_tensor x;
  attnc_backend backend = ATTNC_BACKEND_DEFAULT;
  struct golden gold;
  int64_t cache_shape[4] = { 1, KV_HEADS, 0, HEAD_DIM };
  long bad32, bad16;
  int rc = 1;

  snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
  if (!(ckpt = attnc_st_open(path, &err))) { fail(path, &err); goto done; }
  snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
  if (!(inputs = attnc_st_open(path, &err))) { fail(path, &err); goto done; }
  if (attnc_st_find(inputs, "x", &x) != ATTNC_OK || x.dtype != ATTNC_F32 || x.rank != 3 || x.shape[0] != 1 ||
      x.shape[2] != HIDDEN || x.shape[1] <= PROMPT || x.shape[1] > CAP) {
    fprintf(stderr, NAME ": %s: 'x' must be F32 (1, N, %d) with %d < N <= %d\n", path, HIDDEN, PROMPT, CAP);
    goto done;
  }
  gold.x = x.data;
  gold.n = (long)x.shape[1];
  cache_shape[2] = gold.n;
  if (get_f32(inputs, "expected", 3, x.shape, &gold.out) || get_f32(inputs, "expected_k_cache", 4, cache_shape, &gold.k_cache) ||
      get_f32(inputs, "expected_v_cache", 4, cache_shape, &gold.v_cache))
    goto done;
  gold.rms_out = rms(gold.out, (size_t)gold.n * HIDDEN);
  gold.rms_k = rms(gold.k_cache, (size_t)gold.n * KV_HEADS * HEAD_DIM);
  gold.rms_v = rms(gold.v_cache, (size_t)gold.n * KV_HEADS * HEAD_DIM);

  printf(NAME ": %s, 8 weights under %s; a %d-token prompt, then one token per run\n", SPEC, PREFIX, PROMPT);
  bad32 = generate(SPEC, ATTNC_F32, ckpt, &gold, 1, &backend);
  if (bad32 < 0) goto done;
  printf(NAME ": kv_dtype=bf16, the same loop:\n");
  bad16 = generate(SPEC_BF16, ATTNC_BF16, ckpt, &gold, 0, &backend);
  if (bad16 < 0) goto done;
  printf(NAME ": %s (%s)\n", bad32 + bad16 ? "FAILED" : "OK", backend == ATTNC_BACKEND_CC ? "cc" : "tcc");
  if (bad32 + bad16)
    fprintf(stderr, NAME ": %ld elements outside the f32 bound, %ld outside the bf16 bound\n", bad32, bad16);
  rc = bad32 + bad16 ? 1 : 0;

done:
  attnc_st_close(inputs);
  attnc_st_close(ckpt);
  return rc;
}
