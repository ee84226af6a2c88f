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
  return rc;
}
