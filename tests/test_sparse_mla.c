/* test_sparse_mla.c - dsk_sparse_mla_decode: the harness check (quick) plus
 * targeted unit cases: hand-computed outputs, T = 0, the plan call, the
 * tactic heuristic and forced tactics. Runs on DSK_TEST_DEVICE (default cpu);
 * data moves with dsk_mem_*, so it also runs on a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static tu_counts counts;

static dsk_bf16 bf(float x) { /* RNE, finite inputs */
  uint32_t u;
  memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (dsk_bf16)(u >> 16);
}
static double unbf(dsk_bf16 b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void put_f32(uint8_t *p, float x) { memcpy(p, &x, 4); } /* little-endian hosts */
static void put_bf16(uint8_t *p, float x) {
  dsk_bf16 b = bf(x);
  p[0] = (uint8_t)b;
  p[1] = (uint8_t)(b >> 8);
}

static void *dev(dsk_ctx *ctx, const void *host, size_t bytes) {
  void *d = NULL;
  if (dsk_mem_alloc(ctx, &d, bytes) != DSK_STATUS_OK) return NULL;
  if (host) dsk_mem_upload(ctx, d, host, bytes);
  return d;
}

/* A descriptor skeleton: one segment, everything contiguous. */
static dsk_sparse_mla_desc desc_base(dsk_kv_format f, int64_t T, int64_t H, int64_t w0) {
  dsk_sparse_mla_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.format = f;
  d.T = T;
  d.H = H;
  int64_t dqk = f == DSK_KV_FORMAT_A656 ? 576 : 512;
  d.q_stride_h = dqk;
  d.q_stride_t = H * dqk;
  d.sm_scale = 0.0625f;
  d.nseg = 1;
  d.seg[0].width = w0;
  d.seg[0].slots_stride_t = w0;
  d.out_stride_h = 512;
  d.out_stride_t = H * 512;
  return d;
}

static int run_plan_and_decode(dsk_ctx *ctx, dsk_sparse_mla_desc *d, void **ws) {
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st = dsk_sparse_mla_decode_plan(ctx, d, &pi);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "plan: %s", dsk_last_error());
  if (st) return 1;
  *ws = pi.workspace_bytes ? dev(ctx, NULL, (size_t)pi.workspace_bytes) : NULL;
  if (*ws) dsk_mem_set(ctx, *ws, 0xFF, (size_t)pi.workspace_bytes);
  d->workspace = *ws;
  d->workspace_bytes = pi.workspace_bytes;
  st = dsk_sparse_mla_decode(ctx, d);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "decode: %s", dsk_last_error());
  dsk_ctx_synchronize(ctx, NULL);
  return st != DSK_STATUS_OK;
}

/* Format B, H = 1, two candidates with constant records: K0 = 1.0, K1 = 2.0
 * in every dim (rope included, V = all 512 dims); q = e_0, sm_scale = 1:
 * scores 1 and 2, out = (e*1 + e^2*2) / (e + e^2 [+ e^sink]), lse = ln(e + e^2).
 * Segment 1 holds a hole, an out-of-range slot and lens > width. */
