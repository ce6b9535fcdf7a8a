// tessera/backend/cuda/tma.cuh - Hopper's tensor memory accelerator (TMA) and the mbarriers it
// signals (device code built for sm_90a): what the TMA-fed wgmma kernel (gemm_wgmma_tma.cuh)
// is built from.
//
// Why TMA: with cp.async every thread of a block computes addresses, issues 16-byte copies and
// zeroes edge chunks, every step. A TMA copy is one instruction from one thread: the unit reads
// a whole box of a tensor (a 128-byte row of k by 128 rows, here) through a tensor map that the
// host encoded once per launch, zero-fills what lies outside the tensor, writes shared memory in
// the 128-byte swizzled layout that wgmma's descriptors read, and counts the bytes against an
// mbarrier in shared memory. The threads that multiply only wait on that barrier.
//
// mbarriers: a barrier's phase completes when its expected arrivals have been made and the
// transaction bytes announced for it (arrive.expect_tx) have landed; then the next phase starts.
// A waiter names the phase by its parity (try_wait.parity). The host emulation (tests/cuda_emu)
// models both: copies land only when their phase completes, waiters park until then, and
// phases that cannot complete fail the launch.
//
// The tensor maps are encoded on the host with the driver's cuTensorMapEncodeTiled, reached
// through the runtime (cudaGetDriverEntryPointByVersion), so tessera links no libcuda; where the
// driver lacks it, or refuses an operand, dispatch keeps the cp.async kernel.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "wgmma.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// cuTensorMapEncodeTiled's signature.
using cuda_encode_tiled_fn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                          const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                          const cuuint32_t*, CUtensorMapInterleave,
                                          CUtensorMapSwizzle, CUtensorMapL2promotion,
                                          CUtensorMapFloatOOBfill);

/// The driver's cuTensorMapEncodeTiled, or null where the driver has none: asked once per
/// process.
inline cuda_encode_tiled_fn cuda_tensor_map_encoder() {
  static const cuda_encode_tiled_fn encode = []() -> cuda_encode_tiled_fn {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if defined(TESSERA_CUDA_HOST_EMULATION) || CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                           cudaEnableDefault, &found);
#else
    const cudaError_t e =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return found == cudaDriverEntryPointSuccess ? reinterpret_cast<cuda_encode_tiled_fn>(fn)
                                                : nullptr;
  }();
  return encode;
}

/// A GEMM operand as TMA reads it: its tensor map and whether the map has a batch dimension (a
/// third coordinate).
struct cuda_tma_operand {
  CUtensorMap map;
  bool batched;
};

