/* test_formats.c - the number formats of dsk.h against slow, independent
 * references written here from the spec text (kv-cache.md §2, mxfp4-moe.md
 * §1.1, §1.2, §2.1):
 *  - e4m3: all 256 codes decode to the spec's value; the 254 finite codes
 *    round-trip; NaN codes; the encoder equals a nearest-value search over
 *    the 127 non-negative finite codes (exact midpoint comparison in double,
 *    ties to the even code, saturation to 448, sign kept) on every bf16 bit
 *    pattern (raw and scaled into range), every midpoint between neighbours
 *    (and the floats just below/above), a strided sweep of all fp32 in
 *    [0, 1024], and a few million random floats;
 *  - bf16: RNE incl. ties, overflow, NaN, against a truncate/compare model;
 *  - e2m1: code table, thresholds of mxfp4-moe.md §2.1, nearest-value model;
 *  - ue8m0: both decoders, ceil incl. exact powers of two and subnormals.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static uint32_t f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float u2f(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* ------------------------------------------------------------ e4m3 model */
/* Value of a non-NaN code from the spec's table (double, exact). */
static double spec_e4m3(int c) {
  int s = c >> 7, E = (c >> 3) & 15, M = c & 7;
  double v = E == 0 ? M * ldexp(1.0, -9) : (1.0 + M / 8.0) * ldexp(1.0, E - 7);
  return s ? -v : v;
}

static double g_pos[127]; /* values of codes 0x00..0x7E, increasing */

static void init_model(void) {
  for (int c = 0; c < 127; c++) g_pos[c] = spec_e4m3(c);
}

/* Slow reference encoder: nearest of the 127 magnitudes, ties to the even code. */
static uint8_t model_e4m3(float x) {
  if (isnan(x)) return 0x7F;
  uint8_t sign = signbit(x) ? 0x80 : 0x00;
  if (isinf(x)) return sign | 0x7E;
  double a = fabs((double)x);
  if (a >= g_pos[126]) return sign | 0x7E; /* nearest finite is the largest */
  int lo = 0, hi = 126;                     /* invariant: g_pos[lo] <= a < g_pos[hi] */
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (g_pos[mid] <= a) lo = mid;
    else hi = mid;
  }
  double a2 = 2.0 * a, m2 = g_pos[lo] + g_pos[hi]; /* both exact */
  int c = a2 < m2 ? lo : a2 > m2 ? hi : ((lo & 1) ? hi : lo);
  return (uint8_t)(sign | c);
}

typedef struct mism {
  int64_t n, bad;
  const char *what;
} mism;

static void e4m3_check_one(mism *m, float x) {
  uint8_t got = dsk_e4m3_from_f32(x), want = model_e4m3(x);
  m->n++;
  if (got != want) {
    if (m->bad < 8)
      fprintf(stderr, "  e4m3 %s: x=%.9g (0x%08X): got 0x%02X want 0x%02X\n", m->what, x, f2u(x), got, want);
    m->bad++;
  }
}

static void finish_mism(tu_counts *c, mism *m, int64_t *total) {
  TU_CHECK(c, m->bad == 0, "e4m3 encoder %s: %lld of %lld differ from the model", m->what, (long long)m->bad,
           (long long)m->n);
  printf("e4m3 encoder vs model, %-28s %9lld values, %lld mismatches\n", m->what, (long long)m->n, (long long)m->bad);
  *total += m->n;
}

static void test_e4m3(tu_counts *c) {
  init_model();
  /* model self-check: the known table entries */
  TU_CHECK(c, g_pos[126] == 448.0 && g_pos[1] == ldexp(1.0, -9) && g_pos[8] == ldexp(1.0, -6), "model table");

  /* 1. all 256 codes decode as specified */
  int dec_bad = 0;
  for (int code = 0; code < 256; code++) {
    float v = dsk_e4m3_to_f32((uint8_t)code);
    if ((code & 0x7F) == 0x7F) {
      if (!isnan(v)) dec_bad++, fprintf(stderr, "  code 0x%02X decodes to %g, want NaN\n", code, v);
      continue;
    }
    double w = spec_e4m3(code);
    if ((double)v != w || !!signbit(v) != (code >= 0x80))
      dec_bad++, fprintf(stderr, "  code 0x%02X decodes to %.9g, want %.9g\n", code, v, w);
  }
  TU_CHECK(c, dec_bad == 0, "%d of 256 codes decode wrongly", dec_bad);
  TU_CHECK(c, dsk_e4m3_to_f32(0x7E) == 448.0f && dsk_e4m3_to_f32(0xFE) == -448.0f, "max finite");
  TU_CHECK(c, dsk_e4m3_to_f32(0x01) == ldexpf(1.0f, -9) && dsk_e4m3_to_f32(0x08) == ldexpf(1.0f, -6), "min values");
  TU_CHECK(c, f2u(dsk_e4m3_to_f32(0x80)) == 0x80000000u, "0x80 decodes to -0.0");

  /* 2. the 254 finite codes round-trip; NaN codes encode back to 0x7F */
  int rt_bad = 0, rt_n = 0;
  for (int code = 0; code < 256; code++) {
    if ((code & 0x7F) == 0x7F) continue;
    rt_n++;
    uint8_t back = dsk_e4m3_from_f32(dsk_e4m3_to_f32((uint8_t)code));
    if (back != code) rt_bad++, fprintf(stderr, "  code 0x%02X round-trips to 0x%02X\n", code, back);
  }
  TU_CHECK(c, rt_n == 254 && rt_bad == 0, "%d of %d finite codes fail to round-trip", rt_bad, rt_n);
  TU_CHECK(c, dsk_e4m3_from_f32(dsk_e4m3_to_f32(0x7F)) == 0x7F, "NaN 0x7F re-encodes to 0x7F");
  TU_CHECK(c, dsk_e4m3_from_f32(dsk_e4m3_to_f32(0xFF)) == 0x7F, "NaN 0xFF re-encodes to 0x7F");
  const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA00000u};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
    TU_CHECK(c, dsk_e4m3_from_f32(u2f(nans[i])) == 0x7F, "NaN 0x%08X -> 0x%02X", nans[i], dsk_e4m3_from_f32(u2f(nans[i])));

  /* 3. spec rules, spelled out */
  TU_CHECK(c, dsk_e4m3_from_f32(INFINITY) == 0x7E && dsk_e4m3_from_f32(-INFINITY) == 0xFE, "inf saturates");
  TU_CHECK(c, dsk_e4m3_from_f32(FLT_MAX) == 0x7E && dsk_e4m3_from_f32(-1e6f) == 0xFE, "large values saturate");
  TU_CHECK(c, dsk_e4m3_from_f32(464.0f) == 0x7E && dsk_e4m3_from_f32(479.99f) == 0x7E && dsk_e4m3_from_f32(480.0f) == 0x7E,
           "448..480 saturates");
  TU_CHECK(c, dsk_e4m3_from_f32(-0.0f) == 0x80 && dsk_e4m3_from_f32(0.0f) == 0x00, "signed zeros");
  TU_CHECK(c, dsk_e4m3_from_f32(-1e-30f) == 0x80 && dsk_e4m3_from_f32(-ldexpf(1.0f, -10)) == 0x80,
           "negatives rounding to zero give 0x80");
  TU_CHECK(c, dsk_e4m3_from_f32(nextafterf(ldexpf(1.0f, -10), 1.0f)) == 0x01, "just above 2^-10 -> min subnormal");
  TU_CHECK(c, dsk_e4m3_from_f32(u2f(0x00000001u)) == 0x00 && dsk_e4m3_from_f32(u2f(0x80000001u)) == 0x80,
           "fp32 subnormals -> +-0");
  TU_CHECK(c, dsk_e4m3_from_f32(2.125f) == 0x40 && dsk_e4m3_from_f32(2.375f) == 0x42, "ties to even (2.125 -> 2.0)");
  TU_CHECK(c, dsk_e4m3_from_f32(256.0f) == 0x78 && dsk_e4m3_from_f32(-96.0f) == 0xEC, "kv-cache.md §7 codes");
  TU_CHECK(c, dsk_e4m3_from_f32(447.99997f) == 0x7E, "447.99997 -> 448");
  /* subnormal/normal boundary: 7.5 * 2^-9 is a tie between 0x07 (odd) and 0x08 */
  TU_CHECK(c, dsk_e4m3_from_f32(7.5f * ldexpf(1.0f, -9)) == 0x08, "subnormal boundary tie");
  TU_CHECK(c, dsk_e4m3_from_f32(6.5f * ldexpf(1.0f, -9)) == 0x06, "subnormal tie to even");

  int64_t total = 0;
  /* 4. every bf16 bit pattern, raw and scaled into range */
  mism m1 = {0, 0, "bf16 patterns (raw)"};
  mism m2 = {0, 0, "bf16 patterns (scaled)"};
  for (uint32_t b = 0; b < 65536; b++) {
    e4m3_check_one(&m1, u2f(b << 16));
    /* keep sign and mantissa, move the exponent into [2^-13, 2^9] */
    uint32_t e = (b >> 7) & 0xFF;
    uint32_t ne = 127 - 13 + (e % 23);
    e4m3_check_one(&m2, u2f(((b & 0x807Fu) << 16) | (ne << 23)));
  }
  finish_mism(c, &m1, &total);
  finish_mism(c, &m2, &total);

  /* 5. every midpoint between neighbouring values (and 448 .. 480), exact
   * in fp32, and the floats just below and above, both signs */
  mism m3 = {0, 0, "midpoints +- 1 ulp"};
  for (int i = 0; i < 127; i++) {
    double mid = i < 126 ? 0.5 * (g_pos[i] + g_pos[i + 1]) : 464.0;
    float fm = (float)mid;
    TU_CHECK(c, (double)fm == mid, "midpoint %d exact in fp32", i);
    float xs[3] = {fm, nextafterf(fm, 0.0f), nextafterf(fm, INFINITY)};
    for (int k = 0; k < 3; k++) {
      e4m3_check_one(&m3, xs[k]);
      e4m3_check_one(&m3, -xs[k]);
    }
    /* and the grid points themselves with their neighbours */
    float g = (float)g_pos[i];
    float gs[3] = {g, nextafterf(g, 0.0f), nextafterf(g, INFINITY)};
    for (int k = 0; k < 3; k++) {
      e4m3_check_one(&m3, gs[k]);
      e4m3_check_one(&m3, -gs[k]);
    }
  }
  finish_mism(c, &m3, &total);

  /* 6. a strided sweep over every positive fp32 up to 1024 (step 997 bit
   * patterns, prime so all low-bit patterns occur), both signs */
  mism m4 = {0, 0, "fp32 sweep [0,1024] step 997"};
  for (uint32_t u = 0; u <= 0x44800000u; u += 997u) {
    e4m3_check_one(&m4, u2f(u));
    e4m3_check_one(&m4, u2f(u | 0x80000000u));
  }
  finish_mism(c, &m4, &total);

  /* 7. random floats */
  tu_rng r = tu_rng_make(0xE4A3);
  mism m5 = {0, 0, "random bit patterns"};
  for (int i = 0; i < 1000000; i++) e4m3_check_one(&m5, u2f((uint32_t)tu_next(&r)));
  finish_mism(c, &m5, &total);
  mism m6 = {0, 0, "random, exponent in [-14,10]"};
  for (int i = 0; i < 1000000; i++) {
    uint32_t u = (uint32_t)tu_next(&r);
    uint32_t ne = (uint32_t)(127 - 14 + (int)tu_int(&r, 0, 24));
    e4m3_check_one(&m6, u2f((u & 0x807FFFFFu) | (ne << 23)));
  }
  finish_mism(c, &m6, &total);
  mism m7 = {0, 0, "random normals x 5 scales"};
  const double scales[5] = {1e-3, 0.05, 1.0, 30.0, 300.0};
  for (int s = 0; s < 5; s++)
    for (int i = 0; i < 300000; i++) e4m3_check_one(&m7, (float)(tu_normal(&r) * scales[s]));
  finish_mism(c, &m7, &total);
  printf("e4m3 encoder: %lld floats checked against the model\n", (long long)total);
}

/* ------------------------------------------------------------------- bf16 */
/* Model: truncate, then compare with the next magnitude (inf = 2^128). */
static uint16_t model_bf16(float x) {
  uint32_t u = f2u(x);
  uint32_t lo = u & 0xFFFF0000u;
  double a = fabs((double)x);
  double vlo = fabs((double)u2f(lo));
  uint32_t hi_mag = (lo & 0x7FFFFFFFu) + 0x10000u;
  double vhi = hi_mag >= 0x7F800000u ? ldexp(1.0, 128) : (double)u2f(hi_mag);
  double a2 = 2.0 * a, m2 = vlo + vhi;
  int up = a2 > m2 || (a2 == m2 && ((lo >> 16) & 1));
  return (uint16_t)((lo >> 16) + (up ? 1 : 0));
}

static void test_bf16(tu_counts *c) {
  TU_CHECK(c, dsk_bf16_from_f32(1.0f) == 0x3F80 && dsk_bf16_to_f32(0x3F80) == 1.0f, "1.0");
  TU_CHECK(c, dsk_bf16_from_f32(u2f(0x3F808000u)) == 0x3F80, "tie at even stays");
  TU_CHECK(c, dsk_bf16_from_f32(u2f(0x3F818000u)) == 0x3F82, "tie at odd rounds up");
  TU_CHECK(c, dsk_bf16_from_f32(u2f(0x3F808001u)) == 0x3F81, "above tie rounds up");
  TU_CHECK(c, dsk_bf16_from_f32(u2f(0x3F807FFFu)) == 0x3F80, "below tie rounds down");
  TU_CHECK(c, dsk_bf16_from_f32(u2f(0xBF818000u)) == 0xBF82, "negative tie");
  TU_CHECK(c, dsk_bf16_from_f32(FLT_MAX) == 0x7F80, "FLT_MAX rounds to inf (RNE)");
  TU_CHECK(c, dsk_bf16_from_f32(u2f(0x7F7F7FFFu)) == 0x7F7F, "largest below the overflow tie");
  TU_CHECK(c, dsk_bf16_from_f32(INFINITY) == 0x7F80 && dsk_bf16_from_f32(-INFINITY) == 0xFF80, "inf");
  TU_CHECK(c, dsk_bf16_from_f32(-0.0f) == 0x8000, "-0");
  const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFBFFFFFu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    uint16_t b = dsk_bf16_from_f32(u2f(nans[i]));
    TU_CHECK(c, isnan(dsk_bf16_to_f32(b)) && (b >> 15) == (nans[i] >> 31), "NaN 0x%08X -> 0x%04X", nans[i], b);
  }
  int bad = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    float f = dsk_bf16_to_f32((dsk_bf16)b);
    if (f2u(f) != b << 16) bad++;
    if (!isnan(f) && dsk_bf16_from_f32(f) != b) bad++;
  }
  TU_CHECK(c, bad == 0, "bf16 decode / round-trip of all 65536 patterns: %d bad", bad);
  tu_rng r = tu_rng_make(0xBF16);
  int64_t n = 0;
  bad = 0;
  for (int i = 0; i < 1000000; i++) {
    uint32_t u = (uint32_t)tu_next(&r);
    static const uint32_t near_tie[4] = {0x8000u, 0x7FFFu, 0x8001u, 0x0000u};
    if (i & 1) u = (u & 0xFFFF0000u) | near_tie[tu_next(&r) & 3]; /* ties and their neighbours */
    float x = u2f(u);
    if (isnan(x)) continue;
    n++;
    uint16_t got = dsk_bf16_from_f32(x), want = model_bf16(x);
    if (got != want && bad++ < 8) fprintf(stderr, "  bf16 0x%08X: got 0x%04X want 0x%04X\n", u, got, want);
  }
  TU_CHECK(c, bad == 0, "bf16 RNE vs model: %d of %lld differ", bad, (long long)n);
  printf("bf16: %lld random floats checked against the model\n", (long long)n);
}

