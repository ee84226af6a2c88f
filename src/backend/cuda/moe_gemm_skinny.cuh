/* moe_gemm_skinny.cuh - the decode-shaped FP8 x MXFP4 / FP8 x FP8 GEMM (v4,
 * v5; docs/moe.md "CUDA kernels"). Included by moe_gemm.cu inside its
 * anonymous namespace, after GemmArgs and the fragment helpers it shares
 * with the tiled kernel.
 *
 * It serves the few-row tactics: grouped calls at BLOCK_M 64 and dense calls
 * of at most 8 rows, with BLOCK_N 64 or 128 and split-K 1, 2 or 4, for MXFP4
 * (MX) and FP8 128x128-block-scaled weights. There an m-block holds a few
 * live rows (one token, or a few, routed to the block's expert), so the tiled
 * kernel spends its time converting weights for a tile that is mostly
 * padding. This kernel swaps the operands: the MMA's M is the weight rows
 * (output columns, 16 per warp), its N the live rows of the block in groups
 * of 8, and each weight is converted once per group.
 *
 * CTA = NW = BLOCK_N / 16 warps in KS = split-K slices of RG = NW / KS row
 * groups: warp w serves the 16 output columns of row group w % RG and the K
 * tiles kt = w / RG (mod KS), so the CTA covers 16 RG columns of one m-block
 * with NW warps (grid: x = groups of tpc column tiles, y/z = m-blocks; with
 * tpc > 1, MoE v11, the CTA's ring runs through the tpc tiles' stages in
 * turn, tile-major, and each tile's outputs are written after its last
 * stage; split-K keeps tpc 1). Split-K here needs
 * no workspace: the slices' sums meet in shared memory at the end of a
 * group and are added in ascending slice order. Per group of up to 8 live
 * rows (grouped: rows whose own m_indices entry is >= 0; dense: rows < M; in
 * ascending order):
 *  - all threads stage the group's A rows (missing rows zero-filled) in
 *    shared memory in fragment order: 8-byte chunk (kt, s, g, q) = K values
 *    128 kt + 32 s + 8 q .. + 7 of group row g, as e4m3 bytes (cp.async) or,
 *    MXFP4 groups of at most 4 rows (v9, DSK_MOE_SK_A16), as the chunk's four
 *    f16x2 B operands, converted once here; and the rows' activation scales
 *    per K tile ([kt][8]; x 2^14 = kSkMxFold for MX);
 *  - each warp streams its 16 weight rows through its own ring of ST stages
 *    of TPS K tiles (cp.async: 64 (MX, one tile) or 128 bytes per row per
 *    stage in a row of PITCH bytes, each warp-wide copy whole 32-byte
 *    sectors of 8 or 4 rows, and the rows' scale words), with no block
 *    barrier;
 *  - per K tile and 32-wide step s: lane (g, q) reads K values 32 s + 8 q ..
 *    + 7 of weight rows g and g + 8 (MX: word q of block s, b_frag_mx_f16,
 *    e2m1 * 2^-14; FP8: 8 bytes, a_frag_f16) as the A operand and those of
 *    group row g (staged f16, or 8 bytes through a_frag_f16, unscaled) as
 *    the B operand, in the tiled
 *    kernel's K order. MX: the two MMAs of a block start from zero and are
 *    added to the tile's sum times the weight row's block scale, the tile's
 *    sum folded into the fp32 accumulator with the group row's K-tile scale
 *    (MoE v8b; before, every block with the product of both); FP8: the 8 MMAs
 *    of the tile share one weight scale (the row's 128-block) and are
 *    folded once per tile.
 * D is rounded once to bf16 and written for live rows and columns < N. */

/* MXFP4 products here: the e2m1 operand is value * 2^-14 (b_frag_mx_f16)
 * and, unlike the tiled kernel's f16 path, the activations are not scaled
 * by 2^7 (four HMUL2 fewer per 32-wide step). Every product is exact in the
 * MMA's fp32 and the factor is a power of two, so leaving it out scales
 * each MMA sum by exactly 2^-7 (no product comes near fp32's underflow). */
constexpr float kSkMxFold = 16384.f;

constexpr int kSkPadB = 16; /* bytes after each staged weight row: keeps the fragment reads conflict-free */

/* DSK_MOE_SK_A16 (compile-time; default 1): MXFP4 passes of at most 4 rows
 * stage their A rows converted to f16 fragments, once per CTA, instead of
 * e4m3 bytes that every warp converts again at every 32-wide step (6
 * instructions a step of about 59; docs/benchmarks.md, MoE v9). 0 = e4m3
 * always (the A/B baseline). */
#ifndef DSK_MOE_SK_A16
#define DSK_MOE_SK_A16 1
#endif
/* Bytes of the staged A rows: grp rows of K e4m3 bytes, or for MXFP4 at
 * grp <= 4 room for grp rows of f16. A pass of cnt <= 4 rows then stages
 * them as f16 in pow2(cnt) rows: that fits at grp <= 4 and, in the 8 K
 * bytes of grp 8, for any cnt <= 4; a pass of more rows stages 8 e4m3 rows.
 * grp 4 takes the bytes of grp 8, so whether the kernel fits a call does
 * not depend on grp (skinny_pick decides at grp 8). */
__host__ __device__ constexpr int64_t sk_a_bytes(bool mx, int64_t K, int grp) {
  return (DSK_MOE_SK_A16 && mx && grp <= 4 ? 2 : 1) * grp * K;
}

/* NW warps, ST = weight ring depth in stages of TPS K tiles of 128: 4, or
 * 3 / 2 when the A rows of a large K leave no room for 4 (DSv4-Pro's K 7168
 * at 8 warps). TPS 2 (MXFP4 only) makes a stage 128 bytes per weight row,
 * as an FP8 tile: the H200 streams 128-byte row pieces at 3.8 TB/s and
 * 64-byte ones at 2.5 (dsk-latency), and the per-stage work (copies,
 * waits, scale loads) is shared by two tiles, but the stage doubles the
 * ring's shared memory, so the host takes it only where it costs no CTAs
 * per SM. */
template <int NW, int ST, bool MX, int TPS_ = 1>
struct Sk {
  static constexpr int THREADS = 32 * NW;
  static constexpr int TPS = TPS_;             /* K tiles per ring stage: 1, or 2 for MXFP4 */
  static constexpr int TILEB = MX ? 64 : 128;  /* weight bytes per row per K tile */
  static constexpr int ROWB = TILEB * TPS;     /* ... per ring stage: 64 (MXFP4, 1 tile) or 128 */
  static constexpr int PITCH = ROWB + kSkPadB; /* 80 or 144 */
  static_assert(TPS == 1 || (MX && TPS == 2), "two K tiles per stage exist for MXFP4 only");
  static constexpr int RING = ST * NW * 16 * PITCH;   /* weight rows */
  static constexpr int RING_S = ST * NW * 16 * 4 * TPS; /* their scale words */
  /* A in fragment order (sk_a_bytes: the grp rows of a pass as e4m3 or,
   * MXFP4 at grp <= 4, as f16), its scales ([K/128][8]), the live rows */
  static __host__ __device__ constexpr int64_t smem(int64_t K, int grp) {
    return RING + RING_S + sk_a_bytes(MX, K, grp) + 8 * (K / 128) * 4 + 64 * 4 + 16;
  }
  static_assert(ST * 16 * PITCH >= 32 * 16, "a warp's ring holds its slice partials (32 lanes x 4 floats)");
};

/* Register budget: 24 warps per SM (3 CTAs of 8 warps, 6 of 4; <= 80
 * registers) where shared memory allows it (docs/benchmarks.md, MoE v5:
 * an unbounded register choice, 96 at 8 warps split 2, cost DSv4-Flash FC2
 * at T 1 15 %). Two K tiles per stage had a 16-warp bound (<= 128
 * registers) until MoE v8: at 24 warps they compile to <= 77 registers
 * without spills and the host may pick them at 3 CTAs of 8 warps per SM
 * (DSv4-Flash FC1 T 1 and T 16 0.91x against the 16-warp bound). No
 * instantiation spills (sm_90, sm_120a). */
/* the register bound above as warps per SM (skinny_fit counts CTAs by it) */
constexpr int kSkWarpsPerSm = 24;

