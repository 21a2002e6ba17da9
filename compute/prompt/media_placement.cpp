#include "compute/prompt/media_placement.hpp"

#include <vector>

namespace waste {

std::size_t user_text_start(const Tokenizer& tokenizer, const ChatFormat* format, std::span<const ChatMessage> messages,
                            std::span<const int> prompt) {
  std::size_t at = 0;
  if (format == nullptr || messages.empty()) return at;
  std::vector<ChatMessage> bare(messages.begin(), messages.end());
  bare.back().content.clear();
  const std::vector<int> ids = build_chat_prompt(tokenizer, *format, bare);
  while (at < ids.size() && at < prompt.size() && ids[at] == prompt[at]) ++at;
  return at;
}

vision::MediaPrompt place_media(const Tokenizer& tokenizer, const vision::MediaTokens& media, const ChatFormat* format,
                                std::span<const ChatMessage> messages, std::span<const int> prompt,
                                std::span<const vision::EncodedImage> images, int hidden) {
  const std::size_t at = user_text_start(tokenizer, format, messages, prompt);
  return vision::insert_media(tokenizer, media, prompt, at, images, hidden);
}

}  // namespace waste
