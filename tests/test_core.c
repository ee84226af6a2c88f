/* test_core.c - core services and the context: status names and sentences,
 * the thread-local last error, device strings and backend selection
 * (api-conventions.md §5, backends.md §3), DSK_* variables, logging, the
 * once-per-process warnings, backend queries, memory services and
 * dsk_op_supported. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h" /* dsk__warn_once, dsk__log (internal) */
#include "testutil.h"

static tu_counts counts;

/* ------------------------------------------------------------ log capture */
#define MAX_MSGS 64
typedef struct log_rec {
  int n;
  int level[MAX_MSGS];
  char msg[MAX_MSGS][256];
} log_rec;

static void capture(int level, const char *msg, void *user) {
  log_rec *r = (log_rec *)user;
  if (r->n < MAX_MSGS) {
    r->level[r->n] = level;
    snprintf(r->msg[r->n], sizeof r->msg[0], "%s", msg);
  }
  r->n++;
}

/* number of captured messages at `level` containing `needle` (NULL: any) */
static int count_msgs(const log_rec *r, int level, const char *needle) {
  int k = 0;
  for (int i = 0; i < r->n && i < MAX_MSGS; i++)
    if (r->level[i] == level && (!needle || strstr(r->msg[i], needle))) k++;
  return k;
}

/* ------------------------------------------------------------- helpers */
static dsk_status make(dsk_ctx **ctx, const char *device, const char *backend, int log_level) {
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = device;
  o.backend = backend;
  o.log_level = log_level;
  return dsk_ctx_create(ctx, &o);
}

static int info_of(const dsk_ctx *ctx, dsk_ctx_info *info) {
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  return dsk_ctx_get_info(ctx, info) == DSK_STATUS_OK;
}

