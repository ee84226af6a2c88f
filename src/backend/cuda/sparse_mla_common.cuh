/* sparse_mla_common.cuh - what the two sparse MLA decode kernels
 * (sparse_mla_k16.cuh, sparse_mla_k32.cuh) and their launcher
 * (sparse_mla_decode.cu) share: the kernel parameters, the per-format record
 * constants and small device helpers. Included once, inside the launcher's
 * anonymous namespace. */
constexpr int kSub = DSK_MLA_SUB;
#ifndef DSK_MLA_ISSUE_UNROLL
#define DSK_MLA_ISSUE_UNROLL 0 /* the 16- and 32-head kernels' copy loop (stage_issue's UNROLL);
                                  1 is 3-7 % slower on the 32-head Format A rows (docs/design.md) */
#endif

struct Seg {
  const uint8_t *base;
  int64_t pbs, page_stride, cap; /* cap = num_pages * pbs */
  uint32_t pbs32;                 /* min(pbs, 2^31): slot / pbs in 32 bits (slots are < 2^31) */
  int pbs_log2;                   /* log2(pbs32) when it is a power of two, else -1 (a shift
                                   * replaces the division) */
  const int32_t *slots;
  int64_t slots_st, width;
  const int32_t *lens;
};

struct Params {
  const uint16_t *q;
  int64_t q_st, q_sh;
  float scale_log2; /* sm_scale * log2(e) */
  int64_t T, H;
  int nseg;
  Seg seg[2];
  const float *sink;
  uint16_t *out;
  int64_t out_st, out_sh;
  float *lse;
  int64_t lse_st, lse_sh;
  float *part_o;   /* [T][H][splits][512] */
  float *part_lse; /* [T][H][splits] */
  int splits, spb, nch0, nch; /* spb: 32-candidate stages per split (2 * cpb, or 1: see stages_per_split) */
  int nhg;
  unsigned long long *counters;
};

template <int F>
struct Fmt;
template <>
struct Fmt<1> { /* A656 */
  static constexpr int NOPE = 512, TILE = 128, NT = 4, SREC = 656, ROPE = 528, PIECES = 41;
};
template <>
struct Fmt<2> { /* B584 */
  static constexpr int NOPE = 448, TILE = 64, NT = 7, SREC = 592, ROPE = 448, PIECES = 36;
};

using namespace dsk_ptx;

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}
__device__ __forceinline__ float bf16_bits_to_f32(uint32_t b) { return __uint_as_float(b << 16); }

/* KV UE8M0 decode by the exponent-field trick: e = 0 gives 0.0 as the spec
 * requires; e = 255 (never written) gives +inf, which kv-cache.md allows. */
__device__ __forceinline__ float ue8m0_kv(uint32_t e) { return __uint_as_float(e << 23); }

/* Scale of tile `tile` of the staged record at `rec`. */
template <int F>
__device__ __forceinline__ float tile_scale(const uint8_t *rec, int tile) {
  if (F == 1) return *reinterpret_cast<const float *>(rec + 512 + 4 * tile);
  return ue8m0_kv(rec[576 + tile]);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

#define kNegInf (-INFINITY)

/* Length of segment s's valid prefix in row t. */
__device__ __forceinline__ int64_t seg_len(const Seg &sg, int64_t t) {
  if (!sg.lens) return sg.width;
  int64_t l = sg.lens[t];
  return l < 0 ? 0 : (l > sg.width ? sg.width : l);
}

/* The candidates of one CTA: the valid prefix of each segment in row t and
 * this split's active 32-candidate stages (segment 0: [b0, b0 + n0),
 * segment 1: [b1, b1 + n - n0)); split j owns stage slots [j * spb,
 * (j + 1) * spb) of the row's 2 * nch slots. Counts the row's clamped lens
 * once. */
struct StageRange {
  int64_t L0, L1, b0, b1;
  int n0, n;
};
__device__ __forceinline__ StageRange stage_range(const Params &p, int64_t t, int split, bool counting, int tid) {
  StageRange r;
  r.L0 = seg_len(p.seg[0], t);
  r.L1 = p.nseg > 1 ? seg_len(p.seg[1], t) : 0;
  if (counting && split == 0 && tid == 0) {
    unsigned long long clamped = 0;
    for (int s = 0; s < p.nseg; s++)
      if (p.seg[s].lens) {
        int64_t l = p.seg[s].lens[t];
        clamped += (l < 0 || l > p.seg[s].width);
      }
    if (clamped) atomicAdd(&p.counters[1], clamped);
  }
  /* stage slots: segment 0 owns 2 * nch0 of them, segment 1 the rest */
  const int s0 = split * p.spb, s1 = min(s0 + p.spb, 2 * p.nch), n0s = 2 * p.nch0;
  r.b0 = s0;
  const int64_t e0 = min((int64_t)min(s1, n0s), (r.L0 + kSub - 1) / kSub);
  r.b1 = max(s0 - n0s, 0);
  const int64_t e1 = min((int64_t)max(s1 - n0s, 0), (r.L1 + kSub - 1) / kSub);
  r.n0 = (int)max(e0 - r.b0, (int64_t)0);
  r.n = r.n0 + (int)max(e1 - r.b1, (int64_t)0);
  return r;
}

/* Slot id of candidate c of stage i, or -1 past the valid prefix. */
__device__ __forceinline__ int32_t stage_slot(const Params &p, const StageRange &r, int64_t t, int i, int c) {
  if (i >= r.n) return -1;
  const bool s1 = i >= r.n0;
  const int64_t k = (s1 ? r.b1 + (i - r.n0) : r.b0 + i) * kSub + c;
  if (k >= (s1 ? r.L1 : r.L0)) return -1;
  const int32_t *slots = s1 ? p.seg[1].slots : p.seg[0].slots;
  const int64_t sst = s1 ? p.seg[1].slots_st : p.seg[0].slots_st;
  return __ldg(slots + t * sst + k);
}

/* Copies candidate c of stage i (slot `slot`) into its staged record `dst`
 * with cp.async, TPC threads per candidate (this thread is `part`); an
 * invalid candidate is zero filled and never read. The part-0 thread writes
 * the candidate's valid flag and counts an out-of-range slot. */
template <int F, int TPC, bool UNROLL = DSK_MLA_ISSUE_UNROLL != 0>
__device__ __forceinline__ void stage_issue(const Params &p, const StageRange &r, int i, int c, int part,
                                            int32_t slot, bool counting, uint8_t *dst, int32_t *valid_flag) {
  using C = Fmt<F>;
  const bool s1 = i >= r.n0; /* fields picked by value: no dynamic indexing of the parameters */
  const int64_t k = (s1 ? r.b1 + (i - r.n0) : r.b0 + i) * kSub + c;
  const uint8_t *sbase = s1 ? p.seg[1].base : p.seg[0].base;
  bool ok = false;
  const uint8_t *src = sbase, *foot = sbase;
  if (k < (s1 ? r.L1 : r.L0)) {
    const int64_t cap = s1 ? p.seg[1].cap : p.seg[0].cap;
    ok = slot >= 0 && (int64_t)slot < cap;
    if (!ok && slot >= 0 && counting && part == 0) atomicAdd(&p.counters[0], 1ull);
    if (ok) {
      const int64_t pst = s1 ? p.seg[1].page_stride : p.seg[0].page_stride;
      const uint32_t pb32 = s1 ? p.seg[1].pbs32 : p.seg[0].pbs32;
      const int lg = s1 ? p.seg[1].pbs_log2 : p.seg[0].pbs_log2;
      const uint32_t pgu = lg >= 0 ? (uint32_t)slot >> lg : (uint32_t)slot / pb32;
      const int64_t j = (int64_t)((uint32_t)slot - pgu * pb32);
      const uint8_t *page = sbase + (int64_t)pgu * pst;
      if (F == 1) {
        src = page + 656 * j;
      } else {
        const int64_t pbs = s1 ? p.seg[1].pbs : p.seg[0].pbs;
        src = page + 576 * j;
        foot = page + 576 * pbs + 8 * j;
      }
    }
  }
  if constexpr (UNROLL) {
    /* a compile-time trip count, so that every copy addresses [base +
     * immediate] from one pair of base registers (a rolled loop rewrites
     * its address registers while the warp's earlier copies may still wait
     * to read them) */
    constexpr int NPER = (C::PIECES + TPC - 1) / TPC;
    uint8_t *d = dst + part * 16;
    const uint8_t *s = src + part * 16;
#pragma unroll
    for (int i = 0; i < NPER; i++)
      if (C::PIECES % TPC == 0 || i + 1 < NPER || part + i * TPC < C::PIECES)
        cp_async16(d + i * TPC * 16, s + i * TPC * 16, ok);
  } else {
    for (int pc = part; pc < C::PIECES; pc += TPC) cp_async16(dst + pc * 16, src + pc * 16, ok);
  }
  if (F == 2 && part == 0) cp_async8(dst + 576, foot, ok);
  if (part == 0) *valid_flag = ok;
}

/* Stages NR query heads (h_first .. h_first + NR - 1; heads >= H read as
 * zero) for the MMAs, one warp: nope dims as f16 pre-scaled by 2^-shift, with the
 * shift chosen per head from its largest |q| so the f16 values stay below
 * 2^15 (exact power of two), rope dims as the raw bf16. Row r goes to
 * nope + r * nope_bytes and rope + r * rope_bytes; lane 0 writes 2^shift to
 * qscale[r]. Two steps, so that a kernel can issue other loads between
 * them: q_load issues all loads of the NR rows into registers (nothing is
 * used yet), q_store waits for them and converts and stores. */
template <int NR>
struct QRows {
  uint4 qv[NR][2], rv[NR];
};
template <int F, int NR>
__device__ __forceinline__ QRows<NR> q_load(const Params &p, int64_t t, int h_first, int lane) {
  using C = Fmt<F>;
  QRows<NR> q;
  uint4(&qv)[NR][2] = q.qv;
  uint4(&rv)[NR] = q.rv;
#pragma unroll
  for (int r = 0; r < NR; r++) {
    const int h = h_first + r;
    const bool live = h < p.H;
    const uint16_t *qrow = p.q + t * p.q_st + (int64_t)(live ? h : 0) * p.q_sh;
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int d = lane * 8 + 256 * k;
      qv[r][k] = (live && d < C::NOPE) ? *reinterpret_cast<const uint4 *>(qrow + d) : make_uint4(0, 0, 0, 0);
    }
    rv[r] = (live && lane < 8) ? *reinterpret_cast<const uint4 *>(qrow + C::NOPE + lane * 8) : make_uint4(0, 0, 0, 0);
  }
  return q;
}
/* The largest |q| over the nope dims of one staged row (the warp's 32
 * lanes together), and 0 for an all-zero row; a NaN is not seen (fmaxf
 * drops it), an inf is. */
