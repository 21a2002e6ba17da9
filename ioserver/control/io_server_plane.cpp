// DataPlane over engineer D1's IoServer: a field-for-field adapter, nothing more.
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
    out.extra = json{{"generation", lease->generation}, {"trunk_bytes", lease->trunk_bytes}, {"daemon_pid", lease->daemon_pid}};
    return out;
  }
  Status detach(int client_idx) override { return server_->detach(client_idx); }
  void reclaim_dead_clients() override { server_->reclaim_dead_clients(); }

  [[nodiscard]] json stats() const override {
    const IoStats s = server_->stats();
    json latency = json::array();
    for (auto v : s.read_latency_us_log2) latency.push_back(v);
    json totals = {{"hits", s.hits},
                   {"misses", s.misses},
                   {"bytes_read", s.bytes_read},
                   {"reads", s.reads},
                   {"prefetch_reads", s.prefetch_reads},
                   {"read_errors", s.read_errors},
                   {"evictions", s.evictions},
                   {"clients_reclaimed", s.clients_reclaimed},
                   {"arena_waits", s.arena_waits},
                   {"demands_waiting", s.demands_waiting},
                   {"arena_populated_bytes", s.arena_populated_bytes},
                   {"read_latency_us_log2", latency},
                   {"queue_depth", s.read_queue_depth},
                   {"direct_io", s.direct_io},
                   {"io_uring", s.io_uring},
                   {"slots_total", s.slots_total},
                   {"slots_used", s.slots_used},
                   {"slots_pinned", s.slots_pinned},
                   {"record_bytes", s.record_bytes},
                   {"policy", cache_policy_name(s.policy)}};
    json clients = json::array();
    for (const auto& c : s.clients) {
      clients.push_back(json{{"client_idx", c.client_idx},
                             {"pid", c.pid},
                             {"hits", c.hits},
                             {"misses", c.misses},
                             {"bytes_read", c.bytes_read},
                             {"prefetch_reads", c.prefetch_reads},
                             {"pinned_slots", c.pinned_slots},
                             {"queue_depth", c.request_queue_depth}});
    }
    return json{{"totals", totals}, {"clients", clients}};
  }

  Status set_policy(std::string_view policy) override {
    const auto p = parse_cache_policy(policy);
    if (!p) return make_error(Errc::argument, "cache policy '" + std::string(policy) + "' is not lfru or lru");
    return server_->set_policy(*p);
  }
  // Placeholder: the data plane's own set_cache_slots lands with branch h1 (the lead merges it).
  Status set_cache_slots(std::uint32_t /*usable_slots*/) override { return ok(); }
  void stop() override { server_->stop(); }

 private:
  std::unique_ptr<IoServer> server_;
};

}  // namespace

Result<std::unique_ptr<DataPlane>> make_io_server_plane(const DataPlaneConfig& config) {
  IoServerConfig c;
  c.container = config.container;
  c.instance = config.instance;
  c.arena_slots = config.arena_slots;
  const auto policy = parse_cache_policy(config.policy);
  if (!policy) return make_error(Errc::argument, "cache policy '" + config.policy + "' is not lfru or lru");
  c.policy = *policy;
  c.reader_threads = config.reader_threads;
  c.direct_io = config.direct_io;
  c.verify_crc = config.verify_crc;
  c.io_uring = config.io_uring;
  c.max_clients = config.max_clients;
  c.populate_arena = config.populate_arena;
  auto server = IoServer::create(c);
  if (!server) return std::unexpected(server.error());
  return std::unique_ptr<DataPlane>(std::make_unique<IoServerPlane>(std::move(*server)));
}

}  // namespace waste::ioserver
