/* sparse_mla_k32f8.cuh - the 32-head decode kernel on the raw records: its
 * FAST form (below) and, as the template flag RC, an ACCURATE form with the
 * same structure whose e4m3 bytes are converted exactly to f16 in registers
 * (k32r_qk_tiles, k32r_pv), which runs the ACCURATE 32-head calls by default
 * (DSK_MLA32_REGCVT in sparse_mla_plan.cuh; 0.73-0.90x the v9d kernel of
 * sparse_mla_k32.cuh on the H200 at large T).
 *
 * The FAST form of the 32-head decode kernel
 * (precision FAST, 32 heads per CTA, on the cuda-sm120 table, and until
 * SM120's native e4m3 MMAs have run it only under DSK_TEST_AS_SM120=1: see
 * sparse_mla_decode.cu). Included inside the launcher's anonymous namespace
 * after sparse_mla_k32.cuh, whose softmax, rescale and finish it shares.
 *
 * The design of spec/sparse-decode.md §7 ("FAST mode"): Q.K and P.V run as
 * e4m3 m16n8k32 MMAs on the raw cache bytes, so no record is ever
 * converted; Q and P are each split in two e4m3 passes, hi = e4m3(x) and
 * lo = e4m3(x - hi), both at the same scale, and both passes accumulate
 * into the same fp32 sums (two e4m3 MMAs cost about one f16 MMA on SM120).
 *
 * CTA = 8 warps, 32 heads (two m16 tiles) of one query row, one split of the
 * row's stages, as the ACCURATE 32-head kernel. Two raw stage buffers:
 * stage i + 1 is issued (cp.async, invalid records zero filled, never read)
 * as soon as stage i has landed, into the buffer stage i - 1 used. Per
 * stage three phases separated by barriers:
 *  1. QK: warp w = (head tile w & 1, candidates 16 ((w >> 1) & 1) .. + 15,
 *     dim half w >> 2). Half 0: scale tiles 0-1 (A) / 0-3 (B); half 1 the
 *     remaining tiles and the bf16 rope dims (a bf16 MMA, A from QR, B from
 *     the raw record). Each ldmatrix of Q hi / lo feeds two MMAs (two
 *     n-tiles of 8 candidates); B = the raw record bytes by ldmatrix (the
 *     m16n8k32 B fragment is the byte view of the m16n8k16 one). Each scale
 *     tile's partial sum is multiplied by its candidate's tile scale in
 *     fp32, read from the raw record; the halves' partial scores go to two
 *     PS blocks (invalid: -inf in block 0, 0 in block 1).
 *  2. softmax (k32_softmax, lazy maximum with 2^2 of headroom), weights
 *     over PS block 0.
 *  3. PV: warp w owns output dims 64 w .. 64 w + 63 of all 32 heads:
 *     A = P * 2^6 * scale_c / R (R = the warp's running maximum tile scale,
 *     so A stays in [0, 2^8]), split hi / lo in e4m3; B =
 *     V bytes of the raw records by ldmatrix.trans (16-bit units) and two
 *     byte permutes per pair of registers: after the transpose, lane (g, q)
 *     holds dims 2g, 2g+1 of candidates 8m + 2q, 8m + 2q + 1 of matrix m, so
 *     the even bytes of matrices (0, 1) give dim 2g of candidates {2q,
 *     2q+1, 8+2q, 9+2q} (b0 of an MMA whose column g is dim 2g) and the odd
 *     bytes dim 2g+1 (b0 of a second MMA); matrices (2, 3) give b1 for the
 *     candidates + 16. The MMA's k order is thus a permutation of the
 *     stage's candidates, and A uses the same one: lane (g, q)'s A bytes
 *     are the weights of exactly those candidates. Output dim 16 b + 4q + e
 *     of a thread's rows: e even from the "even" accumulator acc[m][2b], e
 *     odd from acc[m][2b + 1] (entries e / 2 and 2 + e / 2 for rows g, g+8).
 *     Format B's rope dims (warp 7) are a bf16 MMA with A = P, B from the
 *     raw record by ldmatrix.trans (k32_pv on raw rows).
 * Numerics: Q's pre-scale per head is the power of two that puts its
 * largest |q| in [128, 256); the hi / lo split goes through f16 (exact for
 * the bf16 inputs of Q; 2^-12 relative for P, well below e4m3's residual
 * step). The finish is the ACCURATE kernel's, with this dim order. */

