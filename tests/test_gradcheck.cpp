// gradcheck (double, CPU) of every op with a backward: elementwise ops and operators with
// broadcasting, scalar operators, unary math, user maps with derivatives, reductions over several
// axis sets, views, cat / stack, matmul / linear, convolutions and pooling, softmax and the
// losses. Each check runs on contiguous inputs and again on two non-contiguous relayouts of the
// same values (a transposed storage order, and a step-2 slice of a larger buffer in every dim),
// so that backward closures see inputs and saved tensors with odd strides; and with the output
// transposed or summed, so that the incoming gradient is a strided or zero-stride view. Inputs stay
// away from kinks (relu / abs / max at 0, ties in max / min / pooling) so that central differences
// are valid. The last tests prove that gradcheck reports a deliberately wrong backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <tessera/autograd.hpp>
#include <tessera/tessera.hpp>
#include <vector>

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_gradcheck {

namespace ts = tessera;
using T = ts::Tensor<double, ts::cpu>;
using V = ts::Variable<double, ts::cpu>;
using Vs = std::vector<V>;
using L = ts::Tensor<int64_t, ts::cpu>;

// ---- inputs ---------------------------------------------------------------------------------

/// Uniform values in [lo, hi).
T uniform(const ts::Shape& s, uint64_t seed, double lo = -2, double hi = 2) {
  ts::Generator g(seed);
  return ts::rand<double>(s, g, lo, hi);
}

/// Tensors of the given shapes whose values, all of them together, are pairwise at least
/// `spacing / 2` apart and at least `spacing / 4` away from 0: a shuffled grid with a little
/// jitter. Safe for relu, abs, max / min (no ties, within or across tensors) and pooling.
std::vector<T> distinct(const std::vector<ts::Shape>& shapes, uint64_t seed, double spacing = 0.1) {
  int64_t total = 0;
  for (const auto& s : shapes) total += s.numel();
  std::vector<int64_t> order(static_cast<size_t>(total));
  std::iota(order.begin(), order.end(), 0);
  ts::Generator g(seed);
  const T jitter = ts::rand<double>(ts::Shape{total}, g, -spacing / 4, spacing / 4);
  const T keys = ts::rand<double>(ts::Shape{total}, g, 0, 1);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys(a) < keys(b); });
  std::vector<T> out;
  int64_t k = 0;
  for (const auto& s : shapes) {
    std::vector<double> v(static_cast<size_t>(s.numel()));
    for (auto& e : v) {
      // Grid points (i - total/2 + 1/2) * spacing, so 0 falls midway between two of them.
      const double grid = (static_cast<double>(order[static_cast<size_t>(k)]) -
                           static_cast<double>(total) / 2 + 0.5) *
                          spacing;
      e = grid + jitter(k);
      ++k;
    }
    out.push_back(ts::from_vector<double>(v, s));
  }
  return out;
}
T distinct1(const ts::Shape& s, uint64_t seed, double spacing = 0.1) {
  return distinct({s}, seed, spacing)[0];
}

/// The layouts every check runs on.
enum class layout { contiguous, transposed, strided };
const char* name_of(layout l) {
  switch (l) {
    case layout::contiguous:
      return "contiguous";
    case layout::transposed:
      return "transposed";
    default:
      return "strided";
  }
}

/// t's values in a fresh tensor of the given layout (a tensor with fewer than two non-unit dims
/// has no transposed order and gets the strided one).
T relayout(const T& t, layout l) {
  if (t.rank() == 0 || t.numel() == 0 || l == layout::contiguous) return t.clone();
  if (l == layout::transposed && t.rank() >= 2) {
    std::vector<int64_t> rev(static_cast<size_t>(t.rank()));
    for (int d = 0; d < t.rank(); ++d) rev[static_cast<size_t>(d)] = t.rank() - 1 - d;
    T r = t.permute(rev).contiguous().permute(rev);
    if (!r.is_contiguous()) return r;  // else only one dim is not 1: no other order exists
  }
  // Every dim sliced with step 2 from offset 1 of a buffer twice as large, filled with junk.
  ts::Shape big = t.shape();
  for (int d = 0; d < t.rank(); ++d) big[d] = 2 * big[d] + 1;
  T view = ts::full<double>(big, 1e3);
  for (int d = 0; d < t.rank(); ++d) view = view.slice(d, 1, big[d], 2);
  view.copy_(t);
  return view;
}

/// Runs gradcheck of f on the inputs in each layout, and expects it to pass. Two more runs make
/// the gradient that reaches f's last op a view: f's output transposed (first and last dims), and
/// f's output summed (a zero-stride broadcast of the loss gradient).
void check(const std::string& what, const std::function<V(const Vs&)>& f,
           const std::vector<T>& inputs, const ts::autograd::GradcheckOptions& o = {}) {
  auto run = [&](const std::string& how, layout l, const std::function<V(const Vs&)>& g) {
    std::vector<T> xs;
    for (const auto& t : inputs) {
      xs.push_back(relayout(t, l));
      // The relayout must really change the strides (except where there is only one order).
      if (l != layout::contiguous && t.numel() > 1) {
        EXPECT_FALSE(xs.back().is_contiguous()) << what << " [" << name_of(l) << "]";
      }
    }
    const auto r = ts::gradcheck(g, xs, o);
    EXPECT_TRUE(r.ok) << what << " [" << name_of(l) << how << "]: " << r.message;
  };
  for (layout l : {layout::contiguous, layout::transposed, layout::strided}) run("", l, f);
  run(", output transposed", layout::strided, [&](const Vs& v) {
    const V y = f(v);
    return y.rank() < 2 ? y : ts::transpose(y, 0, -1);
  });
  run(", output summed", layout::contiguous, [&](const Vs& v) { return ts::sum(f(v)) * 0.75; });
}

std::string str(const ts::Shape& s) { return s.to_string(); }

// ---- elementwise ------------------------------------------------------------------------------

const std::vector<std::pair<ts::Shape, ts::Shape>> broadcast_pairs = {
    {{3, 4}, {3, 4}}, {{3, 1}, {1, 4}}, {{4}, {2, 3, 4}},   {{2, 3, 4}, {4}},
    {{2, 3}, {1}},    {{1}, {2, 3}},    {{2, 1, 4}, {3, 1}}};

TEST(Gradcheck, AddSubMulDivBroadcast) {
  uint64_t seed = 10;
  for (const auto& [sa, sb] : broadcast_pairs) {
    const std::string shapes = str(sa) + " x " + str(sb);
    const T a = uniform(sa, ++seed), b = uniform(sb, ++seed);
    const T pos = uniform(sb, ++seed, 0.5, 2.0);
    check("add " + shapes, [](const Vs& v) { return v[0] + v[1]; }, {a, b});
    check("sub " + shapes, [](const Vs& v) { return v[0] - v[1]; }, {a, b});
    check("mul " + shapes, [](const Vs& v) { return v[0] * v[1]; }, {a, b});
    check("div " + shapes, [](const Vs& v) { return v[0] / v[1]; }, {a, pos});
    check("named add/sub/mul/div " + shapes,
          [](const Vs& v) {
            return ts::div(ts::mul(ts::sub(ts::add(v[0], v[1]), v[1]), v[1]), v[1]);
          },
          {a, pos});
    // Reused operand: the two contributions to v[1] accumulate.
    check("a * b + b " + shapes, [](const Vs& v) { return v[0] * v[1] + v[1]; }, {a, b});
  }
}

TEST(Gradcheck, MaximumMinimumBroadcast) {
  uint64_t seed = 20;
  for (const auto& [sa, sb] : broadcast_pairs) {
    const std::string shapes = str(sa) + " x " + str(sb);
    const auto ab = distinct({sa, sb}, ++seed);
    check(
        "maximum " + shapes, [](const Vs& v) { return ts::maximum(v[0], v[1]); }, ab);
    check(
        "minimum " + shapes, [](const Vs& v) { return ts::minimum(v[0], v[1]); }, ab);
  }
}

TEST(Gradcheck, VariableWithTensorOperand) {
  const T a = uniform({3, 4}, 30), b = uniform({4}, 31), pos = uniform({3, 1}, 32, 0.5, 2);
  const T cb = b.clone(), cpos = pos.clone();
  check("Variable + Tensor", [cb](const Vs& v) { return v[0] + cb; }, {a});
  check("Tensor - Variable", [cb](const Vs& v) { return cb - v[0]; }, {a});
  check("Variable * Tensor", [cb](const Vs& v) { return v[0] * cb; }, {a});
  check("Tensor / Variable", [cb](const Vs& v) { return cb / v[0]; }, {pos});
  check("Variable / Tensor", [cpos](const Vs& v) { return v[0] / cpos; }, {a});
}

TEST(Gradcheck, ScalarOperators) {
  const T x = uniform({3, 4}, 40), pos = uniform({3, 4}, 41, 0.5, 2);
  check("x + 2.5", [](const Vs& v) { return v[0] + 2.5; }, {x});
  check("2.5 + x", [](const Vs& v) { return 2.5 + v[0]; }, {x});
  check("x - 1.5", [](const Vs& v) { return v[0] - 1.5; }, {x});
  check("1.5 - x", [](const Vs& v) { return 1.5 - v[0]; }, {x});
  check("x * -3", [](const Vs& v) { return v[0] * -3.0; }, {x});
  check("3 * x (int)", [](const Vs& v) { return 3 * v[0]; }, {x});
  check("x / 4", [](const Vs& v) { return v[0] / 4.0; }, {x});
  check("x / 2 (float)", [](const Vs& v) { return v[0] / 2.0f; }, {x});
  check("4 / x", [](const Vs& v) { return 4.0 / v[0]; }, {pos});
  check("-x (operator)", [](const Vs& v) { return -v[0]; }, {x});
  check("(2 - x) * x / 3 + 1", [](const Vs& v) { return (2.0 - v[0]) * v[0] / 3.0 + 1.0; }, {x});
}

TEST(Gradcheck, UnaryOps) {
  const ts::Shape s{3, 5};
  const T x = uniform(s, 50), pos = uniform(s, 51, 0.3, 2.5), d = distinct1(s, 52);
  check("neg", [](const Vs& v) { return ts::neg(v[0]); }, {x});
  check("relu", [](const Vs& v) { return ts::relu(v[0]); }, {d});
  check("sigmoid", [](const Vs& v) { return ts::sigmoid(v[0]); }, {x});
  check("tanh", [](const Vs& v) { return ts::tanh(v[0]); }, {x});
  check("sqrt", [](const Vs& v) { return ts::sqrt(v[0]); }, {pos});
  check("rsqrt", [](const Vs& v) { return ts::rsqrt(v[0]); }, {pos});
  check("exp", [](const Vs& v) { return ts::exp(v[0]); }, {x});
  check("log", [](const Vs& v) { return ts::log(v[0]); }, {pos});
  check("abs", [](const Vs& v) { return ts::abs(v[0]); }, {d});
  check("gelu", [](const Vs& v) { return ts::gelu(v[0]); }, {x});
  check("gelu_tanh", [](const Vs& v) { return ts::gelu_tanh(v[0]); }, {x});
  check("pow 3", [](const Vs& v) { return ts::pow(v[0], 3.0); }, {x});
  check("pow 2.5", [](const Vs& v) { return ts::pow(v[0], 2.5); }, {pos});
  check("pow -1.5", [](const Vs& v) { return ts::pow(v[0], -1.5); }, {pos});
  check("pow 0", [](const Vs& v) { return ts::pow(v[0], 0.0); }, {x});
  check("pow 1", [](const Vs& v) { return ts::pow(v[0], 1.0); }, {x});
  // Composition: each op's saved tensors are views / results of the previous one.
  check("tanh(exp(x) * sigmoid(x)) - log(sqrt(pos))",
        [](const Vs& v) {
          return ts::tanh(ts::exp(v[0]) * ts::sigmoid(v[0])) - ts::log(ts::sqrt(v[1]));
        },
        {x, pos});
}

TEST(Gradcheck, MapWithDerivative) {
  const T x = uniform({2, 3, 4}, 60), y = uniform({3, 1}, 61);
  check("map unary x^3",
        [](const Vs& v) {
          return ts::map([](double a) { return a * a * a; }, [](double a) { return 3 * a * a; },
                         v[0]);
        },
        {x});
  check("map unary sin",
        [](const Vs& v) {
          return ts::map([](double a) { return std::sin(a); }, [](double a) { return std::cos(a); },
                         v[0]);
        },
        {x});
  const auto f = [](double a, double b) { return a * std::sin(b) + b * b; };
  const auto dfa = [](double, double b) { return std::sin(b); };
  const auto dfb = [](double a, double b) { return a * std::cos(b) + 2 * b; };
  check("map binary same shape", [=](const Vs& v) { return ts::map(f, dfa, dfb, v[0], v[1]); },
        {x, uniform({2, 3, 4}, 62)});
  check("map binary broadcast [2,3,4] x [3,1]",
        [=](const Vs& v) { return ts::map(f, dfa, dfb, v[0], v[1]); }, {x, y});
  check("map binary broadcast [3,1] x [2,3,4]",
        [=](const Vs& v) { return ts::map(f, dfa, dfb, v[0], v[1]); }, {y, x});
}

// ---- reductions -------------------------------------------------------------------------------

const std::vector<ts::Axes> axis_sets = {{}, {0}, {1}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}};

std::string axes_str(const ts::Axes& a, bool keep) {
  return a.to_string() + (keep ? " keepdim" : "");
}

TEST(Gradcheck, SumMeanVarStd) {
  const ts::Shape s{2, 3, 4};
  const T x = uniform(s, 70);
  for (const auto& axes : axis_sets)
    for (bool keep : {false, true}) {
      const std::string a = axes_str(axes, keep);
      check("sum " + a, [=](const Vs& v) { return ts::sum(v[0], axes, keep); }, {x});
      check("mean " + a, [=](const Vs& v) { return ts::mean(v[0], axes, keep); }, {x});
      check("var " + a, [=](const Vs& v) { return ts::var(v[0], axes, keep); }, {x});
      check("var correction 0 " + a, [=](const Vs& v) { return ts::var(v[0], axes, keep, 0.0); },
            {x});
      check("std " + a, [=](const Vs& v) { return ts::std(v[0], axes, keep); }, {x});
      check("std correction 0 " + a, [=](const Vs& v) { return ts::std(v[0], axes, keep, 0.0); },
            {x});
    }
}

TEST(Gradcheck, MaxMinLogsumexpNorm) {
  const ts::Shape s{2, 3, 4};
  const T d = distinct1(s, 80), x = uniform(s, 81);
  for (const auto& axes : axis_sets)
    for (bool keep : {false, true}) {
      const std::string a = axes_str(axes, keep);
      check("max " + a, [=](const Vs& v) { return ts::max(v[0], axes, keep); }, {d});
      check("min " + a, [=](const Vs& v) { return ts::min(v[0], axes, keep); }, {d});
      check("logsumexp " + a, [=](const Vs& v) { return ts::logsumexp(v[0], axes, keep); }, {x});
      check("norm " + a, [=](const Vs& v) { return ts::norm(v[0], axes, keep); }, {x});
    }
}

// ---- views, cat, stack ------------------------------------------------------------------------

TEST(Gradcheck, Views) {
  const T x = uniform({2, 3, 4}, 90), u = uniform({2, 1, 3}, 91), c = uniform({3, 1}, 92);
  check("reshape {6, 4}", [](const Vs& v) { return ts::reshape(v[0], {6, 4}); }, {x});
  check("reshape {4, -1}", [](const Vs& v) { return ts::reshape(v[0], {4, -1}); }, {x});
  check("reshape span",
        [](const Vs& v) {
          const std::vector<int64_t> dims{3, 8};
          return ts::reshape(v[0], std::span<const int64_t>(dims));
        },
        {x});
  check("flatten", [](const Vs& v) { return ts::flatten(v[0]); }, {x});
  check("flatten 1..2", [](const Vs& v) { return ts::flatten(v[0], 1, 2); }, {x});
  check("flatten 0..1", [](const Vs& v) { return ts::flatten(v[0], 0, 1); }, {x});
  check("squeeze", [](const Vs& v) { return ts::squeeze(v[0]); }, {u});
  check("squeeze 1", [](const Vs& v) { return ts::squeeze(v[0], 1); }, {u});
  check("unsqueeze 0", [](const Vs& v) { return ts::unsqueeze(v[0], 0); }, {x});
  check("unsqueeze -1", [](const Vs& v) { return ts::unsqueeze(v[0], -1); }, {x});
  check("transpose 0 2", [](const Vs& v) { return ts::transpose(v[0], 0, 2); }, {x});
  check("transpose -1 1", [](const Vs& v) { return ts::transpose(v[0], -1, 1); }, {x});
  check("permute {2, 0, 1}", [](const Vs& v) { return ts::permute(v[0], {2, 0, 1}); }, {x});
  check("permute {1, 2, 0}", [](const Vs& v) { return ts::permute(v[0], {1, 2, 0}); }, {x});
  check("slice 2, 0..4 step 2", [](const Vs& v) { return ts::slice(v[0], 2, 0, 4, 2); }, {x});
  check("slice 1, 1..3", [](const Vs& v) { return ts::slice(v[0], 1, 1, 3); }, {x});
  check("slice -1, -3..end step 2", [](const Vs& v) { return ts::slice(v[0], -1, -3, 100, 2); },
        {x});
  check("select 0, 1", [](const Vs& v) { return ts::select(v[0], 0, 1); }, {x});
  check("select -1, -2", [](const Vs& v) { return ts::select(v[0], -1, -2); }, {x});
  check("expand [3,1] -> [2,3,4]",
        [](const Vs& v) {
          return ts::expand(v[0], ts::Shape{2, 3, 4});
        },
        {c});
  // Views feeding ops whose backward reads the view's saved value, and slices that overlap.
  check("transpose(x) * transpose(x)",
        [](const Vs& v) {
          const V t = ts::transpose(v[0], 0, 1);
          return t * t;
        },
        {x});
  check("overlapping slices",
        [](const Vs& v) { return ts::slice(v[0], 2, 0, 3) * ts::slice(v[0], 2, 1, 4); }, {x});
  check("select + select",
        [](const Vs& v) { return ts::select(v[0], 1, 0) + ts::select(v[0], 1, 2); }, {x});
}

