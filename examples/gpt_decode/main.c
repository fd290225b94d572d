/* A Llama-style grouped-query causal self-attention layer from a Hugging
 * Face checkpoint: prefill over a prompt, then token-by-token decoding over
 * a growing KV cache.
 *
 *     gpt_decode [DATA_DIR]        (default: examples/gpt_decode)
 *
 * DATA_DIR/checkpoint.safetensors is a two-layer model under Hugging Face
 * Llama names (model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight,
 * ..., model.layers.0.mlp.*, model.layers.1.self_attn.*, model.norm.weight).
 * The layer run here is model.layers.0.self_attn: width 64, 4 query heads of
 * 16 sharing 2 kv heads, with biases on q_proj, k_proj, v_proj and o_proj
 * (LlamaConfig attention_bias=True) and no rotary embedding (the spec
 * language has none).  DATA_DIR/inputs.safetensors holds x (1 x N x 64, the
 * layer's input for N tokens) and `expected`, PyTorch's full-sequence causal
 * output (tools/make_examples.py).
 *
 * 1. Prefill: the first PROMPT tokens through one full kernel
 *    (gqa ... causal, weights bound from the checkpoint with the layer's
 *    prefix); every output row is checked.
 * 2. The prompt's k and v, projected here in plain C with the checkpoint's
 *    k_proj and v_proj, fill the KV cache.
 * 3. Decoding, one token at a time: project the new token's q, k and v in C,
 *    append k and v to the cache, run one core kernel (mode=core, the cache
 *    length a named dim T, bound again at every step), apply o_proj in C
 *    and check the row against the full-sequence output.
 *
 * Exits 0 only if |out - expected| <= 1e-5 + 1e-4 * |expected| for every
 * element of every checked row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

#define NAME "gpt_decode"
#define PREFIX "model.layers.0.self_attn."
enum { HIDDEN = 64, HEADS = 4, KV_HEADS = 2, HEAD_DIM = 16, PROMPT = 7 };
/* prefill: the layer itself, S = the number of tokens, bound from x */
#define PREFILL_SPEC "gqa x=1,S,64 heads=4 kv_heads=2 causal"
/* one decode step: q (1, H, 1, c) of the new token against the cache
 * k, v (1, G, T, c); bottom_right lets it see all T cached keys */
#define DECODE_SPEC "mode=core q=1,4,1,16 kv=1,2,T,16 causal=bottom_right"

struct linear { const float *w, *b; int out, in; };

static int fail(const char *what, const attnc_error *e)
{
  fprintf(stderr, NAME ": %s: %s%s%s\n", what, e->where, e->where[0] ? ": " : "", e->message);
  return 1;
}

/* A tensor of the file by name, checked to be F32 of the given shape. */
static int get_f32(const attnc_safetensors *f, const char *name, int rank, const int64_t *shape, attnc_tensor *t)
{
  attnc_status s = attnc_st_find(f, name, t);
  if (s != ATTNC_OK) {
    fprintf(stderr, NAME ": tensor '%s': %s\n", name, attnc_strerror(s));
    return 1;
  }
  if (t->dtype != ATTNC_F32 || t->rank != rank || memcmp(t->shape, shape, sizeof(int64_t) * (size_t)rank) != 0) {
    fprintf(stderr, NAME ": tensor '%s' is not F32 of the expected shape\n", name);
    return 1;
  }
  return 0;
}

/* PREFIX + "q_proj" -> weight (out, in) and bias (out) */
static int get_linear(const attnc_safetensors *f, const char *proj, int out, int in, struct linear *l)
{
  char name[256];
  attnc_tensor t;
  int64_t ws[2] = { out, in }, bs[1] = { out };
  snprintf(name, sizeof name, PREFIX "%s.weight", proj);
  if (get_f32(f, name, 2, ws, &t)) return 1;
  l->w = t.data;
  snprintf(name, sizeof name, PREFIX "%s.bias", proj);
  if (get_f32(f, name, 1, bs, &t)) return 1;
  l->b = t.data;
  l->out = out;
  l->in = in;
  return 0;
}

/* y = W x + b, PyTorch's Linear, accumulated in double */
static void linear(const struct linear *l, const float *x, float *y)
{
  int o, i;
  for (o = 0; o < l->out; o++) {
    double acc = l->b[o];
    const float *w = l->w + (size_t)o * (size_t)l->in;
    for (i = 0; i < l->in; i++) acc += (double)w[i] * x[i];
    y[o] = (float)acc;
  }
}

/* Append one token's (G*c) vector, heads in order, to a dense (1, G, T, c)
 * cache, making it (1, G, T+1, c) in place (as torch.cat along the
 * sequence axis): move each head's T rows up, last head first, then write
 * the new row after each.  The buffer has room for the final length. */
static void cache_append(float *cache, long T, const float *row)
{
  int g;
  for (g = KV_HEADS - 1; g >= 0; g--) {
    memmove(cache + (size_t)g * (size_t)(T + 1) * HEAD_DIM, cache + (size_t)g * (size_t)T * HEAD_DIM,
            sizeof(float) * (size_t)T * HEAD_DIM);
    memcpy(cache + ((size_t)g * (size_t)(T + 1) + (size_t)T) * HEAD_DIM, row + (size_t)g * HEAD_DIM, sizeof(float) * HEAD_DIM);
  }
}

/* Compare n values; update the running max error; count those outside the tolerance. */
static long compare(const char *what, long row, const float *out, const float *want, size_t n, double *max_err)
{
  long bad = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    double d = fabs((double)out[i] - (double)want[i]);
    if (!(d <= 1e-5 + 1e-4 * fabs((double)want[i]))) { /* also catches NaN */
      if (bad < 3) fprintf(stderr, NAME ": %s, token %ld, element %zu: got %.8g, expected %.8g\n", what, row, i, out[i], want[i]);
      bad++;
    }
    if (d > *max_err || d != d) *max_err = d;
  }
  return bad;
}

int main(int argc, char **argv)
{
  const char *dir = argc > 1 ? argv[1] : "examples/" NAME;
  char path[4096];
  attnc_error err;
  attnc_safetensors *ckpt = NULL, *inputs = NULL;
  attnc_kernel *kp = NULL, *kd = NULL;
  attnc_bindings *bp = NULL, *bd = NULL;
  attnc_tensor x, want, xp, out = { 0 };
  struct linear q_proj, k_proj, v_proj, o_proj;
  float *kcache = NULL, *vcache = NULL, q[HEADS * HEAD_DIM], kn[KV_HEADS * HEAD_DIM], vn[KV_HEADS * HEAD_DIM];
  float o[HEADS * HEAD_DIM], y[HIDDEN];
  double max_prefill = 0, max_decode = 0;
  long bad = 0, N, t;
  int nw = 0, rc = 1;
  size_t n;

  snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
  if (!(ckpt = attnc_st_open(path, &err))) { fail(path, &err); goto done; }
  snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
  if (!(inputs = attnc_st_open(path, &err))) { fail(path, &err); goto done; }
  if (attnc_st_find(inputs, "x", &x) != ATTNC_OK || x.dtype != ATTNC_F32 || x.rank != 3 || x.shape[0] != 1 ||
      x.shape[2] != HIDDEN || x.shape[1] <= PROMPT) {
    fprintf(stderr, NAME ": %s: 'x' must be F32 (1, N, %d) with N > %d\n", path, HIDDEN, PROMPT);
    goto done;
  }
  N = (long)x.shape[1];
  if (get_f32(inputs, "expected", 3, x.shape, &want)) goto done;

  /* ---- 1. prefill: the first PROMPT tokens through the full layer ---- */
  if (!(kp = attnc_compile(PREFILL_SPEC, NULL, &err))) { fail("attnc_compile (prefill)", &err); goto done; }
  if (!(bp = attnc_bindings_new(kp))) { fprintf(stderr, NAME ": attnc_bindings_new: out of memory\n"); goto done; }
  if (attnc_bind_safetensors(bp, ckpt, PREFIX, &nw, &err) != ATTNC_OK) { fail("binding the checkpoint", &err); goto done; }
  if (nw != 8) { /* q/k/v/o_proj .weight and .bias; layer 1 and the MLP are skipped */
    fprintf(stderr, NAME ": bound %d tensors under %s, expected 8\n", nw, PREFIX);
    goto done;
  }
  xp = x; /* a view of the prompt: the first PROMPT rows of x */
  xp.shape[1] = PROMPT;
  if (attnc_bind(bp, "x", &xp, &err) != ATTNC_OK) { fail("attnc_bind x", &err); goto done; }
  if (attnc_output_shape(bp, &out, &err) != ATTNC_OK) { fail("attnc_output_shape (prefill)", &err); goto done; }
  if (!(out.data = malloc(sizeof(float) * PROMPT * HIDDEN))) { fprintf(stderr, NAME ": out of memory\n"); goto done; }
  if (attnc_run(bp, &out, &err) != ATTNC_OK) { fail("attnc_run (prefill)", &err); goto done; }
  for (t = 0; t < PROMPT; t++)
    bad += compare("prefill", t, (const float *)out.data + t * HIDDEN, (const float *)want.data + t * HIDDEN, HIDDEN, &max_prefill);

  /* ---- 2. the prompt's keys and values: the KV cache ---- */
  if (get_linear(ckpt, "q_proj", HEADS * HEAD_DIM, HIDDEN, &q_proj) || get_linear(ckpt, "k_proj", KV_HEADS * HEAD_DIM, HIDDEN, &k_proj) ||
      get_linear(ckpt, "v_proj", KV_HEADS * HEAD_DIM, HIDDEN, &v_proj) || get_linear(ckpt, "o_proj", HIDDEN, HEADS * HEAD_DIM, &o_proj))
    goto done;
  n = (size_t)N * KV_HEADS * HEAD_DIM; /* room for every token */
  kcache = malloc(sizeof(float) * n);
  vcache = malloc(sizeof(float) * n);
  if (!kcache || !vcache) { fprintf(stderr, NAME ": out of memory\n"); goto done; }
  for (t = 0; t < PROMPT; t++) {
    const float *xt = (const float *)x.data + t * HIDDEN;
    linear(&k_proj, xt, kn);
    linear(&v_proj, xt, vn);
    cache_append(kcache, t, kn);
    cache_append(vcache, t, vn);
  }

  /* ---- 3. decode the remaining tokens one by one ---- */
  if (!(kd = attnc_compile(DECODE_SPEC, NULL, &err))) { fail("attnc_compile (decode)", &err); goto done; }
  if (!(bd = attnc_bindings_new(kd))) { fprintf(stderr, NAME ": attnc_bindings_new: out of memory\n"); goto done; }
  for (t = PROMPT; t < N; t++) {
    const float *xt = (const float *)x.data + t * HIDDEN;
    long T = t + 1; /* cached keys after appending this token */
    attnc_tensor tq = { ATTNC_F32, 4, { 1, HEADS, 1, HEAD_DIM }, q };
    attnc_tensor tk = { ATTNC_F32, 4, { 1, KV_HEADS, T, HEAD_DIM }, kcache };
    attnc_tensor tv = { ATTNC_F32, 4, { 1, KV_HEADS, T, HEAD_DIM }, vcache };
    attnc_tensor to = { ATTNC_F32, 4, { 1, HEADS, 1, HEAD_DIM }, o };
    /* q_proj's output, heads in order, is already the (1, H, 1, c) layout */
    linear(&q_proj, xt, q);
    linear(&k_proj, xt, kn);
    linear(&v_proj, xt, vn);
    cache_append(kcache, t, kn);
    cache_append(vcache, t, vn);
    if (attnc_bind_dim(bd, "T", T, &err) != ATTNC_OK) { fail("attnc_bind_dim T", &err); goto done; }
    if (attnc_bind(bd, "q", &tq, &err) != ATTNC_OK) { fail("attnc_bind q", &err); goto done; }
    if (attnc_bind(bd, "k", &tk, &err) != ATTNC_OK) { fail("attnc_bind k", &err); goto done; }
    if (attnc_bind(bd, "v", &tv, &err) != ATTNC_OK) { fail("attnc_bind v", &err); goto done; }
    if (attnc_run(bd, &to, &err) != ATTNC_OK) { fail("attnc_run (decode)", &err); goto done; }
    /* o (1, H, 1, c) is the merged heads (H*c); o_proj gives the layer's output row */
    linear(&o_proj, o, y);
    bad += compare("decode", t, y, (const float *)want.data + t * HIDDEN, HIDDEN, &max_decode);
  }

  printf(NAME ": %d weights under %s (%zu other checkpoint tensors ignored); %d heads, %d kv heads of %d\n", nw, PREFIX,
         attnc_st_count(ckpt) - (size_t)nw, HEADS, KV_HEADS, HEAD_DIM);
  printf(NAME ": prefill %d tokens, max abs err %.1e; decoded %ld tokens (KV cache %d..%ld), max abs err %.1e, %s (%s)\n",
         PROMPT, max_prefill, N - PROMPT, PROMPT + 1, N, max_decode, bad ? "FAILED" : "OK",
         attnc_kernel_backend(kd) == ATTNC_BACKEND_CC ? "cc" : "tcc");
  if (bad) fprintf(stderr, NAME ": %ld elements outside 1e-5 + 1e-4*|expected|\n", bad);
  rc = bad ? 1 : 0;

done:
  free(kcache);
  free(vcache);
  free(out.data);
  attnc_bindings_free(bd);
  attnc_bindings_free(bp);
  attnc_release(kd);
  attnc_release(kp);
  attnc_st_close(inputs);
  attnc_st_close(ckpt);
  return rc;
}
