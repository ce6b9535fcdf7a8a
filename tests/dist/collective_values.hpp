// The collectives' tests, one body for both groups: the MPI suite (test_dist.cpp: ProcessGroup,
// CPU tensors) and the NCCL suite (test_dist_nccl.cu: NcclGroup, CUDA tensors) run the same
// checks, on per-rank values every dtype holds exactly.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <tessera/dist/process_group.hpp>
#include <type_traits>
#include <vector>

namespace collective_values {
namespace ts = tessera;
using ts::dist::reduce_op;

using AllTypes = ::testing::Types<float, double, ts::half, ts::bfloat16, ts::float8_e4m3,
                                  ts::float8_e5m2, int8_t, uint8_t, int32_t, int64_t, bool>;

// Values every dtype holds exactly, with sums and products over three ranks exact too.
inline int small(int64_t i, int rank) { return static_cast<int>((i + rank) % 3); }

// What reducing small(i, r) over every rank gives.
inline double reduced(int64_t i, int size, reduce_op op, bool is_bool, bool is_integral) {
  std::vector<double> v;
  for (int r = 0; r < size; ++r) v.push_back(small(i, r));
  if (is_bool)
    for (double& x : v) x = x != 0;
  const double sum = std::accumulate(v.begin(), v.end(), 0.0);
  switch (op) {
    case reduce_op::sum:
      return is_bool ? (sum > 0) : sum;
    case reduce_op::avg:
      return is_integral ? std::trunc(sum / size) : sum / size;
    case reduce_op::max:
      return *std::max_element(v.begin(), v.end());
    case reduce_op::min:
      return *std::min_element(v.begin(), v.end());
    case reduce_op::prod:
      return std::accumulate(v.begin(), v.end(), 1.0, std::multiplies<>());
  }
  return 0;
}

// avg of small integers is not exact in the low-precision formats: one rounding of the result.
template <class T>
double tolerance(reduce_op op) {
  if (op != reduce_op::avg || !ts::is_floating_v<T>) return 0;
  if (std::is_same_v<T, double>) return 1e-15;
  if (std::is_same_v<T, float>) return 1e-7;
  return std::is_same_v<T, ts::float8_e4m3> || std::is_same_v<T, ts::float8_e5m2> ? 0.26 : 0.02;
}

/// small(i, rank) in a tensor of backend B.
template <class T, class B>
ts::Tensor<T, B> rank_values(const ts::Shape& shape, int rank) {
  ts::Tensor<T, ts::cpu> t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<T>(small(i, rank));
  if constexpr (std::is_same_v<B, ts::cpu>)
    return t;
  else
    return t.template to<B>();
}

/// The same values in a view that is not contiguous: the transpose of a [cols, rows] tensor.
template <class T, class B>
ts::Tensor<T, B> strided_values(int64_t rows, int64_t cols, int rank) {
  ts::Tensor<T, ts::cpu> base(ts::Shape{cols, rows});
  ts::Tensor<T, ts::cpu> view = base.transpose(0, 1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) view.at({i, j}) = static_cast<T>(small(i * cols + j, rank));
  if constexpr (std::is_same_v<B, ts::cpu>)
    return view;
  else
    return base.template to<B>().transpose(0, 1);
}

/// t's values in row-major order, as doubles.
template <class T, class B>
std::vector<double> host_values(const ts::Tensor<T, B>& t) {
  ts::Tensor<T, ts::cpu> h;
  if constexpr (std::is_same_v<B, ts::cpu>)
    h = t.contiguous();
  else
    h = t.template to<ts::cpu>().contiguous();
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i)
    v[static_cast<size_t>(i)] = static_cast<double>(h.data()[i]);
  return v;
}

/// all_reduce with every op, on sizes 0, 1, odd, a few thousand and a few hundred thousand,
/// and on a strided view.
template <class T, class B, class Group>
void check_all_reduce(const Group& g) {
  constexpr bool is_bool = std::is_same_v<T, bool>;
  constexpr bool is_integral = !ts::is_floating_v<T>;
  for (reduce_op op :
       {reduce_op::sum, reduce_op::avg, reduce_op::max, reduce_op::min, reduce_op::prod}) {
    if (is_bool && op == reduce_op::avg) {
      auto t = rank_values<T, B>(ts::Shape{3}, g.rank());
      EXPECT_THROW(g.all_reduce(t, op), ts::dist::dist_error);
      continue;
    }
    // 300007 values pass ProcessGroup's ring threshold (256 KiB) even as bytes.
    for (int64_t n : {0, 1, 7, 4099, 300007}) {
      auto t = rank_values<T, B>(ts::Shape{n}, g.rank());
      g.all_reduce(t, op);
      const auto got = host_values(t);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(got[static_cast<size_t>(i)], reduced(i, g.size(), op, is_bool, is_integral),
                    tolerance<T>(op))
            << "op " << ts::dist::reduce_op_name(op) << " n " << n << " at " << i;
    }
    // Not contiguous: the result lands in the view.
    auto v = strided_values<T, B>(5, 3, g.rank());
    g.all_reduce(v, op);
    const auto got = host_values(v);
    for (int64_t k = 0; k < 15; ++k)
      ASSERT_NEAR(got[static_cast<size_t>(k)], reduced(k, g.size(), op, is_bool, is_integral),
                  tolerance<T>(op));
  }
}

/// broadcast, all_gather into a stacked tensor from a strided view, reduce_scatter (max), and a
/// reduce_scatter (avg) into a strided output whose gaps stay untouched.
template <class T, class B, class Group>
void check_broadcast_gather_scatter(const Group& g) {
  constexpr bool is_bool = std::is_same_v<T, bool>;
  const int root = g.size() - 1;
  for (int64_t n : {0, 1, 1031}) {
    auto t = rank_values<T, B>(ts::Shape{n}, g.rank());
    g.broadcast(t, root);
    auto got = host_values(t);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<double>(static_cast<T>(small(i, root))));

    auto in = strided_values<T, B>(2, n, g.rank());  // [2, n], not contiguous
    auto out = ts::zeros<T, B>(ts::Shape{g.size(), 2, n});
    g.all_gather(out, in);
    got = host_values(out);
    for (int r = 0; r < g.size(); ++r)
      for (int64_t k = 0; k < 2 * n; ++k)
        ASSERT_EQ(got[static_cast<size_t>(r * 2 * n + k)],
                  static_cast<double>(static_cast<T>(small(k, r))));

    // reduce_scatter: rank q gets the reduction over ranks of their in[q].
    auto whole = rank_values<T, B>(ts::Shape{g.size(), n}, g.rank());
    auto part = ts::zeros<T, B>(ts::Shape{n});
    g.reduce_scatter(part, whole, reduce_op::max);
    got = host_values(part);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], reduced(g.rank() * n + i, g.size(), reduce_op::max,
                                                     is_bool, !ts::is_floating_v<T>));
  }
  if constexpr (!is_bool) {
    auto whole = rank_values<T, B>(ts::Shape{g.size(), 6}, g.rank());
    auto base = ts::zeros<T, B>(ts::Shape{6, 2});
    g.reduce_scatter(base.select(1, 1), whole, reduce_op::avg);  // every other element
    const auto got = host_values(base);
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(got[static_cast<size_t>(2 * i)], 0.0);
      EXPECT_NEAR(got[static_cast<size_t>(2 * i + 1)],
                  reduced(g.rank() * 6 + i, g.size(), reduce_op::avg, false, !ts::is_floating_v<T>),
                  tolerance<T>(reduce_op::avg));
    }
  }
}

}  // namespace collective_values
