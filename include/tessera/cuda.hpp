// tessera/cuda.hpp - the umbrella header for the CUDA backend: everything in tessera.hpp plus
// tessera::cuda's memory, elementwise, reduction, matrix-product, convolution, pooling and
// optimizer kernels. Include it from .cu files compiled by nvcc (C++20; --extended-lambda for
// `[] __device__ (...)` functors passed to map).
#pragma once

// TESSERA_CUDA_HOST_EMULATION: tests/cuda_emu runs the kernels on the CPU under a host
// emulation of the CUDA runtime (a test tool, not a backend).
#if !defined(__CUDACC__) && !defined(TESSERA_CUDA_HOST_EMULATION)
#error "<tessera/cuda.hpp> contains CUDA kernels: compile this file with nvcc (a .cu source)"
#endif

#include "tessera.hpp"

// The CUDA backend: specialisations of backend::memory, map_kernel, reduce_kernel, gemm_kernel,
// conv_kernel, pool_kernel, optim_kernel and loss_kernel for cuda.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/conv.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/error.hpp"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/launch.hpp"
#include "backend/cuda/loss.cuh"
#include "backend/cuda/memory.hpp"
#include "backend/cuda/optim.cuh"
#include "backend/cuda/pool.cuh"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/streams.hpp"

static_assert(tessera::complete_backend<tessera::cuda>,
              "the CUDA backend misses a kernel family (kernel/contract.hpp)");