static void test_hand_b(dsk_ctx *ctx) {
  const int64_t pbs = 2, ps = 2 * 584 + 16, npages = 2;
  uint8_t *cache = (uint8_t *)malloc((size_t)(npages * ps));
  memset(cache, 0xFF, (size_t)(npages * ps));
  /* slot 1 = page 0, j 1 -> K0 ; slot 2 = page 1, j 0 -> K1 */
  uint8_t *p0 = cache, *p1 = cache + ps;
  for (int d = 0; d < 448; d++) {
    p0[576 * 1 + d] = 0x38; /* 1.0, scale 2^0 -> 1.0 */
    p1[576 * 0 + d] = 0x48; /* 4.0, scale 2^-1 -> 2.0 */
  }
  for (int i = 0; i < 64; i++) {
    put_bf16(p0 + 576 + 448 + 2 * i, 1.0f);
    put_bf16(p1 + 448 + 2 * i, 2.0f);
  }
  for (int t = 0; t < 7; t++) {
    p0[576 * pbs + 8 * 1 + t] = 127;
    p1[576 * pbs + 8 * 0 + t] = 126;
  }
  dsk_bf16 q[512];
  for (int d = 0; d < 512; d++) q[d] = 0;
  q[0] = bf(1.0f);
  int32_t slots0[2] = {1, -1};
  int32_t slots1[3] = {1000, 2, 1}; /* 1000 >= capacity 4: skipped and counted; lens 5 > 3 */
  int32_t lens1[1] = {5};
  float sink[1] = {0.5f};
  dsk_bf16 out[512 + 8];
  for (int i = 0; i < 520; i++) out[i] = 0xFFFF;
  float lse = NAN;
  int64_t cnt[2] = {0, 0};

  dsk_sparse_mla_desc d = desc_base(DSK_KV_FORMAT_B584, 1, 1, 2);
  d.sm_scale = 1.0f;
  d.nseg = 2;
  void *cache_d = dev(ctx, cache, (size_t)(npages * ps));
  d.seg[0].cache.base = cache_d;
  d.seg[0].cache.pbs = pbs;
  d.seg[0].cache.page_stride = ps;
  d.seg[0].cache.num_pages = npages;
  d.seg[1] = d.seg[0];
  d.seg[0].slots = (const int32_t *)dev(ctx, slots0, sizeof slots0);
  d.seg[1].slots = (const int32_t *)dev(ctx, slots1, sizeof slots1);
  d.seg[1].width = 3;
  d.seg[1].slots_stride_t = 3;
  d.seg[1].lens = (const int32_t *)dev(ctx, lens1, sizeof lens1);
  d.q = (const dsk_bf16 *)dev(ctx, q, sizeof q);
  d.sink = (const float *)dev(ctx, sink, sizeof sink);
  void *out_d = dev(ctx, out, sizeof out), *lse_d = dev(ctx, &lse, sizeof lse), *cnt_d = dev(ctx, cnt, sizeof cnt);
  d.out = (dsk_bf16 *)out_d;
  d.lse = (float *)lse_d;
  d.lse_stride_h = 1;
  d.lse_stride_t = 1;
  d.counters = (int64_t *)cnt_d;
  void *ws = NULL;
  if (!run_plan_and_decode(ctx, &d, &ws)) {
    dsk_mem_download(ctx, out, out_d, sizeof out);
    dsk_mem_download(ctx, &lse, lse_d, sizeof lse);
    dsk_mem_download(ctx, cnt, cnt_d, sizeof cnt);
    /* candidates: seg0 slot 1 (K0), seg1 slot 2 (K1), seg1 slot 1 (K0 again) */
    double e1 = exp(1.0), e2 = exp(2.0);
    double Z = 2 * e1 + e2;
    double want = (2 * e1 * 1.0 + e2 * 2.0) / (Z + exp(0.5)); /* sink 0.5 */
    int bad = 0;
    for (int e = 0; e < 512; e++) bad += fabs(unbf(out[e]) - want) > 1e-12 + fabs(want) * (1.0 / 256);
    TU_CHECK(&counts, bad == 0, "hand B: out[0] %.6f, want %.6f (%d bad)", unbf(out[0]), want, bad);
    TU_CHECK(&counts, out[0] == bf((float)want), "hand B: out[0] bits %04x, want %04x", out[0], bf((float)want));
    TU_CHECK(&counts, fabs(lse - log(Z)) < 1e-6, "hand B: lse %.7f, want %.7f", lse, log(Z));
    int gap = 0;
    for (int i = 512; i < 520; i++) gap += out[i] != 0xFFFF;
    TU_CHECK(&counts, gap == 0, "hand B: %d elements past the row were written", gap);
    TU_CHECK(&counts, cnt[0] == 1 && cnt[1] == 1, "hand B: counters {%lld, %lld}, want {1, 1}", (long long)cnt[0],
             (long long)cnt[1]);
  }
  dsk_mem_free(ctx, ws);
  dsk_mem_free(ctx, cache_d);
  dsk_mem_free(ctx, (void *)d.seg[0].slots);
  dsk_mem_free(ctx, (void *)d.seg[1].slots);
  dsk_mem_free(ctx, (void *)d.seg[1].lens);
  dsk_mem_free(ctx, (void *)d.q);
  dsk_mem_free(ctx, (void *)d.sink);
  dsk_mem_free(ctx, out_d);
  dsk_mem_free(ctx, lse_d);
  dsk_mem_free(ctx, cnt_d);
  free(cache);
}

/* Format A, H = 2, T = 2: record r has latent byte 0x38 (1.0) with scale
 * s_r = 0.75 * (r + 1) in every tile (an arbitrary, non-power-of-two fp32
 * scale) and rope 0. q row h: q[0] = h + 1. Row 0 attends to slots {0, 3};
 * row 1 has only invalid entries (empty row: out 0, lse -inf). */
static void test_hand_a(dsk_ctx *ctx) {
  const int64_t pbs = 3, ps = 3 * 656, npages = 2; /* capacity 6 */
  uint8_t *cache = (uint8_t *)malloc((size_t)(npages * ps));
  memset(cache, 0xFF, (size_t)(npages * ps));
  const int recs[2] = {0, 3};
  for (int r = 0; r < 2; r++) {
    int slot = recs[r];
    uint8_t *rec = cache + (slot / pbs) * ps + 656 * (slot % pbs);
    for (int d = 0; d < 512; d++) rec[d] = 0x38;
    for (int t = 0; t < 4; t++) put_f32(rec + 512 + 4 * t, 0.75f * (float)(r + 1));
    for (int i = 0; i < 64; i++) put_bf16(rec + 528 + 2 * i, 0.0f);
  }
  dsk_bf16 q[2 * 2 * 576];
  memset(q, 0, sizeof q);
  for (int t = 0; t < 2; t++)
    for (int h = 0; h < 2; h++) q[(t * 2 + h) * 576] = bf((float)(h + 1));
  int32_t slots[2 * 4] = {0, -1, 3, 5, /* row 1: */ -1, -7, 6, 100};
  int32_t lens[2] = {3, 4}; /* row 0: slot 5 (valid, poisoned) is past lens */
  dsk_bf16 out[2 * 2 * 512];
  float lse[4] = {NAN, NAN, NAN, NAN};
  int64_t cnt[2] = {0, 0};
  dsk_sparse_mla_desc d = desc_base(DSK_KV_FORMAT_A656, 2, 2, 4);
  d.sm_scale = 0.5f;
  void *cache_d = dev(ctx, cache, (size_t)(npages * ps));
  d.seg[0].cache.base = cache_d;
  d.seg[0].cache.pbs = pbs;
  d.seg[0].cache.page_stride = ps;
  d.seg[0].cache.num_pages = npages;
  d.seg[0].slots = (const int32_t *)dev(ctx, slots, sizeof slots);
  d.seg[0].lens = (const int32_t *)dev(ctx, lens, sizeof lens);
  d.q = (const dsk_bf16 *)dev(ctx, q, sizeof q);
  void *out_d = dev(ctx, NULL, sizeof out), *lse_d = dev(ctx, lse, sizeof lse), *cnt_d = dev(ctx, cnt, sizeof cnt);
  dsk_mem_set(ctx, out_d, 0xFF, sizeof out);
  d.out = (dsk_bf16 *)out_d;
  d.lse = (float *)lse_d;
  d.lse_stride_h = 1;
  d.lse_stride_t = 2;
  d.counters = (int64_t *)cnt_d;
  void *ws = NULL;
  if (!run_plan_and_decode(ctx, &d, &ws)) {
    dsk_mem_download(ctx, out, out_d, sizeof out);
    dsk_mem_download(ctx, lse, lse_d, sizeof lse);
    dsk_mem_download(ctx, cnt, cnt_d, sizeof cnt);
    for (int h = 0; h < 2; h++) {
      /* s_r = 0.5 * (h+1) * 0.75 * (r+1); V_r = 0.75 * (r+1) */
      double s0 = 0.5 * (h + 1) * 0.75, s1 = 0.5 * (h + 1) * 1.5;
      double w0 = exp(s0), w1 = exp(s1);
      double want = (w0 * 0.75 + w1 * 1.5) / (w0 + w1);
      double wlse = log(w0 + w1);
      const dsk_bf16 *o = out + h * 512;
      int bad = 0;
      for (int e = 0; e < 512; e++) bad += o[e] != bf((float)want);
      TU_CHECK(&counts, bad == 0, "hand A: head %d out %.6f, want %.6f", h, unbf(o[0]), want);
      TU_CHECK(&counts, fabs(lse[h] - wlse) < 1e-6, "hand A: head %d lse %.7f, want %.7f", h, lse[h], wlse);
      const dsk_bf16 *o1 = out + (2 + h) * 512;
      int nz = 0;
      for (int e = 0; e < 512; e++) nz += unbf(o1[e]) != 0.0;
      TU_CHECK(&counts, nz == 0 && isinf(lse[2 + h]) && lse[2 + h] < 0, "hand A: empty row head %d: %d non-zero, lse %g",
               h, nz, lse[2 + h]);
    }
    /* slot 6 and 100 are >= capacity 6 at k < L in row 1 */
    TU_CHECK(&counts, cnt[0] == 2 && cnt[1] == 0, "hand A: counters {%lld, %lld}, want {2, 0}", (long long)cnt[0],
             (long long)cnt[1]);
  }
  dsk_mem_free(ctx, ws);
  dsk_mem_free(ctx, cache_d);
  dsk_mem_free(ctx, (void *)d.seg[0].slots);
  dsk_mem_free(ctx, (void *)d.seg[0].lens);
  dsk_mem_free(ctx, (void *)d.q);
  dsk_mem_free(ctx, out_d);
  dsk_mem_free(ctx, lse_d);
  dsk_mem_free(ctx, cnt_d);
  free(cache);
}

/* A descriptor that validates (buffers allocated on ctx) for plan tests. */
typedef struct plan_bufs {
  void *cache, *slots0, *slots1, *q, *out;
} plan_bufs;

static dsk_sparse_mla_desc plan_desc(dsk_ctx *ctx, plan_bufs *b, int64_t T, int64_t H, int64_t w0, int64_t w1) {
  dsk_sparse_mla_desc d = desc_base(DSK_KV_FORMAT_B584, T, H, w0);
  b->cache = dev(ctx, NULL, 37440 * 2);
  b->slots0 = dev(ctx, NULL, (size_t)((T ? T : 1) * w0 * 4));
  b->slots1 = dev(ctx, NULL, (size_t)((T ? T : 1) * (w1 ? w1 : 1) * 4));
  b->q = dev(ctx, NULL, (size_t)((T ? T : 1) * H * 512 * 2));
  b->out = dev(ctx, NULL, (size_t)((T ? T : 1) * H * 512 * 2));
  for (int i = 0; i < 2; i++) {
    d.seg[i].cache.base = b->cache;
    d.seg[i].cache.pbs = 64;
    d.seg[i].cache.page_stride = 37440;
    d.seg[i].cache.num_pages = 2;
  }
  d.seg[0].slots = (const int32_t *)b->slots0;
  if (w1 > 0) {
    d.nseg = 2;
    d.seg[1].slots = (const int32_t *)b->slots1;
    d.seg[1].width = w1;
    d.seg[1].slots_stride_t = w1;
  }
  d.q = (const dsk_bf16 *)b->q;
  d.out = (dsk_bf16 *)b->out;
  return d;
}

static void plan_free(dsk_ctx *ctx, plan_bufs *b) {
  dsk_mem_free(ctx, b->cache);
  dsk_mem_free(ctx, b->slots0);
  dsk_mem_free(ctx, b->slots1);
  dsk_mem_free(ctx, b->q);
  dsk_mem_free(ctx, b->out);
}

static void test_plan(dsk_ctx *ctx) {
  plan_bufs b;
  dsk_sparse_mla_desc d = plan_desc(ctx, &b, 4, 64, 128, 512);
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
  TU_CHECK(&counts, pi.tactic.op == DSK_OP_SPARSE_MLA_DECODE && pi.tactic.version == DSK_SPARSE_MLA_TACTIC_VERSION,
           "plan tactic op %d version %d", (int)pi.tactic.op, (int)pi.tactic.version);
  /* the heuristic takes the 32-head CTA for H > 16 (here 64) */
  TU_CHECK(&counts, pi.tactic.v[1] == 32 && pi.tactic.v[2] == 0 && pi.tactic.v[5] == 0, "plan tactic v1 %d",
           (int)pi.tactic.v[1]);
  TU_CHECK(&counts, pi.tactic.v[0] >= 1 && pi.tactic.v[0] <= 10, "plan tactic v0 %d", (int)pi.tactic.v[0]);
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_HEURISTIC, "plan source %d", pi.tactic_source);
  TU_CHECK(&counts, pi.workspace_bytes >= 0, "workspace %lld", (long long)pi.workspace_bytes);
  dsk_ctx_info ci;
  memset(&ci, 0, sizeof ci);
  ci.struct_size = sizeof ci;
  dsk_ctx_get_info(ctx, &ci);
  TU_CHECK(&counts, strcmp(pi.backend, ci.backend) == 0, "plan backend '%s' vs ctx '%s'", pi.backend, ci.backend);
  if (!ci.is_cuda) TU_CHECK(&counts, pi.workspace_bytes > 0, "cpu-ref needs per-thread scratch");

  /* forced: reported as forced */
  d.tactic.op = DSK_OP_SPARSE_MLA_DECODE;
  d.tactic.version = DSK_SPARSE_MLA_TACTIC_VERSION;
  d.tactic.v[0] = 10; /* chunks = 2 + 8 = 10: 12, 16, ... clip to 10 */
  d.tactic.v[1] = 16;
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_FORCED && pi.tactic.v[0] == 10, "forced: source %d v0 %d",
           pi.tactic_source, (int)pi.tactic.v[0]);
  d.tactic.v[1] = 32;
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_FORCED && pi.tactic.v[1] == 32, "forced 32 heads: source %d v1 %d",
           pi.tactic_source, (int)pi.tactic.v[1]);
  d.tactic.v[1] = 8; /* the 8-head kernel: valid for any H */
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_FORCED && pi.tactic.v[1] == 8, "forced 8 heads: source %d v1 %d",
           pi.tactic_source, (int)pi.tactic.v[1]);
  d.tactic.v[1] = 32;
  /* H <= 16: heads per CTA 32 is refused, and the heuristic takes 16 */
  {
    const int64_t H0 = d.H;
    d.H = 16;
    dsk_status st16 = dsk_sparse_mla_decode_plan(ctx, &d, &pi);
    TU_CHECK(&counts, st16 == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "tactic.v[1]"),
             "32 heads per CTA with H 16: %s '%s'", dsk_status_name(st16), dsk_last_error());
    memset(&d.tactic, 0, sizeof d.tactic);
    TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
    TU_CHECK(&counts, pi.tactic.v[1] == 16, "H 16: heuristic heads per CTA %d", (int)pi.tactic.v[1]);
    d.H = 20; /* 17..31: one 32-head CTA (two 16-head tiles either way) */
    TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
    TU_CHECK(&counts, pi.tactic.v[1] == 32, "H 20: heuristic heads per CTA %d", (int)pi.tactic.v[1]);
    d.H = H0;
  }

  /* invalid forced tactics */
  struct {
    int op, version, v0, v1, v2;
    const char *what;
  } bad[] = {
      {DSK_OP_SPARSE_MLA_DECODE, 1, 5, 16, 0, "tactic.v[0]"},
      {DSK_OP_SPARSE_MLA_DECODE, 1, 12, 16, 0, "tactic.v[0]"}, /* > chunks */
      {DSK_OP_SPARSE_MLA_DECODE, 1, 0, 16, 0, "tactic.v[0]"},
      {DSK_OP_SPARSE_MLA_DECODE, 1, -1, 16, 0, "tactic.v[0]"},
      {DSK_OP_SPARSE_MLA_DECODE, 1, 4, 24, 0, "tactic.v[1]"},
      {DSK_OP_SPARSE_MLA_DECODE, 1, 4, 64, 0, "tactic.v[1]"},
      {DSK_OP_SPARSE_MLA_DECODE, 1, 4, 16, 1, "tactic.v[2]"},
      {DSK_OP_KV_WRITE, 1, 4, 16, 0, "tactic.op"},
      {DSK_OP_SPARSE_MLA_DECODE, 2, 4, 16, 0, "tactic.version"},
      {0, 0, 4, 0, 0, "tactic.op"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&d.tactic, 0, sizeof d.tactic);
    d.tactic.op = bad[i].op;
    d.tactic.version = bad[i].version;
    d.tactic.v[0] = bad[i].v0;
    d.tactic.v[1] = bad[i].v1;
    d.tactic.v[2] = bad[i].v2;
    dsk_status st = dsk_sparse_mla_decode_plan(ctx, &d, &pi);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), bad[i].what),
             "bad tactic %zu: %s '%s' (want %s)", i, dsk_status_name(st), dsk_last_error(), bad[i].what);
    st = dsk_sparse_mla_decode(ctx, &d);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "bad tactic %zu run: %s", i, dsk_status_name(st));
  }
  /* plan info struct_size */
  memset(&d.tactic, 0, sizeof d.tactic);
  pi.struct_size = sizeof pi - 1;
  dsk_status st = dsk_sparse_mla_decode_plan(ctx, &d, &pi);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "struct_size"), "plan info size: %s",
           dsk_last_error());
  plan_free(ctx, &b);
}

