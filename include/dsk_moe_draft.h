/*
 * dsk_moe_draft.h - the MoE part of the public API (MXFP4 / FP8 experts of
 * DeepSeek-V4 Flash/Pro and GLM-5.1), written in dsk.h style so that it can
 * be merged into include/dsk.h as one section. Until then callers include
 * this header after dsk.h (it includes dsk.h itself).
 *
 * Spec: spec/mxfp4-moe.md (numbers in brackets below are its sections);
 * design notes and the readings dsk chose: docs/moe.md.
 *
 * Everything follows spec/api-conventions.md: one descriptor per op whose
 * first field is struct_size (set it with sizeof, or use the *_init
 * helpers), `void *stream`, plan calls for ops with scratch, caller-owned
 * workspaces, bad descriptor fields -> DSK_STATUS_INVALID_ARG naming the
 * field, bad data inside buffers -> the op's rule + optional counters.
 * Pointers are device pointers for a CUDA context and host pointers for a
 * CPU context, except where a function says "host" (weight preparation and
 * the pure helpers). CUDA contexts currently answer DSK_STATUS_UNSUPPORTED
 * for the run calls (the CUDA MoE kernels are not built yet).
 *
 * Layout vocabulary
 *   fp8      OCP e4m3fn bytes (dsk_e4m3_from_f32 / dsk_e4m3_to_f32)
 *   MXFP4    K-major [rows, K/2] bytes; element 2i in the low nibble of byte
 *            i, 2i+1 in the high nibble; one UE8M0 per (row, 32-block)
 *   raw scales   bytes [rows, sf_k] (row stride sf_stride), K-group g of
 *            row r at r*sf_stride + g
 *   packed scales  (DeepGEMM's MN-major TMA-aligned packed UE8M0 tensor)
 *            int32 words of logical shape (G, MN, Kp), Kp = ceil(sf_k/4),
 *            strides (Kp*T4, 1, T4), T4 = round_up(MN, 4); byte j of word
 *            (g, mn, p) is the scale of K-group 4p+j; every padding byte 0.
 */
#ifndef DSK_MOE_DRAFT_H
#define DSK_MOE_DRAFT_H

#include "dsk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- op ids */
/* Op ids of the MoE family (values of dsk_op once merged). The tuner op
 * `moe.gemm` is DSK_OP_MOE_GEMM, `dense_fp8.gemm` DSK_OP_MOE_DENSE_GEMM. */
#define DSK_OP_MOE_MX_QUANTIZE 40   /* dsk_mx_quantize */
#define DSK_OP_MOE_FP8_QUANTIZE 41  /* dsk_fp8_quantize_1x128 */
#define DSK_OP_MOE_PACK_WORDS 42    /* dsk_pack_ue8m0_words */
#define DSK_OP_MOE_SF_PACK 43       /* dsk_sf_pack_mn_major */
#define DSK_OP_MOE_ROUTE 44         /* dsk_moe_route */
#define DSK_OP_MOE_PERMUTE 45       /* dsk_moe_permute */
#define DSK_OP_MOE_GEMM 46          /* dsk_moe_gemm (tuner op moe.gemm) */
#define DSK_OP_MOE_SWIGLU_QUANT 47  /* dsk_swiglu_quant */
#define DSK_OP_MOE_GATHER 48        /* dsk_moe_gather */
#define DSK_OP_MOE_DENSE_GEMM 49    /* dsk_dense_fp8_gemm (tuner op dense_fp8.gemm) */
#define DSK_OP_MOE_FORWARD 50       /* dsk_moe_run */
/* "mx_quantize", "fp8_quantize_1x128", "pack_ue8m0_words", "sf_pack_mn_major",
 * "moe_route", "moe_permute", "moe_gemm", "swiglu_quant", "moe_gather",
 * "dense_fp8_gemm", "moe_forward"; NULL if not a MoE op id. */
DSK_API const char *dsk_moe_op_name(int op);

/* Limits (structural sizes outside them are DSK_STATUS_INVALID_ARG). */
#define DSK_MOE_MAX_EXPERTS 1024 /* router width E and E_local */
#define DSK_MOE_MAX_TOPK 16
#define DSK_MOE_MX_BLOCK 32      /* MX block: elements per UE8M0 along K */
#define DSK_MOE_FP8_GROUP 128    /* 1x128 activation groups, 128x128 weight blocks */
#define DSK_MOE_MAX_K 131072     /* largest K, N, H, I of the MoE ops */

/* --------------------------------------------------- enums and small types */
typedef enum dsk_moe_in_dtype {
  DSK_MOE_IN_BF16 = 0, /* dsk_bf16 elements */
  DSK_MOE_IN_F32 = 1   /* float elements */
} dsk_moe_in_dtype;

/* Format of prepared expert weights (the B operand of the grouped GEMM). */
typedef enum dsk_moe_wfmt {
  DSK_MOE_W_MXFP4 = 1, /* packed e2m1 [G, N, K/2] + UE8M0 per (row, 32) -> sf_k = K/32 */
  DSK_MOE_W_FP8 = 2    /* e4m3 [G, N, K] + UE8M0 per 128x128 block, broadcast to rows -> sf_k = K/128 */
} dsk_moe_wfmt;

/* A packed scale tensor (layout at the top of this file) and the logical
 * shape it was packed with; the ops check the shape against their own. */
typedef struct dsk_moe_sf {
  const int32_t *words;
  int64_t groups; /* G */
  int64_t mn;     /* MN (rows per group) */
  int64_t sf_k;   /* K-groups per row */
} dsk_moe_sf;

/* ------------------------------------------------ packed-scale geometry */
/* Pure functions (no context; any thread). For sizes < 1 or an index
 * outside its range they return -1. */
/* Kp = ceil(sf_k / 4). */
DSK_API int64_t dsk_sf_packed_kp(int64_t sf_k);
/* Words of a packed tensor: G * Kp * round_up(MN, 4). */
DSK_API int64_t dsk_sf_packed_words(int64_t G, int64_t MN, int64_t sf_k);
/* Word offset of (g, mn, p): g*Kp*T4 + p*T4 + mn [4.2]. The scale of K-group
 * kg is byte (kg % 4) of word dsk_sf_packed_offset(MN, sf_k, g, mn, kg / 4),
 * i.e. byte 4*offset + kg % 4 of the tensor (little-endian words). */
DSK_API int64_t dsk_sf_packed_offset(int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t p);

/* --------------------------------------------------- MXFP4 quantization */
/* Comparison flags of dsk_mx_quantize [2.1]; 0 = the dsk default rule. */
#define DSK_MX_TIES_TO_ZERO 1u /* DeepGEMM's Python element rounding (ties go down) */
#define DSK_MX_SCALE_FLOOR 2u  /* OCP sample scale 2^(floor(log2 amax) - 2), saturating */

/* Per row and 32-element block [2.1]: a block with NaN/inf gets scale byte
 * 0xFF and codes 0 (counters[0] += such blocks); else amax = max(|v|,
 * 1e-4), e = UE8M0 ceil of amax/6 clamped to [1, 254], codes = e2m1 RNE of
 * v / 2^(e-127). Output: q [rows, K/2] MXFP4 bytes (row stride q_stride
 * bytes), scales raw bytes [rows, K/32] (row stride sf_stride bytes).
 * K is a multiple of 32. */
typedef struct dsk_mx_quantize_desc {
  size_t struct_size;
  void *stream;
  int64_t rows;                  /* 0 = no-op */
  int64_t K;                     /* >= 32, multiple of 32 */
  dsk_moe_in_dtype x_dtype;
  const void *x; int64_t x_stride; /* [rows, K], element stride >= K */
  uint8_t *q; int64_t q_stride;  /* [rows, K/2] bytes, stride >= K/2 */
  uint8_t *sf; int64_t sf_stride; /* [rows, K/32] bytes, stride >= K/32 */
  uint32_t flags;                /* DSK_MX_* */
  int64_t *counters;             /* optional: [0] += NaN blocks */
} dsk_mx_quantize_desc;
DSK_API dsk_status dsk_mx_quantize(dsk_ctx *ctx, const dsk_mx_quantize_desc *desc);

/* ----------------------------------------- FP8 1x128 activation quantizer */
/* Per row and 128-column group [2.2]: amax over the finite values, floored
 * at 1e-4; e = UE8M0 ceil of amax/448 clamped to [1, 254]; q = e4m3 RNE of
 * x / 2^(e-127). Non-finite elements become 0x7F (counters[0] += them).
 * Scales go to the raw bytes `sf` [rows, K/128] and/or to the packed
 * tensor `sf_packed` (G 1, MN = rows, sf_k = K/128; padding zeroed); at
 * least one of the two. K is a multiple of 128. */
