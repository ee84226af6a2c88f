/* warmup.c - dsk_warmup_enumerate / dsk_warmup_run (autotune.md §6, A20):
 * every (op, key) a model can emit under a serving envelope, then tune what
 * the context lacks and pre-run the rest. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tuner.h"

typedef struct warmup_item {
  dsk__tune_shape s; /* T = the bucket; widths as keyed */
  char key[DSK__TUNE_KEY_MAX];
  char label[80];
} warmup_item;

struct dsk_warmup_list {
  warmup_item *it;
  int64_t n, cap;
};

void dsk_serving_desc_init(dsk_serving_desc *s) {
  if (!s) return;
  memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
  s->tp = 1;
}

static dsk_status add_item(dsk_warmup_list *l, const dsk__tune_shape *s, const char *label) {
  if (l->n == l->cap) {
    int64_t cap = l->cap ? l->cap * 2 : 64;
    warmup_item *n = (warmup_item *)realloc(l->it, sizeof *n * (size_t)cap);
    if (!n) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_warmup_enumerate: out of host memory");
    l->it = n;
    l->cap = cap;
  }
  warmup_item *w = &l->it[l->n];
  memset(w, 0, sizeof *w);
  w->s = *s;
  dsk__tune_bucket_shape(&w->s);
  if (dsk__tune_key(&w->s, 1, w->key, sizeof w->key) < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_enumerate: key of %s does not fit", label);
  for (int64_t i = 0; i < l->n; i++) /* lists are a few hundred keys */
    if (strcmp(l->it[i].key, w->key) == 0) return DSK_STATUS_OK;
  snprintf(w->label, sizeof w->label, "%s", label);
  l->n++;
  return DSK_STATUS_OK;
}

static dsk_status add_token_buckets(dsk_warmup_list *l, dsk__tune_shape s, const int64_t *Tb, int nT,
                                    const char *label) {
  for (int i = 0; i < nT; i++) {
    s.T = Tb[i];
    dsk_status st = add_item(l, &s, label);
    if (st != DSK_STATUS_OK) return st;
  }
  return DSK_STATUS_OK;
}

/* MoE keys (autotune.md §6's table): moe_gemm FC1 (N = 2I/t, K = H) and FC2
 * (N = H, K = I/t) with E_local = E, or with expert parallelism whole
 * experts (I not sharded) and E_local = E/t; at every token bucket, one key
 * per A_used that dsk_moe_run reaches for the token counts the bucket
 * serves (A5); then dense_fp8_gemm for the shared expert ((2 I_s/t, H),
 * (H, I_s/t), I_s = I * n_shared) and the dense MLP layers
 * (first_k_dense: (2 I_d/t, H), (H, I_d/t)). Expert weights: MXFP4 for
 * DeepSeek-V4 (Format B models), FP8 otherwise. An op the context's backend
 * does not serve, or a geometry the MoE ops cannot run (a dimension that is
 * not a multiple of 128, t not dividing it), yields no keys (logged at
 * info), so warmup never fails on it. */
static int gemm_dim_ok(int64_t v) { return v >= 128 && v <= DSK_MOE_MAX_K && v % 128 == 0; }

/* A_used of dsk_moe_run (dsk's (128, 64, 64) family, cap 128) at T tokens. */
static int64_t moe_a_used(int64_t T, int64_t topk, int64_t E_local) {
  dsk_moe_align_desc ad;
  memset(&ad, 0, sizeof ad);
  ad.struct_size = sizeof ad;
  ad.M = T;
  ad.topk = topk;
  ad.E_local = E_local;
  ad.family = DSK_MOE_ALIGN_DSK;
  int64_t ms = 0, au = 0;
  if (dsk_moe_aligned_m(&ad, &ms, &au) != DSK_STATUS_OK) return 0;
  return au;
}

static dsk_status add_dense(dsk_warmup_list *l, int64_t N, int64_t K, const int64_t *Tb, int nT, const char *what) {
  dsk__tune_shape s;
  memset(&s, 0, sizeof s);
  s.op = DSK_OP_MOE_DENSE_GEMM;
  s.N = N;
  s.K = K;
  char label[80];
  snprintf(label, sizeof label, "%s N=%lld K=%lld", what, (long long)N, (long long)K);
  return add_token_buckets(l, s, Tb, nT, label);
}

static dsk_status enumerate_moe(dsk_ctx *ctx, dsk_warmup_list *l, const dsk_model_desc *m, const dsk_serving_desc *sv,
                                const int64_t *Tb, int nT, int64_t max_tokens) {
  const int64_t tp = sv->tp > 0 ? sv->tp : 1, H = m->hidden_size;
  const char *bname = ctx->backend->name;
  dsk_status st = DSK_STATUS_OK;
  const int64_t E = m->n_routed_experts, topk = m->num_experts_per_tok, I = m->moe_intermediate_size;
  if (E > 0 && topk > 0 && I > 0) {
    const int64_t El = sv->ep ? E / tp : E, Ir = sv->ep ? I : I / tp;
    const char *why = NULL;
    if (!ctx->backend->moe_gemm)
      why = "the backend does not serve it";
    else if (sv->ep && E % tp != 0)
      why = "tp does not divide the routed experts (expert parallel)";
    else if (!sv->ep && I % tp != 0)
      why = "tp does not divide moe_intermediate_size";
    else if (!gemm_dim_ok(H) || !gemm_dim_ok(Ir) || !gemm_dim_ok(2 * Ir))
      why = "hidden_size or the intermediate size per rank is not a multiple of 128 in 128..131072";
    else if (El < 1 || El > DSK_MOE_MAX_EXPERTS || topk > DSK_MOE_MAX_TOPK || topk > E)
      why = "experts per rank not in 1..1024, or top-k not in 1..min(E, 16)";
    if (why) {
      dsk__log(ctx, DSK_LOG_INFO, "warmup: no moe_gemm keys on %s for %s: %s", bname, m->name, why);
    } else {
      dsk__tune_shape s;
      memset(&s, 0, sizeof s);
      s.op = DSK_OP_MOE_GEMM;
      s.wfmt = m->kv_format == DSK_KV_FORMAT_B584 ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8;
      s.E = El;
      s.topk = topk;
      for (int fc = 1; fc <= 2 && st == DSK_STATUS_OK; fc++) {
        s.N = fc == 1 ? 2 * Ir : H;
        s.K = fc == 1 ? H : Ir;
        for (int i = 0; i < nT && st == DSK_STATUS_OK; i++) {
          /* T in (previous bucket, this bucket] (the last bucket also serves
           * T up to max_tokens). A_used grows with T and takes only the
           * values 64 and 128, so the ends of the range give every value. */
          const int64_t lo = i > 0 ? Tb[i - 1] + 1 : 1;
          const int64_t hi = i == nT - 1 && max_tokens > Tb[i] ? max_tokens : Tb[i];
          const int64_t a_lo = moe_a_used(lo, topk, El), a_hi = moe_a_used(hi, topk, El);
          const int64_t av[2] = {a_lo, a_hi};
          for (int k = 0; k < 2 && st == DSK_STATUS_OK; k++) {
            if (av[k] < 64 || (k == 1 && av[1] == av[0])) continue;
            s.A = av[k];
            s.T = Tb[i];
            char label[80];
            snprintf(label, sizeof label, "MoE FC%d %s N=%lld K=%lld A=%lld", fc,
                     s.wfmt == DSK_MOE_W_FP8 ? "fp8" : "mxfp4", (long long)s.N, (long long)s.K, (long long)s.A);
            st = add_item(l, &s, label);
          }
        }
      }
    }
  }
  if (st != DSK_STATUS_OK) return st;
  /* dense_fp8_gemm: the shared expert, then the dense MLP layers */
  struct {
    int64_t I;
    const char *what;
  } dense[2] = {{m->n_shared_experts > 0 && I > 0 ? I * m->n_shared_experts : 0, "shared expert"},
                {m->first_k_dense > 0 ? m->dense_intermediate_size : 0, "dense MLP"}};
  for (int j = 0; j < 2 && st == DSK_STATUS_OK; j++) {
    if (dense[j].I <= 0) continue;
    const int64_t Ir = dense[j].I / tp;
    const char *why = NULL;
    if (!ctx->backend->dense_fp8_gemm)
      why = "the backend does not serve it";
    else if (dense[j].I % tp != 0)
      why = "tp does not divide the intermediate size";
    else if (!gemm_dim_ok(H) || !gemm_dim_ok(Ir) || !gemm_dim_ok(2 * Ir))
      why = "hidden_size or the intermediate size per rank is not a multiple of 128 in 128..131072";
    if (why) {
      dsk__log(ctx, DSK_LOG_INFO, "warmup: no dense_fp8_gemm keys (%s) on %s for %s: %s", dense[j].what, bname,
               m->name, why);
      continue;
    }
    char what[40];
    snprintf(what, sizeof what, "%s FC1", dense[j].what);
    st = add_dense(l, 2 * Ir, H, Tb, nT, what);
    snprintf(what, sizeof what, "%s FC2", dense[j].what);
    if (st == DSK_STATUS_OK) st = add_dense(l, H, Ir, Tb, nT, what);
  }
  return st;
}

static dsk_status check_model(const dsk_model_desc *m) {
  const char *fn = "dsk_warmup_enumerate";
  if (!m) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model is NULL", fn);
  if (m->struct_size < sizeof *m)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->struct_size %zu < %zu", fn, m->struct_size, sizeof *m);
  if (m->kv_format != DSK_KV_FORMAT_A656 && m->kv_format != DSK_KV_FORMAT_B584)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->kv_format %d is not A656 (1) or B584 (2)", fn,
                     (int)m->kv_format);
  if (m->num_heads < 1) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->num_heads %lld < 1", fn, (long long)m->num_heads);
  if (m->num_layers < 1 || m->num_layers > DSK_MODEL_MAX_LAYERS)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->num_layers %lld is not 1..%d", fn, (long long)m->num_layers,
                     DSK_MODEL_MAX_LAYERS);
  if (m->index_topk < 1 || m->index_topk > INT32_MAX)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->index_topk %lld is not >= 1", fn, (long long)m->index_topk);
  if (m->max_positions < 1)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->max_positions %lld < 1", fn, (long long)m->max_positions);
  if (m->num_mtp_layers < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->num_mtp_layers %lld < 0", fn, (long long)m->num_mtp_layers);
  if (m->kv_format == DSK_KV_FORMAT_B584) {
    if (m->sliding_window < 1)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->sliding_window %lld < 1 (DeepSeek-V4)", fn,
                       (long long)m->sliding_window);
    for (int64_t l = 0; l < m->num_layers; l++)
      if (m->compress_ratio[l] != 0 && m->compress_ratio[l] != 4 && m->compress_ratio[l] != 128)
        return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->compress_ratio[%lld] %d is not 0, 4 or 128", fn,
                         (long long)l, (int)m->compress_ratio[l]);
    if (m->hc_mult < 0)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->hc_mult %lld < 0", fn, (long long)m->hc_mult);
  }
  return DSK_STATUS_OK;
}

