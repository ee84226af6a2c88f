/* core.h - internal services shared by every part of the library: error
 * text, logging, environment, the context struct. Not public API. */
#ifndef DSK_CORE_H
#define DSK_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dsk.h"

#if defined(__GNUC__)
#define DSK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DSK_PRINTF(a, b)
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct dsk_backend;
struct dsk__tuner;

/* Settings read from DSK_* variables in dsk_ctx_create (docs/environment.md). */
typedef struct dsk_env {
  char backend[32];   /* DSK_BACKEND */
  int log_level;      /* DSK_LOG_LEVEL, -1 unset */
  int num_threads;    /* DSK_NUM_THREADS, 0 unset */
  int test_as_sm120;  /* DSK_TEST_AS_SM120 */
  int bench_spin_us;  /* DSK_BENCH_SPIN_US: the CUDA bench's spin before each sample (default 50) */
  /* Autotune and its cache (spec/autotune.md §7; docs/autotune.md). Paths
   * are copied verbatim ("" = unset); src/tune checks them (A13). */
  char cache_dir[1024];      /* DSK_CACHE_DIR */
  char xdg_cache_home[1024]; /* XDG_CACHE_HOME (not a DSK_ variable: the XDG rule of A13) */
  char home[1024];           /* HOME */
  int autotune;              /* DSK_AUTOTUNE: 0, 1 (default), 2 = force */
  int autotune_cache;        /* DSK_AUTOTUNE_CACHE: 0 rw (default), 1 ro, 2 off */
  int autotune_l2;           /* DSK_AUTOTUNE_L2: 0 auto (default), 1 cold, 2 warm */
  int autotune_max_mb;       /* DSK_AUTOTUNE_MAX_MB: default 2048 */
  int autotune_require_hit;  /* DSK_AUTOTUNE_REQUIRE_HIT: 0 / 1 */
  char autotune_bad[160];    /* names of DSK_AUTOTUNE* variables whose value was not understood */
  char bad[160];             /* the same for DSK_LOG_LEVEL / DSK_NUM_THREADS (dsk_ctx_create warns) */
} dsk_env;

struct dsk_ctx {
  const struct dsk_backend *backend;
  dsk_ctx_info info;
  dsk_env env;
  int log_level;
  int num_threads;
  void *default_stream;  /* CUDA: stream created for the context */
  void *backend_state;   /* owned by the backend (init/fini) */
  struct dsk__tuner *tuner; /* src/tune: tuned entries, cache, counters; created on first use */
};

/* Sets the thread-local error text and returns st. Use as
 *   return dsk__fail(DSK_STATUS_INVALID_ARG, "sparse_mla_decode: H %lld ...", ...); */
dsk_status dsk__fail(dsk_status st, const char *fmt, ...) DSK_PRINTF(2, 3);
void dsk__set_error(const char *fmt, ...) DSK_PRINTF(1, 2);

/* Logging: ctx may be NULL (then level WARN applies). */
void dsk__log(const dsk_ctx *ctx, int level, const char *fmt, ...) DSK_PRINTF(3, 4);
/* Logs at WARN only the first time `key` is seen in this process. */
void dsk__warn_once(const dsk_ctx *ctx, const char *key, const char *fmt, ...) DSK_PRINTF(3, 4);

/* The only reader of the process environment (a test checks the names
 * against docs/environment.md). Returns NULL when unset or empty. */
const char *dsk__getenv(const char *name);
void dsk__env_read(dsk_env *env);

/* CPU */
int dsk__cpu_count(void);
const char *dsk__cpu_features(void); /* "avx2 fma f16c avx512f ..." or "" */

/* 64-byte aligned host allocation (NULL on failure). */
void *dsk__aligned_alloc(size_t bytes);
void dsk__aligned_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
