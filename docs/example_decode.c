/* example_decode.c - one DeepSeek-V4 decode step with dsk, end to end:
 *
 *   1. create a context (device from argv[1], default "cpu");
 *   2. write two tokens into a Format B (584 B/token) KV cache (dsk_kv_write);
 *   3. build their sliding-window slot lists (dsk_slot_list_build, SWA);
 *   4. plan and run sparse MLA decode (dsk_sparse_mla_decode_plan/_decode);
 *   5. print the first output values and check them: token 0 sees only
 *      itself, so its output must equal its own dequantised value vector
 *      (read back with dsk_kv_read) up to bf16 rounding.
 *
 * Every buffer the ops touch comes from dsk_mem_alloc and is filled with
 * dsk_mem_upload, so the same program runs on "cuda:0". It returns 0 only if
 * every call succeeds and the result is finite and correct. Built and run as
 * the test `test_doc_example` (docs/api.md explains each step). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dsk.h"

#define CHECK(call)                                                                       \
  do {                                                                                    \
    dsk_status st_ = (call);                                                              \
    if (st_ != DSK_STATUS_OK) {                                                           \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,            \
              dsk_status_name(st_), dsk_last_error());                                    \
      goto done;                                                                          \
    }                                                                                     \
  } while (0)

enum {
  T = 2,       /* query rows = the two new tokens */
  H = 4,       /* query heads */
  PBS = 64,    /* cache entries per page */
  WINDOW = 128 /* DSv4 sliding window, also the slot-list width */
};
#define LATENT 448 /* quantised dims of a Format B entry (dsk_kv_latent_dim) */
#define ROPE 64
#define DQK 512 /* query/key dims of Format B (dsk_kv_dim) */
#define DV 512  /* output dims */

/* Device buffers, freed at the end whatever happened. */
static void *dev[16];
static int ndev;
static dsk_status dev_alloc(dsk_ctx *ctx, void **p, size_t bytes) {
  dsk_status st = dsk_mem_alloc(ctx, p, bytes);
  if (st == DSK_STATUS_OK) dev[ndev++] = *p;
  return st;
}

/* A deterministic pseudo-random value in [-1, 1). */
static float wave(int i, int salt) { return (float)sin(0.37 * i + 1.7 * salt); }

int main(int argc, char **argv) {
  int rc = 1;
  dsk_ctx *ctx = NULL;
  static dsk_bf16 latent[T][LATENT], rope[T][ROPE], q[T][H][DQK], out[T][H][DV];
  static float lse[T][H], v0[DQK];
  int32_t slots[T][WINDOW], lens[T];

  /* 1. Context. opts.device: "cpu", "cuda:N" or "auto". */
  dsk_ctx_opts opts;
  dsk_ctx_opts_init(&opts);
  opts.device = argc > 1 ? argv[1] : "cpu";
  CHECK(dsk_ctx_create(&ctx, &opts));
  dsk_ctx_info info;
  info.struct_size = sizeof info;
  CHECK(dsk_ctx_get_info(ctx, &info));
  printf("backend %s on %s\n", info.backend, info.device_name);

  /* 2. A one-page Format B cache. The page stride is a parameter; the
   *    canonical one pads each page to a multiple of 576 bytes. */
  dsk_kv_cache cache;
  cache.pbs = PBS;
  cache.page_stride = dsk_kv_canonical_page_stride(DSK_KV_FORMAT_B584, PBS);
  cache.num_pages = 1;
  CHECK(dev_alloc(ctx, &cache.base, (size_t)(cache.page_stride * cache.num_pages)));
  CHECK(dsk_mem_set(ctx, cache.base, 0, (size_t)(cache.page_stride * cache.num_pages)));

  for (int t = 0; t < T; t++) {
    for (int d = 0; d < LATENT; d++) latent[t][d] = dsk_bf16_from_f32(wave(d, t));
    for (int d = 0; d < ROPE; d++) rope[t][d] = dsk_bf16_from_f32(0.5f * wave(d, 10 + t));
  }
  /* The request's block table has one page (page 0), so token n of the
   * request lives in slot 0 * PBS + n. */
  const int32_t slot_mapping[T] = {0, 1};
  void *d_latent, *d_rope, *d_slot_mapping;
  CHECK(dev_alloc(ctx, &d_latent, sizeof latent));
  CHECK(dev_alloc(ctx, &d_rope, sizeof rope));
  CHECK(dev_alloc(ctx, &d_slot_mapping, sizeof slot_mapping));
  CHECK(dsk_mem_upload(ctx, d_latent, latent, sizeof latent));
  CHECK(dsk_mem_upload(ctx, d_rope, rope, sizeof rope));
  CHECK(dsk_mem_upload(ctx, d_slot_mapping, slot_mapping, sizeof slot_mapping));

  dsk_kv_write_desc w;
  memset(&w, 0, sizeof w); /* unused fields zero: NULL stream, no counters */
  w.struct_size = sizeof w;
  w.format = DSK_KV_FORMAT_B584;
  w.N = T;
  w.latent = (const dsk_bf16 *)d_latent;
  w.latent_stride = LATENT;
  w.rope = (const dsk_bf16 *)d_rope;
  w.rope_stride = ROPE;
  w.slot_mapping = (const int32_t *)d_slot_mapping;
  w.cache = cache;
  CHECK(dsk_kv_write(ctx, &w));

  /* 3. Sliding-window slot lists: token t at position t attends to positions
   *    max(t - 127, 0) .. t of its request, oldest first; -1 fills the rest. */
  const int32_t req[T] = {0, 0}, pos[T] = {0, 1}, block_table[1] = {0};
  void *d_req, *d_pos, *d_bt, *d_slots, *d_lens;
  CHECK(dev_alloc(ctx, &d_req, sizeof req));
  CHECK(dev_alloc(ctx, &d_pos, sizeof pos));
  CHECK(dev_alloc(ctx, &d_bt, sizeof block_table));
  CHECK(dev_alloc(ctx, &d_slots, sizeof slots));
  CHECK(dev_alloc(ctx, &d_lens, sizeof lens));
  CHECK(dsk_mem_upload(ctx, d_req, req, sizeof req));
  CHECK(dsk_mem_upload(ctx, d_pos, pos, sizeof pos));
  CHECK(dsk_mem_upload(ctx, d_bt, block_table, sizeof block_table));

  dsk_slot_list_desc sl;
  memset(&sl, 0, sizeof sl);
  sl.struct_size = sizeof sl;
  sl.kind = DSK_SLOTS_SWA;
  sl.T = T;
  sl.req = (const int32_t *)d_req;
  sl.pos = (const int32_t *)d_pos;
  sl.slot_mapping = (const int32_t *)d_slot_mapping;
  sl.block_table.table = (const int32_t *)d_bt;
  sl.block_table.stride = 1;
  sl.block_table.rows = 1;
  sl.block_table.max_blocks = 1;
  sl.pbs = PBS;
  sl.window = WINDOW;
  sl.width = WINDOW;
  sl.out = (int32_t *)d_slots;
  sl.out_stride = WINDOW;
  sl.lens = (int32_t *)d_lens;
  CHECK(dsk_slot_list_build(ctx, &sl));
  CHECK(dsk_mem_download(ctx, slots, d_slots, sizeof slots));
  CHECK(dsk_mem_download(ctx, lens, d_lens, sizeof lens));
  printf("slot lists: row 0 = [%d, %d, ...] len %d; row 1 = [%d, %d, %d, ...] len %d\n", slots[0][0], slots[0][1],
         lens[0], slots[1][0], slots[1][1], slots[1][2], lens[1]);
  if (lens[0] != 1 || lens[1] != 2 || slots[0][0] != 0 || slots[1][0] != 0 || slots[1][1] != 1) {
    fprintf(stderr, "unexpected slot lists\n");
    goto done;
  }

  /* 4. Sparse MLA decode over one segment (the window). */
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++)
      for (int d = 0; d < DQK; d++) q[t][h][d] = dsk_bf16_from_f32(wave(d + 7 * h, 20 + t));
  void *d_q, *d_out, *d_lse;
  CHECK(dev_alloc(ctx, &d_q, sizeof q));
  CHECK(dev_alloc(ctx, &d_out, sizeof out));
  CHECK(dev_alloc(ctx, &d_lse, sizeof lse));
  CHECK(dsk_mem_upload(ctx, d_q, q, sizeof q));

  dsk_sparse_mla_desc a;
  memset(&a, 0, sizeof a); /* tactic all zero: the library chooses */
  a.struct_size = sizeof a;
  a.format = DSK_KV_FORMAT_B584;
  a.T = T;
  a.H = H;
  a.q = (const dsk_bf16 *)d_q;
  a.q_stride_t = H * DQK;
  a.q_stride_h = DQK;
  a.sm_scale = 0.044194173f; /* 512^-0.5, DeepSeek-V4 */
  a.nseg = 1;
  a.seg[0].cache = cache;
  a.seg[0].slots = (const int32_t *)d_slots;
  a.seg[0].slots_stride_t = WINDOW;
  a.seg[0].width = WINDOW;
  a.seg[0].lens = (const int32_t *)d_lens;
  a.sink = NULL;
  a.out = (dsk_bf16 *)d_out;
  a.out_stride_t = H * DV;
  a.out_stride_h = DV;
  a.lse = (float *)d_lse;
  a.lse_stride_t = H;
  a.lse_stride_h = 1;
  a.precision = DSK_PRECISION_ACCURATE;

  dsk_plan_info plan;
  memset(&plan, 0, sizeof plan);
  plan.struct_size = sizeof plan;
  CHECK(dsk_sparse_mla_decode_plan(ctx, &a, &plan));
  printf("plan: backend %s, workspace %lld bytes\n", plan.backend, (long long)plan.workspace_bytes);
  if (plan.workspace_bytes > 0) {
    CHECK(dev_alloc(ctx, &a.workspace, (size_t)plan.workspace_bytes));
    a.workspace_bytes = plan.workspace_bytes;
  }
  CHECK(dsk_sparse_mla_decode(ctx, &a)); /* asynchronous on CUDA */
  CHECK(dsk_ctx_synchronize(ctx, NULL));
  CHECK(dsk_mem_download(ctx, out, d_out, sizeof out));
  CHECK(dsk_mem_download(ctx, lse, d_lse, sizeof lse));

  /* 5. Token 0's own dequantised record, for the check. */
  void *d_v0;
  CHECK(dev_alloc(ctx, &d_v0, sizeof v0));
  dsk_kv_read_desc r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  r.format = DSK_KV_FORMAT_B584;
  r.N = 1;
  r.slots = (const int32_t *)d_slot_mapping; /* slot 0 */
  r.cache = cache;
  r.out = (float *)d_v0;
  r.out_stride = DQK;
  CHECK(dsk_kv_read(ctx, &r));
  CHECK(dsk_mem_download(ctx, v0, d_v0, sizeof v0));

  int bad = 0;
  for (int t = 0; t < T; t++) {
    printf("token %d head 0: lse %.5f out[0:4] = %.5f %.5f %.5f %.5f\n", t, lse[t][0],
           dsk_bf16_to_f32(out[t][0][0]), dsk_bf16_to_f32(out[t][0][1]), dsk_bf16_to_f32(out[t][0][2]),
           dsk_bf16_to_f32(out[t][0][3]));
    for (int h = 0; h < H; h++) {
      if (!isfinite(lse[t][h])) bad++;
      for (int d = 0; d < DV; d++) {
        float o = dsk_bf16_to_f32(out[t][h][d]);
        if (!isfinite(o)) bad++;
        /* one candidate: softmax weight 1, out = V (bf16-rounded) */
        if (t == 0 && fabsf(o - v0[d]) > 1e-2f * fabsf(v0[d]) + 1e-6f) bad++;
      }
    }
  }
  if (bad) {
    fprintf(stderr, "%d output values are not finite or differ from the expected ones\n", bad);
    goto done;
  }
  printf("ok\n");
  rc = 0;

done:
  for (int i = ndev - 1; i >= 0; i--) dsk_mem_free(ctx, dev[i]);
  dsk_ctx_destroy(ctx);
  return rc;
}
