/* bench.c - timing driver shared by `dsk bench` and the tuner: argument
 * checks, the median over the backend's samples, and the copy-bandwidth
 * measurement. The backends supply the clock (events or monotonic). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

dsk_status dsk_bench_run(dsk_ctx *ctx, dsk_bench_fn fn, void *user, const dsk_bench_opts *o,
                         dsk_bench_result *r) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_run: ctx is NULL");
  if (!fn) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_run: fn is NULL");
  if (!o || !r) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_run: %s is NULL", o ? "result" : "opts");
  /* opts grew `repeat` at its end: a struct_size that stops before it reads
   * it as 0 (once) */
  if (o->struct_size < offsetof(dsk_bench_opts, repeat) || r->struct_size < sizeof *r)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_run: struct_size too small (opts %zu, result %zu)",
                     o->struct_size, r->struct_size);
  dsk_bench_opts oo;
  memset(&oo, 0, sizeof oo);
  memcpy(&oo, o, o->struct_size < sizeof oo ? o->struct_size : sizeof oo);
  oo.struct_size = sizeof oo;
  o = &oo;
  if (o->warmup < 0 || o->reps < 1 || o->reps > 100000)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_run: warmup %d / reps %d out of range", o->warmup, o->reps);
  if (o->repeat < 0 || o->repeat > 10000)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_run: repeat %d out of range (0..10000)", o->repeat);
  if (o->repeat == 0) oo.repeat = 1;
  if (!ctx->backend->bench_samples)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "dsk_bench_run: backend %s has no timer", ctx->backend->name);
  double *s = (double *)malloc(sizeof(double) * (size_t)o->reps);
  if (!s) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_bench_run: out of host memory");
  dsk_status st = ctx->backend->bench_samples(ctx, fn, user, o, s);
  if (st == DSK_STATUS_OK) {
    for (int i = 0; i < o->reps; i++) s[i] /= (double)o->repeat;
    qsort(s, (size_t)o->reps, sizeof *s, cmp_double);
    int n = o->reps;
    r->median_us = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    r->min_us = s[0];
    r->max_us = s[n - 1];
    r->reps = n;
  }
  free(s);
  return st;
}

dsk_status dsk_bench_copy_bandwidth(dsk_ctx *ctx, size_t bytes, double *gbps) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_copy_bandwidth: ctx is NULL");
  if (!gbps) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_copy_bandwidth: gbps is NULL");
  if (bytes < 4096) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_bench_copy_bandwidth: bytes %zu < 4096", bytes);
  if (!ctx->backend->bench_copy)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "dsk_bench_copy_bandwidth: backend %s has no timer", ctx->backend->name);
  void *a = NULL, *b = NULL;
  dsk_status st = dsk_mem_alloc(ctx, &a, bytes);
  if (st == DSK_STATUS_OK) st = dsk_mem_alloc(ctx, &b, bytes);
  if (st == DSK_STATUS_OK) st = dsk_mem_set(ctx, a, 0x5A, bytes);
  double us[13];
  for (int i = 0; st == DSK_STATUS_OK && i < 13; i++) st = ctx->backend->bench_copy(ctx, b, a, bytes, &us[i]);
  if (st == DSK_STATUS_OK) {
    qsort(us + 3, 10, sizeof(double), cmp_double);
    double med = 0.5 * (us[3 + 4] + us[3 + 5]);
    *gbps = med > 0 ? 2.0 * (double)bytes / (med * 1e3) : 0.0;
  }
  if (a) dsk_mem_free(ctx, a);
  if (b) dsk_mem_free(ctx, b);
  return st;
}
