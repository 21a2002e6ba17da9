// Helpers the `waste` subcommands share: the engine options every model command takes and how
// they become the one open (compute/api/engine_open.hpp), the tokenizer and chat format
// of a container, --ids parsing, the stats line, JSON output. Commands stay pure clients of the
// public C++ API; nothing here reaches into engine internals.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "compute/api/engine.hpp"
#include "compute/api/engine_open.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "shared/result.hpp"

namespace waste::cli {

// Options of every command that opens a model.
struct EngineArgs {
  std::string model;
  std::string budget;              // "" = automatic (§4.2); else "8G", "500M", ...
  int ctx = 4096;
  int threads = 0;
  bool verify = false;
  bool no_direct_io = false;
  std::optional<std::size_t> cache_records;  // with --in-process: the private arena's slots (else an error)
  bool in_process = false;         // --in-process: the daemon's data plane inside this process (no daemon)
  int linger_ms = -1;              // --linger: a daemon this command starts stays this long after its last client
  int sequences = 1;               // sequences held at once (serve: --parallel), declared to the daemon
  int prefill_chunk = 64;          // tokens one pass may carry (serve: --prefill-chunk); the scratch is sized for it
  [[nodiscard]] bool use_daemon() const { return !in_process; }
};

// Adds model (positional), --budget, --ctx, --threads, --verify, --no-direct-io,
// --cache-records, --in-process.
void add_engine_options(CLI::App& sub, EngineArgs& args);

// --temp, --top-p, --top-k, --seed.
struct SamplingArgs {
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  std::uint64_t seed = 0;
  [[nodiscard]] SamplingParams params() const { return SamplingParams{temperature, top_p, top_k, seed}; }
};
void add_sampling_options(CLI::App& sub, SamplingArgs& args);

// Open the engine (compute/api/engine_open.hpp's open_engine, from these options). By default
// through waste-ioserver: the daemon serving this container if one runs, else the container's
// shareable one, started now (with --budget/--verify/--no-direct-io) and exiting by itself
// `--linger` after its last client -- any number of commands share it. --in-process runs the
// daemon's data plane (a private IoServer) in this process, its arena sized by --cache-records
// or the budget. --cache-records without --in-process is refused. Warns on stderr when the
// budget is above what the machine holds, and when a shared daemon's options win over these.
// `container`: the container's description when the command read it already (for its
// tokenizer); null = read by the open.
Result<OpenedEngine> open_engine(const EngineArgs& args, std::shared_ptr<const ContainerInfo> container = nullptr);

// The request open_engine makes (`waste bench` adds its tuning and tracing hook to it).
OpenRequest open_request(const EngineArgs& args, std::shared_ptr<const ContainerInfo> container = nullptr);

// Errc::argument when --cache-records is given without --in-process (it sizes the in-process
// arena; a daemon's arena comes from its --budget).
Status check_cache_records(const EngineArgs& args);

// "waste: warning: budget B is above what this machine can hold; expect paging" when it is.
void warn_above_cap(const InProcessCache& cache);

// The container's tokenizer with config.eos_token_id applied (reference §5.2), from its
// description (read once: Engine::container(), read_container) or from the directory.
Result<Tokenizer> load_tokenizer(const ContainerInfo& container);
Result<Tokenizer> load_tokenizer(const std::filesystem::path& model);
// --chat-format FILE if given, else the container's chat.json; nullopt when neither exists.
Result<std::optional<ChatFormat>> load_chat_format(const std::filesystem::path& model, const std::string& file);

// "1,2,3", "1 2 3" or one per line. Error names the bad piece.
Result<std::vector<int>> parse_ids(std::string_view text);
std::string join_ids(std::span<const int> ids, char sep = ' ');
// Whole file, or stdin for "-".
Result<std::string> read_text(const std::string& path);

// Counters of one run, for the stats line and --json.
struct RunStats {
  std::size_t tokens = 0;          // generated tokens
  int prompt_tokens = 0;
  double prompt_seconds = 0;
  double generate_seconds = 0;
  ExpertSourceStats experts;
};
// "tokens N  seconds S  tok/s R  experts hit H (P%) miss M  GB read G"
std::string stats_line(const RunStats& stats);
nlohmann::json stats_json(const RunStats& stats);

// Print "waste CMD: MESSAGE" on stderr; returns 1.
int report_error(std::string_view command, const Error& error);
int report_error(std::string_view command, std::string_view message);

// Print one JSON document (pretty, newline-terminated) on stdout.
void print_json(const nlohmann::json& doc);

}  // namespace waste::cli
