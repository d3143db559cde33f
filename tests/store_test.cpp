// The store under `fak serve --store`, below the server: the Redis URL, the pool's behaviour when
// Redis goes away, stalls and comes back (against a real redis-server), the prefix cache records
// (the prefix cache file format in memory), and the shared blocks themselves: what one "replica"
// publishes another loads bit-identical to computing it, dense and hybrid; a damaged or foreign
// record is skipped with one log line; partitions never meet.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ops/attention_kernels.h"
#include "ops/matmul_kernels.h"
#include "runtime/prefix_cache.h"
#include "runtime/prefix_record.h"
#include "store/block_store.h"
#include "store/redis_client.h"
#include "store/session_records.h"
#include "store/store_keys.h"
#include "store_processes.h"
#include "test_util.h"

namespace fak {

using test::bit_equal;
using test::cat;
using test::joined;
using test::kv_bytes;
using test::random_ids;

namespace {

std::shared_ptr<KvCache> make_cache(const Model& m) {
  return std::make_shared<KvCache>(m.n_attention_layers(), m.config().n_kv_heads,
                                   m.config().head_dim, KvCacheOptions{.block_size = 16});
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Session records on a real redis of their own, over the bundled model's block store.
struct RecordsRig {
  std::shared_ptr<const Model> model =
      Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  std::shared_ptr<KvCache> cache = make_cache(*model);
  test::RedisProcess redis;
  store::RedisPool pool{store::parse_redis_url(redis.url()), store::RedisPoolOptions{}, nullptr};
  store::StoreMetrics metrics;
  store::BlockStore blocks{pool, model, cache, metrics, nullptr};
  store::SessionRecords records{blocks, blocks.ns(), /*grace_ms=*/0};
};

}  // namespace

TEST(RedisUrl, AcceptsTheFormsRedisCliDoes) {
  using store::parse_redis_url;
  auto u = parse_redis_url("redis://10.0.0.5:6380/2");
  EXPECT_EQ(u.host, "10.0.0.5");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 2);
  EXPECT_EQ(u.shown, "redis://10.0.0.5:6380/2");
  u = parse_redis_url("redis://fak:s%40cret@cache.internal:7000");
  EXPECT_EQ(u.user, "fak");
  EXPECT_EQ(u.password, "s@cret");
  EXPECT_EQ(u.shown, "redis://fak:***@cache.internal:7000") << "never the password";
  u = parse_redis_url("redis://onlypass@localhost");
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "onlypass");
  EXPECT_EQ(u.port, 6379);
  u = parse_redis_url("redis://[::1]:6390");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 6390);
}

TEST(RedisUrl, RefusesWhatItCannotServeNamingTheFlag) {
  using store::parse_redis_url;
  const std::string tls = message_of([] { parse_redis_url("rediss://h:6380"); });
  EXPECT_NE(tls.find("--store rediss://"), std::string::npos) << tls;
  EXPECT_NE(tls.find("hiredis 0.14, which has no TLS"), std::string::npos) << tls;
  for (const char* bad : {"http://h:1", "redis://", "redis://h:0", "redis://h:99999",
                          "redis://h:12x", "redis://h:1/x", "redis://u:%4@h"}) {
    const std::string m = message_of([&] { parse_redis_url(bad); });
    EXPECT_EQ(m.rfind("--store", 0), 0u) << bad << " -> " << m;
  }
}

// Down: one log line, calls skipped at once during the backoff, none of them slow; back: one line,
// and calls go through again.
TEST(RedisPool, ADownStoreIsLoggedOnceSkippedAndRetried) {
  test::RedisProcess redis;
  std::vector<std::string> lines;
  std::mutex mu;
  store::RedisPoolOptions o;
  o.backoff_min = std::chrono::milliseconds(200);
  o.backoff_max = std::chrono::milliseconds(400);
  store::RedisPool pool(store::parse_redis_url(redis.url()), o, [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(l);
  });
  std::vector<store::RedisReply> r;
  ASSERT_TRUE(pool.run([&](store::RedisConnection& c) {
    r = c.pipeline({{"SET", "k", std::string("v\0w", 3)}, {"GET", "k"}, {"GET", "nothing"}});
  }));
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1].str, std::string("v\0w", 3)) << "binary safe";
  EXPECT_TRUE(r[2].nil());
  EXPECT_TRUE(pool.up());

  redis.stop();
  int called = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i)
    EXPECT_FALSE(pool.run([&](store::RedisConnection& c) {
      ++called;
      c.command({"PING"});
    }));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  // The first call failed on a connection kept idle (Redis is gone since), so it was tried once
  // more on a new one; the rest were skipped during the backoff.
  EXPECT_EQ(called, 2);
  EXPECT_FALSE(pool.up());
  ASSERT_EQ(lines.size(), 1u) << joined(lines);
  EXPECT_NE(lines[0].find("warning: store redis://127.0.0.1:"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("unreachable"), std::string::npos) << lines[0];

  redis.start();
  bool back = false;
  for (int i = 0; i < 50 && !back; ++i) {
    back = pool.run([&](store::RedisConnection& c) { r = {c.command({"GET", "k"})}; });
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(back);
  EXPECT_EQ(r[0].str, std::string("v\0w", 3)) << "the append-only file kept it";
  EXPECT_EQ(pool.recoveries(), 1u);
  ASSERT_EQ(lines.size(), 2u) << joined(lines);
  EXPECT_NE(lines[1].find("reachable again"), std::string::npos) << lines[1];
}

// The client's own reply parser: every RESP type, nested arrays, binary bulk strings of every
// size (across the socket reads, into a BulkArena from 64 KiB), and the pipeline after them intact.
TEST(RedisConnection, ParsesEveryReplyTypeAndLargeBulksIntoAnArena) {
  test::RedisProcess redis;
  store::RedisConnection c(store::parse_redis_url(redis.url()), std::chrono::milliseconds(2000));
  std::vector<std::string> values;
  for (size_t n : {size_t(0), size_t(1), size_t(65534), size_t(65536), size_t(3) << 20}) {
    std::string v(n, '\0');
    for (size_t i = 0; i < n; ++i) v[i] = char((i * 131 + n) % 251);
    if (n > 2) v[n / 2] = '\r', v[n / 2 + 1] = '\n';
    values.push_back(v);
  }
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(c.command({"SET", "v" + std::to_string(i), values[i]}).str, "OK");
  store::BulkArena arena(size_t(4) << 20);
  std::vector<store::RedisArgs> cmds;
  const std::vector<std::string> keys = {"v0", "v1", "v2", "v3", "v4"};
  for (const auto& k : keys) cmds.push_back({"GET", k});
  cmds.push_back({"GET", "missing"});
  cmds.push_back({"INCRBY", "n", "-7"});
  cmds.push_back({"LPUSH", "list", "a"});
  cmds.push_back({"EVAL", "return {1, 'two', {3, false}, redis.error_reply('no')}", "0"});
  cmds.push_back({"NOSUCHCOMMAND"});
  cmds.push_back({"PING"});
  auto r = c.pipeline(cmds, &arena);
  ASSERT_EQ(r.size(), cmds.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(r[i].type, store::RedisReply::Type::String) << i;
    EXPECT_TRUE(r[i].text() == values[i]) << i;
    EXPECT_EQ(bool(r[i].owner), values[i].size() >= 65534) << i << " in the arena from 64 KiB";
  }
  EXPECT_TRUE(r[5].nil());
  EXPECT_EQ(r[6].integer, -7);
  EXPECT_EQ(r[7].type, store::RedisReply::Type::Integer);
  ASSERT_EQ(r[8].type, store::RedisReply::Type::Array);
  ASSERT_EQ(r[8].elements.size(), 4u);
  EXPECT_EQ(r[8].elements[1].str, "two");
  ASSERT_EQ(r[8].elements[2].elements.size(), 2u);
  EXPECT_TRUE(r[8].elements[2].elements[1].nil());
  EXPECT_TRUE(r[8].elements[3].error());
  EXPECT_TRUE(r[9].error());
  EXPECT_EQ(r[10].str, "PONG");
  // Without an arena every bulk is a std::string; the big one still reads whole.
  r = c.pipeline({{"GET", "v4"}, {"PING"}});
  EXPECT_FALSE(r[0].owner);
  EXPECT_TRUE(r[0].str == values[4]);
  EXPECT_EQ(r[1].str, "PONG");
}

// A store that accepts connections but does not answer (stopped, swapping): the call fails after
// the timeout instead of hanging the replica.
TEST(RedisPool, AStalledStoreTimesOutQuickly) {
  test::RedisProcess redis;
  store::RedisPoolOptions o;
  o.timeout = std::chrono::milliseconds(150);
  store::RedisPool pool(store::parse_redis_url(redis.url()), o, nullptr);
  ASSERT_TRUE(pool.run([](store::RedisConnection& c) { c.command({"PING"}); }));
  redis.pause();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(pool.run([](store::RedisConnection& c) { c.command({"PING"}); }));
  const auto took = std::chrono::steady_clock::now() - t0;
  redis.resume();
  EXPECT_GE(took, std::chrono::milliseconds(100));
  EXPECT_LT(took, std::chrono::milliseconds(1000));
}

// A version-only placeholder put back while a call on that version ran (the background check of
// the replica running it, after the key was evicted): the call's write, made on that very version,
// commits over it; a write made on any other version finds a loss; a newer record is not undone.
TEST(SessionRecords, AWriteOnThePlaceholderOfItsOwnVersionCommits) {
  using Outcome = store::SessionWrite::Outcome;
  using State = store::SessionRecord::State;
  RecordsRig rig;
  test::RedisProcess& redis = rig.redis;
  store::SessionRecords& records = rig.records;
  const std::string meta = R"({"v":1})";
  const std::string w1 = store::SessionRecords::new_wid();
  auto w = records.write("t", "s", {}, w1, meta, "", 0);
  ASSERT_TRUE(w);
  ASSERT_EQ(w->outcome, Outcome::Committed);
  const store::SessionVersion v1{w->seq, w1};
  const std::string key = redis.cli("--scan --pattern '*s:t:s'");  // evicted, as allkeys-lru would
  ASSERT_NE(key.find("s:t:s"), std::string::npos) << key;
  redis.cli("DEL " + key.substr(0, key.find('\n')));
  ASSERT_EQ(records.check("t", "s")->state, State::Missing);
  w = records.restore("t", "s", v1, store::SessionRecords::RestoreKind::Ghost, "", "");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->outcome, Outcome::Committed);
  auto rec = records.check("t", "s");
  ASSERT_EQ(rec->state, State::Pending);
  EXPECT_EQ(rec->version, v1);
  // Made on another version: the placeholder is a version nobody can fill in from that.
  EXPECT_EQ(
      records.write("t", "s", {v1.seq, "other"}, store::SessionRecords::new_wid(), meta, "", 0)
          ->outcome,
      Outcome::Lost);
  // Made on the placeholder's version: committed, live, the next seq.
  const std::string w2 = store::SessionRecords::new_wid();
  w = records.write("t", "s", v1, w2, R"({"v":2})", "", 0);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->outcome, Outcome::Committed);
  rec = records.check("t", "s", /*with_content=*/true);
  EXPECT_EQ(rec->state, State::Live);
  EXPECT_EQ(rec->version, (store::SessionVersion{v1.seq + 1, w2}));
  EXPECT_EQ(rec->meta, R"({"v":2})");
  // A late placeholder of the older version does not undo it.
  w = records.restore("t", "s", v1, store::SessionRecords::RestoreKind::Ghost, "", "");
  EXPECT_EQ(w->outcome, Outcome::Committed);
  EXPECT_EQ(records.check("t", "s")->version, (store::SessionVersion{v1.seq + 1, w2}));
}

// A delete on a replica that does not know a session whose record was evicted while the tenant's
// id set still names it (found by tests/fault under load: a 404 for a session that was made) is
// told the session is listed, with nothing written, not that there is none; an id never made is
// absent. The delete after the placeholder the replica then puts back (nobody filled it in) goes
// above the newest commit the version witness names, so the replica holding that version finds
// the session deleted, not behind it (which would mark an acknowledged delete lost).
TEST(SessionRecords, ADeleteOfAnEvictedRecordItsIdSetNamesIsNoAbsence) {
  using Outcome = store::SessionWrite::Outcome;
  using State = store::SessionRecord::State;
  RecordsRig rig;
  test::RedisProcess& redis = rig.redis;
  store::SessionRecords& records = rig.records;
  const std::string w1 = store::SessionRecords::new_wid(), w2 = store::SessionRecords::new_wid();
  ASSERT_EQ(records.write("t", "s", {}, w1, R"({"v":1})", "", 0)->outcome, Outcome::Committed);
  auto w = records.write("t", "s", {1, w1}, w2, R"({"v":2})", "", 0);
  ASSERT_EQ(w->outcome, Outcome::Committed);
  const store::SessionVersion v2{w->seq, w2};
  const std::string key = redis.cli("--scan --pattern '*s:t:s'");  // evicted, as allkeys-lru would
  ASSERT_NE(key.find("s:t:s"), std::string::npos) << key;
  redis.cli("DEL " + key.substr(0, key.find('\n')));
  w = records.remove("t", "s", /*known_seq=*/0, store::SessionRecords::new_wid());
  ASSERT_TRUE(w);
  EXPECT_EQ(w->outcome, Outcome::Listed);
  auto rec = records.check("t", "s");
  EXPECT_EQ(rec->state, State::Missing);
  EXPECT_TRUE(rec->listed);
  EXPECT_EQ(records.remove("t", "never", 0, store::SessionRecords::new_wid())->outcome,
            Outcome::Absent);
  // The placeholder of no version the deleting replica puts back; its window (0 ms here) passes
  // with nobody filling it in.
  w = records.restore("t", "s", {}, store::SessionRecords::RestoreKind::Ghost, "", "");
  ASSERT_EQ(w->outcome, Outcome::Committed);
  ASSERT_EQ(records.check("t", "s")->state, State::Pending);
  const std::string tomb = store::SessionRecords::new_wid();
  w = records.remove("t", "s", 0, tomb);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->outcome, Outcome::Committed);
  EXPECT_GT(w->seq, v2.seq);
  rec = records.check("t", "s");
  EXPECT_EQ(rec->state, State::Deleted);
  EXPECT_EQ(rec->version, (store::SessionVersion{w->seq, tomb}));
  EXPECT_FALSE(rec->listed);
  // The replica that held v2 puts it back: the tombstone is newer, nothing is marked lost.
  EXPECT_EQ(
      records.restore("t", "s", v2, store::SessionRecords::RestoreKind::Ghost, "", "")->outcome,
      Outcome::Committed);
  EXPECT_EQ(records.check("t", "s")->state, State::Deleted);
}

