/* format.h - number formats and KV-cache byte layouts shared by every backend
 * (spec/kv-cache.md, spec/mxfp4-moe.md §1). Internal, not public API.
 *
 * Pure functions only: bit-level codecs (bf16, e4m3, ue8m0), the scale rules
 * of the KV writers, and byte offsets of records inside a paged cache. The
 * header is plain C that also compiles as C++ and CUDA: every function is
 * `DSK_FMT_FN` (static inline, plus __host__ __device__ under nvcc, whose
 * compiler defines those keywords itself; no CUDA header is included).
 *
 * Byte order: caches are little-endian. The load/store helpers below build
 * multi-byte values from single bytes, so the code is correct on any host.
 *
 * Device code note: the scale rules use fp32 division `/`; device code must
 * be built without fast-math (or use __fdiv_rn) to match the CPU bytes.
 */
#ifndef DSK_FORMAT_H
#define DSK_FORMAT_H

#include <stdint.h>
#include <string.h>

#include "dsk.h"

#if defined(__CUDACC__)
#define DSK_FMT_FN static inline __host__ __device__
#else
#define DSK_FMT_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ constants */
#define DSK_FMT_ROPE_DIM 64          /* rope dims per entry (A and B), bf16 */
#define DSK_FMT_E4M3_MAX 448.0f      /* largest finite e4m3 */
#define DSK_FMT_E4M3_NAN 0x7F        /* the NaN code every writer emits */
#define DSK_FMT_AMAX_FLOOR 1e-4f     /* amax floor of the pow2 scale rules */
#define DSK_FMT_CUDA_ALIGN 16        /* CUDA: base and page_stride multiple of this */

/* Format A: 656 B per token, records contiguous in the page (kv-cache.md §3). */
#define DSK_FMT_A_BYTES 656          /* record bytes */
#define DSK_FMT_A_LATENT 512         /* quantised dims */
#define DSK_FMT_A_TILE 128           /* dims per scale tile */
#define DSK_FMT_A_TILES 4
#define DSK_FMT_A_SCALE_OFF 512      /* 4 x fp32 scale, tile t at +512 + 4t */
#define DSK_FMT_A_ROPE_OFF 528       /* 64 x bf16 */
#define DSK_FMT_A_DIM 576            /* dequantised dims (Dqk) */
#define DSK_FMT_A_NAN_SCALE 1.0f     /* scale stored with a non-finite tile */

/* Format B: 576 B of token data + 8 B footer word per token (kv-cache.md §4). */
#define DSK_FMT_B_BYTES 584          /* logical bytes per token */
#define DSK_FMT_B_DATA_BYTES 576     /* token data stride inside the page */
#define DSK_FMT_B_LATENT 448         /* quantised dims (448 x e4m3) */
#define DSK_FMT_B_TILE 64
#define DSK_FMT_B_TILES 7
#define DSK_FMT_B_ROPE_OFF 448       /* 64 x bf16 after the fp8 bytes */
#define DSK_FMT_B_FOOTER_BYTES 8     /* 7 UE8M0 + 1 pad byte (0) per token */
#define DSK_FMT_B_DIM 512            /* dequantised dims (Dqk), V includes rope */
#define DSK_FMT_B_CANON_ALIGN 576    /* canonical page_stride = round_up(pbs*584, 576) */
#define DSK_FMT_B_NAN_SCALE_BYTE 127 /* scale byte stored with a non-finite tile (1.0) */

/* Indexer keys: 128 e4m3 per entry + one fp32 scale per entry (kv-cache.md §6). */
#define DSK_FMT_I_BYTES 132
#define DSK_FMT_I_DATA_BYTES 128
#define DSK_FMT_I_LATENT 128
#define DSK_FMT_I_DIM 128
#define DSK_FMT_I_NAN_SCALE 1.0f     /* [dsk] the spec names no value; as Format A */

/* --------------------------------------------------------- fp32 bit casts */
DSK_FMT_FN uint32_t dsk_fmt_f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
DSK_FMT_FN float dsk_fmt_f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
/* Quiet NaN with the given sign: the NaN every reference decoder returns. */
DSK_FMT_FN float dsk_fmt_nan(int negative) { return dsk_fmt_f32_from_bits(negative ? 0xFFC00000u : 0x7FC00000u); }

/* ------------------------------------------------------------------ bf16 */
DSK_FMT_FN float dsk_fmt_bf16_to_f32(uint16_t b) { return dsk_fmt_f32_from_bits((uint32_t)b << 16); }
/* Round to nearest even; NaN stays NaN (quiet bit set, sign kept); overflow
 * rounds to +-inf as IEEE RNE does. */
DSK_FMT_FN uint16_t dsk_fmt_bf16_from_f32(float x) {
  uint32_t u = dsk_fmt_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
DSK_FMT_FN int dsk_fmt_bf16_is_nonfinite(uint16_t b) { return (b & 0x7F80u) == 0x7F80u; }

/* ------------------------------------------------------------- fp8 e4m3fn */
/* Decode: E = 0 subnormal M*2^-9, 0x7F/0xFF NaN (quiet, sign kept). Exact. */
DSK_FMT_FN float dsk_fmt_e4m3_to_f32(uint8_t c) {
  uint32_t s = (uint32_t)(c & 0x80u) << 24;
  uint32_t e = (c >> 3) & 15u, m = c & 7u;
  if (e == 15u && m == 7u) return dsk_fmt_nan(c >> 7);
  if (e == 0u) {
    /* M * 2^-9 = (M << 14) * 2^-23 ... built from bits: value is exact. */
    float v = (float)m * 0.001953125f; /* 2^-9, exact product */
    return dsk_fmt_f32_from_bits(dsk_fmt_f32_bits(v) | s);
  }
  return dsk_fmt_f32_from_bits(s | ((e + 120u) << 23) | (m << 20)); /* 2^(E-7): fp32 exponent E-7+127 */
}

/* Encode = PTX cvt.rn.satfinite.e4m3x2.f32 (kv-cache.md §2), integer-only:
 * NaN -> 0x7F; |x| >= 448 (incl. inf) -> +-448 (every value above 448 rounds
 * to 448 or to the unrepresentable 480, and both saturate to 448); |x| <=
 * 2^-10 -> +-0 (2^-10 is the tie between 0 and 2^-9: even code 0); else round
 * the 24-bit significand to the e4m3 grid (step 2^(max(e,-6)-3)), ties to even.
 * The sign is kept, so negatives that round to zero give 0x80. */
DSK_FMT_FN uint8_t dsk_fmt_e4m3_from_f32(float x) {
  uint32_t u = dsk_fmt_f32_bits(x);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint8_t)DSK_FMT_E4M3_NAN;
  if (a >= 0x43E00000u) return (uint8_t)(sign | 0x7Eu); /* 448 */
  if (a <= 0x3A800000u) return (uint8_t)sign;           /* 2^-10 */
  int e = (int)(a >> 23) - 127;                          /* -10 .. 8 */
  uint32_t m = (a & 0x7FFFFFu) | 0x800000u;              /* 1.f * 2^23 */
  int eb = e < -6 ? -6 : e;                              /* subnormals share 2^-6's step */
  int shift = 20 + (eb - e);                             /* 20 .. 24 */
  uint32_t r = m >> shift;                               /* value / step, truncated */
  uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) r++;
  /* value = r * 2^(eb-3), r in [0, 16]; code (E<<3 | M) = (eb+6)*8 + r also
   * covers subnormals (eb = -6, r < 8) and the carry into the next binade. */
  return (uint8_t)(sign | (uint32_t)(((eb + 6) << 3) + (int)r));
}

