// Training on CUDA tensors: autograd, nn modules, losses and optimizers running on ts::cuda must
// follow the CPU run of the same model from the same weights step for step (same losses and
// weights to rounding). Every test skips, with a message, when no CUDA device is visible.
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>

#include "cuda_test_util.cuh"

namespace {
using namespace cuda_test;
namespace nn = ts::nn;

class CudaTrain : public CudaFixture {};

/// Copies every parameter of `from` (CPU) into the same-named parameter of `to` (CUDA).
template <class Model, class DevModel>
void copy_weights(const Model& from, DevModel& to) {
  const auto src = from.named_parameters();
  const auto dst = to.named_parameters();
  ASSERT_EQ(src.size(), dst.size());
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(src[i].first, dst[i].first);
    dst[i].second.value().copy_(src[i].second.value().template to<ts::cuda>());
  }
}

/// Both models' parameters agree to rtol / atol.
template <class Model, class DevModel>
void expect_same_weights(const Model& cpu, const DevModel& dev, double rtol, double atol,
                         const std::string& what) {
  const auto a = cpu.named_parameters();
  const auto b = dev.named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    expect_close(b[i].second.value().template to<ts::cpu>(), a[i].second.value(), rtol, atol,
                 what + " " + a[i].first);
}

/// A module built by make(backend) gives on CUDA what it gives on the CPU from the same weights:
/// the forward pass, the input's gradient, every parameter's gradient and every buffer (running
/// statistics), in training or evaluation mode.
template <class Make>
void expect_module_follows_cpu(Make make, const ts::Shape& in, const std::string& what,
                               bool training = true, double tol = 2e-5) {
  auto cpu = make(ts::cpu{});
  auto dev = make(ts::cuda{});
  copy_weights(cpu, dev);
  cpu.train(training), dev.train(training);
  ts::Generator gen(static_cast<uint64_t>(in.numel()) + what.size());
  const auto x = ts::randn<float, ts::cpu>(in, gen);
  ts::Variable<float, ts::cpu> xc(x, true);
  ts::Variable<float, ts::cuda> xd(x.to<ts::cuda>(), true);
  const auto yc = cpu(xc);
  const auto yd = dev(xd);
  expect_close(yd.value().template to<ts::cpu>(), yc.value(), tol, tol, what + " forward");
  const auto g = ts::randn<float, ts::cpu>(yc.shape(), gen);
  yc.backward(g);
  yd.backward(g.template to<ts::cuda>());
  expect_close(xd.grad().template to<ts::cpu>(), xc.grad(), tol, tol, what + " input gradient");
  const auto pc = cpu.named_parameters();
  const auto pd = dev.named_parameters();
  ASSERT_EQ(pc.size(), pd.size()) << what;
  for (size_t i = 0; i < pc.size(); ++i)
    expect_close(pd[i].second.grad().template to<ts::cpu>(), pc[i].second.grad(), tol, tol,
                 what + " gradient of " + pc[i].first);
  const auto bc = cpu.named_buffers();
  const auto bd = dev.named_buffers();
  ASSERT_EQ(bc.size(), bd.size()) << what;
  for (size_t i = 0; i < bc.size(); ++i)
    expect_close(bd[i].second.template to<ts::cpu>(), bc[i].second, tol, tol,
                 what + " buffer " + bc[i].first);
}

