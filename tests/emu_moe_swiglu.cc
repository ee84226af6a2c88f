/* emu_moe_swiglu.cc - the fp32 SwiGLU + 1x128 requantization of one group
 * (swiglu_group_f32, src/backend/cuda/moe_swiglu.cuh), its exact source, run
 * on the CPU through tests/emu/cuda_emu.h and checked bit for bit (codes,
 * scale bytes, non-finite count) against the cpu-ref backend's
 * dsk_swiglu_quant, which computes h in fp64. The emulated __fdividef errs
 * by up to 4 ulps (more than the device's 2), so the test proves the
 * fallbacks to fp64 cover the fp32 arithmetic's error:
 *  - elements whose h / scale is an exact e4m3 tie (gate g >= 17 makes
 *    1 + exp(-g) == 1 in fp32, so h = g * up exactly: odd g over 16 and the
 *    zero range's edge 2^-10);
 *  - the tie detector itself (e4m3_near_tie): wherever it says "not near",
 *    every value within 32 ulps either side has the same code, checked on
 *    every fp32 within 40 ulps of each e4m3 tie (the zero edge included)
 *    and on random values (bf16 data rarely puts an inexact h that close
 *    to a tie);
 *  - groups whose amax is exactly 448 * 2^k (a scale-byte boundary) and
 *    groups below the amax floor;
 *  - gates beyond +-80, ups beyond 2^100 and subnormal, NaN and Inf inputs,
 *    h underflowing fp32, the clamp at 10 and no clamp. (The kernel's
 *    |gate| <= 80 and |up| <= 2^100 bounds guard __fdividef's documented
 *    range and fp32 overflow; bf16 data here cannot show a code change
 *    without them.)
 *  - plus random N(0, 2) rows (the forward's data).
 * Not speed (the benchmarks on a GPU). */
#include <math.h>
#include <string.h>

#include <vector>

#include "emu/cuda_emu.h"

#include "dsk.h"
#include "emu/emu_test.h"
#include "format/mxfp4.h"

namespace {
__attribute__((aligned(16))) uint8_t smem[16];
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_swiglu.cuh"
}  // namespace

namespace {

using emu_test::Rng;

struct Case {
  const char *name;
  int64_t R, I;
  float limit;
  int data; /* 0 random, 1 exact ties and scale boundaries, 2 extremes and non-finite */
};

uint16_t bf(float v) { return dsk_bf16_from_f32(v); }

/* gate, up of element (r, c) of a case */
void fill(const Case &k, Rng &rn, std::vector<uint16_t> &D1, int64_t stride) {
  const int64_t R = k.R, I = k.I;
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < I; c++) {
      float g = (float)(rn.normal() * 2.0), u = (float)(rn.normal() * 2.0);
      const int64_t j = c % 128, grp = c / 128;
      const int sh1 = (int)((r * 5 + grp * 3) % 7) - 3; /* data 1, kind 1: the group's scale 2^sh1 */
      if (k.data == 1) {
        const int kind = (int)((r * 7 + grp) % 4);
        if (j == 0) { /* the group's largest element */
          static const float gs[4] = {28.f, 32.f, 56.f, 64.f}, us[4] = {16.f, 14.f, 8.f, 7.f}; /* g * u = 448 */
          const int w = (int)(r % 4);
          const int sh = (int)(rn.next() % 7) - 3;
          if (kind == 0) { g = gs[w]; u = ldexpf(us[w], sh); }          /* amax 448 * 2^sh: a boundary */
          else if (kind == 1) { g = 20.f; u = ldexpf(16.f, sh1); }      /* amax 320 * 2^sh1, scale 2^sh1 */
          else if (kind == 2) { g = 20.f; u = ldexpf(1.f, -20); }       /* amax ~2e-5: below the floor */
          else { g = 20.f; u = 16.f; }
        } else if (kind == 1 || kind == 3) {
          /* ties: g odd in 17..31 over 16 (scaled into the group's scale), the zero edge 2^-10 */
          const int go = 17 + 2 * (int)(rn.next() % 8);
          if (j % 3 == 0) { g = (float)go; u = ldexpf(1.f, -4); }      /* h = go / 16 */
          else if (j % 3 == 1) { g = (float)go; u = ldexpf(1.f, -8); } /* h = go / 256 */
          else { g = 32.f; u = ldexpf(1.f, -15); }                     /* h = 2^-10 */
        } else {
          g = (float)(rn.normal() * 1e-3);
          u = (float)(rn.normal() * 1e-3);
        }
      } else if (k.data == 2) {
        switch ((int)(rn.next() % 12)) {
          case 0: g = (float)(80.0 + rn.uni() * 40.0) * (rn.next() & 1 ? 1.f : -1.f); break; /* beyond +-80 */
          case 1: u = ldexpf(1.f + (float)rn.uni(), 100 + (int)(rn.next() % 20)); break;      /* beyond 2^100 */
          case 2: u = ldexpf(1.f, -133); break;                                               /* subnormal up */
          case 3: g = -75.f; u = ldexpf(1.f, -60); break;                                      /* h far below 2^-100 */
          case 4: if (rn.next() % 8 == 0) g = NAN; break;
          case 5: if (rn.next() % 8 == 0) u = INFINITY; break;
          case 6: if (rn.next() % 8 == 0) g = -INFINITY; break;
          case 7: g = 0.f; break;
          case 8: u = -0.f; break;
          default: break;
        }
      }
      D1[(size_t)(r * stride + c)] = bf(g);
      D1[(size_t)(r * stride + I + c)] = bf(u);
    }
}

bool run_case(dsk_ctx *cpu, const Case &k, uint64_t seed) {
  Rng rn{seed * 0x9E3779B97F4A7C15ull | 1};
  const int64_t R = k.R, I = k.I, ng = I / 128, stride = 2 * I + 8, qs = I + 12;
  std::vector<uint16_t> D1((size_t)(R * stride), 0x7FC0); /* the row gap: NaN, never read */
  fill(k, rn, D1, stride);

  /* reference: the cpu-ref op (fp64 h) */
  std::vector<uint8_t> q_ref((size_t)(R * qs), 0xAB), sf_ref((size_t)(R * ng), 0xAB);
  int64_t cnt_ref = 0;
  dsk_swiglu_quant_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = R;
  d.I = I;
  d.D1 = (const dsk_bf16 *)D1.data();
  d.D1_stride = stride;
  d.limit = k.limit;
  d.q = q_ref.data();
  d.q_stride = qs;
  d.sf = sf_ref.data();
  d.sf_stride = ng;
  d.counters = &cnt_ref;
  const dsk_status st = dsk_swiglu_quant(cpu, &d);
  EXPECT(st == DSK_STATUS_OK, "%s: cpu-ref swiglu_quant: %s", k.name, dsk_last_error());
  if (st != DSK_STATUS_OK) return false;

  /* the kernel's group function, 4 warps taking the (row, group) items in turn */
  std::vector<uint8_t> q((size_t)(R * qs), 0xAB), sf((size_t)(R * ng), 0xAB);
  unsigned long long cnt = 0;
  emu::launch(1, 1, 128, smem, sizeof smem, [&] {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int bad = 0;
    for (int64_t it = warp; it < R * ng; it += 4) {
      const int64_t r = it / ng, g = it % ng;
      const uint8_t e = swiglu_group_f32(D1.data() + r * stride, I, g, (double)k.limit, q.data() + r * qs, lane, bad);
      if (lane == 0) sf[(size_t)(r * ng + g)] = e;
    }
    bad = warp_sum_i(bad);
    if (lane == 0) atomicAdd(&cnt, (unsigned long long)bad);
  });

  int64_t qd = 0, sd = 0;
  for (int64_t r = 0; r < R; r++) {
    for (int64_t c = 0; c < qs; c++) qd += q[(size_t)(r * qs + c)] != q_ref[(size_t)(r * qs + c)];
    for (int64_t g = 0; g < ng; g++) sd += sf[(size_t)(r * ng + g)] != sf_ref[(size_t)(r * ng + g)];
  }
  EXPECT(qd == 0, "%s: %lld codes differ from the fp64 path's", k.name, (long long)qd);
  EXPECT(sd == 0, "%s: %lld scale bytes differ", k.name, (long long)sd);
  EXPECT((long long)cnt == (long long)cnt_ref, "%s: %llu non-finite h counted, the reference %lld", k.name, cnt,
         (long long)cnt_ref);
  printf("%-40s %5lld x %5lld limit %4.1f: codes %s, scales %s, non-finite %lld\n", k.name, (long long)R, (long long)I,
         (double)k.limit, qd ? "DIFFERENT" : "bit-exact", sd ? "DIFFERENT" : "bit-exact", (long long)cnt_ref);
  return qd == 0 && sd == 0 && (long long)cnt == (long long)cnt_ref;
}

/* e4m3_near_tie's promise: x not near -> the codes of x - 32 .. x + 32 ulps
 * all equal x's. Every fp32 within 40 ulps of every positive tie below 448
 * (odd multiples of half a step: the zero edge 2^-10 and the subnormal
 * ties included), then random fp32 in [2^-14, 448]. */
bool near_tie_property() {
  auto bits = [](float f) { return emu::f32_bits(f); };
  int64_t checked = 0, broken = 0, flagged = 0;
  auto check = [&](uint32_t a) {
    const float x = emu::bits_f32(a);
    if (e4m3_near_tie(x)) {
      flagged++;
      return;
    }
    checked++;
    const uint8_t q = dsk_fmt_e4m3_from_f32(x);
    for (int d = -32; d <= 32; d++)
      if (dsk_fmt_e4m3_from_f32(emu::bits_f32(a + (uint32_t)d)) != q) {
        broken++;
        if (broken <= 3) fprintf(stderr, "near_tie: %a (0x%08x) not flagged, but %+d ulps codes differently\n", x, a, d);
        break;
      }
  };
  /* ties: (r + 1/2) * step with step 2^(eb - 3), eb = max(e, -6): from 2^-10 up */
  for (int eb = -6; eb <= 8; eb++)
    for (int r = (eb == -6 ? 0 : 8); r < 16; r++) {
      const uint32_t t = bits(ldexpf((float)r + 0.5f, eb - 3));
      for (int d = -40; d <= 40; d++) check(t + (uint32_t)d);
    }
  Rng rn{0xC0FFEEu};
  for (int i = 0; i < 200000; i++) check(bits(ldexpf(1.0f + (float)rn.uni(), rn.range(-14, 8))));
  EXPECT(broken == 0, "e4m3_near_tie: %lld of %lld unflagged values have a code change within 32 ulps", (long long)broken,
         (long long)checked);
  printf("e4m3_near_tie: %lld values not flagged (codes constant within +-32 ulps), %lld flagged\n", (long long)checked,
         (long long)flagged);
  return broken == 0;
}

/* e4m3_near_tie against its definition (the tie of dsk_fmt_e4m3_from_f32's
 * step arithmetic, |remainder - half| <= 32, for every binade): every
 * positive fp32 below 2^-5 and every 5th one above it up to 448, and 40 ulps
 * around each tie. The kernel's form takes a shortcut above 2^-6 (the
 * e4m3 normals' remainder is the low 20 bits); a wrong shortcut differs here. */
bool near_tie_definition() {
  auto def = [](uint32_t a) {
    if (a >= 0x43E00000u) return false;
    if (a <= 0x3A800000u) return a > 0x3A800000u - 32u;
    const int e = (int)(a >> 23) - 127;
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const int shift = 20 + ((e < -6 ? -6 : e) - e);
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return (rem > half ? rem - half : half - rem) <= 32u;
  };
  int64_t checked = 0, differ = 0;
  auto check = [&](uint32_t a) {
    checked++;
    if (e4m3_near_tie(emu::bits_f32(a)) != def(a) || e4m3_near_tie(emu::bits_f32(a | 0x80000000u)) != def(a)) {
      if (++differ <= 3) fprintf(stderr, "near_tie: 0x%08x flagged %d, its definition %d\n", a,
                                 (int)e4m3_near_tie(emu::bits_f32(a)), (int)def(a));
    }
  };
  for (uint32_t a = 0; a < 0x3D000000u; a++) check(a);
  for (uint32_t a = 0x3D000000u; a <= 0x43E00040u; a += 5) check(a);
  for (int eb = -6; eb <= 8; eb++)
    for (int r = (eb == -6 ? 0 : 8); r < 16; r++) {
      const uint32_t t = emu::f32_bits(ldexpf((float)r + 0.5f, eb - 3));
      for (int d = -40; d <= 40; d++) check(t + (uint32_t)d);
    }
  EXPECT(differ == 0, "e4m3_near_tie: %lld of %lld values differ from the definition", (long long)differ,
         (long long)checked);
  printf("e4m3_near_tie: %lld values equal to the definition\n", (long long)checked);
  return differ == 0;
}

const Case kCases[] = {
    {"random N(0, 2), clamp 10", 96, 2048, 10.f, 0},
    {"random N(0, 2), no clamp", 64, 1024, 0.f, 0},
    {"exact ties and scale boundaries", 256, 1024, 0.f, 1},
    {"extremes and non-finite, no clamp", 64, 1024, 0.f, 2},
    {"extremes and non-finite, clamp 10", 64, 1024, 10.f, 2},
};

}  // namespace

int main() {
  const bool prop = near_tie_property();
  const bool defn = near_tie_definition();
  const int rc = emu_test::run_cases("emu_moe_swiglu", kCases, 0x5A16u, run_case);
  return prop && defn ? rc : 1;
}
