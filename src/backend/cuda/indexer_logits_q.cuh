/* indexer_logits_q.cuh - the lightning indexer's scores kernel for passes
 * of more than 32 heads (v5; docs/indexer.md): q of the pass in shared
 * memory as f16, 32 candidates per warp and stage. Included after
 * indexer_logits_kernel.cuh (its parameters, staging and finish rules) by
 * indexer_logits.cu and tests/emu_indexer.cc.
 *
 * Why: the 64-head form of indexer_logits_kernel keeps all 64 heads' q
 * fragments in registers (128 of them), so it runs at 206 registers, one
 * CTA of 8 warps per SM (2 warps a scheduler), and its 16-candidate m-tile
 * uses each converted key fragment for 8 MMAs only. Here q lives in shared
 * memory (16 KB, read by ldmatrix: one x4 gives two n-tiles of one k-step),
 * each warp scores two m-tiles (32 candidates), so each B fragment feeds
 * two MMAs and each converted A fragment eight, at <= 128 registers: two
 * CTAs per SM on sm_90 (4 warps a scheduler).
 *
 * Shared memory (bytes): record ring [kQNBuf][8 warps][32][128], q tile
 * [64 heads][256] f16 (16-byte chunks XOR-swizzled by head & 7), scale ring
 * [kQNBuf][8][32] fp32, mbarriers [kQNBuf][8], block-table entries, w *
 * q_scale of the pass, the missing-entry count. Two ring buffers only
 * (SM120's 99 KB): a warp scores one stage while its next is in flight. */

/* A k-step's four q fragments (ldmatrix.x4 each) loaded together before its
 * 16 MMAs (1), or each just before its 4 MMAs (0): at 0 ptxas gives the
 * four loads one destination register, so each waits for the MMAs of the
 * one before and a k-step pays four shared-memory latencies in a row; at
 * 1 it gives them four (124 registers on sm_90, 126 on sm_120a, no spills;
 * TILE pages only: the run-search form spills 8 bytes on sm_120a with it; a
 * build option under measurement). */
#ifndef DSK_INDEXER_QB_ALL
#define DSK_INDEXER_QB_ALL 0
#endif
constexpr bool kQBAll = DSK_INDEXER_QB_ALL != 0;

/* Stages ahead whose tiles each warp's lane 0 also brings into L2 with a
 * bulk prefetch (TILE only; 0: none), so that the shared-memory copy issued
 * later finds them there (a build option under measurement). */
#ifndef DSK_INDEXER_L2_AHEAD
#define DSK_INDEXER_L2_AHEAD 0
#endif
constexpr int kQL2Ahead = DSK_INDEXER_L2_AHEAD;

/* Records of TILE pages staged at a 144-byte stride, one 128-byte bulk copy
 * a lane, instead of one 4 KB copy at 128 (1; 0: unpadded): with 128 the
 * two rows of each quarter-warp phase of the fragment loads hit the same
 * banks (8 wavefronts a 16-byte load, 4 ideal); 144 shifts odd rows by 16
 * bytes (a build option under measurement). */
#ifndef DSK_INDEXER_REC_PAD
#define DSK_INDEXER_REC_PAD 0
#endif
constexpr int kQRecPad = DSK_INDEXER_REC_PAD ? 144 : kRec; /* TILE record stride in the ring */

constexpr int kQKeys = 32;                /* candidates per warp and stage: two m-tiles */
constexpr int kQStage = kQKeys * kLWarps; /* 256 candidates per stage */
constexpr int kQNBuf = 2;

__host__ __device__ constexpr int64_t lq_off_q() { return (int64_t)kQNBuf * kQStage * kQRecPad; }
__host__ __device__ constexpr int64_t lq_off_ks() { return lq_off_q() + (int64_t)kPassHeads * 256; }
__host__ __device__ constexpr int64_t lq_off_bar() { return lq_off_ks() + (int64_t)kQNBuf * kQStage * 4; }
__host__ __device__ constexpr int64_t lq_off_bt() { return lq_off_bar() + (int64_t)kQNBuf * kLWarps * 8; }
__host__ __device__ constexpr int64_t lq_off_wq() { return lq_off_bt() + kBtCap * 4; }
__host__ __device__ constexpr int64_t lq_off_cnt() { return lq_off_wq() + kPassHeads * 4; }
__host__ __device__ constexpr int64_t lq_smem_bytes() { return lq_off_cnt() + 16; }
static_assert(lq_smem_bytes() <= DSK_SM120_SMEM_LIMIT, "logits (q in shared memory) CTA exceeds SM120 shared memory");
static_assert(lq_off_q() % 16 == 0 && lq_off_ks() % 16 == 0 && lq_off_bar() % 8 == 0 && lq_off_bt() % 16 == 0 &&
                  lq_off_cnt() % 16 == 0,
              "regions aligned");
