// tessera/backend/cuda/upload_staging.hpp - pinned host blocks that let a copy to the device
// return without waiting for the stream.
//
// A copy from pageable host memory may not be left in the stream's queue: the caller may reuse
// or free its buffer as soon as the call returns. So memory<cuda>::copy_from_host used to wait
// for the stream after each copy, and a training loop that uploads a batch per step waited once
// a step for the previous step's kernels: the device idle while the host then queued the next
// step. Instead the host copies the data into a pinned block of its own (a memcpy: the same
// staging the driver does for a pageable source), queues the DMA from that block, and records an
// event behind it; the block is reused once its event has completed. The caller's buffer is
// free at return and the host never waits. Copies above max_copy_bytes, or when every block is
// in flight and the pool is at pool_bytes, still copy directly and wait (a large copy is bound
// by its bandwidth, not by the wait).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <vector>

#include "error.hpp"
#include "launch.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The staging blocks of this process, per device (an event belongs to one device).
class cuda_upload_staging {
 public:
  static constexpr size_t max_copy_bytes = size_t{16} << 20;  // larger copies wait
  static constexpr size_t pool_bytes = size_t{64} << 20;      // pinned memory held at most
  static constexpr size_t min_block_bytes = size_t{64} << 10;

  static cuda_upload_staging& instance() {
    // Never destroyed: queued copies may read the blocks until the process ends.
    static auto* s = new cuda_upload_staging;
    return *s;
  }

  /// Copies `bytes` from host `src` into a staging block and queues the block's copy to device
  /// `dst` on cuda_stream(), without waiting. False, having queued nothing, when the copy is too
  /// large to stage or no block is free and the pool is full: the caller copies and waits.
  bool upload(void* dst, const void* src, size_t bytes) {
    if (bytes == 0 || bytes > max_copy_bytes) return false;
    const int dev = cuda_current_device();
    std::lock_guard lock(mu_);
    block* b = free_block(dev, bytes);
    if (!b) b = new_block(dev, bytes);
    if (!b) return false;
    std::memcpy(b->host, src, bytes);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, b->host, bytes, cudaMemcpyHostToDevice, cuda_stream()));
    TESSERA_CUDA_CHECK(cudaEventRecord(b->done, cuda_stream()));
    b->in_flight = true;
    return true;
  }

  /// Staging blocks held (all devices), and the pinned bytes they hold.
  size_t blocks() {
    std::lock_guard lock(mu_);
    return blocks_.size();
  }
  size_t held_bytes() {
    std::lock_guard lock(mu_);
    return held_;
  }

 private:
  struct block {
    int device;
    size_t bytes;
    void* host;
    cudaEvent_t done;
    bool in_flight;
  };

  /// The smallest block of `dev` that holds `bytes` and whose last copy has finished.
  block* free_block(int dev, size_t bytes) {
    block* best = nullptr;
    for (block& b : blocks_) {
      if (b.device != dev || b.bytes < bytes || (best && b.bytes >= best->bytes)) continue;
      if (b.in_flight) {
        if (!cuda_event_done(b.done)) continue;
        b.in_flight = false;
      }
      best = &b;
    }
    return best;
  }

  /// A new block of at least `bytes` (a power of two, min_block_bytes or more), or null when
  /// it would take the pool past pool_bytes.
  block* new_block(int dev, size_t bytes) {
    size_t size = min_block_bytes;
    while (size < bytes) size *= 2;
    if (held_ + size > pool_bytes) return nullptr;
    block b{dev, size, nullptr, nullptr, false};
    TESSERA_CUDA_CHECK(cudaHostAlloc(&b.host, size, cudaHostAllocPortable));
    const cudaError_t e = cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      (void)cudaFreeHost(b.host);
      TESSERA_CUDA_CHECK(e);
    }
    blocks_.push_back(b);
    held_ += size;
    return &blocks_.back();
  }

  std::mutex mu_;
  std::vector<block> blocks_;  // pointers into it live only under mu_
  size_t held_ = 0;
};

}  // namespace detail
TESSERA_END_NAMESPACE
