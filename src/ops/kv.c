/* STUB: to be replaced (kv ops). */
#include "ops.h"
int64_t dsk_kv_entry_bytes(dsk_kv_format f) { (void)f; return 0; }
int64_t dsk_kv_dim(dsk_kv_format f) { (void)f; return 0; }
int64_t dsk_kv_latent_dim(dsk_kv_format f) { (void)f; return 0; }
int64_t dsk_kv_min_page_stride(dsk_kv_format f, int64_t pbs) { (void)f; (void)pbs; return 0; }
int64_t dsk_kv_canonical_page_stride(dsk_kv_format f, int64_t pbs) { (void)f; (void)pbs; return 0; }
dsk_status dsk__kv_cache_validate(const dsk_ctx *ctx, const char *what, dsk_kv_format f, const dsk_kv_cache *c) { return DSK_STATUS_UNSUPPORTED; }
dsk_status dsk__kv_write_validate(const dsk_ctx *ctx, const dsk_kv_write_desc *d) { return DSK_STATUS_UNSUPPORTED; }
dsk_status dsk__kv_read_validate(const dsk_ctx *ctx, const dsk_kv_read_desc *d) { return DSK_STATUS_UNSUPPORTED; }
dsk_status dsk_kv_write(dsk_ctx *ctx, const dsk_kv_write_desc *d) { return DSK_STATUS_UNSUPPORTED; }
dsk_status dsk_kv_read(dsk_ctx *ctx, const dsk_kv_read_desc *d) { return DSK_STATUS_UNSUPPORTED; }
