/* check_moe.c - backend-vs-reference check of the MoE path
 * (spec/mxfp4-moe.md §8; docs/moe.md; harness.h says what runs).
 *
 * Data moves only through dsk_mem_*, so ctx may be a CUDA context. The cpu-ref
 * runs on a second (CPU) context on the same host inputs. Every op is checked
 * alone first, on both contexts with the same inputs and outputs poisoned
 * the same way (so "padding written as 0" and "not written" are checked
 * too):
 *  - formats: dsk_mx_quantize (fp32 / bf16 input, the comparison flags,
 *    NaN blocks), dsk_fp8_quantize_1x128 (raw and packed scales, K-group
 *    padding), dsk_pack_ue8m0_words, dsk_sf_pack_mn_major (odd MN, sf_k,
 *    G > 1, the 128-row broadcast): bit-exact, counters equal;
 *  - dsk_moe_route: DSv4 sqrt-softplus + bias, GLM-5.1 sigmoid top-8 of
 *    256, hash layers with bad token ids / table entries, given logits with
 *    NaN / inf / exact ties, an H that is not a multiple of 8: ids equal,
 *    weights within 1e-6 relative (bit-exact expected but for an fp32 ulp:
 *    logits are summed in another fixed order, scores use the device libm),
 *    counters equal; each without and with the workspace of
 *    dsk_moe_route_plan (T 1, 2, 3, 5, 7, 9, 64; H 1, 8, 200, 1000 with an
 *    odd x stride, 2056; E 37 and 1024; poisoned with 0xFF; plan bytes
 *    checked on both contexts), a second run on ctx bit-identical (ids,
 *    weights and the workspace), and a caller built before the workspace
 *    fields (struct_size = offsetof(workspace), in a heap block of that
 *    size);
 *  - dsk_moe_permute: random, EP slices with -1 and out-of-range ids, all
 *    tokens on one expert, empty experts, duplicated ids, an M_sum too small
 *    (dropped rows), unaligned strides: A, scale bytes, m_indices, inv_perm
 *    and counters bit-exact;
 *  - dsk_swiglu_quant (clamp 10 / none, NaN, padding rows) and
 *    dsk_moe_gather (shared, none, in place; rows >= M_sum counted):
 *    bit-exact (SwiGLU: a code one step apart is tolerated at most once per
 *    million elements, for the device exp());
 *  - dsk_moe_gemm (FP8 x MXFP4, FP8 x FP8; A_used 64/128 with BLOCK_M
 *    64/128; empty experts, 200 rows on one expert, NaN padding rows, a
 *    block of bad indices) and dsk_dense_fp8_gemm: diff <= 0.01 (warn above
 *    1e-4) on real rows, skipped blocks untouched, counters equal;
 *  - bad inputs on ctx: misaligned BLOCK_M, wrong scale shapes, bad A_used,
 *    align_cap, out-of-range expert ids (counted, not an error); router
 *    workspace too small, misaligned, overlapping ids, negative bytes, a
 *    struct_size below the old size.
 * Then the layer (dsk_moe_run) against the cpu-ref (diff <= 0.01) and an
 * fp64 forward written here (diff <= 0.01) that decodes the in-process
 * checkpoint tensors on the fly (no code shared with the library): x
 * quantized 1x128 (§2.2), gate/up in fp64, clamp, SwiGLU, h quantized 1x128
 * from fp64 h, down projection in fp64, routing weights from fp64 scores of
 * the experts the backend selected (its ids are checked against the fp64
 * top-k, near ties excepted, and against the cpu-ref's). Routing modes: the
 * router; given ids with every token on one expert (the others empty); given
 * ids on two experts.
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct mc_bufs {
  dsk_ctx *ctx;
  void *p[32];
  int n;
} mc_bufs;

static void *mc_alloc(mc_bufs *b, size_t bytes, dsk_status *st) {
  void *p = NULL;
  if (*st != DSK_STATUS_OK) return NULL;
  if (b->n >= 32) {
    *st = DSK_STATUS_OUT_OF_MEMORY;
    return NULL;
  }
  *st = dsk_mem_alloc(b->ctx, &p, bytes ? bytes : 16);
  if (*st == DSK_STATUS_OK) b->p[b->n++] = p;
  return p;
}
static void *mc_up(mc_bufs *b, const void *h, size_t bytes, dsk_status *st) {
  void *p = mc_alloc(b, bytes, st);
  if (*st == DSK_STATUS_OK) *st = dsk_mem_upload(b->ctx, p, h, bytes);
  return p;
}
static void mc_free(mc_bufs *b) {
  for (int i = 0; i < b->n; i++) dsk_mem_free(b->ctx, b->p[i]);
  b->n = 0;
}
static dsk_status mc_down(dsk_ctx *ctx, void *h, const void *d, size_t bytes) {
  dsk_status st = dsk_ctx_synchronize(ctx, NULL);
  return st == DSK_STATUS_OK ? dsk_mem_download(ctx, h, d, bytes) : st;
}
static void *mc_host(size_t n) { return calloc(1, n ? n : 1); }

static double mc_diff(const double *x, const double *y, int64_t n) {
  double sxy = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) {
    sxy += x[i] * y[i];
    s2 += x[i] * x[i] + y[i] * y[i];
  }
  return s2 == 0 ? 0.0 : 1.0 - 2.0 * sxy / s2;
}
static double mc_bf(dsk_bf16 b) { return (double)dsk_bf16_to_f32(b); }
static double mc_ue(uint8_t e) { return e == 0xFF ? NAN : ldexp(1.0, (int)e - 127); }
static int mc_ceil_log2f(float f) {
  int ex;
  float m = frexpf(f, &ex);
  return m == 0.5f ? ex - 1 : ex;
}
/* §2.2: dequantized 1x128 quantization of n floats */
static void mc_qdq(const float *v, int64_t n, double *out) {
  for (int64_t g = 0; g < n / 128; g++) {
    float amax = 0;
    for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(v[g * 128 + i]));
    const int e = mc_ceil_log2f(fmaxf(amax, 1e-4f) / 448.0f) + 127;
    for (int i = 0; i < 128; i++)
      out[g * 128 + i] = (double)dsk_e4m3_to_f32(dsk_e4m3_from_f32(ldexpf(v[g * 128 + i], 127 - e))) * mc_ue((uint8_t)e);
  }
}
static void mc_fill_bytes(tu_rng *r, uint8_t *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = tu_next(r);
    memcpy(p + i, &v, 8);
  }
  for (; i < n; i++) p[i] = (uint8_t)tu_next(r);
}
/* A random finite e4m3 code (no NaN codes 0x7F / 0xFF). */
static uint8_t mc_e4(tu_rng *r) {
  uint8_t q = (uint8_t)tu_next(r);
  return (q & 0x7F) == 0x7F ? (uint8_t)(q ^ 0x40) : q;
}
static int mc_ctx_is_cuda(dsk_ctx *ctx) {
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  return dsk_ctx_get_info(ctx, &info) == DSK_STATUS_OK && info.is_cuda;
}

/* ------------------------------------------------- one op on both contexts */
/* Buffers of one op: inputs (uploaded) and outputs (poisoned with a byte
 * before the op). The op runs on ctx (i = 0) and on the cpu-ref (i = 1);
 * every buffer is downloaded afterwards into got[i][j]. */
#define MC_MAXB 12
typedef struct mc_pair {
  int n;
  const void *in[MC_MAXB]; /* host data to upload, or NULL: an output */
  size_t bytes[MC_MAXB];
  int poison[MC_MAXB];     /* outputs: the byte written before the op */
  void *got[2][MC_MAXB];
} mc_pair;
typedef dsk_status (*mc_op_fn)(dsk_ctx *cx, void *const *dev, const void *user);

static int pair_add(mc_pair *p, const void *in, size_t bytes, int poison) {
  const int j = p->n++;
  p->in[j] = in;
  p->bytes[j] = bytes ? bytes : 16;
  p->poison[j] = poison;
  return j;
}
static void pair_free(mc_pair *p) {
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < p->n; j++) {
      free(p->got[i][j]);
      p->got[i][j] = NULL;
    }
  p->n = 0;
}
/* The op on one context, every buffer downloaded into got[0..n). */
static dsk_status side_run(dsk_ctx *cx, mc_pair *p, mc_op_fn fn, const void *user, void **got) {
  dsk_status st = DSK_STATUS_OK;
  mc_bufs b = {cx, {0}, 0};
  void *dev[MC_MAXB];
  for (int j = 0; j < p->n; j++) {
    dev[j] = p->in[j] ? mc_up(&b, p->in[j], p->bytes[j], &st) : mc_alloc(&b, p->bytes[j], &st);
    if (!p->in[j] && st == DSK_STATUS_OK) st = dsk_mem_set(cx, dev[j], p->poison[j], p->bytes[j]);
  }
  if (st == DSK_STATUS_OK) st = fn(cx, dev, user);
  for (int j = 0; j < p->n && st == DSK_STATUS_OK; j++) {
    got[j] = mc_host(p->bytes[j]);
    st = mc_down(cx, got[j], dev[j], p->bytes[j]);
  }
  mc_free(&b);
  return st;
}
static dsk_status pair_run(dsk_ctx *ctx, dsk_ctx *ref, mc_pair *p, mc_op_fn fn, const void *user) {
  dsk_ctx *cs[2] = {ctx, ref};
  dsk_status st = DSK_STATUS_OK;
  for (int i = 0; i < 2 && st == DSK_STATUS_OK; i++) st = side_run(cs[i], p, fn, user, p->got[i]);
  return st;
}
/* Index of the first differing byte of buffer j, or -1. */
static int64_t pair_cmp(const mc_pair *p, int j) {
  const uint8_t *a = (const uint8_t *)p->got[0][j], *b = (const uint8_t *)p->got[1][j];
  if (!a || !b) return 0;
  for (size_t i = 0; i < p->bytes[j]; i++)
    if (a[i] != b[i]) return (int64_t)i;
  return -1;
}
/* The verdict of pair_run: 1 = compare, 0 = skipped (not served) or failed. */
static int pair_ok(dsk_status st, const char *what, tu_counts *c, FILE *log) {
  if (st == DSK_STATUS_UNSUPPORTED) {
    fprintf(log, "moe %-14s skipped: %s\n", what, dsk_last_error());
    return 0;
  }
  TU_CHECK(c, st == DSK_STATUS_OK, "moe %s: %s: %s", what, dsk_status_name(st), dsk_last_error());
  return st == DSK_STATUS_OK;
}
/* ------------------------------------------------------------ formats */
typedef struct fmt_case {
  int64_t R, K, xs;   /* rows, K, x row stride (elements) */
  int f32;            /* x dtype */
  uint32_t flags;     /* mx flags */
  int64_t qs, ss;     /* q / sf row strides (0 = dense) */
  int raw, packed;    /* fp8: scale outputs */
} fmt_case;

/* buffers: 0 x, 1 q, 2 sf, 3 packed, 4 counters */
static dsk_status op_mxq(dsk_ctx *cx, void *const *dev, const void *user) {
  const fmt_case *f = (const fmt_case *)user;
  dsk_mx_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = f->R; d.K = f->K; d.x_dtype = f->f32 ? DSK_MOE_IN_F32 : DSK_MOE_IN_BF16; d.x = dev[0]; d.x_stride = f->xs;
  d.q = dev[1]; d.q_stride = f->qs ? f->qs : f->K / 2; d.sf = dev[2]; d.sf_stride = f->ss ? f->ss : f->K / 32;
  d.flags = f->flags; d.counters = dev[4];
  return dsk_mx_quantize(cx, &d);
}
static dsk_status op_fp8q(dsk_ctx *cx, void *const *dev, const void *user) {
  const fmt_case *f = (const fmt_case *)user;
  dsk_fp8_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = f->R; d.K = f->K; d.x_dtype = f->f32 ? DSK_MOE_IN_F32 : DSK_MOE_IN_BF16; d.x = dev[0]; d.x_stride = f->xs;
  d.q = dev[1]; d.q_stride = f->qs ? f->qs : f->K;
  d.sf = f->raw ? dev[2] : NULL; d.sf_stride = f->ss ? f->ss : f->K / 128;
  d.sf_packed = f->packed ? dev[3] : NULL; d.counters = dev[4];
  return dsk_fp8_quantize_1x128(cx, &d);
}

/* x: values over a wide exponent range (per 32-block), a NaN and an inf */
static void *fmt_input(tu_rng *r, const fmt_case *f, size_t *bytes) {
  const int64_t n = f->R * f->xs;
  *bytes = (size_t)n * (f->f32 ? 4 : 2);
  void *x = mc_host(*bytes);
  for (int64_t i = 0; i < n; i++) {
    const float v = (float)(tu_normal(r) * ldexp(1.0, (int)((i / 32) % 50) - 25));
    if (f->f32) ((float *)x)[i] = v;
    else ((dsk_bf16 *)x)[i] = dsk_bf16_from_f32(v);
  }
  const float nanv = NAN, infv = INFINITY;
  if (f->f32) {
    ((float *)x)[5] = nanv;
    if (f->R > 1) ((float *)x)[f->xs + 300 % f->K] = infv;
  } else {
    ((dsk_bf16 *)x)[5] = dsk_bf16_from_f32(nanv);
    if (f->R > 1) ((dsk_bf16 *)x)[f->xs + 300 % f->K] = dsk_bf16_from_f32(-infv);
  }
  return x;
}

static int check_quantizers(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  tu_rng r = tu_rng_make(o->seed ^ 0x4D58u);
  static const fmt_case mx[] = {
      {37, 384, 384, 1, 0, 0, 0, 0, 0},
      {37, 384, 384, 1, DSK_MX_TIES_TO_ZERO, 0, 0, 0, 0},
      {37, 384, 384, 1, DSK_MX_SCALE_FLOOR, 0, 0, 0, 0},
      {37, 384, 384, 1, DSK_MX_TIES_TO_ZERO | DSK_MX_SCALE_FLOOR, 0, 0, 0, 0},
      {19, 256, 261, 0, 0, 131, 9, 0, 0},
      {1, 32, 32, 0, 0, 0, 0, 0, 0},
  };
  static const fmt_case f8[] = {
      {37, 384, 384, 1, 0, 0, 0, 1, 1},
      {5, 640, 643, 0, 0, 645, 6, 0, 1},
      {1, 128, 128, 0, 0, 0, 0, 1, 1},
      {64, 256, 256, 0, 0, 0, 0, 1, 0},
  };
  static const fmt_case big[] = {{4096, 4096, 4096, 0, 0, 0, 0, 1, 1}, {1000, 7168, 7168, 0, 0, 0, 0, 1, 1}};
  int rc = 0;
  const int nbig = o->quick ? 0 : 2;
  for (int kind = 0; kind < 2; kind++) {
    const fmt_case *list = kind == 0 ? mx : f8;
    const int n = (kind == 0 ? (int)(sizeof mx / sizeof mx[0]) : (int)(sizeof f8 / sizeof f8[0])) + nbig;
    for (int ci = 0; ci < n; ci++) {
      const int nlist = kind == 0 ? (int)(sizeof mx / sizeof mx[0]) : (int)(sizeof f8 / sizeof f8[0]);
      const fmt_case *f = ci < nlist ? &list[ci] : &big[ci - nlist];
      size_t xb;
      void *x = fmt_input(&r, f, &xb);
      mc_pair p;
      memset(&p, 0, sizeof p);
      pair_add(&p, x, xb, 0);
      const int64_t qw = kind == 0 ? (f->qs ? f->qs : f->K / 2) : (f->qs ? f->qs : f->K);
      const int64_t sw = f->ss ? f->ss : f->K / (kind == 0 ? 32 : 128);
      pair_add(&p, NULL, (size_t)(f->R * qw), 0xAB);
      pair_add(&p, NULL, (size_t)(f->R * sw), 0xAB);
      const int64_t pwords = dsk_sf_packed_words(1, f->R, f->K / 128); /* -1 when K < 128 (MX only) */
      pair_add(&p, NULL, pwords > 0 ? (size_t)pwords * 4 : 16, 0xAB);
      pair_add(&p, NULL, 16, 0);
      char what[48];
      snprintf(what, sizeof what, "%s %lldx%lld", kind == 0 ? "mx_quantize" : "fp8_quantize", (long long)f->R,
               (long long)f->K);
      dsk_status st = pair_run(ctx, ref, &p, kind == 0 ? op_mxq : op_fp8q, f);
      if (pair_ok(st, what, c, log)) {
        int64_t bad[5];
        int same = 1;
        for (int j = 1; j < 5; j++) {
          bad[j] = pair_cmp(&p, j);
          same &= bad[j] < 0;
        }
        const int64_t *cnt = (const int64_t *)p.got[0][4];
        TU_CHECK(c, same, "moe %s (flags %u, %s, stride %lld): bytes differ from the cpu-ref (q at %lld, sf at %lld, "
                 "packed at %lld, counters %lld vs %lld)", what, f->flags, f->f32 ? "f32" : "bf16", (long long)f->xs,
                 (long long)bad[1], (long long)bad[2], (long long)bad[3], (long long)cnt[0],
                 (long long)((const int64_t *)p.got[1][4])[0]);
        if (f->R > 1 && f->K >= 384)
          TU_CHECK(c, cnt[0] == 2, "moe %s: counter %lld, want 2", what, (long long)cnt[0]);
        if (o->verbose || !same || ci == 0 || ci >= nlist)
          fprintf(log, "moe %-30s flags %u %s stride %5lld: %s\n", what, f->flags, f->f32 ? "f32 " : "bf16",
                  (long long)f->xs, same ? "bit-exact" : "DIFFERENT");
        rc |= !same;
      } else if (st != DSK_STATUS_UNSUPPORTED) {
        rc = 1;
      }
      pair_free(&p);
      free(x);
    }
  }
  return rc;
}

typedef struct pack_case {
  int64_t G, MN, sf_k, sf_stride, group_stride, out_stride;
  int gran;
} pack_case;
static dsk_status op_packw(dsk_ctx *cx, void *const *dev, const void *user) {
  const pack_case *k = (const pack_case *)user;
  dsk_pack_ue8m0_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = k->MN; d.sf_k = k->sf_k; d.sf = dev[0]; d.sf_stride = k->sf_stride; d.out = dev[1];
  d.out_stride = k->out_stride;
  return dsk_pack_ue8m0_words(cx, &d);
}
static dsk_status op_sfpack(dsk_ctx *cx, void *const *dev, const void *user) {
  const pack_case *k = (const pack_case *)user;
  dsk_sf_pack_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.G = k->G; d.MN = k->MN; d.sf_k = k->sf_k; d.gran_mn = k->gran; d.sf = dev[0]; d.sf_stride = k->sf_stride;
  d.sf_group_stride = k->group_stride; d.out = dev[1];
  return dsk_sf_pack_mn_major(cx, &d);
}

static int check_packing(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  tu_rng r = tu_rng_make(o->seed ^ 0x9ACCu);
  /* pack_ue8m0_words: G unused (1) */
  static const pack_case pw[] = {{1, 13, 5, 7, 0, 3, 1}, {1, 1, 1, 1, 0, 1, 1}, {1, 257, 16, 16, 0, 4, 1}};
  /* sf_pack_mn_major: odd MN and sf_k, gaps between rows and groups, the 128-row broadcast */
  static const pack_case sp[] = {{3, 13, 5, 7, 100, 0, 1},   {2, 6, 5, 5, 30, 0, 1},    {2, 300, 3, 4, 16, 0, 128},
                                 {1, 1, 1, 1, 1, 0, 1},       {4, 4096, 32, 32, 4096 * 32, 0, 1}};
  int rc = 0;
  for (int kind = 0; kind < 2; kind++) {
    const int n = kind == 0 ? (int)(sizeof pw / sizeof pw[0]) : (int)(sizeof sp / sizeof sp[0]) - (o->quick ? 1 : 0);
    for (int ci = 0; ci < n; ci++) {
      const pack_case *k = kind == 0 ? &pw[ci] : &sp[ci];
      const int64_t in_rows = k->gran == 128 ? (k->MN + 127) / 128 : k->MN;
      const int64_t in_bytes = (k->G - 1) * k->group_stride + in_rows * k->sf_stride;
      uint8_t *sf = mc_host((size_t)in_bytes);
      mc_fill_bytes(&r, sf, (size_t)in_bytes);
      const int64_t out_words = kind == 0 ? k->MN * k->out_stride : dsk_sf_packed_words(k->G, k->MN, k->sf_k);
      mc_pair p;
      memset(&p, 0, sizeof p);
      pair_add(&p, sf, (size_t)in_bytes, 0);
      pair_add(&p, NULL, (size_t)out_words * 4, 0xAB);
      char what[64];
      snprintf(what, sizeof what, "%s G %lld MN %lld sf_k %lld gran %d", kind == 0 ? "pack_ue8m0_words" : "sf_pack_mn_major",
               (long long)k->G, (long long)k->MN, (long long)k->sf_k, k->gran);
      dsk_status st = pair_run(ctx, ref, &p, kind == 0 ? op_packw : op_sfpack, k);
      if (pair_ok(st, what, c, log)) {
        const int64_t at = pair_cmp(&p, 1);
        TU_CHECK(c, at < 0, "moe %s: words differ from the cpu-ref at byte %lld", what, (long long)at);
        if (o->verbose || at >= 0 || ci == 0) fprintf(log, "moe %-46s: %s\n", what, at < 0 ? "bit-exact" : "DIFFERENT");
        rc |= at >= 0;
      } else if (st != DSK_STATUS_UNSUPPORTED) {
        rc = 1;
      }
      pair_free(&p);
      free(sf);
    }
  }
  return rc;
}

/* -------------------------------------------------------------- route */
typedef struct rt_case {
  const char *name;
  int64_t T, E, K, H, xs;
  int score, hash, logits, renorm;
  float scale;
  int ws; /* 0: no workspace; 1: the planned workspace; 2: the struct of a caller built before the workspace fields */
} rt_case;
/* buffers: 0 x, 1 gate, 2 bias, 3 logits, 4 tid2eid, 5 token ids, 6 ids, 7 weights, 8 counters, 9 workspace */
#define RT_VOCAB 1000
typedef struct rt_user {
  const rt_case *k;
  int64_t ws_bytes;  /* bytes of buffer 9 (ws 1) */
  int64_t *planned;  /* out: dsk_moe_route_plan's bytes, or -1 */
} rt_user;
static dsk_status op_route(dsk_ctx *cx, void *const *dev, const void *user) {
  const rt_user *u = (const rt_user *)user;
  const rt_case *k = u->k;
  dsk_moe_route_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = k->T; d.E = k->E; d.topk = k->K; d.score = (dsk_moe_score)k->score;
  d.router = k->hash ? DSK_MOE_ROUTER_HASH : DSK_MOE_ROUTER_SCORED;
  if (k->logits) {
    d.logits = dev[3];
    d.logits_stride = k->E + 3;
  } else {
    d.H = k->H; d.x = dev[0]; d.x_stride = k->xs; d.gate_w = dev[1];
  }
  d.bias = k->hash ? NULL : dev[2];
  d.tid2eid = dev[4]; d.vocab = RT_VOCAB; d.token_ids = dev[5];
  d.renormalize = k->renorm; d.routed_scaling_factor = k->scale;
  d.ids = dev[6]; d.ids_stride = k->K + 1; d.weights = dev[7]; d.weights_stride = k->K + 2;
  d.counters = dev[8];
  *u->planned = -1;
  if (k->ws == 1) {
    dsk_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    dsk_status st = dsk_moe_route_plan(cx, &d, &pi);
    if (st != DSK_STATUS_OK) return st;
    *u->planned = pi.workspace_bytes;
    if (pi.workspace_bytes > u->ws_bytes) return DSK_STATUS_INVALID_ARG; /* reported by the caller */
    d.workspace = dev[9];
    d.workspace_bytes = u->ws_bytes;
  } else if (k->ws == 2) {
    /* an old caller: its struct ends before workspace, in a heap block of
     * exactly that size (ASan sees any read past it) */
    const size_t old = offsetof(dsk_moe_route_desc, workspace);
    unsigned char *od = malloc(old);
    if (!od) return DSK_STATUS_OUT_OF_MEMORY;
    d.struct_size = old;
    memcpy(od, &d, old);
    const dsk_status st = dsk_moe_route(cx, (const dsk_moe_route_desc *)(void *)od);
    free(od);
    return st;
  }
  return dsk_moe_route(cx, &d);
}

static int check_route(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  static const rt_case quick[] = {
      {"dsv4 scored", 64, 256, 6, 256, 256, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 0},
      {"dsv4 scored", 7, 384, 6, 512, 520, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 2.5f, 0},
      {"glm sigmoid", 1, 256, 8, 384, 384, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 2.5f, 0},
      {"glm sigmoid", 64, 256, 8, 384, 384, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 2.5f, 0},
      {"H 200 (scalar)", 9, 37, 5, 200, 203, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 1.0f, 0},
      {"hash", 33, 256, 6, 256, 256, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1, 0, 1, 1.5f, 0},
      {"logits nan/inf/ties", 40, 64, 8, 0, 0, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 1, 1, 1.5f, 0},
      {"logits no renorm", 40, 64, 8, 0, 0, DSK_MOE_SCORE_SIGMOID, 0, 1, 0, 2.5f, 0},
      {"E 1024 top-16", 5, 1024, 16, 256, 256, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 1.0f, 0},
      /* with the planned workspace (the CUDA grid-wide logits) */
      {"ws dsv4 scored", 1, 256, 6, 256, 256, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws dsv4 scored", 7, 384, 6, 512, 520, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 2.5f, 1},
      {"ws dsv4 scored", 64, 256, 6, 256, 256, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws glm sigmoid", 1, 256, 8, 384, 384, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 2.5f, 1},
      {"ws glm sigmoid", 7, 256, 8, 384, 384, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 2.5f, 1},
      {"ws glm sigmoid", 64, 256, 8, 384, 384, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 2.5f, 1},
      {"ws H 200 E 37 (scalar)", 9, 37, 5, 200, 203, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 1.0f, 1},
      {"ws H 1000 odd x stride", 3, 64, 4, 1000, 1003, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws H 2056 (2 steps)", 2, 128, 6, 2056, 2056, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws H 8 no renorm", 4, 16, 2, 8, 8, DSK_MOE_SCORE_SIGMOID, 0, 0, 0, 1.0f, 1},
      {"ws H 1", 3, 8, 2, 1, 1, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.0f, 1},
      {"ws hash", 33, 256, 6, 256, 256, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1, 0, 1, 1.5f, 1},
      {"ws E 1024 top-16", 5, 1024, 16, 256, 256, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 1.0f, 1},
      {"ws logits (unused)", 40, 64, 8, 0, 0, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 1, 1, 1.5f, 1},
      {"old struct_size", 7, 256, 6, 256, 256, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 2},
  };
  static const rt_case full[] = {
      {"dsv4-flash", 1000, 256, 6, 4096, 4096, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 0},
      {"dsv4-pro", 128, 384, 6, 7168, 7168, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 2.5f, 0},
      {"glm-5.1", 1000, 256, 8, 6144, 6144, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 2.5f, 0},
      {"dsv4 hash", 4096, 256, 6, 4096, 4096, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1, 0, 1, 1.5f, 0},
      {"ws dsv4-flash", 1, 256, 6, 4096, 4096, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws dsv4-flash", 7, 256, 6, 4096, 4096, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws dsv4-flash", 64, 256, 6, 4096, 4096, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws dsv4-flash", 1000, 256, 6, 4096, 4096, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws dsv4-pro", 1, 384, 6, 7168, 7168, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 2.5f, 1},
      {"ws dsv4-pro", 128, 384, 6, 7168, 7168, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 2.5f, 1},
      {"ws glm-5.1", 1, 256, 8, 6144, 6144, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 2.5f, 1},
      {"ws glm-5.1", 64, 256, 8, 6144, 6144, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 2.5f, 1},
      {"ws dsv4 hash", 4096, 256, 6, 4096, 4096, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1, 0, 1, 1.5f, 1},
      /* more than 65535 token tiles of 8: the logits kernel's grid-stride loop */
      {"ws T 524295 (tile loop)", 524295, 6, 2, 16, 16, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 1.0f, 1},
  };
  tu_rng r = tu_rng_make(o->seed ^ 0x2047u);
  int rc = 0;
  const int nq = (int)(sizeof quick / sizeof quick[0]), nf = o->quick ? 0 : (int)(sizeof full / sizeof full[0]);
  for (int ci = 0; ci < nq + nf; ci++) {
    const rt_case *k = ci < nq ? &quick[ci] : &full[ci - nq];
    const int64_t T = k->T, E = k->E, K = k->K, H = k->H > 0 ? k->H : 1, xs = k->xs > 0 ? k->xs : 1;
    dsk_bf16 *x = mc_host(sizeof(dsk_bf16) * (size_t)(T * xs)), *g = mc_host(sizeof(dsk_bf16) * (size_t)(E * H));
    float *bias = mc_host(sizeof(float) * (size_t)E), *lg = mc_host(sizeof(float) * (size_t)(T * (E + 3)));
    int64_t *tab = mc_host(sizeof(int64_t) * (size_t)(RT_VOCAB * K));
    int32_t *tok = mc_host(sizeof(int32_t) * (size_t)T);
    tu_fill_bf16_normal(&r, x, (size_t)(T * xs), 1.0);
    tu_fill_bf16_normal(&r, g, (size_t)(E * H), 1.0 / sqrt((double)H));
    if (E > 200) memcpy(g + 200 * H, g + 3 * H, sizeof(dsk_bf16) * (size_t)H); /* an exact tie of two experts */
    for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(&r) * 0.05);
    for (int64_t t = 0; t < T; t++)
      for (int64_t e = 0; e < E + 3; e++) {
        float v = (float)(tu_normal(&r) * 2.0);
        if (t % 5 == 1) v = 0.5f;                     /* all tied: lower ids win */
        if (t % 5 == 2 && e % 7 == 3) v = NAN;        /* NaN ranks below everything */
        if (t % 5 == 3 && e == 9) v = INFINITY;
        if (t % 5 == 4 && e % 3 == 0) v = -INFINITY;
        if (t == 2 && e >= 3) v = NAN; /* fewer finite logits than top-k: NaN scores get picked */
        lg[t * (E + 3) + e] = v;
      }
    for (int64_t i = 0; i < RT_VOCAB * K; i++) {
      tab[i] = tu_int(&r, 0, E - 1);
      if (i % 97 == 5) tab[i] = -2;   /* bad entries: slot id -1, weight 0, token counted */
      if (i % 89 == 7) tab[i] = E + 3;
    }
    for (int64_t t = 0; t < T; t++) {
      tok[t] = (int32_t)tu_int(&r, 0, RT_VOCAB - 1);
      if (t % 11 == 4) tok[t] = -1;
      if (t % 13 == 6) tok[t] = RT_VOCAB + 5;
    }
    mc_pair p;
    memset(&p, 0, sizeof p);
    pair_add(&p, x, sizeof(dsk_bf16) * (size_t)(T * xs), 0);
    pair_add(&p, g, sizeof(dsk_bf16) * (size_t)(E * H), 0);
    pair_add(&p, bias, sizeof(float) * (size_t)E, 0);
    pair_add(&p, lg, sizeof(float) * (size_t)(T * (E + 3)), 0);
    pair_add(&p, tab, sizeof(int64_t) * (size_t)(RT_VOCAB * K), 0);
    pair_add(&p, tok, sizeof(int32_t) * (size_t)T, 0);
    pair_add(&p, NULL, sizeof(int32_t) * (size_t)(T * (K + 1)), 0xAB);
    pair_add(&p, NULL, sizeof(float) * (size_t)(T * (K + 2)), 0xAB);
    pair_add(&p, NULL, 16, 0);
    /* the workspace dsk_moe_route_plan must ask for, poisoned (its contents never matter) */
    const int64_t ws_want = k->ws == 1 && !k->logits ? T * E * 8 : 0;
    pair_add(&p, NULL, (size_t)(ws_want > 0 ? ws_want : 16), 0xFF);
    int64_t planned = -1;
    const rt_user u = {k, ws_want > 0 ? ws_want : 16, &planned};
    char what[64];
    snprintf(what, sizeof what, "route %s", k->name);
    dsk_status st = pair_run(ctx, ref, &p, op_route, &u);
    if (k->ws == 1 && planned != ws_want) { /* both contexts answer the same rule */
      TU_CHECK(c, 0, "moe %s T %lld E %lld: dsk_moe_route_plan gave %lld bytes, want %lld (T * E * 8, 0 with logits)",
               what, (long long)T, (long long)E, (long long)planned, (long long)ws_want);
      rc = 1;
    }
    if (pair_ok(st, what, c, log)) {
      const int32_t *i0 = p.got[0][6], *i1 = p.got[1][6];
      const float *w0 = p.got[0][7], *w1 = p.got[1][7];
      const int64_t *c0 = p.got[0][8], *c1 = p.got[1][8];
      int64_t id_bad = 0, w_bits = 0, gap_bad = 0;
      double wrel = 0;
      for (int64_t t = 0; t < T; t++) {
        for (int64_t kk = 0; kk < K; kk++) {
          id_bad += i0[t * (K + 1) + kk] != i1[t * (K + 1) + kk];
          const float a = w0[t * (K + 2) + kk], b = w1[t * (K + 2) + kk];
          if (memcmp(&a, &b, 4) != 0) {
            w_bits++;
            const double d = (a != a && b != b) ? 0.0 : fabs((double)a - b) / fmax(fabs((double)b), 1e-30);
            wrel = fmax(wrel, d != d ? INFINITY : d);
          }
        }
        gap_bad += i0[t * (K + 1) + K] != i1[t * (K + 1) + K]; /* stride gaps untouched */
      }
      /* with a workspace: a second run on ctx gives the same bits (ids,
       * weights, counters and the workspace itself: fp64 logits on CUDA) */
      int64_t rerun_bad = 0;
      if (k->ws == 1) {
        void *again[MC_MAXB] = {0};
        const dsk_status s2 = side_run(ctx, &p, op_route, &u, again);
        TU_CHECK(c, s2 == DSK_STATUS_OK, "moe %s: second run: %s: %s", what, dsk_status_name(s2), dsk_last_error());
        for (int j = 6; j <= 9; j++)
          rerun_bad += s2 != DSK_STATUS_OK || !again[j] || memcmp(again[j], p.got[0][j], p.bytes[j]) != 0;
        for (int j = 0; j < p.n; j++) free(again[j]);
      }
      const int ok = id_bad == 0 && wrel <= 1e-6 && gap_bad == 0 && c0[0] == c1[0] && c0[1] == c1[1] && rerun_bad == 0;
      TU_CHECK(c, ok, "moe %s T %lld E %lld top-%lld: %lld ids differ, weights %lld not bit-exact (max rel %.2e > 1e-6?), "
               "%lld gaps written, counters %lld/%lld vs %lld/%lld, %lld buffers differ in a second run", what,
               (long long)T, (long long)E, (long long)K, (long long)id_bad, (long long)w_bits, wrel, (long long)gap_bad,
               (long long)c0[0], (long long)c0[1], (long long)c1[0], (long long)c1[1], (long long)rerun_bad);
      fprintf(log, "moe %-30s T %6lld E %4lld top-%-2lld H %4lld: ids %s, weights %s (max rel %.1e), counters %lld %lld%s %s\n",
              what, (long long)T, (long long)E, (long long)K, (long long)(k->logits ? 0 : H),
              id_bad ? "DIFFERENT" : "equal", w_bits ? "within 1e-6" : "bit-exact", wrel, (long long)c0[0],
              (long long)c0[1], k->ws == 1 ? (rerun_bad ? ", rerun DIFFERENT" : ", rerun identical") : "",
              ok ? "ok" : "FAIL");
      rc |= !ok;
    } else if (st != DSK_STATUS_UNSUPPORTED) {
      rc = 1;
    }
    pair_free(&p);
    free(x); free(g); free(bias); free(lg); free(tab); free(tok);
  }
  return rc;
}

/* ------------------------------------------------------------ permute */
typedef struct pm_case {
  const char *name;
  int64_t T, K, E, EL, off, H, A;
  int mode;       /* 0 random, 1 all on one expert, 2 two experts, 3 random with -1 / bad ids / duplicates */
  int64_t M_sum;  /* 0 = dsk_moe_aligned_m's worst case */
  int64_t pad;    /* extra bytes in the xq and A row strides (unaligned rows) */
} pm_case;
/* buffers: 0 ids, 1 xq, 2 xsf, 3 A, 4 Asf, 5 m_indices, 6 inv_perm, 7 workspace, 8 counters */
typedef struct pm_run {
  const pm_case *k;
  int64_t M, ws;
} pm_run;
static dsk_status op_permute(dsk_ctx *cx, void *const *dev, const void *user) {
  const pm_run *u = (const pm_run *)user;
  const pm_case *k = u->k;
  dsk_moe_permute_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = k->T; d.topk = k->K; d.E = k->E; d.E_local = k->EL; d.expert_offset = k->off; d.K = k->H;
  d.A_used = k->A; d.M_sum = u->M;
  d.ids = dev[0]; d.ids_stride = k->K;
  d.xq = dev[1]; d.xq_stride = k->H + k->pad; d.xsf = dev[2]; d.xsf_stride = k->H / 128 + 1;
  d.A = dev[3]; d.A_stride = k->H + k->pad; d.Asf = dev[4]; d.Asf_stride = k->H / 128;
  d.m_indices = dev[5]; d.inv_perm = dev[6]; d.inv_perm_stride = k->K;
  d.workspace = dev[7]; d.workspace_bytes = u->ws; d.counters = dev[8];
  return dsk_moe_permute(cx, &d);
}

static int check_permute(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  static const pm_case cs[] = {
      {"random", 64, 6, 16, 16, 0, 256, 64, 0, 0, 0},
      {"random A 128", 100, 8, 32, 32, 0, 384, 128, 0, 0, 0},
      {"EP 4/16, -1 and bad ids, dups", 7, 6, 16, 4, 8, 384, 128, 3, 0, 0},
      {"all on one expert", 64, 6, 16, 16, 0, 256, 64, 1, 0, 0},
      {"two experts, 6 empty", 33, 6, 8, 8, 0, 256, 64, 2, 0, 0},
      {"M_sum too small (drops)", 64, 6, 16, 16, 0, 256, 64, 0, 128, 0},
      {"unaligned rows", 20, 6, 16, 16, 0, 256, 64, 3, 0, 3},
      {"T 1", 1, 8, 256, 256, 0, 128, 64, 0, 0, 0},
  };
  static const pm_case full[] = {{"T 4096 E 256", 4096, 8, 256, 256, 0, 1024, 128, 0, 0, 0},
                                 {"T 1000 EP 32/256", 1000, 6, 256, 32, 64, 512, 64, 3, 0, 0}};
  tu_rng r = tu_rng_make(o->seed ^ 0x9E3Du);
  int rc = 0;
  const int nq = (int)(sizeof cs / sizeof cs[0]), nf = o->quick ? 0 : (int)(sizeof full / sizeof full[0]);
  for (int ci = 0; ci < nq + nf; ci++) {
    const pm_case *k = ci < nq ? &cs[ci] : &full[ci - nq];
    const int64_t T = k->T, K = k->K, H = k->H, xs = H + k->pad, sfk = H / 128;
    int32_t *ids = mc_host(sizeof(int32_t) * (size_t)(T * K));
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < K; j++) {
        int64_t id = tu_int(&r, 0, k->E - 1);
        if (k->mode == 1) id = j == 0 ? k->off + 3 % k->EL : -1;
        if (k->mode == 2) id = j == 0 ? k->off + 1 : j == 1 ? k->off + 6 % k->EL : -1;
        if (k->mode == 3) {
          const int64_t u = tu_int(&r, 0, 9);
          if (u == 0) id = -1;
          if (u == 1) id = k->E + 5;
          if (u == 2) id = -9;
          if (u == 3 && j > 0) id = ids[t * K + j - 1]; /* the same expert twice */
          if (u >= 4) id = k->off + tu_int(&r, 0, k->EL - 1);
        }
        ids[t * K + j] = (int32_t)id;
      }
    uint8_t *xq = mc_host((size_t)(T * xs)), *xsf = mc_host((size_t)(T * (sfk + 1)));
    mc_fill_bytes(&r, xq, (size_t)(T * xs));
    mc_fill_bytes(&r, xsf, (size_t)(T * (sfk + 1)));
    /* the graph-safe worst case of spec 5.3 with the case's A_used (or the given, too small M_sum) */
    const int64_t Au = k->A, active = T * K < k->EL ? T * K : k->EL;
    const int64_t M = k->M_sum ? k->M_sum : (T * K + active * (Au - 1) + Au - 1) / Au * Au;
    pm_run u = {k, M, 2 * k->EL * 8};
    mc_pair p;
    memset(&p, 0, sizeof p);
    pair_add(&p, ids, sizeof(int32_t) * (size_t)(T * K), 0);
    pair_add(&p, xq, (size_t)(T * xs), 0);
    pair_add(&p, xsf, (size_t)(T * (sfk + 1)), 0);
    pair_add(&p, NULL, (size_t)(M * xs), 0xAB);
    pair_add(&p, NULL, (size_t)(M * sfk), 0xAB);
    pair_add(&p, NULL, (size_t)M * 4, 0xAB);
    pair_add(&p, NULL, sizeof(int32_t) * (size_t)(T * K), 0xAB);
    pair_add(&p, NULL, (size_t)u.ws, 0xCD); /* workspace contents never matter */
    pair_add(&p, NULL, 16, 0);
    char what[64];
    snprintf(what, sizeof what, "permute %s", k->name);
    dsk_status st = pair_run(ctx, ref, &p, op_permute, &u);
    if (pair_ok(st, what, c, log)) {
      static const char *const names[] = {"", "", "", "A", "Asf", "m_indices", "inv_perm", "", "counters"};
      char diffs[160] = "";
      int same = 1;
      for (int j = 3; j <= 8; j++) {
        if (j == 7) continue;
        const int64_t at = pair_cmp(&p, j);
        if (at >= 0) {
          same = 0;
          snprintf(diffs + strlen(diffs), sizeof diffs - strlen(diffs), " %s@%lld", names[j], (long long)at);
        }
      }
      const int64_t *cn = p.got[0][8];
      int64_t real = 0;
      for (int64_t i = 0; i < M; i++) real += ((const int32_t *)p.got[0][5])[i] >= 0;
      TU_CHECK(c, same, "moe %s: differs from the cpu-ref:%s", what, diffs);
      fprintf(log, "moe %-38s T %4lld top-%lld E %3lld/%-3lld A %3lld M_sum %6lld (%lld real): %s, counters %lld %lld\n",
              what, (long long)T, (long long)K, (long long)k->EL, (long long)k->E, (long long)Au, (long long)M,
              (long long)real, same ? "bit-exact" : "DIFFERENT", (long long)cn[0], (long long)cn[1]);
      if (k->mode == 3 && k->pad == 0) TU_CHECK(c, cn[0] > 0, "moe %s: no bad id counted", what);
      if (k->M_sum) TU_CHECK(c, cn[1] > 0, "moe %s: no dropped row counted", what);
      rc |= !same;
    } else if (st != DSK_STATUS_UNSUPPORTED) {
      rc = 1;
    }
    pair_free(&p);
    free(ids); free(xq); free(xsf);
  }
  return rc;
}

