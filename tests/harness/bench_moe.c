/* bench_moe.c - `dsk bench moe`: one MoE layer (dsk_moe_run) of DSv4-Flash,
 * DSv4-Pro and GLM-5.1 at T = 1, 16, 128, 4096 tokens, and the ops it is
 * made of timed alone (the grouped GEMMs above all), with the device copy
 * bandwidth measured in the same run (spec/mxfp4-moe.md §6-7.3; issue 5).
 *
 * Experts are generated in process (no downloads): a few distinct synthetic
 * checkpoint experts per model (MXFP4: random e2m1 codes with UE8M0 scales
 * for unit-variance outputs; FP8: e4m3 codes of normals with 128x128 UE8M0
 * block scales), prepared by dsk_moe_prepare_weights and uploaded
 * round-robin into all E expert slots, so every expert has its own memory
 * (nothing stays in L2 between experts). The router weight is N(0, 1/H)
 * bf16 with a small random selection bias, x is N(0, 1): routing is close
 * to uniform. L2 flushed before every sample unless warm.
 *
 * Rows per (model, T): `layer` = dsk_moe_run (route, quantize, permute,
 * FC1, SwiGLU, FC2, shared expert, gather), `layer+aux` the same with the
 * shared expert on a second stream (dsk_moe_desc.aux_stream, a
 * dsk_stream_create stream; on a CPU context the same as layer), then each
 * op alone on buffers
 * of its own (a chain run once beforehand, so every input is valid):
 * route (with the workspace of dsk_moe_route_plan), quant (x 1x128),
 * permute (+ SFA packing; no padding fill, as dsk_moe_run), fc1, swiglu
 * (live rows only, as dsk_moe_run), fc2, shared (dense FC1 + SwiGLU +
 * FC2), gather.
 *
 * Bytes (the gbps column): weight bytes read for layer, route, fc1, fc2 and
 * shared - the prepared bytes (data + packed scales) of the distinct experts
 * the routing activated (spec §7.3), the shared expert, the router weight;
 * activation bytes read + written for quant, permute, swiglu and gather.
 * FLOP: 2 per multiply-add over real rows only (T*topk for the routed
 * GEMMs, no padding), the router's logits included in the layer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct moe_model {
  const char *name;
  dsk_moe_model id;
  int mx;                /* routed experts MXFP4 (DSv4) or FP8 (GLM-5.1) */
  int64_t H, I, E, topk; /* the shared expert has intermediate I too */
} moe_model;

static const moe_model k_models[] = {
    {"dsv4-flash", DSK_MOE_MODEL_DSV4_FLASH, 1, 4096, 2048, 256, 6},
    {"dsv4-pro", DSK_MOE_MODEL_DSV4_PRO, 1, 7168, 3072, 384, 6},
    {"glm-5.1", DSK_MOE_MODEL_GLM51, 0, 6144, 2048, 256, 8},
};
/* --quick: the same three layer kinds on reduced shapes */
static const moe_model k_models_quick[] = {
    {"dsv4-flash", DSK_MOE_MODEL_DSV4_FLASH, 1, 256, 256, 16, 6},
    {"dsv4-pro", DSK_MOE_MODEL_DSV4_PRO, 1, 384, 384, 24, 6},
    {"glm-5.1", DSK_MOE_MODEL_GLM51, 0, 384, 256, 16, 8},
};
static const int k_T[] = {1, 16, 128, 4096};
static const int k_T_quick[] = {1, 16};
#define MOE_DISTINCT 4 /* distinct generated experts per model (full shapes) */

enum {
  OPM_LAYER,
  OPM_LAYER_AUX,
  OPM_ROUTE,
  OPM_QUANT,
  OPM_PERMUTE,
  OPM_FC1,
  OPM_SWIGLU,
  OPM_FC2,
  OPM_SHARED,
  OPM_GATHER,
  OPM_COUNT
};
static const char *const k_op_names[OPM_COUNT] = {"layer", "layer+aux", "route", "quant", "permute", "fc1",
                                                  "swiglu", "fc2", "shared", "gather"};

/* ------------------------------------------------------------ helpers */
typedef struct bm_mem {
  dsk_ctx *ctx;
  void *p[64];
  int n;
} bm_mem;

static void *bm_alloc(bm_mem *m, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st != DSK_STATUS_OK) return NULL;
  if (m->n >= 64) {
    *st = DSK_STATUS_OUT_OF_MEMORY;
    return NULL;
  }
  *st = dsk_mem_alloc(m->ctx, &p, bytes ? bytes : 16);
  if (*st == DSK_STATUS_OK) m->p[m->n++] = p;
  return p;
}
static void *bm_put(bm_mem *m, const void *h, size_t bytes, dsk_status *st) {
  void *p = bm_alloc(m, bytes, st);
  if (*st == DSK_STATUS_OK && bytes) *st = dsk_mem_upload(m->ctx, p, h, bytes);
  return p;
}
static void bm_free(bm_mem *m) {
  for (int i = 0; i < m->n; i++) dsk_mem_free(m->ctx, m->p[i]);
  m->n = 0;
}

