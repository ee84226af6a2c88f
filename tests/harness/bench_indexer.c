/* bench_indexer.c - `dsk bench indexer`: the lightning indexer's scores
 * (dsk_indexer_logits), the top-k selection (dsk_topk) and the fused path
 * to slot lists (dsk_indexer_topk_slots) on the model shapes of issue 7,
 * with the device copy bandwidth measured in the same run.
 *
 * One key pool (format IDXK132, 64 entries per page) several times the L2
 * size, written once with dsk_kv_write from a rotating set of random rows;
 * every case gets its own block table of random distinct pages. The T query
 * rows are the decode tokens of ceil(T / per_req) requests (per_req 1 by
 * default: a decode batch), every request with the full context, so row t
 * scores L = context / ratio entries (its last token: pos = context - 1).
 * L2 flushed before every sample unless warm.
 *
 * Bytes: logits and fused count the distinct key bytes read, 132 per entry
 * of every request (spec/indices.md §9 / issue 7's goal: "copy bandwidth
 * over the key bytes read"); top-k counts the scores read (4 per candidate)
 * plus the indices written; slots (the fused path's last stage alone,
 * dsk_slot_list_build on the top-k output) the indices read plus the slots
 * written. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct idx_model {
  const char *model;
  int64_t ratio, H, K;
} idx_model;

static const idx_model k_models[] = {
    {"dsv4-flash", 4, 64, 512},
    {"dsv3.2", 1, 64, 2048},
    {"glm-5.1", 1, 32, 2048},
};
static const int64_t k_ctx[] = {4096, 32768, 131072};
static const int64_t k_ctx_quick[] = {4096};
static const int k_T[] = {1, 16, 64};
static const int k_T_quick[] = {1, 4};

#define IDX_PBS 64
enum { OPI_LOGITS, OPI_TOPK, OPI_FUSED, OPI_SLOTS, OPI_COUNT };
static const char *const k_op_names[OPI_COUNT] = {"logits", "topk", "fused", "slots"};

typedef struct idx_run {
  int op;
  dsk_indexer_logits_desc lg;
  dsk_topk_desc tk;
  dsk_indexer_topk_slots_desc fu;
  dsk_slot_list_desc sl;
} idx_run;

static dsk_status run_once(dsk_ctx *ctx, void *user) {
  const idx_run *r = (const idx_run *)user;
  if (r->op == OPI_LOGITS) return dsk_indexer_logits(ctx, &r->lg);
  if (r->op == OPI_TOPK) return dsk_topk(ctx, &r->tk);
  if (r->op == OPI_SLOTS) return dsk_slot_list_build(ctx, &r->sl);
  return dsk_indexer_topk_slots(ctx, &r->fu);
}

/* Writes every slot of the pool: `rows` random keys (bf16 N(0, 1) x 2^u per
 * row, u in -2..2) written again and again through sequential slot maps. */
static int fill_pool(dsk_ctx *ctx, const dsk_kv_cache *cache, tu_rng *rng) {
  const int64_t rows = 16384, cap = cache->num_pages * cache->pbs;
  dsk_bf16 *lat = malloc(sizeof(dsk_bf16) * rows * 128);
  int32_t *map = malloc(sizeof(int32_t) * rows);
  void *dl = NULL, *dm = NULL;
  int rc = 1;
  if (!lat || !map) goto out;
  for (int64_t i = 0; i < rows; i++) tu_fill_bf16_normal(rng, lat + i * 128, 128, ldexp(1.0, (int)tu_int(rng, -2, 2)));
  if (dsk_mem_alloc(ctx, &dl, sizeof(dsk_bf16) * rows * 128) || dsk_mem_alloc(ctx, &dm, sizeof(int32_t) * rows))
    goto out;
  if (dsk_mem_upload(ctx, dl, lat, sizeof(dsk_bf16) * rows * 128)) goto out;
  for (int64_t s0 = 0; s0 < cap; s0 += rows) {
    const int64_t n = cap - s0 < rows ? cap - s0 : rows;
    for (int64_t i = 0; i < n; i++) map[i] = (int32_t)(s0 + i);
    if (dsk_ctx_synchronize(ctx, NULL) || dsk_mem_upload(ctx, dm, map, sizeof(int32_t) * n)) goto out;
    dsk_kv_write_desc w;
    memset(&w, 0, sizeof w);
    w.struct_size = sizeof w;
    w.format = DSK_KV_FORMAT_IDXK132;
    w.N = n;
    w.latent = dl;
    w.latent_stride = 128;
    w.slot_mapping = dm;
    w.cache = *cache;
    w.scale_rule = DSK_SCALE_POW2;
    if (dsk_kv_write(ctx, &w)) goto out;
  }
  rc = dsk_ctx_synchronize(ctx, NULL) != DSK_STATUS_OK;
out:
  if (rc) fprintf(stderr, "bench: key pool fill failed: %s\n", dsk_last_error());
  free(lat);
  free(map);
  dsk_mem_free(ctx, dl);
  dsk_mem_free(ctx, dm);
  return rc;
}

