// tessera/backend/cpu/norm.hpp - fused row-wise kernels (kernel/norm_problem.hpp):
// - layer normalization of contiguous rows: per row, one pass for the mean (adding the residual,
//   if any, into the output), one for the variance about that mean, one for the result;
// - int8 quantization of rows: one pass for the row's largest magnitude, one for the values.
// A row of a transformer (hundreds of values) stays in L1 across the passes, so it is read from
// memory once, where the composed ops made a pass over all rows per step.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <cmath>
#include <cstdint>

#include "../../kernel/norm_problem.hpp"
#include "../../kernel/reducers.hpp"
#include "parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Sum of f(j) for j < n, f taking and returning vectors of T (j: the first index of the
/// vector) or scalars: vector lanes summed in double at the end, the tail in double.
template <class T, class FV, class FS>
double norm_row_sum(int64_t n, FV fv, FS fs) {
  double total = 0;
  int64_t j = 0;
  if constexpr (simd::available<T>) {
    using V = simd::vec<T>;
    constexpr int W = V::width;
    V a0 = V::broadcast(T(0)), a1 = a0;
    for (; j + 2 * W <= n; j += 2 * W) {
      a0 = a0 + fv(j);
      a1 = a1 + fv(j + W);
    }
    if (j + W <= n) {
      a0 = a0 + fv(j);
      j += W;
    }
    alignas(64) T lanes[W];
    (a0 + a1).store(lanes);
    for (int l = 0; l < W; ++l) total += static_cast<double>(lanes[l]);
  }
  for (; j < n; ++j) total += static_cast<double>(fs(j));
  return total;
}

/// Row i of the problem (see layer_norm_problem).
template <class T>
void layer_norm_row(const layer_norm_problem<T>& p, int64_t i) {
  const int64_t c = p.c;
  const T* x = p.x + i * c;
  const T* r = p.residual ? p.residual + i * c : nullptr;
  T* y = p.out + i * c;
  // s: the row to normalize (x + residual, written to y first, or x itself).
  const T* s = x;
  if (r) {
    for (int64_t j = 0; j < c; ++j) y[j] = x[j] + r[j];
    s = y;
  }
  // Every step works on s - s[0] (exact for values within a factor of 2 of s[0]), so that the
  // rounding of the mean and of the deviations scales with the row's spread, not with its
  // magnitude: a row of 1000 + noise keeps the noise's digits.
  const T shift = s[0];
  double mean = 0, var = 0;  // of s - shift
  if constexpr (simd::available<T>) {
    using V = simd::vec<T>;
    const V sv = V::broadcast(shift);
    mean = norm_row_sum<T>(
               c, [&](int64_t j) { return V::load(s + j) - sv; },
               [&](int64_t j) { return static_cast<double>(s[j] - shift); }) /
           static_cast<double>(c);
    const V mv = V::broadcast(static_cast<T>(mean));
    var = norm_row_sum<T>(
              c,
              [&](int64_t j) {
                const V d = (V::load(s + j) - sv) - mv;
                return d * d;
              },
              [&](int64_t j) {
                const double d = static_cast<double>(s[j] - shift) - mean;
                return d * d;
              }) /
          static_cast<double>(c);
  } else {
    for (int64_t j = 0; j < c; ++j) mean += static_cast<double>(s[j] - shift);
    mean /= static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) {
      const double d = static_cast<double>(s[j] - shift) - mean;
      var += d * d;
    }
    var /= static_cast<double>(c);
  }
  const T m = static_cast<T>(mean), rstd = static_cast<T>(1.0 / std::sqrt(var + p.eps));
  const T *w = p.weight, *b = p.bias;
  int64_t j = 0;
  if constexpr (simd::available<T>) {
    using V = simd::vec<T>;
    constexpr int W = V::width;
    const V sv = V::broadcast(shift), mv = V::broadcast(m), rv = V::broadcast(rstd);
    for (; j + W <= c; j += W) {
      V v = ((V::load(s + j) - sv) - mv) * rv;
      if (w) v = v * V::load(w + j);
      if (b) v = v + V::load(b + j);
      v.store(y + j);
    }
  }
  for (; j < c; ++j) {
    T v = ((s[j] - shift) - m) * rstd;
    if (w) v = v * w[j];
    if (b) v = v + b[j];
    y[j] = v;
  }
}

/// Row i of an int8_rows_problem (T = float; a template so that the scalar pass, which has no
/// vec<float>, discards the vector branch).
template <class T = float>
void int8_rows_row(const int8_rows_problem& p, int64_t i) {
  const T* x = p.x + i * p.x_rs;
  const float* keep = p.keep;
  const int64_t c = p.c;
  // The largest |x * keep| by norm's inf-norm reducer: NaN if any is.
  const red::extreme<T, true, true> largest;
  T m = largest.identity();
  int64_t j = 0;
  if constexpr (simd::available<T>) {
    using V = simd::vec<T>;
    constexpr int W = V::width;
    V a = V::broadcast(m);
    for (; j + W <= c; j += W) {
      V v = V::load(x + j);
      if (keep) v = v * V::load(keep + j);
      a = largest.vstep(a, v);
    }
    alignas(64) T lanes[W];
    a.store(lanes);
    for (int l = 0; l < W; ++l) m = largest.combine(m, lanes[l]);
  }
  for (; j < c; ++j) m = largest.step(m, keep ? x[j] * keep[j] : x[j], j);
  const float step = int8_step{p.top}(m);
  p.steps[i] = step;
  const int8_quantize q{p.top};
  int8_t* out = p.values + i * c;
  if (keep) {
    TESSERA_OMP_SIMD()
    for (int64_t t = 0; t < c; ++t) out[t] = q(x[t] * keep[t], step);
  } else {
    TESSERA_OMP_SIMD()
    for (int64_t t = 0; t < c; ++t) out[t] = q(x[t], step);
  }
}

}  // namespace detail

namespace backend {
struct cpu_norm {
  static void int8_rows(const detail::int8_rows_problem& p) {
    detail::parallel_for(p.rows, 6 * p.c, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) detail::int8_rows_row(p, i);
    });
  }
  template <class T>
  static void layer_norm(const detail::layer_norm_problem<T>& p) {
    detail::parallel_for(p.rows, 8 * p.c, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) detail::layer_norm_row(p, i);
    });
  }
};
}  // namespace backend

TESSERA_END_NAMESPACE
