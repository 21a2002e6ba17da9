#include "cli/serve/metrics.hpp"

#include <cstdio>
#include <vector>

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

namespace {

// A loaded model's scheduler and the label its series carry ("" for none).
struct Source {
  std::string label;
  const Scheduler* scheduler;
};

std::string with(const std::string& model, const std::string& extra) {
  if (model.empty()) return extra;
  return extra.empty() ? model : model + "," + extra;
}

void scheduler_series(std::string& out, const std::vector<Source>& sources) {
  if (sources.empty()) return;
  const auto get = [](const std::atomic<std::uint64_t>& v) { return double(v.load(std::memory_order_relaxed)); };
  // One family: its HELP and TYPE once, then a sample per model.
  const auto each = [&](const char* name, const char* type, const char* help, const char* extra, auto value) {
    family(out, name, type, help);
    for (const Source& s : sources) sample(out, name, value(*s.scheduler), with(s.label, extra));
  };
  const auto two = [&](const char* name, const char* type, const char* help, const char* first, auto a,
                       const char* second, auto b) {
    family(out, name, type, help);
    for (const Source& s : sources) {
      sample(out, name, a(*s.scheduler), with(s.label, first));
      sample(out, name, b(*s.scheduler), with(s.label, second));
    }
  };
  using S = const Scheduler&;
  each("waste_prompt_tokens_total", "counter", "Prompt tokens fed through the model.", "",
       [&](S s) { return get(s.counters().prompt_tokens); });
  each("waste_generated_tokens_total", "counter", "Tokens sampled.", "",
       [&](S s) { return get(s.counters().generated_tokens); });
  each("waste_queue_depth", "gauge", "Requests waiting for a sequence slot.", "",
       [&](S s) { return double(s.counters().queued.load(std::memory_order_relaxed)); });
  each("waste_active_sequences", "gauge", "Sequences in the batch.", "",
       [&](S s) { return double(s.counters().active.load(std::memory_order_relaxed)); });
  each("waste_parallel_slots", "gauge", "Sequences the batch holds at most (--parallel).", "",
       [&](S s) { return double(s.options().parallel); });
  each("waste_steps_total", "counter", "Batched forward passes.", "", [&](S s) { return get(s.counters().steps); });
  two("waste_pass_tokens_total", "counter", "Tokens fed in the batched passes, by kind.", "kind=\"decode\"",
      [&](S s) { return get(s.counters().decode_tokens_in_passes); }, "kind=\"prefill\"",
      [&](S s) { return get(s.counters().prefill_tokens_in_passes); });
  two("waste_expert_requests_total", "counter", "Expert records asked for, by cache result.", "result=\"hit\"",
      [&](S s) { return get(s.counters().experts_hit); }, "result=\"miss\"",
      [&](S s) { return get(s.counters().experts_missed); });
  each("waste_expert_cache_hit_ratio", "gauge", "Expert cache hits over requests since start.", "", [&](S s) {
    const double hits = get(s.counters().experts_hit), misses = get(s.counters().experts_missed);
    return hits + misses > 0 ? hits / (hits + misses) : 0.0;
  });
  each("waste_bytes_read_total", "counter", "Expert bytes read from disk.", "",
       [&](S s) { return get(s.counters().bytes_read); });
  family(out, "waste_stage_seconds_total", "counter", "Engine thread time, by stage.");
  for (const Source& src : sources) {
    const SchedulerCounters& c = src.scheduler->counters();
    sample(out, "waste_stage_seconds_total", get(c.feed_ns) * 1e-9, with(src.label, "stage=\"forward\""));
    sample(out, "waste_stage_seconds_total", get(c.sample_ns) * 1e-9, with(src.label, "stage=\"sampling\""));
    sample(out, "waste_stage_seconds_total", get(c.vision_ns) * 1e-9, with(src.label, "stage=\"vision\""));
  }
  each("waste_images_encoded_total", "counter", "Images run through the vision tower.", "",
       [&](S s) { return get(s.counters().images_encoded); });
  each("waste_prompt_cached_tokens_total", "counter", "Prompt tokens restored from the prefix cache instead of fed.",
       "", [&](S s) { return get(s.counters().cached_tokens); });
  two("waste_prefix_cache_lookups_total", "counter", "Prefix cache lookups at admission, by result.",
      "result=\"hit\"", [&](S s) { return get(s.counters().prefix_hits); }, "result=\"miss\"",
      [&](S s) { return get(s.counters().prefix_misses); });
  each("waste_prefix_cache_snapshots_total", "counter", "Sequence states stored in the prefix cache.", "",
       [&](S s) { return get(s.counters().prefix_stored); });
  each("waste_prefix_cache_evictions_total", "counter", "Snapshots dropped to fit the pool (least recently used).",
       "", [&](S s) { return get(s.counters().prefix_evictions); });
  each("waste_prefix_cache_bytes", "gauge", "Bytes the prefix cache's snapshots hold (states and keys).", "",
       [&](S s) { return get(s.counters().prefix_bytes); });
  each("waste_prefix_cache_capacity_bytes", "gauge", "The prefix cache's bound (--prefix-cache; 0 = off).", "",
       [&](S s) { return double(s.options().prefix_cache_bytes); });
  each("waste_prefix_cache_entries", "gauge", "Snapshots in the prefix cache.", "",
       [&](S s) { return get(s.counters().prefix_entries); });
}

}  // namespace

std::string Metrics::render(const Scheduler* scheduler) const {
  std::string out = render(static_cast<const ModelSet*>(nullptr), false);
  if (scheduler) scheduler_series(out, {{"", scheduler}});
  return out;
}

std::string Metrics::render(const ModelSet* models, bool per_model) const {
  std::string out;
  family(out, "waste_requests_total", "counter", "HTTP requests answered, by route and status.");
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, count] : requests_) {
      sample(out, "waste_requests_total", double(count),
             "route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"");
    }
  }
  if (!models) return out;
  const auto label = [](const std::string& id) { return "model=\"" + id + "\""; };
  // Under the set's lock for the whole walk: no model is unloaded while its series are read.
  models->visit_all([&](const std::vector<ModelView>& views) {
    std::vector<Source> sources;
    for (const ModelView& m : views) {
      if (m.scheduler) sources.push_back({per_model ? label(m.id) : std::string(), m.scheduler});
    }
    scheduler_series(out, sources);
    if (!per_model) return;
    family(out, "waste_model_state", "gauge", "Each model's state (1 for the one it is in).");
    for (const ModelView& m : views) {
      for (ModelState s : {ModelState::unloaded, ModelState::loading, ModelState::loaded, ModelState::unloading}) {
        sample(out, "waste_model_state", m.state == s ? 1.0 : 0.0, label(m.id) + ",state=\"" + state_name(s) + "\"");
      }
    }
    family(out, "waste_model_budget_bytes", "gauge",
           "The share of the server's budget each model holds while loading or loaded.");
    for (const ModelView& m : views) sample(out, "waste_model_budget_bytes", double(m.budget_bytes), label(m.id));
    family(out, "waste_model_loads_total", "counter",
           "Model loads, by result (refused: the budget decision answered 507 before loading).");
    for (const ModelView& m : views) {
      sample(out, "waste_model_loads_total", double(m.counters.loads), label(m.id) + ",result=\"loaded\"");
      sample(out, "waste_model_loads_total", double(m.counters.load_failures), label(m.id) + ",result=\"failed\"");
      sample(out, "waste_model_loads_total", double(m.counters.refusals), label(m.id) + ",result=\"refused\"");
    }
    family(out, "waste_model_unloads_total", "counter",
           "Models unloaded, by reason (idle: --idle-unload; room: for another model's load).");
    for (const ModelView& m : views) {
      sample(out, "waste_model_unloads_total", double(m.counters.idle_unloads), label(m.id) + ",reason=\"idle\"");
      sample(out, "waste_model_unloads_total", double(m.counters.room_unloads), label(m.id) + ",reason=\"room\"");
    }
  });
  return out;
}

}  // namespace waste::serve
