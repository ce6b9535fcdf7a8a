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
