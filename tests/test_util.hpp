// Shared helpers for the CPU test suites: double-precision references over broadcast shapes,
// strided views with the same contents, and tolerant comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tessera/tessera.hpp>
#include <vector>

/// The value of `call`, a name inside the CPU kernels' pass namespaces
/// (detail::gemm_blocks<float>() .kc, say), taken from the pass of the instruction set the kernels
/// run now (ts::get_isa()).
#define TT_IN_ACTIVE_PASS(call) [&] { TESSERA_DETAIL_CPU_DISPATCH(call) }()

namespace tt {
namespace ts = tessera;

/// Restores the instruction set the process started with.
struct isa_guard {
  ts::cpu_isa saved = ts::get_isa();
  ~isa_guard() { ts::set_isa(saved); }
};

/// Every element (row-major) as double.
template <class T, class B>
std::vector<double> to_doubles(const ts::Tensor<T, B>& t) {
  auto v = t.template to<ts::cpu>().to_vector();
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    d[i] = static_cast<double>(static_cast<ts::compute_t<T>>(v[i]));
  return d;
}

/// Values that every dtype represents: small integers for integer types, a signed mix otherwise.
template <class T>
ts::Tensor<T, ts::cpu> random_tensor(const ts::Shape& s, ts::Generator& g, double lo = -3,
                                     double hi = 3) {
  if constexpr (std::is_same_v<T, bool>)
    return ts::randint<T>(0, 2, s, g);
  else if constexpr (std::is_integral_v<T>) {
    const int64_t l = std::is_unsigned_v<T> ? 0 : static_cast<int64_t>(lo),
                  h = static_cast<int64_t>(hi) + 1;
    return ts::randint<T>(l, std::max(h, l + 1), s, g);
  } else {
    return ts::rand<T>(s, g, lo, hi);
  }
}

/// Row-major multi-index of flat index i in shape s.
inline std::vector<int64_t> unravel(int64_t i, const ts::Shape& s) {
  std::vector<int64_t> idx(s.rank());
  for (int d = s.rank() - 1; d >= 0; --d) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return idx;
}
/// Flat index in shape `src` of the element that broadcasting maps to index `idx` of the result.
inline int64_t broadcast_source(const std::vector<int64_t>& idx, const ts::Shape& src) {
  const int off = static_cast<int>(idx.size()) - src.rank();
  int64_t flat = 0;
  for (int d = 0; d < src.rank(); ++d) flat = flat * src[d] + (src[d] == 1 ? 0 : idx[off + d]);
  return flat;
}

/// Reference of a binary elementwise op: f applied in double over the broadcast shape.
template <class Ta, class Tb>
std::vector<double> reference_binary(const ts::Tensor<Ta, ts::cpu>& a,
                                     const ts::Tensor<Tb, ts::cpu>& b,
                                     const std::function<double(double, double)>& f) {
  const ts::Shape s = ts::broadcast_shapes(a.shape(), b.shape());
  const auto da = to_doubles(a), db = to_doubles(b);
  std::vector<double> out(static_cast<size_t>(s.numel()));
  // Walk the result's multi-index with an odometer; recompute source offsets only when the
  // odometer carries past the last dim.
  std::vector<int64_t> idx(s.rank(), 0);
  const int64_t last = s.rank() ? s[s.rank() - 1] : 1;
  const bool a_rep = a.rank() == 0 || a.shape()[a.rank() - 1] == 1;
  const bool b_rep = b.rank() == 0 || b.shape()[b.rank() - 1] == 1;
  for (int64_t i = 0; i < s.numel(); i += last) {
    idx = unravel(i, s);
    const int64_t ia = broadcast_source(idx, a.shape()), ib = broadcast_source(idx, b.shape());
    for (int64_t j = 0; j < last; ++j)
      out[i + j] = f(da[ia + (a_rep ? 0 : j)], db[ib + (b_rep ? 0 : j)]);
  }
  return out;
}

/// Relative tolerance for results stored in T: a few units in T's last place, for ints exact.
template <class T>
double tolerance() {
  if constexpr (std::is_same_v<T, double>)
    return 1e-12;
  else if constexpr (std::is_same_v<T, float>)
    return 2e-6;
  else if constexpr (std::is_same_v<T, ts::half>)
    return 1e-3;
  else if constexpr (std::is_same_v<T, ts::bfloat16>)
    return 8e-3;
  else if constexpr (std::is_same_v<T, ts::float8_e4m3>)
    return 7e-2;
  else if constexpr (std::is_same_v<T, ts::float8_e5m2>)
    return 1.3e-1;
  else
    return 0;
}

/// got == want elementwise within rel*max(1,|want|); NaN must match NaN, infinities exactly.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double rel, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w))
      ok = std::isnan(g);
    else if (std::isinf(w))
      ok = g == w;
    else
      ok = std::abs(g - w) <= rel * std::max(1.0, std::abs(w));
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
    }
  }
}

/// The same values as t, reached through a non-contiguous view (transposed storage, a slice with
/// step 2 of a larger buffer, or a broadcast of a size-1 dim), so kernels see odd strides.
enum class layout { contiguous, transposed, strided, expanded_source };
template <class T>
ts::Tensor<T, ts::cpu> relayout(const ts::Tensor<T, ts::cpu>& t, layout l) {
  if (t.rank() == 0 || l == layout::contiguous) return t;
  if (l == layout::transposed) {
    // Store reversed-dim data contiguously, then permute back: every stride is non-unit.
    std::vector<int64_t> rev(t.rank());
    for (int d = 0; d < t.rank(); ++d) rev[d] = t.rank() - 1 - d;
    return t.permute(rev).contiguous().permute(rev);
  }
  if (l == layout::strided) {
    // Twice as long in the last dim, keep every other element.
    ts::Shape big = t.shape();
    big[t.rank() - 1] *= 2;
    auto buf = ts::full<T>(big, T(0));
    auto view = buf.slice(t.rank() - 1, 0, big[t.rank() - 1], 2);
    view.copy_(t);
    return view;
  }
  return t;
}

}  // namespace tt
