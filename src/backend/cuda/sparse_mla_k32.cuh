/* sparse_mla_k32.cuh - the 32-head decode kernel (tactic heads per CTA 32).
 * Included inside the launcher's anonymous namespace (sparse_mla_decode.cu).
 *
 * CTA = 8 warps, 32 heads (two m16 tiles) of one query row, one split of
 * the row's stages. The design point (docs/design.md, "32-head decode
 * kernel"): every candidate's e4m3 bytes are converted to f16 once per CTA
 * and then feed 2 head tiles x (QK + PV); no warp repeats another warp's
 * work. Per stage of 32 candidates, four phases separated by barriers:
 *  1. convert: the raw records (cp.async, invalid ones zero filled, never
 *     read) become KVH rows (nope f16, exact; rope bf16 copied) and the
 *     fp32 tile-scale table SC [tile][candidate]; then the next stage's
 *     copies are issued into the raw buffer, in flight during 2-4.
 *  2. QK, Format A: warp w = (head tile w & 1, candidates 8 (w >> 1) .. + 7)
 *     scores its 16 x 8 block over all Dqk dims: A = Q (nope f16 by
 *     ldmatrix from QN; rope bf16 fragments in registers), B = KVH by
 *     ldmatrix. Format B: warp w = (head tile w & 1, candidates
 *     16 ((w >> 1) & 1) .. + 15, dim half w >> 2: scale tiles 0-3, or tiles
 *     4-6 and the rope dims with A from QR), so each Q fragment feeds two
 *     MMAs; the halves' partial scores go to two PS blocks that the softmax
 *     adds. Each scale tile's partial sum is multiplied by its candidate's
 *     tile scale in fp32 (exact for arbitrary Format A scales). Scores go to
 *     PS in the log2 domain, invalid candidates as -inf.
 *  3. softmax: thread (head tid / 8, candidates 4 (tid % 8) .. + 3) updates
 *     its head's running max (lazily: only when the stage's maximum
 *     exceeds it by more than kLazyLog2, a factor 2^8) and partial sum and
 *     turns PS into weights; the head's rescale factor goes to ALPHA.
 *     Invalid candidates get weight exactly 0 and no (-inf) - (-inf) is
 *     formed.
 *  4. PV: warp w owns output dims 64 w .. 64 w + 63 of all 32 heads
 *     (2 x 8 n-tiles, 64 fp32 accumulators): A = P * scale_c / R (R = the
 *     warp's running maximum tile scale, so A stays in [0, 1]; f16), B = KVH
 *     by ldmatrix.trans; Format B's rope dims (warp 7) are a bf16 MMA with
 *     A = P.
 * Output column n of n-tile j of warp w is dim 64 w + 8 j + n. The finish
 * (final output with the sink, or fp32 partials for the combine kernel)
 * follows the 16-head kernel. */
constexpr int k32Threads = DSK_MLA32_THREADS;

/* Phase 4 of one stage for one warp: the two k-steps of 16 candidates.
 * ROPE: Format B's rope dims (bf16, A = P; rows of KHS bytes with the rope
 * at byte ROFF: the f16 stage here, the raw records in the FAST kernel);
 * else nope dims 64 warp .. with A = P * scale_c * inv (f16). */
template <int F, bool ROPE, int KHS = DSK_MLA32_KVH_STRIDE(F), int ROFF = 2 * Fmt<F>::NOPE>
__device__ __forceinline__ void k32_pv(const float *ps, const float *sc, const uint8_t *kvh, int vtile, float inv,
                                       int warp, int lane, float (&acc)[2][8][4]) {
  using C = Fmt<F>;
  constexpr int PST = DSK_MLA32_PS_STRIDE;
  const int g = lane >> 2, q4 = lane & 3;
#pragma unroll
  for (int ks = 0; ks < 2; ks++) {
    const int ca = 16 * ks + 2 * q4; /* A columns: candidates ca, ca+1, ca+8, ca+9 */
    float f0 = 1.f, f1 = 1.f, f8 = 1.f, f9 = 1.f;
    if (!ROPE) {
      const float2 s01 = *reinterpret_cast<const float2 *>(sc + vtile * kSub + ca);
      const float2 s89 = *reinterpret_cast<const float2 *>(sc + vtile * kSub + ca + 8);
      f0 = s01.x * inv;
      f1 = s01.y * inv;
      f8 = s89.x * inv;
      f9 = s89.y * inv;
    }
    uint32_t a[2][4];
#pragma unroll
    for (int m = 0; m < 2; m++) {
      const float *p0 = ps + (16 * m + g) * PST + ca, *p1 = p0 + 8 * PST;
      const float2 x0 = *reinterpret_cast<const float2 *>(p0), x1 = *reinterpret_cast<const float2 *>(p1);
      const float2 x2 = *reinterpret_cast<const float2 *>(p0 + 8), x3 = *reinterpret_cast<const float2 *>(p1 + 8);
      if (ROPE) {
        a[m][0] = pack_bf16(x0.x, x0.y);
        a[m][1] = pack_bf16(x1.x, x1.y);
        a[m][2] = pack_bf16(x2.x, x2.y);
        a[m][3] = pack_bf16(x3.x, x3.y);
      } else {
        a[m][0] = pack_f16(x0.x * f0, x0.y * f1);
        a[m][1] = pack_f16(x1.x * f0, x1.y * f1);
        a[m][2] = pack_f16(x2.x * f8, x2.y * f9);
        a[m][3] = pack_f16(x3.x * f8, x3.y * f9);
      }
    }
    const int cand = 16 * ks + ((lane >> 3) & 1) * 8 + (lane & 7);
    const uint8_t *vrow = kvh + cand * KHS + (ROPE ? ROFF : 128 * warp) + 2 * ((lane >> 4) * 8);
#pragma unroll
    for (int jj = 0; jj < 4; jj++) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vrow + 32 * jj);
#pragma unroll
      for (int m = 0; m < 2; m++) {
        if (ROPE) {
          mma_bf16(acc[m][2 * jj], a[m], b[0], b[1]);
          mma_bf16(acc[m][2 * jj + 1], a[m], b[2], b[3]);
        } else {
          mma_f16(acc[m][2 * jj], a[m], b[0], b[1]);
          mma_f16(acc[m][2 * jj + 1], a[m], b[2], b[3]);
        }
      }
    }
  }
}

/* Phase 2 for Format B: nope scale tiles T0 .. T1 - 1 of one warp's 16 x 16
 * block (head tile rows by qa, candidates c .. c + 15 by kb: n-tile j is
 * candidates 8 j ..). Each A fragment (Q) feeds both n-tiles. Each tile's
 * partial sum is multiplied by its candidate's tile scale in fp32. */
template <int F, int T0, int T1>
__device__ __forceinline__ void k32_qk_tiles(const uint8_t *qa, const uint8_t *kb, const float *sc, int cand,
                                             float (&s)[2][4]) {
  using C = Fmt<F>;
  constexpr int KHS = DSK_MLA32_KVH_STRIDE(F);
  constexpr int KPT = C::TILE / 16;
#pragma unroll
  for (int tile = T0; tile < T1; tile++) {
    float ta[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < KPT; kk += 2) {
      const int k0 = tile * KPT + kk;
      uint32_t a0[4], a1[4], b[4], b1[4];
      ldmatrix_x4(a0, qa + 32 * k0);
      ldmatrix_x4(a1, qa + 32 * (k0 + 1));
      ldmatrix_x4(b, kb + 32 * k0);
      ldmatrix_x4(b1, kb + 8 * KHS + 32 * k0);
      mma_f16(ta[0], a0, b[0], b[1]);
      mma_f16(ta[1], a0, b1[0], b1[1]);
      mma_f16(ta[0], a1, b[2], b[3]);
      mma_f16(ta[1], a1, b1[2], b1[3]);
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const float2 scl = *reinterpret_cast<const float2 *>(sc + tile * kSub + cand + 8 * j);
      s[j][0] += ta[j][0] * scl.x;
      s[j][1] += ta[j][1] * scl.y;
      s[j][2] += ta[j][2] * scl.x;
      s[j][3] += ta[j][3] * scl.y;
    }
  }
}

/* Phase 3 of one stage: thread (head `shead`, candidates 4 sq .. 4 sq + 3)
 * adds its NPS partial-score blocks, updates the head's running maximum
 * (lazily: only when the stage's maximum exceeds it by more than LAZY, so
 * the weights stay <= 2^LAZY) and its partial sum, writes the weights over
 * block 0 and the head's rescale factor to ALPHA. */
template <int NPS, int LAZY = (int)kLazyLog2>
__device__ __forceinline__ void k32_softmax(float *ps, float *alpha, int shead, int sq, float &m_run, float &l_run) {
  constexpr int PST = DSK_MLA32_PS_STRIDE;
  constexpr int PSB = DSK_MLA32_HEADS * PST;
  float *row = ps + shead * PST + 4 * sq;
  float4 x = *reinterpret_cast<const float4 *>(row);
  if constexpr (NPS == 2) { /* the two dim halves' partial scores */
    const float4 x1 = *reinterpret_cast<const float4 *>(row + PSB);
    x = make_float4(x.x + x1.x, x.y + x1.y, x.z + x1.z, x.w + x1.w);
  }
  float mx = fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
  /* lazy maximum: the running maximum moves only when the stage's
   * maximum exceeds it by more than kLazyLog2, so most stages keep
   * alpha = 1 for all 32 heads and PV skips the rescale; the weights
   * stay <= 2^kLazyLog2 (f16 A operand: far from overflow) */
  const float mn = mx > m_run + (float)LAZY ? mx : m_run;
  const float al = mn == m_run ? 1.f : fast_exp2(m_run - mn);
  m_run = mn;
  const float e0 = x.x == kNegInf ? 0.f : fast_exp2(x.x - mn);
  const float e1 = x.y == kNegInf ? 0.f : fast_exp2(x.y - mn);
  const float e2 = x.z == kNegInf ? 0.f : fast_exp2(x.z - mn);
  const float e3 = x.w == kNegInf ? 0.f : fast_exp2(x.w - mn);
  l_run = l_run * al + ((e0 + e1) + (e2 + e3));
  *reinterpret_cast<float4 *>(row) = make_float4(e0, e1, e2, e3);
  if (sq == 0) alpha[shead] = al;
}

/* Phase 4's rescale of a PV warp's accumulators (heads g, g+8, 16+g, 24+g
 * of the thread) by the heads' ALPHA; skipped when no head of the warp's
 * rows moved its maximum. */
__device__ __forceinline__ void k32_rescale(const float *alpha, int g, float (&acc)[2][8][4]) {
  const float al[4] = {alpha[g], alpha[g + 8], alpha[16 + g], alpha[24 + g]};
  if (!__all_sync(0xffffffffu, al[0] == 1.f && al[1] == 1.f && al[2] == 1.f && al[3] == 1.f)) {
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
      for (int j = 0; j < 8; j++) {
        acc[a][j][0] *= al[2 * a];
        acc[a][j][1] *= al[2 * a];
        acc[a][j][2] *= al[2 * a + 1];
        acc[a][j][3] *= al[2 * a + 1];
      }
  }
}

/* The finish's first step: head `shead`'s sum over its 8 softmax threads,
 * its lse (or the split's partial lse) and output factor (FAC; 0 for an
 * empty row or a +inf sink). */
__device__ __forceinline__ void k32_finish_heads(const Params &p, float l_run, float m_run, int shead, int sq, int h0,
                                                 int64_t t, int split, float *fac) {
  float l = l_run;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  l += __shfl_xor_sync(0xffffffffu, l, 4);
  const int h = h0 + shead;
  if (sq == 0) {
    const bool empty = !(l > 0.f);
    const float lse = empty ? kNegInf : (m_run + log2f(l)) * 0.69314718055994531f;
    float f = empty ? 0.f : 1.f / l;
    if (h < p.H) {
      if (p.splits == 1) {
        if (!empty && p.sink) f *= 1.f / (1.f + expf(p.sink[h] - lse)); /* sigmoid(lse - sink) */
        if (p.lse) p.lse[t * p.lse_st + (int64_t)h * p.lse_sh] = lse;
      } else {
        p.part_lse[(t * p.H + h) * p.splits + split] = lse;
      }
    }
    fac[shead] = f;
  }
}

/* Format B's (and the FAST kernel's) QK of the rope dims for one warp's
 * 16 x 16 block: bf16 MMAs, A = Q's rope rows (qr: this lane's ldmatrix row
 * address), B = the candidates' rope rows (kr: this lane's row address; rows
 * of RS bytes, n-tile 1 eight rows further). */
template <int RS>
__device__ __forceinline__ void k32_qk_rope(const uint8_t *qr, const uint8_t *kr, float (&sb)[2][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; kk += 2) {
    uint32_t a0[4], a1[4], b[4], b1[4];
    ldmatrix_x4(a0, qr + 32 * kk);
    ldmatrix_x4(a1, qr + 32 * (kk + 1));
    ldmatrix_x4(b, kr + 32 * kk);
    ldmatrix_x4(b1, kr + 8 * RS + 32 * kk);
    mma_bf16(sb[0], a0, b[0], b[1]);
    mma_bf16(sb[1], a0, b1[0], b1[1]);
    mma_bf16(sb[0], a1, b[2], b[3]);
    mma_bf16(sb[1], a1, b1[2], b1[3]);
  }
}

/* Stores one warp's 16 x 16 block of partial scores (head tile mt,
 * candidates cand, cand + 1 and + 8 of this thread) into partial-score
 * block `half`, in the log2 domain; an invalid candidate is -inf in block 0
 * and 0 in block 1, so the softmax's sum is -inf. */
__device__ __forceinline__ void k32_store_scores(float *ps, int half, int mt, int g, int cand, const int32_t *valid,
                                                 float scale_log2, const float (&sb)[2][4]) {
  constexpr int PST = DSK_MLA32_PS_STRIDE;
  const float inv_val = half == 0 ? kNegInf : 0.f;
#pragma unroll
  for (int j = 0; j < 2; j++) {
    const int c0 = cand + 8 * j;
    const bool v0 = valid[c0] != 0, v1 = valid[c0 + 1] != 0;
    float *r0 = ps + half * DSK_MLA32_HEADS * PST + (16 * mt + g) * PST + c0;
    *reinterpret_cast<float2 *>(r0) =
        make_float2(v0 ? sb[j][0] * scale_log2 : inv_val, v1 ? sb[j][1] * scale_log2 : inv_val);
    *reinterpret_cast<float2 *>(r0 + 8 * PST) =
        make_float2(v0 ? sb[j][2] * scale_log2 : inv_val, v1 ? sb[j][3] * scale_log2 : inv_val);
  }
}

/* The end of one warp's QK over a dim half (Format B here, both formats in
 * sparse_mla_k32f8.cuh): the Q pre-scale of its head rows, the bf16 rope
 * dims in half 1 (A = Q's rope rows by qr, B = the candidates' rope rows by
 * kr, rows of RS bytes), and the store of the partial scores. */
template <int RS>
__device__ __forceinline__ void k32_qk_half_end(float *ps, const float *qscale, const uint8_t *qr, const uint8_t *kr,
                                                int half, int mt, int g, int cand, const int32_t *valid,
                                                float scale_log2, float (&sb)[2][4]) {
  const float qs0 = qscale[16 * mt + g], qs1 = qscale[16 * mt + g + 8];
#pragma unroll
  for (int j = 0; j < 2; j++) {
    sb[j][0] *= qs0;
    sb[j][1] *= qs0;
    sb[j][2] *= qs1;
    sb[j][3] *= qs1;
  }
  if (half == 1) k32_qk_rope<RS>(qr, kr, sb);
  k32_store_scores(ps, half, mt, g, cand, valid, scale_log2, sb);
}

/* The finish's output of one accumulator row pair (m, rr) of a PV warp
 * whose n-tile j holds dims 64 warp + 8 j + n (k32_pv's order): the final
 * bf16 output, or the split's fp32 partial. f0 = the head's factor (0: write
 * zeros), f = f0 times the warp's V-scale normalisation. */
__device__ __forceinline__ void k32_write_ntiles(const Params &p, int64_t t, int h, int split, int warp, int q4,
                                                 const float (&am)[8][4], int rr, float f0, float f) {
  if (p.splits == 1) {
    uint16_t *orow = p.out + t * p.out_st + (int64_t)h * p.out_sh + 64 * warp + 2 * q4;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const float x0 = f0 == 0.f ? 0.f : am[j][2 * rr] * f;
      const float x1 = f0 == 0.f ? 0.f : am[j][2 * rr + 1] * f;
      *reinterpret_cast<uint32_t *>(orow + 8 * j) =
          (uint32_t)f32_to_bf16_rne(x0) | ((uint32_t)f32_to_bf16_rne(x1) << 16);
    }
  } else {
    float *po = p.part_o + ((t * p.H + h) * p.splits + split) * 512 + 64 * warp + 2 * q4;
#pragma unroll
    for (int j = 0; j < 8; j++)
      *reinterpret_cast<float2 *>(po + 8 * j) =
          make_float2(f0 == 0.f ? 0.f : am[j][2 * rr] * f, f0 == 0.f ? 0.f : am[j][2 * rr + 1] * f);
  }
}

/* Two CTAs per SM on sm_90 (128 registers: the H200 has the shared memory
 * for two); one on SM120, where ~99 KB per SM holds one CTA anyway. On the
 * H200 one CTA per SM without the register cap (200-223 registers, no
 * spills) was 1.25-1.3x slower at large T (docs/benchmarks.md, v9b). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define DSK_MLA32_MIN_BLOCKS 1
#else
#define DSK_MLA32_MIN_BLOCKS 2
#endif
template <int F>
__global__ void __launch_bounds__(DSK_MLA32_THREADS, DSK_MLA32_MIN_BLOCKS) sparse_mla_k32_kernel(const Params p) {
  using C = Fmt<F>;
  constexpr int QNS = DSK_MLA32_QN_STRIDE(F);  /* bytes */
  constexpr int KHS = DSK_MLA32_KVH_STRIDE(F); /* bytes */
  constexpr int PST = DSK_MLA32_PS_STRIDE;     /* fp32 */
  constexpr int KPT = C::TILE / 16;            /* k-steps per scale tile */
  constexpr int NP8 = C::NOPE / 8;             /* 8-byte nope pieces per record */
  static_assert(DSK_MLA32_NT(F) == C::NT, "tile count");
  static_assert(kSub * NP8 % DSK_MLA32_THREADS == 0, "conversion pieces per thread");
  static_assert(kSub * C::NT <= DSK_MLA32_THREADS && kSub * 8 == DSK_MLA32_THREADS, "one piece per thread");
  constexpr bool QKH = F == 2; /* QK over two dim halves (Format B) */
  static_assert(!QKH || (C::NT == 7 && C::TILE == 64), "Format B QK halves: scale tiles 0-3 | 4-6 + rope");
  constexpr int NT0 = 4; /* scale tiles of dim half 0 */
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t *qn = smem + DSK_MLA32_OFF_QN;
  uint8_t *raw = smem + DSK_MLA32_OFF_RAW(F);
  uint8_t *kvh = smem + DSK_MLA32_OFF_KVH(F);
  float *sc = reinterpret_cast<float *>(smem + DSK_MLA32_OFF_SC(F));
  float *ps = reinterpret_cast<float *>(smem + DSK_MLA32_OFF_PS(F));
  float *alpha = reinterpret_cast<float *>(smem + DSK_MLA32_OFF_ALPHA(F));
  float *fac = reinterpret_cast<float *>(smem + DSK_MLA32_OFF_FAC(F));
  float *qscale = reinterpret_cast<float *>(smem + DSK_MLA32_OFF_QS(F));
  int32_t *valid = reinterpret_cast<int32_t *>(smem + DSK_MLA32_OFF_VALID(F));
  uint8_t *qrope = smem + DSK_MLA32_OFF_QR(F); /* Format B only */
  constexpr int QRS = DSK_MLA32_QR_STRIDE;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3;
  const int hg = (int)(blockIdx.x % (unsigned)p.nhg);
  const int64_t t = blockIdx.x / (unsigned)p.nhg;
  const int split = blockIdx.y;
  const int h0 = hg * DSK_MLA32_HEADS;
  const bool counting = p.counters && hg == 0;
  pdl_launch_dependents();

  const StageRange sr = stage_range(p, t, split, counting, tid);
  const int n = sr.n;

  /* ---- stage issue: 8 threads per candidate (c = tid / 8) */
  auto load_slot = [&](int i) -> int32_t { return stage_slot(p, sr, t, i, tid >> 3); };
  auto issue = [&](int i, int32_t slot) {
    const int c = tid >> 3;
    stage_issue<F, 8>(p, sr, i, c, tid & 7, slot, counting, raw + c * C::SREC, valid + (i & 1) * kSub + c);
  };

  /* ---- prologue: stage 0's slot ids and this warp's 4 Q rows load
   * together; stage 0 goes in flight; Q is converted and stored (nope to
   * QN, rope rows to the KVH area until the first stage) */
  {
    const int32_t slot0 = load_slot(0);
    const QRows<4> qrows = q_load<F, 4>(p, t, h0 + 4 * warp, lane);
    if (n > 0) issue(0, slot0);
    cp_async_commit();
    if constexpr (QKH)
      q_store<F, false, 4>(qrows, lane, qn + 4 * warp * QNS, QNS, qrope + 4 * warp * QRS, QRS, qscale + 4 * warp, 0);
    else
      q_store<F, false, 4>(qrows, lane, qn + 4 * warp * QNS, QNS, kvh + 4 * warp * KHS, KHS, qscale + 4 * warp, 0);
  }
  int32_t next_slot = load_slot(1);
  __syncthreads(); /* Q staged */

  /* QK block of this warp. Format A: head tile mt, candidates 8 nt ..,
   * all dims. Format B: head tile mt, candidates 16 (nt & 1) .., dim half
   * nt >> 1 (scale tiles 0-3, or tiles 4-6 and the rope dims) */
  const int mt = warp & 1, nt = warp >> 1;
  const int qk_c0 = QKH ? 16 * (nt & 1) : 8 * nt; /* first candidate */
  const int qk_half = QKH ? nt >> 1 : 0;
  uint32_t qr[4][4]; /* Format A: rope A fragments of head tile mt */
  if constexpr (!QKH) {
    const int row = 16 * mt + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
    for (int k = 0; k < 4; k++) ldmatrix_x4(qr[k], kvh + row * KHS + 2 * (16 * k + (lane >> 4) * 8));
  }
  const uint8_t *qa_base = qn + (16 * mt + ((lane >> 3) & 1) * 8 + (lane & 7)) * QNS + 2 * ((lane >> 4) * 8);
  const uint8_t *qr_base = qrope + (16 * mt + ((lane >> 3) & 1) * 8 + (lane & 7)) * QRS + 2 * ((lane >> 4) * 8);
  const uint8_t *kb_base = kvh + (qk_c0 + (lane & 7)) * KHS + 2 * ((lane >> 3) * 8);

  /* ---- running state */
  const int shead = tid >> 3, sq = tid & 7; /* softmax: head row, candidate quad */
  float m_run = kNegInf, l_run = 0.f;       /* log2 domain; l_run: this thread's candidates */
  const bool rope_warp = F == 2 && warp == 7;
  const int vtile = F == 1 ? warp >> 1 : warp; /* scale tile of this warp's PV dims */
  float R = 0.f;                               /* running maximum of that tile's scales */
  float acc[2][8][4];
#pragma unroll
  for (int a = 0; a < 2; a++)
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[a][j][e] = 0.f;

  for (int i = 0; i < n; i++) {
    const int vb = (i & 1) * kSub;
    cp_async_wait<0>();
    __syncthreads(); /* B1: stage i landed; every warp is done with stage i - 1 */

    /* ---- 1. convert */
    {
      /* all of the thread's pieces are loaded before the first conversion,
       * so their shared-memory latencies overlap */
      constexpr int NIT = kSub * NP8 / DSK_MLA32_THREADS;
      uint2 v[NIT];
#pragma unroll
      for (int it = 0; it < NIT; it++) {
        const int pc = tid + it * DSK_MLA32_THREADS;
        const int c = pc / NP8, o = (pc - c * NP8) * 8;
        v[it] = *reinterpret_cast<const uint2 *>(raw + c * C::SREC + o);
      }
#pragma unroll
      for (int it = 0; it < NIT; it++) {
        const int pc = tid + it * DSK_MLA32_THREADS;
        const int c = pc / NP8, o = (pc - c * NP8) * 8;
        uint32_t h[4];
        e4m3x4_to_f16x2x2(v[it].x, h[0], h[1]);
        e4m3x4_to_f16x2x2(v[it].y, h[2], h[3]);
        *reinterpret_cast<uint4 *>(kvh + c * KHS + 2 * o) = make_uint4(h[0], h[1], h[2], h[3]);
      }
    }
    {
      const int c = tid >> 3, o = (tid & 7) * 16;
      *reinterpret_cast<uint4 *>(kvh + c * KHS + 2 * C::NOPE + o) =
          *reinterpret_cast<const uint4 *>(raw + c * C::SREC + C::ROPE + o);
    }
    if (tid < kSub * C::NT) sc[tid] = tile_scale<F>(raw + (tid & (kSub - 1)) * C::SREC, tid / kSub);
    __syncthreads(); /* B2: KVH, SC ready; the raw buffer is free */
    if (i + 1 < n) issue(i + 1, next_slot);
    cp_async_commit();
    next_slot = load_slot(i + 2);

    /* ---- 2. QK */
    if constexpr (QKH) {
      float sb[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      const int cand = qk_c0 + 2 * q4;
      if (qk_half == 0)
        k32_qk_tiles<F, 0, NT0>(qa_base, kb_base, sc, cand, sb);
      else
        k32_qk_tiles<F, NT0, C::NT>(qa_base, kb_base, sc, cand, sb);
      k32_qk_half_end<KHS>(ps, qscale, qr_base, kb_base + 2 * C::NOPE, qk_half, mt, g, cand, valid + vb, p.scale_log2,
                           sb);
    } else {
      float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int tile = 0; tile < C::NT; tile++) {
        float ta[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < KPT; kk += 2) {
          const int k0 = tile * KPT + kk;
          uint32_t b[4], a0[4], a1[4];
          ldmatrix_x4(b, kb_base + 32 * k0);
          ldmatrix_x4(a0, qa_base + 32 * k0);
          ldmatrix_x4(a1, qa_base + 32 * (k0 + 1));
          mma_f16(ta, a0, b[0], b[1]);
          mma_f16(ta, a1, b[2], b[3]);
        }
        const float2 scl = *reinterpret_cast<const float2 *>(sc + tile * kSub + 8 * nt + 2 * q4);
        s[0] += ta[0] * scl.x;
        s[1] += ta[1] * scl.y;
        s[2] += ta[2] * scl.x;
        s[3] += ta[3] * scl.y;
      }
      const float qs0 = qscale[16 * mt + g], qs1 = qscale[16 * mt + g + 8]; /* re-read: registers are tight */
      s[0] *= qs0;
      s[1] *= qs0;
      s[2] *= qs1;
      s[3] *= qs1;
#pragma unroll
      for (int kk = 0; kk < 4; kk += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, kb_base + 2 * C::NOPE + 32 * kk);
        mma_bf16(s, qr[kk], b[0], b[1]);
        mma_bf16(s, qr[kk + 1], b[2], b[3]);
      }
      const int c0 = 8 * nt + 2 * q4;
      const bool v0 = valid[vb + c0] != 0, v1 = valid[vb + c0 + 1] != 0;
      float *r0 = ps + (16 * mt + g) * PST + c0;
      *reinterpret_cast<float2 *>(r0) =
          make_float2(v0 ? s[0] * p.scale_log2 : kNegInf, v1 ? s[1] * p.scale_log2 : kNegInf);
      *reinterpret_cast<float2 *>(r0 + 8 * PST) =
          make_float2(v0 ? s[2] * p.scale_log2 : kNegInf, v1 ? s[3] * p.scale_log2 : kNegInf);
    }
    __syncthreads(); /* B3: scores ready */

    /* ---- 3. softmax of head `shead`, candidates 4 sq .. 4 sq + 3 */
    k32_softmax<DSK_MLA32_NPS(F)>(ps, alpha, shead, sq, m_run, l_run);
    __syncthreads(); /* B4: probabilities ready */

    /* ---- 4. PV: dims 64 warp .. + 63 of heads 0..31 */
    {
      k32_rescale(alpha, g, acc);
      const float inv = rope_warp ? 1.f : fold_v_scale(R, sc[vtile * kSub + lane], acc);
      if (rope_warp)
        k32_pv<F, true>(ps, sc, kvh, vtile, inv, warp, lane, acc);
      else
        k32_pv<F, false>(ps, sc, kvh, vtile, inv, warp, lane, acc);
    }
  }
  cp_async_wait<0>();

  /* ---- finish: each head's lse and output factor, then the PV warps
   * write their dims */
  k32_finish_heads(p, l_run, m_run, shead, sq, h0, t, split, fac);
  __syncthreads();
  const float rv = rope_warp ? 1.f : R;
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
      const int hrow = 16 * m + g + 8 * rr, h = h0 + hrow;
      if (h >= p.H) continue;
      const float f0 = fac[hrow];
      k32_write_ntiles(p, t, h, split, warp, q4, acc[m], rr, f0, f0 * rv);
    }
}
