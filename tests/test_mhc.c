/* test_mhc.c - the mHC ops (spec/mhc.md §7) on the DSK_TEST_DEVICE context
 * (default cpu), against an independent fp64 implementation written here
 * from the spec (it shares no code with src/backend/cpu/ref_mhc.c).
 *
 *  1. helpers: S_max, the heuristic (incl. the spec's distinct-S counts on
 *     188 / 170 / 132 SMs), split widths, the plan call;
 *  2. Sinkhorn alone (through dsk_mhc_pre on hand-made partials): logits
 *     U[-1, 1] -> every row and column sum within 1e-5 of 1; logits
 *     N(0, sigma^2), sigma 1, 4, 8 -> entrywise within 1e-5 of fp64;
 *  3. prenorm + pre (+ fused RMSNorm), post (out of place and in place),
 *     head: pre/post/C within 1e-5 (TF32 1e-3) of fp64, y/h/R' within
 *     ulp_bf16(ref) + 2e-5 (TF32 2e-3) * the spec's magnitude term; the
 *     partials themselves (layout [S, T, 24] + [S, T], empty splits 0);
 *     stride gaps never written. Shapes: D 4096 / 7168 at T 1 and 3 with
 *     every S in 1..S_max; T 7 (D 4096), T 64 (D 4096), 65 (D 1024), 1000 (D 256) and 4097
 *     (D 512) with S in {1, 2, 7, heuristic, S_max}; extra cases R = 0, one
 *     stream x1e3, s2 = 4; TF32;
 *     The fused post + prenorm on the same inputs for a spread of S: R' and
 *     partials within the same bounds and bit-equal to dsk_mhc_post then
 *     dsk_mhc_prenorm with that S;
 *  4. batch invariance of a pinned S (T = 100 vs single tokens, bit-equal);
 *  5. bad descriptors: INVALID_ARG naming the field, outputs untouched;
 *     T = 0 no-ops.
 * Outputs are poisoned (0xFF bytes = NaN) before every run. Data moves only
 * through dsk_mem_*, so DSK_TEST_DEVICE=cuda:0 runs the same test on a GPU
 * (then the cpu-ref is also run on the same inputs as a cross-check).
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsk.h"
#include "harness.h"

static tu_counts counts;
static dsk_ctx *g_dev; /* device under test */
static dsk_ctx *g_cpu; /* cpu-ref, cross-check when g_dev is a GPU */
static int g_cuda, g_sm;

/* measured worst cases over the whole run, printed at the end */
static struct {
  double pre, post, C;         /* max abs error vs fp64 (FP32 precision) */
  double pre32, post32, C32;   /* TF32 */
  double y, yn, rp, h;         /* max error / bound ratios (<= 1 passes) */
  double sk_rowcol, sk_entry;  /* Sinkhorn: U[-1,1] max |sum - 1|, N(0, s^2) max entry error */
  double sk_row_wide;          /* informational: max |row sum - 1| at sigma 8 */
  double part;                 /* partials: max error / bound */
} g_max;

static void upd(double *m, double v) {
  if (v > *m || v != v) *m = v;
}

/* ------------------------------------------------------------ device memory */
#define MAXBUF 64
static void *g_bufs[MAXBUF];
static int g_nbuf;

static void *dalloc(size_t bytes) {
  void *p = NULL;
  if (g_nbuf >= MAXBUF || dsk_mem_alloc(g_dev, &p, bytes ? bytes : 16) != DSK_STATUS_OK) {
    fprintf(stderr, "test_mhc: device allocation of %zu bytes failed: %s\n", bytes, dsk_last_error());
    exit(2);
  }
  g_bufs[g_nbuf++] = p;
  return p;
}
static void dfree_all(void) {
  for (int i = 0; i < g_nbuf; i++) dsk_mem_free(g_dev, g_bufs[i]);
  g_nbuf = 0;
}
static void *dup_(const void *h, size_t bytes) {
  void *p = dalloc(bytes);
  TU_CHECK_OK(&counts, dsk_mem_upload(g_dev, p, h, bytes));
  return p;
}
static void poison(void *p, size_t bytes) { TU_CHECK_OK(&counts, dsk_mem_set(g_dev, p, 0xFF, bytes)); }
static void down(void *h, const void *p, size_t bytes) {
  TU_CHECK_OK(&counts, dsk_ctx_synchronize(g_dev, NULL));
  TU_CHECK_OK(&counts, dsk_mem_download(g_dev, h, p, bytes));
}
static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "test_mhc: out of host memory\n");
    exit(2);
  }
  return p;
}

/* ------------------------------------------------------ fp64 truth (spec) */
static double bfd(dsk_bf16 b) { return (double)dsk_bf16_to_f32(b); }

/* ulp_bf16(v) = 2^(floor(log2|v|) - 7), at least 2^-133 (spec §7) */
static double ulp_bf16(double v) {
  v = fabs(v);
  if (v < 0x1p-126) return 0x1p-133;
  return ldexp(1.0, ilogb(v) - 7);
}

static double sigm(double z) { return 1.0 / (1.0 + exp(-z)); }

/* spec §3: row softmax + eps, column step, then (iters - 1) x (row, column). */
static void o_sinkhorn(double *c, int iters, double eps) {
  for (int i = 0; i < 4; i++) {
    double *row = c + 4 * i;
    double mx = fmax(fmax(row[0], row[1]), fmax(row[2], row[3]));
    double z = exp(row[0] - mx) + exp(row[1] - mx) + exp(row[2] - mx) + exp(row[3] - mx);
    for (int j = 0; j < 4; j++) row[j] = exp(row[j] - mx) / z + eps;
  }
  for (int n = 0; n < iters; n++) {
    if (n) {
      for (int i = 0; i < 4; i++) {
        double z = c[4 * i] + c[4 * i + 1] + c[4 * i + 2] + c[4 * i + 3] + eps;
        for (int j = 0; j < 4; j++) c[4 * i + j] = c[4 * i + j] / z;
      }
    }
    for (int j = 0; j < 4; j++) {
      double z = c[j] + c[4 + j] + c[8 + j] + c[12 + j] + eps;
      for (int i = 0; i < 4; i++) c[4 * i + j] = c[4 * i + j] / z;
    }
  }
}

/* m = (fn . x) * rsqrt(mean(x^2) + eps), no splits */
static void o_mix(const dsk_bf16 *x, const float *fn, int nout, int64_t nD, double eps, double *m) {
  double ss = 0;
  for (int64_t k = 0; k < nD; k++) ss += bfd(x[k]) * bfd(x[k]);
  const double r = 1.0 / sqrt(ss / (double)nD + eps);
  for (int j = 0; j < nout; j++) {
    double a = 0;
    for (int64_t k = 0; k < nD; k++) a += (double)fn[(int64_t)j * nD + k] * bfd(x[k]);
    m[j] = a * r;
  }
}

typedef struct otok {
  double pre[4], post[4], C[16], hpre[4];
} otok;

#define EPS 1e-6
#define ITERS 20

/* ------------------------------------------------------------ case inputs */
enum { K_NORMAL = 0, K_ZERO = 1, K_LOUD = 2, K_WIDE = 3 };
static const char *kind_name[] = {"normal", "R=0", "stream0x1e3", "s2=4"};

typedef struct mcase {
  int64_t D, T;
  int prec, kind;
  const int *S;  /* fixed_splits values (0 = heuristic) */
  int nS;
  int norm, post, head, partials;
} mcase;

typedef struct host_in {
  int64_t D, nD, T, Rs, ys, os, ros, hs;
  dsk_bf16 *R, *out;
  float *fn, *hfn, scale[3], base[24], hscale[1], hbase[4], *norm_w;
  otok *o;
} host_in;

static void make_inputs(host_in *h, const mcase *c, uint64_t seed) {
  tu_rng rng = tu_rng_make(seed);
  h->D = c->D;
  h->nD = 4 * c->D;
  h->T = c->T;
  h->Rs = h->nD + 8;   /* padded strides (multiples of 8 elements, valid on CUDA) */
  h->ys = h->D + 16;
  h->os = h->D + 8;
  h->ros = h->nD + 16;
  h->hs = h->D + 8;
  const int64_t T = h->T, nD = h->nD, D = h->D;
  h->R = xmalloc((size_t)(T * h->Rs) * 2);
  h->out = xmalloc((size_t)(T * h->os) * 2);
  h->fn = xmalloc((size_t)(24 * nD) * 4);
  h->hfn = xmalloc((size_t)(4 * nD) * 4);
  h->norm_w = xmalloc((size_t)D * 4);
  h->o = xmalloc((size_t)T * sizeof(otok));
  for (int64_t i = 0; i < T * h->Rs; i++) h->R[i] = 0x7FC1; /* gaps: NaN, must never be read */
  for (int64_t i = 0; i < T * h->os; i++) h->out[i] = 0x7FC1;
  for (int64_t t = 0; t < T; t++) {
    for (int64_t k = 0; k < nD; k++) {
      double v = tu_normal(&rng);
      if (c->kind == K_ZERO) v = 0.0;
      if (c->kind == K_LOUD && k < D) v *= 1e3;
      h->R[t * h->Rs + k] = dsk_bf16_from_f32((float)v);
    }
    tu_fill_bf16_normal(&rng, h->out + t * h->os, (size_t)D, 1.0);
  }
  const double sd = 1.0 / sqrt((double)nD);
  for (int64_t i = 0; i < 24 * nD; i++) h->fn[i] = (float)(tu_normal(&rng) * sd);
  for (int64_t i = 0; i < 4 * nD; i++) h->hfn[i] = (float)(tu_normal(&rng) * sd);
  h->scale[0] = 1.0f;
  h->scale[1] = 1.0f;
  h->scale[2] = c->kind == K_WIDE ? 4.0f : 0.25f;
  for (int j = 0; j < 24; j++) h->base[j] = (float)(tu_uniform(&rng) - 0.5);
  h->hscale[0] = 1.0f;
  for (int j = 0; j < 4; j++) h->hbase[j] = (float)(tu_uniform(&rng) - 0.5);
  for (int64_t k = 0; k < D; k++) h->norm_w[k] = (float)(0.5 + tu_uniform(&rng));

  /* the fp64 truth per token */
  for (int64_t t = 0; t < T; t++) {
    const dsk_bf16 *x = h->R + t * h->Rs;
    double m[24], hm[4];
    otok *o = &h->o[t];
    o_mix(x, h->fn, 24, nD, EPS, m);
    for (int i = 0; i < 4; i++) {
      o->pre[i] = sigm(m[i] * h->scale[0] + h->base[i]) + EPS;
      o->post[i] = 2.0 * sigm(m[4 + i] * h->scale[1] + h->base[4 + i]);
    }
    for (int e = 0; e < 16; e++) o->C[e] = m[8 + e] * h->scale[2] + h->base[8 + e];
    o_sinkhorn(o->C, ITERS, EPS);
    o_mix(x, h->hfn, 4, nD, EPS, hm);
    for (int i = 0; i < 4; i++) o->hpre[i] = sigm(hm[i] * h->hscale[0] + h->hbase[i]) + EPS;
  }
}

static void free_inputs(host_in *h) {
  free(h->R);
  free(h->out);
  free(h->fn);
  free(h->hfn);
  free(h->norm_w);
  free(h->o);
}

/* ------------------------------------------------------------- comparisons */
/* y (or h) of every token vs sum_i w_i R_i; returns the worst err/bound. */
static double check_weighted(const char *what, const host_in *h, const dsk_bf16 *y, int64_t ys, int is_head,
                             double tol, int S) {
  double worst = 0;
  int64_t bad = 0;
  for (int64_t t = 0; t < h->T; t++) {
    const dsk_bf16 *x = h->R + t * h->Rs;
    const double *w = is_head ? h->o[t].hpre : h->o[t].pre;
    for (int64_t k = 0; k < h->D; k++) {
      double ref = 0, mag = 0;
      for (int i = 0; i < 4; i++) {
        ref += w[i] * bfd(x[i * h->D + k]);
        mag += fabs(bfd(x[i * h->D + k]));
      }
      const double got = bfd(y[t * ys + k]);
      const double bound = ulp_bf16(ref) + tol * mag;
      const double r = fabs(got - ref) / bound;
      if (!(r <= 1.0)) {
        if (bad++ < 3)
          fprintf(stderr, "  %s S=%d t=%" PRId64 " k=%" PRId64 ": got %.9g ref %.9g bound %.3g\n", what, S, t, k, got,
                  ref, bound);
      }
      upd(&worst, r);
    }
    for (int64_t k = h->D; k < ys; k++)
      if (y[t * ys + k] != 0xFFFF && bad++ < 3) fprintf(stderr, "  %s: stride gap written at t=%" PRId64 "\n", what, t);
  }
  TU_CHECK(&counts, bad == 0, "%s S=%d: %" PRId64 " elements outside ulp_bf16 + %.0e*sum|R| (worst ratio %.3g)", what,
           S, bad, tol, worst);
  return worst;
}

/* fused-norm y: [dsk] bound ulp(ref) + |w| rs (ulp(y) + tol sum|R|) + 1e-5 |ref| (docs/mhc.md) */
static double check_normed(const host_in *h, const dsk_bf16 *y, int64_t ys, double tol, int S) {
  double worst = 0;
  int64_t bad = 0;
  double *yb = xmalloc((size_t)h->D * sizeof(double));
  for (int64_t t = 0; t < h->T; t++) {
    const dsk_bf16 *x = h->R + t * h->Rs;
    double ss = 0;
    for (int64_t k = 0; k < h->D; k++) {
      double v = 0;
      for (int i = 0; i < 4; i++) v += h->o[t].pre[i] * bfd(x[i * h->D + k]);
      yb[k] = (double)dsk_bf16_to_f32(dsk_bf16_from_f32((float)v));
      ss += yb[k] * yb[k];
    }
    const double rs = 1.0 / sqrt(ss / (double)h->D + EPS);
    for (int64_t k = 0; k < h->D; k++) {
      double mag = 0;
      for (int i = 0; i < 4; i++) mag += fabs(bfd(x[i * h->D + k]));
      const double w = h->norm_w[k];
      const double ref = w * yb[k] * rs;
      const double bound = ulp_bf16(ref) + fabs(w) * rs * (ulp_bf16(yb[k]) + tol * mag) + 1e-5 * fabs(ref);
      const double got = bfd(y[t * ys + k]);
      const double r = fabs(got - ref) / bound;
      if (!(r <= 1.0) && bad++ < 3)
        fprintf(stderr, "  y(norm) S=%d t=%" PRId64 " k=%" PRId64 ": got %.9g ref %.9g bound %.3g\n", S, t, k, got, ref,
                bound);
      upd(&worst, r);
    }
  }
  free(yb);
  TU_CHECK(&counts, bad == 0, "y with fused norm S=%d: %" PRId64 " elements outside the bound (worst %.3g)", S, bad,
           worst);
  return worst;
}

static void check_small(const host_in *h, const float *post, const float *C, const float *prew, double tol, int S,
                        int tf32) {
  double ep = 0, eq = 0, ec = 0;
  for (int64_t t = 0; t < h->T; t++) {
    for (int i = 0; i < 4; i++) {
      upd(&ep, fabs(prew[t * 4 + i] - h->o[t].pre[i]));
      upd(&eq, fabs(post[t * 4 + i] - h->o[t].post[i]));
    }
    for (int e = 0; e < 16; e++) upd(&ec, fabs(C[t * 16 + e] - h->o[t].C[e]));
  }
  TU_CHECK(&counts, ep <= tol, "pre weights S=%d: max abs err %.3g > %.0e", S, ep, tol);
  TU_CHECK(&counts, eq <= tol, "post S=%d: max abs err %.3g > %.0e", S, eq, tol);
  TU_CHECK(&counts, ec <= tol, "C S=%d: max abs err %.3g > %.0e", S, ec, tol);
  upd(tf32 ? &g_max.pre32 : &g_max.pre, ep);
  upd(tf32 ? &g_max.post32 : &g_max.post, eq);
  upd(tf32 ? &g_max.C32 : &g_max.C, ec);
}

/* Partials of split s: fp64 sums over its columns; layout d [S, T, 24] then q [S, T]. */
/* The partials of the projection of rows X (stride xs; h->R for prenorm,
 * the downloaded R' for the fused post + prenorm) vs fp64. */
static void check_partials(const host_in *h, const dsk_bf16 *X, int64_t xs, const float *part, int S, double tol,
                           const char *what) {
  const int64_t nD = h->nD, T = h->T;
  const int64_t Kc = dsk_mhc_split_width(nD, S);
  int64_t bad = 0;
  double worst = 0;
  for (int64_t s = 0; s < S; s++) {
    int64_t kb = s * Kc < nD ? s * Kc : nD, ke = kb + Kc < nD ? kb + Kc : nD;
    for (int64_t t = 0; t < T; t++) {
      const dsk_bf16 *x = X + t * xs;
      double q = 0;
      for (int64_t k = kb; k < ke; k++) q += bfd(x[k]) * bfd(x[k]);
      const float gq = part[S * T * 24 + s * T + t];
      double r = kb == ke ? (gq == 0.0f ? 0 : INFINITY) : fabs(gq - q) / (tol * q + 1e-30);
      upd(&worst, r);
      if (!(r <= 1.0)) bad++;
      for (int j = 0; j < 24; j++) {
        double a = 0, mag = 0;
        for (int64_t k = kb; k < ke; k++) {
          double p = (double)h->fn[j * nD + k] * bfd(x[k]);
          a += p;
          mag += fabs(p);
        }
        const float g = part[(s * T + t) * 24 + j];
        r = kb == ke ? (g == 0.0f ? 0 : INFINITY) : fabs(g - a) / (tol * mag + 1e-30);
        upd(&worst, r);
        if (!(r <= 1.0)) bad++;
      }
    }
  }
  upd(&g_max.part, worst);
  TU_CHECK(&counts, bad == 0, "%s partials S=%d: %" PRId64 " values off (worst err/bound %.3g)", what, S, bad, worst);
}

