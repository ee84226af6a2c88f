/* demo.c - the main job: one DeepSeek-V4-Flash decode step and one GLM-5.1
 * decode step on realistic shapes, end to end through the public API:
 *
 *   1. generate latent / rope rows and write the paged caches with
 *      dsk_kv_write (pages in random physical order, as a paged allocator
 *      leaves them);
 *   2. build the slot lists with dsk_slot_list_build from request-local
 *      indices and block tables, as an engine would;
 *   3. plan, allocate the workspace, run dsk_sparse_mla_decode on the
 *      context's backend and time it;
 *   4. check the result against the independent fp64 oracle
 *      (check_sparse_mla.c) with the ACCURATE bound of sparse-decode.md §7.
 *
 * Cases:
 *   DSv4-Flash C4A layer: 64 heads, Format B, segment 0 = sliding window 128
 *     (pbs 64, kind SWA), segment 1 = C4A top-512 (pbs 64 compressed entries,
 *     kind C4A) over a 32K-token context (8192 compressed entries), 4 requests
 *     x 4 query tokens (MTP-style), sink N(0,1) per head, sm_scale 512^-0.5.
 *   GLM-5.1 layer: 64 heads, Format A written with the RAW scale rule (as
 *     vLLM / TensorRT-LLM GLM caches: arbitrary fp32 scales), top-2048 (kind
 *     TOPK) over the same context lengths, 4 x 4 query tokens, sm_scale
 *     0.0625, no sink.
 * quick: 4K-token contexts (the candidate counts stay 640 and 2048).
 *
 * Two more rows follow (same columns, `-` where a column does not apply,
 * the check's detail after the result):
 *   DSv4-Flash mHC: one sublayer as a model runs it, dsk_mhc_post_prenorm
 *     (the previous sublayer's post fused with this prenorm) + dsk_mhc_pre,
 *     D 4096, T 16, on the context's backend against the cpu-ref with the
 *     same split count, within spec/mhc.md §7's bounds (the rules of
 *     check_mhc.c's fused rows); cpb = S; GB/s over the bytes the two ops
 *     move.
 *   DSv4-Flash indexer: dsk_indexer_logits + dsk_topk of the C4A layer (64
 *     heads, ratio 4, K 512, keys written with dsk_kv_write into pages in
 *     random order) for the same 4 x 4 query tokens over the same context
 *     lengths; scores within 1e-5 * max|ref| per row of the cpu-ref, top-k
 *     by the test rule of spec/indices.md §9 against the reference scores;
 *     GB/s over the distinct key bytes read (132 B per entry).
 *
 * Then one MoE row per model (DSv4-Flash, GLM-5.1, DSv4-Pro; the rows are
 * made by dsk__moe_demo_row in check_moe_forward.c): dsk_moe_run of one layer for
 * the same 16 tokens through the router; on CUDA production H / I / E /
 * top-k with 16 local experts (an EP16 rank, the selection bias steering
 * every token to them), on the CPU (or with quick) reduced shapes, labelled
 * "rd"; checked against the cpu-ref layer and an fp64 forward with the
 * spec's bound (diff <= 0.01, spec/mxfp4-moe.md §8); widths = local/global
 * experts; GB/s over the weight bytes read (active experts, shared expert,
 * router), TFLOPS over the real rows.
 *
 * Timing: the median of o->reps runs (default 20 on CUDA, 3 on the CPU) after
 * one warm-up run. Each run is bracketed by dsk_ctx_synchronize and read with
 * the host clock (tu_now_us): for a CUDA context this includes the launch
 * overhead (a few us) but no L2 flush, so short GPU runs read slightly fast
 * (warm L2) and slightly slow (launch) against `dsk bench`. FLOP and bytes
 * follow sparse-decode.md §8 (R = 584 / 656 B per record, lse counted).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_indexer.h"
#include "harness.h"
#include "mla_oracle.h"

#define DEMO_REQS 4
#define DEMO_TOK 4 /* query tokens per request (1 + 3 MTP drafts) */
#define DEMO_T (DEMO_REQS * DEMO_TOK)
#define DEMO_H 64

typedef struct demo_row {
  const char *model;
  char widths[32];
  double median_us, gbps, tflops;
  mla_metrics m;
  int tactic;
  int pass;
} demo_row;

/* Everything a case allocates on the device; freed by demo_free. */
#define DEMO_MAX_DEV 32
typedef struct demo_mem {
  void *p[DEMO_MAX_DEV];
  int n;
} demo_mem;

static void *dalloc(dsk_ctx *ctx, demo_mem *mm, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st != DSK_STATUS_OK) return NULL;
  if (mm->n >= DEMO_MAX_DEV) {
    *st = DSK_STATUS_OUT_OF_MEMORY;
    return NULL;
  }
  *st = dsk_mem_alloc(ctx, &p, bytes ? bytes : 16);
  if (*st == DSK_STATUS_OK) mm->p[mm->n++] = p;
  return p;
}

static void *dput(dsk_ctx *ctx, demo_mem *mm, const void *host, size_t bytes, dsk_status *st) {
  void *p = dalloc(ctx, mm, bytes, st);
  if (*st == DSK_STATUS_OK && bytes) *st = dsk_mem_upload(ctx, p, host, bytes);
  return p;
}

static void demo_free(dsk_ctx *ctx, demo_mem *mm) {
  for (int i = 0; i < mm->n; i++) dsk_mem_free(ctx, mm->p[i]);
  mm->n = 0;
}

static dsk_bf16 d_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (dsk_bf16)(u >> 16);
}

/* Writes N entries to `slots` of the device cache: latent N(0,1) * 2^u per
 * scale tile (u ~ U(-2, 2)), rope N(0,1); in batches so host buffers stay
 * small. */
static dsk_status write_entries(dsk_ctx *ctx, tu_rng *rng, dsk_kv_format f, dsk_scale_rule rule,
                                const dsk_kv_cache *cache, const int32_t *slots, int64_t N) {
  const int64_t ldim = f == DSK_KV_FORMAT_A656 ? 512 : 448, tile = f == DSK_KV_FORMAT_A656 ? 128 : 64;
  const int64_t B = 4096;
  dsk_bf16 *lat = (dsk_bf16 *)malloc((size_t)(B * ldim) * sizeof(dsk_bf16));
  dsk_bf16 *rope = (dsk_bf16 *)malloc((size_t)(B * 64) * sizeof(dsk_bf16));
  void *lat_d = NULL, *rope_d = NULL, *map_d = NULL;
  dsk_status st = lat && rope ? DSK_STATUS_OK : DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) st = dsk_mem_alloc(ctx, &lat_d, (size_t)(B * ldim) * sizeof(dsk_bf16));
  if (st == DSK_STATUS_OK) st = dsk_mem_alloc(ctx, &rope_d, (size_t)(B * 64) * sizeof(dsk_bf16));
  if (st == DSK_STATUS_OK) st = dsk_mem_alloc(ctx, &map_d, (size_t)B * sizeof(int32_t));
  for (int64_t n0 = 0; st == DSK_STATUS_OK && n0 < N; n0 += B) {
    int64_t n = N - n0 < B ? N - n0 : B;
    for (int64_t e = 0; e < n; e++) {
      for (int64_t t0 = 0; t0 < ldim; t0 += tile) {
        double mul = pow(2.0, 4.0 * tu_uniform(rng) - 2.0);
        for (int64_t d = t0; d < t0 + tile; d++) lat[e * ldim + d] = d_bf16((float)(tu_normal(rng) * mul));
      }
      for (int64_t d = 0; d < 64; d++) rope[e * 64 + d] = d_bf16((float)tu_normal(rng));
    }
    st = dsk_mem_upload(ctx, lat_d, lat, (size_t)(n * ldim) * sizeof(dsk_bf16));
    if (st == DSK_STATUS_OK) st = dsk_mem_upload(ctx, rope_d, rope, (size_t)(n * 64) * sizeof(dsk_bf16));
    if (st == DSK_STATUS_OK) st = dsk_mem_upload(ctx, map_d, slots + n0, (size_t)n * sizeof(int32_t));
    if (st == DSK_STATUS_OK) {
      dsk_kv_write_desc w;
      memset(&w, 0, sizeof w);
      w.struct_size = sizeof w;
      w.format = f;
      w.N = n;
      w.latent = (const dsk_bf16 *)lat_d;
      w.latent_stride = ldim;
      w.rope = (const dsk_bf16 *)rope_d;
      w.rope_stride = 64;
      w.slot_mapping = (const int32_t *)map_d;
      w.cache = *cache;
      w.scale_rule = rule;
      st = dsk_kv_write(ctx, &w);
    }
    /* the host buffers are reused by the next batch */
    if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
  }
  dsk_mem_free(ctx, lat_d);
  dsk_mem_free(ctx, rope_d);
  dsk_mem_free(ctx, map_d);
  free(lat);
  free(rope);
  return st;
}

