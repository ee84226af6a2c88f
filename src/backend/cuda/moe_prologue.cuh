/* moe_prologue.cuh - dsk_moe_run's decode prologue in one kernel (MoE v10;
 * docs/moe.md "CUDA kernels"): steps 2-4 of the layer (quantize x 1x128,
 * permute into the contiguous layout, pack SFA MN-major) for calls of at
 * most kProMaxNA assignments, where each of those four launches is a few
 * microseconds of latency around almost no work. Included by moe_ops.cu
 * inside its anonymous namespace (after moe_common.cuh) and by
 * tests/emu_moe_prologue.cc under the CPU emulation of tests/emu/cuda_emu.h
 * (only functions of ptx.cuh, no inline PTX).
 *
 * Every block recomputes the plan of the whole call in shared memory (the
 * assignments' local experts, per-expert counts, the exclusive scan of
 * round_up(count, A) and the stable rank of its own assignment), so no
 * block waits for another: block b < NA owns assignment b = (t, k) and
 * writes its inv_perm entry, quantizes token t's row (when the assignment
 * has a row, or k = 0, which also writes the token's xq row and packed
 * scale word for the shared expert) and stores the codes in its A row with
 * the row's scale bytes in the packed SFA; all blocks write m_indices in a
 * grid-stride loop. The bytes are those of the three ops it replaces (the
 * same format functions, the order-free 1x128 amax; the rank is the stable
 * (t, k) order of perm_plan_small_kernel), with the layer's
 * DSK_MOE_PERMUTE_NO_PAD_FILL semantics: padding rows of A and their SFA
 * words are not written (the GEMMs are row-independent and nothing reads
 * them). The raw scale bytes (xsf, Asf) that the unfused chain keeps are
 * not written: only sf_pack read them. Counters: bad ids and dropped rows
 * per assignment (its block), non-finite x values per token (its k = 0
 * block), so the totals equal the unfused chain's. */

constexpr int kProThreads = 512; /* 16 warps: two experts per thread in the scan, a warp per 128-group */
constexpr int kProWarps = kProThreads / 32;
constexpr int kProMaxNA = 256;   /* assignments T * topk served (decode) */
constexpr int kProMaxE = 2 * kProThreads;
static_assert(kProMaxE >= DSK_MOE_MAX_EXPERTS, "two scan elements per thread cover E_local");
static_assert(kProMaxNA <= kProThreads, "one thread per assignment");
/* dynamic shared memory of one block (below 48 KB: no opt-in) */
constexpr int kProSmem = 4 * (2 * kProMaxE + kProMaxNA + 2 * kProWarps);

struct ProParams {
  int64_t T, topk, E, EL, off, H, A, M;
  const int32_t *ids;
  int64_t ids_stride;
  const uint16_t *x; /* bf16 [T, H]: 8-byte aligned rows (the host checks) */
  int64_t x_stride;
  uint8_t *xq;       /* [T, H], row stride H, or NULL (no shared expert) */
  int32_t *sfx;      /* packed words [H/512 rounded up][round_up(T, 4)] of xq, or NULL */
  uint8_t *A_out;    /* [M, H], row stride A_stride (a multiple of 4, 4-byte aligned) */
  int64_t A_stride;
  int32_t *sfa;      /* packed words [H/512 rounded up][round_up(M, 4)] */
  int32_t *m_indices;
  int32_t *inv;
  int64_t inv_stride;
  unsigned long long *cnt_x;    /* += non-finite x values, or NULL */
  unsigned long long *cnt_perm; /* [0] += bad ids, [1] += dropped rows, or NULL */
};

/* The local expert whose segment holds row r (the largest l with
 * s_start[l] <= r; s_start[0] = 0, non-decreasing), as seg_of_row. */
