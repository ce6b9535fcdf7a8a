// tessera/text/wordpiece.hpp - the BERT WordPiece tokenizer: text to the token ids of a BERT
// vocabulary, the same ids as Hugging Face's `tokenizers` (BertNormalizer, BertPreTokenizer,
// WordPiece, [CLS] ... [SEP]), with truncation, padding and attention masks for batches.
//
// Not part of the umbrella header: it needs utf8proc for Unicode categories, decomposition and
// case mapping (Debian libutf8proc-dev; link -lutf8proc, or pkg-config libutf8proc), and
// nlohmann/json to read tokenizer.json (from_pretrained).
//
// The steps, as the Rust implementation takes them:
//   1. clean: drop NUL, U+FFFD and "other" characters (Cc Cf Cn Co Cs, but not \t \n \r); any
//      White_Space character becomes a space;
//   2. CJK ideographs get a space on each side;
//   3. strip accents (on by default when lowercasing): canonical decomposition (NFD), then drop
//      nonspacing marks (Mn);
//   4. lowercase, character by character;
//   5. split on White_Space (dropped) and on punctuation (ASCII punctuation or P*; each one a
//      word of its own);
//   6. WordPiece per word: the longest vocabulary entry from the left, "##" before pieces that
//      continue a word; a word with a piece not in the vocabulary, or over 100 characters, is
//      [UNK] as a whole.
#pragma once

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../backend/cpu/memory.hpp"
#include "../core/error.hpp"
#include "../core/tensor.hpp"

TESSERA_BEGIN_NAMESPACE

namespace detail::wordpiece {

/// Rust's char::is_whitespace: the Unicode White_Space property (PropList.txt; unchanged since
/// Unicode 6.3).
inline bool is_whitespace(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}
/// BertNormalizer's "control": a general category C* other than \t, \n and \r.
inline bool is_other(int32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS:
      return true;
    default:
      return false;
  }
}
/// The CJK ideograph blocks BERT splits character by character.
inline bool is_chinese(int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}
/// BertPreTokenizer's punctuation: ASCII punctuation ($ + < = > ^ ` | ~ included) or P*.
inline bool is_punctuation(int32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  const auto cat = utf8proc_category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

/// UTF-8 to code points; an invalid byte becomes U+FFFD (which cleaning then drops).
inline std::vector<int32_t> decode(std::string_view s) {
  std::vector<int32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t c = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n <= 0) c = 0xFFFD, n = 1;
    out.push_back(c);
    p += n, left -= n;
  }
  return out;
}
inline void append_utf8(std::string& s, int32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(c, buf);
  s.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace detail::wordpiece

namespace text {

/// The BertNormalizer settings of a tokenizer.json; strip_accents unset follows lowercase.
struct bert_normalizer {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool lowercase = true;
  std::optional<bool> strip_accents;
};

/// Token ids of a batch, padded to one length: input_ids, attention_mask (1 for tokens, 0 for
/// padding) and token_type_ids (all 0 for single sentences), each int64 [batch, length].
struct batch_encoding {
  Tensor<int64_t> input_ids, attention_mask, token_type_ids;
};

class WordPiece {
 public:
  /// The vocabulary of `vocab.txt` (one token per line, the id is the line number) with the
  /// given normalizer. Throws io_error for a file that cannot be read or holds a token twice,
  /// and error when [UNK], [CLS], [SEP] or [PAD] is missing.
  static WordPiece from_vocab_file(const std::filesystem::path& vocab_txt,
                                   bert_normalizer normalizer = {},
                                   int max_input_chars_per_word = 100) {
    std::ifstream in(vocab_txt, std::ios::binary);
    if (!in) detail::fail<io_error>("WordPiece", "'", vocab_txt.string(), "': cannot be read");
    WordPiece t;
    t.norm_ = normalizer;
    t.max_word_chars_ = max_input_chars_per_word;
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.pop_back();  // as the reference, which trims the end of each line
      const auto id = static_cast<int32_t>(t.tokens_.size());
      if (!t.vocab_.emplace(line, id).second)
        detail::fail<io_error>("WordPiece", "'", vocab_txt.string(), "': token '", line,
                               "' appears twice (lines ", t.vocab_.at(line) + 1, " and ", id + 1,
                               ")");
      t.tokens_.push_back(line);
    }
    t.unk_ = t.special("[UNK]");
    t.cls_ = t.special("[CLS]");
    t.sep_ = t.special("[SEP]");
    t.pad_ = t.special("[PAD]");
    return t;
  }

  /// The tokenizer of a Hugging Face model folder: vocab.txt, with the normalizer and WordPiece
  /// settings of tokenizer.json when the folder has one (BertNormalizer and WordPiece only;
  /// another type is an error rather than different ids).
  static WordPiece from_pretrained(const std::filesystem::path& dir) {
    bert_normalizer norm;
    int max_chars = 100;
    const auto json_path = dir / "tokenizer.json";
    if (std::filesystem::exists(json_path)) {
      std::ifstream in(json_path, std::ios::binary);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(in);
        const auto& n = j.at("normalizer");
        if (n.at("type") != "BertNormalizer")
          detail::fail<error>("WordPiece", "'", json_path.string(), "': normalizer ",
                              n.at("type").dump(), " is not BertNormalizer");
        norm.clean_text = n.value("clean_text", true);
        norm.handle_chinese_chars = n.value("handle_chinese_chars", true);
        norm.lowercase = n.value("lowercase", true);
        if (n.contains("strip_accents") && !n.at("strip_accents").is_null())
          norm.strip_accents = n.at("strip_accents").get<bool>();
        const auto& m = j.at("model");
        if (m.at("type") != "WordPiece")
          detail::fail<error>("WordPiece", "'", json_path.string(), "': model ",
                              m.at("type").dump(), " is not WordPiece");
        max_chars = m.value("max_input_chars_per_word", 100);
      } catch (const nlohmann::json::exception& e) {
        detail::fail<io_error>("WordPiece", "'", json_path.string(), "': ", e.what());
      }
    }
    return from_vocab_file(dir / "vocab.txt", norm, max_chars);
  }

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  /// The id of `token`, or -1.
  int32_t id_of(std::string_view token) const {
    const auto it = vocab_.find(std::string(token));
    return it == vocab_.end() ? -1 : it->second;
  }
  const std::string& token_of(int64_t id) const {
    if (id < 0 || id >= vocab_size())
      detail::fail<index_error>("WordPiece", "id ", id, " is outside the vocabulary of ",
                                vocab_size());
    return tokens_[static_cast<size_t>(id)];
  }

  /// Steps 1-4: the normalized text.
  std::string normalize(std::string_view text) const {
    namespace wp = detail::wordpiece;
    std::string out;
    out.reserve(text.size());
    const bool strip = norm_.strip_accents.value_or(norm_.lowercase);
    for (const int32_t c : wp::decode(text)) {
      if (norm_.clean_text) {
        if (c == 0 || c == 0xFFFD || wp::is_other(c)) continue;
        if (wp::is_whitespace(c)) {
          out += ' ';
          continue;
        }
      }
      const bool spaced = norm_.handle_chinese_chars && wp::is_chinese(c);
      if (spaced) out += ' ';
      append_folded(out, c, strip);
      if (spaced) out += ' ';
    }
    return out;
  }

  /// The WordPiece ids of `text`, without [CLS] and [SEP].
  std::vector<int32_t> tokenize_ids(std::string_view text) const {
    namespace wp = detail::wordpiece;
    std::vector<int32_t> ids;
    const std::vector<int32_t> cps = wp::decode(normalize(text));
    size_t i = 0;
    while (i < cps.size()) {
      if (wp::is_whitespace(cps[i])) {
        ++i;
        continue;
      }
      size_t j = i + 1;
      if (!wp::is_punctuation(cps[i]))
        while (j < cps.size() && !wp::is_whitespace(cps[j]) && !wp::is_punctuation(cps[j])) ++j;
      word_ids(std::span<const int32_t>(cps.data() + i, j - i), ids);
      i = j;
    }
    return ids;
  }
  /// The WordPiece tokens of `text` (strings), without [CLS] and [SEP].
  std::vector<std::string> tokenize(std::string_view text) const {
    std::vector<std::string> out;
    for (const int32_t id : tokenize_ids(text)) out.push_back(tokens_[static_cast<size_t>(id)]);
    return out;
  }

  /// [CLS] tokens [SEP], the tokens cut so that the whole is at most max_length ids (0: no
  /// limit; at least 2 when given).
  std::vector<int64_t> encode(std::string_view text, int64_t max_length = 0) const {
    if (max_length != 0 && max_length < 2)
      detail::fail<error>("WordPiece::encode", "max_length ", max_length,
                          " leaves no room for [CLS] and [SEP]");
    std::vector<int32_t> ids = tokenize_ids(text);
    if (max_length > 0 && static_cast<int64_t>(ids.size()) > max_length - 2)
      ids.resize(static_cast<size_t>(max_length - 2));
    std::vector<int64_t> out;
    out.reserve(ids.size() + 2);
    out.push_back(cls_);
    out.insert(out.end(), ids.begin(), ids.end());
    out.push_back(sep_);
    return out;
  }

  /// Every text encoded (truncated to max_length when given) and padded with [PAD] on the right
  /// to the longest of the batch (pad_to_max_length: to max_length).
  batch_encoding encode_batch(std::span<const std::string> texts, int64_t max_length = 0,
                              bool pad_to_max_length = false) const {
    std::vector<std::vector<int64_t>> rows;
    int64_t longest = 0;
    for (const std::string& t : texts) {
      rows.push_back(encode(t, max_length));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(rows.back().size()));
    }
    if (pad_to_max_length && max_length > 0) longest = max_length;
    const int64_t b = static_cast<int64_t>(rows.size());
    const Shape shape{b, longest};
    batch_encoding e{Tensor<int64_t>(shape), Tensor<int64_t>(shape), Tensor<int64_t>(shape)};
    std::fill_n(e.input_ids.data(), b * longest, int64_t{pad_});
    std::fill_n(e.attention_mask.data(), b * longest, int64_t{0});
    std::fill_n(e.token_type_ids.data(), b * longest, int64_t{0});
    for (int64_t r = 0; r < b; ++r) {
      const auto& row = rows[static_cast<size_t>(r)];
      std::copy(row.begin(), row.end(), e.input_ids.data() + r * longest);
      std::fill_n(e.attention_mask.data() + r * longest, row.size(), int64_t{1});
    }
    return e;
  }

 private:
  WordPiece() = default;

  int32_t special(const char* token) const {
    const int32_t id = id_of(token);
    if (id < 0) detail::fail<error>("WordPiece", "the vocabulary has no ", token, " token");
    return id;
  }
  int32_t lower(int32_t c) const { return norm_.lowercase ? utf8proc_tolower(c) : c; }
  /// Steps 3 and 4 for one character: its canonical decomposition without nonspacing marks
  /// (when stripping accents), lowercased.
  void append_folded(std::string& out, int32_t c, bool strip) const {
    utf8proc_int32_t parts[32];
    int boundclass = 0;
    const auto n = strip ? utf8proc_decompose_char(c, parts, 32, UTF8PROC_DECOMPOSE, &boundclass)
                         : utf8proc_ssize_t{-1};
    if (n < 0 || n > 32) {
      detail::wordpiece::append_utf8(out, lower(c));
      return;
    }
    for (utf8proc_ssize_t i = 0; i < n; ++i)
      if (utf8proc_category(parts[i]) != UTF8PROC_CATEGORY_MN)
        detail::wordpiece::append_utf8(out, lower(parts[i]));
  }

  /// Step 6 for one word of code points.
  void word_ids(std::span<const int32_t> word, std::vector<int32_t>& ids) const {
    if (static_cast<int64_t>(word.size()) > max_word_chars_) {
      ids.push_back(unk_);
      return;
    }
    std::vector<size_t> offset(word.size() + 1);  // byte offset of each character
    std::string utf8;
    for (size_t k = 0; k < word.size(); ++k) {
      offset[k] = utf8.size();
      detail::wordpiece::append_utf8(utf8, word[k]);
    }
    offset[word.size()] = utf8.size();
    const size_t first = ids.size();
    std::string piece;
    for (size_t start = 0; start < word.size();) {
      int32_t found = -1;
      size_t end = word.size();
      for (; end > start; --end) {
        piece.assign(start > 0 ? "##" : "");
        piece.append(utf8, offset[start], offset[end] - offset[start]);
        const auto it = vocab_.find(piece);
        if (it != vocab_.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {
        ids.resize(first);
        ids.push_back(unk_);
        return;
      }
      ids.push_back(found);
      start = end;
    }
  }

  bert_normalizer norm_;
  int64_t max_word_chars_ = 100;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;
  int32_t unk_ = 0, cls_ = 0, sep_ = 0, pad_ = 0;
};

}  // namespace text
TESSERA_END_NAMESPACE
