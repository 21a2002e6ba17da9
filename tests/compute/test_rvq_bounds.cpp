// Index bytes >= entries (a damaged or hostile record of a container with fewer than 256
// centroids per stage): the codebooks and LUTs are padded to 2^index_bits entries with zero
// centroids, so every ISA reads inside the table and such an index adds exactly zero.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/kernels/kernels.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/synth/synth.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::generic;
using waste::kernels::KernelTable;
using waste::test::ExpertMatrix;
using waste::test::make_expert_matrix;
using waste::test::random_floats;

constexpr int kEntries = 200;   // centroids stored per stage
constexpr int kTable = 256;     // what an 8-bit index addresses

// Turn a 256-entry test matrix into a 200-entry container's view: centroids >= 200 become the
// zero padding Codebooks::load adds, the index bytes (uniform over 0..255) stay as they are,
// and the expanded W is rebuilt from the padded books.
void pad_to_table(ExpertMatrix& m) {
  for (auto& book : m.books) std::fill(book.begin() + kEntries * 8, book.end(), 0.0f);
  const int n_vectors = m.view.n_vectors;
  for (int r = 0; r < m.rows; ++r) {
    std::uint16_t h;
    std::memcpy(&h, m.scale_bytes.data() + 1 + 2 * r, 2);
    const float scale = waste::fp16_to_f32(h);
    for (int v = 0; v < n_vectors; ++v) {
      const std::vector<int>& ids = m.idx[std::size_t(r) * n_vectors + v];
      for (int d = 0; d < 8; ++d) {
        double sum = 0;
        for (int s = 0; s < m.stages; ++s) sum += m.books[std::size_t(s)][std::size_t(ids[std::size_t(s)]) * 8 + d];
        m.w[std::size_t(r) * m.cols + v * 8 + d] = float(scale * sum);
      }
    }
  }
}

}  // namespace

TEST_CASE("hazard: RVQ index bytes >= entries stay inside the padded table on every ISA", "[compute][kernels]") {
  struct Shape { int rows, cols, stages; };
  for (const Shape shape : {Shape{64, 64, 3}, Shape{130, 40, 2}, Shape{33, 72, 1}}) {
    ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, shape.stages, false, 4200 + shape.rows);
    pad_to_table(m);
    int beyond = 0;
    for (const auto& ids : m.idx) {
      for (int id : ids) beyond += id >= kEntries ? 1 : 0;
    }
    REQUIRE(beyond > 0);   // the hazard is present in the data
    const int n_vectors = m.view.n_vectors;
    const std::vector<float> x = random_floats(std::size_t(shape.cols), 4201);
    // The LUT sized and built over the whole table, as forward/rvq_driver.cpp does (lut_entries).
    const std::size_t lut_size = std::size_t(n_vectors) * m.stages * kTable;
    std::vector<float> lut(lut_size);
    generic().rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, kTable, 8, 0, n_vectors, lut.data());
    for (int v = 0; v < n_vectors; ++v) {
      for (int s = 0; s < m.stages; ++s) {
        for (int e = kEntries; e < kTable; ++e) {
          REQUIRE(lut[(std::size_t(v) * m.stages + s) * kTable + e] == 0.0f);
        }
      }
    }
    std::vector<float> expected(std::size_t(shape.rows));
    generic().rvq_apply(m.view, lut.data(), kTable, expected.data(), 0, shape.rows);
    // An out-of-range index contributes a zero centroid: y matches the padded W times x.
    const auto ref = waste::test::reference_matvec(m.w, shape.rows, shape.cols, x);
    for (int r = 0; r < shape.rows; ++r) {
      REQUIRE(std::fabs(expected[std::size_t(r)] - ref.y[std::size_t(r)]) <= 1e-5 * ref.magnitude[std::size_t(r)] + 1e-6);
    }
    for (const KernelTable* k : waste::kernels::supported()) {
      INFO("isa " << k->isa << " rows " << shape.rows << " stages " << shape.stages);
      std::vector<float> built(lut_size, -1.0f);
      k->rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, kTable, 8, 0, n_vectors, built.data());
      REQUIRE(std::memcmp(built.data(), lut.data(), lut_size * sizeof(float)) == 0);
      std::vector<float> actual(std::size_t(shape.rows));
      k->rvq_apply(m.view, lut.data(), kTable, actual.data(), 0, shape.rows);
      REQUIRE(std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)) == 0);
    }
  }
}

namespace {

// A tiny container with 200-entry codebooks whose layer-1 records are rewritten by `edit`
// (then re-CRCed, so a verifying reader accepts them).
class EditedTiny {
 public:
  template <class Edit>
  EditedTiny(const char* tag, Edit edit) {
    std::string templ = (std::filesystem::temp_directory_path() / (std::string("waste-") + tag + "-XXXXXX")).string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    dir_ = templ;
    waste::synth::SynthRequest req;
    req.preset = "tiny";
    auto spec = waste::synth::make_spec(req);
    REQUIRE(spec);
    spec->skeleton.quant.entries = kEntries;
    REQUIRE(waste::synth::write_container(*spec, dir_).has_value());
    auto g = waste::ExpertGeometry::from(spec->skeleton.config, spec->skeleton.quant);
    REQUIRE(g);
    const auto bank = dir_ / "experts-L1.bin";
    std::string bytes;
    {
      std::ifstream in(bank, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    REQUIRE(bytes.size() == 8 * g->record_bytes);
    for (int e = 0; e < 8; ++e) {
      auto record = std::span<std::byte>(reinterpret_cast<std::byte*>(bytes.data()) + e * g->record_bytes,
                                         g->record_bytes);
      edit(*g, record);
      const std::uint32_t crc = waste::compute_record_crc(record, *g);
      std::memcpy(record.data() + offsetof(waste::ExpertRecordHeader, crc32), &crc, 4);
    }
    std::ofstream out(bank, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  ~EditedTiny() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EditedTiny(const EditedTiny&) = delete;
  EditedTiny& operator=(const EditedTiny&) = delete;

  std::vector<float> logits(const std::vector<int>& prompt) const {
    waste::EngineOptions options;
    options.model = dir_;
    options.threads = 2;
    options.ctx_tokens = 32;
    options.verify_records = true;
    auto engine = waste::Engine::open(options);
    INFO((engine ? std::string() : engine.error().message));
    REQUIRE(engine);
    auto out = (*engine)->eval(prompt);
    INFO((out ? std::string() : out.error().message));
    REQUIRE(out);
    return std::vector<float>(out->begin(), out->end());
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace

TEST_CASE("hazard: a record whose every index byte is >= entries decodes as a zero expert, end to end",
          "[compute][kernels][engine]") {
  // Every index of layer 1's experts is 0xFF (>= 200): each one addresses a zero centroid, so
  // every routed expert of layer 1 outputs exactly 0 ...
  const EditedTiny beyond("rvq-beyond", [](const waste::ExpertGeometry& g, std::span<std::byte> record) {
    const std::uint64_t begin = g.offset_of(waste::MatrixKind::gate);
    const std::uint64_t end = g.scales_offset(waste::MatrixKind::gate);
    std::memset(record.data() + begin, 0xFF, end - begin);
  });
  // ... which is what zero row scales give with the generator's in-range indices.
  const EditedTiny zero_scales("rvq-zero", [](const waste::ExpertGeometry& g, std::span<std::byte> record) {
    const std::uint64_t begin = g.scales_offset(waste::MatrixKind::gate);
    std::memset(record.data() + begin, 0, g.payload_end - begin);
  });
  const std::vector<int> prompt = {1, 17, 42, 99, 3};
  const std::vector<float> a = beyond.logits(prompt);
  const std::vector<float> b = zero_scales.logits(prompt);
  REQUIRE(a.size() == b.size());
  for (float v : a) REQUIRE(std::isfinite(v));
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
