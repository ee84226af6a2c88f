/* latency.cu - `dsk-latency`: the fixed costs that small-T calls pay in the
 * benchmark method of dsk_bench_run (L2 flushed by a memset, a spin kernel
 * ahead, device events around the timed work, median of the samples), so
 * that docs/benchmarks.md can say how much of a microsecond-scale op is
 * launch and dependency latency and what fusing two launches can save.
 *
 * Rows:
 *  - chains of 1..3 empty kernels, plain launches and programmatic
 *    dependent launches (griddepcontrol.wait, then launch_dependents);
 *  - a split reduction, N CTAs x 128 threads writing 128 fp32 partials each
 *    and one 128-thread CTA summing them, three ways: two kernels with a
 *    PDL boundary, one kernel whose last CTA (a zeroed counter, reset by
 *    that CTA) sums them, and one cooperative kernel with a grid-wide
 *    barrier (cooperative_groups) after which CTA 0 sums them.
 * After its timed samples every variant runs three more times, outside the
 * timing, with NaN-poisoned partials and result and seeds the timed runs did
 * not use, and checks each sum against the host's (exit status 2 if any
 * differs), so a row that measures a broken pattern cannot pass silently.
 *
 * A second table streams a 512 MiB weight matrix (rows of 2048 bytes, the
 * MXFP4 rows of a K 4096 GEMM) the way the skinny MoE kernel does: each warp
 * owns 16 rows and walks them in steps of CHUNK bytes per row through a
 * cp.async ring of ST steps, with nothing else to do. "rows" reads each
 * step as 16 separate CHUNK-byte pieces (the prepared weight layout);
 * "tiles" reads the same bytes laid out so that a step is 16 x CHUNK
 * contiguous bytes. L2 is flushed before each run; best of 3; GB/s of bytes
 * read, next to the device-to-device copy of the same 512 MiB (read + write
 * bytes over time, as dsk bench reports it).
 *
 * Usage: dsk-latency [device]   (prints a table; exit 0 when it ran) */
#include <cooperative_groups.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

namespace cg = cooperative_groups;

namespace {

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "dsk-latency: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

constexpr int kRedThreads = 128;
constexpr int kSamples = 40;

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

__global__ void spin_kernel(long long ns) {
  const long long t0 = clock64();
  while (clock64() - t0 < ns * 2) {
  }
}

__global__ void empty_kernel(int *sink) {
  if (sink && threadIdx.x == 1024) *sink = 1; /* never true: keeps the kernel from being trivial to the compiler */
}
__global__ void empty_pdl_kernel(int *sink) {
  pdl_wait();
  pdl_trigger();
  if (sink && threadIdx.x == 1024) *sink = 1;
}

/* partial of CTA b, thread i under seed s: a value the host can recompute */
__device__ __host__ inline float part_value(int b, int i, int s) {
  return (float)((b * 131 + i * 7 + s * 29) % 97) * 0.25f;
}

__device__ void write_partials(float *part, int seed) {
  part[blockIdx.x * kRedThreads + threadIdx.x] = part_value(blockIdx.x, threadIdx.x, seed);
}

/* one 128-thread CTA sums n * 128 partials; thread 0 stores the total */
__device__ void sum_partials(const float *part, int n, float *out) {
  __shared__ float red[kRedThreads / 32];
  float a = 0.f;
  for (int k = threadIdx.x; k < n * kRedThreads; k += kRedThreads) a += __ldcg(part + k);
#pragma unroll
  for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < kRedThreads / 32; w++) t += red[w];
    *out = t;
  }
}

__global__ void __launch_bounds__(kRedThreads) red_split_kernel(float *part, int seed) {
  pdl_wait();
  pdl_trigger();
  write_partials(part, seed);
}
__global__ void __launch_bounds__(kRedThreads) red_finish_kernel(const float *part, int n, float *out) {
  pdl_wait();
  pdl_trigger();
  sum_partials(part, n, out);
}

/* last-CTA-done: every CTA publishes its partials, fences, and counts in;
 * the CTA that counts last sums them and resets the counter to 0 */
__global__ void __launch_bounds__(kRedThreads) red_counter_kernel(float *part, unsigned *ctr, float *out, int seed) {
  __shared__ bool last;
  pdl_wait();
  pdl_trigger();
  write_partials(part, seed);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned old = atomicAdd(ctr, 1u);
    last = old == gridDim.x - 1;
    if (last) *ctr = 0u; /* every other CTA has counted in: nobody reads it again in this call */
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  sum_partials(part, gridDim.x, out);
}

__global__ void __launch_bounds__(kRedThreads) red_coop_kernel(float *part, float *out, int seed) {
  write_partials(part, seed);
  cg::this_grid().sync();
  if (blockIdx.x == 0) sum_partials(part, gridDim.x, out);
}

