// tessera/kernel/attention_problem.hpp - the backend-neutral description of fused scaled
// dot-product attention, forward and backward: what ops/attention.hpp hands to
// backend::attention_kernel<B>. The family is optional: a backend without it runs attention as
// matmul, softmax and matmul (ops/attention.hpp).
#pragma once

#include <cstdint>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// One operand of a batch of matrices, without an offset table: matrix t (t < outer * inner)
/// starts at p + (t / inner) * outer_stride + (t % inner) * inner_stride, and its element
/// (i, j) is at + i * rs + j * cs. So [n, heads, l, d] views (heads split off a [n, l, h]
/// tensor, a mask broadcast over heads) need no copy and no table to upload to a device.
template <class T>
struct attention_matrix {
  const T* p = nullptr;
  int64_t outer_stride = 0, inner_stride = 0, rs = 0, cs = 1;
  TESSERA_HOST_DEVICE const T* at(int64_t t, int64_t inner) const {
    return p + (t / inner) * outer_stride + (t % inner) * inner_stride;
  }
};

/// out = softmax(scale * q k^T + mask) v for each of `batch` matrices, with the softmax over
/// each query row's keys. q is [lq, d], k [lk, d], v [lk, dv] per matrix, each with unit column
/// stride (cs == 1). mask (p may be null: none) is added to the scores: element (i, j) of
/// matrix t, any strides (0 where broadcast). causal: key j takes no part for query i when
/// j > i (the top-left aligned triangle, as PyTorch's is_causal). A query row whose every key
/// the mask sets to -inf gets NaN, as a softmax over only -inf does. lk >= 1 (the op answers
/// lk == 0 itself). out is contiguous [batch, lq, dv]; lse (may be null) receives each row's
/// logsumexp of the scaled, masked scores, contiguous [batch, lq] (-inf for a row with no key),
/// which the backward pass reads instead of recomputing the row sums.
template <class T>
struct attention_problem {
  int64_t batch = 0, inner = 1, lq = 0, lk = 0, d = 0, dv = 0;
  attention_matrix<T> q, k, v, mask;
  bool causal = false;
  T scale{1};
  T* out = nullptr;
  T* lse = nullptr;
};

/// The gradients of attention_problem's out with respect to q, k and v, given grad_out
/// (contiguous [batch, lq, dv]) and the forward's out and lse. dq [batch, lq, d], dk
/// [batch, lk, d] and dv [batch, lk, dv] are contiguous and overwritten. The mask takes no
/// gradient (it is a constant of the op).
template <class T>
struct attention_backward_problem {
  attention_problem<T> fwd;  // fwd.out and fwd.lse: the forward's results, read here
  const T* grad_out = nullptr;
  T* dq = nullptr;
  T* dk = nullptr;
  T* dv = nullptr;
};

}  // namespace detail
TESSERA_END_NAMESPACE
