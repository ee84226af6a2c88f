/* kv.c - KV-cache geometry, descriptor validation and dispatch of
 * dsk_kv_write / dsk_kv_read (spec/kv-cache.md §1, §5; api-conventions.md §3).
 *
 * Validation order of a run descriptor: struct_size, format, scale_rule
 * (writer), N. N == 0 is a no-op that returns OK before any pointer, stride
 * or cache field is looked at (an empty batch may carry an empty descriptor).
 * Otherwise every pointer, stride and the cache geometry are checked; the
 * error text names the field and the values ("kv_write: latent_stride 100 <
 * 512 (latent dims of format A656)").
 */
#include <inttypes.h>
#include <stdint.h>

#include "ops.h"
#include "format/format.h"

/* ------------------------------------------------------------ geometry */
int64_t dsk_kv_entry_bytes(dsk_kv_format f) { return dsk_fmt_entry_bytes((int)f); }
int64_t dsk_kv_dim(dsk_kv_format f) { return dsk_fmt_dim((int)f); }
int64_t dsk_kv_latent_dim(dsk_kv_format f) { return dsk_fmt_latent_dim((int)f); }

/* pbs * entry bytes; 0 for an unknown format, pbs < 1 or int64 overflow. */
int64_t dsk_kv_min_page_stride(dsk_kv_format f, int64_t pbs) {
  int64_t b = dsk_fmt_entry_bytes((int)f);
  if (b == 0 || pbs < 1 || pbs > INT64_MAX / b) return 0;
  return pbs * b;
}

/* Format B pads the page to a multiple of 576 (FlashMLA / vLLM); the others
 * are the minimum. 0 as for the minimum. */
int64_t dsk_kv_canonical_page_stride(dsk_kv_format f, int64_t pbs) {
  int64_t m = dsk_kv_min_page_stride(f, pbs);
  if (m == 0) return 0;
  if (f != DSK_KV_FORMAT_B584) return m;
  if (m > INT64_MAX - DSK_FMT_B_CANON_ALIGN) return 0;
  return dsk_fmt_round_up(m, DSK_FMT_B_CANON_ALIGN);
}

static const char *format_name(int f) {
  switch (f) {
    case DSK_KV_FORMAT_A656: return "A656";
    case DSK_KV_FORMAT_B584: return "B584";
    case DSK_KV_FORMAT_IDXK132: return "IDXK132";
  }
  return "unknown";
}

static int known_format(int f) { return dsk_fmt_entry_bytes(f) != 0; }

static int misaligned(const void *p, uintptr_t a) { return ((uintptr_t)p % a) != 0; }

/* ------------------------------------------------------- cache geometry */
dsk_status dsk__kv_cache_validate(const dsk_ctx *ctx, const char *what, dsk_kv_format f, const dsk_kv_cache *c) {
  if (!what) what = "kv cache";
  if (!known_format((int)f))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s format %d is not A656 (1), B584 (2) or IDXK132 (3)", what, (int)f);
  if (!c) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s is NULL", what);
  int64_t bytes = dsk_fmt_entry_bytes((int)f);
  if (!c->base) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s base is NULL", what);
  if (c->pbs < 1) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s pbs %" PRId64 " < 1", what, c->pbs);
  if (c->num_pages < 1)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s num_pages %" PRId64 " < 1", what, c->num_pages);
  if (c->pbs > INT64_MAX / bytes)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s pbs %" PRId64 " * %" PRId64 " bytes overflows int64", what, c->pbs,
                     bytes);
  int64_t min = c->pbs * bytes;
  if (c->page_stride < min)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s page_stride %" PRId64 " < %" PRId64 "*%" PRId64 " = %" PRId64, what,
                     c->page_stride, c->pbs, bytes, min);
  if (c->num_pages > INT64_MAX / c->page_stride)
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "%s num_pages %" PRId64 " * page_stride %" PRId64 " overflows int64", what, c->num_pages,
                     c->page_stride);
  if (ctx && ctx->info.is_cuda) {
    if (misaligned(c->base, DSK_FMT_CUDA_ALIGN))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s base %p is not a multiple of %d bytes (CUDA backend %s)", what,
                       c->base, DSK_FMT_CUDA_ALIGN, ctx->info.backend);
    if (c->page_stride % DSK_FMT_CUDA_ALIGN != 0)
      return dsk__fail(DSK_STATUS_INVALID_ARG,
                       "%s page_stride %" PRId64 " is not a multiple of %d (CUDA backend %s; minimum round_up(%" PRId64
                       "*%" PRId64 ", %d) = %" PRId64 ")",
                       what, c->page_stride, DSK_FMT_CUDA_ALIGN, ctx->info.backend, c->pbs, bytes, DSK_FMT_CUDA_ALIGN,
                       dsk_fmt_round_up(min, DSK_FMT_CUDA_ALIGN));
  }
  return DSK_STATUS_OK;
}

/* Rows [0, N) of `width` elements at `stride` elements apart must be
 * addressable in int64. */
static int rows_overflow(int64_t N, int64_t stride, int64_t width) {
  return N > 1 && (N - 1) > (INT64_MAX - width) / stride;
}

/* --------------------------------------------------------------- writer */
dsk_status dsk__kv_write_validate(const dsk_ctx *ctx, const dsk_kv_write_desc *d) {
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: desc is NULL");
  if (d->struct_size < sizeof *d)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: struct_size %zu < sizeof(dsk_kv_write_desc) %zu",
                     d->struct_size, sizeof *d);
  int f = (int)d->format;
  if (!known_format(f))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: format %d is not A656 (1), B584 (2) or IDXK132 (3)", f);
  if (d->scale_rule != DSK_SCALE_POW2 && d->scale_rule != DSK_SCALE_RAW)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: scale_rule %d is not POW2 (0) or RAW (1)", (int)d->scale_rule);
  if (d->N < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: N %" PRId64 " < 0", d->N);
  if (d->N == 0) return DSK_STATUS_OK;

  int64_t ld = dsk_fmt_latent_dim(f);
  if (!d->latent) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: latent is NULL (N %" PRId64 ")", d->N);
  if (misaligned(d->latent, sizeof(dsk_bf16)))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: latent %p is not 2-byte aligned (bf16)", (const void *)d->latent);
  if (d->latent_stride < ld)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: latent_stride %" PRId64 " < %" PRId64 " (latent dims of format %s)",
                     d->latent_stride, ld, format_name(f));
  if (rows_overflow(d->N, d->latent_stride, ld))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: N %" PRId64 " rows of latent_stride %" PRId64 " overflow int64",
                     d->N, d->latent_stride);
  if (f != DSK_KV_FORMAT_IDXK132) { /* the indexer format has no rope part: rope is ignored */
    if (!d->rope)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: rope is NULL (format %s stores %d rope dims per entry)",
                       format_name(f), DSK_FMT_ROPE_DIM);
    if (misaligned(d->rope, sizeof(dsk_bf16)))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: rope %p is not 2-byte aligned (bf16)", (const void *)d->rope);
    if (d->rope_stride < DSK_FMT_ROPE_DIM)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: rope_stride %" PRId64 " < %d (rope dims)", d->rope_stride,
                       DSK_FMT_ROPE_DIM);
    if (rows_overflow(d->N, d->rope_stride, DSK_FMT_ROPE_DIM))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: N %" PRId64 " rows of rope_stride %" PRId64 " overflow int64",
                       d->N, d->rope_stride);
  }
  if (!d->slot_mapping) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: slot_mapping is NULL (N %" PRId64 ")", d->N);
  if (misaligned(d->slot_mapping, sizeof(int32_t)))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: slot_mapping %p is not 4-byte aligned (int32)",
                     (const void *)d->slot_mapping);
  if (d->counters && misaligned(d->counters, sizeof(int64_t)))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: counters %p is not 8-byte aligned (int64)", (void *)d->counters);
  return dsk__kv_cache_validate(ctx, "kv_write: cache", d->format, &d->cache);
}

dsk_status dsk_kv_write(dsk_ctx *ctx, const dsk_kv_write_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: ctx is NULL");
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: desc is NULL");
  dsk_status st = dsk__kv_write_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  if (d->N == 0) return DSK_STATUS_OK;
  if (!ctx->backend->kv_write)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "kv_write: backend %s does not serve kv_write", ctx->backend->name);
  return ctx->backend->kv_write(ctx, d);
}

/* --------------------------------------------------------------- reader */
dsk_status dsk__kv_read_validate(const dsk_ctx *ctx, const dsk_kv_read_desc *d) {
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: desc is NULL");
  if (d->struct_size < sizeof *d)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: struct_size %zu < sizeof(dsk_kv_read_desc) %zu",
                     d->struct_size, sizeof *d);
  int f = (int)d->format;
  if (!known_format(f))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: format %d is not A656 (1), B584 (2) or IDXK132 (3)", f);
  if (d->N < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: N %" PRId64 " < 0", d->N);
  if (d->N == 0) return DSK_STATUS_OK;

  int64_t dim = dsk_fmt_dim(f);
  if (!d->slots) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: slots is NULL (N %" PRId64 ")", d->N);
  if (misaligned(d->slots, sizeof(int32_t)))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: slots %p is not 4-byte aligned (int32)", (const void *)d->slots);
  if (!d->out) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: out is NULL (N %" PRId64 ")", d->N);
  if (misaligned(d->out, sizeof(float)))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: out %p is not 4-byte aligned (fp32)", (void *)d->out);
  if (d->out_stride < dim)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: out_stride %" PRId64 " < %" PRId64 " (dims of format %s)",
                     d->out_stride, dim, format_name(f));
  if (rows_overflow(d->N, d->out_stride, dim))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: N %" PRId64 " rows of out_stride %" PRId64 " overflow int64",
                     d->N, d->out_stride);
  if (d->counters && misaligned(d->counters, sizeof(int64_t)))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: counters %p is not 8-byte aligned (int64)", (void *)d->counters);
  return dsk__kv_cache_validate(ctx, "kv_read: cache", d->format, &d->cache);
}

dsk_status dsk_kv_read(dsk_ctx *ctx, const dsk_kv_read_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: ctx is NULL");
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: desc is NULL");
  dsk_status st = dsk__kv_read_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  if (d->N == 0) return DSK_STATUS_OK;
  if (!ctx->backend->kv_read)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, "kv_read: backend %s does not serve kv_read", ctx->backend->name);
  return ctx->backend->kv_read(ctx, d);
}
