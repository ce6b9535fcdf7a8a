// tessera/backend/cuda/error.hpp - turns CUDA runtime errors into tessera::backend_error.
#pragma once

#include <cuda_runtime.h>

#include "../../core/error.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Throws backend_error "tessera::cuda: <call> failed at <file>:<line>: <name>: <description>"
/// when `e` is not cudaSuccess. The runtime's last-error slot is cleared first, so a recoverable
/// failure (say an out-of-memory cudaMalloc) is not reported again by the next launch check.
inline void cuda_check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  fail<backend_error>("cuda", call, " failed at ", file, ":", line, ": ", cudaGetErrorName(e), ": ",
                      cudaGetErrorString(e));
}

}  // namespace detail
TESSERA_END_NAMESPACE

/// Evaluates a CUDA runtime call and throws tessera::backend_error naming the call, file:line
/// and the CUDA error string unless it returns cudaSuccess.
#define TESSERA_CUDA_CHECK(expr) ::tessera::detail::cuda_check((expr), #expr, __FILE__, __LINE__)
