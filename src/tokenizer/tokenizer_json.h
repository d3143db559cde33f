// Reading HF tokenizer.json (+ tokenizer_config.json) into a TokenizerSpec. Only what byte-level
// BPE needs is read; anything that would change the ids and that fak does not implement (another
// model type, a normaliser other than NFC, an unknown pre-tokenizer) is an error rather than a
// silently different tokenization.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace fak {

// json_name / config_name are what error messages call the two inputs (usually their paths).
// An empty config_json means there is no tokenizer_config.json.
TokenizerSpec parse_tokenizer_json(std::string_view json, std::string_view config_json,
                                   const std::string& json_name, const std::string& config_name);

}  // namespace fak