// Every layer of nn beyond the CNN's (those run in the tests below) on CUDA tensors.
TEST_F(CudaTrain, EveryLayerFollowsTheCpu) {
  expect_module_follows_cpu(
      [](auto b) { return nn::Conv1d<float, decltype(b)>(4, 6, 3, {.stride = 2, .padding = 1}); },
      {3, 4, 17}, "Conv1d");
  expect_module_follows_cpu(
      [](auto b) {
        return nn::ConvTranspose2d<float, decltype(b)>(4, 6, 3, {.stride = {2, 2}, .groups = 2});
      },
      {2, 4, 5, 6}, "ConvTranspose2d");
  expect_module_follows_cpu(
      [](auto b) {
        return nn::AdaptiveAvgPool2d<float, decltype(b)>({3, 2});
      },
      {2, 3, 7, 5}, "AdaptiveAvgPool2d");
  // Sequential's Conv2d, ReLU, MaxPool2d node (overlapping windows: gradients meet in the gather).
  expect_module_follows_cpu(
      [](auto b) {
        using B = decltype(b);
        return nn::Sequential{
            nn::Conv2d<float, B>(3, 5, 3, {.padding = {1, 1}}), nn::ReLU<float, B>(),
            nn::MaxPool2d<float, B>({.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})};
      },
      {2, 3, 9, 8}, "Conv2d + ReLU + MaxPool2d");
  expect_module_follows_cpu([](auto b) { return nn::GELU<float, decltype(b)>(); }, {4, 9}, "GELU");
  expect_module_follows_cpu([](auto b) { return nn::Tanh<float, decltype(b)>(); }, {4, 9}, "Tanh");
  expect_module_follows_cpu([](auto b) { return nn::Sigmoid<float, decltype(b)>(); }, {4, 9},
                            "Sigmoid");
  expect_module_follows_cpu([](auto b) { return nn::Softmax<float, decltype(b)>(1); }, {4, 9, 2},
                            "Softmax");
  for (bool training : {true, false}) {
    const std::string mode = training ? " (training)" : " (evaluation)";
    expect_module_follows_cpu([](auto b) { return nn::BatchNorm1d<float, decltype(b)>(5); }, {8, 5},
                              "BatchNorm1d" + mode, training);
    expect_module_follows_cpu([](auto b) { return nn::BatchNorm2d<float, decltype(b)>(3); },
                              {4, 3, 5, 6}, "BatchNorm2d" + mode, training);
  }
  expect_module_follows_cpu([](auto b) { return nn::Dropout<float, decltype(b)>(0.3); }, {4, 9},
                            "Dropout (evaluation: the identity)", false);
  expect_module_follows_cpu(
      [](auto b) {
        return nn::LayerNorm<float, decltype(b)>(ts::Shape{4, 5});
      },
      {3, 4, 5}, "LayerNorm");
}

// The optimizers' other variants, with gradient clipping, on CUDA parameters: the same steps as
// on the CPU. clip_grad_norm adds the squared norms on the device and waits once.
TEST_F(CudaTrain, OptimizerVariantsAndClippingFollowTheCpu) {
  auto make = [](auto b) {
    using B = decltype(b);
    return nn::Sequential<float, B>{nn::Linear<float, B>(6, 8), nn::Tanh<float, B>(),
                                    nn::Linear<float, B>(8, 3)};
  };
  ts::Generator gen(12);
  const auto x = ts::randn<float, ts::cpu>({16, 6}, gen);
  const auto y = ts::randint<int64_t, ts::cpu>(0, 3, {16}, gen);
  const auto xd = x.to<ts::cuda>();
  const auto yd = y.to<ts::cuda>();
  const auto run = [&](auto& model, auto& opt, const auto& in, const auto& labels) {
    using B = typename std::remove_cvref_t<decltype(in)>::backend_type;
    std::vector<double> norms;
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad();
      nn::cross_entropy(model(ts::Variable<float, B>(in)), labels).backward();
      norms.push_back(ts::optim::clip_grad_norm(model.parameters(), 0.2));
      opt.step();
    }
    return norms;
  };
  for (int variant = 0; variant < 3; ++variant) {
    auto cpu = make(ts::cpu{});
    auto dev = make(ts::cuda{});
    copy_weights(cpu, dev);
    std::vector<double> nc, nd;
    std::string what;
    if (variant == 0) {
      what = "SGD, Nesterov, weight decay";
      const ts::optim::SGDOptions o{
          .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
      ts::optim::SGD oc(cpu.parameters(), o);
      ts::optim::SGD od(dev.parameters(), o);
      nc = run(cpu, oc, x, y), nd = run(dev, od, xd, yd);
    } else if (variant == 1) {
      what = "Adam, AMSGrad, weight decay";
      const ts::optim::AdamOptions o{.lr = 0.05, .weight_decay = 0.01, .amsgrad = true};
      ts::optim::Adam oc(cpu.parameters(), o);
      ts::optim::Adam od(dev.parameters(), o);
      nc = run(cpu, oc, x, y), nd = run(dev, od, xd, yd);
    } else {
      what = "AdamW";
      ts::optim::AdamW oc(cpu.parameters());
      ts::optim::AdamW od(dev.parameters());
      nc = run(cpu, oc, x, y), nd = run(dev, od, xd, yd);
    }
    for (size_t i = 0; i < nc.size(); ++i)
      EXPECT_NEAR(nd[i], nc[i], 1e-5 * nc[i]) << what << ", gradient norm at step " << i;
    EXPECT_GT(nc.front(), 0.2) << what << ": the clipping was not exercised";
    expect_same_weights(cpu, dev, 1e-4, 1e-6, what);
  }
}

