// tessera/kernel/gemm_problem.hpp - the backend-neutral description of one (batched) GEMM, what
// ops/matmul.hpp hands to backend::gemm_kernel<B>::run.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Where a bias vector lies along the output: one value per row (convolution: per output
/// channel) or one per column (linear: per output feature).
enum class gemm_bias : int8_t { none, per_row, per_col };

/// int32 products written as float (int8 dynamic quantization, ops/quant.hpp): output (i, j)
/// is acc * (row_scale[i] * col_scale[j]) + bias[j] (one fused multiply-add) at
/// out[i * out_rs + j], instead of acc in c.
/// bias may be null (0). One definition of the formula, for the backends and the ops' fallback.
/// With extra_k > 0, a float product over extra_k more features is added last: the sum over
/// o of extra_a[i * extra_a_rs + o * extra_a_cs] * extra_b[o * extra_b_rs + j], fused
/// multiply-adds in order of o from 0 (the features kept out of the int8 product, whose
/// separate product was another pass over the output).
struct gemm_dequant {
  float* out = nullptr;
  int64_t out_rs = 0;
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  const float* bias = nullptr;
  const float* extra_a = nullptr;
  int64_t extra_a_rs = 0, extra_a_cs = 0;
  const float* extra_b = nullptr;
  int64_t extra_b_rs = 0, extra_k = 0;
  TESSERA_HOST_DEVICE static float apply(int32_t acc, float row_scale, float col_scale,
                                         float bias) {
    // One rounding, written out: left to the compiler's contraction, the epilogue's vectors and
    // an elementwise map of this could round differently.
    return fmaf(static_cast<float>(acc), row_scale * col_scale, bias);
  }
};

/// c = alpha * a·b + beta * c (+ bias) (then max(., 0) when relu), for each of `batch` matrices.
/// Element (i, p) of a is a[i * a_rs + p * a_cs]: any strides, transposes are just swapped
/// strides. Acc is the accumulation type (float, double or int32), and alpha, beta and the bias
/// are Acc; TC is c's element type: Acc, or a narrower type that the backend rounds each result
/// into once (only where gemm_stores_v says the backend does; otherwise ops/matmul.hpp runs the
/// product into an Acc buffer and converts after).
/// Contract: beta == 0 means c is not read (NaN there does not leak); alpha == 0 or k == 0
/// means a and b are not read.
template <class TA, class TB, class Acc, class TC = Acc>
struct gemm_problem {
  int64_t m = 0, n = 0, k = 0;
  const TA* a = nullptr;
  int64_t a_rs = 0, a_cs = 0;
  const TB* b = nullptr;
  int64_t b_rs = 0, b_cs = 0;
  TC* c = nullptr;
  int64_t c_rs = 0, c_cs = 0;
  Acc alpha{1}, beta{0};
  const Acc* bias = nullptr;  // element i (per_row) or j (per_col) at bias[i * bias_stride]
  int64_t bias_stride = 0;
  gemm_bias bias_kind = gemm_bias::none;
  bool relu = false;
  // Batches: matrix t uses a + a_offsets[t], b + b_offsets[t], c + c_offsets[t] (elements); a
  // null offset array means 0 for every t.
  int64_t batch = 1;
  const int64_t* a_offsets = nullptr;
  const int64_t* b_offsets = nullptr;
  const int64_t* c_offsets = nullptr;
  // B laid out in panels (a weight packed once, ops/packed_linear.hpp): when b_panel > 0, element
  // (p, j) is b[(j / b_panel) * b_cs + p * b_rs + j % b_panel], with b_rs == b_panel, and the
  // last panel is zero-padded to b_panel columns. Only backends with a nonzero
  // gemm_weight_panel_v get such problems, with b_panel equal to it.
  // 8-bit integer B (int8_t) in panels keeps four k values of a column together, as the
  // dot-product instructions read them: element (p, j) is b[(j / b_panel) * b_cs + (p / 4) * b_rs
  // + (j % b_panel) * 4 + p % 4], with b_rs == 4 * b_panel, k zero-padded to a multiple of 4, and
  // b_col_sums[j] the sum over k of column j (b_panel-padded length), computed once with them.
  // bfloat16 B in panels (for a float product) keeps two k values of a column together, the
  // same way: element (p, j) at b[(j / b_panel) * b_cs + (p / 2) * b_rs + (j % b_panel) * 2 +
  // p % 2], with b_rs == 2 * b_panel and k zero-padded to a multiple of 2.
  int64_t b_panel = 0;
  const int32_t* b_col_sums = nullptr;
  // 8-bit integer B (int8_t): a bound on the magnitude of its values that the caller knows (a
  // weight quantized to fewer levels, ops/quant.hpp), 128 when it knows none. A backend may
  // multiply faster under a small bound (the CPU's AVX2 pass: 64, gemm/kernel_int8.hpp).
  int32_t b_max_abs = 128;
  // int8 B in panels may ask for float results scaled back (gemm_dequant) by setting
  // dequant.out: c is then not written (it may be null), and alpha must be 1, beta 0, with no
  // int32 bias or relu and one matrix. Only int8 panel problems carry it, so only backends with
  // panels see it.
  gemm_dequant dequant;
};

/// Columns per panel of a weight packed for backend B's GEMM (gemm_problem::b_panel); 0 when B
/// takes weights in their plain layout. Backends specialize it.
template <class B>
inline constexpr int64_t gemm_weight_panel_v = 0;

/// Whether backend B's gemm_kernel takes gemm_problem<..., Acc, TC>: stores TC results itself,
/// rounding once in its epilogue (beta reads c as TC widened to Acc). Backends specialize it for
/// the output types their kernels write; for the others the caller converts from an Acc buffer.
template <class B, class TC, class Acc>
inline constexpr bool gemm_stores_v = std::is_same_v<TC, Acc>;

}  // namespace detail
TESSERA_END_NAMESPACE
