// tessera/backend/cpu/loss.hpp - loss_kernel<cpu>: cross-entropy's row pass and its gradient,
// one fused loop per row in double (kernel/loss_problem.hpp), rows split across threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../../core/backend.hpp"
#include "../../kernel/loss_problem.hpp"
#include "parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace backend {

template <>
struct loss_kernel<cpu> {
  /// Each row's loss and logsumexp (detail::cross_entropy_rows_problem).
  template <class T>
  static void cross_entropy_rows(const detail::cross_entropy_rows_problem<T>& p) {
    detail::parallel_for(p.n, 4 * p.c, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        double lse = 0;
        const double v = detail::cross_entropy_row(p.x + i * p.c, p.c, p.labels[i], p.ignore_index,
                                                   p.keep, p.smooth_per_class, lse);
        p.lse[i] = static_cast<T>(lse);
        p.loss[i] = static_cast<T>(v);
      }
    });
  }

  /// The logits' gradient (detail::cross_entropy_grad_problem).
  template <class T>
  static void cross_entropy_grad(const detail::cross_entropy_grad_problem<T>& p) {
    const int64_t c = p.c;
    detail::parallel_for(p.n, 4 * c, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T* out = p.dx + i * c;
        const int64_t label = p.labels[i];
        if (label == p.ignore_index) {
          std::fill(out, out + c, T(0));
          continue;
        }
        const double gi = static_cast<double>(p.grad[p.per_sample ? i : 0]) * p.scale;
        const T* row = p.x + i * c;
        const double lse = p.lse[i];
        for (int64_t j = 0; j < c; ++j)
          out[j] = static_cast<T>(
              gi * (std::exp(static_cast<double>(row[j]) - lse) - p.smooth_per_class));
        out[label] = static_cast<T>(out[label] - gi * p.keep);
      }
    });
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE
