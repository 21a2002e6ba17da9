#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "test_kernels_fixtures.hpp"

using waste::ThreadPool;

namespace {
std::vector<std::pair<std::int64_t, std::int64_t>> chunks_of(ThreadPool& pool, std::int64_t n,
                                                             std::int64_t min_chunk) {
  std::mutex mutex;
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
  pool.parallel_for(n, min_chunk, [&](std::int64_t b, std::int64_t e) {
    std::lock_guard lock(mutex);
    chunks.emplace_back(b, e);
  });
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}
}  // namespace

TEST_CASE("parallel_for splits into min_chunk-multiple chunks that tile the range exactly",
          "[compute][thread_pool]") {
  ThreadPool pool(3);
  REQUIRE(pool.size() == 3);
  // ceil(1000 / 3) = 334, rounded up to a multiple of 64: 384.
  REQUIRE(pool.chunk_size(1000, 64) == 384);
  const auto chunks = chunks_of(pool, 1000, 64);
  REQUIRE(chunks == std::vector<std::pair<std::int64_t, std::int64_t>>{
                        {0, 384}, {384, 768}, {768, 1000}});
  // Small ranges are raised to min_chunk: ceil(100 / 3) = 34 -> 64.
  REQUIRE(chunks_of(pool, 100, 64) ==
          std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 64}, {64, 100}});
}

TEST_CASE("parallel_for runs serially on the caller for n <= min_chunk or one thread",
          "[compute][thread_pool]") {
  ThreadPool pool(4);
  const auto caller = std::this_thread::get_id();
  std::vector<std::thread::id> ids;
  pool.parallel_for(64, 64, [&](std::int64_t b, std::int64_t e) {
    ids.push_back(std::this_thread::get_id());
    REQUIRE(b == 0);
    REQUIRE(e == 64);
  });
  REQUIRE(ids == std::vector<std::thread::id>{caller});

  ThreadPool single(1);
  REQUIRE(chunks_of(single, 5000, 16) ==
          std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 5000}});
}

TEST_CASE("parallel_for covers every index once across many jobs, nested calls run serially",
          "[compute][thread_pool]") {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(777);
  for (int job = 0; job < 200; ++job) {
    pool.parallel_for(777, 8, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    });
  }
  for (const auto& h : hits) REQUIRE(h.load() == 200);

  std::atomic<std::int64_t> inner_total{0};
  pool.parallel_for(300, 10, [&](std::int64_t b, std::int64_t e) {
    pool.parallel_for(e - b, 1, [&](std::int64_t ib, std::int64_t ie) {
      inner_total.fetch_add(ie - ib);
    });
  });
  REQUIRE(inner_total.load() == 300);
}

TEST_CASE("kernel results are bit-identical with 1, 2 and 3 pool threads on every ISA",
          "[compute][thread_pool][kernels]") {
  const auto trunk = waste::test::make_trunk_matrix(3, 333, 300, 61);
  const auto expert = waste::test::make_expert_matrix(320, 8 * 40, 3, false, 62);
  const auto vq4p = waste::test::make_expert_matrix(320, 8 * 40, 4, true, 63);
  const std::vector<float> x = waste::test::random_floats(320, 64);

  for (const waste::kernels::KernelTable* k : waste::kernels::supported()) {
    INFO("isa " << k->isa);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> out;
      std::vector<float> y(333);
      pool.parallel_for(333, 16, [&](std::int64_t b, std::int64_t e) {
        k->matvec(trunk.view, x.data(), y.data(), b, e);
      });
      out.insert(out.end(), y.begin(), y.end());

      std::vector<float> lut(40 * 3 * 256);
      pool.parallel_for(40, 4, [&](std::int64_t b, std::int64_t e) {
        k->rvq_lut_build(x.data(), expert.book_ptrs.data(), 3, 256, 8, int(b), int(e), lut.data());
      });
      std::vector<float> ye(320);
      pool.parallel_for(320, 64, [&](std::int64_t b, std::int64_t e) {
        k->rvq_apply(expert.view, lut.data(), 256, ye.data(), int(b), int(e));
      });
      out.insert(out.end(), ye.begin(), ye.end());

      std::vector<float> lut4(40 * 4 * 64);
      k->rvq_lut_build(x.data(), vq4p.book_ptrs.data(), 4, 64, 8, 0, 40, lut4.data());
      std::vector<std::int8_t> q(lut4.size());
      std::vector<float> scales(waste::kernels::lut_quant_blocks(40));
      k->rvq_lut_quantize(lut4.data(), 40, 4, 64, q.data(), scales.data());
      std::vector<float> y4(320);
      pool.parallel_for(320, 64, [&](std::int64_t b, std::int64_t e) {
        k->rvq_apply_vq4p(vq4p.view, q.data(), scales.data(), y4.data(), int(b), int(e));
      });
      out.insert(out.end(), y4.begin(), y4.end());
      results.push_back(std::move(out));
    }
    REQUIRE(std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4) == 0);
    REQUIRE(std::memcmp(results[0].data(), results[2].data(), results[0].size() * 4) == 0);
  }
}
