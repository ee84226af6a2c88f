/* moe_forward.c - the MoE layer dsk_moe_run (+ dsk_moe_plan,
 * dsk_moe_desc_init) composed from the MoE ops (include/dsk.h, MoE section;
 * spec/mxfp4-moe.md; docs/moe.md): the workspace layout
 * (dsk__moe_ws_layout), the validation of dsk_moe_desc with its four GEMM
 * tactics, the slots the composition needs, and the run: route, quantize x,
 * permute, pack SFA, FC1, SwiGLU + quant, FC2, the shared expert, gather.
 * The forward's permute and SwiGLU skip the padding rows (their flags; the
 * GEMMs are row-independent, spec §5.5), and with aux_stream the shared
 * expert runs on that stream between two stream joins.
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "moe_internal.h"
#include "format/mxfp4.h"
#include "../tune/tuner.h"

void dsk_moe_desc_init(dsk_moe_desc *d, dsk_moe_model model) {
  if (!d) return;
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  int64_t H, I, E, k;
  float scale, limit;
  dsk_moe_score score;
  dsk_moe_wfmt wf;
  switch (model) {
    case DSK_MOE_MODEL_DSV4_FLASH:
      H = 4096; I = 2048; E = 256; k = 6; scale = 1.5f; limit = 10.0f; score = DSK_MOE_SCORE_SQRT_SOFTPLUS;
      wf = DSK_MOE_W_MXFP4;
      break;
    case DSK_MOE_MODEL_DSV4_PRO:
      H = 7168; I = 3072; E = 384; k = 6; scale = 2.5f; limit = 10.0f; score = DSK_MOE_SCORE_SQRT_SOFTPLUS;
      wf = DSK_MOE_W_MXFP4;
      break;
    case DSK_MOE_MODEL_GLM51:
      H = 6144; I = 2048; E = 256; k = 8; scale = 2.5f; limit = 0.0f; score = DSK_MOE_SCORE_SIGMOID;
      wf = DSK_MOE_W_FP8;
      break;
    default: return;
  }
  d->H = H;
  d->E = E;
  d->E_local = E;
  d->topk = k;
  d->router = DSK_MOE_ROUTER_SCORED;
  d->score = score;
  d->routed_scaling_factor = scale;
  d->swiglu_limit = limit;
  d->shared_limit = limit;
  d->routed.fmt = wf;
  d->routed.E = E;
  d->routed.I = I;
  d->shared.fmt = DSK_MOE_W_FP8;
  d->shared.E = 1;
  d->shared.I = I;
}

static int64_t al256(int64_t x) { return (x + 255) / 256 * 256; }

/* Split-K rows of the shared expert's GEMMs: their partials take split x T
 * <= 4 x fwd_split_rows(T) rows (fwd_split, the gws region). */
static int64_t fwd_split_rows(int64_t T) { return T < DSK__MOE_FWD_SPLIT_ROWS ? T : DSK__MOE_FWD_SPLIT_ROWS; }

