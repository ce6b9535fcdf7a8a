// tessera/backend/cuda/winograd.cuh - float 3x3 stride-1 convolutions as Winograd F(4x4, 3x3)
// (conv_algorithm::winograd): the forward pass, and through it the input gradients of stride-1
// convolutions (conv.cuh runs those as forward convolutions).
//
// One 1-D F(4, 3) step turns 6 inputs d and 3 taps g into the 4 outputs y_i = sum_j d_{i+j} g_j
// with 6 products: y = A^T [(G g) * (B^T d)]. Nested over rows and columns, a tile of 4x4 outputs
// of one output channel is A^T [sum_c (G g_c G^T) * (B^T d_c B)] A: 36 products per input
// channel instead of 144. Over a batch the per-position products are 36 matrix products,
// M[xi] = U[xi] V[xi], with U[xi] the transformed weights ([k][c]) and V[xi] the transformed
// input tiles ([c][tiles]), which the GEMM kernels compute (the SIMT kernel for float). Four
// passes, each a launch: weights -> U, per chunk of images input -> V, the batched product
// U V -> M, and M -> y through A (bias and ReLU added there). V and M live in device memory
// (36 / 16 of the input's and the output's size); images are taken in chunks so that both fit
// cuda_winograd_scratch_bytes().
//
// The transforms are Lavin and Gray's for the points 0, 1, -1, 2, -2 and infinity (B^T, G, A^T
// below). Their coefficients (up to 8 and 1/24) amplify rounding: float outputs differ from the
// direct sums by up to about 1e-5 of the sum of |x| |w| (see core/conv_algorithm.hpp).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../core/conv_algorithm.hpp"
#include "../../core/matmul_precision.hpp"
#include "../../detail/conv_problem.hpp"
#include "../../detail/gemm_problem.hpp"
#include "gemm.cuh"
#include "launch.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_winograd_threads = 256;
/// Transformed positions per tile: 6 x 6.
inline constexpr int cuda_winograd_positions = 36;

/// B^T d for one column or row of 6 inputs.
template <class T>
__host__ __device__ inline void cuda_winograd_input_1d(const T (&d)[6], T (&o)[6]) {
  o[0] = T(4) * d[0] - T(5) * d[2] + d[4];
  o[1] = -T(4) * (d[1] + d[2]) + d[3] + d[4];
  o[2] = T(4) * (d[1] - d[2]) - d[3] + d[4];
  o[3] = T(2) * (d[3] - d[1]) - d[2] + d[4];
  o[4] = T(2) * (d[1] - d[3]) - d[2] + d[4];
  o[5] = T(4) * d[1] - T(5) * d[3] + d[5];
}

/// G g for one column or row of 3 taps.
template <class T>
__host__ __device__ inline void cuda_winograd_weight_1d(const T (&g)[3], T (&o)[6]) {
  o[0] = g[0] / T(4);
  o[1] = -(g[0] + g[1] + g[2]) / T(6);
  o[2] = -(g[0] - g[1] + g[2]) / T(6);
  o[3] = g[0] / T(24) + g[1] / T(12) + g[2] / T(6);
  o[4] = g[0] / T(24) - g[1] / T(12) + g[2] / T(6);
  o[5] = g[2];
}

/// A^T m for one column or row of 6 products.
template <class T>
__host__ __device__ inline void cuda_winograd_output_1d(const T (&m)[6], T (&o)[4]) {
  o[0] = m[0] + m[1] + m[2] + m[3] + m[4];
  o[1] = m[1] - m[2] + T(2) * (m[3] - m[4]);
  o[2] = m[1] + m[2] + T(4) * (m[3] + m[4]);
  o[3] = m[1] - m[2] + T(8) * (m[3] - m[4]) + m[5];
}

/// U[xi][o][ci] = (G w[o][ci] G^T)[xi] for every output channel o < k and input channel ci < c
/// of w [k][c][3][3]; position xi = 6 * row + column, matrices of k * c apart.
template <class T>
__global__ void __launch_bounds__(cuda_winograd_threads)
    cuda_winograd_weights(int64_t k, int64_t c, const T* w, T* u) {
  const int64_t total = k * c, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const T* g = w + e * 9;
    T gt[6][3];  // G g: the taps' columns transformed
    for (int j = 0; j < 3; ++j) {
      const T col[3] = {g[j], g[3 + j], g[6 + j]};
      T o[6];
      cuda_winograd_weight_1d(col, o);
      for (int i = 0; i < 6; ++i) gt[i][j] = o[i];
    }
    for (int i = 0; i < 6; ++i) {
      T o[6];
      cuda_winograd_weight_1d(gt[i], o);
      for (int j = 0; j < 6; ++j) u[(i * 6 + j) * total + e] = o[j];
    }
  }
}

/// The tiles of images n0 .. n0 + nb - 1 of g (th x tw tiles of 4x4 outputs per image):
/// V[xi][ci][t] = (B^T d B)[xi] for the 6x6 inputs d of tile t = (b * th + ty) * tw + tx of
/// channel ci, rows from 4 ty - pad_top, columns from 4 tx - pad_left, zero outside the image.
template <class T>
__global__ void __launch_bounds__(cuda_winograd_threads)
    cuda_winograd_input(conv_geometry g, const T* x, int64_t n0, int64_t nb, int64_t th, int64_t tw,
                        T* v) {
  const int64_t tiles = nb * th * tw, total = tiles * g.c, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t tx = e % tw, ty = e / tw % th, ci = e / (tw * th) % g.c, b = e / (tw * th * g.c);
    const T* plane = x + ((n0 + b) * g.c + ci) * g.h * g.w;
    const int64_t y0 = 4 * ty - g.pad_top, x0 = 4 * tx - g.pad_left;
    T bd[6][6];  // B^T d: the input's columns transformed
    for (int j = 0; j < 6; ++j) {
      const int64_t ix = x0 + j;
      T col[6];
      for (int i = 0; i < 6; ++i) {
        const int64_t iy = y0 + i;
        col[i] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? plane[iy * g.w + ix] : T(0);
      }
      T o[6];
      cuda_winograd_input_1d(col, o);
      for (int i = 0; i < 6; ++i) bd[i][j] = o[i];
    }
    const int64_t t = (b * th + ty) * tw + tx;
    for (int i = 0; i < 6; ++i) {
      T o[6];
      cuda_winograd_input_1d(bd[i], o);
      for (int j = 0; j < 6; ++j) v[((i * 6 + j) * g.c + ci) * tiles + t] = o[j];
    }
  }
}

/// y for images n0 .. n0 + nb - 1 from the products M[xi][o][t] (tiles numbered as in
/// cuda_winograd_input): the 4x4 outputs A^T m A of tile t and output channel o, plus bias[o]
/// (when given), then ReLU (when asked); outputs past ho or wo are not written.
template <class T>
__global__ void __launch_bounds__(cuda_winograd_threads)
    cuda_winograd_output(conv_geometry g, const T* m, int64_t n0, int64_t nb, int64_t th,
                         int64_t tw, const T* bias, bool relu, T* y) {
  const int64_t tiles = nb * th * tw, total = tiles * g.k, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t tx = e % tw, ty = e / tw % th, o = e / (tw * th) % g.k, b = e / (tw * th * g.k);
    const int64_t t = (b * th + ty) * tw + tx;
    T am[4][6];  // A^T m: the products' columns transformed
    for (int j = 0; j < 6; ++j) {
      T col[6];
      for (int i = 0; i < 6; ++i) col[i] = m[((i * 6 + j) * g.k + o) * tiles + t];
      T r[4];
      cuda_winograd_output_1d(col, r);
      for (int i = 0; i < 4; ++i) am[i][j] = r[i];
    }
    const T add = bias ? bias[o] : T(0);
    T* plane = y + ((n0 + b) * g.k + o) * g.ho * g.wo;
    for (int i = 0; i < 4; ++i) {
      const int64_t oy = 4 * ty + i;
      T r[4];
      cuda_winograd_output_1d(am[i], r);
      if (oy >= g.ho) continue;
      for (int j = 0; j < 4; ++j) {
        const int64_t ox = 4 * tx + j;
        if (ox >= g.wo) continue;
        const T val = r[j] + add;
        plane[oy * g.wo + ox] = relu && val < T(0) ? T(0) : val;  // NaN stays, as in the GEMMs
      }
    }
  }
}

/// The kill switch of the Winograd path (tests compare both paths on the same inputs) and the
/// count of its output-transform launches (one per chunk of images).
inline cuda_kernel_choice& cuda_winograd_choice() {
  static cuda_kernel_choice choice;
  return choice;
}

/// The most device memory one Winograd convolution's V and M may take together (images are taken
/// in chunks below it; a single image above it runs as implicit GEMM). Tests lower it to run
/// several chunks on small images.
inline int64_t& cuda_winograd_scratch_bytes() {
  static int64_t bytes = int64_t{256} << 20;
  return bytes;
}

/// Whether g is a layer Winograd F(4x4, 3x3) computes here (see conv_algorithm): 3x3, stride 1,
/// dilation 1, one group, at least 16 channels in and out. The channel floor keeps layers whose
/// products are too thin to repay the transforms' memory traffic (a first layer's single input
/// channel) on implicit GEMM.
inline bool cuda_winograd_geometry(const conv_geometry& g) {
  return g.r == 3 && g.s == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 &&
         g.dil_w == 1 && g.groups == 1 && g.c >= 16 && g.k >= 16;
}

/// Runs p as Winograd F(4x4, 3x3) and returns true, or returns false having done nothing: p is not
/// float x float into float, the user has not chosen conv_algorithm::winograd, products run on
/// tf32 tensor cores (matmul_precision::high), the geometry does not qualify
/// (cuda_winograd_geometry), the path is switched off, or one image's V and M exceed
/// cuda_winograd_scratch_bytes().
template <class TX, class TW, class Acc>
bool cuda_winograd_forward(const conv_forward_problem<TX, TW, Acc>& p) {
  if constexpr (!std::is_same_v<TX, float> || !std::is_same_v<TW, float> ||
                !std::is_same_v<Acc, float>) {
    (void)p;
    return false;
  } else {
    const conv_geometry& g = p.g;
    if (get_float32_conv_algorithm() != conv_algorithm::winograd ||
        get_float32_matmul_precision() != matmul_precision::highest || !cuda_winograd_geometry(g) ||
        !cuda_winograd_choice().enabled.load(std::memory_order_relaxed))
      return false;
    constexpr int64_t X = cuda_winograd_positions;
    const int64_t th = (g.ho + 3) / 4, tw = (g.wo + 3) / 4;
    const int64_t per_image = X * (g.c + g.k) * th * tw * int64_t{sizeof(float)};
    if (per_image > cuda_winograd_scratch_bytes()) return false;
    const int64_t nb =
        std::max<int64_t>(1, std::min(g.n, cuda_winograd_scratch_bytes() / per_image));
    cuda_scratch u(static_cast<size_t>(X * g.k * g.c) * sizeof(float));
    cuda_scratch vm(static_cast<size_t>(nb * per_image));
    auto* uw = static_cast<float*>(u.get());
    auto* v = static_cast<float*>(vm.get());
    cuda_launch("cuda_winograd_weights", cuda_winograd_weights<float>,
                dim3(cuda_grid(g.k * g.c, cuda_winograd_threads)), dim3(cuda_winograd_threads), g.k,
                g.c, p.w, uw);
    std::vector<int64_t> a_off(X), b_off(X), c_off(X);
    for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
      const int64_t cnt = std::min(nb, g.n - n0), tiles = cnt * th * tw;
      float* m = v + X * g.c * tiles;  // M follows this chunk's V
      cuda_launch("cuda_winograd_input", cuda_winograd_input<float>,
                  dim3(cuda_grid(tiles * g.c, cuda_winograd_threads)), dim3(cuda_winograd_threads),
                  g, p.x, n0, cnt, th, tw, v);
      for (int64_t xi = 0; xi < X; ++xi) {
        const auto i = static_cast<size_t>(xi);
        a_off[i] = xi * g.k * g.c, b_off[i] = xi * g.c * tiles, c_off[i] = xi * g.k * tiles;
      }
      gemm_problem<float, float, float> q;  // M[xi] = U[xi] V[xi], 36 products
      q.m = g.k, q.n = tiles, q.k = g.c;
      q.a = uw, q.a_rs = g.c, q.a_cs = 1;
      q.b = v, q.b_rs = tiles, q.b_cs = 1;
      q.c = m, q.c_rs = tiles, q.c_cs = 1;
      q.batch = X, q.a_offsets = a_off.data(), q.b_offsets = b_off.data();
      q.c_offsets = c_off.data();
      backend::gemm_kernel<cuda>::run(q);
      cuda_launch("cuda_winograd_output", cuda_winograd_output<float>,
                  dim3(cuda_grid(tiles * g.k, cuda_winograd_threads)), dim3(cuda_winograd_threads),
                  g, static_cast<const float*>(m), n0, cnt, th, tw, p.bias, p.relu, p.y);
      cuda_winograd_choice().launches.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE
