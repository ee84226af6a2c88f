/* cpu_ref.c - the cpu-ref backend table: host memory services and the
 * reference op slots. Always available. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "ref_moe.h"

static int ref_probe(int device, const dsk_env *env, char *reason, size_t len) {
  (void)env;
  if (device >= 0) {
    snprintf(reason, len, "cpu-ref: runs on the CPU, not on cuda:%d", device);
    return 0;
  }
  const char *f = dsk__cpu_features();
  snprintf(reason, len, "cpu-ref: portable C reference, available on every CPU (%d cores%s%s)", dsk__cpu_count(),
           f[0] ? "; features: " : "", f);
  return 1;
}

static dsk_status ref_init(dsk_ctx *ctx, int device) {
  (void)device;
  ctx->info.device_index = -1;
#if defined(__x86_64__)
  snprintf(ctx->info.device_name, sizeof ctx->info.device_name, "CPU x86-64, %d threads", ctx->num_threads);
#elif defined(__aarch64__)
  snprintf(ctx->info.device_name, sizeof ctx->info.device_name, "CPU aarch64, %d threads", ctx->num_threads);
#else
  snprintf(ctx->info.device_name, sizeof ctx->info.device_name, "CPU, %d threads", ctx->num_threads);
#endif
  ctx->info.sm_count = ctx->num_threads;
  return DSK_STATUS_OK;
}

static void ref_fini(dsk_ctx *ctx) { (void)ctx; }

static dsk_status host_alloc(dsk_ctx *ctx, void **ptr, size_t bytes) {
  (void)ctx;
  *ptr = dsk__aligned_alloc(bytes);
  if (!*ptr) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_mem_alloc: %zu bytes of host memory", bytes);
  return DSK_STATUS_OK;
}
static dsk_status host_free(dsk_ctx *ctx, void *ptr) {
  (void)ctx;
  dsk__aligned_free(ptr);
  return DSK_STATUS_OK;
}
static dsk_status host_copy(dsk_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  memmove(dst, src, bytes);
  return DSK_STATUS_OK;
}
static dsk_status host_set(dsk_ctx *ctx, void *dst, int byte, size_t bytes) {
  (void)ctx;
  memset(dst, byte, bytes);
  return DSK_STATUS_OK;
}
static dsk_status host_sync(dsk_ctx *ctx, void *stream) {
  (void)ctx;
  (void)stream;
  return DSK_STATUS_OK;
}

const dsk_backend dsk__backend_cpu_ref = {
    .name = "cpu-ref",
    .description = "portable C reference (fp64 accumulation), x86-64 and aarch64",
    .is_cuda = 0,
    .probe = ref_probe,
    .init = ref_init,
    .fini = ref_fini,
    .mem_alloc = host_alloc,
    .mem_free = host_free,
    .mem_upload = host_copy,
    .mem_download = host_copy,
    .mem_set = host_set,
    .synchronize = host_sync,
    .kv_write = dsk__ref_kv_write,
    .kv_read = dsk__ref_kv_read,
    .slot_list_build = dsk__ref_slot_list_build,
    .sparse_mla_workspace = dsk__ref_sparse_mla_workspace,
    .sparse_mla_decode = dsk__ref_sparse_mla_decode,
    .mhc_prenorm = dsk__ref_mhc_prenorm,
    .mhc_pre = dsk__ref_mhc_pre,
    .mhc_post = dsk__ref_mhc_post,
    .mhc_head = dsk__ref_mhc_head,
    .mhc_post_prenorm = dsk__ref_mhc_post_prenorm,
    .indexer_logits = dsk__ref_indexer_logits,
    .topk_workspace = dsk__ref_topk_workspace,
    .topk = dsk__ref_topk,
    .mx_quantize = dsk__ref_mx_quantize,
    .fp8_quantize_1x128 = dsk__ref_fp8_quantize,
    .pack_ue8m0_words = dsk__ref_pack_ue8m0_words,
    .sf_pack_mn_major = dsk__ref_sf_pack_mn_major,
    .moe_route = dsk__ref_moe_route,
    .moe_permute = dsk__ref_moe_permute,
    .moe_gemm = dsk__ref_moe_gemm,
    .swiglu_quant = dsk__ref_swiglu_quant,
    .moe_gather = dsk__ref_moe_gather,
    .dense_fp8_gemm = dsk__ref_dense_gemm,
    .bench_samples = dsk__cpu_bench_samples,
    .bench_copy = dsk__cpu_bench_copy,
};
