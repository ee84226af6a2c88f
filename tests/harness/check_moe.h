/* check_moe.h - the pieces of the MoE check (dsk_check_moe, declared in
 * harness.h) shared by its files: check_moe.c (formats, packing, routing,
 * permute, SwiGLU, gather, bad inputs and the entry point), check_moe_gemm.c
 * (grouped and dense GEMMs, GEMM tactics), check_moe_forward.c (the layer
 * against the cpu-ref and an fp64 forward; the `dsk demo` row) and
 * check_moe_util.c (the helpers below). Private to the harness. */
#ifndef DSK_CHECK_MOE_H
#define DSK_CHECK_MOE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

/* ------------------------------------------ helpers (check_moe_util.c) */
/* Device buffers of one context, freed together by mc_free. */
typedef struct mc_bufs {
  dsk_ctx *ctx;
  void *p[32];
  int n;
} mc_bufs;

/* Both do nothing and return NULL when *st is not OK on entry; a failure
 * sets *st. */
void *mc_alloc(mc_bufs *b, size_t bytes, dsk_status *st);
void *mc_up(mc_bufs *b, const void *h, size_t bytes, dsk_status *st);
void mc_free(mc_bufs *b);
/* Synchronizes ctx, then downloads. */
dsk_status mc_down(dsk_ctx *ctx, void *h, const void *d, size_t bytes);
/* Zeroed host memory (at least 1 byte). */
static inline void *mc_host(size_t n) { return calloc(1, n ? n : 1); }

/* 1 - 2 x.y / (|x|^2 + |y|^2) (0 for two zero vectors). */
double mc_diff(const double *x, const double *y, int64_t n);
static inline double mc_bf(dsk_bf16 b) { return (double)dsk_bf16_to_f32(b); }
static inline double mc_ue(uint8_t e) { return e == 0xFF ? NAN : ldexp(1.0, (int)e - 127); }
/* The router's score of a logit in fp64 (spec §6.1 / §6.3): sigmoid, or
 * sqrt(softplus) with softplus(z) = max(z, 0) + log1p(exp(-|z|)). */
static inline double mc_score(int score, double z) {
  if (score == DSK_MOE_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-z));
  return sqrt((z > 0 ? z : 0.0) + log1p(exp(-fabs(z))));
}
int mc_ceil_log2f(float f);
void mc_qdq(const float *v, int64_t n, double *out);
void mc_fill_bytes(tu_rng *r, uint8_t *p, size_t n);
uint8_t mc_e4(tu_rng *r);
int mc_ctx_is_cuda(dsk_ctx *ctx);

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

int pair_add(mc_pair *p, const void *in, size_t bytes, int poison);
void pair_free(mc_pair *p);
dsk_status side_run(dsk_ctx *cx, mc_pair *p, mc_op_fn fn, const void *user, void **got);
dsk_status pair_run(dsk_ctx *ctx, dsk_ctx *ref, mc_pair *p, mc_op_fn fn, const void *user);
int64_t pair_cmp(const mc_pair *p, int j);
int pair_ok(dsk_status st, const char *what, tu_counts *c, FILE *log);

/* ---------------------------------------------- GEMMs (check_moe_gemm.c) */
int check_gemms(dsk_ctx *ctx, dsk_ctx *ref, const dsk_check_opts *o, tu_counts *c, FILE *log);
/* same: ctx is the cpu-ref itself (nothing to compare; returns 0). */
int check_gemm_tactics(dsk_ctx *ctx, dsk_ctx *ref, int same, const dsk_check_opts *o, tu_counts *c, FILE *log);

/* ---------------------------------------- forward (check_moe_forward.c) */
typedef struct mc_case {
  const char *name;
  int mx;                        /* routed MXFP4 (DSv4) or FP8 (GLM-5.1) */
  int64_t H, I, Is, E, EL, topk;
  int score;
  float scale, limit;
} mc_case;

/* Routing modes of a forward case. */
enum { MC_ROUTER = 0, MC_ONE_EXPERT = 1, MC_TWO_EXPERTS = 2, MC_BAD_IDS = 3 };

/* The layer of case cs at the nT token counts Ts in routing mode `mode`:
 * against the cpu-ref on the first ref_tokens tokens (skipped when same)
 * and the fp64 forward on the first oracle_tokens. */
int check_case(dsk_ctx *ctx, dsk_ctx *ref, int same, const mc_case *cs, const int64_t *Ts, int nT, int mode,
               int64_t oracle_tokens, int64_t ref_tokens, const dsk_check_opts *o, tu_counts *c, FILE *log);

#endif
