/* STUB: to be replaced. */
#include "ref.h"
dsk_status dsk__ref_kv_write(dsk_ctx *ctx, const dsk_kv_write_desc *d) { return DSK_STATUS_UNSUPPORTED; }
dsk_status dsk__ref_kv_read(dsk_ctx *ctx, const dsk_kv_read_desc *d) { return DSK_STATUS_UNSUPPORTED; }
