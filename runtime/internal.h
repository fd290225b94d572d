/* Internal declarations shared by the runtime's files; not installed. */
#ifndef ATTNC_INTERNAL_H
#define ATTNC_INTERNAL_H

#include "attnc.h"

#if defined(__GNUC__)
#define ATTNC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ATTNC_PRINTF(a, b)
#endif

/* Fill err (if not NULL) with code and a formatted message; returns code. */
attnc_status attnc_err_set(attnc_error *err, attnc_status code, const char *fmt, ...) ATTNC_PRINTF(3, 4);
/* Clear err to ATTNC_OK. */
void attnc_err_clear(attnc_error *err);

#endif
