// tessera/backend/cuda/winograd.cuh - float 3x3 stride-1 convolutions as Winograd F(4x4, 3x3)
// (conv_algorithm::winograd; the tile transforms in detail/winograd.hpp): the forward pass, and
// through it the input gradients of stride-1 convolutions (conv.cuh runs those as forward
// convolutions); and their weight gradients as F(3x3, 4x4) (cuda_winograd_weight_grad: the same
// input transform, dy's 4x4 tiles as the taps, the products summed over the tiles).
//
// Over a batch the per-position products are 36 matrix products, M[xi] = U[xi] V[xi], with U[xi]
// the transformed weights ([k][c]) and V[xi] the transformed input tiles ([c][tiles]), which the
// GEMM kernels compute (the SIMT kernel for float). Four passes, each a launch: weights -> U, per
// chunk of images input -> V, the batched product U V -> M, and M -> y through A (bias and ReLU
// added there). V and M live in device memory (36 / 16 of the input's and the output's size);
// images are taken in chunks so that both fit cuda_winograd_scratch_bytes().
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "../../core/matmul_precision.hpp"
#include "../../kernel/conv_problem.hpp"
#include "../../kernel/gemm_problem.hpp"
#include "../../kernel/winograd.hpp"
#include "gemm.cuh"
#include "launch.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_winograd_threads = 256;

/// Element e of a launch over a chunk's (image, channel, tile row, tile column), tile columns
/// fastest: its tile (tx, ty) of image b and channel ch, and the tile's number over the chunk,
/// (b * th + ty) * tw + tx, the order in which V, M and E store tiles.
struct cuda_winograd_tile_at {
  int64_t tx, ty, ch, b, tile;
  TESSERA_HOST_DEVICE cuda_winograd_tile_at(int64_t e, int64_t th, int64_t tw, int64_t channels)
      : tx(e % tw),
        ty(e / tw % th),
        ch(e / (tw * th) % channels),
        b(e / (tw * th * channels)),
        tile((b * th + ty) * tw + tx) {}
};

/// U[xi][o][ci] = (G w[o][ci] G^T)[xi] for every output channel o < k and input channel ci < c
/// of w [k][c][3][3]; position xi = 6 * row + column, matrices of k * c apart.
template <class T>
__global__ void __launch_bounds__(cuda_winograd_threads)
    cuda_winograd_weights(int64_t k, int64_t c, const T* w, T* u) {
  const int64_t total = k * c, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    T t[36];
    winograd_weight_tile(w + e * 9, t);
    for (int xi = 0; xi < 36; ++xi) u[xi * total + e] = t[xi];
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
    const cuda_winograd_tile_at at(e, th, tw, g.c);
    const T* plane = x + ((n0 + at.b) * g.c + at.ch) * g.h * g.w;
    const int64_t y0 = 4 * at.ty - g.pad_top, x0 = 4 * at.tx - g.pad_left;
    T d[6][6];
    for (int i = 0; i < 6; ++i) {
      const int64_t iy = y0 + i;
      for (int j = 0; j < 6; ++j) {
        const int64_t ix = x0 + j;
        d[i][j] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? plane[iy * g.w + ix] : T(0);
      }
    }
    T t[36];
    winograd_input_tile(d, t);
    for (int xi = 0; xi < 36; ++xi) v[(xi * g.c + at.ch) * tiles + at.tile] = t[xi];
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
    const cuda_winograd_tile_at at(e, th, tw, g.k);
    T mt[36], r[4][4];
    for (int xi = 0; xi < 36; ++xi) mt[xi] = m[(xi * g.k + at.ch) * tiles + at.tile];
    winograd_output_tile(mt, r);
    const T add = bias ? bias[at.ch] : T(0);
    T* plane = y + ((n0 + at.b) * g.k + at.ch) * g.ho * g.wo;
    for (int i = 0; i < 4 && 4 * at.ty + i < g.ho; ++i)
      for (int j = 0; j < 4 && 4 * at.tx + j < g.wo; ++j) {
        const T val = r[i][j] + add;
        plane[(4 * at.ty + i) * g.wo + 4 * at.tx + j] =
            relu && val < T(0) ? T(0) : val;  // NaN stays
      }
  }
}

/// E[xi][o][t] = (G' e G'^T)[xi] for the 4x4 output gradients e of tile t (numbered as in
/// cuda_winograd_input) of output channel o, images n0 .. n0 + nb - 1; zero past ho or wo. The
/// weight gradient's "taps" (F(3x3, 4x4)).
template <class T>
__global__ void __launch_bounds__(cuda_winograd_threads)
    cuda_winograd_grad(conv_geometry g, const T* dy, int64_t n0, int64_t nb, int64_t th, int64_t tw,
                       T* e_out) {
  const int64_t tiles = nb * th * tw, total = tiles * g.k, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const cuda_winograd_tile_at at(e, th, tw, g.k);
    const T* plane = dy + ((n0 + at.b) * g.k + at.ch) * g.ho * g.wo;
    T d[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t oy = 4 * at.ty + i, ox = 4 * at.tx + j;
        d[i][j] = oy < g.ho && ox < g.wo ? plane[oy * g.wo + ox] : T(0);
      }
    T t[36];
    winograd_grad_tile(d, t);
    for (int xi = 0; xi < 36; ++xi) e_out[(xi * g.k + at.ch) * tiles + at.tile] = t[xi];
  }
}

/// dw[o][ci] = A'^T M[.][o][ci] A' ([k][c][3][3]) from the products M[xi] ([k][c]) summed over
/// every tile of the batch.
template <class T>
__global__ void __launch_bounds__(cuda_winograd_threads)
    cuda_winograd_taps(int64_t k, int64_t c, const T* m, T* dw) {
  const int64_t total = k * c, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    T mt[36], r[3][3];
    for (int xi = 0; xi < 36; ++xi) mt[xi] = m[xi * total + e];
    winograd_taps_tile(mt, r);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) dw[e * 9 + i * 3 + j] = r[i][j];
  }
}

/// The kill switch of the Winograd path (tests compare both paths on the same inputs) and the
/// count of its chunks of images (one output transform per chunk of a forward pass, one dy
/// transform per chunk of a weight gradient).
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

/// How a CUDA Winograd pass over g is chunked: th x tw tiles per image, per_image bytes of scratch
/// per image (V and M, or V and E: 36 (c + k) floats per tile), images per chunk.
struct cuda_winograd_plan {
  int64_t th, tw, per_image, images;
};

/// The plan for g, or nothing where the CUDA Winograd path does not take it: the user has not
/// chosen conv_algorithm::winograd or the layer does not qualify (winograd_chosen), products run
/// on tf32 tensor cores (matmul_precision::high), the path is switched off, there are no images
/// or outputs, or one image's scratch exceeds cuda_winograd_scratch_bytes().
inline std::optional<cuda_winograd_plan> cuda_winograd_plan_for(const conv_geometry& g) {
  if (!winograd_chosen(g) || get_float32_matmul_precision() != matmul_precision::highest ||
      !cuda_winograd_choice().enabled.load(std::memory_order_relaxed) || g.n == 0 || g.ho == 0 ||
      g.wo == 0)
    return std::nullopt;
  cuda_winograd_plan pl;
  pl.th = (g.ho + 3) / 4, pl.tw = (g.wo + 3) / 4;
  pl.per_image = winograd_positions * (g.c + g.k) * pl.th * pl.tw * int64_t{sizeof(float)};
  if (pl.per_image > cuda_winograd_scratch_bytes()) return std::nullopt;
  pl.images = std::max<int64_t>(1, std::min(g.n, cuda_winograd_scratch_bytes() / pl.per_image));
  return pl;
}

/// For each chunk of pl's images: the inputs under its output tiles to V at v ([36][c][tiles],
/// cuda_winograd_input), then body(n0, count, tiles), which finds its own buffer after V (at
/// v + 36 c tiles) and runs the rest of the chunk.
template <class Body>
void cuda_winograd_chunks(const conv_geometry& g, const cuda_winograd_plan& pl, const float* x,
                          float* v, Body&& body) {
  for (int64_t n0 = 0; n0 < g.n; n0 += pl.images) {
    const int64_t cnt = std::min(pl.images, g.n - n0), tiles = cnt * pl.th * pl.tw;
    cuda_launch("cuda_winograd_input", cuda_winograd_input<float>,
                dim3(cuda_grid(tiles * g.c, cuda_winograd_threads)), dim3(cuda_winograd_threads), g,
                x, n0, cnt, pl.th, pl.tw, v);
    body(n0, cnt, tiles);
  }
}

/// The 36 products q[xi] as one batched GEMM: q's a, b and c are those of position 0, position xi
/// starting a_step, b_step and c_step floats later.
inline void cuda_winograd_products(gemm_problem<float, float, float> q, int64_t a_step,
                                   int64_t b_step, int64_t c_step) {
  constexpr int64_t X = winograd_positions;
  std::vector<int64_t> a_off(X), b_off(X), c_off(X);
  for (int64_t xi = 0; xi < X; ++xi) {
    const auto i = static_cast<size_t>(xi);
    a_off[i] = xi * a_step, b_off[i] = xi * b_step, c_off[i] = xi * c_step;
  }
  q.batch = X, q.a_offsets = a_off.data(), q.b_offsets = b_off.data();
  q.c_offsets = c_off.data();
  backend::gemm_kernel<cuda>::run(q);
}

/// Runs p as Winograd F(4x4, 3x3) and returns true, or returns false having done nothing: p is not
/// float x float into float, or cuda_winograd_plan_for refuses the layer.
template <class TX, class TW, class Acc>
bool cuda_winograd_forward(const conv_forward_problem<TX, TW, Acc>& p) {
  if constexpr (!std::is_same_v<TX, float> || !std::is_same_v<TW, float> ||
                !std::is_same_v<Acc, float>) {
    (void)p;
    return false;
  } else {
    const conv_geometry& g = p.g;
    const std::optional<cuda_winograd_plan> pl = cuda_winograd_plan_for(g);
    if (!pl) return false;
    constexpr int64_t X = winograd_positions;
    cuda_scratch u(static_cast<size_t>(X * g.k * g.c) * sizeof(float));
    cuda_scratch vm(static_cast<size_t>(pl->images * pl->per_image));
    auto* uw = static_cast<float*>(u.get());
    auto* v = static_cast<float*>(vm.get());
    cuda_launch("cuda_winograd_weights", cuda_winograd_weights<float>,
                dim3(cuda_grid(g.k * g.c, cuda_winograd_threads)), dim3(cuda_winograd_threads), g.k,
                g.c, p.w, uw);
    cuda_winograd_chunks(g, *pl, p.x, v, [&](int64_t n0, int64_t cnt, int64_t tiles) {
      float* m = v + X * g.c * tiles;       // M follows this chunk's V
      gemm_problem<float, float, float> q;  // M[xi] = U[xi] V[xi], 36 products
      q.m = g.k, q.n = tiles, q.k = g.c;
      q.a = uw, q.a_rs = g.c, q.a_cs = 1;
      q.b = v, q.b_rs = tiles, q.b_cs = 1;
      q.c = m, q.c_rs = tiles, q.c_cs = 1;
      cuda_winograd_products(q, g.k * g.c, g.c * tiles, g.k * tiles);
      cuda_launch("cuda_winograd_output", cuda_winograd_output<float>,
                  dim3(cuda_grid(tiles * g.k, cuda_winograd_threads)), dim3(cuda_winograd_threads),
                  g, static_cast<const float*>(m), n0, cnt, pl->th, pl->tw, p.bias, p.relu, p.y);
      cuda_winograd_choice().launches.fetch_add(1, std::memory_order_relaxed);
    });
    return true;
  }
}

/// The weight gradient of p as Winograd F(3x3, 4x4), returning true, or false having done nothing
/// (as cuda_winograd_forward). Per chunk of images:
/// the inputs under the output tiles to V (cuda_winograd_input, as the forward pass), dy's tiles
/// to E (cuda_winograd_grad), and the 36 products M[xi] += E[xi] V[xi]^T ([k][c], k of the
/// product running over the chunk's tiles) as one batched GEMM, chunks adding in order; then M to
/// dw through A' (cuda_winograd_taps). dw is overwritten.
template <class TX, class TG, class Acc>
bool cuda_winograd_weight_grad(const conv_backward_weight_problem<TX, TG, Acc>& p) {
  if constexpr (!std::is_same_v<TX, float> || !std::is_same_v<TG, float> ||
                !std::is_same_v<Acc, float>) {
    (void)p;
    return false;
  } else {
    const conv_geometry& g = p.g;
    const std::optional<cuda_winograd_plan> pl = cuda_winograd_plan_for(g);
    if (!pl) return false;
    constexpr int64_t X = winograd_positions;
    cuda_scratch sums(static_cast<size_t>(X * g.k * g.c) * sizeof(float));
    cuda_scratch ve(static_cast<size_t>(pl->images * pl->per_image));
    auto* m = static_cast<float*>(sums.get());
    auto* v = static_cast<float*>(ve.get());
    cuda_winograd_chunks(g, *pl, p.x, v, [&](int64_t n0, int64_t cnt, int64_t tiles) {
      float* e = v + X * g.c * tiles;  // E follows this chunk's V
      cuda_launch("cuda_winograd_grad", cuda_winograd_grad<float>,
                  dim3(cuda_grid(tiles * g.k, cuda_winograd_threads)), dim3(cuda_winograd_threads),
                  g, p.dy, n0, cnt, pl->th, pl->tw, e);
      gemm_problem<float, float, float> q;  // M[xi] (+)= E[xi] V[xi]^T, 36 products
      q.m = g.k, q.n = g.c, q.k = tiles;
      q.a = e, q.a_rs = tiles, q.a_cs = 1;
      q.b = v, q.b_rs = 1, q.b_cs = tiles;  // V[xi] is [c][tiles]: its transpose
      q.c = m, q.c_rs = g.c, q.c_cs = 1;
      q.beta = n0 == 0 ? 0.0f : 1.0f;
      cuda_winograd_products(q, g.k * tiles, g.c * tiles, g.k * g.c);
      cuda_winograd_choice().launches.fetch_add(1, std::memory_order_relaxed);
    });
    cuda_launch("cuda_winograd_taps", cuda_winograd_taps<float>,
                dim3(cuda_grid(g.k * g.c, cuda_winograd_threads)), dim3(cuda_winograd_threads), g.k,
                g.c, static_cast<const float*>(m), p.dw);
    return true;
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE
