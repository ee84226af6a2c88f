/* emu_test.h - what the emulated-kernel tests (tests/emu_*.cc) share: a
 * xorshift generator, the failure counter with its EXPECT, and a cpu-ref
 * context for the reference side. Include after cuda_emu.h and dsk.h. */
#ifndef DSK_EMU_TEST_H
#define DSK_EMU_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

namespace emu_test {

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

inline int64_t &fails() {
  static int64_t n = 0;
  return n;
}

/* the cpu-ref context of the reference side, or NULL (message printed) */
inline dsk_ctx *cpu_ctx() {
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = "cpu";
  dsk_ctx *cpu = nullptr;
  if (dsk_ctx_create(&cpu, &o) != DSK_STATUS_OK) {
    fprintf(stderr, "ctx: %s\n", dsk_last_error());
    return nullptr;
  }
  return cpu;
}

/* The main loop of an emulated-kernel test: run(cpu, case, seed) for every
 * case (seeds seed0, seed0 + 1, ...) on a cpu-ref context, then a summary
 * line; exit status 1 if any EXPECT failed (or no context). */
template <typename Case, size_t N, typename Run>
int run_cases(const char *test, const Case (&cases)[N], uint64_t seed0, Run run) {
  dsk_ctx *cpu = cpu_ctx();
  if (!cpu) return 1;
  int ok = 0, n = 0;
  for (const Case &c : cases) {
    ok += run(cpu, c, seed0 + (uint64_t)n) ? 1 : 0;
    n++;
  }
  dsk_ctx_destroy(cpu);
  printf("%s: %d of %d cases passed\n", test, ok, n);
  return fails() ? 1 : 0;
}

}  // namespace emu_test

#define EXPECT(cond, ...)             \
  do {                                \
    if (!(cond)) {                    \
      fprintf(stderr, "FAIL: ");      \
      fprintf(stderr, __VA_ARGS__);   \
      fprintf(stderr, "\n");          \
      emu_test::fails()++;            \
    }                                 \
  } while (0)

#endif
