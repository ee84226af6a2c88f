/* sparse_mla_layout.h - tile constants and the shared-memory layout of the
 * portable sparse MLA decode kernel. Plain C so that host code and a host
 * unit test compute the same numbers the kernel uses (every configuration
 * must fit SM120's 101,376-byte opt-in limit). */
#ifndef DSK_SPARSE_MLA_LAYOUT_H
#define DSK_SPARSE_MLA_LAYOUT_H

#define DSK_MLA_HEADS 16   /* heads per CTA (the m16 rows of mma.sync) */
#define DSK_MLA_WARPS 4    /* warps per CTA */
#define DSK_MLA_THREADS (32 * DSK_MLA_WARPS)
/* The 16-head kernel also runs with 8 warps (each with half the dims of a
 * 4-warp warp) when the grid holds at most one CTA per SM
 * (sparse_mla_decode.cu: use_wide_ctas). */
#define DSK_MLA_WARPS8 8
#define DSK_MLA_SUB 32     /* candidates per pipeline stage */
#define DSK_MLA_CHUNK 64   /* candidates per tactic chunk (2 stages) */
#ifndef DSK_MLA_STAGES
#define DSK_MLA_STAGES 2   /* cp.async pipeline depth (stages of DSK_MLA_SUB candidates) */
#endif

/* Per format (1 = A656, 2 = B584): shared record stride (bytes), Q nope row
 * stride (f16 elements, padded so ldmatrix-free 8-byte loads are
 * conflict-free), nope dims. */
#define DSK_MLA_SREC(f) ((f) == 1 ? 656 : 592)
#define DSK_MLA_NOPE(f) ((f) == 1 ? 512 : 448)
#define DSK_MLA_QN_STRIDE(f) ((f) == 1 ? 528 : 464)
#define DSK_MLA_QR_STRIDE 72 /* bf16 elements per rope row of Q */
/* The 16-head kernel keeps Q's nope dims fragment-interleaved in the QN
 * region: per 16-dim k-step 512 bytes, 16 per lane l = 4g + q (the m16n8k16
 * A fragment of lane l: rows g, g+8, dims 4q..4q+3 of the step in the
 * kernel's K order), so that one 16-byte load gives a0..a3. Byte offset of
 * the f16 pair (dim d, d+1), d even, of tile row `row` (0..15): */
#define DSK_MLA_QIL_OFF(row, d) \
  (((d) >> 4) * 512 + ((((row) & 7) * 4 + (((d) & 15) >> 2)) * 16) + ((((d) >> 1) & 1) * 8) + (((row) >> 3) * 4))
/* it fits the QN region: NOPE / 16 * 512 <= HEADS * QN_STRIDE * 2 */
#define DSK_MLA_QIL_FITS(f) (DSK_MLA_NOPE(f) / 16 * 512 <= DSK_MLA_HEADS * DSK_MLA_QN_STRIDE(f) * 2)
#define DSK_MLA_P_STRIDE 40  /* fp32 per row of the partial-score buffer */

/* Byte offsets of the regions; all multiples of 16. */
#define DSK_MLA_OFF_KV 0
#define DSK_MLA_OFF_QN(f) (DSK_MLA_OFF_KV + DSK_MLA_STAGES * DSK_MLA_SUB * DSK_MLA_SREC(f))
#define DSK_MLA_OFF_QR(f) (DSK_MLA_OFF_QN(f) + DSK_MLA_HEADS * DSK_MLA_QN_STRIDE(f) * 2)
#define DSK_MLA_OFF_P(f) (DSK_MLA_OFF_QR(f) + DSK_MLA_HEADS * DSK_MLA_QR_STRIDE * 2)
/* P: partial scores of each of the nw warps, fp32 [nw][HEADS][P_STRIDE] */
#define DSK_MLA_OFF_RED_W(f, nw) (DSK_MLA_OFF_P(f) + (nw) * DSK_MLA_HEADS * DSK_MLA_P_STRIDE * 4)
/* red: qscale[HEADS] fp32; then valid[STAGES][SUB] int32 */
#define DSK_MLA_OFF_VALID_W(f, nw) (DSK_MLA_OFF_RED_W(f, nw) + DSK_MLA_HEADS * 4)
#define DSK_MLA_SMEM_BYTES_W(f, nw) (DSK_MLA_OFF_VALID_W(f, nw) + DSK_MLA_STAGES * DSK_MLA_SUB * 4)
#define DSK_MLA_OFF_RED(f) DSK_MLA_OFF_RED_W(f, DSK_MLA_WARPS)
#define DSK_MLA_OFF_VALID(f) DSK_MLA_OFF_VALID_W(f, DSK_MLA_WARPS)
#define DSK_MLA_SMEM_BYTES(f) DSK_MLA_SMEM_BYTES_W(f, DSK_MLA_WARPS)

/* ---- the 32-head kernel (tactic heads per CTA 32; sparse_mla_k32.cuh):
 * 8 warps, 32 heads (two m16 tiles) of one query row. Per 32-candidate
 * stage the raw records (one buffer, in flight while the previous stage
 * computes) are converted once to f16 (KVH: nope f16, then the rope bf16),
 * shared by both head tiles and by QK and PV, which read it with ldmatrix.
 * Regions: QN (Q nope f16, pre-scaled per head), RAW, KVH, SC (fp32 tile
 * scales [NT][SUB]), PS (scores, then probabilities, fp32 [32][PS_STRIDE]),
 * ALPHA (per-head rescale of the stage), FAC (per-head output factor),
 * QS (per-head Q pre-scale), VALID ([2][SUB] int32). Format A: Q's rope
 * rows are staged in KVH before the first stage and then live in
 * registers. Format B: QK is split over two dim halves, so PS holds two
 * partial-score blocks (NPS = 2), and Q's rope rows stay in QR (bf16). */
#define DSK_MLA32_HEADS 32
#define DSK_MLA32_WARPS 8
#define DSK_MLA32_THREADS (32 * DSK_MLA32_WARPS)
/* row strides in bytes, = 16 mod 128 so that the 8 rows of an ldmatrix
 * fall in distinct banks */
#define DSK_MLA32_QN_STRIDE(f) (2 * DSK_MLA_NOPE(f) + 16)
#define DSK_MLA32_KVH_STRIDE(f) (2 * DSK_MLA_NOPE(f) + 128 + 16)
#define DSK_MLA32_PS_STRIDE 40 /* fp32 per PS row */
#define DSK_MLA32_NT(f) ((f) == 1 ? 4 : 7) /* scale tiles per record */
#define DSK_MLA32_OFF_QN 0
#define DSK_MLA32_OFF_RAW(f) (DSK_MLA32_OFF_QN + DSK_MLA32_HEADS * DSK_MLA32_QN_STRIDE(f))
#define DSK_MLA32_OFF_KVH(f) (DSK_MLA32_OFF_RAW(f) + DSK_MLA_SUB * DSK_MLA_SREC(f))
#define DSK_MLA32_OFF_SC(f) (DSK_MLA32_OFF_KVH(f) + DSK_MLA_SUB * DSK_MLA32_KVH_STRIDE(f))
#define DSK_MLA32_OFF_PS(f) (DSK_MLA32_OFF_SC(f) + DSK_MLA32_NT(f) * DSK_MLA_SUB * 4)
#define DSK_MLA32_NPS(f) ((f) == 2 ? 2 : 1) /* partial-score blocks in PS */
#define DSK_MLA32_QR_STRIDE 144              /* bytes per Q rope row (64 bf16 + 16) */
#define DSK_MLA32_OFF_ALPHA(f) (DSK_MLA32_OFF_PS(f) + DSK_MLA32_NPS(f) * DSK_MLA32_HEADS * DSK_MLA32_PS_STRIDE * 4)
#define DSK_MLA32_OFF_FAC(f) (DSK_MLA32_OFF_ALPHA(f) + DSK_MLA32_HEADS * 4)
#define DSK_MLA32_OFF_QS(f) (DSK_MLA32_OFF_FAC(f) + DSK_MLA32_HEADS * 4)
#define DSK_MLA32_OFF_VALID(f) (DSK_MLA32_OFF_QS(f) + DSK_MLA32_HEADS * 4)
#define DSK_MLA32_OFF_QR(f) (DSK_MLA32_OFF_VALID(f) + 2 * DSK_MLA_SUB * 4)
#define DSK_MLA32_SMEM_BYTES(f) (DSK_MLA32_OFF_QR(f) + ((f) == 2 ? DSK_MLA32_HEADS * DSK_MLA32_QR_STRIDE : 0))

/* ---- the FAST form of the 32-head kernel (sparse_mla_k32f8.cuh): the
 * same 8 warps and 32 heads, but Q.K and P.V are e4m3 MMAs on the raw cache
 * bytes (two passes for Q and P: hi = e4m3(x), lo = e4m3(x - hi)), so no
 * record is converted and two raw stage buffers fit. Regions: QH, QL (Q
 * nope hi / lo e4m3, pre-scaled per head), QR (Q rope bf16), RAW (two
 * stage buffers of records), PS (two partial-score blocks: QK runs over two
 * dim halves in both formats; the probabilities go to block 0), ALPHA, FAC,
 * QS (per-head factor that undoes Q's pre-scale), VALID ([2][SUB] int32). */
