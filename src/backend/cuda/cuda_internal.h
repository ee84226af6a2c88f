/* cuda_internal.h - declarations shared by the CUDA backend's files. The
 * entry points are extern "C" so the backend tables (cuda_tables.c, plain C)
 * can point at them. No CUDA header here: this file is included from C. */
#ifndef DSK_CUDA_INTERNAL_H
#define DSK_CUDA_INTERNAL_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SM120's opt-in shared memory per block; every kernel configuration of the
 * shared (sm_90 + sm_120) kernels must fit it (tests/test_cuda_smem.c). */
#define DSK_SM120_SMEM_LIMIT 101376
/* SM120's shared memory per SM (compute capability 12.x: 100 KB) */
#define DSK_SM120_SMEM_PER_SM 102400

/* Per-context state of the CUDA backend. */
typedef struct dsk_cuda_state {
  int device;
  int sm120_table;        /* 1 = running the cuda-sm120 table (native or DSK_TEST_AS_SM120) */
  int64_t smem_optin;     /* per-block opt-in limit after the SM120 cap */
  int64_t smem_per_sm;    /* shared memory per SM (SM120 table: at most SM120's 100 KB) */
  int mla_ctas_per_sm[3][3]; /* decode kernel residency [16 / 32 / 8 heads per CTA][dsk_kv_format] */
  int mla_ready;          /* shared-memory attributes set for the decode kernels */
} dsk_cuda_state;

/* cuda_device.cu */
int dsk__cuda_probe_sm90(int device, const dsk_env *env, char *reason, size_t len);
int dsk__cuda_probe_sm120(int device, const dsk_env *env, char *reason, size_t len);
dsk_status dsk__cuda_init_sm90(dsk_ctx *ctx, int device);
dsk_status dsk__cuda_init_sm120(dsk_ctx *ctx, int device);
void dsk__cuda_fini(dsk_ctx *ctx);
dsk_status dsk__cuda_mem_alloc(dsk_ctx *ctx, void **ptr, size_t bytes);
dsk_status dsk__cuda_mem_free(dsk_ctx *ctx, void *ptr);
dsk_status dsk__cuda_mem_upload(dsk_ctx *ctx, void *dst, const void *src, size_t bytes);
dsk_status dsk__cuda_mem_download(dsk_ctx *ctx, void *dst, const void *src, size_t bytes);
dsk_status dsk__cuda_mem_set(dsk_ctx *ctx, void *dst, int byte, size_t bytes);
dsk_status dsk__cuda_synchronize(dsk_ctx *ctx, void *stream);
/* cudaStreamIsCapturing on the stream (NULL = the context's): 1 when
 * capturing or when the status cannot be read, else 0 (autotune.md A10). */
int dsk__cuda_stream_capturing(dsk_ctx *ctx, void *stream);
/* Work enqueued later on waiter runs after all work enqueued so far on
 * signaler (NULL = the context's stream): an event recorded on signaler
 * and waited on by waiter, created and destroyed per call (thread-safe,
 * capture-safe). */
dsk_status dsk__cuda_stream_join(dsk_ctx *ctx, void *waiter, void *signaler);
dsk_status dsk__cuda_stream_create(dsk_ctx *ctx, void **stream);
dsk_status dsk__cuda_stream_destroy(dsk_ctx *ctx, void *stream);

/* cuda_bench.cu */
dsk_status dsk__cuda_bench_samples(dsk_ctx *ctx, dsk_bench_fn fn, void *user, const dsk_bench_opts *o,
                                   double *samples_us);
dsk_status dsk__cuda_bench_copy(dsk_ctx *ctx, void *dst, const void *src, size_t bytes, double *us);

/* kv_cache.cu */
dsk_status dsk__cuda_kv_write(dsk_ctx *ctx, const dsk_kv_write_desc *d);
dsk_status dsk__cuda_kv_read(dsk_ctx *ctx, const dsk_kv_read_desc *d);
/* slot_list.cu */
dsk_status dsk__cuda_slot_list_build(dsk_ctx *ctx, const dsk_slot_list_desc *d);
/* sparse_mla_decode.cu */
int64_t dsk__cuda_sparse_mla_workspace(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t);
dsk_status dsk__cuda_sparse_mla_decode(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t);
int dsk__cuda_sparse_mla_ctas_per_sm(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, int heads_per_cta);
/* Once per context (after cudaSetDevice): raise the decode kernels'
 * shared-memory limit and record their residency, so plan and run do no
 * driver calls beyond the launches. */
dsk_status dsk__cuda_sparse_mla_setup(dsk_cuda_state *st);
/* Shared memory bytes of one decode CTA for a format and heads per CTA (16
 * or 32; host-computable, from the kernel's own constants; 0 for an unknown
 * format or head count). */
int64_t dsk__cuda_sparse_mla_smem_bytes(dsk_kv_format f, int heads_per_cta);
/* the FAST form of the 32-head kernel (cuda-sm120) */
int64_t dsk__cuda_sparse_mla_fast_smem_bytes(dsk_kv_format f);
/* mhc.cu (the same kernels for cuda-sm90 and cuda-sm120) */
dsk_status dsk__cuda_mhc_prenorm(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d, const dsk_tactic *t);
dsk_status dsk__cuda_mhc_pre(dsk_ctx *ctx, const dsk_mhc_pre_desc *d, const dsk_tactic *t);
dsk_status dsk__cuda_mhc_post(dsk_ctx *ctx, const dsk_mhc_post_desc *d);
dsk_status dsk__cuda_mhc_head(dsk_ctx *ctx, const dsk_mhc_head_desc *d, const dsk_tactic *t);
dsk_status dsk__cuda_mhc_post_prenorm(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *d, const dsk_tactic *t);
/* Shared memory bytes of the largest mHC kernel configuration
 * (host-computable; for the SM120 budget test). */
int64_t dsk__cuda_mhc_smem_bytes(void);
/* indexer_logits.cu */
dsk_status dsk__cuda_indexer_logits(dsk_ctx *ctx, const dsk_indexer_logits_desc *d, int64_t skip_le);
/* Shared memory bytes of one logits CTA for n_heads (the kernel's own
 * layout; <= DSK_SM120_SMEM_LIMIT for every n_heads in 1..128). */
int64_t dsk__cuda_indexer_logits_smem_bytes(int64_t n_heads);
/* indexer_topk.cu */
int64_t dsk__cuda_topk_workspace(const dsk_ctx *ctx, const dsk__topk_args *a);
dsk_status dsk__cuda_topk(dsk_ctx *ctx, const dsk__topk_args *a);
/* moe_ops.cu (and moe_route.cu for the router): the MoE ops other than the
 * GEMMs (same kernels for both tables) */
dsk_status dsk__cuda_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *d);
dsk_status dsk__cuda_fp8_quantize_1x128(dsk_ctx *ctx, const dsk_fp8_quantize_desc *d);
dsk_status dsk__cuda_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d);
dsk_status dsk__cuda_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *d);
dsk_status dsk__cuda_moe_route(dsk_ctx *ctx, const dsk_moe_route_desc *d);
dsk_status dsk__cuda_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *d);
dsk_status dsk__cuda_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *d);
dsk_status dsk__cuda_moe_prologue(dsk_ctx *ctx, const dsk__moe_prologue_args *a, int *served);
dsk_status dsk__cuda_moe_gather(dsk_ctx *ctx, const dsk_moe_gather_desc *d);
/* moe_gemm.cu: the grouped GEMM (FP8 x MXFP4, FP8 x FP8 128x128 blocks) and
 * the dense FP8 GEMM; e4m3 m16n8k32 MMAs on sm_120, f16 MMAs on sm_90 */
dsk_status dsk__cuda_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *d, const dsk_tactic *t);
dsk_status dsk__cuda_dense_fp8_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *d, const dsk_tactic *t);
int64_t dsk__cuda_moe_gemm_workspace(const dsk_ctx *ctx, int grouped, int fmt, int64_t rows, int64_t N, int64_t K,
                                     const dsk_tactic *t);

#ifdef __cplusplus
}
#endif
#endif
