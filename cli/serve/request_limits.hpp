// What one request's content may cost `waste serve` (docs/design/serve.md, Limits): nesting of
// its JSON and schemas, the size and compile time of its grammars, the pixels of its images.
// One process-wide value: `waste serve` sets it from its options once, before the HTTP server
// starts (set_request_limits is not synchronized with readers); tests pass their own.
#pragma once

#include <chrono>
#include <cstdint>

namespace waste::serve {

struct RequestLimits {
  int max_json_depth = 64;  // --max-json-depth: request body nesting, and each schema's (with $ref hops)
  // Grammar compilation (response_format json_schema, tools' parameters): beyond these a 400.
  std::uint64_t max_grammar_expansion = 1u << 16;           // derivations one byte may reach
  std::chrono::milliseconds max_grammar_time{2000};          // wall clock per schema
  // Images (image_url parts): declared pixels, read from the file's header before decoding.
  std::uint64_t max_image_pixels = 16ull << 20;     // --max-image-mpx 16: one image (4096 x 4096)
  std::uint64_t max_request_pixels = 32ull << 20;   // --max-request-mpx 32: all images of one request
  std::uint64_t max_decoding_pixels = 64ull << 20;  // --max-decode-mpx 64: being decoded at once, server-wide
};

const RequestLimits& request_limits();
void set_request_limits(const RequestLimits& limits);

}  // namespace waste::serve
