// scaled_dot_product_attention: the fused CPU kernel against a float64 reference over masks
// (bool, additive, causal), lengths that are and are not multiples of the kernel's blocks, head
// sizes 32/64/128, strided views and copies; the gradients through gradcheck and against the
// differentiated composition; edge cases and bad input.
#include <gtest/gtest.h>

#include <limits>
#include <tessera/autograd.hpp>

#include "test_util.hpp"

namespace {
namespace ts = tessera;
using ts::cpu;
using ts::Shape;
using ts::Tensor;

constexpr double ninf = -std::numeric_limits<double>::infinity();

/// softmax(q k^T scale + mask) v in double over [batch, l, d] values (row-major); mask: the
/// additive scores [batch, lq, lk] or empty.
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& mask,
                              int64_t batch, int64_t lq, int64_t lk, int64_t d, int64_t dv,
                              bool causal, double scale) {
  std::vector<double> out(static_cast<size_t>(batch * lq * dv), 0.0), s(lk);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < lq; ++i) {
      double m = ninf;
      for (int64_t j = 0; j < lk; ++j) {
        double a = 0;
        for (int64_t c = 0; c < d; ++c) a += q[(t * lq + i) * d + c] * k[(t * lk + j) * d + c];
        a *= scale;
        if (!mask.empty()) a += mask[(t * lq + i) * lk + j];
        if (causal && j > i) a = ninf;
        s[j] = a, m = std::max(m, a);
      }
      double z = 0;
      for (int64_t j = 0; j < lk; ++j) z += (s[j] = m == ninf ? 0.0 : std::exp(s[j] - m));
      for (int64_t c = 0; c < dv; ++c) {
        double a = 0;
        for (int64_t j = 0; j < lk; ++j) a += s[j] * v[(t * lk + j) * dv + c];
        out[(t * lq + i) * dv + c] = m == ninf ? std::nan("") : a / z;
      }
    }
  return out;
}

template <class T>
double tol() {
  return std::is_same_v<T, double> ? 1e-12 : std::is_same_v<T, float> ? 2e-5 : 2e-2;
}

/// One case: q [batch..., lq, d], k [..., lk, d], v [..., lk, dv]; the mask (any of the
/// scores' broadcastable shapes) as given.
template <class T, class M = T>
void check_case(const Shape& batch, int64_t lq, int64_t lk, int64_t d, int64_t dv,
                const Tensor<M, cpu>& mask, bool causal, std::optional<double> scale = {},
                const std::string& what = "") {
  ts::Generator g(lq * 131 + lk * 7 + d);
  Shape qs(batch), ks(batch), vs(batch), ss(batch);
  qs.push_back(lq), qs.push_back(d), ks.push_back(lk), ks.push_back(d);
  vs.push_back(lk), vs.push_back(dv), ss.push_back(lq), ss.push_back(lk);
  const auto q = ts::rand<T>(qs, g, -1, 1), k = ts::rand<T>(ks, g, -1, 1),
             v = ts::rand<T>(vs, g, -1, 1);
  const auto got = ts::scaled_dot_product_attention(q, k, v, mask, causal, scale);
  Shape os(batch);
  os.push_back(lq), os.push_back(dv);
  ASSERT_EQ(got.shape(), os) << what;
  std::vector<double> md;
  if (mask.defined()) {
    if constexpr (std::is_same_v<M, bool>) {
      for (double x : tt::to_doubles(mask.broadcast_to(ss).contiguous()))
        md.push_back(x != 0 ? 0.0 : ninf);
    } else {
      md = tt::to_doubles(mask.broadcast_to(ss).contiguous());
    }
  }
  const int64_t nb = batch.numel();
  const double sc = scale ? *scale : 1 / std::sqrt(static_cast<double>(d));
  const auto want = reference(tt::to_doubles(q), tt::to_doubles(k), tt::to_doubles(v), md, nb, lq,
                              lk, d, dv, causal, sc);
  const auto gd = tt::to_doubles(got);
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(gd[i])) << what << " element " << i;
    } else {
      EXPECT_NEAR(gd[i], want[i], tol<T>() * (1 + std::abs(want[i]))) << what << " element " << i;
    }
    if (::testing::Test::HasFailure()) return;
  }
}

