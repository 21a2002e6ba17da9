// Request-to-completion latency of a cached expert through waste-ioserver's rings:
// request(layer, {id}) + acquire(layer, id), then release_layer, N times on one record that stays
// resident. Prints median and p99 in microseconds. Usage: bench_latency [iterations]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "compute/io/daemon_expert_source.hpp"
#include "ioserver/io_server.hpp"

namespace {

// Records without files: the bench measures the data path, not the disk.
class ConstantReader : public waste::RecordReader {
 public:
  waste::Status read(int, int, std::span<std::byte> buffer) const override {
    std::fill(buffer.begin(), buffer.end(), std::byte{0x5A});
    return waste::ok();
  }
  std::uint64_t record_bytes() const override { return 12288; }
  bool direct_io_engaged() const override { return false; }
  int n_layers() const override { return 4; }
  int n_experts() const override { return 8; }
  bool has_layer(int) const override { return true; }
};

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(100, std::atoi(argv[1])) : 20000;
  waste::IoServerConfig config;
  config.container = "/bench";
  config.instance = "bench-latency-" + std::to_string(::getpid());
  config.arena_slots = 8;
  auto server = waste::IoServer::create(config, std::make_unique<ConstantReader>());
  if (!server) {
    std::fprintf(stderr, "bench_latency: %s\n", server.error().message.c_str());
    return 1;
  }
  auto lease = (*server)->attach(::getpid());
  if (!lease) return 1;
  auto source = waste::DaemonExpertSource::open(*lease, waste::ExpertGeometry{});
  if (!source) {
    std::fprintf(stderr, "bench_latency: %s\n", source.error().message.c_str());
    return 1;
  }
  const int id = 3;
  std::vector<double> us;
  us.reserve(std::size_t(iterations));
  for (int i = 0; i < iterations + 1000; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!(*source)->request(1, std::span<const int>(&id, 1))) return 1;
    if (!(*source)->acquire_bytes(1, id)) return 1;
    const auto t1 = std::chrono::steady_clock::now();
    (*source)->release_layer(1);
    if (i >= 1000) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());  // 1000 warm-up rounds
  }
  std::sort(us.begin(), us.end());
  const auto st = (*source)->stats();
  std::printf("cached expert request->completion over %d iterations: median %.2f us, p99 %.2f us, max %.2f us "
              "(hits %llu, misses %llu)\n",
              iterations, us[us.size() / 2], us[us.size() * 99 / 100], us.back(),
              static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.misses));
  return 0;
}
