/* bench_mla.c - `dsk bench sparse-mla`: the decode kernel on the model
 * shapes of issue 3, with the device copy bandwidth measured in the same
 * run. KV pools are several times the L2 size, slots random and distinct
 * within a row, L2 flushed before every sample unless warm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ops/ops.h"

typedef struct mla_case {
  const char *model;
  dsk_kv_format fmt;
  int H;
  int w0, w1;   /* segment widths; w1 = 0 for one segment */
  int pbs1;     /* segment 1 page size (64 C4A, 2 C128A) */
  const char *layer;
  float sm_scale;
  int sink;
} mla_case;

static const mla_case k_cases[] = {
    {"dsv4-flash", DSK_KV_FORMAT_B584, 64, 128, 512, 64, "swa+c4a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 32, 128, 512, 64, "swa+c4a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 16, 128, 512, 64, "swa+c4a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 8, 128, 512, 64, "swa+c4a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 64, 128, 256, 2, "swa+c128a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 32, 128, 256, 2, "swa+c128a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 16, 128, 256, 2, "swa+c128a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 8, 128, 256, 2, "swa+c128a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 64, 128, 1024, 2, "swa+c128a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 32, 128, 1024, 2, "swa+c128a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 16, 128, 1024, 2, "swa+c128a", 0.0441942f, 1},
    {"dsv4-flash", DSK_KV_FORMAT_B584, 8, 128, 1024, 2, "swa+c128a", 0.0441942f, 1},
    {"dsv4-pro", DSK_KV_FORMAT_B584, 128, 128, 1024, 64, "swa+c4a", 0.0441942f, 1},
    {"dsv4-pro", DSK_KV_FORMAT_B584, 64, 128, 1024, 64, "swa+c4a", 0.0441942f, 1},
    {"glm-5.1", DSK_KV_FORMAT_A656, 64, 2048, 0, 0, "dsa", 0.0625f, 0},
    {"dsv3.2", DSK_KV_FORMAT_A656, 128, 2048, 0, 0, "dsa", 0.1352338f, 0},
};
static const int k_T[] = {1, 4, 16, 64, 128, 256};

typedef struct run_ctx {
  dsk_sparse_mla_desc d;
} run_ctx;

static dsk_status run_once(dsk_ctx *ctx, void *user) {
  return dsk_sparse_mla_decode(ctx, &((run_ctx *)user)->d);
}

/* The stream16_us column (T <= kStreamMaxT): the same case on kStreamSets
 * distinct input sets (q, slot lists, sink, out, lse, workspace; the pool
 * is shared and >= 4x L2, the slots new and random) called back to back in
 * one timed call, divided by kStreamSets (dsk_bench_opts.repeat): one layer
 * call's time inside a stream of calls, every set read cold once per
 * sample, without the fixed cost of the events around a lone call. */
enum { kStreamSets = 16, kStreamMaxT = 16 };

typedef struct stream_ctx {
  dsk_sparse_mla_desc d[kStreamSets];
  void *buf[kStreamSets][7]; /* q, slots 0, slots 1, sink, out, lse, workspace */
} stream_ctx;

static dsk_status run_stream(dsk_ctx *ctx, void *user) {
  stream_ctx *sc = (stream_ctx *)user;
  dsk_status st = DSK_STATUS_OK;
  for (int i = 0; i < kStreamSets && st == DSK_STATUS_OK; i++) st = dsk_sparse_mla_decode(ctx, &sc->d[i]);
  return st;
}

static void random_slots(tu_rng *rng, int32_t *s, int T, int w, int64_t cap);

static void *dev_put(dsk_ctx *ctx, const void *h, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st == DSK_STATUS_OK) *st = dsk_mem_alloc(ctx, &p, bytes ? bytes : 16);
  if (*st == DSK_STATUS_OK && h) *st = dsk_mem_upload(ctx, p, h, bytes);
  return p;
}

/* Times `base` (a planned descriptor of T rows) as a stream of kStreamSets
 * calls on fresh inputs; *us = the median per call. */
static dsk_status time_stream(dsk_ctx *ctx, tu_rng *rng, const dsk_sparse_mla_desc *base, int64_t cap0, int64_t cap1,
                              int reps, int warm, double *us) {
  stream_ctx *sc = calloc(1, sizeof *sc);
  if (!sc) return DSK_STATUS_OUT_OF_MEMORY;
  const int T = (int)base->T, H = (int)base->H, dqk = (int)dsk_kv_dim(base->format);
  const int w0 = (int)base->seg[0].width, w1 = base->nseg == 2 ? (int)base->seg[1].width : 0;
  int32_t *s0 = malloc(sizeof(int32_t) * T * w0), *s1 = malloc(sizeof(int32_t) * T * (w1 ? w1 : 1));
  dsk_bf16 *q = malloc(sizeof(dsk_bf16) * (size_t)T * H * dqk);
  float *sink = malloc(sizeof(float) * H);
  dsk_status st = s0 && s1 && q && sink ? DSK_STATUS_OK : DSK_STATUS_OUT_OF_MEMORY;
  for (int i = 0; i < kStreamSets && st == DSK_STATUS_OK; i++) {
    random_slots(rng, s0, T, w0, cap0);
    if (w1) random_slots(rng, s1, T, w1, cap1);
    tu_fill_bf16_normal(rng, q, (size_t)T * H * dqk, 1.0);
    for (int h = 0; h < H; h++) sink[h] = (float)tu_normal(rng);
    void **b = sc->buf[i];
    b[0] = dev_put(ctx, q, sizeof(dsk_bf16) * (size_t)T * H * dqk, &st);
    b[1] = dev_put(ctx, s0, sizeof(int32_t) * T * w0, &st);
    if (w1) b[2] = dev_put(ctx, s1, sizeof(int32_t) * T * w1, &st);
    b[3] = dev_put(ctx, sink, sizeof(float) * H, &st);
    b[4] = dev_put(ctx, NULL, sizeof(dsk_bf16) * (size_t)T * H * 512, &st);
    b[5] = dev_put(ctx, NULL, sizeof(float) * (size_t)T * H, &st);
    if (base->workspace_bytes > 0) b[6] = dev_put(ctx, NULL, (size_t)base->workspace_bytes, &st);
    dsk_sparse_mla_desc *d = &sc->d[i];
    *d = *base;
    d->q = b[0];
    d->seg[0].slots = b[1];
    d->seg[1].slots = w1 ? b[2] : NULL;
    d->sink = base->sink ? b[3] : NULL;
    d->out = b[4];
    d->lse = b[5];
    d->workspace = b[6];
  }
  if (st == DSK_STATUS_OK) {
    dsk_bench_opts bo = {sizeof bo, NULL, 3, reps > 0 ? reps : 20, !warm, kStreamSets};
    dsk_bench_result br;
    memset(&br, 0, sizeof br);
    br.struct_size = sizeof br;
    st = dsk_bench_run(ctx, run_stream, sc, &bo, &br);
    *us = br.median_us;
  }
  for (int i = 0; i < kStreamSets; i++)
    for (int k = 0; k < 7; k++) dsk_mem_free(ctx, sc->buf[i][k]);
  free(sc);
  free(s0);
  free(s1);
  free(q);
  free(sink);
  return st;
}

/* Fills a device pool of `entries` records: random rows written with the
 * writer through a rotating set of slot mappings. */
static int fill_pool(dsk_ctx *ctx, dsk_kv_format fmt, dsk_kv_cache *cache, tu_rng *rng) {
  const int64_t rows = 16384, ld = dsk_kv_latent_dim(fmt);
  const int64_t cap = cache->num_pages * cache->pbs;
  dsk_bf16 *lat = malloc(sizeof(dsk_bf16) * rows * ld), *rope = malloc(sizeof(dsk_bf16) * rows * 64);
  int32_t *map = malloc(sizeof(int32_t) * rows);
  void *dl = NULL, *dr = NULL, *dm = NULL;
  int rc = 1;
  if (!lat || !rope || !map) goto out;
  tu_fill_bf16_normal(rng, lat, (size_t)(rows * ld), 1.0);
  tu_fill_bf16_normal(rng, rope, (size_t)(rows * 64), 1.0);
  if (dsk_mem_alloc(ctx, &dl, sizeof(dsk_bf16) * rows * ld) || dsk_mem_alloc(ctx, &dr, sizeof(dsk_bf16) * rows * 64) ||
      dsk_mem_alloc(ctx, &dm, sizeof(int32_t) * rows))
    goto out;
  if (dsk_mem_upload(ctx, dl, lat, sizeof(dsk_bf16) * rows * ld) || dsk_mem_upload(ctx, dr, rope, sizeof(dsk_bf16) * rows * 64))
    goto out;
  for (int64_t s0 = 0; s0 < cap; s0 += rows) {
    int64_t n = cap - s0 < rows ? cap - s0 : rows;
    for (int64_t i = 0; i < n; i++) map[i] = (int32_t)(s0 + i);
    if (dsk_mem_upload(ctx, dm, map, sizeof(int32_t) * n)) goto out;
    dsk_kv_write_desc w;
    memset(&w, 0, sizeof w);
    w.struct_size = sizeof w;
    w.format = fmt;
    w.N = n;
    w.latent = dl;
    w.latent_stride = ld;
    w.rope = dr;
    w.rope_stride = 64;
    w.slot_mapping = dm;
    w.cache = *cache;
    if (dsk_kv_write(ctx, &w)) goto out;
  }
  rc = dsk_ctx_synchronize(ctx, NULL) != DSK_STATUS_OK;
out:
  if (rc) fprintf(stderr, "bench: pool fill failed: %s\n", dsk_last_error());
  free(lat);
  free(rope);
  free(map);
  dsk_mem_free(ctx, dl);
  dsk_mem_free(ctx, dr);
  dsk_mem_free(ctx, dm);
  return rc;
}

