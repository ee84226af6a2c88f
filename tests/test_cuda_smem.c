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
    printf("format %s: %ld bytes of shared memory per CTA (limit %d)\n", f == 1 ? "A656" : "B584", bytes,
           DSK_SM120_SMEM_LIMIT);
  }
#ifdef DSK_HAVE_CUDA
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_A656) == DSK_MLA_SMEM_BYTES(1), "A mismatch");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_B584) == DSK_MLA_SMEM_BYTES(2), "B mismatch");
  TU_CHECK(&c, dsk__cuda_sparse_mla_smem_bytes(DSK_KV_FORMAT_IDXK132) == 0, "indexer format has no decode kernel");
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
