// Where images go in a chat prompt built by a front end that adds them after the text
// (`waste run --image`, `waste chat`'s /image): before the last user turn's text. That place
// is where the prompt of the same messages with the last one's text emptied (the "bare" prompt)
// stops agreeing with the real one.
#pragma once

#include <cstddef>
#include <span>

#include "compute/tokenizer/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "compute/vision/media_prompt.hpp"

namespace waste {

// The index in `prompt` (build_chat_prompt of `messages`, open model turn) where the last
// message's text starts; 0 without a format (`format` null) or messages.
std::size_t user_text_start(const Tokenizer& tokenizer, const ChatFormat* format, std::span<const ChatMessage> messages,
                            std::span<const int> prompt);

// `prompt` with each image's media block inserted at user_text_start(), in order, and the
// tower rows at the media positions (vision::insert_media).
vision::MediaPrompt place_media(const Tokenizer& tokenizer, const vision::MediaTokens& media, const ChatFormat* format,
                                std::span<const ChatMessage> messages, std::span<const int> prompt,
                                std::span<const vision::EncodedImage> images, int hidden);

}  // namespace waste
