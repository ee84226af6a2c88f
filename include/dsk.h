/*
 * dsk.h - the whole public API of dsk.
 *
 * dsk gives DeepSeek-V4 (Flash, Pro), DeepSeek-V3.2 and GLM-5.1 inference
 * kernels for NVIDIA SM120/SM121 (validated on sm_90) and a portable CPU
 * reference. This header compiles as C99 and C++ and includes no CUDA
 * header: streams are passed as `void *` (a cudaStream_t for CUDA contexts).
 *
 * Rules that hold for every call (docs/api.md has the guide):
 *  - every call returns a dsk_status; DSK_STATUS_OK is 0, errors are negative,
 *    and dsk_last_error() gives the detail (thread-local);
 *  - every op takes one descriptor whose first field is struct_size, set by
 *    the caller with sizeof; pointers are device pointers for a CUDA context
 *    and host pointers for a CPU context;
 *  - ops that need scratch have a _plan call returning the workspace size;
 *    run calls never allocate;
 *  - bad descriptor fields are errors; bad data inside buffers is handled by
 *    the op's rule and counted in the optional `counters`.
 */
#ifndef DSK_H
#define DSK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DSK_API __attribute__((visibility("default")))
#else
#define DSK_API
#endif

/* ------------------------------------------------------------------ version */
#define DSK_VERSION_MAJOR 0
#define DSK_VERSION_MINOR 1
#define DSK_VERSION_PATCH 0
#define DSK_VERSION_STRING "0.1.0"

/* "0.1.0" */
DSK_API const char *dsk_version(void);
/* One line of build options: compiler, CUDA architectures, OpenMP, sanitizers. */
DSK_API const char *dsk_build_info(void);

/* ------------------------------------------------------------------- status */
#define DSK_STATUS_MAP(X)                                                                  \
  X(OK, 0, "success")                                                                      \
  X(INVALID_ARG, -1, "a descriptor field or argument is invalid")                          \
  X(UNSUPPORTED, -2, "the request is valid but this build or backend cannot serve it")    \
  X(BACKEND_UNAVAILABLE, -3, "the requested or forced backend cannot run here")            \
  X(DEVICE, -4, "a CUDA runtime or driver call failed")                                    \
  X(OUT_OF_MEMORY, -5, "a host or device allocation failed")                               \
  X(IO, -6, "a file could not be read or written")                                         \
  X(PARSE, -7, "a file was read but is not valid")                                         \
  X(TUNE_MISS, -8, "DSK_AUTOTUNE_REQUIRE_HIT=1 and no tuned entry exists")                 \
  X(NATIVE_REQUIRED, -9, "DSK_REQUIRE_SM120_NATIVE=1 and the op has no native SM120 path") \
  X(INVALID_DATA, -10, "a load or preparation function found invalid values in its input")

typedef enum dsk_status {
#define DSK_STATUS_ENUM_(name, value, text) DSK_STATUS_##name = value,
  DSK_STATUS_MAP(DSK_STATUS_ENUM_)
#undef DSK_STATUS_ENUM_
  DSK_STATUS_MIN_ = -10
} dsk_status;

/* "DSK_STATUS_INVALID_ARG"; "DSK_STATUS_UNKNOWN" for values outside the list. */
DSK_API const char *dsk_status_name(dsk_status s);
/* The sentence of the list above. */
DSK_API const char *dsk_status_str(dsk_status s);
/* Detail text of the last failed call on this thread ("" if none). */
DSK_API const char *dsk_last_error(void);
DSK_API void dsk_clear_error(void);

/* ------------------------------------------------------------------ logging */
typedef enum dsk_log_level {
  DSK_LOG_OFF = 0,
  DSK_LOG_ERROR = 1,
  DSK_LOG_WARN = 2, /* default */
  DSK_LOG_INFO = 3,
  DSK_LOG_DEBUG = 4,
  DSK_LOG_TRACE = 5
} dsk_log_level;

typedef void (*dsk_log_fn)(int level, const char *msg, void *user);
/* Process-wide; NULL restores the default (stderr, "dsk: " prefix). Thread-safe. */
DSK_API void dsk_log_set(dsk_log_fn fn, void *user);

/* ------------------------------------------------------------------ context */
typedef struct dsk_ctx dsk_ctx;

typedef struct dsk_ctx_opts {
  size_t struct_size;
  const char *device;  /* "cpu", "cuda:N" or "auto"; NULL = "auto" */
  const char *backend; /* NULL: DSK_BACKEND, else automatic */
  int num_threads;     /* CPU threads; 0: DSK_NUM_THREADS, else all cores */
  int log_level;       /* -1: DSK_LOG_LEVEL, else DSK_LOG_WARN */
} dsk_ctx_opts;

/* Fills opts with the defaults above (struct_size included). */
DSK_API void dsk_ctx_opts_init(dsk_ctx_opts *opts);
/* opts may be NULL (all defaults). On failure *ctx is NULL. */
DSK_API dsk_status dsk_ctx_create(dsk_ctx **ctx, const dsk_ctx_opts *opts);
DSK_API void dsk_ctx_destroy(dsk_ctx *ctx);

typedef struct dsk_ctx_info {
  size_t struct_size;
  char backend[32];     /* chosen backend */
  char reason[256];     /* why it was chosen */
  int is_cuda;
  int device_index;     /* -1 for the CPU */
  char device_name[128];
  int cc_major, cc_minor;
  int sm_count;
  int64_t smem_optin_bytes; /* per block, after the DSK_TEST_AS_SM120 cap */
  int64_t l2_bytes;
  int64_t global_mem_bytes;
  int driver_version, runtime_version;
  int num_threads;
  int test_as_sm120;
} dsk_ctx_info;
DSK_API dsk_status dsk_ctx_get_info(const dsk_ctx *ctx, dsk_ctx_info *info);

/* Memory of the context's device (host memory for a CPU context). Copies are
 * synchronous; dsk_ctx_synchronize waits for the stream (NULL = the
 * context's default stream). */
DSK_API dsk_status dsk_mem_alloc(dsk_ctx *ctx, void **ptr, size_t bytes);
DSK_API dsk_status dsk_mem_free(dsk_ctx *ctx, void *ptr);
DSK_API dsk_status dsk_mem_upload(dsk_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes);
DSK_API dsk_status dsk_mem_download(dsk_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes);
DSK_API dsk_status dsk_mem_set(dsk_ctx *ctx, void *dst_dev, int byte, size_t bytes);
DSK_API dsk_status dsk_ctx_synchronize(dsk_ctx *ctx, void *stream);

/* ----------------------------------------------------------------- backends */
typedef enum dsk_op {
  DSK_OP_KV_WRITE = 1,
  DSK_OP_KV_READ = 2,
  DSK_OP_SLOT_LIST = 3,
  DSK_OP_SPARSE_MLA_DECODE = 4,
  DSK_OP_MHC_PRENORM = 20, /* mHC (DeepSeek-V4) */
  DSK_OP_MHC_PRE = 21,
  DSK_OP_MHC_POST = 22,
  DSK_OP_MHC_HEAD = 23,
  DSK_OP_INDEXER_LOGITS = 30, /* lightning indexer */
  DSK_OP_TOPK = 31,
  DSK_OP_INDEXER_SLOTS = 32   /* dsk_indexer_topk_slots */
} dsk_op;
/* "kv_write", "kv_read", "slot_list", "sparse_mla_decode", "mhc_prenorm",
 * "mhc_pre", "mhc_post", "mhc_head", "indexer_logits", "topk",
 * "indexer_topk_slots"; NULL if unknown. */
DSK_API const char *dsk_op_name(dsk_op op);

typedef struct dsk_backend_info {
  size_t struct_size;
  char name[32];
  char description[128];
  int is_cuda;
} dsk_backend_info;

DSK_API int dsk_backend_count(void);
DSK_API const char *dsk_backend_name(int index); /* NULL past the end */
/* Can backend `name` run on `device` ("cpu", "cuda:N", "auto")? Returns OK
 * whenever the question could be answered; *available and reason tell. */
DSK_API dsk_status dsk_backend_query(const char *name, const char *device, dsk_backend_info *info,
                                     int *available, char *reason, size_t reason_len);
/* Would the context serve this op with this descriptor? desc points to the
 * op's own descriptor. Returns OK whenever the question could be answered. */
DSK_API dsk_status dsk_op_supported(dsk_ctx *ctx, dsk_op op, const void *desc, int *supported,
                                    char *reason, size_t reason_len);

/* ---------------------------------------------------------- number formats */
typedef uint16_t dsk_bf16; /* upper 16 bits of an IEEE fp32 */

DSK_API dsk_bf16 dsk_bf16_from_f32(float x); /* round to nearest even; NaN stays NaN */
DSK_API float dsk_bf16_to_f32(dsk_bf16 x);
/* OCP e4m3fn: RNE, saturating to +-448, NaN -> 0x7F (bit-identical to cvt.rn.satfinite). */
DSK_API uint8_t dsk_e4m3_from_f32(float x);
DSK_API float dsk_e4m3_to_f32(uint8_t x);
/* e2m1 (4-bit code in the low nibble): RNE to {0,.5,1,1.5,2,3,4,6}, saturating. */
DSK_API uint8_t dsk_e2m1_from_f32(float x);
DSK_API float dsk_e2m1_to_f32(uint8_t code);
/* UE8M0: KV decoder (0 -> 0.0, 255 -> NaN) and weight-scale decoder (0 -> 2^-127, 255 -> NaN). */
DSK_API float dsk_ue8m0_kv_to_f32(uint8_t e);
DSK_API float dsk_ue8m0_w_to_f32(uint8_t e);
/* Exponent byte of the smallest power of two >= x (x finite and > 0), clamped to [1, 254]. */
DSK_API uint8_t dsk_ue8m0_ceil_from_f32(float x);

/* ------------------------------------------------------------ KV caches */
typedef enum dsk_kv_format {
  DSK_KV_FORMAT_A656 = 1,   /* DeepSeek-V3.2, GLM-5/5.1: 656 B/token, inline fp32 scales */
  DSK_KV_FORMAT_B584 = 2,   /* DeepSeek-V4: 576 B/token + 8 B/token page footer */
  DSK_KV_FORMAT_IDXK132 = 3 /* lightning-indexer keys: 128 e4m3 + fp32 scale */
} dsk_kv_format;

/* Format A writer scale rule; the indexer writer uses POW2 (default) or RAW. */
typedef enum dsk_scale_rule { DSK_SCALE_POW2 = 0, DSK_SCALE_RAW = 1 } dsk_scale_rule;

/* One paged cache: page p starts at base + p*page_stride; slot = p*pbs + j. */
typedef struct dsk_kv_cache {
  void *base;
  int64_t pbs;         /* entries per page, >= 1 */
  int64_t page_stride; /* bytes, >= dsk_kv_min_page_stride (CUDA: multiple of 16) */
  int64_t num_pages;   /* >= 1 */
} dsk_kv_cache;

DSK_API int64_t dsk_kv_entry_bytes(dsk_kv_format f);  /* 656 / 584 / 132; 0 if unknown */
DSK_API int64_t dsk_kv_dim(dsk_kv_format f);          /* dequantised dims: 576 / 512 / 128 */
DSK_API int64_t dsk_kv_latent_dim(dsk_kv_format f);   /* quantised dims: 512 / 448 / 128 */
DSK_API int64_t dsk_kv_min_page_stride(dsk_kv_format f, int64_t pbs);
DSK_API int64_t dsk_kv_canonical_page_stride(dsk_kv_format f, int64_t pbs);

typedef struct dsk_kv_write_desc {
  size_t struct_size;
  void *stream;
  dsk_kv_format format;
  int64_t N;                                  /* rows; 0 = no-op */
  const dsk_bf16 *latent; int64_t latent_stride; /* [N, dsk_kv_latent_dim], element stride */
  const dsk_bf16 *rope; int64_t rope_stride;     /* [N, 64]; unused (NULL) for IDXK132 */
  const int32_t *slot_mapping;                /* [N]; < 0 skipped, >= capacity skipped+counted */
  dsk_kv_cache cache;
  dsk_scale_rule scale_rule;                  /* Format A and IDXK132 */
  int64_t *counters; /* optional: [0] += slots >= capacity, [1] += non-finite tiles */
} dsk_kv_write_desc;
DSK_API dsk_status dsk_kv_write(dsk_ctx *ctx, const dsk_kv_write_desc *desc);

/* Dequantising reader: out[n, 0:dsk_kv_dim] = decoded record of slots[n]
 * (fp32). Rows whose slot is negative or >= capacity are written as NaN and
 * counted in counters[0]. */
typedef struct dsk_kv_read_desc {
  size_t struct_size;
  void *stream;
  dsk_kv_format format;
  int64_t N;
  const int32_t *slots;
  dsk_kv_cache cache;
  float *out; int64_t out_stride;
  int64_t *counters;
} dsk_kv_read_desc;
DSK_API dsk_status dsk_kv_read(dsk_ctx *ctx, const dsk_kv_read_desc *desc);

/* ------------------------------------------------------------ slot lists */
typedef enum dsk_slot_list_kind {
  DSK_SLOTS_TOPK = 1,  /* request-local top-k -> physical slots (V3.2 / GLM)   */
  DSK_SLOTS_SWA = 2,   /* DSv4 sliding window (segment 0)                      */
  DSK_SLOTS_C4A = 3,   /* DSv4 ratio-4 compressed top-k, compacted (segment 1)  */
  DSK_SLOTS_C128A = 4  /* DSv4 ratio-128 compressed, all complete entries      */
} dsk_slot_list_kind;

typedef struct dsk_block_table {
  const int32_t *table; /* [rows, max_blocks], entry = page index; < 0 = none */
  int64_t stride;       /* elements between rows */
  int64_t rows;         /* R; req[t] outside [0, R) gives an all -1 row (counted) */
  int64_t max_blocks;
} dsk_block_table;

