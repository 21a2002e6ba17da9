// libFuzzer: `waste serve`'s request parser on raw HTTP bodies (the one input any client on the
// port controls). Byte 0 picks the endpoint; the rest is the body. Checked: a refusal is a 400
// whose message is non-empty; an accepted request respects the limits the parser documents.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/serve/openai_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  using namespace waste::serve;
  const Endpoint endpoint = (data[0] & 1) ? Endpoint::completion : Endpoint::chat;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = parse_request(endpoint, body);
  if (!r) {
    if (r.error().message.empty() || r.error().status != 400) __builtin_trap();
    return 0;
  }
  if (r->stop.size() > std::size_t(kMaxStops)) __builtin_trap();
  if (r->top_logprobs < 0 || r->top_logprobs > kMaxTopLogprobs) __builtin_trap();
  if (r->logit_bias.size() > kMaxLogitBias) __builtin_trap();
  if (r->tools.size() > std::size_t(kMaxTools)) __builtin_trap();
  for (const auto& s : r->stop) {
    if (s.empty()) __builtin_trap();
  }
  for (const auto& [id, bias] : r->logit_bias) {
    if (id < 0 || !(bias >= -100.0f && bias <= 100.0f)) __builtin_trap();
  }
  // image_url parts: user messages only, at most kMaxImages, each placed within its message's text.
  if (r->images.size() > kMaxImages) __builtin_trap();
  for (const ImagePart& image : r->images) {
    if (image.message >= r->messages.size() || r->messages[image.message].role != waste::ChatRole::user) __builtin_trap();
    if (image.offset > r->messages[image.message].content.size() || image.bytes.empty()) __builtin_trap();
  }
  (void)r->has_tool_history();
  return 0;
}
