// IoServer::create(config): the container-backed form (banks + trunk image). Kept apart from the
// core so the core builds and tests with an injected reader alone.
#include "ioserver/io_server.hpp"
#include "ioserver/nvme/uring_record_reader.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_bank.hpp"
#include "shared/container/trunk.hpp"

namespace waste {

Result<std::unique_ptr<IoServer>> IoServer::create(const IoServerConfig& config) {
  auto info = ContainerInfo::open(config.container);
  if (!info) return std::unexpected(info.error());
  return create(config, *info);
}

Result<std::unique_ptr<IoServer>> IoServer::create(const IoServerConfig& config, const ContainerInfo& described) {
  const ContainerInfo* info = &described;
  auto banks = ExpertBanks::open(config.container, info->manifest, info->n_codebooks,
                                 BankReadOptions{config.direct_io, config.verify_crc});
  if (!banks) return std::unexpected(banks.error());

  Parts parts;
  if (config.io_uring) {
    parts.reader = make_uring_record_reader(std::move(*banks), info->manifest);
  } else {
    parts.reader = make_bank_record_reader(std::move(*banks), info->manifest);
  }
  const auto layout = std::make_shared<TrunkLayout>(TrunkLayout::plan(info->manifest));
  parts.trunk_bytes = layout->image_bytes;
  const auto manifest = std::make_shared<Manifest>(info->manifest);
  const auto trunk_bin = info->files.trunk();
  parts.trunk_fill = [layout, manifest, trunk_bin](std::span<std::byte> image) {
    return load_trunk_image(trunk_bin, *manifest, *layout, image);
  };
  auto identity = ipc::container_identity(config.container, parts.reader->n_layers());
  if (!identity) return std::unexpected(identity.error());
  parts.identity = std::move(*identity);
  parts.engram_dir = config.container;
  return create(config, std::move(parts));
}

}  // namespace waste
