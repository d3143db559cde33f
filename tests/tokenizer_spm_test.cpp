// SentencePiece-style BPE (Gemma's kind of tokenizer.json: spaces replaced by "▁", no
// pre-tokenizer, byte fallback; and Llama 2's, with Prepend and Strip) against Hugging Face's own
// tokenizers library: the ids and decoded texts in tests/data/tokenizer/spm-bpe*/cases.json come
// from it (npm `tokenizers`, its Rust core;
// tests/data/tokenizer/gen_spm_bpe.py made the tokenizer and the cases).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "models/gguf_tokenizer.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fak {
namespace {

const Tokenizer& spm() {
  static const Tokenizer t = Tokenizer::from_dir(test::data_path("tokenizer/spm-bpe"));
  return t;
}

// Every case: the ids, the decoded text, and the same text streamed token by token.
void check_cases(const Tokenizer& t, const std::string& dir) {
  const auto cases = nlohmann::json::parse(test::read_file(test::data_path(dir + "/cases.json")));
  ASSERT_GE(cases["cases"].size(), 10u);
  for (const auto& c : cases["cases"]) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(t.encode(text), want) << dir << ": " << text.substr(0, 80);
    EXPECT_EQ(t.decode(want), c["decoded"].get<std::string>()) << dir << ": " << text.substr(0, 80);
    StreamDecoder stream(t);
    std::string streamed;
    for (int32_t id : want) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, c["decoded"].get<std::string>()) << dir << ": " << text.substr(0, 80);
  }
}

TEST(TokenizerSpm, EveryCaseEncodesAndDecodesAsHuggingFace) {
  check_cases(spm(), "tokenizer/spm-bpe");
}

// Llama 2 / Mistral: "▁" prepended to every piece of text between added tokens (so a turn marker
// is followed by one), one leading space stripped from decoded text (and from a stream's front).
TEST(TokenizerSpm, TheLlama2VariantEncodesAndDecodesAsHuggingFace) {
  check_cases(Tokenizer::from_dir(test::data_path("tokenizer/spm-bpe-llama")),
              "tokenizer/spm-bpe-llama");
}

// The same tokenizers as llama.cpp keeps them in a GGUF ('llama': pieces, a score each, types; no
// merge list, so the merges are rebuilt from the scores): written as fak convert writes them, read
// back, and every case still encodes and decodes as Hugging Face's library does.
TEST(TokenizerSpm, ThroughALlamaCppGgufVocabularyEveryCaseIsStillHuggingFaces) {
  for (const std::string dir : {"tokenizer/spm-bpe", "tokenizer/spm-bpe-llama"}) {
    const Tokenizer t = Tokenizer::from_dir(test::data_path(dir));
    GgufWriter w;
    write_gguf_tokenizer(w, t.spec(), int(t.spec().tokens.size()));
    const auto path = test::temp_dir() / "spm-vocab.gguf";
    w.write(path);
    const GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f.find("tokenizer.ggml.merges"), nullptr);
    EXPECT_EQ(f.get_bool("tokenizer.ggml.add_space_prefix"), dir == "tokenizer/spm-bpe-llama");
    check_cases(Tokenizer::from_spec(tokenizer_spec_from_gguf(f)), dir);
  }
}

// A 'llama' vocabulary without its scores, or with too few, is refused naming the key.
TEST(TokenizerSpm, AGgufVocabularyWithoutItsScoresIsRefusedNamingThem) {
  const Tokenizer t = Tokenizer::from_dir(test::data_path("tokenizer/spm-bpe"));
  for (const bool drop : {true, false}) {
    GgufWriter w;
    write_gguf_tokenizer(w, t.spec(), int(t.spec().tokens.size()));
    if (drop) {
      w.set("tokenizer.ggml.scores", GgufValue::make_string("none"));
    } else {
      const float few[2] = {0, 0};
      w.set("tokenizer.ggml.scores",
            GgufValue::make_array(GgufArray::numbers(GgufType::F32, few, 2)));
    }
    const auto path = test::temp_dir() / "bad-vocab.gguf";
    w.write(path);
    try {
      tokenizer_spec_from_gguf(GgufFile::open(path));
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.scores"), std::string::npos) << e.what();
    }
  }
}

TEST(TokenizerSpm, UnknownCharactersFallBackToTheirBytes) {
  // "你" is not in this vocabulary: its three UTF-8 bytes' <0xXX> tokens.
  const std::vector<int32_t> ids = spm().encode("\xE4\xBD\xA0");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(spm().token_bytes(ids[0]), "\xE4");
  EXPECT_EQ(spm().decode(ids), "\xE4\xBD\xA0");
  // Spaces travel as "▁" inside tokens and come back as spaces.
  EXPECT_EQ(spm().decode(spm().encode(" a b  c ")), " a b  c ");
}

TEST(TokenizerSpm, SpecialTokensAreMatchedAndNeverSplit) {
  const std::vector<int32_t> ids = spm().encode("<start_of_turn>user\n");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], *spm().token_id("<start_of_turn>"));
  EXPECT_TRUE(spm().is_special(ids[0]));
  const std::vector<int32_t> literal = spm().encode_literal("<start_of_turn>");
  EXPECT_GT(literal.size(), 1u);
  EXPECT_EQ(spm().decode(literal), "<start_of_turn>");
}

TEST(TokenizerSpm, WhatItDoesNotImplementIsRefusedNamingIt) {
  const std::string base = test::read_file(test::data_path("tokenizer/spm-bpe/tokenizer.json"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(base);
    edit(j);
    try {
      Tokenizer::from_json(j.dump());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  // What is not implemented is named: a CTC or WordPiece decoder, a model other than BPE.
  EXPECT_NE(refused([](nlohmann::json& j) {
              j["decoder"]["decoders"].push_back({{"type", "CTC"}});
            }).find("decoder 'CTC' is not supported"),
            std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) {
              j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
            }).find("decoder 'WordPiece' is not supported"),
            std::string::npos);
  EXPECT_NE(refused([](nlohmann::json& j) {
              j["model"]["type"] = "Unigram";
            }).find("model type 'Unigram' is not supported"),
            std::string::npos);
}

}  // namespace
}  // namespace fak
