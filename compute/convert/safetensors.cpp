#include "compute/convert/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "shared/container/file_io.hpp"

namespace waste::convert {
namespace {

using json = nlohmann::json;

struct DtypeName {
  Dtype dtype;
  const char* name;
  int bits;
};

constexpr std::array<DtypeName, 22> kDtypes = {{
    {Dtype::boolean, "BOOL", 8},       {Dtype::f4, "F4", 4},
    {Dtype::f6_e2m3, "F6_E2M3", 6},    {Dtype::f6_e3m2, "F6_E3M2", 6},
    {Dtype::u8, "U8", 8},              {Dtype::i8, "I8", 8},
    {Dtype::f8_e5m2, "F8_E5M2", 8},    {Dtype::f8_e4m3, "F8_E4M3", 8},
    {Dtype::f8_e8m0, "F8_E8M0", 8},    {Dtype::f8_e4m3fnuz, "F8_E4M3FNUZ", 8},
    {Dtype::f8_e5m2fnuz, "F8_E5M2FNUZ", 8}, {Dtype::i16, "I16", 16},
    {Dtype::u16, "U16", 16},           {Dtype::f16, "F16", 16},
    {Dtype::bf16, "BF16", 16},         {Dtype::i32, "I32", 32},
    {Dtype::u32, "U32", 32},           {Dtype::f32, "F32", 32},
    {Dtype::c64, "C64", 64},           {Dtype::f64, "F64", 64},
    {Dtype::i64, "I64", 64},           {Dtype::u64, "U64", 64},
}};

std::string str(std::string_view s) { return std::string(s); }

}  // namespace

std::optional<Dtype> parse_dtype(std::string_view text) {
  for (const auto& d : kDtypes) {
    if (text == d.name) return d.dtype;
  }
  return std::nullopt;
}

const char* dtype_name(Dtype dtype) noexcept { return kDtypes[std::size_t(dtype)].name; }
int dtype_bits(Dtype dtype) noexcept { return kDtypes[std::size_t(dtype)].bits; }

std::int64_t TensorEntry::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

const TensorEntry* SafetensorsHeader::find(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorEntry& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> prefix, std::uint64_t file_size,
                                                   std::string_view origin) {
  const std::string where = str(origin) + ": ";
  if (file_size < 8 || prefix.size() < 8) return make_error(Errc::format, where + "shorter than the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::uint64_t(std::to_integer<std::uint8_t>(prefix[std::size_t(i)]));
  if (n > kMaxHeaderBytes) {
    return make_error(Errc::format, where + "header length " + std::to_string(n) + " exceeds " +
                                        std::to_string(kMaxHeaderBytes));
  }
  if (8 + n > file_size) {
    return make_error(Errc::format, where + "header length " + std::to_string(n) + " runs past the end of the " +
                                        std::to_string(file_size) + "-byte file");
  }
  if (prefix.size() < 8 + n) return make_error(Errc::format, where + "header not fully read");
  const std::string_view text(reinterpret_cast<const char*>(prefix.data()) + 8, std::size_t(n));
  if (text.empty() || text.front() != '{') return make_error(Errc::format, where + "header does not begin with '{'");

  // Count top-level keys while parsing: nlohmann keeps the last of duplicate keys silently.
  std::size_t top_keys = 0;
  json::parser_callback_t count = [&top_keys](int depth, json::parse_event_t event, json&) {
    if (event == json::parse_event_t::key && depth == 1) ++top_keys;
    return true;
  };
  json doc = json::parse(text, count, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return make_error(Errc::format, where + "header is not a valid UTF-8 JSON object");
  }
  if (top_keys != doc.size()) return make_error(Errc::format, where + "header has duplicate tensor names");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return make_error(Errc::format, where + "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return make_error(Errc::format, where + "__metadata__." + m.key() + " is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string t = where + "tensor " + name + ": ";
    if (!v.is_object()) return make_error(Errc::format, t + "entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return make_error(Errc::format, t + "dtype missing or not a string");
    if (sh == v.end() || !sh->is_array()) return make_error(Errc::format, t + "shape missing or not an array");
    if (off == v.end() || !off->is_array() || off->size() != 2) {
      return make_error(Errc::format, t + "data_offsets must be an array of two integers");
    }
    auto dtype = parse_dtype(dt->get<std::string>());
    if (!dtype) return make_error(Errc::format, t + "unknown dtype " + dt->get<std::string>());
    TensorEntry e;
    e.name = name;
    e.dtype = *dtype;
    // Element count times bits, overflow-checked: a hostile shape must not wrap around.
    unsigned __int128 bits = unsigned(dtype_bits(*dtype));
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) return make_error(Errc::format, t + "shape entries must be non-negative integers");
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (dim > (std::uint64_t{1} << 62)) return make_error(Errc::format, t + "dimension " + std::to_string(dim) + " too large");
      bits *= dim;
      if (bits > (unsigned __int128)(std::uint64_t{1} << 62) * 8) return make_error(Errc::format, t + "size overflows");
      e.shape.push_back(std::int64_t(dim));
    }
    if (e.shape.size() > 8) return make_error(Errc::format, t + "more than 8 dimensions");
    for (const json& o : *off) {
      if (!o.is_number_unsigned()) return make_error(Errc::format, t + "data_offsets must be non-negative integers");
    }
    e.begin = (*off)[0].get<std::uint64_t>();
    e.end = (*off)[1].get<std::uint64_t>();
    if (e.end < e.begin) return make_error(Errc::format, t + "data_offsets end before they begin");
    if (bits % 8 != 0) return make_error(Errc::format, t + "size is not a whole number of bytes");
    if (std::uint64_t(bits / 8) != e.bytes()) {
      return make_error(Errc::format, t + "data_offsets span " + std::to_string(e.bytes()) + " bytes, shape and dtype need " +
                                          std::to_string(std::uint64_t(bits / 8)));
    }
    h.tensors.push_back(std::move(e));
  }
  // The tensors must tile the buffer exactly: sorted by offset, each begins where the last ended.
  std::vector<const TensorEntry*> by_offset;
  by_offset.reserve(h.tensors.size());
  for (const auto& e : h.tensors) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t cursor = 0;
  for (const TensorEntry* e : by_offset) {
    if (e->begin != cursor) {
      return make_error(Errc::format, where + "tensor " + e->name + ": data begins at " + std::to_string(e->begin) +
                                          ", expected " + std::to_string(cursor) + " (gap or overlap)");
    }
    cursor = e->end;
  }
  if (h.data_start + cursor != file_size) {
    return make_error(Errc::format, where + "tensors end at byte " + std::to_string(h.data_start + cursor) +
                                        " but the file has " + std::to_string(file_size));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  return h;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)), header_(std::move(o.header_)), map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(const_cast<std::byte*>(map_), map_bytes_);
    path_ = std::move(o.path_);
    header_ = std::move(o.header_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::byte*>(map_), map_bytes_);
}

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  auto fd = open_file(path, O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  auto size = file_size(fd->get(), path);
  if (!size) return std::unexpected(size.error());
  SafetensorsFile f;
  f.path_ = path;
  if (*size < 8) return make_error(Errc::format, path.string() + ": shorter than the 8-byte header length");
  void* p = ::mmap(nullptr, std::size_t(*size), PROT_READ, MAP_PRIVATE, fd->get(), 0);
  if (p == MAP_FAILED) return make_error(Errc::io, path.string() + ": mmap: " + std::strerror(errno));
  f.map_ = static_cast<const std::byte*>(p);
  f.map_bytes_ = std::size_t(*size);
  auto header = parse_safetensors_header({f.map_, f.map_bytes_}, *size, path.string());
  if (!header) return std::unexpected(header.error());
  f.header_ = std::move(*header);
  return f;
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorEntry& entry) const {
  return {map_ + header_.data_start + entry.begin, std::size_t(entry.bytes())};
}

Result<Checkpoint> Checkpoint::open(const std::filesystem::path& dir) {
  Checkpoint c;
  const auto index = dir / "model.safetensors.index.json";
  const auto single = dir / "model.safetensors";
  std::error_code ec;
  if (std::filesystem::exists(index, ec)) {
    auto text = read_text_file(index, 256ull << 20);
    if (!text) return std::unexpected(text.error());
    json doc = json::parse(*text, nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) {
      return make_error(Errc::format, index.string() + ": no weight_map object");
    }
    std::map<std::string, std::size_t> shard_of_file;
    for (auto it = doc["weight_map"].begin(); it != doc["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return make_error(Errc::format, index.string() + ": weight_map." + it.key() + " is not a string");
      const std::string file = it.value().get<std::string>();
      if (file.find('/') != std::string::npos || file == "." || file == "..") {
        return make_error(Errc::format, index.string() + ": weight_map." + it.key() + ": shard " + file + " is not a file name");
      }
      auto [pos, inserted] = shard_of_file.try_emplace(file, c.shards_.size());
      if (inserted) {
        auto f = SafetensorsFile::open(dir / file);
        if (!f) return std::unexpected(f.error());
        c.shards_.push_back(std::make_unique<SafetensorsFile>(std::move(*f)));
      }
      const SafetensorsFile& shard = *c.shards_[pos->second];
      const TensorEntry* e = shard.header().find(it.key());
      if (!e) return make_error(Errc::format, "tensor " + it.key() + " is not in shard " + shard.path().string() + " (weight_map says it is)");
      c.where_.emplace(it.key(), std::make_pair(pos->second, e));
    }
  } else if (std::filesystem::exists(single, ec)) {
    auto f = SafetensorsFile::open(single);
    if (!f) return std::unexpected(f.error());
    c.shards_.push_back(std::make_unique<SafetensorsFile>(std::move(*f)));
    for (const auto& e : c.shards_[0]->header().tensors) c.where_.emplace(e.name, std::make_pair(std::size_t{0}, &e));
  } else {
    return make_error(Errc::io, dir.string() + ": neither model.safetensors nor model.safetensors.index.json");
  }
  for (const auto& [name, _] : c.where_) c.names_.push_back(name);
  return c;
}

std::optional<TensorRef> Checkpoint::find(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return std::nullopt;
  const SafetensorsFile& shard = *shards_[it->second.first];
  return TensorRef{it->second.second, shard.bytes(*it->second.second), &shard.path()};
}

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& [_, w] : where_) n += w.second->bytes();
  return n;
}

}  // namespace waste::convert
