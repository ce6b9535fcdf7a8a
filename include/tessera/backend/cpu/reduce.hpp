// tessera/backend/cpu/reduce.hpp - the CPU reduction kernel: any set of axes, accurate
// (blocked + pairwise) and deterministic for any thread count.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <memory>
#include <vector>

#include "../../core/storage.hpp"
#include "../../kernel/functors.hpp"
#include "../../kernel/layout.hpp"
#include "parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Highest set bit of a nonzero cascade occupancy mask (the level holding the earliest blocks).
inline int top_level(uint64_t used) { return 63 - __builtin_clzll(used); }

/// Pairwise combination of a stream of partial results in O(log n) space: a binary counter
/// whose level l holds the combination of 2^l consecutive blocks. Rounding error then grows
/// with log(blocks), and the result depends only on the block sequence, never on threads.
template <class R>
struct cascade {
  using Acc = typename R::acc_type;
  const R& red;
  Acc slot[64];
  uint64_t used = 0;
  explicit cascade(const R& r) : red(r) {}
  void push(Acc v) {
    int l = 0;
    for (; used >> l & 1; ++l) {
      v = red.combine(slot[l], v);
      used &= ~(uint64_t{1} << l);
    }
    slot[l] = v;
    used |= uint64_t{1} << l;
  }
  Acc result() const {
    Acc r = red.identity();
    for (uint64_t u = used; u; u &= ~(uint64_t{1} << top_level(u)))
      r = red.combine(r, slot[top_level(u)]);
    return r;
  }
};

/// The reduced index space: coalesced extents/strides of the reduced dims of the input.
struct reduced_space {
  const loop_nest<1>& nest;
  int64_t count;
};

inline constexpr int reduce_lanes = 32;  // independent accumulators (four AVX2 registers)
inline constexpr int reduce_run = 8;     // elements a lane adds before the lanes are folded
inline constexpr int reduce_chunk = reduce_lanes * reduce_run;  // 256 elements per folded partial
inline constexpr int64_t reduce_block =
    65536;  // elements per parallel work item (256 KiB of floats)

/// True when R reduces In with SIMD packs on this build (R::simd and vstep/vcombine).
template <class R, class In>
constexpr bool simd_reducer() {
  if constexpr (!fn::simd_of<R>())
    return false;
  else
    return simd::available<In>;
}

