/* ref.h - the cpu-ref op slots. Written for clarity: fp32/fp64 arithmetic,
 * no tricks; every other backend is tested against them. */
#ifndef DSK_CPU_REF_H
#define DSK_CPU_REF_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

dsk_status dsk__ref_kv_write(dsk_ctx *ctx, const dsk_kv_write_desc *d);
dsk_status dsk__ref_kv_read(dsk_ctx *ctx, const dsk_kv_read_desc *d);
dsk_status dsk__ref_slot_list_build(dsk_ctx *ctx, const dsk_slot_list_desc *d);
int64_t dsk__ref_sparse_mla_workspace(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t);
dsk_status dsk__ref_sparse_mla_decode(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t);
/* ref_mhc.c (fp64 accumulation) */
dsk_status dsk__ref_mhc_prenorm(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d, const dsk_tactic *t);
dsk_status dsk__ref_mhc_pre(dsk_ctx *ctx, const dsk_mhc_pre_desc *d, const dsk_tactic *t);
dsk_status dsk__ref_mhc_post(dsk_ctx *ctx, const dsk_mhc_post_desc *d);
dsk_status dsk__ref_mhc_head(dsk_ctx *ctx, const dsk_mhc_head_desc *d, const dsk_tactic *t);
dsk_status dsk__ref_mhc_post_prenorm(dsk_ctx *ctx, const dsk_mhc_post_prenorm_desc *d, const dsk_tactic *t);
/* ref_indexer.c (fp64 scores, exact top-k) */
dsk_status dsk__ref_indexer_logits(dsk_ctx *ctx, const dsk_indexer_logits_desc *d, int64_t skip_le);
int64_t dsk__ref_topk_workspace(const dsk_ctx *ctx, const dsk__topk_args *a);
dsk_status dsk__ref_topk(dsk_ctx *ctx, const dsk__topk_args *a);

dsk_status dsk__cpu_bench_samples(dsk_ctx *ctx, dsk_bench_fn fn, void *user, const dsk_bench_opts *o,
                                  double *samples_us);
dsk_status dsk__cpu_bench_copy(dsk_ctx *ctx, void *dst, const void *src, size_t bytes, double *us);

#ifdef __cplusplus
}
#endif
#endif
