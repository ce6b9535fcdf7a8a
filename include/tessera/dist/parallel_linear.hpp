// tessera/dist/parallel_linear.hpp - tensor-parallel linear layers (Megatron-style): a layer's
// weight split across the ranks of a process group, so that no rank holds all of it.
//
//   ts::dist::ColumnParallelLinear<float> up(512, 2048, pg);   // each rank: 2048 / P outputs
//   ts::dist::RowParallelLinear<float> down(2048, 512, pg);    // each rank: 2048 / P inputs
//   auto y = down(relu(up(x)));   // x and y whole on every rank; one all-reduce in between
//
// ColumnParallelLinear holds a slice of the output features (rows of the weight, and of the
// bias); its output is this rank's slice of the features unless gather_output. RowParallelLinear
// holds a slice of the input features (columns of the weight) and the whole bias: it takes this
// rank's slice of its input, and sums the partial products across the ranks (one all_reduce)
// before adding the bias. A column layer followed by a row layer thus costs one all-reduce.
// Both have gradients: the collectives' backward passes are the other collective (the input of
// a column layer gets its gradient summed over the ranks; the all-reduce passes its gradient
// through), so the pair trains as the whole layers would.
#pragma once

#include <cstdint>
#include <utility>

#include "../autograd/linalg.hpp"
#include "../autograd/shape.hpp"
#include "../nn/layers.hpp"
#include "process_group.hpp"

TESSERA_BEGIN_NAMESPACE
namespace dist {

/// x unchanged; in backward, the gradient summed over the group's ranks. Put in front of a
/// computation that each rank does on its own slice of the weights, so that x's gradient
/// counts every rank's slice (Megatron's "f").
template <class T, class B>
Variable<T, B> copy_to_parallel(const Variable<T, B>& x, const ProcessGroup& group) {
  return autograd::detail::record("dist::copy_to_parallel", x.value(), {&x}, {},
                                  [group](const autograd::backward_context<T, B>& c) {
                                    Tensor<T, B> g = c.grad().contiguous().clone();
                                    group.all_reduce(g);
                                    c.give(0, g, true);
                                  });
}

/// x summed over the group's ranks; in backward, the gradient passed through (each rank's x
/// contributed to the sum with weight one) (Megatron's "g").
template <class T, class B>
Variable<T, B> reduce_from_parallel(const Variable<T, B>& x, const ProcessGroup& group) {
  Tensor<T, B> y = x.value().contiguous().clone();
  group.all_reduce(y);
  return autograd::detail::record(
      "dist::reduce_from_parallel", std::move(y), {&x}, {},
      [](const autograd::backward_context<T, B>& c) { c.give(0, c.grad(), false); });
}

/// The ranks' x concatenated along the last dim (every rank's x has the same shape); in
/// backward, this rank's slice of the gradient.
template <class T, class B>
Variable<T, B> gather_from_parallel(const Variable<T, B>& x, const ProcessGroup& group) {
  const Tensor<T, B> local = x.value().contiguous();
  const int r = local.rank();
  if (r == 0) tessera::detail::fail<shape_error>("dist::gather_from_parallel", "x must have a dim");
  Shape gathered_shape{group.size()};
  for (int d = 0; d < r; ++d) gathered_shape.push_back(local.shape()[d]);
  Tensor<T, B> gathered(gathered_shape);
  group.all_gather(gathered, local);
  // [P, ..., n] -> [..., P, n] -> [..., P * n]
  std::vector<int64_t> perm;
  for (int d = 1; d < r; ++d) perm.push_back(d);
  perm.push_back(0);
  perm.push_back(r);
  Shape out_shape = local.shape();
  const int64_t n = out_shape[r - 1];
  out_shape[r - 1] = n * group.size();
  Tensor<T, B> y = gathered.permute(perm).contiguous().reshape(out_shape.span());
  return autograd::detail::record(
      "dist::gather_from_parallel", std::move(y), {&x}, {},
      [n, rank = group.rank(), r](const autograd::backward_context<T, B>& c) {
        c.give(0, c.grad().slice(r - 1, rank * n, (rank + 1) * n), false);
      });
}

namespace detail {
/// This rank's share of `total` features over `parts` ranks; throws shape_error naming op when
/// they do not divide evenly.
inline std::pair<int64_t, int64_t> feature_slice(const char* op, const char* what, int64_t total,
                                                 const ProcessGroup& group) {
  if (total % group.size() != 0)
    tessera::detail::fail<shape_error>(op, what, " ", total, " do not divide among ", group.size(),
                                       " ranks");
  const int64_t share = total / group.size();
  return {group.rank() * share, (group.rank() + 1) * share};
}

/// full's parameters replaced by rank 0's (the layers built from sizes slice rank 0's draw).
template <class T, class B>
const nn::Linear<T, B>& broadcast_from_root(const nn::Linear<T, B>& full, const ProcessGroup& g) {
  for (const auto& p : full.parameters()) g.broadcast(p.value());
  return full;
}
}  // namespace detail

/// A Linear layer whose output features are split across the group: this rank holds rows
/// [rank * out / P, (rank + 1) * out / P) of the weight and bias. Input [..., in], whole on every
/// rank; output [..., out / P], this rank's features, or [..., out] with gather_output.
template <class T = float, class B = default_backend>
class ColumnParallelLinear : public nn::Module<T, B> {
 public:
  Variable<T, B> weight, bias;
  ProcessGroup group;
  bool gather_output = false;

  /// This rank's slice of `full` (a Linear [out, in] that every rank holds alike, e.g. loaded
  /// from the same checkpoint).
  ColumnParallelLinear(const nn::Linear<T, B>& full, ProcessGroup g, bool gather = false)
      : group(std::move(g)), gather_output(gather) {
    const Tensor<T, B>& w = full.weight.value();
    const auto [b, e] =
        detail::feature_slice("dist::ColumnParallelLinear", "output features", w.shape()[0], group);
    weight = this->register_parameter("weight", w.slice(0, b, e).contiguous().clone());
    if (full.bias.defined())
      bias =
          this->register_parameter("bias", full.bias.value().slice(0, b, e).contiguous().clone());
  }
  /// Initialized as nn::Linear(in, out) on rank 0, whose weights reach every rank (a broadcast),
  /// then sliced: the layers equal one process's Linear drawn from rank 0's generator.
  ColumnParallelLinear(int64_t in, int64_t out, ProcessGroup g, bool with_bias = true,
                       bool gather = false)
      : ColumnParallelLinear(detail::broadcast_from_root(nn::Linear<T, B>(in, out, with_bias), g),
                             g, gather) {}

  Variable<T, B> forward(const Variable<T, B>& x) override {
    Variable<T, B> y = linear(copy_to_parallel(x, group), weight, bias);
    return gather_output ? gather_from_parallel(y, group) : y;
  }
};

/// A Linear layer whose input features are split across the group: this rank holds columns
/// [rank * in / P, (rank + 1) * in / P) of the weight, and the whole bias. Input [..., in / P],
/// this rank's features (as a ColumnParallelLinear gives them); output [..., out], the partial
/// products summed across the ranks, then the bias: whole and equal on every rank.
template <class T = float, class B = default_backend>
class RowParallelLinear : public nn::Module<T, B> {
 public:
  Variable<T, B> weight, bias;
  ProcessGroup group;

  RowParallelLinear(const nn::Linear<T, B>& full, ProcessGroup g) : group(std::move(g)) {
    const Tensor<T, B>& w = full.weight.value();
    const auto [b, e] =
        detail::feature_slice("dist::RowParallelLinear", "input features", w.shape()[1], group);
    weight = this->register_parameter("weight", w.slice(1, b, e).contiguous().clone());
    if (full.bias.defined()) bias = this->register_parameter("bias", full.bias.value().clone());
  }
  RowParallelLinear(int64_t in, int64_t out, ProcessGroup g, bool with_bias = true)
      : RowParallelLinear(detail::broadcast_from_root(nn::Linear<T, B>(in, out, with_bias), g), g) {
  }

  Variable<T, B> forward(const Variable<T, B>& x) override {
    const int64_t share = weight.value().shape()[1];
    if (x.value().rank() == 0 || x.value().shape()[x.value().rank() - 1] != share)
      tessera::detail::fail<shape_error>("dist::RowParallelLinear", "x ", x.value().shape(),
                                         " must end with this rank's ", share, " input features");
    Variable<T, B> y = reduce_from_parallel(linear(x, weight), group);
    return bias.defined() ? y + bias : y;
  }
};

}  // namespace dist
TESSERA_END_NAMESPACE
