/* Errors: every failure is a status plus a message; nothing is printed. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

attnc_status attnc_err_set(attnc_error *err, attnc_status code, const char *fmt, ...)
{
  va_list ap;
  if (!err) return code;
  err->code = code;
  err->where[0] = '\0';
  err->line = err->col = 0;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return code;
}

void attnc_err_clear(attnc_error *err)
{
  if (!err) return;
  memset(err, 0, sizeof *err);
}

const char *attnc_strerror(attnc_status s)
{
  switch (s) {
  case ATTNC_OK: return "success";
  case ATTNC_ESPEC: return "invalid spec";
  case ATTNC_EGEN: return "generator failure";
  case ATTNC_ECOMPILE: return "compilation failed";
  case ATTNC_EBIND: return "tensor does not fit the kernel";
  case ATTNC_EMISSING: return "tensor missing";
  case ATTNC_EIO: return "input/output error";
  case ATTNC_EFORMAT: return "malformed file";
  case ATTNC_ENOMEM: return "out of memory";
  case ATTNC_EARG: return "invalid argument";
  }
  return "unknown status";
}
