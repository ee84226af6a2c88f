/* cuda_tables.c - the cuda-sm90 and cuda-sm120 backend tables. Both run the
 * same portable kernels (mma.sync, cp.async; no wgmma, TMEM or clusters);
 * cuda-sm120 is built for sm_120a/sm_121a and has no native slots yet (the
 * MoE GEMM picks its e4m3 or f16 MMA path by the device inside the slot). */
#include "cuda_internal.h"

#define DSK_CUDA_SLOTS                                    \
  .is_cuda = 1, .fini = dsk__cuda_fini,                   \
  .mem_alloc = dsk__cuda_mem_alloc,                       \
  .mem_free = dsk__cuda_mem_free,                         \
  .mem_upload = dsk__cuda_mem_upload,                     \
  .mem_download = dsk__cuda_mem_download,                 \
  .mem_set = dsk__cuda_mem_set,                           \
  .synchronize = dsk__cuda_synchronize,                   \
  .kv_write = dsk__cuda_kv_write,                         \
  .kv_read = dsk__cuda_kv_read,                           \
  .slot_list_build = dsk__cuda_slot_list_build,           \
  .sparse_mla_workspace = dsk__cuda_sparse_mla_workspace, \
  .sparse_mla_decode = dsk__cuda_sparse_mla_decode,       \
  .sparse_mla_ctas_per_sm = dsk__cuda_sparse_mla_ctas_per_sm, \
  .mhc_prenorm = dsk__cuda_mhc_prenorm,                   \
  .mhc_pre = dsk__cuda_mhc_pre,                           \
  .mhc_post = dsk__cuda_mhc_post,                         \
  .mhc_head = dsk__cuda_mhc_head,                         \
  .mhc_post_prenorm = dsk__cuda_mhc_post_prenorm,         \
  .indexer_logits = dsk__cuda_indexer_logits,             \
  .topk_workspace = dsk__cuda_topk_workspace,             \
  .topk = dsk__cuda_topk,                                 \
  .bench_samples = dsk__cuda_bench_samples,               \
  .bench_copy = dsk__cuda_bench_copy,                     \
  .stream_capturing = dsk__cuda_stream_capturing,         \
  .stream_join = dsk__cuda_stream_join,                   \
  .stream_create = dsk__cuda_stream_create,               \
  .stream_destroy = dsk__cuda_stream_destroy,             \
  .mx_quantize = dsk__cuda_mx_quantize,                   \
  .fp8_quantize_1x128 = dsk__cuda_fp8_quantize_1x128,     \
  .pack_ue8m0_words = dsk__cuda_pack_ue8m0_words,         \
  .sf_pack_mn_major = dsk__cuda_sf_pack_mn_major,         \
  .moe_route = dsk__cuda_moe_route,                       \
  .moe_permute = dsk__cuda_moe_permute,                   \
  .swiglu_quant = dsk__cuda_swiglu_quant,                 \
  .moe_prologue = dsk__cuda_moe_prologue,                 \
  .moe_gather = dsk__cuda_moe_gather,                     \
  .moe_gemm = dsk__cuda_moe_gemm,                         \
  .moe_gemm_workspace = dsk__cuda_moe_gemm_workspace,     \
  .dense_fp8_gemm = dsk__cuda_dense_fp8_gemm

const dsk_backend dsk__backend_cuda_sm90 = {
    .name = "cuda-sm90",
    .description = "portable CUDA kernels on Hopper (CC 9.0), the validation target",
    .probe = dsk__cuda_probe_sm90,
    .init = dsk__cuda_init_sm90,
    DSK_CUDA_SLOTS,
};

const dsk_backend dsk__backend_cuda_sm120 = {
    .name = "cuda-sm120",
    .description = "portable CUDA kernels built for sm_120a/sm_121a (RTX 50xx, RTX PRO 6000, GB10)",
    .probe = dsk__cuda_probe_sm120,
    .init = dsk__cuda_init_sm120,
    DSK_CUDA_SLOTS,
};
