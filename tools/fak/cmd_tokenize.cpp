// fak tokenize: text -> ids with a model's tokenizer (a directory holding tokenizer.json suffices,
// or a GGUF file's vocabulary).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/error.h"
#include "io/gguf.h"
#include "models/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace fak::cli {

namespace {

struct TokenizeArgs {
  std::string model, text, file;
  bool json = false, no_special = false;
};

void tokenize(const TokenizeArgs& a) {
  if (a.text.empty() == a.file.empty()) fail("give exactly one of TEXT or -f FILE");
  const std::string path = a.model.empty() ? default_model_dir() : a.model;
  const bool gguf = std::filesystem::is_regular_file(path);
  if (!gguf && !std::filesystem::is_directory(path))
    fail(path + " is neither a directory nor a GGUF file");
  Tokenizer tok = gguf ? Tokenizer::from_spec(tokenizer_spec_from_gguf(GgufFile::open(path)))
                       : Tokenizer::from_dir(path);
  std::string text = a.file.empty() ? a.text : read_text_file(a.file);
  if (a.file.empty()) check_utf8(text, "the text");
  std::vector<int32_t> ids = tok.encode(text, !a.no_special);
  if (a.json) {
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  }
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* c = app.add_subcommand("tokenize", "print the token ids of a text");
  c->add_option("-m,--model", a->model,
                "model or tokenizer directory, or a GGUF file (default: bundled model)");
  c->add_option("text", a->text, "text to tokenize");
  c->add_option("-f,--file", a->file, "read the text from a file (UTF-8)");
  c->add_flag("--json", a->json, "print a JSON array");
  c->add_flag("--no-special", a->no_special, "treat special-token text as plain text");
  c->callback([a] { tokenize(*a); });
}

}  // namespace fak::cli
