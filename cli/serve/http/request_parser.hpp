// One place for how a request is parsed: Boost.Beast's request parser with the server's limits
// (header bytes, body bytes for every transfer encoding), the header-field count, and what each
// parse failure answers (status, message naming the limit). The transport reads sockets through
// it; check_request() runs the same configuration over a byte string (tests, fuzz_http_head).
#pragma once

// Boost 1.74's HTTP parser asserts `n >= 5` when a last chunk ("0\r\n") arrives without its
// closing CRLF and then only one more byte comes: a client can trip it by splitting its request.
// Its code after the assertion is correct (it asks for more bytes), and this project builds with
// assertions on, so BOOST_ASSERT is off wherever the parser is instantiated: request_parser.cpp
// and transport.cpp include this header first (tests/serve/test_http_transport.cpp, "split last
// chunk"; found by fuzz_http_request).
#ifndef BOOST_DISABLE_ASSERTS
#define BOOST_DISABLE_ASSERTS
#endif

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "cli/serve/http/limits.hpp"
#include "cli/serve/http/message.hpp"

namespace waste::serve::http {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets the parser's header and body limits from `limits`.
void apply_limits(RequestParser& parser, const HttpLimits& limits);

// The answer to a read that failed with `ec` (a parse error or a limit; not a socket error).
// `header_done`: the failure came after the head was complete.
Refusal refusal_for(const boost::system::error_code& ec, bool header_done, const HttpLimits& limits);

// After the head is parsed: a refusal when it has more fields than the limit allows.
bool too_many_fields(const RequestParser& parser, const HttpLimits& limits, Refusal& refusal);

// The request as routes see it (method, path without the query, Authorization, body moved out).
HttpRequest to_request(RequestParser& parser);

// Parses `bytes` as one request the way the server does, arriving `segment` bytes at a time (as
// TCP may split it: after each arrival the parser is given every byte it has not consumed yet).
// complete: a whole request within the limits (then `request` holds it); else `refused` when the
// server would refuse it (status set), or neither when more bytes are needed.
struct CheckedRequest {
  bool complete = false;
  bool refused = false;
  Refusal refusal;
  HttpRequest request;
  std::size_t consumed = 0;  // bytes of `bytes` the request took
};
CheckedRequest check_request(std::string_view bytes, const HttpLimits& limits, std::size_t segment = SIZE_MAX);

}  // namespace waste::serve::http
