/* moe_gemm.cu - the portable CUDA grouped GEMM of the MoE path (FP8 x MXFP4
 * for DeepSeek-V4, FP8 x FP8 with 128x128 block scales for GLM-5.1) over the
 * m-grouped contiguous layout, and the dense FP8 GEMM of the shared experts
 * (spec/mxfp4-moe.md §4, §5, §7; docs/moe.md; the semantics are those of
 * src/backend/cpu/ref_moe_gemm.c). One source for cuda-sm90 and cuda-sm120:
 * mma.sync (f16 m16n8k16 or e4m3 m16n8k32, fp32 accumulation), ldmatrix,
 * cp.async; no wgmma, TMEM or clusters; <= 99 KB of shared memory.
 *
 * Descriptors arrive validated (src/ops/moe.c): N and K multiples of 128,
 * M_sum a multiple of A_used, BLOCK_M = tactic v[0] dividing A_used (grouped:
 * 64 or 128; dense: 16, 32, 64 or 128), BLOCK_N = v[1] in {64, 128, 256}.
 *
 * CTA = one BLOCK_M x BLOCK_N tile of D. Grid x = N tiles (fastest, so the
 * CTAs of one m-block run together and share its A rows in L2), grid y, z =
 * the m-blocks (z * 65535 + y). K is walked in tiles of 128 (one
 * activation scale group) through a multi-stage cp.async pipeline: as many
 * stages of A, B and their scale words as fit 99 KB, at most 8.
 *  - Grouped: the block's expert is m_indices[m0]; -1 = skipped (D not
 *    written), < -1 or >= E_local = skipped and counted once (by the N-tile
 *    0 CTA). Rows whose own index is negative are padding: their A rows are
 *    zero-filled instead of read, an m16 slice without a live row skips its
 *    MMAs, and padding rows are not written (the op leaves them unspecified).
 *    A decode-time block holding a few real rows thus reads each weight byte
 *    of its expert once and does MMA work for its first m16 slice only.
 *  - Dense: rows >= M are handled like padding rows (never read or written).
 *
 * Warps: 4, 8 or 16 (table in Cfg).
 * Shared layouts, 16-byte chunks swizzled so that the fragment reads below
 * are free of bank conflicts:
 *  - A and FP8 B: rows of 128 bytes, chunk c stored at c ^ ((row & 3) << 1).
 *  - MXFP4 B: rows of 64 bytes (128 K values), chunk c (= MX block c) at
 *    c ^ ((row >> 1) & 3).
 *
 * K order inside each k32 step [dsk]: a dot product does not depend on the
 * order of its terms, so thread t of a quad feeds the MMAs of a step with the
 * eight K values 8t..8t+7 of the 32-block, in an order that makes the MXFP4
 * operand cheap: one 4-byte word of packed MXFP4 (bytes 4t..4t+3 of the
 * row's 16-byte block, delivered by ldmatrix) holds exactly those eight
 * codes. A (and FP8 B) take one 8-byte shared load per row and byte
 * permutes into the same order.
 *  - e4m3 path (mma m16n8k32): MMA positions 4t..4t+3 (a0/a1, b0) take the
 *    even K values, 16+4t..16+4t+3 (a2/a3, b1) the odd ones; the low nibbles
 *    of the word give b0, the high nibbles b1. E2M1 -> E4M3: code s.ee.m
 *    becomes the byte s000.ee.m00 = the e4m3 of value * 2^-6 (exact).
 *  - f16 path (two mma m16n8k16 per step): the f16x2 pairs are (v0,v4)
 *    (v2,v6) for the first MMA and (v1,v5) (v3,v7) for the second; e4m3 ->
 *    f16 by cvt (exact), e2m1 -> f16 by bit moves: s.ee.m -> s00000.ee.m +
 *    nine zeros = value * 2^-14 (exact); A is multiplied by 2^7 (exact)
 *    in the MXFP4 product.
 * The power of two of the e2m1 encoding is folded into the activation scale.
 *
 * Accumulation: every k32 step's MMAs start from zero and are folded into
 * the fp32 accumulator with fmaf(d, sa(row) * sb(col), acc): sb per (column,
 * 32-block) for MXFP4, per (column, 128-block) for FP8. Activation scales and
 * FP8 weight scales use the exact weight decoder (0 -> 2^-127, 0xFF -> NaN);
 * MXFP4 weight scales the bit trick of spec §1.2 (0 -> 0, 0xFF -> +Inf, so a
 * NaN block gives non-finite results, as intended). D is rounded once from
 * fp32 to bf16 (RNE). The CPU reference accumulates in fp64, so results
 * differ in low bits (the harness compares with the diff metric).
 *
 * split-K (tactic v[2] in {1, 2, 4}) [dsk]: with split s > 1 the grid's z
 * holds s slices of K per m-block (z = (m-block / 65535) * s + slice), each CTA
 * walks K / 128 / s tiles and stores its fp32 sums, unrounded, in the
 * workspace (dsk_*_gemm_plan: s x rows x N x 4 bytes, rows = M_sum or M);
 * splitk_reduce_kernel (PDL) adds the s partials in ascending order and
 * rounds once to bf16. Only the rows the tiled kernel would write are
 * stored and reduced. Results differ from split 1 by fp32 reordering only.
 * Where the skinny kernel serves the call (skinny_pick), its split is warp
 * slices of one CTA that meet in shared memory: no workspace
 * (dsk__cuda_moe_gemm_workspace reports 0), and it takes the full K / 128.
 *
 * A pointer or row stride that is not 16-byte aligned (B too) cannot feed
 * cp.async 16: such calls run a simple one-thread-per-output kernel with
 * the same arithmetic (slow; dsk_moe_run's buffers are always aligned). D is
 * written with 4-byte stores when D and D_stride allow it, else 2-byte ones.
 */
#include <stdint.h>

#include <type_traits>

#include "cuda_common.cuh"
#include "ptx.cuh"

/* MMA path. DSK_MOE_MMA (compile-time; default 0):
 *   0: mma m16n8k32 e4m3 where the tensor cores run it natively (compute
 *      capability 10 and later: the sm_120a/121a builds); f16 m16n8k16 below
 *      (sm_90, whose ptxas expands every e4m3 MMA into two f16 MMAs plus 12
 *      operand conversions; the f16 path converts each operand once per k32
 *      step and reuses it across the warp tile)
 *   1: e4m3 everywhere (-DDSK_MOE_MMA=1 tests the sm_120 path on an H200)
 *   2: f16 everywhere
 * Each kernel is a template on the path (F16); the host picks the variant
 * from the device's compute capability, and a device pass compiles only the
 * variants of its own path (the others are empty stubs). */
#ifndef DSK_MOE_MMA
#define DSK_MOE_MMA 0
#endif
/* DSK_MOE_SKINNY (compile-time; default 1): grouped calls at BLOCK_M 64 and
 * dense calls of at most 8 rows, with BLOCK_N 64 / 128, run the
 * decode-shaped kernel of moe_gemm_skinny.cuh (skinny_pick); 0 keeps them on
 * the tiled kernel (the A/B baseline). */
