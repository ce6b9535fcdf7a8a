// tessera/autograd/variable.hpp - Variable<T, B> and the reverse-mode tape that runs backward().
//
// Each op on Variables computes its value eagerly (with the tensor op of the same name) and,
// when grad mode is on and an input requires a gradient, records a node: the inputs it read and
// a closure that turns the output's gradient into the inputs' gradients. backward() visits the
// nodes reachable from the root once each, in reverse topological order, then releases them (the
// closures and the tensors they saved), so the memory of a training step is returned as soon as
// its gradients exist.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../ops/creation.hpp"
#include "../ops/elementwise.hpp"
#include "../ops/reduce.hpp"

TESSERA_BEGIN_NAMESPACE
namespace autograd {

namespace detail {
inline bool& grad_mode_flag() {
  thread_local bool enabled = true;
  return enabled;
}
// The callbacks queued during the backward() running on this thread (null outside one).
inline std::vector<std::function<void()>>*& backward_callbacks() {
  thread_local std::vector<std::function<void()>>* current = nullptr;
  return current;
}
// How many grad-ready hooks are registered in the process: backward() skips their bookkeeping
// while there are none.
inline std::atomic<int64_t>& grad_ready_hook_count() {
  static std::atomic<int64_t> count{0};
  return count;
}
// Counts the backward() calls on this thread: a hook tells one backward from the next by it.
inline uint64_t& backward_serial() {
  thread_local uint64_t serial = 0;
  return serial;
}
}  // namespace detail

/// Queues f to run once the backward() now running on this thread has finished, when every
/// gradient is complete: for grad-ready hooks that start asynchronous work (DataParallel waits
/// for its all-reduces there). Throws error when called outside a backward().
inline void queue_backward_callback(std::function<void()> f) {
  auto* queue = detail::backward_callbacks();
  if (!queue)
    tessera::detail::fail<error>("queue_backward_callback", "called outside a backward()");
  queue->push_back(std::move(f));
}

/// Whether ops on Variables record the tape on this thread (true unless a no_grad is alive).
inline bool is_grad_enabled() { return detail::grad_mode_flag(); }

/// RAII scope in which ops on Variables record nothing (evaluation, optimizer updates):
/// `{ ts::autograd::no_grad guard; auto logits = model(images); }`. Nests; per thread.
class no_grad {
 public:
  no_grad() : previous_(detail::grad_mode_flag()) { detail::grad_mode_flag() = false; }
  ~no_grad() { detail::grad_mode_flag() = previous_; }
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;

 private:
  bool previous_;
};

template <class T, class B>
class backward_context;

namespace detail {

/// A tensor that an op's backward reads (an input, the output, or an intermediate), kept with
/// its storage's version at the time the op ran: a later in-place write changes the version,
/// and backward then refuses to compute a gradient from the overwritten values.
struct saved_version {
  std::shared_ptr<tessera::detail::storage_block> storage;
  uint64_t version = 0;

  /// From any tensor (any element type): labels and pooling indices are saved too.
  template <element_type U, backend_tag B2>
  saved_version(const Tensor<U, B2>& t)  // NOLINT(google-explicit-constructor): read in lists
      : storage(t.storage()), version(t.version()) {}
  bool modified() const {
    return storage && storage->version.load(std::memory_order_relaxed) != version;
  }
};

/// The shared state behind a Variable: its value, its accumulated gradient, and (for the
/// result of a recorded op) the inputs and the closure that propagates a gradient to them.
template <class T, class B>
struct variable_node {
  Tensor<T, B> value;
  Tensor<T, B> grad;
  // grad's storage belongs to this node alone, so a second contribution may be added in place.
  bool grad_owned = false;
  bool requires_grad = false;
  // Set once backward has run through this node and dropped its closure (without retain_graph).
  bool released = false;
  std::vector<std::shared_ptr<variable_node>> inputs;
  std::function<void(backward_context<T, B>&)> backward;
  // For an op result: the op's name, and the tensors its backward reads with their versions
  // when it ran (checked before backward runs it).
  std::string_view op;
  std::vector<saved_version> saved;
  // For a leaf: what runs during a backward once its gradient is complete, by key.
  std::vector<std::pair<uint64_t, std::function<void()>>> grad_ready_hooks;

  /// Drops the history iteratively: the default destructor would free a long chain of inputs
  /// recursively, one stack frame per node, and overflow the stack on a deep un-run history.
  ~variable_node() {
    std::vector<std::shared_ptr<variable_node>> pending = std::move(inputs);
    while (!pending.empty()) {
      std::shared_ptr<variable_node> n = std::move(pending.back());
      pending.pop_back();
      // The last owner unlinks the node's inputs first, so freeing it recurses no further.
      if (n && n.use_count() == 1)
        for (auto& in : n->inputs) pending.push_back(std::move(in));
    }
  }

  bool is_leaf() const { return !backward && !released; }

  /// Adds g (shaped like value) to grad. `owned`: g is a fresh tensor no one else holds, so it
  /// may become grad itself. Leaves never keep a borrowed tensor: their grad is user-visible and
  /// optimizers and clipping update it in place.
  void accumulate(Tensor<T, B> g, bool owned) {
    if (!(g.shape() == value.shape()))
      tessera::detail::fail<shape_error>("backward", "internal: gradient of shape ", g.shape(),
                                         " for a value of shape ", value.shape());
    if (!grad.defined()) {
      if (is_leaf() && !(owned && g.is_contiguous())) g = g.clone(), owned = true;
      grad = std::move(g);
      grad_owned = owned;
    } else if (grad_owned) {
      grad += g;
    } else {
      grad = grad + g;
      grad_owned = true;
    }
  }
};

}  // namespace detail

/// What a recorded op's backward closure sees: the gradient of its output, and which inputs want
/// one. It hands each input's gradient to give(i, g).
template <class T, class B>
class backward_context {
 public:
  using node = detail::variable_node<T, B>;
  backward_context(const Tensor<T, B>& grad, std::vector<std::shared_ptr<node>>& inputs)
      : grad_(grad), inputs_(inputs) {}
  /// dL/d(output), shaped like the output.
  const Tensor<T, B>& grad() const { return grad_; }
  /// Whether input i requires a gradient (skip computing it otherwise).
  bool needs(size_t i) const { return inputs_[i] && inputs_[i]->requires_grad; }
  /// Adds g to input i's gradient. owned: g is a fresh tensor the op does not keep (false for a
  /// view of grad() or of a saved tensor).
  void give(size_t i, Tensor<T, B> g, bool owned = true) const {
    if (needs(i)) inputs_[i]->accumulate(std::move(g), owned);
  }

 private:
  const Tensor<T, B>& grad_;
  std::vector<std::shared_ptr<node>>& inputs_;
};

/// A tensor that records the ops applied to it so that backward() can compute gradients.
///
/// Copying a Variable shares it (value, gradient and history), like a LibTorch tensor. Leaves are
/// made by the user: `Variable(t)` (no gradient) or `param(t)` / `Variable(t, true)`. Every op
/// overload on Variables (ts::relu(v), ts::matmul(a, b), v + w, ...) returns a Variable whose
/// history leads back to the leaves. Element types: float and double.
template <element_type T, backend_tag B = default_backend>
class Variable {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "tessera::autograd::Variable: gradients are computed in float or double");

 public:
  using value_type = T;
  using backend_type = B;
  using node = detail::variable_node<T, B>;

  /// An undefined Variable (`defined() == false`), e.g. an absent bias.
  Variable() = default;
  /// A leaf holding `value` (shared, not copied); requires_grad makes it a parameter.
  explicit Variable(Tensor<T, B> value, bool requires_grad = false)
      : node_(std::make_shared<node>()) {
    value.check_defined("Variable");
    node_->value = std::move(value);
    node_->requires_grad = requires_grad;
  }
  /// Adopts a node (used by the ops that record the tape).
  explicit Variable(std::shared_ptr<node> n) : node_(std::move(n)) {}

  bool defined() const { return node_ != nullptr; }
  /// The current value (shares storage: writing into it changes the Variable).
  const Tensor<T, B>& value() const { return checked("value").value; }
  /// The accumulated gradient of a leaf after backward(); undefined before any backward reached
  /// it, and after zero_grad(). Non-leaf Variables do not keep theirs.
  const Tensor<T, B>& grad() const { return checked("grad").grad; }
  bool requires_grad() const { return defined() && node_->requires_grad; }
  /// True for user-made Variables (parameters and inputs), false for op results.
  bool is_leaf() const { return checked("is_leaf").is_leaf(); }
  /// Turns gradient tracking on or off for a leaf; throws error for an op result.
  Variable& requires_grad_(bool on = true) {
    if (!is_leaf())
      tessera::detail::fail<error>("requires_grad_",
                                   "only leaf Variables can change requires_grad");
    node_->requires_grad = on;
    return *this;
  }
  /// Forgets the gradient (the next backward stores a fresh one), as LibTorch's set_to_none.
  void zero_grad() const {
    checked("zero_grad").grad = Tensor<T, B>();
    node_->grad_owned = false;
  }
  /// Replaces the gradient (e.g. by a rescaled one); g must have the value's shape.
  void set_grad(const Tensor<T, B>& g) const {
    auto& n = checked("set_grad");
    if (g.defined() && !(g.shape() == n.value.shape()))
      tessera::detail::fail<shape_error>("set_grad", "gradient of shape ", g.shape(),
                                         " for a value of shape ", n.value.shape());
    n.grad = g;
    n.grad_owned = false;
  }
  /// Registers f to run during every later backward() that reaches this leaf, as soon as the
  /// leaf's gradient is complete (every contribution of that backward added): before the rest
  /// of backward has run, so f can start work on the gradient early (DataParallel's
  /// all-reduces). Returns a key for remove_grad_ready_hook. Throws error for an op result or a
  /// leaf that does not require grad.
  uint64_t register_grad_ready_hook(std::function<void()> f) const {
    auto& n = checked("register_grad_ready_hook");
    if (!n.is_leaf() || !n.requires_grad)
      tessera::detail::fail<error>("register_grad_ready_hook",
                                   "only leaves that require grad have grad-ready hooks");
    static std::atomic<uint64_t> next_key{1};
    const uint64_t key = next_key.fetch_add(1, std::memory_order_relaxed);
    n.grad_ready_hooks.emplace_back(key, std::move(f));
    detail::grad_ready_hook_count().fetch_add(1, std::memory_order_relaxed);
    return key;
  }
  /// Removes the hook registered under key (nothing when there is none).
  void remove_grad_ready_hook(uint64_t key) const {
    auto& hooks = checked("remove_grad_ready_hook").grad_ready_hooks;
    for (auto it = hooks.begin(); it != hooks.end(); ++it)
      if (it->first == key) {
        hooks.erase(it);
        detail::grad_ready_hook_count().fetch_sub(1, std::memory_order_relaxed);
        return;
      }
  }

  /// A new leaf sharing this value, cut from the history (no gradient flows through it).
  Variable detach() const { return Variable(value(), false); }

  const Shape& shape() const { return value().shape(); }
  int rank() const { return value().rank(); }
  int dim() const { return value().rank(); }
  int64_t size(int64_t d) const { return value().size(d); }
  int64_t numel() const { return value().numel(); }
  /// The single element of a one-element Variable (e.g. a loss).
  T item() const { return value().item(); }

  /// Reverse-mode differentiation from this Variable: adds d(this)/d(leaf) (times seed) to the
  /// grad of every leaf that requires one and that this Variable depends on. Without a seed the
  /// Variable must hold one element (a loss) and the seed is 1. The recorded history is released
  /// afterwards unless retain_graph; a second backward through a released history throws.
  /// Throws error when this Variable does not require grad, shape_error for a seed of the wrong
  /// shape.
  void backward(const Tensor<T, B>& seed = {}, bool retain_graph = false) const;

  /// Internal: the shared node.
  const std::shared_ptr<node>& impl() const { return node_; }

 private:
  node& checked(std::string_view op) const {
    if (!node_) tessera::detail::fail<error>(op, "the Variable is undefined");
    return *node_;
  }
  std::shared_ptr<node> node_;
};

/// A trainable leaf: `Variable(value, /*requires_grad=*/true)`.
template <element_type T, backend_tag B>
Variable<T, B> param(Tensor<T, B> value) {
  return Variable<T, B>(std::move(value), true);
}

namespace detail {

template <class T, class B>
const std::shared_ptr<variable_node<T, B>>& null_node() {
  static const std::shared_ptr<variable_node<T, B>> none;
  return none;
}

/// Whether an op on these inputs joins the tape: grad mode is on and some input requires a
/// gradient. Ops whose forward pass saves extra work for the backward (max pooling's indices)
/// ask first and skip it when nothing will be recorded.
template <class T, class B>
bool will_record(std::initializer_list<const Variable<T, B>*> inputs) {
  if (!is_grad_enabled()) return false;
  for (const auto* v : inputs)
    if (v->requires_grad()) return true;
  return false;
}

/// Records op `op`: returns a Variable holding `value` that, when some input requires a gradient
/// and grad mode is on, remembers the inputs, the backward closure and the versions of the
/// tensors in `saved`, which must list every tensor a user could write into that the closure
/// reads (input values, the output, their views). Undefined inputs (absent optional operands)
/// are allowed and never receive a gradient. Do not move a saved tensor into `value`: the
/// arguments are evaluated in no fixed order.
template <class T, class B, class F>
Variable<T, B> record(std::string_view op, Tensor<T, B> value,
                      std::initializer_list<const Variable<T, B>*> inputs,
                      std::initializer_list<saved_version> saved, F&& backward) {
  Variable<T, B> out(std::move(value));
  if (!will_record(inputs)) return out;
  auto& n = *out.impl();
  n.requires_grad = true;
  n.inputs.reserve(inputs.size());
  for (const auto* v : inputs)
    n.inputs.push_back(v->requires_grad() ? v->impl() : null_node<T, B>());
  n.backward = std::forward<F>(backward);
  n.op = op;
  n.saved.assign(saved.begin(), saved.end());
  return out;
}

/// The same for an op with a run-time number of inputs (cat, stack) whose backward reads no
/// tensor.
template <class T, class B, class F>
Variable<T, B> record_all(std::string_view op, Tensor<T, B> value,
                          const std::vector<Variable<T, B>>& inputs, F&& backward) {
  Variable<T, B> out(std::move(value));
  if (!is_grad_enabled()) return out;
  bool any = false;
  for (const auto& v : inputs) any = any || v.requires_grad();
  if (!any) return out;
  auto& n = *out.impl();
  n.requires_grad = true;
  for (const auto& v : inputs) n.inputs.push_back(v.requires_grad() ? v.impl() : null_node<T, B>());
  n.backward = std::forward<F>(backward);
  n.op = op;
  return out;
}

/// Throws when a tensor that n's backward reads was written in place after n's op ran: the
/// gradient would silently come from the new values.
template <class T, class B>
void check_saved(const variable_node<T, B>& n) {
  for (size_t i = 0; i < n.saved.size(); ++i) {
    const saved_version& s = n.saved[i];
    if (s.modified())
      tessera::detail::fail<error>(
          "backward", "tensor ", i, " that ", n.op,
          " saved for its gradient was modified in place ", "after ", n.op, " ran (version ",
          s.storage->version.load(std::memory_order_relaxed), ", saved at ", s.version,
          "); write into a clone() instead, or before ", n.op);
  }
}

/// Nodes reachable from root through inputs that require grad, inputs before the ops that read
/// them (iterative: a deep history cannot overflow the stack).
template <class T, class B>
std::vector<variable_node<T, B>*> topological_order(variable_node<T, B>* root) {
  std::vector<variable_node<T, B>*> order;
  std::unordered_set<variable_node<T, B>*> seen{root};
  std::vector<std::pair<variable_node<T, B>*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (next < n->inputs.size()) {
      variable_node<T, B>* in = n->inputs[next++].get();
      if (in && in->requires_grad && seen.insert(in).second) stack.emplace_back(in, 0);
    } else {
      order.push_back(n);
      stack.pop_back();
    }
  }
  return order;
}

/// The default seed of backward(), 1, shaped like a one-element root: a fresh `ones` where the
/// host writes memory directly; on a device backend one shared element per type (filled once,
/// then waited for, so that a backward on any stream may read it), because filling a new one is
/// a kernel launch per training step. backward() hands it on as not owned, like a caller's seed,
/// so no gradient is ever accumulated into it in place (a leaf root clones it). Kept for the
/// process (device memory must not be freed after the runtime has shut down) and, like the
/// losses' column numbers, for one device per process.
template <class T, class B>
Tensor<T, B> unit_seed(const Shape& shape) {
  if constexpr (backend::memory<B>::host_accessible) {
    return ones<T, B>(shape);
  } else {
    static const auto* one = [] {
      auto* t = new Tensor<T, B>(ones<T, B>(Shape{}));
      backend::memory<B>::synchronize();
      return t;
    }();
    return one->reshape(shape.span());
  }
}

}  // namespace detail

template <element_type T, backend_tag B>
void Variable<T, B>::backward(const Tensor<T, B>& seed, bool retain_graph) const {
  node& root = checked("backward");
  if (!root.requires_grad)
    tessera::detail::fail<error>("backward",
                                 "the Variable does not require grad (no parameter reaches it, "
                                 "or it was computed under no_grad)");
  const auto order = detail::topological_order(&root);
  // A released node has no closure left and would pass for a leaf, silently cutting the
  // gradient: refuse a history that an earlier backward released anywhere, not only at the root.
  // Likewise every saved tensor is checked before any gradient is computed, so a refused
  // backward leaves every gradient as it was.
  for (const node* n : order) {
    if (n->released)
      tessera::detail::fail<error>("backward",
                                   "its history was already released by an earlier backward "
                                   "(pass retain_graph = true to call backward twice)");
    detail::check_saved(*n);
  }
  if (seed.defined()) {
    if (!(seed.shape() == root.value.shape()))
      tessera::detail::fail<shape_error>("backward", "seed of shape ", seed.shape(),
                                         " for a Variable of shape ", root.value.shape());
    root.accumulate(seed, false);
  } else {
    if (root.value.numel() != 1)
      tessera::detail::fail<shape_error>(
          "backward", "needs a seed gradient for a Variable of shape ", root.value.shape(),
          " (only one-element ones default to 1)");
    root.accumulate(detail::unit_seed<T, B>(root.value.shape()), false);  // maybe shared
  }
  // Callbacks that hooks queue run once every gradient is complete.
  std::vector<std::function<void()>> callbacks;
  struct callback_scope {
    std::vector<std::function<void()>>* outer;
    explicit callback_scope(std::vector<std::function<void()>>* mine)
        : outer(std::exchange(detail::backward_callbacks(), mine)) {
      ++detail::backward_serial();
    }
    ~callback_scope() { detail::backward_callbacks() = outer; }
  } scope(&callbacks);
  // Leaves with grad-ready hooks: how many recorded uses still owe them a gradient. A leaf's
  // hooks run when the last of its uses has run its backward.
  std::unordered_map<node*, int64_t> owed;
  if (detail::grad_ready_hook_count().load(std::memory_order_relaxed) > 0) {
    for (node* n : order)
      for (const auto& in : n->inputs)
        if (in && in->is_leaf() && !in->grad_ready_hooks.empty()) ++owed[in.get()];
    if (root.is_leaf() && !owed.count(&root))
      for (auto& [key, hook] : root.grad_ready_hooks) hook();
  }
  // Reverse post-order: every consumer of a node runs its backward before the node's own.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    node& n = **it;
    if (!n.backward) continue;  // a leaf
    if (n.grad.defined()) {
      const Tensor<T, B> g = std::move(n.grad);
      n.grad = Tensor<T, B>();
      n.grad_owned = false;
      backward_context<T, B> ctx(g, n.inputs);
      n.backward(ctx);
    }
    if (!owed.empty())
      for (const auto& in : n.inputs)
        if (in) {
          auto o = owed.find(in.get());
          if (o != owed.end() && --o->second == 0)
            for (auto& [key, hook] : in->grad_ready_hooks) hook();
        }
  }
  const auto run_callbacks = [&callbacks, &scope] {
    detail::backward_callbacks() = scope.outer;
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();
  };
  if (retain_graph) return run_callbacks();
  // Release the history: closures (and the tensors they saved) and the links to inputs. The
  // links are moved out first and dropped together at the end, because dropping one may free
  // nodes that `order` still points to.
  std::vector<std::vector<std::shared_ptr<node>>> links;
  links.reserve(order.size());
  for (node* n : order) {
    if (!n->backward) continue;
    n->backward = nullptr;
    n->saved.clear();  // it holds the saved tensors' storage too
    n->released = true;
    links.push_back(std::move(n->inputs));
    n->inputs.clear();
  }
  run_callbacks();
}

}  // namespace autograd

using autograd::no_grad;
using autograd::param;
using autograd::Variable;

TESSERA_END_NAMESPACE