/* A block table [DEMO_REQS, max_blocks]: the blocks of request r that
 * `used(r, b)` says are needed get distinct pages of a pool of `pool` pages,
 * in random order; the others are -1. Returns the pages handed out. */
static int64_t make_block_table(tu_rng *rng, int32_t *bt, int64_t max_blocks, int64_t pool,
                                const int64_t lo_blk[DEMO_REQS], const int64_t hi_blk[DEMO_REQS]) {
  int64_t *perm = (int64_t *)malloc((size_t)pool * sizeof(int64_t));
  if (!perm) return -1;
  tu_permutation(rng, perm, pool);
  int64_t next = 0;
  for (int r = 0; r < DEMO_REQS; r++)
    for (int64_t b = 0; b < max_blocks; b++)
      bt[r * max_blocks + b] = (b >= lo_blk[r] && b <= hi_blk[r] && next < pool) ? (int32_t)perm[next++] : -1;
  free(perm);
  return next;
}

/* Picks k distinct values of [0, n) in random order (k <= n). */
static void pick_distinct(tu_rng *rng, int64_t n, int64_t k, int32_t *out, int64_t *scratch) {
  for (int64_t i = 0; i < n; i++) scratch[i] = i;
  for (int64_t i = 0; i < k; i++) {
    int64_t j = tu_int(rng, i, n - 1);
    int64_t t = scratch[i];
    scratch[i] = scratch[j];
    scratch[j] = t;
    out[i] = (int32_t)scratch[i];
  }
}

/* Plans, runs, times and checks one case. dd: the device descriptor (out,
 * lse, sink, slots set); hd: its host mirror (q, sink, slots, lens, caches). */
static int time_and_check(dsk_ctx *ctx, const dsk_demo_opts *o, demo_mem *mm, dsk_sparse_mla_desc *dd,
                          dsk_sparse_mla_desc *hd, demo_row *row) {
  dsk_ctx_info ci;
  memset(&ci, 0, sizeof ci);
  ci.struct_size = sizeof ci;
  dsk_ctx_get_info(ctx, &ci);
  dsk_status st = DSK_STATUS_OK;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  st = dsk_sparse_mla_decode_plan(ctx, dd, &pi);
  if (st != DSK_STATUS_OK) {
    fprintf(stderr, "demo: %s: plan -> %s: %s\n", row->model, dsk_status_name(st), dsk_last_error());
    return 1;
  }
  row->tactic = pi.tactic.v[0];
  void *ws = pi.workspace_bytes ? dalloc(ctx, mm, (size_t)pi.workspace_bytes, &st) : NULL;
  if (ws && st == DSK_STATUS_OK) st = dsk_mem_set(ctx, ws, 0xFF, (size_t)pi.workspace_bytes);
  dd->workspace = ws;
  dd->workspace_bytes = pi.workspace_bytes;
  int reps = o->reps > 0 ? o->reps : (ci.is_cuda ? 20 : 3);
  double *us = (double *)malloc((size_t)reps * sizeof(double));
  if (!us) return 1;
  /* warm-up, then timed runs (synchronised around each, see the header) */
  if (st == DSK_STATUS_OK) st = dsk_sparse_mla_decode(ctx, dd);
  if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
  for (int i = 0; i < reps && st == DSK_STATUS_OK; i++) {
    st = dsk_ctx_synchronize(ctx, NULL);
    double t0 = tu_now_us();
    if (st == DSK_STATUS_OK) st = dsk_sparse_mla_decode(ctx, dd);
    if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
    us[i] = tu_now_us() - t0;
  }
  if (st != DSK_STATUS_OK) {
    fprintf(stderr, "demo: %s: decode -> %s: %s\n", row->model, dsk_status_name(st), dsk_last_error());
    free(us);
    return 1;
  }
  row->median_us = tu_median(us, reps);
  free(us);

  /* results and slot lists back to the host */
  const int64_t T = dd->T, H = dd->H;
  size_t out_bytes = (size_t)(T * dd->out_stride_t) * sizeof(dsk_bf16);
  size_t lse_bytes = (size_t)(T * dd->lse_stride_t) * sizeof(float);
  dsk_bf16 *out_h = (dsk_bf16 *)malloc(out_bytes);
  float *lse_h = (float *)malloc(lse_bytes);
  double *ref_out = (double *)malloc((size_t)(T * H * 512) * sizeof(double));
  double *ref_lse = (double *)malloc((size_t)(T * H) * sizeof(double));
  int64_t *nvalid = (int64_t *)malloc((size_t)T * sizeof(int64_t));
  int ok = out_h && lse_h && ref_out && ref_lse && nvalid;
  if (ok) ok = dsk_mem_download(ctx, out_h, dd->out, out_bytes) == DSK_STATUS_OK;
  if (ok) ok = dsk_mem_download(ctx, lse_h, dd->lse, lse_bytes) == DSK_STATUS_OK;
  if (ok) {
    hd->out = out_h;
    hd->lse = lse_h;
    ok = mla_oracle_run(hd, ref_out, ref_lse, nvalid) == 0;
  }
  if (ok) {
    int64_t n_att = 0, uniq = 0, cnt[2];
    mla_count_work(hd, &n_att, &uniq, cnt);
    mla_compare(hd, ref_out, ref_lse, nvalid, &row->m);
    row->pass = mla_within_bound(&row->m, DSK_PRECISION_ACCURATE) && row->m.rows_compared == T * H;
    double sec = row->median_us * 1e-6;
    row->gbps = mla_bytes(hd, uniq) / sec * 1e-9;
    row->tflops = mla_flops(hd, n_att) / sec * 1e-12;
  }
  free(out_h);
  free(lse_h);
  free(ref_out);
  free(ref_lse);
  free(nvalid);
  hd->out = NULL;
  hd->lse = NULL;
  return ok ? 0 : 1;
}

/* Context lengths (tokens after this step) and the query positions. */
static void demo_positions(tu_rng *rng, int quick, int64_t seq[DEMO_REQS], int32_t *req, int32_t *pos) {
  const int64_t cmax = quick ? 4096 : 32768;
  for (int r = 0; r < DEMO_REQS; r++) {
    seq[r] = r == 0 ? cmax : tu_int(rng, cmax * 3 / 4, cmax);
    for (int j = 0; j < DEMO_TOK; j++) {
      req[r * DEMO_TOK + j] = r;
      pos[r * DEMO_TOK + j] = (int32_t)(seq[r] - DEMO_TOK + j);
    }
  }
}

static dsk_status slot_build(dsk_ctx *ctx, dsk_slot_list_kind kind, const void *req_d, const void *pos_d,
                             const void *map_d, const void *bt_d, int64_t max_blocks, int64_t pbs, const void *idx_d,
                             int64_t K, int64_t width, void *out_d, void *lens_d) {
  dsk_slot_list_desc s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.kind = kind;
  s.T = DEMO_T;
  s.req = (const int32_t *)req_d;
  s.pos = (const int32_t *)pos_d;
  s.slot_mapping = (const int32_t *)map_d;
  s.block_table.table = (const int32_t *)bt_d;
  s.block_table.stride = max_blocks;
  s.block_table.rows = DEMO_REQS;
  s.block_table.max_blocks = max_blocks;
  s.pbs = pbs;
  s.idx = (const int32_t *)idx_d;
  s.idx_stride = K;
  s.K = K;
  s.window = kind == DSK_SLOTS_SWA ? 128 : 0;
  s.width = width;
  s.out = (int32_t *)out_d;
  s.out_stride = kind == DSK_SLOTS_TOPK || kind == DSK_SLOTS_C4A ? K : width;
  s.lens = (int32_t *)lens_d;
  dsk_status st = dsk_slot_list_build(ctx, &s);
  if (st != DSK_STATUS_OK)
    fprintf(stderr, "demo: dsk_slot_list_build -> %s: %s\n", dsk_status_name(st), dsk_last_error());
  return st;
}

#define TRY(expr)                                                                                  \
  do {                                                                                             \
    if (st == DSK_STATUS_OK) {                                                                     \
      st = (expr);                                                                                 \
      if (st != DSK_STATUS_OK)                                                                     \
        fprintf(stderr, "demo: %s -> %s: %s\n", #expr, dsk_status_name(st), dsk_last_error());     \
    }                                                                                              \
  } while (0)

/* Host buffers of a case, freed together. */
typedef struct demo_host {
  void *p[24];
  int n;
} demo_host;
static void *hmalloc(demo_host *hh, size_t bytes) {
  void *p = hh->n < 24 ? calloc(1, bytes ? bytes : 16) : NULL;
  if (p) hh->p[hh->n++] = p;
  return p;
}
static void hfree(demo_host *hh) {
  for (int i = 0; i < hh->n; i++) free(hh->p[i]);
  hh->n = 0;
}

/* --------------------------------------------------------- DSv4-Flash C4A */
static int demo_v4(dsk_ctx *ctx, const dsk_demo_opts *o, demo_row *row) {
  tu_rng rng = tu_rng_make(o->seed ^ 0x5EED0D54A4ull);
  demo_mem mm = {{0}, 0};
  demo_host hh = {{0}, 0};
  dsk_status st = DSK_STATUS_OK;
  const int64_t cmax = o->quick ? 4096 : 32768;
  const int64_t P = 64, Rb = 584, ps = dsk_kv_canonical_page_stride(DSK_KV_FORMAT_B584, P);
  int64_t seq[DEMO_REQS];
  int32_t req[DEMO_T], pos[DEMO_T], smap[DEMO_T];
  demo_positions(&rng, o->quick, seq, req, pos);
  (void)Rb;

  /* SWA cache: only the pages covering each request's window are allocated */
  const int64_t mb_swa = (cmax + P - 1) / P;
  int64_t lo[DEMO_REQS], hi[DEMO_REQS];
  for (int r = 0; r < DEMO_REQS; r++) {
    int64_t first = seq[r] - DEMO_TOK - 127;
    lo[r] = (first < 0 ? 0 : first) / P;
    hi[r] = (seq[r] - 1) / P;
  }
  const int64_t pool_swa = DEMO_REQS * 4 + 3;
  int32_t *bt_swa = (int32_t *)hmalloc(&hh, (size_t)(DEMO_REQS * mb_swa) * sizeof(int32_t));
  /* C4A cache: every compressed entry of every request (seq/4 of them) */
  const int64_t mb_c = (cmax / 4 + P - 1) / P;
  int64_t clo[DEMO_REQS], chi[DEMO_REQS];
  for (int r = 0; r < DEMO_REQS; r++) {
    clo[r] = 0;
    chi[r] = (seq[r] / 4 - 1) / P;
  }
  const int64_t pool_c = DEMO_REQS * mb_c + 5;
  int32_t *bt_c = (int32_t *)hmalloc(&hh, (size_t)(DEMO_REQS * mb_c) * sizeof(int32_t));
  if (!bt_swa || !bt_c) st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) {
    make_block_table(&rng, bt_swa, mb_swa, pool_swa, lo, hi);
    make_block_table(&rng, bt_c, mb_c, pool_c, clo, chi);
  }
  dsk_kv_cache swa = {NULL, P, ps, pool_swa}, cc = {NULL, P, ps, pool_c};
  swa.base = dalloc(ctx, &mm, (size_t)(pool_swa * ps), &st);
  cc.base = dalloc(ctx, &mm, (size_t)(pool_c * ps), &st);
  TRY(dsk_mem_set(ctx, swa.base, 0xFF, (size_t)(pool_swa * ps)));
  TRY(dsk_mem_set(ctx, cc.base, 0xFF, (size_t)(pool_c * ps)));

  /* write the SWA tokens of the windows and all compressed entries */
  int64_t nsw = 0, ncw = 0;
  int32_t *wsl = (int32_t *)hmalloc(&hh, (size_t)(DEMO_REQS * (cmax / 4 + 256)) * sizeof(int32_t));
  if (!wsl && st == DSK_STATUS_OK) st = DSK_STATUS_OUT_OF_MEMORY;
  for (int r = 0; r < DEMO_REQS && st == DSK_STATUS_OK; r++)
    for (int64_t p = lo[r] * P; p < seq[r]; p++) wsl[nsw++] = bt_swa[r * mb_swa + p / P] * (int32_t)P + (int32_t)(p % P);
  TRY(write_entries(ctx, &rng, DSK_KV_FORMAT_B584, DSK_SCALE_POW2, &swa, wsl, nsw));
  for (int r = 0; r < DEMO_REQS && st == DSK_STATUS_OK; r++)
    for (int64_t c = 0; c < seq[r] / 4; c++) wsl[ncw++] = bt_c[r * mb_c + c / P] * (int32_t)P + (int32_t)(c % P);
  TRY(write_entries(ctx, &rng, DSK_KV_FORMAT_B584, DSK_SCALE_POW2, &cc, wsl, ncw));
  for (int t = 0; t < DEMO_T; t++) smap[t] = bt_swa[req[t] * mb_swa + pos[t] / P] * (int32_t)P + pos[t] % (int32_t)P;

  /* the indexer's choice: 512 distinct causal compressed entries per token */
  const int64_t K = 512;
  int32_t *idx = (int32_t *)hmalloc(&hh, (size_t)(DEMO_T * K) * sizeof(int32_t));
  int64_t *scr = (int64_t *)hmalloc(&hh, (size_t)(cmax / 4 + 1) * sizeof(int64_t));
  if ((!idx || !scr) && st == DSK_STATUS_OK) st = DSK_STATUS_OUT_OF_MEMORY;
  for (int t = 0; t < DEMO_T && st == DSK_STATUS_OK; t++) {
    int64_t n = (pos[t] + 1) / 4, k = n < K ? n : K;
    pick_distinct(&rng, n, k, idx + t * K, scr);
    for (int64_t j = k; j < K; j++) idx[t * K + j] = -1;
  }
  void *req_d = dput(ctx, &mm, req, sizeof req, &st), *pos_d = dput(ctx, &mm, pos, sizeof pos, &st);
  void *map_d = dput(ctx, &mm, smap, sizeof smap, &st);
  void *bts_d = dput(ctx, &mm, bt_swa, (size_t)(DEMO_REQS * mb_swa) * sizeof(int32_t), &st);
  void *btc_d = dput(ctx, &mm, bt_c, (size_t)(DEMO_REQS * mb_c) * sizeof(int32_t), &st);
  void *idx_d = dput(ctx, &mm, idx, (size_t)(DEMO_T * K) * sizeof(int32_t), &st);
  void *s0_d = dalloc(ctx, &mm, (size_t)(DEMO_T * 128) * sizeof(int32_t), &st);
  void *l0_d = dalloc(ctx, &mm, DEMO_T * sizeof(int32_t), &st);
  void *s1_d = dalloc(ctx, &mm, (size_t)(DEMO_T * K) * sizeof(int32_t), &st);
  void *l1_d = dalloc(ctx, &mm, DEMO_T * sizeof(int32_t), &st);
  TRY(slot_build(ctx, DSK_SLOTS_SWA, req_d, pos_d, map_d, bts_d, mb_swa, P, NULL, 0, 128, s0_d, l0_d));
  TRY(slot_build(ctx, DSK_SLOTS_C4A, req_d, pos_d, map_d, btc_d, mb_c, P, idx_d, K, 0, s1_d, l1_d));

  /* q, sink, out, lse */
  const int64_t H = DEMO_H, D = 512;
  dsk_bf16 *q = (dsk_bf16 *)hmalloc(&hh, (size_t)(DEMO_T * H * D) * sizeof(dsk_bf16));
  float *sink = (float *)hmalloc(&hh, (size_t)H * sizeof(float));
  if ((!q || !sink) && st == DSK_STATUS_OK) st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) {
    for (int64_t i = 0; i < DEMO_T * H * D; i++) q[i] = d_bf16((float)tu_normal(&rng));
    for (int64_t h = 0; h < H; h++) sink[h] = (float)tu_normal(&rng);
  }
  dsk_sparse_mla_desc dd;
  memset(&dd, 0, sizeof dd);
  dd.struct_size = sizeof dd;
  dd.format = DSK_KV_FORMAT_B584;
  dd.T = DEMO_T;
  dd.H = H;
  dd.q = (const dsk_bf16 *)dput(ctx, &mm, q, (size_t)(DEMO_T * H * D) * sizeof(dsk_bf16), &st);
  dd.q_stride_h = D;
  dd.q_stride_t = H * D;
  dd.sm_scale = (float)(1.0 / sqrt(512.0));
  dd.nseg = 2;
  dd.seg[0].cache = swa;
  dd.seg[0].slots = (const int32_t *)s0_d;
  dd.seg[0].slots_stride_t = 128;
  dd.seg[0].width = 128;
  dd.seg[0].lens = (const int32_t *)l0_d;
  dd.seg[1].cache = cc;
  dd.seg[1].slots = (const int32_t *)s1_d;
  dd.seg[1].slots_stride_t = K;
  dd.seg[1].width = K;
  dd.seg[1].lens = (const int32_t *)l1_d;
  dd.sink = (const float *)dput(ctx, &mm, sink, (size_t)H * sizeof(float), &st);
  dd.out = (dsk_bf16 *)dalloc(ctx, &mm, (size_t)(DEMO_T * H * 512) * sizeof(dsk_bf16), &st);
  dd.out_stride_h = 512;
  dd.out_stride_t = H * 512;
  dd.lse = (float *)dalloc(ctx, &mm, (size_t)(DEMO_T * H) * sizeof(float), &st);
  dd.lse_stride_h = 1;
  dd.lse_stride_t = H;
  dd.precision = DSK_PRECISION_ACCURATE;

  /* host mirror: slot lists and caches back from the device */
  dsk_sparse_mla_desc hd = dd;
  int32_t *s0 = (int32_t *)hmalloc(&hh, (size_t)(DEMO_T * 128) * sizeof(int32_t));
  int32_t *l0 = (int32_t *)hmalloc(&hh, DEMO_T * sizeof(int32_t));
  int32_t *s1 = (int32_t *)hmalloc(&hh, (size_t)(DEMO_T * K) * sizeof(int32_t));
  int32_t *l1 = (int32_t *)hmalloc(&hh, DEMO_T * sizeof(int32_t));
  void *swa_h = hmalloc(&hh, (size_t)(pool_swa * ps)), *cc_h = hmalloc(&hh, (size_t)(pool_c * ps));
  if ((!s0 || !l0 || !s1 || !l1 || !swa_h || !cc_h) && st == DSK_STATUS_OK) st = DSK_STATUS_OUT_OF_MEMORY;
  TRY(dsk_ctx_synchronize(ctx, NULL));
  TRY(dsk_mem_download(ctx, s0, s0_d, (size_t)(DEMO_T * 128) * sizeof(int32_t)));
  TRY(dsk_mem_download(ctx, l0, l0_d, DEMO_T * sizeof(int32_t)));
  TRY(dsk_mem_download(ctx, s1, s1_d, (size_t)(DEMO_T * K) * sizeof(int32_t)));
  TRY(dsk_mem_download(ctx, l1, l1_d, DEMO_T * sizeof(int32_t)));
  TRY(dsk_mem_download(ctx, swa_h, swa.base, (size_t)(pool_swa * ps)));
  TRY(dsk_mem_download(ctx, cc_h, cc.base, (size_t)(pool_c * ps)));
  hd.q = q;
  hd.sink = sink;
  hd.seg[0].cache.base = swa_h;
  hd.seg[0].slots = s0;
  hd.seg[0].lens = l0;
  hd.seg[1].cache.base = cc_h;
  hd.seg[1].slots = s1;
  hd.seg[1].lens = l1;

  snprintf(row->widths, sizeof row->widths, "128+%lld", (long long)K);
  int rc = 1;
  if (st == DSK_STATUS_OK) rc = time_and_check(ctx, o, &mm, &dd, &hd, row);
  demo_free(ctx, &mm);
  hfree(&hh);
  return rc;
}

