// In-place writes and autograd: every in-place path counts in the storage's version; backward
// refuses a graph whose saved tensors were written since their op ran (naming the op, before
// any gradient is touched); writes that no backward reads are allowed; optimizer steps after
// backward never trip the check. The property test runs many ops with a write into each input
// and into the output: backward either throws or gives exactly the gradients of the untouched
// graph, never a silently different one.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tessera/autograd.hpp>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>
#include <tessera/tessera.hpp>
#include <vector>

#include "test_util.hpp"

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_inplace {

namespace ts = tessera;
using T = double;
using Ten = ts::Tensor<T, ts::cpu>;
using V = ts::Variable<T, ts::cpu>;

Ten random(const ts::Shape& s, uint64_t seed, double lo = 0.5, double hi = 2) {
  ts::Generator g(seed);
  return ts::rand<T>(s, g, lo, hi);
}

/// Runs f and returns the message of the ts::error it throws ("" when it does not throw).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ts::error& e) {
    return e.what();
  }
  return "";
}

// ---- the version counter ------------------------------------------------------------------------

TEST(Version, EveryInPlacePathCountsAWrite) {
  const Ten t = random({4, 4}, 1);
  const Ten other = random({4, 4}, 2);
  const std::vector<std::pair<std::string, std::function<void()>>> writes = {
      {"fill_", [&] { t.fill_(1.0); }},
      {"copy_", [&] { t.copy_(other); }},
      {"map_to",
       [&] {
         ts::map_to(
             t, [](T a) { return a * 2; }, t);
       }},
      {"+= tensor", [&] { t += other; }},
      {"-= scalar", [&] { t -= 1.0; }},
      {"*= scalar", [&] { t *= 2.0; }},
      {"/= tensor", [&] { t /= other; }},
      {"add out=", [&] { ts::add(other, other, t); }},
      {"matmul out=", [&] { ts::matmul(other, other, t); }},
      {"gemm", [&] { ts::gemm(1.0, other, other, 0.5, t); }},
      {"sgd_step", [&] { ts::sgd_step(t, other, Ten(), {.lr = 0.1}, false); }},
      {"adam_step",
       [&] {
         const Ten m = ts::zeros<T>(t.shape()), v = ts::zeros<T>(t.shape());
         ts::adam_step(t, other, m, v, Ten(), 1, {});
       }},
  };
  for (const auto& [name, write] : writes) {
    const uint64_t before = t.version();
    write();
    EXPECT_GT(t.version(), before) << name;
  }
  // Through a view: the version belongs to the storage, shared by every view of it.
  const uint64_t before = t.version();
  t.slice(0, 1, 3).fill_(0.0);
  EXPECT_GT(t.version(), before);
  EXPECT_EQ(t.version(), t.transpose(0, 1).version());
  // Ops that only read leave it alone; a failed write does not count.
  const uint64_t now = t.version();
  (void)ts::exp(t), (void)ts::sum(t), (void)t.clone(), (void)t.contiguous();
  EXPECT_THROW(ts::add(t, random({3}, 3), t), ts::shape_error);
  EXPECT_THROW(ts::map_to(
                   t, [](T a, T b) { return a + b; }, t, random({2}, 4)),
               ts::shape_error);
  EXPECT_EQ(t.version(), now);
}

TEST(Version, PoolAndConvOutFormsCountAWrite) {
  const Ten x = random({1, 2, 6, 6}, 5), w = random({3, 2, 3, 3}, 6);
  const Ten y = ts::zeros<T>(ts::Shape{1, 3, 4, 4}), p = ts::zeros<T>(ts::Shape{1, 2, 3, 3});
  uint64_t before = y.version();
  ts::conv2d(x, w, Ten(), {}, y);
  EXPECT_GT(y.version(), before);
  before = p.version();
  ts::max_pool2d(x, {.kernel = {2, 2}}, p);
  EXPECT_GT(p.version(), before);
  before = p.version();
  ts::avg_pool2d(x, {.kernel = {2, 2}}, p);
  EXPECT_GT(p.version(), before);
}

// ---- backward refuses overwritten saved tensors -------------------------------------------------

// The reported reproducer: exp's output, saved by exp and by the product, overwritten.
TEST(SavedTensors, OverwrittenOutputIsRefusedAndNoGradientIsTouched) {
  const V q = ts::param(ts::from_vector<T>({1, 2, 3}, {3}));
  const V e = ts::exp(q);
  const V s = ts::sum(e * e);
  e.value().fill_(100.0);
  const std::string what = error_of([&] { s.backward(); });
  EXPECT_NE(what.find("tessera::backward:"), std::string::npos) << what;
  EXPECT_NE(what.find("modified in place"), std::string::npos) << what;
  EXPECT_TRUE(what.find("exp") != std::string::npos || what.find("mul") != std::string::npos)
      << what;
  // Refused before any gradient was computed.
  EXPECT_FALSE(q.grad().defined());
}

// The second reproducer: map_to into a leaf's value after it was used.
TEST(SavedTensors, MapToIntoALeafIsRefused) {
  const V r = ts::param(ts::from_vector<T>({1, 2, 3}, {3}));
  const V s = ts::sum(r * r);
  ts::map_to(
      r.value(), [](T a) { return a + 1; }, r.value());
  const std::string what = error_of([&] { s.backward(); });
  EXPECT_NE(what.find("mul saved"), std::string::npos) << what;
}

TEST(SavedTensors, WritesThatNoBackwardReadsAreAllowed) {
  // add saves nothing: overwriting its inputs does not change its gradient.
  const V x = ts::param(random({3}, 7)), w = ts::param(random({3}, 8));
  const V y = ts::sum(x + w);
  x.value().fill_(5.0);
  w.value() += 1.0;
  ASSERT_NO_THROW(y.backward());
  tt::expect_close(tt::to_doubles(x.grad()), {1, 1, 1}, 0, "x");
  tt::expect_close(tt::to_doubles(w.grad()), {1, 1, 1}, 0, "w");
}

TEST(SavedTensors, RetainedGraphIsCheckedOnEveryBackward) {
  const V x = ts::param(random({3}, 9));
  const V t = ts::tanh(x);
  const V y = ts::sum(t);
  y.backward({}, true);
  const std::vector<double> first = tt::to_doubles(x.grad());
  // Writing into the input is fine: tanh saved its output, and the gradient is unchanged.
  x.value().fill_(0.0);
  x.zero_grad();
  ASSERT_NO_THROW(y.backward({}, true));
  tt::expect_close(tt::to_doubles(x.grad()), first, 0, "second backward");
  x.zero_grad();
  // Writing into a view of the saved output is not.
  t.value().slice(0, 0, 1).fill_(2.0);
  const std::string what = error_of([&] { y.backward({}, true); });
  EXPECT_NE(what.find("tanh saved"), std::string::npos) << what;
  EXPECT_FALSE(x.grad().defined());
}

TEST(SavedTensors, LabelsWrittenAfterTheLossAreRefused) {
  const V logits = ts::param(random({4, 3}, 10, -1, 1));
  const ts::Tensor<int64_t, ts::cpu> labels = ts::from_vector<int64_t>({0, 2, 1, 2}, {4});
  const V loss = ts::cross_entropy(logits, labels);
  labels.fill_(0);
  const std::string what = error_of([&] { loss.backward(); });
  EXPECT_NE(what.find("cross_entropy saved"), std::string::npos) << what;
}

// Ops whose backward reads an input or the output: writing into any of them between forward
// and backward is refused, and otherwise (ops that read nothing) the gradient is unchanged.
// Writing is done three ways (fill_, +=, map_to) so each counted path is exercised.
TEST(SavedTensors, NoOpGivesASilentlyWrongGradient) {
  using Fn = std::function<V(const V&, const V&)>;
  const ts::Conv2dOptions co{.padding = {1, 1}};
  const std::vector<std::tuple<std::string, ts::Shape, ts::Shape, Fn>> ops = {
      {"add", {2, 3}, {2, 3}, [](const V& a, const V& b) { return a + b; }},
      {"sub", {2, 3}, {3}, [](const V& a, const V& b) { return a - b; }},
      {"mul", {2, 3}, {2, 3}, [](const V& a, const V& b) { return a * b; }},
      {"div", {2, 3}, {3}, [](const V& a, const V& b) { return a / b; }},
      {"maximum", {2, 3}, {2, 3}, [](const V& a, const V& b) { return ts::maximum(a, b); }},
      {"minimum", {2, 3}, {2, 3}, [](const V& a, const V& b) { return ts::minimum(a, b); }},
      {"rdiv", {2, 3}, {1}, [](const V& a, const V&) { return 2.0 / a; }},
      {"pow", {2, 3}, {1}, [](const V& a, const V&) { return ts::pow(a, 3.0); }},
      {"exp", {2, 3}, {1}, [](const V& a, const V&) { return ts::exp(a); }},
      {"log", {2, 3}, {1}, [](const V& a, const V&) { return ts::log(a); }},
      {"sqrt", {2, 3}, {1}, [](const V& a, const V&) { return ts::sqrt(a); }},
      {"tanh", {2, 3}, {1}, [](const V& a, const V&) { return ts::tanh(a); }},
      {"sigmoid", {2, 3}, {1}, [](const V& a, const V&) { return ts::sigmoid(a); }},
      {"relu", {2, 3}, {1}, [](const V& a, const V&) { return ts::relu(a - 1.0); }},
      {"gelu", {2, 3}, {1}, [](const V& a, const V&) { return ts::gelu(a); }},
      {"abs", {2, 3}, {1}, [](const V& a, const V&) { return ts::abs(a - 1.0); }},
      {"map",
       {2, 3},
       {1},
       [](const V& a, const V&) {
         return ts::map([](T v) { return v * v; }, [](T v) { return 2 * v; }, a);
       }},
      {"matmul", {2, 3}, {3, 4}, [](const V& a, const V& b) { return ts::matmul(a, b); }},
      {"linear", {2, 3}, {4, 3}, [](const V& a, const V& b) { return ts::linear(a, b); }},
      {"sum", {2, 3}, {1}, [](const V& a, const V&) { return ts::sum(a, {1}); }},
      {"mean", {2, 3}, {1}, [](const V& a, const V&) { return ts::mean(a, {0}); }},
      {"var", {2, 3}, {1}, [](const V& a, const V&) { return ts::var(a, {1}); }},
      {"max", {2, 3}, {1}, [](const V& a, const V&) { return ts::max(a, {1}); }},
      {"logsumexp", {2, 3}, {1}, [](const V& a, const V&) { return ts::logsumexp(a, {1}); }},
      {"norm", {2, 3}, {1}, [](const V& a, const V&) { return ts::norm(a, {1}); }},
      {"softmax", {2, 3}, {1}, [](const V& a, const V&) { return ts::softmax(a, 1); }},
      {"log_softmax", {2, 3}, {1}, [](const V& a, const V&) { return ts::log_softmax(a, 1); }},
      {"transpose", {2, 3}, {1}, [](const V& a, const V&) { return ts::transpose(a, 0, 1); }},
      {"slice", {2, 3}, {1}, [](const V& a, const V&) { return ts::slice(a, 1, 0, 2); }},
      {"bce",
       {2, 3},
       {2, 3},
       [](const V& a, const V& b) {
         return ts::binary_cross_entropy_with_logits(a, b * 0.25, ts::Reduction::none);
       }},
      {"conv2d",
       {1, 2, 4, 4},
       {3, 2, 3, 3},
       [co](const V& a, const V& b) { return ts::conv2d(a, b, co); }},
      {"conv2d+relu",
       {1, 2, 4, 4},
       {3, 2, 3, 3},
       [co](const V& a, const V& b) {
         ts::Conv2dOptions o = co;
         o.relu = true;
         return ts::conv2d(a - 1.0, b, o);
       }},
      {"max_pool2d",
       {1, 2, 4, 4},
       {1},
       [](const V& a, const V&) {
         return ts::max_pool2d(a, {.kernel = {2, 2}});
       }},
      {"avg_pool2d",
       {1, 2, 4, 4},
       {1},
       [](const V& a, const V&) {
         return ts::avg_pool2d(a, {.kernel = {2, 2}});
       }},
  };
  const std::vector<std::pair<std::string, std::function<void(const Ten&)>>> writes = {
      {"fill_", [](const Ten& t) { t.fill_(0.75); }},
      {"+=", [](const Ten& t) { t += 0.5; }},
      {"map_to",
       [](const Ten& t) {
         ts::map_to(
             t, [](T v) { return v * 1.5; }, t);
       }},
  };
  int refused = 0, allowed = 0;
  for (const auto& [name, sa, sb, f] : ops) {
    // The reference: gradients of sum(f(a, b)) with nothing overwritten.
    const Ten a0 = random(sa, 11), b0 = random(sb, 12);
    const V ra = ts::param(a0.clone()), rb = ts::param(b0.clone());
    ts::sum(f(ra, rb)).backward();
    const auto ga = tt::to_doubles(ra.grad());
    const auto gb = rb.grad().defined() ? tt::to_doubles(rb.grad()) : std::vector<double>{};
    for (int victim = 0; victim < 3; ++victim) {
      for (const auto& [how, write] : writes) {
        const std::string where = name + ", " + how + " into " +
                                  (victim == 0   ? std::string("input 0")
                                   : victim == 1 ? std::string("input 1")
                                                 : std::string("the output"));
        const V a = ts::param(a0.clone()), b = ts::param(b0.clone());
        const V y = f(a, b);
        const V loss = ts::sum(y);
        write(victim == 0 ? a.value() : victim == 1 ? b.value() : y.value());
        const std::string what = error_of([&] { loss.backward(); });
        if (!what.empty()) {
          ++refused;
          EXPECT_NE(what.find("modified in place"), std::string::npos) << where << ": " << what;
          EXPECT_FALSE(a.grad().defined()) << where;
          continue;
        }
        ++allowed;
        tt::expect_close(tt::to_doubles(a.grad()), ga, 0, where + " (grad of input 0)");
        if (!gb.empty()) tt::expect_close(tt::to_doubles(b.grad()), gb, 0, where + " (input 1)");
      }
    }
  }
  // Both outcomes happen (the test would pass vacuously if every write were refused, or none).
  EXPECT_GT(refused, 100);
  EXPECT_GT(allowed, 30);
}

