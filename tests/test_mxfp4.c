/* test_mxfp4.c - bit-exact tests of the MXFP4 / FP8 MoE formats and layouts
 * (spec/mxfp4-moe.md §1.3, §2, §4, §5.2-§5.3; include/dsk.h, MoE section):
 *
 *  0. the UE8M0 weight decoder and DeepGEMM's pow2 <-> byte trick;
 *  1. dsk_mx_quantize: hand-computed blocks from the §2.1 table (every
 *     rounding threshold, ties, signs, small negatives -> code 8, the
 *     nibble order, the 1e-4 amax floor, ceil scale, the two comparison
 *     flags, NaN/inf blocks -> 0xFF + codes 0 + counter, bf16 input), then
 *     random blocks of many magnitudes against an independent model written
 *     here (scale from frexp, nearest grid value by search with the tie
 *     rule), plus dequantize -> re-quantize idempotence;
 *  2. dsk_fp8_quantize_1x128: hand-computed scale bytes, NaN/inf elements
 *     (0x7F, excluded from amax, counted), raw and packed scales agree,
 *     random rows against a model (frexp scale, public e4m3 codec);
 *  3. dsk_pack_ue8m0_words: hand case incl. the 0x00 fill of missing groups;
 *  4. dsk_sf_pack_mn_major: the spec's worked example (G 2, MN 6, sf_k 5),
 *     the DSv4-Flash FC1 geometry, every (G, MN, sf_k) of a grid of odd sizes
 *     against the address formula written here, padding bytes 0; 128x128
 *     broadcast on MN 300;
 *  5. alignment: theoretical alignment of every family, dsk_moe_aligned_m on
 *     the spec's SM120 table (and its pre-fix column from the old formula),
 *     the exact-count path;
 *  6. bad descriptors -> DSK_STATUS_INVALID_ARG naming the field.
 * Outputs are poisoned before every call. Runs on a CPU context (the CUDA
 * MoE kernels are not built yet).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsk.h"
#include "testutil.h"
#include "format/mxfp4.h" /* internal: the DeepGEMM pow2 <-> byte trick */

static tu_counts C;
static dsk_ctx *g_ctx;

static uint32_t f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

/* ---------------------------------------------------------------- models */
static const double k_grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

/* smallest power of two >= f (f > 0 normal), as an exponent */
static int ceil_log2f(float f) {
  int ex;
  float m = frexpf(f, &ex); /* f = m 2^ex, m in [0.5, 1) */
  return m == 0.5f ? ex - 1 : ex;
}

/* e2m1 code of t: nearest grid value; ties -> even code (RNE) or the lower
 * value (ties_to_zero); saturating. */
static uint8_t model_code(float t, int ttz) {
  double a = fabs((double)t);
  int best = 0;
  for (int c = 1; c < 8; c++) {
    double dc = fabs(a - k_grid[c]), db = fabs(a - k_grid[best]);
    if (dc < db) best = c;
    else if (dc == db && !ttz && (c % 2 == 0) && (best % 2 == 1)) best = c;
  }
  if (a > 6) best = 7;
  return (uint8_t)((signbit(t) ? 8 : 0) | best);
}

/* The §2.1 rule for one block; returns 1 for a NaN block. */
static int model_block(const float *v, unsigned flags, uint8_t *codes, uint8_t *scale) {
  double amax = 0;
  for (int i = 0; i < 32; i++) {
    if (!isfinite(v[i])) {
      memset(codes, 0, 32);
      *scale = 0xFF;
      return 1;
    }
    if (fabs(v[i]) > amax) amax = fabs(v[i]);
  }
  float a = (float)amax < 1e-4f ? 1e-4f : (float)amax;
  int e;
  if (flags & DSK_MX_SCALE_FLOOR) {
    int ex;
    frexpf(a, &ex);
    e = (ex - 1) - 2 + 127; /* floor(log2 a) = ex - 1 */
  } else {
    e = ceil_log2f(a / 6.0f) + 127;
  }
  if (e < 1) e = 1;
  if (e > 254) e = 254;
  *scale = (uint8_t)e;
  for (int i = 0; i < 32; i++) codes[i] = model_code((float)ldexp(v[i], 127 - e), flags & DSK_MX_TIES_TO_ZERO);
  return 0;
}

/* ----------------------------------------------------------- call helpers */
static dsk_status mxq(const void *x, int dtype, int64_t rows, int64_t K, unsigned flags, uint8_t *q, uint8_t *sf,
                      int64_t *cnt) {
  dsk_mx_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = rows;
  d.K = K;
  d.x_dtype = (dsk_moe_in_dtype)dtype;
  d.x = x;
  d.x_stride = K;
  d.q = q;
  d.q_stride = K / 2;
  d.sf = sf;
  d.sf_stride = K / 32;
  d.flags = flags;
  d.counters = cnt;
  return dsk_mx_quantize(g_ctx, &d);
}

static uint8_t code_at(const uint8_t *q, int k) { return (uint8_t)((q[k / 2] >> ((k % 2) * 4)) & 15); }

/* ---------------------------------------------------------------- UE8M0 */
static void test_ue8m0(void) {
  /* weight decoder: e = 0 -> 2^-127 (not 0 as the KV decoder), 0xFF -> NaN */
  TU_CHECK(&C, dsk_ue8m0_w_to_f32(0) == ldexpf(1.0f, -127) && dsk_ue8m0_kv_to_f32(0) == 0.0f, "ue8m0 e = 0");
  TU_CHECK(&C, isnan(dsk_ue8m0_w_to_f32(0xFF)) && dsk_ue8m0_w_to_f32(127) == 1.0f && dsk_ue8m0_w_to_f32(254) == ldexpf(1.0f, 127),
           "ue8m0 0xFF / 127 / 254");
  /* DeepGEMM's trick: byte = bits(f) >> 23 for a power of two f, and back */
  int bad = 0;
  for (int e = 1; e <= 254; e++) {
    const float f = ldexpf(1.0f, e - 127);
    bad += dsk_fmt_ue8m0_from_pow2(f) != e || dsk_fmt_pow2_from_byte((uint8_t)e) != f || dsk_ue8m0_w_to_f32((uint8_t)e) != f;
  }
  TU_CHECK(&C, bad == 0, "ue8m0 pow2 trick: %d bytes wrong", bad);
}

/* ------------------------------------------------------------ 1. MX quantize */
static void test_mx_hand(void) {
  /* amax 6 -> f = 1 -> e = 127, s = 1: t = v */
  const float v[32] = {6.0f, 0.25f, 0.25000003f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.0000005f, -0.1f, -6.0f,
                       0.5f, 1.0f,  1.5f,        2.0f,  3.0f,  4.0f,  -0.75f, -1.75f, -3.5f, 0.7499999f, 0.0f, -0.0f,
                       1.2500001f, 2.4999998f, 2.5000002f, 3.4999998f, 4.9999995f, 0.2499999f, -2.5f, -5.0f};
  /* expected RNE codes (the §2.1 table), and ties-to-zero codes */
  const uint8_t rne[32] = {7, 0, 1, 2, 2, 4, 4, 6, 6, 7, 8, 15, 1, 2, 3, 4, 5, 6, 10, 12, 14, 1, 0, 8,
                           3, 4, 5, 5, 6, 0, 12, 14};
  const uint8_t ttz[32] = {7, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 15, 1, 2, 3, 4, 5, 6, 9, 11, 13, 1, 0, 8,
                           3, 4, 5, 5, 6, 0, 12, 14};
  uint8_t q[16], sf[1];
  int64_t cnt = 0;
  for (int pass = 0; pass < 2; pass++) {
    memset(q, 0xCD, sizeof q);
    sf[0] = 0xCD;
    TU_CHECK_OK(&C, mxq(v, DSK_MOE_IN_F32, 1, 32, pass ? DSK_MX_TIES_TO_ZERO : 0, q, sf, &cnt));
    TU_CHECK(&C, sf[0] == 127, "amax 6: scale byte %d, want 127", sf[0]);
    const uint8_t *want = pass ? ttz : rne;
    for (int i = 0; i < 32; i++)
      TU_CHECK(&C, code_at(q, i) == want[i], "%s: element %d (%.9g): code %d, want %d", pass ? "ttz" : "rne", i,
               (double)v[i], code_at(q, i), want[i]);
  }
  TU_CHECK(&C, cnt == 0, "finite block counted (%lld)", (long long)cnt);

  /* nibble order: element 0 -> low nibble, element 1 -> high nibble */
  float w[32] = {1.0f, 6.0f, -0.5f, 3.0f};
  TU_CHECK_OK(&C, mxq(w, DSK_MOE_IN_F32, 1, 32, 0, q, sf, NULL));
  TU_CHECK(&C, q[0] == 0x72 && q[1] == 0x59 && sf[0] == 127, "nibble order: bytes %02X %02X (want 72 59), scale %d",
           q[0], q[1], sf[0]);

  /* amax 7: f = 7/6 -> ceil 2 -> e 128; 7/2 = 3.5 -> 4 (RNE); SCALE_FLOOR: s = 1, 7 saturates to 6 */
  float a7[32] = {7.0f, -3.0f};
  TU_CHECK_OK(&C, mxq(a7, DSK_MOE_IN_F32, 1, 32, 0, q, sf, NULL));
  TU_CHECK(&C, sf[0] == 128 && code_at(q, 0) == 6 && code_at(q, 1) == 11, "amax 7: e %d codes %d %d", sf[0],
           code_at(q, 0), code_at(q, 1));
  TU_CHECK_OK(&C, mxq(a7, DSK_MOE_IN_F32, 1, 32, DSK_MX_SCALE_FLOOR, q, sf, NULL));
  TU_CHECK(&C, sf[0] == 127 && code_at(q, 0) == 7 && code_at(q, 1) == 13, "floor amax 7: e %d codes %d %d", sf[0],
           code_at(q, 0), code_at(q, 1));
  float a8[32] = {8.0f};
  TU_CHECK_OK(&C, mxq(a8, DSK_MOE_IN_F32, 1, 32, DSK_MX_SCALE_FLOOR, q, sf, NULL));
  TU_CHECK(&C, sf[0] == 128 && code_at(q, 0) == 6, "floor amax 8: e %d code %d", sf[0], code_at(q, 0));

  /* all zero: amax floor 1e-4 -> f = 1.6667e-5 -> 2^-15 -> e 112; floor rule: 2^(-14-2) -> 111 */
  float z[32] = {0};
  z[5] = -0.0f;
  TU_CHECK_OK(&C, mxq(z, DSK_MOE_IN_F32, 1, 32, 0, q, sf, NULL));
  TU_CHECK(&C, sf[0] == 112 && q[2] == 0x80, "zero block: e %d (want 112), byte 2 %02X (want 80: -0 keeps its sign)",
           sf[0], q[2]);
  TU_CHECK_OK(&C, mxq(z, DSK_MOE_IN_F32, 1, 32, DSK_MX_SCALE_FLOOR, q, sf, NULL));
  TU_CHECK(&C, sf[0] == 111, "zero block, floor rule: e %d (want 111)", sf[0]);

  /* two rows x two blocks: NaN in block (0,1), inf in (1,0); finite neighbours untouched */
  float nb[128];
  for (int i = 0; i < 128; i++) nb[i] = (float)(i % 7) - 3.0f;
  nb[40] = NAN;
  nb[64 + 3] = -INFINITY;
  uint8_t q4[64], sf4[4];
  memset(q4, 0xCD, sizeof q4);
  cnt = 0;
  TU_CHECK_OK(&C, mxq(nb, DSK_MOE_IN_F32, 2, 64, 0, q4, sf4, &cnt));
  TU_CHECK(&C, cnt == 2, "NaN blocks counted %lld, want 2", (long long)cnt);
  TU_CHECK(&C, sf4[1] == 0xFF && sf4[2] == 0xFF && sf4[0] == 126 && sf4[3] == 126, "NaN block scales %02X %02X %02X %02X",
           sf4[0], sf4[1], sf4[2], sf4[3]);
  int zero = 1;
  for (int i = 0; i < 16; i++) zero &= q4[16 + i] == 0 && q4[32 + i] == 0;
  TU_CHECK(&C, zero, "NaN blocks have codes 0");

  /* bf16 input widens exactly: same bytes as the fp32 call */
  dsk_bf16 hb[32];
  float hf[32];
  for (int i = 0; i < 32; i++) {
    hb[i] = dsk_bf16_from_f32(v[i] * 0.37f);
    hf[i] = dsk_bf16_to_f32(hb[i]);
  }
  uint8_t qa[16], qb[16], sa[1], sb[1];
  TU_CHECK_OK(&C, mxq(hb, DSK_MOE_IN_BF16, 1, 32, 0, qa, sa, NULL));
  TU_CHECK_OK(&C, mxq(hf, DSK_MOE_IN_F32, 1, 32, 0, qb, sb, NULL));
  TU_CHECK(&C, memcmp(qa, qb, 16) == 0 && sa[0] == sb[0], "bf16 and fp32 inputs differ");
}

static void test_mx_random(void) {
  tu_rng r = tu_rng_make(11);
  const int rows = 64, K = 256, nb = K / 32;
  float *x = malloc(sizeof(float) * rows * K), *back = malloc(sizeof(float) * rows * K);
  uint8_t *q = malloc((size_t)rows * K / 2), *sf = malloc((size_t)rows * nb), *q2 = malloc((size_t)rows * K / 2),
          *sf2 = malloc((size_t)rows * nb);
  int64_t mism = 0, idem = 0, blocks = 0;
  for (int rep = 0; rep < 40; rep++) {
    const unsigned flags = (unsigned)(rep % 4);
    for (int i = 0; i < rows * K; i++) {
      /* magnitudes from 2^-140 (denormal range) to 2^120, some exact grid ties */
      const int row = i / K, blk = (i % K) / 32;
      const double mag = ldexp(1.0, (int)((row * 7 + blk * 13 + rep * 3) % 260) - 140);
      double v = tu_normal(&r) * mag;
      if (tu_int(&r, 0, 9) == 0) v = (tu_int(&r, 0, 1) ? -1 : 1) * k_grid[tu_int(&r, 0, 7)] * mag; /* exact points */
      if (tu_int(&r, 0, 19) == 0) v = (tu_int(&r, 0, 1) ? -1 : 1) * (k_grid[tu_int(&r, 1, 7)] + k_grid[tu_int(&r, 0, 6)]) * 0.5 * mag;
      x[i] = (float)v;
    }
    memset(q, 0xCD, (size_t)rows * K / 2);
    memset(sf, 0xCD, (size_t)rows * nb);
    TU_CHECK_OK(&C, mxq(x, DSK_MOE_IN_F32, rows, K, flags, q, sf, NULL));
    for (int row = 0; row < rows; row++)
      for (int b = 0; b < nb; b++) {
        uint8_t codes[32], s;
        model_block(x + row * K + b * 32, flags, codes, &s);
        int ok = sf[row * nb + b] == s;
        for (int i = 0; i < 32; i++) ok &= code_at(q + row * K / 2 + b * 16, i) == codes[i];
        if (!ok && mism < 5)
          fprintf(stderr, "mx random: flags %u row %d block %d: scale %d vs model %d\n", flags, row, b,
                  sf[row * nb + b], s);
        mism += !ok;
        blocks++;
      }
    /* dequantize and quantize again: the same values (the bytes may differ:
     * a block whose largest code is 3 re-quantizes with half the scale) */
    if (flags == 0) {
      for (int row = 0; row < rows; row++)
        for (int k = 0; k < K; k++)
          back[row * K + k] = dsk_e2m1_to_f32(code_at(q + row * K / 2, k)) * dsk_ue8m0_w_to_f32(sf[row * nb + k / 32]);
      TU_CHECK_OK(&C, mxq(back, DSK_MOE_IN_F32, rows, K, 0, q2, sf2, NULL));
      for (int row = 0; row < rows; row++)
        for (int k = 0; k < K; k++) {
          const float v2 = dsk_e2m1_to_f32(code_at(q2 + row * K / 2, k)) * dsk_ue8m0_w_to_f32(sf2[row * nb + k / 32]);
          idem += v2 != back[row * K + k];
        }
    }
  }
  TU_CHECK(&C, mism == 0, "mx random: %lld of %lld blocks differ from the model", (long long)mism, (long long)blocks);
  TU_CHECK(&C, idem == 0, "mx random: %lld values change when dequantized and re-quantized", (long long)idem);
  printf("mx_quantize: %lld random blocks (4 flag combinations) equal to the model\n", (long long)blocks);
  free(x); free(back); free(q); free(sf); free(q2); free(sf2);
}

/* --------------------------------------------------------- 2. FP8 1x128 */
static dsk_status fp8q(const void *x, int dtype, int64_t rows, int64_t K, uint8_t *q, uint8_t *sf, int32_t *packed,
                       int64_t *cnt) {
  dsk_fp8_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = rows;
  d.K = K;
  d.x_dtype = (dsk_moe_in_dtype)dtype;
  d.x = x;
  d.x_stride = K;
  d.q = q;
  d.q_stride = K;
  d.sf = sf;
  d.sf_stride = K / 128;
  d.sf_packed = packed;
  d.counters = cnt;
  return dsk_fp8_quantize_1x128(g_ctx, &d);
}

static uint8_t packed_byte(const int32_t *w, int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t kg) {
  /* independent address formula: word g*Kp*T4 + (kg/4)*T4 + mn, byte kg%4 */
  const int64_t kp = (sf_k + 3) / 4, t4 = (MN + 3) / 4 * 4;
  return (uint8_t)((uint32_t)w[g * kp * t4 + (kg / 4) * t4 + mn] >> (8 * (kg % 4)));
}

static void test_fp8(void) {
  /* hand cases: group 0 amax 448 -> e 127; group 1 amax 1 -> 1/448 -> 2^-8 -> 119;
   * group 2 all zero -> 1e-4/448 -> 2^-22 -> 105; group 3 NaN, inf and 3.0 -> amax 3 -> 2^-7 -> 120 */
  float x[512] = {0};
  x[0] = 448.0f; x[1] = -0.5f; x[2] = 3.0f / 1024; /* 1.5 * 2^-9: subnormal tie -> 2 * 2^-9 */
  x[128] = 1.0f; x[129] = -0.5f; x[130] = 0.001f;
  x[384] = NAN; x[385] = -INFINITY; x[386] = 3.0f; x[387] = -1.5f;
  uint8_t q[512], sf[4];
  int32_t packed[4 * 1]; /* MN 1 -> T4 4, Kp 1 -> 4 words */
  memset(q, 0xCD, sizeof q);
  memset(packed, 0xCD, sizeof packed);
  int64_t cnt = 0;
  TU_CHECK_OK(&C, fp8q(x, DSK_MOE_IN_F32, 1, 512, q, sf, packed, &cnt));
  TU_CHECK(&C, sf[0] == 127 && sf[1] == 119 && sf[2] == 105 && sf[3] == 120, "fp8 scales %d %d %d %d (want 127 119 105 120)",
           sf[0], sf[1], sf[2], sf[3]);
  TU_CHECK(&C, q[0] == 0x7E && q[1] == 0xB0 && q[2] == 0x02, "group 0 codes %02X %02X %02X (want 7E B0 02)", q[0], q[1],
           q[2]);
  /* 1.0 / 2^-8 = 256 -> 0x78; -0.5 * 256 = -128 -> 0xF0; 0.001*256 = 0.256 -> 0.25 = 0x28 */
  TU_CHECK(&C, q[128] == 0x78 && q[129] == 0xF0 && q[130] == 0x28, "group 1 codes %02X %02X %02X (want 78 F0 28)",
           q[128], q[129], q[130]);
  /* s = 2^-7: 3 -> 384 = 1.5 * 2^8 -> 0x7C; -1.5 -> -192 -> 0xF4 */
  TU_CHECK(&C, q[384] == 0x7F && q[385] == 0x7F && q[386] == 0x7C && q[387] == 0xF4,
           "group 3 codes %02X %02X %02X %02X (want 7F 7F 7C F4)", q[384], q[385], q[386], q[387]);
  TU_CHECK(&C, cnt == 2, "fp8 non-finite elements counted %lld, want 2", (long long)cnt);
  TU_CHECK(&C, (uint32_t)packed[0] == 0x7869777Fu && packed[1] == 0 && packed[2] == 0 && packed[3] == 0,
           "packed word %08X (want 7869777F) and zero padding", (unsigned)packed[0]);

  /* random rows, bf16 input, odd row count: model + packed == raw */
  tu_rng r = tu_rng_make(5);
  const int rows = 13, K = 640, ng = K / 128;
  dsk_bf16 *xb = malloc(sizeof(dsk_bf16) * rows * K);
  uint8_t *qq = malloc((size_t)rows * K), *ss = malloc((size_t)rows * ng);
  const int64_t words = dsk_sf_packed_words(1, rows, ng);
  int32_t *pk = malloc(sizeof(int32_t) * (size_t)words);
  for (int i = 0; i < rows * K; i++) xb[i] = dsk_bf16_from_f32((float)(tu_normal(&r) * ldexp(1.0, (i / 128) % 40 - 20)));
  memset(pk, 0xCD, sizeof(int32_t) * (size_t)words);
  TU_CHECK_OK(&C, fp8q(xb, DSK_MOE_IN_BF16, rows, K, qq, ss, pk, NULL));
  int64_t bad = 0;
  for (int row = 0; row < rows; row++)
    for (int g = 0; g < ng; g++) {
      double amax = 0;
      for (int i = 0; i < 128; i++) amax = fmax(amax, fabs(dsk_bf16_to_f32(xb[row * K + g * 128 + i])));
      float a = (float)amax < 1e-4f ? 1e-4f : (float)amax;
      const int e = ceil_log2f(a / 448.0f) + 127;
      bad += ss[row * ng + g] != e;
      bad += packed_byte(pk, rows, ng, 0, row, g) != e;
      for (int i = 0; i < 128; i++) {
        const float v = dsk_bf16_to_f32(xb[row * K + g * 128 + i]);
        bad += qq[row * K + g * 128 + i] != dsk_e4m3_from_f32((float)ldexp(v, 127 - e));
      }
    }
  for (int p = 0; p < 2; p++)
    for (int mn = rows; mn < 16; mn++) bad += pk[p * 16 + mn] != 0;
  bad += ((uint32_t)pk[16 + 0] >> 8) != 0; /* groups 5..7 of word p = 1 are missing -> 0 */
  TU_CHECK(&C, bad == 0, "fp8 random: %lld mismatches vs the model", (long long)bad);
  free(xb); free(qq); free(ss); free(pk);
}

/* ---------------------------------------------------------- 3./4. packing */
static void test_pack_words(void) {
  const uint8_t b[2][5] = {{0x01, 0x02, 0x03, 0x04, 0x05}, {0x7F, 0x80, 0xFF, 0x00, 0x81}};
  int32_t out[2][3];
  memset(out, 0xCD, sizeof out);
  dsk_pack_ue8m0_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = 2;
  d.sf_k = 5;
  d.sf = &b[0][0];
  d.sf_stride = 5;
  d.out = &out[0][0];
  d.out_stride = 3;
  TU_CHECK_OK(&C, dsk_pack_ue8m0_words(g_ctx, &d));
  TU_CHECK(&C, (uint32_t)out[0][0] == 0x04030201u && (uint32_t)out[0][1] == 0x00000005u,
           "pack words row 0: %08X %08X", (unsigned)out[0][0], (unsigned)out[0][1]);
  TU_CHECK(&C, (uint32_t)out[1][0] == 0x00FF807Fu && (uint32_t)out[1][1] == 0x00000081u,
           "pack words row 1: %08X %08X", (unsigned)out[1][0], (unsigned)out[1][1]);
  TU_CHECK(&C, (uint32_t)out[0][2] == 0xCDCDCDCDu, "pack words wrote past Kp (stride gap)");
}

static dsk_status sfpack(int64_t G, int64_t MN, int64_t sf_k, int gran, const uint8_t *sf, int64_t stride,
                         int64_t gstride, int32_t *out) {
  dsk_sf_pack_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.G = G;
  d.MN = MN;
  d.sf_k = sf_k;
  d.gran_mn = gran;
  d.sf = sf;
  d.sf_stride = stride;
  d.sf_group_stride = gstride;
  d.out = out;
  return dsk_sf_pack_mn_major(g_ctx, &d);
}

