// The families fak runs: one line each. A family's file (families/*.cpp) says what it is.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/family.h"

namespace fak {

const Family& llama_family();
const Family& qwen2_family();
const Family& qwen3_family();
const Family& qwen35_family();
const Family& qwen3_moe_family();
const Family& qwen35_moe_family();
const Family& gemma3_family();
const Family& glm4_moe_family();
const Family& gpt_oss_family();
const Family& mistral_family();

nlohmann::json Family::hf_defaults() const {
  return nlohmann::json::object();
}

const std::vector<const Family*>& all_families() {
  static const std::vector<const Family*> families = {
      &llama_family(),     &qwen2_family(),      &qwen3_family(),  &qwen35_family(),
      &qwen3_moe_family(), &qwen35_moe_family(), &gemma3_family(), &glm4_moe_family(),
      &gpt_oss_family(),   &mistral_family(),
  };
  return families;
}

const Family& family_for_hf(const std::string& model_type, const std::string& label) {
  std::string supported;
  for (const Family* f : all_families()) {
    for (std::string_view t : f->hf_model_types())
      if (t == model_type) return *f;
    supported += (supported.empty() ? "" : ", ") + std::string(f->hf_model_types().front());
  }
  fail(label + ": model_type '" + model_type + "' is not supported (supported: " + supported + ")");
}

const Family& family_for_gguf(const std::string& arch, const std::string& label) {
  std::string supported;
  for (const Family* f : all_families()) {
    if (f->gguf_arch() == arch) return *f;
    supported += (supported.empty() ? "" : ", ") + std::string(f->gguf_arch());
  }
  fail(label + ": general.architecture '" + arch + "' is not supported (supported: " + supported +
       ")");
}

}  // namespace fak
