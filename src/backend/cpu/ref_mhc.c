/* ref_mhc.c - the cpu-ref mHC ops (spec/mhc.md §2-§5; docs/mhc.md).
 *
 * Descriptors arrive validated by src/ops/mhc.c with T >= 1 and the split
 * count S in tactic->v[0]. How it computes (everything in fp64 unless noted):
 *
 *  prenorm  for each (token t, split s): columns [s*Kc, min((s+1)*Kc, nD)),
 *           Kc = round_up(ceil(nD/S), 64); d[s, t, j] = sum_k fn[j, k] x[k]
 *           and q[s, t] = sum_k x[k]^2 in ascending k, each stored as one
 *           fp32 rounding (the partials buffer is fp32 by contract). Empty
 *           splits store 0. TF32: fn[j, k] is first rounded to TF32
 *           (nearest, ties away from zero; x is bf16, exact in TF32).
 *  pre      per token: the S partials summed in ascending s; r = 1 /
 *           sqrt(q / nD + eps_rms); m = d * r; pre_i = sigmoid(m_i s0 + b_i)
 *           + eps_hc; post_i = post_mult * sigmoid(m_{4+i} s1 + b_{4+i});
 *           C = Sinkhorn(m_{8+4i+j} s2 + b_{8+4i+j}) exactly as spec §3 (row
 *           softmax + eps, column normalisation, then iters - 1 rounds of
 *           row and column normalisation, each dividing by sum + eps);
 *           y[d] = sum_i pre_i R[t, i, d] in ascending i, rounded once to
 *           bf16 (directly from fp64, round to nearest even). With norm_w the
 *           rounded y is written first, read back, and replaced by
 *           bf16(w[d] * y[d] / sqrt(mean(y^2) + norm_eps)).
 *  post     R'[t, j, d] = bf16(post_j out[t, d] + sum_i C_ij R[t, i, d]),
 *           all four streams of an element loaded before any is stored (so
 *           R_out == R works).
 *  post_prenorm  post into R_out, then prenorm on the rounded R_out.
 *  head     prenorm with the 4 rows of hc_head_fn into the workspace (d
 *           [S, T, 4] then q [S, T]), then per token r, m, pre_i =
 *           sigmoid(m_i s + b_i) + eps_hc and h = bf16(sum_i pre_i R_i).
 *
 * Threads: OpenMP over (token, split) pairs for the projections and over
 * tokens for the rest; every output element is computed by one thread in a
 * fixed order, so results do not depend on the thread count.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ref.h"

static int ref_threads(const dsk_ctx *ctx) { return ctx->num_threads > 0 ? ctx->num_threads : 1; }

static uint32_t f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float u2f(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static double bf16_to_f64(dsk_bf16 b) { return (double)u2f((uint32_t)b << 16); }

/* One rounding from fp64 to bf16: round to nearest even, bf16 subnormals
 * (quantum 2^-133), overflow to inf, NaN -> quiet NaN. In the bf16 normal
 * range the fp64 significand is rounded at bit 45 (52 - 7), a carry moving
 * into the exponent as it should; the result converts to fp32 exactly (or
 * to inf past the bf16 range). */
static dsk_bf16 bf16_from_f64(double v) {
  if (v != v) return (dsk_bf16)0x7FC0;
  const uint32_t sign = signbit(v) ? 0x8000u : 0u;
  const double a = fabs(v);
  double q;
  if (a < 0x1p-126) {
    q = nearbyint(a * 0x1p133) * 0x1p-133;
  } else if (isinf(a)) {
    q = a;
  } else {
    uint64_t u;
    memcpy(&u, &a, 8);
    u += UINT64_C(0x0FFFFFFFFFFF) + ((u >> 45) & 1u);
    u &= ~UINT64_C(0x1FFFFFFFFFFF);
    memcpy(&q, &u, 8);
  }
  return (dsk_bf16)(sign | (f2u((float)q) >> 16)); /* q is exact in bf16, or beyond it (-> inf) */
}

/* TF32: keep 10 mantissa bits, round to nearest, ties away from zero
 * (cvt.rna.tf32.f32). Inf/NaN unchanged. */
static float tf32_rna(float x) {
  uint32_t u = f2u(x);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;
  u += 0x1000u;
  u &= 0xFFFFE000u;
  return u2f(u);
}

static double sigmoid64(double z) { return 1.0 / (1.0 + exp(-z)); }

/* The split projection of one (token, split): nout rows of fn over columns
 * [kb, ke) of x; writes d[0..nout) and *q as fp32. Every sum runs in
 * ascending k (the rows are independent chains, interleaved for speed). */
