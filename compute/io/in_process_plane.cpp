#include "compute/io/in_process_plane.hpp"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compute/io/daemon_engram_rows.hpp"
#include "compute/io/daemon_expert_source.hpp"
#include "compute/io/shared_trunk.hpp"
#include "ioserver/io_server.hpp"

namespace waste {

namespace {

// A DaemonExpertSource that owns the IoServer it reads from. Member order: the source (the
// client) is destroyed before the server it talks to.
class InProcessExpertSource final : public ExpertSource {
 public:
  InProcessExpertSource(std::unique_ptr<IoServer> server, std::unique_ptr<DaemonExpertSource> inner)
      : server_(std::move(server)), inner_(std::move(inner)) {}
  ~InProcessExpertSource() override {
    inner_.reset();
    server_->stop();
  }

  // request_layer on the inner source: its acquire_next reads the ids the base class keeps.
  Status request(int layer, std::span<const int> experts) override { return inner_->request_layer(layer, experts); }
  Result<ExpertView> acquire(int layer, int expert) override { return inner_->acquire(layer, expert); }
  Result<ReadyExpert> acquire_next(int layer) override { return inner_->acquire_next(layer); }
  void release_layer(int layer) override { inner_->release_layer(layer); }
  void prefetch(int layer, std::span<const int> experts) override { inner_->prefetch(layer, experts); }
  [[nodiscard]] bool direct_io() const override { return inner_->direct_io(); }
  [[nodiscard]] std::uint64_t cache_capacity_records() const override { return inner_->cache_capacity_records(); }
  [[nodiscard]] ExpertSourceStats stats() const override {
    ExpertSourceStats s = inner_->stats();
    s.hits -= baseline_.hits;
    s.misses -= baseline_.misses;
    s.bytes_read -= baseline_.bytes_read;
    s.prefetch_issued -= baseline_.prefetch_issued;
    s.wait_seconds -= baseline_.wait_seconds;
    return s;
  }

  // Resident mode: read every record of every bank once; the arena holds them all, so none is
  // evicted later. Not counted in stats().
  Status load_all(const Manifest& manifest, int n_experts) {
    constexpr int kWindow = 64;  // well inside the request ring
    std::vector<int> ids;
    for (const auto& [layer, bank] : manifest.banks) {
      (void)bank;
      for (int begin = 0; begin < n_experts; begin += kWindow) {
        ids.clear();
        for (int e = begin; e < std::min(n_experts, begin + kWindow); ++e) ids.push_back(e);
        Status requested = inner_->request_layer(layer, ids);
        for (std::size_t i = 0; requested && i < ids.size(); ++i) {
          auto view = inner_->acquire(layer, ids[i]);
          if (!view) requested = std::unexpected(view.error());
        }
        inner_->release_layer(layer);
        WASTE_TRY(requested);
      }
    }
    baseline_ = inner_->stats();
    return ok();
  }

 private:
  std::unique_ptr<IoServer> server_;
  std::unique_ptr<DaemonExpertSource> inner_;
  ExpertSourceStats baseline_;
};

}  // namespace

Result<InProcessPlane> open_in_process_plane(const std::filesystem::path& model, const ContainerInfo& info,
                                             const InProcessPlaneOptions& options) {
  const auto context = [](const Error& e) { return std::unexpected(e.with_context("in-process data plane")); };
  const ModelConfig& c = info.manifest.config;
  const std::uint64_t all_records = std::uint64_t(info.manifest.banks.size()) * std::uint64_t(c.n_experts);
  IoServerConfig config;
  config.container = model;
  config.instance = "in-process-" + std::to_string(::getpid());  // private memory: never a name
  config.private_memory = true;
  config.arena_slots = options.resident ? all_records
                       : options.arena_slots > 0 ? options.arena_slots
                                                 : std::uint64_t(2) * std::uint64_t(std::max(c.top_k, 1));
  config.reader_threads = std::max(options.reader_threads, 1);
  config.direct_io = options.direct_io;
  config.verify_crc = options.verify_crc;
  config.max_clients = options.engram_layout ? 2 : 1;  // this process only (its Engram reader's lease too)
  auto server = IoServer::create(config, info);
  if (!server) return context(server.error());
  auto lease = (*server)->attach(::getpid());
  if (!lease) return context(lease.error());
  auto inner = DaemonExpertSource::open(*lease, info.geometry, DaemonExpertSource::OpenOptions{model});
  if (!inner) return context(inner.error());
  InProcessPlane out;
  out.arena_slots = config.arena_slots;
  auto trunk = open_shared_trunk(*lease, model, info.manifest);
  if (!trunk) return context(trunk.error());
  out.trunk = std::make_shared<const Trunk>(std::move(*trunk));
  if (options.engram_layout) {
    auto engram_lease = (*server)->attach(::getpid());
    if (!engram_lease) return context(engram_lease.error().with_context("Engram lease"));
    auto rows = DaemonEngramRows::open(*engram_lease, *options.engram_layout);
    if (!rows) return context(rows.error());
    out.engram_rows = std::move(*rows);
  }
  auto source = std::make_unique<InProcessExpertSource>(std::move(*server), std::move(*inner));
  if (options.resident) {
    if (auto loaded = source->load_all(info.manifest, c.n_experts); !loaded) {
      out.engram_rows.reset();  // its lease before the server
      return context(loaded.error());
    }
  }
  out.source = std::move(source);
  return out;
}

}  // namespace waste
