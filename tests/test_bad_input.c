/* test_bad_input.c - every kind of bad descriptor field of
 * dsk_sparse_mla_decode and dsk_sparse_mla_decode_plan returns
 * DSK_STATUS_INVALID_ARG with dsk_last_error() naming the field (and values),
 * never crashes and never writes the output; T = 0 is an OK no-op. Runs on
 * DSK_TEST_DEVICE (default cpu). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static tu_counts counts;

enum { T0 = 2, H0 = 16, W0 = 128, W1 = 64, PBS = 64, PAGES = 4 };
#define PS 37440 /* canonical Format B stride for pbs 64 */

typedef struct bufs {
  void *cache0, *cache1, *q, *out, *lse, *slots0, *slots1, *lens, *sink, *ws, *cnt;
  int64_t ws_bytes;
  size_t out_bytes;
} bufs;

static void *dev(dsk_ctx *ctx, size_t bytes, int fill) {
  void *d = NULL;
  if (dsk_mem_alloc(ctx, &d, bytes) != DSK_STATUS_OK) return NULL;
  dsk_mem_set(ctx, d, fill, bytes);
  return d;
}

/* A valid two-segment Format B descriptor (slots all -1). */
static dsk_sparse_mla_desc good(dsk_ctx *ctx, bufs *b) {
  dsk_sparse_mla_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.format = DSK_KV_FORMAT_B584;
  d.T = T0;
  d.H = H0;
  d.q = (const dsk_bf16 *)b->q;
  d.q_stride_h = 512;
  d.q_stride_t = H0 * 512;
  d.sm_scale = 0.0441942f;
  d.nseg = 2;
  d.seg[0].cache.base = b->cache0;
  d.seg[0].cache.pbs = PBS;
  d.seg[0].cache.page_stride = PS;
  d.seg[0].cache.num_pages = PAGES;
  d.seg[0].slots = (const int32_t *)b->slots0;
  d.seg[0].slots_stride_t = W0;
  d.seg[0].width = W0;
  d.seg[1] = d.seg[0];
  d.seg[1].cache.base = b->cache1;
  d.seg[1].slots = (const int32_t *)b->slots1;
  d.seg[1].slots_stride_t = W1;
  d.seg[1].width = W1;
  d.seg[1].lens = (const int32_t *)b->lens;
  d.sink = (const float *)b->sink;
  d.out = (dsk_bf16 *)b->out;
  d.out_stride_h = 512;
  d.out_stride_t = H0 * 512;
  d.lse = (float *)b->lse;
  d.lse_stride_h = 1;
  d.lse_stride_t = H0;
  d.workspace = b->ws;
  d.workspace_bytes = b->ws_bytes;
  d.counters = (int64_t *)b->cnt;
  return d;
}

typedef void (*mutate_fn)(dsk_sparse_mla_desc *d, const bufs *b);
typedef struct bad_case {
  const char *name;
  mutate_fn fn;
  const char *must1, *must2, *must3; /* substrings of dsk_last_error() */
  int run_only;                      /* workspace checks happen in the run call only */
} bad_case;

#define MUT(id, body) \
  static void id(dsk_sparse_mla_desc *d, const bufs *b) { (void)b; body; }

MUT(m_struct, d->struct_size = sizeof *d - 8)
MUT(m_struct0, d->struct_size = 0)
MUT(m_fmt_idx, d->format = DSK_KV_FORMAT_IDXK132)
MUT(m_fmt_99, d->format = (dsk_kv_format)99)
MUT(m_fmt_0, d->format = (dsk_kv_format)0)
MUT(m_tneg, d->T = -1)
MUT(m_h0, d->H = 0)
MUT(m_hneg, d->H = -3)
MUT(m_h129, d->H = 129)
MUT(m_qnull, d->q = NULL)
MUT(m_qsh, d->q_stride_h = 511)
MUT(m_qst, d->q_stride_t = (H0 - 1) * 512 + 511)
MUT(m_qsh_neg, d->q_stride_h = -512)
MUT(m_scale0, d->sm_scale = 0.0f)
MUT(m_scaleneg, d->sm_scale = -0.1f)
MUT(m_scalenan, d->sm_scale = NAN)
MUT(m_scaleinf, d->sm_scale = INFINITY)
MUT(m_nseg0, d->nseg = 0)
MUT(m_nseg3, d->nseg = 3)
MUT(m_nsegneg, d->nseg = -1)
MUT(m_base0, d->seg[0].cache.base = NULL)
MUT(m_base1, d->seg[1].cache.base = NULL)
MUT(m_pbs0, d->seg[0].cache.pbs = 0)
MUT(m_pbsneg, d->seg[1].cache.pbs = -64)
MUT(m_pages0, d->seg[1].cache.num_pages = 0)
MUT(m_pagesneg, d->seg[0].cache.num_pages = -1)
MUT(m_ps_small, d->seg[1].cache.page_stride = 37000)
MUT(m_ps_small0, d->seg[0].cache.page_stride = 584 * 64 - 1)
MUT(m_ps_zero, d->seg[0].cache.page_stride = 0)
MUT(m_slots0, d->seg[0].slots = NULL)
MUT(m_slots1, d->seg[1].slots = NULL)
MUT(m_w0, d->seg[0].width = 0)
MUT(m_wneg, d->seg[1].width = -5)
MUT(m_sstride, d->seg[0].slots_stride_t = W0 - 1)
MUT(m_outnull, d->out = NULL)
MUT(m_outsh, d->out_stride_h = 500)
MUT(m_outst, d->out_stride_t = 512 * (H0 - 1))
MUT(m_lsesh, d->lse_stride_h = 0)
MUT(m_lsest, d->lse_stride_t = 0)
MUT(m_lse_overlap, d->lse_stride_t = 4)
MUT(m_prec, d->precision = (dsk_precision)7)
MUT(m_precneg, d->precision = (dsk_precision)-1)
MUT(m_wsneg, d->workspace_bytes = -1)
MUT(m_ws_small, d->workspace_bytes = b->ws_bytes - 1)
MUT(m_ws_null, d->workspace = NULL)
MUT(m_out_over_q, d->out = (dsk_bf16 *)b->q)
MUT(m_lse_over_out, d->lse = (float *)b->out)
MUT(m_cnt_misaligned, d->counters = (int64_t *)((char *)b->cnt + 4))
MUT(m_q_misaligned, d->q = (const dsk_bf16 *)((const char *)b->q + 1))
MUT(m_tactic_v0, { d->tactic.op = DSK_OP_SPARSE_MLA_DECODE; d->tactic.version = 1; d->tactic.v[0] = 5; d->tactic.v[1] = 16; })
MUT(m_tactic_op, { d->tactic.op = 99; d->tactic.version = 1; d->tactic.v[0] = 1; d->tactic.v[1] = 16; })

static const bad_case k_cases[] = {
    {"struct_size - 8", m_struct, "struct_size", NULL, NULL, 0},
    {"struct_size 0", m_struct0, "struct_size", NULL, NULL, 0},
    {"format IDXK132", m_fmt_idx, "format", "3", NULL, 0},
    {"format 99", m_fmt_99, "format", "99", NULL, 0},
    {"format 0", m_fmt_0, "format", NULL, NULL, 0},
    {"T -1", m_tneg, "T", "-1", NULL, 0},
    {"H 0", m_h0, "H", "0", NULL, 0},
    {"H -3", m_hneg, "H", "-3", NULL, 0},
    {"H 129", m_h129, "H", "129", NULL, 0},
    {"q NULL", m_qnull, "q", "NULL", NULL, 0},
    {"q_stride_h 511", m_qsh, "q_stride_h", "511", "512", 0},
    {"q_stride_t small", m_qst, "q_stride_t", NULL, NULL, 0},
    {"q_stride_h negative", m_qsh_neg, "q_stride_h", "-512", NULL, 0},
    {"sm_scale 0", m_scale0, "sm_scale", NULL, NULL, 0},
    {"sm_scale -0.1", m_scaleneg, "sm_scale", NULL, NULL, 0},
    {"sm_scale NaN", m_scalenan, "sm_scale", NULL, NULL, 0},
    {"sm_scale inf", m_scaleinf, "sm_scale", NULL, NULL, 0},
    {"nseg 0", m_nseg0, "nseg", "0", NULL, 0},
    {"nseg 3", m_nseg3, "nseg", "3", NULL, 0},
    {"nseg -1", m_nsegneg, "nseg", "-1", NULL, 0},
    {"segment 0 base NULL", m_base0, "segment 0", "base", NULL, 0},
    {"segment 1 base NULL", m_base1, "segment 1", "base", NULL, 0},
    {"segment 0 pbs 0", m_pbs0, "segment 0", "pbs", NULL, 0},
    {"segment 1 pbs -64", m_pbsneg, "segment 1", "pbs", "-64", 0},
    {"segment 1 num_pages 0", m_pages0, "segment 1", "num_pages", NULL, 0},
    {"segment 0 num_pages -1", m_pagesneg, "segment 0", "num_pages", "-1", 0},
    {"segment 1 page_stride 37000", m_ps_small, "segment 1 page_stride", "37000", "37376", 0},
    {"segment 0 page_stride min-1", m_ps_small0, "segment 0 page_stride", "37375", "37376", 0},
    {"segment 0 page_stride 0", m_ps_zero, "segment 0 page_stride", NULL, NULL, 0},
    {"segment 0 slots NULL", m_slots0, "segment 0 slots", NULL, NULL, 0},
    {"segment 1 slots NULL", m_slots1, "segment 1 slots", NULL, NULL, 0},
    {"segment 0 width 0", m_w0, "segment 0 width", "0", NULL, 0},
    {"segment 1 width -5", m_wneg, "segment 1 width", "-5", NULL, 0},
    {"segment 0 slots_stride_t", m_sstride, "segment 0 slots_stride_t", "127", "128", 0},
    {"out NULL", m_outnull, "out", "NULL", NULL, 0},
    {"out_stride_h 500", m_outsh, "out_stride_h", "500", NULL, 0},
    {"out_stride_t small", m_outst, "out_stride_t", NULL, NULL, 0},
    {"lse_stride_h 0", m_lsesh, "lse_stride_h", NULL, NULL, 0},
    {"lse_stride_t 0", m_lsest, "lse_stride_t", NULL, NULL, 0},
    {"lse strides overlap", m_lse_overlap, "lse_stride", "overlap", NULL, 0},
    {"precision 7", m_prec, "precision", "7", NULL, 0},
    {"precision -1", m_precneg, "precision", "-1", NULL, 0},
    {"workspace_bytes -1", m_wsneg, "workspace_bytes", "-1", NULL, 0},
    {"workspace too small", m_ws_small, "workspace_bytes", NULL, NULL, 1},
    {"workspace NULL", m_ws_null, "workspace", "NULL", NULL, 1},
    {"out overlaps q", m_out_over_q, "out", "q", "overlap", 0},
    {"lse overlaps out", m_lse_over_out, "lse", "out", "overlap", 0},
    {"counters misaligned", m_cnt_misaligned, "counters", "aligned", NULL, 0},
    {"q misaligned", m_q_misaligned, "q", "aligned", NULL, 0},
    {"tactic v0 5", m_tactic_v0, "tactic.v[0]", "5", NULL, 0},
    {"tactic op 99", m_tactic_op, "tactic.op", "99", NULL, 0},
};

static int has(const char *s, const char *sub) { return !sub || strstr(s, sub) != NULL; }

int main(void) {
  dsk_ctx *ctx = tu_ctx(NULL);
  TU_CHECK(&counts, ctx != NULL, "context");
  if (!ctx) return tu_finish("test_bad_input", &counts);

  bufs b;
  memset(&b, 0, sizeof b);
  b.cache0 = dev(ctx, (size_t)PAGES * PS, 0xFF);
  b.cache1 = dev(ctx, (size_t)PAGES * PS, 0xFF);
  b.q = dev(ctx, (size_t)T0 * H0 * 512 * 2, 0);
  b.out_bytes = (size_t)T0 * H0 * 512 * 2;
  b.out = dev(ctx, b.out_bytes, 0xFF);
  b.lse = dev(ctx, (size_t)T0 * H0 * 4, 0xFF);
  b.slots0 = dev(ctx, (size_t)T0 * W0 * 4, 0xFF); /* all -1 */
  b.slots1 = dev(ctx, (size_t)T0 * W1 * 4, 0xFF);
  b.lens = dev(ctx, (size_t)T0 * 4, 0);
  b.sink = dev(ctx, (size_t)H0 * 4, 0);
  b.cnt = dev(ctx, 16, 0);

  /* the baseline is valid: plan, then run */
  dsk_sparse_mla_desc d = good(ctx, &b);
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
  b.ws_bytes = pi.workspace_bytes;
  if (b.ws_bytes == 0) b.ws_bytes = 0; /* cpu-ref needs scratch; a backend might not */
  b.ws = b.ws_bytes ? dev(ctx, (size_t)b.ws_bytes, 0xFF) : NULL;

  /* bad fields: INVALID_ARG naming the field, output untouched */
  for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
    const bad_case *k = &k_cases[i];
    if (k->run_only && b.ws_bytes == 0) continue; /* no workspace needed: nothing to get wrong */
    for (int plan = 0; plan < 2; plan++) {
      if (plan && k->run_only) continue;
      d = good(ctx, &b);
      k->fn(&d, &b);
      dsk_clear_error();
      dsk_status st = plan ? dsk_sparse_mla_decode_plan(ctx, &d, &pi) : dsk_sparse_mla_decode(ctx, &d);
      const char *e = dsk_last_error();
      TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG, "%s (%s): status %s: %s", k->name, plan ? "plan" : "run",
               dsk_status_name(st), e);
      TU_CHECK(&counts, has(e, k->must1) && has(e, k->must2) && has(e, k->must3),
               "%s (%s): message '%s' lacks '%s' / '%s' / '%s'", k->name, plan ? "plan" : "run", e, k->must1,
               k->must2 ? k->must2 : "", k->must3 ? k->must3 : "");
    }
    if (!k->run_only) {
      /* dsk_op_supported answers with the same reason */
      d = good(ctx, &b);
      k->fn(&d, &b);
      int sup = -1;
      char reason[256];
      dsk_status st = dsk_op_supported(ctx, DSK_OP_SPARSE_MLA_DECODE, &d, &sup, reason, sizeof reason);
      /* the tactic is checked by plan/run, not by the support query */
      if (strncmp(k->name, "tactic", 6) != 0)
        TU_CHECK(&counts, st == DSK_STATUS_OK && sup == 0 && has(reason, k->must1),
                 "%s: dsk_op_supported -> %s supported %d '%s'", k->name, dsk_status_name(st), sup, reason);
    }
  }

  /* NULL ctx / desc / info */
  d = good(ctx, &b);
  dsk_status st = dsk_sparse_mla_decode(NULL, &d);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && has(dsk_last_error(), "ctx"), "NULL ctx: %s '%s'",
           dsk_status_name(st), dsk_last_error());
  st = dsk_sparse_mla_decode(ctx, NULL);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && has(dsk_last_error(), "desc"), "NULL desc: %s '%s'",
           dsk_status_name(st), dsk_last_error());
  st = dsk_sparse_mla_decode_plan(NULL, &d, &pi);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && has(dsk_last_error(), "ctx"), "plan NULL ctx: %s",
           dsk_status_name(st));
  st = dsk_sparse_mla_decode_plan(ctx, NULL, &pi);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && has(dsk_last_error(), "desc"), "plan NULL desc: %s",
           dsk_status_name(st));
  st = dsk_sparse_mla_decode_plan(ctx, &d, NULL);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && has(dsk_last_error(), "info"), "plan NULL info: %s",
           dsk_status_name(st));
  pi.struct_size = 4;
  st = dsk_sparse_mla_decode_plan(ctx, &d, &pi);
  TU_CHECK(&counts, st == DSK_STATUS_INVALID_ARG && has(dsk_last_error(), "struct_size"), "plan info size: %s",
           dsk_status_name(st));
  pi.struct_size = sizeof pi;

  /* nothing above wrote the output */
  unsigned char *h = (unsigned char *)malloc(b.out_bytes);
  dsk_ctx_synchronize(ctx, NULL);
  dsk_mem_download(ctx, h, b.out, b.out_bytes);
  size_t touched = 0;
  for (size_t i = 0; i < b.out_bytes; i++) touched += h[i] != 0xFF;
  TU_CHECK(&counts, touched == 0, "bad calls wrote %zu bytes of out", touched);

  /* T = 0: OK and untouched, even with a tiny workspace */
  d = good(ctx, &b);
  d.T = 0;
  d.workspace = NULL;
  d.workspace_bytes = 0;
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode(ctx, &d));
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode_plan(ctx, &d, &pi));
  dsk_ctx_synchronize(ctx, NULL);
  dsk_mem_download(ctx, h, b.out, b.out_bytes);
  touched = 0;
  for (size_t i = 0; i < b.out_bytes; i++) touched += h[i] != 0xFF;
  TU_CHECK(&counts, touched == 0, "T = 0 wrote %zu bytes of out", touched);

  /* and the baseline really runs: every slot is -1, so out = 0 and lse = -inf */
  d = good(ctx, &b);
  TU_CHECK_OK(&counts, dsk_sparse_mla_decode(ctx, &d));
  dsk_ctx_synchronize(ctx, NULL);
  dsk_mem_download(ctx, h, b.out, b.out_bytes);
  touched = 0;
  for (size_t i = 0; i < b.out_bytes; i++) touched += h[i] != 0;
  TU_CHECK(&counts, touched == 0, "baseline: %zu non-zero output bytes for empty rows", touched);
  free(h);

  dsk_mem_free(ctx, b.cache0);
  dsk_mem_free(ctx, b.cache1);
  dsk_mem_free(ctx, b.q);
  dsk_mem_free(ctx, b.out);
  dsk_mem_free(ctx, b.lse);
  dsk_mem_free(ctx, b.slots0);
  dsk_mem_free(ctx, b.slots1);
  dsk_mem_free(ctx, b.lens);
  dsk_mem_free(ctx, b.sink);
  dsk_mem_free(ctx, b.ws);
  dsk_mem_free(ctx, b.cnt);
  dsk_ctx_destroy(ctx);
  return tu_finish("test_bad_input", &counts);
}