/* The heuristic on a cpu-ref context whose "SM count" is its thread count. */
static void test_heuristic(void) {
  struct {
    int sms;
    int64_t T, H, w0, w1;
    int want, want_hpc;
  } cases[] = {
      {132, 1, 64, 128, 512, 1, 32},   /* all <= 1 wave: fill it most: cpb 1 (20/132) */
      {132, 16, 64, 128, 512, 3, 32},  /* 32 heads per CTA: hg 2, see below */
      {4, 1, 16, 768, 0, 3, 16},       /* waves 3.0 (cpb 1) and 1.0 (cpb 3) exact: tie -> 3 */
      {4, 20, 128, 2048, 0, 32, 32},   /* none <= 3 waves: the largest */
      {188, 4, 128, 128, 1024, 2, 32}, /* hg 4, see below */
      {1, 1, 1, 1, 0, 1, 16},          /* one chunk: the only value */
      {8, 3, 17, 65, 0, 1, 32},        /* H 17: one 32-head group, see below */
      {132, 64, 16, 128, 512, 8, 16},  /* 16 heads per CTA: cpb 6 and 8 both 128/132 waves: tie -> larger */
      /* 8 heads per CTA from T x widths >= 4,096 candidate slots at H <= 8,
       * >= 81,920 at H 9..16 */
      {132, 64, 8, 128, 512, 8, 8},    /* 40,960 slots: 8 heads, hg 1 as H 16 above */
      {132, 128, 8, 128, 512, 10, 8},  /* 81,920: 8 heads, see below */
      {132, 8, 8, 512, 0, 1, 8},       /* exactly 4,096: 8 heads */
      {132, 7, 8, 585, 0, 1, 16},      /* 4,095: 16 heads */
      {132, 160, 16, 512, 0, 8, 8},    /* H 16, exactly 81,920: 8 heads (hg 2) */
      {132, 159, 16, 512, 0, 6, 16},   /* H 16, 81,408: 16 heads */
      {132, 160, 9, 512, 0, 8, 8},     /* H 9 as H 16 */
      {132, 32, 9, 512, 0, 2, 16},     /* H 9, 16,384: 16 heads */
  };
  /* expected values checked by hand (heads per CTA 32 for H > 16, so
   * hg = ceil(H / 32); cpu-ref: 1 CTA per "SM", den = SMs):
   * {132,16,64,128,512}: chunks 10, hg 2, num = 32*splits: cpb 1:320 gap 76; 2:160 gap 104;
   *   3:128 gap 4; 4:96 gap 36; 6:64 gap 68; 8:64 gap 68; 10:32 gap 100 -> 3.
   * {188,4,128,128,1024}: chunks 18, hg 4, num = 16*splits, den 188:
   *   cpb 1:288 gap 88; 2:144 gap 44; 3:96 gap 92; 4:80 gap 108; 6:48 gap 140; 8:48; 12:32 gap 156;
   *   16:32; 18:16 gap 172 -> 2.
   * {8,3,17,65}: chunks 2, hg 1, num = 3*splits, den 8: cpb 1: 6, gap 2; cpb 2: 3, gap 5 -> 1.
   * {132,64,16,128,512}: hg 1, num = 64*splits: cpb 1:640 (> 396, no); 2:320 gap 76; 3:256 gap 8;
   *   4:192 gap 72; 6:128 gap 4; 8:128 gap 4; 10:64 gap 68 -> 8 (tie with 6 -> larger).
   * {132,128,8,128,512}: 8 heads, hg 1, num = 128*splits: cpb 1, 2: > 396; 3:512 > 396; 4:384
   *   gap 12; 6:256 gap 8; 8:256 gap 8; 10:128 gap 4 -> 10.
   * {132,8,8,512,0}: chunks 8, hg 1, num = 8*splits: 1:64 gap 68; 2:32 gap 100; ... -> 1.
   * {132,7,8,585,0}: chunks 10, hg 1, num = 7*splits: 1:70 gap 62; 2:35 gap 97; ... -> 1.
   * {132,160,16|9,512,0}: 8 heads, hg 2, num = 320*splits: cpb 1..6: >= 640 > 396; 8:320 -> 8.
   * {132,159,16,512,0}: 16 heads, hg 1, num = 159*splits: 1..3: >= 477 > 396; 4, 6:318 gap 78;
   *   8:159 gap 105 -> 6 (tie with 4 -> larger).
   * {132,32,9,512,0}: hg 1, num = 32*splits: 1:256 gap 8; 2:128 gap 4; 3:96 gap 36;
   *   4, 6:64 gap 68; 8:32 gap 100 -> 2. */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dsk_ctx_opts o;
    dsk_ctx_opts_init(&o);
    o.device = "cpu";
    o.backend = "cpu-ref";
    o.num_threads = cases[i].sms;
    dsk_ctx *ctx = NULL;
    dsk_status st = dsk_ctx_create(&ctx, &o);
    TU_CHECK(&counts, st == DSK_STATUS_OK, "ctx: %s", dsk_last_error());
    if (st) continue;
    plan_bufs b;
    dsk_sparse_mla_desc d = plan_desc(ctx, &b, cases[i].T, cases[i].H, cases[i].w0, cases[i].w1);
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
    TU_CHECK(&counts,
             pi.tactic.v[0] == cases[i].want && pi.tactic.v[1] == cases[i].want_hpc &&
                 pi.tactic_source == DSK_TACTIC_HEURISTIC,
             "heuristic %zu (SMs %d T %lld H %lld w %lld+%lld): cpb %d heads %d, want %d / %d", i, cases[i].sms,
             (long long)cases[i].T, (long long)cases[i].H, (long long)cases[i].w0, (long long)cases[i].w1,
             (int)pi.tactic.v[0], (int)pi.tactic.v[1], cases[i].want, cases[i].want_hpc);
    plan_free(ctx, &b);
    dsk_ctx_destroy(ctx);
  }
}

