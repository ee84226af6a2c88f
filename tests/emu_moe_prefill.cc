/* emu_moe_prefill.cc - the prefill-shaped MoE GEMM of
 * src/backend/cuda/moe_gemm_prefill.cuh (f16 path, BLOCK_M 128 and 64,
 * BLOCK_N 128), its exact source, run on the CPU through tests/emu/cuda_emu.h and
 * checked against the cpu-ref backend's dsk_moe_gemm (grouped) and
 * dsk_dense_fp8_gemm (dense) on the same inputs. Runs in CI, where there is
 * no GPU: it proves the operand and scale layouts of both weight formats,
 * the K order of the fragments, the scales folded into the operands
 * relative to each row's and column's largest (exact while a row's scales
 * span <= 15 binades and an MXFP4 column's <= 23; blocks far below them,
 * up to 200 binades, rounded or vanishing), the ring over more K
 * tiles than stages and its last partial scale word, skipped (-1) and
 * bad-expert blocks with their counter, m16 slices without a live row,
 * padding rows and stride gaps of D never written, and NaN scale bytes
 * (0xFF) making exactly their row (A) or column (B) NaN. Not races or speed
 * (compute-sanitizer and the benchmarks on a GPU). Built twice: as the
 * default build (emu_moe_prefill, DSK_MOE_PF_BCOOP=2: MXFP4 weights
 * converted once per CTA into an f16 tile read by ldmatrix, FP8 weights
 * converted per warp) and with DSK_MOE_PF_BCOOP=3 (emu_moe_prefill_bcoop:
 * the reverse), so every kernel form runs; each also under the skewed
 * schedule.
 *
 * Data: e4m3 activations (padding rows NaN, which must not leak), random
 * e2m1 or finite e4m3 weights, UE8M0 scales in the case's ranges; D
 * pre-filled with 0xFFFF (bf16 NaN). */
#include <type_traits>

#include "emu/cuda_emu.h"

#include "backend/cuda/cuda_internal.h" /* DSK_SM120_SMEM_LIMIT */
#include "dsk.h"
#include "emu/emu_moe_gemm.h"
#include "emu/emu_test.h"

namespace {
__attribute__((aligned(16))) uint8_t smem[DSK_SM120_SMEM_LIMIT];
#include "backend/cuda/moe_gemm_frag.cuh"
#include "backend/cuda/moe_gemm_prefill.cuh"
}  // namespace

namespace {

using emu_moe::put_sf;
using emu_test::Rng;

struct Case {
  const char *name;
  int bm;         /* BLOCK_M: 128 or 64 */
  bool mx;        /* MXFP4 weights, else FP8 */
  int64_t dense_m; /* > 0: a dense call of this many rows (the blocks' live masks unused) */
  int64_t N, K, EL;
  /* per BLOCK_M-row block: expert (-1 skipped, >= EL bad) and its live rows
   * as two 64-bit masks (bit 0 of lo set for a live block; hi unused at 64) */
  int nblk;
  int32_t expert[4];
  uint64_t lo[4], hi[4];
  int sa_lo, sa_hi; /* activation scale bytes: uniform in [lo, hi] */
  int sb_lo, sb_hi; /* weight scale bytes */
  int nan_row;      /* >= 0: this row's scale byte of K tile 1 is 0xFF */
  int nan_col;      /* >= 0: this column's (expert 0) scale byte of block / tile 1 is 0xFF */
  bool loose;       /* scales beyond the exact span: the diff metric only, no per-output bound */
};

template <int BM, bool MX>
void launch(const Case &c, const GemmArgs &a, unsigned gx, unsigned gy) {
  using C = Pf<BM, MX>;
  EXPECT((size_t)C::SMEM <= sizeof smem, "%s: %d B of shared memory > the emulation's %zu", c.name, C::SMEM, sizeof smem);
  if ((size_t)C::SMEM > sizeof smem) return;
  /* as launch_prefill: interleaved warp rows for grouped calls at BLOCK_M 128 */
  if constexpr (BM == 128)
    if (DSK_MOE_PF_INTERLEAVE && a.m_indices != nullptr) {
      emu::launch(gx, gy, C::THREADS, smem, (size_t)C::SMEM, [&] { moe_gemm_prefill_kernel<BM, MX, true>(a); });
      return;
    }
  emu::launch(gx, gy, C::THREADS, smem, (size_t)C::SMEM, [&] { moe_gemm_prefill_kernel<BM, MX, false>(a); });
}

bool run_case(dsk_ctx *cpu, const Case &c, uint64_t seed) {
  Rng r{seed | 1};
  const bool dense = c.dense_m > 0;
  const int bm = c.bm;
  const int64_t M = dense ? c.dense_m : (int64_t)bm * c.nblk;
  const int64_t N = c.N, K = c.K, EL = dense ? 1 : c.EL;
  const int64_t As = K + 16, Ds = N + 6, sfk_a = K / 128, sfk_b = c.mx ? K / 32 : K / 128;
  std::vector<int32_t> mind((size_t)M, dense ? 0 : -1);
  if (!dense)
    for (int b = 0; b < c.nblk; b++)
      for (int i = 0; i < bm; i++)
        if (((i < 64 ? c.lo[b] >> i : c.hi[b] >> (i - 64)) & 1u)) mind[(size_t)(bm * b + i)] = c.expert[b];
  std::vector<uint8_t> A((size_t)(M * As)), B((size_t)(EL * N * (c.mx ? K / 2 : K)));
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < As; k++) {
      uint8_t q = (uint8_t)r.next();
      if ((q & 0x7F) == 0x7F) q = 0x38;
      A[(size_t)(i * As + k)] = mind[(size_t)i] >= 0 ? q : 0x7F; /* padding rows: NaN, must not leak */
    }
  for (auto &b : B) {
    b = (uint8_t)r.next();
    if (!c.mx && (b & 0x7F) == 0x7F) b = 0xB0; /* FP8 weights are finite (checkpoint data) */
  }
  std::vector<int32_t> sfa((size_t)dsk_sf_packed_words(1, M, sfk_a), 0), sfb((size_t)dsk_sf_packed_words(EL, N, sfk_b), 0);
  for (int64_t i = 0; i < M; i++)
    for (int64_t kg = 0; kg < sfk_a; kg++)
      put_sf(sfa, M, sfk_a, 0, i, kg, (uint8_t)(i == c.nan_row && kg == 1 ? 0xFF : r.range(c.sa_lo, c.sa_hi)));
  for (int64_t e = 0; e < EL; e++)
    for (int64_t n = 0; n < N; n++)
      for (int64_t kg = 0; kg < sfk_b; kg++)
        put_sf(sfb, N, sfk_b, e, n, kg, (uint8_t)(e == 0 && n == c.nan_col && kg == 1 ? 0xFF : r.range(c.sb_lo, c.sb_hi)));
  std::vector<uint16_t> Dx((size_t)(M * Ds), 0xFFFF), Dr((size_t)(M * Ds), 0xFFFF);
  int64_t cnt_x = 0, cnt_r = 0;

  /* the kernel, with the arguments dsk__cuda_moe_gemm / dsk__cuda_dense_fp8_gemm build */
  dsk_moe_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.M_sum = M;
  d.N = N;
  d.K = K;
  d.E_local = EL;
  d.A_used = bm;
  d.A = A.data();
  d.A_stride = As;
  d.sfa.words = sfa.data();
  d.sfa.groups = 1;
  d.sfa.mn = M;
  d.sfa.sf_k = sfk_a;
  d.m_indices = mind.data();
  d.b_fmt = c.mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8;
  d.B = B.data();
  d.sfb.words = sfb.data();
  d.sfb.groups = EL;
  d.sfb.mn = N;
  d.sfb.sf_k = sfk_b;
  d.D_stride = Ds;
  d.tactic.op = DSK_OP_MOE_GEMM;
  d.tactic.version = DSK_MOE_GEMM_TACTIC_VERSION;
  d.tactic.v[0] = bm;
  d.tactic.v[1] = 128;
  d.tactic.v[2] = 1;
  d.D = reinterpret_cast<dsk_bf16 *>(Dx.data());
  d.counters = &cnt_x;
  GemmArgs a = grouped_args(&d, bm);
  if (dense) { /* as dsk__cuda_dense_fp8_gemm */
    a.sfa_T4 = (M + 3) / 4 * 4;
    a.m_indices = nullptr;
    a.B_row = K;
    a.B_group = 0;
    a.sfb_group = 0;
    a.M = M;
    a.bm = bm;
    a.E_local = 1;
    a.mblocks = (M + bm - 1) / bm;
    a.counters = nullptr;
  }
  const unsigned gx = (unsigned)(N / 128), gy = (unsigned)a.mblocks;
  if (bm == 128 && c.mx) launch<128, true>(c, a, gx, gy);
  else if (bm == 128) launch<128, false>(c, a, gx, gy);
  else if (c.mx) launch<64, true>(c, a, gx, gy);
  else launch<64, false>(c, a, gx, gy);

  /* the reference */
  const dsk_status st = emu_moe::ref_gemm(cpu, d, dense ? M : 0, bm, 128, Dr.data(), &cnt_r);
  EXPECT(st == DSK_STATUS_OK, "%s: cpu-ref: %s: %s", c.name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) return false;

  const int fails0 = emu_test::fails();
  const emu_moe::Cmp cmp = emu_moe::compare(Dx, Dr, M, N, Ds, [&](int64_t row) {
    const int32_t e = dense ? 0 : mind[(size_t)(row / bm * bm)];
    return dense || (e >= 0 && e < EL && mind[(size_t)row] >= 0);
  });
  const int64_t n = cmp.n, touched = cmp.touched, bad = cmp.bad, nan_ok = cmp.nan_ok, nan_bad = cmp.nan_bad;
  const double diff = cmp.diff, worst = cmp.worst;
  EXPECT(n > 0, "%s: no output compared", c.name);
  EXPECT(bad == 0, "%s: %lld non-finite outputs where the reference is finite", c.name, (long long)bad);
  EXPECT(nan_bad == 0, "%s: %lld finite outputs where the reference is NaN", c.name, (long long)nan_bad);
  EXPECT((c.nan_row >= 0 || c.nan_col >= 0) == (nan_ok > 0), "%s: %lld NaN outputs (NaN scale: %s)", c.name,
         (long long)nan_ok, c.nan_row >= 0 || c.nan_col >= 0 ? "yes" : "no");
  EXPECT(touched == 0, "%s: %lld elements written outside live rows / columns", c.name, (long long)touched);
  EXPECT(c.loose || worst <= 1.0, "%s: an output differs from the reference by %.2f x its bound (2^-7 relative)", c.name, worst);
  EXPECT(diff <= 1e-5, "%s: diff %.3e vs cpu-ref > 1e-5", c.name, diff);
  EXPECT(cnt_x == cnt_r, "%s: counter %lld, reference %lld", c.name, (long long)cnt_x, (long long)cnt_r);
  printf("%-58s %6d outputs, %4d NaN, diff %.2e, worst %.2f of bound, counter %lld: %s\n", c.name, (int)n, (int)nan_ok,
         diff, worst, (long long)cnt_x, emu_test::fails() == fails0 ? "ok" : "FAIL");
  fflush(stdout);
  return emu_test::fails() == fails0;
}

}  // namespace

int main() {
  const uint64_t F = ~0ull, L1 = 1ull, L9 = 0x1F1ull | (1ull << 40) | (1ull << 63);
  const uint64_t L20 = (1ull << 20) - 1;
  /* name, BLOCK_M, MXFP4, dense M, N, K, EL, blocks, experts, live lo, live hi, A scales, B scales, NaN row, NaN column,
   * loose (diff metric only) */
  const Case cases[] = {
      {"MX: full block, gappy block, -1; K 512 (ring wraps)", 128, true, 0, 256, 512, 3, 3, {0, 2, -1}, {F, L9, 0},
       {F, L1 << 5, 0}, 119, 123, 117, 121, -1, -1},
      {"MX: bad expert, 1-row block; K 384 (3-byte scale word)", 128, true, 0, 128, 384, 2, 3, {1, 5, 0}, {L9, F, L1},
       {0, F, 0}, 119, 123, 117, 121, -1, -1},
      {"MX: K 128 (one K tile), rows only in the top half", 128, true, 0, 128, 128, 1, 1, {0}, {0x8000000000000001ull}, {0},
       119, 123, 117, 121, -1, -1},
      {"MX: A scales span 15 binades, B 23 (still exact)", 128, true, 0, 128, 640, 2, 2, {1, 0}, {F, L20}, {F, 0}, 110, 125,
       100, 123, -1, -1},
      {"MX: B scale bytes down to 0 (2^-127)", 128, true, 0, 128, 256, 1, 1, {0}, {F}, {F}, 119, 123, 0, 3, -1, -1},
      {"MX: B bytes 0..200, A 0..40: far blocks vanish, no -Inf", 128, true, 0, 128, 512, 1, 1, {0}, {F}, {F}, 0, 40, 0,
       200, -1, -1, true},
      {"MX: NaN scale (0xFF) in one row and one column", 128, true, 0, 256, 256, 1, 1, {0}, {F}, {F}, 119, 123, 117, 121, 5,
       130},
      {"FP8: full block, gappy block, -1; K 640 (partial word)", 128, false, 0, 256, 640, 3, 3, {2, 0, -1}, {F, L9, 0},
       {F, L1 << 7, 0}, 119, 123, 117, 121, -1, -1},
      {"FP8: bad expert; K 256", 128, false, 0, 128, 256, 2, 2, {7, 1}, {L1, L20}, {0, F}, 119, 123, 117, 121, -1, -1},
      {"FP8: A and B scales span 15 binades", 128, false, 0, 128, 512, 1, 1, {0}, {F}, {F}, 105, 120, 110, 125, -1, -1},
      {"FP8: NaN scale (0xFF) in one row and one column", 128, false, 0, 128, 256, 1, 1, {0}, {F}, {F}, 119, 123, 117, 121,
       77, 3},
      {"dense FP8: M 130 (second block 2 rows), K 384", 128, false, 130, 256, 384, 1, 0, {0}, {0}, {0}, 119, 123, 117, 121,
       -1, -1},
      /* BLOCK_M 64 (2 warps): DSv4-Pro's alignment at prefill sizes */
      {"BM 64 MX: full, gappy, -1, bad; K 512", 64, true, 0, 256, 512, 3, 4, {0, 2, -1, 9}, {F, L9, 0, L1}, {0, 0, 0, 0},
       119, 123, 117, 121, -1, -1},
      {"BM 64 MX: NaN scale in one row and one column; K 384", 64, true, 0, 128, 384, 1, 2, {0, 0}, {F, L20}, {0, 0},
       119, 123, 117, 121, 70, 9},
      {"BM 64 FP8: gappy, full; K 640", 64, false, 0, 256, 640, 2, 2, {1, 0}, {L9, F}, {0, 0}, 110, 125, 110, 125,
       -1, -1},
      {"dense BM 64 FP8: M 37, K 256", 64, false, 37, 128, 256, 1, 0, {0}, {0}, {0}, 119, 123, 117, 121, -1, -1},
  };
  return emu_test::run_cases(DSK_MOE_PF_BCOOP ? "emu_moe_prefill (BCOOP)" : "emu_moe_prefill", cases, 0x9f11000u,
                             run_case);
}
