/* moe_gemm_prefill.cuh - the prefill-shaped MoE GEMM of the f16 MMA path
 * (sm_90): FP8 x MXFP4 (DeepSeek-V4) and FP8 x FP8 128x128-block (GLM-5.1,
 * the dense shared experts) at BLOCK_M 128 or 64, BLOCK_N 128, split 1
 * (which calls: prefill_serves in moe_gemm.cu). Same
 * arguments (GemmArgs), grid and results contract as the tiled kernel of
 * moe_gemm.cu (spec/mxfp4-moe.md §7.1; docs/moe.md, "The prefill kernel").
 * Included inside moe_gemm.cu's anonymous namespace after
 * moe_gemm_frag.cuh, and by tests/emu_moe_prefill.cc under the CPU
 * emulation (so only functions of ptx.cuh, no inline PTX).
 *
 * Why a second tiled kernel: the tiled kernel's f16 path starts every
 * 32-wide K step from zero and folds it into the accumulator with both
 * scales (an FMUL and an FFMA per output per step), on 32 x 32 warp tiles
 * whose every A and B value is converted by four warps: about 12
 * instructions per HMMA, and 112 TFLOPS at DSv4-Flash T 4096
 * (docs/benchmarks.md, MoE). Here the scales go into the f16 operands, so
 * the MMAs accumulate straight into one fp32 accumulator over all of K:
 *
 *  - Every scale is a power of two (UE8M0). Before the K loop each CTA
 *    reads the scale bytes of its 128 rows and 128 columns over the whole
 *    K and keeps each row's largest (rx) and each column's largest (cx).
 *  - A (e4m3, exact in f16 by cvt) is multiplied by 2^(ka - rx), ka the
 *    row's byte for the K tile; B by 2^(kb - cx), kb the column's byte for
 *    the 32-block (MXFP4) or the K tile (FP8); MXFP4 codes become f16 as
 *    value * 2^-14 by bit moves (moe_gemm_frag.cuh), so their multiplier is
 *    2^(kb - cx + 14). Each multiplier is an f16x2 (m, m) made by cvt from
 *    the fp32 2^(...), so it is exact down to f16's smallest subnormal and
 *    +0 below; every product of an operand and its multiplier is exact
 *    while the result is on f16's grid: for A when the row's K-tile scales
 *    span at most 15 binades (e4m3 keeps 4 significant bits down to 2^-9),
 *    for MXFP4 B when a column's 32-block scales span at most 23 (e2m1: 2
 *    bits down to 0.5), for FP8 B 15. Blocks further below their row's or
 *    column's largest are rounded to that grid (absolute error at most
 *    2^-25 of the largest block's scale per value; a block 2^25 below
 *    vanishes). Real activations and weights span a few binades; the
 *    reference comparison (diff metric) is unaffected either way.
 *  - D = bf16(acc * ue8m0(rx) * ue8m0(cx)), with the weight decoder of
 *    spec §1.2 for both (0 -> 2^-127, 0xFF -> NaN): a row or column with a
 *    0xFF scale anywhere comes out NaN, as in the reference. (The tiled
 *    kernel's MXFP4 decoder gives +Inf for 0xFF and 0 for 0; both are
 *    allowed by §1.2.)
 *
 * CTA = BLOCK_M x 128 outputs, warps of 64 x 64: 4 (2 x 2, 128 threads, 2
 * CTAs per SM on sm_90) at BLOCK_M 128, 2 (64 threads, 4 CTAs per SM) at
 * 64; the register bound (244-255 of 255, no spills) sets the CTAs per SM.
 * In grouped calls at BLOCK_M 128 the warp rows take interleaved m16 slices
 * (DSK_MOE_PF_INTERLEAVE below). Per 32-wide K step a
 * warp converts its 64 rows' A bytes (one 8-byte shared load per row and
 * thread, as the tiled kernel: lane t takes K values 8t..8t+7 of the step,
 * in the fragment order of moe_gemm_frag.cuh) and its 64 columns' B words
 * (MXFP4: ldmatrix of four n8 tiles; FP8: 8-byte loads), multiplies them by
 * their f16x2 multipliers, and issues 64 HMMAs: about 5 instructions per
 * HMMA. m16 slices of the warp without a live row are skipped (A and MMAs).
 *
 * Ring: K tiles of 128 through a cp.async ring of up to 3 stages (BLOCK_M
 * 128: MXFP4 3 x 25,600 B, FP8 2 x 33,792 B), each stage the A tile, the B tile and
 * the two scale words of each row and column; every warp-wide copy reads
 * whole 128-byte (A, FP8 B) or 64-byte (MXFP4 B) row pieces. Shared memory
 * <= 101,376 B (SM120's limit) for both; swizzles as the tiled kernel.
 *
 * Grouped: the block's expert is m_indices[m0]; -1 skipped, < -1 or >=
 * E_local skipped and counted once (N tile 0). Padding rows (own index < 0;
 * dense: rows >= M) are zero-filled, never written. N is a multiple of 128
 * (validated), so every column of a CTA exists. */

