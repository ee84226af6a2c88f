/* emu_moe_route.cc - the router's MMA logits kernel of
 * src/backend/cuda/moe_route_mma.cuh (both tile shapes), its exact source,
 * run on the CPU through tests/emu/cuda_emu.h. Runs in CI, where there is
 * no GPU. Two checks per logit:
 *  1. bit for bit against a scalar model of the intended arithmetic: each
 *     warp's k16 steps of a stage summed by the emulated MMA (fp64 sum of
 *     the exact products, rounded to fp32 per MMA), those sums added to the
 *     warp's fp32 (hi, lo) pair by a two-sum in stage order (the large
 *     tile: one warp per output, four k16 steps of 64-column stages; the
 *     small: warp w on k16 step w of 256-column stages), then the warps'
 *     pairs in warp order,
 *     z = hi + lo in fp64. This proves the fragment layouts, the swizzle,
 *     the ring, the zero-filled rows and columns and the fold.
 *  2. against fp64 sums (what the cpu-ref computes): |z - ref| within
 *     2^-21 of the sum of |products| (each stage sum's own fp32 rounding;
 *     hardware MMAs may round differently from the emulation, within this),
 *     and much closer than one fp32 accumulator gets on data built to make
 *     it drift (a mutation that drops the two-sum fails here and in 1).
 * Also: non-finite inputs give the fp64 sum's Inf / NaN, z is written only
 * inside [T, E] (z poisoned with a finite value, a guard after it), a grid smaller than the token
 * tiles (the kernel's tile loop) covers every tile. Not races or speed
 * (compute-sanitizer and the benchmarks on a GPU). */
#include <cmath>
#include <vector>

#include "emu/cuda_emu.h"

#include "backend/cuda/cuda_internal.h" /* DSK_SM120_SMEM_LIMIT */
#include "dsk.h"
#include "emu/emu_test.h"

namespace {
__attribute__((aligned(128))) uint8_t smem[DSK_SM120_SMEM_LIMIT];
#include "backend/cuda/moe_route_mma.cuh"
}  // namespace

namespace {

using emu_test::Rng;

struct Case {
  const char *name;
  bool large;
  int64_t T, E, H, xpad; /* x row stride H + xpad (a multiple of 8) */
  int data;              /* 0 random normal with per-column binade spread, 1 drift (one-signed, a large head), 2 non-finite rows */
  unsigned gy;           /* 0: one CTA row per token tile; else this many (the tile loop) */
};

uint16_t bf16_of(double v) { return dsk_bf16_from_f32((float)v); }
double bf16_d(uint16_t h) { return (double)dsk_bf16_to_f32(h); }
void two_sum(float &hi, float &lo, float v) {
  const float s = hi + v;
  const float bp = s - hi;
  const float err = (hi - (s - bp)) + (v - bp);
  hi = s;
  lo += err;
}

bool run_case(dsk_ctx *, const Case &c, uint64_t seed) {
  Rng r{seed * 0x9E3779B97F4A7C15ull | 1};
  const int64_t T = c.T, E = c.E, H = c.H, xs = H + c.xpad;
  std::vector<uint16_t> x((size_t)(T * xs)), w((size_t)(E * H));
  std::vector<int> col_exp((size_t)H);
  for (auto &v : col_exp) v = c.data == 0 ? r.range(-12, 0) : 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < xs; h++) {
      double v;
      if (h >= H) v = NAN; /* the stride gap: never read */
      else if (c.data == 1) v = (h < 64 ? 64.0 : 1.0) * (1.0 + r.uni());
      else v = r.normal() * ldexp(1.0, col_exp[(size_t)h]);
      x[(size_t)(t * xs + h)] = bf16_of(v);
    }
  for (int64_t e = 0; e < E; e++)
    for (int64_t h = 0; h < H; h++) {
      const double v = c.data == 1 ? (h < 64 ? 64.0 : 1.0 / 4096) * (1.0 + r.uni()) : r.normal() / sqrt((double)H);
      w[(size_t)(e * H + h)] = bf16_of(v);
    }
  if (c.data == 2) { /* token 1: an Inf; token 2: a NaN; token 3: an Inf in a column where some gate rows are 0 */
    if (T > 3) {
      x[(size_t)(1 * xs + H / 2)] = 0x7F80;
      x[(size_t)(2 * xs + 3)] = 0x7FC0;
      x[(size_t)(3 * xs + H - 1)] = 0xFF80;
      for (int64_t e = 0; e < E; e += 3) w[(size_t)(e * H + H - 1)] = 0;
    }
  }
  const int64_t guard = 64;
  std::vector<double> z((size_t)(T * E + guard));
  const double poison = -12345.678; /* an entry left unwritten matches neither check */
  for (auto &v : z) v = poison;

  RouteMmaArgs a;
  a.T = T;
  a.E = E;
  a.H = H;
  a.x = x.data();
  a.x_stride = xs;
  a.gate_w = w.data();
  a.z = z.data();
  const int BT = c.large ? RmCfg<true>::BT : RmCfg<false>::BT, BE = c.large ? RmCfg<true>::BE : RmCfg<false>::BE;
  const unsigned gx = (unsigned)((E + BE - 1) / BE), tiles = (unsigned)((T + BT - 1) / BT);
  const unsigned gy = c.gy ? c.gy : tiles;
  if (c.large)
    emu::launch(gx, gy, RmCfg<true>::THREADS, smem, (size_t)RmCfg<true>::SMEM, [&] { route_logits_mma_kernel<true>(a); });
  else
    emu::launch(gx, gy, RmCfg<false>::THREADS, smem, (size_t)RmCfg<false>::SMEM, [&] { route_logits_mma_kernel<false>(a); });

  const int WK = c.large ? RmCfg<true>::WK : RmCfg<false>::WK, BK = c.large ? RmCfg<true>::BK : RmCfg<false>::BK;
  const int64_t KT = (H + BK - 1) / BK;
  int64_t bad_model = 0, bad_ref = 0, bad_nf = 0, n_nf = 0;
  double worst = 0, drift = 0, worst_model = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t e = 0; e < E; e++) {
      /* the scalar model: per (warp slice, stage) the emulated MMAs' sums */
      float hi[16] = {0}, lo[16] = {0};
      double ref = 0, mag = 0;
      float naive = 0;
      for (int64_t kt = 0; kt < KT; kt++) {
        float s[16] = {0};
        for (int ks = 0; ks < BK / 16; ks++) {
          const int sl = ks % WK; /* the warp that takes k16 step ks */
          double acc = (double)s[sl];
          for (int k = 0; k < 16; k++) {
            const int64_t h = kt * BK + ks * 16 + k;
            const double p = h < H ? bf16_d(x[(size_t)(t * xs + h)]) * bf16_d(w[(size_t)(e * H + h)]) : 0.0;
            acc += p;
            ref += p;
            mag += fabs(p);
          }
          s[sl] = (float)acc;
        }
        for (int sl = 0; sl < WK; sl++) two_sum(hi[sl], lo[sl], s[sl]);
        for (int sl = 0; sl < WK; sl++) naive += s[sl];
      }
      for (int sl = 1; sl < WK; sl++) {
        two_sum(hi[0], lo[0], hi[sl]);
        lo[0] += lo[sl];
      }
      const double model = std::isfinite(hi[0]) ? (double)hi[0] + (double)lo[0] : (double)hi[0];
      const double got = z[(size_t)(t * E + e)];
      if (!std::isfinite(ref)) { /* Inf and NaN as the fp64 sum */
        n_nf++;
        bad_nf += !(std::isnan(ref) ? std::isnan(got) : got == ref);
        continue;
      }
      if (memcmp(&got, &model, 8) != 0) {
        bad_model++;
        worst_model = fmax(worst_model, fabs(got - model));
      }
      const double err = fabs(got - ref), bound = ldexp(mag, -21) + 1e-300;
      if (!(err <= bound)) bad_ref++;
      worst = fmax(worst, err / (mag + 1e-300));
      drift = fmax(drift, fabs((double)naive - ref) / (mag + 1e-300));
    }
  int64_t guard_bad = 0;
  for (int64_t i = T * E; i < T * E + guard; i++) guard_bad += z[(size_t)i] != poison;
  EXPECT(bad_model == 0, "%s: %lld logits differ from the scalar model (worst %.3g)", c.name, (long long)bad_model,
         worst_model);
  EXPECT(bad_ref == 0, "%s: %lld logits beyond 2^-21 of sum |products| from the fp64 sum (worst %.3g)", c.name,
         (long long)bad_ref, worst);
  EXPECT(bad_nf == 0, "%s: %lld of %lld non-finite logits differ from the fp64 sum's", c.name, (long long)bad_nf,
         (long long)n_nf);
  EXPECT(c.data != 2 || n_nf > 0, "%s: no non-finite logit was tested", c.name);
  EXPECT(guard_bad == 0, "%s: %lld values written past [T, E]", c.name, (long long)guard_bad);
  if (c.data == 1)
    EXPECT(drift > 64 * worst, "%s: the data does not separate the two-sum from one fp32 accumulator (%.3g vs %.3g)",
           c.name, drift, worst);
  printf("%-34s T %4lld E %4lld H %5lld: max |z - fp64| / sum|p| %.2e (one fp32 accumulator: %.2e)%s\n", c.name,
         (long long)T, (long long)E, (long long)H, worst, drift, n_nf ? ", non-finite as fp64" : "");
  return bad_model == 0 && bad_ref == 0 && bad_nf == 0 && guard_bad == 0;
}

const Case kCases[] = {
    {"large: partial tiles, H % 64 = 40", true, 100, 100, 1000, 0, 0, 0},
    {"large: drift data, H 4096", true, 64, 64, 4096, 0, 1, 0},
    {"large: x stride + 24, tile loop", true, 200, 70, 256, 24, 0, 2},
    {"small: partial tiles", false, 37, 70, 1000, 0, 0, 0},
    {"small: drift data, H 7168", false, 16, 32, 7168, 0, 1, 0},
    {"small: H 8, x stride + 8", false, 20, 33, 8, 8, 0, 0},
    {"small: non-finite rows", false, 16, 40, 520, 0, 2, 0},
    {"large: non-finite rows, tile loop", true, 130, 64, 136, 8, 2, 1},
};

}  // namespace

int main() { return emu_test::run_cases("emu_moe_route", kCases, 0x600Du, run_case); }
