#include "cli/bench/engram_report.hpp"

#include <cstdio>

namespace waste::cli::bench {
namespace {

double per_token(double value, int tokens) { return tokens > 0 ? value / double(tokens) : 0.0; }

double hit_percent(const engram::EngramRowStats& s) {
  const std::uint64_t total = s.hits + s.misses;
  return total ? 100.0 * double(s.hits) / double(total) : 0.0;
}

}  // namespace

engram::EngramRowStats engram_delta(const engram::EngramRowStats& after, const engram::EngramRowStats& before) {
  engram::EngramRowStats d;
  d.hits = after.hits - before.hits;
  d.misses = after.misses - before.misses;
  d.prefetched = after.prefetched - before.prefetched;
  d.bytes_read = after.bytes_read - before.bytes_read;
  d.rows_asked = after.rows_asked - before.rows_asked;
  d.wait_seconds = after.wait_seconds - before.wait_seconds;
  return d;
}

std::string engram_phase_line(const char* phase, const EngramPhase& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "engram  %-7s  %.2f rows/token  hit %5.1f%%  %.2f pages/token  %.0f B/token  wait %.3f ms/token  ahead %.2f/token",
                phase,
                per_token(double(p.rows.rows_asked), p.tokens), hit_percent(p.rows),
                per_token(double(p.rows.bytes_read) / double(kEngramPageBytes), p.tokens),
                per_token(double(p.rows.bytes_read), p.tokens), per_token(p.rows.wait_seconds * 1e3, p.tokens),
                per_token(double(p.rows.prefetched), p.tokens));
  return buf;
}

nlohmann::json engram_phase_json(const EngramPhase& p) {
  const std::uint64_t pages = p.rows.bytes_read / kEngramPageBytes;
  return {{"tokens", p.tokens},
          {"rows_asked", p.rows.rows_asked},
          {"rows_per_token", per_token(double(p.rows.rows_asked), p.tokens)},
          {"hits", p.rows.hits},
          {"misses", p.rows.misses},
          {"hit_percent", hit_percent(p.rows)},
          {"pages_read", pages},
          {"pages_per_token", per_token(double(p.rows.bytes_read) / double(kEngramPageBytes), p.tokens)},
          {"bytes_read", p.rows.bytes_read},
          {"bytes_per_token", per_token(double(p.rows.bytes_read), p.tokens)},
          {"wait_seconds", p.rows.wait_seconds},
          {"wait_ms_per_token", per_token(p.rows.wait_seconds * 1e3, p.tokens)},
          {"prefetched", p.rows.prefetched},
          {"prefetched_per_token", per_token(double(p.rows.prefetched), p.tokens)}};
}

}  // namespace waste::cli::bench