typedef struct dsk_fp8_quantize_desc {
  size_t struct_size;
  void *stream;
  int64_t rows;                  /* 0 = no-op */
  int64_t K;                     /* >= 128, multiple of 128 */
  dsk_moe_in_dtype x_dtype;
  const void *x; int64_t x_stride; /* [rows, K], element stride >= K */
  uint8_t *q; int64_t q_stride;  /* e4m3 [rows, K], byte stride >= K */
  uint8_t *sf; int64_t sf_stride; /* optional raw bytes [rows, K/128] */
  int32_t *sf_packed;            /* optional packed words (dsk_sf_packed_words(1, rows, K/128)) */
  int64_t *counters;             /* optional: [0] += non-finite elements */
} dsk_fp8_quantize_desc;
DSK_API dsk_status dsk_fp8_quantize_1x128(dsk_ctx *ctx, const dsk_fp8_quantize_desc *desc);

/* ------------------------------------------------------- scale packing */
/* DeepGEMM pack_ue8m0_to_int [4.1]: raw bytes [rows, sf_k] -> int32 words
 * [rows, Kp] (row stride out_stride words): word p = b[4p] | b[4p+1] << 8 |
 * b[4p+2] << 16 | b[4p+3] << 24, missing groups 0x00. */
typedef struct dsk_pack_ue8m0_desc {
  size_t struct_size;
  void *stream;
  int64_t rows;                  /* 0 = no-op */
  int64_t sf_k;                  /* >= 1 */
  const uint8_t *sf; int64_t sf_stride; /* bytes, stride >= sf_k */
  int32_t *out; int64_t out_stride;     /* words, stride >= Kp */
} dsk_pack_ue8m0_desc;
DSK_API dsk_status dsk_pack_ue8m0_words(dsk_ctx *ctx, const dsk_pack_ue8m0_desc *desc);

/* MN-major TMA-aligned packing [4.2] of G groups of raw scales. With
 * gran_mn = 1 group g's row mn is sf + g*sf_group_stride + mn*sf_stride;
 * with gran_mn = 128 (128x128 weight blocks [4.3]) the input has
 * ceil(MN/128) rows per group and row mn takes block row mn/128
 * (broadcast). Output: dsk_sf_packed_words(G, MN, sf_k) words, every
 * padding byte written 0. */
typedef struct dsk_sf_pack_desc {
  size_t struct_size;
  void *stream;
  int64_t G;                     /* >= 1 */
  int64_t MN;                    /* rows per group of the packed tensor, >= 1 */
  int64_t sf_k;                  /* >= 1 */
  int32_t gran_mn;               /* 1 or 128 */
  const uint8_t *sf;             /* raw bytes */
  int64_t sf_stride;             /* bytes between input rows, >= sf_k */
  int64_t sf_group_stride;       /* bytes between groups, >= in_rows * sf_stride (G > 1) */
  int32_t *out;                  /* packed words */
} dsk_sf_pack_desc;
DSK_API dsk_status dsk_sf_pack_mn_major(dsk_ctx *ctx, const dsk_sf_pack_desc *desc);

/* ---------------------------------------------------------- M alignment */
/* Kernel families of the theoretical alignment [5.2]: (max, min, step). */
typedef enum dsk_moe_align_family {
  DSK_MOE_ALIGN_DSK = 0,            /* every dsk CUDA kernel: (128, 64, 64) */
  DSK_MOE_ALIGN_DEEPGEMM_SM120 = 1, /* (128, 64, 64) */
  DSK_MOE_ALIGN_DEEPGEMM_SM100 = 2, /* (240, 32, 16) */
  DSK_MOE_ALIGN_DEEPGEMM_SM90 = 3   /* (128, 128, 1): always 128 */
} dsk_moe_align_family;

/* per = num_groups ? ceil(expected_m / num_groups) : expected_m; bm = max;
 * while (bm > min && bm - step >= per) bm -= step. -1 for an unknown
 * family or negative arguments. */
DSK_API int64_t dsk_moe_theoretical_alignment(dsk_moe_align_family family, int64_t expected_m,
                                              int64_t num_groups);

/* vLLM compute_aligned_M_and_alignment [5.3], host only:
 *   A_used = min(cap, theoretical(M*topk, E_local));
 *   counts given: M_sum = sum_e round_up(counts[e], A_used);
 *   else (graph-safe worst case): active = min(M*topk, E_local),
 *        M_sum = round_up(M*topk + active*(A_used - 1), A_used).
 * M = 0 gives M_sum 0 and the A_used of M = 0. */
typedef struct dsk_moe_align_desc {
  size_t struct_size;
  int64_t M;                     /* tokens, >= 0 */
  int64_t topk;                  /* 1..DSK_MOE_MAX_TOPK */
  int64_t E_local;               /* 1..DSK_MOE_MAX_EXPERTS */
  int64_t cap;                   /* A: 0 = 128; else >= 1 */
  dsk_moe_align_family family;
  const int64_t *counts;         /* host [E_local] rows per local expert, or NULL */
} dsk_moe_align_desc;
DSK_API dsk_status dsk_moe_aligned_m(const dsk_moe_align_desc *desc, int64_t *M_sum, int64_t *A_used);

/* ------------------------------------------------------------- routing */
typedef enum dsk_moe_score {
  DSK_MOE_SCORE_SQRT_SOFTPLUS = 1, /* DSv4: s = sqrt(softplus(logit)) */
  DSK_MOE_SCORE_SIGMOID = 2        /* GLM-5.1: s = sigmoid(logit) */
} dsk_moe_score;

typedef enum dsk_moe_router {
  DSK_MOE_ROUTER_SCORED = 1, /* ids = top-k of s + bias (bias selects only) */
  DSK_MOE_ROUTER_HASH = 2    /* ids = tid2eid[token_id] (DSv4 layers 0-2) */
} dsk_moe_router;

/* Per token [6.1, 6.3]: logits = x . Wg^T (or the given logits), s =
 * score(logits); ids as the router kind says (scored: descending s + bias,
 * equal values -> lower expert id first, a NaN ranks below everything);
 * w = s[ids], w /= max(sum w, 1e-20) (if renormalize), w *= scaling.
 * Bad data: hash tokens whose token_id is outside [0, vocab) get ids -1 and
 * weights 0, table entries outside [0, E) give that slot id -1 and weight 0
 * (counters[0] += such tokens); tokens with a non-finite logit are routed
 * by the order above (counters[1] += such tokens). */
typedef struct dsk_moe_route_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                      /* tokens, 0 = no-op */
  int64_t E;                      /* experts, 1..DSK_MOE_MAX_EXPERTS */
  int64_t topk;                   /* 1..min(E, DSK_MOE_MAX_TOPK) */
  dsk_moe_score score;
  dsk_moe_router router;
  /* logits: either `logits` fp32 [T, E] (stride logits_stride elements), or
   * x bf16 [T, H] with gate_w bf16 [E, H] (logits accumulated in fp32 or
   * better); when `logits` is set x and gate_w are ignored. */
  const float *logits; int64_t logits_stride;
  int64_t H;                      /* with x: >= 1 */
  const dsk_bf16 *x; int64_t x_stride;
  const dsk_bf16 *gate_w;         /* [E, H] contiguous */
  const float *bias;              /* scored: [E] or NULL (zero) */
  const int64_t *tid2eid;         /* hash: [vocab, topk] (checkpoint dtype I64) */
  int64_t vocab;                  /* hash: rows of tid2eid, >= 1 */
  const int32_t *token_ids;       /* hash: [T] */
  int renormalize;                /* 1 for every supported model */
  float routed_scaling_factor;    /* finite, > 0: 1.5 Flash, 2.5 Pro and GLM-5.1 */
  int32_t *ids; int64_t ids_stride; /* out [T, topk] global expert ids */
  float *weights; int64_t weights_stride; /* out [T, topk] */
  int64_t *counters;              /* optional, 2 entries */
} dsk_moe_route_desc;
DSK_API dsk_status dsk_moe_route(dsk_ctx *ctx, const dsk_moe_route_desc *desc);

/* -------------------------------------------------------------- permute */
/* m-grouped contiguous layout [5.1, 5.5]. Assignment (t, k) with global id
 * e in [expert_offset, expert_offset + E_local) goes to local expert
 * l = e - expert_offset, row start_l + rank (segments of round_up(n_l,
 * A_used) rows in expert order, rank by (t, k) ascending). Its fp8 row and
 * raw scale bytes are copied; inv_perm[t, k] = row. Every other row of A
 * (padding inside and after the segments, up to M_sum) and its scale bytes
 * are written 0; m_indices = local expert of real rows, -1 elsewhere.
 * ids == -1 and ids of other ranks (EP) give inv_perm -1 silently; ids < -1
 * or >= E give inv_perm -1 and counters[0] += 1; assignments whose row would
 * be >= M_sum give inv_perm -1 and counters[1] += 1 (M_sum too small for
 * the data: use dsk_moe_aligned_m's worst case). */
