/* Numerics sweeps: generated kernels against the float64 reference
 * (check/reference.c) over heads, kv heads, head_dim, lengths 1/7/33/257,
 * every attention axis of 2-D..5-D inputs, every mask kind, bias
 * broadcasts, global, gate, cross-attention, core mode and f64, on both
 * backends, on 1 and 2 threads, on tensors on and off 64-byte
 * boundaries.  A failing case prints its spec, dims, seed, misalignment
 * and threads. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "checker.h"
#include "internal.h"
#include "prims.h"
#include "testutil.h"

struct sweep {
  int cases, fails;
};

/* The kernel form the sweeps check: the fast one, or the plain one. */
static attnc_form form = ATTNC_FORM_FAST;
/* NULL, or the dtype every spec of a sweep gets that names none (bf16, f16) */
static const char *dtype = NULL;
/* NULL, or the weights= every full-mode spec of a sweep gets (int8) */
static const char *weights = NULL;

static void one(struct sweep *sw, attnc_backend be, const char *spec, int64_t S, int mask_rank, double keep,
                unsigned long seed)
{
  checker_opts o;
  checker_result r;
  char with_dtype[600];
  static const char *const all[] = { "S", "T", "B" };
  const char *names[3];
  int64_t values[3], all_values[3];
  if ((dtype && !strstr(spec, "dtype=")) || (weights && !strstr(spec, "mode=core"))) {
    snprintf(with_dtype, sizeof with_dtype, "%s%s%s%s%s", spec, dtype && !strstr(spec, "dtype=") ? " dtype=" : "",
             dtype && !strstr(spec, "dtype=") ? dtype : "", weights && !strstr(spec, "mode=core") ? " weights=" : "",
             weights && !strstr(spec, "mode=core") ? weights : "");
    spec = with_dtype;
  }
  all_values[0] = S;
  all_values[1] = S > 2 ? S - 2 : S + 3; /* a second length, for cross-attention */
  all_values[2] = 2;
  memset(&o, 0, sizeof o);
  o.backend = be;
  o.form = form;
  o.dim_names = names;
  o.dim_values = values;
  o.default_dim = S;
  o.seed = seed;
  o.mask_rank = mask_rank;
  o.mask_keep = keep;
  /* 1 or 2 threads by the seed, whatever this machine has: both splits
   * of the work (by_head, fused, the pool's shares) on every sweep */
  o.threads = 1 + (int)(seed % 2);
  /* a third of the cases on tensors 1 or 2 elements past a 64-byte
   * boundary: no vector load or store may rely on alignment */
  o.misalign = (int)(seed % 3);
  /* pass only the dims the spec names */
  {
    attnc_error e;
    attnc_kernel *k = attnc_compile(spec, NULL, &e);
    int i, j;
    if (!k) {
      fprintf(stderr, "FAIL (does not compile): %s\n  %s: %s\n", spec, e.where, e.message);
      sw->cases++;
      sw->fails++;
      return;
    }
    for (i = 0; i < 3; i++)
      for (j = 0; j < attnc_dim_count(k); j++)
        if (strcmp(attnc_dim_name(k, j), all[i]) == 0) {
          names[o.ndims] = all[i];
          values[o.ndims++] = all_values[i];
        }
    attnc_release(k);
  }
  sw->cases++;
  if (!checker_run(spec, &o, &r)) {
    sw->fails++;
    fprintf(stderr, "FAIL [%s%s] %s\n  S=%lld T=%lld B=2 mask_rank=%d keep=%.2f seed=%lu misalign=%d threads=%d: ",
            be == ATTNC_BACKEND_CC ? "cc" : "tcc", form == ATTNC_FORM_PLAIN ? ", plain form" : "", spec, (long long)all_values[0], (long long)all_values[1], mask_rank, keep, seed,
            o.misalign, o.threads);
    if (r.status != ATTNC_OK) fprintf(stderr, "%s %s\n", r.err.where, r.err.message);
    else fprintf(stderr, "max abs error %.3g, max |ref| %.3g, NMSE %.3g (at most %.0e)%s%s\n", r.max_abs, r.max_ref, r.nmse,
                 r.nmse_max, r.err.message[0] ? "; " : "", r.err.message);
  }
}

static void report(const char *what, attnc_backend be, const struct sweep *sw)
{
  printf("%s [%s%s%s%s%s%s]: %d cases, %d failures\n", what, be == ATTNC_BACKEND_CC ? "cc" : "tcc",
         form == ATTNC_FORM_PLAIN ? ", plain form" : "", dtype ? ", dtype=" : "", dtype ? dtype : "",
         weights ? ", weights=" : "", weights ? weights : "", sw->cases, sw->fails);
}

/* 1 (printing why) when these sweeps would only repeat the f32 sweeps'
 * calls into the primitives: under the AVX-512 C model (make
 * check-avx512-emu sets ATTNC_TEST_MODEL), which exists to run those
 * primitives; the main run covers these kernels in full. */
static int same_primitives_under_model(const char *what)
{
  if (!getenv("ATTNC_TEST_MODEL")) return 0;
  printf("skipped under the AVX-512 model: %s (their primitives are checked under the model by test_prims; "
         "make test's main run covers the kernels)\n", what);
  return 1;
}

/* Heads, kv heads and head_dim (including head_dim != c_in / H). */
static void sweep_heads(attnc_backend be)
{
  static const int hgc[][3] = { { 1, 1, 8 }, { 4, 4, 6 }, { 4, 2, 5 }, { 6, 3, 4 }, { 8, 1, 3 }, { 8, 2, 16 }, { 3, 3, 7 } };
  static const int64_t lens[] = { 1, 7, 33 };
  struct sweep sw = { 0, 0 };
  char spec[512];
  size_t i, l;
  for (i = 0; i < sizeof hgc / sizeof hgc[0]; i++)
    for (l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      snprintf(spec, sizeof spec, "gqa x=B,S,24 heads=%d kv_heads=%d head_dim=%d", hgc[i][0], hgc[i][1], hgc[i][2]);
      one(&sw, be, spec, lens[l], 0, 0, i * 10 + l);
    }
  one(&sw, be, "mqa x=B,S,32 heads=4", 257, 0, 0, 1);
  one(&sw, be, "mha x=B,S,32 heads=4 qkv_bias=false out_bias=false", 257, 0, 0, 2);
  report("heads", be, &sw);
  assert_int_equal(sw.fails, 0);
}

/* Every attention axis of 2-D .. 5-D inputs, with and without mask/bias. */
static void sweep_axes(attnc_backend be)
{
  struct sweep sw = { 0, 0 };
  char spec[512];
  int rank, ax;
  for (rank = 2; rank <= 5; rank++) {
    for (ax = 0; ax <= rank - 2; ax++) {
      char shape[128] = "";
      int a;
      size_t len = 0;
      /* sizes 2,3,4 on batch axes, S on the attention axis, width 12 */
      for (a = 0; a < rank - 1; a++)
        len += (size_t)snprintf(shape + len, sizeof shape - len, "%s", a == ax ? "S," : (a % 2 ? "3," : "2,"));
      snprintf(shape + len, sizeof shape - len, "12");
      snprintf(spec, sizeof spec, "alphafold x=%s attn_dim=%d heads=3 head_dim=4", shape, ax);
      one(&sw, be, spec, 5, 0, 0, (unsigned long)(rank * 10 + ax));
      snprintf(spec, sizeof spec, "alphafold x=%s attn_dim=%d heads=3 head_dim=4 gated mask=key", shape, ax - (rank));
      one(&sw, be, spec, 6, 0, 0.7, (unsigned long)(rank * 10 + ax + 1));
      one(&sw, be, spec, 6, 1, 0.7, (unsigned long)(rank * 10 + ax + 2)); /* mask (Sk) only */
      if (rank >= 3) one(&sw, be, spec, 6, 2, 0.7, (unsigned long)(rank * 10 + ax + 3));
      snprintf(spec, sizeof spec, "alphafold x=%s attn_dim=%d heads=3 head_dim=4 bias=3,S,S mask=key empty_rows=uniform", shape, ax);
      one(&sw, be, spec, 7, 0, 0.4, (unsigned long)(rank * 10 + ax + 4));
    }
  }
  report("axes", be, &sw);
  assert_int_equal(sw.fails, 0);
}

/* Masks: key mask of every rank, causal both ways, windows, empty rows. */
static void sweep_masks(attnc_backend be)
{
  static const char *const kinds[] = {
    "causal", "causal=bottom_right", "window=2,0", "window=3,3", "window=2,5", "window=16,0 causal",
    "causal=bottom_right window=1,1", "mask=key", "mask=key causal", "mask=key window=3,3",
  };
  static const char *const empty[] = { "zero", "uniform", "nan" };
  static const int64_t lens[] = { 1, 7, 33, 257 };
  struct sweep sw = { 0, 0 };
  char spec[512];
  size_t k, e, l;
  for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      snprintf(spec, sizeof spec, "mha x=B,S,16 heads=2 %s", kinds[k]);
      one(&sw, be, spec, lens[l], 0, 0.6, k * 7 + l);
      /* cross-attention, Sq != Sk both ways, with bottom_right */
      snprintf(spec, sizeof spec, "mha x=B,S,16 kv=B,T,8 heads=2 %s", kinds[k]);
      one(&sw, be, spec, lens[l], 0, 0.6, k * 7 + l + 100);
      snprintf(spec, sizeof spec, "mha x=B,T,16 kv=B,S,8 heads=2 %s", kinds[k]);
      one(&sw, be, spec, lens[l], 0, 0.6, k * 7 + l + 200);
    }
  /* rows that see no key: a sparse mask, every empty_rows mode */
  for (e = 0; e < 3; e++)
    for (l = 0; l < 3; l++) {
      snprintf(spec, sizeof spec, "mha x=B,S,16 heads=2 mask=key window=2,1 empty_rows=%s", empty[e]);
      one(&sw, be, spec, lens[l], 0, 0.25, e * 3 + l + 300);
      snprintf(spec, sizeof spec, "mha x=B,S,16 kv=B,T,16 heads=2 causal=bottom_right empty_rows=%s", empty[e]);
      one(&sw, be, spec, lens[l] + 2, 0, 0, e * 3 + l + 400);
    }
  report("masks", be, &sw);
  assert_int_equal(sw.fails, 0);
}

/* Bias broadcasts (the seed's rule), global attention, gate, core mode, f64, large logits. */
static void sweep_features(attnc_backend be)
{
  static const char *const specs[] = {
    "alphafold x=2,3,S,12 heads=3 head_dim=4 bias=2,3,3,S,S",
    "alphafold x=2,3,S,12 heads=3 head_dim=4 bias=2,1,3,S,S",
    "alphafold x=2,3,S,12 heads=3 head_dim=4 bias=2,3,S,S",
    "alphafold x=2,3,S,12 heads=3 head_dim=4 bias=1,S,S",
    "alphafold x=2,3,S,12 heads=3 head_dim=4 bias=3,1,S",
    "alphafold x=2,3,S,12 heads=3 head_dim=4 bias=1,S,1 gated",
    "alphafold x=S,3,12 attn_dim=-3 heads=3 head_dim=4 bias=3,3,S,S mask=key",
    "alphafold x=S,3,12 attn_dim=0 heads=2 head_dim=4 global",
    "alphafold x=S,3,12 attn_dim=0 heads=2 head_dim=4 global gated",
    "alphafold x=3,S,12 heads=2 head_dim=4 global mask=key",
    "alphafold x=3,S,12 heads=2 head_dim=4 global mask=key global_mean=masked",
    "alphafold x=3,S,12 heads=2 head_dim=4 global gated mask=key global_mean=masked",
    "alphafold x=2,S,3,12 attn_dim=1 heads=2 head_dim=5 global gated mask=key global_mean=masked bias=2,2,1,S",
    "alphafold x=3,S,12 kv=3,T,10 heads=2 head_dim=4 global",
    "mha mode=core q=B,4,S,8",
    "mha mode=core q=B,4,S,8 kv=B,2,T,8 causal=bottom_right mask=key",
    "mha mode=core q=2,3,4,S,8 kv=2,3,1,T,8 bias=2,4,S,T causal mask=key",
    "mha mode=core q=1,32,1,16 kv=1,8,S,16 mask=key",
    "mha mode=core q=B,4,S,8 window=2,2 empty_rows=nan mask=key",
    "mha mode=core q=B,S,4,8 layout=bshc",
    "mha mode=core q=B,S,4,8 kv=B,T,2,8 layout=bshc causal=bottom_right mask=key bias=B,4,S,T",
    "mha mode=core q=1,1,32,16 kv=1,S,8,16 layout=bshc mask=key",
    "mha mode=core q=2,3,S,4,8 kv=2,3,T,1,8 layout=bshc window=2,1 dtype=f64",
    "mha x=B,S,16 heads=2 dtype=f64 causal mask=key",
    "alphafold x=2,S,12 heads=3 head_dim=4 gated bias=3,S,S mask=key dtype=f64",
    "mha mode=core q=B,4,S,8 dtype=f64 causal=bottom_right",
    "mha x=B,S,16 heads=2 scale=0.37",
    "mha x=B,S,16 heads=2 scale=40",
    /* projections split into items by output columns too: widths of
     * several 32-wide panels, a part-filled last chunk, gated, cross */
    "mha x=B,S,100 heads=4 head_dim=25",
    "gqa x=B,S,96 heads=6 kv_heads=2 causal",
    "alphafold x=B,S,80 heads=4 head_dim=20 gated bias=B,4,S,S mask=key",
    "mha x=B,S,72 kv=B,T,136 heads=3 head_dim=40 qkv_bias=false out_bias=false",
  };
  static const int64_t lens[] = { 1, 7, 33 };
  struct sweep sw = { 0, 0 };
  size_t i, l;
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++)
    for (l = 0; l < sizeof lens / sizeof lens[0]; l++)
      one(&sw, be, specs[i], lens[l], 0, 0.7, i * 3 + l);
  report("features", be, &sw);
  assert_int_equal(sw.fails, 0);
}

/* 1 if the C generated for spec contains needle (generation must succeed). */
static int generated_has(const char *spec, const char *needle)
{
  char *src = NULL, *hdr = NULL;
  attnc_error e;
  int has;
  assert_int_equal(attnc_generate(spec, NULL, &src, &hdr, &e), ATTNC_OK);
  has = strstr(src, needle) != NULL;
  free(src);
  free(hdr);
  return has;
}

/* An element of dtype dt (f32 or bf16 here), for a message. */
static double out_value(const void *p, attnc_dtype dt)
{
  float f;
  attnc_convert(p, dt, &f, ATTNC_F32, 1);
  return f;
}

/* layout=bshc against the default layout on the same numbers, transposed:
 * the two kernels must agree to the last bit (a check of the layout that
 * does not go through the reference's own reading of it), on 1 and 2
 * threads, with key splits (a decoding query over 2000 keys) and without,
 * and again after k and v change in their bound buffers. */
static void test_kernels_layout_bshc_is_a_transpose(void **s)
{
  static const struct { const char *bhsc, *bshc; long B, H, G, Sq, Sk, C; attnc_dtype out; } cases[] = {
    { "mha mode=core q=2,4,S,16 kv=2,2,T,16 causal=bottom_right", "mha mode=core q=2,S,4,16 kv=2,T,2,16 layout=bshc causal=bottom_right", 2, 4, 2, 37, 45, 16, ATTNC_F32 },
    { "mha mode=core q=1,8,S,32 kv=1,2,T,32", "mha mode=core q=1,S,8,32 kv=1,T,2,32 layout=bshc", 1, 8, 2, 1, 2000, 32, ATTNC_F32 },
    /* one kv head: a thread's first tile of a run is of the head its last
     * tile of the run before was */
    { "mha mode=core q=1,2,S,16 kv=1,1,T,16", "mha mode=core q=1,S,2,16 kv=1,T,1,16 layout=bshc", 1, 2, 1, 37, 45, 16, ATTNC_F32 },
    /* several query tiles and key tiles per kv head, whose rows spread
     * over more than 2 MiB (the fast form copies such a head), a head
     * width that is not whole vectors: the first tile of a head copies k
     * and v as it streams them (attend_pack), the keys its rows do not see
     * (causal) after; the head's other tiles read the copy.  In the second,
     * two threads' shares split a head after its first tile, so that the
     * second thread's first tile of it is a short one (6 rows: attend_pack's
     * other path) */
    { "mha mode=core q=1,32,S,24 kv=1,32,T,24 causal", "mha mode=core q=1,S,32,24 kv=1,T,32,24 layout=bshc causal", 1, 32, 32, 196, 700, 24, ATTNC_F32 },
    { "mha mode=core q=1,3,S,64 kv=1,3,T,64 window=70,5", "mha mode=core q=1,S,3,64 kv=1,T,3,64 layout=bshc window=70,5", 1, 3, 3, 70, 2800, 64, ATTNC_F32 },
    /* a bf16 kernel's copy (the C loop's, not attend_pack's) */
    { "mha mode=core q=1,3,S,64 kv=1,3,T,64 window=70,5 dtype=bf16", "mha mode=core q=1,S,3,64 kv=1,T,3,64 layout=bshc window=70,5 dtype=bf16", 1, 3, 3, 70, 2800, 64, ATTNC_BF16 },
    /* the same on rows that spread over less: read as they are */
    { "mha mode=core q=2,4,S,24 kv=2,2,T,24 causal", "mha mode=core q=2,S,4,24 kv=2,T,2,24 layout=bshc causal", 2, 4, 2, 196, 230, 24, ATTNC_F32 },
  };
  size_t c;
  (void)s;
  for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const long B = cases[c].B, H = cases[c].H, G = cases[c].G, Sq = cases[c].Sq, Sk = cases[c].Sk, C = cases[c].C;
    const size_t nq = (size_t)(B * H * Sq * C), nk = (size_t)(B * G * Sk * C);
    float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
    float *qt = malloc(nq * sizeof *q), *kt = malloc(nk * sizeof *k), *vt = malloc(nk * sizeof *v);
    float *o = malloc(nq * sizeof *o), *ot = malloc(nq * sizeof *o);
    unsigned long seed = 12345;
    long b, h, i, d;
    int threads, plain, round;
    assert_true(q && k && v && qt && kt && vt && o && ot);
    for (i = 0; i < (long)nq; i++) { seed = seed * 6364136223846793005UL + 1; q[i] = (float)((seed >> 33) % 2001) / 1000.0f - 1; }
    for (i = 0; i < (long)nk; i++) { seed = seed * 6364136223846793005UL + 1; k[i] = (float)((seed >> 33) % 2001) / 1000.0f - 1; }
    for (i = 0; i < (long)nk; i++) { seed = seed * 6364136223846793005UL + 1; v[i] = (float)((seed >> 33) % 2001) / 1000.0f - 1; }
    /* (B, H, S, C) -> (B, S, H, C) */
    for (b = 0; b < B; b++)
      for (h = 0; h < H; h++)
        for (i = 0; i < Sq; i++)
          for (d = 0; d < C; d++) qt[((b * Sq + i) * H + h) * C + d] = q[((b * H + h) * Sq + i) * C + d];
    for (b = 0; b < B; b++)
      for (h = 0; h < G; h++)
        for (i = 0; i < Sk; i++)
          for (d = 0; d < C; d++) {
            kt[((b * Sk + i) * G + h) * C + d] = k[((b * G + h) * Sk + i) * C + d];
            vt[((b * Sk + i) * G + h) * C + d] = v[((b * G + h) * Sk + i) * C + d];
          }
    for (plain = 0; plain < 2; plain++)
      for (threads = 1; threads <= 2; threads++) {
        attnc_options opts = { ATTNC_BACKEND_TCC, threads, NULL, plain ? ATTNC_FORM_PLAIN : ATTNC_FORM_FAST };
        attnc_error e;
        attnc_kernel *k1 = attnc_compile(cases[c].bhsc, &opts, &e), *k2 = attnc_compile(cases[c].bshc, &opts, &e);
        attnc_bindings *b1, *b2;
        attnc_tensor tq = { ATTNC_F32, 4, { B, H, Sq, C }, q }, tk = { ATTNC_F32, 4, { B, G, Sk, C }, k },
                     tv = { ATTNC_F32, 4, { B, G, Sk, C }, v }, to = { cases[c].out, 4, { B, H, Sq, C }, o };
        attnc_tensor uq = { ATTNC_F32, 4, { B, Sq, H, C }, qt }, uk = { ATTNC_F32, 4, { B, Sk, G, C }, kt },
                     uv = { ATTNC_F32, 4, { B, Sk, G, C }, vt }, uo = { cases[c].out, 4, { B, Sq, H, C }, ot };
        /* out's elements compared by their bits: f32, or bf16 (2 bytes) */
        const size_t es = cases[c].out == ATTNC_BF16 ? 2 : 4;
        assert_non_null(k1);
        assert_non_null(k2);
        b1 = attnc_bindings_new(k1);
        b2 = attnc_bindings_new(k2);
        assert_int_equal(attnc_bindings_set_threads(b1, threads, &e), ATTNC_OK);
        assert_int_equal(attnc_bindings_set_threads(b2, threads, &e), ATTNC_OK);
        assert_int_equal(attnc_bind(b1, "q", &tq, &e), ATTNC_OK);
        assert_int_equal(attnc_bind(b1, "k", &tk, &e), ATTNC_OK);
        assert_int_equal(attnc_bind(b1, "v", &tv, &e), ATTNC_OK);
        assert_int_equal(attnc_bind(b2, "q", &uq, &e), ATTNC_OK);
        assert_int_equal(attnc_bind(b2, "k", &uk, &e), ATTNC_OK);
        assert_int_equal(attnc_bind(b2, "v", &uv, &e), ATTNC_OK);
        for (round = 0; round < 2; round++) {
          if (attnc_run(b1, &to, &e) != ATTNC_OK || attnc_run(b2, &uo, &e) != ATTNC_OK) fail_msg("run: %s", e.message);
          for (b = 0; b < B; b++)
            for (h = 0; h < H; h++)
              for (i = 0; i < Sq; i++)
                for (d = 0; d < C; d++)
                  if (memcmp((char *)ot + (size_t)(((b * Sq + i) * H + h) * C + d) * es,
                             (char *)o + (size_t)(((b * H + h) * Sq + i) * C + d) * es, es) != 0)
                    fail_msg("%s (%s form, %d threads, run %d): out[%ld][%ld][%ld][%ld] is %.9g, the bhsc kernel's %.9g",
                             cases[c].bshc, plain ? "plain" : "fast", threads, round + 1, b, i, h, d,
                             out_value((char *)ot + (size_t)(((b * Sq + i) * H + h) * C + d) * es, cases[c].out),
                             out_value((char *)o + (size_t)(((b * H + h) * Sq + i) * C + d) * es, cases[c].out));
          /* new k and v in the same buffers: a second run must not take
           * the copies of k and v (the fast form's, per thread) of the first */
          for (i = 0; i < (long)nk; i++) {
            k[i] *= -0.5f; kt[i] *= -0.5f;
            v[i] = 1 - v[i]; vt[i] = 1 - vt[i];
          }
        }
        attnc_bindings_free(b1);
        attnc_bindings_free(b2);
        attnc_release(k1);
        attnc_release(k2);
      }
    free(q); free(k); free(v); free(qt); free(kt); free(vt); free(o); free(ot);
  }
}

