// `fak serve --cache-dir` end to end: the real binary is stopped with SIGTERM and started again on
// the same directory, and a long prompt cached before the restart is cached after it, with the
// same reply (and log-probabilities) as its cold prefill. A damaged file is skipped with a warning,
// one tenant never gets another's saved prefix, a key taken away takes its files with it, no key
// is written in clear, a full disk at the stop is a warning and two servers never share a folder.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

using json = nlohmann::json;

const char* kArgs = "--parallel 2 --cache-dir {dir}/cache";

json post(const ServerProcess& s, const json& body, const std::string& key = "key-a") {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(120, 0);
  c.set_bearer_token_auth(key.c_str());
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r) << "no reply";
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body, nullptr, false);
}

// An agent's turn under a system prompt of ~1,500 tokens, greedy, with log-probabilities: two
// replies are equal only if the logits they came from are.
json agent_turn(const std::string& user = "write tool_40") {
  std::string system = "You are a coding agent. These are the tools of this repository:\n";
  for (int i = 0; i < 40; ++i)
    system += "def tool_" + std::to_string(i) + "(path, mode='r'):\n    \"\"\"Open " +
              std::to_string(i) + " and count.\"\"\"\n    return len(open(path, mode).read()) + " +
              std::to_string(i) + "\n";
  return {{"model", "pycoder-6m"},
          {"max_tokens", 12},
          {"temperature", 0},
          {"logprobs", true},
          {"top_logprobs", 3},
          {"messages",
           {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}}}};
}

int cached(const json& reply) {
  return reply["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
}

ServerSetup setup(const std::string& keys = "key-a,key-b") {
  ServerSetup s;
  s.ctx = 4096;
  s.api_keys = keys;
  return s;
}

std::vector<std::filesystem::path> cache_files(const ServerProcess& s) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(s.dir() / "cache"))
    if (e.path().extension() == ".fakprefix") out.push_back(e.path());
  return out;
}

}  // namespace

TEST(ServerCacheDir, ARestartKeepsTheCachedPrefixAndTheReplies) {
  ServerProcess server(kArgs, setup());
  ASSERT_NE(server.port(), 0) << server.log();
  const json cold = post(server, agent_turn());
  EXPECT_EQ(cached(cold), 0);
  const int prompt = cold["usage"]["prompt_tokens"].get<int>();
  ASSERT_GT(prompt, 1000);
  const json warm = post(server, agent_turn());
  const int hit = cached(warm);
  EXPECT_GE(hit, prompt - 32) << "all but the last block";
  EXPECT_EQ(warm["choices"], cold["choices"]);

  EXPECT_EQ(server.stop(), 0) << server.log();
  std::string log = server.log();
  EXPECT_NE(log.find("prefix cache: saved "), std::string::npos) << log;
  ASSERT_EQ(cache_files(server).size(), 1u);

  server.restart(kArgs, setup());
  ASSERT_NE(server.port(), 0) << server.log();
  log = server.log();
  EXPECT_NE(log.find("prefix cache: reloaded "), std::string::npos) << log;
  EXPECT_EQ(log.find("warning"), std::string::npos) << log;
  const json after = post(server, agent_turn());
  EXPECT_EQ(cached(after), hit) << "the same prefix as before the restart";
  EXPECT_EQ(after["choices"], cold["choices"]) << "bit-identical to the cold prefill";
  // Another tenant never starts from it.
  const json other = post(server, agent_turn(), "key-b");
  EXPECT_EQ(cached(other), 0);
  EXPECT_EQ(other["choices"], cold["choices"]);
  // A prompt that reads on past the reloaded prefix gets the cold reply too (a cache_salt makes a
  // partition with nothing cached).
  const json next = post(server, agent_turn("write tool_41"));
  EXPECT_GE(cached(next), 1000);
  json salted = agent_turn("write tool_41");
  salted["cache_salt"] = "fresh";
  const json next_cold = post(server, salted);
  EXPECT_EQ(cached(next_cold), 0);
  EXPECT_EQ(next["choices"], next_cold["choices"]);
}

TEST(ServerCacheDir, ADamagedFileIsSkippedWithAWarning) {
  ServerProcess server(kArgs, setup());
  ASSERT_NE(server.port(), 0) << server.log();
  const json cold = post(server, agent_turn());
  ASSERT_EQ(server.stop(), 0);
  const auto files = cache_files(server);
  ASSERT_EQ(files.size(), 1u);
  std::string bytes = read_file(files[0]);
  bytes[bytes.size() / 2] ^= 0x10;
  write_file(files[0], bytes);

  server.restart(kArgs, setup());
  ASSERT_NE(server.port(), 0) << server.log();
  const std::string log = server.log();
  EXPECT_NE(log.find("fak serve: warning: prefix cache file " + files[0].string() +
                     " is corrupted or truncated (checksum mismatch); skipped\n"),
            std::string::npos)
      << log;
  const json after = post(server, agent_turn());
  EXPECT_EQ(cached(after), 0);
  EXPECT_EQ(after["choices"], cold["choices"]);
  EXPECT_TRUE(server.alive());
}

TEST(ServerCacheDir, KeysTakenAwayTakeTheirFilesAndNoKeyIsOnDisk) {
  ServerProcess server(kArgs, setup());
  ASSERT_NE(server.port(), 0) << server.log();
  post(server, agent_turn(), "key-a");
  post(server, agent_turn("write tool_50"), "key-b");
  ASSERT_EQ(server.stop(), 0);
  ASSERT_EQ(cache_files(server).size(), 2u);
  for (const auto& f : cache_files(server)) {
    const std::string bytes = read_file(f);
    EXPECT_EQ(bytes.find("key-a"), std::string::npos) << f;
    EXPECT_EQ(bytes.find("key-b"), std::string::npos) << f;
  }

  server.restart(kArgs, setup("key-b"));
  ASSERT_NE(server.port(), 0) << server.log();
  EXPECT_NE(server.log().find("ignored 1 file of API keys no longer configured"), std::string::npos)
      << server.log();
  EXPECT_GT(cached(post(server, agent_turn("write tool_50"), "key-b")), 1000);
  ASSERT_EQ(server.stop(), 0);
  EXPECT_EQ(cache_files(server).size(), 1u) << "key-a's file is gone";

  server.restart(kArgs, setup());
  EXPECT_EQ(cached(post(server, agent_turn(), "key-a")), 0);
}

TEST(ServerCacheDir, AFullDiskAtTheStopIsAWarning) {
  ServerSetup s = setup();
  s.shell_prefix = "ulimit -f 40;";  // writes past 40 blocks fail (EFBIG), as on a full disk
  ServerProcess server(kArgs, s);
  ASSERT_NE(server.port(), 0) << server.log();
  post(server, agent_turn());
  EXPECT_EQ(server.stop(), 0) << server.log();
  const std::string log = server.log();
  EXPECT_NE(log.find("fak serve: warning: cannot write "), std::string::npos) << log;
  EXPECT_NE(log.find("; not saved"), std::string::npos) << log;
  EXPECT_NE(log.find("fak serve: stopped"), std::string::npos) << log;
  for (const auto& e : std::filesystem::recursive_directory_iterator(server.dir() / "cache"))
    EXPECT_TRUE(e.is_directory() || e.path().filename() == "lock" || e.path().filename() == "key")
        << "left behind: " << e.path();
}

// A generation cut short by the stop still leaves what it read in the cache: the client's retry
// after the restart starts from it.
TEST(ServerCacheDir, AGenerationCutShortByTheStopIsSavedToo) {
  ServerProcess server(kArgs, setup());
  ASSERT_NE(server.port(), 0) << server.log();
  json long_reply = agent_turn();
  long_reply["max_tokens"] = 3000;  // clamped to the context: seconds of decoding
  long_reply["ignore_eos"] = true;
  long_reply["stream"] = true;
  std::atomic<bool> decoding{false};
  std::thread client([&] {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(120, 0);
    c.set_bearer_token_auth("key-a");
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = long_reply.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (std::string(data, n).find("\"token\"") != std::string::npos) decoding = true;
      return true;
    };
    c.send(req);
  });
  for (int i = 0; i < 6000 && !decoding; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(decoding);
  EXPECT_EQ(server.stop(), 0) << server.log();
  client.join();
  server.restart(kArgs, setup());
  const json after = post(server, agent_turn());
  EXPECT_GE(cached(after), after["usage"]["prompt_tokens"].get<int>() - 32) << server.log();
}

// Loading a model with --quant runs OpenMP threads before the server blocks its stop signals: a
// SIGTERM handed to one of them must still stop the server cleanly (it used to end the process
// at once, saving nothing).
TEST(ServerCacheDir, SigtermAfterAThreadedLoadStillSaves) {
  ServerSetup s = setup();
  s.threads = 2;
  ServerProcess server(std::string(kArgs) + " --quant q8_0", s);
  ASSERT_NE(server.port(), 0) << server.log();
  post(server, agent_turn());
  EXPECT_EQ(server.stop(), 0) << server.log();
  const std::string log = server.log();
  EXPECT_NE(log.find("prefix cache: saved "), std::string::npos) << log;
  EXPECT_NE(log.find("fak serve: stopped"), std::string::npos) << log;
  EXPECT_EQ(cache_files(server).size(), 1u);
}

TEST(ServerCacheDir, TwoServersNeverShareAFolder) {
  ServerProcess server(kArgs, setup());
  ASSERT_NE(server.port(), 0) << server.log();
  const CommandResult second =
      run_fak("serve --port 0 -t 1 --cache-dir " + (server.dir() / "cache").string());
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("is in use by another fak serve"), std::string::npos) << second.err;
}

// Issue 51: a --cache-dir another user made (or can write) is refused at start, naming its owner
// or mode, and a prefix cache file planted in a server's folder with a valid checksum (here: one
// written by another server, with its own key) is not served.
TEST(ServerCacheDir, AFolderAnotherUserOwnsOrCanWriteIsRefused) {
  for (const auto& [mode, uid, needle] : std::vector<std::tuple<mode_t, uid_t, std::string>>{
           {0700, 65534, "belongs to uid 65534, not to this user"},
           {0777, ::geteuid(), "is writable by others (mode 0777)"},
           {0770, ::geteuid(), "is writable by its group (mode 0770)"}}) {
    if (uid != ::geteuid() && ::geteuid() != 0) continue;  // only root can give a folder away
    const auto dir = temp_dir() / ("cache-" + std::to_string(mode));
    std::filesystem::create_directories(dir);
    ::chmod(dir.c_str(), mode);
    ASSERT_EQ(::chown(dir.c_str(), uid, uid), 0);
    for (const std::string flag : {"--cache-dir", "--session-dir"}) {
      const CommandResult r = run_fak("serve --port 0 -t 1 " + flag + " " + dir.string());
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_NE(r.err.find(flag + " " + dir.string()), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
      // Nothing of the tenants was written there.
      EXPECT_TRUE(std::filesystem::is_empty(dir));
    }
  }
}

TEST(ServerCacheDir, AFileWrittenElsewhereIsNotServed) {
  ServerProcess other(kArgs, setup()), victim(kArgs, setup());
  ASSERT_NE(other.port(), 0);
  ASSERT_NE(victim.port(), 0);
  post(other, agent_turn());
  ASSERT_EQ(other.stop(), 0);
  ASSERT_EQ(victim.stop(), 0);
  const auto planted = cache_files(other);
  ASSERT_EQ(planted.size(), 1u);
  // Into the victim's folder, under its own name: a valid checksum, KV rows of the attacker's
  // choosing (here the same ones: only the key tells them apart).
  const auto folder = planted[0].parent_path().filename();
  std::filesystem::copy_file(planted[0], victim.dir() / "cache" / folder / planted[0].filename());
  victim.restart(kArgs, setup());
  ASSERT_NE(victim.port(), 0) << victim.log();
  EXPECT_NE(victim.log().find("not trusted; skipped"), std::string::npos) << victim.log();
  EXPECT_EQ(cached(post(victim, agent_turn())), 0);
}

}  // namespace fak::test
