/* check_indexer.c - the lightning indexer (spec/indices.md §9) in the
 * backend-vs-reference harness: the context's backend against the CPU
 * reference on random scenes.
 *
 * Per scene: request lengths that are not multiples of the page size, a
 * block table in random page order with holes (-1) and pages past the cache,
 * padding rows, rows with an out-of-range req, rows with L_t = 0, rows
 * truncated by ctx_width, duplicated keys (exact ties); the key cache is
 * filled with 0xFF (NaN for e4m3 and fp32) and then written with
 * dsk_kv_write on the context under test, so every byte outside the written
 * records is poison. Checks:
 *   1. scores: per row max |out - ref| <= 1e-5 * max |ref| over the scored
 *      entries, -inf exactly where the reference has -inf, stride gaps
 *      untouched, counters equal;
 *   2. top-k of the context's scores: the test rule of §9 against the
 *      reference scores, and bit-identical to the CPU top-k of the same
 *      scores;
 *   3. the fused path equals composing scores -> top-k -> slot list on the
 *      context (slots, lens, top-k and counters);
 *   4. (full mode) top-k of 1M-entry rows bit-identical to the CPU.
 * Data moves only through dsk_mem_*, so the context may be a CUDA one. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_indexer.h"

#define IDX_SENT_BYTE 0x55 /* output poison: 0x55555555 as fp32 / int32 */

/* ------------------------------------------------------------ scenes */

static int64_t round_up64(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

void dsk_idx_host_free(dsk_idx_host *h) {
  free(h->q);
  free(h->qs);
  free(h->w);
  free(h->req);
  free(h->pos);
  free(h->sm);
  free(h->bt);
  free(h->latent);
  free(h->wslots);
  free(h->req_len);
  free(h->cache);
  memset(h, 0, sizeof *h);
}

int dsk_idx_host_make(const dsk_idx_case *c, uint64_t seed, dsk_idx_host *h) {
  memset(h, 0, sizeof *h);
  h->c = *c;
  tu_rng g = tu_rng_make(seed);
  const int64_t T = c->T, H = c->H, P = c->pbs, ratio = c->ratio;
  const int64_t R = c->R > 0 ? c->R : 1;
  h->c.R = R;

  h->req_len = (int64_t *)calloc((size_t)R, sizeof(int64_t));
  if (!h->req_len) return -1;
  for (int64_t r = 0; r < R; r++) h->req_len[r] = r == 0 ? c->max_len : tu_int(&g, 1, c->max_len);
  if (c->ctx_width > 0) h->W = c->ctx_width;
  else if (c->truncate) h->W = c->max_len * 3 / 4 > 1 ? c->max_len * 3 / 4 - tu_int(&g, 0, 3) : 1;
  else h->W = round_up64(c->max_len, 64) + tu_int(&g, 0, 40);
  if (h->W < 1) h->W = 1;

  h->q_stride_h = 128 + 16 * tu_int(&g, 0, 1);
  h->q_stride_t = H * h->q_stride_h + 16 * tu_int(&g, 0, 2);
  h->qs_stride = H + tu_int(&g, 0, 3);
  h->w_stride = H + tu_int(&g, 0, 3);

  /* block table: the pages of all requests in random order */
  int64_t total = 0, maxb = 1;
  for (int64_t r = 0; r < R; r++) {
    const int64_t b = (h->req_len[r] + P - 1) / P;
    total += b;
    if (b > maxb) maxb = b;
  }
  h->num_pages = total + tu_int(&g, 1, 6);
  h->page_stride = round_up64(P * 132, 16) + 16 * tu_int(&g, 0, 3);
  h->bt_rows = R;
  h->bt_max_blocks = maxb + tu_int(&g, 0, 2);
  h->bt_stride = h->bt_max_blocks + tu_int(&g, 0, 3);
  h->bt = (int32_t *)malloc((size_t)(R * h->bt_stride) * sizeof(int32_t));
  int64_t *perm = (int64_t *)malloc((size_t)h->num_pages * sizeof(int64_t));
  if (!h->bt || !perm) {
    free(perm);
    return -1;
  }
  tu_permutation(&g, perm, h->num_pages);
  int64_t next = 0;
  for (int64_t r = 0; r < R; r++) {
    const int64_t used = (h->req_len[r] + P - 1) / P;
    for (int64_t b = 0; b < h->bt_stride; b++) {
      int32_t v;
      if (b < used) {
        v = (int32_t)perm[next++];
        const int64_t u = tu_int(&g, 0, 99);
        if (u < c->holes) v = -1;
        else if (u < c->holes + c->oob) v = (int32_t)(h->num_pages + tu_int(&g, 0, 1000));
      } else {
        v = (int32_t)tu_int(&g, 0, h->num_pages - 1); /* beyond every L_t or a stride gap: never read */
      }
      h->bt[r * h->bt_stride + b] = v;
    }
  }
  free(perm);

  /* rows */
  h->req = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  h->pos = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  h->sm = (int32_t *)malloc((size_t)T * sizeof(int32_t));
  if (!h->req || !h->pos || !h->sm) return -1;
  for (int64_t t = 0; t < T; t++) {
    if (tu_int(&g, 0, 99) < c->pad) {
      h->sm[t] = tu_int(&g, 0, 1) ? -1 : INT32_MIN;
      h->req[t] = (int32_t)tu_int(&g, -2, R + 2);
      h->pos[t] = (int32_t)tu_int(&g, 0, 1 << 24);
      continue;
    }
    h->sm[t] = (int32_t)tu_int(&g, 0, 1 << 20);
    int64_t r = c->one_request ? 0 : tu_int(&g, 0, R - 1);
    const int64_t maxpos = ratio * (h->req_len[r] + 1) - 2;
    const int64_t u = tu_int(&g, 0, 99);
    h->pos[t] = (int32_t)(u < 30 ? maxpos : u < 36 ? tu_int(&g, 0, ratio) : tu_int(&g, 0, maxpos));
    if (tu_int(&g, 0, 99) < c->bad_req) r = tu_int(&g, 0, 1) ? -1 : R + tu_int(&g, 0, 5);
    h->req[t] = (int32_t)r;
  }

  /* q (stride gaps hold the e4m3 NaN code), scales, weights (gaps NaN) */
  const size_t qbytes = (size_t)(T * h->q_stride_t);
  h->q = (uint8_t *)malloc(qbytes);
  h->qs = (float *)malloc((size_t)(T * h->qs_stride) * sizeof(float));
  h->w = (float *)malloc((size_t)(T * h->w_stride) * sizeof(float));
  if (!h->q || !h->qs || !h->w) return -1;
  memset(h->q, 0x7F, qbytes);
  for (int64_t i = 0; i < T * h->qs_stride; i++) h->qs[i] = NAN;
  for (int64_t i = 0; i < T * h->w_stride; i++) h->w[i] = NAN;
  for (int64_t t = 0; t < T; t++)
    for (int64_t hh = 0; hh < H; hh++) {
      uint8_t *qr = h->q + t * h->q_stride_t + hh * h->q_stride_h;
      const double sig = ldexp(1.0, (int)tu_int(&g, 2, 7));
      for (int d = 0; d < 128; d++) qr[d] = dsk_e4m3_from_f32((float)(tu_normal(&g) * sig));
      h->qs[t * h->qs_stride + hh] = (float)ldexp(1.0 + tu_uniform(&g), -(int)tu_int(&g, 5, 9));
      h->w[t * h->w_stride + hh] = (float)(tu_normal(&g) * 0.1);
    }

  /* keys: every existing entry of every request */
  int64_t N = 0;
  for (int64_t r = 0; r < R; r++)
    for (int64_t s = 0; s < h->req_len[r]; s++) {
      const int64_t pg = h->bt[r * h->bt_stride + s / P];
      N += pg >= 0 && pg < h->num_pages;
    }
  h->N = N;
  h->latent = (dsk_bf16 *)malloc((size_t)(N > 0 ? N : 1) * 128 * sizeof(dsk_bf16));
  h->wslots = (int32_t *)malloc((size_t)(N > 0 ? N : 1) * sizeof(int32_t));
  if (!h->latent || !h->wslots) return -1;
  int64_t n = 0;
  for (int64_t r = 0; r < R; r++)
    for (int64_t s = 0; s < h->req_len[r]; s++) {
      const int64_t pg = h->bt[r * h->bt_stride + s / P];
      if (pg < 0 || pg >= h->num_pages) continue;
      dsk_bf16 *x = h->latent + n * 128;
      if (n > 0 && tu_int(&g, 0, 99) < 5) {
        memcpy(x, x - 128, 128 * sizeof(dsk_bf16)); /* an exact duplicate of the previous key */
      } else {
        const double sig = ldexp(1.0, (int)tu_int(&g, -4, 4));
        tu_fill_bf16_normal(&g, x, 128, sig);
      }
      h->wslots[n] = (int32_t)(pg * P + s % P);
      n++;
    }
  h->scale_rule = (int)tu_int(&g, 0, 1);
  return 0;
}

dsk_kv_cache dsk_idx_cache(const dsk_idx_host *h, void *base) {
  dsk_kv_cache k;
  k.base = base;
  k.pbs = h->c.pbs;
  k.page_stride = h->page_stride;
  k.num_pages = h->num_pages;
  return k;
}

static int up(dsk_ctx *ctx, void **dev, const void *host, size_t bytes) {
  *dev = NULL;
  if (dsk_mem_alloc(ctx, dev, bytes ? bytes : 16) != DSK_STATUS_OK) return -1;
  if (host && bytes && dsk_mem_upload(ctx, *dev, host, bytes) != DSK_STATUS_OK) return -1;
  return 0;
}

void dsk_idx_dev_free(dsk_ctx *ctx, dsk_idx_dev *d) {
  void *p[8] = {d->q, d->qs, d->w, d->req, d->pos, d->sm, d->bt, d->cache};
  for (int i = 0; i < 8; i++)
    if (p[i]) dsk_mem_free(ctx, p[i]);
  memset(d, 0, sizeof *d);
}

int dsk_idx_dev_make(dsk_ctx *ctx, dsk_idx_host *h, const uint8_t *cache_bytes, dsk_idx_dev *d) {
  memset(d, 0, sizeof *d);
  const int64_t T = h->c.T;
  void *p;
  if (up(ctx, &p, h->q, (size_t)(T * h->q_stride_t))) return -1;
  d->q = (uint8_t *)p;
  if (up(ctx, &p, h->qs, (size_t)(T * h->qs_stride) * 4)) return -1;
  d->qs = (float *)p;
  if (up(ctx, &p, h->w, (size_t)(T * h->w_stride) * 4)) return -1;
  d->w = (float *)p;
  if (up(ctx, &p, h->req, (size_t)T * 4)) return -1;
  d->req = (int32_t *)p;
  if (up(ctx, &p, h->pos, (size_t)T * 4)) return -1;
  d->pos = (int32_t *)p;
  if (up(ctx, &p, h->sm, (size_t)T * 4)) return -1;
  d->sm = (int32_t *)p;
  if (up(ctx, &p, h->bt, (size_t)(h->bt_rows * h->bt_stride) * 4)) return -1;
  d->bt = (int32_t *)p;
  const size_t cbytes = (size_t)(h->num_pages * h->page_stride);
  if (up(ctx, &d->cache, NULL, cbytes)) return -1;
  if (cache_bytes) return dsk_mem_upload(ctx, d->cache, cache_bytes, cbytes) == DSK_STATUS_OK ? 0 : -1;
  if (dsk_mem_set(ctx, d->cache, 0xFF, cbytes) != DSK_STATUS_OK) return -1;
  if (h->N > 0) {
    void *lat = NULL, *sl = NULL;
    int rc = -1;
    if (up(ctx, &lat, h->latent, (size_t)(h->N * 128) * sizeof(dsk_bf16)) == 0 &&
        up(ctx, &sl, h->wslots, (size_t)h->N * 4) == 0) {
      dsk_kv_write_desc w;
      memset(&w, 0, sizeof w);
      w.struct_size = sizeof w;
      w.format = DSK_KV_FORMAT_IDXK132;
      w.N = h->N;
      w.latent = (const dsk_bf16 *)lat;
      w.latent_stride = 128;
      w.slot_mapping = (const int32_t *)sl;
      w.cache = dsk_idx_cache(h, d->cache);
      w.scale_rule = h->scale_rule ? DSK_SCALE_RAW : DSK_SCALE_POW2;
      dsk_status st = dsk_kv_write(ctx, &w);
      if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
      if (st == DSK_STATUS_OK) rc = 0;
      else fprintf(stderr, "indexer scene: dsk_kv_write: %s: %s\n", dsk_status_name(st), dsk_last_error());
    }
    if (lat) dsk_mem_free(ctx, lat);
    if (sl) dsk_mem_free(ctx, sl);
    if (rc) return rc;
  }
  free(h->cache);
  h->cache = (uint8_t *)malloc(cbytes);
  if (!h->cache) return -1;
  return dsk_mem_download(ctx, h->cache, d->cache, cbytes) == DSK_STATUS_OK ? 0 : -1;
}

dsk_indexer_logits_desc dsk_idx_logits_desc(const dsk_idx_host *h, const dsk_idx_dev *d, float *out,
                                            int64_t out_stride) {
  dsk_indexer_logits_desc l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.T = h->c.T;
  l.n_heads = h->c.H;
  l.q = d->q;
  l.q_stride_t = h->q_stride_t;
  l.q_stride_h = h->q_stride_h;
  l.q_scale = d->qs;
  l.q_scale_stride_t = h->qs_stride;
  l.weights = d->w;
  l.weights_stride_t = h->w_stride;
  l.req = d->req;
  l.pos = d->pos;
  l.slot_mapping = d->sm;
  l.block_table.table = d->bt;
  l.block_table.stride = h->bt_stride;
  l.block_table.rows = h->bt_rows;
  l.block_table.max_blocks = h->bt_max_blocks;
  l.ratio = h->c.ratio;
  l.cache = dsk_idx_cache(h, d->cache);
  l.out = out;
  l.out_stride_t = out_stride;
  l.ctx_width = h->W;
  return l;
}

int64_t dsk_idx_causal_len(const dsk_idx_host *h, int64_t t) {
  if (h->sm[t] < 0 || h->pos[t] < 0) return 0;
  return ((int64_t)h->pos[t] + 1) / h->c.ratio;
}
int64_t dsk_idx_scored_len(const dsk_idx_host *h, int64_t t) {
  const int64_t L = dsk_idx_causal_len(h, t);
  return L < h->W ? L : h->W;
}

/* Entries of row t below `n` whose page is missing (the scores' counters[0]). */
static int64_t idx_missing(const dsk_idx_host *h, int64_t t, int64_t n) {
  const int64_t r = h->req[t], P = h->c.pbs;
  int64_t m = 0;
  for (int64_t s = 0; s < n; s++) {
    int64_t pg = -1;
    if (r >= 0 && r < h->bt_rows && s / P < h->bt_max_blocks) pg = h->bt[r * h->bt_stride + s / P];
    m += pg < 0 || pg >= h->num_pages;
  }
  return m;
}

/* ------------------------------------------------------------ top-k rule */

int dsk_idx_score_cmp(float a, float b) {
  const int na = a != a, nb = b != b;
  if (na || nb) return na && nb ? 0 : na ? -1 : 1;
  return a > b ? 1 : a < b ? -1 : 0; /* -0 == +0 */
}

typedef struct rank_item {
  double r;
  int64_t i;
} rank_item;

static int rank_cmp(const void *x, const void *y) {
  const rank_item *a = (const rank_item *)x, *b = (const rank_item *)y;
  if (a->r != b->r) return a->r > b->r ? -1 : 1;
  return (a->i > b->i) - (a->i < b->i);
}

static int near_tau(double r, double tau, double rel) {
  if (r == tau) return 1;
  return fabs(r - tau) <= rel * fmax(fabs(r), fabs(tau));
}

int dsk_idx_topk_rule(const double *ref, const float *comp, int64_t L, const int32_t *sel, int64_t K, int shortcut,
                      double rel_tol, FILE *log, const char *what, int64_t t) {
  int bad = 0;
  const int64_t n = L < K ? L : K;
  if (!log) log = stdout;
#define RULE_BAD(...)                                               \
  do {                                                              \
    if (bad++ < 4) {                                                \
      fprintf(log, "  %s row %lld: ", what, (long long)t);          \
      fprintf(log, __VA_ARGS__);                                    \
      fprintf(log, "\n");                                           \
    }                                                               \
  } while (0)
  unsigned char *seen = (unsigned char *)calloc((size_t)(L > 0 ? L : 1), 1);
  if (!seen) return 1;
  for (int64_t i = 0; i < K; i++) {
    const int64_t v = sel[i];
    if (i < n) {
      if (v < 0 || v >= L) RULE_BAD("out[%lld] = %lld is not a candidate (L %lld)", (long long)i, (long long)v,
                                    (long long)L);
      else if (seen[v]) RULE_BAD("out[%lld] = %lld repeats", (long long)i, (long long)v);
      else seen[v] = 1;
    } else if (v != -1) {
      RULE_BAD("out[%lld] = %lld, expected -1 (only %lld candidates)", (long long)i, (long long)v, (long long)n);
    }
  }
  if (bad) goto done;
  if (shortcut && L <= K) {
    for (int64_t i = 0; i < n; i++)
      if (sel[i] != i) RULE_BAD("shortcut row: out[%lld] = %d, expected %lld", (long long)i, sel[i], (long long)i);
    goto done;
  }
  for (int64_t i = 0; i + 1 < n; i++) {
    const int32_t a = sel[i], b = sel[i + 1];
    const int cmp = dsk_idx_score_cmp(comp[a], comp[b]);
    if (cmp < 0 || (cmp == 0 && a > b))
      RULE_BAD("order: out[%lld] = %d (score %.9g) before out[%lld] = %d (score %.9g)", (long long)i, a,
               (double)comp[a], (long long)(i + 1), b, (double)comp[b]);
  }
  if (L > K) {
    rank_item *it = (rank_item *)malloc((size_t)L * sizeof(rank_item));
    unsigned char *inref = (unsigned char *)calloc((size_t)L, 1);
    if (!it || !inref) {
      free(it);
      free(inref);
      bad++;
      goto done;
    }
    for (int64_t i = 0; i < L; i++) {
      it[i].r = ref[i];
      it[i].i = i;
    }
    qsort(it, (size_t)L, sizeof *it, rank_cmp);
    const double tau = it[K - 1].r;
    for (int64_t i = 0; i < K; i++) inref[it[i].i] = 1;
    for (int64_t i = 0; i < K; i++) {
      const int32_t x = sel[i];
      if (!inref[x] && !near_tau(ref[x], tau, rel_tol))
        RULE_BAD("column %d (ref %.12g) selected but not in the reference top-%lld (K-th ref %.12g)", x, ref[x],
                 (long long)K, tau);
      const int64_t y = it[i].i;
      if (!seen[y] && !near_tau(ref[y], tau, rel_tol))
        RULE_BAD("column %lld (ref %.12g) of the reference top-%lld missing (K-th ref %.12g)", (long long)y, ref[y],
                 (long long)K, tau);
    }
    free(it);
    free(inref);
  }
done:
  free(seen);
#undef RULE_BAD
  return bad;
}

/* ------------------------------------------------------------ the check */

static int dl(dsk_ctx *ctx, void *host, const void *dev, size_t bytes) {
  return dsk_mem_download(ctx, host, dev, bytes) == DSK_STATUS_OK ? 0 : -1;
}

/* Runs the scores on ctx into a fresh poisoned [T, ostride] buffer and
 * downloads them (and the two counters, which start at 5 and 7). */
static int run_logits(dsk_ctx *ctx, const dsk_idx_host *h, const dsk_idx_dev *d, int64_t ostride, float *host_out,
                      int64_t *cnt) {
  const size_t bytes = (size_t)(h->c.T * ostride) * 4;
  void *out = NULL, *dc = NULL;
  int rc = -1;
  int64_t init[2] = {5, 7};
  if (up(ctx, &out, NULL, bytes) || dsk_mem_set(ctx, out, IDX_SENT_BYTE, bytes) != DSK_STATUS_OK) goto done;
  if (up(ctx, &dc, init, sizeof init)) goto done;
  dsk_indexer_logits_desc l = dsk_idx_logits_desc(h, d, (float *)out, ostride);
  l.counters = (int64_t *)dc;
  dsk_status st = dsk_indexer_logits(ctx, &l);
  if (st != DSK_STATUS_OK) {
    fprintf(stderr, "indexer_logits: %s: %s\n", dsk_status_name(st), dsk_last_error());
    goto done;
  }
  if (dl(ctx, host_out, out, bytes) || dl(ctx, cnt, dc, sizeof init)) goto done;
  cnt[0] -= 5;
  cnt[1] -= 7;
  rc = 0;
done:
  if (out) dsk_mem_free(ctx, out);
  if (dc) dsk_mem_free(ctx, dc);
  return rc;
}

/* dsk_topk of host scores [T, stride] with host lens on ctx; out [T, K]. */
static int run_topk(dsk_ctx *ctx, const float *scores, int64_t T, int64_t width, int64_t stride, const int32_t *lens,
                    int64_t K, int no_shortcut, int32_t *out, int64_t *clamped) {
  void *ds = NULL, *dlens = NULL, *dout = NULL, *ws = NULL, *dc = NULL;
  int rc = -1;
  int64_t cnt = 0;
  if (up(ctx, &ds, scores, (size_t)(T * stride) * 4)) goto done;
  if (lens && up(ctx, &dlens, lens, (size_t)T * 4)) goto done;
  if (up(ctx, &dout, NULL, (size_t)(T * K) * 4)) goto done;
  if (up(ctx, &dc, &cnt, 8)) goto done;
  dsk_topk_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = T;
  d.scores = (const float *)ds;
  d.scores_stride_t = stride;
  d.width = width;
  d.lens = (const int32_t *)dlens;
  d.K = K;
  d.no_shortcut = no_shortcut;
  d.out = (int32_t *)dout;
  d.out_stride_t = K;
  d.counters = (int64_t *)dc;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st = dsk_topk_plan(ctx, &d, &pi);
  if (st == DSK_STATUS_OK && pi.workspace_bytes > 0 && up(ctx, &ws, NULL, (size_t)pi.workspace_bytes)) goto done;
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  if (st == DSK_STATUS_OK) st = dsk_topk(ctx, &d);
  if (st != DSK_STATUS_OK) {
    fprintf(stderr, "topk: %s: %s\n", dsk_status_name(st), dsk_last_error());
    goto done;
  }
  if (dl(ctx, out, dout, (size_t)(T * K) * 4) || dl(ctx, &cnt, dc, 8)) goto done;
  if (clamped) *clamped = cnt;
  rc = 0;
done:
  if (ds) dsk_mem_free(ctx, ds);
  if (dlens) dsk_mem_free(ctx, dlens);
  if (dout) dsk_mem_free(ctx, dout);
  if (ws) dsk_mem_free(ctx, ws);
  if (dc) dsk_mem_free(ctx, dc);
  return rc;
}

/* Scores of ctx vs the reference scores: per-row bound, -inf pattern, gaps. */
static int compare_logits(const dsk_idx_host *h, const float *got, const float *ref, int64_t ostride,
                          const char *name, FILE *log) {
  int bad = 0;
  for (int64_t t = 0; t < h->c.T; t++) {
    const float *g = got + t * ostride, *r = ref + t * ostride;
    double maxref = 0.0, maxerr = 0.0;
    int nan_err = 0;
    for (int64_t s = 0; s < h->W; s++)
      if (isfinite(r[s]) && fabs(r[s]) > maxref) maxref = fabs(r[s]);
    for (int64_t s = 0; s < ostride; s++) {
      uint32_t gb;
      memcpy(&gb, &g[s], 4);
      if (s >= h->W) {
        if (gb != 0x55555555u && bad++ < 4)
          fprintf(log, "  %s: row %lld column %lld in the stride gap was written\n", name, (long long)t, (long long)s);
        continue;
      }
      if (isinf(r[s]) && r[s] < 0) {
        if (!(isinf(g[s]) && g[s] < 0) && bad++ < 4)
          fprintf(log, "  %s: out[%lld, %lld] = %g, expected -inf\n", name, (long long)t, (long long)s, (double)g[s]);
        continue;
      }
      const double e = fabs((double)g[s] - (double)r[s]);
      if (e != e) nan_err++;
      else if (e > maxerr) maxerr = e;
    }
    if ((nan_err || !(maxerr <= 1e-5 * maxref)) && bad++ < 4)
      fprintf(log, "  %s: row %lld max error %.3g > 1e-5 * %.6g (%d NaN)\n", name, (long long)t, maxerr, maxref,
              nan_err);
  }
  return bad;
}

/* Fused path vs composing the pieces on ctx. */
static int check_fused(dsk_ctx *ctx, const dsk_idx_host *h, const dsk_idx_dev *d, const float *logits_ctx,
                       int64_t ostride, int no_shortcut, tu_rng *g, FILE *log, const char *name, tu_counts *c) {
  const int64_t T = h->c.T, K = h->c.K, W = h->W;
  const dsk_slot_list_kind kind = h->c.ratio == 4 ? DSK_SLOTS_C4A : DSK_SLOTS_TOPK;
  /* a second block table for the slots (an attention cache with its own pages) */
  const int64_t P2 = tu_int(g, 0, 1) ? h->c.pbs : 64;
  const int64_t mb2 = (W + P2 - 1) / P2 + 1;
  int32_t *bt2 = (int32_t *)malloc((size_t)(h->bt_rows * mb2) * 4);
  int32_t *lens = (int32_t *)malloc((size_t)T * 4);
  int32_t *tk_ref = (int32_t *)malloc((size_t)(T * K) * 4);
  int32_t *sl_ref = (int32_t *)malloc((size_t)(T * K) * 4), *ln_ref = (int32_t *)malloc((size_t)T * 4);
  int32_t *sl = (int32_t *)malloc((size_t)(T * K) * 4), *ln = (int32_t *)malloc((size_t)T * 4);
  int32_t *tk = (int32_t *)malloc((size_t)(T * K) * 4);
  void *dbt2 = NULL, *dtk = NULL, *dsl = NULL, *dln = NULL, *dcnt = NULL, *ws = NULL, *dtk2 = NULL, *dsl2 = NULL,
       *dln2 = NULL, *dcnt2 = NULL;
  int bad = 0, rc = -1;
  if (!bt2 || !lens || !tk_ref || !sl_ref || !ln_ref || !sl || !ln || !tk) goto done;
  for (int64_t i = 0; i < h->bt_rows * mb2; i++) bt2[i] = tu_int(g, 0, 9) ? (int32_t)tu_int(g, 0, 5000) : -1;
  const int use_table2 = (int)tu_int(g, 0, 1), with_topk = (int)tu_int(g, 0, 3) != 0;
  for (int64_t t = 0; t < T; t++) lens[t] = (int32_t)dsk_idx_scored_len(h, t);

  /* composition: ctx scores -> ctx top-k -> ctx slot list */
  if (run_topk(ctx, logits_ctx, T, W, ostride, lens, K, no_shortcut, tk_ref, NULL)) goto done;
  if (up(ctx, &dbt2, bt2, (size_t)(h->bt_rows * mb2) * 4) || up(ctx, &dtk2, tk_ref, (size_t)(T * K) * 4) ||
      up(ctx, &dsl2, NULL, (size_t)(T * K) * 4) || up(ctx, &dln2, NULL, (size_t)T * 4) || up(ctx, &dcnt2, NULL, 8))
    goto done;
  dsk_mem_set(ctx, dcnt2, 0, 8);
  {
    dsk_slot_list_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.struct_size = sizeof sd;
    sd.kind = kind;
    sd.T = T;
    sd.req = d->req;
    sd.slot_mapping = d->sm;
    if (use_table2) {
      sd.block_table.table = (const int32_t *)dbt2;
      sd.block_table.stride = mb2;
      sd.block_table.rows = h->bt_rows;
      sd.block_table.max_blocks = mb2;
      sd.pbs = P2;
    } else {
      sd.block_table.table = d->bt;
      sd.block_table.stride = h->bt_stride;
      sd.block_table.rows = h->bt_rows;
      sd.block_table.max_blocks = h->bt_max_blocks;
      sd.pbs = h->c.pbs;
    }
    sd.idx = (const int32_t *)dtk2;
    sd.idx_stride = K;
    sd.K = K;
    sd.out = (int32_t *)dsl2;
    sd.out_stride = K;
    sd.lens = (int32_t *)dln2;
    sd.counters = (int64_t *)dcnt2;
    dsk_status st = dsk_slot_list_build(ctx, &sd);
    if (st != DSK_STATUS_OK) {
      fprintf(log, "  %s: slot_list_build: %s\n", name, dsk_last_error());
      goto done;
    }
  }
  int64_t cnt_ref[3] = {0, 0, 0};
  if (dl(ctx, sl_ref, dsl2, (size_t)(T * K) * 4) || dl(ctx, ln_ref, dln2, (size_t)T * 4) ||
      dl(ctx, &cnt_ref[2], dcnt2, 8))
    goto done;
  for (int64_t t = 0; t < T; t++) {
    const int64_t L = dsk_idx_causal_len(h, t), n = dsk_idx_scored_len(h, t);
    if (no_shortcut || n > K) cnt_ref[0] += idx_missing(h, t, n);
    cnt_ref[1] += L > W;
  }

  /* fused */
  if (up(ctx, &dtk, NULL, (size_t)(T * K) * 4) || up(ctx, &dsl, NULL, (size_t)(T * K) * 4) ||
      up(ctx, &dln, NULL, (size_t)T * 4) || up(ctx, &dcnt, NULL, 24))
    goto done;
  dsk_mem_set(ctx, dcnt, 0, 24);
  {
    dsk_indexer_topk_slots_desc f;
    memset(&f, 0, sizeof f);
    f.struct_size = sizeof f;
    dsk_indexer_logits_desc l = dsk_idx_logits_desc(h, d, NULL, 0);
    f.T = l.T;
    f.n_heads = l.n_heads;
    f.q = l.q;
    f.q_stride_t = l.q_stride_t;
    f.q_stride_h = l.q_stride_h;
    f.q_scale = l.q_scale;
    f.q_scale_stride_t = l.q_scale_stride_t;
    f.weights = l.weights;
    f.weights_stride_t = l.weights_stride_t;
    f.req = l.req;
    f.pos = l.pos;
    f.slot_mapping = l.slot_mapping;
    f.block_table = l.block_table;
    f.ratio = l.ratio;
    f.cache = l.cache;
    f.ctx_width = W;
    f.K = K;
    f.no_shortcut = no_shortcut;
    if (with_topk) {
      f.topk = (int32_t *)dtk;
      f.topk_stride_t = K;
    }
    f.kind = kind;
    if (use_table2) {
      f.slot_block_table.table = (const int32_t *)dbt2;
      f.slot_block_table.stride = mb2;
      f.slot_block_table.rows = h->bt_rows;
      f.slot_block_table.max_blocks = mb2;
      f.slot_pbs = P2;
    } /* else: NULL table and slot_pbs 0 = the key cache's */
    f.slots = (int32_t *)dsl;
    f.slots_stride_t = K;
    f.lens = (int32_t *)dln;
    f.counters = (int64_t *)dcnt;
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    dsk_status st = dsk_indexer_topk_slots_plan(ctx, &f, &pi);
    if (st == DSK_STATUS_OK && pi.workspace_bytes > 0 && up(ctx, &ws, NULL, (size_t)pi.workspace_bytes)) goto done;
    f.workspace = ws;
    f.workspace_bytes = pi.workspace_bytes;
    if (st == DSK_STATUS_OK) st = dsk_indexer_topk_slots(ctx, &f);
    if (st != DSK_STATUS_OK) {
      fprintf(log, "  %s: indexer_topk_slots: %s: %s\n", name, dsk_status_name(st), dsk_last_error());
      goto done;
    }
  }
  int64_t cnt[3];
  if ((with_topk && dl(ctx, tk, dtk, (size_t)(T * K) * 4)) || dl(ctx, sl, dsl, (size_t)(T * K) * 4) ||
      dl(ctx, ln, dln, (size_t)T * 4) || dl(ctx, cnt, dcnt, 24))
    goto done;
  for (int64_t i = 0; i < T * K; i++) {
    if (with_topk && tk[i] != tk_ref[i] && bad++ < 4)
      fprintf(log, "  %s: fused topk[%lld] = %d, composed %d\n", name, (long long)i, tk[i], tk_ref[i]);
    if (sl[i] != sl_ref[i] && bad++ < 4)
      fprintf(log, "  %s: fused slots[%lld] = %d, composed %d\n", name, (long long)i, sl[i], sl_ref[i]);
  }
  for (int64_t t = 0; t < T; t++)
    if (ln[t] != ln_ref[t] && bad++ < 4)
      fprintf(log, "  %s: fused lens[%lld] = %d, composed %d\n", name, (long long)t, ln[t], ln_ref[t]);
  for (int i = 0; i < 3; i++)
    if (cnt[i] != cnt_ref[i] && bad++ < 4)
      fprintf(log, "  %s: fused counters[%d] = %lld, expected %lld\n", name, i, (long long)cnt[i],
              (long long)cnt_ref[i]);
  TU_CHECK(c, bad == 0, "%s: fused path (%s%s%s%s) differs from the composition", name,
           kind == DSK_SLOTS_C4A ? "c4a" : "topk", no_shortcut ? ", no shortcut" : "",
           use_table2 ? ", own slot table" : "", with_topk ? "" : ", top-k in the workspace");
  rc = bad ? 1 : 0;
done:
  if (rc < 0) TU_CHECK(c, 0, "%s: fused path could not run", name);
  free(bt2);
  free(lens);
  free(tk_ref);
  free(sl_ref);
  free(ln_ref);
  free(sl);
  free(ln);
  free(tk);
  void *frees[10] = {dbt2, dtk, dsl, dln, dcnt, ws, dtk2, dsl2, dln2, dcnt2};
  for (int i = 0; i < 10; i++)
    if (frees[i]) dsk_mem_free(ctx, frees[i]);
  return rc != 0;
}

static int run_scene(dsk_ctx *ctx, dsk_ctx *ref, const dsk_idx_case *ic, uint64_t seed, FILE *log, tu_counts *c) {
  dsk_idx_host h;
  dsk_idx_dev dv, dr;
  memset(&dv, 0, sizeof dv);
  memset(&dr, 0, sizeof dr);
  float *lg = NULL, *lr = NULL;
  double *refd = NULL;
  int32_t *lens = NULL, *tk = NULL, *tk_cpu = NULL;
  int fails = 0;
  char name[160];
  tu_rng g = tu_rng_make(seed ^ 0xABCDEFull);
  const double t0 = tu_now_us();

  if (dsk_idx_host_make(ic, seed, &h) != 0) {
    TU_CHECK(c, 0, "indexer %s: out of host memory", ic->name);
    dsk_idx_host_free(&h);
    return 1;
  }
  snprintf(name, sizeof name, "indexer %s (T=%lld H=%lld ratio=%lld pbs=%lld W=%lld K=%lld)", ic->name,
           (long long)ic->T, (long long)ic->H, (long long)ic->ratio, (long long)ic->pbs, (long long)h.W,
           (long long)ic->K);
  if (dsk_idx_dev_make(ctx, &h, NULL, &dv) != 0 || dsk_idx_dev_make(ref, &h, h.cache, &dr) != 0) {
    TU_CHECK(c, 0, "%s: scene upload failed: %s", name, dsk_last_error());
    fails++;
    goto done;
  }
  const int64_t T = ic->T, W = h.W, K = ic->K;
  const int64_t ostride = W + tu_int(&g, 0, 5);
  lg = (float *)malloc((size_t)(T * ostride) * 4);
  lr = (float *)malloc((size_t)(T * ostride) * 4);
  refd = (double *)malloc((size_t)W * sizeof(double));
  lens = (int32_t *)malloc((size_t)T * 4);
  tk = (int32_t *)malloc((size_t)(T * K) * 4);
  tk_cpu = (int32_t *)malloc((size_t)(T * K) * 4);
  if (!lg || !lr || !refd || !lens || !tk || !tk_cpu) {
    TU_CHECK(c, 0, "%s: out of host memory", name);
    fails++;
    goto done;
  }

  /* 1. scores */
  int64_t cg[2], cr[2];
  if (run_logits(ctx, &h, &dv, ostride, lg, cg) || run_logits(ref, &h, &dr, ostride, lr, cr)) {
    TU_CHECK(c, 0, "%s: scores failed to run", name);
    fails++;
    goto done;
  }
  {
    int bad = compare_logits(&h, lg, lr, ostride, name, log);
    TU_CHECK(c, bad == 0, "%s: scores differ from the reference (%d)", name, bad);
    TU_CHECK(c, cg[0] == cr[0] && cg[1] == cr[1], "%s: counters %lld %lld, reference %lld %lld", name,
             (long long)cg[0], (long long)cg[1], (long long)cr[0], (long long)cr[1]);
    fails += bad != 0 || cg[0] != cr[0] || cg[1] != cr[1];
  }

  /* 2. top-k of ctx's scores: the rule vs the reference, bits vs the CPU */
  for (int ns = 0; ns < 2; ns++) {
    for (int64_t t = 0; t < T; t++) lens[t] = (int32_t)dsk_idx_scored_len(&h, t);
    if (run_topk(ctx, lg, T, W, ostride, lens, K, ns, tk, NULL) ||
        run_topk(ref, lg, T, W, ostride, lens, K, ns, tk_cpu, NULL)) {
      TU_CHECK(c, 0, "%s: top-k failed to run", name);
      fails++;
      goto done;
    }
    int bad = 0, diff = 0;
    for (int64_t t = 0; t < T; t++) {
      for (int64_t s = 0; s < W; s++) refd[s] = (double)lr[t * ostride + s];
      bad += dsk_idx_topk_rule(refd, lg + t * ostride, lens[t], tk + t * K, K, !ns, 1e-6, log, name, t) != 0;
    }
    for (int64_t i = 0; i < T * K; i++) diff += tk[i] != tk_cpu[i];
    TU_CHECK(c, bad == 0, "%s: top-k%s breaks the test rule in %d rows", name, ns ? " (no shortcut)" : "", bad);
    TU_CHECK(c, diff == 0, "%s: top-k%s differs from the CPU top-k of the same scores in %d entries", name,
             ns ? " (no shortcut)" : "", diff);
    fails += bad != 0 || diff != 0;
  }

  /* 3. fused path */
  fails += check_fused(ctx, &h, &dv, lg, ostride, (int)tu_int(&g, 0, 1), &g, log, name, c);
  fprintf(log, "%-90s %s (%.0f ms)\n", name, fails ? "FAIL" : "ok", (tu_now_us() - t0) / 1000.0);

done:
  free(lg);
  free(lr);
  free(refd);
  free(lens);
  free(tk);
  free(tk_cpu);
  dsk_idx_dev_free(ctx, &dv);
  dsk_idx_dev_free(ref, &dr);
  dsk_idx_host_free(&h);
  return fails != 0;
}

/* Top-k only: random rows of `width` entries with many exact ties, NaN and
 * -inf, against the CPU top-k bit for bit. */
static int run_topk_only(dsk_ctx *ctx, dsk_ctx *ref, int64_t T, int64_t width, int64_t K, uint64_t seed, FILE *log,
                         tu_counts *c) {
  tu_rng g = tu_rng_make(seed);
  const double t0 = tu_now_us();
  float *sc = (float *)malloc((size_t)(T * width) * 4);
  int32_t *lens = (int32_t *)malloc((size_t)T * 4);
  int32_t *a = (int32_t *)malloc((size_t)(T * K) * 4), *b = (int32_t *)malloc((size_t)(T * K) * 4);
  int fails = 0;
  if (!sc || !lens || !a || !b) {
    TU_CHECK(c, 0, "topk %lld x %lld: out of host memory", (long long)T, (long long)width);
    fails = 1;
    goto done;
  }
  for (int64_t t = 0; t < T; t++) {
    const int64_t mode = t % 4;
    for (int64_t s = 0; s < width; s++) {
      float v;
      if (mode == 0) v = (float)tu_normal(&g);
      else if (mode == 1) v = (float)tu_int(&g, 0, 20); /* heavy ties */
      else if (mode == 2) v = tu_int(&g, 0, 99) < 3 ? NAN : tu_int(&g, 0, 99) < 5 ? -INFINITY : (float)tu_uniform(&g);
      else v = 1.0f; /* every score equal */
      sc[t * width + s] = v;
    }
    lens[t] = (int32_t)(t == 0 ? width : tu_int(&g, 0, width));
  }
  for (int ns = 0; ns < 2; ns++) {
    if (run_topk(ctx, sc, T, width, width, lens, K, ns, a, NULL) ||
        run_topk(ref, sc, T, width, width, lens, K, ns, b, NULL)) {
      TU_CHECK(c, 0, "topk %lld x %lld: failed to run", (long long)T, (long long)width);
      fails = 1;
      goto done;
    }
    int64_t diff = 0;
    for (int64_t i = 0; i < T * K; i++) diff += a[i] != b[i];
    TU_CHECK(c, diff == 0, "topk %lld x %lld K=%lld%s: %lld entries differ from the CPU", (long long)T,
             (long long)width, (long long)K, ns ? " no-shortcut" : "", (long long)diff);
    fails += diff != 0;
  }
  fprintf(log, "%-90s %s (%.0f ms)\n", "topk only", fails ? "FAIL" : "ok", (tu_now_us() - t0) / 1000.0);
done:
  free(sc);
  free(lens);
  free(a);
  free(b);
  return fails != 0;
}

int dsk_check_indexer(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c) {
  FILE *log = o && o->log ? o->log : stdout;
  const int quick = o ? o->quick : 1;
  const uint64_t seed = o ? o->seed : 0;
  if (!ctx || !c) return 1;

  /* Is the indexer served at all? (a one-entry top-k) */
  {
    const float one = 1.0f;
    int32_t got = 7;
    void *ds = NULL, *dout = NULL;
    dsk_status st = DSK_STATUS_OUT_OF_MEMORY;
    if (up(ctx, &ds, &one, 4) == 0 && up(ctx, &dout, NULL, 4) == 0) {
      dsk_topk_desc d;
      memset(&d, 0, sizeof d);
      d.struct_size = sizeof d;
      d.T = 1;
      d.scores = (const float *)ds;
      d.scores_stride_t = d.width = d.K = d.out_stride_t = 1;
      d.out = (int32_t *)dout;
      st = dsk_topk(ctx, &d);
      if (st == DSK_STATUS_OK) dl(ctx, &got, dout, 4);
    }
    if (ds) dsk_mem_free(ctx, ds);
    if (dout) dsk_mem_free(ctx, dout);
    if (st == DSK_STATUS_UNSUPPORTED) {
      fprintf(log, "indexer: skipped: %s\n", dsk_last_error());
      return 0;
    }
    TU_CHECK(c, st == DSK_STATUS_OK && got == 0, "indexer: one-entry top-k: %s: %s (out %d)", dsk_status_name(st),
             dsk_last_error(), got);
    if (st != DSK_STATUS_OK) return 1;
  }

  dsk_ctx_opts ro;
  dsk_ctx_opts_init(&ro);
  ro.device = "cpu";
  ro.backend = "cpu-ref";
  dsk_ctx *ref = NULL;
  dsk_status st = dsk_ctx_create(&ref, &ro);
  TU_CHECK(c, st == DSK_STATUS_OK, "indexer: cpu-ref context: %s: %s", dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) return 1;

  static const dsk_idx_case quick_cases[] = {
      /* name, T, H, ratio, pbs, R, max_len, W, K, holes, oob, bad_req, pad, truncate, one_request */
      {"v3.2-like decode", 6, 16, 1, 64, 4, 3000, 0, 512, 3, 2, 10, 15, 0, 0},
      {"dsv4-like c4a", 5, 8, 4, 64, 3, 1500, 0, 256, 3, 2, 0, 20, 0, 0},
      {"glm-like short", 3, 32, 1, 64, 2, 700, 0, 2048, 0, 0, 0, 0, 0, 0},
      {"odd shapes", 7, 5, 1, 12, 3, 900, 0, 100, 10, 5, 15, 15, 1, 0},
      {"prefill chunk", 9, 8, 4, 16, 1, 2000, 0, 128, 2, 2, 0, 10, 0, 1},
      {"pbs 48", 6, 64, 1, 48, 3, 2500, 0, 512, 3, 2, 5, 10, 1, 0},
  };
  static const dsk_idx_case full_cases[] = {
      {"v3.2 32K", 8, 64, 1, 64, 4, 32768, 0, 2048, 1, 1, 5, 10, 0, 0},
      {"dsv4-pro 128K", 4, 64, 4, 64, 2, 32768, 0, 1024, 1, 1, 0, 0, 0, 0},
      {"v3.2 128K", 3, 64, 1, 64, 1, 131072, 0, 2048, 1, 0, 0, 0, 0, 1},
      {"dsv4 1M", 2, 8, 4, 64, 1, 262144, 0, 512, 0, 0, 0, 0, 0, 1},
  };
  int fails = 0;
  const int nq = (int)(sizeof quick_cases / sizeof quick_cases[0]);
  for (int i = 0; i < nq; i++) fails += run_scene(ctx, ref, &quick_cases[i], seed * 131 + 17 + (uint64_t)i, log, c);
  fails += run_topk_only(ctx, ref, 8, quick ? 5000 : 131072, quick ? 300 : 2048, seed + 99, log, c);
  if (!quick) {
    const int nf = (int)(sizeof full_cases / sizeof full_cases[0]);
    for (int i = 0; i < nf; i++) fails += run_scene(ctx, ref, &full_cases[i], seed * 131 + 1017 + (uint64_t)i, log, c);
    fails += run_topk_only(ctx, ref, 8, 1 << 20, 2048, seed + 199, log, c);
  }
  dsk_ctx_destroy(ref);
  return fails != 0;
}
