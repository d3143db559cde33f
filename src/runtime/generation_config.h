// The sampling a model's authors recommend, from its generation_config.json (Hugging Face
// semantics): with do_sample false or absent, greedy; with do_sample true, its temperature, top_p,
// top_k (HF's default 50 when unset), min_p and repetition_penalty. What a server request or CLI
// run that sets none of these starts from. GGUF files and directories without the file: greedy.
#pragma once

#include <filesystem>

#include "runtime/sampler.h"

namespace fak {

// Throws fak::Error naming the file when it exists but is not valid (bad JSON, a value of the
// wrong type, or one the sampler would refuse).
SamplingOptions load_generation_defaults(const std::filesystem::path& model_path);

}  // namespace fak
