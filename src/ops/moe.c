/* moe.c - descriptor validation, tactic resolution and dispatch of the MoE
 * ops (include/dsk.h, MoE section; spec/mxfp4-moe.md; docs/moe.md), the
 * pure alignment helpers, and dsk_moe_run composed from the ops.
 *
 * Every run call validates its whole descriptor first (struct_size, enums,
 * counts, shapes, pointers, strides, the tactic), naming the field in
 * dsk_last_error(); a zero work count (T, rows, M_sum) returns OK before
 * shapes and pointers are looked at. Then it calls the backend's slot
 * (struct dsk_backend); a NULL slot is DSK_STATUS_UNSUPPORTED naming the op
 * and the backend. The GEMMs' all-zero tactics resolve to the context's
 * tuned entry (src/tune; keys, A5 re-validation) else the heuristic of
 * autotune.md §1; run calls count the lookup, plan calls and
 * dsk_op_supported do not. The permute
 * workspace is sized by the cpu-ref rule (dsk__ref_moe_permute_workspace).
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "moe.h"
#include "backend/cpu/ref_moe.h"
#include "format/mxfp4.h"
#include "../tune/tuner.h"

#define MOE_COUNT_MAX INT64_C(2147483647)

/* ====================================================== field checks */
#define TRY(x)                                  \
  do {                                          \
    dsk_status st_ = (x);                       \
    if (st_ != DSK_STATUS_OK) return st_;       \
  } while (0)

static int misaligned(const void *p, uintptr_t a) { return ((uintptr_t)p % a) != 0; }

static dsk_status check_ctx_desc(const dsk_ctx *ctx, const void *d, const char *op) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: ctx is NULL", op);
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  return DSK_STATUS_OK;
}

static dsk_status check_struct(const char *op, size_t got, size_t want, const char *type) {
  if (got < want)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: struct_size %zu < sizeof(%s) %zu", op, got, type, want);
  return DSK_STATUS_OK;
}

/* A work count in [0, 2^31 - 1]. */
static dsk_status check_count(const char *op, const char *name, int64_t v) {
  if (v < 0 || v > MOE_COUNT_MAX)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %" PRId64 " is not in [0, 2^31 - 1]", op, name, v);
  return DSK_STATUS_OK;
}

/* A structural size in [lo, hi] and a multiple of mult. */
static dsk_status check_size(const char *op, const char *name, int64_t v, int64_t lo, int64_t hi, int64_t mult,
                             const char *why) {
  if (v < lo || v > hi || v % mult != 0) {
    if (mult > 1)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %" PRId64 " is not a multiple of %" PRId64
                       " in [%" PRId64 ", %" PRId64 "]%s%s", op, name, v, mult, lo, hi, why ? " " : "", why ? why : "");
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %" PRId64 " is not in [%" PRId64 ", %" PRId64 "]%s%s", op, name,
                     v, lo, hi, why ? " " : "", why ? why : "");
  }
  return DSK_STATUS_OK;
}

static dsk_status check_ptr(const char *op, const char *name, const void *p, uintptr_t align, const char *what) {
  if (!p) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s is NULL (%s required)", op, name, what);
  if (misaligned(p, align))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %p is not %u-byte aligned (%s)", op, name, p, (unsigned)align,
                     what);
  return DSK_STATUS_OK;
}

/* rows strided rows of width elements: stride >= width, no int64 overflow. */
static dsk_status check_rows(const char *op, const char *name, const void *p, uintptr_t align, int64_t stride,
                             int64_t rows, int64_t width, const char *what) {
  TRY(check_ptr(op, name, p, align, what));
  if (stride < width)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s_stride %" PRId64 " < %" PRId64 " (row width of %s)", op, name,
                     stride, width, what);
  if (rows > 1 && (rows - 1) > (INT64_MAX / 8 - width) / (stride > 0 ? stride : 1))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %" PRId64 " rows of %s_stride %" PRId64 " overflow int64", op, rows,
                     name, stride);
  return DSK_STATUS_OK;
}