static_assert(kMaxChunkQ % kQStage == 0, "whole stages per chunk");

/* Byte offset in the q tile of 16-byte chunk `ch` (0..15) of head h's row:
 * chunk 2 kk holds k-step kk's logical k 0..7 (word c: q[h][32 c + 4 kk +
 * {0, 1}]), chunk 2 kk + 1 its k 8..15 (word c: q[h][32 c + 4 kk + {2, 3}]),
 * i.e. indexer_logits_kernel's B fragments bq[.][2 kk] and bq[.][2 kk + 1]
 * of lane (g = head, tq = c); ldmatrix of a chunk over 8 heads hands lane
 * (g, tq) exactly those words, free of bank conflicts. */
__host__ __device__ constexpr int lq_q_at(int h, int ch) { return h * 256 + ((ch ^ (h & 7)) << 4); }

/* L2 prefetch of warp `warp`'s tile at s_lo (its 32 records and scales),
 * TILE pages (a multiple of 32 entries); lane 0 only, nothing when the
 * tile is past e or its page is missing. */
__device__ __forceinline__ void lq_prefetch_tile(const LogitsParams &p, const int *s_bt, uint32_t b0, int64_t s_lo,
                                                 int64_t e) {
  if ((threadIdx.x & 31) != 0 || s_lo >= e) return;
  const int page = lg_page(p, s_bt, b0, (uint32_t)s_lo);
  if (page < 0) return;
  const uint8_t *pg = p.base + (int64_t)page * p.page_stride;
  const int64_t r = s_lo - (int64_t)lg_block(p, (uint32_t)s_lo) * p.pbs;
  dsk_ptx::bulk_prefetch_l2(pg + r * kRec, (uint32_t)kQKeys * kRec);
  dsk_ptx::bulk_prefetch_l2(pg + (int64_t)kRec * p.pbs + 4 * r, 4u * kQKeys);
}

/* lg_issue_tile<32> with the records at a kQRecPad-byte stride: lane l
 * copies record l of the 32-entry window (128 bytes), lane 0 also the
 * scales; all complete on the warp's mbarrier of the buffer. Returns the
 * missing candidates on lane 0. */
__device__ __forceinline__ int lq_issue_tile_pad(const LogitsParams &p, uint8_t *s_key, float *s_ks, uint64_t *s_bar,
                                                 const int *s_bt, uint32_t b0, int64_t s_lo, int64_t e, int buf) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slot = buf * kLWarps + warp;
  int page = -1;
  int64_t r = 0;
  if (s_lo < e) {
    page = lg_page(p, s_bt, b0, (uint32_t)s_lo);
    r = s_lo - (int64_t)lg_block(p, (uint32_t)s_lo) * p.pbs; /* a multiple of kQKeys, r + kQKeys <= pbs */
  }
  int miss = 0;
  if (lane == 0) {
    if (page >= 0) dsk_ptx::mbar_arrive_tx(&s_bar[slot], (uint32_t)kQKeys * (kRec + 4u));
    else {
      dsk_ptx::mbar_arrive(&s_bar[slot]);
      if (s_lo < e) miss = (int)(e - s_lo < kQKeys ? e - s_lo : kQKeys);
    }
  }
  __syncwarp();
  if (page >= 0) { /* warp-uniform */
    const uint8_t *pg = p.base + (int64_t)page * p.page_stride;
    dsk_ptx::bulk_g2s(s_key + ((int64_t)slot * kQKeys + lane) * kQRecPad, pg + (r + lane) * kRec, (uint32_t)kRec,
                      &s_bar[slot]);
    if (lane == 0)
      dsk_ptx::bulk_g2s(s_ks + slot * kQKeys, pg + (int64_t)kRec * p.pbs + 4 * r, 4u * kQKeys, &s_bar[slot]);
  }
  return miss;
}

/* Scores of rows t (blockIdx.y, + gridDim.y ...) over candidates
 * [c0, c0 + chunk) (chunk a multiple of kQStage) for the <= 64 heads of one
 * pass. TILE: pages of a multiple of 32 entries (every 32-aligned tile lies
 * in one page). */
