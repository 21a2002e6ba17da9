#include "compute/profile/profile.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace waste::profile {

std::string_view stage_name(Stage stage) noexcept {
  switch (stage) {
    case Stage::embed: return "embed";
    case Stage::attn_kda: return "attention_kda";
    case Stage::attn_mla: return "attention_mla";
    case Stage::router: return "router";
    case Stage::lookahead: return "lookahead";
    case Stage::lut_build: return "lut_build";
    case Stage::expert_matmul: return "expert_matmul";
    case Stage::shared_ffn: return "shared_dense_ffn";
    case Stage::io_wait: return "io_wait";
    case Stage::lm_head: return "lm_head";
    case Stage::sampling: return "sampling";
    case Stage::other: return "other";
  }
  return "unknown";
}

double EngineProfile::accounted_seconds() const {
  double sum = 0;
  for (const StageStat& s : stages) sum += s.seconds;
  return sum;
}

std::string format_profile_table(const EngineProfile& p) {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-18s %11s %7s %10s %10s\n", "stage", "seconds", "share", "calls", "ms/call");
  out += line;
  for (std::size_t i = 0; i < kStageCount; ++i) {
    const StageStat& s = p.stages[i];
    const double share = p.wall_seconds > 0 ? 100.0 * s.seconds / p.wall_seconds : 0.0;
    const double per_call = s.calls > 0 ? 1e3 * s.seconds / double(s.calls) : 0.0;
    std::snprintf(line, sizeof line, "%-18s %11.6f %6.1f%% %10llu %10.4f\n", std::string(stage_name(Stage(i))).c_str(),
                  s.seconds, share, static_cast<unsigned long long>(s.calls), per_call);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-18s %11.6f %6.1f%%   tokens %llu, forward calls %llu\n", "wall", p.wall_seconds,
                p.wall_seconds > 0 ? 100.0 : 0.0, static_cast<unsigned long long>(p.tokens),
                static_cast<unsigned long long>(p.forward_calls));
  out += line;
  return out;
}

std::string profile_to_json(const EngineProfile& p) {
  nlohmann::ordered_json j;
  j["wall_seconds"] = p.wall_seconds;
  j["tokens"] = p.tokens;
  j["forward_calls"] = p.forward_calls;
  nlohmann::ordered_json stages = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kStageCount; ++i) {
    stages[std::string(stage_name(Stage(i)))] = {{"seconds", p.stages[i].seconds}, {"calls", p.stages[i].calls}};
  }
  j["stages"] = std::move(stages);
  return j.dump();
}

}  // namespace waste::profile
