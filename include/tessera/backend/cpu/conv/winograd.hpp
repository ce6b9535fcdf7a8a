// tessera/backend/cpu/conv/winograd.hpp - float 3x3 stride-1 convolutions as Winograd F(4x4, 3x3)
// on the CPU (conv_algorithm::winograd; the tile transforms in detail/winograd.hpp).
//
// The weights are transformed once per call into U[xi] = (G w G^T)[xi] ([k][c] per position xi),
// stored directly as the GEMM micro-kernel's packed A panels. The output tiles (4x4 outputs each,
// numbered over the whole batch) are then taken in blocks, one work item per block: its input
// tiles transformed into V[xi] ([c][nt], a thread buffer of about half of L2), the 36 products
// M[xi] = U[xi] V[xi] computed on the micro-kernel for a slice of output channels at a time (M
// stays in L2 too), and each slice transformed back into the outputs with the bias and ReLU.
// Nothing is written to memory but the outputs: V and M live in cache-sized per-thread buffers.
//
// The weight gradient (F(3x3, 4x4), conv_backward_weight_winograd) takes blocks of tiles too: the
// inputs under them and dy's tiles transformed, per position a product summed over the tiles into
// the thread's own [36][K][C] sums, which are added in thread order and transformed back.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../../kernel/conv_problem.hpp"
#include "../../../kernel/winograd.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// How a CPU Winograd convolution is blocked: tiles per work item (nt, a multiple of the
/// micro-tile width) and output channels per slice of products (kb, a multiple of its height).
struct winograd_cpu_blocks {
  int64_t nt, kb;
};

/// V of a block ([36][c][nt] floats) in about half of L2, M's slice ([36][kb][nt]) in a quarter.
inline winograd_cpu_blocks winograd_cpu_blocking(int64_t c, int64_t k, int64_t tiles) {
  constexpr int MR = gemm_tile<float>::mr, NR = gemm_tile<float>::nr;
  constexpr int64_t X = winograd_positions, F = sizeof(float);
  const int64_t l2 = host_caches().l2;
  int64_t nt = std::max<int64_t>(l2 / 2 / (X * c * F) / NR, 1) * NR;
  nt = std::min(nt, (tiles + NR - 1) / NR * NR);
  int64_t kb = std::max<int64_t>(l2 / 4 / (X * nt * F) / MR, 1) * MR;
  kb = std::min(kb, (k + MR - 1) / MR * MR);
  return {nt, kb};
}

/// Where the block's tiles lie, found once per block for every channel: tile u of the block (tile
/// t0 + u of the batch, images of th x tw tiles in raster order; top-left output (oy, ox)) has
/// its 6x6 input window start at element in_at[u] of channel 0 of the batch (may
/// be negative: only the rows in_r0 .. in_r1 - 1 and columns in_c0 .. in_c1 - 1 of the window lie
/// in the image); its 4x4 outputs start at element out_at[u] of channel 0, out_rows x out_cols of
/// them inside ho x wo. Entries run to count rounded up to `lanes`; those past count are empty.
struct winograd_cpu_tiles {
  std::vector<int64_t> in_at, out_at;
  std::vector<int8_t> in_r0, in_r1, in_c0, in_c1, out_rows, out_cols;
  void locate(const conv_geometry& g, int64_t t0, int64_t count, int64_t th, int64_t tw,
              int lanes) {
    const auto size = static_cast<size_t>((count + lanes - 1) / lanes * lanes);
    for (auto* v : {&in_at, &out_at}) v->assign(size, 0);
    for (auto* v : {&in_r0, &in_r1, &in_c0, &in_c1, &out_rows, &out_cols}) v->assign(size, 0);
    const auto clamp6 = [](int64_t v) { return static_cast<int8_t>(std::clamp<int64_t>(v, 0, 6)); };
    for (int64_t u = 0; u < count; ++u) {
      const int64_t t = t0 + u;
      const auto i = static_cast<size_t>(u);
      const int64_t img = t / (th * tw), oy = t / tw % th * 4, ox = t % tw * 4;
      const int64_t y0 = oy - g.pad_top, x0 = ox - g.pad_left;
      in_at[i] = img * g.c * g.h * g.w + y0 * g.w + x0;
      in_r0[i] = clamp6(-y0), in_r1[i] = clamp6(g.h - y0);
      in_c0[i] = clamp6(-x0), in_c1[i] = clamp6(g.w - x0);
      out_at[i] = img * g.k * g.ho * g.wo + oy * g.wo + ox;
      out_rows[i] = static_cast<int8_t>(std::min<int64_t>(4, g.ho - oy));
      out_cols[i] = static_cast<int8_t>(std::min<int64_t>(4, g.wo - ox));
    }
  }
};

/// Stores the first n lanes of v at dst, dst + stride, ...: one vector store when they are all
/// lanes and contiguous, else lane by lane.
template <class V>
TESSERA_ISA_FLATTEN void winograd_cpu_store(V v, float* dst, int64_t n, int64_t stride) {
  if (n == V::width && stride == 1) {
    v.store(dst);
  } else {
    alignas(64) float lanes[V::width];
    v.store(lanes);
    for (int64_t l = 0; l < n; ++l) dst[l * stride] = lanes[l];
  }
}

/// Where a block's transformed inputs go: position xi, channel ci, tile u at v[xi * xi_stride +
/// ci * ci_stride + u * u_stride] (forward: [36][C][nt], tiles contiguous; weight gradient:
/// [36][nt][C'], channels contiguous).
struct winograd_cpu_layout {
  int64_t xi_stride, ci_stride, u_stride;
};

/// (B^T d B)[xi] for every channel of the block's tiles u < count (x planar), stored as `lay`
/// says. Vectorized across tiles: each vector's tiles gather their 6x6 inputs into
/// d[i][j][lane] (any tiles: of one row, of several rows or images alike), then the transform
/// runs on whole vectors.
template <class V>  // simd::vec<float> (a template: scalar builds never instantiate it)
TESSERA_ISA_FLATTEN void winograd_cpu_input(const conv_geometry& g, const float* x,
                                            const winograd_cpu_tiles& at, int64_t count,
                                            winograd_cpu_layout lay, float* v) {
  constexpr int W = V::width;
  constexpr int64_t X = winograd_positions;
  const int64_t c = g.c, hw = g.h * g.w;
  alignas(64) float d[6][6][W];
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t u0 = 0; u0 < count; u0 += W) {
      const int64_t n = std::min<int64_t>(W, count - u0);
      for (int64_t l = 0; l < W; ++l) {
        const auto u = static_cast<size_t>(u0 + l);
        const int64_t from = at.in_at[u] + ci * hw;  // window element (i, j): x[from + i w + j]
        if (at.in_r0[u] == 0 && at.in_r1[u] == 6 && at.in_c0[u] == 0 && at.in_c1[u] == 6) {
          for (int i = 0; i < 6; ++i)
            for (int j = 0; j < 6; ++j) d[i][j][l] = x[from + i * g.w + j];
        } else {  // a border tile, or a lane past count (an empty window)
          for (int i = 0; i < 6; ++i)
            for (int j = 0; j < 6; ++j) d[i][j][l] = 0.0f;
          for (int i = at.in_r0[u]; i < at.in_r1[u]; ++i)
            for (int j = at.in_c0[u]; j < at.in_c1[u]; ++j) d[i][j][l] = x[from + i * g.w + j];
        }
      }
      V dv[6][6], t[36];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) dv[i][j] = V::load(d[i][j]);
      winograd_input_tile(dv, t);
      for (int64_t xi = 0; xi < X; ++xi)
        winograd_cpu_store(t[xi], v + xi * lay.xi_stride + ci * lay.ci_stride + u0 * lay.u_stride,
                           n, lay.u_stride);
    }
}

