/* mhc.cu - the CUDA mHC ops (spec/mhc.md; docs/mhc.md): the split
 * projection (dsk_mhc_prenorm, and the projection of dsk_mhc_head), the
 * per-token finish (dsk_mhc_pre: split sums, RMS factor, sigmoids, Sinkhorn,
 * weighted stream sum, optional fused RMSNorm; the head's finish), and
 * dsk_mhc_post. Portable CUDA (plain fp32 FMA on CUDA cores, warp shuffles;
 * no wgmma, TMEM, clusters or tensor-core MMA): one source for sm_90 and
 * sm_120a/121a, at most ~36 KB of shared memory per block.
 *
 * Descriptors arrive validated (src/ops/mhc.c): T >= 1, D a multiple of 8,
 * nD = 4 D, every vector-accessed tensor 16-byte aligned with 16-byte row
 * strides, S = tactic->v[0] in 1..S_max.
 *
 * Summation orders (fixed, independent of T, so a pinned S gives
 * batch-invariant bits):
 *  - projection of (token, split s): lane l of one warp owns the columns
 *    kb + 8 l + 256 i + c (c = 0..7, i ascending), accumulating with fmaf in
 *    that order; the 32 lane sums are combined by a butterfly of
 *    __shfl_xor_sync (16, 8, 4, 2, 1). Empty splits write 0.
 *  - finish: the S partials are summed in ascending s (fp32), as the
 *    reference does in fp64; y = fmaf chain over streams i = 0..3.
 * TF32: fn is rounded to TF32 (nearest, ties away: the same bit rule as the
 * CPU reference) and the products stay on fp32 FMA; numerics of TF32, not
 * its speed (docs/mhc.md lists the MMA path as not done).
 */
#include <string.h>

#include "cuda_common.cuh"

namespace {

constexpr int kFinishThreads = 256;
constexpr int kPostThreads = 128;
constexpr int kPartChunk = 128; /* splits staged in shared memory per round of the finish kernel (S_max of DSv4 fits one) */
constexpr int kPrefetch = 2;    /* R vectors per thread loaded before the per-token scalar work */

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

/* ---------------------------------------------------------------- projection
 * grid (ceil(T / (TM * warps)), S); each warp owns TM consecutive tokens and
 * the whole column range of split blockIdx.y. Outputs: d [S, T, NOUT] and
 * q [S, T]. */
template <int NOUT, int TM, bool TF32>
__global__ void __launch_bounds__(256) mhc_project_kernel(const uint16_t *__restrict__ R, int64_t R_stride,
                                                         const float *__restrict__ fn, int64_t T, int64_t nD,
                                                         int64_t Kc, float *__restrict__ dout,
                                                         float *__restrict__ qout) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  const int64_t s = blockIdx.y;
  const int64_t t0 = ((int64_t)blockIdx.x * nwarps + warp) * TM;
  if (t0 >= T) return; /* whole warp: no block-level synchronisation below */
  int64_t kb = s * Kc, ke = kb + Kc;
  if (kb > nD) kb = nD;
  if (ke > nD) ke = nD;

  float acc[TM][NOUT];
  float sq[TM];
#pragma unroll
  for (int m = 0; m < TM; m++) {
    sq[m] = 0.f;
#pragma unroll
    for (int j = 0; j < NOUT; j++) acc[m][j] = 0.f;
  }

  for (int64_t k = kb + 8 * lane; k < ke; k += 256) {
    float x[TM][8];
#pragma unroll
    for (int m = 0; m < TM; m++) {
      if (t0 + m < T) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(R + (t0 + m) * R_stride + k));
        unpack8(v, x[m]);
      } else {
#pragma unroll
        for (int c = 0; c < 8; c++) x[m][c] = 0.f;
      }
#pragma unroll
      for (int c = 0; c < 8; c++) sq[m] = fmaf(x[m][c], x[m][c], sq[m]);
    }