/* The fast form holds only the paths this spec and its known dims can
 * take (gen/plan.lua's schedule), and the C loops test no feature the
 * spec lacks. */
static void test_kernels_fast_form_decides(void **s)
{
  static const struct { const char *spec, *needle; int has; } cases[] = {
    { "mha x=B,S,64 heads=4", "z->fused", 1 },           /* B may be 4 or more */
    { "mha x=1,S,64 heads=4", "fused", 0 },              /* one batch element: never fused */
    { "mha x=2,S,64 heads=2 head_dim=32", "by_head", 1 },
    { "mha x=1,S,64 heads=1 head_dim=64", "by_head", 0 }, /* one kv head of one element */
    { "mha x=B,S,64 heads=4", "PROJ_SLAB", 0 },          /* by_head needs heads on 32-wide panels */
    { "mha mode=core q=1,8,1,16 kv=1,2,S,16", "k_splits", 1 }, /* decoding: keys may split */
    { "mha mode=core q=1,8,S,16 kv=1,2,T,16", "k_splits", 1 },
    { "mha mode=core q=1,8,64,16 kv=1,2,S,16", "k_splits", 0 }, /* 64 queries never split keys */
    { "mha mode=core q=1,8,1,16 kv=1,2,512,16", "k_splits", 0 }, /* 512 keys never split */
    /* a 16-bit core kernel's decoding tiles: attend_kv reads k and v as stored */
    { "mha mode=core q=1,8,1,16 kv=1,2,S,16 dtype=bf16", "ATTNC_KV_BF16", 1 },
    { "mha mode=core q=1,8,1,16 kv=1,2,S,16 dtype=f16", "ATTNC_KV_F16", 1 },
    { "mha mode=core q=1,8,1,16 kv=1,2,S,16", "P->attend_kv", 0 },
    { "mha mode=core q=1,8,1,16 kv=1,2,S,16 rope=neox dtype=f16", "P->attend_kv", 0 }, /* k rotated: widened */
    { "alphafold x=B,S,64 heads=4 head_dim=16 global", "k_splits", 0 },
    { "mha x=B,S,64 heads=4 dtype=f64", "P->", 0 },      /* f64: no primitives */
    { "mha x=B,S,64 heads=4 dtype=f64", "prims", 0 },
    { "mha x=B,S,64 heads=4", "t->bias[", 0 },           /* no bias, no mask, no causal in the C loops */
    { "mha x=B,S,64 heads=4", "t->mask[", 0 },
    { "mha x=B,S,64 heads=4", "t->hi_off <", 0 },
    { "mha x=B,S,64 heads=4 causal mask=key bias=B,4,S,S", "t->bias[", 1 },
    { "mha x=B,S,64 heads=4 causal mask=key bias=B,4,S,S", "t->mask[", 1 },
    { "mha x=B,S,64 heads=4 causal mask=key bias=B,4,S,S", "t->hi_off <", 1 },
    { "alphafold x=1,S,64 heads=2 head_dim=16 bias=2,S,S", "transpose_bias", 0 }, /* one element: no transposed copy */
    { "mha mode=core q=B,S,4,16 layout=bshc", "z->kvt_at", 1 },            /* bshc: k and v copied head by head */
    { "mha mode=core q=1,1,32,16 kv=1,S,8,16 layout=bshc", "k_t", 0 },     /* a decoding step reads them as they are */
    /* score modifiers and lse: the softcap in the attend primitive; the
     * rest in the C loops or rows finished after it; projections on the primitives */
    { "mha x=B,S,64 heads=4 softcap=30", "P->attend", 1 },
    { "mha x=B,S,64 heads=4 softcap=30", "attend_finish", 0 },  /* the primitive takes the softcap: no rows to finish */
    { "mha x=B,S,64 heads=4 softcap=30 sinks", "attend_finish", 1 },
    { "mha mode=core q=B,4,S,16 alibi sinks lse", "attend_finish", 1 }, /* the primitive, then the rows finished */
    { "mha x=B,S,64 heads=4 alibi bias=B,4,S,S", "attend_finish", 0 }, /* ALiBi's table would replace the bias */
    { "mha x=B,S,64 heads=4 softcap=30", "P->linear", 1 },
    { "mha x=B,S,64 heads=4 softcap=30", "tanhf(", 1 },
    { "mha x=B,S,64 heads=4", "tanhf(", 0 },
    { "mha x=B,S,64 heads=4 alibi", "t->slope[hh]", 1 },
    { "mha x=B,S,64 heads=4", "t->slope[", 0 },
    { "mha mode=core q=B,4,S,16 sinks", "t->sink[hh]", 1 },
    { "mha mode=core q=B,4,S,16", "t->sink[", 0 },
    { "mha mode=core q=B,4,S,16 lse", "t->lse[", 1 },
    { "mha mode=core q=B,4,S,16", "t->lse[", 0 },
    { "mha x=B,S,64 heads=4 rope=neox", "rotate_item", 0 }, /* full mode: rotated where projected */
    { "mha x=B,S,64 heads=4 rope=neox", "rope_block(", 1 },
    { "mha x=B,S,64 heads=4 rope=neox", "z->fused", 1 },
    { "mha x=B,S,64 heads=2 head_dim=32 rope=neox", "linear_hm", 1 }, /* and by head, k head-major */
    { "mha x=B,S,64 heads=2 head_dim=32 rope=neox", "PROJ_SLAB", 1 },
    { "mha mode=core q=B,4,S,16 rope=neox", "rotate_item", 1 },
    { "mha x=B,S,64 heads=4 cache=40 rope=neox", "rotate_item", 1 },
    { "mha x=B,S,64 heads=4", "rotate_item", 0 },
    { "mha x=B,S,64 heads=4", "rope_table", 0 },
    { "mha x=B,S,64 heads=4 rope=gptj", "x[2 * d + 1]", 1 },
    { "mha x=B,S,64 heads=4 rope=neox", "x[2 * d + 1]", 0 },
    { "mha x=B,S,64 heads=4 weights_out", "a_i[j]", 1 },
    { "mha x=B,S,64 heads=4 weights_out", "P->attend", 0 },
    { "mha x=B,S,64 heads=4", "a_i[j]", 0 },
    { "mha x=B,S,64 heads=4 pe=sinusoidal", "add_pe(", 1 },
    { "mha x=B,S,64 heads=4", "add_pe(", 0 },
    { "mha mode=core q=B,4,S,16", "k_t", 0 },
  };
  size_t i;
  (void)s;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (generated_has(cases[i].spec, cases[i].needle) != cases[i].has)
      fail_msg("%s: the fast form %s \"%s\"", cases[i].spec, cases[i].has ? "lacks" : "has", cases[i].needle);
}

/* A bias shared by the batch elements (AlphaFold's pair bias) is
 * transposed once per run when the primitives run and there are at least 4
 * batch elements: several query and key tiles, tails of rows, masks, causal
 * and window ranges, column attention, and a GQA spec that keeps the bias
 * as it is. */
static void sweep_shared_bias(attnc_backend be)
{
  static const char *const specs[] = {
    "alphafold x=4,S,12 heads=3 head_dim=4 gated bias=3,S,S mask=key",
    "alphafold x=2,3,S,12 heads=3 head_dim=4 bias=1,S,S",
    "alphafold x=S,5,12 attn_dim=0 heads=2 head_dim=4 bias=2,S,S mask=key",
    "mha mode=core q=5,2,S,8 bias=2,S,S causal",
    "mha mode=core q=4,2,S,8 bias=1,S,S window=3,3 mask=key",
    "gqa x=4,S,24 heads=4 kv_heads=2 bias=4,S,S",
  };
  static const int64_t lens[] = { 1, 33, 100, 130 };
  struct sweep sw = { 0, 0 };
  size_t i, l;
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    /* the generator's side: a transposing kernel for all but GQA */
    assert_true(generated_has(specs[i], "transpose_bias(") == (strncmp(specs[i], "gqa", 3) != 0));
    for (l = 0; l < sizeof lens / sizeof lens[0]; l++)
      one(&sw, be, specs[i], lens[l], 0, 0.7, 900 + i * 7 + l);
  }
  report("shared bias", be, &sw);
  assert_int_equal(sw.fails, 0);
}

