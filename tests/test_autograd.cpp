// Autograd engine semantics, on float and double: seeds, errors, release of the history and
// retain_graph, gradient accumulation and zero_grad, shared subexpressions and diamonds, no_grad,
// detach, requires_grad_, independence of leaf gradients, memory release (weak pointers to
// intermediate nodes and saved tensors), a 10000-op chain, a first conv layer whose input needs
// no gradient. Also the tensor-level pieces the autograd layer is built on: cross_entropy and
// nll_loss against references in double, softmax / log_softmax (sums, large inputs), cat and
// stack (shapes, values, errors), and the losses' documented errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tessera/autograd.hpp>
#include <tessera/tessera.hpp>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {
namespace ts = tessera;
using tt::to_doubles;

template <class T>
using Var = ts::Variable<T, ts::cpu>;
template <class T>
using Ten = ts::Tensor<T, ts::cpu>;
using L = ts::Tensor<int64_t, ts::cpu>;

template <class T>
Ten<T> tensor(const std::vector<double>& v, const ts::Shape& s) {
  std::vector<T> c(v.begin(), v.end());
  return ts::from_vector<T>(c, s);
}
template <class T>
Ten<T> random(const ts::Shape& s, uint64_t seed, double lo = -2, double hi = 2) {
  ts::Generator g(seed);
  return ts::rand<T>(s, g, lo, hi);
}

template <class T>
double tol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

/// Expects f to throw E whose message names `op` ("tessera::<op>:") and contains `part`.
template <class E, class F>
void expect_error(F f, const std::string& op, const std::string& part = "") {
  try {
    f();
    ADD_FAILURE() << "expected an exception from " << op;
  } catch (const E& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tessera::" + op + ":"), std::string::npos) << what;
    EXPECT_NE(what.find(part), std::string::npos) << what << " (expected '" << part << "')";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type from " << op << ": " << e.what();
  }
}

template <class T>
class Autograd : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Autograd, FloatTypes);

// ---- backward: seeds and errors ---------------------------------------------------------------

