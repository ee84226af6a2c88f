/* ref_kv.c - cpu-ref KV-cache writer and dequantising reader for the
 * fp8_ds_mla formats A (656 B) and B (584 B) and the indexer keys (132 B),
 * exactly as spec/kv-cache.md §3-§6. Descriptors arrive validated by
 * src/ops/kv.c with N >= 1.
 *
 * Writer, per row n with slot = slot_mapping[n]:
 *   slot < 0                skipped, not counted (padding token)
 *   slot >= num_pages*pbs   skipped, counters[0] += 1
 *   otherwise, per scale tile (A: 4 x 128, B: 7 x 64, indexer: 1 x 128):
 *     a NaN/inf in the tile -> every fp8 byte 0x7F, scale 1.0f (A, indexer)
 *       or byte 127 (B), counters[1] += 1;
 *     else scale from amax by the format's rule (format.h), fp8 = e4m3(x / s);
 *   rope bf16 copied bit for bit; Format B's pad byte 0. Nothing else in the
 *   page (padding, other records) is touched.
 *   Rows are shared among threads by slot, so rows with the same slot go to
 *   the same thread in row order: on cpu-ref the last such row wins (the spec
 *   leaves it unspecified) and no two threads touch the same bytes.
 *
 * Reader, per row n with slot = slots[n]: out[n, 0:dim] = fp32 decode of the
 * record (fp8 value times the fp32 scale, one fp32 multiply; Format B scale
 * via ue8m0_kv; rope as fp32). Invalid slots (negative or >= capacity) give
 * an all-NaN row and counters[0] += 1. Columns past dim are not touched.
 * Counters are summed with an OpenMP reduction (integer, so deterministic).
 */
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ref.h"
#include "format/format.h"

/* Rows per thread below which threads cost more than they save. */
#define REF_KV_MIN_ROWS_PER_THREAD 16

static int ref_threads(const dsk_ctx *ctx, int64_t N) {
  int nt = ctx->num_threads > 0 ? ctx->num_threads : 1;
  int64_t useful = N / REF_KV_MIN_ROWS_PER_THREAD;
  if (useful < 1) useful = 1;
  if (nt > useful) nt = (int)useful;
  return nt;
}

/* ------------------------------------------------------------- writer */
/* Quantise one tile into q (n bytes); returns 1 (and writes NaN poison) if the
 * tile holds a non-finite value, else stores the tile's scale in *s. */
static int quant_tile_a_or_idx(const uint16_t *x, int n, int rule, int is_idx, uint8_t *q, float *s) {
  float amax;
  if (dsk_fmt_tile_amax(x, n, &amax)) {
    memset(q, DSK_FMT_E4M3_NAN, (size_t)n);
    *s = is_idx ? DSK_FMT_I_NAN_SCALE : DSK_FMT_A_NAN_SCALE;
    return 1;
  }
  *s = is_idx ? dsk_fmt_scale_idx(amax, rule) : dsk_fmt_scale_a(amax, rule);
  dsk_fmt_quant_tile(x, n, *s, q);
  return 0;
}

static void copy_rope(uint8_t *dst, const uint16_t *rope) {
  for (int i = 0; i < DSK_FMT_ROPE_DIM; i++) dsk_fmt_store_u16(dst + 2 * i, rope[i]);
}

static int64_t write_a(uint8_t *base, const dsk_kv_cache *c, int64_t slot, const uint16_t *lat,
                       const uint16_t *rope, int rule) {
  uint8_t *rec = base + dsk_fmt_a_record_off(slot, c->pbs, c->page_stride);
  int64_t bad = 0;
  for (int t = 0; t < DSK_FMT_A_TILES; t++) {
    float s;
    bad += quant_tile_a_or_idx(lat + DSK_FMT_A_TILE * t, DSK_FMT_A_TILE, rule, 0, rec + DSK_FMT_A_TILE * t, &s);
    dsk_fmt_store_f32(rec + DSK_FMT_A_SCALE_OFF + 4 * t, s);
  }
  copy_rope(rec + DSK_FMT_A_ROPE_OFF, rope);
  return bad;
}

static int64_t write_b(uint8_t *base, const dsk_kv_cache *c, int64_t slot, const uint16_t *lat,
                       const uint16_t *rope) {
  uint8_t *data = base + dsk_fmt_b_data_off(slot, c->pbs, c->page_stride);
  uint8_t *foot = base + dsk_fmt_b_scale_off(slot, c->pbs, c->page_stride);
  int64_t bad = 0;
  for (int t = 0; t < DSK_FMT_B_TILES; t++) {
    const uint16_t *x = lat + DSK_FMT_B_TILE * t;
    uint8_t *q = data + DSK_FMT_B_TILE * t;
    float amax;
    if (dsk_fmt_tile_amax(x, DSK_FMT_B_TILE, &amax)) {
      memset(q, DSK_FMT_E4M3_NAN, DSK_FMT_B_TILE);
      foot[t] = DSK_FMT_B_NAN_SCALE_BYTE;
      bad++;
      continue;
    }
    uint8_t e = dsk_fmt_scale_b_byte(amax);
    dsk_fmt_quant_tile(x, DSK_FMT_B_TILE, dsk_fmt_pow2_from_byte(e), q);
    foot[t] = e;
  }
  foot[DSK_FMT_B_TILES] = 0; /* pad byte */
  copy_rope(data + DSK_FMT_B_ROPE_OFF, rope);
  return bad;
}

