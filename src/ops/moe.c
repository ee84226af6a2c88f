/* moe.c - descriptor validation and dispatch of the MoE ops (include/dsk.h,
 * MoE section; spec/mxfp4-moe.md; docs/moe.md) other than the GEMMs
 * (moe_gemm.c) and dsk_moe_run (moe_forward.c): the pure alignment helpers,
 * the quantizers, the scale packing, routing, permute, SwiGLU + quant and
 * gather, and the per-op-id validate / served tables of dsk_op_supported.
 * The shared field checks are in moe_internal.h.
 *
 * Every run call validates its whole descriptor first (struct_size, enums,
 * counts, shapes, pointers, strides, the tactic), naming the field in
 * dsk_last_error(); a zero work count (T, rows, M_sum) returns OK before
 * shapes and pointers are looked at. Then it calls the backend's slot
 * (struct dsk_backend); a NULL slot is DSK_STATUS_UNSUPPORTED naming the op
 * and the backend. The permute workspace is sized by the cpu-ref rule
 * (dsk__ref_moe_permute_workspace).
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "moe_internal.h"
#include "backend/cpu/ref_moe.h"
#include "format/mxfp4.h"
#include "../tune/tuner.h"

/* ======================================================= pure helpers */
int64_t dsk_moe_theoretical_alignment(dsk_moe_align_family family, int64_t expected_m, int64_t num_groups) {
  int64_t mx, mn, step;
  switch (family) {
    case DSK_MOE_ALIGN_DSK:
    case DSK_MOE_ALIGN_DEEPGEMM_SM120: mx = 128; mn = 64; step = 64; break;
    case DSK_MOE_ALIGN_DEEPGEMM_SM100: mx = 240; mn = 32; step = 16; break;
    case DSK_MOE_ALIGN_DEEPGEMM_SM90: mx = 128; mn = 128; step = 1; break;
    default: return -1;
  }
  if (expected_m < 0 || num_groups < 0) return -1;
  const int64_t per = num_groups ? (expected_m + num_groups - 1) / num_groups : expected_m;
  int64_t bm = mx;
  while (bm > mn && bm - step >= per) bm -= step;
  return bm;
}

dsk_status dsk_moe_aligned_m(const dsk_moe_align_desc *d, int64_t *M_sum, int64_t *A_used) {
  const char *op = "moe_aligned_m";
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_moe_align_desc"));
  if (!M_sum || !A_used) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: M_sum or A_used is NULL", op);
  TRY(check_count(op, "M", d->M));
  TRY(check_size(op, "topk", d->topk, 1, DSK_MOE_MAX_TOPK, 1, NULL));
  TRY(check_size(op, "E_local", d->E_local, 1, DSK_MOE_MAX_EXPERTS, 1, NULL));
  if (d->cap < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: cap %" PRId64 " < 0 (0 = 128)", op, d->cap);
  const int64_t mt = d->M * d->topk;
  const int64_t th = dsk_moe_theoretical_alignment(d->family, mt, d->E_local);
  if (th < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: family %d is not a dsk_moe_align_family (0..3)", op, (int)d->family);
  const int64_t cap = d->cap ? d->cap : 128;
  const int64_t A = cap < th ? cap : th;
  int64_t ms = 0;
  if (d->counts) {
    for (int64_t e = 0; e < d->E_local; e++) {
      if (d->counts[e] < 0 || d->counts[e] > mt)
        return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: counts[%" PRId64 "] %" PRId64 " is not in [0, M*topk = %" PRId64
                         "]", op, e, d->counts[e], mt);
      ms += (d->counts[e] + A - 1) / A * A;
    }
  } else if (mt > 0) {
    const int64_t active = mt < d->E_local ? mt : d->E_local;
    ms = (mt + active * (A - 1) + A - 1) / A * A;
  }
  *M_sum = ms;
  *A_used = A;
  return DSK_STATUS_OK;
}

/* ========================================================== quantizers */
static dsk_status mxq_validate(const dsk_ctx *ctx, const dsk_mx_quantize_desc *d) {
  const char *op = OP_MXQ;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_mx_quantize_desc"));
  TRY(check_count(op, "rows", d->rows));
  if (d->rows == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "K", d->K, 32, DSK_MOE_MAX_K, 32, "(32 elements per MX block)"));
  TRY(check_dtype(op, (int)d->x_dtype));
  if (d->flags & ~(uint32_t)(DSK_MX_TIES_TO_ZERO | DSK_MX_SCALE_FLOOR))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: flags 0x%x has bits outside DSK_MX_TIES_TO_ZERO | DSK_MX_SCALE_FLOOR",
                     op, (unsigned)d->flags);
  const uintptr_t xa = d->x_dtype == DSK_MOE_IN_F32 ? 4 : 2;
  TRY(check_rows(op, "x", d->x, xa, d->x_stride, d->rows, d->K, "input rows"));
  TRY(check_rows(op, "q", d->q, 1, d->q_stride, d->rows, d->K / 2, "packed e2m1 bytes"));
  TRY(check_rows(op, "sf", d->sf, 1, d->sf_stride, d->rows, d->K / 32, "UE8M0 bytes"));
  return DSK_STATUS_OK;
}

dsk_status dsk_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *d) {
  TRY(mxq_validate(ctx, d));
  if (d->rows == 0) return DSK_STATUS_OK;
  if (!ctx->backend->mx_quantize) return not_served(ctx, OP_MXQ);
  return ctx->backend->mx_quantize(ctx, d);
}

static dsk_status fp8q_validate(const dsk_ctx *ctx, const dsk_fp8_quantize_desc *d) {
  const char *op = OP_FP8Q;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_fp8_quantize_desc"));
  TRY(check_count(op, "rows", d->rows));
  if (d->rows == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "K", d->K, 128, DSK_MOE_MAX_K, 128, "(1x128 groups)"));
  TRY(check_dtype(op, (int)d->x_dtype));
  const uintptr_t xa = d->x_dtype == DSK_MOE_IN_F32 ? 4 : 2;
  TRY(check_rows(op, "x", d->x, xa, d->x_stride, d->rows, d->K, "input rows"));
  TRY(check_rows(op, "q", d->q, 1, d->q_stride, d->rows, d->K, "e4m3 bytes"));
  if (!d->sf && !d->sf_packed)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: sf and sf_packed are both NULL (one scale output required)", op);
  if (d->sf) TRY(check_rows(op, "sf", d->sf, 1, d->sf_stride, d->rows, d->K / 128, "UE8M0 bytes"));
  if (d->sf_packed) TRY(check_ptr(op, "sf_packed", d->sf_packed, 4, "int32 words"));
  return DSK_STATUS_OK;
}

dsk_status dsk_fp8_quantize_1x128(dsk_ctx *ctx, const dsk_fp8_quantize_desc *d) {
  TRY(fp8q_validate(ctx, d));
  if (d->rows == 0) return DSK_STATUS_OK;
  if (!ctx->backend->fp8_quantize_1x128) return not_served(ctx, OP_FP8Q);
  return ctx->backend->fp8_quantize_1x128(ctx, d);
}

/* ============================================================ packing */
static dsk_status packw_validate(const dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d) {
  const char *op = OP_PACKW;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_pack_ue8m0_desc"));
  TRY(check_count(op, "rows", d->rows));
  if (d->rows == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "sf_k", d->sf_k, 1, DSK_MOE_MAX_K, 1, NULL));
  TRY(check_rows(op, "sf", d->sf, 1, d->sf_stride, d->rows, d->sf_k, "UE8M0 bytes"));
  TRY(check_rows(op, "out", d->out, 4, d->out_stride, d->rows, dsk_fmt_sf_kp(d->sf_k), "int32 words"));
  return DSK_STATUS_OK;
}

dsk_status dsk_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d) {
  TRY(packw_validate(ctx, d));
  if (d->rows == 0) return DSK_STATUS_OK;
  if (!ctx->backend->pack_ue8m0_words) return not_served(ctx, OP_PACKW);
  return ctx->backend->pack_ue8m0_words(ctx, d);
}

static dsk_status sfpack_validate(const dsk_ctx *ctx, const dsk_sf_pack_desc *d) {
  const char *op = OP_SFPACK;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_sf_pack_desc"));
  TRY(check_count(op, "MN", d->MN));
  if (d->MN == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "G", d->G, 1, MOE_COUNT_MAX, 1, NULL));
  TRY(check_size(op, "sf_k", d->sf_k, 1, DSK_MOE_MAX_K, 1, NULL));
  if (d->gran_mn != 1 && d->gran_mn != 128)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: gran_mn %d is not 1 (per-row scales) or 128 (128x128 blocks)", op,
                     (int)d->gran_mn);
  const int64_t in_rows = d->gran_mn == 128 ? (d->MN + 127) / 128 : d->MN;
  TRY(check_rows(op, "sf", d->sf, 1, d->sf_stride, in_rows, d->sf_k, "UE8M0 bytes"));
  if (d->G > 1 && d->sf_group_stride < in_rows * d->sf_stride)
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "%s: sf_group_stride %" PRId64 " < %" PRId64 " input rows * sf_stride %" PRId64, op,
                     d->sf_group_stride, in_rows, d->sf_stride);
  if (dsk_sf_packed_words(d->G, d->MN, d->sf_k) < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: G %" PRId64 " x MN %" PRId64 " x sf_k %" PRId64 " overflows", op,
                     d->G, d->MN, d->sf_k);
  TRY(check_ptr(op, "out", d->out, 4, "int32 words"));
  return DSK_STATUS_OK;
}

dsk_status dsk_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *d) {
  TRY(sfpack_validate(ctx, d));
  if (d->MN == 0) return DSK_STATUS_OK;
  if (!ctx->backend->sf_pack_mn_major) return not_served(ctx, OP_SFPACK);
  return ctx->backend->sf_pack_mn_major(ctx, d);
}

/* ================================================= grown descriptors */
/* A descriptor that grew a trailing field: a caller built before it
 * (struct_size >= old_size) is served from a full-size copy whose missing
 * fields are zero. */
dsk_status dsk__moe_grown_copy(const char *op, const void *d, size_t got, size_t old_size, size_t full, void *c,
                               const char *type) {
  if (got < old_size)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: struct_size %zu < sizeof(%s) %zu (set it with sizeof)", op, got,
                     type, full);
  memset(c, 0, full);
  memcpy(c, d, got < full ? got : full);
  *(size_t *)c = full; /* struct_size is every descriptor's first field */
  return DSK_STATUS_OK;
}

/* ============================================================ routing */
/* dsk_moe_route_desc grew workspace / workspace_bytes at its end: a caller
 * built before them (struct_size = offsetof(workspace)) still works, without
 * a workspace. Every entry point copies the caller's struct_size bytes into
 * a full-size descriptor (the missing fields zero) and works on the copy. */
#define ROUTE_OLD_SIZE offsetof(dsk_moe_route_desc, workspace)
static dsk_status route_copy(const dsk_ctx *ctx, const dsk_moe_route_desc *d, dsk_moe_route_desc *c) {
  TRY(check_ctx_desc(ctx, d, OP_ROUTE));
  return dsk__moe_grown_copy(OP_ROUTE, d, d->struct_size, ROUTE_OLD_SIZE, sizeof *c, c, "dsk_moe_route_desc");
}

/* The router workspace (fp64 logits [T, E]) when logits are computed from
 * x; the same rule on every backend (the CPU backends ignore it). */
