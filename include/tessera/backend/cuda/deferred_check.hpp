// tessera/backend/cuda/deferred_check.hpp - checks of input values that the device makes and the
// host reports at its next wait for the stream, so that an op need not wait to check them.
//
// A loss reads its labels on the device; checking them on the host would cost a wait in the
// middle of every training step (the host idle until the forward pass is done, the device idle
// while the host then queues the backward pass). Instead the op arms a flag word in mapped
// pinned host memory and its kernel sets the flag when it meets a bad value. The host reads the
// flags after every wait for the stream the op ran on (cuda_wait_stream: copies to and from the
// host; cuda_wait_device: synchronize), where they cost a load each; a set flag runs the op's
// handler, which finds the bad value on the host and throws the op's usual exception. So a bad
// label still gets the op's exception, naming the op and the value, at the first host read after
// the op (the loss's item(), say) rather than at the call; kernels never read or write out of
// bounds meanwhile.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <mutex>
#include <vector>

#include "error.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The armed checks of this process: up to `slots` flag words, each with its op's handler and
/// the stream its kernel runs on. A wait for a stream settles the checks armed on it (and frees
/// their slots); an op arming one when all are taken waits for the device first.
class cuda_deferred_checks {
 public:
  static constexpr int slots = 64;  // a loop without waits waits once per 64 checks

  static cuda_deferred_checks& instance() {
    // Never destroyed: the pinned block must outlive every kernel and static tensor.
    static auto* c = new cuda_deferred_checks;
    return *c;
  }

  /// A zeroed flag word, as the device sees it, for one kernel on `stream` to set to nonzero when
  /// a check fails; on_fault runs on the host at the next wait for that stream (or the device)
  /// if it was set. Calls wait_device (which settles every check) first when every slot is taken.
  int* arm(std::function<void()> on_fault, cudaStream_t stream, void (*wait_device)()) {
    std::unique_lock lock(mu_);
    if (!host_) allocate();
    while (free_.empty()) {  // another thread may take the freed slots first
      lock.unlock();
      wait_device();
      lock.lock();
    }
    const int i = free_.back();
    free_.pop_back();
    host_[i] = 0;  // written before the launch that reads it, so the device sees the zero
    pending_.push_back({i, stream, std::move(on_fault)});
    return device_ + i;
  }

  /// After a wait for `stream` (its armed kernels have finished): forgets the checks armed on it,
  /// then runs the handler of the first whose flag was set, which throws. Handlers wait too (to
  /// read the bad values); settling does not nest.
  void settle(cudaStream_t stream) {
    settle_if([stream](cudaStream_t s) { return s == stream; });
  }
  /// After a wait for the whole device: settle() for every stream.
  void settle_all() {
    settle_if([](cudaStream_t) { return true; });
  }

  /// Checks armed and not yet settled.
  size_t armed() {
    std::lock_guard lock(mu_);
    return pending_.size();
  }

 private:
  struct check {
    int slot;
    cudaStream_t stream;
    std::function<void()> on_fault;
  };

  template <class Waited>
  void settle_if(Waited waited) {
    std::vector<std::function<void()>> faulted;
    {
      std::lock_guard lock(mu_);
      if (settling_ || pending_.empty()) return;
      size_t kept = 0;
      for (check& c : pending_) {
        if (!waited(c.stream)) {
          pending_[kept++] = std::move(c);
          continue;
        }
        if (host_[c.slot] != 0) faulted.push_back(std::move(c.on_fault));
        free_.push_back(c.slot);
      }
      pending_.resize(kept);
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

  void allocate() {
    void* p = nullptr;
    TESSERA_CUDA_CHECK(
        cudaHostAlloc(&p, slots * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    void* d = nullptr;
    TESSERA_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    host_ = static_cast<volatile int*>(p);
    device_ = static_cast<int*>(d);
    for (int i = slots - 1; i >= 0; --i) free_.push_back(i);
  }

  std::mutex mu_;
  volatile int* host_ = nullptr;
  int* device_ = nullptr;
  std::vector<check> pending_;  // in arming order
  std::vector<int> free_;       // slots not armed
  bool settling_ = false;
};

}  // namespace detail
TESSERA_END_NAMESPACE
