/* check_mhc.c - backend-vs-reference check of the mHC ops (spec/mhc.md §7).
 *
 * For each case (D, T, split count, precision) random inputs as in the spec
 * (R ~ N(0, 1) bf16, fn ~ N(0, 1/nD), scale (1, 1, 0.25), base U(-0.5,
 * 0.5), norm weight U(0.5, 1.5), sublayer output N(0, 1)) run on ctx's
 * backend (uploaded with dsk_mem_*, outputs poisoned with 0xFF first) and on
 * the cpu-ref (fp64 accumulation) with the S the device resolved, then:
 *   pre weights, post, C       abs <= 1e-5 (TF32 1e-3)
 *   y, h                       abs <= ulp_bf16(ref) + 2e-5 (2e-3) * sum_i |R_i|
 *   y with fused RMSNorm       abs <= ulp_bf16(ref) + |w| rs (ulp_bf16(y) + 2e-5 sum_i |R_i|) + 1e-5 |ref|
 *   R' (post, out of place)    abs <= ulp_bf16(ref) + 2e-5 (2e-3) * (|out| + sum_i |R_i|)
 * and the next sublayer through the fused post + prenorm: the device's
 * dsk_mhc_post_prenorm (its own post and C, the same fn) then dsk_mhc_pre
 * on its R' and partials, against the cpu-ref's prenorm + pre on that
 * same R' (the per-op bounds apply to the same inputs): R' as above, the
 * second pre's post / C abs <= 1e-5 and its y as y.
 * One line per case: the worst abs errors of the small outputs and the worst
 * error/bound ratio of each bf16 output (<= 1 passes).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsk.h"
#include "harness.h"

typedef struct mhc_bufs {
  dsk_ctx *ctx;
  void *p[24];
  int n;
} mhc_bufs;

static void *mb_alloc(mhc_bufs *b, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st != DSK_STATUS_OK) return NULL;
  *st = dsk_mem_alloc(b->ctx, &p, bytes ? bytes : 16);
  if (*st == DSK_STATUS_OK) b->p[b->n++] = p;
  return p;
}
static void *mb_up(mhc_bufs *b, const void *h, size_t bytes, dsk_status *st) {
  void *p = mb_alloc(b, bytes, st);
  if (*st == DSK_STATUS_OK) *st = dsk_mem_upload(b->ctx, p, h, bytes);
  return p;
}
static void mb_free(mhc_bufs *b) {
  for (int i = 0; i < b->n; i++) dsk_mem_free(b->ctx, b->p[i]);
  b->n = 0;
}

static double mc_bf(dsk_bf16 x) { return (double)dsk_bf16_to_f32(x); }
static double mc_ulp(double v) {
  v = fabs(v);
  return v < 0x1p-126 ? 0x1p-133 : ldexp(1.0, ilogb(v) - 7);
}
static void mc_max(double *m, double v) {
  if (v > *m || v != v) *m = v;
}

typedef struct mhc_io { /* host copies of one run's outputs */
  dsk_bf16 *y, *yn, *Ro, *h;
  float *post, *C, *prew;
  dsk_bf16 *Rf, *y2; /* the fused post + prenorm's R' and the next pre's y */
  float *post2, *C2;
} mhc_io;


typedef struct mhc_in {
  int64_t D, nD, T, S;
  int prec;
  const dsk_bf16 *R, *out;
  const float *fn, *hfn, *scale, *base, *hscale, *hbase, *nw;
} mhc_in;

/* The next sublayer's pre on R2 and its partials (written by the fused op
 * on the device, by prenorm on the reference). */
static dsk_status mhc_pre2(dsk_ctx *ctx, const mhc_in *in, const float *part, const dsk_bf16 *R2, const float *scale,
                           const float *base, dsk_bf16 *y, float *post, float *C) {
  dsk_mhc_pre_desc qd;
  dsk_mhc_pre_desc_init(&qd);
  qd.T = in->T; qd.D = in->D; qd.nD = in->nD; qd.fixed_splits = (int32_t)in->S; qd.partials = part;
  qd.partials_bytes = in->S * in->T * 100; qd.R = R2; qd.R_stride = in->nD; qd.scale = scale; qd.base = base;
  qd.y = y; qd.y_stride = in->D; qd.post = post; qd.C = C;
  return dsk_mhc_pre(ctx, &qd);
}

