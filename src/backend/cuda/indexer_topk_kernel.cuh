/* indexer_topk_kernel.cuh - the top-k kernels (see indexer_topk.cu for
 * their design): topk_slice_kernel, topk_kernel and the device functions
 * they share. Included inside indexer_topk.cu's anonymous namespace and by
 * tests/emu_topk.cc under the CPU emulation of tests/emu/cuda_emu.h (so
 * only functions of ptx.cuh, no inline PTX other than compiler barriers).
 * Needs backend/indexer_rules.h, dsk.h (DSK_TOPK_MAX_K) and
 * DSK_SM120_SMEM_LIMIT. */
#ifndef DSK_TOPK_SHARED
#define DSK_TOPK_SHARED __shared__ /* the emulation's: static (one CTA at a time) */
#endif
constexpr unsigned kFull = 0xffffffffu;

/* ================================================================ top-k */
constexpr int kKT = 1024;       /* threads per row */
constexpr int kKW = kKT / 32;   /* warps */
constexpr int kBins = 2048;     /* 11-bit digits; also the buckets of rank_write */
constexpr int kEqCap = kBins;   /* equal-to-tau columns sorted in shared memory (fallback) */
constexpr int kUnroll = 4;      /* scalar loads in flight per thread (fallback passes) */
constexpr int kVU = 4;          /* float4 loads in flight per thread (threshold pass) */
constexpr int kPfDist = 4;      /* threshold pass: L2 prefetch distance in iterations (4 x 64 KB) */
constexpr int kCandCap = 8192;  /* composites held in shared memory */
constexpr int kSortCap = 4096;  /* largest bitonic sort (rows up to this length are taken whole) */
constexpr int kBucketMax = 128; /* rank_write: largest bucket it scans; else bitonic / fallback */
constexpr int kSampleMin = 2048, kSampleMax = 8192;
/* dynamic shared memory: composites (also the sample keys and the fallback
 * selection), two bin arrays, the bucket-ordered composites of rank_write */
constexpr int64_t kTkOffHist = (int64_t)kCandCap * 8;
constexpr int64_t kTkOffStart = kTkOffHist + kBins * 4;
constexpr int kBkCap = DSK_TOPK_MAX_K + kBucketMax; /* rank_write: bucket-ordered positions below K + a bucket */
constexpr int64_t kTkOffBk = kTkOffStart + kBins * 4;
constexpr int64_t kTkSmem = kTkOffBk + (int64_t)kBkCap * 8;
static_assert(kBins / kKT == 2, "rank_write and the digit pick own two bins per thread");
static_assert(kKW <= 32, "one warp scans the warp sums");
static_assert(DSK_TOPK_MAX_K <= kSortCap && kSortCap <= kCandCap && kSampleMax * 4 <= kCandCap * 8, "capacities");
static_assert(kSampleMin % kKT == 0 && kSortCap % kKT == 0, "uniform loop trip counts");
static_assert(kTkSmem + 512 <= DSK_SM120_SMEM_LIMIT, "top-k CTA exceeds SM120 shared memory");

struct TopkParams {
  const float *scores;
  int64_t st, width, T;
  int K;
  const int32_t *lens, *pos, *sm;
  int64_t ratio;
  int shortcut;
  int32_t *out;
  int64_t out_st;
  unsigned long long *counters;
  /* multi-CTA path (P > 0): P slices per long row, C composites per slice */
  int P;
  int64_t C;
  uint32_t *ws_cnt;            /* [T][P] counts */
  unsigned long long *ws_cand; /* [T][P][C] composites */
};

/* Composites per slice region: twice a slice's expected share of the
 * E <= max(1.75 K + 64, 3072) candidates plus 256, at most the slice. */
static inline int64_t topk_slice_cap(int64_t width, int64_t K, int P) {
  int64_t E = K + (3 * K) / 4 + 64;
  if (E < 3072) E = 3072;
  const int64_t ls = ((width + P - 1) / P + 3) / 4 * 4;
  const int64_t c = (2 * E / P + 256 + 31) / 32 * 32;
  return c < ls ? c : ls;
}

/* Shared-memory working set of one row. */
struct TopkSmem {
  unsigned long long *cand; /* [kCandCap] composites */
  uint32_t *samp;           /* alias of cand: sample keys */
  uint32_t *hist;           /* [kBins] */
  uint32_t *start;          /* [kBins] */
  unsigned long long *bk;   /* [kBkCap] composites in bucket order (rank_write) */
  uint32_t *warp;           /* [32] */
  uint32_t *pick;           /* [3]: digit, count above it, count in it */
  uint32_t *red;            /* [8] */
  uint32_t *ngt, *neq, *n;
};

__device__ __forceinline__ uint32_t score_key(float x) { return dsk__topk_key_from_bits(__float_as_uint(x)); }
__device__ __forceinline__ unsigned long long composite(uint32_t key, int64_t col) {
  return ((unsigned long long)key << 32) | (unsigned long long)(uint32_t)~(uint32_t)col;
}
__device__ __forceinline__ uint32_t comp_key(unsigned long long c) { return (uint32_t)(c >> 32); }
__device__ __forceinline__ int32_t comp_col(unsigned long long c) { return (int32_t)~(uint32_t)(c & 0xFFFFFFFFull); }
/* The float whose key is `key`, for keys of non-NaN floats other than
 * -0's unused image (0x007FFFFF <= key <= 0xFF800000, key != 0x7FFFFFFF). */
__device__ __forceinline__ float key_to_float(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}
/* Brings the 128-byte line holding p into L2 (a hint; no register result). */
__device__ __forceinline__ void prefetch_l2(const void *p) { dsk_ptx::prefetch_l2(p); }
__device__ __forceinline__ float f4_comp(const float4 &v, int c) {
  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

/* Inclusive block scan of one value per thread (kKT threads); *total gets
 * the block's sum. All threads call. */
__device__ uint32_t block_incl_scan(uint32_t v, uint32_t *s_warp, uint32_t *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) s_warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    uint32_t w = lane < kKW ? s_warp[lane] : 0u;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t n = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += n;
    }
    if (lane < kKW) s_warp[lane] = w;
  }
  __syncthreads();
  const uint32_t r = v + (warp > 0 ? s_warp[warp - 1] : 0u);
  *total = s_warp[kKW - 1];
  __syncthreads(); /* s_warp is reused by the next call */
  return r;
}

/* Bitonic sort of a[0, n2) (n2 a power of two), descending / ascending. */
__device__ void bitonic_desc_u64(unsigned long long *a, int n2) {
  for (int k = 2; k <= n2; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n2; i += kKT) {
        const int l = i ^ j;
        if (l > i) {
          const unsigned long long x = a[i], y = a[l];
          if (((i & k) == 0) ? (x < y) : (x > y)) {
            a[i] = y;
            a[l] = x;
          }
        }
      }
      __syncthreads();
    }
}
__device__ void bitonic_asc_u32(uint32_t *a, int n2) {
  for (int k = 2; k <= n2; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n2; i += kKT) {
        const int l = i ^ j;
        if (l > i) {
          const uint32_t x = a[i], y = a[l];
          if (((i & k) == 0) ? (x > y) : (x < y)) {
            a[i] = y;
            a[l] = x;
          }
        }
      }
      __syncthreads();
    }
}

__device__ __forceinline__ int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

/* Sorts the n composites of a (descending, n <= kSortCap) and writes the
 * row: the first min(n, K) columns, -1 after. */
__device__ void sort_and_write(unsigned long long *a, int n, int K, int32_t *o) {
  const int n2 = pow2_at_least(n);
  for (int i = n + threadIdx.x; i < n2; i += kKT) a[i] = 0ull; /* below every real composite */
  __syncthreads();
  bitonic_desc_u64(a, n2);
  for (int i = threadIdx.x; i < K; i += kKT) o[i] = i < n ? comp_col(a[i]) : -1;
}

/* Warp-aggregated append: returns this lane's slot (valid only when take). */
__device__ __forceinline__ uint32_t warp_append(bool take, uint32_t *counter) {
  const unsigned m = __ballot_sync(kFull, take);
  if (!m) return 0u;
  const int lane = threadIdx.x & 31, leader = __ffs(m) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(counter, (uint32_t)__popc(m));
  base = __shfl_sync(kFull, base, leader);
  return base + (uint32_t)__popc(m & ((1u << lane) - 1u));
}

/* Warp-aggregated reservation of cnt slots per lane (every lane calls):
 * returns the first slot of this lane's run. */
__device__ __forceinline__ uint32_t warp_reserve(uint32_t cnt, uint32_t *counter) {
  const int lane = threadIdx.x & 31;
  uint32_t incl = cnt;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t n = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += n;
  }
  uint32_t base = 0;
  if (lane == 31 && incl) base = atomicAdd(counter, incl); /* incl of lane 31 = the warp's total */
  base = __shfl_sync(kFull, base, 31);
  return base + incl - cnt;
}

/* Shared histogram increment with one atomic per distinct bin of the warp
 * (every lane calls; lanes with in == false add nothing). */
__device__ __forceinline__ void hist_add(uint32_t *hist, bool in, uint32_t bin) {
  const uint32_t v = in ? bin : 0xFFFFFFFFu;
  const unsigned peers = __match_any_sync(kFull, v);
  if (in && (int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], (uint32_t)__popc(peers));
}

/* Radix-select step over a built histogram of nb (2048 or 1024) digits:
 * the digit d with count(> d) < need <= count(>= d). All threads call;
 * on return (after a barrier) every thread reads s.pick. */
