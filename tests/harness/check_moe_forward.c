/* check_moe_forward.c - the layer part of the MoE check (check_moe.c says
 * what runs): dsk_moe_run on ctx against the cpu-ref and against an fp64
 * forward written here that decodes the in-process checkpoint tensors on the
 * fly (check_case), and one MoE row of `dsk demo` (dsk__moe_demo_row). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"

/* ------------------------------------------------------------ forward */
/* One layer's checkpoint for EL local experts (+ shared), host. */
typedef struct mc_ckpt {
  int64_t H, I, Is, EL;
  int mx;
  uint8_t **w[3], **s[3];        /* w1, w3, w2 per expert */
  uint8_t *sw[3], *ss[3];        /* shared w1, w3, w2 (FP8 + UE8M0 128x128) */
} mc_ckpt;

/* Large tensors (production shapes) copy random slices of a table of codes
 * of the same distribution instead of drawing every element. */
#define MC_BIG ((int64_t)1 << 22)
#define MC_TAB 65536
static void gen_fp8(tu_rng *r, int64_t rows, int64_t K, uint8_t **w, uint8_t **s) {
  const double sigma = 1.0 / sqrt((double)K);
  *w = mc_host((size_t)(rows * K));
  *s = mc_host((size_t)(rows / 128 * (K / 128)));
  if (rows * K > MC_BIG) {
    const int e = mc_ceil_log2f((float)(4.5 * sigma / 448.0)) + 127;
    uint8_t *tab = mc_host(MC_TAB);
    for (int i = 0; i < MC_TAB; i++) tab[i] = dsk_e4m3_from_f32((float)ldexp(tu_normal(r) * sigma, 127 - e));
    memset(*s, e, (size_t)(rows / 128 * (K / 128)));
    for (int64_t i = 0; i < rows * K; i += 4096) {
      const int64_t n = rows * K - i < 4096 ? rows * K - i : 4096;
      memcpy(*w + i, tab + tu_int(r, 0, MC_TAB - 4096), (size_t)n);
    }
    free(tab);
    return;
  }
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
  if (rows * K / 2 > MC_BIG)
    mc_fill_bytes(r, *w, (size_t)(rows * K / 2));
  else
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

/* Prepares, uploads and runs one layer on one context: y (host) out, plus
 * ids/weights (router mode) and the counters. ids_in / w_in (host, [T,
 * topk]) skip the router. reps > 0: after the first run, reps more runs are
 * timed (each bracketed by dsk_ctx_synchronize, host clock) and *median_us
 * set. */
typedef struct mc_layer_in {
  int64_t T, off;
  const dsk_bf16 *x, *gw;
  const float *bias;
  const int32_t *ids_in;
  const float *w_in;
  const void *const *prep;
  const int64_t *prep_bytes;
  int reps;
  int64_t *aux_diff; /* optional: with a shared expert on a context that makes streams, the layer runs again
                      * with aux_stream; the count of y values that differ from the first run (-1: not run) */
  int64_t *cap_diff; /* with aux_diff and dsk_check_capture set: the same under graph capture on a new stream */
  int64_t *unf_diff; /* optional: the layer again with DSK_MOE_RUN_UNFUSED (the separate quantize, permute
                      * and SFA pack instead of a backend's fused prologue); y values and counters that
                      * differ from the first run (-1: not run) */
} mc_layer_in;

dsk_check_capture_hooks *dsk_check_capture = NULL;

/* d's layer once more (its y already poisoned by the caller): into *diff the
 * y values (n, downloaded into y2) that differ from the first run's y, plus
 * the counters whose increments in this run alone differ from the first
 * run's (cnt) */
static dsk_status rerun_diff(dsk_ctx *cx, const dsk_moe_desc *d, const dsk_bf16 *y, const int64_t *cnt, dsk_bf16 *y2,
                             int64_t n, int64_t *diff) {
  int64_t c0[DSK_MOE_NUM_COUNTERS], c1[DSK_MOE_NUM_COUNTERS];
  dsk_status st = mc_down(cx, c0, d->counters, sizeof c0);
  if (st == DSK_STATUS_OK) st = dsk_moe_run(cx, d);
  if (st == DSK_STATUS_OK) st = mc_down(cx, y2, d->y, sizeof(dsk_bf16) * (size_t)n);
  if (st == DSK_STATUS_OK) st = mc_down(cx, c1, d->counters, sizeof c1);
  if (st == DSK_STATUS_OK) {
    int64_t nd = 0;
    for (int64_t i = 0; i < n; i++) nd += y2[i] != y[i];
    for (int i = 0; i < DSK_MOE_NUM_COUNTERS; i++) nd += c1[i] - c0[i] != cnt[i];
    *diff = nd;
  }
  return st;
}

static dsk_status run_layer(dsk_ctx *cx, const mc_case *cs, const mc_layer_in *in, dsk_bf16 *y, int32_t *ids,
                            float *wts, int64_t *cnt, double *median_us) {
  mc_bufs b = {cx, {0}, 0};
  dsk_status st = DSK_STATUS_OK;
  const int64_t T = in->T, H = cs->H, E = cs->E, K = cs->topk;
  void *dp[8];
  for (int i = 0; i < 8; i++)
    dp[i] = in->prep_bytes[i] > 0 ? mc_up(&b, in->prep[i], (size_t)in->prep_bytes[i], &st) : NULL;
  dsk_bf16 *dx = mc_up(&b, in->x, sizeof(dsk_bf16) * (size_t)(T * H), &st);
  dsk_bf16 *dg = mc_up(&b, in->gw, sizeof(dsk_bf16) * (size_t)(E * H), &st);
  float *db = mc_up(&b, in->bias, sizeof(float) * (size_t)E, &st);
  int32_t *dii = in->ids_in ? mc_up(&b, in->ids_in, sizeof(int32_t) * (size_t)(T * K), &st) : NULL;
  float *dwi = in->ids_in ? mc_up(&b, in->w_in, sizeof(float) * (size_t)(T * K), &st) : NULL;
  dsk_bf16 *dy = mc_alloc(&b, sizeof(dsk_bf16) * (size_t)(T * H), &st);
  int32_t *di = mc_alloc(&b, sizeof(int32_t) * (size_t)(T * K), &st);
  float *dw = mc_alloc(&b, sizeof(float) * (size_t)(T * K), &st);
  int64_t *dc = mc_alloc(&b, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS, &st);
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, dy, 0xFF, sizeof(dsk_bf16) * (size_t)(T * H));
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, di, 0xFF, sizeof(int32_t) * (size_t)(T * K));
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, dc, 0, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS);
  dsk_moe_desc d;
  dsk_moe_desc_init(&d, cs->mx ? DSK_MOE_MODEL_DSV4_FLASH : DSK_MOE_MODEL_GLM51);
  d.T = T; d.H = H; d.E = E; d.E_local = cs->EL; d.expert_offset = in->off; d.topk = K;
  d.score = (dsk_moe_score)cs->score; d.routed_scaling_factor = cs->scale;
  d.gate_w = dg; d.gate_bias = db; d.x = dx; d.x_stride = H; d.y = dy; d.y_stride = H;
  d.ids_in = dii; d.weights_in = dwi;
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
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, ws, 0xA5, (size_t)pi.workspace_bytes); /* contents never matter */
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  if (st == DSK_STATUS_OK) st = dsk_moe_run(cx, &d);
  if (st == DSK_STATUS_OK) st = mc_down(cx, cnt, dc, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS);
  if (st == DSK_STATUS_OK && in->reps > 0 && median_us) {
    double *us = mc_host(sizeof(double) * (size_t)in->reps);
    for (int i = 0; i < in->reps && st == DSK_STATUS_OK; i++) {
      st = dsk_ctx_synchronize(cx, NULL);
      const double t0 = tu_now_us();
      if (st == DSK_STATUS_OK) st = dsk_moe_run(cx, &d); /* same inputs: same outputs; counters add up */
      if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(cx, NULL);
      us[i] = tu_now_us() - t0;
    }
    *median_us = tu_median(us, in->reps);
    free(us);
  }
  if (st == DSK_STATUS_OK) st = mc_down(cx, y, dy, sizeof(dsk_bf16) * (size_t)(T * H));
  if (in->unf_diff) *in->unf_diff = -1;
  if (st == DSK_STATUS_OK && in->unf_diff) { /* the unfused chain: the same bits and counts */
    dsk_bf16 *y2 = mc_host(sizeof(dsk_bf16) * (size_t)(T * H));
    st = dsk_mem_set(cx, dy, 0xFF, sizeof(dsk_bf16) * (size_t)(T * H));
    if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, ws, 0x3C, (size_t)pi.workspace_bytes);
    d.flags |= DSK_MOE_RUN_UNFUSED;
    if (st == DSK_STATUS_OK) st = rerun_diff(cx, &d, y, cnt, y2, T * H, in->unf_diff);
    d.flags &= ~DSK_MOE_RUN_UNFUSED;
    free(y2);
  }
  if (in->aux_diff) *in->aux_diff = -1;
  void *aux = NULL;
  if (st == DSK_STATUS_OK && in->aux_diff && cs->Is) st = dsk_stream_create(cx, &aux);
  if (st == DSK_STATUS_OK && aux) { /* the shared expert beside the routed path: the same bits */
    d.aux_stream = aux;
    dsk_bf16 *y2 = mc_host(sizeof(dsk_bf16) * (size_t)(T * H));
    st = dsk_mem_set(cx, dy, 0xFF, sizeof(dsk_bf16) * (size_t)(T * H));
    if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, (uint8_t *)ws + pi.workspace_bytes / 2, 0x5A,
                                              (size_t)(pi.workspace_bytes - pi.workspace_bytes / 2));
    if (st == DSK_STATUS_OK) st = rerun_diff(cx, &d, y, cnt, y2, T * H, in->aux_diff);
    /* under capture: the call's stream a new one (a capture cannot run on the
     * context's default stream), aux_stream as above; the graph runs once */
    if (in->cap_diff) *in->cap_diff = -1;
    dsk_check_capture_hooks *hk = dsk_check_capture;
    void *main_s = NULL;
    if (st == DSK_STATUS_OK && hk && in->cap_diff) st = dsk_stream_create(cx, &main_s);
    if (st == DSK_STATUS_OK && main_s) {
      st = dsk_mem_set(cx, dy, 0xFF, sizeof(dsk_bf16) * (size_t)(T * H));
      if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(cx, NULL);
      d.stream = main_s;
      if (st == DSK_STATUS_OK && hk->begin(main_s, hk->user) != 0) st = DSK_STATUS_DEVICE;
      if (st == DSK_STATUS_OK) {
        const dsk_status sr = dsk_moe_run(cx, &d);
        /* ends the capture even after a failed call; the hook reports its own errors */
        const int er = hk->end_run(main_s, hk->user);
        st = sr != DSK_STATUS_OK ? sr : er != 0 ? DSK_STATUS_DEVICE : DSK_STATUS_OK;
      }
      d.stream = NULL;
      if (st == DSK_STATUS_OK) st = mc_down(cx, y2, dy, sizeof(dsk_bf16) * (size_t)(T * H));
      if (st == DSK_STATUS_OK) {
        int64_t nd = 0;
        for (int64_t i = 0; i < T * H; i++) nd += y2[i] != y[i];
        *in->cap_diff = nd;
        hk->runs++;
      }
      const dsk_status s3 = dsk_stream_destroy(cx, main_s);
      if (st == DSK_STATUS_OK) st = s3;
    }
    free(y2);
    const dsk_status s2 = dsk_stream_destroy(cx, aux);
    if (st == DSK_STATUS_OK) st = s2;
  }
  if (st == DSK_STATUS_OK) st = mc_down(cx, ids, di, sizeof(int32_t) * (size_t)(T * K));
  if (st == DSK_STATUS_OK) st = mc_down(cx, wts, dw, sizeof(float) * (size_t)(T * K));
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