// Dropout in training on CUDA: elements are zeroed at about the rate p, the others scaled by
// 1 / (1 - p), and the gradient flows through the same mask; the mask is made on the device
// (one launch, no wait) and is the CPU's mask from the same generator state.
TEST_F(CudaTrain, DropoutMasksAndScalesOnTheDevice) {
  nn::Dropout<float, ts::cuda> drop(0.25);
  nn::Dropout<float, ts::cpu> drop_cpu(0.25);
  const auto x = ts::full<float, ts::cpu>({64, 64}, 2.0f);
  ts::Variable<float, ts::cuda> xd(x.to<ts::cuda>(), true);
  nn::manual_seed(77);
  const auto want = drop_cpu(ts::Variable<float, ts::cpu>(x)).value();
  nn::manual_seed(77);
  const ts::cuda_activity before = ts::cuda_activity_counts();
  const auto y = drop(xd);
  const ts::cuda_activity after = ts::cuda_activity_counts();
  EXPECT_EQ(after.host_waits, before.host_waits);
  EXPECT_EQ(after.launches - before.launches, 2);  // the mask, then x * mask
  expect_close(y.value().to<ts::cpu>(), want, 0, 0, "dropout: the CPU's mask");
  y.backward(ts::ones<float, ts::cuda>({64, 64}));
  const auto yv = y.value().to<ts::cpu>(), gv = xd.grad().to<ts::cpu>();
  int64_t zeros = 0;
  for (int64_t i = 0; i < yv.numel(); ++i) {
    const float v = yv.data()[i], gi = gv.data()[i];
    if (v == 0) {
      ++zeros;
      EXPECT_EQ(gi, 0.0f) << i;
    } else {
      EXPECT_NEAR(v, 2.0f / 0.75f, 1e-6) << i;
      EXPECT_NEAR(gi, 1.0f / 0.75f, 1e-6) << i;
    }
  }
  EXPECT_NEAR(double(zeros) / double(yv.numel()), 0.25, 0.03);
}

/// Autograd's max pooling backward on CUDA (the gather over its forward pass's windows) gives
/// the CPU's gradient, overlapping windows and padding included.
TEST_F(CudaTrain, AutogradMaxPoolingFollowsTheCpu) {
  ts::Generator gen(9);
  const ts::Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const auto x = ts::randn<float, ts::cpu>({2, 3, 9, 9}, gen);
  const auto g = ts::randn<float, ts::cpu>({2, 3, 5, 5}, gen);
  ts::Variable<float, ts::cpu> xc(x, true);
  ts::Variable<float, ts::cuda> xd(x.to<ts::cuda>(), true);
  ts::max_pool2d(xc, o).backward(g);
  ts::max_pool2d(xd, o).backward(g.to<ts::cuda>());
  expect_close(xd.grad().to<ts::cpu>(), xc.grad(), 0, 0, "autograd max_pool2d gradient");
}