TEST(Gradcheck, CatStack) {
  const T a = uniform({2, 3}, 100), b = uniform({4, 3}, 101), c = uniform({1, 3}, 102);
  const T p = uniform({2, 2}, 103), q = uniform({2, 5}, 104);
  check("cat dim 0", [](const Vs& v) { return ts::cat(Vs{v[0], v[1], v[2]}, 0); }, {a, b, c});
  check("cat dim 1", [](const Vs& v) { return ts::cat(Vs{v[0], v[1]}, 1); }, {p, q});
  check("cat dim -1", [](const Vs& v) { return ts::cat(Vs{v[0], v[1], v[0]}, -1); }, {p, q});
  const T x = uniform({2, 3}, 105), y = uniform({2, 3}, 106), z = uniform({2, 3}, 107);
  for (int64_t d : {0, 1, 2, -1}) {
    check("stack dim " + std::to_string(d),
          [d](const Vs& v) {
            return ts::stack(Vs{v[0], v[1], v[2]}, d);
          },
          {x, y, z});
  }
  // An input that does not require grad among ones that do.
  check("cat with a constant",
        [a](const Vs& v) {
          return ts::cat(Vs{v[0], V(a.clone()), v[1]}, 0);
        },
        {b, c});
}

// ---- matmul, linear ---------------------------------------------------------------------------

TEST(Gradcheck, Matmul) {
  const std::vector<std::pair<ts::Shape, ts::Shape>> cases = {
      {{3, 4}, {4, 5}},    {{4}, {4, 5}},       {{3, 4}, {4}},          {{4}, {4}},
      {{2, 3, 4}, {4, 5}}, {{3, 4}, {2, 4, 5}}, {{2, 3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}},
      {{4}, {2, 4, 3}},    {{2, 3, 4}, {4}}};
  uint64_t seed = 110;
  for (const auto& [sa, sb] : cases) {
    check("matmul " + str(sa) + " x " + str(sb), [](const Vs& v) { return ts::matmul(v[0], v[1]); },
          {uniform(sa, ++seed), uniform(sb, ++seed)});
  }
}

TEST(Gradcheck, Linear) {
  const T w = uniform({5, 4}, 120), b = uniform({5}, 121);
  check("linear with bias", [](const Vs& v) { return ts::linear(v[0], v[1], v[2]); },
        {uniform({3, 4}, 122), w, b});
  check("linear without bias", [](const Vs& v) { return ts::linear(v[0], v[1]); },
        {uniform({3, 4}, 123), w});
  check("linear 3-D input", [](const Vs& v) { return ts::linear(v[0], v[1], v[2]); },
        {uniform({2, 3, 4}, 124), w, b});
  check("linear 1-D input", [](const Vs& v) { return ts::linear(v[0], v[1], v[2]); },
        {uniform({4}, 125), w, b});
}

// ---- convolution, pooling ---------------------------------------------------------------------

TEST(Gradcheck, Conv1d) {
  const T x = uniform({2, 4, 9}, 130), w = uniform({6, 2, 3}, 131), b = uniform({6}, 132);
  const ts::Conv1dOptions o{.stride = 2, .padding = 1, .dilation = 2, .groups = 2};
  check("conv1d stride 2 pad 1 dil 2 groups 2 bias",
        [o](const Vs& v) { return ts::conv1d(v[0], v[1], v[2], o); }, {x, w, b});
  check("conv1d plain", [](const Vs& v) { return ts::conv1d(v[0], v[1]); },
        {x, uniform({3, 4, 3}, 133)});
  ts::Conv1dOptions r = o;
  r.relu = true;
  check("conv1d relu", [r](const Vs& v) { return ts::conv1d(v[0], v[1], v[2], r); }, {x, w, b});
  const ts::Conv1dOptions asym{.padding = 2, .padding_end = 0};
  check("conv1d asymmetric padding", [asym](const Vs& v) { return ts::conv1d(v[0], v[1], asym); },
        {x, uniform({3, 4, 3}, 134)});
}

TEST(Gradcheck, Conv2d) {
  const T x = uniform({2, 4, 7, 6}, 140), w = uniform({6, 2, 3, 3}, 141), b = uniform({6}, 142);
  const ts::Conv2dOptions o{.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}, .groups = 2};
  check("conv2d stride/pad/dilation/groups/bias",
        [o](const Vs& v) { return ts::conv2d(v[0], v[1], v[2], o); }, {x, w, b});
  check("conv2d plain", [](const Vs& v) { return ts::conv2d(v[0], v[1]); },
        {x, uniform({3, 4, 3, 2}, 143)});
  ts::Conv2dOptions r = o;
  r.relu = true;
  check("conv2d relu", [r](const Vs& v) { return ts::conv2d(v[0], v[1], v[2], r); }, {x, w, b});
  const ts::Conv2dOptions dw{.padding = {1, 1}, .groups = 4};
  check("conv2d depthwise", [dw](const Vs& v) { return ts::conv2d(v[0], v[1], v[2], dw); },
        {x, uniform({4, 1, 3, 3}, 144), uniform({4}, 145)});
  const ts::Conv2dOptions one{.stride = {2, 2}};
  check("conv2d 1x1 stride 2", [one](const Vs& v) { return ts::conv2d(v[0], v[1], one); },
        {x, uniform({5, 4, 1, 1}, 146)});
}

TEST(Gradcheck, ConvTranspose2d) {
  const T x = uniform({2, 4, 3, 4}, 150), b = uniform({3}, 151);
  const ts::ConvTranspose2dOptions o{.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}};
  check("conv_transpose2d stride 2 output_padding 1 bias",
        [o](const Vs& v) { return ts::conv_transpose2d(v[0], v[1], v[2], o); },
        {x, uniform({4, 3, 3, 3}, 152), b});
  const ts::ConvTranspose2dOptions g{.stride = {2, 1}, .output_padding = {1, 0}, .groups = 2};
  check("conv_transpose2d groups 2 no bias",
        [g](const Vs& v) { return ts::conv_transpose2d(v[0], v[1], g); },
        {x, uniform({4, 2, 2, 3}, 153)});
}

