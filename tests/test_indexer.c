/* test_indexer.c - the lightning indexer (spec/indices.md §9, issue 7):
 * dsk_indexer_logits, dsk_topk and the fused dsk_indexer_topk_slots.
 *
 * The device under test is DSK_TEST_DEVICE (default cpu; data moves with
 * dsk_mem_*, so the same test runs on a GPU); the CPU reference context is
 * used where a second opinion is needed.
 *   1. scores against an independent fp64 oracle written here (own e4m3
 *      decoder, own page/offset arithmetic, key scale applied before the dot
 *      product): random fp8 q, keys written with dsk_kv_write (IDXK132) into
 *      a cache first filled with 0xFF (NaN), contexts that are not
 *      multiples of the page size, padding rows, out-of-range req, block
 *      tables in random page order with holes and pages past the cache,
 *      ratio 1 and 4, truncation by ctx_width; bound 1e-5 * row max, -inf
 *      exactly, stride gaps untouched, counters exact;
 *   2. top-k of those scores under the test rule of §9 against the oracle,
 *      with and without the shortcut;
 *   3. top-k on synthetic rows against an exact oracle: constructed ties,
 *      all-equal rows, NaN / -inf / -0, K larger than the row, lens clamped
 *      (counted), poisoned columns past L_t, K up to 2048, rows up to 32K;
 *   4. the fused path against composing the pieces, for TOPK and C4A;
 *   5. T = 0, plans, and the bad-descriptor tables (every field rejected
 *      with DSK_STATUS_INVALID_ARG naming it, nothing written);
 *   6. the harness check (dsk_check_indexer, quick). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_indexer.h"

static tu_counts counts;
static dsk_ctx *dut; /* device under test */
static int dut_cuda;

/* ------------------------------------------------------------ helpers */

static void *dev_up(const void *host, size_t bytes) {
  void *d = NULL;
  if (dsk_mem_alloc(dut, &d, bytes ? bytes : 16) != DSK_STATUS_OK) return NULL;
  if (host && bytes) dsk_mem_upload(dut, d, host, bytes);
  return d;
}
static void dev_free(void *p) {
  if (p) dsk_mem_free(dut, p);
}
static void dev_down(void *host, const void *dev, size_t bytes) { dsk_mem_download(dut, host, dev, bytes); }

/* ------------------------------------------------------- fp64 oracle */

/* e4m3fn by the table of kv-cache.md §2, written out independently. */
static double e4m3_value(uint8_t b) {
  const int s = b >> 7, E = (b >> 3) & 15, M = b & 7;
  double v;
  if (E == 15 && M == 7) return NAN;
  if (E == 0) v = M * ldexp(1.0, -9);
  else v = (1.0 + M / 8.0) * ldexp(1.0, E - 7);
  return s ? -v : v;
}
static double le_f32(const uint8_t *p) {
  const uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Reference scores of row t over [0, W) (-inf outside the scored range and
 * for missing entries); returns the number of missing entries. */
static int64_t oracle_row(const dsk_idx_host *h, int64_t t, double *ref) {
  const int64_t W = h->W, P = h->c.pbs, H = h->c.H;
  for (int64_t s = 0; s < W; s++) ref[s] = -INFINITY;
  if (h->sm[t] < 0 || h->pos[t] < 0) return 0;
  const int64_t L = ((int64_t)h->pos[t] + 1) / h->c.ratio;
  const int64_t n = L < W ? L : W;
  const int64_t r = h->req[t];
  int64_t missing = 0;
  double k[128];
  double *qd = (double *)malloc((size_t)(H * 128) * sizeof(double));
  for (int64_t hh = 0; hh < H; hh++)
    for (int d = 0; d < 128; d++) qd[hh * 128 + d] = e4m3_value(h->q[t * h->q_stride_t + hh * h->q_stride_h + d]);
  for (int64_t s = 0; s < n; s++) {
    int64_t page = -1;
    if (r >= 0 && r < h->bt_rows && s / P < h->bt_max_blocks) page = h->bt[r * h->bt_stride + s / P];
    if (page < 0 || page >= h->num_pages) {
      missing++;
      continue;
    }
    const uint8_t *pg = h->cache + page * h->page_stride;
    const double ks = le_f32(pg + 128 * P + 4 * (s % P));
    for (int d = 0; d < 128; d++) k[d] = e4m3_value(pg[128 * (s % P) + d]) * ks;
    double score = 0.0;
    for (int64_t hh = 0; hh < H; hh++) {
      const double *q = qd + hh * 128;
      double dot = 0.0;
      for (int d = 0; d < 128; d++) dot += q[d] * k[d];
      score += (double)h->w[t * h->w_stride + hh] * (double)h->qs[t * h->qs_stride + hh] * (dot > 0.0 ? dot : 0.0);
    }
    ref[s] = score;
  }
  free(qd);
  return missing;
}

/* ---------------------------------------- 1, 2, 4: scenes vs the oracle */

static int run_topk_dut(const float *scores_dev, int64_t T, int64_t W, int64_t stride, const int32_t *lens,
                        int64_t K, int no_shortcut, int32_t *out) {
  void *dl = dev_up(lens, (size_t)T * 4), *dout = dev_up(NULL, (size_t)(T * K) * 4), *ws = NULL;
  dsk_topk_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = T;
  d.scores = scores_dev;
  d.scores_stride_t = stride;
  d.width = W;
  d.lens = (const int32_t *)dl;
  d.K = K;
  d.no_shortcut = no_shortcut;
  d.out = (int32_t *)dout;
  d.out_stride_t = K;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st = dsk_topk_plan(dut, &d, &pi);
  TU_CHECK_OK(&counts, st);
  TU_CHECK(&counts, pi.tactic.op == DSK_OP_TOPK && pi.backend[0], "topk plan: op %d backend '%s'", pi.tactic.op,
           pi.backend);
  if (pi.workspace_bytes > 0) ws = dev_up(NULL, (size_t)pi.workspace_bytes);
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  st = dsk_topk(dut, &d);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "topk: %s: %s", dsk_status_name(st), dsk_last_error());
  dev_down(out, dout, (size_t)(T * K) * 4);
  dev_free(dl);
  dev_free(dout);
  dev_free(ws);
  return st == DSK_STATUS_OK ? 0 : -1;
}

