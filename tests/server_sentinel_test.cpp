// `fak serve --store redis-sentinel://` (issue 31): a Redis primary and replica watched by three
// real redis-sentinel processes on loopback. The primary is SIGKILLed mid-run; the sentinels
// promote the replica, the fak replicas follow them there, and every session acknowledged before
// the failover is served exactly as a single server without a store serves it: calls in between
// fail loudly (503), none answers with older content.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "core/json.h"
#include "http_test_client.h"
#include "server_process.h"
#include "store_processes.h"
#include "store_test_client.h"
#include "test_util.h"

namespace fak::test {
namespace {

using json = fak::ojson;

const std::string kSessions = "/v1/fak/sessions";

ServerSetup setup() {
  ServerSetup s;
  s.ctx = 2048;
  return s;
}

// The call until it stops answering 503 (at most ~30 s: a failover takes a few seconds).
template <typename Call>
HttpReply until_served(Call call) {
  return until(
      call, [](const HttpReply& r) { return r.status == 503; }, 300);
}

}  // namespace

TEST(ServerSentinel, AFailoverIsFollowedAndNothingAcknowledgedIsLost) {
  RedisProcess primary;
  RedisProcess replica("--replicaof 127.0.0.1 " + std::to_string(primary.port()));
  std::vector<std::unique_ptr<SentinelProcess>> sentinels;
  std::string url = "redis-sentinel://";
  for (int i = 0; i < 3; ++i) {
    sentinels.push_back(std::make_unique<SentinelProcess>(primary.port(), 2));
    url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinels.back()->port());
  }
  url += "/fakmain";
  // The replica has caught up before anything is written.
  for (int i = 0; i < 100 && replica.cli("INFO replication").find("master_link_status:up") ==
                                 std::string::npos;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(replica.cli("INFO replication").find("master_link_status:up"), std::string::npos);

  const std::string args = "--parallel 2 --store " + url + " --store-recovery-grace 1000";
  ServerProcess a(args, setup()), b(args, setup()), single("--parallel 2", setup());
  ASSERT_TRUE(a.port() && b.port() && single.port()) << a.log();
  EXPECT_NE(a.log().find("reachable; keys under"), std::string::npos) << a.log();
  for (int port : {a.port(), single.port()}) {
    ASSERT_EQ(post(port, kSessions, json{{"id", "f"}, {"text", "def area(r):\n"}}).status, 201);
    ASSERT_EQ(post(port, kSessions + "/f/generate", json{{"max_tokens", 6}}).status, 200);
  }
  ASSERT_EQ(get(b.port(), kSessions + "/f").status, 200);  // B holds a copy
  for (int port : {a.port(), single.port()})
    ASSERT_EQ(post(port, kSessions + "/f/append", json{{"text", "\ndef volume(r):\n"}}).status,
              200);
  // The write waited for the Redis replica (WAIT, --store-sync-replicas defaults to 1 here).
  EXPECT_NE(replica.cli("--scan --pattern '*s:*:f'").find(":f"), std::string::npos);

  primary.kill();
  const json want = get(single.port(), kSessions + "/f").j();
  for (int port : {b.port(), a.port()}) {
    const HttpReply r = until_served([&] { return get(port, kSessions + "/f"); });
    ASSERT_EQ(r.status, 200) << r.body << "\n" << sentinels[0]->log();
    EXPECT_EQ(r.j(), want) << port;
  }
  EXPECT_EQ(sentinels[0]->primary_port(), replica.port());
  // Writes go to the new primary and continue exactly.
  HttpReply g = until_served([&] {
    return post(b.port(), kSessions + "/f/generate", json{{"max_tokens", 6}});
  });
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(g.j()["ids"],
            post(single.port(), kSessions + "/f/generate", json{{"max_tokens", 6}}).j()["ids"]);
  EXPECT_EQ(get(a.port(), kSessions + "/f").j(), get(single.port(), kSessions + "/f").j());
  ASSERT_EQ(post(a.port(), kSessions, json{{"id", "after"}, {"text", "x = 1\n"}}).status, 201);
  EXPECT_EQ(get(b.port(), kSessions + "/after").status, 200);
}

// A URL without the primary's name, or with a bad port, is refused with one line.
TEST(ServerSentinel, AMalformedSentinelUrlIsRefused) {
  const CommandResult no_name =
      run_fak("serve --port 0 --kv-lazy --no-warmup --store redis-sentinel://127.0.0.1:26379");
  EXPECT_NE(no_name.exit_code, 0);
  EXPECT_NE(no_name.err.find("names the primary"), std::string::npos) << no_name.err;
  const CommandResult bad_port = run_fak(
      "serve --port 0 --kv-lazy --no-warmup --store "
      "redis-sentinel://127.0.0.1:1,127.0.0.1:99999/m");
  EXPECT_NE(bad_port.exit_code, 0);
  EXPECT_NE(bad_port.err.find("port must be 1-65535"), std::string::npos) << bad_port.err;
}

}  // namespace fak::test
