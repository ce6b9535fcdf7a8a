// Elementwise and reduction throughput: tessera side by side with Eigen (Array on one thread,
// Tensor on a 2-thread pool) and a plain OpenMP loop (the memory-bandwidth ceiling), on the same
// inputs, in cache (2^14 floats) and far out of cache (2^25 floats). Counter: GB/s moved
// (bytes read + written once).
#define EIGEN_USE_THREADS
#include <benchmark/benchmark.h>
#include <omp.h>

#include <Eigen/Core>
#include <tessera/tessera.hpp>
#include <unsupported/Eigen/CXX11/Tensor>

namespace ts = tessera;

namespace {

constexpr int kThreads = 2;
constexpr float kA = 1.5f;

struct inputs {
  ts::Tensor<float> x, y, z;
  explicit inputs(int64_t n) {
    ts::Generator g(1);
    x = ts::rand<float>({n}, g);
    y = ts::rand<float>({n}, g);
    z = ts::zeros<float>({n});
  }
};
inputs& data(int64_t n) {
  static std::map<int64_t, std::unique_ptr<inputs>> cache;
  auto& p = cache[n];
  if (!p) p = std::make_unique<inputs>(n);
  return *p;
}
Eigen::ThreadPoolDevice& eigen_pool() {
  static Eigen::ThreadPool pool(kThreads);
  static Eigen::ThreadPoolDevice dev(&pool, kThreads);
  return dev;
}
void set_bytes(benchmark::State& st, double bytes_per_iter) {
  st.counters["GB/s"] = benchmark::Counter(
      bytes_per_iter, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// ---------------------------------------------------------------- z = a*x + y
void Triad_PlainOpenMP(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  const float *x = d.x.data(), *y = d.y.data();
  float* z = d.z.data();
  for (auto _ : st) {
#pragma omp parallel for simd num_threads(kThreads) schedule(static)
    for (int64_t i = 0; i < n; ++i) z[i] = kA * x[i] + y[i];
    benchmark::ClobberMemory();
  }
  set_bytes(st, 12.0 * n);
}
void Triad_TesseraMapOut(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  ts::set_num_threads(kThreads);
  const float a = kA;
  for (auto _ : st) {
    ts::map_to(
        d.z, [a](float x, float y) { return a * x + y; }, d.x, d.y);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 12.0 * n);
}
void Triad_TesseraMapAlloc(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  ts::set_num_threads(kThreads);
  const float a = kA;
  (void)ts::map([a](float x, float y) { return a * x + y; }, d.x, d.y);  // warm-up: fills the cache
  for (auto _ : st) {
    auto z = ts::map([a](float x, float y) { return a * x + y; }, d.x, d.y);
    benchmark::DoNotOptimize(z.data());
  }
  set_bytes(st, 12.0 * n);
}
void Triad_TesseraOperators(benchmark::State& st) {  // a * x + y as two ops (a temporary)
  const int64_t n = st.range(0);
  auto& d = data(n);
  ts::set_num_threads(kThreads);
  for (auto _ : st) {
    auto z = kA * d.x + d.y;
    benchmark::DoNotOptimize(z.data());
  }
  set_bytes(st, 12.0 * n);
}
void Triad_EigenArray(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  Eigen::Map<const Eigen::ArrayXf> x(d.x.data(), n), y(d.y.data(), n);
  Eigen::Map<Eigen::ArrayXf> z(d.z.data(), n);
  for (auto _ : st) {
    z = kA * x + y;
    benchmark::ClobberMemory();
  }
  set_bytes(st, 12.0 * n);
}
void Triad_EigenTensorPool(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  Eigen::TensorMap<const Eigen::Tensor<float, 1, Eigen::RowMajor>> x(d.x.data(), n),
      y(d.y.data(), n);
  Eigen::TensorMap<Eigen::Tensor<float, 1, Eigen::RowMajor>> z(d.z.data(), n);
  for (auto _ : st) {
    z.device(eigen_pool()) = x * kA + y;
    benchmark::ClobberMemory();
  }
  set_bytes(st, 12.0 * n);
}

// ---------------------------------------------------------------- [N, C] + [C]
constexpr int64_t kC = 1024;
void BroadcastAdd_PlainOpenMP(benchmark::State& st) {
  const int64_t n = st.range(0), rows = n / kC;
  auto& d = data(n);
  const float *x = d.x.data(), *b = d.y.data();
  float* z = d.z.data();
  for (auto _ : st) {
#pragma omp parallel for num_threads(kThreads) schedule(static)
    for (int64_t r = 0; r < rows; ++r)
#pragma omp simd
      for (int64_t c = 0; c < kC; ++c) z[r * kC + c] = x[r * kC + c] + b[c];
    benchmark::ClobberMemory();
  }
  set_bytes(st, 8.0 * n);
}
void BroadcastAdd_TesseraAlloc(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  ts::set_num_threads(kThreads);
  auto x = d.x.view({n / kC, kC});
  auto b = d.y.slice(0, 0, kC);
  (void)(x + b);
  for (auto _ : st) {
    auto z = x + b;
    benchmark::DoNotOptimize(z.data());
  }
  set_bytes(st, 8.0 * n);
}
void BroadcastAdd_TesseraOut(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  ts::set_num_threads(kThreads);
  auto x = d.x.view({n / kC, kC});
  auto b = d.y.slice(0, 0, kC);
  auto z = d.z.view({n / kC, kC});
  for (auto _ : st) {
    ts::add(x, b, z);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 8.0 * n);
}
void BroadcastAdd_EigenMatrix(benchmark::State& st) {
  const int64_t n = st.range(0), rows = n / kC;
  auto& d = data(n);
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const M> x(d.x.data(), rows, kC);
  Eigen::Map<const Eigen::RowVectorXf> b(d.y.data(), kC);
  Eigen::Map<M> z(d.z.data(), rows, kC);
  for (auto _ : st) {
    z.noalias() = x.rowwise() + b;
    benchmark::ClobberMemory();
  }
  set_bytes(st, 8.0 * n);
}
void BroadcastAdd_EigenTensorPool(benchmark::State& st) {
  const int64_t n = st.range(0), rows = n / kC;
  auto& d = data(n);
  Eigen::TensorMap<const Eigen::Tensor<float, 2, Eigen::RowMajor>> x(d.x.data(), rows, kC);
  Eigen::TensorMap<const Eigen::Tensor<float, 2, Eigen::RowMajor>> b(d.y.data(), 1, kC);
  Eigen::TensorMap<Eigen::Tensor<float, 2, Eigen::RowMajor>> z(d.z.data(), rows, kC);
  const Eigen::array<Eigen::Index, 2> bc{rows, 1};
  for (auto _ : st) {
    z.device(eigen_pool()) = x + b.broadcast(bc);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 8.0 * n);
}

// ---------------------------------------------------------------- sum of everything
void Sum_PlainOpenMP(benchmark::State& st) {
  const int64_t n = st.range(0);
  const float* x = data(n).x.data();
  for (auto _ : st) {
    float s = 0;
#pragma omp parallel for simd num_threads(kThreads) reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < n; ++i) s += x[i];
    benchmark::DoNotOptimize(s);
  }
  set_bytes(st, 4.0 * n);
}
void Sum_Tessera(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& x = data(n).x;
  ts::set_num_threads(kThreads);
  for (auto _ : st) benchmark::DoNotOptimize(ts::sum(x).data());
  set_bytes(st, 4.0 * n);
}
void Sum_EigenArray(benchmark::State& st) {
  const int64_t n = st.range(0);
  Eigen::Map<const Eigen::ArrayXf> x(data(n).x.data(), n);
  for (auto _ : st) benchmark::DoNotOptimize(x.sum());
  set_bytes(st, 4.0 * n);
}
void Sum_EigenTensorPool(benchmark::State& st) {
  const int64_t n = st.range(0);
  Eigen::TensorMap<const Eigen::Tensor<float, 1, Eigen::RowMajor>> x(data(n).x.data(), n);
  Eigen::Tensor<float, 0, Eigen::RowMajor> s;
  for (auto _ : st) {
    s.device(eigen_pool()) = x.sum();
    benchmark::DoNotOptimize(s.data());
  }
  set_bytes(st, 4.0 * n);
}

// ---------------------------------------------------------------- sum / mean over rows or cols
// arg 1: the reduced axis of an [n / 1024, 1024] matrix (0: column sums, 1: row sums).
void SumAxis_PlainOpenMP(benchmark::State& st) {
  const int64_t n = st.range(0), rows = n / kC, axis = st.range(1);
  const float* x = data(n).x.data();
  std::vector<float> out(axis ? rows : kC);
  for (auto _ : st) {
    if (axis == 1) {
#pragma omp parallel for num_threads(kThreads) schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < kC; ++c) s += x[r * kC + c];
        out[r] = s;
      }
    } else {
#pragma omp parallel num_threads(kThreads)
      {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t c0 = kC * t / T, c1 = kC * (t + 1) / T;
        for (int64_t c = c0; c < c1; ++c) out[c] = 0;
        for (int64_t r = 0; r < rows; ++r)
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) out[c] += x[r * kC + c];
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 4.0 * n);
}
void SumAxis_Tessera(benchmark::State& st) {
  const int64_t n = st.range(0), axis = st.range(1);
  auto x = data(n).x.view({n / kC, kC});
  ts::set_num_threads(kThreads);
  for (auto _ : st) benchmark::DoNotOptimize(ts::sum(x, {axis}).data());
  set_bytes(st, 4.0 * n);
}
void MeanAxis_Tessera(benchmark::State& st) {
  const int64_t n = st.range(0), axis = st.range(1);
  auto x = data(n).x.view({n / kC, kC});
  ts::set_num_threads(kThreads);
  for (auto _ : st) benchmark::DoNotOptimize(ts::mean(x, {axis}).data());
  set_bytes(st, 4.0 * n);
}
void SumAxis_EigenMatrix(benchmark::State& st) {
  const int64_t n = st.range(0), rows = n / kC, axis = st.range(1);
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const M> x(data(n).x.data(), rows, kC);
  Eigen::VectorXf r(rows);
  Eigen::RowVectorXf c(kC);
  for (auto _ : st) {
    if (axis == 1) {
      r.noalias() = x.rowwise().sum();
      benchmark::DoNotOptimize(r.data());
    } else {
      c.noalias() = x.colwise().sum();
      benchmark::DoNotOptimize(c.data());
    }
  }
  set_bytes(st, 4.0 * n);
}
void SumAxis_EigenTensorPool(benchmark::State& st) {
  const int64_t n = st.range(0), rows = n / kC, axis = st.range(1);
  Eigen::TensorMap<const Eigen::Tensor<float, 2, Eigen::RowMajor>> x(data(n).x.data(), rows, kC);
  Eigen::Tensor<float, 1, Eigen::RowMajor> out(axis ? rows : kC);
  const Eigen::array<Eigen::Index, 1> dims{axis};
  for (auto _ : st) {
    out.device(eigen_pool()) = x.sum(dims);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 4.0 * n);
}
void MeanAxis_EigenTensorPool(benchmark::State& st) {
  const int64_t n = st.range(0), rows = n / kC, axis = st.range(1);
  Eigen::TensorMap<const Eigen::Tensor<float, 2, Eigen::RowMajor>> x(data(n).x.data(), rows, kC);
  Eigen::Tensor<float, 1, Eigen::RowMajor> out(axis ? rows : kC);
  const Eigen::array<Eigen::Index, 1> dims{axis};
  for (auto _ : st) {
    out.device(eigen_pool()) = x.mean(dims);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 4.0 * n);
}

// ---------------------------------------------------------------- exp / tanh
// arg 1: 0 = exp, 1 = tanh.
void Unary_PlainOpenMP(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  const float* x = d.x.data();
  float* z = d.z.data();
  const bool th = st.range(1);
  for (auto _ : st) {
    if (th) {
#pragma omp parallel for simd num_threads(kThreads) schedule(static)
      for (int64_t i = 0; i < n; ++i) z[i] = std::tanh(x[i]);
    } else {
#pragma omp parallel for simd num_threads(kThreads) schedule(static)
      for (int64_t i = 0; i < n; ++i) z[i] = std::exp(x[i]);
    }
    benchmark::ClobberMemory();
  }
  set_bytes(st, 8.0 * n);
}
void Unary_Tessera(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  ts::set_num_threads(kThreads);
  const bool th = st.range(1);
  for (auto _ : st) {
    auto z = th ? ts::tanh(d.x) : ts::exp(d.x);
    benchmark::DoNotOptimize(z.data());
  }
  set_bytes(st, 8.0 * n);
}
void Unary_EigenArray(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  Eigen::Map<const Eigen::ArrayXf> x(d.x.data(), n);
  Eigen::Map<Eigen::ArrayXf> z(d.z.data(), n);
  const bool th = st.range(1);
  for (auto _ : st) {
    if (th)
      z = x.tanh();
    else
      z = x.exp();
    benchmark::ClobberMemory();
  }
  set_bytes(st, 8.0 * n);
}
void Unary_EigenTensorPool(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto& d = data(n);
  Eigen::TensorMap<const Eigen::Tensor<float, 1, Eigen::RowMajor>> x(d.x.data(), n);
  Eigen::TensorMap<Eigen::Tensor<float, 1, Eigen::RowMajor>> z(d.z.data(), n);
  const bool th = st.range(1);
  for (auto _ : st) {
    if (th)
      z.device(eigen_pool()) = x.tanh();
    else
      z.device(eigen_pool()) = x.exp();
    benchmark::ClobberMemory();
  }
  set_bytes(st, 8.0 * n);
}

constexpr int64_t kSmall = 1 << 14, kLarge = 1 << 25;

}  // namespace

#define SIZES ->Arg(kSmall)->Arg(kLarge)->UseRealTime()
BENCHMARK(Triad_PlainOpenMP) SIZES;
BENCHMARK(Triad_TesseraMapOut) SIZES;
BENCHMARK(Triad_TesseraMapAlloc) SIZES;
BENCHMARK(Triad_TesseraOperators) SIZES;
BENCHMARK(Triad_EigenArray) SIZES;
BENCHMARK(Triad_EigenTensorPool) SIZES;
BENCHMARK(BroadcastAdd_PlainOpenMP) SIZES;
BENCHMARK(BroadcastAdd_TesseraOut) SIZES;
BENCHMARK(BroadcastAdd_TesseraAlloc) SIZES;
BENCHMARK(BroadcastAdd_EigenMatrix) SIZES;
BENCHMARK(BroadcastAdd_EigenTensorPool) SIZES;
BENCHMARK(Sum_PlainOpenMP) SIZES;
BENCHMARK(Sum_Tessera) SIZES;
BENCHMARK(Sum_EigenArray) SIZES;
BENCHMARK(Sum_EigenTensorPool) SIZES;
#define AXES ->ArgsProduct({{kSmall, kLarge}, {0, 1}})->UseRealTime()
BENCHMARK(SumAxis_PlainOpenMP) AXES;
BENCHMARK(SumAxis_Tessera) AXES;
BENCHMARK(MeanAxis_Tessera) AXES;
BENCHMARK(SumAxis_EigenMatrix) AXES;
BENCHMARK(SumAxis_EigenTensorPool) AXES;
BENCHMARK(MeanAxis_EigenTensorPool) AXES;
BENCHMARK(Unary_PlainOpenMP) AXES;
BENCHMARK(Unary_Tessera) AXES;
BENCHMARK(Unary_EigenArray) AXES;
BENCHMARK(Unary_EigenTensorPool) AXES;

BENCHMARK_MAIN();
