// Where images go in a chat prompt. A front end that adds them after the text (`waste run
// --image`, `waste chat`'s /image) puts them before the last user turn's text: where the prompt
// of the same messages with the last one's text emptied (the "bare" prompt) stops agreeing with
// the real one. A front end that has them among a message's text parts (`waste serve`'s
// image_url parts) puts each at its byte offset in its message (chat_prompt_with_media).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "compute/prompt/chat_format.hpp"
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

// One image at its place among a message's text: its media block's size and pads.
struct MediaSlot {
  std::size_t message = 0;  // index in messages
  std::size_t offset = 0;   // byte offset in that message's content
  int width = 0, height = 0;  // source pixels, for the block text
  int positions = 0;        // its pads (merged patches)
};

// The chat prompt of `messages` (open model turn, `tools_json` declared) with each slot's media
// block (vision::append_media_block) at its place; the text around an image is tokenized on its
// own in plain mode, as build_chat_prompt tokenizes each content. Returns, per slot in order, the
// index of its first pad; fewer entries than slots means not every slot reached the prompt.
std::vector<std::size_t> chat_prompt_with_media(const Tokenizer& tokenizer, const vision::MediaTokens& media,
                                                const ChatFormat& format, std::span<const ChatMessage> messages,
                                                std::string_view tools_json, std::span<const MediaSlot> slots,
                                                std::vector<int>& tokens);
// The same with every rendering option (prelude, effort, think; `render.open_model_turn` is used as given).
std::vector<std::size_t> chat_prompt_with_media(const Tokenizer& tokenizer, const vision::MediaTokens& media,
                                                const ChatFormat& format, std::span<const ChatMessage> messages,
                                                const ChatRender& render, std::span<const MediaSlot> slots,
                                                std::vector<int>& tokens);

}  // namespace waste
