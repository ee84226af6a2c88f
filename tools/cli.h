/* cli.h - the `dsk` command-line tool: one function per subcommand and the
 * small helpers they share (tools/dsk.c).
 *
 * Every subcommand gets the arguments after the word `dsk`: argv[0] is the
 * subcommand's own name ("check"), its options follow. It returns the
 * process exit code: 0 success, 1 the work failed (a check failed, a context
 * could not be created), 2 a usage error (unknown option, bad value). */
#ifndef DSK_CLI_H
#define DSK_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "dsk.h"

#define DSK_CLI_EXIT_OK 0
#define DSK_CLI_EXIT_FAIL 1
#define DSK_CLI_EXIT_USAGE 2

int dsk_cmd_info(int argc, char **argv);  /* cmd_info.c */
int dsk_cmd_check(int argc, char **argv); /* cmd_check.c */
int dsk_cmd_demo(int argc, char **argv);  /* cmd_demo.c */
int dsk_cmd_bench(int argc, char **argv); /* cmd_bench.c */
int dsk_cmd_tune(int argc, char **argv);  /* cmd_tune.c */

/* ---- helpers (dsk.c) */

/* 1 if a is "-h" or "--help". */
int dsk_cli_is_help(const char *a);

/* Option with a value, given as "--name VALUE" or "--name=VALUE".
 * Returns 0 if argv[*i] is not option `name`; 1 if it is, with *val set
 * (and *i advanced past a separate value); -1 if it is but the value is
 * missing (an error line has been printed to stderr). */
int dsk_cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val);

/* Strict number parsing: the whole string must be a number in range.
 * Return 0 on success, -1 after printing "dsk CMD: OPT: ..." to stderr. */
int dsk_cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);
int dsk_cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out);

/* Prints "dsk CMD: " + the formatted message, then the usage text, to
 * stderr; returns DSK_CLI_EXIT_USAGE. */
int dsk_cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prints "dsk CMD: WHAT: DSK_STATUS_X: <dsk_last_error() or status sentence>"
 * to stderr; returns DSK_CLI_EXIT_FAIL. */
int dsk_cli_report(const char *cmd, const char *what, dsk_status st);

/* Creates a context for `device` (NULL = "auto") and `backend` (NULL = the
 * DSK_BACKEND variable, else automatic); prints the error and returns
 * non-OK on failure. */
dsk_status dsk_cli_ctx_create(const char *cmd, const char *device, const char *backend, dsk_ctx **ctx);

/* One line "backend B on DEVICE: reason" describing a context. */
void dsk_cli_print_ctx(FILE *f, const char *prefix, const dsk_ctx *ctx);

#endif
