// Scaled dot-product attention, fused (blocked, online softmax: the scores never stored) against
// the unfused composition matmul -> scale + mask -> softmax -> matmul, on the same inputs: 2048
// tokens per run split into batch x L (L = 128, 512, 2048), 8 heads of 64, a key padding mask,
// 2 threads. Counters: GFLOP/s (the two products, 4 L^2 d per head) and peak_MiB, the growth of
// the process's peak resident memory over one call (the inputs already resident).
#include <benchmark/benchmark.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tessera/tessera.hpp>

namespace ts = tessera;

namespace {

constexpr int kThreads = 2;
constexpr int64_t kTokens = 2048, kHeads = 8, kDim = 64;

struct inputs {
  ts::Tensor<float> q, k, v, mask;
  explicit inputs(int64_t l) {
    const int64_t n = kTokens / l;
    ts::Generator g(1);
    q = ts::rand<float>({n, kHeads, l, kDim}, g, -1, 1);
    k = ts::rand<float>({n, kHeads, l, kDim}, g, -1, 1);
    v = ts::rand<float>({n, kHeads, l, kDim}, g, -1, 1);
    // The last eighth of every sequence is padding (a large negative bias, as BERT's).
    mask = ts::zeros<float>({n, 1, 1, l});
    mask.slice(3, l - l / 8, l).fill_(-1e30f);
  }
};

/// VmRSS or VmHWM of this process, in KiB.
int64_t status_kib(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string k;
  int64_t v = 0;
  while (f >> k) {
    if (k == key + ":") {
      f >> v;
      return v;
    }
    std::getline(f, k);
  }
  return -1;
}

/// How far one call of f raises the peak resident memory above the current one, in MiB
/// (Linux: writing 5 to clear_refs resets the peak). -1 where that is not available.
template <class F>
double peak_growth_mib(F&& f) {
  {
    std::ofstream c("/proc/self/clear_refs");
    if (!(c << "5")) return -1;
  }
  const int64_t before = status_kib("VmRSS");
  f();
  const int64_t peak = status_kib("VmHWM");
  return before < 0 || peak < 0 ? -1 : static_cast<double>(peak - before) / 1024.0;
}

template <bool Fused>
void Attention(benchmark::State& st) {
  ts::set_num_threads(kThreads);
  const int64_t l = st.range(0);
  static std::map<int64_t, std::unique_ptr<inputs>> cache;
  auto& in = cache[l];
  if (!in) in = std::make_unique<inputs>(l);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  auto run = [&] {
    if constexpr (Fused)
      return ts::scaled_dot_product_attention(in->q, in->k, in->v, in->mask, false, scale);
    else
      return ts::detail::attention_composed(in->q, in->k, in->v, in->mask, false, scale);
  };
  // Measured on the first call only: Google Benchmark runs this function more than once, and
  // memory freed by an earlier run may still be resident.
  static std::map<int64_t, double> peak;
  if (!peak.count(l)) peak[l] = peak_growth_mib([&] { benchmark::DoNotOptimize(run()); });
  st.counters["peak_MiB"] = peak[l];
  for (auto _ : st) benchmark::DoNotOptimize(run());
  const double flops = 4.0 * static_cast<double>(kTokens / l) * kHeads * l * l * kDim;
  st.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void Attention_Fused(benchmark::State& st) { Attention<true>(st); }
void Attention_Unfused(benchmark::State& st) { Attention<false>(st); }

}  // namespace

BENCHMARK(Attention_Fused)
    ->Arg(128)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(Attention_Unfused)
    ->Arg(128)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
