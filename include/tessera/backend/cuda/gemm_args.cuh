// tessera/backend/cuda/gemm_args.cuh - the arguments of the CUDA GEMM kernels (the SIMT one in
// gemm.cuh, the tensor-core one in gemm_tc.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../detail/gemm_problem.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// A gemm_problem as the kernel reads it: the same fields, with the batch offsets in device
/// memory (null: all 0).
template <class TA, class TB, class Acc>
struct cuda_gemm_args {
  int64_t m, n, k;
  const TA* a;
  int64_t a_rs, a_cs;
  const TB* b;
  int64_t b_rs, b_cs;
  Acc* c;
  int64_t c_rs, c_cs;
  Acc alpha, beta;
  const Acc* bias;
  int64_t bias_stride;
  gemm_bias bias_kind;
  bool relu;
  const int64_t* a_off;  // device arrays of `batch` offsets, or null
  const int64_t* b_off;
  const int64_t* c_off;
};

/// The epilogue of both kernels for output (gi, gj) of matrix c (inside the product):
/// c = alpha * acc (+ beta * c) (+ bias) (relu); beta == 0 never reads c.
template <class TA, class TB, class Acc>
__device__ __forceinline__ void cuda_gemm_store(const cuda_gemm_args<TA, TB, Acc>& p, Acc* c,
                                                int64_t gi, int64_t gj, Acc acc) {
  Acc* out = c + gi * p.c_rs + gj * p.c_cs;
  Acc v = p.alpha * acc;
  if (p.beta != Acc(0)) v += p.beta * *out;
  if (p.bias_kind == gemm_bias::per_row)
    v += p.bias[gi * p.bias_stride];
  else if (p.bias_kind == gemm_bias::per_col)
    v += p.bias[gj * p.bias_stride];
  if (p.relu && v < Acc(0)) v = Acc(0);  // NaN compares false: stays NaN, as on the CPU
  *out = v;
}

}  // namespace detail
TESSERA_END_NAMESPACE
