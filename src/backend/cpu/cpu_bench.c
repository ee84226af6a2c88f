/* cpu_bench.c - the CPU clock for dsk_bench_run: monotonic time around each
 * call (CPU run calls return when done); cold L2 by writing a 64 MiB buffer. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

dsk_status dsk__cpu_bench_samples(dsk_ctx *ctx, dsk_bench_fn fn, void *user, const dsk_bench_opts *o,
                                  double *samples) {
  const size_t flush_bytes = (size_t)64 << 20;
  unsigned char *flush = NULL;
  if (o->flush_l2) {
    flush = (unsigned char *)malloc(flush_bytes);
    if (!flush) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_bench_run: flush buffer");
  }
  dsk_status st = DSK_STATUS_OK;
  for (int i = 0; i < o->warmup && st == DSK_STATUS_OK; i++) st = fn(ctx, user);
  for (int i = 0; i < o->reps && st == DSK_STATUS_OK; i++) {
    if (flush) memset(flush, i & 0xff, flush_bytes);
    double t0 = now_us();
    st = fn(ctx, user);
    samples[i] = now_us() - t0;
  }
  free(flush);
  return st;
}

dsk_status dsk__cpu_bench_copy(dsk_ctx *ctx, void *dst, const void *src, size_t bytes, double *us) {
  (void)ctx;
  double t0 = now_us();
  memcpy(dst, src, bytes);
  *us = now_us() - t0;
  return DSK_STATUS_OK;
}
