// Where the forward pass gets expert records from. Two implementations with one contract:
// LocalExpertSource (in-process reads and cache) and DaemonExpertSource (waste-ioserver's
// shared-memory arena). The forward pass must produce identical bits with either.
//
// Contract, per MoE layer of one token:
//   request(layer, ids)   once, ids in selection order: pins them and starts every read at once
//   acquire(layer, id)    blocks until that record is in memory; the view stays valid (pinned)
//                         until release_layer(layer)
//   release_layer(layer)  unpins the layer's records
//   prefetch(layer, ids)  speculative, may be dropped; never pins, never changes results
// Calls come from one compute thread per source (a source is not shared between threads).
#pragma once

#include <cstdint>
#include <span>

#include "shared/container/expert_record.hpp"
#include "shared/result.hpp"

namespace waste {

struct ExpertSourceStats {
  std::uint64_t hits = 0;          // demand requests served from memory
  std::uint64_t misses = 0;        // demand requests that needed a read
  std::uint64_t bytes_read = 0;    // record bytes read from disk for this source (incl. prefetch)
  std::uint64_t prefetch_issued = 0;
  double wait_seconds = 0;         // time acquire() spent blocked on I/O
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual Status request(int layer, std::span<const int> experts) = 0;
  virtual Result<ExpertView> acquire(int layer, int expert) = 0;
  virtual void release_layer(int layer) = 0;
  virtual void prefetch(int layer, std::span<const int> experts) = 0;
  [[nodiscard]] virtual ExpertSourceStats stats() const = 0;
  [[nodiscard]] virtual bool direct_io() const = 0;
};

}  // namespace waste