TYPED_TEST(Autograd, ScalarBackwardWithoutSeed) {
  using T = TypeParam;
  const Var<T> x = ts::param(tensor<T>({1, -2, 3, 0.5}, {4}));
  const Var<T> y = ts::sum(x * x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_NEAR(static_cast<double>(y.item()), 1 + 4 + 9 + 0.25, tol<T>());
  y.backward();
  tt::expect_close(to_doubles(x.grad()), {2, -4, 6, 1}, tol<T>(), "d sum(x^2)");
  // A 0-d loss and a one-element [1, 1] loss both default to a seed of 1.
  const Var<T> z = ts::param(tensor<T>({3}, {1, 1}));
  (z * T(5)).backward();
  tt::expect_close(to_doubles(z.grad()), {5}, tol<T>(), "[1, 1] root");
}

TYPED_TEST(Autograd, SeedForNonScalar) {
  using T = TypeParam;
  const Var<T> x = ts::param(random<T>({2, 3}, 1));
  const Var<T> y = x * T(3) + T(1);
  const Ten<T> seed = tensor<T>({1, 2, 3, 4, 5, 6}, {2, 3});
  y.backward(seed);
  tt::expect_close(to_doubles(x.grad()), {3, 6, 9, 12, 15, 18}, tol<T>(), "seeded");
  // The seed is not modified, even through a node that receives two contributions.
  const Var<T> u = x * T(1);
  const Var<T> w = u + u;
  w.backward(seed);
  tt::expect_close(to_doubles(seed), {1, 2, 3, 4, 5, 6}, 0, "seed after backward");
  tt::expect_close(to_doubles(x.grad()), {5, 10, 15, 20, 25, 30}, tol<T>(), "seeded, accumulated");
  // A seed of the wrong shape.
  const Var<T> v = x * T(2);
  EXPECT_THROW(v.backward(tensor<T>({1, 2, 3}, {3})), ts::shape_error);
  expect_error<ts::shape_error>(
      [&] {
        v.backward(ts::ones<T>(ts::Shape{3, 2}));
      },
      "backward", "seed of shape");
}

TYPED_TEST(Autograd, NonScalarWithoutSeedThrows) {
  using T = TypeParam;
  const Var<T> x = ts::param(random<T>({2, 3}, 2));
  const Var<T> y = ts::relu(x);
  expect_error<ts::shape_error>([&] { y.backward(); }, "backward", "seed");
  // The failed call left the history in place: a seeded backward still works.
  y.backward(ts::ones<T>(ts::Shape{2, 3}));
  EXPECT_TRUE(x.grad().defined());
}

TYPED_TEST(Autograd, NothingRequiresGradThrows) {
  using T = TypeParam;
  const Var<T> x(random<T>({3}, 3));
  EXPECT_FALSE(x.requires_grad());
  const Var<T> y = ts::sum(ts::exp(x) * T(2));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  expect_error<ts::error>([&] { y.backward(); }, "backward", "does not require grad");
  // An undefined Variable.
  const Var<T> none;
  EXPECT_FALSE(none.defined());
  EXPECT_FALSE(none.requires_grad());
  expect_error<ts::error>([&] { none.backward(); }, "backward", "undefined");
  expect_error<ts::error>([&] { (void)none.value(); }, "value", "undefined");
}

TYPED_TEST(Autograd, SecondBackwardAfterReleaseThrows) {
  using T = TypeParam;
  const Var<T> x = ts::param(tensor<T>({1, 2, 3}, {3}));
  const Var<T> h = x * x;
  const Var<T> y = ts::sum(h);
  y.backward();
  expect_error<ts::error>([&] { y.backward(); }, "backward", "released");
  tt::expect_close(to_doubles(x.grad()), {2, 4, 6}, tol<T>(), "grad after the failed second call");
  // A new op on a released intermediate cannot reach x either.
  const Var<T> z = ts::sum(h * T(2));
  expect_error<ts::error>([&] { z.backward(); }, "backward", "released");
  tt::expect_close(to_doubles(x.grad()), {2, 4, 6}, tol<T>(), "grad after the failed call on z");
  // A fresh forward pass works.
  ts::sum(x * x).backward();
  tt::expect_close(to_doubles(x.grad()), {4, 8, 12}, tol<T>(), "after a fresh forward");
}

TYPED_TEST(Autograd, RetainGraphAllowsTwoBackwards) {
  using T = TypeParam;
  const Var<T> x = ts::param(tensor<T>({0.5, -1, 2}, {3}));
  const Var<T> y = ts::sum(ts::tanh(x) * x);
  y.backward({}, /*retain_graph=*/true);
  const auto once = to_doubles(x.grad());
  y.backward({}, true);
  std::vector<double> twice(once.size());
  for (size_t i = 0; i < once.size(); ++i) twice[i] = 2 * once[i];
  tt::expect_close(to_doubles(x.grad()), twice, tol<T>(), "two retained backwards");
  // The last one without retain_graph releases; a fourth throws.
  y.backward();
  EXPECT_THROW(y.backward(), ts::error);
  std::vector<double> thrice(once.size());
  for (size_t i = 0; i < once.size(); ++i) thrice[i] = 3 * once[i];
  tt::expect_close(to_doubles(x.grad()), thrice, tol<T>(), "three backwards");
  // Analytic: tanh(x) + x (1 - tanh^2 x).
  for (size_t i = 0; i < once.size(); ++i) {
    const double v = std::vector<double>{0.5, -1, 2}[i], t = std::tanh(v);
    EXPECT_NEAR(once[i], t + v * (1 - t * t), 1e-5);
  }
}

TYPED_TEST(Autograd, AccumulatesAcrossForwardBackward) {
  using T = TypeParam;
  const Var<T> w = ts::param(tensor<T>({1, 2}, {2}));
  const Ten<T> in = tensor<T>({3, -1}, {2});
  for (int step = 0; step < 2; ++step) ts::sum(w * in * w).backward();
  // d/dw sum(in w^2) = 2 in w, twice.
  tt::expect_close(to_doubles(w.grad()), {12, -8}, tol<T>(), "two steps accumulated");
}

TYPED_TEST(Autograd, ZeroGrad) {
  using T = TypeParam;
  const Var<T> w = ts::param(tensor<T>({1, 2}, {2}));
  EXPECT_FALSE(w.grad().defined());
  ts::sum(w * T(3)).backward();
  tt::expect_close(to_doubles(w.grad()), {3, 3}, tol<T>(), "first");
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  ts::sum(w * T(5)).backward();
  tt::expect_close(to_doubles(w.grad()), {5, 5}, tol<T>(), "after zero_grad");
  // set_grad replaces it (and checks its shape); the next backward adds to it.
  w.set_grad(tensor<T>({1, 1}, {2}));
  ts::sum(w * T(2)).backward();
  tt::expect_close(to_doubles(w.grad()), {3, 3}, tol<T>(), "after set_grad");
  expect_error<ts::shape_error>([&] { w.set_grad(ts::ones<T>(ts::Shape{3})); }, "set_grad");
}

TYPED_TEST(Autograd, VariableUsedTwice) {
  using T = TypeParam;
  const Var<T> x = ts::param(tensor<T>({1, -2, 3}, {3}));
  (x * x).backward(ts::ones<T>(ts::Shape{3}));
  tt::expect_close(to_doubles(x.grad()), {2, -4, 6}, tol<T>(), "x*x");
  x.zero_grad();
  ts::sum(x + x + x).backward();
  tt::expect_close(to_doubles(x.grad()), {3, 3, 3}, tol<T>(), "x+x+x");
  x.zero_grad();
  ts::sum(x * x * x).backward();
  tt::expect_close(to_doubles(x.grad()), {3, 12, 27}, tol<T>(), "x^3");
}

TYPED_TEST(Autograd, DiamondGraph) {
  using T = TypeParam;
  const std::vector<double> xs{0.5, -1, 2};
  const Var<T> x = ts::param(tensor<T>(xs, {3}));
  // x -> u -> {p, q} -> y, and a second diamond sharing x directly.
  const Var<T> u = x * T(2);
  const Var<T> p = u * T(3);
  const Var<T> q = u * u;
  const Var<T> y = ts::sum(p + q) + ts::sum(ts::exp(x) * x);
  y.backward();
  std::vector<double> want;
  for (double v : xs) want.push_back(6 + 8 * v + std::exp(v) * (1 + v));
  tt::expect_close(to_doubles(x.grad()), want, 1e-5, "diamond");
  // Non-leaf Variables keep no gradient.
  EXPECT_FALSE(u.grad().defined());
  EXPECT_FALSE(p.grad().defined());
  EXPECT_FALSE(y.grad().defined());
}

// The derivative functors in T (several are SIMD functors: relu, sigmoid, tanh, sqrt, rsqrt and
// the divisor's gradient), over 19 elements so packs and the tail both run, against the
// derivatives written out in double.
TYPED_TEST(Autograd, ElementwiseGradientsMatchFormulas) {
  using T = TypeParam;
  const int64_t n = 19;
  std::vector<double> xs, ps;
  for (int64_t i = 0; i < n; ++i) {
    xs.push_back(-2.05 + 0.2 * static_cast<double>(i));  // never 0
    ps.push_back(0.3 + 0.15 * static_cast<double>(i));   // positive
  }
  struct op {
    const char* name;
    bool positive;
    std::function<Var<T>(const Var<T>&)> f;
    std::function<double(double)> df;
  };
  const std::vector<op> ops = {
      {"relu", false, [](const Var<T>& v) { return ts::relu(v); },
       [](double x) { return x > 0 ? 1.0 : 0.0; }},
      {"sigmoid", false, [](const Var<T>& v) { return ts::sigmoid(v); },
       [](double x) {
         const double s = 1 / (1 + std::exp(-x));
         return s * (1 - s);
       }},
      {"tanh", false, [](const Var<T>& v) { return ts::tanh(v); },
       [](double x) { return 1 - std::tanh(x) * std::tanh(x); }},
      {"sqrt", true, [](const Var<T>& v) { return ts::sqrt(v); },
       [](double x) { return 0.5 / std::sqrt(x); }},
      {"rsqrt", true, [](const Var<T>& v) { return ts::rsqrt(v); },
       [](double x) { return -0.5 * std::pow(x, -1.5); }},
      {"exp", false, [](const Var<T>& v) { return ts::exp(v); },
       [](double x) { return std::exp(x); }},
      {"log", true, [](const Var<T>& v) { return ts::log(v); }, [](double x) { return 1 / x; }},
      {"abs", false, [](const Var<T>& v) { return ts::abs(v); },
       [](double x) { return x > 0 ? 1.0 : -1.0; }},
      {"gelu", false, [](const Var<T>& v) { return ts::gelu(v); },
       [](double x) {
         return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                x * std::exp(-0.5 * x * x) / std::sqrt(2 * 3.14159265358979323846);
       }},
      {"gelu_tanh", false, [](const Var<T>& v) { return ts::gelu_tanh(v); },
       [](double x) {
         const double c = 0.79788456080286535588, k = 0.044715,
                      t = std::tanh(c * (x + k * x * x * x));
         return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x);
       }},
      {"neg", false, [](const Var<T>& v) { return ts::neg(v); }, [](double) { return -1.0; }},
      {"pow 3", false, [](const Var<T>& v) { return ts::pow(v, T(3)); },
       [](double x) { return 3 * x * x; }},
      {"pow -0.5", true, [](const Var<T>& v) { return ts::pow(v, T(-0.5)); },
       [](double x) { return -0.5 * std::pow(x, -1.5); }},
      {"2 / x", true, [](const Var<T>& v) { return T(2) / v; },
       [](double x) { return -2 / (x * x); }},
      {"1 / x (div)", true, [](const Var<T>& v) { return Var<T>(ts::ones<T>(v.shape())) / v; },
       [](double x) { return -1 / (x * x); }},
      {"x / 4", false, [](const Var<T>& v) { return v / 4; }, [](double) { return 0.25; }},
      {"3 - x", false, [](const Var<T>& v) { return 3 - v; }, [](double) { return -1.0; }},
      {"max(x, 0.1)", false,
       [](const Var<T>& v) { return ts::maximum(v, Var<T>(ts::full<T>(ts::Shape{1}, T(0.1)))); },
       [](double x) { return x > 0.1 ? 1.0 : 0.0; }},
      {"min(x, 0.1)", false,
       [](const Var<T>& v) { return ts::minimum(v, Var<T>(ts::full<T>(ts::Shape{1}, T(0.1)))); },
       [](double x) { return x < 0.1 ? 1.0 : 0.0; }},
  };
  for (const auto& o : ops) {
    const auto& vals = o.positive ? ps : xs;
    const Var<T> x = ts::param(tensor<T>(vals, {n}));
    ts::sum(o.f(x)).backward();
    std::vector<double> want;
    for (double v : vals) want.push_back(o.df(static_cast<double>(static_cast<T>(v))));
    tt::expect_close(to_doubles(x.grad()), want, std::is_same_v<T, float> ? 1e-5 : 1e-12, o.name);
  }
}

