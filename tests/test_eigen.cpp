// Tests of the Eigen interop (tessera/interop/eigen.hpp): maps of contiguous and strided
// tensors, copies from row- and column-major matrices, tensors and expressions, and errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <tessera/interop/eigen.hpp>
#include <vector>

namespace ts = tessera;

namespace {

// A [rows, cols] tensor with distinct small integer values (exact in every type).
template <class T>
ts::Tensor<T, ts::cpu> grid(int64_t rows, int64_t cols, int64_t salt = 0) {
  std::vector<T> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<T>((static_cast<int64_t>(i) * 7 + salt) % 23 - 11);
  return ts::from_vector<T, ts::cpu>(v, ts::Shape{rows, cols});
}

// Checks every element of an Eigen map/matrix against the tensor's element access.
template <class M, class T>
void expect_same(const M& m, const ts::Tensor<T, ts::cpu>& t) {
  ASSERT_EQ(t.rank(), 2);
  ASSERT_EQ(m.rows(), t.size(0));
  ASSERT_EQ(m.cols(), t.size(1));
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j)
      EXPECT_EQ(m(i, j), t(i, j)) << "at (" << i << ", " << j << ")";
}

template <class T>
class EigenInterop : public ::testing::Test {};
using EigenTypes = ::testing::Types<float, double, int32_t>;
TYPED_TEST_SUITE(EigenInterop, EigenTypes);

}  // namespace

// ---- as_eigen ----

TYPED_TEST(EigenInterop, MapContiguousSharesData) {
  using T = TypeParam;
  const auto t = grid<T>(3, 4);
  auto m = ts::as_eigen(t);
  expect_same(m, t);
  EXPECT_EQ(m.data(), t.data());
  m(1, 2) = T(42);  // writes reach the tensor
  EXPECT_EQ(t(1, 2), T(42));
  t(2, 3) = T(-5);  // and the other way round
  EXPECT_EQ(m(2, 3), T(-5));

  auto dense = ts::as_eigen<Eigen::Stride<0, 0>>(t);
  expect_same(dense, t);
  auto outer = ts::as_eigen<Eigen::OuterStride<>>(t);
  expect_same(outer, t);
}

TYPED_TEST(EigenInterop, MapTranspose) {
  using T = TypeParam;
  const auto t = grid<T>(4, 6).transpose(0, 1);
  ASSERT_FALSE(t.is_contiguous());
  auto m = ts::as_eigen(t);
  expect_same(m, t);
  EXPECT_EQ(m.innerStride(), 6);
  EXPECT_EQ(m.outerStride(), 1);
}

TYPED_TEST(EigenInterop, MapSlicesWithStep) {
  using T = TypeParam;
  const auto base = grid<T>(9, 11, 3);
  const auto cols_step = base.slice(1, 1, 10, 3);                // [9, 3], col stride 3
  const auto rows_step = base.slice(0, 2, 9, 2).slice(1, 4, 9);  // [4, 5], row stride 22
  const auto both = base.slice(0, 8, 0, 1).slice(0, 0, 9, 3).slice(1, 0, 11, 4).transpose(0, 1);
  expect_same(ts::as_eigen(cols_step), cols_step);
  expect_same(ts::as_eigen(rows_step), rows_step);
  expect_same(ts::as_eigen(both), both);
  // A column range keeps unit column stride: OuterStride<> expresses it.
  expect_same(ts::as_eigen<Eigen::OuterStride<>>(rows_step), rows_step);
  // A row of a slice and a single column: extent-1 dims with any stride.
  const auto row = base.slice(0, 5, 6).slice(1, 0, 11, 2);
  expect_same(ts::as_eigen(row), row);
  const auto col = base.slice(1, 7, 8);
  expect_same(ts::as_eigen<Eigen::OuterStride<>>(col), col);
  const auto col_t = col.transpose(0, 1);  // [1, 9] with column stride 11
  expect_same(ts::as_eigen(col_t), col_t);
}

TYPED_TEST(EigenInterop, ProductThroughMapsMatchesNaiveLoop) {
  using T = TypeParam;
  const auto a = grid<T>(5, 7, 1);
  const auto b_src = grid<T>(3, 7, 2);
  const auto b = b_src.transpose(0, 1);  // [7, 3], strided
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> c = ts::as_eigen(a) * ts::as_eigen(b);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      T acc = 0;
      for (int64_t k = 0; k < 7; ++k) acc += a(i, k) * b(k, j);
      EXPECT_EQ(c(i, j), acc) << "at (" << i << ", " << j << ")";
    }
  // Writing a product into a tensor through a map.
  auto out = ts::zeros<T, ts::cpu>(ts::Shape{5, 3});
  ts::as_eigen<Eigen::Stride<0, 0>>(out).noalias() = ts::as_eigen(a) * ts::as_eigen(b);
  expect_same(c, out);
}

