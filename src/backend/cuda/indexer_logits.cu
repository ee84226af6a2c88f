/* indexer_logits.cu - the lightning indexer's scores on the GPU
 * (dsk_indexer_logits; spec/indices.md §9), shared by cuda-sm90 and
 * cuda-sm120 under the portability rule: only mma.sync (f16 m16n8k16, fp32
 * accumulation), cp.async, cp.async.bulk with mbarriers, griddepcontrol,
 * warp shuffles, max.NaN and cvt e4m3x2->f16x2; no wgmma, TMEM or
 * clusters; shared memory <= 99 KB. Scores follow the CPU reference
 * (src/backend/cpu/ref_indexer.c) within the spec's bound. The top-k that
 * selects from them is in indexer_topk.cu; docs/indexer.md has the design
 * (v3).
 *
 * Scores (v3). CTA = 8 warps, one query row t, one chunk of `chunk`
 * candidates (a multiple of 128; the host picks it from the width, T and
 * the number of resident CTAs), the heads of one pass (<= 64; more heads
 * take several launches that add their partial sums).
 *  - Every warp holds all heads of the pass (NT n-tiles of 8: 64 heads in
 *    128 registers of f16 B fragments, 32 heads in 64) and scores one
 *    16-candidate m-tile of every 128-candidate stage: 8 k-steps x NT
 *    m16n8k16 MMAs (M = candidates, N = heads, K = dims), fp32
 *    accumulation. Each key is converted e4m3 -> f16 once (v2 converted it
 *    once per 32-head group). e4m3 products are exact in fp32, so the only
 *    rounding is the fp32 accumulation.
 *  - Each warp stages its own m-tiles through a 5-deep ring: one
 *    cp.async.bulk per block-table run, completion on the warp's mbarrier
 *    of the buffer, and 16 scales by cp.async. Pages of a multiple of 16
 *    entries (TILE, e.g. the models' 64) put every m-tile in one page: lane
 *    0 alone issues a 2 KB bulk copy of the records and a 64-byte one of
 *    the scales (v4; the general per-lane run search took a third of the
 *    warps' time). No block-wide barrier in the main loop. Records are
 *    stored unpadded (the fragment loads have a 2-way bank conflict).
 *  - The 128 dims are permuted identically in A and B (quad member c owns
 *    record bytes 32c..32c+31). Then relu(x) (max.NaN: NaN propagates),
 *    times w * q_scale of the column's head, summed over the heads
 *    (registers, then the quad), times the key scale: the warp stores its
 *    16 scores itself; missing entries get -inf.
 *  - The block-table entries of the chunk are read once into shared memory
 *    (the host caps the chunk so that they fit 256 entries), as page or -1.
 *  - columns >= min(L_t, ctx_width) get -inf; truncated rows are counted
 *    (counters[1]) by the CTA of chunk 0, missing entries once (counters[0]).
 *  fp8 (e4m3) MMAs would be twice as fast, but their accumulation precision
 *  on these GPUs is not documented; the spec bound (1e-5 of the row maximum)
 *  is kept with f16 MMAs (docs/indexer.md).
 */
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

#include "backend/indexer_rules.h"
#include "cuda_common.cuh"
#include "ptx.cuh"

namespace {

#include "indexer_logits_kernel.cuh"
#include "indexer_logits_q.cuh"

}  // namespace

/* DSK_INDEXER_QSMEM (compile-time; default 1 since Indexer v5 was timed on
 * an H100 on 2026-12-07: V3.2 / DSv4-Flash logits at 128K, T 64, 0.70x /
 * 0.77x; docs/benchmarks.md): 1 = passes of more than 32 heads run
 * indexer_logits_q_kernel (q in shared memory, 32 candidates per warp and
 * stage, two CTAs per SM); 0 = indexer_logits_kernel<8> for them (v4: q in
 * registers, one CTA per SM). */
#ifndef DSK_INDEXER_QSMEM
#define DSK_INDEXER_QSMEM 1
#endif

/* ============================================================ host side */


/* Candidates per CTA: a multiple of the kernel's stage (128 or 256) up to
 * its cap max_chunk (kMaxChunk or kMaxChunkQ), touching at most kBtCap
 * block-table entries, that minimises (waves of CTAs at the kernel's
 * residency) x (chunk + a fixed cost of 256 candidates per CTA). */
