// Tokenizer against golden ids: the real Qwen tokenizer (hard cases, a 400k-character corpus,
// llama.cpp's cases) and the bundled pycoder model's prompts; decode and streaming decode.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fixtures.h"

namespace fak {
namespace {

using test::qwen_tokenizer;

std::vector<int32_t> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

// Index of the first difference, or -1.
long first_mismatch(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return a.size() == b.size() ? -1 : static_cast<long>(std::min(a.size(), b.size()));
}

TEST(TokenizerGolden, QwenHardCases) {
  const auto& cases = test::qwen_cases();
  ASSERT_EQ(cases.size(), 50u);
  for (const auto& c : cases) {
    std::string text = c["text"];
    std::vector<int32_t> want = ids_of(c["ids"]);
    std::vector<int32_t> got = qwen_tokenizer().encode(text);
    EXPECT_EQ(got, want) << "text: " << text << "\nfirst mismatch at " << first_mismatch(got, want);
    // Decoding gives the normalised text back (two cases are deliberately not NFC).
    EXPECT_EQ(qwen_tokenizer().decode(want), nfc(text)) << text;
  }
}

TEST(TokenizerGolden, QwenCorpus) {
  const auto& corpus = test::qwen_corpus();
  std::string text = corpus["text"];
  std::vector<int32_t> want = ids_of(corpus["ids"]);
  ASSERT_EQ(want.size(), 98086u);
  std::vector<int32_t> got = qwen_tokenizer().encode(text);
  long bad = first_mismatch(got, want);
  ASSERT_EQ(bad, -1) << "got " << got.size() << " ids, want " << want.size()
                     << "; first mismatch at index " << bad << ": got "
                     << (size_t(bad) < got.size() ? got[bad] : -1) << " want "
                     << (size_t(bad) < want.size() ? want[bad] : -1) << " near \""
                     << qwen_tokenizer().decode(std::span(want).subspan(
                            std::max(0L, bad - 5), std::min<size_t>(10, want.size() - bad)))
                     << "\"";
  EXPECT_EQ(qwen_tokenizer().decode(got), text);
}

TEST(TokenizerGolden, LlamaCppQwen2Cases) {
  auto cases = test::llamacpp_cases();
  ASSERT_EQ(cases.size(), 46u);
  size_t nonempty = 0;
  for (const auto& c : cases) {
    // llama.cpp's reference ids come from HF with add_special_tokens=False.
    EXPECT_EQ(qwen_tokenizer().encode(c.text), c.ids) << "text: \"" << c.text << "\"";
    EXPECT_EQ(qwen_tokenizer().decode(c.ids), nfc(c.text));
    nonempty += !c.ids.empty();
  }
  EXPECT_GE(nonempty, 44u);  // guards against a parse that silently finds no ids
}

TEST(TokenizerGolden, PycoderPrompts) {
  auto reference =
      nlohmann::json::parse(test::read_file(test::source_path("models/pycoder-6m/reference.json")));
  const Tokenizer& tok = test::pycoder_tokenizer();
  ASSERT_FALSE(reference["cases"].empty());
  for (const auto& c : reference["cases"]) {
    std::string prompt = c["prompt"];
    EXPECT_EQ(tok.encode(prompt), ids_of(c["input_ids"])) << prompt;
    EXPECT_EQ(tok.decode(tok.encode(prompt)), prompt);
    std::string greedy = c["greedy_text"];
    EXPECT_EQ(tok.decode(ids_of(c["greedy_ids"])), greedy);
  }
}

TEST(TokenizerGolden, QwenSpecialTokensAndConfig) {
  const Tokenizer& tok = qwen_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_id("Ġthe"), 279);
  EXPECT_EQ(tok.token_id("no such token"), std::nullopt);
  EXPECT_TRUE(tok.is_special(151644));
  EXPECT_FALSE(tok.is_special(151667));  // <think> is added but not special
  EXPECT_FALSE(tok.is_special(279));
  EXPECT_EQ(tok.spec().eos_id, 151645);
  EXPECT_EQ(tok.spec().pad_id, 151643);
  EXPECT_EQ(tok.spec().bos_id, std::nullopt);
  EXPECT_FALSE(tok.spec().add_bos);
  EXPECT_TRUE(tok.spec().nfc);
  EXPECT_NE(tok.spec().chat_template.find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(tok.token_bytes(220), " ");
  EXPECT_EQ(tok.token_bytes(151645), "<|im_end|>");
}

TEST(TokenizerSpecial, InsideText) {
  const Tokenizer& tok = qwen_tokenizer();
  std::vector<int32_t> want = {151644};
  for (int32_t id : tok.encode("user\nhi", false)) want.push_back(id);
  want.push_back(151645);
  EXPECT_EQ(tok.encode("<|im_start|>user\nhi<|im_end|>"), want);
  EXPECT_EQ(tok.decode(want), "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(tok.decode(want, /*skip_special=*/true), "user\nhi");
  // Adjacent tokens and a token glued to text on both sides.
  EXPECT_EQ(tok.encode("<|im_end|><|im_start|>"), (std::vector<int32_t>{151645, 151644}));
  auto glued = tok.encode("a<|endoftext|>b");
  ASSERT_EQ(glued.size(), 3u);
  EXPECT_EQ(glued[1], 151643);
}

TEST(TokenizerSpecial, ParseSpecialFalseTreatsThemAsText) {
  const Tokenizer& tok = qwen_tokenizer();
  std::string text = "<|im_start|>user\nhi<|im_end|>";
  std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/false);
  for (int32_t id : ids) EXPECT_FALSE(tok.is_special(id)) << id;
  EXPECT_GT(ids.size(), 6u);
  EXPECT_EQ(tok.decode(ids), text);
  // As in HF with split_special_tokens, added tokens that are not special are still matched.
  std::vector<int32_t> think = tok.encode("<think>x", false);
  ASSERT_FALSE(think.empty());
  EXPECT_EQ(think[0], 151667);
}

TEST(TokenizerErrors, InvalidUtf8InputThrowsWithOffset) {
  const Tokenizer& tok = qwen_tokenizer();
  for (std::string bad : {std::string("abc\xff"), std::string("abc\xc3"),
                          std::string("abc\xed\xa0\x80"),         // surrogate
                          std::string("abc\xc0\xaf"),             // overlong '/'
                          std::string("abc\xf4\x90\x80\x80")}) {  // past U+10FFFF
    try {
      tok.encode(bad);
      ADD_FAILURE() << "no error for " << bad.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("byte offset 3"), std::string::npos) << e.what();
    }
  }
}

TEST(TokenizerStream, CorpusOneIdAtATime) {
  const Tokenizer& tok = qwen_tokenizer();
  const auto& corpus = test::qwen_corpus();
  std::string text = corpus["text"];
  std::vector<int32_t> ids = ids_of(corpus["ids"]);
  StreamDecoder stream(tok);
  std::string joined;
  size_t held = 0;  // tokens after which nothing could be emitted yet
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string chunk = stream.push(ids[i]);
    ASSERT_EQ(find_invalid_utf8(chunk), std::string_view::npos) << "chunk " << i;
    held += chunk.empty() && !tok.token_bytes(ids[i]).empty();
    joined += chunk;
  }
  joined += stream.flush();
  EXPECT_EQ(joined, text);
  EXPECT_GT(held, 0u);  // the corpus does split characters across tokens
}

TEST(TokenizerStream, EmojiSplitAcrossByteTokens) {
  const Tokenizer& tok = qwen_tokenizer();
  // The first emoji (4 UTF-8 bytes) that byte-level BPE does not keep as one token.
  std::string emoji;
  std::vector<int32_t> ids;
  for (char32_t cp = 0x1F600; cp < 0x1F650 && ids.size() < 2; ++cp) {
    emoji.clear();
    append_utf8(emoji, cp);
    ids = tok.encode(emoji);
  }
  ASSERT_GE(ids.size(), 2u) << "no emoji in U+1F600..U+1F64F splits across tokens";
  ASSERT_EQ(emoji.size(), 4u);
  StreamDecoder stream(tok);
  std::string out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(stream.push(ids[i]), "") << i;
  out = stream.push(ids.back());
  EXPECT_EQ(out, emoji);
  EXPECT_EQ(stream.flush(), "");
}

TEST(TokenizerStream, ImpossibleSequenceBecomesReplacementChar) {
  const Tokenizer& tok = qwen_tokenizer();
  auto byte_token = [&](unsigned char b) {
    for (int32_t id = 0; id < 256 * 4; ++id)
      if (tok.token_bytes(id) == std::string(1, static_cast<char>(b))) return id;
    ADD_FAILURE() << "no single-byte token for " << int(b);
    return 0;
  };
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(byte_token(0xF0)), "");  // a lead byte: wait for more
  EXPECT_EQ(stream.push(byte_token('a')),
            "\xEF\xBF\xBD"
            "a");  // it can never complete
  EXPECT_EQ(stream.push(byte_token(0xE4)), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // end of stream: the partial character is lost
  // A lone continuation byte: as HF's DecodeStream, a text ending in U+FFFD waits for the next
  // token (it cannot tell an impossible sequence from an incomplete one), then comes out with it.
  EXPECT_EQ(stream.push(byte_token(0x80)), "");
  EXPECT_EQ(stream.push(byte_token('b')),
            "\xEF\xBF\xBD"
            "b");
}

TEST(TokenizerLoad, DirectoryWithOnlyTokenizerJson) {
  auto dir = test::temp_dir();
  std::filesystem::copy_file(test::source_path("models/pycoder-6m/tokenizer.json"),
                             dir / "tokenizer.json");
  Tokenizer tok = Tokenizer::from_dir(dir);
  EXPECT_EQ(tok.encode("def fibonacci(n):\n"),
            test::pycoder_tokenizer().encode("def fibonacci(n):\n"));
  EXPECT_EQ(tok.spec().eos_id, std::nullopt);  // only tokenizer_config.json names it
  EXPECT_TRUE(tok.spec().chat_template.empty());
  EXPECT_EQ(test::pycoder_tokenizer().spec().eos_id, 0);
}

TEST(TokenizerLoad, FromSpecRoundTripsTheSpec) {
  // What a GGUF loader does: tokens + merges + added list, no JSON.
  const Tokenizer& original = qwen_tokenizer();
  Tokenizer copy = Tokenizer::from_spec(original.spec());
  std::string text = test::qwen_corpus()["text"];
  text.resize(50000);
  while (find_invalid_utf8(text) != std::string_view::npos) text.pop_back();
  EXPECT_EQ(copy.encode(text), original.encode(text));
  EXPECT_EQ(copy.encode("<|im_start|>x"), original.encode("<|im_start|>x"));
  EXPECT_TRUE(copy.is_special(151643));
}

}  // namespace
}  // namespace fak