#define DSK_MLA32F8_Q_STRIDE(f) (DSK_MLA_NOPE(f) + 16) /* bytes per e4m3 Q row: an odd multiple of 16 */
/* the kernel's ACCURATE form (RC) keeps Q as f16 rows over QH + QL */
#define DSK_MLA32F8_QF16_STRIDE(f) (2 * DSK_MLA_NOPE(f) + 16)
#define DSK_MLA32F8_OFF_QH 0
#define DSK_MLA32F8_OFF_QL(f) (DSK_MLA32F8_OFF_QH + DSK_MLA32_HEADS * DSK_MLA32F8_Q_STRIDE(f))
#define DSK_MLA32F8_OFF_QR(f) (DSK_MLA32F8_OFF_QL(f) + DSK_MLA32_HEADS * DSK_MLA32F8_Q_STRIDE(f))
#define DSK_MLA32F8_OFF_RAW(f) (DSK_MLA32F8_OFF_QR(f) + DSK_MLA32_HEADS * DSK_MLA32_QR_STRIDE)
#define DSK_MLA32F8_OFF_PS(f) (DSK_MLA32F8_OFF_RAW(f) + 2 * DSK_MLA_SUB * DSK_MLA_SREC(f))
#define DSK_MLA32F8_OFF_ALPHA(f) (DSK_MLA32F8_OFF_PS(f) + 2 * DSK_MLA32_HEADS * DSK_MLA32_PS_STRIDE * 4)
#define DSK_MLA32F8_OFF_FAC(f) (DSK_MLA32F8_OFF_ALPHA(f) + DSK_MLA32_HEADS * 4)
#define DSK_MLA32F8_OFF_QS(f) (DSK_MLA32F8_OFF_FAC(f) + DSK_MLA32_HEADS * 4)
#define DSK_MLA32F8_OFF_VALID(f) (DSK_MLA32F8_OFF_QS(f) + DSK_MLA32_HEADS * 4)
#define DSK_MLA32F8_SMEM_BYTES(f) (DSK_MLA32F8_OFF_VALID(f) + 2 * DSK_MLA_SUB * 4)

/* ---- the 8-head kernel (tactic heads per CTA 8; sparse_mla_k8.cuh): 4
 * warps, 8 heads of one query row, with the MMA roles swapped (candidates
 * are the m16 rows, heads the n8 columns, output dims the m16 rows of PV),
 * so a head group of 8 fills every MMA. Each warp runs its own 16-candidate
 * units through its own two record buffers, softmax state and output
 * accumulators; the warps meet only to stage Q and at the end, where their
 * partial outputs are merged in shared memory (over the record buffers).
 * Regions: KV ([warp][2][UNIT] records of SREC bytes; stride = 32 mod 128 so
 * the fragment loads are conflict-free), Q (fragment-interleaved: 16-byte
 * chunk c of lane l at (c * 32 + l) * 16; QCH chunks), QS (per-head Q
 * pre-scale), VALID ([warp][2][UNIT] int32), ML (per-warp row max and sum of
 * the 8 heads, for the merge). */
#define DSK_MLA8_HEADS 8
#define DSK_MLA8_WARPS 4
#define DSK_MLA8_THREADS (32 * DSK_MLA8_WARPS)
#define DSK_MLA8_UNIT 16   /* candidates per warp step (the m16 rows of QK) */
#define DSK_MLA8_SREC 672  /* staged record stride: >= 656 and = 32 mod 128 */
#define DSK_MLA8_QCH(f) (2 * (DSK_MLA_NOPE(f) / 64) + 2) /* Q chunks per lane: nope 64-dim blocks x 2, rope 2 */
#define DSK_MLA8_OS_STRIDE 516 /* fp32 per (warp, head) row of the merge buffer */
#define DSK_MLA8_OFF_KV 0
#define DSK_MLA8_KV_BYTES (DSK_MLA8_WARPS * 2 * DSK_MLA8_UNIT * DSK_MLA8_SREC)
#define DSK_MLA8_OFF_Q DSK_MLA8_KV_BYTES
#define DSK_MLA8_OFF_QS(f) (DSK_MLA8_OFF_Q + DSK_MLA8_QCH(f) * 32 * 16)
#define DSK_MLA8_OFF_VALID(f) (DSK_MLA8_OFF_QS(f) + DSK_MLA8_HEADS * 4)
#define DSK_MLA8_OFF_ML(f) (DSK_MLA8_OFF_VALID(f) + DSK_MLA8_WARPS * 2 * DSK_MLA8_UNIT * 4)
#define DSK_MLA8_SMEM_BYTES(f) (DSK_MLA8_OFF_ML(f) + 2 * DSK_MLA8_WARPS * DSK_MLA8_HEADS * 4)
/* the merge buffer ([warp][head][OS_STRIDE] fp32) fits over the records */
#define DSK_MLA8_OS_FITS (DSK_MLA8_WARPS * DSK_MLA8_HEADS * DSK_MLA8_OS_STRIDE * 4 <= DSK_MLA8_KV_BYTES)

#endif
