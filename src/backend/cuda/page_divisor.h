/* page_divisor.h - the page-size divisor of the paged-cache kernels, plain
 * C so that host code outside the CUDA build (tests/emu) shares it. */
#ifndef DSK_PAGE_DIVISOR_H
#define DSK_PAGE_DIVISOR_H

#include <stdint.h>

/* Page-size divisor for slot / page lookups in 32 bits (slots < 2^31):
 * *pbs32 = min(pbs, 2^31), an exact divisor for every such slot, and
 * *shift = log2(*pbs32) when it is a power of two (a shift replaces the
 * division), else -1. */
static inline void dsk__page_divisor(int64_t pbs, uint32_t *pbs32, int *shift) {
  *pbs32 = pbs < ((int64_t)1 << 31) ? (uint32_t)pbs : (1u << 31);
  *shift = -1;
  for (int b = 0; b < 32; b++)
    if (*pbs32 == (1u << b)) *shift = b;
}

#endif
