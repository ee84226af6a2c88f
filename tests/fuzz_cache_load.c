/* fuzz_cache_load.c - fuzz target of the tuning-cache loader (the document
 * validation behind cache loads and dsk_autotune_import) and of the
 * config.json parser (spec/autotune.md A16-A17: never a crash, never a
 * wrong tactic).
 *
 * Each input is tried three ways: as given; with its "meta" replaced by this
 * context's and every "kb=" of its keys set to this build's ids (so the
 * fuzzer reaches the per-entry checks without guessing a fingerprint); and
 * as a config.json. Invariants (a failure traps): every entry the context
 * holds has a tactic valid for its key, and the context's own export always
 * imports back.
 *
 * Built two ways (CMakeLists.txt): with clang -fsanitize=fuzzer,address as a
 * libFuzzer target, and with DSK_FUZZ_REPLAY_MAIN as a plain driver that
 * generates a corpus (valid documents, truncations, byte flips, garbage,
 * the sample config.json files and their mutations), replays it, and with
 * --write-corpus DIR writes it to DIR/seed for the fuzzer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cJSON.h"
#include "dsk.h"
#include "tune/tuner.h"

static dsk_ctx *g_ctx;
static cJSON *g_meta;
static int64_t g_runs;

static void fuzz_init(void) {
  if (g_ctx) return;
  setenv("DSK_AUTOTUNE_CACHE", "off", 1);
  setenv("DSK_LOG_LEVEL", "0", 1);
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  o.num_threads = 1;
  if (dsk_ctx_create(&g_ctx, &o) != DSK_STATUS_OK) __builtin_trap();
  size_t len = 0;
  if (dsk_autotune_export(g_ctx, NULL, &len) != DSK_STATUS_OK) __builtin_trap();
  char *buf = (char *)malloc(len);
  if (!buf || dsk_autotune_export(g_ctx, buf, &len) != DSK_STATUS_OK) __builtin_trap();
  cJSON *root = cJSON_Parse(buf);
  free(buf);
  if (!root) __builtin_trap();
  g_meta = cJSON_DetachItemFromObjectCaseSensitive(root, "meta");
  cJSON_Delete(root);
  if (!g_meta) __builtin_trap();
}

/* Re-creates the context now and then so imported entries do not pile up. */
static void fuzz_recycle(void) {
  if (++g_runs % 512 != 0) return;
  dsk_ctx_destroy(g_ctx);
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  o.num_threads = 1;
  if (dsk_ctx_create(&g_ctx, &o) != DSK_STATUS_OK) __builtin_trap();
}

/* Every held entry: a parsable key of this build and a tactic valid for it. */
static void check_entries(void) {
  dsk__tuner *t = dsk__tuner_get(g_ctx);
  if (!t) __builtin_trap();
  for (int64_t i = 0; i < dsk__tuner_count(t); i++) {
    const dsk__tune_entry *e = dsk__tuner_at(t, i);
    dsk__tune_shape s;
    char kb[17];
    if (dsk__tune_parse_key(e->key, &s, kb) != 0) __builtin_trap();
    if (strcmp(kb, dsk_kernel_build_id((dsk_op)s.op)) != 0) __builtin_trap();
    dsk_tactic c = e->t;
    if (!dsk__tune_tactic_fix(&s, &c) || memcmp(&c, &e->t, sizeof c) != 0) __builtin_trap();
  }
}

/* The context's export imports back into it. */
static void check_roundtrip(void) {
  size_t len = 0;
  if (dsk_autotune_export(g_ctx, NULL, &len) != DSK_STATUS_OK) __builtin_trap();
  char *buf = (char *)malloc(len);
  if (!buf) __builtin_trap();
  if (dsk_autotune_export(g_ctx, buf, &len) != DSK_STATUS_OK) __builtin_trap();
  if (dsk_autotune_import(g_ctx, buf, len - 1) != DSK_STATUS_OK) __builtin_trap();
  free(buf);
}

/* Input with this context's meta and this build's kernel ids. */
static char *fix_up(const uint8_t *data, size_t size) {
  cJSON *root = cJSON_ParseWithLength((const char *)data, size);
  if (!root) return NULL;
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return NULL;
  }
  cJSON *m = cJSON_Duplicate(g_meta, 1);
  if (m) {
    if (cJSON_GetObjectItemCaseSensitive(root, "meta"))
      cJSON_ReplaceItemInObjectCaseSensitive(root, "meta", m);
    else
      cJSON_AddItemToObject(root, "meta", m);
  }
  cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
  if (cJSON_IsObject(entries)) {
    for (cJSON *it = entries->child; it; it = it->next) {
      char *k = it->string;
      if (!k) continue;
      char *kb = strstr(k, ";kb=");
      if (!kb || strlen(kb + 4) < 16) continue;
      const char *want = strncmp(k, "op=mhc_prenorm;", 15) == 0 ? dsk_kernel_build_id(DSK_OP_MHC_PRENORM)
                                                                : dsk_kernel_build_id(DSK_OP_SPARSE_MLA_DECODE);
      memcpy(kb + 4, want, 16);
    }
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  fuzz_recycle();
  dsk_autotune_import(g_ctx, (const char *)data, size);
  char *fixed = fix_up(data, size);
  if (fixed) {
    dsk_autotune_import(g_ctx, fixed, strlen(fixed));
    cJSON_free(fixed);
  }
  check_entries();
  check_roundtrip();
  dsk_model_desc m;
  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  if (dsk__model_desc_from_json((const char *)data, size, "fuzz", &m) == DSK_STATUS_OK) {
    if (m.kv_format != DSK_KV_FORMAT_A656 && m.kv_format != DSK_KV_FORMAT_B584) __builtin_trap();
    if (m.num_layers < 1 || m.num_layers > DSK_MODEL_MAX_LAYERS) __builtin_trap();
  }
  /* The key parser on the raw bytes (NUL-terminated copy). */
  if (size < 512) {
    char key[512];
    memcpy(key, data, size);
    key[size] = 0;
    dsk__tune_shape s;
    char kb[17];
    if (dsk__tune_parse_key(key, &s, kb) == 0) {
      char again[DSK__TUNE_KEY_MAX];
      if (dsk__tune_key(&s, 1, again, sizeof again) < 0) __builtin_trap();
    }
  }
  dsk_clear_error();
  return 0;
}

#ifdef DSK_FUZZ_REPLAY_MAIN
/* ------------------------------------------------------- replay driver */
#include "testutil.h"

#ifndef DSK_SOURCE_DIR
#error "DSK_SOURCE_DIR must be defined (CMake does it for tests)"
#endif

typedef struct corpus {
  char **data;
  size_t *len;
  int n, cap;
} corpus;

static void add(corpus *c, const char *p, size_t n) {
  if (c->n == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 256;
    c->data = (char **)realloc(c->data, sizeof(char *) * (size_t)c->cap);
    c->len = (size_t *)realloc(c->len, sizeof(size_t) * (size_t)c->cap);
    if (!c->data || !c->len) exit(2);
  }
  char *d = (char *)malloc(n + 1);
  if (!d) exit(2);
  memcpy(d, p, n);
  d[n] = 0;
  c->data[c->n] = d;
  c->len[c->n] = n;
  c->n++;
}

static char *read_text(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = (char *)malloc((size_t)sz + 1);
  if (!b) {
    fclose(f);
    return NULL;
  }
  *n = fread(b, 1, (size_t)sz, f);
  b[*n] = 0;
  fclose(f);
  return b;
}