/// Encodes into `out` the tensor map of an operand of `element_bytes`-byte elements (1, 2 or 4) at
/// base: `inner` elements contiguous per row, `outer` rows row_stride elements apart, and,
/// where batch > 1 with a nonzero batch_stride, `batch` matrices batch_stride elements apart (a
/// third dimension; else one matrix serves every batch index). A box is box_rows rows of 128
/// bytes in the 128-byte swizzle mode (cuda_wgmma_k_major / cuda_wgmma_mn_major's layout when
/// written at a 1024-byte aligned address); elements outside the operand read as zeros. False
/// when there is no encoder or the driver refuses the operand (base or strides not 16-byte
/// aligned, extents past its limits).
inline bool cuda_tma_operand_of(cuda_tma_operand& out, const void* base, int element_bytes,
                                int64_t inner, int64_t outer, int64_t row_stride, int64_t batch,
                                int64_t batch_stride, uint32_t box_rows) {
  const cuda_encode_tiled_fn encode = cuda_tensor_map_encoder();
  if (!encode || inner < 1 || outer < 1 || row_stride < 1 || batch_stride < 0) return false;
  out.batched = batch > 1 && batch_stride != 0;
  const auto bytes = static_cast<cuuint64_t>(element_bytes);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(row_stride) * bytes,
                                 static_cast<cuuint64_t>(batch_stride) * bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(cuda_wgmma_row_bytes / element_bytes),
                             box_rows, 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  return encode(&out.map,
                element_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                : element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                     : CU_TENSOR_MAP_DATA_TYPE_UINT32,
                out.batched ? 3 : 2, const_cast<void*>(base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/// mbarrier.init: the barrier at shared address `bar` completes a phase after `count` arrivals.
__device__ __forceinline__ void cuda_mbarrier_init(uint32_t bar, unsigned count) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::mbarrier_init(bar, count);
#elif TESSERA_CUDA_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  (void)bar, (void)count;
  __trap();
#endif
}

/// Makes initialised barriers visible to the other threads and to the async proxy (TMA): after
/// the inits, before the barrier (__syncthreads) that publishes them.
__device__ __forceinline__ void cuda_mbarrier_init_fence() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
#elif TESSERA_CUDA_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

/// mbarrier.arrive: this thread's arrival on the barrier's current phase.
__device__ __forceinline__ void cuda_mbarrier_arrive(uint32_t bar) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::mbarrier_arrive(bar);
#elif TESSERA_CUDA_WGMMA
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
#else
  (void)bar;
  __trap();
#endif
}

/// mbarrier.arrive.expect_tx: announces `bytes` of copies for the current phase, then arrives.
__device__ __forceinline__ void cuda_mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::mbarrier_arrive(bar, bytes);
#elif TESSERA_CUDA_WGMMA
  asm volatile(
      "{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
          bar),
      "r"(bytes)
      : "memory");
#else
  (void)bar, (void)bytes;
  __trap();
#endif
}

/// How long a thread waits on an mbarrier phase before it traps (a launch error the host
/// reports): no stage of a product takes seconds, so a phase that has not completed by then
/// never will (transaction bytes or arrivals that do not add up), and an error beats a hang.
inline constexpr uint64_t cuda_mbarrier_timeout_ns = uint64_t{10} * 1000 * 1000 * 1000;

/// Waits until the barrier's phase of parity `parity` (0 for its first phase, 1 for the second,
/// and so on) has completed; returns at once for parity 1 before the first phase completes.
/// Traps after cuda_mbarrier_timeout_ns.
__device__ __forceinline__ void cuda_mbarrier_wait(uint32_t bar, unsigned parity) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::mbarrier_wait(bar, parity, __FILE__, __LINE__);
#elif TESSERA_CUDA_WGMMA
  const auto try_wait = [&] {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
  };
  if (try_wait()) return;  // the usual case: no clock read
  const auto now = [] {
    uint64_t ns;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(ns));
    return ns;
  };
  const uint64_t start = now();
  for (uint32_t polls = 1; !try_wait(); ++polls)
    if (polls % 1024 == 0 && now() - start > cuda_mbarrier_timeout_ns) __trap();
#else
  (void)bar, (void)parity;
  __trap();
#endif
}

/// One TMA copy: the box of `op` at coordinates (c0, c1), and c2 where the map is batched, to
/// shared address dst (1024-byte aligned for the swizzle to be the tile layouts'), its bytes
/// counted on the barrier at shared address bar.
__device__ __forceinline__ void cuda_tma_load(uint32_t dst, const cuda_tma_operand& op, int32_t c0,
                                              int32_t c1, int32_t c2, uint32_t bar) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  const int32_t coords[3] = {c0, c1, c2};
  tessera_cuda_emulation::tma_load(dst, &op.map, coords, op.batched ? 3 : 2, bar);
#elif TESSERA_CUDA_WGMMA
  const auto map = reinterpret_cast<uint64_t>(&op.map);
  if (op.batched)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
        "{%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
        "{%2, %3}], [%4];\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
#else
  (void)dst, (void)op, (void)c0, (void)c1, (void)c2, (void)bar;
  __trap();
#endif
}

}  // namespace detail
TESSERA_END_NAMESPACE
