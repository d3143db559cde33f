// Bad tokenizer files and specs: each is a fak::Error that names the file and the problem. Also
// hand-built specs for the rules the real files do not exercise (lstrip/rstrip/single_word,
// ignore_merges).
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fak {
namespace {

// The message of the fak::Error `f` throws ("" and a test failure when it throws nothing).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a fak::Error";
  return "";
}

std::string pycoder_json() {
  return test::read_file(test::source_path("models/pycoder-6m/tokenizer.json"));
}

// A small valid tokenizer.json with `model` replaced.
std::string with_model(const std::string& model) {
  return R"({"normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
     "use_regex": true}, "added_tokens": [], "model": )" +
         model + "}";
}

TEST(TokenizerErrors, MissingDirectoryAndFile) {
  auto dir = test::temp_dir();
  std::string msg = error_of([&] { Tokenizer::from_dir(dir / "nope"); });
  EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = error_of([&] { Tokenizer::from_dir(dir); });
  EXPECT_NE(msg.find((dir / "tokenizer.json").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
}

TEST(TokenizerErrors, TruncatedAndInvalidJson) {
  auto dir = test::temp_dir();
  test::write_file(dir / "tokenizer.json", pycoder_json().substr(0, 5000));
  std::string msg = error_of([&] { Tokenizer::from_dir(dir); });
  EXPECT_NE(msg.find((dir / "tokenizer.json").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { Tokenizer::from_json("[1, 2]"); }).find("JSON object"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_json(""); }).find("not valid JSON"), std::string::npos);
  // Found by the fuzzer: nlohmann reports a number overflow as out_of_range, not parse_error.
  EXPECT_NE(error_of([] {
              Tokenizer::from_json("2222222222222222222222222008.1e90581");
            }).find("not valid JSON"),
            std::string::npos);
  // A broken tokenizer_config.json is named as such.
  test::write_file(dir / "tokenizer.json", pycoder_json());
  test::write_file(dir / "tokenizer_config.json", "{\"eos_token\": ");
  msg = error_of([&] { Tokenizer::from_dir(dir); });
  EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
}

TEST(TokenizerErrors, UnsupportedModelTypes) {
  for (std::string type : {"WordPiece", "Unigram", "WordLevel"}) {
    std::string msg = error_of([&] {
      Tokenizer::from_json(with_model(R"({"type": ")" + type + R"(", "vocab": {"a": 0}})"));
    });
    EXPECT_NE(msg.find("model type '" + type + "' is not supported"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  }
  std::string msg = error_of([] { Tokenizer::from_json(R"({"version": "1.0"})"); });
  EXPECT_NE(msg.find("no \"model\""), std::string::npos) << msg;
}

TEST(TokenizerErrors, MissingOrBrokenVocabAndMerges) {
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(with_model(R"({"type": "BPE", "merges": []})"));
            }).find("model.vocab is missing or empty"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(with_model(R"({"type": "BPE", "vocab": {"a": 0}})"));
            }).find("model.merges is missing"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(
                  with_model(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a q"]})"));
            }).find("not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(
      error_of([] {
        Tokenizer::from_json(with_model(R"({"type": "BPE", "vocab": {"a": -3}, "merges": []})"));
      }).find("out of range"),
      std::string::npos);
  EXPECT_NE(
      error_of([] {
        Tokenizer::from_json(with_model(R"({"type": "BPE", "vocab": {"a": "x"}, "merges": []})"));
      }).find("tokenizer.json"),
      std::string::npos);
}

TEST(TokenizerErrors, UnsupportedNormalizerAndPreTokenizer) {
  std::string json = pycoder_json();
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = json;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? s : s.replace(at, from.size(), to);
  };
  // What fak does not implement is refused naming the component (a SentencePiece precompiled
  // character map, a script splitter, an unknown split behavior, a WordPiece decoder).
  std::string msg = error_of(
      [&] { Tokenizer::from_json(replace(R"("type": "NFC")", R"("type": "Precompiled")")); });
  EXPECT_NE(msg.find("normalizer 'Precompiled' is not supported"), std::string::npos) << msg;
  msg = error_of([&] {
    Tokenizer::from_json(replace(R"("behavior": "Isolated")", R"("behavior": "Sideways")"));
  });
  EXPECT_NE(msg.find("unknown split behavior 'Sideways'"), std::string::npos) << msg;
  msg = error_of(
      [&] { Tokenizer::from_json(replace(R"("type": "Split")", R"("type": "UnicodeScripts")")); });
  EXPECT_NE(msg.find("pre_tokenizer 'UnicodeScripts' is not supported"), std::string::npos) << msg;
}

