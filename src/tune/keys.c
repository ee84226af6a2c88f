/* keys.c - op keys of the tunable ops (autotune.md §1-§2, A15), token and
 * width buckets (A2-A4), the canonical tactic order (A9) and the launch-cost
 * estimate that picks the repeat counts (A7). The tactic sets and heuristics
 * themselves live next to each op (src/ops/sparse_mla.c, src/ops/mhc.c,
 * src/ops/moe_gemm.c). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/ops.h"
#include "tuner.h"

int dsk__tune_op_tunable(int op) {
  return op == DSK_OP_SPARSE_MLA_DECODE || op == DSK_OP_MHC_PRENORM || op == DSK_OP_MOE_GEMM ||
         op == DSK_OP_MOE_DENSE_GEMM;
}

int32_t dsk__tune_tactic_version(int op) {
  switch (op) {
    case DSK_OP_SPARSE_MLA_DECODE: return DSK_SPARSE_MLA_TACTIC_VERSION;
    case DSK_OP_MHC_PRENORM: return DSK_MHC_TACTIC_VERSION;
    case DSK_OP_MOE_GEMM: return DSK_MOE_GEMM_TACTIC_VERSION;
    case DSK_OP_MOE_DENSE_GEMM: return DSK_DENSE_GEMM_TACTIC_VERSION;
    default: return -1;
  }
}

int64_t dsk__tune_rows(const dsk__tune_shape *s) {
  return s->op == DSK_OP_MOE_GEMM && s->topk > 0 ? s->T * s->topk : s->T;
}

const char *dsk__tune_base_end(int op) { return op == DSK_OP_MOE_GEMM ? ";topk=" : ";T="; }

/* ----------------------------------------------------------- buckets */
const int64_t dsk__tune_default_decode[11] = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64};

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Sorts, drops duplicates and values < 1. */
static int sort_unique(int64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_i64);
  int m = 0;
  for (int i = 0; i < n; i++)
    if (v[i] >= 1 && (m == 0 || v[m - 1] != v[i])) v[m++] = v[i];
  return m;
}

int dsk__tune_token_buckets(const int64_t *capture, int ncapture, int capture_are_batches, int draft_tokens,
                            int64_t max_tokens, int64_t *out, int max) {
  int64_t tmp[512];
  int n = 0;
  const int64_t mult = draft_tokens > 0 ? 1 + (int64_t)draft_tokens : 1;
  /* Decode buckets D (A2, A3). The default list counts requests: with k
   * draft tokens a step of b requests has b*(1+k) tokens. Capture sizes are
   * token counts unless the engine says they count requests. */
  int given = capture && ncapture > 0;
  int nd = given ? ncapture : 11;
  if (nd > 256) return -1;
  for (int i = 0; i < nd; i++) {
    int64_t b = given ? capture[i] : dsk__tune_default_decode[i];
    if (b < 1) continue;
    tmp[n++] = (!given || capture_are_batches) ? b * mult : b;
  }
  int nD = sort_unique(tmp, n);
  n = nD;
  /* Default decode buckets stop at the first one that covers max_tokens
   * (larger steps cannot happen). Capture sizes are kept as given. */
  if (!given && max_tokens > 0) {
    int keep = 0;
    while (keep < n && (keep == 0 || tmp[keep - 1] < max_tokens)) keep++;
    n = keep;
  }
  int64_t dmax = n > 0 ? tmp[n - 1] : 0;
  /* Prefill buckets P: powers of two 128..16384, up to the first one that
   * covers max_tokens; only those above the decode buckets matter. */
  if (max_tokens > dmax) {
    for (int64_t p = 128; p <= 16384; p *= 2) {
      if (p > dmax) tmp[n++] = p;
      if (p >= max_tokens) break;
    }
  }
  n = sort_unique(tmp, n);
  if (n > max) return -1;
  memcpy(out, tmp, sizeof(int64_t) * (size_t)n);
  return n;
}