/* With the primitives and head_dim a multiple of 32, k and v are
 * projected head by head into a head-major scratch: row blocks that cross
 * batch elements, column chunks of half a head, GQA, cross-attention,
 * masks and windows, global attention, and the fused path (4 batch
 * elements) on either axis.  With 2 batch elements x 2 kv heads (or more)
 * on 1 or 2 threads, each attend item projects its own kv head (by_head): the
 * gated spec, and the attention axis outermost, where k and v keep x's
 * layout, cover its other branches. */
static void sweep_head_major(attnc_backend be)
{
  static const struct { const char *spec; int hm; } specs[] = {
    { "mha x=B,S,128 heads=2", 1 },
    { "mha x=B,S,512 heads=16 causal", 1 }, /* column chunks of two heads */
    { "gqa x=B,S,128 heads=4 kv_heads=2 head_dim=32 causal mask=key", 1 },
    { "mha x=B,S,64 kv=B,T,48 heads=2 head_dim=32 window=5,2", 1 },
    { "alphafold x=4,S,64 heads=2 head_dim=32 gated bias=2,S,S mask=key", 1 },
    { "alphafold x=B,S,64 heads=2 head_dim=32 global gated mask=key", 1 },
    /* the attention axis outermost: only the fused path goes head-major */
    { "alphafold x=S,4,64 attn_dim=0 heads=2 head_dim=32 bias=2,S,S mask=key", 0 },
    { "mha x=B,S,100 heads=4 head_dim=25", 0 },
    { "alphafold x=B,S,64 heads=2 head_dim=32 gated mask=key", 1 },
    { "mha x=S,B,64 attn_dim=0 heads=2 head_dim=32", 0 },
  };
  /* 114: by_head projects in slabs of 112 rows (PROJ_SLAB), two of the
   * queries' and one of the keys' (T = 112) */
  static const int64_t lens[] = { 1, 7, 33, 70, 114 };
  struct sweep sw = { 0, 0 };
  size_t i, l;
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    const int hm = generated_has(specs[i].spec, "linear_hm(");
    if (hm != specs[i].hm) fprintf(stderr, "FAIL head-major or not: %s\n", specs[i].spec);
    assert_true(hm == specs[i].hm);
    for (l = 0; l < sizeof lens / sizeof lens[0]; l++)
      one(&sw, be, specs[i].spec, lens[l], 0, 0.7, 1200 + i * 7 + l);
  }
  report("head-major k, v", be, &sw);
  assert_int_equal(sw.fails, 0);
}

/* Logits in the hundreds must not overflow: large inputs and scale. */
static void sweep_large_logits(attnc_backend be)
{
  struct sweep sw = { 0, 0 };
  checker_opts o;
  checker_result r;
  memset(&o, 0, sizeof o);
  o.backend = be;
  o.form = form;
  o.default_dim = 33;
  o.scale_inputs = 60; /* q.k grows with the square: logits of several hundred */
  checker_run("mha mode=core q=B,2,S,8 scale=1.0 dtype=f64", &o, &r);
  sw.cases++;
  if (!r.ok) { sw.fails++; fprintf(stderr, "FAIL large logits f64: %s max abs %.3g\n", r.err.message, r.max_abs); }
  checker_run("mha mode=core q=B,2,S,8 scale=1.0", &o, &r);
  sw.cases++;
  if (!r.ok) { sw.fails++; fprintf(stderr, "FAIL large logits f32: %s max abs %.3g\n", r.err.message, r.max_abs); }
  report("large logits", be, &sw);
  assert_int_equal(sw.fails, 0);
}

/* The fast form's C loops (no primitives) must agree too: AOT builds run them. */
static void test_kernels_no_prims_tcc(void **s)
{
  (void)s;
  setenv("ATTNC_NO_PRIMS", "1", 1);
  sweep_heads(ATTNC_BACKEND_TCC);
  sweep_masks(ATTNC_BACKEND_TCC);
  sweep_features(ATTNC_BACKEND_TCC);
  unsetenv("ATTNC_NO_PRIMS");
}

/* Work items never share outputs, so any thread count gives the same bits. */
static void test_kernels_threads_identical(void **s)
{
  static const char *const specs[] = {
    "mha x=B,S,64 heads=4 causal mask=key",
    "gqa x=B,S,64 heads=8 kv_heads=2 window=9,0 causal",
    "alphafold x=3,S,32 heads=4 head_dim=8 gated global mask=key global_mean=masked",
    "alphafold x=2,S,3,32 attn_dim=1 heads=4 head_dim=8 gated bias=2,4,S,S mask=key",
    /* the bias transposed; fused on 1 and 2 threads, not on 3 (4 batch elements do not share out): the same bits */
    "alphafold x=4,S,32 heads=4 head_dim=8 gated bias=4,S,S mask=key",
    "mha mode=core q=1,8,1,64 kv=1,2,S,64 mask=key", /* decode: key splits */
    /* projected by kv head in the attend items on 1 and 2 threads, not on 3 (4 items): the same bits */
    "mha x=1,S,128 heads=4 head_dim=32 causal",
  };
  size_t i;
  int th;
  (void)s;
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    checker_opts o;
    checker_result r;
    double *first = NULL, *again;
    size_t n = 0;
    for (th = 1; th <= 3; th++) {
      memset(&o, 0, sizeof o);
      o.default_dim = strstr(specs[i], "q=1,8,1") ? 3000 : 70;
      o.threads = th;
      o.seed = 5;
      o.out_n = 1 << 20;
      again = calloc(o.out_n, sizeof(double));
      assert_non_null(again);
      o.out_copy = again;
      checker_run(specs[i], &o, &r);
      if (!r.ok) fprintf(stderr, "FAIL threads=%d %s: %s max abs %.3g\n", th, specs[i], r.err.message, r.max_abs);
      assert_true(r.ok);
      assert_true(r.n <= o.out_n);
      if (!first) {
        first = again;
        n = r.n;
      } else {
        assert_int_equal(r.n, n);
        if (memcmp(first, again, n * sizeof(double)) != 0)
          fprintf(stderr, "FAIL %s: results differ between 1 and %d threads\n", specs[i], th);
        assert_memory_equal(first, again, n * sizeof(double));
        free(again);
      }
    }
    printf("threads 1/2/3 identical: %s (%zu outputs)\n", specs[i], n);
    free(first);
  }
}

static void test_kernels_heads_tcc(void **s) { (void)s; sweep_heads(ATTNC_BACKEND_TCC); }
static void test_kernels_heads_cc(void **s) { (void)s; sweep_heads(ATTNC_BACKEND_CC); }
static void test_kernels_axes_tcc(void **s) { (void)s; sweep_axes(ATTNC_BACKEND_TCC); }
static void test_kernels_axes_cc(void **s) { (void)s; sweep_axes(ATTNC_BACKEND_CC); }
static void test_kernels_masks_tcc(void **s) { (void)s; sweep_masks(ATTNC_BACKEND_TCC); }
static void test_kernels_masks_cc(void **s) { (void)s; sweep_masks(ATTNC_BACKEND_CC); }
static void test_kernels_features_tcc(void **s) { (void)s; sweep_features(ATTNC_BACKEND_TCC); }
static void test_kernels_features_cc(void **s) { (void)s; sweep_features(ATTNC_BACKEND_CC); }
static void test_kernels_shared_bias_tcc(void **s) { (void)s; sweep_shared_bias(ATTNC_BACKEND_TCC); }
static void test_kernels_shared_bias_cc(void **s) { (void)s; sweep_shared_bias(ATTNC_BACKEND_CC); }
static void test_kernels_head_major_tcc(void **s) { (void)s; sweep_head_major(ATTNC_BACKEND_TCC); }
static void test_kernels_head_major_cc(void **s) { (void)s; sweep_head_major(ATTNC_BACKEND_CC); }
static void test_kernels_large_logits_tcc(void **s) { (void)s; sweep_large_logits(ATTNC_BACKEND_TCC); }
static void test_kernels_large_logits_cc(void **s) { (void)s; sweep_large_logits(ATTNC_BACKEND_CC); }

/* The plain form, through the same checker and every sweep. */
static void sweep_plain_form(attnc_backend be)
{
  form = ATTNC_FORM_PLAIN;
  sweep_heads(be);
  sweep_axes(be);
  sweep_masks(be);
  sweep_features(be);
  sweep_shared_bias(be);
  sweep_head_major(be);
  sweep_large_logits(be);
  form = ATTNC_FORM_FAST;
}
static void test_kernels_plain_form_tcc(void **s) { (void)s; sweep_plain_form(ATTNC_BACKEND_TCC); }
static void test_kernels_plain_form_cc(void **s) { (void)s; sweep_plain_form(ATTNC_BACKEND_CC); }

/* Score modifiers (softcap, alibi, sinks) and the lse output, alone and
 * together, with masks, GQA, cross-attention, core mode in both layouts,
 * global attention, f64 and bf16, at lengths 1, 7, 33 and 257; lse is
 * compared too (-inf where a row sees no key). */