__device__ void pick_digit(const TopkSmem &s, int nb, uint32_t need) {
  const int tid = threadIdx.x;
  const int per = nb / kKT; /* 2 or 1; thread tid owns bins nb-1-per*tid-j, top first */
  uint32_t cnt[2] = {0u, 0u}, sum = 0u;
#pragma unroll
  for (int j = 0; j < 2; j++)
    if (j < per) {
      cnt[j] = s.hist[nb - 1 - per * tid - j];
      sum += cnt[j];
    }
  uint32_t all = 0u;
  const uint32_t incl = block_incl_scan(sum, s.warp, &all);
  const uint32_t excl = incl - sum;
  if (excl < need && need <= incl) { /* exactly one thread */
    uint32_t cum = excl;
    bool found = false;
#pragma unroll
    for (int j = 0; j < 2; j++) {
      if (j < per && !found) {
        if (cum + cnt[j] >= need) {
          s.pick[0] = (uint32_t)(nb - 1 - per * tid - j);
          s.pick[1] = cum;
          s.pick[2] = cnt[j];
          found = true;
        } else {
          cum += cnt[j];
        }
      }
    }
  }
  __syncthreads();
}

/* Bucket of key k for rank_write: mode 0 is linear in the value over the
 * finite range (halved so that the difference cannot overflow; NaN and
 * -inf in bucket 0, +inf in the last), mode 1 linear in the key,
 * (k - kmin) >> shift. Both are monotone in the key (every fp32 step is a
 * monotone rounding of a monotone function, and sc is finite), so a higher
 * bucket holds only larger composites. */
__device__ __forceinline__ uint32_t rw_bucket(uint32_t k, int mode, uint32_t kmin, int shift, float xlo_h, float sc) {
  if (mode) return (k - kmin) >> shift;
  if (k <= 0x007FFFFFu) return 0u;
  if (k >= 0xFF800000u) return (uint32_t)(kBins - 1);
  float v = (key_to_float(k) * 0.5f - xlo_h) * sc; /* >= 0, finite or +inf */
  v = v < (float)(kBins - 1) ? v : (float)(kBins - 1);
  v = v > 0.f ? v : 0.f;
  return (uint32_t)floorf(v);
}

/* Writes the K largest of the n (<= kCandCap) distinct composites a[0, n)
 * in descending order to o, -1 after them, by ranking: rank = the count of
 * composites in higher buckets + the count of larger composites in the own
 * bucket (2048 buckets, rw_bucket; the value-linear mapping is tried first,
 * then the key-linear one). Returns false, with o untouched, when both
 * leave a bucket of more than kBucketMax composites (the caller sorts
 * instead). All threads call; the result is block-uniform. */
__device__ bool rank_write(const TopkSmem &s, const unsigned long long *a, int n, int K, int32_t *o) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (n == 0) {
    for (int i = tid; i < K; i += kKT) o[i] = -1;
    return true;
  }
  if (tid == 0) {
    s.red[0] = 0xFFFFFFFFu; /* min key */
    s.red[1] = 0u;          /* max key */
    s.red[2] = 0xFFFFFFFFu; /* min finite key */
    s.red[3] = 0u;          /* max finite key */
    s.red[4] = 0u;          /* largest bucket, mode 0 */
    s.red[5] = 0u;          /* largest bucket, mode 1 */
    s.red[6] = 0u;          /* ordered positions, mode 0 */
    s.red[7] = 0u;          /* ordered positions, mode 1 */
  }
  __syncthreads();
  uint32_t lo = 0xFFFFFFFFu, hi = 0u, flo = 0xFFFFFFFFu, fhi = 0u;
  for (int i = tid; i < n; i += kKT) {
    const uint32_t k = comp_key(a[i]);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
    if (k > 0x007FFFFFu && k < 0xFF800000u) {
      flo = k < flo ? k : flo;
      fhi = k > fhi ? k : fhi;
    }
  }
  lo = __reduce_min_sync(kFull, lo);
  hi = __reduce_max_sync(kFull, hi);
  flo = __reduce_min_sync(kFull, flo);
  fhi = __reduce_max_sync(kFull, fhi);
  if (lane == 0) {
    atomicMin(&s.red[0], lo);
    atomicMax(&s.red[1], hi);
    atomicMin(&s.red[2], flo);
    atomicMax(&s.red[3], fhi);
  }
  __syncthreads();
  const uint32_t kmin = s.red[0], range = s.red[1] - kmin;
  const int bits = 32 - __clz((int)range); /* bit length of range (0 for range 0) */
  const int shift = bits > 11 ? bits - 11 : 0;
  bool finite = s.red[2] <= s.red[3]; /* some finite composite: mode 0 applies */
  const float xlo_h = finite ? key_to_float(s.red[2]) * 0.5f : 0.f;
  const float xhi_h = finite ? key_to_float(s.red[3]) * 0.5f : 0.f;
  const float sc = xhi_h > xlo_h ? (float)(kBins - 1) / (xhi_h - xlo_h) : 0.f;
  if (isinf(sc)) finite = false; /* a finite range below ~6e-36: the key mapping does it */
  const int b0 = kBins - 1 - 2 * tid; /* this thread's two buckets, b0 and b0 - 1 */
#pragma unroll 1
  for (int mode = 0; mode < 2; mode++) {
    if (mode == 0 && !finite) continue; /* block-uniform */
    for (int i = tid; i < kBins; i += kKT) s.hist[i] = 0u;
    __syncthreads();
    for (int base = 0; base < n; base += kKT) { /* uniform trip count */
      const int i = base + tid;
      const bool in = i < n;
      hist_add(s.hist, in, in ? rw_bucket(comp_key(a[i]), mode, kmin, shift, xlo_h, sc) : 0u);
    }
    __syncthreads();
    /* start[b] = composites in buckets above b (exclusive scan from the top) */
    const uint32_t c0 = s.hist[b0], c1 = s.hist[b0 - 1];
    uint32_t all = 0u;
    const uint32_t incl = block_incl_scan(c0 + c1, s.warp, &all);
    const uint32_t excl = incl - c0 - c1;
    s.start[b0] = excl;
    s.start[b0 - 1] = excl + c0;
    const uint32_t mx = __reduce_max_sync(kFull, c0 > c1 ? c0 : c1);
    if (lane == 0) atomicMax(&s.red[4 + mode], mx);
    __syncthreads();
    if (s.red[4 + mode] > (uint32_t)kBucketMax) continue; /* block-uniform */
    s.hist[b0] = excl; /* now the bucket cursors */
    s.hist[b0 - 1] = excl + c0;
    /* Buckets that start at or past K hold no output: only the positions
     * [0, fill) of the buckets starting below K are ordered, fill < K +
     * kBucketMax <= kBkCap (every bucket holds <= kBucketMax). */
    {
      const uint32_t e0 = excl < (uint32_t)K ? excl + c0 : 0u;
      const uint32_t e1 = excl + c0 < (uint32_t)K ? excl + c0 + c1 : 0u;
      const uint32_t fm = __reduce_max_sync(kFull, e0 > e1 ? e0 : e1);
      if (lane == 0) atomicMax(&s.red[6 + mode], fm);
    }
    __syncthreads();
    /* scatter: the composites of those buckets into bucket order */
    for (int i = tid; i < n; i += kKT) {
      const unsigned long long x = a[i];
      const uint32_t b = rw_bucket(comp_key(x), mode, kmin, shift, xlo_h, sc);
      if (s.start[b] < (uint32_t)K) {
        const uint32_t at = atomicAdd(&s.hist[b], 1u);
        s.bk[at] = x;
      }
    }
    __syncthreads();
    /* rank of position q = composites of higher buckets + the larger ones of
     * its own bucket; a warp covers 32 consecutive positions, mostly of one
     * bucket, so the scan reads are broadcasts and the trip counts equal */
    const uint32_t fill = s.red[6 + mode];
    for (uint32_t q = tid; q < fill; q += kKT) {
      const unsigned long long x = s.bk[q];
      const uint32_t b = rw_bucket(comp_key(x), mode, kmin, shift, xlo_h, sc);
      const uint32_t first = s.start[b], end = b > 0 ? s.start[b - 1] : (uint32_t)n;
      uint32_t r = first;
      for (uint32_t j = first; j < end; j++) r += s.bk[j] > x ? 1u : 0u;
      if (r < (uint32_t)K) o[r] = comp_col(x);
    }
    for (int i = n + tid; i < K; i += kKT) o[i] = -1;
    return true;
  }
  return false;
}

/* Row length of top-k row t (the rules of dsk__topk_args); `count`: a
 * clamped lens[t] is counted (only the final kernel counts). */
__device__ __forceinline__ int64_t topk_row_len(const TopkParams &p, int64_t t, bool count) {
  int64_t L;
  if (p.lens) {
    L = p.lens[t];
    if (L < 0 || L > p.width) {
      if (count && threadIdx.x == 0 && p.counters) atomicAdd(&p.counters[0], 1ull);
      L = L < 0 ? 0 : p.width;
    }
  } else if (p.pos) {
    L = dsk__indexer_causal_len(p.pos[t], p.sm[t], p.ratio);
    if (L > p.width) L = p.width;
  } else {
    L = p.width;
  }
  return L;
}
/* Rows of this length take the threshold path (sample, filter, rank). */
__device__ __forceinline__ bool topk_long_row(const TopkParams &p, int64_t L) {
  return !(L <= p.K && p.shortcut) && L > kSortCap;
}

__device__ __forceinline__ void topk_smem_init(TopkSmem &s, uint8_t *tsm, uint32_t *sh_warp, uint32_t *sh_pick,
                                               uint32_t *sh_red, uint32_t *sh_cnt) {
  s.cand = reinterpret_cast<unsigned long long *>(tsm);
  s.samp = reinterpret_cast<uint32_t *>(tsm);
  s.hist = reinterpret_cast<uint32_t *>(tsm + kTkOffHist);
  s.start = reinterpret_cast<uint32_t *>(tsm + kTkOffStart);
  s.bk = reinterpret_cast<unsigned long long *>(tsm + kTkOffBk);
  s.warp = sh_warp;
  s.pick = sh_pick;
  s.red = sh_red;
  s.ngt = &sh_cnt[0];
  s.neq = &sh_cnt[1];
  s.n = &sh_cnt[2];
}

/* The float4 body of columns [a, b) of row: columns [a, a4) before the
 * first 16-byte boundary (<= 3), nv float4 from a4, then < 4 columns. */
struct TkRange {
  int64_t a, b, a4, nv;
};
__device__ __forceinline__ TkRange tk_range(const float *row, int64_t a, int64_t b) {
  TkRange r;
  r.a = a;
  r.b = b;
  int64_t hs = (int64_t)(((16u - ((uint32_t)(uintptr_t)(row + a) & 15u)) & 15u) >> 2);
  if (hs > b - a) hs = b - a;
  r.a4 = a + hs;
  r.nv = (b - r.a4) >> 2;
  return r;
}
/* v[u] for a run-time u < kVU, by selects (no local-memory indexing). */
__device__ __forceinline__ float4 pick_vu(const float4 (&v)[kVU], int u) {
  static_assert(kVU == 4, "pick_vu selects among 4");
  return u == 0 ? v[0] : u == 1 ? v[1] : u == 2 ? v[2] : v[3];
}
/* The first kPfDist iterations of topk_filter's loop go to L2. */
__device__ __forceinline__ void tk_prefetch(const float *row, const TkRange &r) {
  const float4 *v4 = reinterpret_cast<const float4 *>(row + r.a4);
  for (int64_t l = threadIdx.x; l < (int64_t)kPfDist * kVU * kKT / 8; l += kKT)
    if (8 * l < r.nv) prefetch_l2(v4 + 8 * l);
}

/* Threshold of a long row (L > kSortCap) from a sample: E ~ 1.75 K + 64
 * keys of the row should be >= g; S sample keys (stratified, jittered
 * columns) such that about 48 of them are >= g, and g = the m-th largest
 * sample key truncated to 22 bits (two 11-bit radix passes over the sample).
 * Every CTA that calls it for the same row computes the same g. All
 * threads call; on return *s.n = 0 and the samples may be overwritten. */
/* Sample keys j = tid + u kKT (u < N): column j stride + a hashed jitter
 * in [0, stride), all N loads in flight at once. */
template <int N>
__device__ __forceinline__ void tk_sample(uint32_t *samp, const float *row, int64_t stride) {
  static_assert(N * kKT <= kSampleMax, "sample capacity");
  float x[N];
#pragma unroll
  for (int u = 0; u < N; u++) {
    const int j = (int)threadIdx.x + u * kKT;
    const uint32_t hsh = (uint32_t)j * 2654435761u;
    x[u] = __ldg(row + (int64_t)j * stride + (int64_t)((hsh ^ (hsh >> 15)) % (uint64_t)stride));
  }
#pragma unroll
  for (int u = 0; u < N; u++) samp[threadIdx.x + u * kKT] = score_key(x[u]);
}
struct TkThresh {
  bool take_all; /* g = 0: every key (NaN included) */
  float gf;      /* key(x) >= g <=> x >= gf for every non-NaN x */
};
__device__ TkThresh topk_threshold(const TopkSmem &s, const float *row, int64_t L, int K) {
  const int tid = threadIdx.x;
  int64_t E = (int64_t)K + (3 * (int64_t)K) / 4 + 64;
  const int64_t want = (48 * L + E - 1) / E;
  int S = want <= kSampleMin ? kSampleMin : want <= 2 * kSampleMin ? 2 * kSampleMin : kSampleMax;
  while (S > L) S >>= 1; /* L > kSortCap: S stays >= 2048, a multiple of kKT */
  if (E * S < 48 * L) {  /* the largest sample is short of 48 hits: aim higher */
    int64_t e2 = (48 * L + S - 1) / S;
    if (e2 > 3072) e2 = 3072;
    if (e2 > E) E = e2;
  }
  int64_t m = (E * S + L - 1) / L;
  m = m < 1 ? 1 : m > S ? S : m;
  const int64_t stride = L / S; /* >= 1 */
  /* S / kKT is 2, 4 or 8: every thread's loads are issued before the
   * first key is stored (device run 31: one at a time, they held 20 % of
   * the slice kernel's stall samples) */
  if (S == 2 * kKT) tk_sample<2>(s.samp, row, stride);
  else if (S == 4 * kKT) tk_sample<4>(s.samp, row, stride);
  else tk_sample<8>(s.samp, row, stride);
  uint32_t gkey = 0u, gmask = 0u, gneed = (uint32_t)m;
#pragma unroll 1
  for (int pass = 0; pass < 2; pass++) {
    const int shift = pass == 0 ? 21 : 10;
    for (int i = tid; i < kBins; i += kKT) s.hist[i] = 0u;
    __syncthreads(); /* also: the samples are written */
    for (int j = tid; j < S; j += kKT) {
      const uint32_t k = s.samp[j];
      hist_add(s.hist, (k & gmask) == gkey, (k >> shift) & (uint32_t)(kBins - 1));
    }
    __syncthreads();
    pick_digit(s, kBins, gneed);
    gneed -= s.pick[1];
    gkey |= s.pick[0] << shift;
    gmask |= (uint32_t)(kBins - 1) << shift;
  }
  if (tid == 0) *s.n = 0u;
  __syncthreads(); /* s.n and s.pick: the caller's pass overwrites the samples */
  TkThresh th;
  th.take_all = gkey == 0u;
  th.gf = gkey <= 0x007FFFFFu ? -INFINITY : key_to_float(gkey); /* NaN (key 0) is below every gkey >= 1 */
  return th;
}

