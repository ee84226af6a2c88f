/* slot_list_kernels.cuh - the device code of the GPU slot-list builders
 * (slot_list.cu; spec/indices.md): one CTA per row, identical results to
 * the CPU builders. Included by slot_list.cu inside its anonymous namespace;
 * tests/emu_slots.cc includes it under the CPU emulation of
 * tests/emu/cuda_emu.h. */

#ifndef DSK_SLOTS_SHARED
#define DSK_SLOTS_SHARED __shared__ /* the emulation's: static (one CTA at a time) */
#endif

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

/* A padding row (slot_mapping < 0) or one with an out-of-range req:
 * threads i0, i0 + n, ... fill it with -1, i0 == 0 writes len 0 and counts
 * the bad req, and it returns true (the row is done): slot_list_row_kernel's
 * row head. */
__device__ __forceinline__ bool slot_row_skipped(int64_t t, int32_t r, const int32_t *__restrict__ slot_mapping,
                                                 int64_t bt_rows, int32_t *__restrict__ o, int64_t width,
                                                 int32_t *__restrict__ lens, unsigned long long *__restrict__ counters,
                                                 int i0, int n) {
  const bool pad = slot_mapping[t] < 0;
  const bool bad_req = !pad && (r < 0 || (int64_t)r >= bt_rows);
  if (!pad && !bad_req) return false;
  for (int64_t c = i0; c < width; c += n) o[c] = -1;
  if (i0 == 0) {
    if (lens) lens[t] = 0;
    if (bad_req && counters) atomicAdd(&counters[0], 1ull);
  }
  return true;
}

/* One CTA per row (blockDim.x a multiple of 32, <= 1024), the row's
 * entries spread over the CTA and each thread's kSlU entries of a round
 * loaded together. The earlier kernel (until device run 39) gave a row one
 * warp, which walked it 32 entries at a time, each step a dependent pair
 * of loads (the index, then its block-table entry), so a row of 2,048
 * indices cost 64 such round trips; here it is 2 (256 threads). TOPK and the position kinds take entries c = base + u nt + tid
 * (coalesced); C4A takes kSlU consecutive entries a thread, so that a block
 * scan of the per-thread counts keeps the list order. */
constexpr int kSlU = 4;
__device__ __forceinline__ int slot_block_excl_scan(int v, int *s_w, int *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) s_w[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = lane < nw ? s_w[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    if (lane < nw) s_w[lane] = w;
  }
  __syncthreads();
  const int r = incl - v + (warp > 0 ? s_w[warp - 1] : 0);
  *total = s_w[nw - 1];
  __syncthreads(); /* s_w is reused by the next call */
  return r;
}

__global__ void slot_list_row_kernel(int kind, int64_t T, const int32_t *__restrict__ req,
                                     const int32_t *__restrict__ pos, const int32_t *__restrict__ slot_mapping,
                                     const int32_t *__restrict__ bt, int64_t bt_stride, int64_t bt_rows,
                                     int64_t max_blocks, int64_t P, const int32_t *__restrict__ idx,
                                     int64_t idx_stride, int64_t K, int64_t window, int64_t ratio,
                                     int32_t *__restrict__ out, int64_t out_stride, int64_t width,
                                     int32_t *__restrict__ lens, unsigned long long *__restrict__ counters) {
  DSK_SLOTS_SHARED int s_w[32];
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t step = (int64_t)nt * kSlU;
  (void)K;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    int32_t *o = out + t * out_stride;
    const int32_t r = req[t];
    if (slot_row_skipped(t, r, slot_mapping, bt_rows, o, width, lens, counters, tid, nt)) continue; /* block-uniform */
    const int32_t *row = bt + (int64_t)r * bt_stride;
    if (kind == DSK_SLOTS_C4A) {
      const int32_t *in = idx + t * idx_stride;
      int64_t n = 0; /* block-uniform */
      for (int64_t base = 0; base < width; base += step) {
        const int64_t c0 = base + (int64_t)tid * kSlU;
        int32_t iv[kSlU], v[kSlU];
#pragma unroll
        for (int u = 0; u < kSlU; u++) iv[u] = c0 + u < width ? in[c0 + u] : -1;
        int k = 0;
#pragma unroll
        for (int u = 0; u < kSlU; u++) {
          v[u] = map_entry(row, max_blocks, iv[u], P);
          k += v[u] >= 0;
        }
        int tot = 0;
        int64_t at = n + slot_block_excl_scan(k, s_w, &tot);
#pragma unroll
        for (int u = 0; u < kSlU; u++)
          if (v[u] >= 0) o[at++] = v[u];
        n += tot;
      }
      for (int64_t c = n + tid; c < width; c += nt) o[c] = -1;
      if (tid == 0 && lens) lens[t] = (int32_t)n;
      continue;
    }
    /* TOPK: entry c maps index idx[c]; SWA / C128A: entry c < len maps
     * position start + c */
    int64_t len = width, start = 0;
    const int32_t *in = kind == DSK_SLOTS_TOPK ? idx + t * idx_stride : nullptr;
    if (!in) {
      const int64_t p = pos[t];
      if (p < 0) {
        len = 0;
      } else if (kind == DSK_SLOTS_SWA) {
        start = p - window + 1 > 0 ? p - window + 1 : 0;
        len = p + 1 < window ? p + 1 : window;
      } else {
        len = (p + 1) / ratio;
        if (len > width) len = width;
      }
    }
    int cnt = 0;
    for (int64_t base = 0; base < width; base += step) {
      int64_t e[kSlU];
#pragma unroll
      for (int u = 0; u < kSlU; u++) {
        const int64_t c = base + (int64_t)u * nt + tid;
        e[u] = c >= len ? -1 : in ? (int64_t)in[c] : start + c;
      }
      int32_t v[kSlU]; /* every block-table load before the first store */
#pragma unroll
      for (int u = 0; u < kSlU; u++) v[u] = map_entry(row, max_blocks, e[u], P);
#pragma unroll
      for (int u = 0; u < kSlU; u++) {
        const int64_t c = base + (int64_t)u * nt + tid;
        if (c < width) o[c] = v[u];
        cnt += v[u] >= 0;
      }
    }
    if (in) { /* TOPK: the row's length is its count of valid slots */
      int tot = 0;
      (void)slot_block_excl_scan(cnt, s_w, &tot);
      if (tid == 0 && lens) lens[t] = tot;
    } else if (tid == 0 && lens) {
      lens[t] = (int32_t)len;
    }
  }
}