#pragma unroll
    for (int j = 0; j < NOUT; j++) {
      const float4 *w4 = reinterpret_cast<const float4 *>(fn + (int64_t)j * nD + k);
      float4 a = __ldg(w4), b = __ldg(w4 + 1);
      float w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      if (TF32) {
#pragma unroll
        for (int c = 0; c < 8; c++) w[c] = tf32_rna(w[c]);
      }
#pragma unroll
      for (int m = 0; m < TM; m++) {
#pragma unroll
        for (int c = 0; c < 8; c++) acc[m][j] = fmaf(w[c], x[m][c], acc[m][j]);
      }
    }
  }

#pragma unroll
  for (int m = 0; m < TM; m++) {
    sq[m] = warp_sum(sq[m]);
#pragma unroll
    for (int j = 0; j < NOUT; j++) acc[m][j] = warp_sum(acc[m][j]);
  }
#pragma unroll
  for (int m = 0; m < TM; m++) {
    const int64_t t = t0 + m;
    if (t >= T) break;
    float v = sq[m];
#pragma unroll
    for (int j = 0; j < NOUT; j++)
      if (lane == j) v = acc[m][j];
    if (lane < NOUT) dout[(s * T + t) * NOUT + lane] = v;
    else if (lane == NOUT) qout[s * T + t] = v;
  }
}

/* ------------------------------------------------------------------ finish
 * One block per token. NOUT = 24: dsk_mhc_pre (pre, post, Sinkhorn C, y,
 * optional RMSNorm with NORM); NOUT = 4: dsk_mhc_head (pre, h). */
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

__device__ void sinkhorn_f32(float *c, int iters, float eps) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float mx = fmaxf(fmaxf(c[4 * i], c[4 * i + 1]), fmaxf(c[4 * i + 2], c[4 * i + 3]));
    float e[4];
#pragma unroll
    for (int j = 0; j < 4; j++) e[j] = expf(c[4 * i + j] - mx);
    const float sum = e[0] + e[1] + e[2] + e[3];
#pragma unroll
    for (int j = 0; j < 4; j++) c[4 * i + j] = e[j] / sum + eps;
  }
  for (int it = 0; it < iters; it++) {
    if (it > 0) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float rs = c[4 * i] + c[4 * i + 1] + c[4 * i + 2] + c[4 * i + 3] + eps;
#pragma unroll
        for (int j = 0; j < 4; j++) c[4 * i + j] = c[4 * i + j] / rs;
      }
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float cs = c[j] + c[4 + j] + c[8 + j] + c[12 + j] + eps;
#pragma unroll
      for (int i = 0; i < 4; i++) c[4 * i + j] = c[4 * i + j] / cs;
    }
  }
}

/* y for 8 columns from the 4 streams: fp32 fmaf chain over i = 0..3, one
 * bf16 rounding. NORM: the rounded vector goes to shared memory (for the
 * second pass) and its squares are added to ss; else it is stored. */
template <bool NORM>
__device__ __forceinline__ float emit_y(const uint4 *r4, const float *w, int64_t v, uint16_t *y, unsigned char *s_dyn,
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
    reinterpret_cast<uint4 *>(s_dyn)[v] = out;
    unpack8(out, b); /* the rounded values */
#pragma unroll
    for (int c = 0; c < 8; c++) ss = fmaf(b[c], b[c], ss);
  } else {
    *reinterpret_cast<uint4 *>(y + 8 * v) = out;
  }
  return ss;
}

template <int NOUT, bool NORM>
__global__ void __launch_bounds__(kFinishThreads) mhc_finish_kernel(const FinishParams p) {
  __shared__ float s_part[kPartChunk * (NOUT + 1)];
  __shared__ float s_w[4];
  __shared__ float s_red[kFinishThreads / 32];
  extern __shared__ __align__(16) unsigned char s_dyn[]; /* NORM: y as bf16 [D] */
  const int tid = threadIdx.x;
  const int64_t t = blockIdx.x;

  /* 0. start loading this thread's first R vectors (used in step 3) */
  const uint16_t *x = p.R + t * p.R_stride;
  uint16_t *y = p.y + t * p.y_stride;
  const int64_t nvec = p.D / 8;
  uint4 pf[kPrefetch][4];
#pragma unroll
  for (int i = 0; i < kPrefetch; i++) {
    const int64_t v = tid + (int64_t)i * blockDim.x;
    if (v < nvec) {
#pragma unroll
      for (int st = 0; st < 4; st++) pf[i][st] = __ldg(reinterpret_cast<const uint4 *>(x + st * p.D + 8 * v));
    }
  }

  /* 1. split sums in ascending s: thread j <= NOUT owns value j */
  float run = 0.f;
  for (int64_t s0 = 0; s0 < p.S; s0 += kPartChunk) {
    const int ns = (int)min((int64_t)kPartChunk, p.S - s0);
    for (int v = tid; v < ns * (NOUT + 1); v += blockDim.x) {
      const int sl = v / (NOUT + 1), j = v % (NOUT + 1);
      const int64_t s = s0 + sl;
      s_part[v] = j < NOUT ? p.d[(s * p.T + t) * NOUT + j] : p.q[s * p.T + t];
    }
    __syncthreads();
    if (tid <= NOUT)
      for (int sl = 0; sl < ns; sl++) run += s_part[sl * (NOUT + 1) + tid];
    __syncthreads();
  }
  if (tid <= NOUT) s_part[tid] = run;
  __syncthreads();

  /* 2. one thread: RMS factor, sigmoids, Sinkhorn */
  if (tid == 0) {
    const float r = 1.0f / sqrtf(s_part[NOUT] / (float)p.nD + p.eps_rms);
    if (NOUT == 24) {
      const float s0 = p.scale[0], s1 = p.scale[1], s2 = p.scale[2];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float pre = sigmoidf_(fmaf(s_part[i] * r, s0, p.base[i])) + p.eps_hc;
        s_w[i] = pre;
        if (p.pre_w) p.pre_w[t * 4 + i] = pre;
        p.post[t * 4 + i] = p.post_mult * sigmoidf_(fmaf(s_part[4 + i] * r, s1, p.base[4 + i]));
      }
      float c[16];
#pragma unroll
      for (int e = 0; e < 16; e++) c[e] = fmaf(s_part[8 + e] * r, s2, p.base[8 + e]);
      sinkhorn_f32(c, p.iters, p.eps_hc);
#pragma unroll
      for (int e = 0; e < 16; e++) p.C[t * 16 + e] = c[e];
    } else {
      const float sc = p.scale[0];
#pragma unroll
      for (int i = 0; i < 4; i++) s_w[i] = sigmoidf_(fmaf(s_part[i] * r, sc, p.base[i])) + p.eps_hc;
    }
  }
  __syncthreads();
  const float w[4] = {s_w[0], s_w[1], s_w[2], s_w[3]};

  /* 3. y = bf16(sum_i pre_i R_i), 8 columns per step (prefetched vectors first) */
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kPrefetch; i++) {
    const int64_t v = tid + (int64_t)i * blockDim.x;
    if (v < nvec) ss = emit_y<NORM>(pf[i], w, v, y, s_dyn, ss);
  }
  for (int64_t v = tid + (int64_t)kPrefetch * blockDim.x; v < nvec; v += blockDim.x) {
    uint4 r4[4];
#pragma unroll
    for (int st = 0; st < 4; st++) r4[st] = __ldg(reinterpret_cast<const uint4 *>(x + st * p.D + 8 * v));
    ss = emit_y<NORM>(r4, w, v, y, s_dyn, ss);
  }
  if (!NORM) return;

  /* 4. fused RMSNorm of the rounded y: block sum of squares (fixed tree) */
  ss = warp_sum(ss);
  if ((tid & 31) == 0) s_red[tid >> 5] = ss;
  __syncthreads();
  if (tid == 0) {
    float tot = 0.f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) tot += s_red[i];
    s_red[0] = 1.0f / sqrtf(tot / (float)p.D + p.norm_eps);
  }
  __syncthreads();
  const float rs = s_red[0];
  for (int64_t v = tid; v < nvec; v += blockDim.x) {
    float a[8];
    unpack8(reinterpret_cast<const uint4 *>(s_dyn)[v], a);
    const float4 *w4 = reinterpret_cast<const float4 *>(p.norm_w + 8 * v);
    const float4 g0 = __ldg(w4), g1 = __ldg(w4 + 1);
    const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
    for (int c = 0; c < 8; c++) a[c] = g[c] * (a[c] * rs);
    *reinterpret_cast<uint4 *>(y + 8 * v) = pack8(a);
  }
}

/* ------------------------------------------------------------------- post
 * grid (T, ceil(D / 8 / kPostThreads)); each thread loads all four streams
 * of its 8 columns before storing any (in place is safe). */
__global__ void __launch_bounds__(kPostThreads) mhc_post_kernel(const uint16_t *__restrict__ out, int64_t out_stride,
                                                               const uint16_t *R, int64_t R_stride,
                                                               const float *__restrict__ post,
                                                               const float *__restrict__ C, uint16_t *R_out,
                                                               int64_t R_out_stride, int64_t D) {
  const int64_t t = blockIdx.x;
  const int64_t v = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (v >= D / 8) return;
  /* R and R_out may alias: plain (not __ldg / __restrict__) accesses */
  const uint16_t *x = R + t * R_stride + 8 * v;
  float xi[4][8], o[8];
#pragma unroll
  for (int i = 0; i < 4; i++) unpack8(*reinterpret_cast<const uint4 *>(x + i * D), xi[i]);
  unpack8(__ldg(reinterpret_cast<const uint4 *>(out + t * out_stride + 8 * v)), o);
  float c[16], pw[4];
#pragma unroll
  for (int e = 0; e < 16; e++) c[e] = __ldg(C + t * 16 + e);
#pragma unroll
  for (int j = 0; j < 4; j++) pw[j] = __ldg(post + t * 4 + j);
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

/* ------------------------------------------------------------ launchers */
template <int NOUT, int TM>
void launch_project_tm(bool tf32, dim3 grid, int threads, cudaStream_t st, const uint16_t *R, int64_t R_stride,
                       const float *fn, int64_t T, int64_t nD, int64_t Kc, float *d, float *q) {
  if (tf32)
    mhc_project_kernel<NOUT, TM, true><<<grid, threads, 0, st>>>(R, R_stride, fn, T, nD, Kc, d, q);
  else
    mhc_project_kernel<NOUT, TM, false><<<grid, threads, 0, st>>>(R, R_stride, fn, T, nD, Kc, d, q);
}

/* Token tiling by T (it changes only which warp serves a token, never a
 * token's summation order): T <= 8: one warp per token, T warps in one
 * block; T <= 64: 2 tokens per warp, 8 warps; else 4 tokens per warp. */
template <int NOUT>
void launch_project(bool tf32, cudaStream_t st, const uint16_t *R, int64_t R_stride, const float *fn, int64_t T,
                    int64_t nD, int64_t S, float *d, float *q) {
  const int64_t Kc = dsk_mhc_split_width(nD, S);
  if (T <= 8) {
    dim3 grid(1, (unsigned)S);
    launch_project_tm<NOUT, 1>(tf32, grid, 32 * (int)T, st, R, R_stride, fn, T, nD, Kc, d, q);
  } else if (T <= 64) {
    dim3 grid(dsk__ceil_div_u(T, 16), (unsigned)S);
    launch_project_tm<NOUT, 2>(tf32, grid, 256, st, R, R_stride, fn, T, nD, Kc, d, q);
  } else {
    dim3 grid(dsk__ceil_div_u(T, 32), (unsigned)S);
    launch_project_tm<NOUT, 4>(tf32, grid, 256, st, R, R_stride, fn, T, nD, Kc, d, q);
  }
}

}  // namespace

extern "C" dsk_status dsk__cuda_mhc_prenorm(dsk_ctx *ctx, const dsk_mhc_prenorm_desc *d, const dsk_tactic *t) {
  DSK_CUDA_TRY("mhc_prenorm", cudaSetDevice(dsk__cuda_state(ctx)->device));
  const int64_t S = t->v[0];
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  float *dp = d->partials, *qp = d->partials + S * d->T * DSK_MHC_MIX;
  launch_project<DSK_MHC_MIX>(d->precision == DSK_MHC_PRECISION_TF32, st, (const uint16_t *)d->R, d->R_stride, d->fn,
                              d->T, d->nD, S, dp, qp);
  DSK_CUDA_LAUNCHED("mhc_prenorm");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mhc_pre(dsk_ctx *ctx, const dsk_mhc_pre_desc *d, const dsk_tactic *t) {
  DSK_CUDA_TRY("mhc_pre", cudaSetDevice(dsk__cuda_state(ctx)->device));
  const int64_t S = t->v[0];
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  FinishParams p;
  p.d = d->partials;
  p.q = d->partials + S * d->T * DSK_MHC_MIX;
  p.S = S;
  p.T = d->T;
  p.D = d->D;
  p.nD = d->nD;
  p.R = (const uint16_t *)d->R;
  p.R_stride = d->R_stride;
  p.scale = d->scale;
  p.base = d->base;
  p.eps_rms = d->eps_rms;
  p.eps_hc = d->eps_hc;
  p.post_mult = d->post_mult;
  p.norm_eps = d->norm_eps;
  p.iters = d->sinkhorn_iters;
  p.norm_w = d->norm_w;
  p.y = (uint16_t *)d->y;
  p.y_stride = d->y_stride;
  p.post = d->post;
  p.C = d->C;
  p.pre_w = d->pre_w;
  if (d->norm_w)
    mhc_finish_kernel<DSK_MHC_MIX, true><<<(unsigned)d->T, kFinishThreads, (size_t)d->D * 2, st>>>(p);
  else
    mhc_finish_kernel<DSK_MHC_MIX, false><<<(unsigned)d->T, kFinishThreads, 0, st>>>(p);
  DSK_CUDA_LAUNCHED("mhc_pre");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mhc_post(dsk_ctx *ctx, const dsk_mhc_post_desc *d) {
  DSK_CUDA_TRY("mhc_post", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  dim3 grid((unsigned)d->T, dsk__ceil_div_u(d->D / 8, kPostThreads));
  mhc_post_kernel<<<grid, kPostThreads, 0, st>>>((const uint16_t *)d->out, d->out_stride, (const uint16_t *)d->R,
                                                 d->R_stride, d->post, d->C, (uint16_t *)d->R_out, d->R_out_stride,
                                                 d->D);
  DSK_CUDA_LAUNCHED("mhc_post");
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mhc_head(dsk_ctx *ctx, const dsk_mhc_head_desc *d, const dsk_tactic *t) {
  DSK_CUDA_TRY("mhc_head", cudaSetDevice(dsk__cuda_state(ctx)->device));
  const int64_t S = t->v[0];
  cudaStream_t st = dsk__cuda_stream(ctx, d->stream);
  float *dp = (float *)d->workspace, *qp = dp + S * d->T * 4;
  launch_project<4>(d->precision == DSK_MHC_PRECISION_TF32, st, (const uint16_t *)d->R, d->R_stride, d->fn, d->T,
                    d->nD, S, dp, qp);
  DSK_CUDA_LAUNCHED("mhc_head");
  FinishParams p;
  memset(&p, 0, sizeof p);
  p.d = dp;
  p.q = qp;
  p.S = S;
  p.T = d->T;
  p.D = d->D;
  p.nD = d->nD;
  p.R = (const uint16_t *)d->R;
  p.R_stride = d->R_stride;
  p.scale = d->scale;
  p.base = d->base;
  p.eps_rms = d->eps_rms;
  p.eps_hc = d->eps_hc;
  p.y = (uint16_t *)d->h;
  p.y_stride = d->h_stride;
  mhc_finish_kernel<4, false><<<(unsigned)d->T, kFinishThreads, 0, st>>>(p);
  DSK_CUDA_LAUNCHED("mhc_head");
  return DSK_STATUS_OK;
}

extern "C" int64_t dsk__cuda_mhc_smem_bytes(void) {
  /* finish kernel, NOUT 24 with the fused norm at the largest D */
  return (int64_t)(kPartChunk * (DSK_MHC_MIX + 1) + 4 + kFinishThreads / 32) * 4 + (int64_t)DSK_MHC_MAX_D * 2;
}
