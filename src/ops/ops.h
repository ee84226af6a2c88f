/* ops.h - validators shared by the run calls and dsk_op_supported. Each
 * returns DSK_STATUS_OK or an error with dsk_last_error() naming the field. */
#ifndef DSK_OPS_H
#define DSK_OPS_H

#include "../backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

dsk_status dsk__kv_write_validate(const dsk_ctx *ctx, const dsk_kv_write_desc *d);
dsk_status dsk__kv_read_validate(const dsk_ctx *ctx, const dsk_kv_read_desc *d);
dsk_status dsk__slot_list_validate(const dsk_ctx *ctx, const dsk_slot_list_desc *d);
dsk_status dsk__sparse_mla_validate(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d);
/* mhc.c: op = DSK_OP_MHC_*, desc points to that op's descriptor. Run-time
 * checks included (partials and workspace sizes). */
dsk_status dsk__mhc_validate(const dsk_ctx *ctx, int op, const void *desc);
/* indexer.c. The workspace fields are not checked against the plan here
 * (the run calls do that). */
dsk_status dsk__indexer_logits_validate(const dsk_ctx *ctx, const dsk_indexer_logits_desc *d);
dsk_status dsk__topk_validate(const dsk_ctx *ctx, const dsk_topk_desc *d);
dsk_status dsk__indexer_topk_slots_validate(const dsk_ctx *ctx, const dsk_indexer_topk_slots_desc *d);
/* Cache geometry check shared by every cache-reading op: `what` names the
 * cache in messages ("sparse_mla_decode: segment 1"). */
dsk_status dsk__kv_cache_validate(const dsk_ctx *ctx, const char *what, dsk_kv_format f,
                                  const dsk_kv_cache *c);

/* Registry helpers (registry.c). */
int dsk__parse_device(const char *device);
dsk_status dsk__select_backend(const char *forced, const char *forced_by, const char *device,
                               const dsk_env *env, const dsk_backend **out, int *out_device,
                               char *why, size_t why_len);

/* sparse_mla.c: the tactic a run of the (validated) descriptor uses: the
 * forced desc->tactic checked against the shape's valid set, or (all zero)
 * the tuned entry (src/tune, re-validated for the shape) else the heuristic
 * of sparse-decode.md §9. *source gets a dsk_tactic_source. Counts a hit or
 * miss in the context's tuner; DSK_STATUS_TUNE_MISS under
 * DSK_AUTOTUNE_REQUIRE_HIT=1. */
dsk_status dsk__sparse_mla_resolve_tactic(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, dsk_tactic *out,
                                          int *source);
/* The tactic functions the tuner calls (they read only the shape fields of
 * d: format, T, H, nseg, segment widths and page sizes). */
struct dsk__tune_shape;
void dsk__sparse_mla_heuristic(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, dsk_tactic *out);
/* The same rule for a given heads-per-CTA value (0 = the op's own choice);
 * `dsk bench sparse-mla --hpc` uses it to time one kernel. */
void dsk__sparse_mla_heuristic_hpc(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, int32_t hpc, dsk_tactic *out);
int dsk__sparse_mla_tactics(const dsk_sparse_mla_desc *d, dsk_tactic out[10]);
int dsk__sparse_mla_tactic_fix(const dsk_sparse_mla_desc *d, dsk_tactic *t);
void dsk__sparse_mla_tune_shape(const dsk_sparse_mla_desc *d, struct dsk__tune_shape *s);

/* mhc.c: the split counts of mhc_prenorm (autotune.md §1): S in [1, S_max],
 * ascending; the heuristic is dsk_mhc_splits_heuristic. */
int dsk__mhc_prenorm_tactics(int64_t nD, dsk_tactic *out, int max);
int dsk__mhc_prenorm_tactic_fix(int64_t nD, dsk_tactic *t);

#ifdef __cplusplus
}
#endif
#endif