static int ceil_log2f_(float f) {
  int ex;
  const float m = frexpf(f, &ex);
  return m == 0.5f ? ex - 1 : ex;
}

/* Random host data of n bytes, fast: rng words. */
static void fill_bytes(tu_rng *r, uint8_t *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = tu_next(r);
    memcpy(p + i, &v, 8);
  }
  for (; i < n; i++) p[i] = (uint8_t)tu_next(r);
}

/* e4m3 codes of N(0, 1) * 64 (a table; tensors copy random slices of it). */
#define E4_TABLE (1 << 16)
static void e4_table(tu_rng *r, uint8_t *tab) {
  for (int i = 0; i < E4_TABLE; i++) tab[i] = dsk_e4m3_from_f32((float)(tu_normal(r) * 64.0));
}

/* One synthetic checkpoint tensor [rows, K]: MXFP4 (codes + scales per 32)
 * or FP8 (codes + UE8M0 per 128x128 block), values ~ 1/sqrt(K). */
static int gen_tensor(tu_rng *r, const uint8_t *tab, int mx, int64_t rows, int64_t K, uint8_t **w, uint8_t **s) {
  if (mx) {
    *w = malloc((size_t)(rows * K / 2));
    *s = malloc((size_t)(rows * K / 32));
    if (!*w || !*s) return 1;
    fill_bytes(r, *w, (size_t)(rows * K / 2));
    const int base = 127 + (int)lround(log2(1.0 / (2.93 * sqrt((double)K))));
    for (int64_t i = 0; i < rows * K / 32; i++) (*s)[i] = (uint8_t)(base + (int)tu_int(r, -1, 1));
  } else {
    *w = malloc((size_t)(rows * K));
    *s = malloc((size_t)((rows + 127) / 128 * (K / 128)));
    if (!*w || !*s) return 1;
    for (int64_t i = 0; i < rows * K; i += 4096) {
      const int64_t n = rows * K - i < 4096 ? rows * K - i : 4096;
      memcpy(*w + i, tab + tu_int(r, 0, E4_TABLE - 4096), (size_t)n);
    }
    const int e = ceil_log2f_((float)(1.0 / sqrt((double)K) / 64.0)) + 127;
    memset(*s, e, (size_t)((rows + 127) / 128 * (K / 128)));
  }
  return 0;
}

/* Prepares n experts (routed: the model's format; shared: FP8, n = 1) into
 * host buffers hp[4] of sizes pb[4] (dsk_moe_weights_bytes for n). */
static dsk_status prepare(dsk_ctx *hctx, tu_rng *r, const uint8_t *tab, int mx, int64_t n, int64_t H, int64_t I,
                          void *hp[4], int64_t pb[4]) {
  dsk_moe_weights_bytes(mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8, n, H, I, pb);
  for (int i = 0; i < 4; i++) hp[i] = malloc((size_t)pb[i]);
  uint8_t **w[3], **s[3];
  int bad = !hp[0] || !hp[1] || !hp[2] || !hp[3];
  for (int j = 0; j < 3; j++) {
    w[j] = calloc((size_t)n, sizeof(uint8_t *));
    s[j] = calloc((size_t)n, sizeof(uint8_t *));
    bad |= !w[j] || !s[j];
  }
  for (int64_t e = 0; e < n && !bad; e++)
    for (int j = 0; j < 3 && !bad; j++)
      bad |= gen_tensor(r, tab, mx, j < 2 ? I : H, j < 2 ? H : I, &w[j][e], &s[j][e]);
  dsk_status st = bad ? DSK_STATUS_OUT_OF_MEMORY : DSK_STATUS_OK;
  if (st == DSK_STATUS_OK) {
    dsk_moe_prepare_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.src = mx ? DSK_MOE_SRC_MXFP4 : DSK_MOE_SRC_FP8_E8M0;
    d.E_local = n;
    d.H = H;
    d.I = I;
    d.tp_size = 1;
    d.w1 = (const void *const *)w[0];
    d.s1 = (const void *const *)s[0];
    d.w3 = (const void *const *)w[1];
    d.s3 = (const void *const *)s[1];
    d.w2 = (const void *const *)w[2];
    d.s2 = (const void *const *)s[2];
    d.w13 = hp[0];
    d.w13_bytes = pb[0];
    d.sf13 = (int32_t *)hp[1];
    d.sf13_bytes = pb[1];
    d.w2_out = hp[2];
    d.w2_bytes = pb[2];
    d.sf2 = (int32_t *)hp[3];
    d.sf2_bytes = pb[3];
    st = dsk_moe_prepare_weights(hctx, &d);
  }
  for (int j = 0; j < 3; j++) {
    for (int64_t e = 0; w[j] && s[j] && e < n; e++) {
      free(w[j][e]);
      free(s[j][e]);
    }
    free(w[j]);
    free(s[j]);
  }
  return st;
}

