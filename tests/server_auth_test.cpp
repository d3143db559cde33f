// API keys that cannot fail open, and a model list that shows nothing of the server's disk
// (issue 23): a key variable holding only separators stops the server naming the variable, keys
// are trimmed and counted at startup, and /v1/models has no path.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <set>
#include <string>

#include "core/error.h"
#include "http_test_client.h"
#include "server/server.h"
#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

TEST(ApiKeys, SeparatorsAloneRefuseToStartNamingTheVariable) {
  for (const char* value : {",", ",,,", " , ", "\t", ""}) {
    ::setenv("FAK_TEST_EMPTY_KEYS", value, 1);
    // A server that starts anyway (the bug) is stopped after 20 s: a failure, not a hang.
    const auto err_path = temp_dir() / "stderr";
    const int status = std::system(("timeout 20 " + std::string(FAK_BINARY) +
                                    " serve --port 0 --api-key-env FAK_TEST_EMPTY_KEYS 2>" +
                                    err_path.string() + " </dev/null")
                                       .c_str());
    const CommandResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128, "", read_file(err_path)};
    EXPECT_NE(r.exit_code, 0) << "value '" << value << "': " << r.err;
    EXPECT_NE(r.err.find("FAK_TEST_EMPTY_KEYS"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;
  }
  EXPECT_THROW(server::parse_api_keys(",,,", "V"), Error);
  EXPECT_EQ(server::parse_api_keys(" kA , kB,,kC\n", "V"),
            (std::set<std::string>{"kA", "kB", "kC"}));
}

TEST(ApiKeys, KeysAreTrimmedCountedAndEachWorks) {
  ServerSetup setup;
  setup.api_keys = "kA, kB ,\tkC";
  ServerProcess server("", setup);
  ASSERT_NE(server.port(), 0);
  EXPECT_NE(server.log().find("3 API keys loaded from FAK_TEST_KEYS"), std::string::npos)
      << server.log();
  for (const char* key : {"kA", "kB", "kC"})
    EXPECT_EQ(get_json(server.port(), "/v1/models", bearer(key)).status, 200) << key;
  EXPECT_EQ(get_json(server.port(), "/v1/models", bearer(" kB")).status, 401);
  EXPECT_EQ(get_json(server.port(), "/v1/models", {}).status, 401);
}

TEST(ModelsRoute, ShowsNoPathOfTheServer) {
  ServerProcess server("");
  ASSERT_NE(server.port(), 0);
  const std::string model_dir = source_path("models/pycoder-6m").string();
  for (const char* path : {"/v1/models", "/v1/models/pycoder-6m"}) {
    const HttpReply r = get_json(server.port(), path);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body.find(model_dir), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find("\"path\""), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find('/'), std::string::npos) << r.body;  // no path of any kind
  }
}

}  // namespace
}  // namespace fak::test
