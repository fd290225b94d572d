#ifndef ATTNC_HEATMAP_H
#define ATTNC_HEATMAP_H
/* Write weights of shape (..., H, Sq, Sk) (the first batch index is drawn)
 * as a standalone SVG; 0 or -1 (errno set). */
int attnc_heatmap_svg(const char *path, const double *w, int rank, const long *shape, const char *title);
#endif