static void sweep_modifiers(attnc_backend be)
{
  if (same_primitives_under_model("kernels with score modifiers")) return;
  static const char *const specs[] = {
    "mha x=B,S,16 heads=2 softcap=2.5",
    "gqa x=B,S,24 heads=4 kv_heads=2 alibi causal",
    "mha x=B,S,24 heads=6 alibi=4 lse", /* 6 heads: slopes past the power of two */
    "mha x=B,S,16 heads=2 sinks mask=key",
    "mha x=B,S,16 heads=2 lse mask=key window=2,1",
    "mha x=B,S,16 heads=2 lse mask=key empty_rows=nan",
    "mha x=B,S,16 kv=B,T,8 heads=2 alibi=4 lse causal=bottom_right",
    "mha mode=core q=B,4,S,8 kv=B,2,T,8 softcap=1.5 alibi sinks lse causal=bottom_right",
    "mha mode=core q=B,S,4,8 layout=bshc alibi lse sinks",
    "mha mode=core q=B,8,1,16 kv=B,2,T,16 alibi sinks lse mask=key",
    "alphafold x=2,S,12 heads=3 head_dim=4 gated bias=3,S,S mask=key softcap=3 sinks lse",
    "alphafold x=3,S,12 heads=2 head_dim=4 global mask=key lse sinks",
    "mqa x=B,S,32 heads=4 alibi sinks lse softcap=20 dtype=f64",
    "gqa x=B,S,32 heads=4 kv_heads=2 alibi sinks lse softcap=20 causal dtype=bf16",
    /* RoPE: both pairings, partial, another theta, cross, core in both layouts, with the rest */
    "mha x=B,S,32 heads=2 rope=neox causal",
    "gqa x=B,S,48 heads=6 kv_heads=2 head_dim=8 rope=gptj rope_dim=4 rope_theta=500000 mask=key",
    "mha x=B,S,16 kv=B,T,8 heads=2 rope=neox causal=bottom_right",
    "alphafold x=2,S,3,12 attn_dim=1 heads=3 head_dim=4 rope=neox gated bias=2,3,S,S mask=key",
    "mha mode=core q=B,4,S,16 kv=B,2,T,16 rope=neox rope_dim=8 causal=bottom_right alibi lse",
    "mha mode=core q=B,S,4,16 layout=bshc rope=gptj sinks",
    "mha mode=core q=1,8,1,32 kv=1,2,T,32 rope=neox mask=key", /* decoding: the query at the last position */
    "mha x=B,S,32 heads=2 rope=gptj softcap=5 dtype=f64",
    "mha x=B,S,32 heads=2 rope=neox dtype=bf16 causal",
    /* RoPE at projection time: fused, by head (k head-major, or rows apart), whole-head projection items */
    "mha x=4,S,64 heads=2 rope=neox causal",
    "gqa x=B,S,128 heads=4 kv_heads=2 rope=gptj rope_dim=16 mask=key",
    "alphafold x=2,S,3,64 attn_dim=1 heads=2 head_dim=32 rope=neox gated",
    "mha x=1,S,192 heads=3 head_dim=64 rope=neox", /* 2 threads: not by head */
    /* weights_out: the kernel's own weights, every empty_rows mode, with the rest */
    "mha x=B,S,16 heads=2 weights_out mask=key causal",
    "mha x=B,S,16 heads=2 weights_out lse mask=key window=2,1 empty_rows=uniform",
    "mha x=B,S,16 heads=2 weights_out mask=key window=2,1 empty_rows=nan",
    "gqa x=B,S,24 heads=4 kv_heads=2 weights_out sinks alibi softcap=3 rope=neox",
    "alphafold x=3,S,12 heads=2 head_dim=4 global mask=key weights_out gated",
    "mha mode=core q=B,S,4,8 kv=B,T,2,8 weights_out bias=B,4,S,T layout=bshc",
    /* pe: x (and kv) read with the sinusoidal encoding added, in every storage */
    "mha x=B,S,16 heads=2 pe=sinusoidal causal",
    "mha x=B,S,16 kv=B,T,8 heads=2 pe=sinusoidal causal=bottom_right",
    "alphafold x=2,S,3,12 attn_dim=1 heads=3 head_dim=4 pe=sinusoidal gated mask=key",
    "mha x=B,S,16 heads=2 pe=sinusoidal rope=neox dtype=bf16",
    "mha x=B,S,16 heads=2 pe=sinusoidal weights=int8 dtype=f64",
  };
  static const int64_t lens[] = { 1, 7, 33, 257 };
  struct sweep sw = { 0, 0 };
  size_t i, l;
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++)
    for (l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      if (lens[l] == 257 && i % 3 != 0) continue; /* the long length on a third of them */
      one(&sw, be, specs[i], lens[l], 0, 0.6, i * 4 + l);
    }
  report("modifiers", be, &sw);
  assert_int_equal(sw.fails, 0);
}
static void test_kernels_modifiers_tcc(void **s) { (void)s; sweep_modifiers(ATTNC_BACKEND_TCC); }
static void test_kernels_modifiers_cc(void **s) { (void)s; sweep_modifiers(ATTNC_BACKEND_CC); }
static void test_kernels_modifiers_plain(void **s)
{
  (void)s;
  form = ATTNC_FORM_PLAIN;
  sweep_modifiers(ATTNC_BACKEND_TCC);
  sweep_modifiers(ATTNC_BACKEND_CC);
  form = ATTNC_FORM_FAST;
}

/* Outputs below f32's range: with ALiBi and far-apart positions a row's
 * keys can sit 170 below its sink, so the float64 reference holds values
 * like 1e-74 that f32 stores as 0.  The elementwise bound passes them; the
 * NMSE must not call that an error either (checker_run). */
static void test_kernels_underflowing_outputs(void **s)
{
  (void)s;
  for (int plain = 0; plain < 2; plain++) {
    checker_opts o;
    checker_result r;
    memset(&o, 0, sizeof o);
    o.backend = ATTNC_BACKEND_TCC;
    o.form = plain ? ATTNC_FORM_PLAIN : ATTNC_FORM_FAST;
    o.seed = 247;
    if (!checker_run("mode=core q=2,2,6,16,16 kv=2,2,2,4,16 window=0,4 alibi=4 sinks", &o, &r))
      fail_msg("%s: NMSE %.3g, max |ref| %.3g: %s", plain ? "plain" : "fast", r.nmse, r.max_ref, r.err.message);
    assert_true(r.max_ref < 1e-38);
  }
  /* in f16 and bf16 the rms-relative elementwise bound shrank with such
   * outputs: it stops at the dtype's smallest normal */
  for (int d = 0; d < 2; d++) {
    checker_opts o;
    checker_result r;
    const char *spec = d ? "mqa mode=core q=3,1,33,4 mask=key rope=gptj rope_theta=100.5 alibi=4 sinks dtype=bf16"
                         : "mqa mode=core q=3,1,33,4 mask=key rope=gptj rope_theta=100.5 alibi=4 sinks dtype=f16";
    memset(&o, 0, sizeof o);
    o.backend = ATTNC_BACKEND_TCC;
    o.seed = 819;
    if (!checker_run(spec, &o, &r)) fail_msg("%s: max abs error %.3g, max |ref| %.3g: %s", spec, r.max_abs, r.max_ref, r.err.message);
    assert_true(r.max_ref < 1e-38);
  }
}

/* ALiBi with q_pos and k_pos far apart (the checker binds positions that
 * start independently below 4000 on odd seeds) and a steep slope: every
 * term slope * (pos_k - pos_q) is large along a row, and f32 logits that
 * held them lost the precision the softmax needs.  The kernels measure the
 * keys from the key in line with the query instead; lse takes the row's
 * constant back.  Both forms, tcc and cc, forward and gradients. */
static void test_kernels_alibi_far_positions(void **s)
{
  static const char *const specs[] = {
    "mha mode=core q=2,3,3,1,4 kv=2,3,3,1,4 layout=bshc softcap=5 alibi=0.5",
    "mode=core q=3,8,8,1 kv=3,2,33,1 mask=key causal=bottom_right scale=1.5 alibi=4 lse",
    "mha x=2,9,8 kv=2,4,6 heads=1 alibi=0.5 lse window=1,2 weights_out",
    "alphafold x=15,3,12 attn_dim=0 heads=6 kv_heads=3 head_dim=16 gated mask=key alibi=4",
    "mha x=2,9,8 heads=1 alibi=0.5 cache=12 lse",
    /* with a sink: a row keeps its true logits where the sink outweighs the keys */
    "mha x=2,9,8 heads=2 alibi=0.5 sinks lse weights_out",
    "mqa x=3,3,1,12 kv=8,3,1,10 attn_dim=0 heads=3 head_dim=4 gated mask=key alibi=0.5 sinks",
    "mode=core q=1,8,8,1 kv=1,2,33,1 alibi=4 sinks lse",
  };
  static const char *const grads[] = {
    "mode=core q=2,3,5,4 alibi=0.5 bias=3,5,5 lse train",
    "mode=core q=2,3,5,4 alibi=0.5 lse weights_out train dropout=0.5",
    "mha x=2,9,8 heads=1 alibi=0.5 sinks lse causal train",
    "mode=core q=1,4,8,2 kv=1,2,13,2 alibi=4 sinks lse train",
  };
  int fails = 0;
  (void)s;
  for (int g = 0; g < 2; g++)
    for (size_t i = 0; i < (g ? sizeof grads / sizeof grads[0] : sizeof specs / sizeof specs[0]); i++)
      for (int v = 0; v < 3; v++) /* fast tcc, plain tcc, fast cc */
        for (unsigned long seed = 1; seed < 8; seed += 2) {
          checker_opts o;
          checker_result r;
          const char *spec = g ? grads[i] : specs[i];
          if (v == 2 && seed > 3) continue; /* cc compiles: fewer seeds */
          memset(&o, 0, sizeof o);
          o.backend = v == 2 ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC;
          o.form = v == 1 ? ATTNC_FORM_PLAIN : ATTNC_FORM_FAST;
          o.seed = seed;
          o.grad = g;
          o.threads = 1 + (int)(seed / 2 % 2);
          if (!checker_run(spec, &o, &r)) {
            fails++;
            fprintf(stderr, "FAIL [%s%s%s] %s seed=%lu: %s\n", v == 2 ? "cc" : "tcc", v == 1 ? ", plain form" : "",
                    g ? ", gradients" : "", spec, seed, r.err.message);
          }
        }
  assert_int_equal(fails, 0);
}

/* bf16 and f16 storage (the arithmetic in f32) through the same sweeps,
 * each against the reference on the same rounded tensors with DESIGN.md's
 * bounds for its dtype: the fast form with and without the primitives,
 * and the plain form.  The 16-bit kernels run the f32 kernels' phases
 * between widening and narrowing, so the cc backend takes every sweep
 * and tcc a share of them, to keep the suite's time. */
/* Core-mode decoding steps (a few query rows, many keys; 1030 keys are
 * split over threads): a bf16 or f16 kernel's attend_kv reads k and v as
 * stored */
static void sweep_decode(attnc_backend be)
{
  static const int64_t lens[] = { 1, 7, 1030 };
  struct sweep sw = { 0, 0 };
  size_t l;
  for (l = 0; l < sizeof lens / sizeof lens[0]; l++) {
    one(&sw, be, "mha mode=core q=B,8,1,32 kv=B,2,S,32", lens[l], 0, 0, 700 + l);
    one(&sw, be, "mha mode=core q=B,6,2,40 kv=B,3,S,40 causal=bottom_right mask=key", lens[l], 1, 0.8, 710 + l);
    one(&sw, be, "mha mode=core q=1,4,1,64 kv=1,4,S,64 softcap=4 window=300,0 causal=bottom_right", lens[l], 0, 0, 720 + l);
  }
  report("decode", be, &sw);
  assert_int_equal(sw.fails, 0);
}

/* ... and they do take that path: a run's scratch holds no f32 copy of k
 * or v (each 2 MiB here), in either 16-bit dtype, on 1 and 2 threads. */
static void test_kernels_decode_16_reads_stored(void **s)
{
  static const char *const specs[] = { "mha mode=core q=1,8,1,64 kv=1,2,4096,64 dtype=bf16",
                                       "mha mode=core q=1,8,1,64 kv=1,2,4096,64 dtype=f16" };
  static const attnc_dtype dts[] = { ATTNC_BF16, ATTNC_F16 };
  const long G = 2, Sk = 4096, C = 64;
  unsigned short *q = calloc(8 * 64, 2), *k = calloc((size_t)(G * Sk * C), 2), *v = calloc((size_t)(G * Sk * C), 2);
  unsigned short *o = calloc(8 * 64, 2);
  size_t i;
  int threads;
  (void)s;
  assert_true(q && k && v && o);
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++)
    for (threads = 1; threads <= 2; threads++) {
      attnc_options opts = { ATTNC_BACKEND_TCC, threads, NULL, ATTNC_FORM_FAST };
      attnc_error e;
      attnc_kernel *kern = attnc_compile(specs[i], &opts, &e);
      attnc_bindings *b;
      attnc_tensor tq = { dts[i], 4, { 1, 8, 1, C }, q }, tk = { dts[i], 4, { 1, G, Sk, C }, k },
                   tv = { dts[i], 4, { 1, G, Sk, C }, v }, to = { dts[i], 4, { 1, 8, 1, C }, o };
      if (!kern) fail_msg("%s: %s", specs[i], e.message);
      b = attnc_bindings_new(kern);
      assert_non_null(b);
      assert_int_equal(attnc_bindings_set_threads(b, threads, &e), ATTNC_OK);
      assert_int_equal(attnc_bind(b, "q", &tq, &e), ATTNC_OK);
      assert_int_equal(attnc_bind(b, "k", &tk, &e), ATTNC_OK);
      assert_int_equal(attnc_bind(b, "v", &tv, &e), ATTNC_OK);
      if (attnc_run(b, &to, &e) != ATTNC_OK) fail_msg("%s: run: %s", specs[i], e.message);
      if (attnc_bindings_scratch_bytes(b) >= (long)sizeof(float) * G * Sk * C)
        fail_msg("%s (%d threads): %ld bytes of scratch, as much as an f32 copy of k", specs[i], threads,
                 attnc_bindings_scratch_bytes(b));
      attnc_bindings_free(b);
      attnc_release(kern);
    }
  free(q); free(k); free(v); free(o);
}

static void sweep_16(const char *dt, attnc_backend be)
{
  if (same_primitives_under_model("bf16 and f16 kernels")) return;
  dtype = dt;
  sweep_heads(be);
  sweep_decode(be);
  sweep_features(be);
  if (be == ATTNC_BACKEND_CC) {
    sweep_axes(be);
    sweep_masks(be);
    sweep_shared_bias(be);
    sweep_head_major(be);
  }
  form = ATTNC_FORM_PLAIN;
  sweep_heads(be);
  form = ATTNC_FORM_FAST;
  dtype = NULL;
}
static void test_kernels_bf16_tcc(void **s) { (void)s; sweep_16("bf16", ATTNC_BACKEND_TCC); }
static void test_kernels_bf16_cc(void **s) { (void)s; sweep_16("bf16", ATTNC_BACKEND_CC); }
static void test_kernels_f16_tcc(void **s) { (void)s; sweep_16("f16", ATTNC_BACKEND_TCC); }
static void test_kernels_f16_cc(void **s) { (void)s; sweep_16("f16", ATTNC_BACKEND_CC); }

static char g_self[4096]; /* this program, for the re-run with ATTNC_ISA set */

/* A bf16 kernel's decoding steps on the cc backend, as sweep_16 runs them:
 * what the re-run below runs (with ATTNC_ISA=avx512, off the vdpbf16ps path). */
static void test_kernels_decode_bf16_cc(void **s)
{
  (void)s;
  if (getenv("ATTNC_ISA")) assert_true(attnc_prims_get()->attend_kv != attnc_prims_attend_kv_bf16dp);
  dtype = "bf16";
  sweep_decode(ATTNC_BACKEND_CC);
  dtype = NULL;
}

/* Where this process's bf16 decoding tiles take vdpbf16ps
 * (attnc_prims_attend_kv_bf16dp), the same sweep again in a fresh process
 * with ATTNC_ISA=avx512, which leaves it out (the primitives are chosen
 * once per process): both paths stay checked end to end. */
static void test_kernels_decode_bf16_both_paths(void **s)
{
  pid_t pid;
  int st;
  (void)s;
  if (same_primitives_under_model("bf16 decoding steps without vdpbf16ps")) return;
  if (attnc_prims_get()->attend_kv != attnc_prims_attend_kv_bf16dp) {
    printf("SKIP bf16 decoding without vdpbf16ps: this process does not take it (the bf16 sweeps ran that path)\n");
    return;
  }
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("ATTNC_ISA", "avx512", 1);
    execl(g_self, g_self, "--decode-bf16", (char *)NULL);
    _exit(127);
  }
  while (waitpid(pid, &st, 0) < 0) assert_int_equal(errno, EINTR);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* int8 weight matrices with their per-row scales (weights=int8), with f32
 * and with bf16 activations (core-mode specs have no weights and run as
 * they are); the fast form packs them int8 (linear_q8), the C loops and
 * the plain form dequantise them every run. */
static void sweep_int8(attnc_backend be)
{
  if (same_primitives_under_model("int8-weight kernels")) return;
  weights = "int8";
  sweep_heads(be);
  sweep_features(be);
  /* by head, with AVX512-VNNI on x's rows quantised once in phase 1 */
  sweep_head_major(be);
  if (be == ATTNC_BACKEND_CC) sweep_axes(be);
  dtype = "bf16";
  sweep_heads(be);
  form = ATTNC_FORM_PLAIN;
  sweep_heads(be);
  form = ATTNC_FORM_FAST;
  dtype = NULL;
  weights = NULL;
}
static void test_kernels_int8_tcc(void **s) { (void)s; sweep_int8(ATTNC_BACKEND_TCC); }
static void test_kernels_int8_cc(void **s) { (void)s; sweep_int8(ATTNC_BACKEND_CC); }

/* The C loops of 16-bit and int8 kernels (no primitives: their weights
 * widened every run). */
static void test_kernels_16_no_prims_tcc(void **s)
{
  (void)s;
  if (same_primitives_under_model("the C loops of 16-bit kernels (no primitives at all)")) return;
  setenv("ATTNC_NO_PRIMS", "1", 1);
  dtype = "bf16";
  sweep_heads(ATTNC_BACKEND_TCC);
  sweep_features(ATTNC_BACKEND_TCC);
  dtype = "f16";
  weights = "int8";
  sweep_heads(ATTNC_BACKEND_TCC);
  dtype = NULL;
  weights = NULL;
  unsetenv("ATTNC_NO_PRIMS");
}

/* KV caches (spec key cache): prefill (Sn = 8), odd Sn (3) and decoding
 * (Sn = 1) over caches of every kv_dtype, with heads, GQA and MQA, head
 * dims 4..64, batch axes 0..2, per-sequence cache_len (a scalar for some
 * seeds), masks over the cache, windows, both ropes, alibi, softcap,
 * sinks, lse, weights_out, bias and pe, in f32, bf16 and f64, and with int8
 * weights.  The checker
 * compares out, lse and attn, the rows the run wrote into the caches,
 * and that no other row changed.  Each spec runs with a kv_dtype and a
 * dtype chosen by its index and length, so that every pair is seen
 * without running the product. */
static void sweep_cache(attnc_backend be)
{
  static const char *const specs[] = {
    "mha x=B,S,16 heads=2 cache=24",
    "gqa x=B,S,32 heads=4 kv_heads=2 cache=40 rope=neox",
    "mqa x=B,S,32 heads=4 cache=33 rope=gptj rope_dim=4 alibi",
    "gqa x=B,S,24 heads=6 kv_heads=3 head_dim=4 cache=20 mask=key window=5,0 softcap=5",
    "mha x=B,S,16 heads=2 cache=16 sinks lse weights_out",
    "mqa x=B,S,32 heads=4 cache=64 mask=key empty_rows=uniform weights_out",
    "mha x=B,S,16 heads=2 cache=24 bias=B,2,S,24",
    "mha x=2,3,S,16 heads=2 cache=24 rope=neox",
    "mha x=S,16 heads=2 cache=12 alibi lse",
    "gqa x=B,S,32 heads=4 kv_heads=2 cache=40 rope=neox alibi sinks lse softcap=20 mask=key",
    "mha x=B,S,128 heads=2 cache=70 rope=neox",
    "gqa x=B,S,32 heads=4 kv_heads=2 cache=40 weights=int8 rope=neox",
    /* at least 1024 positions: a short query splits its keys over the threads (and each split chunks them) */
    "gqa x=B,S,32 heads=4 kv_heads=2 cache=1500 mask=key window=700,0",
    "mqa x=B,S,16 heads=2 cache=1100 rope=neox",
    /* pe: x's new rows encoded at cache_len + i (or q_pos, and k_pos at those keys) */
    "mha x=B,S,16 heads=2 cache=24 pe=sinusoidal",
    "gqa x=B,S,32 heads=4 kv_heads=2 cache=40 pe=sinusoidal rope=gptj alibi gated",
  };
  static const char *const kv[] = { "", " kv_dtype=bf16", " kv_dtype=f16", " kv_dtype=int8", " kv_dtype=f32" };
  static const char *const dt[] = { "", " dtype=bf16", " dtype=f64" };
  static const int64_t lens[] = { 1, 3, 8 };
  struct sweep sw = { 0, 0 };
  char spec[600];
  size_t i, l;
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++)
    for (l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      snprintf(spec, sizeof spec, "%s%s%s", specs[i], kv[(i + l) % 5], dt[(2 * i + l) % 3]);
      one(&sw, be, spec, lens[l], 0, 0.7, 1500 + i * 3 + l);
    }
  /* a named CAP, bound from the caches' shape (T = S + 3 for S = 1, 2) */
  one(&sw, be, "mha x=B,S,16 heads=2 cache=T rope=neox", 1, 0, 0, 1600);
  one(&sw, be, "gqa x=B,S,16 heads=4 kv_heads=2 cache=T kv_dtype=int8", 2, 0, 0, 1601);
  /* decoding over bf16, f16 and int8 caches long enough to split: the
   * primitive that reads them as stored (attend_kv), c a multiple of 32 and not */
  one(&sw, be, "gqa x=B,S,128 heads=8 kv_heads=2 cache=1100 kv_dtype=bf16", 1, 0, 0, 1602);
  one(&sw, be, "gqa x=B,S,40 heads=4 kv_heads=1 head_dim=40 cache=1030 kv_dtype=bf16 mask=key", 2, 0, 0.7, 1603);
  one(&sw, be, "gqa x=B,S,96 heads=6 kv_heads=2 head_dim=24 cache=1300 kv_dtype=int8 window=900,0", 1, 0, 0, 1604);
  one(&sw, be, "gqa x=B,S,64 heads=4 kv_heads=2 cache=1100 kv_dtype=f16", 1, 0, 0, 1605);
  one(&sw, be, "gqa x=B,S,40 heads=4 kv_heads=1 head_dim=40 cache=1030 kv_dtype=f16 mask=key softcap=10", 2, 0, 0.7, 1606);
  report("cache", be, &sw);
  assert_int_equal(sw.fails, 0);
}
static void test_kernels_cache_tcc(void **s) { (void)s; sweep_cache(ATTNC_BACKEND_TCC); }
static void test_kernels_cache_cc(void **s) { (void)s; sweep_cache(ATTNC_BACKEND_CC); }
static void test_kernels_cache_no_prims_tcc(void **s)
{
  (void)s;
  setenv("ATTNC_NO_PRIMS", "1", 1);
  sweep_cache(ATTNC_BACKEND_TCC);
  unsetenv("ATTNC_NO_PRIMS");
}
static void test_kernels_cache_plain(void **s)
{
  (void)s;
  form = ATTNC_FORM_PLAIN;
  sweep_cache(ATTNC_BACKEND_TCC);
  form = ATTNC_FORM_FAST;
}

/* ---- decoding through one kernel equals one causal pass (issue 28, item 7) ---- */

static float decode_rand(unsigned long *seed)
{
  *seed = *seed * 6364136223846793005UL + 1442695040888963407UL;
  return (float)((*seed >> 33) % 20001) / 10000.0f - 1.0f;
}

/* n floats in [-amp, amp] */
static float *decode_floats(size_t n, float amp, unsigned long *seed)
{
  float *a = malloc(n * sizeof *a + 1);
  size_t i;
  assert_non_null(a);
  for (i = 0; i < n; i++) a[i] = amp * decode_rand(seed);
  return a;
}

/* A cache of n values in dt holding large finite garbage (int8: q with
 * scales of 1000): a kernel that reads a position it must not see fails. */
static void *decode_garbage(attnc_dtype dt, size_t n, unsigned long *seed)
{
  void *mem = malloc(n * attnc_dtype_size(dt) + 1);
  size_t i;
  assert_non_null(mem);
  for (i = 0; i < n; i++) {
    if (dt == ATTNC_I8) {
      ((int8_t *)mem)[i] = (int8_t)(127 * decode_rand(seed));
    } else {
      double v = 1000.0 * decode_rand(seed);
      attnc_convert(&v, ATTNC_F64, (char *)mem + i * attnc_dtype_size(dt), dt, 1);
    }
  }
  return mem;
}

/* The weights of a full-mode spec under their PyTorch names, as slots. */
static const struct { int slot; const char *name; } DECODE_W[] = {
  { ATTNC_SLOT_WQ, "q_proj.weight" }, { ATTNC_SLOT_BQ, "q_proj.bias" }, { ATTNC_SLOT_WK, "k_proj.weight" },
  { ATTNC_SLOT_BK, "k_proj.bias" },   { ATTNC_SLOT_WV, "v_proj.weight" }, { ATTNC_SLOT_BV, "v_proj.bias" },
  { ATTNC_SLOT_WO, "o_proj.weight" }, { ATTNC_SLOT_BO, "o_proj.bias" },
};

typedef struct decode_case {
  const char *body;   /* the layer: x=B,S,C first */
  const char *kv;     /* "" or " kv_dtype=..." */
  int S, S2;          /* prefill S rows, then S2 single rows */
  int lag;            /* odd batch elements one prefill behind (per-sequence cache_len, I64), else a scalar I32 */
} decode_case;

/* Bind every weight the kernel uses, from w (one array per DECODE_W row,
 * made on the first call). */
static void decode_bind_weights(attnc_kernel *k, attnc_bindings *b, float **w, unsigned long *seed)
{
  const attnc_gen *g = attnc_kernel_gen(k);
  attnc_error e;
  size_t i;
  for (i = 0; i < sizeof DECODE_W / sizeof DECODE_W[0]; i++) {
    const attnc_shape *sh = &g->shape[DECODE_W[i].slot];
    attnc_tensor t;
    size_t n = 1;
    int a;
    if (!g->used[DECODE_W[i].slot]) continue;
    memset(&t, 0, sizeof t);
    t.dtype = ATTNC_F32;
    t.rank = sh->rank;
    for (a = 0; a < sh->rank; a++) n *= (size_t)(t.shape[a] = sh->dim[a]);
    if (!w[i]) w[i] = decode_floats(n, (float)(1.0 / sqrt((double)sh->dim[sh->rank - 1])), seed);
    t.data = w[i];
    if (attnc_bind(b, DECODE_W[i].name, &t, &e) != ATTNC_OK) fail_msg("bind %s: %s", DECODE_W[i].name, e.message);
  }
}

/* The rows of x (B, N, C) that batch element b feeds a run: Sn of them from lens[b]. */
static void decode_rows(const float *x, long B, long N, long C, const int64_t *lens, long Sn, float *xs)
{
  long b;
  for (b = 0; b < B; b++) memcpy(xs + b * Sn * C, x + (b * N + lens[b]) * C, (size_t)(Sn * C) * sizeof *xs);
}

/* One case on one backend and thread count: a cache kernel fed the
 * prefill, (with lag) a second prefill that advances the even batch
 * elements and rewrites the odd ones' first S rows, then S2 single rows,
 * cache_len advancing by Sn after each run; each run's out against the
 * matching rows of one causal pass of the kernel without a cache over
 * the even elements' N = (1 + lag) S + S2 rows (the odd elements' later
 * rows, which causal keeps from their earlier ones, are never fed to the
 * cache).  Both kernels are within their bound of the exact result, so
 * they agree within twice the bound (the looser of dtype's and
 * kv_dtype's rows, at the one pass's rms). */
/* Run b into out (F32, n values): the kernel writes its own dtype, converted here. */
static void decode_run_f32(attnc_bindings *b, const attnc_gen *g, int rank, const int64_t *shape, float *out, size_t n,
                           const char *what)
{
  attnc_tensor t = { g->dtype, rank, { 0 }, NULL };
  attnc_error e;
  void *buf = malloc(n * attnc_dtype_size(g->dtype));
  int a;
  assert_non_null(buf);
  for (a = 0; a < rank; a++) t.shape[a] = shape[a];
  t.data = buf;
  if (attnc_run(b, &t, &e) != ATTNC_OK) fail_msg("%s: %s", what, e.message);
  attnc_convert(buf, g->dtype, out, ATTNC_F32, n);
  free(buf);
}

static void decode_case_run(const decode_case *dc, attnc_backend be, int threads)
{
  const long B = 2, N = (1 + dc->lag) * dc->S + dc->S2, CAP = N;
  char cspec[600], pspec[600];
  attnc_options opts = { be, threads, NULL, ATTNC_FORM_FAST };
  attnc_error e;
  attnc_kernel *kc, *kp;
  attnc_bindings *bc, *bp;
  const attnc_gen *g;
  unsigned long seed = 4242;
  float *w[sizeof DECODE_W / sizeof DECODE_W[0]] = { NULL }, *x, *sinks, *one, *xs, *os;
  unsigned char *mask;
  void *cache[2], *scale[2] = { NULL, NULL };
  int64_t lens[2] = { 0, 0 }, C, H, G, hd;
  attnc_dtype kd;
  double nmse, atol, a_rms, rtol, n2, at2, ar2, rt2, sum2 = 0, rms, worst = 0;
  size_t i, ncache;
  int step, nsteps = 1 + dc->lag + dc->S2;

  snprintf(cspec, sizeof cspec, "%s cache=%ld%s", dc->body, CAP, dc->kv);
  snprintf(pspec, sizeof pspec, "%s causal", dc->body);
  kc = attnc_compile(cspec, &opts, &e);
  if (!kc) fail_msg("%s: %s", cspec, e.message);
  kp = attnc_compile(pspec, &opts, &e);
  if (!kp) fail_msg("%s: %s", pspec, e.message);
  g = attnc_kernel_gen(kc);
  C = g->c_in;
  H = g->heads;
  G = g->kv_heads;
  hd = g->head_dim;
  kd = strstr(dc->kv, "int8") ? ATTNC_I8 : strstr(dc->kv, "bf16") ? ATTNC_BF16 : strstr(dc->kv, "f16") ? ATTNC_F16
       : strstr(dc->kv, "f32") ? ATTNC_F32 : g->dtype;
  bc = attnc_bindings_new(kc);
  bp = attnc_bindings_new(kp);
  assert_true(bc && bp);
  assert_int_equal(attnc_bindings_set_threads(bc, threads, &e), ATTNC_OK);
  assert_int_equal(attnc_bindings_set_threads(bp, threads, &e), ATTNC_OK);
  decode_bind_weights(kc, bc, w, &seed);
  decode_bind_weights(kp, bp, w, &seed);

  /* the one pass */
  x = decode_floats((size_t)(B * N * C), 1.0f, &seed);
  sinks = decode_floats((size_t)H, 1.0f, &seed);
  mask = malloc((size_t)(B * N));
  one = malloc((size_t)(B * N * C) * sizeof *one);
  assert_true(mask && one);
  for (i = 0; i < (size_t)(B * N); i++) mask[i] = decode_rand(&seed) > -0.6f;
  {
    const int64_t shape[3] = { B, N, C };
    attnc_tensor tx = { ATTNC_F32, 3, { B, N, C }, x };
    attnc_tensor tm = { ATTNC_U8, 2, { B, N }, mask }, ts = { ATTNC_F32, 1, { H }, sinks };
    assert_int_equal(attnc_bind(bp, "x", &tx, &e), ATTNC_OK);
    if (g->has_mask) assert_int_equal(attnc_bind(bp, "mask", &tm, &e), ATTNC_OK);
    if (g->sinks) assert_int_equal(attnc_bind(bp, "sinks", &ts, &e), ATTNC_OK);
    decode_run_f32(bp, attnc_kernel_gen(kp), 3, shape, one, (size_t)(B * N * C), pspec);
    if (g->has_mask) assert_int_equal(attnc_bind(bc, "mask", &tm, &e), ATTNC_OK);
    if (g->sinks) assert_int_equal(attnc_bind(bc, "sinks", &ts, &e), ATTNC_OK);
  }
  for (i = 0; i < (size_t)(B * N * C); i++) sum2 += (double)one[i] * one[i];
  rms = sqrt(sum2 / (double)(B * N * C));
  checker_bounds(g->dtype, &nmse, &atol, &a_rms, &rtol);
  checker_bounds(kd, &n2, &at2, &ar2, &rt2);
  atol = fmax(atol, at2) + fmax(a_rms, ar2) * rms;
  rtol = fmax(rtol, rt2);

  /* the caches: (B, G, CAP, hd) of garbage in kv_dtype, int8 scales of 1000 */
  ncache = (size_t)(B * G * CAP * hd);
  for (i = 0; i < 2; i++) {
    attnc_tensor t = { kd, 4, { B, G, CAP, hd }, NULL };
    cache[i] = decode_garbage(kd, ncache, &seed);
    t.data = cache[i];
    if (attnc_bind(bc, i ? "v_cache" : "k_cache", &t, &e) != ATTNC_OK) fail_msg("%s: bind the cache: %s", cspec, e.message);
    if (kd == ATTNC_I8) {
      attnc_tensor ts = { ATTNC_F32, 3, { B, G, CAP }, NULL };
      size_t r;
      scale[i] = malloc((size_t)(B * G * CAP) * sizeof(float));
      assert_non_null(scale[i]);
      for (r = 0; r < (size_t)(B * G * CAP); r++) ((float *)scale[i])[r] = 1000.0f;
      ts.data = scale[i];
      if (attnc_bind(bc, i ? "v_cache_scale" : "k_cache_scale", &ts, &e) != ATTNC_OK)
        fail_msg("%s: bind the scales: %s", cspec, e.message);
    }
  }

  xs = malloc((size_t)(B * dc->S * C) * sizeof *xs);
  os = malloc((size_t)(B * dc->S * C) * sizeof *os);
  assert_true(xs && os);
  for (step = 0; step < nsteps; step++) {
    const long Sn = step <= dc->lag ? dc->S : 1;
    const int64_t shape[3] = { B, Sn, C };
    attnc_tensor tx = { ATTNC_F32, 3, { B, Sn, C }, xs };
    char what[700];
    int32_t len32 = (int32_t)lens[0];
    attnc_tensor tl = { ATTNC_I64, 1, { B }, lens }, tl0 = { ATTNC_I32, 0, { 0 }, &len32 };
    long b, r, c;
    decode_rows(x, B, N, C, lens, Sn, xs);
    assert_int_equal(attnc_bind(bc, "x", &tx, &e), ATTNC_OK);
    if (attnc_bind(bc, "cache_len", dc->lag ? &tl : &tl0, &e) != ATTNC_OK) fail_msg("%s: bind cache_len: %s", cspec, e.message);
    snprintf(what, sizeof what, "%s, step %d", cspec, step);
    decode_run_f32(bc, g, 3, shape, os, (size_t)(B * Sn * C), what);
    for (b = 0; b < B; b++)
      for (r = 0; r < Sn; r++)
        for (c = 0; c < C; c++) {
          const double got = os[(b * Sn + r) * C + c], want = one[(b * N + lens[b] + r) * C + c];
          const double d = fabs(got - want) / (2 * (atol + rtol * fabs(want)));
          if (!(d <= worst)) {
            worst = isnan(d) ? INFINITY : d;
            if (worst > 1)
              fail_msg("[%s, %d threads] %s: step %d (Sn %ld, cache_len %lld) batch element %ld row %ld feature %ld is %.9g, "
                       "the one causal pass %.9g (bound %.3g)",
                       be == ATTNC_BACKEND_CC ? "cc" : "tcc", threads, cspec, step, Sn, (long long)lens[b], b, r, c, got,
                       want, 2 * (atol + rtol * fabs(want)));
          }
        }
    /* the caller advances cache_len; with lag the odd elements re-ran their first rows once */
    for (b = 0; b < B; b++) lens[b] += (step == 1 && dc->lag && b % 2) ? 0 : Sn;
  }
  printf("cache decode = one causal pass [%s, %d threads]: %s, %d runs, worst %.3g of the bound\n",
         be == ATTNC_BACKEND_CC ? "cc" : "tcc", threads, cspec, nsteps, worst);
  for (i = 0; i < sizeof DECODE_W / sizeof DECODE_W[0]; i++) free(w[i]);
  free(x); free(sinks); free(mask); free(one); free(xs); free(os);
  free(cache[0]); free(cache[1]); free(scale[0]); free(scale[1]);
  attnc_bindings_free(bc);
  attnc_bindings_free(bp);
  attnc_release(kc);
  attnc_release(kp);
}

static void test_kernels_cache_decode_equals_one_pass(void **s)
{
  static const decode_case cases[] = {
    { "gqa x=B,S,32 heads=4 kv_heads=2 rope=neox", "", 5, 3, 1 },
    { "mqa x=B,S,32 heads=4 rope=gptj alibi sinks softcap=20", " kv_dtype=bf16", 4, 3, 1 },
    { "mha x=B,S,16 heads=2 mask=key window=4,0", " kv_dtype=int8", 3, 4, 1 },
    { "gqa x=B,S,32 heads=4 kv_heads=2 rope=neox dtype=bf16", " kv_dtype=f16", 6, 2, 0 },
    { "mha x=B,S,16 heads=2 alibi dtype=f64", "", 1, 4, 1 },
    { "mha x=B,S,128 heads=2 rope=neox", "", 7, 2, 0 },
  };
  size_t i;
  int be, th;
  (void)s;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (be = 0; be < 2; be++)
      for (th = 1; th <= 2; th++) decode_case_run(&cases[i], be ? ATTNC_BACKEND_CC : ATTNC_BACKEND_TCC, th);
}

/* A sweep that fails mid-way (cmocka jumps out of it) leaves the form,
 * dtype and weights it set: put them back, so that the next test runs as
 * it says. */
static int reset_sweep(void **state)
{
  (void)state;
  form = ATTNC_FORM_FAST;
  dtype = NULL;
  weights = NULL;
  unsetenv("ATTNC_NO_PRIMS");
  return 0;
}

int main(int argc, char **argv)
{
#undef cmocka_unit_test
#define cmocka_unit_test(f) cmocka_unit_test_teardown(f, reset_sweep)
  const struct CMUnitTest decode_bf16[] = { cmocka_unit_test(test_kernels_decode_bf16_cc) };
  const ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (n > 0) g_self[n] = '\0';
  else snprintf(g_self, sizeof g_self, "%s", argv[0]);
  if (argc == 2 && strcmp(argv[1], "--decode-bf16") == 0) /* the re-run of test_kernels_decode_bf16_both_paths */
    return cmocka_run_group_tests_name("decode bf16 (re-run)", decode_bf16, NULL, NULL);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_kernels_heads_tcc),    cmocka_unit_test(test_kernels_heads_cc),
    cmocka_unit_test(test_kernels_axes_tcc),     cmocka_unit_test(test_kernels_axes_cc),
    cmocka_unit_test(test_kernels_masks_tcc),    cmocka_unit_test(test_kernels_masks_cc),
    cmocka_unit_test(test_kernels_features_tcc), cmocka_unit_test(test_kernels_features_cc),
    cmocka_unit_test(test_kernels_shared_bias_tcc), cmocka_unit_test(test_kernels_shared_bias_cc),
    cmocka_unit_test(test_kernels_head_major_tcc), cmocka_unit_test(test_kernels_head_major_cc),
    cmocka_unit_test(test_kernels_large_logits_tcc), cmocka_unit_test(test_kernels_large_logits_cc),
    cmocka_unit_test(test_kernels_no_prims_tcc), cmocka_unit_test(test_kernels_threads_identical),
    cmocka_unit_test(test_kernels_plain_form_tcc), cmocka_unit_test(test_kernels_plain_form_cc),
    cmocka_unit_test(test_kernels_fast_form_decides),
    cmocka_unit_test(test_kernels_layout_bshc_is_a_transpose),
    cmocka_unit_test(test_kernels_bf16_tcc), cmocka_unit_test(test_kernels_bf16_cc),
    cmocka_unit_test(test_kernels_f16_tcc), cmocka_unit_test(test_kernels_f16_cc),
    cmocka_unit_test(test_kernels_decode_16_reads_stored),
    cmocka_unit_test(test_kernels_decode_bf16_both_paths),
    cmocka_unit_test(test_kernels_16_no_prims_tcc),
    cmocka_unit_test(test_kernels_int8_tcc), cmocka_unit_test(test_kernels_int8_cc),
    cmocka_unit_test(test_kernels_modifiers_tcc), cmocka_unit_test(test_kernels_modifiers_cc),
    cmocka_unit_test(test_kernels_modifiers_plain),
    cmocka_unit_test(test_kernels_alibi_far_positions),
    cmocka_unit_test(test_kernels_underflowing_outputs),
    cmocka_unit_test(test_kernels_cache_tcc), cmocka_unit_test(test_kernels_cache_cc),
    cmocka_unit_test(test_kernels_cache_no_prims_tcc), cmocka_unit_test(test_kernels_cache_plain),
    cmocka_unit_test(test_kernels_cache_decode_equals_one_pass),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
