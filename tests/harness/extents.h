/* extents.h - helpers of the extents tests (tests/test_extents*.c): the
 * items a row-strided layout spans, device buffers allocated to exactly
 * that, poisoned and compared, and edge / wild field values. Each test
 * sets `ctx` (its context) before the first call. */
#ifndef DSK_TESTS_EXTENTS_H
#define DSK_TESTS_EXTENTS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsk.h"
#include "testutil.h"

static dsk_ctx *ctx;

#define BIG_ITEMS ((int64_t)4 << 20)

/* Items spanned by T rows of n items at stride s; -1 when the layout is
 * not a valid one (T > 0 with s < n, a negative count), -3 when its last
 * item's index overflows int64 (no buffer can hold it: the op must reject
 * it), -2 when it is representable but exceeds BIG_ITEMS (valid with a
 * buffer that large, which this test does not allocate: not called). 0 rows
 * span 0 items. */
#define SPAN_BAD (-1)
#define SPAN_BIG (-2)
#define SPAN_OVERFLOW (-3)
static inline int64_t span(int64_t T, int64_t s, int64_t n) {
  if (T < 0 || n < 0) return SPAN_BAD;
  if (T == 0 || n == 0) return 0;
  if (s < n) return SPAN_BAD;
  if (T - 1 > (INT64_MAX - n) / s) return SPAN_OVERFLOW;
  const int64_t v = (T - 1) * s + n;
  return v > BIG_ITEMS ? SPAN_BIG : v;
}

typedef struct buf {
  void *d;      /* device (or host) allocation, NULL when size 0 */
  size_t bytes; /* its size */
  uint8_t *shadow; /* host copy of the poisoned content (outputs) */
} buf;

static inline void *dev_alloc(buf *b, int64_t items, size_t item_bytes) {
  memset(b, 0, sizeof *b);
  if (items <= 0) items = 1; /* a 1-item buffer for an empty or invalid extent */
  b->bytes = (size_t)items * item_bytes;
  if (dsk_mem_alloc(ctx, &b->d, b->bytes) != DSK_STATUS_OK) {
    b->d = NULL;
    return NULL;
  }
  return b->d;
}
static inline void dev_put(buf *b, const void *host) { dsk_mem_upload(ctx, b->d, host, b->bytes); }
static inline void dev_poison(buf *b, tu_rng *rng) {
  b->shadow = (uint8_t *)malloc(b->bytes);
  for (size_t i = 0; i < b->bytes; i++) b->shadow[i] = (uint8_t)tu_int(rng, 0, 255);
  dev_put(b, b->shadow);
}
/* 1 when the device content still equals the poison */
static inline int dev_unchanged(const buf *b) {
  uint8_t *now = (uint8_t *)malloc(b->bytes);
  dsk_mem_download(ctx, now, b->d, b->bytes);
  dsk_ctx_synchronize(ctx, NULL);
  const int same = memcmp(now, b->shadow, b->bytes) == 0;
  free(now);
  return same;
}
static inline void dev_release(buf *b) {
  if (b->d) dsk_mem_free(ctx, b->d);
  free(b->shadow);
  memset(b, 0, sizeof *b);
}

/* An edge or wild value for a field whose sane value is v. */
static inline int64_t wild(tu_rng *rng, int64_t v) {
  switch (tu_int(rng, 0, 9)) {
    case 0: return -1;
    case 1: return 0;
    case 2: return v > INT64_MIN ? v - 1 : v;
    case 3: return v < INT64_MAX ? v + 1 : v;
    case 4: return v > INT64_MAX / 4 || v < INT64_MIN / 4 ? v : 2 * v + 3;
    case 5: return INT32_MAX;
    case 6: return (int64_t)INT32_MAX + 1;
    case 7: return INT64_MAX;
    case 8: return INT64_MIN;
    default: return tu_int(rng, -5, 300);
  }
}

/* How many fields of a case's descriptor get an edge or wild value:
 * 1 or 2 in a third of the cases and in every fifth, else 0. */
static inline int mutation_count(tu_rng *rng, int iter) {
  if (!(tu_int(rng, 0, 2) == 0 || iter % 5 == 0)) return 0;
  return tu_int(rng, 1, 2);
}

static inline int32_t *rand_i32(tu_rng *rng, int64_t n, int lo, int hi) {
  int32_t *a = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < (n > 0 ? n : 1); i++) a[i] = tu_int(rng, lo, hi);
  return a;
}

/* Items of a [T, H, row] tensor at strides (st, sh): the rule of
 * sparse-decode.md (sh >= row, st >= (H-1) sh + row), SPAN_* otherwise. */
static inline int64_t span3(int64_t T, int64_t H, int64_t row, int64_t st, int64_t sh) {
  if (T < 0 || H < 1) return SPAN_BAD;
  if (T == 0) return 0;
  if (sh < row || st < 1) return SPAN_BAD;
  if (H - 1 > (INT64_MAX - row) / sh) return SPAN_OVERFLOW;
  const int64_t need = (H - 1) * sh + row;
  if (st < need) return SPAN_BAD;
  if (T - 1 > (INT64_MAX - need) / st) return SPAN_OVERFLOW;
  const int64_t v = (T - 1) * st + need;
  return v > BIG_ITEMS ? SPAN_BIG : v;
}
/* Items of lse [T, H] at (st, sh): one-to-one in either order. */
static inline int64_t span_lse(int64_t T, int64_t H, int64_t st, int64_t sh) {
  if (T < 0 || H < 1) return SPAN_BAD;
  if (T == 0) return 0;
  if (st < 1 || sh < 1) return SPAN_BAD;
  if (H - 1 > (INT64_MAX - 1) / sh || T - 1 > (INT64_MAX - 1) / st) return SPAN_OVERFLOW;
  if (T > 1 && H > 1 && !(st >= (H - 1) * sh + 1 || sh >= (T - 1) * st + 1)) return SPAN_BAD;
  if ((T - 1) * st > INT64_MAX - (H - 1) * sh - 1) return SPAN_OVERFLOW;
  const int64_t v = (T - 1) * st + (H - 1) * sh + 1;
  return v > BIG_ITEMS ? SPAN_BIG : v;
}
static inline int bad_span(int64_t v) { return v == SPAN_BAD || v == SPAN_OVERFLOW; }

#endif
