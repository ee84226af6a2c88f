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

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ uint32_t u4_word(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* ============================================================== scores */
constexpr int kLThreads = 256;  /* 8 warps */
constexpr int kLWarps = kLThreads / 32;
constexpr int kStage = 128;     /* candidates per stage: one 16-row m-tile per warp */
constexpr int kNBuf = 5;        /* stage buffers (4 stages in flight while one is scored) */
constexpr int kRec = 128;       /* bytes of a staged record (unpadded, as in the page) */
constexpr int kBtCap = 256;     /* block-table entries of one chunk held in shared memory */
constexpr int kMaxChunk = 4096; /* candidates per CTA at most */
constexpr int kPassHeads = 64;  /* heads per launch (8 n-tiles); more heads take several passes */

/* Shared memory layout of one CTA (bytes), the same for every head count:
 * record ring [kNBuf][8 warps][16][128], scale ring [kNBuf][8][16] fp32,
 * mbarriers [kNBuf][8], block-table entries, w * q_scale of the pass. */
__host__ __device__ constexpr int64_t lg_off_ks() { return (int64_t)kNBuf * kStage * kRec; }
__host__ __device__ constexpr int64_t lg_off_bar() { return lg_off_ks() + (int64_t)kNBuf * kStage * 4; }
__host__ __device__ constexpr int64_t lg_off_bt() { return lg_off_bar() + (int64_t)kNBuf * kLWarps * 8; }
__host__ __device__ constexpr int64_t lg_off_wq() { return lg_off_bt() + kBtCap * 4; }
__host__ __device__ constexpr int64_t lg_off_cnt() { return lg_off_wq() + kPassHeads * 4; }
__host__ __device__ constexpr int64_t lg_smem_bytes() { return lg_off_cnt() + 16; }
static_assert(lg_smem_bytes() <= DSK_SM120_SMEM_LIMIT, "logits CTA exceeds SM120 shared memory");
static_assert(lg_off_ks() % 16 == 0 && lg_off_bar() % 8 == 0 && lg_off_bt() % 16 == 0 && lg_off_cnt() % 16 == 0,
              "regions aligned");
static_assert(kLWarps == 8 && kStage == 16 * kLWarps, "one m-tile per warp and stage");

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
  int pbs_shift;   /* log2(pbs32) when it is a power of two, else -1 (dsk__page_divisor) */
  float *out;
  int64_t out_st;
  int64_t ctx_width, T, chunk, skip_le;
  int H;           /* all heads */
  int h0, nh;      /* this pass: heads h0 .. h0 + nh - 1 (nh <= 8 NT) */
  int first, last; /* first pass: no partial to add; last pass: key scale, -inf, counters */
  unsigned long long *counters;
};

/* Block of candidate s (< 2^31). */
__device__ __forceinline__ uint32_t lg_block(const LogitsParams &p, uint32_t s) {
  return p.pbs_shift >= 0 ? (s >> p.pbs_shift) : s / p.pbs32;
}
/* Page of candidate s of the chunk (block b0 first), or -1. */
__device__ __forceinline__ int lg_page(const LogitsParams &p, const int *s_bt, uint32_t b0, uint32_t s) {
  const uint32_t bi = lg_block(p, s) - b0;
  return bi < (uint32_t)kBtCap ? s_bt[bi] : -1;
}

/* mbarrier / bulk-copy wrappers (sm_90 and sm_120). */
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(dsk_ptx::smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(dsk_ptx::smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(dsk_ptx::smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred P1;\n"
      "LAB_WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      " @P1 bra DONE;\n"
      " bra LAB_WAIT;\n"
      "DONE:\n}\n" ::"r"(dsk_ptx::smem_u32(bar)),
      "r"(parity)
      : "memory");
}
/* global -> shared bulk copy (16-byte aligned, a multiple of 16 bytes),
 * completion counted in bytes on bar */
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          dsk_ptx::smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(dsk_ptx::smem_u32(bar))
      : "memory");
}
/* relu(x) = x < 0 ? 0 : x with NaN propagated (max.NaN; -0 becomes +0) */
__device__ __forceinline__ float ix_relu(float x) {
  float r;
  asm("max.NaN.f32 %0, %1, 0f00000000;\n" : "=f"(r) : "f"(x));
  return r;
}

/* Issues the copies of warp `warp`'s m-tile of stage `st` (candidates
 * s_lo .. s_lo + 15 of the chunk, those < e) into ring buffer `buf`: the
 * records as one bulk copy per block-table run (lane l: the l-th block the
 * m-tile touches; at most 16), completion on the warp's mbarrier of that
 * buffer (lane 0 arrives first with the byte count, so the phase ends when
 * the bytes have landed); the scales by lanes 0..15 with cp.async (zero fill
 * for missing entries), committed by the caller. Missing records are not
 * copied: their rows hold stale bytes, which only reach their own MMA rows,
 * whose scores are -inf. Returns the missing candidates lane 0 counts. */
__device__ __forceinline__ int lg_issue(const LogitsParams &p, uint8_t *s_key, float *s_ks, uint64_t *s_bar,
                                        const int *s_bt, uint32_t b0, int64_t s_lo, int64_t e, int buf) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slot = buf * kLWarps + warp;
  uint8_t *dst0 = s_key + (int64_t)slot * 16 * kRec;
  const int64_t s_hi = s_lo + 16 < e ? s_lo + 16 : e;
  uint32_t bytes = 0u;
  int64_t rs = 0, src_off = 0;
  int miss = 0;
  if (s_lo < s_hi) {
    const uint32_t blo = lg_block(p, (uint32_t)s_lo), bhi = lg_block(p, (uint32_t)(s_hi - 1));
    const uint32_t b = blo + (uint32_t)lane;
    if (b <= bhi) {
      const int64_t bs = (int64_t)b * p.pbs;
      rs = s_lo > bs ? s_lo : bs;
      const int64_t re = s_hi < bs + p.pbs ? s_hi : bs + p.pbs;
      const uint32_t bi = b - b0;
      const int page = bi < (uint32_t)kBtCap ? s_bt[bi] : -1;
      if (page >= 0) {
        bytes = (uint32_t)(re - rs) * (uint32_t)kRec;
        src_off = (int64_t)page * p.page_stride + (rs - bs) * kRec;
      } else {
        miss = (int)(re - rs);
      }
    }
  }
  const uint32_t total = __reduce_add_sync(kFull, bytes);
  if (lane == 0) {
    if (total) mbar_arrive_tx(&s_bar[slot], total);
    else mbar_arrive(&s_bar[slot]);
  }
  __syncwarp();
  if (bytes) bulk_g2s(dst0 + (rs - s_lo) * kRec, p.base + src_off, bytes, &s_bar[slot]);
  if (lane < 16) {
    const int64_t s = s_lo + lane;
    bool ok = false;
    const uint8_t *src = p.base;
    if (s < s_hi) {
      const uint32_t b = lg_block(p, (uint32_t)s);
      const uint32_t bi = b - b0;
      const int page = bi < (uint32_t)kBtCap ? s_bt[bi] : -1;
      ok = page >= 0;
      if (ok) src = p.base + (int64_t)page * p.page_stride + kRec * p.pbs + 4 * (s - (int64_t)b * p.pbs);
    }
    dsk_ptx::cp_async4(&s_ks[slot * 16 + lane], src, ok);
  }
  return __reduce_add_sync(kFull, miss) * (lane == 0 ? 1 : 0);
}

/* lg_issue for pages of a multiple of 16 entries (p.tile16): an m-tile
 * (16-aligned) then lies in one page, so lane 0 alone issues it: one 2 KB
 * bulk copy of its 16 records and one 64-byte bulk copy of their scales,
 * both completing on the warp's mbarrier of the buffer. The copies cover
 * the whole 16-entry window of the page even when fewer candidates remain
 * (the extra rows only reach their own MMA rows, which are not stored); a
 * missing page copies nothing (its scores are -inf). Returns the missing
 * candidates on lane 0, 0 on the other lanes. */
__device__ __forceinline__ int lg_issue_tile(const LogitsParams &p, uint8_t *s_key, float *s_ks, uint64_t *s_bar,
                                             const int *s_bt, uint32_t b0, int64_t s_lo, int64_t e, int buf) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slot = buf * kLWarps + warp;
  int miss = 0;
  if (lane == 0) {
    bool copied = false;
    if (s_lo < e) {
      const uint32_t b = lg_block(p, (uint32_t)s_lo);
      const uint32_t bi = b - b0;
      const int page = bi < (uint32_t)kBtCap ? s_bt[bi] : -1;
      if (page >= 0) {
        const uint8_t *pg = p.base + (int64_t)page * p.page_stride;
        const int64_t r = s_lo - (int64_t)b * p.pbs; /* a multiple of 16, r + 16 <= pbs */
        mbar_arrive_tx(&s_bar[slot], 16u * kRec + 64u);
        bulk_g2s(s_key + (int64_t)slot * 16 * kRec, pg + r * kRec, 16u * kRec, &s_bar[slot]);
        bulk_g2s(s_ks + slot * 16, pg + (int64_t)kRec * p.pbs + 4 * r, 64u, &s_bar[slot]);
        copied = true;
      } else {
        miss = (int)(e - s_lo < 16 ? e - s_lo : 16);
      }
    }
    if (!copied) mbar_arrive(&s_bar[slot]);
  }
  return miss;
}

template <bool TILE>
__device__ __forceinline__ int lg_issue_any(const LogitsParams &p, uint8_t *s_key, float *s_ks, uint64_t *s_bar,
                                            const int *s_bt, uint32_t b0, int64_t s_lo, int64_t e, int buf) {
  if constexpr (TILE) return lg_issue_tile(p, s_key, s_ks, s_bar, s_bt, b0, s_lo, e, buf);
  else return lg_issue(p, s_key, s_ks, s_bar, s_bt, b0, s_lo, e, buf);
}

/* Scores of rows t (blockIdx.y, + gridDim.y ...) over candidates
 * [c0, c0 + chunk) for the heads of one pass; NT = n-tiles of 8 heads per
 * warp (8: 64 heads, 4: 32 heads). Every warp scores its own m-tile of each
 * stage for all heads of the pass and stages its own records, so the main
 * loop has no block-wide barrier. */
template <int NT, bool TILE>
__global__ void __launch_bounds__(kLThreads, NT == 8 ? 1 : 2) indexer_logits_kernel(const LogitsParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t *s_key = smem;
  float *s_ks = reinterpret_cast<float *>(smem + lg_off_ks());
  uint64_t *s_bar = reinterpret_cast<uint64_t *>(smem + lg_off_bar());
  int *s_bt = reinterpret_cast<int *>(smem + lg_off_bt());
  float *s_wq = reinterpret_cast<float *>(smem + lg_off_wq());
  int *s_cnt = reinterpret_cast<int *>(smem + lg_off_cnt());

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3; /* MMA group (row) and member of the quad */

  const int64_t c0 = (int64_t)blockIdx.x * p.chunk;
  if (c0 >= p.ctx_width) return; /* block-uniform */
  const int64_t c1 = c0 + p.chunk < p.ctx_width ? c0 + p.chunk : p.ctx_width;
  const uint32_t b0 = lg_block(p, (uint32_t)c0);

  if (tid < kNBuf * kLWarps) mbar_init(&s_bar[tid], 1u);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  uint32_t gs = 0u; /* stages issued by this CTA so far (block-uniform): buffer gs % kNBuf, parity (gs / kNBuf) & 1 */

  for (int64_t t = blockIdx.y; t < p.T; t += gridDim.y) {
    const int64_t L = dsk__indexer_causal_len(p.pos[t], p.sm[t], p.ratio);
    const int64_t n = L < p.ctx_width ? L : p.ctx_width;
    if (p.last && blockIdx.x == 0 && tid == 0 && L > p.ctx_width && p.counters) atomicAdd(&p.counters[1], 1ull);
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
    /* w * q_scale per head of the pass (0 for padding heads) */
    for (int h = tid; h < kPassHeads; h += kLThreads)
      s_wq[h] = h < p.nh ? p.w[t * p.w_st + p.h0 + h] * p.qs[t * p.qs_st + p.h0 + h] : 0.f;
    if (tid == 0) *s_cnt = 0;
    /* q of the pass's heads -> f16 B fragments: bq[nt][2kk] holds
     * q[h][32tq + 4kk + {0,1}], bq[nt][2kk+1] holds q[h][32tq + 4kk + {2,3}]
     * of head h = h0 + 8nt + g (zero for padding heads). */
    uint32_t bq[NT][16];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      const int h = 8 * nt + g;
      uint4 v0 = make_uint4(0u, 0u, 0u, 0u), v1 = v0;
      if (h < p.nh) {
        const uint4 *src = reinterpret_cast<const uint4 *>(p.q + t * p.q_st + (int64_t)(p.h0 + h) * p.q_sh + 32 * tq);
        v0 = src[0];
        v1 = src[1];
      }
#pragma unroll
      for (int kk = 0; kk < 8; kk++)
        dsk_ptx::e4m3x4_to_f16x2x2(u4_word(kk < 4 ? v0 : v1, kk & 3), bq[nt][2 * kk], bq[nt][2 * kk + 1]);
    }
    __syncthreads(); /* s_bt, s_wq, s_cnt ready */

    const int nst = (int)((e - c0 + kStage - 1) / kStage); /* <= kMaxChunk / kStage */
    int miss = 0;
#pragma unroll 1
    for (int st = 0; st < kNBuf - 1; st++) {
      if (st < nst)
        miss += lg_issue_any<TILE>(p, s_key, s_ks, s_bar, s_bt, b0, c0 + (int64_t)st * kStage + 16 * warp, e,
                                   (int)((gs + (uint32_t)st) % kNBuf));
      dsk_ptx::cp_async_commit();
    }
    /* Each stage finishes right after its MMAs. What the finish needs from
     * shared memory besides the MMA inputs (this lane's key scale and, TILE,
     * the m-tile's page validity) is read before the MMAs. (A software
     * pipeline that issued stage i's MMAs before stage i - 1's finish, with
     * two sets of accumulators, measured 1.03x slower at 64 heads and 1.09x
     * at 32: docs/benchmarks.md, "Indexer v4".) */
#pragma unroll 1
    for (int i = 0; i < nst; i++) {
      /* refill the buffer of stage i - 1 (this warp finished reading it) */
      __syncwarp();
      if (i + kNBuf - 1 < nst)
        miss += lg_issue_any<TILE>(p, s_key, s_ks, s_bar, s_bt, b0, c0 + (int64_t)(i + kNBuf - 1) * kStage + 16 * warp,
                                   e, (int)((gs + (uint32_t)(i + kNBuf - 1)) % kNBuf));
      dsk_ptx::cp_async_commit();
      const uint32_t gi = gs + (uint32_t)i;
      const int buf = (int)(gi % kNBuf);
      const int slot = buf * kLWarps + warp;
      mbar_wait(&s_bar[slot], (gi / kNBuf) & 1u); /* this m-tile's records (TILE: and scales) landed */
      if (!TILE) {
        dsk_ptx::cp_async_wait<kNBuf - 1>(); /* this lane's scale copy of stage i landed */
        __syncwarp();                         /* ... and every lane's */
      }
      const int64_t s_lo = c0 + (int64_t)i * kStage + 16 * warp;
      if (s_lo >= e) continue; /* warp-uniform */
      const float ksc = s_ks[slot * 16 + g + 8 * (tq & 1)];
      const bool tok = TILE && p.last && lg_page(p, s_bt, b0, (uint32_t)s_lo) >= 0;
      const uint8_t *kb = s_key + (int64_t)slot * 16 * kRec;
      float acc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
#pragma unroll
      for (int half = 0; half < 2; half++) {
        const int off = 32 * tq + 16 * half;
        const uint4 x = *reinterpret_cast<const uint4 *>(kb + g * kRec + off);
        const uint4 y = *reinterpret_cast<const uint4 *>(kb + (g + 8) * kRec + off);
#pragma unroll
        for (int kq = 0; kq < 4; kq++) {
          const int kk = 4 * half + kq;
          uint32_t a[4];
          dsk_ptx::e4m3x4_to_f16x2x2(u4_word(x, kq), a[0], a[2]); /* row g: dims 2tq,2tq+1 | 2tq+8,2tq+9 */
          dsk_ptx::e4m3x4_to_f16x2x2(u4_word(y, kq), a[1], a[3]); /* row g + 8 */
#pragma unroll
          for (int nt = 0; nt < NT; nt++) dsk_ptx::mma_f16(acc[nt], a, bq[nt][2 * kk], bq[nt][2 * kk + 1]);
        }
      }
      /* columns 2tq, 2tq + 1 of n-tile nt are heads 8nt + 2tq + {0, 1} of the pass */
      float sg = 0.f, sh = 0.f;
  #pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        const float2 wv = *reinterpret_cast<const float2 *>(s_wq + 8 * nt + 2 * tq);
        sg += ix_relu(acc[nt][0]) * wv.x + ix_relu(acc[nt][1]) * wv.y;
        sh += ix_relu(acc[nt][2]) * wv.x + ix_relu(acc[nt][3]) * wv.y;
      }
      sg += __shfl_xor_sync(kFull, sg, 1);
      sh += __shfl_xor_sync(kFull, sh, 1);
      sg += __shfl_xor_sync(kFull, sg, 2);
      sh += __shfl_xor_sync(kFull, sh, 2);
      const int row = g + 8 * tq; /* tq 0: row g, tq 1: row g + 8 */
      const int64_t s = s_lo + row;
      if (tq < 2 && s < e) {
        float v = tq == 0 ? sg : sh;
        if (!p.first) v += orow[s];
        if (p.last) {
          /* TILE: the m-tile lies in one page */
          const bool ok = TILE ? tok : lg_page(p, s_bt, b0, (uint32_t)s) >= 0;
          v = ok ? v * ksc : -INFINITY;
        }
        orow[s] = v;
      }
    }
    gs += (uint32_t)nst;
    /* missing candidates of this chunk, one global atomic per CTA */
    if (lane == 0 && miss && p.last) atomicAdd(s_cnt, miss);
    __syncthreads();
    if (tid == 0 && *s_cnt && p.counters) atomicAdd(&p.counters[0], (unsigned long long)*s_cnt);
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
  (void)n_heads; /* one layout for every head count */
  return lg_smem_bytes();
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
  dsk__page_divisor(p.pbs, &p.pbs32, &p.pbs_shift);
  p.out = d->out;
  p.out_st = d->out_stride_t;
  p.ctx_width = d->ctx_width;
  p.T = d->T;
  p.skip_le = skip_le;
  p.H = (int)d->n_heads;
  p.counters = (unsigned long long *)d->counters;

  const int64_t smem = lg_smem_bytes();
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  if (smem > st->smem_optin)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "indexer_logits: kernel needs %lld B of shared memory, device allows %lld",
                     (long long)smem, (long long)st->smem_optin);
  /* passes of up to 64 heads: the first writes its partial sums, later ones
   * add theirs, the last applies the key scale (H <= 64: one pass) */
  for (int h0 = 0; h0 < p.H; h0 += kPassHeads) {
    p.h0 = h0;
    p.nh = p.H - h0 < kPassHeads ? p.H - h0 : kPassHeads;
    p.first = h0 == 0;
    p.last = h0 + kPassHeads >= p.H;
    /* pages of a multiple of 16 entries: every 16-aligned m-tile lies in one
     * page (lg_issue_tile) */
    const bool tile16 = p.pbs % 16 == 0;
    void (*kern)(const LogitsParams) =
        p.nh <= 32 ? (tile16 ? indexer_logits_kernel<4, true> : indexer_logits_kernel<4, false>)
                   : (tile16 ? indexer_logits_kernel<8, true> : indexer_logits_kernel<8, false>);
    DSK_CUDA_TRY("indexer_logits", cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 1;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, kLThreads, (size_t)smem) != cudaSuccess) {
      (void)cudaGetLastError(); /* not sticky; fall back to one CTA per SM */
      per_sm = 1;
    }
    p.chunk = logits_chunk(ctx, d->T, d->ctx_width, p.pbs, per_sm);
    const int64_t gx = (d->ctx_width + p.chunk - 1) / p.chunk;
    const int64_t gy = d->T < 65535 ? d->T : 65535;
    kern<<<dim3((unsigned)gx, (unsigned)gy), kLThreads, (size_t)smem, s>>>(p);
    DSK_CUDA_LAUNCHED("indexer_logits");
  }
  return DSK_STATUS_OK;
}
