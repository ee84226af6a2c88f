/* check_indexer.h - the scene builder and the top-k test rule of the
 * lightning indexer (spec/indices.md §9), shared by check_indexer.c
 * (dsk_check_indexer, declared in harness.h) and tests/test_indexer.c. */
#ifndef DSK_CHECK_INDEXER_H
#define DSK_CHECK_INDEXER_H

#include "dsk.h"
#include "harness.h"

/* ------------------------------------------------------------ scenes */
/* One random decode/prefill step of one indexer layer. */
typedef struct dsk_idx_case {
  const char *name;
  int64_t T, H, ratio, pbs;
  int64_t R;         /* requests (block-table rows in use) */
  int64_t max_len;   /* entries of request 0 (the others: random, <= max_len) */
  int64_t ctx_width; /* 0: max_len rounded up to 64 plus a little */
  int64_t K;
  int holes;         /* % of used block-table entries set to -1 */
  int oob;           /* % of used block-table entries set to a page >= num_pages */
  int bad_req;       /* % of rows whose req is outside the table */
  int pad;           /* % of padding rows (slot_mapping < 0) */
  int truncate;      /* 1: ctx_width below the longest rows' L_t */
  int one_request;   /* 1: every row belongs to request 0 (prefill chunk / MTP) */
} dsk_idx_case;

/* Host copies of a scene. Strides are multiples of 16 bytes so the same
 * scene runs on CUDA and CPU contexts. */
typedef struct dsk_idx_host {
  dsk_idx_case c;
  int64_t W; /* ctx_width */
  int64_t q_stride_t, q_stride_h, qs_stride, w_stride;
  uint8_t *q;
  float *qs, *w;
  int32_t *req, *pos, *sm;
  int64_t bt_rows, bt_max_blocks, bt_stride;
  int32_t *bt;
  int64_t num_pages, page_stride;
  int64_t N; /* records written */
  dsk_bf16 *latent; /* [N, 128] */
  int32_t *wslots;  /* [N] */
  int scale_rule;
  int64_t *req_len; /* [R] entries per request */
  uint8_t *cache;   /* the cache bytes as written on the device under test (dsk_idx_dev_make) */
} dsk_idx_host;

/* Device copies (host memory for a CPU context). */
typedef struct dsk_idx_dev {
  uint8_t *q;
  float *qs, *w;
  int32_t *req, *pos, *sm, *bt;
  void *cache;
} dsk_idx_dev;

/* 0 on success. */
int dsk_idx_host_make(const dsk_idx_case *c, uint64_t seed, dsk_idx_host *h);
void dsk_idx_host_free(dsk_idx_host *h);
/* Uploads the inputs; the cache is filled with 0xFF and then written with
 * dsk_kv_write on ctx (cache_bytes NULL; the resulting bytes are downloaded
 * into h->cache) or uploaded from cache_bytes. 0 on success. */
int dsk_idx_dev_make(dsk_ctx *ctx, dsk_idx_host *h, const uint8_t *cache_bytes, dsk_idx_dev *d);
void dsk_idx_dev_free(dsk_ctx *ctx, dsk_idx_dev *d);
dsk_indexer_logits_desc dsk_idx_logits_desc(const dsk_idx_host *h, const dsk_idx_dev *d, float *out,
                                            int64_t out_stride);
dsk_kv_cache dsk_idx_cache(const dsk_idx_host *h, void *base);
/* Causal length of row t (0 for padding rows) and its scored length. */
int64_t dsk_idx_causal_len(const dsk_idx_host *h, int64_t t);
int64_t dsk_idx_scored_len(const dsk_idx_host *h, int64_t t);

/* ------------------------------------------------------------ top-k rule */
/* Total order of the top-k on a float: -0 == +0, NaN lowest. */
int dsk_idx_score_cmp(float a, float b); /* 1: a ranks before b by score, -1 after, 0 equal */

/* The test rule of indices.md §9 for one row: sel[0..K) was selected from
 * `comp` (the computed fp32 scores the top-k saw) over L candidates;
 * `ref` are the fp64 reference scores (-inf where not a candidate).
 *   - count: min(L, K) distinct columns in [0, L), then -1;
 *   - shortcut rows (shortcut && L <= K): 0..L-1 ascending;
 *   - otherwise descending in comp, ties lowest column first;
 *   - set (L > K): equal to the top-K of ref (ties lowest column) except
 *     among candidates within rel_tol (relative) of the K-th reference
 *     score.
 * Returns the number of violations; prints up to a few to log. */
int dsk_idx_topk_rule(const double *ref, const float *comp, int64_t L, const int32_t *sel, int64_t K, int shortcut,
                      double rel_tol, FILE *log, const char *what, int64_t t);

#endif
