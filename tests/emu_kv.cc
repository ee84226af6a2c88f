/* emu_kv.cc - the CUDA cache writer and reader of
 * src/backend/cuda/kv_cache_kernels.cuh, their exact source, run on the CPU
 * through tests/emu/cuda_emu.h and checked against the cpu-ref backend's
 * dsk_kv_write / dsk_kv_read: the cache bytes must be identical (every byte
 * of every page, stride gaps and untouched entries included, spec/kv-cache.md
 * requires bit-identical writers), and so must the dequantised rows (NaN by
 * NaN-ness) and the counters. Runs in CI, where there is no GPU.
 *
 * Formats A (656 B, inline fp32 scales, RAW and POW2 rules), B (584 B, the
 * UE8M0 page footer) and the indexer keys (132 B, RAW and POW2); page sizes
 * 64, 16, 7 and 1; page strides at the minimum and with a gap; slots
 * shuffled over the pages, padding rows (-1) and slots past the capacity
 * (counted); tiles of ordinary, tiny (scale floor), huge (saturating) and
 * zero values, one with a NaN and one with an inf (NaN-marked and counted).
 * The cache starts as 0xA5 on both sides, so a stray or missing byte shows.
 * The reader also decodes two Format B footer bytes no writer stores (0 and
 * 0xFF). */
#include "emu/cuda_emu.h"

#include "dsk.h"
#include "emu/emu_test.h"

namespace {
/* the codecs kv_cache_kernels.cuh calls (kv_cache.cu: cuda_fp8.h's satfinite
 * conversions; src/format implements the same PTX rounding) */
inline uint8_t e4m3_encode(float x) { return dsk_fmt_e4m3_from_f32(x); }
inline float e4m3_decode(uint8_t b) { return dsk_fmt_e4m3_to_f32(b); }
#include "backend/cuda/kv_cache_kernels.cuh"
}  // namespace

