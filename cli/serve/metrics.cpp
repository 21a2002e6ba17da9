#include "cli/serve/metrics.hpp"

#include <cstdio>

namespace waste::serve {
namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const char* name, double value, const std::string& labels = {}) {
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", value);
  out += std::string(name) + (labels.empty() ? "" : "{" + labels + "}") + " " + number + "\n";
}

}  // namespace

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{route, status}];
}

std::uint64_t Metrics::requests(const std::string& route, int status) const {
  std::lock_guard lock(mutex_);
  auto it = requests_.find({route, status});
  return it == requests_.end() ? 0 : it->second;
}

std::string Metrics::render(const Scheduler* scheduler) const {
  std::string out;
  family(out, "waste_requests_total", "counter", "HTTP requests answered, by route and status.");
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, count] : requests_) {
      sample(out, "waste_requests_total", double(count),
             "route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"");
    }
  }
  if (!scheduler) return out;
  const SchedulerCounters& c = scheduler->counters();
  const auto get = [](const std::atomic<std::uint64_t>& v) { return double(v.load(std::memory_order_relaxed)); };
  family(out, "waste_prompt_tokens_total", "counter", "Prompt tokens fed through the model.");
  sample(out, "waste_prompt_tokens_total", get(c.prompt_tokens));
  family(out, "waste_generated_tokens_total", "counter", "Tokens sampled.");
  sample(out, "waste_generated_tokens_total", get(c.generated_tokens));
  family(out, "waste_queue_depth", "gauge", "Requests waiting for a sequence slot.");
  sample(out, "waste_queue_depth", c.queued.load(std::memory_order_relaxed));
  family(out, "waste_active_sequences", "gauge", "Sequences in the batch.");
  sample(out, "waste_active_sequences", c.active.load(std::memory_order_relaxed));
  family(out, "waste_parallel_slots", "gauge", "Sequences the batch holds at most (--parallel).");
  sample(out, "waste_parallel_slots", scheduler->options().parallel);
  family(out, "waste_steps_total", "counter", "Batched forward passes.");
  sample(out, "waste_steps_total", get(c.steps));
  family(out, "waste_pass_tokens_total", "counter", "Tokens fed in the batched passes, by kind.");
  sample(out, "waste_pass_tokens_total", get(c.decode_tokens_in_passes), "kind=\"decode\"");
  sample(out, "waste_pass_tokens_total", get(c.prefill_tokens_in_passes), "kind=\"prefill\"");
  const double hits = get(c.experts_hit), misses = get(c.experts_missed);
  family(out, "waste_expert_requests_total", "counter", "Expert records asked for, by cache result.");
  sample(out, "waste_expert_requests_total", hits, "result=\"hit\"");
  sample(out, "waste_expert_requests_total", misses, "result=\"miss\"");
  family(out, "waste_expert_cache_hit_ratio", "gauge", "Expert cache hits over requests since start.");
  sample(out, "waste_expert_cache_hit_ratio", hits + misses > 0 ? hits / (hits + misses) : 0.0);
  family(out, "waste_bytes_read_total", "counter", "Expert bytes read from disk.");
  sample(out, "waste_bytes_read_total", get(c.bytes_read));
  family(out, "waste_stage_seconds_total", "counter", "Engine thread time, by stage.");
  sample(out, "waste_stage_seconds_total", get(c.feed_ns) * 1e-9, "stage=\"forward\"");
  sample(out, "waste_stage_seconds_total", get(c.sample_ns) * 1e-9, "stage=\"sampling\"");
  sample(out, "waste_stage_seconds_total", get(c.vision_ns) * 1e-9, "stage=\"vision\"");
  family(out, "waste_images_encoded_total", "counter", "Images run through the vision tower.");
  sample(out, "waste_images_encoded_total", get(c.images_encoded));
  family(out, "waste_prompt_cached_tokens_total", "counter",
         "Prompt tokens restored from the prefix cache instead of fed.");
  sample(out, "waste_prompt_cached_tokens_total", get(c.cached_tokens));
  family(out, "waste_prefix_cache_lookups_total", "counter", "Prefix cache lookups at admission, by result.");
  sample(out, "waste_prefix_cache_lookups_total", get(c.prefix_hits), "result=\"hit\"");
  sample(out, "waste_prefix_cache_lookups_total", get(c.prefix_misses), "result=\"miss\"");
  family(out, "waste_prefix_cache_snapshots_total", "counter", "Sequence states stored in the prefix cache.");
  sample(out, "waste_prefix_cache_snapshots_total", get(c.prefix_stored));
  family(out, "waste_prefix_cache_evictions_total", "counter", "Snapshots dropped to fit the pool (least recently used).");
  sample(out, "waste_prefix_cache_evictions_total", get(c.prefix_evictions));
  family(out, "waste_prefix_cache_bytes", "gauge", "Bytes the prefix cache's snapshots hold (states and keys).");
  sample(out, "waste_prefix_cache_bytes", get(c.prefix_bytes));
  family(out, "waste_prefix_cache_capacity_bytes", "gauge", "The prefix cache's bound (--prefix-cache; 0 = off).");
  sample(out, "waste_prefix_cache_capacity_bytes", double(scheduler->options().prefix_cache_bytes));
  family(out, "waste_prefix_cache_entries", "gauge", "Snapshots in the prefix cache.");
  sample(out, "waste_prefix_cache_entries", get(c.prefix_entries));
  return out;
}

}  // namespace waste::serve
