/* moe_internal.h - private to the MoE op files of src/ops (moe.c,
 * moe_gemm.c, moe_forward.c): the op names used in messages, the field
 * checks every validator shares (static inline, one copy per file), and the
 * validators, tactic resolution and sizes one file calls in another. Not
 * public API; src/ops/moe.h holds what other parts of the library call.
 */
#ifndef DSK_OPS_MOE_INTERNAL_H
#define DSK_OPS_MOE_INTERNAL_H

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "moe.h"

#define MOE_COUNT_MAX INT64_C(2147483647)

/* The op names of dsk_last_error() messages and of the missing-slot
 * answers. */
#define OP_MXQ "mx_quantize"
#define OP_FP8Q "fp8_quantize_1x128"
#define OP_PACKW "pack_ue8m0_words"
#define OP_SFPACK "sf_pack_mn_major"
#define OP_ROUTE "moe_route"
#define OP_PERM "moe_permute"
#define OP_GEMM "moe_gemm"
#define OP_DENSE "dense_fp8_gemm"
#define OP_SWIGLU "swiglu_quant"
#define OP_GATHER "moe_gather"
#define OP_FWD "moe_forward"

/* ====================================================== field checks */
#define TRY(x)                                  \
  do {                                          \
    dsk_status st_ = (x);                       \
    if (st_ != DSK_STATUS_OK) return st_;       \
  } while (0)

static inline int misaligned(const void *p, uintptr_t a) { return ((uintptr_t)p % a) != 0; }

static inline dsk_status check_ctx_desc(const dsk_ctx *ctx, const void *d, const char *op) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: ctx is NULL", op);
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  return DSK_STATUS_OK;
}

static inline dsk_status check_struct(const char *op, size_t got, size_t want, const char *type) {
  if (got < want)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: struct_size %zu < sizeof(%s) %zu", op, got, type, want);
  return DSK_STATUS_OK;
}

/* A work count in [0, 2^31 - 1]. */
static inline dsk_status check_count(const char *op, const char *name, int64_t v) {
  if (v < 0 || v > MOE_COUNT_MAX)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %" PRId64 " is not in [0, 2^31 - 1]", op, name, v);
  return DSK_STATUS_OK;
}

/* A structural size in [lo, hi] and a multiple of mult. */
static inline dsk_status check_size(const char *op, const char *name, int64_t v, int64_t lo, int64_t hi, int64_t mult,
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

static inline dsk_status check_ptr(const char *op, const char *name, const void *p, uintptr_t align, const char *what) {
  if (!p) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s is NULL (%s required)", op, name, what);
  if (misaligned(p, align))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %p is not %u-byte aligned (%s)", op, name, p, (unsigned)align,
                     what);
  return DSK_STATUS_OK;
}

/* rows strided rows of width elements: stride >= width, no int64 overflow. */
static inline dsk_status check_rows(const char *op, const char *name, const void *p, uintptr_t align, int64_t stride,
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
static inline dsk_status check_sf(const char *op, const char *name, const dsk_moe_sf *sf, int64_t G, int64_t MN,
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

static inline dsk_status check_dtype(const char *op, int v) {
  if (v != DSK_MOE_IN_BF16 && v != DSK_MOE_IN_F32)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: x_dtype %d is not DSK_MOE_IN_BF16 (0) or DSK_MOE_IN_F32 (1)", op, v);
  return DSK_STATUS_OK;
}

static inline dsk_status check_wfmt(const char *op, const char *name, int v) {
  if (v != DSK_MOE_W_MXFP4 && v != DSK_MOE_W_FP8)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %d is not DSK_MOE_W_MXFP4 (1) or DSK_MOE_W_FP8 (2)", op, name, v);
  return DSK_STATUS_OK;
}

static inline dsk_status check_limit(const char *op, const char *name, float v) {
  if (!isfinite(v) || v < 0.0f)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %g is not finite and >= 0 (0 = no clamp; DSv4 10)", op, name,
                     (double)v);
  return DSK_STATUS_OK;
}

/* Byte ranges of strided rows overlap. */
static inline int ranges_overlap(const void *a, int64_t abytes, const void *b, int64_t bbytes) {
  if (!a || !b || abytes <= 0 || bbytes <= 0) return 0;
  uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
  return a0 < b0 + (uintptr_t)bbytes && b0 < a0 + (uintptr_t)abytes;
}
static inline int64_t rows_bytes(int64_t rows, int64_t stride, int64_t width, int64_t elem) {
  return ((rows - 1) * stride + width) * elem;
}

/* The answer of a run or plan call whose backend slot is NULL. */
static inline dsk_status not_served(const dsk_ctx *ctx, const char *op) {
  const dsk_backend *b = ctx->backend;
  return dsk__fail(DSK_STATUS_UNSUPPORTED, "moe: backend %s does not serve %s", b->name, op);
}

static inline dsk_status check_plan_info(const char *op, dsk_plan_info *info) {
  if (!info) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s_plan: info is NULL", op);
  if (info->struct_size < sizeof *info)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s_plan: info->struct_size %zu < sizeof(dsk_plan_info) %zu", op,
                     info->struct_size, sizeof *info);
  return DSK_STATUS_OK;
}

static inline void fill_plan(const dsk_ctx *ctx, dsk_plan_info *info, int64_t bytes, const dsk_tactic *t, int source) {
  size_t keep = info->struct_size;
  memset(info, 0, sizeof *info);
  info->struct_size = keep;
  info->workspace_bytes = bytes;
  if (t) info->tactic = *t;
  info->tactic_source = source;
  snprintf(info->backend, sizeof info->backend, "%s", ctx->backend ? ctx->backend->name : "?");
}

static inline dsk_status check_workspace(const char *op, const void *ws, int64_t bytes, int64_t need) {
  if (need <= 0) return DSK_STATUS_OK;
  if (bytes < need)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace_bytes %" PRId64 " < %" PRId64 " needed (see the plan call)",
                     op, bytes, need);
  if (!ws) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace is NULL but %" PRId64 " bytes are needed", op, need);
  if (misaligned(ws, 16))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace %p is not 16-byte aligned", op, ws);
  return DSK_STATUS_OK;
}

/* ============================================ across the MoE op files */
/* moe.c: the router workspace, fp64 logits [T, E] (dsk_moe_route_plan). */
int64_t dsk__moe_route_ws_bytes(int64_t T, int64_t E);

/* moe_gemm.c: a full-size copy of a caller's dsk_moe_gemm_desc (an older
 * struct_size: the fields it lacks are 0) */
dsk_status dsk__moe_gemm_copy(const dsk_ctx *ctx, const dsk_moe_gemm_desc *d, dsk_moe_gemm_desc *c);
/* moe_gemm.c: the validators of dsk_moe_gemm / dsk_dense_fp8_gemm (run: the
 * workspace fields too; mode: DSK__TUNE_RUN / PLAN / FOLLOW; *t gets the
 * resolved tactic, *src, if given, its dsk_tactic_source). */
dsk_status dsk__moe_gemm_validate(const dsk_ctx *ctx, const dsk_moe_gemm_desc *d, int run, int mode, dsk_tactic *t,
                                  int *src);
dsk_status dsk__moe_dense_validate(const dsk_ctx *ctx, const dsk_dense_gemm_desc *d, int run, int mode, dsk_tactic *t,
                                   int *src);
/* moe_gemm.c: the moe.gemm tactic with the tuner's lookup (see there), and
 * the dense_fp8.gemm tactic of a descriptor's shape and tactic fields. */
dsk_status dsk__moe_gemm_tactic(const dsk_ctx *ctx, const dsk_tactic *g, int wfmt, int64_t A_used, int64_t N, int64_t K,
                                int64_t E_local, int64_t topk, int64_t T, int64_t expected_m, int mode, const char *op,
                                const char *field, dsk_tactic *out, int *source);
dsk_status dsk__moe_dense_resolve(const dsk_ctx *ctx, const dsk_dense_gemm_desc *d, int mode, dsk_tactic *t, int *src);

/* moe.c: a descriptor that grew trailing fields, from a caller built
 * before them (struct_size >= old_size): a full-size copy in c with the
 * missing fields zero (struct_size set to full); smaller sizes are
 * INVALID_ARG naming type. */
dsk_status dsk__moe_grown_copy(const char *op, const void *d, size_t got, size_t old_size, size_t full, void *c,
                               const char *type);
/* moe_forward.c: dsk_moe_desc grew aux_stream (struct_size =
 * offsetof(aux_stream) is served without it). */
dsk_status dsk__moe_desc_copy(const dsk_ctx *ctx, const dsk_moe_desc *d, dsk_moe_desc *c);
/* moe_forward.c: the validator of dsk_moe_run / dsk_moe_plan, and the first
 * slot dsk_moe_run needs that backend b lacks (NULL: served). */
/* workspace of a GEMM under tactic t (grouped: rows = M_sum; dense: rows =
 * M): the backend's moe_gemm_workspace, else split-K partials of split x
 * rows x N x 4 bytes when split > 1, else 0 */
int64_t dsk__moe_gemm_ws_bytes(const dsk_ctx *ctx, int grouped, int fmt, int64_t rows, int64_t N, int64_t K,
                               const dsk_tactic *t);
/* rows up to which dsk_moe_run gives the shared expert's GEMMs a split-K of 4 (moe_forward.c) */
#define DSK__MOE_FWD_SPLIT_ROWS 256
dsk_status dsk__moe_fwd_validate(const dsk_ctx *ctx, const dsk_moe_desc *d, int run, int mode, dsk__moe_ws *ws,
                                 dsk_tactic *t1, dsk_tactic *t2, dsk_tactic ts[2], int *src1);
const char *dsk__moe_fwd_missing_slot(const dsk_backend *b, const dsk_moe_desc *d);

#endif