static dsk_status check_list(const char *name, const int64_t *v, int n, int64_t lo, int64_t hi) {
  if (n < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_enumerate: serving->num_%s %d < 0", name, n);
  if (n > 256) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_enumerate: serving->num_%s %d > 256", name, n);
  if (n > 0 && !v)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_enumerate: serving->%s is NULL with %d entries", name, n);
  for (int i = 0; i < n; i++)
    if (v[i] < lo || v[i] > hi)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_enumerate: serving->%s[%d] %lld is not in %lld..%lld", name,
                       i, (long long)v[i], (long long)lo, (long long)hi);
  return DSK_STATUS_OK;
}

dsk_status dsk_warmup_enumerate(dsk_ctx *ctx, const dsk_model_desc *m, const dsk_serving_desc *sv,
                                dsk_warmup_list **out) {
  const char *fn = "dsk_warmup_enumerate";
  if (out) *out = NULL;
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: ctx is NULL", fn);
  if (!out) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: list is NULL", fn);
  dsk_status st = check_model(m);
  if (st != DSK_STATUS_OK) return st;
  if (!sv) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving is NULL", fn);
  if (sv->struct_size < sizeof *sv)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving->struct_size %zu < %zu", fn, sv->struct_size, sizeof *sv);
  const int64_t tp = sv->tp > 0 ? sv->tp : 1;
  if (sv->tp < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving->tp %d < 0", fn, sv->tp);
  if (m->num_heads % tp != 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving->tp %lld does not divide the model's %lld heads", fn,
                     (long long)tp, (long long)m->num_heads);
  const int64_t H = m->num_heads / tp;
  if (H > 128)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: %lld heads per rank (heads %lld / tp %lld) > 128", fn, (long long)H,
                     (long long)m->num_heads, (long long)tp);
  if ((st = check_list("capture_sizes", sv->capture_sizes, sv->num_capture_sizes, 1, INT32_MAX)) != DSK_STATUS_OK)
    return st;
  if ((st = check_list("swa_widths", sv->swa_widths, sv->num_swa_widths, 1, INT32_MAX)) != DSK_STATUS_OK) return st;
  if (sv->max_tokens < 0 || sv->max_tokens > INT32_MAX)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving->max_tokens %lld is not in 0..2^31-1", fn,
                     (long long)sv->max_tokens);
  if (sv->max_context < 0 || sv->max_context > ((int64_t)1 << 40))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving->max_context %lld is not in 0..2^40", fn,
                     (long long)sv->max_context);
  if (sv->draft_tokens < 0 || sv->draft_tokens > 64)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving->draft_tokens %d is not in 0..64", fn, sv->draft_tokens);
  const int64_t pbs = sv->page_size ? sv->page_size : 64;
  const int64_t pbs4 = sv->c4a_page_size ? sv->c4a_page_size : 64;
  const int64_t pbs128 = sv->c128a_page_size ? sv->c128a_page_size : 2;
  if (pbs < 1 || pbs4 < 1 || pbs128 < 1 || pbs > (1 << 20) || pbs4 > (1 << 20) || pbs128 > (1 << 20))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving page sizes (%lld, %lld, %lld) must be in 1..2^20", fn,
                     (long long)sv->page_size, (long long)sv->c4a_page_size, (long long)sv->c128a_page_size);
  if (sv->precision != DSK_PRECISION_ACCURATE && sv->precision != DSK_PRECISION_FAST)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: serving->precision %d is not ACCURATE (0) or FAST (1)", fn,
                     (int)sv->precision);
  const int64_t max_tokens = sv->max_tokens ? sv->max_tokens : 8192;
  const int64_t max_ctx = sv->max_context ? sv->max_context : m->max_positions;

  int64_t Tb[600];
  int nT = dsk__tune_token_buckets(sv->capture_sizes, sv->num_capture_sizes, sv->capture_sizes_are_batches,
                                   sv->draft_tokens, max_tokens, Tb, 600);
  if (nT < 1) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: no token buckets (capture sizes?)", fn);

  dsk_warmup_list *l = (dsk_warmup_list *)calloc(1, sizeof *l);
  if (!l) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "%s: out of host memory", fn);
  dsk__tune_shape s;
  memset(&s, 0, sizeof s);
  s.op = DSK_OP_SPARSE_MLA_DECODE;
  s.format = (int)m->kv_format;
  s.precision = (int)sv->precision;
  s.H = H;
  char label[80];
  if (m->kv_format == DSK_KV_FORMAT_B584) {
    /* Segment-0 widths (A3, A20): as given, default the model's window. */
    int64_t W[256];
    int nW = 0;
    if (sv->num_swa_widths > 0) {
      for (int i = 0; i < sv->num_swa_widths; i++) {
        int dup = 0;
        for (int j = 0; j < nW; j++) dup |= W[j] == sv->swa_widths[i];
        if (!dup) W[nW++] = sv->swa_widths[i];
      }
    } else {
      W[nW++] = m->sliding_window;
    }
    int has[3] = {0, 0, 0}; /* ratio 0 (SWA only; MTP layers too), 4, 128 */
    for (int64_t i = 0; i < m->num_layers; i++)
      has[m->compress_ratio[i] == 0 ? 0 : m->compress_ratio[i] == 4 ? 1 : 2] = 1;
    if (m->num_mtp_layers > 0) has[0] = 1;
    /* A4: C128A widths up to round_up(ceil(max_context / 128), 128). */
    int64_t cmax = (max_ctx + 127) / 128;
    cmax = (cmax + 127) / 128 * 128;
    int64_t Wc[256];
    int nWc = dsk__tune_width_buckets(cmax, Wc, 256);
    if (nWc < 0) nWc = 0;
    for (int wi = 0; wi < nW && st == DSK_STATUS_OK; wi++) {
      s.w[0] = W[wi];
      s.pbs[0] = pbs;
      if (has[0]) {
        s.nseg = 1;
        s.w[1] = s.pbs[1] = 0;
        snprintf(label, sizeof label, "SWA W=%lld", (long long)W[wi]);
        st = add_token_buckets(l, s, Tb, nT, label);
      }
      if (has[1] && st == DSK_STATUS_OK) {
        s.nseg = 2;
        s.w[1] = m->index_topk;
        s.pbs[1] = pbs4;
        snprintf(label, sizeof label, "C4A W=%lld top-%lld", (long long)W[wi], (long long)m->index_topk);
        st = add_token_buckets(l, s, Tb, nT, label);
      }
      for (int ci = 0; has[2] && ci < nWc && st == DSK_STATUS_OK; ci++) {
        s.nseg = 2;
        s.w[1] = Wc[ci];
        s.pbs[1] = pbs128;
        snprintf(label, sizeof label, "C128A W=%lld w1=%lld", (long long)W[wi], (long long)Wc[ci]);
        st = add_token_buckets(l, s, Tb, nT, label);
      }
    }
    /* mhc_prenorm: nD = 4 * hidden, not sharded. */
    if (st == DSK_STATUS_OK && m->hc_mult == DSK_MHC_STREAMS && m->hidden_size >= 8 &&
        m->hidden_size <= DSK_MHC_MAX_D && m->hidden_size % 8 == 0) {
      dsk__tune_shape h;
      memset(&h, 0, sizeof h);
      h.op = DSK_OP_MHC_PRENORM;
      h.nD = DSK_MHC_STREAMS * m->hidden_size;
      snprintf(label, sizeof label, "mHC nD=%lld", (long long)h.nD);
      st = add_token_buckets(l, h, Tb, nT, label);
    }
  } else {
    /* DSA (Format A): one segment, the indexer's top-k. */
    s.nseg = 1;
    s.w[0] = m->index_topk;
    s.pbs[0] = pbs;
    snprintf(label, sizeof label, "DSA top-%lld", (long long)m->index_topk);
    st = add_token_buckets(l, s, Tb, nT, label);
  }
  if (st == DSK_STATUS_OK) st = enumerate_moe(ctx, l, m, sv, Tb, nT, max_tokens);
  if (st != DSK_STATUS_OK) {
    dsk_warmup_list_free(l);
    return st;
  }
  *out = l;
  return DSK_STATUS_OK;
}

