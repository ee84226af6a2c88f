/* ref_moe.c - cpu-ref of the MoE element-wise and layout ops
 * (spec/mxfp4-moe.md §2, §4, §5.5, §6; docs/moe.md):
 * quantizers, scale packing, routing, permute, SwiGLU + re-quantization
 * and the weighted gather. The GEMMs are in ref_moe_gemm.c.
 *
 * Written for clarity: per-block rules come from src/format/mxfp4.h (the
 * same inline functions a CUDA kernel uses), routing and SwiGLU run in
 * fp64 and round once, the gather accumulates in fp64. OpenMP over rows /
 * tokens; every output element is written by one thread in a fixed order, so
 * results do not depend on the thread count. No allocation: scratch lives
 * on the stack in fixed-size chunks or in the caller's workspace.
 */
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ref_moe.h"
#include "format/mxfp4.h"

static int ref_threads(const dsk_ctx *ctx, int64_t items) {
  int nt = ctx->num_threads > 0 ? ctx->num_threads : 1;
  if (items < nt) nt = items < 1 ? 1 : (int)items;
  return nt;
}

static const void *elem_ptr(int dtype, const void *base, int64_t idx) {
  return dtype == (int)DSK_MOE_IN_F32 ? (const void *)((const float *)base + idx)
                                      : (const void *)((const uint16_t *)base + idx);
}

/* Writes the scale bytes of row r into a packed G=1 tensor (MN = rows). */
static void put_packed_row(int32_t *packed, int64_t rows, int64_t sf_k, int64_t r, const uint8_t *bytes) {
  for (int64_t p = 0; p < dsk_fmt_sf_kp(sf_k); p++)
    packed[dsk_fmt_sf_off(rows, sf_k, 0, r, p)] = (int32_t)dsk_fmt_pack_word(bytes, sf_k, p);
}
/* Zeroes the padding rows [rows, round_up(rows, 4)) of a packed G=1 tensor. */
static void zero_packed_pad(int32_t *packed, int64_t rows, int64_t sf_k) {
  for (int64_t p = 0; p < dsk_fmt_sf_kp(sf_k); p++)
    for (int64_t r = rows; r < dsk_fmt_sf_t4(rows); r++) packed[dsk_fmt_sf_off(rows, sf_k, 0, r, p)] = 0;
}

/* ------------------------------------------------------------ MX quantize */
dsk_status dsk__ref_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *d) {
  const int64_t R = d->rows, nb = d->K / DSK_FMT_MX_BLOCK;
  int64_t nan_blocks = 0;
  const int nt = ref_threads(ctx, R);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) reduction(+ : nan_blocks) schedule(static) if (nt > 1)
#endif
  for (int64_t r = 0; r < R; r++) {
    float v[DSK_FMT_MX_BLOCK];
    for (int64_t b = 0; b < nb; b++) {
      dsk__mx_widen_row((int)d->x_dtype, elem_ptr((int)d->x_dtype, d->x, r * d->x_stride + b * DSK_FMT_MX_BLOCK),
                        DSK_FMT_MX_BLOCK, v);
      nan_blocks += dsk_fmt_mx_quant_block(v, d->flags, d->q + r * d->q_stride + b * DSK_FMT_MX_BYTES,
                                           d->sf + r * d->sf_stride + b);
    }
  }
  if (d->counters) d->counters[0] += nan_blocks;
  return DSK_STATUS_OK;
}

/* ---------------------------------------------------------- FP8 quantize */
dsk_status dsk__ref_fp8_quantize(dsk_ctx *ctx, const dsk_fp8_quantize_desc *d) {
  const int64_t R = d->rows, ng = d->K / DSK_FMT_FP8_GROUP;
  int64_t bad = 0;
  const int nt = ref_threads(ctx, R);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) reduction(+ : bad) schedule(static) if (nt > 1)
#endif
  for (int64_t r = 0; r < R; r++) {
    float v[DSK_FMT_FP8_GROUP];
    uint8_t sb[4];
    for (int64_t g = 0; g < ng; g++) {
      dsk__mx_widen_row((int)d->x_dtype, elem_ptr((int)d->x_dtype, d->x, r * d->x_stride + g * DSK_FMT_FP8_GROUP),
                        DSK_FMT_FP8_GROUP, v);
      uint8_t e;
      bad += dsk_fmt_fp8_quant_group(v, DSK_FMT_FP8_GROUP, d->q + r * d->q_stride + g * DSK_FMT_FP8_GROUP, &e);
      if (d->sf) d->sf[r * d->sf_stride + g] = e;
      if (d->sf_packed) {
        sb[g % 4] = e;
        if (g % 4 == 3 || g == ng - 1) {
          for (int64_t j = g % 4 + 1; j < 4; j++) sb[j] = 0;
          d->sf_packed[dsk_fmt_sf_off(R, ng, 0, r, g / 4)] = (int32_t)dsk_fmt_pack_word(sb, 4, 0);
        }
      }
    }
  }
  if (d->sf_packed) zero_packed_pad(d->sf_packed, R, ng);
  if (d->counters) d->counters[0] += bad;
  return DSK_STATUS_OK;
}

/* ---------------------------------------------------------- scale packing */
dsk_status dsk__ref_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d) {
  (void)ctx;
  const int64_t kp = dsk_fmt_sf_kp(d->sf_k);
  for (int64_t r = 0; r < d->rows; r++)
    for (int64_t p = 0; p < kp; p++)
      d->out[r * d->out_stride + p] = (int32_t)dsk_fmt_pack_word(d->sf + r * d->sf_stride, d->sf_k, p);
  return DSK_STATUS_OK;
}

dsk_status dsk__ref_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *d) {
  (void)ctx;
  for (int64_t g = 0; g < d->G; g++)
    dsk__sf_pack_group(d->sf + g * d->sf_group_stride, d->sf_stride, d->MN, d->sf_k, d->gran_mn, g, d->out);
  return DSK_STATUS_OK;
}

/* ---------------------------------------------------------------- route */
/* a ranks before b: larger value first, NaN below everything, equal values
 * -> lower expert id first. */
static int ranks_before(double a, int64_t ia, double b, int64_t ib) {
  const int na = a != a, nb = b != b;
  if (na || nb) return na == nb ? ia < ib : nb;
  if (a != b) return a > b;
  return ia < ib;
}

static double score_of(int score, double z) {
  if (score == (int)DSK_MOE_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-z));
  const double sp = (z > 0 ? z : 0.0) + log1p(exp(-fabs(z)));
  return sqrt(sp);
}

dsk_status dsk__ref_moe_route(dsk_ctx *ctx, const dsk_moe_route_desc *d) {
  const int64_t T = d->T, E = d->E, K = d->topk;
  int64_t bad_tok = 0, nonfinite = 0;
  const int nt = ref_threads(ctx, T);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) reduction(+ : bad_tok, nonfinite) schedule(dynamic, 1) if (nt > 1)
#endif
  for (int64_t t = 0; t < T; t++) {
    double s[DSK_MOE_MAX_EXPERTS];
    int64_t idx[DSK_MOE_MAX_TOPK];
    int fin = 1;
    for (int64_t e = 0; e < E; e++) {
      double z;
      if (d->logits) {
        z = (double)d->logits[t * d->logits_stride + e];
      } else {
        const uint16_t *x = d->x + t * d->x_stride, *w = d->gate_w + e * d->H;
        z = 0.0;
        for (int64_t h = 0; h < d->H; h++) z += (double)dsk_fmt_bf16_to_f32(x[h]) * (double)dsk_fmt_bf16_to_f32(w[h]);
      }
      fin &= isfinite(z) != 0;
      s[e] = score_of((int)d->score, z);
    }
    nonfinite += !fin;
    if (d->router == DSK_MOE_ROUTER_HASH) {
      const int32_t tok = d->token_ids[t];
      int badt = 0;
      for (int64_t k = 0; k < K; k++) {
        int64_t e = -1;
        if (tok >= 0 && tok < d->vocab) e = d->tid2eid[(int64_t)tok * K + k];
        if (e < 0 || e >= E) {
          badt = 1;
          e = -1;
        }
        idx[k] = e;
      }
      bad_tok += badt;
    } else {
      /* selection by biased score: K passes of "best not yet taken" */
      unsigned char taken[DSK_MOE_MAX_EXPERTS];
      memset(taken, 0, (size_t)E);
      for (int64_t k = 0; k < K; k++) {
        int64_t best = -1;
        double bv = 0.0;
        for (int64_t e = 0; e < E; e++) {
          if (taken[e]) continue;
          const double v = s[e] + (d->bias ? (double)d->bias[e] : 0.0);
          if (best < 0 || ranks_before(v, e, bv, best)) {
            best = e;
            bv = v;
          }
        }
        taken[best] = 1;
        idx[k] = best;
      }
    }
    double w[DSK_MOE_MAX_TOPK], sum = 0.0;
    for (int64_t k = 0; k < K; k++) {
      w[k] = idx[k] >= 0 ? s[idx[k]] : 0.0;
      sum += w[k];
    }
    const double div = d->renormalize ? (sum > 1e-20 ? sum : 1e-20) : 1.0;
    for (int64_t k = 0; k < K; k++) {
      d->ids[t * d->ids_stride + k] = (int32_t)idx[k];
      d->weights[t * d->weights_stride + k] = (float)(w[k] / div * (double)d->routed_scaling_factor);
    }
  }
  if (d->counters) {
    d->counters[0] += bad_tok;
    d->counters[1] += nonfinite;
  }
  return DSK_STATUS_OK;
}

/* -------------------------------------------------------------- permute */
int64_t dsk__ref_moe_permute_workspace(const dsk_ctx *ctx, const dsk_moe_permute_desc *d) {
  (void)ctx;
  return 2 * d->E_local * (int64_t)sizeof(int64_t);
}

dsk_status dsk__ref_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *d) {
  (void)ctx;
  const int64_t T = d->T, K = d->topk, EL = d->E_local, A = d->A_used, M = d->M_sum;
  const int64_t sfk = d->K / DSK_FMT_FP8_GROUP;
  int64_t *cnt = (int64_t *)d->workspace, *start = cnt + EL;
  int64_t bad = 0, dropped = 0;
  for (int64_t l = 0; l < EL; l++) cnt[l] = 0;
  /* 1. counts; a local id l = id - expert_offset in [0, E_local) */
  for (int64_t t = 0; t < T; t++)
    for (int64_t k = 0; k < K; k++) {
      const int64_t id = d->ids[t * d->ids_stride + k];
      if (id == -1) continue;
      if (id < -1 || id >= d->E) continue; /* counted in pass 3 */
      const int64_t l = id - d->expert_offset;
      if (l >= 0 && l < EL) cnt[l]++;
    }
  /* 2. segment starts: exclusive prefix sum of round_up(n_l, A_used) */
  int64_t acc = 0;
  for (int64_t l = 0; l < EL; l++) {
    start[l] = acc;
    acc += (cnt[l] + A - 1) / A * A;
    cnt[l] = 0; /* reused as the running rank */
  }
  /* padding everywhere first: rows and scale bytes 0 (left as they are
   * with DSK_MOE_PERMUTE_NO_PAD_FILL), m_indices -1 */
  const int fill = !(d->flags & DSK_MOE_PERMUTE_NO_PAD_FILL);
  for (int64_t r = 0; r < M; r++) {
    if (fill) {
      memset(d->A + r * d->A_stride, 0, (size_t)d->K);
      memset(d->Asf + r * d->Asf_stride, 0, (size_t)sfk);
    }
    d->m_indices[r] = -1;
  }
  /* 3. stable placement by (t, k) ascending */
  for (int64_t t = 0; t < T; t++)
    for (int64_t k = 0; k < K; k++) {
      const int64_t id = d->ids[t * d->ids_stride + k];
      int32_t *ip = d->inv_perm + t * d->inv_perm_stride + k;
      *ip = -1;
      if (id == -1) continue;
      if (id < -1 || id >= d->E) {
        bad++;
        continue;
      }
      const int64_t l = id - d->expert_offset;
      if (l < 0 || l >= EL) continue; /* another rank's expert (EP) */
      const int64_t row = start[l] + cnt[l]++;
      if (row >= M) {
        dropped++;
        continue;
      }
      memcpy(d->A + row * d->A_stride, d->xq + t * d->xq_stride, (size_t)d->K);
      memcpy(d->Asf + row * d->Asf_stride, d->xsf + t * d->xsf_stride, (size_t)sfk);
      d->m_indices[row] = (int32_t)l;
      *ip = (int32_t)row;
    }
  if (d->counters) {
    d->counters[0] += bad;
    d->counters[1] += dropped;
  }
  return DSK_STATUS_OK;
}

/* ----------------------------------------------------- SwiGLU + quantize */
dsk_status dsk__ref_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *d) {
  const int64_t R = d->rows, I = d->I, ng = I / DSK_FMT_FP8_GROUP;
  const double L = (double)d->limit;
  int64_t bad = 0;
  const int nt = ref_threads(ctx, R);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) reduction(+ : bad) schedule(static) if (nt > 1)
#endif
  for (int64_t r = 0; r < R; r++) {
    uint8_t *q = d->q + r * d->q_stride;
    uint8_t sb[DSK_MOE_MAX_K / DSK_FMT_FP8_GROUP]; /* scale bytes of this row (I <= DSK_MOE_MAX_K) */
    if (d->m_indices && d->m_indices[r] < 0 && (d->flags & DSK_SWIGLU_SKIP_PADDING)) continue; /* left as is */
    if (d->m_indices && d->m_indices[r] < 0) {
      memset(q, 0, (size_t)I);
      memset(sb, 0, (size_t)ng);
    } else {
      const uint16_t *g16 = d->D1 + r * d->D1_stride, *u16 = g16 + I;
      float h[DSK_FMT_FP8_GROUP];
      for (int64_t g = 0; g < ng; g++) {
        for (int i = 0; i < DSK_FMT_FP8_GROUP; i++) {
          const int64_t c = g * DSK_FMT_FP8_GROUP + i;
          double gv = (double)dsk_fmt_bf16_to_f32(g16[c]), uv = (double)dsk_fmt_bf16_to_f32(u16[c]);
          if (L > 0.0) {
            if (gv > L) gv = L;
            if (uv > L) uv = L;
            if (uv < -L) uv = -L;
          }
          h[i] = (float)(gv / (1.0 + exp(-gv)) * uv);
        }
        bad += dsk_fmt_fp8_quant_group(h, DSK_FMT_FP8_GROUP, q + g * DSK_FMT_FP8_GROUP, &sb[g]);
      }
    }
    if (d->sf) memcpy(d->sf + r * d->sf_stride, sb, (size_t)ng);
    if (d->sf_packed) put_packed_row(d->sf_packed, R, ng, r, sb);
  }
  if (d->sf_packed) zero_packed_pad(d->sf_packed, R, ng);
  if (d->counters) d->counters[0] += bad;
  return DSK_STATUS_OK;
}

/* --------------------------------------------------------------- gather */
dsk_status dsk__ref_moe_gather(dsk_ctx *ctx, const dsk_moe_gather_desc *d) {
  const int64_t T = d->T, K = d->topk, N = d->N;
  int64_t bad = 0;
  /* bad rows are counted once, outside the column loop */
  for (int64_t t = 0; t < T; t++)
    for (int64_t k = 0; k < K; k++) bad += d->inv_perm[t * d->inv_perm_stride + k] >= d->M_sum;
  const int64_t NC = 256, nchunk = (N + NC - 1) / NC, items = T * nchunk;
  const int nt = ref_threads(ctx, items);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (int64_t it = 0; it < items; it++) {
    const int64_t t = it / nchunk, n0 = (it % nchunk) * NC, n1 = n0 + NC < N ? n0 + NC : N;
    double acc[256];
    for (int64_t n = n0; n < n1; n++)
      acc[n - n0] = d->shared ? (double)dsk_fmt_bf16_to_f32(d->shared[t * d->shared_stride + n]) : 0.0;
    for (int64_t k = 0; k < K; k++) {
      const int64_t row = d->inv_perm[t * d->inv_perm_stride + k];
      if (row < 0 || row >= d->M_sum) continue;
      const double w = (double)d->weights[t * d->weights_stride + k];
      const uint16_t *src = d->D2 + row * d->D2_stride;
      for (int64_t n = n0; n < n1; n++) acc[n - n0] += w * (double)dsk_fmt_bf16_to_f32(src[n]);
    }
    for (int64_t n = n0; n < n1; n++) d->y[t * d->y_stride + n] = dsk_fmt_bf16_from_f32((float)acc[n - n0]);
  }
  if (d->counters) d->counters[0] += bad;
  return DSK_STATUS_OK;
}
