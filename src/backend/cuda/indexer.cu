/* indexer.cu - the lightning indexer on the GPU (spec/indices.md §9): scores
 * (dsk_indexer_logits) and exact top-k (dsk_topk and the fused path's
 * top-k). Shared by cuda-sm90 and cuda-sm120 under the portability rule:
 * only mma.sync (f16 m16n8k16, fp32 accumulation), cp.async and
 * cvt e4m3x2->f16x2; no wgmma, TMEM or clusters; shared memory <= 99 KB.
 * Results follow the CPU reference (src/backend/cpu/ref_indexer.c): scores
 * within the spec's bound, top-k bit-identical for identical scores.
 *
 * Scores. CTA = 4 warps, one query row t, one chunk of `chunk` candidates
 * (a multiple of 64; the host picks it from the width, T and SM count).
 *  - q[t] (n_heads x 128 e4m3) is converted once per CTA to f16 (exact) and
 *    stored in shared memory in MMA B-fragment order; w*q_scale per head too.
 *  - candidates are staged 64 at a time (double buffer, cp.async): the
 *    128-byte e4m3 record of each valid entry and its fp32 scale; missing
 *    entries (no page, page >= num_pages) are zero filled, never read, and
 *    counted once (counters[0]).
 *  - warp w scores candidates 16w..16w+15 of the stage: for each group of
 *    8 heads one m16n8k16 f16 MMA per 16 dims (M = candidates, N = heads,
 *    K = dims), fp32 accumulation. e4m3 products are exact in fp32, so the
 *    only rounding is the fp32 accumulation. The 128 dims are permuted
 *    identically in A and B (thread quad member c owns bytes 32c..32c+31 of
 *    every record), so each thread loads its A fragments with two 16-byte
 *    shared loads per candidate row (bank-conflict free with a 144-byte row
 *    stride). Then relu(x) = x < 0 ? 0 : x (NaN propagates), times
 *    w*q_scale of the column's head, summed over the heads (registers, then
 *    the quad), times the key scale.
 *  - columns >= min(L_t, ctx_width) get -inf; truncated rows are counted
 *    (counters[1]) by the CTA of chunk 0.
 *  fp8 (e4m3) MMAs would be twice as fast, but their accumulation precision
 *  on these GPUs is not documented; the spec bound (1e-5 of the row maximum)
 *  is kept with f16 MMAs (docs/indexer.md).
 *
 * Top-k. CTA = 512 threads per row. Keys: the float's bits mapped to an
 * unsigned order (dsk__topk_key_from_bits: -0 = +0, NaN lowest); candidates
 * rank by (key desc, column asc).
 *  - L <= K: shortcut (0..L-1 ascending, scores not read), or all L sorted.
 *  - L > K: radix select of the K-th largest key in three passes over the
 *    row (11, 11, 10 bits; shared-memory histogram, block scan from the top),
 *    giving tau and `need` = how many keys equal to tau are taken. One more
 *    pass appends every key > tau to the selection (warp-aggregated slots)
 *    and collects the columns whose key equals tau; the `need` lowest of
 *    them are kept (sorted in shared memory when <= 2048 of them, else an
 *    ordered block scan over the row). The K composites
 *    key << 32 | ~column are then bitonic-sorted descending in shared
 *    memory, which yields the score order with ties lowest column first.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "backend/indexer_rules.h"
#include "cuda_common.cuh"
#include "ptx.cuh"

namespace {

constexpr unsigned kFull = 0xffffffffu;

/* ------------------------------------------------------------ helpers */
using namespace dsk_ptx;

__device__ __forceinline__ float relu(float x) { return x < 0.f ? 0.f : x; }

/* ============================================================== scores */
constexpr int kLThreads = 128;   /* 4 warps */
constexpr int kSub = 64;         /* candidates per stage (16 per warp) */
constexpr int kKeyStride = 144;  /* bytes per staged record row (128 + 16: conflict-free 16-byte loads) */
constexpr int kMaxTiles = 16;    /* groups of 8 heads (128 heads) */
constexpr int kMaxSubsPerCta = 16;

