// The error a client caused, as OpenAI reports it: an HTTP status plus {message, type, param,
// code}. Thrown anywhere under a route and turned into a response once, at the route wrapper.
#pragma once

#include <stdexcept>
#include <string>

namespace fak::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "")
      : std::runtime_error(std::move(message)),
        status(status),
        param(std::move(param)),
        code(std::move(code)),
        type(type.empty() ? default_type(status) : std::move(type)) {}

  int status;
  std::string param, code, type;

 private:
  static std::string default_type(int status) {
    if (status == 401) return "authentication_error";
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
  }
};

[[noreturn]] inline void bad_request(const std::string& message, const std::string& param = "") {
  throw ApiError(400, message, param);
}

}  // namespace fak::server
