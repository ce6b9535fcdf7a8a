// tessera/interop/eigen.hpp - zero-copy Eigen views of CPU tensors, and tensors copied from
// Eigen matrices and tensors.
//
// The only tessera header that includes Eigen (Eigen/Core and the unsupported CXX11 Tensor
// module): include it and link Eigen3::Eigen. Eigen has no scalar type for tessera's half,
// bfloat16 and float8 formats, so tensors of those are rejected at compile time; convert them
// with astype<float>() first.
#pragma once

#include <type_traits>

// GCC 12's AVX-512 intrinsics self-initialize placeholder registers (`__m512 __Y = __Y;`), and
// Eigen's packet transposes inline them, so -Wuninitialized fires inside Eigen under -march=native
// on AVX-512 machines (GCC 13 fixed the header). Silence it for Eigen's code only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic pop
#endif

#include "../tessera.hpp"

TESSERA_BEGIN_NAMESPACE

namespace detail {

template <class T>
constexpr void require_eigen_scalar() {
  static_assert(!is_low_precision_v<std::remove_cv_t<T>>,
                "tessera/interop/eigen.hpp: half, bfloat16 and float8 are not Eigen scalar types; "
                "convert the tensor with astype<float>() first");
}

// Eigen's Tensor and TensorMap expose their storage; any other tensor expression is evaluated
// first.
template <class X>
struct is_eigen_tensor_storage : std::false_type {};
template <class S, int R, int Options, class Index>
struct is_eigen_tensor_storage<Eigen::Tensor<S, R, Options, Index>> : std::true_type {};
template <class P, int Options, template <class> class MakePointer>
struct is_eigen_tensor_storage<Eigen::TensorMap<P, Options, MakePointer>> : std::true_type {};

// A tensor holding the R-dimensional array at p laid out in `layout` (Eigen::RowMajor or
// ColMajor) with extents dims.
template <class S, int Layout, class Dims>
Tensor<S, cpu> copy_eigen_array(const S* p, const Dims& dims, int rank) {
  Shape shape;
  for (int i = 0; i < rank; ++i) shape.push_back(static_cast<int64_t>(dims[i]));
  if (Layout == Eigen::RowMajor || rank <= 1) return from_data<S, cpu>(p, shape);
  // Column-major data is the row-major array of the reversed shape; permuting back gives the
  // right view, and contiguous() lays it out row-major in one strided copy.
  Shape reversed;
  std::vector<int64_t> perm;
  for (int i = rank - 1; i >= 0; --i) reversed.push_back(shape[i]), perm.push_back(i);
  return from_data<S, cpu>(p, reversed).permute(perm).contiguous();
}

}  // namespace detail

/// The row-major Eigen matrix type that as_eigen maps.
template <class T>
using eigen_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// What as_eigen returns: a Map of a row-major dynamic matrix with stride type StrideT.
template <class T, class StrideT = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>
using eigen_map = Eigen::Map<eigen_matrix<T>, Eigen::Unaligned, StrideT>;

/// Views a rank-2 CPU tensor [rows, cols] as an Eigen::Map of a row-major matrix, sharing its
/// data (writes through the map change the tensor; the map must not outlive the storage).
///
/// StrideT picks what the map can express and how fast Eigen can use it:
/// - Eigen::Stride<Dynamic, Dynamic> (default): any positive row and column strides, e.g. a
///   transpose or a slice with a step;
/// - Eigen::OuterStride<>: unit column stride, any row stride (a slice of columns); lets Eigen
///   vectorize along rows;
/// - Eigen::Stride<0, 0>: a contiguous tensor only; the fastest.
/// Strides of extent-1 dims do not matter. Throws shape_error for an undefined tensor, a rank
/// other than 2, a zero or negative stride (an expanded dim: call contiguous() first), or
/// strides StrideT cannot express.
template <class StrideT = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>, element_type T>
eigen_map<T, StrideT> as_eigen(const Tensor<T, cpu>& t) {
  detail::require_eigen_scalar<T>();
  constexpr bool dynamic = std::is_same_v<StrideT, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;
  constexpr bool outer = std::is_same_v<StrideT, Eigen::OuterStride<Eigen::Dynamic>>;
  constexpr bool dense = std::is_same_v<StrideT, Eigen::Stride<0, 0>>;
  static_assert(dynamic || outer || dense,
                "tessera::as_eigen: StrideT must be Eigen::Stride<Dynamic, Dynamic>, "
                "Eigen::OuterStride<> or Eigen::Stride<0, 0>");
  t.check_defined("as_eigen");
  if (t.rank() != 2)
    detail::fail<shape_error>("as_eigen", "expected a rank-2 tensor, got shape ", t.shape());
  const int64_t rows = t.size(0), cols = t.size(1);
  // Extent-1 dims never move their pointer, so any positive stride describes them.
  const int64_t cs = cols > 1 ? t.stride(1) : 1;
  const int64_t rs = rows > 1 ? t.stride(0) : std::max<int64_t>(cols * cs, 1);
  if (t.numel() > 0 && (rs <= 0 || cs <= 0))
    detail::fail<shape_error>("as_eigen", "strides ", t.strides(), " of shape ", t.shape(),
                              " include a zero or negative stride, which an Eigen::Map cannot "
                              "express (an expanded view?); call contiguous() first");
  if constexpr (dynamic) {
    return eigen_map<T, StrideT>(t.data(), rows, cols, StrideT(rs, cs));
  } else if constexpr (outer) {
    if (t.numel() > 0 && cs != 1)
      detail::fail<shape_error>("as_eigen",
                                "Eigen::OuterStride<> needs a column stride of 1, got "
                                "strides ",
                                t.strides(), " for shape ", t.shape());
    return eigen_map<T, StrideT>(t.data(), rows, cols, StrideT(rs));
  } else {
    if (!t.is_contiguous())
      detail::fail<shape_error>("as_eigen",
                                "Eigen::Stride<0, 0> needs a contiguous tensor, got "
                                "strides ",
                                t.strides(), " for shape ", t.shape());
    return eigen_map<T, StrideT>(t.data(), rows, cols);
  }
}

