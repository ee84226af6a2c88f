/* harness.c - runs every check of the backend-vs-reference harness. */
#include <string.h>

#include "harness.h"

int dsk_check_run(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c) {
  int rc = 0;
  if (!o->only || strcmp(o->only, "kv") == 0) rc |= dsk_check_kv(ctx, o, c);
  if (!o->only || strcmp(o->only, "slots") == 0) rc |= dsk_check_slots(ctx, o, c);
  if (!o->only || strcmp(o->only, "sparse_mla") == 0) rc |= dsk_check_sparse_mla(ctx, o, c);
  if (!o->only || strcmp(o->only, "mhc") == 0) rc |= dsk_check_mhc(ctx, o, c);
  if (!o->only || strcmp(o->only, "indexer") == 0) rc |= dsk_check_indexer(ctx, o, c);
  if (!o->only || strcmp(o->only, "moe") == 0) rc |= dsk_check_moe(ctx, o, c);
  return rc;
}

int dsk__bench_no_case(const char *bench, const char *have) {
  fprintf(stderr, "dsk bench %s: no case matches the filters; the bench has %s\n", bench, have);
  return DSK_BENCH_NO_CASE;
}

int dsk__bench_preamble(dsk_ctx *ctx, const dsk_ctx_info *info, const char *bench, int small_copy, int warm,
                        FILE *out, double *copy_gbps) {
  const size_t copy_bytes = info->is_cuda ? ((size_t)1 << 30) : small_copy ? ((size_t)32 << 20) : ((size_t)256 << 20);
  *copy_gbps = 0;
  if (dsk_bench_copy_bandwidth(ctx, copy_bytes, copy_gbps) != DSK_STATUS_OK) {
    fprintf(stderr, "bench: copy bandwidth: %s\n", dsk_last_error());
    return 1;
  }
  fprintf(out, "# dsk %s bench %s; backend %s; device %s; %d SMs; L2 %lld B; copy %.0f GB/s (read+write, %zu MiB); L2 %s; "
          "device events around each call, a spin kernel ahead so host enqueue time is not counted\n",
          dsk_version(), bench, info->backend, info->device_name, info->sm_count, (long long)info->l2_bytes, *copy_gbps,
          copy_bytes >> 20, warm ? "warm" : "flushed");
  return 0;
}
