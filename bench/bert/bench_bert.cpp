// all-MiniLM-L6-v2 inference in tessera: throughput at batch 32 x 128 tokens (sentences/s) and
// latency at batch 1 x 16 tokens, in every precision (fp32, bf16, fp16, int8, int8w7, fp8), 2
// threads. Token ids are fixed random ordinary words, every token attended. The anchors (PyTorch,
// ONNX Runtime fp32 and int8) run the same shapes in bench/bert/bert_anchors.py;
// scripts/bench_bert.sh runs both and prints one table. The model folder: TESSERA_MINILM_DIR, else
// scripts/fetch_model.sh's.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <tessera/models/bert.hpp>
#include <tessera/tessera.hpp>

namespace ts = tessera;

namespace {

std::string model_dir() {
  if (const char* d = std::getenv("TESSERA_MINILM_DIR"); d && *d) return d;
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  return (cache && *cache ? std::string(cache) : std::string(home ? home : ".") + "/.cache") +
         "/tessera/all-MiniLM-L6-v2";
}

/// The model in precision P, loaded on first use (a run filtered to one precision loads one).
template <ts::models::bert::precision P>
const ts::models::bert::Model<>& model() {
  static const auto m = ts::models::bert::load(model_dir(), P);
  return m;
}

template <ts::models::bert::precision P>
void BertForward(benchmark::State& st) {
  ts::set_num_threads(2);
  const int64_t n = st.range(0), l = st.range(1);
  ts::Generator g(1);
  const auto ids = ts::randint<int64_t>(1000, 20000, {n, l}, g);
  const auto mask = ts::ones<int64_t>({n, l});
  const auto& m = model<P>();
  (void)m.forward(ids, mask);  // warm-up: page in the mapped weights
  for (auto _ : st) {
    auto out = m.forward(ids, mask);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["sentences/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

using ts::models::bert::precision;
void BertForward_fp32(benchmark::State& st) { BertForward<precision::fp32>(st); }
void BertForward_bf16(benchmark::State& st) { BertForward<precision::bf16>(st); }
void BertForward_fp16(benchmark::State& st) { BertForward<precision::fp16>(st); }
void BertForward_int8(benchmark::State& st) { BertForward<precision::int8>(st); }
void BertForward_fp8(benchmark::State& st) { BertForward<precision::fp8>(st); }
void BertForward_int8w7(benchmark::State& st) { BertForward<precision::int8w7>(st); }

}  // namespace

#define TESSERA_BERT_BENCH(f) \
  BENCHMARK(f)->Args({32, 128})->Args({1, 16})->Unit(benchmark::kMillisecond)->UseRealTime()
TESSERA_BERT_BENCH(BertForward_fp32);
TESSERA_BERT_BENCH(BertForward_bf16);
TESSERA_BERT_BENCH(BertForward_fp16);
TESSERA_BERT_BENCH(BertForward_int8);
TESSERA_BERT_BENCH(BertForward_int8w7);
TESSERA_BERT_BENCH(BertForward_fp8);
BENCHMARK_MAIN();
