/* harness.h - the backend-vs-reference harness, shared by `dsk check`,
 * `dsk demo`, `dsk bench` and the tests. Each check runs an op on the
 * context's backend (CPU or CUDA; data moves with dsk_mem_*) and compares it
 * with the CPU reference and, for sparse decode, an independent fp64 oracle. */
#ifndef DSK_HARNESS_H
#define DSK_HARNESS_H

#include <stdio.h>

#include "dsk.h"
#include "testutil.h"

typedef struct dsk_check_opts {
  int quick;        /* reduced shapes (make test, qemu); 0 = full set */
  uint64_t seed;
  int verbose;
  FILE *log;        /* per-case lines; NULL = stdout */
  const char *only; /* NULL = all; else "kv", "slots", "sparse_mla", "mhc", "indexer", "moe" */
} dsk_check_opts;

/* Each adds to counts (passed/failed checks) and returns 0 on success. */
int dsk_check_kv(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c);         /* check_kv.c */
int dsk_check_slots(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c);      /* check_slots.c */
int dsk_check_sparse_mla(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c); /* check_sparse_mla.c */
/* check_mhc.c: dsk_mhc_prenorm + dsk_mhc_pre (plain and with the fused
 * RMSNorm), dsk_mhc_post and dsk_mhc_head on ctx's backend and on the
 * cpu-ref with the same split count, compared within spec/mhc.md §7's
 * bounds. Full: D 4096 / 7168 at T 1, 3, 64, 4097 with S in {heuristic, 1,
 * S_max} (heuristic only at T 4097) and TF32 rows; quick: D 256 / 512 at
 * T 1, 3, 64, 257. */
int dsk_check_mhc(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c);
/* check_indexer.c: scores, top-k and the fused path on ctx's backend
 * against the CPU reference (quick: contexts up to a few thousand; full: up
 * to 128K for scores and 1M for top-k). */
int dsk_check_indexer(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c);
/* check_moe.c: the MoE path (spec/mxfp4-moe.md §8; docs/moe.md) on ctx's
 * backend (data moved with dsk_mem_*), per case:
 *  - dsk_mx_quantize and dsk_fp8_quantize_1x128 (with NaN blocks) and
 *    dsk_sf_pack_mn_major bit-exact against the cpu-ref;
 *  - dsk_moe_run on DSv4-Flash, DSv4-Pro and GLM-5.1 geometry against the
 *    cpu-ref (diff <= 0.01, warning above 1e-4; skipped when ctx is the
 *    cpu-ref itself) and against an fp64 forward written in check_moe_forward.c
 *    from the checkpoint tensors (diff <= 0.01).
 * quick: H 256..384, I 128..384, E 8..16, T 1, 3, 64 (a few seconds on 2
 * cores); full: production H and I, EP slices of 8 local experts of the full
 * router width (the gate bias steers every token to them), T 1, 8 (fp64
 * oracle) and 64 (vs cpu-ref only).
 * A backend that answers DSK_STATUS_UNSUPPORTED (the CUDA MoE kernels are
 * not built yet) is reported as skipped, not failed. */
int dsk_check_moe(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c);
/* Graph capture for the MoE check (the harness itself has no CUDA runtime):
 * when set, every forward with a shared expert that the aux_stream run
 * covers runs once more on a new stream, with aux_stream, between begin and
 * end_run, and its output must equal the first run bit for bit. begin
 * starts capturing `stream`; end_run ends the capture, launches the graph
 * once and waits for it. tests/test_capture.c sets it on a CUDA context. */
typedef struct dsk_check_capture_hooks {
  int (*begin)(void *stream, void *user);   /* 0 = capturing */
  int (*end_run)(void *stream, void *user); /* 0 = the graph ran */
  void *user;
  int64_t runs; /* forwards run under capture (the hooks' caller reads it) */
} dsk_check_capture_hooks;
extern dsk_check_capture_hooks *dsk_check_capture; /* NULL (default): no capture runs */
/* All of the above (harness.c). */
int dsk_check_run(dsk_ctx *ctx, const dsk_check_opts *o, tu_counts *c);

/* The main job (demo.c): DSv4-Flash and GLM-5.1 decode steps, written with
 * the writer, slot lists from the builders, decode on ctx's backend,
 * checked against the reference; one row per case. Then a DSv4-Flash mHC
 * row (prenorm + pre + post, D 4096, T 16, vs the cpu-ref within
 * spec/mhc.md §7) and a DSv4-Flash indexer row (C4A logits + top-512 over
 * the same 32K-token contexts, scores within spec/indices.md §9's bound,
 * top-k by its test rule). Returns 0 if every row is within the spec's
 * bound. */
typedef struct dsk_demo_opts {
  int reps;   /* timed repetitions (median); 0 = default */
  int quick;  /* smaller contexts (for tests) */
  uint64_t seed;
} dsk_demo_opts;
int dsk_demo_run(dsk_ctx *ctx, const dsk_demo_opts *o, FILE *out);

/* `dsk bench sparse-mla` (bench_mla.c): one CSV row per (case, T). Returns
 * 0 if every case ran, DSK_BENCH_NO_CASE if the filters select none (below),
 * else 1. */
typedef struct dsk_bench_mla_opts {
  int reps;            /* samples per case (median); 0 = 20 */
  int warm;            /* 1 = no L2 flush between samples */
  int quick;           /* small pools (for tests) */
  int max_T;           /* skip T above this; 0 = all */
  int only_T, only_H;  /* run only this T / H; 0 = all */
  int hpc;             /* heads per CTA (tactic v[1]) forced with the heuristic's cpb for it; 0 = the plan's */
  int fast;            /* 1 = precision FAST */
  const char *model;   /* substring filter on the model name, or NULL */
  double mma_tflops;   /* MMA ceiling for the floor column; 0 = 640 (H200 bf16 mma.sync) */
  uint64_t seed;
} dsk_bench_mla_opts;
int dsk_bench_sparse_mla(dsk_ctx *ctx, const dsk_bench_mla_opts *o, FILE *out);