/* DSK_MOE_PREFILL (compile-time; default 1): the calls this kernel serves
 * (moe_gemm.cu, prefill_serves) run it; 0 keeps them on the tiled and
 * skinny kernels (the A/B baseline). */
#ifndef DSK_MOE_PREFILL
#define DSK_MOE_PREFILL 1
#endif
/* DSK_MOE_PF_INTERLEAVE (compile-time; default 1): in grouped calls at
 * BLOCK_M 128 warp row wm takes the m16 slices 2 i + wm (i = 0..3) instead
 * of 4 wm + i. A block's live rows are its first ones (the permute fills a
 * segment from its top), so a block of 96 live rows gives both warp rows 3
 * live slices instead of 4 and 2; each K tile's barrier waits for the
 * slower warp. Measured on an H100 (docs/benchmarks.md, MoE v14c): routed
 * FC1 / FC2 at T 4096 0.95-0.97x; dense calls (full blocks) 1.024x slower,
 * so they keep contiguous slices. 0 = contiguous slices everywhere (the
 * A/B baseline). */
#ifndef DSK_MOE_PF_INTERLEAVE
#define DSK_MOE_PF_INTERLEAVE 1
#endif

/* DSK_MOE_PF_BCOOP (compile-time; default 2, MoE v19, timed on an H100 on
 * 2026-12-07: docs/benchmarks.md): at BLOCK_M 128 the CTA
 * converts each K tile's weights to f16 once, thread c column c (codes or
 * bytes, multiplier and all: the same bits), into an f16 tile of 32 KB
 * that the warps read by ldmatrix, instead of both warp rows converting
 * every weight of their 64 columns (MXFP4: about 19 instructions per warp,
 * n8 tile and 32-wide step). The ring then has 2 stages (MXFP4 2 x 25,600
 * B, FP8 2 x 33,792 B, + 32,768 B: FP8 exactly SM120's 101,376 with the
 * maxima), and a K tile takes a second barrier (the f16 tile written).
 * 0 = every warp converts its own B fragments (v14..v18); 1 = both weight
 * formats convert once per CTA; 2 = MXFP4 weights only (the default:
 * DSv4-Flash FC1 / FC2 at T 4096 0.92-0.93x, while GLM-5.1's FP8 FC1 came
 * out 1.01-1.02x slower converting once per CTA); 3 = FP8 weights only
 * (the kernels of 1, chosen per format). */
#ifndef DSK_MOE_PF_BCOOP
#define DSK_MOE_PF_BCOOP 2
#endif

