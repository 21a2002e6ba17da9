// DeepSeek-V4.1's Engram rows at run time (compute/engram/engram_rows.*, engram_synth.*): the
// synthetic files through EngramRowSource bit for bit against the table's own quantize/decode
// and against the raw bytes through engram_row's q8 / q4, rows at and across 4 KiB page edges,
// damaged files refused with exact messages, the cache's counters, and EngramStage's rows for a
// run equal to one token at a time and to sequence_row_ids' rows read one by one.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "compute/convert/engram_table.hpp"
#include "compute/engram/engram_json.hpp"
#include "compute/engram/engram_row.hpp"
#include "compute/engram/engram_rows.hpp"
#include "compute/engram/engram_synth.hpp"
#include "shared/container/engram_table.hpp"
#include "shared/crc32.hpp"
#include "tests/shared/temp_dir.hpp"

using namespace waste;
using namespace waste::engram;

namespace {

// Two Engram layers (1 and 3), n-grams 2..3, 2 heads: 4 columns a token. Primes from 50 up.
ModelConfig engram_config(int head_dim) {
  ModelConfig c;
  c.vocab = 100;
  c.engram_layer_ids = {1, 3};
  c.engram_vocab_size = 50;
  c.engram_max_ngram_size = 3;
  c.engram_n_heads = 2;
  c.engram_head_dim = head_dim;
  c.engram_pad_id = 7;
  c.engram_compressed_vocab_size = 40;
  return c;
}

SynthEngramResult synth(const std::filesystem::path& dir, int head_dim, int bits, std::uint64_t max_rows = 0) {
  SynthEngramRequest r;
  r.seed = 99;
  r.bits = bits;
  r.max_rows = max_rows;
  auto out = write_synthetic_engram(engram_config(head_dim), dir, r);
  INFO((out ? std::string() : out.error().message));
  REQUIRE(out.has_value());
  return std::move(*out);
}

// The row as the table stores it: the synthetic values through the table's quantizer.
std::vector<std::byte> stored_row(int bits, int layer, std::uint64_t row, int width) {
  std::vector<float> v(static_cast<std::size_t>(width));
  for (int c = 0; c < width; ++c) v[std::size_t(c)] = synthetic_engram_value(99, layer, row, c);
  EngramTableHeader h;
  h.bits = bits;
  h.width = width;
  std::vector<std::byte> q(h.row_bytes());
  REQUIRE(quantize_engram_row(bits, v, q));
  return q;
}

// The row's bytes read straight from the file at row_offset.
std::vector<std::uint8_t> raw_row(const std::filesystem::path& file, const EngramTableHeader& h, std::uint64_t row) {
  std::vector<std::uint8_t> b(std::size_t{h.row_bytes()});
  std::ifstream f(file, std::ios::binary);
  f.seekg(std::streamoff(h.row_offset(row)));
  f.read(reinterpret_cast<char*>(b.data()), std::streamsize(b.size()));
  REQUIRE(f.good());
  return b;
}

void patch(const std::filesystem::path& file, std::uint64_t offset, std::uint8_t x) {
  std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c = char(std::uint8_t(c) ^ x);
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

EngramRowSourceOptions no_thread(std::size_t cache_bytes) {
  EngramRowSourceOptions o;
  o.cache_bytes = cache_bytes;
  o.reader_threads = 0;
  return o;
}

}  // namespace

TEST_CASE("engram rows: synthetic tables written, read and decoded bit for bit at 8 and 4 bits", "[compute][engram]") {
  for (const int bits : {8, 4}) {
    INFO("bits " << bits);
    test::TempDir dir("engram-rows");
    const auto written = synth(dir.path(), 64, bits);
    auto tables = load_engram_tables(dir.path());
    REQUIRE(tables.has_value());
    CHECK(tables->layout.layers.size() == 2);
    CHECK(tables->layout.columns() == 4);
    // Primes from 50 up, consecutive across layers: 53 59 61 67 | 71 73 79 83.
    CHECK(tables->layout.layers[0].primes == std::vector<std::uint64_t>{53, 59, 61, 67});
    CHECK(tables->layout.layers[1].primes == std::vector<std::uint64_t>{71, 73, 79, 83});
    CHECK(tables->layout.pad_id == 7);
    REQUIRE(tables->token_map.size() == 100);
    CHECK(tables->token_map[39] == 39);
    CHECK(tables->token_map[40] == 0);
    CHECK(tables->token_map[99] == 19);
    CHECK(written.tables.layout.layers[1].rows() == 306);

    auto source = EngramRowSource::open(dir.path(), tables->layout, no_thread(0));
    INFO((source ? std::string() : source.error().message));
    REQUIRE(source.has_value());
    REQUIRE(source->layers() == 2);
    // O_DIRECT asked for: either every table reads direct, or the note says which does not.
    CHECK(source->direct() == source->note().empty());
    for (std::size_t l = 0; l < 2; ++l) {
      const int layer = tables->layout.layers[l].layer;
      const EngramTableHeader& h = source->header(l);
      CHECK(h.bits == bits);
      CHECK(h.rows == tables->layout.layers[l].rows());
      REQUIRE(source->check_data_crc(l));
      std::vector<std::uint64_t> ids(h.rows);
      for (std::uint64_t r = 0; r < h.rows; ++r) ids[r] = r;
      std::vector<float> got(ids.size() * 64);
      REQUIRE(source->read_rows(l, ids, got));
      int bad = 0;
      double worst = 0.0;  // |decoded - value| / scale step, the quantizer's own error
      for (std::uint64_t r = 0; r < h.rows; ++r) {
        const std::span<const float> row(got.data() + r * 64, 64);
        // 1. the table's decoder on the quantizer's bytes
        const auto q = stored_row(bits, layer, r, 64);
        std::vector<float> want(64);
        dequantize_engram_row(bits, q, want);
        // 2. the raw file bytes, byte for byte the quantizer's, through engram_row's q8 / q4
        const auto raw = raw_row(dir.path() / engram_table_file_name(layer), h, r);
        std::vector<float> via_row(64);
        REQUIRE(engram_dequantize_row(bits == 8 ? EngramRowFormat::q8 : EngramRowFormat::q4, raw, via_row));
        if (!same_bits(row, want) || !same_bits(row, via_row) || std::memcmp(raw.data(), q.data(), q.size()) != 0) ++bad;
        for (int c = 0; c < 64; ++c) {
          std::uint16_t s16;
          std::memcpy(&s16, q.data() + (c / 32) * 2, 2);
          const float value = synthetic_engram_value(99, layer, r, c);
          float amax = 0.0f;
          for (int k = c / 32 * 32; k < c / 32 * 32 + 32; ++k)
            amax = std::max(amax, std::fabs(synthetic_engram_value(99, layer, r, k)));
          const double step = double(amax) / (bits == 8 ? 127.0 : 7.0);
          worst = std::max(worst, std::fabs(double(row[std::size_t(c)]) - double(value)) / step);
        }
      }
      CHECK(bad == 0);
      INFO("worst error " << worst << " of a scale step");
      CHECK(worst < 0.51);  // half a step, plus fp16's rounding of the scale
    }
  }
}

TEST_CASE("engram rows: rows at the edges of 4 KiB pages, and rows wider than a page", "[compute][engram]") {
  SECTION("width 64, 8 bits: 68-byte rows, 60 a page, 16 bytes of padding") {
    test::TempDir dir("engram-rows-page");
    synth(dir.path(), 64, 8);
    auto tables = load_engram_tables(dir.path());
    REQUIRE(tables.has_value());
    auto source = EngramRowSource::open(dir.path(), tables->layout, no_thread(0));
    REQUIRE(source.has_value());
    const EngramTableHeader& h = source->header(1);
    REQUIRE(h.row_bytes() == 68);
    REQUIRE(h.rows_per_page() == 60);
    CHECK(h.row_offset(59) == 4096 + 59 * 68);
    CHECK(h.row_offset(60) == 8192);
    CHECK(h.row_offset(121) == 4096 + 2 * 4096 + 68);
    const std::vector<std::uint64_t> ids = {59, 60, 119, 120, 305, 0};
    std::vector<float> got(ids.size() * 64);
    REQUIRE(source->read_rows(1, ids, got));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::vector<float> want(64);
      dequantize_engram_row(8, stored_row(8, 3, ids[i], 64), want);
      INFO("row " << ids[i]);
      CHECK(same_bits(std::span(got).subspan(i * 64, 64), want));
    }
    CHECK(source->stats().bytes_read == 4 * 4096);  // read in row order: pages 0 (0, 59) | 1 (60, 119) | 2 | 5
  }
  SECTION("width 4096, 4 bits: 2304-byte rows, one a page; 8 bits: 4352-byte rows over two pages") {
    for (const int bits : {4, 8}) {
      test::TempDir dir("engram-rows-wide");
      synth(dir.path(), 4096, bits);
      auto tables = load_engram_tables(dir.path());
      REQUIRE(tables.has_value());
      auto source = EngramRowSource::open(dir.path(), tables->layout, no_thread(0));
      REQUIRE(source.has_value());
      const EngramTableHeader& h = source->header(0);
      CHECK(h.rows_per_page() == 1);
      CHECK(h.page_bytes() == (bits == 8 ? 8192u : 4096u));
      const std::vector<std::uint64_t> ids = {0, 1, 239};
      std::vector<float> got(ids.size() * 4096);
      REQUIRE(source->read_rows(0, ids, got));
      for (std::size_t i = 0; i < ids.size(); ++i) {
        std::vector<float> want(4096);
        dequantize_engram_row(bits, stored_row(bits, 1, ids[i], 4096), want);
        CHECK(same_bits(std::span(got).subspan(i * 4096, 4096), want));
      }
      CHECK(source->stats().bytes_read == 3 * h.page_bytes());
    }
  }
}

