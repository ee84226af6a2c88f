/* timing.c - timing one key (autotune.md §3): synthetic inputs of the key's
 * size (A6: KV pools of 4x L2 with random slots seeded from the key; never
 * the caller's buffers; scratch within DSK_AUTOTUNE_MAX_MB), every tactic of
 * the canonical order through dsk_bench_run with the A7 counts and the A8
 * cache state, and the deterministic pick of A9. Called only by
 * dsk_warmup_run (and so `dsk tune`), never from a run call (A10). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner.h"

#define MiB ((int64_t)1 << 20)

typedef struct tbuf {
  void *p;
  int64_t bytes;
} tbuf;

struct dsk__tune_scratch {
  dsk_ctx *ctx;
  tbuf q, out, ws, slots[2], pool[2], R, fn, partials;
  int pools_set;
  int32_t *host; /* host staging of slot lists */
  int64_t host_n;
};

dsk__tune_scratch *dsk__tune_scratch_new(dsk_ctx *ctx) {
  dsk__tune_scratch *s = (dsk__tune_scratch *)calloc(1, sizeof *s);
  if (s) s->ctx = ctx;
  return s;
}

static void tbuf_free(dsk_ctx *ctx, tbuf *b) {
  if (b->p) dsk_mem_free(ctx, b->p);
  b->p = NULL;
  b->bytes = 0;
}

void dsk__tune_scratch_free(dsk__tune_scratch *s) {
  if (!s) return;
  tbuf *all[] = {&s->q, &s->out, &s->ws, &s->slots[0], &s->slots[1], &s->pool[0], &s->pool[1],
                 &s->R, &s->fn, &s->partials};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tbuf_free(s->ctx, all[i]);
  free(s->host);
  free(s);
}

/* Grows b to at least `bytes` (contents lost); fill >= 0 sets every byte. */
static dsk_status tbuf_need(dsk_ctx *ctx, tbuf *b, int64_t bytes, int fill) {
  if (bytes < 64) bytes = 64;
  if (b->bytes >= bytes) return DSK_STATUS_OK;
  tbuf_free(ctx, b);
  dsk_status st = dsk_mem_alloc(ctx, &b->p, (size_t)bytes);
  if (st != DSK_STATUS_OK) return st;
  b->bytes = bytes;
  if (fill >= 0) st = dsk_mem_set(ctx, b->p, fill, (size_t)bytes);
  return st;
}

/* splitmix64 */
static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Random slots in [0, capacity) for a T x w list, uploaded to b. */
static dsk_status fill_slots(dsk__tune_scratch *sc, tbuf *b, int64_t T, int64_t w, int64_t capacity, uint64_t seed) {
  int64_t n = T * w;
  dsk_status st = tbuf_need(sc->ctx, b, n * 4, -1);
  if (st != DSK_STATUS_OK) return st;
  if (sc->host_n < n) {
    free(sc->host);
    sc->host = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    sc->host_n = sc->host ? n : 0;
    if (!sc->host) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: %lld slots of host staging", (long long)n);
  }
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i++) sc->host[i] = (int32_t)(mix(&s) % (uint64_t)capacity);
  return dsk_mem_upload(sc->ctx, b->p, sc->host, (size_t)(n * 4));
}

/* ------------------------------------------------------ one op's setup */
typedef struct run_args {
  int op;
  dsk_sparse_mla_desc mla;
  dsk_mhc_prenorm_desc mhc;
} run_args;

static dsk_status run_once(dsk_ctx *ctx, void *user) {
  run_args *a = (run_args *)user;
  if (a->op == DSK_OP_SPARSE_MLA_DECODE) return dsk_sparse_mla_decode(ctx, &a->mla);
  return dsk_mhc_prenorm(ctx, &a->mhc);
}

static int64_t budget_bytes(const dsk__tuner *t) { return dsk__tuner_settings(t)->max_mb * MiB; }

/* KV pool bytes per segment: 4x L2 (A6; CPUs without an L2 figure: 4x 8 MiB),
 * at most a quarter of the budget. */
