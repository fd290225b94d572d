/* The tcc backend: libtcc compiles generated C in memory to a callable
 * kernel.  libtcc keeps global state, so every compile holds tcc_lock.
 * The kernel is compiled with -nostdlib and the few C library symbols it
 * uses are handed over explicitly, so no header or libtcc1.a has to exist
 * on the machine.  attnc_jit_find_fns serves the cc backend too. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libtcc.h>

#include "internal.h"

static pthread_mutex_t tcc_lock = PTHREAD_MUTEX_INITIALIZER;

struct tcc_errors {
  char text[1024];
  size_t len;
};

static void tcc_on_error(void *opaque, const char *msg)
{
  struct tcc_errors *e = opaque;
  size_t room = sizeof e->text - e->len;
  int n;
  if (room <= 1) return;
  n = snprintf(e->text + e->len, room, "%s%s", e->len ? "; " : "", msg);
  if (n > 0) e->len += ((size_t)n < room) ? (size_t)n : room - 1;
}

static char *concat3(const char *a, const char *b, const char *c)
{
  size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
  char *s = malloc(la + lb + lc + 1);
  if (!s) return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb);
  memcpy(s + la + lb, c, lc + 1);
  return s;
}

/* Remove C comments from text in place, keeping newlines (so line numbers
 * in libtcc's messages still match the generated source) and string and
 * character literals.  The generated code explains itself in comments; a
 * cold libtcc spends about a third of its compile time skipping them. */
static void strip_comments(char *text)
{
  char *r = text, *w = text;
  while (*r) {
    if (r[0] == '/' && r[1] == '*') {
      r += 2;
      while (*r && !(r[0] == '*' && r[1] == '/')) {
        if (*r == '\n') *w++ = '\n';
        r++;
      }
      if (*r) r += 2;
      *w++ = ' ';
    } else if (r[0] == '/' && r[1] == '/') {
      while (*r && *r != '\n') r++;
    } else if (*r == '"' || *r == '\'') {
      const char q = *r;
      *w++ = *r++;
      while (*r && *r != q && *r != '\n') {
        if (*r == '\\' && r[1]) *w++ = *r++;
        *w++ = *r++;
      }
      if (*r == q) *w++ = *r++;
    } else {
      *w++ = *r++;
    }
  }
  *w = '\0';
}

/* Look up the kernel's four entry points (the plain form's one) with get(handle, symbol). */
int attnc_jit_find_fns(const attnc_gen *g, void *(*get)(void *, const char *), void *h, attnc_kernel_fns *fns)
{
  char sym[160];
  snprintf(sym, sizeof sym, "%s_run", g->name);
  *(void **)&fns->run = get(h, sym);
  fns->backward = NULL;
  fns->backward_bytes = NULL;
  if (g->train) { /* spec key train: both forms have NAME_backward and NAME_backward_bytes */
    snprintf(sym, sizeof sym, "%s_backward", g->name);
    *(void **)&fns->backward = get(h, sym);
    snprintf(sym, sizeof sym, "%s_backward_bytes", g->name);
    *(void **)&fns->backward_bytes = get(h, sym);
    if (!fns->backward || !fns->backward_bytes) return 0;
  }
  if (g->plain) return fns->run != NULL; /* the plain form has no phases */
  snprintf(sym, sizeof sym, "%s_scratch_bytes", g->name);
  *(void **)&fns->scratch_bytes = get(h, sym);
  snprintf(sym, sizeof sym, "%s_phase_items", g->name);
  *(void **)&fns->phase_items = get(h, sym);
  snprintf(sym, sizeof sym, "%s_phase", g->name);
  *(void **)&fns->phase = get(h, sym);
  return fns->run && fns->scratch_bytes && fns->phase_items && fns->phase;
}

static void *tcc_get(void *h, const char *name) { return tcc_get_symbol((TCCState *)h, name); }

attnc_status attnc_jit_tcc(const attnc_gen *g, void **state, attnc_kernel_fns *fns, attnc_error *err)
{
  struct tcc_errors errors = { { 0 }, 0 };
  TCCState *s;
  char *text = concat3("#define ATTNC_JIT 1\n", g->header, g->source);
  if (!text) return attnc_err_set(err, ATTNC_ENOMEM, "out of memory");
  strip_comments(text);
  pthread_mutex_lock(&tcc_lock);
  s = tcc_new();
  if (!s) {
    pthread_mutex_unlock(&tcc_lock);
    free(text);
    return attnc_err_set(err, ATTNC_ENOMEM, "tcc_new failed");
  }
  tcc_set_error_func(s, &errors, tcc_on_error);
  tcc_set_options(s, "-nostdlib");
  tcc_set_output_type(s, TCC_OUTPUT_MEMORY);
  if (tcc_compile_string(s, text) < 0) goto fail;
  tcc_add_symbol(s, "malloc", (const void *)malloc);
  tcc_add_symbol(s, "free", (const void *)free);
  tcc_add_symbol(s, "exp", (const void *)exp);
  tcc_add_symbol(s, "expf", (const void *)expf);
  tcc_add_symbol(s, "log", (const void *)log);
  tcc_add_symbol(s, "logf", (const void *)logf);
  tcc_add_symbol(s, "tanh", (const void *)tanh);
  tcc_add_symbol(s, "tanhf", (const void *)tanhf);
  tcc_add_symbol(s, "cos", (const void *)cos);
  tcc_add_symbol(s, "sin", (const void *)sin);
  tcc_add_symbol(s, "pow", (const void *)pow);
  tcc_add_symbol(s, "memset", (const void *)memset);
  tcc_add_symbol(s, "memcpy", (const void *)memcpy);
  tcc_add_symbol(s, "memmove", (const void *)memmove);
  if (tcc_relocate(s, TCC_RELOCATE_AUTO) < 0) goto fail;
  if (!attnc_jit_find_fns(g, tcc_get, s, fns)) {
    tcc_on_error(&errors, "kernel symbols not found");
    goto fail;
  }
  pthread_mutex_unlock(&tcc_lock);
  free(text);
  *state = s;
  return ATTNC_OK;
fail:
  tcc_delete(s);
  pthread_mutex_unlock(&tcc_lock);
  free(text);
  return attnc_err_set(err, ATTNC_ECOMPILE, "libtcc rejected the generated code (a generator bug; please report): %s",
                       errors.len ? errors.text : "no message");
}

void attnc_jit_tcc_free(void *state)
{
  if (!state) return;
  pthread_mutex_lock(&tcc_lock);
  tcc_delete((TCCState *)state);
  pthread_mutex_unlock(&tcc_lock);
}