/* ------------------------------------------------------------- a run */
/* Device state of one model, sized for the largest T of the run. */
typedef struct moe_dev {
  bm_mem m;
  dsk_moe_desc layer;   /* T set per case */
  dsk_moe_desc layer_aux; /* the same with the shared expert on aux (a dsk_stream_create stream) */
  void *aux;
  void *x, *y, *gate, *bias;
  int32_t *ids;
  float *wts;
  /* op chain buffers */
  uint8_t *xq, *xsf, *A, *Asf, *A2, *S2;
  int32_t *sfx, *mind, *inv, *sfa, *sfa2, *ssf2;
  void *D1, *D2, *S1, *Sout, *perm_ws, *route_ws;
  int64_t perm_ws_bytes, route_ws_bytes;
  void *gemm_ws; /* split-K partials of the four GEMMs (they run in turn) */
  int64_t gemm_ws_bytes;
} moe_dev;

typedef struct moe_run {
  int op;
  const dsk_moe_desc *layer, *layer_aux;
  dsk_moe_route_desc route;
  dsk_fp8_quantize_desc quant;
  dsk_moe_permute_desc perm;
  dsk_sf_pack_desc sfa_pack;
  dsk_moe_gemm_desc fc1, fc2;
  dsk_swiglu_quant_desc swiglu, sswiglu;
  dsk_dense_gemm_desc sfc1, sfc2;
  dsk_moe_gather_desc gather;
} moe_run;

static dsk_status run_once(dsk_ctx *ctx, void *user) {
  const moe_run *r = (const moe_run *)user;
  dsk_status st = DSK_STATUS_OK;
  switch (r->op) {
    case OPM_LAYER: return dsk_moe_run(ctx, r->layer);
    case OPM_LAYER_AUX: return dsk_moe_run(ctx, r->layer_aux);
    case OPM_ROUTE: return dsk_moe_route(ctx, &r->route);
    case OPM_QUANT: return dsk_fp8_quantize_1x128(ctx, &r->quant);
    case OPM_PERMUTE:
      st = dsk_moe_permute(ctx, &r->perm);
      return st == DSK_STATUS_OK ? dsk_sf_pack_mn_major(ctx, &r->sfa_pack) : st;
    case OPM_FC1: return dsk_moe_gemm(ctx, &r->fc1);
    case OPM_SWIGLU: return dsk_swiglu_quant(ctx, &r->swiglu);
    case OPM_FC2: return dsk_moe_gemm(ctx, &r->fc2);
    case OPM_SHARED:
      st = dsk_dense_fp8_gemm(ctx, &r->sfc1);
      if (st == DSK_STATUS_OK) st = dsk_swiglu_quant(ctx, &r->sswiglu);
      return st == DSK_STATUS_OK ? dsk_dense_fp8_gemm(ctx, &r->sfc2) : st;
    default: return dsk_moe_gather(ctx, &r->gather);
  }
}

/* Worst-case (M_sum, A_used) of dsk_moe_run for T tokens. */
static void aligned(const moe_model *m, int64_t T, int64_t *Ms, int64_t *A) {
  dsk_moe_align_desc a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.M = T;
  a.topk = m->topk;
  a.E_local = m->E;
  a.family = DSK_MOE_ALIGN_DSK;
  *Ms = 0;
  *A = 64;
  (void)dsk_moe_aligned_m(&a, Ms, A);
}

/* The op descriptors of one case (T tokens) on the model's buffers; the same
 * pipeline as dsk_moe_run, with buffers of its own for every stage. */
