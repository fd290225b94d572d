/* Training with attnc: a causal multi-head attention layer fitted to a
 * target by plain SGD, its gradients from attnc_grad.
 *
 *     train_step [DATA_DIR]        (default: examples/train_step)
 *
 * DATA_DIR/checkpoint.safetensors holds two torch.nn.MultiheadAttention
 * layers (width 32, 4 heads) under their state_dict names: the student
 * layers.0.self_attn.{in_proj_weight, in_proj_bias, out_proj.weight,
 * out_proj.bias}, which this program trains, and a teacher under
 * layers.1.self_attn., which it must leave alone.  DATA_DIR/inputs.safetensors
 * holds x (1, 16, 32), target (1, 16, 32: the teacher's output on x), lr
 * (a scalar) and expected_loss (100: PyTorch's loss at each step of the same
 * loop, torch.optim.SGD in float32), made by tools/make_examples.py.
 *
 * One step, as PyTorch's loop does it:
 *   out  = layer(x)                         attnc_run
 *   loss = 0.5 * mean((out - target)^2)
 *   dout = (out - target) / n               n = 16 * 32 outputs
 *   grads of every weight and bias          attnc_grad(dout)
 *   w   -= lr * grad.w                      then rebind w (weights are packed
 *                                           on the first run after a bind)
 * attnc_grad takes dout before it runs, and this dout depends on out, so
 * each step runs the forward twice: once to get out, once inside attnc_grad.
 *
 * Exits 0 only if every step's loss is within 1e-3 relative of PyTorch's,
 * each of the four weights got a gradient at every step, and the loss fell
 * to under a tenth of its first value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

#define NAME "train_step"
#define PREFIX "layers.0.self_attn."
#define SPEC "mha x=1,16,32 heads=4 causal train"
enum { S = 16, E = 32, N_OUT = S * E, STEPS = 100, N_WEIGHTS = 4 };
#define TOL 1e-3 /* relative, against PyTorch's float32 loss */

/* the student's parameters, under nn.MultiheadAttention's names */
static const char *const weight_names[N_WEIGHTS] = { "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias" };

static int fail(const char *what, const attnc_error *e)
{
  fprintf(stderr, NAME ": %s: %s%s%s\n", what, e->where, e->where[0] ? ": " : "", e->message);
  return 1;
}