int64_t dsk__tune_default_bucket(int64_t T) {
  if (T < 1) T = 1;
  for (int i = 0; i < 11; i++)
    if (dsk__tune_default_decode[i] >= T) return dsk__tune_default_decode[i];
  for (int64_t p = 128; p <= 16384; p *= 2)
    if (p >= T) return p;
  return 16384;
}

int64_t dsk__tune_width_bucket(int64_t w) {
  if (w < 1) w = 1;
  int64_t step = w <= 1024 ? 128 : w <= 4096 ? 512 : 1024;
  return (w + step - 1) / step * step;
}

int dsk__tune_width_buckets(int64_t max_width, int64_t *out, int max) {
  int64_t top = dsk__tune_width_bucket(max_width);
  int n = 0;
  for (int64_t w = 128; w <= top; w = dsk__tune_width_bucket(w + 1)) {
    if (n >= max) return -1;
    out[n++] = w;
  }
  return n;
}

/* ------------------------------------------------------------- keys */
static const char *op_name(int op) { return dsk_op_name((dsk_op)op); }

void dsk__tune_bucket_shape(dsk__tune_shape *s) {
  /* A4: the Format B segment-1 width (C128A; C4A widths 512 / 1024 are
   * bucket values, so they stay exact) is bucketed. */
  if (s->op == DSK_OP_SPARSE_MLA_DECODE && s->format == DSK_KV_FORMAT_B584 && s->nseg == 2)
    s->w[1] = dsk__tune_width_bucket(s->w[1]);
}

int dsk__tune_key(const dsk__tune_shape *s, int with_T, char *buf, size_t n) {
  const char *kb = dsk_kernel_build_id((dsk_op)s->op);
  if (!kb || n == 0) return -1;
  int len;
  if (s->op == DSK_OP_SPARSE_MLA_DECODE) {
    len = snprintf(buf, n, "op=%s;kb=%s;fmt=%s;prec=%s;H=%" PRId64 ";w0=%" PRId64 ";pbs0=%" PRId64 ";w1=%" PRId64
                           ";pbs1=%" PRId64 ";",
                   op_name(s->op), kb, s->format == DSK_KV_FORMAT_A656 ? "A" : "B",
                   s->precision == DSK_PRECISION_FAST ? "fast" : "accurate", s->H, s->w[0], s->pbs[0],
                   s->nseg == 2 ? s->w[1] : 0, s->nseg == 2 ? s->pbs[1] : 0);
  } else if (s->op == DSK_OP_MHC_PRENORM) {
    len = snprintf(buf, n, "op=%s;kb=%s;nD=%" PRId64 ";", op_name(s->op), kb, s->nD);
  } else if (s->op == DSK_OP_MOE_GEMM) {
    /* topk and T after the base: the group of a base key is ordered by rows (T*topk) */
    len = snprintf(buf, n, "op=%s;kb=%s;fmt=%s;N=%" PRId64 ";K=%" PRId64 ";E=%" PRId64 ";A=%" PRId64 ";",
                   op_name(s->op), kb, s->wfmt == DSK_MOE_W_FP8 ? "fp8" : "mxfp4", s->N, s->K, s->E, s->A);
  } else if (s->op == DSK_OP_MOE_DENSE_GEMM) {
    len = snprintf(buf, n, "op=%s;kb=%s;N=%" PRId64 ";K=%" PRId64 ";", op_name(s->op), kb, s->N, s->K);
  } else {
    return -1;
  }
  if (len < 0 || (size_t)len >= n) return -1;
  if (with_T) {
    int l2 = s->op == DSK_OP_MOE_GEMM
                 ? snprintf(buf + len, n - (size_t)len, "topk=%" PRId64 ";T=%" PRId64 ";", s->topk, s->T)
                 : snprintf(buf + len, n - (size_t)len, "T=%" PRId64 ";", s->T);
    if (l2 < 0 || (size_t)(len + l2) >= n) return -1;
    len += l2;
  }
  return len;
}

/* Reads "name=<int>;" at *p. */
static int take_int(const char **p, const char *name, int64_t lo, int64_t hi, int64_t *v) {
  size_t k = strlen(name);
  if (strncmp(*p, name, k) != 0 || (*p)[k] != '=') return -1;
  const char *q = *p + k + 1;
  if (*q < '0' || *q > '9') return -1;
  int64_t x = 0;
  int digits = 0;
  while (*q >= '0' && *q <= '9') {
    if (++digits > 12) return -1;
    x = x * 10 + (*q - '0');
    q++;
  }
  if (*q != ';' || x < lo || x > hi) return -1;
  *v = x;
  *p = q + 1;
  return 0;
}

/* Reads "name=<word>;" and returns the index of the word in words. */
static int take_word(const char **p, const char *name, const char *const *words) {
  size_t k = strlen(name);
  if (strncmp(*p, name, k) != 0 || (*p)[k] != '=') return -1;
  const char *q = *p + k + 1;
  for (int i = 0; words[i]; i++) {
    size_t m = strlen(words[i]);
    if (strncmp(q, words[i], m) == 0 && q[m] == ';') {
      *p = q + m + 1;
      return i;
    }
  }
  return -1;
}

int dsk__tune_parse_key(const char *key, dsk__tune_shape *s, char kb[17]) {
  memset(s, 0, sizeof *s);
  const char *p = key;
  if (strncmp(p, "op=", 3) != 0) return -1;
  p += 3;
  const char *semi = strchr(p, ';');
  if (!semi || semi - p > 40) return -1;
  char name[48];
  memcpy(name, p, (size_t)(semi - p));
  name[semi - p] = 0;
  static const int ops[] = {DSK_OP_SPARSE_MLA_DECODE, DSK_OP_MHC_PRENORM, DSK_OP_MOE_GEMM, DSK_OP_MOE_DENSE_GEMM};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0] && !s->op; i++)
    if (strcmp(name, op_name(ops[i])) == 0) s->op = ops[i];
  if (!s->op) return -1;
  p = semi + 1;
  if (strncmp(p, "kb=", 3) != 0) return -1;
  p += 3;
  for (int i = 0; i < 16; i++) {
    char c = p[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return -1;
    kb[i] = c;
  }
  kb[16] = 0;
  if (p[16] != ';') return -1;
  p += 17;
  int64_t v;
  if (s->op == DSK_OP_SPARSE_MLA_DECODE) {
    static const char *const fmts[] = {"A", "B", NULL};
    static const char *const precs[] = {"accurate", "fast", NULL};
    int f = take_word(&p, "fmt", fmts);
    if (f < 0) return -1;
    s->format = f == 0 ? DSK_KV_FORMAT_A656 : DSK_KV_FORMAT_B584;
    int pr = take_word(&p, "prec", precs);
    if (pr < 0) return -1;
    s->precision = pr == 0 ? DSK_PRECISION_ACCURATE : DSK_PRECISION_FAST;
    if (take_int(&p, "H", 1, 128, &s->H)) return -1;
    if (take_int(&p, "w0", 1, INT32_MAX, &s->w[0])) return -1;
    if (take_int(&p, "pbs0", 1, INT32_MAX, &s->pbs[0])) return -1;
    if (take_int(&p, "w1", 0, INT32_MAX, &s->w[1])) return -1;
    if (take_int(&p, "pbs1", 0, INT32_MAX, &s->pbs[1])) return -1;
    if ((s->w[1] == 0) != (s->pbs[1] == 0)) return -1;
    s->nseg = s->w[1] ? 2 : 1;
  } else if (s->op == DSK_OP_MHC_PRENORM) {
    if (take_int(&p, "nD", 32, 4 * (int64_t)DSK_MHC_MAX_D, &s->nD) || s->nD % 32 != 0) return -1;
  } else {
    /* moe_gemm / dense_fp8_gemm: the shapes their run calls accept */
    if (s->op == DSK_OP_MOE_GEMM) {
      static const char *const wf[] = {"mxfp4", "fp8", NULL};
      int f = take_word(&p, "fmt", wf);
      if (f < 0) return -1;
      s->wfmt = f == 0 ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8;
    }
    if (take_int(&p, "N", 128, DSK_MOE_MAX_K, &s->N) || s->N % 128 != 0) return -1;
    if (take_int(&p, "K", 128, DSK_MOE_MAX_K, &s->K) || s->K % 128 != 0) return -1;
    if (s->op == DSK_OP_MOE_GEMM) {
      if (take_int(&p, "E", 1, DSK_MOE_MAX_EXPERTS, &s->E)) return -1;
      if (take_int(&p, "A", 64, 1 << 20, &s->A) || s->A % 64 != 0) return -1;
      if (take_int(&p, "topk", 1, DSK_MOE_MAX_TOPK, &s->topk)) return -1;
    }
  }
  if (take_int(&p, "T", 1, INT32_MAX, &v)) return -1;
  s->T = v;
  if (*p != 0) return -1;
  return 0;
}

