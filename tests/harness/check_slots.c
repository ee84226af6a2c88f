/* check_slots.c - slot-list builders (spec/indices.md §2-§5): the context's
 * backend against the CPU reference, bit for bit.
 *
 * Per case: random request metadata, block table (with -1 pages, pages near
 * the int32 slot limit, valid-looking values in the stride gaps), top-k /
 * compressed indices with -1 holes and out-of-range values, padding rows and
 * out-of-range req. The outputs are poisoned with a sentinel, including the
 * out stride gaps, which must come back untouched; out, lens and counters
 * must equal the reference exactly. Data moves only through dsk_mem_*, so the
 * context may be a CUDA one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SLOTS_SENT ((int32_t)0x7B7B7B7B)

typedef struct slots_case {
  dsk_slot_list_kind kind;
  int64_t K, window, width, ratio, pbs;
  int64_t max_pos; /* SWA, C128A */
  int64_t T;
  int mode; /* 0 random rows, 1 every row padding, 2 every req out of range */
} slots_case;

static const char *slots_kind_name(dsk_slot_list_kind k) {
  switch (k) {
    case DSK_SLOTS_TOPK: return "topk";
    case DSK_SLOTS_SWA: return "swa";
    case DSK_SLOTS_C4A: return "c4a";
    case DSK_SLOTS_C128A: return "c128a";
  }
  return "?";
}

/* Host copies of one case's inputs. */
typedef struct slots_inputs {
  int64_t T, rows, max_blocks, bstride, istride, ostride, width;
  int32_t *req, *pos, *sm, *table, *idx;
} slots_inputs;

static void slots_inputs_free(slots_inputs *in) {
  free(in->req);
  free(in->pos);
  free(in->sm);
  free(in->table);
  free(in->idx);
}

static int slots_gen(const slots_case *sc, int64_t T, tu_rng *g, slots_inputs *in) {
  const int is_idx = sc->kind == DSK_SLOTS_TOPK || sc->kind == DSK_SLOTS_C4A;
  const int64_t P = sc->pbs;
  memset(in, 0, sizeof *in);
  in->T = T;
  in->width = is_idx ? sc->K : sc->width;
  in->rows = tu_int(g, 1, 6);
  int64_t span = is_idx ? 2 * sc->K + 64 : sc->kind == DSK_SLOTS_SWA ? sc->max_pos + 1 : in->width + 8;
  int64_t cover = (span + P - 1) / P;
  in->max_blocks = cover - tu_int(g, 0, cover / 8);
  if (in->max_blocks < 1) in->max_blocks = 1;
  in->bstride = in->max_blocks + tu_int(g, 0, 4);
  in->istride = is_idx ? sc->K + tu_int(g, 0, 4) : 0;
  in->ostride = in->width + tu_int(g, 0, 6);

  in->req = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  in->pos = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  in->sm = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  in->table = (int32_t *)malloc((size_t)(in->rows * in->bstride) * sizeof(int32_t));
  if (is_idx) in->idx = (int32_t *)malloc((size_t)(T * in->istride) * sizeof(int32_t));
  if (!in->req || !in->pos || !in->sm || !in->table || (is_idx && !in->idx)) return -1;

  for (int64_t i = 0; i < in->rows * in->bstride; i++) {
    int64_t b = i % in->bstride, u = tu_int(g, 0, 99);
    int32_t v;
    if (b >= in->max_blocks) v = (int32_t)tu_int(g, 0, 5000); /* gap: must never be read */
    else if (u < 10) v = -1;
    else if (u < 12) v = (int32_t)(INT32_MAX / P - tu_int(g, 0, 1)); /* slot near / past INT32_MAX */
    else if (u < 13) v = u == 12 && tu_int(g, 0, 1) ? INT32_MAX : INT32_MIN;
    else v = (int32_t)tu_int(g, 0, 2000000);
    in->table[i] = v;
  }
  const int64_t m = sc->ratio ? sc->ratio : 128;
  for (int64_t t = 0; t < T; t++) {
    int64_t u = tu_int(g, 0, 99);
    if (sc->mode == 2 || u < 7) {
      const int32_t bad[4] = {-1, (int32_t)in->rows, INT32_MIN, INT32_MAX};
      in->req[t] = bad[tu_int(g, 0, 3)];
    } else {
      in->req[t] = (int32_t)tu_int(g, 0, in->rows - 1);
    }
    u = tu_int(g, 0, 99);
    in->sm[t] = (sc->mode == 1 || u < 6) ? -1 : u < 9 ? INT32_MIN : (int32_t)tu_int(g, 0, 3000000);
    u = tu_int(g, 0, 99);
    if (u < 3) in->pos[t] = u == 0 ? INT32_MIN : (int32_t)-tu_int(g, 1, 300);
    else if (u < 15) in->pos[t] = (int32_t)tu_int(g, 0, sc->window + 300);
    else if (u < 25 && sc->kind == DSK_SLOTS_C128A) {
      int64_t e = sc->max_pos / m > 1 ? sc->max_pos / m : 1;
      in->pos[t] = (int32_t)(tu_int(g, 1, e) * m - tu_int(g, 1, 2));
    } else if (u < 27) in->pos[t] = INT32_MAX;
    else in->pos[t] = (int32_t)tu_int(g, 0, sc->max_pos);
    if (is_idx) {
      int64_t holes = tu_int(g, 0, 4) * 25; /* 0..100 % */
      for (int64_t k = 0; k < in->istride; k++) {
        int64_t h = tu_int(g, 0, 99);
        int32_t v;
        if (h < holes) v = -1;
        else if (h < holes + 2) v = tu_int(g, 0, 1) ? INT32_MIN : INT32_MAX;
        else v = (int32_t)tu_int(g, 0, span + 32);
        in->idx[t * in->istride + k] = v;
      }
    }
  }
  return 0;
}

static dsk_slot_list_desc slots_desc(const slots_case *sc, const slots_inputs *in, const int32_t *req,
                                     const int32_t *pos, const int32_t *sm, const int32_t *table, const int32_t *idx,
                                     int32_t *out, int32_t *lens, int64_t *counters, int width_zero) {
  const int is_idx = sc->kind == DSK_SLOTS_TOPK || sc->kind == DSK_SLOTS_C4A;
  dsk_slot_list_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.kind = sc->kind;
  d.T = in->T;
  d.req = req;
  d.pos = is_idx ? NULL : pos;
  d.slot_mapping = sm;
  d.block_table.table = table;
  d.block_table.stride = in->bstride;
  d.block_table.rows = in->rows;
  d.block_table.max_blocks = in->max_blocks;
  d.pbs = sc->pbs;
  d.idx = is_idx ? idx : NULL;
  d.idx_stride = in->istride;
  d.K = is_idx ? sc->K : 0;
  d.window = sc->window;
  d.ratio = sc->ratio;
  d.out = out;
  d.out_stride = in->ostride;
  d.width = is_idx ? (width_zero ? 0 : sc->K) : sc->width;
  d.lens = lens;
  d.counters = counters;
  return d;
}

/* Device buffer helpers: all return non-zero on failure (message printed). */
static int slots_up(dsk_ctx *ctx, void **dev, const void *host, size_t bytes, FILE *log) {
  *dev = NULL;
  if (!host || bytes == 0) return 0;
  dsk_status st = dsk_mem_alloc(ctx, dev, bytes);
  if (st == DSK_STATUS_OK) st = dsk_mem_upload(ctx, *dev, host, bytes);
  if (st != DSK_STATUS_OK) {
    fprintf(log, "slots: device buffer of %zu bytes: %s: %s\n", bytes, dsk_status_name(st), dsk_last_error());
    return 1;
  }
  return 0;
}

/* One case; returns 0 when every comparison passed. variant 0: lens and
 * counters; 1: neither; 2: both, and width 0 (= K) for TOPK/C4A. */
static int slots_run_case(dsk_ctx *ctx, dsk_ctx *ref, const slots_case *sc, int64_t T, uint64_t seed, int variant,
                          FILE *log, tu_counts *c) {
  const char *kn = slots_kind_name(sc->kind);
  const int is_idx_kind = sc->kind == DSK_SLOTS_TOPK || sc->kind == DSK_SLOTS_C4A;
  const int with_lens = variant != 1, with_counters = variant != 1, width_zero = variant == 2 && is_idx_kind;
  tu_rng g = tu_rng_make(seed);
  slots_inputs in;
  char name[220];
  int32_t *out_ref = NULL, *out_dev = NULL, *lens_ref = NULL, *lens_dev = NULL;
  int64_t cnt_ref[2] = {3, 4}, cnt_dev[2] = {3, 4};
  void *d_req = NULL, *d_pos = NULL, *d_sm = NULL, *d_table = NULL, *d_idx = NULL, *d_out = NULL, *d_lens = NULL,
       *d_cnt = NULL;
  size_t out_n = 0;
  int failed = 1;
  dsk_status st;

  if (slots_gen(sc, T, &g, &in) != 0) {
    TU_CHECK(c, 0, "slots %s: out of host memory", kn);
    goto done;
  }
  snprintf(name, sizeof name, "%-5s K=%-4lld W=%-3lld width=%-4lld ratio=%-3lld pbs=%-2lld T=%-3lld rows=%lld%s%s%s",
           kn, (long long)sc->K, (long long)sc->window, (long long)in.width, (long long)sc->ratio,
           (long long)sc->pbs, (long long)T, (long long)in.rows,
           sc->mode == 1 ? " all-padding" : sc->mode == 2 ? " all-bad-req" : "",
           with_lens ? "" : " no-lens/counters", width_zero ? " width=0" : "");

  out_n = (size_t)(T * in.ostride);
  out_ref = (int32_t *)malloc(out_n * sizeof(int32_t));
  out_dev = (int32_t *)malloc(out_n * sizeof(int32_t));
  lens_ref = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  lens_dev = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  if (!out_ref || !out_dev || !lens_ref || !lens_dev) {
    TU_CHECK(c, 0, "slots %s: out of host memory", name);
    goto done;
  }
  for (size_t i = 0; i < out_n; i++) out_ref[i] = out_dev[i] = SLOTS_SENT;
  for (int64_t t = 0; t < T; t++) lens_ref[t] = lens_dev[t] = SLOTS_SENT;

  /* reference, host pointers */
  dsk_slot_list_desc rd = slots_desc(sc, &in, in.req, in.pos, in.sm, in.table, in.idx, out_ref,
                                     with_lens ? lens_ref : NULL, with_counters ? cnt_ref : NULL, width_zero);
  st = dsk_slot_list_build(ref, &rd);
  TU_CHECK(c, st == DSK_STATUS_OK, "slots %s: reference: %s: %s", name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) goto done;

  /* backend under test, device pointers */
  const int is_idx = in.idx != NULL;
  int err = slots_up(ctx, &d_req, in.req, (size_t)T * 4, log);
  err |= slots_up(ctx, &d_pos, is_idx ? NULL : in.pos, (size_t)T * 4, log);
  err |= slots_up(ctx, &d_sm, in.sm, (size_t)T * 4, log);
  err |= slots_up(ctx, &d_table, in.table, (size_t)(in.rows * in.bstride) * 4, log);
  err |= slots_up(ctx, &d_idx, in.idx, (size_t)(T * in.istride) * 4, log);
  err |= slots_up(ctx, &d_out, out_dev, out_n * 4, log);
  if (with_lens) err |= slots_up(ctx, &d_lens, lens_dev, (size_t)T * 4, log);
  if (with_counters) err |= slots_up(ctx, &d_cnt, cnt_dev, sizeof cnt_dev, log);
  TU_CHECK(c, !err, "slots %s: device buffers", name);
  if (err) goto done;
  dsk_slot_list_desc dd = slots_desc(sc, &in, (const int32_t *)d_req, (const int32_t *)d_pos, (const int32_t *)d_sm,
                                     (const int32_t *)d_table, (const int32_t *)d_idx, (int32_t *)d_out,
                                     (int32_t *)d_lens, (int64_t *)d_cnt, width_zero);
  st = dsk_slot_list_build(ctx, &dd);
  if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
  TU_CHECK(c, st == DSK_STATUS_OK, "slots %s: backend: %s: %s", name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) goto done;
  st = dsk_mem_download(ctx, out_dev, d_out, out_n * 4);
  if (st == DSK_STATUS_OK && with_lens) st = dsk_mem_download(ctx, lens_dev, d_lens, (size_t)T * 4);
  if (st == DSK_STATUS_OK && with_counters) st = dsk_mem_download(ctx, cnt_dev, d_cnt, sizeof cnt_dev);
  TU_CHECK(c, st == DSK_STATUS_OK, "slots %s: download: %s: %s", name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) goto done;

  /* compare: whole out buffer (stride gaps included), lens, counters */
  int64_t bad_out = 0, bad_gap = 0, bad_len = 0, first = -1;
  for (size_t i = 0; i < out_n; i++) {
    int64_t col = (int64_t)(i % (size_t)in.ostride);
    if (col >= in.width && (out_dev[i] != SLOTS_SENT || out_ref[i] != SLOTS_SENT)) bad_gap++;
    if (out_dev[i] != out_ref[i]) {
      if (first < 0) first = (int64_t)i;
      bad_out++;
    }
  }
  for (int64_t t = 0; t < T; t++) bad_len += with_lens && lens_dev[t] != lens_ref[t];
  const int cnt_ok = cnt_dev[0] == cnt_ref[0] && cnt_dev[1] == cnt_ref[1];
  TU_CHECK(c, bad_out == 0, "slots %s: %lld out mismatches, first out[%lld, %lld] = %d, reference %d", name,
           (long long)bad_out, first < 0 ? -1LL : (long long)(first / in.ostride),
           first < 0 ? -1LL : (long long)(first % in.ostride), first < 0 ? 0 : out_dev[first],
           first < 0 ? 0 : out_ref[first]);
  TU_CHECK(c, bad_gap == 0, "slots %s: %lld stride-gap entries written", name, (long long)bad_gap);
  TU_CHECK(c, bad_len == 0, "slots %s: %lld lens mismatches", name, (long long)bad_len);
  TU_CHECK(c, cnt_ok, "slots %s: counters %lld %lld, reference %lld %lld", name, (long long)cnt_dev[0],
           (long long)cnt_dev[1], (long long)cnt_ref[0], (long long)cnt_ref[1]);
  failed = bad_out || bad_gap || bad_len || !cnt_ok;
  if (with_counters)
    fprintf(log, "slots %s  %s (req out of range: %lld)\n", name, failed ? "FAIL" : "ok", (long long)(cnt_ref[0] - 3));
  else
    fprintf(log, "slots %s  %s\n", name, failed ? "FAIL" : "ok");

done:
  if (failed && out_n == 0) fprintf(log, "slots %s  FAIL\n", kn);
  dsk_mem_free(ctx, d_req);
  dsk_mem_free(ctx, d_pos);
  dsk_mem_free(ctx, d_sm);
  dsk_mem_free(ctx, d_table);
  dsk_mem_free(ctx, d_idx);
  dsk_mem_free(ctx, d_out);
  dsk_mem_free(ctx, d_lens);
  dsk_mem_free(ctx, d_cnt);
  free(out_ref);
  free(out_dev);
  free(lens_ref);
  free(lens_dev);
  slots_inputs_free(&in);
  return failed;
}

/* T = 0 is a no-op: the poisoned output buffer stays as it is. */
static int slots_zero_case(dsk_ctx *ctx, FILE *log, tu_counts *c) {
  const int32_t host_in[4] = {0, 0, 0, 0};
  const int32_t host_bt[1] = {0};
  int32_t host_out[4] = {SLOTS_SENT, SLOTS_SENT, SLOTS_SENT, SLOTS_SENT};
  void *d_in = NULL, *d_bt = NULL, *d_out = NULL;
  int failed = slots_up(ctx, &d_in, host_in, sizeof host_in, log);
  failed |= slots_up(ctx, &d_bt, host_bt, sizeof host_bt, log);
  failed |= slots_up(ctx, &d_out, host_out, sizeof host_out, log);
  if (!failed) {
    dsk_slot_list_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.kind = DSK_SLOTS_SWA;
    d.T = 0;
    d.req = d.pos = d.slot_mapping = (const int32_t *)d_in;
    d.block_table.table = (const int32_t *)d_bt;
    d.block_table.stride = d.block_table.rows = d.block_table.max_blocks = 1;
    d.pbs = 64;
    d.window = d.width = d.out_stride = 4;
    d.out = (int32_t *)d_out;
    dsk_status st = dsk_slot_list_build(ctx, &d);
    if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
    int32_t back[4] = {0, 0, 0, 0};
    if (st == DSK_STATUS_OK) st = dsk_mem_download(ctx, back, d_out, sizeof back);
    TU_CHECK(c, st == DSK_STATUS_OK, "slots T=0: %s: %s", dsk_status_name(st), dsk_last_error());
    int untouched = memcmp(back, host_out, sizeof back) == 0;
    TU_CHECK(c, st != DSK_STATUS_OK || untouched, "slots T=0 wrote into out");
    failed = st != DSK_STATUS_OK || !untouched;
  } else {
    TU_CHECK(c, 0, "slots T=0: device buffers");
  }
  fprintf(log, "slots swa   T=0 no-op  %s\n", failed ? "FAIL" : "ok");
  dsk_mem_free(ctx, d_in);
  dsk_mem_free(ctx, d_bt);
  dsk_mem_free(ctx, d_out);
  return failed;
}

int dsk_check_slots(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c) {
  FILE *log = o && o->log ? o->log : stdout;
  const int quick = o ? o->quick : 0;
  const uint64_t seed = o ? o->seed : 0;
  if (!ctx || !c) return 1;

  /* Is the op served at all? (probe with a small valid descriptor) */
  {
    const int32_t one[1] = {0};
    int32_t out[1];
    dsk_slot_list_desc p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.kind = DSK_SLOTS_TOPK;
    p.T = 1;
    p.req = p.slot_mapping = p.idx = one;
    p.block_table.table = one;
    p.block_table.stride = p.block_table.rows = p.block_table.max_blocks = 1;
    p.pbs = 64;
    p.K = p.idx_stride = p.out_stride = 1;
    p.out = out;
    int supported = 0;
    char reason[256] = "";
    dsk_status st = dsk_op_supported(ctx, DSK_OP_SLOT_LIST, &p, &supported, reason, sizeof reason);
    if (st != DSK_STATUS_OK || !supported) {
      fprintf(log, "slots: skipped: %s\n", st != DSK_STATUS_OK ? dsk_last_error() : reason);
      return 0;
    }
  }

  dsk_ctx_opts ro;
  dsk_ctx_opts_init(&ro);
  ro.device = "cpu";
  ro.backend = "cpu-ref";
  dsk_ctx *ref = NULL;
  dsk_status st = dsk_ctx_create(&ref, &ro);
  TU_CHECK(c, st == DSK_STATUS_OK, "slots: cpu-ref context: %s: %s", dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) return 1;

  static const slots_case cases[] = {
      /* kind, K, window, width, ratio, pbs, max_pos, T, mode */
      {DSK_SLOTS_TOPK, 2048, 0, 0, 0, 64, 0, 96, 0},
      {DSK_SLOTS_TOPK, 2304, 0, 0, 0, 64, 0, 24, 0},
      {DSK_SLOTS_TOPK, 64, 0, 0, 0, 1, 0, 200, 0},
      {DSK_SLOTS_TOPK, 1, 0, 0, 0, 2, 0, 65, 0},
      {DSK_SLOTS_TOPK, 512, 0, 0, 0, 64, 0, 16, 1},
      {DSK_SLOTS_SWA, 0, 128, 128, 0, 64, 200000, 128, 0},
      {DSK_SLOTS_SWA, 0, 128, 192, 0, 64, 50000, 128, 0},
      {DSK_SLOTS_SWA, 0, 128, 256, 0, 64, 50000, 128, 0},
      {DSK_SLOTS_SWA, 0, 256, 256, 0, 64, 50000, 128, 0},
      {DSK_SLOTS_SWA, 0, 128, 128, 0, 1, 5000, 64, 0},
      {DSK_SLOTS_SWA, 0, 5, 9, 0, 2, 500, 77, 0},
      {DSK_SLOTS_SWA, 0, 128, 256, 0, 64, 5000, 16, 2},
      {DSK_SLOTS_C4A, 512, 0, 0, 0, 64, 0, 96, 0},
      {DSK_SLOTS_C4A, 1024, 0, 0, 0, 64, 0, 64, 0},
      {DSK_SLOTS_C4A, 512, 0, 0, 0, 2, 0, 33, 0},
      {DSK_SLOTS_C4A, 3, 0, 0, 0, 1, 0, 100, 0},
      {DSK_SLOTS_C4A, 1024, 0, 0, 0, 64, 0, 16, 1},
      {DSK_SLOTS_C128A, 0, 0, 128, 0, 2, 1 << 20, 96, 0},
      {DSK_SLOTS_C128A, 0, 0, 1024, 0, 2, 1 << 20, 64, 0},
      {DSK_SLOTS_C128A, 0, 0, 8192, 0, 2, 1 << 20, 32, 0},
      {DSK_SLOTS_C128A, 0, 0, 8192, 128, 64, 1 << 20, 16, 0},
      {DSK_SLOTS_C128A, 0, 0, 200, 4, 1, 1 << 20, 48, 0},
      {DSK_SLOTS_C128A, 0, 0, 1, 1, 1, 100, 40, 0},
      {DSK_SLOTS_C128A, 0, 0, 512, 0, 2, 1 << 20, 16, 2},
  };
  int rc = 0;
  const int ncase = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < ncase; i++) {
    int64_t T = cases[i].T;
    if (quick && T > 16) T = 16 + (T % 7); /* odd sizes stay odd */
    for (int variant = 0; variant < (quick ? 2 : 3); variant++)
      rc |= slots_run_case(ctx, ref, &cases[i], T, seed * 1000003u + (uint64_t)(i * 8 + variant) + 1, variant, log, c);
  }
  rc |= slots_zero_case(ctx, log, c);
  dsk_ctx_destroy(ref);
  return rc ? 1 : 0;
}
