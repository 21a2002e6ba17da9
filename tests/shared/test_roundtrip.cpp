// Synthesise containers, read them back through the container library, and compare every
// value with the generator's own (bit for bit): trunk ints, scales and dequantised floats,
// codebooks, expert indices and row scales.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_bank.hpp"
#include "shared/container/trunk.hpp"
#include "shared/fp16.hpp"
#include "shared/container/v41_tensors.hpp"
#include "shared/synth/synth.hpp"
#include "temp_dir.hpp"

using namespace waste;

namespace {

synth::SynthSpec spec_for(const std::string& preset, std::optional<std::string> experts = {},
                          std::optional<std::string> trunk = {}, std::uint64_t seed = 7) {
  synth::SynthRequest req;
  req.preset = preset;
  req.seed = seed;
  req.experts = experts;
  req.trunk = trunk;
  auto spec = synth::make_spec(req);
  REQUIRE(spec.has_value());
  return *spec;
}

// Stored integer of (row, col) straight from the packed bytes, written out from the format
// description (reference §1.5) independently of the library's decoder.
int stored_q(const TrunkTensorInfo& t, const std::byte* payload, std::int64_t r, std::int64_t c) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(payload) + r * t.row_stride_bytes();
  switch (t.fmt) {
    case TensorFormat::q8g: return static_cast<std::int8_t>(p[c]);
    case TensorFormat::q4g: return int(c % 2 == 0 ? p[c / 2] & 0x0f : p[c / 2] >> 4) - 8;
    case TensorFormat::q3g: {
      int u = 0;
      for (int b = 0; b < 3; ++b) {
        const std::int64_t bit = 3 * c + b;
        u |= ((p[bit / 8] >> (bit % 8)) & 1) << b;
      }
      return u - 4;
    }
    default: return 0;
  }
}

std::uint16_t stored_scale(const TrunkTensor& t, std::int64_t r, std::int64_t g) {
  std::uint16_t s;
  std::memcpy(&s, reinterpret_cast<const std::byte*>(t.scales) + 2 * (r * t.info->n_groups() + g), 2);
  return s;
}

void check_trunk(const synth::SynthSpec& spec, const std::filesystem::path& dir, const Manifest& manifest) {
  auto trunk = Trunk::load(dir, manifest);
  REQUIRE(trunk.has_value());
  const auto plans = synth::plan_trunk(spec);
  REQUIRE(plans.size() == manifest.trunk.size());
  std::vector<std::int8_t> q;
  std::vector<std::uint16_t> scales;
  std::vector<float> f, row;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const auto& plan = plans[i];
    INFO("tensor " << plan.name);
    REQUIRE(manifest.trunk[i].name == plan.name);  // sorted order, as the converter writes
    REQUIRE(manifest.trunk[i].fmt == plan.fmt);
    std::string_view short_name = plan.name;
    if (short_name.starts_with(manifest.tensor_prefix)) short_name.remove_prefix(manifest.tensor_prefix.size());
    const TrunkTensor* t = short_name == plan.name && !manifest.tensor_prefix.empty() ? trunk->find(plan.name)
                                                                                       : trunk->find(short_name);
    REQUIRE(t != nullptr);
    const bool embed = plan.name.find("embed_tokens") != std::string::npos;
    const bool outside = !manifest.tensor_prefix.empty() && !plan.name.starts_with(manifest.tensor_prefix);
    REQUIRE(t->resident() == !(outside || (embed && plan.fmt != TensorFormat::f32)));
    row.resize(std::size_t(plan.cols()));
    for (std::int64_t r = 0; r < plan.rows(); ++r) {
      REQUIRE(trunk->read_row(*t, r, row).has_value());
      if (plan.fmt == TensorFormat::f32) {
        f.resize(std::size_t(plan.cols()));
        synth::generate_row_f32(spec, plan, r, f);
        REQUIRE(std::memcmp(f.data(), row.data(), f.size() * 4) == 0);
        continue;
      }
      q.resize(std::size_t(plan.cols()));
      scales.resize(std::size_t(plan.n_groups()));
      synth::generate_row_q(spec, plan, r, q, scales);
      for (std::int64_t c = 0; c < plan.cols(); ++c) {
        const float want = float(q[c]) * fp16_to_f32(scales[c / 128]);
        if (std::memcmp(&want, &row[c], 4) != 0) FAIL("row " << r << " col " << c << ": " << row[c] << " != " << want);
        if (t->resident()) {
          if (stored_q(*t->info, t->payload, r, c) != q[c]) FAIL("stored int at " << r << "," << c);
          if (c % 128 == 0 && stored_scale(*t, r, c / 128) != scales[c / 128]) FAIL("stored scale at " << r);
          const float element = dequantize_element(*t->info, t->payload, t->scales, r, c);
          if (std::memcmp(&element, &want, 4) != 0) FAIL("dequantize_element at " << r << "," << c);
        }
      }
    }
  }
}

