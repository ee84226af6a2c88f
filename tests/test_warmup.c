/* test_warmup.c - model descriptions and warmup (spec/autotune.md §6, A20;
 * spec/models.md):
 *  - the built-in models equal the sample config.json files of tests/data
 *    (written from spec/models.md), layer mixes, parser errors naming the
 *    field;
 *  - the key lists: counts for the spec's envelopes (DSv4-Flash TP2 1M /
 *    8192: 360 attention keys), SWA widths, draft tokens, determinism,
 *    errors; the MoE keys (moe_gemm FC1 / FC2 with every A_used reachable
 *    in a token bucket, E_local = E or E/tp with expert parallelism;
 *    dense_fp8_gemm for the shared expert and the dense MLP layers);
 *  - after dsk_warmup_run on a CPU context with a reduced envelope, a
 *    simulated serving loop of random shapes inside the envelope records
 *    zero misses with DSK_AUTOTUNE_REQUIRE_HIT=1: DeepSeek-V4-shaped (tiny
 *    config, hidden 128: SWA, C4A, C128A at two width buckets, mHC, MXFP4
 *    MoE layers through dsk_moe_run and dsk_moe_gemm) and GLM-5.1 TP8
 *    (Format A; FP8 MoE and dense MLP at reduced widths); also on a second
 *    "rank" that imports the first one's export and warms up without tuning
 *    (A19), and one that loads the file;
 *  - progress actions (tuned, cached, forced re-tune, skipped over budget);
 *  - only when DSK_TEST_DEVICE names a GPU (a line says it is skipped
 *    otherwise): the same property with the full DSv4-Flash TP2 envelope
 *    (256 tokens, context 131072: the 195 keys of `dsk tune`), every buffer
 *    in device memory, warmup wall time printed; then a second context
 *    warming up from the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsk.h"
#include "testutil.h"

#ifndef DSK_SOURCE_DIR
#error "DSK_SOURCE_DIR must be defined (CMake does it for tests)"
#endif

static tu_counts counts;

static dsk_ctx *ctx_new(void) {
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  o.num_threads = 1; /* CPU timing free of OpenMP barrier stalls on a busy machine */
  dsk_ctx *c = NULL;
  dsk_status st = dsk_ctx_create(&c, &o);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "dsk_ctx_create: %s", dsk_last_error());
  return c;
}

static dsk_model_desc model_init(void) {
  dsk_model_desc m;
  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  return m;
}

static void data_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/tests/data/%s/config.json", DSK_SOURCE_DIR, name);
}

/* --------------------------------------------------------------- models */
static void test_models(void) {
  for (int i = 0; dsk_model_builtin_name(i); i++) {
    const char *name = dsk_model_builtin_name(i);
    dsk_model_desc a = model_init(), b = model_init();
    TU_CHECK_OK(&counts, dsk_model_desc_builtin(name, &a));
    char path[1024];
    data_path(path, sizeof path, name);
    TU_CHECK_OK(&counts, dsk_model_desc_from_config(path, &b));
    int same = a.kv_format == b.kv_format && a.hidden_size == b.hidden_size && a.num_heads == b.num_heads &&
               a.num_layers == b.num_layers && a.num_mtp_layers == b.num_mtp_layers &&
               a.sliding_window == b.sliding_window && a.index_topk == b.index_topk &&
               a.max_positions == b.max_positions && a.hc_mult == b.hc_mult &&
               memcmp(a.compress_ratio, b.compress_ratio, sizeof a.compress_ratio) == 0 &&
               a.n_routed_experts == b.n_routed_experts && a.num_experts_per_tok == b.num_experts_per_tok &&
               a.moe_intermediate_size == b.moe_intermediate_size && a.n_shared_experts == b.n_shared_experts &&
               a.first_k_dense == b.first_k_dense &&
               (a.first_k_dense == 0 || a.dense_intermediate_size == b.dense_intermediate_size) &&
               strcmp(a.model_type, b.model_type) == 0;
    TU_CHECK(&counts, same, "built-in %s == tests/data/%s/config.json", name, name);
  }
  TU_CHECK(&counts, dsk_model_builtin_name(4) == NULL && dsk_model_builtin_name(-1) == NULL, "four built-in models");
  dsk_model_desc m = model_init();
  TU_CHECK_OK(&counts, dsk_model_desc_builtin("deepseek-v4-flash", &m));
  int mix[129] = {0};
  for (int l = 0; l < m.num_layers; l++) mix[m.compress_ratio[l]]++;
  TU_CHECK(&counts, mix[0] == 2 && mix[4] == 21 && mix[128] == 20, "Flash mix 2 SWA + 21 C4A + 20 C128A");
  TU_CHECK_OK(&counts, dsk_model_desc_builtin("deepseek-v4-pro", &m));
  memset(mix, 0, sizeof mix);
  for (int l = 0; l < m.num_layers; l++) mix[m.compress_ratio[l]]++;
  TU_CHECK(&counts, mix[0] == 0 && mix[4] == 30 && mix[128] == 31, "Pro mix 31 C128A + 30 C4A");
  TU_CHECK(&counts, dsk_model_desc_builtin("gpt-2", &m) == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "glm-5.1"),
           "unknown built-in names the valid ones");

  /* Parser errors name the field. */
  char tmp[] = "/tmp/dsk-warmup-cfg-XXXXXX";
  TU_CHECK(&counts, mkdtemp(tmp) != NULL, "mkdtemp");
  struct {
    const char *text, *field;
    dsk_status st;
  } bad[] = {
      {"{\"model_type\": \"llama\"}", "model_type", DSK_STATUS_PARSE},
      {"{\"model_type\": \"glm_moe_dsa\", \"num_hidden_layers\": 78}", "hidden_size", DSK_STATUS_PARSE},
      {"{\"model_type\": \"deepseek_v32\", \"hidden_size\": 7168, \"num_hidden_layers\": 61, "
       "\"num_attention_heads\": 128.5}",
       "num_attention_heads", DSK_STATUS_PARSE},
      {"{\"model_type\": \"deepseek_v4\", \"hidden_size\": 4096, \"num_hidden_layers\": 3, \"num_attention_heads\": "
       "64, \"max_position_embeddings\": 1000, \"index_topk\": 512, \"sliding_window\": 128, \"compress_ratios\": [0, "
       "4]}",
       "compress_ratios", DSK_STATUS_PARSE},
      {"{\"model_type\": \"deepseek_v4\", \"hidden_size\": 4096, \"num_hidden_layers\": 2, \"num_attention_heads\": "
       "64, \"max_position_embeddings\": 1000, \"index_topk\": 512, \"sliding_window\": 128, \"compress_ratios\": [0, "
       "16]}",
       "compress_ratios[1]", DSK_STATUS_PARSE},
      {"[1, 2]", "not a JSON object", DSK_STATUS_PARSE},
      {"{\"model_type\": ", "not valid JSON", DSK_STATUS_PARSE},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/c%zu.json", tmp, i);
    FILE *f = fopen(path, "w");
    if (f) {
      fputs(bad[i].text, f);
      fclose(f);
    }
    dsk_status st = dsk_model_desc_from_config(path, &m);
    TU_CHECK(&counts, st == bad[i].st && strstr(dsk_last_error(), bad[i].field), "config %zu: %s: %s", i,
             dsk_status_name(st), dsk_last_error());
    unlink(path);
  }
  rmdir(tmp);
  TU_CHECK(&counts, dsk_model_desc_from_config("/nonexistent/config.json", &m) == DSK_STATUS_IO, "missing file: IO");
  dsk_model_desc small = m;
  small.struct_size = 8;
  TU_CHECK(&counts, dsk_model_desc_builtin("glm-5.1", &small) == DSK_STATUS_INVALID_ARG, "struct_size checked");
}

/* --------------------------------------------------------- enumeration */
typedef struct list_info {
  int64_t n, mla, mhc, moe, dense, dup;
  int64_t maxT, minT, H;
  int64_t moe_a128; /* moe_gemm keys with A=128 */
  int64_t moe_E;    /* E of the moe_gemm keys (the last seen) */
  int64_t straddle; /* token buckets with moe_gemm keys of both A 64 and 128 (FC1) */
} list_info;

static list_info inspect(const dsk_warmup_list *l) {
  list_info r;
  memset(&r, 0, sizeof r);
  r.n = dsk_warmup_list_size(l);
  r.minT = 1 << 30;
  for (int64_t i = 0; i < r.n; i++) {
    dsk_warmup_item it;
    memset(&it, 0, sizeof it);
    it.struct_size = sizeof it;
    if (dsk_warmup_list_item(l, i, &it) != DSK_STATUS_OK) continue;
    if (it.op == DSK_OP_SPARSE_MLA_DECODE) {
      r.mla++;
      const char *h = strstr(it.key, ";H=");
      if (h) r.H = atoll(h + 3);
    } else if (it.op == DSK_OP_MHC_PRENORM) {
      r.mhc++;
    } else if (it.op == DSK_OP_MOE_GEMM) {
      r.moe++;
      const char *a = strstr(it.key, ";A="), *e = strstr(it.key, ";E=");
      if (a && atoll(a + 3) == 128) r.moe_a128++;
      if (e) r.moe_E = atoll(e + 3);
      if (a && atoll(a + 3) == 128 && strstr(it.label, "FC1")) {
        /* the same bucket with A=64 just before it */
        dsk_warmup_item pt;
        memset(&pt, 0, sizeof pt);
        pt.struct_size = sizeof pt;
        if (i > 0 && dsk_warmup_list_item(l, i - 1, &pt) == DSK_STATUS_OK && pt.op == DSK_OP_MOE_GEMM &&
            pt.T == it.T && strstr(pt.key, ";A=64;"))
          r.straddle++;
      }
    } else if (it.op == DSK_OP_MOE_DENSE_GEMM) {
      r.dense++;
    }
    if (it.T > r.maxT) r.maxT = it.T;
    if (it.T < r.minT) r.minT = it.T;
    for (int64_t j = 0; j < i; j++) {
      dsk_warmup_item jt;
      memset(&jt, 0, sizeof jt);
      jt.struct_size = sizeof jt;
      dsk_warmup_list_item(l, j, &jt);
      if (strcmp(jt.key, it.key) == 0) r.dup++;
    }
  }
  return r;
}

static list_info enum_builtin(dsk_ctx *c, const char *name, dsk_serving_desc *sv, dsk_status *st_out) {
  dsk_model_desc m = model_init();
  list_info r;
  memset(&r, 0, sizeof r);
  if (dsk_model_desc_builtin(name, &m) != DSK_STATUS_OK) return r;
  dsk_warmup_list *l = NULL;
  dsk_status st = dsk_warmup_enumerate(c, &m, sv, &l);
  if (st_out) *st_out = st;
  if (st == DSK_STATUS_OK) r = inspect(l);
  dsk_warmup_list_free(l);
  return r;
}

static void test_enumerate(dsk_ctx *c) {
  dsk_serving_desc sv;
  dsk_serving_desc_init(&sv);
  sv.tp = 2;
  sv.max_tokens = 8192;
  sv.max_context = 1048576;
  list_info r = enum_builtin(c, "deepseek-v4-flash", &sv, NULL);
  /* (SWA + C4A + 18 C128A widths) x 18 token buckets; mHC x 18. MoE
   * (E_local 256, top-6): A_used 64 up to T 2730, 128 above, so bucket
   * 4096 (T 2049..4096) has both: (18 + 1) x FC1 / FC2; the shared expert
   * (2048, 4096) and (4096, 1024) x 18. */
  TU_CHECK(&counts, r.mla == 360 && r.mhc == 18 && r.dup == 0 && r.H == 32 && r.minT == 1 && r.maxT == 8192,
           "Flash TP2 1M/8192: %lld attention + %lld mHC keys (want 360 + 18), H %lld, dup %lld", (long long)r.mla,
           (long long)r.mhc, (long long)r.H, (long long)r.dup);
  TU_CHECK(&counts, r.moe == 38 && r.moe_a128 == 4 && r.straddle == 1 && r.moe_E == 256 && r.dense == 36 &&
                        r.n == 360 + 18 + 38 + 36,
           "Flash TP2 1M/8192: %lld moe_gemm (want 38; %lld with A 128, %lld straddling buckets), %lld dense (want 36)",
           (long long)r.moe, (long long)r.moe_a128, (long long)r.straddle, (long long)r.dense);
  sv.max_tokens = 256;
  sv.max_context = 131072;
  r = enum_builtin(c, "deepseek-v4-flash", &sv, NULL);
  TU_CHECK(&counts, r.mla == 130 && r.mhc == 13 && r.maxT == 256, "Flash TP2 131072/256: %lld + %lld (want 130 + 13)",
           (long long)r.mla, (long long)r.mhc);
  TU_CHECK(&counts, r.moe == 26 && r.moe_a128 == 0 && r.dense == 26 && r.n == 195,
           "Flash TP2 131072/256: %lld moe_gemm + %lld dense (want 26 + 26), %lld in all (want 195)", (long long)r.moe,
           (long long)r.dense, (long long)r.n);
  sv.ep = 1; /* expert parallel: E_local 128, whole experts (I 2048 not sharded) */
  r = enum_builtin(c, "deepseek-v4-flash", &sv, NULL);
  TU_CHECK(&counts, r.moe == 26 && r.moe_E == 128 && r.dense == 26, "Flash TP2 EP: %lld moe_gemm keys, E_local %lld",
           (long long)r.moe, (long long)r.moe_E);
  sv.ep = 0;
  const int64_t swa[] = {128, 192, 256};
  sv.swa_widths = swa;
  sv.num_swa_widths = 3;
  r = enum_builtin(c, "deepseek-v4-flash", &sv, NULL);
  TU_CHECK(&counts, r.mla == 390, "three SWA widths: %lld (want 390)", (long long)r.mla);
  sv.swa_widths = NULL;
  sv.num_swa_widths = 0;
  sv.draft_tokens = 2;
  r = enum_builtin(c, "deepseek-v4-flash", &sv, NULL);
  TU_CHECK(&counts, r.mla == 120 && r.minT == 3, "2 draft tokens: buckets b*3 (%lld keys, min T %lld)",
           (long long)r.mla, (long long)r.minT);
  sv.draft_tokens = 0;
  const int64_t cap[] = {1, 2, 4, 8};
  sv.capture_sizes = cap;
  sv.num_capture_sizes = 4;
  r = enum_builtin(c, "deepseek-v4-flash", &sv, NULL);
  TU_CHECK(&counts, r.mla == 60 && r.mhc == 6 && r.moe == 12 && r.dense == 12, "capture sizes {1,2,4,8} + 128, 256: %lld",
           (long long)r.mla);
  dsk_serving_desc_init(&sv);
  sv.tp = 8;
  sv.max_tokens = 8192;
  sv.max_context = 1048576;
  r = enum_builtin(c, "deepseek-v4-pro", &sv, NULL);
  TU_CHECK(&counts, r.mla == 360 && r.mhc == 18 && r.H == 16, "Pro TP8: %lld + %lld, H %lld", (long long)r.mla,
           (long long)r.mhc, (long long)r.H);
  /* E_local 384, top-6: A_used 64 up to T 4096 (a bucket boundary) */
  TU_CHECK(&counts, r.moe == 36 && r.moe_a128 == 2 && r.straddle == 0 && r.dense == 36, "Pro TP8: %lld moe_gemm, %lld dense",
           (long long)r.moe, (long long)r.dense);
  dsk_serving_desc_init(&sv);
  r = enum_builtin(c, "glm-5.1", &sv, NULL);
  TU_CHECK(&counts, r.mla == 18 && r.mhc == 0 && r.H == 64, "GLM-5.1 TP1: %lld keys, no mHC", (long long)r.mla);
  /* FP8 experts; shared expert and the dense MLP of layers 0-2: 4 x 18 */
  TU_CHECK(&counts, r.moe == 36 && r.dense == 72, "GLM-5.1 TP1: %lld moe_gemm, %lld dense", (long long)r.moe,
           (long long)r.dense);
  sv.tp = 4;
  r = enum_builtin(c, "deepseek-v3.2", &sv, NULL);
  TU_CHECK(&counts, r.mla == 18 && r.H == 32 && r.moe == 36 && r.dense == 72, "DSv3.2 TP4: H %lld, %lld + %lld MoE",
           (long long)r.H, (long long)r.moe, (long long)r.dense);

  /* Deterministic: two enumerations give the same list. */
  dsk_model_desc m = model_init();
  dsk_model_desc_builtin("deepseek-v4-flash", &m);
  dsk_serving_desc_init(&sv);
  sv.tp = 2;
  sv.max_tokens = 512;
  sv.max_context = 65536;
  dsk_warmup_list *l1 = NULL, *l2 = NULL;
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l1));
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l2));
  int same = l1 && l2 && dsk_warmup_list_size(l1) == dsk_warmup_list_size(l2);
  for (int64_t i = 0; same && i < dsk_warmup_list_size(l1); i++) {
    dsk_warmup_item a, b;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    b = a;
    dsk_warmup_list_item(l1, i, &a);
    dsk_warmup_list_item(l2, i, &b);
    same = strcmp(a.key, b.key) == 0 && strcmp(a.label, b.label) == 0;
  }
  TU_CHECK(&counts, same, "enumeration is deterministic");
  dsk_warmup_item it;
  memset(&it, 0, sizeof it);
  it.struct_size = sizeof it;
  TU_CHECK(&counts, dsk_warmup_list_item(l1, dsk_warmup_list_size(l1), &it) == DSK_STATUS_INVALID_ARG,
           "item index out of range");
  dsk_warmup_list_free(l1);
  dsk_warmup_list_free(l2);

  /* Errors name the field. */
  dsk_status st = DSK_STATUS_OK;
  sv.tp = 3;
  enum_builtin(c, "deepseek-v4-flash", &sv, &st);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "tp"), "tp 3: %s", dsk_last_error());
  sv.tp = 2;
  sv.num_capture_sizes = 2;
  sv.capture_sizes = NULL;
  enum_builtin(c, "deepseek-v4-flash", &sv, &st);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "capture_sizes"), "capture NULL: %s",
           dsk_last_error());
  sv.num_capture_sizes = 0;
  const int64_t zero[] = {0};
  sv.swa_widths = zero;
  sv.num_swa_widths = 1;
  enum_builtin(c, "deepseek-v4-flash", &sv, &st);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && strstr(dsk_last_error(), "swa_widths[0]"), "swa width 0: %s",
           dsk_last_error());
  sv.num_swa_widths = 0;
  sv.swa_widths = NULL;
  m.num_heads = 512;
  sv.tp = 1;
  TU_CHECK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l1) == DSK_STATUS_INVALID_ARG && l1 == NULL &&
                        strstr(dsk_last_error(), "heads per rank"),
           "512 heads per rank: %s", dsk_last_error());
  TU_CHECK(&counts, dsk_warmup_enumerate(c, NULL, &sv, &l1) == DSK_STATUS_INVALID_ARG, "model NULL");
  TU_CHECK(&counts, dsk_warmup_run(c, NULL, 0, NULL, NULL) == DSK_STATUS_INVALID_ARG, "list NULL");
}

/* ------------------------------------------------------- serving loop */
typedef struct prog {
  int64_t tuned, cached, prerun, skipped, calls;
} prog;
static void on_progress(const dsk_warmup_progress *p, void *user) {
  prog *g = (prog *)user;
  g->calls++;
  if (p->action == DSK_WARMUP_TUNED) {
    g->tuned++;
    TU_CHECK(&counts, p->us_best > 0 && p->num_tactics >= 1 && p->tactic.op == (int32_t)p->item->op,
             "tuned progress of %s", p->item->key);
  } else if (p->action == DSK_WARMUP_CACHED) {
    g->cached++;
  } else if (p->action == DSK_WARMUP_PRERUN) {
    g->prerun++;
  } else {
    g->skipped++;
    TU_CHECK(&counts, p->reason && p->reason[0], "skip reason");
  }
}

typedef struct envelope {
  dsk_kv_format fmt;
  int64_t H, max_T, max_ctx;
  int64_t w_swa, topk, pbs, pbs4, pbs128;
  int has_swa, has_c4a, has_c128a, has_mhc;
  int64_t D; /* mHC hidden size; the hidden size of the MoE layers */
  /* MoE (0 = none): experts, top-k, routed / shared / dense-MLP intermediate per rank */
  int64_t E, moe_topk, Ir, Is, Id;
  dsk_moe_wfmt wfmt;
} envelope;

/* Where the buffers of a serving loop live: host memory on a CPU context;
 * on a GPU context device memory (dsk_mem_*), with what is made on the host
 * (slots, lens, expert ids and weights, m_indices) uploaded, and the bf16
 * activations set to a small constant instead of random values (a lookup
 * depends on shapes only). Expert and dense weights are zero and never
 * written: they are kept across the steps of a loop (grown when a step
 * needs more), so the ~1.6 GiB of DSv4-Flash's MXFP4 experts per rank are
 * allocated once. */
#define SERVER_KEEP 8
typedef struct server {
  dsk_ctx *c;
  int dev; /* 1: the context's memory is device memory */
  void *keep[SERVER_KEEP];
  int64_t keep_bytes[SERVER_KEEP];
} server;

/* The buffers of one step, freed by sm_done. */
#define STEP_MAXBUF 16
typedef struct step_mem {
  server *s;
  void *p[STEP_MAXBUF]; /* the context's memory */
  int n;
  void *h[STEP_MAXBUF]; /* host staging (device mode) */
  int nh;
  dsk_status st; /* the first failure of an allocation or copy */
} step_mem;

static step_mem sm_begin(server *s) {
  step_mem m;
  memset(&m, 0, sizeof m);
  m.s = s;
  m.st = DSK_STATUS_OK;
  return m;
}

static void sm_fail(step_mem *m, dsk_status st) {
  if (m->st == DSK_STATUS_OK) m->st = st;
}

static size_t sm_size(int64_t bytes) { return (size_t)(bytes > 0 ? bytes : 1); }

/* `bytes` of the context's memory (zeroed on the host, uninitialised on a
 * device); NULL on failure. */
static void *sm_raw(step_mem *m, int64_t bytes) {
  void *p = NULL;
  if (m->n >= STEP_MAXBUF) {
    sm_fail(m, DSK_STATUS_OUT_OF_MEMORY);
    return NULL;
  }
  if (m->s->dev) {
    dsk_status st = dsk_mem_alloc(m->s->c, &p, sm_size(bytes));
    if (st != DSK_STATUS_OK) {
      sm_fail(m, st);
      return NULL;
    }
  } else {
    p = calloc(1, sm_size(bytes));
    if (!p) {
      sm_fail(m, DSK_STATUS_OUT_OF_MEMORY);
      return NULL;
    }
  }
  m->p[m->n++] = p;
  return p;
}

/* `bytes` of zeros in the context's memory. */
static void *sm_zero(step_mem *m, int64_t bytes) {
  void *p = sm_raw(m, bytes);
  if (p && m->s->dev) {
    dsk_status st = dsk_mem_set(m->s->c, p, 0, sm_size(bytes));
    if (st != DSK_STATUS_OK) {
      sm_fail(m, st); /* p stays listed: sm_done frees it */
      return NULL;
    }
  }
  return p;
}

/* The plan's workspace (split-K partials of the GEMMs), zeroed, when it
 * asks for one. */
static dsk_status sm_workspace(step_mem *m, const dsk_plan_info *pi, void **ws, int64_t *bytes) {
  if (pi->workspace_bytes <= 0) return DSK_STATUS_OK;
  *ws = sm_zero(m, pi->workspace_bytes);
  *bytes = pi->workspace_bytes;
  return m->st;
}

/* Zeroed host memory to fill; sm_put turns it into an input. */
static void *sm_host(step_mem *m, int64_t bytes) {
  if (!m->s->dev) return sm_zero(m, bytes);
  void *p = NULL;
  if (m->nh < STEP_MAXBUF) p = calloc(1, sm_size(bytes));
  if (!p) {
    sm_fail(m, DSK_STATUS_OUT_OF_MEMORY);
    return NULL;
  }
  m->h[m->nh++] = p;
  return p;
}