/// The outputs of channel o for the block's tiles u < count: A^T m A of the products m[xi * ld +
/// u] (a vector of tiles at a time; m must be readable one vector past count), plus `bias`, then
/// ReLU if apply_relu, written into y ([n][k][ho][wo]) where inside the image.
template <class V>  // simd::vec<float>, as for winograd_cpu_input
TESSERA_ISA_FLATTEN void winograd_cpu_output(const conv_geometry& g, const float* m, int64_t ld,
                                             const winograd_cpu_tiles& at, int64_t count, int64_t o,
                                             float bias, bool apply_relu, float* y) {
  constexpr int W = V::width;
  alignas(64) float r[4][4][W];
  for (int64_t u0 = 0; u0 < count; u0 += W) {
    V mt[36], rv[4][4];
    for (int xi = 0; xi < 36; ++xi) mt[xi] = V::load(m + xi * ld + u0);
    winograd_output_tile(mt, rv);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        V val = rv[i][j] + bias;
        if (apply_relu) val = simd::relu(val);
        val.store(r[i][j]);
      }
    const int64_t n = std::min<int64_t>(W, count - u0);
    for (int64_t l = 0; l < n; ++l) {
      const auto u = static_cast<size_t>(u0 + l);
      float* out = y + at.out_at[u] + o * g.ho * g.wo;  // output (i, j) at out[i * wo + j]
      for (int i = 0; i < at.out_rows[u]; ++i)
        for (int j = 0; j < at.out_cols[u]; ++j) out[i * g.wo + j] = r[i][j][l];
    }
  }
}

/// Panel `panel` (output channels panel * MR .. + MR - 1) of U[xi] = G w G^T for every position
/// xi, in the micro-kernel's packed layout (see conv_forward_winograd), zeros past k. Vectorized
/// across input channels: each output channel's taps are first copied tap-major ([9][c]).
template <class V>  // simd::vec<float>, as for winograd_cpu_input
TESSERA_ISA_FLATTEN void winograd_cpu_weights(const float* w, int64_t k, int64_t c, int64_t panel,
                                              int64_t k_pad, float* u) {
  constexpr int W = V::width, MR = gemm_tile<float>::mr;
  constexpr int64_t X = winograd_positions;
  thread_local std::vector<float> taps;
  taps.resize(static_cast<size_t>(9 * (c + W)));
  for (int64_t o = panel * MR; o < (panel + 1) * MR; ++o) {
    float* dst = u + panel * MR * c + o % MR;  // + xi * k_pad * c + ci * MR
    if (o >= k) {
      for (int64_t xi = 0; xi < X; ++xi)
        for (int64_t ci = 0; ci < c; ++ci) dst[xi * k_pad * c + ci * MR] = 0.0f;
      continue;
    }
    for (int64_t ci = 0; ci < c; ++ci)
      for (int q = 0; q < 9; ++q)
        taps[static_cast<size_t>(q * (c + W) + ci)] = w[(o * c + ci) * 9 + q];
    for (int64_t ci0 = 0; ci0 < c; ci0 += W) {
      V g[9], t[36];
      for (int q = 0; q < 9; ++q) g[q] = V::load(&taps[static_cast<size_t>(q * (c + W) + ci0)]);
      winograd_weight_tile(g, t);
      const int64_t n = std::min<int64_t>(W, c - ci0);
      for (int64_t xi = 0; xi < X; ++xi)
        winograd_cpu_store(t[xi], dst + xi * k_pad * c + ci0 * MR, n, MR);
    }
  }
}

/// Runs p as Winograd F(4x4, 3x3) and returns true, or returns false having done nothing: p is not
/// float x float into float, the user has not chosen conv_algorithm::winograd, the layer does not
/// qualify (winograd_layer), or the build has no SIMD vectors for float.
template <class TX, class TW, class Acc>
bool conv_forward_winograd(const conv_forward_problem<TX, TW, Acc>& p) {
  if constexpr (!std::is_same_v<TX, float> || !std::is_same_v<TW, float> ||
                !std::is_same_v<Acc, float> || !simd::available<float>) {
    (void)p;
    return false;
  } else {
    const conv_geometry& g = p.g;
    if (!winograd_chosen(g)) return false;
    using V = simd::vec<TX>;  // float (dependent: scalar builds never look inside)
    constexpr int MR = gemm_tile<float>::mr, NR = gemm_tile<float>::nr;
    constexpr int64_t X = winograd_positions;
    const int64_t c = g.c, k = g.k, k_pad = (k + MR - 1) / MR * MR;
    // Tiles numbered over the whole batch, so that a block of small images is full.
    const int64_t th = (g.ho + 3) / 4, tw = (g.wo + 3) / 4, tiles = g.n * th * tw;
    // Plain names, not a structured binding: the lambdas below capture them (Clang before 16
    // cannot capture structured bindings).
    const winograd_cpu_blocks sizes = winograd_cpu_blocking(c, k, tiles);
    const int64_t nt = sizes.nt, kb = sizes.kb;
    const int threads = get_num_threads();

    // U[xi] as packed A panels: element (o, ci) at u + xi * k_pad * c + o / MR * MR * c + ci * MR
    // + o % MR; the rows of the last panel past k are zero.
    float* u = static_cast<float*>(thread_conv_buffer<conv_buffer::weights>().get(
        sizeof(float) * static_cast<size_t>(X * k_pad * c)));
    conv_parallel_items(k_pad / MR, MR * c * 100, threads, [&](int64_t panel, int) {
      winograd_cpu_weights<V>(p.w, k, c, panel, k_pad, u);
    });

    const int64_t blocks = (tiles + nt - 1) / nt, kc = cached_gemm_blocks<float>().kc;
    conv_parallel_items(blocks, X * k * c * nt, threads, [&](int64_t block, int) {
      const int64_t t0 = block * nt, count = std::min(nt, tiles - t0);
      float* v = static_cast<float*>(thread_conv_buffer<conv_buffer::tile>().get(
          sizeof(float) * static_cast<size_t>(X * c * nt)));
      // M, with room for one vector past its end (the output transform reads whole vectors).
      float* m = static_cast<float*>(thread_conv_buffer<conv_buffer::products>().get(
          sizeof(float) * static_cast<size_t>(X * kb * nt + V::width)));
      thread_local winograd_cpu_tiles at;
      at.locate(g, t0, count, th, tw, V::width);
      // V[xi][ci][u], zeros past count (the micro-kernel reads whole panels of tiles).
      for (int64_t row = 0; row < X * c; ++row)
        std::fill(v + row * nt + count, v + (row + 1) * nt, 0.0f);
      winograd_cpu_input<V>(g, p.x, at, count, {c * nt, nt, 1}, v);
      for (int64_t k0 = 0; k0 < k; k0 += kb) {
        const int64_t kn = std::min(kb, k - k0);
        // M[xi][o - k0][t] = sum over ci of U[xi][o][ci] V[xi][ci][t], k blocks of kc channels.
        for (int64_t xi = 0; xi < X; ++xi) {
          const float* ux = u + xi * k_pad * c;
          for (int64_t pc = 0; pc < c; pc += kc) {
            const int64_t kcb = std::min(kc, c - pc);
            gemm_epilogue<float> ep;
            ep.beta = pc == 0 ? 0.0f : 1.0f;
            ep.read_c = pc > 0;
            for (int64_t jp = 0; jp < nt / NR; ++jp)
              for (int64_t i0 = k0; i0 < k0 + kn; i0 += MR) {
                const int mr_eff = static_cast<int>(std::min<int64_t>(MR, k - i0));
                gemm_micro_fp<float, MR>(
                    kcb, ux + i0 * c + pc * MR, v + (xi * c + pc) * nt + jp * NR, nt,
                    m + (xi * kb + i0 - k0) * nt + jp * NR, nt, 1, mr_eff, NR, ep, i0, 0);
              }
          }
        }
        for (int64_t o = k0; o < k0 + kn; ++o)
          winograd_cpu_output<V>(g, m + (o - k0) * nt, kb * nt, at, count, o,
                                 p.bias ? p.bias[o] : 0.0f, p.relu, p.y);
      }
    });
    return true;
  }
}

/// Tiles per work item of the weight gradient: the products' k (their inner dimension).
inline constexpr int64_t winograd_cpu_grad_tiles = 64;

