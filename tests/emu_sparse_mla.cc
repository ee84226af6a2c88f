/* emu_sparse_mla.cc - the CUDA sparse MLA decode kernels, their exact
 * source, run on the CPU through tests/emu/cuda_emu.h and checked against
 * an fp64 oracle on the decoded cache (spec/sparse-decode.md §3, §7) at the
 * ACCURATE bound. Runs in CI, where there is no GPU: it proves fragment
 * layouts, shared-memory indexing, masking, softmax, the V-scale fold, the
 * split/combine path and the finish of every kernel variant (16 heads with
 * 4 and 8 warps, 32 heads), not speed or races. The validated 16-head
 * kernels double as the check of the emulator itself.
 *
 * Data: random bf16 latent/rope with per-tile magnitudes 2^u (u in
 * [-2, 2]) written by dsk_kv_write (Format A: RAW scales) into a shuffled
 * page order with a padded page stride; unused cache bytes 0xFF (NaN);
 * slots with -1 holes, other negatives, out-of-range slots, duplicates and
 * poisoned valid-looking slots past `lens`; a row with no valid entry;
 * sinks with +inf / -inf heads; out and lse pre-filled with NaN including
 * a stride gap that must stay NaN. */
#include "emu/cuda_emu.h"

#include "backend/cuda/sparse_mla_layout.h"
#include "dsk.h"

namespace {
__attribute__((aligned(16))) uint8_t smem[160 * 1024];
#include "backend/cuda/sparse_mla_common.cuh"
#include "backend/cuda/sparse_mla_k16.cuh"
#include "backend/cuda/sparse_mla_k32.cuh"
#include "backend/cuda/sparse_mla_combine.cuh"
}  // namespace

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  double uni() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  int range(int lo, int hi) { return lo + (int)(next() % (uint64_t)(hi - lo + 1)); }
  double normal() {
    const double u = uni() + 1e-300, v = uni();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
  }
};

struct SegCfg {
  int pbs, width, pages;
  bool lens;
};
struct Case {
  const char *name;
  dsk_kv_format fmt;
  int T, H, nseg;
  SegCfg seg[2];
  bool sink;
  int cpb, hpc, nw; /* tactic; nw: 16-head kernel warps (4 or 8) */
};

struct SegData {
  std::vector<uint8_t> pool;
  dsk_kv_cache cache;
  std::vector<int32_t> slots, lens;
};

int64_t g_fail = 0;
#define EXPECT(cond, ...)        \
  do {                           \
    if (!(cond)) {               \
      fprintf(stderr, "FAIL: "); \
      fprintf(stderr, __VA_ARGS__); \
      fprintf(stderr, "\n");     \
      g_fail++;                  \
    }                            \
  } while (0)

/* A pool of `pages` pages in shuffled order with a padded stride; `valid`
 * gets the written slots. */
void make_pool(dsk_ctx *cpu, dsk_kv_format f, const SegCfg &c, Rng &rng, SegData &sd, std::vector<int32_t> &written) {
  const int64_t stride = (dsk_kv_canonical_page_stride(f, c.pbs) + 16 + 15) / 16 * 16;
  sd.pool.assign((size_t)(stride * c.pages), 0xFF);
  sd.cache = dsk_kv_cache{sd.pool.data(), c.pbs, stride, c.pages};
  const int64_t ld = dsk_kv_latent_dim(f);
  const int nrows = c.pbs * c.pages - c.pbs / 2; /* some slots stay unwritten (NaN) */
  std::vector<int32_t> perm(c.pages);
  for (int i = 0; i < c.pages; i++) perm[i] = i;
  for (int i = c.pages - 1; i > 0; i--) std::swap(perm[i], perm[rng.range(0, i)]);
  std::vector<uint16_t> lat((size_t)(nrows * ld)), rope((size_t)nrows * 64);
  const int tile = f == DSK_KV_FORMAT_A656 ? 128 : 64;
  written.clear();
  for (int r = 0; r < nrows; r++) {
    for (int64_t t0 = 0; t0 < ld; t0 += tile) {
      const double mag = ldexp(1.0, rng.range(-2, 2));
      for (int64_t d = t0; d < t0 + tile && d < ld; d++) lat[r * ld + d] = emu::f32_to_bf16((float)(rng.normal() * mag));
    }
    for (int d = 0; d < 64; d++) rope[(size_t)r * 64 + d] = emu::f32_to_bf16((float)rng.normal());
    written.push_back((int32_t)(perm[r / c.pbs] * c.pbs + r % c.pbs));
  }
  dsk_kv_write_desc w;
  memset(&w, 0, sizeof w);
  w.struct_size = sizeof w;
  w.format = f;
  w.N = nrows;
  w.latent = reinterpret_cast<const dsk_bf16 *>(lat.data());
  w.latent_stride = ld;
  w.rope = reinterpret_cast<const dsk_bf16 *>(rope.data());
  w.rope_stride = 64;
  w.slot_mapping = written.data();
  w.cache = sd.cache;
  w.scale_rule = DSK_SCALE_RAW;
  const dsk_status s = dsk_kv_write(cpu, &w);
  EXPECT(s == DSK_STATUS_OK, "kv_write: %s", dsk_last_error());
}

