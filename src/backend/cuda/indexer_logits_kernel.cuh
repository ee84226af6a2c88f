/* indexer_logits_kernel.cuh - the lightning indexer's scores kernel (see
 * indexer_logits.cu for its design), its shared-memory layout and its
 * parameters. Included inside indexer_logits.cu's anonymous namespace and
 * by tests/emu_indexer.cc under the CPU emulation of tests/emu/cuda_emu.h
 * (so only functions of ptx.cuh, no inline PTX). Needs
 * backend/indexer_rules.h and DSK_SM120_SMEM_LIMIT. */

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
/* Candidates per CTA at most (build options, to time other caps; multiples
 * of 256): DSK_INDEXER_MAX_CHUNK for indexer_logits_kernel (passes of <= 32
 * heads, or all passes with DSK_INDEXER_QSMEM=0), DSK_INDEXER_MAX_CHUNK_Q for
 * indexer_logits_q_kernel. Device run 30 (H100, docs/benchmarks.md): the q
 * kernel at 8,192 took DSv4-Flash T 64 at 128K (one wave instead of two)
 * 133.6 -> 131.2 us and V3.2 461.9 -> 453.3 us; the 32-head kernel at 8,192
 * took GLM-5.1 424.1 -> 428.9 us, so it keeps 4,096. */
#ifndef DSK_INDEXER_MAX_CHUNK
#define DSK_INDEXER_MAX_CHUNK 4096
#endif
#ifndef DSK_INDEXER_MAX_CHUNK_Q
#define DSK_INDEXER_MAX_CHUNK_Q 8192
#endif
constexpr int kMaxChunk = DSK_INDEXER_MAX_CHUNK;
constexpr int kMaxChunkQ = DSK_INDEXER_MAX_CHUNK_Q;
static_assert(kMaxChunk % 256 == 0 && kMaxChunkQ % 256 == 0, "whole stages per chunk");
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

/* Issues the copies of warp `warp`'s tile of stage `st` (KEYS = 16 or 32
 * candidates s_lo .. s_lo + KEYS - 1 of the chunk, those < e) into ring
 * buffer `buf`: the records as one bulk copy per block-table run (lane l:
 * the l-th block the tile touches; at most KEYS), completion on the warp's
 * mbarrier of that buffer (lane 0 arrives first with the byte count, so the
 * phase ends when the bytes have landed); the scales by lanes 0..KEYS-1
 * with cp.async (zero fill for missing entries), committed by the caller.
 * Missing records are not copied: their rows hold stale bytes, which only
 * reach their own MMA rows, whose scores are -inf. Returns the missing
 * candidates lane 0 counts. */
template <int KEYS>
__device__ __forceinline__ int lg_issue(const LogitsParams &p, uint8_t *s_key, float *s_ks, uint64_t *s_bar,
                                        const int *s_bt, uint32_t b0, int64_t s_lo, int64_t e, int buf) {
  static_assert(KEYS == 16 || KEYS == 32, "a tile of 16 or 32 candidates");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slot = buf * kLWarps + warp;
  uint8_t *dst0 = s_key + (int64_t)slot * KEYS * kRec;
  const int64_t s_hi = s_lo + KEYS < e ? s_lo + KEYS : e;
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
    if (total) dsk_ptx::mbar_arrive_tx(&s_bar[slot], total);
    else dsk_ptx::mbar_arrive(&s_bar[slot]);
  }
  __syncwarp();
  if (bytes) dsk_ptx::bulk_g2s(dst0 + (rs - s_lo) * kRec, p.base + src_off, bytes, &s_bar[slot]);
  if (lane < KEYS) {
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
    dsk_ptx::cp_async4(&s_ks[slot * KEYS + lane], src, ok);
  }
  return __reduce_add_sync(kFull, miss) * (lane == 0 ? 1 : 0);
}

/* lg_issue for pages of a multiple of KEYS entries: a tile (KEYS-aligned)
 * then lies in one page, so lane 0 alone issues it: one bulk copy of its
 * KEYS records (2 or 4 KB) and one of their scales (64 or 128 bytes), both
 * completing on the warp's mbarrier of the buffer. The copies cover the
 * whole KEYS-entry window of the page even when fewer candidates remain
 * (the extra rows only reach their own MMA rows, which are not stored); a
 * missing page copies nothing (its scores are -inf). Returns the missing
 * candidates on lane 0, 0 on the other lanes. */
