/* AlphaFold 2 MSA row attention with pair bias, from an OpenFold-style
 * checkpoint.
 *
 *     af_msa_row [DATA_DIR]        (default: examples/af_msa_row)
 *
 * DATA_DIR/checkpoint.safetensors holds one Evoformer block's tensors under
 * their OpenFold names (evoformer.blocks.0.msa_att_row.mha.linear_q.weight,
 * ...), among those of other modules that must be ignored: the column
 * attention of the same block, whose names end the same way
 * (...msa_att_col._msa_att.mha.linear_q.weight), and the MSA transition.
 * DATA_DIR/inputs.safetensors holds what MSARowAttentionWithPairBias hands
 * to its `mha`: x (m after layer_norm_m), bias (the projected pair bias,
 * one (R, R) logit bias per head) and mask (the MSA mask, float 0/1), plus
 * `expected`, PyTorch's output (tools/make_examples.py).
 *
 * The program binds the weights with attnc_bind_safetensors and the layer's
 * prefix, the inputs from the second file, runs the kernel, and compares
 * every element with expected: it exits 0 only if
 * |out - expected| <= 1e-5 + 1e-4 * |expected| everywhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

#define NAME "af_msa_row"
/* specs/af_msa_row.attn at a small size: c_m = 24, 4 heads of 8 (H*c = 32
 * need not equal c_m); S sequences and R residues come from the inputs. */
#define SPEC "alphafold x=S,R,24 attn_dim=-2 heads=4 head_dim=8 gated bias=4,R,R mask=key"
#define PREFIX "evoformer.blocks.0.msa_att_row.mha."
#define N_WEIGHTS 7 /* linear_q/k/v.weight, linear_g.weight/.bias, linear_o.weight/.bias */
#define N_INPUTS 3  /* x, bias, mask */

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
  attnc_tensor out = { 0 }, want;
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

  /* the layer's weights: PREFIX + linear_q.weight binds as linear_q.weight;
   * every other tensor of the checkpoint is skipped */
  if (attnc_bind_safetensors(b, ckpt, PREFIX, &nw, &err) != ATTNC_OK) { fail("binding the checkpoint", &err); goto done; }
  if (nw != N_WEIGHTS) {
    fprintf(stderr, NAME ": bound %d tensors of the checkpoint under %s, expected %d\n", nw, PREFIX, N_WEIGHTS);
    goto done;
  }
  /* the inputs x, bias and mask; `expected` is not a name attnc knows */
  if (attnc_bind_safetensors(b, inputs, NULL, &ni, &err) != ATTNC_OK) { fail("binding the inputs", &err); goto done; }
  if (ni != N_INPUTS) {
    fprintf(stderr, NAME ": bound %d input tensors, expected %d (x, bias, mask)\n", ni, N_INPUTS);
    goto done;
  }

  /* checks every shape and infers S and R from x */
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
  printf(NAME ": %d weights under %s (%zu other checkpoint tensors ignored), x/bias/mask from inputs\n", nw, PREFIX,
         attnc_st_count(ckpt) - (size_t)nw);
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
