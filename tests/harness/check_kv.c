/* check_kv.c - backend-vs-reference check of the KV-cache writer and reader
 * (spec/kv-cache.md §5, §8).
 *
 * For each case (format, scale rule, pbs, pages, padded page_stride that is
 * a multiple of 16 so it is valid on CUDA too):
 *  - random latent/rope rows (normal tiles at random scales, zero, tiny and
 *    huge tiles, exact e4m3 ties, now and then a NaN/inf), written to slots in
 *    a random page order, plus negative and out-of-range slots;
 *  - writer: ctx's backend writes into a 0xFF-poisoned device cache, the
 *    cpu-ref writes into a poisoned host cache; the whole cache images and
 *    the counters must be identical (memcmp);
 *  - reader: the reference image is uploaded, both backends read written,
 *    never-written (poison), negative and out-of-range slots into a padded
 *    output prefilled with a sentinel; outputs must match bit for bit (NaN
 *    where the reference has NaN), and the counters too.
 * Data moves only through dsk_mem_*; ctx may be a CUDA context.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define KV_CASE_MAX_ROWS 2048

static int64_t kv_round16(int64_t x) { return (x + 15) / 16 * 16; }
static int64_t kv_latent_dim(dsk_kv_format f) { return dsk_kv_latent_dim(f); }
static int kv_tile(dsk_kv_format f) { return f == DSK_KV_FORMAT_B584 ? 64 : 128; }
static const char *kv_fname(dsk_kv_format f) {
  return f == DSK_KV_FORMAT_A656 ? "A656" : f == DSK_KV_FORMAT_B584 ? "B584" : "IDXK132";
}

static void kv_fill_row(tu_rng *r, dsk_bf16 *x, int64_t n, int T) {
  static const dsk_bf16 nonfinite[4] = {0x7FC0, 0xFF80, 0x7F80, 0xFFC1};
  for (int64_t t = 0; t < n / T; t++) {
    dsk_bf16 *p = x + t * T;
    int kind = (int)tu_int(r, 0, 24);
    double u = ldexp(1.0, (int)tu_int(r, -10, 10));
    for (int i = 0; i < T; i++) {
      double v;
      switch (kind) {
        case 0: v = (i & 1) ? -0.0 : 0.0; break;
        case 1: v = tu_normal(r) * 1e-7; break;
        case 2: v = tu_normal(r) * 2e4; break;
        case 3: v = (double)tu_int(r, -64, 64) * 0.0625 * u; break; /* exact ties */
        case 4: v = tu_normal(r) * 1e-38; break;                    /* bf16 subnormals */
        default: v = tu_normal(r) * u; break;
      }
      p[i] = dsk_bf16_from_f32((float)v);
    }
    if (tu_int(r, 0, 39) == 0) p[tu_int(r, 0, T - 1)] = nonfinite[tu_int(r, 0, 3)];
  }
}

static int same_bits_or_nan(float a, float b) {
  uint32_t ua, ub;
  memcpy(&ua, &a, 4);
  memcpy(&ub, &b, 4);
  return ua == ub || (a != a && b != b);
}

typedef struct kv_bufs {
  dsk_ctx *ctx;
  void *p[8];
  int n;
} kv_bufs;

static void *kv_alloc(kv_bufs *b, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st != DSK_STATUS_OK) return NULL;
  *st = dsk_mem_alloc(b->ctx, &p, bytes ? bytes : 16);
  if (*st == DSK_STATUS_OK) b->p[b->n++] = p;
  return p;
}
static void kv_free_all(kv_bufs *b) {
  for (int i = 0; i < b->n; i++) dsk_mem_free(b->ctx, b->p[i]);
  b->n = 0;
}

