// tessera/backend/cuda/wgmma.cuh - Hopper's warpgroup tensor-core instructions (sm_90a):
// wgmma.mma_async with both operands read from shared memory through matrix descriptors, its
// fences and groups, the proxy fence that makes ordinary shared-memory writes (cp.async
// included) visible to it, setmaxnreg, the canonical tile layouts and their descriptors, one
// stage of products and the epilogue: what both wgmma kernels (gemm_wgmma.cuh and
// gemm_wgmma_tma.cuh) are built from.
//
// Why wgmma beside mma.sync: on sm_90 only wgmma reaches the tensor cores' full rate. A warpgroup
// (4 warps, 128 threads) issues one m64nNk16 product whose operands the tensor cores read from
// shared memory themselves, so no fragment passes through registers and one instruction covers
// what 64 mma.sync would (m64n128k16). The operands must lie in one of the canonical layouts
// the PTX ISA defines; tessera uses the 128-byte swizzled ones (cuda_wgmma_k_major,
// cuda_wgmma_mn_major below), which TMA's 128-byte swizzle mode also writes.
//
// The code exists only in device code compiled for sm_90a (`__CUDA_ARCH_FEAT_SM90_ALL`: build
// with CMAKE_CUDA_ARCHITECTURES=90a); elsewhere these wrappers trap, and the dispatch never
// reaches them (cuda_wgmma_built). The host emulation of the CUDA runtime (tests/cuda_emu)
// models the instruction by decoding the descriptors and the swizzle as the ISA specifies them,
// so a kernel that lays out its tiles or builds its descriptors wrongly fails its tests there;
// and it runs each wgmma only when a wait_group lets it complete, so a kernel that waits too
// little (rewrites a stage, or reads accumulators, that a wgmma in flight still uses) fails too.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "gemm_args.cuh"
#include "mma_sync.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

#if defined(TESSERA_CUDA_HOST_EMULATION) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TESSERA_CUDA_WGMMA 1  // this compilation pass has wgmma (device code for sm_90a)
#else
#define TESSERA_CUDA_WGMMA 0
#endif

/// The shared-memory address (the offset in the block's shared window) of p, which points
/// into shared memory: what descriptors and the swizzle work on.
__device__ __forceinline__ uint32_t cuda_smem_address(const void* p) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  return tessera_cuda_emulation::smem_address(p);
#else
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

/// A wgmma matrix descriptor for the 128-byte swizzle mode: the operand's start address,
/// leading-dimension byte offset (lbo) and stride-dimension byte offset (sbo), each stored
/// without its low 4 bits (so multiples of 16), swizzle mode 1 (128 bytes) in bits 62-63, base
/// offset 0 (the swizzle atoms are 1024-byte aligned).
__host__ __device__ __forceinline__ uint64_t cuda_wgmma_desc(uint32_t address, uint32_t lbo,
                                                             uint32_t sbo) {
  return uint64_t{(address & 0x3ffffu) >> 4} | uint64_t{(lbo & 0x3ffffu) >> 4} << 16 |
         uint64_t{(sbo & 0x3ffffu) >> 4} << 32 | uint64_t{1} << 62;
}

// The tiles the wgmma kernels stage, in canonical layouts of the 128-byte swizzle mode.

inline constexpr int cuda_wgmma_row_bytes = 128;  // of k per operand row and stage, any type
inline constexpr int cuda_wgmma_bk = 64;  // k per stage for 16-bit elements (the mn-major tiles)
inline constexpr int cuda_wgmma_tile_rows = 128;  // rows (of A) or columns (of B) per tile
inline constexpr int cuda_wgmma_tile_bytes =
    cuda_wgmma_tile_rows * cuda_wgmma_row_bytes;  // operand, stage
inline constexpr int cuda_wgmma_atom = 1024;      // bytes: 8 rows of 128, the swizzle's period
/// A stage's tile with k contiguous (A row-major, B column-major), V elements per 16-byte chunk:
/// [128][8 V], 128-byte rows; chunk c of row o is stored at c ^ (o % 8). In descriptor terms:
/// 8-row groups 1024 bytes apart (the stride byte offset), k within a row (no leading byte
/// offset). The same bytes for every element size: each instruction reads 32 bytes of k.
template <int V = 8>
struct cuda_wgmma_k_major {
  __host__ __device__ static int at(int o, int k) {
    return o * 8 * V + ((k / V) ^ (o & 7)) * V + k % V;
  }
};

/// A stage's tile with m or n contiguous (A column-major, B row-major), 16-bit elements: two
/// atoms columns of 64 elements, each [64 k][64] with 128-byte rows, chunk c of row k at
/// c ^ (k % 8). In descriptor terms: 8-row groups of k 1024 bytes apart (stride byte offset),
/// the second 64 columns 8192 bytes on (leading byte offset).
struct cuda_wgmma_mn_major {
  static constexpr int column_bytes = cuda_wgmma_bk * 128;  // one 64-wide column of atoms
  __host__ __device__ static int at(int k, int o) {
    return (o >> 6) * (column_bytes / 2) + k * 64 + ((((o & 63) >> 3) ^ (k & 7)) << 3) + (o & 7);
  }
};

/// The descriptor of A's k step s (32 bytes of k) for warpgroup wg (rows 64 wg .. 64 wg + 63) in
/// the stage tile at shared address tile (ACol: m-contiguous).
template <bool ACol>
__host__ __device__ __forceinline__ uint64_t cuda_wgmma_a_desc(uint32_t tile, int wg, int s) {
  if constexpr (ACol)  // the warpgroup's 64 rows are one atom column; k steps 2 atoms down
    return cuda_wgmma_desc(tile + wg * cuda_wgmma_mn_major::column_bytes + s * 2 * cuda_wgmma_atom,
                           cuda_wgmma_mn_major::column_bytes, cuda_wgmma_atom);
  else  // 64 rows of 128 bytes in; k steps 32 bytes along the row (the swizzle is the hardware's)
    return cuda_wgmma_desc(tile + wg * 64 * 128 + s * 32, 16, cuda_wgmma_atom);
}

/// The descriptor of B's k step s (all 128 columns) in the stage tile at shared address tile
/// (BCol: k-contiguous).
template <bool BCol>
__host__ __device__ __forceinline__ uint64_t cuda_wgmma_b_desc(uint32_t tile, int s) {
  if constexpr (BCol)
    return cuda_wgmma_desc(tile + s * 32, 16, cuda_wgmma_atom);
  else
    return cuda_wgmma_desc(tile + s * 2 * cuda_wgmma_atom, cuda_wgmma_mn_major::column_bytes,
                           cuda_wgmma_atom);
}

/// wgmma.fence: orders this thread's earlier accesses of the accumulator registers before the
/// wgmma.mma_async that follow (needed before the first one and after any other access).
__device__ __forceinline__ void cuda_wgmma_fence() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
#elif TESSERA_CUDA_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// wgmma.commit_group: closes the group of this warpgroup's wgmma.mma_async issued since the last.
__device__ __forceinline__ void cuda_wgmma_commit() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::wgmma_commit();
#elif TESSERA_CUDA_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// wgmma.wait_group Pending: waits until at most Pending groups are in flight; only then may
/// their accumulators be read, or the shared memory they read be written.
template <int Pending>
__device__ __forceinline__ void cuda_wgmma_wait() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::wgmma_wait(Pending);
#elif TESSERA_CUDA_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#else
  __trap();
#endif
}

/// setmaxnreg: this warpgroup's registers per thread become Regs (a multiple of 8 in [24, 256]),
/// giving registers back to the SM's pool (Inc false) or taking them from it (Inc true, waiting
/// until the pool has them). Every thread of the warpgroup must call it together. Lets a
/// warp-specialised kernel give its consumers more registers than an even split of the SM's
/// (ptxas allocates the code after it with Regs).
template <bool Inc, int Regs>
__device__ __forceinline__ void cuda_setmaxnreg() {
  static_assert(Regs % 8 == 0 && Regs >= 24 && Regs <= 256);
#if defined(TESSERA_CUDA_HOST_EMULATION)
#elif TESSERA_CUDA_WGMMA
  if constexpr (Inc)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
#else
  __trap();
#endif
}

/// fence.proxy.async.shared::cta: makes this thread's earlier writes to shared memory (stores
/// and completed cp.async copies, the generic proxy) visible to later reads by the async proxy
/// (wgmma) once a barrier has ordered them.
__device__ __forceinline__ void cuda_fence_proxy_async() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
#elif TESSERA_CUDA_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// One wgmma.mma_async m64n128 (`shape_types`: k and the types) on accumulators d (in place,
// scale-d true; constraint C: "+f" for float, "+r" for int32), descriptors a and b, then `tail`:
// the immediate operands that follow the predicate for this type (scales, transposes).
#define TESSERA_WGMMA_M64N128(shape_types, C, tail)                                               \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n128" shape_types                                          \
      " {"                                                                                        \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                    \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "          \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "          \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, "    \
      "%65, p" tail ";\n}\n"                                                                      \
      : C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), \
        C(d[10]), C(d[11]), C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), \
        C(d[19]), C(d[20]), C(d[21]), C(d[22]), C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), \
        C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]), C(d[34]), C(d[35]), C(d[36]), \
        C(d[37]), C(d[38]), C(d[39]), C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]), C(d[45]), \
        C(d[46]), C(d[47]), C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), \
        C(d[55]), C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63])  \
      : "l"(a), "l"(b), "r"(1), "n"(ta), "n"(tb))

/// d += A B for one warpgroup: wgmma.mma_async.sync.aligned.m64n128kK with A (64 x K) and B (K x
/// 128) read from shared memory through the descriptors a and b; K is 32 bytes of In:
///  - __half, __nv_bfloat16 (.f16, .bf16): k16, float d. TransA: A is stored m-contiguous
///    (MN-major) rather than k-contiguous; TransB: B n-contiguous rather than k-contiguous.
///  - cuda_tf32_tag (.tf32): k8, float d, on float bits whose low 13 mantissa bits the
///    instruction ignores (the caller rounds first).
///  - float8_e4m3, float8_e5m2 (.e4m3, .e5m2): k32, float d.
///  - signed char, unsigned char (.s8, .u8): k32, int32 d, wrapping (no .satfinite).
/// The ISA allows the transposes only for 16-bit inputs: the others are k-contiguous in both.
/// Accumulators: thread L of the warpgroup (warp w = L / 32, g = L % 32 / 4, t = L % 4) holds
/// D(16 w + g, 8 j + 2 t + c) in d[4 j + c] and D(16 w + g + 8, 8 j + 2 t + c) in d[4 j + 2 +
/// c], j = 0 .. 15, c = 0, 1. Asynchronous: the results are there after cuda_wgmma_commit and
/// cuda_wgmma_wait. Every thread of the warpgroup must call it together, with the same
/// descriptors.
template <class In, bool TransA, bool TransB, class Acc>
__device__ __forceinline__ void cuda_wgmma_m64n128(Acc (&d)[64], uint64_t a, uint64_t b) {
  using I = cuda_tc_input<In>;
  static_assert(std::is_same_v<Acc, typename I::acc>);
  static_assert(I::f16 || I::bf16 || (!TransA && !TransB), "only 16-bit inputs may be transposed");
#if defined(TESSERA_CUDA_HOST_EMULATION)
  using Emulated = std::conditional_t<I::tf32, float, In>;  // the emulation reads floats as tf32
  tessera_cuda_emulation::wgmma_m64nN<Emulated>(d, 128, a, b, TransA, TransB);
#elif TESSERA_CUDA_WGMMA
  constexpr int ta = TransA ? 1 : 0, tb = TransB ? 1 : 0;
  if constexpr (I::f16)
    TESSERA_WGMMA_M64N128("k16.f32.f16.f16", "+f", ", 1, 1, %67, %68");
  else if constexpr (I::bf16)
    TESSERA_WGMMA_M64N128("k16.f32.bf16.bf16", "+f", ", 1, 1, %67, %68");
  else if constexpr (I::tf32)
    TESSERA_WGMMA_M64N128("k8.f32.tf32.tf32", "+f", ", 1, 1");
  else if constexpr (I::e4m3)
    TESSERA_WGMMA_M64N128("k32.f32.e4m3.e4m3", "+f", ", 1, 1");
  else if constexpr (I::e5m2)
    TESSERA_WGMMA_M64N128("k32.f32.e5m2.e5m2", "+f", ", 1, 1");
  else if constexpr (I::s8)
    TESSERA_WGMMA_M64N128("k32.s32.s8.s8", "+r", "");
  else
    TESSERA_WGMMA_M64N128("k32.s32.u8.u8", "+r", "");
#else
  (void)d, (void)a, (void)b;  // launched only where cuda_wgmma_built() holds
  __trap();
#endif
}

#undef TESSERA_WGMMA_M64N128

/// One stage of a warpgroup's products: over the stage's A tile at shared address `as` (rows
/// 64 wg ..) and its B tile at bs (NT tiles of 128 columns, one after another), the wgmma
/// m64n128 of each 32 bytes of k into acc[nt] for each 128 columns nt, committed as one group.
template <class In, bool ACol, bool BCol, int NT, class Acc>
__device__ __forceinline__ void cuda_wgmma_issue_stage(Acc (&acc)[NT][64], uint32_t as, uint32_t bs,
                                                       int wg) {
  cuda_wgmma_fence();
#pragma unroll
  for (int s = 0; s < cuda_wgmma_row_bytes / 32; ++s)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      cuda_wgmma_m64n128<In, ACol, !BCol>(
          acc[nt], cuda_wgmma_a_desc<ACol>(as, wg, s),
          cuda_wgmma_b_desc<BCol>(bs + static_cast<uint32_t>(nt) * cuda_wgmma_tile_bytes, s));
  cuda_wgmma_commit();
}

/// cuda_wgmma_issue_stage, then a wait until only that group is in flight, so the previous
/// stage's group is done (its slot may be refilled once the other warpgroup is done with it too)
/// and this one's runs on.
template <class In, bool ACol, bool BCol, int NT, class Acc>
__device__ __forceinline__ void cuda_wgmma_stage(Acc (&acc)[NT][64], uint32_t as, uint32_t bs,
                                                 int wg) {
  cuda_wgmma_issue_stage<In, ACol, BCol>(acc, as, bs, wg);
  cuda_wgmma_wait<1>();
}

/// Whether a wgmma product of In inputs promotes its sums: fp8 only. Hopper's fp8 wgmma adds into
/// its float accumulators with fewer bits than float (measured on an H200: against the float
/// product of the same operands, 3.4e-4 at k = 1024, 2.0e-3 at k = 8192, growing with k, where
/// the mma.sync kernel and cuBLAS stay at 1.3e-4). So each stage's products (128 of k) go into
/// fresh accumulators that are then added, in float, into the running sums.
template <class In>
inline constexpr bool cuda_wgmma_promotes = cuda_mma_op<In>::fp8;

/// cuda_wgmma_stage for a promoting product (cuda_wgmma_promotes): the stage's wgmma into acc
/// (zero on entry), waited for, added into sum, and acc zeroed again. No group stays in flight
/// past the stage: the slot the stage read may be refilled at once.
template <class In, bool ACol, bool BCol, int NT, class Acc>
__device__ __forceinline__ void cuda_wgmma_stage_promoted(Acc (&acc)[NT][64], Acc (&sum)[NT][64],
                                                          uint32_t as, uint32_t bs, int wg) {
  cuda_wgmma_issue_stage<In, ACol, BCol>(acc, as, bs, wg);
  cuda_wgmma_wait<0>();
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      sum[nt][i] += acc[nt][i];
      acc[nt][i] = Acc(0);
    }
}

/// The epilogue of a warpgroup's m64n128 accumulators (thread l of warpgroup wg, in
/// cuda_wgmma_m64n128's layout) for the block's tile at (m0, n0): every output inside the
/// product through cuda_gemm_store_run, each thread's two consecutive columns in one store (the
/// raw sums into part under a split k).
///
/// Tiles (128 rows, these 128 columns) lying wholly inside the product take a short path where
/// the store is plain (raw sums, or alpha times the sums into aligned rows:
/// cuda_gemm_scaled_runs), a few instructions per pair of outputs. The general path alone,
/// unrolled over the 32 pairs with every case of cuda_gemm_store_run inlined in each, was 15 to
/// 33 thousand instructions: run once per tile, each fetched from beyond the instruction cache,
/// it took as long as the k loop on an H200 (Nsight Compute: half the warps' samples, most of
/// them waiting for instructions). Its code still lies between the short path's pairs, which
/// jump over it (docs/perf/cuda_gemm.md).
template <class TA, class TB, class Acc, class TC>
__device__ __forceinline__ void cuda_wgmma_store_tile(const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                      TC* c, Acc* part, int64_t m0, int64_t n0,
                                                      int wg, int l, const Acc (&acc)[64]) {
  const int64_t r0 = m0 + 64 * wg + 16 * (l / 32) + l % 32 / 4, c0 = n0 + l % 4 * 2;
  // 1: raw sums, 2: scaled sums, each a pair per store with no checks; 0: the general path. The
  // accumulators are read in one place: branching around reads of them makes ptxas serialize
  // the kernel's wgmma (C7520).
  const bool inside = m0 + 128 <= p.m && n0 + 128 <= p.n;
  const int plain = !inside                          ? 0
                    : part                           ? (p.n % 2 == 0 ? 1 : 0)
                    : cuda_gemm_scaled_runs<2>(p, c) ? 2
                                                     : 0;
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows r0 and r0 + 8: two consecutive columns each
      const int64_t gi = r0 + 8 * h, gj = c0 + 8 * j;
      const Acc a0 = acc[4 * j + 2 * h], a1 = acc[4 * j + 2 * h + 1];
      if (plain == 1)
        cuda_store_run<2>(part + gi * p.n + gj, {a0, a1});
      else if (plain == 2)
        cuda_store_run<2>(c + gi * p.c_rs + gj, {cuda_gemm_scaled(p, a0), cuda_gemm_scaled(p, a1)});
      else if (gi < p.m)
        cuda_gemm_store_run<2>(p, c, part, gi, gj, {a0, a1});
    }
}

}  // namespace detail
TESSERA_END_NAMESPACE
