// The fak binary as a user runs it: the bundled model writes Python, the JSON outputs carry what
// they promise, and every kind of bad input gets one clear error and a non-zero exit.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/memory_bandwidth.h"
#include "grammar/schema_validate.h"
#include "ops/matmul.h"
#include "test_util.h"

namespace fak {

namespace {

nlohmann::json reference_json() {
  return nlohmann::json::parse(
      test::read_file(test::source_path("models/pycoder-6m/reference.json")));
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

TEST(Cli, RunWritesThePythonTheReferenceWrote) {
  auto ref = reference_json();
  for (int i = 0; i < 2; ++i) {
    const auto& c = ref["cases"][size_t(i)];
    auto r = test::run_fak("run -p " + quote(c["prompt"].get<std::string>()) +
                           " -n 48 --ignore-eos --json -t 1");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_ids"], c["input_ids"]);
    EXPECT_EQ(j["ids"], c["greedy_ids"]);
    EXPECT_EQ(j["text"], c["greedy_text"]);
    EXPECT_GT(j["prefill_tok_s"].get<double>(), 0);
    EXPECT_GT(j["decode_tok_s"].get<double>(), 0);
  }
}

TEST(Cli, RunStreamsTextByDefault) {
  auto r = test::run_fak("run -p 'def fibonacci(n):\n' -n 24 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"\"\"Return the number of fibonacci numbers."), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos);
}

// The statistics line (stderr) follows the text (stdout) on a line of its own, also where both go
// to one pipe (stdout then is fully buffered: the text must be flushed before the line is written).
TEST(Cli, RunStatsLineFollowsTheTextOnItsOwnLine) {
  const auto dir = test::temp_dir();
  const auto merged = dir / "merged";
  const std::string cmd = std::string(FAK_BINARY) +
                          " run -p 'def fibonacci(n):\n' -n 24 --ignore-eos </dev/null 2>&1 | cat >" +
                          merged.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = test::read_file(merged);
  std::filesystem::remove_all(dir);
  const size_t text = out.find("\"\"\"Return the number of fibonacci numbers.");
  const size_t stats = out.find("[prefill ");
  ASSERT_NE(text, std::string::npos) << out;
  ASSERT_NE(stats, std::string::npos) << out;
  EXPECT_LT(text, stats) << out;
  EXPECT_EQ(out[stats - 1], '\n') << out;
}

TEST(Cli, SamplingIsReproducibleWithASeed) {
  auto a = test::run_fak(
      "run -p 'import os\n' -n 24 --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 --json");
  auto b = test::run_fak(
      "run -p 'import os\n' -n 24 --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 --json");
  auto c = test::run_fak(
      "run -p 'import os\n' -n 24 --temp 0.9 --top-k 40 --top-p 0.95 --seed 8 --json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["ids"], nlohmann::json::parse(b.out)["ids"]);
  EXPECT_NE(nlohmann::json::parse(a.out)["ids"], nlohmann::json::parse(c.out)["ids"]);
}

TEST(Cli, RunSessionResumesFromDisk) {
  auto dir = test::temp_dir();
  auto path = (dir / "chat.fak").string();
  auto first =
      test::run_fak("run -p 'def add(a, b):\n' -n 8 --ignore-eos --json --session " + path);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // Resuming with no new prompt continues where the first run stopped: together the two runs
  // produce what one 16-token run produces.
  auto second = test::run_fak("run -n 8 --ignore-eos --json --session " + path);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto whole = test::run_fak("run -p 'def add(a, b):\n' -n 16 --ignore-eos --json");
  auto ids = nlohmann::json::parse(first.out)["ids"];
  const auto second_json = nlohmann::json::parse(second.out);
  for (auto& id : second_json["ids"]) ids.push_back(id);
  EXPECT_EQ(ids, nlohmann::json::parse(whole.out)["ids"]);
}

// fak run decodes under a JSON schema (the server's per-sequence decoder): the text is a JSON
// value the schema accepts, and the run ends when it is whole.
TEST(Cli, RunJsonSchemaOutputIsValid) {
  const auto schema_path = test::temp_dir() / "person.json";
  const std::string schema =
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
          "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": false})";
  test::write_file(schema_path, schema);
  for (const char* sampling : {"", " --temp 0.9 --seed 7"}) {
    auto r = test::run_fak("run -p 'def f(x):\n' -n 120 --json --json-schema " +
                           schema_path.string() + sampling);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["finish_reason"], "stop") << r.out;
    const auto value = fak::ojson::parse(j["text"].get<std::string>());
    EXPECT_EQ(grammar::schema_violation(value, fak::ojson::parse(schema), {.strict = true}), "")
        << j["text"];
  }
  auto bad = test::run_fak("run -p x --json-schema " + (test::temp_dir() / "none.json").string());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("none.json"), std::string::npos) << bad.err;
}

