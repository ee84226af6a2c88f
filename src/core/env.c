/* env.c - the single place that reads DSK_* environment variables. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

const char *dsk__getenv(const char *name) {
  const char *v = getenv(name);
  return (v && *v) ? v : NULL;
}

static int parse_int(const char *s, int fallback) {
  if (!s) return fallback;
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end != 0 || v < -1000000 || v > 1000000) return fallback;
  return (int)v;
}

void dsk__env_read(dsk_env *env) {
  memset(env, 0, sizeof *env);
  const char *b = dsk__getenv("DSK_BACKEND");
  if (b) {
    strncpy(env->backend, b, sizeof env->backend - 1);
  }
  env->log_level = parse_int(dsk__getenv("DSK_LOG_LEVEL"), -1);
  env->num_threads = parse_int(dsk__getenv("DSK_NUM_THREADS"), 0);
  env->test_as_sm120 = parse_int(dsk__getenv("DSK_TEST_AS_SM120"), 0) != 0;
}
