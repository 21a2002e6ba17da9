#include "cli/serve/chat_media.hpp"

#include "cli/serve/prefix_cache.hpp"

#include "compute/prompt/media_placement.hpp"
#include "compute/vision/image_decode.hpp"
#include "compute/vision/image_header.hpp"

namespace waste::serve {
namespace {

// "--max-image-mpx 16": the option that sets a pixel limit, in its own unit (2^20 pixels).
std::string mpx_option(const char* option, std::uint64_t pixels) {
  const std::uint64_t mpx = pixels >> 20;
  return std::string(option) + " " + ((mpx << 20) == pixels ? std::to_string(mpx) : std::to_string(double(pixels) / double(1 << 20)));
}

}  // namespace

std::expected<void, ApiError> build_media_prompt(const ParsedRequest& request, const Tokenizer& tokenizer,
                                                 const ChatFormat& format, const ServeVision& vision,
                                                 GenerationJob& job, const RequestLimits& limits, PixelBudget& budget,
                                                 const ChatRender* render) {
  if (!vision.tower) {
    const std::string& param = request.images.front().param;
    return std::unexpected(bad_param(param, "'" + param + "': this model has no vision tower (no vision.json in "
                                                          "the container), so image_url parts are not supported"));
  }
  // Every image's declared size first, nothing decoded yet: one image, then the request's total,
  // then what the server decodes at once.
  std::uint64_t total = 0;
  for (const ImagePart& part : request.images) {
    auto header = vision::read_image_header(part.bytes, "'" + part.param + "'");
    if (!header) return std::unexpected(bad_param(part.param, header.error().message));
    const std::uint64_t pixels = header->pixels();
    if (pixels > limits.max_image_pixels) {
      return std::unexpected(bad_param(part.param, "'" + part.param + "': " + std::to_string(header->width) + "x" +
                                                       std::to_string(header->height) + " pixels exceed the limit of " +
                                                       std::to_string(limits.max_image_pixels) + " per image (" +
                                                       mpx_option("--max-image-mpx", limits.max_image_pixels) + ")"));
    }
    total += pixels;
    if (total > limits.max_request_pixels) {
      return std::unexpected(bad_param(part.param, "'" + part.param + "': the request's images up to this one hold " +
                                                       std::to_string(total) + " pixels, over the limit of " +
                                                       std::to_string(limits.max_request_pixels) + " per request (" +
                                                       mpx_option("--max-request-mpx", limits.max_request_pixels) + ")"));
    }
  }
  auto lease = budget.try_lease(total);
  if (!lease) {
    const std::string& param = request.images.front().param;
    return std::unexpected(ApiError{429, "'" + param + "': the server is decoding " + std::to_string(budget.in_use()) +
                                             " pixels of images; this request's " + std::to_string(total) +
                                             " would pass its limit of " + std::to_string(budget.capacity()) + " (" +
                                             mpx_option("--max-decode-mpx", budget.capacity()) + "); retry later",
                                    "rate_limit_error", param, "rate_limit_exceeded"});
  }
  vision::DecodeLimits decode;
  decode.max_pixels = limits.max_image_pixels;
  std::vector<JobImage> images;
  std::vector<std::pair<int, int>> sizes;  // source pixels, for the block text
  for (const ImagePart& part : request.images) {
    auto pixels = vision::decode_image(part.bytes, "'" + part.param + "'", decode);
    if (!pixels) return std::unexpected(bad_param(part.param, pixels.error().message));
    // The first half of vision::encode_image (the tower runs the second on the engine thread).
    auto patches = vision::preprocess(*pixels, vision.tower->config());
    if (!patches) return std::unexpected(bad_param(part.param, "'" + part.param + "': " + patches.error().message));
    sizes.emplace_back(pixels->width, pixels->height);
    images.push_back({0, std::move(*patches), part.param, image_digest(part.bytes)});
  }
  std::vector<MediaSlot> slots;
  for (std::size_t i = 0; i < request.images.size(); ++i) {
    slots.push_back({request.images[i].message, request.images[i].offset, sizes[i].first, sizes[i].second,
                     images[i].positions()});
  }
  const std::vector<std::size_t> firsts =
      render ? chat_prompt_with_media(tokenizer, vision.tokens, format, request.messages, *render, slots, job.prompt)
             : chat_prompt_with_media(tokenizer, vision.tokens, format, request.messages, request.tools_json, slots,
                                      job.prompt);
  for (std::size_t i = 0; i < firsts.size(); ++i) images[i].first = firsts[i];
  const std::size_t next = firsts.size();
  if (next != images.size()) {
    return std::unexpected(ApiError{500, "image_url parts: " + std::to_string(next) + " of " +
                                             std::to_string(images.size()) + " reached the prompt",
                                    "server_error", "", ""});
  }
  job.images = std::move(images);
  return {};
}

}  // namespace waste::serve
