/* sparse_mla_k8.cuh - the 8-head decode kernel (tactic heads per CTA 8).
 * Included inside the launcher's anonymous namespace (sparse_mla_decode.cu).
 *
 * CTA = 4 warps, 8 heads of one query row, one split of the row's stages.
 * The MMA roles are swapped against the 16- and 32-head kernels: in QK the
 * m16 rows are 16 candidates and the n8 columns the 8 heads (S^T = K Q^T),
 * in PV the m16 rows are 16 output dims and the n8 columns the heads again
 * (O^T = V^T P^T). So a head group of 8 fills every MMA (the 16-head kernel
 * runs H 8 with half of each MMA on empty rows), Q is the B operand of QK,
 * and P, transposed once per unit by shuffles, the B operand of PV.
 *
 * Each warp works alone on its own 16-candidate units (unit u = half of
 * 32-candidate stage u / 2; warp w takes units w, w + 4, ...), with its own
 * two record buffers (cp.async, one unit in flight while the other
 * computes), its own online softmax (lazy maximum, as the other kernels)
 * and its own output accumulators (512 dims x 8 heads: 128 fp32 a thread).
 * The warps meet twice: after staging Q, and at the end, where each warp's
 * partial output (scaled to the CTA's common maximum) goes to shared memory
 * over the record buffers and the four are summed. No barrier joins the
 * warps inside the loop.
 *
 * Per unit, warp work (lane = 4 g + q4):
 *  - QK: rows g and g + 8 of the A fragments are candidates k8_rho(g) and
 *    8 + k8_rho(g); in each 64-dim nope block, lane q4 holds dims
 *    16 q4 .. 16 q4 + 15 of its two records (one 16-byte load each), which
 *    feed 4 k-steps (dims 16 q4 + 4 j .. + 3 of k-step j: lo pair = k 2q4,
 *    hi pair = k 2q4 + 8). Q's B fragments use the same dims and come
 *    fragment-interleaved from shared memory (16 bytes a lane a 2 k-steps).
 *    Each scale tile's partial sum is multiplied by its record's tile scale
 *    in fp32; the bf16 rope dims are bf16 MMAs.
 *  - softmax: each thread holds the scores of its two candidates for heads
 *    2 q4 and 2 q4 + 1, and the running maximum and sum of those heads.
 *  - PV: the k index (candidates) of lane q4 is candidates q4, q4 + 4 (k
 *    2q4, 2q4 + 1) and q4 + 8, q4 + 12 (k 2q4 + 8, 2q4 + 9); per 64-dim
 *    block lane g loads 8 bytes (dims 8 g .. 8 g + 7) of each of its four
 *    records and forms the A fragments of the block's 4 m-tiles with byte
 *    permutes (m-tile j: row g = dim 8 g + 2 j, row g + 8 = dim 8 g + 2 j + 1).
 *    B = P^T * scale_c / R, with R the warp's running maximum tile scale
 *    (per scale tile; the accumulators of the tile are rescaled when it
 *    grows), so B stays in [0, 2^8]. Format B's rope dims (block 7) are a
 *    bf16 MMA with B = P^T.
 * Every shared-memory access pattern above is free of bank conflicts at
 * the 672-byte record stride (DSK_MLA8_SREC). */
/* The 8-head kernel's copy form (device run 27, H100, docs/benchmarks.md):
 * TPC lanes per staged record, 4 by default (2 is the first form, 0.90-0.97x
 * slower on the rows that take this kernel), with the copy loop unrolled
 * and Q loaded together with the first slot ids. */
#ifndef DSK_MLA8_TPC
#define DSK_MLA8_TPC 4
#endif
constexpr int k8Threads = DSK_MLA8_THREADS;
constexpr int k8Unit = DSK_MLA8_UNIT;
constexpr int k8Warps = DSK_MLA8_WARPS;

/* QK row g (and g + 8) of a unit is candidate k8_rho(g) (and 8 + that):
 * bits 0 and 1 swapped, so the two rows of an 8-lane load phase (g, g + 1)
 * are records 2 apart, 64 bytes apart modulo 128 at the 672-byte stride.
 * An involution. */
__device__ __forceinline__ int k8_rho(int g) { return (g & 4) | ((g & 1) << 1) | ((g >> 1) & 1); }

/* Bytes x[o], y[o], x[o + 1], y[o + 1] with o = 2 * odd: two dims of two
 * records, each record's pair of dims as the lo / hi bytes of a pair */
__device__ __forceinline__ uint32_t k8_pair_bytes(uint32_t x, uint32_t y, int odd) {
  return __byte_perm(x, y, odd ? 0x7362u : 0x5140u);
}

/* DSK_MLA8_PV_FOLD (compile-time; default 0 until a GPU has timed it): PV's
 * V-scale fold of a unit done once before its tile loop (every tile scale
 * of the lane's four records from one load a record, each tile's maximum by
 * independent shuffles, one warp-uniform branch for the rare rescale), so
 * that the tile loop has no branch; 0: each tile's scales, maximum and
 * rescale test just before its MMAs. The same operations in both, so the
 * same bits; in the SASS of 0 each of the 7 (Format B) tiles is a block
 * behind its own branch whose scale loads issue only after the previous
 * one's (docs/design.md, "The 8-head decode kernel"). The two forms repeat
 * the tile's MMA block: factoring it into a lambda or a force-inlined
 * function changed the default's PTX, and the form not kept goes once the
 * fold has been timed. */
#ifndef DSK_MLA8_PV_FOLD
#define DSK_MLA8_PV_FOLD 0
#endif

/* DSK_MLA8_ISSUE2 (compile-time; default 0 until a GPU has timed it): the
 * copies of a unit's records issued by k8_issue (below), one pass for the
 * lane's CPL records; 0: stage_issue once per record. The same copies, zero
 * fills, valid flags and counts in both. */
#ifndef DSK_MLA8_ISSUE2
#define DSK_MLA8_ISSUE2 0
#endif

/* Issues the copies of this lane's CPL records of unit u (candidates
 * c = lane / TPC + 32 / TPC * h of the unit, part lane % TPC of each) into
 * the unit's buffer dbuf and its valid flags into vbuf, all 32 lanes of the
 * warp together: stage_issue's copies, zero fills, valid flags and counts,
 * per unit rather than per record. The slot ids come from stage_slot, so a
 * candidate past the valid prefix has slot -1 (stage_issue's k < L test is
 * that already). The unit's records all lie in stage u / 2: the segment's
 * fields are read once. ok and the source addresses come without branches
 * from a clamped slot (0 when not ok: page 0's record 0 and footer 0, valid
 * addresses as the cache has a page, never read, as cp.async with src-size
 * 0 zero fills); the out-of-range count is one warp vote a unit; then every
 * copy back to back. The only branch left on the common path is the
 * warp-uniform one around the division for a page size that is not a power
 * of two. */
template <int F, int TPC, int CPL>
__device__ __forceinline__ void k8_issue(const Params &p, const StageRange &r, int u, int lane,
                                         const int32_t (&slot)[CPL], bool counting, uint8_t *dbuf,
                                         int32_t *vbuf) {
  using C = Fmt<F>;
  constexpr int LPC = 32 / TPC, SREC = DSK_MLA8_SREC;
  const int part = lane % TPC, c0 = lane / TPC;
  const Seg &sg = p.seg[(u >> 1) >= r.n0 ? 1 : 0];
  const uint8_t *sbase = sg.base;
  /* (uint32_t)slot < capc <=> 0 <= slot < cap, for int32 slots and cap >= 1 */
  const int64_t cap = sg.cap;
  const uint32_t capc = cap < ((int64_t)1 << 31) ? (uint32_t)cap : (1u << 31);
  bool ok[CPL];
  uint32_t cs[CPL];
  int nbad = 0; /* this lane's slots >= 0 past the cap (part 0 counts) */
#pragma unroll
  for (int h = 0; h < CPL; h++) {
    ok[h] = (uint32_t)slot[h] < capc;
    nbad += slot[h] >= 0 && !ok[h];
    cs[h] = ok[h] ? (uint32_t)slot[h] : 0u;
  }
  if (part != 0) nbad = 0;
  if (counting && __any_sync(0xffffffffu, nbad != 0)) {
    if (nbad) atomicAdd(&p.counters[0], (unsigned long long)nbad);
  }
  const uint32_t pb32 = sg.pbs32;
  const int lg = sg.pbs_log2;
  uint32_t pg[CPL];
#pragma unroll
  for (int h = 0; h < CPL; h++) pg[h] = cs[h] >> (lg & 31);
  if (lg < 0) { /* warp-uniform */
#pragma unroll
    for (int h = 0; h < CPL; h++) pg[h] = cs[h] / pb32;
  }
  const int64_t pst = sg.page_stride;
  const uint8_t *src[CPL], *foot[CPL];
#pragma unroll
  for (int h = 0; h < CPL; h++) {
    const uint32_t j = cs[h] - pg[h] * pb32;
    const uint8_t *page = sbase + (int64_t)pg[h] * pst;
    src[h] = page + (int64_t)j * (F == 1 ? 656 : 576) + part * 16;
    if (F == 2) foot[h] = page + 576 * sg.pbs + 8 * (int64_t)j;
  }
  if (part == 0) { /* read after the unit's wait and __syncwarp, as the records */
#pragma unroll
    for (int h = 0; h < CPL; h++) vbuf[c0 + LPC * h] = ok[h];
  }
  uint8_t *d = dbuf + c0 * SREC + part * 16;
  if (F == 2 && part == 0) {
#pragma unroll
    for (int h = 0; h < CPL; h++) cp_async8(dbuf + (c0 + LPC * h) * SREC + 576, foot[h], ok[h]);
  }
  constexpr int NPER = (C::PIECES + TPC - 1) / TPC;
#pragma unroll
  for (int h = 0; h < CPL; h++)
#pragma unroll
    for (int pc = 0; pc < NPER; pc++)
      if (C::PIECES % TPC == 0 || pc + 1 < NPER || part + pc * TPC < C::PIECES)
        cp_async16(d + LPC * h * SREC + pc * TPC * 16, src[h] + pc * TPC * 16, ok[h]);
}

/* Every tile scale of the staged record at rec (tile_scale of each tile)
 * from one shared-memory load: 16 bytes in Format A, 8 in B. */
template <int F>
__device__ __forceinline__ void k8_tile_scales(const uint8_t *rec, float (&s)[Fmt<F>::NT]) {
  if constexpr (F == 1) {
    const float4 v = *reinterpret_cast<const float4 *>(rec + 512);
    s[0] = v.x;
    s[1] = v.y;
    s[2] = v.z;
    s[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2 *>(rec + 576);
#pragma unroll
    for (int t = 0; t < Fmt<F>::NT; t++) s[t] = ue8m0_kv(((t < 4 ? v.x : v.y) >> (8 * (t & 3))) & 0xffu);
  }
}

/* Stages two query heads (rows r0, r0 + 1 of the CTA's 8) for QK, one
 * warp: nope dims as f16 pre-scaled per head (q_prescale), rope dims as the
 * raw bf16, each 8-dim piece at its fragment-interleaved place: nope block
 * b, half e of lane q4 (dims 64 b + 16 q4 + 8 e ..) is chunk 2 b + e, rope
 * dims 32 e + 8 q4 .. are chunk 2 NB + e, and chunk c of lane 4 row + q4
 * lies at (c * 32 + 4 row + q4) * 16. */
template <int F>
__device__ __forceinline__ void k8_stage_q(const QRows<2> &q, int r0, int lane, uint8_t *qil, float *qscale) {
  using C = Fmt<F>;
  constexpr int NB = C::NOPE / 64;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = r0 + r;
    const float inv = q_prescale(q.qv[r], lane, qscale + row);
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int d = lane * 8 + 256 * k;
      if (d >= C::NOPE) continue;
      const int i = (d & 63) >> 3; /* = 2 q4 + e of the lane that reads it */
      const int chunk = 2 * (d >> 6) + (i & 1);
      *reinterpret_cast<uint4 *>(qil + (chunk * 32 + 4 * row + (i >> 1)) * 16) = q_f16x8(q.qv[r][k], inv);
    }
    if (lane < 8) *reinterpret_cast<uint4 *>(qil + ((2 * NB + (lane >> 2)) * 32 + 4 * row + (lane & 3)) * 16) = q.rv[r];
  }
}

