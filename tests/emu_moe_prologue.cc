/* emu_moe_prologue.cc - dsk_moe_run's fused decode prologue
 * (src/backend/cuda/moe_prologue.cuh), its exact source, run on the CPU
 * through tests/emu/cuda_emu.h and checked byte for byte against the three
 * cpu-ref ops it replaces on the same inputs: dsk_fp8_quantize_1x128,
 * dsk_moe_permute (DSK_MOE_PERMUTE_NO_PAD_FILL) and dsk_sf_pack_mn_major.
 * Runs in CI, where there is no GPU. Compared: inv_perm and m_indices (every
 * entry), the A rows of live rows and their packed SFA words, xq and every
 * sfx word (padding words included), the three counters; rows of A that no
 * assignment owns must keep their poison (the fused kernel writes no
 * padding). Cases: both model widths and odd ones (H / 128 not a multiple of
 * 4; more groups than one round of warps), bad and -1 ids, an EP slice,
 * dropped assignments (M_sum too small), many experts per token on one
 * expert, non-finite x values, no shared expert (xq NULL: the count is
 * still kept), more blocks than assignments (m_indices of a large M_sum).
 * Not races or speed (compute-sanitizer and the benchmarks on a GPU). */
#include <math.h>

#include <vector>

#include "emu/cuda_emu.h"

#include "dsk.h"
#include "emu/emu_test.h"
#include "format/mxfp4.h"

namespace {
__attribute__((aligned(16))) uint8_t pro_smem[16 * 1024];
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_prologue.cuh"
}  // namespace

namespace {

using emu_test::Rng;

struct Case {
  const char *name;
  int64_t T, topk, E, EL, off, H, A;
  int64_t m_extra;   /* M_sum = needed rows (rounded to A) + m_extra A-blocks; < 0 drops rows */
  int ids_mode;      /* 0 random distinct, 1 bad ids, 2 everything on two experts */
  bool shared;       /* xq / sfx written */
  bool nonfinite;    /* a few NaN / Inf in x */
  int64_t a_pad;     /* A_stride = H + a_pad */
};

uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

bool run(dsk_ctx *cpu, const Case &c, uint64_t seed) {
  Rng r{seed * 0x9E3779B97F4A7C15ull + 1};
  const int64_t T = c.T, K = c.topk, H = c.H, NA = T * K, ng = H / 128, kp = (ng + 3) / 4;
  const int64_t T4 = (T + 3) / 4 * 4;
  std::vector<int32_t> ids((size_t)NA);
  for (int64_t t = 0; t < T; t++) {
    std::vector<int32_t> perm((size_t)c.E);
    for (int64_t e = 0; e < c.E; e++) perm[(size_t)e] = (int32_t)e;
    for (int64_t e = c.E - 1; e > 0; e--) std::swap(perm[(size_t)e], perm[(size_t)r.range(0, (int)e)]);
    for (int64_t k = 0; k < K; k++) {
      int32_t id = perm[(size_t)k];
      if (c.ids_mode == 2) id = (int32_t)(c.off + (k % 2));
      ids[(size_t)(t * K + k)] = id;
    }
  }
  if (c.ids_mode == 1) {
    ids[0] = -1;
    if (NA > K + 1) ids[(size_t)(K + 1)] = (int32_t)(c.E + 5);
    if (NA > 2 * K) ids[(size_t)(2 * K)] = -9;
  }
  /* rows the plan needs: per local expert round_up(count, A) */
  std::vector<int64_t> cnt((size_t)c.EL, 0);
  for (int32_t id : ids)
    if (id >= c.off && id < c.off + c.EL) cnt[(size_t)(id - c.off)]++;
  int64_t need = 0;
  for (int64_t v : cnt) need += (v + c.A - 1) / c.A * c.A;
  int64_t M = need + c.m_extra * c.A;
  if (M < c.A) M = c.A;
  const int64_t M4 = (M + 3) / 4 * 4, As = H + c.a_pad;

  std::vector<uint16_t> x((size_t)(T * H));
  for (int64_t t = 0; t < T; t++) {
    const double rowscale = std::ldexp(1.0, r.range(-6, 6));
    for (int64_t h = 0; h < H; h++) x[(size_t)(t * H + h)] = bf16_of((float)(r.normal() * rowscale));
  }
  if (c.nonfinite) {
    x[3] = 0x7FC0u;                                  /* NaN */
    x[(size_t)(H / 2 + 1)] = 0x7F80u;                /* +Inf */
    if (T > 1) x[(size_t)(H + 130)] = 0xFF80u;      /* -Inf */
  }

  /* the reference: the three cpu-ref ops */
  std::vector<uint8_t> xq_r((size_t)(T * H)), xsf_r((size_t)(T * ng)), A_r((size_t)(M * As), 0xAB),
      Asf_r((size_t)(M * ng), 0xCD);
  std::vector<int32_t> sfx_r((size_t)(kp * T4), 0x5A5A5A5A), mind_r((size_t)M, 77), inv_r((size_t)NA, 77),
      sfa_r((size_t)(kp * M4), 0x5A5A5A5A);
  int64_t cx_r = 0, cp_r[2] = {0, 0};
  {
    dsk_fp8_quantize_desc q;
    memset(&q, 0, sizeof q);
    q.struct_size = sizeof q;
    q.rows = T; q.K = H; q.x_dtype = DSK_MOE_IN_BF16; q.x = x.data(); q.x_stride = H;
    q.q = xq_r.data(); q.q_stride = H; q.sf = xsf_r.data(); q.sf_stride = ng; q.sf_packed = sfx_r.data();
    q.counters = &cx_r;
    if (dsk_fp8_quantize_1x128(cpu, &q) != DSK_STATUS_OK) {
      EXPECT(false, "%s: cpu-ref quantize: %s", c.name, dsk_last_error());
      return false;
    }
    std::vector<int64_t> pws((size_t)(2 * c.EL));
    dsk_moe_permute_desc p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.T = T; p.topk = K; p.E = c.E; p.E_local = c.EL; p.expert_offset = c.off; p.K = H; p.A_used = c.A; p.M_sum = M;
    p.ids = ids.data(); p.ids_stride = K; p.xq = xq_r.data(); p.xq_stride = H; p.xsf = xsf_r.data();
    p.xsf_stride = ng; p.A = A_r.data(); p.A_stride = As; p.Asf = Asf_r.data(); p.Asf_stride = ng;
    p.m_indices = mind_r.data(); p.inv_perm = inv_r.data(); p.inv_perm_stride = K;
    p.workspace = pws.data(); p.workspace_bytes = (int64_t)(pws.size() * sizeof(int64_t));
    p.counters = cp_r; p.flags = DSK_MOE_PERMUTE_NO_PAD_FILL;
    if (dsk_moe_permute(cpu, &p) != DSK_STATUS_OK) {
      EXPECT(false, "%s: cpu-ref permute: %s", c.name, dsk_last_error());
      return false;
    }
    dsk_sf_pack_desc s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.G = 1; s.MN = M; s.sf_k = ng; s.gran_mn = 1; s.sf = Asf_r.data(); s.sf_stride = ng; s.out = sfa_r.data();
    if (dsk_sf_pack_mn_major(cpu, &s) != DSK_STATUS_OK) {
      EXPECT(false, "%s: cpu-ref sf_pack: %s", c.name, dsk_last_error());
      return false;
    }
  }

  /* the fused kernel, on poisoned outputs */
  std::vector<uint8_t> xq((size_t)(T * H), 0xEE), A((size_t)(M * As), 0xAB);
  std::vector<int32_t> sfx((size_t)(kp * T4), 0x11223344), mind((size_t)M, 0x7EEEEEEE), inv((size_t)NA, 0x7EEEEEEE),
      sfa((size_t)(kp * M4), 0x11223344);
  unsigned long long cx = 0, cpm[2] = {0, 0};
  ProParams p;
  memset(&p, 0, sizeof p);
  p.T = T; p.topk = K; p.E = c.E; p.EL = c.EL; p.off = c.off; p.H = H; p.A = c.A; p.M = M;
  p.ids = ids.data(); p.ids_stride = K; p.x = x.data(); p.x_stride = H;
  p.xq = c.shared ? xq.data() : nullptr; p.sfx = c.shared ? sfx.data() : nullptr;
  p.A_out = A.data(); p.A_stride = As; p.sfa = sfa.data(); p.m_indices = mind.data(); p.inv = inv.data();
  p.inv_stride = K; p.cnt_x = &cx; p.cnt_perm = cpm;
  const int64_t mb = (M + kProThreads - 1) / kProThreads;
  const unsigned grid = (unsigned)(NA > mb ? NA : mb);
  emu::launch(grid, 1, kProThreads, pro_smem, kProSmem, [&] { moe_prologue_kernel(p); });

  const int64_t f0 = emu_test::fails();
  int64_t bad_inv = 0, bad_mind = 0, bad_row = 0, bad_sfa = 0, touched = 0;
  for (int64_t i = 0; i < NA; i++) bad_inv += inv[(size_t)i] != inv_r[(size_t)i];
  for (int64_t i = 0; i < M; i++) bad_mind += mind[(size_t)i] != mind_r[(size_t)i];
  std::vector<char> live((size_t)M, 0);
  for (int64_t i = 0; i < NA; i++)
    if (inv_r[(size_t)i] >= 0) live[(size_t)inv_r[(size_t)i]] = 1;
  for (int64_t m = 0; m < M; m++) {
    const uint8_t *a = &A[(size_t)(m * As)], *ar = &A_r[(size_t)(m * As)];
    if (live[(size_t)m]) {
      bad_row += memcmp(a, ar, (size_t)H) != 0;
      for (int64_t w = 0; w < kp; w++) bad_sfa += sfa[(size_t)(w * M4 + m)] != sfa_r[(size_t)(w * M4 + m)];
    } else {
      for (int64_t j = 0; j < As; j++) touched += a[j] != 0xAB;
    }
    for (int64_t j = H; j < As; j++) touched += live[(size_t)m] && a[j] != 0xAB; /* the stride gap */
  }
  EXPECT(bad_inv == 0, "%s: %lld inv_perm entries differ", c.name, (long long)bad_inv);
  EXPECT(bad_mind == 0, "%s: %lld m_indices entries differ", c.name, (long long)bad_mind);
  EXPECT(bad_row == 0, "%s: %lld live A rows differ", c.name, (long long)bad_row);
  EXPECT(bad_sfa == 0, "%s: %lld packed SFA words of live rows differ", c.name, (long long)bad_sfa);
  EXPECT(touched == 0, "%s: %lld bytes written outside the live rows of A", c.name, (long long)touched);
  if (c.shared) {
    EXPECT(memcmp(xq.data(), xq_r.data(), xq.size()) == 0, "%s: xq differs", c.name);
    EXPECT(memcmp(sfx.data(), sfx_r.data(), sfx.size() * 4) == 0, "%s: packed sfx differs", c.name);
  } else {
    bool clean = true;
    for (uint8_t v : xq) clean &= v == 0xEE;
    EXPECT(clean, "%s: xq written without a shared expert", c.name);
  }
  EXPECT((int64_t)cx == cx_r, "%s: non-finite x counted %llu, want %lld", c.name, cx, (long long)cx_r);
  EXPECT((int64_t)cpm[0] == cp_r[0] && (int64_t)cpm[1] == cp_r[1], "%s: bad / dropped %llu / %llu, want %lld / %lld",
         c.name, cpm[0], cpm[1], (long long)cp_r[0], (long long)cp_r[1]);
  int64_t live_n = 0;
  for (char v : live) live_n += v;
  printf("  %-40s T %3lld topk %2lld H %5lld M %5lld: %lld live rows, %u blocks, bad %lld dropped %lld nonfinite %lld\n",
         c.name, (long long)T, (long long)K, (long long)H, (long long)M, (long long)live_n, grid, (long long)cp_r[0],
         (long long)cp_r[1], (long long)cx_r);
  return emu_test::fails() == f0;
}

/* name                              T   k   E    EL  off  H     A   extra ids shared nonfin pad */
const Case kCases[] = {
    {"DSv4-Flash T 1", 1, 6, 256, 256, 0, 4096, 64, 0, 0, true, false, 0},
    {"DSv4-Flash T 16, 7 spare blocks", 16, 6, 256, 256, 0, 4096, 64, 7, 0, true, false, 0},
    {"DSv4-Pro T 3 (H 7168, 56 groups)", 3, 6, 384, 384, 0, 7168, 128, 2, 0, true, true, 0},
    {"GLM-5.1 T 16 topk 8 (H 6144)", 16, 8, 256, 256, 0, 6144, 64, 0, 0, true, false, 0},
    {"reduced, bad ids, H 384 (ng 3)", 7, 6, 8, 8, 0, 384, 64, 0, 1, true, true, 16},
    {"EP experts 4..7 of 16, no shared", 9, 6, 16, 4, 4, 256, 64, 1, 0, false, true, 0},
    {"two experts take all, dropped rows", 10, 6, 8, 8, 0, 256, 64, -1, 2, true, false, 0},
    {"H 8320 (65 groups: two rounds)", 2, 4, 32, 32, 0, 8320, 64, 0, 0, true, false, 0},
    {"T 1 topk 1, 5000-row M_sum", 1, 1, 1024, 1024, 0, 512, 128, 38, 0, true, false, 0},
    {"T 32 topk 8 (256 assignments)", 32, 8, 64, 64, 0, 256, 64, 0, 1, true, false, 0},
};

}  // namespace

int main() {
  printf("emu_moe_prologue: the fused quantize + permute + SFA pack against the cpu-ref ops\n");
  return emu_test::run_cases("emu_moe_prologue", kCases, 7100, run);
}
