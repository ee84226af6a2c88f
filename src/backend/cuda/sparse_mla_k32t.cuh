/* sparse_mla_k32t.cuh - the transposed 32-head decode kernel for Format B
 * (ACCURATE, 32 heads per CTA; DSK_MLA32_T in sparse_mla_plan.cuh).
 * Included inside the launcher's anonymous namespace after
 * sparse_mla_k32f8.cuh, whose finish it shares.
 *
 * Why transposed: in the raw-record kernel (RC) a warp's QK block is 16
 * heads x 16 candidates, so every e4m3 B fragment it converts feeds one
 * MMA and each K byte is converted once per head tile; PV builds its A
 * operand (P times the candidate's V scale) in fp32 for every MMA row. Here
 * both products put the candidates or the dims on the m16 rows and the 32
 * heads on the n8 columns: S^T = K Q^T and O^T = V^T P^T. A converted K or
 * V fragment (8 values a lane) then feeds four MMAs (the four 8-head
 * column tiles), every K and V byte is converted once per CTA, and the V
 * scale is applied to the f16 P^T fragments with one f16x2 multiply per
 * register.
 *
 * CTA = 8 warps, 32 heads of one query row, one split; two raw stage
 * buffers of 32 records (stage i + 1 is issued as soon as stage i has
 * landed, into the buffer stage i - 1 used). Per stage three phases between
 * barriers:
 *  1. QK: warp w = (candidate tile ct = w & 1: candidates 16 ct .. + 15,
 *     dim part kp = w >> 1: nope scale tiles 2 kp, 2 kp + 1, or for kp 3
 *     tile 6 and the 64 bf16 rope dims). A = the K bytes of the record
 *     rows (one 16-byte load per row and scale tile: lane (g, q) holds dims
 *     16 q .. 16 q + 15 of the tile, so its k positions {2q, 2q+1, 2q+8,
 *     2q+9} of k-step s are dims 16 q + 4 s + {0, 1, 2, 3}); B = Q^T by
 *     ldmatrix from Q rows stored in that permuted dim order (k32t_pos).
 *     Each scale tile's partial sums are multiplied by the row's (the
 *     candidate's) tile scale in fp32. The part's scores go to PS block kp
 *     as [head][candidate].
 *  2. softmax: thread (head tid / 8, candidates 4 (tid % 8) .. + 3) adds the
 *     four parts, applies the head's Q pre-scale and sm_scale, and updates
 *     its running maximum lazily (as k32_softmax); the weights go to PH
 *     (f16) and PB (bf16, for the rope dims' bf16 MMA) as [head][candidate],
 *     the head's rescale factor to ALPHA.
 *  3. PV: warp w owns output dims 64 w .. 64 w + 63 (warp 7: the rope
 *     dims) of all 32 heads, as 4 m16 dim tiles x 4 n8 head tiles (64 fp32
 *     accumulators). A = V^T: ldmatrix.trans of the records (16-bit units)
 *     gives lane (g, q) dims 2g, 2g+1 of candidates 2q, 2q+1; one byte
 *     permute makes two f16x2 A registers of them, so row g of an m16 tile
 *     is dim 2g and row g + 8 is dim 2g + 1 of its 16-dim group (rope: bf16
 *     rows, row r = dim r). B = P^T by ldmatrix from PH (PB), times
 *     scale_c / R in f16 (R = the warp's running maximum tile scale,
 *     fold_v_scale), so B stays in [0, 2^8].
 * The finish is the other 32-head kernels' (k32_finish_heads), with the dim
 * order above. */

/* Position (f16 / bf16 element) inside a Q row of dim d (d even: the pair
 * d, d + 1 stays adjacent): dim 64 T + 16 q + 4 s + e (T: scale tile, 7 =
 * the rope dims) sits at 64 T + 16 s + 2 q + (e & 1) + 8 (e >> 1), the k
 * position of lane q's K (A) fragment in k-step s of that tile. */
__device__ __forceinline__ int k32t_pos(int d) {
  const int T = d >> 6, dd = d & 63, q = dd >> 4, s = (dd >> 2) & 3, e = dd & 3;
  return 64 * T + 16 * s + 2 * q + (e & 1) + 8 * (e >> 1);
}

/* Stages NR query heads of one warp as k32t rows (QS bytes each): nope dims
 * f16 after q_store's per-head power-of-two pre-scale (lane 0 writes the
 * factor to qscale[r]), rope dims as the raw bf16, both in k32t_pos order. */
template <int F, int NR, int QS>
__device__ __forceinline__ void k32t_q_store(const QRows<NR> &q, int lane, uint8_t *rows, float *qscale) {
  using C = Fmt<F>;
#pragma unroll
  for (int r = 0; r < NR; r++) {
    const float mx = q_row_absmax(q.qv[r]);
    const int ex = (int)((__float_as_uint(mx) >> 23) & 0xff) - 127;
    int shift = ex - 14 > 0 ? ex - 14 : 0;
    if (shift > 125) shift = 125;
    const float inv = __uint_as_float((uint32_t)(127 - shift) << 23);
    if (lane == 0) qscale[r] = __uint_as_float((uint32_t)(127 + shift) << 23);
    uint8_t *row = rows + r * QS;
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int d = lane * 8 + 256 * k;
      if (d >= C::NOPE) continue;
      const uint32_t w[4] = {q.qv[r][k].x, q.qv[r][k].y, q.qv[r][k].z, q.qv[r][k].w};
#pragma unroll
      for (int e = 0; e < 4; e++)
        *reinterpret_cast<uint32_t *>(row + 2 * k32t_pos(d + 2 * e)) =
            pack_f16(bf16_bits_to_f32(w[e] & 0xffff) * inv, bf16_bits_to_f32(w[e] >> 16) * inv);
    }
    if (lane < 8) {
      const uint32_t w[4] = {q.rv[r].x, q.rv[r].y, q.rv[r].z, q.rv[r].w};
#pragma unroll
      for (int e = 0; e < 4; e++) *reinterpret_cast<uint32_t *>(row + 2 * k32t_pos(C::NOPE + 8 * lane + 2 * e)) = w[e];
    }
  }
}

/* Phase 1, one nope scale tile T of a warp's block: k0 / k1 = the records
 * of its rows g and g + 8, qb = this lane's ldmatrix address of Q's k32t
 * rows (heads (l & 7) + 8 (l >> 4), k half (l >> 3) & 1). The tile's
 * scores, times each row's tile scale, go to the warp's partial-score block
 * pp ([head][candidate], candidates r0, r0 + 8 of this lane); ADD: added to
 * what the warp's first part stored there (the same lane's entries, so no
 * barrier), which keeps one part's sums in shared memory instead of 16
 * registers. */
template <int F, int QS, int PST, bool ADD>
__device__ __forceinline__ void k32t_qk_tile(const uint8_t *k0, const uint8_t *k1, const uint8_t *qb, int T, int q4,
                                             float *pp, int r0) {
  const uint4 x0 = *reinterpret_cast<const uint4 *>(k0 + 64 * T + 16 * q4);
  const uint4 x1 = *reinterpret_cast<const uint4 *>(k1 + 64 * T + 16 * q4);
  const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w}, w1[4] = {x1.x, x1.y, x1.z, x1.w};
  uint32_t a[4][4];
#pragma unroll
  for (int ss = 0; ss < 4; ss++) {
    e4m3x4_to_f16x2x2(w0[ss], a[ss][0], a[ss][2]);
    e4m3x4_to_f16x2x2(w1[ss], a[ss][1], a[ss][3]);
  }
  const float sc0 = tile_scale<F>(k0, T), sc1 = tile_scale<F>(k1, T);
#pragma unroll
  for (int hp = 0; hp < 2; hp++) {
    float ta[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ss = 0; ss < 4; ss++) {
      uint32_t b[4];
      ldmatrix_x4(b, qb + 16 * hp * QS + 2 * (64 * T + 16 * ss));
      mma_f16(ta[0], a[ss], b[0], b[1]);
      mma_f16(ta[1], a[ss], b[2], b[3]);
    }
#pragma unroll
    for (int jj = 0; jj < 2; jj++) {
      float *e = pp + (16 * hp + 8 * jj + 2 * q4) * PST + r0;
      if (ADD) {
        e[0] += ta[jj][0] * sc0;
        e[PST] += ta[jj][1] * sc0;
        e[8] += ta[jj][2] * sc1;
        e[PST + 8] += ta[jj][3] * sc1;
      } else {
        e[0] = ta[jj][0] * sc0;
        e[PST] = ta[jj][1] * sc0;
        e[8] = ta[jj][2] * sc1;
        e[PST + 8] = ta[jj][3] * sc1;
      }
    }
  }
}

/* Phase 1, the rope dims (kp 3, before its tile 6): bf16 A from the
 * records (two 16-byte loads per row: lane q's rope dims 16 q .. + 15),
 * unscaled, stored to pp as k32t_qk_tile's first part. */
template <int F, int QS, int PST>
__device__ __forceinline__ void k32t_qk_rope(const uint8_t *k0, const uint8_t *k1, const uint8_t *qb, int q4,
                                             float *pp, int r0) {
  using C = Fmt<F>;
  const uint4 x0 = *reinterpret_cast<const uint4 *>(k0 + C::ROPE + 32 * q4);
  const uint4 x1 = *reinterpret_cast<const uint4 *>(k0 + C::ROPE + 32 * q4 + 16);
  const uint4 y0 = *reinterpret_cast<const uint4 *>(k1 + C::ROPE + 32 * q4);
  const uint4 y1 = *reinterpret_cast<const uint4 *>(k1 + C::ROPE + 32 * q4 + 16);
  const uint32_t w0[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  const uint32_t w1[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
  for (int hp = 0; hp < 2; hp++) {
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ss = 0; ss < 4; ss++) {
      const uint32_t a[4] = {w0[2 * ss], w1[2 * ss], w0[2 * ss + 1], w1[2 * ss + 1]};
      uint32_t b[4];
      ldmatrix_x4(b, qb + 16 * hp * QS + 2 * (C::NOPE + 16 * ss));
      mma_bf16(s[0], a, b[0], b[1]);
      mma_bf16(s[1], a, b[2], b[3]);
    }
#pragma unroll
    for (int jj = 0; jj < 2; jj++) {
      float *e = pp + (16 * hp + 8 * jj + 2 * q4) * PST + r0;
      e[0] = s[jj][0];
      e[PST] = s[jj][1];
      e[8] = s[jj][2];
      e[PST + 8] = s[jj][3];
    }
  }
}

/* The register form of k32t_qk_tile / k32t_qk_rope (DSK_MLA32T_RMW=0): the
 * part's sums stay in s (16 registers) and are stored once; on sm_90 the
 * 128-register cap of two CTAs per SM then spills 44 bytes. */
template <int F, int QS>
__device__ __forceinline__ void k32t_qk_tile_r(const uint8_t *k0, const uint8_t *k1, const uint8_t *qb, int T, int q4,
                                               float (&s)[4][4]) {
  const uint4 x0 = *reinterpret_cast<const uint4 *>(k0 + 64 * T + 16 * q4);
  const uint4 x1 = *reinterpret_cast<const uint4 *>(k1 + 64 * T + 16 * q4);
  const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w}, w1[4] = {x1.x, x1.y, x1.z, x1.w};
  uint32_t a[4][4];
#pragma unroll
  for (int ss = 0; ss < 4; ss++) {
    e4m3x4_to_f16x2x2(w0[ss], a[ss][0], a[ss][2]);
    e4m3x4_to_f16x2x2(w1[ss], a[ss][1], a[ss][3]);
  }
  const float sc0 = tile_scale<F>(k0, T), sc1 = tile_scale<F>(k1, T);
#pragma unroll
  for (int hp = 0; hp < 2; hp++) {
    float ta[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ss = 0; ss < 4; ss++) {
      uint32_t b[4];
      ldmatrix_x4(b, qb + 16 * hp * QS + 2 * (64 * T + 16 * ss));
      mma_f16(ta[0], a[ss], b[0], b[1]);
      mma_f16(ta[1], a[ss], b[2], b[3]);
    }
#pragma unroll
    for (int jj = 0; jj < 2; jj++) {
      s[2 * hp + jj][0] += ta[jj][0] * sc0;
      s[2 * hp + jj][1] += ta[jj][1] * sc0;
      s[2 * hp + jj][2] += ta[jj][2] * sc1;
      s[2 * hp + jj][3] += ta[jj][3] * sc1;
    }
  }
}
template <int F, int QS>
__device__ __forceinline__ void k32t_qk_rope_r(const uint8_t *k0, const uint8_t *k1, const uint8_t *qb, int q4,
                                               float (&s)[4][4]) {
  using C = Fmt<F>;
  const uint4 x0 = *reinterpret_cast<const uint4 *>(k0 + C::ROPE + 32 * q4);
  const uint4 x1 = *reinterpret_cast<const uint4 *>(k0 + C::ROPE + 32 * q4 + 16);
  const uint4 y0 = *reinterpret_cast<const uint4 *>(k1 + C::ROPE + 32 * q4);
  const uint4 y1 = *reinterpret_cast<const uint4 *>(k1 + C::ROPE + 32 * q4 + 16);
  const uint32_t w0[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  const uint32_t w1[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
  for (int ss = 0; ss < 4; ss++) {
    const uint32_t a[4] = {w0[2 * ss], w1[2 * ss], w0[2 * ss + 1], w1[2 * ss + 1]};
#pragma unroll
    for (int hp = 0; hp < 2; hp++) {
      uint32_t b[4];
      ldmatrix_x4(b, qb + 16 * hp * QS + 2 * (C::NOPE + 16 * ss));
      mma_bf16(s[2 * hp], a, b[0], b[1]);
      mma_bf16(s[2 * hp + 1], a, b[2], b[3]);
    }
  }
}
#ifndef DSK_MLA32T_RMW
#define DSK_MLA32T_RMW 1
#endif

/* The P^T B fragments of one 16-candidate k-step (candidates 16 ks ..) for
 * the four 8-head tiles, from a [head][candidate] weight array (rows of PPS
 * bytes). */
template <int PPS>
__device__ __forceinline__ void k32t_p_frags(const uint8_t *pw, int ks, int lane, uint32_t (&bq)[4][2]) {
#pragma unroll
  for (int jj = 0; jj < 2; jj++) {
    uint32_t r[4];
    ldmatrix_x4(r, pw + (16 * jj + (lane & 7) + 8 * (lane >> 4)) * PPS + 2 * (16 * ks + 8 * ((lane >> 3) & 1)));
    bq[2 * jj][0] = r[0];
    bq[2 * jj][1] = r[1];
    bq[2 * jj + 1][0] = r[2];
    bq[2 * jj + 1][1] = r[3];
  }
}

/* Two CTAs per SM on sm_90 (128 registers, no spills: one part's partial
 * scores wait in shared memory, k32t_qk_tile), one on SM120, as the other
 * 32-head kernels. */
#ifndef DSK_MLA32T_MIN_BLOCKS
#define DSK_MLA32T_MIN_BLOCKS DSK_MLA32_MIN_BLOCKS
#endif
template <int F>
__global__ void __launch_bounds__(DSK_MLA32_THREADS, DSK_MLA32T_MIN_BLOCKS) sparse_mla_k32t_kernel(const Params p) {
  static_assert(F == 2, "the transposed kernel serves Format B");
  using C = Fmt<F>;
  constexpr int QS = DSK_MLA32T_Q_STRIDE;  /* bytes per Q row */
  constexpr int RS = DSK_MLA32T_REC;       /* bytes per staged record */
  constexpr int PST = DSK_MLA32T_PS_STRIDE; /* fp32 per partial-score row */
  constexpr int PPS = DSK_MLA32T_P_STRIDE;  /* bytes per weight row */
  constexpr int STG = kSub * RS;
  constexpr int LAZY = (int)kLazyLog2;
  static_assert(C::NT == 7 && C::TILE == 64 && C::NOPE == 448, "Format B: 7 scale tiles of 64 dims");
  static_assert(kSub * 8 == DSK_MLA32_THREADS, "8 issuing threads per candidate");
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t *qrows = smem + DSK_MLA32T_OFF_Q;
  uint8_t *raw = smem + DSK_MLA32T_OFF_RAW;
  float *ps = reinterpret_cast<float *>(smem + DSK_MLA32T_OFF_PS);
  uint8_t *ph = smem + DSK_MLA32T_OFF_PH;
  uint8_t *pb = smem + DSK_MLA32T_OFF_PB;
  float *alpha = reinterpret_cast<float *>(smem + DSK_MLA32T_OFF_ALPHA);
  float *fac = reinterpret_cast<float *>(smem + DSK_MLA32T_OFF_FAC);
  float *qscale = reinterpret_cast<float *>(smem + DSK_MLA32T_OFF_QS);
  int32_t *valid = reinterpret_cast<int32_t *>(smem + DSK_MLA32T_OFF_VALID);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3;
  const int hg = (int)(blockIdx.x % (unsigned)p.nhg);
  const int64_t t = blockIdx.x / (unsigned)p.nhg;
  const int split = blockIdx.y;
  const int h0 = hg * DSK_MLA32_HEADS;
  const bool counting = p.counters && hg == 0;
  pdl_launch_dependents();

  const StageRange sr = stage_range(p, t, split, counting, tid);
  const int n = sr.n;

  auto load_slot = [&](int i) -> int32_t { return stage_slot(p, sr, t, i, tid >> 3); };
  auto issue = [&](int i, int32_t slot) {
    const int c = tid >> 3;
    stage_issue<F, 8>(p, sr, i, c, tid & 7, slot, counting, raw + (i & 1) * STG + c * RS, valid + (i & 1) * kSub + c);
  };

  /* ---- prologue: stage 0 goes in flight while this warp's 4 Q rows are
   * staged */
  {
    const int32_t slot0 = load_slot(0);
    const QRows<4> qv = q_load<F, 4>(p, t, h0 + 4 * warp, lane);
    if (n > 0) issue(0, slot0);
    cp_async_commit();
    k32t_q_store<F, 4, QS>(qv, lane, qrows + 4 * warp * QS, qscale + 4 * warp);
  }
  int32_t next_slot = load_slot(1);

  /* QK block: candidates r0, r0 + 8 (r0 = 16 ct + g), dim part kp */
  const int ct = warp & 1, kp = warp >> 1, r0 = 16 * ct + g;
  const uint8_t *qb = qrows + ((lane & 7) + 8 * (lane >> 4)) * QS + 16 * ((lane >> 3) & 1);
  /* softmax: head row, candidate quad */
  const int shead = tid >> 3, sq = tid & 7;
  float m_run = kNegInf, l_run = 0.f;
  /* PV: dims 64 warp .. + 63 (warp 7: the rope dims) */
  const bool rope_warp = warp == 7;
  float R = 0.f; /* running maximum of this warp's tile scales */
  float acc[4][4][4];
#pragma unroll
  for (int a = 0; a < 4; a++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[a][j][e] = 0.f;
  /* this lane's ldmatrix.trans row for PV: candidate (lane & 7) + 8 ((lane >> 3) & 1) of a k-step,
   * 16-byte column half lane >> 4 */
  const int pv_row = (lane & 7) + 8 * ((lane >> 3) & 1), pv_col = 16 * (lane >> 4);

  for (int i = 0; i < n; i++) {
    const int vb = (i & 1) * kSub;
    const uint8_t *st = raw + (i & 1) * STG;
    cp_async_wait<0>();
    __syncthreads(); /* B1: stage i landed (and Q staged); every warp is done with stage i - 1 */
    if (i + 1 < n) issue(i + 1, next_slot);
    cp_async_commit();
    next_slot = load_slot(i + 2);

    /* ---- 1. QK: S^T of candidates r0, r0 + 8 x 32 heads over part kp,
     * into PS block kp */
    {
      const uint8_t *k0 = st + r0 * RS, *k1 = k0 + 8 * RS;
      float *pp = ps + kp * DSK_MLA32_HEADS * PST;
#if DSK_MLA32T_RMW
      if (kp < 3) {
        k32t_qk_tile<F, QS, PST, false>(k0, k1, qb, 2 * kp, q4, pp, r0);
        k32t_qk_tile<F, QS, PST, true>(k0, k1, qb, 2 * kp + 1, q4, pp, r0);
      } else {
        k32t_qk_rope<F, QS, PST>(k0, k1, qb, q4, pp, r0);
        k32t_qk_tile<F, QS, PST, true>(k0, k1, qb, 6, q4, pp, r0);
      }
#else
      float s[4][4];
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[j][e] = 0.f;
      if (kp < 3) {
        k32t_qk_tile_r<F, QS>(k0, k1, qb, 2 * kp, q4, s);
        k32t_qk_tile_r<F, QS>(k0, k1, qb, 2 * kp + 1, q4, s);
      } else {
        k32t_qk_rope_r<F, QS>(k0, k1, qb, q4, s);
        k32t_qk_tile_r<F, QS>(k0, k1, qb, 6, q4, s);
      }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int h = 8 * j + 2 * q4;
        pp[h * PST + r0] = s[j][0];
        pp[(h + 1) * PST + r0] = s[j][1];
        pp[h * PST + r0 + 8] = s[j][2];
        pp[(h + 1) * PST + r0 + 8] = s[j][3];
      }
#endif
    }
    __syncthreads(); /* B2: partial scores ready */

    /* ---- 2. softmax of head `shead`, candidates 4 sq .. 4 sq + 3 */
    {
      const float *row = ps + shead * PST + 4 * sq;
      float4 x = *reinterpret_cast<const float4 *>(row);
#pragma unroll
      for (int k = 1; k < 4; k++) {
        const float4 y = *reinterpret_cast<const float4 *>(row + k * DSK_MLA32_HEADS * PST);
        x = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
      }
      const float qsl = qscale[shead] * p.scale_log2;
      const int32_t *vf = valid + vb + 4 * sq;
      x.x = vf[0] ? x.x * qsl : kNegInf;
      x.y = vf[1] ? x.y * qsl : kNegInf;
      x.z = vf[2] ? x.z * qsl : kNegInf;
      x.w = vf[3] ? x.w * qsl : kNegInf;
      float mx = fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      const float mn = mx > m_run + (float)LAZY ? mx : m_run;
      const float al = mn == m_run ? 1.f : fast_exp2(m_run - mn);
      m_run = mn;
      const float e0 = x.x == kNegInf ? 0.f : fast_exp2(x.x - mn);
      const float e1 = x.y == kNegInf ? 0.f : fast_exp2(x.y - mn);
      const float e2 = x.z == kNegInf ? 0.f : fast_exp2(x.z - mn);
      const float e3 = x.w == kNegInf ? 0.f : fast_exp2(x.w - mn);
      l_run = l_run * al + ((e0 + e1) + (e2 + e3));
      *reinterpret_cast<uint2 *>(ph + shead * PPS + 8 * sq) = make_uint2(pack_f16(e0, e1), pack_f16(e2, e3));
      *reinterpret_cast<uint2 *>(pb + shead * PPS + 8 * sq) = make_uint2(pack_bf16(e0, e1), pack_bf16(e2, e3));
      if (sq == 0) alpha[shead] = al;
    }
    __syncthreads(); /* B3: weights ready */

    /* ---- 3. PV: O^T of this warp's 64 dims x 32 heads */
    {
      float al[4][2];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const float2 a2 = *reinterpret_cast<const float2 *>(alpha + 8 * j + 2 * q4);
        al[j][0] = a2.x;
        al[j][1] = a2.y;
      }
      bool same = true;
#pragma unroll
      for (int j = 0; j < 4; j++) same = same && al[j][0] == 1.f && al[j][1] == 1.f;
      if (!__all_sync(0xffffffffu, same)) {
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
          for (int j = 0; j < 4; j++) {
            acc[a][j][0] *= al[j][0];
            acc[a][j][1] *= al[j][1];
            acc[a][j][2] *= al[j][0];
            acc[a][j][3] *= al[j][1];
          }
      }
      if (rope_warp) {
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
          uint32_t bq[4][2];
          k32t_p_frags<PPS>(pb, ks, lane, bq);
          const uint8_t *vr = st + (16 * ks + pv_row) * RS + C::ROPE + pv_col;
#pragma unroll
          for (int G = 0; G < 4; G++) {
            uint32_t v[4];
            ldmatrix_x4_trans(v, vr + 32 * G);
            const uint32_t a[4] = {v[0], v[2], v[1], v[3]};
#pragma unroll
            for (int j = 0; j < 4; j++) mma_bf16(acc[G][j], a, bq[j][0], bq[j][1]);
          }
        }
      } else {
        const float inv = fold_v_scale<2>(R, tile_scale<F>(st + lane * RS, warp),
                                          reinterpret_cast<float(&)[2][8][4]>(acc));
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
          const int c = 16 * ks + 2 * q4; /* B rows: candidates c, c + 1 (b0), c + 8, c + 9 (b1) */
          const uint32_t f01 = pack_f16(tile_scale<F>(st + c * RS, warp) * inv, tile_scale<F>(st + (c + 1) * RS, warp) * inv);
          const uint32_t f89 =
              pack_f16(tile_scale<F>(st + (c + 8) * RS, warp) * inv, tile_scale<F>(st + (c + 9) * RS, warp) * inv);
          uint32_t bq[4][2];
          k32t_p_frags<PPS>(ph, ks, lane, bq);
#pragma unroll
          for (int j = 0; j < 4; j++) {
            bq[j][0] = hmul2_u32(bq[j][0], f01);
            bq[j][1] = hmul2_u32(bq[j][1], f89);
          }
          const uint8_t *vr = st + (16 * ks + pv_row) * RS + 64 * warp + pv_col;
#pragma unroll
          for (int bb = 0; bb < 2; bb++) {
            uint32_t v[4];
            ldmatrix_x4_trans(v, vr + 32 * bb);
#pragma unroll
            for (int gi = 0; gi < 2; gi++) {
              uint32_t a[4];
              e4m3x4_to_f16x2x2(__byte_perm(v[2 * gi], 0, 0x3120), a[0], a[1]);
              e4m3x4_to_f16x2x2(__byte_perm(v[2 * gi + 1], 0, 0x3120), a[2], a[3]);
#pragma unroll
              for (int j = 0; j < 4; j++) mma_f16(acc[2 * bb + gi][j], a, bq[j][0], bq[j][1]);
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  /* ---- finish: each head's lse and output factor, then every warp writes
   * its dims: acc[G][j] entry e (head 8 j + 2 q4 + (e & 1)) is dim
   * 64 warp + 16 G + 2 g + (e >> 1) (nope), 448 + 16 G + g + 8 (e >> 1)
   * (rope) */
  k32_finish_heads(p, l_run, m_run, shead, sq, h0, t, split, fac);
  __syncthreads();
  const float rv = rope_warp ? 1.f : R;
#pragma unroll
  for (int j = 0; j < 4; j++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int hrow = 8 * j + 2 * q4 + e, h = h0 + hrow;
      if (h >= p.H) continue;
      const float f0 = fac[hrow], f = f0 * rv;
#pragma unroll
      for (int G = 0; G < 4; G++) {
        const float x0 = f0 == 0.f ? 0.f : acc[G][j][e] * f;
        const float x1 = f0 == 0.f ? 0.f : acc[G][j][2 + e] * f;
        if (!rope_warp) {
          const int d = 64 * warp + 16 * G + 2 * g;
          if (p.splits == 1)
            *reinterpret_cast<uint32_t *>(p.out + t * p.out_st + (int64_t)h * p.out_sh + d) =
                (uint32_t)f32_to_bf16_rne(x0) | ((uint32_t)f32_to_bf16_rne(x1) << 16);
          else
            *reinterpret_cast<float2 *>(p.part_o + ((t * p.H + h) * p.splits + split) * 512 + d) = make_float2(x0, x1);
        } else {
          const int d = C::NOPE + 16 * G + g;
          if (p.splits == 1) {
            uint16_t *o = p.out + t * p.out_st + (int64_t)h * p.out_sh;
            o[d] = f32_to_bf16_rne(x0);
            o[d + 8] = f32_to_bf16_rne(x1);
          } else {
            float *po = p.part_o + ((t * p.H + h) * p.splits + split) * 512;
            po[d] = x0;
            po[d + 8] = x1;
          }
        }
      }
    }
}
