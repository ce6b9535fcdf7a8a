// tessera/core/tensor.hpp - Tensor<T, B>: a shared handle to storage plus shape, strides, offset.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "dtype.hpp"
#include "storage.hpp"

TESSERA_BEGIN_NAMESPACE

template <element_type T, backend_tag B>
class Tensor;

/// A typed n-dimensional array on backend B (tessera::cpu or tessera::cuda).
///
/// Copying a Tensor shares its storage (like a LibTorch tensor or shared_ptr); `clone()` copies
/// data. Views (reshape when strides allow, transpose, permute, slice, squeeze, unsqueeze, expand)
/// share storage with their source. Every op accepts strided views. A default-constructed Tensor
/// is undefined (`defined() == false`); ops on it throw.
template <element_type T, backend_tag B = default_backend>
class Tensor {
 public:
  using value_type = T;
  using backend_type = B;

  Tensor() = default;

  /// Internal: a view of `storage` with the given geometry. Prefer the creation functions.
  Tensor(std::shared_ptr<detail::storage_block> storage, Shape shape, Strides strides,
         int64_t offset)
      : storage_(std::move(storage)), shape_(shape), strides_(strides), offset_(offset) {}

  /// A new, uninitialised contiguous tensor. Throws shape_error when the element count
  /// overflows int64: ops build result shapes with push_back, which does not check, so the
  /// shape is validated here before anything multiplies its extents.
  explicit Tensor(const Shape& shape)
      : storage_(detail::allocate_storage<B>(validated(shape).numel(), sizeof(T))),
        shape_(shape),
        strides_(contiguous_strides(shape)) {}

  // ---- geometry ----
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int rank() const { return shape_.rank(); }
  int dim() const { return shape_.rank(); }
  /// Extent of dimension d (negative d counts from the end).
  int64_t size(int64_t d) const { return shape_[detail::wrap_axis("size", d, rank())]; }
  int64_t stride(int64_t d) const { return strides_[detail::wrap_axis("stride", d, rank())]; }
  /// Elements: the product of the extents (1 for a scalar), 0 for an undefined tensor.
  int64_t numel() const { return storage_ ? shape_.numel() : 0; }
  static constexpr ::tessera::dtype dtype() { return dtype_of<T>; }
  /// True when elements are laid out densely in row-major order (size-1 dims' strides ignored).
  bool is_contiguous() const {
    int64_t expect = 1;
    for (int i = rank() - 1; i >= 0; --i) {
      if (shape_[i] == 0) return true;
      if (shape_[i] != 1 && strides_[i] != expect) return false;
      expect *= shape_[i];
    }
    return true;
  }
  /// Pointer to element (0, ..., 0): a device pointer for device backends.
  T* data() const { return storage_ ? static_cast<T*>(storage_->ptr) + offset_ : nullptr; }
  const std::shared_ptr<detail::storage_block>& storage() const { return storage_; }
  /// Whether two tensors share one allocation.
  bool shares_storage_with(const auto& other) const {
    return storage_ && storage_ == other.storage();
  }
  /// The kernel-facing view.
  detail::strided<T> view_ref() const { return {data(), shape_, strides_}; }
  /// The write count of the storage (shared with every view of it): in-place ops (fill_, copy_,
  /// map_to, compound assignment, out= forms, optimizer steps) add one. Autograd records it for
  /// the tensors a backward pass reads and refuses to run on ones written since. Writes through
  /// data() or element references are not counted.
  uint64_t version() const {
    return storage_ ? storage_->version.load(std::memory_order_relaxed) : 0;
  }
  /// Counts one in-place write (the ops layer calls it for every tensor it writes in place).
  void bump_version() const {
    if (storage_) storage_->version.fetch_add(1, std::memory_order_relaxed);
  }

  // ---- views (share storage) ----

  /// Same data with a new shape (one extent may be -1). A view when the strides allow it,
  /// otherwise a contiguous copy, as torch.reshape. Throws shape_error if counts differ.
  Tensor reshape(std::span<const int64_t> dims) const {
    Shape s = infer_shape("reshape", dims);
    if (auto st = view_strides(s)) return Tensor(storage_, s, *st, offset_);
    return contiguous().reshape(dims);
  }
  Tensor reshape(std::initializer_list<int64_t> dims) const {
    return reshape(std::span(dims.begin(), dims.size()));
  }
  Tensor reshape(const Shape& s) const { return reshape(s.span()); }
  /// As reshape, but never copies: throws shape_error when the strides do not allow a view.
  Tensor view(std::span<const int64_t> dims) const {
    Shape s = infer_shape("view", dims);
    auto st = view_strides(s);
    if (!st)
      detail::fail<shape_error>("view", "cannot view ", shape_, " with strides ", strides_, " as ",
                                s, " without copying; use reshape()");
    return Tensor(storage_, s, *st, offset_);
  }
  Tensor view(std::initializer_list<int64_t> dims) const {
    return view(std::span(dims.begin(), dims.size()));
  }
  Tensor view(const Shape& s) const { return view(s.span()); }
  /// Flattens to 1-D (a view when possible).
  Tensor flatten() const { return reshape({-1}); }