/* One case; returns 1 if it ran and passed, 0 if it failed, -1 if skipped. */
static int kv_case(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, FILE *log, tu_counts *c, tu_rng *r,
                   dsk_kv_format f, dsk_scale_rule rule, int64_t pbs, int64_t np, int64_t max_rows) {
  const int fail0 = c->failed;
  const int64_t L = kv_latent_dim(f), D = dsk_kv_dim(f), T = kv_tile(f);
  const int64_t min = dsk_kv_min_page_stride(f, pbs);
  const int64_t ps = kv_round16(min) + 16 * tu_int(r, 0, 3);
  const int64_t cap = pbs * np, bytes = ps * np;
  const int has_rope = f != DSK_KV_FORMAT_IDXK132;

  /* slots: tokens in a random page order, then junk rows, then shuffled */
  int64_t ntok = max_rows >= KV_CASE_MAX_ROWS ? cap : tu_int(r, 1, cap); /* the large case fills its pages */
  if (ntok > max_rows) ntok = max_rows;
  int64_t njunk = tu_int(r, 0, 8), N = ntok + njunk;
  int64_t *perm = (int64_t *)malloc(sizeof(int64_t) * (size_t)np);
  int32_t *slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)N);
  int64_t ls = L + tu_int(r, 0, 8), rs = 64 + tu_int(r, 0, 8);
  dsk_bf16 *lat = (dsk_bf16 *)malloc(sizeof(dsk_bf16) * (size_t)(N * ls));
  dsk_bf16 *rope = (dsk_bf16 *)malloc(sizeof(dsk_bf16) * (size_t)(N * rs));
  uint8_t *ref_cache = (uint8_t *)malloc((size_t)bytes), *got_cache = (uint8_t *)malloc((size_t)bytes);
  int64_t nr = N + 6, os = D + tu_int(r, 0, 4);
  int32_t *rslots = (int32_t *)malloc(sizeof(int32_t) * (size_t)nr);
  float *ref_out = (float *)malloc(sizeof(float) * (size_t)(nr * os));
  float *got_out = (float *)malloc(sizeof(float) * (size_t)(nr * os));
  if (!perm || !slots || !lat || !rope || !ref_cache || !got_cache || !rslots || !ref_out || !got_out) {
    TU_CHECK(c, 0, "check_kv: out of host memory");
    free(perm), free(slots), free(lat), free(rope), free(ref_cache), free(got_cache), free(rslots), free(ref_out),
        free(got_out);
    return 0;
  }
  tu_permutation(r, perm, np);
  for (int64_t k = 0; k < ntok; k++) slots[k] = (int32_t)(perm[k / pbs] * pbs + k % pbs);
  for (int64_t k = ntok; k < N; k++) {
    int64_t kind = tu_int(r, 0, 3);
    slots[k] = kind == 0 ? -1 : kind == 1 ? (int32_t)-tu_int(r, 2, 1 << 20)
               : kind == 2 ? (int32_t)cap : (int32_t)tu_int(r, cap, cap + 100000);
  }
  for (int64_t k = N - 1; k > 0; k--) {
    int64_t j = tu_int(r, 0, k);
    int32_t t = slots[k];
    slots[k] = slots[j];
    slots[j] = t;
  }
  for (int64_t n = 0; n < N; n++) {
    kv_fill_row(r, lat + n * ls, L, (int)T);
    for (int64_t i = 0; i < rs; i++) rope[n * rs + i] = (dsk_bf16)tu_next(r);
  }
  memcpy(rslots, slots, sizeof(int32_t) * (size_t)N);
  for (int64_t k = N; k < nr; k++) rslots[k] = (int32_t)tu_int(r, -2, cap + 2); /* unwritten, junk */
  memset(ref_cache, 0xFF, (size_t)bytes);
  for (int64_t i = 0; i < nr * os; i++) ref_out[i] = got_out[i] = -77.25f;

  /* reference */
  int64_t ref_cnt[4] = {11, 22, 33, 44}, got_cnt[4] = {11, 22, 33, 44};
  dsk_kv_write_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.struct_size = sizeof wd;
  wd.format = f;
  wd.N = N;
  wd.latent = lat;
  wd.latent_stride = ls;
  wd.rope = has_rope ? rope : NULL;
  wd.rope_stride = rs;
  wd.slot_mapping = slots;
  wd.cache.base = ref_cache;
  wd.cache.pbs = pbs;
  wd.cache.page_stride = ps;
  wd.cache.num_pages = np;
  wd.scale_rule = rule;
  wd.counters = ref_cnt;
  TU_CHECK_OK(c, dsk_kv_write(ref, &wd));
  dsk_kv_read_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.struct_size = sizeof rd;
  rd.format = f;
  rd.N = nr;
  rd.slots = rslots;
  rd.cache = wd.cache;
  rd.out = ref_out;
  rd.out_stride = os;
  rd.counters = ref_cnt + 2;
  TU_CHECK_OK(c, dsk_kv_read(ref, &rd));

  /* backend under test */
  int skipped = 0;
  kv_bufs b;
  memset(&b, 0, sizeof b);
  b.ctx = ctx;
  dsk_status st = DSK_STATUS_OK;
  dsk_bf16 *d_lat = (dsk_bf16 *)kv_alloc(&b, sizeof(dsk_bf16) * (size_t)(N * ls), &st);
  dsk_bf16 *d_rope = (dsk_bf16 *)kv_alloc(&b, sizeof(dsk_bf16) * (size_t)(N * rs), &st);
  int32_t *d_slots = (int32_t *)kv_alloc(&b, sizeof(int32_t) * (size_t)N, &st);
  int32_t *d_rslots = (int32_t *)kv_alloc(&b, sizeof(int32_t) * (size_t)nr, &st);
  uint8_t *d_cache = (uint8_t *)kv_alloc(&b, (size_t)bytes, &st);
  float *d_out = (float *)kv_alloc(&b, sizeof(float) * (size_t)(nr * os), &st);
  int64_t *d_cnt = (int64_t *)kv_alloc(&b, sizeof got_cnt, &st);
  if (st == DSK_STATUS_OK) st = dsk_mem_upload(ctx, d_lat, lat, sizeof(dsk_bf16) * (size_t)(N * ls));
  if (st == DSK_STATUS_OK) st = dsk_mem_upload(ctx, d_rope, rope, sizeof(dsk_bf16) * (size_t)(N * rs));
  if (st == DSK_STATUS_OK) st = dsk_mem_upload(ctx, d_slots, slots, sizeof(int32_t) * (size_t)N);
  if (st == DSK_STATUS_OK) st = dsk_mem_upload(ctx, d_rslots, rslots, sizeof(int32_t) * (size_t)nr);
  if (st == DSK_STATUS_OK) st = dsk_mem_set(ctx, d_cache, 0xFF, (size_t)bytes);
  if (st == DSK_STATUS_OK) st = dsk_mem_upload(ctx, d_cnt, got_cnt, sizeof got_cnt);
  TU_CHECK(c, st == DSK_STATUS_OK, "check_kv: device buffers: %s: %s", dsk_status_name(st), dsk_last_error());

  int write_ok = 0, read_ok = 0;
  int64_t diff_at = -1, bad_vals = 0, first_bad = -1;
  if (st == DSK_STATUS_OK) {
    dsk_kv_write_desc dw = wd;
    dw.latent = d_lat;
    dw.rope = has_rope ? d_rope : NULL;
    dw.slot_mapping = d_slots;
    dw.cache.base = d_cache;
    dw.counters = d_cnt;
    dsk_status ws = dsk_kv_write(ctx, &dw);
    if (ws == DSK_STATUS_UNSUPPORTED) {
      skipped = 1;
      fprintf(log, "kv %-7s skipped: %s\n", kv_fname(f), dsk_last_error());
    } else {
      TU_CHECK(c, ws == DSK_STATUS_OK, "kv_write %s: %s: %s", kv_fname(f), dsk_status_name(ws), dsk_last_error());
      dsk_status s2 = dsk_ctx_synchronize(ctx, NULL);
      if (s2 == DSK_STATUS_OK) s2 = dsk_mem_download(ctx, got_cache, d_cache, (size_t)bytes);
      if (s2 == DSK_STATUS_OK) s2 = dsk_mem_download(ctx, got_cnt, d_cnt, sizeof got_cnt);
      TU_CHECK(c, s2 == DSK_STATUS_OK, "check_kv: download: %s: %s", dsk_status_name(s2), dsk_last_error());
      if (ws == DSK_STATUS_OK && s2 == DSK_STATUS_OK) {
        for (int64_t i = 0; i < bytes && diff_at < 0; i++)
          if (got_cache[i] != ref_cache[i]) diff_at = i;
        TU_CHECK(c, diff_at < 0, "kv_write %s pbs %lld: byte %lld (page %lld +%lld) is 0x%02X, reference 0x%02X",
                 kv_fname(f), (long long)pbs, (long long)diff_at, (long long)(diff_at / ps), (long long)(diff_at % ps),
                 diff_at >= 0 ? got_cache[diff_at] : 0, diff_at >= 0 ? ref_cache[diff_at] : 0);
        TU_CHECK(c, got_cnt[0] == ref_cnt[0] && got_cnt[1] == ref_cnt[1],
                 "kv_write %s counters %lld %lld, reference %lld %lld", kv_fname(f), (long long)got_cnt[0],
                 (long long)got_cnt[1], (long long)ref_cnt[0], (long long)ref_cnt[1]);
        write_ok = diff_at < 0 && got_cnt[0] == ref_cnt[0] && got_cnt[1] == ref_cnt[1];
      }
    }
  }
  if (st == DSK_STATUS_OK && !skipped) {
    /* reader on the reference image, so its check does not depend on the writer's */
    dsk_status s2 = dsk_mem_upload(ctx, d_cache, ref_cache, (size_t)bytes);
    if (s2 == DSK_STATUS_OK) s2 = dsk_mem_upload(ctx, d_out, got_out, sizeof(float) * (size_t)(nr * os));
    dsk_kv_read_desc dr = rd;
    dr.slots = d_rslots;
    dr.cache.base = d_cache;
    dr.out = d_out;
    dr.counters = d_cnt + 2;
    dsk_status rs2 = s2 == DSK_STATUS_OK ? dsk_kv_read(ctx, &dr) : s2;
    if (rs2 == DSK_STATUS_UNSUPPORTED) {
      fprintf(log, "kv %-7s read skipped: %s\n", kv_fname(f), dsk_last_error());
      read_ok = 1;
    } else {
      TU_CHECK(c, rs2 == DSK_STATUS_OK, "kv_read %s: %s: %s", kv_fname(f), dsk_status_name(rs2), dsk_last_error());
      s2 = dsk_ctx_synchronize(ctx, NULL);
      if (s2 == DSK_STATUS_OK) s2 = dsk_mem_download(ctx, got_out, d_out, sizeof(float) * (size_t)(nr * os));
      if (s2 == DSK_STATUS_OK) s2 = dsk_mem_download(ctx, got_cnt, d_cnt, sizeof got_cnt);
      TU_CHECK(c, s2 == DSK_STATUS_OK, "check_kv: download: %s: %s", dsk_status_name(s2), dsk_last_error());
      if (rs2 == DSK_STATUS_OK && s2 == DSK_STATUS_OK) {
        for (int64_t i = 0; i < nr * os; i++)
          if (!same_bits_or_nan(got_out[i], ref_out[i])) {
            if (first_bad < 0) first_bad = i;
            bad_vals++;
          }
        TU_CHECK(c, bad_vals == 0, "kv_read %s pbs %lld: %lld values differ, first row %lld col %lld: %.9g vs %.9g",
                 kv_fname(f), (long long)pbs, (long long)bad_vals, (long long)(first_bad / os),
                 (long long)(first_bad % os), first_bad >= 0 ? got_out[first_bad] : 0.0,
                 first_bad >= 0 ? ref_out[first_bad] : 0.0);
        TU_CHECK(c, got_cnt[2] == ref_cnt[2] && got_cnt[3] == ref_cnt[3], "kv_read %s counters %lld, reference %lld",
                 kv_fname(f), (long long)got_cnt[2], (long long)ref_cnt[2]);
        read_ok = bad_vals == 0 && got_cnt[2] == ref_cnt[2] && got_cnt[3] == ref_cnt[3];
      }
    }
  }
  kv_free_all(&b);

  if (!skipped)
    fprintf(log,
            "kv %-7s %-4s pbs %3lld pages %2lld stride %6lld (min %6lld): write N %4lld (skipped %lld, non-finite "
            "tiles %lld) %s; read N %4lld (invalid %lld) %s\n",
            kv_fname(f), f == DSK_KV_FORMAT_B584 ? "" : rule == DSK_SCALE_RAW ? "RAW" : "POW2", (long long)pbs,
            (long long)np, (long long)ps, (long long)min, (long long)N, (long long)(ref_cnt[0] - 11),
            (long long)(ref_cnt[1] - 22), write_ok ? "bytes identical" : "MISMATCH", (long long)nr,
            (long long)(ref_cnt[2] - 33), read_ok ? "identical" : "MISMATCH");
  if (o->verbose && !skipped && !(write_ok && read_ok)) fprintf(log, "  (seed %llu)\n", (unsigned long long)o->seed);
  free(perm), free(slots), free(lat), free(rope), free(ref_cache), free(got_cache), free(rslots), free(ref_out),
      free(got_out);
  if (skipped) return -1;
  return c->failed == fail0;
}

