// What agent frameworks ask of `fak serve` (issue 18), end to end on the real binary: structured
// output (response_format json_object / json_schema strict) and forced tool calls (tool_choice
// "required" or a named function) decoded under a grammar and checked by an independent schema
// validator; several choices (n) equal to the single-choice runs with the same seeds; best_of
// ranked by total logprob; logprobs and top_logprobs; sampling defaults from
// generation_config.json; chat_template_kwargs; tools kept in the prompt under tool_choice none;
// /v1/models/{id}; OpenAI's context-length wording; keep-alive comments in streams.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "chat/reasoning.h"
#include "core/json.h"
#include "grammar/schema_validate.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

using json = fak::ojson;

using Reply = HttpReply;

Reply post(int port, const std::string& path, const json& body, const std::string& key = "key-a") {
  return post_json(port, path, body, bearer(key));
}
Reply get(int port, const std::string& path) {
  return get_json(port, path);
}
std::string stream_raw(int port, const std::string& path, const json& body) {
  return post_stream(port, path, body);
}

// The data payloads of an OpenAI stream, [DONE] left out.
std::vector<json> data_events(const std::string& raw) {
  std::vector<json> out;
  size_t at = 0;
  while ((at = raw.find("data: ", at)) != std::string::npos) {
    const size_t end = raw.find("\n\n", at);
    const std::string payload = raw.substr(at + 6, end - at - 6);
    if (payload != "[DONE]") out.push_back(json::parse(payload));
    at = end;
  }
  return out;
}

json chat(const std::string& user, int max_tokens) {
  return {{"model", "pycoder-6m"},
          {"max_tokens", max_tokens},
          {"messages", {{{"role", "user"}, {"content", user}}}}};
}

const json kWeatherTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12},
      "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "integer"}}, "required": ["zone"]}}}
])");

class ServerAgent : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess("--parallel 4"); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static ServerProcess* server_;
};
ServerProcess* ServerAgent::server_ = nullptr;

TEST_F(ServerAgent, JsonSchemaResponseFormatIsValidOutput) {
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 10},
      "count": {"type": "integer"},
      "ok": {"type": "boolean"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
    "required": ["name", "count", "ok", "tags"], "additionalProperties": false})");
  for (double temperature : {0.0, 1.0}) {
    for (int seed = 0; seed < 3; ++seed) {
      // The bundled model likes whitespace between JSON tokens (bounded by the grammar): room.
      json req = chat("Describe the list as JSON.", 400);
      req["temperature"] = temperature;
      req["seed"] = seed;
      req["response_format"] = {
          {"type", "json_schema"},
          {"json_schema", {{"name", "summary"}, {"strict", true}, {"schema", schema}}}};
      const Reply r = post(port(), "/v1/chat/completions", req);
      ASSERT_EQ(r.status, 200) << r.body;
      const json choice = r.j()["choices"][0];
      ASSERT_EQ(choice["finish_reason"], "stop") << r.body;
      const json value =
          json::parse(choice["message"]["content"].get<std::string>(), nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << choice["message"]["content"];
      EXPECT_EQ(grammar::schema_violation(value, schema, {.strict = true}), "") << value.dump();
      if (temperature == 0) break;  // greedy: one seed says it all
    }
  }
  // Unconstrained, the same model writes Python, not this JSON: the grammar did the work.
  const Reply free = post(port(), "/v1/chat/completions", chat("Describe the list as JSON.", 60));
  const json loose =
      json::parse(free.j()["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(loose.is_discarded() || grammar::schema_violation(loose, schema) != "");
}

TEST_F(ServerAgent, JsonObjectResponseFormatParses) {
  json req = chat("config please", 80);
  req["response_format"] = {{"type", "json_object"}};
  req["temperature"] = 0.8;
  req["seed"] = 5;
  const Reply r = post(port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = r.j()["choices"][0];
  if (c["finish_reason"] == "stop") {
    const json v = json::parse(c["message"]["content"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(v.is_object()) << c["message"]["content"];
  } else {
    EXPECT_EQ(c["finish_reason"], "length");  // an object still open at max_tokens
  }
  // A schema with a construct the grammar cannot enforce (a backreference) is a 400 naming it,
  // not ignored.
  req["response_format"] = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "^(a)\\1$"}}}}}};
  const Reply bad = post(port(), "/v1/chat/completions", req);
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("pattern"), std::string::npos);
}

