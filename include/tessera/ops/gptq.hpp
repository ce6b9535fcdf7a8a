// tessera/ops/gptq.hpp - GPTQ's error-compensating rounding of a linear layer's weights
// (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
// Transformers"). Rounding each weight to its nearest narrow value ignores how the inputs
// correlate. GPTQ rounds the input features one after another and spreads each one's rounding
// error over the features not rounded yet, weighted by the inverse of H = sum of x x^T over
// calibration inputs x: the layer's output on inputs like those changes least.
//
// Host code in float64: O(in^3 + out * in^2) multiply-adds, on OpenMP's default number of threads
// (a step of loading a model, not of running it). ops/quant.hpp uses it for 8-bit float and int8
// weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../core/error.hpp"

// `#pragma omp parallel for` where OpenMP is on (elsewhere -Wall warns of unknown pragmas).
#if defined(_OPENMP)
#define TESSERA_DETAIL_PARALLEL_FOR(clauses) TESSERA_PRAGMA(omp parallel for clauses)
#else
#define TESSERA_DETAIL_PARALLEL_FOR(clauses)
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Sum of a[k] * b[k] for k in [0, n).
inline double gptq_dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  TESSERA_OMP_SIMD(reduction(+ : s))
  for (int64_t k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}

/// The upper-triangular U with (H + d I)^-1 = U^T U, for H [n, n] (row-major, symmetric,
/// positive semi-definite) and d = damp times the mean of H's diagonal (GPTQ's dampening, which
/// also keeps features no calibration input used well-defined). An all-zero H gives U = I.
///
/// With J the reversal of the n indices: Cholesky J (H + d I) J = L L^T, M = L^-1, then
/// (H + d I)^-1 = (J M J)^T (J M J), and J M J is upper triangular.
inline std::vector<double> gptq_inverse_factor(const std::vector<double>& h, int64_t n,
                                               double damp = 0.01) {
  double mean_diag = 0;
  for (int64_t j = 0; j < n; ++j) mean_diag += h[static_cast<size_t>(j * n + j)];
  mean_diag = n > 0 ? mean_diag / static_cast<double>(n) : 0;
  const double d = mean_diag > 0 ? damp * mean_diag : 1.0;
  const auto at = [n](int64_t i, int64_t j) { return static_cast<size_t>(i * n + j); };
  // L: Cholesky factor of the reversed, damped H (lower, row-major).
  std::vector<double> l(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    const double hjj = h[at(n - 1 - j, n - 1 - j)] + d;
    const double djj = hjj - gptq_dot(&l[at(j, 0)], &l[at(j, 0)], j);
    if (!(djj > 0))
      fail<error>("gptq", "the calibration inputs' H is not positive definite at feature ",
                  n - 1 - j, " (pivot ", djj, ")");
    const double ljj = std::sqrt(djj);
    l[at(j, j)] = ljj;
    TESSERA_DETAIL_PARALLEL_FOR(schedule(dynamic, 16) if (n - j > 64))
    for (int64_t i = j + 1; i < n; ++i)
      l[at(i, j)] = (h[at(n - 1 - i, n - 1 - j)] - gptq_dot(&l[at(i, 0)], &l[at(j, 0)], j)) / ljj;
  }
  // mt = (L^-1)^T, upper: column j of L^-1 is row j of mt, so both dot operands are contiguous.
  std::vector<double> mt(static_cast<size_t>(n * n), 0.0);
  TESSERA_DETAIL_PARALLEL_FOR(schedule(dynamic, 8) if (n > 64))
  for (int64_t j = 0; j < n; ++j) {
    mt[at(j, j)] = 1.0 / l[at(j, j)];
    for (int64_t i = j + 1; i < n; ++i)
      mt[at(j, i)] = -gptq_dot(&l[at(i, j)], &mt[at(j, j)], i - j) / l[at(i, i)];
  }
  // U = J M J: U[i][j] = M[n-1-i][n-1-j] = mt[n-1-j][n-1-i].
  std::vector<double> u(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j) u[at(i, j)] = mt[at(n - 1 - j, n - 1 - i)];
  return u;
}

/// Rounds w [out, in] (row-major, float64) in place, feature after feature: round(o, v) gives
/// row o's value v rounded to the narrow format; the error of feature j, divided by U[j][j],
/// is taken off the features after it in proportion to U[j][k] (u from gptq_inverse_factor).
/// Rows are independent: each carries its own errors.
template <class Round>
void gptq_round(std::vector<double>& w, int64_t out, int64_t in, const std::vector<double>& u,
                Round&& round) {
  TESSERA_DETAIL_PARALLEL_FOR(schedule(dynamic, 4) if (out * in > 4096))
  for (int64_t o = 0; o < out; ++o) {
    double* row = &w[static_cast<size_t>(o * in)];
    for (int64_t j = 0; j < in; ++j) {
      const double q = round(o, row[j]);
      const double* uj = &u[static_cast<size_t>(j * in)];
      const double e = (row[j] - q) / uj[j];
      row[j] = q;
      TESSERA_OMP_SIMD()
      for (int64_t k = j + 1; k < in; ++k) row[k] -= e * uj[k];
    }
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE

#undef TESSERA_DETAIL_PARALLEL_FOR
