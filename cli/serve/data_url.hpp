// The data: URL of an image_url part (RFC 2397) to its bytes. Only base64 data of media type
// image/png or image/jpeg is taken; the bytes themselves are sniffed by the decoder, which has
// the last word. Remote URLs and local paths are refused: `waste serve` fetches nothing and reads
// no file a request names. Every failure is a 400 naming `param`.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "cli/serve/api_error.hpp"

namespace waste::serve {

// `max_bytes`: the decoded size allowed (checked before decoding, from the text's length).
std::expected<std::vector<std::uint8_t>, ApiError> decode_data_url(std::string_view url, const std::string& param,
                                                                   std::uint64_t max_bytes);

}  // namespace waste::serve
