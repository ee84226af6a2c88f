/* emu_indexer.cc - the lightning indexer's CUDA scores kernel
 * (src/backend/cuda/indexer_logits_kernel.cuh), its exact source, run on
 * the CPU through tests/emu/cuda_emu.h (fibers for threads; mbarriers with
 * transaction counts and bulk copies that land at once) and checked against
 * the cpu-ref backend's dsk_indexer_logits at the spec's bound (indices.md
 * §9: 1e-5 of the row maximum; every other entry exactly -inf). Runs in CI,
 * where there is no GPU: it proves both staging paths (TILE, pages of a
 * multiple of 16 entries, and the per-lane run search), the head passes
 * (64 + 16 heads), chunks, missing pages and rows, truncated and padding
 * rows, and the counters. Not races or speed.
 *
 * Data: random e4m3 q and keys (no NaN), positive q and key scales, signed
 * weights; unused key-cache bytes 0xFF (NaN, which must not leak); out
 * pre-filled with NaN including a stride gap that must stay NaN. */
#include "emu/cuda_emu.h"

#include "backend/cuda/page_divisor.h"
#include "backend/indexer_rules.h"
#include "dsk.h"
#include "emu/emu_test.h"

#define DSK_SM120_SMEM_LIMIT 101376

namespace {
__attribute__((aligned(16))) uint8_t smem[100 * 1024];
#include "backend/cuda/indexer_logits_kernel.cuh"
#include "backend/cuda/indexer_logits_q.cuh"
}  // namespace

namespace {

using emu_test::Rng;


uint8_t e4m3_byte(Rng &r) {
  uint8_t v;
  do v = (uint8_t)r.next();
  while ((v & 0x7F) == 0x7F || ((v >> 3) & 15) > 11 || ((v >> 3) & 15) < 3); /* finite, |v| in [2^-4, 2^5) */
  return v;
}

struct Case {
  const char *name;
  int64_t T, H, ratio, pbs, W, chunk;
  int holes; /* block-table entries set to -1 */
  bool pad_row, bad_req, truncate;
  bool reg_q; /* passes of > 32 heads by indexer_logits_kernel<8> (the DSK_INDEXER_QSMEM=0 form) */
};

bool run_case(dsk_ctx *cpu, const Case &c, uint64_t seed) {
  Rng r{seed | 1};
  const int64_t T = c.T, H = c.H, pbs = c.pbs, W = c.W, R = 3;
  const int64_t page_stride = (pbs * 132 + 15) / 16 * 16 + 16;
  /* per request: causal entries (the longest row of it) */
  std::vector<int32_t> req((size_t)T), pos((size_t)T), sm((size_t)T);
  int64_t max_entries = 0;
  for (int64_t t = 0; t < T; t++) {
    req[(size_t)t] = (int32_t)(t % R);
    const int64_t ent = c.truncate && t == 0 ? W + 37 : r.range(1, (int)W);
    pos[(size_t)t] = (int32_t)(ent * c.ratio - 1 + (c.ratio > 1 ? r.range(0, (int)c.ratio - 1) : 0));
    sm[(size_t)t] = (int32_t)t;
    const int64_t L = dsk__indexer_causal_len(pos[(size_t)t], sm[(size_t)t], c.ratio);
    if (L > max_entries) max_entries = L;
  }
  if (c.pad_row) sm[1] = -1;
  if (c.bad_req) req[(size_t)(T - 1)] = 7; /* >= rows: an all -1 block-table row */
  const int64_t max_blocks = (max_entries + pbs - 1) / pbs + 1;
  const int64_t num_pages = R * max_blocks + 3;
  std::vector<int32_t> bt((size_t)(R * max_blocks));
  std::vector<int64_t> perm((size_t)num_pages);
  for (int64_t i = 0; i < num_pages; i++) perm[(size_t)i] = i;
  for (int64_t i = num_pages - 1; i > 0; i--) std::swap(perm[(size_t)i], perm[(size_t)(r.next() % (uint64_t)(i + 1))]);
  for (int64_t i = 0; i < R * max_blocks; i++) bt[(size_t)i] = (int32_t)perm[(size_t)i];
  for (int h = 0; h < c.holes; h++) bt[(size_t)(r.next() % (uint64_t)(R * max_blocks))] = -1;
  std::vector<uint8_t> cache((size_t)(num_pages * page_stride), 0xFF);
  for (int64_t q = 0; q < R; q++)
    for (int64_t b = 0; b < max_blocks; b++) {
      const int32_t pg = bt[(size_t)(q * max_blocks + b)];
      if (pg < 0) continue;
      uint8_t *page = cache.data() + (int64_t)pg * page_stride;
      for (int64_t e = 0; e < pbs; e++) {
        for (int d = 0; d < 128; d++) page[e * 128 + d] = e4m3_byte(r);
        const float s = std::ldexp(1.f + (float)r.uni(), r.range(-8, -4));
        memcpy(page + 128 * pbs + 4 * e, &s, 4);
      }
    }
  const int64_t qsh = 128 + 16 * (H % 2), qst = H * qsh + 32;
  std::vector<uint8_t> q((size_t)(T * qst), 0x7F); /* gaps: NaN */
  std::vector<float> qs((size_t)(T * H)), w((size_t)(T * H));
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < H; h++) {
      for (int d = 0; d < 128; d++) q[(size_t)(t * qst + h * qsh + d)] = e4m3_byte(r);
      qs[(size_t)(t * H + h)] = std::ldexp(1.f + (float)r.uni(), r.range(-6, -2));
      w[(size_t)(t * H + h)] = ((float)r.uni() - 0.5f) * 0.25f;
    }
  const int64_t ost = W + 5;
  std::vector<float> ox((size_t)(T * ost), NAN), orf((size_t)(T * ost), NAN);
  int64_t cnt_x[2] = {0, 0}, cnt_r[2] = {0, 0};

  dsk_indexer_logits_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = T;
  d.n_heads = H;
  d.q = q.data();
  d.q_stride_t = qst;
  d.q_stride_h = qsh;
  d.q_scale = qs.data();
  d.q_scale_stride_t = H;
  d.weights = w.data();
  d.weights_stride_t = H;
  d.req = req.data();
  d.pos = pos.data();
  d.slot_mapping = sm.data();
  d.block_table.table = bt.data();
  d.block_table.stride = max_blocks;
  d.block_table.rows = R;
  d.block_table.max_blocks = max_blocks;
  d.ratio = c.ratio;
  d.cache.base = cache.data();
  d.cache.pbs = pbs;
  d.cache.page_stride = page_stride;
  d.cache.num_pages = num_pages;
  d.out_stride_t = ost;
  d.ctx_width = W;

  /* the kernel, as dsk__cuda_indexer_logits launches it (the chunk pinned) */
  d.out = ox.data();
  d.counters = cnt_x;
  LogitsParams p = logits_params(&d, -1);
  const bool tile16 = p.pbs % 16 == 0, tile32 = p.pbs % kQKeys == 0;
  const unsigned gy = (unsigned)T;
  for (int h0 = 0; h0 < p.H; h0 += kPassHeads) {
    p.h0 = h0;
    p.nh = p.H - h0 < kPassHeads ? p.H - h0 : kPassHeads;
    p.first = h0 == 0;
    p.last = h0 + kPassHeads >= p.H;
    /* passes of more than 32 heads: the q kernel (the launcher's choice
     * with DSK_INDEXER_QSMEM=1), or with c.reg_q v4's register form (its
     * choice with 0, the default); the q kernel's chunk is the case's
     * rounded up to whole 256-candidate stages */
    const bool qk = p.nh > 32 && !c.reg_q;
    p.chunk = qk ? (c.chunk + kQStage - 1) / kQStage * kQStage : c.chunk;
    const unsigned gx = (unsigned)((W + p.chunk - 1) / p.chunk);
    const size_t bytes = (size_t)(qk ? lq_smem_bytes() : lg_smem_bytes());
    if (qk) {
      if (tile32) emu::launch(gx, gy, kLThreads, smem, bytes, [&] { indexer_logits_q_kernel<true>(p); });
      else emu::launch(gx, gy, kLThreads, smem, bytes, [&] { indexer_logits_q_kernel<false>(p); });
    } else if (p.nh <= 32) {
      if (tile16) emu::launch(gx, gy, kLThreads, smem, bytes, [&] { indexer_logits_kernel<4, true>(p); });
      else emu::launch(gx, gy, kLThreads, smem, bytes, [&] { indexer_logits_kernel<4, false>(p); });
    } else {
      if (tile16) emu::launch(gx, gy, kLThreads, smem, bytes, [&] { indexer_logits_kernel<8, true>(p); });
      else emu::launch(gx, gy, kLThreads, smem, bytes, [&] { indexer_logits_kernel<8, false>(p); });
    }
  }

