// Matrix multiplication throughput: tessera next to OpenBLAS (cblas) and Eigen in one binary, on
// the same inputs, at 1 and 2 threads, plus the machine's FMA peak measured with tessera's own
// SIMD vectors. Counter "GFLOP/s": 2*m*n*k per multiply (for int8 these are integer ops, GOP/s,
// kept under the same counter name so that scripts/matmul_report.py compares everything alike).
//
// Names are <group>/<impl>/<shape>/threads:<t> (Google Benchmark appends /real_time):
//   peak/fma_fp32|fma_fp64/<isa>          independent FMA chains on simd::vec: the compute ceiling
//   sgemm_square/<impl>/<n>               fp32 n x n x n, n = 32 .. 4096 (4096 at 2 threads only)
//   sgemm_tn/<impl>/<n>, sgemm_nt/...     a^T b and a b^T, n = 512, 1024 (tessera: transposed
//                                         views; OpenBLAS: CblasTrans; Eigen: .transpose())
//   dgemm_square/<impl>/<n>               fp64, n = 64 .. 2048
//   ml/<impl>/<m>x<k>x<n>                 MLP-like fp32 shapes; ml/<impl>/b256_32x32x32 is a batch
//                                         of 256 small products ([256, 32, 32] tensors)
//   lowp/tessera_{bf16,fp16,fp8,int8}/<n> low-precision inputs, float out (int32 for int8);
//                                         int8_a7: A in [-64, 63] (7-bit activations)
//   linear_stream/<impl>/<m>x<k>x<n>      x [m, k] times one of many [k, n] weights in turn (96 MB
//                                         in all, past any L3), as small-batch inference streams
//                                         its weights: tessera (linear, the weight [in, out]
//                                         row-major), tessera_packed (pack_linear), openblas
// impl: tessera (ts::matmul(a, b, out) into a preallocated out), openblas (cblas_?gemm,
// row-major), eigen (Maps of the same buffers, c.noalias() = a * b). Threads: ts::set_num_threads,
// openblas_set_num_threads, Eigen::setNbThreads. The batched anchors split their loop of 256
// small products over t OpenMP threads (each product on one thread), as their users would.
//
// Before a benchmark is first timed, its result is compared with a float64 reference on sampled
// rows (exactly for int8); a mismatch aborts the run: a fast wrong kernel is worth nothing.

// GCC 12's AVX-512 headers self-initialize placeholder registers (`__m512 __Y = __Y;`), which
// -Wuninitialized reports where Eigen's GEMM inlines them (ptranspose); GCC 13 fixed the header.
// Silenced for the headers only: the diagnostic state at their lines is what counts.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <benchmark/benchmark.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tessera/ops/packed_linear.hpp>
#include <tessera/tessera.hpp>
#include <thread>
#include <type_traits>
#include <vector>

#ifdef TESSERA_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic pop
#endif

namespace ts = tessera;

namespace {

void set_flops(benchmark::State& st, double flops_per_iter) {
  st.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_iter, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// OpenBLAS (pthread build) leaves its worker threads spinning for about 0.1 s (2^28 TSC ticks)
// after a call; on two cores they would steal a core from whatever runs next, so the first
// benchmark after an OpenBLAS one waits for them to go to sleep.
void settle(const std::string& lib) {
  static std::string last;
  if (last == "openblas" && lib != "openblas")
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  last = lib;
}

// ---------------------------------------------------------------- FMA peak
// On the widest instruction set tessera compiled (its AVX-512 pass in a plain -O2 build), and
// only registered where the CPU runs it.
#if TESSERA_DETAIL_CPU_TOP == 2 && TESSERA_DETAIL_CPU_BASELINE < 2 && defined(__GNUC__) && \
    !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#define BENCH_PEAK_TARGETED
constexpr ts::cpu_isa peak_isa = ts::cpu_isa::avx512;
namespace simd = ts::isa_avx512::detail::simd;
#else
constexpr ts::cpu_isa peak_isa = static_cast<ts::cpu_isa>(TESSERA_DETAIL_CPU_BASELINE);
namespace simd = ts::TESSERA_DETAIL_CPU_BASELINE_NS::detail::simd;
#endif

// Enough independent chains to cover FMA latency x FMA ports (4 x 2 on current x86) with room to
// spare, while leaving registers for the two operands (16 registers on AVX2, 32 on AVX-512).
template <class T>
constexpr int peak_chains = sizeof(simd::vec<T>) >= 64 ? 24 : 12;
constexpr int64_t kPeakIters = 1 << 16;

template <class T>
[[gnu::noinline]] T fma_chains(int64_t iters) {
  using V = simd::vec<T>;
  constexpr int kAcc = peak_chains<T>;
  V acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = V::broadcast(static_cast<T>(j) * T(1e-3));
  // acc = acc * x + y converges to y / (1 - x): no overflow, no subnormals.
  const V x = V::broadcast(T(0.999999)), y = V::broadcast(T(1e-6));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < kAcc; ++j) acc[j] = simd::fma(acc[j], x, y);
  }
  V s = acc[0];
  for (int j = 1; j < kAcc; ++j) s += acc[j];
  T out[V::width];
  s.store(out);
  return out[0];
}

#if defined(BENCH_PEAK_TARGETED)
#pragma GCC pop_options
#endif

template <class T>
void register_peak(const char* impl, int t) {
  if (!ts::cpu_supports(peak_isa)) return;
  if constexpr (simd::available<T>) {
    const std::string name =
        std::string("peak/") + impl + "/" + simd::isa_name + "/threads:" + std::to_string(t);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), [t](benchmark::State& st) {
      std::vector<T> sink(static_cast<size_t>(t));
      settle("peak");
      for (auto _ : st) {
        if (t == 1) {
          sink[0] = fma_chains<T>(kPeakIters);
        } else {
#pragma omp parallel num_threads(t)
          sink[static_cast<size_t>(omp_get_thread_num())] = fma_chains<T>(kPeakIters);
        }
        benchmark::DoNotOptimize(sink.data());
        benchmark::ClobberMemory();
      }
      set_flops(st, 2.0 * simd::vec<T>::width * peak_chains<T> * kPeakIters * t);
      st.SetLabel(std::to_string(peak_chains<T>) + " chains of " + simd::isa_name + " fma");
    });
    b->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
}

// ---------------------------------------------------------------- problems
// tn: a^T b (a stored [k, m]); nt: a b^T (b stored [n, k]); nn_a7: nn with int8 A in [-64, 63]
// (7-bit activations, which AVX2 without VNNI multiplies faster: gemm/kernel_int8.hpp).
enum class layout { nn, tn, nt, nn_a7 };

struct dims {
  int64_t batch, m, k, n;  // batch 0: plain 2-D matrices
  layout lay = layout::nn;
  int64_t batches() const { return std::max<int64_t>(batch, 1); }
  double flops() const { return 2.0 * static_cast<double>(batches() * m * k * n); }
  std::array<int64_t, 5> key() const { return {batch, m, k, n, static_cast<int64_t>(lay)}; }
};

template <class T, class O>
struct problem {
  dims d;
  ts::Tensor<T> a_mem, b_mem;  // the buffers all implementations read
  ts::Tensor<T> a, b;          // logical [.., m, k] and [.., k, n]: views of a_mem, b_mem
  ts::Tensor<O> c;             // [.., m, n], written by every implementation
};

ts::Shape shape_of(int64_t batch, int64_t rows, int64_t cols) {
  return batch ? ts::Shape{batch, rows, cols} : ts::Shape{rows, cols};
}

template <class T>
ts::Tensor<T> last2_transposed(const ts::Tensor<T>& x) {
  return x.transpose(x.rank() - 2, x.rank() - 1);
}

template <class T>
ts::Tensor<T> random_input(const ts::Shape& s, ts::Generator& g) {
  if constexpr (std::is_integral_v<T>)
    return ts::randint<T>(-128, 128, s, g);
  else if constexpr (std::is_same_v<T, float>)
    return ts::rand<float>(s, g, -1.0, 1.0);
  else
    return ts::rand<float>(s, g, -1.0, 1.0).template astype<T>();
}

// One set of inputs per (types, dims), shared by every implementation and thread count.
template <class T, class O>
problem<T, O>& get_problem(const dims& d) {
  static std::map<std::array<int64_t, 5>, std::unique_ptr<problem<T, O>>> cache;
  auto& p = cache[d.key()];
  if (!p) {
    p = std::make_unique<problem<T, O>>();
    p->d = d;
    ts::Generator g(42);
    p->a_mem = random_input<T>(
        d.lay == layout::tn ? shape_of(d.batch, d.k, d.m) : shape_of(d.batch, d.m, d.k), g);
    p->b_mem = random_input<T>(
        d.lay == layout::nt ? shape_of(d.batch, d.n, d.k) : shape_of(d.batch, d.k, d.n), g);
    if constexpr (std::is_integral_v<T>)
      if (d.lay == layout::nn_a7)
        p->a_mem = ts::randint<T>(-64, 64, shape_of(d.batch, d.m, d.k), g);
    p->a = d.lay == layout::tn ? last2_transposed(p->a_mem) : p->a_mem;
    p->b = d.lay == layout::nt ? last2_transposed(p->b_mem) : p->b_mem;
    p->c = ts::zeros<O>(shape_of(d.batch, d.m, d.n));
  }
  return *p;
}