// ---- no_grad, detach, requires_grad_ ----------------------------------------------------------

TYPED_TEST(Autograd, NoGradNestsAndRestores) {
  using T = TypeParam;
  const Var<T> x = ts::param(random<T>({3}, 4));
  EXPECT_TRUE(ts::autograd::is_grad_enabled());
  {
    ts::no_grad outer;
    EXPECT_FALSE(ts::autograd::is_grad_enabled());
    const Var<T> y = ts::relu(x * T(2));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    {
      ts::no_grad inner;
      EXPECT_FALSE(ts::autograd::is_grad_enabled());
    }
    EXPECT_FALSE(ts::autograd::is_grad_enabled());  // the inner guard restores "off"
    EXPECT_THROW(ts::sum(y).backward(), ts::error);
  }
  EXPECT_TRUE(ts::autograd::is_grad_enabled());
  const Var<T> z = ts::sum(x * T(2));
  EXPECT_TRUE(z.requires_grad());
  z.backward();
  tt::expect_close(to_doubles(x.grad()), {2, 2, 2}, tol<T>(), "after no_grad");
}

TYPED_TEST(Autograd, NoGradIsPerThreadAndExceptionSafe) {
  using T = TypeParam;
  try {
    ts::no_grad guard;
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(ts::autograd::is_grad_enabled());
  ts::no_grad guard;
  bool other_thread = false;
  std::thread([&] { other_thread = ts::autograd::is_grad_enabled(); }).join();
  EXPECT_TRUE(other_thread);
  EXPECT_FALSE(ts::autograd::is_grad_enabled());
  (void)sizeof(T);
}

TYPED_TEST(Autograd, DetachStopsGradient) {
  using T = TypeParam;
  const Var<T> x = ts::param(tensor<T>({1, 2, 3}, {3}));
  const Var<T> d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.value().shares_storage_with(x.value()));
  ts::sum(d * x).backward();
  tt::expect_close(to_doubles(x.grad()), {1, 2, 3}, tol<T>(), "d * x");
  EXPECT_FALSE(d.grad().defined());
  // Detaching an op result cuts the history behind it.
  x.zero_grad();
  const Var<T> h = ts::exp(x);
  ts::sum(h.detach() * x + h).backward();
  std::vector<double> want;
  for (double v : {1.0, 2.0, 3.0}) want.push_back(2 * std::exp(v));
  tt::expect_close(to_doubles(x.grad()), want, 1e-5, "exp(x).detach() * x + exp(x)");
}

TYPED_TEST(Autograd, RequiresGradUnderscore) {
  using T = TypeParam;
  Var<T> x(tensor<T>({1, 2}, {2}));
  Var<T> y = x * T(2);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_NO_THROW(y.requires_grad_());  // still a leaf (nothing recorded): allowed
  x.requires_grad_();
  EXPECT_TRUE(x.requires_grad());
  Var<T> z = x * T(3);
  EXPECT_TRUE(z.requires_grad());
  expect_error<ts::error>([&] { z.requires_grad_(false); }, "requires_grad_", "leaf");
  expect_error<ts::error>([&] { z.requires_grad_(); }, "requires_grad_", "leaf");
  ts::sum(z).backward();
  tt::expect_close(to_doubles(x.grad()), {3, 3}, tol<T>(), "after requires_grad_");
  // Switched off again, the next op records nothing.
  x.requires_grad_(false);
  EXPECT_FALSE((x * T(2)).requires_grad());
}

