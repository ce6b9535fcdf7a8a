// tessera/backend/cpu/pool.hpp - the CPU pooling kernels: max, average and adaptive average
// pooling over contiguous NCHW planes, forward and backward.
//
// Forward work is split over output rows of all planes (so one large image still uses every
// thread); backward over planes (windows may overlap, and user indices may point anywhere in
// their plane). Windows along each axis are tabulated once per call (pool_window_of).
//
// Paths, for every dtype: max pooling with indices scans each window in row-major order and
// keeps the first maximum (a NaN always wins, the last NaN stays), exactly PyTorch's rule.
// Without indices, and for average pooling, windows are separable: the rows of one output row's
// window are combined elementwise first (simd::vec for float and double), then each output
// combines its columns. Average pooling sums in float (double for double); every path adds in
// the same order (rows, then columns), so results do not depend on the path or thread count.
//
// Float fast paths (AVX-512, else AVX2 + FMA): windows 2 or 3 wide with stride 2 (2x2/2,
// ResNet's 3x3/2 pad 1, ...) are computed directly, 16 (8) outputs per step, indices included:
// even and odd columns are split with permutes, the third tap is the even columns moved one
// lane. Output rows whose windows are not clipped run back to back, across planes when the
// planes tile exactly (2x2/2 on even sizes); only the clipped border outputs take the scalar
// path. Global average pooling is a sum per plane (16 small planes per step on AVX-512). Max
// backward of 2x2/2-shaped indices writes each window directly (AVX-512) instead of zero-filling
// and scattering; anything else scatters.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/backend.hpp"
#include "../../core/dtype.hpp"
#include "../../kernel/pool_problem.hpp"
#include "parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Type max pooling compares in: float for the low-precision formats, T otherwise.
template <class T>
using pool_max_t = compute_t<T>;
/// Type average pooling sums in: double for double, float for the other floating types.
template <class T>
using pool_sum_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class V>
TESSERA_ALWAYS_INLINE bool pool_isnan(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return v != v;
  else
    return false;
}
/// Maximum that is NaN when either input is NaN.
template <class V>
TESSERA_ALWAYS_INLINE V pool_max(V a, V b) {
  return (a >= b || pool_isnan(a)) ? a : b;
}

/// Windows along one axis for every output position.
inline std::vector<pool_window> pool_windows(int64_t out, int64_t in, int64_t k, int64_t s,
                                             int64_t p, int64_t d, bool count_include_pad) {
  std::vector<pool_window> v(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) v[o] = pool_window_of(o, in, k, s, p, d, count_include_pad);
  return v;
}
inline std::vector<pool_window> adaptive_windows(int64_t out, int64_t in) {
  std::vector<pool_window> v(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) v[o] = adaptive_window_of(o, in, out);
  return v;
}

/// out[x] = a[x] op b[x] for x < w, op = NaN-propagating max or +, in A.
template <bool Max, class A, class Sa, class Sb>
TESSERA_ALWAYS_INLINE void pool_combine(const Sa* a, const Sb* b, A* out, int64_t w) {
  int64_t x = 0;
  if constexpr (std::is_same_v<Sa, A> && std::is_same_v<Sb, A> && simd::available<A>) {
    using V = simd::vec<A>;
    for (; x + V::width <= w; x += V::width) {
      const V va = V::load(a + x), vb = V::load(b + x);
      if constexpr (Max)
        simd::max(va, vb).store(out + x);
      else
        (va + vb).store(out + x);
    }
  }
  for (; x < w; ++x) {
    const A va = static_cast<A>(a[x]), vb = static_cast<A>(b[x]);
    out[x] = Max ? pool_max(va, vb) : va + vb;
  }
}

/// buf[x] = the maximum or the sum over rows r0, r0 + dr, ... < r1 of plane xp (width w), in
/// row order (buf holds w elements of A).
template <bool Max, class T, class A>
void pool_reduce_rows(const T* xp, int64_t w, int64_t r0, int64_t r1, int64_t dr, A* buf) {
  const T* first = xp + r0 * w;
  int64_t r = r0 + dr;
  if (r < r1) {
    pool_combine<Max>(first, xp + r * w, buf, w);
    r += dr;
  } else if constexpr (std::is_same_v<T, A>) {
    std::memcpy(buf, first, static_cast<size_t>(w) * sizeof(A));
  } else {
    for (int64_t x = 0; x < w; ++x) buf[x] = static_cast<A>(first[x]);
  }
  for (; r < r1; r += dr) pool_combine<Max>(buf, xp + r * w, buf, w);
}

/// Outputs [ox0, ox1) of one output row from its rows' combination buf: each combines the
/// columns of its window (max, or sum divided by the window's divisor).
template <bool Max, class T, class A>
void pool_reduce_cols(const A* buf, const pool_window* cw, int64_t dw, int64_t row_count,
                      int64_t ox0, int64_t ox1, T* y) {
  for (int64_t ox = ox0; ox < ox1; ++ox) {
    const pool_window& c = cw[ox];
    A acc = buf[c.begin];
    for (int64_t col = c.begin + dw; col < c.end; col += dw)
      acc = Max ? pool_max(acc, buf[col]) : acc + buf[col];
    if constexpr (!Max) acc = acc / static_cast<A>(row_count * c.count);
    y[ox] = static_cast<T>(acc);
  }
}

/// One max-pooling output by a row-major scan of its window: the first maximum, or the last NaN
/// (PyTorch's update rule `v > max || isnan(v)`). Writes the flat plane index when idx is set.
template <class T>
TESSERA_ALWAYS_INLINE void pool_max_at(const T* xp, int64_t w, const pool_window& r,
                                       const pool_window& c, int64_t dh, int64_t dw, T* y,
                                       int64_t* idx) {
  using V = pool_max_t<T>;
  int64_t best = r.begin * w + c.begin;
  V m = static_cast<V>(xp[best]);
  for (int64_t row = r.begin; row < r.end; row += dh)
    for (int64_t col = c.begin; col < c.end; col += dw) {
      const V v = static_cast<V>(xp[row * w + col]);
      const bool take = v > m || pool_isnan(v);  // written as selects: random data mispredicts
      m = take ? v : m;
      best = take ? row * w + col : best;
    }
  *y = xp[best];
  if (idx) *idx = best;
}

/// One average-pooling output, summed in the separable order of the vector paths (each column's
/// rows first, then the columns), so that every path rounds alike.
template <class T>
TESSERA_ALWAYS_INLINE void pool_avg_at(const T* xp, int64_t w, const pool_window& r,
                                       const pool_window& c, T* y) {
  using A = pool_sum_t<T>;
  A acc = 0;
  for (int64_t col = c.begin; col < c.end; ++col) {
    A s = static_cast<A>(xp[r.begin * w + col]);
    for (int64_t row = r.begin + 1; row < r.end; ++row) s += static_cast<A>(xp[row * w + col]);
    acc = col == c.begin ? s : acc + s;
  }
  *y = static_cast<T>(acc / static_cast<A>(r.count * c.count));
}

/// What a direct vector kernel computes.
enum class pool_vec_mode { max_values, max_indices, average };

/// A run of n output rows for the direct stride-2 kernels, each nout outputs whose windows lie
/// inside the plane's columns. Row i's first window column is p + i * row_step; a window's rows
/// are rstride apart (`rows` of them); outputs go to y + i * ow (and idx + i * ow). `base` is the
/// flat plane index of p; it advances with the rows and drops by plane_elems each time a run that
/// spans planes crosses into the next one (after plane_rows rows, counting from first_row).
struct pool_s2_run {
  const float* p = nullptr;
  int64_t n = 0, row_step = 0, rstride = 0, rows = 0;
  int64_t base = 0, plane_rows = std::numeric_limits<int64_t>::max(), first_row = 0,
          plane_elems = 0;
  int64_t nout = 0;
  float divisor = 1;
  float* y = nullptr;
  int64_t ow = 0;
  int64_t* idx = nullptr;
};

}  // namespace detail
TESSERA_END_NAMESPACE

#include "simd/pool_x86.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
namespace pool_simd {

/// Runs g with the compile-time window width kw (2 or 3) and row count (2, 3 or any).
template <mode M>
void run_s2(int64_t kw, const pool_s2_run& g) {
  auto with_rows = [&]<int KW>() {
    if (g.rows == 2)
      rows_run<KW, M, 2>(g);
    else if (g.rows == 3)
      rows_run<KW, M, 3>(g);
    else
      rows_run<KW, M, 0>(g);
  };
  if (kw == 2)
    with_rows.template operator()<2>();
  else
    with_rows.template operator()<3>();
}

/// Output rows [oy0, oy1) of one plane, outputs [ox0, ox1) of each: output row oy reads rows
/// rw[oy] (step dh) of plane xp, its output k the columns 2k - pw .. 2k - pw + kw - 1, all inside
/// the plane. Rows whose windows are not clipped form one run (each sh input rows further on);
/// clipped rows at either end go one at a time. y and idx point at the output plane (rows of
/// ow). For max_indices the plane must have fewer than 2^31 elements (int32 index lanes).
template <mode M>
void rows_s2(int64_t kw, const float* xp, int64_t w, const pool_window* rw, int64_t oy0,
             int64_t oy1, int64_t kh, int64_t sh, int64_t dh, int64_t pw, int64_t ox0, int64_t ox1,
             int64_t ow, float* y, int64_t* idx) {
  const int64_t span = (kh - 1) * dh + 1;
  auto full = [&](int64_t oy) { return rw[oy].end - rw[oy].begin == span; };
  int64_t a = oy0, b = oy1;
  while (a < b && !full(a)) ++a;
  while (b > a && !full(b - 1)) --b;
  auto run = [&](int64_t from, int64_t to, int64_t row_step) {
    const pool_window& r = rw[from];
    pool_s2_run g;
    const int64_t off = r.begin * w + 2 * ox0 - pw;
    g.p = xp + off, g.n = to - from, g.row_step = row_step, g.rstride = dh * w;
    g.rows = dh == 1 ? r.end - r.begin : (r.end - r.begin + dh - 1) / dh;
    g.base = off, g.nout = ox1 - ox0, g.divisor = static_cast<float>(r.count * kw);
    g.y = y + from * ow + ox0, g.ow = ow;
    if (M == mode::max_indices) g.idx = idx + from * ow + ox0;
    run_s2<M>(kw, g);
  };
  for (int64_t oy = oy0; oy < a; ++oy) run(oy, oy + 1, 0);
  if (a < b) run(a, b, sh * w);
  for (int64_t oy = b; oy < oy1; ++oy) run(oy, oy + 1, 0);
}

/// Whether every output row of every plane is one run: windows unclipped vertically (no top
/// padding, kernel span within the stride), planes exactly oh * sh rows tall (so the next
/// plane continues the stride), and the vector kernel taking whole rows.
inline bool pool_planes_uniform(const pool_problem& pr, int64_t lo, int64_t hi) {
  return hi > lo && lo == 0 && hi == pr.ow && pr.ph == 0 && pr.h == pr.oh * pr.sh &&
         (pr.kh - 1) * pr.dh + 1 <= pr.sh;
}

/// Output rows [b, e) counted over all planes as one run (pool_planes_uniform geometry).
template <mode M>
void rows_uniform(const pool_problem& pr, const float* x, int64_t b, int64_t e, float* y,
                  int64_t* idx) {
  pool_s2_run g;
  g.p = x + b * pr.sh * pr.w, g.n = e - b, g.row_step = pr.sh * pr.w, g.rstride = pr.dh * pr.w;
  g.rows = pr.kh, g.first_row = b % pr.oh, g.base = g.first_row * pr.sh * pr.w;
  g.plane_rows = pr.oh, g.plane_elems = pr.h * pr.w;
  g.nout = pr.ow, g.divisor = static_cast<float>(pr.kh * pr.kw);
  g.y = y + b * pr.ow, g.ow = pr.ow;
  if (M == mode::max_indices) g.idx = idx + b * pr.ow;
  run_s2<M>(pr.kw, g);
}

}  // namespace pool_simd
#endif

/// Outputs [lo, hi) of every row whose windows are 2 or 3 wide with stride 2 and dilation 1 and
/// lie inside the plane's columns: the range the vector row kernels may take. Empty ({0, 0}) when
/// the geometry or T does not qualify.
template <class T>
std::pair<int64_t, int64_t> pool_vector_columns([[maybe_unused]] const pool_problem& pr,
                                                [[maybe_unused]] bool with_indices) {
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
  if constexpr (std::is_same_v<T, float>) {
    const bool fits = !with_indices || pr.h * pr.w <= std::numeric_limits<int32_t>::max();
    if (pr.sw == 2 && pr.dw == 1 && (pr.kw == 2 || pr.kw == 3) && fits &&
        pr.w - pr.kw + pr.pw >= 0) {
      const int64_t lo = std::min((pr.pw + 1) / 2, pr.ow);
      const int64_t hi = std::min((pr.w - pr.kw + pr.pw) / 2 + 1, pr.ow);
      if (hi - lo >= pool_simd::min_outputs) return {lo, hi};
    }
  }
#endif
  return {0, 0};
}

/// Runs body(plane, oy0, oy1, scratch) over every (plane, output row) pair, split among threads;
/// consecutive rows of one plane go to one call. Scratch is default-constructed once per thread.
template <class Scratch, class Body>
void pool_for_rows(const pool_problem& pr, int64_t cost_per_row, const Body& body) {
  parallel_for(pr.planes * pr.oh, cost_per_row, [&](int64_t b, int64_t e) {
    Scratch scratch{};
    int64_t p = b / pr.oh, oy = b % pr.oh;
    for (int64_t i = b; i < e; ++p, oy = 0) {
      const int64_t n = std::min(e - i, pr.oh - oy);
      body(p, oy, oy + n, scratch);
      i += n;
    }
  });
}

template <class T>
void pool_max_forward(const pool_problem& pr, const T* x, T* y, int64_t* indices) {
  using A = pool_max_t<T>;
  const auto rw = pool_windows(pr.oh, pr.h, pr.kh, pr.sh, pr.ph, pr.dh, true);
  const auto cw = pool_windows(pr.ow, pr.w, pr.kw, pr.sw, pr.pw, pr.dw, true);
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  const auto vcols = pool_vector_columns<T>(pr, indices != nullptr);
  [[maybe_unused]] const int64_t vlo = vcols.first, vhi = vcols.second;
  const int64_t cost = pr.kh * (pr.w + pr.ow * pr.kw);
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
  if constexpr (std::is_same_v<T, float>) {
    if (pool_simd::pool_planes_uniform(pr, vlo,
                                       vhi)) {  // e.g. 2x2/2 on even sizes: one run per thread
      parallel_for(pr.planes * pr.oh, cost, [&](int64_t b, int64_t e) {
        using pool_simd::mode;
        if (indices)
          pool_simd::rows_uniform<mode::max_indices>(pr, x, b, e, y, indices);
        else
          pool_simd::rows_uniform<mode::max_values>(pr, x, b, e, y, nullptr);
      });
      return;
    }
  }
#endif
  pool_for_rows<std::vector<A>>(
      pr, cost, [&](int64_t p, int64_t oy0, int64_t oy1, std::vector<A>& buf) {
        const T* xp = x + p * hw;
        T* yp = y + p * ohw;
        int64_t* ip = indices ? indices + p * ohw : nullptr;
        int64_t lo = 0, hi = 0;  // the columns a vector kernel did
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
        if constexpr (std::is_same_v<T, float>) {
          using pool_simd::mode;
          if (vhi > vlo) {
            if (ip)
              pool_simd::rows_s2<mode::max_indices>(pr.kw, xp, pr.w, rw.data(), oy0, oy1, pr.kh,
                                                    pr.sh, pr.dh, pr.pw, vlo, vhi, pr.ow, yp, ip);
            else
              pool_simd::rows_s2<mode::max_values>(pr.kw, xp, pr.w, rw.data(), oy0, oy1, pr.kh,
                                                   pr.sh, pr.dh, pr.pw, vlo, vhi, pr.ow, yp,
                                                   nullptr);
            lo = vlo, hi = vhi;
          }
        }
#endif
        if (hi > lo && lo == 0 && hi == pr.ow) return;  // whole rows done
        for (int64_t oy = oy0; oy < oy1; ++oy) {
          const pool_window& r = rw[static_cast<size_t>(oy)];
          T* yr = yp + oy * pr.ow;
          int64_t* ir = ip ? ip + oy * pr.ow : nullptr;
          if (hi > lo || ir) {  // the rest one window at a time
            for (int64_t ox = lo > 0 ? 0 : hi; ox < pr.ow; ox = ox + 1 == lo ? hi : ox + 1)
              pool_max_at(xp, pr.w, r, cw[static_cast<size_t>(ox)], pr.dh, pr.dw, yr + ox,
                          ir ? ir + ox : nullptr);
          } else {
            buf.resize(static_cast<size_t>(pr.w));
            pool_reduce_rows<true>(xp, pr.w, r.begin, r.end, pr.dh, buf.data());
            pool_reduce_cols<true>(buf.data(), cw.data(), pr.dw, r.count, 0, pr.ow, yr);
          }
        }
      });
}

/// Average pooling (and adaptive average pooling, with its windows) forward. `regular`: the
/// windows are kernel/stride windows, which the vector kernel may take.
template <class T>
void pool_avg_forward(const pool_problem& pr, const T* x, T* y, const std::vector<pool_window>& rw,
                      const std::vector<pool_window>& cw, bool regular) {
  using A = pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  const auto vcols =
      regular ? pool_vector_columns<T>(pr, false) : std::pair<int64_t, int64_t>{0, 0};
  [[maybe_unused]] const int64_t vlo = vcols.first, vhi = vcols.second;
  int64_t rows = 1, cols = 1;  // widest window along each axis, for the cost estimate
  for (const pool_window& r : rw) rows = std::max(rows, r.end - r.begin);
  for (const pool_window& c : cw) cols = std::max(cols, c.end - c.begin);
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
  if constexpr (std::is_same_v<T, float>) {
    if (pool_simd::pool_planes_uniform(pr, vlo, vhi)) {
      parallel_for(pr.planes * pr.oh, rows * pr.w + pr.ow * cols, [&](int64_t b, int64_t e) {
        pool_simd::rows_uniform<pool_simd::mode::average>(pr, x, b, e, y, nullptr);
      });
      return;
    }
  }
#endif
  pool_for_rows<std::vector<A>>(
      pr, rows * pr.w + pr.ow * cols,
      [&](int64_t p, int64_t oy0, int64_t oy1, std::vector<A>& buf) {
        const T* xp = x + p * hw;
        T* yp = y + p * ohw;
        int64_t lo = 0, hi = 0;
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
        if constexpr (std::is_same_v<T, float>) {
          if (vhi > vlo) {
            pool_simd::rows_s2<pool_simd::mode::average>(pr.kw, xp, pr.w, rw.data(), oy0, oy1,
                                                         pr.kh, pr.sh, 1, pr.pw, vlo, vhi, pr.ow,
                                                         yp, nullptr);
            lo = vlo, hi = vhi;
          }
        }
#endif
        if (hi > lo && lo == 0 && hi == pr.ow) return;  // whole rows done
        for (int64_t oy = oy0; oy < oy1; ++oy) {
          const pool_window& r = rw[static_cast<size_t>(oy)];
          T* yr = yp + oy * pr.ow;
          if (hi > lo) {
            for (int64_t ox = lo > 0 ? 0 : hi; ox < pr.ow; ox = ox + 1 == lo ? hi : ox + 1)
              pool_avg_at(xp, pr.w, r, cw[static_cast<size_t>(ox)], yr + ox);
          } else {
            buf.resize(static_cast<size_t>(pr.w));
            pool_reduce_rows<false>(xp, pr.w, r.begin, r.end, 1, buf.data());
            pool_reduce_cols<false>(buf.data(), cw.data(), 1, r.count, 0, pr.ow, yr);
          }
        }
      });
}

/// Sum of n contiguous elements in A: four vector accumulators (eight scalar ones without SIMD),
/// combined pairwise, then the tail. Depends only on n, never on threads.
template <class T, class A>
A pool_plane_sum(const T* p, int64_t n) {
  int64_t i = 0;
  A s = 0;
  if constexpr (std::is_same_v<T, A> && simd::available<A>) {
    using V = simd::vec<A>;
    constexpr int L = V::width;
    V a0 = V::broadcast(0), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 4 * L <= n; i += 4 * L) {
      a0 += V::load(p + i), a1 += V::load(p + i + L);
      a2 += V::load(p + i + 2 * L), a3 += V::load(p + i + 3 * L);
    }
    for (; i + L <= n; i += L) a0 += V::load(p + i);
    alignas(64) A lanes[L];
    ((a0 + a1) + (a2 + a3)).store(lanes);
    for (int half = L / 2; half >= 1; half /= 2)  // a tree: short dependency chains per plane
      for (int l = 0; l < half; ++l) lanes[l] += lanes[l + half];
    s = lanes[0];
  } else {
    A acc[8] = {};
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += static_cast<A>(p[i + j]);
    s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  for (; i < n; ++i) s += static_cast<A>(p[i]);
  return s;
}