int64_t dsk__moe_route_ws_bytes(int64_t T, int64_t E) { return T * E * (int64_t)sizeof(double); }
static int64_t route_ws_need(const dsk_moe_route_desc *d) {
  return d->logits || d->T <= 0 ? 0 : dsk__moe_route_ws_bytes(d->T, d->E);
}

/* d: a full-size copy (route_copy). run: the workspace fields are checked
 * too (a plan call ignores them). */
static dsk_status route_validate(const dsk_ctx *ctx, const dsk_moe_route_desc *d, int run) {
  const char *op = OP_ROUTE; /* ctx, desc and struct_size: checked by route_copy */
  (void)ctx;
  TRY(check_count(op, "T", d->T));
  if (d->T == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "E", d->E, 1, DSK_MOE_MAX_EXPERTS, 1, NULL));
  TRY(check_size(op, "topk", d->topk, 1, d->E < DSK_MOE_MAX_TOPK ? d->E : DSK_MOE_MAX_TOPK, 1, "(<= E and 16)"));
  if (d->score != DSK_MOE_SCORE_SQRT_SOFTPLUS && d->score != DSK_MOE_SCORE_SIGMOID)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: score %d is not SQRT_SOFTPLUS (1) or SIGMOID (2)", op, (int)d->score);
  if (d->router != DSK_MOE_ROUTER_SCORED && d->router != DSK_MOE_ROUTER_HASH)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: router %d is not SCORED (1) or HASH (2)", op, (int)d->router);
  if (d->logits) {
    TRY(check_rows(op, "logits", d->logits, 4, d->logits_stride, d->T, d->E, "fp32 logits"));
  } else {
    TRY(check_size(op, "H", d->H, 1, DSK_MOE_MAX_K, 1, "(x given: logits = x . gate_w^T)"));
    TRY(check_rows(op, "x", d->x, 2, d->x_stride, d->T, d->H, "bf16 x (or give logits)"));
    TRY(check_ptr(op, "gate_w", d->gate_w, 2, "bf16 [E, H]"));
  }
  if (d->bias) TRY(check_ptr(op, "bias", d->bias, 4, "fp32 [E]"));
  if (d->router == DSK_MOE_ROUTER_HASH) {
    TRY(check_ptr(op, "tid2eid", d->tid2eid, 8, "int64 [vocab, topk] for a hash router"));
    TRY(check_size(op, "vocab", d->vocab, 1, INT64_MAX / DSK_MOE_MAX_TOPK, 1, "(rows of tid2eid)"));
    TRY(check_ptr(op, "token_ids", d->token_ids, 4, "int32 [T] for a hash router"));
  }
  if (d->renormalize != 0 && d->renormalize != 1)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: renormalize %d is not 0 or 1", op, d->renormalize);
  if (!isfinite(d->routed_scaling_factor) || d->routed_scaling_factor <= 0.0f)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: routed_scaling_factor %g is not finite and > 0", op,
                     (double)d->routed_scaling_factor);
  TRY(check_rows(op, "ids", d->ids, 4, d->ids_stride, d->T, d->topk, "int32 [T, topk]"));
  TRY(check_rows(op, "weights", d->weights, 4, d->weights_stride, d->T, d->topk, "fp32 [T, topk]"));
  if (!run) return DSK_STATUS_OK;
  /* the optional workspace: NULL or 0 bytes = none */
  if (d->workspace_bytes < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace_bytes %" PRId64 " < 0", op, d->workspace_bytes);
  const int64_t need = route_ws_need(d);
  if (d->workspace && d->workspace_bytes > 0 && need > 0) {
    if (d->workspace_bytes < need)
      return dsk__fail(DSK_STATUS_INVALID_ARG,
                       "%s: workspace_bytes %" PRId64 " < %" PRId64 " needed (T * E * 8, see dsk_moe_route_plan; "
                       "or pass no workspace)", op, d->workspace_bytes, need);
    if (misaligned(d->workspace, 16))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace %p is not 16-byte aligned", op, d->workspace);
    const struct {
      const char *name;
      const void *p;
      int64_t bytes;
    } r[5] = {{"x", d->x, rows_bytes(d->T, d->x_stride, d->H, 2)},
              {"gate_w", d->gate_w, d->E * d->H * 2},
              {"bias", d->bias, d->E * 4},
              {"ids", d->ids, rows_bytes(d->T, d->ids_stride, d->topk, 4)},
              {"weights", d->weights, rows_bytes(d->T, d->weights_stride, d->topk, 4)}};
    for (int i = 0; i < 5; i++)
      if (ranges_overlap(d->workspace, need, r[i].p, r[i].bytes))
        return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace %p (%" PRId64 " bytes used) overlaps %s %p", op,
                         d->workspace, need, r[i].name, r[i].p);
  }
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_route_plan(dsk_ctx *ctx, const dsk_moe_route_desc *d, dsk_plan_info *info) {
  TRY(check_plan_info(OP_ROUTE, info));
  dsk_moe_route_desc c;
  TRY(route_copy(ctx, d, &c));
  TRY(route_validate(ctx, &c, 0));
  fill_plan(ctx, info, c.T > 0 ? route_ws_need(&c) : 0, NULL, DSK_TACTIC_HEURISTIC);
  if (!ctx->backend->moe_route) return not_served(ctx, OP_ROUTE);
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_route(dsk_ctx *ctx, const dsk_moe_route_desc *d) {
  dsk_moe_route_desc c;
  TRY(route_copy(ctx, d, &c));
  TRY(route_validate(ctx, &c, 1));
  if (c.T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->moe_route) return not_served(ctx, OP_ROUTE);
  return ctx->backend->moe_route(ctx, &c);
}

/* ============================================================ permute */
#define PERM_OLD_SIZE offsetof(dsk_moe_permute_desc, flags)
static dsk_status perm_copy(const dsk_ctx *ctx, const dsk_moe_permute_desc *d, dsk_moe_permute_desc *c) {
  TRY(check_ctx_desc(ctx, d, OP_PERM));
  return dsk__moe_grown_copy(OP_PERM, d, d->struct_size, PERM_OLD_SIZE, sizeof *c, c, "dsk_moe_permute_desc");
}

static dsk_status perm_validate(const dsk_ctx *ctx, const dsk_moe_permute_desc *d, int run) {
  const char *op = OP_PERM;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_moe_permute_desc"));
  if (d->flags & ~DSK_MOE_PERMUTE_NO_PAD_FILL)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: flags 0x%x has unknown bits (known: DSK_MOE_PERMUTE_NO_PAD_FILL)", op,
                     (unsigned)d->flags);
  TRY(check_count(op, "T", d->T));
  if (d->T == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "topk", d->topk, 1, DSK_MOE_MAX_TOPK, 1, NULL));
  TRY(check_size(op, "E", d->E, 1, DSK_MOE_MAX_EXPERTS, 1, NULL));
  TRY(check_size(op, "E_local", d->E_local, 1, d->E, 1, "(<= E)"));
  if (d->expert_offset < 0 || d->expert_offset + d->E_local > d->E)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: expert_offset %" PRId64 " + E_local %" PRId64 " is outside [0, E = %"
                     PRId64 "]", op, d->expert_offset, d->E_local, d->E);
  TRY(check_size(op, "K", d->K, 128, DSK_MOE_MAX_K, 128, "(1x128 scale groups)"));
  TRY(check_size(op, "A_used", d->A_used, 1, 1 << 20, 1, NULL));
  if (d->M_sum < 0 || d->M_sum > MOE_COUNT_MAX || d->M_sum % d->A_used != 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: M_sum %" PRId64 " is not a multiple of A_used %" PRId64
                     " in [0, 2^31 - 1]", op, d->M_sum, d->A_used);
  TRY(check_rows(op, "ids", d->ids, 4, d->ids_stride, d->T, d->topk, "int32 [T, topk]"));
  TRY(check_rows(op, "xq", d->xq, 1, d->xq_stride, d->T, d->K, "e4m3 [T, K]"));
  TRY(check_rows(op, "xsf", d->xsf, 1, d->xsf_stride, d->T, d->K / 128, "UE8M0 [T, K/128]"));
  if (d->M_sum > 0) {
    TRY(check_rows(op, "A", d->A, 1, d->A_stride, d->M_sum, d->K, "e4m3 [M_sum, K]"));
    TRY(check_rows(op, "Asf", d->Asf, 1, d->Asf_stride, d->M_sum, d->K / 128, "UE8M0 [M_sum, K/128]"));
    TRY(check_ptr(op, "m_indices", d->m_indices, 4, "int32 [M_sum]"));
  }
  TRY(check_rows(op, "inv_perm", d->inv_perm, 4, d->inv_perm_stride, d->T, d->topk, "int32 [T, topk]"));
  if (run) TRY(check_workspace(op, d->workspace, d->workspace_bytes, dsk__ref_moe_permute_workspace(ctx, d)));
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_permute_plan(dsk_ctx *ctx, const dsk_moe_permute_desc *desc, dsk_plan_info *info) {
  TRY(check_plan_info(OP_PERM, info));
  dsk_moe_permute_desc c, *d = &c;
  TRY(perm_copy(ctx, desc, &c));
  TRY(perm_validate(ctx, d, 0));
  fill_plan(ctx, info, d->T ? dsk__ref_moe_permute_workspace(ctx, d) : 0, NULL, DSK_TACTIC_HEURISTIC);
  if (!ctx->backend->moe_permute) return not_served(ctx, OP_PERM);
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *desc) {
  dsk_moe_permute_desc c, *d = &c;
  TRY(perm_copy(ctx, desc, &c));
  TRY(perm_validate(ctx, d, 1));
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->moe_permute) return not_served(ctx, OP_PERM);
  return ctx->backend->moe_permute(ctx, d);
}

/* ====================================================== SwiGLU + quant */
#define SWIGLU_OLD_SIZE offsetof(dsk_swiglu_quant_desc, flags)
static dsk_status swiglu_copy(const dsk_ctx *ctx, const dsk_swiglu_quant_desc *d, dsk_swiglu_quant_desc *c) {
  TRY(check_ctx_desc(ctx, d, OP_SWIGLU));
  return dsk__moe_grown_copy(OP_SWIGLU, d, d->struct_size, SWIGLU_OLD_SIZE, sizeof *c, c, "dsk_swiglu_quant_desc");
}

static dsk_status swiglu_validate(const dsk_ctx *ctx, const dsk_swiglu_quant_desc *d) {
  const char *op = OP_SWIGLU;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_swiglu_quant_desc"));
  if (d->flags & ~DSK_SWIGLU_SKIP_PADDING)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: flags 0x%x has unknown bits (known: DSK_SWIGLU_SKIP_PADDING)", op,
                     (unsigned)d->flags);
  if ((d->flags & DSK_SWIGLU_SKIP_PADDING) && !d->m_indices)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: DSK_SWIGLU_SKIP_PADDING needs m_indices (it marks the padding rows)",
                     op);
  TRY(check_count(op, "rows", d->rows));
  if (d->rows == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "I", d->I, 128, DSK_MOE_MAX_K, 128, "(1x128 groups)"));
  TRY(check_rows(op, "D1", d->D1, 2, d->D1_stride, d->rows, 2 * d->I, "bf16 [rows, 2I] (gate, up)"));
  if (d->m_indices) TRY(check_ptr(op, "m_indices", d->m_indices, 4, "int32 [rows]"));
  TRY(check_limit(op, "limit", d->limit));
  TRY(check_rows(op, "q", d->q, 1, d->q_stride, d->rows, d->I, "e4m3 [rows, I]"));
  if (!d->sf && !d->sf_packed)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: sf and sf_packed are both NULL (one scale output required)", op);
  if (d->sf) TRY(check_rows(op, "sf", d->sf, 1, d->sf_stride, d->rows, d->I / 128, "UE8M0 bytes"));
  if (d->sf_packed) TRY(check_ptr(op, "sf_packed", d->sf_packed, 4, "int32 words"));
  return DSK_STATUS_OK;
}

dsk_status dsk_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *desc) {
  dsk_swiglu_quant_desc c, *d = &c;
  TRY(swiglu_copy(ctx, desc, &c));
  TRY(swiglu_validate(ctx, d));
  if (d->rows == 0) return DSK_STATUS_OK;
  if (!ctx->backend->swiglu_quant) return not_served(ctx, OP_SWIGLU);
  return ctx->backend->swiglu_quant(ctx, d);
}

/* ============================================================= gather */
static dsk_status gather_validate(const dsk_ctx *ctx, const dsk_moe_gather_desc *d) {
  const char *op = OP_GATHER;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_moe_gather_desc"));
  TRY(check_count(op, "T", d->T));
  if (d->T == 0) return DSK_STATUS_OK;
  TRY(check_size(op, "topk", d->topk, 1, DSK_MOE_MAX_TOPK, 1, NULL));
  TRY(check_size(op, "N", d->N, 1, DSK_MOE_MAX_K, 1, NULL));
  TRY(check_count(op, "M_sum", d->M_sum));
  if (d->M_sum > 0) TRY(check_rows(op, "D2", d->D2, 2, d->D2_stride, d->M_sum, d->N, "bf16 [M_sum, N]"));
  TRY(check_rows(op, "inv_perm", d->inv_perm, 4, d->inv_perm_stride, d->T, d->topk, "int32 [T, topk]"));
  TRY(check_rows(op, "weights", d->weights, 4, d->weights_stride, d->T, d->topk, "fp32 [T, topk]"));
  if (d->shared) TRY(check_rows(op, "shared", d->shared, 2, d->shared_stride, d->T, d->N, "bf16 [T, N]"));
  TRY(check_rows(op, "y", d->y, 2, d->y_stride, d->T, d->N, "bf16 [T, N]"));
  const int64_t yb = rows_bytes(d->T, d->y_stride, d->N, 2);
  if (d->M_sum > 0 && ranges_overlap(d->y, yb, d->D2, rows_bytes(d->M_sum, d->D2_stride, d->N, 2)))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: y %p overlaps D2 %p", op, (void *)d->y, (const void *)d->D2);
  if (d->shared && d->shared != d->y && ranges_overlap(d->y, yb, d->shared, rows_bytes(d->T, d->shared_stride, d->N, 2)))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: y %p partly overlaps shared %p (in place needs y == shared)", op,
                     (void *)d->y, (const void *)d->shared);
  if (d->shared == d->y && d->shared_stride != d->y_stride)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: y == shared needs y_stride == shared_stride (%" PRId64 " != %" PRId64
                     ")", op, d->y_stride, d->shared_stride);
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_gather(dsk_ctx *ctx, const dsk_moe_gather_desc *d) {
  TRY(gather_validate(ctx, d));
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->moe_gather) return not_served(ctx, OP_GATHER);
  return ctx->backend->moe_gather(ctx, d);
}

/* ==================================================== op_supported */
dsk_status dsk__moe_validate(const dsk_ctx *ctx, int op, const void *desc) {
  dsk_tactic t;
  dsk__moe_ws ws;
  dsk_tactic t2, ts[2];
  switch (op) {
    case DSK_OP_MOE_MX_QUANTIZE: return mxq_validate(ctx, (const dsk_mx_quantize_desc *)desc);
    case DSK_OP_MOE_FP8_QUANTIZE: return fp8q_validate(ctx, (const dsk_fp8_quantize_desc *)desc);
    case DSK_OP_MOE_PACK_WORDS: return packw_validate(ctx, (const dsk_pack_ue8m0_desc *)desc);
    case DSK_OP_MOE_SF_PACK: return sfpack_validate(ctx, (const dsk_sf_pack_desc *)desc);
    case DSK_OP_MOE_ROUTE: {
      dsk_moe_route_desc rc;
      dsk_status st = route_copy(ctx, (const dsk_moe_route_desc *)desc, &rc);
      return st != DSK_STATUS_OK ? st : route_validate(ctx, &rc, 1);
    }
    case DSK_OP_MOE_PERMUTE: {
      dsk_moe_permute_desc pc;
      TRY(perm_copy(ctx, (const dsk_moe_permute_desc *)desc, &pc));
      return perm_validate(ctx, &pc, 1);
    }
    case DSK_OP_MOE_GEMM: {
      dsk_moe_gemm_desc gc;
      TRY(dsk__moe_gemm_copy(ctx, (const dsk_moe_gemm_desc *)desc, &gc));
      return dsk__moe_gemm_validate(ctx, &gc, 1, DSK__TUNE_FOLLOW, &t, NULL);
    }
    case DSK_OP_MOE_SWIGLU_QUANT: {
      dsk_swiglu_quant_desc sc;
      TRY(swiglu_copy(ctx, (const dsk_swiglu_quant_desc *)desc, &sc));
      return swiglu_validate(ctx, &sc);
    }
    case DSK_OP_MOE_GATHER: return gather_validate(ctx, (const dsk_moe_gather_desc *)desc);
    case DSK_OP_MOE_DENSE_GEMM:
      return dsk__moe_dense_validate(ctx, (const dsk_dense_gemm_desc *)desc, 1, DSK__TUNE_FOLLOW, &t, NULL);
    case DSK_OP_MOE_FORWARD: {
      dsk_moe_desc fc;
      TRY(dsk__moe_desc_copy(ctx, (const dsk_moe_desc *)desc, &fc));
      return dsk__moe_fwd_validate(ctx, &fc, 1, DSK__TUNE_FOLLOW, &ws, &t, &t2, ts, NULL);
    }
    default: return dsk__fail(DSK_STATUS_INVALID_ARG, "moe: unknown op %d", op);
  }
}

/* The slots op needs on backend b; desc is read (FORWARD only) after
 * dsk__moe_validate accepted it. */
int dsk__moe_served(const dsk_backend *b, int op, const void *desc) {
  switch (op) {
    case DSK_OP_MOE_MX_QUANTIZE: return b->mx_quantize != NULL;
    case DSK_OP_MOE_FP8_QUANTIZE: return b->fp8_quantize_1x128 != NULL;
    case DSK_OP_MOE_PACK_WORDS: return b->pack_ue8m0_words != NULL;
    case DSK_OP_MOE_SF_PACK: return b->sf_pack_mn_major != NULL;
    case DSK_OP_MOE_ROUTE: return b->moe_route != NULL;
    case DSK_OP_MOE_PERMUTE: return b->moe_permute != NULL;
    case DSK_OP_MOE_GEMM: return b->moe_gemm != NULL;
    case DSK_OP_MOE_SWIGLU_QUANT: return b->swiglu_quant != NULL;
    case DSK_OP_MOE_GATHER: return b->moe_gather != NULL;
    case DSK_OP_MOE_DENSE_GEMM: return b->dense_fp8_gemm != NULL;
    case DSK_OP_MOE_FORWARD: return dsk__moe_fwd_missing_slot(b, (const dsk_moe_desc *)desc) == NULL;
    default: return 0;
  }
}