TEST(EigenInteropEdge, ZeroSizeAndBool) {
  const auto empty = ts::zeros<float, ts::cpu>(ts::Shape{0, 3});
  auto m = ts::as_eigen(empty);
  EXPECT_EQ(m.rows(), 0);
  EXPECT_EQ(m.cols(), 3);
  const auto t = ts::from_vector<bool, ts::cpu>({true, false, false, true}, ts::Shape{2, 2});
  expect_same(ts::as_eigen(t), t);
}

// ---- from_eigen ----

TYPED_TEST(EigenInterop, FromRowMajorMatrix) {
  using T = TypeParam;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> m(3, 5);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) m(i, j) = static_cast<T>(10 * i + j);
  const auto t = ts::from_eigen(m);
  EXPECT_EQ(t.shape(), (ts::Shape{3, 5}));
  EXPECT_TRUE(t.is_contiguous());
  expect_same(m, t);
  EXPECT_NE(static_cast<const void*>(t.data()), static_cast<const void*>(m.data()));  // a copy
}

TYPED_TEST(EigenInterop, FromColMajorMatrix) {
  using T = TypeParam;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> m(4, 3);  // Eigen's default: column-major
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) m(i, j) = static_cast<T>(10 * i + j);
  const auto t = ts::from_eigen(m);
  EXPECT_EQ(t.shape(), (ts::Shape{4, 3}));
  expect_same(m, t);
  EXPECT_EQ(t.to_vector(), (std::vector<T>{0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}));
}

TYPED_TEST(EigenInterop, FromExpressionsArraysAndVectors) {
  using T = TypeParam;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> m(4, 5);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) m(i, j) = static_cast<T>(i * 5 - j);
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> mt = m.transpose();
  expect_same(mt, ts::from_eigen(m.transpose()));
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> blk = m.block(1, 2, 3, 2);
  expect_same(blk, ts::from_eigen(m.block(1, 2, 3, 2)));
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> twice = m * T(2);
  expect_same(twice, ts::from_eigen(m * T(2)));
  Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic> arr = m.array() + T(1);
  expect_same(arr, ts::from_eigen(arr));

  Eigen::Matrix<T, Eigen::Dynamic, 1> v(3);
  v << T(1), T(2), T(3);
  EXPECT_EQ(ts::from_eigen(v).shape(), (ts::Shape{3, 1}));
  EXPECT_EQ(ts::from_eigen(v.transpose()).shape(), (ts::Shape{1, 3}));
  EXPECT_EQ(ts::from_eigen(v.transpose()).to_vector(), (std::vector<T>{1, 2, 3}));
}

TYPED_TEST(EigenInterop, RoundTripThroughMap) {
  using T = TypeParam;
  const auto t = grid<T>(6, 4, 5).slice(0, 0, 6, 2);  // strided source
  const auto back = ts::from_eigen(ts::as_eigen(t));
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_FALSE(back.shares_storage_with(t));
  EXPECT_EQ(back.to_vector(), t.to_vector());
}

// ---- Eigen::TensorMap ----

TYPED_TEST(EigenInterop, TensorMapRanks0To4) {
  using T = TypeParam;
  const auto flat = ts::arange<T, ts::cpu>(2 * 3 * 4 * 5);
  {
    const auto s = ts::full<T, ts::cpu>(ts::Shape{}, T(7));
    auto m = ts::as_eigen_tensor<0>(s);
    EXPECT_EQ(m(), T(7));
  }
  {
    const auto t = flat.slice(0, 0, 7);
    auto m = ts::as_eigen_tensor<1>(t);
    ASSERT_EQ(m.dimension(0), 7);
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(m(i), t(i));
  }
  {
    const auto t = flat.reshape({6, 20});
    auto m = ts::as_eigen_tensor<2>(t);
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 20; ++j) EXPECT_EQ(m(i, j), t(i, j));
  }
  {
    const auto t = flat.reshape({4, 5, 6});
    auto m = ts::as_eigen_tensor<3>(t);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j)
        for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(m(i, j, k), t(i, j, k));
  }
  {
    const auto t = flat.reshape({2, 3, 4, 5});
    auto m = ts::as_eigen_tensor<4>(t);
    EXPECT_EQ(m.data(), t.data());
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4; ++k)
          for (int64_t l = 0; l < 5; ++l) EXPECT_EQ(m(i, j, k, l), t(i, j, k, l));
    m(1, 2, 3, 4) = T(-3);  // shares data
    EXPECT_EQ(t(1, 2, 3, 4), T(-3));
    // Eigen tensor expressions on the map.
    Eigen::Tensor<T, 0, Eigen::RowMajor> total = m.sum();
    T expect = 0;
    for (T v : t.to_vector()) expect += v;
    EXPECT_EQ(total(), expect);
  }
}

