/* ref_sparse_mla.c - the CPU reference of dsk_sparse_mla_decode
 * (spec/sparse-decode.md §2-§4), in fp64, for Format A (656 B) and Format B
 * (584 B) caches, one or two segments.
 *
 * How it computes (per query row t and a group of heads):
 *  - walk the valid entries of segment 0 then segment 1 (validity rule §2:
 *    k < clamp(lens[t], 0, width) and 0 <= slot < num_pages*pbs); invalid
 *    entries are never read;
 *  - take them 32 at a time ("chunk"): dequantise each record once
 *    (kv-cache.md §3/§4 with the codecs of src/format/format.h: Format A
 *    fp8 * fp32 scale as one fp32 multiply, Format B fp8 * 2^(e-127) which is
 *    exact; rope bf16) and reuse it for every head of the group;
 *  - scores s = sm_scale * q.K in fp64; softmax over the union of both
 *    segments, computed online (running max m, sum Z, fp64 accumulator
 *    rescaled by exp(m_old - m_new) when the max grows): in fp64 this equals
 *    the two-pass formula of §3 far below the bf16 output resolution;
 *  - out = acc / (Z + exp(sink - m)) rounded once from fp64 to bf16 (round to
 *    nearest even, no double rounding: fp64 -> fp32 with round-to-odd, then
 *    fp32 -> bf16 RNE); lse = m + ln Z (natural log, sink excluded);
 *  - rows with no valid entry: out = 0, lse = -inf; sink = +inf: out = 0.
 *
 * Threads: OpenMP over (row, head group) tasks. Each head's arithmetic is the
 * same sequence of operations whatever the grouping and thread count, so
 * results are bitwise reproducible. The per-thread scratch (decoded chunk,
 * scores, accumulators) comes from the caller's workspace, sized by
 * dsk__ref_sparse_mla_workspace; nothing is allocated here. Counters are
 * counted in a separate serial pass, so they are deterministic too.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../format/format.h"
#include "ref.h"

#define MLA_CH 32 /* candidates dequantised per chunk */

static int64_t mla_dqk(dsk_kv_format f) { return f == DSK_KV_FORMAT_A656 ? 576 : 512; }

/* ---------------------------------------------------------------- decoding */
/* Bit-level codecs and record offsets come from src/format/format.h. */

/* fp64 -> bf16 with one rounding (nearest even). fp64 -> fp32 is done with
 * round-to-odd (truncate, then set the last bit if inexact), which keeps
 * enough information for the final fp32 -> bf16 RNE to be correct. */
static uint16_t bf16_from_f64(double x) {
  if (isnan(x)) return (uint16_t)(signbit(x) ? 0xFFC0 : 0x7FC0);
  float f = (float)x;
  if (isinf(f) && !isinf(x)) f = copysignf(FLT_MAX, f);
  if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f); /* truncate toward zero */
  uint32_t u = dsk_fmt_f32_bits(f);
  if ((double)f != x) u |= 1u; /* sticky: inexact */
  if ((u & 0x7F800000u) == 0x7F800000u) return (uint16_t)(u >> 16); /* +-inf */
  uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(r >> 16);
}

/* Decodes the record of `slot` (already range-checked) into k[0:dqk]
 * (kv-cache.md §3/§4). Format A: fp8 * fp32 scale, one fp32 multiply; Format
 * B: fp8 * ue8m0_kv(byte), also an fp32 multiply (exact for every scale a
 * writer produces); rope bf16. */
static void decode_record(dsk_kv_format f, const dsk_kv_cache *c, int64_t slot, const float *e4m3_lut, double *k) {
  const uint8_t *base = (const uint8_t *)c->base;
  if (f == DSK_KV_FORMAT_A656) {
    const uint8_t *rec = base + dsk_fmt_a_record_off(slot, c->pbs, c->page_stride);
    for (int t = 0; t < DSK_FMT_A_TILES; t++) {
      const float sc = dsk_fmt_load_f32(rec + DSK_FMT_A_SCALE_OFF + 4 * t);
      for (int d = DSK_FMT_A_TILE * t; d < DSK_FMT_A_TILE * (t + 1); d++) {
        const float v = e4m3_lut[rec[d]] * sc; /* one fp32 multiply, round to nearest */
        k[d] = (double)v;
      }
    }
    for (int i = 0; i < DSK_FMT_ROPE_DIM; i++)
      k[DSK_FMT_A_LATENT + i] = (double)dsk_fmt_bf16_to_f32(dsk_fmt_load_u16(rec + DSK_FMT_A_ROPE_OFF + 2 * i));
  } else {
    const uint8_t *tok = base + dsk_fmt_b_data_off(slot, c->pbs, c->page_stride);
    const uint8_t *foot = base + dsk_fmt_b_scale_off(slot, c->pbs, c->page_stride);
    for (int t = 0; t < DSK_FMT_B_TILES; t++) {
      const float sc = dsk_fmt_ue8m0_kv_to_f32(foot[t]);
      for (int d = DSK_FMT_B_TILE * t; d < DSK_FMT_B_TILE * (t + 1); d++) {
        const float v = e4m3_lut[tok[d]] * sc;
        k[d] = (double)v;
      }
    }
    for (int i = 0; i < DSK_FMT_ROPE_DIM; i++)
      k[DSK_FMT_B_LATENT + i] = (double)dsk_fmt_bf16_to_f32(dsk_fmt_load_u16(tok + DSK_FMT_B_ROPE_OFF + 2 * i));
  }
}

/* --------------------------------------------------------------- workspace */

typedef struct mla_scratch {
  double *kr;  /* [CH][dqk] decoded records (V = kr[c][0:512]) */
  double *kt;  /* [dqk][CH] the same, transposed, for the score loop */
  double *sc;  /* [H][CH] scores of the chunk */
  double *acc; /* [H][512] running sum of p * V */
  double *m;   /* [H] running max */
  double *z;   /* [H] running sum of p */
  double *qd;  /* [H][dqk] the row's q in fp64 */
  int64_t *cand_seg, *cand_slot; /* [CH] */
} mla_scratch;

static size_t scratch_doubles(int64_t H, int64_t dqk) {
  return (size_t)(2 * MLA_CH * dqk + H * MLA_CH + H * 512 + 2 * H + H * dqk + 2 * MLA_CH);
}

static size_t scratch_bytes(int64_t H, int64_t dqk) {
  size_t b = scratch_doubles(H, dqk) * sizeof(double);
  return (b + 63) & ~(size_t)63;
}

static int ref_threads(const dsk_ctx *ctx) { return ctx->num_threads > 0 ? ctx->num_threads : 1; }

int64_t dsk__ref_sparse_mla_workspace(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t) {
  (void)t; /* every tactic runs the same reference */
  return (int64_t)scratch_bytes(d->H, mla_dqk(d->format)) * ref_threads(ctx) + 64;
}

static mla_scratch scratch_at(void *ws, int tid, int64_t H, int64_t dqk) {
  uintptr_t base = ((uintptr_t)ws + 63) & ~(uintptr_t)63;
  double *p = (double *)(base + (uintptr_t)tid * scratch_bytes(H, dqk));
  mla_scratch s;
  s.kr = p; p += MLA_CH * dqk;
  s.kt = p; p += MLA_CH * dqk;
  s.sc = p; p += H * MLA_CH;
  s.acc = p; p += H * 512;
  s.m = p; p += H;
  s.z = p; p += H;
  s.qd = p; p += H * dqk;
  s.cand_seg = (int64_t *)p; p += MLA_CH;
  s.cand_slot = (int64_t *)p;
  return s;
}

/* ------------------------------------------------------------------ kernel */

static int64_t row_len(const dsk_sparse_mla_segment *g, int64_t t) {
  if (!g->lens) return g->width;
  int64_t l = g->lens[t];
  return l < 0 ? 0 : l > g->width ? g->width : l;
}

/* Folds the n candidates of the scratch chunk into heads [h0, h1). */
static void process_chunk(const dsk_sparse_mla_desc *d, const float *lut, mla_scratch *s, int n, int64_t h0,
                          int64_t h1) {
  const int64_t dqk = mla_dqk(d->format);
  for (int c = 0; c < n; c++) {
    double *k = s->kr + (int64_t)c * dqk;
    decode_record(d->format, &d->seg[s->cand_seg[c]].cache, s->cand_slot[c], lut, k);
    for (int64_t e = 0; e < dqk; e++) s->kt[e * MLA_CH + c] = k[e];
  }
  for (int c = n; c < MLA_CH; c++) /* unused columns of a partial chunk */
    for (int64_t e = 0; e < dqk; e++) s->kt[e * MLA_CH + c] = 0.0;
  const double scale = (double)d->sm_scale;
  for (int64_t h = h0; h < h1; h++) {
    double *sc = s->sc + (h - h0) * MLA_CH;
    const double *q = s->qd + (h - h0) * dqk;
    for (int c = 0; c < MLA_CH; c++) sc[c] = 0.0;
    for (int64_t e = 0; e < dqk; e++) {
      const double qe = q[e];
      const double *kt = s->kt + e * MLA_CH;
      for (int c = 0; c < MLA_CH; c++) sc[c] += qe * kt[c];
    }
    double cmax = -INFINITY;
    for (int c = 0; c < n; c++) {
      sc[c] *= scale;
      if (sc[c] > cmax) cmax = sc[c];
    }
    double *acc = s->acc + (h - h0) * 512;
    double mold = s->m[h - h0];
    if (cmax > mold) {
      double alpha = exp(mold - cmax); /* mold = -inf -> 0 */
      s->z[h - h0] *= alpha;
      for (int e = 0; e < 512; e++) acc[e] *= alpha;
      s->m[h - h0] = cmax;
    }
    const double m = s->m[h - h0];
    for (int c = 0; c < n; c++) {
      double p = exp(sc[c] - m);
      s->z[h - h0] += p;
      const double *v = s->kr + (int64_t)c * dqk;
      for (int e = 0; e < 512; e++) acc[e] += p * v[e];
    }
  }
}

static void run_task(const dsk_sparse_mla_desc *d, const float *lut, mla_scratch *s, int64_t t, int64_t h0,
                     int64_t h1) {
  const int64_t dqk = mla_dqk(d->format);
  for (int64_t h = h0; h < h1; h++) {
    const dsk_bf16 *q = d->q + t * d->q_stride_t + h * d->q_stride_h;
    double *qd = s->qd + (h - h0) * dqk;
    for (int64_t e = 0; e < dqk; e++) qd[e] = (double)dsk_fmt_bf16_to_f32(q[e]);
    s->m[h - h0] = -INFINITY;
    s->z[h - h0] = 0.0;
    memset(s->acc + (h - h0) * 512, 0, 512 * sizeof(double));
  }
  int n = 0;
  int64_t total = 0;
  for (int i = 0; i < d->nseg; i++) {
    const dsk_sparse_mla_segment *g = &d->seg[i];
    const int64_t cap = g->cache.num_pages * g->cache.pbs;
    const int64_t L = row_len(g, t);
    const int32_t *row = g->slots + t * g->slots_stride_t;
    for (int64_t k = 0; k < L; k++) {
      int64_t slot = row[k];
      if (slot < 0 || slot >= cap) continue; /* invalid: never read */
      s->cand_seg[n] = i;
      s->cand_slot[n] = slot;
      n++;
      total++;
      if (n == MLA_CH) {
        process_chunk(d, lut, s, n, h0, h1);
        n = 0;
      }
    }
  }
  if (n > 0) process_chunk(d, lut, s, n, h0, h1);

  for (int64_t h = h0; h < h1; h++) {
    dsk_bf16 *o = d->out + t * d->out_stride_t + h * d->out_stride_h;
    float *lse = d->lse ? d->lse + t * d->lse_stride_t + h * d->lse_stride_h : NULL;
    if (total == 0) {
      for (int e = 0; e < 512; e++) o[e] = 0;
      if (lse) *lse = -INFINITY;
      continue;
    }
    const double m = s->m[h - h0], z = s->z[h - h0];
    if (lse) *lse = (float)(m + log(z));
    double sink = d->sink ? (double)d->sink[h] : -INFINITY;
    if (sink == INFINITY) {
      for (int e = 0; e < 512; e++) o[e] = 0;
      continue;
    }
    const double den = z + exp(sink - m);
    const double *acc = s->acc + (h - h0) * 512;
    for (int e = 0; e < 512; e++) o[e] = bf16_from_f64(acc[e] / den);
  }
}

dsk_status dsk__ref_sparse_mla_decode(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *tac) {
  (void)tac;
  const int64_t T = d->T, H = d->H;
  if (T == 0) return DSK_STATUS_OK;

  /* Bad-data counters (sparse-decode.md §1): serial, so deterministic. */
  if (d->counters) {
    int64_t oob = 0, clamped = 0;
    for (int i = 0; i < d->nseg; i++) {
      const dsk_sparse_mla_segment *g = &d->seg[i];
      const int64_t cap = g->cache.num_pages * g->cache.pbs;
      for (int64_t t = 0; t < T; t++) {
        if (g->lens && (g->lens[t] < 0 || g->lens[t] > g->width)) clamped++;
        const int64_t L = row_len(g, t);
        const int32_t *row = g->slots + t * g->slots_stride_t;
        for (int64_t k = 0; k < L; k++) oob += row[k] >= cap;
      }
    }
    d->counters[0] += oob;
    d->counters[1] += clamped;
  }

  float lut[256];
  for (int b = 0; b < 256; b++) lut[b] = dsk_fmt_e4m3_to_f32((uint8_t)b);

  const int nt = ref_threads(ctx);
  /* Split heads into groups only when there are fewer rows than threads;
   * groups keep >= 4 heads so the record decode stays amortised. */
  int64_t ngroups = 1;
  if (T < nt) {
    ngroups = (nt + T - 1) / T;
    int64_t maxg = (H + 3) / 4;
    if (ngroups > maxg) ngroups = maxg;
  }
  const int64_t gs = (H + ngroups - 1) / ngroups;
  const int64_t ntasks = T * ngroups;
  const int64_t dqk = mla_dqk(d->format);
  void *ws = d->workspace;

#ifdef _OPENMP
  int nthr = nt < ntasks ? nt : (int)ntasks;
#pragma omp parallel num_threads(nthr)
  {
    mla_scratch s = scratch_at(ws, omp_get_thread_num(), H, dqk);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; task++) {
      int64_t t = task / ngroups, g = task % ngroups;
      int64_t h0 = g * gs, h1 = h0 + gs < H ? h0 + gs : H;
      if (h0 < H) run_task(d, lut, &s, t, h0, h1);
    }
  }
#else
  mla_scratch s = scratch_at(ws, 0, H, dqk);
  for (int64_t task = 0; task < ntasks; task++) {
    int64_t t = task / ngroups, g = task % ngroups;
    int64_t h0 = g * gs, h1 = h0 + gs < H ? h0 + gs : H;
    if (h0 < H) run_task(d, lut, &s, t, h0, h1);
  }
#endif
  (void)ctx;
  return DSK_STATUS_OK;
}
