/* sparse_mla_k32.cuh - the 32-head decode kernel (tactic heads per CTA 32).
 * Included inside the launcher's anonymous namespace (sparse_mla_decode.cu).
 *
 * CTA = 8 warps: warp w = (mg, dq) = (w / 4, w % 4) owns the m16 head tile
 * mg (heads h0 + 16 mg ..) and the dim quarter dq. Per stage of 32
 * candidates:
 *  1. the raw records (cp.async double buffer, invalid ones zero filled) are
 *     converted once to f16 (KVH, exact: e4m3 -> f16), shared by both head
 *     tiles and by QK and PV;
 *  2. QK: warp (mg, dq) scores its 16 heads against the 32 candidates over
 *     its 144 of the 576 dims (A: nope dims 128 dq.., scale tile dq, plus rope
 *     k-step dq; B: nope tiles 2 dq, 2 dq + 1, and for dq = 3 nope tile 6 plus
 *     the four rope k-steps); B fragments come from KVH (nope, f16) or the
 *     raw record (rope, bf16) by ldmatrix; Q's A fragments stay in registers
 *     for the whole kernel. Tile scales are applied in fp32 per candidate.
 *  3. the four quarter partials meet in shared memory; every warp of a head
 *     tile computes the same online softmax (as the 16-head kernel does);
 *  4. PV: warp (mg, dq) accumulates output dims 128 dq .. 128 dq + 127 as two
 *     64-dim halves with A = P * scale_c / R (R = the half's running maximum
 *     tile scale) and B from KVH by ldmatrix.trans; Format B's rope half
 *     (dims 448..511) is a bf16 MMA on the raw record with A = P.
 * Three barriers per stage. The finish (final output with the sink, or fp32
 * partials for the combine kernel) matches the 16-head kernel. */
constexpr int k32Threads = DSK_MLA32_THREADS;

template <int F>
__global__ void __launch_bounds__(DSK_MLA32_THREADS, 1) sparse_mla_k32_kernel(const Params p) {
  using C = Fmt<F>;
  constexpr int KVHS = DSK_MLA32_KVH_STRIDE(F); /* bytes */
  constexpr int QSTS = DSK_MLA32_QST_STRIDE(F); /* bytes */
  constexpr int PST = DSK_MLA_P_STRIDE;
  constexpr int KS = F == 1 ? 9 : 8;        /* QK k-steps of 16 dims per warp */
  constexpr int PPR = C::NOPE / 16;         /* 16-byte nope pieces per record */
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t *raw = smem + DSK_MLA32_OFF_RAW;
  uint8_t *kvh = smem + DSK_MLA32_OFF_KVH(F);
  float *Ps = reinterpret_cast<float *>(smem + DSK_MLA32_OFF_PS(F));
  uint8_t *qst = smem + DSK_MLA32_OFF_KVH(F); /* Q staging, before the first stage only */
  float *qscale = reinterpret_cast<float *>(smem + DSK_MLA32_OFF_QS(F));
  int32_t *valid = reinterpret_cast<int32_t *>(smem + DSK_MLA32_OFF_VALID(F));

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3;
  const int mg = warp >> 2, dq = warp & 3;
  const int hg = (int)(blockIdx.x % (unsigned)p.nhg);
  const int64_t t = blockIdx.x / (unsigned)p.nhg;
  const int split = blockIdx.y;
  const int h0 = hg * DSK_MLA32_HEADS;
  const bool counting = p.counters && hg == 0;
  asm volatile("griddepcontrol.launch_dependents;\n" ::);

  const StageRange sr = stage_range(p, t, split, counting, tid);
  const int n = sr.n;

  /* ---- stage issue: 8 threads per candidate (c = tid / 8) */
  auto load_slot = [&](int i) -> int32_t { return stage_slot(p, sr, t, i, tid >> 3); };
  auto issue = [&](int i, int32_t slot) {
    const int sb = i & 1, c = tid >> 3;
    stage_issue<F, 8>(p, sr, i, c, tid & 7, slot, counting, raw + (sb * kSub + c) * C::SREC, valid + sb * kSub + c);
  };

  /* ---- prologue: stage 0 in flight, then Q */
  if (n > 0) issue(0, load_slot(0));
  cp_async_commit();
  int32_t next_slot = load_slot(1);
  /* warp w stages heads 4w .. 4w+3 as rows of the Q staging area */
  stage_q<F>(p, t, h0 + warp * 4, lane, qst + warp * 4 * QSTS, QSTS, qst + warp * 4 * QSTS + 2 * C::NOPE, QSTS,
              qscale + warp * 4);
  __syncthreads(); /* Q staged */
  /* Q A fragments of this warp: k-step ks covers staged columns col(ks) ..
   * col(ks) + 15 (A: nope 128 dq + 16 ks, rope k-step 8 at 512 + 16 dq;
   * B: 128 dq + 16 ks, which for dq = 3 runs through nope tile 6 into the
   * rope at 448) */
  uint32_t qa[KS][4];
#pragma unroll
  for (int ks = 0; ks < KS; ks++) {
    const int col = (F == 1 && ks == 8) ? 512 + 16 * dq : 128 * dq + 16 * ks;
    const int row = 16 * mg + ((lane >> 3) & 1) * 8 + (lane & 7);
    ldmatrix_x4(qa[ks], qst + row * QSTS + 2 * (col + (lane >> 4) * 8));
  }
  const float qs0 = qscale[16 * mg + g], qs1 = qscale[16 * mg + g + 8];

  /* ---- running state (as in the 16-head kernel) */
  float m2[2] = {kNegInf, kNegInf};
  float lsum[2] = {0.f, 0.f};
  float acc[2][8][4];
  float R[2] = {0.f, 0.f};
#pragma unroll
  for (int hh = 0; hh < 2; hh++)
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int i = 0; i < 4; i++) acc[hh][j][i] = 0.f;

  /* per-lane ldmatrix row offsets: QK (non-trans) rows are candidates,
   * PV (trans) rows are candidates too */
  const int qk_cand = ((lane >> 4) & 1) * 8 + (lane & 7), qk_dim = ((lane >> 3) & 1) * 8;
  const int pv_cand = ((lane >> 3) & 1) * 8 + (lane & 7), pv_dim = ((lane >> 4) & 1) * 8;
  const bool b_rope_warp = F == 2 && dq == 3;

  for (int i = 0; i < n; i++) {
    const int st = i & 1;
    cp_async_wait<0>();
    __syncthreads(); /* S1: stage i landed; every warp is done with stage i - 1 */
    if (i + 1 < n) issue(i + 1, next_slot);
    cp_async_commit();
    next_slot = load_slot(i + 2);
    const uint8_t *kb = raw + st * kSub * C::SREC;

    /* ---- 1. convert the nope bytes of the 32 records to f16, 8 bytes per
     * thread and step (a warp's 16-byte stores then fill consecutive banks) */
#pragma unroll
    for (int pc = tid; pc < kSub * PPR * 2; pc += k32Threads) {
      const int c = pc / (2 * PPR), o = (pc % (2 * PPR)) * 8;
      const uint2 v = *reinterpret_cast<const uint2 *>(kb + c * C::SREC + o);
      uint32_t h[4];
      e4m3x4_to_f16x2x2(v.x, h[0], h[1]);
      e4m3x4_to_f16x2x2(v.y, h[2], h[3]);
      *reinterpret_cast<uint4 *>(kvh + c * KVHS + 2 * o) = make_uint4(h[0], h[1], h[2], h[3]);
    }
    __syncthreads(); /* S2: KVH ready */

    /* ---- 2. QK partials of this warp: 16 heads x 32 candidates */
    {
      float ta[4][4], tb[4][4];
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) ta[j][e] = tb[j][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < KS; ks++) {
        const bool second = F == 1 ? ks == 8 : ks >= 4; /* tb: A rope; B tile 2dq+1 or rope */
        const bool rope = F == 1 ? ks == 8 : (b_rope_warp && ks >= 4);
#pragma unroll
        for (int half = 0; half < 2; half++) {
          const int cand = 16 * half + qk_cand;
          uint32_t b[4];
          if (!rope) {
            const int dim = 128 * dq + 16 * ks + qk_dim;
            ldmatrix_x4(b, kvh + cand * KVHS + 2 * dim);
          } else {
            const int rdim = (F == 1 ? 16 * dq : 16 * (ks - 4)) + qk_dim;
            ldmatrix_x4(b, kb + cand * C::SREC + C::ROPE + 2 * rdim);
          }
          float(&x0)[4] = second ? tb[2 * half] : ta[2 * half];
          float(&x1)[4] = second ? tb[2 * half + 1] : ta[2 * half + 1];
          if (rope) {
            mma_bf16(x0, qa[ks], b[0], b[1]);
            mma_bf16(x1, qa[ks], b[2], b[3]);
          } else {
            mma_f16(x0, qa[ks], b[0], b[1]);
            mma_f16(x1, qa[ks], b[2], b[3]);
          }
        }
      }
      /* scale: A: ta * s(tile dq) * qs + tb; B: (ta * s(2dq) + tb * s(2dq+1)) * qs,
       * or for dq = 3: ta * s(6) * qs + tb */
      float *Sw = Ps + (mg * 4 + dq) * 16 * PST;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int cc = j * 8 + 2 * q4;
        const uint8_t *r0 = kb + cc * C::SREC, *r1 = r0 + C::SREC;
        const int tile_a = F == 1 ? dq : 2 * dq;
        const float sa0 = tile_scale<F>(r0, tile_a), sa1 = tile_scale<F>(r1, tile_a);
        float v[4];
        if (F == 1 || b_rope_warp) {
          v[0] = ta[j][0] * sa0 * qs0 + tb[j][0];
          v[1] = ta[j][1] * sa1 * qs0 + tb[j][1];
          v[2] = ta[j][2] * sa0 * qs1 + tb[j][2];
          v[3] = ta[j][3] * sa1 * qs1 + tb[j][3];
        } else {
          const float sb0 = tile_scale<F>(r0, tile_a + 1), sb1 = tile_scale<F>(r1, tile_a + 1);
          v[0] = (ta[j][0] * sa0 + tb[j][0] * sb0) * qs0;
          v[1] = (ta[j][1] * sa1 + tb[j][1] * sb1) * qs0;
          v[2] = (ta[j][2] * sa0 + tb[j][2] * sb0) * qs1;
          v[3] = (ta[j][3] * sa1 + tb[j][3] * sb1) * qs1;
        }
        *reinterpret_cast<float2 *>(Sw + g * PST + cc) = make_float2(v[0], v[1]);
        *reinterpret_cast<float2 *>(Sw + (g + 8) * PST + cc) = make_float2(v[2], v[3]);
      }
    }
    __syncthreads(); /* S3: partial scores ready */

    /* ---- 3. softmax (identical in the 4 warps of a head tile) */
    float pv[2][2][2][2]; /* [ks][hi][row][pair] */
    stage_softmax(Ps + mg * 4 * 16 * PST, valid + st * kSub, p.scale_log2, g, q4, m2, lsum, acc, pv);

    /* ---- 4. PV: output dims 128 dq .. + 127, two 64-dim halves */
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int db = dq * 128 + hh * 64;
      const bool rope_half = b_rope_warp && hh == 1;
      const int tile = F == 1 ? dq : 2 * dq + hh;
      float inv = 1.f;
      if (!rope_half) inv = fold_v_scale(R[hh], tile_scale<F>(kb + lane * C::SREC, tile), acc[hh]);
#pragma unroll
      for (int ks = 0; ks < 2; ks++) {
        const int ca = ks * 16 + 2 * q4; /* A columns: candidates ca, ca+1, ca+8, ca+9 */
        uint32_t a[4];
        if (rope_half) {
          a[0] = pack_bf16(pv[ks][0][0][0], pv[ks][0][0][1]);
          a[1] = pack_bf16(pv[ks][0][1][0], pv[ks][0][1][1]);
          a[2] = pack_bf16(pv[ks][1][0][0], pv[ks][1][0][1]);
          a[3] = pack_bf16(pv[ks][1][1][0], pv[ks][1][1][1]);
        } else {
          const uint8_t *r0 = kb + ca * C::SREC;
          const float s0 = tile_scale<F>(r0, tile) * inv, s1 = tile_scale<F>(r0 + C::SREC, tile) * inv;
          const float s2 = tile_scale<F>(r0 + 8 * C::SREC, tile) * inv;
          const float s3 = tile_scale<F>(r0 + 9 * C::SREC, tile) * inv;
          a[0] = pack_f16(pv[ks][0][0][0] * s0, pv[ks][0][0][1] * s1);
          a[1] = pack_f16(pv[ks][0][1][0] * s0, pv[ks][0][1][1] * s1);
          a[2] = pack_f16(pv[ks][1][0][0] * s2, pv[ks][1][0][1] * s3);
          a[3] = pack_f16(pv[ks][1][1][0] * s2, pv[ks][1][1][1] * s3);
        }
        const int cand = ks * 16 + pv_cand;
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
          const int d = db + 16 * jj + pv_dim;
          uint32_t b[4];
          if (rope_half) {
            ldmatrix_x4_trans(b, kb + cand * C::SREC + C::ROPE + 2 * (d - 448));
            mma_bf16(acc[hh][2 * jj], a, b[0], b[1]);
            mma_bf16(acc[hh][2 * jj + 1], a, b[2], b[3]);
          } else {
            ldmatrix_x4_trans(b, kvh + cand * KVHS + 2 * d);
            mma_f16(acc[hh][2 * jj], a, b[0], b[1]);
            mma_f16(acc[hh][2 * jj + 1], a, b[2], b[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  /* ---- finish: row sums over the 4 lanes of a row, then output or partials.
   * acc[hh][j] column n is dim 128 dq + 64 hh + 8 j + n. */
  float l[2] = {lsum[0], lsum[1]};
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    l[0] += __shfl_xor_sync(0xffffffffu, l[0], o);
    l[1] += __shfl_xor_sync(0xffffffffu, l[1], o);
  }
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    const int h = h0 + 16 * mg + g + 8 * rr;
    if (h >= p.H) continue;
    const bool empty = !(l[rr] > 0.f);
    const float lse = empty ? kNegInf : (m2[rr] + log2f(l[rr])) * 0.69314718055994531f;
    if (p.splits == 1) {
      float fac = 0.f;
      if (!empty) {
        fac = 1.f / l[rr];
        if (p.sink) fac *= 1.f / (1.f + expf(p.sink[h] - lse)); /* sigmoid(lse - sink) */
      }
      uint16_t *orow = p.out + t * p.out_st + (int64_t)h * p.out_sh;
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const float f = fac * (b_rope_warp && hh == 1 ? 1.f : R[hh]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const float x0 = empty ? 0.f : acc[hh][j][2 * rr] * f;
          const float x1 = empty ? 0.f : acc[hh][j][2 * rr + 1] * f;
          const int dim = dq * 128 + hh * 64 + 8 * j + 2 * q4;
          *reinterpret_cast<uint32_t *>(orow + dim) =
              (uint32_t)f32_to_bf16_rne(x0) | ((uint32_t)f32_to_bf16_rne(x1) << 16);
        }
      }
      if (p.lse && q4 == 0 && dq == 0) p.lse[t * p.lse_st + (int64_t)h * p.lse_sh] = lse;
    } else {
      const int64_t part = (t * p.H + h) * p.splits + split;
      float *po = p.part_o + part * 512;
      const float inv_l = empty ? 0.f : 1.f / l[rr];
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const float f = inv_l * (b_rope_warp && hh == 1 ? 1.f : R[hh]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const int dim = dq * 128 + hh * 64 + 8 * j + 2 * q4;
          *reinterpret_cast<float2 *>(po + dim) = make_float2(empty ? 0.f : acc[hh][j][2 * rr] * f,
                                                              empty ? 0.f : acc[hh][j][2 * rr + 1] * f);
        }
      }
      if (q4 == 0 && dq == 0) p.part_lse[part] = lse;
    }
  }
}
