/* cuda_device.cu - device discovery, capability checks with reasons,
 * per-context set-up and the memory services of the CUDA backends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

/* A kernel whose attributes tell whether this build has a cubin for the
 * device (cudaFuncGetAttributes fails with cudaErrorInvalidDeviceFunction
 * or cudaErrorNoKernelImageForDevice otherwise). */
__global__ void dsk_cuda_probe_kernel(int *p) {
  if (p) *p = 1;
}

#define DSK_STR2_(...) #__VA_ARGS__
#define DSK_STR_(...) DSK_STR2_(__VA_ARGS__)
#ifdef __CUDA_ARCH_LIST__
static const char *k_arch_list = DSK_STR_(__CUDA_ARCH_LIST__);
#else
static const char *k_arch_list = "unknown";
#endif

typedef struct probe_info {
  int ok;
  cudaDeviceProp prop;
  int driver, runtime;
  int has_cubin;
} probe_info;

static int probe_common(int device, probe_info *pi, const char *name, char *reason, size_t len) {
  memset(pi, 0, sizeof *pi);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    snprintf(reason, len, "%s: no usable CUDA device: %s", name, cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  if (device < 0 || device >= count) {
    snprintf(reason, len, "%s: CUDA device %d does not exist (%d device%s)", name, device, count,
             count == 1 ? "" : "s");
    return 0;
  }
  cudaDriverGetVersion(&pi->driver);
  cudaRuntimeGetVersion(&pi->runtime);
  if (pi->driver < pi->runtime) {
    snprintf(reason, len, "%s: CUDA driver %d.%d is older than this build's runtime %d.%d", name,
             pi->driver / 1000, (pi->driver % 1000) / 10, pi->runtime / 1000, (pi->runtime % 1000) / 10);
    return 0;
  }
  e = cudaGetDeviceProperties(&pi->prop, device);
  if (e != cudaSuccess) {
    snprintf(reason, len, "%s: cudaGetDeviceProperties(%d) failed: %s", name, device, cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  cudaFuncAttributes attr;
  pi->has_cubin = cudaFuncGetAttributes(&attr, dsk_cuda_probe_kernel) == cudaSuccess;
  cudaGetLastError();
  cudaSetDevice(prev);
  pi->ok = 1;
  return 1;
}

extern "C" int dsk__cuda_probe_sm90(int device, const dsk_env *env, char *reason, size_t len) {
  probe_info pi;
  if (!probe_common(device, &pi, "cuda-sm90", reason, len)) return 0;
  const cudaDeviceProp *p = &pi.prop;
  if (!(p->major == 9 && p->minor == 0)) {
    snprintf(reason, len, "cuda-sm90: device %d (%s) has compute capability %d.%d; this backend needs 9.0", device,
             p->name, p->major, p->minor);
    return 0;
  }
  if (!pi.has_cubin) {
    snprintf(reason, len, "cuda-sm90: device %d is CC 9.0 but this library has no sm_90 cubins (built: %s)", device,
             k_arch_list);
    return 0;
  }
  snprintf(reason, len, "cuda-sm90: device %d (%s, CC 9.0, %d SMs, driver %d.%d): sm_90 cubins present", device,
           p->name, p->multiProcessorCount, pi.driver / 1000, (pi.driver % 1000) / 10);
  return 1;
}

extern "C" int dsk__cuda_probe_sm120(int device, const dsk_env *env, char *reason, size_t len) {
  probe_info pi;
  if (!probe_common(device, &pi, "cuda-sm120", reason, len)) return 0;
  const cudaDeviceProp *p = &pi.prop;
  if (p->major == 12 && (p->minor == 0 || p->minor == 1)) {
    if (!pi.has_cubin) {
      snprintf(reason, len, "cuda-sm120: device %d is CC 12.%d but this library was built without sm_12%da cubins (built: %s)",
               device, p->minor, p->minor, k_arch_list);
      return 0;
    }
    snprintf(reason, len, "cuda-sm120: device %d (%s, CC 12.%d, %d SMs, driver %d.%d): sm_12%da cubins present", device,
             p->name, p->minor, p->multiProcessorCount, pi.driver / 1000, (pi.driver % 1000) / 10, p->minor);
    return 1;
  }
  if (env && env->test_as_sm120 && p->major == 9 && p->minor == 0 && pi.has_cubin) {
    snprintf(reason, len,
             "cuda-sm120: DSK_TEST_AS_SM120=1: the cuda-sm120 table runs on device %d (%s, CC 9.0) with shared memory "
             "capped at %d B; SM120 speed is not measured",
             device, p->name, DSK_SM120_SMEM_LIMIT);
    return 1;
  }
  snprintf(reason, len, "cuda-sm120: device %d (%s) has compute capability %d.%d; this backend needs 12.0 or 12.1", device,
           p->name, p->major, p->minor);
  return 0;
}

static dsk_status init_common(dsk_ctx *ctx, int device, int sm120) {
  DSK_CUDA_TRY("dsk_ctx_create", cudaSetDevice(device));
  cudaDeviceProp p;
  DSK_CUDA_TRY("dsk_ctx_create", cudaGetDeviceProperties(&p, device));
  dsk_cuda_state *st = (dsk_cuda_state *)calloc(1, sizeof *st);
  if (!st) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_ctx_create: out of host memory");
  st->device = device;
  st->sm120_table = sm120;
  st->smem_optin = (int64_t)p.sharedMemPerBlockOptin;
  if (sm120 && st->smem_optin > DSK_SM120_SMEM_LIMIT) st->smem_optin = DSK_SM120_SMEM_LIMIT;
  st->smem_per_sm = (int64_t)p.sharedMemPerMultiprocessor;
  if (sm120 && st->smem_per_sm > DSK_SM120_SMEM_PER_SM) st->smem_per_sm = DSK_SM120_SMEM_PER_SM;
  dsk_status ds = dsk__cuda_sparse_mla_setup(st);
  if (ds != DSK_STATUS_OK) {
    free(st);
    return ds;
  }
  cudaStream_t s;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(st);
    return dsk__fail(DSK_STATUS_DEVICE, "dsk_ctx_create: cudaStreamCreate failed: %s", cudaGetErrorString(e));
  }
  ctx->default_stream = (void *)s;
  ctx->backend_state = st;
  dsk_ctx_info *in = &ctx->info;
  in->device_index = device;
  snprintf(in->device_name, sizeof in->device_name, "%s", p.name);
  in->cc_major = p.major;
  in->cc_minor = p.minor;
  in->sm_count = p.multiProcessorCount;
  in->smem_optin_bytes = st->smem_optin;
  in->l2_bytes = p.l2CacheSize;
  in->global_mem_bytes = (int64_t)p.totalGlobalMem;
  cudaDriverGetVersion(&in->driver_version);
  cudaRuntimeGetVersion(&in->runtime_version);
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_init_sm90(dsk_ctx *ctx, int device) { return init_common(ctx, device, 0); }
extern "C" dsk_status dsk__cuda_init_sm120(dsk_ctx *ctx, int device) { return init_common(ctx, device, 1); }

extern "C" void dsk__cuda_fini(dsk_ctx *ctx) {
  const dsk_cuda_state *st = dsk__cuda_state(ctx);
  if (st) cudaSetDevice(st->device);
  if (ctx->default_stream) {
    cudaStreamSynchronize((cudaStream_t)ctx->default_stream);
    cudaStreamDestroy((cudaStream_t)ctx->default_stream);
  }
  free(ctx->backend_state);
  ctx->backend_state = NULL;
  ctx->default_stream = NULL;
}

#define SET_DEVICE(what) DSK_CUDA_TRY(what, cudaSetDevice(dsk__cuda_state(ctx)->device))

extern "C" dsk_status dsk__cuda_mem_alloc(dsk_ctx *ctx, void **ptr, size_t bytes) {
  SET_DEVICE("dsk_mem_alloc");
  cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    *ptr = NULL;
    return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_mem_alloc: cudaMalloc of %zu bytes failed", bytes);
  }
  DSK_CUDA_TRY("dsk_mem_alloc", e);
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mem_free(dsk_ctx *ctx, void *ptr) {
  SET_DEVICE("dsk_mem_free");
  DSK_CUDA_TRY("dsk_mem_free", cudaFree(ptr));
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mem_upload(dsk_ctx *ctx, void *dst, const void *src, size_t bytes) {
  SET_DEVICE("dsk_mem_upload");
  cudaStream_t s = dsk__cuda_stream(ctx, NULL);
  DSK_CUDA_TRY("dsk_mem_upload", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  DSK_CUDA_TRY("dsk_mem_upload", cudaStreamSynchronize(s));
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mem_download(dsk_ctx *ctx, void *dst, const void *src, size_t bytes) {
  SET_DEVICE("dsk_mem_download");
  cudaStream_t s = dsk__cuda_stream(ctx, NULL);
  DSK_CUDA_TRY("dsk_mem_download", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  DSK_CUDA_TRY("dsk_mem_download", cudaStreamSynchronize(s));
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_mem_set(dsk_ctx *ctx, void *dst, int byte, size_t bytes) {
  SET_DEVICE("dsk_mem_set");
  cudaStream_t s = dsk__cuda_stream(ctx, NULL);
  DSK_CUDA_TRY("dsk_mem_set", cudaMemsetAsync(dst, byte, bytes, s));
  DSK_CUDA_TRY("dsk_mem_set", cudaStreamSynchronize(s));
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_synchronize(dsk_ctx *ctx, void *stream) {
  SET_DEVICE("dsk_ctx_synchronize");
  DSK_CUDA_TRY("dsk_ctx_synchronize", cudaStreamSynchronize(dsk__cuda_stream(ctx, stream)));
  return DSK_STATUS_OK;
}

/* A10: no cudaSetDevice and no synchronization (both would be illegal or
 * disruptive during a capture); cudaStreamIsCapturing is a legal query on a
 * capturing stream. An error (the status cannot be read) answers 1, so the
 * tuner stays away from the device, and is cleared so that the next launch
 * check does not report it. */
extern "C" int dsk__cuda_stream_capturing(dsk_ctx *ctx, void *stream) {
  if (!ctx) return 0;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(dsk__cuda_stream(ctx, stream), &cs);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return cs != cudaStreamCaptureStatusNone;
}

extern "C" dsk_status dsk__cuda_stream_join(dsk_ctx *ctx, void *waiter, void *signaler) {
  SET_DEVICE("stream_join");
  cudaEvent_t ev;
  DSK_CUDA_TRY("stream_join", cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t e = cudaEventRecord(ev, dsk__cuda_stream(ctx, signaler));
  if (e == cudaSuccess) e = cudaStreamWaitEvent(dsk__cuda_stream(ctx, waiter), ev, 0);
  /* the event's resources go once its recorded work completes */
  const cudaError_t d = cudaEventDestroy(ev);
  DSK_CUDA_TRY("stream_join (cudaEventRecord / cudaStreamWaitEvent)", e);
  DSK_CUDA_TRY("stream_join", d);
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_stream_create(dsk_ctx *ctx, void **stream) {
  SET_DEVICE("dsk_stream_create");
  cudaStream_t s;
  DSK_CUDA_TRY("dsk_stream_create", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *stream = (void *)s;
  return DSK_STATUS_OK;
}

extern "C" dsk_status dsk__cuda_stream_destroy(dsk_ctx *ctx, void *stream) {
  SET_DEVICE("dsk_stream_destroy");
  DSK_CUDA_TRY("dsk_stream_destroy", cudaStreamDestroy((cudaStream_t)stream));
  return DSK_STATUS_OK;
}