/* The PV A operand: weights <= 2^kF8LazyLog2 (the softmax's lazy maximum)
 * times scale_c / R <= 1 times kF8PScale, so A <= 256 (e4m3 saturates at
 * 448), and weights down to ~2^-6 of the maximum keep both passes in
 * e4m3's normal range (a weight's hi + lo error is then <= 2^-8 of it; at
 * the ACCURATE kernel's headroom of 2^8 the lo pass of most weights fell
 * into e4m3's subnormals, and the emulated rel_l2 rose to 5e-3). The
 * output is scaled back by 1 / kF8PScale (exact). */
constexpr int kF8LazyLog2 = 2;
/* Two forms under measurement (build options, 0 until a GPU has timed
 * them; docs/design.md, "The 32-head decode kernel", SASS notes):
 * DSK_K32F8_EARLY_PRO=1: the prologue's global loads (this warp's Q rows,
 * both segments' lens[t], both possible slot ids of stage 0) issued
 * together instead of lens, then the slot, then Q, one after another; the
 * Q rows' maxima by one redux each instead of five dependent shuffles.
 * DSK_K32F8_FAST_FOLD=1: PV's V-scale fold by one redux of the stage's
 * tile scales, 1 / R by the approximate reciprocal only when R grows, and
 * the softmax rescale and the fold's factor in one pass over the
 * accumulators (skipped when both are 1). */
#ifndef DSK_K32F8_EARLY_PRO
#define DSK_K32F8_EARLY_PRO 0
#endif
#ifndef DSK_K32F8_FAST_FOLD
#define DSK_K32F8_FAST_FOLD 0
#endif
#if DSK_K32F8_FAST_FOLD && !DSK_K32F8_EARLY_PRO
#error "DSK_K32F8_FAST_FOLD=1 needs DSK_K32F8_EARLY_PRO=1: alone it spills 4 bytes in the sm_90 Format B RC kernel"
#endif
constexpr float kF8PScale = 64.f;

/* hi / lo e4m3 split of four values (byte j of hi and lo from x_j): hi =
 * e4m3(x), lo = e4m3(x - hi), computed on f16 copies of x */
__device__ __forceinline__ void split_e4m3x4(float x0, float x1, float x2, float x3, uint32_t &hi, uint32_t &lo) {
  const uint32_t h01 = pack_f16(x0, x1), h23 = pack_f16(x2, x3);
  const uint32_t e01 = f16x2_to_e4m3x2(h01), e23 = f16x2_to_e4m3x2(h23);
  const uint32_t r01 = hsub2_u32(h01, e4m3x2_to_f16x2(e01)), r23 = hsub2_u32(h23, e4m3x2_to_f16x2(e23));
  hi = e01 | (e23 << 16);
  lo = f16x2_to_e4m3x2(r01) | (f16x2_to_e4m3x2(r23) << 16);
}

/* Stages NR query heads for the FAST kernel, one warp: nope dims as e4m3
 * hi / lo (rows of qbytes at qh, ql) after the per-head power-of-two
 * pre-scale 2^sh that puts the largest |q| in [128, 256); rope dims as the
 * raw bf16; lane 0 writes 2^-sh to qscale[r]. */
template <int F, int NR>
__device__ __forceinline__ void q_store_e4m3(const QRows<NR> &q, int lane, uint8_t *qh, uint8_t *ql, int qbytes,
                                             uint8_t *rope, int rope_bytes, float *qscale) {
  using C = Fmt<F>;
  const uint4(&qv)[NR][2] = q.qv;
  const uint4(&rv)[NR] = q.rv;
#pragma unroll
  for (int r = 0; r < NR; r++) {
    const float mx = q_row_absmax(qv[r]);
    /* mx in [2^ex, 2^(ex+1)) -> sh = 7 - ex; an all-zero (or subnormal) row
     * gets the largest shift, harmless */
    const int ex = (int)((__float_as_uint(mx) >> 23) & 0xff) - 127;
    int sh = 7 - ex;
    if (sh > 126) sh = 126;
    if (sh < -126) sh = -126;
    const float mul = __uint_as_float((uint32_t)(127 + sh) << 23);
    /* an infinite q would saturate to 448: its row's scores become NaN
     * instead, as in the ACCURATE kernel (a NaN q stays NaN in e4m3) */
    if (lane == 0) qscale[r] = mx <= 3.402823466e38f ? __uint_as_float((uint32_t)(127 - sh) << 23) : __uint_as_float(0x7fc00000u);
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int d = lane * 8 + 256 * k;
      if (d >= C::NOPE) continue;
      const uint32_t w[4] = {qv[r][k].x, qv[r][k].y, qv[r][k].z, qv[r][k].w};
      uint32_t hi[2], lo[2];
#pragma unroll
      for (int e = 0; e < 2; e++)
        split_e4m3x4(bf16_bits_to_f32(w[2 * e] & 0xffff) * mul, bf16_bits_to_f32(w[2 * e] >> 16) * mul,
                     bf16_bits_to_f32(w[2 * e + 1] & 0xffff) * mul, bf16_bits_to_f32(w[2 * e + 1] >> 16) * mul,
                     hi[e], lo[e]);
      *reinterpret_cast<uint2 *>(qh + r * qbytes + d) = make_uint2(hi[0], hi[1]);
      *reinterpret_cast<uint2 *>(ql + r * qbytes + d) = make_uint2(lo[0], lo[1]);
    }
    if (lane < 8) *reinterpret_cast<uint4 *>(rope + r * rope_bytes + 16 * lane) = rv[r];
  }
}

/* Adds one scale tile's partial scores ta (two n-tiles; the thread's
 * candidates cand, cand + 1 and + 8) to s, each multiplied in fp32 by its
 * candidate's tile scale read from the raw record. */
template <int F>
__device__ __forceinline__ void fold_tile_scores(const uint8_t *st, int cand, int tile, const float (&ta)[2][4],
                                                 float (&s)[2][4]) {
  using C = Fmt<F>;
#pragma unroll
  for (int j = 0; j < 2; j++) {
    const float s0 = tile_scale<F>(st + (cand + 8 * j) * C::SREC, tile);
    const float s1 = tile_scale<F>(st + (cand + 8 * j + 1) * C::SREC, tile);
    s[j][0] += ta[j][0] * s0;
    s[j][1] += ta[j][1] * s1;
    s[j][2] += ta[j][2] * s0;
    s[j][3] += ta[j][3] * s1;
  }
}

/* Phase 1, nope scale tiles T0 .. T1 - 1 of one warp's 16 x 16 block: qh /
 * ql = this lane's ldmatrix row address of Q hi / lo (head tile rows), kb =
 * its row address in the raw records (candidates c0 + (lane & 7), byte
 * chunk lane >> 3; n-tile 1 is 8 records further), st = the stage buffer,
 * cand = the thread's first accumulator candidate. */
template <int F, int T0, int T1>
__device__ __forceinline__ void k32f8_qk_tiles(const uint8_t *qh, const uint8_t *ql, const uint8_t *kb,
                                               const uint8_t *st, int cand, float (&s)[2][4]) {
  using C = Fmt<F>;
  constexpr int KPT = C::TILE / 32; /* k32 steps per scale tile */
  static_assert(KPT % 2 == 0, "pairs of k32 steps per scale tile");
#pragma unroll
  for (int tile = T0; tile < T1; tile++) {
    float ta[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < KPT; kk += 2) {
      const int k0 = tile * KPT + kk; /* k32 step: dims (bytes) 32 k0 .. */
      uint32_t h0[4], l0[4], h1[4], l1[4], b[4], b1[4];
      ldmatrix_x4(b, kb + 32 * k0);
      ldmatrix_x4(b1, kb + 8 * C::SREC + 32 * k0);
      ldmatrix_x4(h0, qh + 32 * k0);
      ldmatrix_x4(l0, ql + 32 * k0);
      mma_fp8(ta[0], h0, b[0], b[1]);
      mma_fp8(ta[1], h0, b1[0], b1[1]);
      mma_fp8(ta[0], l0, b[0], b[1]);
      mma_fp8(ta[1], l0, b1[0], b1[1]);
      ldmatrix_x4(h1, qh + 32 * (k0 + 1));
      ldmatrix_x4(l1, ql + 32 * (k0 + 1));
      mma_fp8(ta[0], h1, b[2], b[3]);
      mma_fp8(ta[1], h1, b1[2], b1[3]);
      mma_fp8(ta[0], l1, b[2], b[3]);
      mma_fp8(ta[1], l1, b1[2], b1[3]);
    }
    fold_tile_scores<F>(st, cand, tile, ta, s);
  }
}

/* Phase 3 for a nope warp: dims 64 warp .. + 63 (tile vtile), A = P *
 * (scale_c * inv) * kF8PScale split hi / lo (inv = 1 / R), B from the raw
 * records (see the header). */
template <int F>
__device__ __forceinline__ void k32f8_pv(const float *ps, const uint8_t *st, int vtile, float inv, int warp, int lane,
                                         float (&acc)[2][8][4]) {
  using C = Fmt<F>;
  constexpr int PST = DSK_MLA32_PS_STRIDE;
  const int g = lane >> 2, q4 = lane & 3;
  /* factors of the thread's A candidates: 16 ks + {2q, 2q+1, 2q+8, 2q+9} */
  float f[2][4];
#pragma unroll
  for (int ks = 0; ks < 2; ks++)
#pragma unroll
    for (int j = 0; j < 4; j++)
      f[ks][j] = (tile_scale<F>(st + (16 * ks + 2 * q4 + (j & 1) + 8 * (j >> 1)) * C::SREC, vtile) * inv) * kF8PScale;
  uint32_t ah[2][4], al[2][4];
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
      const float *p0 = ps + (16 * m + g) * PST + 16 * ks + 2 * q4, *p1 = p0 + 8 * PST;
      const float2 x0 = *reinterpret_cast<const float2 *>(p0), x2 = *reinterpret_cast<const float2 *>(p0 + 8);
      const float2 x1 = *reinterpret_cast<const float2 *>(p1), x3 = *reinterpret_cast<const float2 *>(p1 + 8);
      /* a0 / a2: row g, k 4q.. (ks 0) / 16+4q.. (ks 1); a1 / a3: row g+8 */
      split_e4m3x4(x0.x * f[ks][0], x0.y * f[ks][1], x2.x * f[ks][2], x2.y * f[ks][3], ah[m][2 * ks], al[m][2 * ks]);
      split_e4m3x4(x1.x * f[ks][0], x1.y * f[ks][1], x3.x * f[ks][2], x3.y * f[ks][3], ah[m][2 * ks + 1],
                   al[m][2 * ks + 1]);
    }
  /* lane l: row l & 7 of matrix l >> 3 = candidate 8 (l >> 3) + (l & 7) */
  const uint8_t *vrow = st + (8 * (lane >> 3) + (lane & 7)) * C::SREC + 64 * warp;
#pragma unroll
  for (int b = 0; b < 4; b++) {
    uint32_t r[4];
    ldmatrix_x4_trans(r, vrow + 16 * b);
    const uint32_t e0 = __byte_perm(r[0], r[1], 0x6420), o0 = __byte_perm(r[0], r[1], 0x7531);
    const uint32_t e1 = __byte_perm(r[2], r[3], 0x6420), o1 = __byte_perm(r[2], r[3], 0x7531);
#pragma unroll
    for (int m = 0; m < 2; m++) {
      mma_fp8(acc[m][2 * b], ah[m], e0, e1);
      mma_fp8(acc[m][2 * b + 1], ah[m], o0, o1);
      mma_fp8(acc[m][2 * b], al[m], e0, e1);
      mma_fp8(acc[m][2 * b + 1], al[m], o0, o1);
    }
  }
}

/* ---- the ACCURATE form (RC: e4m3 converted to f16 in registers) */

/* Phase 1 of the ACCURATE form, nope scale tiles T0 .. T1 - 1: as
 * k32f8_qk_tiles, but each B register (four e4m3 of a candidate: dims
 * 4q..4q+3 of a 16-dim group) is converted exactly to two f16x2 and feeds an
 * f16 m16n8k16 MMA whose k positions (2q, 2q+1 | 8+2q, 9+2q) are those dims,
 * with A = Q f16 stored in that order (q_store's PERM layout; qa: this lane's
 * ldmatrix row address, 32 bytes per 16-dim group). */
template <int F, int T0, int T1>
__device__ __forceinline__ void k32r_qk_tiles(const uint8_t *qa, const uint8_t *kb, const uint8_t *st, int cand,
                                              float (&s)[2][4]) {
  using C = Fmt<F>;
  constexpr int KPT = C::TILE / 32; /* k32 steps per scale tile */
  static_assert(KPT % 2 == 0, "pairs of k32 steps per scale tile");
#pragma unroll
  for (int tile = T0; tile < T1; tile++) {
    float ta[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < KPT; kk += 2) {
      const int k0 = tile * KPT + kk; /* k32 step: dims (bytes) 32 k0 .. */
      uint32_t b[4], b1[4];
      ldmatrix_x4(b, kb + 32 * k0);
      ldmatrix_x4(b1, kb + 8 * C::SREC + 32 * k0);
#pragma unroll
      for (int h = 0; h < 2; h++) { /* step k0 + h: 16-dim groups 2 (k0 + h) and + 1 */
        uint32_t a0[4], a1[4], c[4], c1[4];
        ldmatrix_x4(a0, qa + 64 * (k0 + h));
        ldmatrix_x4(a1, qa + 64 * (k0 + h) + 32);
        e4m3x4_to_f16x2x2(b[2 * h], c[0], c[1]);
        e4m3x4_to_f16x2x2(b[2 * h + 1], c[2], c[3]);
        e4m3x4_to_f16x2x2(b1[2 * h], c1[0], c1[1]);
        e4m3x4_to_f16x2x2(b1[2 * h + 1], c1[2], c1[3]);
        mma_f16(ta[0], a0, c[0], c[1]);
        mma_f16(ta[1], a0, c1[0], c1[1]);
        mma_f16(ta[0], a1, c[2], c[3]);
        mma_f16(ta[1], a1, c1[2], c1[3]);
      }
    }
    fold_tile_scores<F>(st, cand, tile, ta, s);
  }
}

