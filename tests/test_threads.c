/* test_threads.c - "different contexts are independent"
 * (spec/api-conventions.md §1): several threads, each with its own context
 * on DSK_TEST_DEVICE (default the CPU), run the quick backend-vs-reference
 * harness at the same time (every op: cache writer and reader, slot lists,
 * sparse decode, mHC, indexer, MoE), each against its own cpu-ref context.
 * Every check must pass in every thread, and the threads must count the
 * same checks: no op may depend on state another context changes (lookup tables, warning registry,
 * autotune tables, OpenMP pools). The harness's own per-case logs go to
 * temporary files. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { kThreads = 2 };

typedef struct job {
  const char *device;
  int rc, created;
  tu_counts c;
} job;

static void *run_job(void *p) {
  job *j = (job *)p;
  dsk_ctx *ctx = NULL;
  dsk_ctx_opts o;
  dsk_ctx_opts_init(&o);
  o.device = j->device;
  o.num_threads = 1; /* the CPU backend: one OpenMP thread per context, so the contexts run side by side */
  if (dsk_ctx_create(&ctx, &o) != DSK_STATUS_OK) {
    j->rc = 1;
    return NULL;
  }
  j->created = 1;
  FILE *log = tmpfile();
  dsk_check_opts co;
  memset(&co, 0, sizeof co);
  co.quick = 1;
  co.seed = 11;
  co.log = log;
  j->rc = dsk_check_run(ctx, &co, &j->c);
  if (log) fclose(log);
  dsk_ctx_destroy(ctx);
  return NULL;
}

int main(void) {
  tu_counts counts = {0, 0};
  const char *dev = getenv("DSK_TEST_DEVICE");
  if (!dev || !dev[0]) dev = "cpu";
  pthread_t th[kThreads];
  job jobs[kThreads];
  int started[kThreads];
  for (int i = 0; i < kThreads; i++) {
    memset(&jobs[i], 0, sizeof jobs[i]);
    jobs[i].device = dev;
    started[i] = pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0;
    TU_CHECK(&counts, started[i], "pthread_create %d", i);
  }
  for (int i = 0; i < kThreads; i++) {
    if (!started[i]) continue;
    pthread_join(th[i], NULL);
    TU_CHECK(&counts, jobs[i].created && jobs[i].rc == 0 && jobs[i].c.failed == 0,
             "thread %d on %s: created %d, rc %d, %d passed, %d failed", i, dev, jobs[i].created, jobs[i].rc,
             jobs[i].c.passed, jobs[i].c.failed);
    TU_CHECK(&counts, jobs[i].c.passed > 100 && jobs[i].c.passed == jobs[0].c.passed,
             "thread %d: %d checks passed, thread 0 %d", i, jobs[i].c.passed, jobs[0].c.passed);
    printf("thread %d: %d checks passed, %d failed\n", i, jobs[i].c.passed, jobs[i].c.failed);
  }
  return tu_finish("test_threads", &counts);
}
