// libFuzzer: `waste serve`'s HTTP request reading (request line, header fields, Content-Length and
// chunked bodies) through check_request(), the parser configuration the server's connections use,
// with the server's limits scaled down so inputs reach them. Byte 0 picks how the bytes arrive
// (1..255 bytes per segment, 0 = all at once), as TCP may split them. Checked: a refusal is 400, 413 or 431
// with a message; a complete request is within every limit and consumed no more than it was given.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/serve/http/request_parser.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace waste::serve::http;
  HttpLimits limits;
  limits.header_bytes = 2048;
  limits.max_headers = 16;
  limits.body_bytes = 4096;
  if (size < 1) return 0;
  const std::size_t segment = data[0] == 0 ? SIZE_MAX : data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const CheckedRequest r = check_request(bytes, limits, segment);
  if (r.consumed > bytes.size()) __builtin_trap();
  if (r.refused) {
    const int s = r.refusal.status;
    if ((s != 400 && s != 413 && s != 431) || r.refusal.message.empty() || r.complete) __builtin_trap();
    return 0;
  }
  if (!r.complete) return 0;
  if (r.request.body.size() > limits.body_bytes) __builtin_trap();
  if (r.request.method.empty()) __builtin_trap();
  if (r.request.version != 10 && r.request.version != 11) __builtin_trap();
  if (r.request.path.find('?') != std::string_view::npos) __builtin_trap();
  return 0;
}