/* A packed scale tensor given to an op: words present and 4-byte aligned,
 * logical shape equal to the op's. */
static dsk_status check_sf(const char *op, const char *name, const dsk_moe_sf *sf, int64_t G, int64_t MN,
                           int64_t sf_k, const char *why) {
  if (!sf->words)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.words is NULL (packed UE8M0 scales required)", op, name);
  if (misaligned(sf->words, 4))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.words %p is not 4-byte aligned (int32 words)", op, name,
                     (const void *)sf->words);
  if (sf->groups != G)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.groups %" PRId64 " != %" PRId64, op, name, sf->groups, G);
  if (sf->mn != MN)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.mn %" PRId64 " != %" PRId64 " (rows of the operand)", op, name,
                     sf->mn, MN);
  if (sf->sf_k != sf_k)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s.sf_k %" PRId64 " != %" PRId64 " (%s)", op, name, sf->sf_k, sf_k,
                     why);
  return DSK_STATUS_OK;
}

static dsk_status check_dtype(const char *op, int v) {
  if (v != DSK_MOE_IN_BF16 && v != DSK_MOE_IN_F32)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: x_dtype %d is not DSK_MOE_IN_BF16 (0) or DSK_MOE_IN_F32 (1)", op, v);
  return DSK_STATUS_OK;
}

static dsk_status check_wfmt(const char *op, const char *name, int v) {
  if (v != DSK_MOE_W_MXFP4 && v != DSK_MOE_W_FP8)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %d is not DSK_MOE_W_MXFP4 (1) or DSK_MOE_W_FP8 (2)", op, name, v);
  return DSK_STATUS_OK;
}

static dsk_status check_limit(const char *op, const char *name, float v) {
  if (!isfinite(v) || v < 0.0f)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %g is not finite and >= 0 (0 = no clamp; DSv4 10)", op, name,
                     (double)v);
  return DSK_STATUS_OK;
}

/* Byte ranges of strided rows overlap. */
static int ranges_overlap(const void *a, int64_t abytes, const void *b, int64_t bbytes) {
  if (!a || !b || abytes <= 0 || bbytes <= 0) return 0;
  uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
  return a0 < b0 + (uintptr_t)bbytes && b0 < a0 + (uintptr_t)abytes;
}
static int64_t rows_bytes(int64_t rows, int64_t stride, int64_t width, int64_t elem) {
  return ((rows - 1) * stride + width) * elem;
}

/* The answer of a run or plan call whose backend slot is NULL. */
static dsk_status not_served(const dsk_ctx *ctx, const char *op) {
  const dsk_backend *b = ctx->backend;
  return dsk__fail(DSK_STATUS_UNSUPPORTED, "moe: backend %s does not serve %s", b->name, op);
}

static dsk_status check_plan_info(const char *op, dsk_plan_info *info) {
  if (!info) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s_plan: info is NULL", op);
  if (info->struct_size < sizeof *info)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s_plan: info->struct_size %zu < sizeof(dsk_plan_info) %zu", op,
                     info->struct_size, sizeof *info);
  return DSK_STATUS_OK;
}

static void fill_plan(const dsk_ctx *ctx, dsk_plan_info *info, int64_t bytes, const dsk_tactic *t, int source) {
  size_t keep = info->struct_size;
  memset(info, 0, sizeof *info);
  info->struct_size = keep;
  info->workspace_bytes = bytes;
  if (t) info->tactic = *t;
  info->tactic_source = source;
  snprintf(info->backend, sizeof info->backend, "%s", ctx->backend ? ctx->backend->name : "?");
}

static dsk_status check_workspace(const char *op, const void *ws, int64_t bytes, int64_t need) {
  if (need <= 0) return DSK_STATUS_OK;
  if (bytes < need)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace_bytes %" PRId64 " < %" PRId64 " needed (see the plan call)",
                     op, bytes, need);
  if (!ws) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace is NULL but %" PRId64 " bytes are needed", op, need);
  if (misaligned(ws, 16))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace %p is not 16-byte aligned", op, ws);
  return DSK_STATUS_OK;
}

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
#define OP_MXQ "mx_quantize"
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

#define OP_FP8Q "fp8_quantize_1x128"
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
#define OP_PACKW "pack_ue8m0_words"
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

#define OP_SFPACK "sf_pack_mn_major"
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

/* ============================================================ routing */
#define OP_ROUTE "moe_route"
/* dsk_moe_route_desc grew workspace / workspace_bytes at its end: a caller
 * built before them (struct_size = offsetof(workspace)) still works, without
 * a workspace. Every entry point copies the caller's struct_size bytes into
 * a full-size descriptor (the missing fields zero) and works on the copy. */
#define ROUTE_OLD_SIZE offsetof(dsk_moe_route_desc, workspace)
static dsk_status route_copy(const dsk_ctx *ctx, const dsk_moe_route_desc *d, dsk_moe_route_desc *c) {
  TRY(check_ctx_desc(ctx, d, OP_ROUTE));
  if (d->struct_size < ROUTE_OLD_SIZE)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: struct_size %zu < sizeof(dsk_moe_route_desc) %zu (set it with sizeof)",
                     OP_ROUTE, d->struct_size, sizeof *d);
  memset(c, 0, sizeof *c);
  memcpy(c, d, d->struct_size < sizeof *c ? d->struct_size : sizeof *c);
  c->struct_size = sizeof *c;
  return DSK_STATUS_OK;
}

/* The router workspace (fp64 logits [T, E]) when logits are computed from
 * x; the same rule on every backend (the CPU backends ignore it). */
static int64_t route_ws_bytes(int64_t T, int64_t E) { return T * E * (int64_t)sizeof(double); }
static int64_t route_ws_need(const dsk_moe_route_desc *d) {
  return d->logits || d->T <= 0 ? 0 : route_ws_bytes(d->T, d->E);
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
#define OP_PERM "moe_permute"
static dsk_status perm_validate(const dsk_ctx *ctx, const dsk_moe_permute_desc *d, int run) {
  const char *op = OP_PERM;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_moe_permute_desc"));
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

dsk_status dsk_moe_permute_plan(dsk_ctx *ctx, const dsk_moe_permute_desc *d, dsk_plan_info *info) {
  TRY(check_plan_info(OP_PERM, info));
  TRY(perm_validate(ctx, d, 0));
  fill_plan(ctx, info, d->T ? dsk__ref_moe_permute_workspace(ctx, d) : 0, NULL, DSK_TACTIC_HEURISTIC);
  if (!ctx->backend->moe_permute) return not_served(ctx, OP_PERM);
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *d) {
  TRY(perm_validate(ctx, d, 1));
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->moe_permute) return not_served(ctx, OP_PERM);
  return ctx->backend->moe_permute(ctx, d);
}

/* ============================================================== GEMMs */
static void tactic_set(dsk_tactic *t, int op, int version, int32_t bm, int32_t bn, int32_t split) {
  memset(t, 0, sizeof *t);
  t->op = op;
  t->version = version;
  t->v[0] = bm;
  t->v[1] = bn;
  t->v[2] = split;
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
 * = expected_m (0: A_used). dense_fp8.gemm: a = 1, BLOCK_M = the smallest
 * of the set >= min(M, 128). */
static void moe_heuristic(const dsk_ctx *ctx, int64_t A_used, int64_t N, int64_t K, int64_t E_local, int64_t rows,
                          dsk_tactic *out) {
  const int64_t em = rows > 0 ? rows : A_used;
  const int64_t a = em < E_local ? em : E_local;
  int32_t bn, sp;
  heuristic_n_split(a, N, K, ctx->info.sm_count, &bn, &sp);
  tactic_set(out, DSK_OP_MOE_GEMM, DSK_MOE_GEMM_TACTIC_VERSION, A_used % 128 == 0 ? 128 : 64, bn, sp);
}

static void dense_heuristic(const dsk_ctx *ctx, int64_t M, int64_t N, int64_t K, dsk_tactic *out) {
  const int64_t m = M < 128 ? M : 128;
  int32_t bm = 16;
  while (bm < m) bm *= 2;
  int32_t bn, sp;
  heuristic_n_split(1, N, K, ctx->info.sm_count, &bn, &sp);
  tactic_set(out, DSK_OP_MOE_DENSE_GEMM, DSK_DENSE_GEMM_TACTIC_VERSION, bm, bn, sp);
}

void dsk__moe_tune_heuristic(const dsk_ctx *ctx, const dsk__tune_shape *s, dsk_tactic *out) {
  if (s->op == DSK_OP_MOE_GEMM)
    moe_heuristic(ctx, s->A, s->N, s->K, s->E, dsk__tune_rows(s), out);
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

dsk_status dsk__moe_gemm_resolve_tactic(const dsk_ctx *ctx, const dsk_tactic *g, int64_t A_used, int64_t N, int64_t K,
                                        int64_t E_local, int64_t expected_m, const char *op, const char *field,
                                        dsk_tactic *out, int *source) {
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
  /* All zero: the heuristic (moe_gemm_tactic asks the tuner). */
  moe_heuristic(ctx, A_used, N, K, E_local, expected_m, out);
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
static dsk_status moe_gemm_tactic(const dsk_ctx *ctx, const dsk_tactic *g, int wfmt, int64_t A_used, int64_t N,
                                  int64_t K, int64_t E_local, int64_t topk, int64_t T, int64_t expected_m, int mode,
                                  const char *op, const char *field, dsk_tactic *out, int *source) {
  dsk_tactic h;
  int src = DSK_TACTIC_HEURISTIC;
  TRY(dsk__moe_gemm_resolve_tactic(ctx, g, A_used, N, K, E_local, expected_m, op, field, &h, &src));
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

#define OP_GEMM "moe_gemm"
static dsk_status gemm_validate(const dsk_ctx *ctx, const dsk_moe_gemm_desc *d, int run, int mode, dsk_tactic *t,
                                int *src) {
  const char *op = OP_GEMM;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_moe_gemm_desc"));
  TRY(check_count(op, "M_sum", d->M_sum));
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
  TRY(moe_gemm_tactic(ctx, &d->tactic, (int)d->b_fmt, d->A_used, d->N, d->K, d->E_local, 0, 0, d->expected_m, mode,
                      op, "tactic", t, src));
  if (run) TRY(check_workspace(op, d->workspace, d->workspace_bytes, 0));
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_gemm_plan(dsk_ctx *ctx, const dsk_moe_gemm_desc *d, dsk_plan_info *info) {
  TRY(check_plan_info(OP_GEMM, info));
  dsk_tactic t;
  int src = DSK_TACTIC_HEURISTIC;
  memset(&t, 0, sizeof t);
  TRY(gemm_validate(ctx, d, 0, DSK__TUNE_PLAN, &t, &src));
  fill_plan(ctx, info, 0, &t, src);
  if (!ctx->backend->moe_gemm) return not_served(ctx, OP_GEMM);
  return DSK_STATUS_OK;
}

dsk_status dsk_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *d) {
  dsk_tactic t;
  TRY(gemm_validate(ctx, d, 1, DSK__TUNE_RUN, &t, NULL));
  if (d->M_sum == 0) return DSK_STATUS_OK;
  if (!ctx->backend->moe_gemm) return not_served(ctx, OP_GEMM);
  return ctx->backend->moe_gemm(ctx, d, &t);
}

#define OP_DENSE "dense_fp8_gemm"
static dsk_status dense_resolve(const dsk_ctx *ctx, const dsk_dense_gemm_desc *d, int mode, dsk_tactic *t, int *src) {
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

static dsk_status dense_validate(const dsk_ctx *ctx, const dsk_dense_gemm_desc *d, int run, int mode, dsk_tactic *t,
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
  TRY(dense_resolve(ctx, d, mode, t, src)); /* last: a failing descriptor counts no lookup */
  if (run) TRY(check_workspace(op, d->workspace, d->workspace_bytes, 0));
  return DSK_STATUS_OK;
}

dsk_status dsk_dense_fp8_gemm_plan(dsk_ctx *ctx, const dsk_dense_gemm_desc *d, dsk_plan_info *info) {
  TRY(check_plan_info(OP_DENSE, info));
  dsk_tactic t;
  int src = DSK_TACTIC_HEURISTIC;
  memset(&t, 0, sizeof t);
  TRY(dense_validate(ctx, d, 0, DSK__TUNE_PLAN, &t, &src));
  fill_plan(ctx, info, 0, &t, src);
  if (!ctx->backend->dense_fp8_gemm) return not_served(ctx, OP_DENSE);
  return DSK_STATUS_OK;
}

dsk_status dsk_dense_fp8_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *d) {
  dsk_tactic t;
  TRY(dense_validate(ctx, d, 1, DSK__TUNE_RUN, &t, NULL));
  if (d->M == 0) return DSK_STATUS_OK;
  if (!ctx->backend->dense_fp8_gemm) return not_served(ctx, OP_DENSE);
  return ctx->backend->dense_fp8_gemm(ctx, d, &t);
}

/* ====================================================== SwiGLU + quant */
#define OP_SWIGLU "swiglu_quant"
static dsk_status swiglu_validate(const dsk_ctx *ctx, const dsk_swiglu_quant_desc *d) {
  const char *op = OP_SWIGLU;
  TRY(check_ctx_desc(ctx, d, op));
  TRY(check_struct(op, d->struct_size, sizeof *d, "dsk_swiglu_quant_desc"));
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

dsk_status dsk_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *d) {
  TRY(swiglu_validate(ctx, d));
  if (d->rows == 0) return DSK_STATUS_OK;
  if (!ctx->backend->swiglu_quant) return not_served(ctx, OP_SWIGLU);
  return ctx->backend->swiglu_quant(ctx, d);
}

/* ============================================================= gather */
#define OP_GATHER "moe_gather"
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

/* ======================================================= MoE forward */
#define OP_FWD "moe_forward"

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
  const int64_t d_bytes = ms * (2 * I > H ? 2 * I : H) * 2, r_bytes = route_ws_bytes(T, d->E);
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

/* Shapes and pointers; T_eff = the T the workspace is sized for. The four
 * GEMM tactics (FC1, FC2, and with a shared expert its two dense GEMMs in
 * ts[0], ts[1]) are resolved here, before anything runs, so a
 * DSK_AUTOTUNE_REQUIRE_HIT miss fails the call before its first launch. */
static dsk_status fwd_validate(const dsk_ctx *ctx, const dsk_moe_desc *d, int run, int mode, dsk__moe_ws *ws,
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
  TRY(moe_gemm_tactic(ctx, &d->fc1_tactic, (int)d->routed.fmt, ws->A_used, 2 * d->routed.I, d->H, d->E_local,
                      d->topk, Tp, em, mode, op, "fc1_tactic", t1, src1));
  TRY(moe_gemm_tactic(ctx, &d->fc2_tactic, (int)d->routed.fmt, ws->A_used, d->H, d->routed.I, d->E_local, d->topk,
                      Tp, em, mode, op, "fc2_tactic", t2, NULL));
  memset(ts, 0, 2 * sizeof *ts);
  if (d->shared.w13) {
    dsk_dense_gemm_desc e; /* the shape fields dense_resolve reads; tactic all zero */
    memset(&e, 0, sizeof e);
    e.M = Tp;
    e.N = 2 * d->shared.I;
    e.K = d->H;
    TRY(dense_resolve(ctx, &e, mode, &ts[0], NULL));
    e.N = d->H;
    e.K = d->shared.I;
    TRY(dense_resolve(ctx, &e, mode, &ts[1], NULL));
  }
  if (run) TRY(check_workspace(op, d->workspace, d->workspace_bytes, ws->total));
  return DSK_STATUS_OK;
}

/* dsk_moe_run has no slot of its own: it needs the slots of the ops it is
 * composed of (the router only without ids_in, the dense GEMM only with a
 * shared expert). The name of the first missing one, or NULL. */
static const char *fwd_missing_slot(const dsk_backend *b, const dsk_moe_desc *d) {
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
                   fwd_missing_slot(b, d));
}

dsk_status dsk_moe_plan(dsk_ctx *ctx, const dsk_moe_desc *d, dsk_plan_info *info) {
  TRY(check_plan_info(OP_FWD, info));
  dsk__moe_ws ws;
  dsk_tactic t1, t2, ts[2];
  int src = DSK_TACTIC_HEURISTIC;
  memset(&ws, 0, sizeof ws);
  memset(&t1, 0, sizeof t1);
  TRY(fwd_validate(ctx, d, 0, DSK__TUNE_PLAN, &ws, &t1, &t2, ts, &src));
  fill_plan(ctx, info, ws.total, &t1, src);
  if (fwd_missing_slot(ctx->backend, d)) return fwd_not_served(ctx, d);
  return DSK_STATUS_OK;
}

static int64_t *cnt(const dsk_moe_desc *d, int i) { return d->counters ? d->counters + i : NULL; }

dsk_status dsk_moe_run(dsk_ctx *ctx, const dsk_moe_desc *d) {
  dsk__moe_ws ws;
  dsk_tactic t1, t2, ts[2];
  TRY(fwd_validate(ctx, d, 1, DSK__TUNE_RUN, &ws, &t1, &t2, ts, NULL));
  if (d->T == 0) return DSK_STATUS_OK;
  if (fwd_missing_slot(ctx->backend, d)) return fwd_not_served(ctx, d);

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

  /* 1. route */
  const int32_t *use_ids = d->ids_in;
  const float *use_w = d->weights_in;
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
    r.workspace_bytes = route_ws_bytes(T, d->E);
    TRY(dsk_moe_route(ctx, &r));
    use_ids = ids;
    use_w = wts;
  }
  /* 2. quantize x (raw scales for the permute, packed for the shared expert) */
  {
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
  /* 3. permute into the contiguous layout (worst-case M_sum for T) */
  {
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
    TRY(dsk_moe_permute(ctx, &p));
  }
  /* 4. pack SFA (G 1, MN M_sum, sf_k H/128) */
  {
    dsk_sf_pack_desc s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.stream = d->stream;
    s.G = 1; s.MN = Ms; s.sf_k = H / 128; s.gran_mn = 1; s.sf = Asf; s.sf_stride = H / 128; s.out = sfa;
    TRY(dsk_sf_pack_mn_major(ctx, &s));
  }
  /* 5. FC1 -> D1 [M_sum, 2I] */
  dsk_moe_gemm_desc g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.stream = d->stream;
  g.M_sum = Ms; g.N = 2 * I; g.K = H; g.E_local = d->E_local; g.A_used = ws.A_used; g.expected_m = T * K;
  g.A = A; g.A_stride = H;
  g.sfa.words = sfa; g.sfa.groups = 1; g.sfa.mn = Ms; g.sfa.sf_k = H / 128;
  g.m_indices = mind; g.b_fmt = d->routed.fmt; g.B = d->routed.w13;
  g.sfb.words = d->routed.sf13; g.sfb.groups = d->E_local; g.sfb.mn = 2 * I; g.sfb.sf_k = mx ? H / 32 : H / 128;
  g.D = Dbuf; g.D_stride = 2 * I; g.tactic = t1;
  g.counters = cnt(d, DSK_MOE_CNT_GEMM_BAD_INDEX);
  TRY(dsk_moe_gemm(ctx, &g));
  /* 6. SwiGLU + re-quantize -> A2 [M_sum, I] (reuses A), packed SFA2 */
  {
    dsk_swiglu_quant_desc s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.stream = d->stream;
    s.rows = Ms; s.I = I; s.D1 = Dbuf; s.D1_stride = 2 * I; s.m_indices = mind; s.limit = d->swiglu_limit;
    s.q = A; s.q_stride = I; s.sf_packed = sfa2;
    s.counters = cnt(d, DSK_MOE_CNT_H_NONFINITE);
    TRY(dsk_swiglu_quant(ctx, &s));
  }
  /* 7. FC2 -> D2 [M_sum, H] (reuses D1); the bad-index blocks were counted by FC1 */
  g.N = H; g.K = I; g.A = A; g.A_stride = I;
  g.sfa.words = sfa2; g.sfa.sf_k = I / 128;
  g.B = d->routed.w2; g.sfb.words = d->routed.sf2; g.sfb.mn = H; g.sfb.sf_k = mx ? I / 32 : I / 128;
  g.D = Dbuf; g.D_stride = H; g.tactic = t2; g.counters = NULL;
  TRY(dsk_moe_gemm(ctx, &g));
  /* 8. shared expert: FP8 dense on the same quantized x */
  dsk_bf16 *sout = NULL;
  if (has_shared) {
    const int64_t Is = d->shared.I;
    dsk_bf16 *S1 = (dsk_bf16 *)(base + ws.S1);
    uint8_t *S2 = base + ws.S2;
    int32_t *ssf2 = (int32_t *)(base + ws.ssf2);
    sout = (dsk_bf16 *)(base + ws.Sout);
    dsk_dense_gemm_desc e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    e.stream = d->stream;
    e.M = T; e.N = 2 * Is; e.K = H; e.A = xq; e.A_stride = H;
    e.sfa.words = (int32_t *)(base + ws.sfx); e.sfa.groups = 1; e.sfa.mn = T; e.sfa.sf_k = H / 128;
    e.B = (const uint8_t *)d->shared.w13;
    e.sfb.words = d->shared.sf13; e.sfb.groups = 1; e.sfb.mn = 2 * Is; e.sfb.sf_k = H / 128;
    e.D = S1; e.D_stride = 2 * Is; e.tactic = ts[0];
    TRY(dsk_dense_fp8_gemm(ctx, &e));
    dsk_swiglu_quant_desc s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.stream = d->stream;
    s.rows = T; s.I = Is; s.D1 = S1; s.D1_stride = 2 * Is; s.limit = d->shared_limit;
    s.q = S2; s.q_stride = Is; s.sf_packed = ssf2;
    s.counters = cnt(d, DSK_MOE_CNT_H_NONFINITE);
    TRY(dsk_swiglu_quant(ctx, &s));
    e.N = H; e.K = Is; e.A = S2; e.A_stride = Is;
    e.sfa.words = ssf2; e.sfa.sf_k = Is / 128;
    e.B = (const uint8_t *)d->shared.w2;
    e.sfb.words = d->shared.sf2; e.sfb.mn = H; e.sfb.sf_k = Is / 128;
    e.D = sout; e.D_stride = H; e.tactic = ts[1];
    TRY(dsk_dense_fp8_gemm(ctx, &e));
  }
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
    case DSK_OP_MOE_PERMUTE: return perm_validate(ctx, (const dsk_moe_permute_desc *)desc, 1);
    case DSK_OP_MOE_GEMM: return gemm_validate(ctx, (const dsk_moe_gemm_desc *)desc, 1, DSK__TUNE_FOLLOW, &t, NULL);
    case DSK_OP_MOE_SWIGLU_QUANT: return swiglu_validate(ctx, (const dsk_swiglu_quant_desc *)desc);
    case DSK_OP_MOE_GATHER: return gather_validate(ctx, (const dsk_moe_gather_desc *)desc);
    case DSK_OP_MOE_DENSE_GEMM:
      return dense_validate(ctx, (const dsk_dense_gemm_desc *)desc, 1, DSK__TUNE_FOLLOW, &t, NULL);
    case DSK_OP_MOE_FORWARD:
      return fwd_validate(ctx, (const dsk_moe_desc *)desc, 1, DSK__TUNE_FOLLOW, &ws, &t, &t2, ts, NULL);
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
    case DSK_OP_MOE_FORWARD: return fwd_missing_slot(b, (const dsk_moe_desc *)desc) == NULL;
    default: return 0;
  }
}