/* The host buffer h (of sm_host, `bytes` long) in the context's memory. */
static void *sm_put(step_mem *m, void *h, int64_t bytes) {
  if (!m->s->dev || !h) return h;
  void *p = sm_raw(m, bytes);
  if (p) {
    dsk_status st = dsk_mem_upload(m->s->c, p, h, (size_t)bytes);
    if (st != DSK_STATUS_OK) {
      sm_fail(m, st);
      return NULL;
    }
  }
  return p;
}

/* bf16 [n]: normal(0, sigma) values on the host; on a device the constant
 * bf16 0x3C3C (about 0.0115, finite). */
static dsk_bf16 *sm_bf16(step_mem *m, tu_rng *r, int64_t n, double sigma) {
  dsk_bf16 *p = (dsk_bf16 *)sm_raw(m, n * 2);
  if (!p) return NULL;
  if (!m->s->dev) {
    tu_fill_bf16_normal(r, p, (size_t)n, sigma);
  } else {
    dsk_status st = dsk_mem_set(m->s->c, p, 0x3C, (size_t)n * 2);
    if (st != DSK_STATUS_OK) {
      sm_fail(m, st);
      return NULL;
    }
  }
  return p;
}

/* A zero buffer of at least `bytes` kept in slot `slot` across the steps of
 * the loop (weights only: nothing writes them). */
static void *sm_keep(step_mem *m, int slot, int64_t bytes) {
  server *s = m->s;
  if (s->keep_bytes[slot] < (int64_t)sm_size(bytes)) {
    /* the previous step ended with sm_done: nothing on the device uses it */
    if (s->dev)
      dsk_mem_free(s->c, s->keep[slot]);
    else
      free(s->keep[slot]);
    s->keep[slot] = NULL;
    s->keep_bytes[slot] = 0;
    void *p = NULL;
    if (s->dev) {
      dsk_status st = dsk_mem_alloc(s->c, &p, sm_size(bytes));
      if (st == DSK_STATUS_OK) {
        st = dsk_mem_set(s->c, p, 0, sm_size(bytes));
        if (st != DSK_STATUS_OK) dsk_mem_free(s->c, p);
      }
      if (st != DSK_STATUS_OK) {
        sm_fail(m, st);
        return NULL;
      }
    } else {
      p = calloc(1, sm_size(bytes));
      if (!p) {
        sm_fail(m, DSK_STATUS_OUT_OF_MEMORY);
        return NULL;
      }
    }
    s->keep[slot] = p;
    s->keep_bytes[slot] = (int64_t)sm_size(bytes);
  }
  return s->keep[slot];
}

/* Ends a step: on a device waits for its work (an asynchronous failure
 * shows here), then frees its buffers. Returns st, else the first failure
 * of the step's memory calls, else the wait's. */
static dsk_status sm_done(step_mem *m, dsk_status st) {
  dsk_status ws = DSK_STATUS_OK;
  if (m->s->dev) ws = dsk_ctx_synchronize(m->s->c, NULL);
  for (int i = 0; i < m->n; i++) {
    if (m->s->dev)
      dsk_mem_free(m->s->c, m->p[i]);
    else
      free(m->p[i]);
  }
  for (int i = 0; i < m->nh; i++) free(m->h[i]);
  m->n = m->nh = 0;
  if (st != DSK_STATUS_OK) return st;
  if (m->st != DSK_STATUS_OK) return m->st;
  return ws;
}

static void server_free(server *s) {
  for (int i = 0; i < SERVER_KEEP; i++) {
    if (s->dev)
      dsk_mem_free(s->c, s->keep[i]);
    else
      free(s->keep[i]);
    s->keep[i] = NULL;
    s->keep_bytes[i] = 0;
  }
}

/* One decode step of the envelope on random data: returns the status. */
static dsk_status decode_step(server *s, const envelope *e, tu_rng *r) {
  int64_t T = tu_int(r, 1, e->max_T);
  int kind = 0; /* 0 SWA only / DSA, 1 C4A, 2 C128A */
  if (e->fmt == DSK_KV_FORMAT_B584) {
    int kinds[3], nk = 0;
    if (e->has_swa) kinds[nk++] = 0;
    if (e->has_c4a) kinds[nk++] = 1;
    if (e->has_c128a) kinds[nk++] = 2;
    kind = kinds[tu_int(r, 0, nk - 1)];
  }
  dsk_sparse_mla_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.format = e->fmt;
  d.T = T;
  d.H = e->H;
  const int64_t dqk = e->fmt == DSK_KV_FORMAT_A656 ? 576 : 512;
  step_mem m = sm_begin(s);
  d.q = sm_bf16(&m, r, T * e->H * dqk, 0.5);
  d.q_stride_h = dqk;
  d.q_stride_t = e->H * dqk;
  d.sm_scale = 0.04f;
  d.nseg = kind == 0 ? 1 : 2;
  int64_t w[2], pbs[2];
  w[0] = e->fmt == DSK_KV_FORMAT_A656 ? e->topk : e->w_swa;
  pbs[0] = e->pbs;
  if (kind == 1) {
    w[1] = e->topk;
    pbs[1] = e->pbs4;
  } else if (kind == 2) {
    /* the engine's width: round_up(largest compressed count, 128), or the
     * graph-safe fixed width of the envelope */
    int64_t cmax = (e->max_ctx + 127) / 128;
    int64_t fixed = (cmax + 127) / 128 * 128;
    int64_t cnt = tu_int(r, 1, cmax);
    w[1] = tu_int(r, 0, 3) == 0 ? fixed : (cnt + 127) / 128 * 128;
    pbs[1] = e->pbs128;
  }
  for (int i = 0; i < d.nseg; i++) {
    dsk_sparse_mla_segment *g = &d.seg[i];
    g->cache.pbs = pbs[i];
    g->cache.page_stride = dsk_kv_canonical_page_stride(e->fmt, pbs[i]);
    g->cache.num_pages = 2;
    g->cache.base = sm_zero(&m, g->cache.page_stride * 2);
    int32_t *sl = (int32_t *)sm_host(&m, T * w[i] * 4);
    int32_t *lens = (int32_t *)sm_host(&m, T * 4);
    if (!sl || !lens) return sm_done(&m, m.st);
    for (int64_t k = 0; k < T * w[i]; k++) sl[k] = (int32_t)tu_int(r, 0, 2 * pbs[i] - 1);
    for (int64_t t = 0; t < T; t++) lens[t] = (int32_t)tu_int(r, 0, w[i]);
    g->slots = (const int32_t *)sm_put(&m, sl, T * w[i] * 4);
    g->slots_stride_t = w[i];
    g->width = w[i];
    g->lens = (const int32_t *)sm_put(&m, lens, T * 4);
  }
  d.out = (dsk_bf16 *)sm_raw(&m, T * e->H * 512 * 2);
  d.out_stride_h = 512;
  d.out_stride_t = e->H * 512;
  if (m.st != DSK_STATUS_OK) return sm_done(&m, m.st);
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st = dsk_sparse_mla_decode_plan(s->c, &d, &pi);
  if (st == DSK_STATUS_OK) {
    if (pi.tactic_source != DSK_TACTIC_TUNED) st = DSK_STATUS_TUNE_MISS;
    d.workspace = sm_raw(&m, pi.workspace_bytes + 64);
    d.workspace_bytes = pi.workspace_bytes;
    if (st == DSK_STATUS_OK && m.st == DSK_STATUS_OK) st = dsk_sparse_mla_decode(s->c, &d);
  }
  return sm_done(&m, st);
}

static dsk_status mhc_step(server *s, const envelope *e, tu_rng *r) {
  int64_t T = tu_int(r, 1, e->max_T), nD = 4 * e->D;
  dsk_mhc_prenorm_desc pd;
  dsk_mhc_prenorm_desc_init(&pd);
  pd.T = T;
  pd.D = e->D;
  pd.nD = nD;
  step_mem m = sm_begin(s);
  pd.R = sm_bf16(&m, r, T * nD, 1.0);
  pd.R_stride = nD;
  pd.fn = (const float *)sm_zero(&m, 24 * nD * 4);
  if (m.st != DSK_STATUS_OK) return sm_done(&m, m.st);
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st = dsk_mhc_prenorm_plan(s->c, &pd, &pi);
  if (st == DSK_STATUS_OK) {
    pd.partials = (float *)sm_raw(&m, pi.workspace_bytes);
    pd.partials_bytes = pi.workspace_bytes;
    st = m.st != DSK_STATUS_OK ? m.st : dsk_mhc_prenorm(s->c, &pd);
  }
  return sm_done(&m, st);
}

/* Plan (the source must be TUNED) then run. */
#define PLAN_TUNED(plan_call)                                                 \
  do {                                                                        \
    memset(&pi, 0, sizeof pi);                                                \
    pi.struct_size = sizeof pi;                                               \
    st = (plan_call);                                                         \
    if (st == DSK_STATUS_OK && pi.tactic_source != DSK_TACTIC_TUNED) st = DSK_STATUS_TUNE_MISS; \
  } while (0)

/* Kept-buffer slots: routed W13, SF13, W2, SF2 (also the B / SFB of
 * gemm_step), then the shared expert's (also those of dense_step). */
enum { KEEP_W13 = 0, KEEP_SF13 = 1, KEEP_W2 = 2, KEEP_SF2 = 3, KEEP_SW13 = 4, KEEP_SSF13 = 5, KEEP_SW2 = 6, KEEP_SSF2 = 7 };

/* One MoE layer through dsk_moe_run (random ids, zero weights): the FC1 and
 * FC2 lookups, and the shared expert's two dense ones. */
static dsk_status moe_step(server *s, const envelope *e, tu_rng *r, int *lookups) {
  const int64_t T = tu_int(r, 1, e->max_T), H = e->D, K = e->moe_topk;
  *lookups += e->Is ? 4 : 2;
  step_mem m = sm_begin(s);
  dsk_moe_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = T;
  d.H = H;
  d.E = e->E;
  d.E_local = e->E;
  d.topk = K;
  int32_t *ids = (int32_t *)sm_host(&m, T * K * 4);
  float *w = (float *)sm_host(&m, T * K * 4);
  if (!ids || !w) return sm_done(&m, m.st);
  for (int64_t t = 0; t < T; t++) {
    int64_t pm[DSK_MOE_MAX_EXPERTS];
    tu_permutation(r, pm, e->E);
    for (int64_t k = 0; k < K; k++) {
      ids[t * K + k] = (int32_t)pm[k];
      w[t * K + k] = (float)tu_uniform(r);
    }
  }
  d.ids_in = (const int32_t *)sm_put(&m, ids, T * K * 4);
  d.weights_in = (const float *)sm_put(&m, w, T * K * 4);
  d.x = (const dsk_bf16 *)sm_zero(&m, T * H * 2);
  d.x_stride = H;
  d.y = (dsk_bf16 *)sm_zero(&m, T * H * 2);
  d.y_stride = H;
  int64_t b[4];
  dsk_moe_weights_bytes(e->wfmt, e->E, H, e->Ir, b);
  d.routed.fmt = e->wfmt;
  d.routed.E = e->E;
  d.routed.I = e->Ir;
  d.routed.w13 = sm_keep(&m, KEEP_W13, b[0]);
  d.routed.sf13 = (const int32_t *)sm_keep(&m, KEEP_SF13, b[1]);
  d.routed.w2 = sm_keep(&m, KEEP_W2, b[2]);
  d.routed.sf2 = (const int32_t *)sm_keep(&m, KEEP_SF2, b[3]);
  if (e->Is) {
    dsk_moe_weights_bytes(DSK_MOE_W_FP8, 1, H, e->Is, b);
    d.shared.fmt = DSK_MOE_W_FP8;
    d.shared.E = 1;
    d.shared.I = e->Is;
    d.shared.w13 = sm_keep(&m, KEEP_SW13, b[0]);
    d.shared.sf13 = (const int32_t *)sm_keep(&m, KEEP_SSF13, b[1]);
    d.shared.w2 = sm_keep(&m, KEEP_SW2, b[2]);
    d.shared.sf2 = (const int32_t *)sm_keep(&m, KEEP_SSF2, b[3]);
  }
  if (m.st != DSK_STATUS_OK) return sm_done(&m, m.st);
  dsk_plan_info pi;
  dsk_status st;
  PLAN_TUNED(dsk_moe_plan(s->c, &d, &pi));
  if (st == DSK_STATUS_OK) {
    d.workspace = sm_zero(&m, pi.workspace_bytes);
    d.workspace_bytes = pi.workspace_bytes;
    st = m.st != DSK_STATUS_OK ? m.st : dsk_moe_run(s->c, &d);
  }
  return sm_done(&m, st);
}

/* A grouped GEMM called on its own (an engine with its own permute): the
 * descriptor has expected_m = T*topk but not topk; the lookup matches on
 * rows. m_indices all -1 (every block skipped). */
static dsk_status gemm_step(server *s, const envelope *e, tu_rng *r, int *lookups) {
  const int64_t T = tu_int(r, 1, e->max_T), fc2 = tu_int(r, 0, 1);
  dsk_moe_align_desc ad;
  memset(&ad, 0, sizeof ad);
  ad.struct_size = sizeof ad;
  ad.M = T;
  ad.topk = e->moe_topk;
  ad.E_local = e->E;
  int64_t msum = 0, au = 0;
  dsk_status st = dsk_moe_aligned_m(&ad, &msum, &au);
  if (st != DSK_STATUS_OK) return st;
  *lookups += 1;
  step_mem m = sm_begin(s);
  dsk_moe_gemm_desc g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.M_sum = msum;
  g.N = fc2 ? e->D : 2 * e->Ir;
  g.K = fc2 ? e->Ir : e->D;
  g.E_local = e->E;
  g.A_used = au;
  g.expected_m = T * e->moe_topk;
  g.A = (const uint8_t *)sm_zero(&m, msum * g.K);
  g.A_stride = g.K;
  g.sfa.words = (const int32_t *)sm_zero(&m, dsk_sf_packed_words(1, msum, g.K / 128) * 4);
  g.sfa.groups = 1;
  g.sfa.mn = msum;
  g.sfa.sf_k = g.K / 128;
  int32_t *mi = (int32_t *)sm_host(&m, msum * 4);
  if (!mi) return sm_done(&m, m.st);
  for (int64_t i = 0; i < msum; i++) mi[i] = -1;
  g.m_indices = (const int32_t *)sm_put(&m, mi, msum * 4);
  g.b_fmt = e->wfmt;
  const int mx = e->wfmt == DSK_MOE_W_MXFP4;
  g.B = sm_keep(&m, KEEP_W13, e->E * g.N * (mx ? g.K / 2 : g.K));
  g.sfb.words = (const int32_t *)sm_keep(&m, KEEP_SF13, dsk_sf_packed_words(e->E, g.N, mx ? g.K / 32 : g.K / 128) * 4);
  g.sfb.groups = e->E;
  g.sfb.mn = g.N;
  g.sfb.sf_k = mx ? g.K / 32 : g.K / 128;
  g.D = (dsk_bf16 *)sm_zero(&m, msum * g.N * 2);
  g.D_stride = g.N;
  if (m.st != DSK_STATUS_OK) return sm_done(&m, m.st);
  dsk_plan_info pi;
  PLAN_TUNED(dsk_moe_gemm_plan(s->c, &g, &pi));
  if (st == DSK_STATUS_OK) st = sm_workspace(&m, &pi, &g.workspace, &g.workspace_bytes);
  if (st == DSK_STATUS_OK) st = dsk_moe_gemm(s->c, &g);
  return sm_done(&m, st);
}

/* A dense FP8 GEMM of the envelope: the shared expert or a dense MLP layer. */
static dsk_status dense_step(server *s, const envelope *e, tu_rng *r, int *lookups) {
  const int64_t T = tu_int(r, 1, e->max_T);
  int64_t I = e->Is;
  if (e->Id && (!I || tu_int(r, 0, 1))) I = e->Id;
  const int fc2 = (int)tu_int(r, 0, 1);
  *lookups += 1;
  step_mem m = sm_begin(s);
  dsk_dense_gemm_desc g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.M = T;
  g.N = fc2 ? e->D : 2 * I;
  g.K = fc2 ? I : e->D;
  g.A = (const uint8_t *)sm_zero(&m, T * g.K);
  g.A_stride = g.K;
  g.sfa.words = (const int32_t *)sm_zero(&m, dsk_sf_packed_words(1, T, g.K / 128) * 4);
  g.sfa.groups = 1;
  g.sfa.mn = T;
  g.sfa.sf_k = g.K / 128;
  g.B = (const uint8_t *)sm_keep(&m, KEEP_SW13, g.N * g.K);
  g.sfb.words = (const int32_t *)sm_keep(&m, KEEP_SSF13, dsk_sf_packed_words(1, g.N, g.K / 128) * 4);
  g.sfb.groups = 1;
  g.sfb.mn = g.N;
  g.sfb.sf_k = g.K / 128;
  g.D = (dsk_bf16 *)sm_zero(&m, T * g.N * 2);
  g.D_stride = g.N;
  if (m.st != DSK_STATUS_OK) return sm_done(&m, m.st);
  dsk_plan_info pi;
  dsk_status st;
  PLAN_TUNED(dsk_dense_fp8_gemm_plan(s->c, &g, &pi));
  if (st == DSK_STATUS_OK) st = sm_workspace(&m, &pi, &g.workspace, &g.workspace_bytes);
  if (st == DSK_STATUS_OK) st = dsk_dense_fp8_gemm(s->c, &g);
  return sm_done(&m, st);
}

/* Runs `steps` random steps (attention, mHC, MoE layers, grouped and dense
 * GEMMs of the envelope) on c, with the context's memory (device memory on
 * a GPU); every lookup must find a tuned entry. */
static void serve(dsk_ctx *c, const envelope *e, int steps, uint64_t seed, const char *what) {
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  TU_CHECK_OK(&counts, dsk_ctx_get_info(c, &info));
  server sv;
  memset(&sv, 0, sizeof sv);
  sv.c = c;
  sv.dev = info.is_cuda;
  tu_rng r = tu_rng_make(seed);
  TU_CHECK_OK(&counts, dsk_autotune_reset_stats(c));
  int fails = 0, lookups = 0, kinds[5], nk = 0, done[5] = {0};
  kinds[nk++] = 0;
  if (e->has_mhc) kinds[nk++] = 1;
  if (e->E) kinds[nk++] = 2;
  if (e->E) kinds[nk++] = 3;
  if (e->Is || e->Id) kinds[nk++] = 4;
  for (int i = 0; i < steps; i++) {
    const int kind = kinds[tu_int(&r, 0, nk - 1)];
    dsk_status st;
    done[kind]++;
    if (kind == 1) {
      st = mhc_step(&sv, e, &r);
      lookups++;
    } else if (kind == 2) {
      st = moe_step(&sv, e, &r, &lookups);
    } else if (kind == 3) {
      st = gemm_step(&sv, e, &r, &lookups);
    } else if (kind == 4) {
      st = dense_step(&sv, e, &r, &lookups);
    } else {
      st = decode_step(&sv, e, &r);
      lookups++;
    }
    if (st != DSK_STATUS_OK && fails++ < 3)
      fprintf(stderr, "%s step %d: %s: %s\n", what, i, dsk_status_name(st), dsk_last_error());
  }
  server_free(&sv);
  dsk_tune_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  TU_CHECK_OK(&counts, dsk_autotune_stats(c, &s));
  TU_CHECK(&counts, fails == 0 && s.misses == 0 && s.invalid == 0 && s.hits == lookups,
           "%s: %d steps: %d failed, %lld misses, %lld invalid, %lld hits (want %d)", what, steps, fails,
           (long long)s.misses, (long long)s.invalid, (long long)s.hits, lookups);
  for (int k = 0; k < nk; k++)
    TU_CHECK(&counts, done[kinds[k]] > 0, "%s: step kind %d was exercised", what, kinds[k]);
}

static void test_serving(void) {
  setenv("DSK_AUTOTUNE_L2", "warm", 1);
  setenv("DSK_AUTOTUNE_REQUIRE_HIT", "1", 1);
  char dir[] = "/tmp/dsk-warmup-XXXXXX";
  TU_CHECK(&counts, mkdtemp(dir) != NULL, "mkdtemp");
  setenv("DSK_CACHE_DIR", dir, 1);

  /* DeepSeek-V4-shaped (tiny config with hidden 128, so that its MoE
   * layers have GEMM shapes: 8 experts, top-2, I 128, one shared expert):
   * tokens <= 8, context 20000 (C128A widths 128 and 256). */
  dsk_model_desc m = model_init();
  char path[1024];
  data_path(path, sizeof path, "tiny-dsv4");
  TU_CHECK_OK(&counts, dsk_model_desc_from_config(path, &m));
  dsk_serving_desc sv;
  dsk_serving_desc_init(&sv);
  sv.max_tokens = 8;
  sv.max_context = 20000;
  dsk_ctx *c = ctx_new();
  dsk_warmup_list *l = NULL;
  /* hidden 64 (the file): its MoE GEMMs cannot run (K 64), so no MoE keys */
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l));
  TU_CHECK(&counts, dsk_warmup_list_size(l) == 20, "tiny envelope, hidden 64: %lld keys (want 20, no MoE)",
           (long long)dsk_warmup_list_size(l));
  dsk_warmup_list_free(l);
  m.hidden_size = 128;
  envelope e = {DSK_KV_FORMAT_B584, 8, 8, 20000, 128, 128, 64, 64, 2, 1, 1, 1, 1, 128,
                8, 2, 128, 128, 0, DSK_MOE_W_MXFP4};
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l));
  /* (SWA + C4A + 2 C128A) x {1,2,4,8} + mHC x 4 + MoE FC1 / FC2 (A 64) x 4
   * + shared expert FC1 / FC2 x 4 */
  const int64_t nkeys = 36;
  TU_CHECK(&counts, dsk_warmup_list_size(l) == nkeys, "tiny envelope: %lld keys (want %lld)",
           (long long)dsk_warmup_list_size(l), (long long)nkeys);
  prog g;
  memset(&g, 0, sizeof g);
  double t0 = tu_now_us();
  TU_CHECK_OK(&counts, dsk_warmup_run(c, l, 0, on_progress, &g));
  printf("test_warmup: tiny DSv4 warmup (%lld keys) %.2f s\n", (long long)nkeys, (tu_now_us() - t0) * 1e-6);
  TU_CHECK(&counts, g.calls == nkeys && g.tuned == nkeys, "warmup: %lld tuned of %lld", (long long)g.tuned,
           (long long)g.calls);
  serve(c, &e, 200, 1, "tiny DSv4 after warmup");

  /* The same list again: everything cached; forced: re-tuned. */
  memset(&g, 0, sizeof g);
  TU_CHECK_OK(&counts, dsk_warmup_run(c, l, DSK_WARMUP_NO_SAVE, on_progress, &g));
  TU_CHECK(&counts, g.cached == nkeys && g.tuned == 0, "second warmup: %lld cached", (long long)g.cached);
  memset(&g, 0, sizeof g);
  TU_CHECK_OK(&counts, dsk_warmup_run(c, l, DSK_WARMUP_FORCE | DSK_WARMUP_NO_SAVE, on_progress, &g));
  TU_CHECK(&counts, g.tuned == nkeys, "forced warmup: %lld tuned", (long long)g.tuned);
  TU_CHECK(&counts, dsk_warmup_run(c, l, 0x100, NULL, NULL) == DSK_STATUS_INVALID_ARG, "unknown flag");

  /* Rank 0 exports; rank 1 (no cache file) imports and warms up without
   * tuning (A19): zero misses too. */
  size_t len = 0;
  TU_CHECK_OK(&counts, dsk_autotune_export(c, NULL, &len));
  char *buf = (char *)malloc(len);
  TU_CHECK_OK(&counts, dsk_autotune_export(c, buf, &len));
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  dsk_ctx *rank1 = ctx_new();
  unsetenv("DSK_AUTOTUNE_CACHE");
  TU_CHECK_OK(&counts, dsk_autotune_import(rank1, buf, len - 1));
  memset(&g, 0, sizeof g);
  TU_CHECK_OK(&counts, dsk_warmup_run(rank1, l, DSK_WARMUP_NO_TUNE, on_progress, &g));
  TU_CHECK(&counts, g.cached == nkeys && g.tuned == 0, "rank 1 warmup without tuning: %lld cached",
           (long long)g.cached);
  serve(rank1, &e, 60, 2, "rank 1 after import");
  dsk_ctx_destroy(rank1);
  free(buf);

  /* Another process of the machine loads the file (full-cache warmup). */
  dsk_ctx *c2 = ctx_new();
  memset(&g, 0, sizeof g);
  t0 = tu_now_us();
  TU_CHECK_OK(&counts, dsk_warmup_run(c2, l, 0, on_progress, &g));
  printf("test_warmup: warmup with a full cache %.3f s\n", (tu_now_us() - t0) * 1e-6);
  TU_CHECK(&counts, g.cached == nkeys, "from the file: %lld cached", (long long)g.cached);
  serve(c2, &e, 60, 3, "second process from the file");
  dsk_ctx_destroy(c2);
  dsk_warmup_list_free(l);

  /* Budget too small: keys are skipped with a reason, nothing breaks. */
  setenv("DSK_AUTOTUNE_MAX_MB", "1", 1);
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  unsetenv("DSK_AUTOTUNE_REQUIRE_HIT");
  dsk_ctx *c3 = ctx_new();
  sv.max_tokens = 1;
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c3, &m, &sv, &l));
  memset(&g, 0, sizeof g);
  TU_CHECK_OK(&counts, dsk_warmup_run(c3, l, 0, on_progress, &g));
  TU_CHECK(&counts, g.skipped >= 4 && g.skipped + g.tuned == g.calls, "1 MiB budget: %lld skipped of %lld",
           (long long)g.skipped, (long long)g.calls);
  dsk_warmup_list_free(l);
  dsk_ctx_destroy(c3);
  unsetenv("DSK_AUTOTUNE_MAX_MB");
  unsetenv("DSK_AUTOTUNE_CACHE");
  setenv("DSK_AUTOTUNE_REQUIRE_HIT", "1", 1);

  /* GLM-5.1 TP8 (Format A, top-2048, 8 heads per rank), tokens <= 2. The
   * MoE widths are reduced (hidden 128; routed and shared I 1024, dense MLP
   * I 2048, so 128 and 256 per rank) to keep the CPU timing short; the
   * FP8 experts, 256 of them at top-8, are the model's. */
  m = model_init();
  TU_CHECK_OK(&counts, dsk_model_desc_builtin("glm-5.1", &m));
  m.hidden_size = 128;
  m.moe_intermediate_size = 1024;
  m.dense_intermediate_size = 2048;
  dsk_serving_desc_init(&sv);
  sv.tp = 8;
  sv.max_tokens = 2;
  sv.max_context = 8192;
  envelope eg = {DSK_KV_FORMAT_A656, 8, 2, 8192, 0, 2048, 64, 0, 0, 0, 0, 0, 0, 128,
                 256, 8, 128, 128, 256, DSK_MOE_W_FP8};
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l));
  /* attention + (MoE FC1, FC2, shared FC1, FC2, dense FC1, FC2) x {1, 2} */
  TU_CHECK(&counts, dsk_warmup_list_size(l) == 14, "GLM envelope: %lld keys (want 14)",
           (long long)dsk_warmup_list_size(l));
  t0 = tu_now_us();
  TU_CHECK_OK(&counts, dsk_warmup_run(c, l, 0, NULL, NULL));
  printf("test_warmup: GLM-5.1 TP8 warmup (14 keys) %.2f s\n", (tu_now_us() - t0) * 1e-6);
  serve(c, &eg, 40, 4, "GLM-5.1 TP8 after warmup");
  dsk_warmup_list_free(l);
  dsk_ctx_destroy(c);

  unsetenv("DSK_AUTOTUNE_REQUIRE_HIT");
  unsetenv("DSK_CACHE_DIR");
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
}

/* ------------------------------------------------ serving loop on a GPU */
/* "name=<int>;" of a key, -1 when absent. */
static int64_t key_field(const char *key, const char *name) {
  char pat[24];
  snprintf(pat, sizeof pat, ";%s=", name);
  const char *p = strstr(key, pat);
  return p ? atoll(p + strlen(pat)) : -1;
}

/* The A20 property with the full DSv4-Flash TP2 envelope of `dsk tune
 * --model deepseek-v4-flash --tp 2 --max-tokens 256 --max-context 131072`
 * (195 keys) on the GPU that DSK_TEST_DEVICE names: warmup from an empty
 * cache folder (wall time printed), then random steps inside the envelope
 * with every buffer in device memory and DSK_AUTOTUNE_REQUIRE_HIT=1: zero
 * misses; then a second context (another process of the machine) warms up
 * from the file and serves too. Skipped, at no cost, on the CPU. */
static void serve_gpu_flash(dsk_ctx **pc, const dsk_ctx_opts *o, const dsk_ctx_info *info) {
  dsk_ctx *c = *pc;
  dsk_warmup_list *l = NULL;
  dsk_model_desc m = model_init();
  TU_CHECK_OK(&counts, dsk_model_desc_builtin("deepseek-v4-flash", &m));
  dsk_serving_desc sv;
  dsk_serving_desc_init(&sv);
  sv.tp = 2;
  sv.max_tokens = 256;
  sv.max_context = 131072;
  TU_CHECK_OK(&counts, dsk_warmup_enumerate(c, &m, &sv, &l));
  if (!l) return;
  const list_info li = inspect(l);
  TU_CHECK(&counts, li.n == 195 && li.mla == 130 && li.mhc == 13 && li.moe == 26 && li.dense == 26 && li.H == 32 &&
                        li.maxT == 256 && li.moe_E == 256 && li.dup == 0,
           "GPU Flash TP2 131072/256: %lld keys (want 195: 130 + 13 + 26 + 26)", (long long)li.n);

  /* The envelope from the model and the serving description, as the
   * enumeration derives it (no EP: E_local = E; TP shards the heads and the
   * intermediate sizes; serving page sizes 0 = 64, 64, 2; SWA width = the
   * model's window). */
  envelope e;
  memset(&e, 0, sizeof e);
  const int64_t tp = sv.tp;
  e.fmt = m.kv_format;
  e.H = m.num_heads / tp;
  e.max_T = sv.max_tokens;
  e.max_ctx = sv.max_context;
  e.w_swa = m.sliding_window;
  e.topk = m.index_topk;
  e.pbs = 64;
  e.pbs4 = 64;
  e.pbs128 = 2;
  for (int64_t i = 0; i < m.num_layers; i++) {
    if (m.compress_ratio[i] == 0) e.has_swa = 1;
    if (m.compress_ratio[i] == 4) e.has_c4a = 1;
    if (m.compress_ratio[i] == 128) e.has_c128a = 1;
  }
  if (m.num_mtp_layers > 0) e.has_swa = 1;
  e.has_mhc = m.hc_mult == DSK_MHC_STREAMS;
  e.D = m.hidden_size;
  e.E = m.n_routed_experts;
  e.moe_topk = m.num_experts_per_tok;
  e.Ir = m.moe_intermediate_size / tp;
  e.Is = m.moe_intermediate_size * m.n_shared_experts / tp;
  e.Id = m.first_k_dense > 0 ? m.dense_intermediate_size / tp : 0;
  e.wfmt = m.kv_format == DSK_KV_FORMAT_B584 ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8;
  /* spec/models.md: DSv4-Flash per TP2 rank */
  TU_CHECK(&counts, e.fmt == DSK_KV_FORMAT_B584 && e.H == 32 && e.w_swa == 128 && e.topk == 512 && e.has_swa &&
                        e.has_c4a && e.has_c128a && e.has_mhc && e.D == 4096 && e.E == 256 && e.moe_topk == 6 &&
                        e.Ir == 1024 && e.Is == 1024 && e.Id == 0 && e.wfmt == DSK_MOE_W_MXFP4,
           "DSv4-Flash TP2 envelope: H %lld, D %lld, E %lld top-%lld, I %lld / shared %lld / dense %lld",
           (long long)e.H, (long long)e.D, (long long)e.E, (long long)e.moe_topk, (long long)e.Ir, (long long)e.Is,
           (long long)e.Id);
  /* ... and every key of the list has the envelope's fields */
  const int64_t cmax = ((e.max_ctx + 127) / 128 + 127) / 128 * 128;
  int64_t bad = 0, c128_max = 0;
  for (int64_t i = 0; i < li.n; i++) {
    dsk_warmup_item it;
    memset(&it, 0, sizeof it);
    it.struct_size = sizeof it;
    if (dsk_warmup_list_item(l, i, &it) != DSK_STATUS_OK) {
      bad++;
      continue;
    }
    const int64_t N = key_field(it.key, "N"), K = key_field(it.key, "K");
    int ok = 0;
    if (it.op == DSK_OP_SPARSE_MLA_DECODE) {
      const int64_t w1 = key_field(it.key, "w1"), p1 = key_field(it.key, "pbs1");
      ok = key_field(it.key, "H") == e.H && key_field(it.key, "w0") == e.w_swa && key_field(it.key, "pbs0") == e.pbs &&
           ((w1 == 0 && p1 == 0) || (w1 == e.topk && p1 == e.pbs4) || (p1 == e.pbs128 && w1 >= 128 && w1 <= cmax));
      if (p1 == e.pbs128 && w1 > c128_max) c128_max = w1;
    } else if (it.op == DSK_OP_MHC_PRENORM) {
      ok = key_field(it.key, "nD") == 4 * e.D;
    } else if (it.op == DSK_OP_MOE_GEMM) {
      ok = ((N == 2 * e.Ir && K == e.D) || (N == e.D && K == e.Ir)) && key_field(it.key, "E") == e.E &&
           key_field(it.key, "topk") == e.moe_topk && strstr(it.key, ";fmt=mxfp4;") != NULL;
    } else if (it.op == DSK_OP_MOE_DENSE_GEMM) {
      ok = (N == 2 * e.Is && K == e.D) || (N == e.D && K == e.Is) ||
           (e.Id && ((N == 2 * e.Id && K == e.D) || (N == e.D && K == e.Id)));
    }
    if (!ok) {
      if (bad < 3) fprintf(stderr, "key outside the envelope: %s\n", it.key);
      bad++;
    }
  }
  TU_CHECK(&counts, bad == 0 && c128_max == cmax, "%lld keys outside the envelope; widest C128A key %lld (want %lld)",
           (long long)bad, (long long)c128_max, (long long)cmax);

  prog g;
  memset(&g, 0, sizeof g);
  double t0 = tu_now_us();
  TU_CHECK_OK(&counts, dsk_warmup_run(c, l, 0, on_progress, &g));
  printf("test_warmup: DSv4-Flash TP2 warmup (%lld keys, 256 tokens, context 131072) on %s (%s) from an empty cache "
         "%.2f s: %lld tuned, %lld cached, %lld skipped\n",
         (long long)li.n, info->device_name, info->backend, (tu_now_us() - t0) * 1e-6, (long long)g.tuned,
         (long long)g.cached, (long long)g.skipped);
  TU_CHECK(&counts, g.calls == li.n && g.tuned == li.n, "GPU warmup: %lld tuned of %lld (%lld skipped)",
           (long long)g.tuned, (long long)li.n, (long long)g.skipped);
  t0 = tu_now_us();
  serve(c, &e, 250, 5, "DSv4-Flash TP2 on the GPU after warmup");
  printf("test_warmup: 250 serving steps on the GPU %.2f s\n", (tu_now_us() - t0) * 1e-6);
  dsk_ctx_destroy(*pc);

  /* Another process of the machine: the full cache from the file. */
  *pc = NULL;
  dsk_status st = dsk_ctx_create(pc, o);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "second dsk_ctx_create(%s): %s", o->device, dsk_last_error());
  dsk_ctx *c2 = *pc;
  if (!c2) {
    dsk_warmup_list_free(l);
    return;
  }
  memset(&g, 0, sizeof g);
  t0 = tu_now_us();
  TU_CHECK_OK(&counts, dsk_warmup_run(c2, l, 0, on_progress, &g));
  printf("test_warmup: DSv4-Flash TP2 warmup on the GPU with a full cache %.3f s\n", (tu_now_us() - t0) * 1e-6);
  TU_CHECK(&counts, g.calls == li.n && g.cached == li.n, "GPU warmup from the file: %lld cached of %lld",
           (long long)g.cached, (long long)li.n);
  serve(c2, &e, 60, 6, "DSv4-Flash TP2 on the GPU, second process from the file");
  dsk_warmup_list_free(l);
}

/* DSK_TEST_DEVICE names a GPU: serve_gpu_flash there, with a fresh cache
 * folder; otherwise a line saying it was skipped. */
static void test_serving_gpu(void) {
  const char *dev = getenv("DSK_TEST_DEVICE");
  if (!dev || !dev[0] || strcmp(dev, "cpu") == 0) {
    printf("test_warmup: GPU serving loop skipped (DSK_TEST_DEVICE %s; cuda:N runs it)\n",
           dev && dev[0] ? dev : "unset");
    return;
  }
  char dir[] = "/tmp/dsk-warmup-gpu-XXXXXX";
  if (!mkdtemp(dir)) {
    TU_CHECK(&counts, 0, "mkdtemp");
    return;
  }
  setenv("DSK_CACHE_DIR", dir, 1);
  setenv("DSK_AUTOTUNE_REQUIRE_HIT", "1", 1);
  unsetenv("DSK_AUTOTUNE_L2"); /* the tuner's defaults, as `dsk tune` */
  unsetenv("DSK_AUTOTUNE_CACHE");
  unsetenv("DSK_AUTOTUNE_MAX_MB");
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = dev;
  dsk_ctx *c = NULL;
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  dsk_status st = dsk_ctx_create(&c, &o);
  TU_CHECK(&counts, st == DSK_STATUS_OK, "dsk_ctx_create(%s): %s: %s", dev, dsk_status_name(st), dsk_last_error());
  if (c) TU_CHECK_OK(&counts, dsk_ctx_get_info(c, &info));
  if (c && !info.is_cuda)
    printf("test_warmup: GPU serving loop skipped (DSK_TEST_DEVICE %s is backend %s, not a GPU)\n", dev,
           info.backend);
  else if (c)
    serve_gpu_flash(&c, &o, &info);
  dsk_ctx_destroy(c);
  unsetenv("DSK_AUTOTUNE_REQUIRE_HIT");
  unsetenv("DSK_CACHE_DIR");
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
}

int main(void) {
  /* Never the user's cache: HOME points at a folder of this run. */
  char home[] = "/tmp/dsk-warmup-home-XXXXXX";
  TU_CHECK(&counts, mkdtemp(home) != NULL, "mkdtemp");
  setenv("HOME", home, 1);
  unsetenv("XDG_CACHE_HOME");
  unsetenv("DSK_CACHE_DIR");
  unsetenv("DSK_AUTOTUNE");
  unsetenv("DSK_AUTOTUNE_CACHE");
  unsetenv("DSK_AUTOTUNE_MAX_MB");
  unsetenv("DSK_AUTOTUNE_REQUIRE_HIT");
  test_models();
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  dsk_ctx *c = ctx_new();
  unsetenv("DSK_AUTOTUNE_CACHE");
  if (c) test_enumerate(c);
  dsk_ctx_destroy(c);
  test_serving();
  test_serving_gpu();
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", home);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", home);
  return tu_finish("test_warmup", &counts);
}
