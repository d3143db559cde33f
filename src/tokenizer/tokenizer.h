// BPE tokenizers with HF `tokenizers` semantics: added/special tokens matched inside text, then
// tokenizer.json's normalizer, pre-tokenizer and BPE model (byte-level, as Qwen, Llama 3, gpt-oss
// and DeepSeek use it; or over characters with byte fallback, as Gemma's SentencePiece-style
// vocabulary), and its decoder. Built from tokenizer.json (+ tokenizer_config.json) or from parts
// (a GGUF's embedded vocab). Immutable after construction; safe to share across threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/steps.h"

namespace fak {

// What a vocabulary is made of, independent of the file it came from.
struct TokenizerSpec {
  std::vector<std::string> tokens;  // id -> token in byte-level unicode form (e.g. "Ġthe")
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  struct Added {
    int32_t id;
    std::string content;  // raw text, matched literally inside input
    bool special;
    bool lstrip = false, rstrip = false, normalized = false, single_word = false;
  };
  std::vector<Added> added;
  std::string pre_regex;  // the Split pattern; empty = Qwen2 pattern
  bool nfc = true;
  std::optional<int32_t> bos_id, eos_id, pad_id;
  bool add_bos = false;       // tokenizer_config add_bos_token / GGUF add_bos_token
  std::string chat_template;  // from tokenizer_config.json, may be empty
  // Added after the first release (keep new members at the end so aggregate users still compile):
  bool add_prefix_space = false;  // ByteLevel add_prefix_space: a space before text not starting
                                  // with one (GPT-2 style models that set it)
  bool ignore_merges = false;     // BPE ignore_merges: a pre-token that is a vocab entry is taken
                                  // whole before any merge (Llama-3 sets it)
  // SentencePiece-style BPE (Gemma): not byte-level. The normaliser replaces every space with
  // `space` ("▁"), the whole text is one piece, BPE starts from its characters, and a character
  // the vocabulary lacks becomes its UTF-8 bytes' <0xXX> tokens (byte_fallback) or unk. Decoding
  // turns `space` back into spaces and <0xXX> tokens into their bytes. Empty: byte-level BPE.
  std::string space;
  bool byte_fallback = false;
  std::optional<int32_t> unk_id;
  bool fuse_unk = true;  // consecutive unknown characters give one unk (HF's BPE fuse_unk)
  // Llama 2 / Mistral style on top: `prepend` ("▁") before every piece of text between added
  // tokens (HF's Prepend normaliser), and up to strip_leading spaces taken off the front of a
  // decoded text (its Strip decoder).
  std::string prepend;
  int strip_leading = 0;
  // tokenizer.json's own pipeline, in order (tokenizer/steps.h), which the tokenizer runs when
  // `pipeline` is set. Unset (a GGUF's vocabulary): the fields above say it, and the steps are
  // derived from them at load (NFC / the space Replace / Prepend; one Split then ByteLevel; the
  // matching decoder). The fields above are also filled from a tokenizer.json where its pipeline
  // has their shape, for the GGUF export.
  bool pipeline = false;
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;
};

// What the message content of a chat prompt may turn into. Text (the default): every string a
// client hands the chat template (message content, tool-call arguments, tool definitions, template
// kwargs) is tokenized as text, so only the template's own markup makes control tokens and a tool
// result holding "<|im_end|><|im_start|>system" cannot open a forged turn. Special: the old
// behaviour, where added tokens spelled in content become their ids (a server request opts in with
// special_tokens_in_content).
enum class ContentTokens { Text, Special };

// U+FDD0, a noncharacter (Unicode reserves it for a program's internal use): the mark
// mark_literal puts into message content.
inline constexpr std::string_view kLiteralMark = "\xEF\xB7\x90";
// Text with mark_literal's marks taken out (a doubled mark back to one).
std::string strip_literal_marks(std::string_view text);

class Tokenizer {
 public:
  // dir holds tokenizer.json and optionally tokenizer_config.json. Throws fak::Error naming the
  // file.
  static Tokenizer from_dir(const std::filesystem::path& dir);
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {});
  static Tokenizer from_spec(TokenizerSpec spec);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // parse_special: added tokens in the text become their ids (HF default); false: special ones
  // stay text (HF's split_special_tokens). Text must be valid UTF-8 (throws fak::Error otherwise).
  // No BOS is added here; callers decide.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Text that can never become a control token: no added token is matched in it, special or not
  // (a tool result holding "<|im_end|>" is those ten characters, never id 151645).
  std::vector<int32_t> encode_literal(std::string_view text) const;
  // Message content inside a rendered chat prompt. mark_literal breaks every added token in a
  // piece of text with kLiteralMark (and doubles marks the text already held); text built from
  // marked pieces and the template's own markup goes to encode_marked, where the markup's added
  // tokens become their ids and the marked pieces are text: exactly encode_literal of each piece.
  // note: string operations a template runs on content (split, startswith) see the marks, so a
  // template looking for an added token's text inside content no longer finds it.
  std::string mark_literal(std::string_view text) const;
  std::vector<int32_t> encode_marked(std::string_view text) const;
  // Raw bytes of the ids concatenated; invalid UTF-8 is kept as bytes (callers may replace).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The raw bytes one token stands for.
  std::string token_bytes(int32_t id) const;

  int32_t vocab_size() const;  // number of ids the tokenizer knows (max id + 1)
  std::optional<int32_t> token_id(std::string_view token_text) const;  // exact token lookup
  bool is_special(int32_t id) const;
  const TokenizerSpec& spec() const;  // for GGUF export

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streaming decode: push ids one at a time, get back only complete UTF-8 characters; bytes of a
// character split across tokens are held until it is whole. flush() returns whatever is left
// (invalid sequences as U+FFFD). The text is HF's DecodeStream's: each step decodes a short window
// of the last ids and gives out what it adds past the window's earlier text, so a decoder's rules
// for the front of a text (Metaspace, Strip) apply at the stream's start only.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // the window
  std::string prefix_;        // the text of ids_[0, prefix_index_), already given out
  size_t prefix_index_ = 0;
};

}  // namespace fak
