/* moe_gemm.c - the MoE GEMMs dsk_moe_gemm and dsk_dense_fp8_gemm (+ plan):
 * descriptor validation, tactic resolution and dispatch (include/dsk.h, MoE
 * section; spec/mxfp4-moe.md; spec/autotune.md §1; docs/moe.md), and the
 * tactic sets, A5 re-validation and heuristics the tuner calls
 * (dsk__moe_tune_*, src/tune/tuner.h).
 *
 * The GEMMs' all-zero tactics resolve to the context's tuned entry
 * (src/tune; keys, A5 re-validation) else the heuristic of autotune.md §1;
 * run calls count the lookup, plan calls and dsk_op_supported do not.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "moe_internal.h"
#include "../tune/tuner.h"

/* DSK_MOE_SKINNY_KSPLIT (compile-time; default 1): the grouped heuristic's
 * larger split-K at BLOCK_M 64 for the skinny kernel's warp slices; 0 keeps
 * autotune.md §1's rule alone (the A/B baseline). */
#ifndef DSK_MOE_SKINNY_KSPLIT
#define DSK_MOE_SKINNY_KSPLIT 1
#endif

static void tactic_set(dsk_tactic *t, int op, int version, int32_t bm, int32_t bn, int32_t split) {
  memset(t, 0, sizeof *t);
  t->op = op;
  t->version = version;
  t->v[0] = bm;
  t->v[1] = bn;
  t->v[2] = split;
}
int64_t dsk__moe_gemm_ws_bytes(const dsk_ctx *ctx, int grouped, int fmt, int64_t rows, int64_t N, int64_t K,
                               const dsk_tactic *t) {
  if (ctx->backend->moe_gemm_workspace) return ctx->backend->moe_gemm_workspace(ctx, grouped, fmt, rows, N, K, t);
  return t->v[2] > 1 ? (int64_t)t->v[2] * rows * N * 4 : 0;
}

static int tactic_is_zero(const dsk_tactic *t) {
  static const dsk_tactic z;
  return memcmp(t, &z, sizeof z) == 0;
}

/* BLOCK_N and split-K of autotune.md §1 for `a` active groups. */
static void heuristic_n_split(int64_t a, int64_t N, int64_t K, int sms, int32_t *bn, int32_t *split) {
  if (sms < 1) sms = 1;
  *bn = a * N / 128 >= sms ? 128 : 64;
  const int32_t cand[3] = {1, 2, 4};
  *split = 0;
  for (int i = 0; i < 3; i++) {
    if ((K / cand[i]) % 128 != 0) continue;
    if (a * (N / *bn) * cand[i] >= sms) {
      *split = cand[i];
      break;
    }
  }
  if (!*split)
    for (int i = 2; i >= 0; i--)
      if ((K / cand[i]) % 128 == 0) {
        *split = cand[i];
        break;
      }
}

/* The tactic sets the tuner times (autotune.md §1), in the op's fixed
 * order: BLOCK_M, then BLOCK_N, then split-K ascending. */
static const int32_t k_bm_moe[2] = {64, 128}, k_bm_dense[4] = {16, 32, 64, 128};
static const int32_t k_bn[3] = {64, 128, 256}, k_split[3] = {1, 2, 4};

static int bn_split_ok(int32_t bn, int32_t sp, int64_t K) {
  return (bn == 64 || bn == 128 || bn == 256) && (sp == 1 || sp == 2 || sp == 4) && K % sp == 0 && (K / sp) % 128 == 0;
}

int dsk__moe_tune_tactics(const dsk__tune_shape *s, dsk_tactic *out, int max) {
  const int moe = s->op == DSK_OP_MOE_GEMM;
  if (!moe && s->op != DSK_OP_MOE_DENSE_GEMM) return 0;
  const int32_t *bms = moe ? k_bm_moe : k_bm_dense;
  const int nbm = moe ? 2 : 4;
  int n = 0;
  for (int i = 0; i < nbm; i++) {
    if (moe && (s->A < 1 || s->A % bms[i] != 0)) continue; /* BLOCK_M divides A_used (spec 5.4) */
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 3; k++) {
        if (!bn_split_ok(k_bn[j], k_split[k], s->K) || n >= max) continue;
        tactic_set(&out[n++], s->op, moe ? DSK_MOE_GEMM_TACTIC_VERSION : DSK_DENSE_GEMM_TACTIC_VERSION, bms[i],
                   k_bn[j], k_split[k]);
      }
  }
  return n;
}

/* A5: a stored tactic is usable for the real shape when it is in the set
 * (BLOCK_M dividing the real A_used, split-K fitting the real K). */
int dsk__moe_tune_tactic_fix(const dsk__tune_shape *s, dsk_tactic *t) {
  const int moe = s->op == DSK_OP_MOE_GEMM;
  if (!moe && s->op != DSK_OP_MOE_DENSE_GEMM) return 0;
  if (t->op != s->op || t->version != (moe ? DSK_MOE_GEMM_TACTIC_VERSION : DSK_DENSE_GEMM_TACTIC_VERSION)) return 0;
  const int32_t bm = t->v[0];
  if (moe) {
    if ((bm != 64 && bm != 128) || s->A < 1 || s->A % bm != 0) return 0;
  } else if (bm != 16 && bm != 32 && bm != 64 && bm != 128) {
    return 0;
  }
  if (!bn_split_ok(t->v[1], t->v[2], s->K)) return 0;
  for (int i = 3; i < 6; i++)
    if (t->v[i] != 0) return 0;
  return 1;
}

/* The heuristics of autotune.md §1. moe.gemm: a = min(rows, E_local), rows
 * = expected_m (0: A_used). dense_fp8.gemm: BLOCK_M = the smallest of the
 * set >= min(M, 128), a = ceil(M / BLOCK_M). */
static void moe_heuristic(const dsk_ctx *ctx, int wfmt, int64_t A_used, int64_t N, int64_t K, int64_t E_local,
                          int64_t rows, dsk_tactic *out) {
  const int64_t em = rows > 0 ? rows : A_used;
  const int64_t a = em < E_local ? em : E_local;
  const int32_t bm = A_used % 128 == 0 ? 128 : 64;
  int32_t bn, sp;
  heuristic_n_split(a, N, K, ctx->info.sm_count, &bn, &sp);
  tactic_set(out, DSK_OP_MOE_GEMM, DSK_MOE_GEMM_TACTIC_VERSION, bm, bn, sp);
#if DSK_MOE_SKINNY_KSPLIT
  /* [dsk] where the backend splits K without a workspace (the CUDA skinny
   * kernel at BLOCK_M 64, docs/moe.md: its split-K slices are warps of one
   * CTA, so one CTA per SM leaves an SM with 4 or 8 warps), the split grows
   * until the CTAs cover every SM twice (a * (N / BLOCK_N) * split >= 2 *
   * num_SMs), K / split staying a multiple of 128; elsewhere autotune.md
   * §1's rule stands */
  const int sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  while (sp < 4 && a * (N / bn) * sp < 2 * (int64_t)sms && K % (2 * sp) == 0 && (K / (2 * sp)) % 128 == 0) {
    dsk_tactic t = *out;
    t.v[2] = 2 * sp;
    if (dsk__moe_gemm_ws_bytes(ctx, 1, wfmt, A_used, N, K, &t) != 0) break;
    sp *= 2;
    *out = t;
  }
#else
  (void)wfmt;
#endif
}

static void dense_heuristic(const dsk_ctx *ctx, int64_t M, int64_t N, int64_t K, dsk_tactic *out) {
  const int64_t m = M < 128 ? M : 128;
  int32_t bm = 16;
  while (bm < m) bm *= 2;
  int32_t bn, sp;
  /* a = the m-blocks (docs/moe.md: autotune.md's "a = 1" read as one
   * group, whose rows still make ceil(M / BLOCK_M) tiles; split-K only
   * where those tiles leave SMs idle) */
  heuristic_n_split((M + bm - 1) / bm, N, K, ctx->info.sm_count, &bn, &sp);
  tactic_set(out, DSK_OP_MOE_DENSE_GEMM, DSK_DENSE_GEMM_TACTIC_VERSION, bm, bn, sp);
}

void dsk__moe_tune_heuristic(const dsk_ctx *ctx, const dsk__tune_shape *s, dsk_tactic *out) {
  if (s->op == DSK_OP_MOE_GEMM)
    moe_heuristic(ctx, s->wfmt, s->A, s->N, s->K, s->E, dsk__tune_rows(s), out);
  else if (s->op == DSK_OP_MOE_DENSE_GEMM)
    dense_heuristic(ctx, s->T, s->N, s->K, out);
  else
    memset(out, 0, sizeof *out);
}

static dsk_status check_bn_split(const char *op, const char *field, const dsk_tactic *g, int64_t K) {
  const int32_t bn = g->v[1], sp = g->v[2];
  if (bn != 64 && bn != 128 && bn != 256)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.v[1] (BLOCK_N) %d is not 64, 128 or 256", op, field, (int)bn);
  if ((sp != 1 && sp != 2 && sp != 4) || (K / sp) % 128 != 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "%s: %s.v[2] (split-K) %d is not 1, 2 or 4 with (K / split) %% 128 == 0 (K %" PRId64 ")", op,
                     field, (int)sp, K);
  for (int i = 3; i < 6; i++)
    if (g->v[i] != 0)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.v[%d] %d is not 0", op, field, i, (int)g->v[i]);
  return DSK_STATUS_OK;
}

dsk_status dsk__moe_gemm_resolve_tactic(const dsk_ctx *ctx, const dsk_tactic *g, int wfmt, int64_t A_used, int64_t N,
                                        int64_t K, int64_t E_local, int64_t expected_m, const char *op,
                                        const char *field, dsk_tactic *out, int *source) {
  if (!tactic_is_zero(g)) {
    if (g->op != DSK_OP_MOE_GEMM || g->version != DSK_MOE_GEMM_TACTIC_VERSION)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s is for op %d version %d, not moe_gemm (%d) version %d", op,
                       field, (int)g->op, (int)g->version, DSK_OP_MOE_GEMM, DSK_MOE_GEMM_TACTIC_VERSION);
    const int32_t bm = g->v[0];
    if (bm != 64 && bm != 128)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.v[0] (BLOCK_M) %d is not 64 or 128", op, field, (int)bm);
    if (A_used % bm != 0)
      return dsk__fail(DSK_STATUS_INVALID_ARG,
                       "%s: %s.v[0] (BLOCK_M) %d does not divide A_used %" PRId64
                       " (tiles would read m_indices across segments; spec 5.4)",
                       op, field, (int)bm, A_used);
    TRY(check_bn_split(op, field, g, K));
    *out = *g;
    if (source) *source = DSK_TACTIC_FORCED;
    return DSK_STATUS_OK;
  }
  /* All zero: the heuristic (dsk__moe_gemm_tactic asks the tuner). */
  moe_heuristic(ctx, wfmt, A_used, N, K, E_local, expected_m, out);
  if (source) *source = DSK_TACTIC_HEURISTIC;
  return DSK_STATUS_OK;
}

/* The moe.gemm tactic of a run (mode DSK__TUNE_RUN), plan (PLAN) or
 * dsk_op_supported / re-derivation (FOLLOW): a given tactic is checked
 * (forced); all zero asks the tuner for the entry of the key (fmt, N, K,
 * E_local, A_used, topk exact; T bucketed) and falls back to the heuristic.
 * topk 0 (a dsk_moe_gemm call, whose descriptor carries expected_m =
 * T*topk but not topk): the lookup matches on rows = expected_m (0: the
 * heuristic's A_used). */
dsk_status dsk__moe_gemm_tactic(const dsk_ctx *ctx, const dsk_tactic *g, int wfmt, int64_t A_used, int64_t N, int64_t K,
                                int64_t E_local, int64_t topk, int64_t T, int64_t expected_m, int mode, const char *op,
                                const char *field, dsk_tactic *out, int *source) {
  dsk_tactic h;
  int src = DSK_TACTIC_HEURISTIC;
  TRY(dsk__moe_gemm_resolve_tactic(ctx, g, wfmt, A_used, N, K, E_local, expected_m, op, field, &h, &src));
  if (src == DSK_TACTIC_FORCED) {
    *out = h;
    if (source) *source = src;
    return DSK_STATUS_OK;
  }
  dsk__tune_shape s;
  memset(&s, 0, sizeof s);
  s.op = DSK_OP_MOE_GEMM;
  s.wfmt = wfmt;
  s.N = N;
  s.K = K;
  s.E = E_local;
  s.A = A_used;
  s.topk = topk > 0 ? topk : 0;
  s.T = topk > 0 ? T : (expected_m > 0 ? expected_m : A_used);
  dsk_status st = dsk__tune_resolve(ctx, &s, &h, mode, out, &src);
  if (source) *source = src;
  return st;
}

/* dsk_moe_gemm_desc grew max_expert_rows at its end: a caller built before
 * it (struct_size = offsetof(max_expert_rows)) is served with 0. Every
 * entry point validates and runs a full-size copy. */
#define GEMM_OLD_SIZE offsetof(dsk_moe_gemm_desc, max_expert_rows)
dsk_status dsk__moe_gemm_copy(const dsk_ctx *ctx, const dsk_moe_gemm_desc *d, dsk_moe_gemm_desc *c) {
  TRY(check_ctx_desc(ctx, d, OP_GEMM));
  return dsk__moe_grown_copy(OP_GEMM, d, d->struct_size, GEMM_OLD_SIZE, sizeof *c, c, "dsk_moe_gemm_desc");
}

/* d: a full-size copy (dsk__moe_gemm_copy) */
dsk_status dsk__moe_gemm_validate(const dsk_ctx *ctx, const dsk_moe_gemm_desc *d, int run, int mode, dsk_tactic *t,
                                  int *src) {
  const char *op = OP_GEMM; /* ctx, desc and struct_size: checked by dsk__moe_gemm_copy */
  TRY(check_count(op, "M_sum", d->M_sum));
  if (d->max_expert_rows < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: max_expert_rows %" PRId64 " < 0 (0 = unknown)", op,
                     d->max_expert_rows);
  if (d->M_sum == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "N", d->N, 128, DSK_MOE_MAX_K, 128, NULL));
  TRY(check_size(op, "K", d->K, 128, DSK_MOE_MAX_K, 128, NULL));
  TRY(check_size(op, "E_local", d->E_local, 1, DSK_MOE_MAX_EXPERTS, 1, NULL));
  TRY(check_size(op, "A_used", d->A_used, 64, 1 << 20, 64, "(some BLOCK_M in {64, 128} must divide it)"));
  if (d->M_sum % d->A_used != 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: M_sum %" PRId64 " is not a multiple of A_used %" PRId64, op,
                     d->M_sum, d->A_used);
  if (d->expected_m < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: expected_m %" PRId64 " < 0", op, d->expected_m);
  TRY(check_wfmt(op, "b_fmt", (int)d->b_fmt));
  TRY(check_rows(op, "A", d->A, 1, d->A_stride, d->M_sum, d->K, "e4m3 [M_sum, K]"));
  TRY(check_sf(op, "sfa", &d->sfa, 1, d->M_sum, d->K / 128, "activations: one UE8M0 per 1x128, sf_k = K/128"));
  TRY(check_ptr(op, "m_indices", d->m_indices, 4, "int32 [M_sum]"));
  TRY(check_ptr(op, "B", d->B, 1, "expert weights"));
  if (d->b_fmt == DSK_MOE_W_MXFP4)
    TRY(check_sf(op, "sfb", &d->sfb, d->E_local, d->N, d->K / 32, "MXFP4 weights: one UE8M0 per 32, sf_k = K/32"));
  else
    TRY(check_sf(op, "sfb", &d->sfb, d->E_local, d->N, d->K / 128,
                 "FP8 weights: 128x128 blocks broadcast to rows, sf_k = K/128"));
  TRY(check_rows(op, "D", d->D, 2, d->D_stride, d->M_sum, d->N, "bf16 [M_sum, N]"));
  /* last, so a descriptor that fails validation never counts a lookup */
  TRY(dsk__moe_gemm_tactic(ctx, &d->tactic, (int)d->b_fmt, d->A_used, d->N, d->K, d->E_local, 0, 0, d->expected_m, mode,
                           op, "tactic", t, src));
  if (run) TRY(check_workspace(op, d->workspace, d->workspace_bytes, dsk__moe_gemm_ws_bytes(ctx, 1, (int)d->b_fmt, d->M_sum, d->N, d->K, t)));
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_gemm_plan(dsk_ctx *ctx, const dsk_moe_gemm_desc *desc, dsk_plan_info *info) {
  TRY(check_plan_info(OP_GEMM, info));
  dsk_moe_gemm_desc c;
  const dsk_moe_gemm_desc *d = &c;
  TRY(dsk__moe_gemm_copy(ctx, desc, &c));
  dsk_tactic t;
  int src = DSK_TACTIC_HEURISTIC;
  memset(&t, 0, sizeof t);
  TRY(dsk__moe_gemm_validate(ctx, d, 0, DSK__TUNE_PLAN, &t, &src));
  fill_plan(ctx, info, d->M_sum > 0 ? dsk__moe_gemm_ws_bytes(ctx, 1, (int)d->b_fmt, d->M_sum, d->N, d->K, &t) : 0, &t, src);
  if (!ctx->backend->moe_gemm) return not_served(ctx, OP_GEMM);
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *desc) {
  dsk_moe_gemm_desc c;
  const dsk_moe_gemm_desc *d = &c;
  TRY(dsk__moe_gemm_copy(ctx, desc, &c));
  dsk_tactic t;
  TRY(dsk__moe_gemm_validate(ctx, d, 1, DSK__TUNE_RUN, &t, NULL));
  if (d->M_sum == 0) return DSK_STATUS_OK;
  if (!ctx->backend->moe_gemm) return not_served(ctx, OP_GEMM);
  return ctx->backend->moe_gemm(ctx, d, &t);
}

dsk_status dsk__moe_dense_resolve(const dsk_ctx *ctx, const dsk_dense_gemm_desc *d, int mode, dsk_tactic *t, int *src) {
  const char *op = OP_DENSE;
  const dsk_tactic *g = &d->tactic;
  if (!tactic_is_zero(g)) {
    if (g->op != DSK_OP_MOE_DENSE_GEMM || g->version != DSK_DENSE_GEMM_TACTIC_VERSION)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: tactic is for op %d version %d, not dense_fp8_gemm (%d) version %d",
                       op, (int)g->op, (int)g->version, DSK_OP_MOE_DENSE_GEMM, DSK_DENSE_GEMM_TACTIC_VERSION);
    const int32_t bm = g->v[0];
    if (bm != 16 && bm != 32 && bm != 64 && bm != 128)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: tactic.v[0] (BLOCK_M) %d is not 16, 32, 64 or 128", op, (int)bm);
    TRY(check_bn_split(op, "tactic", g, d->K));
    *t = *g;
    if (src) *src = DSK_TACTIC_FORCED;
    return DSK_STATUS_OK;
  }
  /* All zero: the tuned entry of (N, K; T = M bucketed), else the heuristic. */
  dsk_tactic h;
  dense_heuristic(ctx, d->M, d->N, d->K, &h);
  dsk__tune_shape s;
  memset(&s, 0, sizeof s);
  s.op = DSK_OP_MOE_DENSE_GEMM;
  s.N = d->N;
  s.K = d->K;
  s.T = d->M;
  int source = DSK_TACTIC_HEURISTIC;
  dsk_status st = dsk__tune_resolve(ctx, &s, &h, mode, t, &source);
  if (src) *src = source;
  return st;
}

dsk_status dsk__moe_dense_validate(const dsk_ctx *ctx, const dsk_dense_gemm_desc *d, int run, int mode, dsk_tactic *t,
                                   int *src) {
  const char *op = OP_DENSE;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_dense_gemm_desc"));
  TRY(check_count(op, "M", d->M));
  if (d->M == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "N", d->N, 128, DSK_MOE_MAX_K, 128, NULL));
  TRY(check_size(op, "K", d->K, 128, DSK_MOE_MAX_K, 128, NULL));
  TRY(check_rows(op, "A", d->A, 1, d->A_stride, d->M, d->K, "e4m3 [M, K]"));
  TRY(check_sf(op, "sfa", &d->sfa, 1, d->M, d->K / 128, "activations: one UE8M0 per 1x128, sf_k = K/128"));
  TRY(check_ptr(op, "B", d->B, 1, "e4m3 [N, K]"));
  TRY(check_sf(op, "sfb", &d->sfb, 1, d->N, d->K / 128, "FP8 weights: 128x128 blocks broadcast to rows, sf_k = K/128"));
  TRY(check_rows(op, "D", d->D, 2, d->D_stride, d->M, d->N, "bf16 [M, N]"));
  TRY(dsk__moe_dense_resolve(ctx, d, mode, t, src)); /* last: a failing descriptor counts no lookup */
  if (run) TRY(check_workspace(op, d->workspace, d->workspace_bytes, dsk__moe_gemm_ws_bytes(ctx, 0, DSK_MOE_W_FP8, d->M, d->N, d->K, t)));
  return DSK_STATUS_OK;
}

dsk_status dsk_dense_fp8_gemm_plan(dsk_ctx *ctx, const dsk_dense_gemm_desc *d, dsk_plan_info *info) {
  TRY(check_plan_info(OP_DENSE, info));
  dsk_tactic t;
  int src = DSK_TACTIC_HEURISTIC;
  memset(&t, 0, sizeof t);
  TRY(dsk__moe_dense_validate(ctx, d, 0, DSK__TUNE_PLAN, &t, &src));
  fill_plan(ctx, info, d->M > 0 ? dsk__moe_gemm_ws_bytes(ctx, 0, DSK_MOE_W_FP8, d->M, d->N, d->K, &t) : 0, &t, src);
  if (!ctx->backend->dense_fp8_gemm) return not_served(ctx, OP_DENSE);
  return DSK_STATUS_OK;
}

dsk_status dsk_dense_fp8_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *d) {
  dsk_tactic t;
  TRY(dsk__moe_dense_validate(ctx, d, 1, DSK__TUNE_RUN, &t, NULL));
  if (d->M == 0) return DSK_STATUS_OK;
  if (!ctx->backend->dense_fp8_gemm) return not_served(ctx, OP_DENSE);
  return ctx->backend->dense_fp8_gemm(ctx, d, &t);
}