// ---------------------------------------------------------------- correctness check
// Relative to sum_q |a_iq * b_qj| (the scale of the rounding error): float accumulation gets
// 1e-3 (loose: any blocking order passes, a wrong index does not), double 1e-10, int32 exact.
template <class O>
constexpr double tolerance = std::is_integral_v<O>       ? 0.0
                             : std::is_same_v<O, double> ? 1e-10
                                                         : 1e-3;

template <class O>
void poison(ts::Tensor<O>& c) {
  O v = std::numeric_limits<O>::quiet_NaN();
  if constexpr (std::is_integral_v<O>) v = O(-12345);
  std::fill(c.data(), c.data() + c.numel(), v);
}

template <class T, class O>
void verify(const std::string& name, const problem<T, O>& p) {
  const dims& d = p.d;
  const auto a = p.a.template astype<double>(), b = p.b.template astype<double>();
  const auto c = p.c.template astype<double>();
  const double *pa = a.data(), *pb = b.data(), *pc = c.data();
  std::vector<double> ref(static_cast<size_t>(d.n)), mag(ref.size());
  const int64_t rows = std::min<int64_t>(d.m, 32);  // sampled evenly, first and last included
  for (int64_t bi = 0; bi < d.batches(); ++bi) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = rows == d.m ? r : r * (d.m - 1) / (rows - 1);
      std::fill(ref.begin(), ref.end(), 0.0);
      std::fill(mag.begin(), mag.end(), 0.0);
      const double* ai = pa + (bi * d.m + i) * d.k;
      for (int64_t q = 0; q < d.k; ++q) {
        const double x = ai[q];
        const double* bq = pb + (bi * d.k + q) * d.n;
        for (int64_t j = 0; j < d.n; ++j) {
          ref[static_cast<size_t>(j)] += x * bq[j];
          mag[static_cast<size_t>(j)] += std::abs(x * bq[j]);
        }
      }
      const double* ci = pc + (bi * d.m + i) * d.n;
      for (int64_t j = 0; j < d.n; ++j) {
        const double want = ref[static_cast<size_t>(j)];
        const double bound = tolerance<O> * mag[static_cast<size_t>(j)];
        if (!(std::abs(ci[j] - want) <= bound)) {
          std::fprintf(stderr,
                       "bench_matmul: %s computes a wrong product: c[%lld, %lld, %lld] = %.9g, "
                       "float64 reference %.9g (allowed error %.3g)\n",
                       name.c_str(), static_cast<long long>(bi), static_cast<long long>(i),
                       static_cast<long long>(j), ci[j], want, bound);
          std::abort();
        }
      }
    }
  }
}

bool first_time(const std::string& name) {
  static std::set<std::string> seen;
  return seen.insert(name).second;
}

// Registers <group>/<impl>/<shape>/threads:<t>. make(problem, t) sets the library's thread count
// and returns the callable that does one multiply into problem.c.
template <class T, class O, class Make>
void add(const std::string& group, const std::string& impl, const std::string& shape, const dims& d,
         int t, int64_t iterations, Make make) {
  const std::string name = group + "/" + impl + "/" + shape + "/threads:" + std::to_string(t);
  const std::string lib = impl.substr(0, impl.find('_'));
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
    auto& p = get_problem<T, O>(d);
    settle(lib);
    auto run = make(p, t);
    if (first_time(name)) {
      poison(p.c);
      run();
      verify(name, p);
    } else {
      run();  // warm-up: caches, page faults, thread pools
    }
    for (auto _ : st) {
      run();
      benchmark::ClobberMemory();
    }
    set_flops(st, d.flops());
    if constexpr (std::is_integral_v<T>) st.SetLabel("GOP/s (int8 multiply-adds)");
  });
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
  if (iterations > 0) b->Iterations(iterations);
}

// ---------------------------------------------------------------- implementations
auto tessera_impl = [](auto& p, int t) {
  ts::set_num_threads(t);
  return [&p] { (void)ts::matmul(p.a, p.b, p.c); };
};

