// The distributed layer under mpiexec (CTest runs it with 2 and 3 ranks): every collective on
// every dtype, contiguous or not, sync and async; calls that disagree, a rank that aborts and a
// timeout, each an error on every rank; DataParallel against one process training on the global
// batch; no_sync; sharded batches.
#include <cmath>
#include <numeric>
#include <string>
#include <tessera/data/dataset.hpp>
#include <tessera/dist.hpp>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>
#include <thread>
#include <tuple>
#include <vector>

#include "collective_values.hpp"
#include "mpi_gtest.hpp"

namespace ts = tessera;
using ts::dist::reduce_op;

namespace {

using collective_values::small;
using mpi_gtest::world;

template <class T>
ts::Tensor<T, ts::cpu> rank_values(const ts::Shape& shape, int rank) {
  return collective_values::rank_values<T, ts::cpu>(shape, rank);
}
template <class T>
ts::Tensor<T, ts::cpu> strided_values(int64_t rows, int64_t cols, int rank) {
  return collective_values::strided_values<T, ts::cpu>(rows, cols, rank);
}

template <class T>
class Collectives : public ::testing::Test {};
using collective_values::AllTypes;
TYPED_TEST_SUITE(Collectives, AllTypes);

TYPED_TEST(Collectives, AllReduceEveryOpAndLayout) {
  collective_values::check_all_reduce<TypeParam, ts::cpu>(world());
}

TYPED_TEST(Collectives, BroadcastAllGatherReduceScatter) {
  collective_values::check_broadcast_gather_scatter<TypeParam, ts::cpu>(world());
}

TYPED_TEST(Collectives, SendRecvRing) {
  using T = TypeParam;
  auto& pg = world();
  const int next = (pg.rank() + 1) % pg.size(), prev = (pg.rank() + pg.size() - 1) % pg.size();
  auto mine = strided_values<T>(4, 3, pg.rank());
  ts::Tensor<T, ts::cpu> got = ts::zeros<T, ts::cpu>(ts::Shape{4, 3});
  auto r = pg.recv_async(got, prev, 5);
  auto s = pg.send_async(mine, next, 5);
  r.wait();
  s.wait();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      ASSERT_EQ(static_cast<double>(got.at({i, j})),
                static_cast<double>(static_cast<T>(small(i * 3 + j, prev))));
}

TEST(Dist, AsyncWorksCompleteInAnyOrder) {
  auto& pg = world();
  std::vector<ts::Tensor<float, ts::cpu>> ts_;
  std::vector<ts::dist::Work> works;
  // Small ones (one MPI_Iallreduce) and large ones (rings of messages) in flight together.
  for (int k = 0; k < 6; ++k) {
    const int64_t n = 1000 + k + (k % 2) * 300000;
    ts_.push_back(ts::full<float, ts::cpu>(ts::Shape{n}, static_cast<float>(pg.rank() + k)));
    works.push_back(pg.all_reduce_async(ts_.back()));
  }
  // Waited for last first; test() polls the rest to completion.
  works.back().wait();
  EXPECT_TRUE(works.back().is_completed());
  for (auto& w : works)
    while (!w.test()) std::this_thread::yield();
  const float ranks = pg.size() * (pg.size() - 1) / 2.0f;
  for (int k = 0; k < 6; ++k)
    EXPECT_EQ(ts_[static_cast<size_t>(k)].data()[999], ranks + static_cast<float>(pg.size() * k));
  pg.barrier();
}

// The ring all-reduce (large tensors) reduces each chunk once and sends the result on: every
// rank gets the same bits, the sum to float rounding.
TEST(Dist, LargeAllReduceGivesEveryRankTheSameBits) {
  auto& pg = world();
  for (int64_t n : {int64_t{1025}, int64_t{100003}, int64_t{1} << 20}) {
    ts::Generator gen(static_cast<uint64_t>(100 + pg.rank()));
    auto t = ts::randn<float, ts::cpu>(ts::Shape{n}, gen);
    auto all = ts::empty<float, ts::cpu>(ts::Shape{pg.size(), n});
    pg.all_gather(all, t);
    std::vector<double> want(static_cast<size_t>(n), 0.0);
    for (int r = 0; r < pg.size(); ++r)
      for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] += all.data()[r * n + i];
    pg.all_reduce(t);
    pg.all_gather(all, t);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(t.data()[i], want[static_cast<size_t>(i)], 1e-5) << "n " << n << " at " << i;
      for (int r = 0; r < pg.size(); ++r)
        ASSERT_EQ(all.data()[r * n + i], t.data()[i]) << "rank " << r << " n " << n;
    }
  }
}