/* A valid document of this context with a mix of good, stale and invalid entries. */
static char *valid_doc(void) {
  fuzz_init();
  const char *kb = dsk_kernel_build_id(DSK_OP_SPARSE_MLA_DECODE);
  const char *kh = dsk_kernel_build_id(DSK_OP_MHC_PRENORM);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "dsk_autotune", 1);
  cJSON_AddItemToObject(root, "meta", cJSON_Duplicate(g_meta, 1));
  cJSON *e = cJSON_AddObjectToObject(root, "entries");
  struct {
    const char *fmt;
    int t0, tv;
  } rows[] = {
      {"op=sparse_mla_decode;kb=%s;fmt=B;prec=accurate;H=8;w0=128;pbs0=64;w1=512;pbs1=64;T=4;", 2, 1},
      {"op=sparse_mla_decode;kb=%s;fmt=B;prec=accurate;H=8;w0=128;pbs0=64;w1=256;pbs1=2;T=1;", 6, 1},
      {"op=sparse_mla_decode;kb=%s;fmt=A;prec=fast;H=16;w0=2048;pbs0=64;w1=0;pbs1=0;T=64;", 32, 1},
      {"op=sparse_mla_decode;kb=%s;fmt=B;prec=accurate;H=8;w0=128;pbs0=64;w1=300;pbs1=2;T=2;", 2, 1},  /* not a bucket */
      {"op=sparse_mla_decode;kb=%s;fmt=B;prec=accurate;H=8;w0=128;pbs0=64;w1=0;pbs1=0;T=8;", 5, 1},    /* cpb 5 invalid */
      {"op=sparse_mla_decode;kb=%s;fmt=B;prec=accurate;H=8;w0=128;pbs0=64;w1=0;pbs1=0;T=16;", 2, 9},   /* old version */
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char key[256];
    snprintf(key, sizeof key, rows[i].fmt, kb);
    cJSON *o = cJSON_CreateObject();
    int v[6] = {rows[i].t0, 16, 0, 0, 0, 0};
    cJSON_AddItemToObject(o, "t", cJSON_CreateIntArray(v, 6));
    cJSON_AddNumberToObject(o, "tv", rows[i].tv);
    cJSON_AddNumberToObject(o, "us", 10.5);
    cJSON_AddNumberToObject(o, "us2", 11.0);
    cJSON_AddNumberToObject(o, "uh", 12.0);
    cJSON_AddItemToObject(e, key, o);
  }
  char key[256];
  snprintf(key, sizeof key, "op=mhc_prenorm;kb=%s;nD=16384;T=1;", kh);
  cJSON *o = cJSON_CreateObject();
  int v[6] = {5, 0, 0, 0, 0, 0};
  cJSON_AddItemToObject(o, "t", cJSON_CreateIntArray(v, 6));
  cJSON_AddNumberToObject(o, "tv", 1);
  cJSON_AddItemToObject(e, key, o);
  cJSON_AddItemToObject(e, "op=sparse_mla_decode;kb=0123456789abcdef;fmt=B;prec=accurate;H=8;w0=128;pbs0=64;w1=0;"
                           "pbs1=0;T=1;",
                        cJSON_Duplicate(o, 1)); /* stale */
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

static void mutations(corpus *c, const char *base, size_t n, tu_rng *r, int flips) {
  add(c, base, n);
  for (size_t cut = 0; cut < n; cut += 1 + n / 64) add(c, base, cut); /* truncations */
  char *m = (char *)malloc(n + 1);
  for (int i = 0; i < flips && n; i++) {
    memcpy(m, base, n);
    int k = (int)tu_int(r, 1, 4);
    for (int j = 0; j < k; j++) m[tu_int(r, 0, (int64_t)n - 1)] = (char)tu_int(r, 0, 255);
    add(c, m, n);
  }
  free(m);
}

static void write_corpus(const corpus *c, const char *dir) {
  char p[1024];
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/seed", dir);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/work", dir);
  mkdir(p, 0755);
  for (int i = 0; i < c->n; i++) {
    if (c->len[i] > 65536) continue;
    snprintf(p, sizeof p, "%s/seed/%05d", dir, i);
    FILE *f = fopen(p, "wb");
    if (!f) continue;
    fwrite(c->data[i], 1, c->len[i], f);
    fclose(f);
  }
}

int main(int argc, char **argv) {
  tu_counts counts = {0, 0};
  tu_rng r = tu_rng_make(20261129);
  corpus c = {0};
  fuzz_init();
  char *doc = valid_doc();
  TU_CHECK(&counts, doc != NULL, "valid document");
  if (doc) {
    /* The valid document imports with the bad entries skipped. */
    dsk_tune_stats s0, s1;
    memset(&s0, 0, sizeof s0);
    s0.struct_size = sizeof s0;
    s1 = s0;
    TU_CHECK_OK(&counts, dsk_autotune_stats(g_ctx, &s0));
    TU_CHECK_OK(&counts, dsk_autotune_import(g_ctx, doc, strlen(doc)));
    TU_CHECK_OK(&counts, dsk_autotune_stats(g_ctx, &s1));
    TU_CHECK(&counts, s1.loaded - s0.loaded == 4, "loaded %lld, want 4", (long long)(s1.loaded - s0.loaded));
    TU_CHECK(&counts, s1.stale - s0.stale == 2, "stale %lld, want 2", (long long)(s1.stale - s0.stale));
    TU_CHECK(&counts, s1.invalid - s0.invalid == 2, "invalid %lld, want 2", (long long)(s1.invalid - s0.invalid));
    mutations(&c, doc, strlen(doc), &r, 300);
  }
  /* Garbage, empty, odd JSON. */
  add(&c, "", 0);
  add(&c, "{}", 2);
  add(&c, "[]", 2);
  add(&c, "null", 4);
  add(&c, "{\"dsk_autotune\":1}", 18);
  add(&c, "{\"dsk_autotune\":1,\"meta\":{},\"entries\":{}}", 41);
  add(&c, "{\"dsk_autotune\":1e999,\"meta\":[],\"entries\":3}", 44);
  {
    char deep[4096];
    memset(deep, '[', sizeof deep);
    add(&c, deep, sizeof deep);
    memset(deep, '{', sizeof deep);
    add(&c, deep, sizeof deep);
  }
  for (int i = 0; i < 200; i++) {
    char g[2048];
    size_t n = (size_t)tu_int(&r, 1, (int64_t)sizeof g);
    for (size_t j = 0; j < n; j++) g[j] = (char)tu_int(&r, 0, 255);
    add(&c, g, n);
  }
  /* The sample config.json files and their mutations. */
  const char *cfgs[] = {"deepseek-v4-flash", "deepseek-v4-pro", "glm-5.1", "deepseek-v3.2", "tiny-dsv4"};
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/%s/config.json", DSK_SOURCE_DIR, cfgs[i]);
    size_t n = 0;
    char *t = read_text(path, &n);
    TU_CHECK(&counts, t != NULL, "cannot read %s", path);
    if (t) mutations(&c, t, n, &r, 60);
    free(t);
  }
  const double t0 = tu_now_us();
  for (int i = 0; i < c.n; i++) LLVMFuzzerTestOneInput((const uint8_t *)c.data[i], c.len[i]);
  /* One large document (many entries): bounded work, no crash. */
  if (doc) {
    size_t dl = strlen(doc);
    size_t big = 8u << 20;
    char *b = (char *)malloc(big + 1);
    if (b) {
      size_t o = 0;
      while (o + dl < big) {
        memcpy(b + o, doc, dl);
        o += dl;
      }
      LLVMFuzzerTestOneInput((const uint8_t *)b, o);
      free(b);
    }
  }
  counts.passed += c.n; /* every input ran without a trap */
  printf("fuzz_cache_load_replay: %d inputs in %.1f s\n", c.n, (tu_now_us() - t0) * 1e-6);
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--write-corpus") == 0) write_corpus(&c, argv[i + 1]);
  for (int i = 0; i < c.n; i++) free(c.data[i]);
  free(c.data);
  free(c.len);
  cJSON_free(doc);
  dsk_ctx_destroy(g_ctx);
  cJSON_Delete(g_meta);
  return tu_finish("fuzz_cache_load_replay", &counts);
}
#endif
