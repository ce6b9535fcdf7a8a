// The tensor core: Shape, handle semantics, views, copies and conversions, creation, element
// access, printing, the caching allocator, and the errors each raises.
#include <gtest/gtest.h>

#include <limits>
#include <sstream>

#include "test_util.hpp"

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_tensor {

namespace ts = tessera;

TEST(Shape, RankExtentsAndOverflow) {
  ts::Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(ts::Shape{}.numel(), 1);
  EXPECT_EQ((ts::Shape{1, 0, 3}.numel()), 0);
  EXPECT_EQ(s.to_string(), "[2, 3, 4]");
  EXPECT_NO_THROW((ts::Shape{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_THROW((ts::Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}), ts::shape_error);
  EXPECT_THROW((ts::Shape{2, -1}), ts::shape_error);
  EXPECT_THROW((ts::Shape{int64_t{1} << 32, int64_t{1} << 32}), ts::shape_error);
  try {
    ts::Shape big{int64_t{1} << 40, int64_t{1} << 30};
    FAIL();
  } catch (const ts::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ts::contiguous_strides({2, 3, 4}), (ts::Strides{12, 4, 1}));
}

TEST(Tensor, HandleSemanticsAndClone) {
  auto a = ts::zeros<float>({2, 3});
  auto b = a;  // shares
  b.at({1, 2}) = 5;
  EXPECT_EQ(a(1, 2), 5);
  auto c = a.clone();
  c(0, 0) = 7;
  EXPECT_EQ(a(0, 0), 0);
  EXPECT_TRUE(a.shares_storage_with(b));
  EXPECT_FALSE(a.shares_storage_with(c));
  EXPECT_FALSE(ts::Tensor<float>().defined());
  EXPECT_EQ(a.dtype(), ts::dtype::float32);
  EXPECT_EQ(ts::dtype_name<ts::bfloat16>, "bfloat16");
}

TEST(Tensor, ReshapeViewAndCopy) {
  auto a = ts::arange<int32_t>(24).reshape({2, 3, 4});
  EXPECT_EQ(a.shape(), (ts::Shape{2, 3, 4}));
  auto v = a.view({6, -1});
  EXPECT_EQ(v.shape(), (ts::Shape{6, 4}));
  EXPECT_TRUE(v.shares_storage_with(a));
  // A transposed tensor cannot be flattened as a view: reshape copies, view throws.
  auto t = a.transpose(0, 2);
  EXPECT_THROW(t.view({-1}), ts::shape_error);
  auto f = t.reshape({-1});
  EXPECT_FALSE(f.shares_storage_with(a));
  EXPECT_EQ(f.to_vector()[1], 12);  // t[0][0][1] = a[1][0][0]
  // But splitting a transposed dim is a view.
  auto s = a.transpose(0, 1).view({3, 2, 2, 2});
  EXPECT_TRUE(s.shares_storage_with(a));
  EXPECT_EQ(s(2, 1, 1, 0), a(1, 2, 2));
  EXPECT_THROW(a.reshape({5, -1}), ts::shape_error);
  EXPECT_THROW(a.reshape({-1, -1}), ts::shape_error);
  EXPECT_THROW(a.reshape({7}), ts::shape_error);
  EXPECT_EQ(ts::zeros<float>({0, 3}).reshape({3, 0}).shape(), (ts::Shape{3, 0}));
  EXPECT_THROW(ts::zeros<float>({0, 3}).reshape({3, 0, -1}), ts::shape_error);  // -1 is ambiguous
  EXPECT_EQ(ts::full<float>({}, 2.0f).reshape({1, 1}).shape(), (ts::Shape{1, 1}));
}

TEST(Tensor, TransposePermuteSliceSelect) {
  auto a = ts::arange<int64_t>(60).reshape({3, 4, 5});
  auto p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (ts::Shape{5, 3, 4}));
  EXPECT_EQ(p(4, 2, 1), a(2, 1, 4));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_TRUE(p.contiguous().is_contiguous());
  EXPECT_EQ(p.contiguous()(4, 2, 1), a(2, 1, 4));
  EXPECT_THROW(a.permute({0, 0, 1}), ts::index_error);
  EXPECT_THROW(a.permute({0, 1}), ts::shape_error);
  EXPECT_THROW(a.transpose(0, 3), ts::index_error);
  // Python slice semantics: negative bounds, clamping, steps.
  auto s = a.slice(2, 1, -1, 2);  // columns 1, 3
  EXPECT_EQ(s.shape(), (ts::Shape{3, 4, 2}));
  EXPECT_EQ(s(1, 2, 1), a(1, 2, 3));
  EXPECT_EQ(a.slice(0, -2, 100).size(0), 2);
  EXPECT_EQ(a.slice(1, 3, 1).size(1), 0);
  EXPECT_THROW(a.slice(0, 0, 2, 0), ts::index_error);
  EXPECT_THROW(a.slice(0, 0, 2, -1), ts::index_error);
  auto sel = a.select(1, -1);
  EXPECT_EQ(sel.shape(), (ts::Shape{3, 5}));
  EXPECT_EQ(sel(2, 3), a(2, 3, 3));
  EXPECT_THROW(a.select(1, 4), ts::index_error);
  // Sum of a stepped slice of a transposed view against the same values made contiguous.
  auto q = a.transpose(0, 2).slice(0, 0, 5, 2);
  EXPECT_EQ(ts::sum(q).item(), ts::sum(q.contiguous()).item());
}

TEST(Tensor, SqueezeUnsqueezeExpand) {
  auto a = ts::arange<float>(6).reshape({1, 2, 1, 3});
  EXPECT_EQ(a.squeeze().shape(), (ts::Shape{2, 3}));
  EXPECT_EQ(a.squeeze(0).shape(), (ts::Shape{2, 1, 3}));
  EXPECT_EQ(a.squeeze(1).shape(), a.shape());  // not extent 1: unchanged
  EXPECT_EQ(a.unsqueeze(4).shape(), (ts::Shape{1, 2, 1, 3, 1}));
  EXPECT_EQ(a.unsqueeze(-1).shape(), (ts::Shape{1, 2, 1, 3, 1}));
  EXPECT_THROW(a.unsqueeze(6), ts::index_error);
  auto r = ts::arange<float>(3);
  auto e = r.expand({4, 3});
  EXPECT_EQ(e.strides(), (ts::Strides{0, 1}));
  EXPECT_EQ(e(3, 2), 2);
  EXPECT_EQ(r.reshape({3, 1}).expand({-1, 5}).shape(), (ts::Shape{3, 5}));
  EXPECT_THROW(r.expand({4, 2}), ts::shape_error);
  EXPECT_THROW(r.expand({2}), ts::shape_error);
  EXPECT_EQ(ts::sum(e).item(), 12.0f);
  EXPECT_EQ(e.contiguous().to_vector(), (std::vector<float>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  auto rank8 = ts::ones<float>({1, 1, 1, 1, 1, 1, 1, 2});
  EXPECT_THROW(rank8.unsqueeze(0), ts::shape_error);
}

TEST(Tensor, AstypeConversions) {
  auto f = ts::from_vector<float>({1.5f, -2.5f, 300.0f, NAN, -1e10f, 0.1f});
  EXPECT_EQ(f.astype<int8_t>().to_vector(), (std::vector<int8_t>{1, -2, 127, 0, -128, 0}));
  EXPECT_EQ(f.astype<uint8_t>().to_vector(), (std::vector<uint8_t>{1, 0, 255, 0, 0, 0}));
  EXPECT_EQ(f.astype<int64_t>().to_vector()[4], -10000000000LL);
  auto h = f.astype<ts::half>();
  EXPECT_EQ(static_cast<float>(h.to_vector()[5]), static_cast<float>(ts::half(0.1f)));
  EXPECT_EQ(h.astype<float>().to_vector()[2], 300.0f);
  auto e4 = ts::from_vector<float>({500.0f, INFINITY}).astype<ts::float8_e4m3>();
  EXPECT_EQ(static_cast<float>(e4.to_vector()[0]), 448.0f);  // saturating
  EXPECT_EQ(static_cast<float>(e4.to_vector()[1]), 448.0f);
  EXPECT_EQ(f.astype<bool>().to_vector(), (std::vector<bool>{true, true, true, true, true, true}));
  EXPECT_EQ(ts::from_vector<double>({0.0, 1e-300}).astype<bool>().to_vector(),
            (std::vector<bool>{false, true}));
  // Conversions of strided views.
  auto t = ts::arange<int32_t>(6).reshape({2, 3}).transpose(0, 1).astype<double>();
  EXPECT_EQ(t.to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, CreationFunctions) {
  ts::Generator g(1);
  EXPECT_EQ(ts::arange<int32_t>(2, 11, 3).to_vector(), (std::vector<int32_t>{2, 5, 8}));
  EXPECT_EQ(ts::arange<float>(0, -1, -0.25).numel(), 4);
  EXPECT_EQ(ts::arange<float>(5, 1).numel(), 0);
  EXPECT_THROW(ts::arange<float>(0, 1, 0), ts::shape_error);
  auto l = ts::linspace<double>(-1, 1, 5).to_vector();
  EXPECT_EQ(l, (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(ts::linspace<float>(0, 1, 1).to_vector()[0], 0.0f);
  EXPECT_EQ(ts::full<int8_t>({2}, int8_t(-3)).to_vector(), (std::vector<int8_t>{-3, -3}));
  EXPECT_EQ(ts::ones<ts::bfloat16>({3}).astype<float>().to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_THROW(ts::from_vector<float>({1, 2, 3}, {2, 2}), ts::shape_error);
  const double raw[] = {1, 2, 3, 4};
  EXPECT_EQ(ts::from_data(raw, {2, 2})(1, 0), 3);
  auto u = ts::rand<float>({10000}, g, 2, 3).to_vector();
  EXPECT_TRUE(std::all_of(u.begin(), u.end(), [](float x) { return x >= 2 && x < 3; }));
  auto n = ts::randn<double>({200000}, g, 1.0, 2.0);
  EXPECT_NEAR(ts::mean(n).item(), 1.0, 0.02);
  EXPECT_NEAR(ts::std(n).item(), 2.0, 0.02);
  auto ri = ts::randint<int64_t>(-2, 3, {1000}, g).to_vector();
  EXPECT_EQ(*std::min_element(ri.begin(), ri.end()), -2);
  EXPECT_EQ(*std::max_element(ri.begin(), ri.end()), 2);
  EXPECT_THROW(ts::randint<int32_t>(3, 3, {2}, g), ts::shape_error);
  // A seed gives the same stream.
  ts::Generator g1(99), g2(99);
  EXPECT_EQ(ts::randn<float>({64}, g1).to_vector(), ts::randn<float>({64}, g2).to_vector());
}

TEST(Tensor, ElementAccessItemAndFill) {
  auto a = ts::zeros<int32_t>({2, 3});
  a(1, -1) = 4;
  EXPECT_EQ(a(1, 2), 4);
  EXPECT_THROW(a(2, 0), ts::index_error);
  EXPECT_THROW(a(0, -4), ts::index_error);
  EXPECT_THROW(a(0), ts::index_error);
  EXPECT_EQ(ts::full<float>({1, 1}, 3.5f).item(), 3.5f);
  EXPECT_THROW(a.item(), ts::shape_error);
  a.slice(1, 0, 3, 2).fill_(9);
  EXPECT_EQ(a.to_vector(), (std::vector<int32_t>{9, 0, 9, 9, 0, 9}));
  a.select(0, 0).copy_(ts::from_vector<double>({1.9, 2.1, -3.7}));
  EXPECT_EQ(a.to_vector(), (std::vector<int32_t>{1, 2, -3, 9, 0, 9}));
  EXPECT_THROW(ts::zeros<float>({1}).expand({3}).fill_(1), ts::shape_error);
  EXPECT_THROW(ts::zeros<float>({2, 3}).copy_(ts::zeros<float>({3, 2})), ts::shape_error);
  EXPECT_EQ(a.size(-1), 3);
  EXPECT_THROW(a.size(2), ts::index_error);
}

TEST(Tensor, PrintingShowsValuesShapeDtype) {
  std::ostringstream os;
  os << ts::arange<int32_t>(4).reshape({2, 2});
  EXPECT_EQ(os.str(), "tensor([[0, 1],\n        [2, 3]], shape=[2, 2], dtype=int32)");
  std::ostringstream big;
  big << ts::zeros<float>({2000});
  EXPECT_NE(big.str().find("..."), std::string::npos);
  EXPECT_LT(big.str().size(), 200u);
  std::ostringstream sc, h, b, u;
  sc << ts::full<float>({}, 1.5f);
  EXPECT_EQ(sc.str(), "tensor(1.5, shape=[], dtype=float32)");
  h << ts::full<ts::half>({1}, ts::half(2.0f));
  EXPECT_EQ(h.str(), "tensor([2], shape=[1], dtype=float16)");
  b << ts::from_vector<bool>({true, false});
  EXPECT_EQ(b.str(), "tensor([true, false], shape=[2], dtype=bool)");
  u << ts::Tensor<float>();
  EXPECT_EQ(u.str(), "tensor(undefined)");
}

// An undefined tensor holds no elements; a scalar holds one; a zero extent none.
TEST(Tensor, NumelOfUndefinedScalarAndEmpty) {
  EXPECT_EQ(ts::Tensor<float>().numel(), 0);
  EXPECT_EQ(ts::full<float>({}, 2.0f).numel(), 1);
  EXPECT_EQ(ts::zeros<float>({3, 0}).numel(), 0);
  EXPECT_EQ(ts::zeros<float>({3, 0}).defined(), true);
  EXPECT_THROW((void)ts::Tensor<float>().item(), ts::error);
}

TEST(Tensor, CachingAllocatorReusesLargeBlocks) {
  void* first;
  {
    auto a = ts::empty<float>({1 << 22});
    first = a.data();
  }
  auto b = ts::empty<float>({1 << 22});
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  ts::empty_cpu_cache();
}

TEST(Tensor, ZeroSizeEverywhere) {
  auto z = ts::zeros<float>({1, 0, 3});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ((z + 1.0f).shape(), z.shape());
  EXPECT_EQ(ts::exp(z).numel(), 0);
  EXPECT_EQ(z.transpose(0, 2).contiguous().shape(), (ts::Shape{3, 0, 1}));
  EXPECT_EQ(z.to_vector().size(), 0u);
  EXPECT_EQ(z.astype<ts::half>().numel(), 0);
  EXPECT_EQ(ts::zeros<float>({0}).slice(0, 0, 0).numel(), 0);
}

TEST(Shape, ZeroExtentDoesNotHideOverflow) {
  // The extents other than 0 must have a product that fits, whatever their order (as NumPy):
  // otherwise contiguous_strides would overflow, and {2^62, 2^62, 0} already threw.
  const int64_t big = int64_t{1} << 62;
  EXPECT_THROW((ts::Shape{big, big, 0}), ts::shape_error);
  EXPECT_THROW((ts::Shape{0, big, big}), ts::shape_error);
  EXPECT_THROW(ts::zeros<float>({0, big, 4}), ts::shape_error);
  EXPECT_EQ((ts::Shape{0, big, 1}.numel()), 0);
  EXPECT_EQ(ts::contiguous_strides({0, big, 1}), (ts::Strides{big, 1, 1}));
}

TEST(Tensor, SliceWithHugeStep) {
  // (stop - start + step - 1) / step overflowed for steps near INT64_MAX and gave an empty view;
  // NumPy and Python give the first element.
  constexpr int64_t huge = std::numeric_limits<int64_t>::max();
  auto a = ts::arange<int64_t>(4);
  auto s = a.slice(0, 0, 4, huge);
  EXPECT_EQ(s.shape(), (ts::Shape{1}));
  EXPECT_EQ(s.to_vector(), (std::vector<int64_t>{0}));
  EXPECT_EQ(a.slice(0, 1, 4, huge - 1).to_vector(), (std::vector<int64_t>{1}));
  EXPECT_EQ(a.slice(0, -1, huge, huge).to_vector(), (std::vector<int64_t>{3}));
  EXPECT_EQ(a.slice(0, 0, 4, 3).to_vector(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(a.slice(0, 1, 4, 3).to_vector(), (std::vector<int64_t>{1}));
  EXPECT_EQ(a.slice(0, 4, huge, huge).numel(), 0);
  // stride * step overflows here, but one element needs no stride: a one-element slice keeps
  // the dim's stride (a huge one would overflow in kernels that step over it; fuzz_ops found a
  // matmul on such a view doing so).
  auto m = ts::arange<int64_t>(12).reshape({3, 4});
  EXPECT_EQ(m.slice(0, 0, 3, huge).to_vector(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.slice(1, 1, 4, huge).to_vector(), (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(m.slice(1, 1, 4, huge - 1).strides(), (ts::Strides{4, 1}));
  EXPECT_EQ(a.slice(0, 0, 4, huge - 1).strides(), (ts::Strides{1}));
  const auto mf = ts::arange<float>(12).reshape({3, 4});
  const auto col = mf.slice(1, 2, 4, huge - 1);  // [3, 1]
  EXPECT_EQ(ts::matmul(col, ts::ones<float>(ts::Shape{1, 2})).to_vector(),
            (std::vector<float>{2, 2, 6, 6, 10, 10}));
}

TEST(Tensor, ViewGeometryOverflowIsAnError) {
  // Views with int64-overflowing strides or offsets (only reachable through the internal
  // constructor; never read here) raise shape_error naming the op instead of wrapping (UB).
  const int64_t big = int64_t{1} << 62;
  auto base = ts::zeros<float>({4});
  const ts::Tensor<float> f(base.storage(), ts::Shape{3}, ts::Strides{big}, 0);
  const ts::Tensor<float> g(base.storage(), ts::Shape{2}, ts::Strides{big}, big);
  auto expect_error = [](auto make, const char* op) {
    try {
      (void)make();
      ADD_FAILURE() << op << ": no throw";
    } catch (const ts::shape_error& e) {
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
    }
  };
  expect_error([&] { return f.slice(0, 0, 3, 2); }, "slice");  // stride 2^63
  expect_error([&] { return g.slice(0, 1, 2); }, "slice");     // offset 2^63
  expect_error([&] { return g.select(0, 1); }, "select");      // offset 2^63
  // unsqueeze's new dim has extent 1: where stride * extent does not fit it takes the stride.
  EXPECT_EQ(f.unsqueeze(0).strides(), (ts::Strides{big, big}));
  EXPECT_EQ(f.unsqueeze(1).strides(), (ts::Strides{big, 1}));
  EXPECT_EQ(g.select(0, 0).offset(), big);
  // A view's extent-1 dims take any stride: one that would overflow is not needed.
  const ts::Tensor<float> h(base.storage(), ts::Shape{2}, ts::Strides{big}, 0);
  EXPECT_EQ(h.view({1, 2}).strides()[1], big);
  EXPECT_EQ(h.view({2, 1}).strides()[0], big);
}

TEST(Tensor, EmptyViewsKeepTheirOffset) {
  // An empty tensor may have huge extents; a view of it must not point past its (empty)
  // allocation, which data() would compute (undefined behaviour; fuzz_ops found it).
  const int64_t big = int64_t{1} << 62;
  const auto e = ts::zeros<float>({big, 0});
  EXPECT_EQ(e.select(0, big - 1).offset(), 0);
  EXPECT_EQ(e.select(0, big - 1).shape(), (ts::Shape{0}));
  EXPECT_EQ(e.slice(0, big / 2, big).offset(), 0);
  EXPECT_EQ(e.slice(0, big / 2, big).shape(), (ts::Shape{big / 2, 0}));
  EXPECT_EQ(e.slice(0, big / 2, big).data(), e.data());
  // A result shape whose element count overflows is refused when it is allocated.
  const auto a = ts::zeros<float>({big, 0}), b = ts::zeros<float>({0, 3});
  EXPECT_THROW((void)ts::matmul(a, b), ts::shape_error);
}

TEST(Tensor, EmptyViewsWithHugeStridesRunEveryKernel) {
  // [0, INT64_MAX] is a valid empty shape (its nonzero extents fit); a step of 2^62 along its
  // last dim keeps 2 elements 2^62 apart, so the first dim's stride (INT64_MAX) is compared with
  // 2^62 * 2 when the kernels coalesce dims: that product overflowed (undefined behaviour, which
  // the sanitizer build reports; fuzz_ops found it through a sum). Now such dims do not merge.
  const int64_t top = std::numeric_limits<int64_t>::max();
  const auto v = ts::zeros<float>({0, top}).slice(1, 0, top, int64_t{1} << 62);
  ASSERT_EQ(v.shape(), (ts::Shape{0, 2}));
  ASSERT_EQ(v.strides(), (ts::Strides{top, int64_t{1} << 62}));
  EXPECT_EQ(ts::sum(v).item(), 0.0f);
  EXPECT_EQ(ts::sum(v, {1}).shape(), (ts::Shape{0}));
  EXPECT_EQ(ts::sum(v, {0}).to_vector(), (std::vector<float>{0, 0}));
  EXPECT_EQ((v + v).shape(), (ts::Shape{0, 2}));
  EXPECT_EQ(v.contiguous().shape(), (ts::Shape{0, 2}));
}

TEST(Tensor, AllocationOverflowIsAnError) {
  // 2^62 elements fit int64 but not bytes of a double.
  EXPECT_THROW(ts::empty<double>({int64_t{1} << 62}), ts::shape_error);
}

// generate: element i (row-major) is f(i), on the CPU's generate kernel; an empty shape gives an
// empty tensor without calling f.
TEST(Tensor, GenerateFillsEachElementFromItsIndex) {
  const auto t =
      ts::generate<double, ts::cpu>({3, 5}, [](int64_t i) { return 0.5 * double(i * i); });
  ASSERT_EQ(t.shape(), (ts::Shape{3, 5}));
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(t(r, c), 0.5 * double((5 * r + c) * (5 * r + c)));
  int calls = 0;
  const auto e = ts::generate<float, ts::cpu>({0, 4}, [&](int64_t) { return float(++calls); });
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(calls, 0);
}

}  // namespace test_tensor