TEST_F(ServerAgent, ForcedToolCallsAreWellFormed) {
  for (const json& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "get_time"}}}}}) {
    for (bool stream : {false, true}) {
      json req = chat("What is the weather in Paris?", 80);
      req["tools"] = kWeatherTools;
      req["tool_choice"] = choice;
      req["parallel_tool_calls"] = false;
      json calls;
      std::string finish;
      if (!stream) {
        const Reply r = post(port(), "/v1/chat/completions", req);
        ASSERT_EQ(r.status, 200) << r.body;
        calls = r.j()["choices"][0]["message"]["tool_calls"];
        finish = r.j()["choices"][0]["finish_reason"];
      } else {
        req["stream"] = true;
        // The calls arrive as deltas (index, id and name first, then arguments text).
        calls = json::array();
        for (const json& e : data_events(stream_raw(port(), "/v1/chat/completions", req))) {
          const json& delta = e["choices"][0]["delta"];
          if (delta.contains("tool_calls"))
            for (const json& d : delta["tool_calls"]) {
              if (d.contains("id")) {
                calls.push_back(d);
                continue;
              }
              std::string& args =
                  calls[d["index"].get<size_t>()]["function"]["arguments"].get_ref<std::string&>();
              args += d["function"]["arguments"].get<std::string>();
            }
          if (!e["choices"][0]["finish_reason"].is_null())
            finish = e["choices"][0]["finish_reason"];
        }
      }
      ASSERT_EQ(finish, "tool_calls") << choice.dump();
      ASSERT_EQ(calls.size(), 1u);
      const std::string name = calls[0]["function"]["name"];
      if (choice.is_object()) {
        EXPECT_EQ(name, "get_time");
      }
      const json args = json::parse(calls[0]["function"]["arguments"].get<std::string>());
      const json& schema = kWeatherTools[name == "get_weather" ? 0 : 1]["function"]["parameters"];
      EXPECT_EQ(grammar::schema_violation(args, schema, {.strict = true}), "") << args.dump();
    }
  }
}

TEST_F(ServerAgent, ChoicesEqualSingleRunsWithTheirSeeds) {
  json req = {{"model", "pycoder-6m"},
              {"prompt", "def merge(a, b):"},
              {"max_tokens", 24},
              {"temperature", 1.0},
              {"seed", 40},
              {"ignore_eos", true}};
  req["n"] = 3;
  const Reply many = post(port(), "/v1/completions", req);
  ASSERT_EQ(many.status, 200) << many.body;
  const json choices = many.j()["choices"];
  ASSERT_EQ(choices.size(), 3u);
  EXPECT_EQ(many.j()["usage"]["completion_tokens"], 72);
  std::set<std::string> distinct;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(choices[size_t(i)]["index"], i);
    json one = req;
    one["n"] = 1;
    one["seed"] = 40 + i;  // choice i samples with seed + i
    const Reply r = post(port(), "/v1/completions", one);
    EXPECT_EQ(r.j()["choices"][0]["text"], choices[size_t(i)]["text"]) << "choice " << i;
    distinct.insert(choices[size_t(i)]["text"]);
  }
  EXPECT_EQ(distinct.size(), 3u);
  // Streamed, per index, the same texts.
  req["stream"] = true;
  std::vector<std::string> texts(3);
  for (const json& e : data_events(stream_raw(port(), "/v1/completions", req)))
    for (const json& c : e["choices"])
      texts[c["index"].get<size_t>()] += c["text"].get<std::string>();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(texts[size_t(i)], choices[size_t(i)]["text"]);
  // More choices than batch slots: refused, not queued forever.
  req["stream"] = false;
  req["n"] = 5;
  EXPECT_EQ(post(port(), "/v1/completions", req).status, 400);
}