/* The filter's columns outside the float4 body of r: the unaligned head
 * (<= 3 columns) and the tail (<= 3), one a thread. All threads call. */
__device__ __forceinline__ void tk_filter_edges(const TopkSmem &s, const float *row, const TkRange &r,
                                                const TkThresh &th, unsigned long long *dst, uint32_t cap) {
  const int tid = threadIdx.x;
  const int64_t tail0 = r.a4 + 4 * r.nv;
  const int nh = (int)(r.a4 - r.a);
  const int nextra = nh + (int)(r.b - tail0);
  const bool valid = tid < nextra;
  const int64_t col = tid < nh ? r.a + tid : tail0 + (tid - nh);
  const float x = valid ? row[col] : 0.f;
  const bool hit = valid && (th.take_all || x >= th.gf);
  const uint32_t slot = warp_reserve(hit ? 1u : 0u, s.n);
  if (hit && slot < cap) dst[slot] = composite(score_key(x), col);
}

/* One pass over columns [r.a, r.b) of row: the composite of every key >= g
 * goes to dst[slot] for slot < cap (dst in shared or global memory); *s.n
 * counts them all (also past cap). Iteration `base` reads kVU * kKT float4
 * (64 KB) and prefetches into L2 the lines of the iteration kPfDist ahead.
 * All threads call; the count is final after the caller's barrier. */
