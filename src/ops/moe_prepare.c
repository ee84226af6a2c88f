/* moe_prepare.c - host-side preparation of checkpoint expert weights
 * (spec/mxfp4-moe.md §3.2, §3.3, §4; api-conventions.md §3; docs/moe.md).
 *
 * Input: per expert the checkpoint tensors w1 (gate), w3 (up), w2 (down) and
 * their scales as stored. Output for one rank (TP slice of I, EP slice of
 * experts given by the caller): W13 = [w1 rows; w3 rows] of the rank's I
 * rows, W2 = the matching columns of w2, scales packed MN-major (G = E_local).
 *
 * Validation (the checkpoint is data the library did not produce): a 0xFF
 * UE8M0 byte, an e4m3 NaN code (0x7F / 0xFF) or an fp32 scale that is not
 * finite and > 0 in the rank's slice is DSK_STATUS_INVALID_DATA naming the
 * tensor (global expert id and checkpoint name), the checkpoint row and
 * column (K-group for scales) and the value. Only the slice a rank uses is
 * read and validated. Runs in one pass: after an error the outputs are
 * partly written and must not be used.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "moe.h"
#include "format/mxfp4.h"

#define OP_PREP "moe_prepare_weights"

#define TRY(x)                                  \
  do {                                          \
    dsk_status st_ = (x);                       \
    if (st_ != DSK_STATUS_OK) return st_;       \
  } while (0)

void dsk_moe_weights_bytes(dsk_moe_wfmt fmt, int64_t E, int64_t H, int64_t I, int64_t out[4]) {
  if (!out) return;
  for (int i = 0; i < 4; i++) out[i] = -1;
  if ((fmt != DSK_MOE_W_MXFP4 && fmt != DSK_MOE_W_FP8) || E < 1 || E > DSK_MOE_MAX_EXPERTS || H < 128 ||
      H > DSK_MOE_MAX_K || H % 128 || I < 128 || I > DSK_MOE_MAX_K || I % 128)
    return;
  const int mx = fmt == DSK_MOE_W_MXFP4;
  const int64_t gk = mx ? 32 : 128;
  out[0] = E * 2 * I * (mx ? H / 2 : H);
  out[1] = dsk_sf_packed_words(E, 2 * I, H / gk) * 4;
  out[2] = E * H * (mx ? I / 2 : I);
  out[3] = dsk_sf_packed_words(E, H, I / gk) * 4;
}

/* Sets byte j (K-group kg % 4) of the packed word of (g, mn, kg / 4). */
static void put_sf_byte(int32_t *words, int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t kg, uint8_t v) {
  const int64_t off = dsk_fmt_sf_off(MN, sf_k, g, mn, kg / 4);
  const int sh = (int)(kg % 4) * 8;
  uint32_t w = (uint32_t)words[off];
  w = (w & ~(0xFFu << sh)) | ((uint32_t)v << sh);
  words[off] = (int32_t)w;
}

/* Zeroes group g of a packed tensor (padding included). */
static void zero_sf_group(int32_t *words, int64_t MN, int64_t sf_k, int64_t g) {
  const int64_t n = dsk_fmt_sf_kp(sf_k) * dsk_fmt_sf_t4(MN);
  memset(words + g * n, 0, (size_t)n * 4);
}

typedef struct prep {
  const dsk_moe_prepare_desc *d;
  int64_t H, I, Ir, r0;
  dsk_moe_wfmt fmt;
} prep;

static dsk_status bad_scale_byte(const prep *p, int64_t e, const char *tensor, int64_t row, int64_t col, uint8_t v) {
  return dsk__fail(DSK_STATUS_INVALID_DATA,
                   "%s: expert %" PRId64 " (local %" PRId64 ") %s row %" PRId64 " group %" PRId64
                   ": scale byte 0x%02X is the UE8M0 NaN (a checkpoint weight scale cannot be NaN)",
                   OP_PREP, p->d->expert_offset + e, e, tensor, row, col, (unsigned)v);
}

