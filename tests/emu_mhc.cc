/* emu_mhc.cc - the CUDA mHC kernels of src/backend/cuda/mhc_kernels.cuh,
 * their exact source, run on the CPU through tests/emu/cuda_emu.h and
 * checked against the cpu-ref backend's dsk_mhc_prenorm + dsk_mhc_pre
 * (plain and with the fused RMSNorm) + dsk_mhc_post, and dsk_mhc_head, at
 * the bounds of spec/mhc.md §7 (the harness's, tests/harness/check_mhc.c).
 * Runs in CI, where there is no GPU: it proves the projection's five
 * configurations (1, 4, 8 tokens per 1-warp CTA; 16-token 4-warp and
 * 32-token 8-warp CTAs with a partly filled last tile), the split column
 * ranges, the cross-lane reduction trees and the sums of squares, the
 * finish kernel's staged split sums, RMS factor, sigmoids, Sinkhorn and y
 * (both prefetch depths, the named barrier of the fused norm), the post
 * kernel in and out of place, the fused post + prenorm (its five
 * configurations; bit-identical to post then the projection), FP32 and TF32. Not races or speed
 * (compute-sanitizer and the benchmarks on a GPU).
 *
 * Launches replicate src/backend/cuda/mhc.cu's launchers: grid, block and
 * shared memory of each configuration. Data: R ~ N(0, 1) in bf16 (token 0
 * of one case all zero, one stream of another token x 1e3), fn ~ N(0,
 * 1/nD), scale (1, 1, 0.25) or (1, 1, 4) (wide comb logits), base ~
 * U(-0.5, 0.5); every output and the partials start as NaN. */
#include "emu/cuda_emu.h"

#include <type_traits>

#include "dsk.h"
#include "emu/emu_test.h"

namespace {
/* the PTX wrappers mhc_kernels.cuh calls (mhc.cu has the real ones) */
inline void pdl_wait() {}
inline void pdl_launch_dependents() {}
inline void cp_async16(void *dst, const void *src) { memcpy(dst, src, 16); }
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}
inline void prefetch_l2(const void *) {}
inline float rcp_approx(float x) { return 1.0f / x; } /* the GPU's is within 1 ulp of this */
template <int N>
inline void bar_sync_1() {
  emu::named_barrier(1, N);
}
#define DSK_MHC_STATIC static
__attribute__((aligned(16))) unsigned char proj_smem[96 * 1024];
__attribute__((aligned(16))) unsigned char fin_smem[48 * 1024];
#include "backend/cuda/mhc_kernels.cuh"
}  // namespace

namespace {

using emu_test::Rng;

double bf(uint16_t b) { return (double)emu::bf16_to_f32(b); }
double ulp_bf16(double v) {
  v = fabs(v);
  return v < 0x1p-126 ? 0x1p-133 : ldexp(1.0, ilogb(v) - 7);
}
void upd(double *m, double v) {
  if (v > *m || v != v) *m = v;
}

struct Case {
  const char *name;
  int64_t D, T, S;
  int cfg;  /* 0 T1, 1 T4, 2 T8, 3 T16, 4 T32 (the projection configurations of mhc.cu); 5 T16, 6 T32,
             * 7 T8 with lane groups (DSK_MHC_LANE_GROUPS: 4 for 16-token warps, 2 for 8) */
  bool tf32;
  int pf;   /* finish prefetch depth: 2 or 4 */
  bool in_place;
  bool special; /* token 0 all zero, stream 2 of token 1 x 1e3 */
  bool wide;    /* comb scale s2 = 4 (wide Sinkhorn logits, where 20 rounds do not converge) */
  int sb;       /* finish loads in flight per lane (8 or 16); 0 = as mhc.cu picks for S */
};

template <int NOUT, int TW, int WG, int WT, int NSTG, bool POST = false, int TG = 1>
void project(const Case &c, const ProjParams &pp) {
  using Sh = ProjShape<NOUT, TW, WG, WT, NSTG, POST>;
  static_assert(Sh::SMEM <= (int)sizeof proj_smem, "projection ring larger than the emulation's buffer");
  const unsigned gx = (unsigned)((pp.T + Sh::TT - 1) / Sh::TT);
  emu::launch3(gx, (unsigned)c.S, kOutGroups / WG, Sh::NT, proj_smem, Sh::SMEM, [&] {
    if (c.tf32)
      mhc_project_kernel<NOUT, TW, WG, WT, NSTG, true, POST, TG>(pp);
    else
      mhc_project_kernel<NOUT, TW, WG, WT, NSTG, false, POST, TG>(pp);
  });
}
/* the fused post + prenorm in mhc.cu's configurations: 4-warp CTAs of 1,
 * 4 and 8 tokens (4-column R' items over all threads for 1 and 4), then
 * 16-token 8-warp CTAs with a 3-stage ring (cfg 3) or 2 stages (cfg 4) */
void project_post(const Case &c, const ProjParams &pp) {
  switch (c.cfg) {
    case 0: project<DSK_MHC_MIX, 1, 4, 1, 4, true>(c, pp); break;
    case 1: project<DSK_MHC_MIX, 4, 4, 1, 4, true>(c, pp); break;
    case 2: project<DSK_MHC_MIX, 8, 4, 1, 4, true>(c, pp); break;
    case 3: project<DSK_MHC_MIX, 8, 4, 2, 3, true>(c, pp); break;
    case 4: project<DSK_MHC_MIX, 8, 4, 2, 2, true>(c, pp); break;
    case 5: project<DSK_MHC_MIX, 8, 4, 2, 3, true, 2>(c, pp); break; /* lane groups */
    case 6: project<DSK_MHC_MIX, 8, 4, 2, 2, true, 2>(c, pp); break;
    default: project<DSK_MHC_MIX, 8, 4, 1, 4, true, 2>(c, pp); break;
  }
}
template <int NOUT>
void project_cfg(const Case &c, const ProjParams &pp) {
  switch (c.cfg) {
    case 0: project<NOUT, 1, 1, 1, 4>(c, pp); break;
    case 1: project<NOUT, 4, 1, 1, 4>(c, pp); break;
    case 2: project<NOUT, 8, 1, 1, 4>(c, pp); break;
    case 3: project<NOUT, 16, 4, 1, 3>(c, pp); break;
    case 4: project<NOUT, 16, 4, 2, 4>(c, pp); break;
    case 5: project<NOUT, 16, 4, 1, 3, false, 4>(c, pp); break; /* T16, T32 and T8 with lane groups */
    case 6: project<NOUT, 16, 4, 2, 4, false, 4>(c, pp); break;
    default: project<NOUT, 8, 1, 1, 4, false, 2>(c, pp); break;
  }
}
template <int NOUT, bool NORM>
void finish(const Case &c, const FinishParams &p) {
  const size_t bytes = (size_t)finish_dyn_bytes(p.D, NORM);
  EXPECT(bytes <= sizeof fin_smem, "%s: finish needs %zu B of shared memory", c.name, bytes);
  if (bytes > sizeof fin_smem) return;
  /* mhc.cu's finish_split_batch */
  const int sb = c.sb ? c.sb : p.S <= (int64_t)kSplitBatchSmall * kFinishWarps ? kSplitBatchSmall : kSplitBatchLarge;
  emu::launch((unsigned)p.T, 1, kFinishThreads, fin_smem, bytes, [&] {
    if (c.pf == 4 && sb == kSplitBatchLarge)
      mhc_finish_kernel<NOUT, NORM, 4, kSplitBatchLarge>(p);
    else if (c.pf == 4)
      mhc_finish_kernel<NOUT, NORM, 4, kSplitBatchSmall>(p);
    else if (sb == kSplitBatchLarge)
      mhc_finish_kernel<NOUT, NORM, 2, kSplitBatchLarge>(p);
    else
      mhc_finish_kernel<NOUT, NORM, 2, kSplitBatchSmall>(p);
  });
}

bool run_case(dsk_ctx *cpu, const Case &c, uint64_t seed) {
  Rng r{seed | 1};
  const int64_t D = c.D, T = c.T, S = c.S, nD = 4 * D;
  const double tol_s = c.tf32 ? 1e-3 : 1e-5, tol_b = c.tf32 ? 2e-3 : 2e-5;
  std::vector<uint16_t> R((size_t)(T * nD)), out((size_t)(T * D));
  std::vector<float> fn((size_t)(24 * nD)), hfn((size_t)(4 * nD)), nw((size_t)D), base(24), hbase(4);
  const float scale[3] = {1.0f, 1.0f, c.wide ? 4.0f : 0.25f}, hscale[1] = {1.0f};
  for (auto &v : R) v = emu::f32_to_bf16((float)r.normal());
  for (auto &v : out) v = emu::f32_to_bf16((float)r.normal());
  if (c.special && T >= 2) {
    for (int64_t k = 0; k < nD; k++) R[(size_t)k] = 0; /* token 0: r = rsqrt(eps), m = 0 */
    for (int64_t k = 0; k < D; k++) {
      const size_t e = (size_t)(nD + 2 * D + k); /* token 1, stream 2 */
      R[e] = emu::f32_to_bf16(emu::bf16_to_f32(R[e]) * 1e3f);
    }
  }
  for (auto &v : fn) v = (float)(r.normal() / sqrt((double)nD));
  for (auto &v : hfn) v = (float)(r.normal() / sqrt((double)nD));
  for (auto &v : nw) v = (float)(0.5 + r.uni());
  for (auto &v : base) v = (float)(r.uni() - 0.5);
  for (auto &v : hbase) v = (float)(r.uni() - 0.5);

  /* the kernels */
  const float nanf_ = __uint_as_float(0x7FC00000u);
  std::vector<float> part((size_t)(S * T * 25), nanf_), hpart((size_t)(S * T * 5), nanf_);
  std::vector<uint16_t> y((size_t)(T * D), 0xFFFF), yn((size_t)(T * D), 0xFFFF), h((size_t)(T * D), 0xFFFF);
  std::vector<uint16_t> Ro((size_t)(T * nD), 0xFFFF);
  std::vector<float> post((size_t)(T * 4), nanf_), C((size_t)(T * 16), nanf_), prew((size_t)(T * 4), nanf_);
  ProjParams pp;
  pp.R = R.data();
  pp.R_stride = nD;
  pp.fn = fn.data();
  pp.T = T;
  pp.nD = nD;
  pp.Kc = dsk_mhc_split_width(nD, S);
  pp.d = part.data();
  pp.q = part.data() + S * T * DSK_MHC_MIX;
  project_cfg<DSK_MHC_MIX>(c, pp);
  /* the finish kernel's arguments as dsk__cuda_mhc_pre / _head set them */
  auto finish_args = [&](const ProjParams &pj, const float *sc, const float *bs, uint16_t *out_y) {
    FinishParams f;
    memset(&f, 0, sizeof f);
    f.d = pj.d;
    f.q = pj.q;
    f.S = S;
    f.T = T;
    f.D = D;
    f.nD = nD;
    f.R = R.data();
    f.R_stride = nD;
    f.scale = sc;
    f.base = bs;
    f.eps_rms = 1e-6f;
    f.eps_hc = 1e-6f;
    f.y = out_y;
    f.y_stride = D;
    return f;
  };
  FinishParams fp = finish_args(pp, scale, base.data(), y.data());
  fp.post_mult = 2.0f;
  fp.norm_eps = 1e-6f;
  fp.iters = 20;
  fp.post = post.data();
  fp.C = C.data();
  fp.pre_w = prew.data();
  finish<DSK_MHC_MIX, false>(c, fp);
  FinishParams fn_p = fp;
  fn_p.norm_w = nw.data();
  fn_p.y = yn.data();
  fn_p.pre_w = nullptr;
  finish<DSK_MHC_MIX, true>(c, fn_p);
  /* post: out of place into Ro, or in place on a copy of R */
  std::vector<uint16_t> Rw = R;
  uint16_t *dst = c.in_place ? Rw.data() : Ro.data();
  const unsigned gy = (unsigned)((D / 8 + kPostThreads - 1) / kPostThreads);
  emu::launch((unsigned)T, gy, kPostThreads, fin_smem, 0, [&] {
    mhc_post_kernel(out.data(), D, c.in_place ? Rw.data() : R.data(), nD, post.data(), C.data(), dst, nD, D);
  });
  if (c.in_place) Ro = Rw;
  /* fused post + prenorm into Rf and fpart, with the same post and C; then
   * the plain projection of Rf, which must give the same bits */
  std::vector<uint16_t> Rf((size_t)(T * nD), 0xFFFF);
  std::vector<float> fpart((size_t)(S * T * 25), nanf_), fpart2((size_t)(S * T * 25), nanf_);
  ProjParams fq = pp;
  fq.d = fpart.data();
  fq.q = fpart.data() + S * T * DSK_MHC_MIX;
  fq.out = out.data();
  fq.out_stride = D;
  fq.D = D;
  fq.post = post.data();
  fq.C = C.data();
  fq.R_out = Rf.data();
  fq.R_out_stride = nD;
  project_post(c, fq);
  ProjParams fq2 = pp;
  fq2.R = Rf.data();
  fq2.d = fpart2.data();
  fq2.q = fpart2.data() + S * T * DSK_MHC_MIX;
  project_cfg<DSK_MHC_MIX>(c, fq2);
  /* head: the 4-output projection and finish */
  ProjParams hp = pp;
  hp.fn = hfn.data();
  hp.d = hpart.data();
  hp.q = hpart.data() + S * T * 4;
  project_cfg<4>(c, hp);
  /* every configuration gives the bits of the one-token CTAs (the fixed
   * summation order of mhc_kernels.cuh: a pinned S is batch-invariant) */
  int64_t cbits = 0;
  if (c.cfg != 0) {
    std::vector<float> p1((size_t)(S * T * 25), nanf_), h1((size_t)(S * T * 5), nanf_);
    ProjParams q1 = pp, g1 = hp;
    q1.d = p1.data();
    q1.q = p1.data() + S * T * DSK_MHC_MIX;
    g1.d = h1.data();
    g1.q = h1.data() + S * T * 4;
    project<DSK_MHC_MIX, 1, 1, 1, 4>(c, q1);
    project<4, 1, 1, 1, 4>(c, g1);
    for (size_t i = 0; i < part.size(); i++) cbits += memcmp(&part[i], &p1[i], 4) != 0;
    for (size_t i = 0; i < hpart.size(); i++) cbits += memcmp(&hpart[i], &h1[i], 4) != 0;
  }
  finish<4, false>(c, finish_args(hp, hscale, hbase.data(), h.data()));

  /* the reference chain on the cpu-ref backend, S pinned */
  std::vector<float> rpart((size_t)(S * T * 25)), rpost((size_t)(T * 4)), rC((size_t)(T * 16)), rprew((size_t)(T * 4));
  std::vector<uint16_t> ry((size_t)(T * D)), ryn((size_t)(T * D)), rh((size_t)(T * D)), rRo((size_t)(T * nD));
  std::vector<uint8_t> hws((size_t)(S * T * 20));
  const dsk_mhc_precision prec = c.tf32 ? DSK_MHC_PRECISION_TF32 : DSK_MHC_PRECISION_FP32;
  dsk_mhc_prenorm_desc pd;
  dsk_mhc_prenorm_desc_init(&pd);
  pd.T = T; pd.D = D; pd.nD = nD; pd.R = (const dsk_bf16 *)R.data(); pd.R_stride = nD; pd.fn = fn.data();
  pd.fixed_splits = (int32_t)S; pd.precision = prec; pd.partials = rpart.data(); pd.partials_bytes = S * T * 100;
  dsk_status st = dsk_mhc_prenorm(cpu, &pd);
  dsk_mhc_pre_desc qd;
  dsk_mhc_pre_desc_init(&qd);
  qd.T = T; qd.D = D; qd.nD = nD; qd.fixed_splits = (int32_t)S; qd.partials = rpart.data();
  qd.partials_bytes = S * T * 100; qd.R = (const dsk_bf16 *)R.data(); qd.R_stride = nD; qd.scale = scale;
  qd.base = base.data(); qd.y = (dsk_bf16 *)ry.data(); qd.y_stride = D; qd.post = rpost.data(); qd.C = rC.data();
  qd.pre_w = rprew.data();
  if (st == DSK_STATUS_OK) st = dsk_mhc_pre(cpu, &qd);
  qd.norm_w = nw.data();
  qd.y = (dsk_bf16 *)ryn.data();
  qd.pre_w = nullptr;
  if (st == DSK_STATUS_OK) st = dsk_mhc_pre(cpu, &qd);
  dsk_mhc_post_desc od;
  dsk_mhc_post_desc_init(&od);
  od.T = T; od.D = D; od.out = (const dsk_bf16 *)out.data(); od.out_stride = D; od.R = (const dsk_bf16 *)R.data();
  od.R_stride = nD; od.post = rpost.data(); od.C = rC.data(); od.R_out = (dsk_bf16 *)rRo.data(); od.R_out_stride = nD;
  if (st == DSK_STATUS_OK) st = dsk_mhc_post(cpu, &od);
  dsk_mhc_head_desc hd;
  dsk_mhc_head_desc_init(&hd);
  hd.T = T; hd.D = D; hd.nD = nD; hd.R = (const dsk_bf16 *)R.data(); hd.R_stride = nD; hd.fn = hfn.data();
  hd.scale = hscale; hd.base = hbase.data(); hd.fixed_splits = (int32_t)S; hd.precision = prec;
  hd.h = (dsk_bf16 *)rh.data(); hd.h_stride = D; hd.workspace = hws.data(); hd.workspace_bytes = S * T * 20;
  if (st == DSK_STATUS_OK) st = dsk_mhc_head(cpu, &hd);
  std::vector<uint16_t> rRf((size_t)(T * nD));
  std::vector<float> rfpart((size_t)(S * T * 25));
  dsk_mhc_post_prenorm_desc fd;
  dsk_mhc_post_prenorm_desc_init(&fd);
  fd.T = T; fd.D = D; fd.nD = nD; fd.out = (const dsk_bf16 *)out.data(); fd.out_stride = D;
  fd.R = (const dsk_bf16 *)R.data(); fd.R_stride = nD; fd.post = post.data(); fd.C = C.data();
  fd.R_out = (dsk_bf16 *)rRf.data(); fd.R_out_stride = nD; fd.fn = fn.data(); fd.fixed_splits = (int32_t)S;
  fd.precision = prec; fd.partials = rfpart.data(); fd.partials_bytes = S * T * 100;
  if (st == DSK_STATUS_OK) st = dsk_mhc_post_prenorm(cpu, &fd);
  EXPECT(st == DSK_STATUS_OK, "%s: cpu-ref: %s: %s", c.name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) return false;

  /* spec §7 bounds, as tests/harness/check_mhc.c applies them */
  const int64_t f0 = emu_test::fails();
  double es = 0, ey = 0, eyn = 0, er = 0, eh = 0;
  for (int64_t i = 0; i < T * 4; i++) {
    upd(&es, fabs((double)post[(size_t)i] - rpost[(size_t)i]));
    upd(&es, fabs((double)prew[(size_t)i] - rprew[(size_t)i]));
  }
  for (int64_t i = 0; i < T * 16; i++) upd(&es, fabs((double)C[(size_t)i] - rC[(size_t)i]));
  for (int64_t t = 0; t < T; t++) {
    double ss = 0;
    for (int64_t k = 0; k < D; k++) ss += bf(ry[(size_t)(t * D + k)]) * bf(ry[(size_t)(t * D + k)]);
    const double rs = 1.0 / sqrt(ss / (double)D + 1e-6);
    for (int64_t k = 0; k < D; k++) {
      double mag = 0;
      for (int i = 0; i < 4; i++) mag += fabs(bf(R[(size_t)(t * nD + i * D + k)]));
      const size_t e = (size_t)(t * D + k);
      upd(&ey, fabs(bf(y[e]) - bf(ry[e])) / (ulp_bf16(bf(ry[e])) + tol_b * mag));
      upd(&eh, fabs(bf(h[e]) - bf(rh[e])) / (ulp_bf16(bf(rh[e])) + tol_b * mag));
      const double w = fabs((double)nw[(size_t)k]), got = bf(yn[e]), ref = bf(ryn[e]);
      upd(&eyn, fabs(got - ref) / (0.5 * (ulp_bf16(ref) + ulp_bf16(got)) + w * rs * (ulp_bf16(bf(ry[e])) + tol_b * mag) +
                                  1e-5 * fabs(ref)));
      const double om = mag + fabs(bf(out[e]));
      for (int j = 0; j < 4; j++) {
        const size_t o = (size_t)(t * nD + j * D + k);
        upd(&er, fabs(bf(Ro[o]) - bf(rRo[o])) / (ulp_bf16(bf(rRo[o])) + tol_b * om));
      }
    }
  }
  /* fused: R' and partials bit-identical to post + projection; R' within
   * its bound of the cpu-ref's (fed the kernel's post and C); partials
   * within tol_s (relative to the sum of |terms|) of an fp64 projection of
   * the kernel's own R' (the cpu-ref's R' may differ from it by one bf16
   * ulp in a few elements, which moves a partial by far more than tol_s) */
  int64_t fbits = 0;
  for (size_t i = 0; i < Rf.size(); i++) fbits += Rf[i] != Ro[i];
  for (size_t i = 0; i < fpart.size(); i++) fbits += memcmp(&fpart[i], &fpart2[i], 4) != 0;
  double ef = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t k = 0; k < D; k++) {
      double om = fabs(bf(out[(size_t)(t * D + k)]));
      for (int i = 0; i < 4; i++) om += fabs(bf(R[(size_t)(t * nD + i * D + k)]));
      for (int j = 0; j < 4; j++) {
        const size_t o = (size_t)(t * nD + j * D + k);
        upd(&ef, fabs(bf(Rf[o]) - bf(rRf[o])) / (ulp_bf16(bf(rRf[o])) + tol_b * om));
      }
    }
  const int64_t Kc = dsk_mhc_split_width(nD, S);
  double ep = 0;
  for (int64_t s = 0; s < S; s++)
    for (int64_t t = 0; t < T; t++) {
      const int64_t kb = std::min(s * Kc, nD), ke = std::min(kb + Kc, nD);
      for (int j = 0; j <= DSK_MHC_MIX; j++) { /* j = 24: the sum of squares */
        double mag = 0, ref = 0;
        for (int64_t k = kb; k < ke; k++) {
          const double x = bf(Rf[(size_t)(t * nD + k)]);
          double w = j < DSK_MHC_MIX ? (double)fn[(size_t)(j * nD + k)] : x;
          if (c.tf32 && j < DSK_MHC_MIX) w = (double)tf32_rna((float)w);
          ref += w * x;
          mag += fabs(w * x);
        }
        const size_t e = j < DSK_MHC_MIX ? (size_t)((s * T + t) * DSK_MHC_MIX + j) : (size_t)(S * T * DSK_MHC_MIX + s * T + t);
        upd(&ep, kb == ke ? (fpart[e] == 0.0f ? 0.0 : INFINITY) : fabs((double)fpart[e] - ref) / (tol_s * mag + 1e-30));
      }
    }
  EXPECT(fbits == 0, "%s: fused post + prenorm: %lld values differ from post + prenorm", c.name, (long long)fbits);
  EXPECT(cbits == 0, "%s: %lld partials (prenorm, head) differ from the one-token configuration's", c.name,
         (long long)cbits);
  EXPECT(ef <= 1.0, "%s: fused R' at %.3f of its bound", c.name, ef);
  EXPECT(ep <= 1.0, "%s: fused partials at %.3f of their bound", c.name, ep);
  EXPECT(es <= tol_s, "%s: pre / post / C differ by %.3g (bound %.0e)", c.name, es, tol_s);
  EXPECT(ey <= 1.0, "%s: y at %.3f of its bound", c.name, ey);
  EXPECT(eyn <= 1.0, "%s: y with the fused norm at %.3f of its bound", c.name, eyn);
  EXPECT(er <= 1.0, "%s: R' at %.3f of its bound", c.name, er);
  EXPECT(eh <= 1.0, "%s: h at %.3f of its bound", c.name, eh);
  printf("%-46s pre/post/C %.2e  y %.3f  y(norm) %.3f  R' %.3f  h %.3f  fused R' %.3f part %.3f: %s\n", c.name, es,
         ey, eyn, er, eh, ef, ep, emu_test::fails() == f0 ? "ok" : "FAIL");
  fflush(stdout);
  return emu_test::fails() == f0;
}

}  // namespace

int main() {
  const Case cases[] = {
      /* name, D, T, S, projection config, TF32, prefetch, post in place, special rows, wide logits, finish SB */
      {"T 1, S 4 (S_max), 1-warp CTAs, FP32", 256, 1, 4, 0, false, 2, false, false, false, 0},
      {"T 3, S 3 (704/704/640), 4 tokens per warp, TF32", 512, 3, 3, 1, true, 4, true, true, false, 0},
      {"T 7, S 8 (S_max), 8 tokens per warp, s2 4", 512, 7, 8, 2, false, 2, false, true, true, 0},
      {"T 20, S 2, 16-token CTAs (tile 2 partial)", 256, 20, 2, 3, false, 4, true, false, false, 0},
      {"T 40, S 1, 32-token CTAs (tile 2 partial), s2 4", 256, 40, 1, 4, false, 2, false, false, true, 0},
      {"T 5, S 3, 8 tokens per warp, TF32, D 1032", 1032, 5, 3, 2, true, 2, false, false, false, 0},
      /* DSv4-Pro's S_max: the finish warps sum 12 or 13 splits each, in one round of 16 loads
       * (as mhc.cu picks) and in two rounds of 8 */
      {"T 2, S 112 (S_max), D 7168, 4 tokens per warp", 7168, 2, 112, 1, false, 4, false, true, false, 0},
      {"T 1, S 112, D 7168, finish in rounds of 8 loads", 7168, 1, 112, 0, false, 4, true, false, true, 8},
      /* streams off the 64- and 128-column grids on the fused kernel's 4-column R' paths */
      {"T 1, S 5, D 1032, 4-column R' items", 1032, 1, 5, 0, false, 2, false, false, false, 0},
      {"T 3, S 3, D 200, 4-column R' items", 200, 3, 3, 1, false, 2, false, true, false, 0},
      /* lane groups: partial token tiles, a split whose last stage has 64 of 128 columns */
      {"T 20, S 2, 16-token CTAs, lane groups", 256, 20, 2, 5, false, 4, true, false, false, 0},
      {"T 37, S 3 (704/704/640), 32-token lane groups, TF32", 512, 37, 3, 6, true, 2, false, true, false, 0},
      {"T 16, S 8 (S_max), 16-token lane groups, s2 4", 512, 16, 8, 5, false, 2, false, false, true, 0},
      {"T 7, S 3 (704/704/640), 8-token lane groups, TF32", 512, 7, 3, 7, true, 2, false, true, false, 0},
      {"T 13, S 5, D 1032, 8-token lane groups", 1032, 13, 5, 7, false, 4, true, false, false, 0},
  };
  return emu_test::run_cases("emu_mhc", cases, 0x6d686300u, run_case);
}