/// One chunk of 256 elements at q with stride s: 32 interleaved lanes (kept in registers and
/// vectorized by the compiler when the reducer is simple) that each add 8 elements, folded
/// pairwise.
template <class R, class In, int Runs = reduce_run>
TESSERA_ALWAYS_INLINE typename R::acc_type reduce_chunk_of(const R& red, const In* q, int64_t s,
                                                           int64_t t, int runs = Runs) {
  using Acc = typename R::acc_type;
  Acc acc[reduce_lanes];
  for (auto& a : acc) a = red.identity();
  if (s == 1 && runs == Runs) {
    for (int r = 0; r < Runs; ++r)
      for (int j = 0; j < reduce_lanes; ++j)
        acc[j] = red.step(acc[j], q[r * reduce_lanes + j], t + r * reduce_lanes + j);
  } else {
    for (int r = 0; r < runs; ++r)
      for (int j = 0; j < reduce_lanes; ++j)
        acc[j] = red.step(acc[j], q[(r * reduce_lanes + j) * s], t + r * reduce_lanes + j);
  }
  for (int w = reduce_lanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = red.combine(acc[j], acc[j + w]);
  return acc[0];
}

/// Partial results of contiguous chunks for reducers with a SIMD step: each 256-element chunk
/// is reduced in four native vectors and pushed, still a vector, into a cascade of vectors, so
/// the horizontal fold happens once per block instead of once per chunk (that per-chunk scalar
/// work held the out-of-cache sum to ~0.85x of Eigen's). The primary template is the disabled
/// case for every other reducer.
template <class R, class In>
struct simd_partials {
  static constexpr bool enabled = false;
  explicit simd_partials(const R&) {}
};
template <class R, class In>
requires(simd_reducer<R, In>()) struct simd_partials<R, In> {
  using V = simd::vec<In>;
  static constexpr bool enabled = true;
  static constexpr int step = 4 * V::width;
  static_assert(reduce_chunk % step == 0);
  const R& red;
  V slot[64];
  uint64_t used = 0;
  explicit simd_partials(const R& r) : red(r) {}
  TESSERA_ISA_FLATTEN void add_chunk(const In* q) {
    const V id = V::broadcast(red.identity());
    V a0 = id, a1 = id, a2 = id, a3 = id;
    for (int i = 0; i < reduce_chunk; i += step) {
      a0 = red.vstep(a0, V::load(q + i));
      a1 = red.vstep(a1, V::load(q + i + V::width));
      a2 = red.vstep(a2, V::load(q + i + 2 * V::width));
      a3 = red.vstep(a3, V::load(q + i + 3 * V::width));
    }
    V v = red.vcombine(red.vcombine(a0, a1), red.vcombine(a2, a3));
    int l = 0;
    for (; used >> l & 1; ++l) {
      v = red.vcombine(slot[l], v);
      used &= ~(uint64_t{1} << l);
    }
    slot[l] = v;
    used |= uint64_t{1} << l;
  }
  bool empty() const { return used == 0; }
  TESSERA_ISA_FLATTEN typename R::acc_type result() const {
    V r = V::broadcast(red.identity());
    for (uint64_t u = used; u; u &= ~(uint64_t{1} << top_level(u)))
      r = red.vcombine(r, slot[top_level(u)]);
    typename R::acc_type lanes[V::width];
    r.store(lanes);
    for (int w = V::width / 2; w >= 1; w /= 2)
      for (int j = 0; j < w; ++j) lanes[j] = red.combine(lanes[j], lanes[j + w]);
    return lanes[0];
  }
};

/// Reduces elements [t0, t1) of the reduced space of one output (base pointer p) into one
/// accumulator: full 256-element chunks of each row go through reduce_chunk_of, the rest (row
/// tails shorter than a chunk) into a side accumulator folded every 256 elements; all partials
/// meet in a cascade. Sequential rounding error thus stays below ~8 ulp plus log2(n).
template <class R, class In>
typename R::acc_type reduce_block_range(const R& red, const In* p, const reduced_space& rs,
                                        int64_t t0, int64_t t1) {
  using Acc = typename R::acc_type;
  const auto& n = rs.nest;
  const int64_t L = n.inner(), sL = n.rank ? n.strides[0][n.rank - 1] : 1;
  Acc tail = red.identity();
  int tail_n = 0;
  cascade<R> c(red);
  simd_partials<R, In> vp(red);
  int64_t t = t0;
  while (t < t1) {
    // Position t in the reduced space: row (outer index) and column within the row.
    const int64_t rrow = t / L, col = t % L;
    int64_t off[1];
    n.row_offsets(rrow, off);
    const In* q = p + off[0] + col * sL;
    const int64_t m = std::min(L - col, t1 - t);
    int64_t i = 0;
    if constexpr (simd_partials<R, In>::enabled) {
      if (sL == 1)
        for (; i + reduce_chunk <= m; i += reduce_chunk) vp.add_chunk(q + i);
    }
    for (; i + reduce_chunk <= m; i += reduce_chunk)
      c.push(reduce_chunk_of(red, q + i * sL, sL, t + i));
    if (const int runs = static_cast<int>((m - i) / reduce_lanes); runs > 0) {
      c.push(reduce_chunk_of(red, q + i * sL, sL, t + i, runs));
      i += runs * reduce_lanes;
    }
    for (; i < m; ++i) {
      tail = red.step(tail, q[i * sL], t + i);
      if (++tail_n == reduce_chunk) {
        c.push(tail);
        tail = red.identity();
        tail_n = 0;
      }
    }
    t += m;
  }
  if (tail_n) c.push(tail);
  if constexpr (simd_partials<R, In>::enabled) {
    if (!vp.empty()) c.push(vp.result());
  }
  return c.result();
}

/// Whole reduction of one output, serially, block by block through the cascade.
template <class R, class In>
typename R::acc_type reduce_serial(const R& red, const In* p, const reduced_space& rs) {
  if (rs.count <= reduce_block) return reduce_block_range(red, p, rs, 0, rs.count);
  cascade<R> c(red);
  for (int64_t t = 0; t < rs.count; t += reduce_block)
    c.push(reduce_block_range(red, p, rs, t, std::min(t + reduce_block, rs.count)));
  return c.result();
}

/// Column reduction: the innermost kept dim is contiguous in the input and the reduced dims
/// are outer to it (sum over rows of [N, C]). Accumulators are kept for a tile of columns so
/// the input streams through memory once; rows go in blocks of 16 through a per-column cascade.
/// `scratch` holds tile * (column_levels(count) + 1) accumulators.
inline constexpr int64_t column_max_tile = 2048, column_rows_per_block = 16;
inline int column_levels(int64_t count) {
  int l = 1;
  for (int64_t b = (count + column_rows_per_block - 1) / column_rows_per_block; b > 1;
       b = (b + 1) / 2)
    ++l;
  return l + 1;
}
/// part[j] = the reduction of rows[0..count)[j] for w columns (count <= column_rows_per_block;
/// index r0 is the first row's). Where the reducer has a SIMD step, each native vector of
/// columns goes down all the rows in a register (the scalar step's load and store of part per
/// row, and the NaN tests of max and min, which the compiler left scalar, held the inf-norm of
/// [4096, 1536] over its rows to 13 GB/s). Each column meets its rows in order either way.
template <class R, class In>
TESSERA_ISA_FLATTEN void reduce_column_block(const R& red, const In* const* rows, int count,
                                             typename R::acc_type* part, int64_t w, int64_t r0) {
  int64_t j = 0;
  if constexpr (simd_reducer<R, In>() && std::is_same_v<typename R::acc_type, In>) {
    using V = simd::vec<In>;
    const V id = V::broadcast(red.identity());
    for (; j + V::width <= w; j += V::width) {
      V a = id;
      for (int i = 0; i < count; ++i) a = red.vstep(a, V::load(rows[i] + j));
      a.store(part + j);
    }
  }
  for (int64_t t = j; t < w; ++t) part[t] = red.identity();
  for (int i = 0; i < count; ++i) {
    const In* q = rows[i];
    TESSERA_OMP_SIMD()
    for (int64_t t = j; t < w; ++t) part[t] = red.step(part[t], q[t], r0 + i);
  }
}

/// out[j] = combine(x[j], y[j]) for w columns, in native vectors where the reducer has them.
template <class R>
TESSERA_ISA_FLATTEN void combine_columns(const R& red, const typename R::acc_type* x,
                                         const typename R::acc_type* y, typename R::acc_type* out,
                                         int64_t w) {
  using Acc = typename R::acc_type;
  int64_t j = 0;
  if constexpr (simd_reducer<R, Acc>()) {
    using V = simd::vec<Acc>;
    for (; j + V::width <= w; j += V::width)
      red.vcombine(V::load(x + j), V::load(y + j)).store(out + j);
  }
  for (; j < w; ++j) out[j] = red.combine(x[j], y[j]);
}

template <class R, class In, class Out>
void reduce_columns(const R& red, const In* p, int64_t ncols, int64_t tile, const reduced_space& rs,
                    Out* o, int64_t so, typename R::acc_type* scratch) {
  using Acc = typename R::acc_type;
  const auto& n = rs.nest;
  const int64_t nblocks = (rs.count + column_rows_per_block - 1) / column_rows_per_block;
  Acc* part = scratch;
  Acc* slot = part + tile;  // cascade levels of a tile each
  for (int64_t c0 = 0; c0 < ncols; c0 += tile) {
    const int64_t w = std::min(tile, ncols - c0);
    uint64_t used = 0;
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t r0 = b * column_rows_per_block;
      const int count = static_cast<int>(std::min(rs.count, r0 + column_rows_per_block) - r0);
      const In* rows[column_rows_per_block];
      for (int i = 0; i < count; ++i) {
        int64_t off = 0;
        for (int64_t t = r0 + i, d = n.rank - 1; d >= 0; --d) {
          off += (t % n.shape[d]) * n.strides[0][d];
          t /= n.shape[d];
        }
        rows[i] = p + off + c0;
      }
      reduce_column_block(red, rows, count, part, w, r0);
      if (nblocks == 1) break;
      int l = 0;
      for (; used >> l & 1; ++l) {
        combine_columns(red, slot + l * tile, part, part, w);
        used &= ~(uint64_t{1} << l);
      }
      for (int64_t j = 0; j < w; ++j) slot[l * tile + j] = part[j];
      used |= uint64_t{1} << l;
    }
    if (nblocks > 1) {
      for (int64_t j = 0; j < w; ++j) part[j] = red.identity();
      for (uint64_t u = used; u; u &= ~(uint64_t{1} << top_level(u)))
        combine_columns(red, part, slot + top_level(u) * tile, part, w);
    }
    for (int64_t j = 0; j < w; ++j) o[(c0 + j) * so] = red.finish(part[j]);
  }
}

}  // namespace detail

namespace backend {

struct cpu_reduce {
  /// Reduces `in` over its trailing dims [kept, rank) into out (whose shape is in's first `kept`
  /// extents), with reducer R: acc_type, identity(), step(acc, x, index), combine(a, b),
  /// finish(acc) -> Out. `index` is the element's row-major position in the reduced dims.
  template <class R, class In, class Out>
  static void run(const R& red, detail::strided<const In> in, int kept, detail::strided<Out> out) {
    const int64_t nout = out.shape.numel();
    if (nout == 0) return;
    const detail::reduction_layout lay(in.shape, in.strides, kept, out.shape, out.strides);
    const detail::reduced_space rs{lay.reduced, lay.count};
    const detail::loop_nest<2>& outs = lay.outputs;
    const int64_t K = rs.count;
    const int64_t inner_kept = outs.inner(),
                  sin_kept = outs.rank ? outs.strides[0][outs.rank - 1] : 0;
    const int64_t sL = rs.nest.rank ? rs.nest.strides[0][rs.nest.rank - 1] : 1;

    // Column path: contiguous kept columns, reduced dims strided (sum over rows of [N, C]).
    if (K > 0 && sin_kept == 1 && inner_kept >= 16 && sL != 1) {
      // Wide tiles stream long contiguous row segments (prefetch- and TLB-friendly); narrower
      // ones when needed so every thread gets a tile.
      const int64_t per_thread = (inner_kept + get_num_threads() - 1) / get_num_threads();
      const int64_t tile =
          std::clamp<int64_t>((per_thread + 15) / 16 * 16, 16, detail::column_max_tile);
      const int64_t rows = outs.outer();
      const int64_t tiles = (inner_kept + tile - 1) / tile;
      const size_t scratch = static_cast<size_t>(tile * (detail::column_levels(K) + 1));
      detail::parallel_for(rows * tiles, tile * K, [&](int64_t b, int64_t e) {
        std::unique_ptr<typename R::acc_type[]> buf(new typename R::acc_type[scratch]);
        for (int64_t i = b; i < e; ++i) {
          const int64_t r = i / tiles, c0 = (i % tiles) * tile;
          int64_t off[2];
          outs.row_offsets(r, off);
          const int64_t so = outs.strides[1][outs.rank - 1];
          detail::reduce_columns(red, in.data + off[0] + c0,
                                 std::min<int64_t>(tile, inner_kept - c0), tile, rs,
                                 out.data + off[1] + c0 * so, so, buf.get());
        }
      });
      return;
    }
    auto out_offsets = [&](int64_t o, int64_t(&off)[2]) {
      const int64_t L = outs.inner();
      outs.row_offsets(o / L, off);
      const int64_t c = o % L;
      if (outs.rank)
        off[0] += c * outs.strides[0][outs.rank - 1], off[1] += c * outs.strides[1][outs.rank - 1];
    };
    // Enough outputs to share among threads: each output reduced serially.
    if (nout >= 4 * get_num_threads() || K < 2 * detail::parallel_grain) {
      detail::parallel_for(nout, K, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          int64_t off[2];
          out_offsets(o, off);
          out.data[off[1]] =
              red.finish(K ? detail::reduce_serial(red, in.data + off[0], rs) : red.identity());
        }
      });
      return;
    }
    // Few outputs, long reductions: fixed-size blocks in parallel, combined in order.
    const int64_t nblocks = (K + detail::reduce_block - 1) / detail::reduce_block;
    std::vector<typename R::acc_type> parts(static_cast<size_t>(nblocks));
    for (int64_t o = 0; o < nout; ++o) {
      int64_t off[2];
      out_offsets(o, off);
      detail::parallel_for(nblocks, detail::reduce_block, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          parts[i] = detail::reduce_block_range(red, in.data + off[0], rs, i * detail::reduce_block,
                                                std::min(K, (i + 1) * detail::reduce_block));
      });
      detail::cascade<R> c(red);
      for (auto& v : parts) c.push(v);
      out.data[off[1]] = red.finish(c.result());
    }
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE
