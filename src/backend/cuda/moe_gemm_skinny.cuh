/* moe_gemm_skinny.cuh - the decode-shaped grouped FP8 x MXFP4 GEMM (v4;
 * docs/moe.md "CUDA kernels"). Included by moe_gemm.cu inside its anonymous
 * namespace, after GemmArgs and the fragment helpers it shares with the
 * tiled kernel.
 *
 * It serves BLOCK_M 64 (the decode tactic) for MXFP4 weights at split 1:
 * there an m-block holds a few live rows (one token, or a few, routed to the
 * block's expert), so the tiled kernel spends its time converting weights
 * for a 64-row tile that is mostly padding. This kernel swaps the operands:
 * the MMA's M is the weight rows (output columns, 16 per warp), its N the
 * live rows of the block in groups of 8, and each weight is converted once
 * per group.
 *
 * CTA = NW warps = 16 NW output columns of one m-block (grid as the tiled
 * kernel: x = column tiles, y/z = m-blocks). Per group of up to 8 live rows
 * (rows whose own m_indices entry is >= 0, in ascending order):
 *  - all threads copy the group's A rows (e4m3, K bytes each; missing rows
 *    zero-filled) into shared memory in fragment order: 8-byte chunk
 *    (kt, s, g, q) = K values 128 kt + 32 s + 8 q .. + 7 of group row g, and
 *    the rows' activation scales per K tile ([kt][8], x 2^7 as the tiled
 *    f16 path);
 *  - each warp streams its 16 weight rows through its own ring of
 *    ST K tiles (cp.async: 64 bytes per row per tile in a row of
 *    kSkPitch bytes, and the rows' scale words), with no block barrier;
 *  - per K tile and MX block s: lane (g, q) reads word q of block s of
 *    weight rows g and g + 8 (b_frag_mx_f16: the A operand, e2m1 * 2^-14),
 *    and 8 bytes of group row g (a_frag_f16 x 2^7: the B operand), both in
 *    the tiled kernel's K order, so each m16n8k16 MMA stays inside one MX
 *    block; the two MMAs of the block start from zero and are folded into
 *    the fp32 accumulator with the weight row's block scale times the
 *    group row's K-tile scale (the tiled kernel's arithmetic, transposed).
 * D is rounded once to bf16 and written for live rows and columns < N. */

constexpr int kSkPitch = 80; /* bytes per staged weight row: 64 + 16 keeps the 4-byte fragment reads conflict-free */

/* NW warps, ST = weight ring depth (K tiles of 128): 4, or 3 / 2 when the
 * A rows of a large K leave no room for 4 (DSv4-Pro's K 7168 at 8 warps) */
template <int NW, int ST>
struct Sk {
  static constexpr int THREADS = 32 * NW;
  static constexpr int RING = ST * NW * 16 * kSkPitch; /* weight rows */
  static constexpr int RING_S = ST * NW * 16 * 4;      /* their scale words */
  /* A in fragment order (8 K bytes per group row), its scales, the live rows */
  static __host__ __device__ constexpr int64_t smem(int64_t K) {
    return RING + RING_S + 8 * K + 8 * (K / 128) * 4 + 64 * 4 + 16;
  }
};

template <int NW, int ST>
__global__ void __launch_bounds__(32 * NW) moe_gemm_skinny_kernel(const GemmArgs p) {
  using S = Sk<NW, ST>;
  constexpr int kSkStages = ST;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int KT = p.KT;
  const int64_t K = (int64_t)KT * 128;
  uint8_t *s_ring = smem;
  uint32_t *s_rs = reinterpret_cast<uint32_t *>(smem + S::RING);
  uint8_t *s_a = smem + S::RING + S::RING_S;
  float *s_sa = reinterpret_cast<float *>(s_a + 8 * K);
  int *s_rows = reinterpret_cast<int *>(s_sa + 8 * KT);
  int *s_cnt = s_rows + 64;

  const int64_t mb = (int64_t)blockIdx.z * 65535 + blockIdx.y;
  if (mb >= p.mblocks) return;
  const int64_t m0 = mb * 64;
  const int64_t e = p.m_indices[m0]; /* the same word for every thread: the whole CTA returns together */
  if (e == -1) return;
  if (e < -1 || e >= p.E_local) {
    if (blockIdx.x == 0 && tid == 0 && p.counters) atomicAdd(p.counters, 1ull);
    return;
  }
  /* live rows of the block, ascending */
  if (tid < 32) {
    const bool l0 = p.m_indices[m0 + lane] >= 0, l1 = p.m_indices[m0 + 32 + lane] >= 0;
    const unsigned b0 = __ballot_sync(0xffffffffu, l0), b1 = __ballot_sync(0xffffffffu, l1);
    const unsigned below = (1u << lane) - 1u;
    if (l0) s_rows[__popc(b0 & below)] = lane;
    if (l1) s_rows[__popc(b0) + __popc(b1 & below)] = 32 + lane;
    if (lane == 0) *s_cnt = __popc(b0) + __popc(b1);
  }
  __syncthreads();
  const int nlive = *s_cnt;

  const int64_t nw0 = (int64_t)blockIdx.x * (16 * NW) + 16 * warp; /* first weight row of the warp */
  const bool wact = nw0 < p.N; /* N is a multiple of 128: a warp's 16 rows are all in or all out */
  const uint8_t *wsrc = p.B + e * p.B_group + (wact ? nw0 : 0) * p.B_row;
  const int32_t *ssrc = p.sfb + e * p.sfb_group + (wact ? nw0 : 0);
  uint8_t *ring = s_ring + warp * 16 * kSkPitch;
  uint32_t *rs = s_rs + warp * 16;
  /* this warp's copies of K tile kt into ring slot kt % kSkStages: lane l
   * takes row l >> 1, 16-byte chunks 2 (l & 1) and 2 (l & 1) + 1; lanes 0..15
   * the rows' scale words */
  auto issue = [&](int kt) {
    if (!wact) return;
    const int slot = kt % kSkStages;
    const int r = lane >> 1, c = 2 * (lane & 1);
    uint8_t *dst = ring + slot * NW * 16 * kSkPitch + r * kSkPitch + 16 * c;
    const uint8_t *src = wsrc + r * p.B_row + (int64_t)kt * 64 + 16 * c;
    dsk_ptx::cp_async16(dst, src, true);
    dsk_ptx::cp_async16(dst + 16, src + 16, true);
    if (lane < 16) dsk_ptx::cp_async4(rs + slot * NW * 16 + lane, ssrc + (int64_t)kt * p.sfb_T4 + lane, true);
  };

  for (int gb = 0; gb < nlive; gb += 8) {
    const int cnt = nlive - gb < 8 ? nlive - gb : 8;
    /* A rows of the group in fragment order: 16-byte chunk c of row g (K
     * bytes 16 c ..) goes to ((c >> 1) * 8 + g) * 32 + (c & 1) * 16 */
    const int nch = (int)(K / 16);
    for (int i = tid; i < 8 * nch; i += S::THREADS) {
      const int gr = i / nch, c = i - gr * nch;
      const bool v = gr < cnt;
      const uint8_t *src = v ? p.A + (m0 + s_rows[gb + gr]) * p.A_stride + 16 * c : p.A;
      dsk_ptx::cp_async16(s_a + ((c >> 1) * 8 + gr) * 32 + (c & 1) * 16, src, v);
    }
    for (int i = tid; i < 8 * KT; i += S::THREADS) {
      const int gr = i / KT, kt = i - gr * KT;
      float v = 0.f;
      if (gr < cnt) {
        const int64_t r = m0 + s_rows[gb + gr];
        v = ue8m0_exact(((uint32_t)p.sfa[(int64_t)(kt >> 2) * p.sfa_T4 + r] >> (8 * (kt & 3))) & 0xFFu) * kMxFold<true>;
      }
      s_sa[kt * 8 + gr] = v;
    }
    dsk_ptx::cp_async_commit();
#pragma unroll
    for (int st = 0; st < kSkStages - 1; st++) {
      if (st < KT) issue(st);
      dsk_ptx::cp_async_commit();
    }
    dsk_ptx::cp_async_wait<kSkStages - 1>(); /* this thread's A chunks landed */
    __syncthreads();                          /* ... and every thread's, and the scales */

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int kt = 0; kt < KT; kt++) {
      __syncwarp(); /* every lane finished reading the slot the refill overwrites */
      if (kt + kSkStages - 1 < KT) issue(kt + kSkStages - 1);
      dsk_ptx::cp_async_commit();
      dsk_ptx::cp_async_wait<kSkStages - 1>(); /* this lane's copies of tile kt landed */
      __syncwarp();                             /* ... and every lane's */
      if (!wact) continue;
      const int slot = kt % kSkStages;
      const uint8_t *wr = ring + slot * NW * 16 * kSkPitch;
      const uint32_t sw0 = rs[slot * NW * 16 + g], sw1 = rs[slot * NW * 16 + g + 8];
      const float2 sa = *reinterpret_cast<const float2 *>(s_sa + kt * 8 + 2 * q); /* group rows 2q, 2q + 1 */
#pragma unroll
      for (int s = 0; s < 4; s++) {
        const uint32_t w0 = *reinterpret_cast<const uint32_t *>(wr + g * kSkPitch + 16 * s + 4 * q);
        const uint32_t w1 = *reinterpret_cast<const uint32_t *>(wr + (g + 8) * kSkPitch + 16 * s + 4 * q);
        uint32_t x0[4], x1[4];
        b_frag_mx_f16(w0, x0[0], x0[1], x0[2], x0[3]); /* row g: (c0,c4) (c2,c6) | (c1,c5) (c3,c7) */
        b_frag_mx_f16(w1, x1[0], x1[1], x1[2], x1[3]); /* row g + 8 */
        const uint2 av = *reinterpret_cast<const uint2 *>(s_a + ((int64_t)(kt * 4 + s) * 8 + g) * 32 + 8 * q);
        uint32_t b[4];
        a_frag_f16<true>(av, b[0], b[1], b[2], b[3]);
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        const uint32_t a0[4] = {x0[0], x1[0], x0[1], x1[1]}, a1[4] = {x0[2], x1[2], x0[3], x1[3]};
        dsk_ptx::mma_f16(d, a0, b[0], b[1]);
        dsk_ptx::mma_f16(d, a1, b[2], b[3]);
        const float sb0 = ue8m0_fast((sw0 >> (8 * s)) & 0xFFu), sb1 = ue8m0_fast((sw1 >> (8 * s)) & 0xFFu);
        acc[0] = fmaf(d[0], sb0 * sa.x, acc[0]);
        acc[1] = fmaf(d[1], sb0 * sa.y, acc[1]);
        acc[2] = fmaf(d[2], sb1 * sa.x, acc[2]);
        acc[3] = fmaf(d[3], sb1 * sa.y, acc[3]);
      }
    }
    dsk_ptx::cp_async_wait<0>(); /* only empty groups remain */
    /* d rows = weight rows g, g + 8 (columns of D), d columns 2q, 2q + 1 = group rows */
    if (wact) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int j = 2 * q + h;
        if (j >= cnt) continue;
        uint16_t *drow = p.D + (m0 + s_rows[gb + j]) * p.D_stride;
        drow[nw0 + g] = (uint16_t)f32_to_bf16(acc[h]);
        drow[nw0 + g + 8] = (uint16_t)f32_to_bf16(acc[2 + h]);
      }
    }
    __syncthreads(); /* the group's A and ring are free for the next group */
  }
}
