#include "compute/convert/v41_engram.hpp"

#include <algorithm>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "compute/engram/engram_json.hpp"
#include "compute/tokenizer/rank_file.hpp"
#include "shared/container/file_io.hpp"

namespace waste::convert {
namespace {

using json = nlohmann::json;

void append_utf8(std::string& s, char32_t c) {
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | (c >> 6));
    s += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += char(0xE0 | (c >> 12));
    s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xF0 | (c >> 18));
    s += char(0x80 | ((c >> 12) & 0x3F));
    s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  }
}

// Code points of valid UTF-8; false on a malformed sequence.
bool decode_utf8(std::string_view s, std::vector<char32_t>& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + std::size_t(n) > s.size()) return false;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto t = static_cast<unsigned char>(s[i + std::size_t(k)]);
      if ((t >> 6) != 2) return false;
      c = (c << 6) | (t & 0x3F);
    }
    out.push_back(c);
    i += std::size_t(n);
  }
  return true;
}

}  // namespace

Result<std::vector<engram::TokenText>> engram_token_texts(const HfTokenizer& hf) {
  auto ranks = tokenizer::parse_rank_file(hf.rank_file, "tokenizer.json (re-encoded)");
  if (!ranks) return std::unexpected(ranks.error());
  int top = -1;
  for (const auto& r : *ranks) top = std::max(top, r.rank);
  for (const auto& a : hf.added) top = std::max(top, a.id);
  if (top < 0) return make_error(Errc::format, "tokenizer.json: no tokens");
  std::vector<engram::TokenText> texts(std::size_t(top) + 1);
  const auto& chars = gpt2_byte_chars();
  for (const auto& r : *ranks) {
    auto& t = texts[std::size_t(r.rank)];
    t.text = r.bytes;
    t.spelling.clear();
    for (unsigned char b : r.bytes) append_utf8(t.spelling, chars[b]);
  }
  std::unordered_map<char32_t, int> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[chars[std::size_t(b)]] = b;
  std::vector<char32_t> cps;
  for (const auto& a : hf.added) {
    auto& t = texts[std::size_t(a.id)];
    t.spelling = a.text;
    t.text = a.text;
    if (decode_utf8(a.text, cps) &&
        std::all_of(cps.begin(), cps.end(), [&](char32_t c) { return byte_of.contains(c); })) {
      t.text.clear();
      for (char32_t c : cps) t.text += char(byte_of[c]);
    }
  }
  return texts;
}

Result<EngramAddressing> derive_engram_addressing(const ModelConfig& c, const HfTokenizer& hf) {
  auto texts = engram_token_texts(hf);
  if (!texts) return std::unexpected(texts.error());
  auto map = engram::derive_compressed_token_map(*texts);
  if (!map) return std::unexpected(map.error());
  if (map->size != c.engram_compressed_vocab_size) {
    return make_error(Errc::format, "config.json: engram_compressed_vocab_size " +
                                        std::to_string(c.engram_compressed_vocab_size) +
                                        ", but the tokenizer's compressed token map has " + std::to_string(map->size) +
                                        " ids (another tokenizer, or another normalizer)");
  }
  if (std::int64_t(map->map.size()) > c.vocab) {
    return make_error(Errc::format, "tokenizer.json: token ids up to " + std::to_string(map->map.size() - 1) +
                                        " exceed vocab_size " + std::to_string(c.vocab));
  }
  if (std::size_t(c.engram_pad_id) >= map->map.size()) {
    return make_error(Errc::format, "config.json: engram_pad_id " + std::to_string(c.engram_pad_id) +
                                        " is not a token of tokenizer.json");
  }
  EngramAddressing a;
  a.token_map = std::move(map->map);
  const std::int32_t pad = a.token_map[std::size_t(c.engram_pad_id)];
  a.token_map.resize(std::size_t(c.vocab), pad);
  engram::EngramParams p;
  p.layer_ids = c.engram_layer_ids;
  p.max_ngram_size = c.engram_max_ngram_size;
  p.n_heads = c.engram_n_heads;
  p.head_dim = c.engram_head_dim;
  p.engram_vocab_size = std::uint64_t(c.engram_vocab_size);
  p.compressed_vocab_size = map->size;
  p.pad_id = pad;
  for (auto n : c.engram_num_embeddings) p.num_embeddings.push_back(std::uint64_t(n));
  auto layout = engram::derive_engram_layout(p);
  if (!layout) return std::unexpected(layout.error().with_context("config.json"));
  a.layout = std::move(*layout);
  return a;
}

Status write_engram_addressing(const EngramAddressing& a, const std::filesystem::path& dir) {
  WASTE_TRY(write_file_atomic(dir / engram::kEngramJsonFile, engram::engram_json_text(a.layout)));
  WASTE_TRY(write_file_atomic(dir / engram::kTokenMapFile, engram::token_map_bytes(a.token_map)));
  return {};
}

Status convert_engram_table(const WeightSource& source, const EngramTableHeader& header,
                            const std::filesystem::path& work, const std::filesystem::path& progress_file,
                            std::uint64_t rows_per_chunk, ProgressMode progress) {
  const std::uint32_t rpp = header.rows_per_page();
  if (rows_per_chunk == 0 || rows_per_chunk % rpp != 0) {
    return make_error(Errc::argument, "engram chunk of " + std::to_string(rows_per_chunk) +
                                          " rows is not a multiple of " + std::to_string(rpp));
  }
  if (std::uint64_t(source.rows()) != header.rows || source.cols() != header.width) {
    return make_error(Errc::format, "tensor " + source.name + ": shape [" + std::to_string(source.rows()) + ", " +
                                        std::to_string(source.cols()) + "], the config says [" +
                                        std::to_string(header.rows) + ", " + std::to_string(header.width) + "]");
  }
  std::uint64_t done = 0;
  std::uint32_t crc = 0;
  std::error_code ec;
  if (std::filesystem::exists(progress_file, ec) && std::filesystem::exists(work, ec)) {
    auto text = read_text_file(progress_file, 1 << 16);
    if (!text) return std::unexpected(text.error());
    json p = json::parse(*text, nullptr, false);
    if (!p.is_discarded() && p.is_object() && p.value("rows", json()).is_number_unsigned() &&
        p.value("crc", json()).is_number_unsigned() && p["rows"].get<std::uint64_t>() <= header.rows &&
        p["rows"].get<std::uint64_t>() % rpp == 0) {
      done = p["rows"].get<std::uint64_t>();
      crc = p["crc"].get<std::uint32_t>();
    }
  }
  auto writer = EngramTableWriter::open(work, header, done, crc);
  if (!writer) return std::unexpected(writer.error());
  Progress bar(progress, "engram table of layer " + std::to_string(header.layer),
               std::int64_t((header.rows + rows_per_chunk - 1) / rows_per_chunk));
  bar.advance(std::int64_t(done / rows_per_chunk));
  const auto width = std::size_t(header.width);
  std::vector<float> buf;
  while (writer->rows_done() < header.rows) {
    const std::uint64_t r0 = writer->rows_done();
    const std::uint64_t n = std::min<std::uint64_t>(rows_per_chunk, header.rows - r0);
    buf.resize(std::size_t(n) * width);
    WASTE_TRY(decode_rows(source, std::int64_t(r0), std::int64_t(n), buf));
    for (std::uint64_t r = 0; r < n; ++r) {
      WASTE_TRY(writer->append(std::span(buf).subspan(std::size_t(r) * width, width)));
    }
    if (writer->rows_done() < header.rows) {
      WASTE_TRY(writer->sync());
      const json p = {{"rows", writer->rows_done()}, {"crc", writer->crc()}};
      WASTE_TRY(write_file_atomic(progress_file, p.dump()));
    }
    bar.advance();
  }
  WASTE_TRY(writer->finish());
  bar.finish();
  return {};
}

}  // namespace waste::convert
