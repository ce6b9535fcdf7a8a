// tessera/backend/cpu/optim.hpp - the CPU optimizer-update kernels: SGD (momentum, dampening,
// Nesterov, weight decay) and Adam / AdamW (AMSGrad), each one fused pass over contiguous arrays.
//
// Every element is independent, so an update reads each operand once and writes each written
// operand once: SGD moves 4-5 values per element, Adam 7-9, which makes both memory-bound on
// large tensors. The option flags that change the formula are template parameters (one
// instantiation per combination actually called), so the inner loop has no branches.
//
// Arithmetic is in T with fused multiply-adds. The SIMD body and the scalar tail do exactly the
// same IEEE operations (std::fma is one rounding, as the vector FMA is; sqrt and division are
// correctly rounded in both), so results do not depend on where the thread split or the vector
// tail falls: an update is bit-identical for every thread count. In the scalar build
// (TESSERA_SIMD_SCALAR, or no supported ISA), where std::fma may be a library call, a*b+c is
// used instead throughout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"
#include "../tags.hpp"
#include "parallel.hpp"
#include "simd/vec.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

// Defined with the public API in ops/optim_step.hpp (the ops layer fills them after validating);
// every backend's optim_kernel takes them.
template <class T>
struct sgd_problem;
template <class T>
struct adam_problem;

namespace optim {

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
    if constexpr (simd::available<T>)
      return std::fma(a, b, c);  // the same single rounding as the vector lanes
    else
      return a * b + c;
  }
  TESSERA_HOST_DEVICE static T sqrt(T a) { return std::sqrt(a); }
  /// NaN when either is NaN, as torch.maximum and simd::max.
  TESSERA_HOST_DEVICE static T max(T a, T b) { return a != a ? a : (b != b ? b : (a < b ? b : a)); }
};

template <class T>
requires simd::available<T>
struct lanes<simd::vec<T>> {
  using V = simd::vec<T>;
  static constexpr int width = V::width;
  static V load(const T* p) { return V::load(p); }
  static void store(V v, T* p) { v.store(p); }
  static V splat(T x) { return V::broadcast(x); }
  static V fma(V a, V b, V c) { return simd::fma(a, b, c); }
  static V sqrt(V a) { return simd::sqrt(a); }
  static V max(V a, V b) { return simd::max(a, b); }
};

/// Elements per parallel work item: a multiple of every vector width and of a cache line, so
/// two threads never write one line.
inline constexpr int64_t block = 64;

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

/// Runs range<pack> then range<scalar> for the tail over [b, e).
template <class T, class F>
void vector_then_tail(int64_t b, int64_t e, F&& range) {
  if constexpr (simd::available<T>) b = range(simd::vec<T>{}, b, e);
  range(T{}, b, e);
}

/// Splits [0, n) into block-aligned chunks across threads (cost: element-operations per item).
template <class T, class F>
void run_blocks(int64_t n, int64_t cost, F&& range) {
  const int64_t blocks = (n + block - 1) / block;
  parallel_for(blocks, block * cost, [&](int64_t bb, int64_t be) {
    vector_then_tail<T>(bb * block, std::min(be * block, n), range);
  });
}

}  // namespace optim
}  // namespace detail

namespace backend {

template <>
struct optim_kernel<cpu> {
  /// One SGD step over pr.n contiguous elements (see detail::sgd_problem).
  template <class T>
  static void sgd(const detail::sgd_problem<T>& pr) {
    detail::optim::with_sgd_flags(pr, [&]<bool WD, bool MOM, bool FIRST, bool NEST>() {
      detail::optim::run_blocks<T>(pr.n, 8, [&]<class V>(V, int64_t b, int64_t e) {
        return detail::optim::sgd_range<V, WD, MOM, FIRST, NEST>(pr, b, e);
      });
    });
  }

  /// One Adam / AdamW step over pr.n contiguous elements (see detail::adam_problem).
  template <class T>
  static void adam(const detail::adam_problem<T>& pr) {
    detail::optim::with_adam_flags(pr, [&]<bool WD, bool AMS>() {
      detail::optim::run_blocks<T>(pr.n, 16, [&]<class V>(V, int64_t b, int64_t e) {
        return detail::optim::adam_range<V, WD, AMS>(pr, b, e);
      });
    });
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE
