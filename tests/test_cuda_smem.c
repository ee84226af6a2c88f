/* test_cuda_smem.c - every configuration of the portable decode kernel fits
 * SM120's opt-in shared memory (101,376 B), computed from the same
 * constants the kernel uses; with the CUDA backend built, so do the mHC
 * kernels and the indexer scores kernel (every n_heads). No GPU needed. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/sparse_mla_layout.h"
#include "testutil.h"

int main(void) {
  tu_counts c = {0, 0};
  const int fmts[2] = {1, 2};
  for (int i = 0; i < 2; i++) {
    const int f = fmts[i];
    const long bytes = DSK_MLA_SMEM_BYTES(f);
    TU_CHECK(&c, bytes <= DSK_SM120_SMEM_LIMIT, "format %d: %ld B > %d", f, bytes, DSK_SM120_SMEM_LIMIT);
    /* every region starts 16-byte aligned (cp.async, 16-byte loads) */
    TU_CHECK(&c, DSK_MLA_OFF_QN(f) % 16 == 0 && DSK_MLA_OFF_QR(f) % 16 == 0 && DSK_MLA_OFF_P(f) % 16 == 0 &&
                     DSK_MLA_OFF_RED(f) % 16 == 0 && DSK_MLA_OFF_VALID(f) % 16 == 0,
             "format %d: misaligned region", f);
    TU_CHECK(&c, DSK_MLA_SREC(f) % 16 == 0, "format %d: record stride %d", f, DSK_MLA_SREC(f));
    /* the staged record holds the whole cache record (A: 656; B: 576 data + 8 scale bytes) */
    TU_CHECK(&c, DSK_MLA_SREC(f) >= (f == 1 ? 656 : 584), "format %d: record stride too small", f);
    /* the fragment-interleaved Q fits its region, and the offset formula is
     * a bijection onto it: every (row, dim pair) gets its own 4-byte word */
    TU_CHECK(&c, DSK_MLA_QIL_FITS(f), "format %d: interleaved Q does not fit", f);
    {
      static unsigned char seen[DSK_MLA_HEADS * 528 * 2 / 4];
      memset(seen, 0, sizeof seen);
      int dup = 0, out = 0;
      for (int row = 0; row < DSK_MLA_HEADS; row++)
        for (int d = 0; d < DSK_MLA_NOPE(f); d += 2) {
          const long off = DSK_MLA_QIL_OFF(row, d);
          if (off < 0 || off % 4 != 0 || off + 4 > (long)DSK_MLA_NOPE(f) / 16 * 512) {
            out++;
            continue;
          }
          dup += seen[off / 4]++ != 0;
        }
      TU_CHECK(&c, dup == 0 && out == 0, "format %d: interleaved Q offsets: %d collide, %d outside", f, dup, out);
    }
    printf("format %s: %ld bytes of shared memory per CTA (limit %d)\n", f == 1 ? "A656" : "B584", bytes,
           DSK_SM120_SMEM_LIMIT);
    /* the 8-warp configuration of the 16-head kernel: only the partial-score
     * region grows */
    const long b8 = DSK_MLA_SMEM_BYTES_W(f, DSK_MLA_WARPS8);
    TU_CHECK(&c, b8 <= DSK_SM120_SMEM_LIMIT, "format %d, 8 warps: %ld B > %d", f, b8, DSK_SM120_SMEM_LIMIT);
    TU_CHECK(&c, DSK_MLA_OFF_RED_W(f, DSK_MLA_WARPS8) % 16 == 0 && DSK_MLA_OFF_VALID_W(f, DSK_MLA_WARPS8) % 16 == 0,
             "format %d, 8 warps: misaligned region", f);
    TU_CHECK(&c, DSK_MLA_OFF_RED_W(f, DSK_MLA_WARPS8) - DSK_MLA_OFF_P(f) ==
                     (long)DSK_MLA_WARPS8 * DSK_MLA_HEADS * DSK_MLA_P_STRIDE * 4,
             "format %d, 8 warps: partial-score region", f);
    printf("format %s: %ld bytes of shared memory per 8-warp CTA (limit %d)\n", f == 1 ? "A656" : "B584", b8,
           DSK_SM120_SMEM_LIMIT);
    /* the 32-head kernel */
    const long b32 = DSK_MLA32_SMEM_BYTES(f);
    TU_CHECK(&c, b32 <= DSK_SM120_SMEM_LIMIT, "format %d, 32 heads: %ld B > %d", f, b32, DSK_SM120_SMEM_LIMIT);
    TU_CHECK(&c, DSK_MLA32_OFF_RAW(f) % 16 == 0 && DSK_MLA32_OFF_KVH(f) % 16 == 0 && DSK_MLA32_OFF_SC(f) % 16 == 0 &&
                     DSK_MLA32_OFF_PS(f) % 16 == 0 && DSK_MLA32_OFF_ALPHA(f) % 16 == 0 &&
                     DSK_MLA32_OFF_VALID(f) % 16 == 0 && DSK_MLA32_OFF_QR(f) % 16 == 0,
             "format %d, 32 heads: misaligned region", f);
    TU_CHECK(&c, DSK_MLA32_QR_STRIDE % 128 == 16 && DSK_MLA32_QR_STRIDE >= 128, "32 heads: Q rope row stride %d",
             DSK_MLA32_QR_STRIDE);
    /* ldmatrix rows of Q and of the f16 records hit distinct banks */
    TU_CHECK(&c, DSK_MLA32_KVH_STRIDE(f) % 128 == 16 && DSK_MLA32_QN_STRIDE(f) % 128 == 16,
             "format %d, 32 heads: row strides %d / %d", f, DSK_MLA32_KVH_STRIDE(f), DSK_MLA32_QN_STRIDE(f));
    /* a converted record holds the nope f16 and the rope bf16; a Q row its
     * nope f16; before the first stage the KVH rows hold Q's rope rows */
    TU_CHECK(&c, DSK_MLA32_KVH_STRIDE(f) >= 2 * DSK_MLA_NOPE(f) + 128 && DSK_MLA32_QN_STRIDE(f) >= 2 * DSK_MLA_NOPE(f) &&
                     DSK_MLA_SUB >= DSK_MLA32_HEADS,
             "format %d, 32 heads: rows too short", f);
    /* the regions follow each other without overlap, in the order of the layout */
    TU_CHECK(&c, DSK_MLA32_OFF_RAW(f) == DSK_MLA32_HEADS * DSK_MLA32_QN_STRIDE(f) &&
                     DSK_MLA32_OFF_KVH(f) - DSK_MLA32_OFF_RAW(f) == DSK_MLA_SUB * DSK_MLA_SREC(f) &&
                     DSK_MLA32_OFF_SC(f) - DSK_MLA32_OFF_KVH(f) == DSK_MLA_SUB * DSK_MLA32_KVH_STRIDE(f) &&
                     DSK_MLA32_OFF_PS(f) - DSK_MLA32_OFF_SC(f) == DSK_MLA32_NT(f) * DSK_MLA_SUB * 4 &&
                     DSK_MLA32_OFF_ALPHA(f) - DSK_MLA32_OFF_PS(f) ==
                         DSK_MLA32_NPS(f) * DSK_MLA32_HEADS * DSK_MLA32_PS_STRIDE * 4 &&
                     DSK_MLA32_NPS(f) == (f == 2 ? 2 : 1) &&
                     DSK_MLA32_SMEM_BYTES(f) - DSK_MLA32_OFF_QR(f) == (f == 2 ? DSK_MLA32_HEADS * DSK_MLA32_QR_STRIDE : 0),
             "format %d, 32 heads: region sizes", f);
    printf("format %s: %ld bytes of shared memory per 32-head CTA (limit %d)\n", f == 1 ? "A656" : "B584", b32,
           DSK_SM120_SMEM_LIMIT);
    /* the FAST form of the 32-head kernel: Q hi / lo e4m3 rows, Q rope rows,
     * two raw stage buffers, two partial-score blocks, per-head rows */
    const long f8 = DSK_MLA32F8_SMEM_BYTES(f);
    TU_CHECK(&c, f8 <= DSK_SM120_SMEM_LIMIT, "format %d, FAST: %ld B > %d", f, f8, DSK_SM120_SMEM_LIMIT);
    TU_CHECK(&c, DSK_MLA32F8_OFF_QL(f) % 16 == 0 && DSK_MLA32F8_OFF_QR(f) % 16 == 0 && DSK_MLA32F8_OFF_RAW(f) % 16 == 0 &&
                     DSK_MLA32F8_OFF_PS(f) % 16 == 0 && DSK_MLA32F8_OFF_ALPHA(f) % 16 == 0 &&
                     DSK_MLA32F8_OFF_VALID(f) % 16 == 0,
             "format %d, FAST: misaligned region", f);
    /* ldmatrix rows of Q and of the raw records hit distinct banks: each
     * stride an odd multiple of 16 bytes (then 8 rows cover the 8 16-byte
     * bank groups); a Q row holds the nope bytes */
    TU_CHECK(&c, DSK_MLA32F8_Q_STRIDE(f) % 32 == 16 && DSK_MLA_SREC(f) % 32 == 16 &&
                     DSK_MLA32F8_Q_STRIDE(f) >= DSK_MLA_NOPE(f),
             "format %d, FAST: row strides %d / %d", f, DSK_MLA32F8_Q_STRIDE(f), DSK_MLA_SREC(f));
    TU_CHECK(&c, DSK_MLA32F8_OFF_QL(f) - DSK_MLA32F8_OFF_QH == DSK_MLA32_HEADS * DSK_MLA32F8_Q_STRIDE(f) &&
                     DSK_MLA32F8_OFF_QR(f) - DSK_MLA32F8_OFF_QL(f) == DSK_MLA32_HEADS * DSK_MLA32F8_Q_STRIDE(f) &&
                     DSK_MLA32F8_OFF_RAW(f) - DSK_MLA32F8_OFF_QR(f) == DSK_MLA32_HEADS * DSK_MLA32_QR_STRIDE &&
                     DSK_MLA32F8_OFF_PS(f) - DSK_MLA32F8_OFF_RAW(f) == 2 * DSK_MLA_SUB * DSK_MLA_SREC(f) &&
                     DSK_MLA32F8_OFF_ALPHA(f) - DSK_MLA32F8_OFF_PS(f) == 2 * DSK_MLA32_HEADS * DSK_MLA32_PS_STRIDE * 4 &&
                     DSK_MLA32F8_SMEM_BYTES(f) - DSK_MLA32F8_OFF_VALID(f) == 2 * DSK_MLA_SUB * 4,
             "format %d, FAST: region sizes", f);
    printf("format %s: %ld bytes of shared memory per FAST 32-head CTA (limit %d)\n", f == 1 ? "A656" : "B584", f8,
           DSK_SM120_SMEM_LIMIT);
    /* its ACCURATE form (DSK_MLA32_REGCVT): f16 Q rows over QH + QL, ldmatrix
     * rows in distinct banks; two CTAs per H200 SM as the ACCURATE kernel */
    TU_CHECK(&c, DSK_MLA32_HEADS * DSK_MLA32F8_QF16_STRIDE(f) <= DSK_MLA32F8_OFF_QR(f) - DSK_MLA32F8_OFF_QH &&
                     DSK_MLA32F8_QF16_STRIDE(f) % 128 == 16 && DSK_MLA32F8_QF16_STRIDE(f) >= 2 * DSK_MLA_NOPE(f) &&
                     2 * (f8 + 1024) <= 228 * 1024,
             "format %d, raw-record ACCURATE form: f16 Q rows (stride %d)", f, DSK_MLA32F8_QF16_STRIDE(f));
    /* the 8-head kernel: per-warp record buffers, fragment-interleaved Q,
     * per-head scales, per-warp valid flags and merge rows; the merge
     * buffer over the records; its record stride (= 32 mod 128) makes the
     * 16-byte QK loads (rows rho(g), rho(g + 1): records 2 apart) and the
     * 8-byte PV loads (records q4 of 4 lanes) conflict-free */
    const long k8 = DSK_MLA8_SMEM_BYTES(f);
    TU_CHECK(&c, k8 <= DSK_SM120_SMEM_LIMIT, "format %d, 8 heads: %ld B > %d", f, k8, DSK_SM120_SMEM_LIMIT);
    TU_CHECK(&c, DSK_MLA8_OFF_Q % 16 == 0 && DSK_MLA8_OFF_QS(f) % 16 == 0 && DSK_MLA8_OFF_VALID(f) % 16 == 0 &&
                     DSK_MLA8_OFF_ML(f) % 16 == 0,
             "format %d, 8 heads: misaligned region", f);
    TU_CHECK(&c, DSK_MLA8_SREC % 128 == 32 && DSK_MLA8_SREC >= (f == 1 ? 656 : 584) && DSK_MLA8_OS_FITS &&
                     DSK_MLA8_QCH(f) == 2 * DSK_MLA_NOPE(f) / 64 + 2 &&
                     DSK_MLA8_OFF_QS(f) - DSK_MLA8_OFF_Q == DSK_MLA8_QCH(f) * 512 &&
                     DSK_MLA8_OFF_Q == DSK_MLA8_WARPS * 2 * DSK_MLA8_UNIT * DSK_MLA8_SREC &&
                     DSK_MLA8_SMEM_BYTES(f) - DSK_MLA8_OFF_ML(f) == 2 * DSK_MLA8_WARPS * DSK_MLA8_HEADS * 4,
             "format %d, 8 heads: region sizes", f);
    printf("format %s: %ld bytes of shared memory per 8-head CTA (limit %d)\n", f == 1 ? "A656" : "B584", k8,
           DSK_SM120_SMEM_LIMIT);
  }
