/* status.c - status names, sentences and the thread-local last-error text. */
#include <stdio.h>
#include <string.h>

#include "core.h"

const char *dsk_status_name(dsk_status s) {
  switch (s) {
#define DSK_NAME_(name, value, text) \
  case DSK_STATUS_##name:            \
    return "DSK_STATUS_" #name;
    DSK_STATUS_MAP(DSK_NAME_)
#undef DSK_NAME_
  }
  return "DSK_STATUS_UNKNOWN";
}

const char *dsk_status_str(dsk_status s) {
  switch (s) {
#define DSK_TEXT_(name, value, text) \
  case DSK_STATUS_##name:            \
    return text;
    DSK_STATUS_MAP(DSK_TEXT_)
#undef DSK_TEXT_
  }
  return "unknown status code";
}

static _Thread_local char g_last_error[1024];

const char *dsk_last_error(void) { return g_last_error; }

void dsk_clear_error(void) { g_last_error[0] = 0; }

static void set_error_v(const char *fmt, va_list ap) {
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
}

void dsk__set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error_v(fmt, ap);
  va_end(ap);
}

dsk_status dsk__fail(dsk_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error_v(fmt, ap);
  va_end(ap);
  return st;
}