TEST_CASE("hazard: damaged engram tables refused with messages naming the file and the row", "[compute][engram]") {
  test::TempDir dir("engram-rows-bad");
  synth(dir.path(), 64, 8);
  auto tables = load_engram_tables(dir.path());
  REQUIRE(tables.has_value());
  const auto l1 = dir.path() / "engram-L1.bin", l3 = dir.path() / "engram-L3.bin";
  const std::uint64_t size3 = std::filesystem::file_size(l3);
  auto error_of = [&] {
    auto s = EngramRowSource::open(dir.path(), tables->layout, no_thread(0));
    REQUIRE_FALSE(s.has_value());
    return s.error().message;
  };

  {
    auto s = EngramRowSource::open(dir.path(), tables->layout, no_thread(0));
    REQUIRE(s.has_value());
    std::vector<float> out(64);
    const std::vector<std::uint64_t> beyond = {306};
    CHECK(s->read_rows(1, beyond, out).error().message == "engram-L3.bin: row 306 beyond its 306 rows");
    CHECK(s->read_rows(1, std::vector<std::uint64_t>{1, 2}, out).error().message ==
          "engram rows: 64 floats for 2 rows of 64");
    CHECK(s->read_rows(2, std::vector<std::uint64_t>{1}, out).error().message == "engram rows: layer index 2 of 2 tables");
  }

  // A data byte flipped: opens (the header is whole), the CRC check names it.
  patch(l3, 4096 + 100, 0x01);
  {
    auto s = EngramRowSource::open(dir.path(), tables->layout, no_thread(0));
    REQUIRE(s.has_value());
    std::vector<std::byte> data(size3 - 4096);
    std::ifstream f(l3, std::ios::binary);
    f.seekg(4096);
    f.read(reinterpret_cast<char*>(data.data()), std::streamsize(data.size()));
    char want[128];
    std::snprintf(want, sizeof want, "engram-L3.bin: data CRC 0x%08x, its header says 0x%08x (damaged rows)",
                  crc32(data), s->header(1).data_crc);
    CHECK(s->check_data_crc(1).error().message == want);
    CHECK(s->check_data_crc(0));
  }
  patch(l3, 4096 + 100, 0x01);

  // Cut short by a page, then one byte too many.
  std::filesystem::resize_file(l3, size3 - 4096);
  CHECK(error_of() == "engram-L3.bin: " + std::to_string(size3 - 4096) + " bytes, its header needs " +
                          std::to_string(size3) + " (truncated)");
  std::filesystem::resize_file(l3, size3 + 1);
  CHECK(error_of() == "engram-L3.bin: " + std::to_string(size3 + 1) + " bytes, its header needs " +
                          std::to_string(size3) + " (trailing bytes)");
  std::filesystem::resize_file(l3, size3);
  REQUIRE(EngramRowSource::open(dir.path(), tables->layout, no_thread(0)).has_value());

  // The header: a flipped row count (its CRC catches it), the magic, a file too short for it.
  patch(l1, 16, 0x04);
  CHECK(error_of() == "engram-L1.bin: header CRC mismatch (damaged header)");
  patch(l1, 16, 0x04);
  patch(l1, 0, 0x20);
  CHECK(error_of() == "engram-L1.bin: not an engram table (bad magic)");
  patch(l1, 0, 0x20);
  const std::uint64_t size1 = std::filesystem::file_size(l1);
  std::filesystem::resize_file(l1, 40);
  CHECK(error_of() == "engram-L1.bin: 40 bytes, too short for an engram table header");
  std::filesystem::remove(l1);
  CHECK(error_of() == l1.string() + ": No such file or directory");
  (void)size1;

  // A whole table that is not the layout's: another row count, another layer, another width.
  auto rewrite = [&](int layer, std::uint64_t rows, int width) {
    EngramTableHeader h;
    h.bits = 8;
    h.rows = rows;
    h.width = width;
    h.layer = layer;
    auto w = convert::EngramTableWriter::open(l1, h, 0, 0);
    REQUIRE(w.has_value());
    std::vector<float> row(std::size_t(width), 0.25f);
    for (std::uint64_t r = 0; r < rows; ++r) REQUIRE(w->append(row));
    REQUIRE(w->finish());
  };
  rewrite(1, 10, 64);
  CHECK(error_of() == "engram-L1.bin: 10 rows, engram.json's primes of layer 1 sum to 240");
  rewrite(2, 240, 64);
  CHECK(error_of() == "engram-L1.bin: its header says layer 2");
  rewrite(1, 240, 32);
  CHECK(error_of() == "engram-L1.bin: rows of 32 columns, engram.json's head_dim is 64");
}

