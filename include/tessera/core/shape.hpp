// tessera/core/shape.hpp - Shape (extents) and Strides: small fixed-capacity int64 lists.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>

#include "error.hpp"

TESSERA_BEGIN_NAMESPACE

/// Largest rank a tensor may have (a 4-D cap is a known pitfall; 8 covers NCDHW + batch dims).
inline constexpr int max_rank = 8;

namespace detail {

/// A list of at most max_rank int64 values, stored inline.
class dim_list {
 public:
  constexpr dim_list() = default;
  dim_list(std::initializer_list<int64_t> v) { assign(v.begin(), v.size()); }
  explicit dim_list(std::span<const int64_t> v) { assign(v.data(), v.size()); }

  constexpr int size() const { return n_; }
  constexpr bool empty() const { return n_ == 0; }
  constexpr int64_t operator[](int i) const { return v_[i]; }
  constexpr int64_t& operator[](int i) { return v_[i]; }
  constexpr const int64_t* begin() const { return v_; }
  constexpr const int64_t* end() const { return v_ + n_; }
  constexpr const int64_t* data() const { return v_; }
  constexpr int64_t* data() { return v_; }
  std::span<const int64_t> span() const { return {v_, static_cast<size_t>(n_)}; }

  void push_back(int64_t x) {
    if (n_ == max_rank) fail<shape_error>("Shape", "rank would exceed ", max_rank);
    v_[n_++] = x;
  }
  void insert(int pos, int64_t x) {
    push_back(0);
    for (int i = n_ - 1; i > pos; --i) v_[i] = v_[i - 1];
    v_[pos] = x;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) v_[i] = v_[i + 1];
    --n_;
  }
  void resize(int n, int64_t fill = 0) {
    if (n < 0 || n > max_rank)
      fail<shape_error>("Shape", "rank ", n, " is not in [0, ", max_rank, "]");
    for (int i = n_; i < n; ++i) v_[i] = fill;
    n_ = n;
  }
  friend bool operator==(const dim_list& a, const dim_list& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  std::string to_string() const {
    std::string s = "[";
    for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(v_[i]);
    return s + "]";
  }

 private:
  void assign(const int64_t* p, size_t n) {
    if (n > static_cast<size_t>(max_rank))
      fail<shape_error>("Shape", "rank ", n, " exceeds the maximum of ", max_rank);
    n_ = static_cast<int>(n);
    std::copy(p, p + n, v_);
  }
  int64_t v_[max_rank] = {};
  int n_ = 0;
};

}  // namespace detail

/// The extents of a tensor: rank 0..8, every extent >= 0, and the product of the nonzero
/// extents fits in int64 (as NumPy requires; so contiguous strides fit even when a 0 extent
/// makes the element count 0). Constructing one with a negative extent, too many dims, or an
/// overflowing product throws shape_error.
class Shape : public detail::dim_list {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> v) : dim_list(v) { validate(); }
  explicit Shape(std::span<const int64_t> v) : dim_list(v) { validate(); }
  explicit Shape(const dim_list& v) : dim_list(v) { validate(); }

  /// Number of dimensions.
  int rank() const { return size(); }
  /// Product of the extents (1 for rank 0); checked at construction, so it cannot overflow here.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : *this) n *= d;
    return n;
  }
  /// Validates after in-place edits (push_back, resize, operator[]).
  void validate() const {
    int64_t n = 1;
    for (int i = 0; i < size(); ++i) {
      int64_t d = (*this)[i];
      if (d < 0)
        detail::fail<shape_error>("Shape", "extent ", d, " at dim ", i, " of ", to_string(),
                                  " is negative");
      if (d != 0 && __builtin_mul_overflow(n, d, &n))
        detail::fail<shape_error>("Shape", "element count of ", to_string(), " overflows int64");
    }
  }
  friend std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.to_string(); }
};

/// Element strides (not bytes) of a tensor; may be 0 (broadcast) and, for views, any value.
class Strides : public detail::dim_list {
 public:
  using dim_list::dim_list;
  explicit Strides(const dim_list& v) : dim_list(v) {}
  friend std::ostream& operator<<(std::ostream& os, const Strides& s) {
    return os << s.to_string();
  }
};

/// Row-major (C-order) strides of a shape (extent 0 counts as 1). A validated Shape cannot
/// overflow them; one edited in place without validate() throws shape_error if it does.
inline Strides contiguous_strides(const Shape& s) {
  Strides st;
  st.resize(s.rank());
  int64_t acc = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    st[i] = acc;
    if (__builtin_mul_overflow(acc, std::max<int64_t>(s[i], 1), &acc))
      detail::fail<shape_error>("contiguous_strides", "strides of ", s.to_string(),
                                " overflow int64");
  }
  return st;
}

namespace detail {
/// out = a * b + c; true (out unspecified) where that overflows int64. View offsets use it.
inline bool mul_add_overflow(int64_t a, int64_t b, int64_t c, int64_t& out) {
  int64_t p;
  return __builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(p, c, &out);
}
/// Wraps a possibly negative axis into [0, rank), or throws index_error naming the op.
inline int wrap_axis(std::string_view op, int64_t axis, int rank) {
  const int r = std::max(rank, 1);  // a scalar accepts axis 0 / -1, as in NumPy's keepdims logic
  if (axis < -r || axis >= r)
    fail<index_error>(op, "axis ", axis, " is out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

/// Extent of dim i of s aligned right in a rank-r broadcast (1 where s has no such dim).
inline int64_t broadcast_extent(const Shape& s, int i, int r) {
  const int j = i - (r - s.rank());
  return j >= 0 ? s[j] : 1;
}
/// The first dim of the broadcast of a and b where they differ and neither is 1; -1 if none.
inline int broadcast_conflict(const Shape& a, const Shape& b) {
  const int r = std::max(a.rank(), b.rank());
  for (int i = 0; i < r; ++i) {
    const int64_t da = broadcast_extent(a, i, r), db = broadcast_extent(b, i, r);
    if (da != db && da != 1 && db != 1) return i;
  }
  return -1;
}
}  // namespace detail

/// NumPy broadcasting of two shapes; throws shape_error naming `op` when they do not broadcast.
inline Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op = "broadcast") {
  const int r = std::max(a.rank(), b.rank());
  if (const int i = detail::broadcast_conflict(a, b); i >= 0)
    detail::fail<shape_error>(op, "shapes ", a, " and ", b, " cannot be broadcast (dim ", i, ": ",
                              detail::broadcast_extent(a, i, r), " vs ",
                              detail::broadcast_extent(b, i, r), ")");
  Shape out;
  out.resize(r);
  for (int i = 0; i < r; ++i) {
    const int64_t da = detail::broadcast_extent(a, i, r), db = detail::broadcast_extent(b, i, r);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

TESSERA_END_NAMESPACE
