// tessera/autograd/attention.hpp - scaled dot-product attention on Variables: the fused forward
// saves each row's logsumexp, and the fused backward recomputes the probabilities block by
// block from it (attention_kernel<B>); other backends and types differentiate the composition.
#pragma once

#include <optional>

#include "../ops/attention.hpp"
#include "elementwise.hpp"
#include "linalg.hpp"
#include "loss.hpp"
#include "shape.hpp"

TESSERA_BEGIN_NAMESPACE

namespace autograd::detail {
/// The composition matmul, softmax, matmul on Variables, differentiated op by op: backends and
/// types without the fused kernel. mask: additive, broadcast to the scores (or undefined).
template <class T, class B>
Variable<T, B> attention_composed_variable(const Variable<T, B>& q, const Variable<T, B>& k,
                                           const Variable<T, B>& v, const Tensor<T, B>& mask,
                                           bool causal, double scale) {
  const int64_t r = q.rank();
  const Tensor<T, B> folded =
      tessera::detail::attention_fold_causal(mask, q.shape()[r - 2], k.shape()[r - 2], causal);
  Variable<T, B> sc = matmul(q, transpose(k, r - 2, r - 1)) * static_cast<T>(scale);
  if (folded.defined()) sc = sc + Variable<T, B>(folded);
  return matmul(softmax(sc, -1), v);
}
}  // namespace autograd::detail

/// Scaled dot-product attention (see ops/attention.hpp) with gradients for q, k and v. The mask
/// is a constant (no gradient).
template <element_type T, class B, class M = T>
Variable<T, B> scaled_dot_product_attention(const Variable<T, B>& q, const Variable<T, B>& k,
                                            const Variable<T, B>& v, const Tensor<M, B>& mask = {},
                                            bool causal = false,
                                            std::optional<double> scale = std::nullopt) {
  const Shape scores = tessera::detail::attention_check(q.value(), k.value(), v.value(), mask);
  const int64_t r = q.rank();
  const double s = tessera::detail::attention_scale(scale, q.shape()[r - 1]);
  const Tensor<T, B> m = tessera::detail::attention_additive_mask<T>(mask, scores);
  if constexpr (tessera::detail::has_attention_kernel<B, T>) {
    if (!tessera::detail::attention_kernel_takes<B>(q.shape()[r - 1], v.shape()[r - 1]))
      return autograd::detail::attention_composed_variable(q, k, v, m, causal, s);
    const bool rec = autograd::detail::will_record<T, B>({&q, &k, &v});
    auto res = tessera::detail::attention_fused(q.value(), k.value(), v.value(), m, causal, s, rec);
    return autograd::detail::record(
        "scaled_dot_product_attention", res.out, {&q, &k, &v},
        {q.value(), k.value(), v.value(), m, res.out},
        [res](const autograd::backward_context<T, B>& c) {
          // The forward's problem (its operands and out, lse kept alive by res).
          tessera::detail::attention_backward_problem<T> g;
          g.fwd = res.problem;
          const auto& op = res.operands;
          Tensor<T, B> dq(op[0].shape()), dk(op[1].shape()), dv(op[2].shape());
          if (g.fwd.batch > 0 && g.fwd.lq > 0 && g.fwd.lk > 0) {
            const Tensor<T, B> go = c.grad().contiguous();
            g.grad_out = go.data(), g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
            backend::attention_kernel<B>::backward(g);  // overwrites dq, dk and dv
          } else {
            dq.fill_(T(0)), dk.fill_(T(0)), dv.fill_(T(0));
          }
          c.give(0, dq), c.give(1, dk), c.give(2, dv);
        });
  } else {
    return autograd::detail::attention_composed_variable(q, k, v, m, causal, s);
  }
}

TESSERA_END_NAMESPACE