/* weight streaming: warp w of the grid owns rows 16 w .. 16 w + 15 */
template <int CHUNK, int ST>
__global__ void __launch_bounds__(128) stream_kernel(const uint8_t *w, int64_t row_bytes, int tiles, uint32_t *sink) {
  extern __shared__ __align__(16) uint8_t ssm[];
  constexpr int CPL = CHUNK / 32; /* 16-byte copies per lane per step */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t gw = (int64_t)blockIdx.x * 4 + warp;
  uint8_t *ring = ssm + warp * ST * 16 * CHUNK;
  const int nst = (int)(row_bytes / CHUNK);
  auto issue = [&](int st) {
    uint8_t *dst = ring + (st % ST) * 16 * CHUNK;
#pragma unroll
    for (int c = 0; c < CPL; c++) {
      const int u = lane * CPL + c, r = u / (CHUNK / 16), ch = u % (CHUNK / 16);
      const uint8_t *src = tiles ? w + gw * 16 * row_bytes + (int64_t)st * 16 * CHUNK + r * CHUNK + 16 * ch
                                 : w + (gw * 16 + r) * row_bytes + (int64_t)st * CHUNK + 16 * ch;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(
                       dst + r * CHUNK + 16 * ch)),
                   "l"(src)
                   : "memory");
    }
  };
#pragma unroll
  for (int st = 0; st < ST - 1; st++) {
    if (st < nst) issue(st);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  uint32_t acc = 0;
  for (int st = 0; st < nst; st++) {
    __syncwarp();
    if (st + ST - 1 < nst) issue(st + ST - 1);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 1) : "memory");
    __syncwarp();
    acc ^= *reinterpret_cast<const uint32_t *>(ring + (st % ST) * 16 * CHUNK + 4 * lane);
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

struct Bench {
  cudaStream_t s;
  cudaEvent_t e0, e1;
  void *flush;
  size_t flush_bytes;
};

template <typename F>
double median_us(Bench &b, F &&work) {
  work(); /* warm-up */
  CK(cudaStreamSynchronize(b.s));
  std::vector<float> v;
  for (int i = 0; i < kSamples; i++) {
    CK(cudaMemsetAsync(b.flush, i & 0xff, b.flush_bytes, b.s));
    spin_kernel<<<1, 1, 0, b.s>>>(50000);
    CK(cudaEventRecord(b.e0, b.s));
    work();
    CK(cudaEventRecord(b.e1, b.s));
    CK(cudaEventSynchronize(b.e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, b.e0, b.e1));
    v.push_back(ms * 1e3f);
  }
  std::sort(v.begin(), v.end());
  return 0.5 * (v[kSamples / 2 - 1] + v[kSamples / 2]);
}

template <typename... KArgs, typename... Args>
void launch(bool pdl, bool coop, void (*k)(KArgs...), int grid, int block, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  if (pdl || coop) {
    attr[0].id = pdl ? cudaLaunchAttributeProgrammaticStreamSerialization : cudaLaunchAttributeCooperative;
    if (pdl)
      attr[0].val.programmaticStreamSerializationAllowed = 1;
    else
      attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  CK(cudaLaunchKernelEx(&cfg, k, args...));
}

}  // namespace

int main(int argc, char **argv) {
  const int dev = argc > 1 ? atoi(argv[1]) : 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  Bench b;
  CK(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
  CK(cudaEventCreate(&b.e0));
  CK(cudaEventCreate(&b.e1));
  b.flush_bytes = 2 * (size_t)prop.l2CacheSize;
  CK(cudaMalloc(&b.flush, b.flush_bytes));
  const int nmax = 512;
  float *part, *out;
  unsigned *ctr;
  CK(cudaMalloc(&part, nmax * kRedThreads * sizeof(float)));
  CK(cudaMalloc(&out, sizeof(float)));
  CK(cudaMalloc(&ctr, sizeof(unsigned)));
  CK(cudaMemset(ctr, 0, sizeof(unsigned)));
  int *sink = NULL;

  printf("# dsk-latency: %s, sm_%d%d, %d SMs; method of dsk_bench_run: L2 flushed (memset of %zu MB), 50 us spin\n"
         "# kernel ahead, events around the work, median of %d samples\n",
         prop.name, prop.major, prop.minor, prop.multiProcessorCount, b.flush_bytes >> 20, kSamples);
  printf("%-58s %10s\n", "work between the events", "median_us");
  for (int pdl = 0; pdl < 2; pdl++) {
    for (int n = 1; n <= 3; n++) {
      const double us = median_us(b, [&] {
        for (int i = 0; i < n; i++) launch(pdl != 0, false, pdl ? empty_pdl_kernel : empty_kernel, 1, 32, b.s, sink);
      });
      char name[96];
      snprintf(name, sizeof name, "%d empty kernel%s, %s", n, n > 1 ? "s" : "", pdl ? "PDL" : "plain launches");
      printf("%-58s %10.2f\n", name, us);
    }
  }
  int bad = 0;
  int coop_max = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&coop_max, red_coop_kernel, kRedThreads, 0));
  coop_max *= prop.multiProcessorCount;
  const int ns[] = {64, 132, 256, 512};
  for (int n : ns) {
    for (int mode = 0; mode < 3; mode++) {
      if (mode == 2 && n > coop_max) continue;
      auto once = [&](int seed) {
        if (mode == 0) {
          launch(true, false, red_split_kernel, n, kRedThreads, b.s, part, seed);
          launch(true, false, red_finish_kernel, 1, kRedThreads, b.s, (const float *)part, n, out);
        } else if (mode == 1) {
          launch(true, false, red_counter_kernel, n, kRedThreads, b.s, part, ctr, out, seed);
        } else {
          launch(false, true, red_coop_kernel, n, kRedThreads, b.s, part, out, seed);
        }
      };
      const double us = median_us(b, [&] { once(0); });
      /* the check, outside the timing: partials and result poisoned with
       * NaN, a seed the timed runs did not use, so a pattern that read
       * partials before they were written (or a stale result) shows */
      bool ok = true;
      for (int seed = 1; seed <= 3; seed++) {
        double ref = 0.0;
        for (int bl = 0; bl < n; bl++)
          for (int i = 0; i < kRedThreads; i++) ref += part_value(bl, i, seed);
        CK(cudaMemsetAsync(part, 0xFF, (size_t)n * kRedThreads * sizeof(float), b.s));
        CK(cudaMemsetAsync(out, 0xFF, sizeof(float), b.s));
        once(seed);
        float got = 0.f;
        unsigned c = 1;
        CK(cudaMemcpyAsync(&got, out, sizeof got, cudaMemcpyDeviceToHost, b.s));
        CK(cudaMemcpyAsync(&c, ctr, sizeof c, cudaMemcpyDeviceToHost, b.s));
        CK(cudaStreamSynchronize(b.s));
        ok = ok && (double)got == ref && c == 0;
      }
      bad += !ok;
      static const char *mname[3] = {"two kernels, PDL", "one kernel, last-CTA counter", "one cooperative kernel, grid sync"};
      char name[96];
      snprintf(name, sizeof name, "reduce %3d x %d partials: %s%s", n, kRedThreads, mname[mode], ok ? "" : " WRONG");
      printf("%-58s %10.2f\n", name, us);
    }
  }
  /* weight streaming patterns */
  {
    const size_t bytes = (size_t)512 << 20;
    const int64_t row_bytes = 2048, warps = (int64_t)(bytes / (16 * row_bytes));
    uint8_t *w = NULL, *w2 = NULL;
    uint32_t *sink2 = NULL;
    CK(cudaMalloc(&w, bytes));
    CK(cudaMalloc(&w2, bytes));
    CK(cudaMalloc(&sink2, 4));
    CK(cudaMemset(w, 0x11, bytes));
    cudaEvent_t e0 = b.e0, e1 = b.e1;
    auto timed = [&](auto &&work) {
      float best = 1e30f;
      for (int r = 0; r < 3; r++) {
        CK(cudaMemsetAsync(b.flush, r, b.flush_bytes, b.s));
        CK(cudaEventRecord(e0, b.s));
        work();
        CK(cudaEventRecord(e1, b.s));
        CK(cudaEventSynchronize(e1));
        float ms = 0.f;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = ms < best ? ms : best;
      }
      return (double)best * 1e-3;
    };
    const double tc = timed([&] { CK(cudaMemcpyAsync(w2, w, bytes, cudaMemcpyDeviceToDevice, b.s)); });
    printf("# weight streaming, %zu MiB, rows of %lld bytes, 16 rows per warp, 4 warps per block, best of 3\n",
           bytes >> 20, (long long)row_bytes);
    printf("%-58s %10s %8s\n", "pattern (CHUNK bytes per row per step x ring steps)", "GB/s", "blocks/SM");
    printf("%-58s %10.0f %8s\n", "device-to-device copy (read + write bytes)", 2.0 * (double)bytes / tc * 1e-9, "-");
    auto one = [&](const char *name, auto kern, int chunk, int st, int tiles) {
      const int smem = 4 * st * 16 * chunk;
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int occ = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 128, smem));
      const double t = timed([&] {
        kern<<<(unsigned)(warps / 4), 128, smem, b.s>>>(w, row_bytes, tiles, sink2);
        CK(cudaGetLastError());
      });
      char nm[96];
      snprintf(nm, sizeof nm, "%s %d x %d", name, chunk, st);
      printf("%-58s %10.0f %8d\n", nm, (double)bytes / t * 1e-9, occ);
    };
    one("rows", stream_kernel<64, 4>, 64, 4, 0);
    one("rows", stream_kernel<64, 8>, 64, 8, 0);
    one("rows", stream_kernel<128, 4>, 128, 4, 0);
    one("rows", stream_kernel<256, 2>, 256, 2, 0);
    one("rows", stream_kernel<256, 4>, 256, 4, 0);
    one("rows", stream_kernel<512, 2>, 512, 2, 0);
    one("tiles", stream_kernel<64, 4>, 64, 4, 1);
    one("tiles", stream_kernel<64, 8>, 64, 8, 1);
    one("tiles", stream_kernel<128, 4>, 128, 4, 1);
    cudaFree(w);
    cudaFree(w2);
    cudaFree(sink2);
  }
  cudaFree(part);
  cudaFree(out);
  cudaFree(ctr);
  cudaFree(b.flush);
  return bad ? 2 : 0;
}
