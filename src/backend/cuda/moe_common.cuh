/* moe_common.cuh - small helpers shared by the CUDA MoE op files
 * (moe_ops.cu, moe_route.cu). Included inside each file's anonymous
 * namespace, after cuda_common.cuh. */
#define MOE_SET_DEVICE(what) DSK_CUDA_TRY(what, cudaSetDevice(dsk__cuda_state(ctx)->device))

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 1 << 20;

__device__ __forceinline__ float bf16f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

__device__ __forceinline__ int warp_sum_i(int v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

/* Maximum of finite non-negative floats (exact, order-free). */
__device__ __forceinline__ float warp_max_nonneg(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    const float w = __shfl_xor_sync(kFull, v, o);
    v = w > v ? w : v;
  }
  return v;
}

__device__ __forceinline__ bool f32_nonfinite(float v) { return (__float_as_uint(v) & 0x7FFFFFFFu) >= 0x7F800000u; }

/* DSK_MOE_CVT_HW (compile-time; default 1): the 1x128 quantizers (the
 * bf16 / fp32 quantize, the SwiGLU's requantization) code v / s, s =
 * 2^(e-127) the group's scale, as cvt.rn.satfinite.e4m3x2.f32 of v *
 * 2^(127-e): the same fp32 as the quotient (both round the same real once;
 * 2^(127-e) is exact for every byte e in [1, 254], 2^-127 a subnormal), and
 * that cvt codes a finite fp32 as dsk_fmt_e4m3_from_f32 does (tests/gpu_cvt.cu
 * checks every finite fp32 on the device). 0 = an IEEE division and the
 * format's software coder per value (the A/B baseline). */
#ifndef DSK_MOE_CVT_HW
#define DSK_MOE_CVT_HW 1
#endif
/* 1 / dsk_fmt_pow2_from_byte(e) for e in [1, 254], exact */
__device__ __forceinline__ float pow2_inv_from_byte(uint32_t e) {
  return __uint_as_float(e < 254u ? (254u - e) << 23 : 0x00400000u);
}
/* the e4m3 codes of v[c] * inv (byte c), inv a power of two; a non-finite
 * v gives a code the caller replaces */
__device__ __forceinline__ uint32_t e4m3x4_scaled(const float (&v)[4], float inv) {
  return dsk_ptx::f32x2_to_e4m3x2(v[0] * inv, v[1] * inv) | (dsk_ptx::f32x2_to_e4m3x2(v[2] * inv, v[3] * inv) << 16);
}

/* The 1x128 rule for a group held by a warp, 4 values per lane (any
 * mapping of the 128 columns to lanes: the amax is order-free): non-finite
 * values are counted in bad, excluded from the amax and coded 0x7F; returns
 * the group's scale byte and the lane's codes. Needs format/mxfp4.h. */
__device__ __forceinline__ uint8_t q128_warp_codes(const float (&v)[4], uint8_t (&q)[4], int &bad) {
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < 4; c++) {
    if (f32_nonfinite(v[c])) {
      bad++;
      continue;
    }
    const float m = fabsf(v[c]);
    amax = m > amax ? m : amax;
  }
  amax = warp_max_nonneg(amax);
  const uint8_t e = dsk_fmt_fp8_scale_byte(amax);
#if DSK_MOE_CVT_HW
  const uint32_t w = e4m3x4_scaled(v, pow2_inv_from_byte(e));
#pragma unroll
  for (int c = 0; c < 4; c++) q[c] = f32_nonfinite(v[c]) ? (uint8_t)DSK_FMT_E4M3_NAN : (uint8_t)(w >> (8 * c));
#else
  const float s = dsk_fmt_pow2_from_byte(e);
#pragma unroll
  for (int c = 0; c < 4; c++) q[c] = f32_nonfinite(v[c]) ? (uint8_t)DSK_FMT_E4M3_NAN : dsk_fmt_e4m3_from_f32(v[c] / s);
#endif
  return e;
}

__device__ __forceinline__ void count_add(unsigned long long *c, long long v) {
  if (c && v) atomicAdd(c, (unsigned long long)v);
}

static inline unsigned grid_for(int64_t items, int64_t per_block) {
  int64_t g = (items + per_block - 1) / per_block;
  if (g < 1) g = 1;
  if (g > kMaxGrid) g = kMaxGrid;
  return (unsigned)g;
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
