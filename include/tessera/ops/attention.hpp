// tessera/ops/attention.hpp - scaled dot-product attention, softmax(q k^T * scale + mask) v, as
// one fused op where the backend has attention_kernel<B> (the CPU: blocked with an online
// softmax, so the [lq, lk] scores never exist in memory), else as matmul, softmax and matmul.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "../kernel/attention_problem.hpp"
#include "activation.hpp"
#include "creation.hpp"
#include "elementwise.hpp"
#include "matmul.hpp"
#include "tensor_copy.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Whether backend B fuses attention on T.
template <class B, class T>
concept has_attention_kernel = requires(const attention_problem<T>& p,
                                        const attention_backward_problem<T>& g) {
  backend::attention_kernel<B>::forward(p);
  backend::attention_kernel<B>::backward(g);
};

/// Whether backend B's fused kernel takes heads of d and dv: every size, unless the kernel says
/// otherwise (attention_kernel<B>::supports: CUDA's takes up to 128).
template <class B>
bool attention_kernel_takes(int64_t d, int64_t dv) {
  if constexpr (requires { backend::attention_kernel<B>::supports(d, dv); })
    return backend::attention_kernel<B>::supports(d, dv);
  else
    return true;
}

/// A boolean mask (true: the key takes part) as the additive one: 0 or -inf.
template <class T>
struct attention_bool_mask {
  TESSERA_HOST_DEVICE T operator()(bool keep) const {
    return keep ? T(0) : -static_cast<T>(INFINITY);  // (numeric_limits is host-only in CUDA)
  }
};
/// The causal rule as an additive [lq, lk] mask: -inf where key j > query i.
template <class T>
struct attention_causal_mask {
  int64_t lk;
  TESSERA_HOST_DEVICE T operator()(int64_t e) const {
    return e % lk > e / lk ? -static_cast<T>(INFINITY) : T(0);
  }
};

/// The checks of scaled_dot_product_attention: q [..., lq, d], k [..., lk, d], v [..., lk, dv]
/// with equal batch dims; a mask that broadcasts to [..., lq, lk]. Returns the mask's shape
/// (batch dims, lq, lk).
template <class T, class M, class B>
Shape attention_check(const Tensor<T, B>& q, const Tensor<T, B>& k, const Tensor<T, B>& v,
                      const Tensor<M, B>& mask) {
  constexpr const char* op = "scaled_dot_product_attention";
  q.check_defined(op), k.check_defined(op), v.check_defined(op);
  const int64_t r = q.rank();
  if (r < 2 || k.rank() != r || v.rank() != r)
    fail<shape_error>(op, "q, k and v must be [..., l, d] of one rank >= 2, got ", q.shape(), ", ",
                      k.shape(), " and ", v.shape());
  for (int64_t d = 0; d < r - 2; ++d)
    if (k.shape()[d] != q.shape()[d] || v.shape()[d] != q.shape()[d])
      fail<shape_error>(op, "q, k and v must have equal batch dims, got ", q.shape(), ", ",
                        k.shape(), " and ", v.shape());
  if (k.shape()[r - 1] != q.shape()[r - 1])
    fail<shape_error>(op, "q ", q.shape(), " and k ", k.shape(), " differ in their last dim");
  if (v.shape()[r - 2] != k.shape()[r - 2])
    fail<shape_error>(op, "k ", k.shape(), " and v ", v.shape(), " have different key counts");
  Shape scores(q.shape());
  scores[r - 1] = k.shape()[r - 2];
  if (mask.defined()) {
    bool ok = mask.rank() <= r;
    for (int64_t d = 0; ok && d < mask.rank(); ++d) {
      const int64_t m = mask.shape()[mask.rank() - 1 - d];
      ok = m == 1 || m == scores[r - 1 - d];
    }
    if (!ok)
      fail<shape_error>(op, "mask ", mask.shape(), " does not broadcast to the scores' shape ",
                        scores);
  }
  return scores;
}

/// Whether dims [a, b) of a tensor walk with one stride (size-1 dims skipped); sets it.
inline bool attention_group_stride(const Shape& shape, const std::vector<int64_t>& strides,
                                   int64_t a, int64_t b, int64_t& stride) {
  stride = 0;
  int64_t inner = -1;
  for (int64_t d = b - 1; d >= a; --d) {
    if (shape[d] == 1) continue;
    if (inner < 0)
      stride = strides[d];
    else if (strides[d] != strides[inner] * shape[inner])
      return false;
    inner = d;
  }
  return true;
}

/// t as an attention_matrix with its batch dims split at `split`; false when a group of batch
/// dims has no single stride.
template <class T, class B>
bool attention_view(const Tensor<T, B>& t, int64_t split, attention_matrix<T>& m) {
  const int64_t r = t.rank();
  std::vector<int64_t> strides(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) strides[d] = t.stride(d);
  m.p = t.data();
  m.rs = t.stride(r - 2), m.cs = t.stride(r - 1);
  return attention_group_stride(t.shape(), strides, 0, split, m.outer_stride) &&
         attention_group_stride(t.shape(), strides, split, r - 2, m.inner_stride);
}

/// The fused attention on backend B (attention_kernel<B>): fills p's operands and shapes from
/// q, k, v and an additive mask already broadcast to the scores' shape (or undefined), making
/// a copy of an operand only where its batch dims have no two-stride walk or its rows are not
/// contiguous. The returned tensors keep those copies alive.
template <class T, class B>
std::vector<Tensor<T, B>> attention_setup(Tensor<T, B> q, Tensor<T, B> k, Tensor<T, B> v,
                                          Tensor<T, B> mask, attention_problem<T>& p) {
  const int64_t r = q.rank(), nb = r - 2;
  for (Tensor<T, B>* t : {&q, &k, &v})
    if (t->shape()[r - 1] > 1 && t->stride(r - 1) != 1) *t = t->contiguous();
  int64_t split = -1;
  for (int round = 0; round < 3 && split < 0; ++round) {
    if (round == 1) q = q.contiguous(), k = k.contiguous(), v = v.contiguous();
    if (round == 2 && mask.defined()) mask = mask.contiguous();
    for (int64_t s = 0; s <= nb && split < 0; ++s) {
      attention_problem<T> t;
      if (attention_view(q, s, t.q) && attention_view(k, s, t.k) && attention_view(v, s, t.v) &&
          (!mask.defined() || attention_view(mask, s, t.mask)))
        split = s, p.q = t.q, p.k = t.k, p.v = t.v, p.mask = t.mask;
    }
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < nb; ++d) (d < split ? outer : inner) *= q.shape()[d];
  p.batch = outer * inner, p.inner = inner;
  p.lq = q.shape()[r - 2], p.lk = k.shape()[r - 2], p.d = q.shape()[r - 1], p.dv = v.shape()[r - 1];
  return {q, k, v, mask};
}

/// The additive mask of the scores' shape from a user mask (T, or bool: true takes part,
/// undefined: none); the causal rule is passed to the kernel apart.
template <class T, class M, class B>
Tensor<T, B> attention_additive_mask(const Tensor<M, B>& mask, const Shape& scores) {
  if (!mask.defined()) return {};
  if constexpr (std::is_same_v<M, bool>)
    return map(attention_bool_mask<T>{}, mask).broadcast_to(scores);
  else if constexpr (std::is_same_v<M, T>)
    return mask.broadcast_to(scores);  // a view: astype would clone it
  else
    return mask.template astype<T>().broadcast_to(scores);
}

/// An additive mask (or undefined) with the causal rule added when `causal`.
template <class T, class B>
Tensor<T, B> attention_fold_causal(const Tensor<T, B>& mask, int64_t lq, int64_t lk, bool causal) {
  if (!causal || lq * lk == 0) return mask;
  const Tensor<T, B> tri = generate<T, B>({lq, lk}, attention_causal_mask<T>{lk});
  return mask.defined() ? Tensor<T, B>(mask + tri) : tri;
}

/// softmax(q k^T scale + mask) v as matmul, softmax and matmul, the causal rule folded into the
/// mask: the fallback of backends without attention_kernel, and the "unfused" composition the
/// benchmark and tests compare against. mask: additive, broadcast to the scores (or undefined).
template <class T, class B>
Tensor<T, B> attention_composed(const Tensor<T, B>& q, const Tensor<T, B>& k, const Tensor<T, B>& v,
                                const Tensor<T, B>& mask, bool causal, double scale) {
  const int64_t r = q.rank();
  const Tensor<T, B> m = attention_fold_causal(mask, q.shape()[r - 2], k.shape()[r - 2], causal);
  Tensor<T, B> s = matmul(q, k.transpose(r - 2, r - 1)) * static_cast<T>(scale);
  if (m.defined()) s = s + m;
  return matmul(softmax(s, -1), v);
}

/// The scale PyTorch uses by default: 1 / sqrt(d).
inline double attention_scale(std::optional<double> scale, int64_t d) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d));
}

/// The fused forward's output and logsumexp (lse undefined unless want_lse), and the problem
/// as the kernel ran it with the operands it read (copies where attention_setup made them), so
/// that the backward pass reuses both instead of setting them up again.
template <class T, class B>
struct attention_result {
  Tensor<T, B> out, lse;
  attention_problem<T> problem;
  std::vector<Tensor<T, B>> operands;
};

/// The fused forward on float or double (has_attention_kernel<B, T>): q, k, v checked, mask
/// additive and broadcast (or undefined).
template <class T, class B>
attention_result<T, B> attention_fused(const Tensor<T, B>& q, const Tensor<T, B>& k,
                                       const Tensor<T, B>& v, const Tensor<T, B>& mask, bool causal,
                                       double scale, bool want_lse) {
  const int64_t r = q.rank();
  Shape out_shape(q.shape()), lse_shape(q.shape());
  out_shape[r - 1] = v.shape()[r - 1];
  lse_shape.erase(static_cast<int>(r - 1));
  attention_result<T, B> res;
  res.out = Tensor<T, B>(out_shape);
  if (want_lse) res.lse = Tensor<T, B>(lse_shape);
  attention_problem<T>& p = res.problem;
  res.operands = attention_setup(q, k, v, mask, p);
  p.causal = causal, p.scale = static_cast<T>(scale);
  p.out = res.out.data(), p.lse = want_lse ? res.lse.data() : nullptr;
  if (p.batch == 0 || p.lq == 0) return res;
  if (p.lk == 0) {  // no keys: the empty softmax times an empty v is 0, as the composition
    res.out.fill_(T(0));
    if (want_lse) res.lse.fill_(-std::numeric_limits<T>::infinity());
    return res;
  }
  backend::attention_kernel<B>::forward(p);
  return res;
}

}  // namespace detail

/// Scaled dot-product attention: softmax(q k^T * scale + mask) v over the last two dims, as
/// torch.nn.functional.scaled_dot_product_attention. q is [..., lq, d], k [..., lk, d], v
/// [..., lk, dv] with equal batch dims (any strides: [n, heads, l, dh] views split from
/// [n, l, h] are read in place); the result is [..., lq, dv]. mask broadcasts to
/// [..., lq, lk]: bool (true: the key takes part) or T (added to the scores). causal: key j takes
/// no part for query i when j > i (top-left aligned). scale: 1 / sqrt(d) by default. A query
/// row whose every key is masked out gives NaN, as softmax over only -inf does. Floating T;
/// half, bfloat16 and float8 compute in float. On a backend with attention_kernel (the CPU) the
/// scores are never stored: extra memory is O(lq) per matrix, not O(lq lk). Throws shape_error
/// for mismatched shapes or a mask that does not broadcast.
template <element_type T, class B, class M = T>
Tensor<T, B> scaled_dot_product_attention(const Tensor<T, B>& q, const Tensor<T, B>& k,
                                          const Tensor<T, B>& v, const Tensor<M, B>& mask = {},
                                          bool causal = false,
                                          std::optional<double> scale = std::nullopt) {
  static_assert(is_floating_v<T>, "tessera::scaled_dot_product_attention: floating types only");
  static_assert(std::is_same_v<M, T> || std::is_same_v<M, bool>,
                "tessera::scaled_dot_product_attention: the mask is bool or the inputs' type");
  const Shape scores = detail::attention_check(q, k, v, mask);
  const double s = detail::attention_scale(scale, q.shape()[q.rank() - 1]);
  using C = compute_t<T>;
  if constexpr (!std::is_same_v<C, T>) {
    const Tensor<C, B> m = detail::attention_additive_mask<C>(mask, scores);
    return scaled_dot_product_attention(q.template astype<C>(), k.template astype<C>(),
                                        v.template astype<C>(), m, causal, s)
        .template astype<T>();
  } else {
    const Tensor<T, B> m = detail::attention_additive_mask<T>(mask, scores);
    if constexpr (detail::has_attention_kernel<B, T>)
      if (detail::attention_kernel_takes<B>(q.shape()[q.rank() - 1], v.shape()[v.rank() - 1]))
        return detail::attention_fused(q, k, v, m, causal, s, false).out;
    return detail::attention_composed(q, k, v, m, causal, s);
  }
}

TESSERA_END_NAMESPACE
