// tessera/ops/elementwise.hpp - named elementwise ops, operators and compound assignment, all
// thin wrappers over map with NumPy broadcasting and the promotion table of core/dtype.hpp.
#pragma once

#include "map.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// f as called on elements of type In with arithmetic in C: passed as is when no conversion is
/// needed (so SIMD-capable functors stay SIMD-capable), otherwise behind a converting wrapper.
template <class C, class F, class... In>
auto in_compute_type(F f) {
  if constexpr ((std::is_same_v<In, C> && ...))
    return f;
  else
    return fn::cast_args<C, F>{f};
}

/// Binary op with promotion: result R (or bool for predicates), arithmetic in compute_t<R>.
template <class Rq, class F, class A, class Bt, class B>
auto binary_op(std::string_view op, F f, const Tensor<A, B>& a, const Tensor<Bt, B>& b) {
  a.check_defined(op);
  b.check_defined(op);
  using P = promote_t<A, Bt>;
  using R = std::conditional_t<std::is_void_v<Rq>, P, Rq>;
  Tensor<R, B> out(broadcast_shapes(a.shape(), b.shape(), op));
  launch_map(in_compute_type<compute_t<P>, F, A, Bt>(f), out, a, b);
  return out;
}
template <class Rq, class F, class A, class Bt, class O, class B>
const Tensor<O, B>& binary_op_to(std::string_view op, F f, const Tensor<A, B>& a,
                                 const Tensor<Bt, B>& b, const Tensor<O, B>& out) {
  out.check_defined(op);
  a.check_defined(op);
  b.check_defined(op);
  const Shape s = broadcast_shapes(a.shape(), b.shape(), op);
  if (!(s == out.shape()))
    fail<shape_error>(op, "result shape ", s, " does not match the output's shape ", out.shape());
  begin_write(op, out);
  launch_map(in_compute_type<compute_t<promote_t<A, Bt>>, F, A, Bt>(f), out, a, b);
  return out;
}
/// Tensor-scalar op: the scalar is bound into the functor (no broadcast tensor is made).
template <class Rq, class Bind, class F, class T, class S, class B>
auto scalar_op(std::string_view op, F f, const Tensor<T, B>& a, S s) {
  a.check_defined(op);
  using P = scalar_promote_t<T, S>;
  using R = std::conditional_t<std::is_void_v<Rq>, P, Rq>;
  using C = compute_t<P>;
  Tensor<R, B> out(a.shape());
  launch_map(in_compute_type<C, Bind, T>(Bind{f, static_cast<C>(s)}), out, a);
  return out;
}
/// Unary op: integer inputs of float-valued functions (exp, sqrt, ...) give float results.
template <bool FloatResult, class F, class T, class B>
auto unary_op(std::string_view op, F f, const Tensor<T, B>& a) {
  a.check_defined(op);
  using R = std::conditional_t<FloatResult && !is_floating_v<T>, float, T>;
  Tensor<R, B> out(a.shape());
  launch_map(in_compute_type<compute_t<R>, F, T>(f), out, a);
  return out;
}

template <class T>
concept scalar = std::is_arithmetic_v<T>;

}  // namespace detail

// ---- binary arithmetic: tensor-tensor (broadcast), tensor-scalar, scalar-tensor, out= ----
#define TESSERA_BINARY_OP(NAME, FUNCTOR, RESULT)                                                  \
  template <element_type A, element_type Bt, class B>                                             \
  auto NAME(const Tensor<A, B>& a, const Tensor<Bt, B>& b) {                                      \
    return detail::binary_op<RESULT>(#NAME, FUNCTOR{}, a, b);                                     \
  }                                                                                               \
  template <element_type A, element_type Bt, element_type O, class B>                             \
  const Tensor<O, B>& NAME(const Tensor<A, B>& a, const Tensor<Bt, B>& b,                         \
                           const Tensor<O, B>& out) {                                             \
    return detail::binary_op_to<RESULT>(#NAME, FUNCTOR{}, a, b, out);                             \
  }                                                                                               \
  template <element_type T, detail::scalar S, class B>                                            \
  auto NAME(const Tensor<T, B>& a, S s) {                                                         \
    return detail::scalar_op<RESULT, fn::bind_right<FUNCTOR, compute_t<scalar_promote_t<T, S>>>>( \
        #NAME, FUNCTOR{}, a, s);                                                                  \
  }                                                                                               \
  template <detail::scalar S, element_type T, class B>                                            \
  auto NAME(S s, const Tensor<T, B>& a) {                                                         \
    return detail::scalar_op<RESULT, fn::bind_left<FUNCTOR, compute_t<scalar_promote_t<T, S>>>>(  \
        #NAME, FUNCTOR{}, a, s);                                                                  \
  }

/// a + b, a - b, a * b, a / b with NumPy broadcasting; shape_error if shapes do not broadcast.
/// Integer division truncates; integer division by zero gives 0.
TESSERA_BINARY_OP(add, fn::add, void)
TESSERA_BINARY_OP(sub, fn::sub, void)
TESSERA_BINARY_OP(mul, fn::mul, void)
TESSERA_BINARY_OP(div, fn::safe_div, void)
/// a^b elementwise (integer powers exact; negative integer exponents give 0 unless |a| = 1).
TESSERA_BINARY_OP(pow, fn::pow_, void)
/// Elementwise max / min; NaN propagates.
TESSERA_BINARY_OP(maximum, fn::maximum, void)
TESSERA_BINARY_OP(minimum, fn::minimum, void)
/// C fmod: the remainder has the sign of a.
TESSERA_BINARY_OP(fmod, fn::fmod_, void)
/// Comparisons, giving bool tensors.
TESSERA_BINARY_OP(eq, fn::eq, bool)
TESSERA_BINARY_OP(ne, fn::ne, bool)
TESSERA_BINARY_OP(lt, fn::lt, bool)
TESSERA_BINARY_OP(le, fn::le, bool)
TESSERA_BINARY_OP(gt, fn::gt, bool)
TESSERA_BINARY_OP(ge, fn::ge, bool)
/// Logical ops on truth values (nonzero is true), giving bool tensors.
TESSERA_BINARY_OP(logical_and, fn::logical_and, bool)
TESSERA_BINARY_OP(logical_or, fn::logical_or, bool)
TESSERA_BINARY_OP(logical_xor, fn::logical_xor, bool)
#undef TESSERA_BINARY_OP

// ---- unary ----
#define TESSERA_UNARY_OP(NAME, FUNCTOR, FLOAT_RESULT)           \
  template <element_type T, class B>                            \
  auto NAME(const Tensor<T, B>& a) {                            \
    return detail::unary_op<FLOAT_RESULT>(#NAME, FUNCTOR{}, a); \
  }
/// Elementwise math. Functions with real-valued results (exp, log, sqrt, trig, sigmoid, gelu,
/// erf, ...) return float for integer inputs; neg, abs, sign, relu, floor, ceil, round keep the
/// input type. round is half-to-even (as NumPy and LibTorch).
TESSERA_UNARY_OP(neg, fn::neg, false)
TESSERA_UNARY_OP(abs, fn::abs_, false)
TESSERA_UNARY_OP(sign, fn::sign, false)
TESSERA_UNARY_OP(relu, fn::relu, false)
TESSERA_UNARY_OP(floor, fn::floor_, false)
TESSERA_UNARY_OP(ceil, fn::ceil_, false)
TESSERA_UNARY_OP(round, fn::round_, false)
TESSERA_UNARY_OP(exp, fn::exp_, true)
TESSERA_UNARY_OP(log, fn::log_, true)
TESSERA_UNARY_OP(log1p, fn::log1p_, true)
TESSERA_UNARY_OP(expm1, fn::expm1_, true)
TESSERA_UNARY_OP(sqrt, fn::sqrt_, true)
TESSERA_UNARY_OP(rsqrt, fn::rsqrt, true)
TESSERA_UNARY_OP(sin, fn::sin_, true)
TESSERA_UNARY_OP(cos, fn::cos_, true)
TESSERA_UNARY_OP(tanh, fn::tanh_, true)
TESSERA_UNARY_OP(sigmoid, fn::sigmoid, true)
TESSERA_UNARY_OP(gelu, fn::gelu, true)
TESSERA_UNARY_OP(gelu_tanh, fn::gelu_tanh, true)
TESSERA_UNARY_OP(erf, fn::erf_, true)
#undef TESSERA_UNARY_OP

/// Logical not (nonzero is true), giving a bool tensor.
template <element_type T, class B>
Tensor<bool, B> logical_not(const Tensor<T, B>& a) {
  a.check_defined("logical_not");
  Tensor<bool, B> out(a.shape());
  detail::launch_map(fn::logical_not{}, out, a);
  return out;
}

/// Clamps into [lo, hi] (NaN stays NaN); throws error if lo > hi.
template <element_type T, class B>
Tensor<T, B> clamp(const Tensor<T, B>& a, double lo, double hi) {
  a.check_defined("clamp");
  if (!(lo <= hi)) detail::fail<error>("clamp", "lo ", lo, " is greater than hi ", hi);
  using C = compute_t<T>;
  Tensor<T, B> out(a.shape());
  detail::launch_map(detail::in_compute_type<C, fn::clamp_<C>, T>(
                         fn::clamp_<C>{static_cast<C>(lo), static_cast<C>(hi)}),
                     out, a);
  return out;
}

/// cond ? a : b elementwise, all three broadcast together; the result type promotes a and b.
template <element_type C, element_type A, element_type Bt, class B>
auto where(const Tensor<C, B>& cond, const Tensor<A, B>& a, const Tensor<Bt, B>& b) {
  cond.check_defined("where");
  a.check_defined("where");
  b.check_defined("where");
  using R = promote_t<A, Bt>;
  Tensor<R, B> out(detail::broadcast_all("where", cond.shape(), a.shape(), b.shape()));
  detail::launch_map(fn::where_as<R>{}, out, cond, a, b);
  return out;
}

// ---- operators ----
#define TESSERA_OPERATOR(OP, NAME)                                  \
  template <element_type A, element_type Bt, class B>               \
  auto operator OP(const Tensor<A, B>& a, const Tensor<Bt, B>& b) { \
    return NAME(a, b);                                              \
  }                                                                 \
  template <element_type T, detail::scalar S, class B>              \
  auto operator OP(const Tensor<T, B>& a, S s) {                    \
    return NAME(a, s);                                              \
  }                                                                 \
  template <detail::scalar S, element_type T, class B>              \
  auto operator OP(S s, const Tensor<T, B>& a) {                    \
    return NAME(s, a);                                              \
  }
TESSERA_OPERATOR(+, add)
TESSERA_OPERATOR(-, sub)
TESSERA_OPERATOR(*, mul)
TESSERA_OPERATOR(/, div)
TESSERA_OPERATOR(==, eq)
TESSERA_OPERATOR(!=, ne)
TESSERA_OPERATOR(<, lt)
TESSERA_OPERATOR(<=, le)
TESSERA_OPERATOR(>, gt)
TESSERA_OPERATOR(>=, ge)
#undef TESSERA_OPERATOR

template <element_type T, class B>
Tensor<T, B> operator-(const Tensor<T, B>& a) {
  return neg(a);
}

/// Compound assignment: computes in place into a (b broadcast to a's shape, the result converted
/// to a's element type). Returns a.
#define TESSERA_COMPOUND(OP, FUNCTOR)                                                              \
  template <element_type T, element_type U, class B>                                               \
  const Tensor<T, B>& operator OP(const Tensor<T, B>& a, const Tensor<U, B>& b) {                  \
    a.check_defined(#OP);                                                                          \
    b.check_defined(#OP);                                                                          \
    const Shape s = broadcast_shapes(a.shape(), b.shape(), #OP);                                   \
    if (!(s == a.shape()))                                                                         \
      detail::fail<shape_error>(#OP, "cannot broadcast ", b.shape(), " into ", a.shape());         \
    detail::begin_write(#OP, a);                                                                   \
    using C = compute_t<promote_t<T, U>>;                                                          \
    detail::launch_map(detail::in_compute_type<C, FUNCTOR, T, U>(FUNCTOR{}), a, a, b);             \
    return a;                                                                                      \
  }                                                                                                \
  template <element_type T, detail::scalar S, class B>                                             \
  const Tensor<T, B>& operator OP(const Tensor<T, B>& a, S s) {                                    \
    detail::begin_write(#OP, a);                                                                   \
    using C = compute_t<T>;                                                                        \
    using Bind = fn::bind_right<FUNCTOR, C>;                                                       \
    detail::launch_map(detail::in_compute_type<C, Bind, T>(Bind{FUNCTOR{}, static_cast<C>(s)}), a, \
                       a);                                                                         \
    return a;                                                                                      \
  }
TESSERA_COMPOUND(+=, fn::add)
TESSERA_COMPOUND(-=, fn::sub)
TESSERA_COMPOUND(*=, fn::mul)
TESSERA_COMPOUND(/=, fn::safe_div)
#undef TESSERA_COMPOUND

TESSERA_END_NAMESPACE
