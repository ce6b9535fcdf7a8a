// NcclGroup under mpiexec: every collective on CUDA tensors of every dtype, contiguous or not,
// sync and async; send/recv and the ring exchange; calls that disagree and a rank that aborts,
// each an error on every rank; DataParallel of a CUDA model against one process. CTest runs it with
// 2 and 3 ranks on the CUDA host emulation (tests/cuda_emu, whose nccl.h moves the bytes over MPI),
// and scripts/gpu_check.sh with one rank per GPU on a GPU machine. Skipped where no CUDA device is
// visible.
#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <tessera/dist/data_parallel.hpp>
#include <tessera/dist/nccl_group.hpp>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>
#include <vector>

#include "collective_values.hpp"
#include "mpi_gtest.hpp"

namespace ts = tessera;
using ts::dist::reduce_op;

namespace {

using collective_values::small;
using mpi_gtest::world;

bool have_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

// The group of the tests, made at first use; main frees it before the process's static objects
// (the CUDA runtime's among them) go.
std::unique_ptr<ts::dist::NcclGroup>& nccl_slot() {
  static std::unique_ptr<ts::dist::NcclGroup> g;
  return g;
}
ts::dist::NcclGroup& nccl() {
  auto& g = nccl_slot();
  if (!g) g = std::make_unique<ts::dist::NcclGroup>(world());
  return *g;
}

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

template <class T>
ts::Tensor<T, ts::cuda> rank_values(const ts::Shape& shape, int rank) {
  return collective_values::rank_values<T, ts::cuda>(shape, rank);
}
template <class T>
ts::Tensor<T, ts::cuda> strided_values(int64_t rows, int64_t cols, int rank) {
  return collective_values::strided_values<T, ts::cuda>(rows, cols, rank);
}
using collective_values::host_values;

template <class T>
class NcclCollectives : public Nccl {};
using collective_values::AllTypes;
TYPED_TEST_SUITE(NcclCollectives, AllTypes);

TYPED_TEST(NcclCollectives, AllReduceEveryOpAndLayout) {
  collective_values::check_all_reduce<TypeParam, ts::cuda>(nccl());
}

TYPED_TEST(NcclCollectives, BroadcastAllGatherReduceScatter) {
  collective_values::check_broadcast_gather_scatter<TypeParam, ts::cuda>(nccl());
}

TYPED_TEST(NcclCollectives, SendRecvRing) {
  using T = TypeParam;
  auto& g = nccl();
  const int next = (g.rank() + 1) % g.size(), prev = (g.rank() + g.size() - 1) % g.size();
  auto mine = strided_values<T>(4, 3, g.rank());
  auto got = ts::zeros<T, ts::cuda>(ts::Shape{4, 3});
  g.send_recv_async(mine, next, got, prev, 5).wait();
  const auto v = host_values(got);
  for (int64_t k = 0; k < 12; ++k)
    ASSERT_EQ(v[static_cast<size_t>(k)], static_cast<double>(static_cast<T>(small(k, prev))));
}

TEST_F(Nccl, SendThenRecvBetweenTwoRanks) {
  auto& g = nccl();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks";
  if (g.rank() == 0) g.send(rank_values<int32_t>(ts::Shape{257}, 7), 1, 3);
  if (g.rank() == 1) {
    auto got = ts::full<int32_t, ts::cuda>(ts::Shape{257}, -1);
    g.recv(got, 0, 3);
    const auto v = host_values(got);
    for (int64_t i = 0; i < 257; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], small(i, 7));
  }
  g.barrier();
}

TEST_F(Nccl, AsyncWorksCompleteInAnyOrder) {
  auto& g = nccl();
  std::vector<ts::Tensor<float, ts::cuda>> ts_;
  std::vector<ts::dist::Work> works;
  for (int k = 0; k < 6; ++k) {
    ts_.push_back(ts::full<float, ts::cuda>(ts::Shape{1000 + k}, static_cast<float>(g.rank() + k)));
    works.push_back(g.all_reduce_async(ts_.back()));
  }
  works.back().wait();
  EXPECT_TRUE(works.back().is_completed());
  for (auto& w : works)
    while (!w.test()) std::this_thread::yield();
  const float ranks = static_cast<float>(g.size() * (g.size() - 1)) / 2.0f;
  for (int k = 0; k < 6; ++k)
    EXPECT_EQ(host_values(ts_[static_cast<size_t>(k)])[999],
              ranks + static_cast<float>(g.size() * k));
  // An op on the same stream after an async collective sees its result without a wait.
  auto t = ts::full<float, ts::cuda>(ts::Shape{3}, 1.0f);
  auto w = g.all_reduce_async(t);
  auto doubled = t * 2.0f;
  EXPECT_EQ(host_values(doubled)[2], 2.0 * g.size());
  w.wait();
  g.barrier();
}

TEST_F(Nccl, RanksThatDisagreeAllGetAnError) {
  auto& g = nccl();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks";
  auto t = ts::zeros<float, ts::cuda>(ts::Shape{g.rank() == g.size() - 1 ? 5 : 4});
  try {
    g.all_reduce(t);
    FAIL() << "no error";
  } catch (const ts::dist::dist_error& e) {
    EXPECT_NE(std::string(e.what()).find("float32 [5]"), std::string::npos) << e.what();
  }
  // Nothing moved: the group still works.
  auto d = ts::ones<double, ts::cuda>(ts::Shape{4});
  g.all_reduce(d);
  EXPECT_EQ(host_values(d)[3], static_cast<double>(g.size()));
  // A receive whose tensor does not match what was sent: an error on the receiver, and the
  // sender's send still completes.
  const int last = g.size() - 1;
  if (g.rank() == 0) g.send(ts::ones<float, ts::cuda>(ts::Shape{3}), last, 9);
  if (g.rank() == last) {
    auto wrong = ts::zeros<float, ts::cuda>(ts::Shape{2, 2});
    try {
      g.recv(wrong, 0, 9);
      FAIL() << "no error";
    } catch (const ts::dist::dist_error& e) {
      EXPECT_NE(std::string(e.what()).find("float32 [3]"), std::string::npos) << e.what();
    }
    EXPECT_EQ(host_values(wrong)[0], 0.0);
  }
  g.all_reduce(d);
  EXPECT_EQ(host_values(d)[0], static_cast<double>(g.size() * g.size()));
}

