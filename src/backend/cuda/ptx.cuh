/* ptx.cuh - the small PTX wrappers the portable kernels share. Every
 * instruction here exists on both sm_90 and sm_120 (cp.async, ldmatrix,
 * mma.sync f16/bf16 m16n8k16 and e4m3 m16n8k32, cvt between e4m3x2 and
 * f16x2, ex2.approx, griddepcontrol, mbarrier, cp.async.bulk):
 * see the portability rule in spec/sparse-decode.md §9. Host-side tests
 * replace this file with an emulation of the same functions
 * (tests/emu/cuda_emu.h). */
#ifndef DSK_PTX_CUH
#define DSK_PTX_CUH

#include <stdint.h>

namespace dsk_ptx {

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* cp.async of 16 / 8 / 4 bytes; with valid == false the destination is
 * zero-filled and nothing is read. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async8(void *dst, const void *src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 8 : 0));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* cp.async.wait_group N: this thread's groups but the N newest have
 * landed; a compiler barrier too, so that no shared-memory load of the
 * landed bytes is moved above it */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* ldmatrix: four 8x8 b16 matrices; lane l supplies the shared address of
 * row (l & 7) of matrix (l >> 3) (16-byte aligned); r[m] is matrix m's
 * fragment. .trans delivers the transposed fragment. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

/* two e4m3 in the low 16 bits (low byte first) -> f16x2 (low half = low
 * byte), exact; the unpack is a register-pair view, not an instruction */
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v16) {
  uint32_t r;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(r) : "r"(v16));
  return r;
}
/* the same through an explicit 16-bit truncation; gives the register
 * allocator a different shape (the indexer kernel stays spill-free with it) */
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2_u16(uint32_t v) {
  uint32_t r;
  asm("{\n .reg .b16 t;\n cvt.u16.u32 t, %1;\n cvt.rn.f16x2.e4m3x2 %0, t;\n}\n" : "=r"(r) : "r"(v & 0xFFFFu));
  return r;
}
/* four e4m3 -> two f16x2: bytes 0,1 -> lo, bytes 2,3 -> hi */
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t v, uint32_t &lo, uint32_t &hi) {
  asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n cvt.rn.f16x2.e4m3x2 %1, b;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(v));
}

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d += A(16x32 e4m3) . B(32x8 e4m3), fp32. The fragments are the byte
 * views of the m16n8k16 ones: lane (g, q) holds A rows g (a0, a2) and g+8
 * (a1, a3), k 4q..4q+3 (a0, a1) and 16+4q.. (a2, a3), lowest k in the lowest
 * byte; B column g, k 4q.. (b0) and 16+4q.. (b1); D as m16n8k16. Native on
 * sm_89 and sm_120; sm_90's ptxas expands it into f16 MMAs and conversions
 * (docs/design.md, "FAST"). */
__device__ __forceinline__ void mma_fp8(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* f16x2 -> two e4m3 in the low 16 bits (low half -> low byte), round to
 * nearest even, saturating to +-448 (NaN stays NaN) */
__device__ __forceinline__ uint32_t f16x2_to_e4m3x2(uint32_t h) {
  uint32_t r;
  asm("{\n .reg .b16 t;\n cvt.rn.satfinite.e4m3x2.f16x2 t, %1;\n cvt.u32.u16 %0, t;\n}\n" : "=r"(r) : "r"(h));
  return r;
}
/* two fp32 -> two e4m3 in the low 16 bits (lo -> low byte), round to
 * nearest even, saturating to +-448; for finite input the codes of
 * dsk_fmt_e4m3_from_f32 (gpu_cvt checks every finite fp32 on the device) */
__device__ __forceinline__ uint32_t f32x2_to_e4m3x2(float lo, float hi) {
  uint32_t r;
  asm("{\n .reg .b16 t;\n cvt.rn.satfinite.e4m3x2.f32 t, %1, %2;\n cvt.u32.u16 %0, t;\n}\n"
      : "=r"(r)
      : "f"(hi), "f"(lo));
  return r;
}
/* two fp32 -> f16x2 (lo in the low half), round to nearest even;
 * subnormal results kept, below half the smallest one -> 0 */
__device__ __forceinline__ uint32_t f32x2_to_f16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/* a * b on f16x2 pairs, round to nearest even */
__device__ __forceinline__ uint32_t hmul2_u32(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
/* a - b on f16x2 pairs, round to nearest even */
__device__ __forceinline__ uint32_t hsub2_u32(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

/* fp32 -> bf16, round to nearest even: a pair (lo in the low half) and one */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ uint16_t f32_to_bf16_rne(float x) {
  uint32_t r;
  asm("{\n .reg .b16 t;\n cvt.rn.bf16.f32 t, %1;\n cvt.u32.u16 %0, t;\n}\n" : "=r"(r) : "f"(x));
  return (uint16_t)r;
}

/* Brings the 128-byte line holding p into L2 (a hint; no register result). */
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

/* programmatic dependent launch: let the next kernel on the stream start
 * its launch now / wait until the previous kernel completed and its writes
 * are visible */
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

/* 1 / x, approximate (1 ulp; subnormals kept): one MUFU.RCP, where 1.f / x
 * is a refined division with a slow-path check */
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* 2^x, approximate (2 ulp) */
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* mbarrier / bulk-copy wrappers (sm_90 and sm_120; the indexer's logits
 * kernel). */
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred P1;\n"
      "LAB_WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      " @P1 bra DONE;\n"
      " bra LAB_WAIT;\n"
      "DONE:\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
/* global -> shared bulk copy (16-byte aligned, a multiple of 16 bytes),
 * completion counted in bytes on bar */
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}
/* Brings `bytes` (a multiple of 16, 16-byte aligned) from src into L2, no
 * shared-memory destination and no completion (a hint) */
__device__ __forceinline__ void bulk_prefetch_l2(const void *src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}
/* relu(x) = x < 0 ? 0 : x with NaN propagated (max.NaN; -0 becomes +0) */
__device__ __forceinline__ float ix_relu(float x) {
  float r;
  asm("max.NaN.f32 %0, %1, 0f00000000;\n" : "=f"(r) : "f"(x));
  return r;
}

/* orders the mbarrier inits before their use by the async proxy */
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace dsk_ptx

#endif
