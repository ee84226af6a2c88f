/* test_extents.c - random descriptors for dsk_slot_list_build, dsk_topk and
 * dsk_sparse_mla_decode (a quarter as many: the CPU reference is fp64),
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

#include "extents.h"
#include "harness.h"

static tu_counts counts;

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
  const int n_mut = mutation_count(rng, iter), mutated = n_mut > 0;
  for (int m = 0; m < n_mut; m++) {
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
  const int n_mut = mutation_count(rng, iter), mutated = n_mut > 0;
  for (int m = 0; m < n_mut; m++) {
    switch (tu_int(rng, 0, 5)) {
      case 0: d.T = wild(rng, d.T); break;
      case 1: d.width = wild(rng, d.width); break;
      case 2: d.scores_stride_t = wild(rng, d.scores_stride_t); break;
      case 3: d.K = wild(rng, d.K); break;
      case 4: d.out_stride_t = wild(rng, d.out_stride_t); break;
      default: d.no_shortcut = (int)wild(rng, 1); break;
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

/* ------------------------------------------------------ sparse MLA decode */
static void mla_case(tu_rng *rng, int iter, int *ok_calls, int *err_calls, int *skipped) {
  dsk_sparse_mla_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.format = tu_int(rng, 0, 1) ? DSK_KV_FORMAT_B584 : DSK_KV_FORMAT_A656;
  const int64_t dqk = d.format == DSK_KV_FORMAT_A656 ? 576 : 512;
  d.T = tu_int(rng, 0, 3);
  d.H = tu_int(rng, 1, 16);
  d.q_stride_h = dqk + 8 * tu_int(rng, 0, 1);
  d.q_stride_t = (d.H - 1) * d.q_stride_h + dqk + 8 * tu_int(rng, 0, 2);
  d.sm_scale = 0.0417f;
  d.nseg = tu_int(rng, 1, 2);
  for (int i = 0; i < 2; i++) {
    dsk_sparse_mla_segment *g = &d.seg[i];
    g->cache.pbs = (int64_t[]){1, 2, 16, 64}[tu_int(rng, 0, 3)];
    g->cache.page_stride = dsk_kv_canonical_page_stride(d.format, g->cache.pbs) + 16 * tu_int(rng, 0, 1);
    g->cache.num_pages = tu_int(rng, 1, 4);
    g->width = tu_int(rng, 1, 80);
    g->slots_stride_t = g->width + tu_int(rng, 0, 3);
  }
  d.out_stride_h = 512 + 8 * tu_int(rng, 0, 1);
  d.out_stride_t = (d.H - 1) * d.out_stride_h + 512 + 8 * tu_int(rng, 0, 2);
  const int with_lse = tu_int(rng, 0, 1), with_sink = tu_int(rng, 0, 1), with_cnt = tu_int(rng, 0, 1);
  const int with_lens0 = tu_int(rng, 0, 1), with_lens1 = tu_int(rng, 0, 1);
  if (tu_int(rng, 0, 1)) { /* lse as [H, T] */
    d.lse_stride_t = 1;
    d.lse_stride_h = d.T + tu_int(rng, 0, 2);
  } else {
    d.lse_stride_h = 1;
    d.lse_stride_t = d.H + tu_int(rng, 0, 2);
  }
  const int n_mut = mutation_count(rng, iter), mutated = n_mut > 0;
  for (int m = 0; m < n_mut; m++) {
    const int sg = tu_int(rng, 0, 1);
    switch (tu_int(rng, 0, 15)) {
      case 0: d.T = wild(rng, d.T); break;
      case 1: d.H = wild(rng, d.H); break;
      case 2: d.q_stride_t = wild(rng, d.q_stride_t); break;
      case 3: d.q_stride_h = wild(rng, d.q_stride_h); break;
      case 4: d.out_stride_t = wild(rng, d.out_stride_t); break;
      case 5: d.out_stride_h = wild(rng, d.out_stride_h); break;
      case 6: d.lse_stride_t = wild(rng, d.lse_stride_t); break;
      case 7: d.lse_stride_h = wild(rng, d.lse_stride_h); break;
      case 8: d.seg[sg].width = wild(rng, d.seg[sg].width); break;
      case 9: d.seg[sg].slots_stride_t = wild(rng, d.seg[sg].slots_stride_t); break;
      case 10: d.seg[sg].cache.pbs = wild(rng, d.seg[sg].cache.pbs); break;
      case 11: d.seg[sg].cache.page_stride = wild(rng, d.seg[sg].cache.page_stride); break;
      case 12: d.seg[sg].cache.num_pages = wild(rng, d.seg[sg].cache.num_pages); break;
      case 13: d.nseg = (int)tu_int(rng, -1, 3); break;
      case 14: d.format = (dsk_kv_format)tu_int(rng, 0, 4); break;
      default: d.sm_scale = tu_int(rng, 0, 1) ? NAN : -1.f; break;
    }
  }
  const int known = d.format == DSK_KV_FORMAT_A656 || d.format == DSK_KV_FORMAT_B584;
  const int64_t row = d.format == DSK_KV_FORMAT_A656 ? 576 : 512;
  const int64_t entry = known ? dsk_kv_entry_bytes(d.format) : 1;
  const int64_t n_q = span3(d.T, d.H, row, d.q_stride_t, d.q_stride_h);
  const int64_t n_out = span3(d.T, d.H, 512, d.out_stride_t, d.out_stride_h);
  const int64_t n_lse = with_lse ? span_lse(d.T, d.H, d.lse_stride_t, d.lse_stride_h) : 0;
  const int64_t n_T = d.T < 0 ? SPAN_BAD : d.T > BIG_ITEMS ? SPAN_BIG : d.T;
  const int64_t n_H = d.H < 1 || d.H > 128 ? SPAN_BAD : d.H;
  int invalid = !known || bad_span(n_q) || bad_span(n_out) || bad_span(n_lse) || n_T == SPAN_BAD || n_H == SPAN_BAD ||
                (d.nseg != 1 && d.nseg != 2) || !(isfinite(d.sm_scale) && d.sm_scale > 0.f);
  int big = n_q == SPAN_BIG || n_out == SPAN_BIG || n_lse == SPAN_BIG || n_T == SPAN_BIG;
  int64_t n_slots[2] = {0, 0}, n_cache[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    const dsk_sparse_mla_segment *g = &d.seg[i];
    n_slots[i] = span(d.T, g->slots_stride_t, g->width);
    if (g->cache.pbs < 1 || g->cache.num_pages < 1 || g->cache.pbs > INT64_MAX / entry ||
        g->cache.page_stride < g->cache.pbs * entry)
      n_cache[i] = SPAN_BAD;
    else if (g->cache.num_pages > INT64_MAX / g->cache.page_stride)
      n_cache[i] = SPAN_OVERFLOW;
    else
      n_cache[i] = g->cache.num_pages * g->cache.page_stride > BIG_ITEMS ? SPAN_BIG
                                                                           : g->cache.num_pages * g->cache.page_stride;
    if (i < d.nseg) {
      invalid |= bad_span(n_slots[i]) || bad_span(n_cache[i]) || g->width < 1 || g->width > INT32_MAX;
      big |= n_slots[i] == SPAN_BIG || n_cache[i] == SPAN_BIG;
    }
  }
  if (!invalid && big) {
    (*skipped)++;
    return;
  }
  /* buffers at their exact extents; the caches and q random (NaN-free
   * bf16 q; random cache bytes), slots in and around the caches */
  buf bq, bout, blse, bsink, bcnt, bws, bc[2], bs[2], bl[2];
  const int64_t T1 = n_T > 0 ? n_T : 1, H1 = n_H > 0 ? n_H : 1;
  dev_alloc(&bq, n_q, 2);
  dev_alloc(&bout, n_out, 2);
  dev_alloc(&blse, n_lse, 4);
  dev_alloc(&bsink, H1, 4);
  dev_alloc(&bcnt, 2, 8);
  {
    uint16_t *h = (uint16_t *)malloc(bq.bytes);
    for (size_t i = 0; i < bq.bytes / 2; i++) h[i] = dsk_bf16_from_f32((float)tu_normal(rng));
    dev_put(&bq, h);
    free(h);
    float *hs = (float *)malloc(bsink.bytes);
    for (size_t i = 0; i < bsink.bytes / 4; i++) hs[i] = (float)tu_normal(rng);
    dev_put(&bsink, hs);
    free(hs);
  }
  for (int i = 0; i < 2; i++) {
    const dsk_sparse_mla_segment *g = &d.seg[i];
    dev_alloc(&bc[i], n_cache[i], 1);
    uint8_t *hc = (uint8_t *)malloc(bc[i].bytes);
    for (size_t k = 0; k < bc[i].bytes; k++) hc[k] = (uint8_t)tu_int(rng, 0, 0x77); /* no e4m3 NaN, no scale 0xFF */
    dev_put(&bc[i], hc);
    free(hc);
    const int64_t cap = n_cache[i] > 0 && g->cache.pbs > 0 && g->cache.pbs < 1000 ? g->cache.num_pages * g->cache.pbs : 8;
    const int64_t ns = n_slots[i] > 0 ? n_slots[i] : 1;
    int32_t *h_s = rand_i32(rng, ns, -2, (int)(cap + 3 < 100000 ? cap + 3 : 100000));
    dev_alloc(&bs[i], n_slots[i], 4);
    dev_put(&bs[i], h_s);
    free(h_s);
    const int wl = g->width > 0 && g->width < 100000 ? (int)g->width : 10;
    int32_t *h_l = rand_i32(rng, T1, -2, wl + 2);
    dev_alloc(&bl[i], n_T, 4);
    dev_put(&bl[i], h_l);
    free(h_l);
  }
  dev_poison(&bout, rng);
  dev_poison(&blse, rng);
  int64_t zeros[2] = {0, 0};
  dev_put(&bcnt, zeros);
  bcnt.shadow = (uint8_t *)calloc(1, 16);
  d.q = (const dsk_bf16 *)bq.d;
  d.out = (dsk_bf16 *)bout.d;
  d.lse = with_lse ? (float *)blse.d : NULL;
  d.sink = with_sink ? (const float *)bsink.d : NULL;
  d.counters = with_cnt ? (int64_t *)bcnt.d : NULL;
  for (int i = 0; i < 2; i++) {
    d.seg[i].cache.base = bc[i].d;
    d.seg[i].slots = (const int32_t *)bs[i].d;
    d.seg[i].lens = (i == 0 ? with_lens0 : with_lens1) ? (const int32_t *)bl[i].d : NULL;
  }
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  memset(&bws, 0, sizeof bws);
  if (dsk_sparse_mla_decode_plan(ctx, &d, &pi) == DSK_STATUS_OK && pi.workspace_bytes > 0 &&
      pi.workspace_bytes < ((int64_t)64 << 20)) {
    dev_alloc(&bws, pi.workspace_bytes, 1);
    d.workspace = bws.d;
    /* now and then one byte short: must be rejected */
    d.workspace_bytes = pi.workspace_bytes - (tu_int(rng, 0, 9) == 0 ? 1 : 0);
  }
  const int ws_short = d.workspace && d.workspace_bytes < pi.workspace_bytes;

  dsk_clear_error();
  const dsk_status st = dsk_sparse_mla_decode(ctx, &d);
  dsk_ctx_synchronize(ctx, NULL);
  if (st == DSK_STATUS_OK) {
    (*ok_calls)++;
    TU_CHECK(&counts, (!invalid && !ws_short) || d.T == 0,
             "mla #%d (format %d, T %lld, H %lld, q %lld/%lld, out %lld/%lld, nseg %d, widths %lld/%lld, pbs "
             "%lld/%lld%s%s): accepted, but its extents are invalid",
             iter, (int)d.format, (long long)d.T, (long long)d.H, (long long)d.q_stride_t, (long long)d.q_stride_h,
             (long long)d.out_stride_t, (long long)d.out_stride_h, d.nseg, (long long)d.seg[0].width,
             (long long)d.seg[1].width, (long long)d.seg[0].cache.pbs, (long long)d.seg[1].cache.pbs,
             mutated ? ", mutated" : "", ws_short ? ", workspace one byte short" : "");
  } else {
    (*err_calls)++;
    TU_CHECK(&counts, dsk_last_error()[0] != 0, "mla #%d: %s without a message", iter, dsk_status_name(st));
    TU_CHECK(&counts, dev_unchanged(&bout) && dev_unchanged(&blse) && dev_unchanged(&bcnt),
             "mla #%d: %s (%s) but an output was written", iter, dsk_status_name(st), dsk_last_error());
  }
  dev_release(&bq);
  dev_release(&bout);
  dev_release(&blse);
  dev_release(&bsink);
  dev_release(&bcnt);
  dev_release(&bws);
  for (int i = 0; i < 2; i++) {
    dev_release(&bc[i]);
    dev_release(&bs[i]);
    dev_release(&bl[i]);
  }
}

