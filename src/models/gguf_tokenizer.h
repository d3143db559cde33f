// The tokenizer embedded in a GGUF file (tokenizer.ggml.*, llama.cpp's keys) <-> TokenizerSpec.
// Only byte-level BPE ("gpt2" model) vocabularies: the families fak runs all use it.
#pragma once

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace fak {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class GgufTokenType : int32_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6
};

// Throws fak::Error naming the file and key for a missing or unsupported vocabulary.
TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& file);

// Writes tokenizer.ggml.* as llama.cpp's converter does. `vocab` is the model's embedding rows:
// ids the tokenizer does not define become "[PAD<id>]" tokens of type Unused, like the converter.
void write_gguf_tokenizer(GgufWriter& out, const TokenizerSpec& spec, int vocab);

// The tokenizer.ggml.pre name for a split pattern ("qwen2", "llama-bpe", "gpt-2"); throws for a
// pattern llama.cpp would not recognise.
std::string gguf_pre_name(const TokenizerSpec& spec);

}  // namespace fak