/* Shared memory layout of one CTA (bytes), for `tiles` groups of 8 heads. */
__host__ __device__ constexpr int64_t lg_off_wq(int tiles) { return (int64_t)tiles * 2048; }
__host__ __device__ constexpr int64_t lg_off_key(int tiles) { return lg_off_wq(tiles) + 128 * 4; }
__host__ __device__ constexpr int64_t lg_off_ks(int tiles) { return lg_off_key(tiles) + 2 * kSub * kKeyStride; }
__host__ __device__ constexpr int64_t lg_off_ok(int tiles) { return lg_off_ks(tiles) + 2 * kSub * 4; }
__host__ __device__ constexpr int64_t lg_off_cnt(int tiles) { return lg_off_ok(tiles) + 2 * kSub * 4; }
__host__ __device__ constexpr int64_t lg_smem_bytes(int tiles) { return lg_off_cnt(tiles) + 16; }
static_assert(lg_smem_bytes(kMaxTiles) <= DSK_SM120_SMEM_LIMIT, "logits CTA exceeds SM120 shared memory");
static_assert(lg_off_key(1) % 16 == 0 && (2 * kSub * kKeyStride) % 16 == 0, "record rows must be 16-byte aligned");

struct LogitsParams {
  const uint8_t *q;
  int64_t q_st, q_sh;
  const float *qs;
  int64_t qs_st;
  const float *w;
  int64_t w_st;
  const int32_t *req, *pos, *sm;
  const int32_t *bt;
  int64_t bt_stride, bt_rows, max_blocks;
  int64_t ratio;
  const uint8_t *base;
  int64_t pbs, page_stride, num_pages;
  float *out;
  int64_t out_st;
  int64_t ctx_width, T, chunk, skip_le;
  int H, tiles;
  unsigned long long *counters;
};

/* Stage candidates s0 .. s0+63 of row (r, rvalid) into buffer buf: thread
 * pair (2k, 2k+1) copies candidate k (64 bytes each; the even one also the
 * scale). Returns 1 when this thread counts a missing candidate. */
__device__ __forceinline__ int stage_keys(const LogitsParams &p, uint8_t *s_key, float *s_ks, int *s_ok, int buf,
                                          int64_t s0, int64_t e, const int32_t *btrow, bool rvalid) {
  const int tid = threadIdx.x;
  const int kl = tid >> 1, half = tid & 1;
  const int64_t s = s0 + kl;
  bool ok = false;
  const uint8_t *rec = p.base, *sc = p.base;
  int miss = 0;
  if (s < e) {
    if (rvalid) {
      const int64_t b = s / p.pbs;
      if (b < p.max_blocks) {
        const int64_t page = btrow[b];
        if (page >= 0 && page < p.num_pages) {
          const int64_t j = s - b * p.pbs;
          const uint8_t *pg = p.base + page * p.page_stride;
          rec = pg + 128 * j;
          sc = pg + 128 * p.pbs + 4 * j;
          ok = true;
        }
      }
    }
    miss = (!ok && half == 0) ? 1 : 0;
  }
  uint8_t *dst = s_key + (int64_t)(buf * kSub + kl) * kKeyStride + 64 * half;
  const uint8_t *src = ok ? rec + 64 * half : p.base;
#pragma unroll
  for (int pc = 0; pc < 4; pc++) cp_async16(dst + 16 * pc, src + 16 * pc, ok);
  if (half == 0) {
    cp_async4(&s_ks[buf * kSub + kl], sc, ok);
    s_ok[buf * kSub + kl] = ok ? 1 : 0;
  }
  return miss;
}

__global__ void __launch_bounds__(kLThreads) indexer_logits_kernel(const LogitsParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint4 *s_qf = reinterpret_cast<uint4 *>(smem); /* [tiles][4][32 lanes] B fragments */
  float *s_wq = reinterpret_cast<float *>(smem + lg_off_wq(p.tiles));
  uint8_t *s_key = smem + lg_off_key(p.tiles);
  float *s_ks = reinterpret_cast<float *>(smem + lg_off_ks(p.tiles));
  int *s_ok = reinterpret_cast<int *>(smem + lg_off_ok(p.tiles));
  int *s_cnt = reinterpret_cast<int *>(smem + lg_off_cnt(p.tiles));

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3; /* MMA group (row) and member of the quad */
  const int64_t c0 = (int64_t)blockIdx.x * p.chunk;
  if (c0 >= p.ctx_width) return;
  const int64_t c1 = c0 + p.chunk < p.ctx_width ? c0 + p.chunk : p.ctx_width;

  for (int64_t t = blockIdx.y; t < p.T; t += gridDim.y) {
    const int64_t L = dsk__indexer_causal_len(p.pos[t], p.sm[t], p.ratio);
    const int64_t n = L < p.ctx_width ? L : p.ctx_width;
    if (blockIdx.x == 0 && tid == 0 && L > p.ctx_width && p.counters) atomicAdd(&p.counters[1], 1ull);
    if (p.skip_le >= 0 && n <= p.skip_le) continue;
    float *orow = p.out + t * p.out_st;
    for (int64_t s = (c0 > n ? c0 : n) + tid; s < c1; s += kLThreads) orow[s] = -INFINITY;
    const int64_t e = n < c1 ? n : c1;
    if (c0 >= e) continue; /* block-uniform */

    __syncthreads(); /* the previous row's use of shared memory is over */
    const int32_t r = p.req[t];
    const bool rvalid = r >= 0 && (int64_t)r < p.bt_rows;
    const int32_t *btrow = p.bt + (rvalid ? (int64_t)r * p.bt_stride : 0);

    /* q[t] -> f16 B fragments: word w of lane (g, c) in head group nt is
     * q[nt*8 + g][32c + 2w .. 32c + 2w + 1]; stored [nt][w / 4][lane]. */
    const uint8_t *qrow = p.q + t * p.q_st;
    for (int u = tid; u < p.tiles * 64; u += kLThreads) {
      const int h = u >> 3, part = u & 7, c = part >> 1, m = part & 1;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (h < p.H) v = *reinterpret_cast<const uint4 *>(qrow + h * p.q_sh + 32 * c + 16 * m);
      uint4 lo, hi;
      lo.x = e4m3x2_to_f16x2_u16(v.x);
      lo.y = e4m3x2_to_f16x2_u16(v.x >> 16);
      lo.z = e4m3x2_to_f16x2_u16(v.y);
      lo.w = e4m3x2_to_f16x2_u16(v.y >> 16);
      hi.x = e4m3x2_to_f16x2_u16(v.z);
      hi.y = e4m3x2_to_f16x2_u16(v.z >> 16);
      hi.z = e4m3x2_to_f16x2_u16(v.w);
      hi.w = e4m3x2_to_f16x2_u16(v.w >> 16);
      const int nt = h >> 3, ln = (h & 7) * 4 + c;
      s_qf[(nt * 4 + 2 * m) * 32 + ln] = lo;
      s_qf[(nt * 4 + 2 * m + 1) * 32 + ln] = hi;
    }
    for (int h = tid; h < p.tiles * 8; h += kLThreads)
      s_wq[h] = h < p.H ? p.w[t * p.w_st + h] * p.qs[t * p.qs_st + h] : 0.f;
    if (tid == 0) *s_cnt = 0;

    const int64_t nsub = (e - c0 + kSub - 1) / kSub;
    int miss = stage_keys(p, s_key, s_ks, s_ok, 0, c0, e, btrow, rvalid);
    cp_async_commit();
    for (int64_t i = 0; i < nsub; i++) {
      if (i + 1 < nsub) miss += stage_keys(p, s_key, s_ks, s_ok, (int)((i + 1) & 1), c0 + (i + 1) * kSub, e, btrow, rvalid);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();

      const int buf = (int)(i & 1);
      const int64_t kbase = c0 + i * kSub + 16 * warp;
      if (kbase < e) { /* warp-uniform */
        const uint8_t *kr0 = s_key + (int64_t)(buf * kSub + 16 * warp + g) * kKeyStride + 32 * tq;
        const uint8_t *kr1 = kr0 + 8 * kKeyStride;
        const uint4 x0 = *reinterpret_cast<const uint4 *>(kr0), x1 = *reinterpret_cast<const uint4 *>(kr0 + 16);
        const uint4 y0 = *reinterpret_cast<const uint4 *>(kr1), y1 = *reinterpret_cast<const uint4 *>(kr1 + 16);
        const uint32_t wg[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        const uint32_t wh[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
        /* k-step kk, logical columns 2c,2c+1 <- bytes 32c+4kk+{0,1};
         * 2c+8,2c+9 <- bytes 32c+4kk+{2,3} (same map as the B words). */
        uint32_t a[8][4];
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
          a[kk][0] = e4m3x2_to_f16x2_u16(wg[kk]);
          a[kk][1] = e4m3x2_to_f16x2_u16(wh[kk]);
          a[kk][2] = e4m3x2_to_f16x2_u16(wg[kk] >> 16);
          a[kk][3] = e4m3x2_to_f16x2_u16(wh[kk] >> 16);
        }
        float sg = 0.f, sh = 0.f;
#pragma unroll 1
        for (int nt = 0; nt < p.tiles; nt++) {
          const uint4 b0 = s_qf[(nt * 4 + 0) * 32 + lane], b1 = s_qf[(nt * 4 + 1) * 32 + lane];
          const uint4 b2 = s_qf[(nt * 4 + 2) * 32 + lane], b3 = s_qf[(nt * 4 + 3) * 32 + lane];
          const uint32_t bw[16] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w,
                                   b2.x, b2.y, b2.z, b2.w, b3.x, b3.y, b3.z, b3.w};
          float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int kk = 0; kk < 8; kk++) mma_f16(acc, a[kk], bw[2 * kk], bw[2 * kk + 1]);
          const float w0 = s_wq[nt * 8 + 2 * tq], w1 = s_wq[nt * 8 + 2 * tq + 1];
          sg += relu(acc[0]) * w0 + relu(acc[1]) * w1;
          sh += relu(acc[2]) * w0 + relu(acc[3]) * w1;
        }
        sg += __shfl_xor_sync(kFull, sg, 1);
        sg += __shfl_xor_sync(kFull, sg, 2);
        sh += __shfl_xor_sync(kFull, sh, 1);
        sh += __shfl_xor_sync(kFull, sh, 2);
        if (tq == 0) {
          const int k0 = buf * kSub + 16 * warp + g;
          if (kbase + g < e) orow[kbase + g] = s_ok[k0] ? sg * s_ks[k0] : -INFINITY;
          if (kbase + g + 8 < e) orow[kbase + g + 8] = s_ok[k0 + 8] ? sh * s_ks[k0 + 8] : -INFINITY;
        }
      }
      __syncthreads(); /* buffer i & 1 is refilled in the next iteration */
    }
    /* missing candidates of this chunk, one global atomic per CTA */
    for (int o = 16; o; o >>= 1) miss += __shfl_xor_sync(kFull, miss, o);
    if (lane == 0 && miss) atomicAdd(s_cnt, miss);
    __syncthreads();
    if (tid == 0 && *s_cnt && p.counters) atomicAdd(&p.counters[0], (unsigned long long)*s_cnt);
  }
}

