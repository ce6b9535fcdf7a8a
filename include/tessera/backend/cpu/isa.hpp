// tessera/backend/cpu/isa.hpp - which instruction set the CPU kernels run, chosen at run time.
//
// kernels.hpp compiles every CPU kernel once per instruction set (cpu_isa) in the same
// translation unit. This header says which of them a call runs: the best one the CPU has, unless
// the TESSERA_ISA environment variable (scalar, avx2, avx512, neon) or ts::set_isa asks for
// another. The levels: avx2 is AVX2 + FMA + F16C; avx512 is AVX-512 F/BW/DQ/VL + VNNI (a CPU with
// AVX-512 but no VNNI runs avx2); neon is AArch64's baseline; scalar is plain C++ loops.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../../config.hpp"
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#include "../../core/error.hpp"

TESSERA_BEGIN_NAMESPACE

/// The instruction sets the CPU kernels are compiled for, lowest first on each architecture.
enum class cpu_isa { scalar, avx2, avx512, neon };

/// "scalar", "avx2", "avx512" or "neon".
inline const char* isa_name(cpu_isa isa) {
  switch (isa) {
    case cpu_isa::avx2:
      return "avx2";
    case cpu_isa::avx512:
      return "avx512";
    case cpu_isa::neon:
      return "neon";
    default:
      return "scalar";
  }
}

/// True when this CPU (and its operating system, which must save the wider registers) can run
/// the kernels of `isa`.
inline bool cpu_supports(cpu_isa isa) {
  switch (isa) {
    case cpu_isa::scalar:
      return true;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    case cpu_isa::avx2: {
      // F16C through cpuid: Clang 14's __builtin_cpu_supports does not know it.
      unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
      const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
      return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    case cpu_isa::avx512:
      return cpu_supports(cpu_isa::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
    case cpu_isa::neon:
      return true;
#endif
    default:
      return false;
  }
}

/// True when the CPU runs the avx512 kernels and has AVX512_BF16 as well: the bf16 dot product
/// (vdpbf16ps), with which those kernels multiply bfloat16 GEMM operands.
inline bool cpu_has_avx512_bf16() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return cpu_supports(cpu_isa::avx512) && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
           (eax & (1u << 5)) != 0;
  }();
  return has;
#else
  return false;
#endif
}

namespace detail {

/// The best instruction set the CPU supports.
inline cpu_isa best_cpu_isa() {
  for (cpu_isa isa : {cpu_isa::avx512, cpu_isa::avx2, cpu_isa::neon})
    if (cpu_supports(isa)) return isa;
  return cpu_isa::scalar;
}

/// Parses TESSERA_ISA's value; false for anything else.
inline bool parse_cpu_isa(const char* text, cpu_isa& out) {
  for (cpu_isa isa : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512, cpu_isa::neon})
    if (std::strcmp(text, isa_name(isa)) == 0) {
      out = isa;
      return true;
    }
  return false;
}

/// The instruction set chosen for this process: from TESSERA_ISA when it names one this CPU
/// supports, else the best one. A value the CPU cannot run is not taken (it would crash with an
/// illegal instruction); the best supported set is used instead.
inline std::atomic<cpu_isa>& cpu_isa_setting() {
  static std::atomic<cpu_isa> chosen{[] {
    cpu_isa isa = best_cpu_isa();
    cpu_isa asked;
    if (const char* env = std::getenv("TESSERA_ISA");
        env && parse_cpu_isa(env, asked) && cpu_supports(asked))
      isa = asked;
    return isa;
  }()};
  return chosen;
}

}  // namespace detail

/// The instruction set CPU kernels run from now on. A translation unit compiled for a higher
/// baseline (-march=native, say) runs its lowest compiled set when asked for one below it.
inline cpu_isa get_isa() { return detail::cpu_isa_setting().load(std::memory_order_relaxed); }

/// Makes CPU kernels run `isa` (for tests and comparisons; the default is the best the CPU
/// has). Throws backend_error when this CPU cannot run it.
inline void set_isa(cpu_isa isa) {
  if (!cpu_supports(isa))
    throw backend_error(std::string("set_isa: this CPU cannot run the ") + isa_name(isa) +
                        " kernels (it runs " + isa_name(detail::best_cpu_isa()) + ")");
  detail::cpu_isa_setting().store(isa, std::memory_order_relaxed);
}

TESSERA_END_NAMESPACE
