/* test_moe.c - the MoE path (spec/mxfp4-moe.md §3, §5, §6, §8) on a CPU
 * context against an independent fp64 implementation written here from
 * the spec (it shares no code with src/backend/cpu/ref_moe*.c; it uses only
 * the public e4m3 / e2m1 / bf16 codecs, which test_formats checks):
 *
 *  1. dsk_moe_prepare_weights: MXFP4 (TP 1 and TP 2 rank 1), FP8 with
 *     UE8M0 blocks, FP8 with fp32 blocks (re-quantized) -> bytes equal to the
 *     layout built here; corrupt checkpoints -> DSK_STATUS_INVALID_DATA
 *     naming tensor, row and value; bad fields -> INVALID_ARG;
 *  2. dsk_moe_route: DSv4 scored (sqrt-softplus + bias), hash (tid2eid,
 *     bad token ids and table entries counted), GLM-5.1 sigmoid + bias, ties
 *     (lower id first), NaN logits (counted), no renormalization;
 *  3. dsk_moe_permute + dsk_moe_gather: bit-exact vs the layout built here
 *     (stable order, padding rows 0, m_indices -1, inv_perm), EP offsets,
 *     out-of-range ids counted, M_sum too small -> dropped and counted;
 *  4. dsk_swiglu_quant: bit-exact (clamp on and off, padding rows);
 *  5. dsk_moe_gemm (FP8 x MXFP4, FP8 x FP8) and dsk_dense_fp8_gemm: diff
 *     <= 0.01 (DeepGEMM's metric; measured values printed) vs fp64 on the
 *     dequantized checkpoint; padding rows of A are NaN (0x7F) and blocks
 *     starting with -1 must stay unwritten; empty experts, all rows on one
 *     expert, A_used 64/128 with BLOCK_M 64/128, K-group padding (K 384);
 *     misaligned BLOCK_M, wrong scale shapes and bad m_indices rejected or
 *     counted;
 *  6. dsk_moe_plan / dsk_moe_run at T = 1, 7, 64 on reduced DSv4-Flash,
 *     DSv4-Pro and GLM-5.1 shapes (also EP, TP, hash router, skewed and
 *     bad ids, clamp active) -> diff <= 0.01 vs the fp64 forward with the
 *     same quantization points; workspace contents do not matter; bad
 *     descriptors -> INVALID_ARG naming the field.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsk.h"
#include "testutil.h"
#include "harness.h"

static tu_counts C;
static dsk_ctx *g_ctx;
static double g_worst_gemm, g_worst_fwd, g_worst_fwd_glm;

#define CHECK_BAD(st, field)                                                                                   \
  TU_CHECK(&C, (st) == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), field),                             \
           "want INVALID_ARG naming '%s', got %s: %s", field, dsk_status_name(st), dsk_last_error())

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "test_moe: out of memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}
static void *wsalloc(int64_t bytes) {
  void *p = NULL;
  if (dsk_mem_alloc(g_ctx, &p, (size_t)(bytes > 0 ? bytes : 64)) != DSK_STATUS_OK) {
    fprintf(stderr, "test_moe: workspace allocation failed\n");
    exit(2);
  }
  return p;
}

/* ============================================================ fp64 model */
static double e4(uint8_t c) { return (double)dsk_e4m3_to_f32(c); }
static double e2(uint8_t c) { return (double)dsk_e2m1_to_f32(c); }
static double ue(uint8_t e) { return e == 0xFF ? NAN : ldexp(1.0, (int)e - 127); }
static double bf(dsk_bf16 b) { return (double)dsk_bf16_to_f32(b); }
static uint8_t nib(const uint8_t *row, int64_t k) { return (uint8_t)((row[k / 2] >> (4 * (k % 2))) & 15); }

static int ceil_log2f(float f) {
  int ex;
  float m = frexpf(f, &ex);
  return m == 0.5f ? ex - 1 : ex;
}
/* §2.2 on n floats: codes and scale byte; returns the non-finite count. */
static int t_quant(const float *v, int n, uint8_t *q, uint8_t *eo) {
  float amax = 0;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (!isfinite(v[i])) {
      bad++;
      continue;
    }
    if (fabsf(v[i]) > amax) amax = fabsf(v[i]);
  }
  if (amax < 1e-4f) amax = 1e-4f;
  int e = ceil_log2f(amax / 448.0f) + 127;
  e = e < 1 ? 1 : e > 254 ? 254 : e;
  for (int i = 0; i < n; i++) q[i] = isfinite(v[i]) ? dsk_e4m3_from_f32(ldexpf(v[i], 127 - e)) : 0x7F;
  *eo = (uint8_t)e;
  return bad;
}
/* dequantized 1x128 quantization of a row of n floats */
static void t_qdq(const float *v, int64_t n, double *out) {
  uint8_t q[128], e;
  for (int64_t g = 0; g < n / 128; g++) {
    t_quant(v + g * 128, 128, q, &e);
    for (int i = 0; i < 128; i++) out[g * 128 + i] = e4(q[i]) * ue(e);
  }
}
/* DeepGEMM's metric */
static double diff_metric(const double *x, const double *y, int64_t n) {
  double sxy = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) {
    sxy += x[i] * y[i];
    s2 += x[i] * x[i] + y[i] * y[i];
  }
  return s2 == 0 ? 0.0 : 1.0 - 2.0 * sxy / s2;
}

/* packed MN-major scales built here: word g*Kp*T4 + (kg/4)*T4 + mn, byte kg%4 */
static int64_t t_words(int64_t G, int64_t MN, int64_t sfk) { return G * ((sfk + 3) / 4) * ((MN + 3) / 4 * 4); }
static void t_put(int32_t *w, int64_t MN, int64_t sfk, int64_t g, int64_t mn, int64_t kg, uint8_t v) {
  const int64_t kp = (sfk + 3) / 4, t4 = (MN + 3) / 4 * 4, off = g * kp * t4 + (kg / 4) * t4 + mn;
  uint32_t u = (uint32_t)w[off];
  u = (u & ~(0xFFu << (8 * (kg % 4)))) | ((uint32_t)v << (8 * (kg % 4)));
  w[off] = (int32_t)u;
}

/* ========================================================= checkpoints */
typedef struct ck_tensor {
  uint8_t *w; /* MXFP4 [rows, K/2] or e4m3 [rows, K] */
  void *s;    /* MXFP4 [rows, K/32] bytes; FP8 [ceil(rows/128), K/128] bytes or fp32 */
  int64_t rows, K;
} ck_tensor;
typedef struct ck_expert { ck_tensor w1, w3, w2; } ck_expert;
typedef struct ckpt {
  dsk_moe_src_fmt src;
  int64_t E, H, I;
  ck_expert *ex;
  double **d1, **d3, **d2; /* dequantized [E] x [rows * K] */
} ckpt;

static void gen_tensor(tu_rng *r, dsk_moe_src_fmt src, ck_tensor *t, int64_t rows, int64_t K, double gain) {
  t->rows = rows;
  t->K = K;
  const double sigma = gain / sqrt((double)K);
  if (src == DSK_MOE_SRC_MXFP4) {
    t->w = xmalloc((size_t)(rows * K / 2));
    uint8_t *s = xmalloc((size_t)(rows * K / 32));
    for (int64_t i = 0; i < rows * K / 2; i++) t->w[i] = (uint8_t)tu_next(r);
    /* rms of uniform codes is about 2.93 -> scale ~ sigma / 2.93 */
    const int base = 127 + (int)lround(log2(sigma / 2.93));
    for (int64_t i = 0; i < rows * K / 32; i++) s[i] = (uint8_t)(base + (int)tu_int(r, -1, 1));
    t->s = s;
    return;
  }
  t->w = xmalloc((size_t)(rows * K));
  const int64_t br = (rows + 127) / 128, bc = K / 128;
  float *v = xmalloc(sizeof(float) * (size_t)(rows * K));
  for (int64_t i = 0; i < rows * K; i++) v[i] = (float)(tu_normal(r) * sigma * (1.0 + 0.5 * ((i / K / 128 + i % K / 128) % 3)));
  uint8_t *sb = src == DSK_MOE_SRC_FP8_E8M0 ? xmalloc((size_t)(br * bc)) : NULL;
  float *sf = src == DSK_MOE_SRC_FP8_F32 ? xmalloc(sizeof(float) * (size_t)(br * bc)) : NULL;
  for (int64_t a = 0; a < br; a++)
    for (int64_t b = 0; b < bc; b++) {
      float amax = 0;
      for (int64_t i = a * 128; i < rows && i < a * 128 + 128; i++)
        for (int64_t k = b * 128; k < b * 128 + 128; k++) amax = fmaxf(amax, fabsf(v[i * K + k]));
      float S;
      if (sb) {
        int e = ceil_log2f(fmaxf(amax, 1e-4f) / 448.0f) + 127;
        sb[a * bc + b] = (uint8_t)e;
        S = ldexpf(1.0f, e - 127);
      } else {
        S = amax / 448.0f; /* not a power of two: re-quantized by the preparation */
        sf[a * bc + b] = S;
      }
      for (int64_t i = a * 128; i < rows && i < a * 128 + 128; i++)
        for (int64_t k = b * 128; k < b * 128 + 128; k++) t->w[i * K + k] = dsk_e4m3_from_f32(v[i * K + k] / S);
    }
  t->s = sb ? (void *)sb : (void *)sf;
  free(v);
}

static double ck_value(dsk_moe_src_fmt src, const ck_tensor *t, int64_t r, int64_t k) {
  if (src == DSK_MOE_SRC_MXFP4) return e2(nib(t->w + r * (t->K / 2), k)) * ue(((uint8_t *)t->s)[r * (t->K / 32) + k / 32]);
  const int64_t idx = (r / 128) * (t->K / 128) + k / 128;
  const double S = src == DSK_MOE_SRC_FP8_E8M0 ? ue(((uint8_t *)t->s)[idx]) : (double)((float *)t->s)[idx];
  return e4(t->w[r * t->K + k]) * S;
}

static double *deq(dsk_moe_src_fmt src, const ck_tensor *t) {
  double *d = xmalloc(sizeof(double) * (size_t)(t->rows * t->K));
  for (int64_t r = 0; r < t->rows; r++)
    for (int64_t k = 0; k < t->K; k++) d[r * t->K + k] = ck_value(src, t, r, k);
  return d;
}

static void ck_make(ckpt *c, dsk_moe_src_fmt src, int64_t E, int64_t H, int64_t I, uint64_t seed, double gain) {
  tu_rng r = tu_rng_make(seed);
  c->src = src;
  c->E = E;
  c->H = H;
  c->I = I;
  c->ex = xmalloc(sizeof(ck_expert) * (size_t)E);
  c->d1 = xmalloc(sizeof(double *) * (size_t)E);
  c->d3 = xmalloc(sizeof(double *) * (size_t)E);
  c->d2 = xmalloc(sizeof(double *) * (size_t)E);
  for (int64_t e = 0; e < E; e++) {
    gen_tensor(&r, src, &c->ex[e].w1, I, H, gain);
    gen_tensor(&r, src, &c->ex[e].w3, I, H, gain);
    gen_tensor(&r, src, &c->ex[e].w2, H, I, 1.0);
    c->d1[e] = deq(src, &c->ex[e].w1);
    c->d3[e] = deq(src, &c->ex[e].w3);
    c->d2[e] = deq(src, &c->ex[e].w2);
  }
}
static void ck_free(ckpt *c) {
  for (int64_t e = 0; e < c->E; e++) {
    ck_tensor *ts[3] = {&c->ex[e].w1, &c->ex[e].w3, &c->ex[e].w2};
    for (int i = 0; i < 3; i++) {
      free(ts[i]->w);
      free(ts[i]->s);
    }
    free(c->d1[e]);
    free(c->d3[e]);
    free(c->d2[e]);
  }
  free(c->ex);
  free(c->d1);
  free(c->d3);
  free(c->d2);
}

/* ------------------------------------------------ prepared weights */
typedef struct prepared {
  dsk_moe_wfmt fmt;
  int64_t E, H, Ir;
  int64_t bytes[4];
  void *w13, *w2;
  int32_t *sf13, *sf2;
} prepared;

static void prep_alloc(prepared *p, dsk_moe_wfmt fmt, int64_t E, int64_t H, int64_t Ir) {
  p->fmt = fmt;
  p->E = E;
  p->H = H;
  p->Ir = Ir;
  dsk_moe_weights_bytes(fmt, E, H, Ir, p->bytes);
  p->w13 = xmalloc((size_t)p->bytes[0]);
  p->sf13 = xmalloc((size_t)p->bytes[1]);
  p->w2 = xmalloc((size_t)p->bytes[2]);
  p->sf2 = xmalloc((size_t)p->bytes[3]);
  memset(p->w13, 0xCD, (size_t)p->bytes[0]);
  memset(p->sf13, 0xCD, (size_t)p->bytes[1]);
  memset(p->w2, 0xCD, (size_t)p->bytes[2]);
  memset(p->sf2, 0xCD, (size_t)p->bytes[3]);
}
static void prep_free(prepared *p) {
  free(p->w13);
  free(p->w2);
  free(p->sf13);
  free(p->sf2);
}

/* Library preparation of experts [e0, e0 + n) for rank (tp, rank). */
static dsk_status prep_lib(const ckpt *c, int64_t e0, int64_t n, int64_t tp, int64_t rank, prepared *p) {
  const void **a[6];
  for (int i = 0; i < 6; i++) a[i] = xmalloc(sizeof(void *) * (size_t)n);
  for (int64_t e = 0; e < n; e++) {
    a[0][e] = c->ex[e0 + e].w1.w; a[1][e] = c->ex[e0 + e].w1.s;
    a[2][e] = c->ex[e0 + e].w3.w; a[3][e] = c->ex[e0 + e].w3.s;
    a[4][e] = c->ex[e0 + e].w2.w; a[5][e] = c->ex[e0 + e].w2.s;
  }
  dsk_moe_prepare_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.src = c->src;
  d.E_local = n;
  d.expert_offset = e0;
  d.H = c->H;
  d.I = c->I;
  d.tp_size = tp;
  d.tp_rank = rank;
  d.w1 = (const void *const *)a[0]; d.s1 = (const void *const *)a[1];
  d.w3 = (const void *const *)a[2]; d.s3 = (const void *const *)a[3];
  d.w2 = (const void *const *)a[4]; d.s2 = (const void *const *)a[5];
  d.w13 = p->w13; d.w13_bytes = p->bytes[0];
  d.sf13 = p->sf13; d.sf13_bytes = p->bytes[1];
  d.w2_out = p->w2; d.w2_bytes = p->bytes[2];
  d.sf2 = p->sf2; d.sf2_bytes = p->bytes[3];
  dsk_status st = dsk_moe_prepare_weights(g_ctx, &d);
  for (int i = 0; i < 6; i++) free((void *)a[i]);
  return st;
}

/* The same layout built here from the spec (§3.2, §4.2, §4.3; re-quantization §3.3). */
static void prep_model(const ckpt *c, int64_t e0, int64_t n, int64_t tp, int64_t rank, prepared *p) {
  const int64_t H = c->H, I = c->I, Ir = I / tp, r0 = rank * Ir;
  const int mx = c->src == DSK_MOE_SRC_MXFP4;
  memset(p->sf13, 0, (size_t)p->bytes[1]);
  memset(p->sf2, 0, (size_t)p->bytes[3]);
  uint8_t *w13 = p->w13, *w2 = p->w2;
  for (int64_t e = 0; e < n; e++) {
    const ck_expert *x = &c->ex[e0 + e];
    for (int half = 0; half < 2; half++) {
      const ck_tensor *t = half ? &x->w3 : &x->w1;
      for (int64_t j = 0; j < Ir; j++) {
        const int64_t mn = half * Ir + j, src_row = r0 + j;
        if (mx) {
          memcpy(w13 + (e * 2 * Ir + mn) * (H / 2), t->w + src_row * (H / 2), (size_t)(H / 2));
          for (int64_t g = 0; g < H / 32; g++)
            t_put(p->sf13, 2 * Ir, H / 32, e, mn, g, ((uint8_t *)t->s)[src_row * (H / 32) + g]);
        }
      }
    }
    if (mx) {
      for (int64_t h = 0; h < H; h++) {
        memcpy(w2 + (e * H + h) * (Ir / 2), x->w2.w + h * (I / 2) + r0 / 2, (size_t)(Ir / 2));
        for (int64_t g = 0; g < Ir / 32; g++)
          t_put(p->sf2, H, Ir / 32, e, h, g, ((uint8_t *)x->w2.s)[h * (I / 32) + r0 / 32 + g]);
      }
      continue;
    }
    /* FP8: per 128x128 block of the slice; fp32 blocks re-quantized */
    const ck_tensor *ts[3] = {&x->w1, &x->w3, &x->w2};
    for (int which = 0; which < 3; which++) {
      const ck_tensor *t = ts[which];
      const int64_t K = t->K, rows_out = which < 2 ? Ir : H, cols_out = which < 2 ? H : Ir;
      const int64_t rr0 = which < 2 ? r0 : 0, cc0 = which < 2 ? 0 : r0;
      for (int64_t bi = 0; bi < rows_out / 128; bi++)
        for (int64_t bj = 0; bj < cols_out / 128; bj++) {
          const int64_t sr = rr0 / 128 + bi, sc = cc0 / 128 + bj, sidx = sr * (K / 128) + sc;
          uint8_t eb;
          float S = 0;
          if (c->src == DSK_MOE_SRC_FP8_E8M0) {
            eb = ((uint8_t *)t->s)[sidx];
          } else {
            S = ((float *)t->s)[sidx];
            float amax = 0;
            for (int64_t i = 0; i < 128; i++)
              for (int64_t k = 0; k < 128; k++)
                amax = fmaxf(amax, fabsf(dsk_e4m3_to_f32(t->w[(sr * 128 + i) * K + sc * 128 + k]) * S));
            eb = (uint8_t)(ceil_log2f(fmaxf(amax, 1e-4f) / 448.0f) + 127);
          }
          for (int64_t i = 0; i < 128; i++) {
            const int64_t orow = bi * 128 + i, mn = which == 1 ? Ir + orow : orow;
            uint8_t *dst = which < 2 ? w13 + (e * 2 * Ir + mn) * H + bj * 128 : w2 + (e * H + orow) * Ir + bj * 128;
            for (int64_t k = 0; k < 128; k++) {
              const uint8_t q = t->w[(sr * 128 + i) * K + sc * 128 + k];
              dst[k] = c->src == DSK_MOE_SRC_FP8_E8M0 ? q
                                                      : dsk_e4m3_from_f32(ldexpf(dsk_e4m3_to_f32(q) * S, 127 - eb));
            }
            if (which < 2) t_put(p->sf13, 2 * Ir, H / 128, e, mn, bj, eb);
            else t_put(p->sf2, H, Ir / 128, e, orow, bj, eb);
          }
        }
    }
  }
}

/* ====================================================== 1. preparation */
static void test_prepare(void) {
  struct { dsk_moe_src_fmt src; int64_t E, H, I, tp, rank, e0, n; } cs[] = {
      {DSK_MOE_SRC_MXFP4, 3, 256, 256, 1, 0, 0, 3},   {DSK_MOE_SRC_MXFP4, 3, 384, 256, 2, 1, 1, 2},
      {DSK_MOE_SRC_FP8_E8M0, 2, 256, 384, 1, 0, 0, 2}, {DSK_MOE_SRC_FP8_F32, 2, 256, 256, 2, 1, 0, 2},
      {DSK_MOE_SRC_FP8_F32, 1, 384, 128, 1, 0, 0, 1},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    ckpt c;
    ck_make(&c, cs[i].src, cs[i].E, cs[i].H, cs[i].I, 100 + i, 1.0);
    const dsk_moe_wfmt wf = cs[i].src == DSK_MOE_SRC_MXFP4 ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8;
    prepared a, b;
    prep_alloc(&a, wf, cs[i].n, cs[i].H, cs[i].I / cs[i].tp);
    prep_alloc(&b, wf, cs[i].n, cs[i].H, cs[i].I / cs[i].tp);
    TU_CHECK_OK(&C, prep_lib(&c, cs[i].e0, cs[i].n, cs[i].tp, cs[i].rank, &a));
    prep_model(&c, cs[i].e0, cs[i].n, cs[i].tp, cs[i].rank, &b);
    TU_CHECK(&C, memcmp(a.w13, b.w13, (size_t)a.bytes[0]) == 0, "prepare case %zu: W13 differs", i);
    TU_CHECK(&C, memcmp(a.sf13, b.sf13, (size_t)a.bytes[1]) == 0, "prepare case %zu: SF13 differs", i);
    TU_CHECK(&C, memcmp(a.w2, b.w2, (size_t)a.bytes[2]) == 0, "prepare case %zu: W2 differs", i);
    TU_CHECK(&C, memcmp(a.sf2, b.sf2, (size_t)a.bytes[3]) == 0, "prepare case %zu: SF2 differs", i);
    prep_free(&a);
    prep_free(&b);
    ck_free(&c);
  }
  /* corrupt checkpoints -> INVALID_DATA naming tensor, row, value */
  ckpt c;
  ck_make(&c, DSK_MOE_SRC_MXFP4, 2, 256, 256, 7, 1.0);
  prepared a;
  prep_alloc(&a, DSK_MOE_W_MXFP4, 2, 256, 256);
  ((uint8_t *)c.ex[1].w3.s)[5 * 8 + 2] = 0xFF;
  dsk_status st = prep_lib(&c, 0, 2, 1, 0, &a);
  TU_CHECK(&C, st == DSK_STATUS_INVALID_DATA && strstr(dsk_last_error(), "w3.scale row 5") &&
                   strstr(dsk_last_error(), "0xFF") && strstr(dsk_last_error(), "expert 1"),
           "0xFF scale: %s: %s", dsk_status_name(st), dsk_last_error());
  /* the same byte outside rank 1's slice of TP 2 (rows 128..255) is not read */
  prepared h;
  prep_alloc(&h, DSK_MOE_W_MXFP4, 2, 256, 128);
  TU_CHECK_OK(&C, prep_lib(&c, 0, 2, 2, 1, &h));
  CHECK_BAD(prep_lib(&c, 0, 2, 4, 1, &h), "tp_size");
  prep_free(&h);
  prep_free(&a);
  ck_free(&c);

  ck_make(&c, DSK_MOE_SRC_FP8_E8M0, 1, 256, 128, 8, 1.0);
  prep_alloc(&a, DSK_MOE_W_FP8, 1, 256, 128);
  c.ex[0].w2.w[200 * 128 + 77] = 0xFF;
  st = prep_lib(&c, 0, 1, 1, 0, &a);
  TU_CHECK(&C, st == DSK_STATUS_INVALID_DATA && strstr(dsk_last_error(), "w2.weight row 200 column 77") &&
                   strstr(dsk_last_error(), "0xFF"),
           "e4m3 NaN: %s: %s", dsk_status_name(st), dsk_last_error());
  c.ex[0].w2.w[200 * 128 + 77] = 0x01;
  ((uint8_t *)c.ex[0].w1.s)[1] = 0xFF;
  st = prep_lib(&c, 0, 1, 1, 0, &a);
  TU_CHECK(&C, st == DSK_STATUS_INVALID_DATA && strstr(dsk_last_error(), "w1.scale row 0 group 1"),
           "block 0xFF: %s: %s", dsk_status_name(st), dsk_last_error());
  prep_free(&a);
  ck_free(&c);

  ck_make(&c, DSK_MOE_SRC_FP8_F32, 1, 256, 128, 9, 1.0);
  prep_alloc(&a, DSK_MOE_W_FP8, 1, 256, 128);
  ((float *)c.ex[0].w1.s)[0] = -1.0f;
  st = prep_lib(&c, 0, 1, 1, 0, &a);
  TU_CHECK(&C, st == DSK_STATUS_INVALID_DATA && strstr(dsk_last_error(), "w1.scale") && strstr(dsk_last_error(), "-1"),
           "negative fp32 scale: %s: %s", dsk_status_name(st), dsk_last_error());
  ((float *)c.ex[0].w1.s)[0] = NAN;
  st = prep_lib(&c, 0, 1, 1, 0, &a);
  TU_CHECK(&C, st == DSK_STATUS_INVALID_DATA, "NaN fp32 scale: %s", dsk_status_name(st));
  a.bytes[3] -= 4;
  CHECK_BAD(prep_lib(&c, 0, 1, 1, 0, &a), "sf2_bytes");
  prep_free(&a);
  ck_free(&c);
}

/* ============================================================ 2. route */
static double t_score(int score, double z) {
  if (score == DSK_MOE_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-z));
  const double sp = z > 30 ? z : log1p(exp(z)); /* softplus */
  return sqrt(sp);
}
/* fp64 router for one token from logits z[E]; ids/w out */
static void t_route(int score, const double *z, const float *bias, int64_t E, int64_t K, double scale, int renorm,
                    int *ids, double *w, double *kth_gap) {
  double s[DSK_MOE_MAX_EXPERTS] = {0}, b[DSK_MOE_MAX_EXPERTS] = {0};
  int used[DSK_MOE_MAX_EXPERTS] = {0};
  for (int64_t e = 0; e < E; e++) {
    s[e] = t_score(score, z[e]);
    b[e] = s[e] + (bias ? bias[e] : 0.0);
  }
  double sum = 0;
  for (int64_t k = 0; k < K; k++) {
    int best = -1;
    for (int64_t e = 0; e < E; e++)
      if (!used[e] && (best < 0 || b[e] > b[best])) best = (int)e;
    used[best] = 1;
    ids[k] = best;
    w[k] = s[best];
    sum += s[best];
  }
  if (kth_gap) { /* distance between the k-th and the (k+1)-th biased score */
    double nxt = -INFINITY;
    for (int64_t e = 0; e < E; e++)
      if (!used[e] && b[e] > nxt) nxt = b[e];
    *kth_gap = (b[ids[K - 1]] - nxt) / fmax(fabs(b[ids[K - 1]]), 1e-30);
  }
  for (int64_t k = 0; k < K; k++) w[k] = w[k] / (renorm ? fmax(sum, 1e-20) : 1.0) * scale;
}

static dsk_moe_route_desc route_desc(int64_t T, int64_t E, int64_t K, int score, int router, int32_t *ids, float *w) {
  dsk_moe_route_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = T;
  d.E = E;
  d.topk = K;
  d.score = (dsk_moe_score)score;
  d.router = (dsk_moe_router)router;
  d.renormalize = 1;
  d.routed_scaling_factor = 1.5f;
  d.ids = ids;
  d.ids_stride = K;
  d.weights = w;
  d.weights_stride = K;
  return d;
}

static void test_route(void) {
  tu_rng r = tu_rng_make(21);
  /* scored, from x and gate_w: DSv4 (sqrt-softplus) and GLM (sigmoid) */
  for (int sc = 0; sc < 2; sc++) {
    const int64_t T = 33, E = sc ? 32 : 24, K = sc ? 8 : 6, H = 256;
    const int score = sc ? DSK_MOE_SCORE_SIGMOID : DSK_MOE_SCORE_SQRT_SOFTPLUS;
    dsk_bf16 *x = xmalloc(sizeof(dsk_bf16) * (size_t)(T * H)), *gw = xmalloc(sizeof(dsk_bf16) * (size_t)(E * H));
    float bias[64];
    tu_fill_bf16_normal(&r, x, (size_t)(T * H), 1.0);
    tu_fill_bf16_normal(&r, gw, (size_t)(E * H), 1.0 / sqrt((double)H));
    for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(&r) * 0.2 - 0.1);
    int32_t ids[33 * 8];
    float w[33 * 8];
    memset(ids, 0xCD, sizeof ids);
    for (int renorm = 1; renorm >= 0; renorm--) {
      dsk_moe_route_desc d = route_desc(T, E, K, score, DSK_MOE_ROUTER_SCORED, ids, w);
      d.H = H; d.x = x; d.x_stride = H; d.gate_w = gw; d.bias = bias;
      d.renormalize = renorm;
      d.routed_scaling_factor = sc ? 2.5f : 1.5f;
      int64_t cnt[2] = {0, 0};
      d.counters = cnt;
      TU_CHECK_OK(&C, dsk_moe_route(g_ctx, &d));
      int64_t id_bad = 0;
      double werr = 0;
      for (int64_t t = 0; t < T; t++) {
        double z[64], wr[16], gap;
        int ir[16];
        for (int64_t e = 0; e < E; e++) {
          z[e] = 0;
          for (int64_t h = 0; h < H; h++) z[e] += bf(x[t * H + h]) * bf(gw[e * H + h]);
        }
        t_route(score, z, bias, E, K, d.routed_scaling_factor, renorm, ir, wr, &gap);
        int same = 1;
        for (int64_t k = 0; k < K; k++) same &= ids[t * K + k] == ir[k];
        if (!same && gap >= 1e-6) id_bad++;
        if (same)
          for (int64_t k = 0; k < K; k++) werr = fmax(werr, fabs(w[t * K + k] - wr[k]) / fabs(wr[k]));
      }
      TU_CHECK(&C, id_bad == 0, "route score %d: %lld tokens select other experts (no near tie)", score,
               (long long)id_bad);
      TU_CHECK(&C, werr <= 1e-5, "route score %d renorm %d: weights rel error %.3g > 1e-5", score, renorm, werr);
      TU_CHECK(&C, cnt[0] == 0 && cnt[1] == 0, "route counters %lld %lld", (long long)cnt[0], (long long)cnt[1]);
      if (renorm) printf("route %s: weights max rel error %.2e vs fp64\n", sc ? "sigmoid (GLM-5.1)" : "sqrt-softplus (DSv4)", werr);
    }
    free(x);
    free(gw);
  }
  /* ties and NaN through the logits input: E 8, top-3 */
  {
    float lg[3 * 8];
    for (int i = 0; i < 24; i++) lg[i] = 0.5f;
    float bias[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    bias[5] = 1.0f;
    bias[2] = 1.0f; /* 2 and 5 tie on the biased score: 2 first */
    lg[8 + 3] = NAN; /* token 1: a NaN logit ranks last */
    lg[16 + 7] = 3.0f; /* token 2: expert 7 wins on its own */
    int32_t ids[9];
    float w[9];
    dsk_moe_route_desc d = route_desc(3, 8, 3, DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_SCORED, ids, w);
    d.logits = lg;
    d.logits_stride = 8;
    d.bias = bias;
    int64_t cnt[2] = {0, 0};
    d.counters = cnt;
    TU_CHECK_OK(&C, dsk_moe_route(g_ctx, &d));
    TU_CHECK(&C, ids[0] == 2 && ids[1] == 5 && ids[2] == 0, "ties: ids %d %d %d, want 2 5 0", ids[0], ids[1], ids[2]);
    TU_CHECK(&C, ids[3] == 2 && ids[4] == 5 && ids[5] == 0, "NaN token: ids %d %d %d", ids[3], ids[4], ids[5]);
    TU_CHECK(&C, ids[6] == 2 && ids[7] == 5 && ids[8] == 7, "token 2: ids %d %d %d, want 2 5 7", ids[6], ids[7], ids[8]);
    TU_CHECK(&C, fabsf(w[0] + w[1] + w[2] - 1.5f) < 1e-6f && fabsf(w[0] - 0.5f) < 1e-6f, "tie weights %g %g %g", w[0],
             w[1], w[2]);
    TU_CHECK(&C, cnt[1] == 1 && cnt[0] == 0, "NaN tokens counted %lld, want 1", (long long)cnt[1]);
  }
  /* hash router: tid2eid[vocab 50, 6]; bad token ids and a bad table entry */
  {
    const int64_t T = 5, E = 16, K = 6, V = 50;
    int64_t *tab = xmalloc(sizeof(int64_t) * (size_t)(V * K));
    for (int64_t i = 0; i < V * K; i++) tab[i] = (i * 7 + i / K) % E;
    tab[9 * K + 4] = 99; /* out of range */
    int32_t tok[5] = {3, -1, 9, 50, 49};
    float lg[5 * 16];
    for (int i = 0; i < 80; i++) lg[i] = (float)(tu_normal(&r));
    int32_t ids[30];
    float w[30];
    dsk_moe_route_desc d = route_desc(T, E, K, DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_HASH, ids, w);
    d.logits = lg;
    d.logits_stride = E;
    d.tid2eid = tab;
    d.vocab = V;
    d.token_ids = tok;
    int64_t cnt[2] = {0, 0};
    d.counters = cnt;
    TU_CHECK_OK(&C, dsk_moe_route(g_ctx, &d));
    int ok = 1;
    double werr = 0;
    for (int64_t t = 0; t < T; t++) {
      const int good = tok[t] >= 0 && tok[t] < V;
      double sum = 0, s[6];
      for (int64_t k = 0; k < K; k++) {
        int64_t want = good ? tab[tok[t] * K + k] : -1;
        if (want >= E) want = -1;
        ok &= ids[t * K + k] == want;
        s[k] = want >= 0 ? t_score(DSK_MOE_SCORE_SQRT_SOFTPLUS, lg[t * E + want]) : 0;
        sum += s[k];
      }
      for (int64_t k = 0; k < K; k++) {
        const double want = sum > 0 ? s[k] / sum * 1.5 : 0;
        werr = fmax(werr, fabs(w[t * K + k] - want) / fmax(fabs(want), 1e-30));
        if (want == 0) ok &= w[t * K + k] == 0.0f;
      }
    }
    TU_CHECK(&C, ok && werr <= 1e-5, "hash router ids/weights (rel err %.3g)", werr);
    TU_CHECK(&C, cnt[0] == 3, "hash bad tokens counted %lld, want 3", (long long)cnt[0]);
    free(tab);
  }
  /* bad fields */
  int32_t ids[8];
  float w[8];
  dsk_moe_route_desc d = route_desc(1, 8, 9, DSK_MOE_SCORE_SIGMOID, DSK_MOE_ROUTER_SCORED, ids, w);
  float lg[8] = {0};
  d.logits = lg;
  d.logits_stride = 8;
  CHECK_BAD(dsk_moe_route(g_ctx, &d), "topk 9");
  d.topk = 2;
  d.score = (dsk_moe_score)0;
  CHECK_BAD(dsk_moe_route(g_ctx, &d), "score");
  d.score = DSK_MOE_SCORE_SIGMOID;
  d.router = DSK_MOE_ROUTER_HASH;
  CHECK_BAD(dsk_moe_route(g_ctx, &d), "tid2eid");
  d.router = DSK_MOE_ROUTER_SCORED;
  d.routed_scaling_factor = 0;
  CHECK_BAD(dsk_moe_route(g_ctx, &d), "routed_scaling_factor");
}

/* ================================================ 3. permute + gather */
typedef struct layout {
  int64_t M_sum, A;
  int32_t *mind, *inv; /* [M_sum], [T*K] */
} layout;

/* The expected contiguous layout (§5.5), built here. */
static void t_layout(const int32_t *ids, int64_t T, int64_t K, int64_t E, int64_t EL, int64_t off, int64_t A,
                     int64_t M_sum, layout *L, int64_t *bad, int64_t *dropped) {
  L->M_sum = M_sum;
  L->A = A;
  L->mind = xmalloc(sizeof(int32_t) * (size_t)(M_sum + 1));
  L->inv = xmalloc(sizeof(int32_t) * (size_t)(T * K));
  for (int64_t r = 0; r < M_sum; r++) L->mind[r] = -1;
  *bad = *dropped = 0;
  int64_t row = 0;
  for (int64_t i = 0; i < T * K; i++) L->inv[i] = -1;
  for (int64_t l = 0; l < EL; l++) {
    int64_t n = 0;
    for (int64_t i = 0; i < T * K; i++)
      if (ids[i] == off + l) {
        if (row + n < M_sum) {
          L->mind[row + n] = (int32_t)l;
          L->inv[i] = (int32_t)(row + n);
        } else {
          (*dropped)++;
        }
        n++;
      }
    row += (n + A - 1) / A * A;
  }
  for (int64_t i = 0; i < T * K; i++) *bad += ids[i] < -1 || ids[i] >= E;
}
static void layout_free(layout *L) {
  free(L->mind);
  free(L->inv);
}

/* Values of a permute's outputs that differ from layout L: m_indices,
 * inv_perm, and each row of A (H bytes) and its 2 scale bytes - the token's
 * when the row is real, else `pad`. */
static int64_t perm_wrong(const layout *L, int64_t T, int64_t K, int64_t H, const uint8_t *xq, const uint8_t *xs,
                          const uint8_t *A_, const uint8_t *As, const int32_t *mind, const int32_t *inv, uint8_t pad) {
  int64_t wrong = 0;
  for (int64_t rr = 0; rr < L->M_sum; rr++) {
    wrong += mind[rr] != L->mind[rr];
    int64_t src = -1;
    for (int64_t i = 0; i < T * K; i++)
      if (L->inv[i] == rr) src = i / K;
    for (int64_t h = 0; h < H; h++) wrong += A_[rr * H + h] != (src >= 0 ? xq[src * H + h] : pad);
    for (int64_t g = 0; g < 2; g++) wrong += As[rr * 2 + g] != (src >= 0 ? xs[src * 2 + g] : pad);
  }
  for (int64_t i = 0; i < T * K; i++) wrong += inv[i] != L->inv[i];
  return wrong;
}

static void test_permute_gather(void) {
  tu_rng r = tu_rng_make(31);
  struct { int64_t T, K, E, EL, off, A, M_sum; int skew, badids; } cs[] = {
      {7, 6, 8, 8, 0, 64, -1, 0, 0},   {64, 6, 16, 8, 4, 64, -1, 0, 1}, {5, 4, 8, 8, 0, 128, -1, 1, 0},
      {9, 3, 8, 4, 4, 64, 128, 1, 0},  /* M_sum too small: dropped */
      {1, 8, 16, 16, 0, 64, -1, 0, 0},
  };
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    const int64_t T = cs[c].T, K = cs[c].K, E = cs[c].E, EL = cs[c].EL, off = cs[c].off, A = cs[c].A, H = 256;
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)(T * K));
    for (int64_t t = 0; t < T; t++) {
      int64_t p[64];
      tu_permutation(&r, p, E);
      for (int64_t k = 0; k < K; k++) ids[t * K + k] = cs[c].skew ? (int32_t)((k == 0) ? off : p[k] % E) : (int32_t)p[k];
    }
    if (cs[c].badids) {
      ids[3] = -1;
      ids[10] = -7;
      ids[11] = (int32_t)E;
      ids[12] = (int32_t)(E + 100);
    }
    int64_t Msum = cs[c].M_sum;
    if (Msum < 0) {
      const int64_t mt = T * K, act = mt < EL ? mt : EL;
      Msum = (mt + act * (A - 1) + A - 1) / A * A;
    }
    layout L;
    int64_t bad, dropped;
    t_layout(ids, T, K, E, EL, off, A, Msum, &L, &bad, &dropped);
    /* inputs */
    uint8_t *xq = xmalloc((size_t)(T * H)), *xs = xmalloc((size_t)(T * 2));
    for (int64_t i = 0; i < T * H; i++) xq[i] = (uint8_t)tu_int(&r, 0, 0x7E);
    for (int64_t i = 0; i < T * 2; i++) xs[i] = (uint8_t)tu_int(&r, 100, 140);
    uint8_t *A_ = xmalloc((size_t)(Msum * H + 1)), *As = xmalloc((size_t)(Msum * 2 + 1));
    int32_t *mind = xmalloc(sizeof(int32_t) * (size_t)(Msum + 1)), *inv = xmalloc(sizeof(int32_t) * (size_t)(T * K));
    memset(A_, 0xCD, (size_t)(Msum * H));
    memset(As, 0xCD, (size_t)(Msum * 2));
    memset(mind, 0xCD, sizeof(int32_t) * (size_t)Msum);
    memset(inv, 0xCD, sizeof(int32_t) * (size_t)(T * K));
    dsk_moe_permute_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.T = T; d.topk = K; d.E = E; d.E_local = EL; d.expert_offset = off; d.K = H; d.A_used = A; d.M_sum = Msum;
    d.ids = ids; d.ids_stride = K; d.xq = xq; d.xq_stride = H; d.xsf = xs; d.xsf_stride = 2;
    d.A = A_; d.A_stride = H; d.Asf = As; d.Asf_stride = 2; d.m_indices = mind; d.inv_perm = inv; d.inv_perm_stride = K;
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    TU_CHECK_OK(&C, dsk_moe_permute_plan(g_ctx, &d, &pi));
    CHECK_BAD(dsk_moe_permute(g_ctx, &d), "workspace");
    d.workspace = wsalloc(pi.workspace_bytes);
    d.workspace_bytes = pi.workspace_bytes;
    memset(d.workspace, 0x5A, (size_t)pi.workspace_bytes);
    int64_t cnt[2] = {0, 0};
    d.counters = cnt;
    TU_CHECK_OK(&C, dsk_moe_permute(g_ctx, &d));
    const int64_t wrong = perm_wrong(&L, T, K, H, xq, xs, A_, As, mind, inv, 0);
    TU_CHECK(&C, wrong == 0, "permute case %zu: %lld wrong values", c, (long long)wrong);
    TU_CHECK(&C, cnt[0] == bad && cnt[1] == dropped, "permute case %zu: counters %lld %lld, want %lld %lld", c,
             (long long)cnt[0], (long long)cnt[1], (long long)bad, (long long)dropped);
    TU_CHECK(&C, dropped == 0 || c == 3, "permute case %zu dropped rows", c);
    if (c == 3) TU_CHECK(&C, dropped > 0, "case 3 should drop rows");
    /* DSK_MOE_PERMUTE_NO_PAD_FILL: the real rows, m_indices and inv_perm as
     * above, padding rows keep the poison; a caller built before `flags`
     * (struct_size = offsetof(flags)) gets flags 0; unknown bits rejected */
    for (int v = 0; v < 2; v++) {
      memset(A_, 0xCD, (size_t)(Msum * H));
      memset(As, 0xCD, (size_t)(Msum * 2));
      memset(mind, 0xCD, sizeof(int32_t) * (size_t)Msum);
      memset(inv, 0xCD, sizeof(int32_t) * (size_t)(T * K));
      d.flags = DSK_MOE_PERMUTE_NO_PAD_FILL;
      d.struct_size = v ? offsetof(dsk_moe_permute_desc, flags) : sizeof d;
      cnt[0] = cnt[1] = 0;
      TU_CHECK_OK(&C, dsk_moe_permute(g_ctx, &d));
      /* the old size cannot carry the flag: padding written 0 */
      const int64_t wrong2 = perm_wrong(&L, T, K, H, xq, xs, A_, As, mind, inv, v == 0 ? 0xCD : 0);
      TU_CHECK(&C, wrong2 == 0, "permute case %zu flags NO_PAD_FILL, struct_size %s: %lld wrong values", c,
               v ? "offsetof(flags)" : "sizeof", (long long)wrong2);
      TU_CHECK(&C, cnt[0] == bad && cnt[1] == dropped, "permute case %zu NO_PAD_FILL: counters %lld %lld", c,
               (long long)cnt[0], (long long)cnt[1]);
    }
    d.struct_size = offsetof(dsk_moe_permute_desc, flags) - 1;
    CHECK_BAD(dsk_moe_permute(g_ctx, &d), "struct_size");
    d.struct_size = sizeof d;
    d.flags = 6;
    CHECK_BAD(dsk_moe_permute(g_ctx, &d), "flags");
    d.flags = 0;

    /* gather: D2 random (padding rows NaN: never read), shared, weights */
    const int64_t N = 200;
    dsk_bf16 *D2 = xmalloc(sizeof(dsk_bf16) * (size_t)(Msum * N + 1)), *sh = xmalloc(sizeof(dsk_bf16) * (size_t)(T * N)),
             *y = xmalloc(sizeof(dsk_bf16) * (size_t)(T * (N + 3)));
    float *w = xmalloc(sizeof(float) * (size_t)(T * K));
    for (int64_t rr = 0; rr < Msum; rr++)
      for (int64_t n = 0; n < N; n++) D2[rr * N + n] = mind[rr] >= 0 ? dsk_bf16_from_f32((float)tu_normal(&r)) : 0x7FC0;
    tu_fill_bf16_normal(&r, sh, (size_t)(T * N), 1.0);
    for (int64_t i = 0; i < T * K; i++) w[i] = (float)tu_uniform(&r);
    inv[0] = (int32_t)(Msum + 5); /* bad row: skipped and counted */
    for (int with_shared = 0; with_shared < 2; with_shared++) {
      memset(y, 0xFF, sizeof(dsk_bf16) * (size_t)(T * (N + 3)));
      dsk_moe_gather_desc g;
      memset(&g, 0, sizeof g);
      g.struct_size = sizeof g;
      g.T = T; g.topk = K; g.N = N; g.M_sum = Msum; g.D2 = D2; g.D2_stride = N;
      g.inv_perm = inv; g.inv_perm_stride = K; g.weights = w; g.weights_stride = K;
      g.shared = with_shared ? sh : NULL; g.shared_stride = N; g.y = y; g.y_stride = N + 3;
      int64_t gc = 0;
      g.counters = &gc;
      TU_CHECK_OK(&C, dsk_moe_gather(g_ctx, &g));
      int64_t gw = 0;
      for (int64_t t = 0; t < T; t++) {
        for (int64_t n = 0; n < N; n++) {
          double acc = with_shared ? bf(sh[t * N + n]) : 0.0;
          for (int64_t k = 0; k < K; k++) {
            const int32_t row = inv[t * K + k];
            if (row < 0 || row >= Msum) continue;
            acc += (double)w[t * K + k] * bf(D2[row * N + n]);
          }
          gw += y[t * (N + 3) + n] != dsk_bf16_from_f32((float)acc);
        }
        for (int64_t n = N; n < N + 3; n++) gw += y[t * (N + 3) + n] != 0xFFFF;
      }
      TU_CHECK(&C, gw == 0, "gather case %zu shared %d: %lld wrong values", c, with_shared, (long long)gw);
      TU_CHECK(&C, gc == 1, "gather case %zu: bad rows counted %lld, want 1", c, (long long)gc);
    }
    dsk_mem_free(g_ctx, d.workspace);
    free(D2); free(sh); free(y); free(w);
    free(ids); free(xq); free(xs); free(A_); free(As); free(mind); free(inv);
    layout_free(&L);
  }
}

/* ============================================================ 4. SwiGLU */
static void test_swiglu(void) {
  tu_rng r = tu_rng_make(41);
  const int64_t R = 9, I = 256;
  dsk_bf16 *D1 = xmalloc(sizeof(dsk_bf16) * (size_t)(R * 2 * I));
  for (int64_t i = 0; i < R * 2 * I; i++) D1[i] = dsk_bf16_from_f32((float)(tu_normal(&r) * 6.0));
  D1[3 * 2 * I + 5] = 0x7FC0; /* NaN gate: h NaN -> 0x7F, counted */
  int32_t mind[9] = {0, 0, 2, 1, -1, -1, 3, -1, 0};
  for (int lim = 0; lim < 2; lim++) {
    const float limit = lim ? 10.0f : 0.0f;
    uint8_t q[9 * 256], sf[9 * 2];
    const int64_t W = t_words(1, R, I / 128);
    int32_t *pk = xmalloc(sizeof(int32_t) * (size_t)W);
    memset(q, 0xCD, sizeof q);
    memset(sf, 0xCD, sizeof sf);
    memset(pk, 0xCD, sizeof(int32_t) * (size_t)W);
    dsk_swiglu_quant_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.rows = R; d.I = I; d.D1 = D1; d.D1_stride = 2 * I; d.m_indices = mind; d.limit = limit;
    d.q = q; d.q_stride = I; d.sf = sf; d.sf_stride = 2; d.sf_packed = pk;
    int64_t cnt = 0;
    d.counters = &cnt;
    TU_CHECK_OK(&C, dsk_swiglu_quant(g_ctx, &d));
    int64_t wrong = 0, clamped = 0;
    int32_t *pm = xmalloc(sizeof(int32_t) * (size_t)W);
    memset(pm, 0, sizeof(int32_t) * (size_t)W);
    for (int64_t rr = 0; rr < R; rr++) {
      float h[256];
      uint8_t qq[256], e[2] = {0, 0};
      if (mind[rr] < 0) {
        memset(qq, 0, sizeof qq);
      } else {
        for (int64_t i = 0; i < I; i++) {
          double g = bf(D1[rr * 2 * I + i]), u = bf(D1[rr * 2 * I + I + i]);
          if (limit > 0) {
            clamped += g > limit || fabs(u) > limit;
            g = g > limit ? limit : g;
            u = u > limit ? limit : u < -limit ? -limit : u;
          }
          h[i] = (float)(g / (1.0 + exp(-g)) * u);
        }
        t_quant(h, 128, qq, &e[0]);
        t_quant(h + 128, 128, qq + 128, &e[1]);
      }
      wrong += memcmp(q + rr * I, qq, 256) != 0;
      wrong += sf[rr * 2] != e[0] || sf[rr * 2 + 1] != e[1];
      t_put(pm, R, 2, 0, rr, 0, e[0]);
      t_put(pm, R, 2, 0, rr, 1, e[1]);
    }
    wrong += memcmp(pk, pm, sizeof(int32_t) * (size_t)W) != 0;
    TU_CHECK(&C, wrong == 0, "swiglu limit %g: %lld wrong rows", (double)limit, (long long)wrong);
    TU_CHECK(&C, cnt == 1, "swiglu: non-finite h counted %lld, want 1", (long long)cnt);
    if (lim) TU_CHECK(&C, clamped > 50, "swiglu: the clamp is not exercised (%lld)", (long long)clamped);
    /* DSK_SWIGLU_SKIP_PADDING: live rows and their packed words as above,
     * padding rows (q, raw scales, packed bytes) keep the poison */
    {
      uint8_t q2[9 * 256], sf2[9 * 2];
      int32_t *pk2 = xmalloc(sizeof(int32_t) * (size_t)W);
      memset(q2, 0xCD, sizeof q2);
      memset(sf2, 0xCD, sizeof sf2);
      memset(pk2, 0xCD, sizeof(int32_t) * (size_t)W);
      dsk_swiglu_quant_desc d2 = d;
      d2.q = q2; d2.sf = sf2; d2.sf_packed = pk2; d2.flags = DSK_SWIGLU_SKIP_PADDING;
      int64_t cnt2 = 0;
      d2.counters = &cnt2;
      TU_CHECK_OK(&C, dsk_swiglu_quant(g_ctx, &d2));
      int64_t w2 = 0;
      for (int64_t rr = 0; rr < R; rr++) {
        const int live = mind[rr] >= 0;
        for (int64_t i = 0; i < I; i++) w2 += q2[rr * I + i] != (live ? q[rr * I + i] : 0xCD);
        for (int g = 0; g < 2; g++) {
          w2 += sf2[rr * 2 + g] != (live ? sf[rr * 2 + g] : 0xCD);
        }
      }
      /* packed bytes: word p of row r lies at [p * round_up(R, 4) + r], byte g % 4 */
      const int64_t T4 = (R + 3) / 4 * 4;
      for (int64_t rr = 0; rr < T4; rr++) {
        const uint8_t *a = (const uint8_t *)(pk + rr), *b = (const uint8_t *)(pk2 + rr);
        const int pad = rr < R && mind[rr] < 0;
        for (int j = 0; j < 4; j++) w2 += b[j] != (pad ? 0xCD : a[j]);
      }
      TU_CHECK(&C, w2 == 0, "swiglu limit %g SKIP_PADDING: %lld wrong bytes", (double)limit, (long long)w2);
      TU_CHECK(&C, cnt2 == 1, "swiglu SKIP_PADDING: non-finite h counted %lld, want 1", (long long)cnt2);
      d2.m_indices = NULL;
      CHECK_BAD(dsk_swiglu_quant(g_ctx, &d2), "m_indices");
      d2.m_indices = mind;
      d2.flags = 2;
      CHECK_BAD(dsk_swiglu_quant(g_ctx, &d2), "flags");
      d2.flags = DSK_SWIGLU_SKIP_PADDING;
      d2.struct_size = offsetof(dsk_swiglu_quant_desc, flags); /* old callers: flags 0, padding written 0 */
      TU_CHECK_OK(&C, dsk_swiglu_quant(g_ctx, &d2));
      TU_CHECK(&C, memcmp(q2, q, sizeof q) == 0, "swiglu: struct_size offsetof(flags) did not act as flags 0");
      free(pk2);
    }
    free(pk);
    free(pm);
  }
  free(D1);
}

/* ============================================================== 5. GEMM */
typedef struct gemm_case {
  const char *name;
  dsk_moe_src_fmt src;
  int64_t N, K, EL, A, BM;
  int64_t counts[8];
} gemm_case;

static void test_gemm(void) {
  const gemm_case cs[] = {
      {"fp8xfp4 A64 BM64", DSK_MOE_SRC_MXFP4, 256, 256, 4, 64, 64, {5, 0, 70, 1}},
      {"fp8xfp4 A128 BM64", DSK_MOE_SRC_MXFP4, 128, 384, 4, 128, 64, {0, 130, 0, 64}},
      {"fp8xfp4 A128 BM128 one expert", DSK_MOE_SRC_MXFP4, 256, 256, 3, 128, 128, {0, 0, 200}},
      {"fp8xfp8 A64 BM64", DSK_MOE_SRC_FP8_E8M0, 256, 384, 4, 64, 64, {3, 64, 0, 65}},
      {"fp8xfp8 A128 BM128", DSK_MOE_SRC_FP8_E8M0, 128, 256, 2, 128, 128, {129, 7}},
  };
  tu_rng r = tu_rng_make(51);
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    const gemm_case *g = &cs[c];
    const int64_t N = g->N, K = g->K, EL = g->EL, A = g->A;
    /* B: checkpoint experts of shape [N, K] = "w1" of (H = K, I = N); prepared with TP 1 -> W13 rows [w1; w3]:
     * use E_local experts whose W13 is [2N, K]: the GEMM runs with N2 = 2N. */
    ckpt ck;
    ck_make(&ck, g->src, EL, K, N, 600 + c, 1.0);
    const dsk_moe_wfmt wf = g->src == DSK_MOE_SRC_MXFP4 ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8;
    prepared p;
    prep_alloc(&p, wf, EL, K, N);
    TU_CHECK_OK(&C, prep_lib(&ck, 0, EL, 1, 0, &p));
    const int64_t N2 = 2 * N;
    /* layout: segments of round_up(count, A) */
    int64_t Msum = 0;
    for (int64_t e = 0; e < EL; e++) Msum += (g->counts[e] + A - 1) / A * A;
    Msum += A; /* one trailing padding block */
    int32_t *mind = xmalloc(sizeof(int32_t) * (size_t)Msum);
    uint8_t *Aq = xmalloc((size_t)(Msum * K)), *As = xmalloc((size_t)(Msum * (K / 128)));
    int64_t row = 0;
    for (int64_t rr = 0; rr < Msum; rr++) mind[rr] = -1;
    for (int64_t e = 0; e < EL; e++) {
      for (int64_t i = 0; i < g->counts[e]; i++) mind[row + i] = (int32_t)e;
      row += (g->counts[e] + A - 1) / A * A;
    }
    for (int64_t rr = 0; rr < Msum; rr++) {
      for (int64_t k = 0; k < K; k++) {
        uint8_t q = (uint8_t)tu_int(&r, 0, 0xFE);
        if ((q & 0x7F) == 0x7F) q = 0x38;
        Aq[rr * K + k] = mind[rr] >= 0 ? q : 0x7F; /* padding rows: NaN */
      }
      for (int64_t gk = 0; gk < K / 128; gk++) As[rr * (K / 128) + gk] = (uint8_t)tu_int(&r, 110, 120);
    }
    const int64_t Wa = t_words(1, Msum, K / 128);
    int32_t *sfa = xmalloc(sizeof(int32_t) * (size_t)Wa);
    memset(sfa, 0, sizeof(int32_t) * (size_t)Wa);
    for (int64_t rr = 0; rr < Msum; rr++)
      for (int64_t gk = 0; gk < K / 128; gk++) t_put(sfa, Msum, K / 128, 0, rr, gk, As[rr * (K / 128) + gk]);
    const int64_t Ds = N2 + 8;
    dsk_bf16 *D = xmalloc(sizeof(dsk_bf16) * (size_t)(Msum * Ds));
    memset(D, 0xFF, sizeof(dsk_bf16) * (size_t)(Msum * Ds));
    dsk_moe_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.M_sum = Msum; d.N = N2; d.K = K; d.E_local = EL; d.A_used = A; d.expected_m = 0;
    d.A = Aq; d.A_stride = K;
    d.sfa.words = sfa; d.sfa.groups = 1; d.sfa.mn = Msum; d.sfa.sf_k = K / 128;
    d.m_indices = mind; d.b_fmt = wf; d.B = p.w13;
    d.sfb.words = p.sf13; d.sfb.groups = EL; d.sfb.mn = N2; d.sfb.sf_k = wf == DSK_MOE_W_MXFP4 ? K / 32 : K / 128;
    d.D = D; d.D_stride = Ds;
    d.tactic.op = DSK_OP_MOE_GEMM; d.tactic.version = DSK_MOE_GEMM_TACTIC_VERSION;
    d.tactic.v[0] = (int32_t)g->BM; d.tactic.v[1] = 128; d.tactic.v[2] = 1;
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    TU_CHECK_OK(&C, dsk_moe_gemm_plan(g_ctx, &d, &pi));
    TU_CHECK(&C, pi.tactic_source == DSK_TACTIC_FORCED && pi.tactic.v[0] == g->BM, "gemm plan tactic");
    int64_t cnt = 0;
    d.counters = &cnt;
    TU_CHECK_OK(&C, dsk_moe_gemm(g_ctx, &d));
    /* fp64 on the dequantized checkpoint: rows n < N are w1, n >= N are w3 */
    double *ref = xmalloc(sizeof(double) * (size_t)(Msum * N2)), *got = xmalloc(sizeof(double) * (size_t)(Msum * N2));
    int64_t nreal = 0, untouched_bad = 0, nonfinite = 0;
    for (int64_t rr = 0; rr < Msum; rr++) {
      const int32_t e = mind[rr];
      const int32_t blk = mind[(rr / g->BM) * g->BM];
      if (e < 0) {
        if (blk < 0)
          for (int64_t n = 0; n < Ds; n++) untouched_bad += D[rr * Ds + n] != 0xFFFF;
        continue;
      }
      for (int64_t n = 0; n < N2; n++) {
        const double *wrow = n < N ? ck.d1[e] + n * K : ck.d3[e] + (n - N) * K;
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += e4(Aq[rr * K + k]) * ue(As[rr * (K / 128) + k / 128]) * wrow[k];
        ref[nreal] = acc;
        got[nreal] = bf(D[rr * Ds + n]);
        nonfinite += !isfinite(got[nreal]);
        nreal++;
      }
      for (int64_t n = N2; n < Ds; n++) untouched_bad += D[rr * Ds + n] != 0xFFFF;
    }
    const double df = diff_metric(ref, got, nreal);
    if (df > g_worst_gemm) g_worst_gemm = df;
    printf("moe_gemm %-32s M_sum %4lld N %3lld K %3lld: diff %.3e (%lld real rows)\n", g->name, (long long)Msum,
           (long long)N2, (long long)K, df, (long long)(nreal / N2));
    TU_CHECK(&C, df <= 0.01 && nonfinite == 0, "gemm %s: diff %.3g, %lld non-finite", g->name, df, (long long)nonfinite);
    if (df > 1e-4) printf("WARNING: gemm %s diff %.3g > 1e-4 (expected <~ 1e-5)\n", g->name, df);
    TU_CHECK(&C, untouched_bad == 0, "gemm %s: %lld elements of skipped blocks / stride gaps written", g->name,
             (long long)untouched_bad);
    TU_CHECK(&C, cnt == 0, "gemm %s: bad blocks counted %lld", g->name, (long long)cnt);

    /* bad inputs on this shape */
    dsk_moe_gemm_desc b = d;
    if (A == 64) {
      b.tactic.v[0] = 128;
      CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "BLOCK_M");
      CHECK_BAD(dsk_moe_gemm_plan(g_ctx, &b, &pi), "does not divide A_used");
    }
    b = d;
    b.sfb.sf_k = wf == DSK_MOE_W_MXFP4 ? K / 128 : K / 32;
    CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "sfb.sf_k");
    b = d;
    b.sfa.mn = Msum - 1;
    CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "sfa.mn");
    b = d;
    b.sfb.groups = EL + 1;
    CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "sfb.groups");
    b = d;
    b.A_used = 96;
    CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "A_used");
    b = d;
    b.M_sum = Msum - 1;
    b.sfa.mn = Msum - 1;
    CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "M_sum");
    b = d;
    b.tactic.v[2] = 4;
    if ((K / 4) % 128) CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "split-K");
    if ((K / 2) % 128 == 0) { /* split-K 2: the plan asks for the partials; a run without them is refused */
      b = d;
      b.tactic.v[2] = 2;
      TU_CHECK_OK(&C, dsk_moe_gemm_plan(g_ctx, &b, &pi));
      TU_CHECK(&C, pi.workspace_bytes == 2 * Msum * d.N * 4, "gemm %s split 2: plan workspace %lld, want %lld", g->name,
               (long long)pi.workspace_bytes, (long long)(2 * Msum * d.N * 4));
      CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "workspace");
    }
    b = d;
    b.m_indices = NULL;
    CHECK_BAD(dsk_moe_gemm(g_ctx, &b), "m_indices");
    /* a bad m_indices value at a block start: skipped and counted, its rows not written */
    mind[0] = (int32_t)(EL + 3);
    memset(D, 0xFF, sizeof(dsk_bf16) * (size_t)(Msum * Ds));
    cnt = 0;
    TU_CHECK_OK(&C, dsk_moe_gemm(g_ctx, &d));
    int64_t w0 = 0;
    for (int64_t n = 0; n < Ds; n++) w0 += D[n] != 0xFFFF;
    TU_CHECK(&C, cnt == 1 && w0 == 0, "gemm %s: bad m_indices: counted %lld, %lld elements written", g->name,
             (long long)cnt, (long long)w0);
    /* heuristic tactic (all zero) must be valid for A_used */
    b = d;
    memset(&b.tactic, 0, sizeof b.tactic);
    TU_CHECK_OK(&C, dsk_moe_gemm_plan(g_ctx, &b, &pi));
    TU_CHECK(&C, pi.tactic_source == DSK_TACTIC_HEURISTIC && A % pi.tactic.v[0] == 0 &&
                     (K / pi.tactic.v[2]) % 128 == 0,
             "gemm heuristic tactic BM %d split %d for A_used %lld", pi.tactic.v[0], pi.tactic.v[2], (long long)A);

    free(ref); free(got); free(mind); free(Aq); free(As); free(sfa); free(D);
    prep_free(&p);
    ck_free(&ck);
  }

  /* dense FP8 GEMM: M 5, N 256, K 384 */
  {
    const int64_t M = 5, N = 128, K = 384;
    ckpt ck;
    ck_make(&ck, DSK_MOE_SRC_FP8_E8M0, 1, K, N, 77, 1.0);
    prepared p;
    prep_alloc(&p, DSK_MOE_W_FP8, 1, K, N);
    TU_CHECK_OK(&C, prep_lib(&ck, 0, 1, 1, 0, &p));
    tu_rng rr = tu_rng_make(78);
    float *x = xmalloc(sizeof(float) * (size_t)(M * K));
    for (int64_t i = 0; i < M * K; i++) x[i] = (float)tu_normal(&rr);
    uint8_t *q = xmalloc((size_t)(M * K));
    int32_t *sfa = xmalloc(sizeof(int32_t) * (size_t)t_words(1, M, K / 128));
    dsk_fp8_quantize_desc fq;
    memset(&fq, 0, sizeof fq);
    fq.struct_size = sizeof fq;
    fq.rows = M; fq.K = K; fq.x_dtype = DSK_MOE_IN_F32; fq.x = x; fq.x_stride = K; fq.q = q; fq.q_stride = K;
    fq.sf_packed = sfa;
    TU_CHECK_OK(&C, dsk_fp8_quantize_1x128(g_ctx, &fq));
    dsk_bf16 *D = xmalloc(sizeof(dsk_bf16) * (size_t)(M * 2 * N));
    dsk_dense_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.M = M; d.N = 2 * N; d.K = K; d.A = q; d.A_stride = K;
    d.sfa.words = sfa; d.sfa.groups = 1; d.sfa.mn = M; d.sfa.sf_k = K / 128;
    d.B = p.w13; d.sfb.words = p.sf13; d.sfb.groups = 1; d.sfb.mn = 2 * N; d.sfb.sf_k = K / 128;
    d.D = D; d.D_stride = 2 * N;
    TU_CHECK_OK(&C, dsk_dense_fp8_gemm(g_ctx, &d));
    double *ref = xmalloc(sizeof(double) * (size_t)(M * 2 * N)), *got = xmalloc(sizeof(double) * (size_t)(M * 2 * N));
    for (int64_t m = 0; m < M; m++) {
      double xd[384];
      t_qdq(x + m * K, K, xd);
      for (int64_t n = 0; n < 2 * N; n++) {
        const double *wrow = n < N ? ck.d1[0] + n * K : ck.d3[0] + (n - N) * K;
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += xd[k] * wrow[k];
        ref[m * 2 * N + n] = acc;
        got[m * 2 * N + n] = bf(D[m * 2 * N + n]);
      }
    }
    const double df = diff_metric(ref, got, M * 2 * N);
    printf("dense_fp8_gemm M %lld N %lld K %lld: diff %.3e\n", (long long)M, (long long)(2 * N), (long long)K, df);
    if (df > g_worst_gemm) g_worst_gemm = df;
    TU_CHECK(&C, df <= 0.01, "dense gemm diff %.3g", df);
    d.tactic.op = DSK_OP_MOE_DENSE_GEMM; d.tactic.version = 1; d.tactic.v[0] = 48; d.tactic.v[1] = 64; d.tactic.v[2] = 1;
    CHECK_BAD(dsk_dense_fp8_gemm(g_ctx, &d), "BLOCK_M");
    free(x); free(q); free(sfa); free(D); free(ref); free(got);
    prep_free(&p);
    ck_free(&ck);
  }
}

/* ======================================================== 6. forward */
typedef struct fwd_case {
  const char *name;
  dsk_moe_src_fmt src;       /* routed checkpoint format */
  dsk_moe_src_fmt shared_src; /* 0 = no shared expert */
  int64_t H, I, Is, E, EL, off, topk, tp, rank;
  int score, router;
  float scale, limit;
  double xgain;              /* activation magnitude (clamp activity) */
  int ids_mode;              /* 0 router, 1 all tokens on expert off, 2 bad ids, 3 only 2 experts used */
  int is_glm;
} fwd_case;

/* fp64 forward for token t (§6.2 with the same quantization points). */
static void ref_token(const fwd_case *fc, const ckpt *ck, const ckpt *sck, const dsk_bf16 *x, const int32_t *ids,
                      const double *w, int64_t t, double *y) {
  const int64_t H = fc->H, I = fc->I, Ir = I / fc->tp, r0 = fc->rank * Ir, K = fc->topk;
  float xf[1024] = {0};
  double xd[1024] = {0}, hd[1024] = {0};
  float hf[1024] = {0};
  for (int64_t h = 0; h < H; h++) xf[h] = dsk_bf16_to_f32(x[t * H + h]);
  t_qdq(xf, H, xd);
  for (int64_t h = 0; h < H; h++) y[h] = 0;
  for (int pass = 0; pass <= K; pass++) {
    const ckpt *c;
    int64_t e, Iu, rr0;
    double wt, lim;
    if (pass < K) {
      const int32_t id = ids[t * K + pass];
      if (id < 0 || id >= fc->E || id < fc->off || id >= fc->off + fc->EL) continue;
      c = ck; /* the checkpoint holds every expert: global id */
      e = id;
      Iu = Ir;
      rr0 = r0;
      wt = w[t * K + pass];
      lim = fc->limit;
    } else {
      if (!sck) break;
      c = sck;
      e = 0;
      Iu = fc->Is / fc->tp;
      rr0 = fc->rank * Iu;
      wt = 1.0;
      lim = fc->limit;
    }
    const int64_t Ifull = c->I;
    for (int64_t i = 0; i < Iu; i++) {
      const double *g1 = c->d1[e] + (rr0 + i) * H, *u1 = c->d3[e] + (rr0 + i) * H;
      double g = 0, u = 0;
      for (int64_t h = 0; h < H; h++) {
        g += g1[h] * xd[h];
        u += u1[h] * xd[h];
      }
      if (lim > 0) {
        g = fmin(g, lim);
        u = fmax(fmin(u, lim), -lim);
      }
      hf[i] = (float)(g / (1.0 + exp(-g)) * u);
    }
    t_qdq(hf, Iu, hd);
    for (int64_t h = 0; h < H; h++) {
      const double *w2 = c->d2[e] + h * Ifull + rr0;
      double acc = 0;
      for (int64_t i = 0; i < Iu; i++) acc += w2[i] * hd[i];
      y[h] += wt * acc;
    }
  }
}

static void run_forward(const fwd_case *fc, int64_t T, uint64_t seed) {
  const int64_t H = fc->H, E = fc->E, K = fc->topk, EL = fc->EL, Ir = fc->I / fc->tp;
  tu_rng r = tu_rng_make(seed);
  ckpt ck, sck;
  ck_make(&ck, fc->src, E, H, fc->I, seed * 3 + 1, 1.0);
  if (fc->shared_src) ck_make(&sck, fc->shared_src, 1, H, fc->Is, seed * 3 + 2, 1.0);
  const dsk_moe_wfmt wf = fc->src == DSK_MOE_SRC_MXFP4 ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8;
  prepared p, sp;
  prep_alloc(&p, wf, EL, H, Ir);
  TU_CHECK_OK(&C, prep_lib(&ck, fc->off, EL, fc->tp, fc->rank, &p));
  if (fc->shared_src) {
    prep_alloc(&sp, DSK_MOE_W_FP8, 1, H, fc->Is / fc->tp);
    TU_CHECK_OK(&C, prep_lib(&sck, 0, 1, fc->tp, fc->rank, &sp));
  }
  dsk_bf16 *x = xmalloc(sizeof(dsk_bf16) * (size_t)(T * H)), *gw = xmalloc(sizeof(dsk_bf16) * (size_t)(E * H));
  dsk_bf16 *y = xmalloc(sizeof(dsk_bf16) * (size_t)(T * H)), *y2 = xmalloc(sizeof(dsk_bf16) * (size_t)(T * H));
  tu_fill_bf16_normal(&r, x, (size_t)(T * H), fc->xgain);
  tu_fill_bf16_normal(&r, gw, (size_t)(E * H), 1.0 / sqrt((double)H));
  float *bias = xmalloc(sizeof(float) * (size_t)E);
  for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(&r) * 0.1);
  int64_t *tab = xmalloc(sizeof(int64_t) * (size_t)(97 * K));
  for (int64_t i = 0; i < 97; i++) {
    int64_t pm[DSK_MOE_MAX_EXPERTS];
    tu_permutation(&r, pm, E);
    for (int64_t k = 0; k < K; k++) tab[i * K + k] = pm[k];
  }
  int32_t *tok = xmalloc(sizeof(int32_t) * (size_t)T);
  for (int64_t t = 0; t < T; t++) tok[t] = (int32_t)tu_int(&r, 0, 96);
  int32_t *ids_in = xmalloc(sizeof(int32_t) * (size_t)(T * K)), *ids = xmalloc(sizeof(int32_t) * (size_t)(T * K));
  float *w_in = xmalloc(sizeof(float) * (size_t)(T * K)), *wl = xmalloc(sizeof(float) * (size_t)(T * K));
  for (int64_t t = 0; t < T; t++) {
    int64_t pm[DSK_MOE_MAX_EXPERTS];
    tu_permutation(&r, pm, E);
    for (int64_t k = 0; k < K; k++) {
      int32_t id = (int32_t)pm[k];
      if (fc->ids_mode == 1 && k == 0) id = (int32_t)fc->off; /* every token on one expert */
      if (fc->ids_mode == 1 && k > 0 && pm[k] == fc->off) id = (int32_t)pm[0];
      if (fc->ids_mode == 3) id = (int32_t)(fc->off + (k % 2)); /* two experts take everything */
      ids_in[t * K + k] = id;
      w_in[t * K + k] = (float)tu_uniform(&r);
    }
  }
  if (fc->ids_mode == 2) {
    ids_in[0] = -1;
    ids_in[K + 1] = (int32_t)(E + 5);
    if (T > 2) ids_in[2 * K] = -9;
  }

  dsk_moe_desc d;
  dsk_moe_desc_init(&d, fc->is_glm ? DSK_MOE_MODEL_GLM51 : DSK_MOE_MODEL_DSV4_FLASH);
  d.T = T; d.T_max = 64; d.H = H; d.E = E; d.E_local = EL; d.expert_offset = fc->off; d.topk = K;
  d.router = (dsk_moe_router)fc->router; d.score = (dsk_moe_score)fc->score; d.gate_w = gw; d.gate_bias = bias;
  d.tid2eid = tab; d.vocab = 97; d.token_ids = tok; d.routed_scaling_factor = fc->scale;
  if (fc->ids_mode) {
    d.ids_in = ids_in;
    d.weights_in = w_in;
  } else {
    d.ids_out = ids;
    d.weights_out = wl;
  }
  d.x = x; d.x_stride = H; d.y = y; d.y_stride = H;
  d.routed.fmt = wf; d.routed.E = EL; d.routed.I = Ir;
  d.routed.w13 = p.w13; d.routed.sf13 = p.sf13; d.routed.w2 = p.w2; d.routed.sf2 = p.sf2;
  d.swiglu_limit = fc->limit;
  memset(&d.shared, 0, sizeof d.shared);
  if (fc->shared_src) {
    d.shared.fmt = DSK_MOE_W_FP8; d.shared.E = 1; d.shared.I = fc->Is / fc->tp;
    d.shared.w13 = sp.w13; d.shared.sf13 = sp.sf13; d.shared.w2 = sp.w2; d.shared.sf2 = sp.sf2;
  }
  d.shared_limit = fc->limit;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&C, dsk_moe_plan(g_ctx, &d, &pi));
  void *ws = wsalloc(pi.workspace_bytes);
  memset(ws, 0x00, (size_t)pi.workspace_bytes);
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  int64_t cnt[DSK_MOE_NUM_COUNTERS] = {0};
  d.counters = cnt;
  memset(y, 0xFF, sizeof(dsk_bf16) * (size_t)(T * H));
  const double t0 = tu_now_us();
  TU_CHECK_OK(&C, dsk_moe_run(g_ctx, &d));
  const double us = tu_now_us() - t0;
  /* workspace contents never affect results */
  memset(ws, 0xFF, (size_t)pi.workspace_bytes);
  d.y = y2;
  int64_t cnt2[DSK_MOE_NUM_COUNTERS] = {0};
  d.counters = cnt2;
  TU_CHECK_OK(&C, dsk_moe_run(g_ctx, &d));
  TU_CHECK(&C, memcmp(y, y2, sizeof(dsk_bf16) * (size_t)(T * H)) == 0, "%s T %lld: result depends on the workspace",
           fc->name, (long long)T);
  /* the unfused chain (separate quantize, permute, SFA pack; on CUDA the
   * fused decode prologue is the default up to 256 assignments) gives the
   * same bits and counts */
  d.flags = DSK_MOE_RUN_UNFUSED;
  memset(y2, 0xFF, sizeof(dsk_bf16) * (size_t)(T * H));
  int64_t cnt3[DSK_MOE_NUM_COUNTERS] = {0};
  d.counters = cnt3;
  TU_CHECK_OK(&C, dsk_moe_run(g_ctx, &d));
  TU_CHECK(&C, memcmp(y, y2, sizeof(dsk_bf16) * (size_t)(T * H)) == 0, "%s T %lld: unfused run differs", fc->name,
           (long long)T);
  TU_CHECK(&C, memcmp(cnt, cnt3, sizeof cnt) == 0, "%s T %lld: unfused run counts differently", fc->name,
           (long long)T);
  d.flags = 0;

  /* the reference: own router (ids checked), own quantization, fp64 */
  const int32_t *use_ids = fc->ids_mode ? ids_in : ids;
  double *wref = xmalloc(sizeof(double) * (size_t)(T * K));
  int64_t id_mismatch = 0;
  double werr = 0;
  for (int64_t t = 0; t < T; t++) {
    if (fc->ids_mode) {
      for (int64_t k = 0; k < K; k++) wref[t * K + k] = w_in[t * K + k];
      continue;
    }
    double z[DSK_MOE_MAX_EXPERTS], wr[DSK_MOE_MAX_TOPK], gap = 1;
    int ir[DSK_MOE_MAX_TOPK];
    for (int64_t e = 0; e < E; e++) {
      z[e] = 0;
      for (int64_t h = 0; h < H; h++) z[e] += bf(x[t * H + h]) * bf(gw[e * H + h]);
    }
    if (fc->router == DSK_MOE_ROUTER_HASH) {
      double sum = 0;
      for (int64_t k = 0; k < K; k++) {
        ir[k] = (int)tab[tok[t] * K + k];
        wr[k] = t_score(fc->score, z[ir[k]]);
        sum += wr[k];
      }
      for (int64_t k = 0; k < K; k++) wr[k] = wr[k] / sum * fc->scale;
    } else {
      t_route(fc->score, z, bias, E, K, fc->scale, 1, ir, wr, &gap);
    }
    int same = 1;
    for (int64_t k = 0; k < K; k++) same &= ids[t * K + k] == ir[k];
    if (!same && gap >= 1e-6) id_mismatch++;
    for (int64_t k = 0; k < K; k++) {
      /* use the library's ids; weights from fp64 scores of those ids */
      double s = t_score(fc->score, z[ids[t * K + k]]), sum = 0;
      for (int64_t j = 0; j < K; j++) sum += t_score(fc->score, z[ids[t * K + j]]);
      wref[t * K + k] = s / sum * fc->scale;
      werr = fmax(werr, fabs(wl[t * K + k] - wref[t * K + k]) / fmax(wref[t * K + k], 1e-30));
    }
  }
  TU_CHECK(&C, id_mismatch == 0, "%s T %lld: router ids differ from fp64 on %lld tokens", fc->name, (long long)T,
           (long long)id_mismatch);
  TU_CHECK(&C, werr <= 1e-5, "%s T %lld: routing weights rel error %.3g", fc->name, (long long)T, werr);
  double *yr = xmalloc(sizeof(double) * (size_t)(T * H)), *yg = xmalloc(sizeof(double) * (size_t)(T * H));
  for (int64_t t = 0; t < T; t++) ref_token(fc, &ck, fc->shared_src ? &sck : NULL, x, use_ids, wref, t, yr + t * H);
  int64_t nf = 0;
  for (int64_t i = 0; i < T * H; i++) {
    yg[i] = bf(y[i]);
    nf += !isfinite(yg[i]);
  }
  const double df = diff_metric(yr, yg, T * H);
  if (fc->is_glm) {
    if (df > g_worst_fwd_glm) g_worst_fwd_glm = df;
  } else if (df > g_worst_fwd) {
    g_worst_fwd = df;
  }
  int64_t want_bad = fc->ids_mode == 2 ? (T > 2 ? 2 : 1) : 0;
  printf("moe_run %-34s T %3lld: diff %.3e  (%.1f ms, workspace %.2f MB)\n", fc->name, (long long)T, df, us * 1e-3,
         pi.workspace_bytes / 1048576.0);
  TU_CHECK(&C, df <= 0.01 && nf == 0, "%s T %lld: diff %.3g > 0.01 or %lld non-finite", fc->name, (long long)T, df,
           (long long)nf);
  TU_CHECK(&C, cnt[DSK_MOE_CNT_BAD_EXPERT] == want_bad, "%s: bad expert ids counted %lld, want %lld", fc->name,
           (long long)cnt[DSK_MOE_CNT_BAD_EXPERT], (long long)want_bad);
  int64_t other = 0;
  for (int i = 0; i < DSK_MOE_NUM_COUNTERS; i++)
    if (i != DSK_MOE_CNT_BAD_EXPERT) other += cnt[i];
  TU_CHECK(&C, other == 0, "%s: unexpected counters", fc->name);

  free(yr); free(yg); free(wref);
  dsk_mem_free(g_ctx, ws);
  free(x); free(gw); free(y); free(y2); free(bias); free(tab); free(tok); free(ids_in); free(ids); free(w_in); free(wl);
  prep_free(&p);
  ck_free(&ck);
  if (fc->shared_src) {
    prep_free(&sp);
    ck_free(&sck);
  }
}

static const fwd_case k_cases[] = {
    /* name                               routed src          shared src            H    I    Is  E   EL off k tp rk score router  scale limit xg ids glm */
    {"DSv4-Flash-like (MXFP4, shared)", DSK_MOE_SRC_MXFP4, DSK_MOE_SRC_FP8_E8M0, 256, 256, 256, 8, 8, 0, 6, 1, 0,
     DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_SCORED, 1.5f, 10.0f, 1.0, 0, 0},
    {"DSv4-Pro-like (I 384, scale 2.5)", DSK_MOE_SRC_MXFP4, DSK_MOE_SRC_FP8_E8M0, 256, 384, 384, 12, 12, 0, 6, 1, 0,
     DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_SCORED, 2.5f, 10.0f, 1.0, 0, 0},
    {"GLM-5.1-like (FP8 fp32 scales)", DSK_MOE_SRC_FP8_F32, DSK_MOE_SRC_FP8_F32, 384, 128, 128, 16, 16, 0, 8, 1, 0,
     DSK_MOE_SCORE_SIGMOID, DSK_MOE_ROUTER_SCORED, 2.5f, 0.0f, 1.0, 0, 1},
};
static const fwd_case k_extra[] = {
    {"DSv4 hash router", DSK_MOE_SRC_MXFP4, DSK_MOE_SRC_FP8_E8M0, 256, 128, 128, 8, 8, 0, 6, 1, 0,
     DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_HASH, 1.5f, 10.0f, 1.0, 0, 0},
    {"DSv4 EP (experts 4..7 of 8)", DSK_MOE_SRC_MXFP4, DSK_MOE_SRC_FP8_E8M0, 256, 128, 128, 8, 4, 4, 6, 1, 0,
     DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_SCORED, 1.5f, 10.0f, 1.0, 0, 0},
    {"DSv4 TP 2 rank 1, no shared", DSK_MOE_SRC_MXFP4, (dsk_moe_src_fmt)0, 256, 256, 0, 8, 8, 0, 6, 2, 1,
     DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_SCORED, 1.5f, 10.0f, 1.0, 0, 0},
    {"DSv4 clamp active (x * 24)", DSK_MOE_SRC_MXFP4, DSK_MOE_SRC_FP8_E8M0, 256, 128, 128, 8, 8, 0, 6, 1, 0,
     DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_SCORED, 1.5f, 10.0f, 24.0, 0, 0},
    {"all tokens on one expert", DSK_MOE_SRC_MXFP4, DSK_MOE_SRC_FP8_E8M0, 256, 128, 128, 8, 8, 0, 6, 1, 0,
     DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_SCORED, 1.5f, 10.0f, 1.0, 1, 0},
    {"two experts take all, six empty", DSK_MOE_SRC_FP8_E8M0, DSK_MOE_SRC_FP8_E8M0, 256, 128, 128, 8, 8, 0, 6, 1, 0,
     DSK_MOE_SCORE_SIGMOID, DSK_MOE_ROUTER_SCORED, 2.5f, 0.0f, 1.0, 3, 1},
    {"bad ids given (-1, E+5, -9)", DSK_MOE_SRC_MXFP4, DSK_MOE_SRC_FP8_E8M0, 256, 128, 128, 8, 8, 0, 6, 1, 0,
     DSK_MOE_SCORE_SQRT_SOFTPLUS, DSK_MOE_ROUTER_SCORED, 1.5f, 10.0f, 1.0, 2, 0},
};

static void test_forward(void) {
  const int64_t Ts[3] = {1, 7, 64};
  for (size_t c = 0; c < sizeof k_cases / sizeof k_cases[0]; c++)
    for (int i = 0; i < 3; i++) run_forward(&k_cases[c], Ts[i], 1000 + c * 10 + (uint64_t)i);
  for (size_t c = 0; c < sizeof k_extra / sizeof k_extra[0]; c++) run_forward(&k_extra[c], 7, 2000 + c);
  run_forward(&k_extra[3], 64, 3000); /* the clamp at a batch */
  /* more than 1,024 assignments (the size at which the CUDA permute runs
   * its count and rank kernels instead of the one-block plan) */
  run_forward(&k_cases[0], 200, 3001);
  run_forward(&k_extra[6], 200, 3002); /* bad ids */
}

static void test_forward_bad(void) {
  const int64_t H = 256, I = 128, E = 8;
  ckpt ck;
  ck_make(&ck, DSK_MOE_SRC_MXFP4, E, H, I, 5, 1.0);
  prepared p;
  prep_alloc(&p, DSK_MOE_W_MXFP4, E, H, I);
  TU_CHECK_OK(&C, prep_lib(&ck, 0, E, 1, 0, &p));
  dsk_bf16 x[256], y[256], gw[8 * 256];
  memset(x, 0, sizeof x);
  memset(gw, 0, sizeof gw);
  dsk_moe_desc d;
  dsk_moe_desc_init(&d, DSK_MOE_MODEL_DSV4_FLASH);
  TU_CHECK(&C, d.H == 4096 && d.E == 256 && d.topk == 6 && d.routed.fmt == DSK_MOE_W_MXFP4 && d.swiglu_limit == 10.0f &&
                   d.routed_scaling_factor == 1.5f, "desc_init Flash");
  dsk_moe_desc_init(&d, DSK_MOE_MODEL_DSV4_PRO);
  TU_CHECK(&C, d.H == 7168 && d.E == 384 && d.routed.I == 3072 && d.routed_scaling_factor == 2.5f, "desc_init Pro");
  dsk_moe_desc_init(&d, DSK_MOE_MODEL_GLM51);
  TU_CHECK(&C, d.H == 6144 && d.topk == 8 && d.score == DSK_MOE_SCORE_SIGMOID && d.swiglu_limit == 0.0f &&
                   d.routed.fmt == DSK_MOE_W_FP8, "desc_init GLM-5.1");
  dsk_moe_desc_init(&d, DSK_MOE_MODEL_DSV4_FLASH);
  d.T = 1; d.H = H; d.E = E; d.E_local = E; d.gate_w = gw; d.x = x; d.x_stride = H; d.y = y; d.y_stride = H;
  d.routed.E = E; d.routed.I = I; d.routed.w13 = p.w13; d.routed.sf13 = p.sf13; d.routed.w2 = p.w2; d.routed.sf2 = p.sf2;
  memset(&d.shared, 0, sizeof d.shared);
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&C, dsk_moe_plan(g_ctx, &d, &pi));
  void *ws = wsalloc(pi.workspace_bytes);
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  TU_CHECK_OK(&C, dsk_moe_run(g_ctx, &d));
  /* T = 1 -> A_used 64: a forced BLOCK_M 128 is rejected by plan and run */
  dsk_moe_desc b = d;
  b.fc1_tactic.op = DSK_OP_MOE_GEMM; b.fc1_tactic.version = 1;
  b.fc1_tactic.v[0] = 128; b.fc1_tactic.v[1] = 128; b.fc1_tactic.v[2] = 1;
  CHECK_BAD(dsk_moe_plan(g_ctx, &b, &pi), "fc1_tactic.v[0] (BLOCK_M) 128 does not divide A_used 64");
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "fc1_tactic");
  b.fc1_tactic.v[0] = 64;
  TU_CHECK_OK(&C, dsk_moe_run(g_ctx, &b));
  b = d; b.workspace_bytes -= 1;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "workspace_bytes");
  b = d; b.routed.E = E - 1;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "routed.E");
  b = d; b.routed.I = 100;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "routed.I");
  b = d; b.routed.sf13 = NULL;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "routed.sf13");
  b = d; b.expert_offset = 4;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "expert_offset");
  b = d; b.topk = 9;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "topk");
  int32_t ids1[6] = {0, 1, 2, 3, 4, 5};
  b = d; b.ids_in = ids1;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "weights_in");
  b = d; b.H = 200;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "H 200");
  b = d; b.align_cap = 96;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "align_cap");
  b = d; b.shared.w13 = p.w13; b.shared.fmt = DSK_MOE_W_MXFP4; b.shared.E = 1; b.shared.I = I;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "shared.fmt");
  b = d; b.swiglu_limit = -1;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "swiglu_limit");
  b = d; b.struct_size = 8;
  CHECK_BAD(dsk_moe_run(g_ctx, &b), "struct_size");
  b = d; b.T = 0; b.x = NULL; b.workspace = NULL;
  TU_CHECK_OK(&C, dsk_moe_run(g_ctx, &b)); /* T = 0: no-op */
  /* T_max: a plan for 64 tokens serves T = 7 */
  b = d; b.T = 1; b.T_max = 64;
  TU_CHECK_OK(&C, dsk_moe_plan(g_ctx, &b, &pi));
  TU_CHECK(&C, pi.workspace_bytes > d.workspace_bytes, "T_max plan is not larger (%lld <= %lld)",
           (long long)pi.workspace_bytes, (long long)d.workspace_bytes);
  dsk_mem_free(g_ctx, ws);
  prep_free(&p);
  ck_free(&ck);
}

int main(void) {
  g_ctx = tu_ctx("cpu");
  if (!g_ctx) return 1;
  const double t0 = tu_now_us();
  test_prepare();
  test_route();
  test_permute_gather();
  test_swiglu();
  test_gemm();
  test_forward();
  test_forward_bad();
  /* the harness check (`dsk check --only moe`), quick shapes */
  dsk_check_opts co;
  memset(&co, 0, sizeof co);
  co.quick = 1;
  co.seed = 7;
  TU_CHECK(&C, dsk_check_moe(g_ctx, &co, &C) == 0, "dsk_check_moe (quick) failed");
  printf("worst diff: grouped/dense GEMM %.3e, forward DSv4 %.3e, forward GLM-5.1 (re-quantized fp32 scales) %.3e "
         "(bound 0.01); %.1f s\n",
         g_worst_gemm, g_worst_fwd, g_worst_fwd_glm, (tu_now_us() - t0) * 1e-6);
  dsk_ctx_destroy(g_ctx);
  return tu_finish("test_moe", &C);
}
