/* cmd_bench.c - `dsk bench sparse-mla | mhc | indexer | moe`: the kernels on
 * the model shapes, with the device copy bandwidth measured in the same run
 * (tests/harness/bench_mla.c, bench_mhc.c, bench_indexer.c, bench_moe.c).
 * Benchmarks are never assertions: the exit status only says whether every
 * case ran (0), a case failed to run (1), or the options were wrong (2),
 * filters that select no case included. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "harness.h"

static const char *const k_usage =
    "usage: dsk bench <benchmark> [options]\n"
    "\n"
    "benchmarks:\n"
    "  sparse-mla   dsk_sparse_mla_decode on the DSv4, GLM-5.1 and V3.2 shapes\n"
    "  mhc          the mHC ops (prenorm, pre, post, head) of DSv4-Flash and -Pro\n"
    "  indexer      indexer scores, top-k and the fused slot path (DSv4, V3.2, GLM)\n"
    "  moe          one MoE layer (dsk_moe_run) and its ops, GEMMs alone (DSv4, GLM)\n"
    "\n"
    "Each prints CSV rows (lines starting with '#' are comments: device, copy\n"
    "bandwidth, method). Common options: --device D, --backend B, --reps N,\n"
    "--warm, --quick, --seed N, --model NAME, --max-t N, --t N.\n"
    "`dsk bench <benchmark> --help` gives the options and columns of each.\n"
    "\n"
    "Exit status: 0 every selected case ran, 1 a case could not run (the reason\n"
    "on stderr), 2 usage error, also when the filters select no case.\n";

static const char *const k_usage_mla =
    "usage: dsk bench sparse-mla [--device D] [--backend B] [--reps N] [--warm]\n"
    "                            [--model NAME] [--max-t N] [--t N] [--heads N] [--hpc N]\n"
    "                            [--fast] [--mma-tflops X] [--quick] [--seed N]\n"
    "\n"
    "Times dsk_sparse_mla_decode (every kernel of the call: split + combine) on\n"
    "DSv4-Flash (H 64/32/16/8; SWA 128 + C4A 512, SWA 128 + C128A 256 and 1024),\n"
    "DSv4-Pro (H 128/64; SWA 128 + C4A 1024), GLM-5.1 (H 64) and DeepSeek-V3.2\n"
    "(H 128), both top-2048 on Format A, for T in 1, 4, 16, 64, 128, 256. KV pools\n"
    "are at least 4x the L2 size with random distinct slots per row. Each case:\n"
    "3 warm-ups, then N samples (default 20), each one call between two device\n"
    "events with L2 flushed before it (unless --warm); the median is reported.\n"
    "The device-to-device copy bandwidth (read + write) is measured first.\n"
    "\n"
    "CSV columns: model, layer, fmt, T, H, w0, w1, pbs1, cpb, hpc, splits, median_us,\n"
    "tflops, gbps, pct_copy_bw, floor_us = max(bytes / copy bandwidth, FLOP /\n"
    "MMA ceiling), x_floor = median / floor, valid (entries attended),\n"
    "stream16_us (T <= 16): the median per call when the case runs 16 times back\n"
    "to back on distinct inputs (q, slot lists, outputs, workspace; same pool)\n"
    "in one timed call, i.e. inside a stream of layer calls, without the fixed\n"
    "cost of the two events around a lone call.\n"
    "\n"
    "options:\n"
    "  --device D       cpu, cuda:N or auto (default auto)\n"
    "  --backend B      force a backend by name\n"
    "  --reps N         samples per case (default 20)\n"
    "  --warm           do not flush L2 between samples\n"
    "  --model NAME     only cases whose model name contains NAME (dsv4-flash,\n"
    "                   dsv4-pro, glm-5.1, dsv3.2)\n"
    "  --max-t N        skip token counts above N\n"
    "  --t N            only token count N\n"
    "  --heads N        only head count N\n"
    "  --hpc N          force heads per CTA N (8, 16 or 32; 32 skips H <= 16) with the\n"
    "                   heuristic's chunks per CTA for it (default: the plan's tactic)\n"
    "  --fast           precision FAST (default ACCURATE): with DSK_TEST_AS_SM120=1 the\n"
    "                   cuda-sm120 32-head tactic runs the e4m3 kernel; elsewhere FAST\n"
    "                   runs the ACCURATE kernels\n"
    "  --mma-tflops X   MMA ceiling for floor_us (default 640: bf16 mma.sync on H200)\n"
    "  --quick          small pools (tests)\n"
    "  --seed N         random seed (default 7)\n"
    "  -h, --help       this text\n";

static const char *const k_usage_mhc =
    "usage: dsk bench mhc [--device D] [--backend B] [--reps N] [--warm]\n"
    "                     [--model NAME] [--max-t N] [--t N] [--op OP] [--splits S]\n"
    "                     [--quick] [--seed N]\n"
    "\n"
    "Times the mHC ops of one DeepSeek-V4 sublayer (spec/mhc.md) for DSv4-Flash\n"
    "(D 4096, nD 16384) and DSv4-Pro (D 7168, nD 28672) at T in 1, 4, 16, 64,\n"
    "256, 1024, 4096. Per (model, T) these rows:\n"
    "  prenorm+pre+post  the three ops of a sublayer as one timed callable (the\n"
    "                    spec's T = 1 latency goal: <= 8 us together; at T = 64:\n"
    "                    >= 60% of the copy bandwidth)\n"
    "  prenorm+pre+post/stream16  (T <= 64) the same three ops on 16 distinct\n"
    "                    input sets back to back in one timed call, divided by\n"
    "                    16: one sublayer's time inside a stream of sublayers\n"
    "                    (each set read cold once per sample), without the\n"
    "                    fixed cost of the two events around a lone call\n"
    "  post_prenorm+pre  the same sublayer in its fused form: the previous\n"
    "                    sublayer's post fused with this one's prenorm\n"
    "                    (dsk_mhc_post_prenorm), then pre on its R' (the same\n"
    "                    work in two kernels; same goals)\n"
    "  post_prenorm+pre/stream16  the fused form in the stream reading\n"
    "  prenorm, pre, post  each op alone (pre: plain y; post: out of place)\n"
    "  post_prenorm      dsk_mhc_post_prenorm alone\n"
    "  pre+norm          pre with the fused sublayer RMSNorm\n"
    "  head              dsk_mhc_head\n"
    "Inputs as in `dsk check` (R ~ N(0, 1) bf16, fn ~ N(0, 1/nD), FP32 projection).\n"
    "Each row: 3 warm-ups, then N samples (default 20), each one call between two\n"
    "device events with L2 flushed before it (unless --warm); the median is\n"
    "reported. The device-to-device copy bandwidth (read + write) is measured\n"
    "first.\n"
    "\n"
    "CSV columns: model, D, T, S (split count the plan resolved; head: its own),\n"
    "op, median_us, gbps, pct_copy_bw (of the copy bandwidth), bytes, goal.\n"
    "Bytes per spec/mhc.md §5: fn 24*nD*4 + T*nD*2 per op that reads R + the\n"
    "outputs (y T*D*2, post T*16, C T*64, R' T*nD*2); split partials, the\n"
    "sublayer output read by post and the post/C re-read are not counted;\n"
    "pre+norm adds its norm weight (D*4), head counts its fn (4*nD*4) + R + h;\n"
    "the fused form reads R once and R' once (one read of R fewer).\n"
    "goal: the spec's goal on the four sublayer rows at T 1 and T 64.\n"
    "\n"
    "options:\n"
    "  --device D       cpu, cuda:N or auto (default auto)\n"
    "  --backend B      force a backend by name\n"
    "  --reps N         samples per row (default 20)\n"
    "  --warm           do not flush L2 between samples\n"
    "  --model NAME     only models whose name contains NAME (dsv4-flash, dsv4-pro)\n"
    "  --max-t N        skip token counts above N\n"
    "  --t N            only token count N\n"
    "  --op OP          only rows of OP (prenorm+pre+post,\n"
    "                   prenorm+pre+post/stream16, post_prenorm+pre,\n"
    "                   post_prenorm+pre/stream16, prenorm, pre, pre+norm, post,\n"
    "                   post_prenorm, head)\n"
    "  --splits S       pin the split count (fixed_splits; default: the plan's)\n"
    "  --quick          T 1 and 4 only, a smaller copy measurement on the CPU (tests)\n"
    "  --seed N         random seed (default 7)\n"
    "  -h, --help       this text\n";

static const char *const k_usage_idx =
    "usage: dsk bench indexer [--device D] [--backend B] [--reps N] [--warm]\n"
    "                         [--model NAME] [--max-t N] [--t N] [--context N]\n"
    "                         [--per-req N] [--op OP] [--quick] [--seed N]\n"
    "\n"
    "Times the lightning indexer (spec/indices.md §9) at contexts 4K, 32K and\n"
    "128K tokens and T in 1, 16, 64 query rows for DSv4-Flash C4A (ratio 4:\n"
    "context/4 entries, 64 heads, K 512), DeepSeek-V3.2 (ratio 1, 64 heads,\n"
    "K 2048) and GLM-5.1 (ratio 1, 32 heads, K 2048). Rows per case:\n"
    "  logits   dsk_indexer_logits (goal at 128K: >= 70% of the copy bandwidth\n"
    "           over the key bytes read)\n"
    "  topk     dsk_topk of those scores (goal: top-2048 of 128K entries for 64\n"
    "           rows in <= 50 us)\n"
    "  fused    dsk_indexer_topk_slots: scores -> top-k -> slot list\n"
    "  slots    dsk_slot_list_build alone: the top-k output -> slot list (the\n"
    "           fused path's last stage; TOPK, C4A for DSv4)\n"
    "The keys live in one pool (>= 4x L2, 64 entries per page) written with\n"
    "dsk_kv_write; each case gets a block table of random distinct pages. Rows\n"
    "are the last tokens of T/per-req requests, every request with the full\n"
    "context. Each row: 3 warm-ups, then N samples (default 20), each one call\n"
    "between two device events with L2 flushed before it (unless --warm); the\n"
    "median is reported. The device-to-device copy bandwidth (read + write) is\n"
    "measured first.\n"
    "\n"
    "CSV columns: model, ratio, H, K, context (tokens), entries (per request),\n"
    "T, reqs, op, median_us, gbps, pct_copy_bw, tflops (2*H*128 per scored entry),\n"
    "bytes, goal. Bytes: logits and fused = distinct key bytes read (132 per\n"
    "entry of each request); topk = scores read (4 per candidate) + indices\n"
    "written (4*T*K); slots = indices read + slots written (8*T*K).\n"
    "\n"
    "options:\n"
    "  --device D       cpu, cuda:N or auto (default auto)\n"
    "  --backend B      force a backend by name\n"
    "  --reps N         samples per row (default 20)\n"
    "  --warm           do not flush L2 between samples\n"
    "  --model NAME     only models whose name contains NAME (dsv4-flash, dsv3.2,\n"
    "                   glm-5.1)\n"
    "  --max-t N        skip row counts above N\n"
    "  --t N            only row count N\n"
    "  --context N      only context N tokens (4096, 32768, 131072)\n"
    "  --per-req N      query rows per request (default 1: a decode batch; 4: MTP)\n"
    "  --op OP          only rows of OP (logits, topk, fused, slots)\n"
    "  --quick          context 4K, T 1 and 4, one warm-up (tests)\n"
    "  --seed N         random seed (default 7)\n"
    "  -h, --help       this text\n";

static const char *const k_usage_moe =
    "usage: dsk bench moe [--device D] [--backend B] [--reps N] [--warm]\n"
    "                     [--model NAME] [--max-t N] [--t N] [--op OP] [--quick] [--seed N]\n"
    "\n"
    "Times one MoE layer (spec/mxfp4-moe.md §6: route, 1x128 quantize, permute,\n"
    "FC1, SwiGLU + re-quantize, FC2, shared expert, gather) of DSv4-Flash (H 4096,\n"
    "I 2048, 256 MXFP4 experts, top-6), DSv4-Pro (H 7168, I 3072, 384, top-6) and\n"
    "GLM-5.1 (H 6144, I 2048, 256 FP8 experts, top-8) at TP1 for T in 1, 16, 128,\n"
    "4096 tokens. Experts are generated in process (a few distinct ones, repeated\n"
    "over all E slots) and prepared by dsk_moe_prepare_weights; routing comes from\n"
    "the router on random x (close to uniform). Rows per (model, T):\n"
    "  layer    dsk_moe_run (goals on DSv4-Flash: T <= 16 weight streaming >= 70%\n"
    "           of the copy bandwidth; T = 4096 >= 200 TFLOPS)\n"
    "  layer+aux  the same with the shared expert on a second stream\n"
    "           (dsk_moe_desc.aux_stream)\n"
    "  route, quant, permute (+ SFA packing), fc1, swiglu, fc2, shared (dense\n"
    "           FC1 + SwiGLU + FC2), gather   each op of the layer alone\n"
    "Each row: 3 warm-ups, then N samples (default 20), each one call between two\n"
    "device events with L2 flushed before it (unless --warm); the median is\n"
    "reported. The device-to-device copy bandwidth (read + write) is measured\n"
    "first.\n"
    "\n"
    "CSV columns: model, H, I, E, topk, T, op, M_sum and A_used (worst case, as\n"
    "dsk_moe_run), active (distinct experts routed to), median_us, tflops (2 per\n"
    "multiply-add over the T*topk real rows; router and shared expert in the layer),\n"
    "gbps, pct_copy_bw (gbps / copy bandwidth), bytes, goal. Bytes: weight bytes\n"
    "(data + packed scales of the active experts, the shared expert, the router\n"
    "weight) for layer, route, fc1, fc2, shared; activation bytes read + written\n"
    "for quant, permute, swiglu, gather.\n"
    "\n"
    "options:\n"
    "  --device D       cpu, cuda:N or auto (default auto)\n"
    "  --backend B      force a backend by name\n"
    "  --reps N         samples per row (default 20)\n"
    "  --warm           do not flush L2 between samples\n"
    "  --model NAME     only models whose name contains NAME (dsv4-flash, dsv4-pro,\n"
    "                   glm-5.1)\n"
    "  --max-t N        skip token counts above N\n"
    "  --t N            only token count N\n"
    "  --op OP          only rows of OP (layer, layer+aux, route, quant, permute, fc1,\n"
    "                   swiglu, fc2, shared, gather)\n"
    "  --quick          reduced shapes (H 256/384, I 256/384, E 16/24), T 1 and 16\n"
    "                   (tests; the CPU reference)\n"
    "  --seed N         random seed (default 7)\n"
    "  -h, --help       this text\n";

typedef enum bench_kind { BENCH_MLA, BENCH_MHC, BENCH_IDX, BENCH_MOE } bench_kind;

/* Options of every benchmark; each one reads its own. */
typedef struct bench_args {
  const char *device, *backend, *model, *op;
  int reps, warm, quick, fast, max_T, only_T, only_H, hpc, splits, per_req, context;
  double mma_tflops;
  uint64_t seed;
} bench_args;

