/* sparse_mla_combine.cuh - the combine kernels of the sparse MLA decode
 * (split partials -> output, sink folded in). Included inside the
 * launcher's anonymous namespace (sparse_mla_decode.cu), after
 * sparse_mla_common.cuh. */

/* Combine: one block of 128 threads per (t, h) merges the splits and folds
 * the sink; thread i owns output dims 4i..4i+3. Two forms, picked by the
 * launcher:
 *  - sparse_mla_combine_kernel (grids of several waves, where the combine
 *    is a bandwidth pass): the row max over the split lse values first,
 *    then one weighted pass.
 *  - sparse_mla_combine_batched_kernel<B>, B = 2, 4, 8 or 32 (single-wave grids,
 *    where it is one latency chain): the splits in batches of B, all lse
 *    values and partial rows of a batch loaded before any is used (one
 *    dependent round trip per batch, not per split), folded into a running
 *    (max, sum, output) with the usual rescale when the max grows.
 * On the H200 the batched form cut T = 1 by up to 0.6 us but cost 2-5 % at
 * large T with 2-9 splits (docs/benchmarks.md, v8), hence the two forms.
 * From 64 splits on B is DSK_MLA_COMBINE_MAXB (32; 8 until 2026-12-03,
 * the A/B baseline): up to 160 registers of loads in flight per thread, 128
 * threads per block, no spills. */
#ifndef DSK_MLA_COMBINE_MAXB
#define DSK_MLA_COMBINE_MAXB 32
#endif
static_assert(DSK_MLA_COMBINE_MAXB == 8 || DSK_MLA_COMBINE_MAXB == 32, "the batched combine runs B 2, 4, 8 or 32");
__device__ __forceinline__ void combine_store(const Params &p, int64_t t, int64_t h, int d, float mx, float s,
                                              const float (&o)[4]) {
  uint16_t *orow = p.out + t * p.out_st + h * p.out_sh;
  if (mx == kNegInf) {
    *reinterpret_cast<uint2 *>(orow + d) = make_uint2(0, 0);
    if (p.lse && threadIdx.x == 0) p.lse[t * p.lse_st + h * p.lse_sh] = kNegInf;
    return;
  }
  const float lse = mx + logf(s);
  float fac = 1.f / s;
  if (p.sink) fac *= 1.f / (1.f + expf(p.sink[h] - lse));
  const uint32_t w0 = (uint32_t)f32_to_bf16_rne(o[0] * fac) | ((uint32_t)f32_to_bf16_rne(o[1] * fac) << 16);
  const uint32_t w1 = (uint32_t)f32_to_bf16_rne(o[2] * fac) | ((uint32_t)f32_to_bf16_rne(o[3] * fac) << 16);
  *reinterpret_cast<uint2 *>(orow + d) = make_uint2(w0, w1);
  if (p.lse && threadIdx.x == 0) p.lse[t * p.lse_st + h * p.lse_sh] = lse;
}

/* The (t, h) row of this block, once the split kernel's partials are
 * complete: its lse values, this thread's 4 dims of its partial rows. */
struct CombineRow {
  int64_t t, h;
  const float *pl, *po;
  int d;
};
__device__ __forceinline__ CombineRow combine_row(const Params &p) {
  pdl_wait(); /* the split kernel's partials are complete */
  CombineRow r;
  r.t = blockIdx.x / (unsigned)p.H;
  r.h = blockIdx.x % (unsigned)p.H;
  const int64_t base = (r.t * p.H + r.h) * p.splits;
  r.pl = p.part_lse + base;
  r.d = threadIdx.x * 4;
  r.po = p.part_o + base * 512 + r.d;
  return r;
}
__device__ __forceinline__ void combine_add(float &s, float (&o)[4], float w, const float4 &v) {
  s += w;
  o[0] += w * v.x;
  o[1] += w * v.y;
  o[2] += w * v.z;
  o[3] += w * v.w;
}

/* Grids of several waves: the row max first, then one weighted pass. */
__global__ void __launch_bounds__(128) sparse_mla_combine_kernel(const Params p) {
  const CombineRow r = combine_row(p);
  float mx = kNegInf, s = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
  for (int j = 0; j < p.splits; j++) mx = fmaxf(mx, r.pl[j]);
  if (mx != kNegInf) {
    for (int j = 0; j < p.splits; j++) {
      const float lj = r.pl[j];
      if (lj == kNegInf) continue;
      combine_add(s, o, expf(lj - mx), *reinterpret_cast<const float4 *>(r.po + (int64_t)j * 512));
    }
  }
  combine_store(p, r.t, r.h, r.d, mx, s, o);
}

/* Single-wave grids: batches of B splits with a running max. */
template <int B>
__global__ void __launch_bounds__(128) sparse_mla_combine_batched_kernel(const Params p) {
  const CombineRow r = combine_row(p);
  float mx = kNegInf, s = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
  for (int j0 = 0; j0 < p.splits; j0 += B) {
    float l[B];
    float4 v[B];
#pragma unroll
    for (int k = 0; k < B; k++) {
      const bool in = j0 + k < p.splits;
      l[k] = in ? r.pl[j0 + k] : kNegInf;
      v[k] = in ? *reinterpret_cast<const float4 *>(r.po + (int64_t)(j0 + k) * 512) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float bm = mx;
#pragma unroll
    for (int k = 0; k < B; k++) bm = fmaxf(bm, l[k]);
    if (bm == kNegInf) continue; /* no non-empty split yet */
    if (bm != mx) {              /* the max grew: rescale what was summed (0 while mx is -inf) */
      const float f = mx == kNegInf ? 0.f : expf(mx - bm);
      s *= f;
      o[0] *= f;
      o[1] *= f;
      o[2] *= f;
      o[3] *= f;
      mx = bm;
    }
#pragma unroll
    for (int k = 0; k < B; k++) {
      if (l[k] == kNegInf) continue; /* empty split (or past the last): weight 0 */
      combine_add(s, o, expf(l[k] - mx), v[k]);
    }
  }
  combine_store(p, r.t, r.h, r.d, mx, s, o);
}
