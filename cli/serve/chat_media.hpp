// A chat request with image_url parts to the scheduler's job: the images' sizes checked from
// their headers against the request limits and the server's pixel budget, then each decoded and
// preprocessed on the HTTP thread (a 400 naming its part when the decoder refuses it), its media
// block put at its place among the text parts of its message by compute/prompt's
// chat_prompt_with_media (vision::append_media_block, the builder `waste run --image` uses), and
// the pads it takes recorded for the tower (JobImage).
#pragma once

#include <expected>

#include "cli/serve/api_error.hpp"
#include "cli/serve/openai_request.hpp"
#include "cli/serve/pixel_budget.hpp"
#include "cli/serve/request_limits.hpp"
#include "cli/serve/scheduler.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/vision/media_prompt.hpp"

namespace waste::serve {

// What a server with a vision tower needs on the HTTP side.
struct ServeVision {
  const vision::VisionTower* tower = nullptr;
  vision::MediaTokens tokens;
};

// Fills job.prompt and job.images from `request` (whose images must be non-empty). Before any
// image is decoded, each one's declared size is read from its header: over
// limits.max_image_pixels, or the images together over limits.max_request_pixels, is a 400
// naming the part and the limit; a total that does not fit in `budget` now is a 429. The lease
// is held while the images are decoded and preprocessed.
std::expected<void, ApiError> build_media_prompt(const ParsedRequest& request, const Tokenizer& tokenizer,
                                                 const ChatFormat& format, const ServeVision& vision,
                                                 GenerationJob& job, const RequestLimits& limits = request_limits(),
                                                 PixelBudget& budget = decoding_pixels(),
                                                 const ChatRender* render = nullptr);

}  // namespace waste::serve
