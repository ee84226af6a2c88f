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

#define DSK_MAX_CPU_THREADS 1024 /* largest dsk_ctx_opts.num_threads (CPU scratch is per thread) */

typedef struct dsk_ctx_opts {
  size_t struct_size;
  const char *device;  /* "cpu", "cuda:N" or "auto"; NULL = "auto" */
  const char *backend; /* NULL: DSK_BACKEND, else automatic */
  int num_threads;     /* CPU threads, 0..DSK_MAX_CPU_THREADS; 0: DSK_NUM_THREADS, else all cores */
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
/* A new stream of the context's device that does not synchronize with the
 * legacy default stream (CUDA: cudaStreamNonBlocking), for callers without
 * a CUDA runtime of their own (the CLI, tests; e.g. dsk_moe_desc's
 * aux_stream). CPU contexts: *stream = NULL (their ops run on the calling
 * thread). Destroy it with dsk_stream_destroy (NULL: no-op). */
DSK_API dsk_status dsk_stream_create(dsk_ctx *ctx, void **stream);
DSK_API dsk_status dsk_stream_destroy(dsk_ctx *ctx, void *stream);

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
  DSK_OP_MHC_POST_PRENORM = 24, /* dsk_mhc_post_prenorm */
  DSK_OP_INDEXER_LOGITS = 30, /* lightning indexer */
  DSK_OP_TOPK = 31,
  DSK_OP_INDEXER_SLOTS = 32,  /* dsk_indexer_topk_slots */
  DSK_OP_MOE_MX_QUANTIZE = 40,  /* MoE: dsk_mx_quantize */
  DSK_OP_MOE_FP8_QUANTIZE = 41, /* dsk_fp8_quantize_1x128 */
  DSK_OP_MOE_PACK_WORDS = 42,   /* dsk_pack_ue8m0_words */
  DSK_OP_MOE_SF_PACK = 43,      /* dsk_sf_pack_mn_major */
  DSK_OP_MOE_ROUTE = 44,        /* dsk_moe_route */
  DSK_OP_MOE_PERMUTE = 45,      /* dsk_moe_permute */
  DSK_OP_MOE_GEMM = 46,         /* dsk_moe_gemm (tuner op moe.gemm) */
  DSK_OP_MOE_SWIGLU_QUANT = 47, /* dsk_swiglu_quant */
  DSK_OP_MOE_GATHER = 48,       /* dsk_moe_gather */
  DSK_OP_MOE_DENSE_GEMM = 49,   /* dsk_dense_fp8_gemm (tuner op dense_fp8.gemm) */
  DSK_OP_MOE_FORWARD = 50       /* dsk_moe_run */
} dsk_op;
/* "kv_write", "kv_read", "slot_list", "sparse_mla_decode", "mhc_prenorm",
 * "mhc_pre", "mhc_post", "mhc_head", "mhc_post_prenorm", "indexer_logits", "topk",
 * "indexer_topk_slots", "mx_quantize", "fp8_quantize_1x128",
 * "pack_ue8m0_words", "sf_pack_mn_major", "moe_route", "moe_permute",
 * "moe_gemm", "swiglu_quant", "moe_gather", "dense_fp8_gemm",
 * "moe_forward"; NULL if unknown. */
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

/* Decode tactic (version 1): v[0] chunks per CTA (64-candidate chunks, from
 * {1, 2, 3, 4, 6, 8, 12, 16, 24, 32} clipped to the chunk count), v[1] heads
 * per CTA (16, or 32 when H > 16), v[2..5] = 0. */
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
 * dsk_mhc_post_prenorm fuses one sublayer's post with the next sublayer's
 * prenorm (spec §5 "post+pre"): a model then runs two mHC kernels per
 * sublayer, post_prenorm -> pre -> sublayer.
 *
 * The projection runs in S column splits (split-K). S is a run-time field
 * (`fixed_splits`), never a compile-time shape: 0 = tuned entry for the T
 * bucket, else the heuristic; 1..dsk_mhc_max_splits(nD) pins it. S changes
 * the fp32 summation order, so a pinned S gives batch-invariant bits while
 * 0 lets the bits depend on T. dsk_mhc_pre must be given the same
 * fixed_splits (0 resolves to the same S for the same context and T).
 * Op ids: DSK_OP_MHC_PRENORM .. DSK_OP_MHC_HEAD, DSK_OP_MHC_POST_PRENORM. */
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

/* Fused post + prenorm (spec/mhc.md §5): R_out = dsk_mhc_post(out, R,
 * post, C), rounded to bf16, then the partials of dsk_mhc_prenorm(R_out,
 * fn) computed from those rounded values, in one call. The next sublayer's
 * dsk_mhc_pre takes R = R_out, the partials and the same fixed_splits (0
 * resolves as for dsk_mhc_prenorm: the prenorm tuned entry of the T
 * bucket, else the heuristic). R_out and the partials must not overlap
 * each other or any input (R, out, post, C, fn): there is no in-place form
 * (split s of the projection needs all four streams of its columns, which
 * other splits overwrite; ping-pong two residual buffers). Every backend
 * gives the same bits as dsk_mhc_post followed by dsk_mhc_prenorm with the
 * same S. */
typedef struct dsk_mhc_post_prenorm_desc {
  size_t struct_size;
  void *stream;
  int64_t T, D, nD;         /* tokens (0 = no-op); hidden size; nD = 4 * D */
  const dsk_bf16 *out; int64_t out_stride; /* sublayer output [T, D] */
  const dsk_bf16 *R; int64_t R_stride;     /* [T, 4, D] */
  const float *post;        /* [T, 4] from dsk_mhc_pre */
  const float *C;           /* [T, 4, 4] from dsk_mhc_pre */
  dsk_bf16 *R_out; int64_t R_out_stride;   /* out [T, 4, D]; overlaps nothing else */
  const float *fn;          /* [24, nD] of the next sublayer (hc_ffn_fn after attention, ...) */
  int32_t fixed_splits;     /* S, as for dsk_mhc_prenorm */
  dsk_mhc_precision precision;
  float *partials; int64_t partials_bytes; /* out, >= S*T*25*4 (dsk_mhc_post_prenorm_plan) */
} dsk_mhc_post_prenorm_desc;
/* As dsk_mhc_prenorm_plan: partials bytes, resolved S and its source. */
DSK_API dsk_status dsk_mhc_post_prenorm_plan(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *desc,
                                             dsk_plan_info *info);
DSK_API dsk_status dsk_mhc_post_prenorm(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *desc);

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
DSK_API void dsk_mhc_post_prenorm_desc_init(dsk_mhc_post_prenorm_desc *desc);

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

