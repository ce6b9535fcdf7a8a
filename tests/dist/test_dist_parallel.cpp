// Tensor-parallel linear layers (dist/parallel_linear.hpp) under mpiexec with 2 and 3 ranks: a
// ColumnParallelLinear, ReLU, RowParallelLinear block against the whole layers in one process,
// forward and backward (float64: within 1e-12), the gathered column output, initialization from
// rank 0, and bad input.
#include <cmath>
#include <tessera/dist.hpp>
#include <tessera/dist/parallel_linear.hpp>
#include <tessera/nn.hpp>
#include <vector>

#include "mpi_gtest.hpp"

namespace ts = tessera;
namespace nn = ts::nn;

namespace {

using mpi_gtest::world;
using V = ts::Variable<double, ts::cpu>;
using T = ts::Tensor<double, ts::cpu>;

double max_abs_diff(const T& a, const T& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = a.contiguous(), y = b.contiguous();
  double m = 0;
  for (int64_t i = 0; i < x.numel() && i < y.numel(); ++i)
    m = std::max(m, std::abs(x.data()[i] - y.data()[i]));
  return m;
}

/// The largest of every rank's v.
double world_max(double v) {
  auto t = ts::full<double, ts::cpu>({1}, v);
  world().all_reduce(t, ts::dist::reduce_op::max);
  return t.data()[0];
}

TEST(ParallelLinear, ColumnReluRowEqualsTheWholeLayers) {
  auto& pg = world();
  const int64_t p = pg.size(), in = 5, hidden = 4 * p, out = 3;
  nn::manual_seed(7);  // the same whole layers on every rank
  nn::Linear<double, ts::cpu> up(in, hidden), down(hidden, out);
  ts::dist::ColumnParallelLinear<double, ts::cpu> col(up, pg);
  ts::dist::RowParallelLinear<double, ts::cpu> row(down, pg);
  EXPECT_EQ(col.weight.value().shape(), ts::Shape({hidden / p, in}));
  EXPECT_EQ(row.weight.value().shape(), ts::Shape({out, hidden / p}));

  ts::Generator g(3);  // the same input on every rank
  const T x0 = ts::randn<double, ts::cpu>({2, 6, in}, g);
  V x(x0.clone(), true), xw(x0.clone(), true);
  V y = row(ts::relu(col(x)));
  V want = down(ts::relu(up(xw)));
  EXPECT_LE(world_max(max_abs_diff(y.value(), want.value())), 1e-12);

  // Gradients: x's whole gradient, and each rank's slices of the whole layers' gradients.
  ts::sum(y * y).backward();
  ts::sum(want * want).backward();
  EXPECT_LE(world_max(max_abs_diff(x.grad(), xw.grad())), 1e-12);
  const int64_t b = pg.rank() * hidden / p, e = (pg.rank() + 1) * hidden / p;
  EXPECT_LE(world_max(max_abs_diff(col.weight.grad(), up.weight.grad().slice(0, b, e))), 1e-12);
  EXPECT_LE(world_max(max_abs_diff(col.bias.grad(), up.bias.grad().slice(0, b, e))), 1e-12);
  EXPECT_LE(world_max(max_abs_diff(row.weight.grad(), down.weight.grad().slice(1, b, e))), 1e-12);
  EXPECT_LE(world_max(max_abs_diff(row.bias.grad(), down.bias.grad())), 1e-12);
}

TEST(ParallelLinear, GatheredColumnOutputAndItsGradient) {
  auto& pg = world();
  const int64_t p = pg.size();
  nn::manual_seed(8);
  nn::Linear<double, ts::cpu> whole(4, 2 * p);
  ts::dist::ColumnParallelLinear<double, ts::cpu> col(whole, pg, /*gather=*/true);
  ts::Generator g(4);
  const T x0 = ts::randn<double, ts::cpu>({3, 4}, g);
  V x(x0.clone(), true), xw(x0.clone(), true);
  V y = col(x), want = whole(xw);
  ASSERT_EQ(y.value().shape(), ts::Shape({3, 2 * p}));
  EXPECT_LE(world_max(max_abs_diff(y.value(), want.value())), 1e-12);
  // A weighted sum, so that every output feature's gradient differs.
  const T weights = ts::arange<double, ts::cpu>(2 * p) + 1.0;
  ts::sum(y * V(weights)).backward();
  ts::sum(want * V(weights)).backward();
  EXPECT_LE(world_max(max_abs_diff(x.grad(), xw.grad())), 1e-12);
}

TEST(ParallelLinear, InitializedFromRankZero) {
  auto& pg = world();
  const int64_t p = pg.size();
  nn::manual_seed(pg.rank() == 0 ? 11 : 100 + static_cast<uint64_t>(pg.rank()));
  ts::dist::ColumnParallelLinear<double, ts::cpu> col(6, 2 * p, pg, true, /*gather=*/true);
  nn::manual_seed(11);  // rank 0's first draw, on every rank
  nn::Linear<double, ts::cpu> want(6, 2 * p);
  ts::Generator g(5);
  const T x = ts::randn<double, ts::cpu>({2, 6}, g);
  EXPECT_LE(world_max(max_abs_diff(col(x).value(), want(x).value())), 1e-12);
}

TEST(ParallelLinear, BadInput) {
  auto& pg = world();
  nn::Linear<double, ts::cpu> odd(4, 2 * pg.size() + 1);
  EXPECT_THROW((ts::dist::ColumnParallelLinear<double, ts::cpu>(odd, pg)), ts::shape_error);
  nn::Linear<double, ts::cpu> odd_in(2 * pg.size() + 1, 3);
  EXPECT_THROW((ts::dist::RowParallelLinear<double, ts::cpu>(odd_in, pg)), ts::shape_error);
  nn::Linear<double, ts::cpu> whole(2 * pg.size(), 3);
  ts::dist::RowParallelLinear<double, ts::cpu> row(whole, pg);
  EXPECT_THROW((void)row(ts::zeros<double, ts::cpu>({2, 3})), ts::shape_error);
}

}  // namespace

int main(int argc, char** argv) { return mpi_gtest::run_all_tests(argc, argv); }
