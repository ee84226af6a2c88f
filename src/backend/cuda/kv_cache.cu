/* kv_cache.cu - the CUDA cache writer (dsk_kv_write) and dequantising
 * reader (dsk_kv_read) for Format A (656 B), Format B (584 B + footer) and
 * the indexer key format (132 B). Bytes are identical to the CPU writer:
 * IEEE division (__fdiv_rn), scales from fp32 bits, cvt.rn.satfinite. */
#include <cuda_fp8.h>

#include "cuda_common.cuh"

namespace {

/* the e4m3 codecs the kernels call (tests/emu_kv.cc gives them the same
 * names over src/format's bit-exact codecs) */
__device__ __forceinline__ uint8_t e4m3_encode(float x) {
  return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float e4m3_decode(uint8_t b) {
  __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
  return __half2float(*reinterpret_cast<__half *>(&h));
}

#include "kv_cache_kernels.cuh"

}  // namespace

extern "C" dsk_status dsk__cuda_kv_write(dsk_ctx *ctx, const dsk_kv_write_desc *d) {
  if (d->N == 0) return DSK_STATUS_OK;
  DSK_CUDA_TRY("kv_write", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, d->stream);
  unsigned long long *cnt = (unsigned long long *)d->counters;
  const uint16_t *lat = d->latent, *rope = d->rope;
  uint8_t *base = (uint8_t *)d->cache.base;
  const dim3 grid((unsigned)d->N);
  switch (d->format) {
    case DSK_KV_FORMAT_A656:
      kv_write_kernel<1><<<grid, 128, 0, s>>>(lat, d->latent_stride, rope, d->rope_stride, d->slot_mapping, base,
                                              d->cache.pbs, d->cache.page_stride, d->cache.num_pages, d->scale_rule, cnt);
      break;
    case DSK_KV_FORMAT_B584:
      kv_write_kernel<2><<<grid, 224, 0, s>>>(lat, d->latent_stride, rope, d->rope_stride, d->slot_mapping, base,
                                              d->cache.pbs, d->cache.page_stride, d->cache.num_pages, d->scale_rule, cnt);
      break;
    case DSK_KV_FORMAT_IDXK132:
      kv_write_kernel<3><<<grid, 32, 0, s>>>(lat, d->latent_stride, rope, d->rope_stride, d->slot_mapping, base,
                                             d->cache.pbs, d->cache.page_stride, d->cache.num_pages, d->scale_rule, cnt);
      break;
    default:
      return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_write: unknown format %d", (int)d->format);
  }
  DSK_CUDA_LAUNCHED("kv_write");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_kv_read(dsk_ctx *ctx, const dsk_kv_read_desc *d) {
  if (d->N == 0) return DSK_STATUS_OK;
  DSK_CUDA_TRY("kv_read", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, d->stream);
  unsigned long long *cnt = (unsigned long long *)d->counters;
  const uint8_t *base = (const uint8_t *)d->cache.base;
  const dim3 grid((unsigned)d->N);
  switch (d->format) {
    case DSK_KV_FORMAT_A656:
      kv_read_kernel<1><<<grid, 128, 0, s>>>(d->slots, base, d->cache.pbs, d->cache.page_stride, d->cache.num_pages,
                                             d->out, d->out_stride, cnt);
      break;
    case DSK_KV_FORMAT_B584:
      kv_read_kernel<2><<<grid, 128, 0, s>>>(d->slots, base, d->cache.pbs, d->cache.page_stride, d->cache.num_pages,
                                             d->out, d->out_stride, cnt);
      break;
    case DSK_KV_FORMAT_IDXK132:
      kv_read_kernel<3><<<grid, 128, 0, s>>>(d->slots, base, d->cache.pbs, d->cache.page_stride, d->cache.num_pages,
                                             d->out, d->out_stride, cnt);
      break;
    default:
      return dsk__fail(DSK_STATUS_INVALID_ARG, "kv_read: unknown format %d", (int)d->format);
  }
  DSK_CUDA_LAUNCHED("kv_read");
  return DSK_STATUS_OK;
}
