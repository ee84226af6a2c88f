/* log.c - the process-wide log callback and the once-per-process warnings. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static dsk_log_fn g_log_fn;
static void *g_log_user;

void dsk_log_set(dsk_log_fn fn, void *user) {
  pthread_mutex_lock(&g_log_lock);
  g_log_fn = fn;
  g_log_user = user;
  pthread_mutex_unlock(&g_log_lock);
}

static void emit(int level, const char *msg) {
  pthread_mutex_lock(&g_log_lock);
  dsk_log_fn fn = g_log_fn;
  void *user = g_log_user;
  pthread_mutex_unlock(&g_log_lock);
  if (fn) {
    fn(level, msg, user);
  } else {
    fprintf(stderr, "dsk: %s\n", msg);
  }
}

static void log_v(const dsk_ctx *ctx, int level, const char *fmt, va_list ap) {
  int max_level = ctx ? ctx->log_level : DSK_LOG_WARN;
  if (level > max_level || level <= DSK_LOG_OFF) return;
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  emit(level, buf);
}

void dsk__log(const dsk_ctx *ctx, int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_v(ctx, level, fmt, ap);
  va_end(ap);
}

/* Once-per-process registry of warning keys (a small open hash of FNV-1a
 * hashes; a collision only suppresses a duplicate-looking warning). */
#define WARN_SLOTS 1024
static uint64_t g_warned[WARN_SLOTS];
static pthread_mutex_t g_warn_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h ? h : 1;
}

void dsk__warn_once(const dsk_ctx *ctx, const char *key, const char *fmt, ...) {
  uint64_t h = fnv1a(key);
  int first = 1;
  pthread_mutex_lock(&g_warn_lock);
  for (unsigned i = 0; i < WARN_SLOTS; i++) {
    uint64_t *slot = &g_warned[(h + i) % WARN_SLOTS];
    if (*slot == h) { first = 0; break; }
    if (*slot == 0) { *slot = h; break; }
  }
  pthread_mutex_unlock(&g_warn_lock);
  if (!first) return;
  va_list ap;
  va_start(ap, fmt);
  log_v(ctx, DSK_LOG_WARN, fmt, ap);
  va_end(ap);
}
