/* sparse_mla_plan.cuh - host side of the sparse MLA decode launch: the
 * kernel parameters, the split count and which kernels run, from the
 * descriptor, the tactic and the SM count. Shared by the launcher
 * (sparse_mla_decode.cu) and the CPU emulation test (tests/emu_sparse_mla.cc),
 * so the emulation runs exactly the configuration a GPU would. Included
 * inside the launcher's anonymous namespace, after sparse_mla_common.cuh. */

int seg_chunks(const dsk_sparse_mla_desc *d, int s) {
  return s < d->nseg ? (int)((d->seg[s].width + DSK_MLA_CHUNK - 1) / DSK_MLA_CHUNK) : 0;
}
int chunk_count(const dsk_sparse_mla_desc *d) { return seg_chunks(d, 0) + seg_chunks(d, 1); }

/* Heads per CTA of the tactic: 8, 16 or 32 (v[1], validated by src/ops). */
int tactic_heads(const dsk_tactic *tc) {
  return tc->v[1] == DSK_MLA32_HEADS ? DSK_MLA32_HEADS : tc->v[1] == DSK_MLA8_HEADS ? DSK_MLA8_HEADS : DSK_MLA_HEADS;
}

/* 32-candidate stages per split. Tactic v[0] (cpb) gives 2 * cpb; at cpb 1,
 * when even twice the splits leave the grid within one CTA per SM (a
 * decode step of few rows: every CTA runs alone on its SM, so its time is
 * one warp's dependent instruction chain), each split takes one stage and
 * the splits double (not for 8 heads a CTA: its four warps need the four
 * 16-candidate units of two stages). Deterministic in the shape, the tactic and the SM
 * count, so the plan's workspace and the run agree. */
int stages_per_split(int64_t sm_count, const dsk_sparse_mla_desc *d, const dsk_tactic *tc, int *splits) {
  const int ch = chunk_count(d);
  int cpb = tc->v[0] > 0 ? tc->v[0] : 1;
  if (cpb > ch) cpb = ch;
  const int hpc = tactic_heads(tc);
  const int64_t nhg = (d->H + hpc - 1) / hpc;
  int spb = 2 * cpb;
  if (cpb == 1 && hpc != DSK_MLA8_HEADS && d->T * nhg * 2 * (int64_t)ch <= sm_count) spb = 1;
  *splits = (2 * ch + spb - 1) / spb;
  return spb;
}

/* Workspace bytes of a call with `splits` splits: fp32 partial rows and lse. */
int64_t workspace_bytes(const dsk_sparse_mla_desc *d, int splits) {
  return splits <= 1 ? 0 : d->T * d->H * (int64_t)splits * (512 + 1) * 4;
}

/* DSK_MLA32_REGCVT (compile time, default 1): 1 runs the ACCURATE 32-head
 * calls on both tables with the raw-record kernel's ACCURATE form
 * (sparse_mla_k32f8.cuh, RC: no conversion phase and no f16 stage, e4m3
 * converted to f16 in registers, two raw stage buffers); 0 runs
 * sparse_mla_k32.cuh (the v9d kernel, kept as the A/B baseline). On the
 * H200 RC took every H > 16 row at T 128 to 0.73-0.89x of v9d
 * (docs/benchmarks.md, v10r). */
#ifndef DSK_MLA32_REGCVT
#define DSK_MLA32_REGCVT 1
#endif

/* One call's launch: the parameters, the split kernel (wide = 32 heads;
 * fp8 = its FAST form; k8 = the 8-head kernel; w8 = the 16-head kernel
 * with 8 warps, for single-wave grids), its grid and shared memory, and the combine form
 * (combine_batch 0 = two-pass, else the batched kernel's B). rc_ok: ACCURATE
 * 32-head calls run the raw-record kernel's ACCURATE form (DSK_MLA32_REGCVT;
 * lp.rc). fp8_ok: the
 * backend runs FAST calls with e4m3 MMAs (cuda-sm120, where they are
 * native; sm_90 expands them into f16 MMAs, so cuda-sm90 serves FAST with
 * the ACCURATE kernels). The split count and workspace do not depend on
 * it. */