/* ------------------------------------------------------------------- MoE */
/* MXFP4 / FP8 routed and shared experts of DeepSeek-V4 Flash/Pro and
 * GLM-5.1 (spec/mxfp4-moe.md, numbers in brackets below are its sections;
 * design notes and the readings dsk chose: docs/moe.md). Op ids:
 * DSK_OP_MOE_MX_QUANTIZE .. DSK_OP_MOE_FORWARD (40..50); the tuner op
 * `moe.gemm` is DSK_OP_MOE_GEMM, `dense_fp8.gemm` DSK_OP_MOE_DENSE_GEMM.
 *
 * Everything follows spec/api-conventions.md: one descriptor per op whose
 * first field is struct_size (set it with sizeof, or use the *_init
 * helpers), `void *stream`, plan calls for ops with scratch, caller-owned
 * workspaces, bad descriptor fields -> DSK_STATUS_INVALID_ARG naming the
 * field, bad data inside buffers -> the op's rule + optional counters.
 * Pointers are device pointers for a CUDA context and host pointers for a
 * CPU context, except where a function says "host" (weight preparation and
 * the pure helpers). Both the cpu-ref and the CUDA backends serve every
 * run call.
 *
 * Layout vocabulary
 *   fp8      OCP e4m3fn bytes (dsk_e4m3_from_f32 / dsk_e4m3_to_f32)
 *   MXFP4    K-major [rows, K/2] bytes; element 2i in the low nibble of byte
 *            i, 2i+1 in the high nibble; one UE8M0 per (row, 32-block)
 *   raw scales   bytes [rows, sf_k] (row stride sf_stride), K-group g of
 *            row r at r*sf_stride + g
 *   packed scales  (DeepGEMM's MN-major TMA-aligned packed UE8M0 tensor)
 *            int32 words of logical shape (G, MN, Kp), Kp = ceil(sf_k/4),
 *            strides (Kp*T4, 1, T4), T4 = round_up(MN, 4); byte j of word
 *            (g, mn, p) is the scale of K-group 4p+j; every padding byte 0.
 */
/* Limits (structural sizes outside them are DSK_STATUS_INVALID_ARG). */
#define DSK_MOE_MAX_EXPERTS 1024 /* router width E and E_local */
#define DSK_MOE_MAX_TOPK 16
#define DSK_MOE_MX_BLOCK 32      /* MX block: elements per UE8M0 along K */
#define DSK_MOE_FP8_GROUP 128    /* 1x128 activation groups, 128x128 weight blocks */
#define DSK_MOE_MAX_K 131072     /* largest K, N, H, I of the MoE ops */

/* --------------------------------------------------- enums and small types */
typedef enum dsk_moe_in_dtype {
  DSK_MOE_IN_BF16 = 0, /* dsk_bf16 elements */
  DSK_MOE_IN_F32 = 1   /* float elements */
} dsk_moe_in_dtype;

/* Format of prepared expert weights (the B operand of the grouped GEMM). */
typedef enum dsk_moe_wfmt {
  DSK_MOE_W_MXFP4 = 1, /* packed e2m1 [G, N, K/2] + UE8M0 per (row, 32) -> sf_k = K/32 */
  DSK_MOE_W_FP8 = 2    /* e4m3 [G, N, K] + UE8M0 per 128x128 block, broadcast to rows -> sf_k = K/128 */
} dsk_moe_wfmt;

/* A packed scale tensor (layout at the top of this section) and the logical
 * shape it was packed with; the ops check the shape against their own. */
typedef struct dsk_moe_sf {
  const int32_t *words;
  int64_t groups; /* G */
  int64_t mn;     /* MN (rows per group) */
  int64_t sf_k;   /* K-groups per row */
} dsk_moe_sf;

/* ------------------------------------------------ packed-scale geometry */
/* Pure functions (no context; any thread). For sizes < 1 or an index
 * outside its range they return -1. */
/* Kp = ceil(sf_k / 4). */
DSK_API int64_t dsk_sf_packed_kp(int64_t sf_k);
/* Words of a packed tensor: G * Kp * round_up(MN, 4). */
DSK_API int64_t dsk_sf_packed_words(int64_t G, int64_t MN, int64_t sf_k);
/* Word offset of (g, mn, p): g*Kp*T4 + p*T4 + mn [4.2]. The scale of K-group
 * kg is byte (kg % 4) of word dsk_sf_packed_offset(MN, sf_k, g, mn, kg / 4),
 * i.e. byte 4*offset + kg % 4 of the tensor (little-endian words). */
DSK_API int64_t dsk_sf_packed_offset(int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t p);

/* --------------------------------------------------- MXFP4 quantization */
/* Comparison flags of dsk_mx_quantize [2.1]; 0 = the dsk default rule. */
#define DSK_MX_TIES_TO_ZERO 1u /* DeepGEMM's Python element rounding (ties go down) */
#define DSK_MX_SCALE_FLOOR 2u  /* OCP sample scale 2^(floor(log2 amax) - 2), saturating */

/* Per row and 32-element block [2.1]: a block with NaN/inf gets scale byte
 * 0xFF and codes 0 (counters[0] += such blocks); else amax = max(|v|,
 * 1e-4), e = UE8M0 ceil of amax/6 clamped to [1, 254], codes = e2m1 RNE of
 * v / 2^(e-127). Output: q [rows, K/2] MXFP4 bytes (row stride q_stride
 * bytes), scales raw bytes [rows, K/32] (row stride sf_stride bytes).
 * K is a multiple of 32. */
typedef struct dsk_mx_quantize_desc {
  size_t struct_size;
  void *stream;
  int64_t rows;                  /* 0 = no-op */
  int64_t K;                     /* >= 32, multiple of 32 */
  dsk_moe_in_dtype x_dtype;
  const void *x; int64_t x_stride; /* [rows, K], element stride >= K */
  uint8_t *q; int64_t q_stride;  /* [rows, K/2] bytes, stride >= K/2 */
  uint8_t *sf; int64_t sf_stride; /* [rows, K/32] bytes, stride >= K/32 */
  uint32_t flags;                /* DSK_MX_* */
  int64_t *counters;             /* optional: [0] += NaN blocks */
} dsk_mx_quantize_desc;
DSK_API dsk_status dsk_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *desc);

/* ----------------------------------------- FP8 1x128 activation quantizer */
/* Per row and 128-column group [2.2]: amax over the finite values, floored
 * at 1e-4; e = UE8M0 ceil of amax/448 clamped to [1, 254]; q = e4m3 RNE of
 * x / 2^(e-127). Non-finite elements become 0x7F (counters[0] += them).
 * Scales go to the raw bytes `sf` [rows, K/128] and/or to the packed
 * tensor `sf_packed` (G 1, MN = rows, sf_k = K/128; padding zeroed); at
 * least one of the two. K is a multiple of 128. */
typedef struct dsk_fp8_quantize_desc {
  size_t struct_size;
  void *stream;
  int64_t rows;                  /* 0 = no-op */
  int64_t K;                     /* >= 128, multiple of 128 */
  dsk_moe_in_dtype x_dtype;
  const void *x; int64_t x_stride; /* [rows, K], element stride >= K */
  uint8_t *q; int64_t q_stride;  /* e4m3 [rows, K], byte stride >= K */
  uint8_t *sf; int64_t sf_stride; /* optional raw bytes [rows, K/128] */
  int32_t *sf_packed;            /* optional packed words (dsk_sf_packed_words(1, rows, K/128)) */
  int64_t *counters;             /* optional: [0] += non-finite elements */
} dsk_fp8_quantize_desc;
DSK_API dsk_status dsk_fp8_quantize_1x128(dsk_ctx *ctx, const dsk_fp8_quantize_desc *desc);

/* ------------------------------------------------------- scale packing */
/* DeepGEMM pack_ue8m0_to_int [4.1]: raw bytes [rows, sf_k] -> int32 words
 * [rows, Kp] (row stride out_stride words): word p = b[4p] | b[4p+1] << 8 |
 * b[4p+2] << 16 | b[4p+3] << 24, missing groups 0x00. */
typedef struct dsk_pack_ue8m0_desc {
  size_t struct_size;
  void *stream;
  int64_t rows;                  /* 0 = no-op */
  int64_t sf_k;                  /* >= 1 */
  const uint8_t *sf; int64_t sf_stride; /* bytes, stride >= sf_k */
  int32_t *out; int64_t out_stride;     /* words, stride >= Kp */
} dsk_pack_ue8m0_desc;
DSK_API dsk_status dsk_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *desc);

/* MN-major TMA-aligned packing [4.2] of G groups of raw scales. With
 * gran_mn = 1 group g's row mn is sf + g*sf_group_stride + mn*sf_stride;
 * with gran_mn = 128 (128x128 weight blocks [4.3]) the input has
 * ceil(MN/128) rows per group and row mn takes block row mn/128
 * (broadcast). Output: dsk_sf_packed_words(G, MN, sf_k) words, every
 * padding byte written 0. */
typedef struct dsk_sf_pack_desc {
  size_t struct_size;
  void *stream;
  int64_t G;                     /* >= 1 */
  int64_t MN;                    /* rows per group of the packed tensor, >= 1 */
  int64_t sf_k;                  /* >= 1 */
  int32_t gran_mn;               /* 1 or 128 */
  const uint8_t *sf;             /* raw bytes */
  int64_t sf_stride;             /* bytes between input rows, >= sf_k */
  int64_t sf_group_stride;       /* bytes between groups, >= in_rows * sf_stride (G > 1) */
  int32_t *out;                  /* packed words */
} dsk_sf_pack_desc;
DSK_API dsk_status dsk_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *desc);

/* ---------------------------------------------------------- M alignment */
/* Kernel families of the theoretical alignment [5.2]: (max, min, step). */
typedef enum dsk_moe_align_family {
  DSK_MOE_ALIGN_DSK = 0,            /* every dsk CUDA kernel: (128, 64, 64) */
  DSK_MOE_ALIGN_DEEPGEMM_SM120 = 1, /* (128, 64, 64) */
  DSK_MOE_ALIGN_DEEPGEMM_SM100 = 2, /* (240, 32, 16) */
  DSK_MOE_ALIGN_DEEPGEMM_SM90 = 3   /* (128, 128, 1): always 128 */
} dsk_moe_align_family;

/* per = num_groups ? ceil(expected_m / num_groups) : expected_m; bm = max;
 * while (bm > min && bm - step >= per) bm -= step. -1 for an unknown
 * family or negative arguments. */
DSK_API int64_t dsk_moe_theoretical_alignment(dsk_moe_align_family family, int64_t expected_m,
                                              int64_t num_groups);

/* vLLM compute_aligned_M_and_alignment [5.3], host only:
 *   A_used = min(cap, theoretical(M*topk, E_local));
 *   counts given: M_sum = sum_e round_up(counts[e], A_used);
 *   else (graph-safe worst case): active = min(M*topk, E_local),
 *        M_sum = round_up(M*topk + active*(A_used - 1), A_used).
 * M = 0 gives M_sum 0 and the A_used of M = 0. */
typedef struct dsk_moe_align_desc {
  size_t struct_size;
  int64_t M;                     /* tokens, >= 0 */
  int64_t topk;                  /* 1..DSK_MOE_MAX_TOPK */
  int64_t E_local;               /* 1..DSK_MOE_MAX_EXPERTS */
  int64_t cap;                   /* A: 0 = 128; else >= 1 */
  dsk_moe_align_family family;
  const int64_t *counts;         /* host [E_local] rows per local expert, or NULL */
} dsk_moe_align_desc;
DSK_API dsk_status dsk_moe_aligned_m(const dsk_moe_align_desc *desc, int64_t *M_sum, int64_t *A_used);

/* ------------------------------------------------------------- routing */
typedef enum dsk_moe_score {
  DSK_MOE_SCORE_SQRT_SOFTPLUS = 1, /* DSv4: s = sqrt(softplus(logit)) */
  DSK_MOE_SCORE_SIGMOID = 2        /* GLM-5.1: s = sigmoid(logit) */
} dsk_moe_score;

typedef enum dsk_moe_router {
  DSK_MOE_ROUTER_SCORED = 1, /* ids = top-k of s + bias (bias selects only) */
  DSK_MOE_ROUTER_HASH = 2    /* ids = tid2eid[token_id] (DSv4 layers 0-2) */
} dsk_moe_router;

/* Per token [6.1, 6.3]: logits = x . Wg^T (or the given logits), s =
 * score(logits); ids as the router kind says (scored: descending s + bias,
 * equal values -> lower expert id first, a NaN ranks below everything);
 * w = s[ids], w /= max(sum w, 1e-20) (if renormalize), w *= scaling.
 * Bad data: hash tokens whose token_id is outside [0, vocab) get ids -1 and
 * weights 0, table entries outside [0, E) give that slot id -1 and weight 0
 * (counters[0] += such tokens); tokens with a non-finite logit are routed
 * by the order above (counters[1] += such tokens). */
typedef struct dsk_moe_route_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                      /* tokens, 0 = no-op */
  int64_t E;                      /* experts, 1..DSK_MOE_MAX_EXPERTS */
  int64_t topk;                   /* 1..min(E, DSK_MOE_MAX_TOPK) */
  dsk_moe_score score;
  dsk_moe_router router;
  /* logits: either `logits` fp32 [T, E] (stride logits_stride elements), or
   * x bf16 [T, H] with gate_w bf16 [E, H] (logits accumulated in fp32 or
   * better); when `logits` is set x and gate_w are ignored. */
  const float *logits; int64_t logits_stride;
  int64_t H;                      /* with x: >= 1 */
  const dsk_bf16 *x; int64_t x_stride;
  const dsk_bf16 *gate_w;         /* [E, H] contiguous */
  const float *bias;              /* scored: [E] or NULL (zero) */
  const int64_t *tid2eid;         /* hash: [vocab, topk] (checkpoint dtype I64) */
  int64_t vocab;                  /* hash: rows of tid2eid, >= 1 */
  const int32_t *token_ids;       /* hash: [T] */
  int renormalize;                /* 1 for every supported model */
  float routed_scaling_factor;    /* finite, > 0: 1.5 Flash, 2.5 Pro and GLM-5.1 */
  int32_t *ids; int64_t ids_stride; /* out [T, topk] global expert ids */
  float *weights; int64_t weights_stride; /* out [T, topk] */
  int64_t *counters;              /* optional, 2 entries */
  /* Optional scratch (added after the fields above: a caller built before
   * them, whose struct_size ends at counters, runs without it). NULL or 0
   * bytes: no workspace (correct, but on CUDA one block per token group
   * streams the whole gate_w: slow at small T). Given: at least the bytes
   * of dsk_moe_route_plan, 16-byte aligned, not overlapping x, gate_w, ids
   * or weights; its contents never affect results. */
  void *workspace; int64_t workspace_bytes;
} dsk_moe_route_desc;
/* Workspace bytes of dsk_moe_route for this T (a plan for T serves every
 * smaller T): T * E * 8 (fp64 logits [T, E]) when logits are computed from
 * x (logits NULL), else 0. The same on every backend; the CPU backends
 * ignore the workspace. info->tactic is all zero. */
DSK_API dsk_status dsk_moe_route_plan(dsk_ctx *ctx, const dsk_moe_route_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_moe_route(dsk_ctx *ctx, const dsk_moe_route_desc *desc);

/* -------------------------------------------------------------- permute */
/* m-grouped contiguous layout [5.1, 5.5]. Assignment (t, k) with global id
 * e in [expert_offset, expert_offset + E_local) goes to local expert
 * l = e - expert_offset, row start_l + rank (segments of round_up(n_l,
 * A_used) rows in expert order, rank by (t, k) ascending). Its fp8 row and
 * raw scale bytes are copied; inv_perm[t, k] = row. Every other row of A
 * (padding inside and after the segments, up to M_sum) and its scale bytes
 * are written 0; m_indices = local expert of real rows, -1 elsewhere.
 * ids == -1 and ids of other ranks (EP) give inv_perm -1 silently; ids < -1
 * or >= E give inv_perm -1 and counters[0] += 1; assignments whose row would
 * be >= M_sum give inv_perm -1 and counters[1] += 1 (M_sum too small for
 * the data: use dsk_moe_aligned_m's worst case).
 * flags DSK_MOE_PERMUTE_NO_PAD_FILL: the padding rows of A and their scale
 * bytes are left as they are (m_indices is still -1 there). Every dsk GEMM
 * is row-independent and the gather never reads padding rows [5.5], so the
 * forward gives up only the bit-exact padding; it saves writing
 * (M_sum - real rows) x (K + K/128) bytes (dsk_moe_run sets it). A caller
 * built before `flags` existed (struct_size = offsetof(flags)) is served
 * with flags 0. */
#define DSK_MOE_PERMUTE_NO_PAD_FILL 1u
typedef struct dsk_moe_permute_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                      /* tokens, 0 = no-op (nothing written) */
  int64_t topk;                   /* 1..DSK_MOE_MAX_TOPK */
  int64_t E;                      /* global experts (range check of ids) */
  int64_t E_local, expert_offset; /* this rank's experts */
  int64_t K;                      /* row width (H), multiple of 128 */
  int64_t A_used;                 /* segment alignment, >= 1 */
  int64_t M_sum;                  /* rows of A, a multiple of A_used */
  const int32_t *ids; int64_t ids_stride;   /* [T, topk] */
  const uint8_t *xq; int64_t xq_stride;     /* e4m3 [T, K], byte stride */
  const uint8_t *xsf; int64_t xsf_stride;   /* raw scales [T, K/128] */
  uint8_t *A; int64_t A_stride;             /* out e4m3 [M_sum, K] */
  uint8_t *Asf; int64_t Asf_stride;         /* out raw scales [M_sum, K/128] */
  int32_t *m_indices;                       /* out [M_sum] */
  int32_t *inv_perm; int64_t inv_perm_stride; /* out [T, topk] */
  void *workspace; int64_t workspace_bytes; /* dsk_moe_permute_plan */
  int64_t *counters;                        /* optional, 2 entries */
  uint32_t flags;                           /* DSK_MOE_PERMUTE_*, 0 = padding written 0 */
} dsk_moe_permute_desc;
DSK_API dsk_status dsk_moe_permute_plan(dsk_ctx *ctx, const dsk_moe_permute_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *desc);

/* --------------------------------------------------------- grouped GEMM */
/* moe.gemm tactic (version 1): v[0] BLOCK_M in {64, 128} dividing A_used,
 * v[1] BLOCK_N in {64, 128, 256}, v[2] split-K in {1, 2, 4} with
 * (K / split) % 128 == 0, v[3..5] 0. All zero = tuned entry else the
 * heuristic (autotune.md §1). A given tactic that is invalid for the shape
 * is DSK_STATUS_INVALID_ARG (plan and run), never run. Split-K > 1 needs
 * the workspace the plan reports: split x rows x N x 4 bytes of fp32
 * partials (rows = M_sum, or M for the dense GEMM) where the backend adds
 * partials between CTAs, 0 where it splits K inside one CTA (the CUDA
 * decode-shaped kernel, docs/moe.md); results do not depend on the split
 * beyond fp32 summation order. dsk_moe_run keeps a split that needs no
 * workspace, else runs its routed GEMMs with split 1 and caps the shared
 * expert's (docs/moe.md). */
#define DSK_MOE_GEMM_TACTIC_VERSION 1

/* D[r] = A[r] . B[e]^T over the contiguous layout [5.1, 7.1], e =
 * m_indices[b*BLOCK_M] for every row r of block b (BLOCK_M of the tactic);
 * blocks whose index is -1 are skipped (D not written); indices < -1 or
 * >= E_local: skipped and counters[0] += 1 per block. Inside a live block,
 * rows whose own m_indices entry is negative (padding) get unspecified
 * values (never read by the gather). Values: A dequantized
 * with its 1x128 scales, B with its MXFP4 per-32 or FP8 per-128 scales; the
 * CPU reference accumulates in fp64, D rounded once to bf16. */
typedef struct dsk_moe_gemm_desc {
  size_t struct_size;
  void *stream;
  int64_t M_sum;                  /* rows, 0 = no-op; multiple of A_used */
  int64_t N, K;                   /* multiples of 128 */
  int64_t E_local;                /* groups of B, 1..DSK_MOE_MAX_EXPERTS */
  int64_t A_used;                 /* the alignment M_sum was built with: a multiple of 64 */
  int64_t expected_m;             /* real rows (T*topk) for the tactic heuristic and the tuner's
                                   * bucket; 0 = A_used */
  const uint8_t *A; int64_t A_stride; /* e4m3 [M_sum, K], byte stride */
  dsk_moe_sf sfa;                 /* packed: G 1, MN M_sum, sf_k K/128 */
  const int32_t *m_indices;       /* [M_sum] */
  dsk_moe_wfmt b_fmt;
  const void *B;                  /* [E_local, N, K/2] (MXFP4) or [E_local, N, K] (FP8) bytes, contiguous */
  dsk_moe_sf sfb;                 /* packed: G E_local, MN N, sf_k K/32 (MXFP4) or K/128 (FP8) */
  dsk_bf16 *D; int64_t D_stride;  /* out bf16 [M_sum, N], element stride */
  dsk_tactic tactic;              /* all zero = tuned / heuristic */
  void *workspace; int64_t workspace_bytes; /* dsk_moe_gemm_plan */
  int64_t *counters;              /* optional, 1 entry */
  int64_t max_expert_rows;        /* optional speed hint: no m-block holds more live rows than
                                   * this (0 = unknown); the CUDA decode-shaped kernel stages
                                   * that many rows per pass (fewer shared bytes, a deeper weight
                                   * ring). A block with more rows is still computed exactly, in
                                   * more passes. dsk_moe_run sets T. A caller built before this
                                   * field (struct_size = offsetof(max_expert_rows)) gets 0 */
} dsk_moe_gemm_desc;
DSK_API dsk_status dsk_moe_gemm_plan(dsk_ctx *ctx, const dsk_moe_gemm_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *desc);

/* Dense FP8 x FP8 GEMM with 1x128 activation and 128x128 weight scales
 * (shared experts, dense MLPs): D = A . B^T. Tactic (dense_fp8.gemm,
 * version 1): v[0] BLOCK_M in {16, 32, 64, 128}, v[1], v[2] as moe.gemm. */
#define DSK_DENSE_GEMM_TACTIC_VERSION 1
typedef struct dsk_dense_gemm_desc {
  size_t struct_size;
  void *stream;
  int64_t M;                      /* rows, 0 = no-op */
  int64_t N, K;                   /* multiples of 128 */
  const uint8_t *A; int64_t A_stride; /* e4m3 [M, K] */
  dsk_moe_sf sfa;                 /* packed: G 1, MN M, sf_k K/128 */
  const uint8_t *B;               /* e4m3 [N, K] contiguous */
  dsk_moe_sf sfb;                 /* packed: G 1, MN N, sf_k K/128 */
  dsk_bf16 *D; int64_t D_stride;  /* out bf16 [M, N] */
  dsk_tactic tactic;
  void *workspace; int64_t workspace_bytes;
} dsk_dense_gemm_desc;
DSK_API dsk_status dsk_dense_fp8_gemm_plan(dsk_ctx *ctx, const dsk_dense_gemm_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_dense_fp8_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *desc);

/* ------------------------------------------------------ SwiGLU + quant */
/* Per row r [6.2 step 5]: gate = D1[r, 0:I], up = D1[r, I:2I] (bf16 ->
 * fp32); with limit > 0: g = min(gate, limit), u = clamp(up, -limit,
 * limit); h = silu(g) * u; then the 1x128 quantizer (as
 * dsk_fp8_quantize_1x128) writes q [rows, I] and the scales. With m_indices
 * given, rows whose index is < 0 are written as zeros with scale bytes 0
 * (padding, as dsk_moe_permute writes it), or, with flags
 * DSK_SWIGLU_SKIP_PADDING (m_indices required), left as they are, their
 * packed scale words included (dsk_moe_run sets it: the FC2 GEMM is
 * row-independent). A caller built before `flags` existed (struct_size =
 * offsetof(flags)) is served with flags 0. */
#define DSK_SWIGLU_SKIP_PADDING 1u
typedef struct dsk_swiglu_quant_desc {
  size_t struct_size;
  void *stream;
  int64_t rows;                   /* 0 = no-op */
  int64_t I;                      /* multiple of 128 */
  const dsk_bf16 *D1; int64_t D1_stride; /* [rows, 2I] */
  const int32_t *m_indices;       /* optional [rows] */
  float limit;                    /* swiglu_limit: 10 for DSv4, 0 = no clamp; finite, >= 0 */
  uint8_t *q; int64_t q_stride;   /* out e4m3 [rows, I] */
  uint8_t *sf; int64_t sf_stride; /* optional raw bytes [rows, I/128] */
  int32_t *sf_packed;             /* optional packed (G 1, MN rows, sf_k I/128); one of the two */
  int64_t *counters;              /* optional: [0] += non-finite h elements (quantized to 0x7F) */
  uint32_t flags;                 /* DSK_SWIGLU_*, 0 = padding rows written 0 */
} dsk_swiglu_quant_desc;
DSK_API dsk_status dsk_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *desc);

/* --------------------------------------------------------------- gather */
/* y[t] = bf16(shared[t] + sum_{k ascending, inv_perm[t,k] >= 0}
 * w[t,k] * D2[inv_perm[t,k]]) [5.5 step 4]; the CPU reference accumulates
 * in fp64. inv_perm >= M_sum: skipped, counters[0] += 1. */
typedef struct dsk_moe_gather_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                      /* 0 = no-op */
  int64_t topk;
  int64_t N;                      /* row width (H), >= 1 */
  int64_t M_sum;                  /* rows of D2 */
  const dsk_bf16 *D2; int64_t D2_stride;
  const int32_t *inv_perm; int64_t inv_perm_stride;
  const float *weights; int64_t weights_stride;
  const dsk_bf16 *shared; int64_t shared_stride; /* optional [T, N] */
  dsk_bf16 *y; int64_t y_stride;  /* out [T, N]; must not overlap the inputs */
  int64_t *counters;              /* optional, 1 entry */
} dsk_moe_gather_desc;
DSK_API dsk_status dsk_moe_gather(dsk_ctx *ctx, const dsk_moe_gather_desc *desc);

/* ------------------------------------------------- weight preparation */
/* Checkpoint tensor formats [3.1, 3.3]. */
typedef enum dsk_moe_src_fmt {
  DSK_MOE_SRC_MXFP4 = 1,    /* I8 packed e2m1 [N, K/2] + F8_E8M0 [N, K/32] (DSv4 routed) */
  DSK_MOE_SRC_FP8_E8M0 = 2, /* F8_E4M3 [N, K] + F8_E8M0 [ceil(N/128), K/128] (DSv4 shared) */
  DSK_MOE_SRC_FP8_F32 = 3   /* F8_E4M3 [N, K] + F32 [ceil(N/128), K/128] (GLM-5.1-FP8): re-quantized */
} dsk_moe_src_fmt;

/* Byte sizes of the four prepared tensors of `E` experts with hidden H and
 * per-rank intermediate I_r: [0] W13, [1] packed SF13 (bytes), [2] W2,
 * [3] packed SF2. -1 entries for invalid arguments. */
DSK_API void dsk_moe_weights_bytes(dsk_moe_wfmt fmt, int64_t E, int64_t H, int64_t I_r, int64_t out[4]);

/* Host-side preparation of one layer's experts for one rank [3.2]: W13 =
 * [w1 rows; w3 rows] (gate then up) of rows [r*I_r, (r+1)*I_r), W2 = the
 * matching columns of w2, I_r = I / tp_size; scales packed MN-major
 * (MXFP4: per 32; FP8: 128x128 blocks broadcast to rows). FP8_F32 input is
 * re-quantized to UE8M0 (each 128x128 block dequantized, scale = UE8M0 ceil
 * of max(amax, 1e-4)/448, e4m3 RNE) and logged once: lossy.
 * Validates the input: a 0xFF scale byte, an e4m3 NaN code (0x7F / 0xFF) or
 * a non-finite or non-positive fp32 scale is DSK_STATUS_INVALID_DATA naming
 * tensor, expert, row and value; nothing else is promised about the
 * outputs then. All pointers are host pointers for every context kind
 * (upload the outputs with dsk_mem_upload); ctx is used for logging. */
typedef struct dsk_moe_prepare_desc {
  size_t struct_size;
  dsk_moe_src_fmt src;
  int64_t E_local;                /* experts given, 1..DSK_MOE_MAX_EXPERTS */
  int64_t expert_offset;          /* global id of expert 0 (messages only) */
  int64_t H, I;                   /* checkpoint shapes (full I), multiples of 128 */
  int64_t tp_size, tp_rank;       /* I / tp_size must be a multiple of 128 */
  /* per expert e (arrays of E_local host pointers): w1 / w3 [I, H(/2)],
   * w2 [H, I(/2)], and their scale tensors, row-major as stored. */
  const void *const *w1; const void *const *s1;
  const void *const *w3; const void *const *s3;
  const void *const *w2; const void *const *s2;
  /* outputs (host), sizes from dsk_moe_weights_bytes */
  void *w13; int64_t w13_bytes;
  int32_t *sf13; int64_t sf13_bytes;
  void *w2_out; int64_t w2_bytes;
  int32_t *sf2; int64_t sf2_bytes;
} dsk_moe_prepare_desc;
DSK_API dsk_status dsk_moe_prepare_weights(dsk_ctx *ctx, const dsk_moe_prepare_desc *desc);

/* --------------------------------------------------------- MoE forward */
/* Prepared weights of one layer (outputs of dsk_moe_prepare_weights, in the
 * context's memory): W13 [E, 2I, H/2 or H], SF13 packed (E, 2I, H/32 or
 * H/128), W2 [E, H, I/2 or I], SF2 packed (E, H, I/32 or I/128). */
typedef struct dsk_moe_weights {
  dsk_moe_wfmt fmt;
  int64_t E;                      /* groups: E_local (routed) or 1 (shared) */
  int64_t I;                      /* intermediate per rank (I_r) */
  const void *w13;
  const int32_t *sf13;
  const void *w2;
  const int32_t *sf2;
} dsk_moe_weights;

typedef enum dsk_moe_model {
  DSK_MOE_MODEL_DSV4_FLASH = 1, /* H 4096, I 2048, E 256, top-6, sqrt-softplus, scale 1.5, limit 10, MXFP4 */
  DSK_MOE_MODEL_DSV4_PRO = 2,   /* H 7168, I 3072, E 384, top-6, scale 2.5 */
  DSK_MOE_MODEL_GLM51 = 3       /* H 6144, I 2048, E 256, top-8, sigmoid, scale 2.5, no limit, FP8 */
} dsk_moe_model;

/* Counters of dsk_moe_run (each op's own counters, at these indices). */
#define DSK_MOE_CNT_ROUTE_BAD_TOKEN 0 /* hash tokens with a bad token id or table entry */
#define DSK_MOE_CNT_ROUTE_NONFINITE 1 /* tokens with a non-finite router logit */
#define DSK_MOE_CNT_X_NONFINITE 2     /* non-finite x elements (quantized to 0x7F) */
#define DSK_MOE_CNT_BAD_EXPERT 3      /* given ids < -1 or >= E (skipped) */
#define DSK_MOE_CNT_DROPPED 4         /* assignments beyond M_sum (cannot happen in dsk_moe_run) */
#define DSK_MOE_CNT_GEMM_BAD_INDEX 5  /* GEMM blocks with a bad m_indices value */
#define DSK_MOE_CNT_H_NONFINITE 6     /* non-finite SwiGLU outputs, routed and shared */
#define DSK_MOE_CNT_GATHER_BAD_ROW 7  /* inv_perm entries >= M_sum */
#define DSK_MOE_NUM_COUNTERS 8

/* One MoE layer [6.2, 6.3]: route -> quantize x (1x128) -> aligned M (worst
 * case for T, dsk family, cap align_cap) -> permute -> pack SFA -> FC1 ->
 * SwiGLU (limit) + re-quantize -> FC2 -> shared expert (FP8 dense, same
 * quantized x, shared_limit) -> gather (+ shared) -> y bf16 [T, H].
 * The routing weights are applied in the gather. With ids_in set the
 * router is skipped (ids_in/weights_in are used as given; bad ids are
 * counted). EP: ids outside [expert_offset, expert_offset + E_local) add
 * nothing (the caller sums the ranks); TP: I is per rank (the caller
 * all-reduces y). The workspace is sized by dsk_moe_plan for T_max; a run
 * with T <= T_max needs no more. */
typedef struct dsk_moe_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                      /* tokens, 0 = no-op */
  int64_t T_max;                  /* plan: largest T to serve; 0 = T */
  int64_t H;                      /* hidden, multiple of 128 */
  int64_t E;                      /* global routed experts, 1..DSK_MOE_MAX_EXPERTS */
  int64_t E_local, expert_offset; /* EP slice (E_local = E, offset 0 without EP) */
  int64_t topk;                   /* 1..min(E, DSK_MOE_MAX_TOPK) */
  /* router (ignored when ids_in is set) */
  dsk_moe_router router;
  dsk_moe_score score;
  const dsk_bf16 *gate_w;         /* [E, H] */
  const float *gate_bias;         /* [E] or NULL */
  const int64_t *tid2eid; int64_t vocab; /* hash */
  const int32_t *token_ids;       /* hash: [T] */
  float routed_scaling_factor;
  const int32_t *ids_in; const float *weights_in; /* optional [T, topk] each, contiguous */
  int32_t *ids_out; float *weights_out;           /* optional [T, topk] each, contiguous */
  /* activations */
  const dsk_bf16 *x; int64_t x_stride;            /* [T, H] */
  dsk_bf16 *y; int64_t y_stride;                  /* out [T, H] */
  /* experts */
  dsk_moe_weights routed;         /* E = E_local; I multiple of 128 */
  float swiglu_limit;             /* routed: 10 DSv4, 0 GLM-5.1 */
  dsk_moe_weights shared;         /* fmt DSK_MOE_W_FP8, E 1; w13 NULL = no shared expert */
  float shared_limit;             /* open item: dsk default = swiglu_limit (DSv4 10) */
  int64_t align_cap;              /* A of [5.3]: 0 = 128 */
  dsk_tactic fc1_tactic, fc2_tactic; /* moe.gemm tactics; all zero = tuned / heuristic */
  void *workspace; int64_t workspace_bytes;
  int64_t *counters;              /* optional, DSK_MOE_NUM_COUNTERS entries */
  /* Optional second stream of the same device (CUDA; ignored by the CPU
   * backends and when there is no shared expert): the shared expert runs
   * there, beside the routed path, and `stream` waits for it before the
   * gather. At return all work of the call is ordered before anything
   * enqueued later on `stream` (the call forks and joins aux_stream: its
   * later work also follows this call's shared expert). The caller must
   * not use aux_stream concurrently for work that touches this call's
   * workspace. NULL = everything on `stream`. Results are identical either
   * way. A caller built before this field (struct_size =
   * offsetof(aux_stream)) is served without it. */
  void *aux_stream;
  /* DSK_MOE_RUN_* bits; 0 = the default. A caller built before this field
   * (struct_size = offsetof(flags)) gets 0. */
  uint32_t flags;
} dsk_moe_desc;

/* dsk_moe_desc.flags: run steps 2-4 (quantize x, permute, pack SFA) as
 * their separate ops even where the backend fuses them for decode-sized
 * calls (CUDA, T * topk <= 256). The result is bit-identical either way;
 * for A/B timing and debugging. */
#define DSK_MOE_RUN_UNFUSED 1u

/* Zero the descriptor, set struct_size and the model's constants (H, E,
 * E_local = E, topk, router SCORED, score, scaling, limits, routed.fmt,
 * routed.E, routed.I and the shared expert's fmt/E/I at TP 1). */
DSK_API void dsk_moe_desc_init(dsk_moe_desc *desc, dsk_moe_model model);
/* Workspace bytes for T_max (or T) and the FC1 tactic the run would use. */
DSK_API dsk_status dsk_moe_plan(dsk_ctx *ctx, const dsk_moe_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_moe_run(dsk_ctx *ctx, const dsk_moe_desc *desc);

/* ========================================================= autotune */
/* Autotune, the persistent tactic cache and model warmup (spec/autotune.md;
 * docs/autotune.md). An op whose tactic is all zero (sparse decode) or whose
 * fixed_splits is 0 (mHC prenorm) looks up the context's tuned entry for its
 * key (exact fields + token bucket); no usable entry -> the op's
 * deterministic heuristic, counted as a miss (or as invalid when the entry
 * does not fit the real shape). Run calls never time anything; only
 * dsk_warmup_run and `dsk tune` do. Tuned entries live in the context and in
 * a cache file shared by processes with the same fingerprint. */
/* ------------------------------------------------------ build identity */
/* Kernel build id of an op (A14): 16 hex digits, a hash of that op's kernel
 * sources, compiler ids and versions, CUDA architectures and flags, made at
 * build time. Entries of the cache carry it; an entry with another id is
 * stale. NULL for ops that are not tunable (today: DSK_OP_SPARSE_MLA_DECODE,
 * DSK_OP_MHC_PRENORM, DSK_OP_MOE_GEMM and DSK_OP_MOE_DENSE_GEMM are). */
DSK_API const char *dsk_kernel_build_id(dsk_op op);

/* ------------------------------------------------------------- counters */
typedef enum dsk_autotune_cache_mode {
  DSK_AUTOTUNE_CACHE_RW = 0,  /* load at first use, save after warmup */
  DSK_AUTOTUNE_CACHE_RO = 1,  /* load, never write */
  DSK_AUTOTUNE_CACHE_OFF = 2  /* in memory only */
} dsk_autotune_cache_mode;

typedef struct dsk_tune_stats {
  size_t struct_size;
  /* Lookups of run calls (plan calls do not count). */
  int64_t hits;     /* a usable tuned entry was used */
  int64_t misses;   /* no entry for the key: heuristic */
  int64_t invalid;  /* an entry existed but did not fit the shape (A5), or was invalid in a file: heuristic */
  int64_t stale;    /* file entries skipped because their kernel build id or tactic version differs */
  /* The context's entries. */
  int64_t entries;  /* tuned entries held now */
  int64_t loaded;   /* of them, read from the cache file or imported */
  int64_t tuned;    /* keys timed by this context */
  int64_t miss_keys;/* distinct missed keys (dsk_autotune_misses lists them) */
  int cache_mode;   /* dsk_autotune_cache_mode in force (OFF also when no usable location) */
  char cache_path[1024]; /* the cache file, "" when in memory only */
  char fingerprint[17];  /* 16 hex digits of FNV-1a-64 over the fingerprint string */
} dsk_tune_stats;
DSK_API dsk_status dsk_autotune_stats(dsk_ctx *ctx, dsk_tune_stats *stats);
/* Zeroes hits, misses, invalid and the miss list (entries are kept). */
DSK_API dsk_status dsk_autotune_reset_stats(dsk_ctx *ctx);

/* One missed key: the key string (autotune.md A15, token count mapped to
 * the default buckets of A2), how often it missed, and the heuristic
 * tactic used instead. Called in first-miss order. */
typedef struct dsk_autotune_miss {
  size_t struct_size;
  const char *key;
  dsk_op op;
  int64_t T;        /* the token bucket of the key */
  int64_t count;
  dsk_tactic heuristic;
} dsk_autotune_miss;
typedef void (*dsk_autotune_miss_fn)(const dsk_autotune_miss *miss, void *user);
DSK_API dsk_status dsk_autotune_misses(dsk_ctx *ctx, dsk_autotune_miss_fn fn, void *user);

/* ---------------------------------------------------------------- cache */
/* The cache file (A13-A18): <dir>/autotune/<fingerprint>.json, dir =
 * $DSK_CACHE_DIR, else $XDG_CACHE_HOME/dsk, else $HOME/.cache/dsk (absolute
 * paths only). Writes the path ("" when the context keeps its entries in
 * memory only). */
DSK_API dsk_status dsk_autotune_cache_path(dsk_ctx *ctx, char *path, size_t path_len);
/* Merges the context's entries into the cache file now (A18: lock, re-read,
 * disk entry wins unless DSK_AUTOTUNE=force, atomic replace). OK without
 * writing when the cache is ro/off; a lock timeout keeps the entries in
 * memory, warns and returns OK. dsk_warmup_run calls it. */
DSK_API dsk_status dsk_autotune_save(dsk_ctx *ctx);

/* The context's entries as one JSON document in the cache-file format.
 * buf NULL: *len = bytes needed (with the terminating NUL), OK. Otherwise
 * *len is the buffer size; too small -> DSK_STATUS_INVALID_ARG and *len =
 * bytes needed. */
DSK_API dsk_status dsk_autotune_export(dsk_ctx *ctx, char *buf, size_t *len);
/* Adds the entries of a document made by dsk_autotune_export (or a cache
 * file) to the context, with the validation of a load (A16): a document of
 * another fingerprint or format is DSK_STATUS_PARSE naming the field; stale
 * and invalid entries are skipped and counted. Imported entries replace the
 * context's entries of the same key and are written by the next save. */
DSK_API dsk_status dsk_autotune_import(dsk_ctx *ctx, const char *buf, size_t len);

/* Cache files in <dir>/autotune (`dsk tune --list`). */
typedef struct dsk_autotune_file {
  size_t struct_size;
  const char *path;
  int64_t bytes;
  int current;      /* 1: this context's fingerprint */
  int valid;        /* parsed and of the cache format */
  int64_t entries;  /* entries in the file (valid files) */
  int64_t stale;    /* of them, with another kernel build id (current file only) */
  const char *device; /* meta.device ("" if unknown) */
  const char *version;/* meta.version ("" if unknown) */
} dsk_autotune_file;
typedef void (*dsk_autotune_file_fn)(const dsk_autotune_file *file, void *user);
DSK_API dsk_status dsk_autotune_list_files(dsk_ctx *ctx, dsk_autotune_file_fn fn, void *user);
/* `dsk tune --gc`: deletes the cache files of other fingerprints (and
 * *.bad files) and drops stale entries from the current file (under its
 * lock). Either count pointer may be NULL. */
DSK_API dsk_status dsk_autotune_gc(dsk_ctx *ctx, int64_t *files_removed, int64_t *entries_removed);

/* --------------------------------------------------------------- models */
#define DSK_MODEL_MAX_LAYERS 256

/* What warmup needs of a model (spec/models.md). Filled by
 * dsk_model_desc_builtin or dsk_model_desc_from_config. */
typedef struct dsk_model_desc {
  size_t struct_size;
  char name[64];          /* "deepseek-v4-flash", or the config's model_type */
  char model_type[32];    /* deepseek_v4, glm_moe_dsa, deepseek_v32 */
  dsk_kv_format kv_format;/* B584 (DeepSeek-V4) or A656 (DSA: GLM-5.1, DeepSeek-V3.2) */
  int64_t hidden_size;
  int64_t num_heads;      /* attention heads before TP */
  int64_t num_layers;     /* main layers */
  int64_t num_mtp_layers; /* num_nextn_predict_layers */
  int64_t sliding_window; /* DeepSeek-V4: 128; 0 for DSA models */
  int64_t index_topk;     /* DeepSeek-V4: C4A top-k (512 / 1024); DSA: top-k (2048) */
  int64_t max_positions;  /* max_position_embeddings */
  int32_t compress_ratio[DSK_MODEL_MAX_LAYERS]; /* DeepSeek-V4, per main layer: 0, 4 or 128 */
  int64_t hc_mult;        /* mHC streams (DeepSeek-V4: 4); 0 = no mHC */
  /* MoE geometry, for the MoE warmup hook (no MoE op is tunable yet) */
  int64_t n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts;
  int64_t first_k_dense, dense_intermediate_size;
} dsk_model_desc;

/* "deepseek-v4-flash", "deepseek-v4-pro", "glm-5.1", "deepseek-v3.2";
 * NULL past the end. */
DSK_API const char *dsk_model_builtin_name(int index);
DSK_API dsk_status dsk_model_desc_builtin(const char *name, dsk_model_desc *model);
/* Parses a checkpoint's config.json: DSK_STATUS_IO if unreadable,
 * DSK_STATUS_PARSE naming the field if it is not a supported model. */
DSK_API dsk_status dsk_model_desc_from_config(const char *path, dsk_model_desc *model);

/* -------------------------------------------------------------- serving */
/* The envelope an engine serves (A20). Zero / NULL fields take the default. */
typedef struct dsk_serving_desc {
  size_t struct_size;
  int tp;                       /* tensor-parallel size, divides the heads; 0 = 1 */
  int ep;                       /* expert parallel on: MoE keys use E / tp local experts */
  const int64_t *capture_sizes; /* CUDA-graph capture sizes (ascending not required) */
  int num_capture_sizes;        /* 0 = default decode buckets {1,2,4,8,16,24,...,64} (batch sizes) */
  int capture_sizes_are_batches;/* 1: capture_sizes count requests: T = b*(1+draft_tokens) (A3) */
  int64_t max_tokens;           /* max batched tokens per step; 0 = 8192 */
  int64_t max_context;          /* max tokens of one request; 0 = the model's max_positions */
  int draft_tokens;             /* speculative tokens k per request (A3) */
  const int64_t *swa_widths;    /* DeepSeek-V4 segment-0 widths; NULL = {the model's window (128)} */
  int num_swa_widths;
  int64_t page_size;            /* tokens per page of the SWA / Format A caches; 0 = 64 */
  int64_t c4a_page_size;        /* entries per page of the C4A cache; 0 = 64 */
  int64_t c128a_page_size;      /* entries per page of the C128A cache; 0 = 2 */
  dsk_precision precision;      /* sparse-decode precision served (a key field, never tuned) */
} dsk_serving_desc;
DSK_API void dsk_serving_desc_init(dsk_serving_desc *serving);

/* --------------------------------------------------------------- warmup */
typedef struct dsk_warmup_list dsk_warmup_list; /* opaque */

/* One (op, key) of a list. */
typedef struct dsk_warmup_item {
  size_t struct_size;
  dsk_op op;
  const char *key;     /* the entry key string (A15) */
  const char *label;   /* e.g. "C128A w1=1024" */
  int64_t T;           /* the token bucket */
} dsk_warmup_item;

/* Every (op, key) the model can emit under the envelope, deterministic
 * order, no duplicates: sparse_mla_decode for each layer kind (DeepSeek-V4:
 * SWA-only, C4A, C128A at every width bucket up to the max context; DSA:
 * top-k) and mhc_prenorm (DeepSeek-V4), each at every token bucket. The
 * list belongs to the caller (dsk_warmup_list_free). */
DSK_API dsk_status dsk_warmup_enumerate(dsk_ctx *ctx, const dsk_model_desc *model, const dsk_serving_desc *serving,
                                        dsk_warmup_list **list);
DSK_API int64_t dsk_warmup_list_size(const dsk_warmup_list *list);
DSK_API dsk_status dsk_warmup_list_item(const dsk_warmup_list *list, int64_t index, dsk_warmup_item *item);
DSK_API void dsk_warmup_list_free(dsk_warmup_list *list);

#define DSK_WARMUP_NO_TUNE 1u /* only pre-run each key once (DSK_AUTOTUNE=0 does the same) */
#define DSK_WARMUP_FORCE 2u   /* re-time keys that already have an entry (as DSK_AUTOTUNE=force) */
#define DSK_WARMUP_NO_SAVE 4u /* keep new entries in memory; do not write the cache file */

typedef enum dsk_warmup_action {
  DSK_WARMUP_TUNED = 1,   /* timed now; us_best / us_heuristic are set */
  DSK_WARMUP_CACHED = 2,  /* had an entry; pre-run once */
  DSK_WARMUP_PRERUN = 3,  /* not tuned (no-tune mode); pre-run once with the heuristic */
  DSK_WARMUP_SKIPPED = 4  /* not served here or over DSK_AUTOTUNE_MAX_MB; `reason` says why */
} dsk_warmup_action;

typedef struct dsk_warmup_progress {
  size_t struct_size;
  int64_t index, total;   /* this item, of total */
  const dsk_warmup_item *item;
  int action;             /* dsk_warmup_action */
  dsk_tactic tactic;      /* the tactic the key now resolves to */
  int num_tactics;        /* timed (TUNED) */
  double us_best;         /* median of the chosen tactic (TUNED) */
  double us_heuristic;    /* median of the heuristic's tactic (TUNED) */
  double elapsed_s;       /* since dsk_warmup_run started */
  const char *reason;     /* SKIPPED: why */
} dsk_warmup_progress;
typedef void (*dsk_warmup_progress_fn)(const dsk_warmup_progress *progress, void *user);

/* Tunes the keys of the list that have no entry (DSK_AUTOTUNE=1), all of
 * them (force), or none (DSK_AUTOTUNE=0 or DSK_WARMUP_NO_TUNE: each key is
 * run once), then saves the cache (unless DSK_WARMUP_NO_SAVE or a ro/off
 * cache). Synthetic inputs, never the caller's buffers; scratch within
 * DSK_AUTOTUNE_MAX_MB. progress may be NULL. An error of the device stops
 * the run and is returned; entries tuned so far are kept. */
DSK_API dsk_status dsk_warmup_run(dsk_ctx *ctx, const dsk_warmup_list *list, unsigned flags,
                                  dsk_warmup_progress_fn progress, void *user);

/* ------------------------------------------------------------- timing */
/* Times a callable on the context's device: `warmup` untimed calls, then
 * `reps` samples, each one call between two device events (CUDA) or two
 * monotonic clock reads after the call returns (CPU). With flush_l2 set, a
 * scratch buffer of 2 x L2 is written before each sample, outside the
 * timed region. Used by `dsk bench` and the tuner.
 *
 * `repeat` (added at the end; a struct_size that ends before it reads as 0):
 * the number of times one call of fn performs its unit of work back to back
 * (for example the same ops on `repeat` distinct input sets). 0 and 1 mean
 * once. Every sample (and min / max / median) is divided by it, and on CUDA
 * the spin kernel that covers the host's enqueue time grows with it, so the
 * result is the unit's time inside a stream of such units, without the
 * fixed cost of the two events around a lone call. 0..10000. */
typedef dsk_status (*dsk_bench_fn)(dsk_ctx *ctx, void *user);

typedef struct dsk_bench_opts {
  size_t struct_size;
  void *stream;   /* the stream fn launches on (NULL = the context's default) */
  int warmup;     /* >= 0 */
  int reps;       /* 1 .. 100000 */
  int flush_l2;   /* 1 = cold L2 before each sample */
  int repeat;     /* units of work per call of fn (0 = 1); see above */
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
