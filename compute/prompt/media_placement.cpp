#include "compute/prompt/media_placement.hpp"

#include <vector>

namespace waste {
namespace {

// Marks an image's place in a message's content through render_chat. 0xFF never occurs in UTF-8,
// and the front ends refuse invalid UTF-8 in content, so no request text can forge one.
constexpr char kImageMark = '\xff';

}  // namespace

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

std::vector<std::size_t> chat_prompt_with_media(const Tokenizer& tokenizer, const vision::MediaTokens& media,
                                                const ChatFormat& format, std::span<const ChatMessage> messages,
                                                std::string_view tools_json, std::span<const MediaSlot> slots,
                                                std::vector<int>& tokens) {
  ChatRender render;
  render.tools_json = tools_json;
  return chat_prompt_with_media(tokenizer, media, format, messages, render, slots, tokens);
}

std::vector<std::size_t> chat_prompt_with_media(const Tokenizer& tokenizer, const vision::MediaTokens& media,
                                                const ChatFormat& format, std::span<const ChatMessage> messages,
                                                const ChatRender& render, std::span<const MediaSlot> slots,
                                                std::vector<int>& tokens) {
  // The marks go in from the back of each message so the earlier offsets stay valid.
  std::vector<ChatMessage> marked(messages.begin(), messages.end());
  for (std::size_t i = slots.size(); i-- > 0;) {
    const MediaSlot& slot = slots[i];
    marked[slot.message].content.insert(slot.offset, 1, kImageMark);
  }
  tokens.clear();
  std::vector<std::size_t> firsts;
  for (const ChatSegment& segment : render_chat(format, marked, render)) {
    if (segment.markup) {
      tokenizer.encode_markup(segment.text, tokens);
      continue;
    }
    std::string_view rest = segment.text;
    for (std::size_t mark = rest.find(kImageMark); mark != std::string_view::npos; mark = rest.find(kImageMark)) {
      if (firsts.size() == slots.size()) {  // a 0xFF byte that is no mark of ours: plain text
        tokenizer.encode(rest.substr(0, mark + 1), tokens);
        rest.remove_prefix(mark + 1);
        continue;
      }
      if (mark > 0) tokenizer.encode(rest.substr(0, mark), tokens);
      const MediaSlot& slot = slots[firsts.size()];
      firsts.push_back(vision::append_media_block(tokenizer, media, slot.width, slot.height, slot.positions, tokens));
      rest.remove_prefix(mark + 1);
    }
    if (!rest.empty()) tokenizer.encode(rest, tokens);
  }
  return firsts;
}

}  // namespace waste