static void check_post_out(const host_in *h, const dsk_bf16 *Rout, int64_t ros, double tol, const char *what) {
  int64_t bad = 0;
  double worst = 0;
  for (int64_t t = 0; t < h->T; t++) {
    const dsk_bf16 *x = h->R + t * h->Rs;
    const otok *o = &h->o[t];
    for (int64_t k = 0; k < h->D; k++) {
      const double ov = bfd(h->out[t * h->os + k]);
      double mag = fabs(ov);
      for (int i = 0; i < 4; i++) mag += fabs(bfd(x[i * h->D + k]));
      for (int j = 0; j < 4; j++) {
        double ref = o->post[j] * ov;
        for (int i = 0; i < 4; i++) ref += o->C[4 * i + j] * bfd(x[i * h->D + k]);
        const double got = bfd(Rout[t * ros + j * h->D + k]);
        const double bound = ulp_bf16(ref) + tol * mag;
        const double r = fabs(got - ref) / bound;
        if (!(r <= 1.0) && bad++ < 3)
          fprintf(stderr, "  %s t=%" PRId64 " j=%d k=%" PRId64 ": got %.9g ref %.9g bound %.3g\n", what, t, j, k, got,
                  ref, bound);
        upd(&worst, r);
      }
    }
    for (int64_t k = h->nD; k < ros; k++)
      if (Rout[t * ros + k] != 0xFFFF && Rout[t * ros + k] != h->R[t * h->Rs + k] && bad++ < 3)
        fprintf(stderr, "  %s: stride gap written at t=%" PRId64 "\n", what, t);
  }
  upd(&g_max.rp, worst);
  TU_CHECK(&counts, bad == 0, "%s: %" PRId64 " elements outside ulp_bf16 + %.0e*(|out|+sum|R|) (worst %.3g)", what, bad,
           tol, worst);
}

