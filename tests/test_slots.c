/* test_slots.c - slot-list builders (spec/indices.md §1-§5, §7, §8) on the
 * CPU reference:
 *   1. hand-checked small tables for every kind (expected arrays written out
 *      by hand from the spec's rules);
 *   2. randomized cross-checks against a second implementation written here
 *      in a different shape: the block table is first expanded into a flat
 *      "request-local entry -> slot" array, SWA and C128A lists are collected
 *      position by position from the causal rules of §7, C4A compaction by
 *      rank counting;
 *   3. T = 0 no-op, dsk_op_supported;
 *   4. the bad-descriptor table: every field gives DSK_STATUS_INVALID_ARG and
 *      dsk_last_error() names it; nothing is written;
 *   5. the backend-vs-reference harness (dsk_check_slots, quick) on the
 *      DSK_TEST_DEVICE context (default cpu). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SENT ((int32_t)0x7B7B7B7B)

static tu_counts counts;

static void fill32(int32_t *p, int64_t n, int32_t v) {
  for (int64_t i = 0; i < n; i++) p[i] = v;
}

static dsk_slot_list_desc desc_init(dsk_slot_list_kind kind) {
  dsk_slot_list_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.kind = kind;
  return d;
}

/* Runs d (whose out/lens are poisoned here first) and compares with exp
 * [T, width] and exp_len [T]; the stride gaps of out must stay SENT. */
static void run_expect(dsk_ctx *ctx, const char *name, dsk_slot_list_desc d, int64_t width, const int32_t *exp,
                       const int32_t *exp_len) {
  fill32(d.out, d.T * d.out_stride, SENT);
  if (d.lens) fill32(d.lens, d.T, SENT);
  dsk_status st = dsk_slot_list_build(ctx, &d);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "%s: %s: %s", name, dsk_status_name(st), dsk_last_error());
  int bad = 0;
  for (int64_t t = 0; t < d.T; t++) {
    for (int64_t c = 0; c < d.out_stride; c++) {
      int32_t got = d.out[t * d.out_stride + c];
      int32_t want = c < width ? exp[t * width + c] : SENT;
      if (got != want && bad++ < 8)
        fprintf(stderr, "  %s: out[%lld, %lld] = %d, expected %d\n", name, (long long)t, (long long)c, got, want);
    }
    if (d.lens && d.lens[t] != exp_len[t] && bad++ < 8)
      fprintf(stderr, "  %s: lens[%lld] = %d, expected %d\n", name, (long long)t, d.lens[t], exp_len[t]);
  }
  TU_CHECK(&counts, bad == 0, "%s: %d mismatches", name, bad);
}

/* ------------------------------------------------------------ hand tables */

/* P = 4, 3 rows, max_blocks 3, stride 5. The gap columns hold page 99: a
 * builder that reads past max_blocks would produce slots 396..399.
 *   map(0, i): i 0..3 -> 8..11,  4..7 -> 0..3,   8..11 -> 20..23, i >= 12 -> -1
 *   map(1, i): i 0..3 -> 4..7,   4..7 -> -1,     8..11 -> 12..15
 *   map(2, i): i 0..3 -> 28..31, 4..7 -> 16..19, 8..11 -> -1 */
static const int32_t BT4[15] = {2, 0, 5, 99, 99, 1, -1, 3, 99, 99, 7, 4, -1, 99, 99};

static dsk_block_table bt4(void) {
  dsk_block_table b = {BT4, 5, 3, 3};
  return b;
}

static void hand_topk(dsk_ctx *ctx) {
  enum { T = 6, K = 5, IS = 6, OS = 7 };
  const int32_t req[T] = {0, 1, 2, 3, -1, 0};
  const int32_t sm[T] = {3, 9, -1, 10, 0, 4};
  const int32_t idx[T * IS] = {
      0,  5,          11,        12, -1, 1, /* */
      4,  3,          9,         -1, -7, 1, /* */
      1,  2,          3,         4,  5,  1, /* padding row */
      0,  1,          2,         3,  4,  1, /* req 3 out of range */
      0,  1,          2,         3,  4,  1, /* req -1 out of range */
      15, INT32_MAX, INT32_MIN,  7,  8,  1, /* 15/4 = 3 >= max_blocks */
  };
  const int32_t exp[T * K] = {
      8,  1,  23, -1, -1, /* */
      -1, 7,  13, -1, -1, /* */
      -1, -1, -1, -1, -1, /* */
      -1, -1, -1, -1, -1, /* */
      -1, -1, -1, -1, -1, /* */
      -1, -1, -1, 3,  20, /* */
  };
  const int32_t exp_len[T] = {3, 2, 0, 0, 0, 2};
  int32_t out[T * OS], lens[T];
  int64_t counters[2] = {100, 555};
  dsk_slot_list_desc d = desc_init(DSK_SLOTS_TOPK);
  d.T = T;
  d.req = req;
  d.slot_mapping = sm;
  d.block_table = bt4();
  d.pbs = 4;
  d.idx = idx;
  d.idx_stride = IS;
  d.K = K;
  d.out = out;
  d.out_stride = OS;
  d.lens = lens;
  d.counters = counters;
  run_expect(ctx, "hand topk", d, K, exp, exp_len);
  TU_CHECK(&counts, counters[0] == 102 && counters[1] == 555, "hand topk counters %lld %lld, expected 102 555",
           (long long)counters[0], (long long)counters[1]);

  /* width = K explicitly, lens and counters NULL: same outputs. */
  d.width = K;
  d.lens = NULL;
  d.counters = NULL;
  run_expect(ctx, "hand topk width=K no lens", d, K, exp, exp_len);

  /* int32 limit: page 33554431 * 64 + 63 = INT32_MAX is the last
   * representable slot; page 40000000 * 64 does not fit -> -1. */
  const int32_t big_bt[2] = {33554431, 40000000};
  const int32_t big_req[1] = {0}, big_sm[1] = {0};
  const int32_t big_idx[4] = {0, 63, 64, 127};
  const int32_t big_exp[4] = {2147483584, 2147483647, -1, -1};
  const int32_t big_len[1] = {2};
  int32_t big_out[4], big_lens[1];
  dsk_slot_list_desc b = desc_init(DSK_SLOTS_TOPK);
  b.T = 1;
  b.req = big_req;
  b.slot_mapping = big_sm;
  b.block_table.table = big_bt;
  b.block_table.stride = 2;
  b.block_table.rows = 1;
  b.block_table.max_blocks = 2;
  b.pbs = 64;
  b.idx = big_idx;
  b.idx_stride = 4;
  b.K = 4;
  b.out = big_out;
  b.out_stride = 4;
  b.lens = big_lens;
  run_expect(ctx, "hand topk int32 limit", b, 4, big_exp, big_len);
}

static void hand_swa(dsk_ctx *ctx) {
  enum { T = 8, W = 3, WS = 5, OS = 6 };
  const int32_t req[T] = {0, 1, 2, 0, 1, 3, 0, 0};
  const int32_t pos[T] = {0, 5, 10, 2, 9, 4, -3, 13};
  const int32_t sm[T] = {1, 1, -1, 1, 1, 1, 2, 0};
  const int32_t exp[T * WS] = {
      8,  -1, -1, -1, -1, /* pos 0: only itself */
      7,  -1, -1, -1, -1, /* req 1, pos 5: entries 3,4,5; page of 4,5 missing */
      -1, -1, -1, -1, -1, /* padding */
      8,  9,  10, -1, -1, /* pos 2: entries 0..2 */
      -1, 12, 13, -1, -1, /* req 1, pos 9: entries 7,8,9 */
      -1, -1, -1, -1, -1, /* req 3 out of range */
      -1, -1, -1, -1, -1, /* negative pos */
      23, -1, -1, -1, -1, /* pos 13: entries 11,12,13; 12, 13 past max_blocks */
  };
  const int32_t exp_len[T] = {1, 3, 0, 3, 3, 0, 0, 3};
  int32_t out[T * OS], lens[T];
  int64_t counters[1] = {0};
  dsk_slot_list_desc d = desc_init(DSK_SLOTS_SWA);
  d.T = T;
  d.req = req;
  d.pos = pos;
  d.slot_mapping = sm;
  d.block_table = bt4();
  d.pbs = 4;
  d.window = W;
  d.width = WS;
  d.out = out;
  d.out_stride = OS;
  d.lens = lens;
  d.counters = counters;
  run_expect(ctx, "hand swa W=3 width=5", d, WS, exp, exp_len);
  TU_CHECK(&counts, counters[0] == 1, "hand swa counters %lld, expected 1", (long long)counters[0]);

  /* window = width = 5 */
  const int32_t req2[2] = {0, 2}, pos2[2] = {6, 1}, sm2[2] = {0, 0};
  const int32_t exp2[10] = {10, 11, 0, 1, 2, /* entries 2..6 */ 28, 29, -1, -1, -1};
  const int32_t len2[2] = {5, 2};
  int32_t out2[10], lens2[2];
  dsk_slot_list_desc e = d;
  e.T = 2;
  e.req = req2;
  e.pos = pos2;
  e.slot_mapping = sm2;
  e.window = 5;
  e.out = out2;
  e.out_stride = 5;
  e.lens = lens2;
  e.counters = NULL;
  run_expect(ctx, "hand swa W=width=5", e, 5, exp2, len2);
}

