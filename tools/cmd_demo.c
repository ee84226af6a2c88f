/* cmd_demo.c - `dsk demo`: the main job (tests/harness/demo.c): DSv4-Flash
 * and GLM-5.1 decode steps on realistic shapes, checked against the
 * reference, one row per case. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "harness.h"

static const char *const k_usage =
    "usage: dsk demo [--device D] [--backend B] [--reps N] [--quick] [--seed N]\n"
    "\n"
    "The main job: one DeepSeek-V4-Flash decode step (64 heads, Format B cache,\n"
    "sliding window 128 + C4A top-512 over a 32K-token context, 16 query tokens)\n"
    "and one GLM-5.1 step (64 heads, Format A cache, top-2048). The caches are\n"
    "written with dsk_kv_write, the slot lists come from dsk_slot_list_build, the\n"
    "decode runs on the chosen backend and is checked against the reference. More\n"
    "rows, each checked against the CPU reference: one DSv4-Flash mHC sublayer as a\n"
    "model runs it (dsk_mhc_post_prenorm + dsk_mhc_pre, D 4096), the DSv4-Flash\n"
    "lightning indexer (scores + top-512), and one MoE layer (dsk_moe_run) each of\n"
    "DSv4-Flash, GLM-5.1 and DSv4-Pro (on a GPU the production sizes with 16 local\n"
    "experts, on the CPU reduced ones). One row per case: model, backend, T, H,\n"
    "widths, median_us, GB/s, TFLOPS, rel_l2, max_abs.\n"
    "\n"
    "options:\n"
    "  --device D    cpu, cuda:N or auto (default: auto = cuda:0 when a CUDA\n"
    "                backend serves it, else the CPU)\n"
    "  --backend B   force a backend by name (see `dsk info`)\n"
    "  --reps N      timed repetitions, the median is reported (default: the demo's)\n"
    "  --quick       smaller contexts (used by the tests)\n"
    "  --seed N      random seed (default 1)\n"
    "  -h, --help    this text\n"
    "\n"
    "Exit status: 0 every row is within the spec's error bound, 1 otherwise or when\n"
    "no context could be created, 2 usage error.\n";

int dsk_cmd_demo(int argc, char **argv) {
  const char *device = "auto", *backend = NULL;
  dsk_demo_opts o;
  memset(&o, 0, sizeof o);
  o.seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int r;
    if (dsk_cli_is_help(a)) {
      fputs(k_usage, stdout);
      return DSK_CLI_EXIT_OK;
    } else if (strcmp(a, "--quick") == 0) {
      o.quick = 1;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("demo", k_usage, "--device needs a value");
      device = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("demo", k_usage, "--backend needs a value");
      backend = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--reps", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("demo", k_usage, "--reps needs a value");
      if (dsk_cli_parse_int("demo", "--reps", v, 1, 1000000, &o.reps) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--seed", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("demo", k_usage, "--seed needs a value");
      if (dsk_cli_parse_u64("demo", "--seed", v, &o.seed) != 0) return DSK_CLI_EXIT_USAGE;
    } else {
      return dsk_cli_usage_error("demo", k_usage, "unknown option '%s'", a);
    }
  }

  dsk_ctx *ctx = NULL;
  if (dsk_cli_ctx_create("demo", device, backend, &ctx) != DSK_STATUS_OK) return DSK_CLI_EXIT_FAIL;
  printf("demo: dsk %s; %s\n", dsk_version(), dsk_build_info());
  dsk_cli_print_ctx(stdout, "demo: ", ctx);
  fflush(stdout);
  int rc = dsk_demo_run(ctx, &o, stdout);
  dsk_ctx_destroy(ctx);
  fflush(stdout);
  if (rc != 0) {
    fprintf(stderr, "dsk demo: at least one case failed (see the rows above)\n");
    return DSK_CLI_EXIT_FAIL;
  }
  return DSK_CLI_EXIT_OK;
}
