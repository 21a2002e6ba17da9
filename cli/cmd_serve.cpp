// waste serve MODEL: an OpenAI-compatible HTTP server (cli/serve/). The engine is opened with
// open_engine() exactly like `waste run`, so it attaches to the container's waste-ioserver and
// shares its cache; concurrent requests decode as one batch (serve::Scheduler). A container with
// a vision tower (vision.json) takes image_url parts (data: URLs) in user messages.
// SIGTERM/SIGINT: stop admitting (503), let in-flight requests finish within --drain-seconds,
// cancel what is left, exit 0.
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <cstdio>
#include <thread>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "cli/serve/api_key.hpp"
#include "cli/serve/http_server.hpp"
#include "cli/serve/metrics.hpp"
#include "cli/serve/request_limits.hpp"
#include "cli/serve/scheduler.hpp"
#include "compute/vision/media_prompt.hpp"
#include "shared/memory/budget.hpp"

namespace waste::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signal) { g_stop_signal = signal; }

struct ServeArgs {
  EngineArgs engine;
  serve::ServeConfig http;
  serve::SchedulerOptions scheduler;
  std::string alias;
  std::string chat_format;
  double max_body_mib = 4;
  int max_header_kib = 16;
  double drain_seconds = 30;
  std::string api_key_file;
  // Request content limits (serve::RequestLimits; pixels in units of 2^20).
  int max_json_depth = 64;
  int max_image_mpx = 16, max_request_mpx = 32, max_decode_mpx = 64;
  std::string prefix_cache = "auto";  // the prefix cache's bound: "auto", or a size (0 = off)
};

// The automatic prefix cache: an eighth of the RAM budget the open resolved (the expert cache's
// or the daemon's); 256 MiB when the arena was given in records (no budget).
constexpr std::uint64_t kPrefixCacheBudgetShare = 8;
constexpr std::uint64_t kPrefixCacheWithoutBudget = std::uint64_t(256) << 20;

// --prefix-cache: "auto" or a byte size, 0 included (off).
CLI::Validator prefix_cache_size() {
  return CLI::Validator(
      [](std::string& text) {
        if (text != "auto" && !parse_bytes(text)) {
          throw OptionError("--prefix-cache: '" + text + "' is not a size (use e.g. 512M, 2G, or 0 to turn it off)");
        }
        return std::string();
      },
      /*validator_desc=*/"");
}

int serve_main(ServeArgs a) {
  // Before the HTTP server's threads exist: they only read these.
  if (a.max_request_mpx < a.max_image_mpx || a.max_decode_mpx < a.max_request_mpx) {
    return report_error("serve", "the pixel limits must grow: --max-image-mpx <= --max-request-mpx <= --max-decode-mpx");
  }
  serve::RequestLimits limits;
  limits.max_json_depth = a.max_json_depth;
  limits.max_image_pixels = std::uint64_t(a.max_image_mpx) << 20;
  limits.max_request_pixels = std::uint64_t(a.max_request_mpx) << 20;
  limits.max_decoding_pixels = std::uint64_t(a.max_decode_mpx) << 20;
  serve::set_request_limits(limits);
  a.http.model_id = !a.alias.empty() ? a.alias : std::filesystem::path(a.engine.model).stem().string();
  a.http.limits.body_bytes = std::size_t(a.max_body_mib * 1024 * 1024);
  a.http.limits.header_bytes = std::size_t(a.max_header_kib) * 1024;
  a.http.limits.write_seconds = a.http.limits.request_seconds;
  {
    std::string warning;
    auto key = serve::choose_api_key(a.api_key_file, a.http.api_key, warning);
    if (!key) return report_error("serve", key.error());
    if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
    a.http.api_key = std::move(*key);
  }
  if (a.scheduler.parallel >= a.scheduler.prefill_chunk) {
    return report_error("serve", "--parallel must be below " + std::to_string(a.scheduler.prefill_chunk) +
                                     " (the tokens of one pass)");
  }
  // Handlers set a flag the main thread polls; a daemon child started by open_engine() gets
  // default dispositions again at exec.
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that left shows up as a failed write, not a signal

  serve::Metrics metrics;
  serve::HttpServer server(a.http, metrics);
  if (Status started = server.start(); !started) return report_error("serve", started.error());
  std::fprintf(stderr, "waste serve: listening on http://%s:%d (model '%s')\n", a.http.host.c_str(), server.port(),
               a.http.model_id.c_str());

  a.engine.sequences = a.scheduler.parallel;  // the daemon admits every slot's state
  auto engine = open_engine(a.engine);  // meanwhile /health answers 503 "loading model"
  if (!engine) return report_error("serve", engine.error());
  auto tokenizer = load_tokenizer((*engine)->container());
  if (!tokenizer) return report_error("serve", tokenizer.error());
  auto format = load_chat_format(a.engine.model, a.chat_format);
  if (!format) return report_error("serve", format.error());
  a.scheduler.prefill_chunk = std::min(a.scheduler.prefill_chunk, (*engine)->info().prefill_chunk);
  if (a.prefix_cache == "auto") {
    a.scheduler.prefix_cache_bytes =
        engine->budget_bytes > 0 ? engine->budget_bytes / kPrefixCacheBudgetShare : kPrefixCacheWithoutBudget;
  } else {
    a.scheduler.prefix_cache_bytes = *parse_bytes(a.prefix_cache);  // checked by prefix_cache_size()
  }
  // The grammar engine's token index, built once (response_format and forced tool calls use it).
  // The chat stop ids end a constrained answer too, where its grammar accepts.
  std::shared_ptr<const grammar::TokenIndex> token_index;
  {
    std::vector<int> stop_ids;
    if (*format) stop_ids = chat_stop(*tokenizer, **format).ids;
    auto index = grammar::build_token_index(*tokenizer, stop_ids);
    if (index) {
      token_index = std::move(*index);
    } else {
      std::fprintf(stderr, "waste serve: constrained output unavailable: %s\n", index.error().message.c_str());
    }
  }
  // image_url parts need the container's vision tower (vision.json); without one they get 400.
  std::optional<vision::VisionTower> tower;
  serve::ServeVision vision;
  if (std::filesystem::exists(std::filesystem::path(a.engine.model) / "vision.json")) {
    auto loaded = vision::load_media_encoder((*engine)->container(), *tokenizer, (*engine)->config().hidden);
    if (!loaded) return report_error("serve", loaded.error());
    tower.emplace(std::move(loaded->tower));
    vision = {&*tower, loaded->tokens};
  }
  {
    serve::Scheduler scheduler(**engine, *tokenizer, a.scheduler, vision.tower);
    server.ready({&scheduler, &*tokenizer, *format ? &**format : nullptr, token_index, vision});
    const std::string prefix = a.scheduler.prefix_cache_bytes > 0
                                   ? "prefix cache " + format_bytes(a.scheduler.prefix_cache_bytes)
                                   : std::string("no prefix cache");
    std::fprintf(stderr, "waste serve: ready (parallel %d, ctx %d%s%s, %s)\n", a.scheduler.parallel,
                 scheduler.ctx_tokens(), *format ? ", chat template" : ", no chat template",
                 tower ? ", images" : "", prefix.c_str());
    while (g_stop_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));

    std::fprintf(stderr, "waste serve: draining (%d in flight)\n", scheduler.in_flight());
    server.draining();
    scheduler.drain();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.drain_seconds);
    while (scheduler.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const int left = scheduler.in_flight();
    scheduler.stop();  // cancels what the deadline left
    server.stop();     // answers in progress write their last bytes; I/O and prepare threads join
    std::fprintf(stderr, "waste serve: stopped (%d cancelled at the deadline)\n", left);
  }
  return 0;
}

