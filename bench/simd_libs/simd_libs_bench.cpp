// tessera's SIMD layer (simd::vec) next to xsimd and Google Highway on the kernels the CPU backend
// spends its time in, one thread, one instruction set per binary (the compiler flags choose it):
//   micro/<lib>       the fp32 GEMM register tile (MR x 2 vectors of C, kc = 128 from packed A and
//                     B panels in L1) written the same way with each library's vector type;
//                     micro/tessera_kernel is tessera's own gemm_micro_fp on the same panels
//   exp/<lib>, tanh/<lib>   y = f(x) over 4096 floats in L1, x uniform in [-10, 10]
//   exp/tessera_map   the same through ts::map_to (dispatch, tails, views), for reference
// The counters give GFLOP/s (micro) and ns per element (exp, tanh); main() first prints each
// library's worst error of exp and tanh in ulp against the double-precision libm result.
#include <benchmark/benchmark.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tessera/tessera.hpp>
#include <vector>
#include <xsimd/xsimd.hpp>

namespace ts = tessera;
namespace hn = hwy::HWY_NAMESPACE;

#if defined(__AVX512F__)
namespace tk = tessera::isa_avx512;
#elif defined(__AVX2__)
namespace tk = tessera::isa_avx2;
#else
#error "build with -march=haswell or -march=native (see CMakeLists.txt)"
#endif

namespace {

// ---- one vector type per library, behind the four operations the kernels need ----

struct tessera_ops {
  using V = tk::detail::simd::vec<float>;
  static constexpr int width = V::width;
  static V load(const float* p) { return V::load(p); }
  static void store(V v, float* p) { v.store(p); }
  static V set(float x) { return V::broadcast(x); }
  static V fma(V a, V b, V c) { return tk::detail::simd::fma(a, b, c); }
  static V exp(V x) { return tk::detail::simd::exp(x); }
  static V tanh(V x) { return tk::detail::simd::tanh(x); }
};

struct xsimd_ops {
  using V = xsimd::batch<float>;
  static constexpr int width = static_cast<int>(V::size);
  static V load(const float* p) { return V::load_unaligned(p); }
  static void store(V v, float* p) { v.store_unaligned(p); }
  static V set(float x) { return V(x); }
  static V fma(V a, V b, V c) { return xsimd::fma(a, b, c); }
  static V exp(V x) { return xsimd::exp(x); }
  static V tanh(V x) { return xsimd::tanh(x); }
};

struct hwy_ops {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  static constexpr int width = static_cast<int>(hn::MaxLanes(D()));
  static V load(const float* p) { return hn::LoadU(D(), p); }
  static void store(V v, float* p) { hn::StoreU(v, D(), p); }
  static V set(float x) { return hn::Set(D(), x); }
  static V fma(V a, V b, V c) { return hn::MulAdd(a, b, c); }
  static V exp(V x) { return hn::Exp(D(), x); }
  static V tanh(V x) { return hn::Tanh(D(), x); }
};

static_assert(tessera_ops::width == xsimd_ops::width && xsimd_ops::width == hwy_ops::width,
              "the three libraries must use the same register width");

// ---- GEMM micro-kernel: C (MR x NR) = A panel [kc][MR] x B panel [kc][NR] ----

constexpr int W = tessera_ops::width;
using tile = tk::detail::gemm_tile<float>;
constexpr int MR = tile::mr, NR = tile::nr, NV = NR / W;
constexpr int64_t KC = 128;

template <class Ops>
__attribute__((noinline)) void micro(int64_t kc, const float* __restrict a,
                                     const float* __restrict b, float* __restrict c) {
  using V = typename Ops::V;
  V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = Ops::set(0.0f);
  for (int64_t p = 0; p < kc; ++p) {
    V bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = Ops::load(b + j * W);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V av = Ops::set(a[i]);
      for (int j = 0; j < NV; ++j) acc[i][j] = Ops::fma(av, bv[j], acc[i][j]);
    }
    a += MR;
    b += NR;
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) Ops::store(acc[i][j], c + i * NR + j * W);
}

struct panels {
  std::vector<float> a, b, c;
  panels() : a(KC * MR), b(KC * NR), c(MR * NR) {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& x : a) x = u(gen);
    for (auto& x : b) x = u(gen);
  }
};

