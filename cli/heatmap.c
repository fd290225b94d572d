/* Attention weights as a standalone SVG: one heatmap per head of one batch
 * element, with axes, tick labels, a colour scale and a legend.  Large maps
 * are averaged down to at most MAX_CELLS cells a side so files stay small.
 * A cell whose keys the spec hides (mask, causal, window) and whose weight
 * is therefore 0 is hatched: no weight maps to that fill, so a masked cell
 * never passes for a visible key of weight 0.  A cell that holds a NaN is
 * flat grey, likewise apart from the scale. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "heatmap.h"

#define MAX_CELLS 128
#define PANEL 240.0
#define MARGIN 56.0

/* A perceptually ordered scale (dark blue -> green -> yellow). */
static void colour(double t, int *r, int *g, int *b)
{
  static const double stops[5][3] = {
    { 68, 1, 84 }, { 59, 82, 139 }, { 33, 145, 140 }, { 94, 201, 98 }, { 253, 231, 37 }
  };
  double x;
  int i;
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  x = t * 4;
  i = (int)x;
  if (i > 3) i = 3;
  x -= i;
  *r = (int)(stops[i][0] + (stops[i + 1][0] - stops[i][0]) * x + 0.5);
  *g = (int)(stops[i][1] + (stops[i + 1][1] - stops[i][1]) * x + 0.5);
  *b = (int)(stops[i][2] + (stops[i + 1][2] - stops[i][2]) * x + 0.5);
}

/* Fills outside the colour scale: hatched for masked cells, grey for NaN. */
#define MASKED_FILL "url(#masked)"
#define NAN_FILL "#a0a0a0"

/* "batch N of M", and with more than one batch axis the index on each:
 * "batch 5 of 6: (1, 2) of (2, 3)".  Empty without batch axes. */
static void batch_label(char *buf, size_t n, int rank, const long *shape, long batch)
{
  long nb = 1, rest = batch, idx[16];
  size_t len;
  int a, k = rank - 3;
  buf[0] = '\0';
  if (k <= 0) return;
  for (a = 0; a < k; a++) nb *= shape[a];
  len = (size_t)snprintf(buf, n, "batch %ld of %ld", batch, nb);
  if (k == 1 || k > 16) return;
  for (a = k - 1; a >= 0; a--) { idx[a] = rest % shape[a]; rest /= shape[a]; }
  for (a = 0; a < k && len < n; a++) len += (size_t)snprintf(buf + len, n - len, "%s%ld", a ? ", " : ": (", idx[a]);
  for (a = 0; a < k && len < n; a++) len += (size_t)snprintf(buf + len, n - len, "%s%ld", a ? ", " : ") of (", shape[a]);
  if (len < n) snprintf(buf + len, n - len, ")");
}

