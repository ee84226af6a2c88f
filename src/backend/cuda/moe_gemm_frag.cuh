/* moe_gemm_frag.cuh - the pieces of the MoE GEMM kernels that the tiled
 * kernel (moe_gemm.cu), the skinny one (moe_gemm_skinny.cuh) and the
 * prefill one (moe_gemm_prefill.cuh) share: the arguments, the scale
 * decoders, the f16-path operand conversions, the shared-memory swizzles
 * and the bf16 rounding. Included inside moe_gemm.cu's anonymous
 * namespace, and by tests/emu_moe_skinny.cc and tests/emu_moe_prefill.cc
 * under the CPU emulation of tests/emu/cuda_emu.h (so only functions of
 * ptx.cuh, no inline PTX). */

/* MXFP4 products: factor that undoes the scaling of the e2m1 operands
 * (e4m3 path: B = e2m1 * 2^-6; f16 path: B = e2m1 * 2^-14, A = e4m3 * 2^7) */
template <bool F16>
constexpr float kMxFold = F16 ? 128.f : 64.f;

/* UE8M0 weight decoder (spec §1.2): 2^(e-127); 0 -> 2^-127, 0xFF -> NaN. */
__device__ __forceinline__ float ue8m0_exact(uint32_t e) {
  uint32_t bits = e << 23;
  bits = e == 0u ? 0x00400000u : bits;
  bits = e == 0xFFu ? 0x7FC00000u : bits;
  return __uint_as_float(bits);
}
/* DeepGEMM's trick (spec §1.2): 0 -> 0.0, 0xFF -> +Inf. */
__device__ __forceinline__ float ue8m0_fast(uint32_t e) { return __uint_as_float(e << 23); }

/* f16 path (DSK_MOE_F16). A (and FP8 B): eight e4m3 bytes x0..x7 (K values
 * 8t..8t+7 of the step) -> four f16x2 pairs (x0,x4) (x2,x6) | (x1,x5) (x3,x7):
 * operands (a0|a2 or b0|b1) of the two k16 MMAs of the step. For the MXFP4
 * product the A pairs are multiplied by 2^7 (exact: |e4m3| <= 448, 448 * 128
 * < 65504). */
template <bool SCALE>
__device__ __forceinline__ void a_frag_f16(const uint2 v, uint32_t &m0p0, uint32_t &m0p1, uint32_t &m1p0,
                                           uint32_t &m1p1) {
  dsk_ptx::e4m3x4_to_f16x2x2(__byte_perm(v.x, v.y, 0x6240), m0p0, m0p1);
  dsk_ptx::e4m3x4_to_f16x2x2(__byte_perm(v.x, v.y, 0x7351), m1p0, m1p1);
  if (SCALE) {
    const uint32_t k128 = 0x58005800u; /* f16x2 (128, 128) */
    m0p0 = dsk_ptx::hmul2_u32(m0p0, k128);
    m0p1 = dsk_ptx::hmul2_u32(m0p1, k128);
    m1p0 = dsk_ptx::hmul2_u32(m1p0, k128);
    m1p1 = dsk_ptx::hmul2_u32(m1p1, k128);
  }
}

/* MXFP4 B, f16 path: the word of eight codes (code 2b in the low, 2b+1 in the
 * high nibble of byte b) -> f16x2 pairs (c0,c4) (c2,c6) | (c1,c5) (c3,c7), each
 * code s.ee.m as the f16 bits s00000.ee.m000000000 = value * 2^-14 (exact,
 * subnormals included). Built bytewise: zl (zh) holds the f16 high bytes
 * s000.ee.m0 of the low (high) nibbles' codes, byte b for code 2b (2b+1):
 * the ee.m bits (0x0E of a byte) from w << 1 (w >> 3) and the sign bit
 * from ws = w & 0x88888888 (<< 4 for the low nibbles); a byte permute with
 * zero low bytes then makes each pair. 11 instructions a word on sm_90
 * (before: 16, two shifts and two masks per pair); the same bits, and on
 * the H200 the same speed (docs/benchmarks.md, MoE v9). */
__device__ __forceinline__ void b_frag_mx_f16(uint32_t w, uint32_t &m0p0, uint32_t &m0p1, uint32_t &m1p0,
                                              uint32_t &m1p1) {
  const uint32_t ws = w & 0x88888888u;
  const uint32_t zl = ((w << 1) & 0x0E0E0E0Eu) | ((ws & 0x08080808u) << 4); /* codes 0, 2, 4, 6 */
  const uint32_t zh = ((w >> 3) & 0x0E0E0E0Eu) | (ws & 0x80808080u);        /* codes 1, 3, 5, 7 */
  m0p0 = __byte_perm(zl, 0u, 0x2404); /* (c0, c4): bytes 0, 2 of zl as the high bytes */
  m0p1 = __byte_perm(zl, 0u, 0x3414); /* (c2, c6) */
  m1p0 = __byte_perm(zh, 0u, 0x2404); /* (c1, c5) */
  m1p1 = __byte_perm(zh, 0u, 0x3414); /* (c3, c7) */
}

/* Shared-memory byte offset of logical 16-byte chunk `ch` of row `r`: rows
 * of 128 bytes (A, FP8 B) and of 64 bytes (MXFP4 B), swizzled so that the
 * fragment reads of the tiled and prefill kernels are free of bank
 * conflicts. */
__device__ __forceinline__ int swz128(int r, int ch) { return r * 128 + ((ch ^ ((r & 3) << 1)) << 4); }
__device__ __forceinline__ int swz64(int r, int ch) { return r * 64 + ((ch ^ ((r >> 1) & 3)) << 4); }

/* fp32 -> bf16 bits, round to nearest even; NaN -> quiet NaN. */
__device__ __forceinline__ uint32_t f32_to_bf16(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u | ((u >> 16) & 0x8000u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return u >> 16;
}

/* D[c], D[c + 1] of a row = bf16(v0), bf16(v1): one 4-byte store where D
 * and its stride allow it (GemmArgs.d_pair), else two */
__device__ __forceinline__ void store_bf16x2(uint16_t *drow, int64_t c, float v0, float v1, int pair) {
  const uint32_t lo = f32_to_bf16(v0), hi = f32_to_bf16(v1);
  if (pair) {
    *reinterpret_cast<uint32_t *>(drow + c) = lo | (hi << 16);
  } else {
    drow[c] = (uint16_t)lo;
    drow[c + 1] = (uint16_t)hi;
  }
}

/* ------------------------------------------------------------ arguments */
struct GemmArgs {
  const uint8_t *A;
  int64_t A_stride;          /* bytes */
  const int32_t *sfa;        /* packed (G 1, MN rows, K/128) */
  int64_t sfa_T4;            /* round_up(rows of sfa, 4) */
  const int32_t *m_indices;  /* NULL: dense */
  const uint8_t *B;          /* expert 0 */
  int64_t B_row;             /* bytes per B row (K/2 or K) */
  int64_t B_group;           /* bytes per expert (N * B_row) */
  const int32_t *sfb;        /* packed (G, N, sf_k) */
  int64_t sfb_T4;            /* round_up(N, 4) */
  int64_t sfb_group;         /* words per group (Kp * T4) */
  int64_t M;                 /* rows: M_sum (grouped) or M (dense) */
  int64_t N;
  int KT;                    /* K tiles of 128 per CTA: K / 128 / ksplit (the skinny kernel: K / 128) */
  int ksplit;                /* split-K: CTAs per output tile, 1, 2 or 4 (grid z = m-block high part * ksplit + slice) */
  float *part;               /* ksplit > 1: fp32 partials [ksplit, M, N] (workspace), else NULL */
  int bm;                    /* BLOCK_M (simple kernel) */
  int64_t E_local;
  int64_t mblocks;           /* ceil(M / BLOCK_M) */
  uint16_t *D;
  int64_t D_stride;          /* elements */
  int d_pair;                /* 4-byte stores of two bf16 allowed */
  unsigned long long *counters;
  int grp;                   /* skinny kernel: live rows staged per pass, 1, 2, 4 or 8 (sk_group) */
  int tpc;                   /* skinny kernel: column tiles per CTA, >= 1 (1 with split-K; the launcher sets it) */
};

/* DSK_MOE_SK_GROUP (compile-time; default 1): the skinny kernel stages
 * sk_group rows per pass and picks its ring for them; 0 always stages 8
 * (the A/B baseline of docs/benchmarks.md, MoE v8). */
#ifndef DSK_MOE_SK_GROUP
#define DSK_MOE_SK_GROUP 1
#endif
/* Rows the skinny kernel stages per pass for a bound on the live rows of a
 * block (0 = unknown): the power of two >= it, at most 8 (one MMA's N).
 * (A cap below the hint, for a deeper ring at T 16, measured no gain:
 * docs/benchmarks.md, MoE v9b, commit f45207b.) */
inline int sk_group(int64_t max_rows) {
  if (!DSK_MOE_SK_GROUP || max_rows <= 0 || max_rows > 4) return 8;
  return max_rows > 2 ? 4 : (int)max_rows;
}

/* The arguments of a grouped GEMM call at BLOCK_M bm (host side; split-K
 * fields are set by the caller: ksplit 1, no partials here). */
inline GemmArgs grouped_args(const dsk_moe_gemm_desc *d, int bm) {
  const bool mx = d->b_fmt == DSK_MOE_W_MXFP4;
  GemmArgs a;
  a.A = d->A;
  a.A_stride = d->A_stride;
  a.sfa = d->sfa.words;
  a.sfa_T4 = (d->M_sum + 3) / 4 * 4;
  a.m_indices = d->m_indices;
  a.B = (const uint8_t *)d->B;
  a.B_row = mx ? d->K / 2 : d->K;
  a.B_group = d->N * a.B_row;
  a.sfb = d->sfb.words;
  a.sfb_T4 = (d->N + 3) / 4 * 4;
  {
    const int64_t sf_k = mx ? d->K / 32 : d->K / 128;
    a.sfb_group = (sf_k + 3) / 4 * a.sfb_T4;
  }
  a.M = d->M_sum;
  a.N = d->N;
  a.KT = (int)(d->K / 128);
  a.ksplit = 1;
  a.part = nullptr;
  a.bm = bm;
  a.E_local = d->E_local;
  a.mblocks = d->M_sum / bm;
  a.D = d->D;
  a.D_stride = d->D_stride;
  a.d_pair = ((uintptr_t)d->D & 3u) == 0 && (d->D_stride & 1) == 0;
  a.counters = (unsigned long long *)d->counters;
  a.grp = sk_group(d->max_expert_rows);
  a.tpc = 1;
  return a;
}