__device__ void topk_filter(const TopkSmem &s, const float *row, const TkRange &r, const TkThresh &th,
                            unsigned long long *dst, uint32_t cap) {
  const int tid = threadIdx.x;
  const float4 *v4 = reinterpret_cast<const float4 *>(row + r.a4);
  const int64_t nv = r.nv;
  for (int64_t base = 0; base < nv; base += (int64_t)kVU * kKT) {
    {
      const int64_t l = base + (int64_t)kPfDist * kVU * kKT + 8 * tid;
      if (tid < kVU * kKT / 8 && l < nv) prefetch_l2(v4 + l);
    }
    /* unconditional loads (an index past the range reads the range's last
     * float4; idx < nv masks it below). Meant to put all kVU in flight at
     * once, they did not: ptxas still issues each after the previous one
     * has been compared (device runs 32-33, ncu). A cp.async ring of
     * four 16 KB stages through shared memory, built to get round that,
     * gave no gain at T 64 and was 1.05-1.08x slower on some rows (device
     * runs 39 and 42, docs/benchmarks.md) and was removed */
    float4 v[kVU];
    int64_t idx[kVU];
#pragma unroll
    for (int u = 0; u < kVU; u++) {
      idx[u] = base + u * kKT + tid;
      v[u] = __ldg(v4 + (idx[u] < nv ? idx[u] : nv - 1));
    }
    uint32_t hm = 0u;
#pragma unroll
    for (int u = 0; u < kVU; u++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        if (idx[u] < nv && (th.take_all || f4_comp(v[u], c) >= th.gf)) hm |= 1u << (4 * u + c);
    const uint32_t cnt = (uint32_t)__popc(hm);
    if (__any_sync(kFull, cnt != 0u)) {
      uint32_t slot = warp_reserve(cnt, s.n);
      /* only the set bits, lowest first (the order of the slots is u then
       * c, as before): about 1 in 36 keys passes, so a warp loops once or
       * twice where the 16 predicated appends cost ~450 instructions an
       * iteration (device run 31: 70 % of the slice kernel's instructions,
       * at 1.45 IPC the kernel's time) */
      for (uint32_t m = hm; m; m &= m - 1u) {
        const int b = __ffs((int)m) - 1;
        const int u = b >> 2;
        const float x = f4_comp(pick_vu(v, u), b & 3);
        if (slot < cap) dst[slot] = composite(score_key(x), r.a4 + 4 * (base + u * kKT + tid) + (b & 3));
        slot++;
      }
    }
  }
  tk_filter_edges(s, row, r, th, dst, cap);
}

/* Multi-CTA top-k, first kernel: CTA (i, t) filters slice i of long row t
 * (columns [i ls, (i + 1) ls), ls = ceil(L / P) rounded up to 4) against
 * the row's threshold (each slice CTA computes the same g from the same
 * sample) into its region of the workspace and writes the count, which may
 * exceed the region's capacity C (only C composites are stored; the final
 * kernel then redoes the row alone). Every (slice, long row) writes its
 * count on every call, so the workspace needs no zeroing. */
__global__ void __launch_bounds__(kKT, 1) topk_slice_kernel(const TopkParams p) {
  /* let the final kernel launch now; it waits (griddepcontrol.wait) before
   * reading the workspace */
  dsk_ptx::pdl_launch_dependents();
  extern __shared__ __align__(16) uint8_t tsm[];
  DSK_TOPK_SHARED uint32_t sh_warp[32], sh_pick[3], sh_red[8], sh_cnt[3];
  TopkSmem s;
  topk_smem_init(s, tsm, sh_warp, sh_pick, sh_red, sh_cnt);
  const int i = (int)blockIdx.x;
  for (int64_t t = blockIdx.y; t < p.T; t += gridDim.y) {
    __syncthreads(); /* the previous row's use of shared memory is over */
    const int64_t L = topk_row_len(p, t, false);
    if (!topk_long_row(p, L)) continue; /* the final kernel does the row alone */
    const int64_t ls = ((L + p.P - 1) / p.P + 3) / 4 * 4;
    const int64_t a = (int64_t)i * ls < L ? (int64_t)i * ls : L;
    const int64_t b = a + ls < L ? a + ls : L;
    uint32_t *cnt = p.ws_cnt + t * p.P + i;
    if (a >= b) { /* an empty slice (block-uniform) */
      if (threadIdx.x == 0) *cnt = 0u;
      continue;
    }
    const float *row = p.scores + t * p.st;
    const TkRange r = tk_range(row, a, b);
    tk_prefetch(row, r);
    const TkThresh th = topk_threshold(s, row, L, p.K);
    topk_filter(s, row, r, th, p.ws_cand + (t * p.P + i) * p.C, (uint32_t)p.C);
    __syncthreads();
    if (threadIdx.x == 0) *cnt = *s.n;
  }
}

/* Top-k, one CTA per row (the final kernel of the multi-CTA path). */
__global__ void __launch_bounds__(kKT, 1) topk_kernel(const TopkParams p) {
  extern __shared__ __align__(16) uint8_t tsm[];
  DSK_TOPK_SHARED uint32_t sh_warp[32], sh_pick[3], sh_red[8], sh_cnt[3], sh_slice[33], sh_over[1];
  TopkSmem s;
  topk_smem_init(s, tsm, sh_warp, sh_pick, sh_red, sh_cnt);
  const int tid = threadIdx.x;
  const int K = p.K;

  for (int64_t t = blockIdx.x; t < p.T; t += gridDim.x) {
    __syncthreads(); /* the previous row's use of shared memory is over */
    const int64_t L = topk_row_len(p, t, true);
    int32_t *o = p.out + t * p.out_st;
    const float *row = p.scores + t * p.st;

    if (L <= K && p.shortcut) { /* every candidate is selected */
      for (int i = tid; i < K; i += kKT) o[i] = i < L ? i : -1;
      continue;
    }
    if (L <= kSortCap) { /* the whole row is the candidate set */
      const int n = (int)L;
      for (int i = tid; i < n; i += kKT) s.cand[i] = composite(score_key(row[i]), i);
      __syncthreads();
      if (!rank_write(s, s.cand, n, K, o)) sort_and_write(s.cand, n, K, o);
      continue;
    }

    /* ---- candidates: the keys >= a sampled threshold g. With ncand >= K,
     * every one of the K largest composites has a key >= g (ncand of them
     * do), so they are all candidates. */
    bool have = false;     /* s.cand[0, ncand) holds every key >= g */
    bool fallback = false; /* the threshold missed: straight to the exact path */
    uint32_t ncand = 0u;
    if (p.P > 0) { /* the slice kernel filtered the row */
      dsk_ptx::pdl_wait(); /* its writes are visible */
      /* the counts (an exclusive scan over the slices) and the gather */
      if (tid < 32) { /* sh_slice[i] = the count of the slices before i (sh_slice[P] = the total) */
        const uint32_t c = tid < p.P ? p.ws_cnt[t * p.P + tid] : 0u;
        const bool over = tid < p.P && c > (uint32_t)p.C;
        uint32_t incl = c;
#pragma unroll
        for (int o2 = 1; o2 < 32; o2 <<= 1) {
          const uint32_t n = __shfl_up_sync(kFull, incl, o2);
          if (tid >= o2) incl += n;
        }
        sh_slice[tid] = incl - c;
        if (tid == 31) sh_slice[32] = incl;
        const unsigned anyover = __ballot_sync(kFull, over);
        if (tid == 0) sh_over[0] = anyover ? 1u : 0u;
      }
      __syncthreads();
      const uint32_t tot = sh_slice[32];
      if (!sh_over[0]) { /* block-uniform: no slice overflowed its region */
        if (tot >= (uint32_t)K && tot <= (uint32_t)kCandCap) {
          /* the regions in slice order as one flat range: composite j is
           * entry j - sh_slice[i] of region i, sh_slice[i] <= j <
           * sh_slice[i + 1]. All of a thread's loads (<= kCandCap / kKT)
           * are issued before the first store: a loop per region took a
           * round trip per region (32 at T 1) */
          constexpr int kGather = kCandCap / kKT;
          unsigned long long g[kGather];
#pragma unroll
          for (int u = 0; u < kGather; u++) {
            const uint32_t j = (uint32_t)(tid + u * kKT);
            g[u] = 0ull;
            if (j < tot) {
              int lo = 0; /* the last region starting at or before j (binary search over P + 1 offsets) */
#pragma unroll
              for (int w = 16; w; w >>= 1)
                if (lo + w < p.P && sh_slice[lo + w] <= j) lo += w;
              g[u] = p.ws_cand[(t * p.P + lo) * p.C + (j - sh_slice[lo])];
            }
          }
#pragma unroll
          for (int u = 0; u < kGather; u++) {
            const uint32_t j = (uint32_t)(tid + u * kKT);
            if (j < tot) s.cand[j] = g[u];
          }
          __syncthreads();
          ncand = tot;
          have = true;
        } else {
          fallback = true; /* the single-CTA pass would find the same count */
        }
      }
      /* an overflowed region: this CTA filters the row itself */
    }
    if (!have && !fallback) {
      const TkRange r = tk_range(row, 0, L);
      tk_prefetch(row, r); /* the first iterations of the pass go to L2 while the sample is taken */
      const TkThresh th = topk_threshold(s, row, L, K);
      topk_filter(s, row, r, th, s.cand, (uint32_t)kCandCap);
      __syncthreads();
      ncand = *s.n;
      have = ncand >= (uint32_t)K && ncand <= (uint32_t)kCandCap;
    }
    if (have && rank_write(s, s.cand, (int)ncand, K, o)) continue;

    /* ---- exact fallback. Radix select: the K-th largest key, 11 + 11 + 10
     * bits from the top. */
    unsigned long long *s_sel = s.cand;
    uint32_t prefix = 0u, pmask = 0u, need = (uint32_t)K, eq_total = 0u;
    if (tid == 0) {
      *s.ngt = 0u;
      *s.neq = 0u;
    }
#pragma unroll 1
    for (int pass = 0; pass < 3; pass++) {
      const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
      const int nb = pass == 2 ? 1024 : 2048;
      const uint32_t dmask = (uint32_t)nb - 1u;
      for (int i = tid; i < kBins; i += kKT) s.hist[i] = 0u;
      __syncthreads();
      for (int64_t base = 0; base < L; base += kUnroll * kKT) {
        float v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
          const int64_t i = base + u * kKT + tid;
          v[u] = i < L ? row[i] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
          const int64_t i = base + u * kKT + tid;
          const uint32_t k = score_key(v[u]);
          hist_add(s.hist, i < L && (k & pmask) == prefix, (k >> shift) & dmask);
        }
      }
      __syncthreads();
      pick_digit(s, nb, need);
      need -= s.pick[1];
      eq_total = s.pick[2];
      prefix |= s.pick[0] << shift;
      pmask |= dmask << shift;
    }
    const uint32_t tau = prefix;
    const bool eq_fast = eq_total <= (uint32_t)kEqCap;

    /* Keys above tau -> s_sel[0 .. K-need); keys equal to tau -> s.hist
     * (fast path). s.hist was last read before pick_digit's barriers. */
    for (int64_t base = 0; base < L; base += kUnroll * kKT) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const int64_t i = base + u * kKT + tid;
        v[u] = i < L ? row[i] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const int64_t i = base + u * kKT + tid;
        const uint32_t k = i < L ? score_key(v[u]) : 0u;
        const bool gt = i < L && k > tau, eq = eq_fast && i < L && k == tau;
        const uint32_t sg = warp_append(gt, s.ngt);
        if (gt) s_sel[sg] = composite(k, i);
        const uint32_t se = warp_append(eq, s.neq);
        if (eq) s.hist[se] = (uint32_t)i;
      }
    }
    __syncthreads();
    const uint32_t ngt = (uint32_t)K - need; /* == *s.ngt */
    if (eq_fast) {
      const int ne = (int)eq_total; /* == *s.neq */
      const int n2 = pow2_at_least(ne);
      for (int i = ne + tid; i < n2; i += kKT) s.hist[i] = 0xFFFFFFFFu;
      __syncthreads();
      bitonic_asc_u32(s.hist, n2);
      for (uint32_t j = tid; j < need; j += kKT) s_sel[ngt + j] = composite(tau, s.hist[j]);
    } else {
      /* many equal keys: the `need` lowest columns by an ordered scan */
      uint32_t taken = 0u; /* block-uniform */
      for (int64_t base = 0; base < L && taken < need; base += kKT) {
        const int64_t i = base + tid;
        const bool eq = i < L && score_key(row[i]) == tau;
        uint32_t tile = 0u;
        const uint32_t incl = block_incl_scan(eq ? 1u : 0u, s.warp, &tile);
        const uint32_t rank = taken + incl - (eq ? 1u : 0u);
        if (eq && rank < need) s_sel[ngt + rank] = composite(tau, i);
        taken += tile;
      }
    }
    __syncthreads();
    if (!rank_write(s, s_sel, K, K, o)) sort_and_write(s_sel, K, K, o);
  }
}

