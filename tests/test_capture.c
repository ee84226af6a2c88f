/* test_capture.c - the ops are capture-safe (api-conventions.md §2): a CUDA
 * graph captured around dsk_moe_run with the shared expert on aux_stream
 * (two streams, forked and joined by the library's events) runs and gives
 * the same bits as the eager call. The MoE check's forwards (quick shapes)
 * run a third time under capture through the harness's hooks
 * (dsk_check_capture, harness.h); this file owns the CUDA runtime calls.
 * Capture mode: cudaStreamCaptureModeGlobal, the strictest (any unsafe API
 * call in the library during the capture fails it).
 * Needs a CUDA device: DSK_TEST_DEVICE=cuda:N (or auto finding one); on a
 * CPU context, or in a build without the CUDA backend, it reports that and
 * passes with nothing checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#if defined(DSK_HAVE_CUDA)
#include <cuda_runtime_api.h>

static tu_counts counts;

static int cap_begin(void *stream, void *user) {
  (void)user;
  cudaError_t e = cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeGlobal);
  if (e != cudaSuccess) fprintf(stderr, "test_capture: cudaStreamBeginCapture: %s\n", cudaGetErrorString(e));
  return e != cudaSuccess;
}

static int cap_end_run(void *stream, void *user) {
  (void)user;
  cudaStream_t s = (cudaStream_t)stream;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  const char *what = "cudaStreamEndCapture";
  if (e == cudaSuccess) {
    size_t nodes = 0;
    cudaGraphGetNodes(g, NULL, &nodes);
    if (nodes == 0) {
      fprintf(stderr, "test_capture: the captured graph is empty\n");
      cudaGraphDestroy(g);
      return 1;
    }
    what = "cudaGraphInstantiate";
    e = cudaGraphInstantiate(&ge, g, 0);
  }
  if (e == cudaSuccess) {
    what = "cudaGraphLaunch";
    e = cudaGraphLaunch(ge, s);
  }
  if (e == cudaSuccess) {
    what = "cudaStreamSynchronize";
    e = cudaStreamSynchronize(s);
  }
  if (e != cudaSuccess) fprintf(stderr, "test_capture: %s: %s\n", what, cudaGetErrorString(e));
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  return e != cudaSuccess;
}

int main(void) {
  dsk_ctx *ctx = tu_ctx(NULL);
  if (!ctx) {
    printf("test_capture: no context: %s\n", dsk_last_error());
    return 1;
  }
  dsk_ctx_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  dsk_ctx_get_info(ctx, &info);
  if (!info.is_cuda) {
    printf("test_capture: %s is not a CUDA context: nothing to capture (set DSK_TEST_DEVICE=cuda:0)\n",
           info.backend);
    dsk_ctx_destroy(ctx);
    return 0;
  }
  dsk_check_capture_hooks hooks = {cap_begin, cap_end_run, NULL, 0};
  dsk_check_capture = &hooks;
  dsk_check_opts o;
  memset(&o, 0, sizeof o);
  o.quick = 1;
  o.seed = 11;
  o.only = "moe";
  FILE *log = tmpfile();
  o.log = log ? log : stdout;
  dsk_check_moe(ctx, &o, &counts);
  dsk_check_capture = NULL;
  /* the lines of the capture runs, for the test's output; every aux_stream
   * run must have had its captured twin */
  int64_t aux_runs = 0;
  if (log) {
    rewind(log);
    char line[512];
    while (fgets(line, sizeof line, log)) {
      if (strstr(line, "graph capture")) fputs(line, stdout);
      aux_runs += strstr(line, "shared expert on aux_stream") != NULL;
    }
    fclose(log);
  }
  TU_CHECK(&counts, hooks.runs > 0 && hooks.runs == aux_runs, "%lld forwards ran under capture, %lld with aux_stream",
           (long long)hooks.runs, (long long)aux_runs);
  dsk_ctx_destroy(ctx);
  return tu_finish("test_capture", &counts);
}
#else
int main(void) {
  printf("test_capture: built without the CUDA backend: nothing to capture\n");
  return 0;
}
#endif
