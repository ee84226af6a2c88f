/* cuda_emu.h - a host emulation of the CUDA C subset the sparse MLA decode
 * kernels use, so that their exact source runs on a CPU in CI (no GPU):
 * every CUDA thread of a CTA is a fiber (ucontext) of one OS thread,
 * __syncthreads and the warp-collective instructions (shuffles, votes,
 * ldmatrix, mma.sync) are barriers over the CTA or the warp, and the
 * functions of src/backend/cuda/ptx.cuh are given the semantics of the PTX
 * ISA (fragment layouts, rounding). A cp.async copy reads its source when
 * issued and lands in shared memory only at the cp.async.wait_group of its
 * thread that retires its commit group (copies never committed or waited
 * for never land), so a wait that counts groups wrong, or a read before the
 * wait, sees stale bytes. With DSK_EMU_CP_ASYNC_EARLY=1 a copy lands at
 * its issue as well (the other end of the window a GPU may land it in), so
 * a copy issued into a buffer that another warp still reads (a missing
 * barrier before the issue) overwrites what that warp reads next. This
 * finds wrong indexing, fragment layouts, masking, numerics, commit-group
 * accounting and such buffer reuse, not other races between threads or
 * timing (compute-sanitizer on a GPU does that).
 *
 * Include this instead of ptx.cuh / cuda_fp16.h, then, inside one
 * anonymous namespace, define `smem` (emu_smem_define) and include the
 * kernel headers. Not thread safe; one CTA at a time (emu::launch). */
#ifndef DSK_CUDA_EMU_H
#define DSK_CUDA_EMU_H

#include <math.h>

#include <cmath>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "format/format.h" /* dsk_fmt_e4m3_from_f32: the cvt ... e4m3x2 rounding */

#include <functional>
#include <unordered_map>
#include <vector>

#define DSK_PTX_CUH 1 /* ptx.cuh is replaced by this file */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

namespace emu {

constexpr int kMaxThreads = 1024;
constexpr int kNamedBarriers = 16;
constexpr size_t kStack = 128 * 1024;

struct Idx {
  unsigned x, y, z;
};

/* one thread's cp.async copies in flight: the open (not yet committed)
 * copies and the committed groups, oldest first */
struct Copy {
  void *dst;
  int n;
  uint8_t bytes[16];
};
struct Async {
  std::vector<Copy> open;
  std::vector<std::vector<Copy>> groups;
};

struct State {
  int nthreads = 0, cur = 0;
  Async async[kMaxThreads];
  unsigned bx = 0, by = 0, bz = 0, gx = 1, gy = 1, gz = 1;
  ucontext_t sched;
  ucontext_t ctx[kMaxThreads];
  std::vector<char> stacks;
  bool done[kMaxThreads];
  int cta_count = 0;
  unsigned cta_gen = 0;
  int warp_count[kMaxThreads / 32];
  unsigned warp_gen[kMaxThreads / 32];
  int named_count[kNamedBarriers];
  unsigned named_gen[kNamedBarriers];
  uint64_t progress = 0;
  uint32_t xch[kMaxThreads][12];
  const void *xptr[kMaxThreads];
  std::function<void()> body;
};
inline State &st() {
  static State s;
  return s;
}
inline void yield() {
  State &s = st();
  swapcontext(&s.ctx[s.cur], &s.sched);
}
inline void barrier(int &count, unsigned &gen, int n) {
  State &s = st();
  s.progress++;
  const unsigned g = gen;
  if (++count == n) {
    count = 0;
    gen++;
    return;
  }
  while (gen == g) yield();
}
inline void cta_barrier() { barrier(st().cta_count, st().cta_gen, st().nthreads); }
/* bar.sync id, n: the first n threads to arrive release each other (the
 * kernel names which threads take part; threads that exited do not count) */
inline void named_barrier(int id, int n) {
  State &s = st();
  if (id < 0 || id >= kNamedBarriers || n <= 0 || n % 32 || n > s.nthreads) {
    fprintf(stderr, "emu: bar.sync %d, %d: unsupported barrier\n", id, n);
    exit(2);
  }
  barrier(s.named_count[id], s.named_gen[id], n);
}
inline void warp_barrier() {
  State &s = st();
  const int w = s.cur >> 5;
  const int n = s.nthreads - 32 * w < 32 ? s.nthreads - 32 * w : 32;
  barrier(s.warp_count[w], s.warp_gen[w], n);
}
inline int lane() { return st().cur & 31; }
inline int wbase() { return st().cur & ~31; }

inline void trampoline() {
  State &s = st();
  s.body();
  s.done[s.cur] = true;
  s.progress++;
}

inline bool warp_greedy() {
  static const int greedy = [] {
    const char *e = getenv("DSK_EMU_SCHEDULE");
    return e && strcmp(e, "warp") == 0 ? 1 : 0;
  }();
  return greedy != 0;
}
/* Runs body() as every thread of every CTA of grid (gx, gy, gz), CTA by
 * CTA, with the shared buffer poisoned (0xFF) before each CTA. Exits the
 * process on a deadlock (a barrier some thread never reaches). */
inline void launch3(unsigned gx, unsigned gy, unsigned gz, int threads, uint8_t *shared, size_t shared_bytes,
                    std::function<void()> body) {
  State &s = st();
  if (threads > kMaxThreads || threads % 32) {
    fprintf(stderr, "emu: %d threads per CTA not supported\n", threads);
    exit(2);
  }
  s.stacks.resize((size_t)threads * kStack);
  s.body = body;
  s.gx = gx;
  s.gy = gy;
  s.gz = gz;
  for (unsigned bz = 0; bz < gz; bz++)
  for (unsigned by = 0; by < gy; by++)
    for (unsigned bx = 0; bx < gx; bx++) {
      memset(shared, 0xFF, shared_bytes);
      s.bx = bx;
      s.by = by;
      s.bz = bz;
      s.nthreads = threads;
      s.cta_count = 0;
      for (int w = 0; w < threads / 32; w++) s.warp_count[w] = 0;
      for (int b = 0; b < kNamedBarriers; b++) s.named_count[b] = 0;
      for (int i = 0; i < threads; i++) {
        s.done[i] = false;
        s.async[i].open.clear();
        s.async[i].groups.clear();
        getcontext(&s.ctx[i]);
        s.ctx[i].uc_stack.ss_sp = s.stacks.data() + (size_t)i * kStack;
        s.ctx[i].uc_stack.ss_size = kStack;
        s.ctx[i].uc_link = &s.sched;
        makecontext(&s.ctx[i], trampoline, 0);
      }
      /* DSK_EMU_SCHEDULE=warp: each warp runs until all its threads wait at a
       * CTA-wide (or named) barrier or are done before the next warp runs,
       * the largest skew between warps (with DSK_EMU_CP_ASYNC_EARLY=1 it
       * shows a copy issued into a buffer that a later warp still reads);
       * otherwise every thread runs once per round */
      const bool greedy = warp_greedy();
      for (;;) {
        bool all = true;
        const uint64_t p0 = s.progress;
        for (int w0 = 0; w0 < threads; w0 += 32) {
          uint64_t p1;
          do {
            p1 = s.progress;
            for (int i = w0; i < w0 + 32; i++) {
              if (s.done[i]) continue;
              all = false;
              s.cur = i;
              swapcontext(&s.sched, &s.ctx[i]);
            }
          } while (greedy && s.progress != p1);
        }
        if (all) break;
        if (s.progress == p0) {
          fprintf(stderr, "emu: deadlock in CTA (%u, %u, %u): a barrier is never reached by every thread\n", bx, by,
                  bz);
          exit(3);
        }
      }
    }
}
inline void launch(unsigned gx, unsigned gy, int threads, uint8_t *shared, size_t shared_bytes,
                   std::function<void()> body) {
  launch3(gx, gy, 1, threads, shared, shared_bytes, body);
}

/* ---- number formats (bit-exact conversions) */
inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
inline uint16_t f32_to_f16(float f) { /* round to nearest even, overflow to inf */
  const uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff;
  uint32_t m = x & 0x7fffff;
  if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
  const int ee = (int)e - 127 + 15;
  if (ee >= 31) return (uint16_t)(sign | 0x7c00);
  if (ee <= 0) {
    if (ee < -10) return (uint16_t)sign;
    m |= 0x800000;
    const int shift = 14 - ee;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)ee << 10) | (m >> 13);
  const uint32_t rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return (uint16_t)(sign | r);
}
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return bits_f32(sign | 0x7f800000 | (m << 13));
  if (e == 0) return (sign ? -1.f : 1.f) * ldexpf((float)m, -24);
  return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}