TYPED_TEST(Autograd, LeafGradsAreIndependentTensors) {
  using T = TypeParam;
  const Var<T> a = ts::param(tensor<T>({1, 2, 3}, {3}));
  const Var<T> b = ts::param(tensor<T>({4, 5, 6}, {3}));
  const Ten<T> seed = tensor<T>({1, 1, 1}, {3});
  (a + b).backward(seed);
  ASSERT_TRUE(a.grad().defined() && b.grad().defined());
  EXPECT_FALSE(a.grad().shares_storage_with(b.grad()));
  EXPECT_FALSE(a.grad().shares_storage_with(seed));
  a.grad().fill_(T(7));
  tt::expect_close(to_doubles(b.grad()), {1, 1, 1}, 0, "b.grad after writing a.grad");
  seed.fill_(T(9));
  tt::expect_close(to_doubles(b.grad()), {1, 1, 1}, 0, "b.grad after writing the seed");
  // Gradients that arrive as broadcast views (sum's backward) are materialised.
  const Var<T> c = ts::param(random<T>({2, 3}, 5));
  const Var<T> d = ts::param(random<T>({2, 3}, 6));
  ts::sum(c + d).backward();
  EXPECT_TRUE(c.grad().is_contiguous());
  EXPECT_FALSE(c.grad().shares_storage_with(d.grad()));
  c.grad().fill_(T(0));
  tt::expect_close(to_doubles(d.grad()), std::vector<double>(6, 1), 0, "d.grad");
  // A gradient never aliases a value.
  const Var<T> e = ts::param(random<T>({3}, 7));
  (e * T(1)).backward(e.value());
  EXPECT_FALSE(e.grad().shares_storage_with(e.value()));
  // Slices of one gradient (cat's backward) are copied apart too.
  const Var<T> f = ts::param(random<T>({2}, 8)), g = ts::param(random<T>({2}, 9));
  ts::sum(ts::cat(std::vector<Var<T>>{f, g}) * T(2)).backward();
  EXPECT_FALSE(f.grad().shares_storage_with(g.grad()));
  f.grad().fill_(T(0));
  tt::expect_close(to_doubles(g.grad()), {2, 2}, 0, "g.grad after writing f.grad");
}

// ---- memory -----------------------------------------------------------------------------------

TYPED_TEST(Autograd, BackwardReleasesTheTape) {
  using T = TypeParam;
  using node = typename Var<T>::node;
  const Var<T> x = ts::param(random<T>({64}, 10));
  std::weak_ptr<node> inner;
  std::weak_ptr<ts::detail::storage_block> saved;
  Var<T> loss;
  {
    const Var<T> h = ts::exp(x);
    inner = h.impl();
    saved = h.value().storage();  // saved by exp's and mul's closures
    loss = ts::sum(h * h);
  }
  EXPECT_FALSE(inner.expired());
  EXPECT_FALSE(saved.expired());
  loss.backward();
  EXPECT_TRUE(inner.expired());
  EXPECT_TRUE(saved.expired());
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(loss.impl()->backward);
  EXPECT_TRUE(loss.impl()->inputs.empty());
  // A root that saved tensors (norm saves its input) lets them go too, though the root itself is
  // still held: backward drops the closure and the saved-version list with it.
  std::weak_ptr<ts::detail::storage_block> saved_by_root;
  Var<T> norm_loss;
  {
    const Var<T> h = ts::exp(x);
    saved_by_root = h.value().storage();
    norm_loss = ts::norm(h);
  }
  norm_loss.backward();
  EXPECT_TRUE(saved_by_root.expired());
  EXPECT_TRUE(norm_loss.impl()->saved.empty());

  // With retain_graph the tape lives until a backward without it.
  std::weak_ptr<node> kept;
  {
    const Var<T> h = ts::tanh(x);
    kept = h.impl();
    loss = ts::sum(h * T(2));
  }
  loss.backward({}, true);
  EXPECT_FALSE(kept.expired());
  loss.backward();
  EXPECT_TRUE(kept.expired());

  // A Variable the user still holds survives, without its closure.
  const Var<T> held = ts::sigmoid(x);
  ts::sum(held).backward();
  EXPECT_FALSE(held.impl()->backward);
  EXPECT_TRUE(held.impl()->inputs.empty());
  EXPECT_TRUE(held.value().defined());

  // Dropping an un-run graph frees it too.
  std::weak_ptr<node> dropped;
  {
    const Var<T> l = ts::sum(ts::relu(x) * x);
    dropped = l.impl();
  }
  EXPECT_TRUE(dropped.expired());
}

TYPED_TEST(Autograd, DeepChainBackward) {
  using T = TypeParam;
  const Var<T> x = ts::param(tensor<T>({1, -1}, {2}));
  Var<T> y = x;
  constexpr int n = 10000;
  for (int i = 0; i < n; ++i) y = y * T(1.0001);
  {
    Var<T> z = y;
    for (int i = 0; i < n; ++i) z = z + x;  // x is read 10000 more times
    y = ts::sum(z);
  }
  y.backward();
  const double g = std::pow(static_cast<double>(T(1.0001)), n) + n;
  tt::expect_close(to_doubles(x.grad()), {g, g}, std::is_same_v<T, float> ? 1e-4 : 1e-9,
                   "10000 muls + 10000 adds");
  EXPECT_THROW(y.backward(), ts::error);
}

TYPED_TEST(Autograd, DroppingADeepUnrunHistory) {
  using T = TypeParam;
  // Freed without a backward (an evaluation pass outside no_grad, or an exception): unlinking
  // 300000 nodes recursively would overflow an 8 MiB stack.
  const Var<T> x = ts::param(tensor<T>({1}, {1}));
  std::weak_ptr<typename Var<T>::node> tail;
  {
    Var<T> y = x;
    for (int i = 0; i < 300000; ++i) y = y * T(1);
    tail = y.impl();
  }
  EXPECT_TRUE(tail.expired());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(x.value().defined());
}

TYPED_TEST(Autograd, ZeroSizeGradients) {
  using T = TypeParam;
  // linear with no input features: y = bias on every row, so d bias = the row count.
  const Var<T> x = ts::param(ts::zeros<T>(ts::Shape{3, 0}));
  const Var<T> w = ts::param(ts::zeros<T>(ts::Shape{5, 0}));
  const Var<T> b = ts::param(ts::ones<T>(ts::Shape{5}));
  ts::sum(ts::linear(x, w, b)).backward();
  EXPECT_EQ(x.grad().shape(), (ts::Shape{3, 0}));
  EXPECT_EQ(w.grad().shape(), (ts::Shape{5, 0}));
  tt::expect_close(to_doubles(b.grad()), {3, 3, 3, 3, 3}, 0, "linear in = 0");
  // No rows.
  const Var<T> x0 = ts::param(ts::zeros<T>(ts::Shape{0, 4}));
  const Var<T> w0 = ts::param(ts::ones<T>(ts::Shape{2, 4}));
  const Var<T> b0 = ts::param(ts::ones<T>(ts::Shape{2}));
  ts::sum(ts::linear(x0, w0, b0)).backward();
  EXPECT_EQ(x0.grad().shape(), (ts::Shape{0, 4}));
  tt::expect_close(to_doubles(b0.grad()), {0, 0}, 0, "linear N = 0, bias");
  tt::expect_close(to_doubles(w0.grad()), std::vector<double>(8, 0), 0, "linear N = 0");
  // matmul over an empty inner dim, and a reduction of an empty tensor.
  const Var<T> a = ts::param(ts::zeros<T>(ts::Shape{3, 0})),
               c = ts::param(ts::zeros<T>(ts::Shape{0, 2}));
  ts::sum(ts::matmul(a, c)).backward();
  EXPECT_EQ(a.grad().shape(), (ts::Shape{3, 0}));
  EXPECT_EQ(c.grad().shape(), (ts::Shape{0, 2}));
  const Var<T> e = ts::param(ts::zeros<T>(ts::Shape{0, 3}));
  ts::sum(e * T(2)).backward();
  EXPECT_EQ(e.grad().shape(), (ts::Shape{0, 3}));
}

// ---- convolution input gradient ----------------------------------------------------------------

TYPED_TEST(Autograd, FirstLayerConvSkipsInputGradient) {
  using T = TypeParam;
  const Var<T> x(random<T>({2, 3, 6, 6}, 11));  // data: no gradient wanted
  const Var<T> w = ts::param(random<T>({4, 3, 3, 3}, 12));
  const Var<T> b = ts::param(random<T>({4}, 13));
  const Var<T> y = ts::conv2d(x, w, b, ts::Conv2dOptions{.padding = {1, 1}, .relu = true});
  ASSERT_TRUE(y.requires_grad());
  // The tape does not even link the input, so its gradient cannot be computed.
  ASSERT_EQ(y.impl()->inputs.size(), 3u);
  EXPECT_FALSE(y.impl()->inputs[0]);
  ts::sum(y).backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(b.grad().defined());
  EXPECT_EQ(w.grad().shape(), w.shape());
  // The same for conv1d and without bias.
  const Var<T> x1(random<T>({2, 3, 8}, 14));
  const Var<T> w1 = ts::param(random<T>({2, 3, 3}, 15));
  ts::sum(ts::conv1d(x1, w1)).backward();
  EXPECT_FALSE(x1.grad().defined());
  EXPECT_TRUE(w1.grad().defined());
}

// ---- losses on tensors and Variables ---------------------------------------------------------

/// Cross-entropy per sample in double: -sum_j t_j log_softmax(x)_j with
/// t = (1 - s) onehot(label) + s / C; 0 for an ignored sample.
std::vector<double> ce_reference(const std::vector<double>& x, int64_t n, int64_t c,
                                 const std::vector<int64_t>& labels, double s, int64_t ignore) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (labels[static_cast<size_t>(i)] == ignore) continue;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < c; ++j) m = std::max(m, x[static_cast<size_t>(i * c + j)]);
    double z = 0;
    for (int64_t j = 0; j < c; ++j) z += std::exp(x[static_cast<size_t>(i * c + j)] - m);
    const double lse = m + std::log(z);
    double v = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double t =
          (j == labels[static_cast<size_t>(i)] ? 1 - s : 0) + s / static_cast<double>(c);
      v -= t * (x[static_cast<size_t>(i * c + j)] - lse);
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

