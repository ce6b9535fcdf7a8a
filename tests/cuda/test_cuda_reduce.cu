// Tests of the CUDA backend's reduction kernel through every reduction op, compared with the
// CPU backend on the same inputs: axis sets, keepdim, strided inputs, zero-size and scalar
// tensors, long and differently shaped reductions, NaN and ties, and determinism. Every test
// skips, with a message, when no CUDA device is visible.
#include "cuda_test_util.cuh"

namespace {
using namespace cuda_test;

class CudaReduce : public CudaFixture {};
template <class T>
class CudaReduceTyped : public CudaFixture {};
TYPED_TEST_SUITE(CudaReduceTyped, Dtypes);

// ---------------------------------------------------------------------------------------------
// Reductions.

/// Tolerance for accumulated results: accumulation error relative to the magnitude reduced,
/// plus rounding of the result to T.
template <class T>
double acc_tol() {
  if constexpr (std::is_same_v<T, double>)
    return 1e-12;
  else if constexpr (std::is_integral_v<T>)
    return 1e-6;  // float accumulators of integers
  else
    return 2e-5;
}

TYPED_TEST(CudaReduceTyped, ReductionsOverAxisSets) {
  using T = TypeParam;
  using R = ts::detail::real_result_t<T>;
  const double rt = std::max(ulps2<T>(), acc_tol<T>()), rr = std::max(ulps2<R>(), acc_tol<T>());
  const auto base = sample<T>({5, 7, 9}, 70);
  for (const auto& x :
       {base, base.transpose(0, 2).contiguous().transpose(0, 2), base.permute({2, 0, 1})}) {
    for (const auto& ax : axis_sets()) {
      for (bool keep : {false, true}) {
        const std::string w = " axes " + ax.to_string() + (keep ? " keepdim" : "");
        expect_same(
            "sum" + w, rt, rt * 10, [&](const auto& t) { return ts::sum(t, ax, keep); }, x);
        expect_same(
            "mean" + w, rr, rr, [&](const auto& t) { return ts::mean(t, ax, keep); }, x);
        expect_same(
            "var" + w, rr * 10, rr * 10, [&](const auto& t) { return ts::var(t, ax, keep); }, x);
        expect_same(
            "min" + w, 0, 0, [&](const auto& t) { return ts::min(t, ax, keep); }, x);
        expect_same(
            "max" + w, 0, 0, [&](const auto& t) { return ts::max(t, ax, keep); }, x);
        expect_same(
            "norm" + w, rr, rr, [&](const auto& t) { return ts::norm(t, 2.0, ax, keep); }, x);
        expect_same(
            "norm1" + w, rr, rr, [&](const auto& t) { return ts::norm(t, 1.0, ax, keep); }, x);
        expect_same(
            "norm_inf" + w, 0, 0, [&](const auto& t) { return ts::norm(t, INFINITY, ax, keep); },
            x);
        expect_same(
            "logsumexp" + w, rr * 10, rr * 10,
            [&](const auto& t) { return ts::logsumexp(t, ax, keep); }, x);
      }
    }
    for (int64_t axis : {0, 1, 2, -1})
      expect_same(
          "argmax", 0, 0, [&](const auto& t) { return ts::argmax(t, axis, true); }, x);
    expect_same(
        "argmax flat", 0, 0, [&](const auto& t) { return ts::argmax(t); }, x);
    expect_same(
        "argmin", 0, 0, [&](const auto& t) { return ts::argmin(t, 1); }, x);
  }
}

TYPED_TEST(CudaReduceTyped, ReductionsOfZeroSizeAndScalars) {
  using T = TypeParam;
  const auto e = sample<T>({0, 3}, 71), e3 = sample<T>({1, 0, 3}, 72), s = sample<T>({}, 73);
  for (const ts::Axes& ax : {ts::Axes{}, ts::Axes{0}, ts::Axes{1}}) {
    expect_same(
        "sum empty", 0, 0, [&](const auto& t) { return ts::sum(t, ax); }, e);
    expect_same(
        "mean empty", 0, 0, [&](const auto& t) { return ts::mean(t, ax, true); }, e);
    expect_same(
        "sum (1,0,3)", 0, 0, [&](const auto& t) { return ts::sum(t, ax); }, e3);
  }
  expect_same(
      "max over kept zero-size", 0, 0, [&](const auto& t) { return ts::max(t, {1}); }, e);
  for (const ts::Axes& ax : {ts::Axes{}, ts::Axes{0}, ts::Axes{-1}}) {
    expect_same(
        "sum scalar", 0, 0, [&](const auto& t) { return ts::sum(t, ax); }, s);
    expect_same(
        "max scalar", 0, 0, [&](const auto& t) { return ts::max(t, ax, true); }, s);
    expect_same(
        "mean scalar", ulps2<ts::detail::real_result_t<T>>(), 0,
        [&](const auto& t) { return ts::mean(t, ax); }, s);
  }
  expect_same(
      "argmax scalar", 0, 0, [&](const auto& t) { return ts::argmax(t); }, s);
}

TEST_F(CudaReduce, LongAndShapedReductions) {
  // One long row (two passes), columns of a tall matrix (the 32-wide layout, with partials),
  // rows of a wide one, and many short rows.
  const auto v = sample<float>({(int64_t{1} << 21) + 7}, 80);
  expect_same(
      "sum long", 1e-5, 1e-2, [](const auto& t) { return ts::sum(t); }, v);
  expect_same(
      "mean long", 1e-5, 1e-6, [](const auto& t) { return ts::mean(t); }, v);
  expect_same(
      "argmax long", 0, 0, [](const auto& t) { return ts::argmax(t); }, v);
  expect_same(
      "logsumexp long", 1e-6, 1e-6, [](const auto& t) { return ts::logsumexp(t); }, v);
  // 2^22 positions and more: 128 per thread and chunk (a quarter of the partial results).
  const auto v4 = sample<float>({(int64_t{1} << 22) + 3}, 86);
  expect_same(
      "sum longer", 1e-5, 1e-2, [](const auto& t) { return ts::sum(t); }, v4);
  expect_same(
      "argmin longer", 0, 0, [](const auto& t) { return ts::argmin(t); }, v4);
  const auto m = sample<float>({4097, 67}, 81);
  expect_same(
      "sum cols", 1e-5, 1e-3, [](const auto& t) { return ts::sum(t, {0}); }, m);
  expect_same(
      "var cols", 1e-5, 1e-5, [](const auto& t) { return ts::var(t, {0}); }, m);
  expect_same(
      "max cols", 0, 0, [](const auto& t) { return ts::max(t, {0}); }, m);
  expect_same(
      "argmin cols", 0, 0, [](const auto& t) { return ts::argmin(t, 0); }, m);
  expect_same(
      "sum rows of transposed", 1e-5, 1e-3,
      [](const auto& t) { return ts::sum(t.transpose(0, 1), {1}); }, m);
  const auto w = sample<float>({67, 40000}, 82);
  expect_same(
      "sum rows", 1e-5, 1e-3, [](const auto& t) { return ts::sum(t, {1}); }, w);
  const auto s = sample<float>({100003, 3}, 83);
  expect_same(
      "sum short rows", 1e-6, 1e-6, [](const auto& t) { return ts::sum(t, {1}); }, s);
  expect_same(
      "argmax short rows", 0, 0, [](const auto& t) { return ts::argmax(t, 1); }, s);
  const auto h = sample<ts::half>({300000}, 84);
  expect_same(
      "half long sum", 2e-3, 0.5, [](const auto& t) { return ts::sum(t); }, h);
  const auto i = sample<int32_t>({3, 500000}, 85);
  expect_same(
      "int sum", 0, 0, [](const auto& t) { return ts::sum(t, {1}); }, i);
  expect_same(
      "int prod", 0, 0, [](const auto& t) { return ts::prod(t.slice(1, 0, 12), {1}); }, i);
}

TEST_F(CudaReduce, ReductionNaNAndTies) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(3000, 1.0f);
  v[5] = 7.f, v[900] = 7.f, v[2000] = nan, v[2500] = nan, v[10] = -inf;
  const auto x = ts::from_vector<float, ts::cpu>(v, {3, 1000});
  expect_same(
      "max nan", 0, 0, [](const auto& t) { return ts::max(t, {1}); }, x);
  expect_same(
      "min nan", 0, 0, [](const auto& t) { return ts::min(t, {1}); }, x);
  expect_same(
      "argmax ties+nan", 0, 0, [](const auto& t) { return ts::argmax(t, 1); }, x);
  expect_same(
      "argmin", 0, 0, [](const auto& t) { return ts::argmin(t, 1); }, x);
  expect_same(
      "sum inf nan", 0, 0, [](const auto& t) { return ts::sum(t, {1}); }, x);
  expect_same(
      "logsumexp -inf", 1e-6, 0, [](const auto& t) { return ts::logsumexp(t, {0}); },
      ts::full<float, ts::cpu>({2, 3}, -inf));
}