/* Is any CUDA backend of this build usable on cuda:0? */
static int cuda_usable(void) {
  for (int i = 0; i < dsk_backend_count(); i++) {
    dsk_backend_info bi;
    memset(&bi, 0, sizeof bi);
    bi.struct_size = sizeof bi;
    int avail = 0;
    char reason[256];
    if (dsk_backend_query(dsk_backend_name(i), "cuda:0", &bi, &avail, reason, sizeof reason) == DSK_STATUS_OK &&
        bi.is_cuda && avail)
      return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------- tests */
static void test_version(void) {
  TU_CHECK(&counts, strcmp(dsk_version(), DSK_VERSION_STRING) == 0, "version %s", dsk_version());
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", DSK_VERSION_MAJOR, DSK_VERSION_MINOR, DSK_VERSION_PATCH);
  TU_CHECK(&counts, strcmp(DSK_VERSION_STRING, expect) == 0, "%s vs %s", DSK_VERSION_STRING, expect);
  TU_CHECK(&counts, dsk_build_info() && strlen(dsk_build_info()) > 0, "empty build info");
  TU_CHECK(&counts, strcmp(dsk_op_name(DSK_OP_KV_WRITE), "kv_write") == 0, "kv_write");
  TU_CHECK(&counts, strcmp(dsk_op_name(DSK_OP_KV_READ), "kv_read") == 0, "kv_read");
  TU_CHECK(&counts, strcmp(dsk_op_name(DSK_OP_SLOT_LIST), "slot_list") == 0, "slot_list");
  TU_CHECK(&counts, strcmp(dsk_op_name(DSK_OP_SPARSE_MLA_DECODE), "sparse_mla_decode") == 0, "sparse");
  static const struct {
    dsk_op op;
    const char *name;
  } more[] = {{DSK_OP_MHC_PRENORM, "mhc_prenorm"},       {DSK_OP_MHC_PRE, "mhc_pre"},
              {DSK_OP_MHC_POST, "mhc_post"},             {DSK_OP_MHC_HEAD, "mhc_head"},
              {DSK_OP_MHC_POST_PRENORM, "mhc_post_prenorm"},
              {DSK_OP_INDEXER_LOGITS, "indexer_logits"}, {DSK_OP_TOPK, "topk"},
              {DSK_OP_INDEXER_SLOTS, "indexer_topk_slots"}, {DSK_OP_MOE_MX_QUANTIZE, "mx_quantize"},
              {DSK_OP_MOE_FP8_QUANTIZE, "fp8_quantize_1x128"}, {DSK_OP_MOE_PACK_WORDS, "pack_ue8m0_words"},
              {DSK_OP_MOE_SF_PACK, "sf_pack_mn_major"}, {DSK_OP_MOE_ROUTE, "moe_route"},
              {DSK_OP_MOE_PERMUTE, "moe_permute"},       {DSK_OP_MOE_GEMM, "moe_gemm"},
              {DSK_OP_MOE_SWIGLU_QUANT, "swiglu_quant"}, {DSK_OP_MOE_GATHER, "moe_gather"},
              {DSK_OP_MOE_DENSE_GEMM, "dense_fp8_gemm"}, {DSK_OP_MOE_FORWARD, "moe_forward"}};
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
    TU_CHECK(&counts, dsk_op_name(more[i].op) && strcmp(dsk_op_name(more[i].op), more[i].name) == 0,
             "op %d: '%s' != '%s'", (int)more[i].op, dsk_op_name(more[i].op) ? dsk_op_name(more[i].op) : "(null)",
             more[i].name);
  TU_CHECK(&counts, DSK_OP_MHC_PRENORM == 20 && DSK_OP_MHC_HEAD == 23 && DSK_OP_MHC_POST_PRENORM == 24 &&
                        DSK_OP_INDEXER_LOGITS == 30 &&
                        DSK_OP_INDEXER_SLOTS == 32, "op ids");
  TU_CHECK(&counts, DSK_OP_MOE_MX_QUANTIZE == 40 && DSK_OP_MOE_FP8_QUANTIZE == 41 && DSK_OP_MOE_PACK_WORDS == 42 &&
                        DSK_OP_MOE_SF_PACK == 43 && DSK_OP_MOE_ROUTE == 44 && DSK_OP_MOE_PERMUTE == 45 &&
                        DSK_OP_MOE_GEMM == 46 && DSK_OP_MOE_SWIGLU_QUANT == 47 && DSK_OP_MOE_GATHER == 48 &&
                        DSK_OP_MOE_DENSE_GEMM == 49 && DSK_OP_MOE_FORWARD == 50,
           "MoE op ids");
  TU_CHECK(&counts, dsk_op_name((dsk_op)39) == NULL && dsk_op_name((dsk_op)51) == NULL, "names around the MoE ids");
  TU_CHECK(&counts, dsk_op_name((dsk_op)0) == NULL && dsk_op_name((dsk_op)99) == NULL, "unknown op names");
}

static void test_status(void) {
  struct { int value; const char *name, *text; } list[] = {
#define ROW_(name, value, text) {value, "DSK_STATUS_" #name, text},
      DSK_STATUS_MAP(ROW_)
#undef ROW_
  };
  int n = (int)(sizeof list / sizeof list[0]);
  TU_CHECK(&counts, n == 11, "the X-macro has %d codes, api-conventions.md §4 lists 11", n);
  for (int i = 0; i < n; i++) {
    dsk_status s = (dsk_status)list[i].value;
    TU_CHECK(&counts, strcmp(dsk_status_name(s), list[i].name) == 0, "%d: %s vs %s", list[i].value,
             dsk_status_name(s), list[i].name);
    TU_CHECK(&counts, strcmp(dsk_status_str(s), list[i].text) == 0, "%d: '%s'", list[i].value, dsk_status_str(s));
    TU_CHECK(&counts, strlen(list[i].text) > 5, "%s has no sentence", list[i].name);
    TU_CHECK(&counts, list[i].value == -i, "%s = %d, expected %d (codes are 0, -1, ... in order)", list[i].name,
             list[i].value, -i);
    for (int j = 0; j < i; j++)
      TU_CHECK(&counts, list[j].value != list[i].value, "duplicate value %d", list[i].value);
  }
  TU_CHECK(&counts, DSK_STATUS_OK == 0, "OK is 0");
  TU_CHECK(&counts, DSK_STATUS_MIN_ == list[n - 1].value, "DSK_STATUS_MIN_ %d", (int)DSK_STATUS_MIN_);
  int unknown[] = {1, 7, -11, -1000};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    TU_CHECK(&counts, strcmp(dsk_status_name((dsk_status)unknown[i]), "DSK_STATUS_UNKNOWN") == 0, "%d -> %s",
             unknown[i], dsk_status_name((dsk_status)unknown[i]));
    TU_CHECK(&counts, dsk_status_str((dsk_status)unknown[i]) && dsk_status_str((dsk_status)unknown[i])[0],
             "no text for %d", unknown[i]);
  }
}

static void *thread_last_error(void *arg) {
  const char **out = (const char **)arg;
  /* A fresh thread sees no error; setting one here must not leak out. */
  out[0] = dsk_last_error()[0] ? "non-empty" : "";
  dsk_ctx *ctx = NULL;
  dsk_ctx_opts o;
  memset(&o, 0, sizeof o); /* struct_size 0 -> INVALID_ARG */
  dsk_ctx_create(&ctx, &o);
  out[1] = dsk_last_error()[0] ? "set" : "";
  return NULL;
}

static void test_last_error(void) {
  dsk_clear_error();
  TU_CHECK(&counts, strcmp(dsk_last_error(), "") == 0, "'%s' after clear", dsk_last_error());
  dsk_status st = dsk_ctx_create(NULL, NULL);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "ctx NULL -> %s", dsk_status_name(st));
  TU_CHECK(&counts, strstr(dsk_last_error(), "ctx") != NULL, "error text '%s'", dsk_last_error());
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", dsk_last_error());

  const char *res[2] = {"unset", "unset"};
  pthread_t th;
  if (pthread_create(&th, NULL, thread_last_error, (void *)res) == 0) {
    pthread_join(th, NULL);
    TU_CHECK(&counts, strcmp(res[0], "") == 0, "a new thread sees an error: thread-local text expected");
    TU_CHECK(&counts, strcmp(res[1], "set") == 0, "the error was not set in the thread");
    TU_CHECK(&counts, strcmp(dsk_last_error(), saved) == 0, "the thread's error leaked: '%s'", dsk_last_error());
  } else {
    TU_CHECK(&counts, 0, "pthread_create failed");
  }
  dsk_clear_error();
  TU_CHECK(&counts, dsk_last_error()[0] == 0, "not cleared");
}