/// A new contiguous CPU tensor [rows, cols] holding a copy of an Eigen matrix, array or
/// expression (row- or column-major; a vector gives [n, 1] or [1, n]). The element type is the
/// expression's Scalar, which must be a tessera element type.
template <class D>
Tensor<typename D::Scalar, cpu> from_eigen(const Eigen::DenseBase<D>& m) {
  using S = typename D::Scalar;
  static_assert(element_type<S>,
                "tessera::from_eigen: the Eigen scalar type is not a tessera element type (float, "
                "double, int8_t, uint8_t, int32_t, int64_t, bool)");
  Tensor<S, cpu> out(Shape{static_cast<int64_t>(m.rows()), static_cast<int64_t>(m.cols())});
  // Eigen does the (possibly column-major or lazy) source's traversal into the row-major output.
  as_eigen<Eigen::Stride<0, 0>>(out).array() = m.derived().array();
  return out;
}

/// Views a contiguous CPU tensor of rank Rank as an Eigen::TensorMap of a row-major
/// Eigen::Tensor, sharing its data. Throws shape_error when the tensor's rank is not Rank or it
/// is not contiguous (call contiguous() first).
template <int Rank, element_type T>
Eigen::TensorMap<Eigen::Tensor<T, Rank, Eigen::RowMajor>> as_eigen_tensor(const Tensor<T, cpu>& t) {
  detail::require_eigen_scalar<T>();
  static_assert(Rank >= 0 && Rank <= max_rank, "tessera::as_eigen_tensor: Rank must be in [0, 8]");
  t.check_defined("as_eigen_tensor");
  if (t.rank() != Rank)
    detail::fail<shape_error>("as_eigen_tensor", "expected a rank-", Rank, " tensor, got shape ",
                              t.shape());
  if (!t.is_contiguous())
    detail::fail<shape_error>("as_eigen_tensor", "needs a contiguous tensor, got strides ",
                              t.strides(), " for shape ", t.shape(), "; call contiguous() first");
  Eigen::DSizes<Eigen::Index, Rank> dims;
  for (int i = 0; i < Rank; ++i) dims[i] = static_cast<Eigen::Index>(t.size(i));
  return Eigen::TensorMap<Eigen::Tensor<T, Rank, Eigen::RowMajor>>(t.data(), dims);
}

/// A new contiguous CPU tensor holding a copy of an Eigen tensor, TensorMap or tensor
/// expression of rank <= 8, in either layout: element (i0, ..., iR-1) of the Eigen tensor is
/// element (i0, ..., iR-1) of the result, whose shape is the Eigen tensor's dimensions.
template <class D>
auto from_eigen_tensor(const Eigen::TensorBase<D, Eigen::ReadOnlyAccessors>& e) {
  using traits = Eigen::internal::traits<D>;
  using S = std::remove_const_t<typename traits::Scalar>;
  constexpr int rank = traits::NumDimensions;
  constexpr int layout = static_cast<int>(traits::Layout);
  static_assert(element_type<S>,
                "tessera::from_eigen_tensor: the Eigen scalar type is not a tessera element type");
  static_assert(rank <= max_rank,
                "tessera::from_eigen_tensor: rank exceeds tessera's maximum of 8");
  if constexpr (detail::is_eigen_tensor_storage<D>::value) {
    const D& t = static_cast<const D&>(e);
    return detail::copy_eigen_array<S, layout>(t.data(), t.dimensions(), rank);
  } else {
    const Eigen::Tensor<S, rank, layout, typename traits::Index> t = static_cast<const D&>(e);
    return detail::copy_eigen_array<S, layout>(t.data(), t.dimensions(), rank);
  }
}

TESSERA_END_NAMESPACE