struct LaunchPlan {
  Params p;
  bool wide, fp8, rc, k8, w8, single_wave;
  int64_t blocks_x;
  int smem, combine_batch;
};
template <int F>
LaunchPlan launch_plan(const dsk_sparse_mla_desc *d, const dsk_tactic *tc, int64_t sm_count, bool fp8_ok,
                       bool rc_ok) {
  LaunchPlan lp;
  Params &p = lp.p;
  memset(&p, 0, sizeof p);
  p.q = d->q;
  p.q_st = d->q_stride_t;
  p.q_sh = d->q_stride_h;
  p.scale_log2 = d->sm_scale * 1.4426950408889634f;
  p.T = d->T;
  p.H = d->H;
  p.nseg = d->nseg;
  for (int i = 0; i < d->nseg; i++) {
    const dsk_sparse_mla_segment &sg = d->seg[i];
    p.seg[i].base = (const uint8_t *)sg.cache.base;
    p.seg[i].pbs = sg.cache.pbs;
    dsk__page_divisor(sg.cache.pbs, &p.seg[i].pbs32, &p.seg[i].pbs_log2);
    p.seg[i].page_stride = sg.cache.page_stride;
    p.seg[i].cap = sg.cache.num_pages * sg.cache.pbs;
    p.seg[i].slots = sg.slots;
    p.seg[i].slots_st = sg.slots_stride_t;
    p.seg[i].width = sg.width;
    p.seg[i].lens = sg.lens;
  }
  p.sink = d->sink;
  p.out = d->out;
  p.out_st = d->out_stride_t;
  p.out_sh = d->out_stride_h;
  p.lse = d->lse;
  p.lse_st = d->lse_stride_t;
  p.lse_sh = d->lse_stride_h;
  p.nch0 = seg_chunks(d, 0);
  p.nch = chunk_count(d);
  p.spb = stages_per_split(sm_count, d, tc, &p.splits);
  const int hpc = tactic_heads(tc);
  lp.wide = hpc == DSK_MLA32_HEADS;
  lp.k8 = hpc == DSK_MLA8_HEADS;
  lp.fp8 = lp.wide && fp8_ok && d->precision == DSK_PRECISION_FAST;
  lp.rc = lp.wide && !lp.fp8 && rc_ok;
  p.nhg = (int)((d->H + hpc - 1) / hpc);
  p.counters = (unsigned long long *)d->counters;
  if (p.splits > 1) {
    p.part_o = (float *)d->workspace;
    p.part_lse = p.part_o + d->T * d->H * p.splits * 512;
  }
  lp.blocks_x = d->T * p.nhg;
  lp.single_wave = lp.blocks_x * p.splits <= sm_count;
  lp.w8 = !lp.wide && !lp.k8 && lp.single_wave;
  lp.smem = lp.k8            ? DSK_MLA8_SMEM_BYTES(F)
            : lp.fp8 || lp.rc ? DSK_MLA32F8_SMEM_BYTES(F)
            : lp.wide ? DSK_MLA32_SMEM_BYTES(F)
            : lp.w8   ? DSK_MLA_SMEM_BYTES_W(F, DSK_MLA_WARPS8)
                      : DSK_MLA_SMEM_BYTES(F);
  /* the batched combine's B: 2, 4 or 8 covering the splits, and from 64
   * splits on DSK_MLA_COMBINE_MAXB (GLM-5.1 T 1: 64 splits in 2 batches, not
   * 8: 0.85x); B 32 for 20 and 36 splits (DSv4-Flash, DSv4-Pro T 1)
   * measured 1-5 % slower than B 8 on the H200 (docs/benchmarks.md,
   * 2026-12-03) */
  lp.combine_batch = !lp.single_wave ? 0
                     : p.splits <= 2  ? 2
                     : p.splits <= 4  ? 4
                     : p.splits < 64  ? 8
                                      : DSK_MLA_COMBINE_MAXB;
  return lp;
}