template <int BM_, bool MX>
struct Pf {
  static constexpr int BM = BM_, BN = 128;
  static constexpr int WTM = 64, WTN = 64; /* warp tile */
  static constexpr int WM = BM / WTM, WN = BN / WTN, THREADS = 32 * WM * WN;
  static constexpr int MT = WTM / 16, NT8 = WTN / 8;
  static constexpr int BROW = MX ? 64 : 128; /* B bytes per row per K tile */
  static constexpr int SA = BM * 128, SB = BN * BROW, SSA = BM * 4, SSB = BN * 4;
  static constexpr int STAGE = SA + SB + SSA + SSB;
  static constexpr int MAXES = (BM + BN) * 4; /* the row and column maxima */
  /* DSK_MOE_PF_BCOOP: the f16 B tile, BN rows (columns) of 128 K values */
  static constexpr bool BCOOP =
      BM_ == 128 && (DSK_MOE_PF_BCOOP == 1 || DSK_MOE_PF_BCOOP == (MX ? 2 : 3));
  static constexpr int SBH = BCOOP ? BN * 256 : 0;
  static constexpr int FIT = (DSK_SM120_SMEM_LIMIT - MAXES - SBH) / STAGE;
  static constexpr int STAGES = BCOOP ? 2 : FIT < 3 ? FIT : 3;
  static constexpr int SMEM = STAGES * STAGE + SBH + MAXES;
  static constexpr int CTAS = 256 / THREADS; /* per SM on sm_90: the register bound (255 a thread) */
  /* loaders: a warp-wide copy takes whole row pieces */
  static constexpr int ARS = THREADS / 8;     /* A rows per copy round */
  static constexpr int BCPR = BROW / 16;      /* B chunks per row: 4 or 8 */
  static constexpr int BRS = THREADS / BCPR;  /* B rows per copy round */
  static constexpr int BQ = BN / BRS;         /* B copies per thread */
  static_assert(BM == 64 || BM == 128, "BLOCK_M");
  static_assert(STAGES >= 2 && SMEM <= DSK_SM120_SMEM_LIMIT, "shared memory budget (SM120: 99 KB)");
  static_assert(STAGE % 16 == 0 && BM == THREADS && BN % THREADS == 0 && BM / ARS == 8, "layout");
  static_assert(!BCOOP || (BN == THREADS && STAGES <= FIT), "BCOOP: one column per thread, the f16 tile fits");
};

/* f16x2 (m, m), m = the fp32 whose bits are byte * 2^23 + bias23 (i.e.
 * 2^(byte + bias - 127) for bias23 = bias * 2^23), rounded to f16 (exact
 * down to 2^-24); +0 when that exponent is below the fp32 range */
__device__ __forceinline__ uint32_t pf_pow2_f16x2(uint32_t byte, int bias23) {
  int bits = (int)(byte << 23) + bias23;
  bits = bits < 0 ? 0 : bits;
  const float f = __int_as_float(bits);
  return dsk_ptx::f32x2_to_f16x2(f, f);
}

/* the largest of the bytes b < nb of w (nb >= 1) */
__device__ __forceinline__ int pf_byte_max(uint32_t w, int nb, int m) {
#pragma unroll
  for (int b = 0; b < 4; b++) {
    const int v = (int)((w >> (8 * b)) & 0xFFu);
    if (b < nb && v > m) m = v;
  }
  return m;
}

/* DSK_MOE_PF_BCOOP: step s of column c's f16 row (at `row`): pair q of
 * each of the four words t, times the multiplier m, goes to word t of
 * 16-byte chunk 4 s + q, stored at chunk (4 s + q) ^ (c & 7) (the layout
 * the warps' ldmatrix reads; see pf_b_to_f16). */
__device__ __forceinline__ void pf_put_f16_step(uint8_t *row, int s, int c, const uint32_t (&o)[4][4], uint32_t m) {
#pragma unroll
  for (int q = 0; q < 4; q++)
    *reinterpret_cast<uint4 *>(row + (((4 * s + q) ^ (c & 7)) << 4)) =
        make_uint4(dsk_ptx::hmul2_u32(o[q][0], m), dsk_ptx::hmul2_u32(o[q][1], m), dsk_ptx::hmul2_u32(o[q][2], m),
                   dsk_ptx::hmul2_u32(o[q][3], m));
}

/* DSK_MOE_PF_BCOOP: column c's 128 MXFP4 codes of a K tile (row c of the
 * stage's B tile, 64 bytes, swz64) -> f16 row c of the tile at sBh (256
 * bytes): word t of block s gives b_frag_mx_f16's four pairs q = 0..3
 * ((v0,v4) (v2,v6) (v1,v5) (v3,v7)), each times the block's multiplier
 * 2^(kb - cx + 14) (bias23 = (141 - cx) * 2^23), and pair q goes to word t
 * of 16-byte chunk 4 s + q, stored at chunk (4 s + q) ^ (c & 7): ldmatrix of
 * chunk 4 s + q over 8 columns then hands lane (g, t) exactly the f16x2
 * that b_frag_mx_f16 gave it in registers, and both the ldmatrix reads and
 * these stores are free of bank conflicts. */
