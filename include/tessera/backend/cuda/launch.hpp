// tessera/backend/cuda/launch.hpp - the stream every CUDA op runs on, and launch geometry.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "deferred_check.hpp"
#include "error.hpp"

TESSERA_BEGIN_NAMESPACE

namespace detail {
/// The calling thread's current stream (see cuda_stream).
inline cudaStream_t& cuda_stream_slot() {
  thread_local cudaStream_t current = cudaStreamLegacy;
  return current;
}
}  // namespace detail

/// The stream tessera's CUDA kernels and copies issued from this thread run on: the legacy
/// default stream unless a cuda_stream_guard names another. The default is named explicitly
/// (cudaStreamLegacy), so compiling with `--default-stream per-thread` does not change it, and
/// work from every host thread is ordered on it. Ops run on the current stream of the thread that
/// calls them (LibTorch's model: see docs/cuda.md, "Streams and synchronization").
inline cudaStream_t cuda_stream() { return detail::cuda_stream_slot(); }

/// Makes `stream` the calling thread's current stream (cuda_stream) for its lifetime; the
/// previous one comes back at destruction. Guards nest. The stream must outlive the guard and the
/// work issued under it; tessera neither creates nor destroys streams.
class cuda_stream_guard {
 public:
  explicit cuda_stream_guard(cudaStream_t stream) : previous_(detail::cuda_stream_slot()) {
    detail::cuda_stream_slot() = stream;
  }
  ~cuda_stream_guard() { detail::cuda_stream_slot() = previous_; }
  cuda_stream_guard(const cuda_stream_guard&) = delete;
  cuda_stream_guard& operator=(const cuda_stream_guard&) = delete;

 private:
  cudaStream_t previous_;
};

/// What tessera has asked of CUDA devices in this process: kernels launched, and the times the
/// host waited for a stream or the device (copies to the host, large copies from it, synchronize,
/// a full set of deferred checks). A wait in the middle of a training step costs the overlap of
/// host and device: until it, the device runs what was queued while the host queues nothing.
/// Benchmarks report both per step; the difference of two readings is what the code between
/// them did (all host threads counted).
struct cuda_activity {
  int64_t launches = 0;
  int64_t host_waits = 0;
};

namespace detail {
struct cuda_activity_counters {
  std::atomic<int64_t> launches{0}, host_waits{0};
};
inline cuda_activity_counters& cuda_counters() {
  static cuda_activity_counters c;
  return c;
}
/// Waits for everything issued on cuda_stream() (reporting a fault any of it raised), counts the
/// wait, and settles the deferred checks armed on that stream (throwing for a bad value one of
/// them found).
inline void cuda_wait_stream() {
  cuda_counters().host_waits.fetch_add(1, std::memory_order_relaxed);
  const cudaStream_t stream = cuda_stream();
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  cuda_deferred_checks::instance().settle(stream);
}
/// Waits for everything issued on the current device, on every stream, counts the wait, and
/// settles every deferred check.
inline void cuda_wait_device() {
  cuda_counters().host_waits.fetch_add(1, std::memory_order_relaxed);
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  cuda_deferred_checks::instance().settle_all();
}
/// A flag word for one kernel on cuda_stream() to set when a check of its input fails; on_fault
/// runs (and throws) at the next wait for that stream if it was set. See deferred_check.hpp.
inline int* cuda_arm_check(std::function<void()> on_fault) {
  return cuda_deferred_checks::instance().arm(std::move(on_fault), cuda_stream(),
                                              &cuda_wait_device);
}

/// Whether the work before event e has completed: false while it is queued ("not ready", a
/// state the runtime also leaves in its error slot, which this clears); throws for a real error.
inline bool cuda_event_done(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  TESSERA_CUDA_CHECK(r);
  return true;
}
}  // namespace detail

/// The counts of cuda_activity so far.
inline cuda_activity cuda_activity_counts() {
  const auto& c = detail::cuda_counters();
  return {c.launches.load(std::memory_order_relaxed), c.host_waits.load(std::memory_order_relaxed)};
}

namespace detail {

/// The calling thread's current device.
inline int cuda_current_device() {
  int d = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

/// Multiprocessor count of the current device, queried once per device.
inline int cuda_sm_count() {
  constexpr int cached_devices = 64;
  static std::atomic<int> cache[cached_devices];  // zero: not yet queried
  const int d = cuda_current_device();
  int n = d < cached_devices ? cache[d].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d));
    if (n < 1) n = 1;
    if (d < cached_devices) cache[d].store(n, std::memory_order_relaxed);
  }
  return n;
}

/// Blocks for a grid-stride loop over `items` work items, `per_block` at a time: enough blocks
/// to cover the items, capped at a few waves of the device (each thread then loops). The cap
/// never changes results: kernels assign work by item, not by block.
inline unsigned cuda_grid(int64_t items, int64_t per_block) {
  const int64_t want = (items + per_block - 1) / per_block;
  const int64_t cap = int64_t{cuda_sm_count()} * 32;
  const int64_t g = want < cap ? want : cap;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

/// Launches kernel<<<grid, block, smem_bytes, cuda_stream()>>>(args...) and checks the launch
/// (see cuda_check_launch; `what` names the kernel in the error). Every tessera kernel starts
/// here, which keeps the checks in one place and lets a host emulation of the execution model
/// (TESSERA_CUDA_HOST_EMULATION, tests/cuda_emu) run the same kernels on the CPU. smem_bytes is
/// the kernel's dynamic shared memory (cuda_dynamic_smem in async_copy.cuh); above 48 KB the
/// kernel's limit must have been raised with cudaFuncSetAttribute.
template <class... P, class... A>
void cuda_launch_smem(const char* what, void (*kernel)(P...), dim3 grid, dim3 block,
                      size_t smem_bytes, A&&... args) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::launch_kernel(what, kernel, grid, block, smem_bytes, cuda_stream(),
                                        std::forward<A>(args)...);
#else
  // clang-format reads a .hpp as C++, where >>> is not one token:
  // clang-format off
  kernel<<<grid, block, smem_bytes, cuda_stream()>>>(std::forward<A>(args)...);
  // clang-format on
#endif
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    fail<backend_error>("cuda", "launch of ", what, " failed: ", cudaGetErrorName(e), ": ",
                        cudaGetErrorString(e));
  cuda_counters().launches.fetch_add(1, std::memory_order_relaxed);
#if defined(TESSERA_CUDA_SYNC_LAUNCHES)
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    (void)cudaGetLastError();
    fail<backend_error>("cuda", what, " failed while running: ", cudaGetErrorName(e), ": ",
                        cudaGetErrorString(e));
  }
#endif
}

/// Whether kernel may run with `bytes` of dynamic shared memory: above 48 KB this raises its
/// limit (cudaFuncSetAttribute), and answers false when the device refuses (too little shared
/// memory per block on this GPU). Asks the runtime each time; cuda_try_launch_smem asks once.
template <class... P>
bool cuda_allow_smem(void (*kernel)(P...), int bytes) {
  const bool ok = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       bytes) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

/// A kernel that dispatch may choose for an op: whether it may (tests and benchmarks switch one
/// off to run the next choice on the same inputs) and how many launches it has had (tests check
/// which kernel ran; one relaxed increment per launch).
struct cuda_kernel_choice {
  std::atomic<bool> enabled{true};
  std::atomic<int64_t> launches{0};
};

/// Launches Kernel as cuda_launch_smem does with Bytes of dynamic shared memory and counts it in
/// `choice`; false, launching nothing, when the choice is switched off or the device refuses the
/// shared memory (the caller then falls back to another kernel). The kernel and its size are
/// template arguments so that the runtime is asked about them once, by a function-local static
/// (thread-safe, and free afterwards: no lock on the launch path). Once per process, not per
/// device, like the GEMM's other kernel choices.
template <auto Kernel, int Bytes, class... A>
bool cuda_try_launch_smem(cuda_kernel_choice& choice, const char* what, dim3 grid, dim3 block,
                          A&&... args) {
  if (!choice.enabled.load(std::memory_order_relaxed)) return false;
  static const bool allowed = cuda_allow_smem(Kernel, Bytes);
  if (!allowed) return false;
  cuda_launch_smem(what, Kernel, grid, block, static_cast<size_t>(Bytes), std::forward<A>(args)...);
  choice.launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

/// cuda_launch_smem without dynamic shared memory.
template <class... P, class... A>
void cuda_launch(const char* what, void (*kernel)(P...), dim3 grid, dim3 block, A&&... args) {
  cuda_launch_smem(what, kernel, grid, block, 0, std::forward<A>(args)...);
}

}  // namespace detail
TESSERA_END_NAMESPACE