/* ================================================================ top-k */
constexpr int kKT = 512;        /* threads per row */
constexpr int kKW = kKT / 32;   /* warps */
constexpr int kBins = 2048;     /* 11-bit digits */
constexpr int kEqCap = kBins;   /* equal-to-tau columns sorted in shared memory */
constexpr int kUnroll = 4;      /* loads in flight per thread */
static_assert(kBins / kKT <= 4, "bins per thread");

struct TopkParams {
  const float *scores;
  int64_t st, width, T;
  int K;
  const int32_t *lens, *pos, *sm;
  int64_t ratio;
  int shortcut;
  int32_t *out;
  int64_t out_st;
  unsigned long long *counters;
};

__device__ __forceinline__ uint32_t score_key(float x) { return dsk__topk_key_from_bits(__float_as_uint(x)); }
__device__ __forceinline__ unsigned long long composite(uint32_t key, int64_t col) {
  return ((unsigned long long)key << 32) | (unsigned long long)(uint32_t)~(uint32_t)col;
}

/* Inclusive block scan of one value per thread (kKT threads); *total gets
 * the block's sum. */
__device__ uint32_t block_incl_scan(uint32_t v, uint32_t *s_warp, uint32_t *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) s_warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    uint32_t w = lane < kKW ? s_warp[lane] : 0u;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t n = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += n;
    }
    if (lane < kKW) s_warp[lane] = w;
  }
  __syncthreads();
  const uint32_t r = v + (warp > 0 ? s_warp[warp - 1] : 0u);
  *total = s_warp[kKW - 1];
  __syncthreads(); /* s_warp is reused by the next call */
  return r;
}

/* Bitonic sort of a[0, n2) (n2 a power of two), descending / ascending. */
__device__ void bitonic_desc_u64(unsigned long long *a, int n2) {
  for (int k = 2; k <= n2; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n2; i += kKT) {
        const int l = i ^ j;
        if (l > i) {
          const unsigned long long x = a[i], y = a[l];
          if (((i & k) == 0) ? (x < y) : (x > y)) {
            a[i] = y;
            a[l] = x;
          }
        }
      }
      __syncthreads();
    }
}
__device__ void bitonic_asc_u32(uint32_t *a, int n2) {
  for (int k = 2; k <= n2; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n2; i += kKT) {
        const int l = i ^ j;
        if (l > i) {
          const uint32_t x = a[i], y = a[l];
          if (((i & k) == 0) ? (x > y) : (x < y)) {
            a[i] = y;
            a[l] = x;
          }
        }
      }
      __syncthreads();
    }
}

__device__ __forceinline__ int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

/* Sorts the n composites of s_sel (descending) and writes the row. */
__device__ void sort_and_write(unsigned long long *s_sel, int n, int K, int32_t *o) {
  const int n2 = pow2_at_least(n);
  for (int i = n + threadIdx.x; i < n2; i += kKT) s_sel[i] = 0ull; /* below every real composite */
  __syncthreads();
  bitonic_desc_u64(s_sel, n2);
  for (int i = threadIdx.x; i < K; i += kKT) o[i] = i < n ? (int32_t)~(uint32_t)(s_sel[i] & 0xFFFFFFFFull) : -1;
}

/* Warp-aggregated append: returns this lane's slot (valid only when take). */
__device__ __forceinline__ uint32_t warp_append(bool take, uint32_t *counter) {
  const unsigned m = __ballot_sync(kFull, take);
  if (!m) return 0u;
  const int lane = threadIdx.x & 31, leader = __ffs(m) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(counter, (uint32_t)__popc(m));
  base = __shfl_sync(kFull, base, leader);
  return base + (uint32_t)__popc(m & ((1u << lane) - 1u));
}

