/* attnc: the command line.  Prints errors like a compiler:
 *   spec:LINE:COL: error: ...   for spec errors
 *   attnc: error: ...           for everything else */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attnc.h"
#include "internal.h"
#include "checker.h"
#include "heatmap.h"

#define MAX_FILES 32
#define MAX_DIMS 32

static const char *USAGE =
  "usage: attnc COMMAND SPEC [options]\n"
  "       attnc --help | --version\n"
  "\n"
  "SPEC is a spec string (quote it) or @FILE, a spec file where # starts a comment;\n"
  "the language is in docs/spec.md.  For example:\n"
  "  attnc check \"mha x=B,S,512 heads=8 causal\" --dim B=2 --dim S=33\n"
  "\n"
  "commands:\n"
  "  run      load weights and inputs from safetensors, run the kernel, write out\n"
  "  grad     forward and backward (train): out and the gradient of every tensor\n"
  "  check    random weights and inputs vs the float64 reference\n"
  "  gen      write NAME.c and NAME.h for an ahead-of-time build\n"
  "  show     print the generated C (or its header, or a diff between two specs)\n"
  "  explain  canonical spec, tensors, bytes, FLOPs, scratch, arithmetic intensity\n"
  "  bench    time the kernel (--grad: forward plus backward)\n"
  "  quantize int8 projection weights with per-row scales (no SPEC)\n"
  "  cache    list or clean the cc backend's kernel cache: attnc cache list|clean\n"
  "\n"
  "`attnc COMMAND --help` describes each.\n"
  "\n"
  "environment:\n"
  "  ATTNC_BACKEND=cc        compile with the system C compiler instead of libtcc\n"
  "  ATTNC_CC, ATTNC_CC_FLAGS  that compiler (default cc) and extra flags\n"
  "  ATTNC_CACHE_DIR         cache of cc-built kernels (default ~/.cache/attnc)\n"
  "  ATTNC_THREADS           threads per run (default: all CPUs)\n"
  "  ATTNC_DUMP_DIR          write the C of every compiled kernel to this folder\n"
  "  ATTNC_SRC_DIR           read gen/ and templates/ from this source tree\n"
  "\n"
  "exit status: 0 success; 1 the command failed (spec, file or kernel error; check: a\n"
  "mismatch); 2 bad usage (check: also when it cannot run).\n";

struct cli {
  const char *cmd;
  char *spec;
  char spec_name[512];
  const char *files[MAX_FILES];
  int nfiles;
  const char *out, *prefix, *outdir, *diff, *save_attn, *heatmap, *name;
  const char *dim_names[MAX_DIMS];
  int64_t dim_values[MAX_DIMS];
  int ndims;
  unsigned long seed;           /* check: the data seed */
  unsigned long long dropout_seed; /* run, grad: the dropout seed of a train spec (seed_given) */
  int seed_given, grad;
  const char *dout;             /* grad: the file holding the tensor dout */
  int print_name, header, json, threads, runs, plain, allow_unused, quiet;
  long warmup_ms; /* bench: warm up this long (-1: the default) */
  long cache_len;  /* bench: positions already filled (-1: not given) */
  long batch;      /* run --heatmap: the batch element drawn; -1 when --batch is not given (element 0) */
  attnc_backend backend;
};

/* Edit distance (insertions, deletions, substitutions, swaps of two
 * neighbours), for "did you mean". */
static int edit_distance(const char *a, const char *b)
{
  int la = (int)strlen(a), lb = (int)strlen(b), i, j, d[34][34];
  if (la > 32 || lb > 32) return 99;
  for (i = 0; i <= la; i++) d[i][0] = i;
  for (j = 0; j <= lb; j++) d[0][j] = j;
  for (i = 1; i <= la; i++)
    for (j = 1; j <= lb; j++) {
      int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v) v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[la][lb];
}

static void print_error(const attnc_error *e)
{
  const char *api = strstr(e->message, "(from attnc_bind_dim)");
  if (api && !e->where[0]) { /* the C API's words for what the CLI calls --dim */
    fprintf(stderr, "attnc: error: %.*s(from --dim)%s\n", (int)(api - e->message), e->message, api + 21);
    return;
  }
  if (e->where[0]) fprintf(stderr, "%s: error: %s\n", e->where, e->message);
  else fprintf(stderr, "attnc: error: %s\n", e->message);
}

static attnc_form form_of(const struct cli *c) { return c->plain ? ATTNC_FORM_PLAIN : ATTNC_FORM_FAST; }

static int fail(const char *fmt, const char *arg)
{
  fprintf(stderr, "attnc: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  return 2;
}

static const char *help_for(const char *cmd)
{
  if (strcmp(cmd, "cache") == 0)
    return "usage: attnc cache list | attnc cache clean\n"
           "The cc backend keeps compiled kernels in ATTNC_CACHE_DIR (default ~/.cache/attnc).\n"
           "  list    every cached kernel (NAME-KEY.so) with its size and date, and the total\n"
           "  clean   delete the kernels and spec index entries attnc wrote there (NAME-KEY.so,\n"
           "          spec-KEY.idx); any other file in the folder is left alone\n";
  if (strcmp(cmd, "run") == 0)
    return "usage: attnc run SPEC --tensors FILE... --out FILE [--prefix P] [--dim NAME=N]...\n"
           "                [--backend tcc|cc] [--threads N] [--plain] [--seed N] [--save-attn FILE]\n"
           "                [--heatmap FILE.svg [--batch N]]\n"
           "Binds weights and inputs by name from safetensors files (linear_q.weight, q_proj.weight,\n"
           "in_proj_weight, ...; inputs x, kv, bias, mask, q, k, v), infers named dims from the\n"
           "inputs' shapes, runs the kernel and writes the tensor `out` (and `lse`, `attn` when the\n"
           "spec asks for them).\n"
           "A cache spec (cache=CAP) also reads k_cache, v_cache (batch axes..., G, CAP, c) in\n"
           "kv_dtype (a file in another float dtype is converted to it), with kv_dtype=int8 as I8\n"
           "with their F32 scales k_cache_scale, v_cache_scale (batch axes..., G, CAP), and\n"
           "cache_len (I32/I64, a scalar or one per batch element).\n"
           "The files are not changed: the caches are copied, updated, and written to --out\n"
           "beside `out` under their plain names (any --prefix dropped), with cache_len + Sn,\n"
           "so --out is the cache file of the next step:\n"
           "  attnc run SPEC --tensors w.st --tensors tok1.st --tensors cache.st --out cache.st\n"
           "  --tensors FILE      a safetensors file of weights and/or inputs; repeat for more files\n"
           "  --out FILE          the safetensors file to write `out` to (replaced atomically)\n"
           "  --prefix P          take weights named P + name (one layer of a checkpoint, e.g.\n"
           "                      model.layers.0.self_attn.); inputs match with or without P\n"
           "  --dim NAME=N        set a named dim instead of inferring it from the inputs\n"
           "  --backend tcc|cc    libtcc in memory, or the system C compiler (cached); default\n"
           "                      ATTNC_BACKEND, else tcc\n"
           "  --threads N         threads for the run (default ATTNC_THREADS, else all CPUs)\n"
           "  --plain             run the plain form (one thread, one function per step)\n"
           "  --seed N            the dropout seed (0 .. 2^64-1, default 0) of a spec with\n"
           "                      train dropout=P: the same seed drops the same probabilities\n"
           "                      on every backend, form and thread count (other specs ignore it)\n"
           "  --quiet             print nothing on success (else one line on stderr: kernel,\n"
           "                      dims, outputs, milliseconds)\n"
           "  --allow-unused      no warning for inputs the spec does not read (kv, mask,\n"
           "                      bias, ...): like every tensor the spec does not use they\n"
           "                      are ignored, and without it each gets a warning, since\n"
           "                      the result may differ from the model's\n"
           "  --save-attn FILE    write the attention weights (batch axes..., H, Sq, Sk) as the\n"
           "                      tensor `attn` (the kernel's own: weights_out)\n"
           "  --heatmap FILE.svg  draw them, one panel per head of one batch element, as a\n"
           "                      standalone SVG; cells whose key the spec hides (mask, causal,\n"
           "                      window) are hatched, apart from every weight, 0 included\n"
           "  --batch N           the batch element --heatmap draws (default 0): row-major over\n"
           "                      the weights' batch axes, 0 to their product - 1\n";
  if (strcmp(cmd, "check") == 0)
    return "usage: attnc check SPEC [--dim NAME=N]... [--seed N] [--backend tcc|cc] [--threads N] [--plain] [--grad]\n"
           "Compiles the kernel, runs it on random weights and inputs and compares the output with\n"
           "the float64 reference; prints the canonical spec and the max error against the tolerance.\n"
           "  --dim NAME=N        size of a named dim (unset ones are 7)\n"
           "  --seed N            the seed of the random data (default 0): the same seed gives\n"
           "                      the same data; a train spec's dropout takes the same seed\n"
           "  --grad              also the gradients (train is implied): every gradient of\n"
           "                      sum(out * dout) against central finite differences of the reference\n"
           "  --backend tcc|cc    the backend to check (default ATTNC_BACKEND, else tcc)\n"
           "  --threads N         threads for the run\n"
           "  --plain             check the plain form instead of the fast one\n"
           "Exit status 0 within tolerance, 1 on a mismatch, 2 when it cannot run (e.g. a spec error).\n";
  if (strcmp(cmd, "gen") == 0)
    return "usage: attnc gen SPEC -o DIR [--print-name] [--plain]\n"
           "Writes DIR/NAME.c and DIR/NAME.h (NAME is the spec's name=, else attnc_ and a hash),\n"
           "which compile with any C99 compiler and need only libm: no attnc library, Lua or tcc.\n"
           "The header lists every tensor with its shape.  Existing files are replaced.\n"
           "  -o DIR              output folder, created if missing (its parent must exist)\n"
           "  --print-name        print only NAME (for build rules) instead of \"wrote ...\"\n"
           "  --name NAME         the kernel's name when the spec has no name= (build rules pass\n"
           "                      the spec file's name); a spec whose name= differs is an error,\n"
           "                      and nothing is written\n"
           "  --plain             write the plain form: one function per step, one thread\n"
           "docs/aot.md has Makefile and CMake rules; docs/api.md the calling convention.\n";
  if (strcmp(cmd, "show") == 0)
    return "usage: attnc show SPEC [--plain] [--grad] [--header] [--diff SPEC2]\n"
           "Prints the generated C that runs: a banner with the canonical spec, every buffer with\n"
           "its shape, and each step named after the math, in phases, tiles and primitives.\n"
           "  --plain             print the plain form instead: the algorithm of exactly this\n"
           "                      spec, one function per step, one thread (it computes the same)\n"
           "  --grad              the kernel with its backward pass: train is added to SPEC\n"
           "                      (and SPEC2) when absent, and NAME_backward is in the source\n"
           "  --header            print the header (NAME.h) instead\n"
           "  --diff SPEC2        print what changes in the generated code from SPEC to SPEC2 (e.g.\n"
           "                      mha -> gqa, ungated -> gated) as a unified diff; SPEC2 may be @FILE\n";
  if (strcmp(cmd, "grad") == 0)
    return "usage: attnc grad SPEC --tensors FILE... --dout FILE --out FILE [--prefix P] [--seed N]\n"
           "                 [--dim NAME=N]... [--backend tcc|cc] [--threads N] [--plain]\n"
           "Forward and backward of SPEC (train is implied: added to the spec when absent).\n"
           "Binds weights and inputs as run does, reads the gradient of `out` as the tensor\n"
           "`dout` (out's shape, any float dtype), and writes to --out the tensor `out` (and\n"
           "`lse`, `attn` when the spec asks for them) and, for every differentiable tensor it\n"
           "bound (x, kv, q, k, v, bias, sinks, each weight and projection bias; not the mask,\n"
           "positions or rope_freqs), `grad.NAME`, NAME exactly as read (prefix included):\n"
           "the tensor's shape (in_proj_weight whole), in the kernel's dtype (F32; F64, BF16 or\n"
           "F16 with dtype=f64, bf16 or f16), whatever dtype the tensor had.\n"
           "  --tensors FILE      a safetensors file of weights and/or inputs; repeat for more files\n"
           "  --dout FILE         a safetensors file holding the tensor `dout`\n"
           "  --out FILE          the safetensors file to write (replaced atomically)\n"
           "  --prefix P          take weights named P + name, as run does\n"
           "  --seed N            the dropout seed (0 .. 2^64-1, default 0) of a spec with\n"
           "                      dropout=P: use the seed of the forward the gradient is for\n"
           "  --dim NAME=N        set a named dim instead of inferring it from the inputs\n"
           "  --backend tcc|cc    default ATTNC_BACKEND, else tcc\n"
           "  --threads N         threads (default ATTNC_THREADS, else all CPUs); the gradients\n"
           "                      are the same bits for any count\n"
           "  --plain             the plain form\n"
           "  --quiet             print nothing on success\n"
           "  --allow-unused      no warning for inputs the spec does not read, as run\n";
  if (strcmp(cmd, "quantize") == 0)
    return "usage: attnc quantize --tensors FILE... --out FILE [--prefix P]\n"
           "Writes every projection weight it recognises (a 2-D float tensor whose name ends with\n"
           "linear_q.weight, q_proj.weight, in_proj_weight, out_proj.weight, linear_g.weight, ...,\n"
           "the whole name or after a '.') as I8 with an F32 NAME_scale per output row:\n"
           "scale = max|row| / 127 (1 for a row of zeros), q = round-half-to-even(w / scale).\n"
           "Every other tensor, biases included, is copied unchanged.\n"
           "  --tensors FILE      a safetensors file; repeat for more files (names must not repeat)\n"
           "  --out FILE          the safetensors file to write (replaced atomically)\n"
           "  --prefix P          quantise only weights whose names start with P (one layer);\n"
           "                      the others are copied unchanged\n";
  if (strcmp(cmd, "explain") == 0)
    return "usage: attnc explain SPEC [--dim NAME=N]...\n"
           "Prints the canonical spec, every tensor with its shape and bytes, FLOPs per step and in\n"
           "total (2 per multiply-add), scratch memory and arithmetic intensity.\n"
           "  --dim NAME=N        size of a named dim; bytes and FLOPs need every named dim\n";
  if (strcmp(cmd, "bench") == 0)
    return "usage: attnc bench SPEC [--dim NAME=N]... [--backend tcc|cc] [--threads N] [--runs N] [--plain]\n"
           "                  [--warmup-ms MS] [--cache-len N] [--grad] [--json]\n"
           "Times the kernel on random data: median and minimum of the timed runs after the warm-up\n"
           "runs, GFLOP/s (the FLOPs of explain; with causal or window masks also over the\n"
           "unmasked pairs alone), compile time and scratch bytes.\n"
           "  --dim NAME=N        size of a named dim (unset ones are 128)\n"
           "  --backend tcc|cc    default ATTNC_BACKEND, else tcc\n"
           "  --threads N         threads (default ATTNC_THREADS, else all CPUs)\n"
           "  --runs N            timed runs (default 10)\n"
           "  --plain             time the plain form (one thread, one function per step)\n"
           "  --warmup-ms MS      warm-up runs until MS milliseconds have passed, at least one\n"
           "                      (default 100: a new process's threads can take tens of\n"
           "                      milliseconds to reach their own cores)\n"
           "  --cache-len N       cache specs (cache=CAP): N positions already filled (default 0),\n"
           "                      random cache contents, every run starting from the same N;\n"
           "                      N + Sq must fit in CAP.  Unset, a named length of x is 1 (one\n"
           "                      decoding step) and a named CAP is N + Sq, at least 128.  The\n"
           "                      unmasked GFLOP/s count the pairs a run attends: N + i + 1 keys\n"
           "                      for query i\n"
           "  --grad              time forward plus backward (train is added to SPEC when\n"
           "                      absent): the median is of one attnc_grad, the pair, which\n"
           "                      runs the forward again; forward_ms is the median of attnc_run\n"
           "                      on the same train kernel, backward_ms the pair's median minus\n"
           "                      it; both run on --threads threads.  gflops: explain's\n"
           "                      backward FLOPs (the forward recomputed included) over\n"
           "                      median_ms; forward_gflops: the forward's over forward_ms.\n"
           "                      grad_bytes: the gradient buffers the bindings hold (one per\n"
           "                      grad slot, the in_proj_* stacks, a converted dout);\n"
           "                      grad_scratch_bytes: what the backward keeps besides them for\n"
           "                      its whole length (NAME_backward_bytes: O(S); the fast form's\n"
           "                      gradient products also take short-lived copies of one\n"
           "                      projection's operands)\n"
           "  --json              print one JSON object instead of text (a cache spec adds\n"
           "                      cache_len and cap; --grad adds forward_ms, backward_ms,\n"
           "                      forward_gflops, grad_bytes and grad_scratch_bytes)\n";
  return NULL;
}

static char *read_file(const char *path)
{
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return NULL; }
  buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
  fclose(f);
  if (buf) buf[n] = '\0';
  if (buf && strlen(buf) != (size_t)n) {
    /* a NUL would silently cut the spec short */
    fprintf(stderr, "attnc: error: %s: the spec file contains a NUL byte at offset %zu\n", path, strlen(buf));
    free(buf);
    errno = EINVAL;
    return NULL;
  }
  return buf;
}