/* ---------------------------------------------------------------- MXFP4 */
/* Rows [r0, r0 + n) of a K-major MXFP4 tensor [*, K/2] with scales [*, K/32],
 * columns [c0, c0 + kc) (c0, kc multiples of 32): bytes to dst rows (kc/2
 * bytes each), scales into packed rows mn0.. of group e. */
static dsk_status mx_rows(const prep *p, int64_t e, const char *wname, const char *sname, const uint8_t *w,
                          const uint8_t *s, int64_t K, int64_t r0, int64_t n, int64_t c0, int64_t kc, uint8_t *dst,
                          int32_t *sfw, int64_t MN, int64_t mn0) {
  (void)wname;
  for (int64_t j = 0; j < n; j++) {
    const int64_t row = r0 + j;
    memcpy(dst + j * (kc / 2), w + row * (K / 2) + c0 / 2, (size_t)(kc / 2));
    for (int64_t g = 0; g < kc / 32; g++) {
      const uint8_t v = s[row * (K / 32) + c0 / 32 + g];
      if (v == DSK_FMT_UE8M0_NAN) return bad_scale_byte(p, e, sname, row, c0 / 32 + g, v);
      put_sf_byte(sfw, MN, kc / 32, e, mn0 + j, g, v);
    }
  }
  return DSK_STATUS_OK;
}

/* ------------------------------------------------------------------ FP8 */
/* Rows [r0, r0 + n), columns [c0, c0 + kc) of an e4m3 tensor [*, K] whose
 * 128x128 block scales are s [ceil(rows/128), K/128] (UE8M0 bytes or fp32).
 * Both r0, n, c0, kc are multiples of 128. */
static dsk_status fp8_rows(const prep *p, int64_t e, const char *wname, const char *sname, const uint8_t *w,
                           const void *s, int64_t K, int64_t r0, int64_t n, int64_t c0, int64_t kc, uint8_t *dst,
                           int32_t *sfw, int64_t MN, int64_t mn0) {
  const int f32 = p->d->src == DSK_MOE_SRC_FP8_F32;
  const int64_t sk = K / 128;
  for (int64_t br = 0; br < n / 128; br++) {
    const int64_t brow = r0 / 128 + br;
    for (int64_t bc = 0; bc < kc / 128; bc++) {
      const int64_t bcol = c0 / 128 + bc;
      uint8_t eb = 0;
      float S = 0.0f;
      if (f32) {
        S = ((const float *)s)[brow * sk + bcol];
        if (!isfinite(S) || !(S > 0.0f))
          return dsk__fail(DSK_STATUS_INVALID_DATA,
                           "%s: expert %" PRId64 " (local %" PRId64 ") %s row %" PRId64 " group %" PRId64
                           ": fp32 block scale %g is not finite and > 0",
                           OP_PREP, p->d->expert_offset + e, e, sname, brow, bcol, (double)S);
      } else {
        eb = ((const uint8_t *)s)[brow * sk + bcol];
        if (eb == DSK_FMT_UE8M0_NAN) return bad_scale_byte(p, e, sname, brow, bcol, eb);
      }
      /* validate the block's codes (and its amax for the fp32 re-quantization) */
      float amax = 0.0f;
      for (int64_t i = 0; i < 128; i++) {
        const int64_t row = brow * 128 + i;
        const uint8_t *src = w + row * K + bcol * 128;
        for (int64_t c = 0; c < 128; c++) {
          const uint8_t q = src[c];
          if ((q & 0x7Fu) == 0x7Fu)
            return dsk__fail(DSK_STATUS_INVALID_DATA,
                             "%s: expert %" PRId64 " (local %" PRId64 ") %s row %" PRId64 " column %" PRId64
                             ": byte 0x%02X is an e4m3 NaN code",
                             OP_PREP, p->d->expert_offset + e, e, wname, row, bcol * 128 + c, (unsigned)q);
          if (f32) {
            const float v = fabsf(dsk_fmt_e4m3_to_f32(q) * S);
            amax = v > amax ? v : amax;
          }
        }
      }
      if (f32) eb = dsk_fmt_fp8_scale_byte(amax);
      const float snew = dsk_fmt_pow2_from_byte(eb);
      for (int64_t i = 0; i < 128; i++) {
        const int64_t j = br * 128 + i, row = brow * 128 + i;
        const uint8_t *src = w + row * K + bcol * 128;
        uint8_t *o = dst + j * kc + bc * 128;
        if (f32) {
          for (int64_t c = 0; c < 128; c++) o[c] = dsk_fmt_e4m3_from_f32(dsk_fmt_e4m3_to_f32(src[c]) * S / snew);
        } else {
          memcpy(o, src, 128);
        }
        put_sf_byte(sfw, MN, kc / 128, e, mn0 + j, bc, eb);
      }
    }
  }
  return DSK_STATUS_OK;
}

static dsk_status check_arr(const char *name, const void *const *a, int64_t n, uintptr_t align) {
  if (!a) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s is NULL (an array of E_local host pointers)", OP_PREP, name);
  for (int64_t e = 0; e < n; e++) {
    if (!a[e])
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s[%" PRId64 "] is NULL", OP_PREP, name, e);
    if ((uintptr_t)a[e] % align)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s[%" PRId64 "] %p is not %u-byte aligned", OP_PREP, name, e,
                       a[e], (unsigned)align);
  }
  return DSK_STATUS_OK;
}

static dsk_status check_out(const char *name, const void *p, int64_t bytes, int64_t need, uintptr_t align) {
  if (!p) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s is NULL (%" PRId64 " bytes needed)", OP_PREP, name, need);
  if ((uintptr_t)p % align)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %p is not %u-byte aligned", OP_PREP, name, p, (unsigned)align);
  if (bytes < need)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s_bytes %" PRId64 " < %" PRId64 " (dsk_moe_weights_bytes)", OP_PREP,
                     name, bytes, need);
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_prepare_weights(dsk_ctx *ctx, const dsk_moe_prepare_desc *d) {
  const char *op = OP_PREP;
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  if (d->struct_size < sizeof *d)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: struct_size %zu < sizeof(dsk_moe_prepare_desc) %zu", op,
                     d->struct_size, sizeof *d);
  if (d->src != DSK_MOE_SRC_MXFP4 && d->src != DSK_MOE_SRC_FP8_E8M0 && d->src != DSK_MOE_SRC_FP8_F32)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: src %d is not DSK_MOE_SRC_MXFP4 (1), FP8_E8M0 (2) or FP8_F32 (3)", op,
                     (int)d->src);
  if (d->E_local < 1 || d->E_local > DSK_MOE_MAX_EXPERTS)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: E_local %" PRId64 " is not in [1, %d]", op, d->E_local,
                     DSK_MOE_MAX_EXPERTS);
  if (d->expert_offset < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: expert_offset %" PRId64 " < 0", op, d->expert_offset);
  if (d->H < 128 || d->H > DSK_MOE_MAX_K || d->H % 128)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: H %" PRId64 " is not a multiple of 128 in [128, %d]", op, d->H,
                     DSK_MOE_MAX_K);
  if (d->I < 128 || d->I > DSK_MOE_MAX_K || d->I % 128)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: I %" PRId64 " is not a multiple of 128 in [128, %d]", op, d->I,
                     DSK_MOE_MAX_K);
  if (d->tp_size < 1 || d->tp_rank < 0 || d->tp_rank >= d->tp_size)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: tp_rank %" PRId64 " is not in [0, tp_size %" PRId64 ")", op,
                     d->tp_rank, d->tp_size);
  if (d->I % d->tp_size || (d->I / d->tp_size) % 128)
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "%s: I %" PRId64 " / tp_size %" PRId64 " is not a multiple of 128 (128x128 scale blocks, 1x128 "
                     "activation groups)", op, d->I, d->tp_size);
  const int f32 = d->src == DSK_MOE_SRC_FP8_F32;
  TRY(check_arr("w1", d->w1, d->E_local, 1));
  TRY(check_arr("s1", d->s1, d->E_local, f32 ? 4 : 1));
  TRY(check_arr("w3", d->w3, d->E_local, 1));
  TRY(check_arr("s3", d->s3, d->E_local, f32 ? 4 : 1));
  TRY(check_arr("w2", d->w2, d->E_local, 1));
  TRY(check_arr("s2", d->s2, d->E_local, f32 ? 4 : 1));
  prep p;
  p.d = d;
  p.H = d->H;
  p.I = d->I;
  p.Ir = d->I / d->tp_size;
  p.r0 = d->tp_rank * p.Ir;
  p.fmt = d->src == DSK_MOE_SRC_MXFP4 ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8;
  int64_t need[4];
  dsk_moe_weights_bytes(p.fmt, d->E_local, d->H, p.Ir, need);
  TRY(check_out("w13", d->w13, d->w13_bytes, need[0], 1));
  TRY(check_out("sf13", d->sf13, d->sf13_bytes, need[1], 4));
  TRY(check_out("w2_out", d->w2_out, d->w2_bytes, need[2], 1));
  TRY(check_out("sf2", d->sf2, d->sf2_bytes, need[3], 4));
  if (f32)
    dsk__warn_once(ctx, "moe_prepare_fp32_requant",
                   "%s: fp32 128x128 weight scales are re-quantized to UE8M0 (lossy, <= 1 bit per element; "
                   "spec mxfp4-moe.md 3.3)", op);

  const int mx = p.fmt == DSK_MOE_W_MXFP4;
  const int64_t H = p.H, I = p.I, Ir = p.Ir, r0 = p.r0;
  const int64_t sk13 = mx ? H / 32 : H / 128, sk2 = mx ? Ir / 32 : Ir / 128;
  const int64_t w13_rows = mx ? H / 2 : H, w2_rows = mx ? Ir / 2 : Ir; /* bytes per output row */
  for (int64_t e = 0; e < d->E_local; e++) {
    uint8_t *o13 = (uint8_t *)d->w13 + e * 2 * Ir * w13_rows;
    uint8_t *o2 = (uint8_t *)d->w2_out + e * H * w2_rows;
    zero_sf_group(d->sf13, 2 * Ir, sk13, e);
    zero_sf_group(d->sf2, H, sk2, e);
    if (mx) {
      TRY(mx_rows(&p, e, "w1.weight", "w1.scale", d->w1[e], d->s1[e], H, r0, Ir, 0, H, o13, d->sf13, 2 * Ir, 0));
      TRY(mx_rows(&p, e, "w3.weight", "w3.scale", d->w3[e], d->s3[e], H, r0, Ir, 0, H, o13 + Ir * w13_rows, d->sf13,
                  2 * Ir, Ir));
      TRY(mx_rows(&p, e, "w2.weight", "w2.scale", d->w2[e], d->s2[e], I, 0, H, r0, Ir, o2, d->sf2, H, 0));
    } else {
      TRY(fp8_rows(&p, e, "w1.weight", "w1.scale", d->w1[e], d->s1[e], H, r0, Ir, 0, H, o13, d->sf13, 2 * Ir, 0));
      TRY(fp8_rows(&p, e, "w3.weight", "w3.scale", d->w3[e], d->s3[e], H, r0, Ir, 0, H, o13 + Ir * w13_rows, d->sf13,
                   2 * Ir, Ir));
      TRY(fp8_rows(&p, e, "w2.weight", "w2.scale", d->w2[e], d->s2[e], I, 0, H, r0, Ir, o2, d->sf2, H, 0));
    }
  }
  return DSK_STATUS_OK;
}