TEST_F(ServerAgent, BestOfReturnsTheMostLikelyChoice) {
  json req = {{"model", "pycoder-6m"},
              {"prompt", "class Tree:"},
              {"max_tokens", 12},
              {"temperature", 1.2},
              {"seed", 7},
              {"ignore_eos", true}};
  json all = req;
  all["n"] = 4;
  all["logprobs"] = 0;
  const Reply r_all = post(port(), "/v1/completions", all);
  ASSERT_EQ(r_all.status, 200) << r_all.body;
  std::string best;
  double best_sum = -1e300;
  const json all_choices = r_all.j()["choices"];  // a copy: the loop must not outlive j()
  for (const json& c : all_choices) {
    double sum = 0;
    for (const json& lp : c["logprobs"]["token_logprobs"]) sum += lp.get<double>();
    if (sum > best_sum) {
      best_sum = sum;
      best = c["text"].get<std::string>();
    }
  }
  req["best_of"] = 4;
  const Reply r = post(port(), "/v1/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j()["choices"].size(), 1u);
  EXPECT_EQ(r.j()["choices"][0]["text"], best);
  EXPECT_TRUE(r.j()["choices"][0]["logprobs"].is_null());  // not asked for
}

TEST_F(ServerAgent, LogprobsDescribeTheSampledTokens) {
  json req = chat("sort a list", 10);
  req["logprobs"] = true;
  req["top_logprobs"] = 3;
  req["ignore_eos"] = true;
  const Reply r = post(port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json content = r.j()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 10u);
  std::string text;
  for (const json& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    double mass = 0, prev = 0;
    for (size_t i = 0; i < 3; ++i) {
      const double lp = t["top_logprobs"][i]["logprob"];
      EXPECT_LE(lp, 0);
      if (i > 0) {
        EXPECT_LE(lp, prev);
      }
      prev = lp;
      mass += std::exp(lp);
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
    // Greedy: the sampled token is the most likely one.
    EXPECT_EQ(t["token"], t["top_logprobs"][0]["token"]);
    EXPECT_FLOAT_EQ(t["logprob"].get<float>(), t["top_logprobs"][0]["logprob"].get<float>());
    for (const json& b : t["bytes"]) text += char(b.get<int>());
  }
  EXPECT_EQ(text, r.j()["choices"][0]["message"]["content"]);
  // Completions spell them their way, and the tokens add up to the text.
  json comp = {{"model", "pycoder-6m"},
               {"prompt", "import os"},
               {"max_tokens", 8},
               {"logprobs", 2},
               {"ignore_eos", true}};
  const Reply c = post(port(), "/v1/completions", comp);
  const json lp = c.j()["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 8u);
  std::string joined;
  for (const json& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, c.j()["choices"][0]["text"]);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][1], lp["tokens"][0].get<std::string>().size());
}

TEST_F(ServerAgent, ToolsStayInThePromptWhateverToolChoiceSays) {
  json req = chat("hi", 2);
  req["tools"] = kWeatherTools;
  req["tool_choice"] = "auto";
  const int with_auto = post(port(), "/v1/chat/completions", req).j()["usage"]["prompt_tokens"];
  req["tool_choice"] = "none";
  const Reply none = post(port(), "/v1/chat/completions", req);
  EXPECT_EQ(none.j()["usage"]["prompt_tokens"], with_auto);
  EXPECT_FALSE(none.j()["choices"][0]["message"].contains("tool_calls"));
  req.erase("tools");
  EXPECT_LT(post(port(), "/v1/chat/completions", req).j()["usage"]["prompt_tokens"].get<int>(),
            with_auto);
}

TEST_F(ServerAgent, ModelObjectAndContextErrorsSpeakOpenAi) {
  const Reply m = get(port(), "/v1/models/pycoder-6m");
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.j()["id"], "pycoder-6m");
  EXPECT_EQ(m.j()["context_length"], 512);
  EXPECT_EQ(get(port(), "/v1/models/gpt-4").status, 404);
  std::string words;
  for (int i = 0; i < 400; ++i) words += " word" + std::to_string(i);
  const Reply long_prompt = post(port(), "/v1/chat/completions", chat(words, 4));
  ASSERT_EQ(long_prompt.status, 400);
  const std::string msg = long_prompt.j()["error"]["message"];
  EXPECT_EQ(msg.rfind("This model's maximum context length is 512 tokens.", 0), 0u) << msg;
  EXPECT_EQ(long_prompt.j()["error"]["code"], "context_length_exceeded");
}

