#include "cli/cli_common.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/option_checks.hpp"
#include "shared/container/container.hpp"
#include "shared/memory/budget.hpp"

namespace waste::cli {

void add_engine_options(CLI::App& sub, EngineArgs& a) {
  sub.add_option("model", a.model, "Container directory (NAME.waste)")->type_name("DIR")->required();
  sub.add_option("--budget", a.budget,
                 "RAM budget in bytes, with a K/M/G/T suffix (8G, 500M); auto = the plan's choice for this "
                 "machine (waste plan)")
      ->type_name("SIZE")
      ->default_str("auto")
      ->transform(byte_size("--budget"));
  sub.add_option("--ctx", a.ctx, "Context length in tokens")->type_name("TOKENS")->check(int_range("--ctx", 1, kMaxCtxTokens));
  sub.add_option("--threads", a.threads, "Compute threads (0 = all hardware threads)")
      ->type_name("N")
      ->check(int_range("--threads", 0, 1024));
  sub.add_flag("--verify", a.verify, "CRC-check every expert record read");
  sub.add_flag("--no-direct-io", a.no_direct_io, "Read expert banks through the page cache");
  sub.add_option("--cache-records", a.cache_records,
                 "With --in-process: arena slots of the in-process cache, in records (0 = the smallest arena, "
                 "2 x top-k; overrides --budget)")
      ->type_name("RECORDS")
      ->default_str("from --budget")
      ->check(int_range("--cache-records", 0, std::int64_t(1) << 32));
  sub.add_flag("--in-process", a.in_process, "Run the daemon's cache and readers inside this process (no daemon)");
  sub.add_option("--linger", a.linger_ms,
                 "If this command starts the container's waste-ioserver: milliseconds it stays after the last "
                 "client leaves ($WASTE_LINGER_MS, if set, is the default)")
      ->type_name("MS")
      ->default_str("3000")
      ->check(int_range("--linger", 0, 86'400'000));
}

void add_sampling_options(CLI::App& sub, SamplingArgs& a) {
  sub.add_option("--temp", a.temperature, "Sampling temperature (0 = greedy)")
      ->type_name("T")
      ->check(real_min("--temp", {0.0}));
  sub.add_option("--top-p", a.top_p, "Nucleus sampling: keep the most likely tokens up to this probability mass (1 = off)")
      ->type_name("P")
      ->check(real_range("--top-p", {0.0, /*open=*/true}, {1.0}));
  sub.add_option("--top-k", a.top_k, "Keep the k most likely tokens (0 = off)")
      ->type_name("K")
      ->check(int_range("--top-k", 0, kIntMax));
  sub.add_option("--seed", a.seed, "Sampling seed (0 = default)")->type_name("SEED")->check(u64_value("--seed"));
}

Status check_cache_records(const EngineArgs& a) {
  if (a.cache_records && !a.in_process) {
    return make_error(Errc::argument,
                      "--cache-records sizes the in-process cache; with a daemon use --budget (or add --in-process)");
  }
  return ok();
}

void warn_above_cap(const InProcessCache& cache) {
  if (cache.above_cap) {
    std::fprintf(stderr, "waste: warning: budget %s is above what this machine can hold; expect paging\n",
                 format_bytes(cache.budget_bytes).c_str());
  }
}

OpenRequest open_request(const EngineArgs& a, std::shared_ptr<const ContainerInfo> container) {
  OpenRequest r;
  r.engine.model = a.model;
  r.engine.threads = a.threads;
  r.engine.ctx_tokens = a.ctx;
  r.engine.prefill_chunk = a.prefill_chunk;
  r.engine.verify_records = a.verify;
  r.engine.direct_io = !a.no_direct_io;
  r.container = std::move(container);
  r.in_process = a.in_process;
  r.budget = a.budget;
  if (a.cache_records) r.cache_records = std::uint64_t(*a.cache_records);
  r.linger_ms = a.linger_ms;
  r.sequences = a.sequences;
  r.on_cache = warn_above_cap;
  return r;
}

Result<OpenedEngine> open_engine(const EngineArgs& a, std::shared_ptr<const ContainerInfo> container) {
  WASTE_TRY(check_cache_records(a));
  auto opened = waste::open_engine(open_request(a, std::move(container)));
  if (!opened) return std::unexpected(opened.error());
  if (opened->daemon_options_ignored) {
    std::fprintf(stderr, "waste: warning: a shared waste-ioserver serves this container; its budget and "
                         "read options apply (--budget/--verify/--no-direct-io ignored)\n");
  }
  return opened;
}

Result<Tokenizer> load_tokenizer(const ContainerInfo& info) {
  if (!info.has_tokenizer) {
    return make_error(Errc::unsupported, info.files.dir.string() + ": the container has no tokenizer.model (use --ids)");
  }
  auto tok = Tokenizer::load(info.files.dir);
  if (!tok) return std::unexpected(tok.error());
  if (info.manifest.config.eos_token_id > 0) tok->set_eos_ids(info.manifest.config.eos_token_ids);
  return tok;
}

Result<Tokenizer> load_tokenizer(const std::filesystem::path& model) {
  auto info = ContainerInfo::open(model);
  if (!info) return std::unexpected(info.error());
  return load_tokenizer(*info);
}

Result<std::optional<ChatFormat>> load_chat_format(const std::filesystem::path& model, const std::string& file) {
  if (!file.empty()) {
    auto format = ChatFormat::load(file);
    if (!format) return std::unexpected(format.error());
    return std::optional<ChatFormat>(std::move(*format));
  }
  return ChatFormat::load_from_container(model);
}

Result<std::vector<int>> parse_ids(std::string_view text) {
  std::vector<int> ids;
  std::size_t i = 0;
  auto is_sep = [](char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (i < text.size()) {
    while (i < text.size() && is_sep(text[i])) ++i;
    if (i == text.size()) break;
    std::size_t end = i;
    while (end < text.size() && !is_sep(text[end])) ++end;
    const std::string_view piece = text.substr(i, end - i);
    int value = 0;
    auto [ptr, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), value);
    if (ec != std::errc() || ptr != piece.data() + piece.size() || value < 0) {
      return make_error(Errc::argument, "token id '" + std::string(piece) + "' is not a non-negative integer");
    }
    ids.push_back(value);
    i = end;
  }
  return ids;
}

std::string join_ids(std::span<const int> ids, char sep) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(ids[i]);
  }
  return out;
}