template <bool REDUX = false>
__device__ __forceinline__ float q_row_absmax(const uint4 (&qv)[2]) {
  float mx = 0.f;
#pragma unroll
  for (int k = 0; k < 2; k++) {
    const uint32_t w[4] = {qv[k].x, qv[k].y, qv[k].z, qv[k].w};
#pragma unroll
    for (int e = 0; e < 4; e++)
      mx = fmaxf(mx, fmaxf(fabsf(bf16_bits_to_f32(w[e] & 0xffff)), fabsf(bf16_bits_to_f32(w[e] >> 16))));
  }
  /* REDUX: mx is +0 .. +inf (never NaN, never -0), so its bits order as
   * unsigned and one redux gives warp_max's result (DSK_K32F8_EARLY_PRO) */
  if constexpr (REDUX) return __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(mx)));
  else return warp_max(mx);
}
/* The pre-scale of one staged row (the warp's 32 lanes together): returns
 * 2^-shift, shift chosen from the row's largest |q| so that the f16 values
 * stay below 2^15, and lane 0 writes 2^shift to *qscale. */
template <bool REDUX = false>
__device__ __forceinline__ float q_prescale(const uint4 (&qv)[2], int lane, float *qscale) {
  const float mx = q_row_absmax<REDUX>(qv);
  const int ex = (int)((__float_as_uint(mx) >> 23) & 0xff) - 127;
  int shift = ex - 14 > 0 ? ex - 14 : 0;
  if (shift > 125) shift = 125;
  if (lane == 0) *qscale = __uint_as_float((uint32_t)(127 + shift) << 23);
  return __uint_as_float((uint32_t)(127 - shift) << 23);
}
/* Eight bf16 values (one 16-byte piece of a Q row) times the row's
 * pre-scale, as f16 pairs. */
__device__ __forceinline__ uint4 q_f16x8(const uint4 &v, float inv) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[4];
#pragma unroll
  for (int e = 0; e < 4; e++) o[e] = pack_f16(bf16_bits_to_f32(w[e] & 0xffff) * inv, bf16_bits_to_f32(w[e] >> 16) * inv);
  return make_uint4(o[0], o[1], o[2], o[3]);
}
/* PERM (rows layout only): inside each 16-dim group, the f16 pair of dims
 * (4j, 4j+1) is stored at position 2j and (4j+2, 4j+3) at 8+2j, so that the
 * m16n8k16 A fragment that ldmatrix delivers holds dims 4q..4q+3 of rows g
 * and g+8: the order of B fragments converted in registers from four
 * consecutive e4m3 bytes (sparse_mla_k32f8.cuh, ACCURATE form). */
template <int F, bool IL, int NR, bool PERM = false, bool REDUX = false>
__device__ __forceinline__ void q_store(const QRows<NR> &q, int lane, uint8_t *nope, int nope_bytes, uint8_t *rope,
                                        int rope_bytes, float *qscale, int il_row0) {
  using C = Fmt<F>;
  const uint4(&qv)[NR][2] = q.qv;
  const uint4(&rv)[NR] = q.rv;
#pragma unroll
  for (int r = 0; r < NR; r++) {
    const float inv = q_prescale<REDUX>(qv[r], lane, qscale + r);
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int d = lane * 8 + 256 * k;
      if (d >= C::NOPE) continue;
      const uint4 h = q_f16x8(qv[r][k], inv);
      const uint32_t o[4] = {h.x, h.y, h.z, h.w};
      if (IL) {
        /* fragment-interleaved (see DSK_MLA_QIL_OFF): dims d+2e, d+2e+1 of tile row il_row0 + r */
        const int row = il_row0 + r;
#pragma unroll
        for (int e = 0; e < 4; e++)
          *reinterpret_cast<uint32_t *>(nope + DSK_MLA_QIL_OFF(row, d + 2 * e)) = o[e];
      } else if (PERM) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int j = ((d & 15) >> 2) + (e >> 1); /* dims d + 2e, d + 2e + 1 = 4j + 2 (e & 1) + {0, 1} */
          *reinterpret_cast<uint32_t *>(nope + r * nope_bytes + 2 * ((d & ~15) + (e & 1) * 8 + 2 * j)) = o[e];
        }
      } else {
        *reinterpret_cast<uint4 *>(nope + r * nope_bytes + 2 * d) = make_uint4(o[0], o[1], o[2], o[3]);
      }
    }
    if (lane < 8) *reinterpret_cast<uint4 *>(rope + r * rope_bytes + 16 * lane) = rv[r];
  }
}
template <int F, bool IL = false, int NR = 4>
__device__ __forceinline__ void stage_q(const Params &p, int64_t t, int h_first, int lane, uint8_t *nope,
                                        int nope_bytes, uint8_t *rope, int rope_bytes, float *qscale,
                                        int il_row0 = 0) {
  q_store<F, IL, NR>(q_load<F, NR>(p, t, h_first, lane), lane, nope, nope_bytes, rope, rope_bytes, qscale, il_row0);
}

/* Lazy-maximum headroom of the softmax (log2 units): weights up to 2^8. */
constexpr float kLazyLog2 = 8.f;

