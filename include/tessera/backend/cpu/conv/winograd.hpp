// tessera/backend/cpu/conv/winograd.hpp - float 3x3 stride-1 convolutions as Winograd F(4x4, 3x3)
// on the CPU (conv_algorithm::winograd; the tile transforms in detail/winograd.hpp).
//
// The weights are transformed once per call into U[xi] = (G w G^T)[xi] ([k][c] per position xi),
// stored directly as the GEMM micro-kernel's packed A panels. The output tiles (4x4 outputs each)
// are then taken in blocks, one work item per block of one image: its input tiles transformed
// into V[xi] ([c][nt], a thread buffer of about half of L2), the 36 products M[xi] = U[xi] V[xi]
// computed on the micro-kernel for a slice of output channels at a time (M stays in L2 too), and
// each slice transformed back into the outputs with the bias and ReLU. Nothing is written to
// memory but the outputs: V and M live in cache-sized per-thread buffers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../../../core/conv_algorithm.hpp"
#include "../../../detail/conv_problem.hpp"
#include "../../../detail/winograd.hpp"
#include "../gemm.hpp"
#include "buffers.hpp"

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

/// Tiles of one tile row handled together by the transforms: vectors of them, the phases of
/// their input rows in a stack buffer.
inline constexpr int64_t winograd_cpu_run = 64;

/// Calls f(img, ty, tx, u, len) for the tiles t0 .. t0 + count - 1 of the batch (image by image,
/// th x tw tiles each in raster order) in runs of at most winograd_cpu_run tiles of one tile row:
/// image img, tile row ty, first tile tx, position u of that tile within the block, len tiles.
template <class F>
void winograd_cpu_runs(int64_t t0, int64_t count, int64_t th, int64_t tw, F&& f) {
  for (int64_t t = t0; t < t0 + count;) {
    const int64_t img = t / (th * tw), ty = t / tw % th, tx = t % tw;
    const int64_t len = std::min({tw - tx, t0 + count - t, winograd_cpu_run});
    f(img, ty, tx, t - t0, len);
    t += len;
  }
}

/// V[xi][ci][t] = (B^T d B)[xi] for every channel of the block's tiles t < count (tiles t0 ..
/// t0 + count - 1 of the batch x, planar; a block may span images), t running to nt (tiles past
/// count are zeros, which the micro-kernel reads as whole panels). Vectorized across the tiles of a
/// row: input column 4 tx + j - pad_left of tile tx is entry tx + j / 4 of the row's phase j % 4,
/// so after splitting each input row into its four phases every d[i][j] is a contiguous vector of
/// tiles.
template <class V>  // simd::vec<float> (a template: scalar builds never instantiate it)
void winograd_cpu_input(const conv_geometry& g, const float* x, int64_t t0, int64_t count,
                        int64_t nt, int64_t th, int64_t tw, float* v) {
  constexpr int W = V::width;
  constexpr int64_t X = winograd_positions, R = winograd_cpu_run;
  const int64_t c = g.c;
  for (int64_t xi = 0; xi < X; ++xi)
    for (int64_t ci = 0; ci < c; ++ci)
      std::fill(v + (xi * c + ci) * nt + count, v + (xi * c + ci + 1) * nt, 0.0f);
  alignas(64) float phase[6][4][R + W];  // phase[i][q][u]: input (row i, column 4 u + q - pad)
  for (int64_t ci = 0; ci < c; ++ci) {
    winograd_cpu_runs(
        t0, count, th, tw, [&](int64_t img, int64_t ty, int64_t tx, int64_t at, int64_t len) {
          const float* plane = x + (img * c + ci) * g.h * g.w;
          for (int i = 0; i < 6; ++i) {
            const int64_t iy = 4 * ty - g.pad_top + i;
            const float* row = iy >= 0 && iy < g.h ? plane + iy * g.w : nullptr;
            for (int q = 0; q < 4; ++q)
              for (int64_t u = 0; u < len + W; ++u) {  // past len + 1: zeros the vectors read
                const int64_t ix = 4 * (tx + u) + q - g.pad_left;
                phase[i][q][u] = row && u <= len && ix >= 0 && ix < g.w ? row[ix] : 0.0f;
              }
          }
          for (int64_t u = 0; u < len; u += W) {
            V d[6][6], t[36];
            for (int i = 0; i < 6; ++i)
              for (int j = 0; j < 6; ++j) d[i][j] = V::load(&phase[i][j % 4][u + j / 4]);
            winograd_input_tile(d, t);
            const int64_t n = std::min<int64_t>(W, len - u);
            for (int64_t xi = 0; xi < X; ++xi) {
              float* dst = v + (xi * c + ci) * nt + at + u;
              if (n == W) {
                t[xi].store(dst);
              } else {
                alignas(64) float lanes[W];
                t[xi].store(lanes);
                std::copy(lanes, lanes + n, dst);
              }
            }
          }
        });
  }
}

/// The outputs of channel o for the block's tiles t < count (tiles t0 .. t0 + count - 1 of the
/// batch): A^T m A of the products m[xi * ld + t] (one vector of tiles at a time), plus `bias`,
/// then ReLU if apply_relu, written into y ([n][k][ho][wo]) where inside the image. m must be
/// readable one vector past each run.
template <class V>  // simd::vec<float>, as for winograd_cpu_input
void winograd_cpu_output(const conv_geometry& g, const float* m, int64_t ld, int64_t t0,
                         int64_t count, int64_t th, int64_t tw, int64_t o, float bias,
                         bool apply_relu, float* y) {
  constexpr int W = V::width;
  winograd_cpu_runs(t0, count, th, tw,
                    [&](int64_t img, int64_t ty, int64_t tx, int64_t at, int64_t len) {
                      float* plane = y + (img * g.k + o) * g.ho * g.wo;
                      for (int64_t u = 0; u < len; u += W) {
                        V mt[36], r[4][4];
                        for (int xi = 0; xi < 36; ++xi) mt[xi] = V::load(m + xi * ld + at + u);
                        winograd_output_tile(mt, r);
                        const int64_t n = std::min<int64_t>(W, len - u);
                        for (int i = 0; i < 4 && 4 * ty + i < g.ho; ++i) {
                          alignas(64) float lanes[4][W];
                          for (int j = 0; j < 4; ++j) {
                            V y = r[i][j] + bias;
                            if (apply_relu) y = simd::relu(y);
                            y.store(lanes[j]);
                          }
                          float* out = plane + (4 * ty + i) * g.wo;
                          for (int64_t l = 0; l < n; ++l) {
                            const int64_t ox = 4 * (tx + u + l);
                            for (int j = 0; j < 4 && ox + j < g.wo; ++j) out[ox + j] = lanes[j][l];
                          }
                        }
                      }
                    });
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
    if (get_float32_conv_algorithm() != conv_algorithm::winograd || !winograd_layer(g))
      return false;
    using V = simd::vec<TX>;  // float (dependent: scalar builds never look inside)
    constexpr int MR = gemm_tile<float>::mr, NR = gemm_tile<float>::nr;
    constexpr int64_t X = winograd_positions;
    const int64_t c = g.c, k = g.k, k_pad = (k + MR - 1) / MR * MR;
    // Tiles numbered over the whole batch, so that a block of small images is full.
    const int64_t th = (g.ho + 3) / 4, tw = (g.wo + 3) / 4, tiles = g.n * th * tw;
    const auto [nt, kb] = winograd_cpu_blocking(c, k, tiles);
    const int threads = get_num_threads();

    // U[xi] as packed A panels: element (o, ci) at u + xi * k_pad * c + o / MR * MR * c + ci * MR
    // + o % MR; the rows of the last panel past k are zero.
    float* u = static_cast<float*>(thread_conv_buffer<conv_buffer::weights>().get(
        sizeof(float) * static_cast<size_t>(X * k_pad * c)));
    conv_parallel_items(k_pad / MR, MR * c * 100, threads, [&](int64_t panel, int) {
      for (int64_t o = panel * MR; o < (panel + 1) * MR; ++o)
        for (int64_t ci = 0; ci < c; ++ci) {
          float t[36] = {};
          if (o < k) winograd_weight_tile(p.w + (o * c + ci) * 9, t);
          float* dst = u + panel * MR * c + ci * MR + o % MR;
          for (int64_t xi = 0; xi < X; ++xi) dst[xi * k_pad * c] = t[xi];
        }
    });

    const int64_t blocks = (tiles + nt - 1) / nt, kc = cached_gemm_blocks<float>().kc;
    conv_parallel_items(blocks, X * k * c * nt, threads, [&](int64_t block, int) {
      const int64_t t0 = block * nt, count = std::min(nt, tiles - t0);
      float* v = static_cast<float*>(thread_conv_buffer<conv_buffer::tile>().get(
          sizeof(float) * static_cast<size_t>(X * c * nt)));
      // M, with room for one vector past its end (the output transform reads whole vectors).
      float* m = static_cast<float*>(thread_conv_buffer<conv_buffer::products>().get(
          sizeof(float) * static_cast<size_t>(X * kb * nt + V::width)));
      winograd_cpu_input<V>(g, p.x, t0, count, nt, th, tw, v);
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
          winograd_cpu_output<V>(g, m + (o - k0) * nt, kb * nt, t0, count, th, tw, o,
                                 p.bias ? p.bias[o] : 0.0f, p.relu, p.y);
      }
    });
    return true;
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE
