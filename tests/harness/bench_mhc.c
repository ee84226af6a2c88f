/* bench_mhc.c - `dsk bench mhc`: the mHC ops of one DeepSeek-V4 sublayer on
 * the model shapes of issue 6 (spec/mhc.md §5), with the device copy
 * bandwidth measured in the same run. Per (model, T): prenorm + pre + post
 * as one timed callable (the spec's T = 1 latency goal is for these three
 * together), the same three ops on 16 distinct input sets back to back (per
 * sublayer inside a stream, T <= 64), the fused form of one sublayer
 * (post_prenorm, i.e. the previous sublayer's post with this one's prenorm,
 * then pre: the same work, one kernel fewer) lone and in the stream, then
 * each op alone, and hc_head. Inputs are the harness's
 * (check_mhc.c), L2 flushed before every sample unless warm.
 *
 * Bytes per spec §5: fn (24 x nD x 4) + every read of R (T x nD x 2 per op
 * that reads it) + the outputs (y, post, C, R'); the fused form reads R
 * once and R' once (pre), so it counts one read of R fewer. Split partials are not
 * counted, nor are the sublayer output `out` that post reads and the post /
 * C that post re-reads. Not in the spec, and stated in the help text: the
 * fused-norm pre row adds its norm weight (D x 4), the head row counts its
 * own fn (4 x nD x 4) + R + h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct mhc_model {
  const char *model;
  int64_t D;
} mhc_model;

static const mhc_model k_models[] = {{"dsv4-flash", 4096}, {"dsv4-pro", 7168}};
static const int k_T[] = {1, 4, 16, 64, 256, 1024, 4096};
static const int k_T_quick[] = {1, 4};

enum {
  OP_ALL3,
  OP_STREAM,
  OP_FUSED2,
  OP_FSTREAM,
  OP_PRENORM,
  OP_PRE,
  OP_PRE_NORM,
  OP_POST,
  OP_FUSED,
  OP_HEAD,
  OP_COUNT
};
static const char *const k_op_names[OP_COUNT] = {"prenorm+pre+post", "prenorm+pre+post/stream16",
                                                 "post_prenorm+pre", "post_prenorm+pre/stream16",
                                                 "prenorm", "pre", "pre+norm", "post", "post_prenorm", "head"};

/* The stream row: the three ops on kStreamSets distinct input sets back to
 * back in one timed call (dsk_bench_opts.repeat), so every set's bytes are
 * read cold once per sample and the result is one sublayer's mHC time
 * inside a stream of sublayers, without the fixed cost of the events around
 * a lone call. Only for T <= kStreamMaxT (the goals are at T 1 and 64). */
enum { kStreamSets = 16, kStreamMaxT = 64 };

typedef struct mhc_chain {
  dsk_mhc_prenorm_desc pn;
  dsk_mhc_pre_desc pre;
  dsk_mhc_post_desc post;
  dsk_mhc_post_prenorm_desc fpn; /* the fused form: post_prenorm into R', then pre on R' */
  dsk_mhc_pre_desc fpre;
} mhc_chain;

typedef struct mhc_run {
  int op;
  const mhc_chain *sets; /* OP_STREAM: kStreamSets chains on distinct buffers */
  dsk_mhc_prenorm_desc pn;
  dsk_mhc_pre_desc pre;  /* plain: y, post, C */
  dsk_mhc_pre_desc pren; /* with the fused RMSNorm */
  dsk_mhc_post_desc post;
  dsk_mhc_post_prenorm_desc fpn; /* R -> Ro (R') and the partials */
  dsk_mhc_pre_desc fpre;         /* pre on Ro */
  dsk_mhc_head_desc head;
} mhc_run;

static dsk_status run_once(dsk_ctx *ctx, void *user) {
  const mhc_run *r = (const mhc_run *)user;
  dsk_status st = DSK_STATUS_OK;
  switch (r->op) {
    case OP_ALL3:
      st = dsk_mhc_prenorm(ctx, &r->pn);
      if (st == DSK_STATUS_OK) st = dsk_mhc_pre(ctx, &r->pre);
      if (st == DSK_STATUS_OK) st = dsk_mhc_post(ctx, &r->post);
      return st;
    case OP_STREAM:
      for (int i = 0; i < kStreamSets && st == DSK_STATUS_OK; i++) {
        st = dsk_mhc_prenorm(ctx, &r->sets[i].pn);
        if (st == DSK_STATUS_OK) st = dsk_mhc_pre(ctx, &r->sets[i].pre);
        if (st == DSK_STATUS_OK) st = dsk_mhc_post(ctx, &r->sets[i].post);
      }
      return st;
    case OP_FUSED2:
      st = dsk_mhc_post_prenorm(ctx, &r->fpn);
      if (st == DSK_STATUS_OK) st = dsk_mhc_pre(ctx, &r->fpre);
      return st;
    case OP_FSTREAM:
      for (int i = 0; i < kStreamSets && st == DSK_STATUS_OK; i++) {
        st = dsk_mhc_post_prenorm(ctx, &r->sets[i].fpn);
        if (st == DSK_STATUS_OK) st = dsk_mhc_pre(ctx, &r->sets[i].fpre);
      }
      return st;
    case OP_FUSED: return dsk_mhc_post_prenorm(ctx, &r->fpn);
    case OP_PRENORM: return dsk_mhc_prenorm(ctx, &r->pn);
    case OP_PRE: return dsk_mhc_pre(ctx, &r->pre);
    case OP_PRE_NORM: return dsk_mhc_pre(ctx, &r->pren);
    case OP_POST: return dsk_mhc_post(ctx, &r->post);
    default: return dsk_mhc_head(ctx, &r->head);
  }
}

/* Bytes of one call of `op` per spec §5 (see the file comment). */
static double op_bytes(int op, int64_t T, int64_t D) {
  const double nD = 4.0 * (double)D;
  const double fn = 24.0 * nD * 4, R = (double)T * nD * 2, y = (double)T * D * 2, pc = (double)T * (4 + 16) * 4;
  switch (op) {
    case OP_ALL3:
    case OP_STREAM: return fn + R + (R + y + pc) + (R + R);
    case OP_FUSED2:
    case OP_FSTREAM: return (fn + R + R) + (R + y + pc); /* post_prenorm reads R, writes R'; pre reads R' */
    case OP_FUSED: return fn + R + R;
    case OP_PRENORM: return fn + R;
    case OP_PRE: return R + y + pc;
    case OP_PRE_NORM: return R + y + pc + 4.0 * (double)D;
    case OP_POST: return R + R;
    default: return 4.0 * nD * 4 + R + y;
  }
}

/* Device buffers of one model, sized for the largest T of the run. */
typedef struct mhc_bufs {
  dsk_bf16 *R, *out, *y, *yn, *Ro, *h;
  float *fn, *hfn, *scale, *base, *hscale, *hbase, *nw, *part, *post, *C;
  void *ws;
} mhc_bufs;

static void bufs_free(dsk_ctx *ctx, mhc_bufs *b) {
  void *p[] = {b->R, b->out, b->y, b->yn, b->Ro, b->h, b->fn, b->hfn, b->scale, b->base, b->hscale, b->hbase,
               b->nw, b->part, b->post, b->C, b->ws};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) dsk_mem_free(ctx, p[i]);
  memset(b, 0, sizeof *b);
}

static void *balloc(dsk_ctx *ctx, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st == DSK_STATUS_OK) *st = dsk_mem_alloc(ctx, &p, bytes ? bytes : 16);
  return p;
}
static void *bput(dsk_ctx *ctx, const void *h, size_t bytes, dsk_status *st) {
  void *p = balloc(ctx, bytes, st);
  if (*st == DSK_STATUS_OK) *st = dsk_mem_upload(ctx, p, h, bytes);
  return p;
}

/* Inputs as in check_mhc.c: R, out ~ N(0, 1) bf16, fn ~ N(0, 1/nD), scale
 * (1, 1, 0.25), base U(-0.5, 0.5), norm weight U(0.5, 1.5). */
static dsk_status bufs_make(dsk_ctx *ctx, tu_rng *rng, int64_t D, int64_t Tmax, mhc_bufs *b) {
  const int64_t nD = 4 * D, smax = dsk_mhc_max_splits(nD);
  memset(b, 0, sizeof *b);
  dsk_status st = DSK_STATUS_OK;
  dsk_bf16 *R = malloc(sizeof(dsk_bf16) * (size_t)(Tmax * nD)), *out = malloc(sizeof(dsk_bf16) * (size_t)(Tmax * D));
  float *fn = malloc(sizeof(float) * (size_t)(24 * nD)), *hfn = malloc(sizeof(float) * (size_t)(4 * nD));
  float *nw = malloc(sizeof(float) * (size_t)D);
  float scale[3] = {1.0f, 1.0f, 0.25f}, base[24], hscale[1] = {1.0f}, hbase[4];
  if (!R || !out || !fn || !hfn || !nw) st = DSK_STATUS_OUT_OF_MEMORY;
  if (st == DSK_STATUS_OK) {
    tu_fill_bf16_normal_rep(rng, R, (size_t)(Tmax * nD), 1.0);
    tu_fill_bf16_normal_rep(rng, out, (size_t)(Tmax * D), 1.0);
    for (int64_t i = 0; i < 24 * nD; i++) fn[i] = (float)(tu_normal(rng) / sqrt((double)nD));
    for (int64_t i = 0; i < 4 * nD; i++) hfn[i] = (float)(tu_normal(rng) / sqrt((double)nD));
    for (int64_t i = 0; i < D; i++) nw[i] = (float)(0.5 + tu_uniform(rng));
    for (int j = 0; j < 24; j++) base[j] = (float)(tu_uniform(rng) - 0.5);
    for (int j = 0; j < 4; j++) hbase[j] = (float)(tu_uniform(rng) - 0.5);
  }
  b->R = bput(ctx, R, sizeof(dsk_bf16) * (size_t)(Tmax * nD), &st);
  b->out = bput(ctx, out, sizeof(dsk_bf16) * (size_t)(Tmax * D), &st);
  b->fn = bput(ctx, fn, sizeof(float) * (size_t)(24 * nD), &st);
  b->hfn = bput(ctx, hfn, sizeof(float) * (size_t)(4 * nD), &st);
  b->nw = bput(ctx, nw, sizeof(float) * (size_t)D, &st);
  b->scale = bput(ctx, scale, sizeof scale, &st);
  b->base = bput(ctx, base, sizeof base, &st);
  b->hscale = bput(ctx, hscale, sizeof hscale, &st);
  b->hbase = bput(ctx, hbase, sizeof hbase, &st);
  b->y = balloc(ctx, sizeof(dsk_bf16) * (size_t)(Tmax * D), &st);
  b->yn = balloc(ctx, sizeof(dsk_bf16) * (size_t)(Tmax * D), &st);
  b->h = balloc(ctx, sizeof(dsk_bf16) * (size_t)(Tmax * D), &st);
  b->Ro = balloc(ctx, sizeof(dsk_bf16) * (size_t)(Tmax * nD), &st);
  b->part = balloc(ctx, (size_t)(smax * Tmax * 100), &st);
  b->ws = balloc(ctx, (size_t)(smax * Tmax * 20), &st);
  b->post = balloc(ctx, sizeof(float) * (size_t)(Tmax * 4), &st);
  b->C = balloc(ctx, sizeof(float) * (size_t)(Tmax * 16), &st);
  free(R);
  free(out);
  free(fn);
  free(hfn);
  free(nw);
  return st;
}

/* The stream row's input sets: R, out, fn, partials and every output of
 * the three ops per set (scale and base, 96 bytes, are shared), filled like
 * the main set. */
typedef struct mhc_sets {
  int n;
  void *p[kStreamSets][8]; /* R, out, fn, part, y, post, C, Ro */
} mhc_sets;

static void sets_free(dsk_ctx *ctx, mhc_sets *m) {
  for (int i = 0; i < m->n; i++)
    for (int k = 0; k < 8; k++) dsk_mem_free(ctx, m->p[i][k]);
  memset(m, 0, sizeof *m);
}

static dsk_status sets_make(dsk_ctx *ctx, tu_rng *rng, int64_t D, int64_t Tmax, mhc_sets *m) {
  const int64_t nD = 4 * D, smax = dsk_mhc_max_splits(nD);
  memset(m, 0, sizeof *m);
  const size_t nR = (size_t)(Tmax * nD), nO = (size_t)(Tmax * D), nF = (size_t)(24 * nD);
  dsk_bf16 *R = malloc(sizeof(dsk_bf16) * nR), *out = malloc(sizeof(dsk_bf16) * nO);
  float *fn = malloc(sizeof(float) * nF);
  dsk_status st = R && out && fn ? DSK_STATUS_OK : DSK_STATUS_OUT_OF_MEMORY;
  for (int i = 0; i < kStreamSets && st == DSK_STATUS_OK; i++) {
    tu_fill_bf16_normal_rep(rng, R, nR, 1.0);
    tu_fill_bf16_normal_rep(rng, out, nO, 1.0);
    for (size_t k = 0; k < nF; k++) fn[k] = (float)(tu_normal(rng) / sqrt((double)nD));
    m->n = i + 1;
    m->p[i][0] = bput(ctx, R, sizeof(dsk_bf16) * nR, &st);
    m->p[i][1] = bput(ctx, out, sizeof(dsk_bf16) * nO, &st);
    m->p[i][2] = bput(ctx, fn, sizeof(float) * nF, &st);
    m->p[i][3] = balloc(ctx, (size_t)(smax * Tmax * 100), &st);
    m->p[i][4] = balloc(ctx, sizeof(dsk_bf16) * nO, &st);
    m->p[i][5] = balloc(ctx, sizeof(float) * (size_t)(Tmax * 4), &st);
    m->p[i][6] = balloc(ctx, sizeof(float) * (size_t)(Tmax * 16), &st);
    m->p[i][7] = balloc(ctx, sizeof(dsk_bf16) * nR, &st);
  }
  free(R);
  free(out);
  free(fn);
  return st;
}

