// tessera/backend/cpu/gemm/blocking.hpp - micro-tile shapes per instruction set, cache-derived
// block sizes, and the per-thread packing workspace of the CPU GEMM.
//
// Loop nest (docs/perf/matmul.md has the derivation and the measurements). The micro-kernel
// computes an mr x nr tile of C as mr broadcasts of A times nr/width vector loads of B per k:
//   for ic in M step mc:        A block  mc x kc packed, lives in L3 (and L2 when it fits)
//     for pc in K step kc:
//       pack A block
//       for jc in N step nc:    B block  kc x nc packed (or read in place), lives in L2
//         pack B block
//         for ir in mc step mr: A micro-panel mr x kc, stays in L1 across the jr loop
//           for jr in nc step nr: micro-kernel, B micro-panel streams from L2
// This is BLIS's nest for the transposed problem (C row-major = C^T column-major). Up to
// gemm_strip_outer_rows row blocks (a few rows against a weight read in place, not packed into
// L2), jr runs outside ir instead: each B micro-panel serves all of them while it is in L1.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#if defined(__linux__)
#include <unistd.h>
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Micro-tile of the GEMM micro-kernel for accumulation type T: mr rows (broadcast operand) x
/// nr columns (vector operand, a multiple of the SIMD width). kgroup: k values packed together
/// (4 for int8: one 32-bit lane holds four bytes for the dot-product instructions).
template <class T>
struct gemm_tile;

template <int MR, int NR, int KG>
struct tile_shape {
  static constexpr int mr = MR, nr = NR, kgroup = KG;
};

#if defined(TESSERA_ISA_AVX512)
// 32 zmm registers. float 8 x 32: 16 accumulators; 8 broadcasts + 2 loads per 16 FMAs stays under
// the two load ports at two FMAs per cycle, and 8 divides the power-of-two sizes (12 x 32 measured
// no better, docs/perf/matmul.md). double 12 x 16: 24 accumulators + 2 B vectors + 1 broadcast.
template <>
struct gemm_tile<float> : tile_shape<8, 32, 1> {};
template <>
struct gemm_tile<double> : tile_shape<12, 16, 1> {};
#if defined(TESSERA_ISA_AVX512)
template <>
struct gemm_tile<int32_t> : tile_shape<12, 32, 4> {};
#else  // the vpmaddwd emulation needs 6 more registers
template <>
struct gemm_tile<int32_t> : tile_shape<8, 32, 4> {};
#endif
#elif defined(TESSERA_ISA_AVX2)
// 16 ymm registers: 6 x 2 accumulators + 2 B vectors + 1 broadcast.
template <>
struct gemm_tile<float> : tile_shape<6, 16, 1> {};
template <>
struct gemm_tile<double> : tile_shape<6, 8, 1> {};
#if defined(TESSERA_ISA_AVXVNNI)
template <>
struct gemm_tile<int32_t> : tile_shape<6, 16, 4> {};
#else
template <>
struct gemm_tile<int32_t> : tile_shape<4, 16, 4> {};
#endif
#elif defined(TESSERA_ISA_NEON)
// 32 q registers: 8 x 3 accumulators + 3 B vectors + 1 broadcast.
template <>
struct gemm_tile<float> : tile_shape<8, 12, 1> {};
template <>
struct gemm_tile<double> : tile_shape<8, 6, 1> {};
template <>
struct gemm_tile<int32_t> : tile_shape<4, 4, 4> {};
#else
template <>
struct gemm_tile<float> : tile_shape<4, 4, 1> {};
template <>
struct gemm_tile<double> : tile_shape<4, 4, 1> {};
template <>
struct gemm_tile<int32_t> : tile_shape<4, 4, 4> {};
#endif

/// Rows of the edge micro-kernel for a ragged last block of r < mr rows: a third or two thirds
/// of mr when mr divides by 3 (12 -> 4, 8; 6 -> 2, 4), so that a 64-row matrix on 12-row tiles
/// wastes nothing; mr otherwise (the edge is zero-padded).
template <class T>
constexpr int gemm_edge_mr(int64_t r) {
  constexpr int mr = gemm_tile<T>::mr;
  if constexpr (mr % 3 == 0) {
    if (r <= mr / 3) return mr / 3;
    if (r <= 2 * mr / 3) return 2 * mr / 3;
  }
  return mr;
}

/// Data cache sizes per core (L3: the whole shared cache), from the OS when it says, else typical.
struct cache_sizes {
  int64_t l1 = 32 << 10, l2 = 1 << 20, l3 = 8 << 20;
};
inline const cache_sizes& host_caches() {
  static const cache_sizes c = [] {
    cache_sizes s;
#if defined(__linux__) && defined(_SC_LEVEL1_DCACHE_SIZE)
    const auto get = [](int name, int64_t fallback) {
      const long v = sysconf(name);
      return v > 0 ? static_cast<int64_t>(v) : fallback;
    };
    s.l1 = get(_SC_LEVEL1_DCACHE_SIZE, s.l1);
    s.l2 = get(_SC_LEVEL2_CACHE_SIZE, s.l2);
    s.l3 = get(_SC_LEVEL3_CACHE_SIZE, s.l3);
#endif
    return s;
  }();
  return c;
}

/// Block sizes of the loop nest for accumulation type T (packed element sizes pa, pb bytes).
struct gemm_block_sizes {
  int64_t kc, mc, nc;
};

/// kc: the A micro-panel (mr x kc, reused across the jr loop) and the B micro-panel (kc x nr,
///     streamed) fit L1 together; a multiple of 16.
/// nc: the packed B block (kc x nc) takes at most a quarter of L2, leaving the rest to the A
///     micro-panels and C lines that stream through it; a multiple of nr.
/// mc: the packed A block (mc x kc) takes at most a quarter of L3 (shared by the threads) and
///     at most 4096 rows; a multiple of mr.
template <class T>
gemm_block_sizes gemm_blocks() {
  using tile = gemm_tile<T>;
  // Bytes of one packed element: 1 for int8 inputs, sizeof(T) otherwise.
  constexpr int64_t elem = tile::kgroup == 4 ? 1 : static_cast<int64_t>(sizeof(T));
  const cache_sizes& cs = host_caches();
  int64_t kc = std::clamp<int64_t>(cs.l1 / ((tile::mr + tile::nr) * elem), 64, 2048);
  kc = kc / 16 * 16;
  int64_t nc = std::clamp<int64_t>(cs.l2 / 4 / (kc * elem), tile::nr, 8192);
  nc = std::max<int64_t>(nc / tile::nr, 1) * tile::nr;
  int64_t mc = std::clamp<int64_t>(cs.l3 / 4 / (kc * elem), tile::mr, 4096);
  mc = std::max<int64_t>(mc / tile::mr, 1) * tile::mr;
  return {kc, mc, nc};
}

/// The depth of the k blocks for a product of depth k, given the cache-sized depth kc: equal
/// blocks (a multiple of 16 and of the int8 group, at most 1.25 kc), never a thin last one.
/// k = 384 with kc = 368 would otherwise leave a 16-deep block: a whole pass over C, and a
/// micro-kernel call per tile, for 4% of the work.
inline int64_t balanced_k_block(int64_t k, int64_t kc) {
  const int64_t blocks = std::max<int64_t>(1, (k + kc + kc / 4 - 1) / (kc + kc / 4));
  const int64_t depth = ((k + blocks - 1) / blocks + 15) / 16 * 16;
  return std::min(depth, (k + 3) / 4 * 4);
}

/// A grow-only, 64-byte aligned scratch buffer; one per thread and role (packed A, packed B).
class gemm_buffer {
 public:
  void* get(size_t bytes) {
    if (bytes > size_) {
      ptr_.reset(static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64})));
      size_ = bytes;
    }
    return ptr_.get();
  }

 private:
  struct release {
    void operator()(std::byte* p) const { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte, release> ptr_;
  size_t size_ = 0;
};

struct gemm_workspace {
  gemm_buffer a, b, sums;
};
/// This thread's packing buffers (kept between calls: packing never allocates in steady state).
inline gemm_workspace& thread_gemm_workspace() {
  static thread_local gemm_workspace w;
  return w;
}

}  // namespace detail
TESSERA_END_NAMESPACE
