#ifndef ATTNC_HEATMAP_H
#define ATTNC_HEATMAP_H
/* Write batch element `batch` (row-major over the batch axes) of weights w
 * of shape (batch axes..., H, Sq, Sk) as a standalone SVG, one panel per
 * head.  visible (same shape, or NULL for all) is 1 where the spec lets
 * query i see key j: a hidden cell of weight 0 is drawn hatched, apart from
 * every weight.  0 or -1 (errno set). */
int attnc_heatmap_svg(const char *path, const double *w, const unsigned char *visible, int rank, const long *shape,
                      long batch, const char *title);
#endif