/* ------------------------------------------------------------------- e2m1 */
/* Magnitudes of codes 0..7; bit 3 is the sign. */
DSK_FMT_FN float dsk_fmt_e2m1_to_f32(uint8_t code) {
  float mag;
  switch (code & 7u) {
    case 0: mag = 0.0f; break;
    case 1: mag = 0.5f; break;
    case 2: mag = 1.0f; break;
    case 3: mag = 1.5f; break;
    case 4: mag = 2.0f; break;
    case 5: mag = 3.0f; break;
    case 6: mag = 4.0f; break;
    default: mag = 6.0f; break;
  }
  return (code & 8u) ? -mag : mag;
}
/* RNE to {0,.5,1,1.5,2,3,4,6}, ties to the even code (mxfp4-moe.md §2.1
 * table), saturating to 6 (inf too); sign bit from x (-0 and small negatives
 * give code 8). NaN -> code 0: [dsk] choice; MX blocks containing NaN are
 * handled by the block quantizer (scale byte 0xFF), never by this function. */
DSK_FMT_FN uint8_t dsk_fmt_e2m1_from_f32(float x) {
  uint32_t u = dsk_fmt_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0;
  uint8_t s = (uint8_t)((u >> 31) << 3);
  float a = dsk_fmt_f32_from_bits(u & 0x7FFFFFFFu);
  uint8_t c;
  if (a <= 0.25f) c = 0;
  else if (a < 0.75f) c = 1;
  else if (a <= 1.25f) c = 2;
  else if (a < 1.75f) c = 3;
  else if (a <= 2.5f) c = 4;
  else if (a < 3.5f) c = 5;
  else if (a <= 5.0f) c = 6;
  else c = 7;
  return (uint8_t)(s | c);
}

/* ------------------------------------------------------------------ UE8M0 */
/* KV decoder (kv-cache.md §2): 0 -> 0.0, 1..254 -> 2^(e-127), 255 -> NaN. */
DSK_FMT_FN float dsk_fmt_ue8m0_kv_to_f32(uint8_t e) {
  if (e == 255u) return dsk_fmt_nan(0);
  return dsk_fmt_f32_from_bits((uint32_t)e << 23);
}
/* Weight-scale decoder (mxfp4-moe.md §1.2): 0 -> 2^-127, 255 -> NaN. */
DSK_FMT_FN float dsk_fmt_ue8m0_w_to_f32(uint8_t e) {
  if (e == 255u) return dsk_fmt_nan(0);
  if (e == 0u) return dsk_fmt_f32_from_bits(0x00400000u); /* 2^-127, fp32 subnormal */
  return dsk_fmt_f32_from_bits((uint32_t)e << 23);
}
/* Exponent byte of the smallest power of two >= x, from the fp32 bits
 * (exponent field, +1 if the mantissa is non-zero), clamped to [1, 254].
 * Subnormal x gives 1 (2^-126). Outside the domain (x finite, > 0): +0, -0
 * and negatives give 1, +inf gives 254, NaN gives 255 (the UE8M0 NaN). */
DSK_FMT_FN uint8_t dsk_fmt_ue8m0_ceil(float x) {
  uint32_t u = dsk_fmt_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 255u;
  if ((u >> 31) || u == 0u) return 1u;
  uint32_t e = u >> 23;
  if (e == 255u) return 254u;
  e += (u & 0x7FFFFFu) != 0u;
  if (e < 1u) e = 1u;
  if (e > 254u) e = 254u;
  return (uint8_t)e;
}
/* The power of two of an exponent byte 1..254, as fp32. */
DSK_FMT_FN float dsk_fmt_pow2_from_byte(uint8_t e) { return dsk_fmt_f32_from_bits((uint32_t)e << 23); }
/* Smallest power of two >= r (r normal, > 0; clamped as dsk_fmt_ue8m0_ceil). */
DSK_FMT_FN float dsk_fmt_pow2_ceil(float r) { return dsk_fmt_pow2_from_byte(dsk_fmt_ue8m0_ceil(r)); }

