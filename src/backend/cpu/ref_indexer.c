/* ref_indexer.c - cpu-ref lightning indexer: scores (dsk_indexer_logits) and
 * exact top-k (dsk_topk, and the fused path's top-k), spec/indices.md §9.
 * Descriptors arrive validated by src/ops/indexer.c with T >= 1.
 *
 * Scores, per row t (docs/indexer.md has the readings):
 *   L = slot_mapping[t] < 0 || pos[t] < 0 ? 0 : (pos[t] + 1) / ratio,
 *   n = min(L, ctx_width); L > ctx_width (non-padding row) -> counters[1]++.
 *   s < n: page = block_table[req, s / pbs] (none when req is outside the
 *          table, s / pbs >= max_blocks or the entry is < 0);
 *          no page or page >= num_pages -> -inf, counters[0]++, not read;
 *          else out = (float)( k_scale * sum_h (w[h] * q_scale[h]) * relu(dot_h) )
 *          with dot_h = sum_d q[h, d] * k[d] over the e4m3 values, all in fp64
 *          (the dot product is exact: every e4m3 product is a multiple of
 *          2^-18 below 2^18, so 128 of them sum exactly in 53 bits);
 *          relu(x) = x < 0 ? 0 : x (NaN propagates).
 *   n <= s < ctx_width: -inf. Stride gaps are not written.
 * Work items are (row, 128-column chunk) pairs spread over OpenMP threads;
 * every output element is computed by one thread in a fixed order, and the
 * counters are integer reductions, so results do not depend on the thread
 * count.
 *
 * Top-k, per row (independent of the others; OpenMP over rows):
 *   key(x) = dsk__topk_key_from_bits (unsigned order = score order, -0 = +0,
 *   NaN lowest); candidates are ranked by the 64-bit composite
 *   key << 32 | ~column, which also breaks ties lowest column first.
 *   L <= K: shortcut -> 0..L-1 ascending; else the L composites sorted.
 *   L >  K: radix select of the K-th largest key (four 8-bit passes over the
 *   row), then one pass takes every key above it and the lowest columns of
 *   the keys equal to it; the K composites are sorted descending.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ref.h"
#include "backend/indexer_rules.h"
#include "format/format.h"

#define REF_IDX_CHUNK 128 /* columns per work item */

static int ref_threads(const dsk_ctx *ctx, int64_t items) {
  int nt = ctx->num_threads > 0 ? ctx->num_threads : 1;
  if (items < nt) nt = items < 1 ? 1 : (int)items;
  return nt;
}

/* ------------------------------------------------------------- scores */

/* The record of request-local entry s of block-table row r, or NULL when it
 * does not exist (counted by the caller). */
static const uint8_t *entry_record(const dsk_indexer_logits_desc *d, int64_t r, int rvalid, int64_t s,
                                   float *kscale) {
  if (!rvalid) return NULL;
  const dsk_block_table *bt = &d->block_table;
  const int64_t P = d->cache.pbs;
  const int64_t b = s / P;
  if (b >= bt->max_blocks) return NULL;
  const int64_t page = bt->table[r * bt->stride + b];
  if (page < 0 || page >= d->cache.num_pages) return NULL;
  const int64_t j = s % P;
  const uint8_t *pg = (const uint8_t *)d->cache.base + page * d->cache.page_stride;
  *kscale = dsk_fmt_load_f32(pg + DSK_FMT_I_DATA_BYTES * P + 4 * j);
  return pg + DSK_FMT_I_DATA_BYTES * j;
}

/* One work item: row t, columns [c0, c1). Returns the entries counted as
 * missing. qf is scratch for the row's decoded q (n_heads * 128 floats). */
static int64_t logits_item(const dsk_indexer_logits_desc *d, const float *lut, float *qf, double *wq, int64_t t,
                           int64_t c0, int64_t c1, int64_t skip_le) {
  const int64_t H = d->n_heads;
  float *out = d->out + t * d->out_stride_t;
  const int64_t L = dsk__indexer_causal_len(d->pos[t], d->slot_mapping[t], d->ratio);
  const int64_t n = L < d->ctx_width ? L : d->ctx_width;
  if (skip_le >= 0 && n <= skip_le) return 0;
  const int64_t e = n < c1 ? n : c1;
  int64_t missing = 0;
  if (c0 < e) {
    const int64_t r = d->req[t];
    const int rvalid = r >= 0 && r < d->block_table.rows;
    for (int64_t h = 0; h < H; h++) {
      const uint8_t *qh = d->q + t * d->q_stride_t + h * d->q_stride_h;
      for (int i = 0; i < DSK_INDEXER_DIM; i++) qf[h * DSK_INDEXER_DIM + i] = lut[qh[i]];
      wq[h] = (double)d->weights[t * d->weights_stride_t + h] * (double)d->q_scale[t * d->q_scale_stride_t + h];
    }
    double kd[DSK_INDEXER_DIM];
    for (int64_t s = c0; s < e; s++) {
      float ks = 0.0f;
      const uint8_t *rec = entry_record(d, r, rvalid, s, &ks);
      if (!rec) {
        out[s] = -INFINITY;
        missing++;
        continue;
      }
      for (int i = 0; i < DSK_INDEXER_DIM; i++) kd[i] = lut[rec[i]];
      double acc = 0.0;
      for (int64_t h = 0; h < H; h++) {
        const float *qv = qf + h * DSK_INDEXER_DIM;
        double dot = 0.0;
        for (int i = 0; i < DSK_INDEXER_DIM; i++) dot += (double)qv[i] * kd[i];
        const double relu = dot < 0.0 ? 0.0 : dot;
        acc += wq[h] * relu;
      }
      out[s] = (float)((double)ks * acc);
    }
  }
  for (int64_t s = c0 > n ? c0 : n; s < c1; s++) out[s] = -INFINITY;
  return missing;
}

dsk_status dsk__ref_indexer_logits(dsk_ctx *ctx, const dsk_indexer_logits_desc *d, int64_t skip_le) {
  const int64_t T = d->T, W = d->ctx_width;
  float lut[256];
  for (int b = 0; b < 256; b++) lut[b] = dsk_fmt_e4m3_to_f32((uint8_t)b);

  int64_t truncated = 0;
  for (int64_t t = 0; t < T; t++) {
    const int64_t L = dsk__indexer_causal_len(d->pos[t], d->slot_mapping[t], d->ratio);
    truncated += L > W;
  }

  const int64_t nchunks = (W + REF_IDX_CHUNK - 1) / REF_IDX_CHUNK;
  const int64_t items = T * nchunks;
  int64_t missing = 0;
  const int nt = ref_threads(ctx, items);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : missing) if (nt > 1)
#endif
  {
    float qf[128 * DSK_INDEXER_DIM];
    double wq[128];
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 4)
#endif
    for (int64_t it = 0; it < items; it++) {
      const int64_t t = it / nchunks, c = it % nchunks;
      const int64_t c0 = c * REF_IDX_CHUNK, c1 = c0 + REF_IDX_CHUNK < W ? c0 + REF_IDX_CHUNK : W;
      missing += logits_item(d, lut, qf, wq, t, c0, c1, skip_le);
    }
  }
  if (d->counters) {
    d->counters[0] += missing;
    d->counters[1] += truncated;
  }
  return DSK_STATUS_OK;
}

/* ---------------------------------------------------------------- top-k */

static uint32_t score_key(float x) { return dsk__topk_key_from_bits(dsk_fmt_f32_bits(x)); }

static uint64_t composite(uint32_t key, int64_t col) { return ((uint64_t)key << 32) | (uint32_t)~(uint32_t)col; }

static int cmp_desc_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x < y) - (x > y);
}

static void write_sorted(int32_t *out, int64_t K, uint64_t *buf, int64_t n) {
  qsort(buf, (size_t)n, sizeof *buf, cmp_desc_u64);
  for (int64_t i = 0; i < n; i++) out[i] = (int32_t)~(uint32_t)(buf[i] & 0xFFFFFFFFu);
  for (int64_t i = n; i < K; i++) out[i] = -1;
}

/* One row; buf holds K composites. */
static void topk_row(const float *sc, int64_t L, int64_t K, int shortcut, int32_t *out, uint64_t *buf) {
  if (L <= K) {
    if (shortcut) {
      for (int64_t i = 0; i < L; i++) out[i] = (int32_t)i;
      for (int64_t i = L; i < K; i++) out[i] = -1;
      return;
    }
    for (int64_t i = 0; i < L; i++) buf[i] = composite(score_key(sc[i]), i);
    write_sorted(out, K, buf, L);
    return;
  }
  /* The K-th largest key: 8 bits at a time, from the top. */
  uint32_t prefix = 0, mask = 0;
  int64_t need = K; /* still to take among keys matching prefix */
  for (int shift = 24; shift >= 0; shift -= 8) {
    int64_t hist[256];
    memset(hist, 0, sizeof hist);
    for (int64_t i = 0; i < L; i++) {
      const uint32_t k = score_key(sc[i]);
      if ((k & mask) == prefix) hist[(k >> shift) & 255u]++;
    }
    int64_t above = 0;
    int b = 255;
    for (; b > 0; b--) {
      if (above + hist[b] >= need) break;
      above += hist[b];
    }
    need -= above;
    prefix |= (uint32_t)b << shift;
    mask |= 255u << shift;
  }
  /* Every key above the K-th, and the `need` lowest columns equal to it. */
  const uint32_t tau = prefix;
  int64_t n = 0, eq = 0;
  for (int64_t i = 0; i < L && n < K; i++) {
    const uint32_t k = score_key(sc[i]);
    if (k > tau || (k == tau && eq++ < need)) buf[n++] = composite(k, i);
  }
  write_sorted(out, K, buf, n);
}

static int64_t row_len(const dsk__topk_args *a, int64_t t, int *clamped) {
  *clamped = 0;
  int64_t L;
  if (a->lens) {
    L = a->lens[t];
    if (L < 0 || L > a->width) {
      *clamped = 1;
      L = L < 0 ? 0 : a->width;
    }
    return L;
  }
  if (a->pos) {
    L = dsk__indexer_causal_len(a->pos[t], a->slot_mapping[t], a->ratio);
    return L < a->width ? L : a->width;
  }
  return a->width;
}

int64_t dsk__ref_topk_workspace(const dsk_ctx *ctx, const dsk__topk_args *a) {
  (void)ctx;
  (void)a;
  return 0;
}

dsk_status dsk__ref_topk(dsk_ctx *ctx, const dsk__topk_args *a) {
  const int64_t T = a->T;
  int64_t clamped = 0;
  const int nt = ref_threads(ctx, T);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : clamped) if (nt > 1)
#endif
  {
    uint64_t buf[DSK_TOPK_MAX_K];
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (int64_t t = 0; t < T; t++) {
      int c;
      const int64_t L = row_len(a, t, &c);
      clamped += c;
      topk_row(a->scores + t * a->scores_stride_t, L, a->K, a->shortcut, a->out + t * a->out_stride_t, buf);
    }
  }
  if (a->counters) a->counters[0] += clamped;
  return DSK_STATUS_OK;
}
