// tessera/models/bert.hpp - BERT encoders from a Hugging Face folder (config.json,
// model.safetensors, vocab.txt, tokenizer.json), and sentence embeddings as sentence-transformers
// computes them (mean pooling over the attention mask, then L2 normalization):
//
//   auto m = ts::models::bert::load("all-MiniLM-L6-v2");
//   ts::Tensor<float> e = m.encode({"a sentence", "another one"});   // [2, 384], unit rows
//
// Inference only, with float32, bf16, fp16, int8 or fp8 linear layers (precision), on the CPU
// (views of the memory-mapped weight file) or on another backend (weights copied there); whole, or
// split across processes by heads and inner features (partition; dist/bert.hpp runs it over MPI).
// Needs what io/safetensors.hpp and text/wordpiece.hpp need: nlohmann/json and utf8proc.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../io/safetensors.hpp"
#include "../ops/embedding.hpp"
#include "../ops/packed_linear.hpp"
#include "../ops/quant.hpp"
#include "../tessera.hpp"
#include "../text/wordpiece.hpp"

TESSERA_BEGIN_NAMESPACE
namespace models::bert {

/// The fields of config.json that the encoder uses.
struct config {
  int64_t vocab_size = 0, hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0,
          intermediate_size = 0, max_position_embeddings = 0, type_vocab_size = 0;
  double layer_norm_eps = 1e-12;

  /// Reads and checks config.json: a BERT with absolute positions and exact GELU. Throws
  /// io_error naming the file for a missing file, bad JSON or a missing field, and error for
  /// another architecture or inconsistent sizes.
  static config read(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) detail::fail<io_error>("bert::load", "'", path.string(), "': cannot be read");
    config c;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
      c.vocab_size = j.at("vocab_size").get<int64_t>();
      c.hidden_size = j.at("hidden_size").get<int64_t>();
      c.num_hidden_layers = j.at("num_hidden_layers").get<int64_t>();
      c.num_attention_heads = j.at("num_attention_heads").get<int64_t>();
      c.intermediate_size = j.at("intermediate_size").get<int64_t>();
      c.max_position_embeddings = j.at("max_position_embeddings").get<int64_t>();
      c.type_vocab_size = j.value("type_vocab_size", int64_t{2});
      c.layer_norm_eps = j.value("layer_norm_eps", 1e-12);
    } catch (const nlohmann::json::exception& e) {
      detail::fail<io_error>("bert::load", "'", path.string(), "': ", e.what());
    }
    const std::string act = j.value("hidden_act", std::string("gelu"));
    const std::string pos = j.value("position_embedding_type", std::string("absolute"));
    if (j.value("model_type", std::string("bert")) != "bert" || act != "gelu" || pos != "absolute")
      detail::fail<error>("bert::load", "'", path.string(),
                          "': only BERT with hidden_act gelu and absolute positions is supported"
                          " (model_type ",
                          j.value("model_type", std::string("?")), ", hidden_act ", act, ")");
    if (c.hidden_size <= 0 || c.num_attention_heads <= 0 ||
        c.hidden_size % c.num_attention_heads != 0 || c.num_hidden_layers < 0)
      detail::fail<error>("bert::load", "'", path.string(), "': hidden_size ", c.hidden_size,
                          " is not a positive multiple of num_attention_heads ",
                          c.num_attention_heads);
    return c;
  }
};

/// How the linear layers run (ops/quant.hpp): float32; bfloat16 or half weights with the
/// activations rounded to the same type; int8 with dynamic quantization (weights per output
/// channel at load time, activations per row at run time); int8w7, the same with 7-bit weights
/// (values in [-64, 64]: on CPUs with AVX2 but not VNNI the int8 GEMM then multiplies twice as
/// fast, exactly; a little less accurate, docs/models.md); float8 e4m3 weights with one scale
/// per output channel and float32 activations. Embeddings, layer norms and attention stay
/// float32 in all of them.
enum class precision { fp32, bf16, fp16, int8, fp8, int8w7 };

/// Every precision, in the order of the enum.
inline constexpr precision precisions[] = {precision::fp32, precision::bf16, precision::fp16,
                                           precision::int8, precision::fp8,  precision::int8w7};

/// The name of a precision as the command-line flags spell it: fp32, bf16, fp16, int8, fp8,
/// int8w7.
inline const char* precision_name(precision p) {
  switch (p) {
    case precision::bf16:
      return "bf16";
    case precision::fp16:
      return "fp16";
    case precision::int8:
      return "int8";
    case precision::fp8:
      return "fp8";
    case precision::int8w7:
      return "int8w7";
    default:
      return "fp32";
  }
}

/// The precision named `name` (precision_name's spelling); throws error listing the names.
inline precision parse_precision(std::string_view name) {
  for (precision p : precisions)
    if (name == precision_name(p)) return p;
  detail::fail<error>("bert::parse_precision", "'", name,
                      "' is not a precision: fp32, bf16, fp16, int8, fp8 or int8w7");
}

/// Whether p runs the linear layers in int8 (int8_linear): int8 and int8w7.
inline bool is_int8(precision p) { return p == precision::int8 || p == precision::int8w7; }

/// Whether load rounds p's weights by GPTQ when given calibration texts: fp8, int8 and int8w7
/// (the other precisions have nothing to choose between).
inline bool takes_calibration(precision p) { return p == precision::fp8 || is_int8(p); }

/// int8 layers keep input features above this magnitude out of the int8 product (ops/quant.hpp,
/// int8_linear); 6 as LLM.int8. On the 200 search queries of examples/data/search_queries.txt,
/// the top result agreed with float32's on 92.5% without it and 97.5% with it, for 11% more time
/// at 32 x 128 tokens.
inline constexpr float int8_outlier_threshold = 6.0f;

/// One linear layer of the encoder, in the model's precision. The float32 and int8 weights are
/// packed once for the backend's GEMM (ops/packed_linear.hpp): the GEMM reads them in place
/// instead of packing them on every call, and for short inputs streams them contiguously. The
/// narrow float forms are stored transposed, [in, out] contiguous (ops/quant.hpp).
template <class B>
struct dense {
  precision prec = precision::fp32;
  packed_linear<float, B> weight;  // fp32 only
  Tensor<float, B> bias;           // fp32 only
  int8_linear_weights<B> int8;
  lowp_linear_weights<bfloat16, B> bf16;
  lowp_linear_weights<half, B> fp16;
  lowp_linear_weights<float8_e4m3, B> fp8;

  dense() = default;
  /// hessian (fp8, int8; optional): the sum of x x^T over calibration inputs x of the layer, for
  /// GPTQ's rounding (ops/gptq.hpp) instead of rounding to nearest.
  dense(Tensor<float, B> w, Tensor<float, B> b, precision p,
        const Tensor<double, B>* hessian = nullptr)
      : prec(p) {
    switch (p) {
      case precision::int8:
      case precision::int8w7: {
        const int top = p == precision::int8w7 ? 64 : 127;
        int8 =
            pack_linear(hessian ? quantize_linear_int8(w, b, int8_outlier_threshold, *hessian, top)
                                : quantize_linear_int8(w, b, int8_outlier_threshold, top));
        break;
      }
      case precision::bf16:
        bf16 = pack_linear(quantize_linear_lowp<bfloat16>(w, b));
        break;
      case precision::fp16:
        fp16 = quantize_linear_lowp<half>(w, b);
        break;
      case precision::fp8:
        fp8 = hessian ? quantize_linear_lowp<float8_e4m3>(w, b, *hessian)
                      : quantize_linear_lowp<float8_e4m3>(w, b);
        break;
      default:
        weight = pack_linear(w), bias = std::move(b);
    }
  }
  Tensor<float, B> operator()(const Tensor<float, B>& x) const {
    switch (prec) {
      case precision::int8:
      case precision::int8w7:
        return int8_linear(x, int8);
      case precision::bf16:
        return lowp_linear(x, bf16);
      case precision::fp16:
        return lowp_linear(x, fp16);
      case precision::fp8:
        return lowp_linear(x, fp8);
      default:
        return bias.defined() ? linear(x, weight, bias) : linear(x, weight);
    }
  }
  /// Weight and bias elements held (an 8-bit float layer's scales included).
  int64_t elements() const {
    auto lowp = [](const auto& q) {
      // Packed (bf16): the values are held once, in the panels.
      const int64_t values = q.values.defined() ? q.values.numel() : q.in_features * q.out_features;
      return values + q.bias.numel() + (q.scales.defined() ? q.scales.numel() : 0);
    };
    switch (prec) {
      case precision::int8:
      case precision::int8w7:
        return int8.in_features * int8.out_features + int8.bias.numel();
      case precision::bf16:
        return lowp(bf16);
      case precision::fp16:
        return lowp(fp16);
      case precision::fp8:
        return lowp(fp8);
      default:
        return weight.in_features * weight.out_features + (bias.defined() ? bias.numel() : 0);
    }
  }
};

/// One encoder layer (Hugging Face names under encoder.layer.<i>.). The query, key and value
/// projections are stacked into one [3h, h] layer: one product instead of three. In a
/// partitioned model, out and down hold a slice of their input features and their biases are
/// added after the partial products are summed across the processes (out_bias, down_bias).
template <class B>
struct layer {
  dense<B> qkv, out, up, down;
  Tensor<float, B> ln1_w, ln1_b, ln2_w, ln2_b;
  Tensor<float, B> out_bias, down_bias;
};

/// The part of the model this process holds in tensor-parallel inference (Megatron-style). Of
/// `count` processes, this one (`rank`) holds heads [rank * heads / count, (rank + 1) * heads /
/// count) of every attention layer and the same share of every feed-forward layer's inner
/// features, read from the weight file alone: no process holds the whole encoder. Each layer then
/// sums two partial results across the processes with `all_reduce` (in place), after the attention
/// output and after the feed-forward output. dist::load_bert_tensor_parallel passes a
/// ProcessGroup's all_reduce.
template <class B>
struct partition {
  int64_t rank = 0;
  int64_t count = 1;
  std::function<void(const Tensor<float, B>&)> all_reduce;
};

template <class B = cpu>
class Model {
 public:
  config cfg;
  text::WordPiece tokenizer;
  /// Longest input in tokens ([CLS] and [SEP] included): sentence_bert_config.json's
  /// max_seq_length when the folder has one, else max_position_embeddings.
  int64_t max_length = 0;

  /// Loads the folder. With calibration texts (fp8, int8), each linear layer is rounded by GPTQ
  /// against its inputs on those texts (round_by_gptq) instead of to nearest. Throws io_error /
  /// error as config::read, safetensors_file::open and WordPiece::from_pretrained do, io_error
  /// naming a weight that is missing or has another shape or dtype than the config implies, and
  /// error for calibration texts with another precision.
  static Model load(const std::filesystem::path& dir, precision prec = precision::fp32,
                    partition<B> part = {}, std::span<const std::string> calibration = {}) {
    config c = config::read(dir / "config.json");  // first: its errors say the most
    if (!calibration.empty() && !takes_calibration(prec))
      detail::fail<error>("bert::load", "calibration texts are for fp8 and int8, not ",
                          precision_name(prec));
    // Calibrated: the float32 layers first, whose inputs on the texts GPTQ needs.
    const precision built = calibration.empty() ? prec : precision::fp32;
    if (part.count < 1 || part.rank < 0 || part.rank >= part.count)
      detail::fail<index_error>("bert::load", "partition rank ", part.rank, " of ", part.count,
                                " is out of range");
    if (part.count > 1 && (!part.all_reduce || c.num_attention_heads % part.count != 0 ||
                           c.intermediate_size % part.count != 0))
      detail::fail<shape_error>("bert::load", "a partition in ", part.count, " needs ",
                                c.num_attention_heads, " heads and ", c.intermediate_size,
                                " inner features to divide evenly, and an all_reduce");
    Model m(c, text::WordPiece::from_pretrained(dir));
    m.part_ = std::move(part);
    const auto st =
        io::safetensors_file::open(dir / "model.safetensors", io::safetensors_mode::map);
    const int64_t h = m.cfg.hidden_size, f = m.cfg.intermediate_size;
    // A weight as a view of the mapped file, checked against the shape the config implies.
    auto mapped = [&](const std::string& name, const Shape& shape) {
      // Some exports prefix every name with "bert.".
      const std::string n = st.contains(name) ? name : "bert." + name;
      if (!st.contains(n))
        detail::fail<io_error>("bert::load", "'", st.path().string(), "': no weight '", name, "'");
      const Tensor<float, cpu> t = st.get<float>(n);
      if (t.shape() != shape)
        detail::fail<io_error>("bert::load", "'", st.path().string(), "': weight '", n,
                               "' has shape ", t.shape(), ", expected ", shape);
      return t;
    };
    auto on_backend = [](const Tensor<float, cpu>& t) {
      if constexpr (std::is_same_v<B, cpu>)
        return t;
      else
        return t.template to<B>();
    };
    auto get = [&](const std::string& name, Shape shape) {
      return on_backend(mapped(name, shape));
    };
    // This process's slice of a weight along dim (all of it in an unpartitioned model). Only
    // the slice is read from the mapped file.
    auto part_of = [&](const std::string& name, Shape shape, int dim) {
      const Tensor<float, cpu> t = mapped(name, shape);
      if (m.part_.count == 1) return on_backend(t);
      const int64_t size = shape[static_cast<size_t>(dim)] / m.part_.count;
      return on_backend(t.slice(dim, m.part_.rank * size, (m.part_.rank + 1) * size).contiguous());
    };
    const bool split = m.part_.count > 1;
    m.word_ = get("embeddings.word_embeddings.weight", {m.cfg.vocab_size, h});
    m.position_ = get("embeddings.position_embeddings.weight", {m.cfg.max_position_embeddings, h});
    m.token_type_ = get("embeddings.token_type_embeddings.weight", {m.cfg.type_vocab_size, h});
    m.emb_ln_w_ = get("embeddings.LayerNorm.weight", {h});
    m.emb_ln_b_ = get("embeddings.LayerNorm.bias", {h});
    for (int64_t i = 0; i < m.cfg.num_hidden_layers; ++i) {
      const std::string p = "encoder.layer." + std::to_string(i) + ".";
      layer<B> l;
      auto qkv_part = [&](const char* which, bool bias) {  // this process's heads
        const std::string n = p + "attention.self." + which + (bias ? ".bias" : ".weight");
        return part_of(n, bias ? Shape{h} : Shape{h, h}, 0);
      };
      l.qkv =
          dense<B>(cat(std::vector<Tensor<float, B>>{
                       qkv_part("query", false), qkv_part("key", false), qkv_part("value", false)}),
                   cat(std::vector<Tensor<float, B>>{qkv_part("query", true), qkv_part("key", true),
                                                     qkv_part("value", true)}),
                   built);
      // Row-parallel when split: a slice of the input features, the bias after the sum.
      const Tensor<float, B> out_bias = get(p + "attention.output.dense.bias", {h});
      l.out = dense<B>(part_of(p + "attention.output.dense.weight", {h, h}, 1),
                       split ? Tensor<float, B>() : out_bias, built);
      if (split) l.out_bias = out_bias;
      l.ln1_w = get(p + "attention.output.LayerNorm.weight", {h});
      l.ln1_b = get(p + "attention.output.LayerNorm.bias", {h});
      l.up = dense<B>(part_of(p + "intermediate.dense.weight", {f, h}, 0),
                      part_of(p + "intermediate.dense.bias", {f}, 0), built);
      const Tensor<float, B> down_bias = get(p + "output.dense.bias", {h});
      l.down = dense<B>(part_of(p + "output.dense.weight", {h, f}, 1),
                        split ? Tensor<float, B>() : down_bias, built);
      if (split) l.down_bias = down_bias;
      l.ln2_w = get(p + "output.LayerNorm.weight", {h});
      l.ln2_b = get(p + "output.LayerNorm.bias", {h});
      m.layers_.push_back(std::move(l));
    }
    m.max_length = m.cfg.max_position_embeddings;
    std::ifstream sb(dir / "sentence_bert_config.json", std::ios::binary);
    if (sb) {
      try {
        m.max_length =
            std::min(m.max_length, nlohmann::json::parse(sb).value("max_seq_length", m.max_length));
      } catch (const nlohmann::json::exception& e) {
        detail::fail<io_error>("bert::load", "'", (dir / "sentence_bert_config.json").string(),
                               "': ", e.what());
      }
    }
    if (!calibration.empty()) m.round_by_gptq(calibration, prec);
    return m;
  }

  /// The last hidden states [n, l, hidden] of token ids [n, l] (int64) with attention_mask
  /// [n, l] (1: a token, 0: padding; padded positions attend to nothing and are attended by
  /// nothing that counts) and token_type_ids [n, l] (undefined: all 0). Throws shape_error for
  /// mismatched shapes or more than max_position_embeddings tokens, index_error for ids outside
  /// the vocabulary.
  Tensor<float, B> forward(const Tensor<int64_t, B>& ids, const Tensor<int64_t, B>& mask,
                           const Tensor<int64_t, B>& token_types = {}) const {
    return forward_observed(ids, mask, token_types, nullptr);
  }

  /// Sentence embeddings [texts, hidden]: each text tokenized (cut to max_length tokens), run
  /// in batches of `batch` texts padded to their longest, the token states averaged over the
  /// attention mask and scaled to unit length, as sentence-transformers' mean pooling and
  /// Normalize modules do.
  Tensor<float, B> encode(std::span<const std::string> texts, int64_t batch = 32) const {
    if (batch < 1) detail::fail<error>("bert::encode", "batch ", batch, " must be positive");
    const int64_t count = static_cast<int64_t>(texts.size()), h = cfg.hidden_size;
    Tensor<float, B> out = zeros<float, B>({count, h});
    for (int64_t b = 0; b < count; b += batch) {
      const int64_t e = std::min(count, b + batch);
      const auto enc = tokenizer.encode_batch(
          texts.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)), max_length);
      const Tensor<int64_t, B> ids = enc.input_ids.template to<B>();
      const Tensor<int64_t, B> mask = enc.attention_mask.template to<B>();
      const Tensor<float, B> states = forward(ids, mask, enc.token_type_ids.template to<B>());
      const Tensor<float, B> m = mask.template astype<float>().reshape({e - b, ids.shape()[1], 1});
      const Tensor<float, B> pooled =
          sum(states * m, {1}) / maximum(sum(m, {1}), full<float, B>({1}, 1e-9f));
      const Tensor<float, B> norm = sqrt(sum(pooled * pooled, {1}, true));
      out.slice(0, b, e).copy_(pooled / maximum(norm, full<float, B>({1}, 1e-12f)));
    }
    return out;
  }
  Tensor<float, B> encode(std::initializer_list<std::string> texts, int64_t batch = 32) const {
    const std::vector<std::string> v(texts);
    return encode(std::span<const std::string>(v), batch);
  }

  /// How many weight elements this process holds (a partitioned model holds its share of the
  /// encoder's matrices, and the embeddings, norms and row-parallel biases whole).
  int64_t held_weights() const {
    int64_t total = word_.numel() + position_.numel() + token_type_.numel() + emb_ln_w_.numel() +
                    emb_ln_b_.numel();
    for (const layer<B>& w : layers_) {
      for (const dense<B>* d : {&w.qkv, &w.out, &w.up, &w.down}) total += d->elements();
      for (const Tensor<float, B>* t :
           {&w.ln1_w, &w.ln1_b, &w.ln2_w, &w.ln2_b, &w.out_bias, &w.down_bias})
        total += t->numel();  // 0 where undefined
    }
    return total;
  }

 private:
  /// Called with (4 * layer + which, input) before each linear layer runs, which being 0 for
  /// the query-key-value projection, 1 attention output, 2 feed-forward up, 3 down.
  using observer = std::function<void(size_t, const Tensor<float, B>&)>;

  Model(config c, text::WordPiece t) : cfg(c), tokenizer(std::move(t)) {}

  /// Replaces every float32 linear layer by one in precision p (fp8, int8) rounded by GPTQ: the
  /// texts run through the model in batches of 32, and each layer's H sums x x^T over the inputs x
  /// of the real (not padding) tokens.
  void round_by_gptq(std::span<const std::string> texts, precision p) {
    std::vector<Tensor<double, B>> h(layers_.size() * 4);
    Tensor<int64_t, B> real;  // the flat [n * l] positions of real tokens
    const observer sum_outer = [&](size_t which, const Tensor<float, B>& x) {
      const int64_t in = x.shape()[2];
      const Tensor<float, B> xs = embedding(x.reshape({-1, in}), real);  // [tokens, in]
      const Tensor<double, B> g = matmul(xs.transpose(0, 1), xs).template astype<double>();
      h[which] = h[which].defined() ? h[which] + g : g;
    };
    for (size_t b = 0; b < texts.size(); b += 32) {
      const size_t e = std::min(texts.size(), b + 32);
      const auto enc = tokenizer.encode_batch(texts.subspan(b, e - b), max_length);
      std::vector<int64_t> positions;
      const std::vector<int64_t> mask = enc.attention_mask.contiguous().to_vector();
      for (size_t i = 0; i < mask.size(); ++i)
        if (mask[i] != 0) positions.push_back(static_cast<int64_t>(i));
      real = from_vector<int64_t, B>(positions);
      (void)forward_observed(enc.input_ids.template to<B>(), enc.attention_mask.template to<B>(),
                             enc.token_type_ids.template to<B>(), &sum_outer);
    }
    for (size_t i = 0; i < layers_.size(); ++i) {
      layer<B>& l = layers_[i];
      dense<B>* ds[4] = {&l.qkv, &l.out, &l.up, &l.down};
      for (size_t which = 0; which < 4; ++which)
        *ds[which] =
            dense<B>(unpack_linear(ds[which]->weight), ds[which]->bias, p, &h[4 * i + which]);
    }
  }

  Tensor<float, B> forward_observed(const Tensor<int64_t, B>& ids, const Tensor<int64_t, B>& mask,
                                    const Tensor<int64_t, B>& token_types,
                                    const observer* observe) const {
    if (ids.rank() != 2 || mask.shape() != ids.shape() ||
        (token_types.defined() && token_types.shape() != ids.shape()))
      detail::fail<shape_error>("bert::forward", "ids, attention_mask and token_type_ids must be ",
                                "[n, l] alike, got ", ids.shape(), " and ", mask.shape());
    // A partitioned model computes its share of the heads: heads / parts of them, hp features.
    const int64_t n = ids.shape()[0], l = ids.shape()[1], h = cfg.hidden_size,
                  dh = h / cfg.num_attention_heads, heads = cfg.num_attention_heads / part_.count,
                  hp = heads * dh;
    if (l > cfg.max_position_embeddings)
      detail::fail<shape_error>("bert::forward", l, " tokens are more than the ",
                                cfg.max_position_embeddings, " positions of the model");
    const Tensor<int64_t, B> positions = arange<int64_t, B>(l).reshape({1, l});
    const Tensor<int64_t, B> types =
        token_types.defined() ? token_types : zeros<int64_t, B>({n, l});
    Tensor<float, B> x =
        embedding(word_, ids) + embedding(position_, positions) + embedding(token_type_, types);
    x = layer_norm(x, emb_ln_w_, emb_ln_b_, cfg.layer_norm_eps);
    // Padding keys get the lowest float added to their scores, as transformers does.
    const Tensor<float, B> key_bias =
        ((1.0f - mask.template astype<float>()) * std::numeric_limits<float>::lowest())
            .reshape({n, 1, 1, l});
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    auto split_heads = [&](const Tensor<float, B>& t) {  // [n, l, hp] -> [n, heads, l, dh]
      return t.reshape({n, l, heads, dh}).permute({0, 2, 1, 3});
    };
    // A row-parallel layer: partial products summed across the processes, then the bias.
    auto row_parallel = [&](const dense<B>& d, const Tensor<float, B>& bias,
                            const Tensor<float, B>& in) {
      if (part_.count == 1) return d(in);
      Tensor<float, B> y = d(in);
      part_.all_reduce(y);
      return y + bias;
    };
    size_t at = 0;  // 4 * layer, for observe
    for (const layer<B>& w : layers_) {
      if (observe) (*observe)(at, x);
      const Tensor<float, B> qkv = w.qkv(x);  // [n, l, 3hp]: q, k and v side by side
      const Tensor<float, B> q = split_heads(qkv.slice(2, 0, hp));
      const Tensor<float, B> k = split_heads(qkv.slice(2, hp, 2 * hp));
      const Tensor<float, B> v = split_heads(qkv.slice(2, 2 * hp, 3 * hp));
      const Tensor<float, B> ctx = scaled_dot_product_attention(q, k, v, key_bias, false, scale)
                                       .permute({0, 2, 1, 3})
                                       .contiguous()
                                       .reshape({n, l, hp});
      if (observe) (*observe)(at + 1, ctx);
      x = residual_layer_norm(row_parallel(w.out, w.out_bias, ctx), x, w.ln1_w, w.ln1_b,
                              cfg.layer_norm_eps);
      if (observe) (*observe)(at + 2, x);
      const Tensor<float, B> up = gelu(w.up(x));
      if (observe) (*observe)(at + 3, up);
      at += 4;
      x = residual_layer_norm(row_parallel(w.down, w.down_bias, up), x, w.ln2_w, w.ln2_b,
                              cfg.layer_norm_eps);
    }
    return x;
  }

  Tensor<float, B> word_, position_, token_type_, emb_ln_w_, emb_ln_b_;
  std::vector<layer<B>> layers_;
  partition<B> part_;
};

/// Model<B>::load(dir, precision, partition, calibration).
template <class B = cpu>
Model<B> load(const std::filesystem::path& dir, precision p = precision::fp32,
              partition<B> part = {}, std::span<const std::string> calibration = {}) {
  return Model<B>::load(dir, p, std::move(part), calibration);
}

}  // namespace models::bert
TESSERA_END_NAMESPACE
