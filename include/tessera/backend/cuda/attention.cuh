// tessera/backend/cuda/attention.cuh - attention_kernel<cuda>: fused scaled dot-product attention
// (kernel/attention_problem.hpp) for heads of up to 128. Forward: one thread per query row, the
// keys and values streamed through shared memory 16 at a time with an online softmax (a running
// maximum and sum, the output rescaled when the maximum grows), so the scores are never stored.
// Backward: the probabilities recomputed from the saved logsumexp, one thread per query row for
// dq and one per key for dk and dv, the other side streamed through shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../../core/backend.hpp"
#include "../../kernel/attention_problem.hpp"
#include "block_shared.cuh"
#include "launch.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Rows (queries or keys) per block, rows streamed through shared memory per step, and the
/// largest head size these kernels take (the per-thread accumulators are arrays of this size).
inline constexpr int cuda_attention_rows = 64, cuda_attention_tile = 16,
                     cuda_attention_max_dim = 128;

/// Rows of the tile that starts at row r0 of end rows: cuda_attention_tile, or fewer at the end.
__device__ inline int cuda_attention_tile_rows(int64_t end, int64_t r0) {
  return static_cast<int>(end - r0 < cuda_attention_tile ? end - r0 : cuda_attention_tile);
}

/// Copies rows [r0, r0 + n) of an [l, dim] operand (row stride rs, unit columns) into a
/// cuda_attention_tile x cuda_attention_max_dim shared tile, every thread of the block helping.
template <class T>
__device__ void cuda_attention_load(T* tile, const T* src, int64_t rs, int64_t r0, int n,
                                    int64_t dim) {
  for (int64_t e = threadIdx.x; e < n * dim; e += blockDim.x) {
    const int64_t r = e / dim, c = e % dim;
    tile[r * cuda_attention_max_dim + c] = src[(r0 + r) * rs + c];
  }
}

/// Matrix t's q, k, v and mask (null: none).
template <class T>
struct cuda_attention_operands {
  const T *q, *k, *v, *mask;
};
template <class T>
__device__ cuda_attention_operands<T> cuda_attention_matrix(const attention_problem<T>& p,
                                                            int64_t t) {
  return {p.q.at(t, p.inner), p.k.at(t, p.inner), p.v.at(t, p.inner),
          p.mask.p ? p.mask.at(t, p.inner) : nullptr};
}

/// The scaled, masked score of query i and key j (q_row: query i's row in registers, k_row: key
/// j's row in shared memory); -inf where the causal rule drops the key.
template <class T>
__device__ T cuda_attention_score(const attention_problem<T>& p, const T* mk, int64_t i, int64_t j,
                                  const T* q_row, const T* k_row) {
  if (p.causal && j > i) return -static_cast<T>(INFINITY);
  T s = 0;
  for (int64_t c = 0; c < p.d; ++c) s += q_row[c] * k_row[c];
  s *= p.scale;
  if (mk) s += mk[i * p.mask.rs + j * p.mask.cs];
  return s;
}

/// Forward: block (t, y) takes queries [64 y, 64 y + 64) of matrix t, one per thread.
template <class T>
__global__ void __launch_bounds__(cuda_attention_rows)
    cuda_attention_forward(attention_problem<T> p) {
  TESSERA_CUDA_SHARED(T, ks, [cuda_attention_tile * cuda_attention_max_dim]);
  TESSERA_CUDA_SHARED(T, vs, [cuda_attention_tile * cuda_attention_max_dim]);
  const int64_t t = blockIdx.x, i = int64_t{blockIdx.y} * cuda_attention_rows + threadIdx.x;
  const bool active = i < p.lq;
  const auto [q, k, v, mk] = cuda_attention_matrix(p, t);
  using std::exp;
  using std::log;
  const T ninf = -static_cast<T>(INFINITY);
  T q_row[cuda_attention_max_dim], acc[cuda_attention_max_dim];
  for (int64_t c = 0; c < p.d; ++c) q_row[c] = active ? q[i * p.q.rs + c] : T(0);
  for (int64_t c = 0; c < p.dv; ++c) acc[c] = 0;
  T mx = ninf, sum = 0;
  // Under the causal rule no query of this block sees keys past its last row.
  const int64_t last = (int64_t{blockIdx.y} + 1) * cuda_attention_rows;
  const int64_t key_end = p.causal && last < p.lk ? last : p.lk;
  for (int64_t j0 = 0; j0 < key_end; j0 += cuda_attention_tile) {
    const int n = cuda_attention_tile_rows(key_end, j0);
    __syncthreads();  // the previous tile is no longer read
    cuda_attention_load(ks, k, p.k.rs, j0, n, p.d);
    cuda_attention_load(vs, v, p.v.rs, j0, n, p.dv);
    __syncthreads();
    if (!active) continue;
    for (int jj = 0; jj < n; ++jj) {
      const T s = cuda_attention_score(p, mk, i, j0 + jj, q_row, ks + jj * cuda_attention_max_dim);
      if (s == ninf) continue;
      const T m_new = s > mx ? s : mx;
      const T grow = exp(mx - m_new), e = exp(s - m_new);
      sum = sum * grow + e;
      for (int64_t c = 0; c < p.dv; ++c)
        acc[c] = acc[c] * grow + e * vs[jj * cuda_attention_max_dim + c];
      mx = m_new;
    }
  }
  if (!active) return;
  T* o = p.out + (t * p.lq + i) * p.dv;
  const bool none = !(sum > T(0));
  for (int64_t c = 0; c < p.dv; ++c) o[c] = none ? static_cast<T>(NAN) : acc[c] / sum;
  if (p.lse) p.lse[t * p.lq + i] = none ? ninf : mx + log(sum);
}

