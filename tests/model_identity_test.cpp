// The model identity (models/model_identity.h) and the file digests under it (io/file_digest.h):
// a byte anywhere in the weights or a GGUF metadata value changes it, a file name does not; the
// digest cache answers for unchanged files only and never fails a digest.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "io/file_digest.h"
#include "models/model.h"
#include "test_util.h"

namespace fak {
namespace {

namespace fs = std::filesystem;

// Every test here keeps its digest cache in its own temp folder, never under $HOME.
class ModelIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = test::temp_dir();
    cache_ = tmp_ / "digests";
    const char* old = std::getenv("FAK_DIGEST_CACHE");
    had_old_ = old != nullptr;
    if (old) old_ = old;
    setenv("FAK_DIGEST_CACHE", cache_.c_str(), 1);
  }
  void TearDown() override {
    if (had_old_)
      setenv("FAK_DIGEST_CACHE", old_.c_str(), 1);
    else
      unsetenv("FAK_DIGEST_CACHE");
  }
  fs::path tmp_, cache_;
  bool had_old_ = false;
  std::string old_;
};

fs::path copy_dir(const fs::path& src, const fs::path& dst) {
  fs::create_directories(dst);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, dst / f);
  return dst;
}

// XORs one byte of the file at `at`, in place.
void flip_byte(const fs::path& path, size_t at, uint8_t mask = 0x01) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(std::streamoff(at));
  char c = 0;
  f.read(&c, 1);
  c = char(uint8_t(c) ^ mask);
  f.seekp(std::streamoff(at));
  f.write(&c, 1);
}

TEST_F(ModelIdentityTest, HfDirectoryHashesEveryWeightByte) {
  const fs::path src = test::data_path("oracle/qwen2-tiny");
  const fs::path a = copy_dir(src, tmp_ / "a"), b = copy_dir(src, tmp_ / "b");
  const std::string ida = Model::load(a)->identity();
  EXPECT_EQ(ida.size(), 64u);
  EXPECT_EQ(ida.find_first_not_of("0123456789abcdef"), std::string::npos) << ida;
  EXPECT_EQ(Model::load(b)->identity(), ida) << "identical copies";

  // One byte in the middle of the data section (header: u64 size + JSON), well inside a tensor
  // and far from its first and last 256 bytes, which the former sampled hash read.
  const std::string bytes = test::read_file(b / "model.safetensors");
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const size_t data_begin = 8 + size_t(header);
  ASSERT_LT(data_begin, bytes.size());
  flip_byte(b / "model.safetensors", data_begin + (bytes.size() - data_begin) / 2);
  const std::string idb = Model::load(b)->identity();
  EXPECT_NE(idb, ida) << "a fine-tune of one shape";

  // --quant is part of it, and so is the config.
  EXPECT_NE(Model::load(a, {.quant = QuantType::Q8_0})->identity(), ida);
  std::string config = test::read_file(a / "config.json");
  test::write_file(a / "config.json", config + "\n");
  EXPECT_NE(Model::load(a)->identity(), ida);
}

TEST_F(ModelIdentityTest, GgufHashesMetadataNotTheFileName) {
  const fs::path src = test::data_path("oracle/qwen3-moe-tiny/model.gguf");
  const fs::path a = tmp_ / "a.gguf", renamed = tmp_ / "other-name.gguf", b = tmp_ / "b.gguf";
  fs::copy_file(src, a);
  fs::copy_file(src, renamed);
  fs::copy_file(src, b);
  auto ma = Model::load(a, {.load_tokenizer = false});
  const std::string ida = ma->identity();
  EXPECT_EQ(Model::load(renamed, {.load_tokenizer = false})->identity(), ida);
  // Mapped or read into memory (where loading rewrites rows in place): the bytes as stored.
  EXPECT_EQ(Model::load(a, {.load_tokenizer = false, .mmap = true})->identity(), ida);

  // The same tensors, another rope.freq_base: the f32 after the key and its type (6).
  std::string bytes = test::read_file(b);
  const std::string key = "rope.freq_base";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  uint32_t type = 0;
  std::memcpy(&type, bytes.data() + at + key.size(), 4);
  ASSERT_EQ(type, 6u);
  float theta = 0;
  std::memcpy(&theta, bytes.data() + at + key.size() + 4, 4);
  theta *= 2;
  std::memcpy(bytes.data() + at + key.size() + 4, &theta, 4);
  test::write_file(b, bytes);
  auto mb = Model::load(b, {.load_tokenizer = false});
  ASSERT_EQ(mb->config().rope_theta, 2 * ma->config().rope_theta);
  EXPECT_NE(mb->identity(), ida);
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng());
  return s;
}

