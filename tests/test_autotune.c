/* test_autotune.c - the tuner and its cache (spec/autotune.md; docs/autotune.md):
 *  - bucket mapping tables (A2-A4), key strings, canonical tactic order, the
 *    deterministic tie-break (A9), kernel build ids;
 *  - 8 processes tuning into one cache at once leave one valid file holding
 *    every entry, and converge on the first writer's tactics (A18);
 *  - cache round trip (save in one context, load in another: same tactics);
 *  - wrong metadata, stale and invalid entries, truncated / empty / garbage /
 *    huge / unreadable files: ignored with one warning, no crash, renamed
 *    .bad and replaced at the next save (A16, A17);
 *  - location rules (A13), export / import (A19), force merge, A5
 *    re-validation, misses and their once-per-key warnings, REQUIRE_HIT,
 *    DSK_AUTOTUNE=0, run calls never tune (A10), mHC prenorm/pre agreement,
 *    a forced unavailable backend;
 *  - MoE GEMM keys (moe_gemm, dense_fp8_gemm): strings, parsing, tactic
 *    sets, A5, lookups by rows from dsk_moe_gemm, misses, export / import;
 *  - A10: a warmup while the stream captures a CUDA graph times and runs
 *    nothing (the internal flag, and a table whose stream_capturing slot
 *    answers 1); a backend without the MoE slots yields no MoE keys.
 * Contexts run on the CPU with tiny shapes; every cache lives in a fresh
 * folder under /tmp. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsk.h"
#include "testutil.h"
#include "ops/ops.h"
#include "tune/tuner.h"

#ifndef DSK_SOURCE_DIR
#error "DSK_SOURCE_DIR must be defined (CMake does it for tests)"
#endif

static tu_counts counts;

/* ---------------------------------------------------------- log capture */
static int g_warns;
static char g_last[1024];
static void on_log(int level, const char *msg, void *user) {
  (void)user;
  if (level == DSK_LOG_WARN) {
    g_warns++;
    snprintf(g_last, sizeof g_last, "%s", msg);
  }
}

/* ------------------------------------------------------------- helpers */
static void env_reset(void) {
  unsetenv("DSK_CACHE_DIR");
  unsetenv("DSK_AUTOTUNE");
  unsetenv("DSK_AUTOTUNE_CACHE");
  unsetenv("DSK_AUTOTUNE_REQUIRE_HIT");
  unsetenv("DSK_AUTOTUNE_MAX_MB");
  setenv("DSK_AUTOTUNE_L2", "warm", 1); /* keeps CPU timing fast (no 64 MiB flush per sample) */
}

static char *tmpdir(void) {
  char *d = (char *)malloc(64);
  snprintf(d, 64, "/tmp/dsk-autotune-XXXXXX");
  if (!mkdtemp(d)) {
    TU_CHECK(&counts, 0, "mkdtemp: %s", strerror(errno));
    free(d);
    return NULL;
  }
  return d;
}

static dsk_ctx *ctx_in(const char *dir) {
  if (dir) setenv("DSK_CACHE_DIR", dir, 1);
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  o.num_threads = 1; /* the fingerprint holds the thread count: every context here agrees; one
                        thread also keeps CPU timing free of OpenMP barrier stalls on a busy machine */
  dsk_ctx *ctx = NULL;
  dsk_status st = dsk_ctx_create(&ctx, &o);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "dsk_ctx_create: %s", dsk_last_error());
  return ctx;
}

static dsk_tune_stats stats_of(dsk_ctx *ctx) {
  dsk_tune_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  dsk_status st = dsk_autotune_stats(ctx, &s);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "dsk_autotune_stats: %s", dsk_last_error());
  return s;
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = (char *)malloc((size_t)sz + 1);
  size_t got = b ? fread(b, 1, (size_t)sz, f) : 0;
  fclose(f);
  if (b) b[got] = 0;
  if (n) *n = got;
  return b;
}

