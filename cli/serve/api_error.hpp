// An OpenAI error answer before any byte of a response is sent: the HTTP status and the four
// keys of {"error": {message, type, param, code}}. Parsing and admission return these; the HTTP
// layer only serializes them (openai_response.hpp), so a client mistake is never a 5xx.
#pragma once

#include <string>

namespace waste::serve {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" => null
  std::string code;   // "" => null
};

inline ApiError bad_param(std::string param, std::string message) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

}  // namespace waste::serve
