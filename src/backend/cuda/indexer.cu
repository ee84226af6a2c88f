/* indexer.cu - the lightning indexer on the GPU (spec/indices.md §9): scores
 * (dsk_indexer_logits) and exact top-k (dsk_topk and the fused path's
 * top-k). Shared by cuda-sm90 and cuda-sm120 under the portability rule:
 * only mma.sync (f16 m16n8k16, fp32 accumulation), cp.async, warp
 * shuffles / votes / match and cvt e4m3x2->f16x2; no wgmma, TMEM or
 * clusters; shared memory <= 99 KB. Results follow the CPU reference
 * (src/backend/cpu/ref_indexer.c): scores within the spec's bound, top-k
 * bit-identical for identical scores. docs/indexer.md has the design.
 *
 * Scores. CTA = 8 warps, one query row t, one chunk of `chunk` candidates
 * (a multiple of 128; the host picks it from the width, T and the number
 * of resident CTAs).
 *  - Heads are split in groups of 32 (4 MMA n-tiles of 8). G = ceil(H/32)
 *    groups, padded to GP = 1, 2 or 4; warp w works for head group
 *    w / (8/GP) (warps of a padding group only stage keys). A warp keeps
 *    its group's q (32 heads x 128 e4m3 -> f16, exact; padding heads zero)
 *    in registers as MMA B fragments for the whole chunk; w * q_scale per
 *    head (0 for padding heads) is in shared memory.
 *  - The block-table entries of the chunk are read once into shared memory
 *    (the host caps the chunk so that they fit 256 entries), as page or -1
 *    (no page: req outside the table, block >= max_blocks, entry < 0 or
 *    >= num_pages).
 *  - Candidates are staged 128 at a time through a 4-buffer cp.async ring:
 *    the 128-byte record of each valid entry (16-byte chunk c of record r
 *    stored at chunk c ^ (r & 7): conflict-free fragment loads) and its
 *    fp32 scale. Missing entries are zero filled, never read, and counted
 *    once (counters[0]).
 *  - Warp (group hg, key warp kw) scores the 16-row m-tiles kw, kw + 8/GP,
 *    ... of each stage: 8 k-steps x 4 n-tiles of m16n8k16 f16 MMAs (M =
 *    candidates, N = heads, K = dims), fp32 accumulation. e4m3 products are
 *    exact in fp32, so the only rounding is the fp32 accumulation. The 128
 *    dims are permuted identically in A and B (quad member c owns record
 *    bytes 32c..32c+31), so a thread loads its A fragments with four
 *    16-byte shared loads per m-tile. Then relu(x) = x < 0 ? 0 : x (NaN
 *    propagates), times w * q_scale of the column's head, summed over the
 *    heads (registers, then the quad) into a per-group partial in shared
 *    memory.
 *  - One stage later (after the next barrier) 128 threads add the G
 *    partials of each candidate in group order, multiply by the key scale
 *    and store the row segment (coalesced); missing entries get -inf.
 *  - columns >= min(L_t, ctx_width) get -inf; truncated rows are counted
 *    (counters[1]) by the CTA of chunk 0.
 *  fp8 (e4m3) MMAs would be twice as fast, but their accumulation precision
 *  on these GPUs is not documented; the spec bound (1e-5 of the row maximum)
 *  is kept with f16 MMAs (docs/indexer.md).
 *
 * Top-k. CTA = 1024 threads per row. Keys: the float's bits mapped to an
 * unsigned order (dsk__topk_key_from_bits: -0 = +0, NaN lowest); candidates
 * rank by the composite key << 32 | ~column (descending = score order, ties
 * lowest column first).
 *  - L <= K with the shortcut: 0..L-1 ascending, scores not read.
 *  - L <= 4096: all L composites are ordered in shared memory (rank_write).
 *  - else (one pass over the row): a threshold g is taken from a sample of
 *    2048..8192 keys (stratified, jittered columns; two 11-bit radix passes
 *    over the sample in shared memory) so that about 1.75 K + 64 keys of
 *    the row are >= g; one pass (float4 loads, L2 prefetch 256 KB ahead)
 *    appends the composite of every key >= g to shared memory (warp scan +
 *    one shared atomic per warp). If the count n is in [K, 8192], the top
 *    K of the row are exactly the top K of these n (n keys are >= g, so the
 *    K largest are), which rank_write orders.
 *  - rank_write: 2048 buckets monotone in the key (linear in the value,
 *    else linear in the key; fp32 only); rank = composites in higher buckets + larger
 *    composites in the own bucket (buckets of <= 128); O(n) shared-memory
 *    traffic where a bitonic sort of 4096 composites moves ~5 MB. Rows it
 *    cannot bucket (massive ties) are bitonic-sorted (<= 4096 composites)
 *    or take the fallback.
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
#include <cuda_fp16.h>
#include <math.h>

#include "backend/indexer_rules.h"
#include "cuda_common.cuh"
#include "ptx.cuh"

namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float ix_relu(float x) { return x < 0.f ? 0.f : x; }

/* e4m3 pair (bits 0..15 of v) -> f16x2, exact */
__device__ __forceinline__ uint32_t ix_cvt_lo(uint32_t v) { return dsk_ptx::e4m3x2_to_f16x2_u16(v); }
/* e4m3 pair (bits 16..31 of v) -> f16x2, exact */
__device__ __forceinline__ uint32_t ix_cvt_hi(uint32_t v) { return dsk_ptx::e4m3x2_to_f16x2_u16(v >> 16); }

