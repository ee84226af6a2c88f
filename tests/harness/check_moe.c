/* check_moe.c - backend-vs-reference check of the MoE path
 * (spec/mxfp4-moe.md §8; docs/moe.md; harness.h says what runs).
 *
 * Data moves only through dsk_mem_*, so ctx may be a CUDA context. The cpu-ref
 * runs on a second (CPU) context on the same host inputs. The fp64 forward
 * here decodes the in-process checkpoint tensors on the fly (no code shared
 * with the library): x quantized 1x128 (§2.2), gate/up in fp64, clamp,
 * SwiGLU, h quantized 1x128 from fp64 h, down projection in fp64, routing
 * weights from fp64 scores of the experts the backend selected (its ids are
 * checked against the fp64 top-k, near ties excepted).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct mc_bufs {
  dsk_ctx *ctx;
  void *p[32];
  int n;
} mc_bufs;

static void *mc_alloc(mc_bufs *b, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st != DSK_STATUS_OK) return NULL;
  if (b->n >= 32) {
    *st = DSK_STATUS_OUT_OF_MEMORY;
    return NULL;
  }
  *st = dsk_mem_alloc(b->ctx, &p, bytes ? bytes : 16);
  if (*st == DSK_STATUS_OK) b->p[b->n++] = p;
  return p;
}
static void *mc_up(mc_bufs *b, const void *h, size_t bytes, dsk_status *st) {
  void *p = mc_alloc(b, bytes, st);
  if (*st == DSK_STATUS_OK) *st = dsk_mem_upload(b->ctx, p, h, bytes);
  return p;
}
static void mc_free(mc_bufs *b) {
  for (int i = 0; i < b->n; i++) dsk_mem_free(b->ctx, b->p[i]);
  b->n = 0;
}
static dsk_status mc_down(dsk_ctx *ctx, void *h, const void *d, size_t bytes) {
  dsk_status st = dsk_ctx_synchronize(ctx, NULL);
  return st == DSK_STATUS_OK ? dsk_mem_download(ctx, h, d, bytes) : st;
}
static void *mc_host(size_t n) { return calloc(1, n ? n : 1); }

static double mc_diff(const double *x, const double *y, int64_t n) {
  double sxy = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) {
    sxy += x[i] * y[i];
    s2 += x[i] * x[i] + y[i] * y[i];
  }
  return s2 == 0 ? 0.0 : 1.0 - 2.0 * sxy / s2;
}
static double mc_bf(dsk_bf16 b) { return (double)dsk_bf16_to_f32(b); }
static double mc_ue(uint8_t e) { return e == 0xFF ? NAN : ldexp(1.0, (int)e - 127); }
static int mc_ceil_log2f(float f) {
  int ex;
  float m = frexpf(f, &ex);
  return m == 0.5f ? ex - 1 : ex;
}
/* §2.2: dequantized 1x128 quantization of n floats */
static void mc_qdq(const float *v, int64_t n, double *out) {
  for (int64_t g = 0; g < n / 128; g++) {
    float amax = 0;
    for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(v[g * 128 + i]));
    const int e = mc_ceil_log2f(fmaxf(amax, 1e-4f) / 448.0f) + 127;
    for (int i = 0; i < 128; i++)
      out[g * 128 + i] = (double)dsk_e4m3_to_f32(dsk_e4m3_from_f32(ldexpf(v[g * 128 + i], 127 - e))) * mc_ue((uint8_t)e);
  }
}

/* ------------------------------------------------------------ formats */
static int check_formats(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  tu_rng r = tu_rng_make(o->seed ^ 0x4D58u);
  const int64_t R = 37, K = 384, nb = K / 32, ng = K / 128;
  float *x = mc_host(sizeof(float) * (size_t)(R * K));
  for (int64_t i = 0; i < R * K; i++) x[i] = (float)(tu_normal(&r) * ldexp(1.0, (int)((i / 32) % 50) - 25));
  x[5] = NAN;
  x[40 * 1 + 300] = INFINITY;
  dsk_ctx *cs[2] = {ctx, ref};
  /* NULL-initialised: a backend that does not serve the op stops the loop at
   * i = 0 and the second set is never allocated */
  uint8_t *q[2] = {NULL, NULL}, *s[2] = {NULL, NULL}, *f[2] = {NULL, NULL}, *fs[2] = {NULL, NULL};
  int32_t *pk[2] = {NULL, NULL};
  int64_t cnt[2][2];
  const int64_t W = dsk_sf_packed_words(1, R, ng);
  dsk_status st = DSK_STATUS_OK;
  for (int i = 0; i < 2; i++) {
    mc_bufs b = {cs[i], {0}, 0};
    float *dx = mc_up(&b, x, sizeof(float) * (size_t)(R * K), &st);
    uint8_t *dq = mc_alloc(&b, (size_t)(R * K / 2), &st), *ds = mc_alloc(&b, (size_t)(R * nb), &st);
    uint8_t *df = mc_alloc(&b, (size_t)(R * K), &st), *dfs = mc_alloc(&b, (size_t)(R * ng), &st);
    int32_t *dp = mc_alloc(&b, sizeof(int32_t) * (size_t)W, &st);
    int64_t *dc = mc_alloc(&b, sizeof(int64_t) * 2, &st);
    q[i] = mc_host((size_t)(R * K / 2)); s[i] = mc_host((size_t)(R * nb));
    f[i] = mc_host((size_t)(R * K)); fs[i] = mc_host((size_t)(R * ng)); pk[i] = mc_host(sizeof(int32_t) * (size_t)W);
    if (st == DSK_STATUS_OK) st = dsk_mem_set(cs[i], dc, 0, 16);
    if (st == DSK_STATUS_OK) {
      dsk_mx_quantize_desc d;
      memset(&d, 0, sizeof d);
      d.struct_size = sizeof d;
      d.rows = R; d.K = K; d.x_dtype = DSK_MOE_IN_F32; d.x = dx; d.x_stride = K;
      d.q = dq; d.q_stride = K / 2; d.sf = ds; d.sf_stride = nb; d.counters = dc;
      st = dsk_mx_quantize(cs[i], &d);
    }
    if (st == DSK_STATUS_OK) {
      dsk_fp8_quantize_desc d;
      memset(&d, 0, sizeof d);
      d.struct_size = sizeof d;
      d.rows = R; d.K = K; d.x_dtype = DSK_MOE_IN_F32; d.x = dx; d.x_stride = K;
      d.q = df; d.q_stride = K; d.sf = dfs; d.sf_stride = ng; d.sf_packed = dp; d.counters = dc + 1;
      st = dsk_fp8_quantize_1x128(cs[i], &d);
    }
    if (st == DSK_STATUS_OK) st = mc_down(cs[i], q[i], dq, (size_t)(R * K / 2));
    if (st == DSK_STATUS_OK) st = mc_down(cs[i], s[i], ds, (size_t)(R * nb));
    if (st == DSK_STATUS_OK) st = mc_down(cs[i], f[i], df, (size_t)(R * K));
    if (st == DSK_STATUS_OK) st = mc_down(cs[i], fs[i], dfs, (size_t)(R * ng));
    if (st == DSK_STATUS_OK) st = mc_down(cs[i], pk[i], dp, sizeof(int32_t) * (size_t)W);
    if (st == DSK_STATUS_OK) st = mc_down(cs[i], cnt[i], dc, sizeof(int64_t) * 2);
    mc_free(&b);
    if (st != DSK_STATUS_OK) break;
  }
  int rc = 0;
  if (st == DSK_STATUS_UNSUPPORTED) {
    fprintf(log, "moe formats: skipped on %s: %s\n", dsk_status_name(st), dsk_last_error());
  } else {
    TU_CHECK(c, st == DSK_STATUS_OK, "moe formats: %s: %s", dsk_status_name(st), dsk_last_error());
    if (st == DSK_STATUS_OK) {
      const int same = !memcmp(q[0], q[1], (size_t)(R * K / 2)) && !memcmp(s[0], s[1], (size_t)(R * nb)) &&
                       !memcmp(f[0], f[1], (size_t)(R * K)) && !memcmp(fs[0], fs[1], (size_t)(R * ng)) &&
                       !memcmp(pk[0], pk[1], sizeof(int32_t) * (size_t)W) && !memcmp(cnt[0], cnt[1], sizeof cnt[0]);
      TU_CHECK(c, same, "moe formats: MX / FP8 quantizer bytes or counters differ from the cpu-ref");
      TU_CHECK(c, cnt[1][0] == 2 && cnt[1][1] == 2, "moe formats: counters %lld %lld, want 2 2", (long long)cnt[1][0],
               (long long)cnt[1][1]);
      fprintf(log, "moe formats     mx_quantize + fp8_quantize_1x128 R %lld K %lld: %s\n", (long long)R, (long long)K,
              same ? "bit-exact" : "DIFFERENT");
      rc = !same;
    } else {
      rc = 1;
    }
  }
  for (int i = 0; i < 2; i++) {
    free(q[i]); free(s[i]); free(f[i]); free(fs[i]); free(pk[i]);
  }
  free(x);
  return rc;
}

/* ------------------------------------------------------------ forward */
typedef struct mc_case {
  const char *name;
  int mx;                        /* routed MXFP4 (DSv4) or FP8 (GLM-5.1) */
  int64_t H, I, Is, E, EL, topk;
  int score;
  float scale, limit;
} mc_case;

/* One layer's checkpoint for EL local experts (+ shared), host. */
typedef struct mc_ckpt {
  int64_t H, I, Is, EL;
  int mx;
  uint8_t **w[3], **s[3];        /* w1, w3, w2 per expert */
  uint8_t *sw[3], *ss[3];        /* shared w1, w3, w2 (FP8 + UE8M0 128x128) */
} mc_ckpt;

static void gen_fp8(tu_rng *r, int64_t rows, int64_t K, uint8_t **w, uint8_t **s) {
  const double sigma = 1.0 / sqrt((double)K);
  *w = mc_host((size_t)(rows * K));
  *s = mc_host((size_t)(rows / 128 * (K / 128)));
  for (int64_t a = 0; a < rows / 128; a++)
    for (int64_t b = 0; b < K / 128; b++) {
      /* values N(0, sigma^2) with this block's amax about 4 sigma: scale = 2^ceil(log2(4 sigma / 448)) */
      const int e = mc_ceil_log2f((float)(4.5 * sigma / 448.0)) + 127;
      (*s)[a * (K / 128) + b] = (uint8_t)e;
      for (int64_t i = 0; i < 128; i++)
        for (int64_t k = 0; k < 128; k++)
          (*w)[(a * 128 + i) * K + b * 128 + k] = dsk_e4m3_from_f32((float)ldexp(tu_normal(r) * sigma, 127 - e));
    }
}
static void gen_mx(tu_rng *r, int64_t rows, int64_t K, uint8_t **w, uint8_t **s) {
  *w = mc_host((size_t)(rows * K / 2));
  *s = mc_host((size_t)(rows * K / 32));
  const int base = 127 + (int)lround(log2(1.0 / (2.93 * sqrt((double)K))));
  for (int64_t i = 0; i < rows * K / 2; i++) (*w)[i] = (uint8_t)tu_next(r);
  for (int64_t i = 0; i < rows * K / 32; i++) (*s)[i] = (uint8_t)(base + (int)tu_int(r, -1, 1));
}
static void ck_make(mc_ckpt *k, const mc_case *cs, uint64_t seed) {
  tu_rng r = tu_rng_make(seed);
  k->H = cs->H; k->I = cs->I; k->Is = cs->Is; k->EL = cs->EL; k->mx = cs->mx;
  for (int j = 0; j < 3; j++) {
    k->w[j] = mc_host(sizeof(uint8_t *) * (size_t)cs->EL);
    k->s[j] = mc_host(sizeof(uint8_t *) * (size_t)cs->EL);
  }
  for (int64_t e = 0; e < cs->EL; e++)
    for (int j = 0; j < 3; j++) {
      const int64_t rows = j < 2 ? cs->I : cs->H, K = j < 2 ? cs->H : cs->I;
      if (cs->mx) gen_mx(&r, rows, K, &k->w[j][e], &k->s[j][e]);
      else gen_fp8(&r, rows, K, &k->w[j][e], &k->s[j][e]);
    }
  for (int j = 0; j < 3; j++) {
    k->sw[j] = k->ss[j] = NULL;
    if (cs->Is) gen_fp8(&r, j < 2 ? cs->Is : cs->H, j < 2 ? cs->H : cs->Is, &k->sw[j], &k->ss[j]);
  }
}
static void ck_free(mc_ckpt *k) {
  for (int j = 0; j < 3; j++) {
    for (int64_t e = 0; e < k->EL; e++) {
      free(k->w[j][e]);
      free(k->s[j][e]);
    }
    free(k->w[j]);
    free(k->s[j]);
    free(k->sw[j]);
    free(k->ss[j]);
  }
}
/* Row `row` of a checkpoint tensor [rows, K] decoded to fp64 through
 * lookup tables (code values and the 256 UE8M0 powers of two). */
