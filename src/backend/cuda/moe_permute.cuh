/* moe_permute.cuh - the permute into the m-grouped contiguous layout
 * (spec/mxfp4-moe.md §4; docs/moe.md): its parameters (PermParams) and its
 * kernels: per-expert counts and starts (perm_count_kernel), stable ranks
 * (perm_rank_kernel), both in one block for small calls
 * (perm_plan_small_kernel), and the row copies with m_indices
 * (perm_rows_live_kernel, perm_rows_kernel). Included by moe_ops.cu inside
 * its anonymous namespace after moe_common.cuh; the kernel list and the
 * contract are in moe_ops.cu's header comment, the launches in its
 * dsk__cuda_moe_permute. */
struct PermParams {
  int64_t T, topk, E, EL, off, K, A, M;
  const int32_t *ids;
  int64_t ids_stride;
  const uint8_t *xq;
  int64_t xq_stride;
  const uint8_t *xsf;
  int64_t xsf_stride;
  uint8_t *A_out;
  int64_t A_stride;
  uint8_t *Asf;
  int64_t Asf_stride;
  int32_t *m_indices;
  int32_t *inv;
  int64_t inv_stride;
  int64_t *cnt;   /* workspace [EL] */
  int64_t *start; /* workspace [EL] */
  unsigned long long *counters;
};

constexpr int kCountThreads = 1024; /* >= DSK_MOE_MAX_EXPERTS: one scan element per thread */
constexpr int kCountBatch = 4;

/* Block-wide (kCountThreads) exclusive scan of round_up(c, A) over thread =
 * expert: the start of this thread's segment. Contains barriers: every
 * thread of the block calls it. */
__device__ __forceinline__ long long seg_start_scan(long long c, int64_t A, long long *s_wsum) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long len = (c + A - 1) / A * A;
  long long v = len;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const long long n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) s_wsum[warp] = v;
  __syncthreads();
  if (warp == 0) {
    long long w = s_wsum[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const long long n = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += n;
    }
    s_wsum[lane] = w;
  }
  __syncthreads();
  return v - len + (warp > 0 ? s_wsum[warp - 1] : 0);
}

/* 1. One block: per-expert counts, inv_perm = -1 for every non-local
 * assignment (-1 ids, bad ids, other ranks' experts), bad ids counted, then
 * start = exclusive scan of round_up(cnt, A). */
__global__ void __launch_bounds__(kCountThreads) perm_count_kernel(PermParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  __shared__ unsigned long long s_cnt[kCountThreads];
  __shared__ long long s_wsum[kCountThreads / 32];
  const int tid = threadIdx.x;
  s_cnt[tid] = 0;
  __syncthreads();
  const int64_t NA = p.T * p.topk;
  long long bad = 0;
  for (int64_t i0 = tid; i0 < NA; i0 += (int64_t)kCountThreads * kCountBatch) {
    int64_t id[kCountBatch];
#pragma unroll
    for (int u = 0; u < kCountBatch; u++) { /* loads first, then the atomics */
      const int64_t i = i0 + (int64_t)u * kCountThreads;
      id[u] = -1;
      if (i < NA) {
        const int64_t t = i / p.topk, k = i - t * p.topk;
        id[u] = p.ids[t * p.ids_stride + k];
      }
    }
#pragma unroll
    for (int u = 0; u < kCountBatch; u++) {
      const int64_t i = i0 + (int64_t)u * kCountThreads;
      if (i >= NA) continue;
      const int64_t t = i / p.topk, k = i - t * p.topk;
      int32_t *ip = p.inv + t * p.inv_stride + k;
      if (id[u] == -1) {
        *ip = -1;
      } else if (id[u] < -1 || id[u] >= p.E) {
        *ip = -1;
        bad++;
      } else {
        const int64_t l = id[u] - p.off;
        if (l >= 0 && l < p.EL)
          atomicAdd(&s_cnt[l], 1ull); /* inv_perm written by perm_rank_kernel */
        else
          *ip = -1;
      }
    }
  }
  if (p.counters && bad) atomicAdd(&p.counters[0], (unsigned long long)bad);
  __syncthreads();
  /* block-wide exclusive scan of len = round_up(cnt, A) over thread = expert */
  const long long c = tid < p.EL ? (long long)s_cnt[tid] : 0;
  const long long excl = seg_start_scan(c, p.A, s_wsum);
  if (tid < p.EL) {
    p.cnt[tid] = c;
    p.start[tid] = excl;
  }
}

/* DSK_MOE_RANK_THREADS (compile-time; default 1024; MoE v18): threads of a
 * rank block; each tile of kRankPer x threads assignments costs a round
 * trip and two barriers, so at prefill (24,576 assignments at DSv4-Flash
 * T 4096) 1024 threads walk 3 tiles where 256 walked 12 (A/B: 256). */
#ifndef DSK_MOE_RANK_THREADS
#define DSK_MOE_RANK_THREADS 1024
#endif
constexpr int kRankThreads = DSK_MOE_RANK_THREADS;
static_assert(kRankThreads % 32 == 0 && kRankThreads <= 1024, "rank block");
constexpr int kRankPer = 8; /* consecutive assignments per thread and tile */

/* 2. One block per local expert l: its assignments in (t, k) order get rows
 * start[l] + rank (rank = a block scan of per-thread match counts). */
__global__ void __launch_bounds__(kRankThreads) perm_rank_kernel(PermParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  __shared__ int s_w[kRankThreads / 32];
  const int64_t l = blockIdx.x;
  const int64_t cnt = p.cnt[l];
  if (cnt == 0) return; /* block-uniform */
  const int64_t start = p.start[l], target = p.off + l;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t NA = p.T * p.topk;
  long long dropped = 0;
  int64_t running = 0; /* identical in every thread */
  for (int64_t base = 0; base < NA && running < cnt; base += (int64_t)kRankThreads * kRankPer) {
    const int64_t i0 = base + (int64_t)tid * kRankPer;
    uint32_t mask = 0;
#pragma unroll
    for (int u = 0; u < kRankPer; u++) {
      const int64_t i = i0 + u;
      if (i < NA) {
        const int64_t t = i / p.topk, k = i - t * p.topk;
        if ((int64_t)p.ids[t * p.ids_stride + k] == target) mask |= 1u << u;
      }
    }
    const int c = __popc(mask);
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += n;
    }
    if (lane == 31) s_w[warp] = incl;
    __syncthreads();
    int pre = 0, tot = 0;
#pragma unroll
    for (int w = 0; w < kRankThreads / 32; w++) {
      const int x = s_w[w];
      pre += w < warp ? x : 0;
      tot += x;
    }
    __syncthreads(); /* s_w is rewritten by the next tile */
    int64_t rank = running + pre + (incl - c);
    for (int u = 0; u < kRankPer; u++) {
      if (!((mask >> u) & 1u)) continue;
      const int64_t i = i0 + u;
      const int64_t t = i / p.topk, k = i - t * p.topk;
      const int64_t row = start + rank++;
      if (row < p.M) {
        p.inv[t * p.inv_stride + k] = (int32_t)row;
      } else {
        p.inv[t * p.inv_stride + k] = -1;
        dropped++;
      }
    }
    running += tot;
  }
  if (p.counters && dropped) atomicAdd(&p.counters[1], (unsigned long long)dropped);
}

/* 1+2 in one block for decode-sized calls (T * topk <= kPermSmallNA): the
 * assignments' local ids staged in shared memory, counts by shared atomics,
 * the same scan, then warp 0 walks them in (t, k) order 32 at a time:
 * __match_any_sync groups the lanes of one expert, a lane's rank is its
 * expert's running count plus the matching lanes below it, and the highest
 * of them adds the group's size to the running count. Same inv_perm, cnt,
 * start and counters as kernels 1 and 2. */
