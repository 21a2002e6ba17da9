// `waste serve --model PATH[=ID]` (repeatable): which containers a server serves and under which
// ids. A PATH is a container (a directory with manifest.json) or a directory of containers, each
// subfolder holding a manifest.json becoming a model. Checked before anything is opened; every
// refusal names the spec and what is wrong with it (docs/design/serve.md, Several models).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "shared/result.hpp"

namespace waste::serve {

struct ModelSpec {
  std::filesystem::path path;  // the container directory, as given (or DIR/SUBFOLDER)
  std::string id;              // what requests name in `model` and /v1/models lists
};

// The id of a container named by its directory alone: its folder name without a trailing
// ".waste" ("kimi-k2.5.waste" -> "kimi-k2.5", "tiny" -> "tiny").
std::string default_model_id(const std::filesystem::path& container);

// Whether `id` is one a request can name and /v1/models/{id} can reach: 1 to 128 characters of
// A-Z a-z 0-9 . _ : - and /, not starting with '/' or '.'.
bool valid_model_id(std::string_view id);

// The --model values, in order, each expanded (a directory of containers: its containers sorted
// by folder name) and checked: a missing path, a PATH that is neither a container nor holds any,
// an empty or malformed id, an id given to a directory of containers, an id or a container given
// twice. Errors (Errc::argument) are "--model SPEC: ..." or "--model: ..." sentences.
Result<std::vector<ModelSpec>> expand_model_specs(const std::vector<std::string>& specs);

}  // namespace waste::serve
