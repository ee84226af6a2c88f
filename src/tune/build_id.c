/* build_id.c - dsk_kernel_build_id (autotune.md A14): per-op hashes of the
 * kernel sources, compiler ids/versions, CUDA architectures and flags,
 * computed by CMake at configure time into dsk_build_info.h. */
#include "tuner.h"

#ifdef DSK_HAVE_BUILD_INFO_H
#include "dsk_build_info.h"
#endif
/* Builds without the generated header (none of CMake's) still work: their
 * ids never match a file written by a real build. */
#ifndef DSK_KERNEL_BUILD_ID_SPARSE_MLA_DECODE
#define DSK_KERNEL_BUILD_ID_SPARSE_MLA_DECODE "0000000000000000"
#endif
#ifndef DSK_KERNEL_BUILD_ID_MHC_PRENORM
#define DSK_KERNEL_BUILD_ID_MHC_PRENORM "0000000000000000"
#endif
#ifndef DSK_KERNEL_BUILD_ID_MOE_GEMM
#define DSK_KERNEL_BUILD_ID_MOE_GEMM "0000000000000000"
#endif
#ifndef DSK_KERNEL_BUILD_ID_MOE_DENSE_GEMM
#define DSK_KERNEL_BUILD_ID_MOE_DENSE_GEMM "0000000000000000"
#endif

const char *dsk_kernel_build_id(dsk_op op) {
  switch (op) {
    case DSK_OP_SPARSE_MLA_DECODE: return DSK_KERNEL_BUILD_ID_SPARSE_MLA_DECODE;
    case DSK_OP_MHC_PRENORM: return DSK_KERNEL_BUILD_ID_MHC_PRENORM;
    case DSK_OP_MOE_GEMM: return DSK_KERNEL_BUILD_ID_MOE_GEMM;
    case DSK_OP_MOE_DENSE_GEMM: return DSK_KERNEL_BUILD_ID_MOE_DENSE_GEMM;
    default: return NULL;
  }
}