int main(void) {
  ctx = tu_ctx(NULL);
  if (!ctx) return 1;
  tu_rng rng = tu_rng_make(0x657874656e7473ull);
  const int n = 6000;
  int ok_s = 0, err_s = 0, skip_s = 0, ok_k = 0, err_k = 0, skip_k = 0;
  for (int i = 0; i < n; i++) slot_case(&rng, i, &ok_s, &err_s, &skip_s);
  for (int i = 0; i < n; i++) topk_case(&rng, i, &ok_k, &err_k, &skip_k);
  int ok_m = 0, err_m = 0, skip_m = 0;
  for (int i = 0; i < n / 4; i++) mla_case(&rng, i, &ok_m, &err_m, &skip_m);
  printf("slot lists: %d accepted, %d rejected, %d valid but too large to allocate; top-k: %d / %d / %d; sparse MLA "
         "decode: %d / %d / %d\n",
         ok_s, err_s, skip_s, ok_k, err_k, skip_k, ok_m, err_m, skip_m);
  TU_CHECK(&counts, ok_m > n / 16 && err_m > n / 40, "sparse MLA decode: %d accepted, %d rejected", ok_m, err_m);
  /* both kinds of outcome must occur, or the mutations test nothing */
  TU_CHECK(&counts, ok_s > n / 4 && err_s > n / 10, "slot lists: %d accepted, %d rejected", ok_s, err_s);
  TU_CHECK(&counts, ok_k > n / 4 && err_k > n / 10, "top-k: %d accepted, %d rejected", ok_k, err_k);
  dsk_ctx_destroy(ctx);
  return tu_finish("test_extents", &counts);
}
