// The synthetic weights must be usable by the forward pass: O(1) activations through every
// matrix and routers that spread tokens over most experts.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <cstring>
#include <set>

#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_bank.hpp"
#include "shared/container/trunk.hpp"
#include "shared/fp16.hpp"
#include "shared/synth/synth.hpp"
#include "temp_dir.hpp"

using namespace waste;

namespace {

std::vector<float> rms_normed(std::vector<float> x) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const float inv = float(1.0 / std::sqrt(ss / double(x.size()) + 1e-5));
  for (float& v : x) v *= inv;
  return x;
}

float rms(const std::vector<float>& y) {
  double ss = 0;
  for (float v : y) ss += double(v) * v;
  return float(std::sqrt(ss / double(y.size())));
}

struct Loaded {
  test::TempDir dir{"behaviour"};
  ContainerInfo info;
  std::optional<Trunk> trunk;
  explicit Loaded(const std::string& preset) {
    synth::SynthRequest req;
    req.preset = preset;
    req.seed = 3;
    auto spec = synth::make_spec(req);
    REQUIRE(spec.has_value());
    REQUIRE(synth::write_container(*spec, dir.path()).has_value());
    auto i = ContainerInfo::open(dir.path());
    REQUIRE(i.has_value());
    info = std::move(*i);
    auto t = Trunk::load(dir.path(), info.manifest);
    REQUIRE(t.has_value());
    trunk.emplace(std::move(*t));
  }
};

}  // namespace

TEST_CASE("routers of the tiny model spread 32 random tokens over most experts", "[shared][container]") {
  Loaded m("tiny");
  const ModelConfig& c = m.info.manifest.config;
  const TrunkTensor* embed = m.trunk->find("model.embed_tokens.weight");
  REQUIRE(embed != nullptr);
  std::mt19937 rng(11);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    if (!c.is_moe(layer)) continue;
    const std::string p = "model.layers." + std::to_string(layer) + ".block_sparse_moe.gate.";
    const TrunkTensor* gate = m.trunk->find(p + "weight");
    const TrunkTensor* bias = m.trunk->find(p + "e_score_correction_bias");
    REQUIRE(gate != nullptr);
    REQUIRE(bias != nullptr);
    auto w = m.trunk->dequantize(*gate);
    auto b = m.trunk->dequantize(*bias);
    REQUIRE(w.has_value());
    REQUIRE(b.has_value());
    std::set<int> chosen;
    for (int t = 0; t < 32; ++t) {
      std::vector<float> x(std::size_t(c.hidden));
      REQUIRE(m.trunk->read_row(*embed, int(rng() % unsigned(c.vocab)), x).has_value());
      x = rms_normed(x);
      std::vector<std::pair<float, int>> scores;
      for (int e = 0; e < c.n_experts; ++e) {
        float dot = 0;
        for (int k = 0; k < c.hidden; ++k) dot += (*w)[std::size_t(e) * c.hidden + k] * x[k];
        scores.emplace_back(1.0f / (1.0f + std::exp(-dot)) + (*b)[e], e);
      }
      std::partial_sort(scores.begin(), scores.begin() + c.top_k, scores.end(), std::greater<>());
      for (int k = 0; k < c.top_k; ++k) chosen.insert(scores[k].second);
    }
    INFO("layer " << layer << " chose " << chosen.size() << " experts");
    REQUIRE(chosen.size() >= 6);
  }
}

TEST_CASE("every synthetic matrix maps an RMS-normed input to an O(1) output", "[shared][container]") {
  for (const char* preset : {"tiny", "tiny-k3"}) {
    Loaded m(preset);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    int checked = 0;
    for (const auto& info : m.info.manifest.trunk) {
      if (info.shape.size() != 2 || info.name.find("embed_tokens") != std::string::npos) continue;
      if (!info.name.starts_with(m.info.manifest.tensor_prefix)) continue;
      const TrunkTensor* t = m.trunk->find(info.name.substr(m.info.manifest.tensor_prefix.size()));
      REQUIRE(t != nullptr);
      auto w = m.trunk->dequantize(*t);
      REQUIRE(w.has_value());
      std::vector<float> x(std::size_t(info.cols()));
      for (float& v : x) v = normal(rng);
      x = rms_normed(x);
      std::vector<float> y(std::size_t(info.rows()));
      for (std::int64_t r = 0; r < info.rows(); ++r) {
        for (std::int64_t k = 0; k < info.cols(); ++k) y[r] += (*w)[std::size_t(r * info.cols() + k)] * x[k];
      }
      INFO(preset << " " << info.name << " rms " << rms(y));
      REQUIRE(std::isfinite(rms(y)));
      REQUIRE(rms(y) > 0.3f);
      REQUIRE(rms(y) < 3.0f);
      ++checked;
    }
    REQUIRE(checked > 20);

    // Routed experts: dequantise expert 0's matrices of the first MoE layer through the codebooks.
    const Manifest& man = m.info.manifest;
    auto books = Codebooks::load(m.info.files.codebooks(), man.quant);
    REQUIRE(books.has_value());
    auto banks = ExpertBanks::open(m.dir.path(), man, books->n_books(), BankReadOptions{false, true});
    REQUIRE(banks.has_value());
    AlignedBuffer buf(banks->record_bytes());
    const int layer = man.banks.begin()->first;
    REQUIRE(banks->read_record(layer, 0, buf.span()).has_value());
    const ExpertGeometry& g = banks->geometry();
    const ExpertView view = make_expert_view(buf.span().first(banks->record_bytes()), g);
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> x(std::size_t(g.cols[kind]));
      for (float& v : x) v = normal(rng);
      x = rms_normed(x);
      std::vector<float> y(std::size_t(g.rows[kind]));
      const int nvr = g.cols[kind] / g.vec_dim;
      for (int r = 0; r < g.rows[kind]; ++r) {
        std::uint16_t sh;
        std::memcpy(&sh, reinterpret_cast<const std::byte*>(view.scales[kind]) + 2 * r, 2);
        float acc = 0;
        for (int v = 0; v < nvr; ++v) {
          std::uint8_t idx[8] = {};
          if (g.packed6) {
            unpack_vq4p(view.index[kind] + index_byte_offset(r, v, 0, nvr, 3), idx);
          } else {
            for (int s = 0; s < g.stages; ++s) idx[s] = view.index[kind][index_byte_offset(r, v, s, nvr, g.stages)];
          }
          for (int s = 0; s < g.stages; ++s) {
            auto book = books->book(Codebooks::book_id(view.codebook_id, kind, s, g.stages));
            for (int j = 0; j < g.vec_dim; ++j) acc += book[idx[s] * g.vec_dim + j] * x[v * g.vec_dim + j];
          }
        }
        y[r] = acc * fp16_to_f32(sh);
      }
      INFO(preset << " expert matrix " << kind << " rms " << rms(y));
      REQUIRE(rms(y) > 0.3f);
      REQUIRE(rms(y) < 3.0f);
    }
  }
}
