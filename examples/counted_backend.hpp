// examples/counted_backend.hpp - a backend defined in user code, without editing tessera:
// `counted` keeps tensors in host memory and reuses the CPU kernels, but counts every kernel
// launch. Used by custom_backend.cpp and by the backend-generic test suite
// (tests/backend_suite.hpp). Include <tessera/tessera.hpp> first.
#pragma once

#include <cstdint>
#include <tessera/tessera.hpp>

namespace ts = tessera;

struct counted {};  // the backend tag: an empty type

namespace launches {
inline int map = 0, reduce = 0, gemm = 0, conv = 0, pool = 0, optim = 0;
}

// Memory: the CPU's (host_accessible, so element access and printing work).
template <>
struct tessera::backend::memory<counted> : tessera::backend::memory<ts::cpu> {};

// Elementwise: count, then run the CPU kernel.
template <>
struct tessera::backend::map_kernel<counted> {
  template <class Out, class F, class... In>
  static void run(const F& f, ts::detail::strided<Out> out, ts::detail::strided<const In>... in) {
    ++launches::map;
    map_kernel<ts::cpu>::run<Out>(f, out, in...);
  }
  // Values from their index alone (dropout's random masks).
  template <class Out, class F>
  static void generate(const F& f, Out* out, int64_t n) {
    ++launches::map;
    map_kernel<ts::cpu>::generate<Out>(f, out, n);
  }
};

// Reductions: the same.
template <>
struct tessera::backend::reduce_kernel<counted> {
  template <class R, class In, class Out>
  static void run(const R& red, ts::detail::strided<const In> in, int kept,
                  ts::detail::strided<Out> out) {
    ++launches::reduce;
    reduce_kernel<ts::cpu>::run(red, in, kept, out);
  }
};

// Matrix products: count, then run the CPU GEMM (a real backend could call a vendor BLAS here).
template <>
struct tessera::backend::gemm_kernel<counted> {
  template <class TA, class TB, class Acc>
  static void run(const ts::detail::gemm_problem<TA, TB, Acc>& problem) {
    ++launches::gemm;
    gemm_kernel<ts::cpu>::run(problem);
  }
};

// Convolutions: one entry point per pass (forward, input gradient, weight gradient), each taking
// a detail::conv_*_problem; forward all of them to the CPU kernels.
template <>
struct tessera::backend::conv_kernel<counted> {
  template <class Problem>
  static void run(const Problem& problem) {
    ++launches::conv;
    conv_kernel<ts::cpu>::run(problem);
  }
};

// Pooling: six entry points (max, average and adaptive average, forward and backward).
template <>
struct tessera::backend::pool_kernel<counted> {
  using cpu = pool_kernel<ts::cpu>;
  using problem = ts::detail::pool_problem;
  template <class T>
  static void max_forward(const problem& p, const T* x, T* y, int64_t* indices) {
    ++launches::pool;
    cpu::max_forward(p, x, y, indices);
  }
  template <class T>
  static void avg_forward(const problem& p, const T* x, T* y) {
    ++launches::pool;
    cpu::avg_forward(p, x, y);
  }
  template <class T>
  static void adaptive_avg_forward(const problem& p, const T* x, T* y) {
    ++launches::pool;
    cpu::adaptive_avg_forward(p, x, y);
  }
  template <class T>
  static bool max_backward(const problem& p, const T* gy, const int64_t* indices, T* gx) {
    ++launches::pool;
    return cpu::max_backward(p, gy, indices, gx);
  }
  template <class T>
  static void avg_backward(const problem& p, const T* gy, T* gx) {
    ++launches::pool;
    cpu::avg_backward(p, gy, gx);
  }
  template <class T>
  static void adaptive_avg_backward(const problem& p, const T* gy, T* gx) {
    ++launches::pool;
    cpu::adaptive_avg_backward(p, gy, gx);
  }
};

// Optimizer updates (sgd_step, adam_step and the nn optimizers).
template <>
struct tessera::backend::optim_kernel<counted> {
  template <class T>
  static void sgd(const ts::detail::sgd_problem<T>& p) {
    ++launches::optim;
    optim_kernel<ts::cpu>::sgd(p);
  }
  template <class T>
  static void adam(const ts::detail::adam_problem<T>& p) {
    ++launches::optim;
    optim_kernel<ts::cpu>::adam(p);
  }
};

static_assert(ts::complete_backend<counted>);
