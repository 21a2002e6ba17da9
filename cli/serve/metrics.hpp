// GET /metrics in Prometheus text format (version 0.0.4): requests by route and status, tokens
// in and out, queue depth, active sequences, expert cache hits/misses and hit rate, bytes read,
// the engine thread's time per stage (batched forward passes, sampling), and the prefix cache
// (tokens reused, lookups, snapshots, evictions, bytes held and the bound). With several models
// (--model) each model's series carry model="ID", and the models' states, budgets, loads and
// unloads are added; the positional MODEL form keeps its unlabelled series.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cli/serve/model_set.hpp"
#include "cli/serve/scheduler.hpp"

namespace waste::serve {

class Metrics {
 public:
  // HTTP threads, once per answered request (one short lock; not on the engine's path).
  void count_request(const std::string& route, int status);
  [[nodiscard]] std::uint64_t requests(const std::string& route, int status) const;
  // The whole exposition; `scheduler` may be null while loading.
  [[nodiscard]] std::string render(const Scheduler* scheduler) const;
  // With a model set (null while loading): each loaded model's series, labelled with model="ID"
  // when `per_model`, and then the models' own series.
  [[nodiscard]] std::string render(const ModelSet* models, bool per_model) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
};

}  // namespace waste::serve