/* ---------------------------------------------------- KV writer scale rules */
/* Format A (kv-cache.md §3), per 128-tile with finite amax:
 *   POW2: r = max(amax / 448, 1e-4) in fp32, s = smallest power of two >= r
 *   RAW:  s = max(amax / 448, 2^-126) */
DSK_FMT_FN float dsk_fmt_scale_a(float amax, int rule) {
  float r = amax / DSK_FMT_E4M3_MAX;
  if (rule == (int)DSK_SCALE_RAW) {
    const float tiny = 1.17549435e-38f; /* 2^-126 */
    return r > tiny ? r : tiny;
  }
  if (!(r >= DSK_FMT_AMAX_FLOOR)) r = DSK_FMT_AMAX_FLOOR;
  return dsk_fmt_pow2_ceil(r);
}
/* Format B (§4), per 64-tile: r = max(amax, 1e-4) / 448; scale byte of the
 * smallest power of two >= r (105..247 for finite input). */
DSK_FMT_FN uint8_t dsk_fmt_scale_b_byte(float amax) {
  float a = amax >= DSK_FMT_AMAX_FLOOR ? amax : DSK_FMT_AMAX_FLOOR;
  return dsk_fmt_ue8m0_ceil(a / DSK_FMT_E4M3_MAX);
}
/* Indexer keys (§6), per entry: r = max(amax, 1e-4) / 448; POW2: smallest
 * power of two >= r, RAW: r itself. */
DSK_FMT_FN float dsk_fmt_scale_idx(float amax, int rule) {
  float a = amax >= DSK_FMT_AMAX_FLOOR ? amax : DSK_FMT_AMAX_FLOOR;
  float r = a / DSK_FMT_E4M3_MAX;
  return rule == (int)DSK_SCALE_RAW ? r : dsk_fmt_pow2_ceil(r);
}

/* ----------------------------------------------------------- tile helpers */
/* amax over n bf16 values (exact); returns 1 if any value is NaN or +-inf
 * (then *amax is unspecified and the tile is stored as NaN poison). */
DSK_FMT_FN int dsk_fmt_tile_amax(const uint16_t *x, int n, float *amax) {
  uint32_t m = 0;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    uint32_t a = x[i] & 0x7FFFu;
    bad |= a >= 0x7F80u;
    m = a > m ? a : m; /* |bf16| bits are ordered like the magnitudes */
  }
  *amax = dsk_fmt_bf16_to_f32((uint16_t)m);
  return bad;
}
/* q[i] = e4m3(x[i] / s): IEEE fp32 division, then the encoder above. */
DSK_FMT_FN void dsk_fmt_quant_tile(const uint16_t *x, int n, float s, uint8_t *q) {
  for (int i = 0; i < n; i++) q[i] = dsk_fmt_e4m3_from_f32(dsk_fmt_bf16_to_f32(x[i]) / s);
}

