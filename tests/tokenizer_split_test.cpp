// Pre-tokenizer and BPE internals: the hand-written splitters against PCRE2 running the same
// pattern (an independent implementation), explicit splits, the regex fallback, and the two BPE
// merge loops against each other.
#include <gtest/gtest.h>

#include <unordered_map>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fixtures.h"

namespace fak {
namespace {

using Pieces = std::vector<std::string_view>;

Pieces split(const PreTokenizer& pre, std::string_view text) {
  Pieces pieces;
  pre.split(text, pieces);
  return pieces;
}

std::string show(const Pieces& pieces) {
  std::string s;
  for (auto p : pieces) s += "[" + std::string(p) + "]";
  return s;
}

// Strings aimed at the corners of the patterns: every kind of whitespace run, case-insensitive
// contractions (including U+017F, which folds to 's'), digits of other scripts, marks, lone
// punctuation before line breaks.
const std::vector<std::string> kHardStrings = {
    "a\u0085b \u0085\u0085x",
    "\u00a0\u00a0x \u00a0",
    "x\u3000\u3000y\u3000",
    "\u2028\n\u2029 \u2028",
    "\r\n\r\n  \t",
    "  \n  ",
    "trailing   ",
    "   ",
    " ",
    "\n",
    "a\u180eb \u180e\u180ec",
    "'S 'ſ 'LL 'Ll 're 'RE 've 'Ve 'ſx don't DON'T 'D 'M 'T",
    "''s '' ' x' 'x '\n's",
    "①②③ ١٢٣ 12345 Ⅻ 1234567 a1b22c333d4444",
    "e\u0301\u0301x \u0301abc",
    "😀😀 👨\u200d👩 🇺🇸",
    "你好世界 日本語 한국어",
    "...\r\n\n ...\n?\r(\n \t\tfoo\t(bar",
    "\u200bzero\u200b width",
    std::string("nul\0byte", 8),
    "x  \n\n  y\t\n\tz \r \n",
    " !!! ?? \n\n\n",
    "don’t it’s",
    "-->  <!-- ## $ 100%",
};

std::vector<std::string> check_texts() {
  std::vector<std::string> texts = kHardStrings;
  for (const auto& c : test::qwen_cases()) texts.push_back(nfc(c["text"].get<std::string>()));
  for (const auto& c : test::llamacpp_cases()) texts.push_back(nfc(c.text));
  texts.push_back(test::qwen_corpus()["text"].get<std::string>());
  return texts;
}

class TokenizerSplitMatchesPcre2 : public ::testing::TestWithParam<std::string_view> {};

TEST_P(TokenizerSplitMatchesPcre2, OnCorpusAndHardCases) {
  PreTokenizer hand(GetParam());
  PreTokenizer regex = PreTokenizer::regex_only(GetParam());
  ASSERT_NE(hand.kind(), PreTokenizer::Kind::kRegex);  // otherwise this compares PCRE2 to itself
  ASSERT_EQ(regex.kind(), PreTokenizer::Kind::kRegex);
  size_t total = 0;
  for (const std::string& text : check_texts()) {
    Pieces a = split(hand, text), b = split(regex, text);
    total += a.size();
    if (a == b) continue;
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    ADD_FAILURE() << "first difference at piece " << i << ": hand "
                  << (i < a.size() ? "[" + std::string(a[i]) + "]" : "(end)") << " pcre2 "
                  << (i < b.size() ? "[" + std::string(b[i]) + "]" : "(end)") << " in text of "
                  << text.size() << " bytes starting \"" << text.substr(0, 60) << "\"";
  }
  EXPECT_GT(total, 50000u);
}

INSTANTIATE_TEST_SUITE_P(TokenizerKnownPatterns, TokenizerSplitMatchesPcre2,
                         ::testing::Values(kQwen2Pattern, kLlama3Pattern, kGpt2Pattern));

TEST(TokenizerSplit, ExplicitPieces) {
  const std::string text = "I'M here  now\n\n x 1234\t(y)\n";
  EXPECT_EQ(show(split(PreTokenizer(kQwen2Pattern), text)),
            "[I]['M][ here][ ][ now][\n\n][ x][ ][1][2][3][4][\t][(y][)\n]");
  EXPECT_EQ(show(split(PreTokenizer(kLlama3Pattern), text)),
            "[I]['M][ here][ ][ now][\n\n][ x][ ][123][4][\t][(y][)\n]");
  EXPECT_EQ(show(split(PreTokenizer(kGpt2Pattern), text)),
            "[I]['][M][ here][ ][ now][\n\n][ x][ 1234][\t][(][y][)][\n]");
  EXPECT_EQ(show(split(PreTokenizer(""), "a  ")), "[a][  ]");  // empty pattern = Qwen2
  EXPECT_TRUE(split(PreTokenizer(kQwen2Pattern), "").empty());
}

TEST(TokenizerSplit, RegexFallback) {
  PreTokenizer digits_or_words("\\d+|[a-z]+");
  EXPECT_EQ(digits_or_words.kind(), PreTokenizer::Kind::kRegex);
  // Text between matches becomes its own piece (HF's Isolated behaviour).
  EXPECT_EQ(show(split(digits_or_words, "abc123 ÿx!")), "[abc][123][ ÿ][x][!]");
  // Empty matches split the stretch around them, one character at a time.
  EXPECT_EQ(show(split(PreTokenizer("x*"), "aé")), "[a][é]");
  EXPECT_THROW(PreTokenizer("(unclosed"), Error);
}

TEST(TokenizerSplit, OnigToPcre2Translation) {
  EXPECT_EQ(onig_to_pcre2("a\\sb"),
            "a[\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
            "\\x{202F}\\x{205F}\\x{3000}]b");
  std::string in_class = onig_to_pcre2("[^\\s\\p{L}]");
  EXPECT_EQ(in_class.substr(0, 5), "[^\\t-");
  EXPECT_EQ(in_class.back(), ']');
  EXPECT_EQ(onig_to_pcre2("\\Q\\s\\E\\d"), "\\Q\\s\\E\\d");  // quoted text stays literal
  EXPECT_EQ(onig_to_pcre2("[]\\s]").substr(0, 3), "[]\\");   // ']' first in a class is literal
  EXPECT_EQ(regex_escape("a.b*"), "a\\.b\\*");
}

TEST(TokenizerSplit, GgufPreNames) {
  EXPECT_EQ(pre_tokenizer_for_gguf_pre("qwen2").splits,
            std::vector<std::string>{std::string(kQwen2Pattern)});
  EXPECT_EQ(pre_tokenizer_for_gguf_pre("llama-bpe").splits,
            std::vector<std::string>{std::string(kLlama3Pattern)});
  EXPECT_EQ(pre_tokenizer_for_gguf_pre("gpt-2").splits,
            std::vector<std::string>{std::string(kGpt2Pattern)});
  EXPECT_EQ(pre_tokenizer_for_gguf_pre("qwen35").splits,
            std::vector<std::string>{std::string(kQwen35Pattern)});
  EXPECT_TRUE(pre_tokenizer_for_gguf_pre("unknown").splits.empty());
}

// Qwen3.5's split keeps a combining mark (U+0301) with its letter, where Qwen2's cuts the word at
// it (\p{M} is neither \p{L} nor \p{N}, so it starts a punctuation run); otherwise they agree.
TEST(TokenizerSplit, Qwen35KeepsCombiningMarksInWords) {
  const std::string text = "cafe\u0301 ok 12";
  PreTokenizer qwen35(kQwen35Pattern);
  EXPECT_EQ(qwen35.kind(), PreTokenizer::Kind::kRegex);
  EXPECT_EQ(show(split(qwen35, text)), "[cafe\u0301][ ok][ ][1][2]");
  EXPECT_EQ(show(split(PreTokenizer(kQwen2Pattern), text)), "[cafe][\u0301][ ok][ ][1][2]");
  const std::string plain = "I'M here  now\n\n x 1234\t(y)\n";
  EXPECT_EQ(show(split(qwen35, plain)), show(split(PreTokenizer(kQwen2Pattern), plain)));
}

// A Bpe built from the Qwen spec the way the tokenizer builds it.
Bpe qwen_bpe() {
  const TokenizerSpec& spec = test::qwen_tokenizer().spec();
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < spec.tokens.size(); ++i) ids.emplace(spec.tokens[i], int32_t(i));
  std::array<int32_t, 256> byte_ids;
  for (int b = 0; b < 256; ++b) byte_ids[b] = ids.at(bytes_to_byte_level(std::string(1, char(b))));
  std::vector<Bpe::Merge> merges;
  for (const auto& [l, r] : spec.merges) merges.push_back({ids.at(l), ids.at(r), ids.at(l + r)});
  return Bpe(byte_ids, merges);
}

TEST(TokenizerBpe, ScanAndHeapAgreeOnCorpusPieces) {
  Bpe bpe = qwen_bpe();
  const std::string& corpus = test::qwen_corpus()["text"].get_ref<const std::string&>();
  Pieces pieces = split(PreTokenizer(kQwen2Pattern), corpus);
  std::string pad = std::string(40, 'a') + "bc";
  pieces.push_back(pad);
  size_t compared = 0, merged = 0;
  for (auto piece : pieces) {
    if (piece.size() > 64) continue;
    std::vector<int32_t> scan, heap;
    bpe.encode(piece, scan, Bpe::Mode::kScan);
    bpe.encode(piece, heap, Bpe::Mode::kHeap);
    ASSERT_EQ(scan, heap) << "piece [" << piece << "]";
    ++compared;
    merged += scan.size() < piece.size();
  }
  EXPECT_GT(compared, 50000u);
  EXPECT_GT(merged, compared / 2);
}

TEST(TokenizerBpe, LongPieceUsesHeapAndMatchesScanOnPrefixes) {
  Bpe bpe = qwen_bpe();
  std::string run(5000, 'x');
  std::vector<int32_t> ids;
  bpe.encode(run, ids);  // takes the heap path
  std::string joined;
  for (int32_t id : ids) joined += test::qwen_tokenizer().token_bytes(id);
  EXPECT_EQ(joined, run);
  EXPECT_LT(ids.size(), run.size() / 4);
}

}  // namespace
}  // namespace fak