static int64_t write_idx(uint8_t *base, const dsk_kv_cache *c, int64_t slot, const uint16_t *lat, int rule) {
  uint8_t *q = base + dsk_fmt_i_data_off(slot, c->pbs, c->page_stride);
  float s;
  int64_t bad = quant_tile_a_or_idx(lat, DSK_FMT_I_LATENT, rule, 1, q, &s);
  dsk_fmt_store_f32(base + dsk_fmt_i_scale_off(slot, c->pbs, c->page_stride), s);
  return bad;
}

dsk_status dsk__ref_kv_write(dsk_ctx *ctx, const dsk_kv_write_desc *d) {
  const int64_t N = d->N;
  const dsk_kv_cache c = d->cache;
  const int64_t cap = c.num_pages * c.pbs;
  uint8_t *base = (uint8_t *)c.base;
  const int f = (int)d->format, rule = (int)d->scale_rule;
  int64_t skipped = 0, nonfinite = 0;
  int nt = ref_threads(ctx, N);
  (void)nt;

#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : skipped, nonfinite) if (nt > 1)
#endif
  {
    int64_t tid = 0, T = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    T = omp_get_num_threads();
#endif
    for (int64_t n = 0; n < N; n++) {
      int64_t slot = d->slot_mapping[n];
      if (slot < 0) continue;                 /* padding token: silent */
      if ((slot >> 3) % T != tid) continue;   /* owner thread of this slot */
      if (slot >= cap) {
        skipped++;
        continue;
      }
      const uint16_t *lat = d->latent + n * d->latent_stride;
      if (f == DSK_KV_FORMAT_A656)
        nonfinite += write_a(base, &c, slot, lat, d->rope + n * d->rope_stride, rule);
      else if (f == DSK_KV_FORMAT_B584)
        nonfinite += write_b(base, &c, slot, lat, d->rope + n * d->rope_stride);
      else
        nonfinite += write_idx(base, &c, slot, lat, rule);
    }
  }
  if (d->counters) {
    d->counters[0] += skipped;
    d->counters[1] += nonfinite;
  }
  return DSK_STATUS_OK;
}

/* ------------------------------------------------------------- reader */
static void read_a(const uint8_t *base, const dsk_kv_cache *c, int64_t slot, float *o) {
  const uint8_t *rec = base + dsk_fmt_a_record_off(slot, c->pbs, c->page_stride);
  for (int t = 0; t < DSK_FMT_A_TILES; t++) {
    float s = dsk_fmt_load_f32(rec + DSK_FMT_A_SCALE_OFF + 4 * t);
    for (int i = 0; i < DSK_FMT_A_TILE; i++) {
      int dd = DSK_FMT_A_TILE * t + i;
      o[dd] = dsk_fmt_e4m3_to_f32(rec[dd]) * s;
    }
  }
  for (int i = 0; i < DSK_FMT_ROPE_DIM; i++)
    o[DSK_FMT_A_LATENT + i] = dsk_fmt_bf16_to_f32(dsk_fmt_load_u16(rec + DSK_FMT_A_ROPE_OFF + 2 * i));
}

static void read_b(const uint8_t *base, const dsk_kv_cache *c, int64_t slot, float *o) {
  const uint8_t *data = base + dsk_fmt_b_data_off(slot, c->pbs, c->page_stride);
  const uint8_t *foot = base + dsk_fmt_b_scale_off(slot, c->pbs, c->page_stride);
  for (int t = 0; t < DSK_FMT_B_TILES; t++) {
    float s = dsk_fmt_ue8m0_kv_to_f32(foot[t]);
    for (int i = 0; i < DSK_FMT_B_TILE; i++) {
      int dd = DSK_FMT_B_TILE * t + i;
      o[dd] = dsk_fmt_e4m3_to_f32(data[dd]) * s;
    }
  }
  for (int i = 0; i < DSK_FMT_ROPE_DIM; i++)
    o[DSK_FMT_B_LATENT + i] = dsk_fmt_bf16_to_f32(dsk_fmt_load_u16(data + DSK_FMT_B_ROPE_OFF + 2 * i));
}

static void read_idx(const uint8_t *base, const dsk_kv_cache *c, int64_t slot, float *o) {
  const uint8_t *q = base + dsk_fmt_i_data_off(slot, c->pbs, c->page_stride);
  float s = dsk_fmt_load_f32(base + dsk_fmt_i_scale_off(slot, c->pbs, c->page_stride));
  for (int i = 0; i < DSK_FMT_I_LATENT; i++) o[i] = dsk_fmt_e4m3_to_f32(q[i]) * s;
}

dsk_status dsk__ref_kv_read(dsk_ctx *ctx, const dsk_kv_read_desc *d) {
  const int64_t N = d->N;
  const dsk_kv_cache c = d->cache;
  const int64_t cap = c.num_pages * c.pbs;
  const uint8_t *base = (const uint8_t *)c.base;
  const int f = (int)d->format;
  const int64_t dim = dsk_fmt_dim(f);
  const float nan = dsk_fmt_nan(0);
  int64_t invalid = 0;
  int nt = ref_threads(ctx, N);
  (void)nt;

#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) reduction(+ : invalid) schedule(static) if (nt > 1)
#endif
  for (int64_t n = 0; n < N; n++) {
    int64_t slot = d->slots[n];
    float *o = d->out + n * d->out_stride;
    if (slot < 0 || slot >= cap) {
      for (int64_t i = 0; i < dim; i++) o[i] = nan;
      invalid++;
      continue;
    }
    if (f == DSK_KV_FORMAT_A656)
      read_a(base, &c, slot, o);
    else if (f == DSK_KV_FORMAT_B584)
      read_b(base, &c, slot, o);
    else
      read_idx(base, &c, slot, o);
  }
  if (d->counters) d->counters[0] += invalid;
  return DSK_STATUS_OK;
}
