// tessera/core/backend.hpp - backend tag types, the backend concept, and the kernel primary
// templates each backend specialises.
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE

/// Host backend: SIMD + OpenMP kernels.
struct cpu {};
/// NVIDIA GPU backend; its kernels come with <tessera/cuda.hpp> (compiled by nvcc).
struct cuda {};

namespace backend {

template <class B>
inline constexpr bool always_false = false;

/// Memory primitives of backend B: allocate/deallocate bytes, copy to/from host and within the
/// device, and `host_accessible` (whether a CPU pointer dereference is valid). A backend
/// specialises this; a user backend may inherit cpu's (see examples/custom_backend.cpp).
template <class B>
struct memory {
  static_assert(always_false<B>,
                "tessera: no memory<B> specialisation for this backend (tessera::cpu: include "
                "<tessera/backend/cpu/memory.hpp> or <tessera/tessera.hpp>; tessera::cuda: include "
                "<tessera/cuda.hpp> and compile with nvcc)");
};

/// Elementwise kernels of backend B: `map` (n-ary, broadcast strides) and `fill`.
template <class B>
struct map_kernel {
  static_assert(always_false<B>,
                "tessera: backend has no map_kernel (elementwise ops); for tessera::cuda include "
                "<tessera/cuda.hpp>");
};

/// Reduction kernels of backend B.
template <class B>
struct reduce_kernel {
  static_assert(always_false<B>,
                "tessera: backend has no reduce_kernel (sum/mean/min/max/...); for tessera::cuda "
                "include <tessera/cuda.hpp>");
};

/// Matrix-multiply kernels of backend B: run(const detail::gemm_problem<TA, TB, Acc>&).
template <class B>
struct gemm_kernel {
  static_assert(always_false<B>,
                "tessera: backend has no gemm_kernel (matmul/gemm/linear); for tessera::cuda "
                "include <tessera/cuda.hpp>");
};

/// Convolution kernels of backend B: forward / backward_input / backward_weight of one
/// detail::conv_problem (implicit GEMM and direct kernels on the CPU).
template <class B>
struct conv_kernel {
  static_assert(always_false<B>,
                "tessera: backend has no conv_kernel (conv1d/conv2d/conv_transpose2d); for "
                "tessera::cuda include <tessera/cuda.hpp>");
};

/// Pooling kernels of backend B: max / average pooling over NCHW planes and their backward.
template <class B>
struct pool_kernel {
  static_assert(always_false<B>,
                "tessera: backend has no pool_kernel (max_pool2d/avg_pool2d/adaptive_avg_pool2d); "
                "for tessera::cuda include <tessera/cuda.hpp>");
};

/// Fused optimizer updates of backend B: sgd(const detail::sgd_problem<T>&) and
/// adam(const detail::adam_problem<T>&), in place over contiguous float / double arrays
/// (sgd_step, adam_step).
template <class B>
struct optim_kernel {
  static_assert(always_false<B>,
                "tessera: backend has no optim_kernel (sgd_step/adam_step); the CPU one is in "
                "<tessera/backend/cpu/kernels.hpp>");
};

/// Optional loss kernels of backend B. A backend whose memory the host cannot read may give
/// check_labels (see backend/cuda/loss.cuh): the class-label check and count of the losses on the
/// device, so they need not wait for the device to read the labels. Without it the labels are
/// copied to the host and checked there.
template <class B>
struct loss_kernel {};

/// Optional fused attention of backend B: forward(const detail::attention_problem<T>&) and
/// backward(const detail::attention_backward_problem<T>&) (kernel/attention_problem.hpp).
/// Without it scaled_dot_product_attention runs as matmul, softmax and matmul.
template <class B>
struct attention_kernel {};

/// Optional fused row-wise kernels of backend B (kernel/norm_problem.hpp): layer_norm(const
/// detail::layer_norm_problem<T>&) for float and double, int8_rows(const
/// detail::int8_rows_problem&). Without them layer_norm and the int8 quantization of rows run as
/// reductions and elementwise ops.
template <class B>
struct norm_kernel {};

}  // namespace backend

/// A backend tag: an empty type whose memory primitives are specialised.
template <class B>
concept backend_tag = std::is_empty_v<B> && requires(size_t n, void* p) {
  { backend::memory<B>::allocate(n) } -> std::same_as<void*>;
  backend::memory<B>::deallocate(p, n);
  { backend::memory<B>::host_accessible } -> std::convertible_to<bool>;
};

#if defined(TESSERA_DEFAULT_BACKEND_CUDA)
using default_backend = cuda;
#else
/// The backend `Tensor<T>` means when none is named (CMake option TESSERA_DEFAULT_BACKEND).
using default_backend = cpu;
#endif

TESSERA_END_NAMESPACE
