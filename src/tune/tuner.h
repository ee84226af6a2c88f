/* tuner.h - the tuner inside the library (spec/autotune.md; docs/autotune.md):
 * op keys and token buckets, the per-context table of tuned entries with its
 * counters, the cache file, timing of one key, and the hooks the ops call.
 * Not public API (the public part is in include/dsk.h). */
#ifndef DSK_TUNE_TUNER_H
#define DSK_TUNE_TUNER_H

#include "../backend/backend.h"
#include "dsk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSK__TUNE_FORMAT 1   /* "dsk_autotune": 1 in the cache file */
#define DSK__TUNE_KEY_MAX 256
#define DSK__TUNE_MAX_TACTICS 260 /* mhc_prenorm: S_max = D / 64 <= 256 for D <= 16384 */

/* ----------------------------------------------------------- op keys */
/* The fields of an op key (A1). For lookups it holds the real shape; the
 * key string applies the buckets (T, and the Format B segment-1 width). */
typedef struct dsk__tune_shape {
  int op;        /* DSK_OP_SPARSE_MLA_DECODE, DSK_OP_MHC_PRENORM, DSK_OP_MOE_GEMM or DSK_OP_MOE_DENSE_GEMM */
  int64_t T;     /* tokens (a bucket value in keys); moe_gemm with topk 0: rows (T*topk) */
  /* sparse_mla_decode */
  int format;    /* dsk_kv_format */
  int precision; /* dsk_precision */
  int64_t H;
  int nseg;
  int64_t w[2], pbs[2];
  /* mhc_prenorm */
  int64_t nD;
  /* moe_gemm (N, K, wfmt, E, A, topk) and dense_fp8_gemm (N, K) */
  int64_t N, K;
  int wfmt;      /* dsk_moe_wfmt of the expert weights */
  int64_t E;     /* E_local */
  int64_t A;     /* A_used */
  int64_t topk;  /* 0 only in lookups of a dsk_moe_gemm call (its descriptor has expected_m = T*topk, not topk) */
} dsk__tune_shape;

/* 1 if op is tunable. */
int dsk__tune_op_tunable(int op);
/* The tactic version of a tunable op (entries of another version are stale). */
int32_t dsk__tune_tactic_version(int op);
/* The key string "op=<name>;kb=<id>;<fields>;T=<T>;" of a shape whose widths
 * and T are used as given (callers bucket first). with_T = 0 gives the base
 * key whose entries form one token-bucket group: it stops before "T=", and
 * for moe_gemm before "topk=" (its group is ordered by rows = T*topk, so a
 * dsk_moe_gemm call that knows only expected_m finds it). Returns the
 * length, or -1 if it does not fit. */
int dsk__tune_key(const dsk__tune_shape *s, int with_T, char *buf, size_t n);
/* The order value of a shape inside its base-key group: T, or for moe_gemm
 * the rows T*topk (T itself when topk is 0). */
int64_t dsk__tune_rows(const dsk__tune_shape *s);
/* Where the base key ends in a key string of op: ";T=" or ";topk=" (the ';'
 * stays in the base). */
const char *dsk__tune_base_end(int op);
/* Parses a key string. Returns 0 and fills s and kb (16 hex digits + NUL),
 * or -1 (unknown op, malformed, fields out of range). */
int dsk__tune_parse_key(const char *key, dsk__tune_shape *s, char kb[17]);
/* The shape as it is keyed: Format B segment-1 width bucketed (A4). */
void dsk__tune_bucket_shape(dsk__tune_shape *s);
/* A descriptor carrying only the shape fields (for the tactic functions). */
void dsk__tune_shape_mla_desc(const dsk__tune_shape *s, dsk_sparse_mla_desc *d);

/* Tactics of a shape in the canonical order of A9: the heuristic's tactic
 * first, then the op's fixed enumeration order (duplicates dropped).
 * Returns the count (<= max). */
int dsk__tune_tactics(const dsk_ctx *ctx, const dsk__tune_shape *s, dsk_tactic *out, int max);
void dsk__tune_heuristic(const dsk_ctx *ctx, const dsk__tune_shape *s, dsk_tactic *out);
/* A5: re-validates (and clamps) a stored tactic for a real shape. 1 = usable. */
int dsk__tune_tactic_fix(const dsk__tune_shape *s, dsk_tactic *t);
/* Estimated cost of one launch in microseconds (FLOP/byte model, A7). */
double dsk__tune_estimate_us(const dsk_ctx *ctx, const dsk__tune_shape *s);

/* ----------------------------------------------------------- buckets */
/* A2 default decode buckets (token counts). */
extern const int64_t dsk__tune_default_decode[11];
/* The token buckets of an envelope, ascending, unique (A2, A3). Returns the
 * count, or -1 if more than max. */
int dsk__tune_token_buckets(const int64_t *capture, int ncapture, int capture_are_batches, int draft_tokens,
                            int64_t max_tokens, int64_t *out, int max);
/* The default bucket of a run-time T (decode list then 128..16384). */
int64_t dsk__tune_default_bucket(int64_t T);
/* A4 width bucket: next multiple of 128 (<= 1024), of 512 (<= 4096), then of 1024. */
int64_t dsk__tune_width_bucket(int64_t w);
/* Every width bucket up to the bucket of max_width, ascending. */
int dsk__tune_width_buckets(int64_t max_width, int64_t *out, int max);

/* ------------------------------------------------------------ lookups */
typedef enum dsk__tune_mode {
  DSK__TUNE_RUN = 0,    /* a run call: counts hits/misses, warns, REQUIRE_HIT applies */
  DSK__TUNE_PLAN = 1,   /* a plan call: no counting; REQUIRE_HIT applies */
  DSK__TUNE_FOLLOW = 2, /* re-derivation (mhc_pre), dsk_op_supported or warmup: no counting, never fails */
  DSK__TUNE_CAPTURE = 3 /* warmup while the stream captures a graph (A10): a missing entry counts a miss
                           (listed, warned) and never fails; an entry is used without counting */
} dsk__tune_mode;

/* The tactic of a run whose tactic is not forced: the tuned entry of the
 * bucketed key, re-validated for the real shape `s` (A5), else `heuristic`.
 * *source gets TUNED or HEURISTIC. Fails only with DSK_STATUS_TUNE_MISS
 * (DSK_AUTOTUNE_REQUIRE_HIT=1, modes RUN and PLAN). */
dsk_status dsk__tune_resolve(const dsk_ctx *ctx, const dsk__tune_shape *s, const dsk_tactic *heuristic, int mode,
                             dsk_tactic *out, int *source);

/* A10: 1 if the context's stream is capturing a CUDA graph (the backend's
 * stream_capturing slot; NULL = never). While it is, nothing is timed or
 * launched by warmup: a key resolves to its entry or the heuristic (mode
 * DSK__TUNE_CAPTURE). */
int dsk__tune_stream_capturing(const dsk_ctx *ctx);

/* ------------------------------------------------------- tuner state */
typedef struct dsk__tune_entry {
  char *key;
  dsk_tactic t;
  double us, us2, uh; /* chosen, runner-up, heuristic medians (-1 unknown) */
  int dirty;          /* tuned or imported, not yet written */
} dsk__tune_entry;

typedef struct dsk__tuner dsk__tuner;

/* The context's tuner, created (and the cache loaded) on first use. NULL
 * only when host memory is exhausted. */
dsk__tuner *dsk__tuner_get(const dsk_ctx *ctx);
void dsk__tuner_destroy(dsk__tuner *t);

/* Entry table. put: copies the key; replaces an entry of the same key. */
const dsk__tune_entry *dsk__tuner_find(const dsk__tuner *t, const char *key);
dsk_status dsk__tuner_put(dsk__tuner *t, const dsk__tune_entry *e);
int64_t dsk__tuner_count(const dsk__tuner *t);
const dsk__tune_entry *dsk__tuner_at(const dsk__tuner *t, int64_t i);
void dsk__tuner_mark_clean(dsk__tuner *t);

/* Settings (from the context's environment) and identity. */
typedef struct dsk__tune_settings {
  int mode;         /* 0, 1, 2 = force */
  int cache_mode;   /* dsk_autotune_cache_mode requested */
  int l2;           /* 0 auto, 1 cold, 2 warm */
  int64_t max_mb;
  int require_hit;
} dsk__tune_settings;
const dsk__tune_settings *dsk__tuner_settings(const dsk__tuner *t);

/* Counters the cache code adds to. */
void dsk__tuner_count_load(dsk__tuner *t, int64_t loaded, int64_t stale, int64_t invalid);
void dsk__tuner_count_tuned(dsk__tuner *t);

/* --------------------------------------------------------------- cache */
/* The fingerprint fields of A14 (collected once per context). */
typedef struct dsk__tune_fp {
  char version[16];
  char device[320];
  char cc[16];
  int64_t sms;
  char driver[96];
  char runtime[32];
  char features[160];
} dsk__tune_fp;
/* Collects the fields of a context (NVML, /proc/cpuinfo: a few ms). */
void dsk__tune_fp_collect(const dsk_ctx *ctx, dsk__tune_fp *f);
/* The context's fields (collected at tuner creation). */
const dsk__tune_fp *dsk__tuner_fp(const dsk__tuner *t);
/* Fingerprint string of the fields (A14) and its 16-hex-digit hash. */
void dsk__tune_fingerprint(const dsk__tune_fp *f, char *str, size_t n, char hex[17]);
uint64_t dsk__tune_fnv1a64(const void *data, size_t n);
/* Resolves the cache location and loads the file (called once by
 * dsk__tuner_get). Never fails: problems become one warning each. */
void dsk__tune_cache_open(const dsk_ctx *ctx, dsk__tuner *t);
/* Path of the cache file, or NULL when in memory only. */
const char *dsk__tuner_path(const dsk__tuner *t);
const char *dsk__tuner_dir(const dsk__tuner *t);
const char *dsk__tuner_fp_hex(const dsk__tuner *t);
int dsk__tuner_cache_mode(const dsk__tuner *t);
/* Called by the cache code. */
void dsk__tuner_set_location(dsk__tuner *t, const char *dir, const char *path, int effective_mode);
void dsk__tuner_set_file_bad(dsk__tuner *t, int bad);
int dsk__tuner_file_bad(const dsk__tuner *t);
/* The locked merge-on-save (A18); force: this process's new entries win
 * over the disk's (DSK_AUTOTUNE=force, DSK_WARMUP_FORCE). */
dsk_status dsk__tune_save(const dsk_ctx *ctx, dsk__tuner *t, int force);
/* Document validation shared by the loader, dsk_autotune_import and the
 * fuzz target: parses buf, checks the format and every fingerprint field
 * against ctx and adds the valid entries (dirty = mark_dirty, replacing
 * existing keys when replace). DSK_STATUS_PARSE with the field named in
 * dsk_last_error() when the document is not usable. */
dsk_status dsk__tune_doc_load(const dsk_ctx *ctx, dsk__tuner *t, const char *buf, size_t len, int mark_dirty,
                              int replace, int64_t *loaded, int64_t *stale, int64_t *invalid);

/* -------------------------------------------------------------- timing */
/* Grow-only scratch buffers of one warmup run (synthetic inputs, A6). */
typedef struct dsk__tune_scratch dsk__tune_scratch;
dsk__tune_scratch *dsk__tune_scratch_new(dsk_ctx *ctx);
void dsk__tune_scratch_free(dsk__tune_scratch *s);

typedef struct dsk__tune_result {
  dsk_tactic best;
  int num_tactics;
  double us_best, us_second, us_heuristic;
  char skip_reason[160]; /* set (and nothing timed) when the key was skipped */
} dsk__tune_result;

/* A9: index of the first median (canonical order) within 1.02x of the
 * smallest; negative medians are tactics that were not timed. -1 if none. */
int dsk__tune_pick(const double *med, int n);
/* Times every tactic of shape s (A6-A9) and picks one. */
dsk_status dsk__tune_time_key(dsk_ctx *ctx, dsk__tune_scratch *sc, const dsk__tune_shape *s, dsk__tune_result *r);
/* Runs the op once on synthetic inputs with tactic t (warmup pre-run). */
dsk_status dsk__tune_prerun_key(dsk_ctx *ctx, dsk__tune_scratch *sc, const dsk__tune_shape *s, const dsk_tactic *t,
                                char *skip_reason, size_t skip_len);

/* dsk_warmup_run with the A10 capture check answered by `assume_capturing`
 * (1: as if the backend reported a capture, for the CPU tests) or by the
 * backend (0). */
dsk_status dsk__warmup_run(dsk_ctx *ctx, const dsk_warmup_list *l, unsigned flags, dsk_warmup_progress_fn progress,
                           void *user, int assume_capturing);

/* ---------------------------------------------------- MoE tactic sets */
/* src/ops/moe_gemm.c: the tactic sets of moe_gemm (BLOCK_M in {64, 128} dividing
 * A, BLOCK_N in {64, 128, 256}, split-K in {1, 2, 4} with (K / split) % 128
 * == 0; autotune.md §1) and dense_fp8_gemm (BLOCK_M in {16, 32, 64, 128}),
 * in the op's fixed order (BLOCK_M, then BLOCK_N, then split ascending);
 * their heuristics for a shape (rows = dsk__tune_rows); and the A5 check of
 * a stored tactic against the real shape (1 = usable). */
int dsk__moe_tune_tactics(const dsk__tune_shape *s, dsk_tactic *out, int max);
int dsk__moe_tune_tactic_fix(const dsk__tune_shape *s, dsk_tactic *t);
void dsk__moe_tune_heuristic(const dsk_ctx *ctx, const dsk__tune_shape *s, dsk_tactic *out);

/* ------------------------------------------------------ model parsing */
/* config.json text -> model (the buffer form of dsk_model_desc_from_config). */
dsk_status dsk__model_desc_from_json(const char *buf, size_t len, const char *what, dsk_model_desc *m);

#ifdef __cplusplus
}
#endif
#endif
