/* dsk.c - the `dsk` command-line tool: subcommand dispatch and the helpers
 * the subcommands share. Each subcommand lives in tools/cmd_<name>.c. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const k_usage =
    "usage: dsk <command> [options]\n"
    "       dsk --version | --help\n"
    "\n"
    "commands:\n"
    "  info    version, build options, CPU features, every backend and whether it\n"
    "          can run here (and why not), and the backend `auto` would choose\n"
    "  check   run the backend-vs-reference harness on a backend (exit 0 = all passed)\n"
    "  demo    the main job: DSv4-Flash and GLM-5.1 decode steps on realistic\n"
    "          shapes, checked against the reference, with timings\n"
    "  bench   benchmarks (CSV-like rows)\n"
    "  tune    tune a model's keys into this device's tactic cache (--list, --gc)\n"
    "  help    `dsk help <command>` = `dsk <command> --help`\n"
    "\n"
    "Run `dsk <command> --help` for the options of a command. Environment\n"
    "variables (DSK_BACKEND, DSK_LOG_LEVEL, DSK_NUM_THREADS, ...) are listed in\n"
    "docs/environment.md.\n";

typedef struct cli_cmd {
  const char *name;
  int (*fn)(int argc, char **argv);
} cli_cmd;

static const cli_cmd k_cmds[] = {
    {"info", dsk_cmd_info},
    {"check", dsk_cmd_check},
    {"demo", dsk_cmd_demo},
    {"bench", dsk_cmd_bench},
    {"tune", dsk_cmd_tune},
};

static const cli_cmd *find_cmd(const char *name) {
  for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
    if (strcmp(k_cmds[i].name, name) == 0) return &k_cmds[i];
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(k_usage, stderr);
    return DSK_CLI_EXIT_USAGE;
  }
  const char *a = argv[1];
  if (dsk_cli_is_help(a)) {
    fputs(k_usage, stdout);
    return DSK_CLI_EXIT_OK;
  }
  if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
    printf("dsk %s\n", dsk_version());
    return DSK_CLI_EXIT_OK;
  }
  if (strcmp(a, "help") == 0) {
    if (argc < 3) {
      fputs(k_usage, stdout);
      return DSK_CLI_EXIT_OK;
    }
    const cli_cmd *c = find_cmd(argv[2]);
    if (!c) {
      fprintf(stderr, "dsk: unknown command '%s'\n\n", argv[2]);
      fputs(k_usage, stderr);
      return DSK_CLI_EXIT_USAGE;
    }
    char help[] = "--help";
    char *sub[3] = {argv[2], help, NULL};
    return c->fn(2, sub);
  }
  const cli_cmd *c = find_cmd(a);
  if (!c) {
    fprintf(stderr, "dsk: unknown %s '%s'\n\n", a[0] == '-' ? "option" : "command", a);
    fputs(k_usage, stderr);
    return DSK_CLI_EXIT_USAGE;
  }
  return c->fn(argc - 1, argv + 1);
}

/* ------------------------------------------------------------------ helpers */

int dsk_cli_is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

int dsk_cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *val = a + n + 1;
    return 1;
  }
  if (a[n] != 0) return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "dsk: option %s needs a value\n", name);
    return -1;
  }
  *i += 1;
  *val = argv[*i];
  return 1;
}

int dsk_cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (!s || !*s || *s == '-' || *s == '+') goto bad;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end != 0) goto bad;
  *out = (uint64_t)v;
  return 0;
bad:
  fprintf(stderr, "dsk %s: %s: '%s' is not a non-negative integer\n", cmd, opt, s ? s : "");
  return -1;
}

int dsk_cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = (s && *s) ? strtol(s, &end, 10) : 0;
  if (!s || !*s || errno || *end != 0 || v < lo || v > hi) {
    fprintf(stderr, "dsk %s: %s: '%s' is not an integer in %d..%d\n", cmd, opt, s ? s : "", lo, hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int dsk_cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "dsk %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputs("\n\n", stderr);
  va_end(ap);
  fputs(usage, stderr);
  return DSK_CLI_EXIT_USAGE;
}

int dsk_cli_report(const char *cmd, const char *what, dsk_status st) {
  const char *detail = dsk_last_error();
  fprintf(stderr, "dsk %s: %s: %s: %s\n", cmd, what, dsk_status_name(st),
          detail && *detail ? detail : dsk_status_str(st));
  return DSK_CLI_EXIT_FAIL;
}

dsk_status dsk_cli_ctx_create(const char *cmd, const char *device, const char *backend, dsk_ctx **ctx) {
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = device ? device : "auto";
  o.backend = backend;
  *ctx = NULL;
  dsk_status st = dsk_ctx_create(ctx, &o);
  if (st != DSK_STATUS_OK) {
    char what[128];
    snprintf(what, sizeof what, "cannot create a context on device %s%s%s", o.device,
             backend ? " with backend " : "", backend ? backend : "");
    dsk_cli_report(cmd, what, st);
  }
  return st;
}

void dsk_cli_print_ctx(FILE *f, const char *prefix, const dsk_ctx *ctx) {
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (dsk_ctx_get_info(ctx, &info) != DSK_STATUS_OK) {
    fprintf(f, "%s(no context information: %s)\n", prefix, dsk_last_error());
    return;
  }
  fprintf(f, "%sbackend %s on %s", prefix, info.backend, info.device_name[0] ? info.device_name : "?");
  if (info.is_cuda)
    fprintf(f, " (cuda:%d, CC %d.%d, %d SMs, %lld B opt-in shared memory per block%s)", info.device_index,
            info.cc_major, info.cc_minor, info.sm_count, (long long)info.smem_optin_bytes,
            info.test_as_sm120 ? ", DSK_TEST_AS_SM120: SM120 tables, speed not representative" : "");
  fprintf(f, ": %s\n", info.reason);
}
