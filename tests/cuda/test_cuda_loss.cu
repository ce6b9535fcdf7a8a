// Tests of softmax, log_softmax and the classification losses (cross_entropy, nll_loss and their
// backward functions) on CUDA tensors, against the CPU backend on the same inputs. On the device
// cross_entropy's forward pass is one block (small problems, rows in double as the CPU) or
// composed from map and reductions, and so are the rest, so results agree to rounding, not bit
// for bit. Every test skips, with a message, when no CUDA
// device is visible.
#include <limits>

#include "cuda_test_util.cuh"

namespace {
using namespace cuda_test;

template <class T>
class CudaSoftmax : public CudaFixture {};
using SoftmaxDtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CudaSoftmax, SoftmaxDtypes);

TYPED_TEST(CudaSoftmax, SoftmaxAndLogSoftmaxAlongEveryDim) {
  using T = TypeParam;
  const double tol = 4 * ulps2<T>();
  auto x = sample<T>({5, 7, 33}, 1);
  x = x * T(8);  // wide range: the shift by the maximum matters
  for (int64_t dim : {0, 1, 2, -1}) {
    const std::string d = " dim " + std::to_string(dim);
    expect_same(
        "softmax" + d, tol, 1e-30, [&](const auto& a) { return ts::softmax(a, dim); }, x);
    expect_same(
        "log_softmax" + d, tol, tol, [&](const auto& a) { return ts::log_softmax(a, dim); }, x);
  }
}

class CudaLoss : public CudaFixture {};

/// Labels in [0, c), with every fifth sample set to ignore when `ignore` is set.
HostT<int64_t> labels_for(int64_t n, int64_t c, uint64_t seed, int64_t ignore = 0) {
  ts::Generator g(seed);
  auto l = ts::randint<int64_t, ts::cpu>(0, c, {n}, g);
  if (ignore)
    for (int64_t i = 0; i < n; i += 5) l.data()[i] = ignore;
  return l;
}

/// cross_entropy and its backward on the device against the CPU, for every reduction, with and
/// without label smoothing and an ignored label (all_options; else only some); `launches` is how
/// many the forward pass should take (1 when fused, without a wait), 0 to not check.
template <class T>
void expect_cross_entropy_matches_cpu(int64_t n, int64_t c, bool all_options, int64_t launches) {
  const auto x = sample<T>({n, c}, 10) * T(3);
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (const ts::Reduction r : {ts::Reduction::none, ts::Reduction::mean, ts::Reduction::sum})
    for (double smoothing : {0.0, 0.1})
      for (int64_t ignore : {int64_t{-100}, int64_t{3}}) {
        if (!all_options && (r == ts::Reduction::sum || smoothing == 0.0 || ignore != 3)) continue;
        const ts::CrossEntropyOptions o{r, smoothing, ignore};
        const auto l = labels_for(n, c, 11, ignore == 3 ? 3 : 0);
        const std::string what = "cross_entropy " + std::to_string(n) + "x" + std::to_string(c) +
                                 " reduction " + std::to_string(int(r)) + " smoothing " +
                                 std::to_string(smoothing) + " ignore " + std::to_string(ignore);
        const auto want = ts::cross_entropy(x, l, o);
        const auto xd = x.template to<ts::cuda>();
        const auto ld = l.template to<ts::cuda>();
        const ts::cuda_activity before = ts::cuda_activity_counts();
        const auto got = ts::cross_entropy(xd, ld, o);
        const ts::cuda_activity after = ts::cuda_activity_counts();
        if (launches) {  // fused: one launch, no wait (the composed path's first use waits)
          EXPECT_EQ(after.launches - before.launches, launches) << what;
          EXPECT_EQ(after.host_waits, before.host_waits) << what;
        }
        expect_close(got.template to<ts::cpu>(), want, rtol, rtol / 10, what);
        const auto g =
            r == ts::Reduction::none ? sample<T>({n}, 12) : ts::full<T, ts::cpu>({}, T(0.75));
        const auto dx = ts::cross_entropy_backward(g, x, l, o);
        expect_close(
            ts::cross_entropy_backward(g.template to<ts::cuda>(), xd, ld, o).template to<ts::cpu>(),
            dx, rtol, rtol / 100, what + " backward");
      }
}

TEST_F(CudaLoss, CrossEntropyAndItsGradientMatchCpu) {
  // One launch (the fused block) up to 2^16 logits and 256 classes, composed ops beyond.
  expect_cross_entropy_matches_cpu<float>(37, 10, true, 1);
  expect_cross_entropy_matches_cpu<double>(300, 7, true, 1);
  expect_cross_entropy_matches_cpu<float>(0, 5, true, 1);
  expect_cross_entropy_matches_cpu<float>(3, 256, false, 1);
  expect_cross_entropy_matches_cpu<float>(263, 250, false, 0);
  expect_cross_entropy_matches_cpu<float>(5, 257, false, 0);
}

TEST_F(CudaLoss, CrossEntropyOfATransposedInput) {
  const auto xt = sample<float>({10, 20}, 30);
  const auto l = labels_for(20, 10, 31);
  const auto want = ts::cross_entropy(xt.transpose(0, 1), l);
  const auto got = ts::cross_entropy(xt.to<ts::cuda>().transpose(0, 1), l.to<ts::cuda>());
  expect_close(got.to<ts::cpu>(), want, 1e-5, 1e-6, "cross_entropy of a transposed input");
}

TEST_F(CudaLoss, NllLossAndItsGradientMatchCpu) {
  const int64_t n = 23, c = 6;
  const auto lp = ts::log_softmax(sample<double>({n, c}, 20));
  for (const ts::Reduction r : {ts::Reduction::none, ts::Reduction::mean, ts::Reduction::sum}) {
    const ts::NLLLossOptions o{r, 2};
    const auto l = labels_for(n, c, 21, 2);
    const std::string what = "nll_loss reduction " + std::to_string(int(r));
    expect_same(
        what, 1e-13, 0, [&](const auto& a, const auto& b) { return ts::nll_loss(a, b, o); }, lp, l);
    const auto g =
        r == ts::Reduction::none ? sample<double>({n}, 22) : ts::full<double, ts::cpu>({}, 2.0);
    const auto want = ts::nll_loss_backward(g, lp.shape(), l, o);
    expect_close(
        ts::nll_loss_backward(g.to<ts::cuda>(), lp.shape(), l.to<ts::cuda>(), o).to<ts::cpu>(),
        want, 0, 0, what + " backward");
  }
}

// The device checks the labels without a wait; a bad one throws the op's index_error at the next
// wait for the device (here the loss's own read), and its loss is not trusted.
TEST_F(CudaLoss, BadLabelsThrowAtTheNextWait) {
  const auto x = ts::zeros<float, ts::cuda>({3, 4});
  auto l = ts::zeros<int64_t, ts::cpu>({3});
  (void)ts::cross_entropy(x, l.to<ts::cuda>()).item();  // builds what the op keeps (a wait)
  l.data()[1] = 4;
  const auto l4 = l.to<ts::cuda>();
  const ts::cuda_activity before = ts::cuda_activity_counts();
  const auto loss = ts::cross_entropy(x, l4);
  EXPECT_EQ(ts::cuda_activity_counts().host_waits, before.host_waits) << "the check waited";
  try {
    (void)loss.item();
    ADD_FAILURE() << "cross_entropy with label 4 of 4 classes did not throw";
  } catch (const ts::index_error& e) {
    EXPECT_NE(std::string(e.what()).find("cross_entropy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("label 4 of sample 1"), std::string::npos) << e.what();
  }
  l.data()[1] = -1;
  const auto lm = l.to<ts::cuda>();
  EXPECT_THROW(ts::nll_loss(x, lm).to_vector(), ts::index_error);
  EXPECT_THROW(ts::cross_entropy_backward(ts::ones<float, ts::cuda>({}), x, lm).to_vector(),
               ts::index_error);
  EXPECT_THROW(ts::nll_loss_backward(ts::ones<float, ts::cuda>({}), x.shape(), lm).to_vector(),
               ts::index_error);
  // Reported once: the next wait is clean, and good labels still work.
  l.data()[1] = 3;
  EXPECT_NEAR(ts::cross_entropy(x, l.to<ts::cuda>()).item(), std::log(4.0), 1e-6);
  EXPECT_THROW(ts::cross_entropy(x, ts::zeros<int64_t, ts::cuda>({2})), ts::shape_error);
}

// A check armed on one stream is settled by a wait for that stream (or the device), not by a
// wait for another stream, whose work may be done while the check's kernel is still queued.
TEST_F(CudaLoss, BadLabelsAreReportedByAWaitForTheirStream) {
  const auto x = ts::zeros<float, ts::cuda>({3, 4});
  auto l = ts::zeros<int64_t, ts::cpu>({3});
  (void)ts::cross_entropy(x, l.to<ts::cuda>()).item();  // builds what the op keeps (a wait)
  l.data()[2] = 7;
  const auto bad = l.to<ts::cuda>();
  ts::backend::memory<ts::cuda>::synchronize();  // x and the labels are ready for any stream
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto& checks = ts::detail::cuda_deferred_checks::instance();
  ts::Tensor<float, ts::cuda> loss;
  {
    const ts::cuda_stream_guard g(s);
    loss = ts::cross_entropy(x, bad);
  }
  EXPECT_EQ(checks.armed(), 1u);
  const auto other = ts::zeros<float, ts::cuda>({2});
  EXPECT_NO_THROW((void)other.to_vector());  // a wait for the default stream
  EXPECT_EQ(checks.armed(), 1u) << "a wait for another stream settled the check";
  {
    const ts::cuda_stream_guard g(s);
    try {
      (void)loss.item();
      ADD_FAILURE() << "no error for label 7 of 4 classes";
    } catch (const ts::index_error& e) {
      EXPECT_NE(std::string(e.what()).find("label 7 of sample 2"), std::string::npos) << e.what();
    }
    EXPECT_EQ(checks.armed(), 0u);
    loss = ts::cross_entropy(x, bad);
  }
  // A device-wide wait settles the checks of every stream.
  EXPECT_THROW(ts::backend::memory<ts::cuda>::synchronize(), ts::index_error);
  EXPECT_EQ(checks.armed(), 0u);
  ts::backend::memory<ts::cuda>::synchronize();
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Many losses between two waits (more than the 64 armed checks' slots): the check waits to free
// them, and a bad label among them is still reported.
TEST_F(CudaLoss, ManyChecksBetweenWaits) {
  const auto x = ts::zeros<float, ts::cuda>({2, 3});
  const auto good = ts::zeros<int64_t, ts::cuda>({2});
  std::vector<ts::Tensor<float, ts::cuda>> losses;
  for (int i = 0; i < 70; ++i) losses.push_back(ts::cross_entropy(x, good));
  auto bad = ts::zeros<int64_t, ts::cpu>({2});
  bad.data()[0] = 7;
  const auto bd = bad.to<ts::cuda>();
  (void)ts::cross_entropy(x, bd);
  for (int i = 0; i < 10; ++i) losses.push_back(ts::cross_entropy(x, good));
  EXPECT_THROW(ts::backend::memory<ts::cuda>::synchronize(), ts::index_error);
  EXPECT_NEAR(losses.back().item(), std::log(3.0), 1e-6);
}

}  // namespace
