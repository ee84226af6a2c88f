/* cpu.c - CPU count, feature detection (x86-64: cpuid + XGETBV; other
 * architectures report none) and aligned host allocation. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

int dsk__cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
static unsigned long long xgetbv0(void) {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}
static void detect(char *buf, size_t len) {
  unsigned a, b, c, d;
  buf[0] = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  int ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6;
  unsigned b7 = 0, c7 = 0, d7 = 0, a7 = 0;
  __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
  struct { const char *name; int on; } f[] = {
      {"avx", avx && ymm},
      {"avx2", ((b7 >> 5) & 1) && ymm},
      {"fma", fma && ymm},
      {"f16c", f16c && ymm},
      {"avx512f", ((b7 >> 16) & 1) && zmm},
      {"avx512bw", ((b7 >> 30) & 1) && zmm},
      {"avx512vl", ((b7 >> 31) & 1) && zmm},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    if (!f[i].on) continue;
    if (buf[0]) strncat(buf, " ", len - strlen(buf) - 1);
    strncat(buf, f[i].name, len - strlen(buf) - 1);
  }
}
#else
static void detect(char *buf, size_t len) {
  (void)len;
  buf[0] = 0;
}
#endif

const char *dsk__cpu_features(void) {
  /* Computed on every call into a thread-local buffer: cheap, and keeps the
   * process-wide state to what api-conventions.md §2 lists. */
  static _Thread_local char buf[128];
  detect(buf, sizeof buf);
  return buf;
}

void *dsk__aligned_alloc(size_t bytes) {
  void *p = NULL;
  if (bytes == 0) bytes = 1;
  if (posix_memalign(&p, 64, bytes) != 0) return NULL;
  return p;
}

void dsk__aligned_free(void *p) { free(p); }