/* ---------------------------------------------------- little-endian access */
DSK_FMT_FN void dsk_fmt_store_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
DSK_FMT_FN uint16_t dsk_fmt_load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
DSK_FMT_FN void dsk_fmt_store_f32(uint8_t *p, float x) {
  uint32_t u = dsk_fmt_f32_bits(x);
  p[0] = (uint8_t)u;
  p[1] = (uint8_t)(u >> 8);
  p[2] = (uint8_t)(u >> 16);
  p[3] = (uint8_t)(u >> 24);
}
DSK_FMT_FN float dsk_fmt_load_f32(const uint8_t *p) {
  return dsk_fmt_f32_from_bits((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                               ((uint32_t)p[3] << 24));
}

/* ---------------------------------------------------------------- geometry */
/* 656 / 584 / 132; 0 for an unknown format. */
DSK_FMT_FN int64_t dsk_fmt_entry_bytes(int f) {
  return f == (int)DSK_KV_FORMAT_A656 ? DSK_FMT_A_BYTES
         : f == (int)DSK_KV_FORMAT_B584 ? DSK_FMT_B_BYTES
         : f == (int)DSK_KV_FORMAT_IDXK132 ? DSK_FMT_I_BYTES
                                           : 0;
}
/* Dequantised dims 576 / 512 / 128 and quantised dims 512 / 448 / 128. */
DSK_FMT_FN int64_t dsk_fmt_dim(int f) {
  return f == (int)DSK_KV_FORMAT_A656 ? DSK_FMT_A_DIM
         : f == (int)DSK_KV_FORMAT_B584 ? DSK_FMT_B_DIM
         : f == (int)DSK_KV_FORMAT_IDXK132 ? DSK_FMT_I_DIM
                                           : 0;
}
DSK_FMT_FN int64_t dsk_fmt_latent_dim(int f) {
  return f == (int)DSK_KV_FORMAT_A656 ? DSK_FMT_A_LATENT
         : f == (int)DSK_KV_FORMAT_B584 ? DSK_FMT_B_LATENT
         : f == (int)DSK_KV_FORMAT_IDXK132 ? DSK_FMT_I_LATENT
                                           : 0;
}
DSK_FMT_FN int64_t dsk_fmt_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Byte offsets from the cache base (int64; slot in [0, num_pages*pbs)).
 * page p = slot / pbs, j = slot % pbs. */
DSK_FMT_FN int64_t dsk_fmt_page_off(int64_t slot, int64_t pbs, int64_t page_stride) {
  return (slot / pbs) * page_stride;
}
/* Format A: the 656-byte record (fp8 at +0, scales at +512, rope at +528). */
DSK_FMT_FN int64_t dsk_fmt_a_record_off(int64_t slot, int64_t pbs, int64_t page_stride) {
  return dsk_fmt_page_off(slot, pbs, page_stride) + DSK_FMT_A_BYTES * (slot % pbs);
}
/* Format B: 448 fp8 + 64 bf16 rope at data + 448; footer (7 scale bytes +
 * pad) at page + 576*pbs + 8*j. Never page + 584*j. */
DSK_FMT_FN int64_t dsk_fmt_b_data_off(int64_t slot, int64_t pbs, int64_t page_stride) {
  return dsk_fmt_page_off(slot, pbs, page_stride) + DSK_FMT_B_DATA_BYTES * (slot % pbs);
}
DSK_FMT_FN int64_t dsk_fmt_b_rope_off(int64_t slot, int64_t pbs, int64_t page_stride) {
  return dsk_fmt_b_data_off(slot, pbs, page_stride) + DSK_FMT_B_ROPE_OFF;
}
DSK_FMT_FN int64_t dsk_fmt_b_scale_off(int64_t slot, int64_t pbs, int64_t page_stride) {
  return dsk_fmt_page_off(slot, pbs, page_stride) + DSK_FMT_B_DATA_BYTES * pbs +
         DSK_FMT_B_FOOTER_BYTES * (slot % pbs);
}
/* Indexer keys: 128 fp8 at page + 128*j, fp32 scale at page + 128*pbs + 4*j. */
DSK_FMT_FN int64_t dsk_fmt_i_data_off(int64_t slot, int64_t pbs, int64_t page_stride) {
  return dsk_fmt_page_off(slot, pbs, page_stride) + DSK_FMT_I_DATA_BYTES * (slot % pbs);
}
DSK_FMT_FN int64_t dsk_fmt_i_scale_off(int64_t slot, int64_t pbs, int64_t page_stride) {
  return dsk_fmt_page_off(slot, pbs, page_stride) + DSK_FMT_I_DATA_BYTES * pbs + 4 * (slot % pbs);
}

#ifdef __cplusplus
}
#endif
#endif
