// tessera/ops/quant.hpp - linear layers with narrow weights, for inference:
// - int8 dynamic quantization, as ONNX Runtime's quantize_dynamic and PyTorch's dynamic
//   quantization do: weights quantized once per output channel, activations per row at run
//   time, the product in int8 with exact int32 sums (VNNI on the CPU), then scaled back to float
//   with the bias added;
// - bfloat16 / half weights, with the activations rounded to the same type (as autocast does),
//   summed in float;
// - 8-bit float weights (e4m3, e5m2) with one scale per output channel, float activations.
// The int8 and 8-bit float weights are rounded to nearest, or by GPTQ against calibration inputs
// (gptq.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "../kernel/norm_problem.hpp"
#include "creation.hpp"
#include "elementwise.hpp"
#include "embedding.hpp"
#include "gptq.hpp"
#include "matmul.hpp"
#include "packed_linear.hpp"
#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// norm's p for the largest magnitude: one pass, without a tensor of magnitudes.
inline constexpr double inf_norm = std::numeric_limits<double>::infinity();

/// Outlier features up to which int8_linear adds their float product in the int8 GEMM's
/// epilogue (gemm_dequant::extra_k): there each costs a broadcast and a multiply-add per vector
/// of output, a sequential sum that equals a float GEMM's over one k block.
inline constexpr int64_t int8_fused_outliers = 32;

/// An int32 product scaled back: acc * row_step * col_step + bias (as the GEMM's epilogue does
/// it, gemm_dequant).
struct int8_dequantize {
  TESSERA_HOST_DEVICE float operator()(int32_t acc, float row_step, float col_step,
                                       float bias) const {
    return gemm_dequant::apply(acc, row_step, col_step, bias);
  }
};

/// The scale of an output channel of 8-bit float weights whose largest magnitude is m: m / top,
/// top being the format's largest finite value, so that the channel uses the whole range.
struct float8_scale {
  float top;
  TESSERA_HOST_DEVICE float operator()(float m) const { return m / top; }
};
/// x / scale in the 8-bit format T (0 where the scale is 0: an all-zero channel).
template <class T>
struct float8_quantize {
  TESSERA_HOST_DEVICE T operator()(float x, float scale) const {
    return T(scale > 0 ? x / scale : 0.0f);
  }
};
/// A float product of scaled weights scaled back: acc * scale + bias.
struct scale_add_bias {
  TESSERA_HOST_DEVICE float operator()(float acc, float scale, float bias) const {
    return acc * scale + bias;
  }
};

/// The int8 step of each row of x (its largest magnitude / top), keeping the last dim as 1.
template <class B>
Tensor<float, B> int8_row_steps(const Tensor<float, B>& x, int top = 127) {
  return map(int8_step{static_cast<float>(top)}, norm(x, inf_norm, {x.rank() - 1}, true));
}

/// The per-channel scale of 8-bit float weights [out, in] (float8_scale of each row), [out].
template <class T, class B>
Tensor<float, B> float8_row_scales(const Tensor<float, B>& weight) {
  return map(float8_scale{static_cast<float>(std::numeric_limits<T>::max())},
             norm(weight, inf_norm, {1}));
}

/// Checks a float linear layer (weight [out, in], bias [out] or undefined) for quantization.
template <class B>
void check_linear_layer(const char* op, const Tensor<float, B>& weight,
                        const Tensor<float, B>& bias) {
  weight.check_defined(op);
  if (weight.rank() != 2 ||
      (bias.defined() && (bias.rank() != 1 || bias.shape()[0] != weight.shape()[0])))
    fail<shape_error>(op, "weight must be [out, in] and bias [out], got ", weight.shape(), " and ",
                      bias.defined() ? bias.shape() : Shape{});
}

/// Checks the largest quantized magnitude `top` (1 to 127) that op was given as `what`.
inline void check_int8_top(const char* op, const char* what, int top) {
  if (top < 1 || top > 127) fail<error>(op, what, " ", top, " must be in [1, 127]");
}

/// x [..., in] seen as [rows, in], and the output shape [..., out]; throws shape_error naming
/// op when x's last dim is not in.
template <class B>
std::pair<Tensor<float, B>, Shape> linear_rows(const char* op, const Tensor<float, B>& x,
                                               int64_t in, int64_t out) {
  x.check_defined(op);
  if (x.rank() == 0 || x.shape()[x.rank() - 1] != in)
    fail<shape_error>(op, "x ", x.shape(), " must end with ", in, " features");
  Shape out_shape = x.shape();
  out_shape[x.rank() - 1] = out;
  const int64_t rows = x.numel() / (in > 0 ? in : 1);
  return {x.reshape({rows, in}), out_shape};
}

}  // namespace detail

/// A float tensor quantized along its last dim: values = round(x / step) in [-127, 127] with one
/// step per row (steps has x's shape without its last dim, kept as 1).
template <class B>
struct int8_rows {
  Tensor<int8_t, B> values;
  Tensor<float, B> steps;
};

namespace detail {
/// Whether backend B quantizes rows in one fused kernel (norm_kernel<B>::int8_rows: the CPU).
template <class B>
concept has_int8_rows_kernel = requires(const int8_rows_problem& p) {
  backend::norm_kernel<B>::int8_rows(p);
};

/// The rows of x * keep (keep [c], the last dim of x, or undefined: x itself) quantized as
/// quantize_int8_rows does, in one pass over x where the backend has the fused kernel. The
/// caller has checked x (rank >= 1), keep and top.
template <class B>
int8_rows<B> quantize_kept_rows(const Tensor<float, B>& x, const Tensor<float, B>& keep, int top) {
  if constexpr (has_int8_rows_kernel<B>) {
    const Tensor<float, B> xc = x.contiguous();
    Tensor<float, B> kc;
    if (keep.defined()) kc = keep.contiguous();
    Shape step_shape = x.shape();
    step_shape[x.rank() - 1] = 1;
    int8_rows<B> r{Tensor<int8_t, B>(x.shape()), zeros<float, B>(step_shape)};
    int8_rows_problem p;
    p.c = x.shape()[x.rank() - 1], p.rows = p.c == 0 ? 0 : x.numel() / p.c;
    p.x = xc.data(), p.x_rs = p.c, p.keep = kc.defined() ? kc.data() : nullptr;
    p.top = static_cast<float>(top), p.values = r.values.data(), p.steps = r.steps.data();
    if (p.rows > 0) backend::norm_kernel<B>::int8_rows(p);
    return r;
  } else {
    const Tensor<float, B> v = keep.defined() ? x * keep : x;
    const Tensor<float, B> steps = int8_row_steps(v, top);
    return {map(int8_quantize{static_cast<float>(top)}, v, steps), steps};
  }
}
}  // namespace detail

/// Symmetric per-row int8 quantization of x (rank >= 1): each row's step is its largest
/// magnitude / top, values in [-top, top] (top 127, or fewer levels: 63 for 7 bits, 1 to 127).
/// Dequantized, every element is within step / 2 of x.
template <class B>
int8_rows<B> quantize_int8_rows(const Tensor<float, B>& x, int top = 127) {
  x.check_defined("quantize_int8_rows");
  if (x.rank() == 0)
    detail::fail<shape_error>("quantize_int8_rows", "x must have at least one dim");
  detail::check_int8_top("quantize_int8_rows", "top", top);
  return detail::quantize_kept_rows(x, Tensor<float, B>(), top);
}

namespace detail {
/// weight [out, in] rounded by GPTQ (gptq.hpp) against hessian [in, in], on the grid of each row:
/// round(v, scale) is v rounded to the narrow format of a row with that scale (scales: one per
/// row). The rounded values, in float, for the format's own quantizer (which then rounds
/// exactly). Throws shape_error naming op when hessian is not [in, in].
template <class B, class HB, class Round>
Tensor<float, B> gptq_rounded(const char* op, const Tensor<float, B>& weight,
                              const Tensor<double, HB>& hessian, const Tensor<float, B>& scales,
                              Round round) {
  const int64_t out = weight.shape()[0], in = weight.shape()[1];
  if (hessian.shape() != Shape{in, in})
    fail<shape_error>(op, "hessian must be [", in, ", ", in, "] for weight ", weight.shape(),
                      ", got ", hessian.shape());
  const std::vector<float> w_host = weight.contiguous().to_vector();
  const std::vector<float> s = scales.contiguous().to_vector();
  std::vector<double> w(w_host.begin(), w_host.end());
  gptq_round(w, out, in, gptq_inverse_factor(hessian.contiguous().to_vector(), in),
             [&](int64_t o, double v) {
               const double so = s[static_cast<size_t>(o)];
               return so > 0 ? round(v, so) : 0.0;
             });
  return from_vector<float, B>(std::vector<float>(w.begin(), w.end()), Shape{out, in});
}
}  // namespace detail

/// A linear layer's weight [out, in] quantized per output channel, with its float bias [out]
/// (or undefined).
template <class B>
struct int8_linear_weights {
  int8_rows<B> weight;
  Tensor<float, B> bias;
  int64_t in_features = 0, out_features = 0;
  /// Input features with a magnitude above this in some row skip the activation quantization
  /// (0: none do); see int8_linear.
  float outlier_threshold = 0;
  /// The largest magnitude of the quantized activations, 1 to 127: 127, or 63 for 7 bits (twice
  /// the step; on CPUs with AVX2 but without VNNI the int8 GEMM then runs about 1.6x faster,
  /// still exact, since the products fit vpmaddubsw's 16-bit sums: docs/quantization.md).
  int activation_max = 127;
  /// The values laid out once for the backend's GEMM by pack_linear (then weight.values is
  /// empty: this is the only copy), or empty.
  packed_linear<int8_t, B> packed;
};

namespace detail {
inline void check_outlier_threshold(float t) {
  if (!(t >= 0))
    fail<error>("quantize_linear_int8", "outlier_threshold ", t, " must be 0 (none) or positive");
}

/// A layer quantized to rows q (of a weight of shape [out, in]) in its stored form: steps as
/// [1, out]; the values as a view of the contiguous [in, out] transpose (the product's B operand
/// then has contiguous rows, which the int8 GEMM packs several times faster than strided ones);
/// a zero bias where the layer has none.
template <class B>
int8_linear_weights<B> int8_layer(const int8_rows<B>& q, const Tensor<float, B>& bias,
                                  const Shape& weight_shape, float outlier_threshold) {
  int8_linear_weights<B> w;
  w.out_features = weight_shape[0], w.in_features = weight_shape[1];
  w.outlier_threshold = outlier_threshold;
  w.weight.steps = q.steps.reshape({1, w.out_features});
  w.weight.values = q.values.transpose(0, 1).contiguous().transpose(0, 1);
  w.bias = bias.defined() ? bias : zeros<float, B>({w.out_features});
  return w;
}
}  // namespace detail

/// The largest weight magnitude at which backend B's int8 GEMM runs at its full rate on this
/// machine, for quantize_linear_int8's weight_max: 127 (all of int8) unless the backend's
/// gemm_kernel says less. The CPU running AVX2 without VNNI says 64: 7-bit weights then multiply
/// exactly with vpmaddubsw, about 1.6x faster (docs/quantization.md).
template <class B>
int int8_fast_weight_max() {
  if constexpr (requires { backend::gemm_kernel<B>::int8_full_rate_b_max(); })
    return backend::gemm_kernel<B>::int8_full_rate_b_max();
  else
    return 127;
}

/// Quantizes a float linear layer (weight [out, in], bias [out] or undefined) for int8_linear;
/// outlier_threshold as int8_linear_weights says (it must not be negative). The weights take
/// values in [-weight_max, weight_max] (1 to 127; 64 or less: 7 bits, see int8_fast_weight_max).
template <class B>
int8_linear_weights<B> quantize_linear_int8(const Tensor<float, B>& weight,
                                            const Tensor<float, B>& bias = {},
                                            float outlier_threshold = 0, int weight_max = 127) {
  detail::check_linear_layer("quantize_linear_int8", weight, bias);
  detail::check_outlier_threshold(outlier_threshold);
  detail::check_int8_top("quantize_linear_int8", "weight_max", weight_max);
  return detail::int8_layer(quantize_int8_rows(weight, weight_max), bias, weight.shape(),
                            outlier_threshold);
}

/// w with its values packed for the backend's GEMM (packed_linear.hpp), which then reads them in
/// place instead of packing them on every call: at a few rows that packing costs more than the
/// product. weight.values is released (unpack_linear(w.packed) gives it back); int8_linear's
/// results are the same. Already packed weights are returned as they are.
template <class B>
int8_linear_weights<B> pack_linear(int8_linear_weights<B> w) {
  if (w.packed.data.defined()) return w;
  w.weight.values.check_defined("pack_linear");
  w.packed = pack_linear(w.weight.values);
  w.weight.values = Tensor<int8_t, B>();
  return w;
}

/// As quantize_linear_int8, same steps, with the weights rounded by GPTQ (gptq.hpp) for inputs x
/// whose sum of x x^T is `hessian` [in, in] (float64, on any backend). Throws shape_error when
/// hessian is not [in, in], error when it is not positive semi-definite.
template <class B, class HB>
int8_linear_weights<B> quantize_linear_int8(const Tensor<float, B>& weight,
                                            const Tensor<float, B>& bias, float outlier_threshold,
                                            const Tensor<double, HB>& hessian,
                                            int weight_max = 127) {
  detail::check_linear_layer("quantize_linear_int8", weight, bias);
  detail::check_outlier_threshold(outlier_threshold);
  detail::check_int8_top("quantize_linear_int8", "weight_max", weight_max);
  const Tensor<float, B> steps = detail::int8_row_steps(weight, weight_max);  // [out, 1]
  const double top = weight_max;
  const Tensor<float, B> rounded = detail::gptq_rounded(
      "quantize_linear_int8", weight, hessian, steps, [top](double v, double step) {
        return std::clamp(std::nearbyint(v / step), -top, top) * step;
      });
  // Each rounded value is a whole number of its row's step: quantizing again is exact.
  const detail::int8_quantize quantize{static_cast<float>(weight_max)};
  return detail::int8_layer(int8_rows<B>{map(quantize, rounded, steps), steps}, bias,
                            weight.shape(), outlier_threshold);
}

/// x [..., in] · weightᵀ + bias with the weight quantized per output channel and x per row at
/// run time (dynamic quantization): the product runs in int8 with exact int32 sums, then each
/// element is scaled by its row's and column's steps. The error against the float layer is at
/// most half a step of each operand per term. Throws shape_error when x's last dim is not in.
///
/// With an outlier threshold, the input features where some row's magnitude exceeds it are left
/// out of the int8 product and multiplied in float by their (dequantized) weights instead, as
/// LLM.int8 does: a few large features would otherwise set every row's step, and the rest of
/// the row would get coarse steps. Transformers' hidden states have such features.
template <class B>
Tensor<float, B> int8_linear(const Tensor<float, B>& x, const int8_linear_weights<B>& w) {
  const auto [x2, out_shape] = detail::linear_rows("int8_linear", x, w.in_features, w.out_features);
  if (out_shape.numel() == 0) return Tensor<float, B>(out_shape);
  std::vector<int64_t> outliers;
  if (w.outlier_threshold > 0) {
    const std::vector<float> largest =
        norm(x2, detail::inf_norm, {0}).template to<cpu>().to_vector();
    for (size_t i = 0; i < largest.size(); ++i)
      if (largest[i] > w.outlier_threshold) outliers.push_back(static_cast<int64_t>(i));
  }
  Tensor<float, B> keep;  // 0 for the outlier features, 1 for the rest
  Tensor<int64_t, B> ids;
  if (!outliers.empty()) {
    ids = from_vector<int64_t, B>(outliers);
    std::vector<float> k(static_cast<size_t>(w.in_features), 1.0f);
    for (const int64_t i : outliers) k[static_cast<size_t>(i)] = 0.0f;
    keep = from_vector<float, B>(k);
  }
  detail::check_int8_top("int8_linear", "activation_max", w.activation_max);
  const int8_rows<B> qx = detail::quantize_kept_rows(x2, keep, w.activation_max);
  const bool packed = w.packed.data.defined();
  // The outlier columns of x [rows, k] and the float rows of the weight's [in, out] transpose
  // [k, out] for them.
  Tensor<float, B> xo, wo;
  if (!outliers.empty()) {
    xo = embedding(x2.transpose(0, 1), ids).transpose(0, 1);
    const Tensor<int8_t, B> wo_values = packed ? detail::packed_feature_rows(w.packed, outliers)
                                               : embedding(w.weight.values.transpose(0, 1), ids);
    wo = (wo_values.template astype<float>() * w.weight.steps).contiguous();
  }
  // A few outlier features (LLM.int8 finds a handful) go into the int8 GEMM's epilogue; more
  // run as a float GEMM of their own after it.
  const bool panels = packed && w.packed.panel > 0;
  const bool fused_outliers =
      panels && xo.defined() && xo.shape()[1] <= detail::int8_fused_outliers;
  Tensor<float, B> y;
  if (panels) {
    // Panels: the GEMM's epilogue scales the sums back and adds the outliers' float product,
    // without an int32 tensor or another pass over the output between.
    y = Tensor<float, B>({x2.shape()[0], w.out_features});
    const Tensor<float, B> row_steps = qx.steps.contiguous(),
                           col_steps = w.weight.steps.contiguous();
    const Tensor<float, B> bias = w.bias.contiguous();
    detail::gemm_problem<int8_t, int8_t, int32_t> pr =
        detail::panel_problem<int32_t>(qx.values, w.packed);
    pr.dequant = {y.data(), w.out_features, row_steps.data(), col_steps.data(), bias.data()};
    if (fused_outliers) {
      pr.dequant.extra_a = xo.data(), pr.dequant.extra_a_rs = xo.strides()[0];
      pr.dequant.extra_a_cs = xo.strides()[1];
      pr.dequant.extra_b = wo.data(), pr.dequant.extra_b_rs = w.out_features;
      pr.dequant.extra_k = xo.shape()[1];
    }
    backend::gemm_kernel<B>::run(pr);
  } else {
    const Tensor<int32_t, B> acc = packed ? matmul(qx.values, w.packed.data)
                                          : matmul(qx.values, w.weight.values.transpose(0, 1));
    y = map(detail::int8_dequantize{}, acc, qx.steps, w.weight.steps, w.bias);
  }
  if (xo.defined() && !fused_outliers) detail::gemm_into("int8_linear", 1.0, xo, wo, 1.0, y);
  return y.reshape(out_shape.span());
}

/// A linear layer's weight [out, in] in a floating type narrower than float (bfloat16, half,
/// float8_e4m3, float8_e5m2), with its float bias [out]. The 8-bit formats hold weight / scale
/// with one float scale per output channel (its largest magnitude / the format's largest finite
/// value): unscaled, weights of magnitude 0.05 would sit among e4m3's few subnormals. bfloat16
/// and half hold the weight as it is (scales undefined).
template <class T, class B>
struct lowp_linear_weights {
  Tensor<T, B> values;
  Tensor<float, B> scales;
  Tensor<float, B> bias;
  int64_t in_features = 0, out_features = 0;
  /// bfloat16: the values laid out once for the backend's GEMM by pack_linear (then values is
  /// empty: this is the only copy), or empty.
  packed_linear<T, B> packed;
};

/// w (bfloat16) with its values packed for the backend's GEMM (packed_linear.hpp), in pairs of
/// input features as the bf16 dot product reads them: the GEMM then reads them in place instead
/// of packing them on every call. values is released (unpack_linear(w.packed) gives it back);
/// lowp_linear's results are the same. Already packed weights are returned as they are.
template <class B>
lowp_linear_weights<bfloat16, B> pack_linear(lowp_linear_weights<bfloat16, B> w) {
  if (w.packed.data.defined()) return w;
  w.values.check_defined("pack_linear");
  w.packed = pack_linear(w.values);
  w.values = Tensor<bfloat16, B>();
  return w;
}

namespace detail {
/// The stored form of narrow weights: a view of the contiguous [in, out] transpose, as for int8
/// (contiguous rows for the packing), and a zero bias where the layer has none.
template <class T, class B>
lowp_linear_weights<T, B> lowp_layout(lowp_linear_weights<T, B> q) {
  q.values = q.values.transpose(0, 1).contiguous().transpose(0, 1);
  if (!q.bias.defined()) q.bias = zeros<float, B>({q.out_features});
  return q;
}
}  // namespace detail

/// Rounds a float linear layer (weight [out, in], bias [out] or undefined) to T for lowp_linear.
template <class T, class B>
lowp_linear_weights<T, B> quantize_linear_lowp(const Tensor<float, B>& weight,
                                               const Tensor<float, B>& bias = {}) {
  static_assert(detail::is_lowp_float_v<T>, "T must be bfloat16, half or an 8-bit float");
  detail::check_linear_layer("quantize_linear_lowp", weight, bias);
  lowp_linear_weights<T, B> q{{}, {}, bias, weight.shape()[1], weight.shape()[0], {}};
  if constexpr (detail::is_float8_v<T>) {
    q.scales = detail::float8_row_scales<T>(weight);
    q.values = map(detail::float8_quantize<T>{}, weight, q.scales.reshape({q.out_features, 1}));
  } else {
    q.values = weight.template astype<T>();
  }
  return detail::lowp_layout(std::move(q));
}

/// As quantize_linear_lowp for an 8-bit float T, same scales, with the weights rounded by GPTQ
/// (gptq.hpp) for inputs x whose sum of x x^T is `hessian` [in, in] (float64, on any backend):
/// the layer's output on such inputs moves less than with rounding to nearest. Throws
/// shape_error when hessian is not [in, in], error when it is not positive semi-definite.
template <class T, class B, class HB>
lowp_linear_weights<T, B> quantize_linear_lowp(const Tensor<float, B>& weight,
                                               const Tensor<float, B>& bias,
                                               const Tensor<double, HB>& hessian) {
  static_assert(detail::is_float8_v<T>, "GPTQ rounding is for the 8-bit float formats");
  detail::check_linear_layer("quantize_linear_lowp", weight, bias);
  const auto top = static_cast<double>(std::numeric_limits<T>::max());
  const Tensor<float, B> scales = detail::float8_row_scales<T>(weight);
  const Tensor<float, B> rounded = detail::gptq_rounded(
      "quantize_linear_lowp", weight, hessian, scales, [top](double v, double scale) {
        const auto c = static_cast<float>(std::clamp(v / scale, -top, top));
        return static_cast<double>(static_cast<float>(T(c))) * scale;
      });
  // Each rounded value is a value of T times its row's scale: quantizing again is exact.
  lowp_linear_weights<T, B> q{{}, scales, bias, weight.shape()[1], weight.shape()[0], {}};
  q.values = map(detail::float8_quantize<T>{}, rounded, scales.reshape({q.out_features, 1}));
  return detail::lowp_layout(std::move(q));
}

/// x [..., in] · weightᵀ + bias with narrow weights, summed in float. bfloat16 and half: x is
/// rounded to the weight's type first (as autocast does; the CPU's bf16 dot products need both
/// operands in bf16). 8-bit floats: x stays float and each output column is scaled back. Throws
/// shape_error when x's last dim is not in.
template <class T, class B>
Tensor<float, B> lowp_linear(const Tensor<float, B>& x, const lowp_linear_weights<T, B>& w) {
  const auto [x2, out_shape] = detail::linear_rows("lowp_linear", x, w.in_features, w.out_features);
  if constexpr (std::is_same_v<T, bfloat16>) {  // weights in panels: the GEMM reads them in place
    if (w.packed.panel > 0 && out_shape.numel() > 0)
      return detail::panel_product<float>(x2.template astype<T>(), w.packed, &w.bias)
          .reshape(out_shape.span());
  }
  Tensor<float, B> out(out_shape);
  if (out_shape.numel() == 0) return out;
  const Tensor<float, B> out2 = out.view({x2.shape()[0], w.out_features});
  // Packed for a backend without panels: the plain [in, out] layout.
  const Tensor<T, B> wt = w.packed.data.defined() ? w.packed.data : w.values.transpose(0, 1);
  if constexpr (detail::is_float8_v<T>) {
    detail::gemm_into("lowp_linear", 1.0, x2, wt, 0.0, out2);
    return map(detail::scale_add_bias{}, out, w.scales, w.bias);
  } else {
    detail::gemm_extras<float, B> extras;
    extras.bias = w.bias, extras.bias_kind = detail::gemm_bias::per_col;
    detail::gemm_into("lowp_linear", 1.0, x2.template astype<T>(), wt, 0.0, out2, extras);
    return out;
  }
}

TESSERA_END_NAMESPACE
