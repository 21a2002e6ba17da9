#include "compute/vision/media_prompt.hpp"

namespace waste::vision {

Result<MediaTokens> MediaTokens::from(const Tokenizer& t) {
  MediaTokens m;
  const std::pair<const char*, int*> want[] = {{"<|media_begin|>", &m.begin},
                                               {"<|media_content|>", &m.content},
                                               {"<|media_pad|>", &m.pad},
                                               {"<|media_end|>", &m.end}};
  for (const auto& [text, id] : want) {
    auto found = t.special_id(text);
    if (!found) return make_error(Errc::format, std::string("the tokenizer has no ") + text + " (needed for images)");
    *id = *found;
  }
  return m;
}

Result<EncodedImage> encode_image(const VisionTower& tower, const forward::Exec& exec, const RgbImage& image,
                                  TowerTimings* timings) {
  auto patches = preprocess(image, tower.config());
  if (!patches) return std::unexpected(patches.error());
  auto rows = tower.encode(exec, *patches, timings);
  if (!rows) return std::unexpected(rows.error());
  EncodedImage out;
  out.width = image.width;
  out.height = image.height;
  out.grid = patches->grid;
  out.rows = std::move(*rows);
  return out;
}

std::string media_block_text(int width, int height) {
  return "<|media_begin|>image " + std::to_string(width) + "x" + std::to_string(height) +
         "<|media_content|><|media_pad|><|media_end|>";
}

MediaPrompt insert_media(const Tokenizer& tokenizer, const MediaTokens& media, std::span<const int> prompt,
                         std::size_t at, std::span<const EncodedImage> images, int hidden) {
  MediaPrompt out;
  out.tokens.assign(prompt.begin(), prompt.begin() + std::ptrdiff_t(std::min(at, prompt.size())));
  out.embeddings.assign(out.tokens.size(), nullptr);
  for (const EncodedImage& img : images) {
    out.tokens.push_back(media.begin);
    tokenizer.encode("image " + std::to_string(img.width) + "x" + std::to_string(img.height), out.tokens);
    out.tokens.push_back(media.content);
    out.embeddings.resize(out.tokens.size(), nullptr);
    for (int p = 0; p < img.positions(); ++p) {
      out.tokens.push_back(media.pad);
      out.embeddings.push_back(img.rows.data() + std::size_t(p) * std::size_t(hidden));
    }
    out.tokens.push_back(media.end);
    out.embeddings.push_back(nullptr);
  }
  const std::size_t rest = std::min(at, prompt.size());
  out.tokens.insert(out.tokens.end(), prompt.begin() + std::ptrdiff_t(rest), prompt.end());
  out.embeddings.resize(out.tokens.size(), nullptr);
  return out;
}

}  // namespace waste::vision
