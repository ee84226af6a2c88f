/* emu_moe_skinny.cc - the decode-shaped FP8 x MXFP4 / FP8 x FP8 GEMM of
 * src/backend/cuda/moe_gemm_skinny.cuh, its exact source, run on the CPU
 * through tests/emu/cuda_emu.h and checked against the cpu-ref backend's
 * dsk_moe_gemm (grouped) and dsk_dense_fp8_gemm (dense) on the same inputs.
 * Runs in CI, where there is no GPU: it proves the operand and scale layouts
 * of both weight formats, the K order of the fragments, the scale folds, the
 * live-row lists (grouped: passes of 8 rows, rows anywhere in a block; dense:
 * the rows below M of each BLOCK_M block), every case again with fewer rows
 * staged per pass (GemmArgs.grp 1, 2 or 4, so a block of more live rows takes
 * several passes; MXFP4 passes of at most 4 rows stage them as f16
 * fragments, larger ones as e4m3 bytes), the weight ring at every depth the
 * launcher can pick (4, 3, 2), both warp counts, split-K over 1, 2 and 4
 * warp slices (ring stages interleaved, sums added in slice order), MXFP4
 * stages of one and of two K tiles (every MXFP4 case runs both; a half
 * stage at an odd K / 128), the skipped
 * (-1) and bad-expert blocks with their counter, and that padding rows and
 * stride gaps of D are never written. Not races or speed (compute-sanitizer
 * and the benchmarks on a GPU).
 *
 * Data: e4m3 activations (padding rows NaN, which must not leak), random
 * e2m1 or finite e4m3 weights, UE8M0 scales around 2^-8 .. 2^-4
 * (activations) and 2^-10 .. 2^-6 (weights); D pre-filled with 0xFFFF
 * (bf16 NaN). */
#include <type_traits>

#include "emu/cuda_emu.h"

#include "dsk.h"
#include "emu/emu_moe_gemm.h"
#include "emu/emu_test.h"

namespace {
__attribute__((aligned(16))) uint8_t smem[128 * 1024];
#include "backend/cuda/moe_gemm_frag.cuh"
#include "backend/cuda/moe_gemm_skinny.cuh"
}  // namespace

namespace {

using emu_moe::put_sf;
using emu_test::Rng;

struct Case {
  const char *name;
  int nw, st;          /* warps (BLOCK_N / 16) and weight-ring depth */
  bool mx;             /* MXFP4 weights, else FP8 */
  int ks;              /* split-K: warp slices */
  int dense_bm;        /* > 0: a dense call at this BLOCK_M (M = the rows of live[0]'s lowest run) */
  int64_t N, K, EL;
  /* per 64-row block: expert (-1 skipped, >= EL bad) and its live rows as a
   * bit mask over the block's 64 rows (bit 0 must be set for a live block) */
  int nblk;
  int32_t expert[6];
  uint64_t live[6];
};

template <int NW, int ST, bool MX, int TPS>
bool launch_ks(const Case &c, const GemmArgs &a, unsigned gy) {
  const size_t bytes = (size_t)Sk<NW, ST, MX, TPS>::smem((int64_t)a.KT * 128, a.grp);
  EXPECT(bytes <= sizeof smem, "%s: %zu B of shared memory > the emulation's %zu", c.name, bytes, sizeof smem);
  if (bytes > sizeof smem) return false;
  const unsigned tiles = (unsigned)((a.N + 16 * NW / c.ks - 1) / (16 * NW / c.ks));
  const unsigned gx = (tiles + (unsigned)a.tpc - 1) / (unsigned)a.tpc; /* as launch_skinny_ks */
  if (c.ks == 1) emu::launch(gx, gy, 32 * NW, smem, bytes, [&] { moe_gemm_skinny_kernel<NW, ST, MX, 1, TPS>(a); });
  else if (c.ks == 2) emu::launch(gx, gy, 32 * NW, smem, bytes, [&] { moe_gemm_skinny_kernel<NW, ST, MX, 2, TPS>(a); });
  else if (c.ks == 4) emu::launch(gx, gy, 32 * NW, smem, bytes, [&] { moe_gemm_skinny_kernel<NW, ST, MX, 4, TPS>(a); });
  else return false;
  return true;
}
template <bool MX, int TPS>
bool launch_cfg(const Case &c, const GemmArgs &a, unsigned gy) {
  if (c.nw == 4 && c.st == 4) return launch_ks<4, 4, MX, TPS>(c, a, gy);
  if (c.nw == 4 && c.st == 2) return launch_ks<4, 2, MX, TPS>(c, a, gy);
  if (c.nw == 8 && c.st == 4) return launch_ks<8, 4, MX, TPS>(c, a, gy);
  if (c.nw == 8 && c.st == 3) return launch_ks<8, 3, MX, TPS>(c, a, gy);
  if (c.nw == 8 && c.st == 2) return launch_ks<8, 2, MX, TPS>(c, a, gy);
  return false;
}

/* tps: MXFP4 K tiles per ring stage (1 or 2; FP8 1); grp: rows staged per pass */
bool run_case(dsk_ctx *cpu, const Case &c, int tps, int grp, int tpc, uint64_t seed) {
  Rng r{seed | 1};
  const bool dense = c.dense_bm > 0;
  /* dense: M = the length of live[0]'s run of low set bits (plus 64 per further block) */
  int64_t M = 64 * c.nblk;
  if (dense) {
    int run = 0;
    while (run < 64 && ((c.live[0] >> run) & 1u)) run++;
    M = 64 * (c.nblk - 1) + run;
  }
  const int64_t N = c.N, K = c.K, EL = dense ? 1 : c.EL;
  const int64_t As = K + 16, Ds = N + 6, sfk_a = K / 128, sfk_b = c.mx ? K / 32 : K / 128;
  std::vector<int32_t> mind((size_t)M, dense ? 0 : -1);
  if (!dense)
    for (int b = 0; b < c.nblk; b++)
      for (int i = 0; i < 64; i++)
        if ((c.live[b] >> i) & 1u) mind[(size_t)(64 * b + i)] = c.expert[b];
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
    for (int64_t kg = 0; kg < sfk_a; kg++) put_sf(sfa, M, sfk_a, 0, i, kg, (uint8_t)r.range(119, 123));
  for (int64_t e = 0; e < EL; e++)
    for (int64_t n = 0; n < N; n++)
      for (int64_t kg = 0; kg < sfk_b; kg++) put_sf(sfb, N, sfk_b, e, n, kg, (uint8_t)r.range(117, 121));
  std::vector<uint16_t> Dx((size_t)(M * Ds), 0xFFFF), Dr((size_t)(M * Ds), 0xFFFF);
  int64_t cnt_x = 0, cnt_r = 0;

  dsk_moe_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.M_sum = M;
  d.N = N;
  d.K = K;
  d.E_local = EL;
  d.A_used = 64;
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
  d.tactic.v[0] = 64;
  d.tactic.v[1] = 16 * c.nw;
  d.tactic.v[2] = 1; /* the reference's result does not depend on the split; the kernel gets c.ks below */

  /* the kernel, with the arguments dsk__cuda_moe_gemm / dsk__cuda_dense_fp8_gemm build */
  d.D = reinterpret_cast<dsk_bf16 *>(Dx.data());
  d.counters = &cnt_x;
  GemmArgs a = grouped_args(&d, 64);
  a.ksplit = c.ks;
  if (dense) { /* as dsk__cuda_dense_fp8_gemm */
    a.sfa_T4 = (M + 3) / 4 * 4;
    a.m_indices = nullptr;
    a.B_row = K;
    a.B_group = 0;
    a.sfb_group = 0;
    a.M = M;
    a.bm = c.dense_bm;
    a.E_local = 1;
    a.mblocks = (M + c.dense_bm - 1) / c.dense_bm;
    a.counters = nullptr;
  }
  a.grp = grp;
  a.tpc = tpc; /* column tiles per CTA (split 1 only, as the launcher) */
  const bool launched = !c.mx ? launch_cfg<false, 1>(c, a, (unsigned)a.mblocks)
                        : tps == 2 ? launch_cfg<true, 2>(c, a, (unsigned)a.mblocks)
                                   : launch_cfg<true, 1>(c, a, (unsigned)a.mblocks);
  EXPECT(launched, "%s: no instantiation for %d warps, ring %d, split %d, %d tiles per stage", c.name, c.nw, c.st, c.ks,
         tps);
  if (!launched) return false;

  /* the reference */
  const dsk_status st = emu_moe::ref_gemm(cpu, d, dense ? M : 0, c.dense_bm, 16 * c.nw, Dr.data(), &cnt_r);
  EXPECT(st == DSK_STATUS_OK, "%s: cpu-ref: %s: %s", c.name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) return false;

  const int fails0 = emu_test::fails();
  const emu_moe::Cmp cmp = emu_moe::compare(Dx, Dr, M, N, Ds, [&](int64_t row) {
    const int32_t e = mind[(size_t)(row / 64 * 64)];
    return dense || (e >= 0 && e < EL && mind[(size_t)row] >= 0);
  });
  const int64_t n = cmp.n, touched = cmp.touched;
  const int64_t bad = cmp.bad + cmp.nan_ok + cmp.nan_bad; /* non-finite on either side */
  const double worst = cmp.worst, diff = cmp.diff;
  EXPECT(n > 0, "%s: no output compared", c.name);
  EXPECT(bad == 0, "%s: %lld non-finite outputs", c.name, (long long)bad);
  EXPECT(touched == 0, "%s: %lld elements written outside live rows / columns", c.name, (long long)touched);
  EXPECT(worst <= 1.0, "%s: an output differs from the reference by %.2f x its bound (2^-7 relative)", c.name, worst);
  EXPECT(diff <= 1e-5, "%s: diff %.3e vs cpu-ref > 1e-5", c.name, diff);
  EXPECT(cnt_x == cnt_r, "%s: counter %lld, reference %lld", c.name, (long long)cnt_x, (long long)cnt_r);
  printf("%-50s %d tile%s/stage, %d rows/pass, %d col tiles/CTA %5d outputs, diff %.2e, worst %.2f of bound, counter %lld: %s\n",
         c.name, tps, tps > 1 ? "s" : " ", grp, tpc, (int)n, diff, worst, (long long)cnt_x,
         emu_test::fails() == fails0 ? "ok" : "FAIL");
  fflush(stdout);
  return emu_test::fails() == fails0;
}

}  // namespace

int main() {
  dsk_ctx *cpu = emu_test::cpu_ctx();
  if (!cpu) return 1;
  const uint64_t L1 = 1ull, L9 = 0x1F1ull | (1ull << 40) | (1ull << 63), L64 = ~0ull;
  const uint64_t L33 = (1ull << 33) - 1, L20 = (1ull << 20) - 1;
  const Case cases[] = {
      /* name, warps, ring, MXFP4, split, dense BLOCK_M, N, K, EL, blocks, experts, live rows */
      {"MX 8 warps ring 4: 1 row, 9 rows (2 groups), -1", 8, 4, true, 1, 0, 256, 512, 3, 3, {0, 2, -1}, {L1, L9, 0}},
      {"MX 4 warps ring 4: bad expert, 64 rows (8 groups)", 4, 4, true, 1, 0, 128, 384, 2, 3, {1, 5, 0}, {L9, L1, L64}},
      {"MX 8 warps ring 3: K 640", 8, 3, true, 1, 0, 128, 640, 2, 2, {1, 0}, {L9, L1 | (1ull << 33)}},
      {"MX 8 warps ring 2: K 256 (2 K tiles)", 8, 2, true, 1, 0, 256, 256, 1, 2, {0, 0}, {L1, L9}},
      {"MX 4 warps ring 2: K 128 (1 K tile)", 4, 2, true, 1, 0, 128, 128, 2, 2, {1, 0}, {L9, L1}},
      {"MX 4 warps ring 4: N 640 (10 column tiles)", 4, 4, true, 1, 0, 640, 384, 2, 2, {1, 0}, {L9, L1}},
      {"FP8 4 warps ring 2: N 640 (10 column tiles)", 4, 2, false, 1, 0, 640, 256, 2, 2, {0, 1}, {L1, L9}},
      {"MX 8 warps split 2: K 640 (2 + 1 stages)", 8, 4, true, 2, 0, 256, 640, 2, 2, {1, 0}, {L9, L1}},
      {"MX 8 warps split 4 ring 2: K 896", 8, 2, true, 4, 0, 128, 896, 2, 2, {0, 1}, {L1, L9 | (1ull << 62)}},
      {"MX 4 warps split 4: K 512 (1 stage each)", 4, 4, true, 4, 0, 256, 512, 2, 2, {1, -1}, {L9, 0}},
      {"MX 4 warps split 2: K 384 (half stage in slice 1)", 4, 4, true, 2, 0, 128, 384, 2, 2, {0, 1}, {L9, L1}},
      {"FP8 8 warps ring 4: 1 row, 9 rows, -1", 8, 4, false, 1, 0, 256, 512, 3, 3, {0, 2, -1}, {L1, L9, 0}},
      {"FP8 4 warps ring 2: bad expert, 64 rows", 4, 2, false, 1, 0, 128, 384, 2, 3, {1, 5, 0}, {L9, L1, L64}},
      {"FP8 8 warps ring 3 split 2: K 640", 8, 3, false, 2, 0, 128, 640, 2, 2, {1, 0}, {L9, L1 | (1ull << 33)}},
      {"FP8 4 warps split 4: K 1024", 4, 4, false, 4, 0, 128, 1024, 1, 1, {0}, {L9}},
      {"dense FP8 BLOCK_M 16 split 4: M 1", 4, 4, false, 4, 16, 256, 512, 1, 1, {0}, {L1}},
      {"dense FP8 BLOCK_M 16 8 warps split 2: M 20", 8, 2, false, 2, 16, 128, 768, 1, 1, {0}, {L20}},
      {"dense FP8 BLOCK_M 32 split 1: M 97", 8, 4, false, 1, 32, 128, 256, 1, 2, {0, 0}, {L33, 0}},
  };
  int ok = 0, n = 0;
  for (const Case &c : cases)
    for (int tps = 1; tps <= (c.mx ? 2 : 1); tps++)
      for (int grp : {8, 1 << (n % 3)}) /* 8, then 1, 2 or 4 in turn */
        for (int tpc : {1, 2 + n % 3}) { /* several column tiles per CTA (one ring through them): 2, 3 or 4 */
          if (tpc > 1 && c.ks > 1) continue;
          ok += run_case(cpu, c, tps, grp, tpc, 0x5eed0000u + (uint64_t)n) ? 1 : 0;
          n++;
        }
  dsk_ctx_destroy(cpu);
  printf("emu_moe_skinny: %d of %d cases passed\n", ok, n);
  return emu_test::fails() ? 1 : 0;
}
