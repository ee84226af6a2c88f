/* cuda_common.cuh - helpers for the CUDA backend's .cu files: error
 * conversion, stream choice, small device utilities. */
#ifndef DSK_CUDA_COMMON_CUH
#define DSK_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"
#include "page_divisor.h"

#define DSK_CUDA_TRY(what, call)                                                         \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess)                                                               \
      return dsk__fail(DSK_STATUS_DEVICE, "%s: %s failed: %s (%s)", what, #call,         \
                       cudaGetErrorString(e_), cudaGetErrorName(e_));                    \
  } while (0)

/* After a launch: a launch error becomes DSK_STATUS_DEVICE (no host sync). */
#define DSK_CUDA_LAUNCHED(what)                                                          \
  do {                                                                                   \
    cudaError_t e_ = cudaGetLastError();                                                 \
    if (e_ != cudaSuccess)                                                               \
      return dsk__fail(DSK_STATUS_DEVICE, "%s: kernel launch failed: %s (%s)", what,    \
                       cudaGetErrorString(e_), cudaGetErrorName(e_));                    \
  } while (0)

static inline cudaStream_t dsk__cuda_stream(const dsk_ctx *ctx, void *stream) {
  return stream ? (cudaStream_t)stream : (cudaStream_t)ctx->default_stream;
}

static inline const dsk_cuda_state *dsk__cuda_state(const dsk_ctx *ctx) {
  return (const dsk_cuda_state *)ctx->backend_state;
}

static inline unsigned dsk__ceil_div_u(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }


/* A kernel launch with programmatic stream serialization (programmatic
 * dependent launch, sm_90 and sm_120) when pdl is true: the kernel may
 * start while the previous one on the stream finishes; it must execute
 * griddepcontrol.wait before it touches memory that kernel reads or writes.
 * pdl false: a plain stream dependency (griddepcontrol.wait returns at
 * once). */
template <typename... KArgs, typename... Args>
static inline cudaError_t dsk__launch_dep(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                          cudaStream_t st, Args... args) {
  cudaLaunchConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* The MoE kernels' launches (moe_launch, the GEMMs, the router) use PDL
 * unless built with -DDSK_MOE_PDL=0 (an A/B switch). */
#ifndef DSK_MOE_PDL
#define DSK_MOE_PDL 1
#endif

/* DSK_MOE_SK_PREFETCH (compile-time; default 1; MoE v13): the skinny GEMM
 * kernel (moe_gemm_skinny.cuh) reads m_indices and issues its weight
 * ring's first ST - 1 stages before griddepcontrol.wait, and the SwiGLU and
 * quantize kernels (moe_ops.cu) trigger their dependents right after their
 * own wait. A GEMM after them then starts while they run and streams
 * weights meanwhile. What the GEMM reads before its wait is never written
 * by a kernel that may still run then (the one before it, where that one
 * triggers early, after its own wait: everything older is complete): the
 * weights and their scales are the caller's constants, and the kernels
 * that write m_indices (the permute, the prologue) trigger only at their
 * end. The A rows and their scales are read after the wait (docs/moe.md,
 * "PDL"). 0 = the wait first and no early triggers (the A/B baseline). */
#ifndef DSK_MOE_SK_PREFETCH
#define DSK_MOE_SK_PREFETCH 1
#endif

/* A MoE kernel's launch (moe_ops.cu, moe_route.cu, moe_gemm.cu): PDL
 * unless DSK_MOE_PDL is 0. Each such kernel executes dsk_ptx::pdl_wait()
 * before its first global access (the skinny GEMM: before its first access
 * to memory a running kernel may write, DSK_MOE_SK_PREFETCH above), so the
 * stream order is kept and only the launch latency overlaps the previous
 * kernel's tail. */
template <typename... KArgs, typename... Args>
static inline cudaError_t moe_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                     Args... args) {
  return dsk__launch_dep(DSK_MOE_PDL != 0, kernel, grid, block, smem, st, args...);
}

/* dsk__launch_dep(true, ...) */
template <typename... KArgs, typename... Args>
static inline cudaError_t dsk__launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                          cudaStream_t st, Args... args) {
  return dsk__launch_dep(true, kernel, grid, block, smem, st, args...);
}

#endif
