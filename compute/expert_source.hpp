// Where the forward pass gets expert records from. Production reads go through one
// implementation, DaemonExpertSource (waste-ioserver's shared-memory arena, or the same
// IoServer in this process: compute/io/in_process_plane.hpp); tests add fixtures (e.g.
// tests/compute/local_expert_source.*). The forward pass must produce identical bits with any.
//
// Contract, per MoE layer of one token (or one prefill window of distinct experts):
//   request(layer, ids)   once, ids in selection order: pins them and starts every read at once
//   acquire(layer, id)    blocks until that record is in memory; the view stays valid (pinned)
//                         until release_layer(layer)
//   acquire_next(layer)   blocks until the next not-yet-returned record of the current request
//                         is in memory and returns it with its index in the request, so compute
//                         can start on whichever record lands first. Use either acquire() or
//                         acquire_next() within one request, not both.
//   release_layer(layer)  unpins the layer's records
//   prefetch(layer, ids)  speculative, may be dropped; never pins, never changes results
// Calls come from one compute thread per source (a source is not shared between threads).
//
// request_layer() is the non-virtual entry the forward pass uses: it remembers the ids (for the
// default acquire_next, which hands records out in request order via acquire()) and calls
// request(). Sources that know landing order override acquire_next and may read the ids back
// with requested().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shared/container/expert_record.hpp"
#include "shared/result.hpp"

namespace waste {

struct ExpertSourceStats {
  std::uint64_t hits = 0;          // demand requests served from memory (or already in flight)
  std::uint64_t misses = 0;        // demand requests that needed a read
  std::uint64_t bytes_read = 0;    // record bytes read from disk for this source (incl. prefetch)
  std::uint64_t prefetch_issued = 0;
  double wait_seconds = 0;         // time acquire() spent blocked on I/O
};

// One record handed out by acquire_next: `index` is its position in the request's id list.
struct ReadyExpert {
  int index = 0;
  ExpertView view;
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

  // Default: request order through acquire(). Errors once every record was handed out.
  virtual Result<ReadyExpert> acquire_next(int layer) {
    if (layer != requested_layer_ || next_ >= requested_.size()) {
      return make_error(Errc::argument, "acquire_next on layer " + std::to_string(layer) +
                                            ": no record left in the current request");
    }
    const int index = int(next_++);
    auto view = acquire(layer, requested_[std::size_t(index)]);
    if (!view) return std::unexpected(view.error());
    return ReadyExpert{index, *view};
  }

  // How many records the source can keep in memory (lookahead sizing); 0 = unknown or no cache.
  [[nodiscard]] virtual std::uint64_t cache_capacity_records() const { return 0; }

  // Remember the ids, then request(). The id list keeps its capacity, so steady state does not
  // allocate.
  Status request_layer(int layer, std::span<const int> experts) {
    requested_.assign(experts.begin(), experts.end());
    requested_layer_ = layer;
    next_ = 0;
    return request(layer, experts);
  }

 protected:
  [[nodiscard]] std::span<const int> requested() const { return requested_; }
  [[nodiscard]] int requested_layer() const { return requested_layer_; }

 private:
  std::vector<int> requested_;
  int requested_layer_ = -1;
  std::size_t next_ = 0;
};

}  // namespace waste