void dsk__moe_ws_layout(const dsk_ctx *ctx, const dsk_moe_desc *d, int64_t T, dsk__moe_ws *w) {
  (void)ctx;
  memset(w, 0, sizeof *w);
  dsk_moe_align_desc ad;
  memset(&ad, 0, sizeof ad);
  ad.struct_size = sizeof ad;
  ad.M = T;
  ad.topk = d->topk;
  ad.E_local = d->E_local;
  ad.cap = d->align_cap;
  ad.family = DSK_MOE_ALIGN_DSK;
  int64_t ms = 0, au = 0;
  (void)dsk_moe_aligned_m(&ad, &ms, &au); /* validated by the caller */
  w->M_sum = ms;
  w->A_used = au;
  const int64_t H = d->H, I = d->routed.I, K = d->topk, Is = d->shared.w13 ? d->shared.I : 0;
  int64_t o = 0;
#define REGION(field, bytes) \
  do {                       \
    w->field = o;            \
    o += al256(bytes);       \
  } while (0)
  REGION(ids, T * K * 4);
  REGION(w, T * K * 4);
  REGION(xq, T * H);
  REGION(xsf, T * (H / 128));
  const int64_t a_bytes = ms * (H > I ? H : I); /* A (FC1 input), then A2 (FC2 input) */
  REGION(A, a_bytes);
  REGION(Asf, ms * (H / 128));
  REGION(mind, ms * 4);
  REGION(inv, T * K * 4);
  REGION(sfa, dsk_sf_packed_words(1, ms, H / 128) * 4);
  /* D1, then D2; before them (step 1 of dsk_moe_run) the router's
   * workspace, fp64 logits [T, E] (route_ws_need), which is consumed before
   * FC1 writes D1 */
  const int64_t d_bytes = ms * (2 * I > H ? 2 * I : H) * 2, r_bytes = dsk__moe_route_ws_bytes(T, d->E);
  REGION(D, d_bytes > r_bytes ? d_bytes : r_bytes);
  REGION(sfa2, dsk_sf_packed_words(1, ms, I / 128) * 4);
  w->perm_bytes = 2 * d->E_local * (int64_t)sizeof(int64_t);
  REGION(perm, w->perm_bytes);
  if (Is > 0) {
    REGION(sfx, dsk_sf_packed_words(1, T, H / 128) * 4);
    REGION(S1, T * 2 * Is * 2);
    REGION(S2, T * Is);
    REGION(ssf2, dsk_sf_packed_words(1, T, Is / 128) * 4);
    REGION(Sout, T * H * 2);
    /* split-K partials of the dense GEMMs (fwd_split) */
    w->gws_bytes = 4 * fwd_split_rows(T) * (2 * Is > H ? 2 * Is : H) * 4;
    REGION(gws, w->gws_bytes);
  }
#undef REGION
  w->total = o;
}

static dsk_status check_weights(const char *op, const char *name, const dsk_moe_weights *w, int64_t E, int64_t H,
                                int shared) {
  char f[64];
  snprintf(f, sizeof f, "%s.fmt", name);
  TRY(check_wfmt(op, f, (int)w->fmt));
  if (shared && w->fmt != DSK_MOE_W_FP8)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: shared.fmt %d is not DSK_MOE_W_FP8 (the shared expert is FP8 128x128)",
                     op, (int)w->fmt);
  if (w->E != E)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.E %" PRId64 " != %" PRId64 " (%s)", op, name, w->E, E,
                     shared ? "one shared expert" : "E_local");
  snprintf(f, sizeof f, "%s.I", name);
  TRY(check_size(op, f, w->I, 128, DSK_MOE_MAX_K, 128, "(intermediate per rank)"));
  (void)H;
  snprintf(f, sizeof f, "%s.w13", name);
  TRY(check_ptr(op, f, w->w13, 1, "prepared W13"));
  snprintf(f, sizeof f, "%s.sf13", name);
  TRY(check_ptr(op, f, w->sf13, 4, "packed SF13 words"));
  snprintf(f, sizeof f, "%s.w2", name);
  TRY(check_ptr(op, f, w->w2, 1, "prepared W2"));
  snprintf(f, sizeof f, "%s.sf2", name);
  TRY(check_ptr(op, f, w->sf2, 4, "packed SF2 words"));
  return DSK_STATUS_OK;
}

/* The split-K a forward GEMM runs with (results do not depend on it beyond
 * fp32 summation order): the tactic's split where the backend needs no
 * workspace for it (dsk__moe_gemm_ws_bytes 0: the CUDA skinny kernel's warp
 * slices); otherwise routed GEMMs 1 (their partials, split x M_sum x N x 4
 * bytes, would outgrow the layer's workspace) and dense GEMMs the tactic's
 * split, halved until split x T <= 4 x min(T, DSK__MOE_FWD_SPLIT_ROWS) so the
 * partials fit the gws region of dsk__moe_ws_layout. */
static void fwd_split(const dsk_ctx *ctx, dsk_tactic *t, int fmt, int64_t rows, int64_t N, int64_t K, int64_t T,
                      int dense) {
  if (t->v[2] <= 1 || dsk__moe_gemm_ws_bytes(ctx, !dense, fmt, rows, N, K, t) == 0) return;
  if (!dense) {
    t->v[2] = 1;
    return;
  }
  while (t->v[2] > 1 && t->v[2] * T > 4 * fwd_split_rows(T)) t->v[2] /= 2;
}

/* Shapes and pointers; T_eff = the T the workspace is sized for. The four
 * GEMM tactics (FC1, FC2, and with a shared expert its two dense GEMMs in
 * ts[0], ts[1]) are resolved here, before anything runs, so a
 * DSK_AUTOTUNE_REQUIRE_HIT miss fails the call before its first launch. */