TEST(Dist, RanksThatDisagreeAllGetAnError) {
  auto& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  // Shapes differ on the last rank.
  auto t = ts::zeros<float, ts::cpu>(ts::Shape{pg.rank() == pg.size() - 1 ? 5 : 4});
  try {
    pg.all_reduce(t);
    FAIL() << "no error";
  } catch (const ts::dist::dist_error& e) {
    EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float32 [5]"), std::string::npos) << e.what();
  }
  // dtypes differ; then a different collective altogether.
  auto d = ts::zeros<double, ts::cpu>(ts::Shape{4});
  EXPECT_THROW(pg.rank() == 0 ? pg.all_reduce(d) : pg.all_reduce(t.slice(0, 0, 4)),
               ts::dist::dist_error);
  EXPECT_THROW(pg.rank() == 0 ? pg.broadcast(d, 0) : pg.all_reduce(d), ts::dist::dist_error);
  // Every rank threw before any data moved, so the group still works.
  pg.all_reduce(d);
  // A receive whose tensor does not match what was sent.
  const int last = pg.size() - 1;
  if (pg.rank() == 0) pg.send(ts::zeros<float, ts::cpu>(ts::Shape{3}), last, 9);
  if (pg.rank() == last) {
    auto wrong = ts::zeros<float, ts::cpu>(ts::Shape{2, 2});
    try {
      pg.recv(wrong, 0, 9);
      FAIL() << "no error";
    } catch (const ts::dist::dist_error& e) {
      EXPECT_NE(std::string(e.what()).find("float32 [3]"), std::string::npos) << e.what();
    }
  }
  pg.barrier();
}

TEST(Dist, BadArgumentsAreRefusedLocally) {
  auto& pg = world();
  auto t = ts::zeros<float, ts::cpu>(ts::Shape{4});
  EXPECT_THROW(pg.broadcast(t, pg.size()), ts::index_error);
  EXPECT_THROW(pg.send(t, -1), ts::index_error);
  EXPECT_THROW(pg.send(t, 0, 1 << 20), ts::index_error);
  ts::Tensor<float, ts::cpu> out(ts::Shape{pg.size() + 1, 4});
  EXPECT_THROW(pg.all_gather(out, t), ts::shape_error);
  EXPECT_THROW(pg.all_reduce(ts::Tensor<float, ts::cpu>()), ts::error);
}

