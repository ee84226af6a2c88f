/* timing.c - timing one key (autotune.md §3): synthetic inputs of the key's
 * size (A6: KV pools of 4x L2 with random slots seeded from the key; MoE
 * GEMMs with uniform-random routing seeded from the key, the weights of
 * every expert the routing touches allocated; never the caller's buffers; scratch within
 * DSK_AUTOTUNE_MAX_MB), every tactic of
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
  tbuf q, out, ws, slots[2], pool[2];  /* sparse_mla_decode */
  tbuf R, fn, partials;                /* mhc_prenorm */
  tbuf gA, gsfa, gmind, gB, gsfb, gD, gws; /* moe_gemm, dense_fp8_gemm */
  int pools_set;
  int32_t *host; /* host staging of slot lists and m_indices */
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

/* The buffers of one op family: 0 sparse decode, 1 mHC, 2 GEMMs. Setting up
 * a key frees the other families' buffers, so the scratch held at once
 * stays within one key's budget. */
static void release_families(dsk__tune_scratch *s, int keep) {
  tbuf *fam[3][7] = {{&s->q, &s->out, &s->ws, &s->slots[0], &s->slots[1], &s->pool[0], &s->pool[1]},
                     {&s->R, &s->fn, &s->partials, NULL, NULL, NULL, NULL},
                     {&s->gA, &s->gsfa, &s->gmind, &s->gB, &s->gsfb, &s->gD, &s->gws}};
  for (int f = 0; f < 3; f++)
    for (int i = 0; f != keep && i < 7; i++)
      if (fam[f][i]) tbuf_free(s->ctx, fam[f][i]);
}

void dsk__tune_scratch_free(dsk__tune_scratch *s) {
  if (!s) return;
  release_families(s, -1);
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

static dsk_status host_need(dsk__tune_scratch *sc, int64_t n) {
  if (sc->host_n >= n) return DSK_STATUS_OK;
  free(sc->host);
  sc->host = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
  sc->host_n = sc->host ? n : 0;
  if (!sc->host) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: %lld int32 of host staging", (long long)n);
  return DSK_STATUS_OK;
}

/* Random slots in [0, capacity) for a T x w list, uploaded to b. */
static dsk_status fill_slots(dsk__tune_scratch *sc, tbuf *b, int64_t T, int64_t w, int64_t capacity, uint64_t seed) {
  int64_t n = T * w;
  dsk_status st = tbuf_need(sc->ctx, b, n * 4, -1);
  if (st != DSK_STATUS_OK) return st;
  if ((st = host_need(sc, n)) != DSK_STATUS_OK) return st;
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i++) sc->host[i] = (int32_t)(mix(&s) % (uint64_t)capacity);
  return dsk_mem_upload(sc->ctx, b->p, sc->host, (size_t)(n * 4));
}

/* ------------------------------------------------------ one op's setup */
/* The m-grouped contiguous layout (spec/mxfp4-moe.md §5.1) of T tokens
 * routed uniformly at random (A6; seeded from the key) to topk distinct
 * experts of E each: segments rounded up to A, padding and the tail up to
 * M_sum -1. Writes M_sum int32 to sc->host. The experts the routing touches
 * are renumbered 0 .. *touched - 1 in ascending order of their ids (the
 * segments keep their order and sizes), so the timing allocates the
 * weights of those experts only: the GEMM reads no other expert's weights,
 * and each touched expert still has its own, read from memory as in
 * serving (DSv4-Flash FC1 at TP 1: 2 GiB of weights for E 256, 48 MiB for
 * the 6 experts of T 1). */
static dsk_status moe_layout(dsk__tune_scratch *sc, int64_t T, int64_t topk, int64_t E, int64_t A, int64_t msum,
                             uint64_t seed, int64_t *touched) {
  dsk_status st = host_need(sc, msum);
  if (st != DSK_STATUS_OK) return st;
  int64_t *cnt = (int64_t *)calloc((size_t)E, sizeof *cnt);
  if (!cnt) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: routing counts");
  uint64_t r = seed;
  for (int64_t t = 0; t < T; t++) {
    int64_t pick[DSK_MOE_MAX_TOPK];
    for (int64_t k = 0; k < topk; k++) {
      int64_t e, dup;
      do { /* distinct experts while topk <= E (rejection terminates); with
            * expert parallelism E_local may be < topk: then repeats */
        e = (int64_t)(mix(&r) % (uint64_t)E);
        dup = 0;
        for (int64_t j = 0; j < k && topk <= E; j++) dup |= pick[j] == e;
      } while (dup);
      pick[k] = e;
      cnt[e]++;
    }
  }
  int64_t row = 0, u = 0;
  for (int64_t e = 0; e < E; e++) {
    if (cnt[e] == 0) continue;
    const int64_t seg = (cnt[e] + A - 1) / A * A;
    /* sum of segments <= T*topk + min(T*topk, E)*(A-1) <= M_sum (worst case) */
    for (int64_t i = 0; i < seg && row < msum; i++, row++) sc->host[row] = i < cnt[e] ? (int32_t)u : -1;
    u++;
  }
  for (; row < msum; row++) sc->host[row] = -1;
  free(cnt);
  *touched = u > 0 ? u : 1;
  return DSK_STATUS_OK;
}

typedef struct run_args {
  int op;
  dsk_sparse_mla_desc mla;
  dsk_mhc_prenorm_desc mhc;
  dsk_moe_gemm_desc mg;
  dsk_dense_gemm_desc dg;
} run_args;

static dsk_status run_once(dsk_ctx *ctx, void *user) {
  run_args *a = (run_args *)user;
  switch (a->op) {
    case DSK_OP_SPARSE_MLA_DECODE: return dsk_sparse_mla_decode(ctx, &a->mla);
    case DSK_OP_MHC_PRENORM: return dsk_mhc_prenorm(ctx, &a->mhc);
    case DSK_OP_MOE_GEMM: return dsk_moe_gemm(ctx, &a->mg);
    default: return dsk_dense_fp8_gemm(ctx, &a->dg);
  }
}

static void over_budget(char *skip, size_t skip_len, int64_t total, int64_t budget) {
  snprintf(skip, skip_len, "needs %.1f MiB of scratch > DSK_AUTOTUNE_MAX_MB %lld", (double)total / (double)MiB,
           (long long)(budget / MiB));
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
  release_families(sc, s->op == DSK_OP_SPARSE_MLA_DECODE ? 0 : s->op == DSK_OP_MHC_PRENORM ? 1 : 2);
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
  if (s->op == DSK_OP_MOE_GEMM || s->op == DSK_OP_MOE_DENSE_GEMM) {
    /* Constant operands (e4m3 0x38 = 1.0, e2m1 pairs 0x22 = 1.0, UE8M0
     * 0x7F = 1.0; every value finite whatever the buffer held before); the
     * grouped GEMM gets a real routing layout over the worst-case M_sum of
     * dsk_moe_run (the graph-safe size it runs with). */
    const int moe = s->op == DSK_OP_MOE_GEMM;
    const int mx = moe && s->wfmt == DSK_MOE_W_MXFP4;
    const int64_t N = s->N, K = s->K;
    if (moe && (s->topk < 1 || s->topk > DSK_MOE_MAX_TOPK || s->E < 1 || s->A < 64))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "autotune: moe_gemm key with topk %lld, E %lld, A %lld",
                       (long long)s->topk, (long long)s->E, (long long)s->A);
    int64_t rows = s->T, G = 1;
    if (moe) {
      const int64_t M = s->T * s->topk, active = M < s->E ? M : s->E;
      rows = (M + active * (s->A - 1) + s->A - 1) / s->A * s->A;
      /* the routing first (host only): G = the experts it touches, whose
       * weights are all the GEMM reads */
      if ((st = moe_layout(sc, s->T, s->topk, s->E, s->A, rows, seed, &G)) != DSK_STATUS_OK) return st;
    }
    const int64_t sfkb = mx ? K / 32 : K / 128;
    const int64_t ab = rows * K, sfab = dsk_sf_packed_words(1, rows, K / 128) * 4, mib = moe ? rows * 4 : 0;
    const int64_t bb = G * N * (mx ? K / 2 : K), sfbb = dsk_sf_packed_words(G, N, sfkb) * 4, db = rows * N * 2;
    const int64_t total = ab + sfab + mib + bb + sfbb + db;
    if (sfab < 0 || sfbb < 0 || total > budget) {
      over_budget(skip, skip_len, total, budget);
      return DSK_STATUS_OK;
    }
    *fixed = total;
    if ((st = tbuf_need(ctx, &sc->gA, ab, 0x38)) != DSK_STATUS_OK) return st;
    if ((st = tbuf_need(ctx, &sc->gsfa, sfab, 0x7F)) != DSK_STATUS_OK) return st;
    if ((st = tbuf_need(ctx, &sc->gB, bb, mx ? 0x22 : 0x38)) != DSK_STATUS_OK) return st;
    if ((st = tbuf_need(ctx, &sc->gsfb, sfbb, 0x7F)) != DSK_STATUS_OK) return st;
    if ((st = tbuf_need(ctx, &sc->gD, db, -1)) != DSK_STATUS_OK) return st;
    if (moe) {
      dsk_moe_gemm_desc *d = &a->mg;
      if ((st = tbuf_need(ctx, &sc->gmind, mib, -1)) != DSK_STATUS_OK) return st;
      if ((st = dsk_mem_upload(ctx, sc->gmind.p, sc->host, (size_t)mib)) != DSK_STATUS_OK) return st;
      d->struct_size = sizeof *d;
      d->M_sum = rows;
      d->N = N;
      d->K = K;
      d->E_local = G; /* the touched experts (moe_layout); the key keeps E */
      d->A_used = s->A;
      d->expected_m = s->T * s->topk;
      d->max_expert_rows = s->topk <= s->E ? s->T : 0; /* moe_layout: distinct experts per token then */
      d->A = (const uint8_t *)sc->gA.p;
      d->A_stride = K;
      d->sfa.words = (const int32_t *)sc->gsfa.p;
      d->sfa.groups = 1;
      d->sfa.mn = rows;
      d->sfa.sf_k = K / 128;
      d->m_indices = (const int32_t *)sc->gmind.p;
      d->b_fmt = (dsk_moe_wfmt)s->wfmt;
      d->B = sc->gB.p;
      d->sfb.words = (const int32_t *)sc->gsfb.p;
      d->sfb.groups = G;
      d->sfb.mn = N;
      d->sfb.sf_k = sfkb;
      d->D = (dsk_bf16 *)sc->gD.p;
      d->D_stride = N;
    } else {
      dsk_dense_gemm_desc *d = &a->dg;
      d->struct_size = sizeof *d;
      d->M = rows;
      d->N = N;
      d->K = K;
      d->A = (const uint8_t *)sc->gA.p;
      d->A_stride = K;
      d->sfa.words = (const int32_t *)sc->gsfa.p;
      d->sfa.groups = 1;
      d->sfa.mn = rows;
      d->sfa.sf_k = K / 128;
      d->B = (const uint8_t *)sc->gB.p;
      d->sfb.words = (const int32_t *)sc->gsfb.p;
      d->sfb.groups = 1;
      d->sfb.mn = N;
      d->sfb.sf_k = K / 128;
      d->D = (dsk_bf16 *)sc->gD.p;
      d->D_stride = N;
    }
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
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  tbuf *wb = &sc->gws;
  if (a->op == DSK_OP_SPARSE_MLA_DECODE) {
    a->mla.tactic = *tac;
    a->mla.workspace = NULL;
    a->mla.workspace_bytes = 0;
    if ((st = dsk_sparse_mla_decode_plan(ctx, &a->mla, &pi)) != DSK_STATUS_OK) return st;
    ws = pi.workspace_bytes;
    wb = &sc->ws;
  } else if (a->op == DSK_OP_MHC_PRENORM) {
    a->mhc.fixed_splits = tac->v[0];
    ws = (int64_t)tac->v[0] * a->mhc.T * 25 * 4;
    wb = &sc->partials;
  } else if (a->op == DSK_OP_MOE_GEMM) {
    a->mg.tactic = *tac; /* forced: the plan checks it and never consults the tuner */
    a->mg.workspace = NULL;
    a->mg.workspace_bytes = 0;
    if ((st = dsk_moe_gemm_plan(ctx, &a->mg, &pi)) != DSK_STATUS_OK) return st;
    ws = pi.workspace_bytes;
  } else {
    a->dg.tactic = *tac;
    a->dg.workspace = NULL;
    a->dg.workspace_bytes = 0;
    if ((st = dsk_dense_fp8_gemm_plan(ctx, &a->dg, &pi)) != DSK_STATUS_OK) return st;
    ws = pi.workspace_bytes;
  }
  if (ws < 0) ws = 0;
  if (fixed + ws > budget_bytes(t)) return DSK_STATUS_OK;
  if ((st = tbuf_need(ctx, wb, ws, -1)) != DSK_STATUS_OK) return st;
  void *wp = ws > 0 ? wb->p : NULL;
  const int64_t wn = ws > 0 ? wb->bytes : 0;
  switch (a->op) {
    case DSK_OP_SPARSE_MLA_DECODE:
      a->mla.workspace = wp;
      a->mla.workspace_bytes = wn;
      break;
    case DSK_OP_MHC_PRENORM:
      a->mhc.partials = (float *)wb->p;
      a->mhc.partials_bytes = wb->bytes;
      break;
    case DSK_OP_MOE_GEMM:
      a->mg.workspace = wp;
      a->mg.workspace_bytes = wn;
      break;
    default:
      a->dg.workspace = wp;
      a->dg.workspace_bytes = wn;
      break;
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
  char key[512] = ""; /* for the debug log of every timed tactic */
  if (ctx->log_level >= DSK_LOG_DEBUG && dsk__tune_key(s, 1, key, sizeof key) < 0) key[0] = 0;
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
    if (ctx->log_level >= DSK_LOG_DEBUG)
      dsk__log(ctx, DSK_LOG_DEBUG, "autotune: %s tactic [%d,%d,%d,%d,%d,%d]: median %.2f us", key, (int)tac[i].v[0],
               (int)tac[i].v[1], (int)tac[i].v[2], (int)tac[i].v[3], (int)tac[i].v[4], (int)tac[i].v[5], br.median_us);
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