/* ------------------------------------------------------------- SwiGLU */
typedef struct sw_case {
  int64_t rows, I, ds;
  float limit, sigma;
  int mind, raw, packed;
} sw_case;
/* buffers: 0 D1, 1 m_indices, 2 q, 3 sf, 4 packed, 5 counters */
static dsk_status op_swiglu(dsk_ctx *cx, void *const *dev, const void *user) {
  const sw_case *k = (const sw_case *)user;
  dsk_swiglu_quant_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = k->rows; d.I = k->I; d.D1 = dev[0]; d.D1_stride = k->ds; d.m_indices = k->mind ? dev[1] : NULL;
  d.limit = k->limit; d.q = dev[2]; d.q_stride = k->I + 1;
  d.sf = k->raw ? dev[3] : NULL; d.sf_stride = k->I / 128;
  d.sf_packed = k->packed ? dev[4] : NULL; d.counters = dev[5];
  return dsk_swiglu_quant(cx, &d);
}

static int check_swiglu(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  static const sw_case cs[] = {
      {200, 256, 512, 10.0f, 6.0f, 1, 1, 1},
      {37, 384, 800, 0.0f, 3.0f, 0, 1, 1},
      {64, 128, 256, 10.0f, 30.0f, 1, 0, 1},
      {1, 256, 512, 10.0f, 1.0f, 0, 1, 0},
  };
  static const sw_case full[] = {{16384, 2048, 4096, 10.0f, 4.0f, 1, 0, 1}, {4096, 3072, 6144, 0.0f, 2.0f, 0, 1, 1}};
  tu_rng r = tu_rng_make(o->seed ^ 0x5161u);
  int rc = 0;
  const int nq = (int)(sizeof cs / sizeof cs[0]), nf = o->quick ? 0 : (int)(sizeof full / sizeof full[0]);
  for (int ci = 0; ci < nq + nf; ci++) {
    const sw_case *k = ci < nq ? &cs[ci] : &full[ci - nq];
    const int64_t R = k->rows, I = k->I, ng = I / 128;
    dsk_bf16 *D1 = mc_host(sizeof(dsk_bf16) * (size_t)(R * k->ds));
    tu_fill_bf16_normal(&r, D1, (size_t)(R * k->ds), k->sigma);
    if (R > 3) {
      D1[2 * k->ds + 5] = dsk_bf16_from_f32(NAN);      /* gate NaN -> h NaN */
      D1[3 * k->ds + I + 7] = dsk_bf16_from_f32(INFINITY); /* up inf: clamped to 10, or inf with no limit */
    }
    int32_t *mind = mc_host(sizeof(int32_t) * (size_t)R);
    for (int64_t i = 0; i < R; i++) mind[i] = tu_int(&r, 0, 4) == 0 ? -1 : (int32_t)tu_int(&r, 0, 7);
    mc_pair p;
    memset(&p, 0, sizeof p);
    pair_add(&p, D1, sizeof(dsk_bf16) * (size_t)(R * k->ds), 0);
    pair_add(&p, mind, sizeof(int32_t) * (size_t)R, 0);
    pair_add(&p, NULL, (size_t)(R * (I + 1)), 0xAB);
    pair_add(&p, NULL, (size_t)(R * ng), 0xAB);
    pair_add(&p, NULL, (size_t)dsk_sf_packed_words(1, R, ng) * 4, 0xAB);
    pair_add(&p, NULL, 16, 0);
    char what[64];
    snprintf(what, sizeof what, "swiglu_quant %lldx%lld limit %g", (long long)R, (long long)I, (double)k->limit);
    dsk_status st = pair_run(ctx, ref, &p, op_swiglu, k);
    if (pair_ok(st, what, c, log)) {
      const uint8_t *q0 = p.got[0][2], *q1 = p.got[1][2];
      int64_t qd = 0, far = 0;
      for (int64_t i = 0; i < R * (I + 1); i++)
        if (q0[i] != q1[i]) {
          qd++;
          /* one e4m3 step: same sign, magnitude codes adjacent */
          far += (q0[i] & 0x80) != (q1[i] & 0x80) || abs((int)(q0[i] & 0x7F) - (int)(q1[i] & 0x7F)) != 1;
        }
      const int64_t sfd = pair_cmp(&p, 3) >= 0 || pair_cmp(&p, 4) >= 0, cd = pair_cmp(&p, 5) >= 0;
      const int64_t allowed = 1 + R * I / 1000000;
      const int ok = sfd == 0 && far == 0 && qd <= allowed && cd == 0;
      TU_CHECK(c, ok, "moe %s: %lld codes differ (%lld more than one step; allowed %lld one-step), scales %s, counters %s",
               what, (long long)qd, (long long)far, (long long)allowed, sfd ? "DIFFER" : "equal", cd ? "differ" : "equal");
      fprintf(log, "moe %-38s m_indices %s: %s, counter %lld\n", what, k->mind ? "yes" : "no ",
              qd == 0 && !sfd && !cd ? "bit-exact" : ok ? "one-step codes (device exp)" : "DIFFERENT",
              (long long)((const int64_t *)p.got[0][5])[0]);
      rc |= !ok;
    } else if (st != DSK_STATUS_UNSUPPORTED) {
      rc = 1;
    }
    pair_free(&p);
    free(D1); free(mind);
  }
  return rc;
}

/* ------------------------------------------------------------- gather */
typedef struct ga_case {
  int64_t T, K, N, M;
  int shared; /* 0 none, 1 given, 2 in place (y == shared) */
  int64_t pad;
} ga_case;
/* buffers: 0 D2, 1 inv, 2 weights, 3 shared (or y in place), 4 y, 5 counters */
static dsk_status op_gather(dsk_ctx *cx, void *const *dev, const void *user) {
  const ga_case *k = (const ga_case *)user;
  dsk_moe_gather_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.T = k->T; d.topk = k->K; d.N = k->N; d.M_sum = k->M;
  d.D2 = dev[0]; d.D2_stride = k->N + k->pad;
  d.inv_perm = dev[1]; d.inv_perm_stride = k->K; d.weights = dev[2]; d.weights_stride = k->K;
  d.shared = k->shared ? dev[3] : NULL; d.shared_stride = k->N + k->pad;
  d.y = k->shared == 2 ? dev[3] : dev[4]; d.y_stride = k->N + k->pad;
  d.counters = dev[5];
  return dsk_moe_gather(cx, &d);
}

static int check_gather(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  static const ga_case cs[] = {{37, 6, 512, 300, 1, 0}, {37, 6, 512, 300, 0, 0}, {9, 8, 384, 100, 2, 0},
                               {5, 6, 300, 64, 1, 3},  {1, 6, 4096, 384, 1, 0}};
  static const ga_case full[] = {{4096, 8, 6144, 20000, 1, 0}};
  tu_rng r = tu_rng_make(o->seed ^ 0x6A7Eu);
  int rc = 0;
  const int nq = (int)(sizeof cs / sizeof cs[0]), nf = o->quick ? 0 : (int)(sizeof full / sizeof full[0]);
  for (int ci = 0; ci < nq + nf; ci++) {
    const ga_case *k = ci < nq ? &cs[ci] : &full[ci - nq];
    const int64_t T = k->T, K = k->K, ns = k->N + k->pad;
    dsk_bf16 *D2 = mc_host(sizeof(dsk_bf16) * (size_t)(k->M * ns)), *sh = mc_host(sizeof(dsk_bf16) * (size_t)(T * ns));
    tu_fill_bf16_normal(&r, D2, (size_t)(k->M * ns), 1.0);
    tu_fill_bf16_normal(&r, sh, (size_t)(T * ns), 1.0);
    int32_t *inv = mc_host(sizeof(int32_t) * (size_t)(T * K));
    float *w = mc_host(sizeof(float) * (size_t)(T * K));
    for (int64_t i = 0; i < T * K; i++) {
      inv[i] = (int32_t)tu_int(&r, 0, k->M - 1);
      if (i % 7 == 3) inv[i] = -1;
      if (i % 23 == 11) inv[i] = (int32_t)(k->M + 2); /* counted, skipped */
      w[i] = (float)(tu_uniform(&r) * 0.6);
    }
    mc_pair p;
    memset(&p, 0, sizeof p);
    pair_add(&p, D2, sizeof(dsk_bf16) * (size_t)(k->M * ns), 0);
    pair_add(&p, inv, sizeof(int32_t) * (size_t)(T * K), 0);
    pair_add(&p, w, sizeof(float) * (size_t)(T * K), 0);
    pair_add(&p, sh, sizeof(dsk_bf16) * (size_t)(T * ns), 0);
    pair_add(&p, NULL, sizeof(dsk_bf16) * (size_t)(T * ns), 0xAB);
    pair_add(&p, NULL, 16, 0);
    char what[64];
    snprintf(what, sizeof what, "gather T %lld N %lld shared %s", (long long)T, (long long)k->N,
             k->shared == 0 ? "none" : k->shared == 1 ? "yes" : "in place");
    dsk_status st = pair_run(ctx, ref, &p, op_gather, k);
    if (pair_ok(st, what, c, log)) {
      const int64_t a = pair_cmp(&p, k->shared == 2 ? 3 : 4), cd = pair_cmp(&p, 5);
      const int ok = a < 0 && cd < 0;
      TU_CHECK(c, ok, "moe %s: y differs from the cpu-ref at byte %lld, counters %s", what, (long long)a,
               cd < 0 ? "equal" : "differ");
      fprintf(log, "moe %-38s: %s, counter %lld\n", what, ok ? "bit-exact" : "DIFFERENT",
              (long long)((const int64_t *)p.got[0][5])[0]);
      rc |= !ok;
    } else if (st != DSK_STATUS_UNSUPPORTED) {
      rc = 1;
    }
    pair_free(&p);
    free(D2); free(sh); free(inv); free(w);
  }
  return rc;
}
/* -------------------------------------------------------------- GEMMs */
/* Sets byte kg of row (g, mn) in a packed tensor (host). */
static void mc_put_sf(int32_t *w, int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t kg, uint8_t v) {
  const int64_t off = dsk_sf_packed_offset(MN, sf_k, 0, mn, kg / 4) + g * dsk_sf_packed_words(1, MN, sf_k);
  uint32_t u = (uint32_t)w[off];
  u = (u & ~(0xFFu << (8 * (kg % 4)))) | ((uint32_t)v << (8 * (kg % 4)));
  w[off] = (int32_t)u;
}

typedef struct gm_case {
  const char *name;
  int mx;            /* B MXFP4 (else FP8) */
  int64_t N, K, EL, A;
  int32_t BM;        /* forced BLOCK_M, 0 = the heuristic */
  int64_t counts[8]; /* rows per local expert */
  int bad_seg;       /* segment whose rows carry a bad index (E_local + 3), -1 none */
} gm_case;
typedef struct gm_run {
  const gm_case *k;
  int64_t M;
} gm_run;
/* buffers: 0 A, 1 sfa, 2 m_indices, 3 B, 4 sfb, 5 D, 6 counters */
static dsk_status op_gemm(dsk_ctx *cx, void *const *dev, const void *user) {
  const gm_run *u = (const gm_run *)user;
  const gm_case *k = u->k;
  dsk_moe_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.M_sum = u->M; d.N = k->N; d.K = k->K; d.E_local = k->EL; d.A_used = k->A;
  d.A = dev[0]; d.A_stride = k->K;
  d.sfa.words = dev[1]; d.sfa.groups = 1; d.sfa.mn = u->M; d.sfa.sf_k = k->K / 128;
  d.m_indices = dev[2]; d.b_fmt = k->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8; d.B = dev[3];
  d.sfb.words = dev[4]; d.sfb.groups = k->EL; d.sfb.mn = k->N; d.sfb.sf_k = k->mx ? k->K / 32 : k->K / 128;
  d.D = dev[5]; d.D_stride = k->N + 8;
  if (k->BM) {
    d.tactic.op = DSK_OP_MOE_GEMM; d.tactic.version = DSK_MOE_GEMM_TACTIC_VERSION;
    d.tactic.v[0] = k->BM; d.tactic.v[1] = 128; d.tactic.v[2] = 1;
  }
  d.counters = dev[6];
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st = dsk_moe_gemm_plan(cx, &d, &pi);
  void *ws = NULL;
  if (st == DSK_STATUS_OK && pi.workspace_bytes > 0) st = dsk_mem_alloc(cx, &ws, (size_t)pi.workspace_bytes);
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  if (st == DSK_STATUS_OK) st = dsk_moe_gemm(cx, &d);
  if (ws) {
    const dsk_status s2 = dsk_ctx_synchronize(cx, NULL);
    dsk_mem_free(cx, ws);
    if (st == DSK_STATUS_OK) st = s2;
  }
  return st;
}
typedef struct dn_case {
  int64_t M, N, K;
  int32_t BM;
} dn_case;
/* buffers: 0 A, 1 sfa, 2 B, 3 sfb, 4 D */
static dsk_status op_dense(dsk_ctx *cx, void *const *dev, const void *user) {
  const dn_case *k = (const dn_case *)user;
  dsk_dense_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.M = k->M; d.N = k->N; d.K = k->K;
  d.A = dev[0]; d.A_stride = k->K;
  d.sfa.words = dev[1]; d.sfa.groups = 1; d.sfa.mn = k->M; d.sfa.sf_k = k->K / 128;
  d.B = dev[2]; d.sfb.words = dev[3]; d.sfb.groups = 1; d.sfb.mn = k->N; d.sfb.sf_k = k->K / 128;
  d.D = dev[4]; d.D_stride = k->N + 8;
  if (k->BM) {
    d.tactic.op = DSK_OP_MOE_DENSE_GEMM; d.tactic.version = DSK_DENSE_GEMM_TACTIC_VERSION;
    d.tactic.v[0] = k->BM; d.tactic.v[1] = 64; d.tactic.v[2] = 1;
  }
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st = dsk_dense_fp8_gemm_plan(cx, &d, &pi);
  void *ws = NULL;
  if (st == DSK_STATUS_OK && pi.workspace_bytes > 0) st = dsk_mem_alloc(cx, &ws, (size_t)pi.workspace_bytes);
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  if (st == DSK_STATUS_OK) st = dsk_dense_fp8_gemm(cx, &d);
  if (ws) {
    const dsk_status s2 = dsk_ctx_synchronize(cx, NULL);
    dsk_mem_free(cx, ws);
    if (st == DSK_STATUS_OK) st = s2;
  }
  return st;
}

/* D of the two contexts: diff over rows whose own index is a local expert;
 * rows whose index is bad (< -1 or >= E_local) must hold identical bytes
 * (skipped blocks: the poison both started with); padding rows inside live
 * blocks are unspecified and skipped. */
static void gemm_compare(const mc_pair *p, int jD, const int32_t *mind, int64_t M, int64_t N, int64_t EL, double *df,
                         int64_t *nonfinite, int64_t *touched) {
  const dsk_bf16 *d0 = p->got[0][jD], *d1 = p->got[1][jD];
  const int64_t Ds = N + 8;
  double *a = mc_host(sizeof(double) * (size_t)(M * N)), *b = mc_host(sizeof(double) * (size_t)(M * N));
  int64_t n = 0;
  *nonfinite = *touched = 0;
  for (int64_t r = 0; r < M; r++) {
    const int32_t e = mind ? mind[r] : 0;
    if (e >= 0 && e < EL) {
      for (int64_t c = 0; c < N; c++) {
        a[n] = mc_bf(d0[r * Ds + c]);
        b[n] = mc_bf(d1[r * Ds + c]);
        *nonfinite += !isfinite(a[n]);
        n++;
      }
      for (int64_t c = N; c < Ds; c++) *touched += d0[r * Ds + c] != d1[r * Ds + c]; /* stride gap */
    } else if (e != -1) {
      for (int64_t c = 0; c < Ds; c++) *touched += d0[r * Ds + c] != d1[r * Ds + c];
    }
  }
  *df = mc_diff(b, a, n);
  free(a);
  free(b);
}

static int check_gemms(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  static const gm_case cs[] = {
      {"fp8xfp4 A64 BM64", 1, 256, 256, 4, 64, 64, {5, 0, 70, 1}, -1},
      {"fp8xfp4 A128 BM64", 1, 256, 384, 4, 128, 64, {0, 130, 0, 64}, -1},
      {"fp8xfp4 A128 BM128 one expert", 1, 512, 256, 3, 128, 128, {0, 0, 200}, -1},
      {"fp8xfp4 A128 heuristic", 1, 384, 512, 8, 128, 0, {1, 2, 3, 0, 129, 6, 0, 64}, -1},
      {"fp8xfp4 bad block", 1, 256, 256, 4, 64, 64, {10, 64, 3, 1}, 1},
      {"fp8xfp8 A64 BM64", 0, 256, 384, 4, 64, 64, {3, 64, 0, 65}, -1},
      {"fp8xfp8 A128 BM128", 0, 128, 256, 2, 128, 128, {129, 7}, -1},
      {"fp8xfp8 A64 heuristic", 0, 640, 256, 5, 64, 0, {0, 1, 300, 2, 0}, -1},
  };
  static const gm_case full[] = {
      {"fp8xfp4 Flash FC1 8 experts", 1, 4096, 4096, 8, 128, 0, {70, 10, 0, 128, 129, 1, 64, 300}, -1},
      {"fp8xfp4 Flash FC2 8 experts", 1, 4096, 2048, 8, 64, 0, {1, 1, 1, 1, 1, 1, 1, 1}, -1},
      {"fp8xfp8 GLM FC1 8 experts", 0, 4096, 6144, 8, 128, 0, {30, 0, 20, 50, 1, 0, 128, 100}, -1},
  };
  tu_rng r = tu_rng_make(o->seed ^ 0x6E33u);
  int rc = 0;
  const int nq = (int)(sizeof cs / sizeof cs[0]), nf = o->quick ? 0 : (int)(sizeof full / sizeof full[0]);
  for (int ci = 0; ci < nq + nf; ci++) {
    const gm_case *k = ci < nq ? &cs[ci] : &full[ci - nq];
    const int64_t N = k->N, K = k->K, EL = k->EL, A = k->A, sfb_k = k->mx ? K / 32 : K / 128;
    int64_t M = A; /* one trailing padding block */
    for (int64_t e = 0; e < EL; e++) M += (k->counts[e] + A - 1) / A * A;
    int32_t *mind = mc_host(sizeof(int32_t) * (size_t)M);
    for (int64_t i = 0; i < M; i++) mind[i] = -1;
    int64_t row = 0;
    for (int64_t e = 0; e < EL; e++) {
      for (int64_t i = 0; i < k->counts[e]; i++) mind[row + i] = e == k->bad_seg ? (int32_t)(EL + 3) : (int32_t)e;
      row += (k->counts[e] + A - 1) / A * A;
    }
    uint8_t *Aq = mc_host((size_t)(M * K));
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < K; j++) Aq[i * K + j] = mind[i] == -1 ? 0x7F : mc_e4(&r); /* padding rows: NaN */
    const int64_t Wa = dsk_sf_packed_words(1, M, K / 128), Wb = dsk_sf_packed_words(EL, N, sfb_k);
    int32_t *sfa = mc_host(sizeof(int32_t) * (size_t)Wa), *sfb = mc_host(sizeof(int32_t) * (size_t)Wb);
    for (int64_t i = 0; i < M; i++)
      for (int64_t g = 0; g < K / 128; g++) mc_put_sf(sfa, M, K / 128, 0, i, g, (uint8_t)tu_int(&r, 112, 118));
    const int base = k->mx ? 127 + (int)lround(log2(1.0 / (2.93 * sqrt((double)K)))) : 127 - 14;
    for (int64_t e = 0; e < EL; e++)
      for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < sfb_k; g++) mc_put_sf(sfb, N, sfb_k, e, n, g, (uint8_t)(base + (int)tu_int(&r, -1, 1)));
    const int64_t Bb = EL * N * (k->mx ? K / 2 : K);
    uint8_t *B = mc_host((size_t)Bb);
    if (k->mx) mc_fill_bytes(&r, B, (size_t)Bb);
    else
      for (int64_t i = 0; i < Bb; i++) B[i] = mc_e4(&r);
    gm_run u = {k, M};
    mc_pair p;
    memset(&p, 0, sizeof p);
    pair_add(&p, Aq, (size_t)(M * K), 0);
    pair_add(&p, sfa, sizeof(int32_t) * (size_t)Wa, 0);
    pair_add(&p, mind, sizeof(int32_t) * (size_t)M, 0);
    pair_add(&p, B, (size_t)Bb, 0);
    pair_add(&p, sfb, sizeof(int32_t) * (size_t)Wb, 0);
    pair_add(&p, NULL, sizeof(dsk_bf16) * (size_t)(M * (N + 8)), 0xFF);
    pair_add(&p, NULL, 16, 0);
    char what[64];
    snprintf(what, sizeof what, "moe_gemm %s", k->name);
    dsk_status st = pair_run(ctx, ref, &p, op_gemm, &u);
    if (pair_ok(st, what, c, log)) {
      double df;
      int64_t nonfin, touched;
      gemm_compare(&p, 5, mind, M, N, EL, &df, &nonfin, &touched);
      const int64_t c0 = ((const int64_t *)p.got[0][6])[0], c1 = ((const int64_t *)p.got[1][6])[0];
      const int ok = df <= 0.01 && nonfin == 0 && touched == 0 && c0 == c1;
      TU_CHECK(c, ok, "moe %s: diff vs cpu-ref %.3g (<= 0.01), %lld non-finite, %lld bytes of skipped rows / gaps "
               "differ, counters %lld vs %lld", what, df, (long long)nonfin, (long long)touched, (long long)c0,
               (long long)c1);
      if (df > 1e-4) fprintf(log, "WARNING: moe %s: diff vs cpu-ref %.3g > 1e-4\n", what, df);
      fprintf(log, "moe %-42s M_sum %5lld N %4lld K %4lld E %lld A %3lld BM %3d: diff vs cpu-ref %.2e, bad blocks %lld %s\n",
              what, (long long)M, (long long)N, (long long)K, (long long)EL, (long long)A, (int)k->BM, df, (long long)c0,
              ok ? "ok" : "FAIL");
      rc |= !ok;
    } else if (st != DSK_STATUS_UNSUPPORTED) {
      rc = 1;
    }
    pair_free(&p);
    free(mind); free(Aq); free(sfa); free(sfb); free(B);
  }

  static const dn_case dn[] = {{37, 256, 384, 0}, {1, 512, 256, 16}, {130, 256, 256, 64}};
  static const dn_case dnf[] = {{512, 4096, 4096, 0}, {16, 6144, 2048, 0}}; /* the cpu-ref side is fp64 */
  const int ndq = (int)(sizeof dn / sizeof dn[0]), ndf = o->quick ? 0 : (int)(sizeof dnf / sizeof dnf[0]);
  for (int ci = 0; ci < ndq + ndf; ci++) {
    const dn_case *k = ci < ndq ? &dn[ci] : &dnf[ci - ndq];
    const int64_t M = k->M, N = k->N, K = k->K;
    uint8_t *Aq = mc_host((size_t)(M * K)), *B = mc_host((size_t)(N * K));
    for (int64_t i = 0; i < M * K; i++) Aq[i] = mc_e4(&r);
    for (int64_t i = 0; i < N * K; i++) B[i] = mc_e4(&r);
    const int64_t Wa = dsk_sf_packed_words(1, M, K / 128), Wb = dsk_sf_packed_words(1, N, K / 128);
    int32_t *sfa = mc_host(sizeof(int32_t) * (size_t)Wa), *sfb = mc_host(sizeof(int32_t) * (size_t)Wb);
    for (int64_t i = 0; i < M; i++)
      for (int64_t g = 0; g < K / 128; g++) mc_put_sf(sfa, M, K / 128, 0, i, g, (uint8_t)tu_int(&r, 112, 118));
    for (int64_t i = 0; i < N; i++)
      for (int64_t g = 0; g < K / 128; g++) mc_put_sf(sfb, N, K / 128, 0, i, g, (uint8_t)(127 - 14 + tu_int(&r, -1, 1)));
    mc_pair p;
    memset(&p, 0, sizeof p);
    pair_add(&p, Aq, (size_t)(M * K), 0);
    pair_add(&p, sfa, sizeof(int32_t) * (size_t)Wa, 0);
    pair_add(&p, B, (size_t)(N * K), 0);
    pair_add(&p, sfb, sizeof(int32_t) * (size_t)Wb, 0);
    pair_add(&p, NULL, sizeof(dsk_bf16) * (size_t)(M * (N + 8)), 0xFF);
    char what[64];
    snprintf(what, sizeof what, "dense_fp8_gemm M %lld N %lld K %lld BM %d", (long long)M, (long long)N, (long long)K,
             (int)k->BM);
    dsk_status st = pair_run(ctx, ref, &p, op_dense, k);
    if (pair_ok(st, what, c, log)) {
      double df;
      int64_t nonfin, touched;
      gemm_compare(&p, 4, NULL, M, N, 1, &df, &nonfin, &touched);
      const int ok = df <= 0.01 && nonfin == 0 && touched == 0;
      TU_CHECK(c, ok, "moe %s: diff vs cpu-ref %.3g (<= 0.01), %lld non-finite, %lld gap bytes written", what, df,
               (long long)nonfin, (long long)touched);
      if (df > 1e-4) fprintf(log, "WARNING: moe %s: diff vs cpu-ref %.3g > 1e-4\n", what, df);
      fprintf(log, "moe %-42s: diff vs cpu-ref %.2e %s\n", what, df, ok ? "ok" : "FAIL");
      rc |= !ok;
    } else if (st != DSK_STATUS_UNSUPPORTED) {
      rc = 1;
    }
    pair_free(&p);
    free(Aq); free(B); free(sfa); free(sfb);
  }
  return rc;
}

/* --------------------------------------------------------- bad inputs */
/* On ctx: descriptors the ops must reject (nothing launched) with a message
 * naming the field. Validation is shared by every backend; this proves the
 * context's dispatch never reaches a kernel with them. */
static int expect_bad(tu_counts *c, FILE *log, dsk_status st, const char *what, const char *needle) {
  const char *msg = dsk_last_error();
  const int ok = st == DSK_STATUS_INVALID_ARG && (!needle || (msg && strstr(msg, needle)));
  TU_CHECK(c, ok, "moe bad input %s: got %s (%s), want INVALID_ARG naming '%s'", what, dsk_status_name(st),
           msg ? msg : "", needle ? needle : "");
  if (!ok) fprintf(log, "moe bad input %-34s: NOT REJECTED (%s)\n", what, dsk_status_name(st));
  return !ok;
}

/* ------------------------------------------------------------ GEMM tactics
 *
 * dsk_moe_gemm and dsk_dense_fp8_gemm on the backend vs the cpu-ref on the
 * same bytes, every tactic (BLOCK_M dividing A_used, BLOCK_N 64/128/256,
 * split 1 and the largest valid split): diff metric over the live rows,
 * padding rows of A poisoned with 0x7F, blocks starting with -1 (and a bad
 * block index, counted) left unwritten, columns past N (D_stride gap) left
 * unwritten, one A_stride that is not a multiple of 16 (the backend's
 * unaligned path). */
static void gx_put(uint8_t *words, int64_t G, int64_t MN, int64_t sf_k, int64_t g, int64_t mn, int64_t kg,
                   uint8_t v) {
  const int64_t Kp = (sf_k + 3) / 4, T4 = (MN + 3) / 4 * 4;
  words[4 * (g * Kp * T4 + (kg / 4) * T4 + mn) + kg % 4] = v;
  (void)G;
}

typedef struct gx_case {
  const char *name;
  int mx, dense;
  int64_t N, K, EL, A_used; /* dense: EL 1, A_used = M */
  int64_t counts[6];
  int64_t a_pad;            /* A_stride = K + a_pad */
  int bad_block;            /* m_indices[0] = EL + 3 (skipped, counted) */
} gx_case;

static int gx_run(dsk_ctx *ctx, dsk_ctx *ref, const gx_case *g, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  tu_rng r = tu_rng_make(o->seed ^ 0x47454D4Du ^ (uint64_t)(g->N * 7 + g->K * 13 + g->EL));
  const int64_t N = g->N, K = g->K, EL = g->dense ? 1 : g->EL, A = g->A_used;
  int64_t M = 0;
  if (g->dense) {
    M = g->A_used;
  } else {
    for (int64_t e = 0; e < EL; e++) M += (g->counts[e] + A - 1) / A * A;
    M += A; /* a trailing padding block */
  }
  const int64_t As = K + g->a_pad, Ds = N + 6;
  const int64_t sfk_a = K / 128, sfk_b = g->mx ? K / 32 : K / 128;
  const int64_t Wa = dsk_sf_packed_words(1, M, sfk_a), Wb = dsk_sf_packed_words(EL, N, sfk_b);
  const int64_t Bbytes = EL * N * (g->mx ? K / 2 : K);
  uint8_t *hA = mc_host((size_t)(M * As)), *hB = mc_host((size_t)Bbytes);
  uint8_t *hsa = mc_host(sizeof(int32_t) * (size_t)Wa), *hsb = mc_host(sizeof(int32_t) * (size_t)Wb);
  int32_t *mind = mc_host(sizeof(int32_t) * (size_t)M);
  dsk_bf16 *Dx = mc_host(sizeof(dsk_bf16) * (size_t)(M * Ds)), *Dr = mc_host(sizeof(dsk_bf16) * (size_t)(M * Ds));
  for (int64_t i = 0; i < M; i++) mind[i] = -1;
  if (!g->dense) {
    int64_t row = 0;
    for (int64_t e = 0; e < EL; e++) {
      for (int64_t i = 0; i < g->counts[e]; i++) mind[row + i] = (int32_t)e;
      row += (g->counts[e] + A - 1) / A * A;
    }
  }
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < As; k++) {
      uint8_t q = (uint8_t)tu_next(&r);
      if ((q & 0x7F) == 0x7F) q = 0x38;
      hA[i * As + k] = (g->dense || mind[i] >= 0) ? q : 0x7F; /* padding rows: NaN, must not leak */
    }
  for (int64_t i = 0; i < M; i++)
    for (int64_t kg = 0; kg < sfk_a; kg++) gx_put(hsa, 1, M, sfk_a, 0, i, kg, (uint8_t)tu_int(&r, 112, 122));
  for (int64_t i = 0; i < Bbytes; i++) {
    uint8_t q = (uint8_t)tu_next(&r);
    if (!g->mx && (q & 0x7F) == 0x7F) q = 0xC0;
    hB[i] = q;
  }
  for (int64_t e = 0; e < EL; e++)
    for (int64_t n = 0; n < N; n++)
      for (int64_t kg = 0; kg < sfk_b; kg++)
        gx_put(hsb, EL, N, sfk_b, e, n, kg, (uint8_t)(g->mx ? tu_int(&r, 117, 121) : tu_int(&r, 113, 117)));
  if (g->bad_block) mind[0] = (int32_t)(EL + 3);

  static const int bns[3] = {64, 128, 256};
  static const int bms_g[2] = {64, 128}, bms_d[4] = {16, 32, 64, 128};
  const int nbm = g->dense ? 4 : 2;
  int rc = 0;
  dsk_ctx *cs[2] = {ctx, ref};
  for (int ib = 0; ib < nbm; ib++)
    for (int in = 0; in < 3; in++) {
      const int bm = g->dense ? bms_d[ib] : bms_g[ib], bn = bns[in];
      if (!g->dense && A % bm != 0) continue;
      const int split = (K / 4) % 128 == 0 ? 4 : (K / 2) % 128 == 0 ? 2 : 1;
      int64_t cnt[2] = {0, 0};
      dsk_status st = DSK_STATUS_OK;
      for (int w = 0; w < 2 && st == DSK_STATUS_OK; w++) {
        mc_bufs b = {cs[w], {0}, 0};
        uint8_t *dA = mc_up(&b, hA, (size_t)(M * As), &st), *dB = mc_up(&b, hB, (size_t)Bbytes, &st);
        int32_t *dsa = mc_up(&b, hsa, sizeof(int32_t) * (size_t)Wa, &st);
        int32_t *dsb = mc_up(&b, hsb, sizeof(int32_t) * (size_t)Wb, &st);
        int32_t *dm = mc_up(&b, mind, sizeof(int32_t) * (size_t)M, &st);
        dsk_bf16 *dD = mc_alloc(&b, sizeof(dsk_bf16) * (size_t)(M * Ds), &st);
        int64_t *dc = mc_alloc(&b, sizeof(int64_t), &st);
        if (st == DSK_STATUS_OK) st = dsk_mem_set(cs[w], dD, 0xFF, sizeof(dsk_bf16) * (size_t)(M * Ds));
        if (st == DSK_STATUS_OK) st = dsk_mem_set(cs[w], dc, 0, sizeof(int64_t));
        if (st == DSK_STATUS_OK && !g->dense) {
          dsk_moe_gemm_desc d;
          memset(&d, 0, sizeof d);
          d.struct_size = sizeof d;
          d.M_sum = M; d.N = N; d.K = K; d.E_local = EL; d.A_used = A;
          d.A = dA; d.A_stride = As;
          d.sfa.words = dsa; d.sfa.groups = 1; d.sfa.mn = M; d.sfa.sf_k = sfk_a;
          d.m_indices = dm; d.b_fmt = g->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8; d.B = dB;
          d.sfb.words = dsb; d.sfb.groups = EL; d.sfb.mn = N; d.sfb.sf_k = sfk_b;
          d.D = dD; d.D_stride = Ds; d.counters = dc;
          d.tactic.op = DSK_OP_MOE_GEMM; d.tactic.version = DSK_MOE_GEMM_TACTIC_VERSION;
          d.tactic.v[0] = bm; d.tactic.v[1] = bn; d.tactic.v[2] = w == 0 ? split : 1;
          st = dsk_moe_gemm(cs[w], &d);
        } else if (st == DSK_STATUS_OK) {
          dsk_dense_gemm_desc d;
          memset(&d, 0, sizeof d);
          d.struct_size = sizeof d;
          d.M = M; d.N = N; d.K = K; d.A = dA; d.A_stride = As;
          d.sfa.words = dsa; d.sfa.groups = 1; d.sfa.mn = M; d.sfa.sf_k = sfk_a;
          d.B = dB; d.sfb.words = dsb; d.sfb.groups = 1; d.sfb.mn = N; d.sfb.sf_k = sfk_b;
          d.D = dD; d.D_stride = Ds;
          d.tactic.op = DSK_OP_MOE_DENSE_GEMM; d.tactic.version = DSK_DENSE_GEMM_TACTIC_VERSION;
          d.tactic.v[0] = bm; d.tactic.v[1] = bn; d.tactic.v[2] = w == 0 ? split : 1;
          st = dsk_dense_fp8_gemm(cs[w], &d);
        }
        if (st == DSK_STATUS_OK) st = mc_down(cs[w], w == 0 ? Dx : Dr, dD, sizeof(dsk_bf16) * (size_t)(M * Ds));
        if (st == DSK_STATUS_OK) st = mc_down(cs[w], &cnt[w], dc, sizeof(int64_t));
        mc_free(&b);
      }
      if (st == DSK_STATUS_UNSUPPORTED) {
        fprintf(log, "moe gemm %-24s skipped on %s: %s\n", g->name, dsk_status_name(st), dsk_last_error());
        goto done;
      }
      TU_CHECK(c, st == DSK_STATUS_OK, "moe gemm %s BM %d BN %d: %s: %s", g->name, bm, bn, dsk_status_name(st),
               dsk_last_error());
      if (st != DSK_STATUS_OK) {
        rc = 1;
        goto done;
      }
      {
        double sxy = 0, s2 = 0;
        int64_t stray = 0, nonfinite = 0, live = 0;
        for (int64_t i = 0; i < M; i++) {
          const int32_t eb = g->dense ? 0 : mind[(i / bm) * bm];
          const int row_live = g->dense || (eb >= 0 && eb < EL && mind[i] >= 0);
          const int block_dead = !g->dense && (eb < 0 || eb >= EL);
          for (int64_t n = 0; n < Ds; n++) {
            const dsk_bf16 x = Dx[i * Ds + n];
            if (n >= N || block_dead) {
              stray += x != 0xFFFF;
              continue;
            }
            if (!row_live) continue; /* padding row of a live block: unspecified */
            const double a = mc_bf(Dr[i * Ds + n]), v = mc_bf(x);
            nonfinite += !isfinite(v);
            sxy += a * v;
            s2 += a * a + v * v;
            live++;
          }
        }
        const double df = s2 == 0 ? 0.0 : 1.0 - 2.0 * sxy / s2;
        const int bad = df > 1e-4 || stray || nonfinite || cnt[0] != cnt[1];
        TU_CHECK(c, !bad, "moe gemm %s BM %d BN %d split %d: diff %.3g, %lld stray writes, %lld non-finite, counters %lld vs %lld",
                 g->name, bm, bn, split, df, (long long)stray, (long long)nonfinite, (long long)cnt[0], (long long)cnt[1]);
        fprintf(log, "moe gemm %-24s M %5lld N %5lld K %5lld BM %3d BN %3d split %d: diff vs cpu-ref %.2e (%lld outputs) %s\n",
                g->name, (long long)M, (long long)N, (long long)K, bm, bn, split, df, (long long)live, bad ? "FAIL" : "ok");
        rc |= bad;
      }
    }
done:
  free(hA); free(hB); free(hsa); free(hsb); free(mind); free(Dx); free(Dr);
  return rc;
}

static int check_gemm_tactics(dsk_ctx *ctx, dsk_ctx *ref, int same, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  if (same) return 0; /* the cpu-ref against itself */
  static const gx_case quick[] = {
      {"fp8xfp4 A64", 1, 0, 384, 384, 4, 64, {5, 0, 70, 1}, 0, 0},
      {"fp8xfp4 A128 one expert", 1, 0, 256, 512, 3, 128, {0, 0, 200}, 0, 1},
      {"fp8xfp4 A128 unaligned A", 1, 0, 128, 256, 2, 128, {17, 129}, 8, 0},
      {"fp8xfp8 A64", 0, 0, 384, 384, 4, 64, {3, 64, 0, 65}, 0, 0},
      {"fp8xfp8 A128 bad block", 0, 0, 256, 256, 2, 128, {129, 7}, 0, 1},
      {"dense M 1", 0, 1, 384, 256, 1, 1, {0}, 0, 0},
      {"dense M 37", 0, 1, 256, 640, 1, 37, {0}, 0, 0},
      {"dense M 130 unaligned A", 0, 1, 128, 384, 1, 130, {0}, 4, 0},
  };
  static const gx_case full[] = {
      {"DSv4-Flash FC1 T 1", 1, 0, 4096, 4096, 8, 64, {1, 1, 1, 1, 1, 1}, 0, 0},
      {"DSv4-Flash FC2 T 64", 1, 0, 4096, 2048, 6, 128, {64, 64, 64, 64, 64, 64}, 0, 0},
      {"GLM-5.1 FC1", 0, 0, 4096, 6144, 6, 128, {100, 3, 0, 40, 1, 130}, 0, 0},
      {"shared FC1 T 8", 0, 1, 4096, 4096, 1, 8, {0}, 0, 0},
  };
  int rc = 0;
  const gx_case *cs = o->quick ? quick : full;
  const size_t n = o->quick ? sizeof quick / sizeof quick[0] : sizeof full / sizeof full[0];
  for (size_t i = 0; i < n; i++) rc |= gx_run(ctx, ref, &cs[i], o, c, log);
  return rc;
}

