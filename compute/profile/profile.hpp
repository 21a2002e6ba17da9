// Per-stage timing of the engine (seconds and call counts), filled only when
// EngineOptions::profile is on. The forward pass reads steady_clock once per stage boundary
// through a Stopwatch; with profiling off the Stopwatch holds no profile and does nothing.
// `waste bench --profile` prints format_profile_table / profile_to_json.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace waste::profile {

enum class Stage : std::uint8_t {
  embed,          // embedding row read
  attn_kda,       // KDA attention block
  attn_mla,       // MLA attention block
  router,         // router matvec + selection
  lookahead,      // next layer's router for speculative prefetch
  lut_build,      // gate/up/down LUT builds
  expert_matmul,  // RVQ LUT applies and the routed activation
  shared_ffn,     // shared experts, dense FFN, K3 latent projections
  io_wait,        // blocked on an expert record
  lm_head,        // final norm + lm_head
  sampling,       // sampler (generate only)
  other,          // the rest of a forward call: residuals, norms, AttnRes, bookkeeping
};
inline constexpr std::size_t kStageCount = std::size_t(Stage::other) + 1;

std::string_view stage_name(Stage stage) noexcept;

struct StageStat {
  double seconds = 0;
  std::uint64_t calls = 0;
};

struct EngineProfile {
  std::array<StageStat, kStageCount> stages{};
  double wall_seconds = 0;      // wall time of every profiled forward call and sampling
  std::uint64_t tokens = 0;     // tokens fed through the model
  std::uint64_t forward_calls = 0;  // decode steps + prefill chunks

  StageStat& operator[](Stage s) { return stages[std::size_t(s)]; }
  const StageStat& operator[](Stage s) const { return stages[std::size_t(s)]; }
  [[nodiscard]] double accounted_seconds() const;  // sum over stages
};

// Table: stage, seconds, share of wall, calls, ms per call; then wall and tokens.
std::string format_profile_table(const EngineProfile& profile);
// {"wall_seconds":..,"tokens":..,"forward_calls":..,"stages":{"embed":{"seconds":..,"calls":..},..}}
std::string profile_to_json(const EngineProfile& profile);

// Attributes the time since the previous lap (or start) to a stage. A null profile makes
// every call a no-op (no clock read).
class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Stopwatch(EngineProfile* profile = nullptr) : profile_(profile) {}
  [[nodiscard]] bool on() const { return profile_ != nullptr; }
  void start() {
    if (profile_) last_ = Clock::now();
  }
  void lap(Stage stage) {
    if (!profile_) return;
    const auto now = Clock::now();
    StageStat& s = (*profile_)[stage];
    s.seconds += std::chrono::duration<double>(now - last_).count();
    ++s.calls;
    last_ = now;
  }
  // Time since the last lap goes to `stage` without counting a call (a stage entered in pieces).
  void add(Stage stage) {
    if (!profile_) return;
    const auto now = Clock::now();
    (*profile_)[stage].seconds += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  EngineProfile* profile() const { return profile_; }

 private:
  EngineProfile* profile_;
  Clock::time_point last_{};
};

}  // namespace waste::profile