static void project_split(const dsk_bf16 *x, const float *fn, int64_t nD, int nout, int64_t kb, int64_t ke, int tf32,
                          float *d, float *q) {
  double acc[DSK_MHC_MIX];
  double sq = 0.0;
  for (int j = 0; j < nout; j++) acc[j] = 0.0;
  for (int64_t k = kb; k < ke; k++) {
    const double v = bf16_to_f64(x[k]);
    sq += v * v;
    for (int j = 0; j < nout; j++) {
      const float w = fn[(int64_t)j * nD + k];
      acc[j] += (double)(tf32 ? tf32_rna(w) : w) * v;
    }
  }
  *q = (float)sq;
  for (int j = 0; j < nout; j++) d[j] = (float)acc[j];
}

/* All (t, s) projections into d [S, T, nout] and q [S, T]. */
static void project_all(dsk_ctx *ctx, const dsk_bf16 *R, int64_t R_stride, const float *fn, int64_t T, int64_t nD,
                        int nout, int64_t S, int tf32, float *dbuf, float *qbuf) {
  const int64_t Kc = dsk_mhc_split_width(nD, S);
  const int64_t n = T * S;
  const int nt = ref_threads(ctx);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && n > 1)
#endif
  for (int64_t i = 0; i < n; i++) {
    const int64_t t = i / S, s = i % S;
    int64_t kb = s * Kc, ke = kb + Kc;
    if (kb > nD) kb = nD;
    if (ke > nD) ke = nD;
    project_split(R + t * R_stride, fn, nD, nout, kb, ke, tf32, dbuf + (s * T + t) * nout, qbuf + s * T + t);
  }
}

/* m[0..nout) of token t from the partials: splits summed in ascending s. */
static void mix_token(const float *dbuf, const float *qbuf, int64_t S, int64_t T, int64_t t, int nout, int64_t nD,
                      double eps_rms, double *m) {
  double dsum[DSK_MHC_MIX];
  double qsum = 0.0;
  for (int j = 0; j < nout; j++) dsum[j] = 0.0;
  for (int64_t s = 0; s < S; s++) {
    const float *dp = dbuf + (s * T + t) * nout;
    for (int j = 0; j < nout; j++) dsum[j] += (double)dp[j];
    qsum += (double)qbuf[s * T + t];
  }
  const double r = 1.0 / sqrt(qsum / (double)nD + eps_rms);
  for (int j = 0; j < nout; j++) m[j] = dsum[j] * r;
}

/* spec/mhc.md §3, in fp64. */
static void sinkhorn64(double c[4][4], int iters, double eps) {
  for (int i = 0; i < 4; i++) {
    double mx = c[i][0];
    for (int j = 1; j < 4; j++) mx = c[i][j] > mx ? c[i][j] : mx;
    double e[4], sum = 0.0;
    for (int j = 0; j < 4; j++) {
      e[j] = exp(c[i][j] - mx);
      sum += e[j];
    }
    for (int j = 0; j < 4; j++) c[i][j] = e[j] / sum + eps;
  }
  for (int it = 0; it < iters; it++) {
    if (it > 0) {
      for (int i = 0; i < 4; i++) {
        double rs = c[i][0] + c[i][1] + c[i][2] + c[i][3] + eps;
        for (int j = 0; j < 4; j++) c[i][j] /= rs;
      }
    }
    for (int j = 0; j < 4; j++) {
      double cs = c[0][j] + c[1][j] + c[2][j] + c[3][j] + eps;
      for (int i = 0; i < 4; i++) c[i][j] /= cs;
    }
  }
}

/* y[d] = bf16(sum_i w_i R_i[d]); returns nothing. */
static void weighted_sum(const dsk_bf16 *x, int64_t D, const double w[4], dsk_bf16 *y) {
  for (int64_t k = 0; k < D; k++) {
    double acc = 0.0;
    for (int i = 0; i < 4; i++) acc += w[i] * bf16_to_f64(x[(int64_t)i * D + k]);
    y[k] = bf16_from_f64(acc);
  }
}

/* ------------------------------------------------------------- prenorm */
dsk_status dsk__ref_mhc_prenorm(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d, const dsk_tactic *t) {
  const int64_t S = t->v[0], T = d->T;
  float *dbuf = d->partials;
  float *qbuf = d->partials + S * T * DSK_MHC_MIX;
  project_all(ctx, d->R, d->R_stride, d->fn, T, d->nD, DSK_MHC_MIX, S, d->precision == DSK_MHC_PRECISION_TF32, dbuf,
              qbuf);
  return DSK_STATUS_OK;
}

/* ----------------------------------------------------------------- pre */
dsk_status dsk__ref_mhc_pre(dsk_ctx *ctx, const dsk_mhc_pre_desc *d, const dsk_tactic *t) {
  const int64_t S = t->v[0], T = d->T, D = d->D, nD = d->nD;
  const float *dbuf = d->partials;
  const float *qbuf = d->partials + S * T * DSK_MHC_MIX;
  const double s0 = d->scale[0], s1 = d->scale[1], s2 = d->scale[2];
  const double eps_hc = d->eps_hc;
  const int nt = ref_threads(ctx);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && T > 1)
