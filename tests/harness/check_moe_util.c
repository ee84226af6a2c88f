/* check_moe_util.c - helpers of the MoE check (check_moe.h): device
 * buffers of one context, host-side decoding and quantization used by the
 * comparisons, random codes, and the machinery that runs one op on ctx and
 * on the cpu-ref with the same inputs and poisoned outputs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"

void *mc_alloc(mc_bufs *b, size_t bytes, dsk_status *st) {
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
void *mc_up(mc_bufs *b, const void *h, size_t bytes, dsk_status *st) {
  void *p = mc_alloc(b, bytes, st);
  if (*st == DSK_STATUS_OK) *st = dsk_mem_upload(b->ctx, p, h, bytes);
  return p;
}
void mc_free(mc_bufs *b) {
  for (int i = 0; i < b->n; i++) dsk_mem_free(b->ctx, b->p[i]);
  b->n = 0;
}
dsk_status mc_down(dsk_ctx *ctx, void *h, const void *d, size_t bytes) {
  dsk_status st = dsk_ctx_synchronize(ctx, NULL);
  return st == DSK_STATUS_OK ? dsk_mem_download(ctx, h, d, bytes) : st;
}

double mc_diff(const double *x, const double *y, int64_t n) {
  double sxy = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) {
    sxy += x[i] * y[i];
    s2 += x[i] * x[i] + y[i] * y[i];
  }
  return s2 == 0 ? 0.0 : 1.0 - 2.0 * sxy / s2;
}
int mc_ceil_log2f(float f) {
  int ex;
  float m = frexpf(f, &ex);
  return m == 0.5f ? ex - 1 : ex;
}
/* §2.2: dequantized 1x128 quantization of n floats */
void mc_qdq(const float *v, int64_t n, double *out) {
  for (int64_t g = 0; g < n / 128; g++) {
    float amax = 0;
    for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(v[g * 128 + i]));
    const int e = mc_ceil_log2f(fmaxf(amax, 1e-4f) / 448.0f) + 127;
    for (int i = 0; i < 128; i++)
      out[g * 128 + i] = (double)dsk_e4m3_to_f32(dsk_e4m3_from_f32(ldexpf(v[g * 128 + i], 127 - e))) * mc_ue((uint8_t)e);
  }
}
void mc_fill_bytes(tu_rng *r, uint8_t *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = tu_next(r);
    memcpy(p + i, &v, 8);
  }
  for (; i < n; i++) p[i] = (uint8_t)tu_next(r);
}
/* A random finite e4m3 code (no NaN codes 0x7F / 0xFF). */
uint8_t mc_e4(tu_rng *r) {
  uint8_t q = (uint8_t)tu_next(r);
  return (q & 0x7F) == 0x7F ? (uint8_t)(q ^ 0x40) : q;
}
int mc_ctx_is_cuda(dsk_ctx *ctx) {
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  return dsk_ctx_get_info(ctx, &info) == DSK_STATUS_OK && info.is_cuda;
}

/* ------------------------------------------------- one op on both contexts */
int pair_add(mc_pair *p, const void *in, size_t bytes, int poison) {
  const int j = p->n++;
  p->in[j] = in;
  p->bytes[j] = bytes ? bytes : 16;
  p->poison[j] = poison;
  return j;
}
void pair_free(mc_pair *p) {
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < p->n; j++) {
      free(p->got[i][j]);
      p->got[i][j] = NULL;
    }
  p->n = 0;
}
/* The op on one context, every buffer downloaded into got[0..n). */
dsk_status side_run(dsk_ctx *cx, mc_pair *p, mc_op_fn fn, const void *user, void **got) {
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
dsk_status pair_run(dsk_ctx *ctx, dsk_ctx *ref, mc_pair *p, mc_op_fn fn, const void *user) {
  dsk_ctx *cs[2] = {ctx, ref};
  dsk_status st = DSK_STATUS_OK;
  for (int i = 0; i < 2 && st == DSK_STATUS_OK; i++) st = side_run(cs[i], p, fn, user, p->got[i]);
  return st;
}
/* Index of the first differing byte of buffer j, or -1. */
int64_t pair_cmp(const mc_pair *p, int j) {
  const uint8_t *a = (const uint8_t *)p->got[0][j], *b = (const uint8_t *)p->got[1][j];
  if (!a || !b) return 0;
  for (size_t i = 0; i < p->bytes[j]; i++)
    if (a[i] != b[i]) return (int64_t)i;
  return -1;
}
/* The verdict of pair_run: 1 = compare, 0 = skipped (not served) or failed. */
int pair_ok(dsk_status st, const char *what, tu_counts *c, FILE *log) {
  if (st == DSK_STATUS_UNSUPPORTED) {
    fprintf(log, "moe %-14s skipped: %s\n", what, dsk_last_error());
    return 0;
  }
  TU_CHECK(c, st == DSK_STATUS_OK, "moe %s: %s: %s", what, dsk_status_name(st), dsk_last_error());
  return st == DSK_STATUS_OK;
}
