#include "cli/serve/api_reply.hpp"

#include "cli/serve/openai_response.hpp"

namespace waste::serve {

http::Reply json_reply(int status, const nlohmann::json& doc) {
  http::Reply reply;
  reply.status = status;
  reply.body = dump(doc);
  return reply;
}

http::Reply error_reply(const ApiError& error) {
  http::Reply reply = json_reply(error.status, error_json(error));
  if (error.status == 429) reply.headers.emplace_back("Retry-After", "1");
  // A model that does not fit the budget will not fit on a retry either (OpenAI's clients retry
  // every 5xx unless told not to).
  if (error.status == 507) reply.headers.emplace_back("x-should-retry", "false");
  return reply;
}

}  // namespace waste::serve
