// tessera/kernel/winograd.hpp - Winograd F(4x4, 3x3) tile transforms shared by the backends
// (conv_algorithm::winograd; backend/cpu/conv/winograd.hpp, backend/cuda/winograd.cuh).
//
// One 1-D F(4, 3) step turns 6 inputs d and 3 taps g into the 4 outputs y_i = sum_j d_{i+j} g_j
// with 6 products: y = A^T [(G g) * (B^T d)]. Nested over rows and columns, a tile of 4x4 outputs
// of one output channel is A^T [sum_c (G g_c G^T) * (B^T d_c B)] A: 36 products per input channel
// instead of 144. The transforms are Lavin and Gray's for the points 0, 1, -1, 2, -2 and infinity;
// their coefficients (up to 8 and 1/24) amplify rounding: float outputs differ from the direct
// sums by up to about 1e-5 of the sum of |x| |w| (see core/conv_algorithm.hpp).
//
// The weight gradient is the same construction with the roles of the filter and the output
// swapped: over a 4x4 tile of dy and the 6x6 inputs under it, dw's 3x3 taps are the correlation
// of the inputs with the dy tile, F(3x3, 4x4): the same B^T on the inputs, G' (6 x 4) on the dy
// tile, A'^T (3 x 6) on the products summed over every tile of the batch. Same points, so the
// same 36 positions.
#pragma once

#include "../config.hpp"
#include "../core/conv_algorithm.hpp"
#include "conv_problem.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Transformed positions per tile: 6 x 6, numbered xi = 6 * row + column.
inline constexpr int winograd_positions = 36;

/// Whether a layer of geometry g is one the backends compute as Winograd F(4x4, 3x3) when the
/// user chose it: 3x3, stride 1, dilation 1, one group, at least 16 channels in and out. The
/// channel floor keeps layers whose products are too thin to repay the transforms (a first
/// layer's single input channel) on their direct or implicit-GEMM kernels.
inline bool winograd_layer(const conv_geometry& g) {
  return g.r == 3 && g.s == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 &&
         g.dil_w == 1 && g.groups == 1 && g.c >= 16 && g.k >= 16;
}

/// Whether the user chose conv_algorithm::winograd and g is a layer it takes: what every
/// backend's Winograd path checks first (each adds its own conditions: types, precision).
inline bool winograd_chosen(const conv_geometry& g) {
  return get_float32_conv_algorithm() == conv_algorithm::winograd && winograd_layer(g);
}

// The 1-D transforms are written with integer constants on the right of each product, so that
// T may be a scalar or a SIMD vector of tiles (the CPU backend's simd::vec, which takes
// arithmetic scalars on either side); multiplying by a power of two is exact either way.

/// B^T d for one column or row of 6 inputs.
template <class T>
TESSERA_HOST_DEVICE inline void winograd_input_1d(const T (&d)[6], T (&o)[6]) {
  o[0] = d[0] * 4 - d[2] * 5 + d[4];
  o[1] = -(d[1] + d[2]) * 4 + d[3] + d[4];
  o[2] = (d[1] - d[2]) * 4 - d[3] + d[4];
  o[3] = (d[3] - d[1]) * 2 - d[2] + d[4];
  o[4] = (d[1] - d[3]) * 2 - d[2] + d[4];
  o[5] = d[1] * 4 - d[3] * 5 + d[5];
}

/// G g for one column or row of 3 taps.
template <class T>
TESSERA_HOST_DEVICE inline void winograd_weight_1d(const T (&g)[3], T (&o)[6]) {
  o[0] = g[0] / 4;
  o[1] = -(g[0] + g[1] + g[2]) / 6;
  o[2] = -(g[0] - g[1] + g[2]) / 6;
  o[3] = g[0] / 24 + g[1] / 12 + g[2] / 6;
  o[4] = g[0] / 24 - g[1] / 12 + g[2] / 6;
  o[5] = g[2];
}

/// A^T m for one column or row of 6 products.
template <class T>
TESSERA_HOST_DEVICE inline void winograd_output_1d(const T (&m)[6], T (&o)[4]) {
  o[0] = m[0] + m[1] + m[2] + m[3] + m[4];
  o[1] = m[1] - m[2] + (m[3] - m[4]) * 2;
  o[2] = m[1] + m[2] + (m[3] + m[4]) * 4;
  o[3] = m[1] - m[2] + (m[3] - m[4]) * 8 + m[5];
}

/// G' e for one column or row of 4 output gradients (F(3, 4): they are the "taps").
template <class T>
TESSERA_HOST_DEVICE inline void winograd_grad_1d(const T (&e)[4], T (&o)[6]) {
  o[0] = e[0] / 4;
  o[1] = -(e[0] + e[1] + e[2] + e[3]) / 6;
  o[2] = -(e[0] - e[1] + e[2] - e[3]) / 6;
  o[3] = (e[0] + e[1] * 2 + e[2] * 4 + e[3] * 8) / 24;
  o[4] = (e[0] - e[1] * 2 + e[2] * 4 - e[3] * 8) / 24;
  o[5] = e[3];
}

/// A'^T m for one column or row of 6 summed products: the 3 taps' gradients (F(3, 4)).
template <class T>
TESSERA_HOST_DEVICE inline void winograd_taps_1d(const T (&m)[6], T (&o)[3]) {
  o[0] = m[0] + m[1] + m[2] + m[3] + m[4];
  o[1] = m[1] - m[2] + (m[3] - m[4]) * 2;
  o[2] = m[1] + m[2] + (m[3] + m[4]) * 4 + m[5];
}

/// u = G g G^T for the 3x3 taps g (row-major), u[xi] at position xi.
template <class T>
TESSERA_HOST_DEVICE inline void winograd_weight_tile(const T* g, T (&u)[36]) {
  T gt[6][3];  // G g: the taps' columns transformed
  for (int j = 0; j < 3; ++j) {
    const T col[3] = {g[j], g[3 + j], g[6 + j]};
    T o[6];
    winograd_weight_1d(col, o);
    for (int i = 0; i < 6; ++i) gt[i][j] = o[i];
  }
  for (int i = 0; i < 6; ++i) {
    T o[6];
    winograd_weight_1d(gt[i], o);
    for (int j = 0; j < 6; ++j) u[i * 6 + j] = o[j];
  }
}

/// v = B^T d B for the 6x6 inputs d, v[xi] at position xi.
template <class T>
TESSERA_HOST_DEVICE inline void winograd_input_tile(const T (&d)[6][6], T (&v)[36]) {
  T bd[6][6];  // B^T d: the inputs' columns transformed
  for (int j = 0; j < 6; ++j) {
    const T col[6] = {d[0][j], d[1][j], d[2][j], d[3][j], d[4][j], d[5][j]};
    T o[6];
    winograd_input_1d(col, o);
    for (int i = 0; i < 6; ++i) bd[i][j] = o[i];
  }
  for (int i = 0; i < 6; ++i) {
    T o[6];
    winograd_input_1d(bd[i], o);
    for (int j = 0; j < 6; ++j) v[i * 6 + j] = o[j];
  }
}

/// y = A^T m A for the 36 summed products m (position xi at m[xi]): the tile's 4x4 outputs.
template <class T>
TESSERA_HOST_DEVICE inline void winograd_output_tile(const T (&m)[36], T (&y)[4][4]) {
  T am[4][6];  // A^T m: the products' columns transformed
  for (int j = 0; j < 6; ++j) {
    const T col[6] = {m[j], m[6 + j], m[12 + j], m[18 + j], m[24 + j], m[30 + j]};
    T r[4];
    winograd_output_1d(col, r);
    for (int i = 0; i < 4; ++i) am[i][j] = r[i];
  }
  for (int i = 0; i < 4; ++i) winograd_output_1d(am[i], y[i]);
}

/// v = G' e G'^T for the 4x4 output gradients e, v[xi] at position xi.
template <class T>
TESSERA_HOST_DEVICE inline void winograd_grad_tile(const T (&e)[4][4], T (&v)[36]) {
  T ge[6][4];  // G' e: the gradients' columns transformed
  for (int j = 0; j < 4; ++j) {
    const T col[4] = {e[0][j], e[1][j], e[2][j], e[3][j]};
    T o[6];
    winograd_grad_1d(col, o);
    for (int i = 0; i < 6; ++i) ge[i][j] = o[i];
  }
  for (int i = 0; i < 6; ++i) {
    T o[6];
    winograd_grad_1d(ge[i], o);
    for (int j = 0; j < 6; ++j) v[i * 6 + j] = o[j];
  }
}

/// w = A'^T m A' for the 36 products m summed over the tiles: the 3x3 taps' gradients.
template <class T>
TESSERA_HOST_DEVICE inline void winograd_taps_tile(const T (&m)[36], T (&w)[3][3]) {
  T am[3][6];  // A'^T m: the products' columns transformed
  for (int j = 0; j < 6; ++j) {
    const T col[6] = {m[j], m[6 + j], m[12 + j], m[18 + j], m[24 + j], m[30 + j]};
    T r[3];
    winograd_taps_1d(col, r);
    for (int i = 0; i < 3; ++i) am[i][j] = r[i];
  }
  for (int i = 0; i < 3; ++i) winograd_taps_1d(am[i], w[i]);
}

}  // namespace detail
TESSERA_END_NAMESPACE
