// tessera/nn/quant.hpp - static post-training int8 quantization of a Sequential, for inference:
//
//   auto q = ts::nn::quant::quantize_static(model, calibration_batches);
//   ts::Tensor<float> logits = q(images);
//
// Calibration runs the float model on a few batches and records the range of every Conv2d and
// Linear input. Each such input is then quantized with one step for the whole tensor: uint8
// (step max / 255) when calibration saw no negative value (after a ReLU, or images in [0, 1]),
// int8 (step max|x| / 127) otherwise. Weights get one int8 step per output channel. The products
// run in 8-bit integers with exact int32 sums (ops/conv.hpp, ops/matmul.hpp). Between two
// quantized layers joined only by ReLU, MaxPool2d, Flatten or Dropout, the activations stay
// 8-bit: the first layer's sums are requantized straight to the second's step, and max pooling
// runs on the bytes (it commutes with a monotone quantization). Other layers run in float.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include "../ops/quant.hpp"
#include "layers.hpp"

TESSERA_BEGIN_NAMESPACE
namespace nn::quant {
namespace detail {

/// x / step rounded to the nearest integer (ties to even), clamped to [lo, hi], as Q. Written
/// without branches, so that the map's loops vectorize.
template <class Q>
struct quantize_to {
  float step, lo, hi;
  TESSERA_HOST_DEVICE Q operator()(float x) const {
    float q = nearbyintf(x / step);
    q = q < lo ? lo : q;  // compares, not fminf / fmaxf: those are calls without -ffast-math
    q = q > hi ? hi : q;
    return static_cast<Q>(q);
  }
};
/// An int32 sum scaled back to float: acc * scale + bias (scale = input step x channel step),
/// then max(., floor): floor is 0 for a fused ReLU, -inf otherwise.
struct dequantize_sum {
  float floor;
  TESSERA_HOST_DEVICE float operator()(int32_t acc, float scale, float bias) const {
    const float y = static_cast<float>(acc) * scale + bias;
    return y < floor ? floor : y;
  }
};
/// An int32 sum requantized to the next layer's step without a float tensor in between:
/// quantize_to(dequantize_sum(acc, scale, bias)); a fused ReLU is the clamp's lower bound.
template <class Q>
struct requantize_sum {
  quantize_to<Q> to;
  TESSERA_HOST_DEVICE Q operator()(int32_t acc, float scale, float bias) const {
    return to(static_cast<float>(acc) * scale + bias);
  }
};
/// An 8-bit value scaled back to float.
struct dequantize_value {
  float step;
  template <class Q>
  TESSERA_HOST_DEVICE float operator()(Q q) const {
    return static_cast<float>(q) * step;
  }
};

/// How a Conv2d or Linear input is quantized, from its calibrated range.
struct input_quant {
  float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity();
  bool is_unsigned() const { return lo >= 0; }
  /// The step: max / 255 for uint8, max|x| / 127 for int8 (1 for an all-zero range, so that
  /// zeros stay zeros and nothing divides by 0).
  float step() const {
    const float m = is_unsigned() ? hi / 255.0f : std::max(std::abs(lo), std::abs(hi)) / 127.0f;
    return m > 0 ? m : 1.0f;
  }
  float q_lo() const { return is_unsigned() ? 0.0f : -127.0f; }
  float q_hi() const { return is_unsigned() ? 255.0f : 127.0f; }
};

}  // namespace detail

/// A Sequential quantized for int8 inference (quantize_static). Holds copies of the quantized
/// weights; layers that run in float are shared with the float model (a Module is a handle).
template <class B = default_backend>
class Int8Sequential {
 public:
  /// Runs the quantized model on x (what the float model takes); returns float outputs.
  Tensor<float, B> forward(const Tensor<float, B>& x) const {
    value v{x, {}, {}, 0};
    for (size_t i = 0; i < steps_.size(); ++i) v = run(i, std::move(v));
    return float_of(v);
  }
  Tensor<float, B> operator()(const Tensor<float, B>& x) const { return forward(x); }