/* T = 0: OK, output untouched. */
static void test_t0(dsk_ctx *ctx) {
  plan_bufs b;
  dsk_sparse_mla_desc d = plan_desc(ctx, &b, 0, 8, 64, 0);
  dsk_mem_set(ctx, b.out, 0xAB, 8 * 512 * 2);
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode(ctx, &d));
  dsk_ctx_synchronize(ctx, NULL);
  unsigned char *h = (unsigned char *)malloc(8 * 512 * 2);
  dsk_mem_download(ctx, h, b.out, 8 * 512 * 2);
  int touched = 0;
  for (int i = 0; i < 8 * 512 * 2; i++) touched += h[i] != 0xAB;
  TU_CHECK(&counts, touched == 0, "T=0 wrote %d bytes", touched);
  free(h);
  plan_free(ctx, &b);
}

/* The plan is a pure function of the descriptor and the context: the plan
 * made before the first run of the process (as an engine plans at start-up)
 * must equal the one made after runs, or the workspace sized by the first
 * would be too small for later runs. Must run first in the process (device
 * state such as kernel attributes is process-wide). */
static void test_plan_stable(dsk_ctx *ctx) {
  plan_bufs b;
  dsk_sparse_mla_desc d = plan_desc(ctx, &b, 16, 64, 128, 512);
  dsk_mem_set(ctx, b.slots0, 0xFF, 16 * 128 * 4);
  dsk_mem_set(ctx, b.slots1, 0xFF, 16 * 512 * 4);
  dsk_mem_set(ctx, b.q, 0, 16 * 64 * 512 * 2);
  dsk_plan_info p1, p2;
  memset(&p1, 0, sizeof p1);
  p1.struct_size = sizeof p1;
  p2 = p1;
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &p1));
  void *ws = p1.workspace_bytes ? dev(ctx, NULL, (size_t)p1.workspace_bytes) : NULL;
  d.workspace = ws;
  d.workspace_bytes = p1.workspace_bytes;
  for (int i = 0; i < 3; i++) TU_CHECK_OK(&counts, dsk_sparse_mla_decode(ctx, &d));
  dsk_ctx_synchronize(ctx, NULL);
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &p2));
  TU_CHECK(&counts, memcmp(&p1.tactic, &p2.tactic, sizeof p1.tactic) == 0 && p1.workspace_bytes == p2.workspace_bytes,
           "plan before the first run (cpb %d, %lld B) != plan after runs (cpb %d, %lld B)", (int)p1.tactic.v[0],
           (long long)p1.workspace_bytes, (int)p2.tactic.v[0], (long long)p2.workspace_bytes);
  dsk_mem_free(ctx, ws);
  plan_free(ctx, &b);
}

/* cpu-ref: results are bitwise independent of the thread count (1 thread,
 * one task per row; 8 threads, rows split into head groups). */
static void test_threads_bitwise(void) {
  const int64_t T = 3, H = 37, W = 150, pbs = 5, npages = 40, ps = 5 * 584 + 32;
  tu_rng r = tu_rng_make(99);
  uint8_t *cache = (uint8_t *)malloc((size_t)(npages * ps));
  for (int64_t i = 0; i < npages * ps; i++) {
    uint8_t b = (uint8_t)tu_int(&r, 0, 255);
    cache[i] = (b & 0x7F) == 0x7F ? 0x3F : b; /* no NaN codes */
  }
  for (int64_t p = 0; p < npages; p++)
    for (int64_t j = 0; j < pbs; j++) {
      uint8_t *rec = cache + p * ps + 576 * j, *foot = cache + p * ps + 576 * pbs + 8 * j;
      for (int t = 0; t < 7; t++) foot[t] = (uint8_t)tu_int(&r, 115, 125);
      for (int i = 0; i < 64; i++) put_bf16(rec + 448 + 2 * i, (float)tu_normal(&r));
    }
  int32_t *slots = (int32_t *)malloc((size_t)(T * W) * sizeof(int32_t));
  for (int64_t i = 0; i < T * W; i++) slots[i] = (int32_t)tu_int(&r, -3, npages * pbs + 3);
  dsk_bf16 *q = (dsk_bf16 *)malloc((size_t)(T * H * 512) * sizeof(dsk_bf16));
  for (int64_t i = 0; i < T * H * 512; i++) q[i] = bf((float)tu_normal(&r));
  dsk_bf16 *outs[2];
  float *lses[2];
  for (int k = 0; k < 2; k++) {
    outs[k] = (dsk_bf16 *)calloc((size_t)(T * H * 512), sizeof(dsk_bf16));
    lses[k] = (float *)calloc((size_t)(T * H), sizeof(float));
    dsk_ctx_opts o;
    dsk_ctx_opts_init(&o);
    o.device = "cpu";
    o.backend = "cpu-ref";
    o.num_threads = k == 0 ? 1 : 8;
    dsk_ctx *c = NULL;
    TU_CHECK_OK(&counts, dsk_ctx_create(&c, &o));
    if (!c) continue;
    dsk_sparse_mla_desc d = desc_base(DSK_KV_FORMAT_B584, T, H, W);
    d.sm_scale = 0.0441942f;
    d.seg[0].cache.base = cache;
    d.seg[0].cache.pbs = pbs;
    d.seg[0].cache.page_stride = ps;
    d.seg[0].cache.num_pages = npages;
    d.seg[0].slots = slots;
    d.q = q;
    d.out = outs[k];
    d.lse = lses[k];
    d.lse_stride_h = 1;
    d.lse_stride_t = H;
    void *ws = NULL;
    run_plan_and_decode(c, &d, &ws);
    dsk_mem_free(c, ws);
    dsk_ctx_destroy(c);
  }
  TU_CHECK(&counts,
           memcmp(outs[0], outs[1], (size_t)(T * H * 512) * sizeof(dsk_bf16)) == 0 &&
               memcmp(lses[0], lses[1], (size_t)(T * H) * sizeof(float)) == 0,
           "cpu-ref results differ between 1 and 8 threads");
  int nz = 0;
  for (int64_t i = 0; i < T * H * 512; i++) nz += outs[0][i] != 0;
  TU_CHECK(&counts, nz > 0, "threads test: all outputs zero");
  for (int k = 0; k < 2; k++) {
    free(outs[k]);
    free(lses[k]);
  }
  free(cache);
  free(slots);
  free(q);
}

int main(void) {
  dsk_ctx *ctx = tu_ctx(NULL);
  TU_CHECK(&counts, ctx != NULL, "context");
  if (!ctx) return tu_finish("test_sparse_mla", &counts);
  test_plan_stable(ctx);
  test_hand_b(ctx);
  test_hand_a(ctx);
  test_t0(ctx);
  test_plan(ctx);
  test_heuristic();
  test_threads_bitwise();
  dsk_check_opts o;
  memset(&o, 0, sizeof o);
  o.quick = 1;
  o.seed = 1234;
  double t0 = tu_now_us();
  dsk_check_sparse_mla(ctx, &o, &counts);
  printf("dsk_check_sparse_mla (quick): %.1f s\n", (tu_now_us() - t0) * 1e-6);
  dsk_ctx_destroy(ctx);
  return tu_finish("test_sparse_mla", &counts);
}
