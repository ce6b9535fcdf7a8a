// tessera/backend/cuda/mma_sync.cuh - the warp-level tensor-core instructions below WMMA:
// ldmatrix (shared memory to fragments, sm_75+), mma.sync m16n8k16 with 16-bit inputs and float
// accumulation, m16n8k8 with tf32 inputs and float accumulation, m16n8k32 with 8-bit integer
// inputs and int32 accumulation (sm_80+) or fp8 inputs and float accumulation (sm_89+): what
// gemm_mma.cuh is built from.
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

/// The tf32 input type of the tensor-core kernels (float bits, of which the tensor cores read
/// the top 19). A tag rather than WMMA's type: mma.h declares precision::tf32 (and all of WMMA
/// below sm_70) only when compiling for architectures that have them, so the families name
/// WMMA's types only in device code built for sm_80+ (the kernels, cuda_tc_multiply_step).
struct cuda_tf32_tag {};

/// Which input type of tessera's raw tensor-core instructions In is (cuda_mma_sync here,
/// cuda_wgmma_m64n128 in wgmma.cuh), and what it accumulates in: int32 for the 8-bit integers,
/// float for the others.
template <class In>
struct cuda_tc_input {
  static constexpr bool f16 = std::is_same_v<In, __half>, bf16 = std::is_same_v<In, __nv_bfloat16>;
  static constexpr bool s8 = std::is_same_v<In, signed char>;
  static constexpr bool u8 = std::is_same_v<In, unsigned char>;
  static constexpr bool e4m3 = std::is_same_v<In, float8_e4m3>;
  static constexpr bool e5m2 = std::is_same_v<In, float8_e5m2>;
  static constexpr bool tf32 = std::is_same_v<In, cuda_tf32_tag>;
  static_assert(f16 || bf16 || s8 || u8 || e4m3 || e5m2 || tf32, "not a tensor-core input type");
  using acc = std::conditional_t<s8 || u8, int32_t, float>;
};

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

// One mma.sync with the accumulators in place (d = c): `shape_types` names the shape, layouts and
// types after "mma.sync.aligned.", D is the accumulators' constraint ("+f" or "+r").
#define TESSERA_MMA_SYNC(shape_types, D)                                            \
  asm volatile("mma.sync.aligned." shape_types                                      \
               " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
               : D(d[0]), D(d[1]), D(d[2]), D(d[3])                                 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

/// d += A B on the tensor cores, one mma.sync.aligned.row.col for inputs In:
///  - __half / __nv_bfloat16: m16n8k16, float d (sm_80+). With g = lane / 4, t = lane % 4: a[0]
///    holds A(g, 2t .. 2t + 1), a[1] A(g + 8, 2t ..), a[2] A(g, 2t + 8 ..), a[3] A(g + 8, 2t + 8
///    ..); b[0] B(2t .. 2t + 1, g), b[1] B(2t + 8 .., g); d[0..1] D(g, 2t .. 2t + 1), d[2..3]
///    D(g + 8, 2t .. 2t + 1). Within a register the lower k sits in the low 16 bits (what
///    ldmatrix delivers).
///  - signed / unsigned char (.s8 / .u8): m16n8k32, int32 d wrapping like the other kernels
///    (sm_80+); float8_e4m3 / float8_e5m2 (.e4m3 / .e5m2): m16n8k32, float d (sm_89+; the
///    products are exact in float, how the instruction adds its 32 of them to d is NVIDIA's,
///    docs/cuda_internals.md "fp8"). The registers hold the same bytes as for 16-bit inputs: a[0]
///    holds A(g, 4t .. 4t + 3), a[1] A(g + 8, 4t ..), a[2] A(g, 4t + 16 ..), a[3] A(g + 8, 4t + 16
///    ..); b[0] B(4t .. 4t + 3, g), b[1] B(4t + 16 .., g); lower k in the lower byte; d as above.
///    So ldmatrix (without .trans) of k-contiguous rows feeds both forms alike.
///  - cuda_tf32_tag (.tf32): m16n8k8, float d (sm_80+); each register one float whose low 13
///    mantissa bits the instruction ignores (the caller rounds first). Again the same bytes: a[0]
///    holds A(g, t), a[1] A(g + 8, t), a[2] A(g, t + 4), a[3] A(g + 8, t + 4); b[0] B(t, g),
///    b[1] B(t + 4, g); d as above.
template <class In, class Acc>
__device__ __forceinline__ void cuda_mma_sync(Acc (&d)[4], const uint32_t (&a)[4],
                                              const uint32_t (&b)[2]) {
  using I = cuda_tc_input<In>;
  static_assert(std::is_same_v<Acc, typename I::acc>);
#if defined(TESSERA_CUDA_HOST_EMULATION)
  if constexpr (I::f16 || I::bf16)
    tessera_cuda_emulation::mma_m16n8k16<In>(d, a, b);
  else if constexpr (I::tf32)
    tessera_cuda_emulation::mma_m16n8k8_tf32(d, a, b);
  else
    tessera_cuda_emulation::mma_m16n8k32<In>(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (I::f16)
    TESSERA_MMA_SYNC("m16n8k16.row.col.f32.f16.f16.f32", "+f");
  else if constexpr (I::bf16)
    TESSERA_MMA_SYNC("m16n8k16.row.col.f32.bf16.bf16.f32", "+f");
  else if constexpr (I::tf32)
    TESSERA_MMA_SYNC("m16n8k8.row.col.f32.tf32.tf32.f32", "+f");
  else if constexpr (I::s8)
    TESSERA_MMA_SYNC("m16n8k32.row.col.s32.s8.s8.s32", "+r");
  else if constexpr (I::u8)
    TESSERA_MMA_SYNC("m16n8k32.row.col.s32.u8.u8.s32", "+r");
#if __CUDA_ARCH__ >= 890
  else if constexpr (I::e4m3)
    TESSERA_MMA_SYNC("m16n8k32.row.col.f32.e4m3.e4m3.f32", "+f");
  else
    TESSERA_MMA_SYNC("m16n8k32.row.col.f32.e5m2.e5m2.f32", "+f");
#else
  else
    __trap();  // fp8: launched only where cuda_built_for(..., 89) holds
#endif
#else
  (void)d, (void)a, (void)b;  // callers run only where the code is built for sm_80
  __trap();
#endif
}

#undef TESSERA_MMA_SYNC

}  // namespace detail
TESSERA_END_NAMESPACE
