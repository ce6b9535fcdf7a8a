// tessera/backend/cuda/memory.hpp - device memory for the CUDA backend, through a caching
// allocator, and host <-> device copies.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../core/backend.hpp"
#include "error.hpp"
#include "launch.hpp"
#include "upload_staging.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Keeps freed device blocks in free lists per device and stream, keyed by rounded size, so the
/// hot path (an op allocating its output, a temporary dying) never calls cudaMalloc or cudaFree:
/// both are slow and cudaFree synchronizes the whole device. A block belongs to the stream that
/// was current when it was allocated (cuda_stream), and only that stream's allocations reuse it:
/// reusing a block right away is safe because work on the freed block was issued on that stream,
/// ahead of its next owner's. A block also used on other streams (record_stream) waits, when
/// freed, for events recorded on those streams before it is reused. Cached blocks go back to the
/// driver on empty_cuda_cache(), or when cudaMalloc runs out of memory.
class device_block_cache {
 public:
  static constexpr size_t granule = 512;            // small sizes round to this
  static constexpr size_t large = size_t{1} << 20;  // from here, round to 1/8 of a binade

  static device_block_cache& instance() {
    // Never destroyed: tensors in statics may outlive main.
    static auto* c = new device_block_cache;
    return *c;
  }

  void* allocate(size_t bytes) {
    const size_t rounded = round_up(bytes == 0 ? 1 : bytes);
    const int dev = cuda_current_device();
    const cudaStream_t stream = cuda_stream();
    {
      std::lock_guard lock(mu_);
      reclaim_recorded();
      auto it = free_.find(key{dev, stream_id(stream), rounded});
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= rounded;
        live_.emplace(p, block{dev, rounded, stream, {}});
#if defined(TESSERA_CUDA_HOST_EMULATION)
        // The emulated cudaMalloc fills new blocks with 0xff (NaN, -1); a reused block gets the
        // same, queued on its stream behind its previous owner's work, so a kernel that reads
        // memory it never wrote shows it whichever block it is given.
        (void)cudaMemsetAsync(p, 0xff, rounded, stream);
#endif
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, rounded);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release(dev);  // cached blocks of other sizes may make room
      e = cudaMalloc(&p, rounded);
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      (void)cudaGetLastError();
      fail<backend_error>("cuda allocate", "cudaMalloc of ", rounded, " bytes on device ", dev,
                          " failed: ", cudaGetErrorString(e), " (", free_b, " of ", total_b,
                          " bytes free)");
    }
    std::lock_guard lock(mu_);
    live_.emplace(p, block{dev, rounded, stream, {}});
    return p;
  }

  /// Returns a block to its stream's free list. Never throws, and calls CUDA only for a block
  /// recorded on other streams (to record events on them; it runs in destructors, possibly after
  /// the runtime has shut down, when such a block is dropped instead).
  void deallocate(void* p, size_t) noexcept {
    if (!p) return;
    std::lock_guard lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: nothing sensible to do in a destructor
    block b = std::move(it->second);
    live_.erase(it);
    if (b.uses.empty()) return keep_free(p, b);
    recorded r{p, b, {}};
    for (cudaStream_t s : b.uses) {
      cudaEvent_t ev = nullptr;
      if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
          cudaEventRecord(ev, s) != cudaSuccess) {
        (void)cudaGetLastError();
        if (ev) (void)cudaEventDestroy(ev);
        for (cudaEvent_t done : r.events) (void)cudaEventDestroy(done);
        return;  // the runtime is gone (or the stream): the block is not reused
      }
      r.events.push_back(ev);
    }
    r.b.uses.clear();
    recorded_.push_back(std::move(r));
  }

  /// Marks the block at `p` (as allocate returned it) as used by work on `stream` too: when it is
  /// freed it is reused only after that work (see cuda_record_stream). No-op for the block's own
  /// stream and for pointers this cache does not own.
  void record_stream(void* p, cudaStream_t stream) {
    std::lock_guard lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end() || it->second.stream == stream) return;
    auto& uses = it->second.uses;
    if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
  }

  /// cudaFree's every cached block of `device` (all devices when device < 0), after waiting for
  /// the events of freed blocks recorded on other streams.
  void release(int device = -1) {
    std::lock_guard lock(mu_);
    if (free_.empty() && recorded_.empty()) return;  // harmless on a machine without GPU
    int prev = -1;
    TESSERA_CUDA_CHECK(cudaGetDevice(&prev));
    for (auto it = recorded_.begin(); it != recorded_.end();) {
      if (device >= 0 && it->b.device != device) {
        ++it;
        continue;
      }
      for (cudaEvent_t ev : it->events) {
        TESSERA_CUDA_CHECK(cudaEventSynchronize(ev));
        TESSERA_CUDA_CHECK(cudaEventDestroy(ev));
      }
      keep_free(it->p, it->b);
      it = recorded_.erase(it);
    }
    for (auto it = free_.begin(); it != free_.end();) {
      if (device >= 0 && std::get<0>(it->first) != device) {
        ++it;
        continue;
      }
      TESSERA_CUDA_CHECK(cudaSetDevice(std::get<0>(it->first)));
      TESSERA_CUDA_CHECK(cudaFree(it->second));
      cached_ -= std::get<2>(it->first);
      it = free_.erase(it);
    }
    TESSERA_CUDA_CHECK(cudaSetDevice(prev));
  }

  /// Bytes held in free lists (not counting blocks in use, or freed ones waiting for another
  /// stream's work).
  size_t cached_bytes() {
    std::lock_guard lock(mu_);
    return cached_;
  }
  /// Bytes of blocks currently owned by tensors (rounded sizes).
  size_t live_bytes() {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& kv : live_) n += kv.second.bytes;
    return n;
  }
  /// Freed blocks waiting for work on streams they were recorded on.
  size_t waiting_blocks() {
    std::lock_guard lock(mu_);
    return recorded_.size();
  }

 private:
  struct block {
    int device;
    size_t bytes;
    cudaStream_t stream;             // current when allocated: its free list
    std::vector<cudaStream_t> uses;  // other streams that used it (record_stream)
  };
  /// A freed block that other streams used: reused once every event has completed.
  struct recorded {
    void* p;
    block b;
    std::vector<cudaEvent_t> events;
  };
  using key = std::tuple<int, uintptr_t, size_t>;  // device, stream, rounded size
  static uintptr_t stream_id(cudaStream_t s) { return reinterpret_cast<uintptr_t>(s); }

  /// Puts block p on its stream's free list (under mu_).
  void keep_free(void* p, const block& b) {
    free_.emplace(key{b.device, stream_id(b.stream), b.bytes}, p);
    cached_ += b.bytes;
  }

  /// Moves recorded blocks whose events have all completed to their free lists (under mu_).
  void reclaim_recorded() {
    for (auto it = recorded_.begin(); it != recorded_.end();) {
      if (!std::all_of(it->events.begin(), it->events.end(), cuda_event_done)) {
        ++it;
        continue;
      }
      for (cudaEvent_t ev : it->events) (void)cudaEventDestroy(ev);
      keep_free(it->p, it->b);
      it = recorded_.erase(it);
    }
  }

  // Small sizes round to 512 bytes; large ones to 1/8 of their power of two, so a block serves
  // sizes within 12.5% of each other and never wastes more than that.
  static size_t round_up(size_t n) {
    n = (n + granule - 1) / granule * granule;
    if (n < large) return n;
    const size_t p = size_t{1} << (63 - __builtin_clzll(n));
    const size_t step = p / 8;
    return (n + step - 1) / step * step;
  }

  std::mutex mu_;
  std::multimap<key, void*> free_;
  std::unordered_map<void*, block> live_;
  std::vector<recorded> recorded_;
  size_t cached_ = 0;
};