typedef struct mc_lut { double e4[256], e2[16], ue[256]; } mc_lut;
static void lut_init(mc_lut *l) {
  for (int i = 0; i < 256; i++) {
    l->e4[i] = (double)dsk_e4m3_to_f32((uint8_t)i);
    l->ue[i] = mc_ue((uint8_t)i);
  }
  for (int i = 0; i < 16; i++) l->e2[i] = (double)dsk_e2m1_to_f32((uint8_t)i);
}
static void ck_row(const mc_lut *l, int mx, const uint8_t *w, const uint8_t *s, int64_t K, int64_t row, double *out) {
  if (mx) {
    const uint8_t *b = w + row * (K / 2), *sc = s + row * (K / 32);
    for (int64_t k = 0; k < K; k++) out[k] = l->e2[(b[k / 2] >> (4 * (k % 2))) & 15] * l->ue[sc[k / 32]];
  } else {
    const uint8_t *b = w + row * K, *sc = s + (row / 128) * (K / 128);
    for (int64_t k = 0; k < K; k++) out[k] = l->e4[b[k]] * l->ue[sc[k / 128]];
  }
}

/* fp64 expert: out[H] += wt * W2 . q(silu(min(W1 xd, L)) * clamp(W3 xd)) */
static void oracle_expert(const mc_lut *l, int mx, const uint8_t *const *w, const uint8_t *const *s, int64_t H,
                          int64_t I, float lim, const double *xd, double wt, double *out) {
  float *h = mc_host(sizeof(float) * (size_t)I);
  double *hq = mc_host(sizeof(double) * (size_t)I), *r1 = mc_host(sizeof(double) * (size_t)(H > I ? H : I)),
         *r3 = mc_host(sizeof(double) * (size_t)H);
  for (int64_t i = 0; i < I; i++) {
    ck_row(l, mx, w[0], s[0], H, i, r1);
    ck_row(l, mx, w[1], s[1], H, i, r3);
    double g = 0, u = 0;
    for (int64_t k = 0; k < H; k++) {
      g += r1[k] * xd[k];
      u += r3[k] * xd[k];
    }
    if (lim > 0) {
      g = fmin(g, lim);
      u = fmax(fmin(u, lim), -lim);
    }
    h[i] = (float)(g / (1.0 + exp(-g)) * u);
  }
  mc_qdq(h, I, hq);
  for (int64_t n = 0; n < H; n++) {
    ck_row(l, mx, w[2], s[2], I, n, r1);
    double acc = 0;
    for (int64_t i = 0; i < I; i++) acc += r1[i] * hq[i];
    out[n] += wt * acc;
  }
  free(h);
  free(hq);
  free(r1);
  free(r3);
}

static double score_of(int score, double z) {
  if (score == DSK_MOE_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-z));
  return sqrt(z > 30 ? z : log1p(exp(z)));
}

