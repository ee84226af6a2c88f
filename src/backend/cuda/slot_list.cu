/* slot_list.cu - the slot-list builders (spec/indices.md) on the GPU: one
 * CTA per row (device run 39, 2026-12-07, H100: a 2,048-entry TOPK list
 * 48.3 -> 8.6 us and a 512-entry C4A list 18.0 -> 6.4 us against the
 * earlier warp per row; docs/benchmarks.md), identical results to the CPU
 * builders, no host sync. */
#include "cuda_common.cuh"

namespace {

#include "slot_list_kernels.cuh"

}  // namespace

extern "C" dsk_status dsk__cuda_slot_list_build(dsk_ctx *ctx, const dsk_slot_list_desc *d) {
  if (d->T == 0) return DSK_STATUS_OK;
  DSK_CUDA_TRY("slot_list", cudaSetDevice(dsk__cuda_state(ctx)->device));
  cudaStream_t s = dsk__cuda_stream(ctx, d->stream);
  const int64_t width = (d->kind == DSK_SLOTS_TOPK || d->kind == DSK_SLOTS_C4A) ? d->K : d->width;
  const int64_t ratio = d->ratio > 0 ? d->ratio : 128;
  /* a CTA per row, kSlU entries a thread and round, up to 256 threads */
  int64_t nt = (width + kSlU - 1) / kSlU;
  nt = nt < 32 ? 32 : nt > 256 ? 256 : (nt + 31) / 32 * 32;
  const int64_t grid = d->T < 2147483647LL ? d->T : 2147483647LL;
  slot_list_row_kernel<<<(unsigned)grid, (unsigned)nt, 0, s>>>(
      (int)d->kind, d->T, d->req, d->pos, d->slot_mapping, d->block_table.table, d->block_table.stride,
      d->block_table.rows, d->block_table.max_blocks, d->pbs, d->idx, d->idx_stride, d->K, d->window, ratio, d->out,
      d->out_stride, width, d->lens, (unsigned long long *)d->counters);
  DSK_CUDA_LAUNCHED("slot_list");
  return DSK_STATUS_OK;
}