/* Phase 3 of the ACCURATE form for a nope warp: A = P * scale_c * inv in
 * f16 (as k32_pv), B = the V bytes after the transpose and byte permutes of
 * k32f8_pv, converted exactly to f16x2; here the k order is the natural one
 * (the permutes give candidates 2q, 2q+1 | 8+2q, 9+2q of a 16-candidate
 * step), and the output dims are those of k32f8_pv. */
template <int F>
__device__ __forceinline__ void k32r_pv(const float *ps, const uint8_t *st, int vtile, float inv, int warp, int lane,
                                        float (&acc)[2][8][4]) {
  using C = Fmt<F>;
  constexpr int PST = DSK_MLA32_PS_STRIDE;
  const int g = lane >> 2, q4 = lane & 3;
  uint32_t a[2][2][4]; /* [ks][m] */
#pragma unroll
  for (int ks = 0; ks < 2; ks++) {
    const int ca = 16 * ks + 2 * q4; /* A columns: candidates ca, ca+1, ca+8, ca+9 */
    const float f0 = tile_scale<F>(st + ca * C::SREC, vtile) * inv;
    const float f1 = tile_scale<F>(st + (ca + 1) * C::SREC, vtile) * inv;
    const float f8 = tile_scale<F>(st + (ca + 8) * C::SREC, vtile) * inv;
    const float f9 = tile_scale<F>(st + (ca + 9) * C::SREC, vtile) * inv;
#pragma unroll
    for (int m = 0; m < 2; m++) {
      const float *p0 = ps + (16 * m + g) * PST + ca, *p1 = p0 + 8 * PST;
      const float2 x0 = *reinterpret_cast<const float2 *>(p0), x1 = *reinterpret_cast<const float2 *>(p1);
      const float2 x2 = *reinterpret_cast<const float2 *>(p0 + 8), x3 = *reinterpret_cast<const float2 *>(p1 + 8);
      a[ks][m][0] = pack_f16(x0.x * f0, x0.y * f1);
      a[ks][m][1] = pack_f16(x1.x * f0, x1.y * f1);
      a[ks][m][2] = pack_f16(x2.x * f8, x2.y * f9);
      a[ks][m][3] = pack_f16(x3.x * f8, x3.y * f9);
    }
  }
  const uint8_t *vrow = st + (8 * (lane >> 3) + (lane & 7)) * C::SREC + 64 * warp;
#pragma unroll
  for (int b = 0; b < 4; b++) {
    uint32_t r[4];
    ldmatrix_x4_trans(r, vrow + 16 * b);
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
      uint32_t be0, be1, bo0, bo1;
      e4m3x4_to_f16x2x2(__byte_perm(r[2 * ks], r[2 * ks + 1], 0x6420), be0, be1);
      e4m3x4_to_f16x2x2(__byte_perm(r[2 * ks], r[2 * ks + 1], 0x7531), bo0, bo1);
#pragma unroll
      for (int m = 0; m < 2; m++) {
        mma_f16(acc[m][2 * b], a[ks][m], be0, be1);
        mma_f16(acc[m][2 * b + 1], a[ks][m], bo0, bo1);
      }
    }
  }
}

/* FAST: one CTA per SM everywhere: on SM120 shared memory allows no more,
 * and on sm_90 the kernel only runs to validate the cuda-sm120 table
 * (DSK_TEST_AS_SM120), where the 128-register cap of two CTAs per SM would
 * spill around ptxas's expansion of the e4m3 MMAs. RC: as the ACCURATE
 * 32-head kernel (two CTAs per SM on sm_90). */
