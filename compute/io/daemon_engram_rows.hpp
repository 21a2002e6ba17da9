// DaemonEngramRows: the EngramRowReader whose pages come from waste-ioserver's shared Engram pool
// (docs/design/shm_layout.md, "Engram page pool"). It maps the arena read-only and its own lease's
// ring segment, asks for each distinct page of a read_rows call on the ring (engram_demand, a
// 16-bit tag per page), waits for the completions, decodes the rows in place from the pinned pool
// slots (no copy of the page) and then unpins them all (engram_release). prefetch() sends
// engram_prefetch entries without waiting. Several clients share the pool: a page another client
// pulled in is a hit.
//
// It needs a lease of its own (a second attach), not the one a DaemonExpertSource uses: the
// rings are single-producer, single-consumer. read_rows and prefetch may be called from several
// threads (a mutex serialises them). If the daemon dies or stops, calls fail with "waste-ioserver
// (pid N) is gone" / "... stopped", and every later call the same way.
#pragma once

#include <memory>

#include "compute/engram/engram_layout.hpp"
#include "compute/engram/engram_rows.hpp"
#include "shared/ipc/client_lease.hpp"
#include "shared/result.hpp"

namespace waste {

class DaemonEngramRows final : public engram::EngramRowReader {
 public:
  // Table i of `layout` must be served by the daemon (same layer, rows and width). Errors: the
  // segments, a lease no longer valid, a daemon without that table or with another geometry.
  static Result<std::unique_ptr<DaemonEngramRows>> open(const ipc::ClientLease& lease,
                                                        const engram::EngramLayout& layout);
  ~DaemonEngramRows() override;

  [[nodiscard]] std::size_t layers() const noexcept override;
  [[nodiscard]] int width() const noexcept override;
  // Errors: a row beyond the table ("engram-L14.bin: row 123 beyond its 100 rows"), a page the
  // daemon could not read (its text), a pool every slot of which stays pinned by other clients
  // (after a bounded retry), the daemon gone.
  Status read_rows(std::size_t layer_index, std::span<const std::uint64_t> rows, std::span<float> out) override;
  void prefetch(std::size_t layer_index, std::span<const std::uint64_t> rows) override;
  // hits / misses: rows whose page the daemon found resident / had to read (or was reading);
  // prefetched: pages asked for by prefetch(); bytes_read: 4 KiB per missed page demand.
  [[nodiscard]] engram::EngramRowStats stats() const override;

  struct Impl;

 private:
  explicit DaemonEngramRows(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste
