#include "compute/convert/converter.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "compute/convert/dtype_decode.hpp"
#include "compute/convert/safetensors.hpp"
#include "compute/convert/source_config.hpp"
#include "compute/convert/tokenizer_files.hpp"
#include "compute/convert/trunk_quant.hpp"
#include "compute/convert/v41_config.hpp"
#include "compute/convert/v41_engram.hpp"
#include "compute/tokenizer/pre_tokenizer.hpp"
#include "shared/container/container.hpp"
#include "shared/container/container_writer.hpp"
#include "shared/container/file_io.hpp"

namespace waste::convert {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct TrunkItem {
  std::string name;      // container name
  WeightSource source;
  TensorFormat fmt;
};

fs::path work_dir(const ConvertOptions& o) { return o.out / ".convert"; }
fs::path part(const ConvertOptions& o, int layer, const char* what) {
  return work_dir(o) / ("L" + std::to_string(layer) + "." + what);
}

// Write a whole file durably under a temporary name, then rename it into place.
Status write_durable(const fs::path& path, std::span<const std::byte> bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    auto fd = open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    if (!fd) return std::unexpected(fd.error());
    WASTE_TRY(write_all(fd->get(), bytes, tmp));
    if (::fsync(fd->get()) != 0) return make_error(Errc::io, tmp.string() + ": fsync: " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return make_error(Errc::io, tmp.string() + " -> " + path.string() + ": " + ec.message());
  return {};
}

Status sync_dir(const fs::path& dir) {
  auto fd = open_file(dir, O_RDONLY | O_DIRECTORY);
  if (!fd) return std::unexpected(fd.error());
  ::fsync(fd->get());
  return {};
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Identifies the conversion a work directory belongs to: a rerun with other parameters or
// another checkpoint must not reuse its layers.
std::string params_text(const ConvertOptions& o, const SourceConfig& src, const Checkpoint& ck) {
  json p = {{"stages", o.stages}, {"entries", o.entries}, {"index_bits", o.index_bits},
            {"vec_dim", kVecDim}, {"iterations", o.rvq.iterations}, {"train_vectors", o.rvq.train_vectors},
            {"sample_experts", o.rvq.sample_experts}, {"config", src.config}, {"engram_bits", o.engram_bits},
            {"tensors", ck.names().size()}, {"bytes", ck.total_bytes()}};
  return p.dump();
}

struct LayerFiles {
  std::vector<std::uint16_t> books;  // 3 kinds x stages x entries x 8
  LayerReport report;
};

Result<LayerFiles> load_finished_layer(const ConvertOptions& o, int layer, std::size_t book_values) {
  LayerFiles f;
  f.report.layer = layer;
  f.report.resumed = true;
  auto fd = open_file(part(o, layer, "books"), O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  f.books.resize(book_values);
  auto n = pread_full(fd->get(), std::as_writable_bytes(std::span(f.books)), 0);
  if (!n) return std::unexpected(n.error());
  if (*n != book_values * 2) return make_error(Errc::format, part(o, layer, "books").string() + ": truncated");
  auto stats = read_text_file(part(o, layer, "stats.json"), 1 << 20);
  if (!stats) return std::unexpected(stats.error());
  json s = json::parse(*stats, nullptr, false);
  if (s.is_discarded() || !s.is_array() || s.size() != 3) return make_error(Errc::format, part(o, layer, "stats.json").string() + ": damaged");
  for (int k = 0; k < 3; ++k) f.report.kinds[k] = {s[k][0].get<double>(), s[k][1].get<double>()};
  return f;
}

}  // namespace

Result<ConvertSummary> convert_checkpoint(const ConvertOptions& opt_in) {
  ConvertOptions o = opt_in;
  o.rvq.stages = o.stages;
  o.rvq.entries = o.entries;
  o.rvq.simd = o.simd;
  ConvertSummary summary;
  const auto t_start = Clock::now();

  // ---- 1. Inputs, all checked before anything is written.
  auto src = load_source_config(o.src / "config.json");
  if (!src) return std::unexpected(src.error());
  auto ck = Checkpoint::open(o.src);
  if (!ck) return std::unexpected(ck.error());
  summary.bytes_in = ck->total_bytes();
  const ModelConfig& c = src->model;

  Manifest skeleton;
  skeleton.arch = c.arch;
  skeleton.tensor_prefix = src->prefix;
  skeleton.config_json = src->config;
  skeleton.config = c;
  // A tokenizer.json (no tiktoken file) is converted and checked now, before anything is written.
  auto hf_tokenizer = load_hf_tokenizer(o.src);
  if (!hf_tokenizer) return std::unexpected(hf_tokenizer.error());
  std::vector<std::string> notes;
  if (*hf_tokenizer) {
    // The public engine's keys; absent means Kimi's pattern (with the Han branch).
    add_pattern_keys(**hf_tokenizer, skeleton.config_json);
    if (c.eos_token_ids.empty()) {
      // The eos comes from the model's config or the tokenizer's, never from the vocabulary's end.
      auto eos = hf_eos_token_id(o.src, **hf_tokenizer);
      if (!eos) return std::unexpected(eos.error());
      if (!*eos) {
        return make_error(Errc::format, (o.src / "config.json").string() +
                                            ": no eos_token_id, and tokenizer_config.json names no eos_token "
                                            "(a tokenizer.json's eos is not assumed from its vocabulary)");
      }
      skeleton.config_json["eos_token_id"] = **eos;
      skeleton.config.eos_token_id = **eos;
      skeleton.config.eos_token_ids = {**eos};
    }
    notes.push_back("tokenizer.json re-encoded as tokenizer.model (" + std::to_string((*hf_tokenizer)->n_tokens) +
                    " tokens, " + std::to_string((*hf_tokenizer)->added.size()) + " added tokens as specials, " +
                    ((*hf_tokenizer)->tokenizer_pattern == tokenizer::kTokenizerPatternDeepSeek
                         ? "DeepSeek-V4.1's three splits"
                         : ((*hf_tokenizer)->han_split ? "Kimi's pattern" : "no Han branch in its pattern")) +
                    ")");
  }
  skeleton.quant.stages = o.stages;
  skeleton.quant.entries = o.entries;
  skeleton.quant.index_bits = o.index_bits;
  skeleton.quant.fmt = o.index_bits == 6 ? "VQ4P" : (o.stages == 2 ? "VQ2R" : "VQ3R");
  if (o.index_bits == 6 && !(o.stages == 4 && o.entries == 64)) {
    return make_error(Errc::argument, "--index-bits 6 needs --stages 4 --entries 64 (VQ4P)");
  }
  if (o.index_bits == 8 && (o.entries < 8 || o.entries > 256 || o.entries % 8 != 0)) {
    return make_error(Errc::argument, "--entries " + std::to_string(o.entries) + " must be a multiple of 8 in 8..256");
  }
  if (o.stages < 1 || o.stages > 8) return make_error(Errc::argument, "--stages must be in 1..8");

  const bool v41 = src->family == SourceFamily::deepseek_v41;
  if (o.engram_bits != 4 && o.engram_bits != 8) return make_error(Errc::argument, "--engram-bits must be 4 or 8");
  std::vector<TrunkItem> trunk;
  std::int64_t dropped_mtp = 0, dropped_vision = 0;
  for (const std::string& hf : ck->names()) {
    const DropReason why = drop_reason(*src, hf);
    dropped_mtp += why == DropReason::mtp ? 1 : 0;
    dropped_vision += why == DropReason::vision ? 1 : 0;
    if (v41 && why == DropReason::kept && v41_classify(hf, c.n_layers).kind == V41Kind::unknown) {
      return make_error(Errc::format, "tensor " + hf + ": not a DeepSeek-V4.1 release name this converter knows "
                                      "(refused rather than left out)");
    }
    if (hf.find(".experts.") != std::string::npos) continue;
    auto name = container_name(*src, hf);
    if (!name) continue;
    auto w = resolve_weight(*ck, hf, src->fp8_block);
    if (!w) return std::unexpected(w.error());
    if (w->shape.size() > 4) return make_error(Errc::format, "tensor " + hf + " (shard " + w->shard + "): more than 4 dimensions");
    for (auto d : w->shape) {
      if (d < 1) return make_error(Errc::format, "tensor " + hf + " (shard " + w->shard + "): empty shape " + shape_text(w->shape));
    }
    const TensorFormat fmt = trunk_format(*name, w->shape, o.trunk_bits);
    trunk.push_back({*name, std::move(*w), fmt});
  }
  if (dropped_mtp > 0 && v41) {
    notes.push_back("left out " + std::to_string(dropped_mtp) + " tensors of the DSpark draft stages (mtp.*, " +
                    "num_nextn_predict_layers " + std::to_string(c.n_mtp) + "): the container has no reader for them");
  } else if (dropped_mtp > 0) {
    notes.push_back("left out " + std::to_string(dropped_mtp) + " tensors of the MTP layer" +
                    (c.n_mtp > 0 ? "s (num_nextn_predict_layers " + std::to_string(c.n_mtp) + ")" : "s") +
                    " at index " + std::to_string(c.n_layers) + "+: the container has no reader for them");
  }
  if (dropped_vision > 0) {
    notes.push_back("left out " + std::to_string(dropped_vision) + " tensors of the vision tower (" +
                    (v41 ? "vision.*, aligner.*, image_*" : "model.visual.*") +
                    "): the text container does not carry it");
  }
  // MXFP4 pairs carry no plain name: add the logical tensor once (non-expert MXFP4 is rare).
  std::sort(trunk.begin(), trunk.end(), [](const TrunkItem& a, const TrunkItem& b) { return a.name < b.name; });
  {
    Manifest probe = skeleton;
    for (const auto& t : trunk) {
      TrunkTensorInfo info;
      info.name = t.name;
      info.fmt = t.fmt;
      info.shape = t.source.shape;
      probe.trunk.push_back(std::move(info));
    }
    // The trunk the forward pass reads; a V4.1 checkpoint against shared/container/v41_tensors.hpp's list.
    if (auto s = validate_text_tensors(probe); !s) {
      return std::unexpected(s.error().with_context("checkpoint"));
    }
  }
  // DeepSeek-V4.1's Engram: the tables resolved and shape-checked, the addressing derived now.
  std::vector<std::pair<EngramTableHeader, WeightSource>> engram_tables;
  std::optional<EngramAddressing> engram_addressing;
  if (c.uses_engram()) {
    if (!*hf_tokenizer) {
      return make_error(Errc::format, (o.src / "tokenizer.json").string() +
                                          ": missing; the Engram layers' compressed token map is derived from it");
    }
    auto a = derive_engram_addressing(c, **hf_tokenizer);
    if (!a) return std::unexpected(a.error());
    engram_addressing = std::move(*a);
    for (std::size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
      const int l = c.engram_layer_ids[i];
      auto w = resolve_weight(*ck, v41_engram_table_name(l), BlockSize{1, kEngramGroup});
      if (!w) return std::unexpected(w.error());
      EngramTableHeader h;
      h.bits = o.engram_bits;
      h.rows = std::uint64_t(c.engram_num_embeddings[i]);
      h.width = c.engram_head_dim;
      h.layer = l;
      if (w->shape.size() != 2 || std::uint64_t(w->shape[0]) != h.rows || w->shape[1] != h.width) {
        return make_error(Errc::format, "tensor " + w->name + " (shard " + w->shard + "): expected shape " +
                                            shape_text({std::int64_t(h.rows), h.width}) + ", found " +
                                            shape_text(w->shape));
      }
      engram_tables.emplace_back(h, std::move(*w));
    }
    notes.push_back("Engram tables of layers " + json(c.engram_layer_ids).dump() + " written as engram-L{n}.bin at " +
                    std::to_string(o.engram_bits) + " bits; engram.json and engram-tokmap.bin derived (" +
                    std::to_string(c.engram_compressed_vocab_size) + " compressed ids)");
  }
  std::vector<int> moe_layers;
  for (int l = 0; l < c.n_layers; ++l) if (c.is_moe(l)) moe_layers.push_back(l);
  std::optional<ExpertGeometry> geometry;
  if (!moe_layers.empty()) {
    auto g = ExpertGeometry::from(c, skeleton.quant);
    if (!g) return std::unexpected(g.error());
    geometry = *g;
  }
  // Every routed expert matrix, resolved and shape-checked up front.
  std::map<int, std::vector<std::array<WeightSource, 3>>> experts;
  for (int l : moe_layers) {
    auto& layer = experts[l];
    layer.resize(std::size_t(c.n_experts));
    for (int e = 0; e < c.n_experts; ++e) {
      for (int k = 0; k < 3; ++k) {
        auto w = resolve_weight(*ck, expert_weight_name(*src, l, e, k), src->fp8_block);
        if (!w) return std::unexpected(w.error());
        const std::vector<std::int64_t> want{geometry->rows[k], geometry->cols[k]};
        if (w->shape != want) {
          return make_error(Errc::format, "tensor " + w->name + " (shard " + w->shard + "): expected shape " +
                                              shape_text(want) + ", found " + shape_text(w->shape));
        }
        layer[std::size_t(e)][std::size_t(k)] = std::move(*w);
      }
    }
  }
  std::vector<int> todo = moe_layers;
  if (o.layers) {
    for (int l : *o.layers) {
      if (std::find(moe_layers.begin(), moe_layers.end(), l) == moe_layers.end()) {
        return make_error(Errc::argument, "--layers: layer " + std::to_string(l) + " is not a MoE layer");
      }
    }
    todo = *o.layers;
    std::sort(todo.begin(), todo.end());
  }

  // ---- Work directory: reuse it only for the same conversion.
  std::error_code ec;
  fs::create_directories(work_dir(o), ec);
  if (ec) return make_error(Errc::io, work_dir(o).string() + ": " + ec.message());
  const std::string params = params_text(o, *src, *ck);
  {
    auto old = read_text_file(work_dir(o) / "params.json", 64u << 20);
    if (!old || *old != params) {
      for (const auto& entry : fs::directory_iterator(work_dir(o))) fs::remove(entry.path(), ec);
      // Banks renamed into place by an interrupted assembly of another conversion are stale too.
      for (int l : moe_layers) fs::remove(o.out / ("experts-L" + std::to_string(l) + ".bin"), ec);
      for (int l : c.engram_layer_ids) fs::remove(o.out / ("engram-L" + std::to_string(l) + ".bin"), ec);
      WASTE_TRY(write_file_atomic(work_dir(o) / "params.json", params));
    }
  }
  fs::remove(o.out / "manifest.json", ec);  // from here on the directory is not a complete container

  auto layer_done = [&](int l) {
    return fs::exists(part(o, l, "bank"), ec) ||
           (fs::exists(o.out / ("experts-L" + std::to_string(l) + ".bin"), ec) && fs::exists(part(o, l, "books"), ec));
  };

  // ---- Disk space: the banks still to write, the trunk (bounded by its f32 size) and the books.
  {
    std::uint64_t need = 0;
    for (int l : todo) if (!layer_done(l)) need += geometry->record_bytes * std::uint64_t(c.n_experts);
    for (const auto& t : trunk) {
      TrunkTensorInfo info;
      info.fmt = t.fmt;
      info.shape = t.source.shape;
      need += info.payload_bytes() + info.scale_bytes();
    }
    need += std::uint64_t(moe_layers.size()) * 3 * o.stages * (16 + std::uint64_t(o.entries) * kVecDim * 2) * 2;
    for (const auto& [h, w] : engram_tables) need += h.file_bytes();
    struct statvfs st {};
    if (::statvfs(o.out.c_str(), &st) == 0) {
      const std::uint64_t avail = std::uint64_t(st.f_bavail) * st.f_frsize;
      if (avail < need) {
        return make_error(Errc::io, "not enough disk space in " + o.out.string() + ": the container needs " +
                                        std::to_string(need) + " bytes, " + std::to_string(avail) + " are available");
      }
    }
  }

  // Crash-test hook: WASTE_CONVERT_STOP_AT=L:E stops the process (SIGSTOP) right after expert E
  // of layer L is written, so a test can kill -9 it at a known point (tests/convert).
  std::optional<std::pair<int, int>> stop_at;
  if (const char* env = std::getenv("WASTE_CONVERT_STOP_AT")) {
    int a = -1, b = -1;
    if (std::sscanf(env, "%d:%d", &a, &b) == 2) stop_at = std::make_pair(a, b);
  }
  ThreadPool pool(o.jobs);
  const std::size_t per_stage = std::size_t(o.entries) * kVecDim;
  const std::size_t layer_book_values = 3 * std::size_t(o.stages) * per_stage;
  std::map<int, LayerFiles> finished;

  // ---- 2. Expert layers.
  {
    Progress layers_bar(o.progress, "layers", std::int64_t(todo.size()));
    for (int l : todo) {
      if (layer_done(l)) {
        auto f = load_finished_layer(o, l, layer_book_values);
        if (!f) return std::unexpected(f.error());
        finished[l] = std::move(*f);
        layers_bar.advance();
        continue;
      }
      const auto& mats = experts[l];
      LayerFiles lf;
      lf.report.layer = l;
      lf.books.resize(layer_book_values);
      std::vector<RvqBooks> books(3);
      std::vector<float> w;
      for (int k = 0; k < 3; ++k) {
        auto t0 = Clock::now();
        std::vector<float> training;
        const std::int64_t per_expert = o.rvq.train_vectors / std::max(1, o.rvq.sample_experts);
        for (int e : sampled_experts(c.n_experts, o.rvq.sample_experts)) {
          const WeightSource& ws = mats[std::size_t(e)][std::size_t(k)];
          w.resize(std::size_t(ws.rows() * ws.cols()));
          WASTE_TRY(decode_rows(ws, 0, ws.rows(), w));
          normalize_rows(w, ws.rows(), ws.cols());
          sample_vectors(w, 1234 + std::uint64_t(e), per_expert, training);
        }
        cap_training_set(training, o.rvq.train_vectors);
        summary.seconds_read += since(t0);
        auto t1 = Clock::now();
        books[std::size_t(k)] = train_rvq(training, o.rvq, pool);
        std::copy(books[std::size_t(k)].fp16.begin(), books[std::size_t(k)].fp16.end(),
                  lf.books.begin() + std::ptrdiff_t(std::size_t(k) * o.stages * per_stage));
        summary.seconds_kmeans += since(t1);
      }
      const fs::path bank_tmp = part(o, l, "bank.tmp");
      auto fd = open_file(bank_tmp, O_WRONLY | O_CREAT | O_TRUNC);
      if (!fd) return std::unexpected(fd.error());
      std::vector<std::byte> record(geometry->record_bytes);
      const int base = 3 * o.stages * int(std::find(moe_layers.begin(), moe_layers.end(), l) - moe_layers.begin());
      Progress experts_bar(o.progress, "experts of layer " + std::to_string(l), c.n_experts);
      for (int e = 0; e < c.n_experts; ++e) {
        std::fill(record.begin(), record.end(), std::byte{0});
        for (int k = 0; k < 3; ++k) {
          auto t0 = Clock::now();
          const WeightSource& ws = mats[std::size_t(e)][std::size_t(k)];
          w.resize(std::size_t(ws.rows() * ws.cols()));
          WASTE_TRY(decode_rows(ws, 0, ws.rows(), w));
          summary.seconds_read += since(t0);
          auto t1 = Clock::now();
          encode_matrix(books[std::size_t(k)], w, *geometry, MatrixKind(k), record, lf.report.kinds[k], pool, o.simd);
          summary.seconds_encode += since(t1);
        }
        finish_record(record, *geometry, l, e, base);
        auto t2 = Clock::now();
        WASTE_TRY(write_all(fd->get(), record, bank_tmp));
        summary.seconds_write += since(t2);
        experts_bar.advance();
        if (stop_at && stop_at->first == l && stop_at->second == e) ::raise(SIGSTOP);
      }
      experts_bar.finish();
      auto t2 = Clock::now();
      if (::fsync(fd->get()) != 0) return make_error(Errc::io, bank_tmp.string() + ": fsync: " + std::strerror(errno));
      *fd = UniqueFd();
      WASTE_TRY(write_durable(part(o, l, "books"), std::as_bytes(std::span(lf.books))));
      json stats = json::array();
      for (const auto& k : lf.report.kinds) stats.push_back({k.err2, k.norm2});
      const std::string st = stats.dump();
      WASTE_TRY(write_durable(part(o, l, "stats.json"), std::as_bytes(std::span(st.data(), st.size()))));
      fs::rename(bank_tmp, part(o, l, "bank"), ec);  // the layer's completion mark, renamed last
      if (ec) return make_error(Errc::io, bank_tmp.string() + ": rename: " + ec.message());
      WASTE_TRY(sync_dir(work_dir(o)));
      summary.seconds_write += since(t2);
      finished[l] = std::move(lf);
      layers_bar.advance();
    }
  }
  for (int l : moe_layers) {
    if (finished.count(l)) continue;
    if (layer_done(l)) {
      auto f = load_finished_layer(o, l, layer_book_values);
      if (!f) return std::unexpected(f.error());
      finished[l] = std::move(*f);
    } else {
      summary.remaining.push_back(l);
    }
  }
  for (int l : moe_layers) if (finished.count(l)) summary.layers.push_back(finished[l].report);
  if (!summary.remaining.empty()) return summary;

  // ---- 3. Engram tables (DeepSeek-V4.1), each resumable a chunk of rows at a time.
  auto engram_done = [&](int l) {
    return fs::exists(work_dir(o) / ("engram-L" + std::to_string(l) + ".bin"), ec) ||
           fs::exists(o.out / ("engram-L" + std::to_string(l) + ".bin"), ec);
  };
  for (const auto& [h, w] : engram_tables) {
    if (engram_done(h.layer)) continue;
    const std::string stem = "engram-L" + std::to_string(h.layer);
    auto t0 = Clock::now();
    WASTE_TRY(convert_engram_table(w, h, work_dir(o) / (stem + ".part"), work_dir(o) / (stem + ".progress"),
                                   std::max<std::uint64_t>(1, o.engram_chunk_pages) * h.rows_per_page(), o.progress));
    fs::rename(work_dir(o) / (stem + ".part"), work_dir(o) / (stem + ".bin"), ec);  // the table's completion mark
    if (ec) return make_error(Errc::io, (work_dir(o) / (stem + ".part")).string() + ": rename: " + ec.message());
    WASTE_TRY(sync_dir(work_dir(o)));
    summary.seconds_write += since(t0);
  }

  // ---- 3. Assembly: trunk, codebooks, banks, tokenizer, manifest last.
  auto t_trunk = Clock::now();
  auto writer = ContainerWriter::create(o.out, skeleton, /*durable=*/true);
  if (!writer) return std::unexpected(writer.error());
  {
    Progress trunk_bar(o.progress, "trunk tensors", std::int64_t(trunk.size()));
    std::vector<float> row;
    std::vector<std::byte> payload;
    std::vector<std::uint16_t> scales;
    for (const auto& t : trunk) {
      WASTE_TRY(writer->begin_tensor(t.name, t.source.shape, t.fmt));
      TrunkTensorInfo info;
      info.fmt = t.fmt;
      info.shape = t.source.shape;
      const std::int64_t rows = t.source.rows(), cols = t.source.cols();
      row.resize(std::size_t(cols));
      payload.resize(std::size_t(info.row_stride_bytes()));
      scales.resize(t.fmt == TensorFormat::f32 ? 0 : std::size_t(info.n_groups()));
      for (std::int64_t r = 0; r < rows; ++r) {
        WASTE_TRY(decode_rows(t.source, r, 1, row));
        if (t.fmt == TensorFormat::f32) {
          std::memcpy(payload.data(), row.data(), payload.size());
        } else {
          quantize_row(t.fmt, row, payload, scales);
        }
        WASTE_TRY(writer->append_row(payload, scales));
      }
      WASTE_TRY(writer->end_tensor());
      trunk_bar.advance();
    }
  }
  for (int l : moe_layers) {
    const auto& books = finished[l].books;
    for (std::size_t b = 0; b < 3 * std::size_t(o.stages); ++b) {
      WASTE_TRY(writer->add_codebook(std::span(books).subspan(b * per_stage, per_stage)));
    }
  }
  for (std::size_t i = 0; i < moe_layers.size(); ++i) {
    const int l = moe_layers[i];
    fs::path from = part(o, l, "bank");
    if (!fs::exists(from, ec)) from = o.out / ("experts-L" + std::to_string(l) + ".bin");  // renamed by an interrupted run
    WASTE_TRY(writer->adopt_bank(l, 3 * o.stages * int(i), from));
  }
  for (const auto& [h, w] : engram_tables) {
    const std::string file = "engram-L" + std::to_string(h.layer) + ".bin";
    if (fs::exists(work_dir(o) / file, ec)) {
      fs::rename(work_dir(o) / file, o.out / file, ec);
      if (ec) return make_error(Errc::io, (work_dir(o) / file).string() + ": rename: " + ec.message());
    }
  }
  if (engram_addressing) WASTE_TRY(write_engram_addressing(*engram_addressing, o.out));
  auto tok = write_tokenizer_files(o.src, o.out, c.arch, *hf_tokenizer ? &**hf_tokenizer : nullptr);
  if (!tok) return std::unexpected(tok.error());
  if (!tok->chat_refused.empty()) notes.push_back(tok->chat_refused);
  for (const auto& n : notes) summary.note += (summary.note.empty() ? "" : "\n") + n;
  summary.seconds_trunk = since(t_trunk);
  auto manifest = writer->finish();
  if (!manifest) return std::unexpected(manifest.error());
  WASTE_TRY(sync_dir(o.out));
  fs::remove_all(work_dir(o), ec);
  summary.complete = true;
  for (const auto& entry : fs::directory_iterator(o.out)) {
    if (entry.is_regular_file()) summary.bytes_out += entry.file_size();
  }
  (void)t_start;
  return summary;
}

std::string format_report(const ConvertSummary& s, const ConvertOptions& o) {
  json layers = json::array();
  ErrorSums total[3];
  for (const auto& l : s.layers) {
    json k = json::object();
    static constexpr const char* kNames[3] = {"gate", "up", "down"};
    for (int i = 0; i < 3; ++i) {
      k[kNames[i]] = l.kinds[i].relative();
      total[i].add(l.kinds[i]);
    }
    layers.push_back({{"layer", l.layer}, {"relative_error", k}, {"resumed", l.resumed}});
  }
  ErrorSums all;
  for (auto& t : total) all.add(t);
  json doc = {{"stages", o.stages}, {"entries", o.entries}, {"index_bits", o.index_bits},
              {"complete", s.complete}, {"layers", layers},
              {"relative_error", {{"gate", total[0].relative()}, {"up", total[1].relative()},
                                  {"down", total[2].relative()}, {"all", all.relative()}}},
              {"seconds", {{"read", s.seconds_read}, {"kmeans", s.seconds_kmeans}, {"encode", s.seconds_encode},
                           {"write", s.seconds_write}, {"trunk_and_manifest", s.seconds_trunk}}}};
  return doc.dump(1) + "\n";
}

}  // namespace waste::convert
