/* moe_route.cu - the CUDA MoE router (dsk__cuda_moe_route; spec/mxfp4-moe.md
 * §5, docs/moe.md): gate logits, scores, selection and weights for the
 * DSv4 and GLM-5.1 routers, with or without the caller's workspace. The
 * other MoE ops are in moe_ops.cu, the GEMMs in moe_gemm.cu. Descriptors
 * arrive validated by src/ops/moe.c.
 *
 * Semantics against the cpu-ref (src/backend/cpu/ref_moe.c):
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
 *    fp32 weights may differ by one ulp. With a workspace, T >= 128 and
 *    vector-friendly x / gate_w (MoE v15, moe_route_mma.cuh), the logits
 *    come from bf16 MMAs with a two-sum per warp and stage (16 or 64
 *    products) instead: ~48 bits (about 1e-8 of the sum of |products|), so
 *    ids may differ where two biased scores are within ~1e-7 relative (spec
 *    §8 allows 1e-6) and weights stay within 1e-6; identical gate rows still
 *    give identical logits. Deterministic run to run either way; a near tie
 *    may resolve differently for another T (the kernel, and the tile, depend
 *    on T). A stage sum beyond fp32's range is +-Inf (fp64: finite).
 *
 * Kernels:
 *  route           one block per TB in {1,2,4,8} tokens (512 threads;
 *                  1024 when TB = 1; 32 TB on ready logits, RouteCfg):
 *                  fp64 logits [TB, E] in shared memory
 *                  (x staged in chunks of 1024 columns; 8 lanes per expert),
 *                  then the scores by all threads (the bias staged in
 *                  shared memory), then the top-k: with TB 1 (T <= SMs)
 *                  every expert's rank counted by all threads, else one
 *                  warp per token making K argmax passes over the staged
 *                  values with a per-lane "taken" bit mask; or the hash
 *                  table; then one warp per token for the weights. Without
 *                  a workspace the logits of a token cannot be spread over
 *                  several blocks: at
 *                  decode (T small) one SM streams the whole gate weight
 *                  (2-5.5 MB, ~95 us). With the caller's workspace
 *                  (dsk_moe_route_plan: fp64 logits [T, E]) two kernels:
 *                  route_logits_kernel, one 256-thread block per (2 or 4
 *                  experts, TT in {1,2,4,8} tokens) splitting H (T = 1:
 *                  E/2 blocks, every 16-byte load of gate_w in flight at
 *                  once), or from T 128 route_logits_mma_kernel (16 x 32
 *                  and, from T 512, 64 x 64 token x expert tiles), then
 *                  route_kernel's selection on those logits,
 *                  launched with PDL (griddepcontrol.wait before any read).
 *
 * Capture-safe: no allocation, no host synchronisation, no host reads of
 * device data; shared memory per block <= 48 KB, except the MMA logits'
 * small tile (72 KB: cudaFuncSetAttribute before each launch, <= SM120's
 * 99 KB).
 */
#include <stdint.h>
#include <string.h>

#include "cuda_common.cuh"
#include "ptx.cuh"
#include "format/mxfp4.h"

namespace {

#include "moe_common.cuh"

/* ============================================================== route */
/* DSK_MOE_ROUTE_SEL_WARPS (compile-time; default 1; MoE v18): a selection
 * kernel that reads ready logits (SEL) with TB >= 2 tokens per block runs
 * one warp per token (32 TB threads, at most 128 registers: two blocks per
 * SM) instead of 512 threads, of which TB warps pick experts while the
 * others wait at the end; 0 = 512 threads (A/B). */
#ifndef DSK_MOE_ROUTE_SEL_WARPS
#define DSK_MOE_ROUTE_SEL_WARPS 1
#endif
/* threads per block: 1024 with one token per block (decode: the block
 * streams the whole gate weight, so as many loads in flight as possible,
 * or ranks every expert with all threads), else 512, or one warp per token
 * for the selection alone (above) */
template <int TB, bool SEL>
struct RouteCfg {
  static constexpr bool kWarpPerToken = DSK_MOE_ROUTE_SEL_WARPS && SEL && TB > 1;
  static constexpr int threads = TB == 1 ? 1024 : kWarpPerToken ? 32 * TB : 512;
  static constexpr int warps = threads / 32;
  static constexpr int min_blocks = kWarpPerToken ? 2 : 1;
};
/* DSK_MOE_ROUTE_V12 (compile-time; default 1): the selection kernel's bias
 * load beside the logits' and its rank count on the keys' high words with an
 * exact recount where they tie (MoE v12); 0 = the v7 kernel (A/B). */
#ifndef DSK_MOE_ROUTE_V12
#define DSK_MOE_ROUTE_V12 1
#endif
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
/* Bytes of the selection's region after z and the staged x: with one token
 * per block (the rank selection, TB 1) first its order keys u64 [E] and
 * the selected ids [DSK_MOE_MAX_TOPK]; then the bias as fp32 [E] and the
 * non-finite flags [TB]. */
__host__ __device__ __forceinline__ int64_t route_rank_bytes(int64_t tb, int64_t E) {
  return tb == 1 ? E * 8 + DSK_MOE_MAX_TOPK * 4 : 0;
}
__host__ __device__ __forceinline__ int64_t route_sel_bytes(int64_t tb, int64_t E) {
  return (route_rank_bytes(tb, E) + E * 4 + tb * 4 + 15) / 16 * 16;
}

/* a ranks before b (the reference's order): larger first, NaN below
 * everything, equal values -> lower id first. */
__device__ __forceinline__ bool ranks_before(double a, int ia, double b, int ib) {
  const bool na = a != a, nb = b != b;
  if (na || nb) return na == nb ? ia < ib : nb;
  if (a != b) return a > b;
  return ia < ib;
}

/* An unsigned key whose order is ranks_before's without the id: larger
 * values larger keys, -0 equal to +0, NaN (key 0) below -Inf. */
__device__ __forceinline__ unsigned long long order_key(double v) {
  if (v != v) return 0ull;
  v += 0.0; /* -0 -> +0 (round to nearest) */
  const unsigned long long b = (unsigned long long)__double_as_longlong(v);
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
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
  dsk_ptx::pdl_wait(); /* before any global access (launched with PDL) */
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

/* DSK_MOE_ROUTE_MMA (compile-time; default 1; MoE v15): the logits by
 * bf16 mma.sync with a two-sum per stage (moe_route_mma.cuh) for
 * T >= DSK_MOE_ROUTE_MMA_MIN_T, the 64 x 64 tile from
 * DSK_MOE_ROUTE_MMA_LARGE_T; 0 = the fp64-FMA kernel for every T (A/B). */
#ifndef DSK_MOE_ROUTE_MMA
#define DSK_MOE_ROUTE_MMA 1
#endif
#ifndef DSK_MOE_ROUTE_MMA_MIN_T
#define DSK_MOE_ROUTE_MMA_MIN_T 128
#endif
#ifndef DSK_MOE_ROUTE_MMA_LARGE_T
#define DSK_MOE_ROUTE_MMA_LARGE_T 512
#endif
#include "moe_route_mma.cuh"

template <bool LARGE>
static cudaError_t launch_logits_mma(cudaStream_t st, const RouteParams &p) {
  using C = RmCfg<LARGE>;
  RouteMmaArgs a;
  a.T = p.T;
  a.E = p.E;
  a.H = p.H;
  a.x = p.x;
  a.x_stride = p.x_stride;
  a.gate_w = p.gate_w;
  a.z = p.zws;
  const int64_t tiles = (p.T + C::BT - 1) / C::BT;
  const dim3 grid((unsigned)((p.E + C::BE - 1) / C::BE), (unsigned)(tiles < kLgMaxY ? tiles : kLgMaxY));
  if (C::SMEM > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(route_logits_mma_kernel<LARGE>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
  }
  return moe_launch(route_logits_mma_kernel<LARGE>, grid, dim3(C::THREADS), (size_t)C::SMEM, st, a);
}

template <int TT>
static cudaError_t launch_logits(bool vec, dim3 grid, cudaStream_t st, const RouteParams &p) {
  if (vec)
    return moe_launch(route_logits_kernel<TT, true>, grid, dim3(kLgThreads), 0, st, p);
  return moe_launch(route_logits_kernel<TT, false>, grid, dim3(kLgThreads), 0, st, p);
}

/* One block per TB tokens. Shared memory: z fp64 [TB, E], then (logits
 * computed here) x bf16 [TB, kRouteChunk]. With p.zws the logits come from
 * route_logits_kernel (this kernel is then launched with PDL). */
template <int TB, bool VEC, bool SEL>
__global__ void __launch_bounds__(RouteCfg<TB, SEL>::threads, RouteCfg<TB, SEL>::min_blocks) route_kernel(RouteParams p) {
  constexpr int kRouteThreads = RouteCfg<TB, SEL>::threads, kRouteWarps = RouteCfg<TB, SEL>::warps;
  extern __shared__ __align__(16) unsigned char smem[];
  double *z = (double *)smem;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int E = (int)p.E, K = (int)p.K;
  const int64_t t0 = (int64_t)blockIdx.x * TB;
  const int nt = (int)(p.T - t0 < TB ? p.T - t0 : TB);
  unsigned char *sel_base = smem + route_z_bytes(TB, E) + ((p.logits || p.zws) ? 0 : TB * kRouteChunk * 2);
  unsigned long long *key_s = (unsigned long long *)sel_base;   /* TB 1: [E] */
  int *seli_s = (int *)(sel_base + 8 * (int64_t)E);              /* TB 1: [DSK_MOE_MAX_TOPK] */
  float *bias_s = (float *)(sel_base + route_rank_bytes(TB, E)); /* [E] */
  int *nonfin_s = (int *)(bias_s + E);        /* [TB] */
  if (tid < TB) nonfin_s[tid] = 0;             /* ordered before use by the barrier after step 1 */
  /* launched with PDL (p.zws): the logits kernel's writes are visible
   * after this; otherwise a no-op */
  dsk_ptx::pdl_wait();

  /* this thread's bias value (expert tid), loaded now so that its round
   * trip overlaps the logits' (before, the bias was loaded after the
   * logits' barrier: two dependent DRAM trips) */
  const float bias_pre = (DSK_MOE_ROUTE_V12 && p.bias && tid < E) ? p.bias[tid] : 0.0f;

  /* ---- 1. logits */
  if (SEL || p.logits || p.zws) { /* the given fp32 logits, or route_logits_kernel's fp64 ones (SEL: one of them) */
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

  /* ---- 2. scores by all threads (the bias staged once), non-finite
   * logits flagged per token */
  for (int e = tid; e < E; e += kRouteThreads)
    bias_s[e] = (DSK_MOE_ROUTE_V12 && e == tid) ? bias_pre : (p.bias ? p.bias[e] : 0.0f);
  for (int i = tid; i < nt * E; i += kRouteThreads) {
    const double zz = z[i];
    if (!isfinite(zz)) nonfin_s[i / E] = 1;
    z[i] = score_of(p.score, zz);
  }
  __syncthreads();
  /* ---- 3a. one token per block (decode: T <= SMs), not hashed: the
   * selection by all threads. Expert e's rank is the number of experts that
   * rank before it (ranks_before's order: order_key descending, then the
   * lower id), counted by 4 threads over every 4th expert and added by two
   * shuffles; ranks 0..K-1 are the K argmax passes' picks in pick order, so
   * the ids and weights below are the same values. One warp alone took ~9
   * us for the K passes there (ncu, DSv4-Flash T 1: 23 k cycles, 7 k warp
   * instructions; docs/benchmarks.md, MoE v7). */
  constexpr bool kRank = TB == 1;
  if (kRank && !p.hash) {
    for (int e = tid; e < E; e += kRouteThreads) key_s[e] = order_key(z[e] + (double)bias_s[e]);
    __syncthreads();
    const int j = tid & 3;
    constexpr int kQuads = kRouteThreads / 4;
    for (int e0 = 0; e0 < E; e0 += kQuads) { /* uniform trip count: the shuffles need every lane */
      const int e = e0 + (tid >> 2);
      const bool live = e < E;
      const unsigned long long key = key_s[live ? e : 0];
      int cnt = 0;
      bool exact = !DSK_MOE_ROUTE_V12;
      if (DSK_MOE_ROUTE_V12) {
        /* the high 32 bits of the keys decide every pair whose high words
         * differ (one 32-bit load and compare per pair instead of two
         * 64-bit compares); a warp with a pair of equal high words (other
         * than an expert with itself) recounts exactly below */
        const uint32_t *hi_s = reinterpret_cast<const uint32_t *>(key_s) + 1; /* little-endian: word 2 o + 1 */
        const uint32_t kh = (uint32_t)(key >> 32);
        bool amb = false;
        if (live)
          for (int o = j; o < E; o += 4) {
            const uint32_t ho = hi_s[2 * o];
            cnt += ho > kh;
            amb |= (ho == kh) & (o != e);
          }
        exact = __any_sync(kFull, amb);
      }
      if (exact) {
        cnt = 0;
        if (live)
          for (int o = j; o < E; o += 4) {
            const unsigned long long ko = key_s[o];
            cnt += (ko > key) | ((ko == key) & (o < e));
          }
      }
      cnt += __shfl_xor_sync(kFull, cnt, 1);
      cnt += __shfl_xor_sync(kFull, cnt, 2);
      if (live && j == 0 && cnt < K) seli_s[cnt] = e;
    }
    __syncthreads();
  }
  /* ---- 3. one warp per token: selection (K argmax passes over the
   * staged scores and bias, or the hash table; TB 1: the ranks above) and
   * weights */
  for (int t = warp; t < nt; t += kRouteWarps) {
    double *zt = z + t * E;
    const int64_t tg = t0 + t;
    const bool nonfin = nonfin_s[t] != 0;
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
    } else if (kRank) {
      if (lane < K) my_idx = seli_s[lane];
    } else {
      uint32_t taken = 0; /* bit j: expert lane + 32 j taken (E <= 1024) */
      for (int k = 0; k < K; k++) {
        double bv = 0.0;
        int be = -1;
        for (int j = 0; lane + 32 * j < E; j++) {
          if ((taken >> j) & 1u) continue;
          const int e = lane + 32 * j;
          const double v = zt[e] + (double)bias_s[e];
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
    return dsk__launch_pdl(route_kernel<TB, false, true>, dim3(grid), dim3(RouteCfg<TB, true>::threads), smem, st, p);
  if (p.logits) /* the caller's logits: selection only */
    return moe_launch(route_kernel<TB, false, true>, dim3(grid), dim3(RouteCfg<TB, true>::threads), smem, st, p);
  if (vec) return moe_launch(route_kernel<TB, true, false>, dim3(grid), dim3(RouteCfg<TB, false>::threads), smem, st, p);
  return moe_launch(route_kernel<TB, false, false>, dim3(grid), dim3(RouteCfg<TB, false>::threads), smem, st, p);
}

} /* namespace */

/* ====================================================== entry point */
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
  const int64_t per_tok = p.E * (int64_t)sizeof(double) + (staged ? 0 : kRouteChunk * 2) + 4;
  const int64_t tbmax = (kRouteSmem - 32 - p.E * 4) / per_tok; /* >= 4: E <= 1024 */
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  const int64_t want = (p.T + sms - 1) / sms;
  int tb = 1;
  while (tb < 8 && tb < want && 2 * tb <= tbmax) tb *= 2;
  const size_t smem = (size_t)(route_z_bytes(tb, p.E) + (staged ? 0 : (int64_t)tb * kRouteChunk * 2) +
                               route_sel_bytes(tb, p.E));
  const int64_t blocks = (p.T + tb - 1) / tb;
  if (blocks > INT32_MAX) return dsk__fail(DSK_STATUS_UNSUPPORTED, "moe_route: T %lld too large", (long long)p.T);
  if (ws) {
    p.zws = (double *)d->workspace;
    const int tt = p.T >= 5 ? 8 : p.T >= 3 ? 4 : (int)p.T; /* tokens per logits block */
    const int64_t tiles = (p.T + tt - 1) / tt;
    const int eb = route_lg_eb(tt);
    const dim3 grid((unsigned)((p.E + eb - 1) / eb), (unsigned)(tiles < kLgMaxY ? tiles : kLgMaxY));
    const bool lvec = p.H % 8 == 0 && p.x_stride % 8 == 0 && aligned16(d->gate_w) && aligned16(d->x);
    cudaError_t e;
    if (DSK_MOE_ROUTE_MMA && lvec && p.T >= DSK_MOE_ROUTE_MMA_MIN_T)
      e = p.T >= DSK_MOE_ROUTE_MMA_LARGE_T ? launch_logits_mma<true>(st, p) : launch_logits_mma<false>(st, p);
    else switch (tt) {
      case 1: e = launch_logits<1>(lvec, grid, st, p); break;
      case 2: e = launch_logits<2>(lvec, grid, st, p); break;
      case 4: e = launch_logits<4>(lvec, grid, st, p); break;
      default: e = launch_logits<8>(lvec, grid, st, p); break;
    }
    DSK_CUDA_TRY("moe_route (logits)", e);
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