static void hand_c4a(dsk_ctx *ctx) {
  enum { T = 5, K = 6, IS = 6, OS = 8 };
  const int32_t req[T] = {0, 2, 1, 0, 5};
  const int32_t sm[T] = {5, 6, -1, 7, 8};
  const int32_t idx[T * IS] = {
      3,  -1, 9,  12, 4,  -1, /* */
      8,  0,  5,  -1, 7,  1,  /* */
      0,  1,  2,  3,  4,  5,  /* padding */
      -1, -1, -1, -1, -1, 0,  /* */
      0,  1,  2,  3,  4,  5,  /* req 5 out of range */
  };
  const int32_t exp[T * K] = {
      11, 21, 0,  -1, -1, -1, /* 11 -1 21 -1 0 -1 compacted */
      28, 17, 19, 29, -1, -1, /* -1 28 17 -1 19 29 compacted */
      -1, -1, -1, -1, -1, -1, /* */
      8,  -1, -1, -1, -1, -1, /* */
      -1, -1, -1, -1, -1, -1, /* */
  };
  const int32_t exp_len[T] = {3, 4, 0, 1, 0};
  int32_t out[T * OS], lens[T];
  int64_t counters[1] = {10};
  dsk_slot_list_desc d = desc_init(DSK_SLOTS_C4A);
  d.T = T;
  d.req = req;
  d.slot_mapping = sm;
  d.block_table = bt4();
  d.pbs = 4;
  d.idx = idx;
  d.idx_stride = IS;
  d.K = K;
  d.out = out;
  d.out_stride = OS;
  d.lens = lens;
  d.counters = counters;
  run_expect(ctx, "hand c4a", d, K, exp, exp_len);
  TU_CHECK(&counts, counters[0] == 11, "hand c4a counters %lld, expected 11", (long long)counters[0]);
}

static void hand_c128a(dsk_ctx *ctx) {
  /* pbs 2, max_blocks 3, stride 4 (gap page 50 -> slots 100, 101).
   *   map(0, c): 0,1 -> 6,7; 2,3 -> -1; 4,5 -> 2,3; c >= 6 -> -1
   *   map(1, c): 0,1 -> 0,1; 2,3 -> 4,5; 4,5 -> 8,9; c >= 6 -> -1 */
  static const int32_t bt[8] = {3, -1, 1, 50, 0, 2, 4, 50};
  dsk_block_table b = {bt, 4, 2, 3};
  {
    enum { T = 6, WC = 5, OS = 5 };
    const int32_t req[T] = {0, 1, 1, 0, 0, 1};
    const int32_t pos[T] = {2, 3, 100, 22, 17, -5};
    const int32_t sm[T] = {0, 0, 0, -1, 0, 0};
    const int32_t exp[T * WC] = {
        -1, -1, -1, -1, -1, /* pos 2, ratio 4: n = 0 */
        0,  -1, -1, -1, -1, /* pos 3: n = 1 */
        0,  1,  4,  5,  8,  /* pos 100: n = min(25, 5) */
        -1, -1, -1, -1, -1, /* padding */
        6,  7,  -1, -1, -1, /* req 0, pos 17: n = 4, page of 2,3 missing */
        -1, -1, -1, -1, -1, /* negative pos */
    };
    const int32_t exp_len[T] = {0, 1, 5, 0, 4, 0};
    int32_t out[T * OS], lens[T];
    dsk_slot_list_desc d = desc_init(DSK_SLOTS_C128A);
    d.T = T;
    d.req = req;
    d.pos = pos;
    d.slot_mapping = sm;
    d.block_table = b;
    d.pbs = 2;
    d.ratio = 4;
    d.width = WC;
    d.out = out;
    d.out_stride = OS;
    d.lens = lens;
    run_expect(ctx, "hand c128a ratio 4", d, WC, exp, exp_len);

    /* width 8: entries 6, 7 lie past max_blocks -> -1 but count in len. */
    const int32_t req8[1] = {1}, pos8[1] = {100}, sm8[1] = {0};
    const int32_t exp8[8] = {0, 1, 4, 5, 8, 9, -1, -1};
    const int32_t len8[1] = {8};
    int32_t out8[9], lens8[1];
    dsk_slot_list_desc e = d;
    e.T = 1;
    e.req = req8;
    e.pos = pos8;
    e.slot_mapping = sm8;
    e.width = 8;
    e.out = out8;
    e.out_stride = 9;
    e.lens = lens8;
    run_expect(ctx, "hand c128a width 8", e, 8, exp8, len8);
  }
  {
    /* ratio 0 = 128 */
    enum { T = 5, WC = 5 };
    const int32_t req[T] = {1, 1, 1, 1, 1};
    const int32_t pos[T] = {126, 127, 383, 1000000, INT32_MAX};
    const int32_t sm[T] = {0, 0, 0, 0, 0};
    const int32_t exp[T * WC] = {
        -1, -1, -1, -1, -1, /* (126+1)/128 = 0 */
        0,  -1, -1, -1, -1, /* 1 */
        0,  1,  4,  -1, -1, /* 3 */
        0,  1,  4,  5,  8,  /* capped at 5 */
        0,  1,  4,  5,  8,  /* pos + 1 does not overflow */
    };
    const int32_t exp_len[T] = {0, 1, 3, 5, 5};
    int32_t out[T * WC], lens[T];
    dsk_slot_list_desc d = desc_init(DSK_SLOTS_C128A);
    d.T = T;
    d.req = req;
    d.pos = pos;
    d.slot_mapping = sm;
    d.block_table = b;
    d.pbs = 2;
    d.width = WC;
    d.out = out;
    d.out_stride = WC;
    d.lens = lens;
    run_expect(ctx, "hand c128a ratio 0", d, WC, exp, exp_len);
    d.ratio = 128;
    run_expect(ctx, "hand c128a ratio 128", d, WC, exp, exp_len);
  }
}

/* ------------------------------------------------------- oracle (§1, §7) */

/* The block table expanded into request-local entry -> slot. */
typedef struct flat_map {
  int64_t rows, len;
  int32_t *slot;
} flat_map;

static flat_map flat_make(const dsk_block_table *bt, int64_t P) {
  flat_map f = {bt->rows, bt->max_blocks * P, NULL};
  f.slot = (int32_t *)malloc((size_t)(f.rows * f.len) * sizeof(int32_t));
  for (int64_t r = 0; r < f.rows; r++)
    for (int64_t b = 0; b < bt->max_blocks; b++) {
      int32_t page = bt->table[r * bt->stride + b];
      for (int64_t j = 0; j < P; j++) {
        int64_t s = (int64_t)page * P + j; /* |page| < 2^31, P small in tests */
        f.slot[r * f.len + b * P + j] = (page < 0 || s > INT32_MAX) ? -1 : (int32_t)s;
      }
    }
  return f;
}

static int32_t flat_at(const flat_map *f, int64_t r, int64_t i) {
  return (i < 0 || i >= f->len) ? -1 : f->slot[r * f->len + i];
}

/* Expected [T, width] rows, lens, and the out-of-range req count. */
static int64_t oracle(const dsk_slot_list_desc *d, int64_t width, int32_t *exp, int32_t *exp_len) {
  flat_map f = flat_make(&d->block_table, d->pbs);
  int64_t bad = 0;
  int32_t *tmp = (int32_t *)malloc((size_t)(width + d->window + 1) * sizeof(int32_t));
  for (int64_t t = 0; t < d->T; t++) {
    int32_t *row = exp + t * width;
    for (int64_t c = 0; c < width; c++) row[c] = -1;
    exp_len[t] = 0;
    if (d->slot_mapping[t] < 0) continue; /* §8 */
    int64_t r = d->req[t];
    if (r < 0 || r >= d->block_table.rows) {
      bad++;
      continue;
    }
    if (d->kind == DSK_SLOTS_TOPK) {
      for (int64_t k = 0; k < d->K; k++) {
        row[k] = flat_at(&f, r, d->idx[t * d->idx_stride + k]);
        exp_len[t] += row[k] >= 0;
      }
    } else if (d->kind == DSK_SLOTS_SWA) {
      /* §7: the token at p uses positions p-W+1 .. p; walk back from p. */
      int64_t p = d->pos[t], n = 0;
      for (int64_t q = p; q >= 0 && q > p - d->window; q--) tmp[n++] = flat_at(&f, r, q);
      for (int64_t c = 0; c < n; c++) row[c] = tmp[n - 1 - c]; /* oldest first */
      exp_len[t] = (int32_t)n;
    } else if (d->kind == DSK_SLOTS_C4A) {
      /* each valid output goes to its rank among the valid outputs */
      const int32_t *idx = d->idx + t * d->idx_stride;
      for (int64_t k = 0; k < d->K; k++) {
        int32_t s = flat_at(&f, r, idx[k]);
        if (s < 0) continue;
        int64_t rank = 0;
        for (int64_t k2 = 0; k2 < k; k2++) rank += flat_at(&f, r, idx[k2]) >= 0;
        row[rank] = s;
        exp_len[t]++;
      }
    } else { /* C128A: entry i is complete once token (i+1)*m - 1 is in */
      int64_t m = d->ratio ? d->ratio : 128, p = d->pos[t], i = 0;
      for (; i < width && (i + 1) * m - 1 <= p; i++) row[i] = flat_at(&f, r, i);
      exp_len[t] = (int32_t)i;
    }
  }
  free(tmp);
  free(f.slot);
  return bad;
}

/* ------------------------------------------------------ randomized check */

typedef struct rcase {
  dsk_slot_list_kind kind;
  int64_t K, window, width, ratio, pbs;
  int64_t max_pos; /* SWA, C128A: positions up to this */
  int64_t T;
} rcase;

static int32_t rnd_page(tu_rng *g, int64_t P) {
  int64_t u = tu_int(g, 0, 99);
  if (u < 10) return -1;
  if (u < 12) return (int32_t)(INT32_MAX / P - tu_int(g, 0, 1)); /* around the int32 limit */
  if (u < 13) return INT32_MAX;
  return (int32_t)tu_int(g, 0, 1000000);
}

static int32_t rnd_bad_i32(tu_rng *g, int64_t rows) {
  const int32_t v[5] = {-1, (int32_t)rows, (int32_t)rows + 7, INT32_MIN, INT32_MAX};
  return v[tu_int(g, 0, 4)];
}

static void random_case(dsk_ctx *ctx, const rcase *rc, uint64_t seed) {
  tu_rng g = tu_rng_make(seed);
  const int is_idx = rc->kind == DSK_SLOTS_TOPK || rc->kind == DSK_SLOTS_C4A;
  const int64_t T = rc->T, P = rc->pbs;
  const int64_t width = is_idx ? rc->K : rc->width;
  const int64_t rows = tu_int(&g, 1, 4);
  /* request-local entries the lists can name */
  int64_t span;
  if (is_idx) span = rc->K * 2 + 64;
  else if (rc->kind == DSK_SLOTS_SWA) span = rc->max_pos + 1;
  else span = width + 8;
  int64_t cover = (span + P - 1) / P;
  int64_t max_blocks = cover - tu_int(&g, 0, cover / 8); /* sometimes short: i/P >= max_blocks */
  if (max_blocks < 1) max_blocks = 1;
  int64_t bstride = max_blocks + tu_int(&g, 0, 3);
  int32_t *table = (int32_t *)malloc((size_t)(rows * bstride) * sizeof(int32_t));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < bstride; b++)
      table[r * bstride + b] = b < max_blocks ? rnd_page(&g, P) : (int32_t)tu_int(&g, 0, 1000); /* gap: valid-looking */

  int32_t *req = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  int32_t *pos = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  int32_t *sm = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  const int64_t istride = is_idx ? rc->K + tu_int(&g, 0, 3) : 0;
  int32_t *idx = is_idx ? (int32_t *)malloc((size_t)(T * istride) * sizeof(int32_t)) : NULL;
  const int64_t m = rc->ratio ? rc->ratio : 128;
  for (int64_t t = 0; t < T; t++) {
    req[t] = tu_int(&g, 0, 99) < 8 ? rnd_bad_i32(&g, rows) : (int32_t)tu_int(&g, 0, rows - 1);
    int64_t u = tu_int(&g, 0, 99);
    sm[t] = u < 6 ? -1 : u < 9 ? INT32_MIN : (int32_t)tu_int(&g, 0, 1000000);
    u = tu_int(&g, 0, 99);
    if (u < 3) pos[t] = u == 0 ? INT32_MIN : (int32_t)-tu_int(&g, 1, 200);
    else if (u < 15) pos[t] = (int32_t)tu_int(&g, 0, rc->window + 2 > 300 ? rc->window + 2 : 300); /* short rows */
    else if (u < 25 && rc->kind == DSK_SLOTS_C128A)
      pos[t] = (int32_t)(tu_int(&g, 1, rc->max_pos / m > 1 ? rc->max_pos / m : 1) * m - tu_int(&g, 1, 2)); /* boundary */
    else pos[t] = (int32_t)tu_int(&g, 0, rc->max_pos);
    if (is_idx) {
      int64_t holes = tu_int(&g, 0, 3) * 30; /* 0, 30, 60, 90 % */
      for (int64_t k = 0; k < istride; k++) {
        int32_t v;
        int64_t h = tu_int(&g, 0, 99);
        if (h < holes) v = -1;
        else if (h < holes + 2) v = rnd_bad_i32(&g, 0);
        else v = (int32_t)tu_int(&g, 0, span + 20);
        idx[t * istride + k] = v;
      }
    }
  }

  const int64_t ostride = width + tu_int(&g, 0, 5);
  int32_t *out = (int32_t *)malloc((size_t)(T * ostride) * sizeof(int32_t));
  int32_t *lens = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  int32_t *exp = (int32_t *)malloc((size_t)(T * width) * sizeof(int32_t));
  int32_t *exp_len = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  int64_t counters[2] = {17, 33};
  const int with_lens = tu_int(&g, 0, 3) != 0, with_counters = tu_int(&g, 0, 3) != 0;

  dsk_slot_list_desc d = desc_init(rc->kind);
  d.T = T;
  d.req = req;
  d.pos = pos;
  d.slot_mapping = sm;
  d.block_table.table = table;
  d.block_table.stride = bstride;
  d.block_table.rows = rows;
  d.block_table.max_blocks = max_blocks;
  d.pbs = P;
  d.idx = idx;
  d.idx_stride = istride;
  d.K = is_idx ? rc->K : 0;
  d.window = rc->window;
  d.ratio = rc->ratio;
  d.width = is_idx ? (tu_int(&g, 0, 1) ? rc->K : 0) : rc->width;
  d.out = out;
  d.out_stride = ostride;
  d.lens = with_lens ? lens : NULL;
  d.counters = with_counters ? counters : NULL;

  int64_t bad_req = oracle(&d, width, exp, exp_len);
  char name[160];
  static const char *kn[] = {"", "topk", "swa", "c4a", "c128a"};
  snprintf(name, sizeof name, "random %s K=%lld W=%lld width=%lld ratio=%lld pbs=%lld T=%lld seed=%llu", kn[rc->kind],
           (long long)rc->K, (long long)rc->window, (long long)width, (long long)rc->ratio, (long long)P,
           (long long)T, (unsigned long long)seed);
  run_expect(ctx, name, d, width, exp, exp_len);
  if (with_counters)
    TU_CHECK(&counts, counters[0] == 17 + bad_req && counters[1] == 33, "%s: counters %lld %lld, expected %lld 33",
             name, (long long)counters[0], (long long)counters[1], (long long)(17 + bad_req));

  free(table);
  free(req);
  free(pos);
  free(sm);
  free(idx);
  free(out);
  free(lens);
  free(exp);
  free(exp_len);
}