/* Is option `a` one of benchmark k's? (for a clear error instead of a silent ignore) */
static int opt_of(bench_kind k, const char *a, const char *usage, int *rc) {
  static const struct {
    const char *name;
    unsigned mask; /* 1 mla, 2 mhc, 4 indexer, 8 moe */
  } k_only[] = {{"--heads", 1}, {"--hpc", 1}, {"--fast", 1}, {"--mma-tflops", 1}, {"--splits", 2}, {"--op", 14}, {"--per-req", 4}, {"--context", 4}};
  static const char *const names[] = {"sparse-mla", "mhc", "indexer", "moe"};
  for (size_t i = 0; i < sizeof k_only / sizeof k_only[0]; i++) {
    const size_t n = strlen(k_only[i].name);
    if (strncmp(a, k_only[i].name, n) == 0 && (a[n] == '\0' || a[n] == '=') && !(k_only[i].mask & (1u << k))) {
      *rc = dsk_cli_usage_error("bench", usage, "%s is not an option of `dsk bench %s`", k_only[i].name, names[k]);
      return 0;
    }
  }
  return 1;
}

int dsk_cmd_bench(int argc, char **argv) {
  if (argc < 2 || dsk_cli_is_help(argv[1])) {
    fputs(k_usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? DSK_CLI_EXIT_USAGE : DSK_CLI_EXIT_OK;
  }
  bench_kind kind;
  const char *usage;
  if (strcmp(argv[1], "sparse-mla") == 0) {
    kind = BENCH_MLA;
    usage = k_usage_mla;
  } else if (strcmp(argv[1], "mhc") == 0) {
    kind = BENCH_MHC;
    usage = k_usage_mhc;
  } else if (strcmp(argv[1], "indexer") == 0) {
    kind = BENCH_IDX;
    usage = k_usage_idx;
  } else if (strcmp(argv[1], "moe") == 0) {
    kind = BENCH_MOE;
    usage = k_usage_moe;
  } else {
    return dsk_cli_usage_error("bench", k_usage, "unknown benchmark '%s' (available: sparse-mla, mhc, indexer, moe)",
                               argv[1]);
  }
  bench_args b;
  memset(&b, 0, sizeof b);
  b.device = "auto";
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int r, rc = 0;
    if (dsk_cli_is_help(a)) {
      fputs(usage, stdout);
      return DSK_CLI_EXIT_OK;
    }
    if (!opt_of(kind, a, usage, &rc)) return rc;
    if (strcmp(a, "--warm") == 0) {
      b.warm = 1;
    } else if (strcmp(a, "--quick") == 0) {
      b.quick = 1;
    } else if (strcmp(a, "--fast") == 0) {
      b.fast = 1;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--device needs a value");
      b.device = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--backend needs a value");
      b.backend = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--model", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--model needs a value");
      b.model = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--op", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--op needs a value");
      b.op = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--reps", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--reps needs a value");
      if (dsk_cli_parse_int("bench", "--reps", v, 1, 100000, &b.reps) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--max-t", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--max-t needs a value");
      if (dsk_cli_parse_int("bench", "--max-t", v, 1, 1 << 30, &b.max_T) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--t", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--t needs a value");
      if (dsk_cli_parse_int("bench", "--t", v, 1, 1 << 30, &b.only_T) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--heads", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--heads needs a value");
      if (dsk_cli_parse_int("bench", "--heads", v, 1, 128, &b.only_H) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--hpc", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--hpc needs a value");
      if (dsk_cli_parse_int("bench", "--hpc", v, 8, 32, &b.hpc) != 0) return DSK_CLI_EXIT_USAGE;
      if (b.hpc != 8 && b.hpc != 16 && b.hpc != 32)
        return dsk_cli_usage_error("bench", usage, "--hpc: %d is not 8, 16 or 32", b.hpc);
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--splits", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--splits needs a value");
      if (dsk_cli_parse_int("bench", "--splits", v, 1, 1 << 20, &b.splits) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--per-req", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--per-req needs a value");
      if (dsk_cli_parse_int("bench", "--per-req", v, 1, 64, &b.per_req) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--context", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--context needs a value");
      if (dsk_cli_parse_int("bench", "--context", v, 1, 1 << 30, &b.context) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--mma-tflops", &v)) != 0) {
      char *end = NULL;
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--mma-tflops needs a value");
      b.mma_tflops = strtod(v, &end);
      if (!end || *end || !(b.mma_tflops > 0))
        return dsk_cli_usage_error("bench", usage, "--mma-tflops: '%s' is not a positive number", v);
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--seed", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", usage, "--seed needs a value");
      if (dsk_cli_parse_u64("bench", "--seed", v, &b.seed) != 0) return DSK_CLI_EXIT_USAGE;
    } else {
      return dsk_cli_usage_error("bench", usage, "unknown option '%s'", a);
    }
  }
  dsk_ctx *ctx = NULL;
  if (dsk_cli_ctx_create("bench", b.device, b.backend, &ctx) != DSK_STATUS_OK) return DSK_CLI_EXIT_FAIL;
  int rc = 1;
  if (kind == BENCH_MLA) {
    dsk_bench_mla_opts o;
    memset(&o, 0, sizeof o);
    o.reps = b.reps;
    o.warm = b.warm;
    o.quick = b.quick;
    o.max_T = b.max_T;
    o.only_T = b.only_T;
    o.only_H = b.only_H;
    o.hpc = b.hpc;
    o.fast = b.fast;
    o.model = b.model;
    o.mma_tflops = b.mma_tflops;
    o.seed = b.seed;
    rc = dsk_bench_sparse_mla(ctx, &o, stdout);
  } else if (kind == BENCH_MHC) {
    dsk_bench_mhc_opts o;
    memset(&o, 0, sizeof o);
    o.reps = b.reps;
    o.warm = b.warm;
    o.quick = b.quick;
    o.max_T = b.max_T;
    o.only_T = b.only_T;
    o.model = b.model;
    o.op = b.op;
    o.fixed_splits = b.splits;
    o.seed = b.seed;
    rc = dsk_bench_mhc(ctx, &o, stdout);
  } else if (kind == BENCH_MOE) {
    dsk_bench_moe_opts o;
    memset(&o, 0, sizeof o);
    o.reps = b.reps;
    o.warm = b.warm;
    o.quick = b.quick;
    o.max_T = b.max_T;
    o.only_T = b.only_T;
    o.model = b.model;
    o.op = b.op;
    o.seed = b.seed;
    rc = dsk_bench_moe(ctx, &o, stdout);
  } else {
    dsk_bench_indexer_opts o;
    memset(&o, 0, sizeof o);
    o.reps = b.reps;
    o.warm = b.warm;
    o.quick = b.quick;
    o.max_T = b.max_T;
    o.only_T = b.only_T;
    o.only_ctx = b.context;
    o.per_req = b.per_req;
    o.model = b.model;
    o.op = b.op;
    o.seed = b.seed;
    rc = dsk_bench_indexer(ctx, &o, stdout);
  }
  dsk_ctx_destroy(ctx);
  if (rc == DSK_BENCH_NO_CASE) return DSK_CLI_EXIT_USAGE;
  return rc ? DSK_CLI_EXIT_FAIL : DSK_CLI_EXIT_OK;
}