__global__ void __launch_bounds__(kKT, 2) topk_kernel(const TopkParams p) {
  __shared__ uint32_t s_hist[kBins]; /* histogram; later the columns equal to tau */
  __shared__ unsigned long long s_sel[DSK_TOPK_MAX_K];
  __shared__ uint32_t s_warp[32];
  __shared__ uint32_t s_pick[3]; /* digit, count above it, count in it */
  __shared__ uint32_t s_ngt, s_neq;
  const int tid = threadIdx.x;
  const int K = p.K;

  for (int64_t t = blockIdx.x; t < p.T; t += gridDim.x) {
    __syncthreads(); /* the previous row's use of shared memory is over */
    int64_t L;
    if (p.lens) {
      L = p.lens[t];
      if (L < 0 || L > p.width) {
        if (tid == 0 && p.counters) atomicAdd(&p.counters[0], 1ull);
        L = L < 0 ? 0 : p.width;
      }
    } else if (p.pos) {
      L = dsk__indexer_causal_len(p.pos[t], p.sm[t], p.ratio);
      if (L > p.width) L = p.width;
    } else {
      L = p.width;
    }
    int32_t *o = p.out + t * p.out_st;
    const float *row = p.scores + t * p.st;

    if (L <= K) { /* every candidate is selected */
      const int n = (int)L;
      if (p.shortcut) {
        for (int i = tid; i < K; i += kKT) o[i] = i < n ? i : -1;
        continue;
      }
      for (int i = tid; i < n; i += kKT) s_sel[i] = composite(score_key(row[i]), i);
      sort_and_write(s_sel, n, K, o);
      continue;
    }

    /* Radix select: the K-th largest key, 11 + 11 + 10 bits from the top. */
    uint32_t prefix = 0u, pmask = 0u, need = (uint32_t)K, eq_total = 0u;
    if (tid == 0) {
      s_ngt = 0u;
      s_neq = 0u;
    }
#pragma unroll 1
    for (int pass = 0; pass < 3; pass++) {
      const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
      const int nb = pass == 2 ? 1024 : 2048;
      const uint32_t dmask = (uint32_t)nb - 1u;
      for (int i = tid; i < kBins; i += kKT) s_hist[i] = 0u;
      __syncthreads();
      for (int64_t base = 0; base < L; base += kUnroll * kKT) {
        float v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
          const int64_t i = base + u * kKT + tid;
          v[u] = i < L ? row[i] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
          const int64_t i = base + u * kKT + tid;
          if (i < L) {
            const uint32_t k = score_key(v[u]);
            if ((k & pmask) == prefix) atomicAdd(&s_hist[(k >> shift) & dmask], 1u);
          }
        }
      }
      __syncthreads();
      /* thread tid owns bins nb-1-per*tid-j (j < per), top first */
      const int per = nb / kKT;
      uint32_t cnt[4] = {0u, 0u, 0u, 0u}, sum = 0u;
#pragma unroll
      for (int j = 0; j < 4; j++)
        if (j < per) {
          cnt[j] = s_hist[nb - 1 - per * tid - j];
          sum += cnt[j];
        }
      uint32_t all = 0u;
      const uint32_t incl = block_incl_scan(sum, s_warp, &all);
      const uint32_t excl = incl - sum;
      if (excl < need && need <= incl) { /* exactly one thread */
        uint32_t cum = excl;
        bool found = false;
#pragma unroll
        for (int j = 0; j < 4; j++) {
          if (j < per && !found) {
            if (cum + cnt[j] >= need) {
              s_pick[0] = (uint32_t)(nb - 1 - per * tid - j);
              s_pick[1] = cum;
              s_pick[2] = cnt[j];
              found = true;
            } else {
              cum += cnt[j];
            }
          }
        }
      }
      __syncthreads();
      need -= s_pick[1];
      eq_total = s_pick[2];
      prefix |= s_pick[0] << shift;
      pmask |= dmask << shift;
    }
    const uint32_t tau = prefix;
    const bool eq_fast = eq_total <= (uint32_t)kEqCap;

    /* Keys above tau -> s_sel[0 .. K-need); keys equal to tau -> s_hist
     * (fast path). s_hist was last read before the scan's barriers. */
    for (int64_t base = 0; base < L; base += kUnroll * kKT) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const int64_t i = base + u * kKT + tid;
        v[u] = i < L ? row[i] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const int64_t i = base + u * kKT + tid;
        const uint32_t k = i < L ? score_key(v[u]) : 0u;
        const bool gt = i < L && k > tau, eq = eq_fast && i < L && k == tau;
        const uint32_t sg = warp_append(gt, &s_ngt);
        if (gt) s_sel[sg] = composite(k, i);
        const uint32_t se = warp_append(eq, &s_neq);
        if (eq) s_hist[se] = (uint32_t)i;
      }
    }
    __syncthreads();
    const uint32_t ngt = (uint32_t)K - need; /* == s_ngt */
    if (eq_fast) {
      const int ne = (int)eq_total; /* == s_neq */
      const int n2 = pow2_at_least(ne);
      for (int i = ne + tid; i < n2; i += kKT) s_hist[i] = 0xFFFFFFFFu;
      __syncthreads();
      bitonic_asc_u32(s_hist, n2);
      for (uint32_t j = tid; j < need; j += kKT) s_sel[ngt + j] = composite(tau, s_hist[j]);
    } else {
      /* many equal keys: the `need` lowest columns by an ordered scan */
      uint32_t taken = 0u; /* block-uniform */
      for (int64_t base = 0; base < L && taken < need; base += kKT) {
        const int64_t i = base + tid;
        const bool eq = i < L && score_key(row[i]) == tau;
        uint32_t tile = 0u;
        const uint32_t incl = block_incl_scan(eq ? 1u : 0u, s_warp, &tile);
        const uint32_t rank = taken + incl - (eq ? 1u : 0u);
        if (eq && rank < need) s_sel[ngt + rank] = composite(tau, i);
        taken += tile;
      }
    }
    __syncthreads();
    sort_and_write(s_sel, K, K, o);
  }
}

}  // namespace

