// tessera/backend/cpu/gemm/epilogue.hpp - what the micro-kernels do with a finished tile:
// c = alpha * acc + beta * c (+ bias) (relu), written through any strides; or int32 sums scaled
// back to float (int8 dynamic quantization).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../../kernel/gemm_problem.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The epilogue of one k block. Only the first k block reads c with the caller's beta; later
/// blocks accumulate (beta = 1); bias and relu come with the last block only.
template <class Acc>
struct gemm_epilogue {
  Acc alpha{1}, beta{0};
  bool read_c = false;  // false: c is overwritten, never read (beta == 0)
  const Acc* bias = nullptr;
  int64_t bias_stride = 0;
  gemm_bias bias_kind = gemm_bias::none;
  bool relu = false;
  /// int32 sums scaled back to float instead (gemm_problem::dequant), or null.
  const gemm_dequant* dequant = nullptr;
};

/// x * y + z in Acc; int32 wraps (as two's complement hardware does) instead of overflowing.
template <class Acc>
TESSERA_ALWAYS_INLINE Acc gemm_mul_add(Acc x, Acc y, Acc z) {
  if constexpr (std::is_integral_v<Acc>)
    return static_cast<Acc>(static_cast<uint32_t>(x) * static_cast<uint32_t>(y) +
                            static_cast<uint32_t>(z));
  else
    return x * y + z;
}

/// Applies the epilogue to an mr x nr tile held in buf (row stride ld) and stores it at c, whose
/// element (0, 0) is output (i0, j0) of the whole problem (for the bias index).
template <class Acc>
void gemm_store_tile(const Acc* buf, int ld, int mr, int nr, Acc* c, int64_t c_rs, int64_t c_cs,
                     const gemm_epilogue<Acc>& ep, int64_t i0, int64_t j0) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      Acc* out = c + i * c_rs + j * c_cs;
      Acc v = gemm_mul_add(ep.alpha, buf[i * ld + j], Acc(0));
      if (ep.read_c) v = gemm_mul_add(ep.beta, *out, v);
      if (ep.bias_kind == gemm_bias::per_row)
        v = gemm_mul_add(Acc(1), ep.bias[(i0 + i) * ep.bias_stride], v);
      else if (ep.bias_kind == gemm_bias::per_col)
        v = gemm_mul_add(Acc(1), ep.bias[(j0 + j) * ep.bias_stride], v);
      if (ep.relu && v < Acc(0)) v = Acc(0);  // NaN compares false: stays NaN
      *out = v;
    }
}

/// The int32 tile in buf (row stride ld) scaled back to float (gemm_dequant), its element (0, 0)
/// being output (i0, j0).
inline void gemm_store_dequant(const int32_t* buf, int64_t ld, int64_t mr, int64_t nr,
                               const gemm_dequant& dq, int64_t i0, int64_t j0) {
  for (int64_t i = 0; i < mr; ++i) {
    float* out = dq.out + (i0 + i) * dq.out_rs + j0;
    for (int64_t j = 0; j < nr; ++j) {
      float v = gemm_dequant::apply(buf[i * ld + j], dq.row_scale[i0 + i], dq.col_scale[j0 + j],
                                    dq.bias ? dq.bias[j0 + j] : 0.0f);
      if (dq.extra_k > 0) {
        float s = 0;
        for (int64_t o = 0; o < dq.extra_k; ++o)
          s = std::fma(dq.extra_a[(i0 + i) * dq.extra_a_rs + o * dq.extra_a_cs],
                       dq.extra_b[o * dq.extra_b_rs + j0 + j], s);
        v += s;
      }
      out[j] = v;
    }
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE
