// tessera/backend/cuda/wgmma.cuh - Hopper's warpgroup tensor-core instructions (sm_90a):
// wgmma.mma_async with both operands read from shared memory through matrix descriptors, its
// fences and groups, and the proxy fence that makes ordinary shared-memory writes (cp.async
// included) visible to it: what gemm_wgmma.cuh is built from.
//
// Why wgmma beside mma.sync: on sm_90 only wgmma reaches the tensor cores' full rate. A warpgroup
// (4 warps, 128 threads) issues one m64nNk16 product whose operands the tensor cores read from
// shared memory themselves, so no fragment passes through registers and one instruction covers
// what 64 mma.sync would (m64n128k16). The operands must lie in one of the canonical layouts
// the PTX ISA defines; tessera uses the 128-byte swizzled ones (cuda_wgmma_k_major,
// cuda_wgmma_mn_major in gemm_wgmma.cuh).
//
// The code exists only in device code compiled for sm_90a (`__CUDA_ARCH_FEAT_SM90_ALL`: build
// with CMAKE_CUDA_ARCHITECTURES=90a); elsewhere these wrappers trap, and the dispatch never
// reaches them (cuda_wgmma_built). The host emulation of the CUDA runtime (tests/cuda_emu)
// models the instruction by decoding the descriptors and the swizzle as the ISA specifies them,
// so a kernel that lays out its tiles or builds its descriptors wrongly fails its tests there.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

TESSERA_BEGIN_NAMESPACE
namespace detail {

#if defined(TESSERA_CUDA_HOST_EMULATION) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TESSERA_CUDA_WGMMA 1  // this compilation pass has wgmma (device code for sm_90a)
#else
#define TESSERA_CUDA_WGMMA 0
#endif

/// The shared-memory address (the offset in the block's shared window) of p, which points
/// into shared memory: what descriptors and the swizzle work on.
__device__ __forceinline__ uint32_t cuda_smem_address(const void* p) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  return tessera_cuda_emulation::smem_address(p);
#else
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

/// A wgmma matrix descriptor for the 128-byte swizzle mode: the operand's start address,
/// leading-dimension byte offset (lbo) and stride-dimension byte offset (sbo), each stored
/// without its low 4 bits (so multiples of 16), swizzle mode 1 (128 bytes) in bits 62-63, base
/// offset 0 (the swizzle atoms are 1024-byte aligned).
__host__ __device__ __forceinline__ uint64_t cuda_wgmma_desc(uint32_t address, uint32_t lbo,
                                                             uint32_t sbo) {
  return uint64_t{(address & 0x3ffffu) >> 4} | uint64_t{(lbo & 0x3ffffu) >> 4} << 16 |
         uint64_t{(sbo & 0x3ffffu) >> 4} << 32 | uint64_t{1} << 62;
}

/// wgmma.fence: orders this thread's earlier accesses of the accumulator registers before the
/// wgmma.mma_async that follow (needed before the first one and after any other access).
__device__ __forceinline__ void cuda_wgmma_fence() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
#elif TESSERA_CUDA_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// wgmma.commit_group: closes the group of this warpgroup's wgmma.mma_async issued since the last.
__device__ __forceinline__ void cuda_wgmma_commit() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
#elif TESSERA_CUDA_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// wgmma.wait_group Pending: waits until at most Pending groups are in flight; only then may
/// their accumulators be read, or the shared memory they read be written.
template <int Pending>
__device__ __forceinline__ void cuda_wgmma_wait() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
#elif TESSERA_CUDA_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#else
  __trap();
#endif
}

/// fence.proxy.async.shared::cta: makes this thread's earlier writes to shared memory (stores
/// and completed cp.async copies, the generic proxy) visible to later reads by the async proxy
/// (wgmma) once a barrier has ordered them.
__device__ __forceinline__ void cuda_fence_proxy_async() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
#elif TESSERA_CUDA_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// One wgmma.mma_async m64n128k16 with float accumulators d (in place, scale-d true), descriptors
// a and b, immediate transposes ta and tb; `types` names the input type (f16 or bf16).
#define TESSERA_WGMMA_M64N128K16(types)                                                            \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." types "." types                               \
      " {"                                                                                         \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "           \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "           \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, "     \
      "%65, p, 1, 1, %67, %68;\n}\n"                                                               \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])                                                                                \
      : "l"(a), "l"(b), "r"(1), "n"(ta), "n"(tb))

/// d += A B for one warpgroup: wgmma.mma_async.sync.aligned.m64n128k16.f32 with In (__half or
/// __nv_bfloat16) inputs, A (64 x 16) and B (16 x 128) read from shared memory through the
/// descriptors a and b. TransA: A is stored m-contiguous (MN-major) rather than k-contiguous;
/// TransB: B n-contiguous rather than k-contiguous. Accumulators: thread L of the warpgroup
/// (warp w = L / 32, g = L % 32 / 4, t = L % 4) holds D(16 w + g, 8 j + 2 t + c) in d[4 j + c]
/// and D(16 w + g + 8, 8 j + 2 t + c) in d[4 j + 2 + c], j = 0 .. 15, c = 0, 1. Asynchronous:
/// the results are there after cuda_wgmma_commit and cuda_wgmma_wait. Every thread of the
/// warpgroup must call it together, with the same descriptors.
template <class In, bool TransA, bool TransB>
__device__ __forceinline__ void cuda_wgmma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b) {
  static_assert(std::is_same_v<In, __half> || std::is_same_v<In, __nv_bfloat16>);
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::wgmma_m64nNk16<In>(d, 128, a, b, TransA, TransB);
#elif TESSERA_CUDA_WGMMA
  constexpr int ta = TransA ? 1 : 0, tb = TransB ? 1 : 0;
  if constexpr (std::is_same_v<In, __half>)
    TESSERA_WGMMA_M64N128K16("f16");
  else
    TESSERA_WGMMA_M64N128K16("bf16");
#else
  (void)d, (void)a, (void)b;  // launched only where cuda_wgmma_built() holds
  __trap();
#endif
}

#undef TESSERA_WGMMA_M64N128K16

}  // namespace detail
TESSERA_END_NAMESPACE
