/* slot_list.c - dsk_slot_list_build: descriptor validation and dispatch for
 * the slot-list builders of spec/indices.md (§2 TOPK, §3 SWA, §4 C4A,
 * §5 C128A). The rules themselves live in the backends; the CPU reference is
 * src/backend/cpu/ref_slots.c.
 *
 * Validation rules (api-conventions.md §2-3), checked in this order:
 *   ctx, desc non-NULL; desc->struct_size >= sizeof(dsk_slot_list_desc);
 *   kind is one of DSK_SLOTS_*; T >= 0. T == 0 is a no-op that returns OK
 *   without looking at the other fields (no row is read or written).
 *   Then: req, slot_mapping, block_table.table and out non-NULL; pos for SWA
 *   and C128A; idx for TOPK and C4A (fields a kind does not use are ignored);
 *   block_table.rows >= 1, max_blocks >= 1, stride >= max_blocks;
 *   pbs in [1, INT32_MAX] (slots are int32);
 *   TOPK/C4A: K in [1, INT32_MAX], idx_stride >= K, width 0 (= K) or K;
 *   SWA: width in [1, INT32_MAX], window in [1, width];
 *   C128A: width in [1, INT32_MAX], ratio 0 (= 128) or >= 1;
 *   out_stride >= width; the row extents (T-1)*stride + width of out and idx
 *   and rows*stride of the block table fit in int64_t.
 *   Alignment: the int32 pointers must be 4-byte aligned and counters 8-byte
 *   aligned. This is required on every backend (a CUDA kernel needs it; on
 *   the CPU a misaligned int32_t pointer is already undefined behaviour), so
 *   both backends accept exactly the same descriptors.
 */
#include <stdint.h>

#include "ops.h"

static const char *kind_name(dsk_slot_list_kind k) {
  switch (k) {
    case DSK_SLOTS_TOPK: return "topk";
    case DSK_SLOTS_SWA: return "swa";
    case DSK_SLOTS_C4A: return "c4a";
    case DSK_SLOTS_C128A: return "c128a";
  }
  return NULL;
}

static int misaligned(const void *p, uintptr_t a) { return p && ((uintptr_t)p % a) != 0; }

/* Does (n - 1) * stride + width fit in int64_t? (n >= 1, stride >= width >= 1) */
static int extent_fits(int64_t n, int64_t stride, int64_t width) {
  return (n - 1) <= (INT64_MAX - width) / stride;
}

#define FAIL(...) return dsk__fail(DSK_STATUS_INVALID_ARG, __VA_ARGS__)

dsk_status dsk__slot_list_validate(const dsk_ctx *ctx, const dsk_slot_list_desc *d) {
  if (!ctx) FAIL("slot_list: ctx is NULL");
  if (!d) FAIL("slot_list: desc is NULL");
  if (d->struct_size < sizeof *d)
    FAIL("slot_list: desc->struct_size %zu < sizeof(dsk_slot_list_desc) %zu (set it with sizeof)", d->struct_size,
         sizeof *d);
  const char *kn = kind_name(d->kind);
  if (!kn) FAIL("slot_list: kind %d is unknown (1 TOPK, 2 SWA, 3 C4A, 4 C128A)", (int)d->kind);
  if (d->T < 0) FAIL("slot_list(%s): T %lld < 0", kn, (long long)d->T);
  if (d->T == 0) return DSK_STATUS_OK;

  const int uses_idx = d->kind == DSK_SLOTS_TOPK || d->kind == DSK_SLOTS_C4A;
  const int uses_pos = d->kind == DSK_SLOTS_SWA || d->kind == DSK_SLOTS_C128A;

  /* Required pointers. */
  if (!d->req) FAIL("slot_list(%s): req is NULL", kn);
  if (uses_pos && !d->pos) FAIL("slot_list(%s): pos is NULL (required by this kind)", kn);
  if (!d->slot_mapping) FAIL("slot_list(%s): slot_mapping is NULL", kn);
  if (!d->block_table.table) FAIL("slot_list(%s): block_table.table is NULL", kn);
  if (uses_idx && !d->idx) FAIL("slot_list(%s): idx is NULL (required by this kind)", kn);
  if (!d->out) FAIL("slot_list(%s): out is NULL", kn);

  /* Block table and page size. */
  const dsk_block_table *bt = &d->block_table;
  if (bt->rows < 1) FAIL("slot_list(%s): block_table.rows %lld < 1", kn, (long long)bt->rows);
  if (bt->max_blocks < 1) FAIL("slot_list(%s): block_table.max_blocks %lld < 1", kn, (long long)bt->max_blocks);
  if (bt->stride < bt->max_blocks)
    FAIL("slot_list(%s): block_table.stride %lld < block_table.max_blocks %lld", kn, (long long)bt->stride,
         (long long)bt->max_blocks);
  if (!extent_fits(bt->rows, bt->stride, bt->max_blocks))
    FAIL("slot_list(%s): block_table.rows %lld x block_table.stride %lld overflows int64", kn, (long long)bt->rows,
         (long long)bt->stride);
  if (d->pbs < 1) FAIL("slot_list(%s): pbs %lld < 1", kn, (long long)d->pbs);
  /* slots are int32: a larger page size cannot address anything new, and the
   * cap keeps page * pbs (page < 2^31) inside int64 on every backend. */
  if (d->pbs > INT32_MAX) FAIL("slot_list(%s): pbs %lld > 2147483647", kn, (long long)d->pbs);

  /* Widths. */
  int64_t width = 0;
  switch (d->kind) {
    case DSK_SLOTS_TOPK:
    case DSK_SLOTS_C4A:
      if (d->K < 1) FAIL("slot_list(%s): K %lld < 1", kn, (long long)d->K);
      if (d->K > INT32_MAX) FAIL("slot_list(%s): K %lld > 2147483647", kn, (long long)d->K);
      if (d->idx_stride < d->K)
        FAIL("slot_list(%s): idx_stride %lld < K %lld", kn, (long long)d->idx_stride, (long long)d->K);
      if (!extent_fits(d->T, d->idx_stride, d->K))
        FAIL("slot_list(%s): T %lld x idx_stride %lld overflows int64", kn, (long long)d->T,
             (long long)d->idx_stride);
      if (d->width != 0 && d->width != d->K)
        FAIL("slot_list(%s): width %lld must be 0 or K %lld", kn, (long long)d->width, (long long)d->K);
      width = d->K;
      break;
    case DSK_SLOTS_SWA:
      if (d->width < 1) FAIL("slot_list(swa): width %lld < 1", (long long)d->width);
      if (d->width > INT32_MAX) FAIL("slot_list(swa): width %lld > 2147483647", (long long)d->width);
      if (d->window < 1) FAIL("slot_list(swa): window %lld < 1", (long long)d->window);
      if (d->window > d->width)
        FAIL("slot_list(swa): window %lld > width %lld", (long long)d->window, (long long)d->width);
      width = d->width;
      break;
    case DSK_SLOTS_C128A:
      if (d->width < 1) FAIL("slot_list(c128a): width %lld < 1", (long long)d->width);
      if (d->width > INT32_MAX) FAIL("slot_list(c128a): width %lld > 2147483647", (long long)d->width);
      if (d->ratio < 0) FAIL("slot_list(c128a): ratio %lld < 0 (0 means 128)", (long long)d->ratio);
      width = d->width;
      break;
  }
  if (d->out_stride < width)
    FAIL("slot_list(%s): out_stride %lld < width %lld", kn, (long long)d->out_stride, (long long)width);
  if (!extent_fits(d->T, d->out_stride, width))
    FAIL("slot_list(%s): T %lld x out_stride %lld overflows int64", kn, (long long)d->T, (long long)d->out_stride);

  /* Alignment (every backend; see the header comment). */
  struct {
    const void *p;
    const char *name;
    uintptr_t a;
  } ptrs[] = {
      {d->req, "req", 4},
      {uses_pos ? (const void *)d->pos : NULL, "pos", 4},
      {d->slot_mapping, "slot_mapping", 4},
      {bt->table, "block_table.table", 4},
      {uses_idx ? (const void *)d->idx : NULL, "idx", 4},
      {d->out, "out", 4},
      {d->lens, "lens", 4},
      {d->counters, "counters", 8},
  };
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
    if (misaligned(ptrs[i].p, ptrs[i].a))
      FAIL("slot_list(%s): %s %p is not %u-byte aligned", kn, ptrs[i].name, ptrs[i].p, (unsigned)ptrs[i].a);
  return DSK_STATUS_OK;
}

dsk_status dsk_slot_list_build(dsk_ctx *ctx, const dsk_slot_list_desc *d) {
  dsk_status st = dsk__slot_list_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  if (!ctx->backend || !ctx->backend->slot_list_build)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "slot_list(%s): backend %s does not serve slot_list", kind_name(d->kind),
                     ctx->backend ? ctx->backend->name : "(none)");
  return ctx->backend->slot_list_build(ctx, d);
}