/* Names of the routing modes (MC_ROUTER ..., check_moe.h) as printed. */
static const char *const k_mode_names[] = {"router", "all on one expert", "two experts", "given ids, 2 bad"};

/* Given ids and weights [T, topk] of a mode (local ids = off + l). */
static void make_ids(tu_rng *r, const mc_case *cs, int64_t off, int mode, int64_t T, int32_t *ids, float *w,
                     int64_t *nbad) {
  const int64_t K = cs->topk, EL = cs->EL;
  *nbad = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t k = 0; k < K; k++) {
      int64_t id = off + tu_int(r, 0, EL - 1);
      if (mode == MC_ONE_EXPERT) id = k == 0 ? off + 3 % EL : -1;
      if (mode == MC_TWO_EXPERTS) id = k == 0 ? off + 1 % EL : k == 1 ? off + EL - 1 : -1;
      ids[t * K + k] = (int32_t)id;
      w[t * K + k] = (float)(0.1 + 0.5 * tu_uniform(r));
    }
  if (mode == MC_BAD_IDS && K >= 3) {
    ids[1] = (int32_t)(cs->E + 5);      /* >= E: skipped and counted */
    ids[(T - 1) * K + 2] = -9;          /* < -1: skipped and counted */
    *nbad = 2;
  }
}