TEST_F(Nccl, BadArgumentsAreRefusedLocally) {
  auto& g = nccl();
  auto t = ts::zeros<float, ts::cuda>(ts::Shape{4});
  EXPECT_THROW(g.broadcast(t, g.size()), ts::index_error);
  EXPECT_THROW(g.send(t, -1), ts::index_error);
  EXPECT_THROW(g.send(t, 0, 1 << 20), ts::index_error);
  auto out = ts::zeros<float, ts::cuda>(ts::Shape{g.size() + 1, 4});
  EXPECT_THROW(g.all_gather(out, t), ts::shape_error);
  EXPECT_THROW(g.all_reduce(ts::Tensor<float, ts::cuda>()), ts::error);
}

ts::nn::Sequential<double, ts::cuda> small_mlp() {
  return ts::nn::Sequential<double, ts::cuda>{ts::nn::Linear<double, ts::cuda>(5, 7),
                                              ts::nn::ReLU<double, ts::cuda>(),
                                              ts::nn::Linear<double, ts::cuda>(7, 3)};
}

// One process on the global batch (every rank computes it) against DataParallel over NCCL on
// shards, with buckets of one parameter and of several, over three SGD steps with momentum.
TEST_F(Nccl, DataParallelMatchesOneProcessOnTheGlobalBatch) {
  auto& g = nccl();
  for (int64_t bucket_bytes : {int64_t{1}, int64_t{250}}) {
    const int64_t local = 4, global = local * g.size();
    ts::Generator gen(7);
    auto x = ts::randn<double, ts::cpu>(ts::Shape{global, 5}, gen).to<ts::cuda>();
    auto y = ts::randn<double, ts::cpu>(ts::Shape{global, 3}, gen).to<ts::cuda>();
    auto single = small_mlp(), model = small_mlp();
    auto ps = single.parameters(), pd = model.parameters();
    for (size_t i = 0; i < ps.size(); ++i)  // DataParallel must replace these by rank 0's
      pd[i].value().copy_(g.rank() == 0 ? ps[i].value() : ps[i].value() * double(g.rank() + 1));
    ts::dist::DataParallel dp(model, g, bucket_bytes);
    ts::optim::SGD opt_single(single.parameters(), {.lr = 0.1, .momentum = 0.9});
    ts::optim::SGD opt_dp(model.parameters(), {.lr = 0.1, .momentum = 0.9});
    const auto xs = x.slice(0, g.rank() * local, (g.rank() + 1) * local);
    const auto ys = y.slice(0, g.rank() * local, (g.rank() + 1) * local);
    for (int step = 0; step < 3; ++step) {
      single.zero_grad();
      ts::mse_loss(single(x), ts::Variable<double, ts::cuda>(y)).backward();
      model.zero_grad();
      ts::mse_loss(dp(xs), ts::Variable<double, ts::cuda>(ys)).backward();
      for (size_t i = 0; i < ps.size(); ++i) {
        const auto a = host_values(ps[i].grad()), b = host_values(pd[i].grad());
        for (size_t k = 0; k < a.size(); ++k)
          ASSERT_NEAR(a[k], b[k], 1e-12) << "step " << step << " param " << i << " at " << k;
      }
      opt_single.step();
      opt_dp.step();
    }
    for (size_t i = 0; i < ps.size(); ++i) {
      const auto a = host_values(ps[i].value()), b = host_values(pd[i].value());
      for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-11);
    }
  }
}

// A rank that fails mid-step tells the others; their pending NCCL operation stops with an error
// naming it, instead of waiting for the peer forever.
TEST_F(Nccl, AbortReachesEveryRank) {
  if (world().size() < 2) GTEST_SKIP() << "needs two ranks";
  ts::dist::options opts;
  opts.timeout = std::chrono::seconds(20);
  ts::dist::ProcessGroup pg(MPI_COMM_WORLD, opts);
  ts::dist::NcclGroup g(pg);
  const int failing = g.size() - 1;
  auto t = ts::ones<float, ts::cuda>(ts::Shape{8});
  const auto start = std::chrono::steady_clock::now();
  if (g.rank() == failing) {
    g.abort("out of memory in step 3");
    EXPECT_THROW(g.all_reduce(t), ts::dist::dist_error);  // broken here too
  } else {
    try {
      // Without the call check, so that the NCCL operation itself is what waits for the peer.
      g.all_reduce_async(t, reduce_op::sum, /*check_call=*/false).wait();
      FAIL() << "no error";
    } catch (const ts::dist::dist_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank " + std::to_string(failing) + " aborted"), std::string::npos)
          << what;
      EXPECT_NE(what.find("out of memory in step 3"), std::string::npos) << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_THROW(g.barrier(), ts::dist::dist_error);  // the group stays broken
  }
  world().barrier();
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = mpi_gtest::run_all_tests(argc, argv);
  nccl_slot().reset();
  return rc;
}
