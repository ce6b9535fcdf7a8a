// tessera/kernel/norm_problem.hpp - the row-wise problems that backends fuse into one kernel
// (backend::norm_kernel<B>: the CPU): layer_norm and residual_layer_norm (ops/embedding.hpp), and
// the symmetric int8 quantization of rows (ops/quant.hpp), whose formulas are defined here once.
#pragma once

#include <cmath>
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

/// The symmetric step of a row whose largest magnitude is m: m / top, top being the largest
/// quantized magnitude (127: int8's range is used as [-127, 127], so that negation stays in
/// range; 63 for 7-bit values).
struct int8_step {
  float top = 127.0f;
  TESSERA_HOST_DEVICE float operator()(float m) const { return m / top; }
};
/// x / step rounded to the nearest integer (ties to even) and clamped to [-top, top]; 0 where
/// the step is 0 (an all-zero row). Without a branch, so that the CPU's loop vectorizes (an early
/// return kept it scalar: 8% of BERT's int8 forward pass).
struct int8_quantize {
  float top = 127.0f;
  TESSERA_HOST_DEVICE int8_t operator()(float x, float step) const {
    float q = nearbyintf(x / step);
    q = q < -top ? -top : q > top ? top : q;
    return static_cast<int8_t>(step > 0 ? q : 0.0f);
  }
};

/// Each row i of x [rows, c] (row stride x_rs, contiguous within the row) quantized to int8: with
/// v = x * keep (keep: one factor per column, 1 or 0 for a feature left out; null: all 1), the
/// row's step is int8_step of the largest |v| (NaN if the row has one) and values[i, j] is
/// int8_quantize(v[j], step). values [rows, c] and steps [rows] are contiguous.
struct int8_rows_problem {
  const float* x = nullptr;
  int64_t x_rs = 0;
  const float* keep = nullptr;
  float top = 127.0f;
  int8_t* values = nullptr;
  float* steps = nullptr;
  int64_t rows = 0, c = 0;
};

}  // namespace detail
TESSERA_END_NAMESPACE
