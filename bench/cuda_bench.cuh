// cuda_bench.cuh - what the CUDA benchmark programs (bench_cuda*.cu) share: error checks, event
// timing on tessera's stream, registration of manually timed benchmarks, poisoned outputs and
// the relative error that checks tessera against the anchor before anything is timed, and the
// inputs kept from one row to the next.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tessera/cuda.hpp>
#include <type_traits>
#include <vector>

namespace cuda_bench {
namespace ts = tessera;

template <class T>
using DevT = ts::Tensor<T, ts::cuda>;

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Whether a CUDA device is visible (the programs exit 0 with a message when not).
inline bool have_gpu() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

/// The object the running rows share (kept_for), with the key it was made for.
struct kept_object {
  std::string key;
  std::shared_ptr<const void> value;
};

inline kept_object& last_kept() {
  static kept_object k;
  return k;
}

/// The V made from args for key, kept for the next row: a program registers the rows of one
/// shape one after another on the same inputs, and making them (host-drawn tensors, cudnnFind*)
/// takes longer than the timed calls, on a GPU whose time is the scarce resource. A new key
/// frees the previous object before making the next; the key must name V's type as well as its
/// arguments. run_main frees the last one after the run, while CUDA is still up.
template <class V, class... A>
const V& kept_for(const std::string& key, const A&... args) {
  kept_object& last = last_kept();
  if (!last.value || last.key != key) {
    last.value.reset();
    last.value = std::make_shared<const V>(args...);
    last.key = key;
  }
  return *static_cast<const V*>(last.value.get());
}

/// The main of a CUDA benchmark program: Google Benchmark's flags, then, when a GPU is visible,
/// add_benchmarks() and the run; without one it says so and returns 0 (CI builds these programs
/// on machines without a GPU).
inline int run_main(int argc, char** argv, const char* program, void (*add_benchmarks)()) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!have_gpu()) {
    std::printf("%s: no CUDA device visible, nothing to measure\n", program);
    return 0;
  }
  add_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  last_kept() = {};  // device memory kept between rows, freed while CUDA is up
  benchmark::Shutdown();
  return 0;
}

/// Sets the median_us counter from per-iteration times in microseconds (0 with none).
inline void set_median_us(benchmark::State& st, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  st.counters["median_us"] = us.empty() ? 0.0 : us[us.size() / 2];
}

/// Times calls of f with events on tessera's stream (where the anchors are also set to run): one
/// warm-up call, then one timed call per benchmark iteration; sets median_us. The time Google
/// Benchmark reports is the mean of the iterations.
template <class F>
void time_calls(benchmark::State& st, F&& f) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  const cudaStream_t s = ts::cuda_stream();
  f();
  check(cudaStreamSynchronize(s), "warm-up");
  std::vector<double> us;
  for (auto _ : st) {
    check(cudaEventRecord(start, s), "cudaEventRecord");
    f();
    check(cudaGetLastError(), "launch");
    check(cudaEventRecord(stop, s), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    st.SetIterationTime(ms * 1e-3);
    us.push_back(ms * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  set_median_us(st, us);
}

/// Times loops of `steps` back-to-back calls f(i) (i counting on across loops) by the wall clock,
/// the device waited for at the end of each loop: host and device overlap as in a training loop,
/// so a loop's time per call is its throughput, not one call's latency. One warm-up loop; sets
/// median_us (per call) and the iteration time Google Benchmark reports.
template <class F>
void time_loop(benchmark::State& st, int steps, F&& f) {
  int64_t i = 0;
  for (int w = 0; w < steps; ++w) f(i++);
  ts::backend::memory<ts::cuda>::synchronize();
  std::vector<double> us;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < steps; ++c) f(i++);
    ts::backend::memory<ts::cuda>::synchronize();
    const double per =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    st.SetIterationTime(per);
    us.push_back(per * 1e6);
  }
  set_median_us(st, us);
}

/// Registers a manually timed benchmark running body(state); an exception (a failed CUDA or
/// library call) fails that benchmark with its message instead of ending the program.
template <class Body>
void add_timed(const std::string& name, int iterations, Body body) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [body](benchmark::State& st) {
                                 try {
                                   body(st);
                                 } catch (const std::exception& e) {
                                   st.SkipWithError(e.what());
                                 }
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(iterations);
}

/// A device tensor every element of which says "not written": NaN, or a sentinel for integers.
template <class T>
DevT<T> poisoned(const ts::Shape& s) {
  if constexpr (std::is_integral_v<T>)
    return ts::full<T, ts::cuda>(s, T(0x7eadbeef));
  else
    return ts::full<T, ts::cuda>(s, T(std::numeric_limits<float>::quiet_NaN()));
}

/// ‖x − y‖ / ‖y‖ over host copies in double (NaN if x has a NaN: an unwritten element).
template <class T>
double rel_err(const DevT<T>& x, const DevT<T>& y) {
  const auto a = x.template astype<double>().template to<ts::cpu>().to_vector();
  const auto b = y.template astype<double>().template to<ts::cpu>().to_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

/// Sets rel_err and fails the benchmark (returning false) when it exceeds tol.
inline bool within(benchmark::State& st, double err, double tol, const char* anchor) {
  st.counters["rel_err"] = err;
  if (err <= tol) return true;
  st.SkipWithError(
      ("tessera differs from " + std::string(anchor) + ": rel_err " + std::to_string(err)).c_str());
  return false;
}

/// Scopes a float32 matmul precision (tf32 rows), restoring the previous one on exit.
struct precision_scope {
  ts::matmul_precision saved = ts::get_float32_matmul_precision();
  explicit precision_scope(ts::matmul_precision p) { ts::set_float32_matmul_precision(p); }
  ~precision_scope() { ts::set_float32_matmul_precision(saved); }
  precision_scope(const precision_scope&) = delete;
  precision_scope& operator=(const precision_scope&) = delete;
};

/// Scopes the split of k (gemm_split.cuh): 0 lets dispatch decide (the default), 1 keeps k whole.
struct split_scope {
  explicit split_scope(int parts) { ts::detail::cuda_gemm_split_k() = parts; }
  ~split_scope() { ts::detail::cuda_gemm_split_k() = 0; }
  split_scope(const split_scope&) = delete;
  split_scope& operator=(const split_scope&) = delete;
};

}  // namespace cuda_bench