/* The whole chain on one context; pointers are that context's memory. */
static dsk_status mhc_chain(dsk_ctx *ctx, const mhc_in *in, const dsk_bf16 *R, const dsk_bf16 *out, const float *fn,
                            const float *hfn, const float *scale, const float *base, const float *hscale,
                            const float *hbase, const float *nw, float *part, void *ws, dsk_bf16 *y, dsk_bf16 *yn,
                            float *post, float *C, float *prew, dsk_bf16 *Ro, dsk_bf16 *h) {
  const int64_t T = in->T, D = in->D, nD = in->nD, S = in->S;
  dsk_mhc_prenorm_desc pd;
  dsk_mhc_prenorm_desc_init(&pd);
  pd.T = T; pd.D = D; pd.nD = nD; pd.R = R; pd.R_stride = nD; pd.fn = fn; pd.fixed_splits = (int32_t)S;
  pd.precision = (dsk_mhc_precision)in->prec; pd.partials = part; pd.partials_bytes = S * T * 100;
  dsk_status st = dsk_mhc_prenorm(ctx, &pd);
  if (st != DSK_STATUS_OK) return st;
  dsk_mhc_pre_desc qd;
  dsk_mhc_pre_desc_init(&qd);
  qd.T = T; qd.D = D; qd.nD = nD; qd.fixed_splits = (int32_t)S; qd.partials = part;
  qd.partials_bytes = S * T * 100; qd.R = R; qd.R_stride = nD; qd.scale = scale; qd.base = base;
  qd.y = y; qd.y_stride = D; qd.post = post; qd.C = C; qd.pre_w = prew;
  if ((st = dsk_mhc_pre(ctx, &qd)) != DSK_STATUS_OK) return st;
  qd.norm_w = nw;
  qd.y = yn;
  qd.pre_w = NULL;
  if ((st = dsk_mhc_pre(ctx, &qd)) != DSK_STATUS_OK) return st;
  dsk_mhc_post_desc od;
  dsk_mhc_post_desc_init(&od);
  od.T = T; od.D = D; od.out = out; od.out_stride = D; od.R = R; od.R_stride = nD; od.post = post; od.C = C;
  od.R_out = Ro; od.R_out_stride = nD;
  if ((st = dsk_mhc_post(ctx, &od)) != DSK_STATUS_OK) return st;
  dsk_mhc_head_desc hd;
  dsk_mhc_head_desc_init(&hd);
  hd.T = T; hd.D = D; hd.nD = nD; hd.R = R; hd.R_stride = nD; hd.fn = hfn; hd.scale = hscale; hd.base = hbase;
  hd.fixed_splits = (int32_t)S; hd.precision = (dsk_mhc_precision)in->prec; hd.h = h; hd.h_stride = D;
  hd.workspace = ws; hd.workspace_bytes = S * T * 20;
  if ((st = dsk_mhc_head(ctx, &hd)) != DSK_STATUS_OK) return st;
  return dsk_ctx_synchronize(ctx, NULL);
}

static void *mc_malloc(size_t n, int *ok) {
  void *p = malloc(n ? n : 1);
  if (!p) *ok = 0;
  return p;
}