constexpr int kPermSmallNA = 1024;
static_assert(kPermSmallNA <= kCountThreads, "one thread per assignment");
__global__ void __launch_bounds__(kCountThreads) perm_plan_small_kernel(PermParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  __shared__ unsigned long long s_cnt[kCountThreads];
  __shared__ long long s_wsum[kCountThreads / 32];
  __shared__ int s_l[kPermSmallNA];
  __shared__ long long s_start[kCountThreads];
  __shared__ int s_run[kCountThreads];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  s_cnt[tid] = 0;
  s_run[tid] = 0;
  __syncthreads();
  const int NA = (int)(p.T * p.topk); /* <= kPermSmallNA */
  long long bad = 0;
  if (tid < NA) {
    const int64_t t = tid / p.topk, k = tid - t * p.topk;
    const int64_t id = p.ids[t * p.ids_stride + k];
    int l = -1;
    if (id < -1 || id >= p.E) {
      bad = 1;
    } else if (id != -1) {
      const int64_t ll = id - p.off;
      if (ll >= 0 && ll < p.EL) l = (int)ll;
    }
    s_l[tid] = l;
    if (l >= 0) atomicAdd(&s_cnt[l], 1ull);
    else p.inv[t * p.inv_stride + k] = -1;
  }
  bad = __syncthreads_count(bad != 0);
  if (tid == 0 && p.counters && bad) atomicAdd(&p.counters[0], (unsigned long long)bad);
  const long long c = tid < p.EL ? (long long)s_cnt[tid] : 0;
  const long long excl = seg_start_scan(c, p.A, s_wsum);
  if (tid < p.EL) {
    p.cnt[tid] = c;
    p.start[tid] = excl;
    s_start[tid] = excl;
  }
  __syncthreads();
  if (warp != 0) return;
  long long dropped = 0;
  for (int i0 = 0; i0 < NA; i0 += 32) {
    const int i = i0 + lane;
    const int l = i < NA ? s_l[i] : -1;
    const unsigned peers = __match_any_sync(kFull, l);
    if (l >= 0) {
      const int below = __popc(peers & ((1u << lane) - 1u));
      const long long row = s_start[l] + s_run[l] + below;
      const int64_t t = i / p.topk, k = i - t * p.topk;
      if (row < p.M) {
        p.inv[t * p.inv_stride + k] = (int32_t)row;
      } else {
        p.inv[t * p.inv_stride + k] = -1;
        dropped++;
      }
    }
    __syncwarp();
    if (l >= 0 && lane == 31 - __clz(peers)) s_run[l] += __popc(peers); /* the group's highest lane */
    __syncwarp();
  }
  dropped = warp_sum_i((int)dropped);
  if (lane == 0 && p.counters && dropped) atomicAdd(&p.counters[1], (unsigned long long)dropped);
}

constexpr int kRowThreads = 128;

/* The local expert whose segment holds row r: the largest l with start[l]
 * <= r (start[0] = 0, non-decreasing). */