static void case_descs(const moe_model *m, moe_dev *v, int64_t T, moe_run *r) {
  const int64_t H = m->H, I = m->I, K = m->topk;
  int64_t Ms, Au;
  aligned(m, T, &Ms, &Au);
  memset(r, 0, sizeof *r);
  r->layer = &v->layer;
  v->layer.T = T;
  v->layer_aux = v->layer;
  v->layer_aux.aux_stream = v->aux;
  r->layer_aux = &v->layer_aux;

  dsk_moe_route_desc *ro = &r->route;
  ro->struct_size = sizeof *ro;
  ro->T = T; ro->E = m->E; ro->topk = K; ro->score = v->layer.score; ro->router = DSK_MOE_ROUTER_SCORED;
  ro->H = H; ro->x = v->x; ro->x_stride = H; ro->gate_w = v->gate; ro->bias = v->bias;
  ro->renormalize = 1; ro->routed_scaling_factor = v->layer.routed_scaling_factor;
  ro->ids = v->ids; ro->ids_stride = K; ro->weights = v->wts; ro->weights_stride = K;
  ro->workspace = v->route_ws; ro->workspace_bytes = v->route_ws_bytes; /* planned for Tmax */

  dsk_fp8_quantize_desc *q = &r->quant;
  q->struct_size = sizeof *q;
  q->rows = T; q->K = H; q->x_dtype = DSK_MOE_IN_BF16; q->x = v->x; q->x_stride = H;
  q->q = v->xq; q->q_stride = H; q->sf = v->xsf; q->sf_stride = H / 128; q->sf_packed = v->sfx;

  dsk_moe_permute_desc *p = &r->perm;
  p->struct_size = sizeof *p;
  p->T = T; p->topk = K; p->E = m->E; p->E_local = m->E; p->K = H; p->A_used = Au; p->M_sum = Ms;
  p->ids = v->ids; p->ids_stride = K; p->xq = v->xq; p->xq_stride = H; p->xsf = v->xsf; p->xsf_stride = H / 128;
  p->A = v->A; p->A_stride = H; p->Asf = v->Asf; p->Asf_stride = H / 128; p->m_indices = v->mind;
  p->inv_perm = v->inv; p->inv_perm_stride = K; p->workspace = v->perm_ws; p->workspace_bytes = v->perm_ws_bytes;
  p->flags = DSK_MOE_PERMUTE_NO_PAD_FILL; /* as dsk_moe_run */

  dsk_sf_pack_desc *s = &r->sfa_pack;
  s->struct_size = sizeof *s;
  s->G = 1; s->MN = Ms; s->sf_k = H / 128; s->gran_mn = 1; s->sf = v->Asf; s->sf_stride = H / 128; s->out = v->sfa;

  dsk_moe_gemm_desc *g = &r->fc1;
  g->struct_size = sizeof *g;
  g->M_sum = Ms; g->N = 2 * I; g->K = H; g->E_local = m->E; g->A_used = Au; g->expected_m = T * K;
  g->max_expert_rows = T; /* as dsk_moe_run */
  g->A = v->A; g->A_stride = H;
  g->sfa.words = v->sfa; g->sfa.groups = 1; g->sfa.mn = Ms; g->sfa.sf_k = H / 128;
  g->m_indices = v->mind; g->b_fmt = v->layer.routed.fmt; g->B = v->layer.routed.w13;
  g->sfb.words = v->layer.routed.sf13; g->sfb.groups = m->E; g->sfb.mn = 2 * I; g->sfb.sf_k = m->mx ? H / 32 : H / 128;
  g->D = v->D1; g->D_stride = 2 * I;
  r->fc2 = *g;
  g = &r->fc2;
  g->N = H; g->K = I; g->A = v->A2; g->A_stride = I;
  g->sfa.words = v->sfa2; g->sfa.sf_k = I / 128;
  g->B = v->layer.routed.w2; g->sfb.words = v->layer.routed.sf2; g->sfb.mn = H; g->sfb.sf_k = m->mx ? I / 32 : I / 128;
  g->D = v->D2; g->D_stride = H;

  dsk_swiglu_quant_desc *w = &r->swiglu;
  w->struct_size = sizeof *w;
  w->rows = Ms; w->I = I; w->D1 = v->D1; w->D1_stride = 2 * I; w->m_indices = v->mind;
  w->limit = v->layer.swiglu_limit; w->q = v->A2; w->q_stride = I; w->sf_packed = v->sfa2;
  w->flags = DSK_SWIGLU_SKIP_PADDING; /* as dsk_moe_run */

  dsk_dense_gemm_desc *e = &r->sfc1;
  e->struct_size = sizeof *e;
  e->M = T; e->N = 2 * I; e->K = H; e->A = v->xq; e->A_stride = H;
  e->sfa.words = v->sfx; e->sfa.groups = 1; e->sfa.mn = T; e->sfa.sf_k = H / 128;
  e->B = (const uint8_t *)v->layer.shared.w13;
  e->sfb.words = v->layer.shared.sf13; e->sfb.groups = 1; e->sfb.mn = 2 * I; e->sfb.sf_k = H / 128;
  e->D = v->S1; e->D_stride = 2 * I;
  w = &r->sswiglu;
  w->struct_size = sizeof *w;
  w->rows = T; w->I = I; w->D1 = v->S1; w->D1_stride = 2 * I; w->limit = v->layer.shared_limit;
  w->q = v->S2; w->q_stride = I; w->sf_packed = v->ssf2;
  r->sfc2 = *e;
  e = &r->sfc2;
  e->N = H; e->K = I; e->A = v->S2; e->A_stride = I;
  e->sfa.words = v->ssf2; e->sfa.sf_k = I / 128;
  e->B = (const uint8_t *)v->layer.shared.w2;
  e->sfb.words = v->layer.shared.sf2; e->sfb.mn = H; e->sfb.sf_k = I / 128;
  e->D = v->Sout; e->D_stride = H;

  dsk_moe_gather_desc *o = &r->gather;
  o->struct_size = sizeof *o;
  o->T = T; o->topk = K; o->N = H; o->M_sum = Ms; o->D2 = v->D2; o->D2_stride = H;
  o->inv_perm = v->inv; o->inv_perm_stride = K; o->weights = v->wts; o->weights_stride = K;
  o->shared = v->Sout; o->shared_stride = H; o->y = v->y; o->y_stride = H;
}

/* Generates, prepares and uploads one model's weights; allocates every
 * buffer for Tmax tokens. */
static dsk_status dev_make(dsk_ctx *ctx, const moe_model *m, int quick, int64_t Tmax, tu_rng *rng, moe_dev *v) {
  const int64_t H = m->H, I = m->I, E = m->E, K = m->topk;
  memset(v, 0, sizeof *v);
  v->m.ctx = ctx;
  dsk_status st = DSK_STATUS_OK;
  dsk_ctx *hctx = NULL;
  dsk_ctx_opts ho;
  dsk_ctx_opts_init(&ho);
  ho.device = "cpu";
  ho.backend = "cpu-ref";
  st = dsk_ctx_create(&hctx, &ho);
  uint8_t *tab = malloc(E4_TABLE);
  if (st == DSK_STATUS_OK && !tab) st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) e4_table(rng, tab);

  /* routed experts: nd distinct ones, uploaded round-robin into E slots */
  const int64_t nd = quick || E < MOE_DISTINCT ? E : MOE_DISTINCT;
  void *hp[4] = {NULL, NULL, NULL, NULL}, *sp[4] = {NULL, NULL, NULL, NULL};
  int64_t pb[4], sb[4], full[4];
  if (st == DSK_STATUS_OK) st = prepare(hctx, rng, tab, m->mx, nd, H, I, hp, pb);
  if (st == DSK_STATUS_OK) st = prepare(hctx, rng, tab, 0, 1, H, I, sp, sb);
  dsk_moe_weights_bytes(m->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8, E, H, I, full);
  void *dw[4], *ds[4];
  for (int i = 0; i < 4; i++) {
    dw[i] = bm_alloc(&v->m, (size_t)full[i], &st);
    for (int64_t e = 0; e < E && st == DSK_STATUS_OK; e++) {
      const int64_t per = pb[i] / nd;
      st = dsk_mem_upload(ctx, (uint8_t *)dw[i] + e * per, (const uint8_t *)hp[i] + (e % nd) * per, (size_t)per);
    }
    ds[i] = bm_put(&v->m, sp[i], (size_t)sb[i], &st);
  }
  for (int i = 0; i < 4; i++) {
    free(hp[i]);
    free(sp[i]);
  }
  free(tab);
  if (hctx) dsk_ctx_destroy(hctx);

  /* router and activations */
  dsk_bf16 *gate = malloc(sizeof(dsk_bf16) * (size_t)(E * H)), *x = malloc(sizeof(dsk_bf16) * (size_t)(Tmax * H));
  float *bias = malloc(sizeof(float) * (size_t)E);
  if (st == DSK_STATUS_OK && (!gate || !x || !bias)) st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) {
    tu_fill_bf16_normal(rng, gate, (size_t)(E * H), 1.0 / sqrt((double)H));
    /* x: a block of normals repeated (large T) */
    tu_fill_bf16_normal_rep(rng, x, (size_t)(Tmax * H), 1.0);
    for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(rng) * 0.05);
  }
  v->gate = bm_put(&v->m, gate, sizeof(dsk_bf16) * (size_t)(E * H), &st);
  v->x = bm_put(&v->m, x, sizeof(dsk_bf16) * (size_t)(Tmax * H), &st);
  v->bias = bm_put(&v->m, bias, sizeof(float) * (size_t)E, &st);
  free(gate);
  free(x);
  free(bias);
  v->y = bm_alloc(&v->m, sizeof(dsk_bf16) * (size_t)(Tmax * H), &st);
  v->ids = bm_alloc(&v->m, sizeof(int32_t) * (size_t)(Tmax * K), &st);
  v->wts = bm_alloc(&v->m, sizeof(float) * (size_t)(Tmax * K), &st);

  /* the layer and its workspace (planned for Tmax) */
  dsk_moe_desc *d = &v->layer;
  dsk_moe_desc_init(d, m->id);
  d->T = Tmax;
  d->H = H; d->E = E; d->E_local = E; d->topk = K;
  d->gate_w = v->gate; d->gate_bias = v->bias;
  d->x = v->x; d->x_stride = H; d->y = v->y; d->y_stride = H;
  d->ids_out = v->ids; d->weights_out = v->wts;
  d->routed.fmt = m->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8; d->routed.E = E; d->routed.I = I;
  d->routed.w13 = dw[0]; d->routed.sf13 = dw[1]; d->routed.w2 = dw[2]; d->routed.sf2 = dw[3];
  d->shared.fmt = DSK_MOE_W_FP8; d->shared.E = 1; d->shared.I = I;
  d->shared.w13 = ds[0]; d->shared.sf13 = ds[1]; d->shared.w2 = ds[2]; d->shared.sf2 = ds[3];
  if (st == DSK_STATUS_OK) {
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    st = dsk_moe_plan(ctx, d, &pi);
    d->workspace = bm_alloc(&v->m, (size_t)pi.workspace_bytes, &st);
    d->workspace_bytes = pi.workspace_bytes;
  }
  v->aux = NULL;
  if (st == DSK_STATUS_OK) st = dsk_stream_create(ctx, &v->aux);

  /* the op chain's own buffers */
  int64_t Ms, Au;
  aligned(m, Tmax, &Ms, &Au);
  v->xq = bm_alloc(&v->m, (size_t)(Tmax * H), &st);
  v->xsf = bm_alloc(&v->m, (size_t)(Tmax * (H / 128)), &st);
  v->sfx = bm_alloc(&v->m, (size_t)dsk_sf_packed_words(1, Tmax, H / 128) * 4, &st);
  v->A = bm_alloc(&v->m, (size_t)(Ms * H), &st);
  v->Asf = bm_alloc(&v->m, (size_t)(Ms * (H / 128)), &st);
  v->mind = bm_alloc(&v->m, (size_t)Ms * 4, &st);
  v->inv = bm_alloc(&v->m, (size_t)(Tmax * K) * 4, &st);
  v->sfa = bm_alloc(&v->m, (size_t)dsk_sf_packed_words(1, Ms, H / 128) * 4, &st);
  v->D1 = bm_alloc(&v->m, (size_t)(Ms * 2 * I) * 2, &st);
  v->A2 = bm_alloc(&v->m, (size_t)(Ms * I), &st);
  v->sfa2 = bm_alloc(&v->m, (size_t)dsk_sf_packed_words(1, Ms, I / 128) * 4, &st);
  v->D2 = bm_alloc(&v->m, (size_t)(Ms * H) * 2, &st);
  v->S1 = bm_alloc(&v->m, (size_t)(Tmax * 2 * I) * 2, &st);
  v->S2 = bm_alloc(&v->m, (size_t)(Tmax * I), &st);
  v->ssf2 = bm_alloc(&v->m, (size_t)dsk_sf_packed_words(1, Tmax, I / 128) * 4, &st);
  v->Sout = bm_alloc(&v->m, (size_t)(Tmax * H) * 2, &st);
  if (st == DSK_STATUS_OK) {
    moe_run r;
    case_descs(m, v, Tmax, &r);
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    st = dsk_moe_permute_plan(ctx, &r.perm, &pi);
    v->perm_ws_bytes = pi.workspace_bytes;
    v->perm_ws = bm_alloc(&v->m, (size_t)pi.workspace_bytes, &st);
    /* the router's workspace (the fast path on CUDA: grid-wide logits) */
    if (st == DSK_STATUS_OK) st = dsk_moe_route_plan(ctx, &r.route, &pi);
    v->route_ws_bytes = pi.workspace_bytes;
    v->route_ws = bm_alloc(&v->m, (size_t)pi.workspace_bytes, &st);
  }
  return st;
}

