// A tokenizer.json comes with a model download (issue 51): a split pattern that backtracks at
// every position must stop at the encode's time budget, and thousands of added tokens must cost
// a trie walk per position, not a comparison per token.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fak {
namespace {

using ::testing::HasSubstr;

nlohmann::json hostile_tokenizer() {
  return nlohmann::json::parse(
      test::read_file(test::data_path("hostile/backtracking-tokenizer.json")));
}

TEST(TokenizerBudget, ABacktrackingSplitPatternStopsAtTheEncodesBudget) {
  const Tokenizer tok = Tokenizer::from_json(hostile_tokenizer().dump());
  // Short texts are fine: the pattern is correct, only slow on long runs of x.
  EXPECT_EQ(tok.encode("xxy a").size(), 5u);  // no merges: a byte token each
  std::string text;
  for (int i = 0; i < 3000; ++i) text += std::string(18, 'x') + " ";
  std::string error;
  try {
    tok.encode(text);
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("ran past its time budget on 57000 bytes"));
  EXPECT_THAT(error, HasSubstr("(x+x+)+y"));
}

TEST(TokenizerBudget, ThousandsOfAddedTokensMatchLeftmostLongest) {
  nlohmann::json j = hostile_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[\\s\\S]";
  j["added_tokens"] = nlohmann::json::array();
  const int kTokens = 20000;
  for (int i = 0; i < kTokens; ++i)
    j["added_tokens"].push_back({{"id", 256 + i},
                                 {"content", "<unused" + std::to_string(i) + ">"},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", i % 2 == 0}});
  // A duplicate content keeps its first id, as HF's AddedVocabulary does.
  j["added_tokens"].push_back(
      {{"id", 256 + kTokens}, {"content", "<unused7>"}, {"normalized", false}, {"special", false}});
  const Tokenizer tok = Tokenizer::from_json(j.dump());
  // Longest wins at a position ("<unused12>" over "<unused1"... which is no token anyway), and
  // almost-tokens are text.
  EXPECT_EQ(tok.encode("<unused12><unused1><unused19999><unused7>"),
            (std::vector<int32_t>{256 + 12, 256 + 1, 256 + 19999, 256 + 7}));
  const auto near_miss = tok.encode("<unused20000>");
  EXPECT_EQ(near_miss.size(), 13u);  // all text, a byte token each
  // Special ones stay text when asked.
  const auto plain = tok.encode("<unused12><unused1>", /*parse_special=*/false);
  EXPECT_EQ(plain.front(), tok.encode("<").front());
  EXPECT_EQ(plain.back(), 256 + 1);
  // A long prompt full of near misses: every '<' walks the trie a few bytes.
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "<unused" + std::to_string(i) + "x";
  EXPECT_EQ(tok.encode(text).size(), text.size());
}

TEST(TokenizerBudget, AnAddedTokenLongerThanTheLimitIsRefused) {
  nlohmann::json j = hostile_tokenizer();
  j["added_tokens"].push_back(
      {{"id", 257}, {"content", std::string(5000, 'a')}, {"normalized", false}, {"special", true}});
  std::string error;
  try {
    Tokenizer::from_json(j.dump());
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("added token 257 is 5000 bytes long"));
}

}  // namespace
}  // namespace fak