TEST(ServerAgentKeepAlive, StreamsSendKeepAlivesWhileTheyWait) {
  // One batch slot, taken by a long generation that is already streaming: a second request waits
  // in the queue for hundreds of steps, and its stream gets SSE comments meanwhile.
  // The model's whole context: the busy stream outlasts many keep-alive intervals however fast
  // the machine (the bundled model decodes ~3,000 tokens/s on an idle core).
  ServerSetup setup;
  setup.ctx = 4096;
  ServerProcess server("--parallel 1 --sse-keepalive 0.05", setup);
  ASSERT_NE(server.port(), 0);
  LongStream busy(server.port(), 4000);
  ASSERT_TRUE(busy.started());
  json req = {{"model", "pycoder-6m"}, {"prompt", "x = 1"}, {"max_tokens", 2}, {"stream", true}};
  const std::string raw = stream_raw(server.port(), "/v1/completions", req);
  busy.join();
  EXPECT_NE(raw.find(": keep-alive\n\n"), std::string::npos) << raw.substr(0, 300);
  EXPECT_NE(raw.find("data: [DONE]"), std::string::npos);
}

TEST(ServerAgentDefaults, SamplingDefaultsComeFromGenerationConfig) {
  // The bundled model with a generation_config.json that asks for sampling.
  const auto model = temp_dir() / "sampling-model";
  std::filesystem::copy(source_path("models/pycoder-6m"), model);
  write_file(model / "generation_config.json",
             R"({"do_sample": true, "temperature": 1.5, "top_k": 0, "top_p": 1.0})");
  // And a chat template that shows a chat_template_kwargs variable.
  json config = json::parse(read_file(model / "tokenizer_config.json"));
  config["chat_template"] =
      "{% if shout %}LOUD {% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}";
  write_file(model / "tokenizer_config.json", config.dump());
  ServerProcess server("-m " + model.string() + " --parallel 2");
  ASSERT_NE(server.port(), 0);
  json req = {{"model", "sampling-model"},
              {"prompt", "def f(x):"},
              {"max_tokens", 16},
              {"ignore_eos", true},
              {"seed", 1}};
  const std::string sampled = post(server.port(), "/v1/completions", req).j()["choices"][0]["text"];
  req["temperature"] = 0;
  const std::string greedy = post(server.port(), "/v1/completions", req).j()["choices"][0]["text"];
  EXPECT_NE(sampled, greedy);
  req.erase("temperature");
  EXPECT_EQ(post(server.port(), "/v1/completions", req).j()["choices"][0]["text"], sampled);
  json c = {{"model", "sampling-model"},
            {"max_tokens", 1},
            {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const int plain = post(server.port(), "/v1/chat/completions", c).j()["usage"]["prompt_tokens"];
  c["chat_template_kwargs"] = {{"shout", true}};
  EXPECT_GT(post(server.port(), "/v1/chat/completions", c).j()["usage"]["prompt_tokens"].get<int>(),
            plain);
}

TEST(ReasoningSplit, ThinkBlocksComeApartAcrossPieces) {
  using chat::ReasoningSplitter;
  auto run = [](bool inside, const std::vector<std::string>& pieces) {
    chat::ReasoningSplitter s(true, inside);
    chat::ReasoningSplitter::Parts all;
    for (const auto& p : pieces) {
      auto part = s.push(p);
      all.reasoning += part.reasoning;
      all.content += part.content;
    }
    auto last = s.finish();
    return std::make_pair(all.reasoning + last.reasoning, all.content + last.content);
  };
  EXPECT_EQ(run(false, {"<th", "ink>plan", " it</thi", "nk>\n\nanswer"}),
            std::make_pair(std::string("plan it"), std::string("answer")));
  EXPECT_EQ(run(false, {"\n <think>a</think>b"}),
            std::make_pair(std::string("a"), std::string("b")));
  EXPECT_EQ(run(false, {"no block <think>x</think>"}),
            std::make_pair(std::string(""), std::string("no block <think>x</think>")));
  EXPECT_EQ(run(true, {"still thinking</", "think>done"}),
            std::make_pair(std::string("still thinking"), std::string("done")));
  EXPECT_EQ(run(true, {"cut off mid-thought"}),
            std::make_pair(std::string("cut off mid-thought"), std::string("")));
  EXPECT_EQ(run(false, {"<thin"}), std::make_pair(std::string(""), std::string("<thin")));
  chat::ReasoningSplitter off(false, false);
  EXPECT_EQ(off.push("<think>x</think>").content, "<think>x</think>");
}

}  // namespace
}  // namespace fak::test

namespace fak::test {
namespace {

// fak serve --draft ngram: every reply is the one plain decoding gives (greedy, seeded sampling,
// several choices, stop strings, max_tokens at every length), and drafts are accepted on a
// prompt that repeats itself.
TEST(ServerSpeculative, RepliesEqualPlainDecodingAndDraftsAreAccepted) {
  ServerProcess plain("--parallel 4");
  ServerProcess spec("--parallel 4 --draft ngram --draft-max 8");
  ASSERT_NE(plain.port(), 0);
  ASSERT_NE(spec.port(), 0);
  // A file, then the start of the same file again: the continuation repeats it.
  const std::string code =
      "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
      "def mul(a, b):\n    return a * b\n\n\n";
  std::vector<json> requests;
  for (int max_tokens : {1, 2, 3, 7, 40}) {
    requests.push_back({{"model", "pycoder-6m"},
                        {"prompt", code + "# again\n" + code.substr(0, 20)},
                        {"max_tokens", max_tokens},
                        {"ignore_eos", true}});
  }
  json sampled = requests.back();
  sampled["temperature"] = 0.9;
  sampled["seed"] = 11;
  sampled["n"] = 2;
  requests.push_back(sampled);
  json stopped = requests.back();
  stopped["stop"] = {"mul"};
  requests.push_back(stopped);
  json chat = {{"model", "pycoder-6m"},
               {"max_tokens", 30},
               {"messages", {{{"role", "user"}, {"content", code}}}}};
  requests.push_back(chat);
  for (const json& req : requests) {
    const std::string path = req.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    const Reply a = post(plain.port(), path, req), b = post(spec.port(), path, req);
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(a.j()["choices"], b.j()["choices"]) << req.dump();
    EXPECT_EQ(a.j()["usage"]["completion_tokens"], b.j()["usage"]["completion_tokens"]);
  }
  httplib::Client c("127.0.0.1", spec.port());
  auto accepted = [&] {
    const std::string metrics = c.Get("/metrics")->body;
    const size_t at = metrics.find("\nfak_spec_accepted_tokens_total ");
    EXPECT_NE(at, std::string::npos) << metrics;
    return at == std::string::npos ? 0L : std::atol(metrics.c_str() + at + 32);
  };
  const long before = accepted();
  EXPECT_GT(before, 10);
  // Under a JSON schema too (SequenceRun reads each verified row through the grammar): the same
  // reply, and drafts accepted.
  const std::string obj = "{\"name\": \"add\", \"body\": \"def add(a, b):\\n    return a + b\"}\n";
  const json constrained = {
      {"model", "pycoder-6m"},
      {"max_tokens", 60},
      {"messages", {{{"role", "user"}, {"content", "# tools.json\n" + obj + obj + obj}}}},
      {"response_format",
       {{"type", "json_schema"},
        {"json_schema",
         {{"name", "tool"},
          {"schema",
           {{"type", "object"},
            {"properties", {{"name", {{"type", "string"}}}, {"body", {{"type", "string"}}}}},
            {"required", {"name", "body"}}}}}}}}};
  const Reply a = post(plain.port(), "/v1/chat/completions", constrained);
  const Reply b = post(spec.port(), "/v1/chat/completions", constrained);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.j()["choices"], b.j()["choices"]);
  EXPECT_FALSE(
      json::parse(b.j()["choices"][0]["message"]["content"].get<std::string>(), nullptr, false)
          .is_discarded())
      << b.body;
  EXPECT_GT(accepted(), before + 3);
}

}  // namespace
}  // namespace fak::test