inline float bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }
inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
/* The precision of the fp32 accumulator of the e4m3 MMA (mma_fp8): the
 * PTX ISA does not state it, and DeepSeek reported about 14 mantissa bits
 * for Hopper's fp8 wgmma. DSK_EMU_FP8_ACC_BITS=n (1..23) truncates every e4m3
 * MMA's result to n mantissa bits (toward zero), a pessimistic model, so a
 * kernel can be checked against it; unset = full fp32. */
inline float fp8_acc_round(float x) {
  static const int bits = [] {
    const char *v = getenv("DSK_EMU_FP8_ACC_BITS");
    const int b = v ? atoi(v) : 23;
    return b >= 1 && b <= 23 ? b : 23;
  }();
  if (bits == 23) return x;
  return bits_f32(f32_bits(x) & ~((1u << (23 - bits)) - 1u));
}
inline float e4m3_to_f32(uint8_t v) {
  const int s = v >> 7, e = (v >> 3) & 0xf, m = v & 7;
  float r;
  if (e == 15 && m == 7)
    r = NAN;
  else if (e == 0)
    r = ldexpf((float)m, -9);
  else
    r = ldexpf(1.f + m / 8.f, e - 7);
  return s ? -r : r;
}

}  // namespace emu

/* ---- the CUDA built-ins and intrinsics the kernels use */
#define threadIdx (emu::Idx{(unsigned)emu::st().cur, 0u, 0u})
#define blockIdx (emu::Idx{emu::st().bx, emu::st().by, emu::st().bz})
#define blockDim (emu::Idx{(unsigned)emu::st().nthreads, 1u, 1u})
#define gridDim (emu::Idx{emu::st().gx, emu::st().gy, emu::st().gz})

inline void __syncthreads() { emu::cta_barrier(); }
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) {
  static_assert(sizeof(T) == 4, "32-bit shuffles only");
  emu::State &s = emu::st();
  memcpy(&s.xch[s.cur][0], &v, 4);
  emu::warp_barrier();
  T r;
  memcpy(&r, &s.xch[emu::wbase() | (src & 31)][0], 4);
  emu::warp_barrier();
  return r;
}
template <typename T>
inline T __shfl_xor_sync(unsigned m, T v, int o) {
  return __shfl_sync(m, v, emu::lane() ^ o);
}
template <typename T>
inline T __shfl_up_sync(unsigned m, T v, unsigned o) { /* lanes below o keep their own value */
  const int l = emu::lane();
  const T r = __shfl_sync(m, v, l >= (int)o ? l - (int)o : l);
  return r;
}
inline unsigned __ballot_sync(unsigned, int pred) {
  emu::State &s = emu::st();
  s.xch[s.cur][0] = pred != 0;
  emu::warp_barrier();
  unsigned r = 0;
  for (int l = 0; l < 32; l++) r |= (unsigned)(s.xch[emu::wbase() + l][0] & 1) << l;
  emu::warp_barrier();
  return r;
}
/* CTAs are whole warps (emu::launch), so every lane votes */
inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0u; }
inline int __all_sync(unsigned m, int pred) { return __ballot_sync(m, pred) == 0xffffffffu; }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_barrier(); }
/* f folded over the 32 lanes' v (a warp-wide reduction) */
template <typename F>
inline unsigned emu_warp_fold(unsigned v, unsigned r, F f) {
  emu::State &s = emu::st();
  s.xch[s.cur][0] = v;
  emu::warp_barrier();
  for (int l = 0; l < 32; l++) r = f(r, s.xch[emu::wbase() + l][0]);
  emu::warp_barrier();
  return r;
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  return emu_warp_fold(v, 0u, [](unsigned a, unsigned b) { return a + b; });
}
inline unsigned __reduce_min_sync(unsigned, unsigned v) {
  return emu_warp_fold(v, 0xFFFFFFFFu, [](unsigned a, unsigned b) { return b < a ? b : a; });
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  return emu_warp_fold(v, 0u, [](unsigned a, unsigned b) { return b > a ? b : a; });
}
/* the lanes whose v equals this lane's */
inline unsigned __match_any_sync(unsigned, unsigned v) {
  emu::State &s = emu::st();
  s.xch[s.cur][0] = v;
  emu::warp_barrier();
  unsigned r = 0u;
  for (int l = 0; l < 32; l++) r |= (s.xch[emu::wbase() + l][0] == v ? 1u : 0u) << l;
  emu::warp_barrier();
  return r;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
template <typename T>
inline T __ldg(const T *p) {
  return *p;
}
template <typename T>
inline T __ldcg(const T *p) {
  return *p;
}
inline int atomicAdd(int *p, int v) {
  const int o = *p;
  *p = o + v;
  return o;
}
inline unsigned atomicMin(unsigned *p, unsigned v) {
  const unsigned o = *p;
  if (v < o) *p = v;
  return o;
}
inline unsigned atomicMax(unsigned *p, unsigned v) {
  const unsigned o = *p;
  if (v > o) *p = v;
  return o;
}
inline unsigned atomicAdd(unsigned *p, unsigned v) {
  const unsigned o = *p;
  *p = o + v;
  return o;
}
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  const unsigned long long o = *p;
  *p = o + v;
  return o;
}
inline float __uint_as_float(uint32_t u) { return emu::bits_f32(u); }
inline float __int_as_float(int32_t i) { return emu::bits_f32((uint32_t)i); }
inline float __fdiv_rn(float a, float b) { return a / b; } /* IEEE fp32 division, round to nearest even */
inline uint32_t __float_as_uint(float f) { return emu::f32_bits(f); }
/* __fdividef: the device's is within 2 ulps of a / b for |b| in [2^-126,
 * 2^126]. This one is a / b moved by a deterministic 0..4 ulps either way
 * (a hash of the operands), so a kernel's error margins are tested against
 * more than the device's worst case, expf's included. */