dsk_status dsk__moe_fwd_validate(const dsk_ctx *ctx, const dsk_moe_desc *d, int run, int mode, dsk__moe_ws *ws,
                                 dsk_tactic *t1, dsk_tactic *t2, dsk_tactic ts[2], int *src1) {
  const char *op = OP_FWD;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_moe_desc"));
  TRY(check_count(op, "T", d->T));
  TRY(check_count(op, "T_max", d->T_max));
  const int64_t Tp = run ? d->T : (d->T_max > d->T ? d->T_max : d->T);
  if (Tp == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "H", d->H, 128, DSK_MOE_MAX_K, 128, NULL));
  TRY(check_size(op, "E", d->E, 1, DSK_MOE_MAX_EXPERTS, 1, NULL));
  TRY(check_size(op, "E_local", d->E_local, 1, d->E, 1, "(<= E)"));
  if (d->expert_offset < 0 || d->expert_offset + d->E_local > d->E)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: expert_offset %" PRId64 " + E_local %" PRId64 " is outside [0, E = %"
                     PRId64 "]", op, d->expert_offset, d->E_local, d->E);
  TRY(check_size(op, "topk", d->topk, 1, d->E < DSK_MOE_MAX_TOPK ? d->E : DSK_MOE_MAX_TOPK, 1, "(<= E and 16)"));
  if (d->align_cap != 0 && d->align_cap != 64 && d->align_cap != 128)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: align_cap %" PRId64 " is not 0 (= 128), 64 or 128", op, d->align_cap);
  if ((d->ids_in == NULL) != (d->weights_in == NULL))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: ids_in and weights_in must be given together (%s is NULL)", op,
                     d->ids_in ? "weights_in" : "ids_in");
  if (d->ids_in) {
    TRY(check_ptr(op, "ids_in", d->ids_in, 4, "int32 [T, topk]"));
    TRY(check_ptr(op, "weights_in", d->weights_in, 4, "fp32 [T, topk]"));
  } else {
    if (d->score != DSK_MOE_SCORE_SQRT_SOFTPLUS && d->score != DSK_MOE_SCORE_SIGMOID)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: score %d is not SQRT_SOFTPLUS (1) or SIGMOID (2)", op,
                       (int)d->score);
    if (d->router != DSK_MOE_ROUTER_SCORED && d->router != DSK_MOE_ROUTER_HASH)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: router %d is not SCORED (1) or HASH (2)", op, (int)d->router);
    TRY(check_ptr(op, "gate_w", d->gate_w, 2, "bf16 [E, H] router weight"));
    if (d->gate_bias) TRY(check_ptr(op, "gate_bias", d->gate_bias, 4, "fp32 [E]"));
    if (d->router == DSK_MOE_ROUTER_HASH) {
      TRY(check_ptr(op, "tid2eid", d->tid2eid, 8, "int64 [vocab, topk] for a hash router"));
      TRY(check_size(op, "vocab", d->vocab, 1, INT64_MAX / DSK_MOE_MAX_TOPK, 1, "(rows of tid2eid)"));
      TRY(check_ptr(op, "token_ids", d->token_ids, 4, "int32 [T] for a hash router"));
    }
    if (!isfinite(d->routed_scaling_factor) || d->routed_scaling_factor <= 0.0f)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: routed_scaling_factor %g is not finite and > 0", op,
                       (double)d->routed_scaling_factor);
  }
  if (d->ids_out) TRY(check_ptr(op, "ids_out", d->ids_out, 4, "int32 [T, topk]"));
  if (d->weights_out) TRY(check_ptr(op, "weights_out", d->weights_out, 4, "fp32 [T, topk]"));
  /* activations are checked for this call's T (a plan for T_max may carry
   * buffers of the current batch only, or none when T = 0) */
  if (d->T > 0) {
    TRY(check_rows(op, "x", d->x, 2, d->x_stride, d->T, d->H, "bf16 [T, H]"));
    TRY(check_rows(op, "y", d->y, 2, d->y_stride, d->T, d->H, "bf16 [T, H]"));
    if (ranges_overlap(d->y, rows_bytes(d->T, d->y_stride, d->H, 2), d->x, rows_bytes(d->T, d->x_stride, d->H, 2)) &&
        !(d->x == d->y && d->x_stride == d->y_stride))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: y %p partly overlaps x %p", op, (void *)d->y, (const void *)d->x);
  }
  TRY(check_weights(op, "routed", &d->routed, d->E_local, d->H, 0));
  TRY(check_limit(op, "swiglu_limit", d->swiglu_limit));
  if (d->shared.w13) {
    TRY(check_weights(op, "shared", &d->shared, 1, d->H, 1));
    TRY(check_limit(op, "shared_limit", d->shared_limit));
  }
  dsk__moe_ws_layout(ctx, d, Tp, ws);
  const int64_t em = Tp * d->topk;
  TRY(dsk__moe_gemm_tactic(ctx, &d->fc1_tactic, (int)d->routed.fmt, ws->A_used, 2 * d->routed.I, d->H, d->E_local,
                           d->topk, Tp, em, mode, op, "fc1_tactic", t1, src1));
  TRY(dsk__moe_gemm_tactic(ctx, &d->fc2_tactic, (int)d->routed.fmt, ws->A_used, d->H, d->routed.I, d->E_local, d->topk,
                           Tp, em, mode, op, "fc2_tactic", t2, NULL));
  fwd_split(ctx, t1, (int)d->routed.fmt, ws->M_sum, 2 * d->routed.I, d->H, Tp, 0);
  fwd_split(ctx, t2, (int)d->routed.fmt, ws->M_sum, d->H, d->routed.I, Tp, 0);
  memset(ts, 0, 2 * sizeof *ts);
  if (d->shared.w13) {
    dsk_dense_gemm_desc e; /* the shape fields dsk__moe_dense_resolve reads; tactic all zero */
    memset(&e, 0, sizeof e);
    e.M = Tp;
    e.N = 2 * d->shared.I;
    e.K = d->H;
    TRY(dsk__moe_dense_resolve(ctx, &e, mode, &ts[0], NULL));
    e.N = d->H;
    e.K = d->shared.I;
    TRY(dsk__moe_dense_resolve(ctx, &e, mode, &ts[1], NULL));
    fwd_split(ctx, &ts[0], DSK_MOE_W_FP8, Tp, 2 * d->shared.I, d->H, Tp, 1);
    fwd_split(ctx, &ts[1], DSK_MOE_W_FP8, Tp, d->H, d->shared.I, Tp, 1);
  }
  if (run) TRY(check_workspace(op, d->workspace, d->workspace_bytes, ws->total));
  return DSK_STATUS_OK;
}

/* dsk_moe_run has no slot of its own: it needs the slots of the ops it is
 * composed of (the router only without ids_in, the dense GEMM only with a
 * shared expert). The name of the first missing one, or NULL. */
const char *dsk__moe_fwd_missing_slot(const dsk_backend *b, const dsk_moe_desc *d) {
  if (!d->ids_in && !b->moe_route) return OP_ROUTE;
  if (!b->fp8_quantize_1x128) return OP_FP8Q;
  if (!b->moe_permute) return OP_PERM;
  if (!b->sf_pack_mn_major) return OP_SFPACK;
  if (!b->moe_gemm) return OP_GEMM;
  if (!b->swiglu_quant) return OP_SWIGLU;
  if (d->shared.w13 && !b->dense_fp8_gemm) return OP_DENSE;
  if (!b->moe_gather) return OP_GATHER;
  return NULL;
}

static dsk_status fwd_not_served(const dsk_ctx *ctx, const dsk_moe_desc *d) {
  const dsk_backend *b = ctx->backend;
  if (b->is_cuda) return not_served(ctx, OP_FWD);
  return dsk__fail(DSK_STATUS_UNSUPPORTED, "moe: backend %s does not serve %s (no %s slot)", b->name, OP_FWD,
                   dsk__moe_fwd_missing_slot(b, d));
}

dsk_status dsk__moe_desc_copy(const dsk_ctx *ctx, const dsk_moe_desc *d, dsk_moe_desc *c) {
  TRY(check_ctx_desc(ctx, d, OP_FWD));
  return dsk__moe_grown_copy(OP_FWD, d, d->struct_size, offsetof(dsk_moe_desc, aux_stream), sizeof *c, c,
                             "dsk_moe_desc");
}

dsk_status dsk_moe_plan(dsk_ctx *ctx, const dsk_moe_desc *desc, dsk_plan_info *info) {
  TRY(check_plan_info(OP_FWD, info));
  dsk_moe_desc dc, *d = &dc;
  TRY(dsk__moe_desc_copy(ctx, desc, &dc));
  dsk__moe_ws ws;
  dsk_tactic t1, t2, ts[2];
  int src = DSK_TACTIC_HEURISTIC;
  memset(&ws, 0, sizeof ws);
  memset(&t1, 0, sizeof t1);
  TRY(dsk__moe_fwd_validate(ctx, d, 0, DSK__TUNE_PLAN, &ws, &t1, &t2, ts, &src));
  fill_plan(ctx, info, ws.total, &t1, src);
  if (dsk__moe_fwd_missing_slot(ctx->backend, d)) return fwd_not_served(ctx, d);
  return DSK_STATUS_OK;
}

/* DSK_MOE_FORK_EARLY (compile-time; default 1; docs/benchmarks.md "MoE
 * v13"): with aux_stream and the backend's fused prologue, calls of at
 * most DSK_MOE_FORK_EARLY_MAX_T tokens fork the shared expert before the
 * router, and it quantizes x on aux itself. 0 = the fork after step 2
 * always (the A/B baseline). Measured on an H100: layer+aux 0.92-0.95x at
 * T 1 (the shared expert's latency chain beside the router's), 1.01-1.02x
 * at T 16 (DSv4-Flash, -Pro), hence the bound. */
#ifndef DSK_MOE_FORK_EARLY
#define DSK_MOE_FORK_EARLY 1
#endif
#ifndef DSK_MOE_FORK_EARLY_MAX_T
#define DSK_MOE_FORK_EARLY_MAX_T 4
#endif

static int64_t *cnt(const dsk_moe_desc *d, int i) { return d->counters ? d->counters + i : NULL; }

/* The shared expert [6.2 step 7]: FP8 dense FC1 on the quantized x of step
 * 2, SwiGLU (shared_limit) + quantize, FC2 into the Sout region; all on
 * `stream` (the call's stream, or its aux_stream). */
static dsk_status run_shared(dsk_ctx *ctx, const dsk_moe_desc *d, const dsk__moe_ws *wsp, const dsk_tactic ts[2],
                             void *stream) {
  const dsk__moe_ws ws = *wsp;
  uint8_t *base = (uint8_t *)d->workspace;
  const int64_t T = d->T, H = d->H, Is = d->shared.I;
  uint8_t *xq = base + ws.xq;
  dsk_bf16 *S1 = (dsk_bf16 *)(base + ws.S1);
  uint8_t *S2 = base + ws.S2;
  int32_t *ssf2 = (int32_t *)(base + ws.ssf2);
  dsk_bf16 *sout = (dsk_bf16 *)(base + ws.Sout);
  dsk_dense_gemm_desc e;
  memset(&e, 0, sizeof e);
  e.struct_size = sizeof e;
  e.stream = stream;
  e.M = T; e.N = 2 * Is; e.K = H; e.A = xq; e.A_stride = H;
  e.sfa.words = (int32_t *)(base + ws.sfx); e.sfa.groups = 1; e.sfa.mn = T; e.sfa.sf_k = H / 128;
  e.B = (const uint8_t *)d->shared.w13;
  e.sfb.words = d->shared.sf13; e.sfb.groups = 1; e.sfb.mn = 2 * Is; e.sfb.sf_k = H / 128;
  e.D = S1; e.D_stride = 2 * Is; e.tactic = ts[0];
  e.workspace = base + ws.gws; e.workspace_bytes = ws.gws_bytes;
  TRY(dsk_dense_fp8_gemm(ctx, &e));
  dsk_swiglu_quant_desc s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.stream = stream;
  s.rows = T; s.I = Is; s.D1 = S1; s.D1_stride = 2 * Is; s.limit = d->shared_limit;
  s.q = S2; s.q_stride = Is; s.sf_packed = ssf2;
  s.counters = d->counters ? d->counters + DSK_MOE_CNT_H_NONFINITE : NULL;
  TRY(dsk_swiglu_quant(ctx, &s));
  e.N = H; e.K = Is; e.A = S2; e.A_stride = Is;
  e.sfa.words = ssf2; e.sfa.sf_k = Is / 128;
  e.B = (const uint8_t *)d->shared.w2;
  e.sfb.words = d->shared.sf2; e.sfb.mn = H; e.sfb.sf_k = Is / 128;
  e.D = sout; e.D_stride = H; e.tactic = ts[1];
  return dsk_dense_fp8_gemm(ctx, &e);
}

dsk_status dsk_moe_run(dsk_ctx *ctx, const dsk_moe_desc *desc) {
  dsk__moe_ws ws;
  dsk_tactic t1, t2, ts[2];
  dsk_moe_desc dc, *d = &dc;
  TRY(dsk__moe_desc_copy(ctx, desc, &dc));
  TRY(dsk__moe_fwd_validate(ctx, d, 1, DSK__TUNE_RUN, &ws, &t1, &t2, ts, NULL));
  if (d->T == 0) return DSK_STATUS_OK;
  if (dsk__moe_fwd_missing_slot(ctx->backend, d)) return fwd_not_served(ctx, d);

  const int64_t T = d->T, K = d->topk, H = d->H, I = d->routed.I, Ms = ws.M_sum;
  uint8_t *base = (uint8_t *)d->workspace;
  int32_t *ids = d->ids_out ? d->ids_out : (int32_t *)(base + ws.ids);
  float *wts = d->weights_out ? d->weights_out : (float *)(base + ws.w);
  uint8_t *xq = base + ws.xq, *xsf = base + ws.xsf, *A = base + ws.A, *Asf = base + ws.Asf;
  int32_t *mind = (int32_t *)(base + ws.mind), *inv = (int32_t *)(base + ws.inv);
  int32_t *sfa = (int32_t *)(base + ws.sfa), *sfa2 = (int32_t *)(base + ws.sfa2);
  dsk_bf16 *Dbuf = (dsk_bf16 *)(base + ws.D);
  const int has_shared = d->shared.w13 != NULL;
  const int mx = d->routed.fmt == DSK_MOE_W_MXFP4;
  /* the shared expert on aux_stream (it reads only x, quantized): forked
   * before the router where the fused prologue serves the call (then aux
   * quantizes x itself, beside the router and the prologue), else after
   * step 2, whose xq it reads; joined before the gather */
  const int aux = has_shared && d->aux_stream && d->aux_stream != d->stream && ctx->backend->stream_join;
  /* after the fork an error still joins aux_stream back into stream, so
   * nothing of this call runs unordered after it returns */
  int forked = 0;
#define TRY_J(call)                                                        \
  do {                                                                     \
    const dsk_status st_ = (call);                                         \
    if (st_ != DSK_STATUS_OK) {                                            \
      if (forked) (void)ctx->backend->stream_join(ctx, d->stream, d->aux_stream); \
      return st_;                                                          \
    }                                                                      \
  } while (0)

  /* 2-4 fused for decode-sized calls where the backend has the prologue
   * (quantize, permute, pack SFA in one kernel; the same bytes) */
  const int32_t *use_ids = d->ids_in ? d->ids_in : ids;
  const float *use_w = d->ids_in ? d->weights_in : wts;
  dsk__moe_prologue_args a;
  memset(&a, 0, sizeof a);
  a.stream = d->stream;
  a.T = T; a.topk = K; a.E = d->E; a.E_local = d->E_local; a.expert_offset = d->expert_offset; a.H = H;
  a.A_used = ws.A_used; a.M_sum = Ms;
  a.ids = use_ids; a.ids_stride = K; a.x = d->x; a.x_stride = d->x_stride;
  a.A = A; a.A_stride = H; a.sfa = sfa; a.m_indices = mind; a.inv_perm = inv; a.inv_perm_stride = K;
  a.cnt_x = cnt(d, DSK_MOE_CNT_X_NONFINITE);
  a.cnt_perm = cnt(d, DSK_MOE_CNT_BAD_EXPERT);
  int fuse = 0, early = 0;
  if (ctx->backend->moe_prologue && !(d->flags & DSK_MOE_RUN_UNFUSED)) {
    a.dry = 1; /* xq NULL: served here means served with or without it */
    TRY(ctx->backend->moe_prologue(ctx, &a, &fuse));
    a.dry = 0;
  }
  early = DSK_MOE_FORK_EARLY && aux && fuse && T <= DSK_MOE_FORK_EARLY_MAX_T;
  if (early) {
    TRY(ctx->backend->stream_join(ctx, d->aux_stream, d->stream));
    forked = 1;
    dsk_fp8_quantize_desc q;
    memset(&q, 0, sizeof q);
    q.struct_size = sizeof q;
    q.stream = d->aux_stream;
    q.rows = T; q.K = H; q.x_dtype = DSK_MOE_IN_BF16; q.x = d->x; q.x_stride = d->x_stride;
    q.q = xq; q.q_stride = H; q.sf_packed = (int32_t *)(base + ws.sfx);
    /* q.counters NULL: the prologue counts x's non-finite values */
    TRY_J(dsk_fp8_quantize_1x128(ctx, &q));
    TRY_J(run_shared(ctx, d, &ws, ts, d->aux_stream));
  }

  /* 1. route */
  if (!d->ids_in) {
    dsk_moe_route_desc r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.stream = d->stream;
    r.T = T; r.E = d->E; r.topk = K; r.score = d->score; r.router = d->router;
    r.H = H; r.x = d->x; r.x_stride = d->x_stride; r.gate_w = d->gate_w; r.bias = d->gate_bias;
    r.tid2eid = d->tid2eid; r.vocab = d->vocab; r.token_ids = d->token_ids;
    r.renormalize = 1; r.routed_scaling_factor = d->routed_scaling_factor;
    r.ids = ids; r.ids_stride = K; r.weights = wts; r.weights_stride = K;
    r.counters = cnt(d, DSK_MOE_CNT_ROUTE_BAD_TOKEN);
    r.workspace = Dbuf; /* the D region is free until FC1 (dsk__moe_ws_layout) */
    r.workspace_bytes = dsk__moe_route_ws_bytes(T, d->E);
    TRY_J(dsk_moe_route(ctx, &r));
  }
  int fused = 0;
  if (fuse) {
    a.xq = has_shared && !early ? xq : NULL;
    a.sfx = has_shared && !early ? (int32_t *)(base + ws.sfx) : NULL;
    TRY_J(ctx->backend->moe_prologue(ctx, &a, &fused));
    if (!fused && early) { /* not expected (the dry call said yes): order aux's xq before step 2 rewrites it */
      TRY(ctx->backend->stream_join(ctx, d->stream, d->aux_stream));
      forked = 0; /* the shared expert stays enqueued on aux, now ordered before what follows */
    }
  }
  /* 2. quantize x (raw scales for the permute, packed for the shared expert) */
  if (!fused) {
    dsk_fp8_quantize_desc q;
    memset(&q, 0, sizeof q);
    q.struct_size = sizeof q;
    q.stream = d->stream;
    q.rows = T; q.K = H; q.x_dtype = DSK_MOE_IN_BF16; q.x = d->x; q.x_stride = d->x_stride;
    q.q = xq; q.q_stride = H; q.sf = xsf; q.sf_stride = H / 128;
    q.sf_packed = has_shared ? (int32_t *)(base + ws.sfx) : NULL;
    q.counters = cnt(d, DSK_MOE_CNT_X_NONFINITE);
    TRY(dsk_fp8_quantize_1x128(ctx, &q));
  }
  if (aux && !early) {
    TRY(ctx->backend->stream_join(ctx, d->aux_stream, d->stream));
    forked = 1;
    TRY_J(run_shared(ctx, d, &ws, ts, d->aux_stream));
  }
  /* 3. permute into the contiguous layout (worst-case M_sum for T) */
  if (!fused) {
    dsk_moe_permute_desc p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.stream = d->stream;
    p.T = T; p.topk = K; p.E = d->E; p.E_local = d->E_local; p.expert_offset = d->expert_offset; p.K = H;
    p.A_used = ws.A_used; p.M_sum = Ms;
    p.ids = use_ids; p.ids_stride = K; p.xq = xq; p.xq_stride = H; p.xsf = xsf; p.xsf_stride = H / 128;
    p.A = A; p.A_stride = H; p.Asf = Asf; p.Asf_stride = H / 128; p.m_indices = mind;
    p.inv_perm = inv; p.inv_perm_stride = K;
    p.workspace = base + ws.perm; p.workspace_bytes = ws.perm_bytes;
    p.counters = cnt(d, DSK_MOE_CNT_BAD_EXPERT);
    p.flags = DSK_MOE_PERMUTE_NO_PAD_FILL; /* the GEMMs are row-independent, the gather skips padding [5.5] */
    TRY_J(dsk_moe_permute(ctx, &p));
  }
  /* 4. pack SFA (G 1, MN M_sum, sf_k H/128) */
  if (!fused) {
    dsk_sf_pack_desc s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.stream = d->stream;
    s.G = 1; s.MN = Ms; s.sf_k = H / 128; s.gran_mn = 1; s.sf = Asf; s.sf_stride = H / 128; s.out = sfa;
    TRY_J(dsk_sf_pack_mn_major(ctx, &s));
  }
  /* 5. FC1 -> D1 [M_sum, 2I] */
  dsk_moe_gemm_desc g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.stream = d->stream;
  g.M_sum = Ms; g.N = 2 * I; g.K = H; g.E_local = d->E_local; g.A_used = ws.A_used; g.expected_m = T * K;
  g.max_expert_rows = T; /* a token routes to an expert once: a speed hint only (dsk.h) */
  g.A = A; g.A_stride = H;
  g.sfa.words = sfa; g.sfa.groups = 1; g.sfa.mn = Ms; g.sfa.sf_k = H / 128;
  g.m_indices = mind; g.b_fmt = d->routed.fmt; g.B = d->routed.w13;
  g.sfb.words = d->routed.sf13; g.sfb.groups = d->E_local; g.sfb.mn = 2 * I; g.sfb.sf_k = mx ? H / 32 : H / 128;
  g.D = Dbuf; g.D_stride = 2 * I; g.tactic = t1;
  g.counters = cnt(d, DSK_MOE_CNT_GEMM_BAD_INDEX);
  TRY_J(dsk_moe_gemm(ctx, &g));
  /* 6. SwiGLU + re-quantize -> A2 [M_sum, I] (reuses A), packed SFA2 */
  {
    dsk_swiglu_quant_desc s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.stream = d->stream;
    s.rows = Ms; s.I = I; s.D1 = Dbuf; s.D1_stride = 2 * I; s.m_indices = mind; s.limit = d->swiglu_limit;
    s.q = A; s.q_stride = I; s.sf_packed = sfa2;
    s.counters = cnt(d, DSK_MOE_CNT_H_NONFINITE);
    s.flags = DSK_SWIGLU_SKIP_PADDING; /* FC2 is row-independent: its padding rows are never read */
    TRY_J(dsk_swiglu_quant(ctx, &s));
  }
  /* 7. FC2 -> D2 [M_sum, H] (reuses D1); the bad-index blocks were counted by FC1 */
  g.N = H; g.K = I; g.A = A; g.A_stride = I;
  g.sfa.words = sfa2; g.sfa.sf_k = I / 128;
  g.B = d->routed.w2; g.sfb.words = d->routed.sf2; g.sfb.mn = H; g.sfb.sf_k = mx ? I / 32 : I / 128;
  g.D = Dbuf; g.D_stride = H; g.tactic = t2; g.counters = NULL;
  TRY_J(dsk_moe_gemm(ctx, &g));
  /* 8. shared expert (here unless it runs on aux_stream) */
  if (has_shared && !aux) TRY(run_shared(ctx, d, &ws, ts, d->stream));
  dsk_bf16 *sout = has_shared ? (dsk_bf16 *)(base + ws.Sout) : NULL;
  if (forked) TRY(ctx->backend->stream_join(ctx, d->stream, d->aux_stream)); /* the gather reads sout */
#undef TRY_J
  /* 9. weighted gather + shared */
  {
    dsk_moe_gather_desc o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.stream = d->stream;
    o.T = T; o.topk = K; o.N = H; o.M_sum = Ms; o.D2 = Dbuf; o.D2_stride = H;
    o.inv_perm = inv; o.inv_perm_stride = K; o.weights = use_w; o.weights_stride = K;
    o.shared = sout; o.shared_stride = H; o.y = d->y; o.y_stride = d->y_stride;
    o.counters = cnt(d, DSK_MOE_CNT_GATHER_BAD_ROW);
    TRY(dsk_moe_gather(ctx, &o));
  }
  return DSK_STATUS_OK;
}
