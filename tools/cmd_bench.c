/* cmd_bench.c - `dsk bench`. STUB: the lead replaces this file. */
#include <stdio.h>

#include "cli.h"

int dsk_cmd_bench(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "dsk bench: not implemented yet\n");
  return DSK_CLI_EXIT_USAGE;
}
