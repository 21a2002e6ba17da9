#include "compute/io/daemon_attach.hpp"

#include "compute/io/daemon_engram_rows.hpp"
#include "compute/io/daemon_expert_source.hpp"
#include "compute/io/shared_trunk.hpp"

namespace waste {

Result<DaemonAttachment> attach_daemon(const std::filesystem::path& model, const ContainerInfo& container,
                                       const ConnectOptions& options) {
  DaemonAttachment out;
  auto connection = connect_or_spawn(model, options);
  if (!connection) return std::unexpected(connection.error());
  out.connection = std::make_unique<DaemonConnection>(std::move(*connection));
  auto source = open_daemon_source(out.connection->lease(), container.geometry, model);
  if (!source) return std::unexpected(source.error());
  out.source = std::move(*source);
  auto trunk = open_daemon_trunk(out.connection->lease(), model, container.manifest);
  if (!trunk) return std::unexpected(trunk.error());
  out.trunk = std::move(*trunk);
  return out;
}

namespace {

// DaemonEngramRows with the connection its lease belongs to; the reader goes first.
class ConnectedEngramRows final : public engram::EngramRowReader {
 public:
  ConnectedEngramRows(std::unique_ptr<DaemonConnection> connection, std::unique_ptr<DaemonEngramRows> rows)
      : connection_(std::move(connection)), rows_(std::move(rows)) {}
  ~ConnectedEngramRows() override { rows_.reset(); }
  [[nodiscard]] std::size_t layers() const noexcept override { return rows_->layers(); }
  [[nodiscard]] int width() const noexcept override { return rows_->width(); }
  Status read_rows(std::size_t layer_index, std::span<const std::uint64_t> rows, std::span<float> out) override {
    return rows_->read_rows(layer_index, rows, out);
  }
  void prefetch(std::size_t layer_index, std::span<const std::uint64_t> rows) override {
    rows_->prefetch(layer_index, rows);
  }
  [[nodiscard]] engram::EngramRowStats stats() const override { return rows_->stats(); }

 private:
  std::unique_ptr<DaemonConnection> connection_;
  std::unique_ptr<DaemonEngramRows> rows_;
};

}  // namespace

Result<std::unique_ptr<engram::EngramRowReader>> open_daemon_engram_rows(const std::filesystem::path& model,
                                                                         const engram::EngramLayout& layout,
                                                                         const ConnectOptions& options) {
  ConnectOptions co = options;
  co.allow_spawn = false;   // the expert source's connection found or started it
  co.state_bytes = 1;       // the engine's state is declared once, by that connection
  auto connection = connect_or_spawn(model, co);
  if (!connection) return std::unexpected(connection.error().with_context("Engram lease"));
  auto owned = std::make_unique<DaemonConnection>(std::move(*connection));
  auto rows = DaemonEngramRows::open(owned->lease(), layout);
  if (!rows) return std::unexpected(rows.error());
  return std::unique_ptr<engram::EngramRowReader>(
      std::make_unique<ConnectedEngramRows>(std::move(owned), std::move(*rows)));
}

Result<std::unique_ptr<ExpertSource>> open_daemon_source(const ipc::ClientLease& lease, const ExpertGeometry& geometry,
                                                         const std::filesystem::path& container) {
  auto source = DaemonExpertSource::open(lease, geometry, DaemonExpertSource::OpenOptions{container});
  if (!source) return std::unexpected(source.error());
  return std::unique_ptr<ExpertSource>(std::move(*source));
}

Result<std::shared_ptr<const Trunk>> open_daemon_trunk(const ipc::ClientLease& lease,
                                                       const std::filesystem::path& model, const Manifest& manifest) {
  if (lease.trunk_segment_name.empty()) return std::shared_ptr<const Trunk>{};  // the engine loads its own
  auto trunk = open_shared_trunk(lease, model, manifest);
  if (!trunk) return std::unexpected(trunk.error());
  return std::make_shared<const Trunk>(std::move(*trunk));
}

}  // namespace waste
