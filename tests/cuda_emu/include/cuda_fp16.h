// Host emulation of the CUDA toolkit's cuda_fp16.h (see cuda_runtime.h here): just the storage
// type, which tessera's kernels name for the tensor-core (WMMA) inputs.
#pragma once

struct __half {
  unsigned short x;
};