/* The V-scale fold of PV: R is the running maximum tile scale of the
 * accumulators `acc` (NA blocks of 8 n-tiles: one 64-dim half in the
 * 16-head kernel, both head tiles in the 32-head one); s_lane is the scale
 * of candidate `lane` of this stage. Raises R to the stage's maximum,
 * rescales acc by old R / new R when it grew, and returns 1 / R (0 while
 * every scale is 0), so that the PV A operand P * scale / R stays in
 * [0, 1]. */
/* Every accumulator of the NA 64-dim blocks times f */
template <int NA>
__device__ __forceinline__ void scale_acc(float (&acc)[NA][8][4], float f) {
#pragma unroll
  for (int a = 0; a < NA; a++)
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[a][j][e] *= f;
}
template <int NA>
__device__ __forceinline__ float fold_v_scale(float &R, float s_lane, float (&acc)[NA][8][4]) {
  const float rnew = fmaxf(R, warp_max(s_lane));
  const float keep = rnew > 0.f ? R / rnew : 0.f;
  R = rnew;
  if (keep != 1.f) {
    scale_acc(acc, keep);
  }
  return rnew > 0.f ? 1.f / rnew : 0.f;
}
__device__ __forceinline__ float fold_v_scale(float &R, float s_lane, float (&acc)[8][4]) {
  return fold_v_scale<1>(R, s_lane, reinterpret_cast<float(&)[1][8][4]>(acc));
}
/* fold_v_scale's fast form (the 16-head kernel's DSK_MLA16_FAST_FOLD): the
 * stage's largest scale by one redux on the float bits of max(s_lane, 0)
 * (scales >= 0 order as unsigned; a NaN or negative scale counts as 0, as
 * fmaxf against R >= 0 treated it), and keep = old R / new R and 1 / R by
 * the approximate reciprocal, only when R grows (warp-uniform branch); inv_r
 * carries 1 / R between stages (start it at 0, as R). Exact for Format B's
 * power-of-two scales; for Format A keep and 1 / R move by an ulp or so. */
template <int NA>
__device__ __forceinline__ float fold_v_scale_fast(float &R, float &inv_r, float s_lane, float (&acc)[NA][8][4]) {
  const float rmax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(s_lane > 0.f ? s_lane : 0.f)));
  if (rmax > R) {
    const float rc = fast_rcp(rmax);
    const float keep = R * rc;
    scale_acc(acc, keep);
    R = rmax;
    inv_r = rc;
  }
  return inv_r;
}
__device__ __forceinline__ float fold_v_scale_fast(float &R, float &inv_r, float s_lane, float (&acc)[8][4]) {
  return fold_v_scale_fast<1>(R, inv_r, s_lane, reinterpret_cast<float(&)[1][8][4]>(acc));
}

/* One stage's online softmax, shared by both kernels and computed by every
 * warp of a head tile for the 16 (row, candidate) pairs each thread needs as
 * its PV A fragments: rows g, g+8 and candidates 16*ks + 8*hi + 2*q4 + {0,1}.
 * S: the head tile's NP partial-score blocks ([NP][16][DSK_MLA_P_STRIDE]
 * fp32, summed in order); valid: the stage's 32 candidate flags. Updates the
 * running max m2 (log2 domain) and this thread's partial row sums, rescales
 * the NH 64-dim halves of acc when a row max moved, and writes the probabilities to pv [ks][hi][row][pair].
 * FINAL: S holds one block of final scores (log2 domain, invalid
 * candidates -inf; the 4-warp 16-head kernel's QK by candidates), read as is.
 * The maximum is lazy when LAZY > 0 (the 32-head kernels' rule): a row's m2
 * moves only when the stage's maximum exceeds it by more than LAZY, so the
 * weights stay <= 2^LAZY and most stages skip the rescale (the PV A
 * operand P * scale / R then stays <= 2^LAZY: f16, far from overflow).
 * Same inputs, same operations: every warp holds identical values. */
template <int NP = 4, int NH = 2, int LAZY = 0, bool FINAL = false>
__device__ __forceinline__ void stage_softmax(const float *S, const int32_t *valid, float scale_log2, int g, int q4,
                                              float (&m2)[2], float (&lsum)[2], float (&acc)[NH][8][4],
                                              float (&pv)[2][2][2][2]) {
  constexpr int PST = DSK_MLA_P_STRIDE;
  float sc[2][2][2][2];
  float mx0 = kNegInf, mx1 = kNegInf;
#pragma unroll
  for (int ks = 0; ks < 2; ks++)
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
      const int cc = ks * 16 + hi * 8 + 2 * q4;
      if constexpr (FINAL) { /* block 0 holds final scores (log2 domain, invalid = -inf) */
        const float2 x0 = *reinterpret_cast<const float2 *>(S + g * PST + cc);
        const float2 x1 = *reinterpret_cast<const float2 *>(S + (g + 8) * PST + cc);
        sc[ks][hi][0][0] = x0.x;
        sc[ks][hi][0][1] = x0.y;
        sc[ks][hi][1][0] = x1.x;
        sc[ks][hi][1][1] = x1.y;
        mx0 = fmaxf(mx0, fmaxf(x0.x, x0.y));
        mx1 = fmaxf(mx1, fmaxf(x1.x, x1.y));
        continue;
      }
      float2 s0 = make_float2(0.f, 0.f), s1 = make_float2(0.f, 0.f);
#pragma unroll
      for (int w = 0; w < NP; w++) {
        const float *Sw = S + w * 16 * PST;
        const float2 x0 = *reinterpret_cast<const float2 *>(Sw + g * PST + cc);
        const float2 x1 = *reinterpret_cast<const float2 *>(Sw + (g + 8) * PST + cc);
        s0.x += x0.x;
        s0.y += x0.y;
        s1.x += x1.x;
        s1.y += x1.y;
      }
      const bool v0 = valid[cc] != 0, v1 = valid[cc + 1] != 0;
      sc[ks][hi][0][0] = v0 ? s0.x * scale_log2 : kNegInf;
      sc[ks][hi][0][1] = v1 ? s0.y * scale_log2 : kNegInf;
      sc[ks][hi][1][0] = v0 ? s1.x * scale_log2 : kNegInf;
      sc[ks][hi][1][1] = v1 ? s1.y * scale_log2 : kNegInf;
      mx0 = fmaxf(mx0, fmaxf(sc[ks][hi][0][0], sc[ks][hi][0][1]));
      mx1 = fmaxf(mx1, fmaxf(sc[ks][hi][1][0], sc[ks][hi][1][1]));
    }
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
  }
  const float mx[2] = {mx0, mx1};
  float mn[2], al[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    if (LAZY > 0) {
      mn[r] = mx[r] > m2[r] + (float)LAZY ? mx[r] : m2[r];
      al[r] = mn[r] == m2[r] ? 1.f : fast_exp2(m2[r] - mn[r]);
    } else {
      mn[r] = fmaxf(m2[r], mx[r]);
      al[r] = mn[r] == kNegInf ? 1.f : fast_exp2(m2[r] - mn[r]);
    }
    m2[r] = mn[r];
    lsum[r] *= al[r];
  }
#pragma unroll
  for (int ks = 0; ks < 2; ks++)
#pragma unroll
    for (int hi = 0; hi < 2; hi++)
#pragma unroll
      for (int r = 0; r < 2; r++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float x = sc[ks][hi][r][e];
          const float pr = x == kNegInf ? 0.f : fast_exp2(x - mn[r]);
          pv[ks][hi][r][e] = pr;
          lsum[r] += pr;
        }
  /* rescale the output accumulators by the max change (the V-scale R is
   * applied by the caller); skipped when no row max of the warp moved */
  if (!__all_sync(0xffffffffu, al[0] == 1.f && al[1] == 1.f))
#pragma unroll
    for (int hh = 0; hh < NH; hh++)
#pragma unroll
      for (int j = 0; j < 8; j++) {
        acc[hh][j][0] *= al[0];
        acc[hh][j][1] *= al[0];
        acc[hh][j][2] *= al[1];
        acc[hh][j][3] *= al[1];
      }
}
