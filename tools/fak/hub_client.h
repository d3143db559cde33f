// The Hugging Face hub's HTTP side of `fak pull`: requests with hand-followed redirects (the token
// never leaves the hub's host), resumable downloads with progress, and the parsing of the values
// a hub sends. Everything a hub answers is untrusted: malformed values become one fak::Error line.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace fak::cli {

// huggingface_hub's quote(path, safe="/"): file names may hold spaces, '#', '?'.
std::string url_quote(const std::string& s, bool keep_slash);
std::string human_bytes(double b);

// The hub's reasons (X-Error-Code) made into one line the user can act on.
[[noreturn]] void fail_http(const std::string& what, const httplib::Response& res, bool has_token);

class Hub {
 public:
  Hub(std::string endpoint, std::string token);
  const std::string& endpoint() const { return endpoint_; }
  bool has_token() const { return !token_.empty(); }

  // One request, following redirects by hand: httplib would forward every header, and a
  // presigned CDN URL refuses a request that also carries our Authorization header; and like
  // huggingface_hub we never send the token to another host. on_body (GET only) sees the final
  // response's body; on_response sees the final response's status and headers.
  httplib::Result send(const std::string& method, const std::string& url,
                       const httplib::Headers& extra, bool follow_cross_host,
                       const std::function<bool(const httplib::Response&)>& on_response = nullptr,
                       const std::function<bool(const char*, size_t)>& on_body = nullptr);
  // GET endpoint + path as JSON; a body over kMaxJsonBytes or not JSON is an error naming `what`.
  nlohmann::json get_json(const std::string& path, const std::string& what);

 private:
  std::string endpoint_, origin_, token_;
};

// Lowercase hex digest of a file: sha256 (LFS oids) or git's blob sha1 ("blob <size>\0" + bytes).
std::string file_hash(const std::filesystem::path& path, bool git_blob_sha1);
// An ETag without quotes or the weak prefix, as huggingface_hub's _normalize_etag.
std::string normalize_etag(std::string e);

// Downloads url into `partial`, continuing from its current length, until it holds `size` bytes.
// A broken connection is resumed with a Range header, a few times with a growing pause.
void download(Hub& hub, const std::string& url, const std::filesystem::path& partial, uint64_t size,
              const std::string& name);

// $HF_TOKEN, else the file `huggingface-cli login` writes ($HF_TOKEN_PATH or $HF_HOME/token).
std::string hub_token();

// Refuses, before a byte is written, a download of `bytes` into `dir` (or its nearest existing
// parent) that would leave the file system with less than a margin free.
void check_free_space(const std::filesystem::path& dir, uint64_t bytes, const std::string& what);

}  // namespace fak::cli