static int mhc_case(dsk_ctx *ctx, dsk_ctx *ref, int64_t D, int64_t T, int32_t fixed, int prec, uint64_t seed,
                    FILE *log, tu_counts *c) {
  const int64_t nD = 4 * D;
  const int tf32 = prec == DSK_MHC_PRECISION_TF32;
  const double tol_s = tf32 ? 1e-3 : 1e-5, tol_b = tf32 ? 2e-3 : 2e-5;
  char name[96];
  int ok = 1;
  int64_t S = dsk_mhc_max_splits(nD); /* buffers sized for S_max; the device's S is planned below */
  snprintf(name, sizeof name, "D=%" PRId64 " T=%" PRId64 " S=%s %s", D, T, fixed ? "pinned" : "heur",
           tf32 ? "TF32" : "FP32");
  dsk_status st;

  /* inputs */
  tu_rng rng = tu_rng_make(seed);
  dsk_bf16 *R = mc_malloc((size_t)(T * nD) * 2, &ok), *out = mc_malloc((size_t)(T * D) * 2, &ok);
  float *fn = mc_malloc((size_t)(24 * nD) * 4, &ok), *hfn = mc_malloc((size_t)(4 * nD) * 4, &ok);
  float *nw = mc_malloc((size_t)D * 4, &ok);
  float scale[3] = {1.0f, 1.0f, 0.25f}, base[24], hscale[1] = {1.0f}, hbase[4];
  mhc_io dv, rf;
  const size_t ybytes = (size_t)(T * D) * 2, Rbytes = (size_t)(T * nD) * 2;
  dsk_bf16 **ybufs[2][6] = {{&dv.y, &dv.yn, &dv.h, &dv.Ro, &dv.Rf, &dv.y2}, {&rf.y, &rf.yn, &rf.h, &rf.Ro, &rf.Rf, &rf.y2}};
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 6; i++) *ybufs[s][i] = mc_malloc(i == 3 || i == 4 ? Rbytes : ybytes, &ok);
  dv.post = mc_malloc((size_t)T * 16, &ok); dv.C = mc_malloc((size_t)T * 64, &ok); dv.prew = mc_malloc((size_t)T * 16, &ok);
  rf.post = mc_malloc((size_t)T * 16, &ok); rf.C = mc_malloc((size_t)T * 64, &ok); rf.prew = mc_malloc((size_t)T * 16, &ok);
  dv.post2 = mc_malloc((size_t)T * 16, &ok); dv.C2 = mc_malloc((size_t)T * 64, &ok);
  rf.post2 = mc_malloc((size_t)T * 16, &ok); rf.C2 = mc_malloc((size_t)T * 64, &ok);
  float *hpart = mc_malloc((size_t)(S * T * 100), &ok);
  void *hws = mc_malloc((size_t)(S * T * 20), &ok);
  mhc_in in = {D, nD, T, S, prec, R, out, fn, hfn, scale, base, hscale, hbase, nw};
  int rc = 0;
  if (!ok) {
    fprintf(log, "mhc %-34s FAIL (host memory)\n", name);
    c->failed++;
    rc = 1;
    goto done;
  }
  tu_fill_bf16_normal(&rng, R, (size_t)(T * nD), 1.0);
  tu_fill_bf16_normal(&rng, out, (size_t)(T * D), 1.0);
  for (int64_t i = 0; i < 24 * nD; i++) fn[i] = (float)(tu_normal(&rng) / sqrt((double)nD));
  for (int64_t i = 0; i < 4 * nD; i++) hfn[i] = (float)(tu_normal(&rng) / sqrt((double)nD));
  for (int64_t i = 0; i < D; i++) nw[i] = (float)(0.5 + tu_uniform(&rng));
  for (int j = 0; j < 24; j++) base[j] = (float)(tu_uniform(&rng) - 0.5);
  for (int j = 0; j < 4; j++) hbase[j] = (float)(tu_uniform(&rng) - 0.5);

  /* device run */
  {
    mhc_bufs b = {ctx, {0}, 0};
    st = DSK_STATUS_OK;
    dsk_bf16 *dR = mb_up(&b, R, Rbytes, &st), *dout = mb_up(&b, out, ybytes, &st);
    float *dfn = mb_up(&b, fn, (size_t)(24 * nD) * 4, &st), *dhfn = mb_up(&b, hfn, (size_t)(4 * nD) * 4, &st);
    float *dsc = mb_up(&b, scale, sizeof scale, &st), *dba = mb_up(&b, base, sizeof base, &st);
    float *dhs = mb_up(&b, hscale, sizeof hscale, &st), *dhb = mb_up(&b, hbase, sizeof hbase, &st);
    float *dnw = mb_up(&b, nw, (size_t)D * 4, &st);
    if (st == DSK_STATUS_OK) { /* the S the device uses; the reference is pinned to it */
      dsk_mhc_prenorm_desc pd;
      dsk_mhc_prenorm_desc_init(&pd);
      pd.T = T; pd.D = D; pd.nD = nD; pd.R = dR; pd.R_stride = nD; pd.fn = dfn; pd.fixed_splits = fixed;
      pd.precision = (dsk_mhc_precision)prec;
      dsk_plan_info pi;
      memset(&pi, 0, sizeof pi);
      pi.struct_size = sizeof pi;
      st = dsk_mhc_prenorm_plan(ctx, &pd, &pi);
      if (st == DSK_STATUS_OK) {
        in.S = S = pi.tactic.v[0];
        snprintf(name, sizeof name, "D=%" PRId64 " T=%" PRId64 " S=%" PRId64 "%s %s", D, T, S, fixed ? "" : "(heur)",
                 tf32 ? "TF32" : "FP32");
      }
    }
    float *dpart = mb_alloc(&b, (size_t)(S * T * 100), &st);
    void *dws = mb_alloc(&b, (size_t)(S * T * 20), &st);
    dsk_bf16 *dy = mb_alloc(&b, ybytes, &st), *dyn = mb_alloc(&b, ybytes, &st), *dh = mb_alloc(&b, ybytes, &st);
    dsk_bf16 *dRo = mb_alloc(&b, Rbytes, &st);
    float *dpost = mb_alloc(&b, (size_t)T * 16, &st), *dC = mb_alloc(&b, (size_t)T * 64, &st);
    float *dprew = mb_alloc(&b, (size_t)T * 16, &st);
    void *pz[] = {dpart, dws, dy, dyn, dh, dRo, dpost, dC, dprew};
    size_t pzb[] = {(size_t)(S * T * 100), (size_t)(S * T * 20), ybytes, ybytes, ybytes, Rbytes, (size_t)T * 16,
                    (size_t)T * 64, (size_t)T * 16};
    for (int i = 0; i < 9 && st == DSK_STATUS_OK; i++) st = dsk_mem_set(ctx, pz[i], 0xFF, pzb[i]);
    if (st == DSK_STATUS_OK)
      st = mhc_chain(ctx, &in, dR, dout, dfn, dhfn, dsc, dba, dhs, dhb, dnw, dpart, dws, dy, dyn, dpost, dC, dprew,
                     dRo, dh);
    /* the fused post + prenorm into dRf and the partials, then the next pre */
    dsk_bf16 *dRf = mb_alloc(&b, Rbytes, &st), *dy2 = mb_alloc(&b, ybytes, &st);
    float *dpost2 = mb_alloc(&b, (size_t)T * 16, &st), *dC2 = mb_alloc(&b, (size_t)T * 64, &st);
    void *pz2[] = {dpart, dRf, dy2, dpost2, dC2};
    size_t pzb2[] = {(size_t)(S * T * 100), Rbytes, ybytes, (size_t)T * 16, (size_t)T * 64};
    for (int i = 0; i < 5 && st == DSK_STATUS_OK; i++) st = dsk_mem_set(ctx, pz2[i], 0xFF, pzb2[i]);
    if (st == DSK_STATUS_OK) {
      dsk_mhc_post_prenorm_desc fd;
      dsk_mhc_post_prenorm_desc_init(&fd);
      fd.T = T; fd.D = D; fd.nD = nD; fd.out = dout; fd.out_stride = D; fd.R = dR; fd.R_stride = nD;
      fd.post = dpost; fd.C = dC; fd.R_out = dRf; fd.R_out_stride = nD; fd.fn = dfn; fd.fixed_splits = (int32_t)S;
      fd.precision = (dsk_mhc_precision)prec; fd.partials = dpart; fd.partials_bytes = S * T * 100;
      st = dsk_mhc_post_prenorm(ctx, &fd);
    }
    if (st == DSK_STATUS_OK) st = mhc_pre2(ctx, &in, dpart, dRf, dsc, dba, dy2, dpost2, dC2);
    if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
    void *pd_[] = {dy, dyn, dh, dRo, dpost, dC, dprew, dRf, dy2, dpost2, dC2};
    void *ph_[] = {dv.y, dv.yn, dv.h, dv.Ro, dv.post, dv.C, dv.prew, dv.Rf, dv.y2, dv.post2, dv.C2};
    size_t pb_[] = {ybytes, ybytes, ybytes, Rbytes, (size_t)T * 16, (size_t)T * 64, (size_t)T * 16,
                    Rbytes, ybytes, (size_t)T * 16, (size_t)T * 64};
    for (int i = 0; i < 11 && st == DSK_STATUS_OK; i++) st = dsk_mem_download(ctx, ph_[i], pd_[i], pb_[i]);
    mb_free(&b);
    if (st != DSK_STATUS_OK) {
      fprintf(log, "mhc %-34s FAIL (device run: %s: %s)\n", name, dsk_status_name(st), dsk_last_error());
      c->failed++;
      rc = 1;
      goto done;
    }
  }
  /* reference run (host memory) */
  st = mhc_chain(ref, &in, R, out, fn, hfn, scale, base, hscale, hbase, nw, hpart, hws, rf.y, rf.yn, rf.post, rf.C,
                 rf.prew, rf.Ro, rf.h);
  if (st == DSK_STATUS_OK) { /* the next sublayer on the device's R' */
    dsk_mhc_prenorm_desc pd;
    dsk_mhc_prenorm_desc_init(&pd);
    pd.T = T; pd.D = D; pd.nD = nD; pd.R = dv.Rf; pd.R_stride = nD; pd.fn = fn; pd.fixed_splits = (int32_t)S;
    pd.precision = (dsk_mhc_precision)prec; pd.partials = hpart; pd.partials_bytes = S * T * 100;
    st = dsk_mhc_prenorm(ref, &pd);
    if (st == DSK_STATUS_OK) st = mhc_pre2(ref, &in, hpart, dv.Rf, scale, base, rf.y2, rf.post2, rf.C2);
  }
  if (st != DSK_STATUS_OK) {
    fprintf(log, "mhc %-34s FAIL (cpu-ref run: %s: %s)\n", name, dsk_status_name(st), dsk_last_error());
    c->failed++;
    rc = 1;
    goto done;
  }

  {
    double es = 0, ry = 0, ryn = 0, rr = 0, rh = 0, rf2 = 0, ry2 = 0;
    for (int64_t i = 0; i < T * 4; i++) {
      mc_max(&es, fabs(dv.post[i] - rf.post[i]));
      mc_max(&es, fabs(dv.prew[i] - rf.prew[i]));
      mc_max(&es, fabs(dv.post2[i] - rf.post2[i]));
    }
    for (int64_t i = 0; i < T * 16; i++) {
      mc_max(&es, fabs(dv.C[i] - rf.C[i]));
      mc_max(&es, fabs(dv.C2[i] - rf.C2[i]));
    }
    for (int64_t t = 0; t < T; t++) {
      const dsk_bf16 *x = R + t * nD;
      double ss = 0;
      for (int64_t k = 0; k < D; k++) ss += mc_bf(rf.y[t * D + k]) * mc_bf(rf.y[t * D + k]);
      const double rs = 1.0 / sqrt(ss / (double)D + 1e-6);
      for (int64_t k = 0; k < D; k++) {
        double mag = 0;
        for (int i = 0; i < 4; i++) mag += fabs(mc_bf(x[i * D + k]));
        const int64_t e = t * D + k;
        double ref_v = mc_bf(rf.y[e]);
        mc_max(&ry, fabs(mc_bf(dv.y[e]) - ref_v) / (mc_ulp(ref_v) + tol_b * mag));
        ref_v = mc_bf(rf.h[e]);
        mc_max(&rh, fabs(mc_bf(dv.h[e]) - ref_v) / (mc_ulp(ref_v) + tol_b * mag));
        ref_v = mc_bf(rf.yn[e]);
        const double w = fabs((double)nw[k]);
        /* Both sides are bf16-rounded here (the reference backend's output),
         * so the rounding term is half an ulp of each: ulp(ref) when they
         * share a binade, 1.5 ulp(ref) when the output rounded into the next
         * one (seen on the GPU at T = 4097). dsk's own bound, docs/mhc.md. */
        const double got_v = mc_bf(dv.yn[e]);
        mc_max(&ryn, fabs(got_v - ref_v) / (0.5 * (mc_ulp(ref_v) + mc_ulp(got_v)) +
                                            w * rs * (mc_ulp(mc_bf(rf.y[e])) + tol_b * mag) + 1e-5 * fabs(ref_v)));
        const double om = mag + fabs(mc_bf(out[e]));
        double mag2 = 0;
        for (int j = 0; j < 4; j++) {
          ref_v = mc_bf(rf.Ro[t * nD + j * D + k]);
          mc_max(&rr, fabs(mc_bf(dv.Ro[t * nD + j * D + k]) - ref_v) / (mc_ulp(ref_v) + tol_b * om));
          mc_max(&rf2, fabs(mc_bf(dv.Rf[t * nD + j * D + k]) - ref_v) / (mc_ulp(ref_v) + tol_b * om));
          mag2 += fabs(mc_bf(dv.Rf[t * nD + j * D + k]));
        }
        ref_v = mc_bf(rf.y2[e]);
        mc_max(&ry2, fabs(mc_bf(dv.y2[e]) - ref_v) / (mc_ulp(ref_v) + tol_b * mag2));
      }
    }
    const int pass = es <= tol_s && ry <= 1.0 && ryn <= 1.0 && rr <= 1.0 && rh <= 1.0 && rf2 <= 1.0 && ry2 <= 1.0;
    TU_CHECK(c, pass,
             "mhc %s: small %.3g (<= %.0e), y %.3f, y(norm) %.3f, R' %.3f, h %.3f, fused R' %.3f, next y %.3f (ratios <= 1)",
             name, es, tol_s, ry, ryn, rr, rh, rf2, ry2);
    fprintf(log, "mhc %-34s pre/post/C %.2e  y %.3f  y(norm) %.3f  R' %.3f  h %.3f  fused R' %.3f  next y %.3f  %s\n",
            name, es, ry, ryn, rr, rh, rf2, ry2, pass ? "pass" : "FAIL");
    rc = !pass;
  }

done:
  free(R); free(out); free(fn); free(hfn); free(nw); free(hpart); free(hws);
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 6; i++) free(*ybufs[s][i]);
  free(dv.post); free(dv.C); free(dv.prew); free(rf.post); free(rf.C); free(rf.prew);
  free(dv.post2); free(dv.C2); free(rf.post2); free(rf.C2);
  return rc;
}

int dsk_check_mhc(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c) {
  FILE *log = o->log ? o->log : stdout;
  dsk_ctx *ref = tu_ctx("cpu");
  if (!ref) {
    fprintf(log, "mhc: FAIL (no cpu-ref context)\n");
    c->failed++;
    return 1;
  }
  static const int64_t Dfull[2] = {4096, 7168}, Tfull[4] = {1, 3, 64, 4097};
  static const int64_t Dquick[2] = {256, 512}, Tquick[4] = {1, 3, 64, 257};
  const int64_t *Ds = o->quick ? Dquick : Dfull, *Ts = o->quick ? Tquick : Tfull;
  tu_rng seeds = tu_rng_make(o->seed ^ 0x3C3Cu);
  int rc = 0;
  for (int di = 0; di < 2; di++) {
    const int32_t smax = (int32_t)dsk_mhc_max_splits(4 * Ds[di]);
    for (int ti = 0; ti < 4; ti++) {
      const int big = ti == 3;
      const int32_t Ss[3] = {0, 1, smax};
      for (int si = 0; si < (big ? 1 : 3); si++)
        rc |= mhc_case(ctx, ref, Ds[di], Ts[ti], Ss[si], DSK_MHC_PRECISION_FP32, tu_next(&seeds), log, c);
      if (ti == 1 || ti == 2)
        rc |= mhc_case(ctx, ref, Ds[di], Ts[ti], 0, DSK_MHC_PRECISION_TF32, tu_next(&seeds), log, c);
    }
  }
  dsk_ctx_destroy(ref);
  return rc;
}
