// tessera/backend/cuda/deferred_check.hpp - checks of input values that the device makes and the
// host reports at its next wait for the stream, so that an op need not wait to check them.
//
// A loss reads its labels on the device; checking them on the host would cost a wait in the
// middle of every training step (the host idle until the forward pass is done, the device idle
// while the host then queues the backward pass). Instead the op arms a flag word in mapped
// pinned host memory and its kernel sets the flag when it meets a bad value. The host reads the
// flags after every wait (cuda_wait_stream: copies to and from the host, synchronize), where
// they cost a load each; a set flag runs the op's handler, which finds the bad value on the host
// and throws the op's usual exception. So a bad label still gets the op's exception, naming the
// op and the value, at the first host read after the op (the loss's item(), say) rather than at
// the call; kernels never read or write out of bounds meanwhile.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <mutex>
#include <vector>

#include "error.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The armed checks of this process: up to `slots` flag words, each with its op's handler.
/// Armed checks are settled (and their slots freed) at every wait; an op arming one when all are
/// taken waits first.
class cuda_deferred_checks {
 public:
  static constexpr int slots = 64;  // a loop without waits waits once per 64 checks

  static cuda_deferred_checks& instance() {
    // Never destroyed: the pinned block must outlive every kernel and static tensor.
    static auto* c = new cuda_deferred_checks;
    return *c;
  }

  /// A zeroed flag word, as the device sees it, for one kernel to set to nonzero when a check
  /// fails; on_fault runs on the host at the next wait if it was set. Waits first (settling the
  /// armed checks) when every slot is taken.
  int* arm(std::function<void()> on_fault, void (*wait)()) {
    std::unique_lock lock(mu_);
    if (!host_) allocate();
    while (pending_.size() >= slots) {  // another thread may take the freed slots first
      lock.unlock();
      wait();  // settles, which frees every slot
      lock.lock();
    }
    const size_t i = pending_.size();
    host_[i] = 0;  // written before the launch that reads it, so the device sees the zero
    pending_.push_back(std::move(on_fault));
    return device_ + i;
  }

  /// After a wait (every armed kernel has finished): forgets every armed check, then runs the
  /// handler of the first whose flag was set, which throws. Handlers wait too (to read the bad
  /// values); settling does not nest.
  void settle() {
    std::vector<std::function<void()>> faulted;
    {
      std::lock_guard lock(mu_);
      if (settling_ || pending_.empty()) return;
      for (size_t i = 0; i < pending_.size(); ++i)
        if (host_[i] != 0) faulted.push_back(std::move(pending_[i]));
      pending_.clear();
      if (faulted.empty()) return;
      settling_ = true;
    }
    struct done {
      cuda_deferred_checks* c;
      ~done() {
        std::lock_guard lock(c->mu_);
        c->settling_ = false;
      }
    } reset{this};
    for (auto& f : faulted) f();
  }

 private:
  void allocate() {
    void* p = nullptr;
    TESSERA_CUDA_CHECK(
        cudaHostAlloc(&p, slots * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    void* d = nullptr;
    TESSERA_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    host_ = static_cast<volatile int*>(p);
    device_ = static_cast<int*>(d);
  }

  std::mutex mu_;
  volatile int* host_ = nullptr;
  int* device_ = nullptr;
  std::vector<std::function<void()>> pending_;
  bool settling_ = false;
};

}  // namespace detail
TESSERA_END_NAMESPACE