#ifndef DSK_MOE_SKINNY
#define DSK_MOE_SKINNY 1
#endif
#if defined(__CUDA_ARCH__) && (DSK_MOE_MMA == 2 || (DSK_MOE_MMA == 0 && __CUDA_ARCH__ < 1000))
#define DSK_MOE_F16 1
#else
#define DSK_MOE_F16 0
#endif

extern "C" {
dsk_status dsk__cuda_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *d, const dsk_tactic *t);
dsk_status dsk__cuda_dense_fp8_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *d, const dsk_tactic *t);
int64_t dsk__cuda_moe_gemm_workspace(const dsk_ctx *ctx, int grouped, int fmt, int64_t rows, int64_t N, int64_t K,
                                     const dsk_tactic *t);
}

namespace {

constexpr int kSmemBudget = DSK_SM120_SMEM_LIMIT; /* 101376 bytes: every configuration fits SM120 */
constexpr int kMaxStages = 8;

/* ------------------------------------------------------------ PTX wrappers */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  r[2] = r[3] = 0u;
}
/* 8-byte shared load that the compiler may neither merge with an earlier one
 * nor hoist: re-reading the scale words costs less than keeping them live */
__device__ __forceinline__ uint2 lds64_nocse(const void *p) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(dsk_ptx::smem_u32(p)));
  return v;
}
/* d += A(16x32 e4m3) . B(32x8 e4m3), fp32 */
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#include "moe_gemm_frag.cuh"

/* ------------------------------------------------------------ small helpers */

/* Four e2m1 codes in the low (high) nibbles of the bytes of x -> four e4m3
 * bytes of value * 2^-6. */
__device__ __forceinline__ uint32_t e2m1_lo_to_e4m3(uint32_t x) {
  return ((x << 4) & 0x80808080u) | ((x << 2) & 0x1C1C1C1Cu);
}
__device__ __forceinline__ uint32_t e2m1_hi_to_e4m3(uint32_t x) {
  return (x & 0x80808080u) | ((x >> 2) & 0x1C1C1C1Cu);
}


/* ------------------------------------------------------------ configuration */
template <int BM, int BN, bool MX, bool F16>
struct Cfg {
  /* warp tile WMT x WNT (rows x columns), WM x WN warps.
   * e4m3 path (sm_120: one CTA per SM by shared memory, so up to 255
   * registers for <= 256 threads; checked spill-free on sm_120a):
   *   BM 128: BN 64, 128: 32 x BN/2 (8 warps); BN 256: MXFP4 32 x 64
   *           (16 warps), FP8 64 x 64 (8 warps)
   *   BM 64:  64 x 16 (BN/16 warps: the SK layout below, both paths)
   *   BM 32, 16: BM x BN/4 (4 warps), BN 256: BM x 32 (8 warps)
   * f16 path (sm_90: 128 registers so that two 256-thread CTAs fit an SM):
   *   at most 32 x 32 per warp and 16 warps (BM 64: 64 x 16); BM 128 x BN 256: 32 x 128
   *   (8 warps, up to 255 registers, one CTA per SM) */
  /* BLOCK_M 64 is the decode shape: one warp row of 64 x 16 per warp (SK),
   * so each B value is converted once per CTA and a block with a few live
   * rows does its A work for one m16 slice only (see the header comment) */
  static constexpr bool SK = BM == 64;
  static constexpr int WMT = SK ? 64
                             : (!F16 && !MX && BN == 256) ? (BM == 128 ? 64 : BM)
                             : BM >= 32 ? 32 : BM;
  static constexpr int MT = WMT / 16; /* m16 slices per warp */
  static constexpr int WM = BM / WMT;
  static constexpr int WN_E4M3 = BM == 128 ? (BN == 256 ? 4 : 2)
                                 : BM == 64 ? (!MX && BN == 256 ? 2 : 4)
                                            : (BN == 256 ? 8 : 4);
  static constexpr bool F16_WIDE = F16 && BM == 128 && BN == 256;
  static constexpr int WN_F16 =
      F16_WIDE ? 2 : BN == 64 ? (WM >= 2 ? 2 : 4) : (BN / 32 < 16 / WM ? BN / 32 : 16 / WM);
  static constexpr int WN = SK ? BN / 16 : F16 ? WN_F16 : WN_E4M3;
  static constexpr int WNT = BN / WN; /* warp tile columns */
  static constexpr int NT8 = WNT / 8;
  static constexpr int JG = NT8 % 4 == 0 ? 4 : 2; /* n8 tiles per ldmatrix (x4 / x2) */
  static constexpr int THREADS = WM * WN * 32;
  /* f16 path (sm_90, 228 KB of shared memory per SM): 128 registers, so two
   * 256-thread CTAs fit an SM; e4m3 path (sm_120: ~100 KB per SM, one CTA
   * per SM whatever the registers): no cap below the 64K-register file */
  static constexpr int MINB = F16 && !F16_WIDE ? 65536 / (THREADS * 128) : 1;
  static constexpr int BROW = MX ? 64 : 128;           /* B bytes per row per K tile */
  static constexpr int SA = BM * 128, SB = BN * BROW, SSA = BM * 4, SSB = BN * 4;
  static constexpr int STAGE = SA + SB + SSA + SSB;
  static constexpr int STAGES = kSmemBudget / STAGE > kMaxStages ? kMaxStages : kSmemBudget / STAGE;
  static constexpr int SMEM = STAGES * STAGE;
  /* 16-byte chunks per loading thread and stage (threads tid * CPT >= chunks load nothing) */
  static constexpr int A_CPT = BM * 8 >= THREADS ? BM * 8 / THREADS : 1;
  static constexpr int B_CPR = BROW / 16; /* B chunks per row */
  static constexpr int B_CPT = BN * B_CPR >= THREADS ? BN * B_CPR / THREADS : 1;
  static_assert(BM % WMT == 0 && WMT % 16 == 0 && WMT <= 64, "warp rows");
  static_assert(WNT % 8 == 0 && WNT >= 16 && WNT <= 128 && WNT * WMT <= 4096, "warp columns");
  static_assert(STAGES >= 2 && SMEM <= kSmemBudget, "shared memory budget (SM120: 99 KB)");
  static_assert(STAGE % 16 == 0, "stage alignment");
  static_assert(MINB >= 1 && THREADS <= 512, "threads");
  static_assert(A_CPT <= 8 && (A_CPT * THREADS) % (BM * 8) == 0 && 8 % A_CPT == 0, "A loader: chunks in one row");
  static_assert((B_CPT * THREADS) % (BN * B_CPR) == 0 &&
                    (B_CPT <= B_CPR ? B_CPR % B_CPT == 0 : (B_CPT % B_CPR == 0 && B_CPT <= 2 * B_CPR)),
                "B loader: chunks in one row, or whole rows (at most 2)");
};