static uint8_t src_byte(int64_t g, int64_t mn, int64_t k) { return (uint8_t)(1 + (g * 61 + mn * 7 + k * 3) % 250); }

static void test_sf_pack(void) {
  /* spec example: G 2, MN 6, sf_k 5 -> Kp 2, T 8, strides (16, 1, 8), 32 words */
  uint8_t sf[2 * 6 * 5];
  for (int g = 0; g < 2; g++)
    for (int mn = 0; mn < 6; mn++)
      for (int k = 0; k < 5; k++) sf[(g * 6 + mn) * 5 + k] = src_byte(g, mn, k);
  TU_CHECK(&C, dsk_sf_packed_words(2, 6, 5) == 32, "words %lld, want 32", (long long)dsk_sf_packed_words(2, 6, 5));
  TU_CHECK(&C, dsk_sf_packed_kp(5) == 2, "Kp(5) = %lld", (long long)dsk_sf_packed_kp(5));
  TU_CHECK(&C, dsk_sf_packed_offset(6, 5, 1, 3, 1) == 27, "offset(g1, mn3, p1) = %lld, want 27",
           (long long)dsk_sf_packed_offset(6, 5, 1, 3, 1));
  TU_CHECK(&C, dsk_sf_packed_offset(6, 5, 0, 5, 0) == 5, "offset(g0, mn5, p0) = %lld, want 5",
           (long long)dsk_sf_packed_offset(6, 5, 0, 5, 0));
  TU_CHECK(&C, dsk_sf_packed_offset(6, 5, 0, 6, 0) == -1 && dsk_sf_packed_offset(6, 5, 0, 0, 2) == -1,
           "offset accepts out-of-range mn / p");
  int32_t out[32];
  memset(out, 0xCD, sizeof out);
  TU_CHECK_OK(&C, sfpack(2, 6, 5, 1, sf, 5, 30, out));
  uint8_t bytes[128];
  for (int i = 0; i < 32; i++)
    for (int j = 0; j < 4; j++) bytes[4 * i + j] = (uint8_t)((uint32_t)out[i] >> (8 * j));
  TU_CHECK(&C, bytes[108] == src_byte(1, 3, 4), "byte 108 = %d, want scale (g1, mn3, group 4) %d", bytes[108],
           src_byte(1, 3, 4));
  TU_CHECK(&C, bytes[22] == src_byte(0, 5, 2), "byte 22 = %d, want scale (g0, mn5, group 2) %d", bytes[22],
           src_byte(0, 5, 2));
  int pad_ok = 1;
  for (int g = 0; g < 2; g++) {
    for (int mn = 0; mn < 6; mn++) pad_ok &= ((uint32_t)out[g * 16 + 8 + mn] >> 8) == 0; /* bytes 1-3 of p = 1 */
    for (int p = 0; p < 2; p++)
      for (int mn = 6; mn < 8; mn++) pad_ok &= out[g * 16 + p * 8 + mn] == 0;
  }
  TU_CHECK(&C, pad_ok, "spec example: padding bytes are not all 0");

  /* DSv4-Flash FC1 weight scales: G 256, MN 4096, sf_k 128 -> (256, 4096, 32), strides (131072, 1, 4096) */
  TU_CHECK(&C, dsk_sf_packed_offset(4096, 128, 1, 0, 0) == 131072 && dsk_sf_packed_offset(4096, 128, 0, 0, 1) == 4096 &&
                   dsk_sf_packed_offset(4096, 128, 0, 1, 0) == 1 && dsk_sf_packed_words(256, 4096, 128) * 4 / 256 == 524288,
           "Flash FC1 geometry");

  /* grid of odd sizes against the formula (with input stride gaps) */
  int64_t cases = 0, bad = 0;
  const int64_t Gs[] = {1, 2, 3}, MNs[] = {1, 2, 3, 5, 7, 13, 64}, SKs[] = {1, 2, 3, 4, 5, 7, 9, 16};
  for (int gi = 0; gi < 3; gi++)
    for (int mi = 0; mi < 7; mi++)
      for (int si = 0; si < 8; si++) {
        const int64_t G = Gs[gi], MN = MNs[mi], SK = SKs[si], st = SK + 2, gst = MN * st + 5;
        uint8_t *in = malloc((size_t)(G * gst));
        for (int64_t g = 0; g < G; g++)
          for (int64_t mn = 0; mn < MN; mn++)
            for (int64_t k = 0; k < SK; k++) in[g * gst + mn * st + k] = src_byte(g, mn, k);
        const int64_t W = dsk_sf_packed_words(G, MN, SK);
        int32_t *o = malloc(sizeof(int32_t) * (size_t)W);
        memset(o, 0xCD, sizeof(int32_t) * (size_t)W);
        TU_CHECK_OK(&C, sfpack(G, MN, SK, 1, in, st, gst, o));
        const int64_t kp = (SK + 3) / 4, t4 = (MN + 3) / 4 * 4;
        bad += W != G * kp * t4;
        for (int64_t g = 0; g < G; g++)
          for (int64_t p = 0; p < kp; p++)
            for (int64_t mn = 0; mn < t4; mn++)
              for (int j = 0; j < 4; j++) {
                const int64_t k = 4 * p + j;
                const uint8_t want = (mn < MN && k < SK) ? src_byte(g, mn, k) : 0;
                bad += (uint8_t)((uint32_t)o[g * kp * t4 + p * t4 + mn] >> (8 * j)) != want;
              }
        for (int64_t g = 0; g < G; g++)
          for (int64_t mn = 0; mn < MN; mn++)
            for (int64_t p = 0; p < kp; p++) bad += dsk_sf_packed_offset(MN, SK, g, mn, p) != g * kp * t4 + p * t4 + mn;
        cases++;
        free(in);
        free(o);
      }
  TU_CHECK(&C, bad == 0, "sf pack grid: %lld wrong bytes/offsets over %lld shapes", (long long)bad, (long long)cases);

  /* 128x128 blocks broadcast to rows: MN 300 (3 block rows), sf_k 3 */
  uint8_t blk[3 * 3];
  for (int br = 0; br < 3; br++)
    for (int k = 0; k < 3; k++) blk[br * 3 + k] = (uint8_t)(100 + br * 10 + k);
  const int64_t W = dsk_sf_packed_words(1, 300, 3);
  int32_t *o = malloc(sizeof(int32_t) * (size_t)W);
  memset(o, 0xCD, sizeof(int32_t) * (size_t)W);
  TU_CHECK_OK(&C, sfpack(1, 300, 3, 128, blk, 3, 0, o));
  int64_t bb = 0;
  for (int mn = 0; mn < 300; mn++)
    for (int k = 0; k < 3; k++) bb += packed_byte(o, 300, 3, 0, mn, k) != 100 + (mn / 128) * 10 + k;
  for (int mn = 0; mn < 300; mn++) bb += packed_byte(o, 300, 3, 0, mn, 3) != 0;
  TU_CHECK(&C, bb == 0 && W == 300, "broadcast: %lld wrong bytes (words %lld)", (long long)bb, (long long)W);
  free(o);
}

