// tessera/backend/cuda/streams.hpp - using a tensor on a stream other than the one its memory
// belongs to. (The current stream itself, cuda_stream and cuda_stream_guard, is in launch.hpp.)
#pragma once

#include <cuda_runtime.h>

#include "../../core/tensor.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE

/// Tells the caching allocator that work queued on `stream` uses `t`'s memory, which belongs to
/// the stream that was current when it was allocated: when the memory is freed it is reused only
/// after the work queued on `stream` up to that moment has finished (an event recorded on it),
/// instead of at once by its own stream. Call it for a tensor allocated under one stream and
/// read or written by ops under another, unless that stream is synchronized with the tensor's own
/// before the tensor dies (as LibTorch's record_stream). Views share their base's memory.
template <class T>
void cuda_record_stream(const Tensor<T, cuda>& t, cudaStream_t stream) {
  if (t.storage()) detail::device_block_cache::instance().record_stream(t.storage()->ptr, stream);
}

TESSERA_END_NAMESPACE
