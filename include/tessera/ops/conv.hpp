// tessera/ops/conv.hpp - conv1d, conv2d and conv_transpose2d on NCHW tensors, and the backward
// passes the autograd layer calls: argument checks, output shapes, dtype rules; the arithmetic is
// the backend's conv_kernel (detail/conv_problem.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../core/conv_algorithm.hpp"
#include "../core/tensor.hpp"
#include "../kernel/conv_problem.hpp"
#include "bias_grad.hpp"
#include "matmul.hpp"
#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE

/// Options of conv2d, in LibTorch's spelling ({.stride = {2, 2}, .padding = {1, 1}}).
struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};  // zeros before rows / columns (and after, see below)
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;  // groups == channels: depthwise
  /// Zeros after the last row / column; -1 (the default) means the same as padding.
  std::array<int64_t, 2> padding_end{-1, -1};
  bool relu = false;  // fused max(., 0) after the bias, in the same pass
};

/// Options of conv1d (the 2-D options with a unit height).
struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  int64_t padding_end = -1;  // -1: same as padding
  bool relu = false;
};

/// Options of conv_transpose2d: the options of the convolution it is the gradient of, and
/// output_padding, the rows / columns added at the bottom / right to pick one of the input sizes
/// that a strided convolution maps to the same output size.
struct ConvTranspose2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> output_padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

/// Element type of a convolution of TX by TW: as matmul (int32 for 8-bit integers, otherwise the
/// promoted floating type, accumulated in float or double).
template <element_type TX, element_type TW>
using conv_t = matmul_t<TX, TW>;

namespace detail {

/// Stride, padding on both sides and dilation per spatial dim (0: rows, 1: columns), and groups.
struct conv_params {
  std::array<int64_t, 2> stride{1, 1}, pad_begin{0, 0}, pad_end{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

inline conv_params conv_params_of(const Conv2dOptions& o) {
  conv_params p;
  p.stride = o.stride, p.dilation = o.dilation, p.groups = o.groups, p.pad_begin = o.padding;
  for (int d = 0; d < 2; ++d)
    p.pad_end[d] = o.padding_end[d] == -1 ? o.padding[d] : o.padding_end[d];
  return p;
}
inline conv_params conv_params_of(const Conv1dOptions& o) {
  conv_params p;
  p.stride = {1, o.stride}, p.dilation = {1, o.dilation}, p.groups = o.groups;
  p.pad_begin = {0, o.padding}, p.pad_end = {0, o.padding_end == -1 ? o.padding : o.padding_end};
  return p;
}

/// Largest padding, stride or dilation accepted: far beyond any real layer, small enough that
/// no size arithmetic below can overflow int64 (extents are below 2^63 / 2^40 elements' worth).
inline constexpr int64_t conv_max_param = int64_t{1} << 20;

/// Checks the options and the shapes of x [n, c, h, w] and weights [k, c / groups, r, s] and
/// returns the geometry, with the output size (PyTorch's formula). Throws shape_error naming op
/// and the offending values.
inline conv_geometry conv_plan(std::string_view op, const Shape& x, const Shape& w,
                               const conv_params& p) {
  if (x.rank() != 4 || w.rank() != 4)
    fail<shape_error>(op, "expects input [N, C, H, W] and weight [K, C/groups, R, S], got ", x,
                      " and ", w);
  for (int d = 0; d < 2; ++d) {
    if (p.stride[d] < 1 || p.stride[d] > conv_max_param)
      fail<shape_error>(op, "stride ", p.stride[d], " (dim ", d, ") must be in [1, ",
                        conv_max_param, "]");
    if (p.dilation[d] < 1 || p.dilation[d] > conv_max_param)
      fail<shape_error>(op, "dilation ", p.dilation[d], " (dim ", d, ") must be in [1, ",
                        conv_max_param, "]");
    if (p.pad_begin[d] < 0 || p.pad_end[d] < 0 || p.pad_begin[d] > conv_max_param ||
        p.pad_end[d] > conv_max_param)
      fail<shape_error>(op, "padding ", p.pad_begin[d], ", ", p.pad_end[d], " (dim ", d,
                        ") must be in [0, ", conv_max_param, "]");
  }
  conv_geometry g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.k = w[0], g.r = w[2], g.s = w[3];
  g.groups = p.groups;
  if (p.groups < 1) fail<shape_error>(op, "groups ", p.groups, " must be positive");
  if (g.c % p.groups != 0 || g.k % p.groups != 0)
    fail<shape_error>(op, "groups ", p.groups, " must divide input channels ", g.c,
                      " and output channels ", g.k, " (input ", x, ", weight ", w, ")");
  if (w[1] != g.c / p.groups)
    fail<shape_error>(op, "weight ", w, " has ", w[1], " input channels per group; input ", x,
                      " with groups ", p.groups, " needs ", g.c / p.groups);
  if (g.r < 1 || g.s < 1)
    fail<shape_error>(op, "kernel ", g.r, "x", g.s, " of weight ", w, " is empty");
  g.stride_h = p.stride[0], g.stride_w = p.stride[1];
  g.pad_top = p.pad_begin[0], g.pad_left = p.pad_begin[1];
  g.dil_h = p.dilation[0], g.dil_w = p.dilation[1];
  const int64_t ext_h = g.dil_h * (g.r - 1) + 1, ext_w = g.dil_w * (g.s - 1) + 1;
  const int64_t span_h = g.h + p.pad_begin[0] + p.pad_end[0],
                span_w = g.w + p.pad_begin[1] + p.pad_end[1];
  if (ext_h > span_h || ext_w > span_w)
    fail<shape_error>(op, "kernel ", g.r, "x", g.s, " (dilated ", ext_h, "x", ext_w,
                      ") is larger than the padded input ", span_h, "x", span_w, " of ", x);
  g.ho = (span_h - ext_h) / g.stride_h + 1;
  g.wo = (span_w - ext_w) / g.stride_w + 1;
  Shape{g.n, g.k, g.ho, g.wo}.validate();
  return g;
}

inline Shape conv_output_shape(const conv_geometry& g) { return Shape{g.n, g.k, g.ho, g.wo}; }

template <class TX, class TW>
void conv_check_forward_dtypes(std::string_view op) {
  if constexpr (!gemm_supported_v<TX, TW>)
    fail<dtype_error>(op, "no convolution of ", dtype_name<TX>, " by ", dtype_name<TW>,
                      " (floating types, or int8/uint8 with int32 accumulation)");
}

template <class TX, class TW>
void conv_check_backward_dtypes(std::string_view op) {
  if constexpr (!is_floating_v<TX> || !is_floating_v<TW>)
    fail<dtype_error>(op, "gradients need floating types, got ", dtype_name<TX>, " and ",
                      dtype_name<TW>);
}

/// out = conv(x, w) + bias (relu); x and w rank 4, out already shaped conv_output_shape.
template <class TX, class TW, class TBias, class TO, class B>
void conv_forward_into(std::string_view op, const Tensor<TX, B>& x0, const Tensor<TW, B>& w0,
                       const Tensor<TBias, B>& bias0, const conv_geometry& g, bool relu,
                       const Tensor<TO, B>& out) {
  using Acc = gemm_acc_t<TX, TW>;
  if constexpr (gemm_supported_v<TX, TW>) {
    if constexpr (std::is_integral_v<Acc>) {
      if (!std::is_same_v<TO, int32_t>)
        fail<dtype_error>(op, "8-bit integer convolutions accumulate in int32; the output is ",
                          dtype_name<TO>);
    } else if (!is_floating_v<TO>) {
      fail<dtype_error>(op, "the output of a floating convolution must be floating, not ",
                        dtype_name<TO>);
    }
    if constexpr (std::is_integral_v<Acc> == std::is_integral_v<TO>) {
      Tensor<Acc, B> bias;
      if (bias0.defined()) {
        if (std::is_integral_v<Acc> && !std::is_integral_v<TBias>)
          fail<dtype_error>(op, "an 8-bit integer convolution adds an integer bias (int32), not ",
                            dtype_name<TBias>);
        if (bias0.rank() != 1 || bias0.shape()[0] != g.k)
          fail<shape_error>(op, "bias has shape ", bias0.shape(), ", expected [", g.k, "]");
        if constexpr (std::is_same_v<TBias, Acc>)
          bias = bias0.contiguous();
        else
          bias = bias0.template astype<Acc>();
      }
      const Tensor<TX, B> x = x0.contiguous();
      const Tensor<TW, B> w = w0.contiguous();
      const Tensor<Acc, B> target = kernel_target<Acc>(out, x, w, bias);
      conv_forward_problem<TX, TW, Acc> pr;
      pr.g = g, pr.x = x.data(), pr.w = w.data(), pr.y = target.data();
      pr.bias = bias.defined() ? bias.data() : nullptr, pr.relu = relu;
      backend::conv_kernel<B>::run(pr);
      copy_result(target, out);
    }
  } else {
    conv_check_forward_dtypes<TX, TW>(op);
  }
}

template <class TX, class TW, class TBias, class B>
Tensor<conv_t<TX, TW>, B> conv2d_impl(std::string_view op, const Tensor<TX, B>& x,
                                      const Tensor<TW, B>& w, const Tensor<TBias, B>& bias,
                                      const conv_params& p, bool relu) {
  x.check_defined(op), w.check_defined(op);
  conv_check_forward_dtypes<TX, TW>(op);
  const conv_geometry g = conv_plan(op, x.shape(), w.shape(), p);
  Tensor<conv_t<TX, TW>, B> out(conv_output_shape(g));
  conv_forward_into(op, x, w, bias, g, relu, out);
  return out;
}

/// dx of conv(x, w) from dy, for x of shape x_shape (rank 4).
template <class TG, class TW, class TO, class B>
void conv_backward_input_into(std::string_view op, const Tensor<TG, B>& dy0,
                              const Tensor<TW, B>& w0, const conv_geometry& g,
                              const Tensor<TO, B>& out) {
  using Acc = gemm_acc_t<TG, TW>;
  if constexpr (is_floating_v<TG> && is_floating_v<TW>) {
    const Tensor<TG, B> dy = dy0.contiguous();
    const Tensor<TW, B> w = w0.contiguous();
    const Tensor<Acc, B> target = kernel_target<Acc>(out, dy, w);
    conv_backward_input_problem<TG, TW, Acc> pr;
    pr.g = g, pr.dy = dy.data(), pr.w = w.data(), pr.dx = target.data();
    backend::conv_kernel<B>::run(pr);
    copy_result(target, out);
  } else {
    conv_check_backward_dtypes<TG, TW>(op);
  }
}

/// The shape dy must have for conv geometry g, checked.
template <class TG, class B>
void conv_check_grad(std::string_view op, const Tensor<TG, B>& dy, const conv_geometry& g) {
  if (!(dy.shape() == conv_output_shape(g)))
    fail<shape_error>(op, "grad_output has shape ", dy.shape(), "; the convolution gives ",
                      conv_output_shape(g));
}

template <class TG, class TW, class B>
Tensor<conv_t<TG, TW>, B> conv2d_backward_input_impl(std::string_view op, const Tensor<TG, B>& dy,
                                                     const Tensor<TW, B>& w, const Shape& x_shape,
                                                     const conv_params& p) {
  dy.check_defined(op), w.check_defined(op);
  conv_check_backward_dtypes<TG, TW>(op);
  const conv_geometry g = conv_plan(op, x_shape, w.shape(), p);
  conv_check_grad(op, dy, g);
  Tensor<conv_t<TG, TW>, B> dx(x_shape);
  conv_backward_input_into(op, dy, w, g, dx);
  return dx;
}

/// dw of conv(x, w) (shape w_shape) from dy and x, for geometry g (already checked).
template <class TG, class TX, class B>
Tensor<conv_t<TX, TG>, B> conv_backward_weight_of(std::string_view op, const Tensor<TG, B>& dy0,
                                                  const Tensor<TX, B>& x0, const Shape& w_shape,
                                                  const conv_geometry& g) {
  using Acc = gemm_acc_t<TX, TG>;
  conv_check_backward_dtypes<TX, TG>(op);
  Tensor<conv_t<TX, TG>, B> dw(w_shape);
  if constexpr (is_floating_v<TG> && is_floating_v<TX>) {
    const Tensor<TG, B> dy = dy0.contiguous();
    const Tensor<TX, B> x = x0.contiguous();
    const Tensor<Acc, B> target = kernel_target<Acc>(dw);
    conv_backward_weight_problem<TX, TG, Acc> pr;
    pr.g = g, pr.x = x.data(), pr.dy = dy.data(), pr.dw = target.data();
    backend::conv_kernel<B>::run(pr);
    copy_result(target, dw);
  }
  return dw;
}

template <class TG, class TX, class B>
Tensor<conv_t<TX, TG>, B> conv2d_backward_weight_impl(std::string_view op, const Tensor<TG, B>& dy,
                                                      const Tensor<TX, B>& x, const Shape& w_shape,
                                                      const conv_params& p) {
  dy.check_defined(op), x.check_defined(op);
  conv_check_backward_dtypes<TX, TG>(op);
  const conv_geometry g = conv_plan(op, x.shape(), w_shape, p);
  conv_check_grad(op, dy, g);
  return conv_backward_weight_of(op, dy, x, w_shape, g);
}

/// The bias gradient: dy summed over every dim but the channel (dim 1).
template <class TG, class B>
Tensor<TG, B> conv_backward_bias_impl(std::string_view op, const Tensor<TG, B>& dy) {
  dy.check_defined(op);
  if constexpr (!is_floating_v<TG>) {
    fail<dtype_error>(op, "gradients need floating types, got ", dtype_name<TG>);
  } else {
    if (dy.rank() < 2) fail<shape_error>(op, "grad_output ", dy.shape(), " has no channel dim");
    if constexpr (std::is_same_v<TG, float> || std::is_same_v<TG, double>) {
      return bias_and_relu_backward(op, dy, Tensor<TG, B>(), false).second;
    } else {
      Axes axes{0};
      for (int d = 2; d < dy.rank(); ++d) axes.push_back(d);
      return sum(dy, axes);
    }
  }
}

/// [n, c, l] -> [n, c, 1, l] (and [k, c, s] weights -> [k, c, 1, s]) for conv1d.
template <class T, class B>
Tensor<T, B> as_2d_signal(std::string_view op, const Tensor<T, B>& t, const char* what) {
  t.check_defined(op);
  if (t.rank() != 3) fail<shape_error>(op, what, " must have rank 3, got ", t.shape());
  return t.unsqueeze(2);
}
inline Shape as_2d_shape(std::string_view op, const Shape& s, const char* what) {
  if (s.rank() != 3) fail<shape_error>(op, what, " must have rank 3, got ", s);
  return Shape{s[0], s[1], 1, s[2]};
}

/// The convolution whose input gradient conv_transpose2d(x, w) is: its input has the transposed
/// convolution's output shape (n, c_out, h_out, w_out), its weights are w read as
/// [c_in, c_out / groups, r, s].
inline conv_geometry conv_transpose_plan(std::string_view op, const Shape& x, const Shape& w,
                                         const ConvTranspose2dOptions& o) {
  if (x.rank() != 4 || w.rank() != 4)
    fail<shape_error>(op,
                      "expects input [N, C_in, H, W] and weight [C_in, C_out/groups, R, S], got ",
                      x, " and ", w);
  if (o.groups < 1) fail<shape_error>(op, "groups ", o.groups, " must be positive");
  if (x[1] != w[0])
    fail<shape_error>(op, "input ", x, " has ", x[1], " channels, weight ", w, " expects ", w[0]);
  conv_params p;
  p.stride = o.stride, p.dilation = o.dilation, p.groups = o.groups;
  p.pad_begin = o.padding, p.pad_end = o.padding;
  Shape in{x[0], w[1] * o.groups, 0, 0};
  for (int d = 0; d < 2; ++d) {
    if (o.stride[d] < 1 || o.dilation[d] < 1 || o.padding[d] < 0 || o.stride[d] > conv_max_param ||
        o.dilation[d] > conv_max_param || o.padding[d] > conv_max_param)
      fail<shape_error>(op, "stride ", o.stride[d], ", dilation ", o.dilation[d], ", padding ",
                        o.padding[d], " (dim ", d, ") out of range");
    if (o.output_padding[d] < 0 ||
        (o.output_padding[d] >= o.stride[d] && o.output_padding[d] >= o.dilation[d]))
      fail<shape_error>(op, "output_padding ", o.output_padding[d], " (dim ", d,
                        ") must be smaller than stride ", o.stride[d], " or dilation ",
                        o.dilation[d]);
    const int64_t size = (x[2 + d] - 1) * o.stride[d] - 2 * o.padding[d] +
                         o.dilation[d] * (w[2 + d] - 1) + o.output_padding[d] + 1;
    if (size <= 0 || x[2 + d] == 0)
      fail<shape_error>(op, "output size ", size, " (dim ", d, ") of input ", x, " and weight ", w,
                        " is not positive");
    in[2 + d] = size;
  }
  // output_padding rows / columns at the bottom / right are seen by no window of the
  // convolution when output_padding < stride; with a larger dilation they may add whole output
  // rows, which the transposed convolution's input does not have: keep x's size.
  conv_geometry g = conv_plan(op, in, w, p);
  g.ho = x[2], g.wo = x[3];
  return g;
}

inline Shape conv_input_shape(const conv_geometry& g) { return Shape{g.n, g.c, g.h, g.w}; }

template <class TX, class TW, class TBias, class TO, class B>
void conv_transpose2d_into(std::string_view op, const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                           const Tensor<TBias, B>& bias, const conv_geometry& g,
                           const Tensor<TO, B>& out) {
  conv_backward_input_into(op, x, w, g, out);
  if (bias.defined()) {
    if (bias.rank() != 1 || bias.shape()[0] != g.c)
      fail<shape_error>(op, "bias has shape ", bias.shape(), ", expected [", g.c, "]");
    out += bias.reshape({g.c, 1, 1});
  }
}

}  // namespace detail

/// 2-D convolution (cross-correlation, as every framework) of x [N, C, H, W] (or [C, H, W]) with
/// weights [K, C/groups, R, S], plus bias [K] when given (an undefined Tensor means none):
/// y [N, K, Ho, Wo] with Ho = (H + pad_top + pad_bottom - dilation * (R - 1) - 1) / stride + 1.
/// Floating inputs (any mix of float, double, half, bfloat16, fp8) accumulate in float (double
/// for double) and round once to conv_t; int8/uint8 give exact int32. Any strided views.
/// Throws shape_error (ranks, groups not dividing channels, weight channels, stride / dilation
/// < 1, negative padding, kernel larger than the padded input, bias length) and dtype_error.
template <element_type TX, element_type TW, element_type TBias, class B>
Tensor<conv_t<TX, TW>, B> conv2d(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                                 const Tensor<TBias, B>& bias, const Conv2dOptions& opts = {}) {
  const bool unbatched = x.defined() && x.rank() == 3;
  auto y = detail::conv2d_impl("conv2d", unbatched ? x.unsqueeze(0) : x, w, bias,
                               detail::conv_params_of(opts), opts.relu);
  return unbatched ? y.squeeze(0) : y;
}
/// conv2d without bias.
template <element_type TX, element_type TW, class B>
Tensor<conv_t<TX, TW>, B> conv2d(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                                 const Conv2dOptions& opts = {}) {
  return conv2d(x, w, Tensor<conv_t<TX, TW>, B>{}, opts);
}
/// Out-parameter form: writes conv2d(x, w, bias, opts) into out (shape [N, K, Ho, Wo], any
/// strides, a floating dtype for floating inputs or int32 for 8-bit ones). Returns out.
template <element_type TX, element_type TW, element_type TBias, element_type TO, class B>
const Tensor<TO, B>& conv2d(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                            const Tensor<TBias, B>& bias, const Conv2dOptions& opts,
                            const Tensor<TO, B>& out) {
  x.check_defined("conv2d"), w.check_defined("conv2d");
  out.check_defined("conv2d");
  detail::conv_check_forward_dtypes<TX, TW>("conv2d");
  const detail::conv_geometry g =
      detail::conv_plan("conv2d", x.shape(), w.shape(), detail::conv_params_of(opts));
  if (!(out.shape() == detail::conv_output_shape(g)))
    detail::fail<shape_error>("conv2d", "output has shape ", out.shape(), "; ", x.shape(), " * ",
                              w.shape(), " gives ", detail::conv_output_shape(g));
  detail::begin_write("conv2d", out);
  detail::conv_forward_into("conv2d", x, w, bias, g, opts.relu, out);
  return out;
}

/// Gradient of conv2d with respect to its input x (shape x_shape, rank 4), from grad_output
/// [N, K, Ho, Wo] and the weights. Floating types. Throws shape_error as conv2d, and when
/// grad_output's shape is not the convolution's output shape.
template <element_type TG, element_type TW, class B>
Tensor<conv_t<TG, TW>, B> conv2d_backward_input(const Tensor<TG, B>& grad_output,
                                                const Tensor<TW, B>& w, const Shape& x_shape,
                                                const Conv2dOptions& opts = {}) {
  return detail::conv2d_backward_input_impl("conv2d_backward_input", grad_output, w, x_shape,
                                            detail::conv_params_of(opts));
}
/// Gradient of conv2d with respect to its weights (shape w_shape), from grad_output and the
/// input x, summed over the batch. Floating types.
template <element_type TG, element_type TX, class B>
Tensor<conv_t<TX, TG>, B> conv2d_backward_weight(const Tensor<TG, B>& grad_output,
                                                 const Tensor<TX, B>& x, const Shape& w_shape,
                                                 const Conv2dOptions& opts = {}) {
  return detail::conv2d_backward_weight_impl("conv2d_backward_weight", grad_output, x, w_shape,
                                             detail::conv_params_of(opts));
}
/// Gradient of conv2d (or conv1d, conv_transpose2d) with respect to its bias: grad_output
/// [N, K, ...] summed over every dim but K.
template <element_type TG, class B>
Tensor<TG, B> conv2d_backward_bias(const Tensor<TG, B>& grad_output) {
  return detail::conv_backward_bias_impl("conv2d_backward_bias", grad_output);
}

/// 1-D convolution of x [N, C, L] (or [C, L]) with weights [K, C/groups, S] (+ bias [K]):
/// y [N, K, Lo].
/// Same rules and errors as conv2d.
template <element_type TX, element_type TW, element_type TBias, class B>
Tensor<conv_t<TX, TW>, B> conv1d(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                                 const Tensor<TBias, B>& bias, const Conv1dOptions& opts = {}) {
  const bool unbatched = x.defined() && x.rank() == 2;
  const auto x2 = detail::as_2d_signal("conv1d", unbatched ? x.unsqueeze(0) : x, "input");
  const auto w2 = detail::as_2d_signal("conv1d", w, "weight");
  auto y = detail::conv2d_impl("conv1d", x2, w2, bias, detail::conv_params_of(opts), opts.relu)
               .squeeze(2);
  return unbatched ? y.squeeze(0) : y;
}
/// conv1d without bias.
template <element_type TX, element_type TW, class B>
Tensor<conv_t<TX, TW>, B> conv1d(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                                 const Conv1dOptions& opts = {}) {
  return conv1d(x, w, Tensor<conv_t<TX, TW>, B>{}, opts);
}
/// Gradient of conv1d with respect to its input (shape x_shape [N, C, L]).
template <element_type TG, element_type TW, class B>
Tensor<conv_t<TG, TW>, B> conv1d_backward_input(const Tensor<TG, B>& grad_output,
                                                const Tensor<TW, B>& w, const Shape& x_shape,
                                                const Conv1dOptions& opts = {}) {
  constexpr std::string_view op = "conv1d_backward_input";
  return detail::conv2d_backward_input_impl(
             op, detail::as_2d_signal(op, grad_output, "grad_output"),
             detail::as_2d_signal(op, w, "weight"), detail::as_2d_shape(op, x_shape, "input"),
             detail::conv_params_of(opts))
      .squeeze(2);
}
/// Gradient of conv1d with respect to its weights (shape w_shape [K, C/groups, S]).
template <element_type TG, element_type TX, class B>
Tensor<conv_t<TX, TG>, B> conv1d_backward_weight(const Tensor<TG, B>& grad_output,
                                                 const Tensor<TX, B>& x, const Shape& w_shape,
                                                 const Conv1dOptions& opts = {}) {
  constexpr std::string_view op = "conv1d_backward_weight";
  return detail::conv2d_backward_weight_impl(
             op, detail::as_2d_signal(op, grad_output, "grad_output"),
             detail::as_2d_signal(op, x, "input"), detail::as_2d_shape(op, w_shape, "weight"),
             detail::conv_params_of(opts))
      .squeeze(2);
}
/// Gradient of conv1d with respect to its bias: grad_output [N, K, Lo] summed over N and Lo.
template <element_type TG, class B>
Tensor<TG, B> conv1d_backward_bias(const Tensor<TG, B>& grad_output) {
  return detail::conv_backward_bias_impl("conv1d_backward_bias", grad_output);
}

/// Transposed convolution ("deconvolution"), the input gradient of conv2d as a layer: x [N, C_in,
/// H, W], weights [C_in, C_out/groups, R, S], bias [C_out] when defined; y [N, C_out, Ho, Wo]
/// with Ho = (H - 1) * stride - 2 * padding + dilation * (R - 1) + output_padding + 1.
/// Floating types. Throws shape_error (ranks, channels, groups, options, output_padding not
/// below stride or dilation, non-positive output size).
template <element_type TX, element_type TW, element_type TBias, class B>
Tensor<conv_t<TX, TW>, B> conv_transpose2d(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                                           const Tensor<TBias, B>& bias,
                                           const ConvTranspose2dOptions& opts = {}) {
  constexpr std::string_view op = "conv_transpose2d";
  x.check_defined(op), w.check_defined(op);
  detail::conv_check_backward_dtypes<TX, TW>(op);
  const detail::conv_geometry g = detail::conv_transpose_plan(op, x.shape(), w.shape(), opts);
  Tensor<conv_t<TX, TW>, B> out(detail::conv_input_shape(g));
  detail::conv_transpose2d_into(op, x, w, bias, g, out);
  return out;
}
/// conv_transpose2d without bias.
template <element_type TX, element_type TW, class B>
Tensor<conv_t<TX, TW>, B> conv_transpose2d(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                                           const ConvTranspose2dOptions& opts = {}) {
  return conv_transpose2d(x, w, Tensor<conv_t<TX, TW>, B>{}, opts);
}
/// Gradient of conv_transpose2d with respect to its input: the convolution of grad_output
/// [N, C_out, Ho, Wo] with w, shape [N, C_in, H, W].
template <element_type TG, element_type TW, class B>
Tensor<conv_t<TG, TW>, B> conv_transpose2d_backward_input(const Tensor<TG, B>& grad_output,
                                                          const Tensor<TW, B>& w,
                                                          const Shape& x_shape,
                                                          const ConvTranspose2dOptions& opts = {}) {
  constexpr std::string_view op = "conv_transpose2d_backward_input";
  grad_output.check_defined(op), w.check_defined(op);
  detail::conv_check_backward_dtypes<TG, TW>(op);
  const detail::conv_geometry g = detail::conv_transpose_plan(op, x_shape, w.shape(), opts);
  if (!(grad_output.shape() == detail::conv_input_shape(g)))
    detail::fail<shape_error>(op, "grad_output has shape ", grad_output.shape(), "; expected ",
                              detail::conv_input_shape(g));
  Tensor<conv_t<TG, TW>, B> dx(x_shape);
  detail::conv_forward_into(op, grad_output, w, Tensor<detail::gemm_acc_t<TG, TW>, B>{}, g, false,
                            dx);
  return dx;
}
/// Gradient of conv_transpose2d with respect to its weights (shape w_shape [C_in, C_out/groups,
/// R, S]) from grad_output and the input x.
template <element_type TG, element_type TX, class B>
Tensor<conv_t<TX, TG>, B> conv_transpose2d_backward_weight(
    const Tensor<TG, B>& grad_output, const Tensor<TX, B>& x, const Shape& w_shape,
    const ConvTranspose2dOptions& opts = {}) {
  constexpr std::string_view op = "conv_transpose2d_backward_weight";
  grad_output.check_defined(op), x.check_defined(op);
  detail::conv_check_backward_dtypes<TX, TG>(op);
  const detail::conv_geometry g = detail::conv_transpose_plan(op, x.shape(), w_shape, opts);
  if (!(grad_output.shape() == detail::conv_input_shape(g)))
    detail::fail<shape_error>(op, "grad_output has shape ", grad_output.shape(), "; expected ",
                              detail::conv_input_shape(g));
  // The transposed convolution's input x is the convolution's output gradient; its output
  // gradient is the convolution's input.
  return detail::conv_backward_weight_of(op, x, grad_output, w_shape, g);
}

TESSERA_END_NAMESPACE
