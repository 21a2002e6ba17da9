// Images in a prompt (reference §3.11): each image becomes the media block
//   <|media_begin|>image WxH<|media_content|><|media_pad|><|media_end|>   (W x H: source pixels)
// whose single <|media_pad|> is expanded to one position per merged 2x2 patch; the embedding of
// each of those positions is the tower's projector output row, not embed_tokens[media_pad].
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "compute/forward/ops.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "compute/vision/image.hpp"
#include "compute/vision/preprocess.hpp"
#include "compute/vision/tower.hpp"
#include "shared/container/container.hpp"
#include "shared/result.hpp"

namespace waste::vision {

// The four specials of the block, from the tokenizer (an error naming the one missing).
struct MediaTokens {
  int begin = -1, content = -1, pad = -1, end = -1;
  static Result<MediaTokens> from(const Tokenizer& tokenizer);
};

// The container's tower and the tokenizer's media specials, the tower checked against the text
// model's hidden size (an error saying which is missing or wrong).
struct MediaEncoder {
  VisionTower tower;
  MediaTokens tokens;
};
Result<MediaEncoder> load_media_encoder(const std::filesystem::path& container_dir, const Tokenizer& tokenizer,
                                        int hidden);
// The same from the container's description already read (Engine::container()): no second parse.
Result<MediaEncoder> load_media_encoder(const ContainerInfo& container, const Tokenizer& tokenizer, int hidden);

// One image through the tower: its source size and [merged][text_hidden] rows.
struct EncodedImage {
  int width = 0, height = 0;  // source pixels (after EXIF orientation)
  PatchGrid grid;
  std::vector<float> rows;
  [[nodiscard]] int positions() const { return grid.merged(); }
};

Result<EncodedImage> encode_image(const VisionTower& tower, const forward::Exec& exec, const RgbImage& image,
                                  TowerTimings* timings = nullptr);

// The block's text with one <|media_pad|>, as a chat template would show it.
std::string media_block_text(int width, int height);

// Appends the block's tokens for a width x height image with `positions` pads to `tokens`;
// returns the index of the first pad. The one builder of the block's tokens (run, chat, serve).
std::size_t append_media_block(const Tokenizer& tokenizer, const MediaTokens& media, int width, int height,
                               int positions, std::vector<int>& tokens);

// Prompt tokens and the per-position embedding overrides (null = embed_tokens) for the engine.
// `embeddings` points into the EncodedImages, which must outlive its use.
struct MediaPrompt {
  std::vector<int> tokens;
  std::vector<const float*> embeddings;
};

// `prompt` with the images' blocks, in order, inserted before token index `at` (where the user
// text begins), each pad expanded to the image's positions.
MediaPrompt insert_media(const Tokenizer& tokenizer, const MediaTokens& media, std::span<const int> prompt,
                         std::size_t at, std::span<const EncodedImage> images, int hidden);

}  // namespace waste::vision
