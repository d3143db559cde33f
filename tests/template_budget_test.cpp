// A chat template comes with a model download: each attack of issue 51 (a stack overflow through
// macros × deep expressions, CPU pinned inside the step budget, gigabytes past the size limit)
// must end in one fak::Error naming the limit, and the server must keep serving other requests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <functional>
#include <string>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/json.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"

namespace fak {
namespace {

using ::testing::HasSubstr;
using ordered_json = fak::ojson;

std::string render_with(const std::string& source, const ChatTemplateLimits& limits = {},
                        const RenderBounds& bounds = {}) {
  ChatTemplate t = ChatTemplate::parse(source);
  t.set_limits(limits);
  return t.render(ordered_json::array(), nullptr, false, ordered_json::object(), bounds);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string render_error(const std::string& source, const ChatTemplateLimits& limits = {},
                         const RenderBounds& bounds = {}) {
  return error_of([&] { render_with(source, limits, bounds); });
}

// A macro that recurses 60 times (under the 64-call limit), each call at the bottom of a 390-high
// expression (under the parser's 400): 23,400 nested evaluations, enough to overflow a worker's
// stack.
std::string stack_bomb() {
  std::string deep = "m(n - 1)";
  for (int i = 0; i < 389; ++i) deep += " ~ ''";  // left-associative: the call is 390 deep
  return "{% macro m(n) %}{% if n > 0 %}{{ " + deep + " }}{% endif %}{% endmacro %}{{ m(60) }}";
}

TEST(TemplateBudget, DepthIsBoundedAcrossMacrosAndExpressions) {
  EXPECT_THAT(render_error(stack_bomb()), HasSubstr("nested deeper than 1000"));
  // The same depth inside one macro level renders (each dimension alone is legal).
  std::string deep = "1";
  for (int i = 0; i < 389; ++i) deep += " + 0";
  EXPECT_EQ(render_with("{{ " + deep + " }}"), "1");
}

// The stack check itself, on a thread whose stack is far smaller than a worker's: the count alone
// would let this overflow it.
TEST(TemplateBudget, ASmallThreadStackIsRefusedNotOverflowed) {
  struct Job {
    std::string error;
  } job;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t(384) << 10);
  pthread_t thread;
  auto body = [](void* arg) -> void* {
    auto* j = static_cast<Job*>(arg);
    ChatTemplateLimits limits;
    limits.max_depth = 1'000'000;  // only the stack check stands in the way
    limits.max_call_depth = 1'000'000;
    j->error = error_of([&] { render_with(stack_bomb(), limits); });
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, body, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_THAT(job.error, HasSubstr("too deeply for this thread's stack"));
}

TEST(TemplateBudget, ZeroSizeRepeatsAndHashedUniqueDoNotPinACore) {
  // Each of these looped ~10^18 times or ran quadratically before; a hang fails the test by its
  // timeout.
  EXPECT_EQ(render_with("{{ '' * 10**18 }}|{{ ([] * 10**18) | length }}"), "|0");
  EXPECT_EQ(render_with("{{ range(100000) | unique | list | length }}"), "100000");
  EXPECT_EQ(render_with("{{ [1, 1.0, true, 'a', 'A', 2] | unique | list }}"), "[1, 'a', 2]");
  EXPECT_EQ(render_with("{{ [1, 2, 3] | sum }}"), "6");
  EXPECT_THAT(render_error("{{ ['a', 'b'] | sum(start='') }}"), HasSubstr("can't sum strings"));
  EXPECT_THAT(render_error("{{ [[1], 2] | unique | list }}"), HasSubstr("unhashable type"));
  // jinja2's sandbox refuses ranges over 100000 items (MAX_RANGE).
  EXPECT_THAT(render_error("{% for i in range(10**6) %}{% endfor %}"), HasSubstr("range too big"));
}

TEST(TemplateBudget, ADeadlineAndACancelFlagStopARender) {
  const std::string busy =
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  ChatTemplateLimits limits;
  limits.max_steps = uint64_t(1) << 60;
  limits.max_time = std::chrono::milliseconds(1);
  EXPECT_THAT(render_error(busy, limits), HasSubstr("ms (limit of one render)"));
  limits.max_time = std::chrono::milliseconds(60'000);
  std::atomic<bool> gone{true};
  RenderBounds bounds;
  bounds.cancel = &gone;
  EXPECT_THAT(render_error(busy, limits, bounds), HasSubstr("cancelled (the client left)"));
}

TEST(TemplateBudget, SizesAreComputedWithoutOverflowAndItemsCountAsBytes) {
  EXPECT_THAT(render_error("{{ 'abcd' * 2**62 }}"), HasSubstr("more than 2^64"));
  EXPECT_THAT(render_error("{{ ('abcd' * 2**61) | length }}"), HasSubstr("bytes (limit"));
  EXPECT_THAT(render_error("{{ ([0] * 60000000) | length }}"), HasSubstr("bytes (limit"));
  EXPECT_THAT(render_error("{{ ([0] * 4000000) | length }}"), HasSubstr("bytes (limit"));
  // A string as a list of characters is a Value per character.
  EXPECT_THAT(render_error("{{ ('x' * 10000000) | list | length }}"), HasSubstr("bytes (limit"));
  EXPECT_THAT(render_error("{% for c in 'x' * 10000000 %}{% endfor %}"), HasSubstr("bytes (limit"));
  EXPECT_THAT(render_error("{{ (', ' * 8000000).split(',') | length }}"),
              HasSubstr("bytes (limit"));
  // Small ones are fine.
  EXPECT_EQ(render_with("{{ ('ab' * 3) | list | join('-') }}"), "a-b-a-b-a-b");
}

TEST(TemplateBudget, ManyLargeStringsHitOneTotal) {
  // Each string is under the per-value limit; together they would be gigabytes.
  std::string many = "{% set a = 'x' * 15000000 %}";
  for (int i = 0; i < 40; ++i)
    many += "{% set b" + std::to_string(i) + " = a ~ '" + std::to_string(i) + "' %}";
  EXPECT_THAT(render_error(many), HasSubstr("MiB of strings and lists"));
  // Through a namespace in a loop, too.
  EXPECT_THAT(render_error("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                           "{% set ns.l = ns.l + ['x' * 1000000] %}{% endfor %}"),
              HasSubstr("limit"));
}

TEST(TemplateBudget, AnOutputLongerThanTheContextCouldHoldStopsTheRender) {
  RenderBounds bounds;
  bounds.max_output_bytes = 1000;
  EXPECT_THAT(render_error("{% for i in range(10000) %}0123456789{% endfor %}", {}, bounds),
              HasSubstr("rendered prompt is longer than 1000 bytes"));
  EXPECT_EQ(render_with("{% for i in range(10) %}0123456789{% endfor %}", {}, bounds).size(), 100u);
}

// End to end: a model whose template is hostile answers each chat request with an error and a
// bounded delay, while /v1/completions (no template) keeps answering, and the server lives.
TEST(TemplateBudgetServer, AHostileTemplateFailsItsRequestsAndTheServerKeepsServing) {
  const auto model = test::temp_dir() / "hostile-template";
  std::filesystem::copy(test::source_path("models/pycoder-6m"), model);
  for (const std::string& tmpl :
       {stack_bomb(), std::string("{{ 'abcd' * 2**62 }}"),
        std::string("{% for i in range(100000) %}{% for j in range(100000) %}{{ '' * 10**18 }}"
                    "{% endfor %}{% endfor %}"),
        std::string(
            "{% set ns = namespace(s='') %}{% for m in messages %}{% for i in range(100000) "
            "%}{% set ns.s = ns.s ~ m.content %}{% endfor %}{% endfor %}{{ ns.s }}")}) {
    ordered_json config = ordered_json::parse(test::read_file(model / "tokenizer_config.json"));
    config["chat_template"] = tmpl;
    test::write_file(model / "tokenizer_config.json", config.dump());
    test::ServerProcess server("-m " + model.string());
    const ordered_json chat = {{"model", "hostile-template"},
                               {"max_tokens", 2},
                               {"messages", {{{"role", "user"}, {"content", "hello there"}}}}};
    const auto reply =
        test::post_json(server.port(), "/v1/chat/completions", chat, test::bearer("key-a"));
    EXPECT_EQ(reply.status, 400) << reply.body;
    EXPECT_THAT(reply.body, HasSubstr("chat template error")) << tmpl.substr(0, 80);
    const ordered_json completion = {
        {"model", "hostile-template"}, {"prompt", "def f():"}, {"max_tokens", 2}};
    EXPECT_EQ(
        test::post_json(server.port(), "/v1/completions", completion, test::bearer("key-a")).status,
        200);
    EXPECT_TRUE(server.alive());
  }
}

}  // namespace
}  // namespace fak