namespace {

using emu_test::Rng;
uint8_t dummy_smem[16]; /* the kernels use no shared memory */

struct Case {
  const char *name;
  dsk_kv_format fmt;
  dsk_scale_rule rule;
  int64_t pbs, num_pages, gap; /* page_stride = dsk_kv_min_page_stride + gap (a multiple of 16) */
  int64_t N;
};

bool run_case(dsk_ctx *cpu, const Case &c, uint64_t seed) {
  Rng r{seed | 1};
  const int64_t L = dsk_kv_latent_dim(c.fmt), dim = dsk_kv_dim(c.fmt);
  const int64_t stride = dsk_kv_min_page_stride(c.fmt, c.pbs) + c.gap, cap = c.pbs * c.num_pages;
  const int64_t N = c.N, ls = L + 8, rs = 72;
  const bool idx = c.fmt == DSK_KV_FORMAT_IDXK132;
  const int tile = c.fmt == DSK_KV_FORMAT_B584 ? 64 : 128;
  std::vector<uint16_t> lat((size_t)(N * ls)), rope((size_t)(N * rs));
  for (int64_t n = 0; n < N; n++)
    for (int64_t t = 0; t < L / tile; t++) {
      const int kind = (int)((n + 3 * t) % 6); /* ordinary, tiny, huge, zero, ordinary, ordinary */
      const double mag = kind == 1 ? 1e-7 : kind == 2 ? 3e4 : 1.0;
      for (int64_t k = 0; k < tile; k++) {
        const double v = kind == 3 ? 0.0 : r.normal() * mag;
        lat[(size_t)(n * ls + t * tile + k)] = emu::f32_to_bf16((float)v);
      }
    }
  if (N > 5) {
    lat[(size_t)(2 * ls + 5)] = 0x7FC0;     /* NaN in row 2, tile 0 */
    lat[(size_t)(5 * ls + L - 1)] = 0x7F80; /* +inf in row 5's last tile */
  }
  for (auto &v : rope) v = emu::f32_to_bf16((float)r.normal());
  /* slots: a shuffle of the capacity, then padding and out-of-range rows */
  std::vector<int32_t> perm((size_t)cap);
  for (int64_t i = 0; i < cap; i++) perm[(size_t)i] = (int32_t)i;
  for (int64_t i = cap - 1; i > 0; i--) std::swap(perm[(size_t)i], perm[(size_t)(r.next() % (uint64_t)(i + 1))]);
  EXPECT(N <= cap, "%s: more rows than slots (a slot written twice has no defined winner on a GPU)", c.name);
  if (N > cap) return false;
  std::vector<int32_t> slots((size_t)N);
  for (int64_t n = 0; n < N; n++) /* distinct slots */
    slots[(size_t)n] = n % 9 == 4 ? -1 : n % 11 == 7 ? (int32_t)(cap + n) : perm[(size_t)n];
  std::vector<uint8_t> cx((size_t)(stride * c.num_pages), 0xA5), cr = cx;
  unsigned long long cnt_x[2] = {0, 0};
  int64_t cnt_r[2] = {0, 0};

  /* the kernel, as dsk__cuda_kv_write launches it */
  const int wthreads = c.fmt == DSK_KV_FORMAT_A656 ? 128 : c.fmt == DSK_KV_FORMAT_B584 ? 224 : 32;
  emu::launch((unsigned)N, 1, wthreads, dummy_smem, sizeof dummy_smem, [&] {
    if (c.fmt == DSK_KV_FORMAT_A656)
      kv_write_kernel<1>(lat.data(), ls, rope.data(), rs, slots.data(), cx.data(), c.pbs, stride, c.num_pages, c.rule,
                         cnt_x);
    else if (c.fmt == DSK_KV_FORMAT_B584)
      kv_write_kernel<2>(lat.data(), ls, rope.data(), rs, slots.data(), cx.data(), c.pbs, stride, c.num_pages, c.rule,
                         cnt_x);
    else
      kv_write_kernel<3>(lat.data(), ls, nullptr, 0, slots.data(), cx.data(), c.pbs, stride, c.num_pages, c.rule,
                         cnt_x);
  });
  /* the CPU writer */
  dsk_kv_write_desc w;
  memset(&w, 0, sizeof w);
  w.struct_size = sizeof w;
  w.format = c.fmt;
  w.N = N;
  w.latent = (const dsk_bf16 *)lat.data();
  w.latent_stride = ls;
  w.rope = idx ? nullptr : (const dsk_bf16 *)rope.data();
  w.rope_stride = idx ? 0 : rs;
  w.slot_mapping = slots.data();
  w.cache.base = cr.data();
  w.cache.pbs = c.pbs;
  w.cache.page_stride = stride;
  w.cache.num_pages = c.num_pages;
  w.scale_rule = c.rule;
  w.counters = cnt_r;
  dsk_status st = dsk_kv_write(cpu, &w);
  EXPECT(st == DSK_STATUS_OK, "%s: cpu-ref write: %s: %s", c.name, dsk_status_name(st), dsk_last_error());
  if (st != DSK_STATUS_OK) return false;
  const int64_t f0 = emu_test::fails();
  int64_t diff = 0, first = -1;
  for (size_t i = 0; i < cx.size(); i++)
    if (cx[i] != cr[i]) {
      if (first < 0) first = (int64_t)i;
      diff++;
    }
  EXPECT(diff == 0, "%s: %lld cache bytes differ from the CPU writer's (first at byte %lld: page %lld, offset %lld)",
         c.name, (long long)diff, (long long)first, (long long)(first / stride), (long long)(first % stride));
  EXPECT(cnt_x[0] == (unsigned long long)cnt_r[0] && cnt_x[1] == (unsigned long long)cnt_r[1],
         "%s: counters %llu / %llu, CPU writer %lld / %lld", c.name, cnt_x[0], cnt_x[1], (long long)cnt_r[0],
         (long long)cnt_r[1]);

  /* the reader on the same cache (slots include -1 and out-of-range rows);
   * Format B: two footer bytes set to 0 (scale 0.0) and 0xFF (NaN), which a
   * dsk writer never stores but the reader must decode (kv-cache.md §2) */
  if (c.fmt == DSK_KV_FORMAT_B584) {
    int pokes = 0;
    for (int64_t n = 0; n < N && pokes < 2; n++) {
      const int32_t sl = slots[(size_t)n];
      if (sl < 0 || sl >= cap) continue;
      const int64_t pg = sl / c.pbs, j = sl % c.pbs;
      cr[(size_t)(pg * stride + 576 * c.pbs + 8 * j + 3 * pokes)] = pokes == 0 ? 0x00 : 0xFF;
      pokes++;
    }
  }
  const int64_t os = dim + 4;
  const float nanf_ = __uint_as_float(0x7FC00000u);
  std::vector<float> ox((size_t)(N * os), nanf_), orr = ox;
  unsigned long long rc_x = 0;
  int64_t rc_r = 0;
  emu::launch((unsigned)N, 1, 128, dummy_smem, sizeof dummy_smem, [&] {
    if (c.fmt == DSK_KV_FORMAT_A656)
      kv_read_kernel<1>(slots.data(), cr.data(), c.pbs, stride, c.num_pages, ox.data(), os, &rc_x);
    else if (c.fmt == DSK_KV_FORMAT_B584)
      kv_read_kernel<2>(slots.data(), cr.data(), c.pbs, stride, c.num_pages, ox.data(), os, &rc_x);
    else
      kv_read_kernel<3>(slots.data(), cr.data(), c.pbs, stride, c.num_pages, ox.data(), os, &rc_x);
  });
  dsk_kv_read_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.struct_size = sizeof rd;
  rd.format = c.fmt;
  rd.N = N;
  rd.slots = slots.data();
  rd.cache = w.cache;
  rd.out = orr.data();
  rd.out_stride = os;
  rd.counters = &rc_r;
  st = dsk_kv_read(cpu, &rd);
  EXPECT(st == DSK_STATUS_OK, "%s: cpu-ref read: %s: %s", c.name, dsk_status_name(st), dsk_last_error());
  int64_t rdiff = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < os; d++) {
      const float a = ox[(size_t)(n * os + d)], b = orr[(size_t)(n * os + d)];
      const bool same = (a != a && b != b) || __float_as_uint(a) == __float_as_uint(b);
      rdiff += !same;
    }
  EXPECT(rdiff == 0, "%s: %lld read values differ from the CPU reader's", c.name, (long long)rdiff);
  EXPECT(rc_x == (unsigned long long)rc_r, "%s: read counter %llu, CPU reader %lld", c.name, rc_x, (long long)rc_r);
  printf("%-44s %lld rows, %lld cache bytes, counters %llu/%llu, read %llu: %s\n", c.name, (long long)N,
         (long long)cx.size(), cnt_x[0], cnt_x[1], rc_x, emu_test::fails() == f0 ? "ok" : "FAIL");
  fflush(stdout);
  return emu_test::fails() == f0;
}

}  // namespace

int main() {
  const Case cases[] = {
      /* name, format, scale rule, pbs, pages, stride gap, rows */
      {"A656 RAW, pbs 64, 3 pages", DSK_KV_FORMAT_A656, DSK_SCALE_RAW, 64, 3, 0, 60},
      {"A656 POW2, pbs 7, stride gap 48", DSK_KV_FORMAT_A656, DSK_SCALE_POW2, 7, 7, 48, 40},
      {"B584, pbs 16, stride gap 16", DSK_KV_FORMAT_B584, DSK_SCALE_POW2, 16, 5, 16, 70},
      {"B584, pbs 1", DSK_KV_FORMAT_B584, DSK_SCALE_POW2, 1, 32, 0, 30},
      {"IDXK132 RAW, pbs 64", DSK_KV_FORMAT_IDXK132, DSK_SCALE_RAW, 64, 2, 0, 90},
      {"IDXK132 POW2, pbs 7, stride gap 32", DSK_KV_FORMAT_IDXK132, DSK_SCALE_POW2, 7, 8, 32, 50},
  };
  return emu_test::run_cases("emu_kv", cases, 0x6b760000u, run_case);
}