/* ------------------------------------------------------------- one case */
static void run_case(const mcase *c, uint64_t seed) {
  host_in h;
  make_inputs(&h, c, seed);
  const int64_t T = h.T, D = h.D, nD = h.nD;
  const int tf32 = c->prec == DSK_MHC_PRECISION_TF32;
  const double tol_small = tf32 ? 1e-3 : 1e-5, tol_big = tf32 ? 2e-3 : 2e-5;
  const int64_t smax = dsk_mhc_max_splits(nD);
  const double t_start = tu_now_us();

  dsk_bf16 *dR = dup_(h.R, (size_t)(T * h.Rs) * 2);
  float *dfn = dup_(h.fn, (size_t)(24 * nD) * 4);
  float *dhfn = dup_(h.hfn, (size_t)(4 * nD) * 4);
  float *dscale = dup_(h.scale, sizeof h.scale), *dbase = dup_(h.base, sizeof h.base);
  float *dhscale = dup_(h.hscale, sizeof h.hscale), *dhbase = dup_(h.hbase, sizeof h.hbase);
  float *dnw = dup_(h.norm_w, (size_t)D * 4);
  dsk_bf16 *dout = dup_(h.out, (size_t)(T * h.os) * 2);
  const size_t part_bytes = (size_t)(smax * T * 100), ws_bytes = (size_t)(smax * T * 20);
  float *dpart = dalloc(part_bytes);
  void *dws = dalloc(ws_bytes);
  dsk_bf16 *dy = dalloc((size_t)(T * h.ys) * 2), *dh = dalloc((size_t)(T * h.hs) * 2);
  float *dpost = dalloc((size_t)T * 16), *dC = dalloc((size_t)T * 64), *dprew = dalloc((size_t)T * 16);

  dsk_bf16 *y = xmalloc((size_t)(T * h.ys) * 2), *hh = xmalloc((size_t)(T * h.hs) * 2);
  float *post = xmalloc((size_t)T * 16), *C = xmalloc((size_t)T * 64), *prew = xmalloc((size_t)T * 16);
  float *part = c->partials ? xmalloc(part_bytes) : NULL;
  double wy = 0, wyn = 0, wh = 0;
  int S = 0;

  for (int si = 0; si < c->nS; si++) {
    dsk_mhc_prenorm_desc pd;
    dsk_mhc_prenorm_desc_init(&pd);
    pd.T = T;
    pd.D = D;
    pd.nD = nD;
    pd.R = dR;
    pd.R_stride = h.Rs;
    pd.fn = dfn;
    pd.fixed_splits = c->S[si];
    pd.precision = (dsk_mhc_precision)c->prec;
    pd.partials = dpart;
    pd.partials_bytes = (int64_t)part_bytes;
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    TU_CHECK_OK(&counts, dsk_mhc_prenorm_plan(g_dev, &pd, &pi));
    S = pi.tactic.v[0];
    const int64_t want_S = c->S[si] ? c->S[si] : dsk_mhc_splits_heuristic(nD, T, g_sm);
    TU_CHECK(&counts, S == want_S && pi.workspace_bytes == (int64_t)S * T * 100 && pi.tactic.op == DSK_OP_MHC_PRENORM &&
                          pi.tactic_source == (c->S[si] ? DSK_TACTIC_FORCED : DSK_TACTIC_HEURISTIC),
             "plan: S %d (want %" PRId64 "), bytes %" PRId64 ", source %d", S, want_S, pi.workspace_bytes,
             pi.tactic_source);
    poison(dpart, part_bytes);
    TU_CHECK_OK(&counts, dsk_mhc_prenorm(g_dev, &pd));
    if (part && (S <= 8 || S % 16 == 0 || S >= smax - 1 || c->S[si] == 0)) { /* a spread of S: it costs a projection */
      down(part, dpart, (size_t)S * T * 100);
      check_partials(&h, h.R, h.Rs, part, S, tf32 ? 1e-3 : 1e-5, "prenorm");
    }

    dsk_mhc_pre_desc qd;
    dsk_mhc_pre_desc_init(&qd);
    qd.T = T;
    qd.D = D;
    qd.nD = nD;
    qd.fixed_splits = c->S[si];
    qd.partials = dpart;
    qd.partials_bytes = (int64_t)part_bytes;
    qd.R = dR;
    qd.R_stride = h.Rs;
    qd.scale = dscale;
    qd.base = dbase;
    qd.y = dy;
    qd.y_stride = h.ys;
    qd.post = dpost;
    qd.C = dC;
    qd.pre_w = dprew;
    poison(dy, (size_t)(T * h.ys) * 2);
    poison(dpost, (size_t)T * 16);
    poison(dC, (size_t)T * 64);
    poison(dprew, (size_t)T * 16);
    TU_CHECK_OK(&counts, dsk_mhc_pre(g_dev, &qd));
    down(y, dy, (size_t)(T * h.ys) * 2);
    down(post, dpost, (size_t)T * 16);
    down(C, dC, (size_t)T * 64);
    down(prew, dprew, (size_t)T * 16);
    check_small(&h, post, C, prew, tol_small, S, tf32);
    upd(&wy, check_weighted("y", &h, y, h.ys, 0, tol_big, S));

    if (c->norm) {
      qd.norm_w = dnw;
      qd.norm_eps = (float)EPS;
      qd.pre_w = NULL;
      poison(dy, (size_t)(T * h.ys) * 2);
      TU_CHECK_OK(&counts, dsk_mhc_pre(g_dev, &qd));
      down(y, dy, (size_t)(T * h.ys) * 2);
      upd(&wyn, check_normed(&h, y, h.ys, tol_big, S));
    }

    if (c->head) {
      dsk_mhc_head_desc hd;
      dsk_mhc_head_desc_init(&hd);
      hd.T = T;
      hd.D = D;
      hd.nD = nD;
      hd.R = dR;
      hd.R_stride = h.Rs;
      hd.fn = dhfn;
      hd.scale = dhscale;
      hd.base = dhbase;
      hd.fixed_splits = c->S[si];
      hd.precision = (dsk_mhc_precision)c->prec;
      hd.h = dh;
      hd.h_stride = h.hs;
      hd.workspace = dws;
      hd.workspace_bytes = (int64_t)ws_bytes;
      memset(&pi, 0, sizeof pi);
      pi.struct_size = sizeof pi;
      TU_CHECK_OK(&counts, dsk_mhc_head_plan(g_dev, &hd, &pi));
      TU_CHECK(&counts, pi.tactic.v[0] == S && pi.workspace_bytes == (int64_t)S * T * 20,
               "head plan: S %d (prenorm %d), bytes %" PRId64, pi.tactic.v[0], S, pi.workspace_bytes);
      poison(dh, (size_t)(T * h.hs) * 2);
      poison(dws, ws_bytes);
      TU_CHECK_OK(&counts, dsk_mhc_head(g_dev, &hd));
      down(hh, dh, (size_t)(T * h.hs) * 2);
      upd(&wh, check_weighted("h", &h, hh, h.hs, 1, tol_big, S));
    }
  }
  upd(&g_max.y, wy);
  upd(&g_max.yn, wyn);
  upd(&g_max.h, wh);

  if (c->post) {
    /* post with the device's own post and C (the last S); truth from fp64 */
    dsk_bf16 *dRo = dalloc((size_t)(T * h.ros) * 2);
    dsk_bf16 *Ro = xmalloc((size_t)(T * h.ros) * 2);
    dsk_mhc_post_desc od;
    dsk_mhc_post_desc_init(&od);
    od.T = T;
    od.D = D;
    od.out = dout;
    od.out_stride = h.os;
    od.R = dR;
    od.R_stride = h.Rs;
    od.post = dpost;
    od.C = dC;
    od.R_out = dRo;
    od.R_out_stride = h.ros;
    poison(dRo, (size_t)(T * h.ros) * 2);
    TU_CHECK_OK(&counts, dsk_mhc_post(g_dev, &od));
    down(Ro, dRo, (size_t)(T * h.ros) * 2);
    check_post_out(&h, Ro, h.ros, tol_big, "R' (out of place)");
    /* in place on a fresh copy of R */
    dsk_bf16 *dRc = dup_(h.R, (size_t)(T * h.Rs) * 2);
    od.R = dRc;
    od.R_out = dRc;
    od.R_out_stride = h.Rs;
    TU_CHECK_OK(&counts, dsk_mhc_post(g_dev, &od));
    dsk_bf16 *Rc = xmalloc((size_t)(T * h.Rs) * 2);
    down(Rc, dRc, (size_t)(T * h.Rs) * 2);
    check_post_out(&h, Rc, h.Rs, tol_big, "R' (in place, R_out == R)");
    free(Rc);

    /* fused post + prenorm (same post and C, the next sublayer's fn = this
     * fn) for a spread of S: R' as above and bit-equal to the post's, the
     * partials vs fp64 on the rounded R' and bit-equal to dsk_mhc_prenorm of
     * that R' with the same S */
    dsk_bf16 *dRf = dalloc((size_t)(T * h.ros) * 2);
    dsk_bf16 *Rf = xmalloc((size_t)(T * h.ros) * 2);
    float *fpart = xmalloc(part_bytes), *ppart = xmalloc(part_bytes);
    int nfused = 0;
    for (int si = 0; si < c->nS; si++) {
      const int fs = c->S[si];
      if (!(fs == 0 || fs <= 2 || fs == 7 || fs >= smax - 1)) continue;
      nfused++;
      dsk_mhc_post_prenorm_desc fd;
      dsk_mhc_post_prenorm_desc_init(&fd);
      fd.T = T;
      fd.D = D;
      fd.nD = nD;
      fd.out = dout;
      fd.out_stride = h.os;
      fd.R = dR;
      fd.R_stride = h.Rs;
      fd.post = dpost;
      fd.C = dC;
      fd.R_out = dRf;
      fd.R_out_stride = h.ros;
      fd.fn = dfn;
      fd.fixed_splits = fs;
      fd.precision = (dsk_mhc_precision)c->prec;
      fd.partials = dpart;
      fd.partials_bytes = (int64_t)part_bytes;
      dsk_plan_info pi;
      memset(&pi, 0, sizeof pi);
      pi.struct_size = sizeof pi;
      TU_CHECK_OK(&counts, dsk_mhc_post_prenorm_plan(g_dev, &fd, &pi));
      const int fS = pi.tactic.v[0];
      const int64_t want_S = fs ? fs : dsk_mhc_splits_heuristic(nD, T, g_sm);
      TU_CHECK(&counts, fS == want_S && pi.workspace_bytes == (int64_t)fS * T * 100 &&
                            pi.tactic.op == DSK_OP_MHC_POST_PRENORM,
               "post_prenorm plan: S %d (want %" PRId64 "), bytes %" PRId64, fS, want_S, pi.workspace_bytes);
      poison(dRf, (size_t)(T * h.ros) * 2);
      poison(dpart, part_bytes);
      TU_CHECK_OK(&counts, dsk_mhc_post_prenorm(g_dev, &fd));
      down(Rf, dRf, (size_t)(T * h.ros) * 2);
      down(fpart, dpart, (size_t)fS * T * 100);
      check_post_out(&h, Rf, h.ros, tol_big, "R' (fused post + prenorm)");
      int64_t rdiff = 0;
      for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < nD; k++) rdiff += Rf[t * h.ros + k] != Ro[t * h.ros + k];
      TU_CHECK(&counts, rdiff == 0, "fused R' S=%d: %" PRId64 " values differ from dsk_mhc_post's", fS, rdiff);
      check_partials(&h, Rf, h.ros, fpart, fS, tf32 ? 1e-3 : 1e-5, "fused");
      /* dsk_mhc_prenorm of the fused R' */
      dsk_mhc_prenorm_desc pd;
      dsk_mhc_prenorm_desc_init(&pd);
      pd.T = T;
      pd.D = D;
      pd.nD = nD;
      pd.R = dRf;
      pd.R_stride = h.ros;
      pd.fn = dfn;
      pd.fixed_splits = fS;
      pd.precision = (dsk_mhc_precision)c->prec;
      pd.partials = dpart;
      pd.partials_bytes = (int64_t)part_bytes;
      poison(dpart, part_bytes);
      TU_CHECK_OK(&counts, dsk_mhc_prenorm(g_dev, &pd));
      down(ppart, dpart, (size_t)fS * T * 100);
      TU_CHECK(&counts, memcmp(fpart, ppart, (size_t)fS * T * 100) == 0,
               "fused partials S=%d differ from dsk_mhc_prenorm of the same R'", fS);
    }
    TU_CHECK(&counts, nfused > 0, "no fused post + prenorm run");
    free(Rf);
    free(fpart);
    free(ppart);
    free(Ro);
  }

  /* cross-check against the cpu-ref when the device is a GPU (last S) */
  if (g_cuda && g_cpu) {
    float *hpart = xmalloc((size_t)S * T * 100);
    dsk_bf16 *yc = xmalloc((size_t)(T * h.ys) * 2);
    float *pc = xmalloc((size_t)T * 16), *cc = xmalloc((size_t)T * 64);
    dsk_mhc_prenorm_desc pd;
    dsk_mhc_prenorm_desc_init(&pd);
    pd.T = T; pd.D = D; pd.nD = nD; pd.R = h.R; pd.R_stride = h.Rs; pd.fn = h.fn; pd.fixed_splits = S;
    pd.precision = (dsk_mhc_precision)c->prec; pd.partials = hpart; pd.partials_bytes = (int64_t)S * T * 100;
    TU_CHECK_OK(&counts, dsk_mhc_prenorm(g_cpu, &pd));
    dsk_mhc_pre_desc qd;
    dsk_mhc_pre_desc_init(&qd);
    qd.T = T; qd.D = D; qd.nD = nD; qd.fixed_splits = S; qd.partials = hpart; qd.partials_bytes = pd.partials_bytes;
    qd.R = h.R; qd.R_stride = h.Rs; qd.scale = h.scale; qd.base = h.base; qd.y = yc; qd.y_stride = h.ys;
    qd.post = pc; qd.C = cc;
    for (int64_t i = 0; i < T * h.ys; i++) yc[i] = 0xFFFF;
    TU_CHECK_OK(&counts, dsk_mhc_pre(g_cpu, &qd));
    double dmax = 0;
    for (int64_t i = 0; i < T * 16; i++) upd(&dmax, fabs(cc[i] - C[i]));
    TU_CHECK(&counts, dmax <= 2 * tol_small, "device vs cpu-ref C: max diff %.3g", dmax);
    free(hpart); free(yc); free(pc); free(cc);
  }

  printf("  %-11s D %5" PRId64 " T %5" PRId64 " %s S %d value(s) [%d..]: y %.3f%s%s, %.1f ms\n", kind_name[c->kind], D,
         T, tf32 ? "TF32" : "FP32", c->nS, c->S[0], wy, c->norm ? " y(norm) ok" : "", c->head ? " h ok" : "",
         (tu_now_us() - t_start) / 1e3);
  free(y); free(hh); free(post); free(C); free(prew); free(part);
  dfree_all();
  free_inputs(&h);
}

/* ------------------------------------------------------------ Sinkhorn */
/* C through dsk_mhc_pre on hand-made partials: S = 1, D = 8 (nD 32),
 * q = nD (r = 1/sqrt(1 + eps)), scale (1, 1, 1), base 0, so the comb
 * logits are d * r. dist 0: U[-1, 1]; else N(0, sigma^2). */
static void sinkhorn_case(int dist, double sigma, int64_t T, uint64_t seed) {
  tu_rng rng = tu_rng_make(seed);
  const int64_t D = 8, nD = 32;
  float *part = xmalloc((size_t)T * 100);
  for (int64_t t = 0; t < T; t++) {
    for (int j = 0; j < 24; j++)
      part[t * 24 + j] =
          j < 8 ? 0.0f : (float)(dist == 0 ? 2.0 * tu_uniform(&rng) - 1.0 : tu_normal(&rng) * sigma);
    part[T * 24 + t] = (float)nD;
  }
  dsk_bf16 *R = xmalloc((size_t)(T * nD) * 2);
  tu_fill_bf16_normal(&rng, R, (size_t)(T * nD), 1.0);
  float scale[3] = {1, 1, 1}, base[24] = {0};
  float *dpart = dup_(part, (size_t)T * 100);
  dsk_bf16 *dR = dup_(R, (size_t)(T * nD) * 2);
  float *dscale = dup_(scale, sizeof scale), *dbase = dup_(base, sizeof base);
  dsk_bf16 *dy = dalloc((size_t)(T * D) * 2);
  float *dpost = dalloc((size_t)T * 16), *dC = dalloc((size_t)T * 64);
  poison(dC, (size_t)T * 64);
  dsk_mhc_pre_desc qd;
  dsk_mhc_pre_desc_init(&qd);
  qd.T = T;
  qd.D = D;
  qd.nD = nD;
  qd.fixed_splits = 1;
  qd.partials = dpart;
  qd.partials_bytes = T * 100;
  qd.R = dR;
  qd.R_stride = nD;
  qd.scale = dscale;
  qd.base = dbase;
  qd.y = dy;
  qd.y_stride = D;
  qd.post = dpost;
  qd.C = dC;
  TU_CHECK_OK(&counts, dsk_mhc_pre(g_dev, &qd));
  float *C = xmalloc((size_t)T * 64);
  down(C, dC, (size_t)T * 64);
  const double r = 1.0 / sqrt((double)nD / (double)nD + EPS);
  double worst_sum = 0, worst_entry = 0, worst_row = 0;
  for (int64_t t = 0; t < T; t++) {
    const float *c = C + t * 16;
    for (int i = 0; i < 4; i++) {
      double rs = 0, cs = 0;
      for (int j = 0; j < 4; j++) {
        rs += c[4 * i + j];
        cs += c[4 * j + i];
      }
      upd(&worst_row, fabs(rs - 1.0));
      upd(&worst_sum, fmax(fabs(rs - 1.0), fabs(cs - 1.0)));
    }
    if (dist != 0) {
      double o[16];
      for (int e = 0; e < 16; e++) o[e] = (double)part[t * 24 + 8 + e] * r;
      o_sinkhorn(o, ITERS, EPS);
      for (int e = 0; e < 16; e++) upd(&worst_entry, fabs(c[e] - o[e]));
    }
  }
  if (dist == 0) {
    TU_CHECK(&counts, worst_sum <= 1e-5, "Sinkhorn U[-1,1]: max |row or column sum - 1| %.3g > 1e-5", worst_sum);
    upd(&g_max.sk_rowcol, worst_sum);
    printf("  Sinkhorn U[-1,1] T %" PRId64 ": max |row/col sum - 1| %.3g\n", T, worst_sum);
  } else {
    TU_CHECK(&counts, worst_entry <= 1e-5, "Sinkhorn N(0,%g^2): max entry error vs fp64 %.3g > 1e-5", sigma,
             worst_entry);
    upd(&g_max.sk_entry, worst_entry);
    if (sigma >= 8) upd(&g_max.sk_row_wide, worst_row);
    printf("  Sinkhorn N(0,%g^2) T %" PRId64 ": max entry err %.3g (row sums off by up to %.3g, not claimed)\n", sigma,
           T, worst_entry, worst_row);
  }
  free(part);
  free(R);
  free(C);
  dfree_all();
}

/* -------------------------------------------------------- batch invariance */
/* With a pinned S, token t's outputs do not depend on the batch. */
static void batch_invariance(void) {
  const int64_t D = 256, nD = 1024, T = 100, S = 3;
  tu_rng rng = tu_rng_make(0x77B1u);
  dsk_bf16 *R = xmalloc((size_t)(T * nD) * 2);
  tu_fill_bf16_normal(&rng, R, (size_t)(T * nD), 1.0);
  float *fn = xmalloc((size_t)(24 * nD) * 4), *hfn = xmalloc((size_t)(4 * nD) * 4), *nw = xmalloc((size_t)D * 4);
  for (int64_t i = 0; i < 24 * nD; i++) fn[i] = (float)(tu_normal(&rng) / 32.0);
  for (int64_t i = 0; i < 4 * nD; i++) hfn[i] = (float)(tu_normal(&rng) / 32.0);
  for (int64_t i = 0; i < D; i++) nw[i] = (float)(0.5 + tu_uniform(&rng));
  float scale[3] = {1, 1, 0.25f}, base[24], hscale[1] = {1}, hbase[4] = {0.1f, -0.2f, 0.3f, 0};
  for (int j = 0; j < 24; j++) base[j] = (float)(tu_uniform(&rng) - 0.5);
  float *dfn = dup_(fn, (size_t)(24 * nD) * 4), *dhfn = dup_(hfn, (size_t)(4 * nD) * 4);
  float *dnw = dup_(nw, (size_t)D * 4), *dscale = dup_(scale, sizeof scale), *dbase = dup_(base, sizeof base);
  float *dhscale = dup_(hscale, sizeof hscale), *dhbase = dup_(hbase, sizeof hbase);
  float *dpart = dalloc((size_t)(S * T * 100));
  void *dws = dalloc((size_t)(S * T * 20));
  dsk_bf16 *dRall = dup_(R, (size_t)(T * nD) * 2);
  dsk_bf16 *dy = dalloc((size_t)(T * D) * 2), *dh = dalloc((size_t)(T * D) * 2);
  float *dpost = dalloc((size_t)T * 16), *dC = dalloc((size_t)T * 64);
  dsk_bf16 *yb = xmalloc((size_t)(T * D) * 2), *hb = xmalloc((size_t)(T * D) * 2);
  float *pb = xmalloc((size_t)T * 16), *cb = xmalloc((size_t)T * 64);
  dsk_bf16 y1[256], h1[256];
  float p1[4], c1[16];
  for (int pass = 0; pass < 4; pass++) {
    const int64_t tok = pass == 0 ? -1 : pass == 1 ? 0 : pass == 2 ? 37 : 99;
    const int64_t n = tok < 0 ? T : 1;
    const dsk_bf16 *dR = tok < 0 ? dRall : dRall + tok * nD;
    dsk_mhc_prenorm_desc pd;
    dsk_mhc_prenorm_desc_init(&pd);
    pd.T = n; pd.D = D; pd.nD = nD; pd.R = dR; pd.R_stride = nD; pd.fn = dfn; pd.fixed_splits = (int32_t)S;
    pd.partials = dpart; pd.partials_bytes = S * T * 100;
    TU_CHECK_OK(&counts, dsk_mhc_prenorm(g_dev, &pd));
    dsk_mhc_pre_desc qd;
    dsk_mhc_pre_desc_init(&qd);
    qd.T = n; qd.D = D; qd.nD = nD; qd.fixed_splits = (int32_t)S; qd.partials = dpart;
    qd.partials_bytes = S * T * 100; qd.R = dR; qd.R_stride = nD; qd.scale = dscale; qd.base = dbase;
    qd.norm_w = dnw; qd.norm_eps = 1e-6f; qd.y = dy; qd.y_stride = D; qd.post = dpost; qd.C = dC;
    TU_CHECK_OK(&counts, dsk_mhc_pre(g_dev, &qd));
    dsk_mhc_head_desc hd;
    dsk_mhc_head_desc_init(&hd);
    hd.T = n; hd.D = D; hd.nD = nD; hd.R = dR; hd.R_stride = nD; hd.fn = dhfn; hd.scale = dhscale;
    hd.base = dhbase; hd.fixed_splits = (int32_t)S; hd.h = dh; hd.h_stride = D; hd.workspace = dws;
    hd.workspace_bytes = S * T * 20;
    TU_CHECK_OK(&counts, dsk_mhc_head(g_dev, &hd));
    if (tok < 0) {
      down(yb, dy, (size_t)(T * D) * 2);
      down(hb, dh, (size_t)(T * D) * 2);
      down(pb, dpost, (size_t)T * 16);
      down(cb, dC, (size_t)T * 64);
    } else {
      down(y1, dy, sizeof y1);
      down(h1, dh, sizeof h1);
      down(p1, dpost, sizeof p1);
      down(c1, dC, sizeof c1);
      TU_CHECK(&counts,
               memcmp(y1, yb + tok * D, sizeof y1) == 0 && memcmp(h1, hb + tok * D, sizeof h1) == 0 &&
                   memcmp(p1, pb + tok * 4, sizeof p1) == 0 && memcmp(c1, cb + tok * 16, sizeof c1) == 0,
               "batch invariance: token %" PRId64 " alone differs from the T=%" PRId64 " batch (S %" PRId64 ")", tok, T,
               S);
    }
  }
  printf("  batch invariance (S 3, T 100 vs tokens 0, 37, 99 alone): checked\n");
  free(R); free(fn); free(hfn); free(nw); free(yb); free(hb); free(pb); free(cb);
  dfree_all();
}

