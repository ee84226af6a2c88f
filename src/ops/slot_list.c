/* STUB: to be replaced. */
#include "ops.h"
dsk_status dsk__slot_list_validate(const dsk_ctx *ctx, const dsk_slot_list_desc *d) { return DSK_STATUS_UNSUPPORTED; }
dsk_status dsk_slot_list_build(dsk_ctx *ctx, const dsk_slot_list_desc *d) { return DSK_STATUS_UNSUPPORTED; }
