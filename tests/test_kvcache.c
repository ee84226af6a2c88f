/* test_kvcache.c - KV-cache geometry, the cpu-ref writer and reader, and the
 * descriptor checks of dsk_kv_write / dsk_kv_read (spec/kv-cache.md).
 *
 * The expectations are built here from the spec text, independently of
 * src/format/format.h: byte offsets from §3/§4/§6, scales by a power-of-two
 * search in double, e4m3 codes from the public encoder (test_formats checks
 * it against its own model). Caches are pre-poisoned with 0xFF, so every
 * byte the writer must not touch is checked too.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ops/ops.h"
#include "format/format.h"
#include "testutil.h"

static tu_counts g_c;

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
static float bf(uint16_t b) { return u2f((uint32_t)b << 16); }
static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put_f32(uint8_t *p, float x) {
  uint32_t u = f2u(x);
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static float get_f32(const uint8_t *p) { return u2f(get_u32(p)); }

static const char *fname(dsk_kv_format f) {
  return f == DSK_KV_FORMAT_A656 ? "A656" : f == DSK_KV_FORMAT_B584 ? "B584" : "IDXK132";
}

/* ----------------------------------------------- spec layout, written anew */
static int64_t lat_dim(dsk_kv_format f) { return f == DSK_KV_FORMAT_A656 ? 512 : f == DSK_KV_FORMAT_B584 ? 448 : 128; }
static int64_t out_dim(dsk_kv_format f) { return f == DSK_KV_FORMAT_A656 ? 576 : f == DSK_KV_FORMAT_B584 ? 512 : 128; }
static int64_t ent_bytes(dsk_kv_format f) { return f == DSK_KV_FORMAT_A656 ? 656 : f == DSK_KV_FORMAT_B584 ? 584 : 132; }
static int tile_of(dsk_kv_format f) { return f == DSK_KV_FORMAT_B584 ? 64 : 128; }
/* offsets of the fp8 bytes, the rope and the first scale byte of a slot */
static int64_t off_fp8(dsk_kv_format f, int64_t slot, int64_t pbs, int64_t ps) {
  int64_t p = slot / pbs, j = slot % pbs;
  return p * ps + (f == DSK_KV_FORMAT_A656 ? 656 * j : f == DSK_KV_FORMAT_B584 ? 576 * j : 128 * j);
}
static int64_t off_rope(dsk_kv_format f, int64_t slot, int64_t pbs, int64_t ps) {
  return off_fp8(f, slot, pbs, ps) + (f == DSK_KV_FORMAT_A656 ? 528 : 448);
}
static int64_t off_scale(dsk_kv_format f, int64_t slot, int64_t pbs, int64_t ps) {
  int64_t p = slot / pbs, j = slot % pbs;
  if (f == DSK_KV_FORMAT_A656) return p * ps + 656 * j + 512;
  if (f == DSK_KV_FORMAT_B584) return p * ps + 576 * pbs + 8 * j;
  return p * ps + 128 * pbs + 4 * j;
}

/* smallest power of two >= r (r > 0, normal), by search */
static int pow2_exp_ceil(float r) {
  int k = -126;
  while (ldexp(1.0, k) < (double)r) k++;
  return k;
}

/* Writes the spec's record for one row into the expected image `img`;
 * returns the number of non-finite tiles. */
static int model_write(dsk_kv_format f, dsk_scale_rule rule, const uint16_t *lat, const uint16_t *rope, uint8_t *img,
                       int64_t slot, int64_t pbs, int64_t ps) {
  int nt = (int)(lat_dim(f) / tile_of(f)), T = tile_of(f), bad = 0;
  uint8_t *q = img + off_fp8(f, slot, pbs, ps);
  uint8_t *sc = img + off_scale(f, slot, pbs, ps);
  for (int t = 0; t < nt; t++) {
    double amax = 0;
    int nonfinite = 0;
    for (int i = 0; i < T; i++) {
      float x = bf(lat[t * T + i]);
      if (!isfinite(x)) nonfinite = 1;
      else if (fabs(x) > amax) amax = fabs(x);
    }
    float s;
    if (nonfinite) {
      bad++;
      memset(q + t * T, 0x7F, (size_t)T);
      if (f == DSK_KV_FORMAT_B584) sc[t] = 127;
      else put_f32(sc + 4 * t, 1.0f);
      continue;
    }
    float a = (float)amax;
    if (f == DSK_KV_FORMAT_A656) {
      float r = a / 448.0f;
      if (rule == DSK_SCALE_RAW) s = r > ldexpf(1.0f, -126) ? r : ldexpf(1.0f, -126);
      else s = ldexpf(1.0f, pow2_exp_ceil(r > 1e-4f ? r : 1e-4f));
      put_f32(sc + 4 * t, s);
    } else if (f == DSK_KV_FORMAT_B584) {
      int k = pow2_exp_ceil((a > 1e-4f ? a : 1e-4f) / 448.0f);
      s = ldexpf(1.0f, k);
      sc[t] = (uint8_t)(k + 127);
    } else {
      float r = (a > 1e-4f ? a : 1e-4f) / 448.0f;
      s = rule == DSK_SCALE_RAW ? r : ldexpf(1.0f, pow2_exp_ceil(r));
      put_f32(sc, s);
    }
    for (int i = 0; i < T; i++) q[t * T + i] = dsk_e4m3_from_f32(bf(lat[t * T + i]) / s);
  }
  if (f == DSK_KV_FORMAT_B584) sc[7] = 0;
  if (f != DSK_KV_FORMAT_IDXK132) {
    uint8_t *rp = img + off_rope(f, slot, pbs, ps);
    for (int i = 0; i < 64; i++) put_u16(rp + 2 * i, rope[i]);
  }
  return bad;
}

/* the spec's decode of one record (fp8 value * scale in fp32; rope as fp32) */
static double e4m3_val(uint8_t c) {
  int E = (c >> 3) & 15, M = c & 7;
  if (E == 15 && M == 7) return NAN;
  double v = E == 0 ? M * ldexp(1.0, -9) : (1.0 + M / 8.0) * ldexp(1.0, E - 7);
  return (c & 0x80) ? -v : v;
}
static void model_read(dsk_kv_format f, const uint8_t *img, int64_t slot, int64_t pbs, int64_t ps, float *o) {
  const uint8_t *q = img + off_fp8(f, slot, pbs, ps), *sc = img + off_scale(f, slot, pbs, ps);
  int T = tile_of(f);
  for (int d = 0; d < lat_dim(f); d++) {
    float s;
    if (f == DSK_KV_FORMAT_B584) {
      uint8_t e = sc[d / 64];
      s = e == 255 ? NAN : e == 0 ? 0.0f : ldexpf(1.0f, e - 127);
    } else {
      s = get_f32(f == DSK_KV_FORMAT_A656 ? sc + 4 * (d / T) : sc);
    }
    o[d] = (float)e4m3_val(q[d]) * s;
  }
  if (f != DSK_KV_FORMAT_IDXK132) {
    const uint8_t *rp = img + off_rope(f, slot, pbs, ps);
    for (int i = 0; i < 64; i++) o[lat_dim(f) + i] = bf((uint16_t)(rp[2 * i] | (rp[2 * i + 1] << 8)));
  }
}

static int same_f32(float a, float b) { return (isnan(a) && isnan(b)) || f2u(a) == f2u(b); }

/* First differing byte, or -1. */
static int64_t first_diff(const uint8_t *a, const uint8_t *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (a[i] != b[i]) return i;
  return -1;
}

/* ------------------------------------------------------------- helpers */
static dsk_kv_write_desc wdesc(dsk_kv_format f, int64_t N, const uint16_t *lat, int64_t ls, const uint16_t *rope,
                               int64_t rs, const int32_t *slots, void *base, int64_t pbs, int64_t ps, int64_t np,
                               dsk_scale_rule rule, int64_t *counters) {
  dsk_kv_write_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.format = f;
  d.N = N;
  d.latent = lat;
  d.latent_stride = ls;
  d.rope = rope;
  d.rope_stride = rs;
  d.slot_mapping = slots;
  d.cache.base = base;
  d.cache.pbs = pbs;
  d.cache.page_stride = ps;
  d.cache.num_pages = np;
  d.scale_rule = rule;
  d.counters = counters;
  return d;
}
static dsk_kv_read_desc rdesc(dsk_kv_format f, int64_t N, const int32_t *slots, void *base, int64_t pbs, int64_t ps,
                              int64_t np, float *out, int64_t os, int64_t *counters) {
  dsk_kv_read_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.format = f;
  d.N = N;
  d.slots = slots;
  d.cache.base = base;
  d.cache.pbs = pbs;
  d.cache.page_stride = ps;
  d.cache.num_pages = np;
  d.out = out;
  d.out_stride = os;
  d.counters = counters;
  return d;
}

/* -------------------------------------------------------------- geometry */
static void test_geometry(void) {
  tu_counts *c = &g_c;
  TU_CHECK(c, dsk_kv_entry_bytes(DSK_KV_FORMAT_A656) == 656 && dsk_kv_entry_bytes(DSK_KV_FORMAT_B584) == 584 &&
                  dsk_kv_entry_bytes(DSK_KV_FORMAT_IDXK132) == 132,
           "entry bytes");
  TU_CHECK(c, dsk_kv_entry_bytes((dsk_kv_format)0) == 0 && dsk_kv_entry_bytes((dsk_kv_format)4) == 0, "unknown -> 0");
  TU_CHECK(c, dsk_kv_dim(DSK_KV_FORMAT_A656) == 576 && dsk_kv_dim(DSK_KV_FORMAT_B584) == 512 &&
                  dsk_kv_dim(DSK_KV_FORMAT_IDXK132) == 128,
           "dims");
  TU_CHECK(c, dsk_kv_latent_dim(DSK_KV_FORMAT_A656) == 512 && dsk_kv_latent_dim(DSK_KV_FORMAT_B584) == 448 &&
                  dsk_kv_latent_dim(DSK_KV_FORMAT_IDXK132) == 128,
           "latent dims");
  TU_CHECK(c, dsk_kv_min_page_stride(DSK_KV_FORMAT_A656, 64) == 41984 &&
                  dsk_kv_min_page_stride(DSK_KV_FORMAT_B584, 64) == 37376 &&
                  dsk_kv_min_page_stride(DSK_KV_FORMAT_B584, 3) == 1752 &&
                  dsk_kv_min_page_stride(DSK_KV_FORMAT_IDXK132, 64) == 8448,
           "minimum strides");
  TU_CHECK(c, dsk_kv_min_page_stride(DSK_KV_FORMAT_A656, 0) == 0 && dsk_kv_min_page_stride((dsk_kv_format)9, 4) == 0 &&
                  dsk_kv_min_page_stride(DSK_KV_FORMAT_A656, INT64_MAX / 100) == 0,
           "invalid minimum -> 0");
  static const struct { dsk_kv_format f; int64_t pbs, canon; } cs[] = {
      {DSK_KV_FORMAT_A656, 64, 41984},  {DSK_KV_FORMAT_A656, 2, 1312},   {DSK_KV_FORMAT_A656, 256, 167936},
      {DSK_KV_FORMAT_B584, 64, 37440},  {DSK_KV_FORMAT_B584, 2, 1728},   {DSK_KV_FORMAT_B584, 256, 149760},
      {DSK_KV_FORMAT_B584, 3, 2304},    {DSK_KV_FORMAT_B584, 1, 576 * 2}, {DSK_KV_FORMAT_IDXK132, 64, 8448},
      {DSK_KV_FORMAT_IDXK132, 1, 132},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    int64_t got = dsk_kv_canonical_page_stride(cs[i].f, cs[i].pbs);
    TU_CHECK(c, got == cs[i].canon, "canonical %s pbs %lld: %lld want %lld", fname(cs[i].f), (long long)cs[i].pbs,
             (long long)got, (long long)cs[i].canon);
  }
}

/* ----------------------------------------- §7 worked offsets (format.h) */
typedef struct worked {
  dsk_kv_format f;
  int64_t pbs, ps, slot, data, rope, scales;
} worked;
static const worked k_worked[] = {
    {DSK_KV_FORMAT_A656, 64, 41984, 130, 85280, 85808, 85792},
    {DSK_KV_FORMAT_A656, 2, 1312, 5, 3280, 3808, 3792},
    {DSK_KV_FORMAT_A656, 256, 167936, 300, 196800, 197328, 197312},
    {DSK_KV_FORMAT_B584, 64, 37440, 130, 76032, 76480, 111760},
    {DSK_KV_FORMAT_B584, 2, 1728, 5, 4032, 4480, 4616},
    {DSK_KV_FORMAT_B584, 256, 149760, 300, 175104, 175552, 297568},
    {DSK_KV_FORMAT_IDXK132, 64, 8448, 70, 9216, -1, 16664},
};

/* Row pattern whose bytes are known by hand: tile t holds, at i%3 = 0,1,2,
 * sg*{1.0, 1.5, -0.75} * 2^(t-2). amax = 1.5*2^(t-2), r = amax/448 =
 * (3/14)*2^(t-8) = 0.857*2^(t-10), so s = 2^(t-10) (A POW2, B, indexer
 * POW2; r >= 1e-4 for every t >= 0) and x/s = sg*{256, 384, -192}, codes
 * {0x78, 0x7C, 0xF4} for sg = +1, {0xF8, 0xFC, 0x74} for sg = -1. */
static void hand_row(uint16_t *lat, int n, int T, int sg) {
  for (int d = 0; d < n; d++) {
    int t = d / T, i = d % T;
    float base = ldexpf(1.0f, t - 2) * (float)sg;
    float v = i % 3 == 0 ? base : i % 3 == 1 ? 1.5f * base : -0.75f * base;
    lat[d] = dsk_bf16_from_f32(v);
  }
}
static uint8_t hand_code(int i, int sg) {
  static const uint8_t pos[3] = {0x78, 0x7C, 0xF4};
  return (uint8_t)(pos[i % 3] ^ (sg < 0 ? 0x80 : 0));
}

static void test_worked_offsets(dsk_ctx *ctx) {
  tu_counts *c = &g_c;
  for (size_t k = 0; k < sizeof k_worked / sizeof k_worked[0]; k++) {
    const worked *w = &k_worked[k];
    TU_CHECK(c, dsk_kv_canonical_page_stride(w->f, w->pbs) == w->ps, "§7 canonical stride %s %lld", fname(w->f),
             (long long)w->pbs);
    int64_t data, rope, sc;
    if (w->f == DSK_KV_FORMAT_A656) {
      data = dsk_fmt_a_record_off(w->slot, w->pbs, w->ps);
      rope = data + DSK_FMT_A_ROPE_OFF;
      sc = data + DSK_FMT_A_SCALE_OFF;
    } else if (w->f == DSK_KV_FORMAT_B584) {
      data = dsk_fmt_b_data_off(w->slot, w->pbs, w->ps);
      rope = dsk_fmt_b_rope_off(w->slot, w->pbs, w->ps);
      sc = dsk_fmt_b_scale_off(w->slot, w->pbs, w->ps);
    } else {
      data = dsk_fmt_i_data_off(w->slot, w->pbs, w->ps);
      rope = -1;
      sc = dsk_fmt_i_scale_off(w->slot, w->pbs, w->ps);
    }
    TU_CHECK(c, data == w->data && rope == w->rope && sc == w->scales,
             "§7 %s pbs %lld slot %lld: format.h gives %lld/%lld/%lld", fname(w->f), (long long)w->pbs,
             (long long)w->slot, (long long)data, (long long)rope, (long long)sc);
    TU_CHECK(c, off_fp8(w->f, w->slot, w->pbs, w->ps) == w->data && off_scale(w->f, w->slot, w->pbs, w->ps) == w->scales &&
                    (w->rope < 0 || off_rope(w->f, w->slot, w->pbs, w->ps) == w->rope),
             "§7 %s: the test's own offsets", fname(w->f));

    /* write one hand-pattern row to that slot of a poisoned canonical cache */
    int64_t np = w->slot / w->pbs + 1, bytes = np * w->ps;
    uint8_t *cache = (uint8_t *)malloc((size_t)bytes), *exp = (uint8_t *)malloc((size_t)bytes);
    memset(cache, 0xFF, (size_t)bytes);
    memset(exp, 0xFF, (size_t)bytes);
    uint16_t lat[512], rope_in[64];
    int T = tile_of(w->f), L = (int)lat_dim(w->f);
    hand_row(lat, L, T, 1);
    for (int i = 0; i < 64; i++) rope_in[i] = (uint16_t)(0x3C00 + 3 * i);
    int32_t slot = (int32_t)w->slot;
    dsk_kv_write_desc d = wdesc(w->f, 1, lat, L, rope_in, 64, &slot, cache, w->pbs, w->ps, np, DSK_SCALE_POW2, NULL);
    TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
    for (int i = 0; i < L; i++) exp[w->data + i] = hand_code(i % T, 1);
    for (int t = 0; t < L / T; t++) {
      if (w->f == DSK_KV_FORMAT_B584) exp[w->scales + t] = (uint8_t)(117 + t);
      else put_f32(exp + w->scales + 4 * t, ldexpf(1.0f, t - 10));
    }
    if (w->f == DSK_KV_FORMAT_B584) exp[w->scales + 7] = 0;
    if (w->rope >= 0)
      for (int i = 0; i < 64; i++) put_u16(exp + w->rope + 2 * i, rope_in[i]);
    int64_t fd = first_diff(cache, exp, bytes);
    TU_CHECK(c, fd < 0, "§7 %s pbs %lld slot %lld: byte %lld is 0x%02X, want 0x%02X", fname(w->f), (long long)w->pbs,
             (long long)w->slot, (long long)fd, fd >= 0 ? cache[fd] : 0, fd >= 0 ? exp[fd] : 0);
    free(cache);
    free(exp);
  }
}

/* ---------------------------------------------- §7 quantisation example */
static void test_quant_example(dsk_ctx *ctx) {
  tu_counts *c = &g_c;
  uint16_t lat[512], rope[64];
  for (int i = 0; i < 512; i++) lat[i] = dsk_bf16_from_f32(i % 2 ? 0.25f : -0.5f); /* |x| < 1 */
  lat[0] = dsk_bf16_from_f32(1.0f);
  lat[1] = dsk_bf16_from_f32(-0.375f);
  lat[2] = dsk_bf16_from_f32(0.00830078125f);
  TU_CHECK(c, bf(lat[2]) == 0.00830078125f, "0.00830078125 is bf16-exact");
  for (int i = 0; i < 64; i++) rope[i] = (uint16_t)i;
  int32_t slot = 0;
  uint8_t page[1184];
  /* Format B, pbs 1: footer at 576 */
  memset(page, 0xFF, sizeof page);
  dsk_kv_write_desc d = wdesc(DSK_KV_FORMAT_B584, 1, lat, 448, rope, 64, &slot, page, 1, 592, 2, DSK_SCALE_POW2, NULL);
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
  TU_CHECK(c, page[576] == 119, "B scale byte %d, want 119", page[576]);
  TU_CHECK(c, page[0] == 0x78 && page[1] == 0xEC && page[2] == 0x40, "B codes %02X %02X %02X, want 78 EC 40", page[0],
           page[1], page[2]);
  TU_CHECK(c, page[583] == 0, "B pad byte %d", page[583]);
  TU_CHECK(c, page[584] == 0xFF && page[591] == 0xFF && page[592] == 0xFF, "B page padding untouched");
  /* reader: 1.0, -0.375, and the tie 2.125 -> 2.0, times 2^-8 */
  float out[512];
  dsk_kv_read_desc r = rdesc(DSK_KV_FORMAT_B584, 1, &slot, page, 1, 592, 2, out, 512, NULL);
  TU_CHECK_OK(c, dsk_kv_read(ctx, &r));
  TU_CHECK(c, out[0] == 1.0f && out[1] == -0.375f && out[2] == 0.0078125f, "B decode %g %g %g", out[0], out[1], out[2]);
  TU_CHECK(c, f2u(out[448]) == (uint32_t)rope[0] << 16 && f2u(out[511]) == (uint32_t)rope[63] << 16, "B rope decode");

  /* Format A, POW2 and RAW */
  memset(page, 0xFF, sizeof page);
  d = wdesc(DSK_KV_FORMAT_A656, 1, lat, 512, rope, 64, &slot, page, 1, 656, 1, DSK_SCALE_POW2, NULL);
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
  TU_CHECK(c, get_u32(page + 512) == 0x3B800000u, "A POW2 scale 0x%08X, want 0x3B800000", get_u32(page + 512));
  TU_CHECK(c, page[0] == 0x78 && page[1] == 0xEC && page[2] == 0x40, "A POW2 codes %02X %02X %02X", page[0], page[1],
           page[2]);
  memset(page, 0xFF, sizeof page);
  d.scale_rule = DSK_SCALE_RAW;
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
  TU_CHECK(c, get_u32(page + 512) == 0x3B124925u, "A RAW scale 0x%08X, want 0x3B124925", get_u32(page + 512));
  TU_CHECK(c, page[0] == 0x7E, "A RAW 1.0 -> 0x%02X, want 0x7E", page[0]);
  TU_CHECK(c, 1.0f / u2f(0x3B124925u) == 447.99997f, "1/s = 447.99997");
  /* tiles 1..3 hold 0.25/-0.5: amax 0.5 */
  TU_CHECK(c, get_f32(page + 516) == 0.5f / 448.0f, "A RAW tile 1 scale");
  /* reader multiplies by the stored fp32 scale as it is */
  float outa[576];
  r = rdesc(DSK_KV_FORMAT_A656, 1, &slot, page, 1, 656, 1, outa, 576, NULL);
  TU_CHECK_OK(c, dsk_kv_read(ctx, &r));
  TU_CHECK(c, outa[0] == 448.0f * u2f(0x3B124925u), "A RAW decode %.9g", outa[0]);
}

/* ------------------------------------------------- hand-made byte images */
static void test_hand_images(dsk_ctx *ctx) {
  tu_counts *c = &g_c;
  /* Format B: pbs 2, 2 pages, stride 1168 + 32; slots 3 (page 1, j 1) and 0 */
  {
    enum { PS = 1200, NP = 2 };
    static uint8_t cache[PS * NP], exp[PS * NP];
    uint16_t lat[2][448], rope[2][64];
    hand_row(lat[0], 448, 64, 1);
    hand_row(lat[1], 448, 64, -1);
    for (int i = 0; i < 64; i++) {
      rope[0][i] = (uint16_t)(0x1000 + 0x0101 * i);
      rope[1][i] = (uint16_t)(0xA000 + i);
    }
    rope[0][5] = 0x7FC1; /* NaN, -inf, negative subnormal: copied as bits */
    rope[0][6] = 0xFF80;
    rope[0][7] = 0x8001;
    int32_t slots[2] = {3, 0};
    memset(cache, 0xFF, sizeof cache);
    memset(exp, 0xFF, sizeof exp);
    dsk_kv_write_desc d = wdesc(DSK_KV_FORMAT_B584, 2, &lat[0][0], 448, &rope[0][0], 64, slots, cache, 2, PS, NP,
                                DSK_SCALE_POW2, NULL);
    TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
    /* by hand: token at page p, j: data p*1200 + 576*j, footer p*1200 + 1152 + 8*j */
    const int pj[2][2] = {{1, 1}, {0, 0}};
    for (int n = 0; n < 2; n++) {
      int sg = n == 0 ? 1 : -1;
      uint8_t *data = exp + pj[n][0] * PS + 576 * pj[n][1];
      uint8_t *foot = exp + pj[n][0] * PS + 1152 + 8 * pj[n][1];
      for (int dd = 0; dd < 448; dd++) data[dd] = hand_code(dd % 64, sg);
      for (int i = 0; i < 64; i++) {
        data[448 + 2 * i] = (uint8_t)(rope[n][i] & 0xFF);
        data[449 + 2 * i] = (uint8_t)(rope[n][i] >> 8);
      }
      for (int t = 0; t < 7; t++) foot[t] = (uint8_t)(117 + t);
      foot[7] = 0;
    }
    int64_t fd = first_diff(cache, exp, sizeof cache);
    TU_CHECK(c, fd < 0, "B hand image: byte %lld is 0x%02X, want 0x%02X", (long long)fd, fd >= 0 ? cache[fd] : 0,
             fd >= 0 ? exp[fd] : 0);
  }
  /* Format A: pbs 1, 3 pages, stride 656 + 48; slots 2 and 0 */
  {
    enum { PS = 704, NP = 3 };
    static uint8_t cache[PS * NP], exp[PS * NP];
    uint16_t lat[2][512], rope[2][64];
    hand_row(lat[0], 512, 128, -1);
    hand_row(lat[1], 512, 128, 1);
    for (int i = 0; i < 64; i++) {
      rope[0][i] = (uint16_t)(0x4000 + 7 * i);
      rope[1][i] = (uint16_t)(0xC123 - i);
    }
    int32_t slots[2] = {2, 0};
    memset(cache, 0xFF, sizeof cache);
    memset(exp, 0xFF, sizeof exp);
    dsk_kv_write_desc d = wdesc(DSK_KV_FORMAT_A656, 2, &lat[0][0], 512, &rope[0][0], 64, slots, cache, 1, PS, NP,
                                DSK_SCALE_POW2, NULL);
    TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
    for (int n = 0; n < 2; n++) {
      int sg = n == 0 ? -1 : 1;
      uint8_t *rec = exp + slots[n] * PS;
      for (int dd = 0; dd < 512; dd++) rec[dd] = hand_code(dd % 128, sg);
      for (int t = 0; t < 4; t++) { /* 2^(t-10) = fp32 bits (117 + t) << 23, little-endian */
        uint32_t b = (uint32_t)(117 + t) << 23;
        rec[512 + 4 * t] = 0;
        rec[513 + 4 * t] = 0;
        rec[514 + 4 * t] = (uint8_t)(b >> 16);
        rec[515 + 4 * t] = (uint8_t)(b >> 24);
      }
      for (int i = 0; i < 64; i++) {
        rec[528 + 2 * i] = (uint8_t)(rope[n][i] & 0xFF);
        rec[529 + 2 * i] = (uint8_t)(rope[n][i] >> 8);
      }
    }
    int64_t fd = first_diff(cache, exp, sizeof cache);
    TU_CHECK(c, fd < 0, "A hand image: byte %lld is 0x%02X, want 0x%02X", (long long)fd, fd >= 0 ? cache[fd] : 0,
             fd >= 0 ? exp[fd] : 0);
  }
  /* indexer keys: pbs 3, 2 pages, stride 396 + 4; slots 4 (page 1, j 1) and 2; rope ignored (NULL) */
  {
    enum { PS = 400, NP = 2 };
    static uint8_t cache[PS * NP], exp[PS * NP];
    uint16_t lat[2][128];
    hand_row(lat[0], 128, 128, 1);
    hand_row(lat[1], 128, 128, -1);
    int32_t slots[2] = {4, 2};
    memset(cache, 0xFF, sizeof cache);
    memset(exp, 0xFF, sizeof exp);
    dsk_kv_write_desc d =
        wdesc(DSK_KV_FORMAT_IDXK132, 2, &lat[0][0], 128, NULL, 0, slots, cache, 3, PS, NP, DSK_SCALE_POW2, NULL);
    TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
    const int pj[2][2] = {{1, 1}, {0, 2}};
    for (int n = 0; n < 2; n++) {
      uint8_t *q = exp + pj[n][0] * PS + 128 * pj[n][1];
      uint8_t *s = exp + pj[n][0] * PS + 384 + 4 * pj[n][1];
      for (int dd = 0; dd < 128; dd++) q[dd] = hand_code(dd, n == 0 ? 1 : -1);
      s[0] = 0x00, s[1] = 0x00, s[2] = 0x80, s[3] = 0x3A; /* 2^-10 = 0x3A800000 */
    }
    int64_t fd = first_diff(cache, exp, sizeof cache);
    TU_CHECK(c, fd < 0, "IDX hand image: byte %lld is 0x%02X, want 0x%02X", (long long)fd, fd >= 0 ? cache[fd] : 0,
             fd >= 0 ? exp[fd] : 0);
    /* RAW: s = 0.375 / 448 in fp32 */
    memset(cache, 0xFF, sizeof cache);
    d.scale_rule = DSK_SCALE_RAW;
    TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
    TU_CHECK(c, get_f32(cache + PS + 384 + 4) == 0.375f / 448.0f, "IDX RAW scale %.9g", get_f32(cache + PS + 388));
    TU_CHECK(c, cache[PS + 128 + 1] == 0x7E, "IDX RAW 1.5*0.25 -> 448 (0x%02X)", cache[PS + 129]);
  }
}

/* --------------------------------------- random caches, pages and strides */
typedef struct rcase {
  dsk_kv_format f;
  dsk_scale_rule rule;
  int64_t pbs, np, ps;
} rcase;

/* Latent row: per tile a kind (normal * 2^u, zeros, tiny, large, ties,
 * non-finite); returns nothing, the model decides the bytes. */
static void fill_row(tu_rng *r, uint16_t *lat, int n, int T, double p_nonfinite) {
  for (int t = 0; t < n / T; t++) {
    uint16_t *x = lat + t * T;
    int kind = (int)tu_int(r, 0, 19);
    double u = ldexp(1.0, (int)tu_int(r, -8, 8));
    for (int i = 0; i < T; i++) {
      double v;
      switch (kind) {
        case 0: v = (i & 1) ? -0.0 : 0.0; break;                 /* zeros, both signs */
        case 1: v = tu_normal(r) * 1e-7; break;                  /* below the 1e-4 floor */
        case 2: v = tu_normal(r) * 3e4; break;                   /* large */
        case 3: v = (double)tu_int(r, -64, 64) * 0.0625 * u; break; /* many exact ties */
        case 4: v = tu_normal(r) * 1e-38; break;                 /* bf16 subnormals */
        default: v = tu_normal(r) * u; break;
      }
      x[i] = dsk_bf16_from_f32((float)v);
    }
    if (tu_uniform(r) < p_nonfinite) {
      static const uint16_t nf[4] = {0x7FC0, 0xFF80, 0x7F80, 0xFFC1};
      x[tu_int(r, 0, T - 1)] = nf[tu_int(r, 0, 3)];
    }
  }
}

static int run_random_case(dsk_ctx *ctx, const rcase *rc, tu_rng *r, int verbose) {
  tu_counts *c = &g_c;
  int fails0 = c->failed;
  const dsk_kv_format f = rc->f;
  const int64_t pbs = rc->pbs, np = rc->np, ps = rc->ps, cap = pbs * np, bytes = np * ps;
  const int L = (int)lat_dim(f), T = tile_of(f), D = (int)out_dim(f);
  /* tokens into a random page order, then the rows shuffled, plus junk rows */
  int64_t *perm = (int64_t *)malloc(sizeof(int64_t) * (size_t)np);
  tu_permutation(r, perm, np);
  int64_t ntok = tu_int(r, 1, cap * 3 / 4 + 1);
  if (ntok > 600) ntok = 600;
  int64_t njunk = tu_int(r, 0, 6), N = ntok + njunk;
  int32_t *slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)N);
  for (int64_t k = 0; k < ntok; k++) slots[k] = (int32_t)(perm[k / pbs] * pbs + k % pbs);
  int64_t want_skipped = 0;
  for (int64_t k = ntok; k < N; k++) {
    switch (tu_int(r, 0, 3)) {
      case 0: slots[k] = -1; break;
      case 1: slots[k] = (int32_t)-tu_int(r, 2, 1000); break;
      case 2: slots[k] = (int32_t)cap, want_skipped++; break;
      default: slots[k] = (int32_t)tu_int(r, cap, cap + 100000), want_skipped++; break;
    }
  }
  for (int64_t k = N - 1; k > 0; k--) { /* shuffle rows */
    int64_t j = tu_int(r, 0, k);
    int32_t tmp = slots[k];
    slots[k] = slots[j];
    slots[j] = tmp;
  }
  int64_t ls = L + tu_int(r, 0, 9), rs = 64 + tu_int(r, 0, 5);
  uint16_t *lat = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(N * ls));
  uint16_t *rope = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(N * rs));
  for (int64_t n = 0; n < N; n++) {
    fill_row(r, lat + n * ls, L, T, 0.03);
    for (int64_t i = 0; i < rs; i++) rope[n * rs + i] = (uint16_t)tu_next(r); /* any bits, NaNs included */
  }
  uint8_t *cache = (uint8_t *)malloc((size_t)bytes), *exp = (uint8_t *)malloc((size_t)bytes);
  memset(cache, 0xFF, (size_t)bytes);
  memset(exp, 0xFF, (size_t)bytes);
  int64_t want_nonfinite = 0;
  for (int64_t n = 0; n < N; n++)
    if (slots[n] >= 0 && slots[n] < cap)
      want_nonfinite += model_write(f, rc->rule, lat + n * ls, rope + n * rs, exp, slots[n], pbs, ps);

  int64_t counters[2] = {100, 200};
  dsk_kv_write_desc d = wdesc(f, N, lat, ls, f == DSK_KV_FORMAT_IDXK132 ? NULL : rope, rs, slots, cache, pbs, ps, np,
                              rc->rule, counters);
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
  int64_t fd = first_diff(cache, exp, bytes);
  TU_CHECK(c, fd < 0, "%s pbs %lld ps %lld: byte %lld (page %lld, +%lld) is 0x%02X, want 0x%02X", fname(f),
           (long long)pbs, (long long)ps, (long long)fd, (long long)(fd / ps), (long long)(fd % ps),
           fd >= 0 ? cache[fd] : 0, fd >= 0 ? exp[fd] : 0);
  TU_CHECK(c, counters[0] == 100 + want_skipped && counters[1] == 200 + want_nonfinite,
           "%s write counters %lld %lld, want %lld %lld", fname(f), (long long)counters[0], (long long)counters[1],
           (long long)(100 + want_skipped), (long long)(200 + want_nonfinite));

  /* read back every row (written, negative and out-of-range slots) plus a few
   * never-written slots (poison decodes to NaN), into a padded output */
  int64_t nr = N + 4, os = D + tu_int(r, 0, 3);
  int32_t *rslots = (int32_t *)malloc(sizeof(int32_t) * (size_t)nr);
  memcpy(rslots, slots, sizeof(int32_t) * (size_t)N);
  for (int64_t k = N; k < nr; k++) rslots[k] = (int32_t)tu_int(r, 0, cap - 1);
  float *out = (float *)malloc(sizeof(float) * (size_t)(nr * os));
  const float sentinel = 12345.5f;
  for (int64_t i = 0; i < nr * os; i++) out[i] = sentinel;
  int64_t rc2[2] = {7, 9};
  dsk_kv_read_desc rd = rdesc(f, nr, rslots, cache, pbs, ps, np, out, os, rc2);
  TU_CHECK_OK(c, dsk_kv_read(ctx, &rd));
  int64_t want_invalid = 0, bad_exact = 0, bad_bound = 0, bad_nan = 0, bad_pad = 0;
  double worst = 0;
  float *mo = (float *)malloc(sizeof(float) * (size_t)D);
  for (int64_t n = 0; n < nr; n++) {
    const float *o = out + n * os;
    for (int64_t i = D; i < os; i++) bad_pad += o[i] != sentinel;
    int64_t s = rslots[n];
    if (s < 0 || s >= cap) {
      want_invalid++;
      for (int i = 0; i < D; i++) bad_nan += !isnan(o[i]);
      continue;
    }
    model_read(f, exp, s, pbs, ps, mo);
    for (int i = 0; i < D; i++) bad_exact += !same_f32(o[i], mo[i]);
    if (n >= N) continue;
    /* round trip: the quantisation bound for finite tiles, rope exact */
    const uint16_t *x = lat + n * ls;
    for (int t = 0; t < L / T; t++) {
      int finite = 1;
      for (int i = 0; i < T; i++) finite &= isfinite(bf(x[t * T + i])) != 0;
      float scale;
      if (f == DSK_KV_FORMAT_B584) scale = ldexpf(1.0f, (int)*(exp + off_scale(f, s, pbs, ps) + t) - 127);
      else scale = get_f32(exp + off_scale(f, s, pbs, ps) + (f == DSK_KV_FORMAT_A656 ? 4 * t : 0));
      for (int i = 0; i < T; i++) {
        double xv = bf(x[t * T + i]), ov = o[t * T + i];
        if (!finite) {
          bad_nan += !isnan(ov);
          continue;
        }
        /* |x/s - q| <= half an e4m3 step: max(|x/s| * 2^-4, 2^-10) (no
         * saturation: |x/s| <= 448 up to the division's rounding), plus
         * fp32 rounding of x/s and of q*s */
        double bound = fmax(fabs(xv) / 16.0, (double)scale / 1024.0) + (fabs(xv) + fabs(ov)) * ldexp(1.0, -22);
        double e = fabs(xv - ov);
        if (!(e <= bound)) bad_bound++;
        if (fabs(xv) > 0 && e / fabs(xv) > worst && fabs(xv) / scale >= 0.015625) worst = e / fabs(xv);
      }
    }
    if (f != DSK_KV_FORMAT_IDXK132)
      for (int i = 0; i < 64; i++) bad_exact += f2u(o[L + i]) != (uint32_t)rope[n * rs + i] << 16;
  }
  TU_CHECK(c, bad_exact == 0, "%s reader != spec decode at %lld values", fname(f), (long long)bad_exact);
  TU_CHECK(c, bad_bound == 0, "%s round trip outside the e4m3 bound at %lld values", fname(f), (long long)bad_bound);
  TU_CHECK(c, bad_nan == 0, "%s %lld values should be NaN (invalid slot or NaN tile)", fname(f), (long long)bad_nan);
  TU_CHECK(c, bad_pad == 0, "%s reader wrote %lld values past dim", fname(f), (long long)bad_pad);
  TU_CHECK(c, rc2[0] == 7 + want_invalid && rc2[1] == 9, "%s read counters %lld %lld, want %lld 9", fname(f),
           (long long)rc2[0], (long long)rc2[1], (long long)(7 + want_invalid));
  if (verbose)
    printf("kv %-7s %s pbs %3lld pages %lld stride %6lld (min+%lld): N %3lld (skip %lld, nonfinite tiles %lld), "
           "read %lld (invalid %lld), worst rel err %.4f %s\n",
           fname(f), f == DSK_KV_FORMAT_B584 ? "    " : rc->rule == DSK_SCALE_RAW ? "RAW " : "POW2", (long long)pbs,
           (long long)np, (long long)ps, (long long)(ps - pbs * ent_bytes(f)), (long long)N, (long long)want_skipped,
           (long long)want_nonfinite, (long long)nr, (long long)want_invalid, worst,
           c->failed == fails0 ? "ok" : "FAIL");
  free(perm);
  free(slots);
  free(lat);
  free(rope);
  free(cache);
  free(exp);
  free(rslots);
  free(out);
  free(mo);
  return c->failed == fails0;
}

static void test_random_caches(dsk_ctx *ctx) {
  tu_rng r = tu_rng_make(0xCAC4E);
  static const int64_t pbss[] = {1, 2, 3, 61, 64, 256};
  const struct { dsk_kv_format f; dsk_scale_rule rule; } fr[] = {
      {DSK_KV_FORMAT_A656, DSK_SCALE_POW2}, {DSK_KV_FORMAT_A656, DSK_SCALE_RAW}, {DSK_KV_FORMAT_B584, DSK_SCALE_POW2},
      {DSK_KV_FORMAT_IDXK132, DSK_SCALE_POW2}, {DSK_KV_FORMAT_IDXK132, DSK_SCALE_RAW}};
  for (size_t k = 0; k < sizeof fr / sizeof fr[0]; k++)
    for (size_t i = 0; i < sizeof pbss / sizeof pbss[0]; i++)
      for (int rep = 0; rep < 2; rep++) {
        rcase rc;
        rc.f = fr[k].f;
        rc.rule = fr[k].rule;
        rc.pbs = pbss[i];
        rc.np = tu_int(&r, 1, pbss[i] >= 64 ? 5 : 40);
        int64_t min = rc.pbs * ent_bytes(rc.f);
        /* minimum, else minimum + a random multiple of 16 (canonical for B on rep 1) */
        rc.ps = rep == 0 ? min + 16 * tu_int(&r, 0, 8)
                         : (rc.f == DSK_KV_FORMAT_B584 ? dsk_kv_canonical_page_stride(rc.f, rc.pbs) : min);
        run_random_case(ctx, &rc, &r, 1);
      }
}

/* --------------------------------------------- N = 0, slots, duplicates */
static void test_edge_cases(void) {
  tu_counts *c = &g_c;
  dsk_ctx *ctx = tu_ctx("cpu");
  if (!ctx) {
    TU_CHECK(c, 0, "cpu context");
    return;
  }
  /* N = 0: no-op, even with every pointer NULL; cache untouched */
  uint8_t page[656 * 2];
  memset(page, 0xFF, sizeof page);
  int64_t counters[2] = {0, 0};
  dsk_kv_write_desc d = wdesc(DSK_KV_FORMAT_A656, 0, NULL, 0, NULL, 0, NULL, NULL, 0, 0, 0, DSK_SCALE_POW2, NULL);
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
  dsk_kv_read_desc rd = rdesc(DSK_KV_FORMAT_B584, 0, NULL, NULL, 0, 0, 0, NULL, 0, NULL);
  TU_CHECK_OK(c, dsk_kv_read(ctx, &rd));
  uint16_t lat[4][512], rope[4][64];
  for (int n = 0; n < 4; n++) {
    hand_row(lat[n], 512, 128, n % 2 ? -1 : 1);
    for (int i = 0; i < 64; i++) rope[n][i] = (uint16_t)(n * 100 + i);
  }
  int32_t slots[4] = {0, 1, 2, 3};
  d = wdesc(DSK_KV_FORMAT_A656, 0, &lat[0][0], 512, &rope[0][0], 64, slots, page, 1, 656, 2, DSK_SCALE_POW2, counters);
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
  int untouched = 1;
  for (size_t i = 0; i < sizeof page; i++) untouched &= page[i] == 0xFF;
  TU_CHECK(c, untouched && counters[0] == 0 && counters[1] == 0, "N = 0 wrote something");

  /* only negative and out-of-range slots: nothing written, out-of-range counted */
  int32_t junk[4] = {-1, 2, -100, INT32_MAX};
  d = wdesc(DSK_KV_FORMAT_A656, 4, &lat[0][0], 512, &rope[0][0], 64, junk, page, 1, 656, 2, DSK_SCALE_POW2, counters);
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
  for (size_t i = 0; i < sizeof page; i++) untouched &= page[i] == 0xFF;
  TU_CHECK(c, untouched && counters[0] == 2 && counters[1] == 0, "junk slots: counters %lld %lld",
           (long long)counters[0], (long long)counters[1]);
  /* counters are optional */
  d.counters = NULL;
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));

  /* a tile with NaN, one with +inf, one with -inf: poison, counted; rope exact */
  lat[0][5] = 0x7FC0;
  lat[0][128 + 127] = 0x7F80;
  lat[0][384] = 0xFF80;
  int32_t s1 = 1;
  counters[0] = counters[1] = 0;
  d = wdesc(DSK_KV_FORMAT_A656, 1, &lat[0][0], 512, &rope[0][0], 64, &s1, page, 1, 656, 2, DSK_SCALE_POW2, counters);
  TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
  const uint8_t *rec = page + 656;
  int poison = 1;
  for (int i = 0; i < 512; i++)
    if (i / 128 != 2) poison &= rec[i] == 0x7F;
  TU_CHECK(c, poison && get_f32(rec + 512) == 1.0f && get_f32(rec + 516) == 1.0f && get_f32(rec + 524) == 1.0f,
           "A non-finite tiles: 0x7F bytes, scale 1.0");
  TU_CHECK(c, rec[256] == 0x78 && get_f32(rec + 520) == ldexpf(1.0f, -8), "A finite tile 2 unaffected");
  TU_CHECK(c, counters[0] == 0 && counters[1] == 3, "A non-finite counters %lld %lld", (long long)counters[0],
           (long long)counters[1]);
  float out[2][576];
  int32_t rs[2] = {1, -1};
  counters[0] = counters[1] = 0;
  rd = rdesc(DSK_KV_FORMAT_A656, 2, rs, page, 1, 656, 2, &out[0][0], 576, counters);
  TU_CHECK_OK(c, dsk_kv_read(ctx, &rd));
  int nan_ok = 1;
  for (int i = 0; i < 576; i++) {
    nan_ok &= (i < 512 && i / 128 != 2) ? isnan(out[0][i]) != 0 : !isnan(out[0][i]);
    nan_ok &= isnan(out[1][i]) != 0;
  }
  TU_CHECK(c, nan_ok && counters[0] == 1, "A reader: NaN tiles, NaN row for slot -1, counters %lld",
           (long long)counters[0]);

  /* Format B: a NaN tile stores byte 127; a cache byte 0 or 255 decodes to 0 / NaN */
  {
    uint8_t pb[584];
    uint16_t lb[448];
    hand_row(lb, 448, 64, 1);
    lb[64 * 3 + 10] = 0xFFC0;
    int32_t s0 = 0;
    counters[0] = counters[1] = 0;
    memset(pb, 0xFF, sizeof pb);
    d = wdesc(DSK_KV_FORMAT_B584, 1, lb, 448, rope[0], 64, &s0, pb, 1, 584, 1, DSK_SCALE_POW2, counters);
    TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
    TU_CHECK(c, pb[576 + 3] == 127 && pb[64 * 3] == 0x7F && pb[64 * 3 + 63] == 0x7F && counters[1] == 1,
             "B NaN tile: scale byte %d", pb[576 + 3]);
    pb[576 + 0] = 0;   /* e = 0 -> 0.0 */
    pb[576 + 1] = 255; /* e = 255 -> NaN */
    float ob[512];
    rd = rdesc(DSK_KV_FORMAT_B584, 1, &s0, pb, 1, 584, 1, ob, 512, NULL);
    TU_CHECK_OK(c, dsk_kv_read(ctx, &rd));
    TU_CHECK(c, ob[0] == 0.0f && ob[63] == 0.0f && isnan(ob[64]) && isnan(ob[127]) && ob[128] == 1.0f,
             "B decode of scale bytes 0 and 255: %g %g %g", ob[0], ob[64], ob[128]);
  }

  /* duplicates: cpu-ref lets the last row win, for any thread count */
  for (int th = 1; th <= 4; th += 3) {
    dsk_ctx_opts o;
    dsk_ctx_opts_init(&o);
    o.device = "cpu";
    o.num_threads = th;
    dsk_ctx *tc = NULL;
    TU_CHECK_OK(c, dsk_ctx_create(&tc, &o));
    if (!tc) continue;
    enum { NR = 200 };
    static uint16_t lr[NR][448], rr[NR][64];
    static int32_t sl[NR];
    static uint8_t pg[584 * 16], ex[584 * 16];
    for (int n = 0; n < NR; n++) {
      hand_row(lr[n], 448, 64, n % 2 ? 1 : -1);
      for (int i = 0; i < 64; i++) rr[n][i] = (uint16_t)(n * 64 + i);
      sl[n] = n % 16;
    }
    memset(pg, 0xFF, sizeof pg);
    memset(ex, 0xFF, sizeof ex);
    for (int n = 0; n < NR; n++) model_write(DSK_KV_FORMAT_B584, DSK_SCALE_POW2, lr[n], rr[n], ex, sl[n], 16, 584 * 16);
    d = wdesc(DSK_KV_FORMAT_B584, NR, &lr[0][0], 448, &rr[0][0], 64, sl, pg, 16, 584 * 16, 1, DSK_SCALE_POW2, NULL);
    TU_CHECK_OK(c, dsk_kv_write(tc, &d));
    TU_CHECK(c, memcmp(pg, ex, sizeof pg) == 0, "duplicate slots, %d threads: last row should win", th);
    dsk_ctx_destroy(tc);
  }
  dsk_ctx_destroy(ctx);
}

/* thread count never changes bytes, outputs or counters */
static void test_threads(void) {
  tu_counts *c = &g_c;
  tu_rng r = tu_rng_make(77);
  enum { PBS = 64, NP = 8, N = 600 };
  const int64_t ps = PBS * 656 + 32;
  uint16_t *lat = (uint16_t *)malloc(sizeof(uint16_t) * N * 512);
  uint16_t *rope = (uint16_t *)malloc(sizeof(uint16_t) * N * 64);
  int32_t *sl = (int32_t *)malloc(sizeof(int32_t) * N);
  for (int n = 0; n < N; n++) {
    fill_row(&r, lat + n * 512, 512, 128, 0.05);
    for (int i = 0; i < 64; i++) rope[n * 64 + i] = (uint16_t)tu_next(&r);
    sl[n] = (int32_t)tu_int(&r, -3, PBS * NP + 20); /* duplicates, junk */
  }
  uint8_t *cache[2];
  float *out[2];
  int64_t cnt[2][4];
  for (int k = 0; k < 2; k++) {
    dsk_ctx_opts o;
    dsk_ctx_opts_init(&o);
    o.device = "cpu";
    o.num_threads = k == 0 ? 1 : 5;
    dsk_ctx *tc = NULL;
    TU_CHECK_OK(c, dsk_ctx_create(&tc, &o));
    cache[k] = (uint8_t *)malloc((size_t)(ps * NP));
    out[k] = (float *)malloc(sizeof(float) * N * 576);
    memset(cache[k], 0xFF, (size_t)(ps * NP));
    memset(cnt[k], 0, sizeof cnt[k]);
    if (!tc) continue;
    dsk_kv_write_desc d = wdesc(DSK_KV_FORMAT_A656, N, lat, 512, rope, 64, sl, cache[k], PBS, ps, NP, DSK_SCALE_RAW, cnt[k]);
    TU_CHECK_OK(c, dsk_kv_write(tc, &d));
    dsk_kv_read_desc rd = rdesc(DSK_KV_FORMAT_A656, N, sl, cache[k], PBS, ps, NP, out[k], 576, cnt[k] + 2);
    TU_CHECK_OK(c, dsk_kv_read(tc, &rd));
    dsk_ctx_destroy(tc);
  }
  TU_CHECK(c, memcmp(cache[0], cache[1], (size_t)(ps * NP)) == 0, "1 vs 5 threads: cache bytes differ");
  TU_CHECK(c, memcmp(out[0], out[1], sizeof(float) * N * 576) == 0, "1 vs 5 threads: reader output differs");
  TU_CHECK(c, memcmp(cnt[0], cnt[1], sizeof cnt[0]) == 0 && cnt[0][0] > 0 && cnt[0][1] > 0 && cnt[0][2] > 0,
           "1 vs 5 threads: counters %lld %lld %lld vs %lld %lld %lld", (long long)cnt[0][0], (long long)cnt[0][1],
           (long long)cnt[0][2], (long long)cnt[1][0], (long long)cnt[1][1], (long long)cnt[1][2]);
  for (int k = 0; k < 2; k++) free(cache[k]), free(out[k]);
  free(lat);
  free(rope);
  free(sl);
}

/* ---------------------------------------------------------- bad input */
typedef struct bad_case {
  const char *field; /* must appear in dsk_last_error() */
  int which;
} bad_case;

static void expect_bad(dsk_status st, const char *what, const char *field, const uint8_t *cache, size_t bytes) {
  tu_counts *c = &g_c;
  TU_CHECK(c, st == DSK_STATUS_INVALID_ARG, "%s: %s, want DSK_STATUS_INVALID_ARG", what, dsk_status_name(st));
  TU_CHECK(c, strstr(dsk_last_error(), field) != NULL, "%s: error text \"%s\" does not name %s", what, dsk_last_error(),
           field);
  int untouched = 1;
  for (size_t i = 0; cache && i < bytes; i++) untouched &= cache[i] == 0xFF;
  TU_CHECK(c, untouched, "%s: a rejected call wrote to the cache", what);
}

