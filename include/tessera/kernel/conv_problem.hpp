// tessera/kernel/conv_problem.hpp - the backend-neutral description of one 2-D convolution (and
// its two backward passes), what ops/conv.hpp hands to backend::conv_kernel<B>::run.
#pragma once

#include <cstdint>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Sizes of a grouped, strided, dilated, padded 2-D convolution on contiguous NCHW data:
/// x [n, c, h, w], weights [k, c / groups, r, s], y [n, k, ho, wo]. Output pixel (oh, ow) reads
/// input (oh * stride_h - pad_top + i * dil_h, ow * stride_w - pad_left + j * dil_w) for kernel
/// tap (i, j); positions outside the input read zero. The bottom/right padding is implied by ho
/// and wo. The ops layer has checked every value (all positive but pads, groups divide c and k).
struct conv_geometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t k = 0, r = 1, s = 1;
  int64_t ho = 0, wo = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;

  int64_t cg() const { return c / groups; }  // input channels per group
  int64_t kg() const { return k / groups; }  // output channels per group
  int64_t taps() const { return r * s; }
  /// Whether the convolution is a plain matrix product per image: 1x1, stride 1, no padding.
  bool is_pointwise() const {
    return r == 1 && s == 1 && stride_h == 1 && stride_w == 1 && pad_top == 0 && pad_left == 0 &&
           ho == h && wo == w;
  }
};

/// y = conv(x, w) (+ bias per output channel) (then max(., 0) when relu), in Acc (float, double
/// or int32). x, w, y, bias are contiguous.
template <class TX, class TW, class Acc>
struct conv_forward_problem {
  conv_geometry g;
  const TX* x = nullptr;
  const TW* w = nullptr;
  Acc* y = nullptr;
  const Acc* bias = nullptr;  // [k] or null
  bool relu = false;
};

/// dx = the gradient of conv with respect to its input, from dy [n, k, ho, wo] and w; dx
/// [n, c, h, w] is overwritten.
template <class TG, class TW, class Acc>
struct conv_backward_input_problem {
  conv_geometry g;
  const TG* dy = nullptr;
  const TW* w = nullptr;
  Acc* dx = nullptr;
};

/// dw = the gradient of conv with respect to its weights, from x and dy, summed over the batch;
/// dw [k, c / groups, r, s] is overwritten.
template <class TX, class TG, class Acc>
struct conv_backward_weight_problem {
  conv_geometry g;
  const TX* x = nullptr;
  const TG* dy = nullptr;
  Acc* dw = nullptr;
};

/// The bias gradient of a convolution, with the ReLU mask of a fused conv+ReLU before it: for
/// contiguous dy [n, k, plane] and y (the ReLU's output, same shape, or null for no ReLU),
/// g = y ? dy * (y > 0) : dy is written to `masked` (when not null) and db[k] = the sum of g over
/// n and plane, in an order fixed by the shape alone (the thread count does not change it).
/// One pass: the mask and the sum read dy once, while it is in cache.
template <class T>
struct conv_bias_backward_problem {
  int64_t n = 0, k = 0, plane = 0;
  const T* dy = nullptr;
  const T* y = nullptr;  // [n, k, plane] or null
  T* masked = nullptr;   // [n, k, plane] or null
  T* db = nullptr;       // [k]
};

}  // namespace detail
TESSERA_END_NAMESPACE
