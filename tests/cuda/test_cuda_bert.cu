// The BERT encoder (models/bert.hpp) on CUDA tensors against the CPU, in every precision: a
// small random model written as a Hugging Face folder (config.json, vocab.txt,
// model.safetensors), loaded once per backend, run on sentences of several lengths padded into
// one batch. The whole transformer path runs on the device: embeddings, fused attention with
// a padding mask, layer norms, GELU and each precision's linear layers. all-MiniLM-L6-v2 itself
// is too large to carry to a GPU machine; its CPU results are checked against transformers in
// tests/test_bert.cpp. Every test skips, with a message, when no CUDA device is visible.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tessera/models/bert.hpp>
#include <utility>
#include <vector>

#include "cuda_test_util.cuh"

namespace {
using namespace cuda_test;
namespace fs = std::filesystem;
namespace bert = ts::models::bert;

/// Writes a random BERT (2 layers, hidden 64 in 2 heads of 32, inner 128) into `dir`.
void write_random_bert(const fs::path& dir) {
  fs::create_directories(dir);
  const std::vector<std::string> words = {
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",   "a",     "cat",    "dog",
      "sat",   "on",    "mat",   "gpu",   "runs",   "fast",  "slow",  "model",  "tensor",
      "##s",   "##ing", "##ed",  "word",  "piece",  "token", "batch", "length", ".",
      ",",     "!",     "?",     "one",   "two",    "three", "four",  "five",   "six"};
  std::ofstream vocab(dir / "vocab.txt", std::ios::binary);
  for (const std::string& w : words) vocab << w << '\n';
  const int64_t v = static_cast<int64_t>(words.size()), h = 64, f = 128, positions = 64;
  std::ofstream(dir / "config.json", std::ios::binary)
      << R"({"model_type":"bert","vocab_size":)" << v
      << R"(,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":2,)"
      << R"("intermediate_size":128,"max_position_embeddings":64,"type_vocab_size":2,)"
      << R"("layer_norm_eps":1e-12,"hidden_act":"gelu"})";
  ts::Generator g(2026);
  std::vector<std::pair<std::string, HostT<float>>> w;
  auto add = [&](const std::string& name, ts::Shape s, float scale, float shift = 0) {
    w.emplace_back(name, ts::randn<float, ts::cpu>(s, g) * scale + shift);
  };
  add("embeddings.word_embeddings.weight", {v, h}, 0.5f);
  add("embeddings.position_embeddings.weight", {positions, h}, 0.1f);
  add("embeddings.token_type_embeddings.weight", {2, h}, 0.1f);
  add("embeddings.LayerNorm.weight", {h}, 0.1f, 1);
  add("embeddings.LayerNorm.bias", {h}, 0.1f);
  for (int i = 0; i < 2; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      add(p + "attention.self." + qkv + ".weight", {h, h}, 0.15f);
      add(p + "attention.self." + qkv + ".bias", {h}, 0.05f);
    }
    add(p + "attention.output.dense.weight", {h, h}, 0.1f);
    add(p + "attention.output.dense.bias", {h}, 0.05f);
    add(p + "attention.output.LayerNorm.weight", {h}, 0.1f, 1);
    add(p + "attention.output.LayerNorm.bias", {h}, 0.1f);
    add(p + "intermediate.dense.weight", {f, h}, 0.1f);
    add(p + "intermediate.dense.bias", {f}, 0.05f);
    add(p + "output.dense.weight", {h, f}, 0.08f);
    add(p + "output.dense.bias", {h}, 0.05f);
    add(p + "output.LayerNorm.weight", {h}, 0.1f, 1);
    add(p + "output.LayerNorm.bias", {h}, 0.1f);
  }
  ts::io::save_safetensors<float>(dir / "model.safetensors", w);
}

/// A random model folder for the suite, removed at the end.
class CudaBert : public CudaFixture {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera_cuda_bert_" + std::to_string(::getpid()));
    write_random_bert(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path dir_;
};
fs::path CudaBert::dir_;

// Lengths 2 to 39 tokens in one batch: the shorter ones padded, so the attention masks matter.
const std::vector<std::string> texts = {
    "",
    "the cat sat on the mat.",
    "two dogs, three cats!",
    "a gpu runs tensors fast and the model runs slow batch length token piece word",
    "the the the the the the the the the the the the the the the the the the the the "
    "one two three four five six one two three four five six one two three four five",
    "unknown zebra words?"};

/// Smallest cosine between matching rows of a and b (unit rows: their dot product).
double min_cosine(const HostT<float>& a, const HostT<float>& b) {
  const auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector();
  const int64_t rows = a.shape()[0], h = a.shape()[1];
  double m = 1;
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0, xx = 0, yy = 0;
    for (int64_t i = r * h; i < (r + 1) * h; ++i)
      dot += double(x[i]) * y[i], xx += double(x[i]) * x[i], yy += double(y[i]) * y[i];
    m = std::min(m, dot / std::sqrt(xx * yy));
  }
  return m;
}

TEST_F(CudaBert, Float32TokenStatesAndEmbeddingsMatchCpu) {
  const auto cpu = bert::load<ts::cpu>(dir_);
  const auto gpu = bert::load<ts::cuda>(dir_);
  const auto enc = cpu.tokenizer.encode_batch(texts, cpu.max_length);
  ASSERT_EQ(enc.input_ids.shape()[0], 6);
  ASSERT_GE(enc.input_ids.shape()[1], 32);
  const HostT<float> want = cpu.forward(enc.input_ids, enc.attention_mask);
  const HostT<float> got =
      gpu.forward(enc.input_ids.to<ts::cuda>(), enc.attention_mask.to<ts::cuda>()).to<ts::cpu>();
  // Token states have magnitude ~1 after the layer norms; float sums in another order.
  expect_close(got, want, 0, 2e-4, "token states");
  const HostT<float> e_cpu = cpu.encode(texts), e_gpu = gpu.encode(texts).to<ts::cpu>();
  expect_close(e_gpu, e_cpu, 0, 2e-5, "embeddings");
  // Batches of 4 (a full and a partial one) give each text's embedding as the whole batch did.
  expect_close(gpu.encode(texts, 4).to<ts::cpu>(), e_cpu, 0, 2e-5, "embeddings, batches of 4");
}

TEST_F(CudaBert, EveryPrecisionMatchesTheCpuInTheSamePrecision) {
  const HostT<float> fp32 = bert::load<ts::cpu>(dir_).encode(texts);
  for (bert::precision p : bert::precisions) {
    if (p == bert::precision::fp32) continue;
    SCOPED_TRACE(bert::precision_name(p));
    const HostT<float> cpu = bert::load<ts::cpu>(dir_, p).encode(texts);
    const HostT<float> gpu = bert::load<ts::cuda>(dir_, p).encode(texts).to<ts::cpu>();
    // The same rounded weights and per-row activation scales on both; products summed in
    // another order can round an activation to a neighbouring value, hence not exact.
    EXPECT_GE(min_cosine(gpu, cpu), 0.9999);
    // And each stays near float32, as on the CPU (tests/test_bert.cpp's bounds).
    EXPECT_GE(min_cosine(gpu, fp32), 0.99);
  }
}

}  // namespace
