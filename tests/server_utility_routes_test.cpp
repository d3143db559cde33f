// llama-server's utility routes on fak serve (server/utility_routes.cpp), with llama-server's
// request and response shapes: /tokenize (pieces, special-token parsing, mixed content),
// /detokenize, /apply-template (the prompt a chat request runs) and /props.
#include <gtest/gtest.h>

#include "chat/chat_prompt.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fak::test {
namespace {

class UtilityRoutes : public TwoSlotServerSuite {};

TEST_F(UtilityRoutes, TokenizeAndDetokenizeAsLlamaServer) {
  const Tokenizer& tok = pycoder_tokenizer();
  const std::string text = "def f(x):\n    return x  # ünïcode<|endoftext|>";
  HttpReply r = post_json(port(), "/tokenize", ojson{{"content", text}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["tokens"].get<std::vector<int32_t>>(), tok.encode(text));
  // parse_special false: the special token's text is text.
  r = post_json(port(), "/tokenize", ojson{{"content", text}, {"parse_special", false}});
  EXPECT_EQ(r.j()["tokens"].get<std::vector<int32_t>>(), tok.encode(text, false));
  // with_pieces: each id with its text, or its bytes where they are not whole UTF-8.
  r = post_json(port(), "/tokenize", ojson{{"content", "ü"}, {"with_pieces", true}});
  const ojson pieces = r.j()["tokens"];
  std::string joined;
  for (const ojson& p : pieces) {
    ASSERT_TRUE(p.contains("id") && p.contains("piece")) << r.body;
    if (p["piece"].is_string()) {
      joined += p["piece"].get<std::string>();
    } else {
      for (const ojson& b : p["piece"]) joined += char(b.get<int>());
    }
  }
  EXPECT_EQ(joined, "ü");
  // Mixed content: text and ids in one array.
  r = post_json(port(), "/tokenize", ojson{{"content", ojson::array({"def", 5, " g"})}});
  std::vector<int32_t> want = tok.encode("def");
  want.push_back(5);
  for (int32_t id : tok.encode(" g")) want.push_back(id);
  EXPECT_EQ(r.j()["tokens"].get<std::vector<int32_t>>(), want);
  // Back to text.
  r = post_json(port(), "/detokenize", ojson{{"tokens", tok.encode(text)}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["content"], text);
  // Ids the model does not have are a 400 naming the field.
  r = post_json(port(), "/detokenize", ojson{{"tokens", {1, 999999}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("tokens"), std::string::npos) << r.body;
  // And a key is needed, as on every route but /health.
  EXPECT_EQ(post_json(port(), "/tokenize", ojson{{"content", "x"}}, {}).status, 401);
}

TEST_F(UtilityRoutes, ApplyTemplateIsThePromptAChatRequestRuns) {
  const ojson messages = {{{"role", "system"}, {"content", "Be brief."}},
                          {{"role", "user"}, {"content", "Sort a list <|im_end|>"}}};
  const HttpReply r = post_json(port(), "/apply-template", ojson{{"messages", messages}});
  ASSERT_EQ(r.status, 200) << r.body;
  const chat::ChatPrompt prompt(pycoder_tokenizer(), {});
  const std::string want = strip_literal_marks(prompt.render(messages, nullptr, true));
  EXPECT_EQ(r.j()["prompt"], want);
  EXPECT_NE(want.find("<|im_start|>assistant"), std::string::npos) << want;
  // Its tokens are the ones the completion reports as its prompt.
  const HttpReply c =
      post_json(port(), "/v1/chat/completions",
                ojson{{"model", "pycoder-6m"}, {"max_tokens", 1}, {"messages", messages}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.j()["usage"]["prompt_tokens"].get<size_t>(),
            prompt.encode(prompt.render(messages, nullptr, true)).size());
}

TEST_F(UtilityRoutes, PropsDescribeTheModelAndTheServer) {
  const HttpReply r = get_json(port(), "/props");
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson p = r.j();
  EXPECT_EQ(p["total_slots"], 2);
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], 512);
  EXPECT_EQ(p["model_alias"], "pycoder-6m");
  EXPECT_EQ(p["chat_template"], pycoder_tokenizer().spec().chat_template);
  EXPECT_EQ(p["modalities"]["vision"], false);
  EXPECT_EQ(p["eos_token"], "<|endoftext|>");
}

}  // namespace
}  // namespace fak::test