typedef struct dsk_moe_permute_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                      /* tokens, 0 = no-op (nothing written) */
  int64_t topk;                   /* 1..DSK_MOE_MAX_TOPK */
  int64_t E;                      /* global experts (range check of ids) */
  int64_t E_local, expert_offset; /* this rank's experts */
  int64_t K;                      /* row width (H), multiple of 128 */
  int64_t A_used;                 /* segment alignment, >= 1 */
  int64_t M_sum;                  /* rows of A, a multiple of A_used */
  const int32_t *ids; int64_t ids_stride;   /* [T, topk] */
  const uint8_t *xq; int64_t xq_stride;     /* e4m3 [T, K], byte stride */
  const uint8_t *xsf; int64_t xsf_stride;   /* raw scales [T, K/128] */
  uint8_t *A; int64_t A_stride;             /* out e4m3 [M_sum, K] */
  uint8_t *Asf; int64_t Asf_stride;         /* out raw scales [M_sum, K/128] */
  int32_t *m_indices;                       /* out [M_sum] */
  int32_t *inv_perm; int64_t inv_perm_stride; /* out [T, topk] */
  void *workspace; int64_t workspace_bytes; /* dsk_moe_permute_plan */
  int64_t *counters;                        /* optional, 2 entries */
} dsk_moe_permute_desc;
DSK_API dsk_status dsk_moe_permute_plan(dsk_ctx *ctx, const dsk_moe_permute_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_moe_permute(dsk_ctx *ctx, const dsk_moe_permute_desc *desc);

/* --------------------------------------------------------- grouped GEMM */
/* moe.gemm tactic (version 1): v[0] BLOCK_M in {64, 128} dividing A_used,
 * v[1] BLOCK_N in {64, 128, 256}, v[2] split-K in {1, 2, 4} with
 * (K / split) % 128 == 0, v[3..5] 0. All zero = tuned entry else the
 * heuristic (autotune.md §1). A given tactic that is invalid for the shape
 * is DSK_STATUS_INVALID_ARG (plan and run), never run. */
#define DSK_MOE_GEMM_TACTIC_VERSION 1

/* D[r] = A[r] . B[e]^T over the contiguous layout [5.1, 7.1], e =
 * m_indices[b*BLOCK_M] for every row r of block b (BLOCK_M of the tactic);
 * blocks whose index is -1 are skipped (D not written); indices < -1 or
 * >= E_local: skipped and counters[0] += 1 per block. Inside a live block,
 * rows whose own m_indices entry is negative (padding) get unspecified
 * values (never read by the gather). Values: A dequantized
 * with its 1x128 scales, B with its MXFP4 per-32 or FP8 per-128 scales; the
 * CPU reference accumulates in fp64, D rounded once to bf16. */
typedef struct dsk_moe_gemm_desc {
  size_t struct_size;
  void *stream;
  int64_t M_sum;                  /* rows, 0 = no-op; multiple of A_used */
  int64_t N, K;                   /* multiples of 128 */
  int64_t E_local;                /* groups of B, 1..DSK_MOE_MAX_EXPERTS */
  int64_t A_used;                 /* the alignment M_sum was built with: a multiple of 64 */
  int64_t expected_m;             /* real rows (T*topk) for the tactic heuristic; 0 = M_sum */
  const uint8_t *A; int64_t A_stride; /* e4m3 [M_sum, K], byte stride */
  dsk_moe_sf sfa;                 /* packed: G 1, MN M_sum, sf_k K/128 */
  const int32_t *m_indices;       /* [M_sum] */
  dsk_moe_wfmt b_fmt;
  const void *B;                  /* [E_local, N, K/2] (MXFP4) or [E_local, N, K] (FP8) bytes, contiguous */
  dsk_moe_sf sfb;                 /* packed: G E_local, MN N, sf_k K/32 (MXFP4) or K/128 (FP8) */
  dsk_bf16 *D; int64_t D_stride;  /* out bf16 [M_sum, N], element stride */
  dsk_tactic tactic;              /* all zero = tuned / heuristic */
  void *workspace; int64_t workspace_bytes; /* dsk_moe_gemm_plan */
  int64_t *counters;              /* optional, 1 entry */
} dsk_moe_gemm_desc;
DSK_API dsk_status dsk_moe_gemm_plan(dsk_ctx *ctx, const dsk_moe_gemm_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *desc);

/* Dense FP8 x FP8 GEMM with 1x128 activation and 128x128 weight scales
 * (shared experts, dense MLPs): D = A . B^T. Tactic (dense_fp8.gemm,
 * version 1): v[0] BLOCK_M in {16, 32, 64, 128}, v[1], v[2] as moe.gemm. */
#define DSK_DENSE_GEMM_TACTIC_VERSION 1
typedef struct dsk_dense_gemm_desc {
  size_t struct_size;
  void *stream;
  int64_t M;                      /* rows, 0 = no-op */
  int64_t N, K;                   /* multiples of 128 */
  const uint8_t *A; int64_t A_stride; /* e4m3 [M, K] */
  dsk_moe_sf sfa;                 /* packed: G 1, MN M, sf_k K/128 */
  const uint8_t *B;               /* e4m3 [N, K] contiguous */
  dsk_moe_sf sfb;                 /* packed: G 1, MN N, sf_k K/128 */
  dsk_bf16 *D; int64_t D_stride;  /* out bf16 [M, N] */
  dsk_tactic tactic;
  void *workspace; int64_t workspace_bytes;
} dsk_dense_gemm_desc;
DSK_API dsk_status dsk_dense_fp8_gemm_plan(dsk_ctx *ctx, const dsk_dense_gemm_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_dense_fp8_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *desc);

/* ------------------------------------------------------ SwiGLU + quant */
/* Per row r [6.2 step 5]: gate = D1[r, 0:I], up = D1[r, I:2I] (bf16 ->
 * fp32); with limit > 0: g = min(gate, limit), u = clamp(up, -limit,
 * limit); h = silu(g) * u; then the 1x128 quantizer (as
 * dsk_fp8_quantize_1x128) writes q [rows, I] and the scales. With m_indices
 * given, rows whose index is < 0 are written as zeros with scale bytes 0
 * (padding, as dsk_moe_permute writes it). */
typedef struct dsk_swiglu_quant_desc {
  size_t struct_size;
  void *stream;
  int64_t rows;                   /* 0 = no-op */
  int64_t I;                      /* multiple of 128 */
  const dsk_bf16 *D1; int64_t D1_stride; /* [rows, 2I] */
  const int32_t *m_indices;       /* optional [rows] */
  float limit;                    /* swiglu_limit: 10 for DSv4, 0 = no clamp; finite, >= 0 */
  uint8_t *q; int64_t q_stride;   /* out e4m3 [rows, I] */
  uint8_t *sf; int64_t sf_stride; /* optional raw bytes [rows, I/128] */
  int32_t *sf_packed;             /* optional packed (G 1, MN rows, sf_k I/128); one of the two */
  int64_t *counters;              /* optional: [0] += non-finite h elements (quantized to 0x7F) */
} dsk_swiglu_quant_desc;
DSK_API dsk_status dsk_swiglu_quant(dsk_ctx *ctx, const dsk_swiglu_quant_desc *desc);

/* --------------------------------------------------------------- gather */
/* y[t] = bf16(shared[t] + sum_{k ascending, inv_perm[t,k] >= 0}
 * w[t,k] * D2[inv_perm[t,k]]) [5.5 step 4]; the CPU reference accumulates
 * in fp64. inv_perm >= M_sum: skipped, counters[0] += 1. */
typedef struct dsk_moe_gather_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                      /* 0 = no-op */
  int64_t topk;
  int64_t N;                      /* row width (H), >= 1 */
  int64_t M_sum;                  /* rows of D2 */
  const dsk_bf16 *D2; int64_t D2_stride;
  const int32_t *inv_perm; int64_t inv_perm_stride;
  const float *weights; int64_t weights_stride;
  const dsk_bf16 *shared; int64_t shared_stride; /* optional [T, N] */
  dsk_bf16 *y; int64_t y_stride;  /* out [T, N]; must not overlap the inputs */
  int64_t *counters;              /* optional, 1 entry */
} dsk_moe_gather_desc;
DSK_API dsk_status dsk_moe_gather(dsk_ctx *ctx, const dsk_moe_gather_desc *desc);

