// tessera/backend/cuda/gemm_split.cuh - split k for every GEMM kernel: a product with too few
// 128 x 128 output tiles to fill the GPU (a ResNet layer of 14 x 14 pixels, a batch-64 layer with
// one tile, a weight gradient summed over a batch of images) multiplies k in several parts at
// once, each into a float (int32, double) buffer of raw sums, and a second kernel adds the parts
// in a fixed order and applies the epilogue. Deterministic: the same parts, added in the same
// order, on every run.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gemm_args.cuh"
#include "launch.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// k of each part is a multiple of this (a multiple of every kernel's k step).
inline constexpr int64_t cuda_split_granule = 128;

/// The shortest part, in granules, on the tensor cores and on the SIMT kernel (cuda_gemm_splits).
inline constexpr int64_t cuda_split_min_tc = 4, cuda_split_min_simt = 1;

/// The number of parts dispatch splits k into: 0 (the default) lets cuda_gemm_splits decide;
/// n >= 1 asks for n wherever k has n granules (tests run every kernel split this way).
inline int& cuda_gemm_split_k() {
  static int n = 0;
  return n;
}

/// Products run with a split k (tests check that a split took place).
inline std::atomic<int64_t>& cuda_gemm_split_products() {
  static std::atomic<int64_t> n{0};
  return n;
}

/// How many parts to split the k of a product into: 1 unless its output tiles (`tiles`, over
/// the batch) fill less than half of the `sms` multiprocessors, and then enough to fill them,
/// each part at least min_granules deep (4, i.e. 512, on the tensor cores, whose part of that
/// depth takes about as long as the reduction; 1 on the SIMT kernel, 4 to 8 times slower), with
/// the buffer of raw sums (parts x batch x m x n x acc_bytes) under 256 MB. No fixed cap: a
/// product of one tile and a long k (a first convolution's weight gradient, k = images x
/// pixels) runs its k loop on every SM; the reduction reads each part once.
inline int64_t cuda_gemm_splits(int64_t tiles, int64_t batch, int64_t m, int64_t n, int64_t k,
                                int64_t acc_bytes, int64_t min_granules, int64_t sms) {
  const int64_t granules = (k + cuda_split_granule - 1) / cuda_split_granule;
  int64_t parts = cuda_gemm_split_k();
  if (parts == 0) {
    if (2 * tiles > sms) return 1;
    parts = std::min<int64_t>((sms + tiles - 1) / tiles, granules / min_granules);
  }
  parts = std::max<int64_t>(1, std::min(parts, granules));
  while (parts > 1 && parts * batch * m * n * acc_bytes > (int64_t{1} << 28)) --parts;
  return parts;
}

/// The epilogue of a split product: for each output (z, i, j) of `batch` matrices, the sum of
/// its `splits` parts in p.partial (part s of matrix z at [s * batch + z][m][n]), in order,
/// through cuda_gemm_store (alpha, beta, bias, ReLU, rounding). Integer sums wrap, as the
/// kernels' do. Rows over blockIdx.y (one division per row), columns over x.
template <class TA, class TB, class Acc, class TC>
__global__ void __launch_bounds__(256)
    cuda_gemm_split_reduce(cuda_gemm_args<TA, TB, Acc, TC> p, int64_t batch) {
  using Sum = typename std::conditional_t<std::is_integral_v<Acc>, std::make_unsigned<Acc>,
                                          std::type_identity<Acc>>::type;
  const int64_t mn = p.m * p.n, total = batch * mn;
  for (int64_t row = blockIdx.y; row < batch * p.m; row += gridDim.y) {
    const int64_t z = row / p.m, i = row - z * p.m;
    TC* const c = p.c + cuda_batch_offset(p.c_off, p.c_bs, z);
    const Acc* const part = p.partial + row * p.n;
    for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < p.n;
         j += int64_t{gridDim.x} * blockDim.x) {
      Sum s = static_cast<Sum>(part[j]);
      // Unrolled so that eight parts' loads are in flight at once (the adds stay in order): a
      // product of few outputs in many parts is this loop's latency.
#pragma unroll 8
      for (int64_t t = 1; t < p.splits; ++t) s += static_cast<Sum>(part[t * total + j]);
      cuda_gemm_store(p, c, i, j, static_cast<Acc>(s));
    }
  }
}

/// Runs launch(grid, args) for p (`batch` matrices on `grid`), with k split where the output
/// tiles are too few (cuda_gemm_splits, parts at least min_granules deep): then the launch gets
/// grid.z = batch x parts, a buffer of raw sums in its args, and cuda_gemm_split_reduce finishes
/// the product. `launch` starts a GEMM kernel (every one honours the split: it loops z over batch
/// x p.splits and stores through cuda_gemm_store_part), or returns false having launched
/// nothing; so does this.
template <class TA, class TB, class Acc, class TC, class Launch>
bool cuda_gemm_run_split(const cuda_gemm_args<TA, TB, Acc, TC>& p, int64_t batch, dim3 grid,
                         int64_t min_granules, Launch launch) {
  const int64_t tiles = int64_t{grid.x} * grid.y * batch;
  const int64_t parts = p.alpha == Acc(0)
                            ? 1
                            : cuda_gemm_splits(tiles, batch, p.m, p.n, p.k, int64_t{sizeof(Acc)},
                                               min_granules, cuda_sm_count());
  if (parts <= 1) return launch(grid, p);
  const int64_t granules = (p.k + cuda_split_granule - 1) / cuda_split_granule;
  cuda_gemm_args<TA, TB, Acc, TC> q = p;
  q.k_chunk = (granules + parts - 1) / parts * cuda_split_granule;
  q.splits = (p.k + q.k_chunk - 1) / q.k_chunk;  // no empty part
  const cuda_scratch partial(static_cast<size_t>(q.splits * batch * p.m * p.n) * sizeof(Acc));
  q.partial = static_cast<Acc*>(partial.get());
  dim3 g = grid;
  g.z = static_cast<unsigned>(std::min<int64_t>(batch * q.splits, 65535));
  if (!launch(g, q)) return false;
  const dim3 rg(static_cast<unsigned>(std::min<int64_t>((p.n + 255) / 256, 64)),
                static_cast<unsigned>(std::min<int64_t>(batch * p.m, 65535)));
  cuda_launch("cuda_gemm_split_reduce", cuda_gemm_split_reduce<TA, TB, Acc, TC>, rg, dim3(256), q,
              batch);
  cuda_gemm_split_products().fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace detail
TESSERA_END_NAMESPACE
