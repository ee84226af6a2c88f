/* slot_list_kernels.cuh - the device code of the GPU slot-list builders
 * (slot_list.cu; spec/indices.md): one warp per row, identical results to
 * the CPU builders. Included by slot_list.cu inside its anonymous namespace;
 * tests/emu_slots.cc includes it under the CPU emulation of
 * tests/emu/cuda_emu.h. */

__device__ __forceinline__ int32_t map_entry(const int32_t *__restrict__ bt_row, int64_t max_blocks, int64_t i,
                                             int64_t P) {
  if (i < 0) return -1;
  const int64_t b = i / P;
  if (b >= max_blocks) return -1;
  const int32_t page = bt_row[b];
  if (page < 0) return -1;
  const int64_t s = (int64_t)page * P + i % P;
  return s > 2147483647 ? -1 : (int32_t)s;
}

__global__ void slot_list_kernel(int kind, int64_t T, const int32_t *__restrict__ req, const int32_t *__restrict__ pos,
                                 const int32_t *__restrict__ slot_mapping, const int32_t *__restrict__ bt,
                                 int64_t bt_stride, int64_t bt_rows, int64_t max_blocks, int64_t P,
                                 const int32_t *__restrict__ idx, int64_t idx_stride, int64_t K, int64_t window,
                                 int64_t ratio, int32_t *__restrict__ out, int64_t out_stride, int64_t width,
                                 int32_t *__restrict__ lens, unsigned long long *__restrict__ counters) {
  const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= T) return;
  int32_t *o = out + t * out_stride;
  const int32_t r = req[t];
  const bool pad = slot_mapping[t] < 0;
  const bool bad_req = !pad && (r < 0 || (int64_t)r >= bt_rows);
  if (pad || bad_req) {
    for (int64_t c = lane; c < width; c += 32) o[c] = -1;
    if (lane == 0) {
      if (lens) lens[t] = 0;
      if (bad_req && counters) atomicAdd(&counters[0], 1ull);
    }
    return;
  }
  const int32_t *row = bt + (int64_t)r * bt_stride;
  if (kind == DSK_SLOTS_TOPK) {
    int cnt = 0;
    for (int64_t c = lane; c < width; c += 32) {
      int32_t v = map_entry(row, max_blocks, idx[t * idx_stride + c], P);
      o[c] = v;
      cnt += v >= 0;
    }
    for (int off = 16; off; off >>= 1) cnt += __shfl_xor_sync(0xffffffffu, cnt, off);
    if (lane == 0 && lens) lens[t] = cnt;
  } else if (kind == DSK_SLOTS_C4A) {
    int64_t n = 0;
    for (int64_t c0 = 0; c0 < width; c0 += 32) {
      const int64_t c = c0 + lane;
      int32_t v = c < width ? map_entry(row, max_blocks, idx[t * idx_stride + c], P) : -1;
      const unsigned m = __ballot_sync(0xffffffffu, v >= 0);
      if (v >= 0) o[n + __popc(m & ((1u << lane) - 1u))] = v;
      n += __popc(m);
    }
    for (int64_t c = n + lane; c < width; c += 32) o[c] = -1;
    if (lane == 0 && lens) lens[t] = (int32_t)n;
  } else {
    const int64_t p = pos[t];
    int64_t len, start = 0;
    if (p < 0) {
      len = 0;
    } else if (kind == DSK_SLOTS_SWA) {
      start = p - window + 1 > 0 ? p - window + 1 : 0;
      len = p + 1 < window ? p + 1 : window;
    } else {
      len = (p + 1) / ratio;
      if (len > width) len = width;
    }
    for (int64_t c = lane; c < width; c += 32) o[c] = c < len ? map_entry(row, max_blocks, start + c, P) : -1;
    if (lane == 0 && lens) lens[t] = (int32_t)len;
  }
}