#ifdef DSK_HAVE_CUDA
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_A656, 8) == DSK_MLA8_SMEM_BYTES(1), "A8 mismatch");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_B584, 8) == DSK_MLA8_SMEM_BYTES(2), "B8 mismatch");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_A656, 16) == DSK_MLA_SMEM_BYTES_W(1, DSK_MLA_WARPS8),
           "A mismatch (the 16-head kernel reports its larger, 8-warp configuration)");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_B584, 16) == DSK_MLA_SMEM_BYTES_W(2, DSK_MLA_WARPS8),
           "B mismatch (the 16-head kernel reports its larger, 8-warp configuration)");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_A656, 32) == DSK_MLA32_SMEM_BYTES(1), "A32 mismatch");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_B584, 32) == DSK_MLA32_SMEM_BYTES(2), "B32 mismatch");
  TU_CHECK(&c, dsk__cuda_sparse_mla_fast_smem_bytes(DSK_KV_FORMAT_A656) == DSK_MLA32F8_SMEM_BYTES(1), "A FAST mismatch");
  TU_CHECK(&c, dsk__cuda_sparse_mla_fast_smem_bytes(DSK_KV_FORMAT_B584) == DSK_MLA32F8_SMEM_BYTES(2), "B FAST mismatch");
  TU_CHECK(&c, dsk__cuda_sparse_mla_fast_smem_bytes(DSK_KV_FORMAT_IDXK132) == 0, "indexer format has no FAST kernel");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_A656, 24) == 0, "24 heads per CTA has no kernel");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_IDXK132, 16) == 0, "indexer format has no decode kernel");
  {
    const long mhc = (long)dsk__cuda_mhc_smem_bytes();
    TU_CHECK(&c, mhc > 0 && mhc <= DSK_SM120_SMEM_LIMIT, "mHC: %ld B > %d", mhc, DSK_SM120_SMEM_LIMIT);
    printf("mhc: %ld bytes of shared memory per block at most (limit %d)\n", mhc, DSK_SM120_SMEM_LIMIT);
  }
  {
    long worst = 0;
    for (int h = 1; h <= 128; h++) {
      const long bytes = (long)dsk__cuda_indexer_logits_smem_bytes(h);
      TU_CHECK(&c, bytes > 0 && bytes <= DSK_SM120_SMEM_LIMIT, "indexer_logits n_heads %d: %ld B > %d", h, bytes,
               DSK_SM120_SMEM_LIMIT);
      if (bytes > worst) worst = bytes;
    }
    printf("indexer_logits: %ld bytes of shared memory per CTA at most (n_heads 1..128, limit %d)\n", worst,
           DSK_SM120_SMEM_LIMIT);
  }
#endif
  return tu_finish("test_cuda_smem", &c);
}