/* DSK_MOE_SK_PREFETCH (cuda_common.cuh): the weight ring's first stages
 * before griddepcontrol.wait (MoE v13); the default again for the host
 * emulation, which includes this header without cuda_common.cuh. */
#ifndef DSK_MOE_SK_PREFETCH
#define DSK_MOE_SK_PREFETCH 1
#endif

template <int NW, int ST, bool MX, int KS, int TPS_>
__global__ void __launch_bounds__(32 * NW, kSkWarpsPerSm / NW) moe_gemm_skinny_kernel(const GemmArgs p) {
  if (!DSK_MOE_SK_PREFETCH) dsk_ptx::pdl_wait(); /* before any global access (launched with PDL) */
  using S = Sk<NW, ST, MX, TPS_>;
  constexpr int RG = NW / KS; /* row groups of 16 columns */
  constexpr int PITCH = S::PITCH;
  static_assert(KS >= 1 && NW % KS == 0, "split-K slices must divide the warps");
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int rg = KS == 1 ? warp : warp % RG, ks = KS == 1 ? 0 : warp / RG;
  const int KT = p.KT;
  const int64_t K = (int64_t)KT * 128;
  uint8_t *s_ring = smem;
  uint32_t *s_rs = reinterpret_cast<uint32_t *>(smem + S::RING);
  const int grp = p.grp; /* rows per pass: 1, 2, 4 or 8 */
  uint8_t *s_a = smem + S::RING + S::RING_S;
  float *s_sa = reinterpret_cast<float *>(s_a + sk_a_bytes(MX, K, grp));
  int *s_rows = reinterpret_cast<int *>(s_sa + 8 * KT);
  int *s_cnt = s_rows + 64;

  const int64_t mb = (int64_t)blockIdx.z * 65535 + blockIdx.y;
  if (mb >= p.mblocks) return;
  const bool grouped = p.m_indices != nullptr;
  const int64_t m0 = mb * (grouped ? 64 : p.bm);
  /* m_indices may be read before griddepcontrol.wait (DSK_MOE_SK_PREFETCH):
   * its writer (the permute or the prologue) has completed by then, and an
   * L2 load (ld.global.cg) cannot see a line an older kernel left in L1 */
  auto mi = [&](int64_t r) -> int32_t { return DSK_MOE_SK_PREFETCH ? __ldcg(p.m_indices + r) : p.m_indices[r]; };
  int64_t e = 0;
  if (grouped) {
    e = mi(m0); /* the same word for every thread: the whole CTA returns together */
    if (e == -1) return;
    if (e < -1 || e >= p.E_local) {
      if (DSK_MOE_SK_PREFETCH) dsk_ptx::pdl_wait(); /* the counters are ordered after the kernel before */
      if (blockIdx.x == 0 && tid == 0 && p.counters) atomicAdd(p.counters, 1ull);
      return;
    }
  }
  /* live rows of the block, ascending */
  if (tid < 32) {
    if (grouped) {
      const bool l0 = mi(m0 + lane) >= 0, l1 = mi(m0 + 32 + lane) >= 0;
      const unsigned b0 = __ballot_sync(0xffffffffu, l0), b1 = __ballot_sync(0xffffffffu, l1);
      const unsigned below = (1u << lane) - 1u;
      if (l0) s_rows[__popc(b0 & below)] = lane;
      if (l1) s_rows[__popc(b0) + __popc(b1 & below)] = 32 + lane;
      if (lane == 0) *s_cnt = __popc(b0) + __popc(b1);
    } else { /* dense: rows m0 .. min(m0 + bm, M) - 1 (at most 8: kSkDenseMaxRows, so within s_rows[64]) */
      const int64_t left = p.M - m0;
      const int n = (int)(left < p.bm ? left : p.bm);
      s_rows[lane] = lane;
      s_rows[32 + lane] = 32 + lane;
      if (lane == 0) *s_cnt = n;
    }
  }
  __syncthreads();
  const int nlive = *s_cnt;

  /* column tiles x0 .. x0 + ntile - 1 of 16 RG columns (tpc per CTA; 1
   * with split-K): the warp's weight rows of tile j start at nw0 + 16 RG j */
  const int64_t tile_cols = 16 * RG;
  const int64_t x0 = (int64_t)blockIdx.x * p.tpc;
  const int64_t tiles_n = (p.N + tile_cols - 1) / tile_cols;
  const int ntile = (int)(tiles_n - x0 < p.tpc ? tiles_n - x0 : p.tpc); /* >= 1: the grid covers the tiles */
  const int64_t nw0 = x0 * tile_cols + 16 * rg; /* first weight row of the warp in tile 0 */
  /* N is a multiple of 128: a warp's 16 rows are all in or all out (tile j: wact_of(j)) */
  auto wact_of = [&](int j) { return nw0 + tile_cols * j < p.N; };
  const bool wact = wact_of(0);
  const uint8_t *wsrc = p.B + e * p.B_group + (wact ? nw0 : 0) * p.B_row;
  const int32_t *ssrc = p.sfb + e * p.sfb_group + (wact ? nw0 : 0);
  const int64_t wstep = tile_cols * p.B_row; /* weight bytes from one tile's rows to the next's */
  uint8_t *ring = s_ring + warp * ST * 16 * PITCH; /* the warp's ST slots of 16 rows */
  uint32_t *rs = s_rs + warp * ST * 16 * S::TPS;
  constexpr int TPS = S::TPS;
  const int NSTG = (KT + TPS - 1) / TPS;     /* ring stages of the whole K */
  const int nkt = (NSTG - ks + KS - 1) / KS; /* this slice's stages of one tile: ks, ks + KS, ... */
  const int nall = nkt * ntile;              /* ... of all the CTA's tiles, tile-major (one ring) */
  /* issue(i): the warp's copies of its i-th ring stage, j = ks + KS i (K
   * tiles TPS j .. TPS j + TPS - 1), into slot i % ST. The stage's 16 rows
   * of ROWB bytes are CPR 16-byte chunks each; copy c of lane l takes chunk
   * 32 c + l, i.e. piece l % CPR of row RPI c + l / CPR, so one warp-wide
   * copy reads whole 32-byte sectors of RPI rows (before: lane pairs split
   * a row, each copy used half of every sector it touched and L2 served
   * each sector twice; docs/benchmarks.md, MoE v8). With two MX tiles per
   * stage, pieces 0-3 are tile 2 j and 4-7 tile 2 j + 1, the latter skipped
   * (zero-filled, never read) past the last tile. The scale words: lane l
   * (l < 16 TPS) the word of row l & 15 and the stage's tile l >> 4 (MX:
   * word kt, the tile's 4 blocks; FP8: word kt / 4, whose byte kt % 4 is
   * the tile's 128-block); past the last tile the copy has size 0 (nothing
   * is read at its address). */
  constexpr int CPL = S::ROWB / 32; /* 16-byte copies per lane */
  constexpr int CPR = S::ROWB / 16; /* 16-byte chunks per row: 4 or 8 */
  constexpr int RPI = 32 / CPR;     /* rows per warp-wide copy */
  const int piece = lane % CPR;
  uint8_t *const ldst = ring + (lane / CPR) * PITCH + 16 * piece;
  const uint8_t *const lsrc = wsrc + (lane / CPR) * p.B_row + 16 * piece;
  const int64_t csrc = (int64_t)RPI * p.B_row; /* source step of copy c */
  /* issue(gi): ring stage gi of the CTA's sequence = stage i of tile t
   * (gi = t * nkt + i; the caller passes t and i) */
  auto issue = [&](int gi, int t, int i) {
    if (!wact_of(t)) return;
    const int j = ks + KS * i, slot = gi % ST;
    uint8_t *dst = ldst + slot * 16 * PITCH;
    const uint8_t *src = lsrc + (int64_t)t * wstep + (int64_t)j * S::ROWB;
    const bool hv = TPS == 1 || TPS * j + piece / 4 < KT;
#pragma unroll
    for (int c = 0; c < CPL; c++) dsk_ptx::cp_async16(dst + c * RPI * PITCH, hv ? src + c * csrc : wsrc, hv);
    const int tt = lane >> 4, kt = TPS * j + tt;
    const int64_t wi = MX ? kt : kt >> 2;
    if (tt < TPS)
      dsk_ptx::cp_async4(rs + (slot * TPS + tt) * 16 + (lane & 15), ssrc + t * tile_cols + wi * p.sfb_T4 + (lane & 15),
                         kt < KT);
  };

  /* the ring's first ST - 1 stages (tile, stage) in sequence order, one
   * commit group each; ii / it: (tile, stage) of the next stage to issue
   * (split-K: one tile, ii unused) */
  auto prime = [&](int &ii, int &it) {
#pragma unroll
    for (int st = 0; st < ST - 1; st++) {
      if (st < nall) issue(st, KS == 1 ? it : 0, KS == 1 ? ii : st);
      if (KS == 1 && ++ii == nkt) ii = 0, it++;
      dsk_ptx::cp_async_commit();
    }
  };
  /* prefetch: the first pass's stages before the wait (nlive >= 1: a
   * grouped block that got here has its first row live) */
  const bool pre = DSK_MOE_SK_PREFETCH && nlive > 0;
  int pii = 0, pit = 0;
  if (pre) prime(pii, pit);
  if (DSK_MOE_SK_PREFETCH) dsk_ptx::pdl_wait(); /* A and its scales are the kernel before's output */

  for (int gb = 0; gb < nlive; gb += grp) {
    const int cnt = nlive - gb < grp ? nlive - gb : grp;
    const bool primed = pre && gb == 0; /* this pass's first stages are in flight (groups before A's) */
    /* the pass stages pg rows (sk_a_bytes): f16 fragments of pow2(cnt)
     * rows when cnt <= 4 (MXFP4), else e4m3 bytes of grp rows. The B
     * operand's column g reads staged row g & (pg - 1): columns >= pg
     * repeat a staged row, and their D columns (>= cnt) are never written */
    const bool a16 = DSK_MOE_SK_A16 && MX && cnt <= 4;
    const int pg = a16 ? (cnt > 2 ? 4 : cnt) : grp;
    const int ga = g & (pg - 1);
    /* e4m3: A rows of the pass in fragment order: 16-byte chunk c of row g
     * (K bytes 16 c ..) goes to ((c >> 1) * pg + g) * 32 + (c & 1) * 16 */
    const int nch = (int)(K / 16);
    if (!a16) {
      for (int i = tid; i < pg * nch; i += S::THREADS) {
        const int gr = i / nch, c = i - gr * nch;
        const bool v = gr < cnt;
        const uint8_t *src = v ? p.A + (m0 + s_rows[gb + gr]) * p.A_stride + 16 * c : p.A;
        dsk_ptx::cp_async16(s_a + ((c >> 1) * pg + gr) * 32 + (c & 1) * 16, src, v);
      }
    }
    for (int i = tid; i < 8 * KT; i += S::THREADS) {
      const int gr = i / KT, kt = i - gr * KT;
      float v = 0.f;
      if (gr < cnt) {
        const int64_t r = m0 + s_rows[gb + gr];
        v = ue8m0_exact(((uint32_t)p.sfa[(int64_t)(kt >> 2) * p.sfa_T4 + r] >> (8 * (kt & 3))) & 0xFFu);
        if (MX) v *= kSkMxFold;
      }
      s_sa[kt * 8 + gr] = v;
    }
    dsk_ptx::cp_async_commit(); /* the e4m3 A chunks (f16: an empty group) */
    int ii = pii, it = pit; /* (tile, stage) of the next stage to issue */
    if (!primed) {
      ii = it = 0;
      prime(ii, it);
    }
    if (a16) {
      /* f16: 8-byte chunk c of row gr (K values 8 c .. 8 c + 7, i.e. step
       * c / 4, lane q = c % 4) -> its four f16x2 B operands (a_frag_f16,
       * unscaled) at ((c / 4) * pg + gr) * 64 + 16 (c % 4); loaded while
       * the ring's first stages are in flight, four chunks in flight */
      const int n8 = (int)(K / 8), tot = pg * n8;
      for (int i0 = tid; i0 < tot; i0 += 4 * S::THREADS) {
        uint2 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int i = i0 + u * S::THREADS, gr = i / n8, c = i - gr * n8;
          v[u] = make_uint2(0u, 0u);
          if (i < tot && gr < cnt)
            v[u] = *reinterpret_cast<const uint2 *>(p.A + (m0 + s_rows[gb + gr]) * p.A_stride + 8 * c);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int i = i0 + u * S::THREADS, gr = i / n8, c = i - gr * n8;
          if (i >= tot) break;
          uint4 o;
          a_frag_f16<false>(v[u], o.x, o.y, o.z, o.w);
          *reinterpret_cast<uint4 *>(s_a + ((int64_t)(c >> 2) * pg + gr) * 64 + 16 * (c & 3)) = o;
        }
      }
    }
    /* this thread's e4m3 A chunks landed (primed: A's group is the last
     * one, after the ring's first stages; the K loop's waits then count
     * only its own groups, as otherwise) */
    if (primed) dsk_ptx::cp_async_wait<0>();
    else dsk_ptx::cp_async_wait<ST - 1>();
    __syncthreads(); /* ... and every thread's, and the scales (and the f16 rows) */

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    /* acc += d x (weight row scale x group row scale): rows g / g + 8, group rows 2q / 2q + 1 */
    auto fold = [&](const float (&d)[4], float sb0, float sb1, float2 sa) {
      acc[0] = fmaf(d[0], sb0 * sa.x, acc[0]);
      acc[1] = fmaf(d[1], sb0 * sa.y, acc[1]);
      acc[2] = fmaf(d[2], sb1 * sa.x, acc[2]);
      acc[3] = fmaf(d[3], sb1 * sa.y, acc[3]);
    };
    /* the K loop, compiled once per staging form (A16: f16 B operands) */
    /* d rows = weight rows g, g + 8 (columns of D), d columns 2q, 2q + 1 =
     * group rows: tile t's outputs, written after its last stage */
    auto store = [&](int t) {
      if (!wact_of(t) || ks != 0) return;
      const int64_t c0 = nw0 + tile_cols * t;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int j = 2 * q + h;
        if (j >= cnt) continue;
        uint16_t *drow = p.D + (m0 + s_rows[gb + j]) * p.D_stride;
        drow[c0 + g] = (uint16_t)f32_to_bf16(acc[h]);
        drow[c0 + g + 8] = (uint16_t)f32_to_bf16(acc[2 + h]);
      }
    };
    auto kloop = [&](auto a16c) {
      constexpr bool A16 = decltype(a16c)::value;
      int t = 0, i = 0; /* the stage computed: stage i of tile t (gi = t * nkt + i) */
      for (int gi = 0; gi < nall; gi++) {
        __syncwarp(); /* every lane finished reading the slot the refill overwrites */
        if (gi + ST - 1 < nall) issue(gi + ST - 1, KS == 1 ? it : 0, KS == 1 ? ii : gi + ST - 1);
        if (KS == 1 && ++ii == nkt) ii = 0, it++;
        dsk_ptx::cp_async_commit();
        dsk_ptx::cp_async_wait<ST - 1>(); /* this lane's copies of stage gi landed */
        __syncwarp();                     /* ... and every lane's */
        const int tc = KS == 1 ? t : 0, ic = KS == 1 ? i : gi;
        if (KS == 1 && ++i == nkt) i = 0, t++;
        if (!wact_of(tc)) continue;
        const int j = ks + KS * ic, slot = gi % ST;
#pragma unroll
        for (int tt = 0; tt < TPS; tt++) {
        const int kt = TPS * j + tt;
        if (TPS > 1 && kt >= KT) break;
        const uint8_t *wr = ring + slot * 16 * PITCH + tt * S::TILEB;
        const uint32_t sw0 = rs[(slot * TPS + tt) * 16 + g], sw1 = rs[(slot * TPS + tt) * 16 + g + 8];
        const float2 sa = *reinterpret_cast<const float2 *>(s_sa + kt * 8 + 2 * q); /* group rows 2q, 2q + 1 */
        /* the tile's products: FP8 the MMA sums, MXFP4 the steps' sums times
         * their weight block scales (powers of two, so the fold's products
         * are exact and only the fp32 summation order differs from scaling
         * every step by both scales); folded with the activation scale once */
        float dt[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int s = 0; s < 4; s++) {
          uint32_t x0[4], x1[4];
          if (MX) {
            const uint32_t w0 = *reinterpret_cast<const uint32_t *>(wr + g * PITCH + 16 * s + 4 * q);
            const uint32_t w1 = *reinterpret_cast<const uint32_t *>(wr + (g + 8) * PITCH + 16 * s + 4 * q);
            b_frag_mx_f16(w0, x0[0], x0[1], x0[2], x0[3]); /* row g: (c0,c4) (c2,c6) | (c1,c5) (c3,c7) */
            b_frag_mx_f16(w1, x1[0], x1[1], x1[2], x1[3]); /* row g + 8 */
          } else {
            const uint2 w0 = *reinterpret_cast<const uint2 *>(wr + g * PITCH + 32 * s + 8 * q);
            const uint2 w1 = *reinterpret_cast<const uint2 *>(wr + (g + 8) * PITCH + 32 * s + 8 * q);
            a_frag_f16<false>(w0, x0[0], x0[1], x0[2], x0[3]); /* the same pairs of K values */
            a_frag_f16<false>(w1, x1[0], x1[1], x1[2], x1[3]);
          }
          uint32_t b[4];
          if constexpr (A16) {
            const uint4 av = *reinterpret_cast<const uint4 *>(s_a + ((int64_t)(kt * 4 + s) * pg + ga) * 64 + 16 * q);
            b[0] = av.x;
            b[1] = av.y;
            b[2] = av.z;
            b[3] = av.w;
          } else {
            const uint2 av = *reinterpret_cast<const uint2 *>(s_a + ((int64_t)(kt * 4 + s) * pg + ga) * 32 + 8 * q);
            a_frag_f16<false>(av, b[0], b[1], b[2], b[3]); /* unscaled: kSkMxFold undoes the 2^-14 alone */
          }
          const uint32_t a0[4] = {x0[0], x1[0], x0[1], x1[1]}, a1[4] = {x0[2], x1[2], x0[3], x1[3]};
          if (MX) {
            float d[4] = {0.f, 0.f, 0.f, 0.f};
            dsk_ptx::mma_f16(d, a0, b[0], b[1]);
            dsk_ptx::mma_f16(d, a1, b[2], b[3]);
            const float sb0 = ue8m0_fast((sw0 >> (8 * s)) & 0xFFu), sb1 = ue8m0_fast((sw1 >> (8 * s)) & 0xFFu);
            dt[0] = fmaf(d[0], sb0, dt[0]);
            dt[1] = fmaf(d[1], sb0, dt[1]);
            dt[2] = fmaf(d[2], sb1, dt[2]);
            dt[3] = fmaf(d[3], sb1, dt[3]);
          } else {
            dsk_ptx::mma_f16(dt, a0, b[0], b[1]);
            dsk_ptx::mma_f16(dt, a1, b[2], b[3]);
          }
        }
        if (MX) {
          fold(dt, 1.f, 1.f, sa);
        } else {
          const int sh = 8 * (kt & 3);
          fold(dt, ue8m0_exact((sw0 >> sh) & 0xFFu), ue8m0_exact((sw1 >> sh) & 0xFFu), sa);
        }
        }
        if (KS == 1 && ic == nkt - 1) { /* tile tc done (split-K: one tile, stored after the slices meet) */
          store(tc);
          acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
        }
      }
    };
    if constexpr (MX && DSK_MOE_SK_A16) {
      if (a16) kloop(std::integral_constant<bool, true>());
      else kloop(std::integral_constant<bool, false>());
    } else {
      kloop(std::integral_constant<bool, false>());
    }
    dsk_ptx::cp_async_wait<0>(); /* only empty groups remain */
    if (KS > 1) {
      /* the slices meet: slice ks > 0 leaves its sums in its own (drained)
       * ring, slice 0 adds them in ascending slice order */
      __syncwarp();
      if (ks > 0) *reinterpret_cast<float4 *>(ring + 16 * lane) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      __syncthreads();
      if (ks == 0) {
#pragma unroll
        for (int j = 1; j < KS; j++) {
          const float4 o = *reinterpret_cast<const float4 *>(s_ring + (rg + RG * j) * ST * 16 * PITCH + 16 * lane);
          acc[0] += o.x;
          acc[1] += o.y;
          acc[2] += o.z;
          acc[3] += o.w;
        }
      }
    }
    if (KS > 1) store(0); /* (KS 1: each tile after its last stage, in the K loop) */
    __syncthreads(); /* the group's A, rings and partials are free for the next group */
  }
}
