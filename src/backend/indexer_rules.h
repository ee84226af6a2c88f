/* indexer_rules.h - row rules of the lightning indexer that every backend
 * shares (spec/indices.md §9; docs/indexer.md), in int64 arithmetic. Plain
 * C, also included from CUDA (.cu), where the functions are host and device. */
#ifndef DSK_INDEXER_RULES_H
#define DSK_INDEXER_RULES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define DSK_IDX_FN static inline __host__ __device__
#else
#define DSK_IDX_FN static inline
#endif

/* Causal length of a query row: 0 for a padding row (slot_mapping < 0) and
 * for pos < 0, else (pos + 1) / ratio. */
DSK_IDX_FN int64_t dsk__indexer_causal_len(int32_t pos, int32_t slot_mapping, int64_t ratio) {
  if (slot_mapping < 0 || pos < 0) return 0;
  return ((int64_t)pos + 1) / ratio;
}

/* Total order of the top-k: maps a float to a uint32 whose unsigned order is
 * the score order; -0 -> +0's key, every NaN -> 0 (below -inf's key). */
DSK_IDX_FN uint32_t dsk__topk_key_from_bits(uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0u;   /* NaN */
  if ((u & 0x7FFFFFFFu) == 0u) u = 0u;               /* -0 -> +0 */
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

#ifdef __cplusplus
}
#endif
#endif
