// tessera/dist/data_parallel.hpp - DataParallel: data-parallel training of any nn::Module.
//
// Every rank holds the whole model and trains on its own shard of each global batch. After
// backward, every rank holds the gradient averaged over the ranks, so any optimizer then makes
// the same step everywhere: the result equals one process training on the global batch.
//
//   auto pg = ts::dist::init();
//   ts::dist::DataParallel dp(model, pg);        // rank 0's parameters reach every rank
//   auto loss = cross_entropy(dp(images), labels);
//   loss.backward();                             // gradients averaged across the ranks
//   opt.step();
//
// Gradients travel in buckets (25 MiB by default) filled in reverse registration order, the
// order backward produces them. A bucket's all-reduce starts during backward as soon as its last
// gradient is ready (autograd's grad-ready hooks), so it overlaps with the rest of backward.
// no_sync() skips the all-reduce, for gradient accumulation over several micro-batches.
// A module on CUDA tensors trains over an NcclGroup (nccl_group.hpp) instead of the
// ProcessGroup: `ts::dist::DataParallel dp(model, nccl);`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../nn/module.hpp"
#include "process_group.hpp"

TESSERA_BEGIN_NAMESPACE
namespace dist {

/// Wraps module for data-parallel training over group (see the header comment). The module is
/// shared, not copied: train it, save it and give its parameters to the optimizer as usual.
/// Construction is collective (every rank constructs its DataParallel with the same model
/// structure); it throws dist_error when the ranks' parameters differ in number or shapes.
/// G, the group the gradients travel over: ProcessGroup (MPI, host tensors) or NcclGroup
/// (CUDA tensors); any type with the same all_reduce_async, broadcast, size and rank.
template <class M, class G = ProcessGroup>
class DataParallel {
 public:
  using T = typename M::value_type;
  using B = typename M::backend_type;
  using variable = Variable<T, B>;
  static constexpr int64_t default_bucket_bytes = int64_t{25} << 20;

  DataParallel(M module, G group, int64_t bucket_bytes = default_bucket_bytes)
      : module_(std::move(module)), s_(std::make_unique<state>(std::move(group))) {
    constexpr std::string_view op = "dist::DataParallel";
    if (bucket_bytes < 1)
      tessera::detail::fail<shape_error>(op, "bucket_bytes ", bucket_bytes, " is not positive");
    for (auto& [name, p] : module_.named_parameters())
      if (p.requires_grad()) s_->params.push_back(p), s_->names.push_back(name);
    check_same_model(op);
    make_buckets(bucket_bytes);
    broadcast_state();
    for (size_t i = 0; i < s_->params.size(); ++i) {
      state* s = s_.get();
      s->hook_keys.push_back(
          s->params[i].register_grad_ready_hook([s, i] { s->on_grad_ready(i); }));
    }
  }
  ~DataParallel() {
    if (!s_) return;
    for (size_t i = 0; i < s_->params.size(); ++i)
      s_->params[i].remove_grad_ready_hook(s_->hook_keys[i]);
  }
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// The module's forward.
  variable operator()(const variable& x) { return module_.forward(x); }
  variable operator()(const Tensor<T, B>& x) { return module_.forward(variable(x)); }
  M& module() { return module_; }
  /// The group the gradients travel over.
  const G& process_group() const { return s_->group; }
  std::vector<variable> parameters() const { return module_.parameters(); }

  /// While the returned scope lives, backward accumulates gradients locally without any
  /// communication; the first backward after it all-reduces the accumulated gradients.
  class no_sync_scope {
   public:
    explicit no_sync_scope(int& depth) : depth_(&depth) { ++*depth_; }
    ~no_sync_scope() {
      if (depth_) --*depth_;
    }
    no_sync_scope(no_sync_scope&& o) noexcept : depth_(std::exchange(o.depth_, nullptr)) {}
    no_sync_scope(const no_sync_scope&) = delete;
    no_sync_scope& operator=(const no_sync_scope&) = delete;
    no_sync_scope& operator=(no_sync_scope&&) = delete;

   private:
    int* depth_;
  };
  [[nodiscard]] no_sync_scope no_sync() { return no_sync_scope(s_->no_sync_depth); }

  /// The parameter names in each bucket, in the order the buckets are all-reduced.
  std::vector<std::vector<std::string>> bucket_layout() const {
    std::vector<std::vector<std::string>> out;
    for (const bucket& b : s_->buckets) {
      out.emplace_back();
      for (size_t i : b.params) out.back().push_back(s_->names[i]);
    }
    return out;
  }

  /// Copies rank 0's buffers (e.g. BatchNorm's running statistics) to every rank. Collective.
  void sync_buffers() const {
    for (auto& [name, buf] : module_.named_buffers()) s_->group.broadcast(buf, 0);
  }

 private:
  struct bucket {
    Tensor<T, B> flat;           // the bucket's gradients, one after another
    std::vector<size_t> params;  // indices into state::params
    size_t waiting = 0;          // gradients of this step not yet copied in
    Work work;
  };

  struct state {
    explicit state(G g) : group(std::move(g)) {}
    G group;
    std::vector<variable> params;
    std::vector<std::string> names;
    std::vector<uint64_t> hook_keys;
    std::vector<bucket> buckets;
    std::vector<size_t> bucket_of;   // per parameter
    std::vector<int64_t> offset_of;  // per parameter, into its bucket
    std::vector<char> copied;        // per parameter: its gradient is in its bucket this step
    size_t next_launch = 0;          // buckets start in index order on every rank
    int no_sync_depth = 0;
    uint64_t step = 0;  // the backward (autograd::detail::backward_serial) being synced

    Tensor<T, B> slot(size_t i) const {
      const bucket& b = buckets[bucket_of[i]];
      return b.flat.slice(0, offset_of[i], offset_of[i] + params[i].numel());
    }
    void copy_in(size_t i) {
      const Tensor<T, B> dst = slot(i);
      const Tensor<T, B>& g = params[i].grad();
      if (g.defined())
        dst.copy_(g.reshape({-1}));
      else
        dst.fill_(T(0));  // unused this step: contributes zero
      copied[i] = 1;
      --buckets[bucket_of[i]].waiting;
    }
    // Starts every ready bucket whose predecessors have started: all ranks start the same
    // buckets in the same order, as MPI requires of collectives.
    void launch_ready() {
      while (next_launch < buckets.size() && buckets[next_launch].waiting == 0) {
        bucket& b = buckets[next_launch++];
        b.work = group.all_reduce_async(b.flat, reduce_op::sum, /*check_call=*/false);
      }
    }
    void begin_step() {
      step = autograd::detail::backward_serial();
      next_launch = 0;
      std::fill(copied.begin(), copied.end(), char{0});
      for (bucket& b : buckets) b.waiting = b.params.size();
      autograd::queue_backward_callback([this] { finish_step(); });
    }
    void on_grad_ready(size_t i) {
      if (no_sync_depth > 0) return;
      // The first hook of a backward starts a step (even when an exception cut the last one).
      if (step != autograd::detail::backward_serial()) begin_step();
      if (copied[i]) return;
      copy_in(i);
      launch_ready();
      // MPI progresses a nonblocking collective only inside MPI calls: give it a turn.
      for (size_t k = 0; k < next_launch; ++k) buckets[k].work.test();
    }
    // At the end of backward: parameters that got no gradient join as zeros, every bucket is
    // all-reduced, and each gradient becomes the average over the ranks.
    void finish_step() {
      for (size_t i = 0; i < params.size(); ++i)
        if (!copied[i]) copy_in(i);
      launch_ready();
      const T scale = T(1.0 / group.size());
      for (bucket& b : buckets) {
        b.work.wait();
        b.flat *= scale;
      }
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor<T, B> avg = slot(i).reshape(params[i].shape());
        if (params[i].grad().defined())
          params[i].grad().copy_(avg);
        else
          params[i].set_grad(avg.clone());
      }
    }
  };

  // Every rank must wrap the same parameters: compares their count and shapes.
  void check_same_model(std::string_view op) const {
    // A fingerprint of the structure: count, then each shape, hashed (FNV-1a).
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(s_->params.size());
    for (const auto& p : s_->params) {
      mix(static_cast<uint64_t>(p.rank()));
      for (int d = 0; d < p.rank(); ++d) mix(static_cast<uint64_t>(p.size(d)));
    }
    // Host tensors, over MPI: an NCCL group compares through the process group it came from.
    const ProcessGroup& host = host_group();
    Tensor<int64_t, cpu> mine = full<int64_t, cpu>(Shape{1}, static_cast<int64_t>(h));
    Tensor<int64_t, cpu> all = empty<int64_t, cpu>(Shape{host.size(), 1});
    host.all_gather(all, mine);
    for (int r = 0; r < host.size(); ++r)
      if (all.data()[r] != mine.data()[0])
        tessera::detail::fail<dist_error>(
            op, "rank ", r, "'s model differs from rank ", host.rank(),
            "'s (parameter count or shapes; this rank has ", s_->params.size(), " parameters)");
  }

  const ProcessGroup& host_group() const {
    if constexpr (std::is_same_v<G, ProcessGroup>)
      return s_->group;
    else
      return s_->group.process_group();
  }

  // Reverse registration order, a new bucket when the next gradient would pass bucket_bytes.
  void make_buckets(int64_t bucket_bytes) {
    const size_t n = s_->params.size();
    s_->bucket_of.assign(n, 0);
    s_->offset_of.assign(n, 0);
    s_->copied.assign(n, 0);
    std::vector<std::vector<size_t>> groups;
    int64_t filled = 0;
    for (size_t k = n; k-- > 0;) {
      const int64_t bytes = s_->params[k].numel() * static_cast<int64_t>(sizeof(T));
      if (groups.empty() || (filled > 0 && filled + bytes > bucket_bytes)) {
        groups.emplace_back();
        filled = 0;
      }
      groups.back().push_back(k);
      filled += bytes;
    }
    for (auto& g : groups) {
      bucket b;
      int64_t numel = 0;
      for (size_t i : g) {
        s_->bucket_of[i] = s_->buckets.size();
        s_->offset_of[i] = numel;
        numel += s_->params[i].numel();
      }
      b.flat = zeros<T, B>(Shape{numel});
      b.params = std::move(g);
      s_->buckets.push_back(std::move(b));
    }
  }

  // Rank 0's parameters and buffers to every rank, a bucket at a time.
  void broadcast_state() {
    for (bucket& b : s_->buckets) {
      for (size_t i : b.params) s_->slot(i).copy_(s_->params[i].value().reshape({-1}));
      s_->group.broadcast(b.flat, 0);
      for (size_t i : b.params)
        s_->params[i].value().copy_(s_->slot(i).reshape(s_->params[i].shape()));
    }
    sync_buffers();
  }

  M module_;
  std::unique_ptr<state> s_;
};

}  // namespace dist
TESSERA_END_NAMESPACE