/// dy's transform for the block's tiles u < count: E[xi][o][u] = (G' e G'^T)[xi] of the 4x4
/// gradients e of output channel o at tile u (zeros past ho and wo), at e_out[(xi * k + o) * ld +
/// u]. Vectorized across tiles as winograd_cpu_input.
template <class V>  // simd::vec<float>, as for winograd_cpu_input
TESSERA_ISA_FLATTEN void winograd_cpu_grad(const conv_geometry& g, const float* dy,
                                           const winograd_cpu_tiles& at, int64_t count, int64_t ld,
                                           float* e_out) {
  constexpr int W = V::width;
  constexpr int64_t X = winograd_positions;
  const int64_t P = g.ho * g.wo;
  alignas(64) float e[4][4][W];
  for (int64_t o = 0; o < g.k; ++o)
    for (int64_t u0 = 0; u0 < count; u0 += W) {
      const int64_t n = std::min<int64_t>(W, count - u0);
      for (int64_t l = 0; l < W; ++l) {
        const auto u = static_cast<size_t>(u0 + l);
        const int64_t from = at.out_at[u] + o * P;  // gradient (i, j) at dy[from + i wo + j]
        const int rows = at.out_rows[u], cols = at.out_cols[u];
        if (rows == 4 && cols == 4) {
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) e[i][j][l] = dy[from + i * g.wo + j];
        } else {
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
              e[i][j][l] = i < rows && j < cols ? dy[from + i * g.wo + j] : 0.0f;
        }
      }
      V ev[4][4], t[36];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) ev[i][j] = V::load(e[i][j]);
      winograd_grad_tile(ev, t);
      for (int64_t xi = 0; xi < X; ++xi)
        winograd_cpu_store(t[xi], e_out + (xi * g.k + o) * ld + u0, n, 1);
    }
}

/// dw of output channel o (dw [K][C][3][3]): the threads' sums DW (one [36][K][C] block of
/// `sums` floats per thread in acc) added in thread order, then A'^T DW A', on vectors of input
/// channels. Flattened: winograd_taps_tile is baseline code taking this pass's vectors.
template <class V>
TESSERA_ISA_FLATTEN void winograd_cpu_weight_taps(const float* acc, int64_t o, int64_t k, int64_t c,
                                                  int threads, int64_t sums, float* dw) {
  constexpr int W = V::width;
  constexpr int64_t X = winograd_positions;
  for (int64_t ci0 = 0; ci0 < c; ci0 += W) {
    const int64_t n = std::min<int64_t>(W, c - ci0);
    alignas(64) float lanes[W] = {};
    V m[36], r[3][3];
    for (int64_t xi = 0; xi < X; ++xi) {
      const float* at_xi = acc + (xi * k + o) * c + ci0;
      if (n == W) {
        m[xi] = V::load(at_xi);
        for (int tt = 1; tt < threads; ++tt) m[xi] = m[xi] + V::load(at_xi + tt * sums);
      } else {
        for (int64_t l = 0; l < n; ++l) {
          float sum = 0.0f;
          for (int tt = 0; tt < threads; ++tt) sum += at_xi[tt * sums + l];
          lanes[l] = sum;
        }
        m[xi] = V::load(lanes);
      }
    }
    winograd_taps_tile(m, r);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        r[i][j].store(lanes);
        for (int64_t l = 0; l < n; ++l) dw[((o * c + ci0 + l) * 3 + i) * 3 + j] = lanes[l];
      }
  }
}

/// The weight gradient of p as Winograd F(3x3, 4x4) (see detail/winograd.hpp), returning true, or
/// false having done nothing (the same conditions as conv_forward_winograd, and per-thread sums
/// beyond 256 MiB together). Blocks of winograd_cpu_grad_tiles tiles of the batch: the inputs
/// under them transformed to V' [36][nt][C'] (channels contiguous, C' a multiple of the
/// micro-tile width), dy to E [36][K][nt]; per position, DW[xi] [K][C] += E[xi] V'[xi] on the
/// micro-kernel, into the thread's own sums. The threads' sums are added in thread order and
/// transformed back (A'^T DW A'). dw is overwritten.
template <class TX, class TG, class Acc>
bool conv_backward_weight_winograd(const conv_backward_weight_problem<TX, TG, Acc>& p) {
  if constexpr (!std::is_same_v<TX, float> || !std::is_same_v<TG, float> ||
                !std::is_same_v<Acc, float> || !simd::available<float>) {
    (void)p;
    return false;
  } else {
    using V = simd::vec<TX>;  // float (dependent: scalar builds never look inside)
    constexpr int MR = gemm_tile<float>::mr, NR = gemm_tile<float>::nr;
    constexpr int64_t X = winograd_positions;
    const conv_geometry& g = p.g;
    if (!winograd_chosen(g)) return false;
    const int64_t c = g.c, k = g.k, c_pad = (c + NR - 1) / NR * NR, k_pad = (k + MR - 1) / MR * MR;
    const int64_t th = (g.ho + 3) / 4, tw = (g.wo + 3) / 4, tiles = g.n * th * tw;
    const int64_t nt = std::min(winograd_cpu_grad_tiles, tiles), blocks = (tiles + nt - 1) / nt;
    // No more sums than blocks (as the direct weight gradient's partial copies).
    const int threads = static_cast<int>(std::min<int64_t>(get_num_threads(), blocks));
    const int64_t sums = X * k * c;  // one thread's DW
    if (threads * sums * int64_t{sizeof(float)} > (int64_t{256} << 20)) return false;
    float* acc = static_cast<float*>(thread_conv_buffer<conv_buffer::partials>().get(
        sizeof(float) * static_cast<size_t>(threads * sums)));
    std::fill(acc, acc + threads * sums, 0.0f);
    const int64_t kc = cached_gemm_blocks<float>().kc;
    conv_parallel_items(blocks, X * k * c * nt, threads, [&](int64_t block, int t) {
      const int64_t t0 = block * nt, count = std::min(nt, tiles - t0);
      float* vt = static_cast<float*>(thread_conv_buffer<conv_buffer::tile>().get(
          sizeof(float) * static_cast<size_t>(X * nt * c_pad)));
      float* e = static_cast<float*>(thread_conv_buffer<conv_buffer::products>().get(
          sizeof(float) * static_cast<size_t>(X * k * nt + k_pad * nt)));
      float* a = e + X * k * nt;  // one position's E packed as the micro-kernel's A panels
      thread_local winograd_cpu_tiles at;
      at.locate(g, t0, count, th, tw, V::width);
      if (c_pad > c)  // the micro-kernel reads whole panels of NR channels
        for (int64_t row = 0; row < X * count; ++row)
          std::fill(vt + row * c_pad + c, vt + (row + 1) * c_pad, 0.0f);
      winograd_cpu_input<V>(g, p.x, at, count, {nt * c_pad, 1, c_pad}, vt);
      winograd_cpu_grad<V>(g, p.dy, at, count, nt, e);
      float* dw_t = acc + t * sums;
      gemm_epilogue<float> ep;
      ep.beta = 1.0f;
      ep.read_c = true;
      for (int64_t xi = 0; xi < X; ++xi) {
        pack_panels<MR>(e + xi * k * nt, nt, 1, k, count, a);
        for (int64_t pc = 0; pc < count; pc += kc) {
          const int64_t kcb = std::min(kc, count - pc);
          for (int64_t j0 = 0; j0 < c; j0 += NR)
            for (int64_t i0 = 0; i0 < k; i0 += MR)
              gemm_micro_fp<float, MR>(kcb, a + i0 * count + pc * MR,
                                       vt + (xi * nt + pc) * c_pad + j0, c_pad,
                                       dw_t + (xi * k + i0) * c + j0, c, 1,
                                       static_cast<int>(std::min<int64_t>(MR, k - i0)),
                                       static_cast<int>(std::min<int64_t>(NR, c - j0)), ep, i0, j0);
        }
      }
    });
    // dw[o][ci] = A'^T (sum over threads of DW[.][o][ci]) A', vectors of input channels.
    conv_parallel_items(k, X * c * threads, threads, [&](int64_t o, int) {
      winograd_cpu_weight_taps<V>(acc, o, k, c, threads, sums, p.dw);
    });
    return true;
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE
