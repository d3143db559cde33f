// `fak pull` against a mock Hugging Face hub (no machine here reaches the real one): an
// httplib::Server on 127.0.0.1 speaking the endpoints and headers huggingface_hub uses, serving
// qwen2-tiny's files; fak runs as a real process pointed at it with HF_ENDPOINT and a temp HF_HOME.
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_util.h"

namespace fak::test {
namespace {

namespace fs = std::filesystem;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string digest_hex(const std::string& bytes, bool sha1_git_blob) {
  std::string input = bytes;
  if (sha1_git_blob) input = "blob " + std::to_string(bytes.size()) + std::string(1, '\0') + bytes;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), md, &len, sha1_git_blob ? EVP_sha1() : EVP_sha256(),
             nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += {kHex[md[i] >> 4], kHex[md[i] & 15]};
  return hex;
}

struct HubFile {
  std::string bytes, etag;  // etag: sha256 (LFS) or the git blob sha1
  bool lfs = false;
};

HubFile small_file(const std::string& bytes) {
  return HubFile{bytes, digest_hex(bytes, true), false};
}

// The hub's answers as huggingface_hub expects them: model info with siblings, HEAD/GET on
// resolve/ with X-Repo-Commit and ETag (LFS: X-Linked-Etag, X-Linked-Size and a 302 to a "CDN").
class MockHub {
 public:
  std::map<std::string, HubFile> files;
  std::string token;     // non-empty: a gated repository, this token required
  size_t cut_after = 0;  // the CDN closes the first download after this many bytes
  bool corrupt = false;  // the CDN serves a wrong byte
  std::atomic<int> cdn_gets{0};
  // A hostile hub: edits the model listing before it is sent, or adds headers to resolve/.
  std::function<void(nlohmann::json&)> edit_listing;
  httplib::Headers extra_resolve_headers;
  std::mutex mu;
  std::vector<std::string> ranges, auths;  // per CDN GET: the Range header; per request: auth