template <int F, bool RC = false>
__global__ void __launch_bounds__(DSK_MLA32_THREADS, RC ? DSK_MLA32_MIN_BLOCKS : 1)
    sparse_mla_k32f8_kernel(const Params p) {
  using C = Fmt<F>;
  constexpr int QS8 = DSK_MLA32F8_Q_STRIDE(F); /* bytes */
  constexpr int QRS = DSK_MLA32_QR_STRIDE;
  constexpr int STG = kSub * C::SREC; /* bytes per stage buffer */
  constexpr int NT0 = F == 1 ? 2 : 4; /* scale tiles of dim half 0 */
  constexpr int QF16 = DSK_MLA32F8_QF16_STRIDE(F); /* RC: bytes per f16 Q row */
  constexpr int LAZY = RC ? (int)kLazyLog2 : kF8LazyLog2;
  constexpr float PSCALE = RC ? 1.f : kF8PScale;
  static_assert(!RC || DSK_MLA32_HEADS * QF16 <= DSK_MLA32F8_OFF_QR(F) - DSK_MLA32F8_OFF_QH, "RC: f16 Q fits QH + QL");
  static_assert(DSK_MLA32_NT(F) == C::NT, "tile count");
  static_assert(kSub * 8 == DSK_MLA32_THREADS, "8 issuing threads per candidate");
  static_assert(C::NOPE % 64 == 0 && (F == 1 ? C::NOPE / 64 == 8 : C::NOPE / 64 == 7), "a PV warp per 64 dims");
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t *qh = smem + DSK_MLA32F8_OFF_QH;
  uint8_t *ql = smem + DSK_MLA32F8_OFF_QL(F);
  uint8_t *qrope = smem + DSK_MLA32F8_OFF_QR(F);
  uint8_t *raw = smem + DSK_MLA32F8_OFF_RAW(F);
  float *ps = reinterpret_cast<float *>(smem + DSK_MLA32F8_OFF_PS(F));
  float *alpha = reinterpret_cast<float *>(smem + DSK_MLA32F8_OFF_ALPHA(F));
  float *fac = reinterpret_cast<float *>(smem + DSK_MLA32F8_OFF_FAC(F));
  float *qscale = reinterpret_cast<float *>(smem + DSK_MLA32F8_OFF_QS(F));
  int32_t *valid = reinterpret_cast<int32_t *>(smem + DSK_MLA32F8_OFF_VALID(F));

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3;
  const int hg = (int)(blockIdx.x % (unsigned)p.nhg);
  const int64_t t = blockIdx.x / (unsigned)p.nhg;
  const int split = blockIdx.y;
  const int h0 = hg * DSK_MLA32_HEADS;
  const bool counting = p.counters && hg == 0;
  pdl_launch_dependents();

#if DSK_K32F8_EARLY_PRO
  /* the prologue's loads in flight together: this warp's Q rows, both
   * segments' lens[t] and the two possible slot ids of stage 0 (segment 0
   * at stage slot s0, segment 1 at its first), each from a valid address
   * (p.q's first word when absent), so that no load waits for another */
  const QRows<4> qrows = q_load<F, 4>(p, t, h0 + 4 * warp, lane);
  StageRange sr;
  int32_t slot0 = -1;
  {
    const int c = tid >> 3;
    const bool two = p.nseg > 1;
    const int32_t *fb = reinterpret_cast<const int32_t *>(p.q);
    const int s0 = split * p.spb, n0s = 2 * p.nch0;
    const int64_t k0 = (int64_t)s0 * kSub + c, k1 = (int64_t)max(s0 - n0s, 0) * kSub + c;
    const int32_t *la0 = p.seg[0].lens ? p.seg[0].lens + t : fb;
    const int32_t *la1 = two && p.seg[1].lens ? p.seg[1].lens + t : fb;
    const int32_t *sa0 = k0 < p.seg[0].width ? p.seg[0].slots + t * p.seg[0].slots_st + k0 : fb;
    const int32_t *sa1 = two && k1 < p.seg[1].width ? p.seg[1].slots + t * p.seg[1].slots_st + k1 : fb;
    const int32_t lv0 = __ldg(la0), lv1 = __ldg(la1), sv0 = __ldg(sa0), sv1 = __ldg(sa1);
    /* stage_range's arithmetic (sparse_mla_common.cuh) on the loaded lens */
    const int64_t w0 = p.seg[0].width, w1 = p.seg[1].width;
    sr.L0 = p.seg[0].lens ? (lv0 < 0 ? 0 : (lv0 > w0 ? w0 : (int64_t)lv0)) : w0;
    sr.L1 = !two ? 0 : p.seg[1].lens ? (lv1 < 0 ? 0 : (lv1 > w1 ? w1 : (int64_t)lv1)) : w1;
    if (counting && split == 0 && tid == 0) {
      const unsigned long long clamped = (unsigned long long)(p.seg[0].lens && (lv0 < 0 || lv0 > w0)) +
                                         (unsigned long long)(two && p.seg[1].lens && (lv1 < 0 || lv1 > w1));
      if (clamped) atomicAdd(&p.counters[1], clamped);
    }
    const int s1e = min(s0 + p.spb, 2 * p.nch);
    sr.b0 = s0;
    const int64_t e0 = min((int64_t)min(s1e, n0s), (sr.L0 + kSub - 1) / kSub);
    sr.b1 = max(s0 - n0s, 0);
    const int64_t e1 = min((int64_t)max(s1e - n0s, 0), (sr.L1 + kSub - 1) / kSub);
    sr.n0 = (int)max(e0 - sr.b0, (int64_t)0);
    sr.n = sr.n0 + (int)max(e1 - sr.b1, (int64_t)0);
    /* stage_slot(0): segment 1 when segment 0 has no stage here */
    if (sr.n > 0) {
      const bool s1 = sr.n0 == 0;
      if ((s1 ? k1 : k0) < (s1 ? sr.L1 : sr.L0)) slot0 = s1 ? sv1 : sv0;
    }
  }
  constexpr bool kRedux = true;
#else
  const StageRange sr = stage_range(p, t, split, counting, tid);
  constexpr bool kRedux = false;
#endif
  const int n = sr.n;

  /* ---- stage issue: 8 threads per candidate (c = tid / 8), stage i into
   * buffer i & 1 */
  auto load_slot = [&](int i) -> int32_t { return stage_slot(p, sr, t, i, tid >> 3); };
  auto issue = [&](int i, int32_t slot) {
    const int c = tid >> 3;
    stage_issue<F, 8>(p, sr, i, c, tid & 7, slot, counting, raw + (i & 1) * STG + c * C::SREC,
                      valid + (i & 1) * kSub + c);
  };

  /* ---- prologue: stage 0 goes in flight while this warp's 4 Q rows are
   * split into e4m3 hi / lo (rope rows to QR) */
  {
#if !DSK_K32F8_EARLY_PRO
    const int32_t slot0 = load_slot(0);
    const QRows<4> qrows = q_load<F, 4>(p, t, h0 + 4 * warp, lane);
#endif
    if (n > 0) issue(0, slot0);
    cp_async_commit();
    if constexpr (RC) /* f16 rows (pre-scaled as the ACCURATE kernels do) in the PERM order, over QH + QL */
      q_store<F, false, 4, true, kRedux>(qrows, lane, qh + 4 * warp * QF16, QF16, qrope + 4 * warp * QRS, QRS,
                                         qscale + 4 * warp, 0);
    else
      q_store_e4m3<F, 4>(qrows, lane, qh + 4 * warp * QS8, ql + 4 * warp * QS8, QS8, qrope + 4 * warp * QRS, QRS,
                         qscale + 4 * warp);
  }
  int32_t next_slot = load_slot(1);

  /* QK block of this warp: head tile mt, candidates qk_c0 .. + 15, dim half */
  const int mt = warp & 1, qk_c0 = 16 * ((warp >> 1) & 1), qk_half = warp >> 2;
  const int arow = 16 * mt + ((lane >> 3) & 1) * 8 + (lane & 7); /* ldmatrix row of the A operand */
  const uint8_t *qh_base = qh + arow * QS8 + 16 * (lane >> 4);
  const uint8_t *qf_base = qh + arow * QF16 + 16 * (lane >> 4); /* RC */
  const uint8_t *ql_base = ql + arow * QS8 + 16 * (lane >> 4);
  const uint8_t *qr_base = qrope + arow * QRS + 16 * (lane >> 4);
  const int kb_off = (qk_c0 + (lane & 7)) * C::SREC + 16 * (lane >> 3); /* in a stage buffer */

  /* ---- running state */
  const int shead = tid >> 3, sq = tid & 7; /* softmax: head row, candidate quad */
  float m_run = kNegInf, l_run = 0.f;
  const bool rope_warp = F == 2 && warp == 7;
  const int vtile = F == 1 ? warp >> 1 : warp; /* scale tile of this warp's PV dims */
  float R = 0.f;                               /* running maximum of that tile's scales */
#if DSK_K32F8_FAST_FOLD
  float inv_r = 0.f; /* 1 / R (0 while R is 0) */
#endif
  float acc[2][8][4];
#pragma unroll
  for (int a = 0; a < 2; a++)
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[a][j][e] = 0.f;

  for (int i = 0; i < n; i++) {
    const int vb = (i & 1) * kSub;
    const uint8_t *st = raw + (i & 1) * STG;
    cp_async_wait<0>();
    __syncthreads(); /* B1: stage i landed (and Q staged); every warp is done with stage i - 1 */
    if (i + 1 < n) issue(i + 1, next_slot);
    cp_async_commit();
    next_slot = load_slot(i + 2);

    /* ---- 1. QK */
    {
      float sb[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      const int cand = qk_c0 + 2 * q4;
      if constexpr (RC) {
        if (qk_half == 0)
          k32r_qk_tiles<F, 0, NT0>(qf_base, st + kb_off, st, cand, sb);
        else
          k32r_qk_tiles<F, NT0, C::NT>(qf_base, st + kb_off, st, cand, sb);
      } else {
        if (qk_half == 0)
          k32f8_qk_tiles<F, 0, NT0>(qh_base, ql_base, st + kb_off, st, cand, sb);
        else
          k32f8_qk_tiles<F, NT0, C::NT>(qh_base, ql_base, st + kb_off, st, cand, sb);
      }
      /* the rope dims' B from the raw records */
      k32_qk_half_end<C::SREC>(ps, qscale, qr_base, st + kb_off + C::ROPE, qk_half, mt, g, cand, valid + vb,
                               p.scale_log2, sb);
    }
    __syncthreads(); /* B2: scores ready */

    /* ---- 2. softmax of head `shead`, candidates 4 sq .. 4 sq + 3 */
    k32_softmax<2, LAZY>(ps, alpha, shead, sq, m_run, l_run);
    __syncthreads(); /* B3: probabilities ready */

    /* ---- 3. PV: dims 64 warp .. + 63 of heads 0..31 */
#if DSK_K32F8_FAST_FOLD
    if (!rope_warp) {
      /* the stage's largest scale of this warp's tile by one redux (scales
       * taken as >= 0, whose bits order as unsigned; a NaN or negative
       * scale counts as 0, as fmaxf against R >= 0 treated it), then the
       * softmax rescale and the fold's factor in one pass */
      const float s_lane = tile_scale<F>(st + lane * C::SREC, vtile);
      const float al[4] = {alpha[g], alpha[g + 8], alpha[16 + g], alpha[24 + g]};
      const float rmax =
          __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(s_lane > 0.f ? s_lane : 0.f)));
      float keep = 1.f;
      if (rmax > R) { /* warp-uniform */
        const float rc = fast_rcp(rmax);
        keep = R * rc;
        inv_r = rc;
        R = rmax;
      }
      if (!__all_sync(0xffffffffu, al[0] == 1.f && al[1] == 1.f && al[2] == 1.f && al[3] == 1.f && keep == 1.f)) {
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
          for (int j = 0; j < 8; j++) {
            acc[a][j][0] *= al[2 * a] * keep;
            acc[a][j][1] *= al[2 * a] * keep;
            acc[a][j][2] *= al[2 * a + 1] * keep;
            acc[a][j][3] *= al[2 * a + 1] * keep;
          }
      }
    } else {
      k32_rescale(alpha, g, acc);
    }
#else
    k32_rescale(alpha, g, acc);
#endif
    if (rope_warp) {
      k32_pv<F, true, C::SREC, C::ROPE>(ps, nullptr, st, vtile, 1.f, warp, lane, acc);
    } else {
      /* 1 / R; the FAST form's 2^6 is applied after scale / R <= 1 (k32f8_pv), so
       * a tiny R (a Format A RAW scale of 2^-126 for an all-zero tile) cannot
       * overflow the factor */
#if DSK_K32F8_FAST_FOLD
      const float inv = inv_r;
#else
      const float inv = fold_v_scale(R, tile_scale<F>(st + lane * C::SREC, vtile), acc);
#endif
      if constexpr (RC)
        k32r_pv<F>(ps, st, vtile, inv, warp, lane, acc);
      else
        k32f8_pv<F>(ps, st, vtile, inv, warp, lane, acc);
    }
  }
  cp_async_wait<0>();

  /* ---- finish: each head's lse and output factor, then the PV warps
   * write their dims (nope warps: dim 16 b + 4 q4 + e from acc[m][2b + (e & 1)]
   * entry (e >> 1) + 2 rr; the rope warp in k32_pv's order) */
  k32_finish_heads(p, l_run, m_run, shead, sq, h0, t, split, fac);
  __syncthreads();
  const float rv = rope_warp ? 1.f : R * (1.f / PSCALE);
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
      const int hrow = 16 * m + g + 8 * rr, h = h0 + hrow;
      if (h >= p.H) continue;
      const float f0 = fac[hrow];
      const float f = f0 * rv;
      if (rope_warp) {
        k32_write_ntiles(p, t, h, split, warp, q4, acc[m], rr, f0, f);
        continue;
      }
#pragma unroll
      for (int b = 0; b < 4; b++) {
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; e++) x[e] = f0 == 0.f ? 0.f : acc[m][2 * b + (e & 1)][(e >> 1) + 2 * rr] * f;
        const int d = 64 * warp + 16 * b + 4 * q4;
        if (p.splits == 1)
          *reinterpret_cast<uint2 *>(p.out + t * p.out_st + (int64_t)h * p.out_sh + d) =
              make_uint2((uint32_t)f32_to_bf16_rne(x[0]) | ((uint32_t)f32_to_bf16_rne(x[1]) << 16),
                         (uint32_t)f32_to_bf16_rne(x[2]) | ((uint32_t)f32_to_bf16_rne(x[3]) << 16));
        else
          *reinterpret_cast<float4 *>(p.part_o + ((t * p.H + h) * p.splits + split) * 512 + d) =
              make_float4(x[0], x[1], x[2], x[3]);
      }
    }
}