static void test_bad_input(dsk_ctx *ctx) {
  tu_counts *c = &g_c;
  static uint16_t lat[2 * 512], rope[2 * 64];
  static int32_t slots[2] = {0, 1};
  static uint8_t cache[656 * 4 + 64];
  static float out[2 * 576];
  int64_t counters[2];
  memset(cache, 0xFF, sizeof cache);
  const dsk_kv_format fmts[3] = {DSK_KV_FORMAT_A656, DSK_KV_FORMAT_B584, DSK_KV_FORMAT_IDXK132};
  int n_cases = 0;
  for (int fi = 0; fi < 3; fi++) {
    dsk_kv_format f = fmts[fi];
    int64_t L = lat_dim(f), D = out_dim(f), min = 2 * ent_bytes(f);
    const dsk_kv_write_desc good =
        wdesc(f, 2, lat, L, rope, 64, slots, cache, 2, min, 1, DSK_SCALE_POW2, counters);
    TU_CHECK_OK(c, dsk__kv_write_validate(ctx, &good));
    static const char *const wf[] = {"struct_size", "struct_size", "format", "format", "format", "N", "latent",
                                     "latent", "latent_stride", "latent_stride", "rope", "rope", "rope_stride",
                                     "slot_mapping", "slot_mapping", "scale_rule", "scale_rule", "base", "pbs",
                                     "pbs", "num_pages", "num_pages", "page_stride", "page_stride", "page_stride",
                                     "num_pages", "pbs", "counters", "N"};
    for (int k = 0; k < (int)(sizeof wf / sizeof wf[0]); k++) {
      dsk_kv_write_desc d = good;
      switch (k) {
        case 0: d.struct_size = sizeof d - 1; break;
        case 1: d.struct_size = 0; break;
        case 2: d.format = (dsk_kv_format)0; break;
        case 3: d.format = (dsk_kv_format)4; break;
        case 4: d.format = (dsk_kv_format)-1; break;
        case 5: d.N = -1; break;
        case 6: d.latent = NULL; break;
        case 7: d.latent = (const uint16_t *)((const char *)lat + 1); break;
        case 8: d.latent_stride = L - 1; break;
        case 9: d.latent_stride = -5; break;
        case 10: d.rope = NULL; break;
        case 11: d.rope = (const uint16_t *)((const char *)rope + 1); break;
        case 12: d.rope_stride = 63; break;
        case 13: d.slot_mapping = NULL; break;
        case 14: d.slot_mapping = (const int32_t *)((const char *)slots + 2); break;
        case 15: d.scale_rule = (dsk_scale_rule)2; break;
        case 16: d.scale_rule = (dsk_scale_rule)-1; break;
        case 17: d.cache.base = NULL; break;
        case 18: d.cache.pbs = 0; break;
        case 19: d.cache.pbs = -4; break;
        case 20: d.cache.num_pages = 0; break;
        case 21: d.cache.num_pages = -1; break;
        case 22: d.cache.page_stride = min - 1; break;
        case 23: d.cache.page_stride = 0; break;
        case 24: d.cache.page_stride = -16; break;
        case 25: d.cache.num_pages = INT64_MAX / 100; break; /* pages * stride overflows */
        case 26: d.cache.pbs = INT64_MAX / 100; d.cache.page_stride = INT64_MAX; break;
        case 27: d.counters = (int64_t *)((char *)counters + 4); break;
        case 28: d.N = INT64_MAX; d.latent_stride = 1 << 20; break; /* rows overflow */
      }
      if (f == DSK_KV_FORMAT_IDXK132 && (k >= 10 && k <= 12)) {
        /* the indexer format ignores rope */
        TU_CHECK_OK(c, dsk_kv_write(ctx, &d));
        memset(cache, 0xFF, sizeof cache);
        continue;
      }
      char what[96];
      snprintf(what, sizeof what, "kv_write %s case %d (%s)", fname(f), k, wf[k]);
      expect_bad(dsk_kv_write(ctx, &d), what, wf[k], cache, sizeof cache);
      int sup = 1;
      char reason[256];
      TU_CHECK_OK(c, dsk_op_supported(ctx, DSK_OP_KV_WRITE, &d, &sup, reason, sizeof reason));
      TU_CHECK(c, sup == 0 && strstr(reason, wf[k]), "%s: dsk_op_supported says %d (%s)", what, sup, reason);
      n_cases++;
    }
    expect_bad(dsk_kv_write(NULL, &good), "kv_write ctx NULL", "ctx", cache, sizeof cache);
    expect_bad(dsk_kv_write(ctx, NULL), "kv_write desc NULL", "desc", cache, sizeof cache);
    int sup = 0;
    char reason[256];
    TU_CHECK_OK(c, dsk_op_supported(ctx, DSK_OP_KV_WRITE, &good, &sup, reason, sizeof reason));
    TU_CHECK(c, sup == 1, "good kv_write desc not supported: %s", reason);

    const dsk_kv_read_desc rgood = rdesc(f, 2, slots, cache, 2, min, 1, out, D, counters);
    TU_CHECK_OK(c, dsk__kv_read_validate(ctx, &rgood));
    static const char *const rf[] = {"struct_size", "format", "format", "N", "slots", "slots", "out", "out",
                                     "out_stride", "base", "pbs", "num_pages", "page_stride", "counters", "num_pages"};
    for (int k = 0; k < (int)(sizeof rf / sizeof rf[0]); k++) {
      dsk_kv_read_desc d = rgood;
      switch (k) {
        case 0: d.struct_size = sizeof d - 8; break;
        case 1: d.format = (dsk_kv_format)0; break;
        case 2: d.format = (dsk_kv_format)77; break;
        case 3: d.N = -3; break;
        case 4: d.slots = NULL; break;
        case 5: d.slots = (const int32_t *)((const char *)slots + 1); break;
        case 6: d.out = NULL; break;
        case 7: d.out = (float *)((char *)out + 2); break;
        case 8: d.out_stride = D - 1; break;
        case 9: d.cache.base = NULL; break;
        case 10: d.cache.pbs = 0; break;
        case 11: d.cache.num_pages = 0; break;
        case 12: d.cache.page_stride = min - 16; break;
        case 13: d.counters = (int64_t *)((char *)counters + 1); break;
        case 14: d.cache.num_pages = INT64_MAX / 2; break;
      }
      char what[96];
      snprintf(what, sizeof what, "kv_read %s case %d (%s)", fname(f), k, rf[k]);
      expect_bad(dsk_kv_read(ctx, &d), what, rf[k], NULL, 0);
      n_cases++;
    }
    expect_bad(dsk_kv_read(NULL, &rgood), "kv_read ctx NULL", "ctx", NULL, 0);
    expect_bad(dsk_kv_read(ctx, NULL), "kv_read desc NULL", "desc", NULL, 0);
    TU_CHECK_OK(c, dsk_kv_read(ctx, &rgood));
  }
  printf("bad input: %d descriptor cases rejected with the field named\n", n_cases);

  /* the message format of spec examples */
  dsk_kv_cache kc;
  kc.base = cache;
  kc.pbs = 64;
  kc.page_stride = 37000;
  kc.num_pages = 3;
  TU_CHECK(c, dsk__kv_cache_validate(ctx, "sparse_mla_decode: segment 1", DSK_KV_FORMAT_B584, &kc) ==
                  DSK_STATUS_INVALID_ARG,
           "stride 37000");
  TU_CHECK(c, strcmp(dsk_last_error(), "sparse_mla_decode: segment 1 page_stride 37000 < 64*584 = 37376") == 0,
           "message \"%s\"", dsk_last_error());

  /* CUDA alignment rule, checked with a context that claims to be CUDA */
  dsk_ctx fake;
  memset(&fake, 0, sizeof fake);
  fake.info.is_cuda = 1;
  snprintf(fake.info.backend, sizeof fake.info.backend, "cuda-test");
  static _Alignas(16) uint8_t big[4096];
  static const struct { dsk_kv_format f; int64_t pbs, ps; int cpu_ok, cuda_ok; } al[] = {
      {DSK_KV_FORMAT_B584, 3, 1752, 1, 0}, {DSK_KV_FORMAT_B584, 3, 1760, 1, 1}, {DSK_KV_FORMAT_B584, 3, 1768, 1, 0},
      {DSK_KV_FORMAT_IDXK132, 1, 132, 1, 0}, {DSK_KV_FORMAT_IDXK132, 1, 144, 1, 1}, {DSK_KV_FORMAT_IDXK132, 4, 528, 1, 1},
      {DSK_KV_FORMAT_A656, 1, 656, 1, 1}, {DSK_KV_FORMAT_A656, 3, 1968, 1, 1}, {DSK_KV_FORMAT_A656, 3, 1960, 0, 0},
  };
  for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
    kc.base = big;
    kc.pbs = al[i].pbs;
    kc.page_stride = al[i].ps;
    kc.num_pages = 2;
    dsk_status s1 = dsk__kv_cache_validate(ctx, "t", al[i].f, &kc);
    dsk_status s2 = dsk__kv_cache_validate(&fake, "t", al[i].f, &kc);
    TU_CHECK(c, (s1 == DSK_STATUS_OK) == al[i].cpu_ok && (s2 == DSK_STATUS_OK) == al[i].cuda_ok,
             "alignment %s pbs %lld stride %lld: cpu %s cuda %s (%s)", fname(al[i].f), (long long)al[i].pbs,
             (long long)al[i].ps, dsk_status_name(s1), dsk_status_name(s2), dsk_last_error());
    if (s2 != DSK_STATUS_OK && s1 == DSK_STATUS_OK)
      TU_CHECK(c, strstr(dsk_last_error(), "page_stride") && strstr(dsk_last_error(), "16"), "message \"%s\"",
               dsk_last_error());
  }
  kc.base = big + 8;
  kc.pbs = 1;
  kc.page_stride = 656;
  TU_CHECK(c, dsk__kv_cache_validate(ctx, "t", DSK_KV_FORMAT_A656, &kc) == DSK_STATUS_OK, "cpu: base + 8 is fine");
  TU_CHECK(c, dsk__kv_cache_validate(&fake, "t", DSK_KV_FORMAT_A656, &kc) == DSK_STATUS_INVALID_ARG &&
                  strstr(dsk_last_error(), "base"),
           "cuda: base + 8 rejected (%s)", dsk_last_error());
}

int main(void) {
  dsk_ctx *ctx = tu_ctx("cpu");
  if (!ctx) return 1;
  test_geometry();
  test_worked_offsets(ctx);
  test_quant_example(ctx);
  test_hand_images(ctx);
  test_random_caches(ctx);
  test_edge_cases();
  test_threads();
  test_bad_input(ctx);
  dsk_ctx_destroy(ctx);

  /* the backend-vs-reference harness on the test device (cpu unless
   * DSK_TEST_DEVICE says otherwise) */
  dsk_ctx *hc = tu_ctx(NULL);
  if (hc) {
    dsk_check_opts o;
    memset(&o, 0, sizeof o);
    o.quick = 1;
    o.seed = 1234;
    o.log = stdout;
    o.only = "kv";
    int rc = dsk_check_kv(hc, &o, &g_c);
    TU_CHECK(&g_c, rc == 0, "dsk_check_kv returned %d", rc);
    dsk_ctx_destroy(hc);
  } else {
    TU_CHECK(&g_c, 0, "test device context");
  }
  return tu_finish("test_kvcache", &g_c);
}