Result<std::string> read_text(const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::io, path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error(Errc::io, path + ": read failed");
  return text.str();
}

namespace {
double hit_percent(const ExpertSourceStats& e) {
  const std::uint64_t total = e.hits + e.misses;
  return total ? 100.0 * double(e.hits) / double(total) : 0.0;
}
}  // namespace

std::string stats_line(const RunStats& s) {
  const double seconds = s.prompt_seconds + s.generate_seconds;
  const double rate = s.generate_seconds > 0 ? double(s.tokens) / s.generate_seconds : 0.0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "tokens %zu  seconds %.3f  tok/s %.2f  experts hit %llu (%.1f%%) miss %llu  GB read %.3f",
                s.tokens, seconds, rate, static_cast<unsigned long long>(s.experts.hits), hit_percent(s.experts),
                static_cast<unsigned long long>(s.experts.misses), double(s.experts.bytes_read) / 1e9);
  return buf;
}

nlohmann::json stats_json(const RunStats& s) {
  return nlohmann::json{{"tokens", s.tokens},
                        {"prompt_tokens", s.prompt_tokens},
                        {"prompt_seconds", s.prompt_seconds},
                        {"generate_seconds", s.generate_seconds},
                        {"experts_hit", s.experts.hits},
                        {"experts_missed", s.experts.misses},
                        {"hit_percent", hit_percent(s.experts)},
                        {"bytes_read", s.experts.bytes_read}};
}

int report_error(std::string_view command, const Error& error) { return report_error(command, error.message); }

int report_error(std::string_view command, std::string_view message) {
  std::fprintf(stderr, "waste %.*s: %.*s\n", int(command.size()), command.data(), int(message.size()), message.data());
  return 1;
}

void print_json(const nlohmann::json& doc) {
  // Token pieces may be partial UTF-8; replace rather than throw.
  std::printf("%s\n", doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

}  // namespace waste::cli
