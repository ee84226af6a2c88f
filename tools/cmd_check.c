/* cmd_check.c - `dsk check`: the backend-vs-reference harness
 * (tests/harness) on the backend a context chooses. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "harness.h"

static const char *const k_usage =
    "usage: dsk check [--device D] [--backend B] [--quick] [--seed N]\n"
    "                 [--only kv|slots|sparse_mla|mhc|indexer|moe] [--verbose]\n"
    "\n"
    "Runs every op of the backend-vs-reference harness on the backend of a new\n"
    "context and compares its results with the CPU reference (and, for sparse\n"
    "decode, an independent fp64 oracle). Prints one line per failed check (every\n"
    "check with --verbose) and ends with `check: N passed, N failed`.\n"
    "\n"
    "options:\n"
    "  --device D    cpu, cuda:N or auto (default: auto = cuda:0 when a CUDA\n"
    "                backend serves it, else the CPU)\n"
    "  --backend B   force a backend by name (see `dsk info`); default: the\n"
    "                DSK_BACKEND variable, else automatic\n"
    "  --quick       reduced shapes (what `make test` and the aarch64 CI step run)\n"
    "  --seed N      random seed (default 1); the same seed gives the same cases\n"
    "  --only OP     run only kv, slots, sparse_mla, mhc, indexer or moe\n"
    "  --verbose     print every case, not only failures\n"
    "  -h, --help    this text\n"
    "\n"
    "Exit status: 0 all checks passed, 1 a check failed or no context could be\n"
    "created, 2 usage error.\n";

int dsk_cmd_check(int argc, char **argv) {
  const char *device = "auto", *backend = NULL;
  dsk_check_opts o;
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
    } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
      o.verbose = 1;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("check", k_usage, "--device needs a value");
      device = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("check", k_usage, "--backend needs a value");
      backend = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--seed", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("check", k_usage, "--seed needs a value");
      if (dsk_cli_parse_u64("check", "--seed", v, &o.seed) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--only", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("check", k_usage, "--only needs a value");
      if (strcmp(v, "kv") != 0 && strcmp(v, "slots") != 0 && strcmp(v, "sparse_mla") != 0 && strcmp(v, "mhc") != 0 &&
          strcmp(v, "indexer") != 0 && strcmp(v, "moe") != 0)
        return dsk_cli_usage_error("check", k_usage,
                                   "--only '%s': expected kv, slots, sparse_mla, mhc, indexer or moe", v);
      o.only = v;
    } else {
      return dsk_cli_usage_error("check", k_usage, "unknown option '%s'", a);
    }
  }

  dsk_ctx *ctx = NULL;
  if (dsk_cli_ctx_create("check", device, backend, &ctx) != DSK_STATUS_OK) return DSK_CLI_EXIT_FAIL;
  printf("check: dsk %s; seed %llu; %s shapes; ops: %s\n", dsk_version(), (unsigned long long)o.seed,
         o.quick ? "reduced" : "full", o.only ? o.only : "all");
  dsk_cli_print_ctx(stdout, "check: ", ctx);
  fflush(stdout);

  o.log = stdout;
  tu_counts counts = {0, 0};
  int rc = dsk_check_run(ctx, &o, &counts);
  dsk_ctx_destroy(ctx);
  fflush(stdout);
  printf("check: %d passed, %d failed\n", counts.passed, counts.failed);
  if (rc != 0 && counts.failed == 0)
    fprintf(stderr, "dsk check: the harness reported a failure that no check counted\n");
  return (rc == 0 && counts.failed == 0) ? DSK_CLI_EXIT_OK : DSK_CLI_EXIT_FAIL;
}