__device__ __forceinline__ void pf_b_to_f16(const uint8_t *sB, uint32_t sbw, int bias23, uint8_t *sBh, int c) {
  uint8_t *row = sBh + c * 256;
#pragma unroll
  for (int s = 0; s < 4; s++) {
    const uint4 v = *reinterpret_cast<const uint4 *>(sB + swz64(c, s));
    const uint32_t m = pf_pow2_f16x2((sbw >> (8 * s)) & 0xFFu, bias23);
    uint32_t o[4][4];
    b_frag_mx_f16(v.x, o[0][0], o[1][0], o[2][0], o[3][0]);
    b_frag_mx_f16(v.y, o[0][1], o[1][1], o[2][1], o[3][1]);
    b_frag_mx_f16(v.z, o[0][2], o[1][2], o[2][2], o[3][2]);
    b_frag_mx_f16(v.w, o[0][3], o[1][3], o[2][3], o[3][3]);
    pf_put_f16_step(row, s, c, o, m);
  }
}

/* DSK_MOE_PF_BCOOP, FP8 weights: column c's 128 e4m3 bytes of a K tile
 * (row c of the stage's B tile, 128 bytes, swz128) -> f16 row c of the
 * tile at sBh, in the layout of pf_b_to_f16: group t (bytes 8 t .. 8 t + 7)
 * of step s gives a_frag_f16's four pairs, each times the K tile's
 * multiplier m. */
__device__ __forceinline__ void pf_b8_to_f16(const uint8_t *sB, uint32_t m, uint8_t *sBh, int c) {
  uint8_t *row = sBh + c * 256;
#pragma unroll
  for (int s = 0; s < 4; s++) {
    uint32_t o[4][4];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) { /* the 16-byte chunk 2 s + hh holds groups 2 hh, 2 hh + 1 */
      const uint4 v = *reinterpret_cast<const uint4 *>(sB + swz128(c, 2 * s + hh));
      a_frag_f16<false>(make_uint2(v.x, v.y), o[0][2 * hh], o[1][2 * hh], o[2][2 * hh], o[3][2 * hh]);
      a_frag_f16<false>(make_uint2(v.z, v.w), o[0][2 * hh + 1], o[1][2 * hh + 1], o[2][2 * hh + 1], o[3][2 * hh + 1]);
    }
    pf_put_f16_step(row, s, c, o, m);
  }
}

/* IL: the warp rows take interleaved m16 slices (DSK_MOE_PF_INTERLEAVE, a
 * grouped call at BLOCK_M 128; the launcher and the emulation pick it), a
 * template argument so that each slice's shared-memory offset is an
 * immediate of its load */
