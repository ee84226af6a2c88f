/* moe_ops.cu - the CUDA MoE ops other than the two GEMMs (spec/mxfp4-moe.md
 * §2, §4, §5.5, §6; docs/moe.md): quantizers, scale packing, routing,
 * permute into the m-grouped contiguous layout, SwiGLU + re-quantization
 * and the weighted gather. The GEMMs (dsk__cuda_moe_gemm,
 * dsk__cuda_dense_fp8_gemm) live in moe_gemm.cu.
 *
 * Entry points (extern "C", the slot signatures of src/backend/backend.h;
 * to be listed in cuda_internal.h and put in the DSK_CUDA_SLOTS of
 * cuda_tables.c):
 *   dsk_status dsk__cuda_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *d);
 *   dsk_status dsk__cuda_fp8_quantize_1x128(dsk_ctx *ctx, const dsk_fp8_quantize_desc *d);
 *   dsk_status dsk__cuda_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d);
 *   dsk_status dsk__cuda_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *d);
 *   dsk_status dsk__cuda_moe_route(dsk_ctx *ctx, const dsk_moe_route_desc *d);
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
 *    in one fp32 ulp (then one e4m3 code may differ).
 *  - Router: logits in fp64 (exact bf16 products) with a fixed reduction
 *    order (per lane sequential over its columns, then a 3-step butterfly
 *    over 8 lanes, then chunks of 1024 columns in ascending order; with a
 *    workspace: per thread over its 8-column vectors, then a fixed tree
 *    over the 256 threads, see route_logits_kernel), not the
 *    reference's single sequential sum; scores with CUDA's fp64
 *    exp/log1p/sqrt. Selection is the reference's total order (larger
 *    s + bias first, NaN below everything, equal values -> lower id), so ids
 *    equal the reference's unless two biased scores differ by ~1e-13
 *    relative (random data never does; exact ties are resolved alike); the
 *    fp32 weights may differ by one ulp.
 *
 * Kernels (one simple mapping each):
 *  mx_quantize     one thread per (row, 32-block): dsk_fmt_mx_quant_block
 *  fp8 quant/SwiGLU one warp per (row, packed word p) = up to 4 groups of
 *                  128 (lane owns columns lane + 32 c); the warp also writes
 *                  the packed word (missing groups 0) and zero words for the
 *                  padding rows [rows, round_up(rows, 4))
 *  pack words      one thread per output word
 *  sf pack         one thread per packed word (padding words 0)
 *  route           one block per TB in {1,2,4,8} tokens (512 threads;
 *                  1024 when TB = 1): fp64 logits [TB, E] in shared memory
 *                  (x staged in chunks of 1024 columns; 8 lanes per expert),
 *                  then one warp per token for scores, top-k (K argmax
 *                  passes with a per-lane "taken" bit mask) or the hash
 *                  table, and the weights. Without a workspace the logits
 *                  of a token cannot be spread over several blocks: at
 *                  decode (T small) one SM streams the whole gate weight
 *                  (2-5.5 MB, ~95 us). With the caller's workspace
 *                  (dsk_moe_route_plan: fp64 logits [T, E]) two kernels:
 *                  route_logits_kernel, one 256-thread block per (2 or 4
 *                  experts, TT in {1,2,4,8} tokens) splitting H (T = 1:
 *                  E/2 blocks, every 16-byte load of gate_w in flight at
 *                  once), then route_kernel's selection on those logits,
 *                  launched with PDL (griddepcontrol.wait before any read).
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
 *  gather          one block per token, a thread per 8 (or 1) columns
 *
 * Capture-safe: no allocation, no host synchronisation, no host reads of
 * device data; shared memory per block <= 48 KB (no opt-in needed).
 */
#include <stdint.h>
#include <string.h>

#include "cuda_common.cuh"
#include "format/mxfp4.h"

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 1 << 20;

__device__ __forceinline__ float bf16f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

__device__ __forceinline__ int warp_sum_i(int v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

/* Maximum of finite non-negative floats (exact, order-free). */
__device__ __forceinline__ float warp_max_nonneg(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    const float w = __shfl_xor_sync(kFull, v, o);
    v = w > v ? w : v;
  }
  return v;
}

__device__ __forceinline__ bool f32_nonfinite(float v) { return (__float_as_uint(v) & 0x7FFFFFFFu) >= 0x7F800000u; }

__device__ __forceinline__ void count_add(unsigned long long *c, long long v) {
  if (c && v) atomicAdd(c, (unsigned long long)v);
}

static inline unsigned grid_for(int64_t items, int64_t per_block) {
  int64_t g = (items + per_block - 1) / per_block;
  if (g < 1) g = 1;
  if (g > kMaxGrid) g = kMaxGrid;
  return (unsigned)g;
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

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

/* MODE 0: dsk_fp8_quantize_1x128 (F32 = fp32 input); MODE 1:
 * dsk_swiglu_quant (bf16 D1). One warp per (row, word p): groups 4p..4p+3;
 * lane owns columns lane + 32 c of each group. Items past the real rows
 * (packed output only) write the zero padding words. */
template <int MODE, bool F32>
__global__ void quant128_kernel(Q128Params p) {
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
    uint32_t word = 0;
    for (int j = 0; j < 4; j++) {
      const int64_t g = pw * 4 + j;
      if (g >= p.ng) break; /* warp-uniform */
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
            double gv = (double)bf16f(row[col]), uv = (double)bf16f(row[I + col]);
            const double L = p.limit;
            if (L > 0.0) {
              if (gv > L) gv = L;
              if (uv > L) uv = L;
              if (uv < -L) uv = -L;
            }
            v[c] = (float)(gv / (1.0 + exp(-gv)) * uv);
          }
        }
        float amax = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; c++) {
          if (f32_nonfinite(v[c])) {
            bad++;
            continue;
          }
          const float m = fabsf(v[c]);
          amax = m > amax ? m : amax;
        }
        amax = warp_max_nonneg(amax);
        e = dsk_fmt_fp8_scale_byte(amax);
        const float s = dsk_fmt_pow2_from_byte(e);
#pragma unroll
        for (int c = 0; c < 4; c++)
          qg[lane + 32 * c] = f32_nonfinite(v[c]) ? (uint8_t)DSK_FMT_E4M3_NAN : dsk_fmt_e4m3_from_f32(v[c] / s);
      }
      word |= (uint32_t)e << (8 * j);
      if (p.sf && lane == 0) p.sf[r * p.sf_stride + g] = e;
    }
    if (p.sf_packed && lane == 0) p.sf_packed[pw * p.T4 + r] = (int32_t)word;
  }
  bad = warp_sum_i(bad);
  if (lane == 0) count_add(p.counters, bad);
}

/* ======================================================= scale packing */
__global__ void __launch_bounds__(kThreads) pack_words_kernel(int64_t rows, int64_t sf_k, const uint8_t *sf,
                                                               int64_t sf_stride, int32_t *out, int64_t out_stride) {
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

/* ============================================================== route */
/* threads per block: 1024 with one token per block (decode: the block
 * streams the whole gate weight, so as many loads in flight as possible),
 * else 512 */
template <int TB>
struct RouteCfg {
  static constexpr int threads = TB == 1 ? 1024 : 512;
  static constexpr int warps = threads / 32;
};
constexpr int kRouteBatch = 4; /* 16-byte gate-weight loads issued per lane before they are used */
constexpr int kRouteChunk = 1024; /* columns of x staged per round */
constexpr int kRouteSmem = 49152; /* shared-memory budget of one block */

struct RouteParams {
  int64_t T, E, K, H;
  int score, hash, renormalize;
  const float *logits;
  int64_t logits_stride;
  const uint16_t *x;
  int64_t x_stride;
  const uint16_t *gate_w;
  const float *bias;
  const int64_t *tid2eid;
  int64_t vocab;
  const int32_t *token_ids;
  double scaling;
  int32_t *ids;
  int64_t ids_stride;
  float *weights;
  int64_t weights_stride;
  unsigned long long *counters;
  /* the caller's workspace: fp64 logits [T, E] (row stride E), written by
   * route_logits_kernel and read by route_kernel; NULL = none */
  double *zws;
};

/* Bytes of the fp64 logits region (rounded up so the staged x is 16-byte aligned). */
__host__ __device__ __forceinline__ int64_t route_z_bytes(int64_t tb, int64_t E) {
  return (tb * E * (int64_t)sizeof(double) + 15) / 16 * 16;
}

/* a ranks before b (the reference's order): larger first, NaN below
 * everything, equal values -> lower id first. */
__device__ __forceinline__ bool ranks_before(double a, int ia, double b, int ib) {
  const bool na = a != a, nb = b != b;
  if (na || nb) return na == nb ? ia < ib : nb;
  if (a != b) return a > b;
  return ia < ib;
}

__device__ __forceinline__ double score_of(int score, double z) {
  if (score == (int)DSK_MOE_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-z));
  const double sp = (z > 0 ? z : 0.0) + log1p(exp(-fabs(z)));
  return sqrt(sp);
}

/* ---------------------------------------------- logits into a workspace */
/* With a workspace the logits are computed by a grid of blocks, then
 * route_kernel selects from them (launched with PDL). One block per
 * (EB experts, TT tokens), EB = route_lg_eb(TT) (2 at T <= 2: E/2 blocks
 * stream gate_w at decode; else 4, more reuse of every load): its 256
 * threads split H in 8-column vectors (thread tid owns the vectors
 * tid + 256 j; kU steps of loads are issued before they are used), each
 * thread keeps EB * TT fp64 partial sums
 * (exact bf16 products, columns ascending), then a fixed-order reduction:
 * recursive halving over the lane bits 16, 8, ... (each of the NV sums
 * ends on its own lanes), a butterfly over the remaining lane bits, and
 * the 8 warps' results added in warp order by one thread each. Blocks
 * along x are expert groups (the tiles of one token tile run together and
 * share x in L2; gate_w stays in L2), along y token tiles (a grid-stride
 * loop beyond 65535). Deterministic: the order depends on H and TT only. */
constexpr int kLgThreads = 256;
constexpr int kLgWarps = kLgThreads / 32;
constexpr int kLgMaxY = 65535;    /* gridDim.y limit */
/* experts per logits block for TT tokens per block */
__host__ __device__ constexpr int route_lg_eb(int tt) { return tt <= 2 ? 2 : 4; }