/* A tensor of the file by name, checked to be F32 with n elements. */
static int get_f32(const attnc_safetensors *f, const char *name, size_t n, attnc_tensor *t)
{
  attnc_status s = attnc_st_find(f, name, t);
  size_t count = 1;
  int i;
  if (s != ATTNC_OK) {
    fprintf(stderr, NAME ": tensor '%s': %s\n", name, attnc_strerror(s));
    return 1;
  }
  for (i = 0; i < t->rank; i++) count *= (size_t)t->shape[i];
  if (t->dtype != ATTNC_F32 || count != n) {
    fprintf(stderr, NAME ": tensor '%s' is not F32 with %zu elements\n", name, n);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv)
{
  const char *dir = argc > 1 ? argv[1] : "examples/" NAME;
  char path[4096];
  attnc_error err;
  attnc_safetensors *ckpt = NULL, *inputs = NULL;
  attnc_kernel *k = NULL;
  attnc_bindings *b = NULL;
  attnc_tensor xt, tt, lt, et, w[N_WEIGHTS]; /* w: the weights, in buffers this program owns */
  const float *target, *expected;
  float lr, y[N_OUT], dy[N_OUT];
  attnc_tensor out = { ATTNC_F32, 3, { 1, S, E }, y }, dout = { ATTNC_F32, 3, { 1, S, E }, dy };
  double loss = 0, first = 0, worst = 0;
  int i, t, bad = 0, rc = 1;

  memset(w, 0, sizeof w);
  snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
  if (!(ckpt = attnc_st_open(path, &err))) { fail(path, &err); goto done; }
  snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
  if (!(inputs = attnc_st_open(path, &err))) { fail(path, &err); goto done; }
  if (get_f32(inputs, "x", N_OUT, &xt) || get_f32(inputs, "target", N_OUT, &tt) || get_f32(inputs, "lr", 1, &lt) ||
      get_f32(inputs, "expected_loss", STEPS, &et))
    goto done;
  target = tt.data;
  expected = et.data;
  lr = *(const float *)lt.data;

  if (!(k = attnc_compile(SPEC, NULL, &err))) { fail("attnc_compile", &err); goto done; }
  if (!(b = attnc_bindings_new(k))) { fprintf(stderr, NAME ": attnc_bindings_new: out of memory\n"); goto done; }
  /* The weights change every step, so they live in our own buffers (a
   * copy of the checkpoint's), bound by name; x is bound once. */
  for (i = 0; i < N_WEIGHTS; i++) {
    attnc_tensor src;
    size_t n = 1;
    int d;
    snprintf(path, sizeof path, PREFIX "%s", weight_names[i]);
    if (attnc_st_find(ckpt, path, &src) != ATTNC_OK || src.dtype != ATTNC_F32) {
      fprintf(stderr, NAME ": the checkpoint has no F32 tensor '%s'\n", path);
      goto done;
    }
    for (d = 0; d < src.rank; d++) n *= (size_t)src.shape[d];
    w[i] = src;
    if (!(w[i].data = malloc(n * sizeof(float)))) { fprintf(stderr, NAME ": out of memory\n"); goto done; }
    memcpy(w[i].data, src.data, n * sizeof(float));
    if (attnc_bind(b, weight_names[i], &w[i], &err) != ATTNC_OK) { fail(weight_names[i], &err); goto done; }
  }
  if (attnc_bind(b, "x", &xt, &err) != ATTNC_OK) { fail("attnc_bind x", &err); goto done; }

  printf(NAME ": %s, SGD with lr %g on the 4 tensors under %s\n", SPEC, lr, PREFIX);
  printf("  step  loss        pytorch     rel diff\n");
  for (t = 0; t < STEPS; t++) {
    double sum = 0, rel;
    int updated = 0;
    const char *name;

    /* forward, loss, and the loss's gradient w.r.t. out */
    if (attnc_run(b, &out, &err) != ATTNC_OK) { fail("attnc_run", &err); goto done; }
    for (i = 0; i < N_OUT; i++) {
      double d = (double)y[i] - target[i];
      sum += d * d;
      dy[i] = (float)(d / N_OUT);
    }
    loss = 0.5 * sum / N_OUT;
    if (t == 0) first = loss;
    rel = fabs(loss - expected[t]) / fabs((double)expected[t]);
    if (!(rel <= TOL)) {
      if (bad < 3) fprintf(stderr, NAME ": step %d: loss %.8g, PyTorch %.8g (%.1e relative)\n", t, loss, expected[t], rel);
      bad++;
    }
    if (rel > worst || rel != rel) worst = rel;
    if (t % 10 == 0 || t == STEPS - 1) printf("  %4d  %.8f  %.8f  %.1e\n", t, loss, expected[t], rel);

    /* backward: the gradient of every bound differentiable tensor */
    if (attnc_grad(b, &out, &dout, &err) != ATTNC_OK) { fail("attnc_grad", &err); goto done; }
    for (i = 0; (name = attnc_grad_name(b, i)) != NULL; i++) {
      attnc_tensor g;
      size_t n = 1, j;
      int wi, d;
      for (wi = 0; wi < N_WEIGHTS && strcmp(name, weight_names[wi]) != 0; wi++) {}
      if (wi == N_WEIGHTS) continue; /* x's gradient: x is data, not trained */
      if (attnc_grad_get(b, name, &g, &err) != ATTNC_OK) { fail(name, &err); goto done; }
      if (g.dtype != ATTNC_F32 || g.rank != w[wi].rank ||
          memcmp(g.shape, w[wi].shape, sizeof(int64_t) * (size_t)g.rank) != 0) {
        fprintf(stderr, NAME ": grad.%s is not F32 of %s's shape\n", name, name);
        goto done;
      }
      for (d = 0; d < g.rank; d++) n *= (size_t)g.shape[d];
      for (j = 0; j < n; j++) ((float *)w[wi].data)[j] -= lr * ((const float *)g.data)[j];
      updated |= 1 << wi;
    }
    if (updated != (1 << N_WEIGHTS) - 1) {
      fprintf(stderr, NAME ": step %d: attnc_grad gave no gradient for some of the 4 weights\n", t);
      goto done;
    }
    /* rebind after the update: the next run packs the new values */
    for (i = 0; i < N_WEIGHTS; i++)
      if (attnc_bind(b, weight_names[i], &w[i], &err) != ATTNC_OK) { fail(weight_names[i], &err); goto done; }
  }

  if (!(loss < 0.1 * first)) {
    fprintf(stderr, NAME ": the loss did not fall: %.6g -> %.6g\n", first, loss);
    bad++;
  }
  printf(NAME ": loss %.6f -> %.6f in %d steps; largest difference from PyTorch %.1e relative (bound %.0e)\n", first, loss,
         STEPS, worst, TOL);
  printf(NAME ": %s (%s)\n", bad ? "FAILED" : "OK", attnc_kernel_backend(k) == ATTNC_BACKEND_CC ? "cc" : "tcc");
  rc = bad ? 1 : 0;

done:
  for (i = 0; i < N_WEIGHTS; i++) free(w[i].data);
  attnc_bindings_free(b);
  attnc_release(k);
  attnc_st_close(inputs);
  attnc_st_close(ckpt);
  return rc;
}
