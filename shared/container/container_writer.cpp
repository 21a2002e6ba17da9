#include "shared/container/container_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "shared/container/codebooks.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/container/file_io.hpp"

namespace waste {
namespace {

// Sequential writer with a large buffer: synthetic banks are gigabytes, written in 8 MiB calls.
class BufferedFile {
 public:
  static constexpr std::size_t kBufferBytes = 8u << 20;

  static Result<BufferedFile> create(const std::filesystem::path& path, bool durable) {
    auto fd = open_file(path, O_WRONLY | O_CREAT | O_TRUNC);
    if (!fd) return std::unexpected(fd.error());
    BufferedFile f;
    f.path_ = path;
    f.durable_ = durable;
    f.fd_ = std::move(*fd);
    f.buffer_.reserve(kBufferBytes);
    return f;
  }

  Status write(std::span<const std::byte> bytes) {
    if (buffer_.size() + bytes.size() > kBufferBytes) WASTE_TRY(flush());
    if (bytes.size() >= kBufferBytes) {
      WASTE_TRY(write_all(fd_.get(), bytes, path_));
    } else {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
    offset_ += bytes.size();
    return {};
  }

  Status flush() {
    if (!buffer_.empty()) WASTE_TRY(write_all(fd_.get(), buffer_, path_));
    buffer_.clear();
    return {};
  }

  Status close() {
    WASTE_TRY(flush());
    if (durable_ && ::fsync(fd_.get()) != 0) return make_error(Errc::io, path_.string() + ": fsync: " + std::strerror(errno));
    fd_ = UniqueFd();
    return {};
  }

  [[nodiscard]] std::uint64_t offset() const { return offset_; }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  UniqueFd fd_;
  std::vector<std::byte> buffer_;
  std::uint64_t offset_ = 0;
  bool durable_ = true;
};

}  // namespace

struct ContainerWriter::Impl {
  std::filesystem::path dir;
  bool durable = true;
  Manifest manifest;
  std::optional<BufferedFile> trunk;
  std::optional<BufferedFile> codebooks;
  std::optional<BufferedFile> bank;
  // tensor in progress
  std::optional<TrunkTensorInfo> tensor;
  std::int64_t rows_written = 0;
  std::vector<std::uint16_t> pending_scales;
  // bank in progress
  ExpertBankInfo bank_info;
  std::uint64_t record_bytes = 0;
  int records_written = 0;
  int n_codebooks = 0;
};

ContainerWriter::ContainerWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ContainerWriter::ContainerWriter(ContainerWriter&&) noexcept = default;
ContainerWriter& ContainerWriter::operator=(ContainerWriter&&) noexcept = default;
ContainerWriter::~ContainerWriter() = default;

Result<ContainerWriter> ContainerWriter::create(const std::filesystem::path& dir, Manifest skeleton, bool durable) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(Errc::io, dir.string() + ": " + ec.message());
  // A stale manifest would make a half-written container look complete.
  std::filesystem::remove(dir / "manifest.json", ec);
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->durable = durable;
  impl->manifest = std::move(skeleton);
  impl->manifest.trunk.clear();
  impl->manifest.banks.clear();
  auto trunk = BufferedFile::create(dir / "trunk.bin", durable);
  if (!trunk) return std::unexpected(trunk.error());
  impl->trunk.emplace(std::move(*trunk));
  auto books = BufferedFile::create(dir / "codebooks.bin", durable);
  if (!books) return std::unexpected(books.error());
  impl->codebooks.emplace(std::move(*books));
  return ContainerWriter(std::move(impl));
}

Status ContainerWriter::begin_tensor(std::string name, std::vector<std::int64_t> shape, TensorFormat fmt) {
  Impl& s = *impl_;
  if (s.tensor) return make_error(Errc::argument, "begin_tensor " + name + ": tensor " + s.tensor->name + " still open");
  if (!s.manifest.trunk.empty() && !(s.manifest.trunk.back().name < name)) {
    return make_error(Errc::argument, "begin_tensor " + name + ": names must be strictly increasing");
  }
  if (shape.empty() || shape.size() > 4) return make_error(Errc::argument, "begin_tensor " + name + ": 1..4 dims");
  if (fmt != TensorFormat::f32 && fmt != TensorFormat::q8g && fmt != TensorFormat::q4g && fmt != TensorFormat::q3g) {
    return make_error(Errc::argument, "begin_tensor " + name + ": not a trunk format");
  }
  TrunkTensorInfo t;
  t.name = std::move(name);
  t.fmt = fmt;
  t.shape = std::move(shape);
  t.group = 128;
  t.offset = s.trunk->offset();
  s.tensor = std::move(t);
  s.rows_written = 0;
  s.pending_scales.clear();
  return {};
}

Status ContainerWriter::append_row(std::span<const std::byte> payload, std::span<const std::uint16_t> scales) {
  Impl& s = *impl_;
  if (!s.tensor) return make_error(Errc::argument, "append_row: no tensor open");
  const TrunkTensorInfo& t = *s.tensor;
  const std::size_t want_scales = t.quantized() ? std::size_t(t.n_groups()) : 0;
  if (payload.size() != std::size_t(t.row_stride_bytes()) || scales.size() != want_scales) {
    return make_error(Errc::argument, "append_row " + t.name + ": row of " + std::to_string(payload.size()) +
                                          " bytes / " + std::to_string(scales.size()) + " scales, expected " +
                                          std::to_string(t.row_stride_bytes()) + " / " + std::to_string(want_scales));
  }
  if (s.rows_written >= t.rows()) return make_error(Errc::argument, "append_row " + t.name + ": too many rows");
  WASTE_TRY(s.trunk->write(payload));
  s.pending_scales.insert(s.pending_scales.end(), scales.begin(), scales.end());
  ++s.rows_written;
  return {};
}

Status ContainerWriter::end_tensor() {
  Impl& s = *impl_;
  if (!s.tensor) return make_error(Errc::argument, "end_tensor: no tensor open");
  TrunkTensorInfo t = std::move(*s.tensor);
  s.tensor.reset();
  if (s.rows_written != t.rows()) {
    return make_error(Errc::argument, "end_tensor " + t.name + ": " + std::to_string(s.rows_written) + " of " +
                                          std::to_string(t.rows()) + " rows written");
  }
  if (t.quantized()) {
    t.scale_offset = s.trunk->offset();
    WASTE_TRY(s.trunk->write(std::as_bytes(std::span(s.pending_scales))));
  }
  t.bytes = t.payload_bytes() + t.scale_bytes();
  s.manifest.trunk.push_back(std::move(t));
  return {};
}

Status ContainerWriter::add_codebook(std::span<const std::uint16_t> centroids) {
  Impl& s = *impl_;
  const ExpertQuant& q = s.manifest.quant;
  if (centroids.size() != std::size_t(q.entries) * q.vec_dim) {
    return make_error(Errc::argument, "add_codebook: " + std::to_string(centroids.size()) + " values, expected " +
                                          std::to_string(q.entries * q.vec_dim));
  }
  std::byte header[16] = {};
  const std::uint32_t magic = kCodebookMagic;
  const auto id = static_cast<std::uint16_t>(s.n_codebooks);
  const std::uint8_t fmt = 4;  // the converter writes 4 (VQ3R) even for VQ4P books
  const auto dim = static_cast<std::uint8_t>(q.vec_dim);
  const auto n = static_cast<std::uint32_t>(q.entries);
  std::memcpy(header + 0, &magic, 4);
  std::memcpy(header + 4, &id, 2);
  std::memcpy(header + 6, &fmt, 1);
  std::memcpy(header + 7, &dim, 1);
  std::memcpy(header + 8, &n, 4);
  WASTE_TRY(s.codebooks->write(header));
  WASTE_TRY(s.codebooks->write(std::as_bytes(centroids)));
  ++s.n_codebooks;
  return {};
}

Status ContainerWriter::begin_bank(int layer, int codebook_base) {
  Impl& s = *impl_;
  if (s.bank) return make_error(Errc::argument, "begin_bank: a bank is still open");
  auto geometry = ExpertGeometry::from(s.manifest.config, s.manifest.quant);
  if (!geometry) return std::unexpected(geometry.error());
  s.record_bytes = geometry->record_bytes;
  s.bank_info = ExpertBankInfo{};
  s.bank_info.layer = layer;
  s.bank_info.file = "experts-L" + std::to_string(layer) + ".bin";
  s.bank_info.experts = s.manifest.config.n_experts;
  s.bank_info.codebook_base = codebook_base;
  s.records_written = 0;
  auto f = BufferedFile::create(s.dir / s.bank_info.file, s.durable);
  if (!f) return std::unexpected(f.error());
  s.bank.emplace(std::move(*f));
  return {};
}

Status ContainerWriter::append_record(std::span<const std::byte> record) {
  Impl& s = *impl_;
  if (!s.bank) return make_error(Errc::argument, "append_record: no bank open");
  if (record.size() != s.record_bytes) {
    return make_error(Errc::argument, "append_record: " + std::to_string(record.size()) + " bytes, expected " +
                                          std::to_string(s.record_bytes));
  }
  if (s.records_written >= s.bank_info.experts) return make_error(Errc::argument, "append_record: bank is full");
  WASTE_TRY(s.bank->write(record));
  ++s.records_written;
  return {};
}

Status ContainerWriter::end_bank() {
  Impl& s = *impl_;
  if (!s.bank) return make_error(Errc::argument, "end_bank: no bank open");
  if (s.records_written != s.bank_info.experts) {
    return make_error(Errc::argument, "end_bank: " + std::to_string(s.records_written) + " of " +
                                          std::to_string(s.bank_info.experts) + " records written");
  }
  s.bank_info.bytes = s.bank->offset();
  WASTE_TRY(s.bank->close());
  s.bank.reset();
  s.manifest.banks[s.bank_info.layer] = s.bank_info;
  return {};
}

Status ContainerWriter::adopt_bank(int layer, int codebook_base, const std::filesystem::path& finished_file) {
  Impl& s = *impl_;
  if (s.bank) return make_error(Errc::argument, "adopt_bank: a bank is still open");
  auto geometry = ExpertGeometry::from(s.manifest.config, s.manifest.quant);
  if (!geometry) return std::unexpected(geometry.error());
  ExpertBankInfo info;
  info.layer = layer;
  info.file = "experts-L" + std::to_string(layer) + ".bin";
  info.experts = s.manifest.config.n_experts;
  info.codebook_base = codebook_base;
  info.bytes = geometry->record_bytes * std::uint64_t(info.experts);
  std::error_code ec;
  const auto size = std::filesystem::file_size(finished_file, ec);
  if (ec) return make_error(Errc::io, finished_file.string() + ": " + ec.message());
  if (size != info.bytes) {
    return make_error(Errc::format, finished_file.string() + ": " + std::to_string(size) + " bytes, layer " +
                                        std::to_string(layer) + " needs " + std::to_string(info.bytes));
  }
  const auto dest = s.dir / info.file;
  if (!std::filesystem::equivalent(finished_file, dest, ec)) {
    std::filesystem::rename(finished_file, dest, ec);
    if (ec) return make_error(Errc::io, finished_file.string() + " -> " + dest.string() + ": " + ec.message());
  }
  s.manifest.banks[layer] = info;
  return {};
}

Result<Manifest> ContainerWriter::finish() {
  Impl& s = *impl_;
  if (s.tensor || s.bank) return make_error(Errc::argument, "finish: a tensor or bank is still open");
  WASTE_TRY(s.trunk->close());
  WASTE_TRY(s.codebooks->close());
  const std::string text = s.manifest.to_json_text();
  // Refuse to commit a manifest our own reader would reject.
  auto reparsed = Manifest::parse(text);
  if (!reparsed) return std::unexpected(reparsed.error().with_context("writer produced an invalid manifest"));
  WASTE_TRY(write_file_atomic(s.dir / "manifest.json", text));
  return std::move(*reparsed);
}

}  // namespace waste