/// Device scratch from the caching allocator, returned to it at scope exit. Returning it while
/// kernels that use it are still queued is safe: its next user is ordered after them.
class cuda_scratch {
 public:
  explicit cuda_scratch(size_t bytes)
      : bytes_(bytes), p_(bytes ? device_block_cache::instance().allocate(bytes) : nullptr) {}
  ~cuda_scratch() { device_block_cache::instance().deallocate(p_, bytes_); }
  cuda_scratch(const cuda_scratch&) = delete;
  cuda_scratch& operator=(const cuda_scratch&) = delete;
  void* get() const { return p_; }

 private:
  size_t bytes_;
  void* p_;
};

}  // namespace detail

/// Returns every device block cached by the CUDA allocator to the driver (cudaFree), on all
/// devices. Blocks owned by live tensors are not affected. Throws backend_error on a CUDA error.
inline void empty_cuda_cache() { detail::device_block_cache::instance().release(); }

/// Bytes the CUDA caching allocator holds in its free lists, ready for reuse.
inline size_t cuda_cached_bytes() { return detail::device_block_cache::instance().cached_bytes(); }

namespace backend {

/// Device memory: allocations come from the caching allocator on the current device; copies
/// are issued on cuda_stream(). Copies to the host return when the data has arrived. Copies from
/// the host return with the source read (its buffer may be reused at once) but without waiting
/// for the stream, staged through pinned blocks (cuda_upload_staging; beyond 16 MiB they wait).
/// Device-to-device copies are asynchronous like kernels.
template <>
struct memory<cuda> {
  static constexpr bool host_accessible = false;
  static void* allocate(size_t bytes) {
    return detail::device_block_cache::instance().allocate(bytes);
  }
  static void deallocate(void* p, size_t bytes) {
    detail::device_block_cache::instance().deallocate(p, bytes);
  }
  static void copy_from_host(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    if (detail::cuda_upload_staging::instance().upload(dst, src, bytes)) return;
    // Too large to stage: waiting makes the copy safe for pinned sources too, which the DMA would
    // read after the call.
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_stream()));
    detail::cuda_wait_stream();
  }
  static void copy_to_host(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream()));
    detail::cuda_wait_stream();
  }
  static void copy(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream()));
  }
  /// Waits for every op issued so far, on every stream of the current device, to finish (and
  /// reports a fault any of them raised).
  static void synchronize() { detail::cuda_wait_device(); }
};

}  // namespace backend
TESSERA_END_NAMESPACE