/* ---------------------------------------------------------------- GLM-5.1 */
static int demo_glm(dsk_ctx *ctx, const dsk_demo_opts *o, demo_row *row) {
  tu_rng rng = tu_rng_make(o->seed ^ 0x61A5F00DC0DEull);
  demo_mem mm = {{0}, 0};
  demo_host hh = {{0}, 0};
  dsk_status st = DSK_STATUS_OK;
  const int64_t cmax = o->quick ? 4096 : 32768;
  const int64_t P = 64, ps = dsk_kv_canonical_page_stride(DSK_KV_FORMAT_A656, P);
  int64_t seq[DEMO_REQS];
  int32_t req[DEMO_T], pos[DEMO_T], smap[DEMO_T];
  demo_positions(&rng, o->quick, seq, req, pos);

  /* main cache: every token of every request */
  const int64_t mb = (cmax + P - 1) / P;
  int64_t lo[DEMO_REQS], hi[DEMO_REQS];
  for (int r = 0; r < DEMO_REQS; r++) {
    lo[r] = 0;
    hi[r] = (seq[r] - 1) / P;
  }
  const int64_t pool = DEMO_REQS * mb + 7;
  int32_t *bt = (int32_t *)hmalloc(&hh, (size_t)(DEMO_REQS * mb) * sizeof(int32_t));
  int32_t *wsl = (int32_t *)hmalloc(&hh, (size_t)(DEMO_REQS * cmax) * sizeof(int32_t));
  if (!bt || !wsl) st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) make_block_table(&rng, bt, mb, pool, lo, hi);
  dsk_kv_cache kc = {NULL, P, ps, pool};
  kc.base = dalloc(ctx, &mm, (size_t)(pool * ps), &st);
  TRY(dsk_mem_set(ctx, kc.base, 0xFF, (size_t)(pool * ps)));
  int64_t nw = 0;
  for (int r = 0; r < DEMO_REQS && st == DSK_STATUS_OK; r++)
    for (int64_t p = 0; p < seq[r]; p++) wsl[nw++] = bt[r * mb + p / P] * (int32_t)P + (int32_t)(p % P);
  TRY(write_entries(ctx, &rng, DSK_KV_FORMAT_A656, DSK_SCALE_RAW, &kc, wsl, nw));
  for (int t = 0; t < DEMO_T; t++) smap[t] = bt[req[t] * mb + pos[t] / P] * (int32_t)P + pos[t] % (int32_t)P;

  /* the indexer's top-2048: distinct causal positions (<= pos) */
  const int64_t K = 2048;
  int32_t *idx = (int32_t *)hmalloc(&hh, (size_t)(DEMO_T * K) * sizeof(int32_t));
  int64_t *scr = (int64_t *)hmalloc(&hh, (size_t)(cmax + 1) * sizeof(int64_t));
  if ((!idx || !scr) && st == DSK_STATUS_OK) st = DSK_STATUS_OUT_OF_MEMORY;
  for (int t = 0; t < DEMO_T && st == DSK_STATUS_OK; t++) {
    int64_t n = pos[t] + 1, k = n < K ? n : K;
    pick_distinct(&rng, n, k, idx + t * K, scr);
    for (int64_t j = k; j < K; j++) idx[t * K + j] = -1;
  }
  void *req_d = dput(ctx, &mm, req, sizeof req, &st), *pos_d = dput(ctx, &mm, pos, sizeof pos, &st);
  void *map_d = dput(ctx, &mm, smap, sizeof smap, &st);
  void *bt_d = dput(ctx, &mm, bt, (size_t)(DEMO_REQS * mb) * sizeof(int32_t), &st);
  void *idx_d = dput(ctx, &mm, idx, (size_t)(DEMO_T * K) * sizeof(int32_t), &st);
  void *s_d = dalloc(ctx, &mm, (size_t)(DEMO_T * K) * sizeof(int32_t), &st);
  TRY(slot_build(ctx, DSK_SLOTS_TOPK, req_d, pos_d, map_d, bt_d, mb, P, idx_d, K, 0, s_d, NULL));

  const int64_t H = DEMO_H, D = 576;
  dsk_bf16 *q = (dsk_bf16 *)hmalloc(&hh, (size_t)(DEMO_T * H * D) * sizeof(dsk_bf16));
  if (!q && st == DSK_STATUS_OK) st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK)
    for (int64_t i = 0; i < DEMO_T * H * D; i++) q[i] = d_bf16((float)tu_normal(&rng));
  dsk_sparse_mla_desc dd;
  memset(&dd, 0, sizeof dd);
  dd.struct_size = sizeof dd;
  dd.format = DSK_KV_FORMAT_A656;
  dd.T = DEMO_T;
  dd.H = H;
  dd.q = (const dsk_bf16 *)dput(ctx, &mm, q, (size_t)(DEMO_T * H * D) * sizeof(dsk_bf16), &st);
  dd.q_stride_h = D;
  dd.q_stride_t = H * D;
  dd.sm_scale = 0.0625f;
  dd.nseg = 1;
  dd.seg[0].cache = kc;
  dd.seg[0].slots = (const int32_t *)s_d;
  dd.seg[0].slots_stride_t = K;
  dd.seg[0].width = K;
  dd.seg[0].lens = NULL; /* indices.md §2: the kernel skips the -1 entries */
  dd.out = (dsk_bf16 *)dalloc(ctx, &mm, (size_t)(DEMO_T * H * 512) * sizeof(dsk_bf16), &st);
  dd.out_stride_h = 512;
  dd.out_stride_t = H * 512;
  dd.lse = (float *)dalloc(ctx, &mm, (size_t)(DEMO_T * H) * sizeof(float), &st);
  dd.lse_stride_h = 1;
  dd.lse_stride_t = H;
  dd.precision = DSK_PRECISION_ACCURATE;

  dsk_sparse_mla_desc hd = dd;
  int32_t *s = (int32_t *)hmalloc(&hh, (size_t)(DEMO_T * K) * sizeof(int32_t));
  void *kc_h = hmalloc(&hh, (size_t)(pool * ps));
  if ((!s || !kc_h) && st == DSK_STATUS_OK) st = DSK_STATUS_OUT_OF_MEMORY;
  TRY(dsk_ctx_synchronize(ctx, NULL));
  TRY(dsk_mem_download(ctx, s, s_d, (size_t)(DEMO_T * K) * sizeof(int32_t)));
  TRY(dsk_mem_download(ctx, kc_h, kc.base, (size_t)(pool * ps)));
  hd.q = q;
  hd.seg[0].cache.base = kc_h;
  hd.seg[0].slots = s;

  snprintf(row->widths, sizeof row->widths, "%lld", (long long)K);
  int rc = 1;
  if (st == DSK_STATUS_OK) rc = time_and_check(ctx, o, &mm, &dd, &hd, row);
  demo_free(ctx, &mm);
  hfree(&hh);
  return rc;
}

/* ----------------------------------------------- rows after the decode rows */
/* The mHC and indexer rows: the decode rows' columns (as text, "-" where a
 * column does not apply) and the check's detail after the result. */
typedef struct demo_xrow {
  const char *model;
  char H[8], widths[16], cpb[8];
  double median_us, gbps, tflops, rel_l2, max_abs;
  char note[192];
  int pass;
} demo_xrow;

static dsk_ctx *demo_ref_ctx(void) {
  dsk_ctx_opts ro;
  dsk_ctx_opts_init(&ro);
  ro.device = "cpu";
  ro.backend = "cpu-ref";
  dsk_ctx *ref = NULL;
  dsk_status st = dsk_ctx_create(&ref, &ro);
  if (st != DSK_STATUS_OK) fprintf(stderr, "demo: cpu-ref context: %s: %s\n", dsk_status_name(st), dsk_last_error());
  return ref;
}

/* Times `fn` as the decode rows are timed: one warm-up, then reps runs each
 * bracketed by dsk_ctx_synchronize and read with the host clock. */
static dsk_status demo_time(dsk_ctx *ctx, int reps, dsk_status (*fn)(dsk_ctx *, void *), void *user, double *med) {
  double *us = (double *)malloc((size_t)reps * sizeof(double));
  if (!us) return DSK_STATUS_OUT_OF_MEMORY;
  dsk_status st = fn(ctx, user);
  if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
  for (int i = 0; i < reps && st == DSK_STATUS_OK; i++) {
    st = dsk_ctx_synchronize(ctx, NULL);
    double t0 = tu_now_us();
    if (st == DSK_STATUS_OK) st = fn(ctx, user);
    if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
    us[i] = tu_now_us() - t0;
  }
  if (st == DSK_STATUS_OK) *med = tu_median(us, reps);
  free(us);
  return st;
}

/* ---------------------------------------------------------- DSv4-Flash mHC */
#define DEMO_MHC_D 4096

typedef struct demo_mhc_run {
  dsk_mhc_post_prenorm_desc pp;
  dsk_mhc_pre_desc pre;
} demo_mhc_run;

/* one sublayer as a model runs it: the previous sublayer's post fused with
 * this sublayer's prenorm, then pre */
static dsk_status demo_mhc_once(dsk_ctx *ctx, void *user) {
  const demo_mhc_run *r = (const demo_mhc_run *)user;
  dsk_status st = dsk_mhc_post_prenorm(ctx, &r->pp);
  if (st == DSK_STATUS_OK) st = dsk_mhc_pre(ctx, &r->pre);
  return st;
}

/* Descriptors of one sublayer on context memory (pointers of that context):
 * post_prenorm (sub, R, post0, C0, fn -> Ro, part), then pre on Ro (its
 * partials part; -> y, post, C, prew). */
static void demo_mhc_descs(demo_mhc_run *r, int64_t T, int64_t D, int32_t S, const dsk_bf16 *R, const float *fn,
                           const float *scale, const float *base, const dsk_bf16 *sub, const float *post0,
                           const float *C0, float *part, dsk_bf16 *y, float *post, float *C, float *prew,
                           dsk_bf16 *Ro) {
  const int64_t nD = 4 * D;
  dsk_mhc_post_prenorm_desc_init(&r->pp);
  r->pp.T = T;
  r->pp.D = D;
  r->pp.nD = nD;
  r->pp.out = sub;
  r->pp.out_stride = D;
  r->pp.R = R;
  r->pp.R_stride = nD;
  r->pp.post = post0;
  r->pp.C = C0;
  r->pp.R_out = Ro;
  r->pp.R_out_stride = nD;
  r->pp.fn = fn;
  r->pp.fixed_splits = S;
  r->pp.partials = part;
  r->pp.partials_bytes = (int64_t)S * T * 100;
  dsk_mhc_pre_desc_init(&r->pre);
  r->pre.T = T;
  r->pre.D = D;
  r->pre.nD = nD;
  r->pre.fixed_splits = S;
  r->pre.partials = part;
  r->pre.partials_bytes = (int64_t)S * T * 100;
  r->pre.R = Ro;
  r->pre.R_stride = nD;
  r->pre.scale = scale;
  r->pre.base = base;
  r->pre.y = y;
  r->pre.y_stride = D;
  r->pre.post = post;
  r->pre.C = C;
  r->pre.pre_w = prew;
}

static double demo_ulp_bf16(double v) {
  v = fabs(v);
  return v < 0x1p-126 ? 0x1p-133 : ldexp(1.0, ilogb(v) - 7);
}

/* Inputs as check_mhc.c: R, the sublayer output and fn normal; the previous
 * sublayer's post in (0, 2) and C a positive matrix with rows summing to 1
 * (what pre produces). The reference runs on the cpu-ref with the split
 * count the device resolved, in two checks as check_mhc.c's fused rows:
 * the post step on the same inputs (R'), and prenorm + pre on the device's
 * R' (y, post, C, pre weights: what the device's partials fed). Bounds of
 * spec/mhc.md §7 (FP32):
 *   pre weights, post, C   abs <= 1e-5
 *   y                      abs <= ulp_bf16(ref) + 2e-5 * sum_i |R'_i|
 *   R'                     abs <= ulp_bf16(ref) + 2e-5 * (|out| + sum_i |R_i|) */
static int demo_mhc(dsk_ctx *ctx, dsk_ctx *ref, const dsk_demo_opts *o, int reps, demo_xrow *row) {
  tu_rng rng = tu_rng_make(o->seed ^ 0x3AC0FFEEull);
  const int64_t T = DEMO_T, D = DEMO_MHC_D, nD = 4 * D;
  const size_t Rb = (size_t)(T * nD) * sizeof(dsk_bf16), yb = (size_t)(T * D) * sizeof(dsk_bf16);
  const size_t fnb = (size_t)(24 * nD) * sizeof(float);
  demo_mem mm = {{0}, 0};
  demo_host hh = {{0}, 0};
  dsk_status st = DSK_STATUS_OK;
  snprintf(row->widths, sizeof row->widths, "D%d", DEMO_MHC_D);
  snprintf(row->H, sizeof row->H, "-");
  dsk_bf16 *R = (dsk_bf16 *)hmalloc(&hh, Rb), *sub = (dsk_bf16 *)hmalloc(&hh, yb);
  float *fn = (float *)hmalloc(&hh, fnb);
  float *post0 = (float *)hmalloc(&hh, (size_t)T * 16), *C0 = (float *)hmalloc(&hh, (size_t)T * 64);
  float scale[3] = {1.0f, 1.0f, 0.25f}, base[24];
  /* results: [0] the context's, [1] the reference's */
  dsk_bf16 *y[2], *Ro[2];
  float *post[2], *C[2], *prew[2];
  for (int k = 0; k < 2; k++) {
    y[k] = (dsk_bf16 *)hmalloc(&hh, yb);
    Ro[k] = (dsk_bf16 *)hmalloc(&hh, Rb);
    post[k] = (float *)hmalloc(&hh, (size_t)T * 16);
    C[k] = (float *)hmalloc(&hh, (size_t)T * 64);
    prew[k] = (float *)hmalloc(&hh, (size_t)T * 16);
  }
  if (!R || !sub || !fn || !post0 || !C0 || !y[1] || !Ro[1] || !post[1] || !C[1] || !prew[1])
    st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) {
    tu_fill_bf16_normal(&rng, R, (size_t)(T * nD), 1.0);
    tu_fill_bf16_normal(&rng, sub, (size_t)(T * D), 1.0);
    for (int64_t i = 0; i < 24 * nD; i++) fn[i] = (float)(tu_normal(&rng) / sqrt((double)nD));
    for (int j = 0; j < 24; j++) base[j] = (float)(tu_uniform(&rng) - 0.5);
    for (int64_t t = 0; t < T; t++)
      for (int i = 0; i < 4; i++) {
        post0[t * 4 + i] = (float)(2.0 / (1.0 + exp(-2.0 * tu_normal(&rng))));
        double w[4], sw = 0;
        for (int j = 0; j < 4; j++) sw += w[j] = 0.05 + tu_uniform(&rng);
        for (int j = 0; j < 4; j++) C0[t * 16 + i * 4 + j] = (float)(w[j] / sw);
      }
  }

  /* the context: plan (S), poison the outputs, time, download */
  const dsk_bf16 *dR = (const dsk_bf16 *)dput(ctx, &mm, R, Rb, &st);
  const dsk_bf16 *dsub = (const dsk_bf16 *)dput(ctx, &mm, sub, yb, &st);
  const float *dfn = (const float *)dput(ctx, &mm, fn, fnb, &st);
  const float *dsc = (const float *)dput(ctx, &mm, scale, sizeof scale, &st);
  const float *dba = (const float *)dput(ctx, &mm, base, sizeof base, &st);
  const float *dpost0 = (const float *)dput(ctx, &mm, post0, (size_t)T * 16, &st);
  const float *dC0 = (const float *)dput(ctx, &mm, C0, (size_t)T * 64, &st);
  dsk_bf16 *dy = (dsk_bf16 *)dalloc(ctx, &mm, yb, &st), *dRo = (dsk_bf16 *)dalloc(ctx, &mm, Rb, &st);
  int32_t S = 0;
  if (st == DSK_STATUS_OK) {
    dsk_mhc_post_prenorm_desc pd;
    dsk_mhc_post_prenorm_desc_init(&pd);
    pd.T = T;
    pd.D = D;
    pd.nD = nD;
    pd.out = dsub;
    pd.out_stride = D;
    pd.R = dR;
    pd.R_stride = nD;
    pd.post = dpost0;
    pd.C = dC0;
    pd.R_out = dRo;
    pd.R_out_stride = nD;
    pd.fn = dfn;
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    TRY(dsk_mhc_post_prenorm_plan(ctx, &pd, &pi));
    S = pi.tactic.v[0];
  }
  snprintf(row->cpb, sizeof row->cpb, "%d", (int)S);
  const size_t pb = (size_t)S * (size_t)T * 100;
  float *dpart = (float *)dalloc(ctx, &mm, pb, &st);
  float *dpost = (float *)dalloc(ctx, &mm, (size_t)T * 16, &st), *dC = (float *)dalloc(ctx, &mm, (size_t)T * 64, &st);
  float *dprew = (float *)dalloc(ctx, &mm, (size_t)T * 16, &st);
  void *pz[6] = {dpart, dy, dRo, dpost, dC, dprew};
  size_t pzb[6] = {pb, yb, Rb, (size_t)T * 16, (size_t)T * 64, (size_t)T * 16};
  for (int i = 0; i < 6; i++) TRY(dsk_mem_set(ctx, pz[i], 0xFF, pzb[i]));
  demo_mhc_run run;
  demo_mhc_descs(&run, T, D, S, dR, dfn, dsc, dba, dsub, dpost0, dC0, dpart, dy, dpost, dC, dprew, dRo);
  TRY(demo_time(ctx, reps, demo_mhc_once, &run, &row->median_us));
  TRY(dsk_mem_download(ctx, y[0], dy, yb));
  TRY(dsk_mem_download(ctx, Ro[0], dRo, Rb));
  TRY(dsk_mem_download(ctx, post[0], dpost, (size_t)T * 16));
  TRY(dsk_mem_download(ctx, C[0], dC, (size_t)T * 64));
  TRY(dsk_mem_download(ctx, prew[0], dprew, (size_t)T * 16));
  demo_free(ctx, &mm);

  /* the reference (host memory), same S: the post step on the same inputs,
   * then prenorm + pre on the device's R' */
  float *hpart = (float *)hmalloc(&hh, pb);
  if (!hpart && st == DSK_STATUS_OK) st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) {
    dsk_mhc_post_desc po;
    dsk_mhc_post_desc_init(&po);
    po.T = T;
    po.D = D;
    po.out = sub;
    po.out_stride = D;
    po.R = R;
    po.R_stride = nD;
    po.post = post0;
    po.C = C0;
    po.R_out = Ro[1];
    po.R_out_stride = nD;
    TRY(dsk_mhc_post(ref, &po));
    dsk_mhc_prenorm_desc pn;
    dsk_mhc_prenorm_desc_init(&pn);
    pn.T = T;
    pn.D = D;
    pn.nD = nD;
    pn.R = Ro[0];
    pn.R_stride = nD;
    pn.fn = fn;
    pn.fixed_splits = S;
    pn.partials = hpart;
    pn.partials_bytes = (int64_t)pb;
    TRY(dsk_mhc_prenorm(ref, &pn));
    demo_mhc_run rr;
    demo_mhc_descs(&rr, T, D, S, R, fn, scale, base, sub, post0, C0, hpart, y[1], post[1], C[1], prew[1], Ro[0]);
    TRY(dsk_mhc_pre(ref, &rr.pre));
    TRY(dsk_ctx_synchronize(ref, NULL));
  }
  int rc = 1;
  if (st == DSK_STATUS_OK) {
    double es = 0, ry = 0, rr = 0, num = 0, den = 0, mabs = 0;
    for (int64_t i = 0; i < T * 4; i++) {
      es = fmax(es, fabs((double)post[0][i] - post[1][i]));
      es = fmax(es, fabs((double)prew[0][i] - prew[1][i]));
      if (post[0][i] != post[0][i] || prew[0][i] != prew[0][i]) es = INFINITY;
    }
    for (int64_t i = 0; i < T * 16; i++) {
      es = fmax(es, fabs((double)C[0][i] - C[1][i]));
      if (C[0][i] != C[0][i]) es = INFINITY;
    }
    for (int64_t t = 0; t < T; t++)
      for (int64_t k = 0; k < D; k++) {
        double mag = 0, mag1 = 0;
        for (int i = 0; i < 4; i++) {
          mag += fabs((double)dsk_bf16_to_f32(R[t * nD + i * D + k]));
          mag1 += fabs((double)dsk_bf16_to_f32(Ro[0][t * nD + i * D + k]));
        }
        const int64_t e = t * D + k;
        double rv = dsk_bf16_to_f32(y[1][e]), gv = dsk_bf16_to_f32(y[0][e]), d = fabs(gv - rv);
        ry = d != d ? INFINITY : fmax(ry, d / (demo_ulp_bf16(rv) + 2e-5 * mag1));
        const double om = mag + fabs((double)dsk_bf16_to_f32(sub[e]));
        for (int j = 0; j < 4; j++) {
          const int64_t f = t * nD + j * D + k;
          rv = dsk_bf16_to_f32(Ro[1][f]);
          gv = dsk_bf16_to_f32(Ro[0][f]);
          d = fabs(gv - rv);
          rr = d != d ? INFINITY : fmax(rr, d / (demo_ulp_bf16(rv) + 2e-5 * om));
          mabs = d != d ? INFINITY : fmax(mabs, d);
          num += d * d;
          den += rv * rv;
        }
      }
    row->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    row->max_abs = mabs;
    row->pass = es <= 1e-5 && ry <= 1.0 && rr <= 1.0;
    const double sec = row->median_us * 1e-6;
    /* fn; R read, R' written, R' read by pre; out read, y written; post, C,
     * the partials' and the small outputs */
    const double bytes = 24.0 * nD * 4 + 3.0 * T * nD * 2 + 2.0 * T * D * 2 + T * 80.0 + 2.0 * S * T * 100;
    const double flop = 2.0 * T * nD * 25 + 2.0 * T * D * 4 + 2.0 * T * nD * 5;
    row->gbps = sec > 0 ? bytes / sec * 1e-9 : 0;
    row->tflops = sec > 0 ? flop / sec * 1e-12 : 0;
    snprintf(row->note, sizeof row->note, "pre/post/C %.1e (<= 1e-5), err/bound y %.3f R' %.3f (<= 1)", es, ry, rr);
    rc = 0;
  }
  hfree(&hh);
  return rc;
}

/* ----------------------------------------------------- DSv4-Flash indexer */
typedef struct demo_idx_run {
  dsk_indexer_logits_desc lg;
  dsk_topk_desc tk;
} demo_idx_run;

static dsk_status demo_idx_once(dsk_ctx *ctx, void *user) {
  const demo_idx_run *r = (const demo_idx_run *)user;
  dsk_status st = dsk_indexer_logits(ctx, &r->lg);
  if (st == DSK_STATUS_OK) st = dsk_topk(ctx, &r->tk);
  return st;
}

/* The C4A layer's indexer for the decode rows' 4 requests x 4 tokens: keys
 * of every compressed entry of each request (N(0,1) x 2^u bf16 per entry,
 * u in -4..4, quantised by dsk_kv_write), q e4m3 of N(0,1) x 2^u (u in 2..7)
 * with scales (1 + U) 2^-(5..9), weights N(0, 0.1), as check_indexer.c. */
static int demo_indexer(dsk_ctx *ctx, dsk_ctx *ref, const dsk_demo_opts *o, int reps, demo_xrow *row) {
  tu_rng rng = tu_rng_make(o->seed ^ 0x1D3E4C4Aull);
  const int64_t T = DEMO_T, H = DEMO_H, ratio = 4, P = 64, K = 512;
  int64_t seq[DEMO_REQS];
  int32_t req[DEMO_T], pos[DEMO_T];
  demo_positions(&rng, o->quick, seq, req, pos);
  snprintf(row->H, sizeof row->H, "%d", DEMO_H);
  snprintf(row->widths, sizeof row->widths, "%lld", (long long)K);
  snprintf(row->cpb, sizeof row->cpb, "-");

  dsk_idx_host h;
  memset(&h, 0, sizeof h);
  dsk_idx_dev dv, dr;
  memset(&dv, 0, sizeof dv);
  memset(&dr, 0, sizeof dr);
  h.c.name = "demo";
  h.c.T = T;
  h.c.H = H;
  h.c.ratio = ratio;
  h.c.pbs = P;
  h.c.R = DEMO_REQS;
  h.c.K = K;
  int64_t maxe = 0, pages = 0;
  h.req_len = (int64_t *)calloc(DEMO_REQS, sizeof(int64_t));
  int ok = h.req_len != NULL;
  for (int r = 0; ok && r < DEMO_REQS; r++) {
    h.req_len[r] = seq[r] / ratio;
    if (h.req_len[r] > maxe) maxe = h.req_len[r];
    pages += (h.req_len[r] + P - 1) / P;
  }
  h.c.max_len = maxe;
  h.W = maxe;
  h.q_stride_h = 128;
  h.q_stride_t = H * 128;
  h.qs_stride = H;
  h.w_stride = H;
  h.bt_rows = DEMO_REQS;
  h.bt_max_blocks = (maxe + P - 1) / P;
  h.bt_stride = h.bt_max_blocks;
  h.num_pages = pages + 5;
  h.page_stride = dsk_kv_canonical_page_stride(DSK_KV_FORMAT_IDXK132, P);
  h.scale_rule = DSK_SCALE_POW2;
  h.req = (int32_t *)malloc(sizeof req);
  h.pos = (int32_t *)malloc(sizeof pos);
  h.sm = (int32_t *)malloc(sizeof pos);
  h.bt = (int32_t *)malloc((size_t)(h.bt_rows * h.bt_stride) * sizeof(int32_t));
  h.q = (uint8_t *)malloc((size_t)(T * h.q_stride_t));
  h.qs = (float *)malloc((size_t)(T * H) * sizeof(float));
  h.w = (float *)malloc((size_t)(T * H) * sizeof(float));
  h.latent = (dsk_bf16 *)malloc((size_t)(pages * P) * 128 * sizeof(dsk_bf16));
  h.wslots = (int32_t *)malloc((size_t)(pages * P) * sizeof(int32_t));
  ok = ok && h.req && h.pos && h.sm && h.bt && h.q && h.qs && h.w && h.latent && h.wslots;
  if (ok) {
    memcpy(h.req, req, sizeof req);
    memcpy(h.pos, pos, sizeof pos);
    for (int t = 0; t < DEMO_T; t++) h.sm[t] = t;
    int64_t lo[DEMO_REQS], hi[DEMO_REQS];
    for (int r = 0; r < DEMO_REQS; r++) {
      lo[r] = 0;
      hi[r] = (h.req_len[r] - 1) / P;
    }
    make_block_table(&rng, h.bt, h.bt_max_blocks, h.num_pages, lo, hi);
    for (int r = 0; r < DEMO_REQS; r++)
      for (int64_t s = 0; s < h.req_len[r]; s++) {
        tu_fill_bf16_normal(&rng, h.latent + h.N * 128, 128, ldexp(1.0, (int)tu_int(&rng, -4, 4)));
        h.wslots[h.N++] = h.bt[r * h.bt_stride + s / P] * (int32_t)P + (int32_t)(s % P);
      }
    for (int64_t i = 0; i < T * H; i++) {
      uint8_t *qr = h.q + i * 128;
      const double sig = ldexp(1.0, (int)tu_int(&rng, 2, 7));
      for (int d = 0; d < 128; d++) qr[d] = dsk_e4m3_from_f32((float)(tu_normal(&rng) * sig));
      h.qs[i] = (float)ldexp(1.0 + tu_uniform(&rng), -(int)tu_int(&rng, 5, 9));
      h.w[i] = (float)(tu_normal(&rng) * 0.1);
    }
  }
  /* the cache is written on the context, its bytes uploaded to the reference */
  if (ok) ok = dsk_idx_dev_make(ctx, &h, NULL, &dv) == 0 && dsk_idx_dev_make(ref, &h, h.cache, &dr) == 0;
  if (!ok) fprintf(stderr, "demo: indexer scene: %s\n", dsk_last_error());

  const int64_t W = h.W;
  const size_t ob = (size_t)(T * W) * sizeof(float);
  float *lg = (float *)malloc(ob), *lr = (float *)malloc(ob);
  int32_t *lens = (int32_t *)malloc(sizeof(int32_t) * DEMO_T), *sel = (int32_t *)malloc((size_t)(T * K) * 4);
  double *refd = (double *)malloc((size_t)W * sizeof(double));
  ok = ok && lg && lr && lens && sel && refd;
  demo_mem mm = {{0}, 0};
  dsk_status st = ok ? DSK_STATUS_OK : DSK_STATUS_OUT_OF_MEMORY;
  int64_t key_entries = 0, scored = 0;
  for (int t = 0; ok && t < DEMO_T; t++) {
    lens[t] = (int32_t)dsk_idx_scored_len(&h, t);
    scored += lens[t];
  }
  for (int r = 0; ok && r < DEMO_REQS; r++) {
    int64_t m = 0;
    for (int t = 0; t < DEMO_T; t++)
      if (req[t] == r && lens[t] > m) m = lens[t];
    key_entries += m;
  }
  demo_idx_run run;
  memset(&run, 0, sizeof run);
  float *dout = (float *)dalloc(ctx, &mm, ob, &st);
  int32_t *dsel = (int32_t *)dalloc(ctx, &mm, (size_t)(T * K) * 4, &st);
  const int32_t *dlens = (const int32_t *)dput(ctx, &mm, lens, sizeof(int32_t) * DEMO_T, &st);
  TRY(dsk_mem_set(ctx, dout, 0xFF, ob));
  TRY(dsk_mem_set(ctx, dsel, 0xFF, (size_t)(T * K) * 4));
  if (st == DSK_STATUS_OK) {
    run.lg = dsk_idx_logits_desc(&h, &dv, dout, W);
    run.tk.struct_size = sizeof run.tk;
    run.tk.T = T;
    run.tk.scores = dout;
    run.tk.scores_stride_t = W;
    run.tk.width = W;
    run.tk.lens = dlens;
    run.tk.K = K;
    run.tk.out = dsel;
    run.tk.out_stride_t = K;
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    TRY(dsk_topk_plan(ctx, &run.tk, &pi));
    if (st == DSK_STATUS_OK && pi.workspace_bytes > 0)
      run.tk.workspace = dalloc(ctx, &mm, (size_t)pi.workspace_bytes, &st);
    run.tk.workspace_bytes = pi.workspace_bytes;
  }
  TRY(demo_time(ctx, reps, demo_idx_once, &run, &row->median_us));
  TRY(dsk_mem_download(ctx, lg, dout, ob));
  TRY(dsk_mem_download(ctx, sel, dsel, (size_t)(T * K) * 4));
  demo_free(ctx, &mm);
  if (st == DSK_STATUS_OK) { /* reference scores */
    dsk_indexer_logits_desc l = dsk_idx_logits_desc(&h, &dr, lr, W);
    TRY(dsk_indexer_logits(ref, &l));
    TRY(dsk_ctx_synchronize(ref, NULL));
  }
  int rc = 1;
  if (st == DSK_STATUS_OK && ok) {
    double worst = 0, num = 0, den = 0, mabs = 0;
    int64_t bad_inf = 0;
    int bad_rows = 0;
    for (int64_t t = 0; t < T; t++) {
      const float *g = lg + t * W, *r = lr + t * W;
      double maxref = 0, maxerr = 0;
      for (int64_t s = 0; s < W; s++) {
        if (isinf(r[s]) && r[s] < 0) {
          bad_inf += !(isinf(g[s]) && g[s] < 0);
          continue;
        }
        const double d = fabs((double)g[s] - (double)r[s]);
        maxref = fmax(maxref, fabs((double)r[s]));
        maxerr = d != d ? INFINITY : fmax(maxerr, d);
        num += d * d;
        den += (double)r[s] * r[s];
      }
      mabs = fmax(mabs, maxerr);
      worst = fmax(worst, maxref > 0 ? maxerr / maxref : maxerr > 0 ? INFINITY : 0);
      for (int64_t s = 0; s < W; s++) refd[s] = (double)r[s];
      bad_rows += dsk_idx_topk_rule(refd, g, lens[t], sel + t * K, K, 1, 1e-6, stderr, "demo indexer top-k", t) != 0;
    }
    row->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    row->max_abs = mabs;
    row->pass = worst <= 1e-5 && bad_inf == 0 && bad_rows == 0;
    const double sec = row->median_us * 1e-6;
    row->gbps = sec > 0 ? 132.0 * (double)key_entries / sec * 1e-9 : 0;
    row->tflops = sec > 0 ? 2.0 * (double)H * 128.0 * (double)scored / sec * 1e-12 : 0;
    snprintf(row->note, sizeof row->note,
             "%lld entries/req max; scores err/max|ref| %.1e (<= 1e-5), -inf mismatches %lld; top-k rule: %d bad rows",
             (long long)maxe, worst, (long long)bad_inf, bad_rows);
    rc = 0;
  }
  free(lg);
  free(lr);
  free(lens);
  free(sel);
  free(refd);
  dsk_idx_dev_free(ctx, &dv);
  dsk_idx_dev_free(ref, &dr);
  dsk_idx_host_free(&h);
  return rc;
}

int dsk_demo_run(dsk_ctx *ctx, const dsk_demo_opts *o_in, FILE *out) {
  if (!out) out = stdout;
  dsk_demo_opts o;
  memset(&o, 0, sizeof o);
  if (o_in) o = *o_in;
  dsk_ctx_info ci;
  memset(&ci, 0, sizeof ci);
  ci.struct_size = sizeof ci;
  if (!ctx || dsk_ctx_get_info(ctx, &ci) != DSK_STATUS_OK) {
    fprintf(out, "demo: no context\n");
    return 1;
  }
  int reps = o.reps > 0 ? o.reps : (ci.is_cuda ? 20 : 3);
  fprintf(out, "demo: backend %s on %s (%d SMs/threads); %d query tokens, %d heads; contexts up to %dK tokens; "
               "median of %d runs\n",
          ci.backend, ci.device_name, ci.sm_count, DEMO_T, DEMO_H, o.quick ? 4 : 32, reps);
  fprintf(out, "demo: bytes and FLOP per sparse-decode.md §8 (R = 584 / 656 B per record, lse included); error vs "
               "the fp64 oracle, ACCURATE bound rel_l2 <= %.0e, max_abs <= %.0e*max|ref|, lse_abs <= %.0e\n",
          MLA_ACCURATE_REL_L2, MLA_ACCURATE_MAX_ABS_REL, MLA_ACCURATE_LSE_ABS);
  fprintf(out, "demo: mHC row: post_prenorm+pre (one sublayer), D %d, cpb = split count S, GB/s over the bytes both ops move, rel_l2 / "
               "max_abs of R' vs the cpu-ref; indexer row: logits + top-%d, ratio 4, GB/s over the key bytes read, "
               "rel_l2 / max_abs of the scores; their bounds follow the result\n",
          DEMO_MHC_D, 512);
  fprintf(out, "demo: MoE rows: dsk_moe_run of one layer, %d tokens through the router, widths = local/global experts "
               "(rd = reduced shapes), GB/s over the weight bytes read, rel_l2 / max_abs of y vs the cpu-ref (else fp64), "
               "bound diff <= 0.01 vs the cpu-ref and fp64\n",
          DEMO_T);
  fprintf(out, "%-16s %-10s %3s %3s %-9s %3s %11s %8s %8s %9s %9s %9s  %s\n", "model", "backend", "T", "H", "widths",
          "cpb", "median_us", "GB/s", "TFLOPS", "rel_l2", "max_abs", "lse_abs", "result");
  fflush(out);
  demo_row rows[2];
  memset(rows, 0, sizeof rows);
  rows[0].model = "DSv4-Flash C4A";
  rows[1].model = "GLM-5.1";
  int rc = 0;
  for (int i = 0; i < 2; i++) {
    int err = i == 0 ? demo_v4(ctx, &o, &rows[i]) : demo_glm(ctx, &o, &rows[i]);
    demo_row *r = &rows[i];
    if (err) {
      fprintf(out, "%-16s %-10s %3d %3d %-9s  ERROR (%s)\n", r->model, ci.backend, DEMO_T, DEMO_H, r->widths,
              dsk_last_error());
      rc = 1;
      continue;
    }
    fprintf(out, "%-16s %-10s %3d %3d %-9s %3d %11.1f %8.2f %8.4f %9.2e %9.2e %9.2e  %s\n", r->model, ci.backend,
            DEMO_T, DEMO_H, r->widths, r->tactic, r->median_us, r->gbps, r->tflops, r->m.rel_l2, r->m.max_abs,
            r->m.lse_abs, r->pass ? "PASS" : "FAIL");
    fflush(out);
    if (!r->pass) rc = 1;
  }

  /* the mHC and indexer rows */
  dsk_ctx *ref = demo_ref_ctx();
  demo_xrow xr[2];
  memset(xr, 0, sizeof xr);
  xr[0].model = "DSv4-Flash mHC";
  xr[1].model = "DSv4-Flash index";
  for (int i = 0; i < 2; i++) {
    demo_xrow *r = &xr[i];
    int err = !ref ? 1 : i == 0 ? demo_mhc(ctx, ref, &o, reps, r) : demo_indexer(ctx, ref, &o, reps, r);
    if (err) {
      fprintf(out, "%-16s %-10s %3d %3s %-9s  ERROR (%s)\n", r->model, ci.backend, DEMO_T, r->H, r->widths,
              dsk_last_error());
      rc = 1;
      continue;
    }
    fprintf(out, "%-16s %-10s %3d %3s %-9s %3s %11.1f %8.2f %8.4f %9.2e %9.2e %9s  %s  %s\n", r->model, ci.backend,
            DEMO_T, r->H, r->widths, r->cpb, r->median_us, r->gbps, r->tflops, r->rel_l2, r->max_abs, "-",
            r->pass ? "PASS" : "FAIL", r->note);
    fflush(out);
    if (!r->pass) rc = 1;
  }

  /* the MoE rows */
  static const char *const moe_names[3] = {"DSv4-Flash MoE", "GLM-5.1 MoE", "DSv4-Pro MoE"};
  for (int i = 0; i < 3; i++) {
    double res[5];
    int pass = 0;
    char widths[16] = "-", note[256] = "";
    const int err = !ref ? 1
                         : dsk__moe_demo_row(ctx, ref, i, o.quick, reps, o.seed, res, &pass, widths, sizeof widths, note,
                                             sizeof note);
    if (err) {
      fprintf(out, "%-16s %-10s %3d %3s %-9s  ERROR (%s)\n", moe_names[i], ci.backend, DEMO_T, "-", widths,
              dsk_last_error());
      rc = 1;
      continue;
    }
    fprintf(out, "%-16s %-10s %3d %3s %-9s %3s %11.1f %8.2f %8.4f %9.2e %9.2e %9s  %s  %s\n", moe_names[i], ci.backend,
            DEMO_T, "-", widths, "-", res[0], res[1], res[2], res[3], res[4], "-", pass ? "PASS" : "FAIL", note);
    fflush(out);
    if (!pass) rc = 1;
  }
  if (ref) dsk_ctx_destroy(ref);
  return rc;
}