template <int KEYS>
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
        const int64_t r = s_lo - (int64_t)b * p.pbs; /* a multiple of KEYS, r + KEYS <= pbs */
        dsk_ptx::mbar_arrive_tx(&s_bar[slot], (uint32_t)KEYS * (kRec + 4u));
        dsk_ptx::bulk_g2s(s_key + (int64_t)slot * KEYS * kRec, pg + r * kRec, (uint32_t)KEYS * kRec, &s_bar[slot]);
        dsk_ptx::bulk_g2s(s_ks + slot * KEYS, pg + (int64_t)kRec * p.pbs + 4 * r, 4u * KEYS, &s_bar[slot]);
        copied = true;
      } else {
        miss = (int)(e - s_lo < KEYS ? e - s_lo : KEYS);
      }
    }
    if (!copied) dsk_ptx::mbar_arrive(&s_bar[slot]);
  }
  return miss;
}

template <bool TILE, int KEYS = 16>
__device__ __forceinline__ int lg_issue_any(const LogitsParams &p, uint8_t *s_key, float *s_ks, uint64_t *s_bar,
                                            const int *s_bt, uint32_t b0, int64_t s_lo, int64_t e, int buf) {
  if constexpr (TILE) return lg_issue_tile<KEYS>(p, s_key, s_ks, s_bar, s_bt, b0, s_lo, e, buf);
  else return lg_issue<KEYS>(p, s_key, s_ks, s_bar, s_bt, b0, s_lo, e, buf);
}

/* The start of a CTA's chunk (first candidate c0): its n mbarriers (count
 * 1 each) initialised and made visible to the async proxy before any copy
 * (a block barrier). Returns the chunk's first block. */
__device__ __forceinline__ uint32_t lg_chunk_begin(const LogitsParams &p, int64_t c0, uint64_t *s_bar, int n) {
  if ((int)threadIdx.x < n) dsk_ptx::mbar_init(&s_bar[threadIdx.x], 1u);
  dsk_ptx::fence_mbarrier_init();
  dsk_ptx::fence_proxy_async();
  __syncthreads();
  return lg_block(p, (uint32_t)c0);
}

/* The end of a row: the missing candidates of the chunk that each warp's
 * lane 0 counted (last pass) go to counters[0], one global atomic per CTA
 * (a block barrier). */
__device__ __forceinline__ void lg_row_end(const LogitsParams &p, int miss, int *s_cnt) {
  if ((threadIdx.x & 31) == 0 && miss && p.last) atomicAdd(s_cnt, miss);
  __syncthreads();
  if (threadIdx.x == 0 && *s_cnt && p.counters) atomicAdd(&p.counters[0], (unsigned long long)*s_cnt);
}

/* The start of row t in a CTA of chunk [c0, c1) (block b0 first), the same
 * in both scores kernels: counts a truncated row (chunk 0), writes -inf to
 * the chunk's columns >= min(L_t, ctx_width), and when the row has
 * candidates in the chunk waits for the previous row's use of shared
 * memory to end (a block barrier) and fills the block-table entries of the
 * chunk (page or -1), w * q_scale per head of the pass (0 for padding
 * heads) and the missing-entry count. Returns the end e of the row's
 * candidates in the chunk, or -1 when there are none (block-uniform). */
__device__ __forceinline__ int64_t lg_row_setup(const LogitsParams &p, int64_t t, int64_t c0, int64_t c1, uint32_t b0,
                                                int *s_bt, float *s_wq, int *s_cnt) {
  const int tid = threadIdx.x;
  const int64_t L = dsk__indexer_causal_len(p.pos[t], p.sm[t], p.ratio);
  const int64_t n = L < p.ctx_width ? L : p.ctx_width;
  if (p.last && blockIdx.x == 0 && tid == 0 && L > p.ctx_width && p.counters) atomicAdd(&p.counters[1], 1ull);
  if (p.skip_le >= 0 && n <= p.skip_le) return -1;
  float *orow = p.out + t * p.out_st;
  for (int64_t s = (c0 > n ? c0 : n) + tid; s < c1; s += kLThreads) orow[s] = -INFINITY;
  const int64_t e = n < c1 ? n : c1;
  if (c0 >= e) return -1;

  __syncthreads(); /* the previous row's use of shared memory is over */
  const int32_t r = p.req[t];
  const bool rvalid = r >= 0 && (int64_t)r < p.bt_rows;
  const int32_t *btrow = p.bt + (rvalid ? (int64_t)r * p.bt_stride : 0);
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
  for (int h = tid; h < kPassHeads; h += kLThreads)
    s_wq[h] = h < p.nh ? p.w[t * p.w_st + p.h0 + h] * p.qs[t * p.qs_st + p.h0 + h] : 0.f;
  if (tid == 0) *s_cnt = 0;
  return e;
}

