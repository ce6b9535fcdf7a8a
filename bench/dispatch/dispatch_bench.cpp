// What a user's program gets from tessera when built with plain -O2 (run-time choice of the
// instruction set) against the same program built with -march=native: matmul, conv2d and exp, on
// 2 threads. Built twice by bench/dispatch/CMakeLists.txt; scripts/bench_dispatch.sh runs both.
// Names: <op>/<flavour>/<isa>, flavour plain or native, isa the kernels that ran.
#include <benchmark/benchmark.h>

#include <string>
#include <tessera/tessera.hpp>

namespace ts = tessera;

namespace {

std::string name_of(const char* op) {
  return std::string(op) + "/" + DISPATCH_FLAVOUR + "/" + ts::isa_name(ts::get_isa());
}

void matmul_1024(benchmark::State& st) {
  ts::Generator g(1);
  const auto a = ts::randn<float>({1024, 1024}, g), b = ts::randn<float>({1024, 1024}, g);
  auto c = ts::empty<float>({1024, 1024});
  for (auto _ : st) {
    ts::matmul(a, b, c);
    benchmark::DoNotOptimize(c.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 1024 * 1024 * 1024, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void conv2d_resnet(benchmark::State& st) {
  // A ResNet-18 layer-1 convolution: [8, 64, 56, 56] by [64, 64, 3, 3], padding 1.
  ts::Generator g(2);
  const auto x = ts::randn<float>({8, 64, 56, 56}, g), w = ts::randn<float>({64, 64, 3, 3}, g);
  for (auto _ : st) {
    auto y = ts::conv2d(x, w, {.padding = {1, 1}});
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * 8 * 64 * 56 * 56 * 64 * 9,
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

void exp_16m(benchmark::State& st) {
  ts::Generator g(3);
  const auto x = ts::rand<float>({int64_t{1} << 24}, g, -10, 10);
  auto y = ts::empty<float>({int64_t{1} << 24});
  for (auto _ : st) {
    ts::map_to(y, ts::fn::exp_{}, x);
    benchmark::DoNotOptimize(y.data());
  }
}

}  // namespace

int main(int argc, char** argv) {
  ts::set_num_threads(2);
  benchmark::RegisterBenchmark(name_of("matmul_1024").c_str(), matmul_1024)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(name_of("conv2d_8x64x56x56_3x3").c_str(), conv2d_resnet)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(name_of("exp_2^24").c_str(), exp_16m)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
