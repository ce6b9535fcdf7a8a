// Host emulation of the CUDA toolkit's mma.h (see cuda_runtime.h here): the WMMA API for 16 x 16
// x 16 tiles of __half / __nv_bfloat16 with float accumulators.
//
// WMMA states its contract per tile: which elements of a fragment a lane holds is unspecified,
// and every lane of the warp must make the same calls. So here every lane holds the whole tile
// and computes all of it; the results kernels can observe (what store_matrix_sync writes) are
// the same as on a GPU, up to the order of the float additions inside one mma_sync. The
// documented requirements are checked: pointers 256-bit aligned, ldm a multiple of 16 bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessera/core/bfloat16.hpp>
#include <tessera/core/half.hpp>
#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  float x[rows * cols];  // every value, as float (exact for the 16-bit inputs)
};

namespace emu {
// The 16-bit formats decode as tessera's own types do (the same bits, the same layout).
inline float to_float(__half h) { return static_cast<float>(tessera::half::from_bits(h.x)); }
inline float to_float(__nv_bfloat16 h) {
  return static_cast<float>(tessera::bfloat16::from_bits(h.x));
}
inline void check(const void* p, unsigned ldm, size_t elem_bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * elem_bytes) % 16 != 0) {
    std::fprintf(stderr,
                 "tessera cuda emulation: wmma::%s with pointer %p (must be 256-bit aligned) and "
                 "ldm %u (must be a multiple of %zu elements)\n",
                 what, p, ldm, 16 / elem_bytes);
    std::abort();
  }
}
}  // namespace emu

template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "accumulator loads take a layout_t");
  emu::check(p, ldm, sizeof(T), "load_matrix_sync");
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = emu::to_float(
          std::is_same_v<Layout, row_major> ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]);
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                       layout_t layout) {
  emu::check(p, ldm, sizeof(float), "store_matrix_sync");
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]) = f.x[r * N + c];
}

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float v) {
  for (float& x : f.x) x = v;
}

template <int M, int N, int K, class T, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  float out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float s = c.x[i * N + j];
      for (int k = 0; k < K; ++k) s += a.x[i * K + k] * b.x[k * N + j];
      out[i * N + j] = s;
    }
  std::memcpy(d.x, out, sizeof out);
}

}  // namespace nvcuda::wmma
