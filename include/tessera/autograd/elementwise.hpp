// tessera/autograd/elementwise.hpp - Variable overloads of the elementwise ops and operators,
// with broadcasting undone in the backward pass (gradients are summed back to each input's shape).
#pragma once

#include <string_view>

#include "../ops/bias_grad.hpp"
#include "grad_fn.hpp"
#include "variable.hpp"

TESSERA_BEGIN_NAMESPACE
namespace autograd::detail {

/// Sums g over the dims that broadcasting added or stretched, giving a tensor of shape s.
/// Returns the result and whether it is a fresh tensor (false: g itself or a view of it).
template <class T, class B>
std::pair<Tensor<T, B>, bool> sum_to(const Tensor<T, B>& g, const Shape& s) {
  if (g.shape() == s) return {g, false};
  const int lead = g.rank() - s.rank();
  Axes axes;
  for (int d = 0; d < g.rank(); ++d)
    if (d < lead || (s[d - lead] == 1 && g.shape()[d] != 1)) axes.push_back(d);
  if (axes.empty()) return {g.reshape(s.span()), false};
  return {sum(g, axes, true).reshape(s.span()), true};
}

/// give(i, g summed to shape s): the usual last step of a broadcasting op's backward.
template <class T, class B>
void give_summed(const backward_context<T, B>& ctx, size_t i, const Tensor<T, B>& g, const Shape& s,
                 bool g_fresh = true) {
  if (!ctx.needs(i)) return;
  auto [r, fresh] = sum_to(g, s);
  ctx.give(i, std::move(r), fresh || g_fresh);
}

}  // namespace autograd::detail

// Derivative functors, g = incoming gradient: simd where the body is plain arithmetic; host-device
// so that autograd's backward runs on CUDA tensors (the SIMD packs are host-only).
namespace fn::grad {
/// g * (y > 0), from relu's output y.
struct relu {
  static constexpr bool simd = true;
  template <arith T>
  TESSERA_HOST_DEVICE T operator()(T g, T y) const {
    return y > T(0) ? g : T(0);
  }
  template <class V>
  requires(!arith<V>) V operator()(V g, V y) const {
    return where_positive(g, y);  // simd/vec.hpp
  }
};
/// g * y * (1 - y), from sigmoid's output y.
struct sigmoid {
  static constexpr bool simd = true;
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T y) const {
    return g * y * (1 - y);
  }
};
/// g * (1 - y^2), from tanh's output y.
struct tanh {
  static constexpr bool simd = true;
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T y) const {
    return g * (1 - y * y);
  }
};
/// g / (2 y), from sqrt's output y.
struct sqrt {
  static constexpr bool simd = true;
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T y) const {
    return g / (y + y);
  }
};
/// -g y^3 / 2, from rsqrt's output y.
struct rsqrt {
  static constexpr bool simd = true;
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T y) const {
    return g * y * y * y * -0.5;
  }
};
/// -g a / b^2 (the divisor's gradient of a / b).
struct div_rhs {
  static constexpr bool simd = true;
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T a, T b) const {
    return -(g * a) / (b * b);
  }
};
/// g * sign(x) (0 at 0, NaN stays NaN).
struct abs {
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T x) const {
    return x > T(0) ? g : (x < T(0) ? T(-g) : (x != x ? x : T(0)));
  }
};
/// g * d/dx [x Phi(x)] = g * (Phi(x) + x phi(x)), exact GELU.
struct gelu {
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T x) const {
    using std::erf, std::exp;  // unqualified: CUDA's device overloads are global
    const T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
/// g * d/dx of GELU's tanh form: with u = c (x + k x^3) and t = tanh(u),
/// (1 + t) / 2 + x (1 - t^2) c (1 + 3 k x^2) / 2.
struct gelu_tanh {
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T x) const {
    using std::tanh;
    constexpr T c = T(0.79788456080286535588), k = T(0.044715);
    const T t = tanh(c * x * (T(1) + k * x * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * k * x * x));
  }
};
/// Gradient of maximum(a, b) for input a (ties share it equally, as PyTorch does).
struct max_lhs {
  TESSERA_HD_EXEC_CHECK_DISABLE
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T g, T a, T b) const {
    return a > b ? g : (a == b ? T(g * T(0.5)) : T(0));
  }
};
}  // namespace fn::grad

namespace autograd::detail {
/// The output gradient with a fused ReLU undone: zero where the op's output y is 0.
template <class T, class B>
Tensor<T, B> through_relu(const Tensor<T, B>& g, const Tensor<T, B>& y, bool relu) {
  return relu ? map(fn::grad::relu{}, g, y) : g;
}

/// The gradient g of a layer's output ([n, channels, ...]) through its fused ReLU (y is its output;
/// no ReLU: g itself), giving the bias (input 2 of c) its gradient on the way: the mask and the
/// bias sum read g in one pass, while it is in cache (tessera::detail::bias_and_relu_backward).
template <class T, class B>
Tensor<T, B> relu_and_bias_grad(std::string_view op, const backward_context<T, B>& c,
                                const Tensor<T, B>& g, const Tensor<T, B>& y, bool relu) {
  if (!c.needs(2)) return through_relu(g, y, relu);
  const bool want_masked = relu && (c.needs(0) || c.needs(1));
  auto [masked, db] =
      tessera::detail::bias_and_relu_backward(op, g, relu ? y : Tensor<T, B>(), want_masked);
  c.give(2, std::move(db));
  return relu ? masked : g;
}
}  // namespace autograd::detail

// ---- binary ops ------------------------------------------------------------------------------

/// a + b with broadcasting; the gradients are summed back to each operand's shape.
template <element_type T, class B>
Variable<T, B> add(const Variable<T, B>& a, const Variable<T, B>& b) {
  return autograd::detail::record(
      "add", a.value() + b.value(), {&a, &b}, {},
      [sa = a.shape(), sb = b.shape()](const autograd::backward_context<T, B>& c) {
        autograd::detail::give_summed(c, 0, c.grad(), sa, false);
        autograd::detail::give_summed(c, 1, c.grad(), sb, false);
      });
}
/// a - b with broadcasting.
template <element_type T, class B>
Variable<T, B> sub(const Variable<T, B>& a, const Variable<T, B>& b) {
  return autograd::detail::record(
      "sub", a.value() - b.value(), {&a, &b}, {},
      [sa = a.shape(), sb = b.shape()](const autograd::backward_context<T, B>& c) {
        autograd::detail::give_summed(c, 0, c.grad(), sa, false);
        if (c.needs(1)) autograd::detail::give_summed(c, 1, neg(c.grad()), sb);
      });
}
/// a * b (elementwise) with broadcasting.
template <element_type T, class B>
Variable<T, B> mul(const Variable<T, B>& a, const Variable<T, B>& b) {
  return autograd::detail::record(
      "mul", a.value() * b.value(), {&a, &b}, {a.value(), b.value()},
      [a = a.value(), b = b.value()](const autograd::backward_context<T, B>& c) {
        if (c.needs(0)) autograd::detail::give_summed(c, 0, c.grad() * b, a.shape());
        if (c.needs(1)) autograd::detail::give_summed(c, 1, c.grad() * a, b.shape());
      });
}
/// a / b (elementwise) with broadcasting.
template <element_type T, class B>
Variable<T, B> div(const Variable<T, B>& a, const Variable<T, B>& b) {
  return autograd::detail::record(
      "div", a.value() / b.value(), {&a, &b}, {a.value(), b.value()},
      [a = a.value(), b = b.value()](const autograd::backward_context<T, B>& c) {
        if (c.needs(0)) autograd::detail::give_summed(c, 0, c.grad() / b, a.shape());
        if (c.needs(1))
          autograd::detail::give_summed(c, 1, map(fn::grad::div_rhs{}, c.grad(), a, b), b.shape());
      });
}
/// Elementwise maximum with broadcasting (tied elements share the gradient equally).
template <element_type T, class B>
Variable<T, B> maximum(const Variable<T, B>& a, const Variable<T, B>& b) {
  return autograd::detail::record(
      "maximum", maximum(a.value(), b.value()), {&a, &b}, {a.value(), b.value()},
      [a = a.value(), b = b.value()](const autograd::backward_context<T, B>& c) {
        if (c.needs(0))
          autograd::detail::give_summed(c, 0, map(fn::grad::max_lhs{}, c.grad(), a, b), a.shape());
        if (c.needs(1))
          autograd::detail::give_summed(c, 1, map(fn::grad::max_lhs{}, c.grad(), b, a), b.shape());
      });
}
/// Elementwise minimum with broadcasting (tied elements share the gradient equally).
template <element_type T, class B>
Variable<T, B> minimum(const Variable<T, B>& a, const Variable<T, B>& b) {
  return autograd::detail::record(
      "minimum", minimum(a.value(), b.value()), {&a, &b}, {a.value(), b.value()},
      [a = a.value(), b = b.value()](const autograd::backward_context<T, B>& c) {
        if (c.needs(0))
          autograd::detail::give_summed(c, 0, map(fn::grad::max_lhs{}, c.grad(), b, a), a.shape());
        if (c.needs(1))
          autograd::detail::give_summed(c, 1, map(fn::grad::max_lhs{}, c.grad(), a, b), b.shape());
      });
}

// ---- with a scalar ---------------------------------------------------------------------------

/// x + s, x * s, x^p and friends, for a scalar s.
template <element_type T, class B>
Variable<T, B> add(const Variable<T, B>& x, T s) {
  return autograd::detail::record(
      "add", x.value() + s, {&x}, {},
      [](const autograd::backward_context<T, B>& c) { c.give(0, c.grad(), false); });
}
template <element_type T, class B>
Variable<T, B> mul(const Variable<T, B>& x, T s) {
  return autograd::detail::record(
      "mul", x.value() * s, {&x}, {},
      [s](const autograd::backward_context<T, B>& c) { c.give(0, c.grad() * s); });
}
/// s / x.
template <element_type T, class B>
Variable<T, B> rdiv(T s, const Variable<T, B>& x) {
  Tensor<T, B> y = s / x.value();
  return autograd::detail::record("rdiv", y, {&x}, {x.value(), y},
                                  [x = x.value(), y](const autograd::backward_context<T, B>& c) {
                                    c.give(0, map(autograd::grad_fn::rdiv<T>{}, c.grad(), y, x));
                                  });
}
/// x^p for a scalar exponent p.
template <element_type T, class B>
Variable<T, B> pow(const Variable<T, B>& x, T p) {
  return autograd::detail::record(
      "pow", map(autograd::grad_fn::pow_scalar<T>{p}, x.value()), {&x}, {x.value()},
      [x = x.value(), p](const autograd::backward_context<T, B>& c) {
        c.give(0, map(autograd::grad_fn::pow_scalar_grad<T>{p}, c.grad(), x));
      });
}

// ---- unary ops -------------------------------------------------------------------------------

namespace autograd::detail {
/// A unary op whose derivative is a function of (g, output).
template <class D, class T, class B>
Variable<T, B> unary_from_output(std::string_view op, Tensor<T, B> y, const Variable<T, B>& x) {
  return record(op, y, {&x}, {y},
                [y](const backward_context<T, B>& c) { c.give(0, map(D{}, c.grad(), y)); });
}
/// A unary op whose derivative is a function of (g, input).
template <class D, class T, class B>
Variable<T, B> unary_from_input(std::string_view op, Tensor<T, B> y, const Variable<T, B>& x) {
  return record(
      op, std::move(y), {&x}, {x.value()},
      [xv = x.value()](const backward_context<T, B>& c) { c.give(0, map(D{}, c.grad(), xv)); });
}
}  // namespace autograd::detail

/// -x.
template <element_type T, class B>
Variable<T, B> neg(const Variable<T, B>& x) {
  return autograd::detail::record(
      "neg", neg(x.value()), {&x}, {},
      [](const autograd::backward_context<T, B>& c) { c.give(0, neg(c.grad())); });
}
/// max(x, 0); the gradient is 0 where x <= 0.
template <element_type T, class B>
Variable<T, B> relu(const Variable<T, B>& x) {
  return autograd::detail::unary_from_output<fn::grad::relu>("relu", relu(x.value()), x);
}
/// 1 / (1 + e^-x).
template <element_type T, class B>
Variable<T, B> sigmoid(const Variable<T, B>& x) {
  return autograd::detail::unary_from_output<fn::grad::sigmoid>("sigmoid", sigmoid(x.value()), x);
}
/// tanh(x).
template <element_type T, class B>
Variable<T, B> tanh(const Variable<T, B>& x) {
  return autograd::detail::unary_from_output<fn::grad::tanh>("tanh", tanh(x.value()), x);
}
/// sqrt(x).
template <element_type T, class B>
Variable<T, B> sqrt(const Variable<T, B>& x) {
  return autograd::detail::unary_from_output<fn::grad::sqrt>("sqrt", sqrt(x.value()), x);
}
/// 1 / sqrt(x).
template <element_type T, class B>
Variable<T, B> rsqrt(const Variable<T, B>& x) {
  return autograd::detail::unary_from_output<fn::grad::rsqrt>("rsqrt", rsqrt(x.value()), x);
}
/// e^x.
template <element_type T, class B>
Variable<T, B> exp(const Variable<T, B>& x) {
  return autograd::detail::unary_from_output<fn::mul>("exp", exp(x.value()), x);
}
/// Natural logarithm.
template <element_type T, class B>
Variable<T, B> log(const Variable<T, B>& x) {
  return autograd::detail::unary_from_input<fn::safe_div>("log", log(x.value()), x);
}
/// |x| (gradient sign(x), 0 at 0).
template <element_type T, class B>
Variable<T, B> abs(const Variable<T, B>& x) {
  return autograd::detail::unary_from_input<fn::grad::abs>("abs", abs(x.value()), x);
}
/// Exact GELU, x * Phi(x).
template <element_type T, class B>
Variable<T, B> gelu(const Variable<T, B>& x) {
  return autograd::detail::unary_from_input<fn::grad::gelu>("gelu", gelu(x.value()), x);
}
/// GELU's tanh approximation.
template <element_type T, class B>
Variable<T, B> gelu_tanh(const Variable<T, B>& x) {
  return autograd::detail::unary_from_input<fn::grad::gelu_tanh>("gelu_tanh", gelu_tanh(x.value()),
                                                                 x);
}

/// A user elementwise function with its derivative: y = f(x), dy/dx = df(x). Both receive and
/// return T: `map([](float v) { return v * v; }, [](float v) { return 2 * v; }, x)`.
template <class F, class DF, element_type T, class B>
Variable<T, B> map(F f, DF df, const Variable<T, B>& x) {
  return autograd::detail::record(
      "map", map(f, x.value()), {&x}, {x.value()},
      [df, xv = x.value()](const autograd::backward_context<T, B>& c) {
        c.give(0, map(autograd::grad_fn::unary_user<T, DF>{df}, c.grad(), xv));
      });
}
/// A binary user function with its partial derivatives: y = f(a, b), dy/da = dfa(a, b),
/// dy/db = dfb(a, b), with broadcasting.
template <class F, class DFA, class DFB, element_type T, class B>
Variable<T, B> map(F f, DFA dfa, DFB dfb, const Variable<T, B>& a, const Variable<T, B>& b) {
  return autograd::detail::record(
      "map", map(f, a.value(), b.value()), {&a, &b}, {a.value(), b.value()},
      [dfa, dfb, a = a.value(), b = b.value()](const autograd::backward_context<T, B>& c) {
        if (c.needs(0))
          autograd::detail::give_summed(
              c, 0, map(autograd::grad_fn::binary_user<T, DFA>{dfa}, c.grad(), a, b), a.shape());
        if (c.needs(1))
          autograd::detail::give_summed(
              c, 1, map(autograd::grad_fn::binary_user<T, DFB>{dfb}, c.grad(), a, b), b.shape());
      });
}

// ---- operators: Variable with Variable, Tensor or scalar --------------------------------------

#define TESSERA_VARIABLE_OPERATOR(OP, NAME)                                      \
  template <element_type T, class B>                                             \
  Variable<T, B> operator OP(const Variable<T, B>& a, const Variable<T, B>& b) { \
    return NAME(a, b);                                                           \
  }                                                                              \
  template <element_type T, class B>                                             \
  Variable<T, B> operator OP(const Variable<T, B>& a, const Tensor<T, B>& b) {   \
    return NAME(a, Variable<T, B>(b));                                           \
  }                                                                              \
  template <element_type T, class B>                                             \
  Variable<T, B> operator OP(const Tensor<T, B>& a, const Variable<T, B>& b) {   \
    return NAME(Variable<T, B>(a), b);                                           \
  }
TESSERA_VARIABLE_OPERATOR(+, add)
TESSERA_VARIABLE_OPERATOR(-, sub)
TESSERA_VARIABLE_OPERATOR(*, mul)
TESSERA_VARIABLE_OPERATOR(/, div)
#undef TESSERA_VARIABLE_OPERATOR

template <element_type T, class B, fn::arith S>
Variable<T, B> operator+(const Variable<T, B>& x, S s) {
  return add(x, static_cast<T>(s));
}
template <element_type T, class B, fn::arith S>
Variable<T, B> operator+(S s, const Variable<T, B>& x) {
  return add(x, static_cast<T>(s));
}
template <element_type T, class B, fn::arith S>
Variable<T, B> operator-(const Variable<T, B>& x, S s) {
  return add(x, static_cast<T>(-static_cast<T>(s)));
}
template <element_type T, class B, fn::arith S>
Variable<T, B> operator-(S s, const Variable<T, B>& x) {
  return add(neg(x), static_cast<T>(s));
}
template <element_type T, class B, fn::arith S>
Variable<T, B> operator*(const Variable<T, B>& x, S s) {
  return mul(x, static_cast<T>(s));
}
template <element_type T, class B, fn::arith S>
Variable<T, B> operator*(S s, const Variable<T, B>& x) {
  return mul(x, static_cast<T>(s));
}
template <element_type T, class B, fn::arith S>
Variable<T, B> operator/(const Variable<T, B>& x, S s) {
  return mul(x, static_cast<T>(T(1) / static_cast<T>(s)));
}
template <element_type T, class B, fn::arith S>
Variable<T, B> operator/(S s, const Variable<T, B>& x) {
  return rdiv(static_cast<T>(s), x);
}
template <element_type T, class B>
Variable<T, B> operator-(const Variable<T, B>& x) {
  return neg(x);
}

TESSERA_END_NAMESPACE