TYPED_TEST(Autograd, CrossEntropyForwardMatchesReference) {
  using T = TypeParam;
  const int64_t n = 6, c = 5;
  const Ten<T> x = random<T>({n, c}, 20, -4, 4);
  const auto xd = to_doubles(x);
  const double rel = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  struct variant {
    std::vector<int64_t> labels;
    double smoothing;
    int64_t ignore;
  };
  const std::vector<variant> variants = {{{0, 4, 2, 1, 3, 2}, 0.0, -100},
                                         {{0, 4, 2, 1, 3, 2}, 0.1, -100},
                                         {{0, -100, 2, 1, -100, 2}, 0.0, -100},
                                         {{0, -100, 2, 1, -100, 2}, 0.25, -100},
                                         {{3, 4, 3, 1, 0, 2}, 0.1, 3}};
  for (const auto& v : variants) {
    const L labels = ts::from_vector<int64_t>(v.labels, {n});
    const auto per = ce_reference(xd, n, c, v.labels, v.smoothing, v.ignore);
    double total = 0;
    int64_t counted = 0;
    for (int64_t i = 0; i < n; ++i) {
      total += per[static_cast<size_t>(i)];
      counted += v.labels[static_cast<size_t>(i)] != v.ignore;
    }
    const std::string what =
        "smoothing " + std::to_string(v.smoothing) + " ignore " + std::to_string(v.ignore);
    ts::CrossEntropyOptions o{.label_smoothing = v.smoothing, .ignore_index = v.ignore};
    o.reduction = ts::Reduction::none;
    const Ten<T> none = ts::cross_entropy(x, labels, o);
    EXPECT_EQ(none.shape(), (ts::Shape{n}));
    tt::expect_close(to_doubles(none), per, rel, "none " + what);
    tt::expect_close(to_doubles(ts::cross_entropy(Var<T>(x), labels, o).value()), per, rel,
                     "Variable none " + what);
    o.reduction = ts::Reduction::sum;
    const Ten<T> s = ts::cross_entropy(x, labels, o);
    EXPECT_EQ(s.rank(), 0);
    EXPECT_NEAR(static_cast<double>(s.item()), total, rel * std::abs(total) + 1e-12) << what;
    o.reduction = ts::Reduction::mean;
    const double mean = total / static_cast<double>(counted);
    EXPECT_NEAR(static_cast<double>(ts::cross_entropy(x, labels, o).item()), mean,
                rel * std::abs(mean))
        << what;
    EXPECT_NEAR(static_cast<double>(ts::cross_entropy(ts::param(x), labels, o).item()), mean,
                rel * std::abs(mean))
        << what;
    // With probability targets equal to the (smoothed) one-hot rows: the same losses for the
    // samples that are not ignored.
    if (v.ignore == -100 && counted == n) {
      std::vector<double> onehot(static_cast<size_t>(n * c), 0.0);
      for (int64_t i = 0; i < n; ++i) onehot[static_cast<size_t>(i * c + v.labels[i])] = 1;
      o.reduction = ts::Reduction::none;
      tt::expect_close(
          to_doubles(ts::cross_entropy(Var<T>(x), Var<T>(tensor<T>(onehot, {n, c})), o).value()),
          per, 10 * rel, "probabilities " + what);
    }
    // nll_loss(log_softmax(x)) is cross_entropy without smoothing.
    if (v.smoothing == 0) {
      const ts::NLLLossOptions no{.reduction = ts::Reduction::none, .ignore_index = v.ignore};
      tt::expect_close(to_doubles(ts::nll_loss(ts::log_softmax(x, 1), labels, no)), per, 10 * rel,
                       "nll_loss " + what);
    }
  }
  // Mean over no counted samples is NaN, as PyTorch's.
  const L all_ignored = ts::from_vector<int64_t>({-100, -100, -100, -100, -100, -100}, {n});
  EXPECT_TRUE(std::isnan(static_cast<double>(ts::cross_entropy(x, all_ignored).item())));
}

TYPED_TEST(Autograd, CrossEntropyGradientIsSoftmaxMinusTarget) {
  using T = TypeParam;
  const Ten<T> xt = random<T>({3, 4}, 21);
  const L labels = ts::from_vector<int64_t>({2, 0, 3}, {3});
  const Var<T> x = ts::param(xt);
  ts::cross_entropy(x, labels, {.reduction = ts::Reduction::sum}).backward();
  const auto p = to_doubles(ts::softmax(xt, 1));
  std::vector<double> want = p;
  want[2] -= 1, want[4] -= 1, want[11] -= 1;
  tt::expect_close(to_doubles(x.grad()), want, 1e-5, "softmax - onehot");
}