  /// Swaps two dimensions.
  Tensor transpose(int64_t d0, int64_t d1) const {
    check_defined("transpose");
    int a = detail::wrap_axis("transpose", d0, rank()),
        b = detail::wrap_axis("transpose", d1, rank());
    if (rank() == 0) return *this;
    Shape s = shape_;
    Strides st = strides_;
    std::swap(s[a], s[b]);
    std::swap(st[a], st[b]);
    return Tensor(storage_, s, st, offset_);
  }
  /// Reorders dimensions: result dim i is source dim perm[i]. perm must be a permutation.
  Tensor permute(std::span<const int64_t> perm) const {
    check_defined("permute");
    if (static_cast<int>(perm.size()) != rank())
      detail::fail<shape_error>("permute", "permutation of length ", perm.size(), " for rank ",
                                rank());
    Shape s;
    Strides st;
    bool seen[max_rank] = {};
    for (int64_t p : perm) {
      int a = detail::wrap_axis("permute", p, rank());
      if (seen[a]) detail::fail<index_error>("permute", "axis ", p, " repeated in permutation");
      seen[a] = true;
      s.push_back(shape_[a]);
      st.push_back(strides_[a]);
    }
    return Tensor(storage_, s, st, offset_);
  }
  Tensor permute(std::initializer_list<int64_t> perm) const {
    return permute(std::span(perm.begin(), perm.size()));
  }

  /// Elements start, start+step, ... below stop along dim (Python slice semantics: negative
  /// start/stop count from the end and are clamped; step must be positive).
  Tensor slice(int64_t dim, int64_t start, int64_t stop, int64_t step = 1) const {
    check_defined("slice");
    if (rank() == 0) detail::fail<index_error>("slice", "cannot slice a rank-0 tensor");
    int d = detail::wrap_axis("slice", dim, rank());
    if (step <= 0) detail::fail<index_error>("slice", "step ", step, " must be positive");
    const int64_t n = shape_[d];
    auto clampi = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
    int64_t b = clampi(start), e = clampi(stop);
    // ceil((e - b) / step) without forming e - b + step - 1, which overflows for huge steps.
    int64_t len = e > b ? (e - b - 1) / step + 1 : 0;
    Shape s = shape_;
    Strides st = strides_;
    s[d] = len;
    // One element (or none) needs no stride: keep the old one rather than stride * step, which
    // for a huge step would put a huge stride on the view for kernels to multiply again.
    if (len <= 1)
      st[d] = strides_[d];
    else if (__builtin_mul_overflow(strides_[d], step, &st[d]))
      detail::fail<shape_error>("slice", "stride ", strides_[d], " * step ", step,
                                " overflows int64");
    // An empty view keeps the offset: it is never read, and for an empty tensor b may lie far
    // past the allocation (shape [2^62, 0] has nothing to point at).
    int64_t off = offset_;
    if (s.numel() && detail::mul_add_overflow(b, strides_[d], offset_, off))
      detail::fail<shape_error>("slice", "offset ", offset_, " + ", b, " * stride ", strides_[d],
                                " overflows int64");
    return Tensor(storage_, s, st, off);
  }
  /// The sub-tensor at `index` along dim, with that dim removed.
  Tensor select(int64_t dim, int64_t index) const {
    check_defined("select");
    int d = detail::wrap_axis("select", dim, rank());
    if (rank() == 0) detail::fail<index_error>("select", "cannot select from a rank-0 tensor");
    if (index < -shape_[d] || index >= shape_[d])
      detail::fail<index_error>("select", "index ", index, " out of range for dim ", d, " of size ",
                                shape_[d]);
    if (index < 0) index += shape_[d];
    int64_t off = offset_;  // an empty result keeps it (see slice)
    if (numel() && detail::mul_add_overflow(index, strides_[d], offset_, off))
      detail::fail<shape_error>("select", "offset ", offset_, " + ", index, " * stride ",
                                strides_[d], " overflows int64");
    Shape s = shape_;
    Strides st = strides_;
    s.erase(d);
    st.erase(d);
    return Tensor(storage_, s, st, off);
  }
  /// Removes every dimension of extent 1.
  Tensor squeeze() const {
    Shape s;
    Strides st;
    for (int i = 0; i < rank(); ++i)
      if (shape_[i] != 1) s.push_back(shape_[i]), st.push_back(strides_[i]);
    return Tensor(storage_, s, st, offset_);
  }
  /// Removes dimension dim if its extent is 1 (otherwise returns the tensor unchanged, as torch).
  Tensor squeeze(int64_t dim) const {
    if (rank() == 0) return *this;
    int d = detail::wrap_axis("squeeze", dim, rank());
    if (shape_[d] != 1) return *this;
    Shape s = shape_;
    Strides st = strides_;
    s.erase(d);
    st.erase(d);
    return Tensor(storage_, s, st, offset_);
  }
  /// Inserts a dimension of extent 1 at position dim (in [-rank-1, rank]).
  Tensor unsqueeze(int64_t dim) const {
    int d = detail::wrap_axis("unsqueeze", dim, rank() + 1);
    if (rank() == max_rank) detail::fail<shape_error>("unsqueeze", "rank would exceed ", max_rank);
    // The new dim has extent 1, so its stride never matters: stride * extent of the dim after
    // it (what a contiguous tensor would have), or that dim's stride where the product does
    // not fit.
    int64_t stride = 1;
    if (d < rank() && __builtin_mul_overflow(strides_[d], shape_[d], &stride)) stride = strides_[d];
    Shape s = shape_;
    Strides st = strides_;
    s.insert(d, 1);
    st.insert(d, stride);
    return Tensor(storage_, s, st, offset_);
  }
  /// Broadcasts to `target` (NumPy rules; -1 keeps an extent) without copying: repeated
  /// dimensions get stride 0. Throws shape_error if the shape does not broadcast to target.
  Tensor expand(const Shape& target) const { return expand_impl("expand", target.span()); }
  Tensor expand(std::initializer_list<int64_t> target) const {
    return expand_impl("expand", std::span(target.begin(), target.size()));
  }
  Tensor broadcast_to(const Shape& target) const {
    return expand_impl("broadcast_to", target.span());
  }