  /* the reference */
  d.out = orf.data();
  d.counters = cnt_r;
  const dsk_status st = dsk_indexer_logits(cpu, &d);
  EXPECT(st == DSK_STATUS_OK, "%s: cpu-ref: %s: %s", c.name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) return false;

  const int fails0 = emu_test::fails();
  double worst = 0;
  int64_t scored = 0, inf_bad = 0, gap_bad = 0;
  for (int64_t t = 0; t < T; t++) {
    double mx = 0;
    for (int64_t s = 0; s < W; s++) {
      const float y = orf[(size_t)(t * ost + s)];
      if (std::isfinite(y) && std::fabs(y) > mx) mx = std::fabs(y);
    }
    for (int64_t s = 0; s < ost; s++) {
      const float x = ox[(size_t)(t * ost + s)], y = orf[(size_t)(t * ost + s)];
      if (s >= W) {
        gap_bad += !(x != x); /* the stride gap stays NaN */
        continue;
      }
      if (std::isinf(y) && y < 0) {
        inf_bad += !(std::isinf(x) && x < 0);
        continue;
      }
      scored++;
      const double err = std::fabs((double)x - (double)y);
      const double rel = mx > 0 ? err / (1e-5 * mx) : (err > 0 ? 1e30 : 0);
      if (!(rel <= worst)) worst = rel != rel ? 1e30 : (rel > worst ? rel : worst);
    }
  }
  EXPECT(scored > 0, "%s: no scored entry", c.name);
  EXPECT(worst <= 1.0, "%s: an entry is %.2f x the bound (1e-5 of the row maximum) from the reference", c.name, worst);
  EXPECT(inf_bad == 0, "%s: %lld entries that must be -inf are not", c.name, (long long)inf_bad);
  EXPECT(gap_bad == 0, "%s: %lld stride-gap entries written", c.name, (long long)gap_bad);
  EXPECT(cnt_x[0] == cnt_r[0] && cnt_x[1] == cnt_r[1], "%s: counters %lld %lld, reference %lld %lld", c.name,
         (long long)cnt_x[0], (long long)cnt_x[1], (long long)cnt_r[0], (long long)cnt_r[1]);
  printf("%-46s %6lld scored, worst %.3f of bound, counters %lld %lld: %s\n", c.name, (long long)scored, worst,
         (long long)cnt_x[0], (long long)cnt_x[1], emu_test::fails() == fails0 ? "ok" : "FAIL");
  fflush(stdout);
  return emu_test::fails() == fails0;
}

}  // namespace

int main() {
  const Case cases[] = {
      /* name, T, H, ratio, pbs, W, chunk, holes, pad row, bad req, truncate, reg_q */
      {"TILE pbs 64, 64 heads, holes, padding row", 4, 64, 1, 64, 700, 256, 2, true, true, false, false},
      {"TILE pbs 16, 32 heads, ratio 4, truncated", 3, 32, 4, 16, 300, 128, 3, false, false, true, false},
      {"TILE pbs 48, 80 heads (two passes)", 3, 80, 1, 48, 400, 384, 1, false, false, false, false},
      {"runs pbs 12, 5 heads, holes, bad req", 4, 5, 1, 12, 350, 256, 4, true, true, true, false},
      {"runs pbs 1, 64 heads", 2, 64, 1, 1, 200, 128, 5, false, false, false, false},
      /* the q kernel's own edges: pages of 16 (its per-lane runs), 33 heads,
       * a last tile of <= 16 candidates, several chunks and stages */
      {"q: pbs 16 (runs), 33 heads, ratio 4, truncated", 3, 33, 4, 16, 530, 512, 3, true, false, true, false},
      {"q: TILE pbs 32, 64 heads, W 1041, 3 chunks", 3, 64, 1, 32, 1041, 512, 2, false, true, false, false},
      {"q: TILE pbs 64, 128 heads (two q passes)", 2, 128, 1, 64, 600, 256, 1, true, false, false, false},
      {"reg: TILE pbs 64, 64 heads (QSMEM=0 form)", 3, 64, 1, 64, 500, 256, 2, true, true, false, true},
  };
  return emu_test::run_cases("emu_indexer", cases, 0x1dc0000u, run_case);
}