static int check_bad_inputs(dsk_ctx *ctx, tu_counts *c, FILE *log) {
  mc_bufs b = {ctx, {0}, 0};
  dsk_status st = DSK_STATUS_OK;
  const int64_t M = 256, N = 256, K = 256, EL = 4;
  void *A = mc_alloc(&b, (size_t)(M * K), &st), *sfa = mc_alloc(&b, (size_t)dsk_sf_packed_words(1, M, 2) * 4, &st);
  void *mind = mc_alloc(&b, (size_t)M * 4, &st), *B = mc_alloc(&b, (size_t)(EL * N * K), &st);
  void *sfb = mc_alloc(&b, (size_t)dsk_sf_packed_words(EL, N, K / 32) * 4, &st);
  void *D = mc_alloc(&b, (size_t)(M * N) * 2, &st);
  int rc = 0;
  if (st != DSK_STATUS_OK) {
    TU_CHECK(c, 0, "moe bad inputs: buffers: %s", dsk_last_error());
    mc_free(&b);
    return 1;
  }
  dsk_moe_gemm_desc g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.M_sum = M; g.N = N; g.K = K; g.E_local = EL; g.A_used = 64;
  g.A = A; g.A_stride = K;
  g.sfa.words = sfa; g.sfa.groups = 1; g.sfa.mn = M; g.sfa.sf_k = K / 128;
  g.m_indices = mind; g.b_fmt = DSK_MOE_W_MXFP4; g.B = B;
  g.sfb.words = sfb; g.sfb.groups = EL; g.sfb.mn = N; g.sfb.sf_k = K / 32;
  g.D = D; g.D_stride = N;
  g.tactic.op = DSK_OP_MOE_GEMM; g.tactic.version = DSK_MOE_GEMM_TACTIC_VERSION;
  g.tactic.v[0] = 128; g.tactic.v[1] = 128; g.tactic.v[2] = 1;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  rc |= expect_bad(c, log, dsk_moe_gemm(ctx, &g), "BLOCK_M 128, A_used 64 (run)", "does not divide A_used");
  rc |= expect_bad(c, log, dsk_moe_gemm_plan(ctx, &g, &pi), "BLOCK_M 128, A_used 64 (plan)", "does not divide A_used");
  g.tactic.v[0] = 64;
  dsk_moe_gemm_desc e = g;
  e.sfa.mn = M - 1;
  rc |= expect_bad(c, log, dsk_moe_gemm(ctx, &e), "sfa.mn != M_sum", "sfa.mn");
  e = g;
  e.sfb.sf_k = K / 128;
  rc |= expect_bad(c, log, dsk_moe_gemm(ctx, &e), "MXFP4 sfb.sf_k = K/128", "sfb.sf_k");
  e = g;
  e.sfb.groups = EL + 1;
  rc |= expect_bad(c, log, dsk_moe_gemm(ctx, &e), "sfb.groups != E_local", "sfb.groups");
  e = g;
  e.A_used = 96;
  rc |= expect_bad(c, log, dsk_moe_gemm(ctx, &e), "A_used 96", "A_used");
  e = g;
  e.m_indices = NULL;
  rc |= expect_bad(c, log, dsk_moe_gemm(ctx, &e), "m_indices NULL", "m_indices");

  dsk_moe_permute_desc p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.T = 4; p.topk = 6; p.E = 16; p.E_local = 8; p.expert_offset = 12; p.K = 256; p.A_used = 64; p.M_sum = 256;
  p.ids = mind; p.ids_stride = 6; p.xq = A; p.xq_stride = 256; p.xsf = A; p.xsf_stride = 2;
  p.A = A; p.A_stride = 256; p.Asf = B; p.Asf_stride = 2; p.m_indices = mind; p.inv_perm = D; p.inv_perm_stride = 6;
  p.workspace = sfb; p.workspace_bytes = 2 * 8 * 8;
  rc |= expect_bad(c, log, dsk_moe_permute(ctx, &p), "expert_offset + E_local > E", "expert_offset");
  p.expert_offset = 0;
  p.workspace_bytes = 8;
  rc |= expect_bad(c, log, dsk_moe_permute(ctx, &p), "permute workspace too small", "workspace_bytes");
  p.workspace_bytes = 2 * 8 * 8;
  p.M_sum = 100;
  rc |= expect_bad(c, log, dsk_moe_permute(ctx, &p), "M_sum not a multiple of A_used", "M_sum");

  dsk_moe_route_desc ro;
  memset(&ro, 0, sizeof ro);
  ro.struct_size = sizeof ro;
  ro.T = 1; ro.E = 8; ro.topk = 9; ro.score = DSK_MOE_SCORE_SIGMOID; ro.router = DSK_MOE_ROUTER_SCORED;
  ro.logits = (const float *)D; ro.logits_stride = 8; ro.renormalize = 1; ro.routed_scaling_factor = 1.0f;
  ro.ids = mind; ro.ids_stride = 9; ro.weights = (float *)D; ro.weights_stride = 9;
  rc |= expect_bad(c, log, dsk_moe_route(ctx, &ro), "topk > E", "topk");
  ro.topk = 2;
  ro.router = DSK_MOE_ROUTER_HASH;
  rc |= expect_bad(c, log, dsk_moe_route(ctx, &ro), "hash router without tid2eid", "tid2eid");
  /* the router workspace (dsk_moe_route_plan: T * E * 8 bytes with x) */
  {
    dsk_moe_route_desc rw;
    memset(&rw, 0, sizeof rw);
    rw.struct_size = sizeof rw;
    rw.T = 4; rw.E = 8; rw.topk = 2; rw.score = DSK_MOE_SCORE_SIGMOID; rw.router = DSK_MOE_ROUTER_SCORED;
    rw.H = 256; rw.x = A; rw.x_stride = 256; rw.gate_w = B; rw.renormalize = 1; rw.routed_scaling_factor = 1.0f;
    rw.ids = mind; rw.ids_stride = 2; rw.weights = (float *)sfb; rw.weights_stride = 2;
    const int64_t need = 4 * 8 * 8;
    dsk_plan_info rp;
    memset(&rp, 0, sizeof rp);
    rp.struct_size = sizeof rp;
    dsk_status ps = dsk_moe_route_plan(ctx, &rw, &rp);
    const int plan_ok = ps == DSK_STATUS_OK && rp.workspace_bytes == need;
    TU_CHECK(c, plan_ok, "moe route plan: %s, %lld bytes (want %lld)", dsk_status_name(ps), (long long)rp.workspace_bytes,
             (long long)need);
    rc |= !plan_ok;
    dsk_moe_route_desc rl = rw;
    rl.logits = (const float *)D; rl.logits_stride = 8;
    ps = dsk_moe_route_plan(ctx, &rl, &rp);
    TU_CHECK(c, ps == DSK_STATUS_OK && rp.workspace_bytes == 0, "moe route plan with logits: %s, %lld bytes (want 0)",
             dsk_status_name(ps), (long long)rp.workspace_bytes);
    rc |= !(ps == DSK_STATUS_OK && rp.workspace_bytes == 0);
    rl = rw;
    rl.topk = 9;
    rc |= expect_bad(c, log, dsk_moe_route_plan(ctx, &rl, &rp), "route plan: topk > E", "topk");
    rl = rw;
    rl.workspace = D; rl.workspace_bytes = need - 8;
    rc |= expect_bad(c, log, dsk_moe_route(ctx, &rl), "route workspace too small", "workspace_bytes");
    rl.workspace_bytes = -1;
    rc |= expect_bad(c, log, dsk_moe_route(ctx, &rl), "route workspace_bytes < 0", "workspace_bytes");
    rl.workspace = (uint8_t *)D + 8; rl.workspace_bytes = need;
    rc |= expect_bad(c, log, dsk_moe_route(ctx, &rl), "route workspace misaligned", "aligned");
    rl.workspace = mind; rl.workspace_bytes = M * 4;
    rc |= expect_bad(c, log, dsk_moe_route(ctx, &rl), "route workspace overlapping ids", "overlaps ids");
    rl = rw;
    rl.struct_size = offsetof(dsk_moe_route_desc, workspace) - 8;
    rc |= expect_bad(c, log, dsk_moe_route(ctx, &rl), "route struct_size below the old size", "struct_size");
  }

  dsk_swiglu_quant_desc s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.rows = 4; s.I = 200; s.D1 = D; s.D1_stride = 400; s.q = A; s.q_stride = 200; s.sf_packed = sfa;
  rc |= expect_bad(c, log, dsk_swiglu_quant(ctx, &s), "I 200", "I 200");
  s.I = 128; s.D1_stride = 256; s.q_stride = 128; s.limit = -1.0f;
  rc |= expect_bad(c, log, dsk_swiglu_quant(ctx, &s), "negative limit", "limit");
  mc_free(&b);
  fprintf(log, "moe bad inputs (misaligned BLOCK_M, scale shapes, A_used, workspace, topk, router workspace, limit): %s\n",
          rc ? "SOME ACCEPTED" : "all rejected");
  return rc;
}
/* ------------------------------------------------------------ forward */
typedef struct mc_case {
  const char *name;
  int mx;                        /* routed MXFP4 (DSv4) or FP8 (GLM-5.1) */
  int64_t H, I, Is, E, EL, topk;
  int score;
  float scale, limit;
} mc_case;

/* One layer's checkpoint for EL local experts (+ shared), host. */
typedef struct mc_ckpt {
  int64_t H, I, Is, EL;
  int mx;
  uint8_t **w[3], **s[3];        /* w1, w3, w2 per expert */
  uint8_t *sw[3], *ss[3];        /* shared w1, w3, w2 (FP8 + UE8M0 128x128) */
} mc_ckpt;

/* Large tensors (production shapes) copy random slices of a table of codes
 * of the same distribution instead of drawing every element. */
#define MC_BIG ((int64_t)1 << 22)
#define MC_TAB 65536
static void gen_fp8(tu_rng *r, int64_t rows, int64_t K, uint8_t **w, uint8_t **s) {
  const double sigma = 1.0 / sqrt((double)K);
  *w = mc_host((size_t)(rows * K));
  *s = mc_host((size_t)(rows / 128 * (K / 128)));
  if (rows * K > MC_BIG) {
    const int e = mc_ceil_log2f((float)(4.5 * sigma / 448.0)) + 127;
    uint8_t *tab = mc_host(MC_TAB);
    for (int i = 0; i < MC_TAB; i++) tab[i] = dsk_e4m3_from_f32((float)ldexp(tu_normal(r) * sigma, 127 - e));
    memset(*s, e, (size_t)(rows / 128 * (K / 128)));
    for (int64_t i = 0; i < rows * K; i += 4096) {
      const int64_t n = rows * K - i < 4096 ? rows * K - i : 4096;
      memcpy(*w + i, tab + tu_int(r, 0, MC_TAB - 4096), (size_t)n);
    }
    free(tab);
    return;
  }
  for (int64_t a = 0; a < rows / 128; a++)
    for (int64_t b = 0; b < K / 128; b++) {
      /* values N(0, sigma^2) with this block's amax about 4 sigma: scale = 2^ceil(log2(4 sigma / 448)) */
      const int e = mc_ceil_log2f((float)(4.5 * sigma / 448.0)) + 127;
      (*s)[a * (K / 128) + b] = (uint8_t)e;
      for (int64_t i = 0; i < 128; i++)
        for (int64_t k = 0; k < 128; k++)
          (*w)[(a * 128 + i) * K + b * 128 + k] = dsk_e4m3_from_f32((float)ldexp(tu_normal(r) * sigma, 127 - e));
    }
}
static void gen_mx(tu_rng *r, int64_t rows, int64_t K, uint8_t **w, uint8_t **s) {
  *w = mc_host((size_t)(rows * K / 2));
  *s = mc_host((size_t)(rows * K / 32));
  const int base = 127 + (int)lround(log2(1.0 / (2.93 * sqrt((double)K))));
  if (rows * K / 2 > MC_BIG)
    mc_fill_bytes(r, *w, (size_t)(rows * K / 2));
  else
    for (int64_t i = 0; i < rows * K / 2; i++) (*w)[i] = (uint8_t)tu_next(r);
  for (int64_t i = 0; i < rows * K / 32; i++) (*s)[i] = (uint8_t)(base + (int)tu_int(r, -1, 1));
}
static void ck_make(mc_ckpt *k, const mc_case *cs, uint64_t seed) {
  tu_rng r = tu_rng_make(seed);
  k->H = cs->H; k->I = cs->I; k->Is = cs->Is; k->EL = cs->EL; k->mx = cs->mx;
  for (int j = 0; j < 3; j++) {
    k->w[j] = mc_host(sizeof(uint8_t *) * (size_t)cs->EL);
    k->s[j] = mc_host(sizeof(uint8_t *) * (size_t)cs->EL);
  }
  for (int64_t e = 0; e < cs->EL; e++)
    for (int j = 0; j < 3; j++) {
      const int64_t rows = j < 2 ? cs->I : cs->H, K = j < 2 ? cs->H : cs->I;
      if (cs->mx) gen_mx(&r, rows, K, &k->w[j][e], &k->s[j][e]);
      else gen_fp8(&r, rows, K, &k->w[j][e], &k->s[j][e]);
    }
  for (int j = 0; j < 3; j++) {
    k->sw[j] = k->ss[j] = NULL;
    if (cs->Is) gen_fp8(&r, j < 2 ? cs->Is : cs->H, j < 2 ? cs->H : cs->Is, &k->sw[j], &k->ss[j]);
  }
}
static void ck_free(mc_ckpt *k) {
  for (int j = 0; j < 3; j++) {
    for (int64_t e = 0; e < k->EL; e++) {
      free(k->w[j][e]);
      free(k->s[j][e]);
    }
    free(k->w[j]);
    free(k->s[j]);
    free(k->sw[j]);
    free(k->ss[j]);
  }
}
/* Row `row` of a checkpoint tensor [rows, K] decoded to fp64 through
 * lookup tables (code values and the 256 UE8M0 powers of two). */
typedef struct mc_lut { double e4[256], e2[16], ue[256]; } mc_lut;
static void lut_init(mc_lut *l) {
  for (int i = 0; i < 256; i++) {
    l->e4[i] = (double)dsk_e4m3_to_f32((uint8_t)i);
    l->ue[i] = mc_ue((uint8_t)i);
  }
  for (int i = 0; i < 16; i++) l->e2[i] = (double)dsk_e2m1_to_f32((uint8_t)i);
}
static void ck_row(const mc_lut *l, int mx, const uint8_t *w, const uint8_t *s, int64_t K, int64_t row, double *out) {
  if (mx) {
    const uint8_t *b = w + row * (K / 2), *sc = s + row * (K / 32);
    for (int64_t k = 0; k < K; k++) out[k] = l->e2[(b[k / 2] >> (4 * (k % 2))) & 15] * l->ue[sc[k / 32]];
  } else {
    const uint8_t *b = w + row * K, *sc = s + (row / 128) * (K / 128);
    for (int64_t k = 0; k < K; k++) out[k] = l->e4[b[k]] * l->ue[sc[k / 128]];
  }
}

/* fp64 expert: out[H] += wt * W2 . q(silu(min(W1 xd, L)) * clamp(W3 xd)) */
static void oracle_expert(const mc_lut *l, int mx, const uint8_t *const *w, const uint8_t *const *s, int64_t H,
                          int64_t I, float lim, const double *xd, double wt, double *out) {
  float *h = mc_host(sizeof(float) * (size_t)I);
  double *hq = mc_host(sizeof(double) * (size_t)I), *r1 = mc_host(sizeof(double) * (size_t)(H > I ? H : I)),
         *r3 = mc_host(sizeof(double) * (size_t)H);
  for (int64_t i = 0; i < I; i++) {
    ck_row(l, mx, w[0], s[0], H, i, r1);
    ck_row(l, mx, w[1], s[1], H, i, r3);
    double g = 0, u = 0;
    for (int64_t k = 0; k < H; k++) {
      g += r1[k] * xd[k];
      u += r3[k] * xd[k];
    }
    if (lim > 0) {
      g = fmin(g, lim);
      u = fmax(fmin(u, lim), -lim);
    }
    h[i] = (float)(g / (1.0 + exp(-g)) * u);
  }
  mc_qdq(h, I, hq);
  for (int64_t n = 0; n < H; n++) {
    ck_row(l, mx, w[2], s[2], I, n, r1);
    double acc = 0;
    for (int64_t i = 0; i < I; i++) acc += r1[i] * hq[i];
    out[n] += wt * acc;
  }
  free(h);
  free(hq);
  free(r1);
  free(r3);
}

static double score_of(int score, double z) {
  if (score == DSK_MOE_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-z));
  return sqrt(z > 30 ? z : log1p(exp(z)));
}

/* Prepares, uploads and runs one layer on one context: y (host) out, plus
 * ids/weights (router mode) and the counters. ids_in / w_in (host, [T,
 * topk]) skip the router. reps > 0: after the first run, reps more runs are
 * timed (each bracketed by dsk_ctx_synchronize, host clock) and *median_us
 * set. */
typedef struct mc_layer_in {
  int64_t T, off;
  const dsk_bf16 *x, *gw;
  const float *bias;
  const int32_t *ids_in;
  const float *w_in;
  const void *const *prep;
  const int64_t *prep_bytes;
  int reps;
} mc_layer_in;
static dsk_status run_layer(dsk_ctx *cx, const mc_case *cs, const mc_layer_in *in, dsk_bf16 *y, int32_t *ids,
                            float *wts, int64_t *cnt, double *median_us) {
  mc_bufs b = {cx, {0}, 0};
  dsk_status st = DSK_STATUS_OK;
  const int64_t T = in->T, H = cs->H, E = cs->E, K = cs->topk;
  void *dp[8];
  for (int i = 0; i < 8; i++)
    dp[i] = in->prep_bytes[i] > 0 ? mc_up(&b, in->prep[i], (size_t)in->prep_bytes[i], &st) : NULL;
  dsk_bf16 *dx = mc_up(&b, in->x, sizeof(dsk_bf16) * (size_t)(T * H), &st);
  dsk_bf16 *dg = mc_up(&b, in->gw, sizeof(dsk_bf16) * (size_t)(E * H), &st);
  float *db = mc_up(&b, in->bias, sizeof(float) * (size_t)E, &st);
  int32_t *dii = in->ids_in ? mc_up(&b, in->ids_in, sizeof(int32_t) * (size_t)(T * K), &st) : NULL;
  float *dwi = in->ids_in ? mc_up(&b, in->w_in, sizeof(float) * (size_t)(T * K), &st) : NULL;
  dsk_bf16 *dy = mc_alloc(&b, sizeof(dsk_bf16) * (size_t)(T * H), &st);
  int32_t *di = mc_alloc(&b, sizeof(int32_t) * (size_t)(T * K), &st);
  float *dw = mc_alloc(&b, sizeof(float) * (size_t)(T * K), &st);
  int64_t *dc = mc_alloc(&b, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS, &st);
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, dy, 0xFF, sizeof(dsk_bf16) * (size_t)(T * H));
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, di, 0xFF, sizeof(int32_t) * (size_t)(T * K));
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, dc, 0, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS);
  dsk_moe_desc d;
  dsk_moe_desc_init(&d, cs->mx ? DSK_MOE_MODEL_DSV4_FLASH : DSK_MOE_MODEL_GLM51);
  d.T = T; d.H = H; d.E = E; d.E_local = cs->EL; d.expert_offset = in->off; d.topk = K;
  d.score = (dsk_moe_score)cs->score; d.routed_scaling_factor = cs->scale;
  d.gate_w = dg; d.gate_bias = db; d.x = dx; d.x_stride = H; d.y = dy; d.y_stride = H;
  d.ids_in = dii; d.weights_in = dwi;
  d.ids_out = di; d.weights_out = dw;
  d.routed.fmt = cs->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8; d.routed.E = cs->EL; d.routed.I = cs->I;
  d.routed.w13 = dp[0]; d.routed.sf13 = dp[1]; d.routed.w2 = dp[2]; d.routed.sf2 = dp[3];
  d.swiglu_limit = cs->limit;
  memset(&d.shared, 0, sizeof d.shared);
  if (cs->Is) {
    d.shared.fmt = DSK_MOE_W_FP8; d.shared.E = 1; d.shared.I = cs->Is;
    d.shared.w13 = dp[4]; d.shared.sf13 = dp[5]; d.shared.w2 = dp[6]; d.shared.sf2 = dp[7];
  }
  d.shared_limit = cs->limit;
  d.counters = dc;
  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  if (st == DSK_STATUS_OK) st = dsk_moe_plan(cx, &d, &pi);
  void *ws = st == DSK_STATUS_OK ? mc_alloc(&b, (size_t)pi.workspace_bytes, &st) : NULL;
  if (st == DSK_STATUS_OK) st = dsk_mem_set(cx, ws, 0xA5, (size_t)pi.workspace_bytes); /* contents never matter */
  d.workspace = ws;
  d.workspace_bytes = pi.workspace_bytes;
  if (st == DSK_STATUS_OK) st = dsk_moe_run(cx, &d);
  if (st == DSK_STATUS_OK) st = mc_down(cx, cnt, dc, sizeof(int64_t) * DSK_MOE_NUM_COUNTERS);
  if (st == DSK_STATUS_OK && in->reps > 0 && median_us) {
    double *us = mc_host(sizeof(double) * (size_t)in->reps);
    for (int i = 0; i < in->reps && st == DSK_STATUS_OK; i++) {
      st = dsk_ctx_synchronize(cx, NULL);
      const double t0 = tu_now_us();
      if (st == DSK_STATUS_OK) st = dsk_moe_run(cx, &d); /* same inputs: same outputs; counters add up */
      if (st == DSK_STATUS_OK) st = dsk_ctx_synchronize(cx, NULL);
      us[i] = tu_now_us() - t0;
    }
    *median_us = tu_median(us, in->reps);
    free(us);
  }
  if (st == DSK_STATUS_OK) st = mc_down(cx, y, dy, sizeof(dsk_bf16) * (size_t)(T * H));
  if (st == DSK_STATUS_OK) st = mc_down(cx, ids, di, sizeof(int32_t) * (size_t)(T * K));
  if (st == DSK_STATUS_OK) st = mc_down(cx, wts, dw, sizeof(float) * (size_t)(T * K));
  mc_free(&b);
  return st;
}

/* Host preparation of the case's experts on the CPU context `ref`. */
static dsk_status prepare_host(dsk_ctx *ref, const mc_case *cs, const mc_ckpt *k, int64_t off, void *hp[8],
                               int64_t pb[8]) {
  int64_t by[4];
  dsk_status st = DSK_STATUS_OK;
  for (int i = 0; i < 8; i++) {
    hp[i] = NULL;
    pb[i] = 0;
  }
  for (int part = 0; part < 2 && st == DSK_STATUS_OK; part++) {
    if (part == 1 && !cs->Is) break;
    const int mx = part == 0 && cs->mx;
    const int64_t E = part == 0 ? cs->EL : 1, I = part == 0 ? cs->I : cs->Is;
    dsk_moe_weights_bytes(mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8, E, cs->H, I, by);
    for (int i = 0; i < 4; i++) {
      pb[part * 4 + i] = by[i];
      hp[part * 4 + i] = mc_host((size_t)by[i]);
    }
    const void **a[6];
    for (int j = 0; j < 6; j++) a[j] = mc_host(sizeof(void *) * (size_t)E);
    for (int64_t e = 0; e < E; e++) {
      static const int order[3] = {0, 1, 2}; /* w1, w3, w2 */
      for (int j = 0; j < 3; j++) {
        a[2 * j][e] = part == 0 ? (const void *)k->w[order[j]][e] : (const void *)k->sw[j];
        a[2 * j + 1][e] = part == 0 ? (const void *)k->s[order[j]][e] : (const void *)k->ss[j];
      }
    }
    dsk_moe_prepare_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.src = mx ? DSK_MOE_SRC_MXFP4 : DSK_MOE_SRC_FP8_E8M0;
    d.E_local = E; d.expert_offset = part == 0 ? off : 0; d.H = cs->H; d.I = I; d.tp_size = 1;
    d.w1 = (const void *const *)a[0]; d.s1 = (const void *const *)a[1];
    d.w3 = (const void *const *)a[2]; d.s3 = (const void *const *)a[3];
    d.w2 = (const void *const *)a[4]; d.s2 = (const void *const *)a[5];
    d.w13 = hp[part * 4 + 0]; d.w13_bytes = by[0];
    d.sf13 = hp[part * 4 + 1]; d.sf13_bytes = by[1];
    d.w2_out = hp[part * 4 + 2]; d.w2_bytes = by[2];
    d.sf2 = hp[part * 4 + 3]; d.sf2_bytes = by[3];
    st = dsk_moe_prepare_weights(ref, &d);
    for (int j = 0; j < 6; j++) free((void *)a[j]);
  }
  return st;
}

/* Routing modes of a forward case. */
enum { MC_ROUTER = 0, MC_ONE_EXPERT = 1, MC_TWO_EXPERTS = 2, MC_BAD_IDS = 3 };
static const char *const k_mode_names[] = {"router", "all on one expert", "two experts", "given ids, 2 bad"};

/* Given ids and weights [T, topk] of a mode (local ids = off + l). */
static void make_ids(tu_rng *r, const mc_case *cs, int64_t off, int mode, int64_t T, int32_t *ids, float *w,
                     int64_t *nbad) {
  const int64_t K = cs->topk, EL = cs->EL;
  *nbad = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t k = 0; k < K; k++) {
      int64_t id = off + tu_int(r, 0, EL - 1);
      if (mode == MC_ONE_EXPERT) id = k == 0 ? off + 3 % EL : -1;
      if (mode == MC_TWO_EXPERTS) id = k == 0 ? off + 1 % EL : k == 1 ? off + EL - 1 : -1;
      ids[t * K + k] = (int32_t)id;
      w[t * K + k] = (float)(0.1 + 0.5 * tu_uniform(r));
    }
  if (mode == MC_BAD_IDS && K >= 3) {
    ids[1] = (int32_t)(cs->E + 5);      /* >= E: skipped and counted */
    ids[(T - 1) * K + 2] = -9;          /* < -1: skipped and counted */
    *nbad = 2;
  }
}

static int check_case(dsk_ctx *ctx, dsk_ctx *ref, int same, const mc_case *cs, const int64_t *Ts, int nT, int mode,
                      int64_t oracle_tokens, int64_t ref_tokens, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  const int64_t H = cs->H, E = cs->E, K = cs->topk, EL = cs->EL, off = E - EL;
  mc_ckpt ck;
  ck_make(&ck, cs, o->seed ^ (uint64_t)(H * 131 + E + EL));
  void *hp[8];
  int64_t pb[8];
  int rc = 0;
  dsk_status st = prepare_host(ref, cs, &ck, off, hp, pb);
  TU_CHECK(c, st == DSK_STATUS_OK, "moe %s: prepare: %s: %s", cs->name, dsk_status_name(st), dsk_last_error());
  tu_rng r = tu_rng_make(o->seed ^ 0x6D6F65u ^ (uint64_t)E ^ (uint64_t)mode << 20);
  mc_lut lut;
  lut_init(&lut);
  dsk_bf16 *gw = mc_host(sizeof(dsk_bf16) * (size_t)(E * H));
  float *bias = mc_host(sizeof(float) * (size_t)E);
  tu_fill_bf16_normal(&r, gw, (size_t)(E * H), 1.0 / sqrt((double)H));
  /* selection bias only: steer tokens to the local experts when EP slices them */
  for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(&r) * 0.05) + (EL < E && e >= off ? 10.0f : 0.0f);
  for (int ti = 0; ti < nT && st == DSK_STATUS_OK; ti++) {
    const int64_t T = Ts[ti];
    const int64_t Tr = same ? 0 : (ref_tokens < T ? ref_tokens : T), To = oracle_tokens < T ? oracle_tokens : T;
    const int64_t Tc = Tr > To ? Tr : To;
    dsk_bf16 *x = mc_host(sizeof(dsk_bf16) * (size_t)(T * H)), *y = mc_host(sizeof(dsk_bf16) * (size_t)(T * H)),
             *yr = mc_host(sizeof(dsk_bf16) * (size_t)((Tr ? Tr : 1) * H));
    int32_t *ids = mc_host(sizeof(int32_t) * (size_t)(T * K)), *idr = mc_host(sizeof(int32_t) * (size_t)(T * K));
    int32_t *ids_in = mode != MC_ROUTER ? mc_host(sizeof(int32_t) * (size_t)(T * K)) : NULL;
    float *w = mc_host(sizeof(float) * (size_t)(T * K)), *wr = mc_host(sizeof(float) * (size_t)(T * K));
    float *w_in = mode != MC_ROUTER ? mc_host(sizeof(float) * (size_t)(T * K)) : NULL;
    double *a = mc_host(sizeof(double) * (size_t)((Tc ? Tc : 1) * H)), *bref = mc_host(sizeof(double) * (size_t)((Tc ? Tc : 1) * H));
    /* x: a block of normals repeated for large T */
    tu_fill_bf16_normal_rep(&r, x, (size_t)(T * H), 1.0);
    int64_t nbad = 0;
    if (mode != MC_ROUTER) make_ids(&r, cs, off, mode, T, ids_in, w_in, &nbad);
    int64_t cnt[DSK_MOE_NUM_COUNTERS] = {0}, cntr[DSK_MOE_NUM_COUNTERS] = {0};
    mc_layer_in in = {T, off, x, gw, bias, ids_in, w_in, (const void *const *)hp, pb, 0};
    const double t0 = tu_now_us();
    st = run_layer(ctx, cs, &in, y, ids, w, cnt, NULL);
    const double us = tu_now_us() - t0;
    if (st == DSK_STATUS_UNSUPPORTED) {
      fprintf(log, "moe %-22s skipped on %s: %s\n", cs->name, dsk_status_name(st), dsk_last_error());
      st = DSK_STATUS_OK;
      free(x); free(y); free(yr); free(ids); free(idr); free(ids_in); free(w); free(wr); free(w_in); free(a); free(bref);
      break;
    }
    TU_CHECK(c, st == DSK_STATUS_OK, "moe %s T %lld: %s: %s", cs->name, (long long)T, dsk_status_name(st),
             dsk_last_error());
    int64_t cnt_other = 0;
    for (int i = 0; i < DSK_MOE_NUM_COUNTERS; i++) cnt_other += i == DSK_MOE_CNT_BAD_EXPERT ? 0 : cnt[i];
    TU_CHECK(c, cnt_other == 0 && cnt[DSK_MOE_CNT_BAD_EXPERT] == nbad,
             "moe %s T %lld (%s): counters: %lld bad experts (want %lld), %lld other events on clean input", cs->name,
             (long long)T, k_mode_names[mode], (long long)cnt[DSK_MOE_CNT_BAD_EXPERT], (long long)nbad,
             (long long)cnt_other);
    double d_ref = -1, d_fp64 = -1;
    int64_t ids_vs_ref = 0;
    int bad = st != DSK_STATUS_OK;
    for (int64_t i = 0; i < Tc * H && !bad; i++) a[i] = mc_bf(y[i]);
    if (!bad && Tr > 0) {
      /* the cpu-ref layer on the first Tr tokens (every token's output depends on its own row only) */
      mc_layer_in ir = in;
      ir.T = Tr;
      dsk_status s2 = run_layer(ref, cs, &ir, yr, idr, wr, cntr, NULL);
      TU_CHECK(c, s2 == DSK_STATUS_OK, "moe %s T %lld: cpu-ref: %s", cs->name, (long long)T, dsk_last_error());
      for (int64_t i = 0; i < Tr * H; i++) bref[i] = mc_bf(yr[i]);
      d_ref = mc_diff(bref, a, Tr * H);
      if (mode == MC_ROUTER)
        for (int64_t i = 0; i < Tr * K; i++) ids_vs_ref += ids[i] != idr[i];
      TU_CHECK(c, d_ref <= 0.01, "moe %s T %lld: diff vs cpu-ref %.3g > 0.01", cs->name, (long long)T, d_ref);
      TU_CHECK(c, ids_vs_ref == 0, "moe %s T %lld: %lld routed ids differ from the cpu-ref's", cs->name, (long long)T,
               (long long)ids_vs_ref);
      if (d_ref > 1e-4) fprintf(log, "WARNING: moe %s T %lld: diff vs cpu-ref %.3g > 1e-4\n", cs->name, (long long)T, d_ref);
      bad |= d_ref > 0.01 || ids_vs_ref != 0;
    }
    if (!bad && To > 0) {
      int64_t id_bad = 0;
      for (int64_t t = 0; t < To; t++) {
        double *z = mc_host(sizeof(double) * (size_t)E), *sc = mc_host(sizeof(double) * (size_t)E);
        const int32_t *tid = mode == MC_ROUTER ? ids + t * K : ids_in + t * K;
        double sum = 0;
        if (mode == MC_ROUTER) {
          for (int64_t e = 0; e < E; e++) {
            double acc = 0;
            for (int64_t h = 0; h < H; h++) acc += mc_bf(x[t * H + h]) * mc_bf(gw[e * H + h]);
            z[e] = acc;
            sc[e] = score_of(cs->score, acc);
          }
          /* the fp64 top-k (ties: lower id) and its margin */
          double kth = INFINITY, next = -INFINITY;
          for (int64_t k = 0; k < K; k++) {
            const int32_t id = tid[k];
            if (id < 0 || id >= E) {
              id_bad++;
              continue;
            }
            sum += sc[id];
            kth = fmin(kth, sc[id] + bias[id]);
          }
          for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t k = 0; k < K; k++) taken |= tid[k] == e;
            if (!taken) next = fmax(next, sc[e] + bias[e]);
          }
          if (next > kth && (next - kth) > 1e-6 * fabs(kth)) id_bad++;
        }
        float xf[16384];
        double *xd = mc_host(sizeof(double) * (size_t)H);
        for (int64_t h = 0; h < H; h++) xf[h] = dsk_bf16_to_f32(x[t * H + h]);
        mc_qdq(xf, H, xd);
        double *out = bref + t * H;
        for (int64_t h = 0; h < H; h++) out[h] = 0;
        for (int64_t k = 0; k < K; k++) {
          const int32_t id = tid[k];
          if (id < off || id >= off + EL) continue;
          const double wt = mode == MC_ROUTER ? sc[id] / sum * cs->scale : (double)w_in[t * K + k];
          const uint8_t *wv[3] = {ck.w[0][id - off], ck.w[1][id - off], ck.w[2][id - off]};
          const uint8_t *sv[3] = {ck.s[0][id - off], ck.s[1][id - off], ck.s[2][id - off]};
          oracle_expert(&lut, cs->mx, wv, sv, H, cs->I, cs->limit, xd, wt, out);
        }
        if (cs->Is) {
          const uint8_t *wv[3] = {ck.sw[0], ck.sw[1], ck.sw[2]}, *sv[3] = {ck.ss[0], ck.ss[1], ck.ss[2]};
          oracle_expert(&lut, 0, wv, sv, H, cs->Is, cs->limit, xd, 1.0, out);
        }
        free(z); free(sc); free(xd);
      }
      d_fp64 = mc_diff(bref, a, To * H);
      TU_CHECK(c, id_bad == 0, "moe %s T %lld: %lld tokens routed unlike fp64 (no near tie)", cs->name, (long long)T,
               (long long)id_bad);
      TU_CHECK(c, d_fp64 <= 0.01, "moe %s T %lld: diff vs fp64 %.3g > 0.01", cs->name, (long long)T, d_fp64);
      bad |= d_fp64 > 0.01 || id_bad;
    }
    char sr[48], sf[48];
    if (Tr == 0) snprintf(sr, sizeof sr, "- (same backend)");
    else if (Tr < T) snprintf(sr, sizeof sr, "%.2e (%lld tokens)", d_ref, (long long)Tr);
    else snprintf(sr, sizeof sr, "%.2e", d_ref);
    if (To == 0) snprintf(sf, sizeof sf, "- (not run)");
    else if (To < T) snprintf(sf, sizeof sf, "%.2e (%lld tokens)", d_fp64, (long long)To);
    else snprintf(sf, sizeof sf, "%.2e", d_fp64);
    fprintf(log, "moe %-22s H %5lld I %4lld E %3lld/%-3lld top-%lld T %4lld %-17s: diff vs cpu-ref %s, vs fp64 %s (%.1f ms) %s\n",
            cs->name, (long long)H, (long long)cs->I, (long long)EL, (long long)E, (long long)K, (long long)T,
            k_mode_names[mode], sr, sf, us * 1e-3, bad ? "FAIL" : "ok");
    rc |= bad;
    free(x); free(y); free(yr); free(ids); free(idr); free(ids_in); free(w); free(wr); free(w_in); free(a); free(bref);
  }
  for (int i = 0; i < 8; i++) free(hp[i]);
  free(gw);
  free(bias);
  ck_free(&ck);
  return rc || st != DSK_STATUS_OK;
}

/* ------------------------------------------------------------ demo row */
/* One MoE row of `dsk demo` (demo.c). which: 0 DSv4-Flash, 1 GLM-5.1, 2
 * DSv4-Pro. Production H / I / E / top-k with 16 local experts (an EP16
 * rank; the selection bias steers every token to them) when ctx is CUDA and
 * not quick, else reduced shapes (labelled). T = 16 tokens through the
 * router. Timed as the demo rows are (reps runs, each bracketed by
 * dsk_ctx_synchronize, host clock). Checked against the cpu-ref layer
 * (diff <= 0.01; skipped when ctx is the cpu-ref) and the fp64 forward
 * (diff <= 0.01; 4 tokens at production shapes, all 16 when reduced).
 * res: [0] median_us, [1] GB/s (weight bytes: active local experts, shared,
 * router), [2] TFLOPS (real rows), [3] rel_l2 and [4] max_abs of y against
 * the cpu-ref (or fp64). Returns 0 if the row ran (pass says whether it is
 * within the bounds). */
int dsk__moe_demo_row(dsk_ctx *ctx, dsk_ctx *ref, int which, int quick, int reps, uint64_t seed, double res[5],
                      int *pass, char *label, size_t label_len, char *note, size_t note_len) {
  static const mc_case prod[3] = {
      {"DSv4-Flash", 1, 4096, 2048, 2048, 256, 16, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"GLM-5.1", 0, 6144, 2048, 2048, 256, 16, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
      {"DSv4-Pro", 1, 7168, 3072, 3072, 384, 16, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
  };
  static const mc_case small[3] = {
      {"DSv4-Flash", 1, 256, 256, 256, 32, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"GLM-5.1", 0, 384, 256, 256, 32, 8, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
      {"DSv4-Pro", 1, 384, 384, 384, 48, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
  };
  for (int i = 0; i < 5; i++) res[i] = 0;
  *pass = 0;
  if (which < 0 || which > 2) return 1;
  const int full = mc_ctx_is_cuda(ctx) && !quick;
  const mc_case *cs = full ? &prod[which] : &small[which];
  const int64_t T = 16, H = cs->H, E = cs->E, K = cs->topk, EL = cs->EL, off = E - EL;
  dsk_ctx_info ci;
  memset(&ci, 0, sizeof ci);
  ci.struct_size = sizeof ci;
  dsk_ctx_get_info(ctx, &ci);
  const int same = ref == NULL || (!ci.is_cuda && strcmp(ci.backend, "cpu-ref") == 0);
  snprintf(label, label_len, "E%lld/%lld%s", (long long)EL, (long long)E, full ? "" : " rd");
  mc_ckpt ck;
  ck_make(&ck, cs, seed ^ 0xDE30u ^ (uint64_t)which);
  void *hp[8];
  int64_t pb[8];
  dsk_ctx *hctx = ref;
  dsk_ctx *own = NULL;
  if (!hctx) {
    dsk_ctx_opts ro;
    dsk_ctx_opts_init(&ro);
    ro.device = "cpu";
    ro.backend = "cpu-ref";
    if (dsk_ctx_create(&own, &ro) != DSK_STATUS_OK) {
      ck_free(&ck);
      return 1;
    }
    hctx = own;
  }
  dsk_status st = prepare_host(hctx, cs, &ck, off, hp, pb);
  tu_rng r = tu_rng_make(seed ^ 0xD3E0u ^ (uint64_t)which);
  dsk_bf16 *gw = mc_host(sizeof(dsk_bf16) * (size_t)(E * H)), *x = mc_host(sizeof(dsk_bf16) * (size_t)(T * H));
  dsk_bf16 *y = mc_host(sizeof(dsk_bf16) * (size_t)(T * H)), *yr = mc_host(sizeof(dsk_bf16) * (size_t)(T * H));
  float *bias = mc_host(sizeof(float) * (size_t)E), *w = mc_host(sizeof(float) * (size_t)(T * K)),
        *wr = mc_host(sizeof(float) * (size_t)(T * K));
  int32_t *ids = mc_host(sizeof(int32_t) * (size_t)(T * K)), *idr = mc_host(sizeof(int32_t) * (size_t)(T * K));
  double *a = mc_host(sizeof(double) * (size_t)(T * H)), *b = mc_host(sizeof(double) * (size_t)(T * H));
  tu_fill_bf16_normal(&r, gw, (size_t)(E * H), 1.0 / sqrt((double)H));
  tu_fill_bf16_normal(&r, x, (size_t)(T * H), 1.0);
  for (int64_t e = 0; e < E; e++) bias[e] = (float)(tu_uniform(&r) * 0.05) + (e >= off ? 10.0f : 0.0f);
  int64_t cnt[DSK_MOE_NUM_COUNTERS] = {0}, cntr[DSK_MOE_NUM_COUNTERS] = {0};
  mc_layer_in in = {T, off, x, gw, bias, NULL, NULL, (const void *const *)hp, pb, reps > 0 ? reps : 1};
  if (st == DSK_STATUS_OK) st = run_layer(ctx, cs, &in, y, ids, w, cnt, &res[0]);
  double d_ref = -1, d_fp64 = -1;
  int64_t ids_vs_ref = 0, cnt_sum = 0, local = 0;
  for (int i = 0; i < DSK_MOE_NUM_COUNTERS; i++) cnt_sum += cnt[i];
  for (int64_t i = 0; i < T * H; i++) a[i] = mc_bf(y[i]);
  if (st == DSK_STATUS_OK && !same) {
    mc_layer_in ir = in;
    ir.reps = 0;
    st = run_layer(ref, cs, &ir, yr, idr, wr, cntr, NULL);
    for (int64_t i = 0; i < T * H; i++) b[i] = mc_bf(yr[i]);
    d_ref = mc_diff(b, a, T * H);
    for (int64_t i = 0; i < T * K; i++) ids_vs_ref += ids[i] != idr[i];
  }
  /* fp64 forward on the first To tokens (with the device's ids) */
  const int64_t To = full ? 4 : T;
  if (st == DSK_STATUS_OK) {
    mc_lut lut;
    lut_init(&lut);
    double *o = mc_host(sizeof(double) * (size_t)(To * H));
    for (int64_t t = 0; t < To; t++) {
      double *sc = mc_host(sizeof(double) * (size_t)E), sum = 0;
      for (int64_t e = 0; e < E; e++) {
        double acc = 0;
        for (int64_t h = 0; h < H; h++) acc += mc_bf(x[t * H + h]) * mc_bf(gw[e * H + h]);
        sc[e] = score_of(cs->score, acc);
      }
      for (int64_t k = 0; k < K; k++)
        if (ids[t * K + k] >= 0 && ids[t * K + k] < E) sum += sc[ids[t * K + k]];
      float xf[16384];
      double *xd = mc_host(sizeof(double) * (size_t)H);
      for (int64_t h = 0; h < H; h++) xf[h] = dsk_bf16_to_f32(x[t * H + h]);
      mc_qdq(xf, H, xd);
      for (int64_t k = 0; k < K; k++) {
        const int32_t id = ids[t * K + k];
        if (id < off || id >= off + EL) continue;
        const uint8_t *wv[3] = {ck.w[0][id - off], ck.w[1][id - off], ck.w[2][id - off]};
        const uint8_t *sv[3] = {ck.s[0][id - off], ck.s[1][id - off], ck.s[2][id - off]};
        oracle_expert(&lut, cs->mx, wv, sv, H, cs->I, cs->limit, xd, sc[id] / sum * cs->scale, o + t * H);
      }
      const uint8_t *wv[3] = {ck.sw[0], ck.sw[1], ck.sw[2]}, *sv[3] = {ck.ss[0], ck.ss[1], ck.ss[2]};
      oracle_expert(&lut, 0, wv, sv, H, cs->Is, cs->limit, xd, 1.0, o + t * H);
      free(sc);
      free(xd);
    }
    d_fp64 = mc_diff(o, a, To * H);
    if (d_ref < 0) memcpy(b, o, sizeof(double) * (size_t)(To * H)); /* rel_l2 / max_abs against fp64 then */
    free(o);
  }
  int rc = st != DSK_STATUS_OK;
  if (!rc) {
    const int64_t n = (d_ref >= 0 ? T : To) * H;
    double num = 0, den = 0, mabs = 0;
    for (int64_t i = 0; i < n; i++) {
      const double d = fabs(a[i] - b[i]);
      mabs = d != d ? INFINITY : fmax(mabs, d);
      num += d * d;
      den += b[i] * b[i];
    }
    res[3] = den > 0 ? sqrt(num / den) : sqrt(num);
    res[4] = mabs;
    /* distinct local experts routed to; FLOP over the real (local) rows */
    unsigned char seen[1024] = {0};
    int64_t active = 0;
    for (int64_t i = 0; i < T * K; i++)
      if (ids[i] >= off && ids[i] < off + EL) {
        local++;
        if (!seen[ids[i] - off]) {
          seen[ids[i] - off] = 1;
          active++;
        }
      }
    int64_t per[4], sh[4];
    dsk_moe_weights_bytes(cs->mx ? DSK_MOE_W_MXFP4 : DSK_MOE_W_FP8, 1, H, cs->I, per);
    dsk_moe_weights_bytes(DSK_MOE_W_FP8, 1, H, cs->Is, sh);
    const double bytes = (double)active * (double)(per[0] + per[1] + per[2] + per[3]) +
                         (double)(sh[0] + sh[1] + sh[2] + sh[3]) + 2.0 * (double)(E * H);
    const double flop = 6.0 * (double)local * (double)cs->I * (double)H + 6.0 * (double)T * (double)cs->Is * (double)H +
                        2.0 * (double)T * (double)E * (double)H;
    const double sec = res[0] * 1e-6;
    res[1] = sec > 0 ? bytes / sec * 1e-9 : 0;
    res[2] = sec > 0 ? flop / sec * 1e-12 : 0;
    *pass = cnt_sum == 0 && ids_vs_ref == 0 && (d_ref < 0 || d_ref <= 0.01) && d_fp64 >= 0 && d_fp64 <= 0.01;
    char sr[40];
    if (d_ref < 0) snprintf(sr, sizeof sr, "- (same backend)");
    else snprintf(sr, sizeof sr, "%.1e", d_ref);
    snprintf(note, note_len, "diff vs cpu-ref %s, vs fp64 %.1e (%lld tok) (<= 0.01); H %lld I %lld top-%lld, %lld experts hit; %s",
             sr, d_fp64, (long long)To, (long long)H, (long long)cs->I, (long long)K, (long long)active,
             full ? "production shapes, EP16 rank" : "REDUCED shapes");
    if (ids_vs_ref) snprintf(note + strlen(note), note_len - strlen(note), "; %lld ids differ from the cpu-ref", (long long)ids_vs_ref);
    if (cnt_sum) snprintf(note + strlen(note), note_len - strlen(note), "; %lld bad-data events", (long long)cnt_sum);
  }
  for (int i = 0; i < 8; i++) free(hp[i]);
  free(gw); free(x); free(y); free(yr); free(bias); free(w); free(wr); free(ids); free(idr); free(a); free(b);
  ck_free(&ck);
  if (own) dsk_ctx_destroy(own);
  return rc;
}

/* --------------------------------------------------------------- main */
int dsk_check_moe(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c) {
  FILE *log = o->log ? o->log : stdout;
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (dsk_ctx_get_info(ctx, &info) != DSK_STATUS_OK) return 1;
  const int same = !info.is_cuda && strcmp(info.backend, "cpu-ref") == 0;
  dsk_ctx *ref = NULL;
  dsk_ctx_opts ro;
  dsk_ctx_opts_init(&ro);
  ro.device = "cpu";
  ro.backend = "cpu-ref";
  dsk_status st = dsk_ctx_create(&ref, &ro);
  TU_CHECK(c, st == DSK_STATUS_OK, "moe: cpu-ref context: %s", dsk_last_error());
  if (st != DSK_STATUS_OK) return 1;
  /* op by op (on a cpu-ref context both sides are the reference: the
   * comparisons then check the harness and the determinism) */
  int rc = check_quantizers(ctx, ref, o, c, log);
  rc |= check_packing(ctx, ref, o, c, log);
  rc |= check_route(ctx, ref, o, c, log);
  rc |= check_permute(ctx, ref, o, c, log);
  rc |= check_swiglu(ctx, ref, o, c, log);
  rc |= check_gather(ctx, ref, o, c, log);
  rc |= check_gemms(ctx, ref, o, c, log);
  rc |= check_gemm_tactics(ctx, ref, same, o, c, log);
  rc |= check_bad_inputs(ctx, c, log);
  /* the layer */
  static const mc_case quick[] = {
      {"DSv4-Flash (reduced)", 1, 256, 256, 256, 8, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"DSv4-Pro (reduced)", 1, 384, 384, 384, 12, 12, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
      {"GLM-5.1 (reduced)", 0, 384, 128, 128, 16, 16, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
      {"DSv4 EP 4 of 16", 1, 256, 128, 128, 16, 4, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
  };
  static const mc_case full[] = {
      {"DSv4-Flash EP 8/256", 1, 4096, 2048, 2048, 256, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"DSv4-Pro EP 8/384", 1, 7168, 3072, 3072, 384, 8, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
      {"GLM-5.1 EP 8/256", 0, 6144, 2048, 2048, 256, 8, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
  };
  /* GPU suite (issue 5 item 6): T 1000 and 4096 at production shapes, EP8
   * ranks (E/8 local experts, every token steered to them) */
  static const mc_case gpu[] = {
      {"DSv4-Flash EP8 32/256", 1, 4096, 2048, 2048, 256, 32, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 1.5f, 10.0f},
      {"DSv4-Pro EP8 48/384", 1, 7168, 3072, 3072, 384, 48, 6, DSK_MOE_SCORE_SQRT_SOFTPLUS, 2.5f, 10.0f},
      {"GLM-5.1 EP8 32/256", 0, 6144, 2048, 2048, 256, 32, 8, DSK_MOE_SCORE_SIGMOID, 2.5f, 0.0f},
  };
  static const int64_t Tq[] = {1, 3, 7, 64}, Tf[] = {1, 8, 64}, Tg[] = {1000, 4096}, Tm[] = {7, 64}, T7[] = {7};
  if (o->quick) {
    for (size_t i = 0; i < sizeof quick / sizeof quick[0]; i++)
      rc |= check_case(ctx, ref, same, &quick[i], Tq, 4, MC_ROUTER, 64, 64, o, c, log);
    rc |= check_case(ctx, ref, same, &quick[0], Tm, 2, MC_ONE_EXPERT, 64, 64, o, c, log);
    rc |= check_case(ctx, ref, same, &quick[0], Tm + 1, 1, MC_TWO_EXPERTS, 64, 64, o, c, log);
    rc |= check_case(ctx, ref, same, &quick[2], T7, 1, MC_ONE_EXPERT, 64, 64, o, c, log);
    rc |= check_case(ctx, ref, same, &quick[3], T7, 1, MC_BAD_IDS, 64, 64, o, c, log);
  } else {
    for (size_t i = 0; i < sizeof full / sizeof full[0]; i++)
      rc |= check_case(ctx, ref, same, &full[i], Tf, 3, MC_ROUTER, 8, 64, o, c, log);
    rc |= check_case(ctx, ref, same, &full[0], Tf + 1, 2, MC_ONE_EXPERT, 8, 64, o, c, log);
    rc |= check_case(ctx, ref, same, &full[2], Tf + 2, 1, MC_TWO_EXPERTS, 8, 64, o, c, log);
    rc |= check_case(ctx, ref, same, &full[1], Tf + 1, 1, MC_BAD_IDS, 8, 64, o, c, log);
    if (info.is_cuda) {
      for (size_t i = 0; i < sizeof gpu / sizeof gpu[0]; i++)
        rc |= check_case(ctx, ref, same, &gpu[i], Tg, 2, MC_ROUTER, 4, 16, o, c, log);
      rc |= check_case(ctx, ref, same, &gpu[0], Tg + 1, 1, MC_ONE_EXPERT, 4, 16, o, c, log);
    } else {
      fprintf(log, "moe: GPU-suite cases (T 1000, 4096 at production shapes) run on CUDA contexts only\n");
    }
  }
  dsk_ctx_destroy(ref);
  return rc;
}