  // ---- copies and conversions (defined in ops/tensor_copy.hpp, which needs the kernels) ----

  /// This tensor if already contiguous, otherwise a contiguous copy.
  Tensor contiguous() const;
  /// A contiguous deep copy.
  Tensor clone() const;
  /// A contiguous copy converted to element type U (round-to-nearest-even for narrowing floats;
  /// C++ conversion for integers, with NaN -> 0 and saturation for float -> integer).
  template <element_type U>
  Tensor<U, B> astype() const;
  /// A copy on backend B2 (host <-> device); a clone when B2 == B.
  template <backend_tag B2>
  Tensor<T, B2> to() const;
  /// The elements in row-major order, copied to the host.
  std::vector<T> to_vector() const;
  /// The single element of a tensor with numel() == 1; throws shape_error otherwise.
  T item() const;
  /// Sets every element to v (through views too).
  const Tensor& fill_(T v) const;
  /// Copies src (broadcast to this shape, converted to T) into this tensor.
  template <element_type U>
  const Tensor& copy_(const Tensor<U, B>& src) const;

  // ---- element access (host-accessible backends only; bounds-checked) ----

  /// Reference to the element at the given indices (negative indices count from the end).
  template <std::integral... I>
  T& operator()(I... idx) const {
    const int64_t ix[] = {static_cast<int64_t>(idx)..., 0};
    return at(std::span<const int64_t>(ix, sizeof...(I)));
  }
  T& at(std::span<const int64_t> idx) const {
    static_assert(backend::memory<B>::host_accessible,
                  "tessera: element access needs a host-accessible backend; use to<cpu>() first");
    check_defined("at");
    if (static_cast<int>(idx.size()) != rank())
      detail::fail<index_error>("at", idx.size(), " indices for a tensor of rank ", rank(), " ",
                                shape_);
    int64_t off = 0;
    for (int i = 0; i < rank(); ++i) {
      int64_t k = idx[i];
      if (k < -shape_[i] || k >= shape_[i])
        detail::fail<index_error>("at", "index ", k, " out of range for dim ", i, " of ", shape_);
      off += (k < 0 ? k + shape_[i] : k) * strides_[i];
    }
    return data()[off];
  }
  T& at(std::initializer_list<int64_t> idx) const { return at(std::span(idx.begin(), idx.size())); }

  /// Throws error naming op if the tensor is undefined.
  void check_defined(std::string_view op) const {
    if (!storage_) detail::fail<error>(op, "tensor is undefined (default-constructed)");
  }

 private:
  static const Shape& validated(const Shape& s) {
    s.validate();
    return s;
  }
  Shape infer_shape(std::string_view op, std::span<const int64_t> dims) const {
    check_defined(op);
    int infer = -1;
    int64_t known = 1;
    Shape s;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == -1) {
        if (infer >= 0) detail::fail<shape_error>(op, "only one extent may be -1");
        infer = static_cast<int>(i);
        s.push_back(1);
      } else {
        if (dims[i] < 0) detail::fail<shape_error>(op, "extent ", dims[i], " is negative");
        s.push_back(dims[i]);
        if (__builtin_mul_overflow(known, dims[i], &known))
          detail::fail<shape_error>(op, "target shape overflows int64");
      }
    }
    if (infer >= 0) {
      if (known == 0 || numel() % known != 0)
        detail::fail<shape_error>(op, "cannot infer -1 reshaping ", shape_, " (", numel(),
                                  " elements)");
      s[infer] = numel() / known;
    }
    s.validate();
    if (s.numel() != numel())
      detail::fail<shape_error>(op, "cannot reshape ", shape_, " (", numel(), " elements) to ", s,
                                " (", s.numel(), " elements)");
    return s;
  }
  // Strides for viewing this tensor as `s` without copying, if any. Source dims are walked from
  // the innermost in chunks whose dims are mutually contiguous; each chunk must be covered by a
  // run of target dims with exactly the same element count.
  std::optional<Strides> view_strides(const Shape& s) const {
    Strides out;
    out.resize(s.rank());
    if (numel() == 0 || rank() == 0) return contiguous_strides(s);
    int view_d = s.rank() - 1;
    int64_t chunk_base_stride = strides_[rank() - 1], tensor_numel = 1, view_numel = 1;
    for (int d = rank() - 1; d >= 0; --d) {
      tensor_numel *= shape_[d];
      // Products that overflow int64 cannot equal a stride: the chunk ends there.
      int64_t next = 0;
      const bool chunk_ends =
          d == 0 ||
          (shape_[d - 1] != 1 && (__builtin_mul_overflow(tensor_numel, chunk_base_stride, &next) ||
                                  strides_[d - 1] != next));
      if (!chunk_ends) continue;
      while (view_d >= 0 && (view_numel < tensor_numel || s[view_d] == 1)) {
        if (__builtin_mul_overflow(view_numel, chunk_base_stride, &out[view_d])) {
          // An extent-1 dim takes any stride; a longer one's is not representable: no view.
          if (s[view_d] != 1) return std::nullopt;
          out[view_d] = chunk_base_stride;
        }
        view_numel *= s[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides_[d - 1];
        tensor_numel = view_numel = 1;
      }
    }
    if (view_d != -1) return std::nullopt;
    return out;
  }
  Tensor expand_impl(std::string_view op, std::span<const int64_t> target) const {
    check_defined(op);
    const int r = static_cast<int>(target.size());
    if (r < rank())
      detail::fail<shape_error>(op, "cannot expand ", shape_, " to fewer dims (", r, ")");
    Shape s;
    Strides st;
    s.resize(r);
    st.resize(r);
    for (int i = 0; i < r; ++i) {
      int j = i - (r - rank());
      int64_t src = j >= 0 ? shape_[j] : 1, want = target[i];
      if (want == -1) {
        if (j < 0) detail::fail<shape_error>(op, "-1 is not allowed for new leading dim ", i);
        want = src;
      }
      if (want < 0) detail::fail<shape_error>(op, "extent ", want, " is negative");
      if (src != want && src != 1)
        detail::fail<shape_error>(op, "cannot expand ", shape_, " to ",
                                  detail::dim_list(target).to_string(), " (dim ", i, ": ", src,
                                  " vs ", want, ")");
      s[i] = want;
      st[i] = (j >= 0 && src == want) ? strides_[j] : 0;
    }
    s.validate();
    return Tensor(storage_, s, st, offset_);
  }

  std::shared_ptr<detail::storage_block> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
};

TESSERA_END_NAMESPACE
