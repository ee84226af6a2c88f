/* mhc_kernels.cuh - the device code of the CUDA mHC ops (mhc.cu; spec/mhc.md,
 * docs/mhc.md): constants, helpers, the split projection (also in its fused
 * post + prenorm form), the per-token finish and post kernels. Included by mhc.cu inside its anonymous
 * namespace, after the PTX wrappers these kernels call (pdl_wait,
 * pdl_launch_dependents, cp_async16, cp_async_commit,
 * cp_async_wait<N>, prefetch_l2, rcp_approx, bar_sync_1<N>) and the macro
 * DSK_MHC_STATIC (empty on the GPU); tests/emu_mhc.cc includes it under the
 * CPU emulation of tests/emu/cuda_emu.h with emulated wrappers and
 * DSK_MHC_STATIC = static (the emulation's __shared__ is empty). No inline
 * PTX here. */

/* projection */
constexpr int kOutGroups = 4; /* output groups: group g owns outputs g*NOUT/4 .. (g+1)*NOUT/4 - 1 */
constexpr int kRound = 128;   /* columns of one lane round (= one pipeline stage): 32 lanes x 4 */
/* finish */
constexpr int kYWarps = 8;                          /* warps forming y; warp 0 does the scalar work */
constexpr int kFinishWarps = 1 + kYWarps;           /* 9: every warp sums a ninth of the splits */
constexpr int kFinishThreads = 32 * kFinishWarps;   /* 288 */
constexpr int kYThreads = 32 * kYWarps;             /* 256 */
constexpr int kMaxSplits = 256; /* S <= 256 = S_max at D = DSK_MHC_MAX_D */
/* partial loads a lane has in flight per round of the split sum (the
 * finish kernel's SB): 8 while S <= 72 (every warp's splits in one round
 * for S_max of DSv4-Flash, 64), else 16 (DSv4-Pro's 112 in one round) */
constexpr int kSplitBatchSmall = 8, kSplitBatchLarge = 16;
/* post */
constexpr int kPostThreads = 128;

/* ------------------------------------------------------------ utilities */
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

/* fp32 -> bf16, round to nearest even; NaN -> quiet NaN (as dsk_bf16_from_f32). */
__device__ __forceinline__ uint32_t f32_to_bf16(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u | ((u >> 16) & 0x8000u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return u >> 16;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) { return f32_to_bf16(lo) | (f32_to_bf16(hi) << 16); }

__device__ __forceinline__ void unpack8(const uint4 v, float *x) {
  x[0] = bf16_lo(v.x); x[1] = bf16_hi(v.x);
  x[2] = bf16_lo(v.y); x[3] = bf16_hi(v.y);
  x[4] = bf16_lo(v.z); x[5] = bf16_hi(v.z);
  x[6] = bf16_lo(v.w); x[7] = bf16_hi(v.w);
}
__device__ __forceinline__ uint4 pack8(const float *y) {
  uint4 v;
  v.x = pack_bf16(y[0], y[1]);
  v.y = pack_bf16(y[2], y[3]);
  v.z = pack_bf16(y[4], y[5]);
  v.w = pack_bf16(y[6], y[7]);
  return v;
}
/* 16 bytes of global memory with a plain (coherent) load: the data may have
 * been written by the kernel just before this one in the stream. */
__device__ __forceinline__ uint4 ld16(const uint16_t *p) { return *reinterpret_cast<const uint4 *>(p); }

/* TF32 rounding: keep 10 mantissa bits, nearest, ties away (cvt.rna). */
__device__ __forceinline__ float tf32_rna(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;
  return __uint_as_float((u + 0x1000u) & 0xFFFFE000u);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float sigmoidf_(float z) { return 1.0f / (1.0f + expf(-z)); }

/* Cross-lane sum of v[0..N) over the 32 lanes by the xor tree 16, 8, 4, 2, 1
 * (the bits of warp_sum), halving the values while N is even: at mask O a
 * lane keeps the half selected by its lane bit O and adds the partner's copy
 * of it. Afterwards lane l holds, in v[0 .. reduced_count(N)), the sums of
 * the original indices off + i; lanes differing only in bits of `dup` hold
 * the same values (full-butterfly steps taken once N became odd). */
template <int N, int O>
__device__ __forceinline__ void xor_reduce(float *v, int lane, int &off, int &dup) {
  if constexpr (O > 0) {
    if constexpr (N % 2 == 0) {
      constexpr int H = N / 2;
      const bool up = (lane & O) != 0;
#pragma unroll
      for (int i = 0; i < H; i++) {
        const float send = up ? v[i] : v[i + H];
        const float keep = up ? v[i + H] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
      }
      if (up) off += H;
      xor_reduce<H, O / 2>(v, lane, off, dup);
    } else {
#pragma unroll
      for (int i = 0; i < N; i++) v[i] += __shfl_xor_sync(0xffffffffu, v[i], O);
      dup |= O;
      xor_reduce<N, O / 2>(v, lane, off, dup);
    }
  }
}
/* Values a lane holds after xor_reduce<N, o0> (masks o0 down to 1);
 * reduced_count: after the full tree (xor_reduce<N, 16>). */
__host__ __device__ constexpr int reduced_count_from(int n, int o0) {
  for (int o = o0; o; o >>= 1)
    if (n % 2 == 0) n /= 2;
  return n;
}
__host__ __device__ constexpr int reduced_count(int n) { return reduced_count_from(n, 16); }

/* ---------------------------------------------------------------- projection
 * CTA = split s (blockIdx.y) x TT = TW*WT consecutive tokens (blockIdx.x) x
 * WG of the 4 output groups (blockIdx.z picks which WG). WG*WT warps: warp w
 * serves output group g = blockIdx.z*WG + w%WG (outputs g*TN .. g*TN+TN-1,
 * TN = NOUT/4) for the TW tokens of token group w/WG, and the sums of squares
 * of its tokens m (0..TW-1 within the group) with m % 4 == g (each token's
 * sum of squares is thus formed by exactly one warp of the grid). The split's
 * columns stream through shared memory one lane round (128 columns) per
 * stage in an NSTG-deep cp.async ring; a stage holds the CTA's ROWS = WG*TN
 * fn rows and TT token rows of those columns (16-byte copies of contiguous
 * rows: every 32-byte sector is fetched once). Each lane keeps its TN x 4 fn
 * values of the stage in registers and walks its tokens. The fn copies of
 * the first NSTG-1 stages are issued before griddepcontrol.wait (constant
 * weights). Outputs d [S, T, NOUT], q [S, T].
 *
 * POST (dsk_mhc_post_prenorm, NOUT = 24): x is R' = bf16(post_j out +
 * sum_i C_ij R_i), formed in the kernel. A stage's x region then holds five
 * slots of TT x 128 bf16: for the stage's column c (stream j = c / D,
 * element e = c - j D) slot i < 4 receives R[t, i, e] and slot 4 out[t, e]
 * (16-byte cp.async copies; every stream is read by the four splits whose
 * columns share e, through L2). After its own copies have landed, each
 * thread turns the 8 columns it copied into R' (the arithmetic of
 * mhc_post_kernel, same bits), writes them over slot 0, where the product
 * loop reads x, and the CTAs of output group 0 store them to R_out; the
 * stage's barrier then publishes slot 0. post and C of the CTA's tokens sit
 * in shared memory (loaded after the wait, once the first x copies are in
 * flight). With WG < 4 (several CTAs per split and token tile; mhc.cu
 * launches POST with WG = 4) every such CTA would form the same R' and
 * only output group 0 stores it. */
struct ProjParams {
  const uint16_t *R;
  int64_t R_stride;
  const float *fn;
  int64_t T, nD, Kc;
  float *d, *q;
  /* POST only */
  const uint16_t *out;
  int64_t out_stride, D;
  const float *post, *C;
  uint16_t *R_out;
  int64_t R_out_stride;
};

constexpr int kMixPerToken = 20; /* POST: post[4] then C[16] of a token in shared memory */

template <int NOUT, int TW, int WG, int WT, int NSTG, bool POST = false>
struct ProjShape {
  static constexpr int TN = NOUT / kOutGroups;
  static constexpr int ROWS = TN * WG;
  static constexpr int TT = TW * WT;
  static constexpr int NT = 32 * WG * WT;
  static constexpr int FN_BYTES = ROWS * kRound * 4;
  static constexpr int X_SLOT = TT * kRound;           /* bf16 elements of one x slot */
  static constexpr int X_BYTES = (POST ? 5 : 1) * X_SLOT * 2;
  static constexpr int STAGE = FN_BYTES + X_BYTES;
  static constexpr int SMEM = NSTG * STAGE;
  static constexpr int MIX_BYTES = POST ? TT * kMixPerToken * 4 : 0; /* static shared memory */
};

/* TG (lane groups; 1, 2 or 4): with TG = 1 lane l of a warp is the owner
 * of the order above (columns 128 i + 4 l + c) and walks all TW tokens of
 * its warp. With TG = 2 or 4 (DSK_MHC_LANE_GROUPS; TW a multiple of
 * 4 TG) physical lane tg * LG + cl (LG = 32 / TG lanes a group) serves
 * tokens tg * TL .. + TL - 1 (TL = TW / TG) and the TG owners cl + LG k,
 * each with accumulators of its own: the same fmaf sequence per owner, so
 * the same bits. The xor tree's steps at the masks of k's bits (16; or 16
 * and 8) pair owners inside the lane (a0 + a1; (a0 + a2) + (a1 + a3)),
 * the rest run across lanes (cl's bits) over 6 TL values, not 6 TW: for
 * TW 16 and TG 4, 21 shuffles instead of 93. */
template <int NOUT, int TW, int WG, int WT, int NSTG, bool TF32, bool POST = false, int TG = 1>
__global__ void __launch_bounds__(32 * WG * WT) mhc_project_kernel(const ProjParams p) {
  using Sh = ProjShape<NOUT, TW, WG, WT, NSTG, POST>;
  constexpr int TN = Sh::TN, ROWS = Sh::ROWS, TT = Sh::TT, NT = Sh::NT;
  static_assert(TG == 1 || ((TG == 2 || TG == 4) && TW % (4 * TG) == 0), "lane groups: 4 TG-token warps");
  constexpr int TL = TW / TG;                /* tokens per lane */
  constexpr int LG = 32 / TG;                /* lanes per group */
  constexpr int SQN = TG == 1 ? (TW + 3) / 4 : TG * (TL / 4); /* sums of squares per lane (TG > 1: per owner k) */
  constexpr int FN_N = ROWS * (kRound / 4);  /* 16-byte fn copies per stage */
  constexpr int X_N = TT * (kRound / 8);     /* 16-byte x copies per stage */
  constexpr int FN_CP = (FN_N + NT - 1) / NT;
  constexpr int X_CP = (X_N + NT - 1) / NT;
  static_assert(NOUT % kOutGroups == 0 && kOutGroups % WG == 0, "output groups must tile the outputs");
  static_assert(NSTG >= 2, "the ring needs two stages");
  static_assert(Sh::FN_BYTES % 16 == 0 && Sh::STAGE % 16 == 0, "16-byte aligned stage regions");
  static_assert(!POST || NOUT == DSK_MHC_MIX, "the fused post feeds the 24-output projection");
  extern __shared__ __align__(16) unsigned char proj_smem[];
  __shared__ DSK_MHC_STATIC float s_mix[POST ? TT * kMixPerToken : 1];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gl = warp % WG, h = warp / WG;
  const int g = (int)blockIdx.z * WG + gl; /* global output group, 0..3 */
  const int64_t s = blockIdx.y;
  const int64_t t0 = (int64_t)blockIdx.x * TT;
  const int ntok = (int)min((int64_t)TT, p.T - t0); /* >= 1 by the grid */
  int64_t kb = s * p.Kc;
  if (kb > p.nD) kb = p.nD;
  int64_t ke = kb + p.Kc;
  if (ke > p.nD) ke = p.nD;
  const int width = (int)(ke - kb); /* a multiple of 32 (nD and Kc are) */
  const int nst = (width + kRound - 1) / kRound;

  /* stage st: columns kb + st*128 + [0, 128) of the split; copies beyond the
   * split's width (rem, a multiple of 32) and of tokens past T are not
   * issued, and nothing reads those smem words */
  const float *fnb = p.fn + (int64_t)blockIdx.z * ROWS * p.nD + kb; /* the CTA's first fn row */
  /* The plain projection's copies from per-thread bases: copy f of a
   * thread is row (tid >> 5) + f NT/32 of the fn rows (column chunk
   * tid & 31, the same for every f) and token (tid >> 4) + k NT/16 of x
   * (chunk tid & 15): bases formed once, a stride per copy, one column
   * test per stage (device run 43: with the lane groups, prenorm at T 64
   * 0.95 -> 0.91x of the earlier form on DSv4-Flash). POST forms each
   * copy's row, chunk and address from u = tid + f NT (the same copies):
   * its fn copies from bases measured 1.02-1.03x slower at T 16. */
  const int fc4 = tid & 31, fr0 = tid >> 5, xc8 = tid & 15, xm0 = tid >> 4;
  const float *fsrc0 = fnb + (int64_t)fr0 * p.nD + 4 * fc4;
  const int64_t fstep = (int64_t)(NT / 32) * p.nD;
  auto load_fn = [&](int st) {
    float *dst = reinterpret_cast<float *>(proj_smem + (st % NSTG) * Sh::STAGE);
    const int col0 = st * kRound, rem = width - col0;
    if constexpr (!POST) {
      if (4 * fc4 < rem) {
#pragma unroll
        for (int f = 0; f < FN_CP; f++)
          if ((FN_N % NT == 0 && f < FN_N / NT) || fr0 + f * (NT / 32) < ROWS)
            cp_async16(dst + (fr0 + f * (NT / 32)) * kRound + 4 * fc4, fsrc0 + f * fstep + col0);
      }
    } else {
#pragma unroll
      for (int f = 0; f < FN_CP; f++) {
        const int u = tid + f * NT;
        const int row = u >> 5, c4 = u & 31;
        if (u < FN_N && 4 * c4 < rem) cp_async16(dst + row * kRound + 4 * c4, fnb + row * p.nD + col0 + 4 * c4);
      }
    }
  };
  const uint16_t *Rb = p.R + t0 * p.R_stride + kb;
  const uint16_t *xsrc0 = Rb + (int64_t)xm0 * p.R_stride + 8 * xc8;
  const int64_t xstep = (int64_t)(NT / 16) * p.R_stride;
  auto load_x = [&](int st) {
    uint16_t *dst = reinterpret_cast<uint16_t *>(proj_smem + (st % NSTG) * Sh::STAGE + Sh::FN_BYTES);
    const int col0 = st * kRound, rem = width - col0;
    if constexpr (!POST) {
      if (8 * xc8 < rem) {
#pragma unroll
        for (int k = 0; k < X_CP; k++) {
          const int m = xm0 + k * (NT / 16);
          if (((X_N % NT == 0 && k < X_N / NT) || m < TT) && m < ntok)
            cp_async16(dst + m * kRound + 8 * xc8, xsrc0 + k * xstep + col0);
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < X_CP; k++) {
        const int u = tid + k * NT;
        const int m = u >> 4, c8 = u & 15;
        if (u < X_N && m < ntok && 8 * c8 < rem) { /* the four streams and out at element e of column c */
          const int c = (int)kb + col0 + 8 * c8, j = c / (int)p.D, e = c - j * (int)p.D; /* nD < 2^17 */
          const uint16_t *src = p.R + (t0 + m) * p.R_stride + e;
#pragma unroll
          for (int i = 0; i < 4; i++) cp_async16(dst + i * Sh::X_SLOT + m * kRound + 8 * c8, src + i * p.D);
          cp_async16(dst + 4 * Sh::X_SLOT + m * kRound + 8 * c8, p.out + (t0 + m) * p.out_stride + e);
        }
      }
    }
  };
  /* POST: R' of stage st over slot 0 (and to R_out from output group 0).
   * R'[j, e] for 4 or 8 columns from the five source slots: the arithmetic
   * of mhc_post_kernel (same bits). */
  auto form_cols = [&](uint16_t *xs0, int m, int c, auto cols) {
    constexpr int NC = decltype(cols)::value;
    const int j = c / (int)p.D, e = c - j * (int)p.D; /* nD < 2^17; NC columns never straddle streams */
    float xi[4][8], o[8];
    if constexpr (NC == 8) {
#pragma unroll
      for (int i = 0; i < 4; i++) unpack8(*reinterpret_cast<const uint4 *>(xs0 + i * Sh::X_SLOT), xi[i]);
      unpack8(*reinterpret_cast<const uint4 *>(xs0 + 4 * Sh::X_SLOT), o);
    } else {
#pragma unroll
      for (int i = 0; i < 5; i++) {
        const uint2 v = *reinterpret_cast<const uint2 *>(xs0 + i * Sh::X_SLOT);
        float *dst = i < 4 ? xi[i] : o;
        dst[0] = bf16_lo(v.x); dst[1] = bf16_hi(v.x); dst[2] = bf16_lo(v.y); dst[3] = bf16_hi(v.y);
      }
    }
    const float *mx = s_mix + m * kMixPerToken;
    const float pw = mx[j];
    float cj[4];
#pragma unroll
    for (int i = 0; i < 4; i++) cj[i] = mx[4 + 4 * i + j];
    float a[8];
#pragma unroll
    for (int kk = 0; kk < NC; kk++) {
      float acc = pw * o[kk];
#pragma unroll
      for (int i = 0; i < 4; i++) acc = fmaf(cj[i], xi[i][kk], acc);
      a[kk] = acc;
    }
    uint16_t *dst = p.R_out + (t0 + m) * p.R_out_stride + j * p.D + e;
    if constexpr (NC == 8) {
      const uint4 r = pack8(a);
      *reinterpret_cast<uint4 *>(xs0) = r;
      if (blockIdx.z == 0) *reinterpret_cast<uint4 *>(dst) = r;
    } else {
      const uint2 r = make_uint2(pack_bf16(a[0], a[1]), pack_bf16(a[2], a[3]));
      *reinterpret_cast<uint2 *>(xs0) = r;
      if (blockIdx.z == 0) *reinterpret_cast<uint2 *>(dst) = r;
    }
  };
  /* 8-column items are the ones this thread copied (its own copies have
   * landed: no barrier); when they would leave threads idle (TT * 16 <
   * NT), 4-column items (twice as many) after a barrier */
  constexpr bool FORM4 = TT * 16 < NT;
  auto form_post = [&](int st) {
    uint16_t *xr = reinterpret_cast<uint16_t *>(proj_smem + (st % NSTG) * Sh::STAGE + Sh::FN_BYTES);
    const int col0 = st * kRound, rem = width - col0;
    if constexpr (FORM4) {
      __syncthreads(); /* every thread's copies of stage st */
      for (int u = tid; u < TT * 32; u += NT) {
        const int m = u >> 5, c4 = u & 31;
        if (m < ntok && 4 * c4 < rem)
          form_cols(xr + m * kRound + 4 * c4, m, (int)kb + col0 + 4 * c4, std::integral_constant<int, 4>());
      }
    } else {
#pragma unroll
      for (int k = 0; k < X_CP; k++) {
        const int u = tid + k * NT;
        const int m = u >> 4, c8 = u & 15;
        if (u < X_N && m < ntok && 8 * c8 < rem)
          form_cols(xr + m * kRound + 8 * c8, m, (int)kb + col0 + 8 * c8, std::integral_constant<int, 8>());
      }
    }
  };

  if constexpr (TG > 1) { /* rows of tokens past T (x, or POST's slot 0): zeros (read, never stored); nothing else writes them */
    if (ntok < TT)
      for (int u = tid; u < NSTG * (TT - ntok) * (kRound / 8); u += NT) {
        const int b = u / ((TT - ntok) * (kRound / 8)), v = u - b * ((TT - ntok) * (kRound / 8));
        uint4 *dst = reinterpret_cast<uint4 *>(proj_smem + b * Sh::STAGE + Sh::FN_BYTES) + (ntok + v / (kRound / 8)) * (kRound / 8) + v % (kRound / 8);
        *dst = make_uint4(0u, 0u, 0u, 0u);
      }
  }
  /* prologue: fn of stages 0..NSTG-2 before the wait, then their x; group k
   * holds x of stage k (group 0 also all the prologue fn copies) */
#pragma unroll
  for (int k = 0; k < NSTG - 1; k++)
    if (k < nst) load_fn(k);
  pdl_wait();
  pdl_launch_dependents();
#pragma unroll
  for (int k = 0; k < NSTG - 1; k++) {
    if (k < nst) load_x(k);
    cp_async_commit();
  }
  if constexpr (POST) { /* after the x copies are issued: the two round trips overlap */
    for (int e = tid; e < ntok * kMixPerToken; e += NT) {
      const int64_t t = t0 + e / kMixPerToken;
      const int v = e % kMixPerToken;
      s_mix[e] = v < 4 ? p.post[t * 4 + v] : p.C[t * 16 + (v - 4)];
    }
    __syncthreads();
  }

  float acc[TL * TN * TG];
  float sq[SQN];
#pragma unroll
  for (int i = 0; i < TL * TN * TG; i++) acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < SQN; i++) sq[i] = 0.f;

  for (int st = 0; st < nst; st++) {
    cp_async_wait<NSTG - 2>(); /* groups 0..st of this thread have landed: stage st */
    if constexpr (POST) form_post(st);
    __syncthreads();           /* ... everybody's; and everybody is done with stage st-1 */
    if (st + NSTG - 1 < nst) { /* refill the buffer of stage st-1 */
      load_fn(st + NSTG - 1);
      load_x(st + NSTG - 1);
    }
    cp_async_commit(); /* possibly empty: keeps the group count in step */
    const unsigned char *sb = proj_smem + (st % NSTG) * Sh::STAGE;
    const float *fs = reinterpret_cast<const float *>(sb);
    const uint16_t *xs = reinterpret_cast<const uint16_t *>(sb + Sh::FN_BYTES);
    if constexpr (TG > 1) {
      const int tg = lane / LG, cl = lane % LG, rem = width - st * kRound;
#pragma unroll
      for (int k = 0; k < TG; k++) {
        const int col = 4 * (cl + LG * k);
        if (TG == 4 ? 32 * k < rem : col < rem) { /* owner cl + LG k has columns in this stage (TG 4: warp-uniform, rem being a multiple of 32) */
          float w[TN][4];
#pragma unroll
          for (int jj = 0; jj < TN; jj++) {
            const float4 f4 = *reinterpret_cast<const float4 *>(fs + (gl * TN + jj) * kRound + col);
            w[jj][0] = f4.x; w[jj][1] = f4.y; w[jj][2] = f4.z; w[jj][3] = f4.w;
            if (TF32) {
#pragma unroll
              for (int c = 0; c < 4; c++) w[jj][c] = tf32_rna(w[jj][c]);
            }
          }
#pragma unroll
          for (int ml = 0; ml < TL; ml++) {
            const int m = tg * TL + ml; /* token within the warp's TW; rows past ntok hold zeros */
            const uint2 xv = *reinterpret_cast<const uint2 *>(xs + (h * TW + m) * kRound + col);
            const float x[4] = {bf16_lo(xv.x), bf16_hi(xv.x), bf16_lo(xv.y), bf16_hi(xv.y)};
            if ((ml & 3) == g) { /* (m & 3) == g: TL is a multiple of 4; warp-uniform */
#pragma unroll
              for (int c = 0; c < 4; c++) sq[TG * (ml >> 2) + k] = fmaf(x[c], x[c], sq[TG * (ml >> 2) + k]);
            }
#pragma unroll
            for (int jj = 0; jj < TN; jj++) {
#pragma unroll
              for (int c = 0; c < 4; c++) acc[(ml * TN + jj) * TG + k] = fmaf(w[jj][c], x[c], acc[(ml * TN + jj) * TG + k]);
            }
          }
        }
      }
    } else if (4 * lane < width - st * kRound) { /* lane-divergent; no shuffles or barriers inside */
      float w[TN][4];
#pragma unroll
      for (int jj = 0; jj < TN; jj++) {
        const float4 f4 = *reinterpret_cast<const float4 *>(fs + (gl * TN + jj) * kRound + 4 * lane);
        w[jj][0] = f4.x; w[jj][1] = f4.y; w[jj][2] = f4.z; w[jj][3] = f4.w;
        if (TF32) {
#pragma unroll
          for (int c = 0; c < 4; c++) w[jj][c] = tf32_rna(w[jj][c]);
        }
      }
#pragma unroll
      for (int m = 0; m < TW; m++) {
        const int mt = h * TW + m;
        if (mt < ntok) { /* warp-uniform */
          const uint2 xv = *reinterpret_cast<const uint2 *>(xs + mt * kRound + 4 * lane);
          const float x[4] = {bf16_lo(xv.x), bf16_hi(xv.x), bf16_lo(xv.y), bf16_hi(xv.y)};
          if ((m & 3) == g) {
#pragma unroll
            for (int c = 0; c < 4; c++) sq[m >> 2] = fmaf(x[c], x[c], sq[m >> 2]);
          }
#pragma unroll
          for (int jj = 0; jj < TN; jj++) {
#pragma unroll
            for (int c = 0; c < 4; c++) acc[m * TN + jj] = fmaf(w[jj][c], x[c], acc[m * TN + jj]);
          }
        }
      }
    }
  }
  cp_async_wait<0>(); /* only empty groups can be pending here */

  if constexpr (TG > 1) {
    /* the tree's steps at the masks of k's bits inside the lane, then LG / 2 .. 1 across */
    const int tg = lane / LG;
    auto fold = [](const float *a) { return TG == 4 ? (a[0] + a[2]) + (a[1] + a[3]) : a[0] + a[1]; };
    float v[TL * TN];
#pragma unroll
    for (int i = 0; i < TL * TN; i++) v[i] = fold(acc + TG * i);
    int off = 0, dup = 0;
    xor_reduce<TL * TN, LG / 2>(v, lane, off, dup);
    constexpr int NF = reduced_count_from(TL * TN, LG / 2);
    if ((lane & dup) == 0) {
#pragma unroll
      for (int i = 0; i < NF; i++) {
        const int u = off + i, ml = u / TN, jj = u - ml * TN;
        const int mt = h * TW + tg * TL + ml;
        if (mt < ntok) p.d[(s * p.T + t0 + mt) * NOUT + g * TN + jj] = v[i];
      }
    }
    if (g < TW) { /* every warp: a lane's tokens tg TL + ml with ml & 3 == g */
      float vq[TL / 4];
#pragma unroll
      for (int i = 0; i < TL / 4; i++) vq[i] = fold(sq + TG * i);
      int offq = 0, dupq = 0;
      xor_reduce<TL / 4, LG / 2>(vq, lane, offq, dupq);
      constexpr int NQ = reduced_count_from(TL / 4, LG / 2);
      if ((lane & dupq) == 0) {
#pragma unroll
        for (int i = 0; i < NQ; i++) {
          const int mt = h * TW + tg * TL + 4 * (offq + i) + g;
          if (mt < ntok) p.q[s * p.T + t0 + mt] = vq[i];
        }
      }
    }
    return;
  }
  /* cross-lane sums, then the stores (every lane reaches here) */
  int off = 0, dup = 0;
  xor_reduce<TW * TN, 16>(acc, lane, off, dup);
  constexpr int NF = reduced_count(TW * TN);
  if ((lane & dup) == 0) {
#pragma unroll
    for (int i = 0; i < NF; i++) {
      const int u = off + i, m = u / TN, jj = u - m * TN;
      const int mt = h * TW + m;
      if (mt < ntok) p.d[(s * p.T + t0 + mt) * NOUT + g * TN + jj] = acc[i];
    }
  }
  if (g < TW) { /* warp-uniform: the warp owns the squares of its tokens g, g + 4, ... */
    int offq = 0, dupq = 0;
    xor_reduce<SQN, 16>(sq, lane, offq, dupq);
    constexpr int NQ = reduced_count(SQN);
    if ((lane & dupq) == 0) {
#pragma unroll
      for (int i = 0; i < NQ; i++) {
        const int m = g + 4 * (offq + i), mt = h * TW + m;
        if (m < TW && mt < ntok) p.q[s * p.T + t0 + mt] = sq[i];
      }
    }
  }
}

/* ------------------------------------------------------------------ finish
 * One block of 288 threads per token. NOUT = 24: dsk_mhc_pre (pre, post,
 * Sinkhorn C, y, optional RMSNorm with NORM); NOUT = 4: dsk_mhc_head (pre,
 * h). Before griddepcontrol.wait warp 0 loads scale and base, and with NORM
 * the y warps prefetch norm_w to L2 (constant parameters). Then the y warps
 * load their first PF R vectors of each stream; every warp w sums the
 * splits w, w + 9, ... of the token's partials into registers (lane v owns
 * value v: d_v for v < NOUT, q for v = NOUT; up to SB = 8 or 16 loads in
 * flight per lane) and leaves them in shared memory; warp 0 adds the nine warp sums,
 * forms the RMS factor and the sigmoids lane-parallel and publishes the pre
 * weights;
 * then warp 0 runs Sinkhorn (every lane the same scalar code) and stores C
 * while warps 1..8 form y. */
struct FinishParams {
  const float *d, *q; /* partials [S, T, NOUT], [S, T] */
  int64_t S, T, D, nD;
  const uint16_t *R; int64_t R_stride;
  const float *scale, *base;
  float eps_rms, eps_hc, post_mult, norm_eps;
  int iters;
  const float *norm_w;
  uint16_t *y; int64_t y_stride;
  float *post, *C, *pre_w;
};

/* Sinkhorn of spec §3 on a 4x4 matrix in registers: row softmax + eps, a
 * column normalisation, then iters - 1 (row, column) rounds; each step
 * divides by (sum + eps) through one reciprocal per row / column. */
__device__ __forceinline__ void sinkhorn_cols(float (&c)[16], float eps) {
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const float inv = rcp_approx(((c[j] + c[4 + j]) + (c[8 + j] + c[12 + j])) + eps);
#pragma unroll
    for (int i = 0; i < 4; i++) c[4 * i + j] *= inv;
  }
}
__device__ __forceinline__ void sinkhorn_f32(float (&c)[16], int iters, float eps) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float mx = fmaxf(fmaxf(c[4 * i], c[4 * i + 1]), fmaxf(c[4 * i + 2], c[4 * i + 3]));
    float e[4];
#pragma unroll
    for (int j = 0; j < 4; j++) e[j] = expf(c[4 * i + j] - mx);
    const float inv = rcp_approx((e[0] + e[1]) + (e[2] + e[3]));
#pragma unroll
    for (int j = 0; j < 4; j++) c[4 * i + j] = fmaf(e[j], inv, eps);
  }
  sinkhorn_cols(c, eps);
#pragma unroll 1
  for (int it = 1; it < iters; it++) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const float inv = rcp_approx(((c[4 * i] + c[4 * i + 1]) + (c[4 * i + 2] + c[4 * i + 3])) + eps);
#pragma unroll
      for (int j = 0; j < 4; j++) c[4 * i + j] *= inv;
    }
    sinkhorn_cols(c, eps);
  }
}

/* y for 8 columns from the 4 streams: fp32 fmaf chain over i = 0..3, one
 * bf16 rounding. NORM: the rounded vector goes to shared memory (for the
 * second pass) and its squares are added to ss; else it is stored. */
template <bool NORM>
__device__ __forceinline__ float emit_y(const uint4 *r4, const float *w, int64_t v, uint16_t *y, uint4 *s_y,
                                        float ss) {
  float a[8], b[8];
  unpack8(r4[0], a);
#pragma unroll
  for (int c = 0; c < 8; c++) a[c] = w[0] * a[c];
#pragma unroll
  for (int i = 1; i < 4; i++) {
    unpack8(r4[i], b);
#pragma unroll
    for (int c = 0; c < 8; c++) a[c] = fmaf(w[i], b[c], a[c]);
  }
  const uint4 out = pack8(a);
  if (NORM) {
    s_y[v] = out;
    unpack8(out, b); /* the rounded values */
#pragma unroll
    for (int c = 0; c < 8; c++) ss = fmaf(b[c], b[c], ss);
  } else {
    *reinterpret_cast<uint4 *>(y + 8 * v) = out;
  }
  return ss;
}

template <int NOUT>
struct FinishSmem {
  float wsum[kFinishWarps * (NOUT + 1)]; /* split sums per warp [warp][value] */
  float w[4];
  float red[kYWarps];
};

/* Dynamic shared memory of the finish kernel: with NORM the token's rounded
 * y row (D bf16); nothing otherwise. */
__host__ __device__ constexpr int64_t finish_dyn_bytes(int64_t D, bool norm) { return norm ? D * 2 : 0; }

template <int NOUT, bool NORM, int PF, int SB>
__global__ void __launch_bounds__(kFinishThreads, PF <= 2 ? 3 : 2) mhc_finish_kernel(const FinishParams p) {
  constexpr int NV = NOUT + 1;
  static_assert(NV <= 32, "one lane per value");
  __shared__ DSK_MHC_STATIC FinishSmem<NOUT> sm;
  extern __shared__ __align__(16) unsigned char fin_smem[];
  uint4 *s_y = reinterpret_cast<uint4 *>(fin_smem); /* NORM: y as bf16 [D] */
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t t = blockIdx.x;
  const int64_t nvec = p.D / 8;
  const int yt = tid - 32;

  /* constant parameters, before the wait */
  float sc = 0.f, bs = 0.f;
  if (warp == 0) {
    if (NOUT == 24) {
      const int si = lane < 4 ? 0 : lane < 8 ? 1 : 2;
      if (lane < NOUT) {
        sc = p.scale[si];
        bs = p.base[lane];
      }
    } else {
      sc = p.scale[0];
      if (lane < 4) bs = p.base[lane];
    }
  } else if (NORM) {
    for (int64_t l = yt; l < (p.D + 31) / 32; l += kYThreads) prefetch_l2(p.norm_w + 32 * l);
  }

  pdl_wait();
  pdl_launch_dependents();

  /* 0. y warps: load this thread's first R vectors (used in step 3) */
  const uint16_t *x = p.R + t * p.R_stride;
  uint4 pf[PF][4];
  if (warp > 0) {
#pragma unroll
    for (int i = 0; i < PF; i++) {
      const int64_t v = yt + (int64_t)i * kYThreads;
      if (v < nvec) {
#pragma unroll
        for (int st = 0; st < 4; st++) pf[i][st] = ld16(x + st * p.D + 8 * v);
      }
    }
  }

  /* 1. split sums: warp w adds the splits s = w, w + 9, w + 18, ... in
   * ascending order, lane v < NOUT + 1 holding value v (d_v; q for v =
   * NOUT), with SB loads in flight per lane (each warp load reads
   * the NOUT contiguous values of one split); the nine warp sums go to
   * shared memory */
  if (lane < NV) {
    const float *src = lane < NOUT ? p.d + t * NOUT + lane : p.q + t;
    const int64_t stride = lane < NOUT ? p.T * NOUT : p.T;
    float a = 0.f;
    for (int64_t s0 = warp; s0 < p.S; s0 += (int64_t)SB * kFinishWarps) {
      float v[SB];
#pragma unroll
      for (int k = 0; k < SB; k++) {
        const int64_t s = s0 + (int64_t)k * kFinishWarps;
        v[k] = s < p.S ? src[s * stride] : 0.f;
      }
#pragma unroll
      for (int k = 0; k < SB; k++)
        if (s0 + (int64_t)k * kFinishWarps < p.S) a += v[k];
    }
    sm.wsum[warp * NV + lane] = a;
  }
  __syncthreads();

  /* 2. warp 0: the nine warp sums in warp order, RMS factor, sigmoids
   * (lane-parallel), pre weights published */
  float c[16];
  if (warp == 0) {
    float run = 0.f;
    if (lane < NV) {
      float ws[kFinishWarps];
#pragma unroll
      for (int w = 0; w < kFinishWarps; w++) ws[w] = sm.wsum[w * NV + lane];
      run = ws[0];
#pragma unroll
      for (int w = 1; w < kFinishWarps; w++) run += ws[w];
    }
    const float qsum = __shfl_sync(0xffffffffu, run, NOUT);
    const float r = 1.0f / sqrtf(qsum / (float)p.nD + p.eps_rms);
    const float m = run * r;
    if (NOUT == 24) {
      const float z = fmaf(m, sc, bs);
      if (lane < 4) {
        const float pre = sigmoidf_(z) + p.eps_hc;
        sm.w[lane] = pre;
        if (p.pre_w) p.pre_w[t * 4 + lane] = pre;
      } else if (lane < 8) {
        p.post[t * 4 + (lane - 4)] = p.post_mult * sigmoidf_(z);
      }
#pragma unroll
      for (int e = 0; e < 16; e++) c[e] = __shfl_sync(0xffffffffu, z, 8 + e);
    } else {
      if (lane < 4) sm.w[lane] = sigmoidf_(fmaf(m, sc, bs)) + p.eps_hc;
    }
  }
  __syncthreads();

  if (warp == 0) {
    /* 3a. Sinkhorn: all lanes run the same scalar code; lane e stores C[e] */
    if (NOUT == 24) {
      sinkhorn_f32(c, p.iters, p.eps_hc);
      float o = c[0];
#pragma unroll
      for (int e = 1; e < 16; e++)
        if (lane == e) o = c[e];
      if (lane < 16) p.C[t * 16 + lane] = o;
    }
    return; /* no block-wide barrier follows */
  }

  /* 3b. y warps: y = bf16(sum_i pre_i R_i), 8 columns per step */
  const float w[4] = {sm.w[0], sm.w[1], sm.w[2], sm.w[3]};
  uint16_t *y = p.y + t * p.y_stride;
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < PF; i++) {
    const int64_t v = yt + (int64_t)i * kYThreads;
    if (v < nvec) ss = emit_y<NORM>(pf[i], w, v, y, s_y, ss);
  }
  for (int64_t v = yt + (int64_t)PF * kYThreads; v < nvec; v += kYThreads) {
    uint4 r4[4];
#pragma unroll
    for (int st = 0; st < 4; st++) r4[st] = ld16(x + st * p.D + 8 * v);
    ss = emit_y<NORM>(r4, w, v, y, s_y, ss);
  }
  if (!NORM) return;

  /* 4. fused RMSNorm of the rounded y: sum of squares over the y warps
   * (fixed tree: warp butterfly, then warps 1..8 in order), named barrier 1
   * among the 256 y threads only (warp 0 has left) */
  ss = warp_sum(ss);
  if (lane == 0) sm.red[warp - 1] = ss;
  bar_sync_1<kYThreads>();
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < kYWarps; i++) tot += sm.red[i];
  const float rs = 1.0f / sqrtf(tot / (float)p.D + p.norm_eps);
  /* each thread re-reads only the y vectors it wrote itself */
  for (int64_t v = yt; v < nvec; v += kYThreads) {
    float a[8];
    unpack8(s_y[v], a);
    const float4 *w4 = reinterpret_cast<const float4 *>(p.norm_w + 8 * v);
    const float4 g0 = w4[0], g1 = w4[1];
    const float gw[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
    for (int cc = 0; cc < 8; cc++) a[cc] = gw[cc] * (a[cc] * rs);
    *reinterpret_cast<uint4 *>(y + 8 * v) = pack8(a);
  }
}

