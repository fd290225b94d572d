/* The calling convention shared by every generated kernel and the runtime.
 * A kernel is `int NAME_run(const attnc_args *args)`: 0 on success, 1 when
 * scratch memory could not be allocated. */
#ifndef ATTNC_ABI_V1
#define ATTNC_ABI_V1
enum attnc_slot {
  ATTNC_SLOT_X, ATTNC_SLOT_KV, ATTNC_SLOT_BIAS, ATTNC_SLOT_MASK,
  ATTNC_SLOT_Q, ATTNC_SLOT_K, ATTNC_SLOT_V,
  ATTNC_SLOT_WQ, ATTNC_SLOT_BQ, ATTNC_SLOT_WK, ATTNC_SLOT_BK, ATTNC_SLOT_WV, ATTNC_SLOT_BV,
  ATTNC_SLOT_WG, ATTNC_SLOT_BG, ATTNC_SLOT_WO, ATTNC_SLOT_BO,
  ATTNC_SLOT_COUNT
};
#define ATTNC_ABI_MAX_RANK 8
typedef struct attnc_args {
  const long *dims;                     /* sizes of the named dims, in NAME_dim_names order */
  const void *t[ATTNC_SLOT_COUNT];      /* tensors by slot, dense row-major; mask is unsigned char */
  long mask_stride[ATTNC_ABI_MAX_RANK]; /* mask element stride per batch axis (0 broadcasts), then Sk's */
  void *out;                            /* the output, dense row-major */
} attnc_args;
#endif
