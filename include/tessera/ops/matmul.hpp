// tessera/ops/matmul.hpp - matmul (NumPy semantics), gemm, linear: shape checks, dtype rules and
// batch offsets; the arithmetic is the backend's gemm_kernel.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../core/matmul_precision.hpp"
#include "../core/tensor.hpp"
#include "../kernel/gemm_problem.hpp"
#include "map.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

template <class T>
inline constexpr bool is_byte_int_v = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>;

/// Accumulation type of a product of TA and TB: int32 for 8-bit integers (exact), double when
/// either side promotes to double, float for every other floating combination.
template <class TA, class TB>
using gemm_acc_t = std::conditional_t<
    is_byte_int_v<TA> && is_byte_int_v<TB>, int32_t,
    std::conditional_t<std::is_same_v<promote_t<TA, TB>, double>, double, float>>;

/// Whether the CPU/CUDA GEMM handles this input pair: two 8-bit integer types, or any pair
/// whose promotion is floating.
template <class TA, class TB>
inline constexpr bool gemm_supported_v =
    (is_byte_int_v<TA> && is_byte_int_v<TB>) || is_floating_v<promote_t<TA, TB>>;

}  // namespace detail

/// Element type of matmul(a, b): int32 for 8-bit integer inputs, otherwise promote_t<TA, TB>
/// (half x half -> half, accumulated in float and rounded once).
template <element_type TA, element_type TB>
using matmul_t = std::conditional_t<detail::is_byte_int_v<TA> && detail::is_byte_int_v<TB>, int32_t,
                                    promote_t<TA, TB>>;

namespace detail {

template <class Acc>
Acc gemm_scalar(std::string_view op, const char* name, double v) {
  if constexpr (std::is_integral_v<Acc>) {
    if (!(v == std::trunc(v)) || v < std::numeric_limits<Acc>::min() ||
        v > std::numeric_limits<Acc>::max())
      fail<dtype_error>(op, name, " = ", v, " is not an int32 value (the output is int32)");
  }
  return static_cast<Acc>(v);
}

/// The batch dims of t (all but the last two).
template <class T, class B>
Shape batch_shape(const Tensor<T, B>& t) {
  Shape s;
  for (int d = 0; d + 2 < t.rank(); ++d) s.push_back(t.shape()[d]);
  return s;
}

/// Element offsets of each batch matrix of t viewed with batch dims `batch` (t's own batch dims
/// broadcast to it), row-major over the batch index.
template <class T, class B>
std::vector<int64_t> batch_offsets(const Tensor<T, B>& t, const Shape& batch) {
  const int r = batch.rank(), lead = r - (t.rank() - 2);
  std::vector<int64_t> off(static_cast<size_t>(batch.numel()), 0);
  int64_t idx[max_rank] = {};
  for (int64_t n = 0; n < static_cast<int64_t>(off.size()); ++n) {
    int64_t o = 0;
    for (int d = lead; d < r; ++d)
      if (t.shape()[d - lead] != 1) o += idx[d] * t.strides()[d - lead];
    off[static_cast<size_t>(n)] = o;
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return off;
}

/// The batch dims of a and b broadcast together; the error names both operands' full shapes.
template <class TA, class TB, class B>
Shape product_batch(std::string_view op, const Tensor<TA, B>& a, const Tensor<TB, B>& b) {
  const Shape ba = batch_shape(a), bb = batch_shape(b);
  if (const int i = broadcast_conflict(ba, bb); i >= 0) {
    const int r = std::max(ba.rank(), bb.rank());
    fail<shape_error>(op, "batch dims of ", a.shape(), " and ", b.shape(), " do not broadcast (",
                      broadcast_extent(ba, i, r), " vs ", broadcast_extent(bb, i, r), ")");
  }
  return broadcast_shapes(ba, bb, op);
}

/// Extras of a GEMM beyond c = alpha a·b + beta c.
template <class Acc, class B>
struct gemm_extras {
  Tensor<Acc, B> bias;  // 1-D, undefined for none
  gemm_bias bias_kind = gemm_bias::none;
  bool relu = false;
};

/// c = alpha * a·b + beta * c (+ bias) (relu) on matrices of rank >= 2 whose batch dims (a's and
/// b's broadcast together) equal c's. c's element type may differ from the accumulation type:
/// then the product is formed in Acc and rounded once into c.
template <class TA, class TB, class TC, class B>
void gemm_into(std::string_view op, double alpha, const Tensor<TA, B>& a0, const Tensor<TB, B>& b0,
               double beta, const Tensor<TC, B>& c,
               const gemm_extras<gemm_acc_t<TA, TB>, B>& extras = {}) {
  using Acc = gemm_acc_t<TA, TB>;
  if constexpr (!gemm_supported_v<TA, TB>) {
    fail<dtype_error>(op, "no matrix product for ", dtype_name<TA>, " x ", dtype_name<TB>,
                      " (floating types, or int8/uint8 with int32 accumulation)");
  } else {
    if constexpr (std::is_integral_v<Acc>) {
      if (!std::is_same_v<TC, int32_t>)
        fail<dtype_error>(op, "8-bit integer products accumulate in int32; the output is ",
                          dtype_name<TC>);
    } else if (!is_floating_v<TC>) {
      fail<dtype_error>(op, "the output of a floating product must be floating, not ",
                        dtype_name<TC>);
    }
    if constexpr (std::is_integral_v<Acc> == std::is_integral_v<TC>) {
      const int64_t m = a0.shape()[a0.rank() - 2], k = a0.shape()[a0.rank() - 1];
      const int64_t kb = b0.shape()[b0.rank() - 2], n = b0.shape()[b0.rank() - 1];
      if (k != kb)
        fail<shape_error>(op, "inner dimensions differ: ", a0.shape(), " x ", b0.shape(), " (", k,
                          " vs ", kb, ")");
      const Shape batch = product_batch(op, a0, b0);
      Shape want = batch_shape(c);
      if (!(broadcast_shapes(batch, want, op) == want) || c.shape()[c.rank() - 2] != m ||
          c.shape()[c.rank() - 1] != n) {
        Shape full = batch;
        full.push_back(m), full.push_back(n);
        fail<shape_error>(op, "output has shape ", c.shape(), "; ", a0.shape(), " x ", b0.shape(),
                          " gives ", full);
      }
      begin_write(op, c);
      // What the kernel writes: c itself when the backend stores TC, else an Acc buffer.
      using Out = std::conditional_t<gemm_stores_v<B, TC, Acc>, TC, Acc>;
      Tensor<Out, B> target;
      if constexpr (std::is_same_v<TC, Out>)
        target = c;
      else
        target = beta != 0 ? c.template astype<Acc>() : Tensor<Acc, B>(c.shape());
      // The product reads a and b while writing c: an input sharing c's memory is copied first.
      const Tensor<TA, B> a = a0.shares_storage_with(target) ? a0.clone() : a0;
      const Tensor<TB, B> b = b0.shares_storage_with(target) ? b0.clone() : b0;

      gemm_problem<TA, TB, Acc, Out> pr;
      pr.m = m, pr.n = n, pr.k = k;
      const int ra = a.rank(), rb = b.rank(), rc = target.rank();
      pr.a = a.data(), pr.a_rs = a.strides()[ra - 2], pr.a_cs = a.strides()[ra - 1];
      pr.b = b.data(), pr.b_rs = b.strides()[rb - 2], pr.b_cs = b.strides()[rb - 1];
      pr.c = target.data(), pr.c_rs = target.strides()[rc - 2], pr.c_cs = target.strides()[rc - 1];
      pr.alpha = gemm_scalar<Acc>(op, "alpha", alpha);
      pr.beta = gemm_scalar<Acc>(op, "beta", beta);
      if (extras.bias_kind != gemm_bias::none) {
        pr.bias = extras.bias.data(), pr.bias_stride = extras.bias.strides()[0];
        pr.bias_kind = extras.bias_kind;
      }
      pr.relu = extras.relu;
      std::vector<int64_t> a_off, b_off, c_off;
      pr.batch = want.numel();
      if (want.rank() > 0) {
        a_off = batch_offsets(a, want), b_off = batch_offsets(b, want);
        c_off = batch_offsets(target, want);
        pr.a_offsets = a_off.data(), pr.b_offsets = b_off.data(), pr.c_offsets = c_off.data();
      }
      backend::gemm_kernel<B>::run(pr);
      if constexpr (!std::is_same_v<TC, Out>) c.copy_(target);
    }
  }
}

/// The result shape of matmul(a, b) and the rank >= 2 views the product runs on.
template <class TA, class TB, class B>
struct matmul_plan {
  Tensor<TA, B> a;
  Tensor<TB, B> b;
  Shape out_shape, full_shape;  // the result, and the result with 1-D operands' unit dims
  matmul_plan(const Tensor<TA, B>& a0, const Tensor<TB, B>& b0) {
    a0.check_defined("matmul"), b0.check_defined("matmul");
    if (a0.rank() == 0 || b0.rank() == 0)
      fail<shape_error>("matmul", "operands must have rank >= 1, got ", a0.shape(), " x ",
                        b0.shape());
    a = a0.rank() == 1 ? a0.unsqueeze(0) : a0;
    b = b0.rank() == 1 ? b0.unsqueeze(1) : b0;
    const int64_t k = a.shape()[a.rank() - 1], kb = b.shape()[b.rank() - 2];
    if (k != kb)
      fail<shape_error>("matmul", "inner dimensions differ: ", a0.shape(), " x ", b0.shape(), " (",
                        k, " vs ", kb, ")");
    full_shape = product_batch("matmul", a, b);
    out_shape = full_shape;
    full_shape.push_back(a.shape()[a.rank() - 2]), full_shape.push_back(b.shape()[b.rank() - 1]);
    if (a0.rank() > 1) out_shape.push_back(a.shape()[a.rank() - 2]);
    if (b0.rank() > 1) out_shape.push_back(b.shape()[b.rank() - 1]);
  }
};

}  // namespace detail

/// Matrix product with NumPy semantics: 2-D x 2-D; a 1-D operand is a row (left) or column
/// (right) vector whose unit dim is dropped from the result; higher ranks are stacks of matrices
/// whose batch dims broadcast. Any strides: transposed views are read in place, never copied.
/// Floating inputs of any mix accumulate in float (double if either is double) and are rounded
/// once to matmul_t<TA, TB>; int8/uint8 accumulate exactly in int32.
/// Throws shape_error (inner dims differ, batch dims do not broadcast, rank 0) and dtype_error
/// (other integer types, bool).
template <element_type TA, element_type TB, class B>
Tensor<matmul_t<TA, TB>, B> matmul(const Tensor<TA, B>& a, const Tensor<TB, B>& b) {
  detail::matmul_plan<TA, TB, B> plan(a, b);
  Tensor<matmul_t<TA, TB>, B> out(plan.out_shape);
  detail::gemm_into("matmul", 1.0, plan.a, plan.b, 0.0, out.view(plan.full_shape));
  return out;
}

/// Out-parameter form: writes a·b into out (shape exactly matmul(a, b)'s; any floating dtype for
/// floating inputs, int32 for 8-bit integer inputs). out may overlap a or b: the inputs are then
/// read as if copied first. Returns out.
template <element_type TA, element_type TB, element_type TC, class B>
const Tensor<TC, B>& matmul(const Tensor<TA, B>& a, const Tensor<TB, B>& b,
                            const Tensor<TC, B>& out) {
  detail::matmul_plan<TA, TB, B> plan(a, b);
  out.check_defined("matmul");
  if (!(out.shape() == plan.out_shape))
    detail::fail<shape_error>("matmul", "output has shape ", out.shape(), "; ", a.shape(), " x ",
                              b.shape(), " gives ", plan.out_shape);
  detail::gemm_into("matmul", 1.0, plan.a, plan.b, 0.0, out.view(plan.full_shape));
  return out;
}

/// General matrix multiply-add, BLAS's gemm on tensors: c = alpha * a·b + beta * c. a is
/// [..., m, k], b [..., k, n], c [..., m, n] (rank >= 2); a's and b's batch dims broadcast to
/// c's. Transposes are views (`a.transpose(-1, -2)`). beta == 0: c is not read (NaN in c does not
/// leak); alpha == 0 or k == 0: a and b are not read. For int32 c (8-bit inputs) alpha and beta
/// must be integers (dtype_error otherwise). Inputs overlapping c are read as if copied first.
template <element_type TA, element_type TB, element_type TC, class B>
void gemm(double alpha, const Tensor<TA, B>& a, const Tensor<TB, B>& b, double beta,
          const Tensor<TC, B>& c) {
  a.check_defined("gemm"), b.check_defined("gemm"), c.check_defined("gemm");
  if (a.rank() < 2 || b.rank() < 2 || c.rank() < 2)
    detail::fail<shape_error>("gemm", "operands must have rank >= 2, got ", a.shape(), " x ",
                              b.shape(), " -> ", c.shape());
  detail::gemm_into("gemm", alpha, a, b, beta, c);
}

namespace detail {
template <class TX, class TW, class B, class TBias>
Tensor<matmul_t<TX, TW>, B> linear_impl(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                                        const Tensor<TBias, B>* bias, bool relu = false) {
  using Acc = gemm_acc_t<TX, TW>;
  x.check_defined("linear"), w.check_defined("linear");
  if (x.rank() < 1 || w.rank() != 2)
    fail<shape_error>("linear", "expects x [..., in] and w [out, in], got ", x.shape(), " and ",
                      w.shape());
  const int64_t in = x.shape()[x.rank() - 1], out_features = w.shape()[0];
  if (w.shape()[1] != in)
    fail<shape_error>("linear", "x has ", in, " features but w is ", w.shape(), " (expected [out, ",
                      in, "])");
  gemm_extras<Acc, B> extras;
  extras.relu = relu;  // max(., 0) in the GEMM's store (nn fuses Linear + ReLU this way)
  if (bias) {
    bias->check_defined("linear");
    if (bias->rank() != 1 || bias->shape()[0] != out_features)
      fail<shape_error>("linear", "bias has shape ", bias->shape(), ", expected [", out_features,
                        "]");
    if constexpr (std::is_same_v<TBias, Acc>)
      extras.bias = *bias;
    else
      extras.bias = bias->template astype<Acc>();
    extras.bias_kind = gemm_bias::per_col;
  }
  Shape out_shape;
  for (int d = 0; d + 1 < x.rank(); ++d) out_shape.push_back(x.shape()[d]);
  out_shape.push_back(out_features);
  Tensor<matmul_t<TX, TW>, B> out(out_shape);
  // Explicit row count: reshape cannot infer -1 when a dim is 0.
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) rows *= x.shape()[d];
  const Tensor<TX, B> x2 = x.reshape({rows, in});
  gemm_into("linear", 1.0, x2, w.transpose(0, 1), 0.0, out.view({rows, out_features}), extras);
  return out;
}
}  // namespace detail

/// Dense layer, LibTorch convention: x [..., in] · wᵀ (w is [out, in]) + bias [out] ->
/// [..., out]. The bias is added in the GEMM's store, not as a second pass. Throws shape_error on
/// mismatched features or bias length.
template <element_type TX, element_type TW, element_type TBias, class B>
Tensor<matmul_t<TX, TW>, B> linear(const Tensor<TX, B>& x, const Tensor<TW, B>& w,
                                   const Tensor<TBias, B>& bias) {
  return detail::linear_impl(x, w, &bias);
}
/// Dense layer without bias: x · wᵀ.
template <element_type TX, element_type TW, class B>
Tensor<matmul_t<TX, TW>, B> linear(const Tensor<TX, B>& x, const Tensor<TW, B>& w) {
  return detail::linear_impl<TX, TW, B, TX>(x, w, nullptr);
}

TESSERA_END_NAMESPACE
