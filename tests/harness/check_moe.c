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
 *    NaN / inf / exact ties, an H that is not a multiple of 8: ids equal
 *    (where logits come from x: or, as spec §8 allows, two experts whose
 *    fp64 biased scores are within 1e-6 relative, as the CUDA MMA logits'
 *    ~48 bits may order them otherwise; logged as near ties), weights
 *    within 1e-6 relative (bit-exact expected but for an fp32 ulp:
 *    logits are summed in another fixed order, scores use the device libm),
 *    counters equal; each without and with the workspace of
 *    dsk_moe_route_plan (T 1, 2, 3, 5, 7, 9, 64, 128, 130, 200, 512, 530; H 1, 8, 200,
 *    1000 with an odd x stride, 2056, 4096, 7168; E 37 and 1024; poisoned with 0xFF; plan bytes
 *    checked on both contexts), a second run on ctx bit-identical (ids,
 *    weights and the workspace), and a caller built before the workspace
 *    fields (struct_size = offsetof(workspace), in a heap block of that
 *    size);
 *  - dsk_moe_permute: random, EP slices with -1 and out-of-range ids, all
 *    tokens on one expert, empty experts, duplicated ids, an M_sum too small
 *    (dropped rows), unaligned strides: A, scale bytes, m_indices, inv_perm
 *    and counters bit-exact;
 *  - dsk_swiglu_quant (clamp 10 / none, NaN, padding rows; q strides that
 *    take the CUDA fp32 forms and their fp64 fallback; 4,400 row words) and
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
 * fp64 forward (check_moe_forward.c; diff <= 0.01) that decodes the in-process
 * checkpoint tensors on the fly (no code shared with the library): x
 * quantized 1x128 (§2.2), gate/up in fp64, clamp, SwiGLU, h quantized 1x128
 * from fp64 h, down projection in fp64, routing weights from fp64 scores of
 * the experts the backend selected (its ids are checked against the fp64
 * top-k, near ties excepted, and against the cpu-ref's). Routing modes: the
 * router; given ids with every token on one expert (the others empty); given
 * ids on two experts.
 *
 * Files: this one (the op checks but the GEMMs, the bad inputs, the entry
 * point dsk_check_moe), check_moe_gemm.c (GEMMs and GEMM tactics),
 * check_moe_forward.c (the layer and the `dsk demo` row), check_moe_util.c
 * and check_moe.h (the shared helpers).
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"

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
      /* more than 4,096 (row, word) items: the vector form (bf16, 4-aligned
       * strides; a last word of 3 groups), and element loads for an odd stride */
      {1400, 1408, 1412, 0, 0, 1412, 11, 1, 1},
      {1400, 1536, 1537, 0, 0, 0, 0, 1, 1},
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

/* The reference's biased score of expert e for token t (fp64 logits from x
 * and the gate), for the spec's near-tie rule (§8: ids may differ where two
 * biased scores differ by < 1e-6 relative). */
static double rt_biased(const rt_case *k, const dsk_bf16 *x, const dsk_bf16 *g, const float *bias, int64_t t, int64_t e) {
  double z = 0;
  for (int64_t h = 0; h < k->H; h++) z += mc_bf(x[t * k->xs + h]) * mc_bf(g[e * k->H + h]);
  return mc_score(k->score, z) + (double)bias[e];
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
      /* the MMA logits (CUDA, T >= 128): the 16 x 32 and the 64 x 64 tiles,
       * partial tiles, an x stride gap, production H */
      {"ws dsv4-pro T 128 (mma 16x32)", 128, 384, 6, 7168, 7168, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 2.5f, 1},
      {"ws dsv4 T 512 (mma 64x64)", 512, 256, 6, 4096, 4096, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      {"ws glm T 530 E 37 x stride 208", 530, 37, 5, 200, 208, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 1.0f, 1},
      {"ws T 130 E 40 H 1000 (mma 16x32 partial)", 130, 40, 5, 1000, 1000, DSK_MOE_SCORE_SQRT_SOFTPLUS, 0, 0, 1, 1.5f, 1},
      /* T >= 128 with an x stride that is not 16-byte friendly: the fp64 kernel */
      {"ws T 200 odd x stride (fp64 path)", 200, 64, 4, 1000, 1003, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 1.0f, 1},
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
      /* more than 65535 token tiles of 8: the fp64 logits kernel's grid-stride
       * loop (an odd x stride keeps it off the MMA path, whose 64-token tiles
       * reach the loop only past 4.2M tokens: emu_moe_route covers that loop) */
      {"ws T 524295 (tile loop)", 524295, 6, 2, 16, 17, DSK_MOE_SCORE_SIGMOID, 0, 0, 1, 1.0f, 1},
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
      int64_t id_bad = 0, w_bits = 0, gap_bad = 0, near_ties = 0;
      double wrel = 0;
      for (int64_t t = 0; t < T; t++) {
        for (int64_t kk = 0; kk < K; kk++) {
          const int32_t ia = i0[t * (K + 1) + kk], ib = i1[t * (K + 1) + kk];
          if (ia != ib) {
            /* scored logits computed from x (the CUDA MMA logits carry ~48
             * bits, not fp64's): tolerated where the two experts' fp64 biased
             * scores are within 1e-6 relative; their weights are then not
             * compared (each is its own expert's) */
            int tie = 0;
            if (!k->hash && !k->logits && ia >= 0 && ia < E && ib >= 0 && ib < E) {
              const double ba = rt_biased(k, x, g, bias, t, ia), bb = rt_biased(k, x, g, bias, t, ib);
              tie = fabs(ba - bb) <= 1e-6 * fmax(fabs(ba), fabs(bb));
            }
            if (tie) near_ties++;
            else id_bad++;
            continue;
          }
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
      char tie_note[48] = "";
      if (near_ties) snprintf(tie_note, sizeof tie_note, " (%lld at near ties)", (long long)near_ties);
      fprintf(log, "moe %-30s T %6lld E %4lld top-%-2lld H %4lld: ids %s%s, weights %s (max rel %.1e), counters %lld %lld%s %s\n",
              what, (long long)T, (long long)E, (long long)K, (long long)(k->logits ? 0 : H),
              id_bad ? "DIFFERENT" : "equal", tie_note, w_bits ? "within 1e-6" : "bit-exact", wrel, (long long)c0[0],
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
  uint32_t flags; /* DSK_MOE_PERMUTE_NO_PAD_FILL: padding keeps its 0xAB poison on both backends */
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
  d.flags = u->flags;
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
      /* rows of 288 16-byte pieces: a warp copies a row in two rounds (the CUDA live-row copy) */
      {"H 4608, bad ids", 40, 6, 16, 16, 0, 4608, 128, 3, 0, 0},
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
    for (int fl = 0; fl < 2; fl++) {
    pm_run u = {k, M, 2 * k->EL * 8, fl ? DSK_MOE_PERMUTE_NO_PAD_FILL : 0u};
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
    snprintf(what, sizeof what, "permute %s%s", k->name, fl ? " no-pad-fill" : "");
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
      if (fl) { /* padding rows untouched: their first A byte is still the poison */
        int64_t touched = 0, pads = 0;
        for (int64_t i = 0; i < M; i++)
          if (((const int32_t *)p.got[0][5])[i] < 0) {
            pads++;
            touched += ((const uint8_t *)p.got[0][3])[i * xs] != 0xAB || ((const uint8_t *)p.got[0][4])[i * sfk] != 0xAB;
          }
        TU_CHECK(c, touched == 0, "moe %s: %lld of %lld padding rows written", what, (long long)touched, (long long)pads);
        rc |= touched != 0;
      }
      rc |= !same;
    } else if (st != DSK_STATUS_UNSUPPORTED) {
      rc = 1;
    }
    pair_free(&p);
    }
    free(ids); free(xq); free(xsf);
  }
  return rc;
}

/* ------------------------------------------------------------- SwiGLU */
typedef struct sw_case {
  int64_t rows, I, ds;
  float limit, sigma;
  int mind, raw, packed;
  uint32_t flags; /* set per run: DSK_SWIGLU_SKIP_PADDING with m_indices */
  int64_t qpad;   /* q row stride I + qpad: 1 keeps the CUDA kernels on their fp64 element path */
} sw_case;
/* buffers: 0 D1, 1 m_indices, 2 q, 3 sf, 4 packed, 5 counters */
static dsk_status op_swiglu(dsk_ctx *cx, void *const *dev, const void *user) {
  const sw_case *k = (const sw_case *)user;
  dsk_swiglu_quant_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.rows = k->rows; d.I = k->I; d.D1 = dev[0]; d.D1_stride = k->ds; d.m_indices = k->mind ? dev[1] : NULL;
  d.limit = k->limit; d.q = dev[2]; d.q_stride = k->I + k->qpad;
  d.sf = k->raw ? dev[3] : NULL; d.sf_stride = k->I / 128;
  d.sf_packed = k->packed ? dev[4] : NULL; d.counters = dev[5];
  d.flags = k->flags;
  return dsk_swiglu_quant(cx, &d);
}

static int check_swiglu(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  /* q strides: I + 4 (the CUDA fp32 forms) and I + 1 (their fp64 fallback);
   * 1100 x 2048 has 4,400 (row, word) items: the many-items kernel */
  static const sw_case cs[] = {
      {200, 256, 512, 10.0f, 6.0f, 1, 1, 1, 0, 4},
      {200, 256, 512, 10.0f, 6.0f, 1, 1, 1, 0, 1},
      {37, 384, 800, 0.0f, 3.0f, 0, 1, 1, 0, 1},
      {64, 128, 256, 10.0f, 30.0f, 1, 0, 1, 0, 4},
      {1, 256, 512, 10.0f, 1.0f, 0, 1, 0, 0, 4},
      {1100, 2048, 4096, 10.0f, 4.0f, 1, 1, 1, 0, 4},
      {1100, 2048, 4100, 0.0f, 2.0f, 0, 0, 1, 0, 0},
  };
  static const sw_case full[] = {{16384, 2048, 4096, 10.0f, 4.0f, 1, 0, 1, 0, 0},
                                 {4096, 3072, 6144, 0.0f, 2.0f, 0, 1, 1, 0, 1}};
  tu_rng r = tu_rng_make(o->seed ^ 0x5161u);
  int rc = 0;
  const int nq = (int)(sizeof cs / sizeof cs[0]), nf = o->quick ? 0 : (int)(sizeof full / sizeof full[0]);
  for (int cf = 0; cf < 2 * (nq + nf); cf++) {
    const int ci = cf / 2, skip = cf & 1;
    sw_case kk = ci < nq ? cs[ci] : full[ci - nq];
    if (skip && !kk.mind) continue;
    kk.flags = skip ? DSK_SWIGLU_SKIP_PADDING : 0u;
    const sw_case *k = &kk;
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
    const int64_t qs = I + k->qpad;
    pair_add(&p, NULL, (size_t)(R * qs), 0xAB);
    pair_add(&p, NULL, (size_t)(R * ng), 0xAB);
    pair_add(&p, NULL, (size_t)dsk_sf_packed_words(1, R, ng) * 4, 0xAB);
    pair_add(&p, NULL, 16, 0);
    char what[64];
    snprintf(what, sizeof what, "swiglu_quant %lldx%lld q+%lld limit %g%s", (long long)R, (long long)I,
             (long long)k->qpad, (double)k->limit, skip ? " skip-pad" : "");
    dsk_status st = pair_run(ctx, ref, &p, op_swiglu, k);
    if (pair_ok(st, what, c, log)) {
      const uint8_t *q0 = p.got[0][2], *q1 = p.got[1][2];
      int64_t qd = 0, far = 0;
      for (int64_t i = 0; i < R * qs; i++)
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
      if (skip) { /* padding rows keep the poison (q and raw scales) */
        int64_t touched = 0;
        for (int64_t i = 0; i < R; i++)
          if (mind[i] < 0)
            touched += q0[i * qs] != 0xAB || (k->raw && ((const uint8_t *)p.got[0][3])[i * ng] != 0xAB);
        TU_CHECK(c, touched == 0, "moe %s: %lld padding rows written", what, (long long)touched);
        rc |= touched != 0;
      }
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
  /* topk 12 and 16 take the backend's general path (CUDA: topk > 8), T 70000
   * the CUDA launch's slices of 65535 tokens */
  static const ga_case cs[] = {{37, 6, 512, 300, 1, 0}, {37, 6, 512, 300, 0, 0}, {9, 8, 384, 100, 2, 0},
                               {5, 6, 300, 64, 1, 3},  {1, 6, 4096, 384, 1, 0},  {7, 12, 512, 300, 1, 0},
                               {5, 16, 300, 64, 2, 3}, {70000, 2, 8, 64, 1, 0}};
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
    snprintf(what, sizeof what, "gather T %lld K %lld N %lld shared %s", (long long)T, (long long)K, (long long)k->N,
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