inline float __fdividef(float a, float b) {
  const float q = a / b;
  const uint32_t u = emu::f32_bits(q);
  if ((u & 0x7FFFFFFFu) >= 0x7F000000u || (u & 0x7FFFFFFFu) < 0x00800000u) return q; /* huge, non-finite, tiny, zero */
  uint32_t h = emu::f32_bits(a) * 2654435761u ^ emu::f32_bits(b) * 2246822519u;
  h ^= h >> 15;
  h *= 2654435761u;
  return emu::bits_f32(u + (uint32_t)((int)(h >> 28) % 5 * (((h >> 27) & 1u) ? 1 : -1)));
}
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = ((uint64_t)y << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
template <typename T>
inline T min(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
inline T max(T a, T b) {
  return a > b ? a : b;
}
struct __attribute__((aligned(16))) uint4 {
  uint32_t x, y, z, w;
};
struct __attribute__((aligned(8))) uint2 {
  uint32_t x, y;
};
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
struct __attribute__((aligned(8))) float2 {
  float x, y;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }
inline uint2 make_uint2(uint32_t x, uint32_t y) { return uint2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
struct __half {
  uint16_t x;
};
struct __half2 {
  uint16_t x, y;
};
inline __half2 __floats2half2_rn(float lo, float hi) { return __half2{emu::f32_to_f16(lo), emu::f32_to_f16(hi)}; }

/* ---- ptx.cuh, emulated */
namespace dsk_ptx {

inline bool cp_async_early() {
  static const int early = [] {
    const char *e = getenv("DSK_EMU_CP_ASYNC_EARLY");
    return e && e[0] == '1' ? 1 : 0;
  }();
  return early != 0;
}
inline void cp_async_n(void *dst, const void *src, bool valid, int n) {
  emu::Copy c;
  c.dst = dst;
  c.n = n;
  if (valid)
    memcpy(c.bytes, src, (size_t)n);
  else
    memset(c.bytes, 0, (size_t)n);
  if (cp_async_early()) memcpy(dst, c.bytes, (size_t)n); /* and again at its wait */
  emu::st().async[emu::st().cur].open.push_back(c);
}
inline void cp_async16(void *dst, const void *src, bool valid) { cp_async_n(dst, src, valid, 16); }
inline void cp_async8(void *dst, const void *src, bool valid) { cp_async_n(dst, src, valid, 8); }
inline void cp_async4(void *dst, const void *src, bool valid) { cp_async_n(dst, src, valid, 4); }
inline void cp_async_commit() {
  emu::Async &a = emu::st().async[emu::st().cur];
  a.groups.push_back(a.open);
  a.open.clear();
}
/* cp.async.wait_group N: the thread's groups but the N newest land */
template <int N>
inline void cp_async_wait() {
  emu::Async &a = emu::st().async[emu::st().cur];
  size_t done = 0;
  for (; a.groups.size() - done > (size_t)N; done++)
    for (const emu::Copy &c : a.groups[done]) memcpy(c.dst, c.bytes, (size_t)c.n);
  a.groups.erase(a.groups.begin(), a.groups.begin() + (ptrdiff_t)done);
}

/* ldmatrix .x4: lane l gives the row address of row l & 7 of matrix l >> 3 */
inline void ldmatrix_x4_impl(uint32_t (&r)[4], const void *p, bool trans) {
  emu::State &s = emu::st();
  s.xptr[s.cur] = p;
  emu::warp_barrier();
  const int l = emu::lane(), b = emu::wbase();
  for (int m = 0; m < 4; m++) {
    if (!trans) {
      memcpy(&r[m], (const uint8_t *)s.xptr[b + 8 * m + l / 4] + 4 * (l % 4), 4);
    } else {
      uint16_t lo, hi;
      memcpy(&lo, (const uint8_t *)s.xptr[b + 8 * m + 2 * (l % 4)] + 2 * (l / 4), 2);
      memcpy(&hi, (const uint8_t *)s.xptr[b + 8 * m + 2 * (l % 4) + 1] + 2 * (l / 4), 2);
      r[m] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
  }
  emu::warp_barrier();
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void *p) { ldmatrix_x4_impl(r, p, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void *p) { ldmatrix_x4_impl(r, p, true); }

inline uint32_t e4m3x2_to_f16x2(uint32_t v) {
  return (uint32_t)emu::f32_to_f16(emu::e4m3_to_f32(v & 0xff)) |
         ((uint32_t)emu::f32_to_f16(emu::e4m3_to_f32((v >> 8) & 0xff)) << 16);
}
inline uint32_t e4m3x2_to_f16x2_u16(uint32_t v) { return e4m3x2_to_f16x2(v); }
inline void e4m3x4_to_f16x2x2(uint32_t v, uint32_t &lo, uint32_t &hi) {
  lo = e4m3x2_to_f16x2(v & 0xffff);
  hi = e4m3x2_to_f16x2(v >> 16);
}

/* One warp-wide mma.sync with K products per output, fp32 accumulate: every
 * lane publishes its fragments (a0..a3, b0, b1), then computes its own four
 * outputs D[r][n] = C[r][n] + sum_k A(x, r, k) * B(x, k, n) in fp64 from all
 * of them (x = the warp's published fragments, x[lane][0..5]), rounded to
 * fp32 and passed through `round`. */
template <int K, class FA, class FB, class FR>
inline void mma_warp(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, FA A, FB B, FR round) {
  emu::State &s = emu::st();
  uint32_t *x = s.xch[s.cur];
  for (int i = 0; i < 4; i++) x[i] = a[i];
  x[4] = b0;
  x[5] = b1;
  emu::warp_barrier();
  const int l = emu::lane(), g = l >> 2, q = l & 3;
  const uint32_t(*w)[12] = s.xch + emu::wbase();
  float out[4];
  for (int e = 0; e < 4; e++) {
    const int r = g + 8 * (e >> 1), n = 2 * q + (e & 1);
    double acc = c[e];
    for (int k = 0; k < K; k++) acc += (double)A(w, r, k) * (double)B(w, k, n);
    out[e] = round((float)acc);
  }
  emu::warp_barrier();
  for (int e = 0; e < 4; e++) c[e] = out[e];
}

/* mma.sync m16n8k16 row.col (f16 or bf16 operands) */
inline void mma_impl(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf) {
  auto half = [bf](uint32_t v, int k) -> float {
    const uint16_t h = (uint16_t)(k & 1 ? v >> 16 : v & 0xffff);
    return bf ? emu::bf16_to_f32(h) : emu::f16_to_f32(h);
  };
  auto A = [&](const uint32_t (*w)[12], int r, int k) -> float {
    return half(w[4 * (r & 7) + (k & 7) / 2][(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k);
  };
  auto B = [&](const uint32_t (*w)[12], int k, int n) -> float { return half(w[4 * n + (k & 7) / 2][4 + (k >= 8)], k); };
  mma_warp<16>(c, a, b0, b1, A, B, [](float v) { return v; });
}
inline void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { mma_impl(c, a, b0, b1, false); }

/* mma.sync m16n8k32 e4m3 row.col, fp32 accumulate: the byte views of the
 * m16n8k16 fragments (A row r, k: lane 4 (r & 7) + (k & 15) / 4, register
 * (r >= 8) + 2 (k >= 16), byte k & 3; B k, n: lane 4 n + (k & 15) / 4,
 * register b0 / b1 by k >= 16, byte k & 3). Products are exact in fp64;
 * the sum is rounded once to fp32 (the hardware's internal accumulation
 * order and precision may differ by fp32 rounding), then by fp8_acc_round. */
inline void mma_fp8(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  auto byte = [](uint32_t v, int k) -> float { return emu::e4m3_to_f32((uint8_t)(v >> (8 * (k & 3)))); };
  auto A = [&](const uint32_t (*w)[12], int r, int k) -> float {
    return byte(w[4 * (r & 7) + (k & 15) / 4][(r >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0)], k);
  };
  auto B = [&](const uint32_t (*w)[12], int k, int n) -> float { return byte(w[4 * n + (k & 15) / 4][4 + (k >= 16)], k); };
  mma_warp<32>(c, a, b0, b1, A, B, emu::fp8_acc_round);
}
/* f16x2 -> e4m3x2 (round to nearest even, satfinite), in the low 16 bits */
inline uint32_t f16x2_to_e4m3x2(uint32_t h) {
  return (uint32_t)dsk_fmt_e4m3_from_f32(emu::f16_to_f32((uint16_t)(h & 0xffff))) |
         ((uint32_t)dsk_fmt_e4m3_from_f32(emu::f16_to_f32((uint16_t)(h >> 16))) << 8);
}
/* two fp32 -> e4m3x2 (round to nearest even, satfinite), in the low 16 bits */
inline uint32_t f32x2_to_e4m3x2(float lo, float hi) {
  return (uint32_t)dsk_fmt_e4m3_from_f32(lo) | ((uint32_t)dsk_fmt_e4m3_from_f32(hi) << 8);
}
/* f16x2 a - b: the difference is exact in fp64, then rounded to f16 through
 * fp32 (exact whenever the f16 result is: the kernels subtract a value's
 * own e4m3 rounding) */
inline uint32_t hsub2_u32(uint32_t a, uint32_t b) {
  auto h = [](uint32_t w, int i) -> double { return emu::f16_to_f32((uint16_t)(i ? w >> 16 : w & 0xffff)); };
  return (uint32_t)emu::f32_to_f16((float)(h(a, 0) - h(b, 0))) |
         ((uint32_t)emu::f32_to_f16((float)(h(a, 1) - h(b, 1))) << 16);
}
inline void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { mma_impl(c, a, b0, b1, true); }
/* mbarriers with transaction counts (the state lives in a side table keyed
 * by the barrier's address, reset by mbar_init): a phase completes when its
 * arrivals are all in and its expected bytes have all landed; bulk copies
 * land at once (memcpy) and count their bytes (more bytes than a phase
 * expects is reported as an error). try_wait.parity(p) succeeds
 * once the phase of parity p has completed; a wait that can never succeed
 * ends in the launcher's deadlock report. */
struct EmuMbar {
  int expected = 1, pending = 1;
  int64_t tx = 0;
  unsigned phase = 0;
};
inline std::unordered_map<const void *, EmuMbar> &emu_mbars() {
  static std::unordered_map<const void *, EmuMbar> m;
  return m;
}
inline void emu_mbar_check(EmuMbar &b) {
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1u;
    b.pending = b.expected;
    emu::st().progress++;
  }
}
inline void mbar_init(uint64_t *bar, uint32_t count) {
  EmuMbar b;
  b.expected = b.pending = (int)count;
  emu_mbars()[bar] = b;
}
inline EmuMbar &emu_mbar(uint64_t *bar) {
  auto it = emu_mbars().find(bar);
  if (it == emu_mbars().end()) {
    fprintf(stderr, "emu: mbarrier %p used before mbar_init\n", (void *)bar);
    exit(4);
  }
  return it->second;
}
inline void mbar_arrive_tx(uint64_t *bar, uint32_t bytes) {
  EmuMbar &b = emu_mbar(bar);
  b.tx += bytes;
  b.pending--;
  emu_mbar_check(b);
}
inline void mbar_arrive(uint64_t *bar) {
  EmuMbar &b = emu_mbar(bar);
  b.pending--;
  emu_mbar_check(b);
}
inline void mbar_wait(uint64_t *bar, uint32_t parity) {
  while ((emu_mbar(bar).phase & 1u) == (parity & 1u)) emu::yield();
}
inline void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
  if (((uintptr_t)dst | (uintptr_t)src | bytes) & 15u) {
    fprintf(stderr, "emu: cp.async.bulk of %u bytes at %p <- %p is not 16-byte aligned\n", bytes, dst, src);
    exit(4);
  }
  memcpy(dst, src, bytes);
  EmuMbar &b = emu_mbar(bar);
  b.tx -= bytes;
  if (b.tx < 0) { /* the kernels announce their bytes before copying: more landed than the phase expects */
    fprintf(stderr, "emu: a bulk copy of %u bytes exceeds the bytes its mbarrier phase expects\n", bytes);
    exit(4);
  }
  emu_mbar_check(b);
}
inline void fence_mbarrier_init() {}
inline void fence_proxy_async() {}
/* max.NaN.f32 x, 0: NaN propagates, -0 becomes +0 */
inline float ix_relu(float x) { return x != x ? x : (x > 0.f ? x : 0.f); }

/* cvt.rn.f16x2.f32: each value rounded to nearest even (subnormals kept) */
inline uint32_t f32x2_to_f16x2(float lo, float hi) {
  return (uint32_t)emu::f32_to_f16(lo) | ((uint32_t)emu::f32_to_f16(hi) << 16);
}
/* mul.rn.f16x2: the fp32 product of two f16 values is exact, so one rounding to f16 is the RNE product */
inline uint32_t hmul2_u32(uint32_t a, uint32_t b) {
  const uint16_t lo = emu::f32_to_f16(emu::f16_to_f32((uint16_t)a) * emu::f16_to_f32((uint16_t)b));
  const uint16_t hi = emu::f32_to_f16(emu::f16_to_f32((uint16_t)(a >> 16)) * emu::f16_to_f32((uint16_t)(b >> 16)));
  return (uint32_t)lo | ((uint32_t)hi << 16);
}

inline uint32_t pack_bf16(float lo, float hi) {
  return (uint32_t)emu::f32_to_bf16(lo) | ((uint32_t)emu::f32_to_bf16(hi) << 16);
}
inline uint16_t f32_to_bf16_rne(float x) { return emu::f32_to_bf16(x); }
inline void prefetch_l2(const void *) {}
inline void bulk_prefetch_l2(const void *, uint32_t) {}
inline void pdl_launch_dependents() {}
inline void pdl_wait() {}
inline float fast_exp2(float x) { return exp2f(x); }
inline float fast_rcp(float x) { return 1.f / x; }

}  // namespace dsk_ptx

#endif