/* ----------------------------------------------------------- 5. alignment */
static void test_alignment(void) {
  /* theoretical alignment */
  struct { dsk_moe_align_family f; int64_t m, g, want; } th[] = {
      {DSK_MOE_ALIGN_DEEPGEMM_SM120, 6, 256, 64},    {DSK_MOE_ALIGN_DEEPGEMM_SM120, 64 * 256, 256, 64},
      {DSK_MOE_ALIGN_DEEPGEMM_SM120, 64 * 256 + 1, 256, 128}, {DSK_MOE_ALIGN_DSK, 24576, 256, 128},
      {DSK_MOE_ALIGN_DSK, 0, 256, 64},               {DSK_MOE_ALIGN_DEEPGEMM_SM100, 6, 256, 32},
      {DSK_MOE_ALIGN_DEEPGEMM_SM100, 100, 0, 112},   {DSK_MOE_ALIGN_DEEPGEMM_SM100, 240, 1, 240},
      {DSK_MOE_ALIGN_DEEPGEMM_SM100, 225, 1, 240},   {DSK_MOE_ALIGN_DEEPGEMM_SM100, 224, 1, 224},
      {DSK_MOE_ALIGN_DEEPGEMM_SM90, 1, 256, 128},    {DSK_MOE_ALIGN_DEEPGEMM_SM90, 100000, 8, 128},
  };
  for (size_t i = 0; i < sizeof th / sizeof th[0]; i++) {
    const int64_t got = dsk_moe_theoretical_alignment(th[i].f, th[i].m, th[i].g);
    TU_CHECK(&C, got == th[i].want, "theoretical(family %d, m %lld, groups %lld) = %lld, want %lld", (int)th[i].f,
             (long long)th[i].m, (long long)th[i].g, (long long)got, (long long)th[i].want);
  }
  TU_CHECK(&C, dsk_moe_theoretical_alignment((dsk_moe_align_family)9, 1, 1) == -1, "unknown family accepted");

  /* spec table: SM120, E_local 256, topk 6, A 128 */
  const int64_t M[] = {1, 8, 64, 1024, 4096}, Au[] = {64, 64, 64, 64, 128},
                Ms[] = {384, 3072, 16512, 22272, 57088}, pre[] = {32640, 32640, 32896, 38656, 57088};
  for (int i = 0; i < 5; i++) {
    dsk_moe_align_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.M = M[i];
    d.topk = 6;
    d.E_local = 256;
    d.cap = 128;
    d.family = DSK_MOE_ALIGN_DEEPGEMM_SM120;
    int64_t ms = -1, au = -1;
    TU_CHECK_OK(&C, dsk_moe_aligned_m(&d, &ms, &au));
    TU_CHECK(&C, ms == Ms[i] && au == Au[i], "M %lld: (M_sum, A_used) = (%lld, %lld), want (%lld, %lld)",
             (long long)M[i], (long long)ms, (long long)au, (long long)Ms[i], (long long)Au[i]);
    d.family = DSK_MOE_ALIGN_DSK;
    d.cap = 0;
    int64_t ms2 = -1, au2 = -1;
    TU_CHECK_OK(&C, dsk_moe_aligned_m(&d, &ms2, &au2));
    TU_CHECK(&C, ms2 == ms && au2 == au, "dsk family differs from SM120 at M %lld", (long long)M[i]);
    /* the pre-fix column: E_local*(A-1) with A 128 and no shrinking */
    const int64_t old = (M[i] * 6 + 256 * 127 + 127) / 128 * 128;
    TU_CHECK(&C, old == pre[i], "pre-fix M_sum at M %lld: %lld, want %lld", (long long)M[i], (long long)old,
             (long long)pre[i]);
  }
  /* exact counts: M 4, topk 2, E_local 4 counts {3, 0, 5, 0} -> A_used 64 -> 64 + 64 = 128 */
  int64_t counts[4] = {3, 0, 5, 0};
  dsk_moe_align_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.M = 4;
  d.topk = 2;
  d.E_local = 4;
  d.counts = counts;
  int64_t ms, au;
  TU_CHECK_OK(&C, dsk_moe_aligned_m(&d, &ms, &au));
  TU_CHECK(&C, ms == 128 && au == 64, "counts path: (%lld, %lld), want (128, 64)", (long long)ms, (long long)au);
  d.cap = 64;
  d.counts = NULL;
  d.M = 4096;
  d.topk = 6;
  d.E_local = 256;
  TU_CHECK_OK(&C, dsk_moe_aligned_m(&d, &ms, &au));
  TU_CHECK(&C, au == 64 && ms == (24576 + 256 * 63 + 63) / 64 * 64, "cap 64: (%lld, %lld)", (long long)ms,
           (long long)au);
  d.M = 0;
  TU_CHECK_OK(&C, dsk_moe_aligned_m(&d, &ms, &au));
  TU_CHECK(&C, ms == 0, "M 0: M_sum %lld", (long long)ms);
  counts[1] = -1;
  d.counts = counts;
  d.M = 4;
  d.topk = 2;
  d.E_local = 4;
  TU_CHECK(&C, dsk_moe_aligned_m(&d, &ms, &au) == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "counts[1]"),
           "negative count accepted: %s", dsk_last_error());
}

/* ---------------------------------------------------------- 6. bad input */
static void expect_bad(dsk_status st, const char *field) {
  TU_CHECK(&C, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), field), "want INVALID_ARG naming '%s', got %s: %s",
           field, dsk_status_name(st), dsk_last_error());
}

static void test_bad(void) {
  float x[64] = {0};
  uint8_t q[64], sf[4];
  int32_t w[64];
  expect_bad(mxq(x, DSK_MOE_IN_F32, 1, 48, 0, q, sf, NULL), "K 48");
  expect_bad(mxq(x, DSK_MOE_IN_F32, 1, 32, 8, q, sf, NULL), "flags");
  expect_bad(mxq(x, 7, 1, 32, 0, q, sf, NULL), "x_dtype");
  expect_bad(mxq(NULL, DSK_MOE_IN_F32, 1, 32, 0, q, sf, NULL), "x is NULL");
  expect_bad(mxq(x, DSK_MOE_IN_F32, 1, 32, 0, q, NULL, NULL), "sf is NULL");
  expect_bad(mxq(x, DSK_MOE_IN_F32, -1, 32, 0, q, sf, NULL), "rows");
  TU_CHECK_OK(&C, mxq(NULL, DSK_MOE_IN_F32, 0, 0, 0, NULL, NULL, NULL)); /* rows 0: no-op */
  expect_bad(fp8q(x, DSK_MOE_IN_F32, 1, 64, q, sf, NULL, NULL), "K 64");
  expect_bad(fp8q(x, DSK_MOE_IN_F32, 1, 128, q, NULL, NULL, NULL), "sf and sf_packed");
  expect_bad(sfpack(1, 6, 5, 64, sf, 5, 0, w), "gran_mn");
  expect_bad(sfpack(2, 6, 5, 1, sf, 5, 10, w), "sf_group_stride");
  expect_bad(sfpack(1, 6, 5, 1, sf, 4, 0, w), "sf_stride");
  dsk_mx_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d - 1;
  d.rows = 1;
  expect_bad(dsk_mx_quantize(g_ctx, &d), "struct_size");
  expect_bad(dsk_mx_quantize(g_ctx, NULL), "desc is NULL");
}

int main(void) {
  g_ctx = tu_ctx("cpu");
  if (!g_ctx) return 1;
  (void)f2u;
  test_ue8m0();
  test_mx_hand();
  test_mx_random();
  test_fp8();
  test_pack_words();
  test_sf_pack();
  test_alignment();
  test_bad();
  dsk_ctx_destroy(g_ctx);
  return tu_finish("test_mxfp4", &C);
}
