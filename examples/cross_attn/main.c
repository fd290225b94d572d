/* Encoder-decoder cross-attention from a torch.nn.Transformer checkpoint.
 *
 *     cross_attn [DATA_DIR]        (default: examples/cross_attn)
 *
 * DATA_DIR/checkpoint.safetensors is the state_dict of a whole (small)
 * torch.nn.Transformer, under PyTorch's own names: encoder.layers.0.*,
 * decoder.layers.0.self_attn.*, decoder.layers.0.multihead_attn.*, norms and
 * feed-forward layers.  The program runs the decoder layer's cross-attention,
 * decoder.layers.0.multihead_attn: an nn.MultiheadAttention stored as
 * in_proj_weight ([Wq; Wk; Wv], split by attnc), in_proj_bias,
 * out_proj.weight and out_proj.bias.  The decoder's self-attention has the
 * same suffixes under another prefix and must be ignored.
 * DATA_DIR/inputs.safetensors holds x (the decoder states, B x T x 32), kv
 * (the encoder output, B x S x 32, S != T), mask (B x S, int64, 1 for real
 * source tokens, 0 for padding) and `expected`, PyTorch's
 * multihead_attn(x, kv, kv, key_padding_mask=(mask == 0))
 * (tools/make_examples.py).
 *
 * Exits 0 only if |out - expected| <= 1e-5 + 1e-4 * |expected| for every
 * element. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

#define NAME "cross_attn"
/* specs/t5_cross.attn at a small size: width 32, 4 heads of 8; B, T and S
 * come from the inputs.  nn.MultiheadAttention has biases on q, k, v and
 * the output projection, as the mha preset. */
#define SPEC "mha x=B,T,32 kv=B,S,32 heads=4 mask=key"
#define PREFIX "decoder.layers.0.multihead_attn."
#define N_WEIGHTS 4 /* in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias */
#define N_INPUTS 3  /* x, kv, mask */

static int fail(const char *what, const attnc_error *e)
{
  fprintf(stderr, NAME ": %s: %s%s%s\n", what, e->where, e->where[0] ? ": " : "", e->message);
  return 1;
}

/* max |out - want| and the number of elements outside the tolerance */
static long compare(const float *out, const float *want, size_t n, double *max_err)
{
  long bad = 0;
  size_t i;
  *max_err = 0;
  for (i = 0; i < n; i++) {
    double d = fabs((double)out[i] - (double)want[i]);
    if (!(d <= 1e-5 + 1e-4 * fabs((double)want[i]))) { /* also catches NaN */
      if (bad < 5) fprintf(stderr, NAME ": element %zu: got %.8g, expected %.8g\n", i, out[i], want[i]);
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
  attnc_kernel *k = NULL;
  attnc_bindings *b = NULL;
  attnc_tensor out = { 0 }, want, mask;
  attnc_status s;
  int nw = 0, ni = 0, i, rc = 1;
  size_t n = 1;
  double max_err;
  long bad;

  snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
  if (!(ckpt = attnc_st_open(path, &err))) { fail(path, &err); goto done; }
  snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
  if (!(inputs = attnc_st_open(path, &err))) { fail(path, &err); goto done; }

  if (!(k = attnc_compile(SPEC, NULL, &err))) { fail("attnc_compile", &err); goto done; }
  if (!(b = attnc_bindings_new(k))) { fprintf(stderr, NAME ": attnc_bindings_new: out of memory\n"); goto done; }

  /* the layer's weights: PREFIX + in_proj_weight binds as in_proj_weight
   * (split into q, k and v at the first run); every other tensor of the
   * checkpoint is skipped, decoder.layers.0.self_attn.in_proj_weight too */
  if (attnc_bind_safetensors(b, ckpt, PREFIX, &nw, &err) != ATTNC_OK) { fail("binding the checkpoint", &err); goto done; }
  if (nw != N_WEIGHTS) {
    fprintf(stderr, NAME ": bound %d tensors of the checkpoint under %s, expected %d\n", nw, PREFIX, N_WEIGHTS);
    goto done;
  }
  /* the inputs x, kv and mask; `expected` is not a name attnc knows */
  if (attnc_bind_safetensors(b, inputs, NULL, &ni, &err) != ATTNC_OK) { fail("binding the inputs", &err); goto done; }
  if (ni != N_INPUTS) {
    fprintf(stderr, NAME ": bound %d input tensors, expected %d (x, kv, mask)\n", ni, N_INPUTS);
    goto done;
  }

  /* checks every shape; infers B and T from x, S from kv */
  if (attnc_output_shape(b, &out, &err) != ATTNC_OK) { fail("attnc_output_shape", &err); goto done; }
  for (i = 0; i < out.rank; i++) n *= (size_t)out.shape[i];
  if ((s = attnc_st_find(inputs, "expected", &want)) != ATTNC_OK) {
    fprintf(stderr, NAME ": %s: tensor 'expected': %s\n", path, attnc_strerror(s));
    goto done;
  }
  if (want.dtype != ATTNC_F32 || want.rank != out.rank || memcmp(want.shape, out.shape, sizeof(int64_t) * (size_t)out.rank) != 0) {
    fprintf(stderr, NAME ": 'expected' is not an F32 tensor of the output's shape\n");
    goto done;
  }
  if (!(out.data = malloc(n * sizeof(float)))) { fprintf(stderr, NAME ": out of memory\n"); goto done; }
  if (attnc_run(b, &out, &err) != ATTNC_OK) { fail("attnc_run", &err); goto done; }

  bad = compare(out.data, want.data, n, &max_err);
  if ((s = attnc_st_find(inputs, "mask", &mask)) != ATTNC_OK || mask.dtype != ATTNC_I64 || mask.rank != 2) {
    fprintf(stderr, NAME ": tensor 'mask' is not a 2-D int64 tensor\n");
    goto done;
  }
  printf(NAME ": %d weights under %s (%zu other checkpoint tensors ignored), x/kv/mask from inputs\n", nw, PREFIX,
         attnc_st_count(ckpt) - (size_t)nw);
  printf(NAME ": encoder lengths");
  for (i = 0; i < (int)mask.shape[0]; i++) {
    const int64_t *row = (const int64_t *)mask.data + (size_t)i * (size_t)mask.shape[1];
    int64_t j, len = 0;
    for (j = 0; j < mask.shape[1]; j++) len += row[j] != 0;
    printf("%s %lld", i ? "," : "", (long long)len);
  }
  printf(" of S = %lld\n", (long long)mask.shape[1]);
  printf(NAME ": %lldx%lldx%lld out, max abs err %.1e, %s (%s)\n", (long long)out.shape[0], (long long)out.shape[1],
         (long long)out.shape[2], max_err, bad ? "FAILED" : "OK",
         attnc_kernel_backend(k) == ATTNC_BACKEND_CC ? "cc" : "tcc");
  if (bad) fprintf(stderr, NAME ": %ld of %zu elements outside 1e-5 + 1e-4*|expected|\n", bad, n);
  rc = bad ? 1 : 0;

done:
  free(out.data);
  attnc_bindings_free(b);
  attnc_release(k);
  attnc_st_close(inputs);
  attnc_st_close(ckpt);
  return rc;
}
