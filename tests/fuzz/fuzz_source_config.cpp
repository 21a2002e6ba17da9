// libFuzzer: a checkpoint's config.json text, as `waste convert` reads it (json::parse, then
// convert::normalize_config: K3's nested text_config, DeepSeek key and tensor names, the fp8
// block size, ModelConfig::from_json's bounds), and the same text as a container's vision.json
// (vision::VisionConfig::from_json). A refusal names the file; an acceptance is bounded, and
// normalising what was stored in the manifest gives the same model again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "compute/convert/source_config.hpp"
#include "compute/vision/vision_config.hpp"

#define WASTE_FUZZ_CHECK(cond)       \
  do {                               \
    if (!(cond)) __builtin_trap();   \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace waste;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json raw = nlohmann::json::parse(text, nullptr, false);
  if (raw.is_discarded()) return 0;  // load_source_config's "not valid JSON"

  auto source = convert::normalize_config(raw);
  if (!source) {
    WASTE_FUZZ_CHECK(source.error().message.starts_with("config.json"));
  } else {
    const ModelConfig& m = source->model;
    WASTE_FUZZ_CHECK(m.n_layers >= 1 && m.n_layers <= 128);
    WASTE_FUZZ_CHECK(source->prefix.empty() || source->prefix == "language_model.");
    const bool nested = raw.contains("text_config") && raw["text_config"].is_object();
    WASTE_FUZZ_CHECK(source->config.is_object() && source->prefix == (nested ? "language_model." : ""));
    if (!source->config.contains("text_config")) {  // what the manifest stores normalises to the same model
      auto again = convert::normalize_config(source->config);
      WASTE_FUZZ_CHECK(again && again->model.n_layers == m.n_layers && again->model.n_experts == m.n_experts &&
                       again->model.hidden == m.hidden && again->family == source->family);
    }
    // Expert tensor names map to container names in every layer, and to none past the last (MTP).
    for (int layer : {0, m.n_layers - 1, m.n_layers}) {
      for (int kind = 0; kind < 3; ++kind) {
        const std::string name = convert::expert_weight_name(*source, layer, 0, kind);
        const auto mapped = convert::container_name(*source, name);
        WASTE_FUZZ_CHECK(mapped.has_value() == (layer < m.n_layers));
      }
    }
  }

  auto vision = vision::VisionConfig::from_json(raw, "vision.json");
  if (!vision) {
    WASTE_FUZZ_CHECK(vision.error().message.starts_with("vision.json: "));
    return 0;
  }
  WASTE_FUZZ_CHECK(vision->heads >= 1 && vision->qkv_hidden % vision->heads == 0 && vision->head_dim() % 4 == 0);
  WASTE_FUZZ_CHECK(vision->text_hidden >= 1 && vision->patch >= 1 && vision->max_patches >= 4);
  for (float s : vision->std) WASTE_FUZZ_CHECK(s > 0.0f);
  return 0;
}
