// Host emulation of the CUDA toolkit's mma.h (see cuda_runtime.h here): the WMMA API for
// 16 x 16 x 16 tiles of __half / __nv_bfloat16 (float accumulators), 16 x 16 x 8 tiles of
// precision::tf32 (float accumulators) and 16 x 16 x 16 tiles of signed / unsigned char (int
// accumulators).
//
// WMMA states its contract per tile: which elements of a fragment a lane holds is unspecified,
// and every lane of the warp must make the same calls. So here every lane loads the whole tile,
// but mma_sync computes, and store_matrix_sync writes, only the lane's share of the result
// (element e of the tile belongs to lane e % 32), as on a GPU each lane owns part of the
// accumulators: the results meet only in memory, and the warp does the work once, not 32
// times. What store_matrix_sync writes is the same as on a GPU, up to the order of the float
// additions inside one mma_sync. The documented requirements are checked: pointers 256-bit
// aligned, ldm a multiple of 16 bytes.
// tf32 inputs are read as the hardware reads them, from the top 19 bits of each float (a kernel
// that forgets __float_to_tf32 truncates, as on a GPU); integer products wrap in 32 bits.
//
// Below WMMA, the raw mma.sync of tessera's mma_sync.cuh (16-bit, tf32, 8-bit integer and fp8
// inputs): warp collectives whose fragment layouts are modelled lane by lane
// (tessera_cuda_emulation::mma_m16n8k16, mma_m16n8k8_tf32, mma_m16n8k32); and Hopper's
// wgmma.mma_async with both operands in shared memory (wgmma_m64nN), whose descriptors and
// swizzled layouts are decoded as the PTX ISA specifies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tessera/core/bfloat16.hpp>
#include <tessera/core/float8.hpp>
#include <tessera/core/half.hpp>
#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

namespace emu {
template <class T>
inline constexpr bool is_int8 = std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char>;
// What a fragment of element type T holds per value: exact for every input type.
template <class T>
using value_t = std::conditional_t<is_int8<T> || std::is_same_v<T, int>, int32_t, float>;
// What load_matrix_sync reads for element type T.
template <class T>
using memory_t = std::conditional_t<std::is_same_v<T, precision::tf32>, float, T>;
}  // namespace emu

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  emu::value_t<T> x[rows * cols];  // every value of the tile
};

namespace emu {
// The 16-bit formats decode as tessera's own types do (the same bits, the same layout).
// __half through a table of its 65536 values: every lane loads the whole tile, and decoding
// each element was a fifth of the emulated tensor-core tests' time.
inline float to_value(__half h) {
  static const std::unique_ptr<float[]> table = [] {
    auto t = std::make_unique<float[]>(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits)
      t[bits] = static_cast<float>(tessera::half::from_bits(static_cast<uint16_t>(bits)));
    return t;
  }();
  return table[h.x];
}
inline float to_value(__nv_bfloat16 h) {
  return static_cast<float>(tessera::bfloat16::from_bits(h.x));
}
inline float to_value(float f) { return f; }
inline int32_t to_value(signed char c) { return c; }
inline int32_t to_value(unsigned char c) { return c; }
// A tf32 operand as the tensor cores read it: sign, exponent and the top 10 mantissa bits.
inline float tf32_operand(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u &= 0xffffe000u;
  std::memcpy(&f, &u, 4);
  return f;
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
// The calling thread's lane: its linear index in the block, modulo the warp size.
inline int lane() {
  return static_cast<int>((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) %
                          32);
}
}  // namespace emu

/// cvt.rna.tf32.f32: round to the nearest tf32 value, ties away from zero (the result is a
/// float whose low 13 mantissa bits are 0); NaN and infinities pass through.
inline float __float_to_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const emu::memory_t<T>* p,
                      unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "accumulator loads take a layout_t");
  emu::check(p, ldm, sizeof(*p), "load_matrix_sync");
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = emu::to_value(
          std::is_same_v<Layout, row_major> ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]);
}

template <int M, int N, int K, class Acc>
void store_matrix_sync(Acc* p, const fragment<accumulator, M, N, K, Acc>& f, unsigned ldm,
                       layout_t layout) {
  static_assert(std::is_same_v<Acc, float> || std::is_same_v<Acc, int>);
  emu::check(p, ldm, sizeof(Acc), "store_matrix_sync");
  // The lane's share only; the warp's other lanes write the rest.
  for (int e = emu::lane(); e < M * N; e += 32) {
    const int r = e / N, c = e % N;
    (layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]) = f.x[e];
  }
}

template <class Use, int M, int N, int K, class T, class Layout, class V>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, V v) {
  for (auto& x : f.x) x = static_cast<emu::value_t<T>>(v);
}

template <int M, int N, int K, class T, class LA, class LB, class Acc>
void mma_sync(fragment<accumulator, M, N, K, Acc>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b,
              const fragment<accumulator, M, N, K, Acc>& c) {
  static_assert(std::is_same_v<Acc, int> == emu::is_int8<T>, "int8 inputs accumulate in int");
  static_assert(std::is_same_v<T, precision::tf32> == (K == 8), "tf32 tiles are 16 x 16 x 8");
  const auto tf32_or_value = [](auto x) {
    if constexpr (std::is_same_v<T, precision::tf32>)
      return emu::tf32_operand(x);
    else
      return x;
  };
  // The lane's outputs (element e for e % 32 == lane): each adds its K products to c in k order,
  // reading the operands as the tensor cores read them. The lane's other elements keep c's
  // values; no lane stores them.
  // Integers sum in uint32, wrapping like the hardware.
  using S = std::conditional_t<std::is_same_v<Acc, int>, uint32_t, float>;
  if (&d != &c) d = c;
  for (int e = emu::lane(); e < M * N; e += 32) {
    const int i = e / N, j = e % N;
    S sum = static_cast<S>(c.x[e]);
    for (int k = 0; k < K; ++k)
      sum += static_cast<S>(tf32_or_value(a.x[i * K + k]) * tf32_or_value(b.x[k * N + j]));
    d.x[e] = static_cast<Acc>(sum);
  }
}

}  // namespace nvcuda::wmma

namespace tessera_cuda_emulation {

/// One lane's registers of an mma.sync: A's four, B's two.
struct mma_operands {
  uint32_t a[4], b[2];
};

/// The mma.sync operands of the 32 lanes of the calling thread's warp (lane_ops(L): lane L's).
struct mma_lanes {
  const unsigned char* lanes;
  mma_operands operator()(int lane) const {
    mma_operands o;
    std::memcpy(&o, lanes + lane * warp_slot_bytes, sizeof o);
    return o;
  }
};

/// Publishes this lane's operands and returns every lane's (a warp collective, see warp_share).
inline mma_lanes share_mma_operands(const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const mma_operands mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  return {warp_share(&mine, sizeof mine, "mma.sync")};
}

/// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 with d = c (in place):
/// d += A (16 x 16) B (16 x 8), from the warp's fragments as the PTX ISA lays them out. Lane L,
/// with g = L / 4 and t = L % 4, holds A(g, 2t..2t+1) in a[0], A(g + 8, 2t..) in a[1], A(g, 2t +
/// 8..) in a[2], A(g + 8, 2t + 8..) in a[3]; B(2t..2t+1, g) in b[0], B(2t + 8.., g) in b[1]; and
/// D(g, 2t..2t+1) in d[0..1], D(g + 8, 2t..2t+1) in d[2..3]; the lower k or column in the low
/// half. The k terms are added to d in order, in float.
template <class In>
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const mma_lanes lane_ops = share_mma_operands(a, b);
  const auto half_of = [](uint32_t reg, int k) {
    return static_cast<uint16_t>(k % 2 ? reg >> 16 : reg & 0xffffu);
  };
  const auto decode = [](uint16_t bits) {
    if constexpr (std::is_same_v<In, __half>)
      return static_cast<float>(tessera::half::from_bits(bits));
    else
      return static_cast<float>(tessera::bfloat16::from_bits(bits));
  };
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  for (int r = 0; r < 4; ++r) {
    const int row = g + (r >= 2 ? 8 : 0), col = 2 * t + r % 2;
    float s = d[r];
    for (int k = 0; k < 16; ++k) {
      const mma_operands ao = lane_ops(row % 8 * 4 + k % 8 / 2);
      const mma_operands bo = lane_ops(col * 4 + k % 8 / 2);
      const float av = decode(half_of(ao.a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k));
      const float bv = decode(half_of(bo.b[k >= 8 ? 1 : 0], k));
      s += av * bv;
    }
    d[r] = s;
  }
}

/// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 with d = c (in place): d += A (16 x 8)
/// B (8 x 8) in float. Lane L, with g = L / 4 and t = L % 4, holds A(g, t) in a[0], A(g + 8, t)
/// in a[1], A(g, t + 4) in a[2], A(g + 8, t + 4) in a[3]; B(t, g) in b[0], B(t + 4, g) in b[1];
/// D as for mma_m16n8k16. Each register is a float read as the tensor cores read tf32 (its low
/// 13 mantissa bits ignored, as nvcuda::wmma::emu::tf32_operand); the k terms are added to d in
/// order.
inline void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const mma_lanes lane_ops = share_mma_operands(a, b);
  const auto value_of = [](uint32_t reg) {
    float f;
    std::memcpy(&f, &reg, 4);
    return nvcuda::wmma::emu::tf32_operand(f);
  };
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  for (int r = 0; r < 4; ++r) {
    const int row = g + (r >= 2 ? 8 : 0), col = 2 * t + r % 2;
    float s = d[r];
    for (int k = 0; k < 8; ++k) {
      const mma_operands ao = lane_ops(row % 8 * 4 + k % 4);
      const mma_operands bo = lane_ops(col * 4 + k % 4);
      s += value_of(ao.a[(row >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)]) * value_of(bo.b[k >= 4 ? 1 : 0]);
    }
    d[r] = s;
  }
}

/// mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.{s8,u8}.s32 with d = c (in place): d += A (16
/// x 32) B (32 x 8) in int32, wrapping; with fp8 inputs (In = tessera::float8_e4m3 or
/// float8_e5m2, .f32.e4m3.e4m3.f32 / .e5m2) in float, the k terms added to d in order. Lane L, with
/// g = L / 4 and t = L % 4, holds A(g, 4t..4t+3) in a[0], A(g + 8, 4t..) in a[1], A(g, 4t + 16..)
/// in a[2], A(g + 8, 4t + 16..) in a[3]; B(4t..4t+3, g) in b[0], B(4t + 16.., g) in b[1], the lower
/// k in the lower byte; D as for mma_m16n8k16.
template <class In, class D>
void mma_m16n8k32(D (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  constexpr bool integers = std::is_integral_v<In>;
  static_assert(std::is_same_v<D, std::conditional_t<integers, int32_t, float>>);
  const mma_lanes lane_ops = share_mma_operands(a, b);
  // Element k of a register: its byte, as an int32 or (fp8) a float.
  const auto value_of = [](uint32_t reg, int k) {
    const auto byte = static_cast<unsigned char>(reg >> (8 * (k % 4)));
    if constexpr (integers)
      return static_cast<int32_t>(static_cast<In>(byte));
    else
      return static_cast<float>(In::from_bits(byte));
  };
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  for (int r = 0; r < 4; ++r) {
    const int row = g + (r >= 2 ? 8 : 0), col = 2 * t + r % 2;
    // Integers sum in uint32 (wrapping as on a GPU), fp8 products in float.
    std::conditional_t<integers, uint32_t, float> s = static_cast<decltype(s)>(d[r]);
    for (int k = 0; k < 32; ++k) {
      const mma_operands ao = lane_ops(row % 8 * 4 + k % 16 / 4);
      const mma_operands bo = lane_ops(col * 4 + k % 16 / 4);
      const auto av = value_of(ao.a[(row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0)], k);
      const auto bv = value_of(bo.b[k >= 16 ? 1 : 0], k);
      s += static_cast<decltype(s)>(av * bv);
    }
    d[r] = static_cast<D>(s);
  }
}

/// wgmma.mma_async.sync.aligned.m64n{n}k{K} with both operands in shared memory, scale-d true:
/// d += A (64 x K) B (K x n) for the calling thread's share of the warpgroup's accumulators
/// (thread L of the warpgroup, warp w = L / 32, g = L % 32 / 4, t = L % 4, holds D(16 w + g, 8 j
/// + 2 t + c) in d[4 j + c] and D(16 w + g + 8, ..) in d[4 j + 2 + c]). K is 32 bytes of In:
/// __half, __nv_bfloat16 (k16), float read as tf32 (k8: the low 13 mantissa bits ignored),
/// tessera::float8_e4m3 / float8_e5m2 (k32), all into float d; signed / unsigned char (k32) into
/// int32 d, wrapping. The operands are read where the descriptors say, as the PTX ISA defines the
/// canonical layouts in the 128-byte swizzle mode (the only mode tessera uses; any other aborts):
/// element (o, k) of an operand (o its row of A or column of B), of `size` bytes, lies at
///  - k-major (no transpose): start + (o / 8) sbo + (o % 8) 128 + size k,
///  - m/n-major (transposed, 16-bit only): start + (o / 64) lbo + (k / 8) sbo + (k % 8) 128 + 2
///    (o % 64),
/// with the 16-byte chunk bits of the address (4-6) XORed with its bits 7-9. Asynchronous, as on
/// a GPU: this records the product, which runs when the thread's wgmma.wait_group lets its group
/// complete (wgmma_issue in cuda_runtime.h), so the kernel's commits and waits are checked.
template <class In, class D>
void wgmma_m64nN(D* d, int n, uint64_t desc_a, uint64_t desc_b, bool trans_a, bool trans_b);

/// wgmma_m64nN's product, run now.
template <class In, class D>
void wgmma_m64nN_now(D* d, int n, uint64_t desc_a, uint64_t desc_b, bool trans_a, bool trans_b) {
  constexpr bool integers = std::is_integral_v<In>;
  constexpr int size = static_cast<int>(sizeof(In)), K = 32 / size;
  static_assert(std::is_same_v<D, std::conditional_t<integers, int32_t, float>>);
  struct descriptor {
    uint32_t start, lbo, sbo;
  };
  const auto decode = [](uint64_t x, const char* which) {
    if (x >> 62 != 1 || (x >> 49 & 7) != 0) {
      std::fprintf(stderr,
                   "tessera cuda emulation: wgmma %s descriptor %#llx: only the 128-byte swizzle "
                   "with base offset 0 is modelled\n",
                   which, static_cast<unsigned long long>(x));
      std::abort();
    }
    return descriptor{static_cast<uint32_t>(x & 0x3fff) << 4,
                      static_cast<uint32_t>(x >> 16 & 0x3fff) << 4,
                      static_cast<uint32_t>(x >> 32 & 0x3fff) << 4};
  };
  if ((trans_a || trans_b) && size != 2) {
    std::fprintf(stderr, "tessera cuda emulation: wgmma transposes only 16-bit operands\n");
    std::abort();
  }
  const descriptor da = decode(desc_a, "A"), db = decode(desc_b, "B");
  // Element (o, k), as an int32 or a float.
  const auto element = [](const descriptor& dd, int o, int k, bool mn_major) {
    uint32_t at =
        mn_major ? dd.start + (o / 64) * dd.lbo + (k / 8) * dd.sbo + (k % 8) * 128 + (o % 64) * 2
                 : dd.start + (o / 8) * dd.sbo + (o % 8) * 128 + k * size;
    at = swizzle_128b(at);
    if (at + size > dynamic_smem_bytes) {
      std::fprintf(stderr,
                   "tessera cuda emulation: wgmma reads shared byte %u of the %zu the launch "
                   "asked for\n",
                   at, dynamic_smem_bytes);
      std::abort();
    }
    In x;
    std::memcpy(&x, dynamic_smem + at, size);
    if constexpr (integers)
      return static_cast<int32_t>(x);
    else if constexpr (std::is_same_v<In, float>)
      return nvcuda::wmma::emu::tf32_operand(x);
    else if constexpr (std::is_same_v<In, __half> || std::is_same_v<In, __nv_bfloat16>)
      return nvcuda::wmma::emu::to_value(x);
    else
      return static_cast<float>(x);  // fp8
  };
  if (blockDim.y != 1 || blockDim.z != 1 || (threadIdx.x / 128 + 1) * 128 > blockDim.x) {
    std::fprintf(stderr,
                 "tessera cuda emulation: wgmma from a warpgroup the block lacks a warp of\n");
    std::abort();
  }
  const int l = static_cast<int>(threadIdx.x % 128), w = l / 32, g = l % 32 / 4, t = l % 4;
  // The thread's two rows of A, read once; then its two columns of B in each 8-column group.
  using value = decltype(element(da, 0, 0, false));
  value a[2][K], b[2][K];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < K; ++k) a[h][k] = element(da, 16 * w + g + 8 * h, k, trans_a);
  for (int j = 0; j < n / 8; ++j) {
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < K; ++k) b[c][k] = element(db, 8 * j + 2 * t + c, k, trans_b);
    for (int r = 0; r < 4; ++r) {
      // Integers sum in uint32 (wrapping as on a GPU), the others in float.
      std::conditional_t<integers, uint32_t, float> s = static_cast<decltype(s)>(d[4 * j + r]);
      for (int k = 0; k < K; ++k) s += static_cast<decltype(s)>(a[r / 2][k] * b[r % 2][k]);
      d[4 * j + r] = static_cast<D>(s);
    }
  }
}

template <class In, class D>
void wgmma_m64nN(D* d, int n, uint64_t desc_a, uint64_t desc_b, bool trans_a, bool trans_b) {
  wgmma_issue([=] { wgmma_m64nN_now<In>(d, n, desc_a, desc_b, trans_a, trans_b); });
}

}  // namespace tessera_cuda_emulation
