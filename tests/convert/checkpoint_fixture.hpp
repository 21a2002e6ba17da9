// Test-side writers: a minimal safetensors writer (reference layout: names sorted, header padded
// with spaces to a multiple of 8) and a small random Kimi-Linear-shaped checkpoint built from a
// synth preset's config (the trunk names and shapes of synth::plan_trunk, experts w1/w3/w2),
// in bf16, split over two shards with model.safetensors.index.json.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/synth/synth.hpp"

namespace waste::test {

struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

inline std::string safetensors_bytes(const std::vector<StTensor>& tensors_in) {
  auto tensors = tensors_in;
  std::sort(tensors.begin(), tensors.end(), [](auto& a, auto& b) { return a.name < b.name; });
  nlohmann::json h = nlohmann::json::object();
  std::uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  std::string out(8, '\0');
  const std::uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  out += text;
  for (const auto& t : tensors) out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return out;
}

inline void write_file(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f.write(s.data(), std::streamsize(s.size()));
}

inline std::uint64_t fixture_mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// bf16 tensor of deterministic values: uniform(-a, a), a = sqrt(3 / fan_in) (std 1/sqrt(fan_in)),
// norm weights around 1.
inline StTensor random_bf16(const std::string& name, std::vector<std::int64_t> shape, std::uint64_t seed) {
  StTensor t{name, "BF16", shape, {}};
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  const bool is_norm = shape.size() == 1 && name.find("norm") != std::string::npos;
  const float a = std::sqrt(3.0f / float(shape.back()));
  std::uint64_t key = seed;
  for (char ch : name) key = fixture_mix(key ^ std::uint8_t(ch));
  t.bytes.resize(std::size_t(n) * 2);
  for (std::int64_t i = 0; i < n; ++i) {
    const float u = float(fixture_mix(key + std::uint64_t(i)) >> 40) / 16777216.0f * 2.0f - 1.0f;
    float v = is_norm ? 1.0f + 0.1f * u : u * a;
    if (name.find("A_log") != std::string::npos) v = 0.5f * u;
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
    const std::uint16_t h = std::uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    std::memcpy(&t.bytes[std::size_t(i) * 2], &h, 2);
  }
  return t;
}

// Writes config.json, two shards and the index into `dir`; returns the tensor names.
inline std::vector<std::string> write_kimi_checkpoint(const std::filesystem::path& dir, const std::string& preset,
                                                      std::uint64_t seed = 7) {
  std::filesystem::create_directories(dir);
  synth::SynthRequest req;
  req.preset = preset;
  auto spec = synth::make_spec(req);
  if (!spec) throw std::runtime_error(spec.error().message);
  nlohmann::json config = synth::load_preset(preset).value();
  config.erase("synth");
  write_file(dir / "config.json", config.dump(1));
  std::vector<StTensor> all;
  for (const auto& t : synth::plan_trunk(*spec)) all.push_back(random_bf16(t.name, t.shape, seed));
  const ModelConfig& c = spec->skeleton.config;
  const std::string& P = spec->skeleton.tensor_prefix;
  const int lat = c.expert_input_dim();
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.is_moe(l)) continue;
    for (int e = 0; e < c.n_experts; ++e) {
      const std::string h = P + "model.layers." + std::to_string(l) + ".block_sparse_moe.experts." + std::to_string(e) + ".";
      all.push_back(random_bf16(h + "w1.weight", {c.moe_inter, lat}, seed));
      all.push_back(random_bf16(h + "w3.weight", {c.moe_inter, lat}, seed));
      all.push_back(random_bf16(h + "w2.weight", {lat, c.moe_inter}, seed));
    }
  }
  std::vector<StTensor> shard[2];
  nlohmann::json map = nlohmann::json::object();
  std::vector<std::string> names;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const int s = int(i % 2);
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    map[all[i].name] = file;
    names.push_back(all[i].name);
    shard[s].push_back(std::move(all[i]));
  }
  write_file(dir / "model-00001-of-00002.safetensors", safetensors_bytes(shard[0]));
  write_file(dir / "model-00002-of-00002.safetensors", safetensors_bytes(shard[1]));
  write_file(dir / "model.safetensors.index.json", nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(1));
  return names;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace waste::test
