// /v1/fak/ session edge cases (issue 23): a refused call changes nothing (a create refused for its
// content leaves no session, no id, no quota; an append refused leaves the session as it was),
// the context check covers the generation prompt, and the session folder is made again if it is
// removed while the server runs, with a storage error a client can read when it cannot be written.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/json.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"
#include "tokenizer_fixtures.h"

namespace fak::test {
namespace {

class SessionEdges : public TwoSlotServerSuite {
 protected:
  static HttpReply post(const std::string& path, const ojson& body) {
    return post_json(port(), path, body);
  }
  static HttpReply get(const std::string& path) { return get_json(port(), path); }
  static ojson listed() { return get("/v1/fak/sessions").j()["data"]; }
};

TEST_F(SessionEdges, ARefusedCreateLeavesNothing) {
  const int tokenizer_ids = pycoder_tokenizer().vocab_size();
  ASSERT_LT(tokenizer_ids, 8192);  // the embedding is padded beyond the tokenizer
  const ojson before = listed();
  // Ids in the padded rows, a bad message after a good one, a prompt beyond the context.
  const std::vector<ojson> refused = {
      {{"id", "s1"}, {"ids", {5, 6, tokenizer_ids + 3}}},
      {{"id", "s1"},
       {"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "user"}, {"content", 7}}}}},
      {{"id", "s1"}, {"text", std::string(6000, 'x') + " y"}}};
  for (const ojson& body : refused) {
    const HttpReply r = post("/v1/fak/sessions", body);
    EXPECT_EQ(r.status, 400) << body.dump().substr(0, 200) << " -> " << r.body;
    EXPECT_EQ(listed(), before);
    EXPECT_EQ(get("/v1/fak/sessions/s1").status, 404);
    EXPECT_EQ(post("/v1/fak/sessions/s1/generate", ojson{{"max_tokens", 2}}).status, 404);
  }
  // The id was never taken.
  const HttpReply ok = post("/v1/fak/sessions", ojson{{"id", "s1"}, {"ids", {5, 6, 7}}});
  ASSERT_EQ(ok.status, 201) << ok.body;
  EXPECT_EQ(ok.j()["size"], 3);
  EXPECT_EQ(get("/v1/fak/sessions/s1").j()["tokens"], ojson({5, 6, 7}));
}

TEST_F(SessionEdges, ARefusedAppendChangesNothing) {
  const HttpReply made = post("/v1/fak/sessions", ojson{{"text", "def f(x):\n"}});
  ASSERT_EQ(made.status, 201);
  const std::string base = "/v1/fak/sessions/" + made.j()["id"].get<std::string>();
  const ojson before = get(base).j();
  for (const ojson& body :
       {ojson{{"ids", {1, 8190}}},
        ojson{{"messages",
               {{{"role", "user"}, {"content", "one"}}, {{"role", "user"}, {"content", nullptr}}}}},
        ojson{{"text", std::string(6000, 'q') + " z"}}}) {
    EXPECT_EQ(post(base + "/append", body).status, 400) << body.dump().substr(0, 100);
    EXPECT_EQ(get(base).j(), before);
  }
}

// A conversation of 511 tokens fits the 512-token context; its generation prompt does not.
TEST_F(SessionEdges, TheGenerationPromptCountsAgainstTheContext) {
  const Tokenizer& tok = pycoder_tokenizer();
  auto rendered = [&](const std::string& content) {
    return 1 + tok.encode_literal("user\n" + content).size() + 1 + tok.encode("\n").size();
  };
  std::string content;
  while (rendered(content) < 511) content += " q";
  ASSERT_EQ(rendered(content), 511u) << "pick another filler";
  const ojson msgs = {{{"role", "user"}, {"content", content}}};
  const HttpReply made = post("/v1/fak/sessions", ojson::object());
  ASSERT_EQ(made.status, 201);
  const std::string base = "/v1/fak/sessions/" + made.j()["id"].get<std::string>();
  const HttpReply too_long =
      post(base + "/append", ojson{{"messages", msgs}, {"add_generation_prompt", true}});
  EXPECT_EQ(too_long.status, 400) << too_long.body;
  EXPECT_NE(too_long.body.find("context"), std::string::npos) << too_long.body;
  EXPECT_EQ(get(base).j()["size"], 0);
  const HttpReply fits = post(base + "/append", ojson{{"messages", msgs}});
  ASSERT_EQ(fits.status, 200) << fits.body;
  EXPECT_EQ(fits.j()["size"], 511);
  // The same at create.
  const HttpReply create =
      post("/v1/fak/sessions", ojson{{"messages", msgs}, {"add_generation_prompt", true}});
  EXPECT_EQ(create.status, 400) << create.body;
}

TEST_F(SessionEdges, ARemovedSessionFolderIsMadeAgain) {
  const HttpReply made = post("/v1/fak/sessions", ojson{{"text", "import os\n"}});
  ASSERT_EQ(made.status, 201);
  const std::string base = "/v1/fak/sessions/" + made.j()["id"].get<std::string>();
  ASSERT_EQ(post(base + "/save", ojson{{"name", "first"}}).status, 200);
  std::filesystem::remove_all(server_->dir() / "sessions");
  const HttpReply saved = post(base + "/save", ojson{{"name", "again"}});
  ASSERT_EQ(saved.status, 200) << saved.body;
  const HttpReply loaded = post("/v1/fak/sessions/load", ojson{{"name", "again"}});
  ASSERT_EQ(loaded.status, 201) << loaded.body;
  EXPECT_EQ(get("/v1/fak/sessions/" + loaded.j()["id"].get<std::string>()).j()["tokens"],
            get(base).j()["tokens"]);
  EXPECT_EQ(post("/v1/fak/sessions/load", ojson{{"name", "first"}}).status, 404);
}

// A session folder the server may not write: a storage error that says so, naming the flag and
// the cause but not the server's paths. (As root, the server runs as nobody to be refused.)
TEST(SessionFolder, ReadOnlyGivesAClearStorageError) {
  ServerSetup setup;
  const bool root = ::geteuid() == 0;
  if (root) setup.wrapper = "setpriv --reuid=65534 --regid=65534 --clear-groups";
  setup.before_start = [root](const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir / "sessions");
    ::chmod(dir.c_str(), 0755);
    // The server's own folder (another user's is refused at start: server_cache_dir_test), but
    // one it may not write.
    if (root && ::chown((dir / "sessions").c_str(), 65534, 65534) != 0) ADD_FAILURE();
    ::chmod((dir / "sessions").c_str(), 0555);
  };
  ServerProcess server("", setup);
  ASSERT_NE(server.port(), 0) << server.log();
  const HttpReply made =
      post_json(server.port(), "/v1/fak/sessions", ojson{{"text", "def main():\n"}});
  ASSERT_EQ(made.status, 201) << made.body;
  const HttpReply saved =
      post_json(server.port(), "/v1/fak/sessions/" + made.j()["id"].get<std::string>() + "/save",
                ojson{{"name", "snap"}});
  EXPECT_EQ(saved.status, 500) << saved.body;
  EXPECT_EQ(saved.j()["error"]["code"], "storage_error") << saved.body;
  const std::string message = saved.j()["error"]["message"];
  EXPECT_NE(message.find("--session-dir"), std::string::npos) << message;
  EXPECT_TRUE(message.find("Permission denied") != std::string::npos ||
              message.find("Read-only") != std::string::npos)
      << message;
  EXPECT_EQ(message.find(server.dir().string()), std::string::npos) << message;
  EXPECT_TRUE(server.alive());
}

}  // namespace
}  // namespace fak::test
