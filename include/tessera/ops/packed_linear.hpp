// tessera/ops/packed_linear.hpp - a linear layer's weight laid out once for the backend's GEMM,
// for inference: pack_linear(w) then linear(x, packed, bias).
//
// linear(x, w) reads the weight in place when the batch is small. A weight row-major in [in, out]
// then puts each of the kernel's column strips (nr columns, k rows) on k rows far apart: one
// cache line, and a new page, per row. Packed, each strip of 32 columns lies contiguous (k x 32
// values), as the GEMM would pack it itself for a large batch. A product of a few rows with a
// weight that does not fit the cache then streams it about a third faster (docs/perf/bert.md).
// Backends without a packed layout (gemm_weight_panel_v == 0, e.g. CUDA) keep the weight as the
// contiguous transpose [in, out]. int8 weights (ops/quant.hpp) pack the same way, with four
// input features of a column together as the int8 GEMM reads them, and their column sums;
// bfloat16 weights (lowp_linear) with two, as the bf16 dot product reads them.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "creation.hpp"
#include "embedding.hpp"
#include "matmul.hpp"
#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE

/// A [out, in] weight packed by pack_linear: data is [panels, in, panel] for a backend with
/// panels (columns zero-padded to whole panels), else [in, out]. int8 panels are
/// [panels, in / 4, panel, 4] (in zero-padded to a multiple of 4: the four values of a column
/// at in-features 4g..4g+3 lie together), with col_sums [panels * panel], each column's sum over
/// in. bfloat16 panels are [panels, in / 2, panel, 2] (in zero-padded to a multiple of 2).
/// Inference only: no gradient flows to it, and it is a copy: later changes to the original weight
/// do not reach it.
template <element_type T, class B>
struct packed_linear {
  Tensor<T, B> data;
  int64_t in_features = 0, out_features = 0;
  int64_t panel = 0;            // columns per panel; 0 for the plain [in, out] layout
  Tensor<int32_t, B> col_sums;  // int8 panels only
  // int8: the largest magnitude of a value, for the GEMM's b_max_abs (128, nothing known, unless
  // pack_linear measured it: a smaller bound that is wrong would make the product wrong).
  int32_t max_abs = 128;
};

namespace detail {
/// Input features kept together in a column of packed panels: 4 for int8, 2 for bfloat16.
template <class T>
inline constexpr int64_t panel_group_v = std::is_same_v<T, int8_t>     ? 4
                                         : std::is_same_v<T, bfloat16> ? 2
                                                                       : 1;
}  // namespace detail

/// Packs a float, double, bfloat16 or int8 weight [out, in] for linear(x, packed[, bias]) (float,
/// double), lowp_linear (bfloat16) or int8_linear (ops/quant.hpp).
template <element_type T, class B>
packed_linear<T, B> pack_linear(const Tensor<T, B>& w) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, int8_t> || std::is_same_v<T, bfloat16>,
                "pack_linear takes float, double, bfloat16 or int8 weights");
  w.check_defined("pack_linear");
  if (w.rank() != 2)
    detail::fail<shape_error>("pack_linear", "expects a weight [out, in], got ", w.shape());
  packed_linear<T, B> p;
  p.out_features = w.shape()[0], p.in_features = w.shape()[1];
  p.panel = detail::gemm_weight_panel_v<B>;
  const Tensor<T, B> wt = w.transpose(0, 1);  // [in, out]
  if constexpr (std::is_same_v<T, int8_t>)    // in int32: the magnitude of -128 does not fit int8
    if (w.numel() > 0)
      p.max_abs = static_cast<int32_t>(
          norm(w.template astype<int32_t>(), std::numeric_limits<double>::infinity()).item());
  if (p.panel == 0) {
    p.data = wt.contiguous();
    return p;
  }
  const int64_t panels = (p.out_features + p.panel - 1) / p.panel;
  const int64_t padded = panels * p.panel;
  if constexpr (constexpr int64_t G = detail::panel_group_v<T>; G > 1) {
    // Pad to [inG, padded], then [inG / G, G, panels, panel] -> [panels, inG / G, panel, G].
    const int64_t in_g = (p.in_features + G - 1) / G * G;
    Tensor<T, B> wide = zeros<T, B>({in_g, padded});
    if (p.out_features > 0 && p.in_features > 0)
      wide.slice(0, 0, p.in_features).slice(1, 0, p.out_features).copy_(wt);
    p.data = wide.view({in_g / G, G, panels, p.panel}).permute({2, 0, 3, 1}).contiguous();
    if constexpr (std::is_same_v<T, int8_t>) p.col_sums = sum(wide, {0}).template astype<int32_t>();
    return p;
  }
  // Pad the columns to whole panels, then [in, panels, panel] -> [panels, in, panel].
  Tensor<T, B> wide = zeros<T, B>({p.in_features, padded});
  if (p.out_features > 0) wide.slice(1, 0, p.out_features).copy_(wt);
  p.data = wide.view({p.in_features, panels, p.panel}).transpose(0, 1).contiguous();
  return p;
}

/// The [out, in] weight a packed one was made from (a contiguous copy).
template <element_type T, class B>
Tensor<T, B> unpack_linear(const packed_linear<T, B>& p) {
  if (!p.data.defined())
    detail::fail<error>("unpack_linear", "the packed weight is empty (make it with pack_linear)");
  if (p.panel == 0) return p.data.transpose(0, 1).contiguous();
  const int64_t panels = p.data.shape()[0];
  if constexpr (constexpr int64_t G = detail::panel_group_v<T>; G > 1) {
    const int64_t in_g = p.data.shape()[1] * G;
    const Tensor<T, B> wide =  // [inG, panels * panel]
        p.data.permute({1, 3, 0, 2}).contiguous().view({in_g, panels * p.panel});
    return wide.slice(0, 0, p.in_features).slice(1, 0, p.out_features).transpose(0, 1).contiguous();
  }
  const Tensor<T, B> wide =  // [in, panels * panel]
      p.data.transpose(0, 1).contiguous().view({p.in_features, panels * p.panel});
  return wide.slice(1, 0, p.out_features).transpose(0, 1).contiguous();
}

namespace detail {
/// Columns `features` of a packed [out, in] weight (rows of its [in, out] transpose), as a
/// [features.size(), out] tensor: what a product needs of a few input features (int8_linear's
/// outliers) without unpacking the rest. A strided copy per feature: a gather of all of them
/// by element index (map_kernel::generate) ran slower, its divisions per element costing more
/// than the copies' calls. Throws index_error for a feature outside [0, in).
template <class T, class B>
Tensor<T, B> packed_feature_rows(const packed_linear<T, B>& p,
                                 const std::vector<int64_t>& features) {
  for (size_t r = 0; r < features.size(); ++r)
    if (features[r] < 0 || features[r] >= p.in_features)
      fail<index_error>("packed_feature_rows", "feature ", features[r], " at position ", r,
                        " is outside [0, ", p.in_features, ")");
  const auto count = static_cast<int64_t>(features.size());
  if (p.panel == 0) return embedding(p.data, from_vector<int64_t, B>(features));
  const int64_t panels = p.data.shape()[0];
  Tensor<T, B> rows({count, panels * p.panel});
  for (int64_t r = 0; r < count; ++r) {
    const int64_t f = features[static_cast<size_t>(r)];
    Tensor<T, B> values;  // [panels, panel]: feature f's value in each column of each panel
    if constexpr (constexpr int64_t G = panel_group_v<T>; G > 1)
      values = p.data.select(1, f / G).select(2, f % G);
    else
      values = p.data.select(1, f);
    rows.select(0, r).view({panels, p.panel}).copy_(values);
  }
  return rows.slice(1, 0, p.out_features);
}

/// The GEMM of x2 [rows, in] times a weight in panels, which it reads in place; its output (c or
/// dequant) and bias are for the caller to set.
template <class Acc, class T, class B>
gemm_problem<T, T, Acc> panel_problem(const Tensor<T, B>& x2, const packed_linear<T, B>& w) {
  gemm_problem<T, T, Acc> pr;
  pr.m = x2.shape()[0], pr.n = w.out_features, pr.k = w.in_features;
  pr.a = x2.data(), pr.a_rs = x2.strides()[0], pr.a_cs = x2.strides()[1];
  pr.b = w.data.data(), pr.b_panel = w.panel;
  if constexpr (constexpr int64_t G = panel_group_v<T>; G > 1) {
    pr.b_rs = G * w.panel, pr.b_cs = w.data.shape()[1] * G * w.panel;
    if constexpr (std::is_same_v<T, int8_t>) {
      pr.b_col_sums = w.col_sums.data();
      pr.b_max_abs = w.max_abs;
    }
  } else {
    pr.b_rs = w.panel, pr.b_cs = w.in_features * w.panel;
  }
  return pr;
}

/// x2 [rows, in] times a weight in panels (plus bias [out] along the columns when not null):
/// one GEMM that reads the panels in place, into a new [rows, out] tensor of the accumulation
/// type (int32 for int8).
template <class Acc, class T, class B>
Tensor<Acc, B> panel_product(const Tensor<T, B>& x2, const packed_linear<T, B>& w,
                             const std::type_identity_t<Tensor<Acc, B>>* bias) {
  Tensor<Acc, B> out({x2.shape()[0], w.out_features});
  if (out.numel() == 0) return out;
  gemm_problem<T, T, Acc> pr = panel_problem<Acc>(x2, w);
  pr.c = out.data(), pr.c_rs = w.out_features, pr.c_cs = 1;
  if (bias) {  // any stride: the GEMM reads the bias in place, as gemm_into passes it
    pr.bias = bias->data(), pr.bias_stride = bias->strides()[0];
    pr.bias_kind = gemm_bias::per_col;
  }
  backend::gemm_kernel<B>::run(pr);
  return out;
}

template <class T, class B>
Tensor<T, B> packed_linear_impl(const Tensor<T, B>& x, const packed_linear<T, B>& w,
                                const Tensor<T, B>* bias) {
  static_assert(std::is_floating_point_v<T>,
                "linear takes packed float or double weights; bfloat16 ones go to lowp_linear, "
                "int8 ones to int8_linear (ops/quant.hpp)");
  x.check_defined("linear");
  if (!w.data.defined())
    fail<error>("linear", "the packed weight is empty (make it with pack_linear)");
  if (x.rank() < 1 || x.shape()[x.rank() - 1] != w.in_features)
    fail<shape_error>("linear", "x has shape ", x.shape(), " but the packed weight takes ",
                      w.in_features, " features");
  if (bias) {
    bias->check_defined("linear");
    if (bias->rank() != 1 || bias->shape()[0] != w.out_features)
      fail<shape_error>("linear", "bias has shape ", bias->shape(), ", expected [", w.out_features,
                        "]");
  }
  if (w.panel == 0) {  // the plain [in, out] layout: an ordinary linear on its transpose
    const Tensor<T, B> wt = w.data.transpose(0, 1);
    return bias ? linear_impl(x, wt, bias) : linear_impl<T, T, B, T>(x, wt, nullptr);
  }
  Shape out_shape;
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) out_shape.push_back(x.shape()[d]), rows *= x.shape()[d];
  out_shape.push_back(w.out_features);
  if (rows == 0 || w.out_features == 0) return Tensor<T, B>(out_shape);
  return panel_product<T>(x.reshape({rows, w.in_features}), w, bias).reshape(out_shape.span());
}
}  // namespace detail

/// x [..., in] · wᵀ + bias [out] -> [..., out], with w packed by pack_linear: the same values as
/// linear(x, w, bias). Throws shape_error on mismatched features or bias length.
template <element_type T, class B>
Tensor<T, B> linear(const Tensor<T, B>& x, const packed_linear<T, B>& w, const Tensor<T, B>& bias) {
  return detail::packed_linear_impl(x, w, &bias);
}
/// x [..., in] · wᵀ, with w packed by pack_linear.
template <element_type T, class B>
Tensor<T, B> linear(const Tensor<T, B>& x, const packed_linear<T, B>& w) {
  return detail::packed_linear_impl<T, B>(x, w, nullptr);
}

TESSERA_END_NAMESPACE
