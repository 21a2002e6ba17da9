#include "shared/container/expert_bank.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

#include "shared/container/file_io.hpp"

namespace waste {

void AlignedBuffer::Free::operator()(std::byte* p) const noexcept { std::free(p); }

AlignedBuffer::AlignedBuffer(std::size_t bytes) {
  size_ = (bytes + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
  if (size_ == 0) return;
  void* p = std::aligned_alloc(kRecordAlign, size_);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(static_cast<std::byte*>(p));
}

namespace {

struct Bank {
  int layer = 0;
  int experts = 0;
  std::uint64_t record_bytes = 0;
  UniqueFd buffered;   // always open: used when the caller's buffer is not aligned for O_DIRECT
  UniqueFd direct;     // open only when the probe read proved O_DIRECT works here
};

// O_DIRECT needs an aligned buffer, length and offset; some filesystems (tmpfs) refuse it
// at open or at the first read, so one aligned 4 KiB read at offset 0 decides.
UniqueFd try_open_direct(const std::filesystem::path& path) {
#ifdef O_DIRECT
  auto fd = open_file(path, O_RDONLY | O_DIRECT);
  if (!fd) return {};
  AlignedBuffer probe(kRecordAlign);
  const ssize_t n = ::pread(fd->get(), probe.data(), kRecordAlign, 0);
  if (n != static_cast<ssize_t>(kRecordAlign)) return {};
  return std::move(*fd);
#else
  (void)path;
  return {};
#endif
}

}  // namespace

struct ExpertBanks::Impl {
  std::map<int, Bank> banks;
  ExpertQuant quant;
  ExpertGeometry geometry;
  int n_codebooks = 0;
  BankReadOptions options;
  bool all_direct = true;
  std::uint64_t record_bytes = 0;
};

ExpertBanks::ExpertBanks(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExpertBanks::ExpertBanks(ExpertBanks&&) noexcept = default;
ExpertBanks& ExpertBanks::operator=(ExpertBanks&&) noexcept = default;
ExpertBanks::~ExpertBanks() = default;

Result<ExpertBanks> ExpertBanks::open(const std::filesystem::path& container_dir, const Manifest& manifest,
                                      int n_codebooks, BankReadOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->quant = manifest.quant;
  impl->n_codebooks = n_codebooks;
  impl->options = options;
  if (manifest.config.n_experts > 0) {
    auto g = ExpertGeometry::from(manifest.config, manifest.quant);
    if (!g) return std::unexpected(g.error());
    impl->geometry = *g;
  }
  impl->all_direct = !manifest.banks.empty() && options.direct_io;
  for (const auto& [layer, info] : manifest.banks) {
    const auto path = container_dir / info.file;
    Bank bank;
    bank.layer = layer;
    bank.experts = info.experts;
    bank.record_bytes = info.record_bytes();
    auto fd = open_file(path, O_RDONLY);
    if (!fd) return std::unexpected(fd.error());
    auto size = file_size(fd->get(), path);
    if (!size) return std::unexpected(size.error());
    if (*size != info.bytes) {
      return make_error(Errc::format, path.string() + ": size " + std::to_string(*size) + " != manifest bytes " +
                                          std::to_string(info.bytes));
    }
    bank.buffered = std::move(*fd);
    if (options.direct_io && bank.record_bytes % kRecordAlign == 0) bank.direct = try_open_direct(path);
    if (!bank.direct.valid()) {
      impl->all_direct = false;
      ::posix_fadvise(bank.buffered.get(), 0, 0, POSIX_FADV_RANDOM);
    }
    impl->record_bytes = std::max(impl->record_bytes, bank.record_bytes);
    impl->banks.emplace(layer, std::move(bank));
  }
  return ExpertBanks(std::move(impl));
}

namespace {

std::string record_who(int layer, int expert) {
  return "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + ": ";
}

}  // namespace

Result<ExpertBanks::RecordSource> ExpertBanks::locate_record(int layer, int expert,
                                                             std::span<std::byte> buffer) const {
  const std::string who = record_who(layer, expert);
  auto it = impl_->banks.find(layer);
  if (it == impl_->banks.end()) return make_error(Errc::argument, who + "layer has no expert bank");
  const Bank& bank = it->second;
  if (expert < 0 || expert >= bank.experts) return make_error(Errc::argument, who + "no such expert");
  if (buffer.size() < bank.record_bytes) {
    return make_error(Errc::argument, who + "buffer of " + std::to_string(buffer.size()) + " bytes < record " +
                                          std::to_string(bank.record_bytes));
  }
  auto record = buffer.first(bank.record_bytes);
  const bool aligned = reinterpret_cast<std::uintptr_t>(record.data()) % kRecordAlign == 0;
  const int fd = (bank.direct.valid() && aligned) ? bank.direct.get() : bank.buffered.get();
  return RecordSource{fd, std::uint64_t(expert) * bank.record_bytes, record};
}

Status ExpertBanks::check_record(int layer, int expert, std::span<const std::byte> record) const {
  WASTE_TRY(validate_record_header(record, layer, expert, impl_->quant, impl_->geometry, impl_->n_codebooks));
  if (impl_->options.verify_crc) WASTE_TRY(verify_record_crc(record, layer, expert, impl_->geometry));
  return {};
}

Status ExpertBanks::read_record(int layer, int expert, std::span<std::byte> buffer) const {
  auto source = locate_record(layer, expert, buffer);
  if (!source) return std::unexpected(source.error());
  const std::string who = record_who(layer, expert);
  auto n = pread_full(source->fd, source->record, source->offset);
  if (!n) return make_error(Errc::io, who + n.error().message);
  if (*n != source->record.size()) {
    return make_error(Errc::io, who + "short read (got " + std::to_string(*n) + " of " +
                                    std::to_string(source->record.size()) + " bytes)");
  }
  return check_record(layer, expert, source->record);
}

bool ExpertBanks::direct_io_engaged() const { return impl_->all_direct; }
const ExpertGeometry& ExpertBanks::geometry() const { return impl_->geometry; }
std::uint64_t ExpertBanks::record_bytes() const { return impl_->record_bytes; }

}  // namespace waste
