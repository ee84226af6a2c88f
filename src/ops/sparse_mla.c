/* STUB: to be replaced. */
#include "ops.h"
dsk_status dsk__sparse_mla_validate(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d) { return DSK_STATUS_UNSUPPORTED; }
dsk_status dsk_sparse_mla_decode_plan(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, dsk_plan_info *i) { return DSK_STATUS_UNSUPPORTED; }
dsk_status dsk_sparse_mla_decode(dsk_ctx *ctx, const dsk_sparse_mla_desc *d) { return DSK_STATUS_UNSUPPORTED; }
