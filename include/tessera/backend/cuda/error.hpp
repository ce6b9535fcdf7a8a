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

/// Checks the launch of the kernel just issued (bad configuration, missing device code for this
/// GPU's architecture). Kernels run asynchronously, so faults inside a kernel surface at the next
/// synchronizing call; define TESSERA_CUDA_SYNC_LAUNCHES to wait after every launch and report
/// them at the launch that caused them (debugging only: it serializes host and device).
inline void cuda_check_launch(const char* kernel, const char* file, int line) {
  cuda_check(cudaGetLastError(), kernel, file, line);
#if defined(TESSERA_CUDA_SYNC_LAUNCHES)
  cuda_check(cudaDeviceSynchronize(), kernel, file, line);
#endif
}

}  // namespace detail
TESSERA_END_NAMESPACE

/// Evaluates a CUDA runtime call and throws tessera::backend_error naming the call, file:line
/// and the CUDA error string unless it returns cudaSuccess.
#define TESSERA_CUDA_CHECK(expr) ::tessera::detail::cuda_check((expr), #expr, __FILE__, __LINE__)

/// Checks the most recent kernel launch; `name` says which kernel, for the message.
#define TESSERA_CUDA_CHECK_LAUNCH(name) \
  ::tessera::detail::cuda_check_launch("launch of " name, __FILE__, __LINE__)
