/* indexer_topk.cu - exact top-k on the GPU (dsk_topk and the top-k of
 * the fused indexer path; spec/indices.md §9), shared by cuda-sm90 and
 * cuda-sm120 under the portability rule (warp shuffles / votes / match,
 * griddepcontrol; no wgmma, TMEM or clusters; shared memory <= 99 KB). The
 * result is bit-identical to the CPU reference (src/backend/cpu/
 * ref_indexer.c) for identical scores. The scores it selects from come from
 * indexer_logits.cu; docs/indexer.md has the design (v3).
 *
 * Top-k. CTA = 1024 threads per row. Keys: the float's bits mapped to an
 * unsigned order (dsk__topk_key_from_bits: -0 = +0, NaN lowest); candidates
 * rank by the composite key << 32 | ~column (descending = score order, ties
 * lowest column first).
 *  - L <= K with the shortcut: 0..L-1 ascending, scores not read.
 *  - L <= 4096: all L composites are ordered in shared memory (rank_write).
 *  - else: a threshold g is taken from a sample of 2048..8192 keys
 *    (stratified, jittered columns; two 11-bit radix passes over the sample
 *    in shared memory) so that about 1.75 K + 64 keys of the row are >= g;
 *    one pass (float4 loads, L2 prefetch 256 KB ahead) appends the
 *    composite of every key >= g. If the count n is in [K, 8192], the top K
 *    of the row are exactly the top K of these n (n keys are >= g, so the K
 *    largest are), which rank_write orders.
 *  - Multi-CTA (few rows: T <= SMs / 2): the pass is split over P slices
 *    per row (topk_slice_kernel; every slice CTA computes the same g) into
 *    per-slice regions of the workspace with their counts (written on every
 *    call, never accumulated); the row's CTA (topk_kernel, launched with
 *    programmatic stream serialization) gathers them after
 *    griddepcontrol.wait. A region that overflowed makes that CTA redo the
 *    pass alone.
 *  - rank_write: 2048 buckets monotone in the key (linear in the value,
 *    else linear in the key; fp32 only); the composites of the buckets that
 *    start below K are scattered into bucket order, and position q's rank =
 *    composites in higher buckets + larger composites in its own bucket
 *    (buckets of <= 128; a warp scans one bucket with broadcast reads).
 *    Rows it cannot bucket (massive ties) are bitonic-sorted (<= 4096
 *    composites) or take the fallback.
 *  - otherwise (a poor sample, or massive ties): the exact fallback, radix
 *    select of the K-th largest key in three passes over the row (11, 11,
 *    10 bits; shared histograms with warp-aggregated atomics, block scan
 *    from the top), then one pass appends every key above it and collects
 *    the columns equal to it; the `need` lowest of those are kept (sorted in
 *    shared memory when <= 2048 of them, else an ordered block scan over
 *    the row); the K composites are ordered by rank_write (or bitonic).
 *  The result does not depend on the path: every path selects the K
 *  largest composites and orders them by the composite.
 */
#include <math.h>
#include <string.h>

#include "backend/indexer_rules.h"
#include "cuda_common.cuh"
#include "ptx.cuh"

namespace {

#include "indexer_topk_kernel.cuh"

}  // namespace

/* ============================================================ host side */

/* Multi-CTA top-k: P slices per row when a CTA per row leaves most SMs
 * idle (P = SMs / T, at most 32, slices of >= 2048 columns), so that one
 * long row is filtered by P CTAs; 0 = one CTA per row. Depends only on the
 * device, T and the width (plan and run agree). */
static int topk_slices(const dsk_ctx *ctx, int64_t T, int64_t width) {
  if (width <= kSortCap || T < 1) return 0;
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  int64_t P = sms / T;
  if (P > 32) P = 32;
  if (P > width / 2048) P = width / 2048;
  return P >= 2 ? (int)P : 0;
}
/* Workspace: counts [T][P] (uint32, the block rounded up to 256 bytes),
 * then the regions [T][P][C] (composites). */
static int64_t topk_ws_cnt_bytes(int64_t T, int P) { return (T * P * 4 + 255) / 256 * 256; }

extern "C" int64_t dsk__cuda_topk_workspace(const dsk_ctx *ctx, const dsk__topk_args *a) {
  const int P = topk_slices(ctx, a->T, a->width);
  if (P == 0) return 0;
  const int64_t C = topk_slice_cap(a->width, a->K, P);
  return topk_ws_cnt_bytes(a->T, P) + a->T * P * C * 8;
}

extern "C" dsk_status dsk__cuda_topk(dsk_ctx *ctx, const dsk__topk_args *a) {
  if (a->T == 0) return DSK_STATUS_OK;
  DSK_CUDA_TRY("topk", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, a->stream);
  TopkParams p;
  p.scores = a->scores;
  p.st = a->scores_stride_t;
  p.width = a->width;
  p.T = a->T;
  p.K = (int)a->K;
  p.lens = a->lens;
  p.pos = a->pos;
  p.sm = a->slot_mapping;
  p.ratio = a->ratio > 0 ? a->ratio : 1;
  p.shortcut = a->shortcut;
  p.out = a->out;
  p.out_st = a->out_stride_t;
  p.counters = (unsigned long long *)a->counters;
  p.P = topk_slices(ctx, a->T, a->width);
  p.C = p.P ? topk_slice_cap(a->width, a->K, p.P) : 0;
  p.ws_cnt = NULL;
  p.ws_cand = NULL;
  if (p.P) {
    const int64_t need = topk_ws_cnt_bytes(a->T, p.P) + a->T * p.P * p.C * 8;
    if (!a->workspace || a->workspace_bytes < need) /* the ops layer checks it; never run past it */
      return dsk__fail(DSK_STATUS_INVALID_ARG, "topk: workspace of %lld B needed, %lld given", (long long)need,
                       (long long)a->workspace_bytes);
    p.ws_cnt = (uint32_t *)a->workspace;
    p.ws_cand = (unsigned long long *)((uint8_t *)a->workspace + topk_ws_cnt_bytes(a->T, p.P));
  }
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  if (kTkSmem > st->smem_optin)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "topk: kernel needs %lld B of shared memory, device allows %lld",
                     (long long)kTkSmem, (long long)st->smem_optin);
  DSK_CUDA_TRY("topk",
               cudaFuncSetAttribute(topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kTkSmem));
  const int64_t grid = a->T < 2147483647LL ? a->T : 2147483647LL;
  if (!p.P) {
    topk_kernel<<<(unsigned)grid, kKT, (size_t)kTkSmem, s>>>(p);
    DSK_CUDA_LAUNCHED("topk");
    return DSK_STATUS_OK;
  }
  /* slices (T <= SMs / 2, so gridDim.y = T), then the final kernel with
   * programmatic stream serialization: its launch overlaps the slices; it
   * reads the workspace after griddepcontrol.wait */
  DSK_CUDA_TRY("topk", cudaFuncSetAttribute(topk_slice_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)kTkOffStart));
  topk_slice_kernel<<<dim3((unsigned)p.P, (unsigned)a->T), kKT, (size_t)kTkOffStart, s>>>(p);
  DSK_CUDA_LAUNCHED("topk");
  DSK_CUDA_TRY("topk", dsk__launch_pdl(topk_kernel, dim3((unsigned)grid), dim3(kKT), (size_t)kTkSmem, s, p));
  return DSK_STATUS_OK;
}
