/* mxfp4.h - MXFP4 / FP8 MoE number rules and scale layouts
 * (spec/mxfp4-moe.md §1-§4; docs/moe.md). Internal, not public API.
 *
 * Builds on format.h (e2m1, e4m3, ue8m0 codecs are reused from there, not
 * redefined): the per-block rules of the two quantizers, nibble access,
 * DeepGEMM's UE8M0 word packing and the MN-major TMA-aligned packed layout.
 * Like format.h, every inline function is DSK_FMT_FN (host and, under nvcc,
 * device) and uses IEEE fp32 division only (no fast-math).
 *
 * The row-level host loops at the end (mxfp4.c) are shared by the CPU
 * reference and the host-side weight preparation.
 */
#ifndef DSK_FORMAT_MXFP4_H
#define DSK_FORMAT_MXFP4_H

#include <assert.h>
#include <stdint.h>

#include "format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSK_FMT_MX_BLOCK 32        /* elements per UE8M0 of an MX block */
#define DSK_FMT_MX_BYTES 16        /* packed bytes of one block */
#define DSK_FMT_E2M1_MAX 6.0f
#define DSK_FMT_FP8_GROUP 128      /* 1x128 activation group, 128x128 weight block */
#define DSK_FMT_UE8M0_NAN 0xFFu    /* the NaN-block marker */

/* ------------------------------------------------------------ e2m1 extras */
/* DeepGEMM's Python rounding (DSK_MX_TIES_TO_ZERO): the magnitude code is
 * the number of thresholds {.25, .75, 1.25, 1.75, 2.5, 3.5, 5} strictly
 * below |x|, so ties at .75, 1.75, 3.5 go down; saturating; sign from x.
 * NaN -> 0 (never reached: NaN blocks are marked by the block rule). */
DSK_FMT_FN uint8_t dsk_fmt_e2m1_from_f32_ttz(float x) {
  uint32_t u = dsk_fmt_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0;
  float a = dsk_fmt_f32_from_bits(u & 0x7FFFFFFFu);
  uint8_t c = (uint8_t)((a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) + (a > 3.5f) + (a > 5.0f));
  return (uint8_t)(((u >> 31) << 3) | c);
}

/* Nibble k of a K-major MXFP4 row: element 2i in the low nibble of byte i,
 * 2i+1 in the high nibble (§1.3). */
DSK_FMT_FN uint8_t dsk_fmt_mxfp4_code(const uint8_t *row, int64_t k) {
  return (uint8_t)((row[k >> 1] >> ((k & 1) * 4)) & 15u);
}
DSK_FMT_FN uint8_t dsk_fmt_mxfp4_pack2(uint8_t even, uint8_t odd) { return (uint8_t)((even & 15u) | ((odd & 15u) << 4)); }

/* ----------------------------------------------------------------- UE8M0 */
/* DeepGEMM's float -> byte trick for a positive power of two f:
 * e = bits(f) >> 23 (§1.2); the caller guarantees (bits & 0x807FFFFF) == 0. */
DSK_FMT_FN uint8_t dsk_fmt_ue8m0_from_pow2(float f) {
  uint32_t u = dsk_fmt_f32_bits(f);
#if !defined(__CUDA_ARCH__)
  assert((u & 0x807FFFFFu) == 0u);
#endif
  return (uint8_t)(u >> 23);
}

/* ------------------------------------------------------ MX block quantizer */
/* Scale byte of a finite block with amax = max |v| (§2.1 steps 1-3):
 *   default: e = clamp(E(f) + (M(f) != 0), 1, 254), f = max(amax, 1e-4) / 6
 *   DSK_MX_SCALE_FLOOR: e = clamp(E(max(amax, 1e-4)) - 2, 1, 254)
 * (amax >= 1e-4 is a normal fp32, so E() is its exponent field.) */