/* Slots of one segment: valid written slots, -1 holes, other negatives,
 * out-of-range slots, duplicates; row 0 of segment 0 has no valid entry;
 * with lens, valid-looking unwritten (NaN) slots past the prefix. */
void make_slots(const Case &k, int si, Rng &rng, const std::vector<int32_t> &written, SegData &sd) {
  const SegCfg &c = k.seg[si];
  const int64_t cap = (int64_t)c.pbs * c.pages;
  std::vector<char> is_written((size_t)cap, 0);
  for (int32_t s : written) is_written[s] = 1;
  std::vector<int32_t> unwritten;
  for (int64_t s = 0; s < cap; s++)
    if (!is_written[s]) unwritten.push_back((int32_t)s);
  sd.slots.assign((size_t)k.T * c.width, -1);
  sd.lens.assign((size_t)k.T, c.width);
  for (int t = 0; t < k.T; t++) {
    int L = c.width;
    if (c.lens) L = t == 1 ? c.width + 5 : rng.range(c.width / 2, c.width); /* t 1: clamped */
    sd.lens[t] = L;
    for (int j = 0; j < c.width; j++) {
      int32_t v;
      const int r = rng.range(0, 99);
      if (j >= (L < c.width ? L : c.width))
        v = unwritten.empty() ? -1 : unwritten[rng.range(0, (int)unwritten.size() - 1)]; /* never read */
      else if (si == 0 && t == 0 && k.T > 1)
        v = r < 50 ? -1 : (int32_t)(cap + r); /* a row without a valid entry in segment 0 */
      else if (r < 8)
        v = -1;
      else if (r < 10)
        v = r == 8 ? -2 : INT32_MIN;
      else if (r < 12)
        v = (int32_t)(cap + rng.range(0, 100));
      else if (r < 15 && j > 0)
        v = sd.slots[(size_t)t * c.width + rng.range(0, j - 1)]; /* duplicate (or a copied hole) */
      else
        v = written[rng.range(0, (int)written.size() - 1)];
      sd.slots[(size_t)t * c.width + j] = v;
    }
  }
}

/* The fp64 oracle of spec §3 on records decoded by dsk_kv_read. */
void oracle(dsk_ctx *cpu, const Case &k, const SegData *sd, const std::vector<uint16_t> &q, int dqk, float sm_scale,
            const std::vector<float> &sink, std::vector<double> &out, std::vector<double> &lse) {
  out.assign((size_t)k.T * k.H * 512, 0.0);
  lse.assign((size_t)k.T * k.H, -INFINITY);
  for (int t = 0; t < k.T; t++) {
    std::vector<int32_t> sl;
    std::vector<int> segof;
    for (int si = 0; si < k.nseg; si++) {
      const SegCfg &c = k.seg[si];
      int L = c.lens ? sd[si].lens[t] : c.width;
      L = L < 0 ? 0 : (L > c.width ? c.width : L);
      for (int j = 0; j < L; j++) {
        const int32_t s = sd[si].slots[(size_t)t * c.width + j];
        if (s >= 0 && (int64_t)s < (int64_t)c.pbs * c.pages) {
          sl.push_back(s);
          segof.push_back(si);
        }
      }
    }
    if (sl.empty()) continue;
    const size_t n = sl.size();
    std::vector<float> K(n * (size_t)dqk);
    for (size_t i = 0; i < n; i++) {
      dsk_kv_read_desc r;
      memset(&r, 0, sizeof r);
      r.struct_size = sizeof r;
      r.format = k.fmt;
      r.N = 1;
      r.slots = &sl[i];
      r.cache = sd[segof[i]].cache;
      r.out = &K[i * dqk];
      r.out_stride = dqk;
      EXPECT(dsk_kv_read(cpu, &r) == DSK_STATUS_OK, "kv_read: %s", dsk_last_error());
    }
    for (int h = 0; h < k.H; h++) {
      const uint16_t *qr = &q[((size_t)t * k.H + h) * dqk];
      std::vector<double> s(n);
      double m = -INFINITY;
      for (size_t i = 0; i < n; i++) {
        double a = 0;
        for (int d = 0; d < dqk; d++) a += (double)emu::bf16_to_f32(qr[d]) * K[i * dqk + d];
        s[i] = a * sm_scale;
        m = s[i] > m ? s[i] : m;
      }
      double Z = 0;
      for (size_t i = 0; i < n; i++) Z += exp(s[i] - m);
      lse[(size_t)t * k.H + h] = m + log(Z);
      const double den = Z + (k.sink ? exp((double)sink[h] - m) : 0.0);
      double *o = &out[((size_t)t * k.H + h) * 512];
      for (size_t i = 0; i < n; i++) {
        const double w = exp(s[i] - m) / den;
        for (int d = 0; d < 512; d++) o[d] += w * K[i * dqk + d];
      }
    }
  }
}

void dsk_page_divisor(int64_t pbs, uint32_t *pbs32, int *shift) {
  *pbs32 = pbs < ((int64_t)1 << 31) ? (uint32_t)pbs : (1u << 31);
  *shift = -1;
  for (int b = 0; b < 32; b++)
    if (*pbs32 == (1u << b)) *shift = b;
}

template <int F>
void run_kernels(const Case &k, Params &p, int sm_count) {
  /* splits as the launcher's stages_per_split */
  const int ch = p.nch;
  int cpb = k.cpb > ch ? ch : k.cpb;
  const int hpc = k.hpc;
  p.nhg = (int)((k.H + hpc - 1) / hpc);
  int spb = 2 * cpb;
  if (cpb == 1 && (int64_t)k.T * p.nhg * 2 * ch <= sm_count) spb = 1;
  p.spb = spb;
  p.splits = (2 * ch + spb - 1) / spb;
  std::vector<float> ws;
  if (p.splits > 1) {
    ws.assign((size_t)k.T * k.H * p.splits * 513, emu::bits_f32(0xFFFFFFFFu)); /* 0xFF workspace */
    p.part_o = ws.data();
    p.part_lse = ws.data() + (size_t)k.T * k.H * p.splits * 512;
  }
  const unsigned gx = (unsigned)(k.T * p.nhg), gy = (unsigned)p.splits;
  if (hpc == 32) {
    const int bytes = DSK_MLA32_SMEM_BYTES(F);
    EXPECT(bytes <= (int)sizeof smem, "smem");
    emu::launch(gx, gy, DSK_MLA32_THREADS, smem, bytes, [&] { sparse_mla_k32_kernel<F>(p); });
  } else if (k.nw == 8) {
    emu::launch(gx, gy, 256, smem, DSK_MLA_SMEM_BYTES_W(F, 8), [&] { sparse_mla_kernel<F, 8>(p); });
  } else {
    emu::launch(gx, gy, 128, smem, DSK_MLA_SMEM_BYTES(F), [&] { sparse_mla_kernel<F, 4>(p); });
  }
  if (p.splits > 1) {
    const bool batched = (int64_t)gx * gy <= sm_count;
    if (!batched)
      emu::launch((unsigned)(k.T * k.H), 1, 128, smem, 0, [&] { sparse_mla_combine_kernel(p); });
    else if (p.splits <= 2)
      emu::launch((unsigned)(k.T * k.H), 1, 128, smem, 0, [&] { sparse_mla_combine_batched_kernel<2>(p); });
    else if (p.splits <= 4)
      emu::launch((unsigned)(k.T * k.H), 1, 128, smem, 0, [&] { sparse_mla_combine_batched_kernel<4>(p); });
    else
      emu::launch((unsigned)(k.T * k.H), 1, 128, smem, 0, [&] { sparse_mla_combine_batched_kernel<8>(p); });
  }
}

bool run_case(dsk_ctx *cpu, const Case &k, uint64_t seed) {
  const int64_t fails0 = g_fail;
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  const int dqk = (int)dsk_kv_dim(k.fmt);
  const float sm_scale = k.fmt == DSK_KV_FORMAT_A656 ? 0.0625f : 0.0441942f;
  SegData sd[2];
  for (int si = 0; si < k.nseg; si++) {
    std::vector<int32_t> written;
    make_pool(cpu, k.fmt, k.seg[si], rng, sd[si], written);
    make_slots(k, si, rng, written, sd[si]);
  }
  std::vector<uint16_t> q((size_t)k.T * k.H * dqk);
  for (auto &x : q) x = emu::f32_to_bf16((float)rng.normal());
  std::vector<float> sink(k.H);
  for (int h = 0; h < k.H; h++) sink[h] = h == 3 ? INFINITY : h == 5 ? -INFINITY : (float)rng.normal();

  const int osh = 520; /* 8 poisoned elements between heads */
  std::vector<uint16_t> out((size_t)k.T * k.H * osh, 0x7fc1);
  std::vector<float> lse((size_t)k.T * k.H, NAN);
  unsigned long long counters[2] = {0, 0};

  Params p;
  memset(&p, 0, sizeof p);
  p.q = q.data();
  p.q_st = (int64_t)k.H * dqk;
  p.q_sh = dqk;
  p.scale_log2 = sm_scale * 1.4426950408889634f;
  p.T = k.T;
  p.H = k.H;
  p.nseg = k.nseg;
  for (int i = 0; i < k.nseg; i++) {
    Seg &s = p.seg[i];
    s.base = sd[i].pool.data();
    s.pbs = k.seg[i].pbs;
    dsk_page_divisor(s.pbs, &s.pbs32, &s.pbs_log2);
    s.page_stride = sd[i].cache.page_stride;
    s.cap = (int64_t)k.seg[i].pbs * k.seg[i].pages;
    s.slots = sd[i].slots.data();
    s.slots_st = k.seg[i].width;
    s.width = k.seg[i].width;
    s.lens = k.seg[i].lens ? sd[i].lens.data() : nullptr;
  }
  p.sink = k.sink ? sink.data() : nullptr;
  p.out = out.data();
  p.out_st = (int64_t)k.H * osh;
  p.out_sh = osh;
  p.lse = lse.data();
  p.lse_st = k.H;
  p.lse_sh = 1;
  p.nch0 = (k.seg[0].width + 63) / 64;
  p.nch = p.nch0 + (k.nseg > 1 ? (k.seg[1].width + 63) / 64 : 0);
  p.counters = counters;
  const int sm_count = 132;
  if (k.fmt == DSK_KV_FORMAT_A656)
    run_kernels<1>(k, p, sm_count);
  else
    run_kernels<2>(k, p, sm_count);

  std::vector<double> ref, ref_lse;
  oracle(cpu, k, sd, q, dqk, sm_scale, sink, ref, ref_lse);
  double num = 0, den = 0, max_abs = 0, max_ref = 0, lse_abs = 0;
  int64_t bad = 0, gaps = 0;
  for (int t = 0; t < k.T; t++)
    for (int h = 0; h < k.H; h++) {
      const uint16_t *o = &out[((size_t)t * k.H + h) * osh];
      const double *r = &ref[((size_t)t * k.H + h) * 512];
      const double rl = ref_lse[(size_t)t * k.H + h], gl = lse[(size_t)t * k.H + h];
      for (int d = 512; d < osh; d++) gaps += o[d] != 0x7fc1;
      const bool empty = rl == -INFINITY;
      if (empty || (k.sink && h == 3)) { /* exactly 0 (and -inf lse when empty) */
        for (int d = 0; d < 512; d++) bad += o[d] != 0 && o[d] != 0x8000;
        if (empty) bad += !(gl == -INFINITY);
        continue;
      }
      for (int d = 0; d < 512; d++) {
        const double x = emu::bf16_to_f32(o[d]);
        if (!std::isfinite(x)) bad++;
        num += (x - r[d]) * (x - r[d]);
        den += r[d] * r[d];
        max_abs = fmax(max_abs, fabs(x - r[d]));
        max_ref = fmax(max_ref, fabs(r[d]));
      }
      lse_abs = fmax(lse_abs, fabs((double)gl - rl));
      if (!std::isfinite(gl)) bad++;
    }
  const double rel = den > 0 ? sqrt(num / den) : 0;
  /* expected counters: out-of-range slots at k < L, clamped lens */
  unsigned long long ecnt[2] = {0, 0};
  for (int si = 0; si < k.nseg; si++)
    for (int t = 0; t < k.T; t++) {
      const SegCfg &c = k.seg[si];
      int L = c.lens ? sd[si].lens[t] : c.width;
      if (c.lens && (L < 0 || L > c.width)) ecnt[1]++;
      L = L < 0 ? 0 : (L > c.width ? c.width : L);
      for (int j = 0; j < L; j++) {
        const int32_t s = sd[si].slots[(size_t)t * c.width + j];
        ecnt[0] += s >= 0 && (int64_t)s >= (int64_t)c.pbs * c.pages;
      }
    }
  const bool ok = rel <= 4e-3 && lse_abs <= 1e-3 && max_abs <= 2e-2 * max_ref && bad == 0 && gaps == 0 &&
                  counters[0] == ecnt[0] && counters[1] == ecnt[1];
  printf("emu sparse_mla %-34s hpc %d nw %d cpb %d splits %d: rel_l2 %.2e lse_abs %.2e max_abs %.2e bad %lld gaps %lld "
         "counters %llu/%llu (want %llu/%llu) %s\n",
         k.name, k.hpc, k.hpc == 32 ? 8 : k.nw, k.cpb, p.splits, rel, lse_abs, max_abs, (long long)bad,
         (long long)gaps, counters[0], counters[1], ecnt[0], ecnt[1], ok ? "pass" : "FAIL");
  fflush(stdout);
  EXPECT(ok, "%s (hpc %d, cpb %d)", k.name, k.hpc, k.cpb);
  return g_fail == fails0;
}

}  // namespace

int main() {
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  dsk_ctx *cpu = nullptr;
  if (dsk_ctx_create(&cpu, &o) != DSK_STATUS_OK) {
    fprintf(stderr, "ctx: %s\n", dsk_last_error());
    return 1;
  }
  const dsk_kv_format A = DSK_KV_FORMAT_A656, B = DSK_KV_FORMAT_B584;
  /* name, fmt, T, H, nseg, {pbs, width, pages, lens} x2, sink, cpb, hpc, nw */
  const Case cases[] = {
      {"B swa64x70 + c128a2x45, H40", B, 3, 40, 2, {{64, 70, 3, true}, {2, 45, 40, false}}, true, 1, 32, 8},
      {"B swa64x70 + c128a2x45, H40", B, 3, 40, 2, {{64, 70, 3, true}, {2, 45, 40, false}}, true, 3, 32, 8},
      {"B swa64x70 + c128a2x45, H40", B, 3, 40, 2, {{64, 70, 3, true}, {2, 45, 40, false}}, true, 1, 16, 4},
      {"B swa64x70 + c128a2x45, H40", B, 3, 40, 2, {{64, 70, 3, true}, {2, 45, 40, false}}, true, 3, 16, 8},
      {"B one segment pbs 64 w 33, H 17", B, 2, 17, 1, {{64, 33, 2, false}, {0, 0, 0, false}}, false, 2, 32, 8},
      {"A pbs 24 w 150 lens, H 20", A, 2, 20, 1, {{24, 150, 12, true}, {0, 0, 0, false}}, false, 1, 32, 8},
      {"A pbs 24 w 150 lens, H 20", A, 2, 20, 1, {{24, 150, 12, true}, {0, 0, 0, false}}, false, 3, 32, 8},
      {"A pbs 24 w 150 lens, H 20", A, 2, 20, 1, {{24, 150, 12, true}, {0, 0, 0, false}}, false, 3, 16, 4},
      {"A pbs 64 w 64 sink, H 64", A, 1, 64, 1, {{64, 64, 2, false}, {0, 0, 0, false}}, true, 1, 32, 8},
      /* the DSv4-Flash C4A layer shape (H 64, SWA 128 + C4A 512) at T 1: 20 one-stage splits,
       * the batched combine over three batches */
      {"B DSv4-Flash swa128 + c4a512, H 64", B, 1, 64, 2, {{64, 128, 4, false}, {64, 512, 12, false}}, true, 1, 32, 8},
      {"B DSv4-Flash swa128 + c4a512, H 64", B, 1, 64, 2, {{64, 128, 4, false}, {64, 512, 12, false}}, true, 1, 16, 8},
  };
  uint64_t seed = 1;
  int passed = 0, failed = 0;
  for (const Case &k : cases) (run_case(cpu, k, seed++) ? passed : failed)++;
  dsk_ctx_destroy(cpu);
  printf("emu_sparse_mla: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
