/* test_extents_kv.c - the extents test (test_extents.c; docs/design.md)
 * for the cache writer and reader (dsk_kv_write, dsk_kv_read), the
 * indexer scores (dsk_indexer_logits) and the fused path to slot lists
 * (dsk_indexer_topk_slots): random descriptors, a third of them
 * with one or two edge or wild fields, every buffer allocated to exactly
 * the extent the descriptor implies. An accepted call must have valid
 * extents (under AddressSanitizer: and stay inside them), a rejected one a
 * message and untouched outputs (the cache is the writer's output).
 * Runs on DSK_TEST_DEVICE (default cpu). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extents.h"
#include "harness.h"

static tu_counts counts;

static const dsk_kv_format k_formats[] = {DSK_KV_FORMAT_A656, DSK_KV_FORMAT_B584, DSK_KV_FORMAT_IDXK132};

/* Bytes of a cache, or SPAN_*: the writer's rule (pbs * entry bytes <=
 * page_stride, num_pages * page_stride in int64). */
static int64_t cache_span(dsk_kv_format f, const dsk_kv_cache *c) {
  const int64_t entry = dsk_kv_entry_bytes(f);
  if (entry <= 0 || c->pbs < 1 || c->num_pages < 1 || c->pbs > INT64_MAX / entry || c->page_stride < c->pbs * entry)
    return SPAN_BAD;
  if (c->num_pages > INT64_MAX / c->page_stride) return SPAN_OVERFLOW;
  const int64_t v = c->num_pages * c->page_stride;
  return v > BIG_ITEMS ? SPAN_BIG : v;
}
static void rand_cache(dsk_kv_cache *c, tu_rng *rng, dsk_kv_format f) {
  c->pbs = (int64_t[]){1, 3, 16, 64}[tu_int(rng, 0, 3)];
  c->page_stride = dsk_kv_canonical_page_stride(f, c->pbs) + 16 * tu_int(rng, 0, 1);
  c->num_pages = tu_int(rng, 1, 5);
}
static void mutate_cache(dsk_kv_cache *c, tu_rng *rng) {
  switch (tu_int(rng, 0, 2)) {
    case 0: c->pbs = wild(rng, c->pbs); break;
    case 1: c->page_stride = wild(rng, c->page_stride); break;
    default: c->num_pages = wild(rng, c->num_pages); break;
  }
}
static void put_bf16(buf *b, tu_rng *rng) {
  uint16_t *h = (uint16_t *)malloc(b->bytes);
  for (size_t i = 0; i < b->bytes / 2; i++) h[i] = dsk_bf16_from_f32((float)(tu_normal(rng) * 4.0));
  dev_put(b, h);
  free(h);
}

/* ---------------------------------------------------------- kv_write / read */
static void kv_case(tu_rng *rng, int iter, int *ok_calls, int *err_calls, int *skipped) {
  const int reading = tu_int(rng, 0, 1);
  dsk_kv_format f = k_formats[tu_int(rng, 0, 2)];
  int64_t N = tu_int(rng, 0, 9);
  dsk_kv_cache c;
  memset(&c, 0, sizeof c);
  rand_cache(&c, rng, f);
  const int64_t ld = dsk_kv_latent_dim(f), dim = dsk_kv_dim(f);
  int64_t lst = ld + 8 * tu_int(rng, 0, 1), rst = 64 + 8 * tu_int(rng, 0, 1), ost = dim + tu_int(rng, 0, 3);
  const int n_mut = mutation_count(rng, iter), mutated = n_mut > 0;
  for (int m = 0; m < n_mut; m++) {
    switch (tu_int(rng, 0, 5)) {
      case 0: N = wild(rng, N); break;
      case 1: lst = wild(rng, lst); break;
      case 2: rst = wild(rng, rst); break;
      case 3: ost = wild(rng, ost); break;
      case 4: f = (dsk_kv_format)tu_int(rng, 0, 5); break;
      default: mutate_cache(&c, rng); break;
    }
  }
  const int known = f == DSK_KV_FORMAT_A656 || f == DSK_KV_FORMAT_B584 || f == DSK_KV_FORMAT_IDXK132;
  const int idx = f == DSK_KV_FORMAT_IDXK132;
  const int64_t ld2 = known ? dsk_kv_latent_dim(f) : 1, dim2 = known ? dsk_kv_dim(f) : 1;
  const int64_t n_N = N < 0 ? SPAN_BAD : N > BIG_ITEMS ? SPAN_BIG : N;
  const int64_t n_lat = reading ? 0 : span(N, lst, ld2);
  const int64_t n_rope = reading || idx ? 0 : span(N, rst, 64);
  const int64_t n_out = reading ? span(N, ost, dim2) : 0;
  const int64_t n_cache = known ? cache_span(f, &c) : SPAN_BAD;
  const int invalid = !known || bad_span(n_N) || bad_span(n_lat) || bad_span(n_rope) || bad_span(n_out) ||
                      bad_span(n_cache);
  if (!invalid && (n_N == SPAN_BIG || n_lat == SPAN_BIG || n_rope == SPAN_BIG || n_out == SPAN_BIG ||
                   n_cache == SPAN_BIG)) {
    (*skipped)++;
    return;
  }
  buf blat, brope, bsm, bcache, bout, bcnt;
  const int64_t N1 = n_N > 0 ? n_N : 1;
  dev_alloc(&blat, n_lat, 2);
  dev_alloc(&brope, n_rope, 2);
  dev_alloc(&bsm, n_N, 4);
  dev_alloc(&bcache, n_cache, 1);
  dev_alloc(&bout, n_out, 4);
  dev_alloc(&bcnt, 2, 8);
  put_bf16(&blat, rng);
  put_bf16(&brope, rng);
  const int64_t cap = n_cache > 0 && c.pbs > 0 && c.pbs < 1000 ? c.num_pages * c.pbs : 8;
  int32_t *h_sm = rand_i32(rng, N1, -2, (int)(cap + 2));
  dev_put(&bsm, h_sm);
  free(h_sm);
  /* the cache: random bytes (no e4m3 NaN) for the reader, poison for the writer */
  if (reading) {
    uint8_t *h = (uint8_t *)malloc(bcache.bytes);
    for (size_t i = 0; i < bcache.bytes; i++) h[i] = (uint8_t)tu_int(rng, 0, 0x77);
    dev_put(&bcache, h);
    free(h);
  } else {
    dev_poison(&bcache, rng);
  }
  dev_poison(&bout, rng);
  int64_t zeros[2] = {0, 0};
  dev_put(&bcnt, zeros);
  bcnt.shadow = (uint8_t *)calloc(1, 16);
  const int with_cnt = tu_int(rng, 0, 1);
  c.base = bcache.d;

  dsk_status st;
  dsk_clear_error();
  if (reading) {
    dsk_kv_read_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.format = f;
    d.N = N;
    d.slots = (const int32_t *)bsm.d;
    d.cache = c;
    d.out = (float *)bout.d;
    d.out_stride = ost;
    d.counters = with_cnt ? (int64_t *)bcnt.d : NULL;
    st = dsk_kv_read(ctx, &d);
  } else {
    dsk_kv_write_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.format = f;
    d.N = N;
    d.latent = (const dsk_bf16 *)blat.d;
    d.latent_stride = lst;
    d.rope = idx ? NULL : (const dsk_bf16 *)brope.d;
    d.rope_stride = rst;
    d.slot_mapping = (const int32_t *)bsm.d;
    d.cache = c;
    d.counters = with_cnt ? (int64_t *)bcnt.d : NULL;
    st = dsk_kv_write(ctx, &d);
  }
  dsk_ctx_synchronize(ctx, NULL);
  if (st == DSK_STATUS_OK) {
    (*ok_calls)++;
    TU_CHECK(&counts, !invalid || N == 0,
             "kv_%s #%d (format %d, N %lld, strides %lld/%lld/%lld, cache pbs %lld stride %lld pages %lld%s): "
             "accepted, but its extents are invalid",
             reading ? "read" : "write", iter, (int)f, (long long)N, (long long)lst, (long long)rst, (long long)ost,
             (long long)c.pbs, (long long)c.page_stride, (long long)c.num_pages, mutated ? ", mutated" : "");
  } else {
    (*err_calls)++;
    TU_CHECK(&counts, dsk_last_error()[0] != 0, "kv #%d: %s without a message", iter, dsk_status_name(st));
    TU_CHECK(&counts, dev_unchanged(reading ? &bout : &bcache) && dev_unchanged(&bcnt),
             "kv_%s #%d: %s (%s) but an output was written", reading ? "read" : "write", iter, dsk_status_name(st),
             dsk_last_error());
  }
  dev_release(&blat);
  dev_release(&brope);
  dev_release(&bsm);
  dev_release(&bcache);
  dev_release(&bout);
  dev_release(&bcnt);
}

