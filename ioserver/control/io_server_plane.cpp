// DataPlane over IoServer: a field-for-field adapter, nothing more.
#include <nlohmann/json.hpp>

#include "ioserver/control/data_plane.hpp"
#include "ioserver/io_server.hpp"

namespace waste::ioserver {

namespace {

using nlohmann::json;

class IoServerPlane final : public DataPlane {
 public:
  explicit IoServerPlane(std::unique_ptr<IoServer> server) : server_(std::move(server)) {}
  ~IoServerPlane() override { server_->stop(); }

  Result<PlaneLease> attach(int pid) override {
    auto lease = server_->attach(pid);
    if (!lease) return std::unexpected(lease.error());
    PlaneLease out;
    out.client_idx = lease->client_idx;
    out.arena_segment = lease->segment_name;
    out.trunk_segment = lease->trunk_segment_name;
    out.lease.generation = lease->generation;
    out.lease.pid = lease->pid;
    out.lease.trunk_bytes = lease->trunk_bytes;
    out.lease.daemon_pid = lease->daemon_pid;
    out.lease.ring_segment = lease->ring_segment_name;
    out.lease.wake_segment = lease->wake_segment_name;
    out.lease.shm_dir = lease->shm_dir;
    return out;
  }
  Status detach(int client_idx) override {
    const auto who = server_->occupant(client_idx);
    if (!who) return make_error(Errc::argument, "detach: client " + std::to_string(client_idx) + " is not attached");
    return server_->detach(client_idx, who->pid, who->generation);
  }
  Status detach(int client_idx, int pid, std::uint64_t generation) override {
    return server_->detach(client_idx, pid, generation);
  }
  Status set_cache_slots(std::uint32_t usable_slots) override { return server_->set_cache_slots(usable_slots); }
  void reclaim_dead_clients() override { server_->reclaim_dead_clients(); }

  [[nodiscard]] json stats() const override { return stats_json(server_->stats()); }

  Status set_policy(std::string_view policy) override {
    const auto p = parse_cache_policy(policy);
    if (!p) return make_error(Errc::argument, "cache policy '" + std::string(policy) + "' is not echo, reuse, lfru or lru");
    return server_->set_policy(*p);
  }
  void stop() override { server_->stop(); }

 private:
  std::unique_ptr<IoServer> server_;
};

}  // namespace

Result<std::unique_ptr<DataPlane>> make_io_server_plane(const IoServerConfig& config) {
  auto server = IoServer::create(config);
  if (!server) return std::unexpected(server.error());
  return std::unique_ptr<DataPlane>(std::make_unique<IoServerPlane>(std::move(*server)));
}

}  // namespace waste::ioserver
