// libFuzzer target for the whole request path of `fak serve`, in-process: raw HTTP bytes -> the
// transport's own parser and limits -> auth and routing -> JSON parsing and validation -> prompt
// building (tokenizer, chat template) -> scheduler admission -> batched decoding on the bundled
// model -> a whole or streamed reply. Any bytes must get a well-formed HTTP response (none for an
// incomplete request, as a real client would time out) whose status is never a 500: every
// client mistake is a 4xx, and nothing a client sends may crash or wedge the server.
//
// Input: the first byte picks the framing so mutations reach deep quickly. 0-15: the rest is the
// raw request. Otherwise the rest is a JSON body sent to one of the routes below (byte % routes),
// with a Content-Length, or chunked when bit 6 is set, and a tenant's key when bit 5 is set (the
// app runs with keys "k1" and "k2", so unauthenticated raw requests exercise the 401 path too).
// Session routes address "s1", which initialisation creates with some text in it. The server runs
// with speculative decoding on (--draft ngram), as the request path is then at its most complex.
//
// Seeds: fuzz/corpus/server_request. CI replays them, plus seeded mutations (fuzz/replay_main.cpp).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "models/model.h"
#include "scratch_path.h"
#include "server/server.h"

namespace {

fak::server::ServerApp& app() {
  static fak::server::ServerApp* instance = [] {
    auto model = fak::Model::load(std::filesystem::path(FAK_SOURCE_DIR) / "models/pycoder-6m");
    fak::server::ServerOptions o;
    o.api_keys = {"k1", "k2"};
    o.parallel = 2;
    o.max_queue = 4;
    o.ctx = 96;  // bounds the work any one input can ask for
    o.cache_mib = 16;
    o.draft = fak::DraftOptions{};  // speculative decoding on: its paths are fuzzed too
    static const fuzz::ScratchPath sessions("fak_server_fuzz", "");
    o.session_dir = sessions.path().string();
    auto* a = new fak::server::ServerApp(std::move(model), o);
    a->handle_raw(
        "POST /v1/fak/sessions HTTP/1.1\r\nAuthorization: Bearer k1\r\nContent-Length: 44\r\n\r\n"
        "{\"id\": \"s1\", \"text\": \"def add(a, b):\\n    r\"}");
    return a;
  }();
  return *instance;
}

const char* kRoutes[] = {
    "POST /v1/completions",
    "POST /v1/chat/completions",
    "POST /v1/fak/sessions",
    "POST /v1/fak/sessions/s1/append",
    "POST /v1/fak/sessions/s1/generate",
    "POST /v1/fak/sessions/s1/quarantine",
    "POST /v1/fak/sessions/s1/clone",
    "POST /v1/fak/sessions/s1/save",
    "POST /v1/fak/sessions/load",
    "GET /v1/fak/sessions/s1",
    "DELETE /v1/fak/sessions/s1",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "POST /v1/responses",
};

std::string framed(uint8_t selector, const std::string& body) {
  const size_t n_routes = sizeof kRoutes / sizeof kRoutes[0];
  std::string r = std::string(kRoutes[selector % n_routes]) + " HTTP/1.1\r\nHost: fuzz\r\n";
  if (selector & 32) r += "Authorization: Bearer k1\r\n";
  if (selector & 64) {
    r += "Transfer-Encoding: chunked\r\n\r\n";
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", body.size());
    if (!body.empty()) r += size + body + "\r\n";
    return r + "0\r\n\r\n";
  }
  return r + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string request = data[0] < 16 ? rest : framed(data[0], rest);
  const std::string response = app().handle_raw(request);
  if (response.empty()) return 0;
  // "HTTP/1.x NNN ..." and a status that is the client's doing or a success.
  if (response.size() < 12 || response.compare(0, 7, "HTTP/1.") != 0) {
    std::fprintf(stderr, "malformed response: %.200s\n", response.c_str());
    std::abort();
  }
  // 503 (out of KV memory, overloaded) and 507 (a full disk) describe the server's state, which
  // inputs accumulate (sessions); a 500 or anything unknown is a bug.
  const int status = std::atoi(response.c_str() + 9);
  if (status < 200 || (status >= 500 && status != 503 && status != 507)) {
    std::fprintf(stderr, "status %d for request:\n%.400s\nresponse:\n%.600s\n", status,
                 request.c_str(), response.c_str());
    std::abort();
  }
  return 0;
}