int dsk_check_kv(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c) {
  FILE *log = o && o->log ? o->log : stdout;
  if (!ctx || !o || !c) return 1;
  dsk_ctx *ref = tu_ctx("cpu");
  if (!ref) {
    TU_CHECK(c, 0, "check_kv: cannot create the cpu reference context");
    return 1;
  }
  tu_rng r = tu_rng_make(o->seed ^ 0x4B56u);
  static const struct { dsk_kv_format f; dsk_scale_rule rule; } fr[] = {
      {DSK_KV_FORMAT_A656, DSK_SCALE_POW2},    {DSK_KV_FORMAT_A656, DSK_SCALE_RAW},
      {DSK_KV_FORMAT_B584, DSK_SCALE_POW2},    {DSK_KV_FORMAT_IDXK132, DSK_SCALE_POW2},
      {DSK_KV_FORMAT_IDXK132, DSK_SCALE_RAW},
  };
  static const int64_t pbs_quick[] = {1, 3, 64};
  static const int64_t pbs_full[] = {1, 2, 3, 61, 64, 256};
  const int64_t *pbs = o->quick ? pbs_quick : pbs_full;
  int npbs = o->quick ? 3 : 6;
  int ran = 0, failed = 0, skipped = 0;
  for (size_t k = 0; k < sizeof fr / sizeof fr[0]; k++) {
    for (int i = 0; i < npbs; i++) {
      int64_t np = tu_int(&r, 1, pbs[i] >= 64 ? 4 : 12);
      int res = kv_case(ctx, ref, o, log, c, &r, fr[k].f, fr[k].rule, pbs[i], np, o->quick ? 128 : 512);
      if (res < 0) skipped++;
      else ran++, failed += res == 0;
    }
    if (!o->quick) { /* one larger cache per format: many pages, many rows */
      int res = kv_case(ctx, ref, o, log, c, &r, fr[k].f, fr[k].rule, 64, 48, KV_CASE_MAX_ROWS);
      if (res < 0) skipped++;
      else ran++, failed += res == 0;
    }
  }
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (dsk_ctx_get_info(ctx, &info) != DSK_STATUS_OK) snprintf(info.backend, sizeof info.backend, "?");
  fprintf(log, "kv: %d cases, %d failed, %d skipped (%s vs cpu-ref)\n", ran, failed, skipped, info.backend);
  dsk_ctx_destroy(ref);
  return failed ? 1 : 0;
}
