// Response framing: the status line and fields of a reply, and chunked-body pieces. Written by
// hand (not Beast's serializer) so a streamed body is just bytes appended per event.
#pragma once

#include <string>
#include <string_view>

#include "cli/serve/http/message.hpp"

namespace waste::serve::http {

enum class BodyFraming { length, chunked, until_close };

// "HTTP/1.1 STATUS REASON" and the fields: Content-Type, the reply's own headers, Content-Length
// (framing length: the reply's body size) or Transfer-Encoding: chunked, and Connection.
std::string response_head(const Reply& reply, BodyFraming framing, bool keep_alive);
// The whole of a reply with a body in hand.
std::string response_bytes(const Reply& reply, bool keep_alive);
// One chunk of a chunked body (empty data: nothing, so it cannot end the body by accident).
void append_chunk(std::string& out, std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
inline constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace waste::serve::http