TYPED_TEST(EigenInterop, FromEigenTensorBothLayouts) {
  using T = TypeParam;
  Eigen::Tensor<T, 3, Eigen::ColMajor> col(2, 3, 4);
  Eigen::Tensor<T, 3, Eigen::RowMajor> row(2, 3, 4);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        col(i, j, k) = row(i, j, k) = static_cast<T>(100 * i + 10 * j + k);
  for (const auto& t : {ts::from_eigen_tensor(col), ts::from_eigen_tensor(row)}) {
    EXPECT_EQ(t.shape(), (ts::Shape{2, 3, 4}));
    EXPECT_TRUE(t.is_contiguous());
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) EXPECT_EQ(t(i, j, k), row(i, j, k));
  }
  // An expression and a TensorMap, column-major.
  const auto doubled = ts::from_eigen_tensor(col * T(2));
  EXPECT_EQ(doubled(1, 2, 3), T(2 * 123));
  Eigen::TensorMap<Eigen::Tensor<T, 2, Eigen::ColMajor>> map2(col.data(), 6, 4);
  const auto t2 = ts::from_eigen_tensor(map2);
  EXPECT_EQ(t2.shape(), (ts::Shape{6, 4}));
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(t2(i, j), map2(i, j));
  // Rank 1 and rank 0.
  Eigen::Tensor<T, 1> v(5);
  v.setValues({T(1), T(2), T(3), T(4), T(5)});
  EXPECT_EQ(ts::from_eigen_tensor(v).to_vector(), (std::vector<T>{1, 2, 3, 4, 5}));
  Eigen::Tensor<T, 0> s;
  s() = T(9);
  const auto ts0 = ts::from_eigen_tensor(s);
  EXPECT_EQ(ts0.rank(), 0);
  EXPECT_EQ(ts0.item(), T(9));
}

TYPED_TEST(EigenInterop, TensorRoundTrip) {
  using T = TypeParam;
  const auto t = ts::arange<T, ts::cpu>(60).reshape({3, 4, 5});
  const auto back = ts::from_eigen_tensor(ts::as_eigen_tensor<3>(t));
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.to_vector(), t.to_vector());
}

// ---- errors ----

TEST(EigenInteropErrors, AsEigenRejects) {
  const auto v = ts::arange<float, ts::cpu>(6);
  EXPECT_THROW((void)ts::as_eigen(v), ts::shape_error);                     // rank 1
  EXPECT_THROW((void)ts::as_eigen(v.reshape({1, 2, 3})), ts::shape_error);  // rank 3
  EXPECT_THROW((void)ts::as_eigen(ts::full<float, ts::cpu>(ts::Shape{}, 1.f)), ts::shape_error);
  const auto expanded = v.reshape({1, 6}).expand({4, 6});  // row stride 0
  EXPECT_THROW((void)ts::as_eigen(expanded), ts::shape_error);
  EXPECT_THROW((void)ts::as_eigen(v.reshape({6, 1}).expand({6, 3})), ts::shape_error);
  const auto g = grid<float>(4, 6);
  EXPECT_THROW((void)ts::as_eigen<Eigen::OuterStride<>>(g.transpose(0, 1)), ts::shape_error);
  using dense = Eigen::Stride<0, 0>;
  EXPECT_THROW((void)ts::as_eigen<dense>(g.slice(0, 0, 4, 2)), ts::shape_error);
  EXPECT_THROW((void)ts::as_eigen(ts::Tensor<float, ts::cpu>()), ts::error);
  try {
    (void)ts::as_eigen(v.reshape({1, 2, 3}));
  } catch (const ts::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("as_eigen"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[1, 2, 3]"), std::string::npos);
  }
}

TEST(EigenInteropErrors, AsEigenTensorRejects) {
  const auto t = ts::arange<double, ts::cpu>(24).reshape({2, 3, 4});
  EXPECT_THROW((void)ts::as_eigen_tensor<2>(t), ts::shape_error);
  EXPECT_THROW((void)ts::as_eigen_tensor<4>(t), ts::shape_error);
  EXPECT_THROW((void)ts::as_eigen_tensor<3>(t.transpose(0, 2)), ts::shape_error);
  EXPECT_THROW((void)ts::as_eigen_tensor<3>(t.slice(2, 0, 4, 2)), ts::shape_error);
  EXPECT_THROW((void)ts::as_eigen_tensor<1>(ts::Tensor<double, ts::cpu>()), ts::error);
  // A contiguous slice is fine.
  EXPECT_NO_THROW((void)ts::as_eigen_tensor<3>(t.slice(0, 1, 2)));
}
