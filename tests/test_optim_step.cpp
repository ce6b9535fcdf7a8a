// Fused optimizer updates: sgd_step and adam_step against plain-loop references in double written
// from torch.optim.SGD / Adam / AdamW (_single_tensor_sgd, _single_tensor_adam), six consecutive
// steps per case. Every option combination that changes the formula (momentum, dampening,
// Nesterov, weight decay, maximize; Adam, AdamW, AMSGrad, betas), state that starts at zero or
// not (and a step count that starts later), sizes 0, 1, 7, 15, 16, 17, 1000 and 100003 (SIMD
// tails and the threaded path) on 1 and 2 threads; non-contiguous and expanded grads,
// non-contiguous param and state (written back without touching the memory around them), grads
// that alias the parameter, NaN propagation, results independent of the thread count, and every
// documented error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <tessera/tessera.hpp>
// Until the umbrella header includes them; the backend header comes first, as in tessera.hpp.
#include <tessera/backend/cpu/kernels.hpp>
#include <tessera/ops/optim_step.hpp>
#include <utility>
#include <vector>

#include "test_util.hpp"

namespace {
namespace ts = tessera;
using dvec = std::vector<double>;

// ---- references (double, PyTorch's single-tensor algorithms) --------------------------------
//
// Each value is carried with a magnitude: the same recurrence over absolute values (every sum
// turned into a sum of absolute values). Rounding in T is bounded by a few units of T's epsilon
// times that magnitude, so the tolerance scales with it: a momentum buffer that is a small
// difference of large terms is allowed the error those terms carry, and no more.

/// A vector of reference values and their magnitudes.
struct ref {
  dvec val, mag;
  ref() = default;
  explicit ref(dvec v) : val(std::move(v)), mag(val.size()) {
    for (size_t i = 0; i < val.size(); ++i) mag[i] = std::abs(val[i]);
  }
};

void sgd_reference(ref& p, ref& buf, const dvec& grad, const ts::SGDStepOptions& o,
                   bool first_step) {
  for (size_t i = 0; i < p.val.size(); ++i) {
    double g = o.maximize ? -grad[i] : grad[i], ga = std::abs(grad[i]);
    if (o.weight_decay != 0) {
      g += o.weight_decay * p.val[i];
      ga += o.weight_decay * p.mag[i];
    }
    if (o.momentum != 0) {
      buf.val[i] = first_step ? g : o.momentum * buf.val[i] + (1 - o.dampening) * g;
      buf.mag[i] = first_step ? ga : o.momentum * buf.mag[i] + std::abs(1 - o.dampening) * ga;
      g = o.nesterov ? g + o.momentum * buf.val[i] : buf.val[i];
      ga = o.nesterov ? ga + o.momentum * buf.mag[i] : buf.mag[i];
    }
    p.val[i] -= o.lr * g;
    p.mag[i] += o.lr * ga;
  }
}

/// torch.maximum: NaN if either is NaN.
double nan_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}

void adam_reference(ref& p, ref& m, ref& v, ref& vmax, const dvec& grad, int64_t step,
                    const ts::AdamStepOptions& o) {
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(step));
  for (size_t i = 0; i < p.val.size(); ++i) {
    double g = o.maximize ? -grad[i] : grad[i], ga = std::abs(grad[i]);
    if (o.weight_decay != 0) {
      if (o.decoupled_weight_decay) {
        p.val[i] *= 1 - o.lr * o.weight_decay;
        p.mag[i] *= std::abs(1 - o.lr * o.weight_decay);
      } else {
        g += o.weight_decay * p.val[i];
        ga += o.weight_decay * p.mag[i];
      }
    }
    m.val[i] = o.beta1 * m.val[i] + (1 - o.beta1) * g;
    m.mag[i] = o.beta1 * m.mag[i] + (1 - o.beta1) * ga;
    v.val[i] = o.beta2 * v.val[i] + (1 - o.beta2) * g * g;
    v.mag[i] = o.beta2 * v.mag[i] + (1 - o.beta2) * ga * ga;
    double vv = v.val[i];
    if (o.amsgrad) {
      vv = vmax.val[i] = nan_max(vmax.val[i], v.val[i]);
      vmax.mag[i] = nan_max(vmax.mag[i], v.mag[i]);
    }
    const double denom = std::sqrt(vv) / std::sqrt(bc2) + o.eps;
    p.val[i] -= o.lr / bc1 * (m.val[i] / denom);
    p.mag[i] += o.lr / bc1 * (m.mag[i] / denom);
  }
}

// ---- helpers ---------------------------------------------------------------------------------

/// Relative tolerance, of a value's magnitude, after a few steps computed in T: about 16 units
/// of float's epsilon, or 4500 of double's.
template <class T>
double tol() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-12;
}

/// got == want.val within rel * want.mag elementwise (NaN must match NaN).
template <class T>
void expect_close(const ts::Tensor<T>& got_t, const ref& want, const std::string& what) {
  const auto got = got_t.to_vector();
  ASSERT_EQ(got.size(), want.val.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = static_cast<double>(got[i]), w = want.val[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : std::abs(g - w) <= tol<T>() * want.mag[i];
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << ", element " << i << ": got " << g << ", want " << w
                    << " (magnitude " << want.mag[i] << ")";
    }
  }
}

template <class T>
ref ref_of(const ts::Tensor<T>& t) {
  return ref(tt::to_doubles(t));
}

std::string describe(const ts::SGDStepOptions& o, bool first) {
  return "sgd lr=" + std::to_string(o.lr) + " momentum=" + std::to_string(o.momentum) +
         " dampening=" + std::to_string(o.dampening) +
         " weight_decay=" + std::to_string(o.weight_decay) + (o.nesterov ? " nesterov" : "") +
         (o.maximize ? " maximize" : "") + (first ? " first_step" : " warm buffer");
}

std::string describe(const ts::AdamStepOptions& o, int64_t step0) {
  return "adam lr=" + std::to_string(o.lr) + " betas=" + std::to_string(o.beta1) + "," +
         std::to_string(o.beta2) + " eps=" + std::to_string(o.eps) +
         " weight_decay=" + std::to_string(o.weight_decay) +
         (o.decoupled_weight_decay ? " (AdamW)" : "") + (o.amsgrad ? " amsgrad" : "") +
         (o.maximize ? " maximize" : "") + " from step " + std::to_string(step0);
}

/// SGD on a tensor of shape s for six steps from fresh random param / buffer / grads, checked
/// against the reference after every step. With start_first the first step passes first_step
/// (the buffer's random contents must be ignored); otherwise the buffer starts warm.
template <class T>
void check_sgd(const ts::SGDStepOptions& o, bool start_first, const ts::Shape& s,
               ts::Generator& rng, const std::string& what) {
  auto p = tt::random_tensor<T>(s, rng), buf = tt::random_tensor<T>(s, rng);
  ref rp = ref_of(p), rb = ref_of(buf);
  const auto buf0 = buf.to_vector();
  for (int step = 1; step <= 6; ++step) {
    const auto g = tt::random_tensor<T>(s, rng);
    const bool first = start_first && step == 1;
    // Without momentum the buffer is optional: pass it on odd steps, to check it is untouched.
    const bool pass_buf = o.momentum != 0 || step % 2 == 1;
    ts::sgd_step(p, g, pass_buf ? buf : ts::Tensor<T>(), o, first);
    sgd_reference(rp, rb, tt::to_doubles(g), o, first);
    const std::string at = what + ", step " + std::to_string(step);
    expect_close(p, rp, at + ", param");
    if (o.momentum != 0) expect_close(buf, rb, at + ", buffer");
  }
  if (o.momentum == 0) {
    EXPECT_EQ(buf.to_vector(), buf0) << what << ": buffer was written";
  }
}

/// Adam state: zero (a fresh optimizer, from step 1) or random (a resumed one, from step 11).
template <class T>
struct adam_state {
  ts::Tensor<T> p, m, v, vmax;
  adam_state(const ts::Shape& s, ts::Generator& rng, bool warm)
      : p(tt::random_tensor<T>(s, rng)),
        m(warm ? tt::random_tensor<T>(s, rng, -1, 1) : ts::zeros<T>(s)),
        v(warm ? tt::random_tensor<T>(s, rng, 0, 2) : ts::zeros<T>(s)),
        vmax(warm ? tt::random_tensor<T>(s, rng, 0, 4) : ts::zeros<T>(s)) {}
};

template <class T>
void check_adam(const ts::AdamStepOptions& o, bool warm, const ts::Shape& s, ts::Generator& rng,
                const std::string& what) {
  adam_state<T> st(s, rng, warm);
  ref rp = ref_of(st.p), rm = ref_of(st.m), rv = ref_of(st.v), rvmax = ref_of(st.vmax);
  const auto vmax0 = st.vmax.to_vector();
  const int64_t step0 = warm ? 11 : 1;
  for (int64_t step = step0; step < step0 + 6; ++step) {
    const auto g = tt::random_tensor<T>(s, rng);
    // Without amsgrad max_exp_avg_sq is optional: pass it on odd steps (it must stay untouched).
    const bool pass_vmax = o.amsgrad || step % 2 == 1;
    ts::adam_step(st.p, g, st.m, st.v, pass_vmax ? st.vmax : ts::Tensor<T>(), step, o);
    adam_reference(rp, rm, rv, rvmax, tt::to_doubles(g), step, o);
    const std::string at = what + ", step " + std::to_string(step);
    expect_close(st.p, rp, at + ", param");
    expect_close(st.m, rm, at + ", exp_avg");
    expect_close(st.v, rv, at + ", exp_avg_sq");
    if (o.amsgrad) expect_close(st.vmax, rvmax, at + ", max_exp_avg_sq");
  }
  if (!o.amsgrad) {
    EXPECT_EQ(st.vmax.to_vector(), vmax0) << what << ": max_exp_avg_sq was written";
  }
}

const std::vector<int64_t> sizes = {0, 1, 7, 15, 16, 17, 1000, 100003};

std::vector<ts::SGDStepOptions> sgd_option_sets() {
  std::vector<ts::SGDStepOptions> out;
  for (double wd : {0.0, 0.05})
    for (bool maximize : {false, true}) {
      out.push_back({.lr = 0.1, .weight_decay = wd, .maximize = maximize});
      // Dampening is ignored without momentum.
      out.push_back({.lr = 0.1, .dampening = 0.3, .weight_decay = wd, .maximize = maximize});
      out.push_back({.lr = 0.1, .momentum = 0.9, .weight_decay = wd, .maximize = maximize});
      out.push_back(
          {.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = wd, .maximize = maximize});
      out.push_back(
          {.lr = 0.1, .momentum = 0.9, .weight_decay = wd, .nesterov = true, .maximize = maximize});
    }
  return out;
}

std::vector<ts::AdamStepOptions> adam_option_sets() {
  std::vector<ts::AdamStepOptions> out;
  const ts::AdamStepOptions hyper[] = {
      {.lr = 1e-2},  // default betas and eps
      {.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6},
      {.lr = 0.02, .beta1 = 0.0, .beta2 = 0.5, .eps = 1e-3},
  };
  for (const auto& h : hyper)
    for (int wd_mode = 0; wd_mode < 3; ++wd_mode)  // none, Adam's L2, AdamW's decoupled
      for (bool ams : {false, true})
        for (bool maximize : {false, true}) {
          ts::AdamStepOptions o = h;
          o.weight_decay = wd_mode ? 0.1 : 0.0;
          o.decoupled_weight_decay = wd_mode == 2;
          o.amsgrad = ams;
          o.maximize = maximize;
          out.push_back(o);
        }
  return out;
}

/// Restores the default thread count however a test ends.
struct thread_guard {
  ~thread_guard() { ts::set_num_threads(0); }
};

template <class T>
class OptimStep : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(OptimStep, Types);

// ---- agreement with the reference ------------------------------------------------------------

TYPED_TEST(OptimStep, SgdMatchesReference) {
  using T = TypeParam;
  thread_guard guard;
  ts::Generator rng(1);
  for (int threads : {1, 2}) {
    ts::set_num_threads(threads);
    for (int64_t n : sizes)
      for (const auto& o : sgd_option_sets())
        for (bool first : {true, false}) {
          if (o.momentum == 0 && !first) continue;  // first_step means nothing without momentum
          // Large sizes (the threaded path) take one option set per kernel instantiation:
          // maximize and dampening only change coefficients.
          // (On one thread they run the same code as n = 1000; ThreadCountDoesNotChangeResults
          // checks that one and two threads agree bit for bit.)
          if (n > 10000 && (o.maximize || o.dampening != 0 || threads == 1)) continue;
          check_sgd<T>(o, first, ts::Shape{n}, rng,
                       describe(o, first) + ", n=" + std::to_string(n) +
                           ", threads=" + std::to_string(threads));
        }
  }
}

TYPED_TEST(OptimStep, AdamMatchesReference) {
  using T = TypeParam;
  thread_guard guard;
  ts::Generator rng(2);
  for (int threads : {1, 2}) {
    ts::set_num_threads(threads);
    for (int64_t n : sizes)
      for (const auto& o : adam_option_sets())
        for (bool warm : {false, true}) {
          // Large sizes: one option set per kernel instantiation (and AdamW's factor).
          if (n > 10000 && (o.maximize || o.beta1 != 0.9 || threads == 1)) continue;
          check_adam<T>(o, warm, ts::Shape{n}, rng,
                        describe(o, warm ? 11 : 1) + ", n=" + std::to_string(n) +
                            ", threads=" + std::to_string(threads));
        }
  }
}

// ---- the multi-tensor forms ----------------------------------------------------------------

/// Bit-for-bit equality of two CPU tensors.
template <class T>
void expect_same_values(const ts::Tensor<T, ts::cpu>& got, const ts::Tensor<T, ts::cpu>& want,
                        const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.contiguous().to_vector(), w = want.contiguous().to_vector();
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_EQ(std::memcmp(&g[i], &w[i], sizeof(T)), 0) << what << " element " << i;
}

// One multi-tensor call equals one single-tensor call per entry, bit for bit: sizes that are and
// are not multiples of a vector, a transposed (non-contiguous) parameter, an empty one, entries
// at their first and later steps.
TYPED_TEST(OptimStep, MultiTensorStepsEqualOneStepPerTensor) {
  using T = TypeParam;
  ts::Generator rng(41);
  const auto draw = [&](ts::Shape s) { return ts::randn<T, ts::cpu>(s, rng); };
  const std::vector<ts::Shape> shapes = {{37}, {7, 5}, {0}, {1000}};
  const auto param_view = [](const ts::Tensor<T, ts::cpu>& t, size_t i) {
    return i == 1 ? t.transpose(0, 1) : t;  // entry 1: a [5, 7] view of a [7, 5] buffer
  };
  const ts::SGDStepOptions so{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2};
  std::vector<ts::Tensor<T, ts::cpu>> p1, p2, b1, b2, g;
  for (const auto& s : shapes) {
    p1.push_back(draw(s));
    p2.push_back(p1.back().clone());
    b1.push_back(draw(s));
    b2.push_back(b1.back().clone());
  }
  for (size_t i = 0; i < shapes.size(); ++i) g.push_back(draw(param_view(p1[i], i).shape()));
  std::vector<ts::SGDStepTensors<T, ts::cpu>> entries;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto bv = i == 1 ? b2[i].transpose(0, 1) : b2[i];
    entries.push_back({param_view(p2[i], i), g[i], bv, i % 2 == 0});
    ts::sgd_step(param_view(p1[i], i), g[i], i == 1 ? b1[i].transpose(0, 1) : b1[i], so,
                 i % 2 == 0);
  }
  ts::sgd_step(std::span<const ts::SGDStepTensors<T, ts::cpu>>(entries), so);
  for (size_t i = 0; i < shapes.size(); ++i) {
    expect_same_values(p2[i], p1[i], "sgd param " + std::to_string(i));
    expect_same_values(b2[i], b1[i], "sgd buffer " + std::to_string(i));
  }

  const ts::AdamStepOptions ao{.lr = 1e-2, .weight_decay = 1e-2, .amsgrad = true};
  const int64_t steps[] = {1, 3, 2, 7};
  std::vector<ts::Tensor<T, ts::cpu>> q1, q2, m1, m2, v1, v2, x1, x2;
  for (const auto& s : shapes) {
    q1.push_back(draw(s)), q2.push_back(q1.back().clone());
    m1.push_back(draw(s)), m2.push_back(m1.back().clone());
    v1.push_back(ts::abs(draw(s))), v2.push_back(v1.back().clone());
    x1.push_back(ts::abs(draw(s))), x2.push_back(x1.back().clone());
  }
  std::vector<ts::AdamStepTensors<T, ts::cpu>> adam_entries;
  for (size_t i = 0; i < shapes.size(); ++i) {
    adam_entries.push_back({q2[i], g[i].reshape(q2[i].shape()), m2[i], v2[i], x2[i], steps[i]});
    ts::adam_step(q1[i], g[i].reshape(q1[i].shape()), m1[i], v1[i], x1[i], steps[i], ao);
  }
  ts::adam_step(std::span<const ts::AdamStepTensors<T, ts::cpu>>(adam_entries), ao);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string at = " " + std::to_string(i);
    expect_same_values(q2[i], q1[i], "adam param" + at);
    expect_same_values(m2[i], m1[i], "adam exp_avg" + at);
    expect_same_values(v2[i], v1[i], "adam exp_avg_sq" + at);
    expect_same_values(x2[i], x1[i], "adam max_exp_avg_sq" + at);
  }
}

// Every entry is checked before anything is written: a bad later entry, or two entries writing
// one tensor, throws and leaves the earlier entries as they were.
TYPED_TEST(OptimStep, MultiTensorErrorsWriteNothing) {
  using T = TypeParam;
  ts::Generator rng(42);
  const auto w = ts::randn<T, ts::cpu>({8}, rng), g = ts::randn<T, ts::cpu>({8}, rng);
  const auto w2 = ts::randn<T, ts::cpu>({8}, rng), before = w.clone();
  using E = ts::SGDStepTensors<T, ts::cpu>;
  const ts::SGDStepOptions o{.lr = 0.1};
  const std::vector<E> bad_shape = {{w, g, {}, false},
                                    {w2, ts::randn<T, ts::cpu>({3}, rng), {}, false}};
  EXPECT_THROW(ts::sgd_step(std::span<const E>(bad_shape), o), ts::shape_error);
  expect_same_values(w, before, "after a bad grad shape in entry 1");
  const std::vector<E> shared = {{w, g, {}, false}, {w, g, {}, false}};
  try {
    ts::sgd_step(std::span<const E>(shared), o);
    ADD_FAILURE() << "two entries writing one tensor did not throw";
  } catch (const ts::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("entries 0 and 1"), std::string::npos) << e.what();
  }
  expect_same_values(w, before, "after two entries writing one tensor");
  using A = ts::AdamStepTensors<T, ts::cpu>;
  const auto m = ts::zeros<T, ts::cpu>({8}), v = ts::zeros<T, ts::cpu>({8});
  const std::vector<A> bad_step = {{w, g, m, v, {}, 1}, {w2, g, m.clone(), v.clone(), {}, 0}};
  EXPECT_THROW(ts::adam_step(std::span<const A>(bad_step), ts::AdamStepOptions{}), ts::error);
  expect_same_values(w, before, "after a bad step in entry 1");
}

TYPED_TEST(OptimStep, ScalarAndEmptyShapes) {
  using T = TypeParam;
  ts::Generator rng(3);
  const ts::SGDStepOptions so{.lr = 0.1, .momentum = 0.9, .nesterov = true};
  const ts::AdamStepOptions ao{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true};
  for (const ts::Shape& s : {ts::Shape{}, ts::Shape{0, 5}, ts::Shape{3, 0}, ts::Shape{2, 3, 4}}) {
    check_sgd<T>(so, true, s, rng, "sgd shape " + s.to_string());
    check_adam<T>(ao, true, s, rng, "adam shape " + s.to_string());
  }
}

// ---- layouts and aliasing -------------------------------------------------------------------

enum class view_kind { contiguous, transposed, strided, expanded };

/// A view of shape [R, C] in the given layout, filled from `values` (row-major, R*C of them).
/// Strided views sit in every other column of a buffer holding `fill` elsewhere; expanded views
/// broadcast the first row (only for read-only grads).
template <class T>
struct view_of {
  ts::Tensor<T> base, view;
  view_of(view_kind k, int64_t r, int64_t c, const ts::Tensor<T>& values, T fill) {
    switch (k) {
      case view_kind::contiguous:
        base = view = values.clone();
        break;
      case view_kind::transposed:
        base = values.transpose(0, 1).contiguous();
        view = base.transpose(0, 1);
        break;
      case view_kind::strided:
        base = ts::full<T>(ts::Shape{r, 2 * c + 1}, fill);
        view = base.slice(1, 1, 2 * c + 1, 2);
        view.copy_(values);
        break;
      case view_kind::expanded:
        base = values.slice(0, 0, 1).clone();
        view = base.expand({r, c});
        break;
    }
  }
};