template <int F>
__global__ void __launch_bounds__(DSK_MLA8_THREADS) sparse_mla_k8_kernel(const Params p) {
  using C = Fmt<F>;
  constexpr int NB = C::NOPE / 64;  /* nope 64-dim blocks: 8 | 7 */
  constexpr int BPT = C::TILE / 64; /* blocks per scale tile: 2 | 1 */
  constexpr int SREC = DSK_MLA8_SREC;
  constexpr int OST = DSK_MLA8_OS_STRIDE;
  static_assert(DSK_MLA8_OS_FITS, "the merge buffer fits over the record buffers");
  static_assert(SREC % 128 == 32 && SREC >= C::SREC, "record stride");
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3;
  const int hg = (int)(blockIdx.x % (unsigned)p.nhg);
  const int64_t t = blockIdx.x / (unsigned)p.nhg;
  const int split = blockIdx.y;
  const int h0 = hg * DSK_MLA8_HEADS;
  const bool counting = p.counters && hg == 0;
  uint8_t *kvw = smem + DSK_MLA8_OFF_KV + warp * 2 * k8Unit * SREC; /* this warp's two buffers */
  const uint8_t *qil = smem + DSK_MLA8_OFF_Q;
  float *qscale = reinterpret_cast<float *>(smem + DSK_MLA8_OFF_QS(F));
  int32_t *vflag = reinterpret_cast<int32_t *>(smem + DSK_MLA8_OFF_VALID(F)) + warp * 2 * k8Unit;
  float *ml = reinterpret_cast<float *>(smem + DSK_MLA8_OFF_ML(F)); /* m [warp][8], then l [warp][8] */
  pdl_launch_dependents();

  const StageRange sr = stage_range(p, t, split, counting, tid);
  const int nunits = 2 * sr.n;
  const int nk = warp < nunits ? (nunits - warp + k8Warps - 1) / k8Warps : 0; /* this warp's units */
  /* unit u: lane l copies part l % TPC of candidates l / TPC + 32 / TPC * h
   * (h < TPC / 2) of the unit */
  constexpr int TPC = DSK_MLA8_TPC, CPL = k8Unit * TPC / 32, LPC = 32 / TPC;
  static_assert(TPC == 2 || TPC == 4, "two or four lanes per record");
  struct Slots {
    int32_t s[CPL];
  };
  auto load_slot = [&](int u) -> Slots { /* -1 past the split's stages */
    Slots r;
#pragma unroll
    for (int h = 0; h < CPL; h++) r.s[h] = stage_slot(p, sr, t, u >> 1, (u & 1) * k8Unit + lane / TPC + LPC * h);
    return r;
  };
  auto issue = [&](int u, int buf, const Slots &ss) {
    if constexpr (DSK_MLA8_ISSUE2) {
      k8_issue<F, TPC, CPL>(p, sr, u, lane, ss.s, counting, kvw + buf * k8Unit * SREC, vflag + buf * k8Unit);
    } else {
#pragma unroll
      for (int h = 0; h < CPL; h++) {
        const int c = lane / TPC + LPC * h;
        stage_issue<F, TPC, true>(p, sr, u >> 1, (u & 1) * k8Unit + c, lane % TPC, ss.s[h], counting,
                                  kvw + (buf * k8Unit + c) * SREC, vflag + buf * k8Unit + c);
      }
    }
  };
  /* the Q rows and the first two slot ids load together; the first copies
   * wait for their slot ids, Q's conversion for the rows */
  const QRows<2> q = q_load<F, 2>(p, t, h0 + 2 * warp, lane);
  const Slots slot0 = load_slot(warp);
  Slots next_slot = load_slot(warp + k8Warps);
  if (nk > 0) issue(warp, 0, slot0);
  cp_async_commit();
  k8_stage_q<F>(q, 2 * warp, lane, smem + DSK_MLA8_OFF_Q, qscale);
  __syncthreads(); /* Q staged */

  const float qsa = qscale[2 * q4], qsb = qscale[2 * q4 + 1];
  const float sl = p.scale_log2;
  const int rho = k8_rho(g);
  float o[8][4][4]; /* [64-dim block][m-tile][C fragment] */
#pragma unroll
  for (int b = 0; b < 8; b++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[b][j][e] = 0.f;
  float R[C::NT]; /* running maximum tile scale (PV's V-scale fold) */
#pragma unroll
  for (int i = 0; i < C::NT; i++) R[i] = 0.f;
  float m2[2] = {kNegInf, kNegInf}, lsum[2] = {0.f, 0.f}; /* heads 2 q4, 2 q4 + 1 */

  for (int k = 0; k < nk; k++) {
    const int u = warp + k * k8Warps;
    if (k + 1 < nk) issue(u + k8Warps, (k + 1) & 1, next_slot);
    cp_async_commit();
    next_slot = load_slot(u + 2 * k8Warps);
    cp_async_wait<1>();
    __syncwarp();
    const uint8_t *buf = kvw + (k & 1) * k8Unit * SREC;
    const int32_t *vf = vflag + (k & 1) * k8Unit;

    /* ---- QK: S^T (candidates rho(g), 8 + rho(g) x heads 2 q4, 2 q4 + 1) */
    const uint8_t *ra = buf + rho * SREC, *rb = ra + 8 * SREC;
    float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int tile = 0; tile < C::NT; tile++) {
      float ta[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int bb = 0; bb < BPT; bb++) {
        const int b = tile * BPT + bb;
        const uint4 ka = *reinterpret_cast<const uint4 *>(ra + 64 * b + 16 * q4);
        const uint4 kb = *reinterpret_cast<const uint4 *>(rb + 64 * b + 16 * q4);
        const uint4 qa = *reinterpret_cast<const uint4 *>(qil + ((2 * b) * 32 + lane) * 16);
        const uint4 qb = *reinterpret_cast<const uint4 *>(qil + ((2 * b + 1) * 32 + lane) * 16);
        const uint32_t kaw[4] = {ka.x, ka.y, ka.z, ka.w}, kbw[4] = {kb.x, kb.y, kb.z, kb.w};
        const uint32_t qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
          uint32_t a[4];
          e4m3x4_to_f16x2x2(kaw[j], a[0], a[2]);
          e4m3x4_to_f16x2x2(kbw[j], a[1], a[3]);
          mma_f16(ta, a, qw[2 * j], qw[2 * j + 1]);
        }
      }
      const float sa = tile_scale<F>(ra, tile), sb = tile_scale<F>(rb, tile);
      part[0] += ta[0] * sa;
      part[1] += ta[1] * sa;
      part[2] += ta[2] * sb;
      part[3] += ta[3] * sb;
    }
    float rr[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int e = 0; e < 2; e++) {
      /* rope dims 32 e + 8 q4 .. + 7: k-steps 2 e, 2 e + 1 */
      const uint4 ka = *reinterpret_cast<const uint4 *>(ra + C::ROPE + 64 * e + 16 * q4);
      const uint4 kb = *reinterpret_cast<const uint4 *>(rb + C::ROPE + 64 * e + 16 * q4);
      const uint4 qr = *reinterpret_cast<const uint4 *>(qil + ((2 * NB + e) * 32 + lane) * 16);
      const uint32_t a0[4] = {ka.x, kb.x, ka.y, kb.y}, a1[4] = {ka.z, kb.z, ka.w, kb.w};
      mma_bf16(rr, a0, qr.x, qr.y);
      mma_bf16(rr, a1, qr.z, qr.w);
    }
    const bool va = vf[rho] != 0, vb = vf[rho + 8] != 0;
    float s[4];
    s[0] = va ? (part[0] * qsa + rr[0]) * sl : kNegInf;
    s[1] = va ? (part[1] * qsb + rr[1]) * sl : kNegInf;
    s[2] = vb ? (part[2] * qsa + rr[2]) * sl : kNegInf;
    s[3] = vb ? (part[3] * qsb + rr[3]) * sl : kNegInf;

    /* ---- softmax of heads 2 q4, 2 q4 + 1 over the unit's 16 candidates
     * (the 8 lanes of a q4 hold them), lazy maximum */
    float mx[2] = {fmaxf(s[0], s[2]), fmaxf(s[1], s[3])};
#pragma unroll
    for (int off = 4; off <= 16; off <<= 1) {
      mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], off));
      mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], off));
    }
    float al[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const float mn = mx[r] > m2[r] + kLazyLog2 ? mx[r] : m2[r];
      al[r] = mn == m2[r] ? 1.f : fast_exp2(m2[r] - mn);
      m2[r] = mn;
      lsum[r] *= al[r];
    }
    float pr[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      pr[e] = s[e] == kNegInf ? 0.f : fast_exp2(s[e] - m2[e & 1]);
      lsum[e & 1] += pr[e];
    }
    if (!__all_sync(0xffffffffu, al[0] == 1.f && al[1] == 1.f)) {
#pragma unroll
      for (int b = 0; b < 8; b++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          o[b][j][0] *= al[0];
          o[b][j][1] *= al[1];
          o[b][j][2] *= al[0];
          o[b][j][3] *= al[1];
        }
    }
    /* ---- P^T for PV: this lane needs head g of candidates q4, q4 + 4,
     * q4 + 8, q4 + 12; P of (candidate c, head h) is in lane
     * 4 rho(c & 7) + h / 2, register 2 (c >= 8) + (h & 1) */
    const int src = 4 * k8_rho(q4) + (g >> 1); /* candidates q4, q4 + 8; + 16: q4 + 4, q4 + 12 */
    const bool odd = (g & 1) != 0;
    float x[4], y[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      x[e] = __shfl_sync(0xffffffffu, pr[e], src);
      y[e] = __shfl_sync(0xffffffffu, pr[e], src + 16);
    }
    const float p0 = odd ? x[1] : x[0], p4 = odd ? y[1] : y[0]; /* candidates q4, q4 + 4 */
    const float p8 = odd ? x[3] : x[2], p12 = odd ? y[3] : y[2];

    /* ---- PV */
    const uint8_t *c0 = buf + q4 * SREC, *c4 = c0 + 4 * SREC, *c8 = c0 + 8 * SREC, *c12 = c0 + 12 * SREC;
    if constexpr (DSK_MLA8_PV_FOLD) {
      float sv[4][C::NT];
      k8_tile_scales<F>(c0, sv[0]);
      k8_tile_scales<F>(c4, sv[1]);
      k8_tile_scales<F>(c8, sv[2]);
      k8_tile_scales<F>(c12, sv[3]);
      float rn[C::NT];
      bool grow = false;
#pragma unroll
      for (int tile = 0; tile < C::NT; tile++) {
        float smax = fmaxf(fmaxf(sv[0][tile], sv[1][tile]), fmaxf(sv[2][tile], sv[3][tile]));
        smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 1));
        smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 2));
        rn[tile] = fmaxf(R[tile], smax); /* the same in every lane */
        grow |= rn[tile] != R[tile];
      }
      if (grow) { /* warp-uniform */
#pragma unroll
        for (int tile = 0; tile < C::NT; tile++)
          if (rn[tile] != R[tile]) {
            const float keep = rn[tile] > 0.f ? R[tile] / rn[tile] : 0.f;
#pragma unroll
            for (int bb = 0; bb < BPT; bb++)
#pragma unroll
              for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[tile * BPT + bb][j][e] *= keep;
          }
      }
#pragma unroll
      for (int tile = 0; tile < C::NT; tile++) R[tile] = rn[tile];
#pragma unroll
      for (int tile = 0; tile < C::NT; tile++) {
        const float rnew = R[tile];
        const float inv = rnew > 0.f ? fast_rcp(rnew) : 0.f;
        const uint32_t b0 = pack_f16(p0 * (sv[0][tile] * inv), p4 * (sv[1][tile] * inv));
        const uint32_t b1 = pack_f16(p8 * (sv[2][tile] * inv), p12 * (sv[3][tile] * inv));
#pragma unroll
        for (int bb = 0; bb < BPT; bb++) {
          const int b = tile * BPT + bb;
          const uint2 v0 = *reinterpret_cast<const uint2 *>(c0 + 64 * b + 8 * g);
          const uint2 v4 = *reinterpret_cast<const uint2 *>(c4 + 64 * b + 8 * g);
          const uint2 v8 = *reinterpret_cast<const uint2 *>(c8 + 64 * b + 8 * g);
          const uint2 v12 = *reinterpret_cast<const uint2 *>(c12 + 64 * b + 8 * g);
#pragma unroll
          for (int j = 0; j < 4; j++) {
            const uint32_t w0 = j < 2 ? v0.x : v0.y, w4 = j < 2 ? v4.x : v4.y;
            const uint32_t w8 = j < 2 ? v8.x : v8.y, w12 = j < 2 ? v12.x : v12.y;
            uint32_t a[4];
            e4m3x4_to_f16x2x2(k8_pair_bytes(w0, w4, j & 1), a[0], a[1]);
            e4m3x4_to_f16x2x2(k8_pair_bytes(w8, w12, j & 1), a[2], a[3]);
            mma_f16(o[b][j], a, b0, b1);
          }
        }
      }
    } else {
#pragma unroll
      for (int tile = 0; tile < C::NT; tile++) {
        const float s0 = tile_scale<F>(c0, tile), s4 = tile_scale<F>(c4, tile);
        const float s8 = tile_scale<F>(c8, tile), s12 = tile_scale<F>(c12, tile);
        float smax = fmaxf(fmaxf(s0, s4), fmaxf(s8, s12));
        smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 1));
        smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 2));
        const float rnew = fmaxf(R[tile], smax); /* the same in every lane */
        if (rnew != R[tile]) {
          const float keep = rnew > 0.f ? R[tile] / rnew : 0.f;
#pragma unroll
          for (int bb = 0; bb < BPT; bb++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
              for (int e = 0; e < 4; e++) o[tile * BPT + bb][j][e] *= keep;
          R[tile] = rnew;
        }
        /* B = P * scale / R in [0, 2^8]: an approximate 1 / R (R scales the
         * accumulators back exactly in the merge, so only B's rounding moves) */
        const float inv = rnew > 0.f ? fast_rcp(rnew) : 0.f;
        const uint32_t b0 = pack_f16(p0 * (s0 * inv), p4 * (s4 * inv));
        const uint32_t b1 = pack_f16(p8 * (s8 * inv), p12 * (s12 * inv));
#pragma unroll
        for (int bb = 0; bb < BPT; bb++) {
          const int b = tile * BPT + bb;
          const uint2 v0 = *reinterpret_cast<const uint2 *>(c0 + 64 * b + 8 * g);
          const uint2 v4 = *reinterpret_cast<const uint2 *>(c4 + 64 * b + 8 * g);
          const uint2 v8 = *reinterpret_cast<const uint2 *>(c8 + 64 * b + 8 * g);
          const uint2 v12 = *reinterpret_cast<const uint2 *>(c12 + 64 * b + 8 * g);
#pragma unroll
          for (int j = 0; j < 4; j++) {
            const uint32_t w0 = j < 2 ? v0.x : v0.y, w4 = j < 2 ? v4.x : v4.y;
            const uint32_t w8 = j < 2 ? v8.x : v8.y, w12 = j < 2 ? v12.x : v12.y;
            uint32_t a[4];
            e4m3x4_to_f16x2x2(k8_pair_bytes(w0, w4, j & 1), a[0], a[1]);
            e4m3x4_to_f16x2x2(k8_pair_bytes(w8, w12, j & 1), a[2], a[3]);
            mma_f16(o[b][j], a, b0, b1);
          }
        }
      }
    }
    if (F == 2) { /* rope dims 448 .. 511: bf16, B = P^T */
      const uint32_t b0 = pack_bf16(p0, p4), b1 = pack_bf16(p8, p12);
      const uint4 v0 = *reinterpret_cast<const uint4 *>(c0 + C::ROPE + 16 * g);
      const uint4 v4 = *reinterpret_cast<const uint4 *>(c4 + C::ROPE + 16 * g);
      const uint4 v8 = *reinterpret_cast<const uint4 *>(c8 + C::ROPE + 16 * g);
      const uint4 v12 = *reinterpret_cast<const uint4 *>(c12 + C::ROPE + 16 * g);
      const uint32_t w0[4] = {v0.x, v0.y, v0.z, v0.w}, w4[4] = {v4.x, v4.y, v4.z, v4.w};
      const uint32_t w8[4] = {v8.x, v8.y, v8.z, v8.w}, w12[4] = {v12.x, v12.y, v12.z, v12.w};
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const uint32_t a[4] = {__byte_perm(w0[j], w4[j], 0x5410u), __byte_perm(w0[j], w4[j], 0x7632u),
                               __byte_perm(w8[j], w12[j], 0x5410u), __byte_perm(w8[j], w12[j], 0x7632u)};
        mma_bf16(o[7][j], a, b0, b1);
      }
    }
    __syncwarp(); /* the buffer is refilled by the next unit's issue */
  }
  cp_async_wait<0>();

  /* ---- merge of the four warps: row sums over the 8 lanes of a q4 */
  float l[2] = {lsum[0], lsum[1]};