/* ------------------------------------------------------------ the kernel */
template <int BM, int BN, bool MX, bool F16>
__device__ __forceinline__ void moe_gemm_body(const GemmArgs &p) {
  using C = Cfg<BM, BN, MX, F16>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp / C::WN, wn = warp % C::WN;
  const int64_t n0 = (int64_t)blockIdx.x * BN;
  const bool grouped = p.m_indices != nullptr;
  /* split-K: the reduce kernel may launch now (it waits for this grid) */
  if (p.part) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  {
    /* m-block (grid y, z / ksplit: up to 65535^2); split-K slice z % ksplit */
    const int64_t mb = (int64_t)(blockIdx.z >> (p.ksplit >> 1)) * 65535 + blockIdx.y; /* ksplit 1, 2, 4: shift 0, 1, 2 */
    if (mb >= p.mblocks) return;
    const int64_t m0 = mb * BM;
    int64_t e = 0;
    if (grouped) {
      e = p.m_indices[m0]; /* the same word for every thread: the whole CTA returns together */
      if (e == -1) return;
      if (e < -1 || e >= p.E_local) {
        if (blockIdx.x == 0 && (blockIdx.z & (unsigned)(p.ksplit - 1)) == 0 && tid == 0 && p.counters) atomicAdd(p.counters, 1ull);
        return;
      }
    }

    /* the live m16 slices of the warp (a row is live when its own index is >= 0, dense: when < M) */
    unsigned live16 = 0;
#pragma unroll
    for (int i = 0; i < C::MT; i++) {
      const int64_t r = m0 + wm * C::WMT + 16 * i + g;
      const bool any = grouped ? (p.m_indices[r] >= 0 || p.m_indices[r + 8] >= 0) : r < p.M;
      if (__any_sync(0xffffffffu, any)) live16 |= 1u << i;
    }
    /* Loaders: thread tid copies the A_CPT (B_CPT) consecutive 16-byte chunks
     * tid * CPT .. of the stage, all in one row (or in consecutive rows when
     * a row has fewer chunks): one global base pointer per operand. */
    const int a_r = tid * C::A_CPT / 8, a_c = tid * C::A_CPT % 8;
    const int b_r = tid * C::B_CPT / C::B_CPR, b_c = tid * C::B_CPT % C::B_CPR;
    constexpr int B_ROWS = (C::B_CPT + C::B_CPR - 1) / C::B_CPR; /* rows per thread (1 or 2) */
    const bool a_act = tid * C::A_CPT < BM * 8, b_act = tid * C::B_CPT < BN * C::B_CPR; /* loading threads */
    const bool a_live = a_act && (grouped ? p.m_indices[m0 + a_r] >= 0 : m0 + a_r < p.M); /* else zero-filled */
    unsigned b_live = 0;
#pragma unroll
    for (int q = 0; q < B_ROWS; q++) b_live |= (n0 + b_r + q < p.N ? 1u : 0u) << q;
    const uint8_t *a_src = p.A + (m0 + a_r) * p.A_stride + a_c * 16;
    const uint8_t *b_src = p.B + e * p.B_group + (n0 + b_r) * p.B_row; /* chunk column added per copy */
    const int32_t *sfbexp = p.sfb + e * p.sfb_group;

    auto load_stage = [&](int stage, int kt) {
      uint8_t *sA = smem + stage * C::STAGE;
      uint8_t *sB = sA + C::SA;
      uint32_t *sSa = reinterpret_cast<uint32_t *>(sB + C::SB);
      uint32_t *sSb = sSa + BM;
      const uint8_t *as = a_live ? a_src + (int64_t)kt * 128 : p.A;
      if (a_act) {
#pragma unroll
        for (int q = 0; q < C::A_CPT; q++)
          dsk_ptx::cp_async16(sA + swz128(a_r, a_c + q), as + (a_live ? q * 16 : 0), a_live);
      }
      const uint8_t *bs = b_src + (int64_t)kt * C::BROW;
      if (b_act) {
#pragma unroll
        for (int q = 0; q < C::B_CPT; q++) {
          /* one row: b_c + q < B_CPR; whole rows: b_c == 0 and q = rq * B_CPR + cq */
          const int rq = q / C::B_CPR, cq = (b_c + q) % C::B_CPR;
          const bool v = (b_live >> rq) & 1u;
          const uint8_t *src = v ? bs + rq * p.B_row + cq * 16 : p.B;
          dsk_ptx::cp_async16(sB + (MX ? swz64(b_r + rq, cq) : swz128(b_r + rq, cq)), src, v);
        }
      }
      const int64_t pa = kt >> 2;
      for (int r = tid; r < BM; r += C::THREADS) {
        const bool v = m0 + r < p.M;
        dsk_ptx::cp_async4(sSa + r, v ? p.sfa + pa * p.sfa_T4 + m0 + r : p.sfa, v);
      }
      const int64_t pb = MX ? kt : kt >> 2;
      for (int r = tid; r < BN; r += C::THREADS) {
        const bool v = n0 + r < p.N;
        dsk_ptx::cp_async4(sSb + r, v ? sfbexp + pb * p.sfb_T4 + n0 + r : p.sfb, v);
      }
    };

    float acc[C::MT][C::NT8][4];
#pragma unroll
    for (int i = 0; i < C::MT; i++)
#pragma unroll
      for (int j = 0; j < C::NT8; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

    /* K tiles kt0 + kt, kt = 0 .. KT - 1 (split-K slice z % ksplit) */
    const int KT = p.KT;
    const int kt0 = (int)(blockIdx.z & (unsigned)(p.ksplit - 1)) * KT; /* ksplit is a power of two */
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; s++) {
      if (s < KT) load_stage(s, kt0 + s);
      dsk_ptx::cp_async_commit();
    }

    for (int kt = 0; kt < KT; kt++) {
      dsk_ptx::cp_async_wait<C::STAGES - 2>();
      __syncthreads(); /* stage kt visible to all; stage kt-1 free */
      {
        const int nk = kt + C::STAGES - 1;
        if (nk < KT) load_stage(nk % C::STAGES, kt0 + nk);
        dsk_ptx::cp_async_commit();
      }
      const uint8_t *sA = smem + (kt % C::STAGES) * C::STAGE;
      const uint8_t *sB = sA + C::SA;
      const uint32_t *sSa = reinterpret_cast<const uint32_t *>(sB + C::SB);
      const uint32_t *sSb = sSa + BM;
      const int sh = 8 * ((kt0 + kt) & 3); /* byte of this K tile in the 1x128 / 128x128 scale words */

      /* activation scales of the thread's rows for this K tile (x 2^6 for MXFP4) */
      float sa[C::MT][2]; /* live slices only (the others are never read) */
#pragma unroll
      for (int i = 0; i < C::MT; i++) {
        sa[i][0] = sa[i][1] = 0.f;
        if (!((live16 >> i) & 1u)) continue; /* warp-uniform */
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const float v = ue8m0_exact((sSa[wm * C::WMT + 16 * i + g + 8 * h] >> sh) & 0xFFu);
          sa[i][h] = MX ? v * kMxFold<F16> : v; /* MX: undo the power of two of the e2m1 encoding */
        }
      }

      /* e4m3: a[0] = {a0..a3}; f16: a[h] = operands of the h-th k16 MMA */
      using AFrag = uint32_t[F16 ? 2 : 1][4];
      /* e4m3: b[0] = {b0, b1}; f16: b[h] = b0, b1 of the h-th k16 MMA */
      using BFrag = uint32_t[2][2];
      /* A fragments of m16 slice i, K values 32s + 8t .. 32s + 8t + 7 (order above) */
      auto load_a = [&](int i, int s, AFrag &a) {
#pragma unroll
        for (int h = 0; h < 2; h++) { /* row g, row g + 8 */
          const int r = wm * C::WMT + 16 * i + g + 8 * h;
          const uint2 v = *reinterpret_cast<const uint2 *>(sA + swz128(r, 2 * s + (t >> 1)) + 8 * (t & 1));
          if constexpr (F16) {
            a_frag_f16<MX>(v, a[0][h], a[0][2 + h], a[F16 ? 1 : 0][h], a[F16 ? 1 : 0][2 + h]);
          } else {
            a[0][h] = __byte_perm(v.x, v.y, 0x6420);
            a[0][2 + h] = __byte_perm(v.x, v.y, 0x7531);
          }
        }
      };
      /* MX: w[q] = bytes 4t..4t+3 of block s of row (n8 tile jq+q) * 8 + g */
      auto load_w = [&](int jq, int s, uint32_t (&w)[4]) {
        if (MX) {
          const int rr = wn * C::WNT + 8 * (jq + ((lane >> 3) & (C::JG - 1))) + (lane & 7);
          const uint32_t addr = dsk_ptx::smem_u32(sB + swz64(rr, s));
          if (C::JG == 4) ldsm_x4(w, addr);
          else ldsm_x2(w, addr);
        }
      };
      /* B fragments of n8 tile j (MX: from its word wq) and the scales of its columns nl+2t, nl+2t+1 */
      auto load_b = [&](int j, int s, uint32_t wq, BFrag &b, float &sb0, float &sb1) {
        const int nl = wn * C::WNT + 8 * j;
        if constexpr (F16) {
          if (MX) {
            b_frag_mx_f16(wq, b[0][0], b[0][1], b[1][0], b[1][1]);
          } else {
            const uint2 v = *reinterpret_cast<const uint2 *>(sB + swz128(nl + g, 2 * s + (t >> 1)) + 8 * (t & 1));
            a_frag_f16<false>(v, b[0][0], b[0][1], b[1][0], b[1][1]);
          }
        } else {
          if (MX) {
            b[0][0] = e2m1_lo_to_e4m3(wq);
            b[0][1] = e2m1_hi_to_e4m3(wq);
          } else {
            const uint2 v = *reinterpret_cast<const uint2 *>(sB + swz128(nl + g, 2 * s + (t >> 1)) + 8 * (t & 1));
            b[0][0] = __byte_perm(v.x, v.y, 0x6420);
            b[0][1] = __byte_perm(v.x, v.y, 0x7531);
          }
        }
        const uint2 sbw = lds64_nocse(sSb + nl + 2 * t);
        sb0 = MX ? ue8m0_fast((sbw.x >> (8 * s)) & 0xFFu) : ue8m0_exact((sbw.x >> sh) & 0xFFu);
        sb1 = MX ? ue8m0_fast((sbw.y >> (8 * s)) & 0xFFu) : ue8m0_exact((sbw.y >> sh) & 0xFFu);
      };
      /* one k32 step of tile (i, j), folded into the accumulator with both scales */
      auto mma_fold = [&](int i, int j, const AFrag &a, const BFrag &b, float sb0, float sb1) {
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        if constexpr (F16) {
          dsk_ptx::mma_f16(d, a[0], b[0][0], b[0][1]);
          dsk_ptx::mma_f16(d, a[F16 ? 1 : 0], b[1][0], b[1][1]);
        } else {
          mma_e4m3(d, a[0], b[0][0], b[0][1]);
        }
        acc[i][j][0] = fmaf(d[0], sa[i][0] * sb0, acc[i][j][0]);
        acc[i][j][1] = fmaf(d[1], sa[i][0] * sb1, acc[i][j][1]);
        acc[i][j][2] = fmaf(d[2], sa[i][1] * sb0, acc[i][j][2]);
        acc[i][j][3] = fmaf(d[3], sa[i][1] * sb1, acc[i][j][3]);
      };

#pragma unroll
      for (int s = 0; s < 4; s++) { /* k32 step = MX block s of the tile */
        if constexpr (C::SK) {
          /* one warp row: the B fragments of the warp's n8 tiles once, then
           * each live m16 slice (A loaded, converted and used in turn) */
          BFrag b[C::NT8];
          float sb[C::NT8][2];
#pragma unroll
          for (int jq = 0; jq < C::NT8; jq += C::JG) {
            uint32_t w[4];
            load_w(jq, s, w);
#pragma unroll
            for (int q = 0; q < C::JG; q++) load_b(jq + q, s, w[q], b[jq + q], sb[jq + q][0], sb[jq + q][1]);
          }
#pragma unroll
          for (int i = 0; i < C::MT; i++) {
            if (!((live16 >> i) & 1u)) continue; /* warp-uniform */
            AFrag a;
            load_a(i, s, a);
#pragma unroll
            for (int j = 0; j < C::NT8; j++) mma_fold(i, j, a, b[j], sb[j][0], sb[j][1]);
          }
        } else {
          AFrag a[C::MT];
#pragma unroll
          for (int i = 0; i < C::MT; i++)
            if ((live16 >> i) & 1u) load_a(i, s, a[i]); /* warp-uniform; a[i] unused otherwise */
#pragma unroll
          for (int jq = 0; jq < C::NT8; jq += C::JG) {
            uint32_t w[4];
            load_w(jq, s, w);
#pragma unroll
            for (int q = 0; q < C::JG; q++) {
              BFrag b;
              float sb0, sb1;
              load_b(jq + q, s, w[q], b, sb0, sb1);
#pragma unroll
              for (int i = 0; i < C::MT; i++)
                if ((live16 >> i) & 1u) mma_fold(i, jq + q, a[i], b, sb0, sb1);
            }
          }
        }
      }
    }
    dsk_ptx::cp_async_wait<0>(); /* only empty groups remain */

    /* epilogue: live rows, columns < N */
#pragma unroll
    for (int i = 0; i < C::MT; i++) {
      if (!((live16 >> i) & 1u)) continue;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int64_t r = m0 + wm * C::WMT + 16 * i + g + 8 * h;
        if (grouped ? p.m_indices[r] < 0 : r >= p.M) continue; /* padding row: not written */
        uint16_t *drow = p.D + r * p.D_stride;
        float *prow = p.part ? p.part + ((int64_t)(blockIdx.z & (unsigned)(p.ksplit - 1)) * p.M + r) * p.N : nullptr;
#pragma unroll
        for (int j = 0; j < C::NT8; j++) {
          const int64_t c = n0 + wn * C::WNT + 8 * j + 2 * t;
          if (c >= p.N) continue; /* N is even, so c + 1 < N too */
          if (prow) { /* split-K: fp32 partial, summed by splitk_reduce_kernel */
            *reinterpret_cast<float2 *>(prow + c) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            continue;
          }
          store_bf16x2(drow, c, acc[i][j][2 * h], acc[i][j][2 * h + 1], p.d_pair);
        }
      }
    }
  }
}

/* The kernel of one configuration; a device pass builds only the variants
 * of its own MMA path (the host never launches the others). */
template <int BM, int BN, bool MX, bool F16>
__global__ void __launch_bounds__(Cfg<BM, BN, MX, F16>::THREADS, Cfg<BM, BN, MX, F16>::MINB)
    moe_gemm_kernel(const GemmArgs p) {
#ifdef __CUDA_ARCH__
  dsk_ptx::pdl_wait(); /* before any global access (launched with PDL) */
  if constexpr (F16 == (DSK_MOE_F16 != 0)) {
    moe_gemm_body<BM, BN, MX, F16>(p);
  } else { /* never launched; the references keep the other path's helpers "used" */
    using C = Cfg<BM, BN, MX, F16>;
    static_assert(C::MT > 0 && C::NT8 > 0 && C::JG > 0, "configuration");
    (void)&mma_e4m3;
    (void)&e2m1_lo_to_e4m3;
    (void)&e2m1_hi_to_e4m3;
    (void)&b_frag_mx_f16;
    __trap();
  }
#endif
}

/* ------------------------------------------------------------ split-K reduce
 * D[r, c] = bf16(sum over s ascending of part[s, r, c]) for the rows the
 * tiled kernel writes (grouped: rows of a live block whose own index is
 * >= 0; dense: r < M); a thread per 4 columns. Launched with PDL after the
 * tiled kernel: griddepcontrol.wait before any read. */
constexpr int kReduceThreads = 128;
__global__ void __launch_bounds__(kReduceThreads) splitk_reduce_kernel(const GemmArgs p) {
  dsk_ptx::pdl_wait();
  const int64_t c = ((int64_t)blockIdx.x * kReduceThreads + threadIdx.x) * 4;
  if (c >= p.N) return;
  const int64_t slice = p.M * p.N;
  for (int64_t r = blockIdx.y; r < p.M; r += gridDim.y) {
    if (p.m_indices) {
      const int32_t e = p.m_indices[(r / p.bm) * p.bm];
      if (e < 0 || e >= p.E_local || p.m_indices[r] < 0) continue;
    }
    const float *src = p.part + r * p.N + c;
    float4 v[4];
#pragma unroll
    for (int s = 0; s < 4; s++)
      if (s < p.ksplit) v[s] = *reinterpret_cast<const float4 *>(src + s * slice);
    float a[4] = {v[0].x, v[0].y, v[0].z, v[0].w};
#pragma unroll
    for (int s = 1; s < 4; s++) {
      if (s >= p.ksplit) break;
      a[0] += v[s].x;
      a[1] += v[s].y;
      a[2] += v[s].z;
      a[3] += v[s].w;
    }
    uint16_t *drow = p.D + r * p.D_stride + c;
    store_bf16x2(drow, 0, a[0], a[1], p.d_pair);
    store_bf16x2(drow, 2, a[2], a[3], p.d_pair);
  }
}

/* ------------------------------------------------------------ simple kernel
 * For pointers or strides that cp.async 16 cannot take: one thread per output
 * element, the same arithmetic as the tiled kernel (per-32 or per-128 partial
 * sums in fp32, folded with the two scales). */
__device__ __forceinline__ float e4m3_to_f32(uint32_t b) {
  const uint32_t e = (b >> 3) & 15u, m = b & 7u;
  float v;
  if (e == 15u && m == 7u) v = __uint_as_float(0x7FC00000u);
  else if (e == 0u) v = (float)m * 0.001953125f; /* m/8 * 2^-6 */
  else v = __uint_as_float(((e + 120u) << 23) | (m << 20));
  return (b & 0x80u) ? -v : v;
}
/* e2m1 code -> value, through the e4m3 byte of value * 2^-6 (as the tiled kernel) */
__device__ __forceinline__ float e2m1_to_f32(uint32_t c) { return e4m3_to_f32(e2m1_lo_to_e4m3(c & 15u)) * 64.f; }

__global__ void __launch_bounds__(128) moe_gemm_simple_kernel(const GemmArgs p, int mx) {
  dsk_ptx::pdl_wait(); /* before any global access (launched with PDL) */
  const int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const bool grouped = p.m_indices != nullptr;
  for (int64_t r = blockIdx.y; r < p.M; r += gridDim.y) {
    int64_t e = 0;
    if (grouped) {
      e = p.m_indices[(r / p.bm) * p.bm];
      if (e < 0 || e >= p.E_local) {
        if (e != -1 && r % p.bm == 0 && n == 0 && p.counters) atomicAdd(p.counters, 1ull);
        continue;
      }
      if (p.m_indices[r] < 0) continue;
    }
    if (n >= p.N) continue;
    const uint8_t *arow = p.A + r * p.A_stride;
    const uint8_t *brow = p.B + e * p.B_group + n * p.B_row;
    const int32_t *sfbexp = p.sfb + e * p.sfb_group;
    float acc = 0.f;
    for (int kt = 0; kt < p.KT; kt++) {
      const uint32_t aw = (uint32_t)p.sfa[(int64_t)(kt >> 2) * p.sfa_T4 + r];
      const float sa = ue8m0_exact((aw >> (8 * (kt & 3))) & 0xFFu);
      if (mx) {
        const uint32_t bw = (uint32_t)sfbexp[(int64_t)kt * p.sfb_T4 + n];
        for (int s = 0; s < 4; s++) {
          float part = 0.f;
          for (int k = 0; k < 32; k++) {
            const int64_t kk = (int64_t)kt * 128 + 32 * s + k;
            part += e4m3_to_f32(arow[kk]) * e2m1_to_f32((uint32_t)(brow[kk >> 1] >> (4 * (kk & 1))) & 15u);
          }
          acc = fmaf(part, sa * ue8m0_fast((bw >> (8 * s)) & 0xFFu), acc);
        }
      } else {
        const uint32_t bw = (uint32_t)sfbexp[(int64_t)(kt >> 2) * p.sfb_T4 + n];
        float part = 0.f;
        for (int k = 0; k < 128; k++) {
          const int64_t kk = (int64_t)kt * 128 + k;
          part += e4m3_to_f32(arow[kk]) * e4m3_to_f32(brow[kk]);
        }
        acc = fmaf(part, sa * ue8m0_exact((bw >> (8 * (kt & 3))) & 0xFFu), acc);
      }
    }
    p.D[r * p.D_stride + n] = (uint16_t)f32_to_bf16(acc);
  }
}

/* ------------------------------------------------------------ host side */
/* One launch of a tile kernel (the tiled or the prefill one) over the grid
 * of GemmArgs: x = the BLOCK_N column tiles, y and z = the m-blocks (z high
 * part times ksplit slices); `smem` dynamic bytes, checked against the
 * device's (and SM120's) per-block limit first. */
dsk_status launch_tiles(const dsk_ctx *ctx, void (*kernel)(const GemmArgs), int smem, int threads, int bn,
                        const GemmArgs &a, cudaStream_t s, const char *what) {
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  if (smem > st->smem_optin)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "%s: BLOCK_M %d BLOCK_N %d needs %d B of shared memory, device allows %lld",
                     what, a.bm, bn, smem, (long long)st->smem_optin);
  DSK_CUDA_TRY(what, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t gy = a.mblocks < 65535 ? a.mblocks : 65535, gz = (a.mblocks + 65534) / 65535;
  const dim3 grid(dsk__ceil_div_u(a.N, bn), (unsigned)gy, (unsigned)(gz * a.ksplit));
  DSK_CUDA_TRY(what, moe_launch(kernel, grid, dim3(threads), (size_t)smem, s, a));
  return DSK_STATUS_OK;
}