const char* name_of(view_kind k) {
  switch (k) {
    case view_kind::contiguous:
      return "contiguous";
    case view_kind::transposed:
      return "transposed";
    case view_kind::strided:
      return "strided";
    case view_kind::expanded:
      return "expanded";
  }
  return "?";
}

/// In a strided view's buffer, every element outside the view still holds `fill`.
template <class T>
void expect_gaps_untouched(const view_of<T>& v, view_kind k, T fill, const std::string& what) {
  if (k != view_kind::strided) return;
  const auto all = v.base.to_vector();
  const int64_t w = v.base.shape()[1];
  for (size_t i = 0; i < all.size(); ++i)
    if (static_cast<int64_t>(i) % w % 2 == 0) {
      ASSERT_EQ(all[i], fill) << what << ": element " << i << " outside the view was written";
    }
}

TYPED_TEST(OptimStep, NonContiguousOperands) {
  using T = TypeParam;
  ts::Generator rng(4);
  const int64_t r = 13, c = 19;
  const ts::Shape s{r, c};
  const T fill = T(7.25);
  const view_kind written[] = {view_kind::contiguous, view_kind::transposed, view_kind::strided};
  const view_kind grads[] = {view_kind::contiguous, view_kind::transposed, view_kind::strided,
                             view_kind::expanded};
  for (view_kind kp : written)
    for (view_kind ks : written)
      for (view_kind kg : grads) {
        const std::string what = std::string("param ") + name_of(kp) + ", state " + name_of(ks) +
                                 ", grad " + name_of(kg);
        // SGD with Nesterov momentum and weight decay.
        {
          const ts::SGDStepOptions o{
              .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
          view_of<T> p(kp, r, c, tt::random_tensor<T>(s, rng), fill);
          view_of<T> b(ks, r, c, tt::random_tensor<T>(s, rng), fill);
          ref rp = ref_of(p.view), rb = ref_of(b.view);
          for (int step = 1; step <= 3; ++step) {
            view_of<T> g(kg, r, c, tt::random_tensor<T>(s, rng), fill);
            ts::sgd_step(p.view, g.view, b.view, o, step == 1);
            sgd_reference(rp, rb, tt::to_doubles(g.view), o, step == 1);
          }
          expect_close(p.view, rp, "sgd " + what + ", param");
          expect_close(b.view, rb, "sgd " + what + ", buffer");
          expect_gaps_untouched(p, kp, fill, "sgd " + what + ", param");
          expect_gaps_untouched(b, ks, fill, "sgd " + what + ", buffer");
        }
        // AdamW with AMSGrad, from warm state.
        {
          const ts::AdamStepOptions o{
              .lr = 0.05, .weight_decay = 0.1, .decoupled_weight_decay = true, .amsgrad = true};
          view_of<T> p(kp, r, c, tt::random_tensor<T>(s, rng), fill);
          view_of<T> m(ks, r, c, tt::random_tensor<T>(s, rng, -1, 1), fill);
          view_of<T> v(ks, r, c, tt::random_tensor<T>(s, rng, 0, 2), fill);
          view_of<T> vmax(ks, r, c, tt::random_tensor<T>(s, rng, 0, 4), fill);
          ref rp = ref_of(p.view), rm = ref_of(m.view), rv = ref_of(v.view),
              rvmax = ref_of(vmax.view);
          for (int64_t step = 5; step <= 7; ++step) {
            view_of<T> g(kg, r, c, tt::random_tensor<T>(s, rng), fill);
            ts::adam_step(p.view, g.view, m.view, v.view, vmax.view, step, o);
            adam_reference(rp, rm, rv, rvmax, tt::to_doubles(g.view), step, o);
          }
          expect_close(p.view, rp, "adam " + what + ", param");
          expect_close(m.view, rm, "adam " + what + ", exp_avg");
          expect_close(v.view, rv, "adam " + what + ", exp_avg_sq");
          expect_close(vmax.view, rvmax, "adam " + what + ", max");
          expect_gaps_untouched(p, kp, fill, "adam " + what + ", param");
          expect_gaps_untouched(m, ks, fill, "adam " + what + ", exp_avg");
          expect_gaps_untouched(v, ks, fill, "adam " + what + ", exp_avg_sq");
          expect_gaps_untouched(vmax, ks, fill, "adam " + what + ", max_exp_avg_sq");
        }
      }
}

TYPED_TEST(OptimStep, StateInRowsOfOneBuffer) {
  // Disjoint slices of one allocation are separate tensors: [3, n] holding param, exp_avg and
  // exp_avg_sq as rows.
  using T = TypeParam;
  ts::Generator rng(5);
  const int64_t n = 37;
  auto all = tt::random_tensor<T>(ts::Shape{3, n}, rng, 0, 2);
  auto p = all.select(0, 0), m = all.select(0, 1), v = all.select(0, 2);
  ref rp = ref_of(p), rm = ref_of(m), rv = ref_of(v), rvmax;
  const ts::AdamStepOptions o{.lr = 0.01};
  for (int64_t step = 3; step < 6; ++step) {
    const auto g = tt::random_tensor<T>(ts::Shape{n}, rng);
    ts::adam_step(p, g, m, v, ts::Tensor<T>(), step, o);
    adam_reference(rp, rm, rv, rvmax, tt::to_doubles(g), step, o);
  }
  expect_close(p, rp, "param");
  expect_close(m, rm, "exp_avg");
  expect_close(v, rv, "exp_avg_sq");
}

TYPED_TEST(OptimStep, GradAliasingParamIsReadBeforeTheUpdate) {
  using T = TypeParam;
  ts::Generator rng(6);
  // grad is param itself: param -= lr * param.
  {
    auto p = tt::random_tensor<T>(ts::Shape{33}, rng);
    const dvec before = tt::to_doubles(p);
    ref rp(before), rb;
    const ts::SGDStepOptions o{.lr = 0.25};
    ts::sgd_step(p, p, ts::Tensor<T>(), o, true);
    sgd_reference(rp, rb, before, o, true);
    expect_close(p, rp, "sgd grad == param");
  }
  // grad overlaps param shifted by 5 elements, in both directions.
  for (int shift : {5, -5}) {
    auto buf = tt::random_tensor<T>(ts::Shape{50}, rng);
    auto p = buf.slice(0, 5, 45), g = buf.slice(0, 5 + shift, 45 + shift);
    auto m = tt::random_tensor<T>(ts::Shape{40}, rng, -1, 1);
    auto v = tt::random_tensor<T>(ts::Shape{40}, rng, 0, 1);
    ref rp = ref_of(p), rm = ref_of(m), rv = ref_of(v), rvmax;
    const dvec grad = tt::to_doubles(g);
    const ts::AdamStepOptions o{.lr = 0.1, .weight_decay = 0.2};
    ts::adam_step(p, g, m, v, ts::Tensor<T>(), 4, o);
    adam_reference(rp, rm, rv, rvmax, grad, 4, o);
    const std::string what = "adam grad shifted by " + std::to_string(shift);
    expect_close(p, rp, what + ", param");
    expect_close(m, rm, what + ", exp_avg");
    expect_close(v, rv, what + ", exp_avg_sq");
  }
}

TYPED_TEST(OptimStep, ThreadCountDoesNotChangeResults) {
  // Bit-identical on 1 and 2 threads: the split moves the scalar tail, which computes exactly
  // as the vector lanes do.
  using T = TypeParam;
  thread_guard guard;
  const ts::Shape s{100003};
  auto run = [&](int threads) {
    ts::set_num_threads(threads);
    ts::Generator rng(7);
    adam_state<T> st(s, rng, true);
    auto buf = tt::random_tensor<T>(s, rng), q = st.p.clone();
    for (int64_t step = 1; step <= 3; ++step) {
      const auto g = tt::random_tensor<T>(s, rng);
      ts::adam_step(st.p, g, st.m, st.v, st.vmax, step,
                    {.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
      ts::sgd_step(q, g, buf, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
                   step == 1);
    }
    return std::vector<std::vector<T>>{st.p.to_vector(),    st.m.to_vector(), st.v.to_vector(),
                                       st.vmax.to_vector(), q.to_vector(),    buf.to_vector()};
  };
  const auto one = run(1), two = run(2);
  for (size_t k = 0; k < one.size(); ++k)
    for (size_t i = 0; i < one[k].size(); ++i)
      ASSERT_EQ(one[k][i], two[k][i]) << "tensor " << k << ", element " << i;
}

TYPED_TEST(OptimStep, NanPropagates) {
  // A NaN gradient poisons its own element only, on the vector path and in the tail; AMSGrad's
  // running maximum keeps a NaN as torch.maximum does.
  using T = TypeParam;
  ts::Generator rng(8);
  const int64_t n = 17;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t bad : {int64_t{3}, n - 1}) {
    adam_state<T> st(ts::Shape{n}, rng, true);
    auto gv = tt::random_tensor<T>(ts::Shape{n}, rng).to_vector();
    gv[bad] = static_cast<T>(nan);
    const auto g = ts::from_vector<T>(gv, ts::Shape{n});
    ref rp = ref_of(st.p), rm = ref_of(st.m), rv = ref_of(st.v), rvmax = ref_of(st.vmax);
    const ts::AdamStepOptions o{.lr = 0.01, .amsgrad = true};
    for (int64_t step = 1; step <= 2; ++step) {
      ts::adam_step(st.p, g, st.m, st.v, st.vmax, step, o);
      adam_reference(rp, rm, rv, rvmax, tt::to_doubles(g), step, o);
    }
    expect_close(st.p, rp, "param");
    expect_close(st.vmax, rvmax, "max_exp_avg_sq");
    EXPECT_TRUE(std::isnan(static_cast<double>(st.vmax.to_vector()[bad])));

    auto p = tt::random_tensor<T>(ts::Shape{n}, rng), b = tt::random_tensor<T>(ts::Shape{n}, rng);
    ref sp = ref_of(p), sb = ref_of(b);
    const ts::SGDStepOptions so{.lr = 0.1, .momentum = 0.9, .dampening = 0.1};
    ts::sgd_step(p, g, b, so, false);
    sgd_reference(sp, sb, tt::to_doubles(g), so, false);
    expect_close(p, sp, "sgd param");
    expect_close(b, sb, "sgd buffer");
  }
}

// ---- errors ------------------------------------------------------------------------------------

/// Runs f, expects exception E whose message contains every one of `parts`.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<std::string> parts, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no exception";
  } catch (const E& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << what << ": message \"" << e.what() << "\" lacks \"" << part << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception type: " << e.what();
  }
}

TYPED_TEST(OptimStep, SgdErrors) {
  using T = TypeParam;
  using Tn = ts::Tensor<T>;
  ts::Generator rng(9);
  const ts::Shape s{4, 5};
  const auto p = tt::random_tensor<T>(s, rng), g = tt::random_tensor<T>(s, rng),
             b = tt::random_tensor<T>(s, rng);
  const auto p0 = p.to_vector(), b0 = b.to_vector();
  const ts::SGDStepOptions mom{.momentum = 0.9};
  auto sgd = [&](const Tn& pp, const Tn& gg, const Tn& bb, const ts::SGDStepOptions& o) {
    return [=] { ts::sgd_step(pp, gg, bb, o, false); };
  };

  // Shapes.
  expect_error<ts::shape_error>(sgd(p, tt::random_tensor<T>(ts::Shape{5, 4}, rng), b, mom),
                                {"sgd_step", "grad", "[5, 4]", "[4, 5]"}, "grad shape");
  expect_error<ts::shape_error>(sgd(p, g, tt::random_tensor<T>(ts::Shape{20}, rng), mom),
                                {"sgd_step", "momentum_buffer", "[20]"}, "buffer shape");
  // A defined buffer is checked even when momentum is 0.
  expect_error<ts::shape_error>(sgd(p, g, tt::random_tensor<T>(ts::Shape{4, 4}, rng), {}),
                                {"momentum_buffer", "[4, 4]"}, "buffer shape, no momentum");
  expect_error<ts::shape_error>(
      sgd(tt::random_tensor<T>(ts::Shape{1, 5}, rng).expand({4, 5}), g, b, mom),
      {"sgd_step", "stride 0"}, "expanded param");
  expect_error<ts::shape_error>(
      sgd(p, g, tt::random_tensor<T>(ts::Shape{1, 5}, rng).expand({4, 5}), mom),
      {"sgd_step", "stride 0"}, "expanded buffer");
  expect_error<ts::shape_error>(sgd(p, g, p, mom), {"sgd_step", "param", "momentum_buffer"},
                                "buffer is param");
  {
    auto big = tt::random_tensor<T>(ts::Shape{30}, rng);
    expect_error<ts::shape_error>(
        sgd(big.slice(0, 0, 20).view({4, 5}), g, big.slice(0, 10, 30).view({4, 5}), mom),
        {"share memory"}, "buffer overlaps param");
  }
  // Missing or undefined tensors.
  expect_error<ts::error>(sgd(p, g, Tn(), mom), {"sgd_step", "momentum_buffer", "0.9"},
                          "missing buffer");
  expect_error<ts::error>(sgd(Tn(), g, b, mom), {"sgd_step", "param"}, "undefined param");
  expect_error<ts::error>(sgd(p, Tn(), b, mom), {"sgd_step", "grad"}, "undefined grad");
  // Options.
  const double inf = std::numeric_limits<double>::infinity(),
               nan = std::numeric_limits<double>::quiet_NaN();
  expect_error<ts::error>(sgd(p, g, b, {.lr = -0.1}), {"sgd_step", "lr = -0.1"}, "negative lr");
  expect_error<ts::error>(sgd(p, g, b, {.lr = nan}), {"sgd_step", "lr = nan"}, "NaN lr");
  expect_error<ts::error>(sgd(p, g, b, {.lr = inf}), {"sgd_step", "lr = inf"}, "infinite lr");
  expect_error<ts::error>(sgd(p, g, b, {.momentum = -0.5}), {"sgd_step", "momentum = -0.5"},
                          "negative momentum");
  expect_error<ts::error>(sgd(p, g, b, {.momentum = 0.9, .dampening = nan}),
                          {"sgd_step", "dampening = nan"}, "NaN dampening");
  expect_error<ts::error>(sgd(p, g, b, {.weight_decay = -1}), {"sgd_step", "weight_decay = -1"},
                          "negative weight_decay");
  expect_error<ts::error>(sgd(p, g, b, {.nesterov = true}),
                          {"sgd_step", "nesterov", "momentum = 0"}, "nesterov without momentum");
  expect_error<ts::error>(sgd(p, g, b, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                          {"sgd_step", "nesterov", "dampening = 0.1"}, "nesterov with dampening");
  // Nothing was written by any failing call.
  EXPECT_EQ(p.to_vector(), p0);
  EXPECT_EQ(b.to_vector(), b0);
  // Not an error: momentum 0 without a buffer, zero lr.
  EXPECT_NO_THROW(ts::sgd_step(p, g, Tn(), {.lr = 0}, false));
  EXPECT_EQ(p.to_vector(), p0);
}

TYPED_TEST(OptimStep, AdamErrors) {
  using T = TypeParam;
  using Tn = ts::Tensor<T>;
  ts::Generator rng(10);
  const ts::Shape s{6};
  const auto p = tt::random_tensor<T>(s, rng), g = tt::random_tensor<T>(s, rng),
             m = tt::random_tensor<T>(s, rng), v = tt::random_tensor<T>(s, rng, 0, 1),
             vmax = tt::random_tensor<T>(s, rng, 0, 1);
  const auto p0 = p.to_vector(), m0 = m.to_vector(), v0 = v.to_vector(), vmax0 = vmax.to_vector();
  const ts::AdamStepOptions ams{.amsgrad = true};
  auto adam = [&](const Tn& pp, const Tn& gg, const Tn& mm, const Tn& vv, const Tn& xx,
                  int64_t step, const ts::AdamStepOptions& o) {
    return [=] { ts::adam_step(pp, gg, mm, vv, xx, step, o); };
  };
  const auto wrong = tt::random_tensor<T>(ts::Shape{7}, rng);

  expect_error<ts::shape_error>(adam(p, wrong, m, v, vmax, 1, ams), {"adam_step", "grad", "[7]"},
                                "grad shape");
  expect_error<ts::shape_error>(adam(p, g, wrong, v, vmax, 1, ams), {"adam_step", "exp_avg", "[7]"},
                                "exp_avg shape");
  expect_error<ts::shape_error>(adam(p, g, m, wrong, vmax, 1, ams),
                                {"adam_step", "exp_avg_sq", "[7]"}, "exp_avg_sq shape");
  expect_error<ts::shape_error>(adam(p, g, m, v, wrong, 1, ams),
                                {"adam_step", "max_exp_avg_sq", "[7]"}, "max_exp_avg_sq shape");
  expect_error<ts::shape_error>(adam(p, g, m, v, wrong, 1, {}), {"max_exp_avg_sq", "[7]"},
                                "max_exp_avg_sq shape without amsgrad");
  expect_error<ts::shape_error>(adam(p, g, m, m, vmax, 1, ams), {"exp_avg", "exp_avg_sq", "share"},
                                "exp_avg_sq is exp_avg");
  expect_error<ts::shape_error>(adam(p, g, m, v, p, 1, ams), {"param", "max_exp_avg_sq", "share"},
                                "max_exp_avg_sq is param");
  expect_error<ts::shape_error>(
      adam(p, g, tt::random_tensor<T>(ts::Shape{1}, rng).expand({6}), v, vmax, 1, ams),
      {"adam_step", "stride 0"}, "expanded exp_avg");
  expect_error<ts::error>(adam(p, g, m, v, Tn(), 1, ams),
                          {"adam_step", "amsgrad", "max_exp_avg_sq"},
                          "amsgrad without max_exp_avg_sq");
  expect_error<ts::error>(adam(p, g, Tn(), v, vmax, 1, ams), {"adam_step", "exp_avg"},
                          "undefined exp_avg");
  expect_error<ts::error>(adam(p, g, m, Tn(), vmax, 1, ams), {"adam_step", "exp_avg_sq"},
                          "undefined exp_avg_sq");
  expect_error<ts::error>(adam(Tn(), g, m, v, vmax, 1, ams), {"adam_step", "param"},
                          "undefined param");
  expect_error<ts::error>(adam(p, Tn(), m, v, vmax, 1, ams), {"adam_step", "grad"},
                          "undefined grad");
  expect_error<ts::error>(adam(p, g, m, v, vmax, 0, ams), {"adam_step", "step = 0"}, "step 0");
  expect_error<ts::error>(adam(p, g, m, v, vmax, -3, ams), {"adam_step", "step = -3"},
                          "negative step");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error<ts::error>(adam(p, g, m, v, vmax, 1, {.lr = -1}), {"adam_step", "lr = -1"},
                          "negative lr");
  expect_error<ts::error>(adam(p, g, m, v, vmax, 1, {.lr = nan}), {"adam_step", "lr = nan"},
                          "NaN lr");
  expect_error<ts::error>(adam(p, g, m, v, vmax, 1, {.beta1 = 1}), {"adam_step", "beta1 = 1"},
                          "beta1 = 1");
  expect_error<ts::error>(adam(p, g, m, v, vmax, 1, {.beta1 = -0.1}), {"adam_step", "beta1 = -0.1"},
                          "negative beta1");
  expect_error<ts::error>(adam(p, g, m, v, vmax, 1, {.beta2 = 1.5}), {"adam_step", "beta2 = 1.5"},
                          "beta2 > 1");
  expect_error<ts::error>(adam(p, g, m, v, vmax, 1, {.beta2 = nan}), {"adam_step", "beta2 = nan"},
                          "NaN beta2");
  expect_error<ts::error>(adam(p, g, m, v, vmax, 1, {.eps = -1e-8}), {"adam_step", "eps = -1e-08"},
                          "negative eps");
  expect_error<ts::error>(adam(p, g, m, v, vmax, 1, {.weight_decay = -0.01}),
                          {"adam_step", "weight_decay = -0.01"}, "negative weight_decay");
  EXPECT_EQ(p.to_vector(), p0);
  EXPECT_EQ(m.to_vector(), m0);
  EXPECT_EQ(v.to_vector(), v0);
  EXPECT_EQ(vmax.to_vector(), vmax0);
}

TEST(OptimStepDtype, NonFloatingTypesRaiseDtypeError) {
  {
    const auto p = ts::zeros<int32_t>(ts::Shape{3});
    expect_error<ts::dtype_error>([&] { ts::sgd_step(p, p, ts::Tensor<int32_t>(), {}, true); },
                                  {"sgd_step", "int32"}, "sgd int32");
    expect_error<ts::dtype_error>([&] { ts::adam_step(p, p, p, p, p, 1, {}); },
                                  {"adam_step", "int32"}, "adam int32");
  }
  {
    const auto p = ts::zeros<ts::half>(ts::Shape{3});
    expect_error<ts::dtype_error>([&] { ts::sgd_step(p, p, ts::Tensor<ts::half>(), {}, true); },
                                  {"sgd_step", "float16"}, "sgd half");
    expect_error<ts::dtype_error>([&] { ts::adam_step(p, p, p, p, p, 1, {}); },
                                  {"adam_step", "float16"}, "adam half");
  }
}

}  // namespace
