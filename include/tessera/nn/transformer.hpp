// tessera/nn/transformer.hpp - MultiheadAttention and TransformerEncoderLayer, with PyTorch's
// parameter names and layouts (batch_first), so that a state dict carries over.
#pragma once

#include <string>

#include "../autograd/attention.hpp"
#include "layers.hpp"
#include "norm.hpp"

TESSERA_BEGIN_NAMESPACE
namespace nn {

/// Multi-head attention as torch.nn.MultiheadAttention(embed_dim, num_heads, batch_first=True):
/// query [n, lq, e], key and value [n, lk, e] -> [n, lq, e]. Parameters: in_proj_weight [3e, e]
/// and in_proj_bias [3e] (query, key and value projections stacked), out_proj (Linear e -> e).
/// Self-attention (forward(x), or the same Variable thrice) projects with one GEMM. No dropout
/// on the attention weights (the fused kernel has none).
template <class T = float, class B = default_backend>
class MultiheadAttention : public Module<T, B> {
 public:
  int64_t embed_dim, num_heads;
  Variable<T, B> in_proj_weight, in_proj_bias;
  Linear<T, B> out_proj;

  MultiheadAttention(int64_t embed, int64_t heads)
      : embed_dim(embed), num_heads(heads), out_proj(checked(embed, heads), embed) {
    in_proj_weight =
        this->register_parameter("in_proj_weight", Tensor<T, B>(Shape{3 * embed, embed}));
    in_proj_bias = this->register_parameter("in_proj_bias", zeros<T, B>({3 * embed}));
    this->register_module("out_proj", out_proj);
    init::xavier_uniform_(in_proj_weight.value());
    out_proj.bias.value().fill_(T(0));  // as PyTorch
  }

  /// Self-attention.
  Variable<T, B> forward(const Variable<T, B>& x) override { return forward(x, x, x); }

  /// key_padding_mask [n, lk] (bool, may be undefined): true marks a padding key, which no
  /// query attends to (PyTorch's convention). causal: query i attends to keys 0..i only.
  Variable<T, B> forward(const Variable<T, B>& query, const Variable<T, B>& key,
                         const Variable<T, B>& value, const Tensor<bool, B>& key_padding_mask = {},
                         bool causal = false) {
    const int64_t e = embed_dim;
    for (const Variable<T, B>* t : {&query, &key, &value})
      if (t->rank() != 3 || t->shape()[2] != e || t->shape()[0] != query.shape()[0])
        tessera::detail::fail<shape_error>(
            "MultiheadAttention", "query, key and value must be [n, l, ", e, "] with one n, got ",
            query.shape(), ", ", key.shape(), " and ", value.shape());
    if (key.shape() != value.shape())
      tessera::detail::fail<shape_error>("MultiheadAttention", "key ", key.shape(), " and value ",
                                         value.shape(), " differ");
    const int64_t n = query.shape()[0], lq = query.shape()[1], lk = key.shape()[1];
    Variable<T, B> q, k, v;
    if (query.impl() == key.impl() && key.impl() == value.impl()) {
      const Variable<T, B> qkv = linear(query, in_proj_weight, in_proj_bias);
      q = slice(qkv, 2, 0, e), k = slice(qkv, 2, e, 2 * e), v = slice(qkv, 2, 2 * e, 3 * e);
    } else {
      auto part = [&](const Variable<T, B>& x, int64_t i) {
        return linear(x, slice(in_proj_weight, 0, i * e, (i + 1) * e),
                      slice(in_proj_bias, 0, i * e, (i + 1) * e));
      };
      q = part(query, 0), k = part(key, 1), v = part(value, 2);
    }
    const int64_t dh = e / num_heads;
    auto heads = [&](const Variable<T, B>& t, int64_t l) {
      return permute(reshape(t, {n, l, num_heads, dh}), {0, 2, 1, 3});
    };
    Tensor<bool, B> keep;
    if (key_padding_mask.defined()) {
      if (key_padding_mask.shape() != Shape{n, lk})
        tessera::detail::fail<shape_error>("MultiheadAttention", "key_padding_mask must be [", n,
                                           ", ", lk, "], got ", key_padding_mask.shape());
      keep = logical_not(key_padding_mask).reshape({n, 1, 1, lk});
    }
    const Variable<T, B> ctx =
        scaled_dot_product_attention(heads(q, lq), heads(k, lk), heads(v, lk), keep, causal);
    return out_proj.forward(reshape(permute(ctx, {0, 2, 1, 3}), {n, lq, e}));
  }

 private:
  static int64_t checked(int64_t embed, int64_t heads) {
    detail::check_positive("MultiheadAttention", "embed_dim", embed);
    detail::check_positive("MultiheadAttention", "num_heads", heads);
    if (embed % heads != 0)
      tessera::detail::fail<shape_error>("MultiheadAttention", "embed_dim ", embed,
                                         " is not a multiple of num_heads ", heads);
    return embed;
  }
};

/// The feed-forward activation of TransformerEncoderLayer.
enum class Activation { relu, gelu };

/// One post-norm encoder layer, as torch.nn.TransformerEncoderLayer(d_model, nhead,
/// dim_feedforward, dropout, activation, layer_norm_eps, batch_first=True) and BERT's layer:
///   x = norm1(x + dropout(self_attn(x)))
///   x = norm2(x + dropout(linear2(dropout(activation(linear1(x))))))
/// Input and output [n, l, d_model]. Parameter names as PyTorch's (self_attn.in_proj_weight,
/// linear1.weight, norm1.weight, ...).
template <class T = float, class B = default_backend>
class TransformerEncoderLayer : public Module<T, B> {
 public:
  MultiheadAttention<T, B> self_attn;
  Linear<T, B> linear1, linear2;
  LayerNorm<T, B> norm1, norm2;
  Dropout<T, B> dropout;
  Activation activation;

  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048,
                          double dropout_p = 0.1, Activation act = Activation::relu,
                          double layer_norm_eps = 1e-5)
      : self_attn(d_model, nhead),
        linear1(d_model, dim_feedforward),
        linear2(dim_feedforward, d_model),
        norm1(Shape{d_model}, layer_norm_eps),
        norm2(Shape{d_model}, layer_norm_eps),
        dropout(dropout_p),
        activation(act) {
    this->register_module("self_attn", self_attn);
    this->register_module("linear1", linear1);
    this->register_module("linear2", linear2);
    this->register_module("norm1", norm1);
    this->register_module("norm2", norm2);
    this->register_module("dropout", dropout);
  }

  Variable<T, B> forward(const Variable<T, B>& x) override { return forward(x, {}); }

  /// key_padding_mask [n, l] (true: padding) and causal as MultiheadAttention's.
  Variable<T, B> forward(const Variable<T, B>& x, const Tensor<bool, B>& key_padding_mask,
                         bool causal = false) {
    Variable<T, B> y =
        norm1.forward(x + dropout.forward(self_attn.forward(x, x, x, key_padding_mask, causal)));
    Variable<T, B> h = linear1.forward(y);
    h = activation == Activation::gelu ? gelu(h) : relu(h);
    return norm2.forward(y + dropout.forward(linear2.forward(dropout.forward(h))));
  }
};

}  // namespace nn
TESSERA_END_NAMESPACE
