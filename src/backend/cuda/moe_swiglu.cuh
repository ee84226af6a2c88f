/* moe_swiglu.cuh - the clamped SwiGLU + 1x128 requantization of one
 * group by a warp (spec/mxfp4-moe.md §6.2 step 5), included by moe_ops.cu
 * and by tests/emu_moe_swiglu.cc inside their anonymous namespaces, after
 * moe_common.cuh and format/mxfp4.h. */
#ifndef DSK_MOE_SWIGLU_CUH
#define DSK_MOE_SWIGLU_CUH

/* The clamped SwiGLU of one (gate, up) pair as the cpu-ref computes it:
 * fp64 from the bf16 values, rounded to fp32 once. */
__device__ __forceinline__ float swiglu_ref_f32(float gf, float uf, double L) {
  double gv = (double)gf, uv = (double)uf;
  if (L > 0.0) {
    if (gv > L) gv = L;
    if (uv > L) uv = L;
    if (uv < -L) uv = -L;
  }
  return (float)(gv / (1.0 + exp(-gv)) * uv);
}

/* DSK_MOE_SWIGLU_F32 (compile-time; default 1; MoE v16): the skip-padding
 * SwiGLU kernel computes h in fp32 (expf, __fdividef: within 6 fp32 ulps of
 * the reference's fp64 h rounded to fp32) with 8-byte loads and one 4-byte
 * store per lane, and falls back to the reference's fp64 arithmetic exactly
 * where fp32 could give another result: per element for an h / scale within
 * 32 ulps of an e4m3 rounding tie (the zero range's edge 2^-10 included),
 * per group for an amax within 64 ulps of a scale-byte boundary (448 * 2^k:
 * below the amax floor the byte is constant). Inputs outside |gate| <= 80
 * and |up| <= 2^100 (NaN and Inf included) take the fp64 path too: that
 * keeps 1 + expf(-gate) inside __fdividef's accurate range (below 2^126)
 * and h away from fp32 overflow. An h that fp32 rounds to a subnormal or
 * zero is coded 0 either way (the smallest scale is 1e-4 / 448). So codes
 * and scales are the fp64 path's, bit for bit. 0 = fp64 for every element
 * (A/B). */
#ifndef DSK_MOE_SWIGLU_F32
#define DSK_MOE_SWIGLU_F32 1
#endif

/* h in fp32 and whether it must be recomputed in fp64 (see above) */
__device__ __forceinline__ float swiglu_fast_f32(float g, float u, float L, bool &slow) {
  slow = !(fabsf(g) <= 80.0f) || !(fabsf(u) <= 0x1p100f);
  if (L > 0.0f) {
    g = g > L ? L : g;
    u = u > L ? L : (u < -L ? -L : u);
  }
  return __fdividef(g, 1.0f + expf(-g)) * u;
}

/* x within 32 ulps of a tie of dsk_fmt_e4m3_from_f32's rounding (the same
 * step arithmetic; saturated values and the zero range's edge included) */
__device__ __forceinline__ bool e4m3_near_tie(float x) {
  const uint32_t a = __float_as_uint(x) & 0x7FFFFFFFu;
  if (a >= 0x43E00000u) return false; /* saturates to 448 */
  /* [2^-6, 448): e4m3 normals, a step of 2^(e-3): the tie is the low 20 bits at 2^19 */
  if (a >= 0x3C800000u) return (a & 0xFFFFFu) - (0x80000u - 32u) <= 64u;
  if (a <= 0x3A800000u) return a > 0x3A800000u - 32u; /* 2^-10: the tie between 0 and 2^-9 */
  const int e = (int)(a >> 23) - 127;
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const int shift = 20 + ((e < -6 ? -6 : e) - e);
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  return (rem > half ? rem - half : half - rem) <= 32u;
}

/* Group g of 128 of a live D1 row (a warp; lane owns columns 4 lane ..
 * 4 lane + 3 of the group: one 8-byte load of gate and of up (at row + I),
 * one 4-byte store of codes into qrow); the scale byte returned, the
 * non-finite h counted in bad. Needs row 8-byte aligned and qrow 4-byte
 * aligned (the caller checks). */