#pragma unroll
  for (int off = 4; off <= 16; off <<= 1) {
    l[0] += __shfl_xor_sync(0xffffffffu, l[0], off);
    l[1] += __shfl_xor_sync(0xffffffffu, l[1], off);
  }
  if (g == 0) {
    ml[warp * 8 + 2 * q4] = m2[0];
    ml[warp * 8 + 2 * q4 + 1] = m2[1];
    ml[32 + warp * 8 + 2 * q4] = l[0];
    ml[32 + warp * 8 + 2 * q4 + 1] = l[1];
  }
  __syncthreads(); /* every warp is done with its records, and ml is complete */
  float *os = reinterpret_cast<float *>(smem + DSK_MLA8_OFF_KV);
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int hh = 2 * q4 + r;
    float mall = kNegInf;
#pragma unroll
    for (int w = 0; w < k8Warps; w++) mall = fmaxf(mall, ml[w * 8 + hh]);
    const float f = m2[r] == kNegInf ? 0.f : fast_exp2(m2[r] - mall);
#pragma unroll
    for (int b = 0; b < 8; b++) {
      const float fr = f * (F == 2 && b == 7 ? 1.f : R[b / BPT < C::NT ? b / BPT : 0]);
      float *dst = os + (warp * 8 + hh) * OST + 64 * b + 8 * g; /* dims 64 b + 8 g + 2 j (+1) */
      *reinterpret_cast<float4 *>(dst) =
          make_float4(o[b][0][r] * fr, o[b][0][2 + r] * fr, o[b][1][r] * fr, o[b][1][2 + r] * fr);
      *reinterpret_cast<float4 *>(dst + 4) =
          make_float4(o[b][2][r] * fr, o[b][2][2 + r] * fr, o[b][3][r] * fr, o[b][3][2 + r] * fr);
    }
  }
  __syncthreads();
  /* thread: head hh, dims c4 + 64 k .. + 3 for k = 0 .. 7 (16 threads a
   * head read and write contiguous 256-byte rows) */
  const int hh = tid >> 4, c4 = (tid & 15) * 4, h = h0 + hh;
  if (h >= p.H) return;
  float mall = kNegInf;
#pragma unroll
  for (int w = 0; w < k8Warps; w++) mall = fmaxf(mall, ml[w * 8 + hh]);
  float L = 0.f;
#pragma unroll
  for (int w = 0; w < k8Warps; w++) {
    const float mw = ml[w * 8 + hh];
    if (mw != kNegInf) L += ml[32 + w * 8 + hh] * fast_exp2(mw - mall);
  }
  float4 acc[8];
#pragma unroll
  for (int k = 0; k < 8; k++) {
    acc[k] = *reinterpret_cast<const float4 *>(os + hh * OST + c4 + 64 * k);
#pragma unroll
    for (int w = 1; w < k8Warps; w++) {
      const float4 v = *reinterpret_cast<const float4 *>(os + (w * 8 + hh) * OST + c4 + 64 * k);
      acc[k].x += v.x;
      acc[k].y += v.y;
      acc[k].z += v.z;
      acc[k].w += v.w;
    }
  }
  const bool empty = !(L > 0.f);
  const float lse = empty ? kNegInf : (mall + log2f(L)) * 0.69314718055994531f;
  if (p.splits == 1) {
    float fac = 0.f;
    if (!empty) {
      fac = 1.f / L;
      if (p.sink) fac *= 1.f / (1.f + expf(p.sink[h] - lse)); /* sigmoid(lse - sink) */
    }
    uint16_t *orow = p.out + t * p.out_st + (int64_t)h * p.out_sh + c4;
#pragma unroll
    for (int k = 0; k < 8; k++) /* fac is 0 for an empty row */
      *reinterpret_cast<uint2 *>(orow + 64 * k) =
          make_uint2((uint32_t)f32_to_bf16_rne(acc[k].x * fac) | ((uint32_t)f32_to_bf16_rne(acc[k].y * fac) << 16),
                     (uint32_t)f32_to_bf16_rne(acc[k].z * fac) | ((uint32_t)f32_to_bf16_rne(acc[k].w * fac) << 16));
    if (p.lse && (tid & 15) == 0) p.lse[t * p.lse_st + (int64_t)h * p.lse_sh] = lse;
  } else {
    const int64_t part = (t * p.H + h) * p.splits + split;
    float *po = p.part_o + part * 512 + c4;
    const float inv_l = empty ? 0.f : 1.f / L;
#pragma unroll
    for (int k = 0; k < 8; k++)
      *reinterpret_cast<float4 *>(po + 64 * k) =
          make_float4(acc[k].x * inv_l, acc[k].y * inv_l, acc[k].z * inv_l, acc[k].w * inv_l);
    if ((tid & 15) == 0) p.part_lse[part] = lse;
  }
}
