// Tests of the optimizer classes (SGD, Adam, AdamW), the learning-rate schedules and gradient
// clipping, against plain reference loops in double (torch.optim semantics).
#include <gtest/gtest.h>

#include <cmath>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_optim {

namespace ts = tessera;
namespace optim = ts::optim;
using V = ts::Variable<double, ts::cpu>;

std::vector<V> make_params() {
  ts::Generator g(21);
  return {ts::param(ts::randn<double, ts::cpu>({3, 4}, g)),
          ts::param(ts::randn<double, ts::cpu>({5}, g))};
}
// The loss whose gradients drive the tests: sum(p^3 / 3 + p) over both parameters, so grad =
// p^2 + 1 changes every step.
void compute_grads(const std::vector<V>& ps) {
  V loss;
  for (const auto& p : ps) {
    V term = ts::sum(p * p * p * (1.0 / 3) + p);
    loss = loss.defined() ? loss + term : term;
  }
  loss.backward();
}
std::vector<std::vector<double>> values(const std::vector<V>& ps) {
  std::vector<std::vector<double>> out;
  for (const auto& p : ps) out.push_back(p.value().to_vector());
  return out;
}
void expect_close(const std::vector<std::vector<double>>& a,
                  const std::vector<std::vector<double>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < a[i].size(); ++k)
      EXPECT_NEAR(a[i][k], b[i][k], 1e-12 * (1 + std::abs(b[i][k]))) << i << "," << k;
}

void check_sgd(optim::SGDOptions o) {
  auto ps = make_params();
  auto ref = values(ps);
  std::vector<std::vector<double>> buf(ref.size());
  optim::SGD opt(ps, o);
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    compute_grads(ps);
    opt.step();
    for (size_t i = 0; i < ref.size(); ++i) {
      if (step == 0) buf[i].assign(ref[i].size(), 0);
      for (size_t k = 0; k < ref[i].size(); ++k) {
        double p = ref[i][k], g = p * p + 1;
        if (o.maximize) g = -g;
        g += o.weight_decay * p;
        if (o.momentum != 0) {
          buf[i][k] = step == 0 ? g : o.momentum * buf[i][k] + (1 - o.dampening) * g;
          g = o.nesterov ? g + o.momentum * buf[i][k] : buf[i][k];
        }
        ref[i][k] = p - o.lr * g;
      }
    }
    expect_close(values(ps), ref);
  }
}

TEST(Optim, SGDMatchesReference) {
  check_sgd({.lr = 0.05});
  check_sgd({.lr = 0.05, .momentum = 0.9});
  check_sgd({.lr = 0.02, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.1});
  check_sgd({.lr = 0.02, .momentum = 0.9, .nesterov = true});
  check_sgd({.lr = 0.01, .momentum = 0.5, .weight_decay = 0.01, .maximize = true});
}

void check_adam(optim::AdamOptions o, bool decoupled) {
  auto ps = make_params();
  auto ref = values(ps);
  std::vector<std::vector<double>> m(ref.size()), v(ref.size()), vmax(ref.size());
  std::unique_ptr<optim::Optimizer<double, ts::cpu>> opt;
  if (decoupled)
    opt = std::make_unique<optim::AdamW<double, ts::cpu>>(ps, o);
  else
    opt = std::make_unique<optim::Adam<double, ts::cpu>>(ps, o);
  const double b1 = o.betas[0], b2 = o.betas[1];
  for (int step = 1; step <= 6; ++step) {
    opt->zero_grad();
    compute_grads(ps);
    opt->step();
    for (size_t i = 0; i < ref.size(); ++i) {
      if (step == 1) m[i] = v[i] = vmax[i] = std::vector<double>(ref[i].size(), 0);
      for (size_t k = 0; k < ref[i].size(); ++k) {
        double p = ref[i][k], g = p * p + 1;
        if (o.maximize) g = -g;
        if (decoupled)
          p *= 1 - o.lr * o.weight_decay;
        else
          g += o.weight_decay * p;
        m[i][k] = b1 * m[i][k] + (1 - b1) * g;
        v[i][k] = b2 * v[i][k] + (1 - b2) * g * g;
        vmax[i][k] = std::max(vmax[i][k], v[i][k]);
        const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
        const double vv = o.amsgrad ? vmax[i][k] : v[i][k];
        ref[i][k] = p - o.lr / bc1 * m[i][k] / (std::sqrt(vv) / std::sqrt(bc2) + o.eps);
      }
    }
    expect_close(values(ps), ref);
  }
}

TEST(Optim, AdamAndAdamWMatchReference) {
  check_adam({.lr = 0.01}, false);
  check_adam({.lr = 0.01, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1}, false);
  check_adam({.lr = 0.01, .weight_decay = 0.05, .amsgrad = true}, false);
  check_adam({.lr = 0.01, .weight_decay = 0.01}, true);
  check_adam({.lr = 0.02, .weight_decay = 0.1, .amsgrad = true, .maximize = true}, true);
  auto ps = make_params();
  optim::AdamW defaults(ps);  // CTAD, weight_decay 0.01 by default
  EXPECT_DOUBLE_EQ(defaults.lr(), 1e-3);
}

TEST(Optim, SkipsParametersWithoutGradientsAndHonoursSetLr) {
  auto ps = make_params();
  optim::SGD opt(ps, {.lr = 0.1, .momentum = 0.9});
  const auto before = ps[1].value().to_vector();
  ps[0].zero_grad();
  ts::sum(ps[0] * 2.0).backward();  // only ps[0] gets a gradient
  opt.step();
  EXPECT_EQ(ps[1].value().to_vector(), before);
  EXPECT_FALSE(opt.momentum_buffer(1).defined());
  EXPECT_TRUE(opt.momentum_buffer(0).defined());
  opt.set_lr(0);
  const auto frozen = ps[0].value().to_vector();
  opt.zero_grad();
  ts::sum(ps[0] * 2.0).backward();
  opt.step();
  EXPECT_EQ(ps[0].value().to_vector(), frozen);
  EXPECT_THROW(opt.set_lr(-1), ts::error);
}

TEST(Optim, ConstructorErrors) {
  auto ps = make_params();
  EXPECT_THROW(optim::SGD(ps, {.lr = 0.1, .nesterov = true}), ts::error);
  EXPECT_THROW(optim::SGD(ps, {.lr = -0.1}), ts::error);
  std::vector<V> not_param{V(ts::zeros<double, ts::cpu>({2}))};
  EXPECT_THROW(optim::SGD(not_param, {}), ts::error);
  std::vector<V> non_leaf{ps[0] * 2.0};
  EXPECT_THROW(optim::Adam(non_leaf, {}), ts::error);
}

TEST(Optim, Schedules) {
  auto ps = make_params();
  optim::SGD opt(ps, {.lr = 1.0});
  optim::StepLR step(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 5; ++i) step.step(), lrs.push_back(opt.lr());
  EXPECT_EQ(lrs, (std::vector<double>{1.0, 0.5, 0.5, 0.25, 0.25}));

  optim::SGD opt2(ps, {.lr = 2.0});
  optim::CosineAnnealingLR cos(opt2, 4, 0.5);
  cos.step();
  EXPECT_NEAR(opt2.lr(), 0.5 + 1.5 * (1 + std::cos(M_PI / 4)) / 2, 1e-15);
  for (int i = 0; i < 3; ++i) cos.step();
  EXPECT_NEAR(opt2.lr(), 0.5, 1e-15);
  cos.step();
  EXPECT_NEAR(opt2.lr(), 0.5, 1e-15);  // stays at eta_min after t_max

  optim::SGD opt3(ps, {.lr = 0.3});
  optim::LinearWarmup warm(opt3, 3, 0.1);
  EXPECT_NEAR(opt3.lr(), 0.03, 1e-15);
  warm.step();
  EXPECT_NEAR(opt3.lr(), 0.3 * (0.1 + 0.9 / 3), 1e-15);
  warm.step(), warm.step(), warm.step();
  EXPECT_NEAR(opt3.lr(), 0.3, 1e-15);

  EXPECT_THROW(optim::StepLR(opt, 0), ts::error);
  EXPECT_THROW(optim::CosineAnnealingLR(opt, 0), ts::error);
  EXPECT_THROW(optim::LinearWarmup(opt, 3, 0.0), ts::error);
}

TEST(Optim, ClipGradNorm) {
  auto ps = make_params();
  ps.push_back(ts::param(ts::ones<double, ts::cpu>({2})));  // never gets a gradient
  compute_grads({ps[0], ps[1]});
  double want = 0;
  for (int i = 0; i < 2; ++i)
    for (double g : ps[i].grad().to_vector()) want += g * g;
  want = std::sqrt(want);
  const auto g0 = ps[0].grad().to_vector();
  EXPECT_NEAR(optim::clip_grad_norm(ps, 1e9), want, 1e-12 * want);
  EXPECT_EQ(ps[0].grad().to_vector(), g0);  // below the limit: untouched
  EXPECT_NEAR(optim::clip_grad_norm(ps, 0.5), want, 1e-12 * want);
  double after = 0;
  for (int i = 0; i < 2; ++i)
    for (double g : ps[i].grad().to_vector()) after += g * g;
  EXPECT_NEAR(std::sqrt(after), 0.5, 1e-6);
  EXPECT_THROW(optim::clip_grad_norm(ps, 0), ts::error);
}

// End to end: fitting a linear model with SGD + momentum and with Adam lowers the loss 100x.
TEST(Optim, TrainsALinearRegression) {
  for (int which = 0; which < 2; ++which) {
    ts::Generator g(5);
    const auto x = ts::randn<float, ts::cpu>({256, 4}, g);
    const auto w_true = ts::from_vector<float, ts::cpu>({1.5f, -2.f, 0.5f, 3.f}, {4, 1});
    const auto y = ts::Variable<float, ts::cpu>(ts::matmul(x, w_true) + 0.7f);
    ts::nn::manual_seed(9);
    ts::nn::Linear<float, ts::cpu> model(4, 1);
    std::unique_ptr<optim::Optimizer<float, ts::cpu>> opt;
    if (which == 0)
      opt = std::make_unique<optim::SGD<float, ts::cpu>>(
          model.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    else
      opt = std::make_unique<optim::Adam<float, ts::cpu>>(model.parameters(),
                                                          optim::AdamOptions{.lr = 0.05});
    double first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
      auto loss = ts::nn::mse_loss(model(x), y);
      if (step == 0) first = loss.item();
      last = loss.item();
      opt->zero_grad();
      loss.backward();
      opt->step();
    }
    EXPECT_LT(last, first / 100) << (which ? "Adam" : "SGD");
  }
}

}  // namespace test_optim
