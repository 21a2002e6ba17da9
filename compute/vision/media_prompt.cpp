#include "compute/vision/media_prompt.hpp"

#include <algorithm>

#include "shared/container/container.hpp"

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

Result<MediaEncoder> load_media_encoder(const std::filesystem::path& dir, const Tokenizer& tokenizer, int hidden) {
  auto info = ContainerInfo::open(dir);
  if (!info) return std::unexpected(info.error());
  return load_media_encoder(*info, tokenizer, hidden);
}

Result<MediaEncoder> load_media_encoder(const ContainerInfo& container, const Tokenizer& tokenizer, int hidden) {
  auto tower = VisionTower::load(container.files.dir, container.manifest);
  if (!tower) return std::unexpected(tower.error());
  if (tower->config().text_hidden != hidden) {
    return make_error(Errc::format, "vision.json text_hidden_size " + std::to_string(tower->config().text_hidden) +
                                        " is not the model's hidden size " + std::to_string(hidden));
  }
  auto tokens = MediaTokens::from(tokenizer);
  if (!tokens) return std::unexpected(tokens.error());
  return MediaEncoder{std::move(*tower), *tokens};
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

std::size_t append_media_block(const Tokenizer& tokenizer, const MediaTokens& media, int width, int height,
                               int positions, std::vector<int>& tokens) {
  tokens.push_back(media.begin);
  tokenizer.encode("image " + std::to_string(width) + "x" + std::to_string(height), tokens);
  tokens.push_back(media.content);
  const std::size_t first = tokens.size();
  tokens.insert(tokens.end(), std::size_t(std::max(positions, 0)), media.pad);
  tokens.push_back(media.end);
  return first;
}

MediaPrompt insert_media(const Tokenizer& tokenizer, const MediaTokens& media, std::span<const int> prompt,
                         std::size_t at, std::span<const EncodedImage> images, int hidden) {
  MediaPrompt out;
  out.tokens.assign(prompt.begin(), prompt.begin() + std::ptrdiff_t(std::min(at, prompt.size())));
  out.embeddings.assign(out.tokens.size(), nullptr);
  for (const EncodedImage& img : images) {
    const std::size_t first = append_media_block(tokenizer, media, img.width, img.height, img.positions(), out.tokens);
    out.embeddings.resize(out.tokens.size(), nullptr);
    for (int p = 0; p < img.positions(); ++p) {
      out.embeddings[first + std::size_t(p)] = img.rows.data() + std::size_t(p) * std::size_t(hidden);
    }
  }
  const std::size_t rest = std::min(at, prompt.size());
  out.tokens.insert(out.tokens.end(), prompt.begin() + std::ptrdiff_t(rest), prompt.end());
  out.embeddings.resize(out.tokens.size(), nullptr);
  return out;
}

}  // namespace waste::vision