TEST_F(ModelIdentityTest, FileDigestIsShaOfSizeAndChunkDigests) {
  // Over two chunks, so the parallel path runs; the definition is independent of thread count.
  const size_t n = kDigestChunkBytes + 12345;
  const std::string bytes = random_bytes(n, 7);
  const fs::path f = tmp_ / "big.bin";
  test::write_file(f, bytes);
  std::string manifest = "fak-file-digest-v1";
  manifest.push_back('\0');
  for (int i = 0; i < 8; ++i) manifest.push_back(char(uint64_t(n) >> (8 * i)));
  for (size_t at = 0; at < n; at += kDigestChunkBytes) {
    const size_t len = std::min(kDigestChunkBytes, n - at);
    const std::string hex = sha256_hex(bytes.data() + at, len);
    for (size_t i = 0; i < 32; ++i)
      manifest.push_back(char(std::stoi(hex.substr(2 * i, 2), nullptr, 16)));
  }
  EXPECT_EQ(file_digest(f, {}), sha256_hex(manifest.data(), manifest.size()));
  // Empty and one-byte files are files too.
  test::write_file(tmp_ / "empty", "");
  test::write_file(tmp_ / "one", "x");
  EXPECT_NE(file_digest(tmp_ / "empty", {}), file_digest(tmp_ / "one", {}));
}

TEST_F(ModelIdentityTest, DigestCacheAnswersOnlyForUnchangedFiles) {
  const fs::path a = tmp_ / "a.bin", b = tmp_ / "b.bin", young = tmp_ / "young.bin";
  test::write_file(a, random_bytes(100000, 1));
  test::write_file(b, random_bytes(100000, 2));
  // Entries are written only for files changed over kRacyMarginNs before hashing began.
  std::this_thread::sleep_for(std::chrono::nanoseconds(kRacyMarginNs) +
                              std::chrono::milliseconds(100));
  test::write_file(young, random_bytes(1000, 3));

  bool cached = true;
  const std::string da = file_digest(a, cache_, &cached);
  EXPECT_FALSE(cached);
  EXPECT_EQ(file_digest(a, cache_, &cached), da);
  EXPECT_TRUE(cached) << "the second digest of an unchanged file comes from the cache";

  // A file changed just now is hashed every time until it is old enough (racy: a same-size
  // rewrite within one timestamp tick could keep its times).
  const std::string dy = file_digest(young, cache_, &cached);
  EXPECT_FALSE(cached);
  EXPECT_EQ(file_digest(young, cache_, &cached), dy);
  EXPECT_FALSE(cached);

  // Rewritten in place with the same size, and its mtime set back to what it was: ctime moved.
  struct stat st {};
  ASSERT_EQ(stat(a.c_str(), &st), 0);
  {
    std::fstream f(a, std::ios::in | std::ios::out | std::ios::binary);
    const std::string other = random_bytes(100000, 4);
    f.write(other.data(), std::streamsize(other.size()));
  }
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, a.c_str(), times, 0), 0);
  ASSERT_EQ(fs::file_size(a), 100000u);
  const std::string da2 = file_digest(a, cache_, &cached);
  EXPECT_FALSE(cached);
  EXPECT_NE(da2, da);
  EXPECT_EQ(da2, file_digest(a, {}));

  // A corrupt entry is ignored (and replaced); so is an unusable cache folder.
  const std::string db = file_digest(b, cache_, &cached);
  EXPECT_FALSE(cached);
  file_digest(b, cache_, &cached);
  ASSERT_TRUE(cached);
  for (const auto& e : fs::directory_iterator(cache_)) {
    std::string text = test::read_file(e.path());
    text[text.size() - 5] = text[text.size() - 5] == '0' ? '1' : '0';  // a wrong digest
    test::write_file(e.path(), text.substr(0, text.size() - 1));       // and truncated
  }
  EXPECT_EQ(file_digest(b, cache_, &cached), db);
  EXPECT_FALSE(cached);
  EXPECT_EQ(file_digest(b, cache_, &cached), db);
  EXPECT_TRUE(cached);
  for (const auto& e : fs::directory_iterator(cache_)) test::write_file(e.path(), "garbage");
  EXPECT_EQ(file_digest(b, cache_, &cached), db);
  EXPECT_FALSE(cached);
  test::write_file(tmp_ / "not-a-dir", "x");
  EXPECT_EQ(file_digest(b, tmp_ / "not-a-dir" / "digests", &cached), db);
  EXPECT_FALSE(cached);
}

TEST_F(ModelIdentityTest, DigestCacheFolderFromTheEnvironment) {
  EXPECT_EQ(default_digest_cache_dir(), cache_);
  setenv("FAK_DIGEST_CACHE", "", 1);
  EXPECT_TRUE(default_digest_cache_dir().empty()) << "an empty value turns the cache off";
  unsetenv("FAK_DIGEST_CACHE");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string old_xdg = xdg ? xdg : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(default_digest_cache_dir(), fs::path("/x/cache/fak/digests"));
  unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME")) {
    EXPECT_EQ(default_digest_cache_dir(), fs::path(home) / ".cache/fak/digests");
  }
  if (xdg) setenv("XDG_CACHE_HOME", old_xdg.c_str(), 1);
}

}  // namespace
}  // namespace fak