/* The fused path on the device under test against the composition of the
 * pieces (same device); also the test rule on its top-k output. */
static void fused_vs_composition(const dsk_idx_host *h, const dsk_idx_dev *dv, const float *logits_dev,
                                 const float *logits_host, int64_t ostride, double *ref_all, int no_shortcut,
                                 const char *name) {
  const int64_t T = h->c.T, K = h->c.K, W = h->W;
  const dsk_slot_list_kind kind = h->c.ratio == 4 ? DSK_SLOTS_C4A : DSK_SLOTS_TOPK;
  int32_t *lens = (int32_t *)malloc((size_t)T * 4);
  int32_t *tk_c = (int32_t *)malloc((size_t)(T * K) * 4), *tk_f = (int32_t *)malloc((size_t)(T * K) * 4);
  int32_t *sl_c = (int32_t *)malloc((size_t)(T * K) * 4), *sl_f = (int32_t *)malloc((size_t)(T * K) * 4);
  int32_t *ln_c = (int32_t *)malloc((size_t)T * 4), *ln_f = (int32_t *)malloc((size_t)T * 4);
  for (int64_t t = 0; t < T; t++) lens[t] = (int32_t)dsk_idx_scored_len(h, t);
  run_topk_dut(logits_dev, T, W, ostride, lens, K, no_shortcut, tk_c);

  dsk_indexer_logits_desc l = dsk_idx_logits_desc(h, dv, NULL, 0);
  void *dtk = dev_up(tk_c, (size_t)(T * K) * 4), *dsl = dev_up(NULL, (size_t)(T * K) * 4),
       *dln = dev_up(NULL, (size_t)T * 4);
  dsk_slot_list_desc sd;
  memset(&sd, 0, sizeof sd);
  sd.struct_size = sizeof sd;
  sd.kind = kind;
  sd.T = T;
  sd.req = l.req;
  sd.slot_mapping = l.slot_mapping;
  sd.block_table = l.block_table;
  sd.pbs = h->c.pbs;
  sd.idx = (const int32_t *)dtk;
  sd.idx_stride = K;
  sd.K = K;
  sd.out = (int32_t *)dsl;
  sd.out_stride = K;
  sd.lens = (int32_t *)dln;
  TU_CHECK_OK(&counts, dsk_slot_list_build(dut, &sd));
  dev_down(sl_c, dsl, (size_t)(T * K) * 4);
  dev_down(ln_c, dln, (size_t)T * 4);

  /* fused, with poisoned outputs and a poisoned workspace */
  dsk_indexer_topk_slots_desc f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.T = T;
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
  f.topk = (int32_t *)dtk;
  f.topk_stride_t = K;
  f.kind = kind;
  f.slots = (int32_t *)dsl;
  f.slots_stride_t = K;
  f.lens = (int32_t *)dln;
  dsk_mem_set(dut, dtk, 0x55, (size_t)(T * K) * 4);
  dsk_mem_set(dut, dsl, 0x55, (size_t)(T * K) * 4);
  dsk_mem_set(dut, dln, 0x55, (size_t)T * 4);
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&counts, dsk_indexer_topk_slots_plan(dut, &f, &pi));
  TU_CHECK(&counts, pi.workspace_bytes >= T * W * 4 && pi.tactic.op == DSK_OP_INDEXER_SLOTS,
           "fused plan: workspace %lld < %lld or op %d", (long long)pi.workspace_bytes, (long long)(T * W * 4),
           pi.tactic.op);
  void *ws = dev_up(NULL, (size_t)pi.workspace_bytes);
  dsk_mem_set(dut, ws, 0xFF, (size_t)pi.workspace_bytes);
  f.workspace = ws;
  f.workspace_bytes = pi.workspace_bytes;
  TU_CHECK_OK(&counts, dsk_indexer_topk_slots(dut, &f));
  dev_down(tk_f, dtk, (size_t)(T * K) * 4);
  dev_down(sl_f, dsl, (size_t)(T * K) * 4);
  dev_down(ln_f, dln, (size_t)T * 4);
  int64_t diff = 0;
  for (int64_t i = 0; i < T * K; i++) diff += (tk_f[i] != tk_c[i]) + (sl_f[i] != sl_c[i]);
  for (int64_t t = 0; t < T; t++) diff += ln_f[t] != ln_c[t];
  TU_CHECK(&counts, diff == 0, "%s: fused (%s%s) differs from the composition in %lld entries", name,
           kind == DSK_SLOTS_C4A ? "c4a" : "topk", no_shortcut ? ", no shortcut" : "", (long long)diff);
  int bad = 0;
  for (int64_t t = 0; t < T; t++)
    bad += dsk_idx_topk_rule(ref_all + t * W, logits_host + t * ostride, lens[t], tk_f + t * K, K, !no_shortcut, 1e-6,
                             stderr, name, t) != 0;
  TU_CHECK(&counts, bad == 0, "%s: fused top-k breaks the rule in %d rows", name, bad);
  free(lens);
  free(tk_c);
  free(tk_f);
  free(sl_c);
  free(sl_f);
  free(ln_c);
  free(ln_f);
  dev_free(dtk);
  dev_free(dsl);
  dev_free(dln);
  dev_free(ws);
}

static void scene_vs_oracle(const dsk_idx_case *ic, uint64_t seed) {
  dsk_idx_host h;
  dsk_idx_dev dv;
  memset(&dv, 0, sizeof dv);
  const double t0 = tu_now_us();
  if (dsk_idx_host_make(ic, seed, &h) != 0 || dsk_idx_dev_make(dut, &h, NULL, &dv) != 0) {
    TU_CHECK(&counts, 0, "%s: scene set-up failed: %s", ic->name, dsk_last_error());
    dsk_idx_dev_free(dut, &dv);
    dsk_idx_host_free(&h);
    return;
  }
  const int64_t T = ic->T, W = h.W, K = ic->K;
  const int64_t ostride = W + 3;
  char name[128];
  snprintf(name, sizeof name, "%s (T=%lld H=%lld ratio=%lld pbs=%lld W=%lld K=%lld)", ic->name, (long long)T,
           (long long)ic->H, (long long)ic->ratio, (long long)ic->pbs, (long long)W, (long long)K);

  /* scores */
  float *lg = (float *)malloc((size_t)(T * ostride) * 4);
  double *ref = (double *)malloc((size_t)(T * W) * sizeof(double));
  int32_t *lens = (int32_t *)malloc((size_t)T * 4), *tk = (int32_t *)malloc((size_t)(T * K) * 4);
  void *dout = dev_up(NULL, (size_t)(T * ostride) * 4);
  int64_t cnt[2] = {1000, 2000};
  void *dcnt = dev_up(cnt, sizeof cnt);
  dsk_mem_set(dut, dout, 0x55, (size_t)(T * ostride) * 4);
  dsk_indexer_logits_desc l = dsk_idx_logits_desc(&h, &dv, (float *)dout, ostride);
  l.counters = (int64_t *)dcnt;
  dsk_status st = dsk_indexer_logits(dut, &l);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "%s: indexer_logits: %s: %s", name, dsk_status_name(st), dsk_last_error());
  dev_down(lg, dout, (size_t)(T * ostride) * 4);
  dev_down(cnt, dcnt, sizeof cnt);

  int64_t missing = 0, truncated = 0;
  int bad_rows = 0, bad_inf = 0, bad_gap = 0;
  double worst = 0.0;
  for (int64_t t = 0; t < T; t++) {
    double *r = ref + t * W;
    missing += oracle_row(&h, t, r);
    const int64_t L = dsk_idx_causal_len(&h, t);
    truncated += L > W;
    const float *g = lg + t * ostride;
    double maxref = 0.0, maxerr = 0.0;
    int nan = 0;
    for (int64_t s = 0; s < W; s++)
      if (isfinite(r[s]) && fabs(r[s]) > maxref) maxref = fabs(r[s]);
    for (int64_t s = 0; s < W; s++) {
      if (isinf(r[s])) {
        bad_inf += !(isinf(g[s]) && g[s] < 0);
        continue;
      }
      const double e = fabs((double)g[s] - r[s]);
      if (e != e) nan++;
      else if (e > maxerr) maxerr = e;
    }
    for (int64_t s = W; s < ostride; s++) {
      uint32_t u;
      memcpy(&u, &g[s], 4);
      bad_gap += u != 0x55555555u;
    }
    if (nan || !(maxerr <= 1e-5 * maxref)) {
      if (bad_rows++ < 3)
        fprintf(stderr, "  %s: row %lld max error %.3g, bound 1e-5 * %.6g, %d NaN\n", name, (long long)t, maxerr,
                maxref, nan);
    }
    if (maxref > 0 && maxerr / maxref > worst) worst = maxerr / maxref;
  }
  TU_CHECK(&counts, bad_rows == 0, "%s: %d rows outside the 1e-5 bound", name, bad_rows);
  TU_CHECK(&counts, bad_inf == 0, "%s: %d entries should be exactly -inf", name, bad_inf);
  TU_CHECK(&counts, bad_gap == 0, "%s: %d stride-gap entries written", name, bad_gap);
  TU_CHECK(&counts, cnt[0] - 1000 == missing && cnt[1] - 2000 == truncated,
           "%s: counters %lld %lld, expected %lld %lld", name, (long long)(cnt[0] - 1000), (long long)(cnt[1] - 2000),
           (long long)missing, (long long)truncated);
  if (!dut_cuda) /* the CPU reference rounds an exact-ish fp64 value once */
    TU_CHECK(&counts, worst <= 1e-7, "%s: cpu relative error %.3g", name, worst);

  /* top-k of those scores, both orders of short rows */
  for (int ns = 0; ns < 2; ns++) {
    for (int64_t t = 0; t < T; t++) lens[t] = (int32_t)dsk_idx_scored_len(&h, t);
    if (run_topk_dut((const float *)dout, T, W, ostride, lens, K, ns, tk) == 0) {
      int bad = 0;
      for (int64_t t = 0; t < T; t++)
        bad += dsk_idx_topk_rule(ref + t * W, lg + t * ostride, lens[t], tk + t * K, K, !ns, 1e-6, stderr, name, t) !=
               0;
      TU_CHECK(&counts, bad == 0, "%s: top-k%s breaks the rule of §9 in %d rows", name, ns ? " (no shortcut)" : "",
               bad);
    }
  }

  /* fused path */
  fused_vs_composition(&h, &dv, (const float *)dout, lg, ostride, ref, (int)(seed & 1), name);
  printf("  %-78s %.0f ms\n", name, (tu_now_us() - t0) / 1000.0);

  free(lg);
  free(ref);
  free(lens);
  free(tk);
  dev_free(dout);
  dev_free(dcnt);
  dsk_idx_dev_free(dut, &dv);
  dsk_idx_host_free(&h);
}

static void test_scenes(void) {
  static const dsk_idx_case cases[] = {
      /* name, T, H, ratio, pbs, R, max_len, W, K, holes, oob, bad_req, pad, truncate, one_request */
      {"tiny", 4, 1, 1, 64, 2, 100, 0, 16, 0, 0, 0, 0, 0, 0},
      {"v3.2 decode 8K", 6, 64, 1, 64, 3, 8000, 0, 2048, 2, 1, 10, 15, 0, 0},
      {"dsv4 c4a 32K entries", 3, 8, 4, 64, 2, 32768, 0, 512, 1, 1, 0, 20, 0, 0},
      {"glm 4K", 5, 32, 1, 64, 3, 4000, 0, 2048, 0, 0, 0, 20, 0, 0},
      {"odd pbs 12, 5 heads, truncated", 8, 5, 1, 12, 3, 1500, 0, 300, 10, 5, 15, 15, 1, 0},
      {"pbs 1, ratio 4", 5, 3, 4, 1, 2, 300, 0, 40, 5, 5, 10, 10, 0, 0},
      {"prefill chunk", 16, 8, 1, 16, 1, 5000, 0, 1000, 2, 2, 0, 10, 0, 1},
      {"pbs 48 (16-entry tiles, not a power of two)", 6, 16, 1, 48, 3, 3000, 0, 512, 3, 2, 5, 10, 1, 0},
      {"heads 128, K 1", 3, 128, 1, 64, 2, 700, 0, 1, 0, 0, 0, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) scene_vs_oracle(&cases[i], 1000 + i);
}

/* --------------------------------------------- 3: synthetic top-k rows */

static const float *g_row;
static int cmp_oracle(const void *x, const void *y) {
  const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  const int c = dsk_idx_score_cmp(g_row[a], g_row[b]);
  if (c) return -c;
  return (a > b) - (a < b);
}

/* Exact oracle: the first min(L, K) columns by (score desc, column asc). */
static void topk_oracle(const float *row, int64_t L, int64_t K, int shortcut, int32_t *out, int32_t *scratch) {
  const int64_t n = L < K ? L : K;
  for (int64_t i = 0; i < L; i++) scratch[i] = (int32_t)i;
  if (!(shortcut && L <= K)) {
    g_row = row;
    qsort(scratch, (size_t)L, sizeof *scratch, cmp_oracle);
  }
  for (int64_t i = 0; i < K; i++) out[i] = i < n ? scratch[i] : -1;
}

static void topk_case(const char *what, int64_t T, int64_t width, int64_t K, int pattern, uint64_t seed) {
  tu_rng g = tu_rng_make(seed);
  const int64_t stride = width + tu_int(&g, 0, 4);
  float *sc = (float *)malloc((size_t)(T * stride) * 4);
  int32_t *lens = (int32_t *)malloc((size_t)T * 4), *out = (int32_t *)malloc((size_t)(T * K + 8) * 4);
  int32_t *exp = (int32_t *)malloc((size_t)(T * K) * 4), *scr = (int32_t *)malloc((size_t)width * 4);
  int64_t clamped = 0;
  for (int64_t t = 0; t < T; t++) {
    const int64_t u = tu_int(&g, 0, 9);
    int64_t L = t == 0 ? width : u < 2 ? tu_int(&g, 0, K < width ? K : width) : tu_int(&g, 0, width);
    if (u == 9 && t > 0) {
      L = tu_int(&g, 0, 1) ? -tu_int(&g, 1, 5) : width + tu_int(&g, 1, 5); /* clamped, counted */
      clamped++;
    }
    lens[t] = (int32_t)L;
    const int64_t Lc = L < 0 ? 0 : L > width ? width : L;
    for (int64_t s = 0; s < stride; s++) {
      float v;
      switch (pattern) {
        case 0: v = (float)tu_normal(&g); break;
        case 1: v = (float)tu_int(&g, 0, 5); break; /* ties everywhere */
        case 2: v = 0.5f; break;                      /* all equal */
        case 3: {                                     /* NaN, -inf, +inf, +-0, denormals */
          const int64_t k = tu_int(&g, 0, 9);
          v = k == 0 ? NAN : k == 1 ? -INFINITY : k == 2 ? INFINITY : k == 3 ? -0.0f : k == 4 ? 0.0f
              : k == 5 ? 1e-40f : k == 6 ? -1e-40f : (float)tu_normal(&g);
          break;
        }
        case 4: v = (float)(s % 7) - 3.0f; break;     /* periodic ties */
        default: v = (float)(width - s); break;       /* descending, no ties */
      }
      if (s >= Lc) v = s < width ? INFINITY : NAN; /* never a candidate: poison */
      sc[t * stride + s] = v;
    }
  }
  void *ds = dev_up(sc, (size_t)(T * stride) * 4), *dl = dev_up(lens, (size_t)T * 4);
  void *dout = dev_up(NULL, (size_t)(T * K + 8) * 4), *dc = dev_up(NULL, 8);
  for (int ns = 0; ns < 2; ns++) {
    int64_t cnt = 77;
    dsk_mem_upload(dut, dc, &cnt, 8);
    dsk_mem_set(dut, dout, 0x55, (size_t)(T * K + 8) * 4);
    dsk_topk_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.T = T;
    d.scores = (const float *)ds;
    d.scores_stride_t = stride;
    d.width = width;
    d.lens = (const int32_t *)dl;
    d.K = K;
    d.no_shortcut = ns;
    d.out = (int32_t *)dout;
    d.out_stride_t = K;
    d.counters = (int64_t *)dc;
    /* the backend may need a workspace (CUDA: multi-CTA rows); plan it */
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    TU_CHECK_OK(&counts, dsk_topk_plan(dut, &d, &pi));
    void *dws = pi.workspace_bytes > 0 ? dev_up(NULL, (size_t)pi.workspace_bytes) : NULL;
    d.workspace = dws;
    d.workspace_bytes = pi.workspace_bytes;
    dsk_status st = dsk_topk(dut, &d);
    TU_CHECK(&counts, st == DSK_STATUS_OK, "%s: %s: %s", what, dsk_status_name(st), dsk_last_error());
    dev_down(out, dout, (size_t)(T * K + 8) * 4);
    dev_down(&cnt, dc, 8);
    dev_free(dws);
    int64_t diff = 0, first = -1;
    for (int64_t t = 0; t < T; t++) {
      const int64_t Lc = lens[t] < 0 ? 0 : lens[t] > width ? width : lens[t];
      topk_oracle(sc + t * stride, Lc, K, !ns, exp + t * K, scr);
    }
    for (int64_t i = 0; i < T * K; i++)
      if (out[i] != exp[i]) {
        if (first < 0) first = i;
        diff++;
      }
    for (int64_t i = T * K; i < T * K + 8; i++) diff += out[i] != 0x55555555;
    TU_CHECK(&counts, diff == 0, "%s%s: %lld entries differ (first at row %lld col %lld: %d, expected %d)", what,
             ns ? " no-shortcut" : "", (long long)diff, (long long)(first / K), (long long)(first % K),
             first >= 0 ? out[first] : 0, first >= 0 ? exp[first] : 0);
    TU_CHECK(&counts, cnt == 77 + clamped, "%s: clamp counter %lld, expected %lld", what, (long long)(cnt - 77),
             (long long)clamped);
  }
  dev_free(ds);
  dev_free(dl);
  dev_free(dout);
  dev_free(dc);
  free(sc);
  free(lens);
  free(out);
  free(exp);
  free(scr);
}

static void test_topk_synthetic(void) {
  static const struct {
    int64_t T, width, K;
    int pattern;
  } cs[] = {
      {3, 1, 1, 0},      {5, 7, 3, 0},        {9, 100, 5, 1},     {7, 100, 200, 0},   {6, 3000, 64, 0},
      {6, 3000, 64, 1},  {4, 3000, 512, 2},   {6, 3000, 100, 3},  {5, 5000, 2048, 4}, {4, 32768, 2048, 0},
      {4, 32768, 2048, 1}, {3, 32768, 1024, 2}, {4, 32768, 512, 3}, {3, 20000, 2047, 5}, {8, 2049, 2048, 1},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "topk T=%lld width=%lld K=%lld pattern %d", (long long)cs[i].T,
             (long long)cs[i].width, (long long)cs[i].K, cs[i].pattern);
    topk_case(what, cs[i].T, cs[i].width, cs[i].K, cs[i].pattern, 77 + i);
  }

  /* hand-checked: ties lowest column first, NaN last, -0 == +0, shortcut order */
  const float row[8] = {1.0f, 3.0f, NAN, 3.0f, -0.0f, 0.0f, -INFINITY, 3.0f};
  const int32_t lens[3] = {8, 4, 3};
  void *ds = dev_up(NULL, 3 * 8 * 4), *dl = dev_up(lens, sizeof lens), *dout = dev_up(NULL, 3 * 5 * 4);
  for (int t = 0; t < 3; t++) dsk_mem_upload(dut, (char *)ds + t * 32, row, 32);
  dsk_topk_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = 3;
  d.scores = (const float *)ds;
  d.scores_stride_t = 8;
  d.width = 8;
  d.lens = (const int32_t *)dl;
  d.K = 5;
  d.out = (int32_t *)dout;
  d.out_stride_t = 5;
  int32_t out[15];
  const int32_t exp_sc[15] = {1, 3, 7, 0, 4, /* */ 0, 1, 2, 3, -1, /* */ 0, 1, 2, -1, -1};
  const int32_t exp_ns[15] = {1, 3, 7, 0, 4, /* */ 1, 3, 0, 2, -1, /* */ 1, 0, 2, -1, -1};
  for (int ns = 0; ns < 2; ns++) {
    d.no_shortcut = ns;
    TU_CHECK_OK(&counts, dsk_topk(dut, &d));
    dev_down(out, dout, sizeof out);
    const int32_t *e = ns ? exp_ns : exp_sc;
    int bad = 0;
    for (int i = 0; i < 15; i++) bad += out[i] != e[i];
    TU_CHECK(&counts, bad == 0,
             "hand topk%s: got %d %d %d %d %d | %d %d %d %d %d | %d %d %d %d %d", ns ? " no-shortcut" : "", out[0],
             out[1], out[2], out[3], out[4], out[5], out[6], out[7], out[8], out[9], out[10], out[11], out[12],
             out[13], out[14]);
  }
  /* lens NULL: every row has the full width (8 > K = 5) */
  d.lens = NULL;
  d.no_shortcut = 0;
  TU_CHECK_OK(&counts, dsk_topk(dut, &d));
  dev_down(out, dout, sizeof out);
  TU_CHECK(&counts, out[5] == 1 && out[6] == 3 && out[7] == 7 && out[8] == 0 && out[9] == 4,
           "topk lens NULL: row 1 = %d %d %d %d %d", out[5], out[6], out[7], out[8], out[9]);
  dev_free(ds);
  dev_free(dl);
  dev_free(dout);
}

/* ------------------------------------------------ 5: zero, bad inputs */

#define EXPECT_BAD(call, needle, what)                                                                       \
  do {                                                                                                       \
    dsk_clear_error();                                                                                       \
    dsk_status st_ = (call);                                                                                 \
    TU_CHECK(&counts, st_ == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), needle),                     \
             "%s: %s (%s), expected INVALID_ARG naming '%s'", what, dsk_status_name(st_), dsk_last_error(),  \
             needle);                                                                                        \
  } while (0)

typedef struct bad_logits {
  const char *what, *needle;
  void (*mut)(dsk_indexer_logits_desc *d);
} bad_logits;

static void m_size(dsk_indexer_logits_desc *d) { d->struct_size = sizeof *d - 1; }
static void m_T(dsk_indexer_logits_desc *d) { d->T = -1; }
static void m_T_big(dsk_indexer_logits_desc *d) { d->T = (int64_t)1 << 31; }
static void m_h0(dsk_indexer_logits_desc *d) { d->n_heads = 0; }
static void m_h129(dsk_indexer_logits_desc *d) { d->n_heads = 129; }
static void m_q(dsk_indexer_logits_desc *d) { d->q = NULL; }
static void m_qsh(dsk_indexer_logits_desc *d) { d->q_stride_h = 127; }
static void m_qst(dsk_indexer_logits_desc *d) { d->q_stride_t = (d->n_heads - 1) * d->q_stride_h + 127; }
static void m_qs(dsk_indexer_logits_desc *d) { d->q_scale = NULL; }
static void m_qss(dsk_indexer_logits_desc *d) { d->q_scale_stride_t = d->n_heads - 1; }
static void m_qsa(dsk_indexer_logits_desc *d) { d->q_scale = (const float *)((const char *)d->q_scale + 2); }
static void m_w(dsk_indexer_logits_desc *d) { d->weights = NULL; }
static void m_ws(dsk_indexer_logits_desc *d) { d->weights_stride_t = 0; }
static void m_req(dsk_indexer_logits_desc *d) { d->req = NULL; }
static void m_reqa(dsk_indexer_logits_desc *d) { d->req = (const int32_t *)((const char *)d->req + 1); }
static void m_pos(dsk_indexer_logits_desc *d) { d->pos = NULL; }
static void m_sm(dsk_indexer_logits_desc *d) { d->slot_mapping = NULL; }
static void m_bt(dsk_indexer_logits_desc *d) { d->block_table.table = NULL; }
static void m_btr(dsk_indexer_logits_desc *d) { d->block_table.rows = 0; }
static void m_btm(dsk_indexer_logits_desc *d) { d->block_table.max_blocks = 0; }
static void m_bts(dsk_indexer_logits_desc *d) { d->block_table.stride = d->block_table.max_blocks - 1; }
static void m_ratio2(dsk_indexer_logits_desc *d) { d->ratio = 2; }
static void m_ratio0(dsk_indexer_logits_desc *d) { d->ratio = 0; }
static void m_cbase(dsk_indexer_logits_desc *d) { d->cache.base = NULL; }
static void m_cpbs(dsk_indexer_logits_desc *d) { d->cache.pbs = 0; }
static void m_cps(dsk_indexer_logits_desc *d) { d->cache.page_stride = d->cache.pbs * 132 - 16; }
static void m_cnp(dsk_indexer_logits_desc *d) { d->cache.num_pages = 0; }
static void m_out(dsk_indexer_logits_desc *d) { d->out = NULL; }
static void m_outs(dsk_indexer_logits_desc *d) { d->out_stride_t = d->ctx_width - 1; }
static void m_outa(dsk_indexer_logits_desc *d) { d->out = (float *)((char *)d->out + 1); }
static void m_cw0(dsk_indexer_logits_desc *d) { d->ctx_width = 0; }
static void m_cwbig(dsk_indexer_logits_desc *d) {
  d->ctx_width = (int64_t)INT32_MAX + 1;
  d->out_stride_t = d->ctx_width;
}
static void m_cnt(dsk_indexer_logits_desc *d) { d->counters = (int64_t *)((char *)d->counters + 4); }
static void m_overlap(dsk_indexer_logits_desc *d) { d->out = (float *)(void *)d->weights; }
static void m_overlap_cache(dsk_indexer_logits_desc *d) { d->out = (float *)d->cache.base; }

static void test_bad_logits(void) {
  dsk_idx_case ic = {"bad", 3, 4, 1, 16, 2, 200, 0, 8, 0, 0, 0, 0, 0, 0};
  dsk_idx_host h;
  dsk_idx_dev dv;
  memset(&dv, 0, sizeof dv);
  if (dsk_idx_host_make(&ic, 5, &h) != 0 || dsk_idx_dev_make(dut, &h, NULL, &dv) != 0) {
    TU_CHECK(&counts, 0, "bad-input scene set-up failed");
    return;
  }
  const size_t obytes = (size_t)(3 * h.W) * 4;
  void *dout = dev_up(NULL, obytes), *dcnt = dev_up(NULL, 32);
  dsk_indexer_logits_desc base = dsk_idx_logits_desc(&h, &dv, (float *)dout, h.W);
  base.counters = (int64_t *)dcnt;
  TU_CHECK_OK(&counts, dsk_indexer_logits(dut, &base));

  static const bad_logits table[] = {
      {"struct_size", "struct_size", m_size},
      {"T < 0", "T -1", m_T},
      {"T > 2^31-1", "T 2147483648", m_T_big},
      {"n_heads 0", "n_heads 0", m_h0},
      {"n_heads 129", "n_heads 129", m_h129},
      {"q NULL", "q is NULL", m_q},
      {"q_stride_h", "q_stride_h 127", m_qsh},
      {"q_stride_t", "q_stride_t", m_qst},
      {"q_scale NULL", "q_scale is NULL", m_qs},
      {"q_scale_stride_t", "q_scale_stride_t", m_qss},
      {"q_scale misaligned", "q_scale", m_qsa},
      {"weights NULL", "weights is NULL", m_w},
      {"weights_stride_t", "weights_stride_t 0", m_ws},
      {"req NULL", "req is NULL", m_req},
      {"req misaligned", "req", m_reqa},
      {"pos NULL", "pos is NULL", m_pos},
      {"slot_mapping NULL", "slot_mapping is NULL", m_sm},
      {"block table NULL", "block_table.table is NULL", m_bt},
      {"block table rows", "block_table.rows 0", m_btr},
      {"block table max_blocks", "block_table.max_blocks 0", m_btm},
      {"block table stride", "block_table.stride", m_bts},
      {"ratio 2", "ratio 2", m_ratio2},
      {"ratio 0", "ratio 0", m_ratio0},
      {"cache base", "indexer_logits: key cache base is NULL", m_cbase},
      {"cache pbs", "indexer_logits: key cache pbs 0", m_cpbs},
      {"cache page_stride", "indexer_logits: key cache page_stride", m_cps},
      {"cache num_pages", "indexer_logits: key cache num_pages 0", m_cnp},
      {"out NULL", "out is NULL", m_out},
      {"out_stride_t", "out_stride_t", m_outs},
      {"out misaligned", "out", m_outa},
      {"ctx_width 0", "ctx_width 0", m_cw0},
      {"ctx_width big", "ctx_width 2147483648", m_cwbig},
      {"counters misaligned", "counters", m_cnt},
      {"out overlaps weights", "out overlaps", m_overlap},
      {"out overlaps the cache", "out overlaps key cache", m_overlap_cache},
  };
  float *poison = (float *)malloc(obytes), *after = (float *)malloc(obytes);
  memset(poison, 0x55, obytes);
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    dsk_mem_upload(dut, dout, poison, obytes);
    dsk_indexer_logits_desc d = base;
    table[i].mut(&d);
    char what[96];
    snprintf(what, sizeof what, "indexer_logits bad %s", table[i].what);
    EXPECT_BAD(dsk_indexer_logits(dut, &d), table[i].needle, what);
    TU_CHECK(&counts, strstr(dsk_last_error(), "indexer_logits") != NULL, "%s: message '%s' does not name the op",
             what, dsk_last_error());
    dev_down(after, dout, obytes);
    TU_CHECK(&counts, memcmp(after, poison, obytes) == 0, "%s: out was written", what);
  }
  if (dut_cuda) {
    dsk_indexer_logits_desc d = base;
    d.q = d.q + 4;
    EXPECT_BAD(dsk_indexer_logits(dut, &d), "16-byte", "cuda: q misaligned");
    d = base;
    d.q_stride_h = 136;
    d.q_stride_t = 136 * d.n_heads;
    EXPECT_BAD(dsk_indexer_logits(dut, &d), "multiples of 16", "cuda: q strides");
    d = base;
    d.cache.page_stride += 4;
    EXPECT_BAD(dsk_indexer_logits(dut, &d), "page_stride", "cuda: page_stride alignment");
  }
  /* NULL ctx / desc; T = 0 with an otherwise empty descriptor */
  EXPECT_BAD(dsk_indexer_logits(NULL, &base), "ctx is NULL", "indexer_logits NULL ctx");
  EXPECT_BAD(dsk_indexer_logits(dut, NULL), "desc is NULL", "indexer_logits NULL desc");
  dsk_indexer_logits_desc z;
  memset(&z, 0, sizeof z);
  z.struct_size = sizeof z;
  TU_CHECK_OK(&counts, dsk_indexer_logits(dut, &z));

  /* the fused path shares the scoring checks; its own fields */
  dsk_indexer_topk_slots_desc f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  TU_CHECK_OK(&counts, dsk_indexer_topk_slots(dut, &f)); /* T = 0 */
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&counts, dsk_indexer_topk_slots_plan(dut, &f, &pi));
  TU_CHECK(&counts, pi.workspace_bytes == 0, "fused plan T=0: workspace %lld", (long long)pi.workspace_bytes);
  f.T = base.T;
  f.n_heads = base.n_heads;
  f.q = base.q;
  f.q_stride_t = base.q_stride_t;
  f.q_stride_h = base.q_stride_h;
  f.q_scale = base.q_scale;
  f.q_scale_stride_t = base.q_scale_stride_t;
  f.weights = base.weights;
  f.weights_stride_t = base.weights_stride_t;
  f.req = base.req;
  f.pos = base.pos;
  f.slot_mapping = base.slot_mapping;
  f.block_table = base.block_table;
  f.ratio = base.ratio;
  f.cache = base.cache;
  f.ctx_width = base.ctx_width;
  f.K = 8;
  f.kind = DSK_SLOTS_TOPK;
  void *dsl = dev_up(NULL, (size_t)(3 * 8) * 4), *dtk = dev_up(NULL, (size_t)(3 * 8) * 4);
  f.slots = (int32_t *)dsl;
  f.slots_stride_t = 8;
  TU_CHECK_OK(&counts, dsk_indexer_topk_slots_plan(dut, &f, &pi));
  void *ws = dev_up(NULL, (size_t)pi.workspace_bytes);
  f.workspace = ws;
  f.workspace_bytes = pi.workspace_bytes;
  TU_CHECK_OK(&counts, dsk_indexer_topk_slots(dut, &f));
  {
    dsk_indexer_topk_slots_desc b = f;
    b.struct_size = sizeof b - 8;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "struct_size", "fused struct_size");
    b = f;
    b.K = 0;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "K 0", "fused K 0");
    b = f;
    b.K = 2049;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "K 2049", "fused K 2049");
    b = f;
    b.no_shortcut = 2;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "no_shortcut 2", "fused no_shortcut");
    b = f;
    b.kind = DSK_SLOTS_SWA;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "kind 2", "fused kind SWA");
    b = f;
    b.slot_block_table = f.block_table;
    b.slot_block_table.rows = 0;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "slot_block_table.rows 0", "fused slot table rows");
    b = f;
    b.slot_pbs = -1;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "slot_pbs -1", "fused slot_pbs");
    b = f;
    b.slots = NULL;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "slots is NULL", "fused slots NULL");
    b = f;
    b.slots_stride_t = 7;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "slots_stride_t 7", "fused slots stride");
    b = f;
    b.topk = (int32_t *)dtk;
    b.topk_stride_t = 7;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "topk_stride_t 7", "fused topk stride");
    b = f;
    b.lens = (int32_t *)((char *)dtk + 2);
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "lens", "fused lens misaligned");
    b = f;
    b.ratio = 3;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "ratio 3", "fused ratio");
    b = f;
    b.n_heads = 0;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "indexer_topk_slots: n_heads 0", "fused n_heads");
    b = f;
    b.cache.num_pages = 0;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "indexer_topk_slots: key cache num_pages 0", "fused cache");
    b = f;
    b.workspace_bytes = pi.workspace_bytes - 1;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "workspace_bytes", "fused workspace too small");
    b = f;
    b.workspace = NULL;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "workspace is NULL", "fused workspace NULL");
    b = f;
    b.slots = (int32_t *)ws;
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "overlaps", "fused slots in the workspace");
    b = f;
    b.counters = (int64_t *)((char *)dtk + 4);
    EXPECT_BAD(dsk_indexer_topk_slots(dut, &b), "counters", "fused counters misaligned");
    EXPECT_BAD(dsk_indexer_topk_slots_plan(dut, &f, NULL), "info is NULL", "fused plan info NULL");
    dsk_plan_info small = pi;
    small.struct_size = 8;
    EXPECT_BAD(dsk_indexer_topk_slots_plan(dut, &f, &small), "struct_size", "fused plan info struct_size");
  }
  dev_free(dsl);
  dev_free(dtk);
  dev_free(ws);
  free(poison);
  free(after);
  dev_free(dout);
  dev_free(dcnt);
  dsk_idx_dev_free(dut, &dv);
  dsk_idx_host_free(&h);
}

static void test_bad_topk(void) {
  float sc[4 * 10];
  for (int i = 0; i < 40; i++) sc[i] = (float)i;
  void *ds = dev_up(sc, sizeof sc), *dout = dev_up(NULL, 4 * 6 * 4), *dl = dev_up(NULL, 16), *dc = dev_up(NULL, 16);
  dsk_topk_desc base;
  memset(&base, 0, sizeof base);
  base.struct_size = sizeof base;
  base.T = 4;
  base.scores = (const float *)ds;
  base.scores_stride_t = 10;
  base.width = 10;
  base.K = 6;
  base.out = (int32_t *)dout;
  base.out_stride_t = 6;
  TU_CHECK_OK(&counts, dsk_topk(dut, &base));
  int32_t out[24];
  dev_down(out, dout, sizeof out);
  TU_CHECK(&counts, out[0] == 9 && out[5] == 4 && out[23] == 4, "topk base: %d %d %d", out[0], out[5], out[23]);

  dsk_topk_desc d;
#define BAD_TOPK(mutation, needle)                                            \
  do {                                                                        \
    d = base;                                                                 \
    mutation;                                                                 \
    EXPECT_BAD(dsk_topk(dut, &d), needle, "topk bad: " #mutation);            \
    TU_CHECK(&counts, strstr(dsk_last_error(), "topk") != NULL, "%s", "op"); \
  } while (0)
  BAD_TOPK(d.struct_size = 8, "struct_size");
  BAD_TOPK(d.T = -3, "T -3");
  BAD_TOPK(d.scores = NULL, "scores is NULL");
  BAD_TOPK(d.scores = (const float *)((const char *)ds + 1), "scores");
  BAD_TOPK(d.width = 0, "width 0");
  BAD_TOPK(d.width = (int64_t)INT32_MAX + 1, "width 2147483648");
  BAD_TOPK(d.scores_stride_t = 9, "scores_stride_t 9");
  BAD_TOPK(d.lens = (const int32_t *)((const char *)dl + 2), "lens");
  BAD_TOPK(d.K = 0, "K 0");
  BAD_TOPK(d.K = 2049, "K 2049");
  BAD_TOPK(d.no_shortcut = -1, "no_shortcut -1");
  BAD_TOPK(d.out = NULL, "out is NULL");
  BAD_TOPK(d.out = (int32_t *)((char *)dout + 2), "out");
  BAD_TOPK(d.out_stride_t = 5, "out_stride_t 5");
  BAD_TOPK(d.workspace_bytes = -1, "workspace_bytes -1");
  BAD_TOPK(d.counters = (int64_t *)((char *)dc + 4), "counters");
  BAD_TOPK(d.out = (int32_t *)ds, "out overlaps scores");
#undef BAD_TOPK
  EXPECT_BAD(dsk_topk(NULL, &base), "ctx is NULL", "topk NULL ctx");
  EXPECT_BAD(dsk_topk(dut, NULL), "desc is NULL", "topk NULL desc");
  EXPECT_BAD(dsk_topk_plan(dut, &base, NULL), "info is NULL", "topk plan NULL info");
  dsk_topk_desc z;
  memset(&z, 0, sizeof z);
  z.struct_size = sizeof z;
  TU_CHECK_OK(&counts, dsk_topk(dut, &z));
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&counts, dsk_topk_plan(dut, &z, &pi));
  TU_CHECK(&counts, pi.workspace_bytes == 0 && pi.tactic.op == DSK_OP_TOPK, "topk plan T=0: ws %lld op %d",
           (long long)pi.workspace_bytes, pi.tactic.op);
  dev_free(ds);
  dev_free(dout);
  dev_free(dl);
  dev_free(dc);
}

/* ------------------------------------------------------------------ main */

int main(void) {
  dut = tu_ctx(NULL);
  TU_CHECK(&counts, dut != NULL, "device under test: %s", dsk_last_error());
  if (!dut) return tu_finish("test_indexer", &counts);
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  dsk_ctx_get_info(dut, &info);
  dut_cuda = info.is_cuda;
  printf("test_indexer on %s (%s)\n", info.backend, info.device_name);
  TU_CHECK(&counts, DSK_OP_INDEXER_LOGITS == 30 && DSK_OP_TOPK == 31 && DSK_OP_INDEXER_SLOTS == 32, "op ids");

  double t0 = tu_now_us();
  test_scenes();
  printf("scenes vs fp64 oracle: %.0f ms\n", (tu_now_us() - t0) / 1000.0);
  t0 = tu_now_us();
  test_topk_synthetic();
  printf("synthetic top-k: %.0f ms\n", (tu_now_us() - t0) / 1000.0);
  t0 = tu_now_us();
  test_bad_logits();
  test_bad_topk();
  printf("bad inputs: %.0f ms\n", (tu_now_us() - t0) / 1000.0);

  t0 = tu_now_us();
  dsk_check_opts o;
  memset(&o, 0, sizeof o);
  o.quick = 1;
  o.seed = 7;
  const int rc = dsk_check_indexer(dut, &o, &counts);
  TU_CHECK(&counts, rc == 0, "dsk_check_indexer (quick) failed");
  printf("harness check: %.0f ms\n", (tu_now_us() - t0) / 1000.0);

  dsk_ctx_destroy(dut);
  return tu_finish("test_indexer", &counts);
}
