/* test_extents_mhc.c - the extents test (test_extents.c; docs/design.md)
 * for the mHC ops with row-strided buffers: dsk_mhc_prenorm, dsk_mhc_post
 * and the fused dsk_mhc_post_prenorm. Random descriptors (D 8..256, T
 * 0..5, S 0..S_max), a third with one or two edge or wild fields, every
 * buffer at exactly the extent the descriptor implies (the partials at the
 * plan's size, sometimes 4 bytes short). An accepted call must have valid
 * extents (under AddressSanitizer: and stay inside them), a rejected one a
 * message and untouched outputs. Runs on DSK_TEST_DEVICE (default cpu). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extents.h"
#include "harness.h"

static tu_counts counts;

static void put_bf16(buf *b, tu_rng *rng) {
  uint16_t *h = (uint16_t *)malloc(b->bytes);
  for (size_t i = 0; i < b->bytes / 2; i++) h[i] = dsk_bf16_from_f32((float)tu_normal(rng));
  dev_put(b, h);
  free(h);
}
static void put_f32(buf *b, tu_rng *rng, double scale, double offset) {
  float *h = (float *)malloc(b->bytes);
  for (size_t i = 0; i < b->bytes / 4; i++) h[i] = (float)(offset + scale * tu_uniform(rng));
  dev_put(b, h);
  free(h);
}

/* op 0 prenorm, 1 post, 2 post_prenorm */
static void mhc_case(tu_rng *rng, int iter, int op, int *ok_calls, int *err_calls, int *skipped) {
  int64_t T = tu_int(rng, 0, 5), D = 8 * tu_int(rng, 1, 32), nD = 4 * D;
  int64_t R_stride = nD + 8 * tu_int(rng, 0, 1), out_stride = D + 8 * tu_int(rng, 0, 1);
  int64_t R_out_stride = nD + 8 * tu_int(rng, 0, 1);
  int32_t S = (int32_t)tu_int(rng, 0, (int)dsk_mhc_max_splits(nD));
  int prec = (int)tu_int(rng, 0, 1);
  const int n_mut = mutation_count(rng, iter), mutated = n_mut > 0;
  for (int m = 0; m < n_mut; m++) {
    switch (tu_int(rng, 0, 7)) {
      case 0: T = wild(rng, T); break;
      case 1: D = wild(rng, D); break;
      case 2: nD = wild(rng, nD); break;
      case 3: R_stride = wild(rng, R_stride); break;
      case 4: out_stride = wild(rng, out_stride); break;
      case 5: R_out_stride = wild(rng, R_out_stride); break;
      case 6: S = (int32_t)wild(rng, S); break;
      default: prec = (int)tu_int(rng, -1, 3); break;
    }
  }
  const int d_ok = D >= 8 && D <= DSK_MHC_MAX_D && D % 8 == 0;
  const int with_proj = op != 1, with_post = op != 0;
  const int64_t n_T = T < 0 ? SPAN_BAD : T > BIG_ITEMS ? SPAN_BIG : T;
  const int64_t wD = d_ok ? D : 8, wnD = 4 * wD;
  const int64_t n_R = span(T, R_stride, wnD);
  const int64_t n_out = with_post ? span(T, out_stride, wD) : 0;
  const int64_t n_Ro = with_post ? span(T, R_out_stride, wnD) : 0;
  const int64_t smax = d_ok ? dsk_mhc_max_splits(4 * D) : 0;
  int invalid = !d_ok || bad_span(n_T) || bad_span(n_R) || bad_span(n_out) || bad_span(n_Ro);
  if (with_proj) invalid |= (d_ok && nD != 4 * D) || S < 0 || S > smax || (prec != 0 && prec != 1);
  if (!invalid && (n_T == SPAN_BIG || n_R == SPAN_BIG || n_out == SPAN_BIG || n_Ro == SPAN_BIG)) {
    (*skipped)++;
    return;
  }
  const int64_t T1 = n_T > 0 ? n_T : 1;
  buf bR, bfn, bout, bpost, bC, bRo, bpart;
  dev_alloc(&bR, n_R, 2);
  dev_alloc(&bfn, with_proj ? 24 * wnD : 0, 4);
  dev_alloc(&bout, n_out, 2);
  dev_alloc(&bpost, with_post ? 4 * T1 : 0, 4);
  dev_alloc(&bC, with_post ? 16 * T1 : 0, 4);
  dev_alloc(&bRo, n_Ro, 2);
  put_bf16(&bR, rng);
  put_f32(&bfn, rng, 0.02, -0.01);
  put_bf16(&bout, rng);
  put_f32(&bpost, rng, 2.0, 0.0);
  put_f32(&bC, rng, 0.5, 0.0);
  dev_poison(&bRo, rng);
  memset(&bpart, 0, sizeof bpart);

  dsk_plan_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  dsk_status st;
  int short_part = 0;
  dsk_clear_error();
  if (op == 0) {
    dsk_mhc_prenorm_desc d;
    dsk_mhc_prenorm_desc_init(&d);
    d.T = T;
    d.D = D;
    d.nD = nD;
    d.R = (const dsk_bf16 *)bR.d;
    d.R_stride = R_stride;
    d.fn = (const float *)bfn.d;
    d.fixed_splits = S;
    d.precision = (dsk_mhc_precision)prec;
    if (dsk_mhc_prenorm_plan(ctx, &d, &pi) == DSK_STATUS_OK && pi.workspace_bytes > 0 &&
        pi.workspace_bytes < ((int64_t)64 << 20)) {
      short_part = tu_int(rng, 0, 9) == 0;
      dev_alloc(&bpart, pi.workspace_bytes - (short_part ? 4 : 0), 1);
      dev_poison(&bpart, rng);
      d.partials = (float *)bpart.d;
      d.partials_bytes = (int64_t)bpart.bytes;
    }
    dsk_clear_error();
    st = dsk_mhc_prenorm(ctx, &d);
  } else if (op == 1) {
    dsk_mhc_post_desc d;
    dsk_mhc_post_desc_init(&d);
    d.T = T;
    d.D = D;
    d.out = (const dsk_bf16 *)bout.d;
    d.out_stride = out_stride;
    d.R = (const dsk_bf16 *)bR.d;
    d.R_stride = R_stride;
    d.post = (const float *)bpost.d;
    d.C = (const float *)bC.d;
    d.R_out = (dsk_bf16 *)bRo.d;
    d.R_out_stride = R_out_stride;
    st = dsk_mhc_post(ctx, &d);
  } else {
    dsk_mhc_post_prenorm_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.T = T;
    d.D = D;
    d.nD = nD;
    d.out = (const dsk_bf16 *)bout.d;
    d.out_stride = out_stride;
    d.R = (const dsk_bf16 *)bR.d;
    d.R_stride = R_stride;
    d.post = (const float *)bpost.d;
    d.C = (const float *)bC.d;
    d.R_out = (dsk_bf16 *)bRo.d;
    d.R_out_stride = R_out_stride;
    d.fn = (const float *)bfn.d;
    d.fixed_splits = S;
    d.precision = (dsk_mhc_precision)prec;
    if (dsk_mhc_post_prenorm_plan(ctx, &d, &pi) == DSK_STATUS_OK && pi.workspace_bytes > 0 &&
        pi.workspace_bytes < ((int64_t)64 << 20)) {
      short_part = tu_int(rng, 0, 9) == 0;
      dev_alloc(&bpart, pi.workspace_bytes - (short_part ? 4 : 0), 1);
      dev_poison(&bpart, rng);
      d.partials = (float *)bpart.d;
      d.partials_bytes = (int64_t)bpart.bytes;
    }
    dsk_clear_error();
    st = dsk_mhc_post_prenorm(ctx, &d);
  }
  dsk_ctx_synchronize(ctx, NULL);
  static const char *const names[3] = {"prenorm", "post", "post_prenorm"};
  if (st == DSK_STATUS_OK) {
    (*ok_calls)++;
    TU_CHECK(&counts, (!invalid && !short_part) || T == 0,
             "mhc_%s #%d (T %lld, D %lld, nD %lld, strides R %lld out %lld R_out %lld, S %d, precision %d%s%s): "
             "accepted, but its extents are invalid",
             names[op], iter, (long long)T, (long long)D, (long long)nD, (long long)R_stride, (long long)out_stride,
             (long long)R_out_stride, (int)S, prec, mutated ? ", mutated" : "", short_part ? ", partials short" : "");
  } else {
    (*err_calls)++;
    TU_CHECK(&counts, dsk_last_error()[0] != 0, "mhc_%s #%d: %s without a message", names[op], iter,
             dsk_status_name(st));
    TU_CHECK(&counts, dev_unchanged(&bRo) && (!bpart.shadow || dev_unchanged(&bpart)),
             "mhc_%s #%d: %s (%s) but an output was written", names[op], iter, dsk_status_name(st), dsk_last_error());
  }
  dev_release(&bR);
  dev_release(&bfn);
  dev_release(&bout);
  dev_release(&bpost);
  dev_release(&bC);
  dev_release(&bRo);
  dev_release(&bpart);
}

int main(void) {
  ctx = tu_ctx(NULL);
  if (!ctx) return 1;
  tu_rng rng = tu_rng_make(0x6d6863657874ull);
  const int n = 1500;
  int ok[3] = {0, 0, 0}, err[3] = {0, 0, 0}, skip[3] = {0, 0, 0};
  for (int op = 0; op < 3; op++)
    for (int i = 0; i < n; i++) mhc_case(&rng, i, op, &ok[op], &err[op], &skip[op]);
  printf("mhc prenorm / post / post_prenorm: accepted %d / %d / %d, rejected %d / %d / %d, valid but too large to "
         "allocate %d / %d / %d\n",
         ok[0], ok[1], ok[2], err[0], err[1], err[2], skip[0], skip[1], skip[2]);
  for (int op = 0; op < 3; op++)
    TU_CHECK(&counts, ok[op] > n / 4 && err[op] > n / 10, "op %d: %d accepted, %d rejected", op, ok[op], err[op]);
  dsk_ctx_destroy(ctx);
  return tu_finish("test_extents_mhc", &counts);
}
