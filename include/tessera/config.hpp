// tessera/config.hpp - version, portability macros and the ABI namespace.
#pragma once

#define TESSERA_VERSION_MAJOR 0
#define TESSERA_VERSION_MINOR 1
#define TESSERA_VERSION_PATCH 0
#define TESSERA_VERSION_STRING "0.1.0"

// The CPU kernels' instruction sets are chosen in backend/cpu/kernels.hpp (compiled) and
// backend/cpu/isa.hpp (run).

// Functions usable from both host and device code (low-precision conversions, functors).
#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#define TESSERA_DEVICE __device__
// Before a host-device function template that some instantiations call with host-only types
// (SIMD packs): nvcc then checks only the instantiations device code actually calls.
#define TESSERA_HD_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define TESSERA_HOST_DEVICE
#define TESSERA_DEVICE
#define TESSERA_HD_EXEC_CHECK_DISABLE
#endif

#if defined(_MSC_VER)
#define TESSERA_ALWAYS_INLINE __forceinline
#define TESSERA_NOINLINE __declspec(noinline)
#else
#define TESSERA_ALWAYS_INLINE inline __attribute__((always_inline))
// For hot kernels that must keep every register to themselves: inlined into a large caller they
// get that caller's register pressure and spill.
#define TESSERA_NOINLINE __attribute__((noinline))
#endif

#define TESSERA_PRAGMA(text) _Pragma(#text)
// Unroll hint for the CPU kernels' fixed-trip loops. nvcc's front end does not know GCC's
// spelling and would warn at every use in a .cu file that includes the CPU backend, so there the
// hint is left out (the host compiler still unrolls such short constant loops at -O3).
#if defined(__GNUC__) && !defined(__CUDACC__)
#define TESSERA_UNROLL(n) TESSERA_PRAGMA(GCC unroll n)
#else
#define TESSERA_UNROLL(n)
#endif
// `#pragma omp simd ...` only where OpenMP is on (or where the build says -fopenmp-simd is, with
// TESSERA_OPENMP_SIMD): elsewhere -Wall would warn at every use.
#if defined(_OPENMP) || defined(TESSERA_OPENMP_SIMD)
#define TESSERA_OMP_SIMD(clauses) TESSERA_PRAGMA(omp simd clauses)
#else
#define TESSERA_OMP_SIMD(clauses)
#endif

// The default backend is a build option. Everything that depends on build options lives in an
// inline namespace whose name spells them, so two translation units built with different options
// fail to link instead of silently disagreeing (the Eigen macro pitfall).
#if defined(TESSERA_DEFAULT_BACKEND_CUDA)
#define TESSERA_ABI_BACKEND cuda
#else
#define TESSERA_ABI_BACKEND cpu
#endif
#if defined(_OPENMP)
#define TESSERA_ABI_OMP omp
#else
#define TESSERA_ABI_OMP serial
#endif
#define TESSERA_ABI_CAT3_(a, b, c) a##_##b##_##c
#define TESSERA_ABI_CAT3(a, b, c) TESSERA_ABI_CAT3_(a, b, c)
#define TESSERA_ABI_NAMESPACE TESSERA_ABI_CAT3(v0, TESSERA_ABI_BACKEND, TESSERA_ABI_OMP)

#define TESSERA_BEGIN_NAMESPACE \
  namespace tessera {           \
  inline namespace TESSERA_ABI_NAMESPACE {
#define TESSERA_END_NAMESPACE \
  }                           \
  }
