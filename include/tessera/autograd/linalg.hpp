// tessera/autograd/linalg.hpp - Variable overloads of matmul and linear.
#pragma once

#include "../ops/matmul.hpp"
#include "elementwise.hpp"

TESSERA_BEGIN_NAMESPACE

/// Matrix product with NumPy semantics (1-D operands, broadcast batch dims), as
/// tessera::matmul. Gradients: dA = dY·Bᵀ and dB = Aᵀ·dY, summed over broadcast batch dims.
template <element_type T, class B>
Variable<T, B> matmul(const Variable<T, B>& a, const Variable<T, B>& b) {
  return autograd::detail::record(
      "matmul", matmul(a.value(), b.value()), {&a, &b}, {a.value(), b.value()},
      [av = a.value(), bv = b.value()](const autograd::backward_context<T, B>& c) {
        // Undo matmul's promotion of 1-D operands so every product below is a plain batched one.
        const Tensor<T, B> a2 = av.rank() == 1 ? av.unsqueeze(0) : av;
        const Tensor<T, B> b2 = bv.rank() == 1 ? bv.unsqueeze(1) : bv;
        Tensor<T, B> g = c.grad();
        if (bv.rank() == 1) g = g.unsqueeze(g.rank());
        if (av.rank() == 1) g = g.unsqueeze(g.rank() - 1);
        if (c.needs(0)) {
          auto [ga, fresh] = autograd::detail::sum_to(
              matmul(g, b2.transpose(b2.rank() - 2, b2.rank() - 1)), a2.shape());
          (void)fresh;
          c.give(0, ga.reshape(av.shape().span()));
        }
        if (c.needs(1)) {
          auto [gb, fresh] = autograd::detail::sum_to(
              matmul(a2.transpose(a2.rank() - 2, a2.rank() - 1), g), b2.shape());
          (void)fresh;
          c.give(1, gb.reshape(bv.shape().span()));
        }
      });
}

namespace autograd::detail {
/// Elements of a linear layer's output gradient up to which its ReLU mask and bias gradient share
/// one pass (bias_and_relu_backward: on a GPU one launch instead of a mask map and a column sum).
/// That kernel reads a [rows, out] gradient one column at a time, with a stride; above this size
/// the strided reads cost more than the pass they save, and the mask and sum run separately.
inline constexpr int64_t linear_fused_bias_elements = int64_t{1} << 20;

/// linear, optionally with a ReLU fused into the GEMM's store (nn::Sequential uses it for a
/// Linear followed by a ReLU).
template <class T, class B>
Variable<T, B> linear_op(const Variable<T, B>& x, const Variable<T, B>& w,
                         const Variable<T, B>& bias, bool relu) {
  Tensor<T, B> b = bias.defined() ? bias.value() : Tensor<T, B>();
  Tensor<T, B> y =
      tessera::detail::linear_impl(x.value(), w.value(), bias.defined() ? &b : nullptr, relu);
  return record("linear", y, {&x, &w, &bias}, {x.value(), w.value(), relu ? y : Tensor<T, B>()},
                [xv = x.value(), wv = w.value(), y = relu ? y : Tensor<T, B>(),
                 relu](const backward_context<T, B>& c) {
                  const int64_t in = wv.shape()[1], out = wv.shape()[0];
                  // From x's leading dims, not numel / in: with in == 0 that would lose the rows.
                  int64_t rows = 1;
                  for (int d = 0; d + 1 < xv.rank(); ++d) rows *= xv.shape()[d];
                  const Tensor<T, B> go = c.grad().reshape({rows, out});
                  const Tensor<T, B> yo = relu ? y.reshape({rows, out}) : y;
                  const bool fused = relu && rows * out <= linear_fused_bias_elements;
                  const Tensor<T, B> g =
                      fused ? relu_and_bias_grad("linear backward", c, go, yo, relu)
                            : through_relu(go, yo, relu);
                  if (!fused && c.needs(2)) c.give(2, sum(g, {0}));
                  if (c.needs(0)) c.give(0, matmul(g, wv).reshape(xv.shape().span()));
                  if (c.needs(1)) c.give(1, matmul(g.transpose(0, 1), xv.reshape({rows, in})));
                });
}
}  // namespace autograd::detail

/// Dense layer x [..., in] · wᵀ (w [out, in]) + bias [out] -> [..., out], as tessera::linear;
/// bias may be an undefined Variable (none).
template <element_type T, class B>
Variable<T, B> linear(const Variable<T, B>& x, const Variable<T, B>& w,
                      const Variable<T, B>& bias = {}) {
  return autograd::detail::linear_op(x, w, bias, false);
}

TESSERA_END_NAMESPACE
