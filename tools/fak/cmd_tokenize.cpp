// fak tokenize: text -> ids with a model's tokenizer (a directory holding tokenizer.json suffices).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace fak::cli {

namespace {

struct TokenizeArgs {
  std::string model, text, file;
  bool json = false, no_special = false;
};

void tokenize(const TokenizeArgs& a) {
  if (a.text.empty() == a.file.empty()) fail("give exactly one of TEXT or -f FILE");
  const std::string dir = a.model.empty() ? default_model_dir() : a.model;
  if (!std::filesystem::is_directory(dir)) fail(dir + " is not a directory");
  Tokenizer tok = Tokenizer::from_dir(dir);
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
  c->add_option("-m,--model", a->model, "model or tokenizer directory (default: bundled model)");
  c->add_option("text", a->text, "text to tokenize");
  c->add_option("-f,--file", a->file, "read the text from a file (UTF-8)");
  c->add_flag("--json", a->json, "print a JSON array");
  c->add_flag("--no-special", a->no_special, "treat special-token text as plain text");
  c->callback([a] { tokenize(*a); });
}

}  // namespace fak::cli
