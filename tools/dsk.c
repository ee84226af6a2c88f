/* STUB: to be replaced (CLI). */
#include <stdio.h>
#include "dsk.h"
int main(void) { printf("dsk %s\n", dsk_version()); return 0; }
