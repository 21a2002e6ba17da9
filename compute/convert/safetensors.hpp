// safetensors reader (deepseek-and-weight-formats.md §7): the 8-byte little-endian header
// length, a JSON header, then the byte buffer. The header is untrusted input: every rule of
// the reference reader is enforced (length bounds, known dtypes, whole-byte sizes, offsets that
// tile the buffer exactly with no gaps or overlaps, no trailing bytes, no duplicate names), so a
// tensor view handed out later is always inside the file. Shards are mmap'd read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/result.hpp"

namespace waste::convert {

// Every dtype string of the reference reader; the converter decodes only some of them.
enum class Dtype : std::uint8_t {
  boolean, f4, f6_e2m3, f6_e3m2, u8, i8, f8_e5m2, f8_e4m3, f8_e8m0, f8_e4m3fnuz, f8_e5m2fnuz,
  i16, u16, f16, bf16, i32, u32, f32, c64, f64, i64, u64,
};

std::optional<Dtype> parse_dtype(std::string_view text);
const char* dtype_name(Dtype dtype) noexcept;
int dtype_bits(Dtype dtype) noexcept;  // 4 for F4, 6 for F6_*, else 8 x element bytes

inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's bound

struct TensorEntry {
  std::string name;
  Dtype dtype = Dtype::f32;
  std::vector<std::int64_t> shape;   // [] for a scalar
  std::uint64_t begin = 0;           // relative to the byte buffer
  std::uint64_t end = 0;             // one past the last byte
  [[nodiscard]] std::uint64_t bytes() const { return end - begin; }
  [[nodiscard]] std::int64_t elements() const;
};

struct SafetensorsHeader {
  std::uint64_t data_start = 0;              // 8 + header length
  std::vector<TensorEntry> tensors;          // sorted by name
  std::map<std::string, std::string> metadata;
  [[nodiscard]] const TensorEntry* find(std::string_view name) const;
};

// Parse and validate the header of a file of `file_size` bytes whose first bytes are `prefix`
// (at least 8 + header length of them, or the whole file). Errors start with `origin`.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> prefix, std::uint64_t file_size,
                                                   std::string_view origin);

// A read-only mapping of one shard and its validated header.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::filesystem::path& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] const SafetensorsHeader& header() const { return header_; }
  // The tensor's bytes inside the mapping (valid while this object lives).
  [[nodiscard]] std::span<const std::byte> bytes(const TensorEntry& entry) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  SafetensorsHeader header_;
  const std::byte* map_ = nullptr;
  std::size_t map_bytes_ = 0;
};

// A tensor found through the checkpoint: its entry, bytes and the shard it came from.
struct TensorRef {
  const TensorEntry* entry = nullptr;
  std::span<const std::byte> data;
  const std::filesystem::path* shard = nullptr;
};

// model.safetensors, or every shard model.safetensors.index.json's weight_map names. Only the
// weight_map is trusted for where a tensor lives (companions may sit in another shard).
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::filesystem::path& dir);
  [[nodiscard]] std::optional<TensorRef> find(std::string_view name) const;
  [[nodiscard]] const std::vector<std::string>& names() const { return names_; }  // sorted
  [[nodiscard]] std::uint64_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, std::pair<std::size_t, const TensorEntry*>, std::less<>> where_;
  std::vector<std::string> names_;
};

}  // namespace waste::convert