template <class T>
void pool_global_avg(const pool_problem& pr, const T* x, T* y) {
  using A = pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w;
  parallel_for(pr.planes, hw, [&](int64_t b, int64_t e) {
#if TESSERA_DETAIL_POOL_AVX512
    if constexpr (std::is_same_v<T, float>) {
      if (hw <= 256) return pool_global_avg_small_f32(x, hw, b, e, y);
    }
#endif
    for (int64_t p = b; p < e; ++p) {
      A sum;
#if TESSERA_DETAIL_POOL_AVX512
      if constexpr (std::is_same_v<T, float>)  // masked tail instead of scalar ones
        sum = pool_plane_sum_f32(x + p * hw, hw);
      else
#endif
        sum = pool_plane_sum<T, A>(x + p * hw, hw);
      y[p] = static_cast<T>(sum / static_cast<A>(hw));
    }
  });
}

/// Accumulation target of one input plane in a backward pass: gx's plane itself when T is the
/// accumulation type, otherwise a float scratch plane rounded into gx once at the end.
template <class T, class A>
struct pool_grad_plane {
  std::vector<A> scratch;
  explicit pool_grad_plane(int64_t hw) {
    if constexpr (!std::is_same_v<T, A>) scratch.resize(static_cast<size_t>(hw));
  }
  A* begin(T* gx_plane, int64_t hw) {
    A* acc;
    if constexpr (std::is_same_v<T, A>)
      acc = gx_plane;
    else
      acc = scratch.data();
    std::memset(static_cast<void*>(acc), 0, static_cast<size_t>(hw) * sizeof(A));
    return acc;
  }
  void finish(T* gx_plane, int64_t hw) {
    if constexpr (!std::is_same_v<T, A>)
      for (int64_t i = 0; i < hw; ++i) gx_plane[i] = static_cast<T>(scratch[i]);
  }
};

template <class T>
bool pool_max_backward(const pool_problem& pr, const T* gy, const int64_t* indices, T* gx) {
  using A = pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  [[maybe_unused]] const bool windows_2x2 = pr.oh == pr.h / 2 && pr.ow == pr.w / 2 && pr.ow > 0 &&
                                            hw <= std::numeric_limits<int32_t>::max();
  std::atomic<bool> ok{true};
  parallel_for(pr.planes, hw + 2 * ohw, [&](int64_t b, int64_t e) {
    pool_grad_plane<T, A> plane(hw);
    bool good = true;
    for (int64_t p = b; p < e; ++p) {
#if TESSERA_DETAIL_POOL_AVX512
      if constexpr (std::is_same_v<T, float>)
        if (windows_2x2 && pool_max_backward_2x2(pr, gy + p * ohw, indices + p * ohw, gx + p * hw))
          continue;
#endif
      A* acc = plane.begin(gx + p * hw, hw);
      const T* g = gy + p * ohw;
      const int64_t* id = indices + p * ohw;
      for (int64_t k = 0; k < ohw; ++k) {
        const int64_t i = id[k];
        // One unsigned compare rejects negative and too-large indices alike.
        if (static_cast<uint64_t>(i) < static_cast<uint64_t>(hw))
          acc[i] += static_cast<A>(g[k]);
        else
          good = false;
      }
      plane.finish(gx + p * hw, hw);
    }
    if (!good) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load(std::memory_order_relaxed);
}

/// Average (and adaptive average) pooling backward: each output's gradient divided by its
/// divisor is spread over its window. Per output row, the spread along the columns is formed once
/// in a row buffer, then added to every input row of the window.
template <class T>
void pool_avg_backward(const pool_problem& pr, const T* gy, T* gx,
                       const std::vector<pool_window>& rw, const std::vector<pool_window>& cw) {
  using A = pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  parallel_for(pr.planes, hw + ohw * (pr.kw + 1), [&](int64_t b, int64_t e) {
    pool_grad_plane<T, A> plane(hw);
    std::vector<A> row(static_cast<size_t>(pr.w));
    for (int64_t p = b; p < e; ++p) {
      A* acc = plane.begin(gx + p * hw, hw);
      const T* g = gy + p * ohw;
      for (int64_t oy = 0; oy < pr.oh; ++oy) {
        const pool_window& r = rw[static_cast<size_t>(oy)];
        std::fill(row.begin(), row.end(), A(0));
        for (int64_t ox = 0; ox < pr.ow; ++ox) {
          const pool_window& c = cw[static_cast<size_t>(ox)];
          const A v = static_cast<A>(g[oy * pr.ow + ox]) / static_cast<A>(r.count * c.count);
          for (int64_t col = c.begin; col < c.end; ++col) row[col] += v;
        }
        for (int64_t in = r.begin; in < r.end; ++in)
          pool_combine<false>(acc + in * pr.w, row.data(), acc + in * pr.w, pr.w);
      }
      plane.finish(gx + p * hw, hw);
    }
  });
}

}  // namespace detail

namespace backend {

/// The CPU pooling kernels. Every entry point takes contiguous NCHW planes described by
/// detail::pool_problem (whose contract the ops layer has checked) and never throws.
struct cpu_pool {
  /// y = the maximum of each window (NaN when the window holds a NaN). When indices is not null
  /// it receives, per output, the flat index row * w + col within the input plane of the first
  /// maximum in row-major window order (the last NaN if any), as PyTorch.
  template <class T>
  static void max_forward(const detail::pool_problem& pr, const T* x, T* y, int64_t* indices) {
    detail::pool_max_forward(pr, x, y, indices);
  }
  /// y = the sum of each window / its divisor (pool_problem::count_include_pad).
  template <class T>
  static void avg_forward(const detail::pool_problem& pr, const T* x, T* y) {
    detail::pool_avg_forward(
        pr, x, y, detail::pool_windows(pr.oh, pr.h, pr.kh, pr.sh, pr.ph, 1, pr.count_include_pad),
        detail::pool_windows(pr.ow, pr.w, pr.kw, pr.sw, pr.pw, 1, pr.count_include_pad), true);
  }
  /// Adaptive average pooling from [h, w] to [oh, ow] planes (adaptive_window_of); 1x1 output is
  /// a plane sum.
  template <class T>
  static void adaptive_avg_forward(const detail::pool_problem& pr, const T* x, T* y) {
    if (pr.oh == 1 && pr.ow == 1) return detail::pool_global_avg(pr, x, y);
    detail::pool_avg_forward(pr, x, y, detail::adaptive_windows(pr.oh, pr.h),
                             detail::adaptive_windows(pr.ow, pr.w), false);
  }
  /// gx = 0, then gx[plane][indices[k]] += gy[k] for every output k of each plane (overlapping
  /// windows accumulate). Indices outside [0, h * w) are skipped and make the result false.
  template <class T>
  [[nodiscard]] static bool max_backward(const detail::pool_problem& pr, const T* gy,
                                         const int64_t* indices, T* gx) {
    return detail::pool_max_backward(pr, gy, indices, gx);
  }
  /// gx = the gradient of avg_forward: each gy spread evenly (/ divisor) over its window.
  template <class T>
  static void avg_backward(const detail::pool_problem& pr, const T* gy, T* gx) {
    detail::pool_avg_backward(
        pr, gy, gx, detail::pool_windows(pr.oh, pr.h, pr.kh, pr.sh, pr.ph, 1, pr.count_include_pad),
        detail::pool_windows(pr.ow, pr.w, pr.kw, pr.sw, pr.pw, 1, pr.count_include_pad));
  }
  /// gx = the gradient of adaptive_avg_forward.
  template <class T>
  static void adaptive_avg_backward(const detail::pool_problem& pr, const T* gy, T* gx) {
    detail::pool_avg_backward(pr, gy, gx, detail::adaptive_windows(pr.oh, pr.h),
                              detail::adaptive_windows(pr.ow, pr.w));
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE
