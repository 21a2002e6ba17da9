// OpenAI-shaped replies for the transport: a JSON body, or an ApiError as
// {"error": {...}} (429 with Retry-After: 1, 507 with x-should-retry: false). Every 4xx/5xx the server sends is built here.
#pragma once

#include <nlohmann/json.hpp>

#include "cli/serve/api_error.hpp"
#include "cli/serve/http/message.hpp"

namespace waste::serve {

http::Reply json_reply(int status, const nlohmann::json& doc);
http::Reply error_reply(const ApiError& error);

}  // namespace waste::serve