__device__ __forceinline__ uint32_t u4_word(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* ============================================================== scores */
constexpr int kLThreads = 256;  /* 8 warps */
constexpr int kLWarps = kLThreads / 32;
constexpr int kStage = 128;     /* candidates per stage (8 m-tiles of 16) */
constexpr int kMTiles = kStage / 16;
constexpr int kNBuf = 4;        /* stage buffers (3 stages in flight while one is scored) */
constexpr int kRec = 128;       /* bytes of a staged record (swizzled, no padding) */
constexpr int kBtCap = 256;     /* block-table entries of one chunk held in shared memory */
constexpr int kMaxChunk = 4096; /* candidates per CTA at most */
constexpr int kGroupHeads = 32; /* heads per warp (4 n-tiles) */

/* Shared memory layout of one CTA (bytes) for gp = 1, 2 or 4 head groups. */
__host__ __device__ constexpr int64_t lg_off_ks() { return (int64_t)kNBuf * kStage * kRec; }
__host__ __device__ constexpr int64_t lg_off_ok() { return lg_off_ks() + kNBuf * kStage * 4; }
__host__ __device__ constexpr int64_t lg_off_fks() { return lg_off_ok() + kNBuf * kStage * 4; }
__host__ __device__ constexpr int64_t lg_off_fok() { return lg_off_fks() + 2 * kStage * 4; }
__host__ __device__ constexpr int64_t lg_off_bt() { return lg_off_fok() + 2 * kStage * 4; }
__host__ __device__ constexpr int64_t lg_off_wq() { return lg_off_bt() + kBtCap * 4; }
__host__ __device__ constexpr int64_t lg_off_part() { return lg_off_wq() + 4 * kGroupHeads * 4; }
__host__ __device__ constexpr int64_t lg_off_cnt(int gp) { return lg_off_part() + (int64_t)2 * gp * kStage * 4; }
__host__ __device__ constexpr int64_t lg_smem_bytes(int gp) { return lg_off_cnt(gp) + 16; }
static_assert(lg_smem_bytes(4) <= DSK_SM120_SMEM_LIMIT, "logits CTA exceeds SM120 shared memory");
static_assert(lg_off_ks() % 16 == 0 && lg_off_part() % 16 == 0 && lg_off_cnt(1) % 16 == 0, "regions aligned");
static_assert(kLWarps == 8 && kStage == 128 && kLThreads == 2 * kStage, "the index maps below assume these");

/* Head groups padded to a power of two that divides the 8 warps. */
__host__ __device__ constexpr int lg_groups(int64_t H) { return (int)((H + kGroupHeads - 1) / kGroupHeads); }
__host__ __device__ constexpr int lg_gp(int G) { return G <= 1 ? 1 : G == 2 ? 2 : 4; }

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
  uint32_t pbs32;  /* min(pbs, 2^31): exact divisor for s < 2^31 */
  int pbs_shift;   /* log2(pbs) when pbs is a power of two below 2^31, else -1 */
  float *out;
  int64_t out_st;
  int64_t ctx_width, T, chunk, skip_le;
  int H, G, GP;
  unsigned long long *counters;
};

/* Block of candidate s (< 2^31). */
__device__ __forceinline__ uint32_t lg_block(const LogitsParams &p, uint32_t s) {
  return p.pbs_shift >= 0 ? (s >> p.pbs_shift) : s / p.pbs32;
}

/* Issues the copies of stage `st` (candidates s0 .. s0+127, those < e)
 * into ring buffer st % kNBuf. Thread tid copies 16-byte chunk (tid & 7) of
 * candidates (tid >> 3) + 32u, u < 4; the thread of chunk 0 also the
 * scale and the ok flag. Returns the missing candidates this thread counts. */
__device__ __forceinline__ int lg_stage(const LogitsParams &p, uint8_t *s_key, float *s_ks, int *s_ok,
                                        const int *s_bt, int64_t c0, uint32_t b0, int64_t st, int64_t e) {
  const int tid = threadIdx.x;
  const int c = tid & 7;
  const int buf = (int)(st % kNBuf);
  const int64_t s0 = c0 + st * kStage;
  int miss = 0;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const int kl = (tid >> 3) + 32 * u;
    const int64_t s = s0 + kl;
    int64_t page = -1, j = 0;
    if (s < e) {
      const uint32_t b = lg_block(p, (uint32_t)s);
      const uint32_t bi = b - b0;
      page = bi < (uint32_t)kBtCap ? s_bt[bi] : -1;
      j = s - (int64_t)b * p.pbs;
    }
    const bool ok = page >= 0;
    const uint8_t *pg = p.base + (ok ? page * p.page_stride : 0);
    uint8_t *dst = s_key + ((int64_t)buf * kStage + kl) * kRec + 16 * (c ^ (kl & 7));
    dsk_ptx::cp_async16(dst, ok ? pg + 128 * j + 16 * c : p.base, ok);
    if (c == 0) {
      dsk_ptx::cp_async4(&s_ks[buf * kStage + kl], ok ? pg + 128 * p.pbs + 4 * j : p.base, ok);
      s_ok[buf * kStage + kl] = ok ? 1 : 0;
      miss += (s < e && !ok) ? 1 : 0;
    }
  }
  return miss;
}

__global__ void __launch_bounds__(kLThreads, 2) indexer_logits_kernel(const LogitsParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t *s_key = smem;
  float *s_ks = reinterpret_cast<float *>(smem + lg_off_ks());
  int *s_ok = reinterpret_cast<int *>(smem + lg_off_ok());
  float *s_fks = reinterpret_cast<float *>(smem + lg_off_fks());
  int *s_fok = reinterpret_cast<int *>(smem + lg_off_fok());
  int *s_bt = reinterpret_cast<int *>(smem + lg_off_bt());
  float *s_wq = reinterpret_cast<float *>(smem + lg_off_wq());
  float *s_part = reinterpret_cast<float *>(smem + lg_off_part());
  int *s_cnt = reinterpret_cast<int *>(smem + lg_off_cnt(p.GP));

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3; /* MMA group (row) and member of the quad */
  const int KW = kLWarps / p.GP;          /* key warps per head group: 8, 4 or 2 */
  const int hg = warp / KW, kw = warp % KW;
  const bool cw = hg < p.G; /* this warp scores (not a padding group) */
  const int h_base = hg * kGroupHeads;

  const int64_t c0 = (int64_t)blockIdx.x * p.chunk;
  if (c0 >= p.ctx_width) return; /* block-uniform */
  const int64_t c1 = c0 + p.chunk < p.ctx_width ? c0 + p.chunk : p.ctx_width;
  const uint32_t b0 = lg_block(p, (uint32_t)c0);

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

    /* block-table entries of blocks b0 .. block(e - 1) -> page or -1 */
    const int nbt = (int)(lg_block(p, (uint32_t)(e - 1)) - b0) + 1;
    for (int i = tid; i < nbt && i < kBtCap; i += kLThreads) {
      const int64_t b = (int64_t)b0 + i;
      int pg = -1;
      if (rvalid && b < p.max_blocks) {
        const int64_t v = btrow[b];
        if (v >= 0 && v < p.num_pages) pg = (int)v;
      }
      s_bt[i] = pg;
    }

    /* w * q_scale per head (0 for padding heads) */
    for (int h = tid; h < 4 * kGroupHeads; h += kLThreads)
      s_wq[h] = h < p.H ? p.w[t * p.w_st + h] * p.qs[t * p.qs_st + h] : 0.f;
    /* q of this warp's heads -> f16 B fragments: bq[nt][2kk] holds
     * q[h][32tq + 4kk + {0,1}], bq[nt][2kk+1] holds q[h][32tq + 4kk + {2,3}]
     * of head h = h_base + 8nt + g. */
    uint32_t bq[4][16];
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
      const int h = h_base + 8 * nt + g;
      uint4 v0 = make_uint4(0u, 0u, 0u, 0u), v1 = v0;
      if (cw && h < p.H) {
        const uint4 *src = reinterpret_cast<const uint4 *>(p.q + t * p.q_st + h * p.q_sh + 32 * tq);
        v0 = src[0];
        v1 = src[1];
      }
#pragma unroll
      for (int kk = 0; kk < 8; kk++) {
        const uint32_t wd = u4_word(kk < 4 ? v0 : v1, kk & 3);
        bq[nt][2 * kk] = ix_cvt_lo(wd);
        bq[nt][2 * kk + 1] = ix_cvt_hi(wd);
      }
    }
    if (tid == 0) *s_cnt = 0;
    __syncthreads(); /* s_bt ready */

    const int64_t nst = (e - c0 + kStage - 1) / kStage;
    int miss = 0;
#pragma unroll
    for (int st = 0; st < kNBuf - 1; st++) {
      if (st < nst) miss += lg_stage(p, s_key, s_ks, s_ok, s_bt, c0, b0, st, e);
      dsk_ptx::cp_async_commit();
    }
    for (int64_t i = 0; i < nst; i++) {
      dsk_ptx::cp_async_wait<kNBuf - 2>(); /* this thread's copies of stage i landed */
      __syncthreads();                     /* everyone's; stage i - 1 fully scored */
      const int pb = (int)(i & 1);
      if (i > 0 && tid < kStage) { /* finish stage i - 1 */
        const int64_t s = c0 + (i - 1) * kStage + tid;
        if (s < e) {
          const int qb = pb ^ 1;
          float v = s_part[(qb * p.GP) * kStage + tid];
          for (int h2 = 1; h2 < p.G; h2++) v += s_part[(qb * p.GP + h2) * kStage + tid];
          orow[s] = s_fok[qb * kStage + tid] ? v * s_fks[qb * kStage + tid] : -INFINITY;
        }
      }
      /* refill the buffer of stage i - 1 */
      if (i + kNBuf - 1 < nst) miss += lg_stage(p, s_key, s_ks, s_ok, s_bt, c0, b0, i + kNBuf - 1, e);
      dsk_ptx::cp_async_commit();
      const int buf = (int)(i % kNBuf);
      if (tid < kStage) { /* stage i's scales and flags, kept until it is finished */
        s_fks[pb * kStage + tid] = s_ks[buf * kStage + tid];
        s_fok[pb * kStage + tid] = s_ok[buf * kStage + tid];
      }
      if (cw) {
        const uint8_t *kb = s_key + (int64_t)buf * kStage * kRec;
        const int64_t s0 = c0 + i * kStage;
        for (int mt = kw; mt < kMTiles; mt += KW) {
          if (s0 + 16 * mt >= e) break; /* warp-uniform: the rest of the stage is past the chunk */
          const int r0 = 16 * mt + g;   /* rows r0 and r0 + 8; both have (row & 7) == g */
          float acc[4][4];
#pragma unroll
          for (int nt = 0; nt < 4; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
#pragma unroll
          for (int half = 0; half < 2; half++) {
            const int off = 16 * ((2 * tq + half) ^ g);
            const uint4 x = *reinterpret_cast<const uint4 *>(kb + r0 * kRec + off);
            const uint4 y = *reinterpret_cast<const uint4 *>(kb + (r0 + 8) * kRec + off);
#pragma unroll
            for (int kq = 0; kq < 4; kq++) {
              const int kk = 4 * half + kq;
              const uint32_t wx = u4_word(x, kq), wy = u4_word(y, kq);
              uint32_t a[4];
              a[0] = ix_cvt_lo(wx); /* row g,     dims 2tq, 2tq+1 */
              a[1] = ix_cvt_lo(wy); /* row g + 8, dims 2tq, 2tq+1 */
              a[2] = ix_cvt_hi(wx); /* row g,     dims 2tq+8, 2tq+9 */
              a[3] = ix_cvt_hi(wy); /* row g + 8, dims 2tq+8, 2tq+9 */
#pragma unroll
              for (int nt = 0; nt < 4; nt++) dsk_ptx::mma_f16(acc[nt], a, bq[nt][2 * kk], bq[nt][2 * kk + 1]);
            }
          }
          /* columns 2tq, 2tq + 1 of n-tile nt are heads h_base + 8nt + 2tq + {0, 1} */
          float sg = 0.f, sh = 0.f;
#pragma unroll
          for (int nt = 0; nt < 4; nt++) {
            const float2 wv = *reinterpret_cast<const float2 *>(s_wq + h_base + 8 * nt + 2 * tq);
            sg += ix_relu(acc[nt][0]) * wv.x + ix_relu(acc[nt][1]) * wv.y;
            sh += ix_relu(acc[nt][2]) * wv.x + ix_relu(acc[nt][3]) * wv.y;
          }
          sg += __shfl_xor_sync(kFull, sg, 1);
          sg += __shfl_xor_sync(kFull, sg, 2);
          sh += __shfl_xor_sync(kFull, sh, 1);
          sh += __shfl_xor_sync(kFull, sh, 2);
          float *part = s_part + (pb * p.GP + hg) * kStage;
          if (tq == 0) part[r0] = sg;
          if (tq == 1) part[r0 + 8] = sh;
        }
      }
    }
    __syncthreads(); /* the last stage is scored */
    if (tid < kStage) {
      const int64_t s = c0 + (nst - 1) * kStage + tid;
      if (s < e) {
        const int qb = (int)((nst - 1) & 1);
        float v = s_part[(qb * p.GP) * kStage + tid];
        for (int h2 = 1; h2 < p.G; h2++) v += s_part[(qb * p.GP + h2) * kStage + tid];
        orow[s] = s_fok[qb * kStage + tid] ? v * s_fks[qb * kStage + tid] : -INFINITY;
      }
    }
    /* missing candidates of this chunk, one global atomic per CTA */
    for (int o = 16; o; o >>= 1) miss += __shfl_xor_sync(kFull, miss, o);
    if (lane == 0 && miss) atomicAdd(s_cnt, miss);
    __syncthreads();
    if (tid == 0 && *s_cnt && p.counters) atomicAdd(&p.counters[0], (unsigned long long)*s_cnt);
  }
}

/* ================================================================ top-k */
constexpr int kKT = 1024;       /* threads per row */
constexpr int kKW = kKT / 32;   /* warps */
constexpr int kBins = 2048;     /* 11-bit digits; also the buckets of rank_write */
constexpr int kEqCap = kBins;   /* equal-to-tau columns sorted in shared memory (fallback) */
constexpr int kUnroll = 4;      /* scalar loads in flight per thread (fallback passes) */
constexpr int kVU = 4;          /* float4 loads in flight per thread (threshold pass) */
constexpr int kPfDist = 4;      /* threshold pass: L2 prefetch distance in iterations (4 x 64 KB) */
constexpr int kCandCap = 8192;  /* composites held in shared memory */
constexpr int kSortCap = 4096;  /* largest bitonic sort (rows up to this length are taken whole) */
constexpr int kBucketMax = 128; /* rank_write: largest bucket it scans; else bitonic / fallback */
constexpr int kSampleMin = 2048, kSampleMax = 8192;
/* dynamic shared memory: composites (also the sample keys and the fallback
 * selection), two bin arrays, the bucket-ordered candidate numbers */
constexpr int64_t kTkOffHist = (int64_t)kCandCap * 8;
constexpr int64_t kTkOffStart = kTkOffHist + kBins * 4;
constexpr int64_t kTkOffIdx = kTkOffStart + kBins * 4;
constexpr int64_t kTkSmem = kTkOffIdx + (int64_t)kCandCap * 2;
static_assert(kBins / kKT == 2, "rank_write and the digit pick own two bins per thread");
static_assert(kKW <= 32, "one warp scans the warp sums");
static_assert(DSK_TOPK_MAX_K <= kSortCap && kSortCap <= kCandCap && kSampleMax * 4 <= kCandCap * 8, "capacities");
static_assert(kCandCap <= 65536, "16-bit candidate numbers");
static_assert(kSampleMin % kKT == 0 && kSortCap % kKT == 0, "uniform loop trip counts");
static_assert(kTkSmem + 512 <= DSK_SM120_SMEM_LIMIT, "top-k CTA exceeds SM120 shared memory");

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

/* Shared-memory working set of one row. */
struct TopkSmem {
  unsigned long long *cand; /* [kCandCap] composites */
  uint32_t *samp;           /* alias of cand: sample keys */
  uint32_t *hist;           /* [kBins] */
  uint32_t *start;          /* [kBins] */
  uint16_t *idx;            /* [kCandCap] */
  uint32_t *warp;           /* [32] */
  uint32_t *pick;           /* [3]: digit, count above it, count in it */
  uint32_t *red;            /* [8] */
  uint32_t *ngt, *neq, *n;
};

__device__ __forceinline__ uint32_t score_key(float x) { return dsk__topk_key_from_bits(__float_as_uint(x)); }
__device__ __forceinline__ unsigned long long composite(uint32_t key, int64_t col) {
  return ((unsigned long long)key << 32) | (unsigned long long)(uint32_t)~(uint32_t)col;
}
__device__ __forceinline__ uint32_t comp_key(unsigned long long c) { return (uint32_t)(c >> 32); }
__device__ __forceinline__ int32_t comp_col(unsigned long long c) { return (int32_t)~(uint32_t)(c & 0xFFFFFFFFull); }
/* The float whose key is `key`, for keys of non-NaN floats other than
 * -0's unused image (0x007FFFFF <= key <= 0xFF800000, key != 0x7FFFFFFF). */