TEST(StoreKeys, AddressTheLayoutThePartitionAndEveryTokenBefore) {
  auto model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  auto cache = make_cache(*model);
  const std::string ns = store::store_namespace(*model, *cache);
  EXPECT_EQ(ns.rfind("fak:" + model->identity() + ".f32.b16.", 0), 0u) << ns;
  // Servers whose attention rounds otherwise (AMX-BF16 tiles or not) never share records.
  EXPECT_EQ(ns.find(".amxattn") != std::string::npos, kernels::amx_attention_enabled()) << ns;
  kernels::set_amx_enabled(false);
  EXPECT_EQ(store::store_namespace(*model, *cache).find(".amxattn"), std::string::npos);
  kernels::set_amx_enabled(true);
  // Nor do servers whose bf16 products are the tile unit's and vdpbf16ps' (ops/matmul.h).
  if (bf16_activations_available()) {
    set_bf16_activations(true);
    const std::string bf16 = store::store_namespace(*model, *cache);
    EXPECT_NE(bf16.find(".bf16act"), std::string::npos) << bf16;
    EXPECT_EQ(bf16.find(".bf16act.amx") != std::string::npos, kernels::cpu_has_bf16_amx()) << bf16;
    kernels::set_amx_enabled(false);
    EXPECT_EQ(store::store_namespace(*model, *cache).find(".bf16act.amx"), std::string::npos);
    kernels::set_amx_enabled(true);
    set_bf16_activations(false);
  }
  auto a = random_ids(64, 100, 1);
  auto k = store::block_keys(ns, "p", a, 16, 4);
  ASSERT_EQ(k.size(), 4u);
  EXPECT_EQ(k[0].rfind(ns + "b:", 0), 0u);
  // A longer prompt with the same head has the same keys for the head's blocks.
  auto longer = store::block_keys(ns, "p", cat(a, random_ids(16, 100, 2)), 16, 5);
  EXPECT_EQ(std::vector<std::string>(longer.begin(), longer.begin() + 4), k);
  // Another partition, another token anywhere before, another namespace: other keys.
  EXPECT_NE(store::block_keys(ns, "q", a, 16, 1)[0], k[0]);
  auto b = a;
  b[3] ^= 1;
  const auto kb = store::block_keys(ns, "p", b, 16, 4);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(kb[i], k[i]) << i;
  EXPECT_NE(store::block_keys("fak:other:", "p", a, 16, 1)[0], k[0]);
}

TEST(PrefixRecord, RoundTripsBitIdenticalAndRefusesWhatIsWrong) {
  auto model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  auto cache = make_cache(*model);
  const auto prompt = random_ids(48, model->config().vocab, 3);
  Session s(model, cache);
  s.append(prompt);
  std::vector<PrefixRecordBlock> chain(2);
  for (size_t i = 0; i < 2; ++i) {
    chain[i].tokens.assign(prompt.begin() + long(i + 1) * 16, prompt.begin() + long(i + 2) * 16);
    chain[i].block = s.blocks()[i + 1];
  }
  const std::string bytes = write_prefix_record(*model, *cache, "part", 1, chain, {{"key", "k1"}});
  const PrefixRecord r = PrefixRecord::parse(bytes, *model, *cache, "record k1");
  EXPECT_EQ(r.partition(), "part");
  EXPECT_EQ(r.depth(), 1);
  EXPECT_EQ(r.header()["key"], "k1");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r.tokens(1), chain[1].tokens);
  // Loaded into another cache: the same bytes as computed.
  auto other = make_cache(*model);
  Session again(model, other);
  again.append(prompt);
  const int32_t b = r.load_block(0, *other);
  std::vector<uint8_t> x(16 * other->row_bytes()), y(x.size());
  for (int l = 0; l < other->n_layers(); ++l)
    for (int p = 0; p < 3; ++p) {
      other->read_rows(b, l, KvPlane(p), 16, x.data());
      other->read_rows(again.blocks()[1], l, KvPlane(p), 16, y.data());
      EXPECT_EQ(x, y) << l << " " << p;
    }
  other->release(b);

  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x01;
  EXPECT_EQ(message_of([&] { PrefixRecord::parse(flipped, *model, *cache, "record k1"); }),
            "record k1 is corrupted or truncated (checksum mismatch)");
  EXPECT_NE(message_of([&] {
              PrefixRecord::parse(bytes.substr(0, bytes.size() - 9), *model, *cache, "record k1");
            }).find("record k1 is"),
            std::string::npos);
  auto llama = Model::load(test::data_path("oracle/llama-tiny"), {.load_tokenizer = false});
  const std::string foreign =
      message_of([&] { PrefixRecord::parse(bytes, *llama, *make_cache(*llama), "record k1"); });
  EXPECT_EQ(foreign.rfind("record k1 was saved with a different model", 0), 0u) << foreign;
}

// Two "replicas" (a KV cache, a prefix cache and a BlockStore each) on one Redis.
class SharedBlocks : public ::testing::TestWithParam<std::string> {
 protected:
  struct Replica {
    std::shared_ptr<KvCache> cache;
    std::unique_ptr<PrefixCache> prefix;
    std::unique_ptr<store::BlockStore> blocks;
  };
  void SetUp() override {
    model = Model::load(GetParam(), {.load_tokenizer = false});
    vocab = model->config().vocab;
    pool = std::make_unique<store::RedisPool>(store::parse_redis_url(redis.url()),
                                              store::RedisPoolOptions{}, nullptr);
  }
  Replica replica() {
    Replica r;
    r.cache = make_cache(*model);
    // Hybrids: the cache's own checkpoints every 128 tokens (1024 in a server), the block-aligned
    // restart points the store shares.
    r.prefix = std::make_unique<PrefixCache>(model, r.cache, 64 << 20, /*checkpoint_every=*/128);
    r.blocks = std::make_unique<store::BlockStore>(
        *pool, model, r.cache, metrics, [this](const std::string& l) { log.push_back(l); });
    return r;
  }
  // What a server does at the end of a request: cache the session and write its blocks.
  void publish(Replica& r, const std::string& partition, const Session& s) {
    r.prefix->insert(partition, s);
    ASSERT_TRUE(r.blocks->upload(r.blocks->collect(partition, s)));
  }
  // What a server does with a request: look in the store beyond the local cache, then acquire.
  Session serve(Replica& r, const std::string& partition, const std::vector<int32_t>& prompt,
                int* reused) {
    auto pre = r.blocks->fetch(*r.prefix, partition, prompt);
    if (pre) r.blocks->install(*r.prefix, prompt, *pre);
    return r.prefix->acquire(partition, prompt, reused);
  }
  test::RedisProcess redis;
  std::unique_ptr<store::RedisPool> pool;
  store::StoreMetrics metrics;
  std::vector<std::string> log;
  std::shared_ptr<const Model> model;
  int vocab = 0;
};

TEST_P(SharedBlocks, WhatOneReplicaComputedAnotherLoadsBitIdentical) {
  const bool hybrid = model->config().is_hybrid();
  const auto system = random_ids(hybrid ? 300 : 70, vocab, 1);
  const auto prompt = cat(system, random_ids(30, vocab, 2));
  Replica a = replica(), b = replica();
  {
    Session s = a.prefix->acquire("t", prompt);
    publish(a, "t", s);
  }
  const size_t expect_blocks = hybrid ? 256 / 16 : (prompt.size() - 1) / 16;
  int reused = -1;
  Session hit = serve(b, "t", cat(prompt, random_ids(20, vocab, 3)), &reused);
  EXPECT_EQ(size_t(reused), expect_blocks * 16);
  Session cold(model, b.cache);
  cold.append(cat(prompt, random_ids(20, vocab, 3)));
  EXPECT_TRUE(bit_equal(hit.logits(), cold.logits()));
  EXPECT_EQ(kv_bytes(hit, expect_blocks), kv_bytes(cold, expect_blocks));
  if (hybrid) {
    EXPECT_TRUE(*hit.recurrent_state() == *cold.recurrent_state());
  }
  // What comes next is what the cold session computes.
  const auto more = random_ids(40, vocab, 4);
  hit.append(more);
  cold.append(more);
  EXPECT_TRUE(bit_equal(hit.logits(), cold.logits()));
  // Another partition (tenant) finds nothing.
  EXPECT_EQ(b.blocks->fetch(*b.prefix, "u", prompt), nullptr);
  // A replica that has them already does not ask, and does not publish them again.
  EXPECT_EQ(b.blocks->fetch(*b.prefix, "t", prompt), nullptr);
  EXPECT_TRUE(b.blocks->collect("t", hit).size() < hit.blocks().size());
  EXPECT_TRUE(log.empty()) << joined(log);
}

// The record checks are the same for every model: one model is enough.
class SharedBlockRecords : public SharedBlocks {};

TEST_P(SharedBlockRecords, ADamagedOrForeignRecordIsSkippedWithOneLineAndRecomputed) {
  const auto prompt = random_ids(70, vocab, 5);
  Replica a = replica(), b = replica();
  {
    Session s = a.prefix->acquire("t", prompt);
    publish(a, "t", s);
  }
  const auto keys = store::block_keys(a.blocks->ns(), "t", prompt, 16, 4);
  // Block 2 damaged: blocks 0 and 1 load, the rest is prefilled, the reply is the same.
  redis.cli("SETRANGE " + keys[2] + " 2000 x");
  int reused = -1;
  Session s = serve(b, "t", prompt, &reused);
  EXPECT_EQ(reused, 32);
  ASSERT_EQ(log.size(), 1u) << joined(log);
  EXPECT_EQ(log[0], "warning: store record " + keys[2] +
                        " is corrupted or truncated (checksum mismatch); skipped, the block is "
                        "prefilled instead");
  Session cold(model, b.cache);
  cold.append(prompt);
  EXPECT_TRUE(bit_equal(s.logits(), cold.logits()));
  // Block 0 under block 1's key (a record that is sound but not what its key names).
  Replica c = replica();
  log.clear();
  redis.cli("COPY " + keys[0] + " " + keys[1] + " REPLACE");
  s = serve(c, "t", prompt, &reused);
  EXPECT_EQ(reused, 16);
  ASSERT_EQ(log.size(), 1u) << joined(log);
  EXPECT_NE(log[0].find("is not the block its key names (a foreign record)"), std::string::npos)
      << log[0];
  EXPECT_TRUE(bit_equal(s.logits(), cold.logits()));
}

INSTANTIATE_TEST_SUITE_P(Dense, SharedBlockRecords,
                         ::testing::Values(test::source_path("models/pycoder-6m").string()),
                         [](const auto&) { return std::string("pycoder"); });

INSTANTIATE_TEST_SUITE_P(Models, SharedBlocks,
                         ::testing::Values(test::source_path("models/pycoder-6m").string(),
                                           test::data_path("oracle/qwen35-hybrid-tiny").string()),
                         [](const auto& info) {
                           return info.index == 0 ? std::string("dense") : std::string("hybrid");
                         });

}  // namespace fak
