// tessera/nn/init.hpp - parameter initialization (Kaiming, Xavier, uniform, normal) from a seeded
// generator, and the generator that module constructors draw from.
#pragma once

#include <cmath>

#include "../ops/creation.hpp"

TESSERA_BEGIN_NAMESPACE
namespace nn {

/// The generator module constructors and Dropout draw from (per thread). Seed it with
/// manual_seed for reproducible initial weights; its default seed is fixed, so runs repeat.
inline Generator& default_generator() {
  thread_local Generator gen(0x7e55e4a);
  return gen;
}
/// Reseeds default_generator().
inline void manual_seed(uint64_t seed) { default_generator().seed(seed); }

namespace init {

/// Which fan Kaiming initialization preserves the variance of.
enum class fan_mode { fan_in, fan_out };

/// fan_in and fan_out of a weight: dim 1 and dim 0 times the receptive field (the product of
/// dims 2..); a 1-D tensor counts as [n, 1]. Throws shape_error for rank 0.
inline std::pair<int64_t, int64_t> fans(const Shape& s) {
  if (s.rank() == 0)
    tessera::detail::fail<shape_error>("init", "cannot compute fans of a 0-d tensor");
  int64_t field = 1;
  for (int d = 2; d < s.rank(); ++d) field *= s[d];
  const int64_t in = s.rank() > 1 ? s[1] * field : 1;
  return {in, s[0] * field};
}

/// Fills t (in place) with values uniform in [lo, hi).
template <element_type T, class B>
const Tensor<T, B>& uniform_(const Tensor<T, B>& t, double lo, double hi,
                             Generator& gen = default_generator()) {
  return t.copy_(rand<T, B>(t.shape(), gen, lo, hi));
}
/// Fills t (in place) with normal values of the given mean and standard deviation.
template <element_type T, class B>
const Tensor<T, B>& normal_(const Tensor<T, B>& t, double mean, double std,
                            Generator& gen = default_generator()) {
  return t.copy_(randn<T, B>(t.shape(), gen, mean, std));
}
/// He et al. (2015), uniform: bound = gain * sqrt(3 / fan), gain = sqrt(2 / (1 + a^2)) (a is the
/// negative slope of a leaky ReLU; 0 for ReLU).
template <element_type T, class B>
const Tensor<T, B>& kaiming_uniform_(const Tensor<T, B>& t, double a = 0.0,
                                     fan_mode mode = fan_mode::fan_in,
                                     Generator& gen = default_generator()) {
  const auto [in, out] = fans(t.shape());
  const double fan = static_cast<double>(mode == fan_mode::fan_in ? in : out);
  const double bound = std::sqrt(2.0 / (1.0 + a * a)) * std::sqrt(3.0 / fan);
  return uniform_(t, -bound, bound, gen);
}
/// He et al. (2015), normal: std = gain / sqrt(fan).
template <element_type T, class B>
const Tensor<T, B>& kaiming_normal_(const Tensor<T, B>& t, double a = 0.0,
                                    fan_mode mode = fan_mode::fan_in,
                                    Generator& gen = default_generator()) {
  const auto [in, out] = fans(t.shape());
  const double fan = static_cast<double>(mode == fan_mode::fan_in ? in : out);
  return normal_(t, 0.0, std::sqrt(2.0 / (1.0 + a * a)) / std::sqrt(fan), gen);
}
/// Glorot & Bengio (2010), uniform: bound = gain * sqrt(6 / (fan_in + fan_out)).
template <element_type T, class B>
const Tensor<T, B>& xavier_uniform_(const Tensor<T, B>& t, double gain = 1.0,
                                    Generator& gen = default_generator()) {
  const auto [in, out] = fans(t.shape());
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound, gen);
}
/// Glorot & Bengio (2010), normal: std = gain * sqrt(2 / (fan_in + fan_out)).
template <element_type T, class B>
const Tensor<T, B>& xavier_normal_(const Tensor<T, B>& t, double gain = 1.0,
                                   Generator& gen = default_generator()) {
  const auto [in, out] = fans(t.shape());
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)), gen);
}

}  // namespace init
}  // namespace nn
TESSERA_END_NAMESPACE