// ---- optimizers ---------------------------------------------------------------------------------

TEST(SavedTensors, OptimizerStepsAfterBackwardNeverTrip) {
  // Linear + ReLU runs fused (the product saves its output for the mask).
  ts::nn::Sequential<T, ts::cpu> model{ts::nn::Linear<T, ts::cpu>(4, 8), ts::nn::ReLU<T, ts::cpu>(),
                                       ts::nn::Linear<T, ts::cpu>(8, 2)};
  ts::optim::SGD<T, ts::cpu> sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  ts::optim::Adam<T, ts::cpu> adam(model.parameters(), {.lr = 1e-3});
  const Ten x = random({5, 4}, 14, -1, 1);
  const ts::Tensor<int64_t, ts::cpu> labels = ts::from_vector<int64_t>({0, 1, 1, 0, 1}, {5});
  for (int step = 0; step < 3; ++step) {
    using Opt = ts::optim::Optimizer<T, ts::cpu>;
    for (Opt* opt : {static_cast<Opt*>(&sgd), static_cast<Opt*>(&adam)}) {
      opt->zero_grad();
      ASSERT_NO_THROW(ts::cross_entropy(model(V(x)), labels).backward());
      opt->step();
      ASSERT_NO_THROW(ts::optim::clip_grad_norm(model.parameters(), 1.0));
    }
  }
  // A step between forward and backward overwrites the weights the products saved: refused,
  // as in PyTorch.
  sgd.zero_grad();
  const V loss = ts::cross_entropy(model(V(x)), labels);
  loss.backward({}, true);
  sgd.step();
  const std::string what = error_of([&] { loss.backward(); });
  EXPECT_NE(what.find("linear saved"), std::string::npos) << what;
}

}  // namespace test_inplace
