/* ref_slots.c - cpu-ref slot-list builders (spec/indices.md §1-§5, §8).
 *
 * The descriptor was validated by src/ops/slot_list.c (T >= 1 here). Rules,
 * per row t (all arithmetic in int64):
 *
 *   map(r, i, P) = bt[r, i / P] * P + i % P   if i >= 0, i / P < max_blocks,
 *                                               bt[r, i / P] >= 0 and the
 *                                               result <= INT32_MAX
 *                = -1                          otherwise
 *   (the last clause is dsk's: a slot that does not fit int32 cannot be
 *   written, so it becomes "no entry"; it is not counted.)
 *
 *   Bad data is never an error (api-conventions.md §3), and rows are decided
 *   in this order:
 *   1. slot_mapping[t] < 0: padding row (§8): all -1, len 0. Not counted,
 *      whatever req[t] holds (padding rows of a CUDA graph carry junk).
 *   2. req[t] outside [0, rows): all -1, len 0, counters[0] += 1.
 *   3. the kind's rule:
 *      TOPK  out[t, k] = map(req, idx[t, k], pbs), k < K;
 *            len = number of non-negative outputs.
 *      SWA   pos < 0: len 0, all -1. Else start = max(pos - W + 1, 0),
 *            len = min(pos + 1, W), col c < len: map(req, start + c, pbs)
 *            (oldest first), -1 up to width. len counts window positions,
 *            including ones whose page is missing (those columns are -1).
 *      C4A   map every idx[t, k]; the non-negative results are written to
 *            the front in their original order, -1 after; len = their count.
 *      C128A n = min(max(pos + 1, 0) / ratio, width) (ratio 0 = 128);
 *            col c < n: map(req, c, pbs), -1 up to width; len = n.
 *   Only columns [0, width) of each row and lens[0, T) are written: stride
 *   gaps are never touched. lens and counters are optional.
 */
#include <stdint.h>

#include "ref.h"

static int32_t map_entry(const dsk_block_table *bt, int64_t r, int64_t i, int64_t P) {
  if (i < 0) return -1;
  const int64_t b = i / P;
  if (b >= bt->max_blocks) return -1;
  const int64_t page = bt->table[r * bt->stride + b];
  if (page < 0) return -1;
  const int64_t j = i % P;
  if (page > (INT32_MAX - j) / P) return -1; /* page * P + j > INT32_MAX */
  return (int32_t)(page * P + j);
}

static void fill_neg(int32_t *row, int64_t from, int64_t width) {
  for (int64_t c = from; c < width; c++) row[c] = -1;
}

dsk_status dsk__ref_slot_list_build(dsk_ctx *ctx, const dsk_slot_list_desc *d) {
  (void)ctx;
  const dsk_block_table *bt = &d->block_table;
  const int64_t P = d->pbs;
  const int64_t width = (d->kind == DSK_SLOTS_TOPK || d->kind == DSK_SLOTS_C4A) ? d->K : d->width;
  const int64_t ratio = d->ratio == 0 ? 128 : d->ratio;
  int64_t bad_req = 0;

  for (int64_t t = 0; t < d->T; t++) {
    int32_t *row = d->out + t * d->out_stride;
    int64_t len = 0;

    if (d->slot_mapping[t] < 0) { /* padding row */
      fill_neg(row, 0, width);
      if (d->lens) d->lens[t] = 0;
      continue;
    }
    const int64_t r = d->req[t];
    if (r < 0 || r >= bt->rows) {
      bad_req++;
      fill_neg(row, 0, width);
      if (d->lens) d->lens[t] = 0;
      continue;
    }

    switch (d->kind) {
      case DSK_SLOTS_TOPK: {
        const int32_t *idx = d->idx + t * d->idx_stride;
        for (int64_t k = 0; k < width; k++) {
          row[k] = map_entry(bt, r, idx[k], P);
          if (row[k] >= 0) len++;
        }
        break;
      }
      case DSK_SLOTS_SWA: {
        const int64_t pos = d->pos[t];
        if (pos >= 0) {
          const int64_t W = d->window;
          const int64_t start = pos - W + 1 > 0 ? pos - W + 1 : 0;
          len = pos + 1 < W ? pos + 1 : W;
          for (int64_t c = 0; c < len; c++) row[c] = map_entry(bt, r, start + c, P);
        }
        fill_neg(row, len, width);
        break;
      }
      case DSK_SLOTS_C4A: {
        const int32_t *idx = d->idx + t * d->idx_stride;
        for (int64_t k = 0; k < width; k++) {
          const int32_t s = map_entry(bt, r, idx[k], P);
          if (s >= 0) row[len++] = s;
        }
        fill_neg(row, len, width);
        break;
      }
      case DSK_SLOTS_C128A: {
        const int64_t pos = d->pos[t];
        int64_t n = pos + 1 > 0 ? (pos + 1) / ratio : 0;
        if (n > width) n = width;
        for (int64_t c = 0; c < n; c++) row[c] = map_entry(bt, r, c, P);
        fill_neg(row, n, width);
        len = n;
        break;
      }
    }
    if (d->lens) d->lens[t] = (int32_t)len;
  }
  if (d->counters && bad_req) d->counters[0] += bad_req;
  return DSK_STATUS_OK;
}