/// delta[t, i] = sum_c grad_out[t, i, c] out[t, i, c], one thread per row.
template <class T>
__global__ void cuda_attention_delta(attention_backward_problem<T> g, T* delta) {
  const int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (r >= g.fwd.batch * g.fwd.lq) return;
  const T* go = g.grad_out + r * g.fwd.dv;
  const T* o = g.fwd.out + r * g.fwd.dv;
  T a = 0;
  for (int64_t c = 0; c < g.fwd.dv; ++c) a += go[c] * o[c];
  delta[r] = a;
}

/// dq: block (t, y), one query per thread; keys and values streamed through shared memory.
/// dq_i = scale sum_j p_ij (go_i . v_j - delta_i) k_j, p_ij = exp(s_ij - lse_i).
template <class T>
__global__ void __launch_bounds__(cuda_attention_rows)
    cuda_attention_backward_q(attention_backward_problem<T> g, const T* delta) {
  TESSERA_CUDA_SHARED(T, ks, [cuda_attention_tile * cuda_attention_max_dim]);
  TESSERA_CUDA_SHARED(T, vs, [cuda_attention_tile * cuda_attention_max_dim]);
  const attention_problem<T>& p = g.fwd;
  const int64_t t = blockIdx.x, i = int64_t{blockIdx.y} * cuda_attention_rows + threadIdx.x;
  const bool active = i < p.lq;
  const auto [q, k, v, mk] = cuda_attention_matrix(p, t);
  using std::exp;
  const T ninf = -static_cast<T>(INFINITY);
  T q_row[cuda_attention_max_dim], go_row[cuda_attention_max_dim], acc[cuda_attention_max_dim];
  const int64_t r = t * p.lq + i;
  for (int64_t c = 0; c < p.d; ++c) q_row[c] = active ? q[i * p.q.rs + c] : T(0), acc[c] = 0;
  for (int64_t c = 0; c < p.dv; ++c) go_row[c] = active ? g.grad_out[r * p.dv + c] : T(0);
  const T lse = active ? p.lse[r] : ninf, dl = active ? delta[r] : T(0);
  for (int64_t j0 = 0; j0 < p.lk; j0 += cuda_attention_tile) {
    const int n = cuda_attention_tile_rows(p.lk, j0);
    __syncthreads();
    cuda_attention_load(ks, k, p.k.rs, j0, n, p.d);
    cuda_attention_load(vs, v, p.v.rs, j0, n, p.dv);
    __syncthreads();
    if (!active || lse == ninf) continue;
    for (int jj = 0; jj < n; ++jj) {
      const T* kr = ks + jj * cuda_attention_max_dim;
      const T s = cuda_attention_score(p, mk, i, j0 + jj, q_row, kr);
      if (s == ninf) continue;
      const T pij = exp(s - lse);
      T dp = 0;
      for (int64_t c = 0; c < p.dv; ++c) dp += go_row[c] * vs[jj * cuda_attention_max_dim + c];
      const T ds = pij * (dp - dl) * p.scale;
      for (int64_t c = 0; c < p.d; ++c) acc[c] += ds * kr[c];
    }
  }
  if (!active) return;
  for (int64_t c = 0; c < p.d; ++c) g.dq[r * p.d + c] = acc[c];
}