static int64_t logits_chunk(const dsk_ctx *ctx, int64_t T, int64_t W, int64_t pbs, int per_sm, int64_t stage,
                            int64_t max_chunk) {
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  const int64_t slots = sms * (per_sm > 0 ? per_sm : 1);
  int64_t cap = max_chunk;
  if (pbs < max_chunk) {
    cap = (int64_t)(kBtCap - 2) * pbs / stage * stage; /* blocks touched <= cap / pbs + 2 <= kBtCap */
    if (cap > max_chunk) cap = max_chunk;
    if (cap < stage) cap = stage; /* pbs 1: a stage of 256 touches 256 blocks (kBtCap) */
  }
  int64_t best = stage, best_cost = -1;
  for (int64_t c = stage; c <= cap; c += stage) {
    const int64_t ctas = T * ((W + c - 1) / c);
    const int64_t waves = (ctas + slots - 1) / slots;
    const int64_t cost = waves * ((c < W ? c : W) + 256);
    if (best_cost < 0 || cost < best_cost) {
      best = c;
      best_cost = cost;
    }
    if (c >= W) break;
  }
  return best;
}

extern "C" int64_t dsk__cuda_indexer_logits_smem_bytes(int64_t n_heads) {
  /* passes of <= 32 heads: indexer_logits_kernel; more: the q kernel (a
   * call of more than 64 heads runs both) */
  const int64_t q = DSK_INDEXER_QSMEM && n_heads > 32 ? lq_smem_bytes() : 0;
  return q > lg_smem_bytes() ? q : lg_smem_bytes();
}

extern "C" dsk_status dsk__cuda_indexer_logits(dsk_ctx *ctx, const dsk_indexer_logits_desc *d, int64_t skip_le) {
  if (d->T == 0) return DSK_STATUS_OK;
  DSK_CUDA_TRY("indexer_logits", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, d->stream);
  LogitsParams p = logits_params(d, skip_le);

  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  {
    const int64_t need = dsk__cuda_indexer_logits_smem_bytes(p.H);
    if (need > st->smem_optin)
      return dsk__fail(DSK_STATUS_UNSUPPORTED, "indexer_logits: kernel needs %lld B of shared memory, device allows %lld",
                       (long long)need, (long long)st->smem_optin);
  }
  /* passes of up to 64 heads: the first writes its partial sums, later ones
   * add theirs, the last applies the key scale (H <= 64: one pass) */
  for (int h0 = 0; h0 < p.H; h0 += kPassHeads) {
    p.h0 = h0;
    p.nh = p.H - h0 < kPassHeads ? p.H - h0 : kPassHeads;
    p.first = h0 == 0;
    p.last = h0 + kPassHeads >= p.H;
    /* pages of a multiple of 16 (q kernel: 32) entries: every aligned tile
     * lies in one page (lg_issue_tile) */
    const bool qk = DSK_INDEXER_QSMEM && p.nh > 32;
    const bool tile = p.pbs % (qk ? kQKeys : 16) == 0;
    void (*kern)(const LogitsParams) =
        qk ? (tile ? indexer_logits_q_kernel<true> : indexer_logits_q_kernel<false>)
        : p.nh <= 32 ? (tile ? indexer_logits_kernel<4, true> : indexer_logits_kernel<4, false>)
                     : (tile ? indexer_logits_kernel<8, true> : indexer_logits_kernel<8, false>);
    const int64_t smem = qk ? lq_smem_bytes() : lg_smem_bytes();
    DSK_CUDA_TRY("indexer_logits", cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 1;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, kLThreads, (size_t)smem) != cudaSuccess) {
      (void)cudaGetLastError(); /* not sticky; fall back to one CTA per SM */
      per_sm = 1;
    }
    p.chunk = logits_chunk(ctx, d->T, d->ctx_width, p.pbs, per_sm, qk ? kQStage : kStage,
                           qk ? kMaxChunkQ : kMaxChunk);
    const int64_t gx = (d->ctx_width + p.chunk - 1) / p.chunk;
    const int64_t gy = d->T < 65535 ? d->T : 65535;
    kern<<<dim3((unsigned)gx, (unsigned)gy), kLThreads, (size_t)smem, s>>>(p);
    DSK_CUDA_LAUNCHED("indexer_logits");
  }
  return DSK_STATUS_OK;
}