/* A whole decimal number in [lo, hi], or -1 with a message. */
static int parse_count(const char *opt, const char *v, long lo, long hi, long *out)
{
  char *end;
  long n;
  errno = 0;
  n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < lo || n > hi) {
    fprintf(stderr, "attnc: error: %s needs a whole number from %ld to %ld, got '%s'\n", opt, lo, hi, v);
    return -1;
  }
  *out = n;
  return 0;
}

static int set_spec(struct cli *c, const char *arg)
{
  if (c->spec) {
    fprintf(stderr, "attnc: error: unexpected argument '%s' (the spec is already given; quote a spec with spaces)\n", arg);
    return 2;
  }
  if (arg[0] == '@') {
    struct stat st;
    if (stat(arg + 1, &st) == 0 && S_ISDIR(st.st_mode)) errno = EISDIR;
    else c->spec = read_file(arg + 1);
    if (!c->spec) {
      fprintf(stderr, "attnc: error: cannot read spec file %s: %s\n", arg + 1, strerror(errno));
      return 1; /* a file error, as a missing --tensors file is (exit 1, not usage) */
    }
    snprintf(c->spec_name, sizeof c->spec_name, "%s", arg + 1);
  } else {
    c->spec = strdup(arg);
    snprintf(c->spec_name, sizeof c->spec_name, "spec");
  }
  return 0;
}

static int parse_args(struct cli *c, int argc, char **argv)
{
  int i, rc;
  long n;
  for (i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
    if (a[0] != '-' || a[1] == '\0') {
      if ((rc = set_spec(c, a)) != 0) return rc;
      continue;
    }
    if (strcmp(a, "--tensors") == 0 && v) {
      if (c->nfiles == MAX_FILES) return fail("too many --tensors files (limit 32)%s", "");
      c->files[c->nfiles++] = v; i++;
    } else if (strcmp(a, "--out") == 0 && v) { c->out = v; i++; }
    else if (strcmp(a, "--prefix") == 0 && v) { c->prefix = v; i++; }
    else if (strcmp(a, "--diff") == 0 && v) { c->diff = v; i++; }
    else if (strcmp(a, "--save-attn") == 0 && v) { c->save_attn = v; i++; }
    else if (strcmp(a, "--heatmap") == 0 && v) { c->heatmap = v; i++; }
    else if (strcmp(a, "--batch") == 0 && v) {
      if (parse_count(a, v, 0, 2147483647L, &n) != 0) return 2;
      c->batch = n; i++;
    }
    else if (strcmp(a, "-o") == 0 && v) { c->outdir = v; i++; }
    else if (strcmp(a, "--seed") == 0 && v && strcmp(c->cmd, "check") == 0) { /* the data seed */
      if (parse_count(a, v, 0, 2147483647L, &n) != 0) return 2;
      c->seed = (unsigned long)n; i++;
    } else if (strcmp(a, "--seed") == 0 && v) { /* the dropout seed: 64 bits */
      char *end;
      errno = 0;
      c->dropout_seed = strtoull(v, &end, 10);
      if (errno || end == v || *end || v[0] == '-' || v[0] == '+' || isspace((unsigned char)v[0])) {
        fprintf(stderr, "attnc: error: --seed needs a whole number from 0 to 18446744073709551615, got '%s'\n", v);
        return 2;
      }
      c->seed_given = 1; i++;
    } else if (strcmp(a, "--dout") == 0 && v) { c->dout = v; i++; } else if (strcmp(a, "--runs") == 0 && v) {
      if (parse_count(a, v, 1, 1000000L, &n) != 0) return 2;
      c->runs = (int)n; i++;
    } else if (strcmp(a, "--warmup-ms") == 0 && v) {
      if (parse_count(a, v, 0, 600000L, &n) != 0) return 2;
      c->warmup_ms = n; i++;
    } else if (strcmp(a, "--cache-len") == 0 && v) {
      if (parse_count(a, v, 0, 2147483647L, &n) != 0) return 2;
      c->cache_len = n; i++;
    } else if (strcmp(a, "--threads") == 0 && v) {
      if (parse_count(a, v, 1, 1024, &n) != 0) return 2;
      c->threads = (int)n; i++;
    } else if (strcmp(a, "--backend") == 0 && v) {
      if (strcmp(v, "tcc") == 0) c->backend = ATTNC_BACKEND_TCC;
      else if (strcmp(v, "cc") == 0) c->backend = ATTNC_BACKEND_CC;
      else return fail("unknown backend '%s' (use tcc or cc)", v);
      i++;
    } else if (strcmp(a, "--dim") == 0 && v) {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) return fail("--dim needs NAME=N, got '%s'", v);
      if (c->ndims == MAX_DIMS) return fail("too many --dim options%s", "");
      if (parse_count("--dim", eq + 1, 1, 2147483647L, &n) != 0) return 2;
      c->dim_names[c->ndims] = strndup(v, (size_t)(eq - v));
      c->dim_values[c->ndims++] = n;
      i++;
    } else if (strcmp(a, "--print-name") == 0) c->print_name = 1;
    else if (strcmp(a, "--header") == 0) c->header = 1;
    else if (strcmp(a, "--json") == 0) c->json = 1;
    else if (strcmp(a, "--grad") == 0) c->grad = 1;
    else if (strcmp(a, "--plain") == 0) c->plain = 1;
    else if (strcmp(a, "--allow-unused") == 0) c->allow_unused = 1;
    else if (strcmp(a, "--name") == 0 && v) { c->name = v; i++; }
    else if (strcmp(a, "--quiet") == 0) c->quiet = 1;
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(help_for(c->cmd), stdout); return -1; }
    else {
      fprintf(stderr, "attnc: error: unknown or incomplete option '%s' for '%s'\n%s", a, c->cmd, help_for(c->cmd));
      return 2;
    }
  }
  return 0;
}

