// The BERT WordPiece tokenizer: the ids of Hugging Face `tokenizers` on a 2063-line corpus of
// mixed scripts, emoji, accents, punctuation and control characters, then each step (cleaning,
// accents, CJK, punctuation, [UNK] rules), truncation, batches and the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tessera/tessera.hpp>
#include <tessera/text/wordpiece.hpp>
#include <vector>

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_wordpiece {

namespace ts = tessera;
namespace fs = std::filesystem;
using ts::text::WordPiece;

const fs::path data = fs::path(TESSERA_TEST_DATA_DIR) / "wordpiece";

const WordPiece& minilm() {
  static const WordPiece t = WordPiece::from_pretrained(data);
  return t;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::vector<int64_t> ids_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<int64_t> ids;
  int64_t id = 0;
  while (in >> id) ids.push_back(id);
  return ids;
}

TEST(WordPiece, SameIdsAsHuggingFaceOnTheCorpus) {
  const auto corpus = lines_of(data / "corpus.txt");
  const auto expected = lines_of(data / "expected_ids.txt");
  ASSERT_GE(corpus.size(), 2000u);
  ASSERT_EQ(corpus.size(), expected.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto got = minilm().encode(corpus[i]);
    if (got != ids_of(expected[i]) && ++mismatches <= 5)
      ADD_FAILURE() << "line " << i + 1 << ": '" << corpus[i] << "'";
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(WordPiece, StepsOnKnownText) {
  const WordPiece& t = minilm();
  EXPECT_EQ(t.vocab_size(), 30522);
  EXPECT_EQ(t.normalize("Héllo\tWORLD\x01 你好"), "hello world  你  好 ");
  EXPECT_EQ(t.tokenize("Unaffable, isn't it?"),
            (std::vector<std::string>{"una", "##ffa", "##ble", ",", "isn", "'", "t", "it",
                                      "?"}));  // as tokenizers
  EXPECT_EQ(t.encode("hello"), (std::vector<int64_t>{101, 7592, 102}));
  EXPECT_EQ(t.encode(""), (std::vector<int64_t>{101, 102}));
  // Over 100 characters: one [UNK]; exactly 100 is split into pieces.
  EXPECT_EQ(t.tokenize(std::string(101, 'a')), std::vector<std::string>{"[UNK]"});
  EXPECT_GT(t.tokenize(std::string(100, 'a')).size(), 1u);
  // Invalid UTF-8 becomes U+FFFD, which cleaning drops.
  EXPECT_EQ(t.tokenize("ab\xff\xfe"
                       "cd"),
            t.tokenize("abcd"));
  EXPECT_EQ(t.id_of("[PAD]"), 0);
  EXPECT_EQ(t.token_of(7592), "hello");
  EXPECT_EQ(t.id_of("no-such-token"), -1);
  EXPECT_THROW((void)t.token_of(30522), ts::index_error);
}

TEST(WordPiece, TruncationAndBatches) {
  const WordPiece& t = minilm();
  const auto full = t.encode("one two three four five");
  ASSERT_EQ(full.size(), 7u);
  EXPECT_EQ(t.encode("one two three four five", 4),
            (std::vector<int64_t>{101, full[1], full[2], 102}));
  EXPECT_EQ(t.encode("one two", 100).size(), 4u);
  EXPECT_THROW((void)t.encode("x", 1), ts::error);

  const std::vector<std::string> texts{"one two three", "", "four"};
  const auto b = t.encode_batch(texts);
  ASSERT_EQ(b.input_ids.shape(), (ts::Shape{3, 5}));
  EXPECT_EQ(b.input_ids.to_vector(), (std::vector<int64_t>{101, full[1], full[2], full[3], 102,  //
                                                           101, 102, 0, 0, 0,                    //
                                                           101, full[4], 102, 0, 0}));
  EXPECT_EQ(b.attention_mask.to_vector(),
            (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0}));
  EXPECT_EQ(b.token_type_ids.to_vector(), std::vector<int64_t>(15, 0));
  const auto fixed = t.encode_batch(texts, 4, /*pad_to_max_length=*/true);
  EXPECT_EQ(fixed.input_ids.shape(), (ts::Shape{3, 4}));
  EXPECT_EQ(fixed.input_ids.to_vector()[3], 102);  // truncated: [CLS] one two [SEP]
}

TEST(WordPiece, SettingsChangeTheNormalization) {
  ts::text::bert_normalizer n;
  n.lowercase = false;
  const auto cased = WordPiece::from_vocab_file(data / "vocab.txt", n);
  EXPECT_EQ(cased.normalize("Héllo"), "Héllo");
  n.lowercase = true;
  n.strip_accents = false;
  const auto accents = WordPiece::from_vocab_file(data / "vocab.txt", n);
  EXPECT_EQ(accents.normalize("Héllo"), "héllo");
  n = {};
  n.handle_chinese_chars = false;
  const auto no_cjk = WordPiece::from_vocab_file(data / "vocab.txt", n);
  EXPECT_EQ(no_cjk.normalize("你好"), "你好");
}

TEST(WordPiece, BadVocabulariesAreErrors) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera_test_wp_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "dup.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nhello\n";
  std::ofstream(dir / "nounk.txt") << "[PAD]\n[CLS]\n[SEP]\nhello\n";
  try {
    (void)WordPiece::from_vocab_file(dir / "dup.txt");
    ADD_FAILURE() << "no error";
  } catch (const ts::io_error& e) {
    EXPECT_NE(std::string(e.what()).find("token 'hello' appears twice (lines 5 and 6)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)WordPiece::from_vocab_file(dir / "nounk.txt"), ts::error);
  EXPECT_THROW((void)WordPiece::from_vocab_file(dir / "missing.txt"), ts::io_error);
  std::ofstream(dir / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
  std::ofstream(dir / "tokenizer.json")
      << R"({"normalizer":{"type":"NFKC"},"model":{"type":"BPE"}})";
  EXPECT_THROW((void)WordPiece::from_pretrained(dir), ts::error);
  std::ofstream(dir / "tokenizer.json") << "{not json";
  EXPECT_THROW((void)WordPiece::from_pretrained(dir), ts::io_error);
  fs::remove_all(dir);
}

}  // namespace test_wordpiece
