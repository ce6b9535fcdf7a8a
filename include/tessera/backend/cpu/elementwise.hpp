// tessera/backend/cpu/elementwise.hpp - the CPU map kernel: n-ary elementwise over broadcast
// strided operands, SIMD where the functor allows it, OpenMP over large work.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "../../core/storage.hpp"
#include "../../kernel/functors.hpp"
#include "../../kernel/layout.hpp"
#include "parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// True when map may call F on SIMD packs of T: F opts in with `static constexpr bool simd =
/// true` (the library's functors, or user code through tessera::vectorized) and accepts packs
/// for every operand. Generic user lambdas are never probed, because instantiating one with a
/// pack type it cannot handle is a hard error, not a substitution failure.
template <class F, class Out, class... In>
constexpr bool simd_callable() {
  if constexpr (!fn::simd_of<F>() || !(std::is_same_v<In, Out> && ...))
    return false;
  else if constexpr (!simd::available<Out>)
    return false;
  else
    return std::is_same_v<
        std::invoke_result_t<const F&, decltype((void)sizeof(In), simd::vec<Out>{})...>,
        simd::vec<Out>>;
}

/// Outputs at least this large are written with non-temporal (streaming) stores: they cannot
/// stay in a typical last-level cache anyway, and streaming saves the read-for-ownership of
/// every destination line (a quarter of the traffic of z = a*x + y, a third of y = exp(x)).
inline constexpr size_t stream_store_bytes = size_t{32} << 20;

template <class T>
bool misaligned_for_stream(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(simd::vec<T>) != 0;
}

/// Contiguous row through a scalar functor, streamed: blocks are computed into an L1-resident
/// buffer by the (compiler-vectorized) plain loop, then copied out with streaming stores.
template <class Out, class F, class... In, size_t... K>
TESSERA_ISA_FLATTEN void map_row_streamed(const F& f, Out* o, int64_t len,
                                          std::index_sequence<K...>, const In*... p) {
  using V = simd::vec<Out>;
  constexpr int block = 256;
  alignas(64) Out buf[block];
  int64_t i = 0;
  for (; i < len && misaligned_for_stream(o + i); ++i) o[i] = static_cast<Out>(f(p[i]...));
  for (; i + block <= len; i += block) {
    TESSERA_OMP_SIMD()
    for (int j = 0; j < block; ++j) buf[j] = static_cast<Out>(f(p[i + j]...));
    for (int j = 0; j < block; j += V::width) V::load(buf + j).stream(o + i + j);
  }
  for (; i < len; ++i) o[i] = static_cast<Out>(f(p[i]...));
}

/// One row of the iteration space: out[i*so] = f(in_k[i*s_k]...), i in [0, len). `stream`
/// asks for non-temporal stores where the row is contiguous.
template <class Out, class F, class... In, size_t... K>
TESSERA_ISA_FLATTEN void map_row(const F& f, Out* o, int64_t so, const int64_t* s, int64_t len,
                                 bool stream, std::index_sequence<K...> seq, const In*... p) {
  if constexpr (simd_callable<F, Out, In...>()) {
    using V = simd::vec<Out>;
    if (so == 1 && ((s[K] == 0 || s[K] == 1) && ...)) {
      int64_t i = 0;
      // A stride-0 operand is one value for the whole row: broadcast it once.
      const V bc[] = {V::broadcast(*p)..., V::broadcast(Out{})};
      if (stream) {
        for (; i < len && misaligned_for_stream(o + i); ++i)
          o[i] = static_cast<Out>(f(p[i * s[K]]...));
        for (; i + V::width <= len; i += V::width)
          f((s[K] ? V::load(p + i) : bc[K])...).stream(o + i);
      }
      for (; i + V::width <= len; i += V::width) {
        const V r = f((s[K] ? V::load(p + i) : bc[K])...);
        r.store(o + i);
      }
      for (; i < len; ++i) o[i] = static_cast<Out>(f(p[i * s[K]]...));
      return;
    }
  }
  if (so == 1 && ((s[K] == 1) && ...)) {
    if constexpr (simd::available<Out>) {
      if (stream) return map_row_streamed<Out>(f, o, len, seq, p...);
    }
    TESSERA_OMP_SIMD()
    for (int64_t i = 0; i < len; ++i) o[i] = static_cast<Out>(f(p[i]...));
  } else if (so == 1 && ((s[K] == 0 || s[K] == 1) && ...) && len >= 16) {
    // Some operands are one value for the whole row (a per-channel scale over an image plane):
    // each is spread into a small buffer once, so that the loop reads every operand
    // contiguously and the compiler can vectorize it (a stride known only at run time stops it).
    constexpr int64_t block = 128;
    std::tuple<std::array<In, block>...> spread;
    ((s[K] == 0 ? std::get<K>(spread).fill(*p) : void()), ...);
    // A local copy of a plain functor: its members stay in registers across the stores.
    std::conditional_t<std::is_trivially_copyable_v<F>, const F, const F&> g = f;
    for (int64_t i = 0; i < len; i += block) {
      const int64_t n = std::min(block, len - i);
      Out* dst = o + i;
      const std::tuple<const In*...> q{(s[K] ? p + i : std::get<K>(spread).data())...};
      TESSERA_OMP_SIMD()
      for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<Out>(g(std::get<K>(q)[j]...));
    }
  } else {
    for (int64_t i = 0; i < len; ++i) o[i * so] = static_cast<Out>(f(p[i * s[K]]...));
  }
}

}  // namespace detail

namespace backend {

struct cpu_map {
  /// out[i] = static_cast<Out>(f(i)) for i < n over contiguous out: values from their index
  /// alone (the dropout mask's counter-based random numbers), split across threads when large.
  template <class Out, class F>
  static void generate(const F& f, Out* out, int64_t n) {
    detail::parallel_for(n, 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = static_cast<Out>(f(i));
    });
  }

  /// out[i] = static_cast<Out>(f(in[i]...)) over out's shape; inputs arrive broadcast to it.
  /// Rows of the coalesced iteration space are split across threads when the work is large.
  template <class Out, class F, class... In>
  static void run(const F& f, detail::strided<Out> out, detail::strided<const In>... in) {
    constexpr int N = 1 + sizeof...(In);
    if (out.shape.numel() == 0) return;
    const detail::loop_nest<N> nest(out.shape, {&out.strides, &in.strides...});
    const int64_t len = nest.inner(), rows = nest.outer();
    const int64_t so = nest.rank ? nest.strides[0][nest.rank - 1] : 1;
    int64_t s[N > 1 ? N - 1 : 1] = {};
    for (int k = 1; k < N; ++k) s[k - 1] = nest.rank ? nest.strides[k][nest.rank - 1] : 1;
    constexpr int cost = fn::cost_of<F>();
    constexpr auto seq = std::index_sequence_for<In...>{};
    // Streaming pays only where memory is the bottleneck: not for transcendental functors
    // (measured: tanh slower with streaming stores, exp unchanged).
    const bool stream =
        detail::simd::available<Out> && cost <= 2 &&
        static_cast<size_t>(out.shape.numel()) * sizeof(Out) >= detail::stream_store_bytes;
    // Pointers of every operand advanced by `off` elements, expanded in lockstep with In.
    auto row = [&]<size_t... K>(std::index_sequence<K...>, int64_t off_out, const int64_t* off_in,
                                int64_t n) {
      detail::map_row<Out>(f, out.data + off_out, so, s, n, stream, seq, (in.data + off_in[K])...);
    };
    if (rows == 1) {
      detail::parallel_for(len, cost, [&](int64_t b, int64_t e) {
        int64_t off[N > 1 ? N - 1 : 1];
        for (int k = 0; k + 1 < N; ++k) off[k] = b * s[k];
        row(seq, b * so, off, e - b);
        if (stream) detail::simd::stream_fence();
      });
      return;
    }
    detail::parallel_for(rows, len * cost, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t off[N];
        nest.row_offsets(r, off);
        row(seq, off[0], off + 1, len);
      }
      if (stream) detail::simd::stream_fence();
    });
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE
