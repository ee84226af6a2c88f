/* mhc.c - descriptor validation, split resolution and dispatch of the mHC
 * ops dsk_mhc_prenorm / dsk_mhc_pre / dsk_mhc_post / dsk_mhc_head and the
 * fused dsk_mhc_post_prenorm (spec/mhc.md §5-§6; api-conventions.md §2-§3;
 * docs/mhc.md).
 *
 * Validation order of a run descriptor: struct_size, enums (precision),
 * fixed_splits >= 0, T in [0, 2^31 - 1]. T == 0 is a no-op that returns OK
 * before any shape or pointer is looked at (an empty batch may carry an
 * otherwise empty descriptor). Then D (8..16384, multiple of 8), nD == 4*D,
 * fixed_splits <= S_max, scalars (eps, iterations), and every pointer:
 * non-NULL where data is required, natural alignment (2 for bf16, 4 for
 * fp32), strides >= the row width without int64 overflow, and for CUDA
 * contexts 16-byte alignment of the vector-accessed tensors (R, fn, y, h,
 * out, R_out, norm_w) and of their row strides in bytes. Outputs must not
 * overlap the inputs they are computed from (bounding address ranges), except
 * the in-place dsk_mhc_post (R_out == R with the same stride); the fused
 * post_prenorm has no in-place form: its R_out and partials must not
 * overlap each other or any of its inputs. Partials and workspace sizes are
 * checked against the resolved S.
 *
 * Split resolution: fixed_splits > 0 pins S; 0 = the tuned entry of the
 * (nD, T bucket) key (prenorm; pre re-derives it) else the heuristic of
 * spec/mhc.md §5 with ctx->info.sm_count (mhc_head: always the heuristic).
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "../tune/tuner.h"

#define MHC_T_MAX INT64_C(2147483647)
#define MHC_ITERS_MAX 1000

/* ------------------------------------------------------------ public helpers */
int64_t dsk_mhc_max_splits(int64_t nD) {
  if (nD < 1) return 0;
  int64_t s = ((nD + 63) / 64) / 4;
  return s < 1 ? 1 : s;
}

int64_t dsk_mhc_splits_heuristic(int64_t nD, int64_t T, int sm_count) {
  if (nD < 1 || T < 0) return 0;
  int64_t smax = dsk_mhc_max_splits(nD);
  int64_t grid = (T + 63) / 64;
  if (grid < 1) grid = 1;
  int64_t sms = sm_count < 1 ? 1 : sm_count;
  int64_t s = sms / grid;
  if (s > smax) s = smax;
  if (s < 1) s = 1;
  return s;
}

int64_t dsk_mhc_split_width(int64_t nD, int64_t S) {
  if (nD < 1 || S < 1) return 0;
  int64_t per = (nD + S - 1) / S;
  return (per + DSK_MHC_SPLIT_ALIGN - 1) / DSK_MHC_SPLIT_ALIGN * DSK_MHC_SPLIT_ALIGN;
}

void dsk_mhc_prenorm_desc_init(dsk_mhc_prenorm_desc *d) {
  if (!d) return;
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->precision = DSK_MHC_PRECISION_FP32;
}

void dsk_mhc_pre_desc_init(dsk_mhc_pre_desc *d) {
  if (!d) return;
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->eps_rms = DSK_MHC_DEFAULT_EPS;
  d->eps_hc = DSK_MHC_DEFAULT_EPS;
  d->sinkhorn_iters = DSK_MHC_DEFAULT_SINKHORN_ITERS;
  d->post_mult = DSK_MHC_DEFAULT_POST_MULT;
  d->norm_eps = DSK_MHC_DEFAULT_EPS;
}

void dsk_mhc_post_desc_init(dsk_mhc_post_desc *d) {
  if (!d) return;
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
}

void dsk_mhc_post_prenorm_desc_init(dsk_mhc_post_prenorm_desc *d) {
  if (!d) return;
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->precision = DSK_MHC_PRECISION_FP32;
}

void dsk_mhc_head_desc_init(dsk_mhc_head_desc *d) {
  if (!d) return;
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->eps_rms = DSK_MHC_DEFAULT_EPS;
  d->eps_hc = DSK_MHC_DEFAULT_EPS;
  d->precision = DSK_MHC_PRECISION_FP32;
}

/* ------------------------------------------------------------- splits */
/* The split count a run with this (fixed_splits, nD, T) uses on ctx, and its
 * source (dsk_tactic_source). fixed_splits must already be valid. 0 on
 * mhc_prenorm: the tuned entry of the (nD, T bucket) key (src/tune), else the
 * heuristic; mhc_pre re-derives the same S (mode FOLLOW: same lookup, not
 * counted). mhc_head is not tunable (autotune.md §1 lists only prenorm): the
 * heuristic. Fails only with DSK_STATUS_TUNE_MISS (REQUIRE_HIT). */
static dsk_status mhc_resolve_splits(const dsk_ctx *ctx, int op, int mode, int64_t fixed, int64_t nD, int64_t T,
                                     int *source, int64_t *S) {
  if (fixed > 0) {
    if (source) *source = DSK_TACTIC_FORCED;
    *S = fixed;
    return DSK_STATUS_OK;
  }
  int64_t h = dsk_mhc_splits_heuristic(nD, T, ctx ? ctx->info.sm_count : 1);
  if (source) *source = DSK_TACTIC_HEURISTIC;
  *S = h;
  if (op == DSK_OP_MHC_HEAD || !ctx) return DSK_STATUS_OK;
  dsk__tune_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.op = DSK_OP_MHC_PRENORM;
  sh.nD = nD;
  sh.T = T;
  dsk_tactic ht, t;
  memset(&ht, 0, sizeof ht);
  ht.op = DSK_OP_MHC_PRENORM;
  ht.version = DSK_MHC_TACTIC_VERSION;
  ht.v[0] = (int32_t)h;
  int src = DSK_TACTIC_HEURISTIC;
  dsk_status st = dsk__tune_resolve(ctx, &sh, &ht, mode, &t, &src);
  if (st != DSK_STATUS_OK) return st;
  *S = t.v[0];
  if (source) *source = src;
  return DSK_STATUS_OK;
}

int dsk__mhc_prenorm_tactics(int64_t nD, dsk_tactic *out, int max) {
  int64_t smax = dsk_mhc_max_splits(nD);
  int n = 0;
  for (int64_t S = 1; S <= smax && n < max; S++, n++) {
    memset(&out[n], 0, sizeof out[n]);
    out[n].op = DSK_OP_MHC_PRENORM;
    out[n].version = DSK_MHC_TACTIC_VERSION;
    out[n].v[0] = (int32_t)S;
  }
  return n;
}

int dsk__mhc_prenorm_tactic_fix(int64_t nD, dsk_tactic *t) {
  if (t->op != DSK_OP_MHC_PRENORM || t->version != DSK_MHC_TACTIC_VERSION) return 0;
  for (int i = 1; i < 6; i++)
    if (t->v[i] != 0) return 0;
  return t->v[0] >= 1 && t->v[0] <= dsk_mhc_max_splits(nD);
}

static void mhc_tactic(dsk_tactic *t, int op, int64_t S) {
  memset(t, 0, sizeof *t);
  t->op = op;
  t->version = DSK_MHC_TACTIC_VERSION;
  t->v[0] = (int32_t)S;
}

/* ---------------------------------------------------------- field checks */
static int misaligned(const void *p, uintptr_t a) { return ((uintptr_t)p % a) != 0; }

static dsk_status check_struct(const char *op, size_t struct_size, size_t want, const char *type) {
  if (struct_size < want)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: struct_size %zu < sizeof(%s) %zu", op, struct_size, type, want);
  return DSK_STATUS_OK;
}

/* T in [0, 2^31 - 1]; *noop = 1 when T == 0. */
static dsk_status check_T(const char *op, int64_t T, int *noop) {
  *noop = 0;
  if (T < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: T %" PRId64 " < 0", op, T);
  if (T > MHC_T_MAX)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: T %" PRId64 " > %" PRId64 " (2^31 - 1)", op, T, MHC_T_MAX);
  *noop = T == 0;
  return DSK_STATUS_OK;
}

static dsk_status check_precision(const char *op, int p) {
  if (p != DSK_MHC_PRECISION_FP32 && p != DSK_MHC_PRECISION_TF32)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: precision %d is not FP32 (0) or TF32 (1)", op, p);
  return DSK_STATUS_OK;
}

static dsk_status check_D(const char *op, int64_t D) {
  if (D < 8 || D > DSK_MHC_MAX_D || D % 8 != 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: D %" PRId64 " is not a multiple of 8 in [8, %d]", op, D,
                     DSK_MHC_MAX_D);
  return DSK_STATUS_OK;
}

static dsk_status check_D_nD(const char *op, int64_t D, int64_t nD) {
  dsk_status st = check_D(op, D);
  if (st != DSK_STATUS_OK) return st;
  if (nD != 4 * D)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: nD %" PRId64 " != 4*D = %" PRId64 " (D %" PRId64 ", 4 streams)", op,
                     nD, 4 * D, D);
  return DSK_STATUS_OK;
}

static dsk_status check_splits(const char *op, int64_t fixed, int64_t nD) {
  int64_t smax = dsk_mhc_max_splits(nD);
  if (fixed < 0 || fixed > smax)
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "%s: fixed_splits %" PRId64 " is not 0 (tuned/heuristic) or 1..%" PRId64
                     " (S_max = floor(ceil(nD/64)/4) for nD %" PRId64 ")",
                     op, fixed, smax, nD);
  return DSK_STATUS_OK;
}

/* A row tensor: T rows of `width` elements of `elem` bytes, `stride`
 * elements apart. vec: vector-accessed by the CUDA kernels (16 bytes). */
static dsk_status check_rows(const dsk_ctx *ctx, const char *op, const char *name, const void *p, int64_t stride,
                             int64_t T, int64_t width, int64_t elem, int vec) {
  if (!p) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s is NULL (T %" PRId64 ")", op, name, T);
  if (misaligned(p, (uintptr_t)elem))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %p is not %" PRId64 "-byte aligned (%s)", op, name, p, elem,
                     elem == 2 ? "bf16" : "fp32");
  if (stride < width)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s_stride %" PRId64 " < %" PRId64 " (row width in elements)", op,
                     name, stride, width);
  /* ((T - 1) * stride + width) * elem must fit int64 */
  if (T > 1 && (T - 1) > (INT64_MAX / elem - width) / stride)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: T %" PRId64 " rows of %s_stride %" PRId64 " overflow int64", op, T,
                     name, stride);
  if (vec && ctx && ctx->info.is_cuda) {
    if (misaligned(p, 16))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %p is not 16-byte aligned (CUDA backend %s)", op, name, p,
                       ctx->info.backend);
    if ((stride * elem) % 16 != 0)
      return dsk__fail(DSK_STATUS_INVALID_ARG,
                       "%s: %s_stride %" PRId64 " is not a multiple of %" PRId64 " elements (16 bytes; CUDA backend %s)",
                       op, name, stride, 16 / elem, ctx->info.backend);
  }
  return DSK_STATUS_OK;
}

/* A contiguous fp32 array of n elements. */
static dsk_status check_f32(const dsk_ctx *ctx, const char *op, const char *name, const float *p, int64_t n, int vec) {
  if (!p) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s is NULL (%" PRId64 " fp32 values needed)", op, name, n);
  if (misaligned(p, 4))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %p is not 4-byte aligned (fp32)", op, name, (const void *)p);
  if (vec && ctx && ctx->info.is_cuda && misaligned(p, 16))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %p is not 16-byte aligned (CUDA backend %s)", op, name,
                     (const void *)p, ctx->info.backend);
  return DSK_STATUS_OK;
}

static dsk_status check_eps(const char *op, const char *name, float v, int allow_zero) {
  if (!isfinite(v) || v < 0.0f || (!allow_zero && v == 0.0f))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %g is not finite and %s 0", op, name, (double)v,
                     allow_zero ? ">=" : ">");
  return DSK_STATUS_OK;
}

/* A byte range [lo, hi). */
typedef struct mhc_span {
  uintptr_t lo, hi;
} mhc_span;
static void span_of(mhc_span *s, const void *p, int64_t bytes) {
  s->lo = (uintptr_t)p;
  s->hi = s->lo + (uintptr_t)bytes;
}
static int spans_overlap(const mhc_span *a, const mhc_span *b) { return a->lo < b->hi && b->lo < a->hi; }

/* Bounding byte range of T strided rows. */
static void row_range(const void *p, int64_t stride, int64_t T, int64_t width, int64_t elem, uintptr_t *lo,
                      uintptr_t *hi) {
  *lo = (uintptr_t)p;
  *hi = *lo + (uintptr_t)(((T - 1) * stride + width) * elem);
}