void check_experts(const synth::SynthSpec& spec, const std::filesystem::path& dir, const ContainerInfo& info) {
  const Manifest& m = info.manifest;
  auto books = Codebooks::load(info.files.codebooks(), m.quant);
  REQUIRE(books.has_value());
  REQUIRE(books->n_books() == 3 * m.quant.stages * m.config.n_moe_layers());
  std::vector<std::uint16_t> book(std::size_t(m.quant.entries) * m.quant.vec_dim);
  for (int b = 0; b < books->n_books(); ++b) {
    synth::generate_codebook(spec, b, book);
    auto got = books->book(b);
    for (std::size_t i = 0; i < book.size(); ++i) {
      const float want = fp16_to_f32_flush(book[i]);
      if (std::memcmp(&want, &got[i], 4) != 0) FAIL("book " << b << " value " << i);
    }
  }
  for (bool direct : {true, false}) {
    auto banks = ExpertBanks::open(dir, m, books->n_books(), BankReadOptions{direct, true});
    REQUIRE(banks.has_value());
    const ExpertGeometry& g = banks->geometry();
    AlignedBuffer buffer(banks->record_bytes());
    const int stages = m.quant.stages;
    for (const auto& [layer, bank] : m.banks) {
      REQUIRE(bank.codebook_base == synth::codebook_base(spec, layer));
      for (int e = 0; e < bank.experts; ++e) {
        INFO("expert " << e << " of layer " << layer);
        REQUIRE(banks->read_record(layer, e, buffer.span()).has_value());
        const ExpertView view = make_expert_view(buffer.span().first(banks->record_bytes()), g);
        REQUIRE(view.codebook_id == bank.codebook_base);
        for (int kind = 0; kind < 3; ++kind) {
          const int nvr = g.cols[kind] / g.vec_dim;
          for (int r = 0; r < g.rows[kind]; ++r) {
            std::uint16_t scale;
            std::memcpy(&scale, reinterpret_cast<const std::byte*>(view.scales[kind]) + 2 * r, 2);
            if (scale != synth::expert_row_scale(spec, layer, e, kind, r)) FAIL("scale kind " << kind << " row " << r);
            for (int v = 0; v < nvr; ++v) {
              const auto want = synth::expert_indices(spec, layer, e, kind, r, v);
              // Offsets as reference §1.7 states them: [row_block][v][row_in_block][stage].
              std::uint8_t got[8] = {};
              if (m.quant.index_bits == 6) {
                const std::uint8_t* run = view.index[kind] + ((r / 64) * nvr + v) * 64 * 3 + (r % 64) * 3;
                const std::uint32_t bits = run[0] | (run[1] << 8) | (run[2] << 16);
                for (int s = 0; s < 4; ++s) got[s] = (bits >> (6 * s)) & 63;
              } else {
                for (int s = 0; s < stages; ++s) {
                  got[s] = view.index[kind][((r / 64) * nvr + v) * 64 * stages + (r % 64) * stages + s];
                }
              }
              for (int s = 0; s < stages; ++s) {
                if (got[s] != want[s]) FAIL("index kind " << kind << " row " << r << " vec " << v << " stage " << s);
                if (got[s] >= m.quant.entries) FAIL("index beyond the codebook");
              }
              // Dequantised weights: the generator's values through the reader's codebooks.
              if (v == 0 && r % 17 == 0) {
                for (int j = 0; j < g.vec_dim; ++j) {
                  float w = 0;
                  float w_want = 0;
                  for (int s = 0; s < stages; ++s) {
                    const int b = Codebooks::book_id(view.codebook_id, kind, s, stages);
                    w += books->book(b)[got[s] * g.vec_dim + j];
                    synth::generate_codebook(spec, b, book);
                    w_want += fp16_to_f32_flush(book[want[s] * g.vec_dim + j]);
                  }
                  REQUIRE(w * fp16_to_f32(scale) == w_want * fp16_to_f32(synth::expert_row_scale(spec, layer, e, kind, r)));
                }
              }
            }
          }
        }
      }
    }
  }
}

void round_trip(const synth::SynthSpec& spec, const std::string& tag) {
  test::TempDir tmp(tag);
  auto stats = synth::write_container(spec, tmp.path());
  REQUIRE(stats.has_value());
  auto info = ContainerInfo::open(tmp.path());
  if (!info) FAIL(info.error().message);
  check_trunk(spec, tmp.path(), info->manifest);
  if (info->manifest.config.n_experts > 0) check_experts(spec, tmp.path(), *info);
}

}  // namespace

TEST_CASE("tiny container round-trips bit for bit (VQ3R experts, Q4G trunk)", "[shared][container]") {
  const auto spec = spec_for("tiny");
  REQUIRE(spec.skeleton.quant.stages == 3);
  auto g = ExpertGeometry::from(spec.skeleton.config, spec.skeleton.quant);
  REQUIRE(g.has_value());
  REQUIRE(g->payload_end == 9776);      // reference §7
  REQUIRE(g->record_bytes == 12288);
  round_trip(spec, "tiny");
}

TEST_CASE("tiny-k3 container round-trips bit for bit (latent MoE, AttnRes, prefix)", "[shared][container]") {
  const auto spec = spec_for("tiny-k3");
  REQUIRE(spec.skeleton.tensor_prefix == "language_model.");
  REQUIRE(spec.skeleton.config.arch == "kimi-k3");
  REQUIRE(spec.skeleton.config.latent_dim == 64);
  round_trip(spec, "tiny-k3");
}

TEST_CASE("tiny-v41 container round-trips bit for bit (the V4.1 tensor list, CSA2, single-pass mHC)",
          "[shared][container][v41]") {
  const auto spec = spec_for("tiny-v41");
  REQUIRE(spec.skeleton.config.arch == "deepseek-v4.1");
  REQUIRE(spec.skeleton.config.n_csa_layers() == 6);
  REQUIRE(synth::plan_trunk(spec).size() == v41_trunk_tensors(spec.skeleton.config).size());
  round_trip(spec, "tiny-v41");
}

TEST_CASE("expert formats VQ2R and VQ4P round-trip", "[shared][container]") {
  SECTION("VQ2R") { round_trip(spec_for("tiny", "vq2r"), "vq2r"); }
  SECTION("VQ4P") { round_trip(spec_for("tiny", "vq4p"), "vq4p"); }
  SECTION("VQ4P on the latent model") { round_trip(spec_for("tiny-k3", "vq4p"), "k3-vq4p"); }
}

TEST_CASE("trunk formats Q8G and Q3G round-trip", "[shared][container]") {
  SECTION("Q8G") { round_trip(spec_for("tiny", {}, "q8g"), "q8g"); }
  SECTION("Q3G") { round_trip(spec_for("tiny", {}, "q3g"), "q3g"); }
}

TEST_CASE("same seed gives the same bytes, another seed different ones", "[shared][container]") {
  test::TempDir a("seed-a"), b("seed-b"), c("seed-c");
  REQUIRE(synth::write_container(spec_for("tiny", {}, {}, 1), a.path()).has_value());
  REQUIRE(synth::write_container(spec_for("tiny", {}, {}, 1), b.path()).has_value());
  REQUIRE(synth::write_container(spec_for("tiny", {}, {}, 2), c.path()).has_value());
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const char* file : {"manifest.json", "trunk.bin", "codebooks.bin", "experts-L1.bin", "experts-L3.bin"}) {
    INFO(file);
    REQUIRE(slurp(a.path() / file) == slurp(b.path() / file));
  }
  REQUIRE(slurp(a.path() / "trunk.bin") != slurp(c.path() / "trunk.bin"));
  REQUIRE(slurp(a.path() / "experts-L1.bin") != slurp(c.path() / "experts-L1.bin"));
}