static int64_t pool_target(const dsk_ctx *ctx, int64_t budget) {
  int64_t l2 = ctx->info.l2_bytes > 0 ? ctx->info.l2_bytes : 8 * MiB;
  int64_t p = 4 * l2;
  if (p > budget / 4) p = budget / 4;
  if (p < MiB) p = MiB;
  return p;
}

/* Prepares the synthetic inputs of shape s in a (tactic left zero) and
 * returns the bytes they take (without the workspace). skip gets a reason
 * when the key does not fit the budget (then nothing is allocated). */
static dsk_status setup(dsk__tune_scratch *sc, const dsk__tuner *t, const dsk__tune_shape *s, run_args *a,
                        int64_t *fixed, char *skip, size_t skip_len) {
  dsk_ctx *ctx = sc->ctx;
  const int64_t budget = budget_bytes(t);
  memset(a, 0, sizeof *a);
  a->op = s->op;
  skip[0] = 0;
  char key[DSK__TUNE_KEY_MAX];
  if (dsk__tune_key(s, 1, key, sizeof key) < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "autotune: key too long");
  const uint64_t seed = dsk__tune_fnv1a64(key, strlen(key));
  dsk_status st;
  if (s->op == DSK_OP_SPARSE_MLA_DECODE) {
    const int64_t dqk = s->format == DSK_KV_FORMAT_A656 ? 576 : 512;
    const int64_t qb = s->T * s->H * dqk * 2, ob = s->T * s->H * 512 * 2;
    int64_t pool = pool_target(ctx, budget);
    int64_t stride[2] = {0, 0}, need_pool[2] = {0, 0}, sb[2] = {0, 0};
    for (int i = 0; i < s->nseg; i++) {
      stride[i] = dsk_kv_canonical_page_stride((dsk_kv_format)s->format, s->pbs[i]);
      if (stride[i] <= 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "autotune: segment %d pbs %lld", i, (long long)s->pbs[i]);
      need_pool[i] = pool > 4 * stride[i] ? pool : 4 * stride[i];
      sb[i] = s->T * s->w[i] * 4;
    }
    int64_t total = qb + ob + sb[0] + sb[1] + need_pool[0] + need_pool[1];
    if (total > budget) {
      snprintf(skip, skip_len, "needs %.1f MiB of scratch > DSK_AUTOTUNE_MAX_MB %lld", (double)total / (double)MiB,
               (long long)(budget / MiB));
      return DSK_STATUS_OK;
    }
    *fixed = total;
    if ((st = tbuf_need(ctx, &sc->q, qb, 0x3C)) != DSK_STATUS_OK) return st; /* bf16 0x3C3C ~ 0.0115 */
    if ((st = tbuf_need(ctx, &sc->out, ob, -1)) != DSK_STATUS_OK) return st;
    dsk_sparse_mla_desc *d = &a->mla;
    d->struct_size = sizeof *d;
    d->format = (dsk_kv_format)s->format;
    d->precision = (dsk_precision)s->precision;
    d->T = s->T;
    d->H = s->H;
    d->q = (const dsk_bf16 *)sc->q.p;
    d->q_stride_h = dqk;
    d->q_stride_t = s->H * dqk;
    d->sm_scale = (float)(1.0 / sqrt((double)dqk));
    d->nseg = s->nseg;
    for (int i = 0; i < s->nseg; i++) {
      /* Pool bytes decode as small finite values in every field (e4m3 0x38
       * = 1.0, UE8M0 / fp32 / bf16 scales tiny and positive). */
      if ((st = tbuf_need(ctx, &sc->pool[i], need_pool[i], 0x38)) != DSK_STATUS_OK) return st;
      dsk_sparse_mla_segment *g = &d->seg[i];
      g->cache.base = sc->pool[i].p;
      g->cache.pbs = s->pbs[i];
      g->cache.page_stride = stride[i];
      g->cache.num_pages = sc->pool[i].bytes / stride[i];
      if (g->cache.num_pages * s->pbs[i] > INT32_MAX) g->cache.num_pages = INT32_MAX / s->pbs[i];
      int64_t cap = g->cache.num_pages * s->pbs[i];
      if ((st = fill_slots(sc, &sc->slots[i], s->T, s->w[i], cap, seed + (uint64_t)i)) != DSK_STATUS_OK) return st;
      g->slots = (const int32_t *)sc->slots[i].p;
      g->slots_stride_t = s->w[i];
      g->width = s->w[i];
      g->lens = NULL; /* lens = width (indices.md §5) */
    }
    d->out = (dsk_bf16 *)sc->out.p;
    d->out_stride_h = 512;
    d->out_stride_t = s->H * 512;
    return DSK_STATUS_OK;
  }
  if (s->op == DSK_OP_MHC_PRENORM) {
    const int64_t smax = dsk_mhc_max_splits(s->nD);
    const int64_t rb = s->T * s->nD * 2, fb = 24 * s->nD * 4, pb = smax * s->T * 25 * 4;
    int64_t total = rb + fb;
    if (total + pb > budget) {
      snprintf(skip, skip_len, "needs %.1f MiB of scratch > DSK_AUTOTUNE_MAX_MB %lld",
               (double)(total + pb) / (double)MiB, (long long)(budget / MiB));
      return DSK_STATUS_OK;
    }
    *fixed = total;
    if ((st = tbuf_need(ctx, &sc->R, rb, 0x3C)) != DSK_STATUS_OK) return st;
    if ((st = tbuf_need(ctx, &sc->fn, fb, 0x3C)) != DSK_STATUS_OK) return st; /* fp32 ~0.0115 */
    dsk_mhc_prenorm_desc *d = &a->mhc;
    dsk_mhc_prenorm_desc_init(d);
    d->T = s->T;
    d->D = s->nD / 4;
    d->nD = s->nD;
    d->R = (const dsk_bf16 *)sc->R.p;
    d->R_stride = s->nD;
    d->fn = (const float *)sc->fn.p;
    d->precision = DSK_MHC_PRECISION_FP32;
    return DSK_STATUS_OK;
  }
  return dsk__fail(DSK_STATUS_INVALID_ARG, "autotune: op %d is not tunable", s->op);
}

/* Sets the tactic of a and sizes its workspace. *fits = 1 if it fits the
 * budget (and the workspace is ready), 0 if not. */
static dsk_status apply_tactic(dsk__tune_scratch *sc, const dsk__tuner *t, run_args *a, const dsk_tactic *tac,
                               int64_t fixed, int *fits) {
  dsk_ctx *ctx = sc->ctx;
  *fits = 0;
  int64_t ws = 0;
  dsk_status st;
  if (a->op == DSK_OP_SPARSE_MLA_DECODE) {
    a->mla.tactic = *tac;
    a->mla.workspace = NULL;
    a->mla.workspace_bytes = 0;
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    if ((st = dsk_sparse_mla_decode_plan(ctx, &a->mla, &pi)) != DSK_STATUS_OK) return st;
    ws = pi.workspace_bytes;
  } else {
    a->mhc.fixed_splits = tac->v[0];
    ws = (int64_t)tac->v[0] * a->mhc.T * 25 * 4;
  }
  if (fixed + ws > budget_bytes(t)) return DSK_STATUS_OK;
  if ((st = tbuf_need(ctx, a->op == DSK_OP_SPARSE_MLA_DECODE ? &sc->ws : &sc->partials, ws, -1)) != DSK_STATUS_OK)
    return st;
  if (a->op == DSK_OP_SPARSE_MLA_DECODE) {
    a->mla.workspace = ws > 0 ? sc->ws.p : NULL;
    a->mla.workspace_bytes = ws > 0 ? sc->ws.bytes : 0;
  } else {
    a->mhc.partials = (float *)sc->partials.p;
    a->mhc.partials_bytes = sc->partials.bytes;
  }
  *fits = 1;
  return DSK_STATUS_OK;
}

int dsk__tune_pick(const double *med, int n) {
  /* A9: among medians <= 1.02 x best, the first in canonical order. */
  double best = -1;
  for (int i = 0; i < n; i++)
    if (med[i] >= 0 && (best < 0 || med[i] < best)) best = med[i];
  for (int i = 0; i < n; i++)
    if (med[i] >= 0 && med[i] <= 1.02 * best) return i;
  return -1;
}

dsk_status dsk__tune_time_key(dsk_ctx *ctx, dsk__tune_scratch *sc, const dsk__tune_shape *s, dsk__tune_result *r) {
  memset(r, 0, sizeof *r);
  r->us_best = r->us_second = r->us_heuristic = -1;
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
  dsk_tactic tac[DSK__TUNE_MAX_TACTICS];
  int n = dsk__tune_tactics(ctx, s, tac, DSK__TUNE_MAX_TACTICS);
  if (n < 1) return dsk__fail(DSK_STATUS_INVALID_ARG, "autotune: no tactics for op %d", s->op);
  run_args a;
  int64_t fixed = 0;
  dsk_status st = setup(sc, t, s, &a, &fixed, r->skip_reason, sizeof r->skip_reason);
  if (st != DSK_STATUS_OK || r->skip_reason[0]) return st;
  /* A7: 3 + 10 launches, 1 + 3 when the estimate is over 1 ms (never
   * measured times). A8: cold L2 for decode buckets (T <= 64) of these
   * memory-bound ops under auto. */
  const int heavy = dsk__tune_estimate_us(ctx, s) > 1000.0;
  const int l2 = dsk__tuner_settings(t)->l2;
  dsk_bench_opts o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.warmup = heavy ? 1 : 3;
  o.reps = heavy ? 3 : 10;
  o.flush_l2 = l2 == 1 || (l2 == 0 && s->T <= 64);
  double med[DSK__TUNE_MAX_TACTICS];
  int timed = 0;
  for (int i = 0; i < n; i++) {
    med[i] = -1;
    int fits = 0;
    if ((st = apply_tactic(sc, t, &a, &tac[i], fixed, &fits)) != DSK_STATUS_OK) return st;
    if (!fits) continue;
    dsk_bench_result br;
    memset(&br, 0, sizeof br);
    br.struct_size = sizeof br;
    if ((st = dsk_bench_run(ctx, run_once, &a, &o, &br)) != DSK_STATUS_OK) return st;
    med[i] = br.median_us;
    timed++;
  }
  if (!timed) {
    snprintf(r->skip_reason, sizeof r->skip_reason, "no tactic fits DSK_AUTOTUNE_MAX_MB %lld",
             (long long)dsk__tuner_settings(t)->max_mb);
    return DSK_STATUS_OK;
  }
  int pick = dsk__tune_pick(med, n);
  double second = -1;
  for (int i = 0; i < n; i++)
    if (i != pick && med[i] >= 0 && (second < 0 || med[i] < second)) second = med[i];
  r->best = tac[pick];
  r->num_tactics = timed;
  r->us_best = med[pick];
  r->us_second = second;
  r->us_heuristic = med[0]; /* the heuristic is first in canonical order (-1 if it did not fit) */
  return DSK_STATUS_OK;
}

dsk_status dsk__tune_prerun_key(dsk_ctx *ctx, dsk__tune_scratch *sc, const dsk__tune_shape *s, const dsk_tactic *tac,
                                char *skip, size_t skip_len) {
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
  run_args a;
  int64_t fixed = 0;
  dsk_status st = setup(sc, t, s, &a, &fixed, skip, skip_len);
  if (st != DSK_STATUS_OK || skip[0]) return st;
  int fits = 0;
  if ((st = apply_tactic(sc, t, &a, tac, fixed, &fits)) != DSK_STATUS_OK) return st;
  if (!fits) {
    snprintf(skip, skip_len, "the workspace of its tactic does not fit DSK_AUTOTUNE_MAX_MB %lld",
             (long long)dsk__tuner_settings(t)->max_mb);
    return DSK_STATUS_OK;
  }
  st = run_once(ctx, &a);
  if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
  return st;
}