static int rows_overlap(const void *a, int64_t sa, int64_t wa, const void *b, int64_t sb, int64_t wb, int64_t T,
                        int64_t elem) {
  mhc_span x, y;
  row_range(a, sa, T, wa, elem, &x.lo, &x.hi);
  row_range(b, sb, T, wb, elem, &y.lo, &y.hi);
  return spans_overlap(&x, &y);
}

static dsk_status check_partials(const char *op, const char *name, const void *p, int64_t bytes, int64_t need,
                                 int64_t S, int64_t T, int64_t per) {
  if (bytes < need)
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "%s: %s_bytes %" PRId64 " < %" PRId64 " needed (S %" PRId64 " * T %" PRId64 " * %" PRId64
                     " * 4; see the plan call)",
                     op, name, bytes, need, S, T, per);
  if (!p) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s is NULL but %" PRId64 " bytes are needed", op, name, need);
  if (misaligned(p, 4))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %s %p is not 4-byte aligned (fp32)", op, name, p);
  return DSK_STATUS_OK;
}

/* The leading checks of an op that runs the split projection (prenorm,
 * post_prenorm, head), in the documented order: struct_size, precision,
 * fixed_splits >= 0, T (*noop on T == 0, which skips the rest), D and nD,
 * fixed_splits <= S_max. */
static dsk_status check_proj_head(const char *op, size_t struct_size, size_t want, const char *type, int precision,
                                  int32_t fixed, int64_t T, int64_t D, int64_t nD, int *noop) {
  dsk_status st = check_struct(op, struct_size, want, type);
  if (st != DSK_STATUS_OK) return st;
  if ((st = check_precision(op, precision)) != DSK_STATUS_OK) return st;
  if (fixed < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: fixed_splits %d < 0", op, (int)fixed);
  if ((st = check_T(op, T, noop)) != DSK_STATUS_OK || *noop) return st;
  if ((st = check_D_nD(op, D, nD)) != DSK_STATUS_OK) return st;
  return check_splits(op, fixed, nD);
}

/* The tuner lookup mode of a validation call: run 0 = plan, 1 = run call
 * (counted), 2 = dsk_op_supported (not counted). */
static int tune_mode(int run) { return run == 1 ? DSK__TUNE_RUN : run == 2 ? DSK__TUNE_FOLLOW : DSK__TUNE_PLAN; }

/* ----------------------------------------------------------- prenorm */
#define OP_PRENORM "mhc_prenorm"

/* run = 0 (plan): partials are not checked; 1: a run call (the tuner lookup
 * counts); 2: dsk_op_supported (checked as a run, not counted). */
static dsk_status prenorm_validate(const dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d, int run, int64_t *S_out,
                                   int *source) {
  const char *op = OP_PRENORM;
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  int noop = 0;
  if (S_out) *S_out = 0;
  dsk_status st = check_proj_head(op, d->struct_size, sizeof *d, "dsk_mhc_prenorm_desc", (int)d->precision,
                                  d->fixed_splits, d->T, d->D, d->nD, &noop);
  if (st != DSK_STATUS_OK || noop) return st;
  if ((st = check_rows(ctx, op, "R", d->R, d->R_stride, d->T, d->nD, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "fn", d->fn, DSK_MHC_MIX * d->nD, 1)) != DSK_STATUS_OK) return st;
  int64_t S = 0;
  st = mhc_resolve_splits(ctx, DSK_OP_MHC_PRENORM, tune_mode(run), d->fixed_splits, d->nD, d->T, source, &S);
  if (st != DSK_STATUS_OK) return st;
  if (S_out) *S_out = S;
  if (run) {
    if ((st = check_partials(op, "partials", d->partials, d->partials_bytes, S * d->T * 25 * 4, S, d->T, 25)) !=
        DSK_STATUS_OK)
      return st;
  }
  return DSK_STATUS_OK;
}

static dsk_status no_slot(const dsk_ctx *ctx, const char *op) {
  return dsk__fail(DSK_STATUS_UNSUPPORTED, "%s: backend %s does not serve this op", op, ctx->backend->name);
}

/* has_slot: the backend's slot of the planned op is non-NULL. */
static dsk_status plan_common(dsk_ctx *ctx, dsk_plan_info *info, const char *op, int opid, int64_t S, int source,
                              int64_t bytes, int has_slot) {
  size_t keep = info->struct_size;
  memset(info, 0, sizeof *info);
  info->struct_size = keep;
  info->workspace_bytes = bytes;
  info->tactic_source = source;
  if (S > 0) mhc_tactic(&info->tactic, opid, S);
  snprintf(info->backend, sizeof info->backend, "%s", ctx->backend->name);
  if (!has_slot) return no_slot(ctx, op);
  return DSK_STATUS_OK;
}

static dsk_status check_plan_args(dsk_ctx *ctx, const void *d, dsk_plan_info *info, const char *op) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s_plan: ctx is NULL", op);
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s_plan: desc is NULL", op);
  if (!info) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s_plan: info is NULL", op);
  if (info->struct_size < sizeof *info)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s_plan: info->struct_size %zu < sizeof(dsk_plan_info) %zu", op,
                     info->struct_size, sizeof *info);
  return DSK_STATUS_OK;
}