template <bool TILE>
__global__ void __launch_bounds__(kLThreads, 2) indexer_logits_q_kernel(const LogitsParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t *s_key = smem;
  uint8_t *s_q = smem + lq_off_q();
  float *s_ks = reinterpret_cast<float *>(smem + lq_off_ks());
  uint64_t *s_bar = reinterpret_cast<uint64_t *>(smem + lq_off_bar());
  int *s_bt = reinterpret_cast<int *>(smem + lq_off_bt());
  float *s_wq = reinterpret_cast<float *>(smem + lq_off_wq());
  int *s_cnt = reinterpret_cast<int *>(smem + lq_off_cnt());

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3; /* MMA group (row) and member of the quad */

  const int64_t c0 = (int64_t)blockIdx.x * p.chunk;
  if (c0 >= p.ctx_width) return; /* block-uniform */
  const int64_t c1 = c0 + p.chunk < p.ctx_width ? c0 + p.chunk : p.ctx_width;
  const uint32_t b0 = lg_chunk_begin(p, c0, s_bar, kQNBuf * kLWarps);
  uint32_t gs = 0u; /* stages issued by this CTA so far: buffer gs % kQNBuf, parity (gs / kQNBuf) & 1 */

  /* ldmatrix row address of lane l in the read of k-step kk = 4 half + kq,
   * n-tiles 2 np and 2 np + 1: head 16 np + 8 (l >> 4) + (l & 7), chunk
   * 2 kk + ((l >> 3) & 1), i.e. lq_q_at = q_row + 4096 np + 128 half +
   * (q_x ^ (kq << 5)), as the chunk's bit 3 (half) is clear of the
   * swizzle's bits 0..2 and kq's bits 1..2 are added by XOR */
  const uint8_t *q_row = s_q + (8 * (lane >> 4) + (lane & 7)) * 256;
  const int q_x = (((lane >> 3) & 1) ^ (lane & 7)) << 4;

  /* record stride of this form's ring, and its copies of a warp tile */
  constexpr int kRs = TILE ? kQRecPad : kRec;
  auto issue = [&](int64_t s_lo, int64_t e, int buf) -> int {
    if constexpr (TILE && kQRecPad != kRec) return lq_issue_tile_pad(p, s_key, s_ks, s_bar, s_bt, b0, s_lo, e, buf);
    else return lg_issue_any<TILE, kQKeys>(p, s_key, s_ks, s_bar, s_bt, b0, s_lo, e, buf);
  };

  for (int64_t t = blockIdx.y; t < p.T; t += gridDim.y) {
    float *orow = p.out + t * p.out_st;
    const int64_t e = lg_row_setup(p, t, c0, c1, b0, s_bt, s_wq, s_cnt);
    if (e < 0) continue; /* block-uniform */
    {
      /* q -> the f16 tile: thread (head tid / 4, quarter c = tid % 4)
       * converts dims 32 c .. 32 c + 31 (zero for padding heads) */
      const int h = tid >> 2, c = tid & 3;
      uint4 v0 = make_uint4(0u, 0u, 0u, 0u), v1 = v0;
      if (h < p.nh) {
        const uint4 *src = reinterpret_cast<const uint4 *>(p.q + t * p.q_st + (int64_t)(p.h0 + h) * p.q_sh + 32 * c);
        v0 = src[0];
        v1 = src[1];
      }
#pragma unroll
      for (int kk = 0; kk < 8; kk++) {
        uint32_t lo, hi;
        dsk_ptx::e4m3x4_to_f16x2x2(u4_word(kk < 4 ? v0 : v1, kk & 3), lo, hi);
        *reinterpret_cast<uint32_t *>(s_q + lq_q_at(h, 2 * kk) + 4 * c) = lo;
        *reinterpret_cast<uint32_t *>(s_q + lq_q_at(h, 2 * kk + 1) + 4 * c) = hi;
      }
    }
    __syncthreads(); /* s_bt, s_wq, s_cnt, the q tile ready */

    const int nst = (int)((e - c0 + kQStage - 1) / kQStage);
    int miss = 0;
#pragma unroll 1
    for (int st = 0; st < kQNBuf - 1; st++) {
      if (st < nst)
        miss += issue(c0 + (int64_t)st * kQStage + kQKeys * warp, e, (int)((gs + (uint32_t)st) % kQNBuf));
      dsk_ptx::cp_async_commit();
    }
    if constexpr (TILE && kQL2Ahead > 0) {
#pragma unroll 1
      for (int st = kQNBuf - 1; st < kQNBuf - 1 + kQL2Ahead && st < nst; st++)
        lq_prefetch_tile(p, s_bt, b0, c0 + (int64_t)st * kQStage + kQKeys * warp, e);
    }
#pragma unroll 1
    for (int i = 0; i < nst; i++) {
      __syncwarp(); /* this warp finished reading the buffer of stage i - 1 */
      if constexpr (TILE && kQL2Ahead > 0) {
        if (i + kQNBuf - 1 + kQL2Ahead < nst)
          lq_prefetch_tile(p, s_bt, b0, c0 + (int64_t)(i + kQNBuf - 1 + kQL2Ahead) * kQStage + kQKeys * warp, e);
      }
      if (i + kQNBuf - 1 < nst)
        miss += issue(c0 + (int64_t)(i + kQNBuf - 1) * kQStage + kQKeys * warp, e,
                      (int)((gs + (uint32_t)(i + kQNBuf - 1)) % kQNBuf));
      dsk_ptx::cp_async_commit();
      const uint32_t gi = gs + (uint32_t)i;
      const int buf = (int)(gi % kQNBuf);
      const int slot = buf * kLWarps + warp;
      dsk_ptx::mbar_wait(&s_bar[slot], (gi / kQNBuf) & 1u);
      if (!TILE) {
        dsk_ptx::cp_async_wait<kQNBuf - 1>();
        __syncwarp();
      }
      const int64_t s_lo = c0 + (int64_t)i * kQStage + kQKeys * warp;
      if (s_lo >= e) continue; /* warp-uniform */
      /* warp-uniform: the second m-tile has candidates. (Its MMAs run
       * under this test: without the branches ptxas schedules the loop
       * into 128 registers with spills on both targets.) */
      const bool two = s_lo + 16 < e;
      const bool tok = TILE && p.last && lg_page(p, s_bt, b0, (uint32_t)s_lo) >= 0;
      const uint8_t *kb = s_key + (int64_t)slot * kQKeys * kRs;
      float acc[2][8][4];
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
#pragma unroll 1
      for (int half = 0; half < 2; half++) {
        const int off = 32 * tq + 16 * half;
        uint4 x[2], y[2];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
          x[mt] = *reinterpret_cast<const uint4 *>(kb + (16 * mt + g) * kRs + off);
          y[mt] = *reinterpret_cast<const uint4 *>(kb + (16 * mt + g + 8) * kRs + off);
        }
#pragma unroll
        for (int kq = 0; kq < 4; kq++) {
          /* k-step 4 half + kq */
          uint32_t a[2][4];
#pragma unroll
          for (int mt = 0; mt < 2; mt++) {
            dsk_ptx::e4m3x4_to_f16x2x2(u4_word(x[mt], kq), a[mt][0], a[mt][2]); /* row g */
            dsk_ptx::e4m3x4_to_f16x2x2(u4_word(y[mt], kq), a[mt][1], a[mt][3]); /* row g + 8 */
          }
          if constexpr (TILE && kQBAll) {
            uint32_t b[4][4];
#pragma unroll
            for (int np = 0; np < 4; np++)
              dsk_ptx::ldmatrix_x4(b[np], q_row + 4096 * np + 128 * half + (q_x ^ (kq << 5)));
#pragma unroll
            for (int np = 0; np < 4; np++) { /* n-tiles 2 np, 2 np + 1 */
#pragma unroll
              for (int mt = 0; mt < 2; mt++) {
                if (mt == 1 && !two) continue; /* warp-uniform */
                dsk_ptx::mma_f16(acc[mt][2 * np], a[mt], b[np][0], b[np][1]);
                dsk_ptx::mma_f16(acc[mt][2 * np + 1], a[mt], b[np][2], b[np][3]);
              }
            }
          } else {
#pragma unroll
            for (int np = 0; np < 4; np++) { /* n-tiles 2 np, 2 np + 1 */
              uint32_t b[4];
              dsk_ptx::ldmatrix_x4(b, q_row + 4096 * np + 128 * half + (q_x ^ (kq << 5)));
#pragma unroll
              for (int mt = 0; mt < 2; mt++) {
                if (mt == 1 && !two) continue; /* warp-uniform */
                dsk_ptx::mma_f16(acc[mt][2 * np], a[mt], b[0], b[1]);
                dsk_ptx::mma_f16(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
              }
            }
          }
        }
      }
      /* the finish of indexer_logits_kernel, per m-tile; the key scale is
       * read here, not before the MMAs (registers: 128) */
#pragma unroll
      for (int mt = 0; mt < 2; mt++) {
        if (mt == 1 && !two) continue;
        const float v = lg_head_sum<8>(acc[mt], s_wq, tq);
        const int row = g + 8 * tq; /* tq 0: row g, tq 1: row g + 8 */
        const int64_t s = s_lo + 16 * mt + row;
        if (tq < 2 && s < e)
          lg_store(p, orow, s, v, TILE ? tok : lg_page(p, s_bt, b0, (uint32_t)s) >= 0, s_ks[slot * kQKeys + 16 * mt + row]);
      }
    }
    gs += (uint32_t)nst;
    lg_row_end(p, miss, s_cnt);
  }
}
