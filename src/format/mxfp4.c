/* mxfp4.c - host row loops of the MXFP4 / FP8 rules and the public
 * packed-scale geometry helpers (spec/mxfp4-moe.md §2, §4; mxfp4.h). */
#include "mxfp4.h"

/* ------------------------------------------------------- public geometry */
int64_t dsk_sf_packed_kp(int64_t sf_k) { return sf_k < 1 ? -1 : dsk_fmt_sf_kp(sf_k); }

int64_t dsk_sf_packed_words(int64_t G, int64_t MN, int64_t sf_k) {
  if (G < 1 || MN < 1 || sf_k < 1) return -1;
  const int64_t kp = dsk_fmt_sf_kp(sf_k), t4 = dsk_fmt_sf_t4(MN);
  if (t4 > INT64_MAX / kp || kp * t4 > INT64_MAX / G) return -1;
  return G * kp * t4;
}

int64_t dsk_sf_packed_offset(int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t p) {
  if (MN < 1 || sf_k < 1 || g < 0 || mn < 0 || mn >= MN || p < 0 || p >= dsk_fmt_sf_kp(sf_k)) return -1;
  return dsk_fmt_sf_off(MN, sf_k, g, mn, p);
}

/* ------------------------------------------------------------ row loops */
void dsk__mx_widen_row(int in_dtype, const void *x, int64_t n, float *out) {
  if (in_dtype == (int)DSK_MOE_IN_F32) {
    const float *f = (const float *)x;
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
  } else {
    const uint16_t *b = (const uint16_t *)x;
    for (int64_t i = 0; i < n; i++) out[i] = dsk_fmt_bf16_to_f32(b[i]);
  }
}

int64_t dsk__mx_quantize_row(const float *v, int64_t K, uint32_t flags, uint8_t *q, uint8_t *sf) {
  int64_t nan_blocks = 0;
  for (int64_t b = 0; b < K / DSK_FMT_MX_BLOCK; b++)
    nan_blocks += dsk_fmt_mx_quant_block(v + b * DSK_FMT_MX_BLOCK, flags, q + b * DSK_FMT_MX_BYTES, sf + b);
  return nan_blocks;
}

int64_t dsk__fp8_quantize_row(const float *v, int64_t K, uint8_t *q, uint8_t *sf) {
  int64_t bad = 0;
  for (int64_t g = 0; g < K / DSK_FMT_FP8_GROUP; g++)
    bad += dsk_fmt_fp8_quant_group(v + g * DSK_FMT_FP8_GROUP, DSK_FMT_FP8_GROUP, q + g * DSK_FMT_FP8_GROUP, sf + g);
  return bad;
}

void dsk__sf_pack_group(const uint8_t *sf, int64_t sf_stride, int64_t MN, int64_t sf_k, int gran_mn, int64_t g,
                        int32_t *out) {
  const int64_t kp = dsk_fmt_sf_kp(sf_k), t4 = dsk_fmt_sf_t4(MN);
  for (int64_t p = 0; p < kp; p++) {
    int32_t *col = out + dsk_fmt_sf_off(MN, sf_k, g, 0, p);
    for (int64_t mn = 0; mn < t4; mn++) {
      if (mn >= MN) {
        col[mn] = 0;
        continue;
      }
      const int64_t src_row = gran_mn == DSK_FMT_FP8_GROUP ? mn / DSK_FMT_FP8_GROUP : mn;
      col[mn] = (int32_t)dsk_fmt_pack_word(sf + src_row * sf_stride, sf_k, p);
    }
  }
}
