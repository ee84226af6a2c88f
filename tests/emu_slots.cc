/* emu_slots.cc - the CUDA slot-list builder of
 * src/backend/cuda/slot_list_kernels.cuh, its exact source, run on the CPU
 * through tests/emu/cuda_emu.h and checked against the cpu-ref backend's
 * dsk_slot_list_build: lists, lengths and counters must be identical
 * (spec/indices.md; the builders are integer code). Runs in CI, where there
 * is no GPU.
 *
 * Every kind (TOPK, C4A compaction, SWA, C128A), page sizes 64, 7 and 1,
 * block tables with holes (-1 pages) and one page number so large that its
 * slots pass INT32_MAX (-1 by the spec), request-local indices that are -1,
 * negative or past the table, padding rows, rows whose req is out of range
 * (counted), negative, small and edge positions (C128A one entry past the
 * width, SWA at the window), widths that are not multiples of 32 and SWA
 * windows shorter than the width. Outputs start as 0x5A5A5A5A. */
#include "emu/cuda_emu.h"

#include "dsk.h"
#include "emu/emu_test.h"

#define DSK_SLOTS_SHARED static
namespace {
#include "backend/cuda/slot_list_kernels.cuh"
}  // namespace

namespace {

using emu_test::Rng;
uint8_t dummy_smem[16]; /* no dynamic shared memory */

struct Case {
  const char *name;
  dsk_slot_list_kind kind;
  int64_t T, P, rows, max_blocks, K, width, window, ratio;
};

bool run_case(dsk_ctx *cpu, const Case &c, uint64_t seed) {
  Rng r{seed | 1};
  const int64_t T = c.T, P = c.P, MB = c.max_blocks, bs = MB + 3;
  const bool listy = c.kind == DSK_SLOTS_TOPK || c.kind == DSK_SLOTS_C4A;
  const int64_t width = listy ? c.K : c.width, is = c.K + 5, os = width + 7;
  std::vector<int32_t> bt((size_t)(c.rows * bs));
  for (auto &v : bt) {
    const int k = r.range(0, 9);
    v = k == 0 ? -1 : k == 1 ? 0x7FFFFFF0 : r.range(0, 5000);
  }
  std::vector<int32_t> req((size_t)T), pos((size_t)T), sm((size_t)T), idx((size_t)(T * (listy ? is : 1)));
  for (int64_t t = 0; t < T; t++) {
    req[(size_t)t] = t % 13 == 5 ? (int32_t)c.rows : t % 17 == 3 ? -2 : r.range(0, (int)c.rows - 1);
    sm[(size_t)t] = t % 11 == 6 ? -1 : r.range(0, 1000);
    /* t % 7 == 5: C128A one entry past the width, SWA the window's last position */
    const int64_t edge = c.kind == DSK_SLOTS_C128A ? (c.width + 1) * (c.ratio > 0 ? c.ratio : 128) - 1 : c.window;
    /* C128A: lengths 0 .. width + 2 (positions in tokens, ratio a entry) */
    const int64_t top = c.kind == DSK_SLOTS_C128A ? (c.width + 3) * (c.ratio > 0 ? c.ratio : 128) : MB * P + 40;
    pos[(size_t)t] = t % 7 == 2 ? -3 : t % 7 == 4 ? r.range(0, 5) : t % 7 == 5 ? (int32_t)edge : r.range(0, (int)top);
    if (listy)
      for (int64_t k = 0; k < is; k++) {
        const int u = r.range(0, 9);
        idx[(size_t)(t * is + k)] = u == 0 ? -1 : u == 1 ? -7 : u == 2 ? (int32_t)(MB * P + r.range(0, 99))
                                                                      : r.range(0, (int)(MB * P - 1));
      }
  }
  const int32_t poison = 0x5A5A5A5A;
  std::vector<int32_t> ox((size_t)(T * os), poison), orr = ox, lx((size_t)T, poison), lr = lx;
  unsigned long long cx = 0;
  int64_t cr = 0;
  const int64_t ratio = c.ratio > 0 ? c.ratio : 128;
  /* the kernel as dsk__cuda_slot_list_build launches it (a CTA per row,
   * kSlU entries a thread, 32..256 threads) */
  int64_t nt = (width + kSlU - 1) / kSlU;
  nt = nt < 32 ? 32 : nt > 256 ? 256 : (nt + 31) / 32 * 32;
  /* a grid shorter than T for some cases: the CTAs loop over rows */
  const unsigned grid = (unsigned)(c.T > 24 ? 24 : c.T);
  emu::launch(grid, 1, (int)nt, dummy_smem, sizeof dummy_smem, [&] {
    slot_list_row_kernel((int)c.kind, T, req.data(), pos.data(), sm.data(), bt.data(), bs, c.rows, MB, P,
                         listy ? idx.data() : nullptr, is, c.K, c.window, ratio, ox.data(), os, width, lx.data(), &cx);
  });
  dsk_slot_list_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.kind = c.kind;
  d.T = T;
  d.req = req.data();
  d.pos = listy ? nullptr : pos.data();
  d.slot_mapping = sm.data();
  d.block_table.table = bt.data();
  d.block_table.stride = bs;
  d.block_table.rows = c.rows;
  d.block_table.max_blocks = MB;
  d.pbs = P;
  d.idx = listy ? idx.data() : nullptr;
  d.idx_stride = listy ? is : 0;
  d.K = listy ? c.K : 0;
  d.window = c.window;
  d.ratio = c.ratio;
  d.out = orr.data();
  d.out_stride = os;
  d.width = listy ? 0 : c.width;
  d.lens = lr.data();
  d.counters = &cr;
  const dsk_status st = dsk_slot_list_build(cpu, &d);
  EXPECT(st == DSK_STATUS_OK, "%s: cpu-ref: %s: %s", c.name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) return false;
  const int64_t f0 = emu_test::fails();
  int64_t bad = 0, blen = 0, valid = 0;
  for (size_t i = 0; i < ox.size(); i++) bad += ox[i] != orr[i];
  for (int64_t t = 0; t < T; t++) blen += lx[(size_t)t] != lr[(size_t)t];
  for (int64_t t = 0; t < T; t++)
    for (int64_t k = 0; k < width; k++) valid += orr[(size_t)(t * os + k)] >= 0;
  EXPECT(bad == 0, "%s: %lld list entries differ from the CPU builder's", c.name, (long long)bad);
  EXPECT(blen == 0, "%s: %lld lengths differ", c.name, (long long)blen);
  EXPECT(cx == (unsigned long long)cr, "%s: counter %llu, CPU builder %lld", c.name, cx, (long long)cr);
  EXPECT(valid > 0, "%s: no valid slot in the lists (the case tests nothing)", c.name);
  printf("%-40s %4lld rows, %6lld valid slots, counter %llu, %3lld threads a row CTA: %s\n", c.name, (long long)T,
         (long long)valid, cx, (long long)nt, emu_test::fails() == f0 ? "ok" : "FAIL");
  fflush(stdout);
  return emu_test::fails() == f0;
}

}  // namespace

int main() {
  const Case cases[] = {
      /* name, kind, T, page size, table rows, max blocks, K, width, window, ratio */
      {"TOPK, pbs 64, K 100", DSK_SLOTS_TOPK, 45, 64, 6, 9, 100, 0, 0, 0},
      {"TOPK, pbs 1, K 33", DSK_SLOTS_TOPK, 20, 1, 3, 200, 33, 0, 0, 0},
      {"C4A, pbs 7, K 70 (compacted)", DSK_SLOTS_C4A, 38, 7, 5, 40, 70, 0, 0, 0},
      {"C4A, pbs 64, K 512", DSK_SLOTS_C4A, 9, 64, 2, 20, 512, 0, 0, 0},
      {"SWA, pbs 64, window 128, width 130", DSK_SLOTS_SWA, 40, 64, 4, 12, 0, 130, 128, 0},
      {"SWA, pbs 7, window 20, width 20", DSK_SLOTS_SWA, 25, 7, 3, 30, 0, 20, 20, 0},
      {"C128A, pbs 64, width 37", DSK_SLOTS_C128A, 30, 64, 4, 200, 0, 37, 0, 0},
      {"C128A, ratio 4, pbs 1, width 65", DSK_SLOTS_C128A, 30, 1, 4, 300, 0, 65, 0, 4},
      /* several rounds of the CTA per row (256 threads x kSlU entries) */
      {"TOPK, pbs 64, K 2048", DSK_SLOTS_TOPK, 7, 64, 3, 40, 2048, 0, 0, 0},
      {"C4A, pbs 64, K 2047 (compacted)", DSK_SLOTS_C4A, 8, 64, 3, 40, 2047, 0, 0, 0},
      {"C128A, pbs 64, width 2500", DSK_SLOTS_C128A, 8, 64, 3, 40, 0, 2500, 0, 0},
  };
  return emu_test::run_cases("emu_slots", cases, 0x736c0000u, run_case);
}
