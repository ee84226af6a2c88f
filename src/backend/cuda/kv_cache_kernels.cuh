/* kv_cache_kernels.cuh - the device code of the CUDA cache writer and
 * reader (kv_cache.cu; spec/kv-cache.md): one block per row, Format A (656
 * B), Format B (584 B + footer) and the indexer key format (132 B), bytes
 * identical to the CPU writer (IEEE division, scales from fp32 bits, the
 * satfinite e4m3 rounding). Included by kv_cache.cu inside its anonymous
 * namespace after the two e4m3 codecs it calls (e4m3_encode, e4m3_decode:
 * the cuda_fp8.h conversions); tests/emu_kv.cc includes it under the CPU
 * emulation of tests/emu/cuda_emu.h with src/format's codecs, which follow
 * the same PTX rounding. */

__device__ __forceinline__ float bf16_to_f32(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

/* Smallest power of two >= r (r > 0 finite, normal), from the fp32 bits. */
__device__ __forceinline__ int pow2_ceil_exp(float r) {
  uint32_t bits = __float_as_uint(r);
  int e = (int)((bits >> 23) & 0xFF);
  return e + ((bits & 0x7FFFFF) != 0);  /* biased exponent of the result */
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ int warp_any_nonfinite(bool bad) { return __any_sync(0xffffffffu, bad); }

/* One block per row; warp w quantises tile w (A: 4 tiles of 128, B: 7 of 64,
 * IDX: 1 of 128); the last warp also copies the rope. */
template <int FMT>
__global__ void kv_write_kernel(const uint16_t *__restrict__ latent, int64_t latent_stride,
                                const uint16_t *__restrict__ rope, int64_t rope_stride,
                                const int32_t *__restrict__ slot_mapping, uint8_t *__restrict__ base, int64_t pbs,
                                int64_t page_stride, int64_t num_pages, int scale_rule,
                                unsigned long long *__restrict__ counters) {
  constexpr int TILE = FMT == 2 ? 64 : 128;
  constexpr int NT = FMT == 1 ? 4 : FMT == 2 ? 7 : 1;
  constexpr int PER = TILE / 32;
  const int64_t n = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int32_t slot = slot_mapping[n];
  if (slot < 0) return;
  if ((int64_t)slot >= num_pages * pbs) {
    if (threadIdx.x == 0 && counters) atomicAdd(&counters[0], 1ull);
    return;
  }
  const int64_t p = slot / pbs, j = slot % pbs;
  uint8_t *pg = base + p * page_stride;
  const uint16_t *x = latent + n * latent_stride + warp * TILE;
  float v[PER];
  float amax = 0.f;
  bool bad = false;
#pragma unroll
  for (int i = 0; i < PER; i++) {
    v[i] = bf16_to_f32(x[lane * PER + i]);
    bad |= !isfinite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  const bool nonfinite = warp_any_nonfinite(bad);
  amax = warp_max(amax);
  uint8_t q[PER];
  if (nonfinite) {
#pragma unroll
    for (int i = 0; i < PER; i++) q[i] = 0x7F;
    if (lane == 0 && counters) atomicAdd(&counters[1], 1ull);
  }
  float s = 1.f;
  int ebyte = 127;
  if (!nonfinite) {
    if (FMT == 1) {
      float r = __fdiv_rn(amax, 448.f);
      if (scale_rule == DSK_SCALE_RAW) {
        s = fmaxf(r, 1.17549435e-38f); /* 2^-126 */
      } else {
        r = fmaxf(r, 1e-4f);
        s = __uint_as_float((uint32_t)pow2_ceil_exp(r) << 23);
      }
    } else {
      float r = __fdiv_rn(fmaxf(amax, 1e-4f), 448.f);
      if (FMT == 3 && scale_rule == DSK_SCALE_RAW) {
        s = r;
      } else {
        ebyte = pow2_ceil_exp(r);
        s = __uint_as_float((uint32_t)ebyte << 23);
      }
    }
#pragma unroll
    for (int i = 0; i < PER; i++) q[i] = e4m3_encode(__fdiv_rn(v[i], s));
  }
  uint8_t *data;
  if (FMT == 1) data = pg + 656 * j;
  else if (FMT == 2) data = pg + 576 * j;
  else data = pg + 128 * j;
#pragma unroll
  for (int i = 0; i < PER; i++) data[warp * TILE + lane * PER + i] = q[i];
  if (lane == 0) {
    if (FMT == 1) {
      *reinterpret_cast<float *>(data + 512 + 4 * warp) = nonfinite ? 1.f : s;
    } else if (FMT == 2) {
      uint8_t *foot = pg + 576 * pbs + 8 * j;
      foot[warp] = (uint8_t)(nonfinite ? 127 : ebyte);
      if (warp == 0) foot[7] = 0;
    } else {
      *reinterpret_cast<float *>(pg + 128 * pbs + 4 * j) = nonfinite ? 1.f : s;
    }
  }
  if (FMT != 3 && warp == NT - 1) {
    uint16_t *dst = reinterpret_cast<uint16_t *>(data + (FMT == 1 ? 528 : 448));
    const uint16_t *src = rope + n * rope_stride;
    dst[lane] = src[lane];
    dst[lane + 32] = src[lane + 32];
  }
}

template <int FMT>
__global__ void kv_read_kernel(const int32_t *__restrict__ slots, const uint8_t *__restrict__ base, int64_t pbs,
                               int64_t page_stride, int64_t num_pages, float *__restrict__ out, int64_t out_stride,
                               unsigned long long *__restrict__ counters) {
  constexpr int DIM = FMT == 1 ? 576 : FMT == 2 ? 512 : 128;
  const int64_t n = blockIdx.x;
  const int32_t slot = slots[n];
  float *o = out + n * out_stride;
  if (slot < 0 || (int64_t)slot >= num_pages * pbs) {
    for (int d = threadIdx.x; d < DIM; d += blockDim.x) o[d] = __int_as_float(0x7fc00000);
    if (threadIdx.x == 0 && counters) atomicAdd(&counters[0], 1ull);
    return;
  }
  const int64_t p = slot / pbs, j = slot % pbs;
  const uint8_t *pg = base + p * page_stride;
  for (int d = threadIdx.x; d < DIM; d += blockDim.x) {
    float val;
    if (FMT == 1) {
      const uint8_t *rec = pg + 656 * j;
      if (d < 512) val = e4m3_decode(rec[d]) * *reinterpret_cast<const float *>(rec + 512 + 4 * (d / 128));
      else val = bf16_to_f32(reinterpret_cast<const uint16_t *>(rec + 528)[d - 512]);
    } else if (FMT == 2) {
      const uint8_t *rec = pg + 576 * j;
      if (d < 448) {
        uint8_t e = pg[576 * pbs + 8 * j + d / 64];
        float sc = e == 0 ? 0.f : e == 255 ? __int_as_float(0x7fc00000) : __uint_as_float((uint32_t)e << 23);
        val = e4m3_decode(rec[d]) * sc;
      } else {
        val = bf16_to_f32(reinterpret_cast<const uint16_t *>(rec + 448)[d - 448]);
      }
    } else {
      val = e4m3_decode(pg[128 * j + d]) * *reinterpret_cast<const float *>(pg + 128 * pbs + 4 * j);
    }
    o[d] = val;
  }
}