/* The head sum of an m-tile's accumulators (columns 2 tq, 2 tq + 1 of
 * n-tile nt are heads 8 nt + 2 tq + {0, 1} of the pass): relu times w *
 * q_scale, summed over the lane's heads and then the quad. Lane (g, tq)
 * returns the sum of row g (tq 0, 2) or row g + 8 (tq 1, 3). */
template <int NT>
__device__ __forceinline__ float lg_head_sum(const float (&acc)[NT][4], const float *s_wq, int tq) {
  float sg = 0.f, sh = 0.f;
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const float2 wv = *reinterpret_cast<const float2 *>(s_wq + 8 * nt + 2 * tq);
    sg += dsk_ptx::ix_relu(acc[nt][0]) * wv.x + dsk_ptx::ix_relu(acc[nt][1]) * wv.y;
    sh += dsk_ptx::ix_relu(acc[nt][2]) * wv.x + dsk_ptx::ix_relu(acc[nt][3]) * wv.y;
  }
  sg += __shfl_xor_sync(kFull, sg, 1);
  sh += __shfl_xor_sync(kFull, sh, 1);
  sg += __shfl_xor_sync(kFull, sg, 2);
  sh += __shfl_xor_sync(kFull, sh, 2);
  return (tq & 1) ? sh : sg;
}

/* Stores score v of candidate s: later passes add the earlier passes'
 * partial sum; the last applies the key scale, or -inf when the entry's
 * page is missing (ok false). */
__device__ __forceinline__ void lg_store(const LogitsParams &p, float *orow, int64_t s, float v, bool ok, float ksc) {
  if (!p.first) v += orow[s];
  if (p.last) v = ok ? v * ksc : -INFINITY;
  orow[s] = v;
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
  const uint32_t b0 = lg_chunk_begin(p, c0, s_bar, kNBuf * kLWarps);
  uint32_t gs = 0u; /* stages issued by this CTA so far (block-uniform): buffer gs % kNBuf, parity (gs / kNBuf) & 1 */

  for (int64_t t = blockIdx.y; t < p.T; t += gridDim.y) {
    float *orow = p.out + t * p.out_st;
    const int64_t e = lg_row_setup(p, t, c0, c1, b0, s_bt, s_wq, s_cnt);
    if (e < 0) continue; /* block-uniform */
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

    const int nst = (int)((e - c0 + kStage - 1) / kStage); /* <= the chunk cap / kStage */
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
      dsk_ptx::mbar_wait(&s_bar[slot], (gi / kNBuf) & 1u); /* this m-tile's records (TILE: and scales) landed */
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
      const float v = lg_head_sum<NT>(acc, s_wq, tq);
      const int64_t s = s_lo + g + 8 * tq; /* tq 0: row g, tq 1: row g + 8 */
      /* TILE: the m-tile lies in one page */
      if (tq < 2 && s < e) lg_store(p, orow, s, v, TILE ? tok : lg_page(p, s_bt, b0, (uint32_t)s) >= 0, ksc);
    }
    gs += (uint32_t)nst;
    lg_row_end(p, miss, s_cnt);
  }
}

/* The kernel parameters of a call (host side; the per-pass fields h0, nh,
 * first, last and the chunk are set by the launcher). */
inline LogitsParams logits_params(const dsk_indexer_logits_desc *d, int64_t skip_le) {
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
  p.h0 = 0;
  p.nh = 0;
  p.first = p.last = 1;
  p.chunk = 0;
  return p;
}
