/* STUB: to be replaced. */
#include "ref.h"
dsk_status dsk__ref_slot_list_build(dsk_ctx *ctx, const dsk_slot_list_desc *d) { return DSK_STATUS_UNSUPPORTED; }
