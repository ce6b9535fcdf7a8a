// tessera/data/dataset.hpp - an in-memory labelled dataset, mini-batch iteration (shuffled with
// the seeded, portable tessera::Generator) and normalisation.
//
//   ts::Generator rng(0);
//   for (auto [images, labels] : ts::data::batches(train, 64, rng)) { ... }   // one epoch
//   for (auto [images, labels] : ts::data::batches(test, 1000)) { ... }       // in order
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "../tessera.hpp"

TESSERA_BEGIN_NAMESPACE
namespace data {

/// A labelled dataset held in memory: `images` [N, ...] (e.g. [N, 1, 28, 28] for Fashion-MNIST)
/// and `labels` [N] (class indices). Copying a Dataset shares its tensors.
struct Dataset {
  Tensor<float, cpu> images;
  Tensor<int64_t, cpu> labels;

  /// Number of examples N (the first extent of `images`); 0 for an empty, undefined Dataset.
  int64_t size() const { return images.defined() && images.rank() > 0 ? images.size(0) : 0; }
};

/// One mini-batch: `images` [b, ...] and `labels` [b], fresh contiguous tensors that share no
/// memory with the dataset. An aggregate, so `auto [images, labels] = batch;` works.
struct Batch {
  Tensor<float, cpu> images;
  Tensor<int64_t, cpu> labels;
};

namespace detail {

// What a batch_range and its iterators share: the dataset's (contiguous) tensors and the order
// in which its rows are visited. Immutable once built, so copies of a range and its iterators
// can be used from several places.
struct batch_plan {
  Tensor<float, cpu> images;    // contiguous, [N, ...]
  Tensor<int64_t, cpu> labels;  // contiguous, [N]
  std::vector<int64_t> order;   // a permutation of 0..N-1; empty means 0, 1, ..., N-1
  int64_t n = 0;
  int64_t row = 0;  // elements per image
  int64_t batch_size = 1;
  int64_t count = 0;  // number of batches

  // Gathers batch k (0 <= k < count) into new contiguous tensors.
  Batch gather(int64_t k) const {
    const int64_t first = k * batch_size;
    const int64_t b = std::min(batch_size, n - first);
    Shape shape = images.shape();
    shape[0] = b;
    Batch out{Tensor<float, cpu>(shape), Tensor<int64_t, cpu>(Shape{b})};
    const float* src = images.data();
    const int64_t* lab = labels.data();
    float* dst = out.images.data();
    int64_t* dl = out.labels.data();
    const size_t row_bytes = static_cast<size_t>(row) * sizeof(float);
    if (order.empty()) {
      // In order: the batch is one run of rows.
      if (b > 0) {
        std::memcpy(dst, src + first * row, static_cast<size_t>(b) * row_bytes);
        std::memcpy(dl, lab + first, static_cast<size_t>(b) * sizeof(int64_t));
      }
    } else {
      const int64_t* idx = order.data() + first;
      for (int64_t i = 0; i < b; ++i) {
        std::memcpy(dst + i * row, src + idx[i] * row, row_bytes);
        dl[i] = lab[idx[i]];
      }
    }
    return out;
  }
};

}  // namespace detail

/// A range over the mini-batches of one pass (epoch) through a dataset, as returned by
/// batches(). Cheap to copy (it shares the dataset's tensors and the visiting order); holds
/// no reference to the Dataset object it was made from, so a temporary Dataset is fine.
/// Each dereference of an iterator gathers the batch anew into fresh tensors.
class batch_range {
 public:
  /// Input iterator over the batches; `*it` is a Batch (by value).
  class iterator {
   public:
    using iterator_concept = std::input_iterator_tag;
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using reference = Batch;

    iterator() = default;
    /// The current batch, gathered into new contiguous tensors.
    Batch operator*() const { return plan_->gather(k_); }
    iterator& operator++() {
      ++k_;
      return *this;
    }
    iterator operator++(int) {
      iterator old = *this;
      ++k_;
      return old;
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.k_ == b.k_; }

   private:
    friend class batch_range;
    iterator(const detail::batch_plan* plan, int64_t k) : plan_(plan), k_(k) {}
    const detail::batch_plan* plan_ = nullptr;
    int64_t k_ = 0;
  };

  explicit batch_range(std::shared_ptr<const detail::batch_plan> plan) : plan_(std::move(plan)) {}

  /// Iterator to the first batch.
  iterator begin() const { return {plan_.get(), 0}; }
  /// Iterator past the last batch.
  iterator end() const { return {plan_.get(), plan_->count}; }
  /// Number of batches: ceil(N / batch_size), or floor(N / batch_size) with drop_last.
  int64_t size() const { return plan_->count; }
  /// Whether there are no batches.
  bool empty() const { return plan_->count == 0; }
  /// Batch k (0 <= k < size()) of this pass, gathered into new tensors; throws index_error
  /// when k is out of range.
  Batch operator[](int64_t k) const {
    if (k < 0 || k >= plan_->count)
      ::tessera::detail::fail<index_error>("batches", "batch ", k, " is out of range for ",
                                           plan_->count, " batches");
    return plan_->gather(k);
  }
  /// The order in which this pass visits the dataset's rows (0..N-1 when not shuffled).
  std::vector<int64_t> order() const {
    if (!plan_->order.empty()) return plan_->order;
    std::vector<int64_t> v(static_cast<size_t>(plan_->n));
    std::iota(v.begin(), v.end(), int64_t{0});
    return v;
  }

 private:
  // Owned by the range; iterators point into it, so a range must outlive its iterators (as
  // with any container; a range-for keeps it alive for the loop).
  std::shared_ptr<const detail::batch_plan> plan_;
};

namespace detail {

inline std::shared_ptr<detail::batch_plan> make_batch_plan(const Dataset& ds, int64_t batch_size,
                                                           bool drop_last) {
  constexpr std::string_view op = "batches";
  using ::tessera::detail::fail;
  if (batch_size < 1) fail<shape_error>(op, "batch_size ", batch_size, " is not positive");
  ds.images.check_defined(op);
  ds.labels.check_defined(op);
  if (ds.images.rank() < 1)
    fail<shape_error>(op, "images of shape ", ds.images.shape(), " have no batch dimension");
  if (ds.labels.rank() != 1 || ds.labels.size(0) != ds.images.size(0))
    fail<shape_error>(op, "labels of shape ", ds.labels.shape(), " do not match images of shape ",
                      ds.images.shape(), " (expected [", ds.images.size(0), "])");
  auto plan = std::make_shared<batch_plan>();
  plan->images = ds.images.contiguous();
  plan->labels = ds.labels.contiguous();
  plan->n = ds.images.size(0);
  plan->row = plan->n > 0 ? ds.images.numel() / plan->n : 0;
  plan->batch_size = batch_size;
  plan->count = drop_last ? plan->n / batch_size : (plan->n + batch_size - 1) / batch_size;
  return plan;
}

}  // namespace detail

/// The mini-batches of one epoch over `ds`, `batch_size` examples each, in a random order: a
/// Fisher-Yates permutation of 0..N-1 drawn from `rng` when batches() is called (for i = N-1
/// down to 1, swap element i with element rng.below(i + 1)), so a seed gives the same order on
/// every platform, and calling batches() again with the same generator gives the next epoch's
/// order. With shuffle = false the rows come in order and rng is not used. The last batch holds
/// the N % batch_size remaining examples, unless drop_last drops it.
/// Each batch is `{images [b, ...], labels [b]}`, gathered into fresh contiguous tensors.
/// Throws shape_error when batch_size < 1 or labels are not [N] for images [N, ...].
inline batch_range batches(const Dataset& ds, int64_t batch_size, Generator& rng,
                           bool shuffle = true, bool drop_last = false) {
  auto plan = detail::make_batch_plan(ds, batch_size, drop_last);
  if (shuffle && plan->n > 1) {
    plan->order.resize(static_cast<size_t>(plan->n));
    std::iota(plan->order.begin(), plan->order.end(), int64_t{0});
    for (int64_t i = plan->n - 1; i > 0; --i)
      std::swap(plan->order[static_cast<size_t>(i)],
                plan->order[rng.below(static_cast<uint64_t>(i) + 1)]);
  }
  return batch_range(std::move(plan));
}

/// Which part of each global batch a process takes in data-parallel training: rank `rank` of
/// `count` processes (dist::ProcessGroup::shard() gives this process's).
struct shard {
  int64_t rank = 0;
  int64_t count = 1;
};

/// One epoch of a data-parallel run: this process's mini-batches of `batch_size` examples. Every
/// rank draws the same permutation of 0..N-1 from rng (seed it alike on every rank), as the
/// single-process overload does, and walks it in global batches of batch_size * s.count rows;
/// rank s.rank takes the s.rank-th equal slice of each. So the ranks' batches never overlap,
/// and together they are the global batch one process training on batch_size * s.count would
/// see. The ranks always get equal batches:
/// - without drop_last, the permutation is padded by repeating its first rows until its length
///   is a multiple of s.count (at most s.count - 1 repeated rows per epoch); the last global
///   batch may be smaller, and is split evenly;
/// - with drop_last, the last global batch is dropped unless it is full.
/// Throws shape_error when batch_size < 1, index_error when s.rank is not in 0 .. s.count - 1.
inline batch_range batches(const Dataset& ds, int64_t batch_size, Generator& rng, shard s,
                           bool shuffle = true, bool drop_last = false) {
  constexpr std::string_view op = "batches";
  if (s.count < 1 || s.rank < 0 || s.rank >= s.count)
    ::tessera::detail::fail<index_error>(op, "shard rank ", s.rank, " is not in 0 .. ", s.count - 1,
                                         " (count ", s.count, ")");
  auto plan = detail::make_batch_plan(ds, batch_size, drop_last);
  const int64_t n = plan->n;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle)
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(order[static_cast<size_t>(i)], order[rng.below(static_cast<uint64_t>(i) + 1)]);
  const int64_t global = batch_size * s.count;
  const int64_t length = drop_last ? n / global * global : (n + s.count - 1) / s.count * s.count;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(length / s.count));
  for (int64_t start = 0; start < length; start += global) {
    const int64_t part = std::min(global, length - start) / s.count;
    for (int64_t i = start + s.rank * part; i < start + (s.rank + 1) * part; ++i)
      mine.push_back(order[static_cast<size_t>(i % n)]);  // i >= n: the padding
  }
  plan->n = static_cast<int64_t>(mine.size());
  plan->count = (plan->n + batch_size - 1) / batch_size;
  plan->order = std::move(mine);
  if (plan->order.empty()) plan->count = 0;
  return batch_range(std::move(plan));
}

/// The mini-batches of `ds` in order (rows 0..N-1), for evaluation; otherwise as the shuffling
/// overload. Throws shape_error when batch_size < 1 or the labels do not match the images.
inline batch_range batches(const Dataset& ds, int64_t batch_size, bool drop_last = false) {
  return batch_range(detail::make_batch_plan(ds, batch_size, drop_last));
}

namespace detail {
// (x - mean) / std on scalars and, through tessera::vectorized, on SIMD packs.
struct standardize {
  float mean, std;
  template <class V>
  TESSERA_HOST_DEVICE V operator()(V x) const {
    return (x - mean) / std;
  }
};
inline void check_standardize(std::string_view op, float mean, float std) {
  if (!std::isfinite(mean) || !std::isfinite(std) || !(std > 0.0f))
    ::tessera::detail::fail<error>(op, "needs a finite mean and a finite std > 0, got mean ", mean,
                                   " std ", std);
}
}  // namespace detail

/// (x - mean) / std elementwise, as a new tensor of x's shape (x may be any strided view).
/// Throws tessera::error when std is not > 0 or mean or std is not finite.
template <backend_tag B>
Tensor<float, B> normalize(const Tensor<float, B>& x, float mean, float std) {
  detail::check_standardize("normalize", mean, std);
  return map(vectorized(detail::standardize{mean, std}), x);
}

/// In-place form: x = (x - mean) / std; returns x. Throws as normalize.
template <backend_tag B>
const Tensor<float, B>& normalize_(const Tensor<float, B>& x, float mean, float std) {
  detail::check_standardize("normalize_", mean, std);
  return map_to(x, vectorized(detail::standardize{mean, std}), x);
}

}  // namespace data
TESSERA_END_NAMESPACE
