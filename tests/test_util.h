// Helpers shared by tests: where the copied-in fixtures live, running the fak binary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"

namespace fak {
class Model;
}

namespace fak {
class Session;
}

namespace fak::test {

std::filesystem::path data_path(const std::string& relative);    // tests/data/<relative>
std::filesystem::path source_path(const std::string& relative);  // repo root/<relative>
std::filesystem::path temp_dir();  // a fresh directory for this test, removed at exit

struct CommandResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `fak <args>` (args are passed to /bin/sh, quote as needed).
CommandResult run_fak(const std::string& args);
// The same with `input` as its standard input (run_fak's is empty).
CommandResult run_fak_with_input(const std::string& args, const std::string& input);
std::string read_file(const std::filesystem::path& path);
// The lines, each ending with a newline (for failure messages).
std::string joined(const std::vector<std::string>& lines);
// Every plane of every layer of the session's first n blocks, as the KV cache stores them.
std::string kv_bytes(const Session& s, size_t n_blocks);
// A random-weight hybrid (Gated DeltaNet) of the tiny fixture's shape with the bundled model's
// tokenizer, written to tmp/hybrid by `fak synth`; returns its directory.
std::filesystem::path synth_hybrid(const std::filesystem::path& tmp);
void write_file(const std::filesystem::path& path, const std::string& bytes);

// Runs fn with writes past `bytes` of any file failing (RLIMIT_FSIZE, SIGXFSZ ignored), as a full
// disk would fail them; returns the fak::Error fn threw ("" if none). The limit is lifted after.
std::string error_with_file_size_limit(size_t bytes, const std::function<void()>& fn);

// A model whose embedding has more rows than its tokenizer has ids, as real checkpoints pad
// theirs: llama-tiny's 512-row weights with a tokenizer of `tokenizer_ids` ids (all but the last
// plain vocabulary entries, the last a special added token), in a fresh temp directory.
std::filesystem::path padded_vocab_model(int tokenizer_ids);

// Appends added tokens (ids first_id, first_id + 1, ...) to a tokenizer.json.
void add_tokens(fak::ojson& tokenizer_json, int first_id, std::initializer_list<const char*> tokens,
                bool special);

// The bundled model with <think> / </think> added (on the embedding's first padded rows) and a
// template that opens a thinking block unless enable_thinking is false (as Qwen3's does): what it
// writes is then its reasoning. In a fresh temp directory named "thinker".
std::filesystem::path thinking_model();

// n token ids drawn uniformly from [0, vocab) by mt19937(seed).
std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed);

// A fixture directory's name as a test name: gtest allows no '-' ("gemma3-tiny" -> "gemma3_tiny").
// For INSTANTIATE_TEST_SUITE_P over fixture names: [](const auto& i) { return
// fixture_name(i.param); }
inline std::string fixture_name(std::string name) {
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}
// a followed by b.
inline std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
// The last token's logits after a fresh session of `model` (f32 KV) appends `ids`.
std::vector<float> last_logits(const std::shared_ptr<const Model>& model,
                               const std::vector<int32_t>& ids);
// Same length and the same bits (what the reuse stack promises).
bool bit_equal(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace fak::test
