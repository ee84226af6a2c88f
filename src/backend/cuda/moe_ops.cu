/* moe_ops.cu - the CUDA MoE ops other than the two GEMMs (spec/mxfp4-moe.md
 * §2, §4, §5.5, §6; docs/moe.md): quantizers, scale packing, permute into
 * the m-grouped contiguous layout, SwiGLU + re-quantization and the
 * weighted gather. The router (dsk__cuda_moe_route) lives in moe_route.cu,
 * the GEMMs (dsk__cuda_moe_gemm, dsk__cuda_dense_fp8_gemm) in moe_gemm.cu;
 * moe_common.cuh holds the helpers they share.
 *
 * Entry points (extern "C", the slot signatures of src/backend/backend.h;
 * to be listed in cuda_internal.h and put in the DSK_CUDA_SLOTS of
 * cuda_tables.c):
 *   dsk_status dsk__cuda_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *d);
 *   dsk_status dsk__cuda_fp8_quantize_1x128(dsk_ctx *ctx, const dsk_fp8_quantize_desc *d);
 *   dsk_status dsk__cuda_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d);
 *   dsk_status dsk__cuda_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *d);
 *   dsk_status dsk__cuda_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *d);
 *   dsk_status dsk__cuda_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *d);
 *   dsk_status dsk__cuda_moe_gather(dsk_ctx *ctx, const dsk_moe_gather_desc *d);
 *
 * Descriptors arrive validated by src/ops/moe.c (work count >= 1, sizes in
 * range, pointers present, strides >= widths). Alignment beyond the element
 * size is not promised, so every vectorised path checks its pointers and
 * strides and falls back to element access.
 *
 * Semantics are the cpu-ref's (src/backend/cpu/ref_moe.c), op by op:
 *  - Quantizers, packing, permute, gather: the same bytes. The per-block and
 *    per-group rules are the host+device inline functions of
 *    src/format/mxfp4.h / format.h (dsk_fmt_mx_quant_block, the e4m3 and
 *    e2m1 encoders, dsk_fmt_ue8m0_ceil, dsk_fmt_pack_word), called from
 *    device code; fp32 division is IEEE (no fast-math in this build). The
 *    1x128 amax is a warp max over the finite |v| (order-free). The gather
 *    accumulates in fp64 in the reference's order (shared, then k
 *    ascending); every product w * D2 is exact in fp64 (24 x 8 significant
 *    bits), so FMA contraction cannot change a bit.
 *  - SwiGLU: fp64 from the bf16 D1 as the reference, rounded to fp32, then
 *    the 1x128 rule. exp() is CUDA's fp64 exp (<= 1 ulp from glibc's), so h
 *    can differ from the reference in the last fp64 bit and, very rarely,
 *    in one fp32 ulp (then one e4m3 code may differ). The skip-padding
 *    kernel computes h in fp32 with fp64 wherever that could change a code
 *    or a scale (moe_swiglu.cuh, MoE v16): the same codes.
 *
 * Kernels (one simple mapping each):
 *  mx_quantize     one thread per (row, 32-block): dsk_fmt_mx_quant_block
 *  fp8 quant/SwiGLU one warp per (row, packed word p) = up to 4 groups of
 *                  128 (lane owns columns lane + 32 c); the warp also
 *                  writes the packed word (missing groups 0) and zero words
 *                  for the padding rows [rows, round_up(rows, 4)). Up to
 *                  kQ128GroupItems words: one warp per (row, group), each
 *                  writing its byte of the packed word (decode latency)
 *  pack words      one thread per output word
 *  sf pack         one thread per packed word (padding words 0)
 *  permute         three kernels, workspace = the cpu-ref rule (cnt[E_local],
 *                  start[E_local], int64):
 *                   1. one block: per-expert counts (shared-memory
 *                      atomics; order-free), inv_perm = -1 for every
 *                      assignment that is not local, bad ids counted, then a
 *                      block scan of round_up(cnt, A_used) -> start
 *                   2. one block per local expert: stable ranks by a block
 *                      scan over the assignments in (t, k) order ->
 *                      inv_perm, dropped rows (>= M_sum) counted
 *                   3. one block per row of A (padding rows zero-filled,
 *                      m_indices by a binary search of start) and per
 *                      assignment (the fp8 row and its scale bytes copied)
 *  gather          blocks of (column slices, token), a thread per 8 (or 1)
 *                  columns, all loads of a slice before the sum (topk <= 8;
 *                  above, one block per token with the loads in turn)
 *
 * Capture-safe: no allocation, no host synchronisation, no host reads of
 * device data; shared memory per block <= 48 KB (no opt-in needed).
 */
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "cuda_common.cuh"
#include "ptx.cuh"
#include "format/mxfp4.h"

namespace {

#include "moe_common.cuh"
#include "moe_swiglu.cuh"

/* ======================================================== MX quantize */
struct MxqParams {
  int64_t rows, nb; /* nb = K / 32 */
  const void *x;
  int64_t x_stride;
  uint8_t *q;
  int64_t q_stride;
  uint8_t *sf;
  int64_t sf_stride;
  uint32_t flags;
  unsigned long long *counters;
};

/* One thread per (row, 32-block): the reference's block rule itself. */
template <bool F32>
__global__ void __launch_bounds__(kThreads) mx_quantize_kernel(MxqParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  const int64_t total = p.rows * p.nb;
  int bad = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / p.nb, b = i - r * p.nb;
    const int64_t base = r * p.x_stride + b * DSK_FMT_MX_BLOCK;
    float v[DSK_FMT_MX_BLOCK];
#pragma unroll
    for (int k = 0; k < DSK_FMT_MX_BLOCK; k++)
      v[k] = F32 ? ((const float *)p.x)[base + k] : bf16f(((const uint16_t *)p.x)[base + k]);
    bad += dsk_fmt_mx_quant_block(v, p.flags, p.q + r * p.q_stride + b * DSK_FMT_MX_BYTES, p.sf + r * p.sf_stride + b);
  }
  bad = warp_sum_i(bad);
  if ((threadIdx.x & 31) == 0) count_add(p.counters, bad);
}