dsk_status dsk_mhc_prenorm_plan(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d, dsk_plan_info *info) {
  dsk_status st = check_plan_args(ctx, d, info, OP_PRENORM);
  if (st != DSK_STATUS_OK) return st;
  int64_t S = 0;
  int source = DSK_TACTIC_HEURISTIC;
  if ((st = prenorm_validate(ctx, d, 0, &S, &source)) != DSK_STATUS_OK) return st;
  return plan_common(ctx, info, OP_PRENORM, DSK_OP_MHC_PRENORM, S, source, S * d->T * 25 * 4,
                     ctx->backend->mhc_prenorm != NULL);
}

dsk_status dsk_mhc_prenorm(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, OP_PRENORM ": ctx is NULL");
  int64_t S = 0;
  dsk_status st = prenorm_validate(ctx, d, 1, &S, NULL);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->mhc_prenorm) return no_slot(ctx, OP_PRENORM);
  dsk_tactic t;
  mhc_tactic(&t, DSK_OP_MHC_PRENORM, S);
  return ctx->backend->mhc_prenorm(ctx, d, &t);
}

/* --------------------------------------------------------------- pre */
#define OP_PRE "mhc_pre"

static dsk_status pre_validate(const dsk_ctx *ctx, const dsk_mhc_pre_desc *d, int64_t *S_out) {
  const char *op = OP_PRE;
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  int noop;
  dsk_status st = check_struct(op, d->struct_size, sizeof *d, "dsk_mhc_pre_desc");
  if (st != DSK_STATUS_OK) return st;
  if (d->fixed_splits < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: fixed_splits %d < 0", op, (int)d->fixed_splits);
  if ((st = check_T(op, d->T, &noop)) != DSK_STATUS_OK) return st;
  if (noop) {
    if (S_out) *S_out = 0;
    return DSK_STATUS_OK;
  }
  if ((st = check_D_nD(op, d->D, d->nD)) != DSK_STATUS_OK) return st;
  if ((st = check_splits(op, d->fixed_splits, d->nD)) != DSK_STATUS_OK) return st;
  if ((st = check_eps(op, "eps_rms", d->eps_rms, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_eps(op, "eps_hc", d->eps_hc, 1)) != DSK_STATUS_OK) return st;
  if (d->sinkhorn_iters < 1 || d->sinkhorn_iters > MHC_ITERS_MAX)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: sinkhorn_iters %d is not in [1, %d] (DSv4: 20)", op,
                     (int)d->sinkhorn_iters, MHC_ITERS_MAX);
  if (!isfinite(d->post_mult))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: post_mult %g is not finite (DSv4: 2.0)", op, (double)d->post_mult);
  if (d->norm_w && (st = check_eps(op, "norm_eps", d->norm_eps, 0)) != DSK_STATUS_OK) return st;
  int64_t S = 0;
  st = mhc_resolve_splits(ctx, DSK_OP_MHC_PRE, DSK__TUNE_FOLLOW, d->fixed_splits, d->nD, d->T, NULL, &S);
  if (st != DSK_STATUS_OK) return st;
  if (S_out) *S_out = S;
  if ((st = check_partials(op, "partials", d->partials, d->partials_bytes, S * d->T * 25 * 4, S, d->T, 25)) !=
      DSK_STATUS_OK)
    return st;
  if ((st = check_rows(ctx, op, "R", d->R, d->R_stride, d->T, d->nD, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "scale", d->scale, 3, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "base", d->base, DSK_MHC_MIX, 0)) != DSK_STATUS_OK) return st;
  if (d->norm_w && (st = check_f32(ctx, op, "norm_w", d->norm_w, d->D, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_rows(ctx, op, "y", d->y, d->y_stride, d->T, d->D, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "post", d->post, 4 * d->T, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "C", d->C, 16 * d->T, 0)) != DSK_STATUS_OK) return st;
  if (d->pre_w && misaligned(d->pre_w, 4))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: pre_w %p is not 4-byte aligned (fp32)", op, (void *)d->pre_w);
  if (rows_overlap(d->y, d->y_stride, d->D, d->R, d->R_stride, d->nD, d->T, 2))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: y %p (y_stride %" PRId64 ") overlaps R %p (R_stride %" PRId64 ")",
                     op, (void *)d->y, d->y_stride, (const void *)d->R, d->R_stride);
  return DSK_STATUS_OK;
}

dsk_status dsk_mhc_pre(dsk_ctx *ctx, const dsk_mhc_pre_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, OP_PRE ": ctx is NULL");
  int64_t S = 0;
  dsk_status st = pre_validate(ctx, d, &S);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->mhc_pre) return no_slot(ctx, OP_PRE);
  dsk_tactic t;
  mhc_tactic(&t, DSK_OP_MHC_PRE, S);
  return ctx->backend->mhc_pre(ctx, d, &t);
}

/* -------------------------------------------------------------- post */
#define OP_POST "mhc_post"

static dsk_status post_validate(const dsk_ctx *ctx, const dsk_mhc_post_desc *d) {
  const char *op = OP_POST;
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  int noop;
  dsk_status st = check_struct(op, d->struct_size, sizeof *d, "dsk_mhc_post_desc");
  if (st != DSK_STATUS_OK) return st;
  if ((st = check_T(op, d->T, &noop)) != DSK_STATUS_OK || noop) return st;
  if ((st = check_D(op, d->D)) != DSK_STATUS_OK) return st;
  const int64_t nD = 4 * d->D;
  if ((st = check_rows(ctx, op, "out", d->out, d->out_stride, d->T, d->D, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_rows(ctx, op, "R", d->R, d->R_stride, d->T, nD, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "post", d->post, 4 * d->T, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "C", d->C, 16 * d->T, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_rows(ctx, op, "R_out", d->R_out, d->R_out_stride, d->T, nD, 2, 1)) != DSK_STATUS_OK) return st;
  if ((const void *)d->R_out == (const void *)d->R) {
    if (d->R_out_stride != d->R_stride)
      return dsk__fail(DSK_STATUS_INVALID_ARG,
                       "%s: in place (R_out == R) needs R_out_stride == R_stride (%" PRId64 " != %" PRId64 ")", op,
                       d->R_out_stride, d->R_stride);
  } else if (rows_overlap(d->R_out, d->R_out_stride, nD, d->R, d->R_stride, nD, d->T, 2)) {
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "%s: R_out %p (R_out_stride %" PRId64 ") partly overlaps R %p (R_stride %" PRId64
                     "); in place needs R_out == R",
                     op, (void *)d->R_out, d->R_out_stride, (const void *)d->R, d->R_stride);
  }
  if (rows_overlap(d->R_out, d->R_out_stride, nD, d->out, d->out_stride, d->D, d->T, 2))
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "%s: R_out %p (R_out_stride %" PRId64 ") overlaps out %p (out_stride %" PRId64 ")", op,
                     (void *)d->R_out, d->R_out_stride, (const void *)d->out, d->out_stride);
  return DSK_STATUS_OK;
}

dsk_status dsk_mhc_post(dsk_ctx *ctx, const dsk_mhc_post_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, OP_POST ": ctx is NULL");
  dsk_status st = post_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->mhc_post) return no_slot(ctx, OP_POST);
  return ctx->backend->mhc_post(ctx, d);
}

/* ------------------------------------------------------ post + prenorm */
#define OP_POST_PRENORM "mhc_post_prenorm"

/* The post checks of post_validate, without the in-place form: neither
 * output (R_out, partials) may overlap the other or any input (R, out,
 * post, C, fn; bounding byte ranges). run as in prenorm_validate. */
static dsk_status post_prenorm_validate(const dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *d, int run,
                                        int64_t *S_out, int *source) {
  const char *op = OP_POST_PRENORM;
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  int noop = 0;
  if (S_out) *S_out = 0;
  dsk_status st = check_proj_head(op, d->struct_size, sizeof *d, "dsk_mhc_post_prenorm_desc", (int)d->precision,
                                  d->fixed_splits, d->T, d->D, d->nD, &noop);
  if (st != DSK_STATUS_OK || noop) return st;
  const int64_t nD = d->nD;
  if ((st = check_rows(ctx, op, "out", d->out, d->out_stride, d->T, d->D, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_rows(ctx, op, "R", d->R, d->R_stride, d->T, nD, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "post", d->post, 4 * d->T, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "C", d->C, 16 * d->T, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_rows(ctx, op, "R_out", d->R_out, d->R_out_stride, d->T, nD, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "fn", d->fn, DSK_MHC_MIX * nD, 1)) != DSK_STATUS_OK) return st;
  /* byte ranges: inputs R, out, post, C, fn; outputs R_out, partials */
  mhc_span in[5], o[2];
  row_range(d->R, d->R_stride, d->T, nD, 2, &in[0].lo, &in[0].hi);
  row_range(d->out, d->out_stride, d->T, d->D, 2, &in[1].lo, &in[1].hi);
  span_of(&in[2], d->post, 16 * d->T);
  span_of(&in[3], d->C, 64 * d->T);
  span_of(&in[4], d->fn, DSK_MHC_MIX * nD * 4);
  static const char *const in_name[5] = {"R", "out", "post", "C", "fn"};
  row_range(d->R_out, d->R_out_stride, d->T, nD, 2, &o[0].lo, &o[0].hi);
  for (int i = 0; i < 5; i++)
    if (spans_overlap(&o[0], &in[i]))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: R_out %p (R_out_stride %" PRId64 ") overlaps %s %p%s", op,
                       (void *)d->R_out, d->R_out_stride, in_name[i], (const void *)in[i].lo,
                       i == 0 ? "; the fused op has no in-place form (use two residual buffers, or dsk_mhc_post in place)"
                              : "");
  int64_t S = 0;
  st = mhc_resolve_splits(ctx, DSK_OP_MHC_POST_PRENORM, tune_mode(run), d->fixed_splits, nD, d->T, source, &S);
  if (st != DSK_STATUS_OK) return st;
  if (S_out) *S_out = S;
  if (run) {
    const int64_t need = S * d->T * 25 * 4;
    if ((st = check_partials(op, "partials", d->partials, d->partials_bytes, need, S, d->T, 25)) != DSK_STATUS_OK)
      return st;
    span_of(&o[1], d->partials, need);
    if (spans_overlap(&o[1], &o[0]))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: partials %p (%" PRId64 " bytes) overlap R_out %p", op,
                       (void *)d->partials, need, (void *)d->R_out);
    for (int i = 0; i < 5; i++)
      if (spans_overlap(&o[1], &in[i]))
        return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: partials %p (%" PRId64 " bytes) overlap %s %p", op,
                         (void *)d->partials, need, in_name[i], (const void *)in[i].lo);
  }
  return DSK_STATUS_OK;
}

dsk_status dsk_mhc_post_prenorm_plan(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *d, dsk_plan_info *info) {
  dsk_status st = check_plan_args(ctx, d, info, OP_POST_PRENORM);
  if (st != DSK_STATUS_OK) return st;
  int64_t S = 0;
  int source = DSK_TACTIC_HEURISTIC;
  if ((st = post_prenorm_validate(ctx, d, 0, &S, &source)) != DSK_STATUS_OK) return st;
  return plan_common(ctx, info, OP_POST_PRENORM, DSK_OP_MHC_POST_PRENORM, S, source, S * d->T * 25 * 4,
                     ctx->backend->mhc_post_prenorm != NULL);
}

dsk_status dsk_mhc_post_prenorm(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, OP_POST_PRENORM ": ctx is NULL");
  int64_t S = 0;
  dsk_status st = post_prenorm_validate(ctx, d, 1, &S, NULL);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->mhc_post_prenorm) return no_slot(ctx, OP_POST_PRENORM);
  dsk_tactic t;
  mhc_tactic(&t, DSK_OP_MHC_POST_PRENORM, S);
  return ctx->backend->mhc_post_prenorm(ctx, d, &t);
}

/* -------------------------------------------------------------- head */
#define OP_HEAD "mhc_head"

static dsk_status head_validate(const dsk_ctx *ctx, const dsk_mhc_head_desc *d, int run, int64_t *S_out,
                                int *source) {
  const char *op = OP_HEAD;
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: desc is NULL", op);
  int noop = 0;
  if (S_out) *S_out = 0;
  dsk_status st = check_proj_head(op, d->struct_size, sizeof *d, "dsk_mhc_head_desc", (int)d->precision,
                                  d->fixed_splits, d->T, d->D, d->nD, &noop);
  if (st != DSK_STATUS_OK || noop) return st;
  if ((st = check_eps(op, "eps_rms", d->eps_rms, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_eps(op, "eps_hc", d->eps_hc, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_rows(ctx, op, "R", d->R, d->R_stride, d->T, d->nD, 2, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "fn", d->fn, 4 * d->nD, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "scale", d->scale, 1, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_f32(ctx, op, "base", d->base, 4, 0)) != DSK_STATUS_OK) return st;
  if ((st = check_rows(ctx, op, "h", d->h, d->h_stride, d->T, d->D, 2, 1)) != DSK_STATUS_OK) return st;
  if (rows_overlap(d->h, d->h_stride, d->D, d->R, d->R_stride, d->nD, d->T, 2))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: h %p (h_stride %" PRId64 ") overlaps R %p (R_stride %" PRId64 ")",
                     op, (void *)d->h, d->h_stride, (const void *)d->R, d->R_stride);
  int64_t S = 0;
  st = mhc_resolve_splits(ctx, DSK_OP_MHC_HEAD, DSK__TUNE_FOLLOW, d->fixed_splits, d->nD, d->T, source, &S);
  if (st != DSK_STATUS_OK) return st;
  if (S_out) *S_out = S;
  if (run) {
    if ((st = check_partials(op, "workspace", d->workspace, d->workspace_bytes, S * d->T * 5 * 4, S, d->T, 5)) !=
        DSK_STATUS_OK)
      return st;
    if (ctx && ctx->info.is_cuda && misaligned(d->workspace, 16))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: workspace %p is not 16-byte aligned (CUDA backend %s)", op,
                       d->workspace, ctx->info.backend);
  }
  return DSK_STATUS_OK;
}

dsk_status dsk_mhc_head_plan(dsk_ctx *ctx, const dsk_mhc_head_desc *d, dsk_plan_info *info) {
  dsk_status st = check_plan_args(ctx, d, info, OP_HEAD);
  if (st != DSK_STATUS_OK) return st;
  int64_t S = 0;
  int source = DSK_TACTIC_HEURISTIC;
  if ((st = head_validate(ctx, d, 0, &S, &source)) != DSK_STATUS_OK) return st;
  return plan_common(ctx, info, OP_HEAD, DSK_OP_MHC_HEAD, S, source, S * d->T * 5 * 4,
                     ctx->backend->mhc_head != NULL);
}

dsk_status dsk_mhc_head(dsk_ctx *ctx, const dsk_mhc_head_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, OP_HEAD ": ctx is NULL");
  int64_t S = 0;
  dsk_status st = head_validate(ctx, d, 1, &S, NULL);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend->mhc_head) return no_slot(ctx, OP_HEAD);
  dsk_tactic t;
  mhc_tactic(&t, DSK_OP_MHC_HEAD, S);
  return ctx->backend->mhc_head(ctx, d, &t);
}

/* ------------------------------------------------ for dsk_op_supported */
dsk_status dsk__mhc_validate(const dsk_ctx *ctx, int op, const void *desc) {
  switch (op) {
    case DSK_OP_MHC_PRENORM: return prenorm_validate(ctx, (const dsk_mhc_prenorm_desc *)desc, 2, NULL, NULL);
    case DSK_OP_MHC_PRE: return pre_validate(ctx, (const dsk_mhc_pre_desc *)desc, NULL);
    case DSK_OP_MHC_POST: return post_validate(ctx, (const dsk_mhc_post_desc *)desc);
    case DSK_OP_MHC_HEAD: return head_validate(ctx, (const dsk_mhc_head_desc *)desc, 1, NULL, NULL);
    case DSK_OP_MHC_POST_PRENORM:
      return post_prenorm_validate(ctx, (const dsk_mhc_post_prenorm_desc *)desc, 2, NULL, NULL);
  }
  return dsk__fail(DSK_STATUS_INVALID_ARG, "mhc: op %d is not an mHC op (20..24)", op);
}