/* -------------------------------------------------------------- helpers */
static void helpers(void) {
  TU_CHECK(&counts, dsk_mhc_max_splits(16384) == 64 && dsk_mhc_max_splits(28672) == 112 &&
                        dsk_mhc_max_splits(32) == 1 && dsk_mhc_max_splits(1024) == 4 && dsk_mhc_max_splits(0) == 0,
           "dsk_mhc_max_splits: %" PRId64 " %" PRId64 " %" PRId64, dsk_mhc_max_splits(16384),
           dsk_mhc_max_splits(28672), dsk_mhc_max_splits(32));
  TU_CHECK(&counts, dsk_mhc_split_width(16384, 64) == 256 && dsk_mhc_split_width(16384, 63) == 320 &&
                        dsk_mhc_split_width(16384, 1) == 16384 && dsk_mhc_split_width(28672, 112) == 256 &&
                        dsk_mhc_split_width(28672, 5) == 5760 && dsk_mhc_split_width(32, 1) == 64,
           "dsk_mhc_split_width");
  /* vLLM's rule at a few points */
  TU_CHECK(&counts, dsk_mhc_splits_heuristic(16384, 1, 132) == 64 && dsk_mhc_splits_heuristic(16384, 64, 132) == 64 &&
                        dsk_mhc_splits_heuristic(16384, 65, 132) == 64 &&
                        dsk_mhc_splits_heuristic(16384, 129, 132) == 44 &&
                        dsk_mhc_splits_heuristic(28672, 1, 188) == 112 &&
                        dsk_mhc_splits_heuristic(16384, 16384, 132) == 1 &&
                        dsk_mhc_splits_heuristic(16384, 0, 132) == 64 && dsk_mhc_splits_heuristic(16384, 1, 0) == 1,
           "dsk_mhc_splits_heuristic");
  /* spec §5: distinct S values for T <= 16384 */
  static const int sms[3] = {188, 170, 132};
  static const int want[2][3] = {{25, 24, 21}, {26, 25, 22}};
  static const int64_t nds[2] = {16384, 28672};
  for (int m = 0; m < 2; m++)
    for (int g = 0; g < 3; g++) {
      char seen[256] = {0};
      int distinct = 0;
      for (int64_t T = 1; T <= 16384; T++) {
        int64_t s = dsk_mhc_splits_heuristic(nds[m], T, sms[g]);
        if (s >= 1 && s < 256 && !seen[s]) {
          seen[s] = 1;
          distinct++;
        }
      }
      TU_CHECK(&counts, distinct == want[m][g], "heuristic: %d distinct S for nD %" PRId64 " on %d SMs, spec says %d",
               distinct, nds[m], sms[g], want[m][g]);
    }
}

/* ---------------------------------------------------------- bad inputs */
static int err_has(const char *s) { return strstr(dsk_last_error(), s) != NULL; }
#define EXPECT_BAD(call, field)                                                                              \
  do {                                                                                                       \
    dsk_clear_error();                                                                                       \
    dsk_status st_ = (call);                                                                                 \
    TU_CHECK(&counts, st_ == DSK_STATUS_INVALID_ARG && err_has(field), "%s -> %s '%s' (want INVALID_ARG naming %s)", \
             #call, dsk_status_name(st_), dsk_last_error(), field);                                          \
  } while (0)

static void bad_inputs(void) {
  const int64_t D = 1024, nD = 4096, T = 2; /* S_max 16 */
  dsk_bf16 *dR = dalloc((size_t)(T * nD) * 2 + 64);
  float *dfn = dalloc((size_t)(24 * nD) * 4), *dhfn = dalloc((size_t)(4 * nD) * 4);
  float *dpart = dalloc((size_t)(16 * T * 100)), *dws = dalloc((size_t)(16 * T * 20));
  float *dscale = dalloc(64), *dbase = dalloc(128), *dnw = dalloc((size_t)D * 4);
  dsk_bf16 *dy = dalloc((size_t)(T * D) * 2), *dout = dalloc((size_t)(T * D) * 2);
  dsk_bf16 *dRo = dalloc((size_t)(T * nD) * 2), *dh = dalloc((size_t)(T * D) * 2);
  float *dpost = dalloc((size_t)T * 16), *dC = dalloc((size_t)T * 64);
  TU_CHECK_OK(&counts, dsk_mem_set(g_dev, dR, 0, (size_t)(T * nD) * 2 + 64));
  TU_CHECK_OK(&counts, dsk_mem_set(g_dev, dfn, 0, (size_t)(24 * nD) * 4));
  TU_CHECK_OK(&counts, dsk_mem_set(g_dev, dhfn, 0, (size_t)(4 * nD) * 4));
  TU_CHECK_OK(&counts, dsk_mem_set(g_dev, dscale, 0, 64));
  TU_CHECK_OK(&counts, dsk_mem_set(g_dev, dbase, 0, 128));
  TU_CHECK_OK(&counts, dsk_mem_set(g_dev, dout, 0, (size_t)(T * D) * 2));
  TU_CHECK_OK(&counts, dsk_mem_set(g_dev, dpost, 0, (size_t)T * 16));
  TU_CHECK_OK(&counts, dsk_mem_set(g_dev, dC, 0, (size_t)T * 64));
  poison(dy, (size_t)(T * D) * 2);
  poison(dRo, (size_t)(T * nD) * 2);
  poison(dh, (size_t)(T * D) * 2);
  poison(dpart, (size_t)(16 * T * 100));

  dsk_mhc_prenorm_desc P0, p;
  dsk_mhc_prenorm_desc_init(&P0);
  P0.T = T; P0.D = D; P0.nD = nD; P0.R = dR; P0.R_stride = nD; P0.fn = dfn; P0.fixed_splits = 4;
  P0.partials = dpart; P0.partials_bytes = 4 * T * 100;
  dsk_mhc_pre_desc Q0, q;
  dsk_mhc_pre_desc_init(&Q0);
  Q0.T = T; Q0.D = D; Q0.nD = nD; Q0.fixed_splits = 4; Q0.partials = dpart; Q0.partials_bytes = 4 * T * 100;
  Q0.R = dR; Q0.R_stride = nD; Q0.scale = dscale; Q0.base = dbase; Q0.y = dy; Q0.y_stride = D; Q0.post = dpost;
  Q0.C = dC;
  dsk_mhc_post_desc O0, o;
  dsk_mhc_post_desc_init(&O0);
  O0.T = T; O0.D = D; O0.out = dout; O0.out_stride = D; O0.R = dR; O0.R_stride = nD; O0.post = dpost; O0.C = dC;
  O0.R_out = dRo; O0.R_out_stride = nD;
  dsk_mhc_head_desc H0, hd;
  dsk_mhc_head_desc_init(&H0);
  H0.T = T; H0.D = D; H0.nD = nD; H0.R = dR; H0.R_stride = nD; H0.fn = dhfn; H0.scale = dscale; H0.base = dbase;
  H0.fixed_splits = 4; H0.h = dh; H0.h_stride = D; H0.workspace = dws; H0.workspace_bytes = 4 * T * 20;
  dsk_mhc_post_prenorm_desc F0, f;
  dsk_mhc_post_prenorm_desc_init(&F0);
  F0.T = T; F0.D = D; F0.nD = nD; F0.out = dout; F0.out_stride = D; F0.R = dR; F0.R_stride = nD; F0.post = dpost;
  F0.C = dC; F0.R_out = dRo; F0.R_out_stride = nD; F0.fn = dfn; F0.fixed_splits = 4; F0.partials = dpart;
  F0.partials_bytes = 4 * T * 100;
  dsk_plan_info pi;

  /* prenorm */
  EXPECT_BAD(dsk_mhc_prenorm(NULL, &P0), "ctx");
  EXPECT_BAD(dsk_mhc_prenorm(g_dev, NULL), "desc");
  p = P0; p.struct_size = 8; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "struct_size");
  p = P0; p.precision = (dsk_mhc_precision)7; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "precision");
  p = P0; p.fixed_splits = -1; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "fixed_splits");
  p = P0; p.fixed_splits = 17; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "fixed_splits 17");
  p = P0; p.T = -1; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "T -1");
  p = P0; p.T = INT64_C(1) << 31; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "T 2147483648");
  p = P0; p.D = 0; p.nD = 0; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "D 0");
  p = P0; p.D = 1020; p.nD = 4080; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "D 1020");
  p = P0; p.D = 16392; p.nD = 4 * 16392; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "D 16392");
  p = P0; p.nD = 1024; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "nD 1024");
  p = P0; p.R = NULL; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "R is NULL");
  p = P0; p.R = (const dsk_bf16 *)((const char *)dR + 1); EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "2-byte");
  p = P0; p.R_stride = nD - 8; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "R_stride");
  p = P0; p.R_stride = INT64_MAX / 2; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "overflow");
  p = P0; p.fn = NULL; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "fn");
  p = P0; p.partials = NULL; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "partials");
  p = P0; p.partials_bytes = 4 * T * 100 - 4; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "partials_bytes");
  p = P0; p.fixed_splits = 5; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "partials_bytes 800 < 1000");
  if (g_cuda) {
    p = P0; p.R = (const dsk_bf16 *)((const char *)dR + 8); EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "16-byte");
    p = P0; p.R_stride = nD + 4; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "R_stride");
    p = P0; p.fn = dfn + 1; EXPECT_BAD(dsk_mhc_prenorm(g_dev, &p), "fn");
  }
  memset(&pi, 0, sizeof pi);
  EXPECT_BAD(dsk_mhc_prenorm_plan(g_dev, &P0, &pi), "struct_size");
  EXPECT_BAD(dsk_mhc_prenorm_plan(g_dev, &P0, NULL), "info");
  pi.struct_size = sizeof pi;
  p = P0; p.partials = NULL; p.partials_bytes = 0;
  TU_CHECK_OK(&counts, dsk_mhc_prenorm_plan(g_dev, &p, &pi)); /* the plan needs no partials */
  TU_CHECK(&counts, pi.workspace_bytes == 4 * T * 100 && pi.tactic.v[0] == 4, "plan: %" PRId64 " bytes, S %d",
           pi.workspace_bytes, pi.tactic.v[0]);

  /* pre */
  EXPECT_BAD(dsk_mhc_pre(NULL, &Q0), "ctx");
  EXPECT_BAD(dsk_mhc_pre(g_dev, NULL), "desc");
  q = Q0; q.struct_size = sizeof q - 1; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "struct_size");
  q = Q0; q.fixed_splits = 17; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "fixed_splits");
  q = Q0; q.fixed_splits = 8; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "partials_bytes");
  q = Q0; q.partials = NULL; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "partials");
  q = Q0; q.nD = 4 * D + 8; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "nD");
  q = Q0; q.eps_rms = 0; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "eps_rms");
  q = Q0; q.eps_rms = NAN; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "eps_rms");
  q = Q0; q.eps_hc = -1e-6f; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "eps_hc");
  q = Q0; q.sinkhorn_iters = 0; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "sinkhorn_iters 0");
  q = Q0; q.sinkhorn_iters = 1001; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "sinkhorn_iters");
  q = Q0; q.post_mult = INFINITY; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "post_mult");
  q = Q0; q.norm_w = dnw; q.norm_eps = 0; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "norm_eps");
  q = Q0; q.scale = NULL; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "scale");
  q = Q0; q.base = NULL; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "base");
  q = Q0; q.y = NULL; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "y is NULL");
  q = Q0; q.y_stride = D - 8; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "y_stride");
  q = Q0; q.post = NULL; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "post");
  q = Q0; q.C = NULL; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "C is NULL");
  q = Q0; q.y = dR + 64; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "overlaps R");
  q = Q0; q.R = NULL; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "R is NULL");
  if (g_cuda) {
    q = Q0; q.y = dy + 4; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "16-byte");
    q = Q0; q.norm_w = dnw + 2; EXPECT_BAD(dsk_mhc_pre(g_dev, &q), "norm_w");
  }

  /* post */
  EXPECT_BAD(dsk_mhc_post(NULL, &O0), "ctx");
  o = O0; o.struct_size = 0; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "struct_size");
  o = O0; o.D = 12; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "D 12");
  o = O0; o.out = NULL; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "out is NULL");
  o = O0; o.out_stride = D - 1; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "out_stride");
  o = O0; o.post = NULL; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "post");
  o = O0; o.C = NULL; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "C is NULL");
  o = O0; o.R_out = NULL; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "R_out");
  o = O0; o.R_out = dR; o.R_out_stride = nD + 8; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "R_out_stride");
  o = O0; o.R_out = dR + 8; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "overlaps R");
  o = O0; o.out = dRo + 16; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "overlaps out");
  o = O0; o.T = -3; EXPECT_BAD(dsk_mhc_post(g_dev, &o), "T -3");

  /* fused post + prenorm */
  EXPECT_BAD(dsk_mhc_post_prenorm(NULL, &F0), "ctx");
  EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, NULL), "desc");
  f = F0; f.struct_size = sizeof f - 8; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "struct_size");
  f = F0; f.precision = (dsk_mhc_precision)2; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "precision");
  f = F0; f.fixed_splits = -2; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "fixed_splits");
  f = F0; f.fixed_splits = 17; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "fixed_splits 17");
  f = F0; f.T = -1; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "T -1");
  f = F0; f.D = 1004; f.nD = 4016; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "D 1004");
  f = F0; f.nD = 4 * D + 64; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "nD");
  f = F0; f.out = NULL; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "out is NULL");
  f = F0; f.out_stride = D - 8; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "out_stride");
  f = F0; f.R = NULL; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "R is NULL");
  f = F0; f.R_stride = nD - 8; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "R_stride");
  f = F0; f.post = NULL; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "post");
  f = F0; f.C = NULL; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "C is NULL");
  f = F0; f.R_out = NULL; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "R_out");
  f = F0; f.R_out_stride = nD - 8; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "R_out_stride");
  f = F0; f.fn = NULL; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "fn");
  f = F0; f.R_out = dR; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "no in-place form");
  f = F0; f.R_out = dR + 8; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlaps R");
  f = F0; f.out = dRo + 16; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlaps out");
  f = F0; f.partials = NULL; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "partials");
  f = F0; f.partials_bytes = 4 * T * 100 - 4; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "partials_bytes");
  f = F0; f.partials = (float *)(void *)(dRo + 64); EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlap R_out");
  f = F0; f.partials = (float *)(void *)dR; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlap R");
  f = F0; f.partials = (float *)(void *)dout; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlap out");
  f = F0; f.partials = dfn + 64; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlap fn");
  f = F0; f.partials = dpost; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlap post");
  f = F0; f.partials = dC; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlap C");
  f = F0; f.R_out = (dsk_bf16 *)(void *)dfn; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlaps fn");
  f = F0; f.R_out = (dsk_bf16 *)(void *)dpost; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlaps post");
  f = F0; f.R_out = (dsk_bf16 *)(void *)dC; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "overlaps C");
  if (g_cuda) {
    f = F0; f.R_out = dRo + 4; f.R_out_stride = nD; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "16-byte");
    f = F0; f.out_stride = D + 4; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "out_stride");
    f = F0; f.fn = dfn + 2; EXPECT_BAD(dsk_mhc_post_prenorm(g_dev, &f), "fn");
  }
  memset(&pi, 0, sizeof pi);
  EXPECT_BAD(dsk_mhc_post_prenorm_plan(g_dev, &F0, &pi), "struct_size");
  EXPECT_BAD(dsk_mhc_post_prenorm_plan(g_dev, &F0, NULL), "info");
  pi.struct_size = sizeof pi;
  f = F0; f.partials = NULL; f.partials_bytes = 0;
  TU_CHECK_OK(&counts, dsk_mhc_post_prenorm_plan(g_dev, &f, &pi));
  TU_CHECK(&counts, pi.workspace_bytes == 4 * T * 100 && pi.tactic.v[0] == 4 && pi.tactic.op == DSK_OP_MHC_POST_PRENORM,
           "post_prenorm plan: %" PRId64 " bytes, S %d", pi.workspace_bytes, pi.tactic.v[0]);
  {
    int sup = -1;
    char why[256] = "";
    f = F0; f.R_out = dR;
    TU_CHECK_OK(&counts, dsk_op_supported(g_dev, DSK_OP_MHC_POST_PRENORM, &f, &sup, why, sizeof why));
    TU_CHECK(&counts, sup == 0 && strstr(why, "in-place"), "dsk_op_supported: in-place fused op: %d (%s)", sup, why);
    TU_CHECK_OK(&counts, dsk_op_supported(g_dev, DSK_OP_MHC_POST_PRENORM, &F0, &sup, why, sizeof why));
    TU_CHECK(&counts, sup == 1, "dsk_op_supported: fused post + prenorm not supported (%s)", why);
  }

  /* head */
  EXPECT_BAD(dsk_mhc_head(NULL, &H0), "ctx");
  hd = H0; hd.precision = (dsk_mhc_precision)-1; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "precision");
  hd = H0; hd.fn = NULL; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "fn");
  hd = H0; hd.scale = NULL; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "scale");
  hd = H0; hd.base = NULL; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "base");
  hd = H0; hd.h = NULL; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "h is NULL");
  hd = H0; hd.h = dR; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "overlaps R");
  hd = H0; hd.workspace_bytes = 100; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "workspace_bytes");
  hd = H0; hd.workspace = NULL; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "workspace");
  hd = H0; hd.fixed_splits = 99; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "fixed_splits 99");
  hd = H0; hd.eps_rms = -1; EXPECT_BAD(dsk_mhc_head(g_dev, &hd), "eps_rms");
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  hd = H0; hd.workspace = NULL; hd.workspace_bytes = 0;
  TU_CHECK_OK(&counts, dsk_mhc_head_plan(g_dev, &hd, &pi));
  TU_CHECK(&counts, pi.workspace_bytes == 4 * T * 20, "head plan: %" PRId64 " bytes", pi.workspace_bytes);

  /* nothing was written by the rejected calls */
  dsk_bf16 *chk = xmalloc((size_t)(T * nD) * 2);
  int clean = 1;
  down(chk, dy, (size_t)(T * D) * 2);
  for (int64_t i = 0; i < T * D; i++) clean &= chk[i] == 0xFFFF;
  down(chk, dh, (size_t)(T * D) * 2);
  for (int64_t i = 0; i < T * D; i++) clean &= chk[i] == 0xFFFF;
  down(chk, dRo, (size_t)(T * nD) * 2);
  for (int64_t i = 0; i < T * nD; i++) clean &= chk[i] == 0xFFFF;
  float *pchk = xmalloc((size_t)(16 * T * 100));
  down(pchk, dpart, (size_t)(16 * T * 100));
  for (int64_t i = 0; i < 16 * T * 25; i++) clean &= isnan(pchk[i]);
  TU_CHECK(&counts, clean, "a rejected call wrote an output");
  free(pchk);
  free(chk);

  /* T = 0: no-ops with otherwise empty descriptors; the good ones run */
  dsk_mhc_prenorm_desc_init(&p);
  dsk_mhc_pre_desc_init(&q);
  dsk_mhc_post_desc_init(&o);
  dsk_mhc_head_desc_init(&hd);
  dsk_mhc_post_prenorm_desc_init(&f);
  TU_CHECK_OK(&counts, dsk_mhc_post_prenorm(g_dev, &f));
  TU_CHECK_OK(&counts, dsk_mhc_prenorm(g_dev, &p));
  TU_CHECK_OK(&counts, dsk_mhc_pre(g_dev, &q));
  TU_CHECK_OK(&counts, dsk_mhc_post(g_dev, &o));
  TU_CHECK_OK(&counts, dsk_mhc_head(g_dev, &hd));
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&counts, dsk_mhc_prenorm_plan(g_dev, &p, &pi));
  TU_CHECK(&counts, pi.workspace_bytes == 0, "plan T=0: %" PRId64 " bytes", pi.workspace_bytes);
  TU_CHECK_OK(&counts, dsk_mhc_prenorm(g_dev, &P0));
  TU_CHECK_OK(&counts, dsk_mhc_pre(g_dev, &Q0));
  TU_CHECK_OK(&counts, dsk_mhc_post(g_dev, &O0));
  TU_CHECK_OK(&counts, dsk_mhc_head(g_dev, &H0));
  TU_CHECK_OK(&counts, dsk_mhc_post_prenorm(g_dev, &F0));
  o = O0; o.R_out = dR; /* in place is fine */
  TU_CHECK_OK(&counts, dsk_mhc_post(g_dev, &o));
  TU_CHECK_OK(&counts, dsk_ctx_synchronize(g_dev, NULL));
  dfree_all();
  printf("  bad inputs: checked\n");
}

/* ------------------------------------------------------------------ main */
int main(void) {
  g_dev = tu_ctx(NULL);
  if (!g_dev) return 1;
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  TU_CHECK_OK(&counts, dsk_ctx_get_info(g_dev, &info));
  g_cuda = info.is_cuda;
  g_sm = info.sm_count;
  if (g_cuda) g_cpu = tu_ctx("cpu");
  printf("test_mhc: device %s (backend %s, %d SMs/threads)\n", info.device_name, info.backend, g_sm);
  const double t0 = tu_now_us();

  helpers();
  bad_inputs();

  /* seeds drawn from a generator: tu_rng_make of consecutive seeds gives
   * shifted copies of one stream */
  tu_rng seeds = tu_rng_make(0x6D6863u);
  sinkhorn_case(0, 0, 4000, tu_next(&seeds));
  sinkhorn_case(1, 1.0, 4000, tu_next(&seeds));
  sinkhorn_case(1, 4.0, 4000, tu_next(&seeds));
  sinkhorn_case(1, 8.0, 4000, tu_next(&seeds));

  static int all64[65], all112[113];
  for (int i = 0; i < 64; i++) all64[i] = i + 1;
  all64[64] = 0;
  for (int i = 0; i < 112; i++) all112[i] = i + 1;
  all112[112] = 0;
  static const int sp64[] = {1, 2, 7, 0, 64}, sp16[] = {1, 2, 7, 0, 16}, sp8[] = {1, 2, 7, 0, 8},
                   sp4[] = {1, 2, 3, 0, 4}, sp3[] = {1, 0, 64};
  const int F = DSK_MHC_PRECISION_FP32, TF = DSK_MHC_PRECISION_TF32;
  const mcase cases[] = {
      /* D, T, prec, kind, S list, nS, norm, post, head, partials */
      {4096, 1, F, K_NORMAL, all64, 65, 1, 1, 1, 1},
      {4096, 3, F, K_NORMAL, all64, 65, 1, 1, 1, 1},
      {7168, 1, F, K_NORMAL, all112, 113, 1, 1, 1, 1},
      {7168, 3, F, K_NORMAL, all112, 113, 0, 1, 1, 0},
      {4096, 7, F, K_NORMAL, sp3, 3, 0, 1, 0, 1},
      {4096, 64, F, K_NORMAL, sp64, 5, 1, 1, 1, 0},
      {1024, 65, F, K_NORMAL, sp16, 5, 1, 1, 1, 0},
      {256, 1000, F, K_NORMAL, sp4, 5, 1, 1, 1, 0},
      {512, 4097, F, K_NORMAL, sp8, 5, 1, 1, 1, 0},
      {4096, 3, F, K_ZERO, sp3, 3, 1, 1, 1, 1},
      {4096, 3, F, K_LOUD, sp3, 3, 1, 1, 1, 0},
      {4096, 3, F, K_WIDE, sp3, 3, 1, 1, 1, 0},
      {7168, 3, TF, K_NORMAL, sp3, 3, 1, 1, 1, 1},
      {4096, 64, TF, K_NORMAL, sp64, 5, 0, 1, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], tu_next(&seeds));

  batch_invariance();

  printf("test_mhc: worst errors: FP32 pre %.3g post %.3g C %.3g (bound 1e-5); TF32 pre %.3g post %.3g C %.3g (1e-3)\n",
         g_max.pre, g_max.post, g_max.C, g_max.pre32, g_max.post32, g_max.C32);
  printf("test_mhc: worst err/bound: y %.3f, y(norm) %.3f, R' %.3f, h %.3f, partials %.3f\n", g_max.y, g_max.yn,
         g_max.rp, g_max.h, g_max.part);
  printf("test_mhc: Sinkhorn: U[-1,1] max |sum-1| %.3g (1e-5); N(0,s^2) max entry err %.3g (1e-5); sigma 8 row sums "
         "off by %.3g\n",
         g_max.sk_rowcol, g_max.sk_entry, g_max.sk_row_wide);
  printf("test_mhc: %.1f s\n", (tu_now_us() - t0) / 1e6);
  if (g_cpu) dsk_ctx_destroy(g_cpu);
  dsk_ctx_destroy(g_dev);
  return tu_finish("test_mhc", &counts);
}
