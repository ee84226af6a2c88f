/* sparse_mla.c - dsk_sparse_mla_decode: descriptor validation, the tactic
 * set and heuristic (spec/sparse-decode.md §9, spec/autotune.md §1), the plan
 * call and dispatch to the context's backend. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "../tune/tuner.h"

#define OP "sparse_mla_decode"

/* Largest element stride / extent accepted: keeps every index product of the
 * kernels (t * stride_t + h * stride_h + d, times the element size) far from
 * int64 overflow. Real tensors are many orders of magnitude smaller. */
#define MLA_MAX_EXTENT ((int64_t)1 << 52)

static int64_t mla_dqk(dsk_kv_format f) { return f == DSK_KV_FORMAT_A656 ? 576 : 512; }

static int is_aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* A [T, H, row] tensor addressed as t*st + h*sh + i (i < row). Requires
 * sh >= row and st >= (H-1)*sh + row, so rows of different (t, h) never
 * overlap and the t-major order is kept (the layout the spec describes). */
static dsk_status check_rows(const char *name, int64_t T, int64_t H, int64_t row, int64_t st, int64_t sh) {
  if (sh < row)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": %s_stride_h %lld < %lld (rows would overlap)", name,
                     (long long)sh, (long long)row);
  if (sh > MLA_MAX_EXTENT)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": %s_stride_h %lld is too large", name, (long long)sh);
  int64_t need = (H - 1) * sh + row;
  if (st < need)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": %s_stride_t %lld < (H-1)*%s_stride_h + %lld = %lld", name,
                     (long long)st, name, (long long)row, (long long)need);
  if (st > MLA_MAX_EXTENT || (T > 1 && (T - 1) > MLA_MAX_EXTENT / st))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": %s_stride_t %lld with T %lld is too large", name, (long long)st,
                     (long long)T);
  return DSK_STATUS_OK;
}

/* A [T, H] scalar tensor (lse): both strides >= 1 and the (t, h) -> offset map
 * one-to-one, in either order ([T, H] or [H, T] memory layouts). */
static dsk_status check_lse(const dsk_sparse_mla_desc *d) {
  int64_t st = d->lse_stride_t, sh = d->lse_stride_h;
  if (sh < 1) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": lse_stride_h %lld < 1", (long long)sh);
  if (st < 1) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": lse_stride_t %lld < 1", (long long)st);
  if (sh > MLA_MAX_EXTENT || st > MLA_MAX_EXTENT || (d->T > 1 && (d->T - 1) > MLA_MAX_EXTENT / st))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": lse strides (%lld, %lld) are too large", (long long)st,
                     (long long)sh);
  if (d->T > 1 && d->H > 1) {
    int ok = st >= (d->H - 1) * sh + 1 || sh >= (d->T - 1) * st + 1;
    if (!ok)
      return dsk__fail(DSK_STATUS_INVALID_ARG,
                       OP ": lse_stride_t %lld and lse_stride_h %lld make entries of different (t, h) overlap "
                          "(need lse_stride_t >= (H-1)*lse_stride_h + 1 or lse_stride_h >= (T-1)*lse_stride_t + 1)",
                       (long long)st, (long long)sh);
  }
  return DSK_STATUS_OK;
}

/* Byte ranges for the overlap check: [lo, hi). */
typedef struct mla_range {
  const char *name;
  uintptr_t lo, hi;
} mla_range;

static mla_range range_rows(const char *name, const void *p, size_t elem, int64_t T, int64_t H, int64_t row,
                            int64_t st, int64_t sh) {
  mla_range r = {name, 0, 0};
  if (!p || T <= 0) return r;
  r.lo = (uintptr_t)p;
  r.hi = r.lo + (uintptr_t)(((T - 1) * st + (H - 1) * sh + row) * (int64_t)elem);
  return r;
}

static int ranges_overlap(mla_range a, mla_range b) {
  if (a.lo == a.hi || b.lo == b.hi) return 0;
  return a.lo < b.hi && b.lo < a.hi;
}

dsk_status dsk__sparse_mla_validate(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": ctx is NULL");
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": desc is NULL");
  if (d->struct_size < sizeof *d)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": struct_size %zu < sizeof(dsk_sparse_mla_desc) %zu",
                     d->struct_size, sizeof *d);
  if (d->format != DSK_KV_FORMAT_A656 && d->format != DSK_KV_FORMAT_B584)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": format %d is not DSK_KV_FORMAT_A656 (1) or DSK_KV_FORMAT_B584 (2)",
                     (int)d->format);
  const int64_t dqk = mla_dqk(d->format);
  const int cuda = ctx->info.is_cuda;
  if (d->T < 0) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": T %lld < 0", (long long)d->T);
  if (d->T > INT32_MAX)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": T %lld > %d", (long long)d->T, (int)INT32_MAX);
  if (d->H < 1 || d->H > 128)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": H %lld is not in 1..128", (long long)d->H);

  /* q */
  if (!d->q) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": q is NULL");
  dsk_status st = check_rows("q", d->T, d->H, dqk, d->q_stride_t, d->q_stride_h);
  if (st != DSK_STATUS_OK) return st;
  if (!is_aligned(d->q, cuda ? 16 : 2))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": q %p is not %d-byte aligned", (const void *)d->q, cuda ? 16 : 2);
  if (cuda && (d->q_stride_t % 8 != 0 || d->q_stride_h % 8 != 0))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": q_stride_t %lld / q_stride_h %lld must be multiples of 8 on CUDA",
                     (long long)d->q_stride_t, (long long)d->q_stride_h);

  if (!(isfinite(d->sm_scale) && d->sm_scale > 0.0f))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": sm_scale %g must be finite and > 0", (double)d->sm_scale);

  if (d->nseg != 1 && d->nseg != 2)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": nseg %d is not 1 or 2", d->nseg);
  for (int i = 0; i < d->nseg; i++) {
    const dsk_sparse_mla_segment *s = &d->seg[i];
    char what[48];
    snprintf(what, sizeof what, OP ": segment %d", i);
    st = dsk__kv_cache_validate(ctx, what, d->format, &s->cache);
    if (st != DSK_STATUS_OK) return st;
    if (s->width < 1)
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": segment %d width %lld < 1", i, (long long)s->width);
    if (s->width > INT32_MAX)
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": segment %d width %lld > %d", i, (long long)s->width,
                       (int)INT32_MAX);
    if (!s->slots) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": segment %d slots is NULL", i);
    if (s->slots_stride_t < s->width)
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": segment %d slots_stride_t %lld < width %lld", i,
                       (long long)s->slots_stride_t, (long long)s->width);
    if (s->slots_stride_t > MLA_MAX_EXTENT || (d->T > 1 && (d->T - 1) > MLA_MAX_EXTENT / s->slots_stride_t))
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": segment %d slots_stride_t %lld is too large", i,
                       (long long)s->slots_stride_t);
    if (!is_aligned(s->slots, 4))
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": segment %d slots %p is not 4-byte aligned", i,
                       (const void *)s->slots);
    if (s->lens && !is_aligned(s->lens, 4))
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": segment %d lens %p is not 4-byte aligned", i,
                       (const void *)s->lens);
  }
  if (d->sink && !is_aligned(d->sink, 4))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": sink %p is not 4-byte aligned", (const void *)d->sink);

  /* out, lse */
  if (!d->out) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": out is NULL");
  st = check_rows("out", d->T, d->H, 512, d->out_stride_t, d->out_stride_h);
  if (st != DSK_STATUS_OK) return st;
  if (!is_aligned(d->out, cuda ? 16 : 2))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": out %p is not %d-byte aligned", (void *)d->out, cuda ? 16 : 2);
  if (cuda && (d->out_stride_t % 8 != 0 || d->out_stride_h % 8 != 0))
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     OP ": out_stride_t %lld / out_stride_h %lld must be multiples of 8 on CUDA",
                     (long long)d->out_stride_t, (long long)d->out_stride_h);
  if (d->lse) {
    st = check_lse(d);
    if (st != DSK_STATUS_OK) return st;
    if (!is_aligned(d->lse, 4))
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": lse %p is not 4-byte aligned", (void *)d->lse);
  }

  if (d->precision != DSK_PRECISION_ACCURATE && d->precision != DSK_PRECISION_FAST)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": precision %d is not ACCURATE (0) or FAST (1)", (int)d->precision);
  if (d->workspace_bytes < 0)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": workspace_bytes %lld < 0", (long long)d->workspace_bytes);
  if (d->counters && !is_aligned(d->counters, 8))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": counters %p is not 8-byte aligned", (void *)d->counters);

  /* Outputs must not overlap inputs or each other (sparse-decode.md §1). */
  if (d->T > 0) {
    mla_range outs[3] = {
        range_rows("out", d->out, 2, d->T, d->H, 512, d->out_stride_t, d->out_stride_h),
        {"lse", 0, 0},
        {"workspace", 0, 0},
    };
    if (d->lse) {
      mla_range r = {"lse", (uintptr_t)d->lse,
                     (uintptr_t)d->lse + (uintptr_t)(((d->T - 1) * d->lse_stride_t + (d->H - 1) * d->lse_stride_h + 1) * 4)};
      outs[1] = r;
    }
    if (d->workspace && d->workspace_bytes > 0) {
      mla_range r = {"workspace", (uintptr_t)d->workspace, (uintptr_t)d->workspace + (uintptr_t)d->workspace_bytes};
      outs[2] = r;
    }
    mla_range ins[8];
    int nin = 0;
    ins[nin++] = range_rows("q", d->q, 2, d->T, d->H, dqk, d->q_stride_t, d->q_stride_h);
    if (d->sink) {
      mla_range r = {"sink", (uintptr_t)d->sink, (uintptr_t)d->sink + (uintptr_t)(d->H * 4)};
      ins[nin++] = r;
    }
    static const char *const seg_names[2][3] = {{"segment 0 cache", "segment 0 slots", "segment 0 lens"},
                                                {"segment 1 cache", "segment 1 slots", "segment 1 lens"}};
    for (int i = 0; i < d->nseg; i++) {
      const dsk_sparse_mla_segment *s = &d->seg[i];
      uint64_t cache_bytes = (uint64_t)s->cache.num_pages * (uint64_t)s->cache.page_stride; /* validated > 0 */
      mla_range rc = {seg_names[i][0], (uintptr_t)s->cache.base, (uintptr_t)s->cache.base + (uintptr_t)cache_bytes};
      ins[nin++] = rc;
      mla_range rs = {seg_names[i][1], (uintptr_t)s->slots,
                      (uintptr_t)s->slots + (uintptr_t)(((d->T - 1) * s->slots_stride_t + s->width) * 4)};
      ins[nin++] = rs;
      if (s->lens) {
        mla_range rl = {seg_names[i][2], (uintptr_t)s->lens, (uintptr_t)s->lens + (uintptr_t)(d->T * 4)};
        ins[nin++] = rl;
      }
    }
    for (int a = 0; a < 3; a++) {
      for (int b = 0; b < nin; b++)
        if (ranges_overlap(outs[a], ins[b]))
          return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": %s overlaps %s", outs[a].name, ins[b].name);
      for (int b = a + 1; b < 3; b++)
        if (ranges_overlap(outs[a], outs[b]))
          return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": %s overlaps %s", outs[a].name, outs[b].name);
    }
  }
  return DSK_STATUS_OK;
}

/* ------------------------------------------------------------------ tactics */

static const int32_t k_cpb_set[10] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};

static int64_t mla_chunks(const dsk_sparse_mla_desc *d) {
  int64_t c = 0;
  for (int i = 0; i < d->nseg; i++) c += (d->seg[i].width + 63) / 64;
  return c;
}

/* The valid v[0] values for the shape, ascending, duplicates dropped. */
static int mla_cpb_values(const dsk_sparse_mla_desc *d, int32_t vals[10]) {
  int64_t chunks = mla_chunks(d);
  int n = 0;
  for (int i = 0; i < 10; i++) {
    int32_t v = (int64_t)k_cpb_set[i] < chunks ? k_cpb_set[i] : (int32_t)chunks;
    if (n == 0 || vals[n - 1] != v) vals[n++] = v;
  }
  return n;
}

static int tactic_is_zero(const dsk_tactic *t) {
  if (t->op != 0 || t->version != 0) return 0;
  for (int i = 0; i < 6; i++)
    if (t->v[i] != 0) return 0;
  return 1;
}

#ifndef DSK_MLA8_MIN_RECORDS
#define DSK_MLA8_MIN_RECORDS 4096
#endif
#ifndef DSK_MLA8_H16_MIN_RECORDS
#define DSK_MLA8_H16_MIN_RECORDS 81920
#endif
/* Heads per CTA (tactic v[1]) of the heuristic and of the tuner's tactic
 * set: 32 when H > 16; 8 (the 8-head kernel, sparse_mla_k8.cuh, one CTA per
 * 8-head group) when the call has at least DSK_MLA8_MIN_RECORDS candidate
 * slots (T x the segments' widths) at H <= 8, or DSK_MLA8_H16_MIN_RECORDS
 * at H 9..16; else 16. The 32-head kernel (v9, docs/design.md) was 1.0-1.5x
 * faster than two 16-head CTAs on every H 32/64/128 row of the H200 bench
 * (docs/benchmarks.md, 2026-12-01 A/B) but one (GLM-5.1 T 1, +0.7 us).
 * The 8-head kernel in its four-lane copy form (device run 27), against the
 * 16-head kernel on an H100 (docs/benchmarks.md, device runs 22, 30, 31):
 *  - H 8: every DSv4-Flash row from 4,096 slots at 0.62-0.98x (T 64 SWA +
 *    C4A 512 30.2 -> 28.2 us), from T 4 C128A 1024 (4,608 slots) up; the
 *    rows below are launch-bound (T <= 4, 1.00-1.02x).
 *  - H 16 (two 8-head groups): every row from 81,920 slots (T >= 128) at
 *    0.85-0.94x; below it mixed, 0.81-0.99x on five rows but 1.05-1.10x on
 *    T 64 SWA + C4A 512 and C128A 1024 and T 4 C128A 1024, so the rule
 *    stays at T >= 128 (the tuner's set keeps the heuristic's heads per
 *    CTA, autotune.md §1's <= 10 tactics a key; a forced tactic v[1] = 8
 *    reaches the other rows).
 * Both kernels of 16 and 32 pay for whole 16-head tiles, so H 17..31 costs
 * them what H 32 does. */
static int32_t dsk__sparse_mla_heads_per_cta(const dsk_sparse_mla_desc *d) {
  if (d->H > 16) return 32;
  int64_t width = 0;
  for (int i = 0; i < d->nseg && i < 2; i++) width += d->seg[i].width;
  const int64_t slots = d->T * width;
  return slots >= (d->H <= 8 ? DSK_MLA8_MIN_RECORDS : DSK_MLA8_H16_MIN_RECORDS) ? 8 : 16;
}

/* Is v1 a valid heads-per-CTA value for the shape? 8 and 16 always; 32
 * when H > 16. */
static int mla_heads_valid(const dsk_sparse_mla_desc *d, int32_t v1) {
  return v1 == 8 || v1 == 16 || (v1 == 32 && d->H > 16);
}

/* The heuristic of sparse-decode.md §9: among the v[0] values giving <= 3
 * waves, waves = T*ceil(H/hpc)*splits / (SMs*CTAs per SM) (evaluated exactly
 * in integers: num / den), minimise ceil(waves) - waves, ties to the larger
 * value; none -> the largest. Reads only the shape fields of d. */
void dsk__sparse_mla_heuristic(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, dsk_tactic *out) {
  dsk__sparse_mla_heuristic_hpc(ctx, d, 0, out);
}

void dsk__sparse_mla_heuristic_hpc(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, int32_t hpc_forced,
                                   dsk_tactic *out) {
  int32_t vals[10];
  int nv = mla_cpb_values(d, vals);
  int64_t chunks = mla_chunks(d);
  int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  const int32_t hpc = hpc_forced > 0 ? hpc_forced : dsk__sparse_mla_heads_per_cta(d);
  int64_t per_sm = 1;
  if (ctx->backend && ctx->backend->sparse_mla_ctas_per_sm) {
    int c = ctx->backend->sparse_mla_ctas_per_sm(ctx, d, hpc);
    if (c > 0) per_sm = c;
  }
  int64_t den = sms * per_sm;
  int64_t hg = (d->H + hpc - 1) / hpc;
  int best = -1;
  int64_t best_gap = 0; /* (ceil(waves) - waves) * den */
  for (int i = 0; i < nv; i++) {
    int64_t splits = (chunks + vals[i] - 1) / vals[i];
    int64_t num = d->T * hg * splits;
    if (num > 3 * den) continue;
    int64_t gap = (den - num % den) % den;
    if (best < 0 || gap <= best_gap) { /* ascending order: <= keeps the larger value on ties */
      best = i;
      best_gap = gap;
    }
  }
  if (best < 0) best = nv - 1;
  memset(out, 0, sizeof *out);
  out->op = DSK_OP_SPARSE_MLA_DECODE;
  out->version = DSK_SPARSE_MLA_TACTIC_VERSION;
  out->v[0] = vals[best];
  out->v[1] = hpc;
}

