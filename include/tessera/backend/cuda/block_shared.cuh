// tessera/backend/cuda/block_shared.cuh - TESSERA_CUDA_SHARED, how tessera's kernels declare
// static shared memory.
//
// On a GPU a block's shared memory starts with whatever its last user left there. The host
// emulation of the CUDA runtime (tests/cuda_emu) runs blocks one at a time and keeps one static
// object per kernel for all of them, which would start at zero at the first launch and hold the
// previous block's values after: a kernel reading shared memory it never wrote (a reduction tree
// over slots some threads skip, a tile's unloaded edge) would pass there. Declared through this
// macro, the object is filled with 0xff bytes (NaN, -1) whenever a new block first reaches the
// declaration, as the emulation does for dynamic shared memory, so such reads show in the tests.
// The emulation rejects a bare __shared__, so every kernel declares its shared memory this way.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(TESSERA_CUDA_HOST_EMULATION)
/// `TESSERA_CUDA_SHARED(double, sh, [256]);` declares `__shared__ double sh[256];` (the extents,
/// if any, after the name).
#define TESSERA_CUDA_SHARED(type, name, ...) \
  static type name __VA_ARGS__;              \
  static uint64_t tessera_filled_##name = 0; \
  ::tessera_cuda_emulation::undefined_at_block_start(&name, sizeof(name), tessera_filled_##name)
#else
#define TESSERA_CUDA_SHARED(type, name, ...) __shared__ type name __VA_ARGS__
#endif
