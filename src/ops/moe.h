/* moe.h - internal helpers of the MoE ops (src/ops/moe.c, moe_gemm.c,
 * moe_forward.c, moe_prepare.c). Not public API. */
#ifndef DSK_OPS_MOE_H
#define DSK_OPS_MOE_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Validation of any MoE op's descriptor (op = DSK_OP_MOE_*), as the run call
 * does it (workspace included), for dsk_op_supported. */
dsk_status dsk__moe_validate(const dsk_ctx *ctx, int op, const void *desc);
/* 1 if backend b has every slot that op needs (DSK_OP_MOE_FORWARD: the
 * slots dsk_moe_run is composed of, which depend on desc), else 0. Call it
 * only with a desc that dsk__moe_validate accepted. */
int dsk__moe_served(const dsk_backend *b, int op, const void *desc);

/* The moe.gemm tactic for a validated shape (wfmt: dsk_moe_wfmt of the
 * weights): desc->tactic checked (forced) or the heuristic of autotune.md
 * §1 (with the workspace-free split rule of docs/moe.md, decision 6);
 * *source gets a dsk_tactic_source. */
dsk_status dsk__moe_gemm_resolve_tactic(const dsk_ctx *ctx, const dsk_tactic *given, int wfmt, int64_t A_used,
                                        int64_t N, int64_t K, int64_t E_local, int64_t expected_m, const char *op,
                                        const char *field, dsk_tactic *out, int *source);

/* Byte layout of the dsk_moe_run workspace for T tokens. */
typedef struct dsk__moe_ws {
  int64_t M_sum, A_used;
  int64_t ids, w, xq, xsf, A, Asf, mind, inv, sfa, D, sfa2, perm, sfx, S1, S2, ssf2, Sout, gws; /* offsets */
  int64_t perm_bytes, gws_bytes; /* gws: split-K partials of the shared expert's GEMMs */
  int64_t total;
} dsk__moe_ws;
/* desc validated up to shapes; T >= 1. */
void dsk__moe_ws_layout(const dsk_ctx *ctx, const dsk_moe_desc *d, int64_t T, dsk__moe_ws *ws);

#ifdef __cplusplus
}
#endif
#endif
