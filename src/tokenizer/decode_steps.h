// Running tokenizer.json's decoder (tokenizer/steps.h) over the tokens of a sequence, as HF
// `tokenizers`' decode_chain does (each step over the list of token strings, Fuse joining them,
// Metaspace and Strip looking at positions), then joined. Bytes out: where HF would put U+FFFD for
// an invalid sequence (ByteLevel's lossy UTF-8, ByteFallback's invalid runs) the raw bytes stay,
// for the caller to replace (Tokenizer::decode's contract).
#pragma once

#include <string>
#include <vector>

#include "tokenizer/regex_split.h"
#include "tokenizer/steps.h"

namespace fak {

class DecoderPipeline {
 public:
  DecoderPipeline() = default;
  // Compiles the regex Replace patterns; throws fak::Error naming one PCRE2 refuses.
  explicit DecoderPipeline(std::vector<DecoderStep> steps);

  std::string decode(std::vector<std::string> tokens) const;
  // One token's text in the middle of a sequence (not the first: no Metaspace or Strip rule for
  // the front applies): what Tokenizer::token_bytes reports.
  std::string token(const std::string& token) const;

  const std::vector<DecoderStep>& steps() const { return steps_; }

 private:
  std::vector<DecoderStep> steps_;
  std::vector<RegexSplitter> patterns_;  // per step: its Replace regex (an empty one otherwise)
};

}  // namespace fak
