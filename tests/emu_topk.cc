/* emu_topk.cc - the top-k kernels (src/backend/cuda/indexer_topk_kernel.cuh:
 * topk_slice_kernel and topk_kernel), their exact source, run on the CPU
 * through tests/emu/cuda_emu.h (1024 fibers a CTA) and checked against the
 * cpu-ref backend's dsk_topk: the outputs must be identical (indices.md §9:
 * the CUDA top-k is bit-identical to the reference for identical scores).
 * Runs in CI, where there is no GPU. Cases: the multi-CTA path (slices
 * into the workspace, then the rank kernel, as dsk__cuda_topk launches
 * them), the one-CTA path of long rows, rows of <= 4096 ranked whole, the
 * shortcut, lens clamped both ways, ties, NaN / +-inf, and a row whose
 * candidates sit in one slice (its region overflows: the rank kernel
 * redoes the row). Run twice: in the default schedule and, as
 * emu_topk_warp, with each warp going as far as it can before the next
 * (a missing block barrier then shows). Not speed.
 *
 * Data: normal scores with planted duplicates, +inf poison past each row's
 * length, the output pre-filled with a poison value and a stride gap that
 * must stay untouched. */
#include "emu/cuda_emu.h"

#include "backend/indexer_rules.h"
#include "dsk.h"
#include "emu/emu_test.h"

#define DSK_SM120_SMEM_LIMIT 101376
#define DSK_TOPK_SHARED static

namespace {
__attribute__((aligned(16))) uint8_t tsm[100 * 1024];
#include "backend/cuda/indexer_topk_kernel.cuh"
}  // namespace

namespace {

using emu_test::Rng;

struct Case {
  const char *name;
  int64_t T, width, K;
  int P;          /* slices a row (0: one CTA a row) */
  int lens_mode;  /* 0: none; 1: random lens, some out of range */
  int shortcut;   /* 1: rows with L <= K take 0..L-1 */
  int data;       /* 0: normal; 1: heavy ties; 2: NaN / inf sprinkled; 3: all large keys in slice 0;
                     4: the large keys in the first 600 columns of slices 2 and P - 3 (the other regions empty) */
};

bool run(dsk_ctx *cpu, const Case &c, uint64_t seed) {
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 7};
  const int64_t st = c.width + 3, ost = c.K + 2;
  std::vector<float> scores((size_t)(c.T * st));
  std::vector<int32_t> lens((size_t)c.T);
  for (int64_t t = 0; t < c.T; t++) {
    int64_t L = c.width;
    if (c.lens_mode) {
      const int r = rng.range(0, 9);
      L = r == 0 ? -3 : r == 1 ? c.width + 5 : r == 2 ? rng.range(1, (int)c.K) : rng.range(1, (int)c.width);
    }
    lens[(size_t)t] = (int32_t)L;
    for (int64_t s = 0; s < st; s++) {
      float x = (float)rng.normal();
      if (c.data == 1) x = (float)rng.range(0, 40) * 0.25f;
      if (c.data == 2) {
        const int r = rng.range(0, 199);
        if (r == 0) x = NAN;
        else if (r == 1) x = INFINITY;
        else if (r == 2) x = -INFINITY;
        else if (r == 3) x = -0.f;
      }
      if (c.data == 3) x = s < c.width / 8 ? 100.f + (float)rng.normal() : (float)rng.normal();
      if (c.data == 4) {
        const int64_t ls = ((c.width + c.P - 1) / c.P + 3) / 4 * 4, sl = s / ls;
        if ((sl == 2 || sl == c.P - 3) && s % ls < 600) x += 100.f;
      }
      if (c.data == 0 && rng.range(0, 15) == 0 && s > 0) x = scores[(size_t)(t * st + s - 1)]; /* ties */
      const int64_t Lc = L < 0 ? 0 : L > c.width ? c.width : L;
      if (s >= Lc) x = INFINITY; /* past the row: must never be read into the result */
      scores[(size_t)(t * st + s)] = x;
    }
  }
  const int32_t poison = -77;
  std::vector<int32_t> ox((size_t)(c.T * ost), poison), orf((size_t)(c.T * ost), poison);
  unsigned long long cnt_x = 0;
  int64_t cnt_r = 0;

  /* the kernels, as dsk__cuda_topk launches them */
  TopkParams p;
  memset(&p, 0, sizeof p);
  p.scores = scores.data();
  p.st = st;
  p.width = c.width;
  p.T = c.T;
  p.K = (int)c.K;
  p.lens = c.lens_mode ? lens.data() : nullptr;
  p.ratio = 1;
  p.shortcut = c.shortcut;
  p.out = ox.data();
  p.out_st = ost;
  p.counters = &cnt_x;
  p.P = c.P;
  p.C = c.P ? topk_slice_cap(c.width, c.K, c.P) : 0;
  std::vector<uint32_t> ws_cnt((size_t)(c.T * (c.P ? c.P : 1)), 0xDEADBEEFu);
  /* the regions' unused entries hold plausible composites: scores a little
   * above the row's (100 + N(0, 1)) at random columns, so that one read by
   * mistake lands in the top K and is ranked (a repeated or huge value
   * would fill one bucket, and the rank kernel's exact fallback would hide
   * the wrong gather) */
  std::vector<unsigned long long> ws_cand((size_t)(c.T * (c.P ? c.P : 1) * (p.C ? p.C : 1)));
  for (auto &x : ws_cand)
    x = composite(score_key(100.f + (float)rng.normal()), rng.range(0, (int)c.width - 1));
  p.ws_cnt = ws_cnt.data();
  p.ws_cand = ws_cand.data();
  if (c.P) emu::launch(c.P, (unsigned)c.T, kKT, tsm, (size_t)kTkOffStart, [&] { topk_slice_kernel(p); });
  emu::launch((unsigned)c.T, 1, kKT, tsm, (size_t)kTkSmem, [&] { topk_kernel(p); });

  /* the reference */
  dsk_topk_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = c.T;
  d.scores = scores.data();
  d.scores_stride_t = st;
  d.width = c.width;
  d.lens = c.lens_mode ? lens.data() : nullptr;
  d.K = c.K;
  d.no_shortcut = !c.shortcut;
  d.out = orf.data();
  d.out_stride_t = ost;
  d.counters = &cnt_r;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status s = dsk_topk_plan(cpu, &d, &pi);
  std::vector<uint8_t> ws((size_t)(pi.workspace_bytes > 0 ? pi.workspace_bytes : 1));
  d.workspace = ws.data();
  d.workspace_bytes = pi.workspace_bytes;
  if (s == DSK_STATUS_OK) s = dsk_topk(cpu, &d);
  EXPECT(s == DSK_STATUS_OK, "%s: cpu-ref: %s: %s", c.name, dsk_status_name(s), dsk_last_error());
  if (s != DSK_STATUS_OK) return false;

  const int64_t fails0 = emu_test::fails();
  int64_t bad = 0, gap = 0;
  for (int64_t t = 0; t < c.T; t++) {
    for (int64_t k = 0; k < c.K; k++)
      if (ox[(size_t)(t * ost + k)] != orf[(size_t)(t * ost + k)]) {
        if (bad < 3)
          fprintf(stderr, "%s: row %lld pos %lld: %d, reference %d\n", c.name, (long long)t, (long long)k,
                  ox[(size_t)(t * ost + k)], orf[(size_t)(t * ost + k)]);
        bad++;
      }
    for (int64_t k = c.K; k < ost; k++) gap += ox[(size_t)(t * ost + k)] != poison;
  }
  EXPECT(bad == 0, "%s: %lld outputs differ from the reference", c.name, (long long)bad);
  EXPECT(gap == 0, "%s: %lld stride-gap entries written", c.name, (long long)gap);
  EXPECT((int64_t)cnt_x == cnt_r, "%s: counter %llu, reference %lld", c.name, cnt_x, (long long)cnt_r);
  for (int64_t t = 0; t < c.T && c.P; t++) { /* every slice of a long row writes its count */
    const int64_t L = !c.lens_mode ? c.width : lens[(size_t)t] < 0 ? 0 : lens[(size_t)t] > c.width ? c.width : lens[(size_t)t];
    if (!(L <= c.K && c.shortcut) && L > kSortCap)
      for (int i = 0; i < c.P; i++)
        EXPECT(ws_cnt[(size_t)(t * c.P + i)] != 0xDEADBEEFu, "%s: row %lld slice %d: count unwritten", c.name,
               (long long)t, i);
  }
  int64_t over = 0; /* regions over their capacity: the rank kernel redid those rows */
  for (int64_t i = 0; i < c.T * c.P; i++) over += ws_cnt[(size_t)i] != 0xDEADBEEFu && ws_cnt[(size_t)i] > (uint32_t)p.C;
  int64_t empty = 0; /* regions with no composite (the rank kernel's gather steps over them) */
  for (int64_t i = 0; i < c.T * c.P; i++) empty += ws_cnt[(size_t)i] == 0u;
  EXPECT(c.data != 3 || over > 0, "%s: no region overflowed", c.name);
  EXPECT(c.data != 4 || (over == 0 && empty >= c.T * (c.P - 2)), "%s: %lld regions over, %lld empty", c.name,
         (long long)over, (long long)empty);
  printf("%-52s T %lld width %lld K %lld P %d, %lld regions over, %lld empty: %s\n", c.name, (long long)c.T,
         (long long)c.width, (long long)c.K, c.P, (long long)over, (long long)empty,
         emu_test::fails() == fails0 ? "ok" : "FAIL");
  fflush(stdout);
  return emu_test::fails() == fails0;
}

}  // namespace

int main() {
  static const Case cases[] = {
      /* name, T, width, K, P, lens, shortcut, data */
      {"slices: 2 a row, K 2048 of 24K", 2, 24000, 2048, 2, 0, 1, 0},
      {"slices: 4 a row, K 512, lens clamped", 3, 20011, 512, 4, 1, 1, 0},
      {"slices: 3 a row, heavy ties", 2, 13000, 1024, 3, 0, 1, 1},
      {"slices: 2 a row, NaN / inf / -0", 2, 16384, 300, 2, 0, 0, 2},
      {"slices: 4, the large keys in slice 0 (overflow)", 2, 20000, 2048, 4, 0, 1, 3},
      {"slices: 32 a row (one row), K 2048 of 65536", 1, 65536, 2048, 32, 0, 1, 0},
      {"slices: 17, hits in 2 of them (15 empty regions)", 2, 34000, 256, 17, 0, 1, 4},
      {"slices: 32, hits in slices 2 and 29", 1, 65536, 256, 32, 0, 1, 4},
      {"one CTA a row: long rows, no shortcut", 2, 9001, 2048, 0, 1, 0, 0},
      {"one CTA a row: rows <= 4096 and the shortcut", 3, 4096, 100, 0, 1, 1, 0},
  };
  return emu_test::run_cases("emu_topk", cases, 11, run);
}
