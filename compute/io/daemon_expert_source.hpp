// DaemonExpertSource: the ExpertSource that gets records from a waste-ioserver through shared
// memory. It maps the daemon's arena segment read-only and its lease's own ring segment and the
// wake doorbell read-write (never creates or allocates there), sends requests on its ring and
// returns views straight into arena slots (no copy). With a lease from an in-process IoServer
// on private memory (lease.mappings) it uses those mappings: same protocol, no names.
//
// Thread affinity: one compute thread per source, as the ExpertSource contract says.
// A view stays valid until release_layer(layer): the daemon holds a pin for this client.
// If the daemon dies or stops, waits fail within ~2 s with "waste-ioserver (pid N) is gone"
// (or "... stopped"); the source is then broken and every later call fails the same way.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/expert_source.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/ipc/client_lease.hpp"
#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/spsc_ring.hpp"

namespace waste {

class DaemonExpertSource final : public ExpertSource {
 public:
  // `geometry` must describe the daemon's container (record_bytes is checked against it when
  // non-zero). Errors: segment missing, wrong layout version, lease not (or no longer) ours.
  static Result<std::unique_ptr<DaemonExpertSource>> open(const ipc::ClientLease& lease, const ExpertGeometry& geometry);
  struct OpenOptions {
    // When set, the daemon's container identity (canonical path, and inode/size/mtime of the
    // manifest, trunk, codebooks and banks) must match these files; the error names the file.
    std::filesystem::path container;
  };
  static Result<std::unique_ptr<DaemonExpertSource>> open(const ipc::ClientLease& lease, const ExpertGeometry& geometry,
                                                          const OpenOptions& options);
  ~DaemonExpertSource() override;

  Status request(int layer, std::span<const int> experts) override;
  Result<ExpertView> acquire(int layer, int expert) override;
  void release_layer(int layer) override;
  void prefetch(int layer, std::span<const int> experts) override;
  [[nodiscard]] ExpertSourceStats stats() const override;
  [[nodiscard]] bool direct_io() const override;
  // The first record of the current request whose completion has arrived (request order among
  // those landed), so compute starts on whatever the daemon delivers first.
  Result<ReadyExpert> acquire_next(int layer) override;
  // The arena's slot count (shared with the daemon's other clients): the lookahead size hint.
  [[nodiscard]] std::uint64_t cache_capacity_records() const override;

  // The record's bytes in the arena slot (record_bytes long), valid like acquire()'s view.
  Result<std::span<const std::byte>> acquire_bytes(int layer, int expert);
  [[nodiscard]] std::uint64_t record_bytes() const;
  [[nodiscard]] int daemon_pid() const;

  struct Impl;

 private:
  explicit DaemonExpertSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The daemon's trunk image, mapped read-only. `keep_alive` owns the mapping.
struct SharedTrunkImage {
  std::span<const std::byte> image;
  std::shared_ptr<const void> keep_alive;
};
Result<SharedTrunkImage> map_trunk_segment(const ipc::ClientLease& lease);

}  // namespace waste