  /// The layers that run in int8 (Conv2d and Linear), and how many of their inputs arrive as
  /// bytes from the layer before (the rest are quantized from float).
  int64_t quantized_layers() const {
    return std::count_if(steps_.begin(), steps_.end(),
                         [](const step& s) { return s.is_product(); });
  }
  int64_t byte_inputs() const {
    int64_t n = 0;
    for (const step& s : steps_) n += s.is_product() && s.input_from_bytes;
    return n;
  }

  /// Builds the plan from a float model and calibration batches (see quantize_static).
  static Int8Sequential build(Sequential<float, B>& model,
                              std::span<const Tensor<float, B>> calibration) {
    if (calibration.empty())
      tessera::detail::fail<error>("quantize_static", "needs at least one calibration batch");
    Int8Sequential q;
    for (size_t i = 0; i < model.size(); ++i) q.steps_.push_back(describe(model[i], i));
    // Calibration: the float layers one at a time, recording each product's input range.
    const bool was_training = model.is_training();
    model.eval();
    {
      autograd::no_grad guard;
      for (const Tensor<float, B>& batch : calibration) {
        Variable<float, B> y(batch);
        for (size_t i = 0; i < model.size(); ++i) {
          step& s = q.steps_[i];
          if (s.is_product()) {
            const Tensor<float, B>& x = y.value();
            if (x.numel() > 0) {
              s.in.lo = std::min(s.in.lo, min(x).item());
              s.in.hi = std::max(s.in.hi, max(x).item());
            }
          }
          y = model[i].forward(y);
        }
      }
    }
    model.train(was_training);
    for (step& s : q.steps_)
      if (s.is_product() && !(s.in.lo <= s.in.hi))
        s.in.lo = s.in.hi = 0;  // only empty calibration inputs: any step will do
    // Where a product's output reaches the next product through byte-preserving layers only,
    // it is requantized to that product's input step.
    for (size_t i = 0; i < q.steps_.size(); ++i) {
      if (!q.steps_[i].is_product()) continue;
      for (size_t j = i + 1; j < q.steps_.size(); ++j) {
        if (q.steps_[j].is_product()) {
          q.steps_[i].out_to = static_cast<int64_t>(j);
          q.steps_[j].input_from_bytes = true;
          break;
        }
        if (!q.steps_[j].keeps_bytes()) break;
      }
      // A ReLU right after the product is applied in its store, and then skipped.
      q.steps_[i].relu = i + 1 < q.steps_.size() && q.steps_[i + 1].k == kind::relu;
      if (q.steps_[i].relu) q.steps_[i + 1].k = kind::identity;
    }
    q.float_model_ = model;  // keeps the layers that run in float alive
    return q;
  }

 private:
  enum class kind { conv, linear, relu, max_pool, flatten, identity, other };
  struct step {
    kind k = kind::other;
    // conv / linear: weight values (conv [K, C, R, S]; linear [out, in] as a view of the
    // contiguous transpose), steps [K], bias [K] (zeros when the layer has none).
    Tensor<int8_t, B> weight;
    Tensor<float, B> weight_steps, bias;
    Conv2dOptions conv;
    Pool2dOptions pool;
    int64_t flatten_start = 1, flatten_end = -1;
    Module<float, B>* module = nullptr;  // kind::other: run in float (a layer of float_model_)
    detail::input_quant in;
    int64_t out_to = -1;  // the product whose input step this product's output takes, or -1
    bool input_from_bytes = false, relu = false;
    bool is_product() const { return k == kind::conv || k == kind::linear; }
    bool keeps_bytes() const {
      return k == kind::relu || k == kind::max_pool || k == kind::flatten || k == kind::identity;
    }
  };
  /// A value between layers: float, or bytes (uint8 or int8) with their step.
  struct value {
    Tensor<float, B> f;
    Tensor<uint8_t, B> u;
    Tensor<int8_t, B> s;
    float step = 0;
  };

  static step describe(Module<float, B>& m, size_t index) {
    step s;
    if (auto* c = dynamic_cast<Conv2d<float, B>*>(&m)) {
      s.k = kind::conv;
      s.conv = c->options;
      s.conv.relu = false;
      weights_of(s, c->weight.value(), c->bias);
    } else if (auto* l = dynamic_cast<Linear<float, B>*>(&m)) {
      s.k = kind::linear;
      weights_of(s, l->weight.value(), l->bias);
      s.weight = s.weight.transpose(0, 1).contiguous().transpose(0, 1);
    } else if (dynamic_cast<ReLU<float, B>*>(&m)) {
      s.k = kind::relu;
    } else if (auto* p = dynamic_cast<MaxPool2d<float, B>*>(&m)) {
      s.k = kind::max_pool, s.pool = p->options;
    } else if (auto* f = dynamic_cast<Flatten<float, B>*>(&m)) {
      s.k = kind::flatten, s.flatten_start = f->start, s.flatten_end = f->end;
    } else if (dynamic_cast<Dropout<float, B>*>(&m)) {
      s.k = kind::identity;
    } else if (dynamic_cast<Sequential<float, B>*>(&m)) {
      tessera::detail::fail<error>("quantize_static", "layer ", index,
                                   " is a nested Sequential: flatten the model first");
    } else {
      s.k = kind::other, s.module = &m;  // runs in float, in evaluation mode
    }
    return s;
  }
  static void weights_of(step& s, const Tensor<float, B>& w, const Variable<float, B>& bias) {
    const int64_t k = w.shape()[0];
    const int8_rows<B> q = quantize_int8_rows(w.reshape({k, w.numel() / std::max<int64_t>(k, 1)}));
    s.weight = q.values.reshape(w.shape().span());
    s.weight_steps = q.steps.reshape({k});
    s.bias = bias.defined() ? bias.value().contiguous() : zeros<float, B>({k});
  }

  /// The value as float (bytes scaled back by their step).
  static Tensor<float, B> float_of(const value& v) {
    if (v.f.defined()) return v.f;
    if (v.u.defined()) return map(detail::dequantize_value{v.step}, v.u);
    return map(detail::dequantize_value{v.step}, v.s);
  }

  value run(size_t i, value v) const {
    const step& s = steps_[i];
    switch (s.k) {
      case kind::conv:
      case kind::linear:
        return product(s, v);
      case kind::relu:
        if (v.f.defined()) return {relu(v.f), {}, {}, 0};
        if (v.s.defined()) v.s = maximum(v.s, zeros<int8_t, B>({1}));
        return v;  // uint8 is never negative
      case kind::max_pool:
        if (v.f.defined()) return {max_pool2d(v.f, s.pool), {}, {}, 0};
        if (v.u.defined()) v.u = max_pool2d(v.u, s.pool);
        if (v.s.defined()) v.s = max_pool2d(v.s, s.pool);
        return v;
      case kind::flatten: {
        const Shape& sh = v.f.defined() ? v.f.shape() : v.u.defined() ? v.u.shape() : v.s.shape();
        const Shape to = flattened(sh, s.flatten_start, s.flatten_end);
        if (v.f.defined()) v.f = v.f.reshape(to.span());
        if (v.u.defined()) v.u = v.u.reshape(to.span());
        if (v.s.defined()) v.s = v.s.reshape(to.span());
        return v;
      }
      case kind::identity:
        return v;
      default: {
        const bool was_training = s.module->is_training();
        s.module->eval();
        autograd::no_grad guard;
        Tensor<float, B> y = s.module->forward(Variable<float, B>(float_of(v))).value();
        s.module->train(was_training);
        return {y, {}, {}, 0};
      }
    }
  }

  static Shape flattened(const Shape& sh, int64_t start, int64_t end) {
    const int64_t r = sh.rank();
    const int64_t a = start < 0 ? start + r : start, b = end < 0 ? end + r : end;
    if (a < 0 || b >= r || a > b)
      tessera::detail::fail<shape_error>("Int8Sequential", "cannot flatten dims ", start, "..", end,
                                         " of ", sh);
    Shape to;
    int64_t n = 1;
    for (int64_t d = 0; d < r; ++d) {
      if (d < a || d > b) to.push_back(sh[d]);
      if (d >= a && d <= b) n *= sh[d];
      if (d == b) to.push_back(n);
    }
    return to;
  }

  /// A Conv2d or Linear in int8: its input as bytes at its own step (quantized here when it
  /// arrives as float), the int32 sums, then float or the next product's bytes.
  value product(const step& s, const value& v) const {
    const float in_step = s.in.step();
    const bool unsigned_in = s.in.is_unsigned();
    auto as_bytes = [&]<class Q>(const Tensor<Q, B>& bytes) {
      if (bytes.defined() && v.step == in_step) return bytes;
      return map(detail::quantize_to<Q>{in_step, s.in.q_lo(), s.in.q_hi()}, float_of(v));
    };
    auto sums = [&]<class Q>(const Tensor<Q, B>& x) {
      if (s.k == kind::conv) return conv2d(x, s.weight, s.conv);
      // Linear: x [..., in] -> [..., out].
      const int64_t in = s.weight.shape()[1];
      if (x.rank() == 0 || x.shape()[x.rank() - 1] != in)
        tessera::detail::fail<shape_error>("Int8Sequential", "a Linear layer takes ", in,
                                           " features, got ", x.shape());
      return matmul(x, s.weight.transpose(0, 1));
    };
    const Tensor<int32_t, B> acc = unsigned_in ? sums(as_bytes(v.u)) : sums(as_bytes(v.s));
    // Per-channel scale and bias, shaped to broadcast over acc's channel dim.
    Shape ch{s.weight.shape()[0]};
    if (s.k == kind::conv) ch = Shape{s.weight.shape()[0], 1, 1};
    const Tensor<float, B> scale = (s.weight_steps * in_step).reshape(ch.span());
    const Tensor<float, B> bias = s.bias.reshape(ch.span());
    if (s.out_to < 0) {
      const float floor = s.relu ? 0.0f : -std::numeric_limits<float>::infinity();
      return {map(detail::dequantize_sum{floor}, acc, scale, bias), {}, {}, 0};
    }
    const detail::input_quant& next = steps_[static_cast<size_t>(s.out_to)].in;
    const float lo = s.relu ? std::max(0.0f, next.q_lo()) : next.q_lo();
    if (next.is_unsigned())
      return {
          {},
          map(detail::requantize_sum<uint8_t>{{next.step(), lo, next.q_hi()}}, acc, scale, bias),
          {},
          next.step()};
    return {{},
            {},
            map(detail::requantize_sum<int8_t>{{next.step(), lo, next.q_hi()}}, acc, scale, bias),
            next.step()};
  }

  std::vector<step> steps_;
  Sequential<float, B> float_model_;
};

/// Quantizes a Sequential of Conv2d, Linear, ReLU, MaxPool2d, Flatten and Dropout layers (any
/// other layer runs in float) for int8 inference, calibrated on `calibration`: a few batches of
/// what the model takes, e.g. training images. The model is run in evaluation mode and left in
/// the mode it was in. Throws error for no calibration batch or a nested Sequential.
template <class B>
Int8Sequential<B> quantize_static(Sequential<float, B>& model,
                                  std::span<const Tensor<float, B>> calibration) {
  return Int8Sequential<B>::build(model, calibration);
}
template <class B>
Int8Sequential<B> quantize_static(Sequential<float, B>& model,
                                  const std::vector<Tensor<float, B>>& calibration) {
  return Int8Sequential<B>::build(model, std::span<const Tensor<float, B>>(calibration));
}

}  // namespace nn::quant
TESSERA_END_NAMESPACE