__device__ __forceinline__ int seg_of_row(const PermParams &p, int64_t r) {
  int lo = 0, hi = (int)p.EL - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.start[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* The block copies assignment i (token t, slot k): the fp8 row and its
 * scale bytes to row inv_perm[t, k] (none when it is -1; block-uniform). */
template <bool VEC>
__device__ __forceinline__ void perm_copy_assignment(const PermParams &p, int64_t i, int64_t sfk) {
  const int tid = threadIdx.x;
  const int64_t t = i / p.topk, k = i - t * p.topk;
  const int32_t row = p.inv[t * p.inv_stride + k];
  if (row < 0) return;
  const uint8_t *src = p.xq + t * p.xq_stride;
  uint8_t *dst = p.A_out + (int64_t)row * p.A_stride;
  if (VEC) {
    for (int64_t j = tid; j < p.K / 16; j += kRowThreads) ((uint4 *)dst)[j] = ((const uint4 *)src)[j];
  } else {
    for (int64_t j = tid; j < p.K; j += kRowThreads) dst[j] = src[j];
  }
  for (int64_t j = tid; j < sfk; j += kRowThreads) p.Asf[(int64_t)row * p.Asf_stride + j] = p.xsf[t * p.xsf_stride + j];
}

/* DSK_MOE_PERM_WARP_ROWS (compile-time; default 1; MoE v18): the live-row
 * permute with 16-byte rows copies one assignment per warp, each lane's
 * loads of a row (up to 8 x 16 bytes) issued before its stores; 0 = one
 * assignment per 128-thread block, two 16-byte loads a thread (ncu at
 * DSv4-Flash T 4096: 55 us, 0.5 eligible warps per scheduler) (A/B). */
#ifndef DSK_MOE_PERM_WARP_ROWS
#define DSK_MOE_PERM_WARP_ROWS 1
#endif
constexpr int kPermRowU = 8; /* 16-byte loads a lane has in flight per row */

/* 3 with DSK_MOE_PERMUTE_NO_PAD_FILL: block b copies assignments b,
 * b + grid, ... (as kernel 3; VEC with DSK_MOE_PERM_WARP_ROWS: warp w of
 * block b assignments 4 b + w, + 4 grid, ...), and every thread writes
 * m_indices for rows gid, gid + grid * threads, ... (binary search of
 * start); padding rows of A and their scale bytes are not touched. */
template <bool VEC>
__global__ void __launch_bounds__(kRowThreads) perm_rows_live_kernel(PermParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  const int64_t NA = p.T * p.topk;
  const int64_t sfk = p.K / DSK_FMT_FP8_GROUP;
  const int tid = threadIdx.x;
  for (int64_t r = (int64_t)blockIdx.x * kRowThreads + tid; r < p.M; r += (int64_t)gridDim.x * kRowThreads) {
    const int l = seg_of_row(p, r);
    p.m_indices[r] = r - p.start[l] < p.cnt[l] ? l : -1;
  }
  if (VEC && DSK_MOE_PERM_WARP_ROWS) {
    constexpr int kW = kRowThreads / 32;
    const int lane = tid & 31;
    const int64_t n16 = p.K / 16;
    for (int64_t i = (int64_t)blockIdx.x * kW + (tid >> 5); i < NA; i += (int64_t)gridDim.x * kW) {
      const int64_t t = i / p.topk, k = i - t * p.topk;
      const int32_t row = p.inv[t * p.inv_stride + k];
      if (row < 0) continue; /* warp-uniform */
      const uint4 *src = reinterpret_cast<const uint4 *>(p.xq + t * p.xq_stride);
      uint4 *dst = reinterpret_cast<uint4 *>(p.A_out + (int64_t)row * p.A_stride);
      for (int64_t j0 = 0; j0 < n16; j0 += 32 * kPermRowU) {
        uint4 v[kPermRowU];
#pragma unroll
        for (int u = 0; u < kPermRowU; u++) {
          const int64_t j = j0 + lane + 32 * u;
          if (j < n16) v[u] = src[j];
        }
#pragma unroll
        for (int u = 0; u < kPermRowU; u++) {
          const int64_t j = j0 + lane + 32 * u;
          if (j < n16) dst[j] = v[u];
        }
      }
      for (int64_t j = lane; j < sfk; j += 32) p.Asf[(int64_t)row * p.Asf_stride + j] = p.xsf[t * p.xsf_stride + j];
    }
  } else {
    for (int64_t i = blockIdx.x; i < NA; i += gridDim.x) perm_copy_assignment<VEC>(p, i, sfk);
  }
}

/* 3. Blocks [0, M): row r of A (padding rows and their scale bytes zeroed,
 * m_indices); blocks [M, M + T*topk): assignment copies (the fp8 row and
 * its scale bytes to row inv_perm). Rows and assignments write disjoint
 * rows: a real row is written only by its assignment. */
template <bool VEC>
__global__ void __launch_bounds__(kRowThreads) perm_rows_kernel(PermParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  const int64_t NA = p.T * p.topk, items = p.M + NA;
  const int64_t sfk = p.K / DSK_FMT_FP8_GROUP;
  const int tid = threadIdx.x;
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    if (it < p.M) {
      const int64_t r = it;
      /* r is a real row iff it is inside its segment's first cnt rows */
      const int lo = seg_of_row(p, r);
      const bool real = r - p.start[lo] < p.cnt[lo];
      if (tid == 0) p.m_indices[r] = real ? lo : -1;
      if (!real) {
        uint8_t *a = p.A_out + r * p.A_stride;
        if (VEC) {
          for (int64_t j = tid; j < p.K / 16; j += kRowThreads) ((uint4 *)a)[j] = make_uint4(0, 0, 0, 0);
        } else {
          for (int64_t j = tid; j < p.K; j += kRowThreads) a[j] = 0;
        }
        for (int64_t j = tid; j < sfk; j += kRowThreads) p.Asf[r * p.Asf_stride + j] = 0;
      }
    } else {
      perm_copy_assignment<VEC>(p, it - p.M, sfk);
    }
  }
}