void dsk__tune_shape_mla_desc(const dsk__tune_shape *s, dsk_sparse_mla_desc *d) {
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->format = (dsk_kv_format)s->format;
  d->precision = (dsk_precision)s->precision;
  d->T = s->T;
  d->H = s->H;
  d->nseg = s->nseg;
  for (int i = 0; i < s->nseg && i < 2; i++) {
    d->seg[i].width = s->w[i];
    d->seg[i].cache.pbs = s->pbs[i];
  }
}

/* ----------------------------------------------------------- tactics */
void dsk__tune_heuristic(const dsk_ctx *ctx, const dsk__tune_shape *s, dsk_tactic *out) {
  memset(out, 0, sizeof *out);
  if (s->op == DSK_OP_SPARSE_MLA_DECODE) {
    dsk_sparse_mla_desc d;
    dsk__tune_shape_mla_desc(s, &d);
    dsk__sparse_mla_heuristic(ctx, &d, out);
  } else if (s->op == DSK_OP_MHC_PRENORM) {
    out->op = DSK_OP_MHC_PRENORM;
    out->version = DSK_MHC_TACTIC_VERSION;
    out->v[0] = (int32_t)dsk_mhc_splits_heuristic(s->nD, s->T, ctx->info.sm_count);
  } else if (s->op == DSK_OP_MOE_GEMM || s->op == DSK_OP_MOE_DENSE_GEMM) {
    dsk__moe_tune_heuristic(ctx, s, out);
  }
}

static int same_tactic(const dsk_tactic *a, const dsk_tactic *b) { return memcmp(a, b, sizeof *a) == 0; }

int dsk__tune_tactics(const dsk_ctx *ctx, const dsk__tune_shape *s, dsk_tactic *out, int max) {
  dsk_tactic all[DSK__TUNE_MAX_TACTICS];
  int n = 0;
  if (s->op == DSK_OP_SPARSE_MLA_DECODE) {
    dsk_sparse_mla_desc d;
    dsk__tune_shape_mla_desc(s, &d);
    n = dsk__sparse_mla_tactics(&d, all);
  } else if (s->op == DSK_OP_MHC_PRENORM) {
    n = dsk__mhc_prenorm_tactics(s->nD, all, DSK__TUNE_MAX_TACTICS);
  } else if (s->op == DSK_OP_MOE_GEMM || s->op == DSK_OP_MOE_DENSE_GEMM) {
    n = dsk__moe_tune_tactics(s, all, DSK__TUNE_MAX_TACTICS);
  }
  if (n == 0 || max < 1) return 0;
  int m = 0;
  dsk__tune_heuristic(ctx, s, &out[m++]);
  for (int i = 0; i < n && m < max; i++)
    if (!same_tactic(&all[i], &out[0])) out[m++] = all[i];
  return m;
}

int dsk__tune_tactic_fix(const dsk__tune_shape *s, dsk_tactic *t) {
  if (s->op == DSK_OP_SPARSE_MLA_DECODE) {
    dsk_sparse_mla_desc d;
    dsk__tune_shape_mla_desc(s, &d);
    return dsk__sparse_mla_tactic_fix(&d, t);
  }
  if (s->op == DSK_OP_MHC_PRENORM) return dsk__mhc_prenorm_tactic_fix(s->nD, t);
  if (s->op == DSK_OP_MOE_GEMM || s->op == DSK_OP_MOE_DENSE_GEMM) return dsk__moe_tune_tactic_fix(s, t);
  return 0;
}

/* ---------------------------------------------------- cost estimate */
/* Peak rates assumed for the estimate (A7; not measured): the CUDA numbers
 * are the H200 ceilings of sparse-decode.md §9 scaled per SM; the CPU ones
 * are what the fp64 reference reaches per thread. Only the 1 ms threshold
 * of A7 reads the estimate, so rough rates suffice. */
static void device_rates(const dsk_ctx *ctx, double *flops, double *bytes) {
  if (ctx->info.is_cuda) {
    int sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
    *flops = 4.8e12 * sms; /* bf16 mma.sync, ~640 TFLOPS on 132 SMs */
    *bytes = ctx->info.cc_major == 9 ? 4.0e12 : 1.5e12;
  } else {
    int th = ctx->info.num_threads > 0 ? ctx->info.num_threads : 1;
    *flops = 1.0e9 * th;
    *bytes = 5.0e9 * th;
  }
}

double dsk__tune_estimate_us(const dsk_ctx *ctx, const dsk__tune_shape *s) {
  double fl = 0, by = 0;
  if (s->op == DSK_OP_SPARSE_MLA_DECODE) {
    double dqk = s->format == DSK_KV_FORMAT_A656 ? 576 : 512;
    double eb = s->format == DSK_KV_FORMAT_A656 ? 656 : 584;
    double w = (double)s->w[0] + (s->nseg == 2 ? (double)s->w[1] : 0);
    fl = 2.0 * (double)s->T * (double)s->H * w * (dqk + 512);
    by = (double)s->T * w * (eb + 4) + (double)s->T * (double)s->H * (dqk + 512) * 2;
  } else if (s->op == DSK_OP_MHC_PRENORM) {
    fl = 2.0 * (double)s->T * 24 * (double)s->nD;
    by = (double)s->T * (double)s->nD * 2 + 24.0 * (double)s->nD * 4;
  } else if (s->op == DSK_OP_MOE_GEMM) {
    /* real rows M; weights of the active experts; A and D over the worst-case M_sum */
    const double M = (double)dsk__tune_rows(s), E = (double)s->E, A = (double)s->A;
    const double active = M < E ? M : E;
    const double msum = ceil((M + active * (A - 1)) / A) * A;
    const double wb = s->wfmt == DSK_MOE_W_FP8 ? 1.0 + 1.0 / 128 : 0.5 + 1.0 / 32;
    fl = 2.0 * M * (double)s->N * (double)s->K;
    by = active * (double)s->N * (double)s->K * wb + msum * (double)s->K + msum * (double)s->N * 2;
  } else if (s->op == DSK_OP_MOE_DENSE_GEMM) {
    fl = 2.0 * (double)s->T * (double)s->N * (double)s->K;
    by = (double)s->N * (double)s->K + (double)s->T * (double)s->K + (double)s->T * (double)s->N * 2;
  }
  double f, b;
  device_rates(ctx, &f, &b);
  double tf = fl / f, tb = by / b;
  return 1e6 * (tf > tb ? tf : tb);
}