/* ------------------------------------------------------------------- e2m1 */
static const double k_e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

static uint8_t model_e2m1(float x) {
  if (isnan(x)) return 0;
  uint8_t s = signbit(x) ? 8 : 0;
  double a = fabs((double)x);
  if (a >= 6.0) return s | 7;
  int lo = 0;
  while (lo < 6 && k_e2m1[lo + 1] <= a) lo++;
  int hi = lo + 1;
  double a2 = 2 * a, m2 = k_e2m1[lo] + k_e2m1[hi];
  int code = a2 < m2 ? lo : a2 > m2 ? hi : ((lo & 1) ? hi : lo);
  return (uint8_t)(s | code);
}

static void test_e2m1(tu_counts *c) {
  /* mxfp4-moe.md §1.1 table: value, e4m3 byte, bf16 bits */
  static const uint8_t e4m3_col[16] = {0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C,
                                       0x80, 0xB0, 0xB8, 0xBC, 0xC0, 0xC4, 0xC8, 0xCC};
  static const uint16_t bf16_col[16] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
                                        0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
  for (int code = 0; code < 16; code++) {
    float v = dsk_e2m1_to_f32((uint8_t)code);
    double want = (code & 8 ? -1 : 1) * k_e2m1[code & 7];
    TU_CHECK(c, v == want, "e2m1 code %d decodes to %g, want %g", code, v, want);
    TU_CHECK(c, dsk_e4m3_from_f32(v) == e4m3_col[code], "e2m1 code %d as e4m3 0x%02X", code, dsk_e4m3_from_f32(v));
    TU_CHECK(c, dsk_bf16_from_f32(v) == bf16_col[code], "e2m1 code %d as bf16 0x%04X", code, dsk_bf16_from_f32(v));
    uint8_t back = dsk_e2m1_from_f32(v);
    TU_CHECK(c, back == code, "e2m1 code %d round-trips to %d", code, back);
    TU_CHECK(c, dsk_e2m1_to_f32((uint8_t)(code | 0xF0)) == v, "e2m1 decode ignores the high nibble");
  }
  /* §2.1 thresholds: [0,.25] 0 | (.25,.75) .5 | [.75,1.25] 1 | (1.25,1.75) 1.5 |
   * [1.75,2.5] 2 | (2.5,3.5) 3 | [3.5,5] 4 | (5,6] 6 */
  static const struct { float t; int at, above; } th[] = {
      {0.25f, 0, 1}, {0.75f, 2, 2}, {1.25f, 2, 3}, {1.75f, 4, 4}, {2.5f, 4, 5}, {3.5f, 6, 6}, {5.0f, 6, 7}};
  static const int below[] = {0, 1, 2, 3, 4, 5, 6};
  for (size_t i = 0; i < sizeof th / sizeof th[0]; i++) {
    float t = th[i].t;
    TU_CHECK(c, dsk_e2m1_from_f32(t) == th[i].at, "e2m1(%g) = %d, want %d", t, dsk_e2m1_from_f32(t), th[i].at);
    TU_CHECK(c, dsk_e2m1_from_f32(nextafterf(t, 10)) == th[i].above, "e2m1(%g+) = %d", t,
             dsk_e2m1_from_f32(nextafterf(t, 10)));
    TU_CHECK(c, dsk_e2m1_from_f32(nextafterf(t, 0)) == below[i], "e2m1(%g-) = %d", t, dsk_e2m1_from_f32(nextafterf(t, 0)));
    TU_CHECK(c, dsk_e2m1_from_f32(-t) == (th[i].at | 8), "e2m1(-%g)", t);
  }
  TU_CHECK(c, dsk_e2m1_from_f32(6.0f) == 7 && dsk_e2m1_from_f32(1e30f) == 7 && dsk_e2m1_from_f32(INFINITY) == 7,
           "saturates to 6");
  TU_CHECK(c, dsk_e2m1_from_f32(-INFINITY) == 15 && dsk_e2m1_from_f32(-7.0f) == 15, "saturates to -6");
  TU_CHECK(c, dsk_e2m1_from_f32(-0.0f) == 8 && dsk_e2m1_from_f32(-0.1f) == 8, "small negatives give code 8");
  TU_CHECK(c, dsk_e2m1_from_f32(NAN) == 0 && dsk_e2m1_from_f32(-NAN) == 0, "NaN gives code 0 ([dsk] choice)");
  tu_rng r = tu_rng_make(0xE2E1);
  int bad = 0;
  for (int i = 0; i < 200000; i++) {
    float x = (float)(tu_normal(&r) * (i % 3 == 0 ? 0.5 : i % 3 == 1 ? 2.0 : 5.0));
    if (i % 7 == 0) x = (float)(tu_int(&r, -28, 28) * 0.25); /* exact quarter grid: all ties */
    if (dsk_e2m1_from_f32(x) != model_e2m1(x) && bad++ < 8)
      fprintf(stderr, "  e2m1(%.9g) = %d want %d\n", x, dsk_e2m1_from_f32(x), model_e2m1(x));
  }
  TU_CHECK(c, bad == 0, "e2m1 vs model: %d of 200000 differ", bad);
}

/* ------------------------------------------------------------------ UE8M0 */
static int model_ceil(float x) { /* smallest e in [1,254] with 2^(e-127) >= x, else 254 */
  for (int e = 1; e <= 254; e++)
    if (ldexp(1.0, e - 127) >= (double)x) return e;
  return 254;
}

static void test_ue8m0(tu_counts *c) {
  TU_CHECK(c, f2u(dsk_ue8m0_kv_to_f32(0)) == 0u, "kv: 0 -> +0.0");
  TU_CHECK(c, isnan(dsk_ue8m0_kv_to_f32(255)) && isnan(dsk_ue8m0_w_to_f32(255)), "255 -> NaN");
  TU_CHECK(c, f2u(dsk_ue8m0_w_to_f32(0)) == 0x00400000u && (double)dsk_ue8m0_w_to_f32(0) == ldexp(1.0, -127),
           "w: 0 -> 2^-127");
  int bad = 0;
  for (int e = 1; e <= 254; e++) {
    double want = ldexp(1.0, e - 127);
    if ((double)dsk_ue8m0_kv_to_f32((uint8_t)e) != want || (double)dsk_ue8m0_w_to_f32((uint8_t)e) != want) bad++;
    float p = (float)want;
    if (dsk_ue8m0_ceil_from_f32(p) != e) bad++;                                  /* exact powers */
    if (e < 254 && dsk_ue8m0_ceil_from_f32(nextafterf(p, INFINITY)) != e + 1) bad++; /* just above */
    if (e > 1 && dsk_ue8m0_ceil_from_f32(nextafterf(p, 0.0f)) != e) bad++;       /* just below */
  }
  TU_CHECK(c, bad == 0, "ue8m0 decoders and ceil on powers of two: %d bad", bad);
  TU_CHECK(c, dsk_ue8m0_ceil_from_f32(1.0f) == 127 && dsk_ue8m0_ceil_from_f32(1.5f) == 128 &&
                  dsk_ue8m0_ceil_from_f32(0.75f) == 127 && dsk_ue8m0_ceil_from_f32(1.0f / 448) == 119,
           "ceil examples");
  TU_CHECK(c, dsk_ue8m0_ceil_from_f32(u2f(1)) == 1 && dsk_ue8m0_ceil_from_f32(u2f(0x00400000u)) == 1 &&
                  dsk_ue8m0_ceil_from_f32(u2f(0x007FFFFFu)) == 1,
           "subnormals clamp to 1");
  TU_CHECK(c, dsk_ue8m0_ceil_from_f32(FLT_MIN) == 1 && dsk_ue8m0_ceil_from_f32(nextafterf(FLT_MIN, 1)) == 2,
           "2^-126 -> 1, above -> 2");
  TU_CHECK(c, dsk_ue8m0_ceil_from_f32(FLT_MAX) == 254 && dsk_ue8m0_ceil_from_f32(ldexpf(1.0f, 127)) == 254,
           "clamped to 254");
  TU_CHECK(c, dsk_ue8m0_ceil_from_f32(0.0f) == 1 && dsk_ue8m0_ceil_from_f32(-2.0f) == 1 &&
                  dsk_ue8m0_ceil_from_f32(INFINITY) == 254 && dsk_ue8m0_ceil_from_f32(NAN) == 255,
           "outside the domain ([dsk] choices)");
  tu_rng r = tu_rng_make(0x0E8);
  bad = 0;
  for (int i = 0; i < 100000; i++) {
    float x = u2f((uint32_t)tu_next(&r) & 0x7FFFFFFFu);
    if (!isfinite(x) || x == 0.0f) continue;
    if (dsk_ue8m0_ceil_from_f32(x) != model_ceil(x) && bad++ < 8)
      fprintf(stderr, "  ceil(%g) = %d want %d\n", x, dsk_ue8m0_ceil_from_f32(x), model_ceil(x));
  }
  TU_CHECK(c, bad == 0, "ue8m0 ceil vs model: %d bad", bad);
}

int main(void) {
  tu_counts counts = {0, 0};
  test_e4m3(&counts);
  test_bf16(&counts);
  test_e2m1(&counts);
  test_ue8m0(&counts);
  return tu_finish("test_formats", &counts);
}
