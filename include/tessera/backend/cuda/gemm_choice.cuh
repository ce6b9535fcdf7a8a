// tessera/backend/cuda/gemm_choice.cuh - which pipelined GEMM kernel may run: one switch and one
// launch count per kernel, shared by dispatch (gemm_tc_async.cuh), the tests and the benchmarks.
#pragma once

#include "launch.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The pipelined GEMM kernels, in the order dispatch tries them (cuda_gemm_try_async): wgmma
/// (gemm_wgmma.cuh), mma.sync (gemm_mma.cuh), the WMMA pipeline (gemm_tc_async.cuh). A product
/// none of them takes runs on the register-staged tensor-core kernel or the SIMT one; `none`
/// names that in cuda_gemm_start_at.
enum class cuda_gemm_pipeline { wgmma, mma_sync, wmma, none };

/// The switch and launch count of pipeline k (not `none`). All start switched on.
inline cuda_kernel_choice& cuda_gemm_choice(cuda_gemm_pipeline k) {
  static cuda_kernel_choice choices[static_cast<int>(cuda_gemm_pipeline::none)];
  return choices[static_cast<int>(k)];
}

/// Whether the wgmma pipeline may feed its products through TMA (gemm_wgmma_tma.cuh) where they
/// qualify, and how many launches it has had; those launches count as the wgmma pipeline's too.
/// Switched off, every wgmma product runs on the cp.async-fed kernel (tests run both).
inline cuda_kernel_choice& cuda_wgmma_tma_choice() {
  static cuda_kernel_choice choice;
  return choice;
}

/// Whether the TMA-fed wgmma kernel may use 128 x 256 tiles where a product suits them
/// (cuda_wgmma_tma_wide), and how many launches it had so (counted as TMA launches too).
inline cuda_kernel_choice& cuda_wgmma_tma_wide_choice() {
  static cuda_kernel_choice choice;
  return choice;
}

/// Whether the register-staged tensor-core kernel (cuda_gemm_tc) may take what the pipelines
/// leave to the tensor cores (other strides and types converted on load, the planar convolution
/// gather, the tensor-core types' convolution weight gradients), and how many launches it has
/// had. Switched off, those products run on the SIMT kernel.
inline cuda_kernel_choice& cuda_gemm_tc_choice() {
  static cuda_kernel_choice choice;
  return choice;
}

/// Whether the SIMT kernel may run float products of at most 64 rows on 64 x 128 tiles
/// (cuda_gemm_simt with BM = 64) instead of 128-row tiles half or more of whose rows are empty,
/// and how many launches it has had so. Switched off, those products run on 128-row tiles, with
/// the same results bit for bit (tests compare the two).
inline cuda_kernel_choice& cuda_gemm_simt_short_choice() {
  static cuda_kernel_choice choice;
  return choice;
}

/// Makes dispatch start at `first`: switches off the pipelines tried before it and on the rest.
/// cuda_gemm_start_at(cuda_gemm_pipeline::wgmma) is the default; `none` leaves the products to
/// the register-staged kernel. Tests and benchmarks use it to run each kernel on the same inputs.
inline void cuda_gemm_start_at(cuda_gemm_pipeline first) {
  for (int k = 0; k < static_cast<int>(cuda_gemm_pipeline::none); ++k)
    cuda_gemm_choice(static_cast<cuda_gemm_pipeline>(k)).enabled = k >= static_cast<int>(first);
}

}  // namespace detail
TESSERA_END_NAMESPACE
