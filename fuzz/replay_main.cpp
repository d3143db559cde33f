// Runs a libFuzzer target without libFuzzer, so CTest can keep every fuzz target honest on each
// commit: all files of the given corpus folders, then (with --mutations N) N inputs made from them
// by seeded random edits: the same inputs on every run. A crash, abort or sanitizer report fails
// the test. Finding new bugs over hours stays the job of the real fuzzers (-DFAK_FUZZ=ON).
//
//   replay_main CORPUS_DIR... [--mutations N] [--seed S]
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run, so a crash can leave it behind for reproduction.
const std::string* g_current = nullptr;
char g_crash_path[128];

void on_crash(int sig) {
  if (g_current) {
    const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)!::write(fd, g_current->data(), g_current->size());
      ::close(fd);
    }
    const char msg[] = "replay: the failing input is in ";
    (void)!::write(2, msg, sizeof msg - 1);
    (void)!::write(2, g_crash_path, std::strlen(g_crash_path));
    (void)!::write(2, "\n", 1);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Edits of the kinds libFuzzer makes: flip, insert, erase, duplicate, splice, and tokens that
// parsers trip on (quotes, brackets, huge or negative numbers, escapes, CRLF, NUL).
std::string mutate(const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  static const char* kTokens[] = {"\"",      "{",     "}",   "[",       "]",     ",",
                                  ":",       "-1",    "0",   "1e308",   "-0.0",  "null",
                                  "true",    "\\u0000", "\\", "\r\n",    "\r\n\r\n", "\xff",
                                  "99999999999999999999", "\"max_tokens\": ", "\"stream\": true",
                                  "chunked", "Content-Length: ", "\xf0\x9f\x98"};
  auto pick = [&](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
  std::string s = seeds[pick(seeds.size())];
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= char(1 << (rng() % 8));
        break;
      case 1:
        s.insert(pick(s.size() + 1), 1, char(rng()));
        break;
      case 2:
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
        }
        break;
      case 3:
        if (!s.empty()) {
          const size_t at = pick(s.size());
          const size_t n = 1 + pick(std::min<size_t>(64, s.size() - at));
          s.insert(pick(s.size() + 1), s.substr(at, n));
        }
        break;
      case 4: {
        const std::string& other = seeds[pick(seeds.size())];
        const size_t cut = pick(s.size() + 1);
        s = s.substr(0, cut) + other.substr(pick(other.size() + 1));
        break;
      }
      default:
        s.insert(pick(s.size() + 1), kTokens[pick(sizeof kTokens / sizeof kTokens[0])]);
        break;
    }
  }
  if (s.size() > (1 << 20)) s.resize(1 << 20);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> seeds;
  long mutations = 0;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mutations") && i + 1 < argc) {
      mutations = std::atol(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      const std::filesystem::path p = argv[i];
      if (std::filesystem::is_directory(p)) {
        std::vector<std::filesystem::path> files;
        for (const auto& e : std::filesystem::directory_iterator(p))
          if (e.is_regular_file()) files.push_back(e.path());
        std::sort(files.begin(), files.end());  // the same order, so the same mutations
        for (const auto& f : files) seeds.push_back(read_all(f));
      } else {
        seeds.push_back(read_all(p));
      }
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 2;
  }
  std::snprintf(g_crash_path, sizeof g_crash_path, "/tmp/fak-replay-crash-%d", int(::getpid()));
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(sig, on_crash);
  for (const std::string& s : seeds) run(s);
  std::mt19937_64 rng(seed);
  for (long i = 0; i < mutations; ++i) run(mutate(seeds, rng));
  std::printf("replay: %zu corpus inputs and %ld mutations, no failure\n", seeds.size(), mutations);
  return 0;
}
