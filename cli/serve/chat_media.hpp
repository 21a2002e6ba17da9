// A chat request with image_url parts to the scheduler's job: each image decoded and
// preprocessed on the HTTP thread (a 400 naming its part when the decoder refuses it), its media
// block built by
// vision::append_media_block (the builder `waste run --image` uses) at its place among the text
// parts of its message, and the pads it takes recorded for the tower (JobImage). The text around
// an image is tokenized on its own in plain mode, as build_chat_prompt tokenizes each content.
#pragma once

#include <expected>

#include "cli/serve/api_error.hpp"
#include "cli/serve/openai_request.hpp"
#include "cli/serve/scheduler.hpp"
#include "compute/tokenizer/chat_format.hpp"
#include "compute/vision/media_prompt.hpp"

namespace waste::serve {

// What a server with a vision tower needs on the HTTP side.
struct ServeVision {
  const vision::VisionTower* tower = nullptr;
  vision::MediaTokens tokens;
};

// Fills job.prompt and job.images from `request` (whose images must be non-empty).
std::expected<void, ApiError> build_media_prompt(const ParsedRequest& request, const Tokenizer& tokenizer,
                                                 const ChatFormat& format, const ServeVision& vision,
                                                 GenerationJob& job);

}  // namespace waste::serve
