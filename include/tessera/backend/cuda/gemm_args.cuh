// tessera/backend/cuda/gemm_args.cuh - the arguments of the CUDA GEMM kernels (the SIMT one in
// gemm.cuh, the tensor-core one in gemm_tc.cuh).
#pragma once

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

}  // namespace detail
TESSERA_END_NAMESPACE
