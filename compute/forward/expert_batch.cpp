// Prefill by matrix products: see expert_batch.hpp. Per expert, two pool jobs: gate and up rows
// for every token (KernelTable::rvq_matmul), then the activation of those rows; then down rows
// on the activations. The tokens' inputs are gathered into one [n][lat] block first. Each
// token's rows are rvq_matmul's for that token alone (its bits do not depend on n), and the
// activation is elementwise, so every token gets the output it would get computed alone.
#include "compute/forward/expert_batch.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>


namespace waste::forward::expert_batch {
namespace {

constexpr std::int64_t kMinRowsPerJob = 64;

int from_env() {
  const char* env = std::getenv("WASTE_PREFILL_MATMUL");
  if (env == nullptr || *env == '\0') return kPromptTokens;
  auto parsed = parse_min_tokens(env, "WASTE_PREFILL_MATMUL");
  if (!parsed) {
    spdlog::warn("{}; prefill matrix products keep the default (prompt tokens)", parsed.error().message);
    return kPromptTokens;
  }
  return *parsed;
}

std::atomic<int>& setting() {
  static std::atomic<int> value{from_env()};
  return value;
}

float* grow(std::vector<float>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

struct Books {
  const float* p[8];
};
Books books_of(const ExpertContext& ex, const ExpertView& view, int kind) {
  Books b{};
  const int first = Codebooks::book_id(view.codebook_id, kind, 0, ex.geometry.stages);
  for (int s = 0; s < ex.geometry.stages; ++s) b.p[s] = ex.codebooks.book(first + s).data();
  return b;
}

}  // namespace

int min_tokens() { return setting().load(std::memory_order_relaxed); }
void set_min_tokens(int n) { setting().store(std::max(n, kPromptTokens), std::memory_order_relaxed); }

Result<int> parse_min_tokens(std::string_view text, std::string_view what) {
  if (text == "off") return 0;
  if (text == "on") return kPromptTokens;
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc() && end == text.data() + text.size() && n >= 1 && n <= kLutRows) return n;
  return make_error(Errc::argument, std::string(what) + ": '" + std::string(text) +
                                        "' is not off, on or a token count in 1.." +
                                        std::to_string(kLutRows));
}

void run(const Exec& exec, const ModelConfig& c, const ExpertContext& ex, const ExpertView& view, const float* xin,
         std::int64_t xin_stride, std::span<const int> users, int top_k, float* ys, PrefillMoeScratch& p,
         profile::Stopwatch& watch) {
  const ExpertGeometry& g = ex.geometry;
  const int n = int(users.size());
  const int lat = g.cols[0], inter = g.rows[0], out_rows = g.rows[2];
  // Sized by the memory plan (sizing::prefill_moe_sizes): grow() never allocates there.
  float* x = grow(p.mm_x, std::size_t(n) * lat);
  float* a = grow(p.mm_a, std::size_t(n) * inter);
  float* b = grow(p.mm_b, std::size_t(n) * inter);
  float* y = grow(p.mm_y, std::size_t(n) * out_rows);
  for (int i = 0; i < n; ++i) {
    std::memcpy(x + std::int64_t(i) * lat, xin + std::int64_t(users[std::size_t(i)] / top_k) * xin_stride,
                std::size_t(lat) * sizeof(float));
  }
  const kernels::RvqMatrix gate = rvq_matrix(g, view, MatrixKind::gate);
  const kernels::RvqMatrix up = rvq_matrix(g, view, MatrixKind::up);
  const kernels::RvqMatrix down = rvq_matrix(g, view, MatrixKind::down);
  const Books gate_books = books_of(ex, view, 0), up_books = books_of(ex, view, 1), down_books = books_of(ex, view, 2);
  const auto* kt = &exec.kernels;
  exec.pool.parallel_for(inter, kMinRowsPerJob, [&](std::int64_t r0, std::int64_t r1) {
    kt->rvq_matmul(gate, gate_books.p, g.vec_dim, x, lat, n, a, inter, int(r0), int(r1));
    kt->rvq_matmul(up, up_books.p, g.vec_dim, x, lat, n, b, inter, int(r0), int(r1));
    for (int t = 0; t < n; ++t) {
      float* at = a + std::int64_t(t) * inter + r0;
      ffn_activation(c, at, b + std::int64_t(t) * inter + r0, int(r1 - r0), at);
    }
  });
  exec.pool.parallel_for(out_rows, kMinRowsPerJob, [&](std::int64_t r0, std::int64_t r1) {
    kt->rvq_matmul(down, down_books.p, g.vec_dim, a, inter, n, y, out_rows, int(r0), int(r1));
  });
  for (int i = 0; i < n; ++i) {
    std::memcpy(ys + std::int64_t(users[std::size_t(i)]) * out_rows, y + std::int64_t(i) * out_rows,
                std::size_t(out_rows) * sizeof(float));
  }
  watch.lap(profile::Stage::expert_matmul);
}

}  // namespace waste::forward::expert_batch
