// tessera/kernel/contract.hpp - the kernel families a backend provides, as concepts: one per
// family, tried on float, and complete_backend<B> for all of them. A backend that satisfies it
// runs every op (the loss kernels are optional: without them the losses run as elementwise ops
// and reductions). Tests check cpu, cuda and the user-defined backend of
// examples/custom_backend.cpp against it; a backend author can static_assert it.
#pragma once

#include <cstdint>

#include "../core/backend.hpp"
#include "../core/storage.hpp"
#include "conv_problem.hpp"
#include "functors.hpp"
#include "gemm_problem.hpp"
#include "optim_problem.hpp"
#include "pool_problem.hpp"
#include "reducers.hpp"

TESSERA_BEGIN_NAMESPACE
namespace contract {

/// A value from its index, as map_kernel<B>::generate takes.
struct index_value {
  TESSERA_HOST_DEVICE float operator()(int64_t i) const { return static_cast<float>(i); }
};

/// Elementwise: run (n-ary, broadcast strides) and generate (from the index).
template <class B>
concept map_family = requires(detail::strided<float> out, detail::strided<const float> in, float* p,
                              int64_t n) {
  backend::map_kernel<B>::template run<float>(fn::identity{}, out, in);
  backend::map_kernel<B>::template run<float>(fn::add{}, out, in, in);
  backend::map_kernel<B>::template generate<float>(index_value{}, p, n);
};

/// Reductions of a strided input over all but `kept` leading dims.
template <class B>
concept reduce_family = requires(detail::strided<const float> in, detail::strided<float> out) {
  backend::reduce_kernel<B>::run(red::sum<float, float, float>{}, in, 1, out);
};

/// Matrix products.
template <class B>
concept gemm_family = requires(const detail::gemm_problem<float, float, float>& p) {
  backend::gemm_kernel<B>::run(p);
};

/// Convolutions: forward, input, weight and bias gradients.
template <class B>
concept conv_family = requires(const detail::conv_forward_problem<float, float, float>& f,
                               const detail::conv_backward_input_problem<float, float, float>& i,
                               const detail::conv_backward_weight_problem<float, float, float>& w,
                               const detail::conv_bias_backward_problem<float>& b) {
  backend::conv_kernel<B>::run(f);
  backend::conv_kernel<B>::run(i);
  backend::conv_kernel<B>::run(w);
  backend::conv_kernel<B>::run(b);
};

/// Pooling over NCHW planes and its backward.
template <class B>
concept pool_family = requires(const detail::pool_problem& pr, const float* x, float* y,
                               int64_t* idx, const int64_t* cidx) {
  backend::pool_kernel<B>::max_forward(pr, x, y, idx);
  backend::pool_kernel<B>::avg_forward(pr, x, y);
  backend::pool_kernel<B>::adaptive_avg_forward(pr, x, y);
  { backend::pool_kernel<B>::max_backward(pr, x, cidx, y) } -> std::convertible_to<bool>;
  backend::pool_kernel<B>::avg_backward(pr, x, y);
  backend::pool_kernel<B>::adaptive_avg_backward(pr, x, y);
};

/// Fused optimizer updates.
template <class B>
concept optim_family = requires(const detail::sgd_problem<float>& s,
                                const detail::adam_problem<float>& a) {
  backend::optim_kernel<B>::sgd(s);
  backend::optim_kernel<B>::adam(a);
};

}  // namespace contract

/// Every kernel family the ops need: memory (backend_tag), map, reduce, gemm, conv, pool, optim.
template <class B>
concept complete_backend = backend_tag<B> && contract::map_family<B> &&
    contract::reduce_family<B> && contract::gemm_family<B> && contract::conv_family<B> &&
    contract::pool_family<B> && contract::optim_family<B>;

TESSERA_END_NAMESPACE
