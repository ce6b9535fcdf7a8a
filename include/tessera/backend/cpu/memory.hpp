// tessera/backend/cpu/memory.hpp - host memory for the CPU backend, with a caching allocator.
#pragma once

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "../../core/backend.hpp"
#include "../../core/error.hpp"

TESSERA_BEGIN_NAMESPACE

namespace detail {

/// Keeps freed large blocks for reuse: a fresh multi-megabyte output otherwise page-faults on
/// every first touch (the kernel zero-fills each 4 KiB page), which costs as much as the op.
/// Small blocks go straight to the system allocator, which already recycles them.
class host_block_cache {
 public:
  static constexpr size_t alignment = 64;                // a cache line; also AVX-512 width
  static constexpr size_t min_cached = size_t{1} << 20;  // cache blocks of 1 MiB and more
  static constexpr size_t max_cached_total = size_t{2} << 30;

  static host_block_cache& instance() {
    static auto* c = new host_block_cache;  // never destroyed: tensors in statics may outlive main
    return *c;
  }
  void* allocate(size_t bytes) {
    if (bytes == 0) bytes = 1;
    const size_t rounded = round_up(bytes);
    if (rounded >= min_cached) {
      std::lock_guard lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= rounded;
        return p;
      }
    }
    void* p = std::aligned_alloc(alignment, rounded);
    if (!p) {
      release_all();
      p = std::aligned_alloc(alignment, rounded);
      if (!p) fail<backend_error>("cpu allocate", "out of memory allocating ", bytes, " bytes");
    }
    return p;
  }
  void deallocate(void* p, size_t bytes) {
    if (!p) return;
    const size_t rounded = round_up(bytes == 0 ? 1 : bytes);
    if (rounded >= min_cached) {
      std::lock_guard lock(mu_);
      if (cached_ + rounded <= max_cached_total) {
        free_.emplace(rounded, p);
        cached_ += rounded;
        return;
      }
    }
    std::free(p);
  }
  /// Returns every cached block to the system.
  void release_all() {
    std::lock_guard lock(mu_);
    for (auto& [n, p] : free_) std::free(p);
    free_.clear();
    cached_ = 0;
  }
  size_t cached_bytes() {
    std::lock_guard lock(mu_);
    return cached_;
  }

 private:
  // Small sizes round to the alignment; large ones to 1/8 of their power of two, so a block is
  // reused for sizes within 12.5% without wasting more than that.
  static size_t round_up(size_t n) {
    n = (n + alignment - 1) / alignment * alignment;
    if (n < min_cached) return n;
    size_t p = size_t{1} << (63 - __builtin_clzll(n));
    size_t step = p / 8;
    return (n + step - 1) / step * step;
  }
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

}  // namespace detail

/// Returns the CPU caching allocator's free blocks to the system.
inline void empty_cpu_cache() { detail::host_block_cache::instance().release_all(); }

namespace backend {
template <>
struct memory<cpu> {
  static constexpr bool host_accessible = true;
  static void* allocate(size_t bytes) {
    return detail::host_block_cache::instance().allocate(bytes);
  }
  static void deallocate(void* p, size_t bytes) {
    detail::host_block_cache::instance().deallocate(p, bytes);
  }
  static void copy_from_host(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  static void copy_to_host(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  static void copy(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  static void synchronize() {}
};
}  // namespace backend

TESSERA_END_NAMESPACE