const CommandRegistration kRegistration{Command{
    "serve", "OpenAI-compatible HTTP server; concurrent requests decode as one batch",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<ServeArgs>();
      add_engine_options(sub, args->engine);
      sub.add_option("--host", args->http.host, "Address to bind")->type_name("ADDR");
      sub.add_option("--port", args->http.port, "Port (0 = any free port, printed on stderr)")
          ->type_name("PORT")
          ->check(int_range("--port", 0, 65535));
      sub.add_option("--parallel", args->scheduler.parallel, "Sequences decoded together")
          ->type_name("N")
          ->check(int_range("--parallel", 1, 63));
      sub.add_option("--queue", args->scheduler.max_queue, "Requests waiting beyond which new ones get 429")
          ->type_name("N")
          ->check(int_range("--queue", 0, 4096));
      sub.add_option("--api-key-file", args->api_key_file,
                     "Require Authorization: Bearer KEY on /v1/* and /metrics; KEY is the file's first line")
          ->type_name("FILE")
          ->default_str("none, or $WASTE_API_KEY");
      sub.add_option("--api-key", args->http.api_key,
                     "The key on the command line (warns: other users can read it in /proc/PID/cmdline)")
          ->type_name("KEY")
          ->default_str("none");
      sub.add_flag("--metrics-public", args->http.metrics_public, "With a key: serve /metrics without it");
      sub.add_option("--alias", args->alias, "Model id in /v1/models")->type_name("ID")->default_str("the container's name");
      sub.add_option("--chat-format", args->chat_format, "chat.json to use instead of the container's")
          ->type_name("FILE")
          ->default_str("the container's");
      sub.add_option("--max-body-mib", args->max_body_mib, "Request body cap in MiB (413 beyond)")
          ->type_name("MIB")
          ->check(real_range("--max-body-mib", {0.0, /*open=*/true}, {1024.0}));
      sub.add_option("--max-header-kib", args->max_header_kib, "Request line + header fields cap in KiB (431 beyond)")
          ->type_name("KIB")
          ->check(int_range("--max-header-kib", 1, 1024));
      sub.add_option("--max-headers", args->http.limits.max_headers, "Header fields per request (431 beyond)")
          ->type_name("N")
          ->check(int_range("--max-headers", 1, 10000));
      sub.add_option("--request-timeout,--read-timeout", args->http.limits.request_seconds,
                     "Seconds from a request's first byte to its last (400 or close beyond); also each write's limit")
          ->type_name("SECONDS")
          ->check(int_range("--request-timeout", 1, 3600));
      sub.add_option("--keep-alive", args->http.limits.keep_alive_seconds,
                     "Seconds an idle kept-alive connection waits for its next request")
          ->type_name("SECONDS")
          ->check(int_range("--keep-alive", 1, 3600));
      sub.add_option("--keep-alive-requests", args->http.limits.keep_alive_requests, "Requests per connection")
          ->type_name("N")
          ->check(int_range("--keep-alive-requests", 1, 1000000));
      sub.add_option("--max-connections", args->http.limits.max_connections,
                     "Connections open at once (a new one past it gets 503 and is closed)")
          ->type_name("N")
          ->check(int_range("--max-connections", 1, 100000));
      sub.add_option("--accept-queue", args->http.limits.accept_queue, "Connections waiting to be accepted (listen backlog)")
          ->type_name("N")
          ->check(int_range("--accept-queue", 1, 65535));
      sub.add_option("--http-threads", args->http.limits.io_threads, "I/O threads serving every connection")
          ->type_name("N")
          ->check(int_range("--http-threads", 1, 64));
      sub.add_option("--prepare-threads", args->http.worker_threads,
                     "Threads that parse and prepare admitted generation requests")
          ->type_name("N")
          ->check(int_range("--prepare-threads", 1, 64));
      sub.add_option("--drain-seconds", args->drain_seconds, "On SIGTERM: seconds in-flight requests may take")
          ->type_name("SECONDS")
          ->check(real_range("--drain-seconds", {0.0}, {3600.0}));
      sub.add_option("--max-json-depth", args->max_json_depth,
                     "Nesting of a request body and of each schema in it ($ref hops count); 400 beyond")
          ->type_name("N")
          ->check(int_range("--max-json-depth", 8, 1024));
      sub.add_option("--max-image-mpx", args->max_image_mpx, "Pixels of one image_url image, in units of 2^20; 400 beyond")
          ->type_name("MPX")
          ->check(int_range("--max-image-mpx", 1, 1024));
      sub.add_option("--max-request-mpx", args->max_request_mpx, "Pixels of all images of one request, in 2^20; 400 beyond")
          ->type_name("MPX")
          ->check(int_range("--max-request-mpx", 1, 4096));
      sub.add_option("--max-decode-mpx", args->max_decode_mpx,
                     "Pixels of images being decoded at once, server-wide, in 2^20; 429 beyond")
          ->type_name("MPX")
          ->check(int_range("--max-decode-mpx", 1, 65536));
      sub.add_option("--prefix-cache", args->prefix_cache,
                     "RAM for snapshots of finished prompts and answers, reused by requests that start with "
                     "them (least recently used dropped first; 0 = off)")
          ->type_name("SIZE")
          ->default_str("auto: an eighth of --budget")
          ->transform(prefix_cache_size());
      return [args] { return serve_main(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
