// tessera/kernel/pool_problem.hpp - the backend-neutral geometry of one 2-D pooling op, what
// ops/pool.hpp hands to backend::pool_kernel<B>, and the window rules every backend shares.
#pragma once

#include <cstdint>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Pooling over `planes` contiguous row-major [h, w] input planes (NCHW: planes = n * c), each
/// giving one contiguous [oh, ow] output plane; plane p of the input starts at x + p * h * w, of
/// the output at y + p * oh * ow.
///
/// Window of output (oy, ox) for max / average pooling: input rows oy * sh - ph + i * dh (i < kh)
/// and columns ox * sw - pw + j * dw (j < kw); positions outside the plane are padding, which
/// never wins a maximum and adds zero to a sum (pool_window_of). Adaptive pooling ignores kernel,
/// stride, padding and dilation: its windows are adaptive_window_of.
///
/// The ops layer guarantees before a kernel runs: h, w, oh, ow > 0 (planes may be 0), kernel,
/// stride and dilation >= 1, 0 <= padding <= kernel / 2, dilation 1 for average pooling, and
/// every window holds at least one input element.
struct pool_problem {
  int64_t planes = 0;
  int64_t h = 0, w = 0;    // input plane
  int64_t oh = 0, ow = 0;  // output plane
  int64_t kh = 1, kw = 1;
  int64_t sh = 1, sw = 1;
  int64_t ph = 0, pw = 0;
  int64_t dh = 1, dw = 1;
  /// Average pooling: padded positions count in the divisor (the window clipped to the padded
  /// plane, as PyTorch's count_include_pad); otherwise only input elements count.
  bool count_include_pad = true;
};

/// One output position's window along one axis: input positions begin, begin + step, ... below
/// end (already clipped to the input), and `count`, the divisor of average pooling along this
/// axis (the product of the two axes' counts divides the window sum).
struct pool_window {
  int64_t begin = 0, end = 0, count = 1;
};

/// Window along one axis of output position o of max / average pooling over `in` positions with
/// kernel k, stride s, padding p and dilation d (count is meaningful for d == 1 only).
TESSERA_HOST_DEVICE inline pool_window pool_window_of(int64_t o, int64_t in, int64_t k, int64_t s,
                                                      int64_t p, int64_t d,
                                                      bool count_include_pad) {
  const int64_t start = o * s - p;
  int64_t b = start;
  if (b < 0) b += (-b + d - 1) / d * d;  // first tap at or after position 0
  const int64_t last = start + (k - 1) * d + 1;
  const int64_t e = last < in ? last : in;
  // PyTorch's divisor with padding counted: the window clipped to the padded plane [-p, in + p).
  const int64_t padded_end = start + k < in + p ? start + k : in + p;
  return {b, e, count_include_pad ? padded_end - start : e - b};
}

/// Window along one axis of output position o of adaptive average pooling from `in` to `out`
/// positions (PyTorch's rule): [floor(o * in / out), ceil((o + 1) * in / out)).
TESSERA_HOST_DEVICE inline pool_window adaptive_window_of(int64_t o, int64_t in, int64_t out) {
  const int64_t b = o * in / out, e = ((o + 1) * in + out - 1) / out;
  return {b, e, e - b};
}

}  // namespace detail
TESSERA_END_NAMESPACE
