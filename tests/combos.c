/* combos: a random-combination differential checker.
 *
 * It writes random spec strings that combine the keys of docs/spec.md
 * (modes, presets, heads and kv heads, lengths, axes, masks, bias, gate,
 * global, cross-attention, dtypes, int8 weights, rope, alibi, softcap,
 * sinks, pe, caches, layouts, lse, weights_out, train and dropout) and runs
 * `attnc check` on each, with a random seed, backend, kernel form and
 * thread count, so every case compares the kernel with the float64
 * reference.  A fraction of the cases are made invalid on purpose (one
 * combination the spec language forbids): those must be refused with exit
 * status 2 and a message with a position, never run.
 *
 * usage: combos [-n N] [-s SEED] [-a ATTNC] [-c CC_EVERY] [-v]
 * Every failing case is printed as one command line that reproduces it;
 * the exit status is 1 when any case failed.
 *
 * The sizes stay small so a case runs in well under a second on tcc; the
 * cc backend compiles with the system compiler, so only every CC_EVERY-th
 * case (default 8) takes it.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static uint64_t rng_state;

static uint64_t next_u64(void)
{
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* uniform in 0..n-1 */
static int rnd(int n) { return (int)(next_u64() % (uint64_t)n); }
/* true with probability pct percent */
static int chance(int pct) { return rnd(100) < pct; }
static int pick(const int *v, int n) { return v[rnd(n)]; }

struct spec {
  char text[1024];
  size_t len;
  char dims[128]; /* --dim arguments */
};

static void add(struct spec *s, const char *fmt, ...)
{
  va_list ap;
  int n;
  if (s->len) s->text[s->len++] = ' ';
  va_start(ap, fmt);
  n = vsnprintf(s->text + s->len, sizeof s->text - s->len, fmt, ap);
  va_end(ap);
  if (n > 0) s->len += (size_t)n;
}

static void shape_str(char *out, size_t cap, const int *d, const char **names, int n)
{
  size_t len = 0;
  int i;
  out[0] = 0;
  for (i = 0; i < n; i++) {
    if (names && names[i])
      len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "", names[i]);
    else
      len += (size_t)snprintf(out + len, cap - len, "%s%d", i ? "," : "", d[i]);
  }
}

static const char *batch0_name, *cap_name; /* named dims the bias must spell */

static const char *DTYPES[] = { "f32", "f64", "bf16", "f16" };
static const int LENS[] = { 1, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 33, 65, 70 };
static const int SMALL_LENS[] = { 1, 2, 3, 5, 7, 8 };

struct choice {
  int train, grad, cache, global, full, self, rope_ok;
};

/* Everything that both modes share: masks, causal, window, score modifiers, outputs. */
static void add_common(struct spec *s, struct choice *c, const char *dtype, int heads, int head_dim, int sq,
                       int sk, int nbatch, const int *batch, int *empty_zero, const char *sq_name, const char *sk_name)
{
  /* bias: (*b, H, Sq, Sk) with any dim 1 */
  if (chance(25)) {
    int d[8], n = 0, nb = rnd(nbatch + 1), i;
    char sh[128];
    for (i = 0; i < nb; i++) d[n++] = chance(50) ? batch[i] : 1;
    int b0 = nb > 0 && d[0] != 1;
    d[n++] = chance(70) ? heads : 1;
    d[n++] = chance(75) ? (c->global ? 1 : sq) : 1;
    d[n++] = chance(80) ? sk : 1;
    {
      const char *nm[8] = { 0 };
      if (sq_name && d[n - 2] != 1) nm[n - 2] = sq_name;
      if (sk_name && d[n - 1] != 1) nm[n - 1] = sk_name;
      if (cap_name && d[n - 1] != 1) nm[n - 1] = cap_name;
      if (batch0_name && b0) nm[0] = batch0_name;
      shape_str(sh, sizeof sh, d, nm, n);
    }
    add(s, "bias=%s", sh);
  }
  if (chance(35)) add(s, "mask=key");
  if (!c->global) {
    if (c->cache) {
      int r = rnd(4);
      if (r == 1) add(s, "causal");
      else if (r == 2) add(s, "causal=bottom_right");
    } else if (chance(35)) {
      static const char *cz[] = { "causal", "causal=top_left", "causal=bottom_right", "causal=true" };
      add(s, "%s", cz[rnd(4)]);
    }
    if (chance(20)) add(s, "window=%d,%d", rnd(6), rnd(6));
  }
  if (chance(10)) add(s, "scale=%s", chance(50) ? "0.3" : "1.5");
  *empty_zero = 1;
  if (chance(25)) {
    static const char *er[] = { "zero", "uniform", "nan" };
    int e = rnd(3);
    add(s, "empty_rows=%s", er[e]);
    *empty_zero = e == 0;
  }
  if (c->rope_ok && head_dim >= 2 && chance(25)) {
    add(s, "rope=%s", chance(50) ? "neox" : "gptj");
    if (head_dim % 2 || chance(40)) {
      int r = 2 * (1 + rnd(head_dim / 2));
      add(s, "rope_dim=%d", r);
    }
    if (chance(30)) add(s, "rope_theta=%s", chance(50) ? "500000" : "100.5");
  }
  if (chance(15)) add(s, "softcap=%s", chance(50) ? "5" : "30.0");
  if (!c->global && chance(15)) {
    if (chance(50)) add(s, "alibi");
    else add(s, "alibi=%s", chance(50) ? "4" : "0.5");
  }
  if (*empty_zero && chance(15)) add(s, "sinks");
  if (chance(20)) add(s, "lse");
  if (chance(20)) add(s, "weights_out");
  (void)dtype;
}

/* A valid spec; fills c with what the case needs. */
static void make_valid(struct spec *s, struct choice *c)
{
  const char *dtype = DTYPES[rnd(4)];
  int empty_zero;
  memset(c, 0, sizeof *c);
  batch0_name = cap_name = NULL;
  s->len = 0;
  s->text[0] = 0;
  s->dims[0] = 0;
  if (chance(30)) { /* core mode */
    int rank = 3 + rnd(3), nb = rank - 3, batch[4], i;
    int G = pick((const int[]){ 1, 1, 2, 3 }, 4), H = G * pick((const int[]){ 1, 1, 2, 3, 4 }, 5);
    int c_ = pick((const int[]){ 1, 2, 3, 4, 8, 16, 33 }, 7);
    int sq = pick(LENS, 16), sk = chance(50) ? sq : pick(LENS, 16);
    int bshc = chance(30), qd[8], kd[8];
    const char *qn[8] = { 0 }, *kn[8] = { 0 };
    char qs[128], ks[128];
    c->rope_ok = 1;
    c->self = sk == sq;
    for (i = 0; i < nb; i++) batch[i] = pick((const int[]){ 1, 2, 3 }, 3);
    for (i = 0; i < nb; i++) qd[i] = kd[i] = batch[i];
    qd[nb + (bshc ? 1 : 0)] = H;
    kd[nb + (bshc ? 1 : 0)] = G;
    qd[nb + (bshc ? 0 : 1)] = sq;
    kd[nb + (bshc ? 0 : 1)] = sk;
    qd[nb + 2] = kd[nb + 2] = c_;
    if (chance(20)) { /* a named length */
      qn[nb + (bshc ? 0 : 1)] = "S";
      if (sk == sq) kn[nb + (bshc ? 0 : 1)] = "S";
      snprintf(s->dims, sizeof s->dims, "--dim S=%d", sq);
    }
    if (sk != sq && chance(20)) { /* a named key length */
      size_t l = strlen(s->dims);
      kn[nb + (bshc ? 0 : 1)] = "T";
      snprintf(s->dims + l, sizeof s->dims - l, "%s--dim T=%d", l ? " " : "", sk);
    }
    if (chance(30) && rank > 3) { /* a named batch dim */
      qn[0] = kn[0] = batch0_name = "B";
      size_t l = strlen(s->dims);
      snprintf(s->dims + l, sizeof s->dims - l, "%s--dim B=%d", l ? " " : "", batch[0]);
    }
    shape_str(qs, sizeof qs, qd, qn, rank);
    shape_str(ks, sizeof ks, kd, kn, rank);
    if (chance(50)) add(s, "%s", G == 1 && chance(50) ? "mqa" : "mha");
    add(s, "mode=core q=%s", qs);
    if (chance(80) || sk != sq || G != H) add(s, "kv=%s", ks);
    if (bshc) add(s, "layout=bshc");
    if (chance(20)) add(s, "heads=%d", H);
    add_common(s, c, dtype, H, c_, sq, sk, nb, batch, &empty_zero, qn[nb + (bshc ? 0 : 1)], kn[nb + (bshc ? 0 : 1)]);
    if (chance(20)) {
      c->train = 1;
      add(s, "train");
      if (chance(50)) add(s, "dropout=%s", chance(50) ? "0.25" : "0.5");
    }
    add(s, "dtype=%s", dtype);
    return;
  }
  /* full mode */
  {
    int rank = 2 + rnd(3), axis, i, xd[8], kd[8], batch[8], nb = 0;
    int H = pick((const int[]){ 1, 2, 3, 4, 6 }, 5), G, c_, cin, ckv;
    int sq = pick(LENS, 16), sk = sq, cache = 0;
    int global = chance(15), gated = chance(35), cross = !global && chance(25);
    int pe = chance(15), train = 0;
    const char *xn[8] = { 0 };
    const char *cross_name = NULL;
    char xs[128], ks[128];
    int preset = rnd(5); /* none, alphafold, mha, mqa, gqa */
    if (rank >= 3) sq = pick(SMALL_LENS, 6) * (chance(30) ? 3 : 1), sk = sq;
    if (global) preset = rnd(3);
    /* kv heads */
    {
      int divs[6], nd = 0, d;
      for (d = 1; d <= H; d++) if (H % d == 0) divs[nd++] = d;
      G = global ? 1 : (preset == 3 ? 1 : divs[rnd(nd)]);
      if (preset == 4 && G == H && H > 1) G = 1;
    }
    c_ = pick((const int[]){ 1, 2, 3, 4, 8, 16 }, 6);
    cin = pick((const int[]){ 2, 4, 6, 8, 12, 16, 24 }, 7);
    if (pe && cin % 2) cin++;
    ckv = cin;
    if (cross) {
      sk = pick(LENS, 16);
      if (rank >= 3) sk = pick(SMALL_LENS, 6);
      if (chance(50)) ckv = pick((const int[]){ 2, 4, 6, 10, 16 }, 5);
    }
    axis = rank >= 3 ? rnd(rank - 1) : 0; /* 0-based index of the attention axis */
    for (i = 0; i < rank - 1; i++) {
      if (i == axis) { xd[i] = sq; kd[i] = sk; }
      else { xd[i] = kd[i] = pick((const int[]){ 1, 2, 3 }, 3); batch[nb++] = xd[i]; }
    }
    xd[rank - 1] = cin;
    kd[rank - 1] = ckv;
    cache = !global && !cross && chance(20);
    c->rope_ok = !global;
    c->global = global;
    c->cache = cache;
    c->full = 1;
    c->self = !cross;
    if (!cross && chance(20)) {
      xn[axis] = "S";
      snprintf(s->dims, sizeof s->dims, "--dim S=%d", sq);
    }
    shape_str(xs, sizeof xs, xd, xn, rank);
    {
      const char *kn[8] = { 0 };
      if (cross && chance(25)) { /* a named key length */
        size_t l = strlen(s->dims);
        kn[axis] = cross_name = "T";
        snprintf(s->dims + l, sizeof s->dims - l, "%s--dim T=%d", l ? " " : "", sk);
      }
      shape_str(ks, sizeof ks, kd, kn, rank);
    }
    if (preset == 1) add(s, "alphafold");
    else if (preset == 2) add(s, "mha");
    else if (preset == 3) add(s, "mqa");
    else if (preset == 4) add(s, "gqa");
    if (chance(20)) add(s, "mode=full");
    add(s, "x=%s", xs);
    if (cross) add(s, "kv=%s", ks);
    if (axis != rank - 2 || chance(20))
      add(s, "attn_dim=%d", chance(50) ? axis : axis - rank);
    add(s, "heads=%d", H);
    if (!global && (preset == 4 || (preset != 3 && (G != H || chance(30))))) add(s, "kv_heads=%d", G);
    if (cin % H != 0 || chance(70)) add(s, "head_dim=%d", c_);
    else c_ = cin / H;
    if (chance(20)) add(s, "qkv_bias=%s", chance(50) ? "true" : "false");
    if (chance(20)) add(s, "out_bias=%s", chance(50) ? "true" : "false");
    if (gated) add(s, "gated");
    if (global) {
      add(s, "global");
      if (chance(40)) {
        /* masked needs mask=key, which add_common may not add: add it here */
        if (!cross && chance(50)) add(s, "global_mean=masked mask=key");
        else add(s, "global_mean=plain");
      }
    }
    if (pe) add(s, "pe=sinusoidal");
    if (cache) {
      int cap = sq + rnd(20);
      if (chance(25)) {
        add(s, "cache=CAP");
        cap_name = "CAP";
        size_t l = strlen(s->dims);
        snprintf(s->dims + l, sizeof s->dims - l, "%s--dim CAP=%d", l ? " " : "", cap);
      } else {
        add(s, "cache=%d", cap);
      }
      sk = cap;
    }
    {
      /* the bias and mask use the keys: Sk, the cache's CAP with a cache */
      struct spec t = *s;
      int has_mask = strstr(s->text, "mask=key") != NULL;
      add_common(&t, c, dtype, H, c_, global ? 1 : sq, sk, nb, batch, &empty_zero, global ? NULL : xn[axis], cache ? NULL : (cross ? cross_name : xn[axis]));
      if (has_mask) { /* do not write mask=key twice */
        char *m = strstr(t.text + s->len, " mask=key");
        if (m) memmove(m, m + 9, strlen(m + 9) + 1), t.len -= 9;
      }
      *s = t;
    }
    if (!cache && chance(25)) {
      train = 1;
      add(s, "train");
      if (chance(50)) add(s, "dropout=%s", chance(50) ? "0.2" : "0.5");
    }
    c->train = train;
    add(s, "dtype=%s", dtype);
    if (!train && chance(20)) add(s, "weights=int8");
    else if (chance(10)) /* any dtype: held in the arithmetic's precision (a 16-bit one trains its own only) */
      add(s, "weights=%s", train && (!strcmp(dtype, "bf16") || !strcmp(dtype, "f16")) ? dtype : DTYPES[rnd(4)]);
    if (cache && chance(50)) {
      static const char *kvd[] = { "f32", "f64", "bf16", "f16", "int8" };
      add(s, "kv_dtype=%s", kvd[rnd(5)]);
    }
  }
}


/* The defaults spelled out, and a name: written or not, a spec means the same. */
static void add_spellings(struct spec *s, const struct choice *c)
{
  static const char *const keys[] = { "mask", "window", "rope", "pe", "causal", "name" };
  static const char *const vals[] = { "none", "none", "none", "none", "none", "k_combo" };
  char word[32];
  int k;
  if (!chance(20)) return;
  k = rnd(6);
  snprintf(word, sizeof word, " %s=", keys[k]);
  if (strstr(s->text, word + 1) != NULL) return; /* already given */
  if (k == 4 && (c->cache || strstr(s->text, "causal") != NULL)) return; /* a cache is causal */
  add(s, "%s=%s", keys[k], vals[k]);
}
/* One invalid change to a valid spec: a combination the language forbids. */
static const char *make_invalid(struct spec *s)
{
  static const char *bad[] = {
    "mha x=2,5,8 heads=2 global rope=neox",
    "mha x=2,5,8 kv=2,3,8 heads=2 cache=9",
    "alphafold x=2,5,8 heads=2 global cache=9",
    "mode=core q=1,2,5,4 pe=sinusoidal",
    "mha x=2,5,8 heads=2 train weights=int8",
    "mha x=2,5,8 heads=2 dropout=0.1",
    "mha x=2,5,8 heads=2 sinks empty_rows=uniform",
    "mha x=2,5,8 heads=2 kv_dtype=int8",
    "mha x=2,5,8 heads=2 cache=9 causal=top_left",
    "mha x=2,5,8 heads=2 cache=9 causal=none",
    "mha x=2,5,8 heads=2 train cache=8",
    "mha x=2,5,8 heads=2 train dtype=bf16 weights=f32",
    "mha x=2,5,8 heads=2 rope=neox rope_dim=3",
    "mha x=2,5,8 heads=2 rope=gptj rope_dim=10",
    "mha x=2,5,8 heads=4 kv_heads=3",
    "mha x=2,5,8 heads=2 attn_dim=-1",
    "alphafold x=2,5,8 heads=2 global alibi",
    "mha x=2,5,7 heads=1 pe=sinusoidal",
    "mha x=2,5,8 heads=2 rope_theta=100",
    "mha x=2,5,8 heads=2 train dropout=1",
    "mha x=2,5,8 heads=2 softcap=0",
    "mha x=2,5,8 heads=2 alibi=-1",
    "mode=core q=1,2,5,4 layout=bshc kv=1,2,5,3",
    "mha x=2,5,8 heads=2 layout=bshc",
    "mode=core q=1,2,5,4 gated",
    "mqa x=2,5,8 heads=2 kv_heads=2",
    "mha x=2,5,8 heads=2 bias=2,3,5,5",
    "mha x=2,5,8 heads=2 rope=gptj global",
    "alphafold x=2,5,8 heads=2 global_mean=masked",
    "alphafold x=2,5,8 heads=2 global causal",
    "mha x=2,5,8 heads=2 window=1",
    "mha x=2,5,8 heads=2 cache=9 train",
    "mha x=2,5,8 heads=2 weights=int4",
    "mha x=2,5,8 heads=2 rope=yarn",
  };
  int i = rnd((int)(sizeof bad / sizeof bad[0]));
  s->len = 0;
  s->dims[0] = 0;
  add(s, "%s", bad[i]);
  return bad[i];
}

static char attnc_path[512] = "build/attnc";

/* Single quotes around a spec for the shell: specs hold no quotes. */
static int run_case(const char *spec, const char *args, char *out, size_t cap, int *status)
{
  char cmd[2048];
  FILE *p;
  size_t n = 0;
  snprintf(cmd, sizeof cmd, "timeout 300 %s check '%s' %s 2>&1", attnc_path, spec, args);
  p = popen(cmd, "r");
  if (!p) return -1;
  out[0] = 0;
  while (n + 1 < cap) {
    size_t r = fread(out + n, 1, cap - 1 - n, p);
    if (r == 0) break;
    n += r;
  }
  out[n] = 0;
  {
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {}
  }
  *status = pclose(p);
  return 0;
}

/* "spec:LINE:COL: error:" somewhere in the output */
static int has_position(const char *out)
{
  const char *p = out;
  while ((p = strstr(p, "spec:")) != NULL) {
    int line, col, n = 0;
    if (sscanf(p, "spec:%d:%d: error:%n", &line, &col, &n) == 2 && n > 0) return 1;
    p += 5;
  }
  return 0;
}

int main(int argc, char **argv)
{
  long n = 100, i, failed = 0, invalid = 0, gradn = 0, ccn = 0;
  uint64_t seed = 1;
  int cc_every = 8, verbose = 0, a;
  static char out[1 << 16];
  for (a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-n") && a + 1 < argc) n = atol(argv[++a]);
    else if (!strcmp(argv[a], "-s") && a + 1 < argc) seed = strtoull(argv[++a], NULL, 10);
    else if (!strcmp(argv[a], "-a") && a + 1 < argc) snprintf(attnc_path, sizeof attnc_path, "%s", argv[++a]);
    else if (!strcmp(argv[a], "-c") && a + 1 < argc) cc_every = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-v")) verbose = 1;
    else {
      fprintf(stderr, "usage: combos [-n N] [-s SEED] [-a ATTNC] [-c CC_EVERY] [-v]\n");
      return 2;
    }
  }
  for (i = 0; i < n; i++) {
    struct spec s;
    struct choice c;
    char args[256];
    int status, code, bad = 0;
    const char *why = "";
    rng_state = seed;
    rng_state = next_u64() ^ (uint64_t)i;
    rng_state = next_u64();
    if (chance(8)) {
      make_invalid(&s);
      invalid++;
      snprintf(args, sizeof args, "--seed %d", rnd(100));
      if (run_case(s.text, args, out, sizeof out, &status) != 0) return 2;
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 2) bad = 1, why = "an invalid spec was not refused with status 2";
      else if (!has_position(out)) bad = 1, why = "the refusal has no spec:LINE:COL position";
    } else {
      int cc = cc_every > 0 && rnd(cc_every) == 0;
      make_valid(&s, &c);
      add_spellings(&s, &c);
      snprintf(args, sizeof args, "--seed %d --backend %s%s%s%s%s%s", rnd(1000), cc ? "cc" : "tcc",
               chance(35) ? " --plain" : "", chance(30) ? " --threads 2" : (chance(30) ? " --threads 1" : ""),
               c.train && chance(40) ? " --grad" : "", s.dims[0] ? " " : "", s.dims);
      gradn += strstr(args, "--grad") != NULL;
      ccn += cc;
      if (run_case(s.text, args, out, sizeof out, &status) != 0) return 2;
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code == 1) bad = 1, why = "mismatch";
      else if (code == 2) bad = 1, why = "a valid spec was refused";
      else if (code == 124) bad = 1, why = "timed out";
      else if (code != 0) bad = 1, why = "crashed";
    }
    if (bad) {
      const char *last = out, *p;
      failed++;
      /* the last non-empty line says what went wrong */
      for (p = out; *p; p++)
        if (*p == '\n' && p[1]) last = p + 1;
      printf("FAIL (%s, status %d): %s check '%s' %s\n", why, code, attnc_path, s.text, args);
      printf("  %.*s\n", (int)strcspn(last, "\n"), last);
      fflush(stdout);
    } else if (verbose) {
      printf("ok: '%s' %s\n", s.text, args);
      fflush(stdout);
    }
  }
  printf("combos: %ld cases (%ld invalid, %ld with --grad, %ld on cc), %ld failed\n", n, invalid, gradn, ccn, failed);
  return failed ? 1 : 0;
}