void set_flops(benchmark::State& st) {
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * MR * NR * KC, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

template <class Ops>
void bm_micro(benchmark::State& st) {
  panels p;
  for (auto _ : st) {
    micro<Ops>(KC, p.a.data(), p.b.data(), p.c.data());
    benchmark::ClobberMemory();
  }
  set_flops(st);
}

void bm_micro_tessera_kernel(benchmark::State& st) {
  panels p;
  const tk::detail::gemm_epilogue<float> ep{};
  for (auto _ : st) {
    tk::detail::gemm_micro_fp<float, MR>(KC, p.a.data(), p.b.data(), NR, p.c.data(), NR, 1, MR, NR,
                                         ep, 0, 0);
    benchmark::ClobberMemory();
  }
  set_flops(st);
}

// ---- elementwise ----

constexpr int64_t N = 4096;

std::vector<float> inputs(int64_t n) {
  std::mt19937 gen(2);
  std::uniform_real_distribution<float> u(-10, 10);
  std::vector<float> x(n);
  for (auto& v : x) v = u(gen);
  return x;
}

template <class Ops, bool Exp>
__attribute__((noinline)) void apply(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += W) {
    const auto v = Ops::load(x + i);
    Ops::store(Exp ? Ops::exp(v) : Ops::tanh(v), y + i);
  }
}

void set_per_element(benchmark::State& st) {
  st.counters["ns/elem"] =
      benchmark::Counter(static_cast<double>(N), benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
}

template <class Ops, bool Exp>
void bm_apply(benchmark::State& st) {
  const auto x = inputs(N);
  std::vector<float> y(N);
  for (auto _ : st) {
    apply<Ops, Exp>(x.data(), y.data(), N);
    benchmark::ClobberMemory();
  }
  set_per_element(st);
}

void bm_exp_map(benchmark::State& st) {
  const auto v = inputs(N);
  const auto x = ts::from_vector<float>(v, {N});
  auto y = ts::empty<float>({N});
  for (auto _ : st) {
    ts::map_to(y, ts::fn::exp_{}, x);
    benchmark::ClobberMemory();
  }
  set_per_element(st);
}

// ---- accuracy: worst error in ulp of the float result against libm in double ----

double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(want) || std::isinf(got)) return got == static_cast<float>(want) ? 0 : INFINITY;
  const float w = static_cast<float>(want);
  const double ulp = std::nextafter(std::fabs(w), INFINITY) - static_cast<double>(std::fabs(w));
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

template <class Ops, bool Exp>
double worst_ulp(float lo, float hi) {
  constexpr int64_t n = int64_t{1} << 22;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = lo + (hi - lo) * static_cast<float>(i) / n;
  apply<Ops, Exp>(x.data(), y.data(), n);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst =
        std::max(worst, ulp_error(y[i], Exp ? std::exp(double{x[i]}) : std::tanh(double{x[i]})));
  return worst;
}

template <class Ops>
void report_accuracy(const char* name) {
  std::printf("%-8s exp max %.2f ulp on [-87, 88], tanh max %.2f ulp on [-9, 9]\n", name,
              worst_ulp<Ops, true>(-87.0f, 88.0f), worst_ulp<Ops, false>(-9.0f, 9.0f));
}

}  // namespace

int main(int argc, char** argv) {
  ts::set_num_threads(1);
  std::printf("vector width %d floats; GEMM tile %d x %d; tessera kernels: %s\n", W, MR, NR,
              ts::isa_name(ts::get_isa()));
  report_accuracy<tessera_ops>("tessera");
  report_accuracy<xsimd_ops>("xsimd");
  report_accuracy<hwy_ops>("highway");

  benchmark::RegisterBenchmark("micro/tessera_kernel", bm_micro_tessera_kernel);
  benchmark::RegisterBenchmark("micro/tessera", bm_micro<tessera_ops>);
  benchmark::RegisterBenchmark("micro/xsimd", bm_micro<xsimd_ops>);
  benchmark::RegisterBenchmark("micro/highway", bm_micro<hwy_ops>);
  benchmark::RegisterBenchmark("exp/tessera_map", bm_exp_map);
  benchmark::RegisterBenchmark("exp/tessera", bm_apply<tessera_ops, true>);
  benchmark::RegisterBenchmark("exp/xsimd", bm_apply<xsimd_ops, true>);
  benchmark::RegisterBenchmark("exp/highway", bm_apply<hwy_ops, true>);
  benchmark::RegisterBenchmark("tanh/tessera", bm_apply<tessera_ops, false>);
  benchmark::RegisterBenchmark("tanh/xsimd", bm_apply<xsimd_ops, false>);
  benchmark::RegisterBenchmark("tanh/highway", bm_apply<hwy_ops, false>);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
