// tessera/kernel/loss_problem.hpp - the backend-neutral pieces of cross-entropy over class
// labels: one row's arithmetic, which the CPU's row loop and the CUDA kernel share, and the
// problems ops/loss.hpp hands to a backend's loss kernels (backend::loss_kernel<B>: the CPU's
// row pass and gradient, CUDA's fused forward pass).
#pragma once

#include <cmath>
#include <cstdint>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// One row's cross-entropy, in double: sets lse to the logsumexp of the c scores and returns
/// lse - keep * row[label] - smooth_per_class * sum(row), or 0 when the label is ignore_index or
/// there are no classes. The label must be ignore_index or in [0, c) (callers check). The
/// maximum skips NaN scores, whose exp then makes lse NaN.
template <class T>
TESSERA_HOST_DEVICE inline double cross_entropy_row(const T* row, int64_t c, int64_t label,
                                                    int64_t ignore_index, double keep,
                                                    double smooth_per_class, double& lse) {
  double m = -static_cast<double>(INFINITY), total = 0;  // (numeric_limits is host-only in CUDA)
  for (int64_t j = 0; j < c; ++j) {
    const double v = static_cast<double>(row[j]);
    m = m < v ? v : m;
    total += v;
  }
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += ::exp(static_cast<double>(row[j]) - m);
  lse = c == 0 ? m : m + ::log(s);
  if (label == ignore_index || c == 0) return 0;
  double v = lse - keep * static_cast<double>(row[label]);
  if (smooth_per_class != 0) v -= smooth_per_class * total;
  return v;
}

/// cross_entropy's row pass on a backend with a row kernel (loss_kernel<B>::cross_entropy_rows:
/// the CPU): over contiguous logits x [n, c] and labels [n] (each in [0, c) or ignore_index,
/// checked), each row's loss (cross_entropy_row) into loss[n] and its logsumexp into lse[n].
template <class T>
struct cross_entropy_rows_problem {
  const T* x;
  const int64_t* labels;
  int64_t n, c, ignore_index;
  double keep, smooth_per_class;
  T* loss;
  T* lse;
};

/// The gradient of cross_entropy with respect to the logits (loss_kernel<B>::cross_entropy_grad):
/// for each row i not ignored, dx[i, j] = g_i (exp(x[i, j] - lse[i]) - smooth_per_class), less
/// g_i keep at the label, where g_i = grad[per_sample ? i : 0] * scale (scale: 1 / count for a
/// mean, else 1); ignored rows are zero. Contiguous x, dx [n, c], lse [n], labels [n].
template <class T>
struct cross_entropy_grad_problem {
  const T* x;
  const int64_t* labels;
  const T* lse;
  const T* grad;
  int64_t n, c, ignore_index;
  double keep, smooth_per_class, scale;
  bool per_sample;
  T* dx;
};

/// A cross-entropy forward pass over contiguous logits x [n, c] (row-major) and labels [n].
/// Per sample (reduce false) into out[n], or summed (reduce) into out[0], over the count when
/// mean; lse[n] gets each row's logsumexp and counted[0] the labels other than ignore_index
/// (both kept for the backward pass). A label outside [0, c) is the caller's to report.
template <class T>
struct cross_entropy_problem {
  const T* x = nullptr;
  const int64_t* labels = nullptr;
  int64_t n = 0, c = 0;
  int64_t ignore_index = -100;
  double keep = 1, smooth_per_class = 0;  // 1 - label_smoothing, label_smoothing / c
  bool reduce = false, mean = false;
  T* out = nullptr;
  T* lse = nullptr;
  T* counted = nullptr;
};

}  // namespace detail
TESSERA_END_NAMESPACE