  MockHub() {
    for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
      HubFile f;
      f.bytes = read_file(data_path(std::string("oracle/qwen2-tiny/") + name));
      f.lfs = std::string(name).ends_with(".safetensors");
      f.etag = digest_hex(f.bytes, !f.lfs);
      files[name] = f;
    }
    server_.Get("/api/models/org/tiny/revision/main", [this](const auto& req, auto& res) {
      if (!authorized(req, res)) return;
      nlohmann::json siblings = nlohmann::json::array();
      for (const auto& [name, f] : files) {
        nlohmann::json s = {{"rfilename", name}, {"size", f.bytes.size()}};
        if (f.lfs)
          s["lfs"] = {{"sha256", f.etag}, {"size", f.bytes.size()}};
        else
          s["blobId"] = f.etag;
        siblings.push_back(s);
      }
      nlohmann::json listing = {{"id", "org/tiny"}, {"sha", kCommit}, {"siblings", siblings}};
      if (edit_listing) edit_listing(listing);
      res.set_content(listing.dump(), "application/json");
    });
    server_.Get("/api/models/org/missing/revision/main", [](const auto&, auto& res) {
      res.status = 404;
      res.set_header("X-Error-Code", "RepoNotFound");
      res.set_content("{\"error\":\"Repository not found\"}", "application/json");
    });
    // GET and HEAD (httplib answers HEAD with the GET handler, without the body).
    server_.Get("/org/tiny/resolve/" + kCommit + "/(.+)", [this](const auto& req, auto& res) {
      if (!authorized(req, res)) return;
      auto it = files.find(req.matches[1].str());
      if (it == files.end()) {
        res.status = 404;
        res.set_header("X-Error-Code", "EntryNotFound");
        return;
      }
      const HubFile& f = it->second;
      res.set_header("X-Repo-Commit", kCommit);
      for (const auto& [k, v] : extra_resolve_headers) res.set_header(k, v);
      if (f.lfs) {
        res.status = 302;
        res.set_header("X-Linked-Etag", "\"" + f.etag + "\"");
        res.set_header("X-Linked-Size", std::to_string(f.bytes.size()));
        res.set_header("ETag", "\"pointer-etag\"");
        res.set_header("Location", base_url() + "/cdn/" + f.etag);
      } else {
        res.set_header("ETag", "\"" + f.etag + "\"");
        res.set_content(f.bytes, "application/octet-stream");
      }
    });
    server_.Get("/cdn/([0-9a-f]+)", [this](const auto& req, auto& res) {
      {
        std::lock_guard lock(mu);
        ranges.push_back(req.get_header_value("Range"));
      }
      const HubFile* f = nullptr;
      for (const auto& [name, file] : files)
        if (file.etag == req.matches[1].str()) f = &file;
      if (!f) return void(res.status = 404);
      std::string bytes = f->bytes;
      if (corrupt) bytes[bytes.size() / 2] ^= 1;
      const bool cut = cdn_gets++ == 0 && cut_after > 0;
      // A content provider: httplib applies the Range (206) itself, and returning false mid-body
      // drops the connection as a failing CDN would.
      res.set_content_provider(
          bytes.size(), "application/octet-stream",
          [this, bytes, cut](size_t offset, size_t length, httplib::DataSink& sink) {
            size_t end = offset + length;
            if (cut) end = std::min(end, cut_after);
            if (end > offset) sink.write(bytes.data() + offset, end - offset);
            return !cut || offset + length <= cut_after;
          });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~MockHub() {
    server_.stop();
    thread_.join();
  }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  bool authorized(const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    auths.push_back(req.get_header_value("Authorization"));
    if (token.empty() || req.get_header_value("Authorization") == "Bearer " + token) return true;
    res.status = 401;
    res.set_header("X-Error-Code", "GatedRepo");
    return false;
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

class HubPullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = temp_dir() / "hf";
    ::setenv("HF_ENDPOINT", hub_.base_url().c_str(), 1);
    ::setenv("HF_HOME", home_.c_str(), 1);
    ::unsetenv("HF_HUB_CACHE");
    ::unsetenv("HF_TOKEN");
    ::unsetenv("HF_TOKEN_PATH");
  }
  void TearDown() override {
    ::unsetenv("HF_ENDPOINT");
    ::unsetenv("HF_HOME");
    ::unsetenv("HF_TOKEN");
  }
  fs::path repo() const { return home_ / "hub" / "models--org--tiny"; }
  fs::path blob(const std::string& name) { return repo() / "blobs" / hub_.files[name].etag; }

  MockHub hub_;
  fs::path home_;
};

TEST_F(HubPullTest, FullPullGivesHuggingFaceCacheLayoutAndRunsFromIt) {
  auto r = run_fak("pull org/tiny");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, (repo() / "snapshots" / kCommit).string() + "\n");
  EXPECT_EQ(read_file(repo() / "refs" / "main"), kCommit);
  for (const auto& [name, f] : hub_.files) {
    const fs::path link = repo() / "snapshots" / kCommit / name;
    ASSERT_TRUE(fs::is_symlink(link)) << link;
    EXPECT_EQ(fs::read_symlink(link), fs::path("../../blobs") / f.etag);
    EXPECT_EQ(read_file(link), f.bytes) << name;
  }
  // LFS blobs are named by sha256, small files by their git blob sha1, as huggingface_hub names
  // them.
  EXPECT_EQ(blob("model.safetensors").filename().string().size(), 64u);
  EXPECT_EQ(blob("config.json").filename().string().size(), 40u);
  // Not a terminal: one line per file, no bar.
  EXPECT_NE(r.err.find("pulled model.safetensors"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);

  auto from_cache = run_fak("run -m org/tiny --ids 1,2,3 -n 4 --json");
  ASSERT_EQ(from_cache.exit_code, 0) << from_cache.err;
  auto from_dir =
      run_fak("run -m " + data_path("oracle/qwen2-tiny").string() + " --ids 1,2,3 -n 4 --json");
  ASSERT_EQ(from_dir.exit_code, 0) << from_dir.err;
  EXPECT_EQ(nlohmann::json::parse(from_cache.out)["ids"],
            nlohmann::json::parse(from_dir.out)["ids"]);

  // Pulling again fetches nothing new.
  const int cdn_before = hub_.cdn_gets;
  auto again = run_fak("pull org/tiny");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(hub_.cdn_gets, cdn_before);
}

TEST_F(HubPullTest, OneFileWithColon) {
  auto r = run_fak("pull org/tiny:model.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, (repo() / "snapshots" / kCommit / "model.safetensors").string() + "\n");
  EXPECT_FALSE(fs::exists(repo() / "snapshots" / kCommit / "config.json"));
  auto missing = run_fak("pull org/tiny:nope.gguf");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no file 'nope.gguf'"), std::string::npos) << missing.err;
}

TEST_F(HubPullTest, InterruptedDownloadResumesWithRange) {
  hub_.cut_after = 100000;
  auto r = run_fak("pull org/tiny");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(hub_.ranges.size(), 2u);
  EXPECT_EQ(hub_.ranges[0], "");
  EXPECT_EQ(hub_.ranges[1], "bytes=100000-");
  EXPECT_EQ(read_file(blob("model.safetensors")), hub_.files["model.safetensors"].bytes);
  EXPECT_FALSE(fs::exists(blob("model.safetensors").string() + ".incomplete"));
  EXPECT_NE(r.err.find("resuming"), std::string::npos) << r.err;
}

TEST_F(HubPullTest, PartialFileFromAnEarlierRunIsContinued) {
  const std::string& bytes = hub_.files["model.safetensors"].bytes;
  fs::create_directories(repo() / "blobs");
  write_file(blob("model.safetensors").string() + ".incomplete", bytes.substr(0, 4096));
  auto r = run_fak("pull org/tiny");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(hub_.ranges.size(), 1u);
  EXPECT_EQ(hub_.ranges[0], "bytes=4096-");
  EXPECT_EQ(read_file(blob("model.safetensors")), bytes);
}

TEST_F(HubPullTest, CorruptDownloadFailsNamingTheFileAndLeavesNoBlob) {
  hub_.corrupt = true;
  auto r = run_fak("pull org/tiny");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("fak: error: model.safetensors: sha256 mismatch"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(blob("model.safetensors")));
  EXPECT_FALSE(fs::exists(blob("model.safetensors").string() + ".incomplete"));
  EXPECT_FALSE(fs::exists(repo() / "refs" / "main"));  // no half snapshot for -m to find
  auto run = run_fak("run -m org/tiny --ids 1 -n 1");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("fak pull org/tiny"), std::string::npos) << run.err;
}

TEST_F(HubPullTest, GatedRepoNeedsHfToken) {
  hub_.token = "hf_secret";
  auto denied = run_fak("pull org/tiny");
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.err.find("401"), std::string::npos) << denied.err;
  EXPECT_NE(denied.err.find("set HF_TOKEN"), std::string::npos) << denied.err;
  EXPECT_EQ(std::count(denied.err.begin(), denied.err.end(), '\n'), 1) << denied.err;

  ::setenv("HF_TOKEN", "hf_secret", 1);
  auto ok = run_fak("pull org/tiny");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(read_file(blob("model.safetensors")), hub_.files["model.safetensors"].bytes);
}

TEST_F(HubPullTest, MissingRepoIsOneClearLine) {
  auto r = run_fak("pull org/missing");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "fak: error: org/missing: the hub answered 404 (not found): check the name, or set "
            "HF_TOKEN if the repository is private\n");
  EXPECT_FALSE(fs::exists(home_ / "hub" / "models--org--missing"));
}

TEST_F(HubPullTest, UnknownModelNameSuggestsPull) {
  auto r = run_fak("run -m someone/absent --ids 1 -n 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("neither a path nor a model in the Hugging Face cache"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("`fak pull someone/absent`"), std::string::npos) << r.err;
}

// --- a hostile hub (issue 51): names are data, sizes are checked, nothing escapes the cache ---

// A canary outside the cache: a pull that wrote through an unsafe name would create it.
class HostileHubTest : public HubPullTest {
 protected:
  void SetUp() override {
    HubPullTest::SetUp();
    outside_ = temp_dir() / "outside";
    fs::create_directories(outside_);
  }
  void expect_nothing_outside() {
    EXPECT_TRUE(fs::is_empty(outside_)) << "a pull wrote outside the cache";
    EXPECT_FALSE(fs::exists(home_ / "canary"));
    EXPECT_FALSE(fs::exists(home_ / "hub" / "canary"));
  }
  // One error line, the last on stderr, and exit 1 (not an abort's 134), naming `needle`.
  void expect_one_line_error(const CommandResult& r, const std::string& needle) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    const size_t at = r.err.find("fak: error: ");
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("fak: error: ", at + 1), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n', at), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(needle, at), std::string::npos) << r.err;
  }
  fs::path outside_;
};

TEST_F(HostileHubTest, UnsafeNamesInTheFileListAreRefusedBeforeAnyDownload) {
  const std::vector<std::string> names = {"../../../canary",
                                          "../../canary",
                                          "a/../../../../canary",
                                          outside_.string() + "/pwn",
                                          "./config.json",
                                          "sub//config.json",
                                          "sub/",
                                          "evil\x1b[2Jname",
                                          std::string("nul\0x", 5),
                                          "a\\..\\..\\canary",
                                          std::string(300, 'a')};
  for (const auto& name : names) {
    hub_.files.erase(name);
    hub_.files[name] = small_file("planted by the hub\n");
    for (const std::string args :
         {"pull org/tiny", "pull org/tiny --include '*'", "pull org/tiny --include '*/*'",
          "pull org/tiny --include '?*'"}) {
      auto r = run_fak(args);
      SCOPED_TRACE(args + " with '" + name + "'");
      expect_one_line_error(r, "the hub named an unsafe file");
      EXPECT_EQ(hub_.cdn_gets, 0);
    }
    hub_.files.erase(name);
    expect_nothing_outside();
  }
  EXPECT_FALSE(fs::exists(repo() / "blobs"));  // refused before the first file
}

TEST_F(HostileHubTest, UnsafeShardNamesInTheIndexAreRefused) {
  for (const std::string shard :
       {"../../../canary", "/tmp/canary.safetensors", "shards/../../../../canary"}) {
    nlohmann::json index = {{"metadata", nlohmann::json::object()},
                            {"weight_map", {{"model.embed_tokens.weight", shard}}}};
    hub_.files["model.safetensors.index.json"] = small_file(index.dump());
    auto r = run_fak("pull org/tiny");
    SCOPED_TRACE(shard);
    expect_one_line_error(r, "the hub named an unsafe file");
    expect_nothing_outside();
  }
  nlohmann::json not_strings = {{"weight_map", {{"x", 3}}}};
  hub_.files["model.safetensors.index.json"] = small_file(not_strings.dump());
  expect_one_line_error(run_fak("pull org/tiny"), "is not a file");
}

TEST_F(HostileHubTest, UserGivenNamesAndRevisionsAreCheckedToo) {
  expect_one_line_error(run_fak("pull org/tiny:../../canary"), "is not a hub model id");
  expect_one_line_error(run_fak("pull org/tiny --revision ../../../canary"),
                        "is not a revision name");
  expect_nothing_outside();
  // A glob's '*' stays within a folder (FNM_PATHNAME).
  hub_.files["sub/config.json"] = hub_.files["config.json"];
  auto r = run_fak("pull org/tiny --include '*.json'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(repo() / "snapshots" / kCommit / "config.json"));
  EXPECT_FALSE(fs::exists(repo() / "snapshots" / kCommit / "sub"));
}

TEST_F(HostileHubTest, ALinkPlantedInTheSnapshotIsNotFollowed) {
  fs::create_directories(repo() / "snapshots" / kCommit);
  fs::create_directory_symlink(outside_, repo() / "snapshots" / kCommit / "sub");
  hub_.files["sub/config.json"] = hub_.files["config.json"];
  auto r = run_fak("pull org/tiny --include 'sub/*'");
  expect_one_line_error(r, "is a link or a file where fak pull needs a folder");
  expect_nothing_outside();
}

TEST_F(HostileHubTest, MalformedSizesAreOneErrorLineNotAnAbort) {
  const std::vector<std::pair<nlohmann::json, std::string>> sizes = {
      {1e23, "invalid size 9.99"},
      {"123", "invalid size \"123\""},
      {-5, "invalid size -5"},
      {1.5, "invalid size 1.5"},
      {nlohmann::json::array(), "invalid size []"}};
  for (const auto& [size, needle] : sizes) {
    hub_.edit_listing = [size = size](nlohmann::json& listing) {
      listing["siblings"][0]["size"] = size;
    };
    SCOPED_TRACE(size.dump());
    expect_one_line_error(run_fak("pull org/tiny"), needle);
  }
  hub_.edit_listing = [](nlohmann::json& listing) {
    for (auto& s : listing["siblings"])
      if (s.contains("lfs")) s["lfs"]["size"] = "a lot";
  };
  expect_one_line_error(run_fak("pull org/tiny"), "invalid size \"a lot\"");
  hub_.edit_listing = nullptr;
  hub_.extra_resolve_headers = {{"X-Linked-Size", "18446744073709551617"}};
  expect_one_line_error(run_fak("pull org/tiny:model.safetensors"), "invalid size");
  hub_.extra_resolve_headers = {{"X-Linked-Size", "12abc"}};
  expect_one_line_error(run_fak("pull org/tiny:model.safetensors"), "invalid size '12abc'");
}

TEST_F(HostileHubTest, MalformedListingsAreOneErrorLine) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](nlohmann::json& l) { l = nlohmann::json::array(); }, "is not a JSON object"},
      {[](nlohmann::json& l) { l["sha"] = 42; }, "names no commit"},
      {[](nlohmann::json& l) {
         l["siblings"] = {{"a", 1}};
       },
       "siblings) is not an array"},
      {[](nlohmann::json& l) {
         l["siblings"] = {1, 2};
       },
       "without a file name"},
      {[](nlohmann::json& l) { l["siblings"][0]["rfilename"] = 7; }, "without a file name"},
      {[](nlohmann::json& l) { l["siblings"].push_back(l["siblings"][0]); }, "twice"},
      {[](nlohmann::json& l) {
         for (auto& s : l["siblings"])
           if (s.contains("lfs")) s["lfs"]["sha256"] = "../../x";
       },
       "has no sha256"},
  };
  for (const auto& [edit, needle] : edits) {
    hub_.edit_listing = edit;
    SCOPED_TRACE(needle);
    expect_one_line_error(run_fak("pull org/tiny"), needle);
  }
}

TEST_F(HostileHubTest, ADownloadLargerThanTheFreeSpaceIsRefusedBeforeItStarts) {
  // Half a pebibyte announced for the weights: refused against the disk's free space.
  hub_.edit_listing = [](nlohmann::json& listing) {
    for (auto& s : listing["siblings"])
      if (s.contains("lfs")) s["lfs"]["size"] = uint64_t(1) << 49;
  };
  auto r = run_fak("pull org/tiny");
  expect_one_line_error(r, "free");
  EXPECT_NE(r.err.find("512.0 TiB"), std::string::npos) << r.err;
  EXPECT_EQ(hub_.cdn_gets, 0);
  EXPECT_FALSE(fs::exists(blob("model.safetensors").string() + ".incomplete"));
  // The same through the HEAD's size, when the listing understated it.
  hub_.edit_listing = nullptr;
  hub_.extra_resolve_headers = {{"X-Linked-Size", std::to_string(uint64_t(1) << 49)}};
  expect_one_line_error(run_fak("pull org/tiny:model.safetensors"), "free");
  EXPECT_EQ(hub_.cdn_gets, 0);
}

}  // namespace
}  // namespace fak::test
