// tessera/ops/bias_grad.hpp - a layer's bias gradient and its fused ReLU's mask in one pass over
// the output gradient: the backward step that convolutions and linear layers share.
#pragma once

#include <string_view>
#include <type_traits>
#include <utility>

#include "../core/tensor.hpp"
#include "../kernel/conv_problem.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The bias gradient of a layer whose output dy0 has channels in dim 1 ([n, c, ...]: a
/// convolution's; [rows, out]: a linear layer's) and, when y (the output of a fused ReLU) is
/// defined, the ReLU's mask: returns {g, db} with g = y ? dy * (y > 0) : dy (only when
/// want_masked; else undefined) and db = g summed over every dim but the channel, in one pass over
/// dy (the backends' conv_kernel bias problem; sums in double, in a fixed order).
template <class T, class B>
requires(std::is_same_v<T, float> || std::is_same_v<T, double>)
    std::pair<Tensor<T, B>, Tensor<T, B>> bias_and_relu_backward(std::string_view op,
                                                                 const Tensor<T, B>& dy0,
                                                                 const Tensor<T, B>& y0,
                                                                 bool want_masked) {
  dy0.check_defined(op);
  if (dy0.rank() < 2) fail<shape_error>(op, "grad_output ", dy0.shape(), " has no channel dim");
  if (y0.defined() && y0.shape() != dy0.shape())
    fail<shape_error>(op, "relu output ", y0.shape(), " does not match grad_output ", dy0.shape());
  const Tensor<T, B> dy = dy0.contiguous();
  const Tensor<T, B> y = y0.defined() ? y0.contiguous() : y0;
  Tensor<T, B> g = want_masked ? Tensor<T, B>(dy.shape()) : Tensor<T, B>();
  Tensor<T, B> db(Shape{dy.shape()[1]});
  conv_bias_backward_problem<T> pr;
  pr.n = dy.shape()[0], pr.k = dy.shape()[1];
  pr.plane = pr.n * pr.k != 0 ? dy.numel() / (pr.n * pr.k) : 0;
  pr.dy = dy.data(), pr.y = y.defined() ? y.data() : nullptr;
  pr.masked = want_masked ? g.data() : nullptr, pr.db = db.data();
  if (pr.n * pr.k * pr.plane == 0) {
    db.fill_(T(0));
  } else {
    backend::conv_kernel<B>::run(pr);
  }
  return {std::move(g), std::move(db)};
}

}  // namespace detail
TESSERA_END_NAMESPACE