/* ============================================ 1x128 quantizer / SwiGLU */
struct Q128Params {
  int64_t rows, ng; /* groups of 128 per row */
  int64_t T4;       /* round_up(rows, 4): rows of the packed tensor */
  const void *x;    /* MODE 0: x [rows, K] (bf16 or f32); MODE 1: D1 bf16 [rows, 2I] */
  int64_t x_stride;
  const int32_t *m_indices; /* MODE 1, optional */
  double limit;             /* MODE 1 */
  uint8_t *q;
  int64_t q_stride;
  uint8_t *sf; /* optional raw bytes */
  int64_t sf_stride;
  int32_t *sf_packed; /* optional packed words, G 1, MN rows */
  unsigned long long *counters;
};

/* One group of 128 of row r (a warp; lane owns columns lane + 32 c): the
 * codes of the group stored, its scale byte returned (padding rows: zeros,
 * byte 0); non-finite values counted in bad. I: offset of `up` in a D1 row. */
template <int MODE, bool F32>
__device__ __forceinline__ uint8_t quant128_group(const Q128Params &p, int64_t r, int64_t g, int lane, bool pad,
                                                  int64_t I, int &bad) {
  uint8_t *qg = p.q + r * p.q_stride + g * DSK_FMT_FP8_GROUP;
  uint8_t e = 0;
  if (pad) {
#pragma unroll
    for (int c = 0; c < 4; c++) qg[lane + 32 * c] = 0;
  } else {
    float v[4];
#pragma unroll
    for (int c = 0; c < 4; c++) {
      const int64_t col = g * DSK_FMT_FP8_GROUP + lane + 32 * c;
      if (MODE == 0) {
        const int64_t idx = r * p.x_stride + col;
        v[c] = F32 ? ((const float *)p.x)[idx] : bf16f(((const uint16_t *)p.x)[idx]);
      } else {
        const uint16_t *row = (const uint16_t *)p.x + r * p.x_stride;
        v[c] = swiglu_ref_f32(bf16f(row[col]), bf16f(row[I + col]), p.limit);
      }
    }
    uint8_t q[4];
    e = q128_warp_codes(v, q, bad);
#pragma unroll
    for (int c = 0; c < 4; c++) qg[lane + 32 * c] = q[c];
  }
  return e;
}

/* The vector forms of one group (bf16 rows 8-byte aligned, q rows 4-byte
 * aligned; lane = 4 adjacent columns): the load (MODE 0: the x values in
 * .g; MODE 1: gate and up) and the codes, stored 4 bytes at a time (MODE 1:
 * the fp32 SwiGLU of moe_swiglu.cuh; padding rows: zeros, byte 0). */
template <int MODE>
__device__ __forceinline__ SwigluIn q128_v4_load(const Q128Params &p, int64_t r, int64_t g, int lane) {
  const uint16_t *xr = (const uint16_t *)p.x + r * p.x_stride;
  if (MODE == 1) return swiglu_load(xr, p.ng * DSK_FMT_FP8_GROUP, g, lane);
  return {*reinterpret_cast<const uint2 *>(xr + g * DSK_FMT_FP8_GROUP + 4 * lane), make_uint2(0, 0)};
}
template <int MODE>
__device__ __forceinline__ uint8_t q128_v4_group(const Q128Params &p, const SwigluIn &in, int64_t r, int64_t g,
                                                 int lane, bool pad, int &bad) {
  uint8_t *qr = p.q + r * p.q_stride;
  uint32_t *q4 = reinterpret_cast<uint32_t *>(qr + g * DSK_FMT_FP8_GROUP + 4 * lane);
  if (pad) {
    *q4 = 0u;
    return 0;
  }
  if (MODE == 1) return swiglu_codes_f32(in, g, p.limit, qr, lane, bad);
  const float v[4] = {__uint_as_float(in.g.x << 16), __uint_as_float(in.g.x & 0xFFFF0000u),
                      __uint_as_float(in.g.y << 16), __uint_as_float(in.g.y & 0xFFFF0000u)};
  uint8_t q[4];
  const uint8_t e = q128_warp_codes(v, q, bad);
  *q4 = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
  return e;
}

/* MODE 0: dsk_fp8_quantize_1x128 (F32 = fp32 input); MODE 1:
 * dsk_swiglu_quant (bf16 D1), for many items. One warp per (row, word p):
 * groups 4p..4p+3;
 * lane owns columns lane + 32 c of each group. Items past the real rows
 * (packed output only) write the zero padding words. */
template <int MODE, bool F32, bool V4 = false>
__global__ void quant128_kernel(Q128Params p) {
  static_assert(!V4 || !F32, "the vector forms: bf16 quantize (MODE 0) and fp32 SwiGLU (MODE 1)");
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  if (DSK_MOE_SK_PREFETCH) dsk_ptx::pdl_launch_dependents(); /* a GEMM after it may start its weights */
  const int lane = threadIdx.x & 31;
  const int64_t wid = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  const int64_t kp = (p.ng + 3) / 4;
  const int64_t out_rows = p.sf_packed ? p.T4 : p.rows;
  const int64_t items = out_rows * kp;
  const int64_t I = p.ng * DSK_FMT_FP8_GROUP; /* MODE 1: offset of `up` in a D1 row */
  int bad = 0;
  for (int64_t it = wid; it < items; it += nwarps) {
    const int64_t r = it / kp, pw = it - r * kp;
    if (r >= p.rows) { /* padding row of the packed tensor */
      if (lane == 0) p.sf_packed[pw * p.T4 + r] = 0;
      continue;
    }
    const bool pad = MODE == 1 && p.m_indices != nullptr && p.m_indices[r] < 0;
    SwigluIn in[4]; /* V4: the word's groups, all loaded before the first is coded */
    if (V4) {
#pragma unroll
      for (int j = 0; j < 4; j++)
        if (!pad && pw * 4 + j < p.ng) in[j] = q128_v4_load<MODE>(p, r, pw * 4 + j, lane);
    }
    uint32_t word = 0;
#pragma unroll(V4 ? 4 : 1) /* in[j] stays in registers; the element loop's code stays one copy */
    for (int j = 0; j < 4; j++) {
      const int64_t g = pw * 4 + j;
      if (g >= p.ng) break; /* warp-uniform */
      const uint8_t e = V4 ? q128_v4_group<MODE>(p, in[j], r, g, lane, pad, bad)
                           : quant128_group<MODE, F32>(p, r, g, lane, pad, I, bad);
      word |= (uint32_t)e << (8 * j);
      if (p.sf && lane == 0) p.sf[r * p.sf_stride + g] = e;
    }
    if (p.sf_packed && lane == 0) p.sf_packed[pw * p.T4 + r] = (int32_t)word;
  }
  bad = warp_sum_i(bad);
  if (lane == 0) count_add(p.counters, bad);
}

/* Up to this many (row, word) items (decode: DSv4-Flash T = 1 has 1,536
 * SwiGLU items, T = 16 has 24,576) the warp-per-group kernel below runs:
 * four warps per item make the fp64 SwiGLU chains of one word run side by
 * side (measured on the H200: 16 -> 8 us at T = 1; at T = 16 and 128,
 * mostly padding rows, it was 7 % and 37 % slower than one warp per word,
 * docs/benchmarks.md "MoE v3"). */
constexpr int64_t kQ128GroupItems = 4096;
/* DSK_MOE_QUANT_V4 (compile-time; default 1): the vector form of the bf16
 * 1x128 quantizer above kQ128GroupItems words; 0 = element loads (A/B) */
#ifndef DSK_MOE_QUANT_V4
#define DSK_MOE_QUANT_V4 1
#endif

/* The same ops for few items (decode: kQ128GroupItems words or fewer).
 * One warp per (row, group of 128): lane l
 * owns the columns l + 32 c (c = 0..3, independent, so the four SwiGLU
 * evaluations of a lane overlap). Warp j of the four groups 4p..4p+3 of a
 * row writes byte j of the packed scale word p (0 for a group past ng):
 * four warps, four distinct bytes of one word, no barrier. Rows past the
 * real rows (packed output only) get zero words. */
template <int MODE, bool F32>
__global__ void __launch_bounds__(kThreads) quant128_group_kernel(Q128Params p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  if (DSK_MOE_SK_PREFETCH) dsk_ptx::pdl_launch_dependents(); /* a GEMM after it may start its weights */
  const int lane = threadIdx.x & 31;
  const int64_t wid = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  const int64_t kp = (p.ng + 3) / 4;
  const int64_t out_rows = p.sf_packed ? p.T4 : p.rows;
  const int64_t items = out_rows * kp * 4; /* (row, word, byte j) */
  const int64_t I = p.ng * DSK_FMT_FP8_GROUP; /* MODE 1: offset of `up` in a D1 row */
  int bad = 0;
  for (int64_t it = wid; it < items; it += nwarps) {
    const int64_t rw = it >> 2, r = rw / kp, pw = rw - r * kp;
    const int j = (int)(it & 3);
    const int64_t g = pw * 4 + j;
    uint8_t e = 0;
    if (r < p.rows && g < p.ng) { /* warp-uniform */
      const bool pad = MODE == 1 && p.m_indices != nullptr && p.m_indices[r] < 0;
      e = quant128_group<MODE, F32>(p, r, g, lane, pad, I, bad);
      if (p.sf && lane == 0) p.sf[r * p.sf_stride + g] = e;
    }
    if (p.sf_packed && lane == 0) /* byte j of the little-endian word */
      reinterpret_cast<uint8_t *>(p.sf_packed + pw * p.T4 + r)[j] = e;
  }
  bad = warp_sum_i(bad);
  if (lane == 0) count_add(p.counters, bad);
}

/* dsk_swiglu_quant with DSK_SWIGLU_SKIP_PADDING: block (x, y) takes rows
 * [64 x, 64 x + 64) and group g = y; it lists the live rows (m_indices >= 0,
 * ascending) and its 4 warps take them in turn, one group of 128 each
 * (quant128_group), writing byte g % 4 of the packed word g / 4 (and, for
 * the last group, the zero bytes of groups past ng). Padding rows are not
 * touched; the packed tensor's rows [rows, round_up(rows, 4)) get zero
 * words (blocks of y = 0), as in the other kernels. At decode a block holds
 * a few live rows, so every (row, group) has a warp of its own. */
constexpr int kLiveRows = 64, kLiveThreads = 128;
/* DSK_MOE_SWIGLU_RPI (compile-time; default 1): rows a warp of the fp32
 * skip-padding SwiGLU kernel loads before it codes the first of them. 4
 * measured slower at T 4096 on the H100 (DSv4-Flash 351 us against 274 with
 * 1; docs/benchmarks.md "MoE v15 and v16"; not profiled: the loop's code,
 * with each row's fp64 fallbacks inlined, is four times larger). */
#ifndef DSK_MOE_SWIGLU_RPI
#define DSK_MOE_SWIGLU_RPI 1
#endif
template <bool F32>
__global__ void __launch_bounds__(kLiveThreads) swiglu_live_kernel(Q128Params p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  if (DSK_MOE_SK_PREFETCH) dsk_ptx::pdl_launch_dependents(); /* a GEMM after it may start its weights */
  __shared__ int s_rows[kLiveRows];
  __shared__ unsigned s_ball[2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t r0 = (int64_t)blockIdx.x * kLiveRows, g = blockIdx.y;
  const int64_t kp = (p.ng + 3) / 4;
  if (warp < 2) {
    const int64_t r = r0 + tid;
    const unsigned b = __ballot_sync(kFull, r < p.rows && p.m_indices[r] >= 0);
    if (lane == 0) s_ball[warp] = b;
  }
  __syncthreads();
  const unsigned b0 = s_ball[0], b1 = s_ball[1];
  if (warp < 2) {
    const unsigned b = warp ? b1 : b0;
    if ((b >> lane) & 1u) s_rows[(warp ? __popc(b0) : 0) + __popc(b & ((1u << lane) - 1u))] = tid;
  }
  if (p.sf_packed && g == 0 && tid < kLiveRows) { /* the packed tensor's padding rows */
    const int64_t r = r0 + tid;
    if (r >= p.rows && r < p.T4)
      for (int64_t pw = 0; pw < kp; pw++) p.sf_packed[pw * p.T4 + r] = 0;
  }
  __syncthreads();
  const int n = __popc(b0) + __popc(b1);
  const int64_t I = p.ng * DSK_FMT_FP8_GROUP;
  int bad = 0;
  auto put_scale = [&](int64_t r, uint8_t e) {
    if (lane == 0) {
      if (p.sf) p.sf[r * p.sf_stride + g] = e;
      if (p.sf_packed) {
        uint8_t *w = reinterpret_cast<uint8_t *>(p.sf_packed + (g >> 2) * p.T4 + r);
        w[g & 3] = e;
        if (g == p.ng - 1)
          for (int j = (int)(g & 3) + 1; j < 4; j++) w[j] = 0; /* groups past ng */
      }
    }
  };
  constexpr int W = kLiveThreads / 32;
  if (F32) {
    /* RPI rows per pass, all their loads issued before the first is used */
    constexpr int RPI = DSK_MOE_SWIGLU_RPI;
    for (int i0 = warp; i0 < n; i0 += W * RPI) {
      SwigluIn in[RPI];
#pragma unroll
      for (int j = 0; j < RPI; j++)
        if (i0 + W * j < n) in[j] = swiglu_load((const uint16_t *)p.x + (r0 + s_rows[i0 + W * j]) * p.x_stride, I, g, lane);
#pragma unroll
      for (int j = 0; j < RPI; j++)
        if (i0 + W * j < n) { /* warp-uniform */
          const int64_t r = r0 + s_rows[i0 + W * j];
          put_scale(r, swiglu_codes_f32(in[j], g, p.limit, p.q + r * p.q_stride, lane, bad));
        }
    }
  } else {
    for (int i = warp; i < n; i += W) {
      const int64_t r = r0 + s_rows[i];
      put_scale(r, quant128_group<1, false>(p, r, g, lane, false, I, bad));
    }
  }
  bad = warp_sum_i(bad);
  if (lane == 0) count_add(p.counters, bad);
}

/* The quantize / SwiGLU launch: the warp-per-group kernel up to
 * kQ128GroupItems (row, word) items, else the warp-per-word one. */
/* The vector forms' accesses (quant128_kernel's V4 form, the fp32
 * skip-padding SwiGLU): bf16 rows 8-byte aligned, q rows 4-byte aligned */
static bool q128_vec_ok(const Q128Params &p) {
  return p.x_stride % 4 == 0 && ((uintptr_t)p.x & 7u) == 0 && p.q_stride % 4 == 0 && ((uintptr_t)p.q & 3u) == 0;
}

template <int MODE, bool F32>
dsk_status launch_q128(const Q128Params &p, cudaStream_t st, const char *what) {
  const int64_t items = (p.sf_packed ? p.T4 : p.rows) * ((p.ng + 3) / 4);
  /* MoE v16c: bf16 rows 8-byte aligned, q rows 4-byte aligned: 8-byte loads
   * of all four groups of a word before the first is coded, 4-byte stores
   * (the SwiGLU in fp32, moe_swiglu.cuh) */
  const bool v4 = (MODE == 0 ? DSK_MOE_QUANT_V4 : DSK_MOE_SWIGLU_F32) && !F32 && items > kQ128GroupItems &&
                  q128_vec_ok(p);
  if (v4) {
    if constexpr (!F32)
      DSK_CUDA_TRY(what, moe_launch(quant128_kernel<MODE, false, true>, dim3(grid_for(items, kThreads / 32)), dim3(kThreads), 0, st, p));
    return DSK_STATUS_OK;
  }
  if (items <= kQ128GroupItems)
    DSK_CUDA_TRY(what, moe_launch(quant128_group_kernel<MODE, F32>, dim3(grid_for(items * 4, kThreads / 32)), dim3(kThreads), 0, st, p));
  else
    DSK_CUDA_TRY(what, moe_launch(quant128_kernel<MODE, F32>, dim3(grid_for(items, kThreads / 32)), dim3(kThreads), 0, st, p));
  return DSK_STATUS_OK;
}

/* ======================================================= scale packing */
__global__ void __launch_bounds__(kThreads) pack_words_kernel(int64_t rows, int64_t sf_k, const uint8_t *sf,
                                                               int64_t sf_stride, int32_t *out, int64_t out_stride) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  const int64_t kp = (sf_k + 3) / 4, total = rows * kp;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / kp, pw = i - r * kp;
    out[r * out_stride + pw] = (int32_t)dsk_fmt_pack_word(sf + r * sf_stride, sf_k, pw);
  }
}

/* One thread per word (g, p, mn), mn fastest (the layout's order). */
__global__ void __launch_bounds__(kThreads) sf_pack_kernel(int64_t G, int64_t MN, int64_t sf_k, int gran_mn,
                                                            const uint8_t *sf, int64_t sf_stride,
                                                            int64_t sf_group_stride, int32_t *out) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  const int64_t kp = (sf_k + 3) / 4, t4 = (MN + 3) / 4 * 4, total = G * kp * t4;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t g = i / (kp * t4), rem = i - g * (kp * t4);
    const int64_t pw = rem / t4, mn = rem - pw * t4;
    int32_t w = 0;
    if (mn < MN) {
      const int64_t src = gran_mn == DSK_FMT_FP8_GROUP ? mn / DSK_FMT_FP8_GROUP : mn;
      w = (int32_t)dsk_fmt_pack_word(sf + g * sf_group_stride + src * sf_stride, sf_k, pw);
    }
    out[i] = w; /* i == g*kp*t4 + pw*t4 + mn == dsk_fmt_sf_off(MN, sf_k, g, mn, pw) */
  }
}

/* ============================================================ permute */
#include "moe_permute.cuh"

/* ==================================================== fused prologue */
#include "moe_prologue.cuh"

/* ============================================================= gather */
struct GatherParams {
  int64_t T, topk, N, M;
  const uint16_t *D2;
  int64_t D2_stride;
  const int32_t *inv;
  int64_t inv_stride;
  const float *w;
  int64_t w_stride;
  const uint16_t *shared;
  int64_t shared_stride;
  uint16_t *y;
  int64_t y_stride;
  unsigned long long *counters;
};

/* Blocks (column slice, token); a thread per V columns of a slice of
 * 128 V columns, slices gridDim.x apart. The token's rows and weights are
 * staged in shared memory, every D2 load of a slice is issued before the
 * first is used, then the fp64 sum runs in the reference's order (shared,
 * then k ascending), rounded fp64 -> fp32 -> bf16. */
constexpr int kGatherThreads = 128;
template <int V, int KMAX> /* topk <= KMAX = 8 (both models); gather_any_kernel takes more */
__global__ void __launch_bounds__(kGatherThreads) gather_kernel(GatherParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  __shared__ int s_row[DSK_MOE_MAX_TOPK];
  __shared__ double s_w[DSK_MOE_MAX_TOPK];
  const int64_t t = blockIdx.y;
  const int K = (int)p.topk;
  if (threadIdx.x < K) {
    const int32_t row = p.inv[t * p.inv_stride + threadIdx.x];
    const bool ok = row >= 0 && row < p.M;
    s_row[threadIdx.x] = ok ? row : -1;
    s_w[threadIdx.x] = (double)p.w[t * p.w_stride + threadIdx.x];
    if (blockIdx.x == 0 && p.counters) {
      const unsigned bad = __ballot_sync(__activemask(), row >= p.M);
      if (threadIdx.x == 0 && bad) atomicAdd(p.counters, (unsigned long long)__popc(bad));
    }
  }
  __syncthreads();
  using Vec = typename std::conditional<V == 8, uint4, uint16_t>::type;
  for (int64_t n0 = ((int64_t)blockIdx.x * kGatherThreads + threadIdx.x) * V; n0 < p.N;
       n0 += (int64_t)gridDim.x * kGatherThreads * V) {
    Vec dv[KMAX];
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
      if (k < K && s_row[k] >= 0) dv[k] = *(const Vec *)(p.D2 + (int64_t)s_row[k] * p.D2_stride + n0);
    }
    double acc[V];
    if (p.shared) {
      const uint16_t *sh = p.shared + t * p.shared_stride + n0;
      if constexpr (V == 8) {
        const uint4 sv = *(const uint4 *)sh;
        const uint32_t ss[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
        for (int c = 0; c < V / 2; c++) {
          acc[2 * c] = (double)__uint_as_float(ss[c] << 16);
          acc[2 * c + 1] = (double)__uint_as_float(ss[c] & 0xFFFF0000u);
        }
      } else {
        acc[0] = (double)bf16f(sh[0]);
      }
    } else {
#pragma unroll
      for (int c = 0; c < V; c++) acc[c] = 0.0;
    }
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
      if (k >= K || s_row[k] < 0) continue;
      const double w = s_w[k];
      if constexpr (V == 8) {
        const uint32_t dd[4] = {dv[k].x, dv[k].y, dv[k].z, dv[k].w};
#pragma unroll
        for (int c = 0; c < V / 2; c++) {
          acc[2 * c] += w * (double)__uint_as_float(dd[c] << 16);
          acc[2 * c + 1] += w * (double)__uint_as_float(dd[c] & 0xFFFF0000u);
        }
      } else {
        acc[0] += w * (double)bf16f(dv[k]);
      }
    }
    uint16_t *y = p.y + t * p.y_stride + n0;
    if constexpr (V == 8) {
      uint32_t o[4];
#pragma unroll
      for (int c = 0; c < 4; c++)
        o[c] = (uint32_t)dsk_fmt_bf16_from_f32((float)acc[2 * c]) |
               ((uint32_t)dsk_fmt_bf16_from_f32((float)acc[2 * c + 1]) << 16);
      *(uint4 *)y = make_uint4(o[0], o[1], o[2], o[3]);
    } else {
      y[0] = dsk_fmt_bf16_from_f32((float)acc[0]);
    }
  }
}

/* topk > 8 (no model uses it): one block per token; a thread per V
 * columns: fp64 sum in the reference's order (shared, then k ascending),
 * rounded fp64 -> fp32 -> bf16. */
template <int V>
__global__ void __launch_bounds__(kThreads) gather_any_kernel(GatherParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  const int64_t t = blockIdx.x;
  const int32_t *inv = p.inv + t * p.inv_stride;
  const float *wt = p.w + t * p.w_stride;
  if (threadIdx.x == 0 && p.counters) {
    int bad = 0;
    for (int64_t k = 0; k < p.topk; k++) bad += inv[k] >= p.M;
    if (bad) atomicAdd(p.counters, (unsigned long long)bad);
  }
  for (int64_t n0 = (int64_t)threadIdx.x * V; n0 < p.N; n0 += (int64_t)blockDim.x * V) {
    double acc[V];
    if (p.shared) {
      const uint16_t *s = p.shared + t * p.shared_stride + n0;
      if (V == 8) {
        const uint4 sv = *(const uint4 *)s;
        const uint32_t ss[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
        for (int c = 0; c < V / 2; c++) {
          acc[2 * c] = (double)__uint_as_float(ss[c] << 16);
          acc[2 * c + 1] = (double)__uint_as_float(ss[c] & 0xFFFF0000u);
        }
      } else {
#pragma unroll
        for (int c = 0; c < V; c++) acc[c] = (double)bf16f(s[c]);
      }
    } else {
#pragma unroll
      for (int c = 0; c < V; c++) acc[c] = 0.0;
    }
    for (int64_t k = 0; k < p.topk; k++) {
      const int32_t row = inv[k];
      if (row < 0 || row >= p.M) continue;
      const double w = (double)wt[k];
      const uint16_t *d = p.D2 + (int64_t)row * p.D2_stride + n0;
      if (V == 8) {
        const uint4 dv = *(const uint4 *)d;
        const uint32_t dd[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
        for (int c = 0; c < V / 2; c++) {
          acc[2 * c] += w * (double)__uint_as_float(dd[c] << 16);
          acc[2 * c + 1] += w * (double)__uint_as_float(dd[c] & 0xFFFF0000u);
        }
      } else {
#pragma unroll
        for (int c = 0; c < V; c++) acc[c] += w * (double)bf16f(d[c]);
      }
    }
    uint16_t *y = p.y + t * p.y_stride + n0;
    if (V == 8) {
      uint32_t o[4];
#pragma unroll
      for (int c = 0; c < 4; c++)
        o[c] = (uint32_t)dsk_fmt_bf16_from_f32((float)acc[2 * c]) |
               ((uint32_t)dsk_fmt_bf16_from_f32((float)acc[2 * c + 1]) << 16);
      *(uint4 *)y = make_uint4(o[0], o[1], o[2], o[3]);
    } else {
#pragma unroll
      for (int c = 0; c < V; c++) y[c] = dsk_fmt_bf16_from_f32((float)acc[c]);
    }
  }
}

} /* namespace */

/* ====================================================== entry points */

extern "C" dsk_status dsk__cuda_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *d) {
  MOE_SET_DEVICE("mx_quantize");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  MxqParams p;
  p.rows = d->rows;
  p.nb = d->K / DSK_FMT_MX_BLOCK;
  p.x = d->x;
  p.x_stride = d->x_stride;
  p.q = d->q;
  p.q_stride = d->q_stride;
  p.sf = d->sf;
  p.sf_stride = d->sf_stride;
  p.flags = d->flags;
  p.counters = (unsigned long long *)d->counters;
  const unsigned grid = grid_for(p.rows * p.nb, kThreads);
  if (d->x_dtype == DSK_MOE_IN_F32)
    DSK_CUDA_TRY("mx_quantize", moe_launch(mx_quantize_kernel<true>, dim3(grid), dim3(kThreads), 0, st, p));
  else
    DSK_CUDA_TRY("mx_quantize", moe_launch(mx_quantize_kernel<false>, dim3(grid), dim3(kThreads), 0, st, p));
  DSK_CUDA_LAUNCHED("mx_quantize");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_fp8_quantize_1x128(dsk_ctx *ctx, const dsk_fp8_quantize_desc *d) {
  MOE_SET_DEVICE("fp8_quantize_1x128");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  Q128Params p;
  memset(&p, 0, sizeof p);
  p.rows = d->rows;
  p.ng = d->K / DSK_FMT_FP8_GROUP;
  p.T4 = (d->rows + 3) / 4 * 4;
  p.x = d->x;
  p.x_stride = d->x_stride;
  p.q = d->q;
  p.q_stride = d->q_stride;
  p.sf = d->sf;
  p.sf_stride = d->sf_stride;
  p.sf_packed = d->sf_packed;
  p.counters = (unsigned long long *)d->counters;
  if (d->x_dtype == DSK_MOE_IN_F32)
    return launch_q128<0, true>(p, st, "fp8_quantize_1x128");
  return launch_q128<0, false>(p, st, "fp8_quantize_1x128");
}

extern "C" dsk_status dsk__cuda_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *d) {
  MOE_SET_DEVICE("swiglu_quant");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  Q128Params p;
  memset(&p, 0, sizeof p);
  p.rows = d->rows;
  p.ng = d->I / DSK_FMT_FP8_GROUP;
  p.T4 = (d->rows + 3) / 4 * 4;
  p.x = d->D1;
  p.x_stride = d->D1_stride;
  p.m_indices = d->m_indices;
  p.limit = (double)d->limit;
  p.q = d->q;
  p.q_stride = d->q_stride;
  p.sf = d->sf;
  p.sf_stride = d->sf_stride;
  p.sf_packed = d->sf_packed;
  p.counters = (unsigned long long *)d->counters;
  if (d->flags & DSK_SWIGLU_SKIP_PADDING) { /* m_indices given (validated) */
    const int64_t blocks = (p.rows + kLiveRows - 1) / kLiveRows; /* <= 2^25 */
    const dim3 grid((unsigned)blocks, (unsigned)p.ng);            /* ng <= DSK_MOE_MAX_K / 128 */
    if (DSK_MOE_SWIGLU_F32 && q128_vec_ok(p))
      DSK_CUDA_TRY("swiglu_quant", moe_launch(swiglu_live_kernel<true>, grid, dim3(kLiveThreads), 0, st, p));
    else
      DSK_CUDA_TRY("swiglu_quant", moe_launch(swiglu_live_kernel<false>, grid, dim3(kLiveThreads), 0, st, p));
    return DSK_STATUS_OK;
  }
  return launch_q128<1, false>(p, st, "swiglu_quant");
}

extern "C" dsk_status dsk__cuda_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d) {
  MOE_SET_DEVICE("pack_ue8m0_words");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  const int64_t total = d->rows * ((d->sf_k + 3) / 4);
  DSK_CUDA_TRY("pack_ue8m0_words", moe_launch(pack_words_kernel, dim3(grid_for(total, kThreads)), dim3(kThreads), 0, st, d->rows, d->sf_k, d->sf, d->sf_stride, d->out,
                                                                     d->out_stride));
  DSK_CUDA_LAUNCHED("pack_ue8m0_words");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *d) {
  MOE_SET_DEVICE("sf_pack_mn_major");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  const int64_t total = dsk_sf_packed_words(d->G, d->MN, d->sf_k); /* validated: no overflow */
  DSK_CUDA_TRY("sf_pack_mn_major", moe_launch(sf_pack_kernel, dim3(grid_for(total, kThreads)), dim3(kThreads), 0, st, d->G, d->MN, d->sf_k, d->gran_mn, d->sf,
                                                                  d->sf_stride, d->sf_group_stride, d->out));
  DSK_CUDA_LAUNCHED("sf_pack_mn_major");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *d) {
  MOE_SET_DEVICE("moe_permute");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  PermParams p;
  memset(&p, 0, sizeof p);
  p.T = d->T;
  p.topk = d->topk;
  p.E = d->E;
  p.EL = d->E_local;
  p.off = d->expert_offset;
  p.K = d->K;
  p.A = d->A_used;
  p.M = d->M_sum;
  p.ids = d->ids;
  p.ids_stride = d->ids_stride;
  p.xq = d->xq;
  p.xq_stride = d->xq_stride;
  p.xsf = d->xsf;
  p.xsf_stride = d->xsf_stride;
  p.A_out = d->A;
  p.A_stride = d->A_stride;
  p.Asf = d->Asf;
  p.Asf_stride = d->Asf_stride;
  p.m_indices = d->m_indices;
  p.inv = d->inv_perm;
  p.inv_stride = d->inv_perm_stride;
  p.cnt = (int64_t *)d->workspace; /* the cpu-ref layout: cnt [E_local], start [E_local] */
  p.start = p.cnt + p.EL;
  p.counters = (unsigned long long *)d->counters;
  const int64_t NA = p.T * p.topk;
  if (NA <= kPermSmallNA) { /* E_local <= DSK_MOE_MAX_EXPERTS <= kCountThreads */
    DSK_CUDA_TRY("moe_permute", moe_launch(perm_plan_small_kernel, dim3(1), dim3(kCountThreads), 0, st, p));
  } else {
    DSK_CUDA_TRY("moe_permute", moe_launch(perm_count_kernel, dim3(1), dim3(kCountThreads), 0, st, p));
    DSK_CUDA_TRY("moe_permute", moe_launch(perm_rank_kernel, dim3((unsigned)p.EL), dim3(kRankThreads), 0, st, p));
  }
  const int64_t items = p.M + NA;
  const bool vec = aligned16(d->xq) && d->xq_stride % 16 == 0 && (p.M == 0 || (aligned16(d->A) && d->A_stride % 16 == 0));
  if (d->flags & DSK_MOE_PERMUTE_NO_PAD_FILL) {
    const int64_t mb = (p.M + kRowThreads - 1) / kRowThreads;
    const int64_t ab = vec && DSK_MOE_PERM_WARP_ROWS ? (NA + kRowThreads / 32 - 1) / (kRowThreads / 32) : NA;
    const unsigned g = grid_for(ab > mb ? ab : mb, 1);
    if (vec)
      DSK_CUDA_TRY("moe_permute", moe_launch(perm_rows_live_kernel<true>, dim3(g), dim3(kRowThreads), 0, st, p));
    else
      DSK_CUDA_TRY("moe_permute", moe_launch(perm_rows_live_kernel<false>, dim3(g), dim3(kRowThreads), 0, st, p));
    return DSK_STATUS_OK;
  }
  if (vec)
    DSK_CUDA_TRY("moe_permute", moe_launch(perm_rows_kernel<true>, dim3(grid_for(items, 1)), dim3(kRowThreads), 0, st, p));
  else
    DSK_CUDA_TRY("moe_permute", moe_launch(perm_rows_kernel<false>, dim3(grid_for(items, 1)), dim3(kRowThreads), 0, st, p));
  DSK_CUDA_LAUNCHED("moe_permute");
  return DSK_STATUS_OK;
}

/* -DDSK_MOE_FUSED_PROLOGUE=0: the slot takes no call, so dsk_moe_run always
 * runs the separate ops (the A/B baseline of MoE v10). */
#ifndef DSK_MOE_FUSED_PROLOGUE
#define DSK_MOE_FUSED_PROLOGUE 1
#endif

extern "C" dsk_status dsk__cuda_moe_prologue(dsk_ctx *ctx, const dsk__moe_prologue_args *a, int *served) {
  *served = 0;
  if (!DSK_MOE_FUSED_PROLOGUE) return DSK_STATUS_OK;
  const int64_t NA = a->T * a->topk;
  /* decode-sized calls with the alignment moe_prologue_kernel's vector
   * accesses need; anything else runs the ops */
  if (NA < 1 || NA > kProMaxNA || a->E_local > kProMaxE || a->A_used < 1 || NA * a->A_used >= (1ll << 30) ||
      a->M_sum < 1 || a->M_sum >= (1ll << 30) || ((uintptr_t)a->x & 7u) || a->x_stride % 4 != 0 ||
      ((uintptr_t)a->A & 3u) || a->A_stride % 4 != 0 || ((uintptr_t)a->xq & 3u))
    return DSK_STATUS_OK;
  if (a->dry) {
    *served = 1;
    return DSK_STATUS_OK;
  }
  MOE_SET_DEVICE("moe_prologue");
  cudaStream_t st = dsk__cuda_stream(ctx, a->stream);
  ProParams p;
  memset(&p, 0, sizeof p);
  p.T = a->T;
  p.topk = a->topk;
  p.E = a->E;
  p.EL = a->E_local;
  p.off = a->expert_offset;
  p.H = a->H;
  p.A = a->A_used;
  p.M = a->M_sum;
  p.ids = a->ids;
  p.ids_stride = a->ids_stride;
  p.x = (const uint16_t *)a->x;
  p.x_stride = a->x_stride;
  p.xq = a->xq;
  p.sfx = a->xq ? a->sfx : nullptr;
  p.A_out = a->A;
  p.A_stride = a->A_stride;
  p.sfa = a->sfa;
  p.m_indices = a->m_indices;
  p.inv = a->inv_perm;
  p.inv_stride = a->inv_perm_stride;
  p.cnt_x = (unsigned long long *)a->cnt_x;
  p.cnt_perm = (unsigned long long *)a->cnt_perm;
  const int64_t mb = (a->M_sum + kProThreads - 1) / kProThreads;
  DSK_CUDA_TRY("moe_prologue", moe_launch(moe_prologue_kernel, dim3(grid_for(NA > mb ? NA : mb, 1)),
                                          dim3(kProThreads), kProSmem, st, p));
  *served = 1;
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_moe_gather(dsk_ctx *ctx, const dsk_moe_gather_desc *d) {
  MOE_SET_DEVICE("moe_gather");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  GatherParams p;
  memset(&p, 0, sizeof p);
  p.T = d->T;
  p.topk = d->topk;
  p.N = d->N;
  p.M = d->M_sum;
  p.D2 = (const uint16_t *)d->D2;
  p.D2_stride = d->D2_stride;
  p.inv = d->inv_perm;
  p.inv_stride = d->inv_perm_stride;
  p.w = d->weights;
  p.w_stride = d->weights_stride;
  p.shared = (const uint16_t *)d->shared;
  p.shared_stride = d->shared_stride;
  p.y = (uint16_t *)d->y;
  p.y_stride = d->y_stride;
  p.counters = (unsigned long long *)d->counters;
  if (p.T > 65535) { /* grid y; beyond it, slices of 65535 tokens */
    for (int64_t t0 = 0; t0 < p.T; t0 += 65535) {
      dsk_moe_gather_desc part = *d;
      const int64_t n = p.T - t0 < 65535 ? p.T - t0 : 65535;
      part.T = n;
      part.D2 = d->D2; /* rows are global: inv_perm indexes M_sum */
      part.inv_perm = d->inv_perm + t0 * d->inv_perm_stride;
      part.weights = d->weights + t0 * d->weights_stride;
      if (d->shared) part.shared = d->shared + t0 * d->shared_stride;
      part.y = d->y + t0 * d->y_stride;
      const dsk_status r = dsk__cuda_moe_gather(ctx, &part);
      if (r != DSK_STATUS_OK) return r;
    }
    return DSK_STATUS_OK;
  }
  const bool vec = p.N % 8 == 0 && aligned16(d->y) && d->y_stride % 8 == 0 &&
                   (p.M == 0 || (aligned16(d->D2) && d->D2_stride % 8 == 0)) &&
                   (!d->shared || (aligned16(d->shared) && d->shared_stride % 8 == 0));
  const int v = vec ? 8 : 1;
  /* column slices per token: all of them while the grid is small (decode),
   * fewer as T fills the GPU (each block then loops over its slices and
   * stages the token's rows once) */
  const int64_t slices = (p.N + kGatherThreads * v - 1) / (kGatherThreads * v);
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  int64_t gx = (8 * sms + p.T - 1) / p.T;
  gx = gx < 1 ? 1 : gx > slices ? slices : gx;
  const dim3 grid((unsigned)gx, (unsigned)p.T);
  if (p.topk > 8) {
    if (vec)
      DSK_CUDA_TRY("moe_gather", moe_launch(gather_any_kernel<8>, dim3((unsigned)p.T), dim3(kThreads), 0, st, p));
    else
      DSK_CUDA_TRY("moe_gather", moe_launch(gather_any_kernel<1>, dim3((unsigned)p.T), dim3(kThreads), 0, st, p));
  } else if (vec) {
    DSK_CUDA_TRY("moe_gather", moe_launch(gather_kernel<8, 8>, dim3(grid), dim3(kGatherThreads), 0, st, p));
  } else {
    DSK_CUDA_TRY("moe_gather", moe_launch(gather_kernel<1, 8>, dim3(grid), dim3(kGatherThreads), 0, st, p));
  }
  DSK_CUDA_LAUNCHED("moe_gather");
  return DSK_STATUS_OK;
}