// fak chat takes the same: every reply under the schema.
TEST(Cli, ChatJsonSchemaRepliesAreValid) {
  const auto dir = test::temp_dir();
  const std::string schema =
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})";
  test::write_file(dir / "s.json", schema);
  auto r = test::run_fak_with_input("chat -n 60 --json-schema " + (dir / "s.json").string(),
                                    "Are you there?\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto value = fak::ojson::parse(r.out);
  EXPECT_EQ(grammar::schema_violation(value, fak::ojson::parse(schema), {.strict = true}), "")
      << r.out;
}

// fak chat --draft: the same replies (greedy), turn after turn, with prompt-lookup drafts; a model
// without an MTP head refuses --draft mtp naming it.
TEST(Cli, ChatDraftGivesTheSameReplies) {
  const std::string turns = "def add(a, b):\nnow a class\n";
  auto plain = test::run_fak_with_input("chat -n 40", turns);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto drafted = test::run_fak_with_input("chat -n 40 --draft ngram --draft-max 4", turns);
  ASSERT_EQ(drafted.exit_code, 0) << drafted.err;
  EXPECT_EQ(drafted.out, plain.out);
  EXPECT_FALSE(plain.out.empty());
  auto mtp = test::run_fak_with_input("chat -n 8 --draft mtp", "hi\n");
  EXPECT_NE(mtp.exit_code, 0);
  EXPECT_NE(mtp.err.find("MTP"), std::string::npos) << mtp.err;
}

// fak chat reads a reply as the server does (chat/reply_reader.h): a thinking model's reasoning
// goes to stderr apart from the answer and into the history as reasoning_content; with --tools a
// forced call comes back as a call in the model's format, /tool answers it, and the model goes on.
TEST(Cli, ChatShowsReasoningApartAndAToolCallAsACall) {
  const auto model = test::thinking_model();
  const auto dir = test::temp_dir();
  const std::string history = (dir / "h.fak").string();
  auto r = test::run_fak_with_input("chat -m " + model.string() + " -n 24 --reasoning-budget 4",
                                    "hi\n/save " + history + "\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t mark = r.err.find("[thinking] ");
  ASSERT_NE(mark, std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("<think>"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("</think>"), std::string::npos) << r.out;
  ojson saved = ojson::parse(test::read_file(history + ".chat.json"));
  ASSERT_EQ(saved["messages"].size(), 2u) << saved.dump();
  const ojson& reply = saved["messages"][1];
  ASSERT_TRUE(reply.contains("reasoning_content")) << reply.dump();
  const std::string reasoning = reply["reasoning_content"];
  EXPECT_FALSE(reasoning.empty());
  EXPECT_NE(r.err.find("[thinking] " + reasoning), std::string::npos) << r.err;
  EXPECT_EQ(r.out.rfind(reply["content"].get<std::string>(), 0), 0u) << r.out;

  const auto tools = dir / "tools.json";
  test::write_file(tools, R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                     "required": ["city"]}}}])");
  auto t =
      test::run_fak_with_input("chat -m " + model.string() + " -n 40 --tools " + tools.string() +
                                   " --tool-choice required --reasoning-budget 2",
                               "weather?\n/tool 20 degrees\n/save " + history + "\n");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("[tool call] get_weather {\"city\": "), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("<tool_call>"), std::string::npos) << t.out;
  saved = ojson::parse(test::read_file(history + ".chat.json"));
  const ojson& m = saved["messages"];
  ASSERT_EQ(m.size(), 4u) << saved.dump();
  ASSERT_EQ(m[1]["tool_calls"].size(), 1u) << saved.dump();
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  const ojson args =
      ojson::parse(m[1]["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"].is_string()) << args.dump();
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(m[2]["content"], "20 degrees");
  EXPECT_EQ(m[2]["tool_call_id"], m[1]["tool_calls"][0]["id"]);
  EXPECT_EQ(m[3]["role"], "assistant");
}

// --stop: the run ends at the first stop string, which is not shown; the text before it is the
// unconstrained run's.
TEST(Cli, RunStopsAtAStopString) {
  auto plain = test::run_fak("run -p 'def add(a, b):\n' -n 40 --ignore-eos --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::string text = nlohmann::json::parse(plain.out)["text"];
  const std::string stop = "return";
  const size_t at = text.find(stop);
  ASSERT_NE(at, std::string::npos) << text;
  auto r = test::run_fak("run -p 'def add(a, b):\n' -n 40 --ignore-eos --json --stop " + stop +
                         " --stop 'never appears'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(j["stop"], stop);
  EXPECT_EQ(j["text"], text.substr(0, at));
  // Streamed to the terminal: the same text, the stop string held back.
  auto shown = test::run_fak("run -p 'def add(a, b):\n' -n 40 --ignore-eos --stop " + stop);
  EXPECT_EQ(shown.out, text.substr(0, at) + "\n");
}

TEST(Cli, RunWithIdsOnAModelWithoutTokenizer) {
  auto r = test::run_fak("run -m " + test::data_path("oracle/llama-tiny").string() +
                         " --ids 1,2,3 -n 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"].size(), 5u);
  auto t = test::run_fak("run -m " + test::data_path("oracle/llama-tiny").string() + " -p hello");
  EXPECT_NE(t.exit_code, 0);
  EXPECT_NE(t.err.find("no tokenizer.json"), std::string::npos) << t.err;
}

TEST(Cli, TokenizeMatchesGoldenIds) {
  auto ref = reference_json();
  auto r =
      test::run_fak("tokenize " + quote(ref["cases"][2]["prompt"].get<std::string>()) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out), ref["cases"][2]["input_ids"]);
  // A directory holding only tokenizer.json works.
  auto dir = test::temp_dir();
  std::filesystem::copy_file(test::data_path("tokenizer/qwen/tokenizer.json"),
                             dir / "tokenizer.json");
  auto q = test::run_fak("tokenize -m " + dir.string() + " 'Hello world' --json");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(nlohmann::json::parse(q.out), nlohmann::json::parse("[9707, 1879]"));
  // And a GGUF file's vocabulary: the bundled model converted.
  const auto gguf = dir / "model.gguf";
  auto c = test::run_fak("convert -o " + gguf.string());
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto g = test::run_fak("tokenize -m " + gguf.string() + " " +
                         quote(ref["cases"][2]["prompt"].get<std::string>()) + " --json");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(nlohmann::json::parse(g.out), ref["cases"][2]["input_ids"]);
  auto bad = test::run_fak("tokenize -m " + (dir / "missing").string() + " hello");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("neither a directory nor a GGUF file"), std::string::npos) << bad.err;
}

TEST(Cli, PerplexityMatchesReference) {
  auto r =
      test::run_fak("perplexity -f " + test::source_path("models/pycoder-6m/eval.txt").string() +
                    " --ctx 128 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const double want = reference_json()["eval_perplexity_ctx128"]["ppl"].get<double>();
  EXPECT_NEAR(j["ppl"].get<double>(), want, 0.005);
  EXPECT_EQ(j["scored"].get<int>(), 17185);
}

TEST(Cli, EvictCheckReportsZero) {
  auto r = test::run_fak(
      "evict-check --prefix-ids 10,20,30,40,50,60 --span-ids 70,80,90 --suffix-ids 11,12,13 "
      "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["max_abs_diff"].get<double>(), 0.0);
  EXPECT_GT(j["shift_max_abs_diff"].get<double>(), 0.0);
}

TEST(Cli, BenchPrintsJsonTests) {
  auto r = test::run_fak("bench -p 8 -n 4 -r 1 -o json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["test"], "pp8");
  EXPECT_EQ(j["results"][1]["test"], "tg4");
  EXPECT_GT(j["results"][1]["tok_s"].get<double>(), 0);
}

// --activations: auto takes the bf16 product only where this CPU runs it faster than the f32 path
// (bf16_activations_faster), bf16 wherever the CPU has one, f32 never; anything else is refused.
TEST(Cli, ActivationsAutoTakesTheFasterPathOfThisCpu) {
  auto chosen = [](const std::string& mode) {
    auto r = test::run_fak("bench -p 4 -n 0 -r 1 -o json -t 1 --no-membw --activations " + mode);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out).at("bf16_activations").get<bool>();
  };
  EXPECT_EQ(chosen("auto"), bf16_activations_faster());
  EXPECT_EQ(chosen("bf16"), bf16_activations_available());
  EXPECT_FALSE(chosen("f32"));
  auto bad = test::run_fak("bench -p 4 -n 0 -r 1 --activations fp8");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--activations 'fp8': choose auto, f32 or bf16"), std::string::npos)
      << bad.err;
}

// --profile: each part of the model's time per generated token and the weight bytes it read,
// which add up to the bytes the bench counts from the tensor table (the embedding row aside).
TEST(Cli, BenchProfileSplitsADecodeStepByPart) {
  auto r = test::run_fak("bench -p 0 -n 4 -r 2 --profile --no-membw -o json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const nlohmann::json parts = j["results"][0]["profile"];
  std::vector<std::string> names;
  double share = 0, bytes = 0;
  for (const auto& e : parts) {
    names.push_back(e["part"].get<std::string>());
    share += e["share"].get<double>();
    if (e["part"] != "embed") bytes += e["weight_bytes_per_token"].get<double>();
    EXPECT_GT(e["ms_per_token"].get<double>(), 0) << e.dump();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "norms", "attn_proj", "attention", "mlp",
                                             "head"}));
  EXPECT_NEAR(share, 1.0, 1e-9);
  EXPECT_EQ(bytes, j["decode_bytes_per_token"].get<double>());
}

// -d: the tests run again after that many context tokens, named as llama-bench names them; -b
// decodes several sequences at once.
TEST(Cli, BenchRunsTestsAtDepth) {
  auto r = test::run_fak("bench -p 8 -n 4 -d 0,24 -r 1 -o json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 4u);
  EXPECT_EQ(j["results"][0]["test"], "pp8");
  EXPECT_EQ(j["results"][0]["n_depth"], 0);
  EXPECT_EQ(j["results"][2]["test"], "pp8 @ d24");
  EXPECT_EQ(j["results"][3]["test"], "tg4 @ d24");
  EXPECT_EQ(j["results"][3]["n_depth"], 24);
  EXPECT_GT(j["results"][3]["tok_s"].get<double>(), 0);
  // The roof: the measured read bandwidth, the bytes a tg step reads (more at depth: the KV of
  // the context), and the share of the bandwidth that is.
  EXPECT_GT(j["membw_gb_s"].get<double>(), 0);
  EXPECT_GT(j["results"][3]["bytes_per_token"].get<double>(),
            j["results"][1]["bytes_per_token"].get<double>());
  EXPECT_NEAR(j["results"][3]["bytes_per_token"].get<double>() -
                  j["results"][1]["bytes_per_token"].get<double>(),
              24 * j["kv_bytes_per_context_token"].get<double>(), 1.0);
  EXPECT_GT(j["results"][3]["roofline_fraction"].get<double>(), 0);
  // Each tg repetition is held against a probe taken just before it.
  ASSERT_TRUE(j["results"][3].contains("membw_samples"));
  EXPECT_EQ(j["results"][3]["membw_samples"].size(), 1u);
  EXPECT_GT(j["results"][3]["membw_gb_s"].get<double>(), 0);
  const nlohmann::json& tg = j["results"][3];
  EXPECT_NEAR(tg["roofline_fraction"].get<double>(),
              tg["tok_s"].get<double>() * tg["bytes_per_token"].get<double>() / 1e9 /
                  tg["membw_samples"][0].get<double>(),
              1e-9);
  EXPECT_FALSE(j["results"][2].contains("membw_samples"));  // pp rows have no roof
  // -b: sequences decoded in lockstep, every one's tokens counted.
  auto batched = test::run_fak("bench -p 0 -n 4 -b 1,3 -d 16 -r 1 -o json -t 1");
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  auto jb = nlohmann::json::parse(batched.out);
  ASSERT_EQ(jb["results"].size(), 2u);
  EXPECT_EQ(jb["results"][0]["test"], "tg4 @ d16");
  EXPECT_EQ(jb["results"][1]["test"], "tg4 x3 @ d16");
  EXPECT_EQ(jb["results"][1]["n_batch"], 3);
  EXPECT_GT(jb["results"][1]["tok_s"].get<double>(), 0);
  // --same-tokens: named apart (its MoE steps read one token's experts, not the batch's union).
  auto same = test::run_fak("bench -p 0 -n 4 -b 3 --same-tokens -r 1 -o json -t 1 --no-membw");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(nlohmann::json::parse(same.out)["results"][0]["test"], "tg4 x3 same");
  // A depth past the model's context is refused with the reason, before any prefill; so is a
  // prompt that does not fit after its depth (and what would fit is said).
  auto bad = test::run_fak("bench -p 8 -n 0 -d 100000 -r 1 -o json -t 1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("-d 100000: the model's context is 4096 tokens"), std::string::npos)
      << bad.err;
  auto late = test::run_fak("bench -p 512 -n 0 -d 4000 -r 1 -o json -t 1");
  EXPECT_NE(late.exit_code, 0);
  EXPECT_NE(late.err.find("4512 tokens exceed the model's context of 4096 (at this depth the "
                          "longest prompt is 96); nothing was run"),
            std::string::npos)
      << late.err;
  // So are an empty batch and a depth that is not a number, each naming the flag.
  auto no_batch = test::run_fak("bench -p 0 -n 4 -b 0 -r 1 -t 1");
  EXPECT_NE(no_batch.exit_code, 0);
  EXPECT_NE(no_batch.err.find("-b: a batch is at least 1 sequence"), std::string::npos)
      << no_batch.err;
  auto bad_depth = test::run_fak("bench -p 8 -n 0 -d deep -r 1 -t 1");
  EXPECT_NE(bad_depth.exit_code, 0);
  EXPECT_NE(bad_depth.err.find("-d: 'deep' is not a non-negative number"), std::string::npos)
      << bad_depth.err;
}

// fak bench's bandwidth probe: its pool only where a GiB stays free beside it (or where the free
// memory is not known), and any pool and pass sizes read without a fault.
TEST(Cli, BenchProbeTakesItsPoolOnlyWhereAGibStaysFree) {
  constexpr size_t kMiB = size_t(1) << 20;
  EXPECT_EQ(probe_pool_bytes(0), 512 * kMiB);
  EXPECT_EQ(probe_pool_bytes(24 * 1024 * kMiB), 512 * kMiB);
  EXPECT_EQ(probe_pool_bytes(1536 * kMiB), 512 * kMiB);
  EXPECT_EQ(probe_pool_bytes(1536 * kMiB - 1), 0u);
  EXPECT_EQ(probe_pool_bytes(700 * kMiB), 0u);
  EXPECT_GT(measure_read_bandwidth(8 * kMiB, kMiB, 9), 0.0);  // the pool read round more than once
  EXPECT_GT(measure_read_bandwidth(kMiB, 4 * kMiB, 2), 0.0);  // a pass bigger than the pool
}

TEST(CliBadInput, EachGetsOneClearErrorAndNonZeroExit) {
  auto dir = test::temp_dir();
  auto expect_error = [](const test::CommandResult& r, const std::string& needle) {
    EXPECT_NE(r.exit_code, 0) << needle;
    EXPECT_NE(r.err.find("fak: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  };
  expect_error(test::run_fak("run -m /nonexistent/model -p hi"),
               "/nonexistent/model does not exist");
  test::write_file(dir / "bad.txt", std::string("def f():\n  return '\xff\xfe'\n"));
  expect_error(test::run_fak("run -f " + (dir / "bad.txt").string()),
               "bad.txt at byte offset 19 (byte 0xFF)");
  expect_error(test::run_fak("run -f " + (dir / "missing.txt").string()), "missing.txt");
  expect_error(test::run_fak("run -p \"$(printf 'x\\377')\""), "invalid UTF-8 in the prompt");
  // A prompt longer than the model's 4096-token context.
  std::string ids;
  for (int i = 0; i < 4200; ++i) ids += std::to_string(100 + i % 50) + ",";
  test::write_file(dir / "ids.txt", ids);
  expect_error(test::run_fak("run --ids \"$(cat " + (dir / "ids.txt").string() + ")\""),
               "prompt too long: 4200 tokens exceed the model's context of 4096; nothing was run");
  // A prompt that fits but leaves no room for -n: refused before the prefill, saying what fits;
  // what it says fits runs to the end.
  std::string near_full;
  for (int i = 0; i < 4050; ++i) near_full += std::to_string(100 + i % 50) + ",";
  test::write_file(dir / "near_full.txt", near_full);
  const std::string near_full_ids = " --ids \"$(cat " + (dir / "near_full.txt").string() + ")\"";
  expect_error(test::run_fak("run -n 100" + near_full_ids),
               "-n 100: the prompt's 4050 tokens and 100 generated need 4149 positions, more than "
               "the model's context of 4096 (at most -n 47 fits); nothing was run");
  const auto fits = test::run_fak("run -n 47 --ignore-eos --json -t 1" + near_full_ids);
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(nlohmann::json::parse(fits.out)["generated_tokens"], 47);
  expect_error(test::run_fak("run --ids 1,2,99999999"), "outside the vocabulary");
  expect_error(test::run_fak("run --ids 1,x"), "'x' is not a token id");
  std::filesystem::create_directories(dir / "weird");
  test::write_file(dir / "weird/config.json", R"({"model_type": "gpt_neox", "hidden_size": 8})");
  expect_error(test::run_fak("run -m " + (dir / "weird").string() + " --ids 1"),
               "model_type 'gpt_neox' is not supported");
  expect_error(test::run_fak("parity -m " + test::data_path("oracle/qwen2-tiny").string() +
                             " --reference " + (dir / "ids.txt").string()),
               "ids.txt");
  expect_error(test::run_fak("perplexity -f " + (dir / "nope.txt").string()), "nope.txt");
}

// Sampling flags are checked by SamplingOptions::validate (the one set of rules), before
// the model loads: exactly one line naming the field, its range and the value, and exit 1.
// A KV cache the machine cannot hold is refused before the model prefills anything: a 2-layer
// model with a 16M-token context and wide KV heads, at a depth whose f32 KV (with pre-RoPE keys)
// is 750 GiB, far past any machine's free memory.
TEST(CliBadInput, KvBeyondTheMachinesMemoryIsRefusedBeforeWork) {
  const auto dir = test::temp_dir();
  auto cfg =
      nlohmann::json::parse(test::read_file(test::source_path("models/pycoder-6m/config.json")));
  cfg["num_hidden_layers"] = 2;
  cfg["layer_types"] = {"full_attention", "full_attention"};
  cfg["num_key_value_heads"] = 8;
  cfg["head_dim"] = 256;
  cfg["max_position_embeddings"] = 16777216;
  test::write_file(dir / "wide.json", cfg.dump());
  const auto model = dir / "wide";
  auto synth = test::run_fak("synth --config " + (dir / "wide.json").string() + " -o " +
                             model.string() + " --dtype bf16 --std 0.1 --tokenizer " +
                             test::source_path("models/pycoder-6m").string());
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  auto deep = test::run_fak("bench -m " + model.string() +
                            " -p 8 -n 0 -d 16000000 --kv-type f32 --kraw -r 1 -t 1");
  EXPECT_NE(deep.exit_code, 0);
  EXPECT_NE(deep.err.find("16000008 tokens of KV need 750000 MiB, more than the "),
            std::string::npos)
      << deep.err;
  EXPECT_NE(deep.err.find("this machine can still give"), std::string::npos) << deep.err;
  EXPECT_NE(deep.err.find("49152 bytes/token"), std::string::npos) << deep.err;
  EXPECT_NE(deep.err.find("; nothing was run"), std::string::npos) << deep.err;
  // The same model at a depth that fits runs.
  auto shallow = test::run_fak("bench -m " + model.string() + " -p 8 -n 2 -d 16 -r 1 -t 1");
  EXPECT_EQ(shallow.exit_code, 0) << shallow.err;
}

TEST(CliBadInput, SamplingFlagsOutOfRangeGetOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run -p hi --repeat-penalty 0", "repetition_penalty must be > 0 and <= 10, got 0"},
      {"run -p hi --min-p 1", "min_p must be >= 0 and < 1, got 1"},
      {"run -p hi --top-p 0", "top_p must be > 0 and <= 1, got 0"},
      {"run -p hi --top-k -3", "top_k must be >= 0, got -3"},
      {"run -p hi --temp nan", "temperature must be >= 0 and <= 100, got nan"},
      {"run -p hi --temp 1e9", "temperature must be >= 0 and <= 100, got 1e+09"},
      {"run -p hi --presence-penalty 3", "presence_penalty must be >= -2 and <= 2, got 3"},
      {"run -p hi --frequency-penalty -2.5", "frequency_penalty must be >= -2 and <= 2, got -2.5"},
      {"chat --temp -1 < /dev/null", "temperature must be >= 0 and <= 100, got -1"},
  };
  for (const auto& [args, message] : cases) {
    auto r = test::run_fak(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, "fak: error: " + message + "\n") << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

// The penalties reach the sampler: at 0 the greedy reference comes back exactly; a frequency
// penalty turns the bundled model's repetitive Python into a continuation with fewer repeats.
TEST(Cli, PresenceAndFrequencyPenaltiesApplyToGreedy) {
  const auto ref = reference_json();
  const auto& c = ref["cases"][0];
  const std::string run =
      "run -p " + quote(c["prompt"].get<std::string>()) + " -n 48 --ignore-eos --json -t 1";
  auto zero = test::run_fak(run + " --presence-penalty 0 --frequency-penalty 0");
  ASSERT_EQ(zero.exit_code, 0) << zero.err;
  EXPECT_EQ(nlohmann::json::parse(zero.out)["ids"], c["greedy_ids"]);
  auto penalised = test::run_fak(run + " --presence-penalty 0.5 --frequency-penalty 1.5");
  ASSERT_EQ(penalised.exit_code, 0) << penalised.err;
  const auto ids = nlohmann::json::parse(penalised.out)["ids"].get<std::vector<int32_t>>();
  const auto greedy = c["greedy_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), greedy.size());
  EXPECT_NE(ids, greedy);
  auto distinct = [](std::vector<int32_t> v) {
    std::sort(v.begin(), v.end());
    return std::unique(v.begin(), v.end()) - v.begin();
  };
  EXPECT_GT(distinct(ids), distinct(greedy));
}

// --draft ngram: speculative decoding gives plain greedy's ids in fewer forward calls, with the
// counts in --json; a hybrid model decodes plainly and says why; bad draft flags get one line.
TEST(Cli, RunDraftNgramEqualsPlainGreedy) {
  auto dir = test::temp_dir();
  const std::string text = test::read_file(test::source_path("models/pycoder-6m/eval.txt"));
  const std::string code = text.substr(text.find("\ndef ") + 1, 900);
  test::write_file(dir / "edit.txt", code + "\n# The same code again:\n" + code.substr(0, 80));
  const std::string run =
      "run -f " + (dir / "edit.txt").string() + " -n 96 --ignore-eos --json -t 1";
  auto plain = test::run_fak(run);
  auto spec = test::run_fak(run + " --draft ngram --draft-max 6 --draft-ngram 2");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  const auto p = nlohmann::json::parse(plain.out), s = nlohmann::json::parse(spec.out);
  EXPECT_EQ(p["ids"], s["ids"]);
  EXPECT_EQ(p["ids"].size(), 96u);
  EXPECT_EQ(p["draft"], "none");
  EXPECT_FALSE(p.contains("spec_steps"));
  EXPECT_EQ(s["draft"], "ngram");
  EXPECT_GT(s["spec_steps"].get<int>(), 0);
  EXPECT_GT(s["spec_accepted"].get<int>(), 0);
  EXPECT_LE(s["spec_accepted"].get<int>(), s["spec_drafted"].get<int>());
  EXPECT_LT(s["forward_calls"].get<int>(), p["forward_calls"].get<int>());
  EXPECT_GT(s["tokens_per_step"].get<double>(), 1.5);
  // Streaming prints the same text and the acceptance on stderr.
  auto streamed = test::run_fak("run -f " + (dir / "edit.txt").string() +
                                " -n 96 --ignore-eos -t 1 --draft ngram");
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(streamed.out, p["text"].get<std::string>() + "\n");
  EXPECT_NE(streamed.err.find("accepted"), std::string::npos) << streamed.err;

  // Hybrids speculate too (their DeltaNet state drops a rejected tail exactly): the prompt repeats
  // itself, so drafts are proposed, and the random model rejects them; the output stays plain's.
  const std::string hybrid =
      "run -m " + test::data_path("oracle/qwen35-hybrid-tiny").string() +
      " --ids 5,6,7,5,6,184,58,392,287,504,421,372,103,307,100,493,482,5,6,7,5,6 -n 24 --json";
  auto h_plain = test::run_fak(hybrid);
  auto h_spec = test::run_fak(hybrid + " --draft ngram --draft-ngram 2");
  ASSERT_EQ(h_spec.exit_code, 0) << h_spec.err;
  const auto hj = nlohmann::json::parse(h_spec.out);
  EXPECT_EQ(hj["ids"], nlohmann::json::parse(h_plain.out)["ids"]);
  EXPECT_EQ(hj["ids"].size(), 24u);
  EXPECT_EQ(hj["draft"], "ngram");
  EXPECT_FALSE(hj.contains("draft_off"));
  EXPECT_GT(hj["spec_drafted"].get<int>(), 0);
  EXPECT_EQ(h_spec.err.find("speculative decoding is off"), std::string::npos) << h_spec.err;

  auto bad_len = test::run_fak("run -p hi --draft ngram --draft-max 0");
  EXPECT_EQ(bad_len.exit_code, 1);
  EXPECT_EQ(bad_len.err, "fak: error: draft length must be 1 to 64, got 0\n");
  auto bad_kind = test::run_fak("run -p hi --draft eagle");
  EXPECT_NE(bad_kind.exit_code, 0);
  EXPECT_NE(bad_kind.err.find("--draft"), std::string::npos) << bad_kind.err;
}

// The benchmark's arms all decode plain greedy's tokens and report what they measured.
TEST(Cli, SpecbenchArmsAgreeAndReportAcceptance) {
  auto r = test::run_fak("specbench -n 24 -r 1 --draft-max 4 --oracle --json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["identical"].get<bool>());
  ASSERT_EQ(j["arms"].size(), 3u);
  EXPECT_EQ(j["arms"][0]["draft"], "none");
  EXPECT_EQ(j["arms"][1]["draft"], "ngram");
  const auto& oracle = j["arms"][2];
  EXPECT_EQ(oracle["draft"], "oracle");
  EXPECT_EQ(oracle["spec_accepted"], oracle["spec_drafted"]);
  EXPECT_GT(oracle["tokens_per_step"].get<double>(), 3.0);
  for (const auto& arm : j["arms"]) EXPECT_GT(arm["tok_s"].get<double>(), 0);
}

TEST(Cli, EverySubcommandHasHelp) {
  for (const char* cmd : {"run", "tokenize", "parity", "perplexity", "bench", "evict-check",
                          "agentbench", "convert", "quantize", "synth", "specbench"}) {
    auto r = test::run_fak(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << cmd;
  }
}

// The benchmark's arms must decode the same greedy tokens (reuse is exact) and count the work
// each arm did: the shared prefix once in (c), once per agent in (b); each turn after the first
// prefills the previous turn's last decoded token with its tool result.
TEST(Cli, AgentbenchArmsAgreeAndCountTokens) {
  auto r = test::run_fak("agentbench -A 3 -T 2 -P 40 -R 8 -D 4 --json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["outputs_identical"].get<bool>());
  ASSERT_EQ(j["arms"].size(), 3u);
  EXPECT_EQ(j["arms"][1]["tokens_prefilled"].get<int>(), 3 * 40 + 3 * (2 * 8 + 1));
  EXPECT_EQ(j["arms"][2]["tokens_prefilled"].get<int>(), 40 + 3 * (2 * 8 + 1));
  EXPECT_EQ(j["arms"][2]["tokens_decoded"].get<int>(), 3 * 2 * 4);
}

// Arm (a) measured on 2 of 4 turns: the first and the last, whose contexts come from arm (b)'s
// tokens; their decoded tokens must still be (b)'s, and the work counted is that of all 4 turns.
TEST(Cli, AgentbenchReprefillArmMeasuresSpreadTurns) {
  auto r = test::run_fak("agentbench -A 3 -T 4 -P 40 -R 8 -D 4 --a-turns 2 --json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["outputs_identical"].get<bool>());
  const auto& a = j["arms"][0];
  ASSERT_EQ(a["arm"], "a_reprefill");
  EXPECT_TRUE(a["extrapolated"].get<bool>());
  EXPECT_EQ(a["extrapolation"]["measured_turns"], nlohmann::json::array({0, 3}));
  // Contexts of turns 0..3: 40 + (t + 1) * 8 + t * 4 tokens, for each of 3 agents.
  EXPECT_EQ(a["tokens_prefilled"].get<int>(), 3 * (48 + 60 + 72 + 84));
  EXPECT_GT(a["seconds"].get<double>(), 0.0);
}

}  // namespace fak

namespace fak {

// The README's first command is what a newcomer runs on a fresh box (issue 23): no sudo (a fresh
// root box has none; .ci/install-deps uses it itself when needed), only the fak binary built
// before the first token, and a demo prompt the bundled model continues well: it ends with a
// newline, so the model writes a function body, not `# noqa: E501` and a loop of comments.
TEST(Readme, TheFirstCommandWorksOnAFreshBoxAndShowsTheModelAtItsBest) {
  const std::string readme = test::read_file(test::source_path("README.md"));
  const size_t block = readme.find("```sh\n");
  ASSERT_NE(block, std::string::npos);
  size_t at = block + 6;
  while (readme[at] == '#') at = readme.find('\n', at) + 1;  // the block's comment line
  const std::string first = readme.substr(at, readme.find('\n', at) - at);
  EXPECT_EQ(first.find("sudo"), std::string::npos) << first;
  EXPECT_NE(first.find("--target fak"), std::string::npos) << first;
  const size_t run = first.rfind("build/fak run ");
  ASSERT_NE(run, std::string::npos) << first;
  // The run as the README spells it (bash quoting), with the binary under test.
  const std::string args = first.substr(run + std::string("build/fak ").size());
  const std::string script = test::temp_dir() / "first.sh";
  test::write_file(script, "exec " + std::string(FAK_BINARY) + " " + args + " -t 1\n");
  const auto out = test::temp_dir() / "out";
  ASSERT_EQ(std::system(("bash " + script + " > " + out.string() + " 2>/dev/null").c_str()), 0);
  const std::string text = test::read_file(out);
  EXPECT_EQ(text.find("noqa"), std::string::npos) << text;
  EXPECT_EQ(text.rfind("    ", 0), 0u) << "not a function body: " << text;
  EXPECT_NE(text.find("return"), std::string::npos) << text;
  // The README shows what it prints.
  EXPECT_NE(readme.find(text.substr(0, text.find('\n'))), std::string::npos) << text;
}

}  // namespace fak
