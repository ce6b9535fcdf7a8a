// scaled_dot_product_attention on CUDA tensors against the CPU on the same inputs: the fused
// kernels (heads up to 128) forward and backward over masks, the causal rule, lengths across the
// kernels' 64-row blocks and 16-row tiles, and strided views; the composition past 128; half.
// Every test skips, with a message, when no CUDA device is visible.
#include <tessera/autograd.hpp>

#include "cuda_test_util.cuh"

namespace {
using namespace cuda_test;

template <class T>
class CudaAttention : public CudaFixture {};
using AttentionDtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CudaAttention, AttentionDtypes);

template <class T>
double attention_tol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

TYPED_TEST(CudaAttention, ForwardMatchesCpu) {
  using T = TypeParam;
  const double tol = attention_tol<T>();
  struct shape_case {
    int64_t lq, lk, d, dv;
  };
  const shape_case cases[] = {
      {1, 1, 8, 8}, {70, 33, 32, 32}, {130, 130, 64, 48}, {17, 90, 128, 128}, {5, 200, 16, 24}};
  for (const shape_case& c : cases) {
    const std::string what =
        "lq " + std::to_string(c.lq) + " lk " + std::to_string(c.lk) + " d " + std::to_string(c.d);
    const auto q = sample<T>({2, 2, c.lq, c.d}, 1), k = sample<T>({2, 2, c.lk, c.d}, 2),
               v = sample<T>({2, 2, c.lk, c.dv}, 3);
    HostT<bool> keep = ts::full<bool, ts::cpu>({2, 1, 1, c.lk}, true);
    if (c.lk > 3) keep.slice(3, c.lk - 3, c.lk).fill_(false);
    const auto add = sample<T>({c.lq, c.lk}, 4);
    expect_same(
        "plain " + what, tol, tol,
        [](const auto& a, const auto& b, const auto& x) {
          return ts::scaled_dot_product_attention(a, b, x);
        },
        q, k, v);
    expect_same(
        "key padding " + what, tol, tol,
        [](const auto& a, const auto& b, const auto& x, const auto& m) {
          return ts::scaled_dot_product_attention(a, b, x, m);
        },
        q, k, v, keep);
    expect_same(
        "additive, causal " + what, tol, tol,
        [](const auto& a, const auto& b, const auto& x, const auto& m) {
          return ts::scaled_dot_product_attention(a, b, x, m, true, 0.3);
        },
        q, k, v, add);
  }
  // A row with no key is NaN on both.
  HostT<bool> none = ts::full<bool, ts::cpu>({1, 4, 4}, true);
  none.slice(1, 2, 3).fill_(false);
  expect_same(
      "no key", tol, tol,
      [](const auto& a, const auto& m) { return ts::scaled_dot_product_attention(a, a, a, m); },
      sample<T>({1, 4, 6}, 5), none);
}

TYPED_TEST(CudaAttention, OneLaunchWhenFused) {
  using T = TypeParam;
  const DevT<T> q = sample<T>({2, 3, 40, 32}, 1).template to<ts::cuda>();
  const int64_t before = ts::cuda_activity_counts().launches;
  const DevT<T> out = ts::scaled_dot_product_attention(q, q, q, {}, true);
  EXPECT_EQ(ts::cuda_activity_counts().launches - before, 1) << "the fused kernel alone";
  // Past 128 the composition runs: matmul, softmax and matmul take several launches.
  const DevT<T> wide = sample<T>({2, 9, 130}, 2).template to<ts::cuda>();
  const int64_t mid = ts::cuda_activity_counts().launches;
  (void)ts::scaled_dot_product_attention(wide, wide, wide);
  EXPECT_GT(ts::cuda_activity_counts().launches - mid, 3);
}

TYPED_TEST(CudaAttention, HeadsSplitOffAProjectionAreReadInPlace) {
  using T = TypeParam;
  const auto x = sample<T>({2, 40, 3 * 4 * 16}, 7);
  auto run = [](const auto& t) {
    auto part = [&](int64_t i) {
      return t.slice(2, i * 64, (i + 1) * 64).reshape({2, 40, 4, 16}).permute({0, 2, 1, 3});
    };
    return ts::scaled_dot_product_attention(part(0), part(1), part(2), {}, true);
  };
  expect_same("heads split", attention_tol<T>(), attention_tol<T>(), run, x);
}

TYPED_TEST(CudaAttention, GradientsMatchCpu) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-11;
  for (bool causal : {false, true}) {
    const auto q = sample<T>({2, 3, 70, 16}, 11), k = sample<T>({2, 3, 90, 16}, 12),
               v = sample<T>({2, 3, 90, 24}, 13), w = sample<T>({2, 3, 70, 24}, 14);
    HostT<bool> keep = ts::full<bool, ts::cpu>({2, 1, 1, 90}, true);
    keep.slice(3, 80, 90).fill_(false);
    auto grads = [&](auto backend_tag) {
      using B = decltype(backend_tag);
      ts::Variable<T, B> a(q.template to<B>(), true), b(k.template to<B>(), true),
          c(v.template to<B>(), true);
      const auto out = ts::scaled_dot_product_attention(a, b, c, keep.template to<B>(), causal);
      ts::sum(out * ts::Variable<T, B>(w.template to<B>())).backward();
      return std::vector<HostT<T>>{a.grad().template to<ts::cpu>(), b.grad().template to<ts::cpu>(),
                                   c.grad().template to<ts::cpu>()};
    };
    const auto want = grads(ts::cpu{}), got = grads(ts::cuda{});
    const char* names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i)
      expect_close(got[i], want[i], tol, tol,
                   std::string(names[i]) + (causal ? " causal" : " padded"));
  }
}

class CudaAttentionOther : public CudaFixture {};

TEST_F(CudaAttentionOther, LargeHeadsComposeAndHalfComputesInFloat) {
  const auto q = sample<float>({2, 20, 160}, 1), k = sample<float>({2, 30, 160}, 2);
  expect_same(
      "d = 160 (composed)", 2e-5, 2e-5,
      [](const auto& a, const auto& b) { return ts::scaled_dot_product_attention(a, b, b); }, q, k);
  const auto h = sample<ts::half>({2, 2, 33, 32}, 3);
  expect_same(
      "half", 2e-3, 2e-3,
      [](const auto& a) { return ts::scaled_dot_product_attention(a, a, a, {}, true); }, h);
}

}  // namespace
