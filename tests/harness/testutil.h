/* testutil.h - small helpers for tests and the check harness: a seeded RNG,
 * fills, error metrics, check macros and a monotonic clock. Header-only. */
#ifndef DSK_TESTUTIL_H
#define DSK_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsk.h"

/* ---- RNG: splitmix64 seeded, xoshiro-free and reproducible everywhere */
typedef struct tu_rng { uint64_t s; } tu_rng;
/* The seed is hashed, so consecutive seeds give unrelated streams. */
static inline tu_rng tu_rng_make(uint64_t seed) {
  uint64_t z = seed + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 33)) * 0xFF51AFD7ED558CCDull;
  z = (z ^ (z >> 33)) * 0xC4CEB9FE1A85EC53ull;
  tu_rng r = {z ^ (z >> 33)};
  return r;
}
static inline uint64_t tu_next(tu_rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double tu_uniform(tu_rng *r) { return (double)(tu_next(r) >> 11) * (1.0 / 9007199254740992.0); }
/* integer in [lo, hi] */
static inline int64_t tu_int(tu_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(tu_next(r) % (uint64_t)(hi - lo + 1));
}
static inline double tu_normal(tu_rng *r) {
  double u1 = tu_uniform(r), u2 = tu_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static inline void tu_fill_bf16_normal(tu_rng *r, dsk_bf16 *p, size_t n, double sigma) {
  for (size_t i = 0; i < n; i++) p[i] = dsk_bf16_from_f32((float)(tu_normal(r) * sigma));
}
/* n normals from a block of at most 2^20 + 13 (an odd period, so rows do
 * not repeat in step) copied over the rest: filling hundreds of MiB one
 * normal at a time would take seconds. */
static inline void tu_fill_bf16_normal_rep(tu_rng *r, dsk_bf16 *p, size_t n, double sigma) {
  const size_t rep = ((size_t)1 << 20) + 13, blk = n < rep ? n : rep;
  tu_fill_bf16_normal(r, p, blk, sigma);
  for (size_t i = blk; i < n; i += blk) memcpy(p + i, p, sizeof *p * (n - i < blk ? n - i : blk));
}
/* Fisher-Yates: a random permutation of 0..n-1 */
static inline void tu_permutation(tu_rng *r, int64_t *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(tu_next(r) % (uint64_t)(i + 1));
    int64_t t = p[i]; p[i] = p[j]; p[j] = t;
  }
}

/* ---- metrics */
typedef struct tu_err { double rel_l2, max_abs, max_ref; int64_t nonfinite, n; } tu_err;
static inline void tu_err_add(tu_err *e, double ref, double out, double *num, double *den) {
  if (!isfinite(out)) e->nonfinite++;
  double d = fabs(out - ref);
  if (d > e->max_abs || d != d) e->max_abs = d;
  if (fabs(ref) > e->max_ref) e->max_ref = fabs(ref);
  *num += d * d;
  *den += ref * ref;
  e->n++;
}

/* ---- check macros: count, print, never abort */
typedef struct tu_counts { int passed, failed; } tu_counts;
#define TU_CHECK(cnt, cond, ...)                                              \
  do {                                                                        \
    if (cond) {                                                               \
      (cnt)->passed++;                                                        \
    } else {                                                                  \
      (cnt)->failed++;                                                        \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
    }                                                                         \
  } while (0)
#define TU_CHECK_OK(cnt, expr)                                                           \
  do {                                                                                   \
    dsk_status tu_st_ = (expr);                                                          \
    TU_CHECK(cnt, tu_st_ == DSK_STATUS_OK, "%s -> %s: %s", #expr, dsk_status_name(tu_st_), \
             dsk_last_error());                                                          \
  } while (0)
/* The closing line CI reads, and the exit code. */
static inline int tu_finish(const char *name, const tu_counts *c) {
  printf("%s: %d passed, %d failed\n", name, c->passed, c->failed);
  return c->failed ? 1 : 0;
}

/* ---- clock */
static inline double tu_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static inline int tu_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static inline double tu_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, tu_cmp_double);
  return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0.0;
}

/* A context for tests: device from DSK_TEST_DEVICE (default "cpu"). */
static inline dsk_ctx *tu_ctx(const char *device) {
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = device ? device : (getenv("DSK_TEST_DEVICE") ? getenv("DSK_TEST_DEVICE") : "cpu");
  dsk_ctx *ctx = NULL;
  dsk_status st = dsk_ctx_create(&ctx, &o);
  if (st != DSK_STATUS_OK) {
    fprintf(stderr, "dsk_ctx_create(%s): %s: %s\n", o.device, dsk_status_name(st), dsk_last_error());
    return NULL;
  }
  return ctx;
}

#endif
