/* gpu_cvt.cu - the hardware conversions the CUDA kernels rely on for
 * bit-exact results, checked on the device against the format library
 * (src/format/format.h) over every input:
 *  - cvt.rn.satfinite.e4m3x2.f32 (dsk_ptx::f32x2_to_e4m3x2): every finite
 *    fp32, in both byte positions, gives the code of dsk_fmt_e4m3_from_f32
 *    (the MoE 1x128 quantizers and the SwiGLU requantization, DSK_MOE_CVT_HW);
 *  - cvt.rn.satfinite.e4m3x2.f16x2 (dsk_ptx::f16x2_to_e4m3x2): every finite
 *    f16, the same;
 *  - v * pow2_inv_from_byte(e) (moe_common.cuh) equals v / 2^(e-127) bit for
 *    bit for every scale byte e in [1, 254] and 2^20 fp32 v spread over
 *    every binade (subnormal results included: the build keeps denormals).
 * The CPU emulation (tests/emu/cuda_emu.h) models these instructions with
 * the format library, so only this test ties the emulated kernels to the
 * hardware. Without a CUDA device (CI) it says so and passes with nothing
 * checked; the GPU suite runs it (ctest against cuda:0). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/ptx.cuh"
#include "format/format.h"
#include "format/mxfp4.h"

namespace {
#include "backend/cuda/moe_common.cuh" /* pow2_inv_from_byte: the kernels' own */
}  // namespace

struct Bad {
  unsigned long long n, checked; /* mismatches; inputs checked (pow2_kernel) */
  uint32_t first[4]; /* input bits of the first mismatches (in no order) */
};

__device__ void note(Bad *b, uint32_t a) {
  const unsigned long long i = atomicAdd(&b->n, 1ull);
  if (i < 4) b->first[i] = a;
}

/* every a in [lo, lo + n): the finite fp32 a (low byte) and a with its sign
 * flipped (high byte) */
__global__ void f32_kernel(uint64_t lo, uint64_t n, Bad *bad) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    const uint32_t a = (uint32_t)(lo + i);
    if ((a & 0x7FFFFFFFu) >= 0x7F800000u) continue; /* non-finite: the kernels code those themselves */
    const float x = __uint_as_float(a), y = __uint_as_float(a ^ 0x80000000u);
    const uint32_t w = dsk_ptx::f32x2_to_e4m3x2(x, y);
    if ((w & 0xFFu) != dsk_fmt_e4m3_from_f32(x) || (w >> 8) != dsk_fmt_e4m3_from_f32(y)) note(bad, a);
  }
}

__global__ void f16_kernel(Bad *bad) {
  const uint32_t a = blockIdx.x * blockDim.x + threadIdx.x; /* 0 .. 65535 */
  if (a > 0xFFFFu || (a & 0x7C00u) == 0x7C00u) return;       /* non-finite f16 */
  const uint32_t h = a | ((a ^ 0x8000u) << 16);
  const uint32_t w = dsk_ptx::f16x2_to_e4m3x2(h);
  const float x = __half2float(__ushort_as_half((unsigned short)a));
  const float y = __half2float(__ushort_as_half((unsigned short)(a ^ 0x8000u)));
  if ((w & 0xFFu) != dsk_fmt_e4m3_from_f32(x) || ((w >> 8) & 0xFFu) != dsk_fmt_e4m3_from_f32(y)) note(bad, a);
}

/* scale byte e = 1 + blockIdx.y; v: 2^20 patterns, every binade */
__global__ void pow2_kernel(Bad *bad) {
  const uint32_t e = 1u + blockIdx.y;
  const float s = __uint_as_float(e << 23);
  const float inv = pow2_inv_from_byte(e);
  unsigned long long checked = 0;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (1u << 20); i += gridDim.x * blockDim.x) {
    const uint32_t a = (i * 0x9E3779B1u) ^ (i << 12); /* spread over the 32 bits */
    if ((a & 0x7FFFFFFFu) >= 0x7F800000u) continue;
    const float v = __uint_as_float(a);
    checked++;
    if (__float_as_uint(v * inv) != __float_as_uint(v / s)) note(bad, a ^ (e << 24));
  }
  atomicAdd(&bad->checked, checked);
}

static int check(const char *what, cudaError_t e) {
  if (e != cudaSuccess) fprintf(stderr, "gpu_cvt: %s: %s\n", what, cudaGetErrorString(e));
  return e != cudaSuccess;
}

static int report(const char *what, const Bad &b, unsigned long long checked) {
  if (b.n) {
    fprintf(stderr, "FAIL: gpu_cvt: %s: %llu of %llu inputs differ (e.g. 0x%08x)\n", what, b.n, checked, b.first[0]);
    return 1;
  }
  printf("gpu_cvt: %s: %llu inputs, all equal to the format library\n", what, checked);
  return 0;
}

int main() {
  int n = 0;
  const cudaError_t de = cudaGetDeviceCount(&n);
  if (de != cudaSuccess || n == 0) {
    /* asked to test a GPU (the GPU suite sets DSK_TEST_DEVICE=cuda:N): not finding one fails */
    const char *want = getenv("DSK_TEST_DEVICE");
    if (want && strncmp(want, "cuda", 4) == 0) {
      fprintf(stderr, "FAIL: gpu_cvt: DSK_TEST_DEVICE=%s but no CUDA device: %s\n", want,
              de != cudaSuccess ? cudaGetErrorString(de) : "none found");
      return 1;
    }
    printf("gpu_cvt: no CUDA device: nothing checked\n");
    return 0;
  }
  Bad *d = nullptr;
  Bad h[3] = {};
  if (check("cudaMalloc", cudaMalloc(&d, 3 * sizeof(Bad))) || check("cudaMemset", cudaMemset(d, 0, 3 * sizeof(Bad))))
    return 1;
  const uint64_t chunk = 1ull << 30;
  for (uint64_t lo = 0; lo < (1ull << 32); lo += chunk) f32_kernel<<<4096, 256>>>(lo, chunk, d);
  f16_kernel<<<256, 256>>>(d + 1);
  pow2_kernel<<<dim3(64, 254), 256>>>(d + 2);
  if (check("kernels", cudaGetLastError()) || check("sync", cudaDeviceSynchronize()) ||
      check("cudaMemcpy", cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost)))
    return 1;
  cudaFree(d);
  int fails = report("cvt.rn.satfinite.e4m3x2.f32, every finite fp32 (both bytes)", h[0], 2ull * 0xFF000000ull);
  fails += report("cvt.rn.satfinite.e4m3x2.f16x2, every finite f16 (both halves)", h[1], 2ull * 63488ull);
  fails += report("v * pow2_inv_from_byte(e) == v / 2^(e-127), e in [1, 254] (the finite v of 2^20 patterns each)",
                  h[2], h[2].checked);
  return fails ? 1 : 0;
}
