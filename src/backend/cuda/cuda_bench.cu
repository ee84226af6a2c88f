/* cuda_bench.cu - the CUDA clock for dsk_bench_run: one launch of fn between
 * two events per sample (dsk_bench_run divides it by opts.repeat); optional
 * cold L2 by a memset of 2 x L2 bytes outside the events. */
#include "cuda_common.cuh"

/* Keeps the stream busy for ~`ns` while the host enqueues the timed calls,
 * so the first event is not followed by an idle gap of host launch time. */
__global__ void dsk_bench_spin_kernel(long long ns) {
  long long t0 = clock64();
  /* clock64 counts SM cycles; 2 GHz is a safe over-estimate of the rate */
  while (clock64() - t0 < ns * 2) {
  }
}

extern "C" dsk_status dsk__cuda_bench_samples(dsk_ctx *ctx, dsk_bench_fn fn, void *user, const dsk_bench_opts *o,
                                              double *samples) {
  DSK_CUDA_TRY("dsk_bench_run", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, o->stream);
  void *flush = NULL;
  const size_t flush_bytes = 2 * (size_t)(ctx->info.l2_bytes > 0 ? ctx->info.l2_bytes : (64 << 20));
  if (o->flush_l2) DSK_CUDA_TRY("dsk_bench_run", cudaMalloc(&flush, flush_bytes));
  cudaEvent_t e0 = NULL, e1 = NULL;
  dsk_status st = DSK_STATUS_OK;
  cudaError_t ce = cudaEventCreate(&e0);
  if (ce == cudaSuccess) ce = cudaEventCreate(&e1);
  if (ce != cudaSuccess) st = dsk__fail(DSK_STATUS_DEVICE, "dsk_bench_run: cudaEventCreate: %s", cudaGetErrorString(ce));
  /* DSK_BENCH_SPIN_US (default 50): a longer spin shows whether a row's
   * time includes host enqueue time (docs/benchmarks.md, Method) */
  const long long spin_ns = 1000LL * (ctx->env.bench_spin_us > 0 ? ctx->env.bench_spin_us : 50);
  for (int i = 0; i < o->warmup && st == DSK_STATUS_OK; i++) st = fn(ctx, user);
  for (int i = 0; i < o->reps && st == DSK_STATUS_OK; i++) {
    if (flush) cudaMemsetAsync(flush, i & 0xff, flush_bytes, s);
    /* the spin (50 us) covers the host's enqueue of one call (descriptor
     * checks and a few launches); a repeated unit gets 30 us more per
     * repetition */
    dsk_bench_spin_kernel<<<1, 1, 0, s>>>(spin_ns + 30000LL * (o->repeat > 1 ? o->repeat - 1 : 0));
    cudaEventRecord(e0, s);
    st = fn(ctx, user);
    cudaEventRecord(e1, s);
    ce = cudaEventSynchronize(e1);
    if (st == DSK_STATUS_OK && ce != cudaSuccess)
      st = dsk__fail(DSK_STATUS_DEVICE, "dsk_bench_run: %s", cudaGetErrorString(ce));
    float ms = 0.f;
    cudaEventElapsedTime(&ms, e0, e1);
    samples[i] = ms * 1e3;
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (flush) cudaFree(flush);
  return st;
}

extern "C" dsk_status dsk__cuda_bench_copy(dsk_ctx *ctx, void *dst, const void *src, size_t bytes, double *us) {
  DSK_CUDA_TRY("dsk_bench_copy_bandwidth", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, NULL);
  cudaEvent_t e0, e1;
  DSK_CUDA_TRY("dsk_bench_copy_bandwidth", cudaEventCreate(&e0));
  DSK_CUDA_TRY("dsk_bench_copy_bandwidth", cudaEventCreate(&e1));
  cudaEventRecord(e0, s);
  cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
  cudaEventRecord(e1, s);
  cudaError_t ce = cudaEventSynchronize(e1);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (ce != cudaSuccess) return dsk__fail(DSK_STATUS_DEVICE, "dsk_bench_copy_bandwidth: %s", cudaGetErrorString(ce));
  *us = ms * 1e3;
  return DSK_STATUS_OK;
}
