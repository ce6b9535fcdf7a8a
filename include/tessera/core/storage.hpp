// tessera/core/storage.hpp - reference-counted memory blocks and the kernel-facing strided view.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "backend.hpp"
#include "shape.hpp"

TESSERA_BEGIN_NAMESPACE

namespace detail {

/// One allocation of a backend; tensors share it through shared_ptr (copying a Tensor shares
/// data, as in LibTorch).
struct storage_block {
  void* ptr = nullptr;
  size_t bytes = 0;
  void (*release)(void*, size_t) = nullptr;
  /// How many in-place writes the block has seen (see Tensor::version). Shared by every view of
  /// it, as in PyTorch: autograd compares it to refuse gradients from overwritten saved tensors.
  std::atomic<uint64_t> version{0};
  storage_block(void* p, size_t n, void (*r)(void*, size_t)) : ptr(p), bytes(n), release(r) {}
  storage_block(const storage_block&) = delete;
  storage_block& operator=(const storage_block&) = delete;
  ~storage_block() {
    if (release) release(ptr, bytes);
  }
};

/// Allocates room for `count` elements of `elem_size` bytes on backend B; throws shape_error if
/// the byte count overflows.
template <class B>
std::shared_ptr<storage_block> allocate_storage(int64_t count, size_t elem_size) {
  size_t bytes = 0;
  if (count < 0 || __builtin_mul_overflow(static_cast<size_t>(count), elem_size, &bytes))
    fail<shape_error>("allocate", count, " elements of ", elem_size, " bytes overflow size_t");
  void* p = backend::memory<B>::allocate(bytes);
  return std::make_shared<storage_block>(p, bytes, &backend::memory<B>::deallocate);
}

/// What a kernel sees of a tensor: a pointer to element 0 (offset applied), extents and element
/// strides. Kernels get inputs already broadcast to the output's shape (stride 0 where repeated).
template <class T>
struct strided {
  T* data;
  Shape shape;
  Strides strides;
};

}  // namespace detail

TESSERA_END_NAMESPACE