template <class T>
class Attention : public ::testing::Test {};
using Floating = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Attention, Floating);

TYPED_TEST(Attention, MatchesTheReferenceOverLengthsAndHeadSizes) {
  using T = TypeParam;
  // 1, block multiples (64 rows, 256 keys) and not, more keys than one block, lq != lk.
  for (int64_t l : {1, 5, 64, 70, 130})
    for (int64_t lk : {l, int64_t{300}}) check_case<T>({2, 3}, l, lk, 32, 32, {}, false, {}, "l");
  for (int64_t d : {32, 64, 128}) check_case<T>({2}, 33, 45, d, d, {}, false, {}, "head size");
  check_case<T>({3}, 17, 19, 24, 40, {}, false, 0.3, "d != dv, explicit scale");
  check_case<T>({}, 9, 11, 8, 8, {}, false, {}, "no batch dims");
  check_case<T>({2, 2, 2}, 9, 11, 8, 8, {}, false, {}, "three batch dims");
}

TYPED_TEST(Attention, MasksAndTheCausalRule) {
  using T = TypeParam;
  ts::Generator g(5);
  // Key padding, as BERT's [n, 1, 1, l] (bool: true takes part; every row keeps key 0).
  auto keep = ts::rand<T>({2, 1, 1, 300}, g, 0, 1) > ts::full<T>({1}, T(0.3));
  keep.slice(3, 0, 1).fill_(true);
  check_case<T, bool>({2, 4}, 70, 300, 32, 32, keep, false, {}, "bool key padding");
  // An additive mask of the full scores' shape, and one broadcast over the batch.
  check_case<T>({2, 3}, 66, 270, 16, 16, ts::rand<T>({2, 3, 66, 270}, g, -2, 2), false, {},
                "additive full");
  check_case<T>({2, 3}, 40, 41, 16, 16, ts::rand<T>({40, 41}, g, -2, 2), false, {},
                "additive [lq, lk]");
  for (int64_t l : {1, 63, 64, 65, 300}) check_case<T>({2}, l, l, 32, 32, {}, true, {}, "causal");
  check_case<T>({2}, 70, 300, 32, 32, {}, true, {}, "causal, lk > lq");
  check_case<T>({2}, 300, 70, 32, 32, {}, true, {}, "causal, lq > lk");
  check_case<T, bool>({2, 4}, 300, 300, 32, 32, keep, true, {}, "causal and key padding");
  // A row whose keys are all masked out is NaN, as softmax over only -inf.
  auto none = ts::full<bool>({2, 1, 5, 7}, true);
  none.slice(2, 3, 4).fill_(false);
  check_case<T, bool>({2, 2}, 5, 7, 8, 8, none, false, {}, "a row with no key");
}

TYPED_TEST(Attention, StridedViewsAreReadInPlaceOrCopied) {
  using T = TypeParam;
  ts::Generator g(9);
  const int64_t n = 3, l = 70, heads = 4, dh = 16, h = heads * dh;
  // BERT's heads split off [n, l, h]: [n, heads, l, dh] views, no copy needed.
  auto x = ts::rand<T>({n, l, 3 * h}, g, -1, 1);
  auto split = [&](int64_t part) {
    return x.slice(2, part * h, (part + 1) * h).reshape({n, l, heads, dh}).permute({0, 2, 1, 3});
  };
  const auto q = split(0), k = split(1), v = split(2);
  ASSERT_FALSE(q.is_contiguous());
  const auto got = ts::scaled_dot_product_attention(q, k, v);
  const auto want =
      ts::scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous());
  tt::expect_close(tt::to_doubles(got), tt::to_doubles(want), tol<T>(), "heads split off");
  // Rows not contiguous (transposed last dims), and batch dims with no two-stride walk.
  const auto qt = ts::rand<T>({n, heads, dh, l}, g, -1, 1).transpose(2, 3);
  const auto odd = ts::rand<T>({heads, l, n, 2, dh}, g, -1, 1).permute({2, 0, 3, 1, 4});
  const auto kc = ts::rand<T>({n, heads, 2, l, dh}, g, -1, 1);
  const auto got2 = ts::scaled_dot_product_attention(odd, kc, kc);
  const auto want2 = ts::scaled_dot_product_attention(odd.contiguous(), kc, kc);
  tt::expect_close(tt::to_doubles(got2), tt::to_doubles(want2), tol<T>(), "copied batch dims");
  const auto got3 = ts::scaled_dot_product_attention(qt, k, v);
  const auto want3 = ts::scaled_dot_product_attention(qt.contiguous(), k, v);
  tt::expect_close(tt::to_doubles(got3), tt::to_doubles(want3), tol<T>(), "transposed rows");
}

TYPED_TEST(Attention, FusedEqualsTheComposition) {
  using T = TypeParam;
  ts::Generator g(11);
  const auto q = ts::rand<T>({2, 3, 100, 32}, g, -2, 2), k = ts::rand<T>({2, 3, 280, 32}, g, -2, 2),
             v = ts::rand<T>({2, 3, 280, 48}, g, -2, 2);
  const auto m = ts::rand<T>({2, 1, 1, 280}, g, -1, 1).broadcast_to({2, 3, 100, 280});
  for (bool causal : {false, true}) {
    const auto fused = ts::scaled_dot_product_attention(q, k, v, m, causal);
    const auto composed =
        ts::detail::attention_composed(q, k, v, Tensor<T, cpu>(m), causal, 1 / std::sqrt(32.0));
    tt::expect_close(tt::to_doubles(fused), tt::to_doubles(composed), tol<T>(),
                     causal ? "causal" : "masked");
  }
}

TEST(AttentionLowPrecision, HalfAndBfloat16ComputeInFloat) {
  ts::Generator g(3);
  auto keep = ts::full<bool>({2, 1, 1, 90}, true);
  keep.slice(3, 80, 90).fill_(false);
  check_case<ts::half, bool>({2, 2}, 33, 90, 32, 32, keep, false, {}, "half");
  check_case<ts::bfloat16, bool>({2, 2}, 33, 90, 32, 32, keep, true, {}, "bfloat16");
}

TEST(AttentionEdges, EmptyShapesAndNoKeys) {
  ts::Generator g(1);
  const auto q = ts::rand<float>({2, 4, 8}, g), k0 = ts::rand<float>({2, 0, 8}, g),
             v0 = ts::rand<float>({2, 0, 5}, g);
  const auto none = ts::scaled_dot_product_attention(q, k0, v0);
  ASSERT_EQ(none.shape(), Shape({2, 4, 5}));
  for (double x : tt::to_doubles(none)) EXPECT_EQ(x, 0.0);  // as matmul(softmax(empty), empty)
  const auto q0 = ts::rand<float>({0, 4, 8}, g);
  EXPECT_EQ(ts::scaled_dot_product_attention(q0, q0, q0).shape(), Shape({0, 4, 8}));
  const auto e = ts::rand<float>({2, 0, 8}, g), k = ts::rand<float>({2, 3, 8}, g);
  EXPECT_EQ(ts::scaled_dot_product_attention(e, k, k).shape(), Shape({2, 0, 8}));
}

TEST(AttentionErrors, NameTheOpAndTheShapes) {
  ts::Generator g(1);
  const auto q = ts::rand<float>({2, 4, 8}, g), k = ts::rand<float>({2, 5, 8}, g),
             v = ts::rand<float>({2, 5, 6}, g);
  auto expect_shape_error = [](auto&& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no shape_error for " << part;
    } catch (const ts::shape_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("scaled_dot_product_attention"), std::string::npos) << msg;
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
    }
  };
  expect_shape_error([&] { (void)ts::scaled_dot_product_attention(q, k, q); }, "[2, 4, 8]");
  expect_shape_error(
      [&] {
        (void)ts::scaled_dot_product_attention(q, ts::rand<float>({2, 5, 7}, g), v);
      },
      "[2, 5, 7]");
  expect_shape_error(
      [&] {
        (void)ts::scaled_dot_product_attention(q, k, v, ts::rand<float>({3, 4, 5}, g));
      },
      "[3, 4, 5]");
  expect_shape_error(
      [&] {
        (void)ts::scaled_dot_product_attention(q, ts::rand<float>({3, 5, 8}, g), v);
      },
      "batch dims");
  const auto flat = ts::rand<float>({8}, g);
  expect_shape_error([&] { (void)ts::scaled_dot_product_attention(flat, flat, flat); },
                     "rank >= 2");
}