/* ============================================================ host side */

static int64_t logits_chunk(const dsk_ctx *ctx, int64_t T, int64_t W) {
  const int64_t subs_row = (W + kSub - 1) / kSub;
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  const int64_t target = 8 * sms; /* CTAs wanted in flight */
  int64_t ctas_row = (target + T - 1) / T;
  if (ctas_row < 1) ctas_row = 1;
  int64_t subs = (subs_row + ctas_row - 1) / ctas_row;
  if (subs < 4) subs = 4; /* amortise the per-CTA q conversion */
  if (subs > kMaxSubsPerCta) subs = kMaxSubsPerCta;
  if (subs > subs_row) subs = subs_row;
  return subs * kSub;
}

extern "C" int64_t dsk__cuda_indexer_logits_smem_bytes(int64_t n_heads) {
  const int tiles = (int)((n_heads + 7) / 8);
  return lg_smem_bytes(tiles < 1 ? 1 : tiles);
}

extern "C" dsk_status dsk__cuda_indexer_logits(dsk_ctx *ctx, const dsk_indexer_logits_desc *d, int64_t skip_le) {
  if (d->T == 0) return DSK_STATUS_OK;
  DSK_CUDA_TRY("indexer_logits", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, d->stream);
  LogitsParams p;
  p.q = d->q;
  p.q_st = d->q_stride_t;
  p.q_sh = d->q_stride_h;
  p.qs = d->q_scale;
  p.qs_st = d->q_scale_stride_t;
  p.w = d->weights;
  p.w_st = d->weights_stride_t;
  p.req = d->req;
  p.pos = d->pos;
  p.sm = d->slot_mapping;
  p.bt = d->block_table.table;
  p.bt_stride = d->block_table.stride;
  p.bt_rows = d->block_table.rows;
  p.max_blocks = d->block_table.max_blocks;
  p.ratio = d->ratio;
  p.base = (const uint8_t *)d->cache.base;
  p.pbs = d->cache.pbs;
  p.page_stride = d->cache.page_stride;
  p.num_pages = d->cache.num_pages;
  p.out = d->out;
  p.out_st = d->out_stride_t;
  p.ctx_width = d->ctx_width;
  p.T = d->T;
  p.skip_le = skip_le;
  p.H = (int)d->n_heads;
  p.tiles = (p.H + 7) / 8;
  p.chunk = logits_chunk(ctx, d->T, d->ctx_width);
  p.counters = (unsigned long long *)d->counters;

  const int64_t smem = lg_smem_bytes(p.tiles);
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  if (smem > st->smem_optin)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "indexer_logits: kernel needs %lld B of shared memory, device allows %lld",
                     (long long)smem, (long long)st->smem_optin);
  DSK_CUDA_TRY("indexer_logits", cudaFuncSetAttribute(indexer_logits_kernel,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int64_t gx = (d->ctx_width + p.chunk - 1) / p.chunk;
  const int64_t gy = d->T < 65535 ? d->T : 65535;
  indexer_logits_kernel<<<dim3((unsigned)gx, (unsigned)gy), kLThreads, (size_t)smem, s>>>(p);
  DSK_CUDA_LAUNCHED("indexer_logits");
  return DSK_STATUS_OK;
}

extern "C" int64_t dsk__cuda_topk_workspace(const dsk_ctx *ctx, const dsk__topk_args *a) {
  (void)ctx;
  (void)a;
  return 0;
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
  const int64_t grid = a->T < 2147483647LL ? a->T : 2147483647LL;
  topk_kernel<<<(unsigned)grid, kKT, 0, s>>>(p);
  DSK_CUDA_LAUNCHED("topk");
  return DSK_STATUS_OK;
}