DSK_FMT_FN uint8_t dsk_fmt_mx_scale_byte(float amax, uint32_t flags) {
  float a = amax >= DSK_FMT_AMAX_FLOOR ? amax : DSK_FMT_AMAX_FLOOR;
  if (flags & DSK_MX_SCALE_FLOOR) {
    int e = (int)(dsk_fmt_f32_bits(a) >> 23) - 2;
    return (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
  }
  return dsk_fmt_ue8m0_ceil(a / DSK_FMT_E2M1_MAX);
}

/* One 32-element block v (fp32): writes 16 packed bytes and the scale byte;
 * returns 1 for a NaN block (NaN or +-inf present: scale 0xFF, codes 0). */
DSK_FMT_FN int dsk_fmt_mx_quant_block(const float *v, uint32_t flags, uint8_t *packed, uint8_t *scale) {
  float amax = 0.0f;
  int bad = 0;
  for (int i = 0; i < DSK_FMT_MX_BLOCK; i++) {
    uint32_t a = dsk_fmt_f32_bits(v[i]) & 0x7FFFFFFFu;
    bad |= a >= 0x7F800000u;
    float m = dsk_fmt_f32_from_bits(a);
    amax = m > amax ? m : amax;
  }
  if (bad) {
    for (int i = 0; i < DSK_FMT_MX_BYTES; i++) packed[i] = 0;
    *scale = (uint8_t)DSK_FMT_UE8M0_NAN;
    return 1;
  }
  uint8_t e = dsk_fmt_mx_scale_byte(amax, flags);
  float s = dsk_fmt_pow2_from_byte(e);
  for (int i = 0; i < DSK_FMT_MX_BYTES; i++) {
    float t0 = v[2 * i] / s, t1 = v[2 * i + 1] / s; /* exact: power-of-two divisor */
    uint8_t c0, c1;
    if (flags & DSK_MX_TIES_TO_ZERO) {
      c0 = dsk_fmt_e2m1_from_f32_ttz(t0);
      c1 = dsk_fmt_e2m1_from_f32_ttz(t1);
    } else {
      c0 = dsk_fmt_e2m1_from_f32(t0);
      c1 = dsk_fmt_e2m1_from_f32(t1);
    }
    packed[i] = dsk_fmt_mxfp4_pack2(c0, c1);
  }
  *scale = e;
  return 0;
}

/* -------------------------------------------------- FP8 1x128 group rule */
/* Scale byte of a group whose finite amax is `amax` (§2.2):
 * e = UE8M0 ceil of max(amax, 1e-4) / 448, in [1, 254]. */
DSK_FMT_FN uint8_t dsk_fmt_fp8_scale_byte(float amax) {
  float a = amax >= DSK_FMT_AMAX_FLOOR ? amax : DSK_FMT_AMAX_FLOOR;
  return dsk_fmt_ue8m0_ceil(a / DSK_FMT_E4M3_MAX);
}
/* n values (fp32) -> e4m3 codes and the scale byte; non-finite values give
 * 0x7F and are excluded from amax. Returns the number of non-finite values. */
DSK_FMT_FN int dsk_fmt_fp8_quant_group(const float *v, int n, uint8_t *q, uint8_t *scale) {
  float amax = 0.0f;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    uint32_t a = dsk_fmt_f32_bits(v[i]) & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) {
      bad++;
      continue;
    }
    float m = dsk_fmt_f32_from_bits(a);
    amax = m > amax ? m : amax;
  }
  uint8_t e = dsk_fmt_fp8_scale_byte(amax);
  float s = dsk_fmt_pow2_from_byte(e);
  for (int i = 0; i < n; i++) {
    uint32_t a = dsk_fmt_f32_bits(v[i]) & 0x7FFFFFFFu;
    q[i] = a >= 0x7F800000u ? (uint8_t)DSK_FMT_E4M3_NAN : dsk_fmt_e4m3_from_f32(v[i] / s);
  }
  *scale = e;
  return bad;
}

/* --------------------------------------------------------- scale packing */
/* Kp = ceil(sf_k / 4); T4 = round_up(MN, 4). */
DSK_FMT_FN int64_t dsk_fmt_sf_kp(int64_t sf_k) { return (sf_k + 3) / 4; }
DSK_FMT_FN int64_t dsk_fmt_sf_t4(int64_t MN) { return (MN + 3) / 4 * 4; }
/* Word offset of (g, mn, p) in the MN-major packed layout (§4.2). */
DSK_FMT_FN int64_t dsk_fmt_sf_off(int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t p) {
  const int64_t T4 = dsk_fmt_sf_t4(MN);
  return g * dsk_fmt_sf_kp(sf_k) * T4 + p * T4 + mn;
}
/* Word p of one row of raw scale bytes b[0..sf_k) (§4.1): byte j = scale of
 * K-group 4p + j, missing groups 0x00. */
DSK_FMT_FN uint32_t dsk_fmt_pack_word(const uint8_t *b, int64_t sf_k, int64_t p) {
  uint32_t w = 0;
  for (int j = 0; j < 4; j++) {
    int64_t k = 4 * p + j;
    if (k < sf_k) w |= (uint32_t)b[k] << (8 * j);
  }
  return w;
}
/* Scale byte of K-group kg of row (g, mn) from a packed tensor (little-endian
 * words: byte j of a word is bits 8j..8j+7). */
DSK_FMT_FN uint8_t dsk_fmt_sf_packed_byte(const int32_t *words, int64_t MN, int64_t sf_k, int64_t g, int64_t mn,
                                          int64_t kg) {
  uint32_t w = (uint32_t)words[dsk_fmt_sf_off(MN, sf_k, g, mn, kg / 4)];
  return (uint8_t)(w >> (8 * (kg % 4)));
}

/* -------------------------------------------------------- host row loops */
#if !defined(__CUDACC__)
/* Widen one row of `n` bf16 or fp32 elements to fp32. */
void dsk__mx_widen_row(int in_dtype, const void *x, int64_t n, float *out);
/* One row of K elements (fp32) -> K/2 MXFP4 bytes and K/32 scale bytes;
 * returns the number of NaN blocks. */
int64_t dsk__mx_quantize_row(const float *v, int64_t K, uint32_t flags, uint8_t *q, uint8_t *sf);
/* One row of K elements (fp32) -> K e4m3 and K/128 scale bytes; returns the
 * number of non-finite elements. */
int64_t dsk__fp8_quantize_row(const float *v, int64_t K, uint8_t *q, uint8_t *sf);
/* Packs group g (raw bytes `sf`, in_rows rows of stride sf_stride; gran_mn 1
 * or 128 = broadcast of block rows) into the MN-major tensor `out`
 * (dsk_fmt_sf_off layout for (MN, sf_k)), padding words and bytes zeroed. */
void dsk__sf_pack_group(const uint8_t *sf, int64_t sf_stride, int64_t MN, int64_t sf_k, int gran_mn, int64_t g,
                        int32_t *out);
#endif

#ifdef __cplusplus
}
#endif
#endif
