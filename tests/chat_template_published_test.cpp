// The chat templates checkpoints are published with (tests/data/templates: Qwen2.5, Qwen3,
// Qwen3-Coder, Qwen3.5, Llama 3.1/3.2, gpt-oss, Gemma 3, GLM-4.5, DeepSeek R1/V3.1, Hermes 3,
// Mistral Nemo, Devstral; SOURCES.md says where each is from) render byte for byte as
// transformers' jinja2 environment renders them (goldens.json, made by gen_goldens.py with
// Debian's python3-jinja2 set up as apply_chat_template sets it up), over multi-turn, system
// prompts, tools, tool calls with arguments as object and as string, tool results, reasoning
// content, content parts, add_generation_prompt and enable_thinking; where jinja2 raises, fak does.
// Also where a checkpoint keeps its template (chat_template.jinja, chat_template.json,
// tokenizer_config.json) and what a model without one gets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <string>

#include "chat/chat_prompt.h"
#include "chat/chat_template.h"
#include "core/error.h"
#include "core/json.h"
#include "server_process.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fak {
namespace {

using ordered_json = fak::ojson;

std::tm parse_time(const std::string& iso) {
  std::tm tm{};
  ::strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  tm.tm_isdst = -1;
  std::time_t t = std::mktime(&tm);  // fills the weekday and the day of the year
  localtime_r(&t, &tm);
  return tm;
}

TEST(PublishedTemplates, RenderAsTransformersJinja2Does) {
  const ordered_json goldens =
      ordered_json::parse(test::read_file(test::data_path("templates/goldens.json")));
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, file] : goldens["templates"].items())
    templates.emplace(name, ChatTemplate::parse(test::read_file(
                                test::data_path("templates/" + file.get<std::string>()))));
  ASSERT_EQ(templates.size(), 15u);
  size_t renders = 0, errors = 0;
  for (const ordered_json& c : goldens["cases"]) {
    const std::string name = c["template"];
    SCOPED_TRACE(name + " / " + c["case"].get<std::string>());
    ordered_json extra = ordered_json::object();
    for (const auto& [k, v] : c["context"].items())
      if (k != "messages" && k != "tools" && k != "add_generation_prompt") extra[k] = v;
    RenderBounds bounds;
    if (c.contains("strftime_now")) bounds.now = parse_time(c["strftime_now"]);
    std::string got, error;
    try {
      got = templates.at(name).render(c["context"]["messages"], c["context"]["tools"],
                                      c["context"]["add_generation_prompt"].get<bool>(), extra,
                                      bounds);
    } catch (const Error& e) {
      error = e.what();
    }
    if (c.contains("error")) {
      EXPECT_FALSE(error.empty()) << "jinja2 raised (" << c["error"].get<std::string>()
                                  << "), fak rendered:\n"
                                  << got;
      ++errors;
    } else {
      EXPECT_EQ(error, "");
      EXPECT_EQ(got, c["expected"].get<std::string>());
      ++renders;
    }
  }
  EXPECT_GE(renders, 250u);
  EXPECT_GE(errors, 40u);
}

// transformers' order: chat_template.jinja, then chat_template.json, then tokenizer_config.json.
TEST(TemplateFiles, ACheckpointsOwnTemplateFileWins) {
  const auto dir = test::temp_dir() / "model";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(test::source_path("models/pycoder-6m/tokenizer.json"),
                             dir / "tokenizer.json");
  ordered_json config = ordered_json::parse(
      test::read_file(test::source_path("models/pycoder-6m/tokenizer_config.json")));
  config["chat_template"] = "from tokenizer_config";
  test::write_file(dir / "tokenizer_config.json", config.dump());
  EXPECT_EQ(Tokenizer::from_dir(dir).spec().chat_template, "from tokenizer_config");
  test::write_file(dir / "chat_template.json",
                   ordered_json{{"chat_template", "from chat_template.json"}}.dump());
  EXPECT_EQ(Tokenizer::from_dir(dir).spec().chat_template, "from chat_template.json");
  test::write_file(dir / "chat_template.jinja", "from chat_template.jinja\n");
  EXPECT_EQ(Tokenizer::from_dir(dir).spec().chat_template, "from chat_template.jinja\n");
  // A chat_template.json without one is refused naming the file.
  std::filesystem::remove(dir / "chat_template.jinja");
  test::write_file(dir / "chat_template.json", "{\"other\": 1}");
  try {
    Tokenizer::from_dir(dir);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("chat_template.json: no chat_template in it"));
  }
}

// A model with no template of its own: ChatML stands in, and the server says so at start.
TEST(TemplateFiles, AModelWithoutATemplateIsSaidSoAtLoad) {
  const auto model = test::temp_dir() / "no-template";
  std::filesystem::copy(test::source_path("models/pycoder-6m"), model);
  ordered_json config = ordered_json::parse(test::read_file(model / "tokenizer_config.json"));
  config.erase("chat_template");
  test::write_file(model / "tokenizer_config.json", config.dump());
  const Tokenizer tok = Tokenizer::from_dir(model);
  EXPECT_FALSE(chat::ChatPrompt(tok, {}).has_model_template());
  EXPECT_TRUE(chat::ChatPrompt(test::pycoder_tokenizer(), {}).has_model_template());
  test::ServerProcess server("-m " + model.string());
  ASSERT_NE(server.port(), 0);
  EXPECT_THAT(server.log(), ::testing::HasSubstr("has no chat template"));
  EXPECT_THAT(server.log(), ::testing::HasSubstr("use ChatML"));
}

}  // namespace
}  // namespace fak