__device__ __forceinline__ float key_to_float(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}
/* Brings the 128-byte line holding p into L2 (a hint; no register result). */
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
__device__ __forceinline__ float f4_comp(const float4 &v, int c) {
  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

/* Inclusive block scan of one value per thread (kKT threads); *total gets
 * the block's sum. All threads call. */
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

/* Sorts the n composites of a (descending, n <= kSortCap) and writes the
 * row: the first min(n, K) columns, -1 after. */
__device__ void sort_and_write(unsigned long long *a, int n, int K, int32_t *o) {
  const int n2 = pow2_at_least(n);
  for (int i = n + threadIdx.x; i < n2; i += kKT) a[i] = 0ull; /* below every real composite */
  __syncthreads();
  bitonic_desc_u64(a, n2);
  for (int i = threadIdx.x; i < K; i += kKT) o[i] = i < n ? comp_col(a[i]) : -1;
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

/* Warp-aggregated reservation of cnt slots per lane (every lane calls):
 * returns the first slot of this lane's run. */
__device__ __forceinline__ uint32_t warp_reserve(uint32_t cnt, uint32_t *counter) {
  const int lane = threadIdx.x & 31;
  uint32_t incl = cnt;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t n = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += n;
  }
  uint32_t base = 0;
  if (lane == 31 && incl) base = atomicAdd(counter, incl); /* incl of lane 31 = the warp's total */
  base = __shfl_sync(kFull, base, 31);
  return base + incl - cnt;
}

/* Shared histogram increment with one atomic per distinct bin of the warp
 * (every lane calls; lanes with in == false add nothing). */
__device__ __forceinline__ void hist_add(uint32_t *hist, bool in, uint32_t bin) {
  const uint32_t v = in ? bin : 0xFFFFFFFFu;
  const unsigned peers = __match_any_sync(kFull, v);
  if (in && (int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], (uint32_t)__popc(peers));
}

/* Radix-select step over a built histogram of nb (2048 or 1024) digits:
 * the digit d with count(> d) < need <= count(>= d). All threads call;
 * on return (after a barrier) every thread reads s.pick. */
__device__ void pick_digit(const TopkSmem &s, int nb, uint32_t need) {
  const int tid = threadIdx.x;
  const int per = nb / kKT; /* 2 or 1; thread tid owns bins nb-1-per*tid-j, top first */
  uint32_t cnt[2] = {0u, 0u}, sum = 0u;
#pragma unroll
  for (int j = 0; j < 2; j++)
    if (j < per) {
      cnt[j] = s.hist[nb - 1 - per * tid - j];
      sum += cnt[j];
    }
  uint32_t all = 0u;
  const uint32_t incl = block_incl_scan(sum, s.warp, &all);
  const uint32_t excl = incl - sum;
  if (excl < need && need <= incl) { /* exactly one thread */
    uint32_t cum = excl;
    bool found = false;
#pragma unroll
    for (int j = 0; j < 2; j++) {
      if (j < per && !found) {
        if (cum + cnt[j] >= need) {
          s.pick[0] = (uint32_t)(nb - 1 - per * tid - j);
          s.pick[1] = cum;
          s.pick[2] = cnt[j];
          found = true;
        } else {
          cum += cnt[j];
        }
      }
    }
  }
  __syncthreads();
}

/* Bucket of key k for rank_write: mode 0 is linear in the value over the
 * finite range (halved so that the difference cannot overflow; NaN and
 * -inf in bucket 0, +inf in the last), mode 1 linear in the key,
 * (k - kmin) >> shift. Both are monotone in the key (every fp32 step is a
 * monotone rounding of a monotone function, and sc is finite), so a higher
 * bucket holds only larger composites. */
__device__ __forceinline__ uint32_t rw_bucket(uint32_t k, int mode, uint32_t kmin, int shift, float xlo_h, float sc) {
  if (mode) return (k - kmin) >> shift;
  if (k <= 0x007FFFFFu) return 0u;
  if (k >= 0xFF800000u) return (uint32_t)(kBins - 1);
  float v = (key_to_float(k) * 0.5f - xlo_h) * sc; /* >= 0, finite or +inf */
  v = v < (float)(kBins - 1) ? v : (float)(kBins - 1);
  v = v > 0.f ? v : 0.f;
  return (uint32_t)floorf(v);
}

/* Writes the K largest of the n (<= kCandCap) distinct composites a[0, n)
 * in descending order to o, -1 after them, by ranking: rank = the count of
 * composites in higher buckets + the count of larger composites in the own
 * bucket (2048 buckets, rw_bucket; the value-linear mapping is tried first,
 * then the key-linear one). Returns false, with o untouched, when both
 * leave a bucket of more than kBucketMax composites (the caller sorts
 * instead). All threads call; the result is block-uniform. */
__device__ bool rank_write(const TopkSmem &s, const unsigned long long *a, int n, int K, int32_t *o) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (n == 0) {
    for (int i = tid; i < K; i += kKT) o[i] = -1;
    return true;
  }
  if (tid == 0) {
    s.red[0] = 0xFFFFFFFFu; /* min key */
    s.red[1] = 0u;          /* max key */
    s.red[2] = 0xFFFFFFFFu; /* min finite key */
    s.red[3] = 0u;          /* max finite key */
    s.red[4] = 0u;          /* largest bucket, mode 0 */
    s.red[5] = 0u;          /* largest bucket, mode 1 */
  }
  __syncthreads();
  uint32_t lo = 0xFFFFFFFFu, hi = 0u, flo = 0xFFFFFFFFu, fhi = 0u;
  for (int i = tid; i < n; i += kKT) {
    const uint32_t k = comp_key(a[i]);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
    if (k > 0x007FFFFFu && k < 0xFF800000u) {
      flo = k < flo ? k : flo;
      fhi = k > fhi ? k : fhi;
    }
  }
  lo = __reduce_min_sync(kFull, lo);
  hi = __reduce_max_sync(kFull, hi);
  flo = __reduce_min_sync(kFull, flo);
  fhi = __reduce_max_sync(kFull, fhi);
  if (lane == 0) {
    atomicMin(&s.red[0], lo);
    atomicMax(&s.red[1], hi);
    atomicMin(&s.red[2], flo);
    atomicMax(&s.red[3], fhi);
  }
  __syncthreads();
  const uint32_t kmin = s.red[0], range = s.red[1] - kmin;
  const int bits = 32 - __clz((int)range); /* bit length of range (0 for range 0) */
  const int shift = bits > 11 ? bits - 11 : 0;
  bool finite = s.red[2] <= s.red[3]; /* some finite composite: mode 0 applies */
  const float xlo_h = finite ? key_to_float(s.red[2]) * 0.5f : 0.f;
  const float xhi_h = finite ? key_to_float(s.red[3]) * 0.5f : 0.f;
  const float sc = xhi_h > xlo_h ? (float)(kBins - 1) / (xhi_h - xlo_h) : 0.f;
  if (isinf(sc)) finite = false; /* a finite range below ~6e-36: the key mapping does it */
  const int b0 = kBins - 1 - 2 * tid; /* this thread's two buckets, b0 and b0 - 1 */
#pragma unroll 1
  for (int mode = 0; mode < 2; mode++) {
    if (mode == 0 && !finite) continue; /* block-uniform */
    for (int i = tid; i < kBins; i += kKT) s.hist[i] = 0u;
    __syncthreads();
    for (int base = 0; base < n; base += kKT) { /* uniform trip count */
      const int i = base + tid;
      const bool in = i < n;
      hist_add(s.hist, in, in ? rw_bucket(comp_key(a[i]), mode, kmin, shift, xlo_h, sc) : 0u);
    }
    __syncthreads();
    /* start[b] = composites in buckets above b (exclusive scan from the top) */
    const uint32_t c0 = s.hist[b0], c1 = s.hist[b0 - 1];
    uint32_t all = 0u;
    const uint32_t incl = block_incl_scan(c0 + c1, s.warp, &all);
    const uint32_t excl = incl - c0 - c1;
    s.start[b0] = excl;
    s.start[b0 - 1] = excl + c0;
    const uint32_t mx = __reduce_max_sync(kFull, c0 > c1 ? c0 : c1);
    if (lane == 0) atomicMax(&s.red[4 + mode], mx);
    __syncthreads();
    if (s.red[4 + mode] > (uint32_t)kBucketMax) continue; /* block-uniform */
    s.hist[b0] = excl; /* now the bucket cursors */
    s.hist[b0 - 1] = excl + c0;
    __syncthreads();
    for (int i = tid; i < n; i += kKT) {
      const uint32_t b = rw_bucket(comp_key(a[i]), mode, kmin, shift, xlo_h, sc);
      const uint32_t at = atomicAdd(&s.hist[b], 1u);
      s.idx[at] = (uint16_t)i;
    }
    __syncthreads();
    for (int i = tid; i < n; i += kKT) {
      const unsigned long long x = a[i];
      const uint32_t b = rw_bucket(comp_key(x), mode, kmin, shift, xlo_h, sc);
      const uint32_t first = s.start[b], end = b > 0 ? s.start[b - 1] : (uint32_t)n;
      uint32_t r = first;
      for (uint32_t j = first; j < end; j++) r += a[s.idx[j]] > x ? 1u : 0u;
      if (r < (uint32_t)K) o[r] = comp_col(x);
    }
    for (int i = n + tid; i < K; i += kKT) o[i] = -1;
    return true;
  }
  return false;
}

__global__ void __launch_bounds__(kKT, 1) topk_kernel(const TopkParams p) {
  extern __shared__ __align__(16) uint8_t tsm[];
  __shared__ uint32_t sh_warp[32], sh_pick[3], sh_red[8], sh_cnt[3];
  TopkSmem s;
  s.cand = reinterpret_cast<unsigned long long *>(tsm);
  s.samp = reinterpret_cast<uint32_t *>(tsm);
  s.hist = reinterpret_cast<uint32_t *>(tsm + kTkOffHist);
  s.start = reinterpret_cast<uint32_t *>(tsm + kTkOffStart);
  s.idx = reinterpret_cast<uint16_t *>(tsm + kTkOffIdx);
  s.warp = sh_warp;
  s.pick = sh_pick;
  s.red = sh_red;
  s.ngt = &sh_cnt[0];
  s.neq = &sh_cnt[1];
  s.n = &sh_cnt[2];
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

    if (L <= K && p.shortcut) { /* every candidate is selected */
      for (int i = tid; i < K; i += kKT) o[i] = i < L ? i : -1;
      continue;
    }
    if (L <= kSortCap) { /* the whole row is the candidate set */
      const int n = (int)L;
      for (int i = tid; i < n; i += kKT) s.cand[i] = composite(score_key(row[i]), i);
      __syncthreads();
      if (!rank_write(s, s.cand, n, K, o)) sort_and_write(s.cand, n, K, o);
      continue;
    }

    /* ---- threshold from a sample. E ~ 1.75 K + 64 keys of the row should
     * be >= g; S sample keys (stratified, jittered columns) such that about
     * 48 of them are >= g, and g = the m-th largest sample key truncated
     * to 22 bits (two 11-bit radix passes over the sample). */
    int64_t E = (int64_t)K + (3 * (int64_t)K) / 4 + 64;
    const int64_t want = (48 * L + E - 1) / E;
    int S = want <= kSampleMin ? kSampleMin : want <= 2 * kSampleMin ? 2 * kSampleMin : kSampleMax;
    while (S > L) S >>= 1; /* L > kSortCap: S stays >= 2048, a multiple of kKT */
    if (E * S < 48 * L) { /* the largest sample is short of 48 hits: aim higher */
      int64_t e2 = (48 * L + S - 1) / S;
      if (e2 > 3072) e2 = 3072;
      if (e2 > E) E = e2;
    }
    int64_t m = (E * S + L - 1) / L;
    m = m < 1 ? 1 : m > S ? S : m;
    const int64_t stride = L / S; /* >= 1 */
    const int h0 = (int)(((16u - ((uint32_t)(uintptr_t)row & 15u)) & 15u) >> 2); /* to 16-byte alignment */
    const int64_t nv = (L - h0) >> 2;                                           /* float4 body */
    const float4 *v4 = reinterpret_cast<const float4 *>(row + h0);
    /* the first kPfDist iterations of the pass below go to L2 while the sample is taken */
    for (int64_t l = tid; l < (int64_t)kPfDist * kVU * kKT / 8; l += kKT)
      if (8 * l < nv) prefetch_l2(v4 + 8 * l);
    for (int j = tid; j < S; j += kKT) {
      const uint32_t hsh = (uint32_t)j * 2654435761u;
      const int64_t i = (int64_t)j * stride + (int64_t)((hsh ^ (hsh >> 15)) % (uint64_t)stride);
      s.samp[j] = score_key(row[i]);
    }
    uint32_t gkey = 0u, gmask = 0u, gneed = (uint32_t)m;
#pragma unroll 1
    for (int pass = 0; pass < 2; pass++) {
      const int shift = pass == 0 ? 21 : 10;
      for (int i = tid; i < kBins; i += kKT) s.hist[i] = 0u;
      __syncthreads(); /* also: the samples are written */
      for (int j = tid; j < S; j += kKT) {
        const uint32_t k = s.samp[j];
        hist_add(s.hist, (k & gmask) == gkey, (k >> shift) & (uint32_t)(kBins - 1));
      }
      __syncthreads();
      pick_digit(s, kBins, gneed);
      gneed -= s.pick[1];
      gkey |= s.pick[0] << shift;
      gmask |= (uint32_t)(kBins - 1) << shift;
    }
    if (tid == 0) *s.n = 0u;
    __syncthreads(); /* s.n and s.pick: the pass below overwrites the samples */
    /* key(x) >= gkey <=> x >= gf for every non-NaN x (the key order is the
     * float order with -0 == +0); NaN (key 0) is below every gkey >= 1. */
    const bool take_all = gkey == 0u;
    const float gf = gkey <= 0x007FFFFFu ? -INFINITY : key_to_float(gkey);

    /* ---- one pass over the row: the composite of every key >= gkey.
     * Iteration `base` reads kVU * kKT float4 (64 KB) and prefetches into
     * L2 the 512 lines of the iteration kPfDist ahead, so the loads hit L2
     * while DRAM streams. */
    for (int64_t base = 0; base < nv; base += (int64_t)kVU * kKT) {
      {
        const int64_t l = base + (int64_t)kPfDist * kVU * kKT + 8 * tid;
        if (tid < kVU * kKT / 8 && l < nv) prefetch_l2(v4 + l);
      }
      float4 v[kVU];
      int64_t idx[kVU];
#pragma unroll
      for (int u = 0; u < kVU; u++) {
        idx[u] = base + u * kKT + tid;
        v[u] = idx[u] < nv ? __ldg(v4 + idx[u]) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      uint32_t hm = 0u;
#pragma unroll
      for (int u = 0; u < kVU; u++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          if (idx[u] < nv && (take_all || f4_comp(v[u], c) >= gf)) hm |= 1u << (4 * u + c);
      const uint32_t cnt = (uint32_t)__popc(hm);
      if (__any_sync(kFull, cnt != 0u)) {
        uint32_t slot = warp_reserve(cnt, s.n);
        if (hm) {
#pragma unroll
          for (int u = 0; u < kVU; u++)
#pragma unroll
            for (int c = 0; c < 4; c++)
              if ((hm >> (4 * u + c)) & 1u) {
                if (slot < (uint32_t)kCandCap)
                  s.cand[slot] = composite(score_key(f4_comp(v[u], c)), h0 + 4 * idx[u] + c);
                slot++;
              }
        }
      }
    }
    { /* the unaligned head (h0 <= 3 columns) and the tail (<= 3) */
      const int64_t tail0 = h0 + 4 * nv;
      const int nextra = h0 + (int)(L - tail0);
      const bool valid = tid < nextra;
      const int64_t col = tid < h0 ? tid : tail0 + (tid - h0);
      const float x = valid ? row[col] : 0.f;
      const bool hit = valid && (take_all || x >= gf);
      const uint32_t slot = warp_reserve(hit ? 1u : 0u, s.n);
      if (hit && slot < (uint32_t)kCandCap) s.cand[slot] = composite(score_key(x), col);
    }
    __syncthreads();
    const uint32_t ncand = *s.n;
    /* With ncand >= K, every one of the K largest composites has a key >=
     * gkey (ncand of them do), so they are all candidates. */
    if (ncand >= (uint32_t)K && ncand <= (uint32_t)kCandCap && rank_write(s, s.cand, (int)ncand, K, o)) continue;

    /* ---- exact fallback. Radix select: the K-th largest key, 11 + 11 + 10
     * bits from the top. */
    unsigned long long *s_sel = s.cand;
    uint32_t prefix = 0u, pmask = 0u, need = (uint32_t)K, eq_total = 0u;
    if (tid == 0) {
      *s.ngt = 0u;
      *s.neq = 0u;
    }
#pragma unroll 1
    for (int pass = 0; pass < 3; pass++) {
      const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
      const int nb = pass == 2 ? 1024 : 2048;
      const uint32_t dmask = (uint32_t)nb - 1u;
      for (int i = tid; i < kBins; i += kKT) s.hist[i] = 0u;
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
          const uint32_t k = score_key(v[u]);
          hist_add(s.hist, i < L && (k & pmask) == prefix, (k >> shift) & dmask);
        }
      }
      __syncthreads();
      pick_digit(s, nb, need);
      need -= s.pick[1];
      eq_total = s.pick[2];
      prefix |= s.pick[0] << shift;
      pmask |= dmask << shift;
    }
    const uint32_t tau = prefix;
    const bool eq_fast = eq_total <= (uint32_t)kEqCap;

    /* Keys above tau -> s_sel[0 .. K-need); keys equal to tau -> s.hist
     * (fast path). s.hist was last read before pick_digit's barriers. */
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
        const uint32_t sg = warp_append(gt, s.ngt);
        if (gt) s_sel[sg] = composite(k, i);
        const uint32_t se = warp_append(eq, s.neq);
        if (eq) s.hist[se] = (uint32_t)i;
      }
    }
    __syncthreads();
    const uint32_t ngt = (uint32_t)K - need; /* == *s.ngt */
    if (eq_fast) {
      const int ne = (int)eq_total; /* == *s.neq */
      const int n2 = pow2_at_least(ne);
      for (int i = ne + tid; i < n2; i += kKT) s.hist[i] = 0xFFFFFFFFu;
      __syncthreads();
      bitonic_asc_u32(s.hist, n2);
      for (uint32_t j = tid; j < need; j += kKT) s_sel[ngt + j] = composite(tau, s.hist[j]);
    } else {
      /* many equal keys: the `need` lowest columns by an ordered scan */
      uint32_t taken = 0u; /* block-uniform */
      for (int64_t base = 0; base < L && taken < need; base += kKT) {
        const int64_t i = base + tid;
        const bool eq = i < L && score_key(row[i]) == tau;
        uint32_t tile = 0u;
        const uint32_t incl = block_incl_scan(eq ? 1u : 0u, s.warp, &tile);
        const uint32_t rank = taken + incl - (eq ? 1u : 0u);
        if (eq && rank < need) s_sel[ngt + rank] = composite(tau, i);
        taken += tile;
      }
    }
    __syncthreads();
    if (!rank_write(s, s_sel, K, K, o)) sort_and_write(s_sel, K, K, o);
  }
}

}  // namespace

