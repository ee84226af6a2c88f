/* emu_moe_gemm.h - what the emulated MoE GEMM tests (tests/emu_moe_skinny.cc,
 * tests/emu_moe_prefill.cc) share: packing a UE8M0 byte into the MN-major
 * words, the cpu-ref run of the same call (dsk_moe_gemm, or
 * dsk_dense_fp8_gemm for a dense one), and the comparison of the kernel's D
 * with the reference's. Include after cuda_emu.h, dsk.h and emu_test.h. */
#ifndef DSK_EMU_MOE_GEMM_H
#define DSK_EMU_MOE_GEMM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

namespace emu_moe {

/* packed UE8M0 words (MN-major, 4 K groups per word): byte of (g, mn, kg) */
inline void put_sf(std::vector<int32_t> &w, int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t kg, uint8_t v) {
  const int64_t Kp = (sf_k + 3) / 4, T4 = (MN + 3) / 4 * 4;
  uint8_t *b = reinterpret_cast<uint8_t *>(w.data());
  b[4 * (g * Kp * T4 + (kg / 4) * T4 + mn) + kg % 4] = v;
}

/* The cpu-ref's D of the call d (its A, B, scales, m_indices, shapes) into
 * Dr (stride d.D_stride) and its counter into *cnt_r: dsk_moe_gemm, or with
 * dense_m > 0 dsk_dense_fp8_gemm over the first dense_m rows (BLOCK_M bm,
 * BLOCK_N bn: the reference ignores them). The status. */
inline dsk_status ref_gemm(dsk_ctx *cpu, dsk_moe_gemm_desc d, int64_t dense_m, int bm, int bn, uint16_t *Dr,
                           int64_t *cnt_r) {
  dsk_status st;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  std::vector<uint8_t> ws;
  auto workspace = [&](void **w, int64_t *bytes) {
    ws.resize((size_t)(pi.workspace_bytes > 0 ? pi.workspace_bytes : 1) + 64);
    *w = reinterpret_cast<void *>(((uintptr_t)ws.data() + 63) & ~(uintptr_t)63);
    *bytes = pi.workspace_bytes;
  };
  if (dense_m > 0) {
    dsk_dense_gemm_desc e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    e.M = dense_m;
    e.N = d.N;
    e.K = d.K;
    e.A = d.A;
    e.A_stride = d.A_stride;
    e.sfa = d.sfa;
    e.B = static_cast<const uint8_t *>(d.B);
    e.sfb = d.sfb;
    e.D = reinterpret_cast<dsk_bf16 *>(Dr);
    e.D_stride = d.D_stride;
    e.tactic.op = DSK_OP_MOE_DENSE_GEMM;
    e.tactic.version = DSK_DENSE_GEMM_TACTIC_VERSION;
    e.tactic.v[0] = bm;
    e.tactic.v[1] = bn;
    e.tactic.v[2] = 1;
    st = dsk_dense_fp8_gemm_plan(cpu, &e, &pi);
    workspace(&e.workspace, &e.workspace_bytes);
    if (st == DSK_STATUS_OK) st = dsk_dense_fp8_gemm(cpu, &e);
  } else {
    d.D = reinterpret_cast<dsk_bf16 *>(Dr);
    d.counters = cnt_r;
    st = dsk_moe_gemm_plan(cpu, &d, &pi);
    workspace(&d.workspace, &d.workspace_bytes);
    if (st == DSK_STATUS_OK) st = dsk_moe_gemm(cpu, &d);
  }
  return st;
}

/* The kernel's D (Dx) against the reference's (Dr), both [M, Ds] and
 * pre-filled with 0xFFFF; written(row) says which rows the kernel writes
 * (columns >= N never). */
struct Cmp {
  double diff = 0, worst = 0; /* diff metric over the finite pairs; largest error / (2^-7 |ref|) */
  int64_t n = 0;              /* finite pairs compared */
  int64_t touched = 0;        /* elements written outside the written rows and columns < N */
  int64_t bad = 0;            /* non-finite kernel outputs where the reference is finite */
  int64_t nan_ok = 0;         /* NaN outputs where the reference is non-finite */
  int64_t nan_bad = 0;        /* non-NaN outputs where the reference is non-finite */
};
template <typename Written>
Cmp compare(const std::vector<uint16_t> &Dx, const std::vector<uint16_t> &Dr, int64_t M, int64_t N, int64_t Ds,
            Written written) {
  Cmp r;
  double sxy = 0, s2 = 0;
  for (int64_t row = 0; row < M; row++) {
    const bool w = written(row);
    for (int64_t col = 0; col < Ds; col++) {
      const uint16_t x = Dx[(size_t)(row * Ds + col)], y = Dr[(size_t)(row * Ds + col)];
      if (!w || col >= N) {
        r.touched += x != 0xFFFF; /* padding rows, skipped blocks, stride gaps */
        continue;
      }
      const double fx = emu::bf16_to_f32(x), fy = emu::bf16_to_f32(y);
      if (!std::isfinite(fy)) {
        if (std::isnan(fx)) r.nan_ok++;
        else r.nan_bad++;
        continue;
      }
      if (!std::isfinite(fx)) {
        r.bad++;
        continue;
      }
      sxy += fx * fy;
      s2 += fx * fx + fy * fy;
      /* both round once to bf16 from fp32 / fp64 sums: at most one bf16 ulp apart */
      const double tol = std::ldexp(std::fabs(fy), -7) + 1e-30;
      const double err = std::fabs(fx - fy);
      if (err / tol > r.worst) r.worst = err / tol;
      r.n++;
    }
  }
  r.diff = s2 == 0 ? 0.0 : 1.0 - 2.0 * sxy / s2;
  return r;
}

}  // namespace emu_moe

#endif
