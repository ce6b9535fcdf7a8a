// tessera/autograd/gradcheck.hpp - compares backward() with central finite differences in double.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "../backend/cpu/memory.hpp"
#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE
namespace autograd {

/// Tolerances of gradcheck: |analytic - numeric| <= atol + rtol * |numeric| per element.
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1;  // of the random projection of the output
};

/// Outcome of gradcheck; converts to bool, and names the first mismatch in `message`.
struct gradcheck_result {
  bool ok = true;
  std::string message;
  explicit operator bool() const { return ok; }
};

namespace detail {
template <class T>
using gradcheck_fn = std::function<Variable<T, cpu>(const std::vector<Variable<T, cpu>>&)>;

/// gradcheck's body, compiled once per translation unit rather than once per function checked
/// (a test checks hundreds of lambdas): f comes as a std::function, whose call through a pointer
/// costs nothing next to the two forward passes per element. T is double; a template parameter
/// so that a translation unit that never calls gradcheck does not compile it.
template <class T>
gradcheck_result gradcheck_erased(const gradcheck_fn<T>& f,
                                  const std::vector<Tensor<T, cpu>>& inputs,
                                  const GradcheckOptions& o) {
  using V = Variable<T, cpu>;
  std::vector<V> vars;
  for (const auto& t : inputs) vars.push_back(V(t, true));
  const V y = f(vars);
  Generator rng(o.seed);
  const Tensor<T, cpu> r = randn<T, cpu>(y.shape(), rng);
  auto objective = [&]() {
    no_grad guard;
    return sum(f(vars).value() * r).item();
  };
  sum(y * r).backward();

  gradcheck_result res;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor<T, cpu>& x = inputs[i];
    const Tensor<T, cpu> g = vars[i].grad();
    std::vector<int64_t> idx(static_cast<size_t>(x.rank()), 0);
    for (int64_t k = 0; k < x.numel(); ++k) {
      int64_t rem = k;
      for (int d = x.rank() - 1; d >= 0; --d) {
        idx[static_cast<size_t>(d)] = rem % x.shape()[d];
        rem /= x.shape()[d];
      }
      double& v = x.at(idx);
      const double orig = v;
      v = orig + o.eps;
      const double plus = objective();
      v = orig - o.eps;
      const double minus = objective();
      v = orig;
      const double numeric = (plus - minus) / (2 * o.eps);
      const double analytic = g.defined() ? g.at(idx) : 0.0;
      if (!(std::abs(analytic - numeric) <= o.atol + o.rtol * std::abs(numeric))) {
        std::ostringstream os;
        os << "input " << i << " (shape " << x.shape() << ") element [";
        for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
        os << "]: analytic " << analytic << ", numeric " << numeric;
        res.ok = false;
        res.message = os.str();
        return res;
      }
    }
  }
  return res;
}
}  // namespace detail

/// Checks the gradients of f at `inputs` (double, CPU; any strides: views are perturbed in
/// place through their strides). f maps a vector of Variables (one per input, each requiring
/// grad) to a Variable of any shape. The analytic side is one backward of sum(f(x) * r) for a
/// fixed random r; the numeric side perturbs every input element by +-eps. An input f does not
/// reach must get no gradient or a zero one.
template <class F>
gradcheck_result gradcheck(F&& f, const std::vector<Tensor<double, cpu>>& inputs,
                           const GradcheckOptions& o = {}) {
  return detail::gradcheck_erased<double>(detail::gradcheck_fn<double>(std::forward<F>(f)), inputs,
                                          o);
}

}  // namespace autograd
using autograd::gradcheck;
TESSERA_END_NAMESPACE