/* Prepares, uploads and runs one layer on one context; y (host) out, plus ids/weights. */
static dsk_status run_layer(dsk_ctx *cx, const mc_case *cs, const mc_ckpt *k, int64_t T, int64_t off,
                            const dsk_bf16 *x, const dsk_bf16 *gw, const float *bias, dsk_bf16 *y, int32_t *ids,
                            float *wts, const void *host_prep[8], const int64_t prep_bytes[8], int64_t *cnt) {
  mc_bufs b = {cx, {0}, 0};
  dsk_status st = DSK_STATUS_OK;
  const int64_t H = cs->H, E = cs->E, K = cs->topk;
  void *dp[8];
  for (int i = 0; i < 8; i++) dp[i] = prep_bytes[i] > 0 ? mc_up(&b, host_prep[i], (size_t)prep_bytes[i], &st) : NULL;
  dsk_bf16 *dx = mc_up(&b, x, sizeof(dsk_bf16) * (size_t)(T * H), &st);
  dsk_bf16 *dg = mc_up(&b, gw, sizeof(dsk_bf16) * (size_t)(E * H), &st);
  float *db = mc_up(&b, bias, sizeof(float) * (size_t)E, &st);
  dsk_bf16 *dy = mc_alloc(&b, sizeof(dsk_bf16) * (size_t)(T * H), &st);
  int32_t *di = mc_alloc(&b, sizeof(int32_t) * (size_t)(T * K), &st);
  float *dw = mc_alloc(&b, sizeof(float) * (size_t)(T * K), &st);
  int64_t *dc = mc_alloc(&b, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS, &st);
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, dy, 0xFF, sizeof(dsk_bf16) * (size_t)(T * H));
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, dc, 0, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS);
  dsk_moe_desc d;
  dsk_moe_desc_init(&d, cs->mx ? DSK_MOE_MODEL_DSV4_FLASH : DSK_MOE_MODEL_GLM51);
  d.T = T; d.H = H; d.E = E; d.E_local = cs->EL; d.expert_offset = off; d.topk = K;
  d.score = (dsk_moe_score)cs->score; d.routed_scaling_factor = cs->scale;
  d.gate_w = dg; d.gate_bias = db; d.x = dx; d.x_stride = H; d.y = dy; d.y_stride = H;
  d.ids_out = di; d.weights_out = dw;
  d.routed.fmt = cs->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8; d.routed.E = cs->EL; d.routed.I = cs->I;
  d.routed.w13 = dp[0]; d.routed.sf13 = dp[1]; d.routed.w2 = dp[2]; d.routed.sf2 = dp[3];
  d.swiglu_limit = cs->limit;
  memset(&d.shared, 0, sizeof d.shared);
  if (cs->Is) {
    d.shared.fmt = DSK_MOE_W_FP8; d.shared.E = 1; d.shared.I = cs->Is;
    d.shared.w13 = dp[4]; d.shared.sf13 = dp[5]; d.shared.w2 = dp[6]; d.shared.sf2 = dp[7];
  }
  d.shared_limit = cs->limit;
  d.counters = dc;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  if (st == DSK_STATUS_OK) st = dsk_moe_plan(cx, &d, &pi);
  void *ws = st == DSK_STATUS_OK ? mc_alloc(&b, (size_t)pi.workspace_bytes, &st) : NULL;
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  if (st == DSK_STATUS_OK) st = dsk_moe_run(cx, &d);
  if (st == DSK_STATUS_OK) st = mc_down(cx, y, dy, sizeof(dsk_bf16) * (size_t)(T * H));
  if (st == DSK_STATUS_OK) st = mc_down(cx, ids, di, sizeof(int32_t) * (size_t)(T * K));
  if (st == DSK_STATUS_OK) st = mc_down(cx, wts, dw, sizeof(float) * (size_t)(T * K));
  if (st == DSK_STATUS_OK) st = mc_down(cx, cnt, dc, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS);
  mc_free(&b);
  return st;
}

/* Host preparation of the case's experts on the CPU context `ref`. */
static dsk_status prepare_host(dsk_ctx *ref, const mc_case *cs, const mc_ckpt *k, int64_t off, void *hp[8],
                               int64_t pb[8]) {
  int64_t by[4];
  dsk_status st = DSK_STATUS_OK;
  for (int i = 0; i < 8; i++) {
    hp[i] = NULL;
    pb[i] = 0;
  }
  for (int part = 0; part < 2 && st == DSK_STATUS_OK; part++) {
    if (part == 1 && !cs->Is) break;
    const int mx = part == 0 && cs->mx;
    const int64_t E = part == 0 ? cs->EL : 1, I = part == 0 ? cs->I : cs->Is;
    dsk_moe_weights_bytes(mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8, E, cs->H, I, by);
    for (int i = 0; i < 4; i++) {
      pb[part * 4 + i] = by[i];
      hp[part * 4 + i] = mc_host((size_t)by[i]);
    }
    const void **a[6];
    for (int j = 0; j < 6; j++) a[j] = mc_host(sizeof(void *) * (size_t)E);
    for (int64_t e = 0; e < E; e++) {
      static const int order[3] = {0, 1, 2}; /* w1, w3, w2 */
      for (int j = 0; j < 3; j++) {
        a[2 * j][e] = part == 0 ? (const void *)k->w[order[j]][e] : (const void *)k->sw[j];
        a[2 * j + 1][e] = part == 0 ? (const void *)k->s[order[j]][e] : (const void *)k->ss[j];
      }
    }
    dsk_moe_prepare_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.src = mx ? DSK_MOE_SRC_MXFP4 : DSK_MOE_SRC_FP8_E8M0;
    d.E_local = E; d.expert_offset = part == 0 ? off : 0; d.H = cs->H; d.I = I; d.tp_size = 1;
    d.w1 = (const void *const *)a[0]; d.s1 = (const void *const *)a[1];
    d.w3 = (const void *const *)a[2]; d.s3 = (const void *const *)a[3];
    d.w2 = (const void *const *)a[4]; d.s2 = (const void *const *)a[5];
    d.w13 = hp[part * 4 + 0]; d.w13_bytes = by[0];
    d.sf13 = hp[part * 4 + 1]; d.sf13_bytes = by[1];
    d.w2_out = hp[part * 4 + 2]; d.w2_bytes = by[2];
    d.sf2 = hp[part * 4 + 3]; d.sf2_bytes = by[3];
    st = dsk_moe_prepare_weights(ref, &d);
    for (int j = 0; j < 6; j++) free((void *)a[j]);
  }
  return st;
}

