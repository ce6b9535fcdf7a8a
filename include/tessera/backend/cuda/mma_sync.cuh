// tessera/backend/cuda/mma_sync.cuh - the warp-level tensor-core instructions below WMMA:
// ldmatrix (shared memory to fragments, sm_75+), mma.sync m16n8k16 with 16-bit inputs and float
// accumulation and mma.sync m16n8k32 with 8-bit integer inputs and int32 accumulation (sm_80+)
// or fp8 inputs and float accumulation (sm_89+): what gemm_mma.cuh is built from.
//
// Why raw instructions beside WMMA: their fragment layouts are specified lane by lane in the PTX
// ISA, so a kernel can choose its shared-memory layout (an XOR swizzle, conflict-free for both
// the copies in and ldmatrix out) and read fragments straight from it; WMMA takes only a pointer
// and a leading dimension, which rules swizzles out.
//
// Each wrapper has one meaning on a GPU (inline PTX) and in the host emulation of the CUDA
// runtime (tests/cuda_emu), which models the fragment layouts lane by lane, so a kernel with a
// wrong lane mapping fails its tests there too.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "../../core/float8.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (Trans: .trans): four 8 x 8 matrices of 16-bit
/// elements; lanes 8i .. 8i + 7 pass the addresses of matrix i's 8 rows (16 bytes each, 16-byte
/// aligned, in shared memory). Register i of lane L receives elements 2 (L % 4) and 2 (L % 4) + 1
/// of row L / 4 of matrix i; with Trans, of column L / 4 (the transposed matrix's row). Every
/// lane of the warp must call it together.
template <bool Trans>
__device__ __forceinline__ void cuda_ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::ldmatrix_x4(r, row, Trans);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#else
  (void)r, (void)row;  // callers run only where the code is built for sm_80
  __trap();
#endif
}

/// d += A B on the tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.In.In.f32 (In = __half
/// or __nv_bfloat16). With g = lane / 4, t = lane % 4: a[0] holds A(g, 2t .. 2t + 1), a[1]
/// A(g + 8, 2t ..), a[2] A(g, 2t + 8 ..), a[3] A(g + 8, 2t + 8 ..); b[0] B(2t .. 2t + 1, g), b[1]
/// B(2t + 8 .., g); d[0..1] D(g, 2t .. 2t + 1), d[2..3] D(g + 8, 2t .. 2t + 1). Within a
/// register the lower k sits in the low 16 bits (what ldmatrix delivers).
template <class In>
__device__ __forceinline__ void cuda_mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
  static_assert(std::is_same_v<In, __half> || std::is_same_v<In, __nv_bfloat16>);
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::mma_m16n8k16<In>(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<In, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

/// d += A B on the integer tensor cores: mma.sync.aligned.m16n8k32.row.col.s32.In.In.s32 (In =
/// signed char: .s8, unsigned char: .u8), wrapping in 32 bits like the other kernels. The
/// registers hold the same bytes as cuda_mma_16816's: with g = lane / 4, t = lane % 4, a[0] holds
/// A(g, 4t .. 4t + 3), a[1] A(g + 8, 4t ..), a[2] A(g, 4t + 16 ..), a[3] A(g + 8, 4t + 16 ..);
/// b[0] B(4t .. 4t + 3, g), b[1] B(4t + 16 .., g); lower k in the lower byte; d as there. So
/// ldmatrix (without .trans) of k-contiguous rows feeds it exactly as it feeds the 16-bit one.
template <class In>
__device__ __forceinline__ void cuda_mma_16832(int32_t (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
  static_assert(std::is_same_v<In, signed char> || std::is_same_v<In, unsigned char>);
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::mma_m16n8k32<In>(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<In, signed char>)
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

/// d += A B on the fp8 tensor cores: mma.sync.aligned.m16n8k32.row.col.f32.In.In.f32 (In =
/// float8_e4m3: .e4m3, float8_e5m2: .e5m2; sm_89 and newer), with the register layout of the
/// 8-bit integer form (cuda_mma_16832). The products are exact in float; how the instruction
/// adds its 32 products to d is NVIDIA's (docs/cuda.md, "fp8").
template <class In>
__device__ __forceinline__ void cuda_mma_16832_fp8(float (&d)[4], const uint32_t (&a)[4],
                                                   const uint32_t (&b)[2]) {
  static_assert(std::is_same_v<In, float8_e4m3> || std::is_same_v<In, float8_e5m2>);
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::mma_m16n8k32<In>(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (std::is_same_v<In, float8_e4m3>)
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d, (void)a, (void)b;  // launched only where cuda_built_for(..., 89) holds
  __trap();
#endif
}

}  // namespace detail
TESSERA_END_NAMESPACE
