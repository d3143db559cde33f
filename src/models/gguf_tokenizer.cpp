#include "models/gguf_tokenizer.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace fak {

namespace {

constexpr const char* kSpmSpace = "\u2581";  // "▁", SentencePiece's space

std::optional<int32_t> optional_id(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  const int64_t id = f.get_i64(key);
  // note: some converters write -1 (as u32 0xFFFFFFFF) for "none".
  if (id < 0 || id >= int64_t(INT32_MAX)) return std::nullopt;
  return int32_t(id);
}

// Byte-level BPE ('gpt2'): the merges as listed, and the split pattern llama.cpp names.
void read_byte_level(const GgufFile& f, TokenizerSpec& spec) {
  if (f.find("tokenizer.ggml.merges")) {
    const GgufArray& merges = f.get_array("tokenizer.ggml.merges");
    spec.merges.reserve(merges.strings.size());
    for (const std::string& m : merges.strings) {
      const size_t space = m.find(' ');
      if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos)
        fail(f.name() + ": tokenizer.ggml.merges entry \"" + m + "\" is not \"left right\"");
      spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
  }

  const GgufValue* pre_v = f.find("tokenizer.ggml.pre");
  const std::string pre = pre_v ? f.get_string("tokenizer.ggml.pre") : "gpt-2";
  const GgufPreTokenizer p = pre_tokenizer_for_gguf_pre(pre);
  if (p.splits.empty())
    fail(f.name() + ": tokenizer.ggml.pre '" + pre +
         "' is not supported (supported: qwen2, qwen35, llama-bpe, glm4, gpt-4o, deepseek-v3, "
         "gpt-2 and their aliases)");
  // GGUF has no normalizer field: the family's tokenizer.json says (pretokenizer.cpp).
  spec.pipeline = true;
  spec.nfc = p.nfc;
  if (p.nfc) spec.normalizers.emplace_back(NormalizerStep::Kind::NFC);
  for (const std::string& split : p.splits) {
    PreTokenizerStep step(PreTokenizerStep::Kind::Split);
    step.pattern = split;
    spec.pre_tokenizers.push_back(step);
  }
  PreTokenizerStep byte_level(PreTokenizerStep::Kind::ByteLevel);
  byte_level.use_regex = false;
  spec.pre_tokenizers.push_back(byte_level);
  spec.decoders.emplace_back(DecoderStep::Kind::ByteLevel);
  spec.pre_regex = p.splits.front();
  spec.ignore_merges = p.ignore_merges;
}

// SentencePiece BPE as llama.cpp's 'llama' vocabulary holds it (Gemma, Llama 2, Mistral): pieces
// spelling spaces "▁", a score per piece and no merge list. llama.cpp merges, among adjacent
// pieces, the pair whose joined piece is in the vocabulary with the highest score. That is BPE
// whose merges are every split (left, right) of a piece into two pieces, ranked by the joined
// piece's score, then by the ids of left and right: the list transformers' SentencePiece converter
// builds from the same scores, and what the tokenizer here runs.
void read_spm(const GgufFile& f, const std::vector<int32_t>& types, TokenizerSpec& spec) {
  const GgufArray& scores = f.get_array("tokenizer.ggml.scores");
  if (scores.size() != spec.tokens.size())
    fail(f.name() + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) +
         " entries for " + std::to_string(spec.tokens.size()) + " tokens");
  spec.space = kSpmSpace;
  spec.nfc = false;
  spec.pre_regex = "(?s).+";  // the whole text is one piece
  spec.unk_id = optional_id(f, "tokenizer.ggml.unknown_token_id");
  std::unordered_map<std::string_view, int32_t> pieces;
  for (size_t i = 0; i < types.size(); ++i) {
    const auto t = GgufTokenType(types[i]);
    if (t == GgufTokenType::Byte) spec.byte_fallback = true;
    if (t == GgufTokenType::Unknown && !spec.unk_id) spec.unk_id = int32_t(i);
    if (t == GgufTokenType::Normal) pieces.emplace(spec.tokens[i], int32_t(i));
  }
  // llama.cpp's default for this vocabulary: a "▁" before the text (Llama 2); Gemma says false.
  const bool space_prefix = f.find("tokenizer.ggml.add_space_prefix")
                                ? f.get_bool("tokenizer.ggml.add_space_prefix")
                                : true;
  if (space_prefix) {
    spec.prepend = kSpmSpace;
    spec.strip_leading = 1;
  }
  std::vector<int32_t> joined;
  for (const auto& [piece, id] : pieces)
    if (piece.size() > 1) joined.push_back(id);
  std::sort(joined.begin(), joined.end(), [&](int32_t a, int32_t b) {
    const double sa = scores.f64(size_t(a)), sb = scores.f64(size_t(b));
    return sa != sb ? sa > sb : a < b;
  });
  std::vector<std::pair<int32_t, int32_t>> splits;
  for (int32_t id : joined) {
    const std::string_view piece = spec.tokens[size_t(id)];
    splits.clear();
    for (size_t at = 1; at < piece.size(); ++at) {
      if ((static_cast<unsigned char>(piece[at]) & 0xC0) == 0x80) continue;  // inside a character
      const auto l = pieces.find(piece.substr(0, at)), r = pieces.find(piece.substr(at));
      if (l != pieces.end() && r != pieces.end()) splits.emplace_back(l->second, r->second);
    }
    std::sort(splits.begin(), splits.end());
    for (const auto& [l, r] : splits)
      spec.merges.emplace_back(spec.tokens[size_t(l)], spec.tokens[size_t(r)]);
  }
}

}  // namespace

TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& f) {
  const std::string& model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2" && model != "llama")
    fail(f.name() + ": tokenizer.ggml.model '" + model +
         "' is not supported (fak implements byte-level BPE, 'gpt2', and SentencePiece BPE, "
         "'llama')");
  TokenizerSpec spec;
  const GgufArray& tokens = f.get_array("tokenizer.ggml.tokens");
  if (tokens.type != GgufType::STRING || tokens.strings.empty())
    fail(f.name() + ": tokenizer.ggml.tokens is not a non-empty string array");
  spec.tokens = tokens.strings;

  std::vector<int32_t> types(spec.tokens.size(), int32_t(GgufTokenType::Normal));
  if (f.find("tokenizer.ggml.token_type")) {
    const GgufArray& tt = f.get_array("tokenizer.ggml.token_type");
    if (tt.size() != spec.tokens.size())
      fail(f.name() + ": tokenizer.ggml.token_type has " + std::to_string(tt.size()) +
           " entries for " + std::to_string(spec.tokens.size()) + " tokens");
    for (size_t i = 0; i < types.size(); ++i) types[i] = int32_t(tt.i64(i));
  }
  for (size_t i = 0; i < types.size(); ++i) {
    const auto t = GgufTokenType(types[i]);
    // Control tokens are the special added tokens; user-defined ones are added tokens stored as
    // their raw text (the converter decodes them), matched literally like llama.cpp does.
    if (t == GgufTokenType::Control || t == GgufTokenType::UserDefined)
      spec.added.push_back({int32_t(i), spec.tokens[i], t == GgufTokenType::Control});
  }

  if (model == "llama") {
    read_spm(f, types, spec);
  } else {
    read_byte_level(f, spec);
  }

  spec.bos_id = optional_id(f, "tokenizer.ggml.bos_token_id");
  spec.eos_id = optional_id(f, "tokenizer.ggml.eos_token_id");
  spec.pad_id = optional_id(f, "tokenizer.ggml.padding_token_id");
  if (f.find("tokenizer.ggml.add_bos_token"))
    spec.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  if (f.find("tokenizer.chat_template"))
    spec.chat_template = f.get_string("tokenizer.chat_template");
  return spec;
}

std::string gguf_pre_name(const TokenizerSpec& spec) {
  std::vector<std::string> splits;
  if (spec.pipeline) {
    for (const PreTokenizerStep& p : spec.pre_tokenizers) {
      if (p.kind == PreTokenizerStep::Kind::Split && p.behavior == SplitBehavior::Isolated &&
          !p.invert)
        splits.push_back(p.pattern);
      else if (p.kind == PreTokenizerStep::Kind::ByteLevel && p.use_regex)
        splits.emplace_back(kGpt2Pattern);
      else if (p.kind != PreTokenizerStep::Kind::ByteLevel || p.add_prefix_space)
        splits.push_back("(a pre-tokenizer step other than an isolated split)");
    }
  } else {
    splits.push_back(spec.pre_regex.empty() ? std::string(kQwen2Pattern) : spec.pre_regex);
  }
  const std::string name = gguf_pre_for_splits(splits);
  if (name.empty())
    fail(
        "the tokenizer's pre-tokenizer is none llama.cpp names (qwen2, qwen35, llama-bpe, gpt-4o, "
        "deepseek-v3, gpt-2)");
  return name;
}

namespace {

// SentencePiece BPE as llama.cpp's 'llama' vocabulary: no merge list but a score per piece, so a
// merge's rank becomes its joined piece's score (the first merge that makes it: -rank); pieces no
// merge makes score below every merge. Byte pieces <0xXX> are typed Byte, the unknown piece
// Unknown; the Prepend normaliser is add_space_prefix.
void write_spm(GgufWriter& out, const TokenizerSpec& spec, std::vector<std::string> tokens,
               std::vector<int32_t> types) {
  std::unordered_map<std::string, size_t> id_of;
  for (size_t i = 0; i < tokens.size(); ++i) id_of.emplace(tokens[i], i);
  constexpr float kNoMerge = -1e9f;
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == int32_t(GgufTokenType::Normal) && tokens[i].size() > 1) scores[i] = kNoMerge;
  for (size_t rank = spec.merges.size(); rank-- > 0;) {  // the first merge making a piece wins
    const auto it = id_of.find(spec.merges[rank].first + spec.merges[rank].second);
    if (it != id_of.end()) scores[it->second] = -float(rank);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (types[i] == int32_t(GgufTokenType::Normal) && spec.byte_fallback && t.size() == 6 &&
        t.rfind("<0x", 0) == 0 && t.back() == '>')
      types[i] = int32_t(GgufTokenType::Byte);
  }
  if (spec.unk_id && size_t(*spec.unk_id) < types.size())
    types[size_t(*spec.unk_id)] = int32_t(GgufTokenType::Unknown);
  out.set_string("tokenizer.ggml.model", "llama");
  out.set("tokenizer.ggml.tokens", GgufValue::make_array(GgufArray::of_strings(std::move(tokens))));
  out.set("tokenizer.ggml.scores",
          GgufValue::make_array(GgufArray::numbers(GgufType::F32, scores.data(), scores.size())));
  out.set("tokenizer.ggml.token_type",
          GgufValue::make_array(GgufArray::numbers(GgufType::I32, types.data(), types.size())));
  out.set_bool("tokenizer.ggml.add_space_prefix", !spec.prepend.empty());
  if (spec.unk_id) out.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(*spec.unk_id));
}

}  // namespace

void write_gguf_tokenizer(GgufWriter& out, const TokenizerSpec& spec, int vocab) {
  const bool spm = !spec.space.empty();
  if (spm && spec.space != kSpmSpace)
    fail("a SentencePiece-style tokenizer whose space is '" + spec.space +
         "' cannot be written as llama.cpp's 'llama' vocabulary, which spells it \u2581");
  if (spm && spec.nfc) fail("a SentencePiece-style tokenizer with NFC has no GGUF spelling");
  const size_t n = std::max<size_t>(size_t(vocab), spec.tokens.size());
  std::vector<std::string> tokens(n);
  std::vector<int32_t> types(n, int32_t(GgufTokenType::Normal));
  for (size_t i = 0; i < n; ++i) {
    if (i < spec.tokens.size() && !spec.tokens[i].empty()) {
      tokens[i] = spec.tokens[i];
    } else {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = int32_t(GgufTokenType::Unused);
    }
  }
  for (const TokenizerSpec::Added& a : spec.added) {
    if (a.id < 0 || size_t(a.id) >= n) continue;
    tokens[size_t(a.id)] = a.content;
    types[size_t(a.id)] = int32_t(a.special ? GgufTokenType::Control : GgufTokenType::UserDefined);
  }
  if (spm) {
    write_spm(out, spec, std::move(tokens), std::move(types));
  } else {
    std::vector<std::string> merges;
    merges.reserve(spec.merges.size());
    for (const auto& [l, r] : spec.merges) merges.push_back(l + " " + r);
    out.set_string("tokenizer.ggml.model", "gpt2");
    out.set_string("tokenizer.ggml.pre", gguf_pre_name(spec));
    out.set("tokenizer.ggml.tokens",
            GgufValue::make_array(GgufArray::of_strings(std::move(tokens))));
    out.set("tokenizer.ggml.token_type",
            GgufValue::make_array(GgufArray::numbers(GgufType::I32, types.data(), types.size())));
    out.set("tokenizer.ggml.merges",
            GgufValue::make_array(GgufArray::of_strings(std::move(merges))));
  }
  if (spec.bos_id) out.set_u32("tokenizer.ggml.bos_token_id", uint32_t(*spec.bos_id));
  if (spec.eos_id) out.set_u32("tokenizer.ggml.eos_token_id", uint32_t(*spec.eos_id));
  if (spec.pad_id) out.set_u32("tokenizer.ggml.padding_token_id", uint32_t(*spec.pad_id));
  out.set_bool("tokenizer.ggml.add_bos_token", spec.add_bos);
  if (!spec.chat_template.empty()) out.set_string("tokenizer.chat_template", spec.chat_template);
}

}  // namespace fak
