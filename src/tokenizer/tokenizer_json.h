// Reading HF tokenizer.json (+ tokenizer_config.json) into a TokenizerSpec: the BPE model and its
// normalizer, pre-tokenizer and decoder as steps (tokenizer/steps.h). Anything that would change
// the ids and that fak does not implement (another model type, an unknown component) is an error
// naming it rather than a silently different tokenization.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace fak {

// json_name / config_name are what error messages call the two inputs (usually their paths).
// An empty config_json means there is no tokenizer_config.json.
TokenizerSpec parse_tokenizer_json(std::string_view json, std::string_view config_json,
                                   const std::string& json_name, const std::string& config_name);

// The template a chat_template.json ({"chat_template": "..."}, a processor's file) holds; throws
// fak::Error naming `name` when it holds none.
std::string chat_template_from_json(std::string_view text, const std::string& name);

}  // namespace fak
