/* backend.h - a backend is a table of function pointers (one slot per op).
 * cpu-ref fills every slot with the reference; other backends fill the slots
 * they serve. A NULL slot means "not served": the ops layer reports it.
 * Descriptors reach a backend already validated by src/ops/. */
#ifndef DSK_BACKEND_H
#define DSK_BACKEND_H

#include "../core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The work of one top-k call, as the backends see it (src/ops/indexer.c
 * builds it for dsk_topk and for the top-k stage of dsk_indexer_topk_slots).
 * Row length L_t:
 *   lens != NULL:           lens[t] clamped to [0, width] (clamps counted in counters[0])
 *   else pos != NULL:       slot_mapping[t] < 0 ? 0 : max(pos[t] + 1, 0) / ratio, capped at width
 *                           (the fused path; nothing counted)
 *   else:                   width. */
typedef struct dsk__topk_args {
  void *stream;
  int64_t T, width, K;
  const float *scores;
  int64_t scores_stride_t;
  const int32_t *lens;
  const int32_t *pos, *slot_mapping;
  int64_t ratio;
  int shortcut; /* 1: rows with L_t <= K get 0..L_t-1 without reading scores */
  int32_t *out;
  int64_t out_stride_t;
  void *workspace;
  int64_t workspace_bytes;
  int64_t *counters; /* NULL or [0] += clamped lens */
} dsk__topk_args;

/* dsk_moe_run's fused decode prologue (steps 2-4: quantize x 1x128,
 * permute with DSK_MOE_PERMUTE_NO_PAD_FILL, pack SFA; docs/moe.md): the
 * bytes of those ops that the later steps read (xq and sfx only with a
 * shared expert; the raw scale bytes are not kept). */
typedef struct dsk__moe_prologue_args {
  void *stream;
  int64_t T, topk, E, E_local, expert_offset, H, A_used, M_sum;
  const int32_t *ids;
  int64_t ids_stride;
  const dsk_bf16 *x;
  int64_t x_stride;
  uint8_t *xq;  /* [T, H] row stride H, or NULL */
  int32_t *sfx; /* packed [ceil(H / 512)][round_up(T, 4)], or NULL */
  uint8_t *A;
  int64_t A_stride;
  int32_t *sfa; /* packed [ceil(H / 512)][round_up(M_sum, 4)] */
  int32_t *m_indices, *inv_perm;
  int64_t inv_perm_stride;
  int64_t *cnt_x;    /* NULL or += non-finite x values */
  int64_t *cnt_perm; /* NULL or [0] += bad ids, [1] += dropped rows */
  int dry;           /* 1: only say (*served) whether the call would run; launch nothing */
} dsk__moe_prologue_args;

typedef struct dsk_backend {
  const char *name;
  const char *description;
  int is_cuda;
  /* Can this backend run on `device` (-1 = the CPU, N = CUDA device N)?
   * Returns 1 or 0 and writes a one-sentence reason either way. */
  int (*probe)(int device, const dsk_env *env, char *reason, size_t reason_len);
  /* Per-context set-up and tear-down (device properties, default stream). */
  dsk_status (*init)(dsk_ctx *ctx, int device);
  void (*fini)(dsk_ctx *ctx);

  /* Memory services of the device the backend runs on. */
  dsk_status (*mem_alloc)(dsk_ctx *ctx, void **ptr, size_t bytes);
  dsk_status (*mem_free)(dsk_ctx *ctx, void *ptr);
  dsk_status (*mem_upload)(dsk_ctx *ctx, void *dst, const void *src, size_t bytes);
  dsk_status (*mem_download)(dsk_ctx *ctx, void *dst, const void *src, size_t bytes);
  dsk_status (*mem_set)(dsk_ctx *ctx, void *dst, int byte, size_t bytes);
  dsk_status (*synchronize)(dsk_ctx *ctx, void *stream);

  /* Op slots. */
  dsk_status (*kv_write)(dsk_ctx *ctx, const dsk_kv_write_desc *d);
  dsk_status (*kv_read)(dsk_ctx *ctx, const dsk_kv_read_desc *d);
  dsk_status (*slot_list_build)(dsk_ctx *ctx, const dsk_slot_list_desc *d);
  /* Workspace bytes for a validated descriptor and a resolved tactic. */
  int64_t (*sparse_mla_workspace)(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t);
  dsk_status (*sparse_mla_decode)(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t);
  /* mHC (spec/mhc.md): T >= 1 and the split count resolved, t->v[0] = S
   * (1..dsk_mhc_max_splits(nD)); dsk_mhc_pre gets the S of its prenorm. */
  dsk_status (*mhc_prenorm)(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d, const dsk_tactic *t);
  dsk_status (*mhc_pre)(dsk_ctx *ctx, const dsk_mhc_pre_desc *d, const dsk_tactic *t);
  dsk_status (*mhc_post)(dsk_ctx *ctx, const dsk_mhc_post_desc *d);
  dsk_status (*mhc_head)(dsk_ctx *ctx, const dsk_mhc_head_desc *d, const dsk_tactic *t);
  dsk_status (*mhc_post_prenorm)(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *d, const dsk_tactic *t);
  /* Lightning indexer (spec/indices.md §9), T >= 1. src/ops/indexer.c
   * composes dsk_indexer_topk_slots from these two ops and slot_list_build.
   * Scores: skip_le >= 0 skips rows whose scored length min(L_t, ctx_width)
   * is <= skip_le entirely (not written, their entries not examined; the
   * truncation counter still counts them); -1: none. */
  dsk_status (*indexer_logits)(dsk_ctx *ctx, const dsk_indexer_logits_desc *d, int64_t skip_le);
  /* Workspace bytes of one top-k call (>= 0; NULL = none needed). */
  int64_t (*topk_workspace)(const dsk_ctx *ctx, const dsk__topk_args *a);
  dsk_status (*topk)(dsk_ctx *ctx, const dsk__topk_args *a);
  /* MXFP4 / FP8 MoE (spec/mxfp4-moe.md; docs/moe.md), one slot per run
   * call of include/dsk.h's MoE section. The work count (rows, T, M_sum,
   * M, MN) is >= 1; the GEMMs get the resolved tactic. src/ops/moe.c
   * composes dsk_moe_run from these slots (it has no slot of its own).
   * The permute workspace is sized by the cpu-ref rule
   * (dsk__ref_moe_permute_workspace: two int64 arrays of E_local). */
  dsk_status (*mx_quantize)(dsk_ctx *ctx, const dsk_mx_quantize_desc *d);
  dsk_status (*fp8_quantize_1x128)(dsk_ctx *ctx, const dsk_fp8_quantize_desc *d);
  dsk_status (*pack_ue8m0_words)(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d);
  dsk_status (*sf_pack_mn_major)(dsk_ctx *ctx, const dsk_sf_pack_desc *d);
  dsk_status (*moe_route)(dsk_ctx *ctx, const dsk_moe_route_desc *d);
  dsk_status (*moe_permute)(dsk_ctx *ctx, const dsk_moe_permute_desc *d);
  dsk_status (*moe_gemm)(dsk_ctx *ctx, const dsk_moe_gemm_desc *d, const dsk_tactic *t);
  /* Workspace bytes of a grouped (grouped = 1, rows = M_sum) or dense
   * (grouped = 0, rows = M) GEMM under the resolved tactic t, fmt a
   * dsk_moe_wfmt. NULL: split x rows x N x 4 for split > 1 (fp32 partials),
   * else 0. The CUDA backend returns 0 where its skinny kernel serves the
   * split with warps of one CTA (docs/moe.md). */
  int64_t (*moe_gemm_workspace)(const dsk_ctx *ctx, int grouped, int fmt, int64_t rows, int64_t N, int64_t K,
                                const dsk_tactic *t);
  dsk_status (*swiglu_quant)(dsk_ctx *ctx, const dsk_swiglu_quant_desc *d);
  dsk_status (*moe_gather)(dsk_ctx *ctx, const dsk_moe_gather_desc *d);
  /* Optional (NULL = the separate ops): the fused prologue of
   * dsk_moe_run. Sets *served = 0 without side effects for a call it does
   * not take (too many assignments, unaligned rows); then dsk_moe_run runs
   * the ops. With a->dry it only sets *served (ids need not be written
   * yet): dsk_moe_run asks before the router whether it may fork the
   * shared expert there. */
  dsk_status (*moe_prologue)(dsk_ctx *ctx, const dsk__moe_prologue_args *a, int *served);
  dsk_status (*dense_fp8_gemm)(dsk_ctx *ctx, const dsk_dense_gemm_desc *d, const dsk_tactic *t);
  /* Timing (src/tune/bench.c drives them): fills samples_us[0..reps). */
  dsk_status (*bench_samples)(dsk_ctx *ctx, dsk_bench_fn fn, void *user, const dsk_bench_opts *o,
                              double *samples_us);
  /* One timed copy of `bytes` from src to dst, in microseconds. */
  dsk_status (*bench_copy)(dsk_ctx *ctx, void *dst, const void *src, size_t bytes, double *us);

  /* Optional: resident CTAs per SM of the decode kernel with
   * heads_per_cta heads per CTA (tactic v[1]), for the tactic heuristic
   * (NULL = 1). */
  int (*sparse_mla_ctas_per_sm)(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, int heads_per_cta);

  /* Optional (NULL = never capturing): 1 if `stream` (NULL = the context's
   * stream) is capturing a CUDA graph, or its capture status cannot be
   * read; else 0. No side effects. The tuner times nothing while it is 1
   * (spec/autotune.md A10). */
  int (*stream_capturing)(dsk_ctx *ctx, void *stream);
  /* Optional (NULL = one stream only): work enqueued later on `waiter`
   * runs after all work enqueued so far on `signaler` (an event record and
   * wait; capture-safe). dsk_moe_run's aux_stream uses it. */
  dsk_status (*stream_join)(dsk_ctx *ctx, void *waiter, void *signaler);
  /* Optional (NULL: dsk_stream_create gives NULL): a non-blocking stream of
   * the context's device, and its destruction. */
  dsk_status (*stream_create)(dsk_ctx *ctx, void **stream);
  dsk_status (*stream_destroy)(dsk_ctx *ctx, void *stream);
} dsk_backend;

/* Registry (registry.c). */
int dsk__backend_count(void);
const dsk_backend *dsk__backend_at(int i);
const dsk_backend *dsk__backend_find(const char *name);

/* Backends. cuda_* exist only when the CUDA backend was built. */
extern const dsk_backend dsk__backend_cpu_ref;
#ifdef DSK_HAVE_CUDA
extern const dsk_backend dsk__backend_cuda_sm90;
extern const dsk_backend dsk__backend_cuda_sm120;
#endif

#ifdef __cplusplus
}
#endif
#endif
