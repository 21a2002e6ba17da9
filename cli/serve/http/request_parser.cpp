#include "cli/serve/http/request_parser.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

namespace waste::serve::http {
namespace beast_http = boost::beast::http;

namespace {

std::string kib(std::size_t bytes) {
  return bytes % 1024 == 0 ? std::to_string(bytes / 1024) + " KiB" : std::to_string(bytes) + " bytes";
}

}  // namespace

void apply_limits(RequestParser& parser, const HttpLimits& limits) {
  parser.header_limit(std::uint32_t(std::min<std::size_t>(limits.header_bytes, UINT32_MAX)));
  parser.body_limit(std::uint64_t(limits.body_bytes));
  parser.eager(true);
}

Refusal refusal_for(const boost::system::error_code& ec, bool header_done, const HttpLimits& limits) {
  if (ec == beast_http::error::header_limit || (ec == beast_http::error::buffer_overflow && !header_done)) {
    return Refusal{431, "request header over the size limit (" + kib(limits.header_bytes) + ", --max-header-kib)",
                   "header_too_large", ""};
  }
  if (ec == beast_http::error::body_limit) {
    return Refusal{413, "request body over the size limit (" + kib(limits.body_bytes) + ", --max-body-mib)",
                   "payload_too_large", ""};
  }
  if (ec == beast_http::error::buffer_overflow) {
    return Refusal{400, "bad request: a chunk header over the buffer limit", "", ""};
  }
  return Refusal{400, "bad request: " + ec.message(), "", ""};
}

bool too_many_fields(const RequestParser& parser, const HttpLimits& limits, Refusal& refusal) {
  const auto& fields = parser.get();
  const auto n = std::size_t(std::distance(fields.begin(), fields.end()));
  if (n <= limits.max_headers) return false;
  refusal = Refusal{431,
                    "request has " + std::to_string(n) + " header fields; the limit is " +
                        std::to_string(limits.max_headers) + " (--max-headers)",
                    "header_too_large", ""};
  return true;
}

HttpRequest to_request(RequestParser& parser) {
  auto& message = parser.get();
  HttpRequest request;
  request.method = std::string(message.method_string().data(), message.method_string().size());
  const std::string_view target(message.target().data(), message.target().size());
  request.path = std::string(target.substr(0, target.find('?')));
  if (auto it = message.find(beast_http::field::authorization); it != message.end()) {
    request.authorization = std::string(it->value().data(), it->value().size());
  }
  request.version = message.version();
  request.body = std::move(message.body());
  return request;
}

CheckedRequest check_request(std::string_view bytes, const HttpLimits& limits, std::size_t segment) {
  CheckedRequest out;
  RequestParser parser;
  apply_limits(parser, limits);
  segment = std::max<std::size_t>(segment, 1);
  std::size_t arrived = std::min(segment, bytes.size());
  boost::system::error_code ec;
  while (!parser.is_done()) {
    const std::size_t used = parser.put(boost::asio::buffer(bytes.data() + out.consumed, arrived - out.consumed), ec);
    out.consumed += used;
    if (ec == beast_http::error::need_more) {
      // As Beast's read does: the parser is offered its unconsumed bytes again only with more.
      ec = {};
      if (arrived == bytes.size()) return out;  // everything given, more wanted
      arrived += std::min(segment, bytes.size() - arrived);
      continue;
    }
    if (ec) {
      out.refused = true;
      out.refusal = refusal_for(ec, parser.is_header_done(), limits);
      return out;
    }
    if (parser.is_header_done() && too_many_fields(parser, limits, out.refusal)) {
      out.refused = true;
      return out;
    }
    if (used == 0 && !parser.is_done()) {
      if (arrived == bytes.size()) return out;
      arrived += std::min(segment, bytes.size() - arrived);
    }
  }
  out.complete = true;
  out.request = to_request(parser);
  return out;
}

}  // namespace waste::serve::http
