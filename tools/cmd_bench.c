/* cmd_bench.c - `dsk bench sparse-mla`: the decode kernel on the model shapes,
 * with the device copy bandwidth measured in the same run
 * (tests/harness/bench_mla.c). Benchmarks are never assertions: the exit
 * status only says whether every case ran. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "harness.h"

static const char *const k_usage =
    "usage: dsk bench sparse-mla [--device D] [--backend B] [--reps N] [--warm]\n"
    "                            [--model NAME] [--max-t N] [--t N] [--heads N] [--mma-tflops X]\n"
    "                            [--quick] [--seed N]\n"
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
    "CSV columns: model, layer, fmt, T, H, w0, w1, pbs1, cpb, splits, median_us,\n"
    "tflops, gbps, pct_copy_bw, floor_us = max(bytes / copy bandwidth, FLOP /\n"
    "MMA ceiling), x_floor = median / floor, valid (entries attended).\n"
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
    "  --mma-tflops X   MMA ceiling for floor_us (default 640: bf16 mma.sync on H200)\n"
    "  --quick          small pools (tests)\n"
    "  --seed N         random seed (default 7)\n"
    "  -h, --help       this text\n";

int dsk_cmd_bench(int argc, char **argv) {
  if (argc < 2 || dsk_cli_is_help(argv[1])) {
    fputs(k_usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? DSK_CLI_EXIT_USAGE : DSK_CLI_EXIT_OK;
  }
  if (strcmp(argv[1], "sparse-mla") != 0)
    return dsk_cli_usage_error("bench", k_usage, "unknown benchmark '%s' (available: sparse-mla)", argv[1]);
  const char *device = "auto", *backend = NULL;
  dsk_bench_mla_opts o;
  memset(&o, 0, sizeof o);
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int r;
    if (dsk_cli_is_help(a)) {
      fputs(k_usage, stdout);
      return DSK_CLI_EXIT_OK;
    } else if (strcmp(a, "--warm") == 0) {
      o.warm = 1;
    } else if (strcmp(a, "--quick") == 0) {
      o.quick = 1;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--device needs a value");
      device = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--backend needs a value");
      backend = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--model", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--model needs a value");
      o.model = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--reps", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--reps needs a value");
      if (dsk_cli_parse_int("bench", "--reps", v, 1, 100000, &o.reps) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--max-t", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--max-t needs a value");
      if (dsk_cli_parse_int("bench", "--max-t", v, 1, 1 << 30, &o.max_T) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--t", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--t needs a value");
      if (dsk_cli_parse_int("bench", "--t", v, 1, 1 << 30, &o.only_T) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--heads", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--heads needs a value");
      if (dsk_cli_parse_int("bench", "--heads", v, 1, 128, &o.only_H) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--mma-tflops", &v)) != 0) {
      char *end = NULL;
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--mma-tflops needs a value");
      o.mma_tflops = strtod(v, &end);
      if (!end || *end || !(o.mma_tflops > 0))
        return dsk_cli_usage_error("bench", k_usage, "--mma-tflops: '%s' is not a positive number", v);
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--seed", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("bench", k_usage, "--seed needs a value");
      if (dsk_cli_parse_u64("bench", "--seed", v, &o.seed) != 0) return DSK_CLI_EXIT_USAGE;
    } else {
      return dsk_cli_usage_error("bench", k_usage, "unknown option '%s'", a);
    }
  }
  dsk_ctx *ctx = NULL;
  if (dsk_cli_ctx_create("bench", device, backend, &ctx) != DSK_STATUS_OK) return DSK_CLI_EXIT_FAIL;
  int rc = dsk_bench_sparse_mla(ctx, &o, stdout);
  dsk_ctx_destroy(ctx);
  return rc ? DSK_CLI_EXIT_FAIL : DSK_CLI_EXIT_OK;
}