TYPED_TEST(Autograd, SoftmaxSumsToOneAndIsStable) {
  using T = TypeParam;
  const Ten<T> x = random<T>({4, 7}, 22, -5, 5);
  for (int64_t d : {0, 1, -1}) {
    const Ten<T> p = ts::softmax(x, d);
    EXPECT_EQ(p.shape(), x.shape());
    const auto s = to_doubles(ts::sum(p, {d}));
    for (double v : s) EXPECT_NEAR(v, 1.0, 1e-5) << "dim " << d;
    // log_softmax is the log of softmax.
    const auto lp = to_doubles(ts::log_softmax(x, d)), pv = to_doubles(p);
    for (size_t i = 0; i < lp.size(); ++i) EXPECT_NEAR(std::exp(lp[i]), pv[i], 2e-6);
  }
  // Huge and very negative inputs: no overflow, the same as shifted ones.
  const Ten<T> big = tensor<T>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  const Ten<T> small = tensor<T>({0, 1, 2, 0, -1, -2}, {2, 3});
  const auto pb = to_doubles(ts::softmax(big, -1)), ps = to_doubles(ts::softmax(small, -1));
  const auto lb = to_doubles(ts::log_softmax(big, -1)), ls = to_doubles(ts::log_softmax(small, -1));
  for (size_t i = 0; i < pb.size(); ++i) {
    EXPECT_TRUE(std::isfinite(pb[i]) && std::isfinite(lb[i])) << i;
    EXPECT_NEAR(pb[i], ps[i], 1e-6) << i;
    EXPECT_NEAR(lb[i], ls[i], 2e-4) << i;
  }
  // Through a Variable, forward and backward stay finite.
  const Var<T> v = ts::param(big);
  ts::sum(ts::log_softmax(v, 1) * T(1) + ts::softmax(v, 1)).backward();
  for (double g : to_doubles(v.grad())) EXPECT_TRUE(std::isfinite(g));
  for (int64_t r = 0; r < 2; ++r) EXPECT_NEAR(pb[3 * r] + pb[3 * r + 1] + pb[3 * r + 2], 1, 1e-6);
  // A bad dim is an index_error, also for an empty tensor.
  EXPECT_THROW(ts::softmax(x, 2), ts::index_error);
  EXPECT_THROW(ts::log_softmax(x, -3), ts::index_error);
  EXPECT_THROW(ts::softmax(ts::zeros<T>(ts::Shape{2, 0}), 2), ts::index_error);
  // Empty in, empty out (also along an empty dim, where there is no maximum).
  EXPECT_EQ(ts::softmax(ts::zeros<T>(ts::Shape{2, 0}), 1).shape(), (ts::Shape{2, 0}));
  EXPECT_EQ(ts::log_softmax(ts::zeros<T>(ts::Shape{2, 0}), -1).shape(), (ts::Shape{2, 0}));
  EXPECT_EQ(ts::softmax(ts::zeros<T>(ts::Shape{0, 3}), 1).shape(), (ts::Shape{0, 3}));
  // -inf entries get probability 0 (log-probability -inf); the others are unaffected.
  const Ten<T> masked = tensor<T>({-INFINITY, 0, 1}, {1, 3});
  const auto pm = to_doubles(ts::softmax(masked, 1)), lm = to_doubles(ts::log_softmax(masked, 1));
  EXPECT_EQ(pm[0], 0);
  EXPECT_NEAR(pm[2], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_TRUE(std::isinf(lm[0]) && lm[0] < 0);
  EXPECT_NEAR(lm[2], -std::log1p(std::exp(-1.0)), 1e-6);
}

// ---- cat / stack ------------------------------------------------------------------------------

TYPED_TEST(Autograd, CatAndStackTensors) {
  using T = TypeParam;
  const Ten<T> a = tensor<T>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Ten<T> b = tensor<T>({7, 8, 9}, {1, 3});
  const Ten<T> c = tensor<T>({10, 11, 12, 13}, {2, 2});
  const Ten<T> r0 = ts::cat(std::vector<Ten<T>>{a, b}, 0);
  EXPECT_EQ(r0.shape(), (ts::Shape{3, 3}));
  tt::expect_close(to_doubles(r0), {1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, "cat 0");
  const Ten<T> r1 = ts::cat(std::vector<Ten<T>>{a, c}, -1);
  EXPECT_EQ(r1.shape(), (ts::Shape{2, 5}));
  tt::expect_close(to_doubles(r1), {1, 2, 3, 10, 11, 4, 5, 6, 12, 13}, 0, "cat -1");
  // Non-contiguous inputs and a zero-extent one.
  const Ten<T> r2 = ts::cat(
      std::vector<Ten<T>>{a.transpose(0, 1), ts::zeros<T>(ts::Shape{0, 2}), c.slice(0, 0, 2, 2)},
      0);
  EXPECT_EQ(r2.shape(), (ts::Shape{4, 2}));
  tt::expect_close(to_doubles(r2), {1, 4, 2, 5, 3, 6, 10, 11}, 0, "cat views");
  EXPECT_TRUE(r2.is_contiguous());

  const Ten<T> s0 = ts::stack(std::vector<Ten<T>>{a, a * T(2)}, 0);
  EXPECT_EQ(s0.shape(), (ts::Shape{2, 2, 3}));
  tt::expect_close(to_doubles(s0), {1, 2, 3, 4, 5, 6, 2, 4, 6, 8, 10, 12}, 0, "stack 0");
  const Ten<T> s2 = ts::stack(std::vector<Ten<T>>{a, a * T(2)}, -1);
  EXPECT_EQ(s2.shape(), (ts::Shape{2, 3, 2}));
  tt::expect_close(to_doubles(s2), {1, 2, 2, 4, 3, 6, 4, 8, 5, 10, 6, 12}, 0, "stack -1");
  EXPECT_EQ(ts::stack(std::vector<Ten<T>>{a, a}, 1).shape(), (ts::Shape{2, 2, 3}));
  EXPECT_EQ(ts::stack(std::vector<Ten<T>>{ts::full<T>(ts::Shape{}, T(1))}, 0).shape(),
            (ts::Shape{1}));

  // Errors.
  expect_error<ts::shape_error>([&] { ts::cat(std::vector<Ten<T>>{a, b}, 1); }, "cat", "tensor 1");
  expect_error<ts::shape_error>([&] { ts::cat(std::vector<Ten<T>>{a, c}, 0); }, "cat");
  expect_error<ts::shape_error>([&] { ts::cat(std::vector<Ten<T>>{a, a.reshape({6})}, 0); }, "cat");
  expect_error<ts::shape_error>([&] { ts::cat(std::vector<Ten<T>>{}, 0); }, "cat");
  expect_error<ts::shape_error>(
      [&] { ts::cat(std::vector<Ten<T>>{ts::full<T>(ts::Shape{}, T(1))}, 0); }, "cat", "0-d");
  expect_error<ts::index_error>([&] { ts::cat(std::vector<Ten<T>>{a, a}, 2); }, "cat", "axis");
  expect_error<ts::index_error>([&] { ts::cat(std::vector<Ten<T>>{a, a}, -3); }, "cat");
  expect_error<ts::shape_error>(
      [&] {
        ts::stack(std::vector<Ten<T>>{a, c}, 0);
      },
      "stack", "tensor 1");
  expect_error<ts::shape_error>([&] { ts::stack(std::vector<Ten<T>>{}, 0); }, "stack");
  expect_error<ts::index_error>([&] { ts::stack(std::vector<Ten<T>>{a, a}, 3); }, "stack");
  expect_error<ts::index_error>([&] { ts::stack(std::vector<Ten<T>>{a, a}, -4); }, "stack");
  expect_error<ts::error>([&] { ts::cat(std::vector<Ten<T>>{a, Ten<T>()}, 0); }, "cat");

  // The Variable forms check the same.
  const std::vector<Var<T>> va{ts::param(a), ts::param(c)};
  expect_error<ts::shape_error>([&] { ts::cat(va, 0); }, "cat");
  expect_error<ts::index_error>([&] { ts::cat(va, 5); }, "cat");
  expect_error<ts::shape_error>([&] { ts::stack(va, 0); }, "stack");
  expect_error<ts::shape_error>([&] { ts::stack(std::vector<Var<T>>{}, 0); }, "stack");
  expect_error<ts::index_error>([&] { ts::stack(std::vector<Var<T>>{va[0], va[0]}, 3); }, "stack");
  const Var<T> joined = ts::cat(va, 1);
  EXPECT_EQ(joined.shape(), (ts::Shape{2, 5}));
  joined.backward(ts::ones<T>(ts::Shape{2, 5}));
  EXPECT_EQ(va[0].grad().shape(), a.shape());
  EXPECT_EQ(va[1].grad().shape(), c.shape());
}

// ---- loss errors ------------------------------------------------------------------------------

TYPED_TEST(Autograd, LossErrorsNameTheOp) {
  using T = TypeParam;
  const Ten<T> x = random<T>({3, 4}, 30);
  const L labels = ts::from_vector<int64_t>({0, 1, 3}, {3});
  const L out_of_range = ts::from_vector<int64_t>({0, 4, 1}, {3});
  const L negative = ts::from_vector<int64_t>({0, 1, -1}, {3});
  const L short_labels = ts::from_vector<int64_t>({0, 1}, {2});

  expect_error<ts::shape_error>([&] { ts::cross_entropy(x.reshape({12}), labels.slice(0, 0, 1)); },
                                "cross_entropy", "[N, C]");
  expect_error<ts::shape_error>([&] { ts::cross_entropy(x, short_labels); }, "cross_entropy",
                                "labels of shape");
  expect_error<ts::shape_error>(
      [&] {
        ts::cross_entropy(x, labels.reshape({3, 1}));
      },
      "cross_entropy");
  expect_error<ts::index_error>([&] { ts::cross_entropy(x, out_of_range); }, "cross_entropy",
                                "label 4 of sample 1");
  expect_error<ts::index_error>([&] { ts::cross_entropy(x, negative); }, "cross_entropy",
                                "label -1 of sample 2");
  expect_error<ts::error>([&] { ts::cross_entropy(x, labels, {.label_smoothing = 1.5}); },
                          "cross_entropy", "label_smoothing");
  expect_error<ts::index_error>([&] { ts::nll_loss(x, out_of_range); }, "nll_loss", "label 4");
  expect_error<ts::shape_error>([&] { ts::nll_loss(x, short_labels); }, "nll_loss");
  expect_error<ts::shape_error>([&] { ts::nll_loss(x.reshape({3, 2, 2}), labels); }, "nll_loss");
  // A custom ignore_index admits its own value and no other out-of-range one.
  EXPECT_NO_THROW(ts::cross_entropy(x, negative, {.ignore_index = -1}));
  expect_error<ts::index_error>([&] { ts::cross_entropy(x, out_of_range, {.ignore_index = -1}); },
                                "cross_entropy");
  // Backward functions check their incoming gradient.
  expect_error<ts::shape_error>(
      [&] {
        ts::cross_entropy_backward(ts::ones<T>(ts::Shape{2}), x, labels,
                                   {.reduction = ts::Reduction::none});
      },
      "cross_entropy_backward");
  expect_error<ts::shape_error>(
      [&] { ts::nll_loss_backward(ts::ones<T>(ts::Shape{3}), x.shape(), labels); },
      "nll_loss_backward");
  // nll_loss_backward checks its labels too (a -1 would otherwise index the last column).
  expect_error<ts::index_error>(
      [&] { ts::nll_loss_backward(ts::ones<T>(ts::Shape{}), x.shape(), negative); },
      "nll_loss_backward", "label -1 of sample 2");
  expect_error<ts::shape_error>(
      [&] { ts::nll_loss_backward(ts::ones<T>(ts::Shape{}), x.shape(), short_labels); },
      "nll_loss_backward", "labels of shape");

  // The Variable overloads.
  const Var<T> v = ts::param(x);
  expect_error<ts::index_error>([&] { ts::cross_entropy(v, out_of_range); }, "cross_entropy",
                                "label 4");
  expect_error<ts::shape_error>([&] { ts::cross_entropy(v, short_labels); }, "cross_entropy");
  expect_error<ts::error>([&] { ts::cross_entropy(v, labels, {.label_smoothing = -0.1}); },
                          "cross_entropy", "label_smoothing");
  expect_error<ts::index_error>([&] { ts::nll_loss(v, out_of_range); }, "nll_loss");
  const Var<T> other = ts::param(random<T>({3, 5}, 31));
  expect_error<ts::shape_error>([&] { ts::cross_entropy(v, other); }, "cross_entropy");
  expect_error<ts::shape_error>(
      [&] { ts::cross_entropy(ts::reshape(v, {12}), ts::reshape(v, {12})); }, "cross_entropy",
      "[N, C]");
  expect_error<ts::shape_error>([&] { ts::mse_loss(v, other); }, "mse_loss", "differ");
  expect_error<ts::shape_error>([&] { ts::l1_loss(v, other); }, "l1_loss", "differ");
  expect_error<ts::shape_error>([&] { ts::binary_cross_entropy_with_logits(v, other); },
                                "binary_cross_entropy_with_logits", "differ");
  // No error left a half-recorded graph behind: v can still be trained.
  ts::cross_entropy(v, labels).backward();
  EXPECT_TRUE(v.grad().defined());
}

TYPED_TEST(Autograd, RegressionLossValues) {
  using T = TypeParam;
  const Ten<T> a = tensor<T>({1, -2, 3, 0.5}, {2, 2}), b = tensor<T>({0, 1, 1, 2}, {2, 2});
  const Var<T> va(a), vb(b);
  EXPECT_NEAR(static_cast<double>(ts::mse_loss(va, vb).item()), (1 + 9 + 4 + 2.25) / 4, 1e-6);
  EXPECT_NEAR(static_cast<double>(ts::mse_loss(va, vb, ts::Reduction::sum).item()), 16.25, 1e-5);
  EXPECT_NEAR(static_cast<double>(ts::l1_loss(va, vb).item()), (1 + 3 + 2 + 1.5) / 4, 1e-6);
  tt::expect_close(to_doubles(ts::l1_loss(va, vb, ts::Reduction::none).value()), {1, 3, 2, 1.5},
                   1e-6, "l1 none");
  // BCE with logits against log(1 + e^x) - x y, including large |x| that must not overflow.
  const Ten<T> x = tensor<T>({-100, -1, 0, 2, 100}, {5}), y = tensor<T>({0, 1, 0.5, 0.25, 1}, {5});
  const auto per = to_doubles(
      ts::binary_cross_entropy_with_logits(Var<T>(x), Var<T>(y), ts::Reduction::none).value());
  const std::vector<double> xs{-100, -1, 0, 2, 100}, ys{0, 1, 0.5, 0.25, 1};
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want =
        std::max(xs[i], 0.0) - xs[i] * ys[i] + std::log1p(std::exp(-std::abs(xs[i])));
    EXPECT_NEAR(per[i], want, 1e-5 * std::max(1.0, want)) << i;
  }
}

}  // namespace
