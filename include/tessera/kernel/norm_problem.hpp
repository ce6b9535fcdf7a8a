// tessera/kernel/norm_problem.hpp - the problem that layer_norm and residual_layer_norm
// (ops/embedding.hpp) hand to a backend's fused normalization (backend::norm_kernel<B>: the CPU).
#pragma once

#include <cstdint>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Each row i of out = (s - mean(s)) / sqrt(var(s) + eps) * weight + bias, where s is row i of
/// x (plus row i of residual when given), the variance biased. All contiguous: x, residual and
/// out are [rows, c], weight and bias [c]. out may be x or residual (each element is read before
/// it is written). weight and bias may be null (no scale, no shift).
template <class T>
struct layer_norm_problem {
  const T* x = nullptr;
  const T* residual = nullptr;
  const T* weight = nullptr;
  const T* bias = nullptr;
  T* out = nullptr;
  int64_t rows = 0, c = 0;
  double eps = 1e-5;
};

}  // namespace detail
TESSERA_END_NAMESPACE