static void random_all(dsk_ctx *ctx) {
  const rcase cases[] = {
      /* kind, K, window, width, ratio, pbs, max_pos, T */
      {DSK_SLOTS_TOPK, 2048, 0, 0, 0, 64, 0, 24},
      {DSK_SLOTS_TOPK, 2304, 0, 0, 0, 64, 0, 8}, /* wider GLM buffer */
      {DSK_SLOTS_TOPK, 7, 0, 0, 0, 1, 0, 64},
      {DSK_SLOTS_TOPK, 1, 0, 0, 0, 2, 0, 64},
      {DSK_SLOTS_TOPK, 300, 0, 0, 0, 2, 0, 32},
      {DSK_SLOTS_SWA, 0, 128, 128, 0, 64, 20000, 64},
      {DSK_SLOTS_SWA, 0, 128, 192, 0, 64, 20000, 64},
      {DSK_SLOTS_SWA, 0, 128, 256, 0, 64, 20000, 64},
      {DSK_SLOTS_SWA, 0, 256, 256, 0, 64, 20000, 64},
      {DSK_SLOTS_SWA, 0, 128, 128, 0, 1, 3000, 64},
      {DSK_SLOTS_SWA, 0, 256, 256, 0, 2, 3000, 64},
      {DSK_SLOTS_SWA, 0, 128, 128, 0, 64, 300000, 16},
      {DSK_SLOTS_SWA, 0, 1, 1, 0, 2, 500, 64},
      {DSK_SLOTS_SWA, 0, 5, 9, 0, 1, 500, 64},
      {DSK_SLOTS_C4A, 512, 0, 0, 0, 64, 0, 24},
      {DSK_SLOTS_C4A, 1024, 0, 0, 0, 64, 0, 16},
      {DSK_SLOTS_C4A, 512, 0, 0, 0, 1, 0, 16},
      {DSK_SLOTS_C4A, 1024, 0, 0, 0, 2, 0, 8},
      {DSK_SLOTS_C4A, 3, 0, 0, 0, 2, 0, 64},
      {DSK_SLOTS_C128A, 0, 0, 128, 0, 2, 1 << 20, 32},
      {DSK_SLOTS_C128A, 0, 0, 1024, 0, 2, 1 << 20, 32},
      {DSK_SLOTS_C128A, 0, 0, 8192, 0, 2, 1 << 20, 24},
      {DSK_SLOTS_C128A, 0, 0, 8192, 128, 64, 1 << 20, 16},
      {DSK_SLOTS_C128A, 0, 0, 200, 0, 1, 1 << 20, 32},
      {DSK_SLOTS_C128A, 0, 0, 4096, 4, 64, 1 << 20, 16},
      {DSK_SLOTS_C128A, 0, 0, 1, 1, 1, 100, 64},
      {DSK_SLOTS_C128A, 0, 0, 129, 3, 2, 2000, 32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (uint64_t s = 0; s < 4; s++) random_case(ctx, &cases[i], 1000 * (uint64_t)i + s + 1);
}

/* ------------------------------------------------------ T = 0, supported */

static void zero_and_supported(dsk_ctx *ctx) {
  /* T = 0 with every pointer NULL: no-op, OK. */
  dsk_slot_list_desc z = desc_init(DSK_SLOTS_SWA);
  TU_CHECK_OK(&counts, dsk_slot_list_build(ctx, &z));

  /* T = 0 on a valid descriptor: nothing written. */
  const int32_t req[1] = {0}, pos[1] = {5}, sm[1] = {0};
  int32_t out[4], lens[1] = {SENT};
  int64_t counters[1] = {9};
  fill32(out, 4, SENT);
  dsk_slot_list_desc d = desc_init(DSK_SLOTS_SWA);
  d.req = req;
  d.pos = pos;
  d.slot_mapping = sm;
  d.block_table = bt4();
  d.pbs = 4;
  d.window = 4;
  d.width = 4;
  d.out = out;
  d.out_stride = 4;
  d.lens = lens;
  d.counters = counters;
  TU_CHECK_OK(&counts, dsk_slot_list_build(ctx, &d));
  TU_CHECK(&counts, out[0] == SENT && out[3] == SENT && lens[0] == SENT && counters[0] == 9,
           "T = 0 wrote something");

  int supported = -1;
  char reason[256];
  d.T = 1;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_SLOT_LIST, &d, &supported, reason, sizeof reason));
  TU_CHECK(&counts, supported == 1, "op_supported(valid swa) = %d: %s", supported, reason);
  d.window = 5;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_SLOT_LIST, &d, &supported, reason, sizeof reason));
  TU_CHECK(&counts, supported == 0 && strstr(reason, "window"), "op_supported(window > width) = %d: %s", supported,
           reason);
  d.window = 4;
  TU_CHECK_OK(&counts, dsk_slot_list_build(ctx, &d));
  /* entries 2..5 of request 0: 10, 11, 0, 1 */
  TU_CHECK(&counts, out[0] == 10 && out[1] == 11 && out[2] == 0 && out[3] == 1 && lens[0] == 4,
           "swa T=1 pos 5 W 4: %d %d %d %d len %d", out[0], out[1], out[2], out[3], lens[0]);
}

/* --------------------------------------------------------- bad descriptors */

