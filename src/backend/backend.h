/* backend.h - a backend is a table of function pointers (one slot per op).
 * cpu-ref fills every slot with the reference; other backends fill the slots
 * they serve. A NULL slot means "not served": the ops layer reports it.
 * Descriptors reach a backend already validated by src/ops/. */
#ifndef DSK_BACKEND_H
#define DSK_BACKEND_H

#include "../core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsk_backend {
  const char *name;
  const char *description;
  int is_cuda;
  /* Can this backend run on `device` (-1 = the CPU, N = CUDA device N)?
   * Returns 1 or 0 and writes a one-sentence reason either way. */
  int (*probe)(int device, const dsk_env *env, char *reason, size_t reason_len);
  /* Per-context set-up and tear-down (device properties, default stream). */
  dsk_status (*init)(dsk_ctx *ctx, int device);
  void (*fini)(dsk_ctx *ctx);

  /* Memory services of the device the backend runs on. */
  dsk_status (*mem_alloc)(dsk_ctx *ctx, void **ptr, size_t bytes);
  dsk_status (*mem_free)(dsk_ctx *ctx, void *ptr);
  dsk_status (*mem_upload)(dsk_ctx *ctx, void *dst, const void *src, size_t bytes);
  dsk_status (*mem_download)(dsk_ctx *ctx, void *dst, const void *src, size_t bytes);
  dsk_status (*mem_set)(dsk_ctx *ctx, void *dst, int byte, size_t bytes);
  dsk_status (*synchronize)(dsk_ctx *ctx, void *stream);

  /* Op slots. */
  dsk_status (*kv_write)(dsk_ctx *ctx, const dsk_kv_write_desc *d);
  dsk_status (*kv_read)(dsk_ctx *ctx, const dsk_kv_read_desc *d);
  dsk_status (*slot_list_build)(dsk_ctx *ctx, const dsk_slot_list_desc *d);
  /* Workspace bytes for a validated descriptor and a resolved tactic. */
  int64_t (*sparse_mla_workspace)(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t);
  dsk_status (*sparse_mla_decode)(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, const dsk_tactic *t);
  /* Timing (src/tune/bench.c drives them): fills samples_us[0..reps). */
  dsk_status (*bench_samples)(dsk_ctx *ctx, dsk_bench_fn fn, void *user, const dsk_bench_opts *o,
                              double *samples_us);
  /* One timed copy of `bytes` from src to dst, in microseconds. */
  dsk_status (*bench_copy)(dsk_ctx *ctx, void *dst, const void *src, size_t bytes, double *us);

  /* Optional: resident CTAs per SM of the decode kernel, for the tactic
   * heuristic (NULL = 1). */
  int (*sparse_mla_ctas_per_sm)(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d);
} dsk_backend;

/* Registry (registry.c). */
int dsk__backend_count(void);
const dsk_backend *dsk__backend_at(int i);
const dsk_backend *dsk__backend_find(const char *name);

/* Backends. cuda_* exist only when the CUDA backend was built. */
extern const dsk_backend dsk__backend_cpu_ref;
#ifdef DSK_HAVE_CUDA
extern const dsk_backend dsk__backend_cuda_sm90;
extern const dsk_backend dsk__backend_cuda_sm120;
#endif

#ifdef __cplusplus
}
#endif
#endif
