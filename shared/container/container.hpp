// A WASTE v0 container directory, opened and checked: manifest, trunk index against
// trunk.bin's size, codebooks, every bank's size, the tensors the forward pass needs with
// their exact shapes, and which optional files (tokenizer, specials, chat format) are present.
#pragma once

#include <filesystem>
#include <string>

#include "shared/container/expert_record.hpp"
#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste {

struct ContainerFiles {
  std::filesystem::path dir;
  [[nodiscard]] std::filesystem::path manifest() const { return dir / "manifest.json"; }
  [[nodiscard]] std::filesystem::path trunk() const { return dir / "trunk.bin"; }
  [[nodiscard]] std::filesystem::path codebooks() const { return dir / "codebooks.bin"; }
  [[nodiscard]] std::filesystem::path bank(int layer) const {
    return dir / ("experts-L" + std::to_string(layer) + ".bin");
  }
  [[nodiscard]] std::filesystem::path tokenizer() const { return dir / "tokenizer.model"; }
  [[nodiscard]] std::filesystem::path specials() const { return dir / "specials.json"; }
  [[nodiscard]] std::filesystem::path chat() const { return dir / "chat.json"; }
};

// manifest.json of the container directory `dir`, read whole (at most 64 MiB). Every reader of
// a container starts here, so a path that is not one gets the same words from every command
// and from the daemon:
//   "DIR does not exist (a model is a NAME.waste directory: make one with `waste synth` or `waste convert`)"
//   "DIR is not a WASTE container (not a directory): make one with `waste synth` or `waste convert`"
//   "DIR is not a WASTE container (no manifest.json): make one with `waste synth` or `waste convert`"
// Other failures (permissions, size) name DIR/manifest.json.
Result<std::string> read_manifest_text(const std::filesystem::path& dir);

struct ContainerInfo {
  ContainerFiles files;
  Manifest manifest;
  ExpertGeometry geometry;        // meaningful when the model has experts
  int n_codebooks = 0;
  std::uint64_t trunk_file_bytes = 0;
  bool has_tokenizer = false;
  bool has_specials = false;
  bool has_chat_format = false;

  // Everything that can be checked without reading record payloads. Errors name the file.
  static Result<ContainerInfo> open(const std::filesystem::path& dir);
};

// One trunk entry's payload and scale block lie inside trunk.bin. Error:
// "trunk tensor NAME: payload [off, off+n) exceeds trunk.bin size S".
Status check_trunk_bounds(const TrunkTensorInfo& tensor, std::uint64_t trunk_file_bytes);

// Every tensor the forward pass indexes exists with exactly the expected shape
// (waste-v0-reference.md §1.8 step 5; a deepseek-v4.1 config: v41_tensors.hpp's list, optional
// entries only when present). Error: "tensor NAME: expected shape [..], found [..]".
Status validate_text_tensors(const Manifest& manifest);

}  // namespace waste
