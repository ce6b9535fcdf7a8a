// tessera/nn/module.hpp - Module: the base of every layer, with named parameters, buffers,
// submodules, train/eval mode and state dictionaries.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../autograd/elementwise.hpp"

TESSERA_BEGIN_NAMESPACE
namespace nn {

/// A model's state by name ("0.weight", "fc1.bias", "bn.running_mean"): parameter values, then
/// buffers, in registration order. The format io::save / io::load write as .npz.
template <class T, class B>
using state_dict_t = std::vector<std::pair<std::string, Tensor<T, B>>>;

namespace detail {
template <class T, class B>
struct module_state {
  std::vector<std::pair<std::string, Variable<T, B>>> parameters;
  std::vector<std::pair<std::string, Tensor<T, B>>> buffers;
  std::vector<std::pair<std::string, std::shared_ptr<module_state>>> children;
  bool training = true;
};
/// A layer's size argument (features, channels, kernel size) must be positive.
inline void check_positive(std::string_view op, const char* what, int64_t v) {
  if (v <= 0) tessera::detail::fail<shape_error>(op, what, " must be positive, got ", v);
}
}  // namespace detail

/// Base class of layers and models. A Module is a handle, like Tensor and Variable: copies share
/// parameters, buffers, submodules and the train/eval flag, so a layer copied into a Sequential
/// is the same layer. Subclasses register what they own in their constructor
/// (register_parameter / register_buffer / register_module) and implement forward.
template <class T = float, class B = default_backend>
class Module {
 public:
  using value_type = T;
  using backend_type = B;
  using variable = Variable<T, B>;
  using tensor = Tensor<T, B>;

  Module() : state_(std::make_shared<detail::module_state<T, B>>()) {}
  virtual ~Module() = default;

  /// The layer's computation.
  virtual variable forward(const variable& x) = 0;
  /// forward followed by a ReLU. Layers that can apply the ReLU inside their own kernel (Linear,
  /// Conv2d: in the GEMM's store) override it; Sequential calls it for a layer followed by ReLU,
  /// which saves a pass over the activations forward and backward.
  virtual variable forward_relu(const variable& x) { return relu(forward(x)); }
  /// Calls forward. A Tensor argument is wrapped in a Variable that needs no gradient.
  variable operator()(const variable& x) { return forward(x); }
  variable operator()(const tensor& x) { return forward(variable(x)); }

  /// Every parameter of this module and its submodules (depth first, registration order).
  std::vector<variable> parameters() const {
    std::vector<variable> out;
    for (auto& [name, p] : named_parameters()) out.push_back(p);
    return out;
  }
  /// Parameters with dotted names ("0.weight").
  std::vector<std::pair<std::string, variable>> named_parameters() const {
    std::vector<std::pair<std::string, variable>> out;
    collect(*state_, "", [&](const std::string& prefix, const detail::module_state<T, B>& s) {
      for (auto& [n, p] : s.parameters) out.emplace_back(prefix + n, p);
    });
    return out;
  }
  /// Buffers (state that is not trained, e.g. BatchNorm's running statistics) with dotted names.
  state_dict_t<T, B> named_buffers() const {
    state_dict_t<T, B> out;
    collect(*state_, "", [&](const std::string& prefix, const detail::module_state<T, B>& s) {
      for (auto& [n, b] : s.buffers) out.emplace_back(prefix + n, b);
    });
    return out;
  }
  /// Parameter values and buffers by name (shared with the module, not copied).
  state_dict_t<T, B> state_dict() const {
    state_dict_t<T, B> out;
    for (auto& [n, p] : named_parameters()) out.emplace_back(n, p.value());
    for (auto& [n, b] : named_buffers()) out.emplace_back(n, b);
    return out;
  }
  /// Copies values from `state` into the parameters and buffers of the same names. strict: every
  /// entry must match one of the module's and every one of the module's must be given. Throws
  /// error naming the key for a missing or unexpected key, shape_error for a shape mismatch;
  /// nothing is modified when it throws.
  void load_state_dict(const state_dict_t<T, B>& state, bool strict = true) {
    const state_dict_t<T, B> mine = state_dict();
    std::vector<std::pair<const tensor*, const tensor*>> copies;
    for (size_t i = 0; i < state.size(); ++i) {
      const auto& [name, src] = state[i];
      // A repeated key would silently let its last tensor win.
      for (size_t j = 0; j < i; ++j)
        if (state[j].first == name)
          tessera::detail::fail<error>("load_state_dict", "key \"", name, "\" appears twice");
      const tensor* dst = nullptr;
      for (const auto& [n, t] : mine)
        if (n == name) dst = &t;
      if (!dst) {
        if (strict)
          tessera::detail::fail<error>("load_state_dict", "unexpected key \"", name, "\"");
        continue;
      }
      if (!(dst->shape() == src.shape()))
        tessera::detail::fail<shape_error>("load_state_dict", "\"", name, "\" has shape ",
                                           src.shape(), " but the module's is ", dst->shape());
      copies.emplace_back(dst, &src);
    }
    if (strict)
      for (const auto& [n, t] : mine) {
        bool found = false;
        for (const auto& [name, src] : state) found = found || name == n;
        if (!found) tessera::detail::fail<error>("load_state_dict", "missing key \"", n, "\"");
      }
    for (auto [dst, src] : copies) dst->copy_(*src);
  }

  /// Training mode (the default) or evaluation mode, for this module and its submodules: Dropout
  /// and BatchNorm behave differently in the two.
  void train(bool on = true) {
    collect(*state_, "",
            [&](const std::string&, detail::module_state<T, B>& s) { s.training = on; });
  }
  void eval() { train(false); }
  bool is_training() const { return state_->training; }
  /// Forgets every parameter's gradient.
  void zero_grad() const {
    for (auto& p : parameters()) p.zero_grad();
  }

 protected:
  /// Adds a trainable parameter holding `value`; returns it (keep the handle as a member).
  variable register_parameter(std::string name, tensor value) {
    variable p = param(std::move(value));
    state_->parameters.emplace_back(std::move(name), p);
    return p;
  }
  /// Adds a buffer (saved in the state, not trained); returns the shared tensor. Update it in
  /// place (copy_, map_to) so the registered handle sees the new values.
  tensor register_buffer(std::string name, tensor value) {
    state_->buffers.emplace_back(std::move(name), value);
    return value;
  }
  /// Adds a submodule; its parameters appear as "<name>.<param>".
  template <class M>
  void register_module(std::string name, const M& module) {
    state_->children.emplace_back(std::move(name), static_cast<const Module&>(module).state_);
  }

 private:
  template <class S, class F>
  static void collect(S& s, const std::string& prefix, F&& f) {
    f(prefix, s);
    for (auto& [n, c] : s.children) collect(*c, prefix + n + ".", f);
  }
  template <class, class>
  friend class Module;
  std::shared_ptr<detail::module_state<T, B>> state_;
};

}  // namespace nn
TESSERA_END_NAMESPACE
