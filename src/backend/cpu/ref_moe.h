/* ref_moe.h - the cpu-ref implementations of the MoE ops (spec/mxfp4-moe.md;
 * docs/moe.md). Internal. Every function takes a descriptor that
 * src/ops/moe.c has validated (sizes >= 1, pointers present, strides large
 * enough) and a resolved tactic where the op has one. They fill the MoE
 * slots of the cpu-ref table (cpu_ref.c); src/ops/moe.c reaches them
 * through ctx->backend, except dsk__ref_moe_permute_workspace, which it
 * calls for the permute workspace size. */
#ifndef DSK_CPU_REF_MOE_H
#define DSK_CPU_REF_MOE_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ref_moe.c */
dsk_status dsk__ref_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *d);
dsk_status dsk__ref_fp8_quantize(dsk_ctx *ctx, const dsk_fp8_quantize_desc *d);
dsk_status dsk__ref_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *d);
dsk_status dsk__ref_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *d);
dsk_status dsk__ref_moe_route(dsk_ctx *ctx, const dsk_moe_route_desc *d);
/* Workspace of one permute: two int64 arrays of E_local. */
int64_t dsk__ref_moe_permute_workspace(const dsk_ctx *ctx, const dsk_moe_permute_desc *d);
dsk_status dsk__ref_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *d);
dsk_status dsk__ref_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *d);
dsk_status dsk__ref_moe_gather(dsk_ctx *ctx, const dsk_moe_gather_desc *d);

/* ref_moe_gemm.c (fp64 accumulation; no workspace) */
dsk_status dsk__ref_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *d, const dsk_tactic *t);
dsk_status dsk__ref_dense_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *d, const dsk_tactic *t);

#ifdef __cplusplus
}
#endif
#endif
