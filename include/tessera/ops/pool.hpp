// tessera/ops/pool.hpp - 2-D pooling of [N, C, H, W] (or [C, H, W]) tensors: max pooling (with
// argmax indices), average, adaptive average and global average pooling, and their backward
// passes. Validation, geometry and allocation here; the arithmetic is the backend's pool_kernel.
#pragma once

#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/tensor.hpp"
#include "../kernel/pool_problem.hpp"
#include "map.hpp"

TESSERA_BEGIN_NAMESPACE

/// Options of max_pool2d and avg_pool2d, as LibTorch names them; pairs are {height, width}:
/// `ts::max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})`.
struct Pool2dOptions {
  std::array<int64_t, 2> kernel{1, 1};
  /// 0 means the kernel size along that axis (PyTorch's default).
  std::array<int64_t, 2> stride{0, 0};
  /// Implicit padding on each side (-inf for max, zeros for average pooling), at most kernel / 2.
  std::array<int64_t, 2> padding{0, 0};
  /// Spacing of the window's taps; max pooling only (average pooling requires 1).
  std::array<int64_t, 2> dilation{1, 1};
  /// Round the output size up instead of down; the last window must still start inside the input
  /// or its left padding.
  bool ceil_mode = false;
  /// Average pooling divides by the window size including padding (clipped to the padded input),
  /// or, when false, by the number of input elements in the window.
  bool count_include_pad = true;
};

/// Result of max_pool2d_with_indices: the maxima and, per output, the flat index h * W + w of the
/// maximum within its input plane (PyTorch's convention).
template <class T, class B = default_backend>
struct max_pool2d_result {
  Tensor<T, B> values;
  Tensor<int64_t, B> indices;
};

namespace detail {

template <class T>
inline constexpr bool pool_integer_v = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> ||
                                       std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;
/// Element types max pooling takes: floating types and int8/uint8/int32/int64.
template <class T>
inline constexpr bool max_pool_dtype_v = is_floating_v<T> || pool_integer_v<T>;

inline std::string pool_pair(const std::array<int64_t, 2>& a) {
  std::ostringstream os;
  os << "[" << a[0] << ", " << a[1] << "]";
  return os.str();
}

/// A validated pooling geometry: the kernel's problem and the output shape.
struct pool_plan {
  pool_problem pr;
  Shape out_shape;
};

/// Output extent along one axis: PyTorch's pooling_output_shape (floor or ceil of
/// (in + 2p - d(k - 1) - 1) / s + 1; with ceil_mode the last window must start inside the input
/// or its left padding).
inline int64_t pool_out_extent(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                               bool ceil_mode) {
  const int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;  // floor division
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

/// Rank (3 or 4) and non-empty spatial dims of a pooling input shape.
inline void pool_check_input(std::string_view op, const Shape& s, const char* what) {
  if (s.rank() != 3 && s.rank() != 4)
    fail<shape_error>(op, "expects ", what, " [N, C, H, W] or [C, H, W], got ", s);
  if (s[s.rank() - 2] == 0 || s[s.rank() - 1] == 0)
    fail<shape_error>(op, what, " ", s, " has an empty spatial dim (H = ", s[s.rank() - 2],
                      ", W = ", s[s.rank() - 1], ")");
}

/// s with its last two extents replaced.
inline Shape pool_shape(const Shape& s, int64_t h, int64_t w) {
  Shape o = s;
  o[o.rank() - 2] = h, o[o.rank() - 1] = w;
  o.validate();
  return o;
}

inline pool_problem pool_planes_of(const Shape& in) {
  pool_problem pr;
  const int r = in.rank();
  pr.planes = 1;
  for (int d = 0; d < r - 2; ++d) pr.planes *= in[d];
  pr.h = in[r - 2], pr.w = in[r - 1];
  return pr;
}

/// Validates max / average pooling of an input of shape `in` with options o.
inline pool_plan plan_pool2d(std::string_view op, const Shape& in, const Pool2dOptions& o,
                             bool is_max, const char* what = "input") {
  constexpr int64_t limit = int64_t{1} << 31;  // keeps every window computation inside int64
  for (int a = 0; a < 2; ++a) {
    if (o.kernel[a] <= 0 || o.kernel[a] > limit)
      fail<shape_error>(op, "kernel = ", pool_pair(o.kernel), " must be positive (and below 2^31)");
    if (o.stride[a] < 0 || o.stride[a] > limit)
      fail<shape_error>(op, "stride = ", pool_pair(o.stride),
                        " must be positive (0 means the kernel size)");
    if (o.dilation[a] <= 0 || o.dilation[a] > limit)
      fail<shape_error>(op, "dilation = ", pool_pair(o.dilation), " must be positive");
    if (!is_max && o.dilation[a] != 1)
      fail<shape_error>(op, "dilation = ", pool_pair(o.dilation),
                        ": average pooling has no dilation (it must be [1, 1])");
    if (o.padding[a] < 0 || o.padding[a] > o.kernel[a] / 2)
      fail<shape_error>(op, "padding = ", pool_pair(o.padding),
                        " must be >= 0 and at most half the kernel ", pool_pair(o.kernel));
  }
  pool_check_input(op, in, what);
  pool_plan plan;
  pool_problem& pr = plan.pr;
  pr = pool_planes_of(in);
  pr.kh = o.kernel[0], pr.kw = o.kernel[1];
  pr.sh = o.stride[0] ? o.stride[0] : o.kernel[0];
  pr.sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  pr.ph = o.padding[0], pr.pw = o.padding[1];
  pr.dh = o.dilation[0], pr.dw = o.dilation[1];
  pr.count_include_pad = o.count_include_pad;
  pr.oh = pool_out_extent(pr.h, pr.kh, pr.sh, pr.ph, pr.dh, o.ceil_mode);
  pr.ow = pool_out_extent(pr.w, pr.kw, pr.sw, pr.pw, pr.dw, o.ceil_mode);
  if (pr.oh <= 0 || pr.ow <= 0)
    fail<shape_error>(op, "output size [", pr.oh, ", ", pr.ow, "] is too small: ", what, " ", in,
                      " with kernel ", pool_pair(o.kernel), ", stride [", pr.sh, ", ", pr.sw,
                      "], padding ", pool_pair(o.padding), " and dilation ", pool_pair(o.dilation),
                      " (the window is larger than the padded input)");
  if (is_max) {
    // A dilated window can step over a small input entirely: it would have no maximum.
    for (int64_t y = 0; y < pr.oh; ++y)
      if (const auto win = pool_window_of(y, pr.h, pr.kh, pr.sh, pr.ph, pr.dh, true);
          win.begin >= win.end)
        fail<shape_error>(op, "the window of output row ", y, " covers only padding (", what, " ",
                          in, ", kernel ", pool_pair(o.kernel), ", padding ", pool_pair(o.padding),
                          ", dilation ", pool_pair(o.dilation), ")");
    for (int64_t x = 0; x < pr.ow; ++x)
      if (const auto win = pool_window_of(x, pr.w, pr.kw, pr.sw, pr.pw, pr.dw, true);
          win.begin >= win.end)
        fail<shape_error>(op, "the window of output column ", x, " covers only padding (", what,
                          " ", in, ", kernel ", pool_pair(o.kernel), ", padding ",
                          pool_pair(o.padding), ", dilation ", pool_pair(o.dilation), ")");
  }
  plan.out_shape = pool_shape(in, pr.oh, pr.ow);
  return plan;
}

/// Validates adaptive average pooling of an input of shape `in` to output_size.
inline pool_plan plan_adaptive(std::string_view op, const Shape& in,
                               const std::array<int64_t, 2>& size, const char* what = "input") {
  pool_check_input(op, in, what);
  if (size[0] <= 0 || size[1] <= 0 || size[0] > (int64_t{1} << 31) || size[1] > (int64_t{1} << 31))
    fail<shape_error>(op, "output_size = ", pool_pair(size), " must be positive (and below 2^31)");
  pool_plan plan;
  plan.pr = pool_planes_of(in);
  plan.pr.oh = size[0], plan.pr.ow = size[1];
  plan.out_shape = pool_shape(in, size[0], size[1]);
  return plan;
}

/// Where a forward op writes: `out` itself when it is contiguous and shares no memory with the
/// inputs, otherwise a fresh tensor that is copied into `out` afterwards (so overlapping views
/// read as if the inputs were copied first).
template <class T, class B, class... In>
Tensor<T, B> pool_target(std::string_view op, const Tensor<T, B>& out, const Shape& want,
                         const In&... in) {
  begin_write(op, out);
  if (!(out.shape() == want))
    fail<shape_error>(op, "output has shape ", out.shape(), ", expected ", want);
  return kernel_target<T>(out, in...);
}

template <class T>
void require_max_dtype(std::string_view op) {
  if constexpr (!max_pool_dtype_v<T>)
    fail<dtype_error>(op, "no max pooling for ", dtype_name<T>,
                      " (floating types and int8, uint8, int32, int64)");
}
template <class T>
void require_floating(std::string_view op) {
  if constexpr (!is_floating_v<T>)
    fail<dtype_error>(op, "needs a floating element type, got ", dtype_name<T>);
}

template <class T, class B>
pool_plan max_pool_plan(std::string_view op, const Tensor<T, B>& x, const Pool2dOptions& o) {
  x.check_defined(op);
  require_max_dtype<T>(op);
  return plan_pool2d(op, x.shape(), o, true);
}
template <class T, class B>
void run_max_pool(const pool_plan& plan, const Tensor<T, B>& x, const Tensor<T, B>& y,
                  int64_t* indices) {
  if constexpr (max_pool_dtype_v<T>) {
    const Tensor<T, B> xc = x.contiguous();
    backend::pool_kernel<B>::max_forward(plan.pr, xc.data(), y.data(), indices);
  }
}

/// Values and indices of max pooling x with a checked plan (max_pool2d_with_indices; autograd
/// keeps the plan for its backward pass).
template <class T, class B>
max_pool2d_result<T, B> max_pool_with_indices(const pool_plan& plan, const Tensor<T, B>& x) {
  max_pool2d_result<T, B> r{Tensor<T, B>(plan.out_shape), Tensor<int64_t, B>(plan.out_shape)};
  run_max_pool(plan, x, r.values, r.indices.data());
  return r;
}

template <class T, class B>
pool_plan avg_pool_plan(std::string_view op, const Tensor<T, B>& x, const Pool2dOptions& o) {
  x.check_defined(op);
  require_floating<T>(op);
  return plan_pool2d(op, x.shape(), o, false);
}
template <class T, class B>
pool_plan adaptive_plan(std::string_view op, const Tensor<T, B>& x,
                        const std::array<int64_t, 2>& size) {
  x.check_defined(op);
  require_floating<T>(op);
  return plan_adaptive(op, x.shape(), size);
}
template <class T, class B>
void run_avg_pool(const pool_plan& plan, const Tensor<T, B>& x, const Tensor<T, B>& y,
                  bool adaptive) {
  if constexpr (is_floating_v<T>) {
    const Tensor<T, B> xc = x.contiguous();
    if (adaptive)
      backend::pool_kernel<B>::adaptive_avg_forward(plan.pr, xc.data(), y.data());
    else
      backend::pool_kernel<B>::avg_forward(plan.pr, xc.data(), y.data());
  }
}

/// The gradient's leading dims (N, C) must be the input shape's, and the ranks equal.
template <class T, class B>
void pool_check_grad(std::string_view op, const Tensor<T, B>& grad_out, const Shape& input_shape) {
  grad_out.check_defined(op);
  require_floating<T>(op);
  if (grad_out.rank() != 3 && grad_out.rank() != 4)
    fail<shape_error>(op, "expects grad_out [N, C, H, W] or [C, H, W], got ", grad_out.shape());
  if (input_shape.rank() != grad_out.rank())
    fail<shape_error>(op, "grad_out ", grad_out.shape(), " and input shape ", input_shape,
                      " differ in rank");
  for (int d = 0; d + 2 < grad_out.rank(); ++d)
    if (grad_out.shape()[d] != input_shape[d])
      fail<shape_error>(op, "grad_out ", grad_out.shape(), " and input shape ", input_shape,
                        " differ in dim ", d);
  pool_check_input(op, input_shape, "input shape");
}

}  // namespace detail

/// 2-D max pooling: each output is the maximum of its window (a NaN in the window gives NaN).
/// x is [N, C, H, W] or [C, H, W], any strides; the result is [N, C, oh, ow] (or [C, oh, ow])
/// with oh = floor((H + 2 * padding - dilation * (kernel - 1) - 1) / stride) + 1 (ceil with
/// ceil_mode), likewise ow. Element types: floating and int8/uint8/int32/int64.
/// Throws shape_error (rank not 3 or 4, empty H or W, kernel/stride/dilation not positive,
/// padding < 0 or > kernel / 2, output size < 1, a dilated window covering only padding) and
/// dtype_error (bool).
template <element_type T, class B>
Tensor<T, B> max_pool2d(const Tensor<T, B>& x, const Pool2dOptions& options) {
  const auto plan = detail::max_pool_plan("max_pool2d", x, options);
  Tensor<T, B> y(plan.out_shape);
  detail::run_max_pool(plan, x, y, nullptr);
  return y;
}
/// Out-parameter form of max_pool2d: writes into out (exactly max_pool2d's shape, any strides; it
/// may overlap x, which is then read as if copied first). Returns out. Throws as max_pool2d, and
/// shape_error for a wrong out shape or an expanded out.
template <element_type T, class B>
const Tensor<T, B>& max_pool2d(const Tensor<T, B>& x, const Pool2dOptions& options,
                               const Tensor<T, B>& out) {
  const auto plan = detail::max_pool_plan("max_pool2d", x, options);
  const Tensor<T, B> y = detail::pool_target("max_pool2d", out, plan.out_shape, x);
  detail::run_max_pool(plan, x, y, nullptr);
  detail::copy_result(y, out);
  return out;
}

/// max_pool2d that also returns, per output, the flat index h * W + w within its input plane of
/// the maximum it took (int64, same shape as the values): the first maximum in row-major window
/// order, or the last NaN, as PyTorch. Feed them to max_pool2d_backward. Throws as max_pool2d.
template <element_type T, class B>
max_pool2d_result<T, B> max_pool2d_with_indices(const Tensor<T, B>& x,
                                                const Pool2dOptions& options) {
  return detail::max_pool_with_indices(detail::max_pool_plan("max_pool2d_with_indices", x, options),
                                       x);
}
/// Out-parameter form of max_pool2d_with_indices: values into out, indices into indices (both of
/// the result shape, any strides). Throws as max_pool2d_with_indices, and shape_error for wrong
/// or expanded outputs.
template <element_type T, class B>
void max_pool2d_with_indices(const Tensor<T, B>& x, const Pool2dOptions& options,
                             const Tensor<T, B>& out, const Tensor<int64_t, B>& indices) {
  constexpr std::string_view op = "max_pool2d_with_indices";
  const auto plan = detail::max_pool_plan(op, x, options);
  const Tensor<T, B> y = detail::pool_target(op, out, plan.out_shape, x, indices);
  const Tensor<int64_t, B> i = detail::pool_target(op, indices, plan.out_shape, x, out);
  detail::run_max_pool(plan, x, y, i.data());
  detail::copy_result(y, out);
  detail::copy_result(i, indices);
}

/// Gradient of max pooling with respect to its input: a zero tensor of input_shape into which
/// each grad_out element is added at the position its index names (windows that overlap add up).
/// grad_out and indices are [N, C, oh, ow] (or [C, oh, ow]), indices as max_pool2d_with_indices
/// returns them; input_shape is the pooled input's shape. Floating element types.
/// Throws shape_error (ranks, indices' shape differing from grad_out's, leading dims differing
/// from input_shape's, empty input H or W), index_error (an index outside [0, H * W); nothing is
/// written out of bounds) and dtype_error (non-floating T).
template <element_type T, class B>
Tensor<T, B> max_pool2d_backward(const Tensor<T, B>& grad_out, const Tensor<int64_t, B>& indices,
                                 const Shape& input_shape) {
  constexpr std::string_view op = "max_pool2d_backward";
  detail::pool_check_grad(op, grad_out, input_shape);
  indices.check_defined(op);
  if (!(indices.shape() == grad_out.shape()))
    detail::fail<shape_error>(op, "indices ", indices.shape(), " and grad_out ", grad_out.shape(),
                              " differ in shape");
  detail::pool_problem pr = detail::pool_planes_of(input_shape);
  pr.oh = grad_out.shape()[grad_out.rank() - 2], pr.ow = grad_out.shape()[grad_out.rank() - 1];
  Tensor<T, B> gx(input_shape);
  if constexpr (is_floating_v<T>) {
    const Tensor<T, B> g = grad_out.contiguous();
    const Tensor<int64_t, B> id = indices.contiguous();
    if (!backend::pool_kernel<B>::max_backward(pr, g.data(), id.data(), gx.data())) {
      const std::vector<int64_t> v = id.to_vector();
      size_t k = 0;
      while (k < v.size() && v[k] >= 0 && v[k] < pr.h * pr.w) ++k;
      detail::fail<index_error>(op, "index ", k < v.size() ? v[k] : -1, " at flat position ", k,
                                " of indices ", indices.shape(), " is outside the input plane of ",
                                pr.h, " x ", pr.w, " (", input_shape, ")");
    }
  }
  return gx;
}

namespace detail {
/// max_pool2d_backward for indices that max_pool2d_with_indices gave with `plan` (autograd keeps
/// both from its forward pass, so the indices need no check): the backend's gather
/// max_backward_windows where it has one (CUDA: one thread per input element and no wait for a
/// check), else max_pool2d_backward.
template <class T, class B>
Tensor<T, B> max_pool2d_backward_of_forward(const pool_plan& plan, const Tensor<T, B>& grad_out,
                                            const Tensor<int64_t, B>& indices,
                                            const Shape& input_shape) {
  if constexpr (requires(const T* g, const int64_t* i, T* gx) {
                  backend::pool_kernel<B>::max_backward_windows(plan.pr, g, i, gx);
                }) {
    if (grad_out.shape() == plan.out_shape && indices.shape() == plan.out_shape &&
        indices.is_contiguous()) {
      Tensor<T, B> gx(input_shape);
      const Tensor<T, B> g = grad_out.contiguous();
      backend::pool_kernel<B>::max_backward_windows(plan.pr, g.data(), indices.data(), gx.data());
      return gx;
    }
  }
  return max_pool2d_backward(grad_out, indices, input_shape);
}
}  // namespace detail

/// 2-D average pooling: each output is the sum of its window divided by the window size (with
/// count_include_pad) or by the number of input elements in it. x is [N, C, H, W] or [C, H, W],
/// any strides; output shape as max_pool2d's (dilation must be 1). Floating element types; half,
/// bfloat16 and fp8 sum in float, double in double.
/// Throws shape_error as max_pool2d (and for dilation != 1) and dtype_error (non-floating T).
template <element_type T, class B>
Tensor<T, B> avg_pool2d(const Tensor<T, B>& x, const Pool2dOptions& options) {
  const auto plan = detail::avg_pool_plan("avg_pool2d", x, options);
  Tensor<T, B> y(plan.out_shape);
  detail::run_avg_pool(plan, x, y, false);
  return y;
}
/// Out-parameter form of avg_pool2d (out: exactly avg_pool2d's shape, any strides, may overlap
/// x). Returns out. Throws as avg_pool2d, and shape_error for a wrong or expanded out.
template <element_type T, class B>
const Tensor<T, B>& avg_pool2d(const Tensor<T, B>& x, const Pool2dOptions& options,
                               const Tensor<T, B>& out) {
  const auto plan = detail::avg_pool_plan("avg_pool2d", x, options);
  const Tensor<T, B> y = detail::pool_target("avg_pool2d", out, plan.out_shape, x);
  detail::run_avg_pool(plan, x, y, false);
  detail::copy_result(y, out);
  return out;
}

/// Gradient of avg_pool2d with respect to its input: each grad_out element divided by its
/// window's divisor is added to every input element of the window. grad_out must have exactly
/// the shape avg_pool2d(input of input_shape, options) gives; the result has input_shape.
/// Throws shape_error (invalid options or input_shape as avg_pool2d, grad_out of another shape)
/// and dtype_error (non-floating T).
template <element_type T, class B>
Tensor<T, B> avg_pool2d_backward(const Tensor<T, B>& grad_out, const Shape& input_shape,
                                 const Pool2dOptions& options) {
  constexpr std::string_view op = "avg_pool2d_backward";
  detail::pool_check_grad(op, grad_out, input_shape);
  const auto plan = detail::plan_pool2d(op, input_shape, options, false, "input shape");
  if (!(grad_out.shape() == plan.out_shape))
    detail::fail<shape_error>(op, "grad_out has shape ", grad_out.shape(), " but avg_pool2d of ",
                              input_shape, " with these options gives ", plan.out_shape);
  Tensor<T, B> gx(input_shape);
  if constexpr (is_floating_v<T>) {
    const Tensor<T, B> g = grad_out.contiguous();
    backend::pool_kernel<B>::avg_backward(plan.pr, g.data(), gx.data());
  }
  return gx;
}

/// Adaptive average pooling to output_size {oh, ow}: output (i, j) averages input rows
/// [floor(i * H / oh), ceil((i + 1) * H / oh)) and likewise columns (PyTorch's bins; they may
/// overlap, and oh may exceed H). x is [N, C, H, W] or [C, H, W], any strides; the result is
/// [N, C, oh, ow] (or [C, oh, ow]). Floating element types, summed in float (double for double).
/// Throws shape_error (rank not 3 or 4, empty H or W, output_size not positive) and dtype_error.
template <element_type T, class B>
Tensor<T, B> adaptive_avg_pool2d(const Tensor<T, B>& x, std::array<int64_t, 2> output_size) {
  const auto plan = detail::adaptive_plan("adaptive_avg_pool2d", x, output_size);
  Tensor<T, B> y(plan.out_shape);
  detail::run_avg_pool(plan, x, y, true);
  return y;
}
/// Out-parameter form of adaptive_avg_pool2d (out: exactly its shape, any strides, may overlap
/// x). Returns out. Throws as adaptive_avg_pool2d, and shape_error for a wrong or expanded out.
template <element_type T, class B>
const Tensor<T, B>& adaptive_avg_pool2d(const Tensor<T, B>& x, std::array<int64_t, 2> output_size,
                                        const Tensor<T, B>& out) {
  const auto plan = detail::adaptive_plan("adaptive_avg_pool2d", x, output_size);
  const Tensor<T, B> y = detail::pool_target("adaptive_avg_pool2d", out, plan.out_shape, x);
  detail::run_avg_pool(plan, x, y, true);
  detail::copy_result(y, out);
  return out;
}

/// Gradient of adaptive_avg_pool2d: each grad_out element divided by its bin's size is added to
/// every input element of the bin. grad_out is [N, C, oh, ow] (or [C, oh, ow]); the output size
/// is read from it; the result has input_shape, whose leading dims must equal grad_out's.
/// Throws shape_error (ranks or leading dims differ, empty dims) and dtype_error.
template <element_type T, class B>
Tensor<T, B> adaptive_avg_pool2d_backward(const Tensor<T, B>& grad_out, const Shape& input_shape) {
  constexpr std::string_view op = "adaptive_avg_pool2d_backward";
  detail::pool_check_grad(op, grad_out, input_shape);
  const int r = grad_out.rank();
  const auto plan = detail::plan_adaptive(
      op, input_shape, {grad_out.shape()[r - 2], grad_out.shape()[r - 1]}, "input shape");
  Tensor<T, B> gx(input_shape);
  if constexpr (is_floating_v<T>) {
    const Tensor<T, B> g = grad_out.contiguous();
    backend::pool_kernel<B>::adaptive_avg_backward(plan.pr, g.data(), gx.data());
  }
  return gx;
}

/// Global average pooling: the mean of each H x W plane, [N, C, H, W] -> [N, C, 1, 1] (or
/// [C, H, W] -> [C, 1, 1]); adaptive_avg_pool2d to {1, 1}, computed as one sum per plane.
/// Throws shape_error (rank not 3 or 4, empty H or W) and dtype_error (non-floating T).
template <element_type T, class B>
Tensor<T, B> global_avg_pool2d(const Tensor<T, B>& x) {
  const auto plan = detail::adaptive_plan("global_avg_pool2d", x, {1, 1});
  Tensor<T, B> y(plan.out_shape);
  detail::run_avg_pool(plan, x, y, true);
  return y;
}
/// Out-parameter form of global_avg_pool2d (out: [N, C, 1, 1] or [C, 1, 1], any strides).
/// Returns out. Throws as global_avg_pool2d, and shape_error for a wrong or expanded out.
template <element_type T, class B>
const Tensor<T, B>& global_avg_pool2d(const Tensor<T, B>& x, const Tensor<T, B>& out) {
  const auto plan = detail::adaptive_plan("global_avg_pool2d", x, {1, 1});
  const Tensor<T, B> y = detail::pool_target("global_avg_pool2d", out, plan.out_shape, x);
  detail::run_avg_pool(plan, x, y, true);
  detail::copy_result(y, out);
  return out;
}

TESSERA_END_NAMESPACE
