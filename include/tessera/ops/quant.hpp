// tessera/ops/quant.hpp - int8 dynamic quantization of linear layers, as ONNX Runtime's
// quantize_dynamic and PyTorch's dynamic quantization do: weights quantized once per output
// channel, activations per row at run time, the product in int8 with exact int32 sums (VNNI on
// the CPU), then scaled back to float with the bias added.
#pragma once

#include <cmath>

#include "creation.hpp"
#include "elementwise.hpp"
#include "matmul.hpp"
#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The symmetric step of a row whose largest magnitude is m: m / 127 (int8's range is used as
/// [-127, 127], so that negation stays in range).
struct int8_step {
  TESSERA_HOST_DEVICE float operator()(float m) const { return m / 127.0f; }
};
/// x / step rounded to the nearest integer (ties to even) and clamped to [-127, 127]; 0 where
/// the step is 0 (an all-zero row).
struct int8_quantize {
  TESSERA_HOST_DEVICE int8_t operator()(float x, float step) const {
    if (!(step > 0)) return 0;
    float q = nearbyintf(x / step);
    q = q < -127.0f ? -127.0f : q > 127.0f ? 127.0f : q;
    return static_cast<int8_t>(q);
  }
};
/// An int32 product scaled back: acc * row_step * col_step + bias.
struct int8_dequantize {
  TESSERA_HOST_DEVICE float operator()(int32_t acc, float row_step, float col_step,
                                       float bias) const {
    return static_cast<float>(acc) * (row_step * col_step) + bias;
  }
};

}  // namespace detail

/// A float tensor quantized along its last dim: values = round(x / step) in [-127, 127] with one
/// step per row (steps has x's shape without its last dim, kept as 1).
template <class B>
struct int8_rows {
  Tensor<int8_t, B> values;
  Tensor<float, B> steps;
};

/// Symmetric per-row int8 quantization of x (rank >= 1): each row's step is its largest
/// magnitude / 127. Dequantized, every element is within step / 2 of x.
template <class B>
int8_rows<B> quantize_int8_rows(const Tensor<float, B>& x) {
  x.check_defined("quantize_int8_rows");
  if (x.rank() == 0)
    detail::fail<shape_error>("quantize_int8_rows", "x must have at least one dim");
  const Tensor<float, B> steps = map(detail::int8_step{}, max(abs(x), {x.rank() - 1}, true));
  return {map(detail::int8_quantize{}, x, steps), steps};
}

/// A linear layer's weight [out, in] quantized per output channel, with its float bias [out]
/// (or undefined).
template <class B>
struct int8_linear_weights {
  int8_rows<B> weight;
  Tensor<float, B> bias;
  int64_t in_features = 0, out_features = 0;
};

/// Quantizes a float linear layer (weight [out, in], bias [out] or undefined) for int8_linear.
template <class B>
int8_linear_weights<B> quantize_linear_int8(const Tensor<float, B>& weight,
                                            const Tensor<float, B>& bias = {}) {
  weight.check_defined("quantize_linear_int8");
  if (weight.rank() != 2 ||
      (bias.defined() && (bias.rank() != 1 || bias.shape()[0] != weight.shape()[0])))
    detail::fail<shape_error>("quantize_linear_int8",
                              "weight must be [out, in] and bias [out], got ", weight.shape(),
                              " and ", bias.defined() ? bias.shape() : Shape{});
  int8_linear_weights<B> q{quantize_int8_rows(weight), bias, weight.shape()[1], weight.shape()[0]};
  q.weight.steps = q.weight.steps.reshape({1, q.out_features});
  // Kept as a view of the contiguous [in, out] transpose: the product's B operand then has
  // contiguous rows, which the int8 GEMM packs several times faster than strided ones.
  q.weight.values = q.weight.values.transpose(0, 1).contiguous().transpose(0, 1);
  if (!q.bias.defined()) q.bias = zeros<float, B>({q.out_features});
  return q;
}

/// x [..., in] · weightᵀ + bias with the weight quantized per output channel and x per row at
/// run time (dynamic quantization): the product runs in int8 with exact int32 sums, then each
/// element is scaled by its row's and column's steps. The error against the float layer is at
/// most half a step of each operand per term. Throws shape_error when x's last dim is not in.
template <class B>
Tensor<float, B> int8_linear(const Tensor<float, B>& x, const int8_linear_weights<B>& w) {
  x.check_defined("int8_linear");
  if (x.rank() == 0 || x.shape()[x.rank() - 1] != w.in_features)
    detail::fail<shape_error>("int8_linear", "x ", x.shape(), " must end with ", w.in_features,
                              " features");
  Shape out_shape = x.shape();
  out_shape[x.rank() - 1] = w.out_features;
  const int64_t rows = x.numel() / (w.in_features > 0 ? w.in_features : 1);
  if (out_shape.numel() == 0) return Tensor<float, B>(out_shape);
  const int8_rows<B> qx = quantize_int8_rows(x.reshape({rows, w.in_features}));
  const Tensor<int32_t, B> acc = matmul(qx.values, w.weight.values.transpose(0, 1));
  return map(detail::int8_dequantize{}, acc, qx.steps, w.weight.steps, w.bias)
      .reshape(out_shape.span());
}

TESSERA_END_NAMESPACE
