/* ref_moe_gemm.c - cpu-ref of the grouped (m-grouped contiguous) and dense
 * block-scaled GEMMs (spec/mxfp4-moe.md §5.1, §7.1; docs/moe.md).
 *
 *   D[r, n] = sum_k A[r, k] B[e, n, k],  e = m_indices[(r / BLOCK_M) * BLOCK_M]
 *
 * on the dequantized values: A = e4m3 * 2^(sfa - 127) per (row, 128 columns),
 * B = e2m1 * 2^(sfb - 127) per (row, 32 columns) for MXFP4 or e4m3 *
 * 2^(sfb - 127) per (row, 128 columns) for FP8 (the 128x128 block scales
 * arrive broadcast to rows). Scales are read from the packed MN-major
 * tensors through the layout formula, so the reference also checks the
 * packing. UE8M0 decoding is the weight rule (0 -> 2^-127, 0xFF -> NaN).
 *
 * Accumulation: per scale block (32 columns for MXFP4, 128 for FP8) the sum
 * of the unscaled products is exact in fp64 (e4m3 x e2m1 products are
 * multiples of 2^-10 below 2^22 units, 32 of them stay below 2^27; e4m3 x
 * e4m3 products are multiples of 2^-18 below 2^36 units, 128 of them below
 * 2^43), then it is multiplied by the two power-of-two scales (exact) and
 * added to an fp64 accumulator. D is rounded once from fp64 to bf16.
 *
 * Rows: a block whose first m_indices entry is -1 is skipped; one whose
 * entry is < -1 or >= E_local is skipped and counted. Inside a live block,
 * rows whose own m_indices entry is negative (padding) are not computed and
 * not written (their D content is unspecified by the op; kernels may write
 * them). Every written element is computed by one thread, fixed order.
 */
#include <math.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ref_moe.h"
#include "format/mxfp4.h"

#define REF_GEMM_NC 64 /* columns per work item */

static int ref_threads(const dsk_ctx *ctx, int64_t items) {
  int nt = ctx->num_threads > 0 ? ctx->num_threads : 1;
  if (items < nt) nt = items < 1 ? 1 : (int)items;
  return nt;
}

/* fp64 -> bf16 with one rounding (RNE): round to fp32 with round-to-odd
 * (24 bits >= 16 + 2), then fp32 -> bf16 RNE. */
static uint16_t bf16_from_f64(double x) {
  float f = (float)x;
  if (!isfinite(f) || (double)f == x) return dsk_fmt_bf16_from_f32(f);
  if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f); /* truncate toward zero */
  f = dsk_fmt_f32_from_bits(dsk_fmt_f32_bits(f) | 1u);   /* sticky bit */
  return dsk_fmt_bf16_from_f32(f);
}

typedef struct gemm_job {
  int64_t N, K;
  const uint8_t *A;
  int64_t A_stride;
  const int32_t *sfa_words;
  int64_t sfa_mn;
  int mxfp4;
  const uint8_t *B; /* expert 0 */
  const int32_t *sfb_words;
  int64_t sfb_mn, sfb_k;
  uint16_t *D;
  int64_t D_stride;
  double lut8[256], lut4[16];
} gemm_job;

static void job_luts(gemm_job *j) {
  for (int c = 0; c < 256; c++) j->lut8[c] = (double)dsk_fmt_e4m3_to_f32((uint8_t)c);
  for (int c = 0; c < 16; c++) j->lut4[c] = (double)dsk_fmt_e2m1_to_f32((uint8_t)c);
}

/* D[r, n0:n1) with expert e. */
static void gemm_item(const gemm_job *j, int64_t r, int64_t e, int64_t n0, int64_t n1) {
  const int64_t K = j->K, ga = K / DSK_FMT_FP8_GROUP;
  double sa[DSK_MOE_MAX_K / DSK_FMT_FP8_GROUP];
  for (int64_t g = 0; g < ga; g++)
    sa[g] = (double)dsk_fmt_ue8m0_w_to_f32(dsk_fmt_sf_packed_byte(j->sfa_words, j->sfa_mn, ga, 0, r, g));
  const uint8_t *a = j->A + r * j->A_stride;
  for (int64_t n = n0; n < n1; n++) {
    double acc = 0.0;
    if (j->mxfp4) {
      const uint8_t *b = j->B + (e * j->N + n) * (K / 2);
      for (int64_t kb = 0; kb < K / DSK_FMT_MX_BLOCK; kb++) {
        double part = 0.0;
        for (int64_t k = kb * DSK_FMT_MX_BLOCK; k < (kb + 1) * DSK_FMT_MX_BLOCK; k++)
          part += j->lut8[a[k]] * j->lut4[dsk_fmt_mxfp4_code(b, k)];
        const double sb =
            (double)dsk_fmt_ue8m0_w_to_f32(dsk_fmt_sf_packed_byte(j->sfb_words, j->sfb_mn, j->sfb_k, e, n, kb));
        acc += part * (sa[kb / 4] * sb);
      }
    } else {
      const uint8_t *b = j->B + (e * j->N + n) * K;
      for (int64_t kg = 0; kg < ga; kg++) {
        double part = 0.0;
        for (int64_t k = kg * DSK_FMT_FP8_GROUP; k < (kg + 1) * DSK_FMT_FP8_GROUP; k++)
          part += j->lut8[a[k]] * j->lut8[b[k]];
        const double sb =
            (double)dsk_fmt_ue8m0_w_to_f32(dsk_fmt_sf_packed_byte(j->sfb_words, j->sfb_mn, j->sfb_k, e, n, kg));
        acc += part * (sa[kg] * sb);
      }
    }
    j->D[r * j->D_stride + n] = bf16_from_f64(acc);
  }
}

dsk_status dsk__ref_moe_gemm(dsk_ctx *ctx, const dsk_moe_gemm_desc *d, const dsk_tactic *t) {
  const int64_t BM = t->v[0], M = d->M_sum, EL = d->E_local;
  gemm_job j;
  j.N = d->N;
  j.K = d->K;
  j.A = d->A;
  j.A_stride = d->A_stride;
  j.sfa_words = d->sfa.words;
  j.sfa_mn = d->sfa.mn;
  j.mxfp4 = d->b_fmt == DSK_MOE_W_MXFP4;
  j.B = (const uint8_t *)d->B;
  j.sfb_words = d->sfb.words;
  j.sfb_mn = d->sfb.mn;
  j.sfb_k = d->sfb.sf_k;
  j.D = d->D;
  j.D_stride = d->D_stride;
  job_luts(&j);

  int64_t bad = 0;
  for (int64_t b = 0; b < M / BM; b++) {
    const int64_t e = d->m_indices[b * BM];
    bad += e < -1 || e >= EL;
  }
  const int64_t nchunk = (d->N + REF_GEMM_NC - 1) / REF_GEMM_NC, items = M * nchunk;
  const int nt = ref_threads(ctx, items);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4) if (nt > 1)
#endif
  for (int64_t it = 0; it < items; it++) {
    const int64_t r = it / nchunk, c = it % nchunk;
    const int64_t e = d->m_indices[(r / BM) * BM];
    if (e < 0 || e >= EL || d->m_indices[r] < 0) continue;
    const int64_t n0 = c * REF_GEMM_NC, n1 = n0 + REF_GEMM_NC < d->N ? n0 + REF_GEMM_NC : d->N;
    gemm_item(&j, r, e, n0, n1);
  }
  if (d->counters) d->counters[0] += bad;
  return DSK_STATUS_OK;
}

dsk_status dsk__ref_dense_gemm(dsk_ctx *ctx, const dsk_dense_gemm_desc *d, const dsk_tactic *t) {
  (void)t;
  gemm_job j;
  j.N = d->N;
  j.K = d->K;
  j.A = d->A;
  j.A_stride = d->A_stride;
  j.sfa_words = d->sfa.words;
  j.sfa_mn = d->sfa.mn;
  j.mxfp4 = 0;
  j.B = d->B;
  j.sfb_words = d->sfb.words;
  j.sfb_mn = d->sfb.mn;
  j.sfb_k = d->sfb.sf_k;
  j.D = d->D;
  j.D_stride = d->D_stride;
  job_luts(&j);
  const int64_t nchunk = (d->N + REF_GEMM_NC - 1) / REF_GEMM_NC, items = d->M * nchunk;
  const int nt = ref_threads(ctx, items);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4) if (nt > 1)
#endif
  for (int64_t it = 0; it < items; it++) {
    const int64_t r = it / nchunk, c = it % nchunk;
    const int64_t n0 = c * REF_GEMM_NC, n1 = n0 + REF_GEMM_NC < d->N ? n0 + REF_GEMM_NC : d->N;
    gemm_item(&j, r, 0, n0, n1);
  }
  return DSK_STATUS_OK;
}