template <int BM, int BN, bool MX, bool F16>
dsk_status launch_tiled(const dsk_ctx *ctx, const GemmArgs &a, cudaStream_t s, const char *what) {
  using C = Cfg<BM, BN, MX, F16>;
  GemmArgs t = a;
  t.KT = a.KT / a.ksplit;
  const dsk_status st = launch_tiles(ctx, moe_gemm_kernel<BM, BN, MX, F16>, C::SMEM, C::THREADS, BN, t, s, what);
  if (st != DSK_STATUS_OK) return st;
  if (a.ksplit > 1) {
    const dim3 rgrid(dsk__ceil_div_u(a.N / 4, kReduceThreads), (unsigned)(a.M < 65535 ? a.M : 65535));
    DSK_CUDA_TRY(what, dsk__launch_pdl(splitk_reduce_kernel, rgrid, dim3(kReduceThreads), 0, s, t));
  }
  return DSK_STATUS_OK;
}

#include "moe_gemm_skinny.cuh"
#include "moe_gemm_prefill.cuh"

/* The prefill kernel (moe_gemm_prefill.cuh) at BLOCK_M BM. */
template <int BM, bool MX>
dsk_status launch_prefill(const dsk_ctx *ctx, const GemmArgs &a, cudaStream_t s, const char *what) {
  using C = Pf<BM, MX>;
  /* interleaved warp rows for grouped calls at BLOCK_M 128 (at 64 one warp row: the same slices) */
  if constexpr (BM == 128)
    if (DSK_MOE_PF_INTERLEAVE && a.m_indices != nullptr)
      return launch_tiles(ctx, moe_gemm_prefill_kernel<BM, MX, true>, C::SMEM, C::THREADS, C::BN, a, s, what);
  return launch_tiles(ctx, moe_gemm_prefill_kernel<BM, MX, false>, C::SMEM, C::THREADS, C::BN, a, s, what);
}
dsk_status launch_prefill(const dsk_ctx *ctx, const GemmArgs &a, cudaStream_t s, bool mx, int bm, const char *what) {
  if (bm == 64) return mx ? launch_prefill<64, true>(ctx, a, s, what) : launch_prefill<64, false>(ctx, a, s, what);
  return mx ? launch_prefill<128, true>(ctx, a, s, what) : launch_prefill<128, false>(ctx, a, s, what);
}

/* DSK_MOE_SK_TPC (compile-time): column tiles per CTA of the skinny kernel
 * without split-K, forced (an A/B switch: 1 = one tile per CTA, the v10
 * kernel); 0 (default) = sk_tpc's choice. */
#ifndef DSK_MOE_SK_TPC
#define DSK_MOE_SK_TPC 0
#endif