/// dk and dv: block (t, y), one key per thread; queries and their output gradients streamed.
/// dv_j = sum_i p_ij go_i, dk_j = scale sum_i p_ij (go_i . v_j - delta_i) q_i.
template <class T>
__global__ void __launch_bounds__(cuda_attention_rows)
    cuda_attention_backward_kv(attention_backward_problem<T> g, const T* delta) {
  TESSERA_CUDA_SHARED(T, qs, [cuda_attention_tile * cuda_attention_max_dim]);
  TESSERA_CUDA_SHARED(T, gs, [cuda_attention_tile * cuda_attention_max_dim]);
  TESSERA_CUDA_SHARED(T, ls, [cuda_attention_tile]);
  TESSERA_CUDA_SHARED(T, ds_, [cuda_attention_tile]);
  const attention_problem<T>& p = g.fwd;
  const int64_t t = blockIdx.x, j = int64_t{blockIdx.y} * cuda_attention_rows + threadIdx.x;
  const bool active = j < p.lk;
  const auto [q, k, v, mk] = cuda_attention_matrix(p, t);
  using std::exp;
  const T ninf = -static_cast<T>(INFINITY);
  T k_row[cuda_attention_max_dim], v_row[cuda_attention_max_dim];
  T dk[cuda_attention_max_dim], dv[cuda_attention_max_dim];
  for (int64_t c = 0; c < p.d; ++c) k_row[c] = active ? k[j * p.k.rs + c] : T(0), dk[c] = 0;
  for (int64_t c = 0; c < p.dv; ++c) v_row[c] = active ? v[j * p.v.rs + c] : T(0), dv[c] = 0;
  // Under the causal rule no query before this block's first key sees it.
  const int64_t first = p.causal ? int64_t{blockIdx.y} * cuda_attention_rows : 0;
  for (int64_t i0 = first < p.lq ? first : p.lq; i0 < p.lq; i0 += cuda_attention_tile) {
    const int n = cuda_attention_tile_rows(p.lq, i0);
    __syncthreads();
    cuda_attention_load(qs, q, p.q.rs, i0, n, p.d);
    cuda_attention_load(gs, g.grad_out + t * p.lq * p.dv, p.dv, i0, n, p.dv);
    for (int e = threadIdx.x; e < n; e += blockDim.x)
      ls[e] = p.lse[t * p.lq + i0 + e], ds_[e] = delta[t * p.lq + i0 + e];
    __syncthreads();
    if (!active) continue;
    for (int ii = 0; ii < n; ++ii) {
      if (ls[ii] == ninf) continue;
      const T* qr = qs + ii * cuda_attention_max_dim;
      const T* gr = gs + ii * cuda_attention_max_dim;
      const T s = cuda_attention_score(p, mk, i0 + ii, j, qr, k_row);
      if (s == ninf) continue;
      const T pij = exp(s - ls[ii]);
      T dp = 0;
      for (int64_t c = 0; c < p.dv; ++c) dp += gr[c] * v_row[c], dv[c] += pij * gr[c];
      const T dsv = pij * (dp - ds_[ii]) * p.scale;
      for (int64_t c = 0; c < p.d; ++c) dk[c] += dsv * qr[c];
    }
  }
  if (!active) return;
  for (int64_t c = 0; c < p.d; ++c) g.dk[(t * p.lk + j) * p.d + c] = dk[c];
  for (int64_t c = 0; c < p.dv; ++c) g.dv[(t * p.lk + j) * p.dv + c] = dv[c];
}

}  // namespace detail

namespace backend {

template <>
struct attention_kernel<cuda> {
  /// Head sizes these kernels take; larger ones run as matmul, softmax and matmul.
  static bool supports(int64_t d, int64_t dv) {
    return d <= detail::cuda_attention_max_dim && dv <= detail::cuda_attention_max_dim;
  }
  template <class T>
  static void forward(const detail::attention_problem<T>& p) {
    // Matrices along x (up to 2^31 - 1 blocks), row blocks along y.
    const dim3 grid(static_cast<unsigned>(p.batch),
                    static_cast<unsigned>((p.lq + detail::cuda_attention_rows - 1) /
                                          detail::cuda_attention_rows));
    detail::cuda_launch("cuda_attention_forward", detail::cuda_attention_forward<T>, grid,
                        dim3(detail::cuda_attention_rows), p);
  }
  template <class T>
  static void backward(const detail::attention_backward_problem<T>& g) {
    const detail::attention_problem<T>& p = g.fwd;
    const int64_t rows = p.batch * p.lq;
    T* delta = static_cast<T*>(memory<cuda>::allocate(sizeof(T) * static_cast<size_t>(rows)));
    constexpr int R = detail::cuda_attention_rows;
    detail::cuda_launch("cuda_attention_delta", detail::cuda_attention_delta<T>,
                        dim3(static_cast<unsigned>((rows + 255) / 256)), dim3(256), g, delta);
    const unsigned batch = static_cast<unsigned>(p.batch);
    detail::cuda_launch("cuda_attention_backward_q", detail::cuda_attention_backward_q<T>,
                        dim3(batch, static_cast<unsigned>((p.lq + R - 1) / R)), dim3(R), g,
                        static_cast<const T*>(delta));
    detail::cuda_launch("cuda_attention_backward_kv", detail::cuda_attention_backward_kv<T>,
                        dim3(batch, static_cast<unsigned>((p.lk + R - 1) / R)), dim3(R), g,
                        static_cast<const T*>(delta));
    memory<cuda>::deallocate(delta, sizeof(T) * static_cast<size_t>(rows));
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE
