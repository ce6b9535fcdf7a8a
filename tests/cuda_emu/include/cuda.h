// tests/cuda_emu/include/cuda.h - the part of the CUDA driver API that tessera uses, for the
// host emulation (cuda_runtime.h beside it): tensor maps (CUtensorMap, cuTensorMapEncodeTiled,
// reached as on a GPU through cudaGetDriverEntryPointByVersion, defined here rather than in the
// runtime header because it hands out this file's function) and the TMA copy that reads them
// (tma_load, through tessera's tma.cuh).
//
// What it models: the encoding checks the driver makes (16-byte aligned address and strides,
// extents, box sizes, the 128-byte swizzle's 128-byte rows); a copy reads the box at its
// coordinates, elements outside the tensor as zeros, and writes it to shared memory row after
// row, in the 128-byte swizzle mode with the 16-byte chunk bits of each address (4-6) XORed with
// its bits 7-9, as the hardware does; the copy lands when its mbarrier's phase completes
// (cuda_runtime.h's mbarrier), and its reads of global memory must lie inside live device
// blocks. Only what tessera uses: tiled mode, no interleave, element strides 1, swizzle none or
// 128 bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cuda_runtime.h"

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

enum CUresult { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 };

enum CUtensorMapDataType {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
  CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
  CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
};
enum CUtensorMapInterleave { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum CUtensorMapSwizzle { CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_128B = 3 };
enum CUtensorMapL2promotion {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
};
enum CUtensorMapFloatOOBfill { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 };

typedef struct CUtensorMap_st {
  alignas(64) cuuint64_t opaque[16];
} CUtensorMap;

enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
};
#define cudaEnableDefault 0x0ULL

namespace tessera_cuda_emulation {

/// What an emulated CUtensorMap holds (in its opaque bytes).
struct tensor_map {
  const unsigned char* address;
  uint32_t rank, element_bytes, swizzle;
  uint64_t dims[5];
  uint64_t strides[5];  // bytes; strides[0] is the element size
  uint32_t box[5];
};
static_assert(sizeof(tensor_map) <= sizeof(CUtensorMap));

inline CUresult tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                                        void* address, const cuuint64_t* dims,
                                        const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* element_strides,
                                        CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion,
                                        CUtensorMapFloatOOBfill) {
  tensor_map t{};
  t.address = static_cast<const unsigned char*>(address);
  t.rank = rank;
  t.element_bytes = type == CU_TENSOR_MAP_DATA_TYPE_UINT8    ? 1
                    : type == CU_TENSOR_MAP_DATA_TYPE_UINT16 ? 2
                                                             : 4;
  t.swizzle = swizzle;
  bool ok = map && rank >= 1 && rank <= 5 && reinterpret_cast<uintptr_t>(address) % 16 == 0 &&
            interleave == CU_TENSOR_MAP_INTERLEAVE_NONE &&
            (swizzle == CU_TENSOR_MAP_SWIZZLE_NONE || swizzle == CU_TENSOR_MAP_SWIZZLE_128B);
  for (uint32_t d = 0; ok && d < rank; ++d) {
    t.dims[d] = dims[d];
    t.box[d] = box[d];
    t.strides[d] = d == 0 ? t.element_bytes : strides[d - 1];
    ok = dims[d] >= 1 && dims[d] <= (uint64_t{1} << 32) && box[d] >= 1 && box[d] <= 256 &&
         element_strides[d] == 1 &&
         (d == 0 || (strides[d - 1] % 16 == 0 && strides[d - 1] < (uint64_t{1} << 40)));
  }
  const uint64_t row_bytes = uint64_t{t.box[0]} * t.element_bytes;
  ok = ok && row_bytes % 16 == 0 && (swizzle != CU_TENSOR_MAP_SWIZZLE_128B || row_bytes == 128);
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  std::memset(map, 0, sizeof *map);
  std::memcpy(map, &t, sizeof t);
  return CUDA_SUCCESS;
}

/// cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [map,
/// coords], [barrier]: queues the copy of the box at coords (rank of the map's) to shared address
/// dst (128-byte aligned); it lands when the barrier's phase completes.
inline void tma_load(uint32_t dst, const CUtensorMap* map, const int32_t* coords, uint32_t rank,
                     uint32_t barrier) {
  tensor_map t;
  std::memcpy(&t, map, sizeof t);
  uint64_t elements = 1;
  for (uint32_t d = 0; d < t.rank; ++d) elements *= t.box[d];
  const uint64_t row_bytes = uint64_t{t.box[0]} * t.element_bytes,
                 bytes = elements * t.element_bytes;
  if (rank != t.rank || dst % 128 != 0 || dst + bytes > dynamic_smem_bytes) {
    std::fprintf(stderr,
                 "tessera cuda emulation: a %u-d TMA copy of a rank-%u map to shared bytes [%u, "
                 "%llu) of %zu: the ranks must agree, the destination 128-byte aligned and inside "
                 "the launch's shared memory\n",
                 rank, t.rank, dst, static_cast<unsigned long long>(dst + bytes),
                 dynamic_smem_bytes);
    running->failed = true;
    return;
  }
  int64_t at[5] = {0, 0, 0, 0, 0};
  for (uint32_t d = 0; d < rank; ++d) at[d] = coords[d];
  mbarrier_queue_copy(barrier, dst, static_cast<int64_t>(bytes), [t, at, dst, row_bytes, elements] {
    const uint64_t rows = elements / t.box[0];
    for (uint64_t row = 0; row < rows; ++row) {
      // The row's coordinates in dimensions 1 .. rank - 1, and whether it lies inside.
      int64_t offset = 0;
      bool inside = true;
      for (uint64_t d = 1, rest = row; d < t.rank; rest /= t.box[d], ++d) {
        const int64_t c = at[d] + static_cast<int64_t>(rest % t.box[d]);
        inside = inside && c >= 0 && c < static_cast<int64_t>(t.dims[d]);
        offset += c * static_cast<int64_t>(t.strides[d]);
      }
      // The elements of the row inside dimension 0: [lo, hi).
      const int64_t lo = std::max<int64_t>(0, -at[0]),
                    hi = std::min<int64_t>(t.box[0], static_cast<int64_t>(t.dims[0]) - at[0]);
      const unsigned char* const src = t.address + offset + (at[0] + lo) * t.element_bytes;
      const bool any = inside && lo < hi;
      if (any && !device_memory::get().holds(src, static_cast<size_t>(hi - lo) * t.element_bytes)) {
        std::fprintf(stderr,
                     "tessera cuda emulation: a TMA copy reads %lld bytes at %p, outside any "
                     "device allocation\n",
                     static_cast<long long>((hi - lo) * t.element_bytes),
                     static_cast<const void*>(src));
        running->failed = true;
        return;
      }
      for (uint64_t b = 0; b < row_bytes; ++b) {
        const int64_t e = static_cast<int64_t>(b / t.element_bytes);
        uint32_t to = dst + static_cast<uint32_t>(row * row_bytes + b);
        if (t.swizzle == CU_TENSOR_MAP_SWIZZLE_128B) to = swizzle_128b(to);
        dynamic_smem[to] =
            any && e >= lo && e < hi ? src[(e - lo) * t.element_bytes + b % t.element_bytes] : 0;
      }
    }
  });
}

}  // namespace tessera_cuda_emulation

/// The driver's functions by name, as the runtime hands them out: here cuTensorMapEncodeTiled.
inline cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int,
                                                    unsigned long long,
                                                    cudaDriverEntryPointQueryResult* status) {
  const bool found = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  *fn = found ? reinterpret_cast<void*>(&tessera_cuda_emulation::tensor_map_encode_tiled) : nullptr;
  if (status) *status = found ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
