// tessera/kernel/optim_update.hpp - the SGD and Adam / AdamW update bodies every backend runs:
// sgd_range and adam_range over elements [b, e) of a problem (kernel/optim_problem.hpp), written
// once over `lanes<V>` (the few operations they need) so that the CPU runs them on SIMD packs
// and a scalar tail (backend/cpu/optim.hpp adds the pack lanes), CUDA one element per thread.
// with_sgd_flags / with_adam_flags turn a problem's flags into template arguments, so each
// backend instantiates one branch-free body per combination it meets.
//
// Arithmetic is in T. The packs use fused multiply-adds; the scalar tail does too where the
// compiler's baseline has them (-mfma, AArch64, CUDA), so that it rounds as the packs do. Built
// for baseline x86-64, where std::fma is a library call, the tail computes a*b+c, which the
// compiler may or may not fuse inside a vector pass: a tail element can then differ from a
// pack's in its last bit. Either way the result does not depend on the thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "optim_problem.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail::optim {

/// The handful of operations the update bodies need, on a scalar T or a SIMD pack of T, so each
/// body is written once for the vector loop and its tail.
template <class V>
struct lanes;

template <class T>
requires std::is_floating_point_v<T>
struct lanes<T> {
  static constexpr int width = 1;
  TESSERA_HOST_DEVICE static T load(const T* p) { return *p; }
  TESSERA_HOST_DEVICE static void store(T v, T* p) { *p = v; }
  TESSERA_HOST_DEVICE static T splat(T x) { return x; }
  TESSERA_HOST_DEVICE static T fma(T a, T b, T c) {
#if defined(__FMA__) || defined(__aarch64__) || defined(__CUDA_ARCH__)
    return std::fma(a, b, c);  // the same single rounding as the vector lanes
#else
    return a * b + c;
#endif
  }
  TESSERA_HOST_DEVICE static T sqrt(T a) { return std::sqrt(a); }
  /// NaN when either is NaN, as torch.maximum and simd::max.
  TESSERA_HOST_DEVICE static T max(T a, T b) { return a != a ? a : (b != b ? b : (a < b ? b : a)); }
};

/// SGD over elements [b, e) with V = scalar or pack; returns where it stopped (the start of a
/// tail shorter than one pack). WD: weight decay; MOM: momentum != 0; FIRST: the buffer starts
/// as the gradient; NEST: Nesterov.
TESSERA_HD_EXEC_CHECK_DISABLE
template <class V, bool WD, bool MOM, bool FIRST, bool NEST, class P>
TESSERA_HOST_DEVICE int64_t sgd_range(const P& pr, int64_t b, int64_t e) {
  using L = lanes<V>;
  using T = std::remove_cvref_t<decltype(*pr.param)>;
  // Locals, not pr's members, inside the loop: stores through T* could alias pr's T fields, so
  // the compiler would reload them every iteration.
  T* const param = pr.param;
  const T* const grad = pr.grad;
  T* const buf = pr.momentum_buffer;
  const V sign = L::splat(pr.grad_sign), wd = L::splat(pr.weight_decay),
          mom = L::splat(pr.momentum), keep = L::splat(pr.one_minus_dampening),
          neg_lr = L::splat(-pr.lr);
  int64_t i = b;
  for (; i + L::width <= e; i += L::width) {
    const V w = L::load(param + i);
    V g = L::load(grad + i) * sign;  // exact: sign is +-1
    if constexpr (WD) g = L::fma(wd, w, g);
    if constexpr (MOM) {
      V m;
      if constexpr (FIRST)
        m = g;
      else
        m = L::fma(mom, L::load(buf + i), keep * g);
      L::store(m, buf + i);
      g = NEST ? L::fma(mom, m, g) : m;
    }
    L::store(L::fma(neg_lr, g, w), param + i);
  }
  return i;
}

/// Adam over elements [b, e); WD: L2 weight decay added to the gradient (Adam's, not AdamW's,
/// which is the `decay` factor applied to the parameter); AMS: AMSGrad.
TESSERA_HD_EXEC_CHECK_DISABLE
template <class V, bool WD, bool AMS, class P>
TESSERA_HOST_DEVICE int64_t adam_range(const P& pr, int64_t b, int64_t e) {
  using L = lanes<V>;
  using T = std::remove_cvref_t<decltype(*pr.param)>;
  T* const param = pr.param;
  const T* const grad = pr.grad;
  T* const m1 = pr.exp_avg;
  T* const m2 = pr.exp_avg_sq;
  T* const m2max = pr.max_exp_avg_sq;
  const V sign = L::splat(pr.grad_sign), wd = L::splat(pr.weight_decay),
          decay = L::splat(pr.param_decay), b1 = L::splat(pr.beta1),
          omb1 = L::splat(pr.one_minus_beta1), b2 = L::splat(pr.beta2),
          omb2 = L::splat(pr.one_minus_beta2), inv_bc2 = L::splat(pr.inv_sqrt_bias_correction2),
          eps = L::splat(pr.eps), neg_step = L::splat(-pr.step_size);
  int64_t i = b;
  for (; i + L::width <= e; i += L::width) {
    V w = L::load(param + i);
    V g = L::load(grad + i) * sign;
    if constexpr (WD) g = L::fma(wd, w, g);
    w = w * decay;  // exact when decay is 1 (no decoupled weight decay)
    // beta1 * m + (1 - beta1) * g: exact for beta1 = 0, unlike the lerp form m + (1-beta1)(g-m).
    const V m = L::fma(b1, L::load(m1 + i), omb1 * g);
    L::store(m, m1 + i);
    V v = L::fma(omb2 * g, g, b2 * L::load(m2 + i));
    L::store(v, m2 + i);
    if constexpr (AMS) {
      v = L::max(L::load(m2max + i), v);
      L::store(v, m2max + i);
    }
    const V denom = L::fma(L::sqrt(v), inv_bc2, eps);
    L::store(L::fma(neg_step, m / denom, w), param + i);
  }
  return i;
}

/// Calls go.template operator()<WD, MOM, FIRST, NEST>() with the flags of an SGD problem, so
/// every backend instantiates one branch-free body per combination it meets.
template <class T, class Go>
void with_sgd_flags(const sgd_problem<T>& pr, Go&& go) {
  // The buffer pointer, not momentum in T, says whether there is momentum: a tiny momentum
  // that rounds to 0 in float still keeps the buffer as PyTorch does.
  const bool wd = pr.weight_decay != T(0), mom = pr.momentum_buffer != nullptr;
  auto with_momentum = [&]<bool WD>() {
    if (!mom)
      go.template operator()<WD, false, false, false>();
    else if (pr.first_step)
      pr.nesterov ? go.template operator()<WD, true, true, true>()
                  : go.template operator()<WD, true, true, false>();
    else
      pr.nesterov ? go.template operator()<WD, true, false, true>()
                  : go.template operator()<WD, true, false, false>();
  };
  wd ? with_momentum.template operator()<true>() : with_momentum.template operator()<false>();
}

/// Calls go.template operator()<WD, AMS>() with the flags of an Adam problem.
template <class T, class Go>
void with_adam_flags(const adam_problem<T>& pr, Go&& go) {
  const bool wd = pr.weight_decay != T(0);
  if (pr.amsgrad)
    wd ? go.template operator()<true, true>() : go.template operator()<false, true>();
  else
    wd ? go.template operator()<true, false>() : go.template operator()<false, false>();
}

}  // namespace detail::optim
TESSERA_END_NAMESPACE