static int compile_spec(struct cli *c, attnc_kernel **k)
{
  attnc_options o = { c->backend, c->threads, c->spec_name, form_of(c) };
  attnc_error e;
  *k = attnc_compile(c->spec, &o, &e);
  if (!*k) { print_error(&e); return 1; }
  return 0;
}

/* grad, bench --grad, show --grad: train is implied.  When the spec's
 * canonical form lacks it, *spec becomes the spec with a last line
 * "train" (a line of its own, so that a trailing # comment cannot swallow
 * it; positions in the rest stay as written).  0, 1 for a spec error
 * (printed), or 2 when train cannot be added (printed, said so). */
static int imply_train(char **spec, const char *spec_name)
{
  attnc_options o = { ATTNC_BACKEND_DEFAULT, 0, spec_name, ATTNC_FORM_FAST };
  attnc_error e, e2;
  char canon[8192], *with;
  /* the spec as written may need train to parse (dropout=P without train) */
  const int as_written = attnc_spec_canonical(*spec, &o, canon, sizeof canon, &e) == ATTNC_OK;
  if (as_written && strstr(canon, " train=true")) return 0;
  if (!(with = malloc(strlen(*spec) + 8))) { fprintf(stderr, "attnc: error: out of memory\n"); return 1; }
  sprintf(with, "%s\ntrain", *spec);
  if (attnc_spec_canonical(with, &o, canon, sizeof canon, &e2) != ATTNC_OK) {
    if (!as_written) print_error(&e2); /* the spec's own error, at its own position (train goes on a line after it) */
    else /* the error is about the train this command added, not the text written */
      fprintf(stderr, "attnc: error: %s: the gradients need the key train, which this command adds, and it does "
                      "not fit this spec: %s\n", spec_name, e2.message);
    free(with);
    return 1;
  }
  free(*spec);
  *spec = with;
  return 0;
}

/* ---- show, gen, explain ---- */

/* Split text into lines (in place); returns the count.  Out of memory,
 * *lines is NULL. */
static size_t split_lines(char *text, char ***lines)
{
  size_t n = 0, cap = 256;
  char *p = text, **l = malloc(cap * sizeof *l);
  *lines = NULL;
  if (!l) return 0;
  while (*p) {
    char *nl = strchr(p, '\n');
    if (n == cap) {
      char **more = realloc(l, 2 * cap * sizeof *l);
      if (!more) {
        free(l);
        return 0;
      }
      l = more;
      cap *= 2;
    }
    l[n++] = p;
    if (!nl) break;
    *nl = '\0';
    p = nl + 1;
  }
  *lines = l;
  return n;
}

/* A unified diff of two line lists (longest common subsequence, 3 lines of context). */
static void print_diff(char **a, size_t na, char **b, size_t nb, const char *name_a, const char *name_b)
{
  size_t i, j, w = nb + 1;
  unsigned *lcs = calloc((na + 1) * w, sizeof *lcs);
  char *op = malloc(na + nb + 1);
  size_t nop = 0, k;
  if (!lcs || !op) { free(lcs); free(op); fprintf(stderr, "attnc: error: out of memory for the diff\n"); return; }
  for (i = na; i-- > 0;)
    for (j = nb; j-- > 0;)
      lcs[i * w + j] = strcmp(a[i], b[j]) == 0 ? lcs[(i + 1) * w + j + 1] + 1
                     : (lcs[(i + 1) * w + j] > lcs[i * w + j + 1] ? lcs[(i + 1) * w + j] : lcs[i * w + j + 1]);
  for (i = 0, j = 0; i < na || j < nb;) {
    if (i < na && j < nb && strcmp(a[i], b[j]) == 0) { op[nop++] = '='; i++; j++; }
    else if (i < na && (j == nb || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) { op[nop++] = '-'; i++; }
    else { op[nop++] = '+'; j++; }
  }
  printf("--- %s\n+++ %s\n", name_a, name_b);
  /* walk the edit script, printing hunks with context */
  for (k = 0, i = 0, j = 0; k < nop;) {
    size_t start, end, ai, bj, t2, la = 0, lb = 0;
    if (op[k] == '=') { i++; j++; k++; continue; }
    start = k;
    while (start > 0 && op[start - 1] == '=' && k - start < 3) start--;
    ai = i - (k - start);
    bj = j - (k - start);
    end = k;
    for (;;) { /* extend over changes separated by at most 6 equal lines */
      size_t eq = 0;
      while (end < nop && op[end] != '=') end++;
      while (end + eq < nop && op[end + eq] == '=' && eq <= 6) eq++;
      if (end + eq < nop && eq <= 6) { end += eq; continue; }
      end += eq < 3 ? eq : 3;
      break;
    }
    for (t2 = start; t2 < end; t2++) { if (op[t2] != '+') la++; if (op[t2] != '-') lb++; }
    printf("@@ -%zu,%zu +%zu,%zu @@\n", ai + 1, la, bj + 1, lb);
    for (t2 = start; t2 < end; t2++) {
      if (op[t2] == '=') { printf(" %s\n", a[ai]); ai++; bj++; }
      else if (op[t2] == '-') { printf("-%s\n", a[ai]); ai++; }
      else { printf("+%s\n", b[bj]); bj++; }
    }
    i = ai;
    j = bj;
    k = end;
  }
  free(lcs);
  free(op);
}

/* Replace the kernel's symbol prefix (from its banner's name=) by NAME, in place. */
static void mask_name(char *text)
{
  char name[64], *p = strstr(text, " name=");
  size_t n = 0, len;
  if (!p) return;
  p += 6;
  while (n < sizeof name - 1 && (p[n] == '_' || (p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'z') ||
                                 (p[n] >= 'A' && p[n] <= 'Z'))) {
    name[n] = p[n];
    n++;
  }
  name[n] = '\0';
  if (n < 4) return;
  len = strlen(text);
  for (p = strstr(text, name); p; p = strstr(p, name)) {
    memcpy(p, "NAME", 4);
    memmove(p + 4, p + n, len - (size_t)(p + n - text) + 1);
    len -= n - 4;
    p += 4;
  }
}

static int cmd_show(struct cli *c)
{
  attnc_options o = { c->backend, c->threads, c->spec_name, form_of(c) };
  attnc_error e;
  char *src = NULL, *hdr = NULL;
  if (c->grad && imply_train(&c->spec, c->spec_name)) return 1;
  if (attnc_generate(c->spec, &o, &src, &hdr, &e) != ATTNC_OK) { print_error(&e); return 1; }
  if (c->diff) {
    struct cli d;
    char *src2 = NULL, *hdr2 = NULL, **la = NULL, **lb = NULL;
    size_t na, nb;
    int rc;
    memset(&d, 0, sizeof d);
    if ((rc = set_spec(&d, c->diff)) != 0) { free(src); free(hdr); return rc; }
    if (c->grad && imply_train(&d.spec, d.spec_name)) { free(src); free(hdr); free(d.spec); return 1; }
    o.spec_name = d.spec_name;
    if (attnc_generate(d.spec, &o, &src2, &hdr2, &e) != ATTNC_OK) {
      print_error(&e);
      free(src); free(hdr); free(d.spec);
      return 1;
    }
    /* the symbol prefixes differ by construction: show them both as NAME */
    mask_name(c->header ? hdr : src);
    mask_name(c->header ? hdr2 : src2);
    na = split_lines(c->header ? hdr : src, &la);
    nb = split_lines(c->header ? hdr2 : src2, &lb);
    if (la && lb) print_diff(la, na, lb, nb, c->spec, d.spec);
    else fprintf(stderr, "attnc: error: out of memory comparing the two kernels\n");
    free(la); free(lb); free(src2); free(hdr2); free(d.spec); free(src); free(hdr);
    return la && lb ? 0 : 1;
  }
  fputs(c->header ? hdr : src, stdout);
  free(src);
  free(hdr);
  return 0;
}

static int write_text(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  int ok;
  if (!f) { fprintf(stderr, "attnc: error: cannot write %s: %s\n", path, strerror(errno)); return 1; }
  ok = fputs(text, f) >= 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok) { fprintf(stderr, "attnc: error: cannot write %s: %s\n", path, strerror(errno)); return 1; }
  return 0;
}

static int cmd_gen(struct cli *c)
{
  attnc_options o = { c->backend, c->threads, c->spec_name, form_of(c) };
  attnc_error e;
  char *src = NULL, *hdr = NULL, canon[8192], path[4096];
  const char *name;
  int rc;
  char *named = NULL;
  const char *spec = c->spec;
  if (!c->outdir) return fail("gen needs -o DIR%s", "");
  if (attnc_spec_canonical(c->spec, &o, canon, sizeof canon, &e) != ATTNC_OK) {
    print_error(&e);
    return 1;
  }
  name = strstr(canon, " name=");
  if (c->name && (!name || strcmp(name + 6, c->name) != 0)) {
    /* --name: the spec's name unless it has none; a different name= is an error before anything is written */
    named = malloc(strlen(c->spec) + strlen(c->name) + 16);
    if (!named) return fail("out of memory%s", "");
    sprintf(named, "%s\nname=%s", c->spec, c->name);
    if (attnc_spec_canonical(named, &o, canon, sizeof canon, &e) != ATTNC_OK) {
      if (strstr(e.message, "duplicate key 'name'"))
        fprintf(stderr, "%s: error: the spec says %s but --name says %s: make them agree (nothing was written)\n",
                c->spec_name[0] ? c->spec_name : "spec", name ? name + 1 : "another name", c->name);
      else
        print_error(&e);
      free(named);
      return 1;
    }
    spec = named;
  }
  if (attnc_generate(spec, &o, &src, &hdr, &e) != ATTNC_OK) {
    print_error(&e);
    free(named);
    return 1;
  }
  name = strstr(canon, " name=");
  name = name ? name + 6 : "kernel";
  if (mkdir(c->outdir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "attnc: error: cannot create %s: %s\n", c->outdir, strerror(errno));
    rc = 1;
  } else {
    snprintf(path, sizeof path, "%s/%s.c", c->outdir, name);
    rc = write_text(path, src);
    snprintf(path, sizeof path, "%s/%s.h", c->outdir, name);
    if (!rc) rc = write_text(path, hdr);
  }
  if (!rc && c->print_name) printf("%s\n", name);
  else if (!rc) printf("wrote %s/%s.c and %s/%s.h\n", c->outdir, name, c->outdir, name);
  free(src);
  free(hdr);
  free(named);
  return rc;
}

static int cmd_explain(struct cli *c)
{
  attnc_options o = { c->backend, c->threads, c->spec_name, form_of(c) };
  attnc_error e;
  char *text = NULL;
  if (attnc_explain(c->spec, &o, c->dim_names, c->dim_values, c->ndims, &text, &e) != ATTNC_OK) {
    print_error(&e);
    return 1;
  }
  fputs(text, stdout);
  free(text);
  return 0;
}

/* ---- run ---- */

/* Weight prefixes present in f (what precedes a weight's name), nearest
 * to `prefix` first, into buf. */
static void prefixes_present(attnc_safetensors **files, int nfiles, const char *prefix, char *buf, size_t n)
{
  char seen[16][160];
  int ns = 0, f, a, b2;
  size_t len = 0, i;
  buf[0] = '\0';
  for (f = 0; f < nfiles; f++)
    for (i = 0; i < attnc_st_count(files[f]); i++) {
      const char *name = attnc_st_name(files[f], i);
      size_t p;
      for (p = 1; name[p]; p++)
        if (name[p - 1] == '.' && attnc_slot_is_weight(attnc_bindings_lookup_name(name + p)) && p < sizeof seen[0]) {
          int dup = 0;
          for (a = 0; a < ns; a++) dup |= strncmp(seen[a], name, p) == 0 && seen[a][p] == '\0';
          if (!dup && ns < 16) {
            memcpy(seen[ns], name, p);
            seen[ns++][p] = '\0';
          }
          break;
        }
    }
  for (a = 0; a < ns; a++) /* nearest first */
    for (b2 = a + 1; b2 < ns; b2++)
      if (edit_distance(seen[b2], prefix) < edit_distance(seen[a], prefix)) {
        char t[160];
        memcpy(t, seen[a], sizeof t);
        memcpy(seen[a], seen[b2], sizeof t);
        memcpy(seen[b2], t, sizeof t);
      }
  for (a = 0; a < ns && len + 4 < n; a++)
    len += (size_t)snprintf(buf + len, n - len, "%s'%s'", a ? ", " : "", seen[a]);
}

/* Bind --dim, --threads and every --tensors file to b. 0, or 1 (printed).
 * Tensors the spec does not use are ignored (DESIGN.md), but an input it
 * does not read gets a warning (unless --allow-unused), since the result
 * may differ from the model's; a --prefix that no tensor starts with is
 * an error. */
static int bind_inputs(struct cli *c, attnc_bindings *b, attnc_safetensors **files)
{
  attnc_error e;
  int i;
  if (c->prefix && *c->prefix) {
    int found = 0;
    size_t j;
    for (i = 0; i < c->nfiles && !found; i++)
      for (j = 0; j < attnc_st_count(files[i]) && !found; j++)
        found = strncmp(attnc_st_name(files[i], j), c->prefix, strlen(c->prefix)) == 0;
    if (!found) {
      char list[1200];
      prefixes_present(files, c->nfiles, c->prefix, list, sizeof list);
      fprintf(stderr, "attnc: error: --prefix '%s' matches no tensor in the --tensors files%s%s\n", c->prefix,
              list[0] ? "; weight prefixes present, nearest first: " : " (they hold no weights under a prefix)", list);
      return 1;
    }
  }
  if (!c->allow_unused) {
    const attnc_gen *g = &b->k->gen;
    size_t j;
    for (i = 0; i < c->nfiles; i++)
      for (j = 0; j < attnc_st_count(files[i]); j++) {
        const char *name = attnc_st_name(files[i], j);
        const size_t plen = c->prefix ? strlen(c->prefix) : 0;
        const char *key = plen && strncmp(name, c->prefix, plen) == 0 ? name + plen : name; /* inputs bind with or without it */
        const int slot = attnc_bindings_lookup_name(key);
        if (slot >= 0 && !attnc_slot_is_weight(slot) && !g->used[slot]) {
          fprintf(stderr, "attnc: warning: %s holds the input '%s', which this spec does not read (%s would): it is "
                          "ignored, and the result may differ from the model's (--allow-unused silences this)\n",
                  c->files[i], name, attnc_input_key(key) ? attnc_input_key(key) : "another spec");
        }
      }
  }
  for (i = 0; i < c->ndims; i++)
    if (attnc_bind_dim(b, c->dim_names[i], c->dim_values[i], &e) != ATTNC_OK) { print_error(&e); return 1; }
  if (c->threads && attnc_bindings_set_threads(b, c->threads, &e) != ATTNC_OK) { print_error(&e); return 1; }
  for (i = 0; i < c->nfiles; i++)
    if (attnc_bind_safetensors(b, files[i], c->prefix, NULL, &e) != ATTNC_OK) {
      fprintf(stderr, "attnc: error: %s: %s\n", c->files[i], e.message);
      return 1;
    }
  return 0;
}

/* The caches of a cache spec, copied out of the --tensors files (which are
 * mapped, and may be read only) into buffers the kernel may write, and
 * bound in their place under the names they were bound as. */
struct caches {
  int n;
  const char *names[4];
  attnc_tensor t[4];
};

static void caches_free(struct caches *cc)
{
  int i;
  for (i = 0; i < cc->n; i++) free(cc->t[i].data);
  cc->n = 0;
}

/* 0, or 1 (printed).  A cache not bound is left for attnc_output_shape to report. */
static int copy_caches(attnc_bindings *b, struct caches *cc)
{
  const char *name;
  attnc_error e;
  int i;
  memset(cc, 0, sizeof *cc);
  for (i = 0; (name = attnc_inplace_name(b->k, i, NULL)) != NULL; i++) {
    const int slot = attnc_bindings_lookup_name(name);
    const attnc_tensor *t = attnc_bindings_slot(b, slot);
    attnc_tensor *w = &cc->t[cc->n];
    size_t n = attnc_dtype_size(t ? t->dtype : ATTNC_F32);
    void *mem = NULL;
    int a;
    if (!t || !t->data) continue;
    for (a = 0; a < t->rank; a++) n *= (size_t)t->shape[a];
    if (posix_memalign(&mem, 64, n + 1) != 0) {
      fprintf(stderr, "attnc: error: out of memory for a writable copy of %s (%zu bytes)\n", name, n);
      caches_free(cc);
      return 1;
    }
    *w = *t;
    memcpy(mem, t->data, n);
    w->data = mem;
    cc->names[cc->n++] = name;
    if (attnc_bind(b, b->from[slot], w, &e) != ATTNC_OK) { print_error(&e); caches_free(cc); return 1; }
  }
  return 0;
}

/* The attention weights as the kernel computes them (weights_out) for the
 * same tensors: from k itself when its spec has weights_out, else from the
 * spec with weights_out added (another kernel, bound to the same files).
 * *w is malloc'd (batch axes..., H, Sq, Sk); so is *vis when vis is not
 * NULL: 1 where the spec lets query i see key j, by the reference's rule.
 * 0, or 1 (printed). */
static int kernel_weights(struct cli *c, attnc_kernel *k, attnc_safetensors **files, double **w, unsigned char **vis,
                          int *rank, long *shape)
{
  struct cli c2 = *c;
  char *spec2 = NULL;
  attnc_kernel *k2 = NULL;
  attnc_bindings *b2 = NULL;
  attnc_tensor t[3];
  const char *names[3] = { "out", "lse", "attn" };
  attnc_error e;
  struct caches cc;
  int o, i, rc = 1;
  size_t n = 1, j;
  memset(t, 0, sizeof t);
  memset(&cc, 0, sizeof cc);
  if (!attnc_kernel_gen(k)->has_attn) {
    spec2 = malloc(strlen(c->spec) + 16);
    if (!spec2) { fprintf(stderr, "attnc: error: out of memory\n"); return 1; }
    sprintf(spec2, "%s weights_out", c->spec);
    c2.spec = spec2;
  }
  if (compile_spec(&c2, &k2)) goto done;
  if (!(b2 = attnc_bindings_new(k2))) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
  if (bind_inputs(c, b2, files) || copy_caches(b2, &cc)) goto done;
  for (o = 0; o < 3; o++) {
    size_t bytes;
    if (attnc_output_info(b2, names[o], &t[o], &e) != ATTNC_OK) {
      if (o == 1) continue; /* no lse */
      print_error(&e);
      goto done;
    }
    bytes = attnc_dtype_size(t[o].dtype);
    for (i = 0; i < t[o].rank; i++) bytes *= (size_t)t[o].shape[i];
    if (!(t[o].data = malloc(bytes ? bytes : 1))) { fprintf(stderr, "attnc: error: out of memory for the weights\n"); goto done; }
    if (o > 0 && attnc_bind_output(b2, names[o], &t[o], &e) != ATTNC_OK) { print_error(&e); goto done; }
  }
  if (attnc_run(b2, &t[0], &e) != ATTNC_OK) { print_error(&e); goto done; }
  if (vis) {
    long vshape[ATTNC_MAX_RANK];
    int vrank, same;
    if (checker_visible(k2, b2, vis, &vrank, vshape, &e) != 0) { print_error(&e); goto done; }
    same = vrank == t[2].rank;
    for (i = 0; same && i < vrank; i++) same = vshape[i] == (long)t[2].shape[i];
    if (!same) { /* the checker holds attn to the reference's shape; another would mark the wrong cells */
      fprintf(stderr, "attnc: error: the masked cells and the attention weights differ in shape\n");
      free(*vis);
      *vis = NULL;
      goto done;
    }
  }
  *rank = t[2].rank;
  for (i = 0; i < t[2].rank; i++) { shape[i] = (long)t[2].shape[i]; n *= (size_t)t[2].shape[i]; }
  if (!(*w = malloc(n * sizeof **w + 1))) { fprintf(stderr, "attnc: error: out of memory for the weights\n"); goto done; }
  for (j = 0; j < n; j++) (*w)[j] = ((const float *)t[2].data)[j];
  rc = 0;
done:
  for (o = 0; o < 3; o++) free(t[o].data);
  caches_free(&cc);
  attnc_bindings_free(b2);
  attnc_release(k2);
  free(spec2);
  return rc;
}

static double now_ms(void);

/* --seed: the dropout seed of a train spec (DESIGN.md: "--seed sets the
 * dropout seed of a train spec"; run and grad list [--seed N] for every
 * spec).  A spec without dropout takes it and drops nothing, as Python's
 * seed= does.  0, or 1 (printed). */
static int set_seed(struct cli *c, attnc_bindings *b)
{
  attnc_error e;
  if (!c->seed_given || !b->k->gen.train) return 0; /* no dropout: nothing to seed */
  if (attnc_bindings_set_seed(b, (uint64_t)c->dropout_seed, &e) != ATTNC_OK) { print_error(&e); return 1; }
  return 0;
}

/* run and grad's one line on stderr: what ran, on what, what it wrote to
 * --out, how long. */
static void report_wrote(const struct cli *c, const char *what, attnc_bindings *b, const char *const *names,
                         const attnc_tensor *outs, int n_out, double ms)
{
  const attnc_gen *g = &b->k->gen;
  const int64_t *dv = attnc_bindings_dims(b);
  char line[2048];
  int i, o;
  size_t len = (size_t)snprintf(line, sizeof line, "attnc: %s %s (%s, %s)", what, g->name,
                                attnc_kernel_backend(b->k) == ATTNC_BACKEND_CC ? "cc" : "tcc", c->plain ? "plain form" : "fast form");
  for (i = 0; i < g->ndims && len < sizeof line; i++)
    len += (size_t)snprintf(line + len, sizeof line - len, "%s%s=%lld", i ? " " : ", dims ", g->dim_names[i], (long long)dv[i]);
  for (o = 0; o < n_out && len < sizeof line; o++) {
    char shape[256];
    attnc_bindings_shape_text(outs[o].shape, outs[o].rank, shape, sizeof shape);
    len += (size_t)snprintf(line + len, sizeof line - len, "%s%s %s", o ? ", " : "; wrote ", names[o], shape);
  }
  if (len < sizeof line) snprintf(line + len, sizeof line - len, " to %s in %.2f ms", c->out, ms);
  fprintf(stderr, "%s\n", line);
}

static int cmd_run(struct cli *c)
{
  double ran_ms = 0;
  attnc_kernel *k;
  attnc_bindings *b;
  attnc_safetensors *files[MAX_FILES];
  attnc_error e;
  attnc_tensor out;
  struct caches cc;
  double *w = NULL;           /* --save-attn, --heatmap: the weights */
  unsigned char *vis = NULL;  /* --heatmap: which of them the spec lets through */
  long wshape[ATTNC_MAX_RANK];
  int i, wrank = 0, rc = 1;
  memset(&cc, 0, sizeof cc);
  if (c->nfiles == 0) return fail("run needs --tensors FILE (weights and inputs)%s", "");
  if (!c->out) return fail("run needs --out FILE%s", "");
  if (c->batch >= 0 && !c->heatmap) return fail("--batch N picks the batch element that --heatmap draws: it needs --heatmap FILE.svg%s", "");
  if (compile_spec(c, &k)) return 1;
  b = attnc_bindings_new(k);
  memset(files, 0, sizeof files);
  memset(&out, 0, sizeof out);
  if (!b) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
  for (i = 0; i < c->nfiles; i++) {
    files[i] = attnc_st_open(c->files[i], &e);
    if (!files[i]) { print_error(&e); goto done; }
  }
  if (bind_inputs(c, b, files) || copy_caches(b, &cc) || set_seed(c, b)) goto done;
  if (attnc_output_shape(b, &out, &e) != ATTNC_OK) { print_error(&e); goto done; }
  /* the weights first, so that a --batch out of range writes no file */
  if ((c->save_attn || c->heatmap) && kernel_weights(c, k, files, &w, c->heatmap ? &vis : NULL, &wrank, wshape)) goto done;
  if (c->heatmap && c->batch > 0) {
    long nb = 1;
    char shape[256];
    for (i = 0; i < wrank - 3; i++) nb *= wshape[i];
    if (c->batch >= nb) {
      int64_t s64[ATTNC_MAX_RANK];
      for (i = 0; i < wrank; i++) s64[i] = wshape[i];
      attnc_bindings_shape_text(s64, wrank, shape, sizeof shape);
      if (wrank == 3)
        fprintf(stderr, "attnc: error: --batch %ld is out of range: the attention weights %s have no batch axes, so N "
                        "can only be 0\n", c->batch, shape);
      else
        fprintf(stderr, "attnc: error: --batch %ld is out of range: the attention weights %s have %ld batch element%s, "
                        "so N is 0 to %ld\n", c->batch, shape, nb, nb == 1 ? "" : "s", nb - 1);
      rc = 2;
      goto done;
    }
  }
  {
    /* every output the spec asks for goes to --out: out, lse with the key
     * lse, attn with weights_out, and a cache spec's updated caches */
    attnc_tensor outs[8];
    const char *names[8] = { "out", "lse", "attn" };
    int n_out = 1, n_alloc = 3, o; /* outs[0 .. n_alloc) are ours to free */
    long long *next_len = NULL;
    memset(outs, 0, sizeof outs);
    outs[0] = out;
    for (o = 1; o < 3; o++) /* lse with the key lse, attn with weights_out */
      if (attnc_output_info(b, names[o], &outs[n_out], &e) == ATTNC_OK) names[n_out++] = names[o];
    for (o = 0; o < n_out; o++) {
      size_t n = attnc_dtype_size(outs[o].dtype);
      for (i = 0; i < outs[o].rank; i++) n *= (size_t)outs[o].shape[i];
      outs[o].data = malloc(n ? n : 1);
      if (!outs[o].data) { fprintf(stderr, "attnc: error: out of memory for the output %s (%zu bytes)\n", names[o], n); goto run_done; }
    }
    n_alloc = n_out;
    for (o = 1; o < n_out; o++)
      if (attnc_bind_output(b, names[o], &outs[o], &e) != ATTNC_OK) { print_error(&e); goto run_done; }
    {
      const double t0 = now_ms();
      if (attnc_run(b, &outs[0], &e) != ATTNC_OK) { print_error(&e); goto run_done; }
      ran_ms = now_ms() - t0;
    }
    if (cc.n) { /* the updated caches, and cache_len + Sq as the next run reads it */
      const attnc_tensor *len = attnc_bindings_slot(b, ATTNC_SLOT_CACHE_LEN);
      const int64_t sq = outs[0].shape[b->k->gen.axis];
      size_t n = 1, j;
      for (o = 0; o < cc.n; o++) { names[n_out] = cc.names[o]; outs[n_out++] = cc.t[o]; }
      for (i = 0; i < len->rank; i++) n *= (size_t)len->shape[i];
      if (!(next_len = malloc(n * sizeof *next_len + 1))) { fprintf(stderr, "attnc: error: out of memory\n"); goto run_done; }
      for (j = 0; j < n; j++) { /* in the dtype and shape it was given */
        const long long v = (len->dtype == ATTNC_I32 ? ((const int32_t *)len->data)[j] : ((const int64_t *)len->data)[j]) + sq;
        if (len->dtype == ATTNC_I32) ((int32_t *)next_len)[j] = (int32_t)v;
        else ((int64_t *)next_len)[j] = v;
      }
      names[n_out] = "cache_len";
      outs[n_out] = *len;
      outs[n_out++].data = next_len;
    }
    if (attnc_st_write(c->out, n_out, names, outs, &e) != ATTNC_OK) { print_error(&e); goto run_done; }
    if (!c->quiet) report_wrote(c, "ran", b, names, outs, n_out, ran_ms);
    out.data = outs[0].data;
    outs[0].data = NULL;
  run_done:
    for (o = 0; o < n_alloc && o < 3; o++) free(outs[o].data);
    free(next_len);
    if (!out.data) goto done;
  }
  if (c->save_attn) {
    attnc_tensor at;
    const char *name = "attn";
    size_t n = 1, j;
    float *f;
    memset(&at, 0, sizeof at);
    at.dtype = ATTNC_F32;
    at.rank = wrank;
    for (i = 0; i < wrank; i++) { at.shape[i] = wshape[i]; n *= (size_t)wshape[i]; }
    f = malloc(n * sizeof *f + 1);
    if (!f) { fprintf(stderr, "attnc: error: out of memory for the weights\n"); goto done; }
    for (j = 0; j < n; j++) f[j] = (float)w[j];
    at.data = f;
    if (attnc_st_write(c->save_attn, 1, &name, &at, &e) != ATTNC_OK) { print_error(&e); free(f); goto done; }
    free(f);
  }
  if (c->heatmap && attnc_heatmap_svg(c->heatmap, w, vis, wrank, wshape, c->batch > 0 ? c->batch : 0, attnc_canonical(k)) != 0) {
    fprintf(stderr, "attnc: error: cannot write %s: %s\n", c->heatmap, strerror(errno));
    goto done;
  }
  rc = 0;
done:
  free(w);
  free(vis);
  free(out.data);
  caches_free(&cc);
  for (i = 0; i < c->nfiles; i++) attnc_st_close(files[i]);
  attnc_bindings_free(b);
  attnc_release(k);
  return rc;
}

/* ---- grad ---- */

/* The name a bound tensor was read under: of the --tensors entries that
 * attnc_bind_safetensors binds as `key` (P + key, or an input's bare
 * name), the last one, as the last one bound wins.  key itself if none. */
static const char *name_as_read(const struct cli *c, attnc_safetensors **files, const char *key)
{
  const size_t plen = c->prefix ? strlen(c->prefix) : 0;
  const char *found = key;
  size_t j;
  int f;
  for (f = 0; f < c->nfiles; f++)
    for (j = 0; j < attnc_st_count(files[f]); j++) {
      const char *name = attnc_st_name(files[f], j), *k2 = name;
      if (plen && strncmp(name, c->prefix, plen) == 0) k2 = name + plen;
      else if (plen && (attnc_slot_is_weight(attnc_bindings_lookup_name(name)) || attnc_bindings_lookup_name(name) <= -2))
        continue; /* a weight outside the prefix: not bound */
      if (strcmp(k2, key) == 0) found = name;
    }
  return found;
}

static int cmd_grad(struct cli *c)
{
  attnc_kernel *k = NULL;
  attnc_bindings *b = NULL;
  attnc_safetensors *files[MAX_FILES], *df = NULL;
  attnc_tensor outs[3 + ATTNC_SLOT_COUNT], dout;
  const char *names[3 + ATTNC_SLOT_COUNT] = { "out", "lse", "attn" };
  char *gnames[ATTNC_SLOT_COUNT];
  attnc_error e;
  double ms = 0;
  int i, o, n_out = 1, n_alloc = 0, ng = 0, rc = 1;
  memset(files, 0, sizeof files);
  memset(outs, 0, sizeof outs);
  memset(gnames, 0, sizeof gnames);
  if (c->nfiles == 0) return fail("grad needs --tensors FILE (weights and inputs)%s", "");
  if (!c->dout) return fail("grad needs --dout FILE, a safetensors file holding the tensor dout (the gradient of out)%s", "");
  if (!c->out) return fail("grad needs --out FILE%s", "");
  if (imply_train(&c->spec, c->spec_name) || compile_spec(c, &k)) return 1;
  if (!(b = attnc_bindings_new(k))) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
  for (i = 0; i < c->nfiles; i++)
    if (!(files[i] = attnc_st_open(c->files[i], &e))) { print_error(&e); goto done; }
  if (!(df = attnc_st_open(c->dout, &e))) { print_error(&e); goto done; }
  if (bind_inputs(c, b, files) || set_seed(c, b)) goto done;
  if (attnc_output_shape(b, &outs[0], &e) != ATTNC_OK) { print_error(&e); goto done; }
  if (attnc_st_find(df, "dout", &dout) != ATTNC_OK) {
    char shape[256];
    attnc_bindings_shape_text(outs[0].shape, outs[0].rank, shape, sizeof shape);
    fprintf(stderr, "attnc: error: %s holds no tensor 'dout': store the gradient of out there under that name, "
                    "shape %s, any float dtype\n", c->dout, shape);
    goto done;
  }
  for (o = 1; o < 3; o++) /* lse with the key lse, attn with weights_out */
    if (attnc_output_info(b, names[o], &outs[n_out], &e) == ATTNC_OK) names[n_out++] = names[o];
  for (o = 0; o < n_out; o++, n_alloc++) {
    size_t n = attnc_dtype_size(outs[o].dtype);
    for (i = 0; i < outs[o].rank; i++) n *= (size_t)outs[o].shape[i];
    if (!(outs[o].data = malloc(n ? n : 1))) {
      fprintf(stderr, "attnc: error: out of memory for the output %s (%zu bytes)\n", names[o], n);
      goto done;
    }
    if (o > 0 && attnc_bind_output(b, names[o], &outs[o], &e) != ATTNC_OK) { print_error(&e); goto done; }
  }
  {
    const double t0 = now_ms();
    if (attnc_grad(b, &outs[0], &dout, &e) != ATTNC_OK) {
      if (strstr(e.message, "dout")) fprintf(stderr, "attnc: error: %s: %s\n", c->dout, e.message);
      else print_error(&e);
      goto done;
    }
    ms = now_ms() - t0;
  }
  { /* grad.NAME for every gradient, NAME as the files spell it */
    const char *key;
    for (i = 0; (key = attnc_grad_name(b, i)) != NULL && ng < ATTNC_SLOT_COUNT; i++) {
      const char *read = name_as_read(c, files, key);
      if (!(gnames[ng] = malloc(strlen(read) + 6))) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
      sprintf(gnames[ng], "grad.%s", read);
      if (attnc_grad_get(b, key, &outs[n_out], &e) != ATTNC_OK) { print_error(&e); goto done; }
      names[n_out++] = gnames[ng++];
    }
  }
  if (attnc_st_write(c->out, (size_t)n_out, names, outs, &e) != ATTNC_OK) { print_error(&e); goto done; }
  if (!c->quiet) report_wrote(c, "forward and backward of", b, names, outs, n_out, ms);
  rc = 0;
done:
  for (o = 0; o < n_alloc; o++) free(outs[o].data);
  for (i = 0; i < ng; i++) free(gnames[i]);
  for (i = 0; i < c->nfiles; i++) attnc_st_close(files[i]);
  attnc_st_close(df);
  attnc_bindings_free(b);
  attnc_release(k);
  return rc;
}

/* ---- quantize ---- */

static int cmd_quantize(struct cli *c)
{
  attnc_safetensors *files[MAX_FILES];
  attnc_tensor *ts = NULL;
  char **names = NULL;
  void **owned = NULL;
  size_t n = 0, cap = 0, i, j, nq = 0, ncopy = 0;
  const size_t plen = c->prefix ? strlen(c->prefix) : 0;
  attnc_error e;
  int f, rc = 1;
  if (c->nfiles == 0) return fail("quantize needs --tensors FILE%s", "");
  if (!c->out) return fail("quantize needs --out FILE%s", "");
  memset(files, 0, sizeof files);
  for (f = 0; f < c->nfiles; f++) {
    files[f] = attnc_st_open(c->files[f], &e);
    if (!files[f]) { print_error(&e); goto done; }
    for (i = 0; i < attnc_st_count(files[f]); i++) {
      attnc_tensor t;
      const char *name = attnc_st_name(files[f], i);
      int quant;
      if (attnc_st_get(files[f], i, &t) != ATTNC_OK) { fprintf(stderr, "attnc: error: %s: cannot read '%s'\n", c->files[f], name); goto done; }
      quant = (!c->prefix || strncmp(name, c->prefix, plen) == 0) && attnc_quantize_takes(name, &t);
      if (n + 2 > cap) { /* room for a weight and its scale */
        size_t nc = cap ? 2 * cap : 64;
        attnc_tensor *t2 = realloc(ts, nc * sizeof *ts);
        char **n2 = t2 ? realloc(names, nc * sizeof *names) : NULL;
        void **o2 = n2 ? realloc(owned, nc * sizeof *owned) : NULL;
        if (t2) ts = t2;
        if (n2) names = n2;
        if (o2) owned = o2;
        if (!o2) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
        cap = nc;
      }
      names[n] = strdup(name);
      owned[n] = NULL;
      ts[n] = t;
      if (!names[n]) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
      n++;
      if (!quant) { ncopy++; continue; }
      {
        attnc_tensor *q = &ts[n - 1], *s = &ts[n];
        const size_t rows = (size_t)t.shape[0], cols = (size_t)t.shape[1];
        names[n] = malloc(strlen(name) + 7);
        owned[n] = malloc(sizeof(float) * (rows ? rows : 1));
        owned[n - 1] = malloc(rows * cols > 0 ? rows * cols : 1);
        n++;
        if (!names[n - 1] || !owned[n - 1] || !owned[n - 2]) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
        sprintf(names[n - 1], "%s_scale", name);
        if (attnc_quantize_int8(&t, owned[n - 2], owned[n - 1], &e) != ATTNC_OK) {
          fprintf(stderr, "attnc: error: %s: tensor '%s': %s\n", c->files[f], name, e.message);
          goto done;
        }
        q->dtype = ATTNC_I8;
        q->data = owned[n - 2];
        memset(s, 0, sizeof *s);
        s->dtype = ATTNC_F32;
        s->rank = 1;
        s->shape[0] = (int64_t)rows;
        s->data = owned[n - 1];
        nq++;
      }
    }
  }
  /* a name in two files, or a scale name the input already has */
  for (i = 0; i < n; i++)
    for (j = i + 1; j < n; j++)
      if (strcmp(names[i], names[j]) == 0) {
        fprintf(stderr, "attnc: error: the output would hold '%s' twice (a name in two --tensors files, or a "
                        "weight's _scale name that the input already has)\n", names[i]);
        goto done;
      }
  if (attnc_st_write(c->out, n, (const char *const *)names, ts, &e) != ATTNC_OK) { print_error(&e); goto done; }
  printf("quantised %zu weight%s to int8 with per-row scales, copied %zu other tensor%s: wrote %s\n", nq,
         nq == 1 ? "" : "s", ncopy, ncopy == 1 ? "" : "s", c->out);
  rc = 0;
done:
  for (i = 0; i < n; i++) {
    free(names[i]);
    free(owned[i]);
  }
  free(names);
  free(owned);
  free(ts);
  for (f = 0; f < c->nfiles; f++) attnc_st_close(files[f]);
  return rc;
}

/* ---- check ---- */

static int cmd_check(struct cli *c)
{
  checker_opts o;
  checker_result r;
  memset(&o, 0, sizeof o);
  o.backend = c->backend;
  o.spec_name = c->spec_name;
  o.dim_names = c->dim_names;
  o.dim_values = c->dim_values;
  o.ndims = c->ndims;
  o.seed = c->seed;
  o.threads = c->threads;
  o.form = form_of(c);
  /* --grad: the gradients too, against finite differences of the float64
   * reference (checker_run adds train to the spec); --seed seeds the data
   * and the dropout both */
  o.grad = c->grad;
  o.dropout_seed = c->seed;
  checker_run(c->spec, &o, &r);
  if (r.status != ATTNC_OK) {
    print_error(&r.err);
    return 2;
  }
  printf("%s\n", r.canonical);
  printf("%sbackend %s: %zu outputs, max abs error %.3g (max |ref| %.3g; tolerance %.2g + %.0e |ref| per element), "
         "NMSE %.3g (at most %.0e): %s\n",
         c->plain ? "plain form, " : "", r.backend == ATTNC_BACKEND_CC ? "cc" : "tcc", r.n, r.max_abs, r.max_ref, r.atol,
         r.rtol, r.nmse, r.nmse_max, r.ok ? "OK" : "MISMATCH");
  if (r.n_lse || r.n_attn)
    printf("and %zu lse values, %zu attention weights within the same bound\n", r.n_lse, r.n_attn);
  if (r.n_cache)
    printf("and %zu cache values the run wrote, each within the bound plus one step of the stored type; "
           "every other cache row unchanged\n", r.n_cache);
  if (c->grad) {
    int i;
    printf("gradients of sum(out * dout), dout random, against central finite differences of the float64 reference:\n");
    for (i = 0; i < r.n_grads; i++)
      printf("  grad.%-24s %zu of %zu judged, max abs error %.3g (rms %.3g), NMSE %.3g, worst/tolerance %.3g\n", r.grads[i].name,
             r.grads[i].judged, r.grads[i].n, r.grads[i].max_abs, r.grads[i].rms, r.grads[i].nmse, r.grads[i].worst);
    printf("%zu gradient values in %d gradients: %s\n", r.n_grad, r.n_grads, r.ok ? "OK" : "MISMATCH");
  }
  if (!r.ok && r.err.message[0]) printf("mismatch: %s\n", r.err.message);
  return r.ok ? 0 : 1;
}

/* ---- bench ---- */

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* CPU time of the whole process (every thread), user and system, in ms */
static double cpu_ms(void)
{
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* bench on a cache spec: random caches (every dim --dim or 128, as
 * checker_bind_random sizes the rest) and cache_len = N for every batch
 * element, bound over whatever the random binding gave them.  The runs
 * never advance cache_len, so each starts from the same N.  0, or 1 (printed). */
/* The index of named dim `name` among --dim's (and cli_add_dim's), or -1. */
static int cli_dim(const struct cli *c, const char *name)
{
  int d;
  for (d = 0; d < c->ndims; d++)
    if (strcmp(c->dim_names[d], name) == 0) return d;
  return -1;
}

static int bench_caches(struct cli *c, attnc_bindings *b, struct caches *cc, int64_t *len)
{
  const attnc_gen *g = &b->k->gen;
  uint64_t rng = 0x2545F4914F6CDD1DULL;
  const char *name;
  attnc_error e;
  attnc_tensor lt;
  int i, a;
  memset(cc, 0, sizeof *cc);
  for (i = 0; (name = attnc_inplace_name(b->k, i, NULL)) != NULL; i++) {
    const int slot = attnc_bindings_lookup_name(name);
    attnc_tensor *t = &cc->t[cc->n];
    size_t n = 1, j, es;
    void *mem = NULL;
    memset(t, 0, sizeof *t);
    t->dtype = attnc_slot_dtype(g, slot);
    t->rank = g->shape[slot].rank;
    for (a = 0; a < t->rank; a++) {
      int64_t v = g->shape[slot].dim[a];
      if (v < 0) {
        const int d = cli_dim(c, g->dim_names[-v - 1]);
        v = d >= 0 ? c->dim_values[d] : 128;
      }
      t->shape[a] = v;
      n *= (size_t)v;
    }
    es = attnc_dtype_size(t->dtype);
    if (posix_memalign(&mem, 64, n * es + 1) != 0) {
      fprintf(stderr, "attnc: error: out of memory for a random %s (%zu bytes)\n", name, n * es);
      caches_free(cc);
      return 1;
    }
    t->data = mem;
    cc->names[cc->n++] = name;
    for (j = 0; j < n; j++) { /* xorshift64: values in (-1, 1); int8 in -127..127; scales about 1/127 */
      double u;
      rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
      u = (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
      if (t->dtype == ATTNC_I8) ((int8_t *)mem)[j] = (int8_t)(u * 127);
      else if (slot == ATTNC_SLOT_K_CACHE_SCALE || slot == ATTNC_SLOT_V_CACHE_SCALE) ((float *)mem)[j] = (float)((u + 2) / 254);
      else attnc_convert(&u, ATTNC_F64, (char *)mem + j * es, t->dtype, 1);
    }
    if (attnc_bind(b, name, t, &e) != ATTNC_OK) { print_error(&e); caches_free(cc); return 1; }
  }
  memset(&lt, 0, sizeof lt);
  *len = c->cache_len > 0 ? c->cache_len : 0;
  lt.dtype = ATTNC_I64; /* a scalar: the same length for every batch element */
  lt.data = len;
  if (attnc_bind(b, "cache_len", &lt, &e) != ATTNC_OK) { print_error(&e); caches_free(cc); return 1; }
  return 0;
}

/* Set a named dim as --dim would: 0, or 1 (printed). */
static int cli_add_dim(struct cli *c, const char *name, int64_t v)
{
  if (c->ndims == MAX_DIMS) return fail("too many --dim options%s", "");
  if (!(c->dim_names[c->ndims] = strdup(name))) return fail("out of memory%s", "");
  c->dim_values[c->ndims++] = v;
  return 0;
}

static int cmd_bench(struct cli *c)
{
  attnc_tensor outs[2] = { { 0 }, { 0 } }; /* lse, attn */
  attnc_kernel *k;
  attnc_bindings *b = NULL;
  checker_inputs *in = NULL;
  checker_opts co;
  const attnc_gen *g;
  attnc_error e;
  attnc_tensor out;
  double t0, compile_ms, *times = NULL, flops = 0, flops_unmasked = 0, wall0, cpu0, busy;
  int i, rc = 1, runs = c->runs > 0 ? c->runs : 10;
  long warmups = 0, warmup_ms = c->warmup_ms >= 0 ? c->warmup_ms : 100;
  char *text = NULL;
  struct caches cc;
  int64_t cache_len = 0, sq = 0, cap = 0;
  /* --grad: dout, the forward's own median, the pair's FLOPs */
  attnc_tensor dout;
  double forward_ms = 0, *ftimes = NULL, pair_flops = 0;
  memset(&dout, 0, sizeof dout);
  memset(&cc, 0, sizeof cc);
  memset(&out, 0, sizeof out);
  memset(&co, 0, sizeof co);
  co.dim_names = c->dim_names;
  co.dim_values = c->dim_values;
  co.ndims = c->ndims;
  co.default_dim = 128;
  co.mask_keep = 0.9;
  if (c->grad && c->cache_len >= 0)
    return fail("--grad times training, and --cache-len decoding: a spec with a cache trains nothing; drop one of them%s", "");
  if (c->grad && imply_train(&c->spec, c->spec_name)) return 1;
  t0 = now_ms();
  if (compile_spec(c, &k)) return 1;
  compile_ms = now_ms() - t0;
  g = attnc_kernel_gen(k);
  b = attnc_bindings_new(k);
  if (!b) goto done;
  if (c->threads && attnc_bindings_set_threads(b, c->threads, &e) != ATTNC_OK) { print_error(&e); goto done; }
  if (c->cache_len >= 0 && !g->has_cache) {
    fprintf(stderr, "attnc: error: --cache-len is for cache specs, and this one has no cache: add cache=CAP to the spec, "
                    "or drop --cache-len\n");
    goto done;
  }
  if (g->has_cache) { /* unset: x's named length is one decoding step, a named CAP what that needs (at least 128) */
    const int64_t xs = g->shape[ATTNC_SLOT_X].dim[g->axis], n = c->cache_len > 0 ? c->cache_len : 0;
    const int ds = xs < 0 ? cli_dim(c, g->dim_names[-xs - 1]) : -1;
    const int64_t s1 = xs > 0 ? xs : ds >= 0 ? c->dim_values[ds] : 1;
    if (xs < 0 && ds < 0 && cli_add_dim(c, g->dim_names[-xs - 1], 1)) goto done;
    if (g->cache_cap < 0 && cli_dim(c, g->dim_names[-g->cache_cap - 1]) < 0 &&
        cli_add_dim(c, g->dim_names[-g->cache_cap - 1], n + s1 > 128 ? n + s1 : 128))
      goto done;
    co.dim_names = c->dim_names;
    co.dim_values = c->dim_values;
    co.ndims = c->ndims;
  }
  in = checker_bind_random(k, b, &co, &e);
  if (!in) { print_error(&e); goto done; }
  if (g->has_cache && bench_caches(c, b, &cc, &cache_len)) goto done;
  if (attnc_output_shape(b, &out, &e) != ATTNC_OK) { print_error(&e); goto done; }
  if (g->has_cache) {
    const int64_t *dv = attnc_bindings_dims(b);
    const int64_t xs = g->shape[ATTNC_SLOT_X].dim[g->axis];
    sq = xs > 0 ? xs : dv[-xs - 1];
    cap = g->cache_cap > 0 ? g->cache_cap : dv[-g->cache_cap - 1];
    if (cache_len + sq > cap) {
      fprintf(stderr, "attnc: error: --cache-len %lld leaves no room for the %lld new rows: %lld + %lld > CAP = %lld; "
                      "pass --cache-len %lld or less%s%s%s\n",
              (long long)cache_len, (long long)sq, (long long)cache_len, (long long)sq, (long long)cap,
              (long long)(cap - sq > 0 ? cap - sq : 0), g->cache_cap < 0 ? ", or --dim " : "",
              g->cache_cap < 0 ? g->dim_names[-g->cache_cap - 1] : "", g->cache_cap < 0 ? "=N with N >= cache_len + new rows" : "");
      goto done;
    }
  }
  {
    size_t n = attnc_dtype_size(out.dtype);
    void *mem = NULL;
    for (i = 0; i < out.rank; i++) n *= (size_t)out.shape[i];
    /* on a 64-byte boundary, as checker_bind_random gives the inputs */
    out.data = posix_memalign(&mem, 64, n + 1) == 0 ? mem : NULL;
    times = malloc(sizeof(double) * (size_t)runs);
    if (!out.data || !times) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
    if (c->grad) { /* dout: random values of out's shape and dtype, as the inputs */
      uint64_t rng = 0x9E3779B97F4A7C15ULL;
      size_t j, m = n / attnc_dtype_size(out.dtype);
      dout = out;
      ftimes = malloc(sizeof(double) * (size_t)runs);
      dout.data = posix_memalign(&mem, 64, n + 1) == 0 ? mem : NULL;
      if (!dout.data || !ftimes) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
      for (j = 0; j < m; j++) {
        double u;
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        u = (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
        attnc_convert(&u, ATTNC_F64, (char *)dout.data + j * attnc_dtype_size(out.dtype), out.dtype, 1);
      }
    }
    for (i = 0; i < 2; i++) { /* the other outputs the spec asks for (lse, attn): written every run too */
      static const char *const extra[2] = { "lse", "attn" };
      size_t m = sizeof(float);
      int a;
      if (attnc_output_info(b, extra[i], &outs[i], &e) != ATTNC_OK) continue;
      for (a = 0; a < outs[i].rank; a++) m *= (size_t)outs[i].shape[a];
      if (!(outs[i].data = malloc(m + 1))) { fprintf(stderr, "attnc: error: out of memory\n"); goto done; }
      if (attnc_bind_output(b, extra[i], &outs[i], &e) != ATTNC_OK) { print_error(&e); goto done; }
    }
  }
  /* Warm-up: at least one run, then more until warmup_ms have passed.  In
   * a new process the pool's threads are created by the first run, and a
   * new worker can share its creator's CPU for some milliseconds before
   * the scheduler moves it: timed runs right after one warm-up would time
   * that start-up, not the kernel. */
  t0 = now_ms();
  do {
    if ((c->grad ? attnc_grad(b, &out, &dout, &e) : attnc_run(b, &out, &e)) != ATTNC_OK) { print_error(&e); goto done; }
    warmups++;
  } while (now_ms() - t0 < (double)warmup_ms);
  /* busy = CPU time over wall time of the timed runs: about the thread
   * count when the threads had a CPU each (pool threads spin between
   * phases), about 1 when they took turns on one CPU */
  cpu0 = cpu_ms();
  wall0 = now_ms();
  for (i = 0; i < runs; i++) {
    t0 = now_ms();
    if ((c->grad ? attnc_grad(b, &out, &dout, &e) : attnc_run(b, &out, &e)) != ATTNC_OK) { print_error(&e); goto done; }
    times[i] = now_ms() - t0;
  }
  {
    const double cpu = cpu_ms() - cpu0, wall = now_ms() - wall0;
    busy = cpu / (wall > 0 ? wall : 1);
  }
  qsort(times, (size_t)runs, sizeof(double), cmp_double);
  if (c->grad) { /* the forward alone: attnc_run of the same train kernel, as many runs */
    for (i = 0; i < runs; i++) {
      t0 = now_ms();
      if (attnc_run(b, &out, &e) != ATTNC_OK) { print_error(&e); goto done; }
      ftimes[i] = now_ms() - t0;
    }
    qsort(ftimes, (size_t)runs, sizeof(double), cmp_double);
    forward_ms = ftimes[runs / 2];
  }
  {
    const char *names[64];
    int64_t dims[64];
    const int64_t *bound = attnc_bindings_dims(b);
    char *line;
    for (i = 0; i < g->ndims && i < 64; i++) { names[i] = g->dim_names[i]; dims[i] = bound[i]; }
    if (attnc_explain(c->spec, NULL, names, dims, g->ndims, &text, &e) == ATTNC_OK &&
        (line = strstr(text, "  total")) != NULL) {
      flops = strtod(line + 7, NULL);
      /* causal and window: the FLOPs of the pairs the masks leave */
      if ((line = strstr(text, "  unmasked total")) != NULL) flops_unmasked = strtod(line + 16, NULL);
      /* a train spec: the backward's FLOPs, the forward it recomputes included */
      if ((line = strstr(text, "\nbackward (train")) != NULL && (line = strstr(line, "): ")) != NULL)
        pair_flops = strtod(line + 3, NULL);
      if (g->has_cache) {
        /* the pairs a run with cache_len = N attends to: query i sees keys
         * 0 .. N + i (window and mask not subtracted) */
        const char *sc = strstr(text, "  scores q.k"), *ws = strstr(text, "  weighted sum p.v");
        const double attend = (sc ? strtod(sc + 12, NULL) : 0) + (ws ? strtod(ws + 18, NULL) : 0);
        const double pairs = (double)sq * (double)cache_len + (double)sq * (double)(sq + 1) / 2;
        flops_unmasked = flops - attend + attend * pairs / ((double)sq * (double)cap);
      }
    }
  }
  {
    double med = times[runs / 2];
    /* --grad: GFLOP/s are the pair's FLOPs (explain's backward, which
     * recomputes the forward) over the pair's time; the unmasked ones, the
     * forward's over the forward's time */
    const double rate_ms = c->grad ? forward_ms : med;
    const long grad_bytes = attnc_bindings_grad_bytes(b), grad_scratch = attnc_bindings_grad_scratch_bytes(b);
    char grad[400] = "";
    const char *be = attnc_kernel_backend(k) == ATTNC_BACKEND_CC ? "cc" : "tcc";
    int threads = attnc_bindings_threads(b);
    long scratch = attnc_bindings_scratch_bytes(b);
    const char *isa = g->dtype != ATTNC_F64 ? attnc_isa() : "none (f64: plain C)";
    char unmasked[160] = "";
    if (c->json) {
      if (flops_unmasked > 0)
        snprintf(unmasked, sizeof unmasked, "\"gflops_unmasked\": %.3f, ", flops_unmasked / (rate_ms * 1e6));
      if (g->has_cache)
        snprintf(unmasked + strlen(unmasked), sizeof unmasked - strlen(unmasked), "\"cache_len\": %lld, \"cap\": %lld, ",
                 (long long)cache_len, (long long)cap);
      if (c->grad)
        snprintf(grad, sizeof grad, "\"forward_ms\": %.4f, \"backward_ms\": %.4f, \"forward_gflops\": %.3f, "
                 "\"grad_bytes\": %ld, \"grad_scratch_bytes\": %ld, ", forward_ms, med - forward_ms,
                 flops / (forward_ms * 1e6), grad_bytes, grad_scratch);
      printf("{\"median_ms\": %.4f, \"min_ms\": %.4f, \"gflops\": %.3f, %s%s\"compile_ms\": %.3f, \"backend\": \"%s\", "
             "\"threads\": %d, \"runs\": %d, \"warmups\": %ld, \"busy_cpus\": %.2f, \"isa\": \"%s\", "
             "\"scratch_bytes\": %ld, \"canonical\": \"%s\"}\n",
             med, times[0], (c->grad ? pair_flops : flops) / (med * 1e6), unmasked, grad, compile_ms, be, threads, runs,
             warmups, busy, isa, scratch,
             attnc_canonical(k));
    } else {
      if (flops_unmasked > 0)
        snprintf(unmasked, sizeof unmasked, " (%.2f over the unmasked pairs)", flops_unmasked / (rate_ms * 1e6));
      if (g->has_cache)
        snprintf(unmasked + strlen(unmasked), sizeof unmasked - strlen(unmasked), ", cache_len %lld of CAP %lld",
                 (long long)cache_len, (long long)cap);
      if (c->grad) {
        snprintf(grad, sizeof grad, "forward and backward: median %.3f ms (min %.3f) = forward %.3f + backward %.3f, "
                 "%.2f GFLOP/s; gradients %ld bytes, backward scratch %ld bytes\n",
                 med, times[0], forward_ms, med - forward_ms, pair_flops / (med * 1e6), grad_bytes, grad_scratch);
      }
      printf("%s\nbackend %s (%s primitives), %d thread%s: %s%s %.3f ms (min %.3f, %d runs after %ld warm-up), "
             "%.2f GFLOP/s%s, compile %.2f ms, scratch %ld bytes\n%s",
             attnc_canonical(k), be, isa, threads, threads == 1 ? "" : "s", c->grad ? "forward" : "median",
             c->grad ? " median" : "", c->grad ? forward_ms : med, c->grad ? ftimes[0] : times[0], runs, warmups,
             flops / (rate_ms * 1e6), unmasked, compile_ms, scratch, grad);
    }
  }
  rc = 0;
done:
  checker_inputs_free(in);
  caches_free(&cc);
  free(outs[0].data);
  free(outs[1].data);
  free(out.data);
  free(dout.data);
  free(times);
  free(ftimes);
  free(text);
  attnc_bindings_free(b);
  attnc_release(k);
  return rc;
}

/* The command nearest to a mistyped one (at most 2 edits), or NULL. */
static const char *nearest_command(const char *cmd)
{
  static const char *const cmds[] = { "run", "grad", "check", "gen", "show", "quantize", "explain", "bench", "cache" };
  const char *best = NULL;
  int best_d = 3;
  size_t i;
  for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    int dd = edit_distance(cmd, cmds[i]);
    if (dd < best_d) { best_d = dd; best = cmds[i]; }
  }
  return best;
}

/* 1 if base is a file the cc cache writes: NAME-KEY.so or spec-KEY.idx, KEY 16 hex digits. */
static int cache_file(const char *base)
{
  size_t n = strlen(base), i;
  const char *key;
  if (n > 20 && strcmp(base + n - 3, ".so") == 0) key = base + n - 19;
  else if (n == 25 && strncmp(base, "spec-", 5) == 0 && strcmp(base + 21, ".idx") == 0) key = base + 5;
  else return 0;
  if (key[-1] != '-') return 0;
  for (i = 0; i < 16; i++)
    if (!isxdigit((unsigned char)key[i])) return 0;
  return 1;
}

/* attnc cache list | clean */
static int cmd_cache(const char *what)
{
  char dir[3000];
  DIR *d;
  struct dirent *ent;
  long kernels = 0, index = 0, removed = 0;
  double bytes = 0;
  if (!what || (strcmp(what, "list") != 0 && strcmp(what, "clean") != 0)) {
    fprintf(stderr, "attnc: error: cache needs list or clean\n%s", help_for("cache"));
    return 2;
  }
  if (attnc_cc_cache_dir(dir, sizeof dir) != 0) return fail("the cache folder's path is too long%s", "");
  d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) { printf("%s: no cache yet (nothing compiled with --backend cc)\n", dir); return 0; }
    fprintf(stderr, "attnc: error: cannot open %s: %s\n", dir, strerror(errno));
    return 1;
  }
  while ((ent = readdir(d)) != NULL) {
    char path[4200];
    struct stat st;
    if (!cache_file(ent->d_name)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (strcmp(what, "clean") == 0) {
      if (unlink(path) == 0) { removed++; bytes += (double)st.st_size; }
      else fprintf(stderr, "attnc: warning: cannot delete %s: %s\n", path, strerror(errno));
      continue;
    }
    if (strncmp(ent->d_name, "spec-", 5) == 0) { index++; continue; }
    {
      char when[32];
      strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime(&st.st_mtime));
      printf("%-60s %10lld bytes  %s\n", ent->d_name, (long long)st.st_size, when);
    }
    kernels++;
    bytes += (double)st.st_size;
  }
  closedir(d);
  if (strcmp(what, "clean") == 0) printf("%s: deleted %ld files, %.0f bytes\n", dir, removed, bytes);
  else printf("%s: %ld kernels, %.0f bytes; %ld spec index entries\n", dir, kernels, bytes, index);
  return 0;
}