/* Random distinct slots per row in [0, cap). */
static void random_slots(tu_rng *rng, int32_t *s, int T, int w, int64_t cap) {
  for (int t = 0; t < T; t++) {
    int32_t *row = s + (int64_t)t * w;
    for (int k = 0; k < w; k++) {
      for (;;) {
        int32_t v = (int32_t)tu_int(rng, 0, cap - 1);
        int dup = 0;
        for (int j = 0; j < k && !dup; j++) dup = row[j] == v;
        if (!dup) {
          row[k] = v;
          break;
        }
      }
    }
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int64_t distinct_pairs(const int32_t *s0, const int32_t *s1, int T, int w0, int w1) {
  int64_t n = (int64_t)T * (w0 + w1), u = 0;
  int64_t *v = malloc(sizeof(int64_t) * (size_t)n);
  if (!v) return n;
  int64_t k = 0;
  for (int64_t i = 0; i < (int64_t)T * w0; i++) v[k++] = s0[i];
  for (int64_t i = 0; i < (int64_t)T * w1; i++) v[k++] = ((int64_t)1 << 40) + s1[i];
  qsort(v, (size_t)n, sizeof *v, cmp_i64);
  for (int64_t i = 0; i < n; i++) u += (i == 0 || v[i] != v[i - 1]);
  free(v);
  return u;
}

/* Whether the filters of o select (case, T). */
static int mla_selected(const dsk_bench_mla_opts *o, const mla_case *mc, int T) {
  if (o->model && !strstr(mc->model, o->model)) return 0;
  if ((o->max_T && T > o->max_T) || (o->only_T && T != o->only_T) || (o->only_H && mc->H != o->only_H)) return 0;
  return !(o->hpc == 32 && mc->H <= 16); /* the 32-head kernel needs H > 16 */
}

int dsk_bench_sparse_mla(dsk_ctx *ctx, const dsk_bench_mla_opts *o, FILE *out) {
  int any = 0;
  for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ci++)
    for (size_t ti = 0; ti < sizeof k_T / sizeof k_T[0]; ti++) any |= mla_selected(o, &k_cases[ci], k_T[ti]);
  if (!any)
    return dsk__bench_no_case("sparse-mla", "models dsv4-flash (H 64, 32, 16, 8), dsv4-pro (H 128, 64), glm-5.1 (H 64), "
                              "dsv3.2 (H 128); T 1, 4, 16, 64, 128, 256; --hpc 32 skips H <= 16");
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  dsk_ctx_get_info(ctx, &info);
  tu_rng rng = tu_rng_make(o->seed ? o->seed : 7);
  double copy_gbps = 0;
  if (dsk__bench_preamble(ctx, &info, "sparse-mla", 0, o->warm, out, &copy_gbps) != 0) return 1;
  const double mma_tflops = o->mma_tflops > 0 ? o->mma_tflops : 640.0;
  fprintf(out, "# precision %s\n", o->fast ? "FAST" : "ACCURATE");
  fprintf(out, "# stream16_us (T <= %d): the median per call of %d calls on distinct inputs back to back in one "
          "timed call (no fixed event cost of a lone call)\n",
          kStreamMaxT, kStreamSets);
  fprintf(out, "model,layer,fmt,T,H,w0,w1,pbs1,cpb,hpc,splits,median_us,tflops,gbps,pct_copy_bw,floor_us,x_floor,valid,"
          "stream16_us\n");

  /* One pool per format, >= 4x L2 (at least 256 MiB). */
  const int64_t l2 = info.l2_bytes > 0 ? info.l2_bytes : (64 << 20);
  int64_t pool_bytes = 4 * l2 < ((int64_t)256 << 20) ? ((int64_t)256 << 20) : 4 * l2;
  if (o->quick) pool_bytes = (int64_t)16 << 20;
  int rc = 0;
  for (int fi = 0; fi < 2 && !rc; fi++) {
    const dsk_kv_format fmt = fi == 0 ? DSK_KV_FORMAT_B584 : DSK_KV_FORMAT_A656;
    int fmt_any = 0; /* no pool for a format none of whose cases is selected */
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ci++)
      for (size_t ti = 0; ti < sizeof k_T / sizeof k_T[0]; ti++)
        fmt_any |= k_cases[ci].fmt == fmt && mla_selected(o, &k_cases[ci], k_T[ti]);
    if (!fmt_any) continue;
    const int64_t stride64 = (dsk_kv_canonical_page_stride(fmt, 64) + 15) / 16 * 16;
    dsk_kv_cache c64 = {NULL, 64, stride64, pool_bytes / stride64};
    void *pool = NULL;
    if (dsk_mem_alloc(ctx, &pool, (size_t)(c64.num_pages * stride64))) {
      fprintf(stderr, "bench: pool alloc: %s\n", dsk_last_error());
      return 1;
    }
    c64.base = pool;
    if (fill_pool(ctx, fmt, &c64, &rng)) {
      dsk_mem_free(ctx, pool);
      return 1;
    }
    /* The same bytes viewed as pages of 2 entries (C128A geometry). */
    const int64_t stride2 = (dsk_kv_canonical_page_stride(fmt, 2) + 15) / 16 * 16;
    dsk_kv_cache c2 = {pool, 2, stride2, (c64.num_pages * stride64) / stride2};
    if (fmt == DSK_KV_FORMAT_B584 && fill_pool(ctx, fmt, &c2, &rng)) rc = 1;

    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0] && !rc; ci++) {
      const mla_case *mc = &k_cases[ci];
      if (mc->fmt != fmt) continue;
      for (size_t ti = 0; ti < sizeof k_T / sizeof k_T[0] && !rc; ti++) {
        const int T = k_T[ti];
        if (!mla_selected(o, mc, T)) continue;
        const int H = mc->H, dqk = (int)dsk_kv_dim(fmt), nseg = mc->w1 ? 2 : 1;
        const dsk_kv_cache *cache1 = mc->pbs1 == 2 ? &c2 : &c64;
        int32_t *s0 = malloc(sizeof(int32_t) * T * mc->w0), *s1 = malloc(sizeof(int32_t) * T * (mc->w1 ? mc->w1 : 1));
        dsk_bf16 *q = malloc(sizeof(dsk_bf16) * (size_t)T * H * dqk);
        float *sink = malloc(sizeof(float) * H);
        random_slots(&rng, s0, T, mc->w0, c64.num_pages * 64);
        if (mc->w1) random_slots(&rng, s1, T, mc->w1, cache1->num_pages * cache1->pbs);
        tu_fill_bf16_normal(&rng, q, (size_t)T * H * dqk, 1.0);
        for (int h = 0; h < H; h++) sink[h] = (float)tu_normal(&rng);
        void *dq = NULL, *ds0 = NULL, *ds1 = NULL, *dsink = NULL, *dout = NULL, *dlse = NULL, *ws = NULL;
        run_ctx rcx;
        memset(&rcx, 0, sizeof rcx);
        dsk_sparse_mla_desc *d = &rcx.d;
        d->struct_size = sizeof *d;
        d->format = fmt;
        d->T = T;
        d->H = H;
        d->q_stride_h = dqk;
        d->q_stride_t = (int64_t)H * dqk;
        d->sm_scale = mc->sm_scale;
        d->nseg = nseg;
        d->seg[0].cache = c64;
        d->seg[0].slots_stride_t = mc->w0;
        d->seg[0].width = mc->w0;
        if (nseg == 2) {
          d->seg[1].cache = *cache1;
          d->seg[1].slots_stride_t = mc->w1;
          d->seg[1].width = mc->w1;
        }
        d->out_stride_h = 512;
        d->out_stride_t = (int64_t)H * 512;
        d->lse_stride_h = 1;
        d->lse_stride_t = H;
        d->precision = o->fast ? DSK_PRECISION_FAST : DSK_PRECISION_ACCURATE;
        dsk_status st = DSK_STATUS_OK;
        if (!st) st = dsk_mem_alloc(ctx, &dq, sizeof(dsk_bf16) * (size_t)T * H * dqk);
        if (!st) st = dsk_mem_alloc(ctx, &ds0, sizeof(int32_t) * T * mc->w0);
        if (!st && nseg == 2) st = dsk_mem_alloc(ctx, &ds1, sizeof(int32_t) * T * mc->w1);
        if (!st) st = dsk_mem_alloc(ctx, &dsink, sizeof(float) * H);
        if (!st) st = dsk_mem_alloc(ctx, &dout, sizeof(dsk_bf16) * (size_t)T * H * 512);
        if (!st) st = dsk_mem_alloc(ctx, &dlse, sizeof(float) * (size_t)T * H);
        if (!st) st = dsk_mem_upload(ctx, dq, q, sizeof(dsk_bf16) * (size_t)T * H * dqk);
        if (!st) st = dsk_mem_upload(ctx, ds0, s0, sizeof(int32_t) * T * mc->w0);
        if (!st && nseg == 2) st = dsk_mem_upload(ctx, ds1, s1, sizeof(int32_t) * T * mc->w1);
        if (!st) st = dsk_mem_upload(ctx, dsink, sink, sizeof(float) * H);
        d->q = dq;
        d->seg[0].slots = ds0;
        d->seg[1].slots = ds1;
        d->sink = mc->sink ? dsink : NULL;
        d->out = dout;
        d->lse = dlse;
        if (o->hpc) dsk__sparse_mla_heuristic_hpc(ctx, d, o->hpc, &d->tactic);
        dsk_plan_info pi;
        memset(&pi, 0, sizeof pi);
        pi.struct_size = sizeof pi;
        if (!st) st = dsk_sparse_mla_decode_plan(ctx, d, &pi);
        if (!st && pi.workspace_bytes > 0) st = dsk_mem_alloc(ctx, &ws, (size_t)pi.workspace_bytes);
        d->workspace = ws;
        d->workspace_bytes = pi.workspace_bytes;
        dsk_bench_opts bo = {sizeof bo, NULL, 3, o->reps > 0 ? o->reps : 20, !o->warm, 1};
        dsk_bench_result br;
        memset(&br, 0, sizeof br);
        br.struct_size = sizeof br;
        if (!st) st = dsk_bench_run(ctx, run_once, &rcx, &bo, &br);
        double stream_us = -1;
        if (!st && T <= kStreamMaxT)
          st = time_stream(ctx, &rng, d, c64.num_pages * 64, cache1->num_pages * cache1->pbs, o->reps, o->warm,
                           &stream_us);
        char stream_col[32] = "";
        if (stream_us >= 0) snprintf(stream_col, sizeof stream_col, "%.2f", stream_us);
        if (st) {
          fprintf(stderr, "bench: %s H=%d T=%d: %s: %s\n", mc->model, H, T, dsk_status_name(st), dsk_last_error());
          rc = 1;
        } else {
          const int64_t n_att = (int64_t)T * (mc->w0 + mc->w1);
          const int64_t U = distinct_pairs(s0, s1, T, mc->w0, mc->w1);
          const double flop = 2.0 * H * (double)n_att * (dqk + 512);
          const double bytes = 2.0 * T * H * dqk + (double)U * dsk_kv_entry_bytes(fmt) + 2.0 * T * H * 512 + 4.0 * T * H;
          const double us = br.median_us;
          const double floor_us = fmax(bytes / (copy_gbps * 1e3), flop / (mma_tflops * 1e6));
          const int chunks = (mc->w0 + 63) / 64 + (mc->w1 + 63) / 64;
          fprintf(out, "%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%d,%.2f,%.1f,%.0f,%.1f,%.2f,%.2f,%lld,%s\n", mc->model, mc->layer,
                  fmt == DSK_KV_FORMAT_A656 ? "A" : "B", T, H, mc->w0, mc->w1, nseg == 2 ? (int)cache1->pbs : 0,
                  pi.tactic.v[0], pi.tactic.v[1], (chunks + pi.tactic.v[0] - 1) / pi.tactic.v[0], us, flop / (us * 1e6),
                  bytes / (us * 1e3), 100.0 * bytes / (us * 1e3) / copy_gbps, floor_us, us / floor_us,
                  (long long)n_att, stream_col);
          fflush(out);
        }
        dsk_mem_free(ctx, dq);
        dsk_mem_free(ctx, ds0);
        dsk_mem_free(ctx, ds1);
        dsk_mem_free(ctx, dsink);
        dsk_mem_free(ctx, dout);
        dsk_mem_free(ctx, dlse);
        dsk_mem_free(ctx, ws);
        free(s0);
        free(s1);
        free(q);
        free(sink);
      }
    }
    dsk_mem_free(ctx, pool);
  }
  return rc;
}