int64_t dsk_warmup_list_size(const dsk_warmup_list *l) { return l ? l->n : 0; }

dsk_status dsk_warmup_list_item(const dsk_warmup_list *l, int64_t i, dsk_warmup_item *item) {
  if (!l) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_list_item: list is NULL");
  if (!item) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_list_item: item is NULL");
  if (item->struct_size < sizeof *item)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_list_item: item->struct_size %zu < %zu", item->struct_size,
                     sizeof *item);
  if (i < 0 || i >= l->n)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_list_item: index %lld is not in 0..%lld", (long long)i,
                     (long long)l->n - 1);
  size_t keep = item->struct_size;
  memset(item, 0, sizeof *item);
  item->struct_size = keep;
  item->op = (dsk_op)l->it[i].s.op;
  item->key = l->it[i].key;
  item->label = l->it[i].label;
  item->T = l->it[i].s.T;
  return DSK_STATUS_OK;
}

void dsk_warmup_list_free(dsk_warmup_list *l) {
  if (!l) return;
  free(l->it);
  free(l);
}

/* ---------------------------------------------------------------- run */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int op_served(const dsk_ctx *ctx, int op) {
  switch (op) {
    case DSK_OP_SPARSE_MLA_DECODE: return ctx->backend->sparse_mla_decode != NULL;
    case DSK_OP_MHC_PRENORM: return ctx->backend->mhc_prenorm != NULL;
    case DSK_OP_MOE_GEMM: return ctx->backend->moe_gemm != NULL;
    case DSK_OP_MOE_DENSE_GEMM: return ctx->backend->dense_fp8_gemm != NULL;
    default: return 0;
  }
}

dsk_status dsk_warmup_run(dsk_ctx *ctx, const dsk_warmup_list *l, unsigned flags, dsk_warmup_progress_fn progress,
                          void *user) {
  return dsk__warmup_run(ctx, l, flags, progress, user, 0);
}

dsk_status dsk__warmup_run(dsk_ctx *ctx, const dsk_warmup_list *l, unsigned flags, dsk_warmup_progress_fn progress,
                           void *user, int assume_capturing) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_run: ctx is NULL");
  if (!l) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_run: list is NULL");
  if (flags & ~(DSK_WARMUP_NO_TUNE | DSK_WARMUP_FORCE | DSK_WARMUP_NO_SAVE))
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_warmup_run: unknown flags 0x%x", flags);
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_warmup_run: out of host memory");
  const dsk__tune_settings *set = dsk__tuner_settings(t);
  const int no_tune = (flags & DSK_WARMUP_NO_TUNE) || set->mode == 0;
  const int force = (flags & DSK_WARMUP_FORCE) || set->mode == 2;
  dsk__tune_scratch *sc = dsk__tune_scratch_new(ctx);
  if (!sc) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_warmup_run: out of host memory");
  const double t0 = now_s();
  int64_t tuned = 0, captured = 0;
  dsk_status st = DSK_STATUS_OK;
  for (int64_t i = 0; i < l->n && st == DSK_STATUS_OK; i++) {
    const warmup_item *w = &l->it[i];
    dsk_warmup_item item;
    memset(&item, 0, sizeof item);
    item.struct_size = sizeof item;
    item.op = (dsk_op)w->s.op;
    item.key = w->key;
    item.label = w->label;
    item.T = w->s.T;
    dsk_warmup_progress p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.index = i;
    p.total = l->n;
    p.item = &item;
    p.us_best = p.us_heuristic = -1;
    char reason[200] = "";
    int in_capture = 0;
    if (!op_served(ctx, w->s.op)) {
      snprintf(reason, sizeof reason, "backend %s does not serve %s", ctx->backend->name, dsk_op_name(item.op));
      p.action = DSK_WARMUP_SKIPPED;
    } else if (assume_capturing || dsk__tune_stream_capturing(ctx)) {
      /* A10: the stream is capturing a CUDA graph: nothing is timed,
       * allocated or launched; the key keeps its entry, or the heuristic
       * stands in and the key counts as a miss (listed, warned once). */
      dsk_tactic h, use;
      dsk__tune_heuristic(ctx, &w->s, &h);
      int src = DSK_TACTIC_HEURISTIC;
      dsk__tune_resolve(ctx, &w->s, &h, DSK__TUNE_CAPTURE, &use, &src);
      snprintf(reason, sizeof reason, "the stream is capturing a CUDA graph (A10): not timed or run; %s",
               src == DSK_TACTIC_TUNED ? "its tuned entry stays" : "the heuristic stands in (a miss)");
      p.tactic = use;
      p.action = DSK_WARMUP_SKIPPED;
      in_capture = 1;
      captured++;
    } else {
      const dsk__tune_entry *e = dsk__tuner_find(t, w->key);
      if (!no_tune && (!e || force)) {
        dsk__tune_result r;
        st = dsk__tune_time_key(ctx, sc, &w->s, &r);
        if (st != DSK_STATUS_OK) break;
        if (r.skip_reason[0]) {
          snprintf(reason, sizeof reason, "%s", r.skip_reason);
          p.action = DSK_WARMUP_SKIPPED;
        } else {
          dsk__tune_entry ne;
          memset(&ne, 0, sizeof ne);
          ne.key = (char *)w->key;
          ne.t = r.best;
          ne.us = r.us_best;
          ne.us2 = r.us_second;
          ne.uh = r.us_heuristic;
          ne.dirty = 1;
          if ((st = dsk__tuner_put(t, &ne)) != DSK_STATUS_OK) break;
          dsk__tuner_count_tuned(t);
          tuned++;
          p.action = DSK_WARMUP_TUNED;
          p.tactic = r.best;
          p.num_tactics = r.num_tactics;
          p.us_best = r.us_best;
          p.us_heuristic = r.us_heuristic;
        }
      } else {
        /* Pre-run once with the tactic a run call would use. */
        dsk_tactic h, use;
        dsk__tune_heuristic(ctx, &w->s, &h);
        int src = DSK_TACTIC_HEURISTIC;
        dsk__tune_resolve(ctx, &w->s, &h, DSK__TUNE_FOLLOW, &use, &src);
        st = dsk__tune_prerun_key(ctx, sc, &w->s, &use, reason, sizeof reason);
        if (st != DSK_STATUS_OK) break;
        p.tactic = use;
        p.action = reason[0] ? DSK_WARMUP_SKIPPED : e ? DSK_WARMUP_CACHED : DSK_WARMUP_PRERUN;
      }
    }
    p.reason = reason[0] ? reason : NULL;
    p.elapsed_s = now_s() - t0;
    if (p.action == DSK_WARMUP_SKIPPED && !in_capture) { /* a capture warns once, after the loop */
      char k[DSK__TUNE_KEY_MAX + 16];
      snprintf(k, sizeof k, "warmup-skip:%s", w->key);
      dsk__warn_once(ctx, k, "warmup: %s skipped: %s", w->label, reason);
    }
    if (progress) progress(&p, user);
    if ((i + 1) % 50 == 0 || i + 1 == l->n)
      dsk__log(ctx, DSK_LOG_INFO, "warmup: %lld/%lld keys, %lld tuned, %.1f s", (long long)(i + 1), (long long)l->n,
               (long long)tuned, now_s() - t0);
  }
  dsk__tune_scratch_free(sc);
  if (captured)
    dsk__log(ctx, DSK_LOG_WARN,
             "warmup: the context's stream was capturing a CUDA graph: %lld of %lld keys were not timed (A10); run "
             "dsk_warmup_run outside the capture",
             (long long)captured, (long long)l->n);
  /* Save what was tuned (or imported) so far, even after an error. */
  int dirty = 0;
  for (int64_t i = 0; i < dsk__tuner_count(t) && !dirty; i++) dirty = dsk__tuner_at(t, i)->dirty;
  if (dirty && !(flags & DSK_WARMUP_NO_SAVE)) {
    char err[512];
    snprintf(err, sizeof err, "%s", dsk_last_error());
    dsk_status ss = dsk__tune_save(ctx, t, force);
    if (ss != DSK_STATUS_OK) {
      char k[600];
      snprintf(k, sizeof k, "warmup-save:%s", dsk_last_error());
      dsk__warn_once(ctx, k, "warmup: the cache was not saved (%s); tuned entries stay in memory", dsk_last_error());
      if (st != DSK_STATUS_OK) dsk__set_error("%s", err);
    }
  }
  return st;
}