int check_case(dsk_ctx *ctx, dsk_ctx *ref, int same, const mc_case *cs, const int64_t *Ts, int nT, int mode,
               int64_t oracle_tokens, int64_t ref_tokens, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  const int64_t H = cs->H, E = cs->E, K = cs->topk, EL = cs->EL, off = E - EL;
  mc_ckpt ck;
  ck_make(&ck, cs, o->seed ^ (uint64_t)(H * 131 + E + EL));
  void *hp[8];
  int64_t pb[8];
  int rc = 0;
  dsk_status st = prepare_host(ref, cs, &ck, off, hp, pb);
  TU_CHECK(c, st == DSK_STATUS_OK, "moe %s: prepare: %s: %s", cs->name, dsk_status_name(st), dsk_last_error());
  tu_rng r = tu_rng_make(o->seed ^ 0x6D6F65u ^ (uint64_t)E ^ (uint64_t)mode << 20);
  mc_lut lut;
  lut_init(&lut);
  dsk_bf16 *gw = mc_host(sizeof(dsk_bf16) * (size_t)(E * H));
  float *bias = mc_host(sizeof(float) * (size_t)E);
  tu_fill_bf16_normal(&r, gw, (size_t)(E * H), 1.0 / sqrt((double)H));
  /* selection bias only: steer tokens to the local experts when EP slices them */
  for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(&r) * 0.05) + (EL < E && e >= off ? 10.0f : 0.0f);
  for (int ti = 0; ti < nT && st == DSK_STATUS_OK; ti++) {
    const int64_t T = Ts[ti];
    const int64_t Tr = same ? 0 : (ref_tokens < T ? ref_tokens : T), To = oracle_tokens < T ? oracle_tokens : T;
    const int64_t Tc = Tr > To ? Tr : To;
    dsk_bf16 *x = mc_host(sizeof(dsk_bf16) * (size_t)(T * H)), *y = mc_host(sizeof(dsk_bf16) * (size_t)(T * H)),
             *yr = mc_host(sizeof(dsk_bf16) * (size_t)((Tr ? Tr : 1) * H));
    int32_t *ids = mc_host(sizeof(int32_t) * (size_t)(T * K)), *idr = mc_host(sizeof(int32_t) * (size_t)(T * K));
    int32_t *ids_in = mode != MC_ROUTER ? mc_host(sizeof(int32_t) * (size_t)(T * K)) : NULL;
    float *w = mc_host(sizeof(float) * (size_t)(T * K)), *wr = mc_host(sizeof(float) * (size_t)(T * K));
    float *w_in = mode != MC_ROUTER ? mc_host(sizeof(float) * (size_t)(T * K)) : NULL;
    double *a = mc_host(sizeof(double) * (size_t)((Tc ? Tc : 1) * H)), *bref = mc_host(sizeof(double) * (size_t)((Tc ? Tc : 1) * H));
    /* x: a block of normals repeated for large T */
    tu_fill_bf16_normal_rep(&r, x, (size_t)(T * H), 1.0);
    int64_t nbad = 0;
    if (mode != MC_ROUTER) make_ids(&r, cs, off, mode, T, ids_in, w_in, &nbad);
    int64_t cnt[DSK_MOE_NUM_COUNTERS] = {0}, cntr[DSK_MOE_NUM_COUNTERS] = {0};
    int64_t aux_diff = -1, cap_diff = -1, unf_diff = -1;
    mc_layer_in in = {T, off, x, gw, bias, ids_in, w_in, (const void *const *)hp, pb, 0, &aux_diff, &cap_diff,
                      &unf_diff};
    const double t0 = tu_now_us();
    st = run_layer(ctx, cs, &in, y, ids, w, cnt, NULL);
    if (st == DSK_STATUS_OK && unf_diff >= 0) {
      TU_CHECK(c, unf_diff == 0, "moe %s T %lld: the unfused chain (DSK_MOE_RUN_UNFUSED): %lld outputs or counters differ",
               cs->name, (long long)T, (long long)unf_diff);
      fprintf(log, "moe %-22s T %lld: unfused chain: %s\n", cs->name, (long long)T,
              unf_diff == 0 ? "identical" : "DIFFERENT");
    }
    if (st == DSK_STATUS_OK && aux_diff >= 0) {
      TU_CHECK(c, aux_diff == 0, "moe %s T %lld: with aux_stream %lld outputs or counters differ from the one-stream run", cs->name,
               (long long)T, (long long)aux_diff);
      fprintf(log, "moe %-22s T %lld: shared expert on aux_stream: %s\n", cs->name, (long long)T,
              aux_diff == 0 ? "identical" : "DIFFERENT");
    }
    if (st == DSK_STATUS_OK && cap_diff >= 0) {
      TU_CHECK(c, cap_diff == 0, "moe %s T %lld: captured in a graph (with aux_stream), %lld outputs differ", cs->name,
               (long long)T, (long long)cap_diff);
      fprintf(log, "moe %-22s T %lld: graph capture with aux_stream: %s\n", cs->name, (long long)T,
              cap_diff == 0 ? "identical" : "DIFFERENT");
    }
    const double us = tu_now_us() - t0;
    if (st == DSK_STATUS_UNSUPPORTED) {
      fprintf(log, "moe %-22s skipped on %s: %s\n", cs->name, dsk_status_name(st), dsk_last_error());
      st = DSK_STATUS_OK;
      free(x); free(y); free(yr); free(ids); free(idr); free(ids_in); free(w); free(wr); free(w_in); free(a); free(bref);
      break;
    }
    TU_CHECK(c, st == DSK_STATUS_OK, "moe %s T %lld: %s: %s", cs->name, (long long)T, dsk_status_name(st),
             dsk_last_error());
    int64_t cnt_other = 0;
    for (int i = 0; i < DSK_MOE_NUM_COUNTERS; i++) cnt_other += i == DSK_MOE_CNT_BAD_EXPERT ? 0 : cnt[i];
    TU_CHECK(c, cnt_other == 0 && cnt[DSK_MOE_CNT_BAD_EXPERT] == nbad,
             "moe %s T %lld (%s): counters: %lld bad experts (want %lld), %lld other events on clean input", cs->name,
             (long long)T, k_mode_names[mode], (long long)cnt[DSK_MOE_CNT_BAD_EXPERT], (long long)nbad,
             (long long)cnt_other);
    double d_ref = -1, d_fp64 = -1;
    int64_t ids_vs_ref = 0;
    int bad = st != DSK_STATUS_OK;
    for (int64_t i = 0; i < Tc * H && !bad; i++) a[i] = mc_bf(y[i]);
    if (!bad && Tr > 0) {
      /* the cpu-ref layer on the first Tr tokens (every token's output depends on its own row only) */
      mc_layer_in ir = in;
      ir.aux_diff = NULL;
      ir.cap_diff = NULL;
      ir.unf_diff = NULL;
      ir.T = Tr;
      dsk_status s2 = run_layer(ref, cs, &ir, yr, idr, wr, cntr, NULL);
      TU_CHECK(c, s2 == DSK_STATUS_OK, "moe %s T %lld: cpu-ref: %s", cs->name, (long long)T, dsk_last_error());
      for (int64_t i = 0; i < Tr * H; i++) bref[i] = mc_bf(yr[i]);
      d_ref = mc_diff(bref, a, Tr * H);
      if (mode == MC_ROUTER)
        for (int64_t i = 0; i < Tr * K; i++) ids_vs_ref += ids[i] != idr[i];
      TU_CHECK(c, d_ref <= 0.01, "moe %s T %lld: diff vs cpu-ref %.3g > 0.01", cs->name, (long long)T, d_ref);
      TU_CHECK(c, ids_vs_ref == 0, "moe %s T %lld: %lld routed ids differ from the cpu-ref's", cs->name, (long long)T,
               (long long)ids_vs_ref);
      if (d_ref > 1e-4) fprintf(log, "WARNING: moe %s T %lld: diff vs cpu-ref %.3g > 1e-4\n", cs->name, (long long)T, d_ref);
      bad |= d_ref > 0.01 || ids_vs_ref != 0;
    }
    if (!bad && To > 0) {
      int64_t id_bad = 0;
      for (int64_t t = 0; t < To; t++) {
        double *z = mc_host(sizeof(double) * (size_t)E), *sc = mc_host(sizeof(double) * (size_t)E);
        const int32_t *tid = mode == MC_ROUTER ? ids + t * K : ids_in + t * K;
        double sum = 0;
        if (mode == MC_ROUTER) {
          for (int64_t e = 0; e < E; e++) {
            double acc = 0;
            for (int64_t h = 0; h < H; h++) acc += mc_bf(x[t * H + h]) * mc_bf(gw[e * H + h]);
            z[e] = acc;
            sc[e] = mc_score(cs->score, acc);
          }
          /* the fp64 top-k (ties: lower id) and its margin */
          double kth = INFINITY, next = -INFINITY;
          for (int64_t k = 0; k < K; k++) {
            const int32_t id = tid[k];
            if (id < 0 || id >= E) {
              id_bad++;
              continue;
            }
            sum += sc[id];
            kth = fmin(kth, sc[id] + bias[id]);
          }
          for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t k = 0; k < K; k++) taken |= tid[k] == e;
            if (!taken) next = fmax(next, sc[e] + bias[e]);
          }
          if (next > kth && (next - kth) > 1e-6 * fabs(kth)) id_bad++;
        }
        float xf[16384];
        double *xd = mc_host(sizeof(double) * (size_t)H);
        for (int64_t h = 0; h < H; h++) xf[h] = dsk_bf16_to_f32(x[t * H + h]);
        mc_qdq(xf, H, xd);
        double *out = bref + t * H;
        for (int64_t h = 0; h < H; h++) out[h] = 0;
        for (int64_t k = 0; k < K; k++) {
          const int32_t id = tid[k];
          if (id < off || id >= off + EL) continue;
          const double wt = mode == MC_ROUTER ? sc[id] / sum * cs->scale : (double)w_in[t * K + k];
          const uint8_t *wv[3] = {ck.w[0][id - off], ck.w[1][id - off], ck.w[2][id - off]};
          const uint8_t *sv[3] = {ck.s[0][id - off], ck.s[1][id - off], ck.s[2][id - off]};
          oracle_expert(&lut, cs->mx, wv, sv, H, cs->I, cs->limit, xd, wt, out);
        }
        if (cs->Is) {
          const uint8_t *wv[3] = {ck.sw[0], ck.sw[1], ck.sw[2]}, *sv[3] = {ck.ss[0], ck.ss[1], ck.ss[2]};
          oracle_expert(&lut, 0, wv, sv, H, cs->Is, cs->limit, xd, 1.0, out);
        }
        free(z); free(sc); free(xd);
      }
      d_fp64 = mc_diff(bref, a, To * H);
      TU_CHECK(c, id_bad == 0, "moe %s T %lld: %lld tokens routed unlike fp64 (no near tie)", cs->name, (long long)T,
               (long long)id_bad);
      TU_CHECK(c, d_fp64 <= 0.01, "moe %s T %lld: diff vs fp64 %.3g > 0.01", cs->name, (long long)T, d_fp64);
      bad |= d_fp64 > 0.01 || id_bad;
    }
    char sr[48], sf[48];
    if (Tr == 0) snprintf(sr, sizeof sr, "- (same backend)");
    else if (Tr < T) snprintf(sr, sizeof sr, "%.2e (%lld tokens)", d_ref, (long long)Tr);
    else snprintf(sr, sizeof sr, "%.2e", d_ref);
    if (To == 0) snprintf(sf, sizeof sf, "- (not run)");
    else if (To < T) snprintf(sf, sizeof sf, "%.2e (%lld tokens)", d_fp64, (long long)To);
    else snprintf(sf, sizeof sf, "%.2e", d_fp64);
    fprintf(log, "moe %-22s H %5lld I %4lld E %3lld/%-3lld top-%lld T %4lld %-17s: diff vs cpu-ref %s, vs fp64 %s (%.1f ms) %s\n",
            cs->name, (long long)H, (long long)cs->I, (long long)EL, (long long)E, (long long)K, (long long)T,
            k_mode_names[mode], sr, sf, us * 1e-3, bad ? "FAIL" : "ok");
    rc |= bad;
    free(x); free(y); free(yr); free(ids); free(idr); free(ids_in); free(w); free(wr); free(w_in); free(a); free(bref);
  }
  for (int i = 0; i < 8; i++) free(hp[i]);
  free(gw);
  free(bias);
  ck_free(&ck);
  return rc || st != DSK_STATUS_OK;
}

/* ------------------------------------------------------------ demo row */
/* One MoE row of `dsk demo` (demo.c). which: 0 DSv4-Flash, 1 GLM-5.1, 2
 * DSv4-Pro. Production H / I / E / top-k with 16 local experts (an EP16
 * rank; the selection bias steers every token to them) when ctx is CUDA and
 * not quick, else reduced shapes (labelled). T = 16 tokens through the
 * router. Timed as the demo rows are (reps runs, each bracketed by
 * dsk_ctx_synchronize, host clock). Checked against the cpu-ref layer
 * (diff <= 0.01; skipped when ctx is the cpu-ref) and the fp64 forward
 * (diff <= 0.01; 4 tokens at production shapes, all 16 when reduced).
 * res: [0] median_us, [1] GB/s (weight bytes: active local experts, shared,
 * router), [2] TFLOPS (real rows), [3] rel_l2 and [4] max_abs of y against
 * the cpu-ref (or fp64). Returns 0 if the row ran (pass says whether it is
 * within the bounds). */
int dsk__moe_demo_row(dsk_ctx *ctx, dsk_ctx *ref, int which, int quick, int reps, uint64_t seed, double res[5],
                      int *pass, char *label, size_t label_len, char *note, size_t note_len) {
  static const mc_case prod[3] = {
      {"DSv4-Flash", 1, 4096, 2048, 2048, 256, 16, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"GLM-5.1", 0, 6144, 2048, 2048, 256, 16, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
      {"DSv4-Pro", 1, 7168, 3072, 3072, 384, 16, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
  };
  static const mc_case small[3] = {
      {"DSv4-Flash", 1, 256, 256, 256, 32, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"GLM-5.1", 0, 384, 256, 256, 32, 8, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
      {"DSv4-Pro", 1, 384, 384, 384, 48, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
  };
  for (int i = 0; i < 5; i++) res[i] = 0;
  *pass = 0;
  if (which < 0 || which > 2) return 1;
  const int full = mc_ctx_is_cuda(ctx) && !quick;
  const mc_case *cs = full ? &prod[which] : &small[which];
  const int64_t T = 16, H = cs->H, E = cs->E, K = cs->topk, EL = cs->EL, off = E - EL;
  dsk_ctx_info ci;
  memset(&ci, 0, sizeof ci);
  ci.struct_size = sizeof ci;
  dsk_ctx_get_info(ctx, &ci);
  const int same = ref == NULL || (!ci.is_cuda && strcmp(ci.backend, "cpu-ref") == 0);
  snprintf(label, label_len, "E%lld/%lld%s", (long long)EL, (long long)E, full ? "" : " rd");
  mc_ckpt ck;
  ck_make(&ck, cs, seed ^ 0xDE30u ^ (uint64_t)which);
  void *hp[8];
  int64_t pb[8];
  dsk_ctx *hctx = ref;
  dsk_ctx *own = NULL;
  if (!hctx) {
    dsk_ctx_opts ro;
    dsk_ctx_opts_init(&ro);
    ro.device = "cpu";
    ro.backend = "cpu-ref";
    if (dsk_ctx_create(&own, &ro) != DSK_STATUS_OK) {
      ck_free(&ck);
      return 1;
    }
    hctx = own;
  }
  dsk_status st = prepare_host(hctx, cs, &ck, off, hp, pb);
  tu_rng r = tu_rng_make(seed ^ 0xD3E0u ^ (uint64_t)which);
  dsk_bf16 *gw = mc_host(sizeof(dsk_bf16) * (size_t)(E * H)), *x = mc_host(sizeof(dsk_bf16) * (size_t)(T * H));
  dsk_bf16 *y = mc_host(sizeof(dsk_bf16) * (size_t)(T * H)), *yr = mc_host(sizeof(dsk_bf16) * (size_t)(T * H));
  float *bias = mc_host(sizeof(float) * (size_t)E), *w = mc_host(sizeof(float) * (size_t)(T * K)),
        *wr = mc_host(sizeof(float) * (size_t)(T * K));
  int32_t *ids = mc_host(sizeof(int32_t) * (size_t)(T * K)), *idr = mc_host(sizeof(int32_t) * (size_t)(T * K));
  double *a = mc_host(sizeof(double) * (size_t)(T * H)), *b = mc_host(sizeof(double) * (size_t)(T * H));
  tu_fill_bf16_normal(&r, gw, (size_t)(E * H), 1.0 / sqrt((double)H));
  tu_fill_bf16_normal(&r, x, (size_t)(T * H), 1.0);
  for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(&r) * 0.05) + (e >= off ? 10.0f : 0.0f);
  int64_t cnt[DSK_MOE_NUM_COUNTERS] = {0}, cntr[DSK_MOE_NUM_COUNTERS] = {0};
  mc_layer_in in = {T, off, x, gw, bias, NULL, NULL, (const void *const *)hp, pb, reps > 0 ? reps : 1, NULL, NULL, NULL};
  if (st == DSK_STATUS_OK) st = run_layer(ctx, cs, &in, y, ids, w, cnt, &res[0]);
  double d_ref = -1, d_fp64 = -1;
  int64_t ids_vs_ref = 0, cnt_sum = 0, local = 0;
  for (int i = 0; i < DSK_MOE_NUM_COUNTERS; i++) cnt_sum += cnt[i];
  for (int64_t i = 0; i < T * H; i++) a[i] = mc_bf(y[i]);
  if (st == DSK_STATUS_OK && !same) {
    mc_layer_in ir = in;
    ir.reps = 0;
    st = run_layer(ref, cs, &ir, yr, idr, wr, cntr, NULL);
    for (int64_t i = 0; i < T * H; i++) b[i] = mc_bf(yr[i]);
    d_ref = mc_diff(b, a, T * H);
    for (int64_t i = 0; i < T * K; i++) ids_vs_ref += ids[i] != idr[i];
  }
  /* fp64 forward on the first To tokens (with the device's ids) */
  const int64_t To = full ? 4 : T;
  if (st == DSK_STATUS_OK) {
    mc_lut lut;
    lut_init(&lut);
    double *o = mc_host(sizeof(double) * (size_t)(To * H));
    for (int64_t t = 0; t < To; t++) {
      double *sc = mc_host(sizeof(double) * (size_t)E), sum = 0;
      for (int64_t e = 0; e < E; e++) {
        double acc = 0;
        for (int64_t h = 0; h < H; h++) acc += mc_bf(x[t * H + h]) * mc_bf(gw[e * H + h]);
        sc[e] = mc_score(cs->score, acc);
      }
      for (int64_t k = 0; k < K; k++)
        if (ids[t * K + k] >= 0 && ids[t * K + k] < E) sum += sc[ids[t * K + k]];
      float xf[16384];
      double *xd = mc_host(sizeof(double) * (size_t)H);
      for (int64_t h = 0; h < H; h++) xf[h] = dsk_bf16_to_f32(x[t * H + h]);
      mc_qdq(xf, H, xd);
      for (int64_t k = 0; k < K; k++) {
        const int32_t id = ids[t * K + k];
        if (id < off || id >= off + EL) continue;
        const uint8_t *wv[3] = {ck.w[0][id - off], ck.w[1][id - off], ck.w[2][id - off]};
        const uint8_t *sv[3] = {ck.s[0][id - off], ck.s[1][id - off], ck.s[2][id - off]};
        oracle_expert(&lut, cs->mx, wv, sv, H, cs->I, cs->limit, xd, sc[id] / sum * cs->scale, o + t * H);
      }
      const uint8_t *wv[3] = {ck.sw[0], ck.sw[1], ck.sw[2]}, *sv[3] = {ck.ss[0], ck.ss[1], ck.ss[2]};
      oracle_expert(&lut, 0, wv, sv, H, cs->Is, cs->limit, xd, 1.0, o + t * H);
      free(sc);
      free(xd);
    }
    d_fp64 = mc_diff(o, a, To * H);
    if (d_ref < 0) memcpy(b, o, sizeof(double) * (size_t)(To * H)); /* rel_l2 / max_abs against fp64 then */
    free(o);
  }
  int rc = st != DSK_STATUS_OK;
  if (!rc) {
    const int64_t n = (d_ref >= 0 ? T : To) * H;
    double num = 0, den = 0, mabs = 0;
    for (int64_t i = 0; i < n; i++) {
      const double d = fabs(a[i] - b[i]);
      mabs = d != d ? INFINITY : fmax(mabs, d);
      num += d * d;
      den += b[i] * b[i];
    }
    res[3] = den > 0 ? sqrt(num / den) : sqrt(num);
    res[4] = mabs;
    /* distinct local experts routed to; FLOP over the real (local) rows */
    unsigned char seen[1024] = {0};
    int64_t active = 0;
    for (int64_t i = 0; i < T * K; i++)
      if (ids[i] >= off && ids[i] < off + EL) {
        local++;
        if (!seen[ids[i] - off]) {
          seen[ids[i] - off] = 1;
          active++;
        }
      }
    int64_t per[4], sh[4];
    dsk_moe_weights_bytes(cs->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8, 1, H, cs->I, per);
    dsk_moe_weights_bytes(DSK_MOE_W_FP8, 1, H, cs->Is, sh);
    const double bytes = (double)active * (double)(per[0] + per[1] + per[2] + per[3]) +
                         (double)(sh[0] + sh[1] + sh[2] + sh[3]) + 2.0 * (double)(E * H);
    const double flop = 6.0 * (double)local * (double)cs->I * (double)H + 6.0 * (double)T * (double)cs->Is * (double)H +
                        2.0 * (double)T * (double)E * (double)H;
    const double sec = res[0] * 1e-6;
    res[1] = sec > 0 ? bytes / sec * 1e-9 : 0;
    res[2] = sec > 0 ? flop / sec * 1e-12 : 0;
    *pass = cnt_sum == 0 && ids_vs_ref == 0 && (d_ref < 0 || d_ref <= 0.01) && d_fp64 >= 0 && d_fp64 <= 0.01;
    char sr[40];
    if (d_ref < 0) snprintf(sr, sizeof sr, "- (same backend)");
    else snprintf(sr, sizeof sr, "%.1e", d_ref);
    snprintf(note, note_len, "diff vs cpu-ref %s, vs fp64 %.1e (%lld tok) (<= 0.01); H %lld I %lld top-%lld, %lld experts hit; %s",
             sr, d_fp64, (long long)To, (long long)H, (long long)cs->I, (long long)K, (long long)active,
             full ? "production shapes, EP16 rank" : "REDUCED shapes");
    if (ids_vs_ref) snprintf(note + strlen(note), note_len - strlen(note), "; %lld ids differ from the cpu-ref", (long long)ids_vs_ref);
    if (cnt_sum) snprintf(note + strlen(note), note_len - strlen(note), "; %lld bad-data events", (long long)cnt_sum);
  }
  for (int i = 0; i < 8; i++) free(hp[i]);
  free(gw); free(x); free(y); free(yr); free(bias); free(w); free(wr); free(ids); free(idr); free(a); free(b);
  ck_free(&ck);
  if (own) dsk_ctx_destroy(own);
  return rc;
}