template <int BM, bool MX, bool IL>
__global__ void __launch_bounds__(Pf<BM, MX>::THREADS, Pf<BM, MX>::CTAS) moe_gemm_prefill_kernel(const GemmArgs p) {
  dsk_ptx::pdl_wait(); /* before any global access (launched with PDL) */
  using C = Pf<BM, MX>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp / C::WN, wn = warp % C::WN;
  /* first row of the warp's m16 slice i (DSK_MOE_PF_INTERLEAVE: grouped calls) */
  auto slice0 = [&](int i) { return IL ? 16 * (C::WM * i + wm) : wm * C::WTM + 16 * i; };
  const int64_t n0 = (int64_t)blockIdx.x * C::BN;
  const int64_t mb = (int64_t)blockIdx.z * 65535 + blockIdx.y;
  if (mb >= p.mblocks) return;
  const int64_t m0 = mb * C::BM;
  const bool grouped = p.m_indices != nullptr;
  int64_t e = 0;
  if (grouped) {
    e = p.m_indices[m0]; /* the same word for every thread: the whole CTA returns together */
    if (e == -1) return;
    if (e < -1 || e >= p.E_local) {
      if (blockIdx.x == 0 && tid == 0 && p.counters) atomicAdd(p.counters, 1ull);
      return;
    }
  }
  auto row_live = [&](int64_t r) { return grouped ? p.m_indices[r] >= 0 : r < p.M; };
  uint8_t *sBh = smem + C::STAGES * C::STAGE; /* BCOOP: the f16 B tile */
  int *s_rx = reinterpret_cast<int *>(smem + C::STAGES * C::STAGE + C::SBH);
  int *s_cx = s_rx + C::BM;
  const int KT = p.KT;

  /* loaders. A: chunk tid & 7 of rows (tid >> 3) + ARS q; B: chunk tid %
   * BCPR of rows tid / BCPR + BRS q; scale words: row tid, columns tid +
   * THREADS c */
  const int a_c = tid & 7, a_r0 = tid >> 3;
  unsigned a_live = 0;
#pragma unroll
  for (int q = 0; q < 8; q++) a_live |= (row_live(m0 + a_r0 + C::ARS * q) ? 1u : 0u) << q;
  const uint8_t *a_src = p.A + (m0 + a_r0) * p.A_stride + a_c * 16;
  const int b_c = tid % C::BCPR, b_r0 = tid / C::BCPR;
  const uint8_t *b_src = p.B + e * p.B_group + (n0 + b_r0) * p.B_row + b_c * 16;
  const int32_t *sfb_e = p.sfb + e * p.sfb_group;
  const bool s_row_ok = m0 + tid < p.M;

  auto load_stage = [&](int stage, int kt) {
    uint8_t *sA = smem + stage * C::STAGE;
    uint8_t *sB = sA + C::SA;
    uint32_t *sSa = reinterpret_cast<uint32_t *>(sB + C::SB);
    uint32_t *sSb = sSa + C::BM;
#pragma unroll
    for (int q = 0; q < 8; q++) {
      const bool v = (a_live >> q) & 1u;
      dsk_ptx::cp_async16(sA + swz128(a_r0 + C::ARS * q, a_c),
                          v ? a_src + (int64_t)C::ARS * q * p.A_stride + (int64_t)kt * 128 : p.A, v);
    }
#pragma unroll
    for (int q = 0; q < C::BQ; q++) {
      const int r = b_r0 + C::BRS * q;
      dsk_ptx::cp_async16(sB + (MX ? swz64(r, b_c) : swz128(r, b_c)),
                          b_src + (int64_t)C::BRS * q * p.B_row + (int64_t)kt * C::BROW, true);
    }
    dsk_ptx::cp_async4(sSa + tid, s_row_ok ? p.sfa + (int64_t)(kt >> 2) * p.sfa_T4 + m0 + tid : p.sfa, s_row_ok);
#pragma unroll
    for (int c = tid; c < C::BN; c += C::THREADS)
      dsk_ptx::cp_async4(sSb + c, sfb_e + (int64_t)(MX ? kt : kt >> 2) * p.sfb_T4 + n0 + c, true);
  };

  /* the ring's first STAGES - 1 stages, then (while they travel) the row
   * and column maxima over the whole K */
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; s++) {
    if (s < KT) load_stage(s, s);
    dsk_ptx::cp_async_commit();
  }
  {
    const int kw = (KT + 3) / 4; /* packed words per row (and per FP8 column) */
    int rx = 255;                /* a padding row: multipliers tiny, never written */
    if (row_live(m0 + tid)) {
      rx = 0;
      const int32_t *src = p.sfa + m0 + tid;
#pragma unroll 8 /* the loads of 8 words in flight together, not one round trip each */
      for (int w = 0; w < kw; w++) rx = pf_byte_max((uint32_t)src[(int64_t)w * p.sfa_T4], KT - 4 * w, rx);
    }
    s_rx[tid] = rx;
    for (int c = tid; c < C::BN; c += C::THREADS) {
      int cx = 0;
      const int32_t *src = sfb_e + n0 + c;
      if (MX) {
#pragma unroll 8
        for (int w = 0; w < KT; w++) cx = pf_byte_max((uint32_t)src[(int64_t)w * p.sfb_T4], 4, cx);
      } else {
#pragma unroll 8
        for (int w = 0; w < kw; w++) cx = pf_byte_max((uint32_t)src[(int64_t)w * p.sfb_T4], KT - 4 * w, cx);
      }
      s_cx[c] = cx;
    }
  }
  __syncthreads();

  /* the warp's live m16 slices (rows wm*64 + 16 i + g + 8 h), and the
   * exponent biases of the thread's B multipliers (columns wn*64 + 8 j + g:
   * 2^(kb - cx), MXFP4 2^(kb - cx + 14)); the rows' (2^(ka - rx)) are
   * re-read from s_rx once per K tile (fewer live registers) */
  int bbias[C::NT8];
  unsigned live16 = 0;
#pragma unroll
  for (int i = 0; i < C::MT; i++) {
    const int r = slice0(i) + g;
    const bool any = row_live(m0 + r) || row_live(m0 + r + 8);
    if (__any_sync(0xffffffffu, any)) live16 |= 1u << i;
  }
#pragma unroll
  for (int j = 0; j < C::NT8; j++) bbias[j] = ((MX ? 141 : 127) - s_cx[wn * C::WTN + 8 * j + g]) * (1 << 23);
  const int cbias = C::BCOOP ? ((MX ? 141 : 127) - s_cx[tid]) * (1 << 23) : 0; /* BCOOP: column tid's multiplier bias */
  const int a_lane = g * 128 + ((t >> 1) << 4) + 8 * (t & 1); /* the A loads' lane term (below) */

  float acc[C::MT][C::NT8][4];
#pragma unroll
  for (int i = 0; i < C::MT; i++)
#pragma unroll
    for (int j = 0; j < C::NT8; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

  for (int kt = 0; kt < KT; kt++) {
    dsk_ptx::cp_async_wait<C::STAGES - 2>();
    __syncthreads(); /* stage kt visible to all; stage kt - 1 free */
    {
      const int nk = kt + C::STAGES - 1;
      if (nk < KT) load_stage(nk % C::STAGES, nk);
      dsk_ptx::cp_async_commit();
    }
    const uint8_t *sA = smem + (kt % C::STAGES) * C::STAGE;
    const uint8_t *sB = sA + C::SA;
    const uint32_t *sSa = reinterpret_cast<const uint32_t *>(sB + C::SB);
    const uint32_t *sSb = sSa + C::BM;
    const int sh = 8 * (kt & 3); /* this K tile's byte in the packed 1x128 / 128x128 words */
    if constexpr (C::BCOOP) {
      /* the f16 tile of the previous K tile was last read before the
       * barrier above; every thread converts its column, then a barrier */
      if (MX) pf_b_to_f16(sB, sSb[tid], cbias, sBh, tid);
      else pf_b8_to_f16(sB, pf_pow2_f16x2((sSb[tid] >> sh) & 0xFFu, cbias), sBh, tid);
      __syncthreads();
    }
    if (!live16) continue; /* warp-uniform: no live row, no fragment work (the copies and barriers above stay) */

    /* A multipliers of the K tile (live slices only; the others are never read) */
    uint32_t am[C::MT][2];
#pragma unroll
    for (int i = 0; i < C::MT; i++) {
      am[i][0] = am[i][1] = 0u;
      if (!((live16 >> i) & 1u)) continue; /* warp-uniform */
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = slice0(i) + g + 8 * h;
        am[i][h] = pf_pow2_f16x2((sSa[r] >> sh) & 0xFFu, (127 - s_rx[r]) * (1 << 23));
      }
    }
    /* B: the scale words of the warp's columns (MXFP4: 4 blocks; FP8: the
     * multiplier of the K tile) */
    uint32_t bw[C::NT8];
#pragma unroll
    for (int j = 0; j < C::NT8; j++) {
      if (C::BCOOP) continue; /* multiplied in the f16 tile */
      bw[j] = sSb[wn * C::WTN + 8 * j + g];
      if (!MX) bw[j] = pf_pow2_f16x2((bw[j] >> sh) & 0xFFu, bbias[j]);
    }

#pragma unroll
    for (int s = 0; s < 4; s++) { /* k32 step s of the tile (MXFP4: block s) */
      uint32_t a[C::MT][2][4];
      /* swz128(r, 2 s + (t >> 1)) + 8 (t & 1) of row r = slice0(i) + 8 h + g:
       * r & 3 = g & 3, so the chunk term is lane-only (a_lane) plus
       * ((s ^ (g & 3)) << 5), and the slice's rows an immediate */
      const uint8_t *sAs = sA + a_lane + ((s ^ (g & 3)) << 5);
#pragma unroll
      for (int i = 0; i < C::MT; i++) {
        if (!((live16 >> i) & 1u)) continue; /* warp-uniform; a[i] unused then */
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const uint2 v = *reinterpret_cast<const uint2 *>(sAs + (slice0(i) + 8 * h) * 128);
          a_frag_f16<false>(v, a[i][0][h], a[i][0][2 + h], a[i][1][h], a[i][1][2 + h]);
          a[i][0][h] = dsk_ptx::hmul2_u32(a[i][0][h], am[i][h]);
          a[i][0][2 + h] = dsk_ptx::hmul2_u32(a[i][0][2 + h], am[i][h]);
          a[i][1][h] = dsk_ptx::hmul2_u32(a[i][1][h], am[i][h]);
          a[i][1][2 + h] = dsk_ptx::hmul2_u32(a[i][1][2 + h], am[i][h]);
        }
      }
#pragma unroll
      for (int jq = 0; jq < C::NT8; jq += 4) {
        uint32_t w[4] = {0u, 0u, 0u, 0u};
        if (C::BCOOP) {
          /* BCOOP: the f16 pairs come ready from the f16 tile, per n8 tile */
#pragma unroll
          for (int q = 0; q < 4; q++) {
            const int j = jq + q;
            const int rr = wn * C::WTN + 8 * j + (lane & 7);
            uint32_t b[4];
            dsk_ptx::ldmatrix_x4(b, sBh + rr * 256 + (((4 * s + (lane >> 3)) ^ (lane & 7)) << 4));
#pragma unroll
            for (int i = 0; i < C::MT; i++) {
              if (!((live16 >> i) & 1u)) continue;
              dsk_ptx::mma_f16(acc[i][j], a[i][0], b[0], b[1]);
              dsk_ptx::mma_f16(acc[i][j], a[i][1], b[2], b[3]);
            }
          }
          continue;
        }
        if (MX) {
          /* four n8 tiles' words: lane l gives row (jq + l / 8) * 8 + l % 8 of block s */
          const int rr = wn * C::WTN + 8 * (jq + (lane >> 3)) + (lane & 7);
          dsk_ptx::ldmatrix_x4(w, sB + swz64(rr, s));
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
          const int j = jq + q;
          uint32_t b[2][2], m;
          if (MX) {
            b_frag_mx_f16(w[q], b[0][0], b[0][1], b[1][0], b[1][1]);
            m = pf_pow2_f16x2((bw[j] >> (8 * s)) & 0xFFu, bbias[j]);
          } else {
            /* swz128 of row wn * 64 + 8 j + g, as the A loads (row & 3 = g & 3) */
            const uint2 v = *reinterpret_cast<const uint2 *>(sB + (sAs - sA) + (wn * C::WTN + 8 * j) * 128);
            a_frag_f16<false>(v, b[0][0], b[0][1], b[1][0], b[1][1]);
            m = bw[j];
          }
          b[0][0] = dsk_ptx::hmul2_u32(b[0][0], m);
          b[0][1] = dsk_ptx::hmul2_u32(b[0][1], m);
          b[1][0] = dsk_ptx::hmul2_u32(b[1][0], m);
          b[1][1] = dsk_ptx::hmul2_u32(b[1][1], m);
#pragma unroll
          for (int i = 0; i < C::MT; i++) {
            if (!((live16 >> i) & 1u)) continue;
            dsk_ptx::mma_f16(acc[i][j], a[i][0], b[0][0], b[0][1]);
            dsk_ptx::mma_f16(acc[i][j], a[i][1], b[1][0], b[1][1]);
          }
        }
      }
    }
  }
  dsk_ptx::cp_async_wait<0>(); /* only empty groups remain */

  /* epilogue: D = bf16(acc * ue8m0(rx) * ue8m0(cx)) for live rows */
#pragma unroll
  for (int i = 0; i < C::MT; i++) {
    if (!((live16 >> i) & 1u)) continue;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int rl = slice0(i) + g + 8 * h;
      const int64_t r = m0 + rl;
      if (!row_live(r)) continue; /* padding row: not written */
      const float fr = ue8m0_exact((uint32_t)s_rx[rl]);
      uint16_t *drow = p.D + r * p.D_stride;
#pragma unroll
      for (int j = 0; j < C::NT8; j++) {
        const int cl = wn * C::WTN + 8 * j + 2 * t;
        const int64_t c = n0 + cl;
        store_bf16x2(drow, c, acc[i][j][2 * h] * fr * ue8m0_exact((uint32_t)s_cx[cl]),
                     acc[i][j][2 * h + 1] * fr * ue8m0_exact((uint32_t)s_cx[cl + 1]), p.d_pair);
      }
    }
  }
}
