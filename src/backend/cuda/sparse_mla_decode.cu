/* sparse_mla_decode.cu - the launcher of the portable sparse MLA decode
 * kernels and their combine kernel, shared by cuda-sm90 and cuda-sm120.
 * Tactic v[1] (heads per CTA) picks the kernel: 8 = the 8-head kernel of
 * sparse_mla_k8.cuh (candidates as the MMA rows, a warp per 16-candidate
 * unit; the heuristic's for H <= 8 with at least 65,536 candidate slots),
 * 16 = the kernel described below (sparse_mla_k16.cuh; the heuristic's for
 * the other H <= 16), 32 = a 32-head
 * kernel (the heuristic's for H > 16): by default the raw-record kernel's
 * ACCURATE form (sparse_mla_k32f8.cuh, RC), with DSK_MLA32_REGCVT=0 the
 * kernel of sparse_mla_k32.cuh (docs/design.md, "The 32-head decode
 * kernel"). With precision FAST on cuda-sm120 (for now
 * only under DSK_TEST_AS_SM120=1: see launch), 32 heads run the kernel's
 * FAST form (sparse_mla_k32f8.cuh: e4m3 MMAs on the raw cache bytes, Q and P
 * in two e4m3 passes); every other FAST call runs the ACCURATE kernels
 * (spec §7 allows it).
 *
 * Only instructions that exist on sm_90 and sm_120 are used: mma.sync
 * (f16 and bf16 m16n8k16, e4m3 m16n8k32, fp32 accumulation), ldmatrix,
 * cp.async, cvt between e4m3x2 and f16x2.
 *
 * 16-head kernel: CTA = 4 warps (8 when the grid holds at most one CTA per SM,
 * "single wave": every CTA then runs alone on its SM, so its time is one
 * warp's dependent chain, and with 8 warps each warp does half the dims;
 * the choice is deterministic in the grid and the SM count, and the
 * workspace is the same; sparse_mla_k16.cuh lists the work of each warp in
 * both configurations), 16 heads (the m16 rows) of one query row, one split of the
 * row's 64-candidate chunks (segment 0 chunks, then segment 1; at cpb 1 with
 * at most one CTA per SM a split is one 32-candidate stage: stages_per_split). Candidates
 * are processed in stages of 32: the raw cache records are copied into
 * shared memory with cp.async (double buffer; invalid candidates are zero
 * filled, never read), then
 *  - QK: with 4 warps, warp w scores candidates 8w..8w+7 over all Dqk dims
 *    and writes their final scores (log2 domain, invalid ones -inf) to
 *    shared memory (DSK_MLA16_CSPLIT); with 8 warps, warp w scores all 32
 *    candidates over its share of the dims (Format A: half of nope tile
 *    w/2, rope k-step w for w < 4; Format B: nope tile w for w < 7, warp 7
 *    the four rope k-steps) and the softmax sums the 8 warps' partial
 *    scores. The fp8 nope
 *    part runs as f16 MMAs: e4m3 converts exactly to f16, and Q is converted
 *    to f16 after an exact power-of-two pre-scale per head that keeps it in
 *    range; Q's nope dims are stored fragment-interleaved
 *    (DSK_MLA_QIL_OFF), one 16-byte load per k-step. Each scale tile's
 *    partial sum is multiplied by that candidate's tile scale in fp32
 *    (exact for arbitrary Format A scales). The bf16 rope part runs as bf16
 *    MMAs.
 *  - online softmax in the log2 domain with a lazy maximum (a row's
 *    maximum moves only when a stage exceeds it by more than 2^8,
 *    DSK_MLA16_LAZY, so most stages skip the accumulators' rescale);
 *    invalid candidates get weight exactly 0 and no (-inf) - (-inf) is
 *    ever formed.
 *  - PV: warp w owns output dims 128w..128w+127 as two 64-dim halves (4
 *    warps; with 8, dims 64w..64w+63). The
 *    fp8 part is an f16 MMA with A = P * (scale_c / R), where R is the
 *    running maximum tile scale of that half (the accumulator is rescaled
 *    when R grows, like the softmax max), so A stays in [0, 1]; the bf16
 *    rope dims of Format B use a bf16 MMA with A = P.
 * Output dims are permuted inside each 64-dim half (MMA column n of n-tile
 * j is dim 8n + j) so that one 8-byte shared load feeds eight n-tiles.
 * With one split the CTA writes the final output (sink folded in);
 * otherwise it writes fp32 partials and the combine kernel merges them. */
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

#include <type_traits>

#include "cuda_common.cuh"
#include "ptx.cuh"
#include "sparse_mla_layout.h"

namespace {

#include "sparse_mla_common.cuh"
#include "sparse_mla_k16.cuh"
#include "sparse_mla_k32.cuh"
#include "sparse_mla_k32f8.cuh"
#include "sparse_mla_k8.cuh"
#include "sparse_mla_combine.cuh"
#include "sparse_mla_plan.cuh"

template <int F>
dsk_status launch(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *tc, cudaStream_t s) {
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  /* the FAST kernel passes on the H200 (ptxas expands its e4m3 MMAs into
   * exact f16 ones) but has not run on SM120's native e4m3 MMAs: until it
   * has, it runs only in the validation mode (DSK_TEST_AS_SM120=1, on an
   * H200 or natively on an SM120 machine; docs/design.md, "The FAST 32-head
   * kernel"), and cuda-sm120 serves FAST with ACCURATE */
  const bool fp8_ok = st->sm120_table != 0 && ctx->env.test_as_sm120;
  const LaunchPlan lp =
      launch_plan<F>(d, tc, ctx->info.sm_count, fp8_ok, DSK_MLA32_REGCVT);
  const Params &p = lp.p;
  const int smem = lp.smem;
  const int64_t blocks_x = lp.blocks_x;
  if (smem > st->smem_optin)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "sparse_mla_decode: kernel needs %d B of shared memory, device allows %lld",
                     smem, (long long)st->smem_optin);
  if (blocks_x > 2147483647LL || p.splits > 65535)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "sparse_mla_decode: grid %lld x %d is too large", (long long)blocks_x,
                     p.splits);
  const dim3 grid((unsigned)blocks_x, (unsigned)p.splits);
  if (lp.k8)
    sparse_mla_k8_kernel<F><<<grid, k8Threads, smem, s>>>(p);
  else if (lp.fp8)
    sparse_mla_k32f8_kernel<F, false><<<grid, k32Threads, smem, s>>>(p);
  else if (lp.wide) /* lp.rc == DSK_MLA32_REGCVT: one of the two is built */
#if DSK_MLA32_REGCVT
    sparse_mla_k32f8_kernel<F, true><<<grid, k32Threads, smem, s>>>(p);
#else
    sparse_mla_k32_kernel<F><<<grid, k32Threads, smem, s>>>(p);
#endif
  else if (lp.w8)
    sparse_mla_kernel<F, DSK_MLA_WARPS8><<<grid, kThreads8, smem, s>>>(p);
  else
    sparse_mla_kernel<F, DSK_MLA_WARPS><<<grid, kThreads, smem, s>>>(p);
  DSK_CUDA_LAUNCHED("sparse_mla_decode");
  if (p.splits > 1) {
    if (d->T * d->H > 2147483647LL) return dsk__fail(DSK_STATUS_UNSUPPORTED, "sparse_mla_decode: T*H too large");
    /* programmatic dependent launch: the combine's launch overlaps the
     * split kernel's tail (sm_90 and sm_120 both have it) */
    const dim3 cgrid((unsigned)(d->T * d->H));
    DSK_CUDA_TRY("sparse_mla_decode (combine)",
                 lp.combine_batch == 0   ? dsk__launch_pdl(sparse_mla_combine_kernel, cgrid, dim3(128), 0, s, p)
                 : lp.combine_batch == 2 ? dsk__launch_pdl(sparse_mla_combine_batched_kernel<2>, cgrid, dim3(128), 0, s, p)
                 : lp.combine_batch == 4 ? dsk__launch_pdl(sparse_mla_combine_batched_kernel<4>, cgrid, dim3(128), 0, s, p)
                 : lp.combine_batch == 8 ? dsk__launch_pdl(sparse_mla_combine_batched_kernel<8>, cgrid, dim3(128), 0, s, p)
                                         : dsk__launch_pdl(sparse_mla_combine_batched_kernel<32>, cgrid, dim3(128), 0, s, p));
  }
  return DSK_STATUS_OK;
}

}  // namespace

extern "C" int64_t dsk__cuda_sparse_mla_smem_bytes(dsk_kv_format f, int heads_per_cta) {
  if (heads_per_cta == DSK_MLA8_HEADS)
    return f == DSK_KV_FORMAT_A656 ? DSK_MLA8_SMEM_BYTES(1) : f == DSK_KV_FORMAT_B584 ? DSK_MLA8_SMEM_BYTES(2) : 0;
  if (heads_per_cta != 16 && heads_per_cta != DSK_MLA32_HEADS) return 0;
  const bool wide = heads_per_cta == DSK_MLA32_HEADS;
  /* 16 heads: the larger of its two configurations (8 warps) */
  if (f == DSK_KV_FORMAT_A656) return wide ? DSK_MLA32_SMEM_BYTES(1) : DSK_MLA_SMEM_BYTES_W(1, DSK_MLA_WARPS8);
  if (f == DSK_KV_FORMAT_B584) return wide ? DSK_MLA32_SMEM_BYTES(2) : DSK_MLA_SMEM_BYTES_W(2, DSK_MLA_WARPS8);
  return 0;
}

extern "C" int64_t dsk__cuda_sparse_mla_fast_smem_bytes(dsk_kv_format f) {
  if (f == DSK_KV_FORMAT_A656) return DSK_MLA32F8_SMEM_BYTES(1);
  if (f == DSK_KV_FORMAT_B584) return DSK_MLA32F8_SMEM_BYTES(2);
  return 0;
}

extern "C" int64_t dsk__cuda_sparse_mla_workspace(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d,
                                                  const dsk_tactic *t) {
  int splits = 1;
  stages_per_split(ctx->info.sm_count, d, t, &splits);
  return workspace_bytes(d, splits);
}

namespace {
/* Raise one kernel's shared-memory limit and read its residency. */
template <typename K>
dsk_status setup_kernel(const dsk_cuda_state *st, K kernel, int threads, int smem, int *ctas_per_sm) {
  *ctas_per_sm = 1;
  if (smem > st->smem_optin) return DSK_STATUS_OK; /* the launch reports it */
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return dsk__fail(DSK_STATUS_DEVICE, "dsk_ctx_create: cudaFuncSetAttribute (sparse_mla_decode): %s",
                     cudaGetErrorString(e));
  }
  int n = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, (size_t)smem);
  if (e != cudaSuccess) cudaGetLastError();
  /* cuda-sm120: 128 KB of shared memory per SM holds one CTA */
  *ctas_per_sm = st->sm120_table ? 1 : (n > 0 ? n : 1);
  return DSK_STATUS_OK;
}
}  // namespace

extern "C" dsk_status dsk__cuda_sparse_mla_setup(dsk_cuda_state *st) {
  dsk_status r;
  const int A = DSK_KV_FORMAT_A656, B = DSK_KV_FORMAT_B584;
  int unused;
  if ((r = setup_kernel(st, sparse_mla_kernel<1, DSK_MLA_WARPS>, kThreads, DSK_MLA_SMEM_BYTES(1),
                        &st->mla_ctas_per_sm[0][A])) ||
      (r = setup_kernel(st, sparse_mla_kernel<2, DSK_MLA_WARPS>, kThreads, DSK_MLA_SMEM_BYTES(2),
                        &st->mla_ctas_per_sm[0][B])) ||
      (r = setup_kernel(st, sparse_mla_kernel<1, DSK_MLA_WARPS8>, kThreads8,
                        DSK_MLA_SMEM_BYTES_W(1, DSK_MLA_WARPS8), &unused)) ||
      (r = setup_kernel(st, sparse_mla_kernel<2, DSK_MLA_WARPS8>, kThreads8,
                        DSK_MLA_SMEM_BYTES_W(2, DSK_MLA_WARPS8), &unused)) ||
      (r = setup_kernel(st, sparse_mla_k8_kernel<1>, k8Threads, DSK_MLA8_SMEM_BYTES(1), &st->mla_ctas_per_sm[2][A])) ||
      (r = setup_kernel(st, sparse_mla_k8_kernel<2>, k8Threads, DSK_MLA8_SMEM_BYTES(2), &st->mla_ctas_per_sm[2][B])) ||
      (r = setup_kernel(st, sparse_mla_k32f8_kernel<1>, k32Threads, DSK_MLA32F8_SMEM_BYTES(1), &unused)) ||
      (r = setup_kernel(st, sparse_mla_k32f8_kernel<2>, k32Threads, DSK_MLA32F8_SMEM_BYTES(2), &unused)))
    return r;
  /* the ACCURATE 32-head kernel of this build (its residency counts) */
#if DSK_MLA32_REGCVT
  if ((r = setup_kernel(st, sparse_mla_k32f8_kernel<1, true>, k32Threads, DSK_MLA32F8_SMEM_BYTES(1),
                        &st->mla_ctas_per_sm[1][A])) ||
      (r = setup_kernel(st, sparse_mla_k32f8_kernel<2, true>, k32Threads, DSK_MLA32F8_SMEM_BYTES(2),
                        &st->mla_ctas_per_sm[1][B])))
    return r;
#else
  if ((r = setup_kernel(st, sparse_mla_k32_kernel<1>, k32Threads, DSK_MLA32_SMEM_BYTES(1), &st->mla_ctas_per_sm[1][A])) ||
      (r = setup_kernel(st, sparse_mla_k32_kernel<2>, k32Threads, DSK_MLA32_SMEM_BYTES(2), &st->mla_ctas_per_sm[1][B])))
    return r;
#endif
  st->mla_ready = 1;
  return DSK_STATUS_OK;
}

extern "C" int dsk__cuda_sparse_mla_ctas_per_sm(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, int heads_per_cta) {
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  const int f = (int)d->format;
  const int w = heads_per_cta == DSK_MLA32_HEADS ? 1 : heads_per_cta == DSK_MLA8_HEADS ? 2 : 0;
  return (f == DSK_KV_FORMAT_A656 || f == DSK_KV_FORMAT_B584) ? st->mla_ctas_per_sm[w][f] : 1;
}

extern "C" dsk_status dsk__cuda_sparse_mla_decode(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t) {
  if (d->T == 0) return DSK_STATUS_OK;
  DSK_CUDA_TRY("sparse_mla_decode", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, d->stream);
  if (d->format == DSK_KV_FORMAT_A656) return launch<1>(ctx, d, t, s);
  if (d->format == DSK_KV_FORMAT_B584) return launch<2>(ctx, d, t, s);
  return dsk__fail(DSK_STATUS_INVALID_ARG, "sparse_mla_decode: unknown format %d", (int)d->format);
}
