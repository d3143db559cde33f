#include "test_util.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/session.h"

namespace fak::test {

std::filesystem::path data_path(const std::string& relative) {
  return std::filesystem::path(FAK_TEST_DATA) / relative;
}

std::filesystem::path source_path(const std::string& relative) {
  return std::filesystem::path(FAK_SOURCE_DIR) / relative;
}

namespace {
// Every directory temp_dir() made, removed when the test process exits (each CTest case is a
// process of its own). Some hold converted models of hundreds of MB: left behind, thousands of
// runs filled the disk.
struct TempDirs {
  std::mutex mu;
  std::vector<std::filesystem::path> dirs;
  ~TempDirs() {
    for (const auto& d : dirs) {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  }
};
TempDirs& temp_dirs() {
  static TempDirs registry;
  return registry;
}
}  // namespace

std::filesystem::path temp_dir() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "fak";
  std::replace(name.begin(), name.end(), '/', '_');  // parameterised names: one directory level
  auto dir =
      std::filesystem::temp_directory_path() /
      ("fak-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  TempDirs& reg = temp_dirs();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.dirs.push_back(dir);
  return dir;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

CommandResult run_fak(const std::string& args) {
  return run_fak_with_input(args, "");
}

CommandResult run_fak_with_input(const std::string& args, const std::string& input) {
  auto dir = temp_dir();
  auto out_path = dir / "stdout";
  auto err_path = dir / "stderr";
  auto in_path = dir / "stdin";
  write_file(in_path, input);
  std::string cmd = std::string(FAK_BINARY) + " " + args + " >" + out_path.string() + " 2>" +
                    err_path.string() + " <" + in_path.string();
  int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  std::filesystem::remove_all(dir);
  return r;
}

std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n), 0);
  for (auto& id : ids) id = int32_t(rng() % uint32_t(vocab));
  return ids;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string error_with_file_size_limit(size_t bytes, const std::function<void()>& fn) {
  struct rlimit old {};
  EXPECT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = bytes;
  EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  try {
    fn();
  } catch (const Error& e) {
    msg = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  return msg;
}

void add_tokens(fak::ojson& tokenizer_json, int first_id, std::initializer_list<const char*> tokens,
                bool special) {
  int id = first_id;
  for (const char* t : tokens)
    tokenizer_json["added_tokens"].push_back({{"id", id++},
                                              {"content", t},
                                              {"single_word", false},
                                              {"lstrip", false},
                                              {"rstrip", false},
                                              {"normalized", false},
                                              {"special", special}});
}

std::filesystem::path thinking_model() {
  const auto model = temp_dir() / "thinker";
  std::filesystem::copy(source_path("models/pycoder-6m"), model);
  fak::ojson tok = fak::ojson::parse(read_file(model / "tokenizer.json"));
  // The embedding's padded rows begin at 8128.
  add_tokens(tok, 8128, {"<think>", "</think>"}, /*special=*/false);
  write_file(model / "tokenizer.json", tok.dump());
  fak::ojson config = fak::ojson::parse(read_file(model / "tokenizer_config.json"));
  config["chat_template"] =
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is "
      "defined and enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif "
      "%}{% endif %}";
  write_file(model / "tokenizer_config.json", config.dump());
  return model;
}

std::filesystem::path padded_vocab_model(int tokenizer_ids) {
  const auto dir = temp_dir() / "padded";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(data_path("oracle/llama-tiny") / f, dir / f);
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < tokenizer_ids - 10; ++i) vocab["<" + std::to_string(i) + ">"] = i;
  nlohmann::json tokenizer = {
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"added_tokens", {{{"id", tokenizer_ids - 1}, {"content", "<|end|>"}, {"special", true}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  write_file(dir / "tokenizer.json", tokenizer.dump());
  return dir;
}

std::filesystem::path synth_hybrid(const std::filesystem::path& tmp) {
  const auto model = tmp / "hybrid";
  auto cfg = nlohmann::json::parse(read_file(data_path("oracle/qwen35-hybrid-tiny/config.json")));
  cfg["vocab_size"] = 8192;  // the bundled tokenizer's
  write_file(tmp / "hybrid.json", cfg.dump());
  auto synth =
      run_fak("synth --config " + (tmp / "hybrid.json").string() + " -o " + model.string() +
              " --dtype f32 --std 0.1 --tokenizer " + source_path("models/pycoder-6m").string());
  EXPECT_EQ(synth.exit_code, 0) << synth.err;
  return model;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::string kv_bytes(const Session& s, size_t n_blocks) {
  const KvCache& c = s.cache();
  std::string out;
  std::vector<uint8_t> rows(size_t(c.block_size()) * c.row_bytes());
  for (size_t b = 0; b < n_blocks; ++b)
    for (int l = 0; l < c.n_layers(); ++l)
      for (int p = 0; p < (c.keeps_kraw() ? 3 : 2); ++p) {
        c.read_rows(s.blocks()[b], l, KvPlane(p), c.block_size(), rows.data());
        out.append(reinterpret_cast<const char*>(rows.data()), rows.size());
      }
  return out;
}

std::vector<float> last_logits(const std::shared_ptr<const Model>& model,
                               const std::vector<int32_t>& ids) {
  auto cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                         model->config().head_dim);
  Session s(model, cache);
  s.append(ids);
  return s.logits();
}

}  // namespace fak::test