// backward() of a loss seeds it with 1 from one shared device element instead of filling a new
// one (a launch per step); the seed is never written, whatever the graph does with it.
TEST_F(CudaTrain, TheDefaultSeedIsSharedAndNeverWritten) {
  ts::Generator gen(4);
  const auto x = ts::randn<float, ts::cpu>({5}, gen);
  ts::Variable<float, ts::cuda> p(x.to<ts::cuda>(), true);
  const auto loss_of = [&] { return ts::sum(p * p) + ts::sum(p); };
  loss_of().backward();  // the first backward makes the shared element
  p.zero_grad();
  const auto one = ts::ones<float, ts::cuda>({});
  auto given = loss_of();
  int64_t before = ts::cuda_activity_counts().launches;
  given.backward(one);
  const int64_t with_given_seed = ts::cuda_activity_counts().launches - before;
  auto seeded = loss_of();
  before = ts::cuda_activity_counts().launches;
  seeded.backward();
  const int64_t with_default_seed = ts::cuda_activity_counts().launches - before;
  EXPECT_EQ(with_default_seed, with_given_seed) << "the default seed launched a fill";
  // Two backward passes accumulated 2 (2x + 1) into the leaf.
  const auto want = (x * 4.f + 2.f).to_vector(), got = p.grad().to<ts::cpu>().to_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  // A one-element leaf as the root gets its own copy of the seed: writing it leaves the seed 1.
  ts::Variable<float, ts::cuda> q(ts::full<float, ts::cuda>({1}, 3.f), true);
  q.backward();
  auto qg = q.grad();
  qg += 5.f;
  EXPECT_EQ(q.grad().item(), 6.f);
  EXPECT_EQ((ts::autograd::detail::unit_seed<float, ts::cuda>(ts::Shape{}).item()), 1.f);
  // And a loss whose gradient passes the seed through unchanged (an identity view) to a node
  // that accumulates twice still leaves the seed alone.
  ts::Variable<float, ts::cuda> r(ts::full<float, ts::cuda>({1, 1}, 2.f), true);
  const auto v = ts::reshape(r, {1});
  ts::sum(v + v).backward();
  EXPECT_EQ(r.grad().to<ts::cpu>().to_vector(), std::vector<float>{2.f});
  EXPECT_EQ((ts::autograd::detail::unit_seed<float, ts::cuda>(ts::Shape{}).item()), 1.f);
}

// A training step (convolution, max pooling, linear layers, cross-entropy, SGD) queues its work
// without once waiting for the device: a wait halfway through would leave the device idle while
// the host queues the rest. Labels are checked on the device; max pooling's backward gathers
// from the forward pass's indices without a check.
TEST_F(CudaTrain, AStepNeverWaitsForTheDevice) {
  using B = ts::cuda;
  nn::Sequential<float, B> model{nn::Conv2d<float, B>(1, 4, 3, {.padding = {1, 1}}),
                                 nn::ReLU<float, B>(), nn::MaxPool2d<float, B>(2),
                                 nn::Flatten<float, B>(), nn::Linear<float, B>(4 * 3 * 3, 5)};
  ts::Generator gen(10);
  // The batch lives on the host and is uploaded every step, as in a training loop.
  const auto x = ts::randn<float, ts::cpu>({6, 1, 6, 6}, gen);
  const auto y = ts::randint<int64_t, ts::cpu>(0, 5, {6}, gen);
  ts::optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  const auto step = [&] {
    auto loss = nn::cross_entropy(model(ts::Variable<float, B>(x.to<B>())), y.to<B>());
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  const float first = step().item();  // first use builds what ops keep (waits allowed)
  const ts::cuda_activity before = ts::cuda_activity_counts();
  auto loss = step();
  const ts::cuda_activity after = ts::cuda_activity_counts();
  EXPECT_EQ(after.host_waits - before.host_waits, 0);
  EXPECT_GT(after.launches - before.launches, 10);
  for (int i = 0; i < 10; ++i) loss = step();
  EXPECT_LT(loss.item(), first) << "the model did not learn";
}

TEST_F(CudaTrain, MlpWithSgdFollowsTheCpuRun) {
  ts::Generator gen(7);
  nn::Sequential<float, ts::cpu> cpu{nn::Linear<float, ts::cpu>(20, 32), nn::ReLU<float, ts::cpu>(),
                                     nn::Linear<float, ts::cpu>(32, 4)};
  nn::Sequential<float, ts::cuda> dev{nn::Linear<float, ts::cuda>(20, 32),
                                      nn::ReLU<float, ts::cuda>(),
                                      nn::Linear<float, ts::cuda>(32, 4)};
  copy_weights(cpu, dev);
  const auto x = ts::randn<float, ts::cpu>({64, 20}, gen);
  // Learnable labels (the largest of the first four features), so the run makes progress.
  const auto y = ts::argmax(x.slice(1, 0, 4).contiguous(), {1});
  const auto xd = x.to<ts::cuda>();
  const auto yd = y.to<ts::cuda>();
  ts::optim::SGD opt_cpu(cpu.parameters(), {.lr = 0.2, .momentum = 0.5});
  ts::optim::SGD opt_dev(dev.parameters(), {.lr = 0.2, .momentum = 0.5});
  float first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    auto loss_cpu = nn::cross_entropy(cpu(ts::Variable<float, ts::cpu>(x)), y);
    auto loss_dev = nn::cross_entropy(dev(ts::Variable<float, ts::cuda>(xd)), yd);
    EXPECT_NEAR(loss_dev.item(), loss_cpu.item(), 1e-4 * std::abs(loss_cpu.item()) + 1e-6)
        << "step " << step;
    if (step == 0) first = loss_cpu.item();
    last = loss_cpu.item();
    opt_cpu.zero_grad(), opt_dev.zero_grad();
    loss_cpu.backward(), loss_dev.backward();
    opt_cpu.step(), opt_dev.step();
  }
  EXPECT_LT(last, first) << "the run did not learn: the comparison proves little";
  expect_same_weights(cpu, dev, 1e-3, 1e-5, "after 8 SGD steps");
}

TEST_F(CudaTrain, SmallCnnWithAdamFollowsTheCpuRun) {
  ts::Generator gen(8);
  auto make = [](auto backend) {
    using B = decltype(backend);
    return nn::Sequential<float, B>{nn::Conv2d<float, B>(1, 4, 3, {.padding = {1, 1}}),
                                    nn::ReLU<float, B>(),
                                    nn::MaxPool2d<float, B>(2),
                                    nn::Conv2d<float, B>(4, 6, 3, {.padding = {1, 1}}),
                                    nn::ReLU<float, B>(),
                                    nn::AvgPool2d<float, B>(2),
                                    nn::Flatten<float, B>(),
                                    nn::Linear<float, B>(6 * 2 * 2, 3)};
  };
  auto cpu = make(ts::cpu{});
  auto dev = make(ts::cuda{});
  copy_weights(cpu, dev);
  const auto x = ts::randn<float, ts::cpu>({8, 1, 8, 8}, gen);
  const auto y = ts::randint<int64_t, ts::cpu>(0, 3, {8}, gen);
  const auto xd = x.to<ts::cuda>();
  const auto yd = y.to<ts::cuda>();
  ts::optim::Adam opt_cpu(cpu.parameters(), {.lr = 1e-2});
  ts::optim::Adam opt_dev(dev.parameters(), {.lr = 1e-2});
  for (int step = 0; step < 5; ++step) {
    auto loss_cpu = nn::cross_entropy(cpu(ts::Variable<float, ts::cpu>(x)), y);
    auto loss_dev = nn::cross_entropy(dev(ts::Variable<float, ts::cuda>(xd)), yd);
    EXPECT_NEAR(loss_dev.item(), loss_cpu.item(), 1e-4 * std::abs(loss_cpu.item()) + 1e-6)
        << "step " << step;
    opt_cpu.zero_grad(), opt_dev.zero_grad();
    loss_cpu.backward(), loss_dev.backward();
    opt_cpu.step(), opt_dev.step();
  }
  expect_same_weights(cpu, dev, 1e-3, 1e-5, "after 5 Adam steps");
}

}  // namespace