__device__ __forceinline__ int pro_seg_of_row(const int *s_start, int EL, int64_t r) {
  int lo = 0, hi = EL - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (s_start[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* One group of 128 of the warp's token row: lane owns columns 4 lane ..
 * 4 lane + 3 (v: their bf16 as two words). Returns the group's scale byte
 * and the lane's four codes (little-endian in *codes); bad += non-finite. */
__device__ __forceinline__ uint8_t pro_quant_group(uint2 v, uint32_t *codes, int &bad) {
  const float f[4] = {__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u), __uint_as_float(v.y << 16),
                      __uint_as_float(v.y & 0xFFFF0000u)};
  uint8_t q[4];
  const uint8_t e = q128_warp_codes(f, q, bad);
  *codes = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
  return e;
}

/* Byte g % 4 of packed word g / 4 of row r (rows4 = round_up(rows, 4)), and
 * for the row's last group the zero bytes of the groups past ng. */
__device__ __forceinline__ void pro_put_scale(int32_t *words, int64_t rows4, int64_t r, int64_t g, int64_t ng,
                                              uint8_t e) {
  uint8_t *w = reinterpret_cast<uint8_t *>(words + (g >> 2) * rows4 + r);
  w[g & 3] = e;
  if (g == ng - 1)
    for (int j = (int)(g & 3) + 1; j < 4; j++) w[j] = 0;
}

__global__ void __launch_bounds__(kProThreads) moe_prologue_kernel(ProParams p) {
  dsk_ptx::pdl_wait(); /* before any global access (PDL) */
  extern __shared__ __align__(16) uint8_t pro_smem[];
  unsigned *s_cnt = reinterpret_cast<unsigned *>(pro_smem);      /* [kProMaxE] */
  int *s_start = reinterpret_cast<int *>(s_cnt + kProMaxE);       /* [kProMaxE] */
  int *s_l = s_start + kProMaxE;                                  /* [kProMaxNA] */
  int *s_wsum = s_l + kProMaxNA;                                  /* [kProWarps] */
  int *s_part = s_wsum + kProWarps;                               /* [kProWarps] */
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int NA = (int)(p.T * p.topk); /* <= kProMaxNA */
  const int EL = (int)p.EL;
  const int b = (int)blockIdx.x;
  const bool own = b < NA;
  const int64_t t = own ? b / p.topk : 0, k = own ? b - t * p.topk : 0;
  const int64_t ng = p.H / DSK_FMT_FP8_GROUP;

  /* the first groups of the token row, loaded before the plan */
  constexpr int kPre = 4; /* groups per warp held across the plan: ng <= 64 (H <= 8192) in one round */
  uint2 xv[kPre];
  const uint16_t *xrow = p.x + t * p.x_stride;
#pragma unroll
  for (int j = 0; j < kPre; j++) {
    const int64_t g = warp + (int64_t)kProWarps * j;
    xv[j] = own && g < ng ? *reinterpret_cast<const uint2 *>(xrow + g * DSK_FMT_FP8_GROUP + 4 * lane)
                          : make_uint2(0u, 0u);
  }

  /* the plan: local experts of all assignments (-1: an id of -1 or
   * another rank's expert, -2: a bad id), counts */
  s_cnt[tid] = 0u;
  s_cnt[tid + kProThreads] = 0u;
  __syncthreads();
  if (tid < NA) {
    const int64_t tt = tid / p.topk, kk = tid - tt * p.topk;
    const int64_t id = p.ids[tt * p.ids_stride + kk];
    int l = -1;
    if (id < -1 || id >= p.E) {
      l = -2;
    } else if (id != -1) {
      const int64_t ll = id - p.off;
      if (ll >= 0 && ll < p.EL) l = (int)ll;
    }
    s_l[tid] = l;
    if (l >= 0) atomicAdd(&s_cnt[l], 1u);
  }
  __syncthreads();
  /* exclusive scan of round_up(cnt, A) over the experts, two per thread
   * (int: the host takes calls with NA * A < 2^30) */
  const int A = (int)p.A;
  const int c0 = 2 * tid < EL ? (int)s_cnt[2 * tid] : 0;
  const int c1 = 2 * tid + 1 < EL ? (int)s_cnt[2 * tid + 1] : 0;
  const int len0 = (c0 + A - 1) / A * A, len1 = (c1 + A - 1) / A * A;
  int v = len0 + len1;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) s_wsum[warp] = v;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; w++) before += s_wsum[w];
  const int excl = before + v - (len0 + len1);
  s_start[2 * tid] = excl;
  s_start[2 * tid + 1] = excl + len0;
  /* the stable rank of this block's assignment: earlier assignments of its expert */
  const int my_l = own ? s_l[b] : -1;
  const unsigned ball = __ballot_sync(kFull, tid < b && tid < NA && my_l >= 0 && s_l[tid] == my_l);
  if (lane == 0) s_part[warp] = __popc(ball);
  __syncthreads(); /* s_start, s_part */
  int rank = 0;
  for (int w = 0; w < kProWarps; w++) rank += s_part[w];

  int64_t row = -1;
  if (my_l >= 0) {
    const int64_t r = (int64_t)s_start[my_l] + rank;
    row = r < p.M ? r : -1;
  }
  if (own && tid == 0) {
    p.inv[t * p.inv_stride + k] = (int32_t)row;
    if (p.cnt_perm && my_l == -2) atomicAdd(&p.cnt_perm[0], 1ull);
    if (p.cnt_perm && my_l >= 0 && row < 0) atomicAdd(&p.cnt_perm[1], 1ull);
  }

  /* m_indices of every row (grid-stride) */
  for (int64_t r = (int64_t)b * kProThreads + tid; r < p.M; r += (int64_t)gridDim.x * kProThreads) {
    const int l = pro_seg_of_row(s_start, EL, r);
    p.m_indices[r] = r - s_start[l] < (int64_t)s_cnt[l] ? l : -1;
  }
  /* the sfx padding words [T, round_up(T, 4)) */
  const int64_t T4 = (p.T + 3) / 4 * 4, M4 = (p.M + 3) / 4 * 4;
  if (b == 0 && p.sfx) {
    const int64_t kp = (ng + 3) / 4;
    for (int64_t i = tid; i < kp * (T4 - p.T); i += kProThreads) {
      const int64_t pw = i / (T4 - p.T), r = p.T + (i - pw * (T4 - p.T));
      p.sfx[pw * T4 + r] = 0;
    }
  }

  /* quantize token t's row: into A row `row` and, at k = 0 (which counts
   * the row's non-finite values), into xq */
  const bool first = own && k == 0;
  const bool to_x = first && p.xq != nullptr;
  if (!own || (row < 0 && !first)) return; /* block-uniform */
  int bad = 0;
  for (int64_t g0 = 0; g0 < ng; g0 += (int64_t)kProWarps * kPre) {
#pragma unroll
    for (int j = 0; j < kPre; j++) {
      const int64_t g = g0 + warp + (int64_t)kProWarps * j;
      if (g >= ng) break; /* warp-uniform */
      const uint2 xg = g0 == 0 ? xv[j] : *reinterpret_cast<const uint2 *>(xrow + g * DSK_FMT_FP8_GROUP + 4 * lane);
      uint32_t codes;
      int gbad = 0;
      const uint8_t e = pro_quant_group(xg, &codes, gbad);
      const int64_t col = g * DSK_FMT_FP8_GROUP + 4 * lane;
      if (row >= 0) {
        *reinterpret_cast<uint32_t *>(p.A_out + row * p.A_stride + col) = codes;
        if (lane == 0) pro_put_scale(p.sfa, M4, row, g, ng, e);
      }
      if (to_x) {
        *reinterpret_cast<uint32_t *>(p.xq + t * p.H + col) = codes;
        if (lane == 0 && p.sfx) pro_put_scale(p.sfx, T4, t, g, ng, e);
      }
      bad += gbad;
    }
  }
  if (first && p.cnt_x) {
    bad = warp_sum_i(bad);
    if (lane == 0) count_add(p.cnt_x, bad);
  }
}