TEST_CASE("engram rows: the LRU cache counts hits, misses and bytes, and prefetch fills it", "[compute][engram]") {
  test::TempDir dir("engram-rows-cache");
  synth(dir.path(), 64, 8);
  auto tables = load_engram_tables(dir.path());
  REQUIRE(tables.has_value());
  // Room for two rows of 64 floats.
  auto source = EngramRowSource::open(dir.path(), tables->layout, no_thread(2 * 64 * 4));
  REQUIRE(source.has_value());
  std::vector<float> one(64), two(128), again(64);
  auto read = [&](std::vector<std::uint64_t> ids, std::vector<float>& out) { REQUIRE(source->read_rows(0, ids, out)); };
  read({5}, one);
  CHECK(source->stats().misses == 1);
  CHECK(source->stats().hits == 0);
  read({5}, again);
  CHECK(same_bits(one, again));
  CHECK(source->stats().hits == 1);
  read({6, 7}, two);  // one page read for both; the cache now holds 6 and 7
  CHECK(source->stats().misses == 3);
  CHECK(source->stats().bytes_read == 2 * 4096);
  read({5}, again);  // evicted: read again
  CHECK(same_bits(one, again));
  CHECK(source->stats().misses == 4);
  read({7}, again);  // still cached (6 went out for 5)
  CHECK(source->stats().hits == 2);
  read({6}, again);
  CHECK(source->stats().misses == 5);
  CHECK(source->stats().bytes_read == 4 * 4096);
  CHECK(source->stats().prefetched == 0);

  // The worker: prefetched rows come back as hits.
  EngramRowSourceOptions threaded;
  threaded.cache_bytes = 1 << 20;
  auto ahead = EngramRowSource::open(dir.path(), tables->layout, threaded);
  REQUIRE(ahead.has_value());
  const std::vector<std::uint64_t> ids = {3, 200, 100, 239, 1000};  // 1000 is beyond the table: skipped
  ahead->prefetch(0, ids);
  ahead->prefetch(0, ids);  // queued already: nothing more
  ahead->wait_prefetch();
  CHECK(ahead->stats().prefetched == 4);
  CHECK(ahead->stats().bytes_read == 3 * 4096);  // in row order: pages 0 | 1 | 3 (200 and 239)
  std::vector<float> got(4 * 64);
  REQUIRE(ahead->read_rows(0, std::span(ids).first(4), got));
  CHECK(ahead->stats().hits == 4);
  CHECK(ahead->stats().misses == 0);
  std::vector<float> cold(4 * 64);
  auto plain = EngramRowSource::open(dir.path(), tables->layout, no_thread(0));
  REQUIRE(plain.has_value());
  REQUIRE(plain->read_rows(0, std::span(ids).first(4), cold));
  CHECK(same_bits(got, cold));
  plain->prefetch(0, ids);  // fadvise only: no reads counted
  CHECK(plain->stats().prefetched == 0);

  // Misses handed to the reader threads: 24 rows over several pages, read by the readers and
  // copied from the cache; and with a cache of two rows, the rows evicted before they were copied
  // read again by the caller: the same values either way.
  std::vector<std::uint64_t> many;
  for (std::uint64_t r = 0; r < 24; ++r) many.push_back((r * 37) % 240);
  std::vector<float> want(24 * 64), got_many(24 * 64), tight_rows(24 * 64);
  REQUIRE(plain->read_rows(0, many, want));
  auto readers = EngramRowSource::open(dir.path(), tables->layout, threaded);
  REQUIRE(readers.has_value());
  REQUIRE(readers->read_rows(0, many, got_many));
  CHECK(same_bits(want, got_many));
  CHECK(readers->stats().misses == 24);
  CHECK(readers->stats().prefetched == 24);
  REQUIRE(readers->read_rows(0, many, got_many));
  CHECK(readers->stats().hits == 24);
  CHECK(same_bits(want, got_many));
  EngramRowSourceOptions tight = threaded;
  tight.cache_bytes = 2 * 64 * 4;
  auto small = EngramRowSource::open(dir.path(), tables->layout, tight);
  REQUIRE(small.has_value());
  REQUIRE(small->read_rows(0, many, tight_rows));
  CHECK(same_bits(want, tight_rows));

  // Buffered reads (O_DIRECT off) give the same rows, and say so.
  EngramRowSourceOptions buffered = no_thread(0);
  buffered.direct = false;
  auto b = EngramRowSource::open(dir.path(), tables->layout, buffered);
  REQUIRE(b.has_value());
  CHECK_FALSE(b->direct());
  CHECK(b->note() == "O_DIRECT off: the tables are read buffered");
  std::vector<float> via_cache(4 * 64);
  REQUIRE(b->read_rows(0, std::span(ids).first(4), via_cache));
  CHECK(same_bits(got, via_cache));
}

TEST_CASE("engram stage: a run's rows equal one token at a time and the rows of sequence_row_ids",
          "[compute][engram]") {
  test::TempDir dir("engram-stage");
  synth(dir.path(), 64, 4);
  auto tables = load_engram_tables(dir.path());
  REQUIRE(tables.has_value());
  auto source = EngramRowSource::open(dir.path(), tables->layout, {});
  REQUIRE(source.has_value());
  const std::vector<std::int32_t> tokens = {12, 55, 3, 99, 7, 7, 41, 80, 0, 23, 64};
  const std::vector<std::uint8_t> dead = {0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0};
  const std::size_t T = tokens.size(), per = 4 * 64;

  EngramStage stage(*tables, *source);
  CHECK(stage.layer_index(1) == 0);
  CHECK(stage.layer_index(3) == 1);
  CHECK(stage.layer_index(2) == -1);
  CHECK(stage.row_floats() == per);
  NgramHistory history(3);
  REQUIRE(stage.begin(tokens, dead, history));
  CHECK(stage.tokens() == T);
  std::vector<float> run1(T * per), run3(T * per);
  REQUIRE(stage.rows(1, run1));
  REQUIRE(stage.rows(3, run3));

  // One token at a time, the history carried, on a source without a cache.
  auto plain = EngramRowSource::open(dir.path(), tables->layout, no_thread(0));
  REQUIRE(plain.has_value());
  EngramStage step(*tables, *plain);
  NgramHistory h1(3);
  std::vector<float> one(per);
  for (std::size_t t = 0; t < T; ++t) {
    REQUIRE(step.begin(std::span(tokens).subspan(t, 1), std::span(dead).subspan(t, 1), h1));
    REQUIRE(step.rows(3, one));
    CHECK(same_bits(one, std::span(run3).subspan(t * per, per)));
    REQUIRE(step.rows(1, one));
    CHECK(same_bits(one, std::span(run1).subspan(t * per, per)));
  }
  CHECK(std::vector<std::int32_t>(h1.recent().begin(), h1.recent().end()) ==
        std::vector<std::int32_t>(history.recent().begin(), history.recent().end()));

  // sequence_row_ids' ids, each row read by the converter's reader (pread + the table's decoder).
  NgramHistory h2(3);
  auto ids = sequence_row_ids(*tables, tokens, dead, h2);
  REQUIRE(ids.has_value());
  CHECK(std::vector<std::uint64_t>(stage.row_ids().begin(), stage.row_ids().end()) == *ids);
  auto r1 = convert::EngramTableReader::open(dir.path() / "engram-L1.bin");
  auto r3 = convert::EngramTableReader::open(dir.path() / "engram-L3.bin");
  REQUIRE(r1.has_value());
  REQUIRE(r3.has_value());
  int bad = 0;
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t l = 0; l < 2; ++l) {
      for (std::size_t c = 0; c < 4; ++c) {
        std::vector<float> want(64);
        REQUIRE((l == 0 ? *r1 : *r3).read_row((*ids)[(t * 2 + l) * 4 + c], want));
        const auto& run = l == 0 ? run1 : run3;
        if (!same_bits(want, std::span(run).subspan(t * per + c * 64, 64))) ++bad;
      }
    }
  }
  CHECK(bad == 0);
  // The image tokens' rows are the pad's, and the run did read through the cache.
  CHECK(source->stats().hits + source->stats().misses == 2 * T * 4);

  // Errors: the history stays where it was; a layer without a table; a wrong-sized output.
  const std::vector<std::int32_t> outside = {5, 100};
  const auto before = std::vector<std::int32_t>(history.recent().begin(), history.recent().end());
  CHECK(stage.begin(outside, {}, history).error().message ==
        "engram: token 1 has id 100, outside the compressed token map's 100 ids");
  CHECK(std::vector<std::int32_t>(history.recent().begin(), history.recent().end()) == before);
  CHECK(stage.rows(2, run1).error().message == "engram stage: layer 2 has no Engram table");
  CHECK(stage.rows(1, one).error().message == "engram stage: 256 floats for 11 tokens of 256");
}

TEST_CASE("synthetic engram: a row cap draws smaller primes, and too small a cap is refused", "[compute][engram]") {
  test::TempDir dir("engram-synth-cap");
  auto c = engram_config(64);
  c.engram_vocab_size = 1000000;  // about 4 million rows a table uncut
  SynthEngramRequest r;
  r.max_rows = 200;
  auto out = write_synthetic_engram(c, dir.path(), r);
  INFO((out ? std::string() : out.error().message));
  REQUIRE(out.has_value());
  CHECK(out->engram_vocab_size < 1000000);
  auto tables = load_engram_tables(dir.path());
  REQUIRE(tables.has_value());
  for (const auto& layer : tables->layout.layers) {
    CHECK(layer.rows() <= 200);
    CHECK(layer.rows() > 100);  // the cap is used, not wasted
    auto rd = convert::EngramTableReader::open(dir.path() / engram_table_file_name(layer.layer));
    REQUIRE(rd.has_value());
    CHECK(rd->header().rows == layer.rows());
  }
  // The uncut layout checks engram_num_embeddings.
  c.engram_vocab_size = 50;
  c.engram_num_embeddings = {240, 300};
  auto wrong = write_synthetic_engram(c, dir.path(), {});
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message ==
        "synthetic engram: engram layout: engram layer 3: the bucket primes sum to 306 rows and "
        "engram_num_embeddings states 300");
  r.max_rows = 5;  // start 1: primes 2 3 5 7 | 11 13 17 19
  auto small = write_synthetic_engram(c, dir.path(), r);
  REQUIRE_FALSE(small);
  CHECK(small.error().message ==
        "synthetic engram: 5 rows per table is below the smallest tables this layout allows (60 rows)");
}