struct SwigluIn {
  uint2 g, u; /* this lane's 4 gate and 4 up values (bf16) */
};
__device__ __forceinline__ SwigluIn swiglu_load(const uint16_t *row, int64_t I, int64_t g, int lane) {
  const int64_t col = g * DSK_FMT_FP8_GROUP + 4 * lane;
  return {*reinterpret_cast<const uint2 *>(row + col), *reinterpret_cast<const uint2 *>(row + I + col)};
}
/* the codes and scale of a group from its loaded values (swiglu_load) */
__device__ __forceinline__ uint8_t swiglu_codes_f32(const SwigluIn &in, int64_t g, double limit, uint8_t *qrow, int lane,
                                                    int &bad) {
  const int64_t col = g * DSK_FMT_FP8_GROUP + 4 * lane;
  const uint2 gw = in.g, uw = in.u;
  const float gv[4] = {__uint_as_float(gw.x << 16), __uint_as_float(gw.x & 0xFFFF0000u), __uint_as_float(gw.y << 16),
                       __uint_as_float(gw.y & 0xFFFF0000u)};
  const float uv[4] = {__uint_as_float(uw.x << 16), __uint_as_float(uw.x & 0xFFFF0000u), __uint_as_float(uw.y << 16),
                       __uint_as_float(uw.y & 0xFFFF0000u)};
  const float L = (float)limit;
  float v[4];
#pragma unroll
  for (int c = 0; c < 4; c++) {
    bool slow;
    v[c] = swiglu_fast_f32(gv[c], uv[c], L, slow);
    if (slow) v[c] = swiglu_ref_f32(gv[c], uv[c], limit);
  }
  auto group_amax = [&]() {
    float a = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; c++)
      if (!f32_nonfinite(v[c])) a = fabsf(v[c]) > a ? fabsf(v[c]) : a;
    return warp_max_nonneg(a);
  };
  float amax = group_amax();
  const int mant = (int)(__float_as_uint(amax) & 0x7FFFFFu);
  if (mant > 0x600000 - 64 && mant < 0x600000 + 64) { /* warp-uniform: the group in fp64 */
#pragma unroll
    for (int c = 0; c < 4; c++) v[c] = swiglu_ref_f32(gv[c], uv[c], limit);
    amax = group_amax();
  }
  const uint8_t e = dsk_fmt_fp8_scale_byte(amax);
  uint32_t word = 0;
#if DSK_MOE_CVT_HW
  /* x = v / s as v * 2^(127-e), coded by cvt (moe_common.cuh, DSK_MOE_CVT_HW) */
  const float inv = pow2_inv_from_byte(e);
  float x[4];
#pragma unroll
  for (int c = 0; c < 4; c++) {
    x[c] = v[c] * inv;
    if (!f32_nonfinite(v[c]) && e4m3_near_tie(x[c])) x[c] = swiglu_ref_f32(gv[c], uv[c], limit) * inv;
  }
  const uint32_t w = e4m3x4_scaled(x, 1.0f);
#pragma unroll
  for (int c = 0; c < 4; c++) {
    uint32_t q = (w >> (8 * c)) & 0xFFu;
    if (f32_nonfinite(v[c])) {
      bad++;
      q = DSK_FMT_E4M3_NAN;
    }
    word |= q << (8 * c);
  }
#else
  const float s = dsk_fmt_pow2_from_byte(e);
#pragma unroll
  for (int c = 0; c < 4; c++) {
    uint8_t q = (uint8_t)DSK_FMT_E4M3_NAN;
    if (f32_nonfinite(v[c])) {
      bad++;
    } else {
      float x = v[c] / s;
      if (e4m3_near_tie(x)) x = swiglu_ref_f32(gv[c], uv[c], limit) / s;
      q = dsk_fmt_e4m3_from_f32(x);
    }
    word |= (uint32_t)q << (8 * c);
  }
#endif
  *reinterpret_cast<uint32_t *>(qrow + col) = word;
  return e;
}
__device__ __forceinline__ uint8_t swiglu_group_f32(const uint16_t *row, int64_t I, int64_t g, double limit,
                                                    uint8_t *qrow, int lane, int &bad) {
  return swiglu_codes_f32(swiglu_load(row, I, g, lane), g, limit, qrow, lane, bad);
}

#endif
