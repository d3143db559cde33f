#include "models/gguf_tokenizer.h"

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace fak {

namespace {

std::optional<int32_t> optional_id(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  const int64_t id = f.get_i64(key);
  // note: some converters write -1 (as u32 0xFFFFFFFF) for "none".
  if (id < 0 || id >= int64_t(INT32_MAX)) return std::nullopt;
  return int32_t(id);
}

}  // namespace

TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& f) {
  const std::string& model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    fail(f.name() + ": tokenizer.ggml.model '" + model +
         "' is not supported (fak implements byte-level BPE, 'gpt2')");
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
  const std::string_view pattern = pattern_for_gguf_pre(pre);
  if (pattern.empty())
    fail(f.name() + ": tokenizer.ggml.pre '" + pre +
         "' is not supported (supported: qwen2, qwen35, llama-bpe, gpt-2 and their aliases)");
  spec.pre_regex = std::string(pattern);
  // GGUF has no normaliser field: Qwen2's tokenizer.json has NFC, Llama-3's and GPT-2's none.
  spec.nfc = pattern == kQwen2Pattern;
  // llama.cpp sets ignore_merges for the Llama-3 pre-tokenizer, as HF's tokenizer.json does.
  spec.ignore_merges = pattern == kLlama3Pattern;

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
  if (spec.pre_regex.empty() || spec.pre_regex == kQwen2Pattern) return "qwen2";
  if (spec.pre_regex == kLlama3Pattern) return "llama-bpe";
  if (spec.pre_regex == kGpt2Pattern) return "gpt-2";
  if (spec.pre_regex == kQwen35Pattern) return "qwen35";
  fail("the tokenizer's split pattern is none llama.cpp names (qwen2, qwen35, llama-bpe, gpt-2): " +
       spec.pre_regex);
}

void write_gguf_tokenizer(GgufWriter& out, const TokenizerSpec& spec, int vocab) {
  if (!spec.space.empty())
    fail("writing a SentencePiece-style tokenizer (Gemma's) into a GGUF is not supported yet: "
         "llama.cpp keeps it as tokenizer.ggml.model 'llama' with scores, which fak does not write");
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
  std::vector<std::string> merges;
  merges.reserve(spec.merges.size());
  for (const auto& [l, r] : spec.merges) merges.push_back(l + " " + r);

  out.set_string("tokenizer.ggml.model", "gpt2");
  out.set_string("tokenizer.ggml.pre", gguf_pre_name(spec));
  out.set("tokenizer.ggml.tokens", GgufValue::make_array(GgufArray::of_strings(std::move(tokens))));
  out.set("tokenizer.ggml.token_type",
          GgufValue::make_array(GgufArray::numbers(GgufType::I32, types.data(), types.size())));
  out.set("tokenizer.ggml.merges", GgufValue::make_array(GgufArray::of_strings(std::move(merges))));
  if (spec.bos_id) out.set_u32("tokenizer.ggml.bos_token_id", uint32_t(*spec.bos_id));
  if (spec.eos_id) out.set_u32("tokenizer.ggml.eos_token_id", uint32_t(*spec.eos_id));
  if (spec.pad_id) out.set_u32("tokenizer.ggml.padding_token_id", uint32_t(*spec.pad_id));
  out.set_bool("tokenizer.ggml.add_bos_token", spec.add_bos);
  if (!spec.chat_template.empty()) out.set_string("tokenizer.chat_template", spec.chat_template);
}

}  // namespace fak
