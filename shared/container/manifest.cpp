#include "shared/container/manifest.hpp"
#include "shared/container/manifest_parses.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <set>

namespace waste {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxDim = std::int64_t{1} << 26;      // per-dimension bound of the v0 reader
constexpr std::uint64_t kMaxFileOffset = std::uint64_t{1} << 50;  // sanity bound on offsets/sizes

Result<std::int64_t> get_integer(const json& object, const char* key, const std::string& where,
                                 std::int64_t lo, std::int64_t hi, std::optional<std::int64_t> fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (fallback) return *fallback;
    return make_error(Errc::format, where + ": missing field \"" + key + "\"");
  }
  if (!it->is_number_integer()) {
    return make_error(Errc::format, where + "." + key + ": expected an integer, found " + it->dump());
  }
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(hi)) {
    return make_error(Errc::format, where + "." + key + ": " + it->dump() + " is out of range " +
                                        std::to_string(lo) + ".." + std::to_string(hi));
  }
  const std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi) {
    return make_error(Errc::format, where + "." + key + ": " + std::to_string(v) + " is out of range " +
                                        std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

Result<std::string> get_string(const json& object, const char* key, const std::string& where,
                               std::optional<std::string> fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (fallback) return *fallback;
    return make_error(Errc::format, where + ": missing field \"" + key + "\"");
  }
  if (!it->is_string()) return make_error(Errc::format, where + "." + key + ": expected a string, found " + it->dump());
  return it->get<std::string>();
}

bool fmt_known_trunk(std::int64_t f) { return f == 0 || f == 2 || f == 3 || f == 7; }

Result<TrunkTensorInfo> parse_trunk_entry(const json& e, std::size_t idx) {
  std::string where = "trunk[" + std::to_string(idx) + "]";
  if (!e.is_object()) return make_error(Errc::format, where + ": expected an object");
  TrunkTensorInfo t;
  auto name = get_string(e, "name", where, std::nullopt);
  if (!name) return std::unexpected(name.error());
  t.name = *name;
  if (t.name.empty() || t.name.size() > 512) return make_error(Errc::format, where + ".name: empty or longer than 512 bytes");
  where = "trunk tensor " + t.name;
  auto fmt = get_integer(e, "fmt", where, 0, 255, std::nullopt);
  if (!fmt) return std::unexpected(fmt.error());
  if (!fmt_known_trunk(*fmt)) {
    return make_error(Errc::format, where + ": fmt " + std::to_string(*fmt) +
                                        " is not a trunk format (F32 0, Q8G 2, Q4G 3, Q3G 7)");
  }
  t.fmt = static_cast<TensorFormat>(*fmt);
  auto off = get_integer(e, "off", where, 0, std::int64_t(kMaxFileOffset), std::nullopt);
  if (!off) return std::unexpected(off.error());
  t.offset = std::uint64_t(*off);
  auto shape = e.find("shape");
  if (shape == e.end() || !shape->is_array()) return make_error(Errc::format, where + ": missing or non-array \"shape\"");
  if (shape->empty() || shape->size() > 4) {
    return make_error(Errc::format, where + ": shape has " + std::to_string(shape->size()) + " dims (expected 1..4)");
  }
  std::int64_t elements = 1;
  for (const auto& d : *shape) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 1 || d.get<std::int64_t>() > kMaxDim ||
        (d.is_number_unsigned() && d.get<std::uint64_t>() > std::uint64_t(kMaxDim))) {
      return make_error(Errc::format, where + ": shape dimension " + d.dump() + " is out of range 1.." +
                                          std::to_string(kMaxDim));
    }
    const std::int64_t v = d.get<std::int64_t>();
    if (__builtin_mul_overflow(elements, v, &elements) || elements > std::int64_t(kMaxFileOffset)) {
      return make_error(Errc::format, where + ": shape " + shape->dump() + " has too many elements");
    }
    t.shape.push_back(v);
  }
  if (t.quantized()) {
    auto group = get_integer(e, "group", where, 1, kMaxDim, 128);
    if (!group) return std::unexpected(group.error());
    t.group = static_cast<int>(*group);
    if (t.fmt == TensorFormat::q4g && t.group % 2 != 0) {
      return make_error(Errc::format, where + ": group " + std::to_string(t.group) + " must be even for Q4G");
    }
    auto scale_off = get_integer(e, "scale_off", where, 0, std::int64_t(kMaxFileOffset), std::nullopt);
    if (!scale_off) return std::unexpected(scale_off.error());
    t.scale_offset = std::uint64_t(*scale_off);
  }
  const std::uint64_t total = t.payload_bytes() + t.scale_bytes();
  auto bytes = get_integer(e, "bytes", where, 0, std::int64_t(kMaxFileOffset), std::int64_t(total));
  if (!bytes) return std::unexpected(bytes.error());
  t.bytes = std::uint64_t(*bytes);
  if (t.offset + t.payload_bytes() > kMaxFileOffset || t.scale_offset + t.scale_bytes() > kMaxFileOffset) {
    return make_error(Errc::format, where + ": extends past any plausible trunk.bin");
  }
  return t;
}

Result<int> parse_layer_key(const std::string& key) {
  int layer = -1;
  auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), layer);
  if (ec != std::errc{} || ptr != key.data() + key.size() || key.empty() || (key.size() > 1 && key[0] == '0') ||
      layer < 0) {
    return make_error(Errc::format, "layers: key \"" + key + "\" is not a decimal layer index");
  }
  return layer;
}

}  // namespace

const char* tensor_format_name(TensorFormat fmt) noexcept {
  switch (fmt) {
    case TensorFormat::f32: return "F32";
    case TensorFormat::f16: return "F16";
    case TensorFormat::q8g: return "Q8G";
    case TensorFormat::q4g: return "Q4G";
    case TensorFormat::vq3r: return "VQ3R";
    case TensorFormat::vq2r: return "VQ2R";
    case TensorFormat::sub1: return "SUB1";
    case TensorFormat::q3g: return "Q3G";
    case TensorFormat::vq4p: return "VQ4P";
  }
  return "?";
}

bool ExpertQuant::record_fmt_ok(std::uint8_t fmt_byte) const {
  if (index_bits == 6) return fmt_byte == 8;
  return fmt_byte == 4 || fmt_byte == 5;
}

std::int64_t TrunkTensorInfo::rows() const {
  std::int64_t r = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

std::int64_t TrunkTensorInfo::row_stride_bytes() const {
  switch (fmt) {
    case TensorFormat::f32: return cols() * 4;
    case TensorFormat::q8g: return padded_cols();
    case TensorFormat::q4g: return padded_cols() / 2;
    case TensorFormat::q3g: return (padded_cols() * 3 + 7) / 8 + 1;  // one guard byte per row
    default: return 0;
  }
}

std::uint64_t TrunkTensorInfo::payload_bytes() const { return std::uint64_t(rows()) * std::uint64_t(row_stride_bytes()); }

std::uint64_t TrunkTensorInfo::scale_bytes() const {
  return quantized() ? std::uint64_t(rows()) * std::uint64_t(n_groups()) * 2 : 0;
}

namespace {
std::atomic<std::uint64_t> g_parses{0};
}  // namespace

std::uint64_t manifest_parses() noexcept { return g_parses.load(std::memory_order_relaxed); }

Result<Manifest> Manifest::parse(std::string_view json_text) {
  g_parses.fetch_add(1, std::memory_order_relaxed);
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return make_error(Errc::format, "manifest.json is not valid JSON");
  if (!root.is_object()) return make_error(Errc::format, "manifest.json: top level is not an object");
  Manifest m;
  {
    auto fv = root.find("format_version");
    if (fv == root.end()) return make_error(Errc::format, "format_version is missing (expected 0)");
    if (fv->is_number_integer() && fv->get<std::int64_t>() > kFormatVersion) {
      // Written by a newer WASTE: say which version it is and which one this build reads.
      return make_error(Errc::format, "format_version " + fv->dump() + " is newer than this build of WASTE reads (" +
                                          std::to_string(kFormatVersion) + "); update WASTE to open this container");
    }
    if (!fv->is_number_integer() || fv->get<std::int64_t>() != kFormatVersion) {
      return make_error(Errc::format, "format_version " + fv->dump() + " is not supported (expected 0)");
    }
  }
  auto arch = get_string(root, "arch", "manifest", std::string{});
  if (!arch) return std::unexpected(arch.error());
  m.arch = *arch;

  auto config = root.find("config");
  if (config == root.end() || !config->is_object()) return make_error(Errc::format, "manifest: missing field \"config\"");
  m.config_json = *config;
  auto cfg = ModelConfig::from_json(m.config_json);
  if (!cfg) return std::unexpected(cfg.error());
  m.config = std::move(*cfg);
  const bool nested = config->contains("text_config") && (*config)["text_config"].is_object();
  auto prefix = get_string(root, "tensor_prefix", "manifest", std::string(nested ? "language_model." : ""));
  if (!prefix) return std::unexpected(prefix.error());
  m.tensor_prefix = *prefix;

  // expert_quant (§1.2): absent keys take the converter defaults.
  {
    static const json kEmpty = json::object();
    auto q = root.find("expert_quant");
    if (q != root.end() && !q->is_object()) return make_error(Errc::format, "expert_quant: expected an object");
    const json& qj = q != root.end() ? *q : kEmpty;
    const std::string w = "expert_quant";
    auto fmt = get_string(qj, "fmt", w, std::string("VQ3R"));
    auto stages = get_integer(qj, "stages", w, 1, 8, 3);
    auto vec_dim = get_integer(qj, "vec_dim", w, 1, 64, 8);
    auto entries = get_integer(qj, "entries", w, 1, 256, 256);
    auto index_block = get_integer(qj, "index_block", w, 1, 1 << 20, 64);
    auto index_bits = get_integer(qj, "index_bits", w, 1, 64, 8);
    if (!fmt) return std::unexpected(fmt.error());
    if (!stages) return std::unexpected(stages.error());
    if (!vec_dim) return std::unexpected(vec_dim.error());
    if (!entries) return std::unexpected(entries.error());
    if (!index_block) return std::unexpected(index_block.error());
    if (!index_bits) return std::unexpected(index_bits.error());
    m.quant.fmt = *fmt;
    m.quant.stages = int(*stages);
    m.quant.vec_dim = int(*vec_dim);
    m.quant.entries = int(*entries);
    m.quant.index_block = int(*index_block);
    m.quant.index_bits = int(*index_bits);
    if (!(m.quant.index_bits == 8 || (m.quant.index_bits == 6 && m.quant.stages == 4 && m.quant.entries == 64))) {
      return make_error(Errc::format, "expert_quant.index_bits: " + std::to_string(m.quant.index_bits) +
                                          " (must be 8, or 6 with stages 4 and entries 64)");
    }
  }

  // layers (§1.8 step 4): exactly the MoE layers, each with the config's expert count.
  {
    auto layers = root.find("layers");
    if (layers != root.end() && !layers->is_object()) return make_error(Errc::format, "layers: expected an object");
    if (layers != root.end()) {
      for (auto it = layers->begin(); it != layers->end(); ++it) {
        auto layer = parse_layer_key(it.key());
        if (!layer) return std::unexpected(layer.error());
        const std::string w = "layers." + it.key();
        if (*layer >= m.config.n_layers || !m.config.is_moe(*layer)) {
          return make_error(Errc::format, w + ": layer " + it.key() + " is not a MoE layer of this config");
        }
        if (!it->is_object()) return make_error(Errc::format, w + ": expected an object");
        ExpertBankInfo b;
        b.layer = *layer;
        auto file = get_string(*it, "file", w, std::nullopt);
        if (!file) return std::unexpected(file.error());
        // The file name comes from untrusted input: keep it inside the container directory.
        if (file->empty() || file->find('/') != std::string::npos || file->find('\\') != std::string::npos ||
            *file == "." || *file == "..") {
          return make_error(Errc::format, w + ".file: \"" + *file + "\" is not a plain file name");
        }
        b.file = *file;
        auto experts = get_integer(*it, "experts", w, 1, kMaxExperts, std::nullopt);
        if (!experts) return std::unexpected(experts.error());
        b.experts = int(*experts);
        if (b.experts != m.config.n_experts) {
          return make_error(Errc::format, w + ".experts: " + std::to_string(b.experts) + " != num_experts " +
                                              std::to_string(m.config.n_experts));
        }
        auto bytes = get_integer(*it, "bytes", w, 1, std::int64_t(kMaxFileOffset), std::nullopt);
        if (!bytes) return std::unexpected(bytes.error());
        b.bytes = std::uint64_t(*bytes);
        if (b.bytes % std::uint64_t(b.experts) != 0) {
          return make_error(Errc::format, w + ".bytes: " + std::to_string(b.bytes) + " is not a multiple of " +
                                              std::to_string(b.experts) + " experts");
        }
        auto base = get_integer(*it, "codebook_base", w, 0, 65535, std::nullopt);
        if (!base) return std::unexpected(base.error());
        b.codebook_base = int(*base);
        m.banks.emplace(b.layer, std::move(b));
      }
    }
    for (int l = 0; l < m.config.n_layers; ++l) {
      if (m.config.is_moe(l) && !m.banks.contains(l)) {
        return make_error(Errc::format, "layers: MoE layer " + std::to_string(l) + " has no expert bank entry");
      }
    }
  }

  // trunk (§1.5)
  {
    auto trunk = root.find("trunk");
    if (trunk == root.end() || !trunk->is_array()) return make_error(Errc::format, "manifest: missing field \"trunk\"");
    std::set<std::string_view> seen;
    m.trunk.reserve(trunk->size());
    for (std::size_t i = 0; i < trunk->size(); ++i) {
      auto t = parse_trunk_entry((*trunk)[i], i);
      if (!t) return std::unexpected(t.error());
      m.trunk.push_back(std::move(*t));
    }
    for (const auto& t : m.trunk) {
      if (!seen.insert(t.name).second) return make_error(Errc::format, "trunk tensor " + t.name + ": listed twice");
    }
  }
  return m;
}

std::string Manifest::to_json_text() const {
  json root;
  root["format_version"] = format_version;
  root["arch"] = arch;
  root["tensor_prefix"] = tensor_prefix;
  root["config"] = config_json;
  json q;
  q["fmt"] = quant.fmt;
  q["stages"] = quant.stages;
  q["vec_dim"] = quant.vec_dim;
  q["entries"] = quant.entries;
  q["index_block"] = quant.index_block;
  q["index_bits"] = quant.index_bits;
  q["bits_per_weight"] = quant.bits_per_weight();
  root["expert_quant"] = q;
  json layers = json::object();
  for (const auto& [layer, b] : banks) {
    layers[std::to_string(layer)] = {{"file", b.file}, {"experts", b.experts}, {"bytes", b.bytes},
                                     {"codebook_base", b.codebook_base}};
  }
  root["layers"] = layers;
  json trunk_j = json::array();
  for (const auto& t : trunk) {
    json e = {{"name", t.name}, {"fmt", int(t.fmt)}, {"off", t.offset}, {"shape", t.shape}, {"bytes", t.bytes}};
    if (t.quantized()) {
      e["group"] = t.group;
      e["scale_off"] = t.scale_offset;
    }
    trunk_j.push_back(std::move(e));
  }
  root["trunk"] = std::move(trunk_j);
  return root.dump(1) + "\n";
}

const TrunkTensorInfo* Manifest::find_tensor(std::string_view name_without_prefix) const {
  const std::string full = tensor_prefix + std::string(name_without_prefix);
  for (const auto& t : trunk) {
    if (t.name == full) return &t;
  }
  return nullptr;
}

std::uint64_t Manifest::max_record_bytes() const {
  std::uint64_t m = 0;
  for (const auto& [layer, b] : banks) m = std::max(m, b.record_bytes());
  return m;
}

}  // namespace waste