/* ------------------------------------------------- weight preparation */
/* Checkpoint tensor formats [3.1, 3.3]. */
typedef enum dsk_moe_src_fmt {
  DSK_MOE_SRC_MXFP4 = 1,    /* I8 packed e2m1 [N, K/2] + F8_E8M0 [N, K/32] (DSv4 routed) */
  DSK_MOE_SRC_FP8_E8M0 = 2, /* F8_E4M3 [N, K] + F8_E8M0 [ceil(N/128), K/128] (DSv4 shared) */
  DSK_MOE_SRC_FP8_F32 = 3   /* F8_E4M3 [N, K] + F32 [ceil(N/128), K/128] (GLM-5.1-FP8): re-quantized */
} dsk_moe_src_fmt;

/* Byte sizes of the four prepared tensors of `E` experts with hidden H and
 * per-rank intermediate I_r: [0] W13, [1] packed SF13 (bytes), [2] W2,
 * [3] packed SF2. -1 entries for invalid arguments. */
DSK_API void dsk_moe_weights_bytes(dsk_moe_wfmt fmt, int64_t E, int64_t H, int64_t I_r, int64_t out[4]);

/* Host-side preparation of one layer's experts for one rank [3.2]: W13 =
 * [w1 rows; w3 rows] (gate then up) of rows [r*I_r, (r+1)*I_r), W2 = the
 * matching columns of w2, I_r = I / tp_size; scales packed MN-major
 * (MXFP4: per 32; FP8: 128x128 blocks broadcast to rows). FP8_F32 input is
 * re-quantized to UE8M0 (each 128x128 block dequantized, scale = UE8M0 ceil
 * of max(amax, 1e-4)/448, e4m3 RNE) and logged once: lossy.
 * Validates the input: a 0xFF scale byte, an e4m3 NaN code (0x7F / 0xFF) or
 * a non-finite or non-positive fp32 scale is DSK_STATUS_INVALID_DATA naming
 * tensor, expert, row and value; nothing else is promised about the
 * outputs then. All pointers are host pointers for every context kind
 * (upload the outputs with dsk_mem_upload); ctx is used for logging. */
typedef struct dsk_moe_prepare_desc {
  size_t struct_size;
  dsk_moe_src_fmt src;
  int64_t E_local;                /* experts given, 1..DSK_MOE_MAX_EXPERTS */
  int64_t expert_offset;          /* global id of expert 0 (messages only) */
  int64_t H, I;                   /* checkpoint shapes (full I), multiples of 128 */
  int64_t tp_size, tp_rank;       /* I / tp_size must be a multiple of 128 */
  /* per expert e (arrays of E_local host pointers): w1 / w3 [I, H(/2)],
   * w2 [H, I(/2)], and their scale tensors, row-major as stored. */
  const void *const *w1; const void *const *s1;
  const void *const *w3; const void *const *s3;
  const void *const *w2; const void *const *s2;
  /* outputs (host), sizes from dsk_moe_weights_bytes */
  void *w13; int64_t w13_bytes;
  int32_t *sf13; int64_t sf13_bytes;
  void *w2_out; int64_t w2_bytes;
  int32_t *sf2; int64_t sf2_bytes;
} dsk_moe_prepare_desc;
DSK_API dsk_status dsk_moe_prepare_weights(dsk_ctx *ctx, const dsk_moe_prepare_desc *desc);

/* --------------------------------------------------------- MoE forward */
/* Prepared weights of one layer (outputs of dsk_moe_prepare_weights, in the
 * context's memory): W13 [E, 2I, H/2 or H], SF13 packed (E, 2I, H/32 or
 * H/128), W2 [E, H, I/2 or I], SF2 packed (E, H, I/32 or I/128). */
typedef struct dsk_moe_weights {
  dsk_moe_wfmt fmt;
  int64_t E;                      /* groups: E_local (routed) or 1 (shared) */
  int64_t I;                      /* intermediate per rank (I_r) */
  const void *w13;
  const int32_t *sf13;
  const void *w2;
  const int32_t *sf2;
} dsk_moe_weights;

typedef enum dsk_moe_model {
  DSK_MOE_MODEL_DSV4_FLASH = 1, /* H 4096, I 2048, E 256, top-6, sqrt-softplus, scale 1.5, limit 10, MXFP4 */
  DSK_MOE_MODEL_DSV4_PRO = 2,   /* H 7168, I 3072, E 384, top-6, scale 2.5 */
  DSK_MOE_MODEL_GLM51 = 3       /* H 6144, I 2048, E 256, top-8, sigmoid, scale 2.5, no limit, FP8 */
} dsk_moe_model;

/* Counters of dsk_moe_run (each op's own counters, at these indices). */
#define DSK_MOE_CNT_ROUTE_BAD_TOKEN 0 /* hash tokens with a bad token id or table entry */
#define DSK_MOE_CNT_ROUTE_NONFINITE 1 /* tokens with a non-finite router logit */
#define DSK_MOE_CNT_X_NONFINITE 2     /* non-finite x elements (quantized to 0x7F) */
#define DSK_MOE_CNT_BAD_EXPERT 3      /* given ids < -1 or >= E (skipped) */
#define DSK_MOE_CNT_DROPPED 4         /* assignments beyond M_sum (cannot happen in dsk_moe_run) */
#define DSK_MOE_CNT_GEMM_BAD_INDEX 5  /* GEMM blocks with a bad m_indices value */
#define DSK_MOE_CNT_H_NONFINITE 6     /* non-finite SwiGLU outputs, routed and shared */
#define DSK_MOE_CNT_GATHER_BAD_ROW 7  /* inv_perm entries >= M_sum */
#define DSK_MOE_NUM_COUNTERS 8

/* One MoE layer [6.2, 6.3]: route -> quantize x (1x128) -> aligned M (worst
 * case for T, dsk family, cap align_cap) -> permute -> pack SFA -> FC1 ->
 * SwiGLU (limit) + re-quantize -> FC2 -> shared expert (FP8 dense, same
 * quantized x, shared_limit) -> gather (+ shared) -> y bf16 [T, H].
 * The routing weights are applied in the gather. With ids_in set the
 * router is skipped (ids_in/weights_in are used as given; bad ids are
 * counted). EP: ids outside [expert_offset, expert_offset + E_local) add
 * nothing (the caller sums the ranks); TP: I is per rank (the caller
 * all-reduces y). The workspace is sized by dsk_moe_plan for T_max; a run
 * with T <= T_max needs no more. */
typedef struct dsk_moe_desc {
  size_t struct_size;
  void *stream;
  int64_t T;                      /* tokens, 0 = no-op */
  int64_t T_max;                  /* plan: largest T to serve; 0 = T */
  int64_t H;                      /* hidden, multiple of 128 */
  int64_t E;                      /* global routed experts, 1..DSK_MOE_MAX_EXPERTS */
  int64_t E_local, expert_offset; /* EP slice (E_local = E, offset 0 without EP) */
  int64_t topk;                   /* 1..min(E, DSK_MOE_MAX_TOPK) */
  /* router (ignored when ids_in is set) */
  dsk_moe_router router;
  dsk_moe_score score;
  const dsk_bf16 *gate_w;         /* [E, H] */
  const float *gate_bias;         /* [E] or NULL */
  const int64_t *tid2eid; int64_t vocab; /* hash */
  const int32_t *token_ids;       /* hash: [T] */
  float routed_scaling_factor;
  const int32_t *ids_in; const float *weights_in; /* optional [T, topk] each, contiguous */
  int32_t *ids_out; float *weights_out;           /* optional [T, topk] each, contiguous */
  /* activations */
  const dsk_bf16 *x; int64_t x_stride;            /* [T, H] */
  dsk_bf16 *y; int64_t y_stride;                  /* out [T, H] */
  /* experts */
  dsk_moe_weights routed;         /* E = E_local; I multiple of 128 */
  float swiglu_limit;             /* routed: 10 DSv4, 0 GLM-5.1 */
  dsk_moe_weights shared;         /* fmt DSK_MOE_W_FP8, E 1; w13 NULL = no shared expert */
  float shared_limit;             /* open item: dsk default = swiglu_limit (DSv4 10) */
  int64_t align_cap;              /* A of [5.3]: 0 = 128 */
  dsk_tactic fc1_tactic, fc2_tactic; /* moe.gemm tactics; all zero = tuned / heuristic */
  void *workspace; int64_t workspace_bytes;
  int64_t *counters;              /* optional, DSK_MOE_NUM_COUNTERS entries */
} dsk_moe_desc;

/* Zero the descriptor, set struct_size and the model's constants (H, E,
 * E_local = E, topk, router SCORED, score, scaling, limits, routed.fmt,
 * routed.E, routed.I and the shared expert's fmt/E/I at TP 1). */
DSK_API void dsk_moe_desc_init(dsk_moe_desc *desc, dsk_moe_model model);
/* Workspace bytes for T_max (or T) and the FC1 tactic the run would use. */
DSK_API dsk_status dsk_moe_plan(dsk_ctx *ctx, const dsk_moe_desc *desc, dsk_plan_info *info);
DSK_API dsk_status dsk_moe_run(dsk_ctx *ctx, const dsk_moe_desc *desc);

#ifdef __cplusplus
}
#endif
#endif /* DSK_MOE_DRAFT_H */
