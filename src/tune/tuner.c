/* tuner.c - the per-context tuner state (no global state: it hangs off the
 * dsk_ctx): the table of tuned entries, token-bucket lookups, the hit /
 * miss / invalid / stale counters, the miss list and its once-per-key
 * warnings (autotune.md §4), and the stats API. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner.h"

/* ------------------------------------------------------ string map */
/* Open addressing, string keys owned by the caller's records, int64 values. */
typedef struct strmap {
  int64_t *slot; /* value + 1, 0 = empty */
  uint64_t *hash;
  int64_t cap;   /* power of two */
  int64_t n;
} strmap;

uint64_t dsk__tune_fnv1a64(const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static uint64_t str_hash(const char *s) { return dsk__tune_fnv1a64(s, strlen(s)); }

typedef const char *(*strmap_key_fn)(const void *owner, int64_t value);

static int strmap_grow(strmap *m, const void *owner, strmap_key_fn key_of) {
  int64_t cap = m->cap ? m->cap * 2 : 64;
  int64_t *slot = (int64_t *)calloc((size_t)cap, sizeof *slot);
  uint64_t *hash = (uint64_t *)calloc((size_t)cap, sizeof *hash);
  if (!slot || !hash) {
    free(slot);
    free(hash);
    return -1;
  }
  for (int64_t i = 0; i < m->cap; i++) {
    if (!m->slot[i]) continue;
    uint64_t h = m->hash[i];
    int64_t j = (int64_t)(h & (uint64_t)(cap - 1));
    while (slot[j]) j = (j + 1) & (cap - 1);
    slot[j] = m->slot[i];
    hash[j] = h;
  }
  (void)owner;
  (void)key_of;
  free(m->slot);
  free(m->hash);
  m->slot = slot;
  m->hash = hash;
  m->cap = cap;
  return 0;
}

/* Returns the value of key, or -1. */
static int64_t strmap_get(const strmap *m, const void *owner, strmap_key_fn key_of, const char *key) {
  if (!m->cap) return -1;
  uint64_t h = str_hash(key);
  int64_t j = (int64_t)(h & (uint64_t)(m->cap - 1));
  while (m->slot[j]) {
    if (m->hash[j] == h && strcmp(key_of(owner, m->slot[j] - 1), key) == 0) return m->slot[j] - 1;
    j = (j + 1) & (m->cap - 1);
  }
  return -1;
}

/* Inserts a key that is not present. */
static int strmap_add(strmap *m, const void *owner, strmap_key_fn key_of, const char *key, int64_t value) {
  if ((m->n + 1) * 2 > m->cap && strmap_grow(m, owner, key_of) != 0) return -1;
  uint64_t h = str_hash(key);
  int64_t j = (int64_t)(h & (uint64_t)(m->cap - 1));
  while (m->slot[j]) j = (j + 1) & (m->cap - 1);
  m->slot[j] = value + 1;
  m->hash[j] = h;
  m->n++;
  return 0;
}

static void strmap_free(strmap *m) {
  free(m->slot);
  free(m->hash);
  memset(m, 0, sizeof *m);
}

/* -------------------------------------------------------- the state */
/* Entries of one base key (all fields but T; moe_gemm: but topk and T),
 * ordered by rows ascending (dsk__tune_rows: T, or T*topk for moe_gemm). */
typedef struct tune_group {
  char *base;
  int n, cap;
  int64_t *T; /* rows */
  int64_t *entry;
  int above_logged; /* T above the largest bucket: logged once at debug (A2) */
} tune_group;

typedef struct tune_miss {
  char *key;
  int op;
  int64_t T, count;
  dsk_tactic heuristic;
} tune_miss;

struct dsk__tuner {
  dsk__tune_settings set;
  dsk__tune_fp fp;
  char fp_hex[17];
  char dir[1024], path[1024];
  int cache_mode; /* effective */
  int file_bad;
  dsk__tune_entry *e;
  int64_t n, cap;
  strmap by_key;
  tune_group *g;
  int64_t ng, gcap;
  strmap by_base;
  tune_miss *m;
  int64_t nm, mcap;
  strmap by_miss;
  int64_t entries_of_op[4]; /* op_slot order: sparse_mla_decode, mhc_prenorm, moe_gemm, dense_fp8_gemm */
  int64_t hits, misses, invalid, stale, loaded, tuned;
};

static const char *entry_key(const void *t, int64_t i) { return ((const dsk__tuner *)t)->e[i].key; }
static const char *group_key(const void *t, int64_t i) { return ((const dsk__tuner *)t)->g[i].base; }
static const char *miss_key(const void *t, int64_t i) { return ((const dsk__tuner *)t)->m[i].key; }

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = (char *)malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

static int op_slot(int op) {
  switch (op) {
    case DSK_OP_SPARSE_MLA_DECODE: return 0;
    case DSK_OP_MHC_PRENORM: return 1;
    case DSK_OP_MOE_GEMM: return 2;
    case DSK_OP_MOE_DENSE_GEMM: return 3;
    default: return -1;
  }
}

dsk__tuner *dsk__tuner_get(const dsk_ctx *cctx) {
  if (!cctx) return NULL;
  dsk_ctx *ctx = (dsk_ctx *)cctx; /* the tuner is created lazily; the context itself is never const */
  if (ctx->tuner) return ctx->tuner;
  dsk__tuner *t = (dsk__tuner *)calloc(1, sizeof *t);
  if (!t) return NULL;
  t->set.mode = ctx->env.autotune;
  t->set.cache_mode = ctx->env.autotune_cache;
  t->set.l2 = ctx->env.autotune_l2;
  t->set.max_mb = ctx->env.autotune_max_mb > 0 ? ctx->env.autotune_max_mb : 2048;
  t->set.require_hit = ctx->env.autotune_require_hit;
  t->cache_mode = DSK_AUTOTUNE_CACHE_OFF;
  ctx->tuner = t;
  if (ctx->env.autotune_bad[0]) {
    char key[200];
    snprintf(key, sizeof key, "autotune-env:%s", ctx->env.autotune_bad);
    dsk__warn_once(ctx, key,
                   "autotune: ignoring %s: value not understood (docs/environment.md lists the values); defaults apply",
                   ctx->env.autotune_bad);
  }
  char fp[2048];
  dsk__tune_fp_collect(ctx, &t->fp);
  dsk__tune_fingerprint(&t->fp, fp, sizeof fp, t->fp_hex);
  dsk__tune_cache_open(ctx, t);
  return t;
}

void dsk__tuner_destroy(dsk__tuner *t) {
  if (!t) return;
  for (int64_t i = 0; i < t->n; i++) free(t->e[i].key);
  free(t->e);
  for (int64_t i = 0; i < t->ng; i++) {
    free(t->g[i].base);
    free(t->g[i].T);
    free(t->g[i].entry);
  }
  free(t->g);
  for (int64_t i = 0; i < t->nm; i++) free(t->m[i].key);
  free(t->m);
  strmap_free(&t->by_key);
  strmap_free(&t->by_base);
  strmap_free(&t->by_miss);
  free(t);
}

const dsk__tune_settings *dsk__tuner_settings(const dsk__tuner *t) { return &t->set; }
const char *dsk__tuner_path(const dsk__tuner *t) { return t->path[0] ? t->path : NULL; }
const char *dsk__tuner_dir(const dsk__tuner *t) { return t->dir[0] ? t->dir : NULL; }
const char *dsk__tuner_fp_hex(const dsk__tuner *t) { return t->fp_hex; }
const dsk__tune_fp *dsk__tuner_fp(const dsk__tuner *t) { return &t->fp; }
int dsk__tuner_cache_mode(const dsk__tuner *t) { return t->cache_mode; }
void dsk__tuner_set_file_bad(dsk__tuner *t, int bad) { t->file_bad = bad; }
int dsk__tuner_file_bad(const dsk__tuner *t) { return t->file_bad; }

void dsk__tuner_set_location(dsk__tuner *t, const char *dir, const char *path, int mode) {
  snprintf(t->dir, sizeof t->dir, "%s", dir ? dir : "");
  snprintf(t->path, sizeof t->path, "%s", path ? path : "");
  t->cache_mode = mode;
}

void dsk__tuner_count_load(dsk__tuner *t, int64_t loaded, int64_t stale, int64_t invalid) {
  t->loaded += loaded;
  t->stale += stale;
  t->invalid += invalid;
}

void dsk__tuner_count_tuned(dsk__tuner *t) { t->tuned++; }

/* ----------------------------------------------------------- entries */
const dsk__tune_entry *dsk__tuner_find(const dsk__tuner *t, const char *key) {
  int64_t i = strmap_get(&t->by_key, t, entry_key, key);
  return i >= 0 ? &t->e[i] : NULL;
}

int64_t dsk__tuner_count(const dsk__tuner *t) { return t->n; }
const dsk__tune_entry *dsk__tuner_at(const dsk__tuner *t, int64_t i) { return i >= 0 && i < t->n ? &t->e[i] : NULL; }

void dsk__tuner_mark_clean(dsk__tuner *t) {
  for (int64_t i = 0; i < t->n; i++) t->e[i].dirty = 0;
}

/* Adds entry index ei (key with T, of op) to its base group at order value
 * T (its rows). */
static int group_add(dsk__tuner *t, const char *key, int op, int64_t T, int64_t ei) {
  const char *tpos = strstr(key, dsk__tune_base_end(op));
  if (!tpos) return -1;
  size_t blen = (size_t)(tpos - key) + 1; /* keep the ';' */
  char base[DSK__TUNE_KEY_MAX];
  if (blen >= sizeof base) return -1;
  memcpy(base, key, blen);
  base[blen] = 0;
  int64_t gi = strmap_get(&t->by_base, t, group_key, base);
  if (gi < 0) {
    if (t->ng == t->gcap) {
      int64_t cap = t->gcap ? t->gcap * 2 : 64;
      tune_group *g = (tune_group *)realloc(t->g, sizeof *g * (size_t)cap);
      if (!g) return -1;
      t->g = g;
      t->gcap = cap;
    }
    tune_group *g = &t->g[t->ng];
    memset(g, 0, sizeof *g);
    g->base = dup_str(base);
    if (!g->base) return -1;
    if (strmap_add(&t->by_base, t, group_key, base, t->ng) != 0) {
      free(g->base);
      return -1;
    }
    gi = t->ng++;
  }
  tune_group *g = &t->g[gi];
  if (g->n == g->cap) {
    int cap = g->cap ? g->cap * 2 : 8;
    int64_t *nT = (int64_t *)realloc(g->T, sizeof *nT * (size_t)cap);
    if (!nT) return -1;
    g->T = nT;
    int64_t *nE = (int64_t *)realloc(g->entry, sizeof *nE * (size_t)cap);
    if (!nE) return -1;
    g->entry = nE;
    g->cap = cap;
  }
  int pos = g->n;
  while (pos > 0 && g->T[pos - 1] > T) {
    g->T[pos] = g->T[pos - 1];
    g->entry[pos] = g->entry[pos - 1];
    pos--;
  }
  g->T[pos] = T;
  g->entry[pos] = ei;
  g->n++;
  return 0;
}

dsk_status dsk__tuner_put(dsk__tuner *t, const dsk__tune_entry *e) {
  int64_t i = strmap_get(&t->by_key, t, entry_key, e->key);
  if (i >= 0) {
    char *k = t->e[i].key;
    t->e[i] = *e;
    t->e[i].key = k;
    return DSK_STATUS_OK;
  }
  dsk__tune_shape s;
  char kb[17];
  if (dsk__tune_parse_key(e->key, &s, kb) != 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "autotune: malformed key '%.200s'", e->key);
  if (t->n == t->cap) {
    int64_t cap = t->cap ? t->cap * 2 : 64;
    dsk__tune_entry *ne = (dsk__tune_entry *)realloc(t->e, sizeof *ne * (size_t)cap);
    if (!ne) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
    t->e = ne;
    t->cap = cap;
  }
  dsk__tune_entry *d = &t->e[t->n];
  *d = *e;
  d->key = dup_str(e->key);
  if (!d->key) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
  if (strmap_add(&t->by_key, t, entry_key, d->key, t->n) != 0 ||
      group_add(t, d->key, s.op, dsk__tune_rows(&s), t->n) != 0) {
    free(d->key);
    return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
  }
  t->n++;
  int os = op_slot(s.op);
  if (os >= 0) t->entries_of_op[os]++;
  return DSK_STATUS_OK;
}

/* ----------------------------------------------------------- lookups */
static void tactic_text(const dsk_tactic *t, char *buf, size_t n) {
  if (t->op == DSK_OP_SPARSE_MLA_DECODE)
    snprintf(buf, n, "cpb=%d heads=%d", (int)t->v[0], (int)t->v[1]);
  else if (t->op == DSK_OP_MHC_PRENORM)
    snprintf(buf, n, "S=%d", (int)t->v[0]);
  else if (t->op == DSK_OP_MOE_GEMM || t->op == DSK_OP_MOE_DENSE_GEMM)
    snprintf(buf, n, "BLOCK_M=%d BLOCK_N=%d split=%d", (int)t->v[0], (int)t->v[1], (int)t->v[2]);
  else
    snprintf(buf, n, "?");
}

/* "op=x;kb=y;a=1;" -> "op=x a=1" (kb left out) for messages. */
static void key_text(const char *key, char *buf, size_t n) {
  size_t o = 0;
  const char *p = key;
  while (*p && o + 2 < n) {
    const char *semi = strchr(p, ';');
    size_t len = semi ? (size_t)(semi - p) : strlen(p);
    if (strncmp(p, "kb=", 3) != 0) {
      if (o) buf[o++] = ' ';
      size_t c = len < n - o - 1 ? len : n - o - 1;
      memcpy(buf + o, p, c);
      o += c;
    }
    if (!semi) break;
    p = semi + 1;
  }
  buf[o] = 0;
}

static void record_miss(const dsk_ctx *ctx, dsk__tuner *t, const dsk__tune_shape *keyed, const dsk_tactic *h) {
  dsk__tune_shape ms = *keyed;
  if (ms.op == DSK_OP_MOE_GEMM && ms.topk < 1) ms.topk = 1; /* a dsk_moe_gemm call: T counts rows */
  ms.T = dsk__tune_default_bucket(ms.T);
  char key[DSK__TUNE_KEY_MAX];
  if (dsk__tune_key(&ms, 1, key, sizeof key) < 0) return;
  int64_t i = strmap_get(&t->by_miss, t, miss_key, key);
  if (i < 0) {
    if (t->nm == t->mcap) {
      int64_t cap = t->mcap ? t->mcap * 2 : 32;
      tune_miss *nm = (tune_miss *)realloc(t->m, sizeof *nm * (size_t)cap);
      if (!nm) return;
      t->m = nm;
      t->mcap = cap;
    }
    tune_miss *m = &t->m[t->nm];
    m->key = dup_str(key);
    if (!m->key) return;
    m->op = keyed->op;
    m->T = ms.T;
    m->count = 0;
    m->heuristic = *h;
    if (strmap_add(&t->by_miss, t, miss_key, m->key, t->nm) != 0) {
      free(m->key);
      return;
    }
    i = t->nm++;
  }
  t->m[i].count++;
  /* One warning per missing key per process (A12) while the context has
   * tuned entries for the op (a coverage gap); a context with none for the
   * op gets one warning per op instead (docs/autotune.md). */
  char tt[64], kt[DSK__TUNE_KEY_MAX];
  tactic_text(h, tt, sizeof tt);
  key_text(key, kt, sizeof kt);
  int os = op_slot(keyed->op);
  if (os >= 0 && t->entries_of_op[os] > 0) {
    char wkey[DSK__TUNE_KEY_MAX + 16];
    snprintf(wkey, sizeof wkey, "autotune-miss:%s", key);
    dsk__warn_once(ctx, wkey,
                   "autotune miss %s: heuristic tactic [%s]; include this shape in warmup or run 'dsk tune'", kt,
                   tt);
  } else {
    char wkey[64];
    snprintf(wkey, sizeof wkey, "autotune-untuned:%s", dsk_op_name((dsk_op)keyed->op));
    dsk__warn_once(ctx, wkey,
                   "autotune: no tuned entries for %s on this device; heuristic tactics are used (first: %s [%s]); "
                   "run dsk_warmup_run or 'dsk tune' (dsk_autotune_misses lists the keys)",
                   dsk_op_name((dsk_op)keyed->op), kt, tt);
  }
}

dsk_status dsk__tune_resolve(const dsk_ctx *ctx, const dsk__tune_shape *s, const dsk_tactic *heuristic, int mode,
                             dsk_tactic *out, int *source) {
  *out = *heuristic;
  if (source) *source = DSK_TACTIC_HEURISTIC;
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return DSK_STATUS_OK; /* no memory for the table: the heuristic is always correct */
  dsk__tune_shape keyed = *s;
  dsk__tune_bucket_shape(&keyed);
  char base[DSK__TUNE_KEY_MAX];
  if (dsk__tune_key(&keyed, 0, base, sizeof base) < 0) return DSK_STATUS_OK;
  int64_t gi = strmap_get(&t->by_base, t, group_key, base);
  const int count = mode == DSK__TUNE_RUN;
  const int count_miss = count || mode == DSK__TUNE_CAPTURE;
  const int may_fail = mode == DSK__TUNE_RUN || mode == DSK__TUNE_PLAN;
  const int64_t rows = dsk__tune_rows(s);
  if (gi >= 0 && t->g[gi].n > 0) {
    tune_group *g = &t->g[gi];
    int k = 0;
    while (k < g->n - 1 && g->T[k] < rows) k++; /* smallest bucket >= T, else the largest (A2) */
    if (count && g->T[k] < rows && !g->above_logged) {
      g->above_logged = 1;
      char kt[DSK__TUNE_KEY_MAX];
      key_text(base, kt, sizeof kt);
      dsk__log(ctx, DSK_LOG_DEBUG, "autotune: %s %" PRId64 " above the largest bucket %" PRId64 " of %s: using it",
               s->op == DSK_OP_MOE_GEMM ? "rows (T*topk)" : "T", rows, g->T[k], kt);
    }
    dsk_tactic cand = t->e[g->entry[k]].t;
    if (dsk__tune_tactic_fix(s, &cand)) {
      *out = cand;
      if (source) *source = DSK_TACTIC_TUNED;
      if (count) t->hits++;
      return DSK_STATUS_OK;
    }
    if (count) {
      t->invalid++;
      char kt[DSK__TUNE_KEY_MAX], wkey[DSK__TUNE_KEY_MAX + 24];
      key_text(t->e[g->entry[k]].key, kt, sizeof kt);
      snprintf(wkey, sizeof wkey, "autotune-invalid:%s", t->e[g->entry[k]].key);
      dsk__warn_once(ctx, wkey, "autotune: tuned entry %s does not fit T %" PRId64 " (A5): heuristic", kt, s->T);
    }
    if (t->set.require_hit && may_fail)
      return dsk__fail(DSK_STATUS_TUNE_MISS,
                       "%s: DSK_AUTOTUNE_REQUIRE_HIT=1 and the tuned entry for T %" PRId64
                       " does not fit the shape (%s)",
                       dsk_op_name((dsk_op)s->op), s->T, base);
    return DSK_STATUS_OK;
  }
  if (count_miss) {
    t->misses++;
    record_miss(ctx, t, &keyed, heuristic);
  }
  if (t->set.require_hit && may_fail) {
    char kt[DSK__TUNE_KEY_MAX];
    key_text(base, kt, sizeof kt);
    return dsk__fail(DSK_STATUS_TUNE_MISS, "%s: DSK_AUTOTUNE_REQUIRE_HIT=1 and no tuned entry for %s T=%" PRId64,
                     dsk_op_name((dsk_op)s->op), kt, s->T);
  }
  return DSK_STATUS_OK;
}

/* ------------------------------------------------------ capture (A10) */
int dsk__tune_stream_capturing(const dsk_ctx *ctx) {
  if (!ctx || !ctx->backend || !ctx->backend->stream_capturing) return 0;
  return ctx->backend->stream_capturing((dsk_ctx *)ctx, NULL) != 0;
}

/* -------------------------------------------------------------- API */
dsk_status dsk_autotune_stats(dsk_ctx *ctx, dsk_tune_stats *s) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_stats: ctx is NULL");
  if (!s) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_stats: stats is NULL");
  if (s->struct_size < sizeof *s)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_stats: stats->struct_size %zu < %zu", s->struct_size,
                     sizeof *s);
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_stats: out of host memory");
  size_t keep = s->struct_size;
  memset(s, 0, sizeof *s);
  s->struct_size = keep;
  s->hits = t->hits;
  s->misses = t->misses;
  s->invalid = t->invalid;
  s->stale = t->stale;
  s->entries = t->n;
  s->loaded = t->loaded;
  s->tuned = t->tuned;
  s->miss_keys = t->nm;
  s->cache_mode = t->cache_mode;
  snprintf(s->cache_path, sizeof s->cache_path, "%s", t->path);
  snprintf(s->fingerprint, sizeof s->fingerprint, "%s", t->fp_hex);
  return DSK_STATUS_OK;
}

dsk_status dsk_autotune_reset_stats(dsk_ctx *ctx) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_reset_stats: ctx is NULL");
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_reset_stats: out of host memory");
  t->hits = t->misses = t->invalid = 0;
  for (int64_t i = 0; i < t->nm; i++) free(t->m[i].key);
  t->nm = 0;
  strmap_free(&t->by_miss);
  return DSK_STATUS_OK;
}

dsk_status dsk_autotune_misses(dsk_ctx *ctx, dsk_autotune_miss_fn fn, void *user) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_misses: ctx is NULL");
  if (!fn) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_misses: fn is NULL");
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_misses: out of host memory");
  for (int64_t i = 0; i < t->nm; i++) {
    dsk_autotune_miss m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    m.key = t->m[i].key;
    m.op = (dsk_op)t->m[i].op;
    m.T = t->m[i].T;
    m.count = t->m[i].count;
    m.heuristic = t->m[i].heuristic;
    fn(&m, user);
  }
  return DSK_STATUS_OK;
}