/* The chains of the stream row: the case's descriptors on set i's buffers. */
static void chains_make(const mhc_run *r, const mhc_sets *m, mhc_chain *c) {
  for (int i = 0; i < kStreamSets; i++) {
    void *const *p = m->p[i];
    c[i].pn = r->pn;
    c[i].pn.R = p[0];
    c[i].pn.fn = p[2];
    c[i].pn.partials = p[3];
    c[i].pre = r->pre;
    c[i].pre.partials = p[3];
    c[i].pre.R = p[0];
    c[i].pre.y = p[4];
    c[i].pre.post = p[5];
    c[i].pre.C = p[6];
    c[i].post = r->post;
    c[i].post.out = p[1];
    c[i].post.R = p[0];
    c[i].post.post = p[5];
    c[i].post.C = p[6];
    c[i].post.R_out = p[7];
    c[i].fpn = r->fpn;
    c[i].fpn.out = p[1];
    c[i].fpn.R = p[0];
    c[i].fpn.post = p[5];
    c[i].fpn.C = p[6];
    c[i].fpn.R_out = p[7];
    c[i].fpn.fn = p[2];
    c[i].fpn.partials = p[3];
    c[i].fpre = c[i].pre;
    c[i].fpre.R = p[7];
  }
}

/* The descriptors of one (D, T) case; S resolved by the prenorm plan. */
static dsk_status case_make(dsk_ctx *ctx, const mhc_bufs *b, int64_t D, int64_t T, int32_t fixed, mhc_run *r,
                            int64_t *S_out, int64_t *S_head) {
  const int64_t nD = 4 * D;
  memset(r, 0, sizeof *r);
  dsk_mhc_prenorm_desc *pn = &r->pn;
  dsk_mhc_prenorm_desc_init(pn);
  pn->T = T;
  pn->D = D;
  pn->nD = nD;
  pn->R = b->R;
  pn->R_stride = nD;
  pn->fn = b->fn;
  pn->fixed_splits = fixed;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st = dsk_mhc_prenorm_plan(ctx, pn, &pi);
  if (st != DSK_STATUS_OK) return st;
  const int64_t S = pi.tactic.v[0];
  *S_out = S;
  pn->partials = b->part;
  pn->partials_bytes = S * T * 100;

  dsk_mhc_pre_desc *q = &r->pre;
  dsk_mhc_pre_desc_init(q);
  q->T = T;
  q->D = D;
  q->nD = nD;
  q->fixed_splits = fixed;
  q->partials = b->part;
  q->partials_bytes = S * T * 100;
  q->R = b->R;
  q->R_stride = nD;
  q->scale = b->scale;
  q->base = b->base;
  q->y = b->y;
  q->y_stride = D;
  q->post = b->post;
  q->C = b->C;
  r->pren = *q;
  r->pren.norm_w = b->nw;
  r->pren.norm_eps = DSK_MHC_DEFAULT_EPS;
  r->pren.y = b->yn;

  dsk_mhc_post_desc *o = &r->post;
  dsk_mhc_post_desc_init(o);
  o->T = T;
  o->D = D;
  o->out = b->out;
  o->out_stride = D;
  o->R = b->R;
  o->R_stride = nD;
  o->post = b->post;
  o->C = b->C;
  o->R_out = b->Ro; /* out of place: R stays the same input for every sample */
  o->R_out_stride = nD;

  dsk_mhc_post_prenorm_desc *f = &r->fpn;
  dsk_mhc_post_prenorm_desc_init(f);
  f->T = T;
  f->D = D;
  f->nD = nD;
  f->out = b->out;
  f->out_stride = D;
  f->R = b->R;
  f->R_stride = nD;
  f->post = b->post;
  f->C = b->C;
  f->R_out = b->Ro;
  f->R_out_stride = nD;
  f->fn = b->fn;
  f->fixed_splits = fixed;
  f->partials = b->part;
  f->partials_bytes = S * T * 100;
  r->fpre = *q;
  r->fpre.R = b->Ro;

  dsk_mhc_head_desc *h = &r->head;
  dsk_mhc_head_desc_init(h);
  h->T = T;
  h->D = D;
  h->nD = nD;
  h->R = b->R;
  h->R_stride = nD;
  h->fn = b->hfn;
  h->scale = b->hscale;
  h->base = b->hbase;
  h->fixed_splits = fixed;
  h->h = b->h;
  h->h_stride = D;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  st = dsk_mhc_head_plan(ctx, h, &pi);
  if (st != DSK_STATUS_OK) return st;
  *S_head = pi.tactic.v[0];
  h->workspace = b->ws;
  h->workspace_bytes = pi.workspace_bytes;

  /* valid partials, post and C for the single-op rows */
  r->op = OP_ALL3;
  st = run_once(ctx, r);
  if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
  return st;
}