/* ------------------------------------------------------------------- post
 * grid (T, ceil(D / 8 / kPostThreads)); each thread loads all four streams
 * of its 8 columns before storing any (in place is safe). Everything it
 * reads may come from the kernels before it: no loads before the wait. */
__global__ void __launch_bounds__(kPostThreads) mhc_post_kernel(const uint16_t *out, int64_t out_stride,
                                                               const uint16_t *R, int64_t R_stride,
                                                               const float *post, const float *C, uint16_t *R_out,
                                                               int64_t R_out_stride, int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t t = blockIdx.x;
  const int64_t v = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (v >= D / 8) return;
  /* R and R_out may alias: plain (not __ldg / __restrict__) accesses */
  const uint16_t *x = R + t * R_stride + 8 * v;
  float xi[4][8], o[8];
#pragma unroll
  for (int i = 0; i < 4; i++) unpack8(ld16(x + i * D), xi[i]);
  unpack8(ld16(out + t * out_stride + 8 * v), o);
  float c[16], pw[4];
#pragma unroll
  for (int e = 0; e < 16; e++) c[e] = C[t * 16 + e];
#pragma unroll
  for (int j = 0; j < 4; j++) pw[j] = post[t * 4 + j];
  uint4 res[4];
#pragma unroll
  for (int j = 0; j < 4; j++) {
    float a[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
      float acc = pw[j] * o[k];
#pragma unroll
      for (int i = 0; i < 4; i++) acc = fmaf(c[4 * i + j], xi[i][k], acc);
      a[k] = acc;
    }
    res[j] = pack8(a);
  }
  uint16_t *yo = R_out + t * R_out_stride + 8 * v;
#pragma unroll
  for (int j = 0; j < 4; j++) *reinterpret_cast<uint4 *>(yo + j * D) = res[j];
}
