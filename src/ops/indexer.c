/* indexer.c - the lightning indexer ops (spec/indices.md §9, issue 7):
 * dsk_indexer_logits, dsk_topk (+ plan) and the fused path
 * dsk_indexer_topk_slots (+ plan): descriptor validation and dispatch to the
 * context's backend (slots indexer_logits, topk_workspace, topk and, for the
 * fused path, slot_list_build; src/backend/backend.h). Design notes and
 * spec readings: docs/indexer.md.
 *
 * Validation order (api-conventions.md §2-3): ctx, desc, struct_size, T
 * (T < 0 or > 2^31-1 is an error, T == 0 returns OK before any other field
 * is looked at), then every field in declaration order. Every message names
 * the op, the field and the values. Alignment: int32 / fp32 pointers 4
 * bytes, counters 8 bytes, on every backend (a misaligned pointer is
 * undefined behaviour on the CPU too); CUDA contexts also need q 16-byte
 * aligned with strides that are multiples of 16, the key cache as
 * dsk__kv_cache_validate says, and a 16-byte aligned workspace. Outputs may
 * not overlap the inputs or each other.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"

/* Largest element stride / extent accepted (as sparse_mla.c): keeps every
 * index product of the kernels far from int64 overflow. */
#define IDX_MAX_EXTENT ((int64_t)1 << 52)
#define IDX_DIM DSK_INDEXER_DIM

#define FAIL(...) return dsk__fail(DSK_STATUS_INVALID_ARG, __VA_ARGS__)

static int misaligned(const void *p, uintptr_t a) { return p && ((uintptr_t)p % a) != 0; }

/* Rows [0, n) of `width` elements `stride` apart fit in IDX_MAX_EXTENT. */
static int rows_fit(int64_t n, int64_t stride, int64_t width) {
  if (stride > IDX_MAX_EXTENT || width > IDX_MAX_EXTENT) return 0;
  return n <= 1 || (n - 1) <= (IDX_MAX_EXTENT - width) / stride;
}

/* ------------------------------------------------------------ overlaps */
typedef struct idx_range {
  const char *name;
  uintptr_t lo, hi; /* [lo, hi); empty when lo == hi */
} idx_range;

static idx_range range_of(const char *name, const void *p, int64_t bytes) {
  idx_range r = {name, 0, 0};
  if (p && bytes > 0) {
    r.lo = (uintptr_t)p;
    r.hi = r.lo + (uintptr_t)bytes;
  }
  return r;
}
/* Bytes spanned by n rows of `width` elements of `elem` bytes, `stride` elements apart. */
static int64_t rows_bytes(int64_t n, int64_t stride, int64_t width, int64_t elem) {
  return n <= 0 ? 0 : ((n - 1) * stride + width) * elem;
}
static int ranges_overlap(idx_range a, idx_range b) {
  if (a.lo == a.hi || b.lo == b.hi) return 0;
  return a.lo < b.hi && b.lo < a.hi;
}
static dsk_status check_overlaps(const char *op, const idx_range *outs, int nout, const idx_range *ins, int nin) {
  for (int a = 0; a < nout; a++) {
    for (int b = 0; b < nin; b++)
      if (ranges_overlap(outs[a], ins[b])) FAIL("%s: %s overlaps %s", op, outs[a].name, ins[b].name);
    for (int b = a + 1; b < nout; b++)
      if (ranges_overlap(outs[a], outs[b])) FAIL("%s: %s overlaps %s", op, outs[a].name, outs[b].name);
  }
  return DSK_STATUS_OK;
}

/* ------------------------------------------------- shared field checks */
static dsk_status check_block_table(const char *op, const char *name, const dsk_block_table *bt) {
  if (!bt->table) FAIL("%s: %s.table is NULL", op, name);
  if (misaligned(bt->table, 4)) FAIL("%s: %s.table %p is not 4-byte aligned (int32)", op, name, (const void *)bt->table);
  if (bt->rows < 1) FAIL("%s: %s.rows %" PRId64 " < 1", op, name, bt->rows);
  if (bt->max_blocks < 1) FAIL("%s: %s.max_blocks %" PRId64 " < 1", op, name, bt->max_blocks);
  if (bt->stride < bt->max_blocks)
    FAIL("%s: %s.stride %" PRId64 " < %s.max_blocks %" PRId64, op, name, bt->stride, name, bt->max_blocks);
  if (!rows_fit(bt->rows, bt->stride, bt->max_blocks))
    FAIL("%s: %s.rows %" PRId64 " x %s.stride %" PRId64 " is too large", op, name, bt->rows, name, bt->stride);
  return DSK_STATUS_OK;
}

static dsk_status check_i32(const char *op, const char *name, const int32_t *p, int required) {
  if (!p && required) FAIL("%s: %s is NULL", op, name);
  if (misaligned(p, 4)) FAIL("%s: %s %p is not 4-byte aligned (int32)", op, name, (const void *)p);
  return DSK_STATUS_OK;
}

/* A [T, n] fp32 matrix with a row stride. */
static dsk_status check_f32_rows(const char *op, const char *name, const float *p, int64_t T, int64_t n,
                                 int64_t stride) {
  if (!p) FAIL("%s: %s is NULL", op, name);
  if (misaligned(p, 4)) FAIL("%s: %s %p is not 4-byte aligned (fp32)", op, name, (const void *)p);
  if (stride < n) FAIL("%s: %s_stride_t %" PRId64 " < %" PRId64, op, name, stride, n);
  if (!rows_fit(T, stride, n)) FAIL("%s: %s_stride_t %" PRId64 " with T %" PRId64 " is too large", op, name, stride, T);
  return DSK_STATUS_OK;
}

/* The scoring fields shared by dsk_indexer_logits and the fused path; `d`
 * holds them (for the fused path a copy without out). T >= 1. */
static dsk_status check_scoring(const dsk_ctx *ctx, const char *op, const dsk_indexer_logits_desc *d) {
  const int cuda = ctx->info.is_cuda;
  const int64_t T = d->T, H = d->n_heads;
  dsk_status st;
  if (H < 1 || H > 128) FAIL("%s: n_heads %" PRId64 " is not in 1..128", op, H);

  if (!d->q) FAIL("%s: q is NULL", op);
  if (d->q_stride_h < IDX_DIM) FAIL("%s: q_stride_h %" PRId64 " < %d (rows would overlap)", op, d->q_stride_h, IDX_DIM);
  if (d->q_stride_h > IDX_MAX_EXTENT) FAIL("%s: q_stride_h %" PRId64 " is too large", op, d->q_stride_h);
  {
    const int64_t need = (H - 1) * d->q_stride_h + IDX_DIM;
    if (d->q_stride_t < need)
      FAIL("%s: q_stride_t %" PRId64 " < (n_heads-1)*q_stride_h + %d = %" PRId64, op, d->q_stride_t, IDX_DIM, need);
    if (!rows_fit(T, d->q_stride_t, need))
      FAIL("%s: q_stride_t %" PRId64 " with T %" PRId64 " is too large", op, d->q_stride_t, T);
  }
  if (cuda) {
    if (misaligned(d->q, 16))
      FAIL("%s: q %p is not 16-byte aligned (CUDA backend %s)", op, (const void *)d->q, ctx->info.backend);
    if (d->q_stride_t % 16 != 0 || d->q_stride_h % 16 != 0)
      FAIL("%s: q_stride_t %" PRId64 " / q_stride_h %" PRId64 " must be multiples of 16 on CUDA (backend %s)", op,
           d->q_stride_t, d->q_stride_h, ctx->info.backend);
  }
  if ((st = check_f32_rows(op, "q_scale", d->q_scale, T, H, d->q_scale_stride_t)) != DSK_STATUS_OK) return st;
  if ((st = check_f32_rows(op, "weights", d->weights, T, H, d->weights_stride_t)) != DSK_STATUS_OK) return st;
  if ((st = check_i32(op, "req", d->req, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_i32(op, "pos", d->pos, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_i32(op, "slot_mapping", d->slot_mapping, 1)) != DSK_STATUS_OK) return st;
  if ((st = check_block_table(op, "block_table", &d->block_table)) != DSK_STATUS_OK) return st;
  if (d->ratio != 1 && d->ratio != 4) FAIL("%s: ratio %" PRId64 " is not 1 or 4", op, d->ratio);
  {
    char what[64];
    snprintf(what, sizeof what, "%s: key cache", op);
    if ((st = dsk__kv_cache_validate(ctx, what, DSK_KV_FORMAT_IDXK132, &d->cache)) != DSK_STATUS_OK) return st;
  }
  if (d->ctx_width < 1) FAIL("%s: ctx_width %" PRId64 " < 1", op, d->ctx_width);
  if (d->ctx_width > INT32_MAX) FAIL("%s: ctx_width %" PRId64 " > 2147483647", op, d->ctx_width);
  if (misaligned(d->counters, 8)) FAIL("%s: counters %p is not 8-byte aligned (int64)", op, (void *)d->counters);
  return DSK_STATUS_OK;
}

/* Byte ranges of the scoring inputs (for the overlap checks); returns the count. */
static int scoring_inputs(const dsk_indexer_logits_desc *d, idx_range *ins) {
  int n = 0;
  const int64_t T = d->T, H = d->n_heads;
  ins[n++] = range_of("q", d->q, rows_bytes(T, d->q_stride_t, (H - 1) * d->q_stride_h + IDX_DIM, 1));
  ins[n++] = range_of("q_scale", d->q_scale, rows_bytes(T, d->q_scale_stride_t, H, 4));
  ins[n++] = range_of("weights", d->weights, rows_bytes(T, d->weights_stride_t, H, 4));
  ins[n++] = range_of("req", d->req, T * 4);
  ins[n++] = range_of("pos", d->pos, T * 4);
  ins[n++] = range_of("slot_mapping", d->slot_mapping, T * 4);
  ins[n++] = range_of("block_table", d->block_table.table,
                      rows_bytes(d->block_table.rows, d->block_table.stride, d->block_table.max_blocks, 4));
  ins[n++] = range_of("key cache", d->cache.base, d->cache.num_pages * d->cache.page_stride);
  return n;
}

static const char *backend_name(const dsk_ctx *ctx) { return ctx->backend ? ctx->backend->name : "(none)"; }

static dsk_status unsupported(const dsk_ctx *ctx, const char *op) {
  return dsk__fail(DSK_STATUS_UNSUPPORTED, "%s: backend %s does not serve this op", op, backend_name(ctx));
}

static void plan_fill(const dsk_ctx *ctx, dsk_plan_info *info, int op, int64_t ws) {
  size_t keep = info->struct_size;
  memset(info, 0, sizeof *info);
  info->struct_size = keep;
  info->workspace_bytes = ws;
  info->tactic.op = op;
  info->tactic.version = 1;
  info->tactic_source = DSK_TACTIC_HEURISTIC;
  snprintf(info->backend, sizeof info->backend, "%s", backend_name(ctx));
}

static dsk_status check_plan_info(const char *op, const dsk_plan_info *info) {
  if (!info) FAIL("%s_plan: info is NULL", op);
  if (info->struct_size < sizeof *info)
    FAIL("%s_plan: info->struct_size %zu < sizeof(dsk_plan_info) %zu", op, info->struct_size, sizeof *info);
  return DSK_STATUS_OK;
}

static dsk_status check_workspace(const dsk_ctx *ctx, const char *op, const char *plan, const void *ws,
                                  int64_t have, int64_t need) {
  if (have < need)
    FAIL("%s: workspace_bytes %" PRId64 " < %" PRId64 " needed (%s)", op, have, need, plan);
  if (need > 0 && !ws) FAIL("%s: workspace is NULL but %" PRId64 " bytes are needed", op, need);
  const uintptr_t a = ctx->info.is_cuda ? 16 : 4;
  if (need > 0 && misaligned(ws, a)) FAIL("%s: workspace %p is not %u-byte aligned", op, ws, (unsigned)a);
  return DSK_STATUS_OK;
}

/* ------------------------------------------------------ indexer logits */
#define OP_L "indexer_logits"

dsk_status dsk__indexer_logits_validate(const dsk_ctx *ctx, const dsk_indexer_logits_desc *d) {
  if (!ctx) FAIL(OP_L ": ctx is NULL");
  if (!d) FAIL(OP_L ": desc is NULL");
  if (d->struct_size < sizeof *d)
    FAIL(OP_L ": desc->struct_size %zu < sizeof(dsk_indexer_logits_desc) %zu (set it with sizeof)", d->struct_size,
         sizeof *d);
  if (d->T < 0) FAIL(OP_L ": T %" PRId64 " < 0", d->T);
  if (d->T > INT32_MAX) FAIL(OP_L ": T %" PRId64 " > 2147483647", d->T);
  if (d->T == 0) return DSK_STATUS_OK;
  dsk_status st = check_scoring(ctx, OP_L, d);
  if (st != DSK_STATUS_OK) return st;
  if ((st = check_f32_rows(OP_L, "out", d->out, d->T, d->ctx_width, d->out_stride_t)) != DSK_STATUS_OK) return st;
  idx_range ins[8];
  const int nin = scoring_inputs(d, ins);
  idx_range outs[2] = {range_of("out", d->out, rows_bytes(d->T, d->out_stride_t, d->ctx_width, 4)),
                       range_of("counters", d->counters, d->counters ? 2 * 8 : 0)};
  return check_overlaps(OP_L, outs, 2, ins, nin);
}

dsk_status dsk_indexer_logits(dsk_ctx *ctx, const dsk_indexer_logits_desc *d) {
  dsk_status st = dsk__indexer_logits_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  const dsk_backend *b = ctx->backend;
  if (!b->indexer_logits) return unsupported(ctx, OP_L);
  return b->indexer_logits(ctx, d, -1);
}

/* ---------------------------------------------------------------- top-k */
#define OP_K "topk"

dsk_status dsk__topk_validate(const dsk_ctx *ctx, const dsk_topk_desc *d) {
  if (!ctx) FAIL(OP_K ": ctx is NULL");
  if (!d) FAIL(OP_K ": desc is NULL");
  if (d->struct_size < sizeof *d)
    FAIL(OP_K ": desc->struct_size %zu < sizeof(dsk_topk_desc) %zu (set it with sizeof)", d->struct_size, sizeof *d);
  if (d->T < 0) FAIL(OP_K ": T %" PRId64 " < 0", d->T);
  if (d->T > INT32_MAX) FAIL(OP_K ": T %" PRId64 " > 2147483647", d->T);
  if (d->T == 0) return DSK_STATUS_OK;
  dsk_status st;
  if (d->width < 1) FAIL(OP_K ": width %" PRId64 " < 1", d->width);
  if (d->width > INT32_MAX) FAIL(OP_K ": width %" PRId64 " > 2147483647", d->width);
  if ((st = check_f32_rows(OP_K, "scores", d->scores, d->T, d->width, d->scores_stride_t)) != DSK_STATUS_OK) return st;
  if ((st = check_i32(OP_K, "lens", d->lens, 0)) != DSK_STATUS_OK) return st;
  if (d->K < 1 || d->K > DSK_TOPK_MAX_K) FAIL(OP_K ": K %" PRId64 " is not in 1..%d", d->K, DSK_TOPK_MAX_K);
  if (d->no_shortcut != 0 && d->no_shortcut != 1) FAIL(OP_K ": no_shortcut %d is not 0 or 1", d->no_shortcut);
  if (!d->out) FAIL(OP_K ": out is NULL");
  if (misaligned(d->out, 4)) FAIL(OP_K ": out %p is not 4-byte aligned (int32)", (void *)d->out);
  if (d->out_stride_t < d->K) FAIL(OP_K ": out_stride_t %" PRId64 " < K %" PRId64, d->out_stride_t, d->K);
  if (!rows_fit(d->T, d->out_stride_t, d->K))
    FAIL(OP_K ": out_stride_t %" PRId64 " with T %" PRId64 " is too large", d->out_stride_t, d->T);
  if (d->workspace_bytes < 0) FAIL(OP_K ": workspace_bytes %" PRId64 " < 0", d->workspace_bytes);
  if (misaligned(d->counters, 8)) FAIL(OP_K ": counters %p is not 8-byte aligned (int64)", (void *)d->counters);
  idx_range ins[2] = {range_of("scores", d->scores, rows_bytes(d->T, d->scores_stride_t, d->width, 4)),
                      range_of("lens", d->lens, d->lens ? d->T * 4 : 0)};
  idx_range outs[3] = {range_of("out", d->out, rows_bytes(d->T, d->out_stride_t, d->K, 4)),
                       range_of("counters", d->counters, d->counters ? 8 : 0),
                       range_of("workspace", d->workspace, d->workspace ? d->workspace_bytes : 0)};
  return check_overlaps(OP_K, outs, 3, ins, 2);
}

static dsk__topk_args topk_args(const dsk_topk_desc *d) {
  dsk__topk_args a;
  memset(&a, 0, sizeof a);
  a.stream = d->stream;
  a.T = d->T;
  a.width = d->width;
  a.K = d->K;
  a.scores = d->scores;
  a.scores_stride_t = d->scores_stride_t;
  a.lens = d->lens;
  a.ratio = 1;
  a.shortcut = !d->no_shortcut;
  a.out = d->out;
  a.out_stride_t = d->out_stride_t;
  a.workspace = d->workspace;
  a.workspace_bytes = d->workspace_bytes;
  a.counters = d->counters;
  return a;
}

static int64_t topk_ws(const dsk_ctx *ctx, const dsk_backend *b, const dsk__topk_args *a) {
  int64_t w = b->topk_workspace ? b->topk_workspace(ctx, a) : 0;
  return w > 0 ? w : 0;
}

dsk_status dsk_topk_plan(dsk_ctx *ctx, const dsk_topk_desc *d, dsk_plan_info *info) {
  dsk_status st = check_plan_info(OP_K, info);
  if (st != DSK_STATUS_OK) return st;
  if ((st = dsk__topk_validate(ctx, d)) != DSK_STATUS_OK) return st;
  const dsk_backend *b = ctx->backend;
  if (!b->topk) return unsupported(ctx, OP_K);
  int64_t ws = 0;
  if (d->T > 0) {
    dsk__topk_args a = topk_args(d);
    ws = topk_ws(ctx, b, &a);
  }
  plan_fill(ctx, info, DSK_OP_TOPK, ws);
  return DSK_STATUS_OK;
}

dsk_status dsk_topk(dsk_ctx *ctx, const dsk_topk_desc *d) {
  dsk_status st = dsk__topk_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  const dsk_backend *b = ctx->backend;
  if (!b->topk) return unsupported(ctx, OP_K);
  dsk__topk_args a = topk_args(d);
  const int64_t need = topk_ws(ctx, b, &a);
  if ((st = check_workspace(ctx, OP_K, "dsk_topk_plan", d->workspace, d->workspace_bytes, need)) != DSK_STATUS_OK)
    return st;
  return b->topk(ctx, &a);
}

/* ------------------------------------------------------ fused top-k slots */
#define OP_F "indexer_topk_slots"
#define WS_ALIGN 256

static int64_t align_up(int64_t x) { return (x + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN; }

/* The scoring part of the fused descriptor as a logits descriptor (out and
 * out_stride_t left for the caller). */
static dsk_indexer_logits_desc fused_logits(const dsk_indexer_topk_slots_desc *d) {
  dsk_indexer_logits_desc l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.stream = d->stream;
  l.T = d->T;
  l.n_heads = d->n_heads;
  l.q = d->q;
  l.q_stride_t = d->q_stride_t;
  l.q_stride_h = d->q_stride_h;
  l.q_scale = d->q_scale;
  l.q_scale_stride_t = d->q_scale_stride_t;
  l.weights = d->weights;
  l.weights_stride_t = d->weights_stride_t;
  l.req = d->req;
  l.pos = d->pos;
  l.slot_mapping = d->slot_mapping;
  l.block_table = d->block_table;
  l.ratio = d->ratio;
  l.cache = d->cache;
  l.ctx_width = d->ctx_width;
  l.counters = d->counters;
  return l;
}

static dsk_block_table fused_slot_table(const dsk_indexer_topk_slots_desc *d) {
  return d->slot_block_table.table ? d->slot_block_table : d->block_table;
}
static int64_t fused_slot_pbs(const dsk_indexer_topk_slots_desc *d) {
  return d->slot_pbs ? d->slot_pbs : d->cache.pbs;
}

/* Workspace layout: logits fp32 [T, ctx_width] at 0; then, when desc->topk
 * is NULL, the int32 [T, K] top-k at topk_off; then the top-k call's own
 * workspace at sub_off. */
typedef struct fused_layout {
  int64_t topk_off, sub_off, sub_bytes, total;
} fused_layout;

static fused_layout fused_plan(const dsk_ctx *ctx, const dsk_backend *b, const dsk_indexer_topk_slots_desc *d) {
  fused_layout L;
  L.topk_off = align_up(d->T * d->ctx_width * 4);
  int64_t end = L.topk_off + (d->topk ? 0 : align_up(d->T * d->K * 4));
  dsk__topk_args a;
  memset(&a, 0, sizeof a);
  a.T = d->T;
  a.width = d->ctx_width;
  a.K = d->K;
  a.scores_stride_t = d->ctx_width;
  a.pos = d->pos;
  a.slot_mapping = d->slot_mapping;
  a.ratio = d->ratio;
  a.shortcut = !d->no_shortcut;
  a.out_stride_t = d->topk ? d->topk_stride_t : d->K;
  L.sub_off = end;
  L.sub_bytes = topk_ws(ctx, b, &a);
  L.total = end + align_up(L.sub_bytes);
  return L;
}

dsk_status dsk__indexer_topk_slots_validate(const dsk_ctx *ctx, const dsk_indexer_topk_slots_desc *d) {
  if (!ctx) FAIL(OP_F ": ctx is NULL");
  if (!d) FAIL(OP_F ": desc is NULL");
  if (d->struct_size < sizeof *d)
    FAIL(OP_F ": desc->struct_size %zu < sizeof(dsk_indexer_topk_slots_desc) %zu (set it with sizeof)",
         d->struct_size, sizeof *d);
  if (d->T < 0) FAIL(OP_F ": T %" PRId64 " < 0", d->T);
  if (d->T > INT32_MAX) FAIL(OP_F ": T %" PRId64 " > 2147483647", d->T);
  if (d->T == 0) return DSK_STATUS_OK;
  dsk_indexer_logits_desc l = fused_logits(d);
  dsk_status st = check_scoring(ctx, OP_F, &l);
  if (st != DSK_STATUS_OK) return st;
  /* the logits live in the workspace: T * ctx_width fp32 must be addressable */
  if (d->ctx_width > (IDX_MAX_EXTENT / 4) / d->T)
    FAIL(OP_F ": T %" PRId64 " x ctx_width %" PRId64 " scores do not fit a workspace", d->T, d->ctx_width);
  if (d->K < 1 || d->K > DSK_TOPK_MAX_K) FAIL(OP_F ": K %" PRId64 " is not in 1..%d", d->K, DSK_TOPK_MAX_K);
  if (d->no_shortcut != 0 && d->no_shortcut != 1) FAIL(OP_F ": no_shortcut %d is not 0 or 1", d->no_shortcut);
  if (d->topk) {
    if (misaligned(d->topk, 4)) FAIL(OP_F ": topk %p is not 4-byte aligned (int32)", (void *)d->topk);
    if (d->topk_stride_t < d->K) FAIL(OP_F ": topk_stride_t %" PRId64 " < K %" PRId64, d->topk_stride_t, d->K);
    if (!rows_fit(d->T, d->topk_stride_t, d->K))
      FAIL(OP_F ": topk_stride_t %" PRId64 " with T %" PRId64 " is too large", d->topk_stride_t, d->T);
  }
  if (d->kind != DSK_SLOTS_TOPK && d->kind != DSK_SLOTS_C4A)
    FAIL(OP_F ": kind %d is not DSK_SLOTS_TOPK (1) or DSK_SLOTS_C4A (3)", (int)d->kind);
  if (d->slot_block_table.table &&
      (st = check_block_table(OP_F, "slot_block_table", &d->slot_block_table)) != DSK_STATUS_OK)
    return st;
  if (d->slot_pbs < 0) FAIL(OP_F ": slot_pbs %" PRId64 " < 0 (0 means cache.pbs)", d->slot_pbs);
  if (fused_slot_pbs(d) > INT32_MAX)
    FAIL(OP_F ": slot_pbs %" PRId64 " > 2147483647", fused_slot_pbs(d));
  if (!d->slots) FAIL(OP_F ": slots is NULL");
  if (misaligned(d->slots, 4)) FAIL(OP_F ": slots %p is not 4-byte aligned (int32)", (void *)d->slots);
  if (d->slots_stride_t < d->K) FAIL(OP_F ": slots_stride_t %" PRId64 " < K %" PRId64, d->slots_stride_t, d->K);
  if (!rows_fit(d->T, d->slots_stride_t, d->K))
    FAIL(OP_F ": slots_stride_t %" PRId64 " with T %" PRId64 " is too large", d->slots_stride_t, d->T);
  if ((st = check_i32(OP_F, "lens", d->lens, 0)) != DSK_STATUS_OK) return st;
  if (d->workspace_bytes < 0) FAIL(OP_F ": workspace_bytes %" PRId64 " < 0", d->workspace_bytes);

  idx_range ins[9];
  int nin = scoring_inputs(&l, ins);
  if (d->slot_block_table.table) {
    const dsk_block_table *b = &d->slot_block_table;
    ins[nin++] = range_of("slot_block_table", b->table, rows_bytes(b->rows, b->stride, b->max_blocks, 4));
  }
  idx_range outs[5] = {range_of("slots", d->slots, rows_bytes(d->T, d->slots_stride_t, d->K, 4)),
                       range_of("lens", d->lens, d->lens ? d->T * 4 : 0),
                       range_of("topk", d->topk, d->topk ? rows_bytes(d->T, d->topk_stride_t, d->K, 4) : 0),
                       range_of("counters", d->counters, d->counters ? 3 * 8 : 0),
                       range_of("workspace", d->workspace, d->workspace ? d->workspace_bytes : 0)};
  return check_overlaps(OP_F, outs, 5, ins, nin);
}

dsk_status dsk_indexer_topk_slots_plan(dsk_ctx *ctx, const dsk_indexer_topk_slots_desc *d, dsk_plan_info *info) {
  dsk_status st = check_plan_info(OP_F, info);
  if (st != DSK_STATUS_OK) return st;
  if ((st = dsk__indexer_topk_slots_validate(ctx, d)) != DSK_STATUS_OK) return st;
  const dsk_backend *b = ctx->backend;
  if (!b->indexer_logits || !b->topk || !b->slot_list_build) return unsupported(ctx, OP_F);
  plan_fill(ctx, info, DSK_OP_INDEXER_SLOTS, d->T > 0 ? fused_plan(ctx, b, d).total : 0);
  return DSK_STATUS_OK;
}

dsk_status dsk_indexer_topk_slots(dsk_ctx *ctx, const dsk_indexer_topk_slots_desc *d) {
  dsk_status st = dsk__indexer_topk_slots_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  const dsk_backend *b = ctx->backend;
  if (!b->indexer_logits || !b->topk || !b->slot_list_build) return unsupported(ctx, OP_F);
  const fused_layout L = fused_plan(ctx, b, d);
  if ((st = check_workspace(ctx, OP_F, "dsk_indexer_topk_slots_plan", d->workspace, d->workspace_bytes, L.total)) !=
      DSK_STATUS_OK)
    return st;
  uint8_t *ws = (uint8_t *)d->workspace;
  float *logits = (float *)ws;
  int32_t *topk = d->topk ? d->topk : (int32_t *)(ws + L.topk_off);
  const int64_t topk_stride = d->topk ? d->topk_stride_t : d->K;

  /* The slot-list stage, checked before anything runs. */
  dsk_slot_list_desc sd;
  memset(&sd, 0, sizeof sd);
  sd.struct_size = sizeof sd;
  sd.stream = d->stream;
  sd.kind = d->kind;
  sd.T = d->T;
  sd.req = d->req;
  sd.pos = d->pos;
  sd.slot_mapping = d->slot_mapping;
  sd.block_table = fused_slot_table(d);
  sd.pbs = fused_slot_pbs(d);
  sd.idx = topk;
  sd.idx_stride = topk_stride;
  sd.K = d->K;
  sd.out = d->slots;
  sd.out_stride = d->slots_stride_t;
  sd.lens = d->lens;
  sd.counters = d->counters ? d->counters + 2 : NULL;
  if ((st = dsk__slot_list_validate(ctx, &sd)) != DSK_STATUS_OK) return st;

  /* 1. scores */
  dsk_indexer_logits_desc l = fused_logits(d);
  l.out = logits;
  l.out_stride_t = d->ctx_width;
  if ((st = b->indexer_logits(ctx, &l, d->no_shortcut ? -1 : d->K)) != DSK_STATUS_OK) return st;

  /* 2. top-k, row lengths from pos / slot_mapping / ratio */
  dsk__topk_args a;
  memset(&a, 0, sizeof a);
  a.stream = d->stream;
  a.T = d->T;
  a.width = d->ctx_width;
  a.K = d->K;
  a.scores = logits;
  a.scores_stride_t = d->ctx_width;
  a.pos = d->pos;
  a.slot_mapping = d->slot_mapping;
  a.ratio = d->ratio;
  a.shortcut = !d->no_shortcut;
  a.out = topk;
  a.out_stride_t = topk_stride;
  a.workspace = L.sub_bytes > 0 ? (void *)(ws + L.sub_off) : NULL;
  a.workspace_bytes = L.sub_bytes;
  if ((st = b->topk(ctx, &a)) != DSK_STATUS_OK) return st;

  /* 3. slots */
  return b->slot_list_build(ctx, &sd);
}
