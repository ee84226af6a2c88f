/* mhc.cu - the CUDA mHC ops (spec/mhc.md; docs/mhc.md): the split
 * projection (dsk_mhc_prenorm, and the projection of dsk_mhc_head), the
 * per-token finish (dsk_mhc_pre: split sums, RMS factor, sigmoids, Sinkhorn,
 * weighted stream sum, optional fused RMSNorm; the head's finish), and
 * dsk_mhc_post, and the fused dsk_mhc_post_prenorm (the projection kernel
 * forming R' on the way in). Portable CUDA (fp32 FMA on CUDA cores, cp.async, warp
 * shuffles, griddepcontrol; no wgmma, TMEM, clusters or tensor-core MMA):
 * one source for sm_90 and sm_120a/121a, at most 97.3 KB of shared memory per
 * block (dsk__cuda_mhc_smem_bytes; the fused post + prenorm's T16 ring).
 *
 * Descriptors arrive validated (src/ops/mhc.c): T >= 1, D a multiple of 8,
 * nD = 4 D, every vector-accessed tensor 16-byte aligned with 16-byte row
 * strides, S = tactic->v[0] in 1..S_max (<= 256).
 *
 * Launches: one kernel per op (dsk_mhc_head: two, projection + finish).
 * Every kernel is launched with programmatic stream serialization (PDL) and
 * calls griddepcontrol.wait before it touches any memory that an earlier
 * kernel in the stream may write (R, partials, out, post, C, and every
 * output), then griddepcontrol.launch_dependents. Before the wait a kernel
 * reads only the op's constant parameters (fn, scale, base, norm_w, the
 * head's fn / scale / base): the projection starts copying its first fn
 * stages to shared memory, the finish loads scale and base into registers
 * and prefetches norm_w to L2. Contract (docs/mhc.md): those parameters are
 * not written by a kernel that may still be running when the mHC op is
 * enqueued (weights are uploaded, or written by a kernel followed by a
 * synchronising operation, before the first use).
 *
 * Summation orders (fixed, independent of T and of every tiling choice, so a
 * pinned S gives batch-invariant bits):
 *  - projection of (token, split s, output j) and the split's sum of
 *    squares: lane l of a warp owns the columns kb + 128 i + 4 l + c
 *    (c = 0..3, i ascending), accumulating with fmaf in (i, c) order from 0;
 *    the 32 lane sums are combined by the xor tree of masks 16, 8, 4, 2, 1
 *    (pairs differing in lane bit 4 first). The kernel evaluates that tree
 *    by recursive halving (each step sends half of the values, same tree,
 *    same bits as a full butterfly). Empty splits write 0.
 *  - finish: warp w (0..8) sums the splits s = w, w + 9, ... of a value in
 *    ascending s, then the nine warp sums are added in warp order;
 *    y = fmaf chain over streams i = 0..3.
 * TF32: fn is rounded to TF32 (nearest, ties away: the same bit rule as the
 * CPU reference) and the products stay on fp32 FMA; numerics of TF32, not
 * its speed (docs/mhc.md lists the MMA path as not done).
 */
#include <string.h>

#include <type_traits>

#include "cuda_common.cuh"

namespace {

/* ------------------------------------------------------- PTX wrappers
 * (what mhc_kernels.cuh calls; tests/emu_mhc.cc emulates the same names) */
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

/* 1/x for the Sinkhorn sums (x in ~[1e-6, 5]: no denormals): the hardware
 * approximation, at most 1 ulp off (PTX ISA). A row or column then shares
 * one reciprocal, so an error of the reciprocal rescales the whole row or
 * column, which the next normalisation corrects. Host model of the whole
 * iteration (rcp off by +-1 ulp at random) vs fp64, 200k matrices each:
 * entries within 3.5e-7 for logits U[-1, 1] and N(0, s^2), s = 1, 4, 8
 * (bound 1e-5); row / column sums within 1.4e-6 of 1 on U[-1, 1]. */
__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

/* bar.sync 1, N: the N threads of the finish kernel's y warps (warp 0 has
 * left by then) */
template <int N>
__device__ __forceinline__ void bar_sync_1() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(N) : "memory");
}
#define DSK_MHC_STATIC

#include "mhc_kernels.cuh"

/* ------------------------------------------------------------ launchers */

/* Dynamic shared memory above the default 48 KB needs the opt-in attribute
 * (a host-side call, allowed while a stream captures). */
template <typename K>
cudaError_t smem_optin(K kernel, int64_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* Projection configurations (they change only which CTA and warp serve a
 * (token, split, output), never a summation order):
 *   T1   T == 1         1-warp CTAs, one per (split, output group): 4 S CTAs
 *   T4   T <= 4         the same with up to 4 tokens per warp
 *   T8   T <= 8, or too few 16-token tiles to cover the SMs: 8 tokens per warp
 *   T16  4-warp CTAs of 16 tokens (all 24 outputs), 3-stage ring (48 KB)
 *   T32  8-warp CTAs of 32 tokens (two token groups share each fn stage),
 *        4-stage ring (80 KB): when S * ceil(T / 32) CTAs cover the SMs. */
enum ProjCfg { kProjT1, kProjT4, kProjT8, kProjT16, kProjT32 };
using ShapeT1 = ProjShape<DSK_MHC_MIX, 1, 1, 1, 4>;
using ShapeT4 = ProjShape<DSK_MHC_MIX, 4, 1, 1, 4>;
using ShapeT8 = ProjShape<DSK_MHC_MIX, 8, 1, 1, 4>;
using ShapeT16 = ProjShape<DSK_MHC_MIX, 16, 4, 1, 3>;
using ShapeT32 = ProjShape<DSK_MHC_MIX, 16, 4, 2, 4>;

int project_config(int64_t T, int64_t S, int sms, int64_t smem_limit) {
  if (T == 1) return kProjT1;
  if (T <= 4) return kProjT4;
  if (T <= 8) return kProjT8;
  const int64_t tiles32 = S * ((T + 31) / 32), tiles16 = S * ((T + 15) / 16);
  if (tiles32 >= sms && ShapeT32::SMEM <= smem_limit) return kProjT32;
  if (tiles16 >= sms) return kProjT16;
  return kProjT8;
}

/* The fused post + prenorm (POST) configurations: 4-warp CTAs of all 24
 * outputs (one CTA per split and token tile, so each R' value is formed
 * once per split; with prenorm's 1-warp CTAs per output group it would be
 * formed four times, serially in one warp) of 1, 4 or 8 tokens while
 * T <= 8 (4-stage rings, up to 90 KB); above, PT16: 8-warp CTAs of 16
 * tokens (two token groups of 8 share each fn stage) with a 3-stage ring
 * of 96 KB (2 stages where the opt-in limit is lower). T32's five x slots
 * per stage would not fit. */
using ShapePostT16 = ProjShape<DSK_MHC_MIX, 8, 4, 2, 3, true>;

/* DSK_MHC_LANE_GROUPS (compile time; docs/benchmarks.md, mHC v6): the
 * projection's warps in lane groups (mhc_kernels.cuh, TG; the same bits,
 * fewer cross-lane sums). 0 none; 1 the plain projection's 16-token warps
 * (T16, T32) in four groups (device run 43, H100: prenorm at T 64 0.91x
 * on DSv4-Flash, 0.89x on DSv4-Pro); 2 (default) also its 8-token warps
 * (T8) in two (device run 44: prenorm at T 16 0.94-0.95x, head
 * 0.92-0.94x); 3 also the fused post + prenorm's 8-token warps (T <= 8
 * and PT16; run 44: the fused sublayer at T 16 0.98-0.99x but DSv4-Pro's
 * at T 64 1.03x slower, so it stays off). */
#ifndef DSK_MHC_LANE_GROUPS
#define DSK_MHC_LANE_GROUPS 2
#endif
constexpr int proj_tg(int tw, bool post = false) {
  return DSK_MHC_LANE_GROUPS >= 1 && tw >= 16 && !post                                  ? 4
         : tw == 8 && (post ? DSK_MHC_LANE_GROUPS >= 3 : DSK_MHC_LANE_GROUPS >= 2) ? 2
                                                                                   : 1;
}

template <int NOUT, int TW, int WG, int WT, int NSTG, bool POST = false, int TG = 1>
cudaError_t launch_project_cfg(bool tf32, cudaStream_t st, const ProjParams &pp, int64_t S) {
  using Sh = ProjShape<NOUT, TW, WG, WT, NSTG, POST>;
  const dim3 grid(dsk__ceil_div_u(pp.T, Sh::TT), (unsigned)S, kOutGroups / WG);
  void (*kern)(const ProjParams) = tf32 ? mhc_project_kernel<NOUT, TW, WG, WT, NSTG, true, POST, TG>
                                        : mhc_project_kernel<NOUT, TW, WG, WT, NSTG, false, POST, TG>;
  cudaError_t e = smem_optin(kern, Sh::SMEM);
  if (e != cudaSuccess) return e;
  return dsk__launch_pdl(kern, grid, dim3(Sh::NT), (size_t)Sh::SMEM, st, pp);
}

template <int NOUT>
cudaError_t launch_project(const dsk_ctx *ctx, bool tf32, cudaStream_t st, const uint16_t *R, int64_t R_stride,
                           const float *fn, int64_t T, int64_t nD, int64_t S, float *d, float *q) {
  ProjParams pp;
  pp.R = R;
  pp.R_stride = R_stride;
  pp.fn = fn;
  pp.T = T;
  pp.nD = nD;
  pp.Kc = dsk_mhc_split_width(nD, S);
  pp.d = d;
  pp.q = q;
  const int sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  switch (project_config(T, S, sms, dsk__cuda_state(ctx)->smem_optin)) {
    case kProjT1: return launch_project_cfg<NOUT, 1, 1, 1, 4>(tf32, st, pp, S);
    case kProjT4: return launch_project_cfg<NOUT, 4, 1, 1, 4>(tf32, st, pp, S);
    case kProjT8: return launch_project_cfg<NOUT, 8, 1, 1, 4, false, proj_tg(8)>(tf32, st, pp, S);
    case kProjT16: return launch_project_cfg<NOUT, 16, 4, 1, 3, false, proj_tg(16)>(tf32, st, pp, S);
    default: return launch_project_cfg<NOUT, 16, 4, 2, 4, false, proj_tg(16)>(tf32, st, pp, S);
  }
}

cudaError_t launch_post_project(const dsk_ctx *ctx, bool tf32, cudaStream_t st, const ProjParams &pp, int64_t S) {
  if (pp.T == 1) return launch_project_cfg<DSK_MHC_MIX, 1, 4, 1, 4, true>(tf32, st, pp, S);
  if (pp.T <= 4) return launch_project_cfg<DSK_MHC_MIX, 4, 4, 1, 4, true>(tf32, st, pp, S);
  if (pp.T <= 8) return launch_project_cfg<DSK_MHC_MIX, 8, 4, 1, 4, true, proj_tg(8, true)>(tf32, st, pp, S);
  if (ShapePostT16::SMEM + ShapePostT16::MIX_BYTES <= dsk__cuda_state(ctx)->smem_optin)
    return launch_project_cfg<DSK_MHC_MIX, 8, 4, 2, 3, true, proj_tg(8, true)>(tf32, st, pp, S);
  return launch_project_cfg<DSK_MHC_MIX, 8, 4, 2, 2, true, proj_tg(8, true)>(tf32, st, pp, S);
}

/* R vectors per stream and y thread loaded at entry: all of them for D <= 4096. */
int finish_prefetch(int64_t D) { return D / 8 <= 2 * kYThreads ? 2 : 4; }

/* Loads in flight per lane of the finish kernel's split sum. */
int finish_split_batch(int64_t S) { return S <= (int64_t)kSplitBatchSmall * kFinishWarps ? kSplitBatchSmall : kSplitBatchLarge; }

template <int NOUT, bool NORM, int PF>
cudaError_t launch_finish_pf(cudaStream_t st, const FinishParams &p) {
  const int64_t smem = finish_dyn_bytes(p.D, NORM);
  void (*kern)(const FinishParams) = finish_split_batch(p.S) == kSplitBatchSmall
                                         ? mhc_finish_kernel<NOUT, NORM, PF, kSplitBatchSmall>
                                         : mhc_finish_kernel<NOUT, NORM, PF, kSplitBatchLarge>;
  cudaError_t e = smem_optin(kern, smem + (int64_t)sizeof(FinishSmem<NOUT>));
  if (e != cudaSuccess) return e;
  return dsk__launch_pdl(kern, dim3((unsigned)p.T), dim3(kFinishThreads), (size_t)smem, st, p);
}

template <int NOUT, bool NORM>
cudaError_t launch_finish(cudaStream_t st, const FinishParams &p) {
  if (finish_prefetch(p.D) == 2) return launch_finish_pf<NOUT, NORM, 2>(st, p);
  return launch_finish_pf<NOUT, NORM, 4>(st, p);
}

}  // namespace

extern "C" dsk_status dsk__cuda_mhc_prenorm(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d, const dsk_tactic *t) {
  DSK_CUDA_TRY("mhc_prenorm", cudaSetDevice(dsk__cuda_state(ctx)->device));
  const int64_t S = t->v[0];
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  float *dp = d->partials, *qp = d->partials + S * d->T * DSK_MHC_MIX;
  DSK_CUDA_TRY("mhc_prenorm",
               launch_project<DSK_MHC_MIX>(ctx, d->precision == DSK_MHC_PRECISION_TF32, st, (const uint16_t *)d->R,
                                           d->R_stride, d->fn, d->T, d->nD, S, dp, qp));
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mhc_pre(dsk_ctx *ctx, const dsk_mhc_pre_desc *d, const dsk_tactic *t) {
  DSK_CUDA_TRY("mhc_pre", cudaSetDevice(dsk__cuda_state(ctx)->device));
  const int64_t S = t->v[0];
  if (S < 1 || S > kMaxSplits)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "mhc_pre: S %lld outside 1..%d (CUDA finish kernel)", (long long)S,
                     kMaxSplits);
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  FinishParams p;
  p.d = d->partials;
  p.q = d->partials + S * d->T * DSK_MHC_MIX;
  p.S = S;
  p.T = d->T;
  p.D = d->D;
  p.nD = d->nD;
  p.R = (const uint16_t *)d->R;
  p.R_stride = d->R_stride;
  p.scale = d->scale;
  p.base = d->base;
  p.eps_rms = d->eps_rms;
  p.eps_hc = d->eps_hc;
  p.post_mult = d->post_mult;
  p.norm_eps = d->norm_eps;
  p.iters = d->sinkhorn_iters;
  p.norm_w = d->norm_w;
  p.y = (uint16_t *)d->y;
  p.y_stride = d->y_stride;
  p.post = d->post;
  p.C = d->C;
  p.pre_w = d->pre_w;
  if (d->norm_w)
    DSK_CUDA_TRY("mhc_pre", (launch_finish<DSK_MHC_MIX, true>(st, p)));
  else
    DSK_CUDA_TRY("mhc_pre", (launch_finish<DSK_MHC_MIX, false>(st, p)));
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mhc_post(dsk_ctx *ctx, const dsk_mhc_post_desc *d) {
  DSK_CUDA_TRY("mhc_post", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  const dim3 grid((unsigned)d->T, dsk__ceil_div_u(d->D / 8, kPostThreads));
  DSK_CUDA_TRY("mhc_post", dsk__launch_pdl(mhc_post_kernel, grid, dim3(kPostThreads), 0, st, (const uint16_t *)d->out,
                                      d->out_stride, (const uint16_t *)d->R, d->R_stride, d->post, d->C,
                                      (uint16_t *)d->R_out, d->R_out_stride, d->D));
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mhc_post_prenorm(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *d,
                                                  const dsk_tactic *t) {
  DSK_CUDA_TRY("mhc_post_prenorm", cudaSetDevice(dsk__cuda_state(ctx)->device));
  const int64_t S = t->v[0];
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  ProjParams pp;
  memset(&pp, 0, sizeof pp);
  pp.R = (const uint16_t *)d->R;
  pp.R_stride = d->R_stride;
  pp.fn = d->fn;
  pp.T = d->T;
  pp.nD = d->nD;
  pp.Kc = dsk_mhc_split_width(d->nD, S);
  pp.d = d->partials;
  pp.q = d->partials + S * d->T * DSK_MHC_MIX;
  pp.out = (const uint16_t *)d->out;
  pp.out_stride = d->out_stride;
  pp.D = d->D;
  pp.post = d->post;
  pp.C = d->C;
  pp.R_out = (uint16_t *)d->R_out;
  pp.R_out_stride = d->R_out_stride;
  DSK_CUDA_TRY("mhc_post_prenorm",
               launch_post_project(ctx, d->precision == DSK_MHC_PRECISION_TF32, st, pp, S));
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mhc_head(dsk_ctx *ctx, const dsk_mhc_head_desc *d, const dsk_tactic *t) {
  DSK_CUDA_TRY("mhc_head", cudaSetDevice(dsk__cuda_state(ctx)->device));
  const int64_t S = t->v[0];
  if (S < 1 || S > kMaxSplits)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "mhc_head: S %lld outside 1..%d (CUDA finish kernel)", (long long)S,
                     kMaxSplits);
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  float *dp = (float *)d->workspace, *qp = dp + S * d->T * 4;
  DSK_CUDA_TRY("mhc_head", launch_project<4>(ctx, d->precision == DSK_MHC_PRECISION_TF32, st, (const uint16_t *)d->R,
                                             d->R_stride, d->fn, d->T, d->nD, S, dp, qp));
  FinishParams p;
  memset(&p, 0, sizeof p);
  p.d = dp;
  p.q = qp;
  p.S = S;
  p.T = d->T;
  p.D = d->D;
  p.nD = d->nD;
  p.R = (const uint16_t *)d->R;
  p.R_stride = d->R_stride;
  p.scale = d->scale;
  p.base = d->base;
  p.eps_rms = d->eps_rms;
  p.eps_hc = d->eps_hc;
  p.y = (uint16_t *)d->h;
  p.y_stride = d->h_stride;
  DSK_CUDA_TRY("mhc_head", (launch_finish<4, false>(st, p)));
  return DSK_STATUS_OK;
}

extern "C" int64_t dsk__cuda_mhc_smem_bytes(void) {
  /* the finish kernel with the fused norm at the largest S and D, or the
   * largest projection ring (T32) */
  const int64_t finish = (int64_t)sizeof(FinishSmem<DSK_MHC_MIX>) + finish_dyn_bytes(DSK_MHC_MAX_D, true);
  int64_t project = ShapeT32::SMEM;
  if (ShapePostT16::SMEM + ShapePostT16::MIX_BYTES > project) project = ShapePostT16::SMEM + ShapePostT16::MIX_BYTES;
  return finish > project ? finish : project;
}