#ifdef TESSERA_BENCH_HAVE_OPENBLAS
template <class T>
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const T* a,
               int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  const auto la = static_cast<blasint>(lda), lb = static_cast<blasint>(ldb),
             lc = static_cast<blasint>(ldc);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, la, b, lb, 0.0f, c, lc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a, la, b, lb, 0.0, c, lc);
}

auto openblas_impl = [](auto& p, int t) {
  using T = std::remove_pointer_t<decltype(p.c.data())>;
  const dims d = p.d;
  openblas_set_num_threads(d.batch ? 1 : t);
  const CBLAS_TRANSPOSE ta = d.lay == layout::tn ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = d.lay == layout::nt ? CblasTrans : CblasNoTrans;
  const int64_t lda = d.lay == layout::tn ? d.m : d.k, ldb = d.lay == layout::nt ? d.k : d.n;
  return [&p, d, t, ta, tb, lda, ldb] {
    const T *a = p.a_mem.data(), *b = p.b_mem.data();
    T* c = p.c.data();
    if (!d.batch) {
      blas_gemm<T>(ta, tb, d.m, d.n, d.k, a, lda, b, ldb, c, d.n);
      return;
    }
#pragma omp parallel for num_threads(t) schedule(static)
    for (int64_t i = 0; i < d.batch; ++i)
      blas_gemm<T>(ta, tb, d.m, d.n, d.k, a + i * d.m * d.k, lda, b + i * d.k * d.n, ldb,
                   c + i * d.m * d.n, d.n);
  };
};
#endif

auto eigen_impl = [](auto& p, int t) {
  using T = std::remove_pointer_t<decltype(p.c.data())>;
  using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const dims d = p.d;
  Eigen::setNbThreads(d.batch ? 1 : t);
  const auto one = [&p, d](int64_t i) {
    const bool ta = d.lay == layout::tn, tb = d.lay == layout::nt;
    Eigen::Map<const M> a(p.a_mem.data() + i * d.m * d.k, ta ? d.k : d.m, ta ? d.m : d.k);
    Eigen::Map<const M> b(p.b_mem.data() + i * d.k * d.n, tb ? d.n : d.k, tb ? d.k : d.n);
    Eigen::Map<M> c(p.c.data() + i * d.m * d.n, d.m, d.n);
    if (ta)
      c.noalias() = a.transpose() * b;
    else if (tb)
      c.noalias() = a * b.transpose();
    else
      c.noalias() = a * b;
  };
  return [one, d, t] {
    if (!d.batch) {
      one(0);
      return;
    }
#pragma omp parallel for num_threads(t) schedule(static)
    for (int64_t i = 0; i < d.batch; ++i) one(i);
  };
};

// tessera, OpenBLAS and Eigen on the same problem, one after the other.
template <class T>
void add_anchored(const std::string& group, const std::string& shape, const dims& d, int t,
                  int64_t iterations = 0) {
  add<T, T>(group, "tessera", shape, d, t, iterations, tessera_impl);
#ifdef TESSERA_BENCH_HAVE_OPENBLAS
  add<T, T>(group, "openblas", shape, d, t, iterations, openblas_impl);
#endif
  add<T, T>(group, "eigen", shape, d, t, iterations, eigen_impl);
}

// ---------------------------------------------------------------- weights from memory
struct stream_problem {
  ts::Tensor<float> x, y;
  std::vector<ts::Tensor<float>> w;  // [k, n] row-major each
  std::vector<ts::packed_linear<float, ts::cpu>> packed;
};
stream_problem& get_stream_problem(int64_t m, int64_t k, int64_t n) {
  static std::map<std::array<int64_t, 3>, std::unique_ptr<stream_problem>> cache;
  auto& slot = cache[{m, k, n}];
  if (!slot) {
    slot = std::make_unique<stream_problem>();
    ts::Generator g(7);
    slot->x = ts::randn<float>({m, k}, g);
    slot->y = ts::empty<float>({m, n});
    const int64_t count = std::max<int64_t>(4, (int64_t{96} << 20) / (k * n * 4));
    for (int64_t i = 0; i < count; ++i) {
      slot->w.push_back(ts::randn<float>({k, n}, g));
      slot->packed.push_back(ts::pack_linear(slot->w.back().transpose(0, 1)));
    }
  }
  return *slot;
}

void add_linear_stream(int64_t m, int64_t k, int64_t n, int t) {
  const std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  for (const std::string impl : {"tessera", "tessera_packed", "openblas"}) {
#ifndef TESSERA_BENCH_HAVE_OPENBLAS
    if (impl == "openblas") continue;
#endif
    const std::string name =
        "linear_stream/" + impl + "/" + shape + "/threads:" + std::to_string(t);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
      stream_problem& p = get_stream_problem(m, k, n);
      settle(impl == "openblas" ? "openblas" : "tessera");
      ts::set_num_threads(t);
#ifdef TESSERA_BENCH_HAVE_OPENBLAS
      openblas_set_num_threads(t);
#endif
      size_t next = 0;
      auto run = [&] {
        const size_t i = next++ % p.w.size();
        if (impl == "tessera") {
          p.y = ts::linear(p.x, p.w[i].transpose(0, 1));
        } else if (impl == "tessera_packed") {
          p.y = ts::linear(p.x, p.packed[i]);
        } else {
#ifdef TESSERA_BENCH_HAVE_OPENBLAS
          blas_gemm<float>(CblasNoTrans, CblasNoTrans, m, n, k, p.x.data(), k, p.w[i].data(), n,
                           p.y.data(), n);
#endif
        }
      };
      // Checked against the plain product before timing: a fast wrong kernel is worth nothing.
      run();
      const auto want = ts::matmul(p.x, p.w[0]).to_vector(), got = p.y.to_vector();
      for (size_t j = 0; j < want.size(); ++j)
        if (std::abs(got[j] - want[j]) > 1e-3f * (1 + std::abs(want[j]))) {
          std::fprintf(stderr, "%s: wrong result at %zu\n", name.c_str(), j);
          std::abort();
        }
      for (auto _ : st) {
        run();
        benchmark::ClobberMemory();
      }
      set_flops(st, 2.0 * static_cast<double>(m * n * k));
      st.counters["weight GB/s"] = benchmark::Counter(
          static_cast<double>(k * n * 4) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    });
    b->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const int threads[] = {1, 2};

  for (int t : threads) {
    register_peak<float>("fma_fp32", t);
    register_peak<double>("fma_fp64", t);
  }
  for (int64_t n : {32, 64, 128, 256, 512, 1024, 2048, 4096})
    for (int t : threads)
      if (n < 4096)
        add_anchored<float>("sgemm_square", std::to_string(n), {0, n, n, n}, t);
      else if (t == 2)  // ~140 GFLOP a multiply: a few seconds each
        add_anchored<float>("sgemm_square", std::to_string(n), {0, n, n, n}, t, 2);
  for (layout lay : {layout::tn, layout::nt})
    for (int64_t n : {512, 1024})
      for (int t : threads)
        add_anchored<float>(lay == layout::tn ? "sgemm_tn" : "sgemm_nt", std::to_string(n),
                            {0, n, n, n, lay}, t);
  for (int64_t n : {64, 128, 256, 512, 1024, 2048})
    for (int t : threads) add_anchored<double>("dgemm_square", std::to_string(n), {0, n, n, n}, t);
  for (const dims& d : {dims{0, 64, 784, 256}, dims{0, 64, 3136, 128}, dims{0, 64, 256, 10},
                        dims{256, 32, 32, 32}}) {
    std::string shape;  // built with append: GCC 12 -O3 flags "b" + string with a bogus -Wrestrict
    if (d.batch) shape.append("b").append(std::to_string(d.batch)).append("_");
    shape.append(std::to_string(d.m)).append("x").append(std::to_string(d.k));
    shape.append("x").append(std::to_string(d.n));
    for (int t : threads) add_anchored<float>("ml", shape, d, t);
  }
  for (int64_t n : {256, 1024}) {
    const dims d{0, n, n, n};
    const std::string s = std::to_string(n);
    for (int t : threads) {
      add<ts::bfloat16, float>("lowp", "tessera_bf16", s, d, t, 0, tessera_impl);
      add<ts::half, float>("lowp", "tessera_fp16", s, d, t, 0, tessera_impl);
      add<ts::float8_e4m3, float>("lowp", "tessera_fp8", s, d, t, 0, tessera_impl);
      add<int8_t, int32_t>("lowp", "tessera_int8", s, d, t, 0, tessera_impl);
      add<int8_t, int32_t>("lowp", "tessera_int8_a7", s, {0, n, n, n, layout::nn_a7}, t, 0,
                           tessera_impl);
    }
  }

  // all-MiniLM-L6-v2's linear layers at 1 x 16 tokens: the stacked q/k/v, the output, the two
  // feed-forward products.
  for (const auto& [k, n] :
       {std::pair<int64_t, int64_t>{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}})
    for (int t : threads) add_linear_stream(16, k, n, t);

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