__device__ __forceinline__ uint32_t u4_word(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
/* bf16 element c (0..7) of the 8 packed in v, as fp64 (exact). */
__device__ __forceinline__ double u4_bf16d(const uint4 &v, int c) {
  const uint32_t w = u4_word(v, c >> 1);
  return (double)__uint_as_float((c & 1) ? (w & 0xFFFF0000u) : (w << 16));
}
/* The n (0..8) bf16 at q, zero-padded to 8, packed as in memory. VEC: one
 * 16-byte load (q 16-byte aligned, n is 0 or 8); else element loads. */
template <bool VEC>
__device__ __forceinline__ uint4 load8_bf16(const uint16_t *q, int n) {
  if (VEC) return n > 0 ? __ldg((const uint4 *)q) : make_uint4(0, 0, 0, 0);
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int c = 0; c < 8; c++)
    if (c < n) w[c >> 1] |= (uint32_t)__ldg(q + c) << ((c & 1) * 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int TT, bool VEC>
__global__ void __launch_bounds__(kLgThreads) route_logits_kernel(RouteParams p) {
  constexpr int kLgEB = route_lg_eb(TT);
  constexpr int NV = kLgEB * TT; /* partial sums per thread, index el * TT + t */
  constexpr int LG = NV == 2 ? 1 : NV == 4 ? 2 : NV == 8 ? 3 : NV == 16 ? 4 : 5;
  /* column steps whose loads are issued together (T = 1: H up to 8192 in one batch) */
  constexpr int kU = TT == 1 ? 4 : TT == 2 ? 2 : 1;
  static_assert((1 << LG) == NV && LG <= 5, "NV: 2, 4, 8, 16 or 32");
  __shared__ double red[kLgWarps][NV];
  /* the selection kernel may launch now: it waits (griddepcontrol.wait) for
   * this whole grid before reading the logits */
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t T = p.T, E = p.E, H = p.H;
  const int64_t e0 = (int64_t)blockIdx.x * kLgEB;
  const int64_t nsteps = ((H + 7) / 8 + kLgThreads - 1) / kLgThreads;
  const int64_t ntiles = (T + TT - 1) / TT;
  for (int64_t tile = blockIdx.y; tile < ntiles; tile += gridDim.y) { /* block-uniform trip count */
    const int64_t t0 = tile * TT;
    double acc[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) acc[i] = 0.0;
    for (int64_t j0 = 0; j0 < nsteps; j0 += kU) {
      uint4 wv[kU][kLgEB], xv[kU][TT];
      int nv[kU]; /* columns of this thread's vector that exist (0..8) */
#pragma unroll
      for (int u = 0; u < kU; u++) {
        const int64_t col = ((j0 + u) * kLgThreads + tid) * 8;
        nv[u] = (j0 + u < nsteps && col < H) ? (int)(H - col < 8 ? H - col : 8) : 0;
        const int64_t cc = nv[u] > 0 ? col : 0; /* no pointer past the row */
#pragma unroll
        for (int el = 0; el < kLgEB; el++) {
          const bool live = e0 + el < E;
          wv[u][el] = load8_bf16<VEC>(p.gate_w + (live ? e0 + el : 0) * H + cc, live ? nv[u] : 0);
        }
#pragma unroll
        for (int t = 0; t < TT; t++) {
          const bool live = t0 + t < T;
          xv[u][t] = load8_bf16<VEC>(p.x + (live ? t0 + t : 0) * p.x_stride + cc, live ? nv[u] : 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kU; u++) {
        if (nv[u] == 0) continue;
        /* missing columns are 0 * 0: acc + 0 leaves acc as it is (acc is
         * never -0: it starts at +0 and RN sums are -0 only from -0 + -0) */
#pragma unroll
        for (int c = 0; c < 8; c++) {
          double wd[kLgEB], xd[TT];
#pragma unroll
          for (int el = 0; el < kLgEB; el++) wd[el] = u4_bf16d(wv[u][el], c);
#pragma unroll
          for (int t = 0; t < TT; t++) xd[t] = u4_bf16d(xv[u][t], c);
#pragma unroll
          for (int el = 0; el < kLgEB; el++)
#pragma unroll
            for (int t = 0; t < TT; t++) acc[el * TT + t] = fma(xd[t], wd[el], acc[el * TT + t]);
        }
      }
    }
    /* recursive halving: at level l (lane bit o = 16 >> l) the lane with
     * the bit set keeps the upper half of its h = NV >> (l + 1) pairs, the
     * other the lower half, each adding its partner's copy; after LG levels
     * the lane holds sum index lane >> (5 - LG) */
#pragma unroll
    for (int l = 0; l < LG; l++) {
      const int o = 16 >> l, h = NV >> (l + 1);
      const bool up = (lane & o) != 0;
#pragma unroll
      for (int i = 0; i < NV / 2; i++) {
        if (i < h) {
          const double lo = acc[i], hi = acc[i + h];
          const double got = __shfl_xor_sync(kFull, up ? lo : hi, o);
          acc[i] = (up ? hi : lo) + got;
        }
      }
    }
    /* the lanes that share the high bits hold the same index: butterfly over the low bits */
#pragma unroll
    for (int o = 16 >> LG; o > 0; o >>= 1) acc[0] += __shfl_xor_sync(kFull, acc[0], o);
    if ((lane & ((32 >> LG) - 1)) == 0) red[warp][lane >> (5 - LG)] = acc[0];
    __syncthreads();
    if (tid < NV) {
      double s = red[0][tid];
#pragma unroll
      for (int w = 1; w < kLgWarps; w++) s += red[w][tid];
      const int el = tid / TT, t = tid - (tid / TT) * TT;
      const int64_t e = e0 + el, tg = t0 + t;
      if (e < E && tg < T) p.zws[tg * E + e] = s;
    }
    __syncthreads(); /* red is rewritten by the next tile */
  }
}

template <int TT>
static void launch_logits(bool vec, dim3 grid, cudaStream_t st, const RouteParams &p) {
  if (vec)
    route_logits_kernel<TT, true><<<grid, kLgThreads, 0, st>>>(p);
  else
    route_logits_kernel<TT, false><<<grid, kLgThreads, 0, st>>>(p);
}

/* One block per TB tokens. Shared memory: z fp64 [TB, E], then (logits
 * computed here) x bf16 [TB, kRouteChunk]. With p.zws the logits come from
 * route_logits_kernel (this kernel is then launched with PDL). */
template <int TB, bool VEC>
__global__ void __launch_bounds__(RouteCfg<TB>::threads, 1) route_kernel(RouteParams p) {
  constexpr int kRouteThreads = RouteCfg<TB>::threads, kRouteWarps = RouteCfg<TB>::warps;
  extern __shared__ __align__(16) unsigned char smem[];
  double *z = (double *)smem;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int E = (int)p.E, K = (int)p.K;
  const int64_t t0 = (int64_t)blockIdx.x * TB;
  const int nt = (int)(p.T - t0 < TB ? p.T - t0 : TB);
  /* launched with PDL (p.zws): the logits kernel's writes are visible
   * after this; otherwise a no-op */
  asm volatile("griddepcontrol.wait;\n" ::: "memory");

  /* ---- 1. logits */
  if (p.logits || p.zws) { /* the given fp32 logits, or route_logits_kernel's fp64 ones */
    for (int i = tid; i < nt * E; i += kRouteThreads) {
      const int t = i / E, e = i - t * E;
      z[i] = p.logits ? (double)p.logits[(t0 + t) * p.logits_stride + e] : p.zws[(t0 + t) * p.E + e];
    }
  } else {
    uint16_t *xs = (uint16_t *)(smem + route_z_bytes(TB, E));
    for (int i = tid; i < TB * E; i += kRouteThreads) z[i] = 0.0;
    const int sl = lane & 7, grp = lane >> 3; /* 8 lanes per expert, 4 experts per warp */
    const int groups = (E + 3) / 4;
    for (int64_t h0 = 0; h0 < p.H; h0 += kRouteChunk) {
      __syncthreads(); /* the previous chunk's readers are done */
      for (int i = tid; i < TB * kRouteChunk; i += kRouteThreads) {
        const int t = i / kRouteChunk, c = i - t * kRouteChunk;
        const int64_t h = h0 + c;
        xs[i] = (t < nt && h < p.H) ? p.x[(t0 + t) * p.x_stride + h] : (uint16_t)0;
      }
      __syncthreads();
      for (int eg = warp; eg < groups; eg += kRouteWarps) {
        const int e = 4 * eg + grp;
        const bool live = e < E;
        const uint16_t *wrow = p.gate_w + (int64_t)(live ? e : 0) * p.H;
        double acc[TB];
#pragma unroll
        for (int t = 0; t < TB; t++) acc[t] = 0.0;
        /* columns c0 + c, c0 = 64 q + 8 sl, q ascending, c ascending: the
         * order of this lane's partial sums. Loads go in batches of
         * kRouteBatch q steps ahead of their use (memory-level parallelism). */
        for (int q0 = 0; q0 < kRouteChunk / 64; q0 += kRouteBatch) {
          uint4 wv[kRouteBatch];
          int nv[kRouteBatch]; /* columns of the 8 that exist (h + c < H) */
#pragma unroll
          for (int u = 0; u < kRouteBatch; u++) {
            const int64_t h = h0 + 64 * (q0 + u) + 8 * sl;
            nv[u] = 0;
            wv[u] = make_uint4(0, 0, 0, 0);
            if (live && h < p.H) {
              nv[u] = p.H - h < 8 ? (int)(p.H - h) : 8;
              if (VEC) /* H % 8 == 0, gate_w 16-byte aligned: nv = 8 */
                wv[u] = *(const uint4 *)(wrow + h);
            }
          }
#pragma unroll
          for (int u = 0; u < kRouteBatch; u++) {
            const int c0 = 64 * (q0 + u) + 8 * sl;
            const int64_t h = h0 + c0;
            double w[8];
            if (VEC) {
              const uint32_t ww[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
#pragma unroll
              for (int c = 0; c < 4; c++) {
                w[2 * c] = (double)__uint_as_float(ww[c] << 16);
                w[2 * c + 1] = (double)__uint_as_float(ww[c] & 0xFFFF0000u);
              }
            } else {
#pragma unroll
              for (int c = 0; c < 8; c++) w[c] = c < nv[u] ? (double)bf16f(wrow[h + c]) : 0.0;
            }
            if (nv[u] == 8) {
#pragma unroll
              for (int t = 0; t < TB; t++) {
                const uint4 xv = *(const uint4 *)(xs + t * kRouteChunk + c0);
                const uint32_t xx[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int c = 0; c < 4; c++) {
                  acc[t] += (double)__uint_as_float(xx[c] << 16) * w[2 * c];
                  acc[t] += (double)__uint_as_float(xx[c] & 0xFFFF0000u) * w[2 * c + 1];
                }
              }
            } else if (nv[u] > 0) { /* the tail of a row whose H is not a multiple of 8 */
#pragma unroll
              for (int t = 0; t < TB; t++) {
#pragma unroll
                for (int c = 0; c < 8; c++)
                  if (c < nv[u]) acc[t] += (double)bf16f(xs[t * kRouteChunk + c0 + c]) * w[c];
              }
            }
          }
        }
        /* fixed-order reduction over the 8 lanes of the expert (all lanes
         * end with the same sum: IEEE addition is commutative) */
#pragma unroll
        for (int t = 0; t < TB; t++) {
#pragma unroll
          for (int o = 4; o; o >>= 1) acc[t] += __shfl_xor_sync(kFull, acc[t], o);
        }
#pragma unroll
        for (int t = 0; t < TB; t++)
          if (live && sl == t && t < nt) z[t * E + e] += acc[t];
      }
    }
  }
  __syncthreads();

  /* ---- 2. one warp per token: scores, selection, weights */
  for (int t = warp; t < nt; t += kRouteWarps) {
    double *zt = z + t * E;
    const int64_t tg = t0 + t;
    bool nonfin = false;
    for (int e = lane; e < E; e += 32) {
      const double zz = zt[e];
      nonfin |= !isfinite(zz);
      zt[e] = score_of(p.score, zz);
    }
    nonfin = __any_sync(kFull, nonfin);
    __syncwarp();
    int my_idx = -1; /* lane k < K: the k-th selected id */
    bool badt = false;
    if (p.hash) {
      if (lane < K) {
        const int32_t tok = p.token_ids[tg];
        int64_t e = -1;
        if (tok >= 0 && tok < p.vocab) e = p.tid2eid[(int64_t)tok * K + lane];
        if (e < 0 || e >= E) {
          badt = true;
          e = -1;
        }
        my_idx = (int)e;
      }
      badt = __any_sync(kFull, badt);
    } else {
      uint32_t taken = 0; /* bit j: expert lane + 32 j taken (E <= 1024) */
      for (int k = 0; k < K; k++) {
        double bv = 0.0;
        int be = -1;
        for (int j = 0; lane + 32 * j < E; j++) {
          if ((taken >> j) & 1u) continue;
          const int e = lane + 32 * j;
          const double v = zt[e] + (p.bias ? (double)p.bias[e] : 0.0);
          if (be < 0 || ranks_before(v, e, bv, be)) {
            bv = v;
            be = e;
          }
        }
#pragma unroll
        for (int o = 16; o; o >>= 1) {
          const double ov = __shfl_xor_sync(kFull, bv, o);
          const int oe = __shfl_xor_sync(kFull, be, o);
          if (oe >= 0 && (be < 0 || ranks_before(ov, oe, bv, be))) {
            bv = ov;
            be = oe;
          }
        }
        /* be >= 0: K <= E leaves a candidate in every pass */
        if (be >= 0 && lane == (be & 31)) taken |= 1u << (be >> 5);
        if (lane == k) my_idx = be;
      }
    }
    const double my_w = my_idx >= 0 ? zt[my_idx] : 0.0;
    double sum = 0.0;
    for (int k = 0; k < K; k++) sum += __shfl_sync(kFull, my_w, k);
    const double div = p.renormalize ? (sum > 1e-20 ? sum : 1e-20) : 1.0;
    if (lane < K) {
      p.ids[tg * p.ids_stride + lane] = my_idx;
      p.weights[tg * p.weights_stride + lane] = (float)(my_w / div * p.scaling);
    }
    if (lane == 0 && p.counters) {
      if (p.hash && badt) atomicAdd(&p.counters[0], 1ull);
      if (nonfin) atomicAdd(&p.counters[1], 1ull);
    }
  }
}

template <int TB>
static cudaError_t launch_route(bool vec, bool pdl, size_t smem, unsigned grid, cudaStream_t st,
                                const RouteParams &p) {
  if (pdl) /* after route_logits_kernel: selection only */
    return dsk__launch_pdl(route_kernel<TB, false>, dim3(grid), dim3(RouteCfg<TB>::threads), smem, st, p);
  if (vec)
    route_kernel<TB, true><<<grid, RouteCfg<TB>::threads, smem, st>>>(p);
  else
    route_kernel<TB, false><<<grid, RouteCfg<TB>::threads, smem, st>>>(p);
  return cudaSuccess;
}

/* ============================================================ permute */
struct PermParams {
  int64_t T, topk, E, EL, off, K, A, M;
  const int32_t *ids;
  int64_t ids_stride;
  const uint8_t *xq;
  int64_t xq_stride;
  const uint8_t *xsf;
  int64_t xsf_stride;
  uint8_t *A_out;
  int64_t A_stride;
  uint8_t *Asf;
  int64_t Asf_stride;
  int32_t *m_indices;
  int32_t *inv;
  int64_t inv_stride;
  int64_t *cnt;   /* workspace [EL] */
  int64_t *start; /* workspace [EL] */
  unsigned long long *counters;
};

constexpr int kCountThreads = 1024; /* >= DSK_MOE_MAX_EXPERTS: one scan element per thread */
constexpr int kCountBatch = 4;

/* 1. One block: per-expert counts, inv_perm = -1 for every non-local
 * assignment (-1 ids, bad ids, other ranks' experts), bad ids counted, then
 * start = exclusive scan of round_up(cnt, A). */
__global__ void __launch_bounds__(kCountThreads) perm_count_kernel(PermParams p) {
  __shared__ unsigned long long s_cnt[kCountThreads];
  __shared__ long long s_wsum[kCountThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  s_cnt[tid] = 0;
  __syncthreads();
  const int64_t NA = p.T * p.topk;
  long long bad = 0;
  for (int64_t i0 = tid; i0 < NA; i0 += (int64_t)kCountThreads * kCountBatch) {
    int64_t id[kCountBatch];
#pragma unroll
    for (int u = 0; u < kCountBatch; u++) { /* loads first, then the atomics */
      const int64_t i = i0 + (int64_t)u * kCountThreads;
      id[u] = -1;
      if (i < NA) {
        const int64_t t = i / p.topk, k = i - t * p.topk;
        id[u] = p.ids[t * p.ids_stride + k];
      }
    }
#pragma unroll
    for (int u = 0; u < kCountBatch; u++) {
      const int64_t i = i0 + (int64_t)u * kCountThreads;
      if (i >= NA) continue;
      const int64_t t = i / p.topk, k = i - t * p.topk;
      int32_t *ip = p.inv + t * p.inv_stride + k;
      if (id[u] == -1) {
        *ip = -1;
      } else if (id[u] < -1 || id[u] >= p.E) {
        *ip = -1;
        bad++;
      } else {
        const int64_t l = id[u] - p.off;
        if (l >= 0 && l < p.EL)
          atomicAdd(&s_cnt[l], 1ull); /* inv_perm written by perm_rank_kernel */
        else
          *ip = -1;
      }
    }
  }
  if (p.counters && bad) atomicAdd(&p.counters[0], (unsigned long long)bad);
  __syncthreads();
  /* block-wide exclusive scan of len = round_up(cnt, A) over thread = expert */
  const long long c = tid < p.EL ? (long long)s_cnt[tid] : 0;
  const long long len = (c + p.A - 1) / p.A * p.A;
  long long v = len;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const long long n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) s_wsum[warp] = v;
  __syncthreads();
  if (warp == 0) {
    long long w = s_wsum[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const long long n = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += n;
    }
    s_wsum[lane] = w;
  }
  __syncthreads();
  const long long excl = v - len + (warp > 0 ? s_wsum[warp - 1] : 0);
  if (tid < p.EL) {
    p.cnt[tid] = c;
    p.start[tid] = excl;
  }
}

constexpr int kRankThreads = 256;
constexpr int kRankPer = 8; /* consecutive assignments per thread and tile */

/* 2. One block per local expert l: its assignments in (t, k) order get rows
 * start[l] + rank (rank = a block scan of per-thread match counts). */
__global__ void __launch_bounds__(kRankThreads) perm_rank_kernel(PermParams p) {
  __shared__ int s_w[kRankThreads / 32];
  const int64_t l = blockIdx.x;
  const int64_t cnt = p.cnt[l];
  if (cnt == 0) return; /* block-uniform */
  const int64_t start = p.start[l], target = p.off + l;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t NA = p.T * p.topk;
  long long dropped = 0;
  int64_t running = 0; /* identical in every thread */
  for (int64_t base = 0; base < NA && running < cnt; base += (int64_t)kRankThreads * kRankPer) {
    const int64_t i0 = base + (int64_t)tid * kRankPer;
    uint32_t mask = 0;
#pragma unroll
    for (int u = 0; u < kRankPer; u++) {
      const int64_t i = i0 + u;
      if (i < NA) {
        const int64_t t = i / p.topk, k = i - t * p.topk;
        if ((int64_t)p.ids[t * p.ids_stride + k] == target) mask |= 1u << u;
      }
    }
    const int c = __popc(mask);
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += n;
    }
    if (lane == 31) s_w[warp] = incl;
    __syncthreads();
    int pre = 0, tot = 0;
#pragma unroll
    for (int w = 0; w < kRankThreads / 32; w++) {
      const int x = s_w[w];
      pre += w < warp ? x : 0;
      tot += x;
    }
    __syncthreads(); /* s_w is rewritten by the next tile */
    int64_t rank = running + pre + (incl - c);
    for (int u = 0; u < kRankPer; u++) {
      if (!((mask >> u) & 1u)) continue;
      const int64_t i = i0 + u;
      const int64_t t = i / p.topk, k = i - t * p.topk;
      const int64_t row = start + rank++;
      if (row < p.M) {
        p.inv[t * p.inv_stride + k] = (int32_t)row;
      } else {
        p.inv[t * p.inv_stride + k] = -1;
        dropped++;
      }
    }
    running += tot;
  }
  if (p.counters && dropped) atomicAdd(&p.counters[1], (unsigned long long)dropped);
}

constexpr int kRowThreads = 128;

/* 3. Blocks [0, M): row r of A (padding rows and their scale bytes zeroed,
 * m_indices); blocks [M, M + T*topk): assignment copies (the fp8 row and
 * its scale bytes to row inv_perm). Rows and assignments write disjoint
 * rows: a real row is written only by its assignment. */
template <bool VEC>
__global__ void __launch_bounds__(kRowThreads) perm_rows_kernel(PermParams p) {
  const int64_t NA = p.T * p.topk, items = p.M + NA;
  const int64_t sfk = p.K / DSK_FMT_FP8_GROUP;
  const int tid = threadIdx.x;
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    if (it < p.M) {
      const int64_t r = it;
      /* largest l with start[l] <= r (start[0] = 0, non-decreasing); r is a
       * real row iff it is inside l's first cnt[l] rows */
      int lo = 0, hi = (int)p.EL - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (p.start[mid] <= r)
          lo = mid;
        else
          hi = mid - 1;
      }
      const bool real = r - p.start[lo] < p.cnt[lo];
      if (tid == 0) p.m_indices[r] = real ? lo : -1;
      if (!real) {
        uint8_t *a = p.A_out + r * p.A_stride;
        if (VEC) {
          for (int64_t j = tid; j < p.K / 16; j += kRowThreads) ((uint4 *)a)[j] = make_uint4(0, 0, 0, 0);
        } else {
          for (int64_t j = tid; j < p.K; j += kRowThreads) a[j] = 0;
        }
        for (int64_t j = tid; j < sfk; j += kRowThreads) p.Asf[r * p.Asf_stride + j] = 0;
      }
    } else {
      const int64_t i = it - p.M;
      const int64_t t = i / p.topk, k = i - t * p.topk;
      const int32_t row = p.inv[t * p.inv_stride + k];
      if (row < 0) continue; /* block-uniform */
      const uint8_t *src = p.xq + t * p.xq_stride;
      uint8_t *dst = p.A_out + (int64_t)row * p.A_stride;
      if (VEC) {
        for (int64_t j = tid; j < p.K / 16; j += kRowThreads) ((uint4 *)dst)[j] = ((const uint4 *)src)[j];
      } else {
        for (int64_t j = tid; j < p.K; j += kRowThreads) dst[j] = src[j];
      }
      for (int64_t j = tid; j < sfk; j += kRowThreads) p.Asf[(int64_t)row * p.Asf_stride + j] = p.xsf[t * p.xsf_stride + j];
    }
  }
}

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

/* One block per token; a thread per V columns: fp64 sum in the reference's
 * order (shared, then k ascending), rounded fp64 -> fp32 -> bf16. */
template <int V>
__global__ void __launch_bounds__(kThreads) gather_kernel(GatherParams p) {
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
#define MOE_SET_DEVICE(what) DSK_CUDA_TRY(what, cudaSetDevice(dsk__cuda_state(ctx)->device))

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
    mx_quantize_kernel<true><<<grid, kThreads, 0, st>>>(p);
  else
    mx_quantize_kernel<false><<<grid, kThreads, 0, st>>>(p);
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
  const int64_t items = (d->sf_packed ? p.T4 : p.rows) * ((p.ng + 3) / 4);
  const unsigned grid = grid_for(items, kThreads / 32);
  if (d->x_dtype == DSK_MOE_IN_F32)
    quant128_kernel<0, true><<<grid, kThreads, 0, st>>>(p);
  else
    quant128_kernel<0, false><<<grid, kThreads, 0, st>>>(p);
  DSK_CUDA_LAUNCHED("fp8_quantize_1x128");
  return DSK_STATUS_OK;
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
  const int64_t items = (d->sf_packed ? p.T4 : p.rows) * ((p.ng + 3) / 4);
  quant128_kernel<1, false><<<grid_for(items, kThreads / 32), kThreads, 0, st>>>(p);
  DSK_CUDA_LAUNCHED("swiglu_quant");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d) {
  MOE_SET_DEVICE("pack_ue8m0_words");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  const int64_t total = d->rows * ((d->sf_k + 3) / 4);
  pack_words_kernel<<<grid_for(total, kThreads), kThreads, 0, st>>>(d->rows, d->sf_k, d->sf, d->sf_stride, d->out,
                                                                     d->out_stride);
  DSK_CUDA_LAUNCHED("pack_ue8m0_words");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *d) {
  MOE_SET_DEVICE("sf_pack_mn_major");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  const int64_t total = dsk_sf_packed_words(d->G, d->MN, d->sf_k); /* validated: no overflow */
  sf_pack_kernel<<<grid_for(total, kThreads), kThreads, 0, st>>>(d->G, d->MN, d->sf_k, d->gran_mn, d->sf,
                                                                  d->sf_stride, d->sf_group_stride, d->out);
  DSK_CUDA_LAUNCHED("sf_pack_mn_major");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_moe_route(dsk_ctx *ctx, const dsk_moe_route_desc *d) {
  MOE_SET_DEVICE("moe_route");
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  RouteParams p;
  memset(&p, 0, sizeof p);
  p.T = d->T;
  p.E = d->E;
  p.K = d->topk;
  p.H = d->H;
  p.score = (int)d->score;
  p.hash = d->router == DSK_MOE_ROUTER_HASH;
  p.renormalize = d->renormalize;
  p.logits = d->logits;
  p.logits_stride = d->logits_stride;
  p.x = (const uint16_t *)d->x;
  p.x_stride = d->x_stride;
  p.gate_w = (const uint16_t *)d->gate_w;
  p.bias = d->bias;
  p.tid2eid = d->tid2eid;
  p.vocab = d->vocab;
  p.token_ids = d->token_ids;
  p.scaling = (double)d->routed_scaling_factor;
  p.ids = d->ids;
  p.ids_stride = d->ids_stride;
  p.weights = d->weights;
  p.weights_stride = d->weights_stride;
  p.counters = (unsigned long long *)d->counters;
  /* a workspace (validated: >= T * E * 8 bytes, 16-byte aligned) when the
   * logits are computed here: logits kernel, then selection */
  const bool ws = d->logits == NULL && d->workspace != NULL && d->workspace_bytes > 0;
  const bool staged = d->logits != NULL || ws; /* route_kernel reads ready logits */
  /* tokens per block: about T / SMs (a few blocks per SM re-read the gate
   * weights from L2), capped by the shared-memory budget; in {1, 2, 4, 8} */
  const int64_t per_tok = p.E * (int64_t)sizeof(double) + (staged ? 0 : kRouteChunk * 2);
  const int64_t tbmax = (kRouteSmem - 16) / per_tok; /* >= 4: E <= 1024 */
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  const int64_t want = (p.T + sms - 1) / sms;
  int tb = 1;
  while (tb < 8 && tb < want && 2 * tb <= tbmax) tb *= 2;
  const size_t smem = (size_t)(route_z_bytes(tb, p.E) + (staged ? 0 : (int64_t)tb * kRouteChunk * 2));
  const int64_t blocks = (p.T + tb - 1) / tb;
  if (blocks > INT32_MAX) return dsk__fail(DSK_STATUS_UNSUPPORTED, "moe_route: T %lld too large", (long long)p.T);
  if (ws) {
    p.zws = (double *)d->workspace;
    const int tt = p.T >= 5 ? 8 : p.T >= 3 ? 4 : (int)p.T; /* tokens per logits block */
    const int64_t tiles = (p.T + tt - 1) / tt;
    const int eb = route_lg_eb(tt);
    const dim3 grid((unsigned)((p.E + eb - 1) / eb), (unsigned)(tiles < kLgMaxY ? tiles : kLgMaxY));
    const bool lvec = p.H % 8 == 0 && p.x_stride % 8 == 0 && aligned16(d->gate_w) && aligned16(d->x);
    switch (tt) {
      case 1: launch_logits<1>(lvec, grid, st, p); break;
      case 2: launch_logits<2>(lvec, grid, st, p); break;
      case 4: launch_logits<4>(lvec, grid, st, p); break;
      default: launch_logits<8>(lvec, grid, st, p); break;
    }
    DSK_CUDA_LAUNCHED("moe_route (logits)");
  }
  const bool vec = !staged && p.H % 8 == 0 && aligned16(d->gate_w);
  const unsigned nb = (unsigned)blocks;
  switch (tb) {
    case 1: DSK_CUDA_TRY("moe_route (selection)", launch_route<1>(vec, ws, smem, nb, st, p)); break;
    case 2: DSK_CUDA_TRY("moe_route (selection)", launch_route<2>(vec, ws, smem, nb, st, p)); break;
    case 4: DSK_CUDA_TRY("moe_route (selection)", launch_route<4>(vec, ws, smem, nb, st, p)); break;
    default: DSK_CUDA_TRY("moe_route (selection)", launch_route<8>(vec, ws, smem, nb, st, p)); break;
  }
  DSK_CUDA_LAUNCHED("moe_route");
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
  perm_count_kernel<<<1, kCountThreads, 0, st>>>(p);
  DSK_CUDA_LAUNCHED("moe_permute");
  perm_rank_kernel<<<(unsigned)p.EL, kRankThreads, 0, st>>>(p);
  DSK_CUDA_LAUNCHED("moe_permute");
  const int64_t items = p.M + p.T * p.topk;
  const bool vec = aligned16(d->xq) && d->xq_stride % 16 == 0 && (p.M == 0 || (aligned16(d->A) && d->A_stride % 16 == 0));
  if (vec)
    perm_rows_kernel<true><<<grid_for(items, 1), kRowThreads, 0, st>>>(p);
  else
    perm_rows_kernel<false><<<grid_for(items, 1), kRowThreads, 0, st>>>(p);
  DSK_CUDA_LAUNCHED("moe_permute");
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
  if (p.T > INT32_MAX) return dsk__fail(DSK_STATUS_UNSUPPORTED, "moe_gather: T %lld too large", (long long)p.T);
  const bool vec = p.N % 8 == 0 && aligned16(d->y) && d->y_stride % 8 == 0 &&
                   (p.M == 0 || (aligned16(d->D2) && d->D2_stride % 8 == 0)) &&
                   (!d->shared || (aligned16(d->shared) && d->shared_stride % 8 == 0));
  if (vec)
    gather_kernel<8><<<(unsigned)p.T, kThreads, 0, st>>>(p);
  else
    gather_kernel<1><<<(unsigned)p.T, kThreads, 0, st>>>(p);
  DSK_CUDA_LAUNCHED("moe_gather");
  return DSK_STATUS_OK;
}