static int t_selected(const dsk_bench_indexer_opts *o, int T) {
  return !(o->max_T && T > o->max_T) && !(o->only_T && T != o->only_T);
}

/* Device buffers of one case. */
#define IDX_NBUF 16
typedef struct idx_mem {
  void *p[IDX_NBUF];
  int n;
} idx_mem;
static void *ialloc(dsk_ctx *ctx, idx_mem *mm, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st != DSK_STATUS_OK) return NULL;
  if (mm->n >= IDX_NBUF) {
    *st = DSK_STATUS_OUT_OF_MEMORY;
    return NULL;
  }
  *st = dsk_mem_alloc(ctx, &p, bytes ? bytes : 16);
  if (*st == DSK_STATUS_OK) mm->p[mm->n++] = p;
  return p;
}
static void *iput(dsk_ctx *ctx, idx_mem *mm, const void *h, size_t bytes, dsk_status *st) {
  void *p = ialloc(ctx, mm, bytes, st);
  if (*st == DSK_STATUS_OK && bytes) *st = dsk_mem_upload(ctx, p, h, bytes);
  return p;
}
static void imem_free(dsk_ctx *ctx, idx_mem *mm) {
  for (int i = 0; i < mm->n; i++) dsk_mem_free(ctx, mm->p[i]);
  mm->n = 0;
}

/* Host side of one case: rows, block table, q, scales, weights. */
typedef struct idx_host {
  int32_t *req, *pos, *sm, *lens, *bt;
  uint8_t *q;
  float *qs, *w;
  int64_t *perm;
} idx_host;
static void ihost_free(idx_host *h) {
  free(h->req);
  free(h->pos);
  free(h->sm);
  free(h->lens);
  free(h->bt);
  free(h->q);
  free(h->qs);
  free(h->w);
  free(h->perm);
  memset(h, 0, sizeof *h);
}

int dsk_bench_indexer(dsk_ctx *ctx, const dsk_bench_indexer_opts *o, FILE *out) {
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  dsk_ctx_get_info(ctx, &info);
  tu_rng rng = tu_rng_make(o->seed ? o->seed : 7);
  const int64_t *ctxs = o->quick ? k_ctx_quick : k_ctx;
  const int nctx = o->quick ? (int)(sizeof k_ctx_quick / sizeof k_ctx_quick[0]) : (int)(sizeof k_ctx / sizeof k_ctx[0]);
  const int *Ts = o->quick ? k_T_quick : k_T;
  const int nT = o->quick ? (int)(sizeof k_T_quick / sizeof k_T_quick[0]) : (int)(sizeof k_T / sizeof k_T[0]);
  const int per_req = o->per_req > 0 ? o->per_req : 1;
  int op_only = -1;
  if (o->op) {
    for (int i = 0; i < OPI_COUNT; i++)
      if (strcmp(o->op, k_op_names[i]) == 0) op_only = i;
    if (op_only < 0) {
      fprintf(stderr, "bench: unknown indexer op '%s' (logits, topk, fused, slots)\n", o->op);
      return 1;
    }
  }

  /* The pool: every request of the largest case, >= 4x L2 (256 MiB at least). */
  int64_t need_entries = 0;
  int Tmax = 0;
  for (int ti = 0; ti < nT; ti++)
    if (t_selected(o, Ts[ti]) && Ts[ti] > Tmax) Tmax = Ts[ti];
  for (size_t mi = 0; mi < sizeof k_models / sizeof k_models[0]; mi++) {
    if (o->model && !strstr(k_models[mi].model, o->model)) continue;
    for (int ci = 0; ci < nctx; ci++) {
      if (o->only_ctx && ctxs[ci] != o->only_ctx) continue;
      const int64_t pages = (ctxs[ci] / k_models[mi].ratio + IDX_PBS - 1) / IDX_PBS;
      const int64_t e = ((int64_t)Tmax + per_req - 1) / per_req * pages * IDX_PBS;
      if (e > need_entries) need_entries = e;
    }
  }
  const int64_t stride = (dsk_kv_canonical_page_stride(DSK_KV_FORMAT_IDXK132, IDX_PBS) + 15) / 16 * 16;
  const int64_t l2 = info.l2_bytes > 0 ? info.l2_bytes : (64 << 20);
  int64_t pool_bytes = 4 * l2 < ((int64_t)256 << 20) ? ((int64_t)256 << 20) : 4 * l2;
  if (o->quick) pool_bytes = (int64_t)16 << 20;
  int64_t num_pages = pool_bytes / stride;
  if (num_pages < (need_entries + IDX_PBS - 1) / IDX_PBS + 1) num_pages = (need_entries + IDX_PBS - 1) / IDX_PBS + 1;

  if (!need_entries)
    return dsk__bench_no_case("indexer", o->quick ? "models dsv4-flash, dsv3.2, glm-5.1; context 4096; T 1, 4 (--quick)"
                                                  : "models dsv4-flash, dsv3.2, glm-5.1; contexts 4096, 32768, 131072; "
                                                    "T 1, 16, 64");
  double copy_gbps = 0;
  if (dsk__bench_preamble(ctx, &info, "indexer", o->quick, o->warm, out, &copy_gbps) != 0) return 1;
  fprintf(out, "# key pool %lld MiB (IDXK132, 64 entries/page, random page order); %d query row%s per request, each "
          "request with the full context; bytes: logits/fused = distinct key bytes (132 per entry), topk = scores "
          "read + indices written, slots = indices read + slots written\n",
          (long long)((num_pages * stride) >> 20), per_req, per_req == 1 ? "" : "s");
  fprintf(out, "model,ratio,H,K,context,entries,T,reqs,op,median_us,gbps,pct_copy_bw,tflops,bytes,goal\n");
  fflush(out);

  void *pool = NULL;
  if (dsk_mem_alloc(ctx, &pool, (size_t)(num_pages * stride))) {
    fprintf(stderr, "bench: key pool alloc (%lld MiB): %s\n", (long long)((num_pages * stride) >> 20),
            dsk_last_error());
    return 1;
  }
  dsk_kv_cache cache = {pool, IDX_PBS, stride, num_pages};
  if (fill_pool(ctx, &cache, &rng)) {
    dsk_mem_free(ctx, pool);
    return 1;
  }

  int rc = 0;
  for (size_t mi = 0; mi < sizeof k_models / sizeof k_models[0] && !rc; mi++) {
    const idx_model *m = &k_models[mi];
    if (o->model && !strstr(m->model, o->model)) continue;
    for (int ci = 0; ci < nctx && !rc; ci++) {
      const int64_t context = ctxs[ci];
      if (o->only_ctx && context != o->only_ctx) continue;
      const int64_t entries = context / m->ratio, mb = (entries + IDX_PBS - 1) / IDX_PBS, H = m->H, K = m->K;
      for (int ti = 0; ti < nT && !rc; ti++) {
        const int T = Ts[ti];
        if (!t_selected(o, T)) continue;
        const int64_t reqs = ((int64_t)T + per_req - 1) / per_req;
        idx_host h;
        memset(&h, 0, sizeof h);
        idx_mem mm = {{0}, 0};
        dsk_status st = DSK_STATUS_OK;
        h.req = malloc(sizeof(int32_t) * T);
        h.pos = malloc(sizeof(int32_t) * T);
        h.sm = malloc(sizeof(int32_t) * T);
        h.lens = malloc(sizeof(int32_t) * T);
        h.bt = malloc(sizeof(int32_t) * (size_t)(reqs * mb));
        h.q = malloc((size_t)(T * H * 128));
        h.qs = malloc(sizeof(float) * (size_t)(T * H));
        h.w = malloc(sizeof(float) * (size_t)(T * H));
        h.perm = malloc(sizeof(int64_t) * (size_t)num_pages);
        if (!h.req || !h.pos || !h.sm || !h.lens || !h.bt || !h.q || !h.qs || !h.w || !h.perm)
          st = DSK_STATUS_OUT_OF_MEMORY;
        int64_t key_entries = 0, scored = 0;
        if (st == DSK_STATUS_OK) {
          tu_permutation(&rng, h.perm, num_pages);
          for (int64_t i = 0; i < reqs * mb; i++) h.bt[i] = (int32_t)h.perm[i];
          int64_t *req_max = calloc((size_t)reqs, sizeof(int64_t));
          if (!req_max) st = DSK_STATUS_OUT_OF_MEMORY;
          for (int t = 0; t < T && st == DSK_STATUS_OK; t++) {
            const int r = t / per_req, j = t % per_req;
            const int64_t p = context - per_req + j; /* the request's last per_req tokens */
            h.req[t] = r;
            h.pos[t] = (int32_t)(p < 0 ? 0 : p);
            h.sm[t] = t;
            const int64_t L = ((int64_t)h.pos[t] + 1) / m->ratio;
            h.lens[t] = (int32_t)(L < entries ? L : entries);
            scored += h.lens[t];
            if (h.lens[t] > req_max[r]) req_max[r] = h.lens[t];
          }
          for (int64_t r = 0; r < reqs && req_max; r++) key_entries += req_max[r];
          free(req_max);
          for (int64_t i = 0; i < T * H * 128; i++) h.q[i] = dsk_e4m3_from_f32((float)(tu_normal(&rng) * 8.0));
          for (int64_t i = 0; i < T * H; i++) {
            h.qs[i] = (float)ldexp(1.0 + tu_uniform(&rng), -(int)tu_int(&rng, 5, 9));
            h.w[i] = (float)(tu_normal(&rng) * 0.1);
          }
        }
        idx_run r;
        memset(&r, 0, sizeof r);
        dsk_indexer_logits_desc *l = &r.lg;
        l->struct_size = sizeof *l;
        l->T = T;
        l->n_heads = H;
        l->q = iput(ctx, &mm, h.q, (size_t)(T * H * 128), &st);
        l->q_stride_t = H * 128;
        l->q_stride_h = 128;
        l->q_scale = iput(ctx, &mm, h.qs, sizeof(float) * (size_t)(T * H), &st);
        l->q_scale_stride_t = H;
        l->weights = iput(ctx, &mm, h.w, sizeof(float) * (size_t)(T * H), &st);
        l->weights_stride_t = H;
        l->req = iput(ctx, &mm, h.req, sizeof(int32_t) * T, &st);
        l->pos = iput(ctx, &mm, h.pos, sizeof(int32_t) * T, &st);
        l->slot_mapping = iput(ctx, &mm, h.sm, sizeof(int32_t) * T, &st);
        l->block_table.table = iput(ctx, &mm, h.bt, sizeof(int32_t) * (size_t)(reqs * mb), &st);
        l->block_table.stride = mb;
        l->block_table.rows = reqs;
        l->block_table.max_blocks = mb;
        l->ratio = m->ratio;
        l->cache = cache;
        l->out = ialloc(ctx, &mm, sizeof(float) * (size_t)(T * entries), &st);
        l->out_stride_t = entries;
        l->ctx_width = entries;

        dsk_topk_desc *k = &r.tk;
        k->struct_size = sizeof *k;
        k->T = T;
        k->scores = l->out;
        k->scores_stride_t = entries;
        k->width = entries;
        k->lens = iput(ctx, &mm, h.lens, sizeof(int32_t) * T, &st);
        k->K = K;
        k->out = ialloc(ctx, &mm, sizeof(int32_t) * (size_t)(T * K), &st);
        k->out_stride_t = K;

        dsk_indexer_topk_slots_desc *f = &r.fu;
        f->struct_size = sizeof *f;
        f->T = T;
        f->n_heads = H;
        f->q = l->q;
        f->q_stride_t = l->q_stride_t;
        f->q_stride_h = l->q_stride_h;
        f->q_scale = l->q_scale;
        f->q_scale_stride_t = l->q_scale_stride_t;
        f->weights = l->weights;
        f->weights_stride_t = l->weights_stride_t;
        f->req = l->req;
        f->pos = l->pos;
        f->slot_mapping = l->slot_mapping;
        f->block_table = l->block_table;
        f->ratio = l->ratio;
        f->cache = l->cache;
        f->ctx_width = entries;
        f->K = K;
        f->kind = m->ratio == 4 ? DSK_SLOTS_C4A : DSK_SLOTS_TOPK;
        f->slots = ialloc(ctx, &mm, sizeof(int32_t) * (size_t)(T * K), &st);
        f->slots_stride_t = K;
        f->lens = ialloc(ctx, &mm, sizeof(int32_t) * T, &st);

        /* the fused path's third stage alone: the top-k output (computed
         * below) to slots, the kind the fused path uses */
        dsk_slot_list_desc *sl = &r.sl;
        sl->struct_size = sizeof *sl;
        sl->kind = f->kind;
        sl->T = T;
        sl->req = l->req;
        sl->slot_mapping = l->slot_mapping;
        sl->block_table = l->block_table;
        sl->pbs = IDX_PBS;
        sl->idx = k->out;
        sl->idx_stride = K;
        sl->K = K;
        sl->out = ialloc(ctx, &mm, sizeof(int32_t) * (size_t)(T * K), &st);
        sl->out_stride = K;
        sl->lens = ialloc(ctx, &mm, sizeof(int32_t) * T, &st);

        dsk_plan_info pi;
        memset(&pi, 0, sizeof pi);
        pi.struct_size = sizeof pi;
        if (st == DSK_STATUS_OK) st = dsk_topk_plan(ctx, k, &pi);
        if (st == DSK_STATUS_OK && pi.workspace_bytes > 0) k->workspace = ialloc(ctx, &mm, (size_t)pi.workspace_bytes, &st);
        k->workspace_bytes = pi.workspace_bytes;
        memset(&pi, 0, sizeof pi);
        pi.struct_size = sizeof pi;
        if (st == DSK_STATUS_OK) st = dsk_indexer_topk_slots_plan(ctx, f, &pi);
        if (st == DSK_STATUS_OK && pi.workspace_bytes > 0) f->workspace = ialloc(ctx, &mm, (size_t)pi.workspace_bytes, &st);
        f->workspace_bytes = pi.workspace_bytes;
        /* real scores for the top-k rows, and their top-k for the slots rows */
        if (st == DSK_STATUS_OK) st = dsk_indexer_logits(ctx, l);
        if (st == DSK_STATUS_OK) st = dsk_topk(ctx, k);
        if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(ctx, NULL);
        if (st != DSK_STATUS_OK) {
          fprintf(stderr, "bench: %s ctx=%lld T=%d: setup: %s: %s\n", m->model, (long long)context, T,
                  dsk_status_name(st), dsk_last_error());
          rc = 1;
        }
        for (int op = 0; op < OPI_COUNT && !rc; op++) {
          if (op_only >= 0 && op != op_only) continue;
          r.op = op;
          dsk_bench_opts bo = {sizeof bo, NULL, o->quick ? 1 : 3, o->reps > 0 ? o->reps : 20, !o->warm, 1};
          dsk_bench_result br;
          memset(&br, 0, sizeof br);
          br.struct_size = sizeof br;
          st = dsk_bench_run(ctx, run_once, &r, &bo, &br);
          if (st != DSK_STATUS_OK) {
            fprintf(stderr, "bench: %s ctx=%lld T=%d %s: %s: %s\n", m->model, (long long)context, T, k_op_names[op],
                    dsk_status_name(st), dsk_last_error());
            rc = 1;
            break;
          }
          const double us = br.median_us;
          const double bytes = op == OPI_TOPK    ? 4.0 * (double)scored + 4.0 * (double)T * (double)K
                               : op == OPI_SLOTS ? 8.0 * (double)T * (double)K
                                                 : 132.0 * (double)key_entries;
          const double flop = op == OPI_TOPK || op == OPI_SLOTS ? 0.0 : 2.0 * (double)H * 128.0 * (double)scored;
          const double gbps = us > 0 ? bytes / (us * 1e3) : 0.0, pct = copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0;
          char goal[24] = "";
          if (op == OPI_LOGITS && context == 131072) snprintf(goal, sizeof goal, ">=70%%:%s", pct >= 70.0 ? "yes" : "no");
          if (op == OPI_TOPK && K == 2048 && entries == 131072 && T == 64)
            snprintf(goal, sizeof goal, "<=50us:%s", us <= 50.0 ? "yes" : "no");
          fprintf(out, "%s,%lld,%lld,%lld,%lld,%lld,%d,%lld,%s,%.2f,%.1f,%.1f,%.3f,%.0f,%s\n", m->model,
                  (long long)m->ratio, (long long)H, (long long)K, (long long)context, (long long)entries, T,
                  (long long)reqs, k_op_names[op], us, gbps, pct, us > 0 ? flop / (us * 1e6) : 0.0, bytes, goal);
          fflush(out);
        }
        imem_free(ctx, &mm);
        ihost_free(&h);
      }
    }
  }
  dsk_mem_free(ctx, pool);
  return rc;
}
