// tessera/detail/layout.hpp - dimension coalescing shared by every backend's kernels.
#pragma once

#include <array>
#include <cstdint>

#include "../core/shape.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The iteration space of N operands of one shape: extents plus one stride list per operand,
/// with size-1 dims dropped and adjacent dims merged wherever every operand allows it. A
/// contiguous elementwise op over any rank becomes one flat loop; [N,C] + [C] becomes 2-D.
template <int N>
struct loop_nest {
  int rank = 0;
  int64_t shape[max_rank] = {};
  int64_t strides[N][max_rank] = {};

  loop_nest(const Shape& s, const std::array<const Strides*, N>& st) {
    for (int d = 0; d < s.rank(); ++d) {
      if (s[d] == 1) continue;
      shape[rank] = s[d];
      for (int k = 0; k < N; ++k) strides[k][rank] = (*st[k])[d];
      ++rank;
    }
    // Merge dim i into i+1 (outer into inner) when, for every operand, stepping the outer dim
    // once equals stepping the inner dim through its whole extent. (A view of an empty tensor
    // may hold strides whose product with an extent overflows: such dims do not merge.)
    int w = 0;
    for (int d = 1; d < rank; ++d) {
      bool merge = true;
      for (int k = 0; k < N; ++k) {
        int64_t through = 0;
        merge &=
            !__builtin_mul_overflow(strides[k][d], shape[d], &through) && strides[k][w] == through;
      }
      if (merge) {
        shape[w] *= shape[d];
        for (int k = 0; k < N; ++k) strides[k][w] = strides[k][d];
      } else {
        ++w;
        shape[w] = shape[d];
        for (int k = 0; k < N; ++k) strides[k][w] = strides[k][d];
      }
    }
    if (rank > 0) rank = w + 1;
  }
  int64_t inner() const { return rank ? shape[rank - 1] : 1; }
  int64_t outer() const {
    int64_t n = 1;
    for (int d = 0; d + 1 < rank; ++d) n *= shape[d];
    return n;
  }
  /// Offsets of operand k at the start of outer row `row` (row-major over dims 0..rank-2).
  void row_offsets(int64_t row, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t i = row % shape[d];
      row /= shape[d];
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }
};

/// The two iteration spaces of a reduction of `in` over its trailing dims [kept, rank) into
/// `out` (whose shape is in's first `kept` extents), each coalesced: the reduced positions of
/// one output (operand: the input) and the outputs (operands: input, output). Shared by every
/// backend's reduce_kernel.
struct reduction_layout {
  loop_nest<1> reduced;
  loop_nest<2> outputs;
  int64_t count;  // elements per reduction

  reduction_layout(const Shape& in_shape, const Strides& in_strides, int kept,
                   const Shape& out_shape, const Strides& out_strides)
      : reduction_layout(split(in_shape, in_strides, kept), out_shape, out_strides) {}

 private:
  struct parts {
    Shape reduced_shape;
    Strides reduced_strides, kept_strides;
  };
  static parts split(const Shape& s, const Strides& st, int kept) {
    parts p;
    for (int d = kept; d < s.rank(); ++d)
      p.reduced_shape.push_back(s[d]), p.reduced_strides.push_back(st[d]);
    for (int d = 0; d < kept; ++d) p.kept_strides.push_back(st[d]);
    return p;
  }
  reduction_layout(const parts& p, const Shape& out_shape, const Strides& out_strides)
      : reduced(p.reduced_shape, {&p.reduced_strides}),
        outputs(out_shape, {&p.kept_strides, &out_strides}),
        count(p.reduced_shape.numel()) {}
};

}  // namespace detail
TESSERA_END_NAMESPACE
