#include "cli/serve/chat_media.hpp"

#include "compute/vision/image_decode.hpp"

namespace waste::serve {
namespace {

// Marks an image's place in a message's content through render_chat. 0xFF never occurs in UTF-8,
// and the request parser refuses invalid UTF-8, so no request text can forge one.
constexpr char kImageMark = '\xff';

}  // namespace

std::expected<void, ApiError> build_media_prompt(const ParsedRequest& request, const Tokenizer& tokenizer,
                                                 const ChatFormat& format, const ServeVision& vision,
                                                 GenerationJob& job) {
  if (!vision.tower) {
    const std::string& param = request.images.front().param;
    return std::unexpected(bad_param(param, "'" + param + "': this model has no vision tower (no vision.json in "
                                                          "the container), so image_url parts are not supported"));
  }
  std::vector<JobImage> images;
  std::vector<std::pair<int, int>> sizes;  // source pixels, for the block text
  for (const ImagePart& part : request.images) {
    auto pixels = vision::decode_image(part.bytes, "'" + part.param + "'");
    if (!pixels) return std::unexpected(bad_param(part.param, pixels.error().message));
    // The first half of vision::encode_image (the tower runs the second on the engine thread).
    auto patches = vision::preprocess(*pixels, vision.tower->config());
    if (!patches) return std::unexpected(bad_param(part.param, "'" + part.param + "': " + patches.error().message));
    sizes.emplace_back(pixels->width, pixels->height);
    images.push_back({0, std::move(*patches), part.param});
  }
  // The marks go in from the back of each message so the earlier offsets stay valid.
  std::vector<ChatMessage> messages = request.messages;
  for (std::size_t i = request.images.size(); i-- > 0;) {
    const ImagePart& part = request.images[i];
    messages[part.message].content.insert(part.offset, 1, kImageMark);
  }
  std::vector<int>& tokens = job.prompt;
  tokens.clear();
  std::size_t next = 0;
  for (const ChatSegment& segment : render_chat(format, messages, request.tools_json, true)) {
    if (segment.markup) {
      tokenizer.encode_markup(segment.text, tokens);
      continue;
    }
    std::string_view rest = segment.text;
    for (std::size_t mark = rest.find(kImageMark); mark != std::string_view::npos; mark = rest.find(kImageMark)) {
      if (mark > 0) tokenizer.encode(rest.substr(0, mark), tokens);
      JobImage& image = images.at(next);
      const auto [width, height] = sizes.at(next++);
      image.first = vision::append_media_block(tokenizer, vision.tokens, width, height, image.positions(), tokens);
      rest.remove_prefix(mark + 1);
    }
    if (!rest.empty()) tokenizer.encode(rest, tokens);
  }
  if (next != images.size()) {
    return std::unexpected(ApiError{500, "image_url parts: " + std::to_string(next) + " of " +
                                             std::to_string(images.size()) + " reached the prompt",
                                    "server_error", "", ""});
  }
  job.images = std::move(images);
  return {};
}

}  // namespace waste::serve
