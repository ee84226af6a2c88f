/* check_moe_gemm.c - the GEMMs of the MoE check (check_moe.c says what runs):
 * dsk_moe_gemm (FP8 x MXFP4, FP8 x FP8) and dsk_dense_fp8_gemm on ctx
 * against the cpu-ref on the same bytes, with the heuristic and forced
 * BLOCK_M (check_gemms) and every tactic (check_gemm_tactics). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"

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
  int64_t hint;      /* max_expert_rows (0 = unknown); below a block's live rows it is still exact */
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
  d.max_expert_rows = k->hint;
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

int check_gemms(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  static const gm_case cs[] = {
      {"fp8xfp4 A64 BM64", 1, 256, 256, 4, 64, 64, {5, 0, 70, 1}, -1, 0},
      {"fp8xfp4 A64 BM64 hint 1 (several passes)", 1, 256, 256, 4, 64, 64, {5, 0, 70, 1}, -1, 1},
      {"fp8xfp4 A64 BM64 hint 2", 1, 256, 512, 4, 64, 64, {1, 2, 0, 2}, -1, 2},
      {"fp8xfp4 A128 BM64", 1, 256, 384, 4, 128, 64, {0, 130, 0, 64}, -1, 0},
      {"fp8xfp4 A128 BM128 one expert", 1, 512, 256, 3, 128, 128, {0, 0, 200}, -1, 0},
      {"fp8xfp4 A128 heuristic", 1, 384, 512, 8, 128, 0, {1, 2, 3, 0, 129, 6, 0, 64}, -1, 0},
      {"fp8xfp4 bad block", 1, 256, 256, 4, 64, 64, {10, 64, 3, 1}, 1, 0},
      {"fp8xfp8 A64 BM64", 0, 256, 384, 4, 64, 64, {3, 64, 0, 65}, -1, 0},
      {"fp8xfp8 A64 BM64 hint 4", 0, 256, 384, 4, 64, 64, {3, 4, 0, 9}, -1, 4},
      {"fp8xfp8 A128 BM128", 0, 128, 256, 2, 128, 128, {129, 7}, -1, 0},
      {"fp8xfp8 A64 heuristic", 0, 640, 256, 5, 64, 0, {0, 1, 300, 2, 0}, -1, 0},
  };
  static const gm_case full[] = {
      {"fp8xfp4 Flash FC1 8 experts", 1, 4096, 4096, 8, 128, 0, {70, 10, 0, 128, 129, 1, 64, 300}, -1, 0},
      {"fp8xfp4 Flash FC2 8 experts", 1, 4096, 2048, 8, 64, 0, {1, 1, 1, 1, 1, 1, 1, 1}, -1, 0},
      {"fp8xfp4 Flash FC1 T 1 (hint 1)", 1, 4096, 4096, 8, 64, 0, {1, 0, 1, 1, 0, 1, 1, 1}, -1, 1},
      {"fp8xfp4 Pro FC1 T 2 (hint 2)", 1, 6144, 7168, 4, 64, 0, {2, 1, 2, 0}, -1, 2},
      {"fp8xfp8 GLM FC1 8 experts", 0, 4096, 6144, 8, 128, 0, {30, 0, 20, 50, 1, 0, 128, 100}, -1, 0},
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

/* The plan's workspace (split-K partials), 0xFF-filled (NaN partials): a
 * partial the reduce reads without the GEMM having written it shows up as
 * a non-finite output. NULL when the plan needs none. */
static void *gx_ws(mc_bufs *b, const dsk_plan_info *pi, dsk_status *st) {
  if (pi->workspace_bytes <= 0) return NULL;
  void *w = mc_alloc(b, (size_t)pi->workspace_bytes, st);
  if (*st == DSK_STATUS_OK) *st = dsk_mem_set(b->ctx, w, 0xFF, (size_t)pi->workspace_bytes);
  return w;
}

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
          dsk_plan_info pi;
          memset(&pi, 0, sizeof pi);
          pi.struct_size = sizeof pi;
          st = dsk_moe_gemm_plan(cs[w], &d, &pi);
          if (st == DSK_STATUS_OK) d.workspace = gx_ws(&b, &pi, &st);
          d.workspace_bytes = pi.workspace_bytes;
          if (st == DSK_STATUS_OK) st = dsk_moe_gemm(cs[w], &d);
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
          dsk_plan_info pi;
          memset(&pi, 0, sizeof pi);
          pi.struct_size = sizeof pi;
          st = dsk_dense_fp8_gemm_plan(cs[w], &d, &pi);
          if (st == DSK_STATUS_OK) d.workspace = gx_ws(&b, &pi, &st);
          d.workspace_bytes = pi.workspace_bytes;
          if (st == DSK_STATUS_OK) st = dsk_dense_fp8_gemm(cs[w], &d);
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

int check_gemm_tactics(dsk_ctx *ctx, dsk_ctx *ref, int same, const dsk_check_opts *o, tu_counts *c, FILE *log) {
  if (same) return 0; /* the cpu-ref against itself */
  static const gx_case quick[] = {
      {"fp8xfp4 A64", 1, 0, 384, 384, 4, 64, {5, 0, 70, 1}, 0, 0},
      {"fp8xfp4 A128 one expert", 1, 0, 256, 512, 3, 128, {0, 0, 200}, 0, 1},
      {"fp8xfp4 A128 unaligned A", 1, 0, 128, 256, 2, 128, {17, 129}, 8, 0},
      /* K / 128 odd: split 1, so BLOCK_M 64 runs the skinny kernel, here with a
       * 3-deep (K 7296) and a 2-deep (K 8576) weight ring at BLOCK_N 128 */
      {"fp8xfp4 A64 K 7296", 1, 0, 256, 7296, 2, 64, {3, 9}, 0, 0},
      {"fp8xfp4 A64 K 8576", 1, 0, 128, 8576, 2, 64, {1, 70}, 0, 0},
      /* split 4 at BLOCK_M 64: the skinny kernel's K slices over warps (MXFP4, FP8) */
      {"fp8xfp4 A64 K 1024 split 4", 1, 0, 256, 1024, 3, 64, {1, 9, 64}, 0, 0},
      {"fp8xfp8 A64 K 512 split 4", 0, 0, 256, 512, 3, 64, {2, 0, 17}, 0, 1},
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