/* The tactic set of the shape in the op's fixed enumeration order (cpb
 * ascending, heads per CTA from dsk__sparse_mla_heads_per_cta; autotune.md
 * §1). Returns the count (<= 10). */
int dsk__sparse_mla_tactics(const dsk_sparse_mla_desc *d, dsk_tactic out[10]) {
  int32_t vals[10];
  int nv = mla_cpb_values(d, vals);
  const int32_t hpc = dsk__sparse_mla_heads_per_cta(d);
  for (int i = 0; i < nv; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].op = DSK_OP_SPARSE_MLA_DECODE;
    out[i].version = DSK_SPARSE_MLA_TACTIC_VERSION;
    out[i].v[0] = vals[i];
    out[i].v[1] = hpc;
  }
  return nv;
}

/* A5 re-validation of a stored tactic for the real shape: cpb above the
 * row's chunk count is clamped to it (a width bucket covers narrower
 * widths); the result must be in the valid set. 1 = usable. */
int dsk__sparse_mla_tactic_fix(const dsk_sparse_mla_desc *d, dsk_tactic *t) {
  if (t->op != DSK_OP_SPARSE_MLA_DECODE || t->version != DSK_SPARSE_MLA_TACTIC_VERSION) return 0;
  if (!mla_heads_valid(d, t->v[1])) return 0;
  for (int i = 2; i < 6; i++)
    if (t->v[i] != 0) return 0;
  int64_t chunks = mla_chunks(d);
  if (t->v[0] < 1) return 0;
  if ((int64_t)t->v[0] > chunks) t->v[0] = (int32_t)chunks;
  int32_t vals[10];
  int nv = mla_cpb_values(d, vals);
  for (int i = 0; i < nv; i++)
    if (vals[i] == t->v[0]) return 1;
  return 0;
}

static dsk_status resolve_tactic(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, int mode, dsk_tactic *out,
                                 int *source) {
  int32_t vals[10];
  int nv = mla_cpb_values(d, vals);
  const dsk_tactic *f = &d->tactic;
  if (!tactic_is_zero(f)) {
    if (f->op != DSK_OP_SPARSE_MLA_DECODE)
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": tactic.op %d is not DSK_OP_SPARSE_MLA_DECODE (%d)", (int)f->op,
                       (int)DSK_OP_SPARSE_MLA_DECODE);
    if (f->version != DSK_SPARSE_MLA_TACTIC_VERSION)
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": tactic.version %d is not %d", (int)f->version,
                       (int)DSK_SPARSE_MLA_TACTIC_VERSION);
    int ok = 0;
    for (int i = 0; i < nv; i++) ok |= vals[i] == f->v[0];
    if (!ok) {
      char list[96];
      int n = 0;
      list[0] = 0;
      for (int i = 0; i < nv && n < (int)sizeof list - 8; i++)
        n += snprintf(list + n, sizeof list - (size_t)n, "%s%d", i ? "," : "", (int)vals[i]);
      return dsk__fail(DSK_STATUS_INVALID_ARG,
                       OP ": tactic.v[0] (chunks_per_block) %d is not valid for %lld chunks (valid: %s)", (int)f->v[0],
                       (long long)mla_chunks(d), list);
    }
    if (!mla_heads_valid(d, f->v[1]))
      return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": tactic.v[1] (heads per CTA) %d is not 8 or 16%s", (int)f->v[1],
                       d->H > 16 ? " or 32" : " (32 needs H > 16)");
    for (int i = 2; i < 6; i++)
      if (f->v[i] != 0)
        return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": tactic.v[%d] %d is not 0 (reserved)", i, (int)f->v[i]);
    *out = *f;
    if (source) *source = DSK_TACTIC_FORCED;
    return DSK_STATUS_OK;
  }
  /* All zero: the tuned entry of the bucketed key (re-validated, A5), else
   * the heuristic (src/tune/tuner.c counts and reports the miss). */
  dsk_tactic h;
  dsk__sparse_mla_heuristic(ctx, d, &h);
  dsk__tune_shape s;
  dsk__sparse_mla_tune_shape(d, &s);
  int src = DSK_TACTIC_HEURISTIC;
  dsk_status st = dsk__tune_resolve(ctx, &s, &h, mode, out, &src);
  if (source) *source = src;
  return st;
}

/* The key fields of a descriptor (autotune.md A1): format, precision, H,
 * widths and page sizes of each segment, T. */
void dsk__sparse_mla_tune_shape(const dsk_sparse_mla_desc *d, dsk__tune_shape *s) {
  memset(s, 0, sizeof *s);
  s->op = DSK_OP_SPARSE_MLA_DECODE;
  s->T = d->T;
  s->format = (int)d->format;
  s->precision = (int)d->precision;
  s->H = d->H;
  s->nseg = d->nseg;
  for (int i = 0; i < d->nseg && i < 2; i++) {
    s->w[i] = d->seg[i].width;
    s->pbs[i] = d->seg[i].cache.pbs;
  }
}

dsk_status dsk__sparse_mla_resolve_tactic(const dsk_ctx *ctx, const dsk_sparse_mla_desc *d, dsk_tactic *out,
                                          int *source) {
  return resolve_tactic(ctx, d, DSK__TUNE_RUN, out, source);
}

/* ------------------------------------------------------------ plan and run */

dsk_status dsk_sparse_mla_decode_plan(dsk_ctx *ctx, const dsk_sparse_mla_desc *d, dsk_plan_info *info) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, OP "_plan: ctx is NULL");
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, OP "_plan: desc is NULL");
  if (!info) return dsk__fail(DSK_STATUS_INVALID_ARG, OP "_plan: info is NULL");
  if (info->struct_size < sizeof *info)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP "_plan: info->struct_size %zu < sizeof(dsk_plan_info) %zu",
                     info->struct_size, sizeof *info);
  dsk_status st = dsk__sparse_mla_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  const dsk_backend *b = ctx->backend;
  if (!b->sparse_mla_decode)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, OP ": backend %s does not serve this op", b->name);
  dsk_tactic t;
  int source = DSK_TACTIC_HEURISTIC;
  st = resolve_tactic(ctx, d, DSK__TUNE_PLAN, &t, &source);
  if (st != DSK_STATUS_OK) return st;
  int64_t ws = b->sparse_mla_workspace ? b->sparse_mla_workspace(ctx, d, &t) : 0;
  if (ws < 0) ws = 0;
  size_t keep = info->struct_size;
  memset(info, 0, sizeof *info);
  info->struct_size = keep;
  info->workspace_bytes = ws;
  info->tactic = t;
  info->tactic_source = source;
  snprintf(info->backend, sizeof info->backend, "%s", b->name);
  return DSK_STATUS_OK;
}

dsk_status dsk_sparse_mla_decode(dsk_ctx *ctx, const dsk_sparse_mla_desc *d) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": ctx is NULL");
  if (!d) return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": desc is NULL");
  dsk_status st = dsk__sparse_mla_validate(ctx, d);
  if (st != DSK_STATUS_OK) return st;
  if (d->T == 0) return DSK_STATUS_OK;
  const dsk_backend *b = ctx->backend;
  if (!b->sparse_mla_decode)
    return dsk__fail(DSK_STATUS_UNSUPPORTED, OP ": backend %s does not serve this op", b->name);
  dsk_tactic t;
  int source = DSK_TACTIC_HEURISTIC;
  st = dsk__sparse_mla_resolve_tactic(ctx, d, &t, &source);
  if (st != DSK_STATUS_OK) return st;
  int64_t need = b->sparse_mla_workspace ? b->sparse_mla_workspace(ctx, d, &t) : 0;
  if (need < 0) need = 0;
  if (d->workspace_bytes < need)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": workspace_bytes %lld < %lld needed (dsk_sparse_mla_decode_plan)",
                     (long long)d->workspace_bytes, (long long)need);
  if (need > 0 && !d->workspace)
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": workspace is NULL but %lld bytes are needed", (long long)need);
  if (need > 0 && ctx->info.is_cuda && !is_aligned(d->workspace, 16))
    return dsk__fail(DSK_STATUS_INVALID_ARG, OP ": workspace %p is not 16-byte aligned", d->workspace);
  return b->sparse_mla_decode(ctx, d, &t);
}
