#include "cli/bench/io_replay.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <string>

namespace waste::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;
double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

ExpertSourceStats minus(const ExpertSourceStats& a, const ExpertSourceStats& b) {
  return ExpertSourceStats{a.hits - b.hits, a.misses - b.misses, a.bytes_read - b.bytes_read,
                           a.prefetch_issued - b.prefetch_issued, a.wait_seconds - b.wait_seconds};
}

nlohmann::json latency_json(const LatencySummary& l) {
  return {{"count", l.count}, {"mean_us", l.mean_us}, {"p50_us", l.p50_us},
          {"p90_us", l.p90_us}, {"p99_us", l.p99_us}, {"max_us", l.max_us}};
}

}  // namespace

LatencySummary summarize(std::vector<double>& s) {
  LatencySummary out;
  if (s.empty()) return out;
  std::sort(s.begin(), s.end());
  auto rank = [&](double q) { return s[std::min(s.size() - 1, std::size_t(std::ceil(q * double(s.size()))) - 1)]; };
  out.count = s.size();
  out.mean_us = std::accumulate(s.begin(), s.end(), 0.0) / double(s.size());
  out.p50_us = rank(0.50);
  out.p90_us = rank(0.90);
  out.p99_us = rank(0.99);
  out.max_us = s.back();
  return out;
}

Result<std::vector<ReplayPass>> replay_trace(ExpertSource& source, const std::vector<TraceEvent>& trace,
                                             std::uint64_t record_bytes, int passes) {
  std::vector<ReplayPass> out;
  std::vector<double> record_us, layer_us;
  for (int pass = 0; pass < passes; ++pass) {
    ReplayPass r;
    record_us.clear();
    layer_us.clear();
    std::set<int> steps;
    const ExpertSourceStats start_stats = source.stats();
    const auto start = Clock::now();
    for (const auto& e : trace) {
      if (e.prefetch) {
        source.prefetch(e.layer, e.experts);
        continue;
      }
      steps.insert(e.step);
      auto where = [&] { return "step " + std::to_string(e.step) + " layer " + std::to_string(e.layer); };
      const ExpertSourceStats before = source.stats();
      const auto t0 = Clock::now();
      if (auto s = source.request_layer(e.layer, e.experts); !s) return std::unexpected(s.error().with_context(where()));
      for (int id : e.experts) {
        auto view = source.acquire(e.layer, id);
        if (!view) return std::unexpected(view.error().with_context(where() + " expert " + std::to_string(id)));
        record_us.push_back(micros(Clock::now() - t0));
      }
      source.release_layer(e.layer);
      const double layer_time = micros(Clock::now() - t0);
      if (source.stats().misses == before.misses) layer_us.push_back(layer_time);
      ++r.layer_requests;
      r.records += e.experts.size();
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    r.steps = steps.size();
    r.record_bytes = r.records * record_bytes;
    r.experts = minus(source.stats(), start_stats);
    r.record_latency = summarize(record_us);
    r.hit_layer = summarize(layer_us);
    out.push_back(r);
  }
  return out;
}

nlohmann::json replay_json(const ReplayPass& p) {
  return {{"steps", p.steps},
          {"layer_requests", p.layer_requests},
          {"records", p.records},
          {"seconds", p.seconds},
          {"records_per_second", p.records_per_second()},
          {"disk_bytes_read", p.experts.bytes_read},
          {"disk_gb_per_second", p.disk_gb_per_second()},
          {"disk_bytes_per_step", p.disk_bytes_per_step()},
          {"experts_hit", p.experts.hits},
          {"experts_missed", p.experts.misses},
          {"hit_rate", p.hit_rate()},
          {"prefetch_issued", p.experts.prefetch_issued},
          {"record_latency", latency_json(p.record_latency)},
          {"hit_layer_round_trip", latency_json(p.hit_layer)}};
}

void print_replay_table(const std::vector<ReplayPass>& passes) {
  std::printf("%-5s %8s %10s %9s %10s %8s %9s %6s %9s %9s %9s %12s\n", "pass", "records", "seconds", "rec/s", "GB read",
              "GB/s", "MB/step", "hit%", "p50 us", "p99 us", "max us", "hit-layer us");
  for (std::size_t i = 0; i < passes.size(); ++i) {
    const auto& p = passes[i];
    std::printf("%-5zu %8llu %10.3f %9.1f %10.4f %8.3f %9.2f %6.1f %9.1f %9.1f %9.1f %12.1f\n", i + 1,
                static_cast<unsigned long long>(p.records), p.seconds, p.records_per_second(),
                double(p.experts.bytes_read) / 1e9, p.disk_gb_per_second(), p.disk_bytes_per_step() / 1e6,
                100.0 * p.hit_rate(),
                p.record_latency.p50_us, p.record_latency.p99_us, p.record_latency.max_us, p.hit_layer.mean_us);
  }
}

}  // namespace waste::cli::bench