static int check_case(dsk_ctx *ctx, dsk_ctx *ref, int same, const mc_case *cs, const int64_t *Ts, int nT,
                      int64_t oracle_T_max, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  const int64_t H = cs->H, E = cs->E, K = cs->topk, EL = cs->EL, off = E - EL;
  mc_ckpt ck;
  ck_make(&ck, cs, o->seed ^ (uint64_t)(H * 131 + E));
  void *hp[8];
  int64_t pb[8];
  int rc = 0;
  dsk_status st = prepare_host(ref, cs, &ck, off, hp, pb);
  TU_CHECK(c, st == DSK_STATUS_OK, "moe %s: prepare: %s: %s", cs->name, dsk_status_name(st), dsk_last_error());
  tu_rng r = tu_rng_make(o->seed ^ 0x6D6F65u ^ (uint64_t)E);
  mc_lut lut;
  lut_init(&lut);
  dsk_bf16 *gw = mc_host(sizeof(dsk_bf16) * (size_t)(E * H));
  float *bias = mc_host(sizeof(float) * (size_t)E);
  tu_fill_bf16_normal(&r, gw, (size_t)(E * H), 1.0 / sqrt((double)H));
  /* selection bias only: steer tokens to the local experts when EP slices them */
  for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(&r) * 0.05) + (EL < E && e >= off ? 10.0f : 0.0f);
  for (int ti = 0; ti < nT && st == DSK_STATUS_OK; ti++) {
    const int64_t T = Ts[ti];
    dsk_bf16 *x = mc_host(sizeof(dsk_bf16) * (size_t)(T * H)), *y = mc_host(sizeof(dsk_bf16) * (size_t)(T * H)),
             *yr = mc_host(sizeof(dsk_bf16) * (size_t)(T * H));
    int32_t *ids = mc_host(sizeof(int32_t) * (size_t)(T * K)), *idr = mc_host(sizeof(int32_t) * (size_t)(T * K));
    float *w = mc_host(sizeof(float) * (size_t)(T * K)), *wr = mc_host(sizeof(float) * (size_t)(T * K));
    double *a = mc_host(sizeof(double) * (size_t)(T * H)), *bref = mc_host(sizeof(double) * (size_t)(T * H));
    tu_fill_bf16_normal(&r, x, (size_t)(T * H), 1.0);
    int64_t cnt[DSK_MOE_NUM_COUNTERS] = {0}, cntr[DSK_MOE_NUM_COUNTERS] = {0};
    const double t0 = tu_now_us();
    st = run_layer(ctx, cs, &ck, T, off, x, gw, bias, y, ids, w, (const void **)hp, pb, cnt);
    const double us = tu_now_us() - t0;
    if (st == DSK_STATUS_UNSUPPORTED) {
      fprintf(log, "moe %-22s skipped on %s: %s\n", cs->name, dsk_status_name(st), dsk_last_error());
      st = DSK_STATUS_OK;
      free(x); free(y); free(yr); free(ids); free(idr); free(w); free(wr); free(a); free(bref);
      break;
    }
    TU_CHECK(c, st == DSK_STATUS_OK, "moe %s T %lld: %s: %s", cs->name, (long long)T, dsk_status_name(st),
             dsk_last_error());
    int64_t cnt_sum = 0;
    for (int i = 0; i < DSK_MOE_NUM_COUNTERS; i++) cnt_sum += cnt[i];
    TU_CHECK(c, cnt_sum == 0, "moe %s T %lld: %lld bad-data events counted on clean input", cs->name, (long long)T,
             (long long)cnt_sum);
    double d_ref = -1, d_fp64 = -1;
    int bad = st != DSK_STATUS_OK;
    for (int64_t i = 0; i < T * H && !bad; i++) a[i] = mc_bf(y[i]);
    if (!bad && !same) {
      dsk_status s2 = run_layer(ref, cs, &ck, T, off, x, gw, bias, yr, idr, wr, (const void **)hp, pb, cntr);
      TU_CHECK(c, s2 == DSK_STATUS_OK, "moe %s T %lld: cpu-ref: %s", cs->name, (long long)T, dsk_last_error());
      for (int64_t i = 0; i < T * H; i++) bref[i] = mc_bf(yr[i]);
      d_ref = mc_diff(bref, a, T * H);
      TU_CHECK(c, d_ref <= 0.01, "moe %s T %lld: diff vs cpu-ref %.3g > 0.01", cs->name, (long long)T, d_ref);
      if (d_ref > 1e-4) fprintf(log, "WARNING: moe %s T %lld: diff vs cpu-ref %.3g > 1e-4\n", cs->name, (long long)T, d_ref);
      bad |= d_ref > 0.01;
    }
    if (!bad && T <= oracle_T_max) {
      int64_t id_bad = 0;
      for (int64_t t = 0; t < T; t++) {
        double *z = mc_host(sizeof(double) * (size_t)E), *sc = mc_host(sizeof(double) * (size_t)E);
        for (int64_t e = 0; e < E; e++) {
          double acc = 0;
          for (int64_t h = 0; h < H; h++) acc += mc_bf(x[t * H + h]) * mc_bf(gw[e * H + h]);
          z[e] = acc;
          sc[e] = score_of(cs->score, acc);
        }
        /* the fp64 top-k (ties: lower id) and its margin */
        double sum = 0, kth = INFINITY, next = -INFINITY;
        for (int64_t k = 0; k < K; k++) {
          const int32_t id = ids[t * K + k];
          if (id < 0 || id >= E) {
            id_bad++;
            continue;
          }
          sum += sc[id];
          kth = fmin(kth, sc[id] + bias[id]);
        }
        for (int64_t e = 0; e < E; e++) {
          int taken = 0;
          for (int64_t k = 0; k < K; k++) taken |= ids[t * K + k] == e;
          if (!taken) next = fmax(next, sc[e] + bias[e]);
        }
        if (next > kth && (next - kth) > 1e-6 * fabs(kth)) id_bad++;
        float xf[16384];
        double *xd = mc_host(sizeof(double) * (size_t)H);
        for (int64_t h = 0; h < H; h++) xf[h] = dsk_bf16_to_f32(x[t * H + h]);
        mc_qdq(xf, H, xd);
        double *out = bref + t * H;
        for (int64_t h = 0; h < H; h++) out[h] = 0;
        for (int64_t k = 0; k < K; k++) {
          const int32_t id = ids[t * K + k];
          if (id < off || id >= off + EL) continue;
          const uint8_t *wv[3] = {ck.w[0][id - off], ck.w[1][id - off], ck.w[2][id - off]};
          const uint8_t *sv[3] = {ck.s[0][id - off], ck.s[1][id - off], ck.s[2][id - off]};
          oracle_expert(&lut, cs->mx, wv, sv, H, cs->I, cs->limit, xd, sc[id] / sum * cs->scale, out);
        }
        if (cs->Is) {
          const uint8_t *wv[3] = {ck.sw[0], ck.sw[1], ck.sw[2]}, *sv[3] = {ck.ss[0], ck.ss[1], ck.ss[2]};
          oracle_expert(&lut, 0, wv, sv, H, cs->Is, cs->limit, xd, 1.0, out);
        }
        free(z); free(sc); free(xd);
      }
      d_fp64 = mc_diff(bref, a, T * H);
      TU_CHECK(c, id_bad == 0, "moe %s T %lld: %lld tokens routed unlike fp64 (no near tie)", cs->name, (long long)T,
               (long long)id_bad);
      TU_CHECK(c, d_fp64 <= 0.01, "moe %s T %lld: diff vs fp64 %.3g > 0.01", cs->name, (long long)T, d_fp64);
      bad |= d_fp64 > 0.01 || id_bad;
    }
    char sr[32], sf[32];
    if (d_ref < 0) snprintf(sr, sizeof sr, "- (same backend)");
    else snprintf(sr, sizeof sr, "%.2e", d_ref);
    if (d_fp64 < 0) snprintf(sf, sizeof sf, "- (not run)");
    else snprintf(sf, sizeof sf, "%.2e", d_fp64);
    fprintf(log, "moe %-22s H %5lld I %4lld E %3lld/%-3lld top-%lld T %4lld: diff vs cpu-ref %s, vs fp64 %s (%.1f ms) %s\n",
            cs->name, (long long)H, (long long)cs->I, (long long)EL, (long long)E, (long long)K, (long long)T, sr, sf,
            us * 1e-3, bad ? "FAIL" : "ok");
    rc |= bad;
    free(x); free(y); free(yr); free(ids); free(idr); free(w); free(wr); free(a); free(bref);
  }
  for (int i = 0; i < 8; i++) free(hp[i]);
  free(gw);
  free(bias);
  ck_free(&ck);
  return rc || st != DSK_STATUS_OK;
}

int dsk_check_moe(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c) {
  FILE *log = o->log ? o->log : stdout;
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (dsk_ctx_get_info(ctx, &info) != DSK_STATUS_OK) return 1;
  const int same = !info.is_cuda && strcmp(info.backend, "cpu-ref") == 0;
  dsk_ctx *ref = NULL;
  dsk_ctx_opts ro;
  dsk_ctx_opts_init(&ro);
  ro.device = "cpu";
  ro.backend = "cpu-ref";
  dsk_status st = dsk_ctx_create(&ref, &ro);
  TU_CHECK(c, st == DSK_STATUS_OK, "moe: cpu-ref context: %s", dsk_last_error());
  if (st != DSK_STATUS_OK) return 1;
  int rc = check_formats(ctx, ref, o, c, log);
  static const mc_case quick[] = {
      {"DSv4-Flash (reduced)", 1, 256, 256, 256, 8, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"DSv4-Pro (reduced)", 1, 384, 384, 384, 12, 12, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
      {"GLM-5.1 (reduced)", 0, 384, 128, 128, 16, 16, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
      {"DSv4 EP 4 of 16", 1, 256, 128, 128, 16, 4, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
  };
  static const mc_case full[] = {
      {"DSv4-Flash EP 8/256", 1, 4096, 2048, 2048, 256, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"DSv4-Pro EP 8/384", 1, 7168, 3072, 3072, 384, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
      {"GLM-5.1 EP 8/256", 0, 6144, 2048, 2048, 256, 8, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
  };
  static const int64_t Tq[] = {1, 3, 64}, Tf[] = {1, 8, 64};
  if (o->quick) {
    for (size_t i = 0; i < sizeof quick / sizeof quick[0]; i++) rc |= check_case(ctx, ref, same, &quick[i], Tq, 3, 64, o, c, log);
  } else {
    for (size_t i = 0; i < sizeof full / sizeof full[0]; i++) rc |= check_case(ctx, ref, same, &full[i], Tf, 3, 8, o, c, log);
  }
  dsk_ctx_destroy(ref);
  return rc;
}