int dsk_bench_mhc(dsk_ctx *ctx, const dsk_bench_mhc_opts *o, FILE *out) {
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  dsk_ctx_get_info(ctx, &info);
  tu_rng rng = tu_rng_make(o->seed ? o->seed : 7);
  const int *Ts = o->quick ? k_T_quick : k_T;
  const int nT = o->quick ? (int)(sizeof k_T_quick / sizeof k_T_quick[0]) : (int)(sizeof k_T / sizeof k_T[0]);
  int op_only = -1;
  if (o->op) {
    for (int i = 0; i < OP_COUNT; i++)
      if (strcmp(o->op, k_op_names[i]) == 0) op_only = i;
    if (op_only < 0) {
      fprintf(stderr, "bench: unknown mhc op '%s' (prenorm+pre+post, prenorm+pre+post/stream16, post_prenorm+pre, "
              "post_prenorm+pre/stream16, prenorm, pre, pre+norm, post, post_prenorm, head)\n", o->op);
      return 1;
    }
  }
  /* a stream op runs at T <= kStreamMaxT only; --splits above a model's S_max skips the model */
  const int stream_only = op_only == OP_STREAM || op_only == OP_FSTREAM;
  int any = 0;
  for (size_t mi = 0; mi < sizeof k_models / sizeof k_models[0]; mi++) {
    if (o->model && !strstr(k_models[mi].model, o->model)) continue;
    if (o->fixed_splits > dsk_mhc_max_splits(4 * k_models[mi].D)) continue;
    for (int ti = 0; ti < nT; ti++) {
      const int T = Ts[ti];
      any |= !(o->max_T && T > o->max_T) && !(o->only_T && T != o->only_T) && !(stream_only && T > kStreamMaxT);
    }
  }
  if (!any) {
    char have[256];
    snprintf(have, sizeof have, "models dsv4-flash (S_max %lld), dsv4-pro (S_max %lld); T %s; stream rows at T <= %d",
             (long long)dsk_mhc_max_splits(4 * 4096), (long long)dsk_mhc_max_splits(4 * 7168),
             o->quick ? "1, 4 (--quick)" : "1, 4, 16, 64, 256, 1024, 4096", kStreamMaxT);
    return dsk__bench_no_case("mhc", have);
  }
  double copy_gbps = 0;
  if (dsk__bench_preamble(ctx, &info, "mhc", o->quick, o->warm, out, &copy_gbps) != 0) return 1;
  fprintf(out, "# bytes per spec/mhc.md §5: fn 24*nD*4 + T*nD*2 per read of R + outputs (y, post, C, R'); partials not "
          "counted; FP32 projection; S = %s\n",
          o->fixed_splits ? "pinned (--splits)" : "resolved by the plan (tuned entry, else heuristic)");
  fprintf(out, "model,D,T,S,op,median_us,gbps,pct_copy_bw,bytes,goal\n");
  fflush(out);

  int rc = 0;
  for (size_t mi = 0; mi < sizeof k_models / sizeof k_models[0] && !rc; mi++) {
    const mhc_model *m = &k_models[mi];
    if (o->model && !strstr(m->model, o->model)) continue;
    const int64_t D = m->D, nD = 4 * D;
    if (o->fixed_splits > dsk_mhc_max_splits(nD)) {
      fprintf(stderr, "bench: %s: --splits %d > S_max %lld, skipped\n", m->model, o->fixed_splits,
              (long long)dsk_mhc_max_splits(nD));
      continue;
    }
    int64_t Tmax = 0;
    for (int ti = 0; ti < nT; ti++) {
      const int T = Ts[ti];
      if ((o->max_T && T > o->max_T) || (o->only_T && T != o->only_T)) continue;
      if (T > Tmax) Tmax = T;
    }
    if (!Tmax) continue;
    mhc_bufs b;
    mhc_sets sets;
    memset(&sets, 0, sizeof sets);
    const int want_stream = op_only < 0 || op_only == OP_STREAM || op_only == OP_FSTREAM;
    int64_t Tstream = 0; /* the largest T <= kStreamMaxT of the run */
    for (int ti = 0; ti < nT; ti++) {
      const int T = Ts[ti];
      if ((o->max_T && T > o->max_T) || (o->only_T && T != o->only_T) || T > kStreamMaxT) continue;
      if (T > Tstream) Tstream = T;
    }
    dsk_status st = bufs_make(ctx, &rng, D, Tmax, &b);
    if (st == DSK_STATUS_OK && want_stream && Tstream) st = sets_make(ctx, &rng, D, Tstream, &sets);
    if (st != DSK_STATUS_OK) {
      fprintf(stderr, "bench: %s: buffers (T %lld): %s: %s\n", m->model, (long long)Tmax, dsk_status_name(st),
              dsk_last_error());
      bufs_free(ctx, &b);
      sets_free(ctx, &sets);
      return 1;
    }
    for (int ti = 0; ti < nT && !rc; ti++) {
      const int T = Ts[ti];
      if ((o->max_T && T > o->max_T) || (o->only_T && T != o->only_T)) continue;
      mhc_run r;
      int64_t S = 0, Sh = 0;
      st = case_make(ctx, &b, D, T, o->fixed_splits, &r, &S, &Sh);
      if (st != DSK_STATUS_OK) {
        fprintf(stderr, "bench: %s T=%d: setup: %s: %s\n", m->model, T, dsk_status_name(st), dsk_last_error());
        rc = 1;
        break;
      }
      mhc_chain chains[kStreamSets];
      if (sets.n == kStreamSets) chains_make(&r, &sets, chains);
      r.sets = chains;
      for (int op = 0; op < OP_COUNT && !rc; op++) {
        if (op_only >= 0 && op != op_only) continue;
        if ((op == OP_STREAM || op == OP_FSTREAM) && (T > kStreamMaxT || sets.n != kStreamSets)) continue;
        r.op = op;
        dsk_bench_opts bo = {sizeof bo, NULL, 3, o->reps > 0 ? o->reps : 20, !o->warm, (op == OP_STREAM || op == OP_FSTREAM) ? kStreamSets : 1};
        dsk_bench_result br;
        memset(&br, 0, sizeof br);
        br.struct_size = sizeof br;
        st = dsk_bench_run(ctx, run_once, &r, &bo, &br);
        if (st != DSK_STATUS_OK) {
          fprintf(stderr, "bench: %s T=%d %s: %s: %s\n", m->model, T, k_op_names[op], dsk_status_name(st),
                  dsk_last_error());
          rc = 1;
          break;
        }
        const double us = br.median_us, bytes = op_bytes(op, T, D);
        const double gbps = us > 0 ? bytes / (us * 1e3) : 0.0, pct = copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0;
        char goal[24] = "";
        const int chain = op == OP_ALL3 || op == OP_STREAM || op == OP_FUSED2 || op == OP_FSTREAM;
        if (chain && T == 1) snprintf(goal, sizeof goal, "<=8us:%s", us <= 8.0 ? "yes" : "no");
        if (chain && T == 64) snprintf(goal, sizeof goal, ">=60%%:%s", pct >= 60.0 ? "yes" : "no");
        fprintf(out, "%s,%lld,%d,%lld,%s,%.2f,%.1f,%.1f,%.0f,%s\n", m->model, (long long)D, T,
                (long long)(op == OP_HEAD ? Sh : S), k_op_names[op], us, gbps, pct, bytes, goal);
        fflush(out);
      }
    }
    bufs_free(ctx, &b);
    sets_free(ctx, &sets);
  }
  return rc;
}
