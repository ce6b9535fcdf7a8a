// Tensor-parallel BERT (dist/bert.hpp) under mpiexec with 2 and 3 ranks: every rank holds a
// share of the heads and feed-forward features, and the sentence embeddings and token states
// equal those of the whole model loaded in one process.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tessera/dist/bert.hpp>
#include <vector>

#include "mpi_gtest.hpp"

namespace ts = tessera;
namespace fs = std::filesystem;
namespace bert = ts::models::bert;

namespace {

using mpi_gtest::world;

fs::path model_dir() {
  const char* env = std::getenv("TESSERA_MINILM_DIR");
  return env && *env ? fs::path(env) : fs::path(TESSERA_MINILM_DIR);
}

double max_abs_diff(const ts::Tensor<float, ts::cpu>& a, const ts::Tensor<float, ts::cpu>& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = a.contiguous(), y = b.contiguous();
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    m = std::max(m, std::abs(static_cast<double>(x.data()[i]) - y.data()[i]));
  return m;
}

const std::vector<std::string> sentences = {
    "The quick brown fox jumps over the lazy dog.", "A tensor library for C++ engineers.",
    "Distributed inference splits the attention heads across processes.", "short",
    "Naïve café résumé, with accents and punctuation!!!"};

TEST(TensorParallelBert, EqualsTheWholeModel) {
  auto& pg = world();
  ASSERT_TRUE(fs::exists(model_dir() / "model.safetensors"))
      << "no model in '" << model_dir().string() << "': run scripts/bootstrap.sh test";
  const auto whole = bert::load(model_dir());
  const auto part = ts::dist::load_bert_tensor_parallel(model_dir(), pg);
  // Each rank holds its share of the encoder's matrices and of the biases of the layers split
  // by output (query, key, value, the first feed-forward layer), not all of them.
  const int64_t h = whole.cfg.hidden_size, f = whole.cfg.intermediate_size;
  const int64_t split = whole.cfg.num_hidden_layers * (4 * h * h + 2 * h * f + 3 * h + f);
  EXPECT_EQ(whole.held_weights() - part.held_weights(), split - split / pg.size())
      << "rank " << pg.rank();

  const auto expected = whole.encode(std::span<const std::string>(sentences), 2);
  const auto got = part.encode(std::span<const std::string>(sentences), 2);
  EXPECT_LT(max_abs_diff(got, expected), 1e-5) << "rank " << pg.rank();

  const auto enc = whole.tokenizer.encode_batch(std::span<const std::string>(sentences), 64);
  EXPECT_LT(max_abs_diff(part.forward(enc.input_ids, enc.attention_mask),
                         whole.forward(enc.input_ids, enc.attention_mask)),
            1e-4);
}

TEST(TensorParallelBert, RefusesASplitThatDoesNotDivide) {
  auto& pg = world();
  bert::partition<ts::cpu> five{0, 5, [](const ts::Tensor<float, ts::cpu>&) {}};
  EXPECT_THROW(bert::load(model_dir(), bert::precision::fp32, five), ts::shape_error);
  bert::partition<ts::cpu> no_reduce{0, 2, nullptr};
  EXPECT_THROW(bert::load(model_dir(), bert::precision::fp32, no_reduce), ts::shape_error);
  bert::partition<ts::cpu> bad_rank{2, 2, [](const ts::Tensor<float, ts::cpu>&) {}};
  EXPECT_THROW(bert::load(model_dir(), bert::precision::fp32, bad_rank), ts::index_error);
  pg.barrier();
}

}  // namespace

int main(int argc, char** argv) { return mpi_gtest::run_all_tests(argc, argv); }