#endif
  for (int64_t tok = 0; tok < T; tok++) {
    double m[DSK_MHC_MIX];
    mix_token(dbuf, qbuf, S, T, tok, DSK_MHC_MIX, nD, (double)d->eps_rms, m);
    double pre[4], c[4][4];
    for (int i = 0; i < 4; i++) {
      pre[i] = sigmoid64(m[i] * s0 + (double)d->base[i]) + eps_hc;
      d->post[tok * 4 + i] = (float)((double)d->post_mult * sigmoid64(m[4 + i] * s1 + (double)d->base[4 + i]));
      if (d->pre_w) d->pre_w[tok * 4 + i] = (float)pre[i];
    }
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) c[i][j] = m[8 + 4 * i + j] * s2 + (double)d->base[8 + 4 * i + j];
    sinkhorn64(c, d->sinkhorn_iters, eps_hc);
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) d->C[tok * 16 + i * 4 + j] = (float)c[i][j];

    dsk_bf16 *y = d->y + tok * d->y_stride;
    weighted_sum(d->R + tok * d->R_stride, D, pre, y);
    if (d->norm_w) {
      double ss = 0.0;
      for (int64_t k = 0; k < D; k++) {
        double v = bf16_to_f64(y[k]);
        ss += v * v;
      }
      const double rs = 1.0 / sqrt(ss / (double)D + (double)d->norm_eps);
      for (int64_t k = 0; k < D; k++) y[k] = bf16_from_f64((double)d->norm_w[k] * (bf16_to_f64(y[k]) * rs));
    }
  }
  return DSK_STATUS_OK;
}

/* ---------------------------------------------------------------- post */
dsk_status dsk__ref_mhc_post(dsk_ctx *ctx, const dsk_mhc_post_desc *d) {
  const int64_t T = d->T, D = d->D;
  const int nt = ref_threads(ctx);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && T > 1)
#endif
  for (int64_t tok = 0; tok < T; tok++) {
    const dsk_bf16 *x = d->R + tok * d->R_stride;
    const dsk_bf16 *o = d->out + tok * d->out_stride;
    dsk_bf16 *yo = d->R_out + tok * d->R_out_stride;
    double post[4], c[4][4];
    for (int i = 0; i < 4; i++) post[i] = d->post[tok * 4 + i];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) c[i][j] = d->C[tok * 16 + i * 4 + j];
    for (int64_t k = 0; k < D; k++) {
      double xi[4];
      for (int i = 0; i < 4; i++) xi[i] = bf16_to_f64(x[(int64_t)i * D + k]);
      const double ov = bf16_to_f64(o[k]);
      for (int j = 0; j < 4; j++) {
        double acc = post[j] * ov;
        for (int i = 0; i < 4; i++) acc += c[i][j] * xi[i];
        yo[(int64_t)j * D + k] = bf16_from_f64(acc);
      }
    }
  }
  return DSK_STATUS_OK;
}

/* ------------------------------------------------------- post + prenorm */
dsk_status dsk__ref_mhc_post_prenorm(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *d, const dsk_tactic *t) {
  dsk_mhc_post_desc od;
  dsk_mhc_post_desc_init(&od);
  od.T = d->T;
  od.D = d->D;
  od.out = d->out;
  od.out_stride = d->out_stride;
  od.R = d->R;
  od.R_stride = d->R_stride;
  od.post = d->post;
  od.C = d->C;
  od.R_out = d->R_out;
  od.R_out_stride = d->R_out_stride;
  dsk_status st = dsk__ref_mhc_post(ctx, &od);
  if (st != DSK_STATUS_OK) return st;
  const int64_t S = t->v[0], T = d->T;
  project_all(ctx, d->R_out, d->R_out_stride, d->fn, T, d->nD, DSK_MHC_MIX, S,
              d->precision == DSK_MHC_PRECISION_TF32, d->partials, d->partials + S * T * DSK_MHC_MIX);
  return DSK_STATUS_OK;
}

/* ---------------------------------------------------------------- head */
dsk_status dsk__ref_mhc_head(dsk_ctx *ctx, const dsk_mhc_head_desc *d, const dsk_tactic *t) {
  const int64_t S = t->v[0], T = d->T, D = d->D, nD = d->nD;
  float *dbuf = (float *)d->workspace;
  float *qbuf = dbuf + S * T * 4;
  project_all(ctx, d->R, d->R_stride, d->fn, T, nD, 4, S, d->precision == DSK_MHC_PRECISION_TF32, dbuf, qbuf);
  const double sc = d->scale[0], eps_hc = d->eps_hc;
  const int nt = ref_threads(ctx);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && T > 1)
#endif
  for (int64_t tok = 0; tok < T; tok++) {
    double m[4], pre[4];
    mix_token(dbuf, qbuf, S, T, tok, 4, nD, (double)d->eps_rms, m);
    for (int i = 0; i < 4; i++) pre[i] = sigmoid64(m[i] * sc + (double)d->base[i]) + eps_hc;
    weighted_sum(d->R + tok * d->R_stride, D, pre, d->h + tok * d->h_stride);
  }
  return DSK_STATUS_OK;
}
