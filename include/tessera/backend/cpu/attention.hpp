// tessera/backend/cpu/attention.hpp - fused scaled dot-product attention on the CPU
// (kernel/attention_problem.hpp). Forward: per matrix and block of query rows, the scores of one
// block of keys at a time with an online softmax (FlashAttention's recurrence: a running row
// maximum and sum, the output rescaled when the maximum grows), so the [lq, lk] score matrix
// never exists; memory beyond the inputs and output is one block of scores per thread. Backward:
// per matrix, the probabilities recomputed block by block from the saved logsumexp. The products
// run on the GEMM's micro-kernels (gemm_block), one thread per task.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../kernel/attention_problem.hpp"
#include "../../kernel/gemm_problem.hpp"
#include "parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Query rows and keys per block: a 64 x 256 block of float scores is 64 KiB (L2-resident).
inline constexpr int64_t attention_rows = 64, attention_keys = 256;

/// c = alpha a b + beta c (row-major c with row stride c_rs) on this thread.
template <class T>
void attention_gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs,
                    const T* b, int64_t b_rs, int64_t b_cs, T* c, int64_t c_rs, T alpha, T beta) {
  if (m == 0 || n == 0) return;
  gemm_problem<T, T, T> pr;
  pr.m = m, pr.n = n, pr.k = k;
  pr.a = a, pr.a_rs = a_rs, pr.a_cs = a_cs;
  pr.b = b, pr.b_rs = b_rs, pr.b_cs = b_cs;
  pr.c = c, pr.c_rs = c_rs, pr.c_cs = 1;
  pr.alpha = alpha, pr.beta = beta;
  if (k == 0)
    gemm_scale_only(pr, c);
  else
    gemm_block(pr, a, b, c, 0, m, 0, n);
}

/// The largest of x[0, n) (NaN if any is NaN; -inf for n == 0).
template <class T>
T attention_row_max(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
  if constexpr (simd::available<T>) {
    using V = simd::vec<T>;
    if (n >= V::width) {
      V acc = V::load(x);
      for (j = V::width; j + V::width <= n; j += V::width) acc = max(acc, V::load(x + j));
      T lanes[V::width];
      acc.store(lanes);
      for (T v : lanes) m = std::isnan(v) || v > m ? v : m;
    }
  }
  for (; j < n; ++j) m = std::isnan(x[j]) || x[j] > m ? x[j] : m;
  return m;
}

/// x[j] = exp(x[j] - m) for j < n; returns their sum.
template <class T>
T attention_row_exp(T* x, int64_t n, T m) {
  T s = 0;
  int64_t j = 0;
  if constexpr (simd::available<T>) {
    using V = simd::vec<T>;
    const V mv = V::broadcast(m);
    V acc = V::broadcast(T(0));
    for (; j + V::width <= n; j += V::width) {
      const V e = exp(V::load(x + j) - mv);
      e.store(x + j);
      acc += e;
    }
    T lanes[V::width];
    acc.store(lanes);
    for (T v : lanes) s += v;
  }
  for (; j < n; ++j) s += (x[j] = std::exp(x[j] - m));
  return s;
}

/// Adds matrix t's mask (if any) to a block of scores s: rows i0.., keys j0.., row stride ld.
template <class T>
void attention_add_mask(const attention_problem<T>& p, int64_t t, int64_t i0, int64_t rows,
                        int64_t j0, int64_t keys, T* s, int64_t ld) {
  if (!p.mask.p) return;
  const T* mk = p.mask.at(t, p.inner);
  for (int64_t r = 0; r < rows; ++r) {
    const T* mrow = mk + (i0 + r) * p.mask.rs + j0 * p.mask.cs;
    T* row = s + r * ld;
    if (p.mask.cs == 1)
      for (int64_t j = 0; j < keys; ++j) row[j] += mrow[j];
    else
      for (int64_t j = 0; j < keys; ++j) row[j] += mrow[j * p.mask.cs];
  }
}

/// Keys j0 + j (j < keys) that count for query i: all, or under the causal rule those <= i.
inline int64_t attention_valid_keys(bool causal, int64_t i, int64_t j0, int64_t keys) {
  return causal ? std::clamp<int64_t>(i + 1 - j0, 0, keys) : keys;
}

/// Rows [i0, i0 + rows) of matrix t's output (and logsumexp). s: attention_rows x
/// attention_keys scores; mx, sum: the running maximum and sum per row.
template <class T>
void attention_forward_block(const attention_problem<T>& p, int64_t t, int64_t i0, int64_t rows,
                             T* s, T* mx, T* sum) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  const int64_t ld = attention_keys;
  const T* q = p.q.at(t, p.inner) + i0 * p.q.rs;
  const T* k = p.k.at(t, p.inner);
  const T* v = p.v.at(t, p.inner);
  T* o = p.out + (t * p.lq + i0) * p.dv;
  std::fill(o, o + rows * p.dv, T(0));
  std::fill(mx, mx + rows, -inf);
  std::fill(sum, sum + rows, T(0));
  const int64_t key_end = p.causal ? std::min(p.lk, i0 + rows) : p.lk;
  for (int64_t j0 = 0; j0 < key_end; j0 += ld) {
    const int64_t keys = std::min(ld, key_end - j0);
    attention_gemm<T>(rows, keys, p.d, q, p.q.rs, 1, k + j0 * p.k.rs, 1, p.k.rs, s, ld, p.scale,
                      T(0));
    attention_add_mask(p, t, i0, rows, j0, keys, s, ld);
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * ld;
      const int64_t valid = attention_valid_keys(p.causal, i0 + r, j0, keys);
      const T m_new = std::max(mx[r], attention_row_max(row, valid));
      if (m_new == -inf) {  // no finite score yet: this block adds nothing
        std::fill(row, row + keys, T(0));
        continue;
      }
      const T grow = std::exp(mx[r] - m_new);  // 0 for the first finite block
      const T block_sum = attention_row_exp(row, valid, m_new);
      std::fill(row + valid, row + keys, T(0));
      mx[r] = m_new;
      sum[r] = sum[r] * grow + block_sum;
      if (grow != T(1))
        for (T *x = o + r * p.dv, *e = x + p.dv; x < e; ++x) *x *= grow;
    }
    attention_gemm<T>(rows, p.dv, keys, s, ld, 1, v + j0 * p.v.rs, p.v.rs, 1, o, p.dv, T(1), T(1));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const bool none = !(sum[r] > T(0));  // every key masked out (or NaN scores)
    const T inv = none ? std::numeric_limits<T>::quiet_NaN() : T(1) / sum[r];
    for (T *x = o + r * p.dv, *e = x + p.dv; x < e; ++x) *x = none ? inv : *x * inv;
    if (p.lse) p.lse[t * p.lq + i0 + r] = sum[r] > T(0) ? mx[r] + std::log(sum[r]) : -inf;
  }
}

template <class T>
void attention_forward(const attention_problem<T>& p) {
  const int64_t blocks = (p.lq + attention_rows - 1) / attention_rows;
  // Whole matrices per thread (task u = t * blocks + block): balanced under the causal rule too.
  const int64_t cost = attention_rows * p.lk * (p.d + p.dv + 8);
  parallel_for(p.batch * blocks, cost, [&](int64_t u0, int64_t u1) {
    std::vector<T> s(static_cast<size_t>(attention_rows * attention_keys));
    std::vector<T> mx(attention_rows), sum(attention_rows);
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t t = u / blocks, i0 = (u % blocks) * attention_rows;
      attention_forward_block(p, t, i0, std::min(attention_rows, p.lq - i0), s.data(), mx.data(),
                              sum.data());
    }
  });
}

/// Matrix t's gradients (attention_backward_problem), on this thread.
template <class T>
void attention_backward_matrix(const attention_backward_problem<T>& g, int64_t t, T* pbuf, T* dpbuf,
                               T* delta) {
  const attention_problem<T>& p = g.fwd;
  const int64_t ld = attention_keys;
  const T* q = p.q.at(t, p.inner);
  const T* k = p.k.at(t, p.inner);
  const T* v = p.v.at(t, p.inner);
  const T* o = p.out + t * p.lq * p.dv;
  const T* go = g.grad_out + t * p.lq * p.dv;
  const T* lse = p.lse + t * p.lq;
  T* dq = g.dq + t * p.lq * p.d;
  T* dk = g.dk + t * p.lk * p.d;
  T* dv = g.dv + t * p.lk * p.dv;
  std::fill(dq, dq + p.lq * p.d, T(0));
  std::fill(dk, dk + p.lk * p.d, T(0));
  std::fill(dv, dv + p.lk * p.dv, T(0));
  // delta_i = sum_c go[i, c] o[i, c]: the softmax backward's row term.
  for (int64_t i = 0; i < p.lq; ++i) {
    T acc = 0;
    for (int64_t c = 0; c < p.dv; ++c) acc += go[i * p.dv + c] * o[i * p.dv + c];
    delta[i] = acc;
  }
  for (int64_t j0 = 0; j0 < p.lk; j0 += ld) {
    const int64_t keys = std::min(ld, p.lk - j0);
    // Under the causal rule, query blocks that end before key j0 see none of these keys.
    const int64_t first = p.causal ? j0 / attention_rows * attention_rows : 0;
    for (int64_t i0 = first; i0 < p.lq; i0 += attention_rows) {
      const int64_t rows = std::min(attention_rows, p.lq - i0);
      attention_gemm<T>(rows, keys, p.d, q + i0 * p.q.rs, p.q.rs, 1, k + j0 * p.k.rs, 1, p.k.rs,
                        pbuf, ld, p.scale, T(0));
      attention_add_mask(p, t, i0, rows, j0, keys, pbuf, ld);
      for (int64_t r = 0; r < rows; ++r) {
        T* row = pbuf + r * ld;
        const T l = lse[i0 + r];
        const int64_t valid = l == -std::numeric_limits<T>::infinity()
                                  ? 0
                                  : attention_valid_keys(p.causal, i0 + r, j0, keys);
        for (int64_t j = 0; j < valid; ++j) row[j] = std::exp(row[j] - l);
        std::fill(row + valid, row + keys, T(0));
      }
      // dv_j += P^T go_i; dP = go_i v_j^T; dS = P (dP - delta); dq_i += scale dS k_j;
      // dk_j += scale dS^T q_i.
      attention_gemm<T>(keys, p.dv, rows, pbuf, 1, ld, go + i0 * p.dv, p.dv, 1, dv + j0 * p.dv,
                        p.dv, T(1), T(1));
      attention_gemm<T>(rows, keys, p.dv, go + i0 * p.dv, p.dv, 1, v + j0 * p.v.rs, 1, p.v.rs,
                        dpbuf, ld, T(1), T(0));
      for (int64_t r = 0; r < rows; ++r) {
        const T* pr = pbuf + r * ld;
        T* ds = dpbuf + r * ld;
        const T dl = delta[i0 + r];
        for (int64_t j = 0; j < keys; ++j) ds[j] = pr[j] * (ds[j] - dl);
      }
      attention_gemm<T>(rows, p.d, keys, dpbuf, ld, 1, k + j0 * p.k.rs, p.k.rs, 1, dq + i0 * p.d,
                        p.d, p.scale, T(1));
      attention_gemm<T>(keys, p.d, rows, dpbuf, 1, ld, q + i0 * p.q.rs, p.q.rs, 1, dk + j0 * p.d,
                        p.d, p.scale, T(1));
    }
  }
}

template <class T>
void attention_backward(const attention_backward_problem<T>& g) {
  const attention_problem<T>& p = g.fwd;
  const int64_t cost = p.lq * p.lk * (2 * p.d + 2 * p.dv + 8);
  parallel_for(p.batch, cost, [&](int64_t t0, int64_t t1) {
    std::vector<T> pbuf(static_cast<size_t>(attention_rows * attention_keys));
    std::vector<T> dpbuf(pbuf.size()), delta(static_cast<size_t>(p.lq));
    for (int64_t t = t0; t < t1; ++t)
      attention_backward_matrix(g, t, pbuf.data(), dpbuf.data(), delta.data());
  });
}

}  // namespace detail

namespace backend {
struct cpu_attention {
  template <class T>
  static void forward(const detail::attention_problem<T>& p) {
    detail::attention_forward(p);
  }
  template <class T>
  static void backward(const detail::attention_backward_problem<T>& g) {
    detail::attention_backward(g);
  }
};
}  // namespace backend

TESSERA_END_NAMESPACE
