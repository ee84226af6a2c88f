/* context.c - version, context life cycle, device memory services and the
 * op-support query. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "moe.h"
#include "../tune/tuner.h"

const char *dsk_version(void) { return DSK_VERSION_STRING; }

#ifdef DSK_HAVE_BUILD_INFO_H
#include "dsk_build_info.h"
#endif
#ifndef DSK_BUILD_INFO
#define DSK_BUILD_INFO "unknown build"
#endif
const char *dsk_build_info(void) { return DSK_BUILD_INFO; }

const char *dsk_op_name(dsk_op op) {
  switch (op) {
    case DSK_OP_KV_WRITE: return "kv_write";
    case DSK_OP_KV_READ: return "kv_read";
    case DSK_OP_SLOT_LIST: return "slot_list";
    case DSK_OP_SPARSE_MLA_DECODE: return "sparse_mla_decode";
    case DSK_OP_MHC_PRENORM: return "mhc_prenorm";
    case DSK_OP_MHC_PRE: return "mhc_pre";
    case DSK_OP_MHC_POST: return "mhc_post";
    case DSK_OP_MHC_HEAD: return "mhc_head";
    case DSK_OP_MHC_POST_PRENORM: return "mhc_post_prenorm";
    case DSK_OP_INDEXER_LOGITS: return "indexer_logits";
    case DSK_OP_TOPK: return "topk";
    case DSK_OP_INDEXER_SLOTS: return "indexer_topk_slots";
    case DSK_OP_MOE_MX_QUANTIZE: return "mx_quantize";
    case DSK_OP_MOE_FP8_QUANTIZE: return "fp8_quantize_1x128";
    case DSK_OP_MOE_PACK_WORDS: return "pack_ue8m0_words";
    case DSK_OP_MOE_SF_PACK: return "sf_pack_mn_major";
    case DSK_OP_MOE_ROUTE: return "moe_route";
    case DSK_OP_MOE_PERMUTE: return "moe_permute";
    case DSK_OP_MOE_GEMM: return "moe_gemm";
    case DSK_OP_MOE_SWIGLU_QUANT: return "swiglu_quant";
    case DSK_OP_MOE_GATHER: return "moe_gather";
    case DSK_OP_MOE_DENSE_GEMM: return "dense_fp8_gemm";
    case DSK_OP_MOE_FORWARD: return "moe_forward";
  }
  return NULL;
}

void dsk_ctx_opts_init(dsk_ctx_opts *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->device = "auto";
  opts->log_level = -1;
}

dsk_status dsk_ctx_create(dsk_ctx **out, const dsk_ctx_opts *opts_in) {
  if (!out) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_create: ctx is NULL");
  *out = NULL;
  dsk_ctx_opts opts;
  dsk_ctx_opts_init(&opts);
  if (opts_in) {
    if (opts_in->struct_size < sizeof opts)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_create: opts->struct_size %zu < %zu",
                       opts_in->struct_size, sizeof opts);
    opts = *opts_in;
  }
  if (opts.num_threads < 0 || opts.num_threads > DSK_MAX_CPU_THREADS)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_create: num_threads %d is not 0..%d", opts.num_threads,
                     DSK_MAX_CPU_THREADS);
  if (opts.log_level < -1 || opts.log_level > DSK_LOG_TRACE)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_create: log_level %d is not -1..5", opts.log_level);

  dsk_ctx *ctx = (dsk_ctx *)calloc(1, sizeof *ctx);
  if (!ctx) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_ctx_create: out of host memory");
  dsk__env_read(&ctx->env);
  ctx->log_level = opts.log_level >= 0 ? opts.log_level
                   : ctx->env.log_level >= 0 ? (ctx->env.log_level > 5 ? 5 : ctx->env.log_level)
                                             : DSK_LOG_WARN;
  const int cores = dsk__cpu_count();
  ctx->num_threads = opts.num_threads > 0 ? opts.num_threads
                     : ctx->env.num_threads > 0 ? ctx->env.num_threads
                     : cores < DSK_MAX_CPU_THREADS ? cores
                                                   : DSK_MAX_CPU_THREADS;

  const char *forced = opts.backend;
  const char *forced_by = "the context option";
  if (!forced && ctx->env.backend[0]) {
    forced = ctx->env.backend;
    forced_by = "DSK_BACKEND";
  }
  const dsk_backend *b = NULL;
  int device = -1;
  char why[sizeof ctx->info.reason];
  dsk_status st = dsk__select_backend(forced, forced_by, opts.device ? opts.device : "auto", &ctx->env, &b,
                                      &device, why, sizeof why);
  if (st != DSK_STATUS_OK) {
    free(ctx);
    return st;
  }
  ctx->backend = b;
  ctx->info.struct_size = sizeof ctx->info;
  snprintf(ctx->info.backend, sizeof ctx->info.backend, "%s", b->name);
  snprintf(ctx->info.reason, sizeof ctx->info.reason, "%s", why);
  ctx->info.is_cuda = b->is_cuda;
  ctx->info.device_index = device;
  ctx->info.num_threads = ctx->num_threads;
  ctx->info.test_as_sm120 = ctx->env.test_as_sm120;
  st = b->init(ctx, device);
  if (st != DSK_STATUS_OK) {
    free(ctx);
    return st;
  }
  if (ctx->env.bad[0]) {
    char key[200];
    snprintf(key, sizeof key, "env:%s", ctx->env.bad);
    dsk__warn_once(ctx, key, "ignoring %s: value not understood (DSK_LOG_LEVEL: an integer >= 0; DSK_NUM_THREADS: "
                   "1..%d; DSK_BENCH_SPIN_US: 10..100000; docs/environment.md); defaults apply", ctx->env.bad, DSK_MAX_CPU_THREADS);
  }
  dsk__log(ctx, DSK_LOG_INFO, "backend %s on %s: %s", b->name, ctx->info.device_name, why);
  *out = ctx;
  return DSK_STATUS_OK;
}

void dsk_ctx_destroy(dsk_ctx *ctx) {
  if (!ctx) return;
  if (ctx->backend && ctx->backend->fini) ctx->backend->fini(ctx);
  dsk__tuner_destroy(ctx->tuner);
  free(ctx);
}

dsk_status dsk_ctx_get_info(const dsk_ctx *ctx, dsk_ctx_info *info) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_get_info: ctx is NULL");
  if (!info) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_get_info: info is NULL");
  if (info->struct_size < sizeof *info)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_get_info: info->struct_size %zu < %zu",
                     info->struct_size, sizeof *info);
  *info = ctx->info;
  return DSK_STATUS_OK;
}

#define CHECK_CTX(fn)                                                               \
  do {                                                                              \
    if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, fn ": ctx is NULL");         \
  } while (0)

dsk_status dsk_mem_alloc(dsk_ctx *ctx, void **ptr, size_t bytes) {
  CHECK_CTX("dsk_mem_alloc");
  if (!ptr) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_mem_alloc: ptr is NULL");
  *ptr = NULL;
  return ctx->backend->mem_alloc(ctx, ptr, bytes);
}

dsk_status dsk_mem_free(dsk_ctx *ctx, void *ptr) {
  CHECK_CTX("dsk_mem_free");
  if (!ptr) return DSK_STATUS_OK;
  return ctx->backend->mem_free(ctx, ptr);
}

dsk_status dsk_mem_upload(dsk_ctx *ctx, void *dst, const void *src, size_t bytes) {
  CHECK_CTX("dsk_mem_upload");
  if (bytes == 0) return DSK_STATUS_OK;
  if (!dst || !src) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_mem_upload: %s is NULL", dst ? "src" : "dst");
  return ctx->backend->mem_upload(ctx, dst, src, bytes);
}

dsk_status dsk_mem_download(dsk_ctx *ctx, void *dst, const void *src, size_t bytes) {
  CHECK_CTX("dsk_mem_download");
  if (bytes == 0) return DSK_STATUS_OK;
  if (!dst || !src) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_mem_download: %s is NULL", dst ? "src" : "dst");
  return ctx->backend->mem_download(ctx, dst, src, bytes);
}

dsk_status dsk_mem_set(dsk_ctx *ctx, void *dst, int byte, size_t bytes) {
  CHECK_CTX("dsk_mem_set");
  if (bytes == 0) return DSK_STATUS_OK;
  if (!dst) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_mem_set: dst is NULL");
  return ctx->backend->mem_set(ctx, dst, byte, bytes);
}

dsk_status dsk_ctx_synchronize(dsk_ctx *ctx, void *stream) {
  CHECK_CTX("dsk_ctx_synchronize");
  return ctx->backend->synchronize(ctx, stream);
}

dsk_status dsk_stream_create(dsk_ctx *ctx, void **stream) {
  CHECK_CTX("dsk_stream_create");
  if (!stream) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_stream_create: stream is NULL");
  *stream = NULL;
  return ctx->backend->stream_create ? ctx->backend->stream_create(ctx, stream) : DSK_STATUS_OK;
}

dsk_status dsk_stream_destroy(dsk_ctx *ctx, void *stream) {
  CHECK_CTX("dsk_stream_destroy");
  if (!stream || !ctx->backend->stream_destroy) return DSK_STATUS_OK;
  return ctx->backend->stream_destroy(ctx, stream);
}

dsk_status dsk_op_supported(dsk_ctx *ctx, dsk_op op, const void *desc, int *supported, char *reason,
                            size_t reason_len) {
  char local[8];
  if (!reason || reason_len == 0) {
    reason = local;
    reason_len = sizeof local;
  }
  reason[0] = 0;
  CHECK_CTX("dsk_op_supported");
  if (!supported) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_op_supported: supported is NULL");
  *supported = 0;
  if (!desc) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_op_supported: desc is NULL");
  const dsk_backend *b = ctx->backend;
  dsk_status st;
  int has_slot;
  switch (op) {
    case DSK_OP_KV_WRITE:
      st = dsk__kv_write_validate(ctx, (const dsk_kv_write_desc *)desc);
      has_slot = b->kv_write != NULL;
      break;
    case DSK_OP_KV_READ:
      st = dsk__kv_read_validate(ctx, (const dsk_kv_read_desc *)desc);
      has_slot = b->kv_read != NULL;
      break;
    case DSK_OP_SLOT_LIST:
      st = dsk__slot_list_validate(ctx, (const dsk_slot_list_desc *)desc);
      has_slot = b->slot_list_build != NULL;
      break;
    case DSK_OP_SPARSE_MLA_DECODE:
      st = dsk__sparse_mla_validate(ctx, (const dsk_sparse_mla_desc *)desc);
      has_slot = b->sparse_mla_decode != NULL;
      break;
    case DSK_OP_MHC_PRENORM:
    case DSK_OP_MHC_PRE:
    case DSK_OP_MHC_POST:
    case DSK_OP_MHC_HEAD:
    case DSK_OP_MHC_POST_PRENORM:
      st = dsk__mhc_validate(ctx, (int)op, desc);
      has_slot = op == DSK_OP_MHC_PRENORM ? b->mhc_prenorm != NULL
                 : op == DSK_OP_MHC_PRE   ? b->mhc_pre != NULL
                 : op == DSK_OP_MHC_POST  ? b->mhc_post != NULL
                 : op == DSK_OP_MHC_HEAD  ? b->mhc_head != NULL
                                          : b->mhc_post_prenorm != NULL;
      break;
    case DSK_OP_INDEXER_LOGITS:
      st = dsk__indexer_logits_validate(ctx, (const dsk_indexer_logits_desc *)desc);
      has_slot = b->indexer_logits != NULL;
      break;
    case DSK_OP_TOPK:
      st = dsk__topk_validate(ctx, (const dsk_topk_desc *)desc);
      has_slot = b->topk != NULL;
      break;
    case DSK_OP_INDEXER_SLOTS: /* composed from the scores, top-k and slot-list slots */
      st = dsk__indexer_topk_slots_validate(ctx, (const dsk_indexer_topk_slots_desc *)desc);
      has_slot = b->indexer_logits != NULL && b->topk != NULL && b->slot_list_build != NULL;
      break;
    case DSK_OP_MOE_MX_QUANTIZE:
    case DSK_OP_MOE_FP8_QUANTIZE:
    case DSK_OP_MOE_PACK_WORDS:
    case DSK_OP_MOE_SF_PACK:
    case DSK_OP_MOE_ROUTE:
    case DSK_OP_MOE_PERMUTE:
    case DSK_OP_MOE_GEMM:
    case DSK_OP_MOE_SWIGLU_QUANT:
    case DSK_OP_MOE_GATHER:
    case DSK_OP_MOE_DENSE_GEMM:
    case DSK_OP_MOE_FORWARD: /* composed from the op slots; which ones depends on desc */
      st = dsk__moe_validate(ctx, (int)op, desc);
      has_slot = st == DSK_STATUS_OK && dsk__moe_served(b, (int)op, desc);
      break;
    default:
      return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_op_supported: unknown op %d", (int)op);
  }
  if (st != DSK_STATUS_OK) {
    snprintf(reason, reason_len, "%s", dsk_last_error());
    dsk_clear_error();
    return DSK_STATUS_OK;
  }
  if (!has_slot) {
    snprintf(reason, reason_len, "%s: backend %s does not serve this op", dsk_op_name(op), b->name);
    return DSK_STATUS_OK;
  }
  *supported = 1;
  snprintf(reason, reason_len, "%s: served by %s", dsk_op_name(op), b->name);
  return DSK_STATUS_OK;
}