static void test_ctx_create(void) {
  dsk_ctx *ctx = NULL;
  dsk_ctx_info info;
  int have_cuda = cuda_usable();

  /* cpu */
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  TU_CHECK(&counts, ctx != NULL, "no context");
  if (ctx) {
    TU_CHECK(&counts, info_of(ctx, &info), "get_info: %s", dsk_last_error());
    TU_CHECK(&counts, !info.is_cuda && info.device_index == -1, "cpu ctx: is_cuda %d device %d", info.is_cuda,
             info.device_index);
    TU_CHECK(&counts, info.backend[0] && info.reason[0], "empty backend/reason");
    TU_CHECK(&counts, info.num_threads >= 1, "num_threads %d", info.num_threads);
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }
  /* opts NULL = all defaults (device auto) */
  TU_CHECK_OK(&counts, dsk_ctx_create(&ctx, NULL));
  dsk_ctx_destroy(ctx);
  ctx = NULL;
  dsk_ctx_destroy(NULL); /* no-op */

  /* auto: a CUDA backend when one serves cuda:0, else the CPU */
  TU_CHECK_OK(&counts, make(&ctx, "auto", NULL, -1));
  if (ctx) {
    info_of(ctx, &info);
    if (have_cuda)
      TU_CHECK(&counts, info.is_cuda && info.device_index == 0, "auto chose %s on a machine with a GPU", info.backend);
    else
      TU_CHECK(&counts, !info.is_cuda && info.device_index == -1, "auto chose %s without a GPU", info.backend);
    TU_CHECK(&counts, strstr(info.reason, "auto") != NULL, "auto reason '%s'", info.reason);
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }

  /* cuda:0 without a usable CUDA backend: no silent CPU fallback */
  dsk_status st = make(&ctx, "cuda:0", NULL, -1);
  if (!have_cuda) {
    TU_CHECK(&counts, st == DSK_STATUS_BACKEND_UNAVAILABLE, "cuda:0 -> %s", dsk_status_name(st));
    TU_CHECK(&counts, ctx == NULL, "ctx set on failure");
    TU_CHECK(&counts, strstr(dsk_last_error(), "cuda:0") != NULL && strlen(dsk_last_error()) > 20,
             "no reason: '%s'", dsk_last_error());
  } else {
    TU_CHECK(&counts, st == DSK_STATUS_OK, "cuda:0 -> %s: %s", dsk_status_name(st), dsk_last_error());
  }
  dsk_ctx_destroy(ctx);
  ctx = NULL;
  /* a device number that cannot exist */
  st = make(&ctx, "cuda:1000", NULL, -1);
  TU_CHECK(&counts, st == DSK_STATUS_BACKEND_UNAVAILABLE || st == DSK_STATUS_INVALID_ARG, "cuda:1000 -> %s",
           dsk_status_name(st));
  TU_CHECK(&counts, ctx == NULL, "ctx set on failure");

  /* forced unknown backend: BACKEND_UNAVAILABLE listing the valid names */
  ctx = (dsk_ctx *)&counts; /* must be reset to NULL on failure */
  st = make(&ctx, "auto", "no-such-backend", -1);
  TU_CHECK(&counts, st == DSK_STATUS_BACKEND_UNAVAILABLE, "unknown backend -> %s", dsk_status_name(st));
  TU_CHECK(&counts, ctx == NULL, "ctx not reset to NULL on failure");
  TU_CHECK(&counts, strstr(dsk_last_error(), "no-such-backend") && strstr(dsk_last_error(), "cpu-ref"),
           "message does not name the backend and the valid names: '%s'", dsk_last_error());
  for (int i = 0; i < dsk_backend_count(); i++)
    TU_CHECK(&counts, strstr(dsk_last_error(), dsk_backend_name(i)) != NULL, "'%s' not listed in '%s'",
             dsk_backend_name(i), dsk_last_error());

  /* forced cpu-ref on a CUDA device: INVALID_ARG */
  st = make(&ctx, "cuda:0", "cpu-ref", -1);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "cpu-ref on cuda:0 -> %s", dsk_status_name(st));
  TU_CHECK(&counts, strstr(dsk_last_error(), "cpu-ref") != NULL, "'%s'", dsk_last_error());
  /* forced cpu-ref with auto / cpu: fine */
  TU_CHECK_OK(&counts, make(&ctx, "auto", "cpu-ref", -1));
  if (ctx) {
    info_of(ctx, &info);
    TU_CHECK(&counts, strcmp(info.backend, "cpu-ref") == 0 && !info.is_cuda, "forced: %s", info.backend);
    TU_CHECK(&counts, strstr(info.reason, "forced") != NULL, "reason '%s'", info.reason);
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }
  TU_CHECK_OK(&counts, make(&ctx, "cpu", "cpu-ref", -1));
  dsk_ctx_destroy(ctx);
  ctx = NULL;

  /* bad device strings */
  const char *bad[] = {"", "gpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:0x", "cuda:1 ", " cpu", "cpu0", "auto2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    st = make(&ctx, bad[i], NULL, -1);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "device '%s' -> %s", bad[i], dsk_status_name(st));
    TU_CHECK(&counts, ctx == NULL && dsk_last_error()[0], "device '%s': ctx or message", bad[i]);
  }

  /* opts: struct_size too small, bad values */
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  TU_CHECK(&counts, o.struct_size == sizeof o && o.log_level == -1 && o.num_threads == 0 && o.backend == NULL,
           "opts_init defaults");
  dsk_ctx_opts_init(NULL); /* no crash */
  o.struct_size = sizeof o - 1;
  st = dsk_ctx_create(&ctx, &o);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "struct_size"), "%s: '%s'",
           dsk_status_name(st), dsk_last_error());
  o.struct_size = 0;
  st = dsk_ctx_create(&ctx, &o);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "struct_size 0 -> %s", dsk_status_name(st));
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  o.num_threads = -2;
  st = dsk_ctx_create(&ctx, &o);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "num_threads"), "%s: '%s'",
           dsk_status_name(st), dsk_last_error());
  o.num_threads = 0;
  o.log_level = 6;
  st = dsk_ctx_create(&ctx, &o);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "log_level"), "%s: '%s'",
           dsk_status_name(st), dsk_last_error());
  o.log_level = -1;
  o.num_threads = 3;
  TU_CHECK_OK(&counts, dsk_ctx_create(&ctx, &o));
  if (ctx) {
    info_of(ctx, &info);
    TU_CHECK(&counts, info.num_threads == 3, "num_threads %d, asked for 3", info.num_threads);
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }

  /* get_info argument checks */
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  if (ctx) {
    st = dsk_ctx_get_info(ctx, NULL);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "info NULL -> %s", dsk_status_name(st));
    memset(&info, 0, sizeof info);
    info.struct_size = 8;
    st = dsk_ctx_get_info(ctx, &info);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "small info -> %s", dsk_status_name(st));
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }
  info.struct_size = sizeof info;
  st = dsk_ctx_get_info(NULL, &info);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "ctx NULL -> %s", dsk_status_name(st));
}

static void test_env(void) {
  dsk_ctx *ctx = NULL;
  dsk_ctx_info info;
  /* DSK_BACKEND forces the backend and its device kind */
  setenv("DSK_BACKEND", "cpu-ref", 1);
  TU_CHECK_OK(&counts, make(&ctx, "auto", NULL, -1));
  if (ctx) {
    info_of(ctx, &info);
    TU_CHECK(&counts, strcmp(info.backend, "cpu-ref") == 0 && !info.is_cuda, "DSK_BACKEND=cpu-ref: %s",
             info.backend);
    TU_CHECK(&counts, strstr(info.reason, "DSK_BACKEND") != NULL, "reason '%s' does not name DSK_BACKEND",
             info.reason);
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }
  dsk_status st = make(&ctx, "cuda:0", NULL, -1);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "DSK_BACKEND=cpu-ref with cuda:0 -> %s", dsk_status_name(st));
  setenv("DSK_BACKEND", "no-such-backend", 1);
  st = make(&ctx, "auto", NULL, -1);
  TU_CHECK(&counts, st == DSK_STATUS_BACKEND_UNAVAILABLE, "DSK_BACKEND unknown -> %s", dsk_status_name(st));
  TU_CHECK(&counts, strstr(dsk_last_error(), "DSK_BACKEND") && strstr(dsk_last_error(), "cpu-ref"), "'%s'",
           dsk_last_error());
  /* the explicit option wins over the variable */
  TU_CHECK_OK(&counts, make(&ctx, "auto", "cpu-ref", -1));
  dsk_ctx_destroy(ctx);
  ctx = NULL;
  /* an empty value counts as unset */
  setenv("DSK_BACKEND", "", 1);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  dsk_ctx_destroy(ctx);
  ctx = NULL;
  unsetenv("DSK_BACKEND");

  /* DSK_NUM_THREADS, and the option winning over it */
  setenv("DSK_NUM_THREADS", "5", 1);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  if (ctx) {
    info_of(ctx, &info);
    TU_CHECK(&counts, info.num_threads == 5, "DSK_NUM_THREADS=5: %d", info.num_threads);
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  o.num_threads = 2;
  TU_CHECK_OK(&counts, dsk_ctx_create(&ctx, &o));
  if (ctx) {
    info_of(ctx, &info);
    TU_CHECK(&counts, info.num_threads == 2, "option 2 vs DSK_NUM_THREADS=5: %d", info.num_threads);
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }
  /* a value that is not a number in 1..DSK_MAX_CPU_THREADS is ignored (all
   * cores, at most DSK_MAX_CPU_THREADS; a warning, tested in test_logging):
   * 100000 used to be taken, and sized CPU scratch for 100000 threads */
  unsetenv("DSK_NUM_THREADS");
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  int all_cores = 0;
  if (ctx) {
    info_of(ctx, &info);
    all_cores = info.num_threads;
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }
  TU_CHECK(&counts, all_cores >= 1 && all_cores <= DSK_MAX_CPU_THREADS, "default threads %d", all_cores);
  const char *bad_threads[] = {"many", "100000", "0", "-2", "3x", "1025"};
  for (size_t i = 0; i < sizeof bad_threads / sizeof bad_threads[0]; i++) {
    setenv("DSK_NUM_THREADS", bad_threads[i], 1);
    TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, DSK_LOG_OFF));
    if (ctx) {
      info_of(ctx, &info);
      TU_CHECK(&counts, info.num_threads == all_cores, "DSK_NUM_THREADS=%s: %d threads, want the default %d",
               bad_threads[i], info.num_threads, all_cores);
      dsk_ctx_destroy(ctx);
      ctx = NULL;
    }
  }
  setenv("DSK_NUM_THREADS", "1024", 1);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  if (ctx) {
    info_of(ctx, &info);
    TU_CHECK(&counts, info.num_threads == 1024, "DSK_NUM_THREADS=1024: %d", info.num_threads);
    dsk_ctx_destroy(ctx);
    ctx = NULL;
  }
  unsetenv("DSK_NUM_THREADS");
  /* the option: 0..DSK_MAX_CPU_THREADS */
  o.num_threads = DSK_MAX_CPU_THREADS + 1;
  st = dsk_ctx_create(&ctx, &o);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && ctx == NULL && strstr(dsk_last_error(), "num_threads"),
           "num_threads %d: %s (%s)", o.num_threads, dsk_status_name(st), dsk_last_error());
  o.num_threads = -1;
  st = dsk_ctx_create(&ctx, &o);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && ctx == NULL, "num_threads -1: %s", dsk_status_name(st));
  ctx = NULL;
}

static void test_logging(void) {
  log_rec rec;
  dsk_ctx *ctx = NULL;
  dsk_log_set(capture, &rec);

  /* default level (WARN): the info line of context creation is not emitted */
  memset(&rec, 0, sizeof rec);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_INFO, NULL) == 0, "%d info messages at the default level",
           count_msgs(&rec, DSK_LOG_INFO, NULL));
  /* a warning is emitted at the default level, once per key */
  memset(&rec, 0, sizeof rec);
  dsk__warn_once(ctx, "test_core.key1", "first warning %d", 1);
  dsk__warn_once(ctx, "test_core.key1", "second warning %d", 2);
  dsk__warn_once(ctx, "test_core.key2", "other key");
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_WARN, "first warning 1") == 1, "first warning missing");
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_WARN, "second warning") == 0, "warned twice for one key");
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_WARN, "other key") == 1, "second key not warned");
  TU_CHECK(&counts, rec.n == 2, "%d messages, expected 2", rec.n);
  /* once per process: another context does not warn again */
  dsk_ctx *ctx2 = NULL;
  TU_CHECK_OK(&counts, make(&ctx2, "cpu", NULL, -1));
  dsk__warn_once(ctx2, "test_core.key1", "third warning");
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_WARN, "third warning") == 0, "warned again in another context");
  dsk_ctx_destroy(ctx2);
  /* levels of dsk__log against the context level (WARN) */
  memset(&rec, 0, sizeof rec);
  dsk__log(ctx, DSK_LOG_ERROR, "an error");
  dsk__log(ctx, DSK_LOG_WARN, "a warning");
  dsk__log(ctx, DSK_LOG_INFO, "an info");
  dsk__log(ctx, DSK_LOG_DEBUG, "a debug");
  dsk__log(NULL, DSK_LOG_WARN, "no ctx warning");
  dsk__log(NULL, DSK_LOG_INFO, "no ctx info");
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_ERROR, "an error") == 1, "error not emitted");
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_WARN, "a warning") == 1, "warn not emitted");
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_WARN, "no ctx warning") == 1, "warn without ctx not emitted");
  TU_CHECK(&counts, rec.n == 3, "%d messages at level WARN, expected 3", rec.n);
  dsk_ctx_destroy(ctx);
  ctx = NULL;

  /* opts.log_level = INFO: one info message at creation naming the backend */
  memset(&rec, 0, sizeof rec);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, DSK_LOG_INFO));
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_INFO, "backend") == 1, "%d info messages naming the backend",
           count_msgs(&rec, DSK_LOG_INFO, "backend"));
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_DEBUG, NULL) == 0 && count_msgs(&rec, DSK_LOG_TRACE, NULL) == 0,
           "debug/trace emitted at INFO");
  if (ctx) {
    memset(&rec, 0, sizeof rec);
    dsk__log(ctx, DSK_LOG_INFO, "info at info");
    dsk__log(ctx, DSK_LOG_DEBUG, "debug at info");
    TU_CHECK(&counts, rec.n == 1 && count_msgs(&rec, DSK_LOG_INFO, "info at info") == 1, "INFO filter: %d", rec.n);
  }
  dsk_ctx_destroy(ctx);
  ctx = NULL;

  /* DSK_LOG_LEVEL=3 with the option unset (-1) */
  setenv("DSK_LOG_LEVEL", "3", 1);
  memset(&rec, 0, sizeof rec);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_INFO, "backend") == 1, "DSK_LOG_LEVEL=3: %d info messages",
           count_msgs(&rec, DSK_LOG_INFO, "backend"));
  dsk_ctx_destroy(ctx);
  ctx = NULL;
  /* the option wins: level OFF silences even errors */
  setenv("DSK_LOG_LEVEL", "5", 1);
  memset(&rec, 0, sizeof rec);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, DSK_LOG_OFF));
  if (ctx) dsk__log(ctx, DSK_LOG_ERROR, "silenced");
  TU_CHECK(&counts, rec.n == 0, "%d messages at level OFF", rec.n);
  dsk_ctx_destroy(ctx);
  ctx = NULL;
  /* values not understood: one warning naming both variables, defaults apply */
  setenv("DSK_LOG_LEVEL", "loud", 1);
  setenv("DSK_NUM_THREADS", "all", 1);
  memset(&rec, 0, sizeof rec);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  TU_CHECK(&counts, count_msgs(&rec, DSK_LOG_WARN, "DSK_LOG_LEVEL DSK_NUM_THREADS") == 1 && rec.n == 1,
           "bad DSK_LOG_LEVEL / DSK_NUM_THREADS: %d messages (%s)", rec.n, rec.n ? rec.msg[0] : "");
  dsk_ctx_destroy(ctx);
  ctx = NULL;
  unsetenv("DSK_NUM_THREADS");
  /* DSK_LOG_LEVEL=0 turns the info line off */
  setenv("DSK_LOG_LEVEL", "0", 1);
  memset(&rec, 0, sizeof rec);
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  TU_CHECK(&counts, rec.n == 0, "DSK_LOG_LEVEL=0: %d messages", rec.n);
  dsk_ctx_destroy(ctx);
  ctx = NULL;
  unsetenv("DSK_LOG_LEVEL");

  /* NULL restores the default writer: the callback receives nothing more */
  dsk_log_set(NULL, NULL);
  memset(&rec, 0, sizeof rec);
  dsk__log(NULL, DSK_LOG_WARN, "test_core: this line on stderr is expected (default log writer)");
  TU_CHECK(&counts, rec.n == 0, "callback still called after dsk_log_set(NULL)");
}

static void test_backend_query(void) {
  int n = dsk_backend_count();
  TU_CHECK(&counts, n >= 1, "%d backends", n);
  TU_CHECK(&counts, dsk_backend_name(n) == NULL && dsk_backend_name(-1) == NULL, "names past the end");
  int have_cpu_ref = 0;
  const char *devices[] = {"cpu", "cuda:0", "auto"};
  for (int i = 0; i < n; i++) {
    const char *name = dsk_backend_name(i);
    TU_CHECK(&counts, name && name[0], "backend %d has no name", i);
    if (!name) continue;
    if (strcmp(name, "cpu-ref") == 0) have_cpu_ref = 1;
    for (size_t d = 0; d < sizeof devices / sizeof devices[0]; d++) {
      dsk_backend_info bi;
      memset(&bi, 0, sizeof bi);
      bi.struct_size = sizeof bi;
      int avail = -7;
      char reason[256] = "unset";
      dsk_status st = dsk_backend_query(name, devices[d], &bi, &avail, reason, sizeof reason);
      TU_CHECK(&counts, st == DSK_STATUS_OK, "query %s %s -> %s: %s", name, devices[d], dsk_status_name(st),
               dsk_last_error());
      TU_CHECK(&counts, avail == 0 || avail == 1, "%s %s: available %d", name, devices[d], avail);
      TU_CHECK(&counts, reason[0] && strcmp(reason, "unset") != 0, "%s %s: no reason", name, devices[d]);
      TU_CHECK(&counts, strstr(reason, name) != NULL, "%s %s: the reason '%s' does not name the backend", name,
               devices[d], reason);
      TU_CHECK(&counts, strcmp(bi.name, name) == 0 && bi.description[0], "%s: info '%s' '%s'", name, bi.name,
               bi.description);
      /* a backend never runs on the other device kind */
      if (strcmp(devices[d], "cpu") == 0 && bi.is_cuda) TU_CHECK(&counts, avail == 0, "%s available on cpu", name);
      if (strcmp(devices[d], "cuda:0") == 0 && !bi.is_cuda)
        TU_CHECK(&counts, avail == 0, "%s available on cuda:0", name);
      if (strcmp(name, "cpu-ref") == 0 && strcmp(devices[d], "cuda:0") != 0)
        TU_CHECK(&counts, avail == 1, "cpu-ref not available on %s: %s", devices[d], reason);
    }
    /* info may be NULL; a short reason buffer is truncated, not overrun */
    int avail = 0;
    char small[8];
    memset(small, 'x', sizeof small);
    TU_CHECK_OK(&counts, dsk_backend_query(name, "cpu", NULL, &avail, small, sizeof small));
    TU_CHECK(&counts, memchr(small, 0, sizeof small) != NULL, "reason not terminated");
    TU_CHECK_OK(&counts, dsk_backend_query(name, "cpu", NULL, &avail, NULL, 0));
  }
  TU_CHECK(&counts, have_cpu_ref, "cpu-ref is not in the registry");

  int avail = 1;
  char reason[256];
  dsk_status st = dsk_backend_query("no-such-backend", "cpu", NULL, &avail, reason, sizeof reason);
  TU_CHECK(&counts, st != DSK_STATUS_OK || avail == 0, "unknown backend available");
  TU_CHECK(&counts, avail == 0, "available %d for an unknown backend", avail);
  TU_CHECK(&counts, strstr(reason, "cpu-ref") != NULL, "unknown backend: reason '%s' lists no names", reason);
  st = dsk_backend_query("cpu-ref", "gpu0", NULL, &avail, reason, sizeof reason);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "bad device -> %s", dsk_status_name(st));
  st = dsk_backend_query("cpu-ref", "cpu", NULL, NULL, reason, sizeof reason);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "available NULL -> %s", dsk_status_name(st));
  dsk_backend_info bi;
  memset(&bi, 0, sizeof bi);
  bi.struct_size = 4;
  st = dsk_backend_query("cpu-ref", "cpu", &bi, &avail, reason, sizeof reason);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "small info -> %s", dsk_status_name(st));
}

static void test_mem(void) {
  dsk_ctx *ctx = NULL;
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  if (!ctx) return;
  enum { N = 4099 };
  void *p = NULL;
  TU_CHECK_OK(&counts, dsk_mem_alloc(ctx, &p, N));
  TU_CHECK(&counts, p != NULL && ((uintptr_t)p % 64) == 0, "alloc %p", p);
  if (p) {
    unsigned char host[N], back[N];
    TU_CHECK_OK(&counts, dsk_mem_set(ctx, p, 0xAB, N));
    memset(back, 0, N);
    TU_CHECK_OK(&counts, dsk_mem_download(ctx, back, p, N));
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= back[i] == 0xAB;
    TU_CHECK(&counts, ok, "mem_set pattern");
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7 + 3);
    TU_CHECK_OK(&counts, dsk_mem_upload(ctx, p, host, N));
    TU_CHECK_OK(&counts, dsk_ctx_synchronize(ctx, NULL));
    memset(back, 0, N);
    TU_CHECK_OK(&counts, dsk_mem_download(ctx, back, p, N));
    TU_CHECK(&counts, memcmp(host, back, N) == 0, "upload/download round trip");
    /* zero-byte copies are no-ops, even with NULL pointers */
    TU_CHECK_OK(&counts, dsk_mem_upload(ctx, NULL, NULL, 0));
    TU_CHECK_OK(&counts, dsk_mem_download(ctx, NULL, NULL, 0));
    TU_CHECK_OK(&counts, dsk_mem_set(ctx, NULL, 0, 0));
    dsk_status st = dsk_mem_upload(ctx, p, NULL, 4);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "upload src NULL -> %s", dsk_status_name(st));
    st = dsk_mem_download(ctx, NULL, p, 4);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "download dst NULL -> %s", dsk_status_name(st));
    st = dsk_mem_set(ctx, NULL, 0, 4);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "set dst NULL -> %s", dsk_status_name(st));
    TU_CHECK_OK(&counts, dsk_mem_free(ctx, p));
  }
  void *z = NULL;
  TU_CHECK_OK(&counts, dsk_mem_alloc(ctx, &z, 0));
  TU_CHECK_OK(&counts, dsk_mem_free(ctx, z));
  TU_CHECK_OK(&counts, dsk_mem_free(ctx, NULL));
  dsk_status st = dsk_mem_alloc(ctx, NULL, 16);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "alloc ptr NULL -> %s", dsk_status_name(st));
  st = dsk_mem_alloc(NULL, &z, 16);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "alloc ctx NULL -> %s", dsk_status_name(st));
  st = dsk_ctx_synchronize(NULL, NULL);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "synchronize ctx NULL -> %s", dsk_status_name(st));
  /* streams: a CPU context gives NULL (its ops run on the calling thread) */
  void *sp = (void *)&z;
  TU_CHECK_OK(&counts, dsk_stream_create(ctx, &sp));
  TU_CHECK(&counts, sp == NULL, "dsk_stream_create on a CPU context gave %p, want NULL", sp);
  TU_CHECK_OK(&counts, dsk_stream_destroy(ctx, sp));
  TU_CHECK_OK(&counts, dsk_stream_destroy(ctx, NULL));
  st = dsk_stream_create(ctx, NULL);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "stream_create out NULL -> %s", dsk_status_name(st));
  st = dsk_stream_create(NULL, &sp);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "stream_create ctx NULL -> %s", dsk_status_name(st));
  st = dsk_stream_destroy(NULL, NULL);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "stream_destroy ctx NULL -> %s", dsk_status_name(st));
  dsk_ctx_destroy(ctx);
}

static void test_op_supported(void) {
  dsk_ctx *ctx = NULL;
  TU_CHECK_OK(&counts, make(&ctx, "cpu", NULL, -1));
  if (!ctx) return;
  int sup = -1;
  char reason[512];
  dsk_clear_error();

  /* a descriptor with every field zero is answered (unsupported, with the reason) */
  dsk_sparse_mla_desc sd;
  memset(&sd, 0, sizeof sd);
  sd.struct_size = sizeof sd;
  reason[0] = 0;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_SPARSE_MLA_DECODE, &sd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && reason[0], "zero sparse desc: supported %d, reason '%s'", sup, reason);
  TU_CHECK(&counts, dsk_last_error()[0] == 0, "dsk_op_supported left an error: '%s'", dsk_last_error());

  /* a valid small kv_write descriptor is served by the CPU reference */
  enum { PBS = 4 };
  static unsigned char cache[PBS * 584];
  static dsk_bf16 latent[448], rope[64];
  int32_t slot = 1;
  dsk_kv_write_desc kd;
  memset(&kd, 0, sizeof kd);
  kd.struct_size = sizeof kd;
  kd.format = DSK_KV_FORMAT_B584;
  kd.N = 1;
  kd.latent = latent;
  kd.latent_stride = 448;
  kd.rope = rope;
  kd.rope_stride = 64;
  kd.slot_mapping = &slot;
  kd.cache.base = cache;
  kd.cache.pbs = PBS;
  kd.cache.page_stride = PBS * 584;
  kd.cache.num_pages = 1;
  sup = -1;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_KV_WRITE, &kd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 1, "valid kv_write not supported: '%s'", reason);
  TU_CHECK(&counts, reason[0], "no reason when supported");
  /* the same with a field broken: unsupported, the reason names the field */
  kd.cache.pbs = 0;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_KV_WRITE, &kd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && strstr(reason, "pbs") != NULL, "pbs 0: supported %d, reason '%s'", sup, reason);

  dsk_slot_list_desc ld;
  memset(&ld, 0, sizeof ld);
  ld.struct_size = sizeof ld;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_SLOT_LIST, &ld, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && reason[0], "zero slot-list desc: %d '%s'", sup, reason);
  dsk_kv_read_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.struct_size = sizeof rd;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_KV_READ, &rd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && reason[0], "zero kv_read desc: %d '%s'", sup, reason);

  /* the mHC and indexer ops answer through their validators and slots */
  dsk_mhc_post_desc pd;
  dsk_mhc_post_desc_init(&pd);
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MHC_POST, &pd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 1, "mhc_post T=0 no-op not supported: '%s'", reason);
  pd.T = 1;
  pd.D = 7;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MHC_POST, &pd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && strstr(reason, "mhc_post") && strstr(reason, "D 7"), "mhc_post D 7: %d '%s'", sup,
           reason);
  static float scores[8];
  static int32_t top[2];
  dsk_topk_desc kd2;
  memset(&kd2, 0, sizeof kd2);
  kd2.struct_size = sizeof kd2;
  kd2.T = 1;
  kd2.scores = scores;
  kd2.scores_stride_t = 8;
  kd2.width = 8;
  kd2.K = 2;
  kd2.out = top;
  kd2.out_stride_t = 2;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_TOPK, &kd2, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 1 && strstr(reason, "topk") && strstr(reason, "cpu-ref"), "valid topk: %d '%s'", sup,
           reason);
  kd2.K = 0;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_TOPK, &kd2, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && strstr(reason, "K 0"), "topk K 0: %d '%s'", sup, reason);
  dsk_indexer_logits_desc ild;
  memset(&ild, 0, sizeof ild);
  ild.struct_size = sizeof ild;
  ild.T = 1;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_INDEXER_LOGITS, &ild, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && strstr(reason, "indexer_logits"), "zero indexer_logits desc: %d '%s'", sup, reason);
  dsk_indexer_topk_slots_desc fd;
  memset(&fd, 0, sizeof fd);
  fd.struct_size = sizeof fd;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_INDEXER_SLOTS, &fd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 1, "indexer_topk_slots T=0 no-op not supported: '%s'", reason);
  TU_CHECK(&counts, dsk_last_error()[0] == 0, "dsk_op_supported left an error: '%s'", dsk_last_error());

  /* the MoE ops answer through dsk__moe_validate and the cpu-ref's MoE slots */
  static float mx_x[32];
  static uint8_t mx_q[16], mx_sf[1];
  dsk_mx_quantize_desc mq;
  memset(&mq, 0, sizeof mq);
  mq.struct_size = sizeof mq;
  mq.rows = 1;
  mq.K = 32;
  mq.x_dtype = DSK_MOE_IN_F32;
  mq.x = mx_x;
  mq.x_stride = 32;
  mq.q = mx_q;
  mq.q_stride = 16;
  mq.sf = mx_sf;
  mq.sf_stride = 1;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MOE_MX_QUANTIZE, &mq, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 1 && strstr(reason, "mx_quantize") && strstr(reason, "cpu-ref"), "valid mx_quantize: %d '%s'",
           sup, reason);
  mq.K = 48;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MOE_MX_QUANTIZE, &mq, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && strstr(reason, "K 48"), "mx_quantize K 48: %d '%s'", sup, reason);
  dsk_moe_desc md;
  dsk_moe_desc_init(&md, DSK_MOE_MODEL_DSV4_FLASH);
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MOE_FORWARD, &md, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 1 && strstr(reason, "moe_forward"), "moe_forward T=0 no-op: %d '%s'", sup, reason);
  md.T = 1;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MOE_FORWARD, &md, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && strstr(reason, "moe_forward"), "moe_forward without buffers: %d '%s'", sup, reason);
  dsk_moe_gemm_desc gd;
  memset(&gd, 0, sizeof gd);
  /* below the size of the oldest layout (before max_expert_rows): rejected */
  gd.struct_size = offsetof(dsk_moe_gemm_desc, max_expert_rows) - 1;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MOE_GEMM, &gd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && strstr(reason, "struct_size"), "moe_gemm struct_size: %d '%s'", sup, reason);
  /* a caller built before max_expert_rows: served (M_sum 0, a no-op) */
  gd.struct_size = offsetof(dsk_moe_gemm_desc, max_expert_rows);
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MOE_GEMM, &gd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 1, "moe_gemm with the pre-max_expert_rows struct_size: %d '%s'", sup, reason);
  gd.struct_size = sizeof gd;
  gd.max_expert_rows = -1;
  gd.M_sum = 64;
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_MOE_GEMM, &gd, &sup, reason, sizeof reason));
  TU_CHECK(&counts, sup == 0 && strstr(reason, "max_expert_rows"), "moe_gemm max_expert_rows -1: %d '%s'", sup, reason);
  TU_CHECK(&counts, dsk_last_error()[0] == 0, "dsk_op_supported left an error: '%s'", dsk_last_error());

  /* questions that cannot be answered */
  dsk_status st = dsk_op_supported(ctx, (dsk_op)77, &sd, &sup, reason, sizeof reason);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "unknown op -> %s", dsk_status_name(st));
  st = dsk_op_supported(ctx, DSK_OP_SPARSE_MLA_DECODE, NULL, &sup, reason, sizeof reason);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "desc NULL -> %s", dsk_status_name(st));
  st = dsk_op_supported(ctx, DSK_OP_SPARSE_MLA_DECODE, &sd, NULL, reason, sizeof reason);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "supported NULL -> %s", dsk_status_name(st));
  st = dsk_op_supported(NULL, DSK_OP_SPARSE_MLA_DECODE, &sd, &sup, reason, sizeof reason);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "ctx NULL -> %s", dsk_status_name(st));
  /* reason may be NULL */
  TU_CHECK_OK(&counts, dsk_op_supported(ctx, DSK_OP_SPARSE_MLA_DECODE, &sd, &sup, NULL, 0));
  dsk_ctx_destroy(ctx);
}

/* ------------------------------------------------------ dsk_bench_run
 * The callable counts its calls and sleeps `units` x 2 ms, so a sample of
 * one call is >= 2 ms per unit; with repeat = units each sample is divided
 * by it. The only timing relation checked is a factor of 100 between two
 * medians of sleeps (robust on a loaded machine); the rest is counting and
 * argument checks. */
typedef struct bench_probe {
  int calls, units;
} bench_probe;

static dsk_status bench_probe_fn(dsk_ctx *ctx, void *user) {
  (void)ctx;
  bench_probe *p = (bench_probe *)user;
  p->calls++;
  for (int i = 0; i < p->units; i++) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  return DSK_STATUS_OK;
}

static void test_bench_run(void) {
  dsk_ctx *ctx = NULL;
  if (make(&ctx, "cpu", NULL, DSK_LOG_OFF) != DSK_STATUS_OK) {
    TU_CHECK(&counts, 0, "cpu ctx: %s", dsk_last_error());
    return;
  }
  bench_probe p = {0, 1};
  dsk_bench_opts o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.warmup = 1;
  o.reps = 3;
  dsk_bench_result r1, r2;
  memset(&r1, 0, sizeof r1);
  r1.struct_size = sizeof r1;
  r2 = r1;
  dsk_status st = dsk_bench_run(ctx, bench_probe_fn, &p, &o, &r1);
  TU_CHECK(&counts, st == DSK_STATUS_OK && p.calls == 4 && r1.reps == 3, "bench_run: %s, %d calls, reps %d",
           dsk_status_name(st), p.calls, r1.reps);
  TU_CHECK(&counts, r1.median_us >= 1900.0 && r1.min_us <= r1.median_us && r1.median_us <= r1.max_us,
           "bench_run: one 2 ms unit measured %.1f us (min %.1f max %.1f)", r1.median_us, r1.min_us, r1.max_us);
  /* repeat: 100 units per call of fn, each sample divided by 100 */
  p.calls = 0;
  p.units = 100;
  o.warmup = 0;
  o.reps = 1;
  o.repeat = 100;
  st = dsk_bench_run(ctx, bench_probe_fn, &p, &o, &r2);
  TU_CHECK(&counts, st == DSK_STATUS_OK && p.calls == 1, "bench_run repeat: %s, %d calls", dsk_status_name(st),
           p.calls);
  TU_CHECK(&counts, r2.median_us >= 1900.0 && r2.median_us * 10.0 < 100.0 * r1.median_us,
           "bench_run repeat 100: %.1f us per unit (one unit alone %.1f)", r2.median_us, r1.median_us);
  /* an opts struct from before `repeat` (struct_size ends before it): once */
  p.calls = 0;
  p.units = 1;
  o.struct_size = offsetof(dsk_bench_opts, repeat);
  o.repeat = 1000; /* beyond the old struct: must not be read */
  st = dsk_bench_run(ctx, bench_probe_fn, &p, &o, &r2);
  TU_CHECK(&counts, st == DSK_STATUS_OK && p.calls == 1 && r2.median_us >= 1900.0,
           "bench_run old struct_size: %s, %d calls, %.1f us", dsk_status_name(st), p.calls, r2.median_us);
  /* bad arguments: nothing is called */
  o.struct_size = sizeof o;
  const int bad_repeat[] = {-1, 10001};
  for (int i = 0; i < 2; i++) {
    o.repeat = bad_repeat[i];
    p.calls = 0;
    st = dsk_bench_run(ctx, bench_probe_fn, &p, &o, &r2);
    TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && p.calls == 0 && strstr(dsk_last_error(), "repeat"),
             "bench_run repeat %d: %s (%s)", bad_repeat[i], dsk_status_name(st), dsk_last_error());
  }
  o.repeat = 0;
  o.struct_size = offsetof(dsk_bench_opts, repeat) - 1;
  st = dsk_bench_run(ctx, bench_probe_fn, &p, &o, &r2);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "bench_run short struct_size: %s", dsk_status_name(st));
  dsk_ctx_destroy(ctx);
}

int main(void) {
  /* Deterministic start whatever the caller's shell exports. */
  unsetenv("DSK_BACKEND");
  unsetenv("DSK_LOG_LEVEL");
  unsetenv("DSK_NUM_THREADS");
  test_version();
  test_status();
  test_last_error();
  test_ctx_create();
  test_env();
  test_logging();
  test_backend_query();
  test_mem();
  test_op_supported();
  test_bench_run();
  return tu_finish("test_core", &counts);
}