/* ---------------------------------------------------------- indexer logits */
/* fused 0: dsk_indexer_logits; 1: dsk_indexer_topk_slots (the same scoring
 * fields, then K, the optional top-k output, the slot list of kind TOPK or
 * C4A through the key table or a table of its own, the plan's workspace) */
static void logits_case(tu_rng *rng, int iter, int fused, int *ok_calls, int *err_calls, int *skipped) {
  dsk_indexer_logits_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = tu_int(rng, 0, 3);
  d.n_heads = (int64_t[]){1, 7, 32, 64}[tu_int(rng, 0, 3)];
  d.q_stride_h = 128 + 16 * tu_int(rng, 0, 1);
  d.q_stride_t = (d.n_heads - 1) * d.q_stride_h + 128 + 16 * tu_int(rng, 0, 1);
  d.q_scale_stride_t = d.n_heads + tu_int(rng, 0, 2);
  d.weights_stride_t = d.n_heads + tu_int(rng, 0, 2);
  d.ratio = tu_int(rng, 0, 1) ? 4 : 1;
  rand_cache(&d.cache, rng, DSK_KV_FORMAT_IDXK132);
  d.block_table.rows = tu_int(rng, 1, 3);
  d.block_table.max_blocks = tu_int(rng, 1, 12);
  d.block_table.stride = d.block_table.max_blocks + tu_int(rng, 0, 2);
  d.ctx_width = tu_int(rng, 1, 300);
  d.out_stride_t = d.ctx_width + tu_int(rng, 0, 3);
  /* the fused call's selection and slot-list fields */
  int64_t K = tu_int(rng, 0, 3) == 0 ? tu_int(rng, 1, DSK_TOPK_MAX_K) : tu_int(rng, 1, 200);
  int64_t tk_st = K + tu_int(rng, 0, 2), sl_st = K + tu_int(rng, 0, 2), slot_pbs = tu_int(rng, 0, 1) ? 0 : 16;
  int kind = tu_int(rng, 0, 1) ? DSK_SLOTS_TOPK : DSK_SLOTS_C4A, no_shortcut = (int)tu_int(rng, 0, 1);
  const int with_topk = tu_int(rng, 0, 1), with_sbt = tu_int(rng, 0, 1);
  dsk_block_table sbt;
  memset(&sbt, 0, sizeof sbt);
  sbt.rows = tu_int(rng, 1, 3);
  sbt.max_blocks = tu_int(rng, 1, 40);
  sbt.stride = sbt.max_blocks + tu_int(rng, 0, 2);
  int mutated = 0;
  if (fused && (tu_int(rng, 0, 3) == 0 || iter % 7 == 0)) {
    mutated = 1;
    switch (tu_int(rng, 0, 8)) {
      case 0: K = wild(rng, K); break;
      case 1: tk_st = wild(rng, tk_st); break;
      case 2: sl_st = wild(rng, sl_st); break;
      case 3: slot_pbs = wild(rng, slot_pbs); break;
      case 4: kind = (int)tu_int(rng, -1, 6); break;
      case 5: no_shortcut = (int)wild(rng, 1); break;
      case 6: sbt.rows = wild(rng, sbt.rows); break;
      case 7: sbt.max_blocks = wild(rng, sbt.max_blocks); break;
      default: sbt.stride = wild(rng, sbt.stride); break;
    }
  }
  const int n_mut = mutation_count(rng, iter);
  mutated |= n_mut > 0;
  for (int m = 0; m < n_mut; m++) {
    switch (tu_int(rng, 0, 12)) {
      case 0: d.T = wild(rng, d.T); break;
      case 1: d.n_heads = wild(rng, d.n_heads); break;
      case 2: d.q_stride_t = wild(rng, d.q_stride_t); break;
      case 3: d.q_stride_h = wild(rng, d.q_stride_h); break;
      case 4: d.q_scale_stride_t = wild(rng, d.q_scale_stride_t); break;
      case 5: d.weights_stride_t = wild(rng, d.weights_stride_t); break;
      case 6: d.ratio = wild(rng, d.ratio); break;
      case 7: d.block_table.rows = wild(rng, d.block_table.rows); break;
      case 8: d.block_table.max_blocks = wild(rng, d.block_table.max_blocks); break;
      case 9: d.block_table.stride = wild(rng, d.block_table.stride); break;
      case 10: d.ctx_width = wild(rng, d.ctx_width); break;
      case 11: d.out_stride_t = wild(rng, d.out_stride_t); break;
      default: mutate_cache(&d.cache, rng); break;
    }
  }
  const int64_t H = d.n_heads;
  const int64_t n_T = d.T < 0 ? SPAN_BAD : d.T > BIG_ITEMS ? SPAN_BIG : d.T;
  const int64_t n_q = H < 1 || H > 128 ? SPAN_BAD : span3(d.T, H, 128, d.q_stride_t, d.q_stride_h);
  const int64_t n_qs = H < 1 || H > 128 ? SPAN_BAD : span(d.T, d.q_scale_stride_t, H);
  const int64_t n_w = H < 1 || H > 128 ? SPAN_BAD : span(d.T, d.weights_stride_t, H);
  const int64_t n_bt = span(d.block_table.rows, d.block_table.stride, d.block_table.max_blocks);
  const int64_t n_out = span(d.T, d.out_stride_t, d.ctx_width);
  const int64_t n_cache = cache_span(DSK_KV_FORMAT_IDXK132, &d.cache);
  const int64_t n_tk = fused && with_topk ? span(d.T, tk_st, K) : 0;
  const int64_t n_sl = fused ? span(d.T, sl_st, K) : 0;
  const int64_t n_sbt = fused && with_sbt ? span(sbt.rows, sbt.stride, sbt.max_blocks) : 0;
  int invalid = bad_span(n_T) || bad_span(n_q) || bad_span(n_qs) || bad_span(n_w) || bad_span(n_bt) ||
                (!fused && bad_span(n_out)) || bad_span(n_cache) || d.ctx_width < 1 || d.ctx_width > INT32_MAX ||
                (d.ratio != 1 && d.ratio != 4) || d.block_table.rows < 1 || d.block_table.max_blocks < 1;
  if (fused)
    invalid |= bad_span(n_tk) || bad_span(n_sl) || bad_span(n_sbt) || K < 1 || K > DSK_TOPK_MAX_K ||
               (kind != DSK_SLOTS_TOPK && kind != DSK_SLOTS_C4A) || slot_pbs < 0 || slot_pbs > INT32_MAX ||
               (no_shortcut != 0 && no_shortcut != 1) || (with_sbt && (sbt.rows < 1 || sbt.max_blocks < 1));
  if (!invalid && (n_T == SPAN_BIG || n_q == SPAN_BIG || n_qs == SPAN_BIG || n_w == SPAN_BIG || n_bt == SPAN_BIG ||
                   (!fused && n_out == SPAN_BIG) || n_cache == SPAN_BIG || n_tk == SPAN_BIG || n_sl == SPAN_BIG ||
                   n_sbt == SPAN_BIG)) {
    (*skipped)++;
    return;
  }
  buf bq, bqs, bw, breq, bpos, bsm, bbt, bcache, bout, bcnt, btk, bsl, blens, bsbt, bws;
  const int64_t T1 = n_T > 0 ? n_T : 1;
  dev_alloc(&bq, n_q, 1);
  dev_alloc(&bqs, n_qs, 4);
  dev_alloc(&bw, n_w, 4);
  dev_alloc(&breq, n_T, 4);
  dev_alloc(&bpos, n_T, 4);
  dev_alloc(&bsm, n_T, 4);
  dev_alloc(&bbt, n_bt, 4);
  dev_alloc(&bcache, n_cache, 1);
  dev_alloc(&bout, fused ? 0 : n_out, 4);
  dev_alloc(&bcnt, 3, 8);
  dev_alloc(&btk, n_tk, 4);
  dev_alloc(&bsl, n_sl, 4);
  dev_alloc(&blens, n_T, 4);
  dev_alloc(&bsbt, n_sbt, 4);
  memset(&bws, 0, sizeof bws);
  {
    const int64_t nsbt = n_sbt > 0 ? n_sbt : 1;
    int32_t *h = rand_i32(rng, nsbt, -1, 3000);
    dev_put(&bsbt, h);
    free(h);
  }
  {
    uint8_t *h = (uint8_t *)malloc(bq.bytes > bcache.bytes ? bq.bytes : bcache.bytes);
    for (size_t i = 0; i < bq.bytes; i++) h[i] = (uint8_t)tu_int(rng, 0, 0x77);
    dev_put(&bq, h);
    for (size_t i = 0; i < bcache.bytes; i++) h[i] = (uint8_t)tu_int(rng, 0, 0x77);
    dev_put(&bcache, h);
    free(h);
    float *hf = (float *)malloc(bqs.bytes > bw.bytes ? bqs.bytes : bw.bytes);
    for (size_t i = 0; i < bqs.bytes / 4; i++) hf[i] = (float)ldexp(1.0 + tu_uniform(rng), -(int)tu_int(rng, 0, 8));
    dev_put(&bqs, hf);
    for (size_t i = 0; i < bw.bytes / 4; i++) hf[i] = (float)(tu_normal(rng) * 0.1);
    dev_put(&bw, hf);
    free(hf);
  }
  const int rows = d.block_table.rows > 0 && d.block_table.rows < 100 ? (int)d.block_table.rows : 3;
  int32_t *h_req = rand_i32(rng, T1, -1, rows);
  const int wmax = d.ctx_width > 0 && d.ctx_width < 100000 ? (int)d.ctx_width : 300;
  int32_t *h_pos = rand_i32(rng, T1, -3, (int)(wmax * 4 + 10));
  int32_t *h_sm = rand_i32(rng, T1, -1, 40);
  const int64_t nbt = n_bt > 0 ? n_bt : 1;
  const int pages = d.cache.num_pages > 0 && d.cache.num_pages < 1000 ? (int)d.cache.num_pages : 4;
  int32_t *h_bt = rand_i32(rng, nbt, -1, pages + 2);
  dev_put(&breq, h_req);
  dev_put(&bpos, h_pos);
  dev_put(&bsm, h_sm);
  dev_put(&bbt, h_bt);
  free(h_req);
  free(h_pos);
  free(h_sm);
  free(h_bt);
  dev_poison(&bout, rng);
  dev_poison(&btk, rng);
  dev_poison(&bsl, rng);
  dev_poison(&blens, rng);
  int64_t zeros[3] = {0, 0, 0};
  dev_put(&bcnt, zeros);
  bcnt.shadow = (uint8_t *)calloc(1, 24);
  d.q = (const uint8_t *)bq.d;
  d.q_scale = (const float *)bqs.d;
  d.weights = (const float *)bw.d;
  d.req = (const int32_t *)breq.d;
  d.pos = (const int32_t *)bpos.d;
  d.slot_mapping = (const int32_t *)bsm.d;
  d.block_table.table = (const int32_t *)bbt.d;
  d.cache.base = bcache.d;
  d.out = (float *)bout.d;
  d.counters = tu_int(rng, 0, 1) ? (int64_t *)bcnt.d : NULL;

  int ws_short = 0;
  dsk_status st;
  if (!fused) {
    dsk_clear_error();
    st = dsk_indexer_logits(ctx, &d);
  } else {
    dsk_indexer_topk_slots_desc f;
    memset(&f, 0, sizeof f);
    f.struct_size = sizeof f;
    f.T = d.T;
    f.n_heads = d.n_heads;
    f.q = d.q;
    f.q_stride_t = d.q_stride_t;
    f.q_stride_h = d.q_stride_h;
    f.q_scale = d.q_scale;
    f.q_scale_stride_t = d.q_scale_stride_t;
    f.weights = d.weights;
    f.weights_stride_t = d.weights_stride_t;
    f.req = d.req;
    f.pos = d.pos;
    f.slot_mapping = d.slot_mapping;
    f.block_table = d.block_table;
    f.ratio = d.ratio;
    f.cache = d.cache;
    f.ctx_width = d.ctx_width;
    f.K = K;
    f.no_shortcut = no_shortcut;
    f.topk = with_topk ? (int32_t *)btk.d : NULL;
    f.topk_stride_t = tk_st;
    f.kind = (dsk_slot_list_kind)kind;
    if (with_sbt) {
      f.slot_block_table = sbt;
      f.slot_block_table.table = (const int32_t *)bsbt.d;
    }
    f.slot_pbs = slot_pbs;
    f.slots = (int32_t *)bsl.d;
    f.slots_stride_t = sl_st;
    f.lens = tu_int(rng, 0, 1) ? (int32_t *)blens.d : NULL;
    f.counters = d.counters;
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    if (dsk_indexer_topk_slots_plan(ctx, &f, &pi) == DSK_STATUS_OK && pi.workspace_bytes > 0 &&
        pi.workspace_bytes < ((int64_t)64 << 20)) {
      ws_short = tu_int(rng, 0, 9) == 0;
      dev_alloc(&bws, pi.workspace_bytes - (ws_short ? 1 : 0), 1);
      f.workspace = bws.d;
      f.workspace_bytes = (int64_t)bws.bytes;
    }
    dsk_clear_error();
    st = dsk_indexer_topk_slots(ctx, &f);
  }
  dsk_ctx_synchronize(ctx, NULL);
  if (st == DSK_STATUS_OK) {
    (*ok_calls)++;
    TU_CHECK(&counts, (!invalid && !ws_short) || d.T == 0,
             "%s #%d (T %lld, H %lld, q %lld/%lld, qs %lld, w %lld, ratio %lld, bt %lld x %lld/%lld, width %lld, "
             "out %lld, cache %lld/%lld/%lld, K %lld, kind %d%s%s): accepted, but its extents are invalid",
             fused ? "topk_slots" : "logits", iter, (long long)d.T, (long long)H, (long long)d.q_stride_t, (long long)d.q_stride_h,
             (long long)d.q_scale_stride_t, (long long)d.weights_stride_t, (long long)d.ratio,
             (long long)d.block_table.rows, (long long)d.block_table.max_blocks, (long long)d.block_table.stride,
             (long long)d.ctx_width, (long long)d.out_stride_t, (long long)d.cache.pbs, (long long)d.cache.page_stride,
             (long long)d.cache.num_pages, (long long)K, kind, mutated ? ", mutated" : "",
             ws_short ? ", workspace one byte short" : "");
  } else {
    (*err_calls)++;
    TU_CHECK(&counts, dsk_last_error()[0] != 0, "logits #%d: %s without a message", iter, dsk_status_name(st));
    TU_CHECK(&counts,
             dev_unchanged(&bout) && dev_unchanged(&bcnt) && dev_unchanged(&btk) && dev_unchanged(&bsl) &&
                 dev_unchanged(&blens),
             "%s #%d: %s (%s) but an output was written", fused ? "topk_slots" : "logits", iter, dsk_status_name(st),
             dsk_last_error());
  }
  dev_release(&bq);
  dev_release(&bqs);
  dev_release(&bw);
  dev_release(&breq);
  dev_release(&bpos);
  dev_release(&bsm);
  dev_release(&bbt);
  dev_release(&bcache);
  dev_release(&bout);
  dev_release(&bcnt);
  dev_release(&btk);
  dev_release(&bsl);
  dev_release(&blens);
  dev_release(&bsbt);
  dev_release(&bws);
}

int main(void) {
  ctx = tu_ctx(NULL);
  if (!ctx) return 1;
  tu_rng rng = tu_rng_make(0x6b76657874656e74ull);
  const int n = 3000;
  int ok_k = 0, err_k = 0, skip_k = 0, ok_l = 0, err_l = 0, skip_l = 0, ok_f = 0, err_f = 0, skip_f = 0;
  for (int i = 0; i < n; i++) kv_case(&rng, i, &ok_k, &err_k, &skip_k);
  for (int i = 0; i < n / 2; i++) logits_case(&rng, i, 0, &ok_l, &err_l, &skip_l);
  for (int i = 0; i < n / 2; i++) logits_case(&rng, i, 1, &ok_f, &err_f, &skip_f);
  printf("kv write / read: %d accepted, %d rejected, %d valid but too large to allocate; indexer logits: %d / %d / %d; "
         "fused top-k slots: %d / %d / %d\n",
         ok_k, err_k, skip_k, ok_l, err_l, skip_l, ok_f, err_f, skip_f);
  TU_CHECK(&counts, ok_f > n / 8 && err_f > n / 20, "topk_slots: %d accepted, %d rejected", ok_f, err_f);
  /* both outcomes must occur, or the mutations test nothing */
  TU_CHECK(&counts, ok_k > n / 4 && err_k > n / 10, "kv: %d accepted, %d rejected", ok_k, err_k);
  TU_CHECK(&counts, ok_l > n / 8 && err_l > n / 20, "logits: %d accepted, %d rejected", ok_l, err_l);
  dsk_ctx_destroy(ctx);
  return tu_finish("test_extents_kv", &counts);
}
