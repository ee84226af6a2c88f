/* cmd_info.c - `dsk info`: version, build options, CPU features, every
 * backend of the registry with whether it can run here and why, and the
 * backend that device "auto" chooses. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/core.h" /* dsk__cpu_features, dsk__cpu_count: no public equivalent */

extern char **environ;

static const char *const k_usage =
    "usage: dsk info [--device D]\n"
    "\n"
    "Prints the version, the build options, the CPU's features, every backend of\n"
    "this build with whether it can run on the CPU and on cuda:0 (and the reason in\n"
    "words either way), and the backend a context on device `auto` chooses.\n"
    "\n"
    "options:\n"
    "  --device D   also ask every backend about device D (cpu, cuda:N, auto), and\n"
    "               show the backend a context on D chooses instead of `auto`\n"
    "  -h, --help   this text\n"
    "\n"
    "The chosen backend follows DSK_BACKEND when it is set (docs/environment.md).\n"
    "Exit status: 0, or 1 when no context can be created on the device.\n";

static void query_row(const char *name, const char *device) {
  dsk_backend_info bi;
  memset(&bi, 0, sizeof bi);
  bi.struct_size = sizeof bi;
  int avail = 0;
  char reason[512];
  reason[0] = 0;
  dsk_status st = dsk_backend_query(name, device, &bi, &avail, reason, sizeof reason);
  if (st != DSK_STATUS_OK) {
    printf("    %-7s error: %s: %s\n", device, dsk_status_name(st), dsk_last_error());
    dsk_clear_error();
    return;
  }
  printf("    %-7s %-3s  %s\n", device, avail ? "yes" : "no", reason);
}

int dsk_cmd_info(int argc, char **argv) {
  const char *device = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    int r;
    if (dsk_cli_is_help(argv[i])) {
      fputs(k_usage, stdout);
      return DSK_CLI_EXIT_OK;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("info", k_usage, "--device needs a value");
      device = v;
    } else {
      return dsk_cli_usage_error("info", k_usage, "unknown option '%s'", argv[i]);
    }
  }

  printf("dsk %s\n", dsk_version());
  printf("build: %s\n", dsk_build_info());
  const char *feat = dsk__cpu_features();
#if defined(__x86_64__)
  const char *arch = "x86-64";
#elif defined(__aarch64__)
  const char *arch = "aarch64";
#else
  const char *arch = "other";
#endif
#if defined(__x86_64__)
  const char *none = "(none of avx avx2 fma f16c avx512f/bw/vl)";
#else
  const char *none = "(not detected on this architecture; cpu-ref serves it)";
#endif
  printf("cpu: %s, %d logical cores; features: %s\n", arch, dsk__cpu_count(), feat[0] ? feat : none);

  int n = dsk_backend_count();
  int any_cuda = 0;
  printf("\nbackends in this build (%d), can each run on the device?\n", n);
  for (int i = 0; i < n; i++) {
    const char *name = dsk_backend_name(i);
    dsk_backend_info bi;
    memset(&bi, 0, sizeof bi);
    bi.struct_size = sizeof bi;
    int avail = 0;
    dsk_backend_query(name, "cpu", &bi, &avail, NULL, 0);
    dsk_clear_error();
    if (bi.is_cuda) any_cuda = 1;
    printf("  %-12s %s\n", name, bi.description);
    query_row(name, "cpu");
    query_row(name, "cuda:0");
    if (device && strcmp(device, "cpu") != 0 && strcmp(device, "cuda:0") != 0) query_row(name, device);
  }
  if (!any_cuda)
    printf("  (no CUDA backend: this build did not find nvcc, or was configured with DSK_CUDA=OFF)\n");

  const char *dev = device ? device : "auto";
  dsk_ctx *ctx = NULL;
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = dev;
  printf("\ndevice %s:\n", dev);
  dsk_status st = dsk_ctx_create(&ctx, &o);
  int rc = DSK_CLI_EXIT_OK;
  if (st == DSK_STATUS_OK) {
    dsk_cli_print_ctx(stdout, "  ", ctx);
    dsk_ctx_destroy(ctx);
  } else {
    printf("  no context: %s: %s\n", dsk_status_name(st), dsk_last_error());
    rc = DSK_CLI_EXIT_FAIL;
  }

  int header = 0;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "DSK_", 4) != 0) continue;
    if (!header) printf("\nenvironment (docs/environment.md):\n");
    header = 1;
    printf("  %s\n", *e);
  }
  return rc;
}