static int spit(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(p, 1, n, f);
  return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static void rm_rf(const char *dir) {
  if (!dir) return;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
}

static dsk_model_desc tiny_model(void) {
  dsk_model_desc m;
  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/tiny-dsv4/config.json", DSK_SOURCE_DIR);
  TU_CHECK_OK(&counts, dsk_model_desc_from_config(path, &m));
  return m;
}

/* Tunes the tiny model (T up to max_tokens; C128A width 128) with the given
 * SWA widths. */
static dsk_status tune_tiny_t(dsk_ctx *ctx, const int64_t *swa, int nswa, unsigned flags, int64_t *nkeys,
                              int64_t max_tokens) {
  dsk_model_desc m = tiny_model();
  dsk_serving_desc sv;
  dsk_serving_desc_init(&sv);
  sv.max_tokens = max_tokens;
  sv.max_context = 4096;
  sv.swa_widths = swa;
  sv.num_swa_widths = nswa;
  dsk_warmup_list *l = NULL;
  dsk_status st = dsk_warmup_enumerate(ctx, &m, &sv, &l);
  if (st != DSK_STATUS_OK) return st;
  if (nkeys) *nkeys = dsk_warmup_list_size(l);
  st = dsk_warmup_run(ctx, l, flags, NULL, NULL);
  dsk_warmup_list_free(l);
  return st;
}

/* T 1 and 2: 8 keys. */
static dsk_status tune_tiny(dsk_ctx *ctx, const int64_t *swa, int nswa, unsigned flags, int64_t *nkeys) {
  return tune_tiny_t(ctx, swa, nswa, flags, nkeys, 2);
}

/* ------------------------------------------------ a decode on host buffers */
typedef struct mla_case {
  dsk_sparse_mla_desc d;
  void *mem[8];
  int nmem;
} mla_case;

static void *cmalloc(mla_case *c, size_t n) {
  void *p = calloc(1, n ? n : 1);
  c->mem[c->nmem++] = p;
  return p;
}

static void mla_free(mla_case *c) {
  for (int i = 0; i < c->nmem; i++) free(c->mem[i]);
  c->nmem = 0;
}

/* Caches are zero bytes (every field decodes to 0: finite). */
static void mla_build(mla_case *c, dsk_kv_format f, int64_t T, int64_t H, int nseg, int64_t w0, int64_t pbs0, int64_t w1,
                      int64_t pbs1, tu_rng *r) {
  memset(c, 0, sizeof *c);
  dsk_sparse_mla_desc *d = &c->d;
  d->struct_size = sizeof *d;
  d->format = f;
  d->T = T;
  d->H = H;
  const int64_t dqk = f == DSK_KV_FORMAT_A656 ? 576 : 512;
  dsk_bf16 *q = (dsk_bf16 *)cmalloc(c, (size_t)(T * H * dqk) * 2);
  tu_fill_bf16_normal(r, q, (size_t)(T * H * dqk), 0.5);
  d->q = q;
  d->q_stride_h = dqk;
  d->q_stride_t = H * dqk;
  d->sm_scale = 0.05f;
  d->nseg = nseg;
  int64_t w[2] = {w0, w1}, pbs[2] = {pbs0, pbs1};
  for (int i = 0; i < nseg; i++) {
    dsk_sparse_mla_segment *g = &d->seg[i];
    g->cache.pbs = pbs[i];
    g->cache.page_stride = dsk_kv_canonical_page_stride(f, pbs[i]);
    g->cache.num_pages = 2;
    g->cache.base = cmalloc(c, (size_t)(g->cache.page_stride * g->cache.num_pages));
    int32_t *sl = (int32_t *)cmalloc(c, (size_t)(T * w[i]) * 4);
    for (int64_t k = 0; k < T * w[i]; k++) sl[k] = (int32_t)tu_int(r, -1, 2 * pbs[i] - 1);
    g->slots = sl;
    g->slots_stride_t = w[i];
    g->width = w[i];
  }
  d->out = (dsk_bf16 *)cmalloc(c, (size_t)(T * H * 512) * 2);
  d->out_stride_h = 512;
  d->out_stride_t = H * 512;
}

/* Plan (source, tactic) and, with run set, the run itself. */
static dsk_status mla_plan_run(dsk_ctx *ctx, mla_case *c, int run, dsk_plan_info *pi) {
  memset(pi, 0, sizeof *pi);
  pi->struct_size = sizeof *pi;
  dsk_status st = dsk_sparse_mla_decode_plan(ctx, &c->d, pi);
  if (st != DSK_STATUS_OK || !run) return st;
  c->d.workspace = cmalloc(c, (size_t)pi->workspace_bytes + 64);
  c->d.workspace_bytes = pi->workspace_bytes;
  return dsk_sparse_mla_decode(ctx, &c->d);
}

/* ---------------------------------------------------------------- tests */
static void test_buckets(void) {
  int64_t b[64];
  int n = dsk__tune_token_buckets(NULL, 0, 0, 0, 8192, b, 64);
  static const int64_t want[] = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  int ok = n == 18;
  for (int i = 0; ok && i < n; i++) ok = b[i] == want[i];
  TU_CHECK(&counts, ok, "default buckets at 8192 tokens (%d)", n);
  n = dsk__tune_token_buckets(NULL, 0, 0, 0, 4, b, 64);
  TU_CHECK(&counts, n == 3 && b[0] == 1 && b[1] == 2 && b[2] == 4, "max tokens 4 -> {1,2,4} (%d)", n);
  n = dsk__tune_token_buckets(NULL, 0, 0, 0, 3, b, 64);
  TU_CHECK(&counts, n == 3 && b[2] == 4, "max tokens 3 -> {1,2,4}");
  n = dsk__tune_token_buckets(NULL, 0, 0, 0, 100, b, 64);
  TU_CHECK(&counts, n == 12 && b[10] == 64 && b[11] == 128, "max tokens 100 -> D + {128} (%d)", n);
  n = dsk__tune_token_buckets(NULL, 0, 0, 0, 64, b, 64);
  TU_CHECK(&counts, n == 11 && b[10] == 64, "max tokens 64 -> D only (%d)", n);
  n = dsk__tune_token_buckets(NULL, 0, 0, 0, 1 << 20, b, 64);
  TU_CHECK(&counts, n == 19 && b[18] == 16384, "prefill capped at 16384 (%d)", n);
  const int64_t cap[] = {7, 3, 1, 3};
  n = dsk__tune_token_buckets(cap, 4, 0, 0, 256, b, 64);
  TU_CHECK(&counts, n == 5 && b[0] == 1 && b[1] == 3 && b[2] == 7 && b[3] == 128 && b[4] == 256,
           "capture sizes {7,3,1,3} + prefill to 256 (%d)", n);
  n = dsk__tune_token_buckets(cap, 4, 1, 2, 256, b, 64);
  TU_CHECK(&counts, n == 5 && b[0] == 3 && b[1] == 9 && b[2] == 21, "capture batches x (1+2) (%d)", n);
  n = dsk__tune_token_buckets(NULL, 0, 0, 2, 256, b, 64);
  TU_CHECK(&counts, n == 12 && b[0] == 3 && b[1] == 6 && b[10] == 192 && b[11] == 256,
           "default buckets with 2 draft tokens: b*(1+k) (%d: %lld %lld)", n, (long long)b[0], (long long)b[n - 1]);
  struct { int64_t T, want; } dt[] = {{0, 1}, {1, 1}, {3, 4}, {17, 24}, {64, 64}, {65, 128}, {129, 256}, {20000, 16384}};
  for (size_t i = 0; i < sizeof dt / sizeof dt[0]; i++)
    TU_CHECK(&counts, dsk__tune_default_bucket(dt[i].T) == dt[i].want, "default bucket of T %lld", (long long)dt[i].T);
  struct { int64_t w, want; } wt[] = {{1, 128},     {128, 128},   {129, 256},   {1000, 1024}, {1024, 1024},
                                      {1025, 1536}, {4096, 4096}, {4097, 5120}, {8192, 8192}, {8193, 9216}};
  for (size_t i = 0; i < sizeof wt / sizeof wt[0]; i++)
    TU_CHECK(&counts, dsk__tune_width_bucket(wt[i].w) == wt[i].want, "width bucket of %lld", (long long)wt[i].w);
  TU_CHECK(&counts, dsk__tune_width_buckets(8192, b, 64) == 18 && b[7] == 1024 && b[8] == 1536 && b[13] == 4096 &&
                        b[14] == 5120 && b[17] == 8192,
           "width buckets up to 8192 (1M context)");
  TU_CHECK(&counts, dsk__tune_width_buckets(1024, b, 64) == 8, "width buckets up to 1024 (131072 context)");
  TU_CHECK(&counts, dsk__tune_width_buckets(1152, b, 64) == 9 && b[8] == 1536, "width 1152 -> up to 1536");
}

static void test_keys_and_tactics(dsk_ctx *ctx) {
  TU_CHECK(&counts, dsk_kernel_build_id(DSK_OP_SPARSE_MLA_DECODE) && strlen(dsk_kernel_build_id(DSK_OP_SPARSE_MLA_DECODE)) == 16,
           "kernel build id of sparse_mla_decode");
  TU_CHECK(&counts, dsk_kernel_build_id(DSK_OP_MHC_PRENORM) && strlen(dsk_kernel_build_id(DSK_OP_MHC_PRENORM)) == 16,
           "kernel build id of mhc_prenorm");
  TU_CHECK(&counts, dsk_kernel_build_id(DSK_OP_KV_WRITE) == NULL, "no build id for untunable ops");
  dsk__tune_shape s;
  memset(&s, 0, sizeof s);
  s.op = DSK_OP_SPARSE_MLA_DECODE;
  s.format = DSK_KV_FORMAT_B584;
  s.H = 32;
  s.nseg = 2;
  s.w[0] = 128;
  s.pbs[0] = 64;
  s.w[1] = 300;
  s.pbs[1] = 2;
  s.T = 24;
  dsk__tune_bucket_shape(&s);
  TU_CHECK(&counts, s.w[1] == 384, "C128A width 300 keyed as 384");
  char key[DSK__TUNE_KEY_MAX], again[DSK__TUNE_KEY_MAX], kb[17];
  TU_CHECK(&counts, dsk__tune_key(&s, 1, key, sizeof key) > 0, "key");
  char want[DSK__TUNE_KEY_MAX];
  snprintf(want, sizeof want, "op=sparse_mla_decode;kb=%s;fmt=B;prec=accurate;H=32;w0=128;pbs0=64;w1=384;pbs1=2;T=24;",
           dsk_kernel_build_id(DSK_OP_SPARSE_MLA_DECODE));
  TU_CHECK(&counts, strcmp(key, want) == 0, "key string %s", key);
  dsk__tune_shape p;
  TU_CHECK(&counts, dsk__tune_parse_key(key, &p, kb) == 0 && dsk__tune_key(&p, 1, again, sizeof again) > 0 &&
                        strcmp(again, key) == 0,
           "key round trip");
  const char *bad[] = {"", "op=sparse_mla_decode;", "op=nope;kb=0123456789abcdef;T=1;",
                       "op=mhc_prenorm;kb=0123456789abcdef;nD=16384;T=0;",
                       "op=mhc_prenorm;kb=0123456789ABCDEF;nD=16384;T=1;",
                       "op=mhc_prenorm;kb=0123456789abcdef;nD=16384;T=1;x",
                       "op=sparse_mla_decode;kb=0123456789abcdef;fmt=C;prec=accurate;H=8;w0=1;pbs0=1;w1=0;pbs1=0;T=1;",
                       "op=sparse_mla_decode;kb=0123456789abcdef;fmt=B;prec=accurate;H=129;w0=1;pbs0=1;w1=0;pbs1=0;T=1;",
                       "op=sparse_mla_decode;kb=0123456789abcdef;fmt=B;prec=accurate;H=8;w0=1;pbs0=1;w1=5;pbs1=0;T=1;"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    TU_CHECK(&counts, dsk__tune_parse_key(bad[i], &p, kb) != 0, "malformed key accepted: '%s'", bad[i]);

  /* Canonical order: heuristic first, then cpb ascending, no duplicates;
   * cpb clipped to the chunk count (2 + 6 = 8 chunks). */
  dsk_tactic t[DSK__TUNE_MAX_TACTICS], h;
  int n = dsk__tune_tactics(ctx, &s, t, DSK__TUNE_MAX_TACTICS);
  dsk__tune_heuristic(ctx, &s, &h);
  int ok = n == 6 && memcmp(&t[0], &h, sizeof h) == 0;
  int seen[40] = {0};
  for (int i = 0; i < n; i++) {
    ok = ok && t[i].v[0] >= 1 && t[i].v[0] <= 8 && !seen[t[i].v[0]] && t[i].v[1] == 32; /* H 32: the 32-head kernel */
    if (t[i].v[0] >= 1 && t[i].v[0] < 40) seen[t[i].v[0]] = 1;
  }
  for (int i = 2; ok && i < n; i++) ok = t[i].v[0] > t[i - 1].v[0] || i == 1;
  TU_CHECK(&counts, ok, "sparse decode tactic order (%d tactics, heuristic cpb %d)", n, (int)h.v[0]);
  dsk__tune_shape m;
  memset(&m, 0, sizeof m);
  m.op = DSK_OP_MHC_PRENORM;
  m.nD = 16384;
  m.T = 1;
  n = dsk__tune_tactics(ctx, &m, t, DSK__TUNE_MAX_TACTICS);
  TU_CHECK(&counts, n == 64 && t[0].v[0] == dsk_mhc_splits_heuristic(16384, 1, 1), "mhc tactics: S in 1..64 (%d)", n);

  /* A9 tie-break. */
  double m1[] = {10.0, 9.9, 9.8};
  double m2[] = {10.0, 12.0, 9.85};
  double m3[] = {-1, 5.0, 5.05, 4.99};
  double m4[] = {-1, -1};
  TU_CHECK(&counts, dsk__tune_pick(m1, 3) == 1, "tie-break: first within 1.02x (9.9 <= 1.02*9.8)");
  TU_CHECK(&counts, dsk__tune_pick(m2, 3) == 0, "tie-break: the heuristic wins within 1.02x");
  TU_CHECK(&counts, dsk__tune_pick(m3, 4) == 1, "tie-break: untimed skipped");
  TU_CHECK(&counts, dsk__tune_pick(m4, 2) == -1, "tie-break: nothing timed");
}

/* A18: 8 processes tune into one cache at once. Each tunes the shared SWA
 * width 128 and a width of its own, then exports what it holds. */
static void test_concurrent(void) {
  char *dir = tmpdir();
  if (!dir) return;
  int gate[2];
  if (pipe(gate) != 0) {
    TU_CHECK(&counts, 0, "pipe");
    return;
  }
  enum { NPROC = 8 };
  pid_t pid[NPROC];
  for (int i = 0; i < NPROC; i++) {
    pid[i] = fork();
    if (pid[i] == 0) {
      close(gate[1]);
      char c;
      if (read(gate[0], &c, 1) < 0) _exit(3); /* waits for the parent to close the pipe */
      dsk_log_set(NULL, NULL);
      dsk_ctx *ctx = ctx_in(dir);
      if (!ctx) _exit(4);
      int64_t swa[2] = {128, 192 + 64 * i};
      dsk_status st = tune_tiny_t(ctx, swa, 2, 0, NULL, 1);
      if (st != DSK_STATUS_OK) {
        fprintf(stderr, "child %d: %s: %s\n", i, dsk_status_name(st), dsk_last_error());
        _exit(5);
      }
      size_t len = 0;
      dsk_autotune_export(ctx, NULL, &len);
      char *buf = (char *)malloc(len);
      if (!buf || dsk_autotune_export(ctx, buf, &len) != DSK_STATUS_OK) _exit(6);
      char path[300];
      snprintf(path, sizeof path, "%s/child%d.export", dir, i);
      if (spit(path, buf, len - 1) != 0) _exit(7);
      dsk_ctx_destroy(ctx);
      _exit(0);
    }
  }
  close(gate[0]);
  close(gate[1]);
  int all_ok = 1;
  for (int i = 0; i < NPROC; i++) {
    int status = 0;
    if (pid[i] < 0 || waitpid(pid[i], &status, 0) != pid[i] || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      all_ok = 0;
      fprintf(stderr, "child %d failed (status 0x%x)\n", i, status);
    }
  }
  TU_CHECK(&counts, all_ok, "every tuning process finished");
  {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls %s/autotune | grep -c '\\.tmp\\.' > /dev/null", dir);
    TU_CHECK(&counts, system(cmd) != 0, "no temporary files left in %s/autotune", dir);
  }
  /* The file is valid and holds all keys: 4 shared (W 128: SWA, C4A, C128A
   * + mHC, T 1) + 3 per process. */
  dsk_ctx *ctx = ctx_in(dir);
  if (ctx) {
    dsk_tune_stats s = stats_of(ctx);
    TU_CHECK(&counts, s.loaded == 4 + 3 * NPROC && s.invalid == 0 && s.stale == 0,
             "file after 8 writers: %lld loaded (want %d), %lld invalid, %lld stale", (long long)s.loaded,
             4 + 3 * NPROC, (long long)s.invalid, (long long)s.stale);
    int64_t nkeys = 0;
    g_warns = 0;
    dsk_status st = tune_tiny_t(ctx, (const int64_t[]){128, 192 + 64 * 3}, 2, DSK_WARMUP_NO_SAVE, &nkeys, 1);
    TU_CHECK(&counts, st == DSK_STATUS_OK && nkeys == 7 && stats_of(ctx).tuned == 0,
             "nothing left to tune for process 3's keys");
    /* Converged: every process holds the file's tactic for the shared keys. */
    size_t flen = 0;
    char *fbuf = slurp(s.cache_path, &flen);
    for (int i = 0; fbuf && i < NPROC; i++) {
      char path[300];
      snprintf(path, sizeof path, "%s/child%d.export", dir, i);
      size_t n = 0;
      char *cbuf = slurp(path, &n);
      TU_CHECK(&counts, cbuf != NULL, "export of process %d", i);
      if (!cbuf) continue;
      setenv("DSK_AUTOTUNE_CACHE", "off", 1);
      dsk_ctx *mem = ctx_in(NULL);
      unsetenv("DSK_AUTOTUNE_CACHE");
      if (mem) {
        TU_CHECK_OK(&counts, dsk_autotune_import(mem, cbuf, n));
        dsk__tuner *tm = dsk__tuner_get(mem), *tf = dsk__tuner_get(ctx);
        int same = tm && tf, shared = 0;
        for (int64_t k = 0; same && k < dsk__tuner_count(tm); k++) {
          const dsk__tune_entry *e = dsk__tuner_at(tm, k);
          const dsk__tune_entry *f = dsk__tuner_find(tf, e->key);
          if (!f) {
            same = 0;
            break;
          }
          if (strstr(e->key, "w0=128;") || strstr(e->key, "op=mhc_prenorm")) {
            shared++;
            same = memcmp(&e->t, &f->t, sizeof e->t) == 0;
          }
        }
        TU_CHECK(&counts, same && shared == 4, "process %d converged on the file's tactics (%d shared keys)", i,
                 shared);
        dsk_ctx_destroy(mem);
      }
      free(cbuf);
    }
    free(fbuf);
    dsk_ctx_destroy(ctx);
  }
  rm_rf(dir);
  free(dir);
}

static void test_roundtrip(void) {
  char *dir = tmpdir();
  if (!dir) return;
  dsk_ctx *a = ctx_in(dir);
  int64_t nkeys = 0;
  TU_CHECK_OK(&counts, tune_tiny(a, NULL, 0, 0, &nkeys));
  dsk_tune_stats sa = stats_of(a);
  TU_CHECK(&counts, nkeys == 8 && sa.tuned == 8 && sa.entries == 8, "tiny model: 8 keys tuned (%lld, %lld)",
           (long long)nkeys, (long long)sa.tuned);
  TU_CHECK(&counts, sa.cache_mode == DSK_AUTOTUNE_CACHE_RW && strncmp(sa.cache_path, dir, strlen(dir)) == 0 &&
                        file_exists(sa.cache_path),
           "cache file %s", sa.cache_path);
  char want[200];
  snprintf(want, sizeof want, "%s/autotune/%s.json", dir, sa.fingerprint);
  TU_CHECK(&counts, strcmp(want, sa.cache_path) == 0, "file name <dir>/autotune/<fp>.json");
  dsk_ctx *b = ctx_in(dir);
  dsk_tune_stats sb = stats_of(b);
  TU_CHECK(&counts, sb.loaded == 8 && sb.entries == 8 && sb.stale == 0 && sb.invalid == 0, "loaded %lld",
           (long long)sb.loaded);
  dsk__tuner *ta = dsk__tuner_get(a), *tb = dsk__tuner_get(b);
  int same = dsk__tuner_count(ta) == dsk__tuner_count(tb);
  for (int64_t i = 0; same && i < dsk__tuner_count(ta); i++) {
    const dsk__tune_entry *e = dsk__tuner_at(ta, i), *f = dsk__tuner_find(tb, e->key);
    same = f && memcmp(&e->t, &f->t, sizeof e->t) == 0;
  }
  TU_CHECK(&counts, same, "same tactics after the round trip");
  /* The plan of a tuned shape reports TUNED with the entry's tactic; T 2
   * maps to bucket 2, T above the largest bucket uses it. */
  tu_rng r = tu_rng_make(11);
  int64_t Ts[] = {1, 2, 5};
  for (int i = 0; i < 3; i++) {
    mla_case c;
    mla_build(&c, DSK_KV_FORMAT_B584, Ts[i], 8, 2, 128, 64, 128, 64, &r);
    dsk_plan_info pi;
    TU_CHECK_OK(&counts, mla_plan_run(b, &c, 0, &pi));
    dsk__tune_shape s;
    dsk__sparse_mla_tune_shape(&c.d, &s);
    s.T = Ts[i] > 2 ? 2 : Ts[i];
    char key[DSK__TUNE_KEY_MAX];
    dsk__tune_key(&s, 1, key, sizeof key);
    const dsk__tune_entry *e = dsk__tuner_find(tb, key);
    TU_CHECK(&counts, e && pi.tactic_source == DSK_TACTIC_TUNED && memcmp(&pi.tactic, &e->t, sizeof e->t) == 0,
             "plan T=%lld: source %d", (long long)Ts[i], pi.tactic_source);
    mla_free(&c);
  }
  dsk_ctx_destroy(a);
  dsk_ctx_destroy(b);
  rm_rf(dir);
  free(dir);
}

/* One file problem: the loader ignores it with one warning, and the next
 * save keeps it as .bad and writes a valid file. good: a valid file of 8
 * entries (the file name depends only on the fingerprint). */
static void bad_file_case(const char *name, const char *good, void (*make)(const char *path, const char *good, size_t n)) {
  char *dir = tmpdir();
  if (!dir) return;
  g_warns = 0;
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  dsk_ctx *fp = ctx_in(NULL);
  unsetenv("DSK_AUTOTUNE_CACHE");
  char path[512], sub[256];
  snprintf(sub, sizeof sub, "%s/autotune", dir);
  snprintf(path, sizeof path, "%s/%s.json", sub, stats_of(fp).fingerprint);
  dsk_ctx_destroy(fp);
  mkdir(sub, 0755);
  make(path, good, strlen(good));
  dsk_ctx *b = ctx_in(dir);
  dsk_tune_stats sb = stats_of(b);
  TU_CHECK(&counts, sb.loaded == 0 && sb.entries == 0, "%s: nothing loaded (%lld)", name, (long long)sb.loaded);
  TU_CHECK(&counts, g_warns == 1 && strstr(g_last, "ignored"), "%s: one warning (%d): %s", name, g_warns, g_last);
  /* The next save (here of imported entries) replaces the file. */
  TU_CHECK_OK(&counts, dsk_autotune_import(b, good, strlen(good)));
  TU_CHECK_OK(&counts, dsk_autotune_save(b));
  char bad[600];
  snprintf(bad, sizeof bad, "%s.bad", path);
  TU_CHECK(&counts, file_exists(bad), "%s: kept as .bad", name);
  dsk_ctx *c = ctx_in(dir);
  dsk_tune_stats sc = stats_of(c);
  TU_CHECK(&counts, sc.loaded == 8, "%s: replaced by a valid file (%lld loaded)", name, (long long)sc.loaded);
  dsk_ctx_destroy(b);
  dsk_ctx_destroy(c);
  rm_rf(dir);
  free(dir);
}

static void make_truncated(const char *p, const char *g, size_t n) { spit(p, g, n / 2); }
static void make_empty(const char *p, const char *g, size_t n) {
  (void)g;
  (void)n;
  spit(p, "", 0);
}
static void make_garbage(const char *p, const char *g, size_t n) {
  (void)g;
  tu_rng r = tu_rng_make(5);
  char *b = (char *)malloc(n);
  for (size_t i = 0; i < n; i++) b[i] = (char)tu_int(&r, 0, 255);
  spit(p, b, n);
  free(b);
}
static void make_huge(const char *p, const char *g, size_t n) {
  /* 100 MiB (sparse): over the loader's limit, never read. */
  spit(p, g, n);
  int fd = open(p, O_WRONLY);
  if (fd >= 0) {
    if (ftruncate(fd, (off_t)100 << 20) != 0) TU_CHECK(&counts, 0, "ftruncate");
    close(fd);
  }
}
static void make_dir(const char *p, const char *g, size_t n) {
  (void)g;
  (void)n;
  mkdir(p, 0755); /* unreadable as a file */
}
static void replace_in(const char *p, const char *g, const char *from, const char *to) {
  const char *at = strstr(g, from);
  TU_CHECK(&counts, at != NULL, "'%s' in the file", from);
  if (!at) return;
  size_t n = strlen(g), a = (size_t)(at - g), fl = strlen(from), tl = strlen(to);
  char *b = (char *)malloc(n - fl + tl + 1);
  memcpy(b, g, a);
  memcpy(b + a, to, tl);
  memcpy(b + a + tl, at + fl, n - a - fl + 1);
  spit(p, b, strlen(b));
  free(b);
}
static void make_wrong_device(const char *p, const char *g, size_t n) {
  (void)n;
  replace_in(p, g, "\"device\":\t\"CPU", "\"device\":\t\"GPU");
}
static void make_wrong_version(const char *p, const char *g, size_t n) {
  (void)n;
  replace_in(p, g, "\"version\":\t\"", "\"version\":\t\"9");
}
static void make_wrong_sms(const char *p, const char *g, size_t n) {
  (void)n;
  replace_in(p, g, "\"sms\":\t", "\"sms\":\t1");
}
static void make_wrong_format(const char *p, const char *g, size_t n) {
  (void)n;
  replace_in(p, g, "\"dsk_autotune\":\t1", "\"dsk_autotune\":\t2");
}
static void make_foreign(const char *p, const char *g, size_t n) {
  (void)g;
  (void)n;
  const char *t = "{\"name\": \"some other tool\", \"entries\": {}}";
  spit(p, t, strlen(t));
}

static void test_bad_files(void) {
  char *dir = tmpdir();
  if (!dir) return;
  dsk_ctx *a = ctx_in(dir);
  TU_CHECK_OK(&counts, tune_tiny(a, NULL, 0, 0, NULL));
  char *good = slurp(stats_of(a).cache_path, NULL);
  dsk_ctx_destroy(a);
  rm_rf(dir);
  free(dir);
  TU_CHECK(&counts, good != NULL, "a good file");
  if (!good) return;
  bad_file_case("truncated", good, make_truncated);
  bad_file_case("empty", good, make_empty);
  bad_file_case("binary garbage", good, make_garbage);
  bad_file_case("huge", good, make_huge);
  bad_file_case("directory in place of the file", good, make_dir);
  bad_file_case("wrong meta.device", good, make_wrong_device);
  bad_file_case("wrong meta.version", good, make_wrong_version);
  bad_file_case("wrong meta.sms", good, make_wrong_sms);
  bad_file_case("wrong format number", good, make_wrong_format);
  bad_file_case("foreign JSON", good, make_foreign);
  free(good);
}

/* Entries of another kernel build are stale, broken tactics invalid; both
 * skipped, the rest used. */
static void test_stale_invalid(void) {
  char *dir = tmpdir();
  if (!dir) return;
  dsk_ctx *a = ctx_in(dir);
  TU_CHECK_OK(&counts, tune_tiny(a, NULL, 0, 0, NULL));
  dsk_tune_stats sa = stats_of(a);
  dsk_ctx_destroy(a);
  size_t n = 0;
  char *g = slurp(sa.cache_path, &n);
  if (!g) return;
  /* every mhc entry -> another build id; one sparse tactic -> cpb 0 */
  const char *kh = dsk_kernel_build_id(DSK_OP_MHC_PRENORM);
  for (char *p = g; (p = strstr(p, kh)) != NULL; p += 16) p[0] = p[0] == 'f' ? '0' : 'f';
  char *sk = strstr(g, "op=sparse_mla_decode");
  char *t = sk ? strstr(sk, "\"t\":\t[") : NULL;
  TU_CHECK(&counts, t != NULL, "tactic array in the file");
  if (t) t[6] = '0'; /* cpb 0 (tiny keys have at most 4 chunks: one digit) */
  spit(sa.cache_path, g, strlen(g));
  g_warns = 0;
  dsk_ctx *b = ctx_in(dir);
  dsk_tune_stats sb = stats_of(b);
  TU_CHECK(&counts, sb.stale == 2 && sb.invalid == 1 && sb.loaded == 5 && g_warns == 0,
           "stale %lld (want 2), invalid %lld (want 1), loaded %lld (want 5), warnings %d", (long long)sb.stale,
           (long long)sb.invalid, (long long)sb.loaded, g_warns);
  /* A save keeps the stale entries (another build may share the file) and
   * drops the invalid one; --gc drops the stale ones. */
  dsk__tuner *tb = dsk__tuner_get(b);
  dsk__tune_entry e = *dsk__tuner_at(tb, 0);
  e.dirty = 1;
  dsk__tuner_put(tb, &e);
  TU_CHECK_OK(&counts, dsk_autotune_save(b));
  dsk_ctx *c = ctx_in(dir);
  dsk_tune_stats sc = stats_of(c);
  TU_CHECK(&counts, sc.stale == 2 && sc.invalid == 0 && sc.loaded == 5, "after save: stale %lld invalid %lld",
           (long long)sc.stale, (long long)sc.invalid);
  int64_t files = -1, dropped = -1;
  char other[300];
  snprintf(other, sizeof other, "%s/autotune/0123456789abcdef.json", dir);
  spit(other, "{}", 2);
  TU_CHECK_OK(&counts, dsk_autotune_gc(c, &files, &dropped));
  TU_CHECK(&counts, files == 1 && dropped == 2 && !file_exists(other), "gc: %lld files, %lld entries",
           (long long)files, (long long)dropped);
  dsk_ctx *d = ctx_in(dir);
  dsk_tune_stats sd = stats_of(d);
  TU_CHECK(&counts, sd.stale == 0 && sd.loaded == 5, "after gc: stale %lld loaded %lld", (long long)sd.stale,
           (long long)sd.loaded);
  dsk_ctx_destroy(b);
  dsk_ctx_destroy(c);
  dsk_ctx_destroy(d);
  free(g);
  rm_rf(dir);
  free(dir);
}

static void test_locations(void) {
  char *dir = tmpdir();
  if (!dir) return;
  char xdg[200], home[200], path[300];
  snprintf(xdg, sizeof xdg, "%s/xdg", dir);
  snprintf(home, sizeof home, "%s/home", dir);
  mkdir(home, 0755);
  char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char *old_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  /* relative DSK_CACHE_DIR: ignored with a warning, XDG used */
  setenv("XDG_CACHE_HOME", xdg, 1);
  setenv("HOME", home, 1);
  g_warns = 0;
  setenv("DSK_CACHE_DIR", "relative/dir", 1);
  dsk_ctx *c = ctx_in(NULL);
  dsk_tune_stats s = stats_of(c);
  snprintf(path, sizeof path, "%s/dsk/autotune/", xdg);
  TU_CHECK(&counts, strncmp(s.cache_path, path, strlen(path)) == 0 && g_warns == 1 && strstr(g_last, "DSK_CACHE_DIR"),
           "relative DSK_CACHE_DIR -> XDG: %s (%d warnings)", s.cache_path, g_warns);
  TU_CHECK(&counts, !file_exists(xdg), "no folder is created before a save");
  dsk_ctx_destroy(c);
  /* relative XDG: ignored, HOME used */
  unsetenv("DSK_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "rel-xdg", 1);
  g_warns = 0;
  c = ctx_in(NULL);
  s = stats_of(c);
  snprintf(path, sizeof path, "%s/.cache/dsk/autotune/", home);
  TU_CHECK(&counts, strncmp(s.cache_path, path, strlen(path)) == 0 && g_warns == 1, "relative XDG -> HOME: %s",
           s.cache_path);
  dsk_ctx_destroy(c);
  /* no location at all: in memory, one warning */
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  g_warns = 0;
  c = ctx_in(NULL);
  s = stats_of(c);
  TU_CHECK(&counts, s.cache_path[0] == 0 && s.cache_mode == DSK_AUTOTUNE_CACHE_OFF && g_warns == 1,
           "no location: in memory (%d warnings)", g_warns);
  dsk_ctx_destroy(c);
  /* unusable location: in memory for writes, one warning, tuning still works */
  char file[300];
  snprintf(file, sizeof file, "%s/plainfile", dir);
  spit(file, "x", 1);
  g_warns = 0;
  c = ctx_in(file); /* a file where a folder should be */
  s = stats_of(c);
  TU_CHECK(&counts, s.cache_mode != DSK_AUTOTUNE_CACHE_RW && g_warns == 1, "unusable location: mode %d, %d warnings",
           s.cache_mode, g_warns);
  TU_CHECK_OK(&counts, tune_tiny(c, NULL, 0, 0, NULL));
  TU_CHECK(&counts, stats_of(c).entries == 8, "tuned in memory");
  dsk_ctx_destroy(c);
  /* ro: read, never written; off: no file */
  setenv("DSK_AUTOTUNE_CACHE", "ro", 1);
  c = ctx_in(dir);
  TU_CHECK_OK(&counts, tune_tiny(c, NULL, 0, 0, NULL));
  s = stats_of(c);
  TU_CHECK(&counts, s.cache_mode == DSK_AUTOTUNE_CACHE_RO && !file_exists(s.cache_path), "ro: no file written");
  dsk_ctx_destroy(c);
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  c = ctx_in(dir);
  s = stats_of(c);
  TU_CHECK(&counts, s.cache_mode == DSK_AUTOTUNE_CACHE_OFF && s.cache_path[0] == 0, "off: no path");
  dsk_ctx_destroy(c);
  unsetenv("DSK_AUTOTUNE_CACHE");
  /* a value that is not understood: one warning, the default */
  setenv("DSK_AUTOTUNE_CACHE", "sometimes", 1);
  g_warns = 0;
  c = ctx_in(dir);
  s = stats_of(c);
  TU_CHECK(&counts, s.cache_mode == DSK_AUTOTUNE_CACHE_RW && g_warns == 1 && strstr(g_last, "DSK_AUTOTUNE_CACHE"),
           "bad DSK_AUTOTUNE_CACHE: default rw, one warning (%d)", g_warns);
  dsk_ctx_destroy(c);
  unsetenv("DSK_AUTOTUNE_CACHE");
  /* a location where mkdir fails although access() allows it (root in
   * procfs): the context's probe folder finds out, so the cache is not
   * announced as writable */
  struct stat pst;
  if (stat("/proc/self", &pst) == 0) {
    g_warns = 0;
    c = ctx_in("/proc/dsk-no-such-folder");
    s = stats_of(c);
    TU_CHECK(&counts, s.cache_mode != DSK_AUTOTUNE_CACHE_RW && g_warns == 1,
             "cache under /proc: mode %d (must not be rw), %d warnings", s.cache_mode, g_warns);
    dsk_ctx_destroy(c);
  }
  /* a location that goes bad after the context checked it (a file where its
   * folder would be created): dsk_warmup_run warns and keeps the entries,
   * dsk_autotune_save returns the failure (`dsk tune` reports it) */
  char late[320];
  snprintf(late, sizeof late, "%s/late", dir);
  g_warns = 0;
  c = ctx_in(late);
  s = stats_of(c);
  TU_CHECK(&counts, s.cache_mode == DSK_AUTOTUNE_CACHE_RW && g_warns == 0, "late: rw at first (mode %d)", s.cache_mode);
  spit(late, "x", 1);
  TU_CHECK_OK(&counts, tune_tiny(c, NULL, 0, 0, NULL));
  TU_CHECK(&counts, g_warns == 1 && strstr(g_last, "not saved") != NULL, "late: %d warnings (last: %s)", g_warns,
           g_last);
  const dsk_status sst = dsk_autotune_save(c);
  TU_CHECK(&counts, sst == DSK_STATUS_IO && strstr(dsk_last_error(), late) != NULL, "late: save gave %s (%s)",
           dsk_status_name(sst), dsk_last_error());
  TU_CHECK(&counts, stats_of(c).entries == 8, "late: the entries stay in memory");
  dsk_ctx_destroy(c);
  unlink(late);
  if (old_home) setenv("HOME", old_home, 1);
  if (old_xdg) setenv("XDG_CACHE_HOME", old_xdg, 1);
  free(old_home);
  free(old_xdg);
  rm_rf(dir);
  free(dir);
}

static void test_export_import_force(void) {
  char *dir = tmpdir();
  if (!dir) return;
  dsk_ctx *a = ctx_in(dir);
  TU_CHECK_OK(&counts, tune_tiny(a, NULL, 0, 0, NULL));
  size_t len = 0;
  TU_CHECK_OK(&counts, dsk_autotune_export(a, NULL, &len));
  char *buf = (char *)malloc(len);
  size_t small = 10;
  TU_CHECK(&counts, dsk_autotune_export(a, buf, &small) == DSK_STATUS_INVALID_ARG && small == len,
           "export into a small buffer: INVALID_ARG and the size");
  TU_CHECK_OK(&counts, dsk_autotune_export(a, buf, &len));
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  dsk_ctx *b = ctx_in(NULL);
  unsetenv("DSK_AUTOTUNE_CACHE");
  TU_CHECK_OK(&counts, dsk_autotune_import(b, buf, strlen(buf)));
  TU_CHECK(&counts, stats_of(b).entries == 8, "import: 8 entries");
  /* another device: PARSE naming the field */
  char *other = strdup(buf);
  char *dev = strstr(other, "\"device\":\t\"CPU");
  if (dev) dev[11] = 'G';
  dsk_status st = dsk_autotune_import(b, other, strlen(other));
  TU_CHECK(&counts, st == DSK_STATUS_PARSE && strstr(dsk_last_error(), "meta.device"), "foreign import: %s: %s",
           dsk_status_name(st), dsk_last_error());
  TU_CHECK(&counts, dsk_autotune_import(b, "{", 1) == DSK_STATUS_PARSE, "broken import: PARSE");
  TU_CHECK(&counts, dsk_autotune_import(b, NULL, 0) == DSK_STATUS_PARSE, "empty import: PARSE");
  free(other);

  /* Merge on save: the file's entry wins, and the process adopts it ... */
  dsk__tuner *ta = dsk__tuner_get(a);
  const dsk__tune_entry *e0 = NULL;
  for (int64_t i = 0; i < dsk__tuner_count(ta); i++)
    if (strstr(dsk__tuner_at(ta, i)->key, "op=sparse_mla_decode") && strstr(dsk__tuner_at(ta, i)->key, "w1=128;"))
      e0 = dsk__tuner_at(ta, i);
  TU_CHECK(&counts, e0 != NULL, "a C4A / C128A entry");
  if (e0) {
    char key[DSK__TUNE_KEY_MAX];
    snprintf(key, sizeof key, "%s", e0->key);
    dsk_tactic orig = e0->t;
    dsk_ctx *c = ctx_in(dir);
    dsk__tuner *tc = dsk__tuner_get(c);
    dsk__tune_entry e = *dsk__tuner_find(tc, key);
    e.t.v[0] = orig.v[0] == 1 ? 2 : 1;
    e.dirty = 1;
    dsk__tuner_put(tc, &e);
    TU_CHECK_OK(&counts, dsk_autotune_save(c));
    TU_CHECK(&counts, dsk__tuner_find(tc, key)->t.v[0] == orig.v[0], "disk wins: the process adopts the file's tactic");
    dsk_ctx_destroy(c);
    /* ... unless DSK_AUTOTUNE=force */
    setenv("DSK_AUTOTUNE", "force", 1);
    c = ctx_in(dir);
    unsetenv("DSK_AUTOTUNE");
    tc = dsk__tuner_get(c);
    e = *dsk__tuner_find(tc, key);
    e.t.v[0] = orig.v[0] == 1 ? 2 : 1;
    e.dirty = 1;
    dsk__tuner_put(tc, &e);
    TU_CHECK_OK(&counts, dsk_autotune_save(c));
    dsk_ctx_destroy(c);
    c = ctx_in(dir);
    tc = dsk__tuner_get(c);
    TU_CHECK(&counts, dsk__tuner_find(tc, key) && dsk__tuner_find(tc, key)->t.v[0] == (orig.v[0] == 1 ? 2 : 1),
             "force: the process's entry replaces the file's");
    dsk_ctx_destroy(c);
  }
  free(buf);
  dsk_ctx_destroy(a);
  dsk_ctx_destroy(b);
  rm_rf(dir);
  free(dir);
}

typedef struct miss_list {
  int n;
  char key[8][DSK__TUNE_KEY_MAX];
  int64_t T[8], count[8];
} miss_list;
static void on_miss(const dsk_autotune_miss *m, void *user) {
  miss_list *l = (miss_list *)user;
  if (l->n < 8) {
    snprintf(l->key[l->n], sizeof l->key[0], "%s", m->key);
    l->T[l->n] = m->T;
    l->count[l->n] = m->count;
    l->n++;
  }
}

static void test_lookups(void) {
  tu_rng r = tu_rng_make(3);
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  /* Misses: counted per key (default buckets), listed, one warning per op
   * while nothing is tuned; run calls never tune (A10). */
  dsk_ctx *c = ctx_in(NULL);
  g_warns = 0;
  for (int rep = 0; rep < 3; rep++) {
    mla_case m;
    mla_build(&m, DSK_KV_FORMAT_B584, 3, 8, 1, 100, 16, 0, 0, &r);
    dsk_plan_info pi;
    TU_CHECK_OK(&counts, mla_plan_run(c, &m, 1, &pi));
    TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_HEURISTIC, "untuned: heuristic");
    mla_free(&m);
  }
  dsk_tune_stats s = stats_of(c);
  miss_list ml;
  memset(&ml, 0, sizeof ml);
  TU_CHECK_OK(&counts, dsk_autotune_misses(c, on_miss, &ml));
  TU_CHECK(&counts, s.misses == 3 && s.hits == 0 && s.miss_keys == 1 && ml.n == 1 && ml.T[0] == 4 && ml.count[0] == 3 &&
                        strstr(ml.key[0], "w0=100;pbs0=16;"),
           "misses %lld, keys %lld, T %lld, count %lld", (long long)s.misses, (long long)s.miss_keys,
           (long long)ml.T[0], (long long)ml.count[0]);
  TU_CHECK(&counts, g_warns == 1 && strstr(g_last, "no tuned entries"), "one warning while untuned (%d): %s", g_warns,
           g_last);
  TU_CHECK(&counts, s.entries == 0 && s.tuned == 0, "run calls never tune");
  /* Once the op has entries, each missing key warns once. */
  TU_CHECK_OK(&counts, tune_tiny(c, NULL, 0, DSK_WARMUP_NO_SAVE, NULL));
  g_warns = 0;
  for (int rep = 0; rep < 2; rep++) {
    mla_case m;
    mla_build(&m, DSK_KV_FORMAT_B584, 1, 8, 1, 100, 32, 0, 0, &r);
    dsk_plan_info pi;
    TU_CHECK_OK(&counts, mla_plan_run(c, &m, 1, &pi));
    mla_free(&m);
  }
  TU_CHECK(&counts, g_warns == 1 && strstr(g_last, "autotune miss") && strstr(g_last, "pbs0=32"),
           "one warning per missing key (%d): %s", g_warns, g_last);
  TU_CHECK_OK(&counts, dsk_autotune_reset_stats(c));
  s = stats_of(c);
  TU_CHECK(&counts, s.misses == 0 && s.miss_keys == 0 && s.entries == 8, "reset_stats");

  /* A5: a width-bucket entry re-validated for a narrower shape. Key C128A
   * w1 = 384 (chunks 2 + 6 = 8), stored cpb 8; a run with w1 = 300 (2 + 5 =
   * 7 chunks) clamps it to 7. An entry that cannot fit counts invalid. */
  dsk__tuner *t = dsk__tuner_get(c);
  mla_case m;
  mla_build(&m, DSK_KV_FORMAT_B584, 1, 8, 2, 128, 64, 384, 2, &r);
  dsk__tune_shape sh;
  dsk__sparse_mla_tune_shape(&m.d, &sh);
  char key[DSK__TUNE_KEY_MAX];
  dsk__tune_key(&sh, 1, key, sizeof key);
  dsk__tune_entry e;
  memset(&e, 0, sizeof e);
  e.key = key;
  e.t.op = DSK_OP_SPARSE_MLA_DECODE;
  e.t.version = DSK_SPARSE_MLA_TACTIC_VERSION;
  e.t.v[0] = 8;
  e.t.v[1] = 16;
  TU_CHECK_OK(&counts, dsk__tuner_put(t, &e));
  mla_free(&m);
  mla_build(&m, DSK_KV_FORMAT_B584, 1, 8, 2, 128, 64, 300, 2, &r);
  dsk_plan_info pi;
  TU_CHECK_OK(&counts, mla_plan_run(c, &m, 1, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_TUNED && pi.tactic.v[0] == 7, "A5 clamp: source %d cpb %d",
           pi.tactic_source, (int)pi.tactic.v[0]);
  mla_free(&m);
  e.t.v[1] = 24; /* heads per CTA 24: never valid */
  TU_CHECK_OK(&counts, dsk__tuner_put(t, &e));
  mla_build(&m, DSK_KV_FORMAT_B584, 1, 8, 2, 128, 64, 384, 2, &r);
  TU_CHECK_OK(&counts, mla_plan_run(c, &m, 1, &pi));
  s = stats_of(c);
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_HEURISTIC && s.invalid == 1, "invalid entry: heuristic (%lld)",
           (long long)s.invalid);
  mla_free(&m);
  /* A forced tactic never consults the tuner. */
  mla_build(&m, DSK_KV_FORMAT_B584, 1, 8, 1, 128, 64, 0, 0, &r);
  m.d.tactic.op = DSK_OP_SPARSE_MLA_DECODE;
  m.d.tactic.version = DSK_SPARSE_MLA_TACTIC_VERSION;
  m.d.tactic.v[0] = 1;
  m.d.tactic.v[1] = 16;
  TU_CHECK_OK(&counts, mla_plan_run(c, &m, 1, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_FORCED, "forced");
  mla_free(&m);
  dsk_ctx_destroy(c);

  /* REQUIRE_HIT: a miss is DSK_STATUS_TUNE_MISS in plan and run; tuned
   * shapes and forced tactics pass. */
  setenv("DSK_AUTOTUNE_REQUIRE_HIT", "1", 1);
  c = ctx_in(NULL);
  mla_build(&m, DSK_KV_FORMAT_B584, 2, 8, 2, 128, 64, 128, 64, &r);
  dsk_status st = mla_plan_run(c, &m, 0, &pi);
  TU_CHECK(&counts, st == DSK_STATUS_TUNE_MISS && strstr(dsk_last_error(), "REQUIRE_HIT"), "REQUIRE_HIT plan: %s: %s",
           dsk_status_name(st), dsk_last_error());
  m.d.workspace_bytes = 0;
  st = dsk_sparse_mla_decode(c, &m.d);
  TU_CHECK(&counts, st == DSK_STATUS_TUNE_MISS, "REQUIRE_HIT run: %s", dsk_status_name(st));
  TU_CHECK_OK(&counts, tune_tiny(c, NULL, 0, DSK_WARMUP_NO_SAVE, NULL));
  TU_CHECK_OK(&counts, mla_plan_run(c, &m, 1, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_TUNED, "REQUIRE_HIT after warmup: tuned");
  mla_free(&m);
  /* mHC: prenorm plan from the tuned entry; pre re-derives the same S. */
  dsk_mhc_prenorm_desc pd;
  dsk_mhc_prenorm_desc_init(&pd);
  pd.T = 2;
  pd.D = 64;
  pd.nD = 256;
  dsk_bf16 *R = (dsk_bf16 *)calloc(2 * 256, 2);
  float *fn = (float *)calloc(24 * 256, 4);
  pd.R = R;
  pd.R_stride = 256;
  pd.fn = fn;
  TU_CHECK_OK(&counts, dsk_mhc_prenorm_plan(c, &pd, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_TUNED && pi.tactic.v[0] == 1, "mhc plan tuned (S %d)",
           (int)pi.tactic.v[0]);
  pd.T = 3; /* above the largest bucket (2): uses it */
  TU_CHECK_OK(&counts, dsk_mhc_prenorm_plan(c, &pd, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_TUNED, "mhc T above the buckets: tuned");
  pd.D = 128;
  pd.nD = 512; /* an untuned nD: TUNE_MISS */
  pd.R_stride = 512;
  TU_CHECK(&counts, dsk_mhc_prenorm_plan(c, &pd, &pi) == DSK_STATUS_TUNE_MISS, "mhc REQUIRE_HIT miss");
  pd.fixed_splits = 2;
  TU_CHECK_OK(&counts, dsk_mhc_prenorm_plan(c, &pd, &pi));
  free(R);
  free(fn);
  dsk_ctx_destroy(c);
  unsetenv("DSK_AUTOTUNE_REQUIRE_HIT");

  /* DSK_AUTOTUNE=0: warmup only pre-runs. */
  setenv("DSK_AUTOTUNE", "0", 1);
  c = ctx_in(NULL);
  TU_CHECK_OK(&counts, tune_tiny(c, NULL, 0, 0, NULL));
  s = stats_of(c);
  TU_CHECK(&counts, s.entries == 0 && s.tuned == 0, "DSK_AUTOTUNE=0: nothing timed");
  dsk_ctx_destroy(c);
  unsetenv("DSK_AUTOTUNE");
  unsetenv("DSK_AUTOTUNE_CACHE");
}

static void test_mhc_tuned_consistency(void) {
  /* A tuned S other than the heuristic's: prenorm and pre agree on it. */
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  dsk_ctx *c = ctx_in(NULL);
  unsetenv("DSK_AUTOTUNE_CACHE");
  const int64_t D = 512, nD = 2048, T = 3; /* S_max 8 */
  int64_t hS = dsk_mhc_splits_heuristic(nD, T, 1);
  dsk__tune_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.op = DSK_OP_MHC_PRENORM;
  sh.nD = nD;
  sh.T = 4;
  char key[DSK__TUNE_KEY_MAX];
  dsk__tune_key(&sh, 1, key, sizeof key);
  dsk__tune_entry e;
  memset(&e, 0, sizeof e);
  e.key = key;
  e.t.op = DSK_OP_MHC_PRENORM;
  e.t.version = DSK_MHC_TACTIC_VERSION;
  e.t.v[0] = hS == 5 ? 6 : 5;
  TU_CHECK_OK(&counts, dsk__tuner_put(dsk__tuner_get(c), &e));
  tu_rng r = tu_rng_make(9);
  dsk_bf16 *R = (dsk_bf16 *)malloc((size_t)(T * nD) * 2);
  tu_fill_bf16_normal(&r, R, (size_t)(T * nD), 1.0);
  float *fn = (float *)malloc((size_t)(24 * nD) * 4);
  for (int64_t i = 0; i < 24 * nD; i++) fn[i] = (float)(tu_normal(&r) * 0.01);
  dsk_mhc_prenorm_desc pd;
  dsk_mhc_prenorm_desc_init(&pd);
  pd.T = T;
  pd.D = D;
  pd.nD = nD;
  pd.R = R;
  pd.R_stride = nD;
  pd.fn = fn;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&counts, dsk_mhc_prenorm_plan(c, &pd, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_TUNED && pi.tactic.v[0] == e.t.v[0], "prenorm uses the tuned S");
  float *part = (float *)calloc(1, (size_t)pi.workspace_bytes);
  pd.partials = part;
  pd.partials_bytes = pi.workspace_bytes;
  TU_CHECK_OK(&counts, dsk_mhc_prenorm(c, &pd));
  dsk_mhc_pre_desc pr;
  dsk_mhc_pre_desc_init(&pr);
  pr.T = T;
  pr.D = D;
  pr.nD = nD;
  pr.partials = part;
  pr.partials_bytes = pi.workspace_bytes; /* exactly the tuned S's size */
  pr.R = R;
  pr.R_stride = nD;
  float scale[3] = {1, 1, 1}, base[24] = {0};
  pr.scale = scale;
  pr.base = base;
  dsk_bf16 *y = (dsk_bf16 *)malloc((size_t)(T * D) * 2);
  float post[12], C[48];
  pr.y = y;
  pr.y_stride = D;
  pr.post = post;
  pr.C = C;
  TU_CHECK_OK(&counts, dsk_mhc_pre(c, &pr));
  /* The same as pinning the tuned S in both calls. */
  dsk_bf16 *y2 = (dsk_bf16 *)malloc((size_t)(T * D) * 2);
  float post2[12], C2[48];
  float *part2 = (float *)calloc(1, (size_t)pi.workspace_bytes);
  pd.fixed_splits = e.t.v[0];
  pd.partials = part2;
  TU_CHECK_OK(&counts, dsk_mhc_prenorm(c, &pd));
  pr.fixed_splits = e.t.v[0];
  pr.partials = part2;
  pr.y = y2;
  pr.post = post2;
  pr.C = C2;
  TU_CHECK_OK(&counts, dsk_mhc_pre(c, &pr));
  TU_CHECK(&counts, memcmp(y, y2, (size_t)(T * D) * 2) == 0 && memcmp(post, post2, sizeof post) == 0 &&
                        memcmp(C, C2, sizeof C) == 0,
           "mhc_pre with fixed_splits 0 follows the prenorm's tuned S");
  free(y2);
  free(part2);
  free(R);
  free(fn);
  free(part);
  free(y);
  dsk_ctx_destroy(c);
}

/* ------------------------------------------------------------ MoE keys */
/* A grouped-GEMM descriptor for plan calls: every pointer is one aligned
 * dummy buffer (plans validate pointers, never read them). */
static _Alignas(64) unsigned char g_dummy[256];
static dsk_moe_gemm_desc gemm_desc(int64_t N, int64_t K, int64_t E, int64_t A, int64_t msum, int64_t expected_m) {
  dsk_moe_gemm_desc g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.M_sum = msum;
  g.N = N;
  g.K = K;
  g.E_local = E;
  g.A_used = A;
  g.expected_m = expected_m;
  g.A = g_dummy;
  g.A_stride = K;
  g.sfa.words = (const int32_t *)g_dummy;
  g.sfa.groups = 1;
  g.sfa.mn = msum;
  g.sfa.sf_k = K / 128;
  g.m_indices = (const int32_t *)g_dummy;
  g.b_fmt = DSK_MOE_W_MXFP4;
  g.B = g_dummy;
  g.sfb.words = (const int32_t *)g_dummy;
  g.sfb.groups = E;
  g.sfb.mn = N;
  g.sfb.sf_k = K / 32;
  g.D = (dsk_bf16 *)g_dummy;
  g.D_stride = N;
  return g;
}

static dsk_dense_gemm_desc dense_desc(int64_t M, int64_t N, int64_t K) {
  dsk_dense_gemm_desc g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = g_dummy;
  g.A_stride = K;
  g.sfa.words = (const int32_t *)g_dummy;
  g.sfa.groups = 1;
  g.sfa.mn = M;
  g.sfa.sf_k = K / 128;
  g.B = g_dummy;
  g.sfb.words = (const int32_t *)g_dummy;
  g.sfb.groups = 1;
  g.sfb.mn = N;
  g.sfb.sf_k = K / 128;
  g.D = (dsk_bf16 *)g_dummy;
  g.D_stride = N;
  return g;
}

static dsk__tune_shape moe_shape(int64_t N, int64_t K, int64_t E, int64_t A, int64_t topk, int64_t T) {
  dsk__tune_shape s;
  memset(&s, 0, sizeof s);
  s.op = DSK_OP_MOE_GEMM;
  s.wfmt = DSK_MOE_W_MXFP4;
  s.N = N;
  s.K = K;
  s.E = E;
  s.A = A;
  s.topk = topk;
  s.T = T;
  return s;
}

static void put_entry(dsk_ctx *c, const dsk__tune_shape *s, int32_t bm, int32_t bn, int32_t sp) {
  char key[DSK__TUNE_KEY_MAX];
  TU_CHECK(&counts, dsk__tune_key(s, 1, key, sizeof key) > 0, "key of op %d", s->op);
  dsk__tune_entry e;
  memset(&e, 0, sizeof e);
  e.key = key;
  e.t.op = s->op;
  e.t.version = dsk__tune_tactic_version(s->op);
  e.t.v[0] = bm;
  e.t.v[1] = bn;
  e.t.v[2] = sp;
  e.us = e.us2 = e.uh = 1;
  e.dirty = 1;
  TU_CHECK_OK(&counts, dsk__tuner_put(dsk__tuner_get(c), &e));
}

static void test_moe_keys(void) {
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  dsk_ctx *c = ctx_in(NULL);
  unsetenv("DSK_AUTOTUNE_CACHE");
  if (!c) return;
  const char *kb = dsk_kernel_build_id(DSK_OP_MOE_GEMM), *kd = dsk_kernel_build_id(DSK_OP_MOE_DENSE_GEMM);
  TU_CHECK(&counts, kb && strlen(kb) == 16 && kd && strlen(kd) == 16, "kernel build ids of the MoE GEMMs");
  /* Key strings (A15): topk and T after the base key; round trip. */
  dsk__tune_shape s = moe_shape(2048, 4096, 256, 64, 6, 24), p;
  char key[DSK__TUNE_KEY_MAX], want[DSK__TUNE_KEY_MAX], again[DSK__TUNE_KEY_MAX], k17[17];
  TU_CHECK(&counts, dsk__tune_key(&s, 1, key, sizeof key) > 0, "moe key");
  snprintf(want, sizeof want, "op=moe_gemm;kb=%s;fmt=mxfp4;N=2048;K=4096;E=256;A=64;topk=6;T=24;", kb);
  TU_CHECK(&counts, strcmp(key, want) == 0, "moe key string %s", key);
  TU_CHECK(&counts, dsk__tune_parse_key(key, &p, k17) == 0 && memcmp(&p, &s, sizeof s) == 0 &&
                        dsk__tune_key(&p, 1, again, sizeof again) > 0 && strcmp(again, key) == 0,
           "moe key round trip");
  TU_CHECK(&counts, dsk__tune_key(&s, 0, again, sizeof again) > 0 && strstr(key, again) == key &&
                        strcmp(again + strlen(again) - 5, "A=64;") == 0 && dsk__tune_rows(&s) == 144,
           "moe base key stops before topk (%s); rows = T*topk", again);
  dsk__tune_shape dn;
  memset(&dn, 0, sizeof dn);
  dn.op = DSK_OP_MOE_DENSE_GEMM;
  dn.N = 2048;
  dn.K = 4096;
  dn.T = 8;
  TU_CHECK(&counts, dsk__tune_key(&dn, 1, key, sizeof key) > 0, "dense key");
  snprintf(want, sizeof want, "op=dense_fp8_gemm;kb=%s;N=2048;K=4096;T=8;", kd);
  TU_CHECK(&counts, strcmp(key, want) == 0 && dsk__tune_parse_key(key, &p, k17) == 0 && memcmp(&p, &dn, sizeof dn) == 0,
           "dense key string and round trip: %s", key);
  const char *bad[] = {"op=moe_gemm;kb=0123456789abcdef;fmt=fp4;N=2048;K=4096;E=256;A=64;topk=6;T=24;",
                       "op=moe_gemm;kb=0123456789abcdef;fmt=mxfp4;N=2000;K=4096;E=256;A=64;topk=6;T=24;",
                       "op=moe_gemm;kb=0123456789abcdef;fmt=mxfp4;N=2048;K=4096;E=256;A=96;topk=6;T=24;",
                       "op=moe_gemm;kb=0123456789abcdef;fmt=mxfp4;N=2048;K=4096;E=2000;A=64;topk=6;T=24;",
                       "op=moe_gemm;kb=0123456789abcdef;fmt=mxfp4;N=2048;K=4096;E=256;A=64;topk=17;T=24;",
                       "op=moe_gemm;kb=0123456789abcdef;fmt=mxfp4;N=2048;K=4096;E=256;A=64;T=24;",
                       "op=dense_fp8_gemm;kb=0123456789abcdef;N=2048;K=4000;T=8;",
                       "op=dense_fp8_gemm;kb=0123456789abcdef;N=2048;K=4096;T=0;"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    TU_CHECK(&counts, dsk__tune_parse_key(bad[i], &p, k17) != 0, "malformed key accepted: '%s'", bad[i]);

  /* Tactic sets (autotune.md §1), heuristic first, each valid (A5). */
  dsk_tactic t[DSK__TUNE_MAX_TACTICS], h;
  struct {
    dsk__tune_shape s;
    int want;
  } sets[] = {{moe_shape(2048, 4096, 256, 64, 6, 1), 9},   /* BLOCK_M 64; split 1, 2, 4 */
              {moe_shape(2048, 4096, 256, 128, 6, 4096), 18},
              {moe_shape(512, 384, 8, 128, 2, 8), 6},      /* K 384: split 1 only */
              {dn, 36}};
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
    int n = dsk__tune_tactics(c, &sets[i].s, t, DSK__TUNE_MAX_TACTICS);
    dsk__tune_heuristic(c, &sets[i].s, &h);
    int ok = n == sets[i].want && memcmp(&t[0], &h, sizeof h) == 0;
    for (int j = 0; ok && j < n; j++) {
      dsk_tactic x = t[j];
      ok = dsk__tune_tactic_fix(&sets[i].s, &x) && memcmp(&x, &t[j], sizeof x) == 0;
      for (int k = 0; ok && k < j; k++) ok = memcmp(&t[k], &t[j], sizeof x) != 0;
    }
    TU_CHECK(&counts, ok, "GEMM tactic set %zu: %d tactics (want %d), heuristic first, valid, distinct", i, n,
             sets[i].want);
  }
  dsk_tactic x = t[0];
  dsk__tune_shape a64 = moe_shape(2048, 4096, 256, 64, 6, 8), k384 = moe_shape(512, 384, 8, 128, 2, 8);
  dsk__tune_heuristic(c, &a64, &x);
  TU_CHECK(&counts, x.op == DSK_OP_MOE_GEMM && x.v[0] == 64, "heuristic BLOCK_M 64 for A_used 64");
  x.v[0] = 128;
  TU_CHECK(&counts, !dsk__tune_tactic_fix(&a64, &x), "A5: BLOCK_M 128 does not divide A_used 64");
  dsk__tune_heuristic(c, &k384, &x);
  x.v[2] = 4;
  TU_CHECK(&counts, !dsk__tune_tactic_fix(&k384, &x), "A5: split-K 4 does not fit K 384");

  /* Lookups. dsk_moe_gemm knows expected_m = T*topk, not topk: its lookup
   * matches the group on rows. Entries of FC1 (N 2048, K 4096, E 256, A
   * 64, top-6) at T 8 and 16 (rows 48 and 96). */
  dsk__tune_shape e8 = moe_shape(2048, 4096, 256, 64, 6, 8), e16 = moe_shape(2048, 4096, 256, 64, 6, 16);
  put_entry(c, &e8, 64, 256, 4);
  put_entry(c, &e16, 64, 64, 2);
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  struct {
    int64_t em;
    int32_t bn;
  } lk[] = {{6 * 5, 256}, {48, 256}, {49, 64}, {6 * 16, 64}, {6 * 40, 64}};
  for (size_t i = 0; i < sizeof lk / sizeof lk[0]; i++) {
    dsk_moe_gemm_desc g = gemm_desc(2048, 4096, 256, 64, 384, lk[i].em);
    TU_CHECK_OK(&counts, dsk_moe_gemm_plan(c, &g, &pi));
    TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_TUNED && pi.tactic.v[1] == lk[i].bn,
             "moe_gemm expected_m %lld: source %d BLOCK_N %d (want tuned %d)", (long long)lk[i].em, pi.tactic_source,
             (int)pi.tactic.v[1], (int)lk[i].bn);
  }
  dsk_moe_gemm_desc g = gemm_desc(2048, 4096, 256, 128, 384, 30); /* A_used 128: another key */
  TU_CHECK_OK(&counts, dsk_moe_gemm_plan(c, &g, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_HEURISTIC && pi.tactic.v[0] == 128, "A_used 128: heuristic");
  TU_CHECK(&counts, stats_of(c).misses == 0 && stats_of(c).hits == 0, "plan calls count nothing");
  /* A forced tactic never consults the tuner. */
  g = gemm_desc(2048, 4096, 256, 64, 384, 30);
  g.tactic.op = DSK_OP_MOE_GEMM;
  g.tactic.version = DSK_MOE_GEMM_TACTIC_VERSION;
  g.tactic.v[0] = 64;
  g.tactic.v[1] = 128;
  g.tactic.v[2] = 1;
  TU_CHECK_OK(&counts, dsk_moe_gemm_plan(c, &g, &pi));
  TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_FORCED && pi.tactic.v[1] == 128, "moe_gemm forced");
  /* dsk_op_supported never counts. */
  int sup = 0;
  char why[256];
  g = gemm_desc(2048, 4096, 256, 128, 384, 30);
  dsk_op_supported(c, DSK_OP_MOE_GEMM, &g, &sup, why, sizeof why);
  TU_CHECK(&counts, sup == 1 && stats_of(c).misses == 0, "dsk_op_supported: served, nothing counted");
  /* Run-call counting through the tuner: hits; misses listed under the
   * default buckets (topk known: T; a dsk_moe_gemm call: topk=1, T = rows). */
  dsk_tactic hh, out;
  int src = 0;
  dsk__tune_shape q = moe_shape(2048, 4096, 256, 64, 6, 5);
  dsk__tune_heuristic(c, &q, &hh);
  TU_CHECK_OK(&counts, dsk__tune_resolve(c, &q, &hh, DSK__TUNE_RUN, &out, &src));
  TU_CHECK(&counts, src == DSK_TACTIC_TUNED && out.v[1] == 256 && stats_of(c).hits == 1, "run lookup T 5 -> bucket 8");
  q = moe_shape(2048, 4096, 256, 128, 6, 5);
  dsk__tune_heuristic(c, &q, &hh);
  TU_CHECK_OK(&counts, dsk__tune_resolve(c, &q, &hh, DSK__TUNE_RUN, &out, &src));
  q.topk = 0;
  q.T = 30; /* rows */
  TU_CHECK_OK(&counts, dsk__tune_resolve(c, &q, &hh, DSK__TUNE_RUN, &out, &src));
  miss_list ml;
  memset(&ml, 0, sizeof ml);
  TU_CHECK_OK(&counts, dsk_autotune_misses(c, on_miss, &ml));
  TU_CHECK(&counts, ml.n == 2 && strstr(ml.key[0], ";A=128;topk=6;T=8;") && strstr(ml.key[1], ";A=128;topk=1;T=32;"),
           "moe misses listed: %s | %s", ml.n > 0 ? ml.key[0] : "", ml.n > 1 ? ml.key[1] : "");
  /* A5 at use: an entry whose BLOCK_M does not divide A_used counts invalid. */
  dsk__tune_shape bad128 = moe_shape(1024, 4096, 256, 64, 6, 8);
  put_entry(c, &bad128, 128, 128, 1);
  q = moe_shape(1024, 4096, 256, 64, 6, 8);
  dsk__tune_heuristic(c, &q, &hh);
  TU_CHECK_OK(&counts, dsk__tune_resolve(c, &q, &hh, DSK__TUNE_RUN, &out, &src));
  TU_CHECK(&counts, src == DSK_TACTIC_HEURISTIC && out.v[0] == 64 && stats_of(c).invalid == 1,
           "A5: stored BLOCK_M 128 for A_used 64 -> heuristic, invalid");
  /* Dense: T = M bucketed. */
  dn.T = 4;
  put_entry(c, &dn, 32, 64, 4);
  for (int64_t M = 1; M <= 6; M += 5) {
    dsk_dense_gemm_desc dg = dense_desc(M, 2048, 4096);
    TU_CHECK_OK(&counts, dsk_dense_fp8_gemm_plan(c, &dg, &pi));
    TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_TUNED && pi.tactic.v[0] == 32 && pi.tactic.v[2] == 4,
             "dense M %lld: tuned", (long long)M);
  }
  /* Export / import keeps the MoE entries (the file validation knows them);
   * the invalid one (BLOCK_M 128 for A 64) is dropped. */
  size_t len = 0;
  TU_CHECK_OK(&counts, dsk_autotune_export(c, NULL, &len));
  char *buf = (char *)malloc(len);
  TU_CHECK_OK(&counts, dsk_autotune_export(c, buf, &len));
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  dsk_ctx *c2 = ctx_in(NULL);
  unsetenv("DSK_AUTOTUNE_CACHE");
  if (c2 && buf) {
    TU_CHECK_OK(&counts, dsk_autotune_import(c2, buf, len - 1));
    dsk_tune_stats s2 = stats_of(c2);
    TU_CHECK(&counts, s2.loaded == 3 && s2.invalid == 1 && s2.entries == 3,
             "import of MoE entries: %lld loaded, %lld invalid", (long long)s2.loaded, (long long)s2.invalid);
    g = gemm_desc(2048, 4096, 256, 64, 384, 49);
    TU_CHECK_OK(&counts, dsk_moe_gemm_plan(c2, &g, &pi));
    TU_CHECK(&counts, pi.tactic_source == DSK_TACTIC_TUNED && pi.tactic.v[1] == 64, "imported moe entry used");
  }
  free(buf);
  dsk_ctx_destroy(c2);
  dsk_ctx_destroy(c);
}

/* ------------------------------------------------------- capture (A10) */
typedef struct cap_prog {
  int64_t calls, skipped_capture, tuned, other;
} cap_prog;
static void on_cap_progress(const dsk_warmup_progress *p, void *user) {
  cap_prog *g = (cap_prog *)user;
  g->calls++;
  if (p->action == DSK_WARMUP_SKIPPED && p->reason && strstr(p->reason, "capturing a CUDA graph") &&
      p->us_best < 0 && p->tactic.op == (int32_t)p->item->op)
    g->skipped_capture++;
  else if (p->action == DSK_WARMUP_TUNED)
    g->tuned++;
  else
    g->other++;
}
static int fake_capturing(dsk_ctx *ctx, void *stream) {
  (void)ctx;
  (void)stream;
  return 1;
}

/* MoE GEMM timing allocates the weights of the experts the synthetic
 * routing touches, not of all E (timing.c, moe_layout): a key whose full
 * expert set alone exceeds DSK_AUTOTUNE_MAX_MB is timed when its touched
 * experts fit (DSv4-Flash FC1 at TP 1 was skipped at 2.2 GB), and a key
 * whose touched experts do not fit is still skipped with the reason. */
static void test_moe_timing_budget(void) {
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  setenv("DSK_AUTOTUNE_MAX_MB", "16", 1);
  dsk_ctx *c = ctx_in(NULL);
  unsetenv("DSK_AUTOTUNE_CACHE");
  unsetenv("DSK_AUTOTUNE_MAX_MB");
  if (!c) return;
  dsk__tune_scratch *sc = dsk__tune_scratch_new(c);
  TU_CHECK(&counts, sc != NULL, "scratch");
  if (sc) {
    /* E 256 x N 2048 x K 256 MXFP4: 64 MiB of weights for all experts; T 1 touches 6 (1.5 MiB);
     * 6 tactics (BLOCK_M 64; BLOCK_N 64, 128, 256; split 1, 2: K / 4 is not a multiple of 128) */
    dsk__tune_shape s = moe_shape(2048, 256, 256, 64, 6, 1);
    dsk__tune_result r;
    TU_CHECK_OK(&counts, dsk__tune_time_key(c, sc, &s, &r));
    TU_CHECK(&counts, r.skip_reason[0] == 0 && r.num_tactics == 6 && r.us_best > 0 && r.us_heuristic > 0,
             "E 256 key at T 1 timed within 16 MiB (skip '%s', %d tactics)", r.skip_reason, r.num_tactics);
    /* T 64: about 200 experts touched (50 MiB of weights), over the budget */
    s = moe_shape(2048, 256, 256, 64, 6, 64);
    TU_CHECK_OK(&counts, dsk__tune_time_key(c, sc, &s, &r));
    TU_CHECK(&counts, r.num_tactics == 0 && strstr(r.skip_reason, "DSK_AUTOTUNE_MAX_MB 16") != NULL,
             "E 256 key at T 64 skipped over the budget: '%s'", r.skip_reason);
    /* expert parallelism (E_local 4 < topk 6: repeats, every local expert touched) */
    s = moe_shape(2048, 256, 4, 64, 6, 2);
    TU_CHECK_OK(&counts, dsk__tune_time_key(c, sc, &s, &r));
    TU_CHECK(&counts, r.skip_reason[0] == 0 && r.num_tactics == 6, "E_local 4 < topk key timed ('%s')",
             r.skip_reason);
    dsk__tune_scratch_free(sc);
  }
  dsk_ctx_destroy(c);
}

static void test_capture(void) {
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  setenv("DSK_AUTOTUNE_REQUIRE_HIT", "1", 1); /* a capture never makes warmup fail */
  dsk_ctx *c = ctx_in(NULL);
  unsetenv("DSK_AUTOTUNE_CACHE");
  if (!c) return;
  TU_CHECK(&counts, dsk__tune_stream_capturing(c) == 0, "cpu-ref: never capturing (no slot)");
  dsk_model_desc m = tiny_model();
  m.hidden_size = 128; /* MoE GEMM shapes too */
  dsk_serving_desc sv;
  dsk_serving_desc_init(&sv);
  sv.max_tokens = 2;
  sv.max_context = 4096;
  dsk_warmup_list *l = NULL;
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l));
  const int64_t n = dsk_warmup_list_size(l);
  int64_t nmoe = 0;
  for (int64_t i = 0; i < n; i++) {
    dsk_warmup_item it;
    memset(&it, 0, sizeof it);
    it.struct_size = sizeof it;
    dsk_warmup_list_item(l, i, &it);
    nmoe += it.op == DSK_OP_MOE_GEMM || it.op == DSK_OP_MOE_DENSE_GEMM;
  }
  TU_CHECK(&counts, n == 16 && nmoe == 8, "tiny list with MoE: %lld keys, %lld MoE", (long long)n, (long long)nmoe);
  /* Capturing (the flag): nothing timed or run, every key a miss. */
  cap_prog g;
  memset(&g, 0, sizeof g);
  g_warns = 0;
  double t0 = tu_now_us();
  TU_CHECK_OK(&counts, dsk__warmup_run(c, l, 0, on_cap_progress, &g, 1));
  double dt = (tu_now_us() - t0) * 1e-6;
  dsk_tune_stats s = stats_of(c);
  TU_CHECK(&counts, g.calls == n && g.skipped_capture == n && s.tuned == 0 && s.entries == 0 && s.misses == n &&
                        s.miss_keys == n && s.hits == 0,
           "capture: %lld of %lld skipped, %lld tuned, %lld entries, %lld misses (%.3f s)", (long long)g.skipped_capture,
           (long long)n, (long long)s.tuned, (long long)s.entries, (long long)s.misses, dt);
  TU_CHECK(&counts, strstr(g_last, "capturing a CUDA graph") != NULL, "one warning names the capture: %s", g_last);
  /* Not capturing: tuned; capturing again with FORCE keeps every entry
   * (no miss, no timing). */
  memset(&g, 0, sizeof g);
  TU_CHECK_OK(&counts, dsk__warmup_run(c, l, DSK_WARMUP_NO_SAVE, on_cap_progress, &g, 0));
  TU_CHECK(&counts, g.tuned == n && stats_of(c).entries == n, "warmup outside a capture tunes %lld", (long long)g.tuned);
  size_t len1 = 0, len2 = 0;
  dsk_autotune_export(c, NULL, &len1);
  char *before = (char *)malloc(len1), *after = NULL;
  dsk_autotune_export(c, before, &len1);
  TU_CHECK_OK(&counts, dsk_autotune_reset_stats(c));
  memset(&g, 0, sizeof g);
  TU_CHECK_OK(&counts, dsk__warmup_run(c, l, DSK_WARMUP_FORCE | DSK_WARMUP_NO_SAVE, on_cap_progress, &g, 1));
  s = stats_of(c);
  dsk_autotune_export(c, NULL, &len2);
  after = (char *)malloc(len2);
  dsk_autotune_export(c, after, &len2);
  /* the export carries "created"/"updated" times of the meta: compare the entries */
  const char *eb = before ? strstr(before, "\"entries\"") : NULL, *ea = after ? strstr(after, "\"entries\"") : NULL;
  TU_CHECK(&counts, g.skipped_capture == n && s.misses == 0 && s.tuned == n && eb && ea && strcmp(eb, ea) == 0,
           "capture with FORCE: %lld skipped, %lld misses, entries unchanged", (long long)g.skipped_capture,
           (long long)s.misses);
  free(before);
  free(after);
  /* The backend slot: a table whose stream_capturing answers 1 stops the
   * public dsk_warmup_run the same way. */
  const dsk_backend *real = c->backend;
  dsk_backend fake = *real;
  fake.stream_capturing = fake_capturing;
  c->backend = &fake;
  TU_CHECK(&counts, dsk__tune_stream_capturing(c) == 1, "the slot is asked");
  memset(&g, 0, sizeof g);
  TU_CHECK_OK(&counts, dsk_warmup_run(c, l, DSK_WARMUP_FORCE | DSK_WARMUP_NO_SAVE, on_cap_progress, &g));
  TU_CHECK(&counts, g.skipped_capture == n && stats_of(c).tuned == n, "slot answering 1: %lld skipped, nothing timed",
           (long long)g.skipped_capture);
  /* A backend that does not serve the MoE GEMMs yields no keys for them,
   * and a list holding them is skipped, not failed. */
  fake = *real;
  fake.moe_gemm = NULL;
  fake.dense_fp8_gemm = NULL;
  dsk_warmup_list *l2 = NULL;
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l2));
  TU_CHECK(&counts, dsk_warmup_list_size(l2) == n - nmoe, "no MoE keys on a backend without them: %lld",
           (long long)dsk_warmup_list_size(l2));
  memset(&g, 0, sizeof g);
  TU_CHECK_OK(&counts, dsk_warmup_run(c, l, DSK_WARMUP_NO_TUNE | DSK_WARMUP_NO_SAVE, on_cap_progress, &g));
  TU_CHECK(&counts, g.calls == n && g.other == n, "a list with MoE keys on that backend: no failure");
  c->backend = real;
  dsk_warmup_list_free(l2);
  dsk_warmup_list_free(l);
  dsk_ctx_destroy(c);
  unsetenv("DSK_AUTOTUNE_REQUIRE_HIT");
}

static void test_unavailable_backend(void) {
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  o.backend = "no-such-backend";
  dsk_ctx *c = (dsk_ctx *)1;
  dsk_status st = dsk_ctx_create(&c, &o);
  TU_CHECK(&counts, st == DSK_STATUS_BACKEND_UNAVAILABLE && c == NULL && strstr(dsk_last_error(), "cpu-ref"),
           "forced unknown backend: %s: %s", dsk_status_name(st), dsk_last_error());
  o.device = "auto";
  o.backend = "cuda-sm90";
  c = (dsk_ctx *)1;
  st = dsk_ctx_create(&c, &o);
  if (st == DSK_STATUS_OK) {
    dsk_ctx_destroy(c); /* a machine with a GPU */
  } else {
    TU_CHECK(&counts, st == DSK_STATUS_BACKEND_UNAVAILABLE && c == NULL && dsk_last_error()[0],
             "forced unavailable cuda-sm90: %s: %s", dsk_status_name(st), dsk_last_error());
  }
}

#define TIMED(call)                                                              \
  do {                                                                           \
    double t0_ = tu_now_us();                                                    \
    call;                                                                        \
    printf("test_autotune: %-40s %6.2f s\n", #call, (tu_now_us() - t0_) * 1e-6); \
  } while (0)

int main(void) {
  env_reset();
  /* Never the user's cache: HOME points at a folder of this run. */
  char home[] = "/tmp/dsk-autotune-home-XXXXXX";
  TU_CHECK(&counts, mkdtemp(home) != NULL, "mkdtemp");
  setenv("HOME", home, 1);
  unsetenv("XDG_CACHE_HOME");
  /* Forked first, before this process has started OpenMP threads. */
  TIMED(test_concurrent());
  dsk_log_set(on_log, NULL);
  TIMED(test_buckets());
  dsk_ctx *c = ctx_in(NULL);
  if (c) test_keys_and_tactics(c);
  dsk_ctx_destroy(c);
  TIMED(test_roundtrip());
  TIMED(test_bad_files());
  TIMED(test_stale_invalid());
  TIMED(test_locations());
  TIMED(test_export_import_force());
  TIMED(test_lookups());
  TIMED(test_mhc_tuned_consistency());
  TIMED(test_moe_keys());
  TIMED(test_moe_timing_budget());
  TIMED(test_capture());
  TIMED(test_unavailable_backend());
  dsk_log_set(NULL, NULL);
  rm_rf(home);
  return tu_finish("test_autotune", &counts);
}
