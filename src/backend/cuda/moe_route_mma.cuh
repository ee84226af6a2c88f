/* moe_route_mma.cuh - the router's gate logits by bf16 mma.sync (MoE v15),
 * included by moe_route.cu inside its anonymous namespace and by
 * tests/emu_moe_route.cc (the same source on the CPU emulation).
 *
 * z[t, e] = sum_h x[t, h] * gate_w[e, h] for a tile of BT tokens x BE
 * experts, written as fp64 into the router's workspace (row stride E), from
 * which route_kernel selects. Each bf16 x bf16 product is exact in fp32;
 * a warp's m16n8k16 MMAs sum its k16 steps of one stage in fp32 (started
 * from zero every stage: 64 products per warp and stage in the large tile,
 * 16 in the small), and each such sum is added to the warp's fp32 (hi, lo)
 * pair by an error-free two-sum, so the logit carries about 48 bits: its
 * error is those partial sums' own fp32 rounding (a few units in the last
 * place of each: ~1e-8 of the sum of |products| for the spec's data, which
 * under cancellation is larger than |z|) instead of
 * the ~sqrt(H) ulps of one fp32 accumulator over H (which the router's
 * weight bound of 1e-5 relative would not survive at H 7168). The
 * fp64-FMA kernel this replaces at T >= 128 needed 1.0 ms for DSv4-Flash at
 * T 4096 on sm_90 and would need far more on SM120, whose fp64 rate is
 * 1/64 of fp32. A non-finite hi (an Inf or NaN in x or gate_w, or an fp32
 * overflow of a stage) is the logit as it is (lo would be NaN).
 *
 * Shapes (RmCfg): large (BT 64, BE 64; 4 warps, 2 x 2 of 32 x 32, each on
 * every k16 step of 64-column stages) and small (BT 16, BE 32; every warp
 * on the whole tile, warp w on k16 step w of each stage of BK columns: 16
 * warps of 256-column stages by default, the (hi, lo) pairs added in warp
 * order at the end), so small T still spreads over SMs and has few serial
 * stages. A cp.async ring (DSK_MOE_ROUTE_MMA_STAGES, default 3, for the
 * large tile; 3 or 4 for the small) of BT + BE rows of 2 BK bytes, rows
 * swizzled by 16-byte chunk (chunk ^ (row & 7)) for conflict-free
 * ldmatrix. Rows past T or E and columns past H are zero-filled (H % 8 == 0,
 * x_stride % 8 == 0 and 16-byte aligned x, gate_w: the caller checks).
 * Deterministic: the order depends on H only. Launched with PDL; waits
 * before any global access. */
#ifndef DSK_MOE_ROUTE_MMA_CUH
#define DSK_MOE_ROUTE_MMA_CUH

/* ring stages of the 64 x 64 tile (16 KB each; above 3 the launch opts in
 * to more than 48 KB of shared memory) */
#ifndef DSK_MOE_ROUTE_MMA_STAGES
#define DSK_MOE_ROUTE_MMA_STAGES 3
#endif
/* columns per stage of the 16 x 32 tile: 64 (4 warps, 4-stage ring of 6 KB)
 * or 256 (16 warps, one k16 step each, 3-stage ring of 24 KB: a quarter of
 * the serial stages) */
#ifndef DSK_MOE_ROUTE_MMA_SMALL_BK
#define DSK_MOE_ROUTE_MMA_SMALL_BK 256
#endif

struct RouteMmaArgs {
  int64_t T, E, H;
  const uint16_t *x; /* bf16 [T, x_stride] */
  int64_t x_stride;
  const uint16_t *gate_w; /* bf16 [E, H] */
  double *z;              /* fp64 [T, E] */
};

template <bool LARGE>
struct RmCfg {
  static constexpr int BT = LARGE ? 64 : 16;
  static constexpr int BE = LARGE ? 64 : 32;
  static constexpr int BK = LARGE ? 64 : DSK_MOE_ROUTE_MMA_SMALL_BK; /* columns per stage */
  static constexpr int KS = BK / 16;        /* k16 steps per stage */
  static constexpr int WM = LARGE ? 2 : 1;  /* warps along tokens */
  static constexpr int WN = LARGE ? 2 : 1;  /* warps along experts */
  static constexpr int WK = LARGE ? 1 : KS; /* warps along each stage's k16 steps */
  static constexpr int MT = BT / WM / 16;   /* m16 tiles per warp */
  static constexpr int NT = BE / WN / 8;    /* n8 tiles per warp */
  static constexpr int THREADS = WM * WN * WK * 32;
  static constexpr int STAGES = LARGE ? DSK_MOE_ROUTE_MMA_STAGES : (BK >= 256 ? 3 : 4);
  static constexpr int ROWS = BT + BE;
  static constexpr int ROWB = BK * 2;   /* bytes of a staged row */
  static constexpr int CH = BK / 8;     /* 16-byte chunks per row */
  static constexpr int STAGE = ROWS * ROWB;
  static constexpr int SMEM = STAGES * STAGE;
  static constexpr int CHUNKS = ROWS * CH / THREADS; /* 16-byte copies per thread per stage */
  static_assert(NT % 2 == 0 && MT >= 1 && KS % WK == 0 && THREADS <= 512, "warp layout");
  static_assert(ROWS * CH % THREADS == 0 && THREADS % CH == 0 && (CH & (CH - 1)) == 0 && CH >= 8, "copy layout");
  static_assert(SMEM <= DSK_SM120_SMEM_LIMIT, "shared memory budget (SM120: 99 KB)");
  /* the end-of-tile exchange of (hi, lo) between the WK warps fits the ring */
  static_assert(WK == 1 || (WK - 1) * 32 * MT * NT * 4 * 8 <= SMEM, "exchange");
};

/* byte offset of 16-byte chunk ch of staged row r (rows of ROWB bytes, a
 * multiple of 128): the chunk index's low 3 bits XOR the row's, so the 8
 * rows an ldmatrix reads at one logical chunk hit 8 distinct bank groups */
template <int ROWB>
__device__ __forceinline__ int rm_swz(int r, int ch) { return r * ROWB + ((ch ^ (r & 7)) << 4); }

/* f(i, j, v) for every accumulator of a warp: m16 tile i, n8 tile j,
 * fragment element v (unrolled: constant indices keep them in registers) */
template <typename C, typename F>
__device__ __forceinline__ void rm_each(F &&f) {
#pragma unroll
  for (int i = 0; i < C::MT; i++)
#pragma unroll
    for (int j = 0; j < C::NT; j++)
#pragma unroll
      for (int v = 0; v < 4; v++) f(i, j, v);
}

/* (hi, lo) += v without rounding loss (Knuth's two-sum; no FMA involved) */
__device__ __forceinline__ void rm_two_sum(float &hi, float &lo, float v) {
  const float s = hi + v;
  const float bp = s - hi;
  const float err = (hi - (s - bp)) + (v - bp);
  hi = s;
  lo += err;
}

template <bool LARGE>
__global__ void __launch_bounds__(RmCfg<LARGE>::THREADS) route_logits_mma_kernel(const RouteMmaArgs p) {
  using C = RmCfg<LARGE>;
  dsk_ptx::pdl_wait(); /* before any global access (launched with PDL) */
  dsk_ptx::pdl_launch_dependents(); /* the selection kernel waits for this whole grid */
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int wk = warp % C::WK, wn = (warp / C::WK) % C::WN, wm = warp / (C::WK * C::WN);
  const int64_t E = p.E, H = p.H, T = p.T;
  const int64_t e0 = (int64_t)blockIdx.x * C::BE;
  const int KT = (int)((H + C::BK - 1) / C::BK);
  const int64_t ntiles = (T + C::BT - 1) / C::BT;
  for (int64_t tile = blockIdx.y; tile < ntiles; tile += gridDim.y) { /* block-uniform trip count */
    const int64_t t0 = tile * C::BT;
    /* copy i of this thread: row (tid + THREADS i) / CH of the stage (x
     * rows first, then gate rows), chunk tid % CH (the same for every i) */
    const int ch = tid % C::CH;
    auto load_stage = [&](int slot, int kt) {
      uint8_t *s = smem + slot * C::STAGE;
      const int64_t col = (int64_t)kt * C::BK + ch * 8;
#pragma unroll
      for (int i = 0; i < C::CHUNKS; i++) {
        const int r = tid / C::CH + i * (C::THREADS / C::CH);
        const bool xr = r < C::BT;
        const int64_t row = xr ? t0 + r : e0 + (r - C::BT);
        const bool v = col < H && row < (xr ? T : E);
        const uint16_t *src = v ? (xr ? p.x + row * p.x_stride + col : p.gate_w + row * H + col) : p.gate_w;
        dsk_ptx::cp_async16(s + rm_swz<C::ROWB>(r, ch), src, v);
      }
    };
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; s++) {
      if (s < KT) load_stage(s, s);
      dsk_ptx::cp_async_commit();
    }
    float hi[C::MT][C::NT][4], lo[C::MT][C::NT][4];
    rm_each<C>([&](int i, int j, int v) { hi[i][j][v] = lo[i][j][v] = 0.0f; });
    for (int kt = 0; kt < KT; kt++) {
      dsk_ptx::cp_async_wait<C::STAGES - 2>();
      __syncthreads(); /* stage kt landed for every thread; slot (kt - 1) % STAGES is free */
      if (kt + C::STAGES - 1 < KT) load_stage((kt + C::STAGES - 1) % C::STAGES, kt + C::STAGES - 1);
      dsk_ptx::cp_async_commit();
      const uint8_t *s = smem + (kt % C::STAGES) * C::STAGE;
      float c[C::MT][C::NT][4];
      rm_each<C>([&](int i, int j, int v) { c[i][j][v] = 0.0f; });
#pragma unroll
      for (int ks = wk; ks < C::KS; ks += C::WK) {
        /* A: matrix l >> 3 = (rows +8 if odd, columns +8 if >= 2); B: two
         * n8 tiles, matrix l >> 3 = (rows +8 if >= 2, columns +8 if odd) */
        uint32_t a[C::MT][4];
#pragma unroll
        for (int i = 0; i < C::MT; i++) {
          const int r = wm * (C::MT * 16) + i * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
          dsk_ptx::ldmatrix_x4(a[i], s + rm_swz<C::ROWB>(r, ks * 2 + (lane >> 4)));
        }
#pragma unroll
        for (int j = 0; j < C::NT; j += 2) {
          uint32_t b[4];
          const int r = C::BT + wn * (C::NT * 8) + j * 8 + (lane >> 4) * 8 + (lane & 7);
          dsk_ptx::ldmatrix_x4(b, s + rm_swz<C::ROWB>(r, ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
          for (int i = 0; i < C::MT; i++) {
            dsk_ptx::mma_bf16(c[i][j], a[i], b[0], b[1]);
            dsk_ptx::mma_bf16(c[i][j + 1], a[i], b[2], b[3]);
          }
        }
      }
      rm_each<C>([&](int i, int j, int v) { rm_two_sum(hi[i][j][v], lo[i][j][v], c[i][j][v]); });
    }
    dsk_ptx::cp_async_wait<0>();
    __syncthreads(); /* every warp is done with the ring (the exchange reuses it; the next tile refills it) */
    if (C::WK > 1) {
      /* warps 1..WK-1 leave their pairs; warp 0 adds them in warp order */
      float2 *xs = reinterpret_cast<float2 *>(smem);
      constexpr int PER = C::MT * C::NT * 4;
      /* warp w's slot of accumulator (i, j, v) for this lane */
      auto slot = [&](int w, int i, int j, int v) -> float2 & {
        return xs[((w - 1) * PER + (i * C::NT + j) * 4 + v) * 32 + lane];
      };
      if (wk > 0) rm_each<C>([&](int i, int j, int v) { slot(wk, i, j, v) = make_float2(hi[i][j][v], lo[i][j][v]); });
      __syncthreads();
      if (wk == 0) {
#pragma unroll
        for (int w = 1; w < C::WK; w++)
          rm_each<C>([&](int i, int j, int v) {
            const float2 o = slot(w, i, j, v);
            rm_two_sum(hi[i][j][v], lo[i][j][v], o.x);
            lo[i][j][v] += o.y;
          });
      }
      __syncthreads(); /* the exchange is read before the next tile's copies */
    }
    if (wk == 0)
      rm_each<C>([&](int i, int j, int v) {
        const int64_t t = t0 + wm * (C::MT * 16) + i * 16 + g + (v >> 1) * 8;
        const int64_t e = e0 + wn * (C::NT * 8) + j * 8 + 2 * q + (v & 1);
        const float h = hi[i][j][v];
        const double zv = isfinite(h) ? (double)h + (double)lo[i][j][v] : (double)h;
        if (t < T && e < E) p.z[t * E + e] = zv;
      });
  }
}

#endif
