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
