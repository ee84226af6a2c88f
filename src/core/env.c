/* env.c - the single place that reads DSK_* environment variables. */
#include <stdio.h>
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

static const char *nonempty(const char *s) { return (s && *s) ? s : NULL; }

/* Copies s into dst; a value that does not fit is dropped (left "") so a
 * truncated path is never used. */
static void copy_str(char *dst, size_t n, const char *s) {
  dst[0] = 0;
  if (s && strlen(s) < n) memcpy(dst, s, strlen(s) + 1);
}

static void note_bad(dsk_env *env, const char *name) {
  size_t used = strlen(env->autotune_bad);
  if (used + strlen(name) + 2 < sizeof env->autotune_bad)
    snprintf(env->autotune_bad + used, sizeof env->autotune_bad - used, "%s%s", used ? " " : "", name);
}

/* Index of s in words (NULL-terminated), else fallback (and s is noted as bad). */
static int parse_word(dsk_env *env, const char *name, const char *s, const char *const *words, int fallback) {
  if (!s) return fallback;
  for (int i = 0; words[i]; i++)
    if (strcmp(s, words[i]) == 0) return i;
  note_bad(env, name);
  return fallback;
}

/* An integer in [lo, hi] (DSK_LOG_LEVEL, DSK_NUM_THREADS), else fallback
 * and the name noted in env->bad. DSK_LOG_LEVEL above 5 acts as 5 (the
 * caller clamps), so its hi is the parser's range. */
static int parse_ranged(dsk_env *env, const char *name, const char *s, int lo, int hi, int fallback) {
  if (!s) return fallback;
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end != s && *end == 0 && v >= lo && v <= hi) return (int)v;
  size_t used = strlen(env->bad);
  if (used + strlen(name) + 2 < sizeof env->bad)
    snprintf(env->bad + used, sizeof env->bad - used, "%s%s", used ? " " : "", name);
  return fallback;
}

void dsk__env_read(dsk_env *env) {
  memset(env, 0, sizeof *env);
  const char *b = dsk__getenv("DSK_BACKEND");
  if (b) {
    strncpy(env->backend, b, sizeof env->backend - 1);
  }
  env->log_level = parse_ranged(env, "DSK_LOG_LEVEL", dsk__getenv("DSK_LOG_LEVEL"), 0, 1000000, -1);
  env->num_threads = parse_ranged(env, "DSK_NUM_THREADS", dsk__getenv("DSK_NUM_THREADS"), 1, DSK_MAX_CPU_THREADS, 0);
  env->test_as_sm120 = parse_int(dsk__getenv("DSK_TEST_AS_SM120"), 0) != 0;
  env->bench_spin_us = parse_ranged(env, "DSK_BENCH_SPIN_US", dsk__getenv("DSK_BENCH_SPIN_US"), 10, 100000, 50);

  /* Autotune (spec/autotune.md §7). A value that is not understood keeps the
   * default and is named in autotune_bad (the tuner warns once). */
  copy_str(env->cache_dir, sizeof env->cache_dir, dsk__getenv("DSK_CACHE_DIR"));
  /* The XDG base-directory variables are not DSK_ settings; A13 names them. */
  copy_str(env->xdg_cache_home, sizeof env->xdg_cache_home, nonempty(getenv("XDG_CACHE_HOME")));
  copy_str(env->home, sizeof env->home, nonempty(getenv("HOME")));
  static const char *const k_autotune[] = {"0", "1", "force", NULL};
  static const char *const k_cache[] = {"rw", "ro", "off", NULL};
  static const char *const k_l2[] = {"auto", "cold", "warm", NULL};
  static const char *const k_bool[] = {"0", "1", NULL};
  env->autotune = parse_word(env, "DSK_AUTOTUNE", dsk__getenv("DSK_AUTOTUNE"), k_autotune, 1);
  env->autotune_cache = parse_word(env, "DSK_AUTOTUNE_CACHE", dsk__getenv("DSK_AUTOTUNE_CACHE"), k_cache, 0);
  env->autotune_l2 = parse_word(env, "DSK_AUTOTUNE_L2", dsk__getenv("DSK_AUTOTUNE_L2"), k_l2, 0);
  env->autotune_require_hit =
      parse_word(env, "DSK_AUTOTUNE_REQUIRE_HIT", dsk__getenv("DSK_AUTOTUNE_REQUIRE_HIT"), k_bool, 0);
  const char *mb = dsk__getenv("DSK_AUTOTUNE_MAX_MB");
  int max_mb = parse_int(mb, -1);
  env->autotune_max_mb = max_mb >= 1 ? max_mb : 2048;
  if (mb && max_mb < 1) note_bad(env, "DSK_AUTOTUNE_MAX_MB");
}