TEST(Gradcheck, Pooling) {
  const T x = distinct1({2, 3, 6, 7}, 160);
  const ts::Pool2dOptions p22{.kernel = {2, 2}};
  const ts::Pool2dOptions p32{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const ts::Pool2dOptions pdil{
      .kernel = {2, 3}, .stride = {1, 2}, .dilation = {2, 1}, .ceil_mode = true};
  check("max_pool2d 2x2", [p22](const Vs& v) { return ts::max_pool2d(v[0], p22); }, {x});
  check("max_pool2d 3x3/2 pad 1 (overlapping)",
        [p32](const Vs& v) { return ts::max_pool2d(v[0], p32); }, {x});
  check("max_pool2d dilation ceil_mode", [pdil](const Vs& v) { return ts::max_pool2d(v[0], pdil); },
        {x});
  check("avg_pool2d 2x2", [p22](const Vs& v) { return ts::avg_pool2d(v[0], p22); }, {x});
  check("avg_pool2d 3x3/2 pad 1", [p32](const Vs& v) { return ts::avg_pool2d(v[0], p32); }, {x});
  ts::Pool2dOptions nopad = p32;
  nopad.count_include_pad = false;
  nopad.ceil_mode = true;
  check("avg_pool2d exclude pad, ceil_mode",
        [nopad](const Vs& v) { return ts::avg_pool2d(v[0], nopad); }, {x});
  check("adaptive_avg_pool2d {3, 2}",
        [](const Vs& v) {
          return ts::adaptive_avg_pool2d(v[0], {3, 2});
        },
        {x});
  check("adaptive_avg_pool2d {4, 5}",
        [](const Vs& v) {
          return ts::adaptive_avg_pool2d(v[0], {4, 5});
        },
        {x});
  check("global_avg_pool2d", [](const Vs& v) { return ts::global_avg_pool2d(v[0]); }, {x});
  check("global_avg_pool2d rank 3", [](const Vs& v) { return ts::global_avg_pool2d(v[0]); },
        {uniform({3, 4, 5}, 161)});
}

// ---- softmax and losses -----------------------------------------------------------------------

TEST(Gradcheck, SoftmaxLogSoftmax) {
  const T x = uniform({3, 5}, 170, -3, 3), y = uniform({2, 3, 4}, 171, -3, 3);
  for (int64_t d : {0, -1}) {
    const std::string s = " dim " + std::to_string(d);
    check("softmax" + s, [d](const Vs& v) { return ts::softmax(v[0], d); }, {x});
    check("log_softmax" + s, [d](const Vs& v) { return ts::log_softmax(v[0], d); }, {x});
  }
  check("softmax 3-D dim 1", [](const Vs& v) { return ts::softmax(v[0], 1); }, {y});
  check("log_softmax 3-D dim 1", [](const Vs& v) { return ts::log_softmax(v[0], 1); }, {y});
}

const std::vector<std::pair<ts::Reduction, const char*>> reductions = {
    {ts::Reduction::none, "none"}, {ts::Reduction::mean, "mean"}, {ts::Reduction::sum, "sum"}};

TEST(Gradcheck, CrossEntropyLabels) {
  const T x = uniform({4, 5}, 180, -3, 3);
  const L labels = ts::from_vector<int64_t>({1, 0, 4, 2}, {4});
  const L with_ignored = ts::from_vector<int64_t>({1, -100, 4, 2}, {4});
  const L custom_ignored = ts::from_vector<int64_t>({3, 0, 3, 2}, {4});
  // Labels through a strided view.
  const L big = ts::from_vector<int64_t>({1, 9, 0, 9, 4, 9, 2, 9}, {8});
  const L strided_labels = big.slice(0, 0, 8, 2);
  for (const auto& red : reductions) {
    const ts::Reduction r = red.first;
    const char* rn = red.second;
    const std::string n = std::string(" reduction ") + rn;
    for (double smooth : {0.0, 0.1}) {
      const std::string s = n + " smoothing " + std::to_string(smooth);
      const ts::CrossEntropyOptions o{.reduction = r, .label_smoothing = smooth};
      check("cross_entropy" + s, [&](const Vs& v) { return ts::cross_entropy(v[0], labels, o); },
            {x});
      check("cross_entropy ignore -100" + s,
            [&](const Vs& v) { return ts::cross_entropy(v[0], with_ignored, o); }, {x});
      ts::CrossEntropyOptions oi = o;
      oi.ignore_index = 3;
      check("cross_entropy ignore 3" + s,
            [&](const Vs& v) { return ts::cross_entropy(v[0], custom_ignored, oi); }, {x});
      check("cross_entropy strided labels" + s,
            [&](const Vs& v) { return ts::cross_entropy(v[0], strided_labels, o); }, {x});
    }
  }
}

TEST(Gradcheck, CrossEntropyProbabilities) {
  const T x = uniform({4, 5}, 190, -3, 3);
  const T target = ts::softmax(uniform({4, 5}, 191, -2, 2), 1);
  for (const auto& red : reductions)
    for (double smooth : {0.0, 0.1}) {
      const char* rn = red.second;
      const ts::CrossEntropyOptions o{.reduction = red.first, .label_smoothing = smooth};
      check(std::string("cross_entropy probabilities reduction ") + rn + " smoothing " +
                std::to_string(smooth),
            [o](const Vs& v) { return ts::cross_entropy(v[0], v[1], o); }, {x, target});
    }
}

TEST(Gradcheck, NllLoss) {
  const T lp = uniform({4, 5}, 200, -3, 0);
  const L labels = ts::from_vector<int64_t>({1, 0, 4, 2}, {4});
  const L with_ignored = ts::from_vector<int64_t>({1, 2, -100, 2}, {4});
  for (const auto& red : reductions) {
    const ts::Reduction r = red.first;
    const char* rn = red.second;
    const ts::NLLLossOptions o{.reduction = r};
    check(std::string("nll_loss reduction ") + rn,
          [&](const Vs& v) { return ts::nll_loss(v[0], labels, o); }, {lp});
    check(std::string("nll_loss ignore reduction ") + rn,
          [&](const Vs& v) { return ts::nll_loss(v[0], with_ignored, o); }, {lp});
    check(std::string("nll_loss(log_softmax) reduction ") + rn,
          [&](const Vs& v) { return ts::nll_loss(ts::log_softmax(v[0], 1), labels, o); },
          {uniform({4, 5}, 201)});
  }
}

TEST(Gradcheck, RegressionAndBinaryLosses) {
  const auto it = distinct({{3, 4}, {3, 4}}, 210);
  const T logits = uniform({3, 4}, 211, -3, 3), target = uniform({3, 4}, 212, 0, 1);
  for (const auto& red : reductions) {
    const ts::Reduction r = red.first;
    const char* rn = red.second;
    const std::string n = std::string(" reduction ") + rn;
    check(
        "mse_loss" + n, [r](const Vs& v) { return ts::mse_loss(v[0], v[1], r); }, it);
    check(
        "l1_loss" + n, [r](const Vs& v) { return ts::l1_loss(v[0], v[1], r); }, it);
    check("binary_cross_entropy_with_logits" + n,
          [r](const Vs& v) { return ts::binary_cross_entropy_with_logits(v[0], v[1], r); },
          {logits, target});
  }
  check(
      "mse_loss default (mean)", [](const Vs& v) { return ts::mse_loss(v[0], v[1]); }, it);
}

// ---- a small network end to end ---------------------------------------------------------------

TEST(Gradcheck, ConvNetEndToEnd) {
  const T x = uniform({2, 2, 6, 6}, 220), w1 = uniform({3, 2, 3, 3}, 221), b1 = uniform({3}, 222);
  const T w2 = uniform({4, 3 * 3 * 3}, 223), b2 = uniform({4}, 224);
  const L labels = ts::from_vector<int64_t>({3, 1}, {2});
  const ts::Conv2dOptions co{.padding = {1, 1}};
  const ts::Pool2dOptions po{.kernel = {2, 2}};
  check("conv -> tanh -> avg_pool -> flatten -> linear -> cross_entropy",
        [&](const Vs& v) {
          const V h = ts::avg_pool2d(ts::tanh(ts::conv2d(v[0], v[1], v[2], co)), po);
          return ts::cross_entropy(ts::linear(ts::flatten(h, 1), v[3], v[4]), labels);
        },
        {x, w1, b1, w2, b2});
}

// ---- gradcheck itself -------------------------------------------------------------------------

/// x^2 with a backward of g * k * x: correct for k = 2 only.
V square_with_backward(const V& x, double k) {
  return ts::autograd::detail::record(
      "square", x.value() * x.value(), {&x}, {x.value()},
      [xv = x.value(), k](const ts::autograd::backward_context<double, ts::cpu>& c) {
        c.give(0, c.grad() * xv * k);
      });
}

TEST(Gradcheck, ReportsAWrongBackward) {
  const T x = uniform({3, 4}, 230, 0.5, 2);
  const auto good = ts::gradcheck([](const Vs& v) { return square_with_backward(v[0], 2.0); }, {x});
  EXPECT_TRUE(good.ok) << good.message;
  for (layout l : {layout::contiguous, layout::transposed, layout::strided}) {
    const auto bad = ts::gradcheck([](const Vs& v) { return square_with_backward(v[0], 3.0); },
                                   {relayout(x, l)});
    EXPECT_FALSE(bad.ok) << name_of(l);
    EXPECT_FALSE(static_cast<bool>(bad));
    EXPECT_NE(bad.message.find("input 0"), std::string::npos) << bad.message;
    EXPECT_NE(bad.message.find("analytic"), std::string::npos) << bad.message;
    EXPECT_NE(bad.message.find("numeric"), std::string::npos) << bad.message;
  }
  // A wrong gradient on the second input only is attributed to it.
  const auto second =
      ts::gradcheck([](const Vs& v) { return v[0] * 2.0 + square_with_backward(v[1], 2.5); },
                    {uniform({2}, 231), uniform({2}, 232, 0.5, 2)});
  EXPECT_FALSE(second.ok);
  EXPECT_NE(second.message.find("input 1"), std::string::npos) << second.message;
}

TEST(Gradcheck, ReportsAMissingGradient) {
  // The output depends on x, but the backward gives nothing.
  const auto r = ts::gradcheck(
      [](const Vs& v) {
        return ts::autograd::detail::record(
            "scale", v[0].value() * 2.0, {&v[0]}, {},
            [](const ts::autograd::backward_context<double, ts::cpu>&) {});
      },
      {uniform({3}, 240)});
  EXPECT_FALSE(r.ok);
  // An input the function does not read is fine with no gradient.
  const auto unused =
      ts::gradcheck([](const Vs& v) { return v[0] * 3.0; }, {uniform({3}, 241), uniform({2}, 242)});
  EXPECT_TRUE(unused.ok) << unused.message;
}

}  // namespace test_gradcheck