/* The four GEMMs' workspace (split-K partials, from their plans) for one
 * case: one buffer, grown when a case needs more. */
static dsk_status gemm_ws(dsk_ctx *ctx, moe_dev *v, moe_run *r) {
  dsk_plan_info pi;
  int64_t need[4] = {0, 0, 0, 0};
  dsk_status st = DSK_STATUS_OK;
  for (int i = 0; i < 4 && st == DSK_STATUS_OK; i++) {
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    if (i < 2) st = dsk_moe_gemm_plan(ctx, i == 0 ? &r->fc1 : &r->fc2, &pi);
    else st = dsk_dense_fp8_gemm_plan(ctx, i == 2 ? &r->sfc1 : &r->sfc2, &pi);
    need[i] = pi.workspace_bytes;
  }
  int64_t mx = 0;
  for (int i = 0; i < 4; i++) mx = need[i] > mx ? need[i] : mx;
  if (st == DSK_STATUS_OK && mx > v->gemm_ws_bytes) {
    v->gemm_ws = bm_alloc(&v->m, (size_t)mx, &st); /* the smaller one stays until the end */
    v->gemm_ws_bytes = st == DSK_STATUS_OK ? mx : 0;
  }
  r->fc1.workspace = r->fc2.workspace = r->sfc1.workspace = r->sfc2.workspace = v->gemm_ws;
  r->fc1.workspace_bytes = r->fc2.workspace_bytes = v->gemm_ws_bytes;
  r->sfc1.workspace_bytes = r->sfc2.workspace_bytes = v->gemm_ws_bytes;
  return st;
}

/* Distinct experts in ids [n] (host). */
static int64_t count_active(const int32_t *ids, int64_t n, int64_t E) {
  unsigned char *seen = calloc((size_t)E, 1);
  int64_t a = 0;
  if (!seen) return 0;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < E && !seen[ids[i]]) {
      seen[ids[i]] = 1;
      a++;
    }
  free(seen);
  return a;
}

int dsk_bench_moe(dsk_ctx *ctx, const dsk_bench_moe_opts *o, FILE *out) {
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  dsk_ctx_get_info(ctx, &info);
  tu_rng rng = tu_rng_make(o->seed ? o->seed : 7);
  const moe_model *models = o->quick ? k_models_quick : k_models;
  const int nmodels = 3;
  const int *Ts = o->quick ? k_T_quick : k_T;
  const int nT = o->quick ? (int)(sizeof k_T_quick / sizeof k_T_quick[0]) : (int)(sizeof k_T / sizeof k_T[0]);
  int op_only = -1;
  if (o->op) {
    for (int i = 0; i < OPM_COUNT; i++)
      if (strcmp(o->op, k_op_names[i]) == 0) op_only = i;
    if (op_only < 0) {
      fprintf(stderr, "bench: unknown moe op '%s' (layer, layer+aux, route, quant, permute, fc1, swiglu, fc2, shared, "
              "gather)\n",
              o->op);
      return 1;
    }
  }
  int any = 0;
  for (int mi = 0; mi < nmodels; mi++) {
    if (o->model && !strstr(models[mi].name, o->model)) continue;
    for (int ti = 0; ti < nT; ti++) any |= !(o->max_T && Ts[ti] > o->max_T) && !(o->only_T && Ts[ti] != o->only_T);
  }
  if (!any)
    return dsk__bench_no_case("moe", o->quick ? "models dsv4-flash, dsv4-pro, glm-5.1; T 1, 16 (--quick)"
                                              : "models dsv4-flash, dsv4-pro, glm-5.1; T 1, 16, 128, 4096");
  double copy_gbps = 0;
  if (dsk__bench_preamble(ctx, &info, "moe", o->quick, o->warm, out, &copy_gbps) != 0) return 1;
  fprintf(out, "# %s shapes; experts generated in process and prepared by dsk_moe_prepare_weights (%s); worst-case M_sum "
          "(graph-safe, as dsk_moe_run); tactics: heuristic / tuned entry\n",
          o->quick ? "REDUCED (--quick)" : "production TP1", o->quick ? "all distinct" : "4 distinct, repeated over E");
  fprintf(out, "# gbps: weight bytes (active routed experts + shared + router) for layer/route/fc1/fc2/shared, "
          "activation bytes read+written for quant/permute/swiglu/gather; pct_copy_bw = gbps / copy; tflops over real "
          "rows (T*topk), no padding\n");
  fprintf(out, "model,H,I,E,topk,T,op,M_sum,A_used,active,median_us,tflops,gbps,pct_copy_bw,bytes,goal\n");
  fflush(out);

  int rc = 0;
  for (int mi = 0; mi < nmodels && !rc; mi++) {
    const moe_model *m = &models[mi];
    if (o->model && !strstr(m->name, o->model)) continue;
    int64_t Tmax = 0;
    for (int ti = 0; ti < nT; ti++) {
      const int T = Ts[ti];
      if ((o->max_T && T > o->max_T) || (o->only_T && T != o->only_T)) continue;
      if (T > Tmax) Tmax = T;
    }
    if (!Tmax) continue;
    const int64_t H = m->H, I = m->I, E = m->E, K = m->topk;
    moe_dev v;
    dsk_status st = dev_make(ctx, m, o->quick, Tmax, &rng, &v);
    if (st != DSK_STATUS_OK) {
      fprintf(stderr, "bench: %s: set-up (T %lld): %s: %s\n", m->name, (long long)Tmax, dsk_status_name(st),
              dsk_last_error());
      bm_free(&v.m);
      return 1;
    }
    int64_t per[4], sh[4];
    dsk_moe_weights_bytes(m->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8, 1, H, I, per);
    dsk_moe_weights_bytes(DSK_MOE_W_FP8, 1, H, I, sh);
    const double shared_b = (double)(sh[0] + sh[1] + sh[2] + sh[3]), gate_b = 2.0 * (double)(E * H);
    int32_t *hids = malloc(sizeof(int32_t) * (size_t)(Tmax * K));
    for (int ti = 0; ti < nT && !rc; ti++) {
      const int64_t T = Ts[ti];
      if ((o->max_T && T > o->max_T) || (o->only_T && T != o->only_T)) continue;
      moe_run r;
      case_descs(m, &v, T, &r);
      st = gemm_ws(ctx, &v, &r);
      /* the chain once (valid inputs for every op), then the active experts */
      for (int op = OPM_ROUTE; op < OPM_COUNT && st == DSK_STATUS_OK; op++) {
        r.op = op;
        st = run_once(ctx, &r);
      }
      if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
      if (st == DSK_STATUS_OK && hids) st = dsk_mem_download(ctx, hids, v.ids, sizeof(int32_t) * (size_t)(T * K));
      if (st != DSK_STATUS_OK) {
        fprintf(stderr, "bench: %s T=%lld: set-up run: %s: %s\n", m->name, (long long)T, dsk_status_name(st),
                dsk_last_error());
        rc = 1;
        break;
      }
      const int64_t active = hids ? count_active(hids, T * K, E) : 0;
      const double a = (double)active;
      for (int op = 0; op < OPM_COUNT && !rc; op++) {
        if (op_only >= 0 && op != op_only) continue;
        r.op = op;
        dsk_bench_opts bo = {sizeof bo, NULL, o->quick ? 1 : 3, o->reps > 0 ? o->reps : 20, !o->warm, 1};
        dsk_bench_result br;
        memset(&br, 0, sizeof br);
        br.struct_size = sizeof br;
        st = dsk_bench_run(ctx, run_once, &r, &bo, &br);
        if (st != DSK_STATUS_OK) {
          fprintf(stderr, "bench: %s T=%lld %s: %s: %s\n", m->name, (long long)T, k_op_names[op], dsk_status_name(st),
                  dsk_last_error());
          rc = 1;
          break;
        }
        const double Td = (double)T, Hd = (double)H, Id = (double)I, Kd = (double)K;
        const double f1 = 2.0 * Td * Kd * 2.0 * Id * Hd, f2 = 2.0 * Td * Kd * Hd * Id, fs = 6.0 * Td * Id * Hd,
                     fr = 2.0 * Td * (double)E * Hd;
        const double b1 = a * (double)(per[0] + per[1]), b2 = a * (double)(per[2] + per[3]);
        const double Ms = (double)r.perm.M_sum;
        double flop = 0, bytes = 0;
        switch (op) {
          case OPM_LAYER:
          case OPM_LAYER_AUX: flop = f1 + f2 + fs + fr; bytes = b1 + b2 + shared_b + gate_b; break;
          case OPM_ROUTE: flop = fr; bytes = gate_b; break;
          case OPM_QUANT: bytes = Td * Hd * 2 + Td * Hd + Td * Hd / 128; break;
          case OPM_PERMUTE: /* ids + real rows read and written (no padding fill); m_indices; SFA packed */
            bytes = Td * Kd * (2 * (Hd + Hd / 128) + 4) + Ms * 4 + 2 * Ms * Hd / 128;
            break;
          case OPM_FC1: flop = f1; bytes = b1; break;
          case OPM_SWIGLU: bytes = Td * Kd * (2 * Id * 2 + Id + Id / 128) + Ms * 4; break; /* live rows only */
          case OPM_FC2: flop = f2; bytes = b2; break;
          case OPM_SHARED: flop = fs; bytes = shared_b; break;
          default: bytes = Td * Kd * Hd * 2 + Td * Hd * 4; break;
        }
        const double us = br.median_us;
        const double tflops = us > 0 ? flop / (us * 1e6) : 0.0, gbps = us > 0 ? bytes / (us * 1e3) : 0.0;
        const double pct = copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0;
        char goal[24] = "";
        if ((op == OPM_LAYER || op == OPM_LAYER_AUX) && mi == 0 && !o->quick && T <= 16)
          snprintf(goal, sizeof goal, ">=70%%:%s", pct >= 70.0 ? "yes" : "no");
        if ((op == OPM_LAYER || op == OPM_LAYER_AUX) && mi == 0 && !o->quick && T == 4096)
          snprintf(goal, sizeof goal, ">=200TF:%s", tflops >= 200.0 ? "yes" : "no");
        fprintf(out, "%s,%lld,%lld,%lld,%lld,%lld,%s,%lld,%lld,%lld,%.2f,%.2f,%.1f,%.1f,%.0f,%s\n", m->name, (long long)H,
                (long long)I, (long long)E, (long long)K, (long long)T, k_op_names[op], (long long)r.perm.M_sum,
                (long long)r.perm.A_used, (long long)active, us, tflops, gbps, pct, bytes, goal);
        fflush(out);
      }
    }
    free(hids);
    dsk_stream_destroy(ctx, v.aux);
    bm_free(&v.m);
  }
  return rc;
}
