// tessera/backend/cuda/gemm_args.cuh - the arguments of the CUDA GEMM kernels (the SIMT one in
// gemm.cuh, the tensor-core one in gemm_tc.cuh), their shared epilogue, and the gather through
// which they read a convolution's B operand straight from the images (implicit GEMM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../../detail/gemm_problem.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// One row kk = (ci * r + i) * s + j of a convolution's lowered input (see cuda_conv_gather):
/// where tap (ci, i, j) reads relative to an output pixel's top-left input position.
struct alignas(16) cuda_conv_tap {
  int32_t offset;  // ci * h * w + dy * w + dx
  int32_t dy, dx;  // i * dil_h, j * dil_w
  int32_t unused;
};

/// Implicit GEMM: B of a convolution's forward product gathered from the input image on load
/// instead of read from a lowered matrix. Element (kk, p) of batch matrix z is
/// image[taps[kk].offset + y0 * w + x0] with (y0, x0) = (oy * stride_h - pad_top, ox *
/// stride_w - pad_left), p = oy * wo + ox, or 0 when (y0 + dy, x0 + dx) lies outside the h x w
/// image; image = b + b_off[z] (the image's first channel of the group).
struct cuda_conv_gather {
  const cuda_conv_tap* taps = nullptr;  // device array of k entries
  int32_t h = 0, w = 0, wo = 0;
  int32_t stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0;
};

/// A gemm_problem as the kernel reads it: the same fields, with the batch offsets as strides
/// when they are multiples of the batch index, else in device memory, and the gather of an
/// implicit-GEMM convolution (kernels instantiated with Gather = true read B through it). TC is
/// the output's type (Acc, or half / bfloat16 rounded once in the epilogue).
template <class TA, class TB, class Acc, class TC = Acc>
struct cuda_gemm_args {
  int64_t m, n, k;
  const TA* a;
  int64_t a_rs, a_cs;
  const TB* b;
  int64_t b_rs, b_cs;
  TC* c;
  int64_t c_rs, c_cs;
  Acc alpha, beta;
  const Acc* bias;
  int64_t bias_stride;
  gemm_bias bias_kind;
  bool relu;
  const int64_t* a_off;  // device arrays of `batch` offsets, or null: then z * a_bs, ...
  const int64_t* b_off;
  const int64_t* c_off;
  int64_t a_bs, b_bs, c_bs;  // batch strides (offsets that are multiples of the batch index)
  cuda_conv_gather conv;
};

/// The element offset of batch matrix z: from the offset array when there is one, else z times
/// the batch stride.
__device__ __forceinline__ int64_t cuda_batch_offset(const int64_t* off, int64_t stride,
                                                     int64_t z) {
  return off ? off[z] : z * stride;
}

/// The epilogue of every GEMM kernel for output (gi, gj) of matrix c (inside the product):
/// c = alpha * acc (+ beta * c) (+ bias) (relu) in Acc, rounded once to TC; beta == 0 never
/// reads c.
template <class TA, class TB, class Acc, class TC>
__device__ __forceinline__ void cuda_gemm_store(const cuda_gemm_args<TA, TB, Acc, TC>& p, TC* c,
                                                int64_t gi, int64_t gj, Acc acc) {
  TC* out = c + gi * p.c_rs + gj * p.c_cs;
  Acc v = p.alpha * acc;
  if constexpr (std::is_same_v<TC, Acc>) {
    if (p.beta != Acc(0)) v += p.beta * *out;
  } else {
    if (p.beta != Acc(0)) v += p.beta * static_cast<Acc>(static_cast<float>(*out));
  }
  if (p.bias_kind == gemm_bias::per_row)
    v += p.bias[gi * p.bias_stride];
  else if (p.bias_kind == gemm_bias::per_col)
    v += p.bias[gj * p.bias_stride];
  if (p.relu && v < Acc(0)) v = Acc(0);  // NaN compares false: stays NaN, as on the CPU
  if constexpr (std::is_same_v<TC, Acc>)
    *out = v;
  else
    *out = TC(static_cast<float>(v));
}

/// Element (k0 + row + step * i, n0 + col) of an implicit-GEMM B operand (see cuda_conv_gather)
/// for i < N, converted by cvt, 0 outside the product or the image. The thread's column, and so
/// its output pixel, is fixed: its position is computed once, and each element costs a table
/// read, two bounds checks and a load.
template <int N, class T, class E, class Cvt>
__device__ __forceinline__ void cuda_conv_gather_load(const T* image, const cuda_conv_gather& g,
                                                      int64_t k, int64_t n, int64_t k0, int64_t n0,
                                                      int row, int col, int step, E (&r)[N],
                                                      Cvt cvt) {
  const int64_t p = n0 + col;
  const bool inside = p < n;
  const int oy = inside ? static_cast<int>(p / g.wo) : 0;
  const int ox = inside ? static_cast<int>(p - int64_t{oy} * g.wo) : 0;
  const int y0 = oy * g.stride_h - g.pad_top, x0 = ox * g.stride_w - g.pad_left;
  const int64_t corner = int64_t{y0} * g.w + x0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int64_t kk = k0 + row + step * i;
    E v{0};
    if (inside && kk < k) {
      const cuda_conv_tap t = g.taps[kk];
      const int y = y0 + t.dy, x = x0 + t.dx;
      if (static_cast<unsigned>(y) < static_cast<unsigned>(g.h) &&
          static_cast<unsigned>(x) < static_cast<unsigned>(g.w))
        v = cvt(image[corner + t.offset]);
    }
    r[i] = v;
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE
