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

#ifdef __cplusplus
}
#endif
#endif