typedef struct dsk_slot_list_desc {
  size_t struct_size;
  void *stream;
  dsk_slot_list_kind kind;
  int64_t T;                   /* rows; 0 = no-op */
  const int32_t *req;          /* [T] block-table row */
  const int32_t *pos;          /* [T] absolute position (SWA, C128A) */
  const int32_t *slot_mapping; /* [T] < 0 marks a padding row */
  dsk_block_table block_table;
  int64_t pbs;                 /* page size of the target cache */
  const int32_t *idx; int64_t idx_stride; /* TOPK, C4A: request-local numbers [T, K], -1 padded */
  int64_t K;                   /* TOPK, C4A */
  int64_t window;              /* SWA: W (<= width) */
  int64_t ratio;               /* C128A: compression ratio (0 = 128) */
  int32_t *out; int64_t out_stride; /* [T, width] */
  int64_t width;               /* SWA, C128A: list width; TOPK, C4A: 0 or K */
  int32_t *lens;               /* [T] or NULL: valid count (TOPK: non-negative outputs) */
  int64_t *counters;           /* optional: [0] += rows whose req is out of range */
} dsk_slot_list_desc;
DSK_API dsk_status dsk_slot_list_build(dsk_ctx *ctx, const dsk_slot_list_desc *desc);

/* ---------------------------------------------------------------- tactics */
typedef struct dsk_tactic {
  int32_t op;      /* dsk_op; 0 in an all-zero (= use tuned entry / heuristic) tactic */
  int32_t version; /* tactic version of that op */
  int32_t v[6];
} dsk_tactic;

typedef enum dsk_tactic_source {
  DSK_TACTIC_HEURISTIC = 0,
  DSK_TACTIC_TUNED = 1,
  DSK_TACTIC_FORCED = 2
} dsk_tactic_source;

typedef struct dsk_plan_info {
  size_t struct_size;
  int64_t workspace_bytes;
  dsk_tactic tactic;   /* what the run call would use */
  int tactic_source;   /* dsk_tactic_source */
  char backend[32];
} dsk_plan_info;

/* ----------------------------------------------------- sparse MLA decode */
typedef enum dsk_precision { DSK_PRECISION_ACCURATE = 0, DSK_PRECISION_FAST = 1 } dsk_precision;

#define DSK_SPARSE_MLA_TACTIC_VERSION 1

typedef struct dsk_sparse_mla_segment {
  dsk_kv_cache cache;
  const int32_t *slots;   /* [T, width] physical slots; negative = invalid */
  int64_t slots_stride_t; /* elements */
  int64_t width;          /* >= 1 */
  const int32_t *lens;    /* [T] valid prefix per row, or NULL (= width) */
} dsk_sparse_mla_segment;

typedef struct dsk_sparse_mla_desc {
  size_t struct_size;
  void *stream;
  dsk_kv_format format; /* A656 (Dqk 576) or B584 (Dqk 512) */
  int64_t T;            /* query rows; 0 = no-op */
  int64_t H;            /* 1..128 */
  const dsk_bf16 *q; int64_t q_stride_t, q_stride_h; /* [T, H, Dqk], element strides */
  float sm_scale;       /* finite, > 0 */
  int nseg;             /* 1 or 2 */
  dsk_sparse_mla_segment seg[2];
  const float *sink;    /* [H] or NULL */
  dsk_bf16 *out; int64_t out_stride_t, out_stride_h; /* [T, H, 512] */
  float *lse; int64_t lse_stride_t, lse_stride_h;    /* [T, H] or NULL; natural log, no sink */
  dsk_precision precision;
  void *workspace; int64_t workspace_bytes;
  dsk_tactic tactic;    /* all zero: tuned entry else heuristic; otherwise forced */
  int64_t *counters;    /* optional: [0] += out-of-range slots at k < L, [1] += clamped lens */
} dsk_sparse_mla_desc;

DSK_API dsk_status dsk_sparse_mla_decode_plan(dsk_ctx *ctx, const dsk_sparse_mla_desc *desc,
                                              dsk_plan_info *info);
DSK_API dsk_status dsk_sparse_mla_decode(dsk_ctx *ctx, const dsk_sparse_mla_desc *desc);

/* ------------------------------------------------- mHC (DeepSeek-V4 only) */
/* mHC (manifold-constrained hyper-connections) is DeepSeek-V4's residual
 * path: 4 residual streams R [T, 4, D] (bf16) are mixed around every
 * sublayer (spec/mhc.md; docs/mhc.md). One sublayer is
 *
 *   dsk_mhc_prenorm  R, fn [24, nD]      -> partials (d [S, T, 24], q [S, T])
 *   dsk_mhc_pre      partials, R, ...    -> y [T, D] (optionally RMS-normed),
 *                                           post [T, 4], C [T, 4, 4]
 *   (the sublayer: attention or FFN on y gives out [T, D])
 *   dsk_mhc_post     out, R, post, C     -> R' [T, 4, D] (may be in place)
 *
 * and dsk_mhc_head collapses the streams before the final norm and head.
 * nD = 4 * D (4096 -> 16 384 for DSv4-Flash, 7168 -> 28 672 for Pro).
 *
 * The projection runs in S column splits (split-K). S is a run-time field
 * (`fixed_splits`), never a compile-time shape: 0 = tuned entry for the T
 * bucket, else the heuristic; 1..dsk_mhc_max_splits(nD) pins it. S changes
 * the fp32 summation order, so a pinned S gives batch-invariant bits while
 * 0 lets the bits depend on T. dsk_mhc_pre must be given the same
 * fixed_splits (0 resolves to the same S for the same context and T).
 * Op ids: DSK_OP_MHC_PRENORM .. DSK_OP_MHC_HEAD. */
#define DSK_MHC_STREAMS 4           /* n = hc_mult */
#define DSK_MHC_MIX 24              /* n(n+2): 4 pre + 4 post + 16 comb logits */
#define DSK_MHC_SPLIT_ALIGN 64      /* split width Kc is a multiple of this */
#define DSK_MHC_MAX_D 16384         /* D is 8..16384, a multiple of 8 */
#define DSK_MHC_TACTIC_VERSION 1    /* tactic: v[0] = S, v[1..5] = 0 */
/* DSv4 constants: config.json hc_eps, rms_norm_eps, hc_sinkhorn_iters; the
 * post multiplier 2.0 is not in config.json (vLLM's hc_post_alpha). */
#define DSK_MHC_DEFAULT_EPS 1e-6f
#define DSK_MHC_DEFAULT_SINKHORN_ITERS 20
#define DSK_MHC_DEFAULT_POST_MULT 2.0f

/* Precision of the projection (fn . x). A descriptor field, never a tactic:
 * tuning does not change it. FP32 (default): fp32 products and sums. TF32
 * (opt-in): fn rounded to TF32 (10 mantissa bits, nearest, ties away);
 * bf16 x is exact in TF32; looser bound (spec/mhc.md §7). */
typedef enum dsk_mhc_precision {
  DSK_MHC_PRECISION_FP32 = 0,
  DSK_MHC_PRECISION_TF32 = 1
} dsk_mhc_precision;

/* S_max = max(1, floor(ceil(nD / 64) / 4)): 64 for nD 16 384, 112 for
 * 28 672. 0 if nD < 1. */
DSK_API int64_t dsk_mhc_max_splits(int64_t nD);
/* The heuristic split count (vLLM's rule, block_m 64):
 * S = clamp(floor(sm_count / ceil(T / 64)), 1, S_max). 0 if nD < 1 or T < 0;
 * T = 0 counts as 1 token, sm_count < 1 as 1. */
DSK_API int64_t dsk_mhc_splits_heuristic(int64_t nD, int64_t T, int sm_count);
/* Split width Kc = round_up(ceil(nD / S), 64); split s covers columns
 * [s*Kc, min((s+1)*Kc, nD)) (splits past nD are empty and write zeros).
 * 0 if nD < 1 or S < 1. */
DSK_API int64_t dsk_mhc_split_width(int64_t nD, int64_t S);

/* Partials of the split projection: one fp32 buffer, d = partials[0,
 * S*T*24) as [S, T, 24] (fn . x over split s, before the RMS factor), then
 * q = partials[S*T*24, S*T*25) as [S, T] (sum of x^2 over split s).
 * S*T*25*4 bytes; dsk_mhc_max_splits(nD)*T_max*100 bytes covers every call. */
typedef struct dsk_mhc_prenorm_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                /* tokens; 0 = no-op */
  int64_t D;                /* hidden size: 4096 (Flash), 7168 (Pro) */
  int64_t nD;               /* must be 4 * D */
  const dsk_bf16 *R; int64_t R_stride; /* [T, 4, D]: token t at R + t*R_stride (elements, >= nD),
                                          x[i*D + d] = R[t, i, d] */
  const float *fn;          /* [24, nD] hc_attn_fn / hc_ffn_fn, row-major */
  int32_t fixed_splits;     /* S: 0 = tuned entry else heuristic; 1..dsk_mhc_max_splits(nD) */
  dsk_mhc_precision precision;
  float *partials; int64_t partials_bytes; /* out, >= S*T*25*4 (dsk_mhc_prenorm_plan) */
} dsk_mhc_prenorm_desc;

/* Writes the partials bytes (workspace_bytes), the resolved S (tactic.v[0])
 * and its source. Validates every field except partials / partials_bytes. */
DSK_API dsk_status dsk_mhc_prenorm_plan(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_mhc_prenorm(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *desc);

/* Per token: sums the S partials in ascending s, r = rsqrt(sum q / nD +
 * eps_rms), m = d * r; pre_i = sigmoid(m_i s0 + b_i) + eps_hc, post_i =
 * post_mult * sigmoid(m_{4+i} s1 + b_{4+i}), C = Sinkhorn(m_{8+4i+j} s2 +
 * b_{8+4i+j}) (sinkhorn_iters rounds, ending on a column normalisation);
 * y = bf16(sum_i pre_i R[t, i, :]). With norm_w, y is then RMS-normalised:
 * y = bf16(norm_w * (float(y_bf16) * rsqrt(mean(y_bf16^2) + norm_eps))). */
typedef struct dsk_mhc_pre_desc {
  size_t struct_size;
  void *stream;
  int64_t T, D, nD;         /* as in dsk_mhc_prenorm_desc */
  int32_t fixed_splits;     /* the value given to dsk_mhc_prenorm */
  const float *partials; int64_t partials_bytes; /* written by dsk_mhc_prenorm */
  const dsk_bf16 *R; int64_t R_stride; /* [T, 4, D], as for prenorm */
  const float *scale;       /* [3] s0 (pre), s1 (post), s2 (comb) */
  const float *base;        /* [24] b */
  float eps_rms;            /* > 0: rms_norm_eps (1e-6) */
  float eps_hc;             /* >= 0: hc_eps (1e-6), added to pre and inside Sinkhorn */
  int32_t sinkhorn_iters;   /* 1..1000: hc_sinkhorn_iters (20) */
  float post_mult;          /* finite: 2.0 for DSv4 */
  const float *norm_w;      /* [D] or NULL: fuse the sublayer RMSNorm (attn_norm / ffn_norm) */
  float norm_eps;           /* > 0 when norm_w is set (rms_norm_eps) */
  dsk_bf16 *y; int64_t y_stride; /* out [T, D]; must not overlap R */
  float *post;              /* out [T, 4] */
  float *C;                 /* out [T, 4, 4], C[t, i, j] row-major */
  float *pre_w;             /* out [T, 4] or NULL: the pre weights (tests, debugging) */
} dsk_mhc_pre_desc;
DSK_API dsk_status dsk_mhc_pre(dsk_ctx *ctx, const dsk_mhc_pre_desc *desc);

/* R'[t, j, :] = bf16(post[t, j] * out[t, :] + sum_i C[t, i, j] * R[t, i, :])
 * (column j of C; fp32 or better, one rounding). In place when R_out == R
 * and R_out_stride == R_stride; any other overlap of R_out with R or out is
 * rejected. */
typedef struct dsk_mhc_post_desc {
  size_t struct_size;
  void *stream;
  int64_t T, D;             /* tokens (0 = no-op); hidden size */
  const dsk_bf16 *out; int64_t out_stride; /* sublayer output [T, D] */
  const dsk_bf16 *R; int64_t R_stride;     /* [T, 4, D] */
  const float *post;        /* [T, 4] from dsk_mhc_pre */
  const float *C;           /* [T, 4, 4] from dsk_mhc_pre */
  dsk_bf16 *R_out; int64_t R_out_stride;   /* out [T, 4, D] */
} dsk_mhc_post_desc;
DSK_API dsk_status dsk_mhc_post(dsk_ctx *ctx, const dsk_mhc_post_desc *desc);

/* hc_head: m = (fn . x) * r (4 rows), pre_i = sigmoid(m_i s + b_i) + eps_hc,
 * h = bf16(sum_i pre_i R[t, i, :]); the same split projection as prenorm
 * (its partials, S*T*5 floats, live in the workspace). */
typedef struct dsk_mhc_head_desc {
  size_t struct_size;
  void *stream;
  int64_t T, D, nD;         /* as in dsk_mhc_prenorm_desc */
  const dsk_bf16 *R; int64_t R_stride;
  const float *fn;          /* [4, nD] hc_head_fn */
  const float *scale;       /* [1] hc_head_scale */
  const float *base;        /* [4] hc_head_base */
  float eps_rms;            /* > 0 (1e-6) */
  float eps_hc;             /* >= 0 (1e-6) */
  int32_t fixed_splits;     /* as for prenorm */
  dsk_mhc_precision precision;
  dsk_bf16 *h; int64_t h_stride; /* out [T, D]; must not overlap R */
  void *workspace; int64_t workspace_bytes; /* >= S*T*5*4 (dsk_mhc_head_plan) */
} dsk_mhc_head_desc;
DSK_API dsk_status dsk_mhc_head_plan(dsk_ctx *ctx, const dsk_mhc_head_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_mhc_head(dsk_ctx *ctx, const dsk_mhc_head_desc *desc);

/* Zero a descriptor and set struct_size, precision FP32, fixed_splits 0 and
 * the DSv4 constants above (eps fields, iterations, post multiplier). */
DSK_API void dsk_mhc_prenorm_desc_init(dsk_mhc_prenorm_desc *desc);
DSK_API void dsk_mhc_pre_desc_init(dsk_mhc_pre_desc *desc);
DSK_API void dsk_mhc_post_desc_init(dsk_mhc_post_desc *desc);
DSK_API void dsk_mhc_head_desc_init(dsk_mhc_head_desc *desc);

/* ------------------------------------------------------ lightning indexer */
/* Indexer scores, top-k selection and the fused path to slot lists of
 * DeepSeek-V3.2, GLM-5.1 and DeepSeek-V4 (spec/indices.md §9, §2, §4, §6;
 * docs/indexer.md). Op ids: DSK_OP_INDEXER_LOGITS, DSK_OP_TOPK,
 * DSK_OP_INDEXER_SLOTS (dsk_indexer_topk_slots). */
#define DSK_INDEXER_DIM 128   /* indexer head dim (q and key length) */
#define DSK_TOPK_MAX_K 2048   /* largest K of dsk_topk and the fused path */

/* Scores of every causal candidate of each query row (indices.md §9):
 *
 *   out[t, s] = k_scale[s] * sum_h weights[t, h] * q_scale[t, h]
 *                                  * ReLU( sum_d q[t, h, d] * k[s, d] )
 *
 * q and k are the e4m3 values; k[s] and k_scale[s] are the record of
 * request-local entry s of row t's request, at slot map(req[t], s, pbs)
 * of the key cache (format IDXK132, kv-cache.md §6). ReLU(x) = x < 0 ? 0 : x,
 * so a NaN propagates into the score.
 * Causal length L_t = (pos[t] + 1) / ratio (integer division), 0 for a
 * padding row (slot_mapping[t] < 0) and for pos[t] < 0. Row t gets
 * out[t, s] for s < min(L_t, ctx_width) and -inf for the rest of
 * [0, ctx_width); stride gaps are never written.
 * Bad data (counted, never an error):
 *   counters[0] += entries s < min(L_t, ctx_width) of non-padding rows whose
 *                  slot does not exist (req[t] outside [0, rows), block
 *                  s / pbs >= max_blocks, page < 0) or whose page is
 *                  >= cache.num_pages; they are scored -inf and not read;
 *   counters[1] += non-padding rows with L_t > ctx_width (truncated).
 * No workspace; accuracy per row: max |out - fp64 ref| <= 1e-5 * max |ref|. */
typedef struct dsk_indexer_logits_desc {
  size_t struct_size;
  void *stream;
  int64_t T;       /* query rows; 0 = no-op */
  int64_t n_heads; /* 1..128 (64 or 32 in known models) */
  /* e4m3 [T, n_heads, 128], byte strides (CUDA: q 16-byte aligned, strides multiples of 16) */
  const uint8_t *q; int64_t q_stride_t, q_stride_h;
  const float *q_scale; int64_t q_scale_stride_t; /* fp32 [T, n_heads], one positive scale per (t, h) */
  /* fp32 [T, n_heads]: weights_proj(x_t)[h] * n_heads^-0.5 * 128^-0.5 (constants applied by the caller) */
  const float *weights; int64_t weights_stride_t;
  const int32_t *req;          /* [T] block-table row */
  const int32_t *pos;          /* [T] absolute position of the query token */
  const int32_t *slot_mapping; /* [T] < 0 marks a padding row */
  dsk_block_table block_table; /* of the key cache */
  int64_t ratio;               /* 1 (V3.2 / GLM raw tokens) or 4 (DSv4 C4A entries) */
  dsk_kv_cache cache;          /* indexer key cache, DSK_KV_FORMAT_IDXK132 */
  float *out; int64_t out_stride_t; /* fp32 [T, ctx_width] */
  int64_t ctx_width;           /* candidates per row, 1 .. 2^31-1 */
  int64_t *counters;           /* optional, 2 entries (above) */
} dsk_indexer_logits_desc;
DSK_API dsk_status dsk_indexer_logits(dsk_ctx *ctx, const dsk_indexer_logits_desc *desc);

/* ------------------------------------------------------------------ top-k */
/* Per row t: the K largest of scores[t, 0 .. L_t) as column numbers
 * (request-local indices), ordered by score descending, ties (equal
 * scores) lowest column first; columns >= L_t are ignored and never read.
 * Order used: -0 equals +0, NaN ranks below -inf (a NaN or -inf column is
 * still a candidate). min(L_t, K) columns are written, then -1 up to K.
 * L_t = lens[t] clamped to [0, width] (lens NULL: width).
 * Short-context shortcut (no_shortcut = 0): a row with L_t <= K gets
 * 0, 1, ..., L_t - 1 in ascending column order without reading its scores
 * (the set is exact; only the order differs from the score order). With
 * no_shortcut = 1 such rows are sorted by score too.
 * counters[0] += rows whose lens[t] was outside [0, width] (clamped). */
typedef struct dsk_topk_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                             /* rows; 0 = no-op */
  const float *scores; int64_t scores_stride_t; /* fp32 [T, width] */
  int64_t width;                         /* 1 .. 2^31-1 */
  const int32_t *lens;                   /* [T] valid length per row, or NULL (= width) */
  int64_t K;                             /* 1 .. DSK_TOPK_MAX_K */
  int no_shortcut;                       /* 0: rows with L_t <= K get 0..L_t-1 ascending; 1: sorted by score */
  int32_t *out; int64_t out_stride_t;    /* int32 [T, K], -1 padded */
  void *workspace; int64_t workspace_bytes; /* from dsk_topk_plan */
  int64_t *counters;                     /* optional, 1 entry (above) */
} dsk_topk_desc;
DSK_API dsk_status dsk_topk_plan(dsk_ctx *ctx, const dsk_topk_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_topk(dsk_ctx *ctx, const dsk_topk_desc *desc);

/* --------------------------------------- fused: scores -> top-k -> slots */
/* One call from indexer query to the sparse-decode slot list of one segment:
 *   1. scores as dsk_indexer_logits (into the workspace);
 *   2. top-k as dsk_topk with L_t = min((pos + 1) / ratio, ctx_width)
 *      (0 for padding rows); with the shortcut (no_shortcut = 0) rows with
 *      L_t <= K are not scored at all;
 *   3. slots as dsk_slot_list_build of `kind` (DSK_SLOTS_TOPK: indices.md §2,
 *      same column order, lens = non-negative outputs; DSK_SLOTS_C4A: §4,
 *      valid slots compacted to the front, lens = their count), mapping
 *      through slot_block_table with page size slot_pbs (the attention
 *      cache's; it may differ from the key cache's block table).
 * The result equals composing the three calls (same backend, same inputs).
 * counters (optional, 3 entries): [0], [1] as dsk_indexer_logits (entries
 * of rows skipped by the shortcut are not examined), [2] += rows whose req
 * is outside slot_block_table (the builder's counter). */
typedef struct dsk_indexer_topk_slots_desc {
  size_t struct_size;
  void *stream;
  /* scores: fields as in dsk_indexer_logits_desc */
  int64_t T, n_heads;
  const uint8_t *q; int64_t q_stride_t, q_stride_h;
  const float *q_scale; int64_t q_scale_stride_t;
  const float *weights; int64_t weights_stride_t;
  const int32_t *req, *pos, *slot_mapping;
  dsk_block_table block_table; /* of the key cache */
  int64_t ratio;               /* 1 or 4 */
  dsk_kv_cache cache;          /* IDXK132 */
  int64_t ctx_width;           /* candidates scored per row, >= 1 */
  /* selection */
  int64_t K;                   /* 1 .. DSK_TOPK_MAX_K */
  int no_shortcut;             /* as dsk_topk */
  int32_t *topk; int64_t topk_stride_t; /* optional [T, K]: the selected request-local indices */
  /* slot list */
  dsk_slot_list_kind kind;     /* DSK_SLOTS_TOPK or DSK_SLOTS_C4A */
  dsk_block_table slot_block_table; /* of the cache the slots address; table NULL: block_table */
  int64_t slot_pbs;            /* its page size; 0: cache.pbs */
  int32_t *slots; int64_t slots_stride_t; /* int32 [T, K] */
  int32_t *lens;               /* [T] or NULL */
  void *workspace; int64_t workspace_bytes; /* from dsk_indexer_topk_slots_plan */
  int64_t *counters;           /* optional, 3 entries (above) */
} dsk_indexer_topk_slots_desc;
DSK_API dsk_status dsk_indexer_topk_slots_plan(dsk_ctx *ctx, const dsk_indexer_topk_slots_desc *desc,
                                               dsk_plan_info *info);
DSK_API dsk_status dsk_indexer_topk_slots(dsk_ctx *ctx, const dsk_indexer_topk_slots_desc *desc);

/* ------------------------------------------------------------- timing */
/* Times a callable on the context's device: `warmup` untimed calls, then
 * `reps` samples, each one call between two device events (CUDA) or two
 * monotonic clock reads after the call returns (CPU). With flush_l2 set, a
 * scratch buffer of 2 x L2 is written before each sample, outside the
 * timed region. Used by `dsk bench` and the tuner. */
typedef dsk_status (*dsk_bench_fn)(dsk_ctx *ctx, void *user);

typedef struct dsk_bench_opts {
  size_t struct_size;
  void *stream;   /* the stream fn launches on (NULL = the context's default) */
  int warmup;     /* >= 0 */
  int reps;       /* 1 .. 100000 */
  int flush_l2;   /* 1 = cold L2 before each sample */
} dsk_bench_opts;

typedef struct dsk_bench_result {
  size_t struct_size;
  double median_us, min_us, max_us;
  int reps;
} dsk_bench_result;

DSK_API dsk_status dsk_bench_run(dsk_ctx *ctx, dsk_bench_fn fn, void *user, const dsk_bench_opts *opts,
                                 dsk_bench_result *result);
/* Device-to-device copy of `bytes` (median of 10 after 3 warm-ups);
 * *gbps counts bytes read plus bytes written. CPU: memcpy on one thread. */
DSK_API dsk_status dsk_bench_copy_bandwidth(dsk_ctx *ctx, size_t bytes, double *gbps);

#ifdef __cplusplus
}
#endif
#endif /* DSK_H */
