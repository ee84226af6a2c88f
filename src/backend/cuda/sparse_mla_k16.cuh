/* sparse_mla_k16.cuh - the 16-head decode kernel (tactic heads per CTA
 * 16): 4 or 8 warps (NW), one m16 tile of heads, e4m3 converted in
 * registers right before each MMA. Described in sparse_mla_decode.cu's
 * header comment. Included inside the launcher's anonymous namespace.
 *
 * Work of warp w (NW = 4 | NW = 8, where each warp does half as much):
 *  - Q staging: heads 4w..4w+3 | 2w, 2w+1.
 *  - QK: candidates 8w..8w+7 over every dim, final scores (DSK_MLA16_CSPLIT;
 *    with it off, by dims as with 8 warps: Format A tile w and rope k-step
 *    w, Format B tiles 2w, 2w+1 (< 7), warp 3 also the rope) | all 32
 *    candidates, partial scores over Format A's half w&1 of tile w/2 and
 *    rope k-step w for w < 4, or Format B's tile w for w < 7, warp 7 the
 *    rope.
 *  - PV: output dims 128w..128w+127 (two 64-dim halves) | 64w..64w+63. */
/* DSK_MLA16_LAZY (compile time): the softmax's lazy-maximum headroom in
 * log2 units (stage_softmax); 0 = a row max moves with every stage that
 * raises it (the rescale of the accumulators then runs in most stages: ncu
 * at DSv4-Flash H 8 T 256 counted it in all of them) */
#ifndef DSK_MLA16_LAZY
#define DSK_MLA16_LAZY 8
#endif
/* DSK_MLA16_CSPLIT (compile time): the 4-warp kernel's QK by candidates
 * (warp w: candidates 8w .. 8w+7 over every dim, final scores to P; the
 * softmax reads one block) instead of by dims (partial scores of the four
 * warps summed by every warp's softmax) */
#ifndef DSK_MLA16_CSPLIT
#define DSK_MLA16_CSPLIT 1
#endif
static_assert(DSK_MLA16_LAZY == 0 || DSK_MLA16_LAZY == (int)kLazyLog2, "the 16-head kernel's lazy headroom");
/* DSK_MLA16_LATE_ISSUE (compile time, default 1): each stage's copies go
 * out right after the barrier that opens the stage before it, so that no
 * barrier is needed at the end of a stage (buffer reuse): two barriers a
 * stage instead of three, the copies going out a wait later. Both kernel
 * forms. On an H100 (docs/benchmarks.md, 2026-12-06, twenty-third session)
 * 0.96-0.98x at T <= 16, 0.97-1.00x at T 64-128, 0.99-1.03x at T 256 against
 * 0 (the copies issued before the opening barrier, three barriers a stage).
 * emu_sparse_mla runs it in the emulation's skewed schedule, where a copy
 * issued before that barrier fails; emu_sparse_mla_variants runs 0. */
#ifndef DSK_MLA16_LATE_ISSUE
#define DSK_MLA16_LATE_ISSUE 1
#endif
/* DSK_MLA16_FAST_FOLD (compile time, default 0 until timed): PV's V-scale
 * fold by fold_v_scale_fast (one redux for the stage's maximum scale, the
 * approximate reciprocal only when R grows, 1 / R carried in a register)
 * instead of fold_v_scale (a 5-shuffle maximum, then a full-precision
 * division and reciprocal, each behind its own branch, every stage) */
#ifndef DSK_MLA16_FAST_FOLD
#define DSK_MLA16_FAST_FOLD 0
#endif
/* The m16n8k16 A fragment of Q's rope dims d0, d0 + 1 (and + 8) of rows g,
 * g + 8 (bf16, rows of DSK_MLA_QR_STRIDE elements) */
__device__ __forceinline__ void rope_a_frag(const uint16_t *qr, int g, int d0, uint32_t (&a)[4]) {
  a[0] = *reinterpret_cast<const uint32_t *>(qr + g * DSK_MLA_QR_STRIDE + d0);
  a[1] = *reinterpret_cast<const uint32_t *>(qr + (g + 8) * DSK_MLA_QR_STRIDE + d0);
  a[2] = *reinterpret_cast<const uint32_t *>(qr + g * DSK_MLA_QR_STRIDE + d0 + 8);
  a[3] = *reinterpret_cast<const uint32_t *>(qr + (g + 8) * DSK_MLA_QR_STRIDE + d0 + 8);
}
constexpr int kHeads = DSK_MLA_HEADS;
constexpr int kThreads = DSK_MLA_THREADS;
constexpr int kThreads8 = 32 * DSK_MLA_WARPS8;

template <int F, int NW>
#if DSK_MLA16_FAST_FOLD
/* four 4-warp CTAs an SM: 128 registers (without the cap ptxas takes 160
 * for the Format B 4-warp kernel on sm_90 with the fast fold) */
__global__ void __launch_bounds__(32 * NW, NW == 4 ? 4 : 1) sparse_mla_kernel(const Params p) {
#else
__global__ void __launch_bounds__(32 * NW) sparse_mla_kernel(const Params p) {
#endif
  using C = Fmt<F>;
  static_assert(NW == 4 || NW == 8, "4 or 8 warps");
  constexpr int RPW = kHeads / NW; /* Q rows staged per warp */
  constexpr int TPC = NW;          /* threads per staged candidate: 32 * NW threads / 32 candidates */
  constexpr int NH = 8 / NW;       /* 64-dim output halves per warp */
  /* QK split by candidates (4 warps, DSK_MLA16_CSPLIT) or by dims */
  constexpr bool kCandSplit = NW == 4 && DSK_MLA16_CSPLIT;
  constexpr bool kLateIssue = DSK_MLA16_LATE_ISSUE != 0;
  static_assert(!kLateIssue || DSK_MLA_STAGES == 2, "the late issue is written for two stage buffers");
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t *kv = smem + DSK_MLA_OFF_KV;
  __half *qn = reinterpret_cast<__half *>(smem + DSK_MLA_OFF_QN(F));
  uint16_t *qr = reinterpret_cast<uint16_t *>(smem + DSK_MLA_OFF_QR(F));
  float *P = reinterpret_cast<float *>(smem + DSK_MLA_OFF_P(F));
  float *qscale = reinterpret_cast<float *>(smem + DSK_MLA_OFF_RED_W(F, NW));
  int32_t *valid = reinterpret_cast<int32_t *>(smem + DSK_MLA_OFF_VALID_W(F, NW));

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3;
  const int hg = (int)(blockIdx.x % (unsigned)p.nhg);
  const int64_t t = blockIdx.x / (unsigned)p.nhg;
  const int split = blockIdx.y;
  const int h0 = hg * kHeads;
  const bool counting = p.counters && hg == 0;
  /* Let the combine kernel (launched with programmatic stream serialization)
   * start its launch now; it waits in griddepcontrol.wait until this grid
   * has completed and its writes are visible. */
  pdl_launch_dependents();

  /* Valid prefix per segment and this split's active stages. */
  const StageRange sr = stage_range(p, t, split, counting, tid);
  const int n = sr.n;

  /* ---- Q: warp w stages heads RPW*w .. RPW*w + RPW-1 (f16 nope, bf16 rope) */
  auto store_q = [&](const QRows<RPW> &q) {
    q_store<F, true, RPW>(q, lane, reinterpret_cast<uint8_t *>(qn), 0,
                          reinterpret_cast<uint8_t *>(qr + warp * RPW * DSK_MLA_QR_STRIDE), 2 * DSK_MLA_QR_STRIDE,
                          qscale + warp * RPW, warp * RPW);
  };

  /* ---- stage issue: thread (c = tid/TPC, part = tid%TPC) copies record c.
   * Slot ids are loaded two stages ahead so that no stage waits on them. */
  auto load_slot = [&](int i) -> int32_t { return stage_slot(p, sr, t, i, tid / (unsigned)TPC); };
  auto issue = [&](int i, int32_t slot) {
    const int st = i % DSK_MLA_STAGES, c = tid / (unsigned)TPC;
    stage_issue<F, TPC>(p, sr, i, c, tid % (unsigned)TPC, slot, counting, kv + (st * kSub + c) * C::SREC,
                            valid + st * kSub + c);
  };

  /* ---- running state */
  float m2[2] = {kNegInf, kNegInf}; /* rows g, g+8; log2 domain; identical in every warp */
  float lsum[2] = {0.f, 0.f};       /* this thread's columns only */
  float acc[NH][8][4];
  float R[NH];
#pragma unroll
  for (int hh = 0; hh < NH; hh++) R[hh] = 0.f;
#if DSK_MLA16_FAST_FOLD
  float inv_r[NH]; /* 1 / R[hh], 0 while R[hh] is 0 */
#pragma unroll
  for (int hh = 0; hh < NH; hh++) inv_r[hh] = 0.f;
#endif
#pragma unroll
  for (int hh = 0; hh < NH; hh++)
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int i = 0; i < 4; i++) acc[hh][j][i] = 0.f;

  /* prologue. Early Q: the slot ids of stages 0 .. STAGES-2 and this
   * warp's Q rows load together; then those stages go in flight (each copy
   * waits for its slot id), the next slot id starts loading, and Q is
   * converted and stored while the records travel. Otherwise the stages go
   * in flight first and Q loads after them. Early Q is faster on the H200
   * except in the 4-warp Format A kernel, where holding the Q rows across
   * the stage issue costs 2-3 % at large T (docs/benchmarks.md, v8). */
  constexpr bool kEarlyQ = F == 2 || NW == 8;
  int32_t next_slot;
  if (kEarlyQ) {
    int32_t first_slots[DSK_MLA_STAGES - 1];
#pragma unroll
    for (int j = 0; j < DSK_MLA_STAGES - 1; j++) first_slots[j] = load_slot(j);
    const QRows<RPW> qrows = q_load<F, RPW>(p, t, h0 + warp * RPW, lane);
#pragma unroll
    for (int j = 0; j < DSK_MLA_STAGES - 1; j++) {
      if (j < n) issue(j, first_slots[j]);
      cp_async_commit();
    }
    next_slot = load_slot(DSK_MLA_STAGES - 1);
    store_q(qrows);
  } else {
#pragma unroll
    for (int j = 0; j < DSK_MLA_STAGES - 1; j++) {
      if (j < n) issue(j, load_slot(j));
      cp_async_commit();
    }
    next_slot = load_slot(DSK_MLA_STAGES - 1);
    store_q(q_load<F, RPW>(p, t, h0 + warp * RPW, lane));
  }
  __syncthreads(); /* Q staged */

  const float qs0 = qscale[g], qs1 = qscale[g + 8];
  /* QK work of this warp (see the file comment): TPW scale tiles, k-steps
   * [ks0, ks0 + KPT) of each; rope k-steps [rk0, rk1). */
  constexpr int TPW = F == 2 && NW == 4 ? 2 : 1;
  constexpr int KPT = F == 1 && NW == 8 ? C::TILE / 32 : C::TILE / 16;

  for (int i = 0; i < n; i++) {
    const int st = i % DSK_MLA_STAGES;
    if constexpr (kLateIssue) {
      /* two barriers a stage: stage i + 1's copies go out after this
       * barrier, which every warp passes only once done with stage i - 1
       * (its buffer, scores and valid flags) */
      cp_async_wait<0>();
      __syncthreads();
      if (i + 1 < n) issue(i + 1, next_slot);
      next_slot = load_slot(i + 2);
      cp_async_commit();
    } else {
      if (i + DSK_MLA_STAGES - 1 < n) issue(i + DSK_MLA_STAGES - 1, next_slot);
      next_slot = load_slot(i + DSK_MLA_STAGES);
      cp_async_commit();
      cp_async_wait<DSK_MLA_STAGES - 1>();
      __syncthreads();
    }
    const uint8_t *kb = kv + st * kSub * C::SREC;

    if constexpr (kCandSplit) {
      /* ---- QK by candidates (4 warps): warp w scores candidates 8w .. 8w+7
       * (n-tile w) over every dim and writes their final scores (log2
       * domain, invalid = -inf) to block 0 of P */
      const uint8_t *rec = kb + (warp * 8 + g) * C::SREC;     /* this lane's B row */
      const uint8_t *r0 = kb + (warp * 8 + 2 * q4) * C::SREC; /* its C columns' records */
      float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int tile = 0; tile < C::NT; tile++) {
        float ta[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < C::TILE / 16; kk++) {
          const int d0 = tile * C::TILE + kk * 16;
          const uint4 qv = *reinterpret_cast<const uint4 *>(reinterpret_cast<const uint8_t *>(qn) + (d0 >> 4) * 512 + 16 * lane);
          const uint32_t a[4] = {qv.x, qv.y, qv.z, qv.w};
          uint32_t b0, b1;
          e4m3x4_to_f16x2x2(*reinterpret_cast<const uint32_t *>(rec + d0 + 4 * q4), b0, b1);
          mma_f16(ta, a, b0, b1);
        }
        const float s0 = tile_scale<F>(r0, tile), s1 = tile_scale<F>(r0 + C::SREC, tile);
        part[0] += ta[0] * s0;
        part[1] += ta[1] * s1;
        part[2] += ta[2] * s0;
        part[3] += ta[3] * s1;
      }
      float ra[4] = {0.f, 0.f, 0.f, 0.f};
      const uint16_t *rope = reinterpret_cast<const uint16_t *>(rec + C::ROPE);
#pragma unroll
      for (int ks = 0; ks < 4; ks++) {
        const int d0 = ks * 16 + 2 * q4;
        uint32_t a[4];
        rope_a_frag(qr, g, d0, a);
        mma_bf16(ra, a, *reinterpret_cast<const uint32_t *>(rope + d0), *reinterpret_cast<const uint32_t *>(rope + d0 + 8));
      }
      const int cc = warp * 8 + 2 * q4;
      const bool v0 = valid[st * kSub + cc] != 0, v1 = valid[st * kSub + cc + 1] != 0;
      const float sl = p.scale_log2;
      *reinterpret_cast<float2 *>(P + g * DSK_MLA_P_STRIDE + cc) =
          make_float2(v0 ? (part[0] * qs0 + ra[0]) * sl : kNegInf, v1 ? (part[1] * qs0 + ra[1]) * sl : kNegInf);
      *reinterpret_cast<float2 *>(P + (g + 8) * DSK_MLA_P_STRIDE + cc) =
          make_float2(v0 ? (part[2] * qs1 + ra[2]) * sl : kNegInf, v1 ? (part[3] * qs1 + ra[3]) * sl : kNegInf);
    } else {
    /* ---- QK partials: this warp's dims for all 32 candidates (4 n-tiles) */
      float part[4][4];
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) part[j][e] = 0.f;
      const int ks0 = F == 1 && NW == 8 ? (warp & 1) * KPT : 0;
#pragma unroll
      for (int tw = 0; tw < TPW; tw++) {
        const int tile = F == 1 ? (NW == 8 ? warp >> 1 : warp) : (NW == 8 ? warp : 2 * warp + tw);
        if (tile >= C::NT) break;
        float ta[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) ta[j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KPT; kk++) {
          const int d0 = tile * C::TILE + (ks0 + kk) * 16;
          const uint4 qv = *reinterpret_cast<const uint4 *>(reinterpret_cast<const uint8_t *>(qn) + (d0 >> 4) * 512 + 16 * lane);
          const uint32_t a[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
          for (int j = 0; j < 4; j++) {
            const uint32_t kw = *reinterpret_cast<const uint32_t *>(kb + (j * 8 + g) * C::SREC + d0 + 4 * q4);
            uint32_t b0, b1;
            e4m3x4_to_f16x2x2(kw, b0, b1);
            mma_f16(ta[j], a, b0, b1);
          }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const uint8_t *r0 = kb + (j * 8 + 2 * q4) * C::SREC;
          const float s0 = tile_scale<F>(r0, tile), s1 = tile_scale<F>(r0 + C::SREC, tile);
          part[j][0] += ta[j][0] * s0;
          part[j][1] += ta[j][1] * s1;
          part[j][2] += ta[j][2] * s0;
          part[j][3] += ta[j][3] * s1;
        }
      }
      float ra[4][4];
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) ra[j][e] = 0.f;
      const int rk0 = F == 1 ? warp : 0;
      const int rk1 = F == 1 ? (NW == 4 || warp < 4 ? warp + 1 : 0) : (warp == NW - 1 ? 4 : 0);
#pragma unroll 1
      for (int ks = rk0; ks < rk1; ks++) {
        const int d0 = ks * 16 + 2 * q4;
        uint32_t a[4];
        rope_a_frag(qr, g, d0, a);
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const uint16_t *rope = reinterpret_cast<const uint16_t *>(kb + (j * 8 + g) * C::SREC + C::ROPE);
          mma_bf16(ra[j], a, *reinterpret_cast<const uint32_t *>(rope + d0),
                   *reinterpret_cast<const uint32_t *>(rope + d0 + 8));
        }
      }
      /* partial score of this warp: S_w[row][cand], stored for every warp to read */
      float *Sw = P + warp * kHeads * DSK_MLA_P_STRIDE;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int cc = j * 8 + 2 * q4;
        *reinterpret_cast<float2 *>(Sw + g * DSK_MLA_P_STRIDE + cc) =
            make_float2(part[j][0] * qs0 + ra[j][0], part[j][1] * qs0 + ra[j][1]);
        *reinterpret_cast<float2 *>(Sw + (g + 8) * DSK_MLA_P_STRIDE + cc) =
            make_float2(part[j][2] * qs1 + ra[j][2], part[j][3] * qs1 + ra[j][3]);
      }
    }
    __syncthreads();

    /* ---- softmax (identical in the NW warps) */
    float pv[2][2][2][2]; /* [ks][hi][row][pair] */
    const int32_t *vflags = nullptr; /* with kCandSplit the scores carry the flags */
    if constexpr (!kCandSplit) vflags = valid + st * kSub;
    stage_softmax<kCandSplit ? 1 : NW, NH, DSK_MLA16_LAZY, kCandSplit>(P, vflags, p.scale_log2, g, q4, m2, lsum, acc,
                                                                       pv);

    /* ---- PV: this warp's NH 64-dim halves */
#pragma unroll
    for (int hh = 0; hh < NH; hh++) {
      const int db = warp * 64 * NH + hh * 64; /* first output dim of the half */
      const bool rope_half = F == 2 && db >= 448;
      const int tile = F == 1 ? warp * NH / 2 : db / 64;
      float inv = 1.f;
#if DSK_MLA16_FAST_FOLD
      if (!rope_half) inv = fold_v_scale_fast(R[hh], inv_r[hh], tile_scale<F>(kb + lane * C::SREC, tile), acc[hh]);
#else
      if (!rope_half) inv = fold_v_scale(R[hh], tile_scale<F>(kb + lane * C::SREC, tile), acc[hh]);
#endif
#pragma unroll
      for (int ks = 0; ks < 2; ks++) {
        const int ca = ks * 16 + 2 * q4; /* candidates ca, ca+1 (b0) and ca+8, ca+9 (b1) */
        const uint8_t *r0 = kb + ca * C::SREC, *r1 = r0 + C::SREC, *r2 = r0 + 8 * C::SREC, *r3 = r2 + C::SREC;
        if (rope_half) {
          const uint32_t a[4] = {pack_bf16(pv[ks][0][0][0], pv[ks][0][0][1]), pack_bf16(pv[ks][0][1][0], pv[ks][0][1][1]),
                                 pack_bf16(pv[ks][1][0][0], pv[ks][1][0][1]), pack_bf16(pv[ks][1][1][0], pv[ks][1][1][1])};
          const int off = C::ROPE + 2 * (db - 448 + 8 * g);
          const uint4 v0 = *reinterpret_cast<const uint4 *>(r0 + off), v1 = *reinterpret_cast<const uint4 *>(r1 + off);
          const uint4 v2 = *reinterpret_cast<const uint4 *>(r2 + off), v3 = *reinterpret_cast<const uint4 *>(r3 + off);
          const uint32_t w0[4] = {v0.x, v0.y, v0.z, v0.w}, w1[4] = {v1.x, v1.y, v1.z, v1.w};
          const uint32_t w2[4] = {v2.x, v2.y, v2.z, v2.w}, w3[4] = {v3.x, v3.y, v3.z, v3.w};
#pragma unroll
          for (int j = 0; j < 8; j++) {
            const uint32_t sel = (j & 1) ? 0x7632u : 0x5410u; /* high or low bf16 of each word */
            const uint32_t b0 = __byte_perm(w0[j >> 1], w1[j >> 1], sel);
            const uint32_t b1 = __byte_perm(w2[j >> 1], w3[j >> 1], sel);
            mma_bf16(acc[hh][j], a, b0, b1);
          }
        } else {
          const float s0 = tile_scale<F>(r0, tile) * inv, s1 = tile_scale<F>(r1, tile) * inv;
          const float s2 = tile_scale<F>(r2, tile) * inv, s3 = tile_scale<F>(r3, tile) * inv;
          const uint32_t a[4] = {pack_f16(pv[ks][0][0][0] * s0, pv[ks][0][0][1] * s1),
                                 pack_f16(pv[ks][0][1][0] * s0, pv[ks][0][1][1] * s1),
                                 pack_f16(pv[ks][1][0][0] * s2, pv[ks][1][0][1] * s3),
                                 pack_f16(pv[ks][1][1][0] * s2, pv[ks][1][1][1] * s3)};
          const int off = db + 8 * g;
          const uint2 v0 = *reinterpret_cast<const uint2 *>(r0 + off), v1 = *reinterpret_cast<const uint2 *>(r1 + off);
          const uint2 v2 = *reinterpret_cast<const uint2 *>(r2 + off), v3 = *reinterpret_cast<const uint2 *>(r3 + off);
#pragma unroll
          for (int j = 0; j < 8; j++) {
            const uint32_t x0 = j < 4 ? v0.x : v0.y, x1 = j < 4 ? v1.x : v1.y;
            const uint32_t x2 = j < 4 ? v2.x : v2.y, x3 = j < 4 ? v3.x : v3.y;
            const uint32_t sel = (uint32_t)(j & 3) | ((uint32_t)((j & 3) + 4) << 4);
            mma_f16(acc[hh][j], a, e4m3x2_to_f16x2(__byte_perm(x0, x1, sel)),
                    e4m3x2_to_f16x2(__byte_perm(x2, x3, sel)));
          }
        }
      }
    }
    if constexpr (!kLateIssue) __syncthreads(); /* the stage buffer and the partial scores are reused */
  }
  cp_async_wait<0>();

  /* ---- finish: row sums over the 4 lanes of a row (every warp holds the
   * same softmax state), then output or partials */
  float l[2] = {lsum[0], lsum[1]};
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    l[0] += __shfl_xor_sync(0xffffffffu, l[0], o);
    l[1] += __shfl_xor_sync(0xffffffffu, l[1], o);
  }
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    const int h = h0 + g + 8 * rr;
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
      for (int hh = 0; hh < NH; hh++) {
        const float f = fac * (F == 2 && (NW == 4 ? warp == 3 && hh == 1 : warp == 7) ? 1.f : R[hh]);
#pragma unroll
        for (int c = 0; c < 2; c++) {
          uint32_t w[4];
#pragma unroll
          for (int j = 0; j < 8; j += 2) {
            const float x0 = empty ? 0.f : acc[hh][j][2 * rr + c] * f;
            const float x1 = empty ? 0.f : acc[hh][j + 1][2 * rr + c] * f;
            w[j / 2] = (uint32_t)f32_to_bf16_rne(x0) | ((uint32_t)f32_to_bf16_rne(x1) << 16);
          }
          const int dim = warp * 64 * NH + hh * 64 + 8 * (2 * q4 + c);
          *reinterpret_cast<uint4 *>(orow + dim) = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
      if (p.lse && q4 == 0 && warp == 0) p.lse[t * p.lse_st + (int64_t)h * p.lse_sh] = lse;
    } else {
      const int64_t part = (t * p.H + h) * p.splits + split;
      float *po = p.part_o + part * 512;
      const float inv_l = empty ? 0.f : 1.f / l[rr];
#pragma unroll
      for (int hh = 0; hh < NH; hh++) {
        const float f = inv_l * (F == 2 && (NW == 4 ? warp == 3 && hh == 1 : warp == 7) ? 1.f : R[hh]);
#pragma unroll
        for (int c = 0; c < 2; c++) {
          float x[8];
#pragma unroll
          for (int j = 0; j < 8; j++) x[j] = empty ? 0.f : acc[hh][j][2 * rr + c] * f;
          const int dim = warp * 64 * NH + hh * 64 + 8 * (2 * q4 + c);
          *reinterpret_cast<float4 *>(po + dim) = make_float4(x[0], x[1], x[2], x[3]);
          *reinterpret_cast<float4 *>(po + dim + 4) = make_float4(x[4], x[5], x[6], x[7]);
        }
      }
      if (q4 == 0 && warp == 0) p.part_lse[part] = lse;
    }
  }
}