TEST_F(CudaReduce, OrderDoesNotDependOnAlignment) {
  // A contiguous run is read with 16-byte loads where it is aligned and element by element
  // where not, in the same order: a view one element in and its aligned copy give the same bits.
  const int64_t n = (int64_t{1} << 20) + 9;
  const auto x = sample<float>({n}, 92).to<ts::cuda>();
  const auto view = x.slice(0, 1, n), copy = view.contiguous();
  EXPECT_TRUE(same_bits(ts::sum(view).to<ts::cpu>(), ts::sum(copy).to<ts::cpu>()));
  EXPECT_TRUE(same_bits(ts::argmax(view).to<ts::cpu>(), ts::argmax(copy).to<ts::cpu>()));
  const auto h = sample<ts::half>({3, 70001}, 93).to<ts::cuda>();
  const auto hv = h.slice(1, 3, 70001), hc = hv.contiguous();
  EXPECT_TRUE(same_bits(ts::sum(hv, {1}).to<ts::cpu>(), ts::sum(hc, {1}).to<ts::cpu>()));
  expect_same(
      "half rows, unaligned", 2e-3, 0.5, [](const auto& t) { return ts::sum(t, {1}); },
      sample<ts::half>({3, 70001}, 93).slice(1, 3, 70001));
}

TEST_F(CudaReduce, ReductionsAreDeterministic) {
  // The host emulation runs blocks one after another, so it cannot reorder anything: there the
  // test only checks that the many-block paths run, which a sixteenth of the size does too.
#if defined(TESSERA_CUDA_HOST_EMULATION)
  const int64_t n = (int64_t{1} << 18) + 5, rows = 1007;
#else
  const int64_t n = (int64_t{1} << 22) + 5, rows = 10007;
#endif
  const auto x = sample<float>({n}, 90).to<ts::cuda>();
  const auto m = sample<float>({rows, 131}, 91).to<ts::cuda>();
  auto twice = [](auto f) {
    return same_bits(f().template to<ts::cpu>(), f().template to<ts::cpu>());
  };
  EXPECT_TRUE(twice([&] { return ts::sum(x); }));
  EXPECT_TRUE(twice([&] { return ts::var(x); }));
  EXPECT_TRUE(twice([&] { return ts::sum(m, {0}); }));
  EXPECT_TRUE(twice([&] { return ts::mean(m, {1}); }));
  EXPECT_TRUE(twice([&] { return ts::logsumexp(m.transpose(0, 1), {1}); }));
}

}  // namespace
