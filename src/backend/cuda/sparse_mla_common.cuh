/* sparse_mla_common.cuh - what the two sparse MLA decode kernels
 * (sparse_mla_k16.cuh, sparse_mla_k32.cuh) and their launcher
 * (sparse_mla_decode.cu) share: the kernel parameters, the per-format record
 * constants and small device helpers. Included once, inside the launcher's
 * anonymous namespace. */
constexpr int kSub = DSK_MLA_SUB;

struct Seg {
  const uint8_t *base;
  int64_t pbs, page_stride, cap; /* cap = num_pages * pbs */
  uint32_t pbs32;                 /* min(pbs, 2^31): slot / pbs in 32 bits (slots are < 2^31) */
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
  int splits, cpb, nch0, nch;
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
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float bf16_bits_to_f32(uint32_t b) { return __uint_as_float(b << 16); }
__device__ __forceinline__ uint16_t f32_to_bf16_rne(float x) {
  uint32_t r;
  asm("{\n .reg .b16 t;\n cvt.rn.bf16.f32 t, %1;\n cvt.u32.u16 %0, t;\n}\n" : "=r"(r) : "f"(x));
  return (uint16_t)r;
}

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

/* One stage's online softmax, shared by both kernels and computed by every
 * warp of a head tile for the 16 (row, candidate) pairs each thread needs as
 * its PV A fragments: rows g, g+8 and candidates 16*ks + 8*hi + 2*q4 + {0,1}.
 * S: the head tile's 4 partial-score blocks ([4][16][DSK_MLA_P_STRIDE] fp32,
 * summed here); valid: the stage's 32 candidate flags. Updates the running
 * max m2 (log2 domain) and this thread's partial row sums, rescales acc when
 * a row max moved, and writes the probabilities to pv [ks][hi][row][pair].
 * Same inputs, same operations: every warp holds identical values. */
__device__ __forceinline__ void stage_softmax(const float *S, const int32_t *valid, float scale_log2, int g, int q4,
                                              float (&m2)[2], float (&lsum)[2], float (&acc)[2][8][4],
                                              float (&pv)[2][2][2][2]) {
  constexpr int PST = DSK_MLA_P_STRIDE;
  float sc[2][2][2][2];
  float mx0 = kNegInf, mx1 = kNegInf;
#pragma unroll
  for (int ks = 0; ks < 2; ks++)
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
      const int cc = ks * 16 + hi * 8 + 2 * q4;
      float2 s0 = make_float2(0.f, 0.f), s1 = make_float2(0.f, 0.f);
#pragma unroll
      for (int w = 0; w < 4; w++) {
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
  const float mn[2] = {fmaxf(m2[0], mx0), fmaxf(m2[1], mx1)};
  float al[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    al[r] = mn[r] == kNegInf ? 1.f : fast_exp2(m2[r] - mn[r]);
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
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
      for (int j = 0; j < 8; j++) {
        acc[hh][j][0] *= al[0];
        acc[hh][j][1] *= al[0];
        acc[hh][j][2] *= al[1];
        acc[hh][j][3] *= al[1];
      }
}
