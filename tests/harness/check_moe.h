/* check_moe.h - backend-vs-reference check of the MoE path (spec/mxfp4-moe.md
 * §8; docs/moe.md). Declared here until the lead merges it into harness.h and
 * wires it into `dsk check` (--only moe). */
#ifndef DSK_CHECK_MOE_H
#define DSK_CHECK_MOE_H

#include "harness.h"

/* check_moe.c: on ctx's backend (data moved with dsk_mem_*), per case:
 *  - dsk_mx_quantize and dsk_fp8_quantize_1x128 (with NaN blocks) and
 *    dsk_sf_pack_mn_major bit-exact against the cpu-ref;
 *  - dsk_moe_run on DSv4-Flash, DSv4-Pro and GLM-5.1 geometry against the
 *    cpu-ref (diff <= 0.01, warning above 1e-4; skipped when ctx is the
 *    cpu-ref itself) and against an fp64 forward written in check_moe.c
 *    from the checkpoint tensors (diff <= 0.01).
 * quick: H 256..384, I 128..384, E 8..16, T 1, 3, 64 (a few seconds on 2
 * cores); full: production H and I, EP slices of 8 local experts of the full
 * router width (the gate bias steers every token to them), T 1, 8 (fp64
 * oracle) and 64 (vs cpu-ref only).
 * A backend that answers DSK_STATUS_UNSUPPORTED (the CUDA MoE kernels are
 * not built yet) is reported as skipped, not failed. Returns 0 on success. */
int dsk_check_moe(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c);

#endif