/* `dsk bench mhc` (bench_mhc.c): DSv4-Flash (D 4096) and DSv4-Pro (D 7168)
 * at T 1, 4, 16, 64, 256, 1024, 4096; per (model, T) one CSV row for
 * prenorm + pre + post as one timed callable, then prenorm, pre, pre+norm,
 * post and head alone. GB/s over the bytes of spec/mhc.md §5, % of the
 * copy bandwidth measured in the same run. Returns 0 if every case ran,
 * DSK_BENCH_NO_CASE if the filters select none (below), else 1. */
typedef struct dsk_bench_mhc_opts {
  int reps;             /* samples per case (median); 0 = 20 */
  int warm;             /* 1 = no L2 flush between samples */
  int quick;            /* T 1 and 4 only, a smaller copy measurement on the CPU (tests) */
  int max_T;            /* skip T above this; 0 = all */
  int only_T;           /* run only this T; 0 = all */
  const char *model;    /* substring filter on the model name, or NULL */
  const char *op;       /* only this op row (names as printed), or NULL */
  int32_t fixed_splits; /* 0 = plan's choice; else pins S (models with S_max below it are skipped) */
  uint64_t seed;
} dsk_bench_mhc_opts;
int dsk_bench_mhc(dsk_ctx *ctx, const dsk_bench_mhc_opts *o, FILE *out);

/* `dsk bench indexer` (bench_indexer.c): dsk_indexer_logits, dsk_topk and
 * the fused dsk_indexer_topk_slots for DSv4-Flash C4A (ratio 4, 64 heads,
 * K 512), DeepSeek-V3.2 (ratio 1, 64 heads, K 2048) and GLM-5.1 (ratio 1,
 * 32 heads, K 2048) at contexts 4K, 32K, 128K tokens and T 1, 16, 64 query
 * rows (per_req rows per request; each request has the full context). One
 * CSV row per (case, op); GB/s over the distinct key bytes read (logits,
 * fused) or the scores read (top-k). Returns 0 if every case ran,
 * DSK_BENCH_NO_CASE if the filters select none (below), else 1. */
typedef struct dsk_bench_indexer_opts {
  int reps;            /* samples per case (median); 0 = 20 */
  int warm;            /* 1 = no L2 flush between samples */
  int quick;           /* context 4K, T 1 and 4, fewer warm-ups (tests) */
  int max_T;           /* skip T above this; 0 = all */
  int only_T;          /* run only this T; 0 = all */
  int64_t only_ctx;    /* run only this context (tokens); 0 = all */
  int per_req;         /* query rows per request; 0 = 1 (a decode batch) */
  const char *model;   /* substring filter on the model name, or NULL */
  const char *op;      /* "logits", "topk" or "fused", or NULL = all */
  uint64_t seed;
} dsk_bench_indexer_opts;
int dsk_bench_indexer(dsk_ctx *ctx, const dsk_bench_indexer_opts *o, FILE *out);

/* `dsk bench moe` (bench_moe.c): one MoE layer (dsk_moe_run) of DSv4-Flash,
 * DSv4-Pro and GLM-5.1 and each of its ops alone; CSV to `out`. Returns 0
 * if every case ran, DSK_BENCH_NO_CASE if the filters select none (below),
 * else 1. */
typedef struct dsk_bench_moe_opts {
  int reps;          /* samples per row (median); 0 = 20 */
  int warm;          /* 1 = no L2 flush between samples */
  int quick;         /* reduced shapes (H 256..384, E 16..24), T 1 and 16 (tests, CPU) */
  int max_T;         /* skip T above this; 0 = all */
  int only_T;        /* run only this T; 0 = all */
  const char *model; /* substring filter on the model name, or NULL */
  const char *op;    /* only this op row (names as printed), or NULL */
  uint64_t seed;
} dsk_bench_moe_opts;
int dsk_bench_moe(dsk_ctx *ctx, const dsk_bench_moe_opts *o, FILE *out);

/* What a dsk_bench_* function returns when its filters (model, T, H,
 * context, op, split count) select no case: nothing is written to `out`,
 * and stderr says which values the bench has (dsk__bench_no_case). `dsk
 * bench` turns it into a usage error (exit 2), so a mistyped filter is not
 * mistaken for a run with no rows. */
#define DSK_BENCH_NO_CASE 2
int dsk__bench_no_case(const char *bench, const char *have);

/* The start every `dsk bench` shares: measures the copy bandwidth in this
 * run (1 GiB on CUDA; on the CPU 256 MiB, or 32 MiB with small_copy) and
 * prints the first comment line (version, backend, device, copy bandwidth,
 * L2 state, method). Returns 0, or 1 after a message on stderr. */
int dsk__bench_preamble(dsk_ctx *ctx, const dsk_ctx_info *info, const char *bench, int small_copy, int warm,
                        FILE *out, double *copy_gbps);

/* check_moe_forward.c: one MoE row of `dsk demo` (which: 0 DSv4-Flash, 1 GLM-5.1,
 * 2 DSv4-Pro; production shapes on CUDA, reduced ones on the CPU). res:
 * median_us, GB/s, TFLOPS, rel_l2, max_abs. Returns 0 if the row ran. */
int dsk__moe_demo_row(dsk_ctx *ctx, dsk_ctx *ref, int which, int quick, int reps, uint64_t seed, double res[5],
                      int *pass, char *label, size_t label_len, char *note, size_t note_len);

#endif
