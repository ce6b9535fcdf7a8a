// Host emulation of the CUDA toolkit's cuda_bf16.h (see cuda_runtime.h here): just the storage
// type, which tessera's kernels name for the tensor-core (WMMA) inputs.
#pragma once

struct __nv_bfloat16 {
  unsigned short x;
};