/* ============================================================ host side */

/* Candidates per CTA: a multiple of 128 up to 4096, touching at most
 * kBtCap block-table entries, that minimises (waves of CTAs at the
 * kernel's residency) x (chunk + a fixed cost of 256 candidates per CTA). */
static int64_t logits_chunk(const dsk_ctx *ctx, int64_t T, int64_t W, int64_t pbs, int per_sm) {
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  const int64_t slots = sms * (per_sm > 0 ? per_sm : 1);
  int64_t cap = kMaxChunk;
  if (pbs < kMaxChunk) {
    cap = (int64_t)(kBtCap - 2) * pbs / kStage * kStage; /* blocks touched <= cap / pbs + 2 <= kBtCap */
    if (cap > kMaxChunk) cap = kMaxChunk;
    if (cap < kStage) cap = kStage; /* pbs 1: 128 candidates touch 128 blocks */
  }
  int64_t best = kStage, best_cost = -1;
  for (int64_t c = kStage; c <= cap; c += kStage) {
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
  return lg_smem_bytes(lg_gp(lg_groups(n_heads < 1 ? 1 : n_heads)));
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
  p.pbs32 = p.pbs < ((int64_t)1 << 31) ? (uint32_t)p.pbs : (1u << 31);
  p.pbs_shift = -1;
  for (int b = 0; b < 31; b++)
    if (p.pbs == ((int64_t)1 << b)) p.pbs_shift = b;
  p.out = d->out;
  p.out_st = d->out_stride_t;
  p.ctx_width = d->ctx_width;
  p.T = d->T;
  p.skip_le = skip_le;
  p.H = (int)d->n_heads;
  p.G = lg_groups(p.H);
  p.GP = lg_gp(p.G);
  p.counters = (unsigned long long *)d->counters;

  const int64_t smem = lg_smem_bytes(p.GP);
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  if (smem > st->smem_optin)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "indexer_logits: kernel needs %lld B of shared memory, device allows %lld",
                     (long long)smem, (long long)st->smem_optin);
  DSK_CUDA_TRY("indexer_logits", cudaFuncSetAttribute(indexer_logits_kernel,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int per_sm = 1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, indexer_logits_kernel, kLThreads, (size_t)smem) !=
      cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky; fall back to one CTA per SM */
    per_sm = 1;
  }
  p.chunk = logits_chunk(ctx, d->T, d->ctx_width, p.pbs, per_sm);
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
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  if (kTkSmem > st->smem_optin)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "topk: kernel needs %lld B of shared memory, device allows %lld",
                     (long long)kTkSmem, (long long)st->smem_optin);
  DSK_CUDA_TRY("topk",
               cudaFuncSetAttribute(topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kTkSmem));
  const int64_t grid = a->T < 2147483647LL ? a->T : 2147483647LL;
  topk_kernel<<<(unsigned)grid, kKT, (size_t)kTkSmem, s>>>(p);
  DSK_CUDA_LAUNCHED("topk");
  return DSK_STATUS_OK;
}