int attnc_heatmap_svg(const char *path, const double *w_all, const unsigned char *visible, int rank, const long *shape,
                      long batch, const char *title)
{
  long H = shape[rank - 3], Sq = shape[rank - 2], Sk = shape[rank - 1], h, i, j;
  long cq = Sq < MAX_CELLS ? Sq : MAX_CELLS, ck = Sk < MAX_CELLS ? Sk : MAX_CELLS;
  const double *w = w_all + (size_t)batch * (size_t)(H * Sq * Sk);
  const unsigned char *vis = visible ? visible + (size_t)batch * (size_t)(H * Sq * Sk) : NULL;
  int cols = H < 4 ? (int)H : 4, rows = (int)((H + cols - 1) / cols);
  double cw = PANEL / ck, chh = PANEL / cq, vmax = 0, width, height, top;
  int lines = 1, any_masked = 0, any_nan = 0;
  size_t len = 0, col = 0;
  char label[512];
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  batch_label(label, sizeof label, rank, shape, batch);
  for (i = 0; i < H * Sq * Sk; i++)
    if (w[i] > vmax) vmax = w[i];
  if (vmax <= 0) vmax = 1;
  width = cols * (PANEL + MARGIN) + MARGIN + 90;
  /* the title wraps at spaces to fit the width (about 6.5 px a character) */
  for (len = 0; title[len]; len++) {
    if (title[len] == ' ' && col > (size_t)((width - 2 * MARGIN) / 6.5)) { lines++; col = 0; }
    col++;
  }
  if (label[0]) lines++;
  top = 24 + 15 * lines;
  height = top + rows * (PANEL + MARGIN + 24);
  if (height < top + PANEL + 90) height = top + PANEL + 90; /* room for the legend under the scale */
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"sans-serif\" font-size=\"11\">\n", width, height, width, height);
  /* light grey stripes on white, at 45 degrees: no colour of the scale */
  fprintf(f, "<defs><pattern id=\"masked\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
             "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"white\"/>"
             "<rect width=\"2\" height=\"6\" fill=\"#c0c0c0\"/></pattern></defs>\n");
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"18\" font-size=\"11\"><tspan x=\"%.0f\" dy=\"0\">", MARGIN, MARGIN);
  for (i = 0, col = 0; title[i]; i++) { /* wrapped as counted above; escaped for XML */
    char ch = title[i];
    if (ch == ' ' && col > (size_t)((width - 2 * MARGIN) / 6.5)) {
      fprintf(f, "</tspan><tspan x=\"%.0f\" dy=\"15\">", MARGIN);
      col = 0;
      continue;
    }
    col++;
    if (ch == '<') fputs("&lt;", f); else if (ch == '>') fputs("&gt;", f); else if (ch == '&') fputs("&amp;", f);
    else fputc(ch, f);
  }
  if (label[0]) fprintf(f, "</tspan><tspan x=\"%.0f\" dy=\"15\" id=\"batch\">%s", MARGIN, label);
  fprintf(f, "</tspan></text>\n");
  for (h = 0; h < H; h++) {
    double x0 = MARGIN + (h % cols) * (PANEL + MARGIN), y0 = top + (h / cols) * (PANEL + MARGIN + 24);
    fprintf(f, "<g class=\"head\" id=\"head%ld\" shape-rendering=\"crispEdges\">\n", h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">head %ld</text>\n", x0, y0 - 6, h);
    for (i = 0; i < cq; i++)
      for (j = 0; j < ck; j++) {
        long i0 = i * Sq / cq, i1 = (i + 1) * Sq / cq, j0 = j * Sk / ck, j1 = (j + 1) * Sk / ck, a, b2, n = 0;
        double s = 0;
        int r, g, b, nan = 0, masked = 1;
        char fill[16];
        for (a = i0; a < i1; a++)
          for (b2 = j0; b2 < j1; b2++) {
            const size_t at = (size_t)((h * Sq + a) * Sk + b2);
            double v = w[at];
            if (isnan(v)) nan = 1; else s += v;
            /* hidden and 0: an empty row's uniform or NaN fill is drawn as it is */
            if (!vis || vis[at] || v != 0) masked = 0;
            n++;
          }
        if (nan) { snprintf(fill, sizeof fill, "%s", NAN_FILL); any_nan = 1; }
        else if (masked) { snprintf(fill, sizeof fill, "%s", MASKED_FILL); any_masked = 1; }
        else {
          colour(s / n / vmax, &r, &g, &b);
          snprintf(fill, sizeof fill, "#%02x%02x%02x", r, g, b);
        }
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
                x0 + j * cw, y0 + i * chh, cw + 0.02, chh + 0.02, fill);
      }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", x0, y0, PANEL, PANEL);
    /* ticks: first, middle and last index on each axis */
    for (i = 0; i < 3; i++) {
      long kq = i == 0 ? 0 : (i == 1 ? Sq / 2 : Sq - 1), kk = i == 0 ? 0 : (i == 1 ? Sk / 2 : Sk - 1);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%ld</text>\n", x0 - 4, y0 + (kq + 0.5) * PANEL / Sq + 4, kq);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%ld</text>\n", x0 + (kk + 0.5) * PANEL / Sk, y0 + PANEL + 14, kk);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">key j</text>\n", x0 + PANEL / 2, y0 + PANEL + 28);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">query i</text>\n",
            x0 - 34, y0 + PANEL / 2, x0 - 34, y0 + PANEL / 2);
    fprintf(f, "</g>\n");
  }
  { /* the colour scale, and under it the fills that are not weights */
    double x0 = width - 80, y0 = top, ly = top + PANEL + 18;
    int k;
    fprintf(f, "<g id=\"scale\">\n<text x=\"%.1f\" y=\"%.1f\">weight</text>\n", x0, y0 - 6);
    for (k = 0; k < 50; k++) {
      int r, g, b;
      colour(1 - k / 49.0, &r, &g, &b);
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"%.2f\" fill=\"#%02x%02x%02x\"/>\n", x0, y0 + k * PANEL / 50,
              PANEL / 50 + 0.05, r, g, b);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%.3g</text>\n", x0 + 20, y0 + 8, vmax);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">0</text>\n</g>\n", x0 + 20, y0 + PANEL);
    fprintf(f, "<g id=\"legend\">\n");
    if (any_masked) {
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"12\" fill=\"%s\" stroke=\"#808080\"/>\n", x0, ly, MASKED_FILL);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">masked</text>\n", x0 + 20, ly + 10);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\">key hidden</text>\n", x0 + 20, ly + 21);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\">by the spec</text>\n", x0 + 20, ly + 31);
      ly += 40;
    }
    if (any_nan) {
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"12\" fill=\"%s\"/>\n", x0, ly, NAN_FILL);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">NaN</text>\n", x0 + 20, ly + 10);
    }
    fprintf(f, "</g>\n");
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? 0 : -1;
}
