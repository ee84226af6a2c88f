/* STUB: to be replaced. */
#include "ref.h"
int64_t dsk__ref_sparse_mla_workspace(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t) { return 0; }
dsk_status dsk__ref_sparse_mla_decode(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t) { return DSK_STATUS_UNSUPPORTED; }
