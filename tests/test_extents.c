/* test_extents.c - random descriptors for dsk_slot_list_build and dsk_topk,
 * each with its buffers allocated to exactly the extents the descriptor
 * implies (api-conventions.md: a row-strided buffer of T rows of n items at
 * stride s spans (T - 1) * s + n items), so that under AddressSanitizer
 * (the CI's sanitizer build; DSK_TEST_DEVICE=cpu) any read or write outside
 * them is reported. Two thirds of the descriptors start valid; the rest,
 * and a share of the valid ones, get one or two fields set to an edge or a
 * wild value (negative, zero, stride below width, past int32, huge). For
 * every call:
 *  - an error status comes with a message (dsk_last_error non-empty) and
 *    leaves every output byte as it was (poisoned);
 *  - an OK status on a descriptor whose implied extents are negative (rows
 *    > 0 with a stride below the row's width, a negative count) is a
 *    validation gap and fails the test;
 *  - a descriptor whose extent overflows int64 is passed with 1-item
 *    buffers and must be rejected; one whose extents are representable but
 *    above 4 Mi items (valid with buffers that large) is not called.
 * Data are random: indices in and around the table's range, -1 and
 * negative ones, lengths below 0 and past the width, NaN and inf scores.
 * Runs on DSK_TEST_DEVICE (default cpu; on a GPU, under compute-sanitizer
 * memcheck, the same extents are checked at allocation granularity). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static tu_counts counts;
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
static int64_t span(int64_t T, int64_t s, int64_t n) {
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

static void *dev_alloc(buf *b, int64_t items, size_t item_bytes) {
  memset(b, 0, sizeof *b);
  if (items <= 0) items = 1; /* a 1-item buffer for an empty or invalid extent */
  b->bytes = (size_t)items * item_bytes;
  if (dsk_mem_alloc(ctx, &b->d, b->bytes) != DSK_STATUS_OK) {
    b->d = NULL;
    return NULL;
  }
  return b->d;
}
static void dev_put(buf *b, const void *host) { dsk_mem_upload(ctx, b->d, host, b->bytes); }
static void dev_poison(buf *b, tu_rng *rng) {
  b->shadow = (uint8_t *)malloc(b->bytes);
  for (size_t i = 0; i < b->bytes; i++) b->shadow[i] = (uint8_t)tu_int(rng, 0, 255);
  dev_put(b, b->shadow);
}
/* 1 when the device content still equals the poison */
static int dev_unchanged(const buf *b) {
  uint8_t *now = (uint8_t *)malloc(b->bytes);
  dsk_mem_download(ctx, now, b->d, b->bytes);
  dsk_ctx_synchronize(ctx, NULL);
  const int same = memcmp(now, b->shadow, b->bytes) == 0;
  free(now);
  return same;
}
static void dev_release(buf *b) {
  if (b->d) dsk_mem_free(ctx, b->d);
  free(b->shadow);
  memset(b, 0, sizeof *b);
}

/* An edge or wild value for a field whose sane value is v. */
static int64_t wild(tu_rng *rng, int64_t v) {
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

static int32_t *rand_i32(tu_rng *rng, int64_t n, int lo, int hi) {
  int32_t *a = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < (n > 0 ? n : 1); i++) a[i] = tu_int(rng, lo, hi);
  return a;
}

/* ------------------------------------------------------------ slot lists */
static void slot_case(tu_rng *rng, int iter, int *ok_calls, int *err_calls, int *skipped) {
  static const dsk_slot_list_kind kinds[] = {DSK_SLOTS_TOPK, DSK_SLOTS_SWA, DSK_SLOTS_C4A, DSK_SLOTS_C128A};
  dsk_slot_list_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.kind = kinds[tu_int(rng, 0, 3)];
  const int listy = d.kind == DSK_SLOTS_TOPK || d.kind == DSK_SLOTS_C4A;
  d.T = tu_int(rng, 0, 6);
  d.pbs = (int64_t[]){1, 7, 64}[tu_int(rng, 0, 2)];
  d.block_table.rows = tu_int(rng, 1, 4);
  d.block_table.max_blocks = tu_int(rng, 1, 20);
  d.block_table.stride = d.block_table.max_blocks + tu_int(rng, 0, 3);
  if (listy) {
    d.K = tu_int(rng, 1, 300);
    d.idx_stride = d.K + tu_int(rng, 0, 3);
    d.width = tu_int(rng, 0, 1) ? d.K : 0;
  } else {
    d.width = tu_int(rng, 1, 300);
    d.window = tu_int(rng, 1, (int)d.width);
    d.ratio = (int64_t[]){0, 4, 128}[tu_int(rng, 0, 2)];
  }
  const int64_t w = listy ? d.K : d.width;
  d.out_stride = w + tu_int(rng, 0, 3);
  const int with_lens = tu_int(rng, 0, 1), with_cnt = tu_int(rng, 0, 1);
  /* mutations */
  int mutated = 0;
  if (tu_int(rng, 0, 2) == 0 || iter % 5 == 0) {
    const int n = tu_int(rng, 1, 2);
    for (int m = 0; m < n; m++) {
      mutated = 1;
      switch (tu_int(rng, 0, 11)) {
        case 0: d.T = wild(rng, d.T); break;
        case 1: d.K = wild(rng, d.K); break;
        case 2: d.idx_stride = wild(rng, d.idx_stride); break;
        case 3: d.width = wild(rng, d.width); break;
        case 4: d.out_stride = wild(rng, d.out_stride); break;
        case 5: d.pbs = wild(rng, d.pbs); break;
        case 6: d.block_table.rows = wild(rng, d.block_table.rows); break;
        case 7: d.block_table.max_blocks = wild(rng, d.block_table.max_blocks); break;
        case 8: d.block_table.stride = wild(rng, d.block_table.stride); break;
        case 9: d.window = wild(rng, d.window); break;
        case 10: d.ratio = wild(rng, d.ratio); break;
        default: d.kind = (dsk_slot_list_kind)tu_int(rng, -1, 6); break;
      }
    }
  }
  /* the extents this descriptor implies (the kind as given: an unknown
   * kind must be rejected whatever it implies) */
  const int klisty = d.kind == DSK_SLOTS_TOPK || d.kind == DSK_SLOTS_C4A;
  const int kknown = klisty || d.kind == DSK_SLOTS_SWA || d.kind == DSK_SLOTS_C128A;
  const int64_t ow = klisty ? d.K : d.width;
  const int64_t n_idx = klisty ? span(d.T, d.idx_stride, d.K) : 0;
  const int64_t n_out = span(d.T, d.out_stride, ow);
  const int64_t n_bt = span(d.block_table.rows, d.block_table.stride, d.block_table.max_blocks);
  const int64_t n_T = d.T < 0 ? SPAN_BAD : d.T > BIG_ITEMS ? SPAN_BIG : d.T;
  const int invalid = !kknown || n_idx == SPAN_BAD || n_out == SPAN_BAD || n_bt == SPAN_BAD || n_T == SPAN_BAD ||
                      n_idx == SPAN_OVERFLOW || n_out == SPAN_OVERFLOW || n_bt == SPAN_OVERFLOW ||
                      (klisty && d.K < 1) || (!klisty && d.width < 1) || d.pbs < 1 || d.block_table.rows < 1;
  if (!invalid && (n_idx == SPAN_BIG || n_out == SPAN_BIG || n_bt == SPAN_BIG || n_T == SPAN_BIG)) {
    (*skipped)++;
    return;
  }
  /* buffers: exact extents, 1 item where the extent is invalid or huge */
  buf breq, bpos, bsm, bbt, bidx, bout, blens, bcnt;
  const int64_t T1 = n_T > 0 ? n_T : 1;
  int32_t *h_req = rand_i32(rng, T1, -1, (int)(d.block_table.rows > 0 && d.block_table.rows < 10 ? d.block_table.rows : 4));
  int32_t *h_pos = rand_i32(rng, T1, -3, 40000);
  int32_t *h_sm = rand_i32(rng, T1, -1, 50);
  const int64_t nbt = n_bt > 0 ? n_bt : 1;
  int32_t *h_bt = rand_i32(rng, nbt, -1, 3000);
  const int64_t nidx = n_idx > 0 ? n_idx : 1;
  int32_t *h_idx = rand_i32(rng, nidx, -3, 2000);
  dev_alloc(&breq, n_T, 4);
  dev_alloc(&bpos, n_T, 4);
  dev_alloc(&bsm, n_T, 4);
  dev_alloc(&bbt, n_bt, 4);
  dev_alloc(&bidx, n_idx, 4);
  dev_alloc(&bout, n_out, 4);
  dev_alloc(&blens, n_T, 4);
  dev_alloc(&bcnt, 1, 8);
  dev_put(&breq, h_req);
  dev_put(&bpos, h_pos);
  dev_put(&bsm, h_sm);
  dev_put(&bbt, h_bt);
  dev_put(&bidx, h_idx);
  dev_poison(&bout, rng);
  dev_poison(&blens, rng);
  int64_t zero = 0;
  dev_put(&bcnt, &zero);
  bcnt.shadow = (uint8_t *)calloc(1, 8);
  d.req = (const int32_t *)breq.d;
  d.pos = klisty && tu_int(rng, 0, 1) ? NULL : (const int32_t *)bpos.d;
  d.slot_mapping = (const int32_t *)bsm.d;
  d.block_table.table = (const int32_t *)bbt.d;
  d.idx = klisty ? (const int32_t *)bidx.d : NULL;
  d.out = (int32_t *)bout.d;
  d.lens = with_lens ? (int32_t *)blens.d : NULL;
  d.counters = with_cnt ? (int64_t *)bcnt.d : NULL;

  dsk_clear_error();
  const dsk_status st = dsk_slot_list_build(ctx, &d);
  dsk_ctx_synchronize(ctx, NULL);
  if (st == DSK_STATUS_OK) {
    (*ok_calls)++;
    TU_CHECK(&counts, !invalid || d.T == 0,
             "slots #%d (kind %d, T %lld, K %lld, width %lld, strides %lld/%lld, bt %lld x %lld/%lld, pbs %lld%s): "
             "accepted, but its extents are invalid",
             iter, (int)d.kind, (long long)d.T, (long long)d.K, (long long)d.width, (long long)d.idx_stride,
             (long long)d.out_stride, (long long)d.block_table.rows, (long long)d.block_table.max_blocks,
             (long long)d.block_table.stride, (long long)d.pbs, mutated ? ", mutated" : "");
  } else {
    (*err_calls)++;
    TU_CHECK(&counts, dsk_last_error()[0] != 0, "slots #%d: %s without a message", iter, dsk_status_name(st));
    TU_CHECK(&counts, dev_unchanged(&bout) && dev_unchanged(&blens) && dev_unchanged(&bcnt),
             "slots #%d: %s (%s) but an output was written", iter, dsk_status_name(st), dsk_last_error());
  }
  free(h_req);
  free(h_pos);
  free(h_sm);
  free(h_bt);
  free(h_idx);
  dev_release(&breq);
  dev_release(&bpos);
  dev_release(&bsm);
  dev_release(&bbt);
  dev_release(&bidx);
  dev_release(&bout);
  dev_release(&blens);
  dev_release(&bcnt);
}

/* ------------------------------------------------------------------ top-k */
static void topk_case(tu_rng *rng, int iter, int *ok_calls, int *err_calls, int *skipped) {
  dsk_topk_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = tu_int(rng, 0, 4);
  d.width = tu_int(rng, 0, 3) == 0 ? tu_int(rng, 4097, 9000) : tu_int(rng, 1, 600);
  d.scores_stride_t = d.width + tu_int(rng, 0, 5);
  d.K = tu_int(rng, 0, 4) == 0 ? tu_int(rng, 1, DSK_TOPK_MAX_K) : tu_int(rng, 1, 300);
  d.out_stride_t = d.K + tu_int(rng, 0, 3);
  d.no_shortcut = tu_int(rng, 0, 1);
  const int with_lens = tu_int(rng, 0, 1), with_cnt = tu_int(rng, 0, 1);
  int mutated = 0;
  if (tu_int(rng, 0, 2) == 0 || iter % 5 == 0) {
    const int n = tu_int(rng, 1, 2);
    for (int m = 0; m < n; m++) {
      mutated = 1;
      switch (tu_int(rng, 0, 5)) {
        case 0: d.T = wild(rng, d.T); break;
        case 1: d.width = wild(rng, d.width); break;
        case 2: d.scores_stride_t = wild(rng, d.scores_stride_t); break;
        case 3: d.K = wild(rng, d.K); break;
        case 4: d.out_stride_t = wild(rng, d.out_stride_t); break;
        default: d.no_shortcut = (int)wild(rng, 1); break;
      }
    }
  }
  const int64_t n_T = d.T < 0 ? SPAN_BAD : d.T > BIG_ITEMS ? SPAN_BIG : d.T;
  const int64_t n_sc = span(d.T, d.scores_stride_t, d.width);
  const int64_t n_out = span(d.T, d.out_stride_t, d.K);
  const int invalid = n_T == SPAN_BAD || n_sc == SPAN_BAD || n_out == SPAN_BAD || n_sc == SPAN_OVERFLOW ||
                      n_out == SPAN_OVERFLOW || d.K < 1 || d.K > DSK_TOPK_MAX_K || d.width < 1 ||
                      d.width > INT32_MAX || (d.no_shortcut != 0 && d.no_shortcut != 1);
  if (!invalid && (n_sc == SPAN_BIG || n_out == SPAN_BIG || n_T == SPAN_BIG)) {
    (*skipped)++;
    return;
  }
  buf bsc, blens, bout, bws, bcnt;
  const int64_t nsc = n_sc > 0 ? n_sc : 1;
  float *h_sc = (float *)malloc(sizeof(float) * (size_t)nsc);
  for (int64_t i = 0; i < nsc; i++) {
    const int r = tu_int(rng, 0, 99);
    h_sc[i] = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : (float)tu_normal(rng);
  }
  const int64_t T1 = n_T > 0 ? n_T : 1;
  const int wl = d.width > 0 && d.width < INT32_MAX - 10 ? (int)d.width : 100;
  int32_t *h_lens = rand_i32(rng, T1, -2, wl + 2);
  dev_alloc(&bsc, n_sc, 4);
  dev_alloc(&blens, n_T, 4);
  dev_alloc(&bout, n_out, 4);
  dev_alloc(&bcnt, 1, 8);
  dev_put(&bsc, h_sc);
  dev_put(&blens, h_lens);
  dev_poison(&bout, rng);
  int64_t zero = 0;
  dev_put(&bcnt, &zero);
  bcnt.shadow = (uint8_t *)calloc(1, 8);
  d.scores = (const float *)bsc.d;
  d.lens = with_lens ? (const int32_t *)blens.d : NULL;
  d.out = (int32_t *)bout.d;
  d.counters = with_cnt ? (int64_t *)bcnt.d : NULL;
  /* the workspace the plan asks for (exactly), when the plan accepts */
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  memset(&bws, 0, sizeof bws);
  if (dsk_topk_plan(ctx, &d, &pi) == DSK_STATUS_OK && pi.workspace_bytes > 0 && pi.workspace_bytes < ((int64_t)64 << 20)) {
    dev_alloc(&bws, pi.workspace_bytes, 1);
    d.workspace = bws.d;
    d.workspace_bytes = pi.workspace_bytes;
  }

  dsk_clear_error();
  const dsk_status st = dsk_topk(ctx, &d);
  dsk_ctx_synchronize(ctx, NULL);
  if (st == DSK_STATUS_OK) {
    (*ok_calls)++;
    TU_CHECK(&counts, !invalid || d.T == 0,
             "topk #%d (T %lld, width %lld, stride %lld, K %lld, out stride %lld, no_shortcut %d%s): accepted, but its "
             "extents are invalid",
             iter, (long long)d.T, (long long)d.width, (long long)d.scores_stride_t, (long long)d.K,
             (long long)d.out_stride_t, d.no_shortcut, mutated ? ", mutated" : "");
  } else {
    (*err_calls)++;
    TU_CHECK(&counts, dsk_last_error()[0] != 0, "topk #%d: %s without a message", iter, dsk_status_name(st));
    TU_CHECK(&counts, dev_unchanged(&bout) && dev_unchanged(&bcnt), "topk #%d: %s (%s) but an output was written",
             iter, dsk_status_name(st), dsk_last_error());
  }
  free(h_sc);
  free(h_lens);
  dev_release(&bsc);
  dev_release(&blens);
  dev_release(&bout);
  dev_release(&bws);
  dev_release(&bcnt);
}

int main(void) {
  ctx = tu_ctx(NULL);
  if (!ctx) return 1;
  tu_rng rng = tu_rng_make(0x657874656e7473ull);
  const int n = 6000;
  int ok_s = 0, err_s = 0, skip_s = 0, ok_k = 0, err_k = 0, skip_k = 0;
  for (int i = 0; i < n; i++) slot_case(&rng, i, &ok_s, &err_s, &skip_s);
  for (int i = 0; i < n; i++) topk_case(&rng, i, &ok_k, &err_k, &skip_k);
  printf("slot lists: %d accepted, %d rejected, %d valid but too large to allocate; top-k: %d / %d / %d\n", ok_s,
         err_s, skip_s, ok_k, err_k, skip_k);
  /* both kinds of outcome must occur, or the mutations test nothing */
  TU_CHECK(&counts, ok_s > n / 4 && err_s > n / 10, "slot lists: %d accepted, %d rejected", ok_s, err_s);
  TU_CHECK(&counts, ok_k > n / 4 && err_k > n / 10, "top-k: %d accepted, %d rejected", ok_k, err_k);
  dsk_ctx_destroy(ctx);
  return tu_finish("test_extents", &counts);
}
