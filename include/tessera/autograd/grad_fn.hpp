// tessera/autograd/grad_fn.hpp - the element functions of autograd's backward passes (and of the
// few forward passes that need their own), as host-device functors: the same backward code then
// runs on every backend, CUDA included (nvcc compiles lambdas for the host only).
#pragma once

#include <cmath>
#include <cstdint>

#include "../config.hpp"
#include "../core/random.hpp"

TESSERA_BEGIN_NAMESPACE
namespace autograd::grad_fn {

/// d(s / x) = -g y / x.
template <class T>
struct rdiv {
  TESSERA_HOST_DEVICE T operator()(T g, T y, T x) const { return -g * y / x; }
};
/// x^p.
template <class T>
struct pow_scalar {
  T p;
  TESSERA_HOST_DEVICE T operator()(T v) const {
    using std::pow;
    return static_cast<T>(pow(v, p));
  }
};
/// d(x^p) = g p x^(p - 1) (0 for p = 0).
template <class T>
struct pow_scalar_grad {
  T p;
  TESSERA_HOST_DEVICE T operator()(T g, T v) const {
    using std::pow;
    return p == T(0) ? T(0) : g * p * static_cast<T>(pow(v, p - 1));
  }
};
/// g df(x) for a user derivative df (device-callable on device backends).
template <class T, class DF>
struct unary_user {
  DF df;
  TESSERA_HD_EXEC_CHECK_DISABLE
  TESSERA_HOST_DEVICE T operator()(T g, T v) const { return g * df(v); }
};
/// g df(x, y) for a user partial derivative df.
template <class T, class DF>
struct binary_user {
  DF df;
  TESSERA_HD_EXEC_CHECK_DISABLE
  TESSERA_HOST_DEVICE T operator()(T g, T x, T y) const { return g * df(x, y); }
};
/// softmax: y (g - s), s = sum(g y).
template <class T>
struct softmax {
  TESSERA_HOST_DEVICE T operator()(T g, T y, T s) const { return y * (g - s); }
};
/// log_softmax: g - exp(y) s, s = sum(g).
template <class T>
struct log_softmax {
  TESSERA_HOST_DEVICE T operator()(T g, T y, T s) const {
    using std::exp;
    return static_cast<T>(g - exp(y) * s);
  }
};
/// Binary cross-entropy on logits, stably: max(x, 0) - x y + log(1 + exp(-|x|)).
template <class T>
struct bce_logits {
  TESSERA_HOST_DEVICE T operator()(T x, T y) const {
    using std::exp, std::log1p, std::abs;
    return static_cast<T>((x > T(0) ? x : T(0)) - x * y + log1p(exp(-abs(x))));
  }
};
/// Its gradient for the logits: g (sigmoid(x) - y).
template <class T>
struct bce_logits_grad {
  TESSERA_HOST_DEVICE T operator()(T g, T x, T y) const {
    using std::exp;
    return static_cast<T>(g * (T(1) / (T(1) + exp(-x)) - y));
  }
};
/// -g x (the target's gradient of binary cross-entropy).
template <class T>
struct neg_mul {
  TESSERA_HOST_DEVICE T operator()(T g, T x) const { return -g * x; }
};
/// var: g scale (x - mean).
template <class T>
struct var {
  T scale;
  TESSERA_HOST_DEVICE T operator()(T g, T v, T m) const { return g * scale * (v - m); }
};
/// 1 where x equals the extreme, else 0.
template <class T>
struct hit {
  TESSERA_HOST_DEVICE T operator()(T v, T e) const { return v == e ? T(1) : T(0); }
};
/// g / n at the hits (ties share the gradient).
template <class T>
struct share {
  TESSERA_HOST_DEVICE T operator()(T g, T h, T n) const { return h == T(0) ? T(0) : g / n; }
};
/// logsumexp: g exp(x - l).
template <class T>
struct logsumexp {
  TESSERA_HOST_DEVICE T operator()(T g, T v, T l) const {
    using std::exp;
    return g * static_cast<T>(exp(v - l));
  }
};
/// 2-norm: g x / n (0 where n = 0).
template <class T>
struct norm {
  TESSERA_HOST_DEVICE T operator()(T g, T v, T n) const { return n == T(0) ? T(0) : g * v / n; }
};
/// The dropout mask of element i from a counter-based random number: splitmix64_mix of
/// key + (i + 1) * splitmix64_step, whose top 53 bits are uniform in [0, 1); scale where that is
/// below keep, else 0. The same on every backend, and computed where the mask lives (no random
/// numbers drawn on the host and copied).
template <class T>
struct hashed_dropout_mask {
  uint64_t key;
  double keep;
  T scale;
  TESSERA_HOST_DEVICE T operator()(int64_t i) const {
    const uint64_t z = splitmix64_mix(key + (static_cast<uint64_t>(i) + 1) * splitmix64_step);
    const double u = static_cast<double>(z >> 11) * 0x1.0p-53;
    return u < keep ? scale : T(0);
  }
};

}  // namespace autograd::grad_fn
TESSERA_END_NAMESPACE