int main(int argc, char **argv)
{
  struct cli c;
  const char *help;
  int rc;
  memset(&c, 0, sizeof c);
  c.warmup_ms = -1;
  c.cache_len = -1;
  c.batch = -1;
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    fputs(USAGE, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "--version") == 0) { printf("attnc %s\n", ATTNC_VERSION); return 0; }
  if (strcmp(argv[1], "cache") == 0) {
    if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) { fputs(help_for("cache"), stdout); return 0; }
    if (argc > 3) { fprintf(stderr, "attnc: error: cache takes one word, list or clean\n%s", help_for("cache")); return 2; }
    return cmd_cache(argc > 2 ? argv[2] : NULL);
  }
  c.cmd = argv[1];
  help = help_for(c.cmd);
  if (!help) {
    const char *near = nearest_command(c.cmd);
    if (near)
      fprintf(stderr, "attnc: error: unknown command '%s' (did you mean '%s'?); attnc --help lists the commands\n", c.cmd, near);
    else
      fprintf(stderr, "attnc: error: unknown command '%s'\n%s", c.cmd, USAGE);
    return 2;
  }
  if ((rc = parse_args(&c, argc, argv)) != 0) {
    free(c.spec);
    return rc < 0 ? 0 : rc; /* -1: --help was printed */
  }
  if (c.grad && strcmp(c.cmd, "show") != 0 && strcmp(c.cmd, "bench") != 0 && strcmp(c.cmd, "check") != 0) {
    fprintf(stderr, "attnc: error: --grad is for check, show and bench%s\n",
            strcmp(c.cmd, "run") == 0 ? "; attnc grad SPEC --tensors FILE... --dout FILE --out FILE computes gradients" : "");
    free(c.spec);
    return 2;
  }
  if (c.dout && strcmp(c.cmd, "grad") != 0) {
    fprintf(stderr, "attnc: error: --dout is for grad (the gradient of out)\n");
    free(c.spec);
    return 2;
  }
  if (strcmp(c.cmd, "quantize") == 0) {
    if (c.spec) {
      fprintf(stderr, "attnc: error: quantize takes no SPEC (it reads weights by name)\n%s", help);
      free(c.spec);
      return 2;
    }
    return cmd_quantize(&c);
  }
  if (!c.spec) {
    fprintf(stderr, "attnc: error: '%s' needs a SPEC (a quoted spec string or @FILE)\n%s", c.cmd, help);
    return 2;
  }
  if (strcmp(c.cmd, "run") == 0) rc = cmd_run(&c);
  else if (strcmp(c.cmd, "grad") == 0) rc = cmd_grad(&c);
  else if (strcmp(c.cmd, "check") == 0) rc = cmd_check(&c);
  else if (strcmp(c.cmd, "gen") == 0) rc = cmd_gen(&c);
  else if (strcmp(c.cmd, "show") == 0) rc = cmd_show(&c);
  else if (strcmp(c.cmd, "explain") == 0) rc = cmd_explain(&c);
  else rc = cmd_bench(&c);
  free(c.spec);
  for (; c.ndims > 0; c.ndims--) free((char *)c.dim_names[c.ndims - 1]);
  return rc;
}
