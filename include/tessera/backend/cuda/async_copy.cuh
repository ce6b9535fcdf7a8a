// tessera/backend/cuda/async_copy.cuh - asynchronous global-to-shared copies (cp.async, sm_80
// and newer) and the block's dynamic shared memory: what the multi-stage GEMM pipeline
// (gemm_tc_async.cuh) is built from.
//
// Each wrapper has one meaning on a GPU (inline PTX) and in the host emulation of the CUDA
// runtime (tests/cuda_emu), which queues a copy until its thread waits for it, so a kernel that
// reads a stage before waiting for it fails its tests there too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The block's dynamic shared memory (the bytes its launch asked for, see cuda_launch_smem),
/// 128-byte aligned.
__device__ __forceinline__ unsigned char* cuda_dynamic_smem() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  return tessera_cuda_emulation::dynamic_smem;
#else
  extern __shared__ __align__(128) unsigned char tessera_dynamic_smem[];
  return tessera_dynamic_smem;
#endif
}

/// Starts copying `bytes` (0 to 16) from global src to shared dst, both 16-byte aligned, and
/// zeros the rest of dst's 16 bytes: a tile's edge chunks read only what lies inside the matrix.
/// The L1 is bypassed (.cg): tiles are read once per block. The copy is complete only after
/// cuda_cp_async_wait covers its group.
__device__ __forceinline__ void cuda_cp_async16(void* dst, const void* src, int bytes) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::cp_async16(dst, src, static_cast<unsigned>(bytes));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes)
               : "memory");
#else
  (void)dst, (void)src, (void)bytes;  // callers run only where the code is built for sm_80
  __trap();
#endif
}

/// Closes the group of the copies this thread started since the last commit (an empty group
/// when there were none: waits count groups, so every thread commits the same number).
__device__ __forceinline__ void cuda_cp_async_commit() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::cp_async_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until all of this thread's groups but the newest Pending have landed. Other threads'
/// copies need a __syncthreads after their own waits.
template <int Pending>
__device__ __forceinline__ void cuda_cp_async_wait() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::cp_async_wait(Pending);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

}  // namespace detail
TESSERA_END_NAMESPACE