TEST(TokenizerErrors, DecodeOutOfRangeId) {
  const Tokenizer& tok = test::pycoder_tokenizer();
  std::vector<int32_t> ids = {5, tok.vocab_size()};
  EXPECT_NE(error_of([&] { tok.decode(ids); }).find("outside the vocabulary"), std::string::npos);
  EXPECT_THROW(tok.token_bytes(-1), Error);
  EXPECT_FALSE(tok.is_special(-1));
}

// A toy byte-level vocabulary: the letters a-e, space, "ab", "abc" (no merge builds "abc").
TokenizerSpec toy_spec() {
  TokenizerSpec spec;
  spec.tokens = {"a", "b", "c", "d", "e", "Ġ", "ab", "abc", "Ġa"};
  spec.merges = {{"a", "b"}, {"Ġ", "a"}};
  return spec;
}

TEST(TokenizerSpecRules, IgnoreMergesTakesWholeVocabWords) {
  TokenizerSpec spec = toy_spec();
  EXPECT_EQ(Tokenizer::from_spec(spec).encode("abc"), (std::vector<int32_t>{6, 2}));
  spec.ignore_merges = true;
  EXPECT_EQ(Tokenizer::from_spec(spec).encode("abc"), (std::vector<int32_t>{7}));
  EXPECT_EQ(Tokenizer::from_spec(spec).encode("abcd"), (std::vector<int32_t>{6, 2, 3}));
}

TEST(TokenizerSpecRules, BytesMissingFromTheVocabAreDropped) {
  // As HF without an unk token: 'z' has no token, so it vanishes (and a, b then merge).
  EXPECT_EQ(Tokenizer::from_spec(toy_spec()).encode("azb"), (std::vector<int32_t>{6}));
}

TEST(TokenizerSpecRules, AddedTokenStripAndSingleWord) {
  TokenizerSpec spec = toy_spec();
  spec.added.push_back({9, "<m>", true, /*lstrip=*/true, /*rstrip=*/false});
  spec.added.push_back({10, "<r>", true, /*lstrip=*/false, /*rstrip=*/true});
  spec.added.push_back({11, "dd", false, false, false, false, /*single_word=*/true});
  Tokenizer tok = Tokenizer::from_spec(spec);
  EXPECT_EQ(tok.vocab_size(), 12);
  // lstrip eats the spaces before <m>; without it " " would be a token of its own.
  EXPECT_EQ(tok.encode("a  <m>b"), (std::vector<int32_t>{0, 9, 1}));
  EXPECT_EQ(tok.encode("a<r>  b"), (std::vector<int32_t>{0, 10, 1}));
  EXPECT_EQ(tok.encode("a <r> a"), (std::vector<int32_t>{0, 5, 10, 0}));
  // single_word: only between non-word characters.
  EXPECT_EQ(tok.encode("dd"), (std::vector<int32_t>{11}));
  EXPECT_EQ(tok.encode("a dd"), (std::vector<int32_t>{0, 5, 11}));
  EXPECT_EQ(tok.encode("add"), (std::vector<int32_t>{0, 3, 3}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 9, 11}, /*skip_special=*/true), "add");
}

TEST(TokenizerSpecRules, SpecValidation) {
  TokenizerSpec spec = toy_spec();
  spec.merges.push_back({"c", "zz"});
  EXPECT_NE(error_of([&] { Tokenizer::from_spec(spec); }).find("merge 2"), std::string::npos);
  spec = toy_spec();
  spec.eos_id = 99;
  EXPECT_NE(error_of([&] { Tokenizer::from_spec(spec); }).find("out of range"), std::string::npos);
  spec = toy_spec();
  spec.added.push_back({3, "\xFF", true});
  EXPECT_NE(error_of([&] { Tokenizer::from_spec(spec); }).find("invalid UTF-8"), std::string::npos);
  spec = toy_spec();
  spec.pre_regex = "(";
  EXPECT_NE(error_of([&] { Tokenizer::from_spec(spec); }).find("does not compile"),
            std::string::npos);
  EXPECT_THROW(Tokenizer::from_spec(TokenizerSpec{}), Error);
}

}  // namespace
}  // namespace fak