void check_abort_reaches_every_rank(int64_t n) {
  ts::dist::options opts;
  opts.timeout = std::chrono::seconds(20);
  ts::dist::ProcessGroup pg(MPI_COMM_WORLD, opts);
  const int failing = pg.size() - 1;
  auto t = ts::ones<float, ts::cpu>(ts::Shape{n});
  const auto start = std::chrono::steady_clock::now();
  if (pg.rank() == failing) {
    try {
      throw std::runtime_error("out of memory in step 3");
    } catch (const std::exception& e) {
      pg.abort(e.what());
    }
    EXPECT_THROW(pg.all_reduce(t), ts::dist::dist_error);  // broken here too
  } else {
    try {
      // Without the call check, so that the collective itself is what waits for the peer.
      pg.all_reduce_async(t, ts::dist::reduce_op::sum, /*check_call=*/false).wait();
      FAIL() << "no error";
    } catch (const ts::dist::dist_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank " + std::to_string(failing) + " aborted"), std::string::npos)
          << what;
      EXPECT_NE(what.find("out of memory in step 3"), std::string::npos) << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_THROW(pg.barrier(), ts::dist::dist_error);  // the group stays broken
  }
  world().barrier();
}

// A rank that fails mid-step tells the others, which get an error at once instead of hanging.
TEST(Dist, AbortReachesEveryRank) {
  if (world().size() < 2) GTEST_SKIP() << "needs two ranks";
  // 8 values: one MPI_Iallreduce; 2^16: a ring of messages (ring_all_reduce.hpp).
  for (int64_t n : {int64_t{8}, int64_t{1} << 16}) check_abort_reaches_every_rank(n);
}

TEST(Dist, SilentRankTimesOut) {
  if (world().size() < 2) GTEST_SKIP() << "needs two ranks";
  ts::dist::options opts;
  opts.timeout = std::chrono::milliseconds(300);
  opts.check_calls = false;
  // 8 values: one MPI_Iallreduce; 2^16: a ring of messages.
  for (int64_t n : {int64_t{8}, int64_t{1} << 16}) {
    ts::dist::ProcessGroup pg(MPI_COMM_WORLD, opts);
    if (pg.rank() == 0) {
      auto t = ts::ones<float, ts::cpu>(ts::Shape{n});
      try {
        pg.all_reduce(t);
        FAIL() << "no error";
      } catch (const ts::dist::dist_error& e) {
        EXPECT_NE(std::string(e.what()).find("timeout"), std::string::npos) << e.what();
      }
    }
    world().barrier();
  }
}

// ---- DataParallel ----

template <class T>
ts::nn::Sequential<T, ts::cpu> small_mlp() {
  return ts::nn::Sequential<T, ts::cpu>{ts::nn::Linear<T, ts::cpu>(5, 7),
                                        ts::nn::ReLU<T, ts::cpu>(),
                                        ts::nn::Linear<T, ts::cpu>(7, 3)};
}

template <class T>
void copy_params(const ts::nn::Sequential<T, ts::cpu>& from, ts::nn::Sequential<T, ts::cpu>& to) {
  auto a = from.parameters(), b = to.parameters();
  for (size_t i = 0; i < a.size(); ++i) b[i].value().copy_(a[i].value());
}

// One process on the global batch (every rank computes it) against DataParallel on shards, with
// bucket sizes that group the parameters differently, over three SGD steps.
template <class T>
void check_data_parallel(int64_t bucket_bytes, double tol) {
  auto& pg = world();
  const int64_t local = 4, global = local * pg.size();
  ts::Generator gen(7);
  auto x = ts::randn<T, ts::cpu>(ts::Shape{global, 5}, gen);
  auto y = ts::randn<T, ts::cpu>(ts::Shape{global, 3}, gen);
  auto single = small_mlp<T>();
  auto model = small_mlp<T>();
  copy_params(single, model);
  if (pg.rank() != 0)  // DataParallel must replace these by rank 0's values
    for (auto& p : model.parameters()) p.value().fill_(T(pg.rank()));
  ts::dist::DataParallel dp(model, pg, bucket_bytes);
  ts::optim::SGD opt_single(single.parameters(), {.lr = 0.1, .momentum = 0.9});
  ts::optim::SGD opt_dp(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  const auto xs = x.slice(0, pg.rank() * local, (pg.rank() + 1) * local);
  const auto ys = y.slice(0, pg.rank() * local, (pg.rank() + 1) * local);
  for (int step = 0; step < 3; ++step) {
    single.zero_grad();
    ts::mse_loss(single(x), ts::Variable<T, ts::cpu>(y)).backward();
    model.zero_grad();
    ts::mse_loss(dp(xs), ts::Variable<T, ts::cpu>(ys)).backward();
    auto ps = single.parameters(), pd = model.parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      const T* a = ps[i].grad().data();
      const T* b = pd[i].grad().data();
      for (int64_t k = 0; k < ps[i].numel(); ++k)
        ASSERT_NEAR(a[k], b[k], tol) << "step " << step << " param " << i << " at " << k;
    }
    opt_single.step();
    opt_dp.step();
  }
  auto ps = single.parameters(), pd = model.parameters();
  for (size_t i = 0; i < ps.size(); ++i)
    for (int64_t k = 0; k < ps[i].numel(); ++k)
      ASSERT_NEAR(ps[i].value().data()[k], pd[i].value().data()[k], 10 * tol);
}

TEST(DataParallel, MatchesOneProcessOnTheGlobalBatch) {
  // 25 MiB: one bucket; 1 byte: one per parameter; 250 bytes: "2.bias", "2.weight" and
  // "0.bias" together (248 B), then "0.weight".
  for (int64_t bytes :
       {ts::dist::DataParallel<ts::nn::Sequential<double, ts::cpu>>::default_bucket_bytes,
        int64_t{1}, int64_t{250}})
    check_data_parallel<double>(bytes, 1e-12);
  check_data_parallel<float>(200, 1e-5);
}

TEST(DataParallel, BucketsFollowReverseRegistrationOrder) {
  auto model = small_mlp<double>();
  ts::dist::DataParallel dp(model, world(), 200);
  // 2.bias (24 B) + 2.weight (168 B) fit 200 B; 0.bias (56 B) would pass it, and so would
  // 0.weight (280 B) joining 0.bias.
  const auto layout = dp.bucket_layout();
  ASSERT_EQ(layout.size(), 3u);
  EXPECT_EQ(layout[0], (std::vector<std::string>{"2.bias", "2.weight"}));
  EXPECT_EQ(layout[1], (std::vector<std::string>{"0.bias"}));
  EXPECT_EQ(layout[2], (std::vector<std::string>{"0.weight"}));
}

TEST(DataParallel, NoSyncAccumulatesLocally) {
  auto& pg = world();
  const int64_t local = 2, global = local * pg.size();
  ts::Generator gen(11);
  std::vector<ts::Tensor<double, ts::cpu>> xs, ys;
  for (int k = 0; k < 2; ++k) {
    xs.push_back(ts::randn<double, ts::cpu>(ts::Shape{global, 5}, gen));
    ys.push_back(ts::randn<double, ts::cpu>(ts::Shape{global, 3}, gen));
  }
  auto single = small_mlp<double>();
  auto model = small_mlp<double>();
  copy_params(single, model);
  ts::dist::DataParallel dp(model, pg, 100);
  for (int k = 0; k < 2; ++k)
    ts::mse_loss(single(xs[static_cast<size_t>(k)]),
                 ts::Variable<double, ts::cpu>(ys[static_cast<size_t>(k)]))
        .backward();
  auto shard = [&](const ts::Tensor<double, ts::cpu>& t) {
    return t.slice(0, pg.rank() * local, (pg.rank() + 1) * local);
  };
  {
    auto guard = dp.no_sync();
    ts::mse_loss(dp(shard(xs[0])), ts::Variable<double, ts::cpu>(shard(ys[0]))).backward();
  }
  ts::mse_loss(dp(shard(xs[1])), ts::Variable<double, ts::cpu>(shard(ys[1]))).backward();
  auto ps = single.parameters(), pd = model.parameters();
  for (size_t i = 0; i < ps.size(); ++i)
    for (int64_t k = 0; k < ps[i].numel(); ++k)
      ASSERT_NEAR(ps[i].grad().data()[k], pd[i].grad().data()[k], 1e-12);
}

TEST(DataParallel, UnusedParameterGetsAZeroGradient) {
  auto& pg = world();
  ts::nn::Linear<double, ts::cpu> used(3, 2), unused(3, 2);
  // The unused layer joins the same DataParallel through a Sequential that never runs it.
  ts::nn::Sequential<double, ts::cpu> both{used, unused};
  ts::dist::DataParallel dp(both, pg, 1);
  auto x = ts::ones<double, ts::cpu>(ts::Shape{2, 3});
  ts::sum(used(x)).backward();
  ASSERT_TRUE(unused.weight.grad().defined());
  for (int64_t k = 0; k < unused.weight.numel(); ++k)
    EXPECT_EQ(unused.weight.grad().data()[k], 0.0);
  for (int64_t k = 0; k < used.bias.numel(); ++k) EXPECT_EQ(used.bias.grad().data()[k], 2.0);
}

TEST(DataParallel, DifferentModelsAreRefused) {
  auto& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  ts::nn::Linear<double, ts::cpu> layer(3, pg.rank() == 0 ? 2 : 4);
  EXPECT_THROW(ts::dist::DataParallel(layer, pg), ts::dist::dist_error);
}

TEST(DataParallel, FailingRankStopsTheOthersInBackward) {
  if (world().size() < 2) GTEST_SKIP() << "needs two ranks";
  ts::dist::options opts;
  opts.timeout = std::chrono::seconds(20);
  ts::dist::ProcessGroup pg(MPI_COMM_WORLD, opts);
  auto model = small_mlp<double>();
  ts::dist::DataParallel dp(model, pg);
  // Every rank's construction has completed before the failure (an abort notice that arrived
  // earlier would fail the construction's broadcast instead).
  world().barrier();
  auto x = ts::ones<double, ts::cpu>(ts::Shape{2, 5});
  if (pg.rank() == pg.size() - 1) {
    pg.abort("data loader failed");
  } else {
    auto loss = ts::sum(dp(x));
    try {
      loss.backward();
      FAIL() << "no error";
    } catch (const ts::dist::dist_error& e) {
      EXPECT_NE(std::string(e.what()).find("data loader failed"), std::string::npos) << e.what();
    }
  }
  world().barrier();
}

// ---- sharded batches ----

TEST(Shard, RanksSplitEachGlobalBatch) {
  for (int64_t n : {0, 1, 10, 23, 24}) {
    for (int64_t count : {1, 2, 3}) {
      for (bool drop_last : {false, true}) {
        ts::data::Dataset ds{ts::arange<float, ts::cpu>(n).reshape({n, 1}),
                             ts::arange<int64_t, ts::cpu>(n)};
        ts::Generator single_rng(3);
        auto global = ts::data::batches(ds, 4 * count, single_rng, true, drop_last).order();
        std::vector<std::vector<int64_t>> seen(static_cast<size_t>(count));
        int64_t batches = -1;
        for (int64_t r = 0; r < count; ++r) {
          ts::Generator rng(3);
          auto range = ts::data::batches(ds, 4, rng, ts::data::shard{r, count}, true, drop_last);
          if (batches >= 0) {
            EXPECT_EQ(range.size(), batches) << "every rank has as many batches";
          }
          batches = range.size();
          for (auto [images, labels] : range)
            for (int64_t i = 0; i < labels.numel(); ++i)
              seen[static_cast<size_t>(r)].push_back(labels.data()[i]);
        }
        // Without padding, the union of the ranks' k-th batches is the k-th global batch.
        std::vector<int64_t> all;
        for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
        const int64_t want =
            drop_last ? n / (4 * count) * 4 * count : (n + count - 1) / count * count;
        EXPECT_EQ(static_cast<int64_t>(all.size()), want) << "n " << n << " count " << count;
        if (n % count == 0 || drop_last) {
          std::vector<int64_t> a = all, g(global.begin(), global.begin() + want);
          std::sort(a.begin(), a.end());
          std::sort(g.begin(), g.end());
          EXPECT_EQ(a, g) << "n " << n << " count " << count;
        }
      }
    }
  }
  EXPECT_EQ(world().shard().rank, world().rank());
  EXPECT_EQ(world().shard().count, world().size());
  ts::Generator rng(1);
  ts::data::Dataset ds{ts::zeros<float, ts::cpu>(ts::Shape{4, 1}),
                       ts::zeros<int64_t, ts::cpu>(ts::Shape{4})};
  EXPECT_THROW(ts::data::batches(ds, 2, rng, ts::data::shard{2, 2}), ts::index_error);
}

}  // namespace

int main(int argc, char** argv) { return mpi_gtest::run_all_tests(argc, argv); }
