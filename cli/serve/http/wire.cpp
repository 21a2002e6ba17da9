#include "cli/serve/http/wire.hpp"

#include <cstdio>

#include <boost/beast/http/status.hpp>

namespace waste::serve::http {

std::string response_head(const Reply& reply, BodyFraming framing, bool keep_alive) {
  namespace bh = boost::beast::http;
  const auto reason = bh::obsolete_reason(bh::int_to_status(unsigned(reply.status)));
  std::string head = "HTTP/1.1 " + std::to_string(reply.status) + " " + std::string(reason.data(), reason.size()) + "\r\n";
  head += "Content-Type: " + reply.content_type + "\r\n";
  for (const auto& [name, value] : reply.headers) head += name + ": " + value + "\r\n";
  switch (framing) {
    case BodyFraming::length: head += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n"; break;
    case BodyFraming::chunked: head += "Transfer-Encoding: chunked\r\n"; break;
    case BodyFraming::until_close: break;
  }
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return head;
}

std::string response_bytes(const Reply& reply, bool keep_alive) {
  return response_head(reply, BodyFraming::length, keep_alive) + reply.body;
}

void append_chunk(std::string& out, std::string_view data) {
  if (data.empty()) return;
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  out += size;
  out += data;
  out += "\r\n";
}

}  // namespace waste::serve::http
