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