static int32_t g_out[64];
static int32_t g_lens[8];
static int64_t g_cnt[2];
static const int32_t g_req[8], g_pos[8], g_sm[8], g_idx[64];
static int32_t g_i32[16]; /* for misaligned pointers */
static int64_t g_i64[4];

static dsk_slot_list_desc valid_desc(dsk_slot_list_kind kind) {
  dsk_slot_list_desc d = desc_init(kind);
  d.T = 2;
  d.req = g_req;
  d.slot_mapping = g_sm;
  d.block_table = bt4();
  d.pbs = 4;
  d.out = g_out;
  d.lens = g_lens;
  d.counters = g_cnt;
  switch (kind) {
    case DSK_SLOTS_TOPK:
    case DSK_SLOTS_C4A:
      d.idx = g_idx;
      d.K = 8;
      d.idx_stride = 8;
      d.out_stride = 8;
      break;
    case DSK_SLOTS_SWA:
      d.pos = g_pos;
      d.window = 4;
      d.width = 8;
      d.out_stride = 8;
      break;
    case DSK_SLOTS_C128A:
      d.pos = g_pos;
      d.width = 8;
      d.out_stride = 8;
      break;
  }
  return d;
}

static void expect_bad(dsk_ctx *ctx, const dsk_slot_list_desc *d, const char *what, const char *needle) {
  fill32(g_out, 64, SENT);
  fill32(g_lens, 8, SENT);
  g_cnt[0] = g_cnt[1] = 5;
  dsk_clear_error();
  dsk_status st = dsk_slot_list_build(ctx, d);
  const char *err = dsk_last_error();
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "%s: got %s (%s)", what, dsk_status_name(st), err);
  TU_CHECK(&counts, strstr(err, needle) != NULL, "%s: error \"%s\" does not name \"%s\"", what, err, needle);
  TU_CHECK(&counts, strncmp(err, "slot_list", 9) == 0, "%s: error \"%s\" does not name the op", what, err);
  int touched = g_cnt[0] != 5 || g_cnt[1] != 5;
  for (int i = 0; i < 64; i++) touched |= g_out[i] != SENT;
  for (int i = 0; i < 8; i++) touched |= g_lens[i] != SENT;
  TU_CHECK(&counts, !touched, "%s: outputs written on error", what);
}

static void bad_inputs(dsk_ctx *ctx) {
  dsk_slot_list_desc d;
  const dsk_slot_list_kind kinds[4] = {DSK_SLOTS_TOPK, DSK_SLOTS_SWA, DSK_SLOTS_C4A, DSK_SLOTS_C128A};
  const char *kn[5] = {"", "topk", "swa", "c4a", "c128a"};
  char what[96];

  /* the valid bases really are valid */
  for (int k = 0; k < 4; k++) {
    d = valid_desc(kinds[k]);
    TU_CHECK_OK(&counts, dsk_slot_list_build(ctx, &d));
  }

  d = valid_desc(DSK_SLOTS_TOPK);
  {
    dsk_clear_error();
    dsk_status st = dsk_slot_list_build(NULL, &d);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "ctx"), "NULL ctx: %s %s",
             dsk_status_name(st), dsk_last_error());
    st = dsk_slot_list_build(ctx, NULL);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "desc"), "NULL desc: %s %s",
             dsk_status_name(st), dsk_last_error());
  }
  d.struct_size = sizeof d - 1;
  expect_bad(ctx, &d, "struct_size - 1", "struct_size");
  d = valid_desc(DSK_SLOTS_TOPK);
  d.struct_size = 0;
  expect_bad(ctx, &d, "struct_size 0", "struct_size");
  d = valid_desc(DSK_SLOTS_TOPK);
  d.kind = (dsk_slot_list_kind)0;
  expect_bad(ctx, &d, "kind 0", "kind 0");
  d.kind = (dsk_slot_list_kind)99;
  expect_bad(ctx, &d, "kind 99", "kind 99");
  d.kind = (dsk_slot_list_kind)-1;
  expect_bad(ctx, &d, "kind -1", "kind -1");

  for (int k = 0; k < 4; k++) {
    const dsk_slot_list_kind kind = kinds[k];
    const int is_idx = kind == DSK_SLOTS_TOPK || kind == DSK_SLOTS_C4A;
#define BAD(stmt, needle)                                                      \
  do {                                                                         \
    d = valid_desc(kind);                                                      \
    stmt;                                                                      \
    snprintf(what, sizeof what, "%s: %s", kn[kind], #stmt);                    \
    expect_bad(ctx, &d, what, needle);                                         \
    TU_CHECK(&counts, strstr(dsk_last_error(), kn[kind]) != NULL,              \
             "%s: error \"%s\" does not name the kind", what, dsk_last_error()); \
  } while (0)
    BAD(d.T = -1, "T -1");
    BAD(d.T = INT64_MIN, "T ");
    BAD(d.req = NULL, "req");
    BAD(d.slot_mapping = NULL, "slot_mapping");
    BAD(d.block_table.table = NULL, "block_table.table");
    BAD(d.out = NULL, "out");
    BAD(d.block_table.rows = 0, "block_table.rows 0");
    BAD(d.block_table.rows = -3, "block_table.rows -3");
    BAD(d.block_table.max_blocks = 0, "block_table.max_blocks 0");
    BAD(d.block_table.max_blocks = -1, "block_table.max_blocks -1");
    BAD(d.block_table.stride = 2, "block_table.stride 2");
    BAD(d.block_table.stride = -5, "block_table.stride -5");
    BAD((d.block_table.rows = 4, d.block_table.stride = INT64_MAX / 2), "block_table.stride");
    BAD(d.pbs = 0, "pbs 0");
    BAD(d.pbs = -64, "pbs -64");
    BAD(d.pbs = (int64_t)INT32_MAX + 1, "pbs 2147483648");
    BAD(d.out_stride = 7, "out_stride 7");
    BAD(d.out_stride = 0, "out_stride 0");
    BAD(d.out_stride = INT64_MAX - 3, "out_stride");
    BAD(d.req = (const int32_t *)((const char *)g_i32 + 2), "req");
    BAD(d.slot_mapping = (const int32_t *)((const char *)g_i32 + 1), "slot_mapping");
    BAD(d.block_table.table = (const int32_t *)((const char *)g_i32 + 3), "block_table.table");
    BAD(d.out = (int32_t *)((char *)g_i32 + 2), "out");
    BAD(d.lens = (int32_t *)((char *)g_i32 + 2), "lens");
    BAD(d.counters = (int64_t *)((char *)g_i64 + 4), "counters");
    if (is_idx) {
      BAD(d.idx = NULL, "idx");
      BAD(d.idx = (const int32_t *)((const char *)g_i32 + 2), "idx");
      BAD(d.K = 0, "K 0");
      BAD(d.K = -2, "K -2");
      BAD(d.K = (int64_t)INT32_MAX + 1, "K 2147483648");
      BAD(d.idx_stride = 7, "idx_stride 7");
      BAD(d.idx_stride = INT64_MAX - 1, "idx_stride");
      BAD(d.width = 4, "width 4");
      BAD(d.width = 9, "width 9");
      BAD(d.width = -1, "width -1");
    } else {
      BAD(d.pos = NULL, "pos");
      BAD(d.pos = (const int32_t *)((const char *)g_i32 + 2), "pos");
      BAD(d.width = 0, "width 0");
      BAD(d.width = -8, "width -8");
      BAD((d.width = (int64_t)INT32_MAX + 1, d.window = 1, d.out_stride = d.width), "width 2147483648");
    }
    if (kind == DSK_SLOTS_SWA) {
      BAD(d.window = 0, "window 0");
      BAD(d.window = -128, "window -128");
      BAD(d.window = 9, "window 9 > width 8");
      BAD((d.width = 256, d.window = 300, d.out_stride = 256), "window 300 > width 256");
    }
    if (kind == DSK_SLOTS_C128A) BAD(d.ratio = -1, "ratio -1");
#undef BAD
  }

  /* fields a kind does not use are ignored */
  d = valid_desc(DSK_SLOTS_TOPK);
  d.pos = NULL;
  d.window = -1;
  d.ratio = -7;
  TU_CHECK_OK(&counts, dsk_slot_list_build(ctx, &d));
  d = valid_desc(DSK_SLOTS_SWA);
  d.idx = NULL;
  d.K = -1;
  d.idx_stride = -1;
  d.ratio = -7;
  TU_CHECK_OK(&counts, dsk_slot_list_build(ctx, &d));
  d = valid_desc(DSK_SLOTS_C128A);
  d.idx = (const int32_t *)((const char *)g_i32 + 2); /* unused: not checked */
  d.window = 1000;
  TU_CHECK_OK(&counts, dsk_slot_list_build(ctx, &d));
  /* lens and counters are optional */
  d = valid_desc(DSK_SLOTS_C4A);
  d.lens = NULL;
  d.counters = NULL;
  TU_CHECK_OK(&counts, dsk_slot_list_build(ctx, &d));
}

int main(void) {
  dsk_ctx *ctx = tu_ctx("cpu");
  TU_CHECK(&counts, ctx != NULL, "cpu context");
  if (!ctx) return tu_finish("test_slots", &counts);
  double t0 = tu_now_us();
  hand_topk(ctx);
  hand_swa(ctx);
  hand_c4a(ctx);
  hand_c128a(ctx);
  random_all(ctx);
  zero_and_supported(ctx);
  bad_inputs(ctx);
  printf("test_slots: cpu-ref tests %.1f ms\n", (tu_now_us() - t0) * 1e-3);

  /* backend vs reference on the DSK_TEST_DEVICE context (cpu by default) */
  dsk_ctx *dev = tu_ctx(NULL);
  TU_CHECK(&counts, dev != NULL, "test context");
  if (dev) {
    dsk_check_opts o;
    memset(&o, 0, sizeof o);
    o.quick = 1;
    o.seed = 7;
    o.log = stdout;
    int rc = dsk_check_slots(dev, &o, &counts);
    TU_CHECK(&counts, rc == 0, "dsk_check_slots returned %d", rc);
    dsk_ctx_destroy(dev);
  }
  dsk_ctx_destroy(ctx);
  return tu_finish("test_slots", &counts);
}