// ---- gradients -----------------------------------------------------------------------------

using V = ts::Variable<double, cpu>;
using Vs = std::vector<V>;

TEST(AttentionGrad, GradcheckWithMasksAndTheCausalRule) {
  ts::Generator g(2);
  // Small enough for finite differences, but more keys than one block (256) in one case.
  const auto q = ts::rand<double>({2, 2, 5, 4}, g, -1, 1),
             k = ts::rand<double>({2, 2, 7, 4}, g, -1, 1),
             v = ts::rand<double>({2, 2, 7, 3}, g, -1, 1);
  auto keep = ts::full<bool>({2, 1, 1, 7}, true);
  keep.slice(3, 5, 7).fill_(false);
  for (bool causal : {false, true}) {
    const auto r = ts::gradcheck(
        [&](const Vs& x) {
          return ts::scaled_dot_product_attention(x[0], x[1], x[2], keep, causal);
        },
        {q, k, v});
    EXPECT_TRUE(r.ok) << (causal ? "causal: " : "masked: ") << r.message;
  }
  const auto mq = ts::rand<double>({1, 70, 3}, g, -1, 1),
             mk = ts::rand<double>({1, 260, 3}, g, -1, 1),
             mv = ts::rand<double>({1, 260, 2}, g, -1, 1);
  ts::autograd::GradcheckOptions o;
  const auto r = ts::gradcheck(
      [&](const Vs& x) {
        return ts::scaled_dot_product_attention(x[0], x[1], x[2], Tensor<double, cpu>(), true, 0.7);
      },
      {mq, mk, mv}, o);
  EXPECT_TRUE(r.ok) << "two key blocks: " << r.message;
}

TEST(AttentionGrad, FusedGradientsEqualTheComposition) {
  ts::Generator g(4);
  const int64_t n = 2, l = 90, heads = 3, dh = 8;
  const auto x = ts::rand<double>({n, l, 3 * heads * dh}, g, -1, 1);
  auto mask = ts::rand<double>({n, 1, 1, l}, g, -1, 1);
  for (bool causal : {false, true}) {
    V xv(x, true), xc(x, true);
    auto heads_of = [&](const V& t, int64_t part) {
      return ts::permute(ts::reshape(ts::slice(t, 2, part * heads * dh, (part + 1) * heads * dh),
                                     {n, l, heads, dh}),
                         {0, 2, 1, 3});
    };
    const V out = ts::scaled_dot_product_attention(heads_of(xv, 0), heads_of(xv, 1),
                                                   heads_of(xv, 2), mask, causal);
    const V q = heads_of(xc, 0), k = heads_of(xc, 1), v = heads_of(xc, 2);
    V s = ts::matmul(q, ts::transpose(k, 2, 3)) * (1 / std::sqrt(double(dh))) + V(mask);
    if (causal) s = s + V(ts::detail::attention_fold_causal(Tensor<double, cpu>(), l, l, true));
    const V ref = ts::matmul(ts::softmax(s, -1), v);
    tt::expect_close(tt::to_doubles(out.value()), tt::to_doubles(ref.value()), 1e-12, "forward");
    const auto w = ts::rand<double>(out.shape(), g, -1, 1);
    ts::sum(out * V(w)).backward();
    ts::sum(ref * V(w)).backward();
    tt::expect_close(tt::to_doubles(xv.grad()), tt::to_doubles(xc.grad()), 1e-10,
                     causal ? "gradient, causal" : "gradient");
  }
}

}  // namespace