template <int NW, int ST, bool MX, int TPS, int KS>
dsk_status launch_skinny_ks(const GemmArgs &a0, cudaStream_t s, const char *what) {
  using S = Sk<NW, ST, MX, TPS>;
  GemmArgs a = a0;
  const int64_t smem = S::smem((int64_t)a.KT * 128, a.grp);
  DSK_CUDA_TRY(what, cudaFuncSetAttribute(moe_gemm_skinny_kernel<NW, ST, MX, KS, TPS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int64_t gy = a.mblocks < 65535 ? a.mblocks : 65535, gz = (a.mblocks + 65534) / 65535;
  const int64_t tiles = (a.N + 16 * NW / KS - 1) / (16 * NW / KS);
  if (KS > 1 || a.tpc < 1) a.tpc = 1;
  if (a.tpc > tiles) a.tpc = (int)tiles;
  const dim3 grid((unsigned)((tiles + a.tpc - 1) / a.tpc), (unsigned)gy, (unsigned)gz);
  DSK_CUDA_TRY(what, moe_launch(moe_gemm_skinny_kernel<NW, ST, MX, KS, TPS>, grid,
                                     dim3(S::THREADS), (size_t)smem, s, a));
  return DSK_STATUS_OK;
}

template <int NW, int ST, bool MX, int TPS>
dsk_status launch_skinny_st(const GemmArgs &a, cudaStream_t s, const char *what) {
  if (a.ksplit == 4) return launch_skinny_ks<NW, ST, MX, TPS, 4>(a, s, what);
  if (a.ksplit == 2) return launch_skinny_ks<NW, ST, MX, TPS, 2>(a, s, what);
  return launch_skinny_ks<NW, ST, MX, TPS, 1>(a, s, what);
}

/* The skinny kernel's configuration for a call: ring depth (0: the call
 * stays on the tiled kernel), K tiles per stage, and CTAs per SM. */
struct SkPick {
  int ring, tps, ctas;
};

/* CTAs of NW warps per SM for a ring of ST stages: the fewer of what
 * shared memory leaves (1 KB reserved per CTA) and what the kernel's
 * register bound allows (its __launch_bounds__, kSkWarpsPerSm); 0 = it
 * does not fit the device's opt-in limit or SM120's. */
template <int NW, int ST, bool MX, int TPS>
int skinny_ctas(const dsk_cuda_state *st, int64_t K, int grp) {
  const int64_t lim = st->smem_optin < kSmemBudget ? st->smem_optin : kSmemBudget;
  const int64_t b = Sk<NW, ST, MX, TPS>::smem(K, grp);
  if (b > lim) return 0;
  const int by_smem = (int)(st->smem_per_sm / (b + 1024));
  const int by_regs = kSkWarpsPerSm / NW;
  return by_smem < by_regs ? by_smem : by_regs;
}

/* The ring with the most CTAs per SM, the deepest among equals (0: none
 * fits), and that CTA count. The deepest ring that fits used to be taken
 * whatever it cost: at K 4096 (DSv4-Flash FC1) 8 warps with 4 stages got 2
 * CTAs per SM on the H200 where 3 stages get 3 (docs/benchmarks.md, MoE
 * v7). */
template <int NW, bool MX, int TPS>
SkPick skinny_fit(const dsk_ctx *ctx, int64_t K, int grp, int *ctas) {
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  const int c4 = skinny_ctas<NW, 4, MX, TPS>(st, K, grp), c3 = skinny_ctas<NW, 3, MX, TPS>(st, K, grp),
            c2 = skinny_ctas<NW, 2, MX, TPS>(st, K, grp);
  int ring = 0, best = 0;
  if (c4 > best) ring = 4, best = c4;
  if (c3 > best) ring = 3, best = c3;
  if (c2 > best) ring = 2, best = c2;
  *ctas = best;
  return SkPick{ring, TPS, best};
}

/* MXFP4 takes two K tiles per stage where that fits and keeps as many CTAs
 * per SM as one tile per stage (measured on the H200: DSv4-Pro FC1, K 7168,
 * 0.92x; DSv4-Flash FC2, K 2048, where it would halve the CTAs per SM,
 * 1.15x slower; docs/benchmarks.md, MoE v5). */
template <int NW, bool MX>
SkPick skinny_pick_nw(const dsk_ctx *ctx, int64_t K, int grp) {
  int c1 = 0, c2 = 0;
  const SkPick one = skinny_fit<NW, MX, 1>(ctx, K, grp, &c1);
  if constexpr (MX) {
    const SkPick two = skinny_fit<NW, MX, 2>(ctx, K, grp, &c2);
    if (two.ring && c2 >= c1) return two;
  }
  return one;
}

template <int NW, bool MX>
dsk_status launch_skinny_nw(const GemmArgs &a, cudaStream_t s, SkPick pk, const char *what) {
  if constexpr (MX) {
    if (pk.tps == 2) {
      if (pk.ring == 4) return launch_skinny_st<NW, 4, MX, 2>(a, s, what);
      if (pk.ring == 3) return launch_skinny_st<NW, 3, MX, 2>(a, s, what);
      return launch_skinny_st<NW, 2, MX, 2>(a, s, what);
    }
  }
  if (pk.ring == 4) return launch_skinny_st<NW, 4, MX, 1>(a, s, what);
  if (pk.ring == 3) return launch_skinny_st<NW, 3, MX, 1>(a, s, what);
  return launch_skinny_st<NW, 2, MX, 1>(a, s, what);
}

dsk_status launch_skinny(const GemmArgs &a, cudaStream_t s, bool mx, int bn, SkPick pk, const char *what) {
  if (mx) return bn == 64 ? launch_skinny_nw<4, true>(a, s, pk, what) : launch_skinny_nw<8, true>(a, s, pk, what);
  return bn == 64 ? launch_skinny_nw<4, false>(a, s, pk, what) : launch_skinny_nw<8, false>(a, s, pk, what);
}

/* Dense calls run the skinny kernel up to this many rows, one group of 8:
 * it streams the weights once per group, and at M 16 (two passes) the
 * tiled kernel was faster on the H200 (docs/benchmarks.md, MoE v5). */
constexpr int64_t kSkDenseMaxRows = 8;

/* The skinny kernel serves the call when it can: grouped calls at BLOCK_M
 * 64 or dense calls of at most kSkDenseMaxRows rows (any BLOCK_M), MXFP4
 * or FP8 weights, BLOCK_N 64 or 128 (4 or 8 warps), split-K 1, 2 or 4
 * (warp slices: no partials in the workspace), and a ring of at least two
 * stages next to 8 staged A rows (which grow with K) within the device's and
 * SM120's shared memory. Whether it serves a call thus does not depend on
 * grp (the workspace query has no grp); its ring and K tiles per stage are
 * then picked for the call's grp rows per pass (fewer staged rows leave
 * room for a deeper ring or two tiles per stage). Returns its
 * configuration, ring 0 to leave the call to the tiled kernel. */
template <int NW, bool MX>
SkPick skinny_pick_grp(const dsk_ctx *ctx, int64_t K, int grp) {
  const SkPick at8 = skinny_pick_nw<NW, MX>(ctx, K, 8);
  if (!at8.ring || grp >= 8) return at8;
  return skinny_pick_nw<NW, MX>(ctx, K, grp);
}
SkPick skinny_pick(const dsk_ctx *ctx, bool grouped, bool mx, int bm, int bn, int split, int64_t rows, int64_t K,
                   int grp) {
  const SkPick none{0, 1, 0};
  if (!DSK_MOE_SKINNY || (bn != 64 && bn != 128)) return none;
  static_assert(kSkDenseMaxRows <= 64, "the kernel lists at most 64 live rows per block");
  if (grouped ? bm != 64 : rows > kSkDenseMaxRows) return none;
  if (split != 1 && split != 2 && split != 4) return none;
  if (mx) return bn == 64 ? skinny_pick_grp<4, true>(ctx, K, grp) : skinny_pick_grp<8, true>(ctx, K, grp);
  return bn == 64 ? skinny_pick_grp<4, false>(ctx, K, grp) : skinny_pick_grp<8, false>(ctx, K, grp);
}
SkPick skinny_pick(const dsk_ctx *ctx, const GemmArgs &a, bool mx, int bm, int bn) {
  return skinny_pick(ctx, a.m_indices != nullptr, mx, bm, bn, a.ksplit, a.M, (int64_t)a.KT * 128, a.grp);
}

/* Column tiles per CTA of a grouped skinny call (MoE v11): one CTA streams
 * the weights of 2 consecutive column tiles of its expert through one ring
 * (A staged once, the per-CTA start paid once for both) where the call has
 * enough CTAs that halving them keeps at least 2 waves: MXFP4 weights,
 * split 1, and an upper bound of the live m-blocks (at most expected_m / 64
 * + min(expected_m, E_local); all of them without the hint) times the
 * column tiles at least 4 waves of the resident CTAs. Measured on the H200
 * (docs/benchmarks.md, MoE v11): DSv4-Flash T 16 FC1 0.98x, FC2 0.96x,
 * DSv4-Pro T 16 FC2 0.96x, FC1 1.00x; with fewer CTAs than resident slots
 * (DSv4-Pro, GLM-5.1 at T 1) 1.2-1.4x slower, and GLM-5.1's FP8 stream
 * (95 % of copy bandwidth) 1.02-1.05x slower at T 16: those keep 1. */
int sk_tpc(const dsk_ctx *ctx, const dsk_moe_gemm_desc *d, bool mx, int bn, const GemmArgs &a, SkPick pk) {
  if (DSK_MOE_SK_TPC > 0) return DSK_MOE_SK_TPC;
  if (!mx || a.ksplit != 1 || pk.ctas < 1) return 1;
  int64_t live = a.mblocks;
  if (d->expected_m > 0) {
    const int64_t ub = d->expected_m / 64 + (d->expected_m < d->E_local ? d->expected_m : d->E_local);
    if (ub < live) live = ub;
  }
  const int64_t tiles = (a.N + bn - 1) / bn;
  const int64_t slots = (int64_t)pk.ctas * (ctx->info.sm_count > 0 ? ctx->info.sm_count : 1);
  return live * tiles >= 4 * slots ? 2 : 1;
}

template <bool MX, bool F16>
dsk_status launch_bn(const dsk_ctx *ctx, const GemmArgs &a, cudaStream_t s, int bm, int bn, const char *what) {
  /* BLOCK_M 16 / 32 exist for the dense GEMM only (FP8) */
#define DSK_MOE_CASE(BM_, BN_) \
  if (bm == BM_ && bn == BN_) return launch_tiled<BM_, BN_, MX, F16>(ctx, a, s, what);
  DSK_MOE_CASE(64, 64)
  DSK_MOE_CASE(64, 128)
  DSK_MOE_CASE(64, 256)
  DSK_MOE_CASE(128, 64)
  DSK_MOE_CASE(128, 128)
  DSK_MOE_CASE(128, 256)
  if constexpr (!MX) {
    DSK_MOE_CASE(16, 64)
    DSK_MOE_CASE(16, 128)
    DSK_MOE_CASE(16, 256)
    DSK_MOE_CASE(32, 64)
    DSK_MOE_CASE(32, 128)
    DSK_MOE_CASE(32, 256)
  }
#undef DSK_MOE_CASE
  return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: tactic BLOCK_M %d BLOCK_N %d has no kernel", what, bm, bn);
}

dsk_status launch_simple(const GemmArgs &a, cudaStream_t s, int mx, const char *what) {
  const int64_t gy = a.M < 65535 ? a.M : 65535;
  const dim3 grid(dsk__ceil_div_u(a.N, 128), (unsigned)gy);
  DSK_CUDA_TRY(what, moe_launch(moe_gemm_simple_kernel, grid, dim3(128), 0, s, a, mx));
  return DSK_STATUS_OK;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* split-K of tactic v[2]; src/ops validated it (1, 2 or 4 dividing K / 128)
 * and the workspace (dsk__moe_gemm_ws_bytes). */
void split_setup(GemmArgs *a, const dsk_tactic *t, void *ws) {
  a->ksplit = t->v[2] > 1 ? t->v[2] : 1;
  a->part = a->ksplit > 1 ? (float *)ws : nullptr;
}

/* The MMA path of the context's device (see DSK_MOE_MMA): f16 below
 * compute capability 10 (read from the device when the context was made). */
bool f16_path(const dsk_ctx *ctx) {
  if (DSK_MOE_MMA == 1 || DSK_MOE_MMA == 2) return DSK_MOE_MMA == 2;
  return ctx->info.cc_major < 10;
}

/* Grouped calls at BLOCK_M 64 go to the prefill kernel instead of the
 * decode-shaped one from this many expected rows per local expert on
 * (expected_m / E_local; DSv4-Pro's alignment is 64 at prefill sizes:
 * 64 rows per expert at T 4096). Below it the skinny kernel streams the
 * weights of blocks with few live rows; 32 is half a block (between 2,
 * T 128, and 64, T 4096, unmeasured). */
constexpr int64_t kPfMinRowsPerExpert = 32;

/* Whether the prefill kernel serves a call (DSK_MOE_PREFILL; the f16 path;
 * BLOCK_N 128, split 1, 16-byte aligned operands): BLOCK_M 128, and BLOCK_M
 * 64 for grouped calls of at least kPfMinRowsPerExpert expected rows per
 * expert and dense calls the skinny kernel does not take (more than
 * kSkDenseMaxRows rows). Deterministic in the descriptor and tactic. */
bool prefill_serves(const dsk_ctx *ctx, const GemmArgs &a, int bm, int bn, int64_t expected_m) {
  if (!DSK_MOE_PREFILL || bn != 128 || a.ksplit != 1 || a.N % 128 != 0 || !f16_path(ctx)) return false;
  if (bm == 64)
    return a.m_indices ? expected_m >= kPfMinRowsPerExpert * a.E_local : a.M > kSkDenseMaxRows;
  return bm == 128;
}

template <bool MX>
dsk_status launch_path(const dsk_ctx *ctx, const GemmArgs &a, cudaStream_t s, int bm, int bn, const char *what) {
  return f16_path(ctx) ? launch_bn<MX, true>(ctx, a, s, bm, bn, what) : launch_bn<MX, false>(ctx, a, s, bm, bn, what);
}

}  // namespace

extern "C" dsk_status dsk__cuda_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *d, const dsk_tactic *t) {
  const char *what = "moe_gemm";
  if (d->M_sum == 0) return DSK_STATUS_OK;
  const int bm = t->v[0], bn = t->v[1];
  if ((bm != 64 && bm != 128) || (bn != 64 && bn != 128 && bn != 256) || d->A_used % bm != 0 || d->M_sum % bm != 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: tactic BLOCK_M %d BLOCK_N %d invalid for A_used %lld, M_sum %lld",
                     what, bm, bn, (long long)d->A_used, (long long)d->M_sum);
  DSK_CUDA_TRY(what, cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, d->stream);
  const bool mx = d->b_fmt == DSK_MOE_W_MXFP4;
  GemmArgs a = grouped_args(d, bm);
  split_setup(&a, t, d->workspace);
  if (!aligned16(d->A) || (d->A_stride & 15) != 0 || !aligned16(d->B)) return launch_simple(a, s, mx, what);
  if (prefill_serves(ctx, a, bm, bn, d->expected_m)) return launch_prefill(ctx, a, s, mx, bm, what);
  const SkPick pk = skinny_pick(ctx, a, mx, bm, bn);
  if (pk.ring) {
    a.tpc = sk_tpc(ctx, d, mx, bn, a, pk);
    return launch_skinny(a, s, mx, bn, pk, what);
  }
  return mx ? launch_path<true>(ctx, a, s, bm, bn, what) : launch_path<false>(ctx, a, s, bm, bn, what);
}

extern "C" int64_t dsk__cuda_moe_gemm_workspace(const dsk_ctx *ctx, int grouped, int fmt, int64_t rows, int64_t N,
                                                int64_t K, const dsk_tactic *t) {
  const int split = t->v[2];
  if (split <= 1) return 0;
  /* the skinny kernel splits K over warps of one CTA: no partials */
  if (skinny_pick(ctx, grouped != 0, fmt == DSK_MOE_W_MXFP4, t->v[0], t->v[1], split, rows, K, 8).ring) return 0;
  return (int64_t)split * rows * N * 4;
}

extern "C" dsk_status dsk__cuda_dense_fp8_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *d, const dsk_tactic *t) {
  const char *what = "dense_fp8_gemm";
  if (d->M == 0) return DSK_STATUS_OK;
  const int bm = t->v[0], bn = t->v[1];
  if ((bm != 16 && bm != 32 && bm != 64 && bm != 128) || (bn != 64 && bn != 128 && bn != 256))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: tactic BLOCK_M %d BLOCK_N %d has no kernel", what, bm, bn);
  DSK_CUDA_TRY(what, cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, d->stream);
  GemmArgs a;
  a.A = d->A;
  a.A_stride = d->A_stride;
  a.sfa = d->sfa.words;
  a.sfa_T4 = (d->M + 3) / 4 * 4;
  a.m_indices = nullptr;
  a.B = d->B;
  a.B_row = d->K;
  a.B_group = 0;
  a.sfb = d->sfb.words;
  a.sfb_T4 = (d->N + 3) / 4 * 4;
  a.sfb_group = 0;
  a.M = d->M;
  a.N = d->N;
  a.KT = (int)(d->K / 128);
  a.bm = bm;
  a.E_local = 1;
  a.mblocks = (d->M + bm - 1) / bm;
  a.D = d->D;
  a.D_stride = d->D_stride;
  a.d_pair = ((uintptr_t)d->D & 3u) == 0 && (d->D_stride & 1) == 0;
  a.counters = nullptr;
  a.grp = sk_group(d->M);
  a.tpc = 1;
  split_setup(&a, t, d->workspace);
  if (!aligned16(d->A) || (d->A_stride & 15) != 0 || !aligned16(d->B)) return launch_simple(a, s, 0, what);
  if (prefill_serves(ctx, a, bm, bn, 0)) return launch_prefill(ctx, a, s, false, bm, what);
  const SkPick pk = skinny_pick(ctx, a, false, bm, bn);
  if (pk.ring) return launch_skinny(a, s, false, bn, pk, what);
  return launch_path<false>(ctx, a, s, bm, bn, what);
}
