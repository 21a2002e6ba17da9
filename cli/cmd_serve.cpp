// waste serve MODEL | --model PATH[=ID] ...: an OpenAI-compatible HTTP server (cli/serve/). Each
// model's engine is opened with open_engine() exactly like `waste run`, so it attaches to the
// container's waste-ioserver and shares its cache; concurrent requests to a model decode as one
// batch (serve::Scheduler). MODEL is loaded at start and kept; models given with --model are
// loaded when a request names them, under one budget (507 when one would not fit), and unloaded
// after --idle-unload seconds without requests (serve::ModelSet). A container with a vision tower
// (vision.json) takes image_url parts (data: URLs) in user messages.
// SIGTERM/SIGINT: stop admitting (503), let in-flight requests finish within --drain-seconds,
// cancel what is left, exit 0.
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <cstdio>
#include <set>
#include <thread>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "cli/serve/api_key.hpp"
#include "cli/serve/http_server.hpp"
#include "cli/serve/metrics.hpp"
#include "cli/serve/model_budget.hpp"
#include "cli/serve/model_set.hpp"
#include "cli/serve/model_spec.hpp"
#include "cli/serve/request_limits.hpp"
#include "cli/serve/scheduler.hpp"
#include "compute/model/decode_head.hpp"
#include "compute/vision/media_prompt.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/client_sizing.hpp"
#include "shared/memory/machine_ledger.hpp"
#include "shared/memory/ram.hpp"

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
  std::vector<std::string> models;    // --model PATH[=ID], as given
  std::optional<int> idle_unload;     // --idle-unload SECONDS (0 = never)
};

// The automatic prefix cache: an eighth of the RAM budget the open resolved (the expert cache's
// or the daemon's); 256 MiB when the arena was given in records (no budget).
constexpr std::uint64_t kPrefixCacheBudgetShare = 8;
constexpr std::uint64_t kPrefixCacheWithoutBudget = std::uint64_t(256) << 20;
// --idle-unload's default for models given with --model (MODEL is never unloaded unless asked).
constexpr int kDefaultIdleUnloadSeconds = 300;

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

// What a reply may still read after its model is unloaded (ServeModel::hold).
struct ModelAssets {
  Tokenizer tokenizer;
  std::optional<ChatFormat> format;
};

// One loaded model: its engine (and daemon connection), tokenizer and chat format, vision tower,
// and scheduler. Members go in reverse order: the scheduler's engine thread is joined before the
// tower and the engine close.
struct OpenedModel final : serve::LoadedModel {
  OpenedEngine engine;
  std::shared_ptr<ModelAssets> assets;
  std::optional<vision::VisionTower> tower;
  std::shared_ptr<const grammar::TokenIndex> token_index;
  std::optional<serve::Scheduler> scheduler;
};

// Opens one model as `waste run` would (open_engine: its container's daemon, or one started now).
// Under a --budget the models share, the daemon started now gets the decision's `budget_bytes`
// as its own explicit --budget; without one it sizes itself as for `waste run` (automatic, under
// the machine cap, growing for its clients), so other commands on the container attach as always.
Result<std::unique_ptr<serve::LoadedModel>> load_model(const ServeArgs& a, const serve::ModelSpec& spec,
                                                      std::uint64_t budget_bytes) {
  EngineArgs args = a.engine;
  args.model = spec.path.string();
  if (budget_bytes > 0 && !a.engine.budget.empty()) args.budget = std::to_string(budget_bytes);
  args.sequences = a.scheduler.parallel;  // the daemon admits every slot's state
  auto model = std::make_unique<OpenedModel>();
  auto engine = open_engine(args);
  if (!engine) return std::unexpected(engine.error());
  model->engine = std::move(*engine);
  if (model->engine->engram_stats()) {  // DeepSeek-V4.1 with Engram tables: where the rows come from, at load
    std::fprintf(stderr, "waste serve: %s: %s; read-ahead %s\n", spec.path.filename().string().c_str(),
                 model->engine->engram_origin().c_str(), model->engine->engram_readahead() ? "on" : "off");
  }
  auto tokenizer = load_tokenizer(model->engine->container());
  if (!tokenizer) return std::unexpected(tokenizer.error());
  auto format = load_chat_format(spec.path, a.chat_format);
  if (!format) return std::unexpected(format.error());
  model->assets = std::make_shared<ModelAssets>(ModelAssets{std::move(*tokenizer), std::move(*format)});
  const Tokenizer& tok = model->assets->tokenizer;
  const ChatFormat* chat = model->assets->format ? &*model->assets->format : nullptr;
  serve::SchedulerOptions options = a.scheduler;
  options.prefill_chunk = std::min(options.prefill_chunk, model->engine->info().prefill_chunk);
  if (a.prefix_cache == "auto") {
    options.prefix_cache_bytes = model->engine.budget_bytes > 0 ? model->engine.budget_bytes / kPrefixCacheBudgetShare
                                                                : kPrefixCacheWithoutBudget;
  } else {
    options.prefix_cache_bytes = *parse_bytes(a.prefix_cache);  // checked by prefix_cache_size()
  }
  // The grammar engine's token index, built once (response_format and forced tool calls use it).
  // The chat stop ids end a constrained answer too, where its grammar accepts.
  {
    std::vector<int> stop_ids;
    if (chat) stop_ids = chat_stop(tok, *chat).ids;
    auto index = grammar::build_token_index(tok, stop_ids);
    if (index) {
      model->token_index = std::move(*index);
    } else {
      std::fprintf(stderr, "waste serve: constrained output unavailable: %s\n", index.error().message.c_str());
    }
  }
  // image_url parts need the container's vision tower (vision.json); without one they get 400.
  serve::ServeVision vision;
  if (std::filesystem::exists(spec.path / "vision.json")) {
    auto loaded = vision::load_media_encoder(model->engine->container(), tok, model->engine->config().hidden);
    if (!loaded) return std::unexpected(loaded.error());
    model->tower.emplace(std::move(loaded->tower));
    vision = {&*model->tower, loaded->tokens};
  }
  model->scheduler.emplace(*model->engine, tok, options, vision.tower);
  model->serve = {&*model->scheduler, &tok, chat, model->token_index, vision, model->assets};
  const std::string prefix = options.prefix_cache_bytes > 0 ? "prefix cache " + format_bytes(options.prefix_cache_bytes)
                                                            : std::string("no prefix cache");
  model->summary = "parallel " + std::to_string(options.parallel) + ", ctx " +
                   std::to_string(model->scheduler->ctx_tokens()) + (chat ? ", chat template" : ", no chat template") +
                   (model->tower ? ", images" : "") + ", " + prefix;
  return std::unique_ptr<serve::LoadedModel>(std::move(model));
}

// --model: the models, each with its footprint from its memory plan (read now: a container that
// does not open stops the command before it listens).
Result<std::vector<serve::ModelConfig>> model_configs(const ServeArgs& a) {
  auto specs = serve::expand_model_specs(a.models);
  if (!specs) return std::unexpected(specs.error());
  std::vector<serve::ModelConfig> out;
  for (serve::ModelSpec& spec : *specs) {
    auto container = read_container(spec.path);
    if (!container) return std::unexpected(container.error());
    auto plan = plan_memory((*container)->manifest, std::uint32_t(a.engine.ctx), a.engine.prefill_chunk);
    if (!plan) return std::unexpected(plan.error());
    auto daemon_plan = plan_memory((*container)->manifest);
    if (!daemon_plan) return std::unexpected(daemon_plan.error());
    serve::ModelFootprint footprint = serve::model_footprint(*plan, *daemon_plan, a.scheduler.parallel, a.engine.ctx,
                                                             model::decode_head_copy_bytes((*container)->manifest));
    out.push_back({std::move(spec), footprint});
  }
  return out;
}

// --model's budget: --budget, or the machine cap (what every daemon of this user shares; other
// daemons' budgets are taken off it at each decision). nullopt when the machine cannot say.
std::optional<serve::ServerBudget> server_budget(const ServeArgs& a) {
  if (!a.engine.budget.empty()) return serve::ServerBudget{*parse_bytes(a.engine.budget), "--budget " + a.engine.budget};
  const UsableRam ram = usable_ram();
  if (ram.cap_bytes == 0) return std::nullopt;
  return serve::ServerBudget{ram.cap_bytes, "the machine cap: 3/4 of usable RAM " + format_bytes(ram.usable_bytes)};
}

// What the waste-ioserver daemons of other containers hold (the machine ledger); this server's
// own containers are counted by the set, whoever started their daemons.
std::function<std::uint64_t()> others_in_ledger(const std::vector<serve::ModelConfig>& models) {
  std::set<std::filesystem::path> ours;
  for (const serve::ModelConfig& m : models) {
    std::error_code ec;
    std::filesystem::path canonical = std::filesystem::canonical(m.spec.path, ec);
    ours.insert(ec ? m.spec.path : canonical);
  }
  return [ours = std::move(ours)] {
    auto entries = MachineLedger(ipc::machine_ledger_path()).entries();
    if (!entries) return std::uint64_t(0);
    std::uint64_t held = 0;
    for (const MachineLedgerEntry& e : *entries) {
      if (!ours.contains(std::filesystem::path(e.model))) held += e.budget_bytes;
    }
    return held;
  };
}

int serve_main(ServeArgs a) {
  // Before the HTTP server's threads exist: they only read these.
  if (a.max_request_mpx < a.max_image_mpx || a.max_decode_mpx < a.max_request_mpx) {
    return report_error("serve", "the pixel limits must grow: --max-image-mpx <= --max-request-mpx <= --max-decode-mpx");
  }
  const bool several = !a.models.empty();
  if (several && !a.engine.model.empty()) {
    return report_error("serve", "give the model either as MODEL or with --model, not both");
  }
  if (!several && a.engine.model.empty()) {
    return report_error("serve", "a model is required: MODEL, or --model PATH[=ID] (repeatable)");
  }
  if (several && !a.alias.empty()) {
    return report_error("serve", "--alias names the MODEL argument's model; with --model give PATH=ID");
  }
  serve::RequestLimits limits;
  limits.max_json_depth = a.max_json_depth;
  limits.max_image_pixels = std::uint64_t(a.max_image_mpx) << 20;
  limits.max_request_pixels = std::uint64_t(a.max_request_mpx) << 20;
  limits.max_decoding_pixels = std::uint64_t(a.max_decode_mpx) << 20;
  serve::set_request_limits(limits);
  a.http.several_models = several;
  if (!several) a.http.model_id = !a.alias.empty() ? a.alias : std::filesystem::path(a.engine.model).stem().string();
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
  a.engine.prefill_chunk = a.scheduler.prefill_chunk;
  if (a.scheduler.parallel >= a.scheduler.prefill_chunk) {
    return report_error("serve", "--parallel must be below " + std::to_string(a.scheduler.prefill_chunk) +
                                     " (the tokens of one pass)");
  }
  if (Status st = check_cache_records(a.engine); !st) return report_error("serve", st.error());

  // The models: MODEL alone, loaded before the server is ready and kept (unless --idle-unload);
  // or --model's, loaded on first use under one budget.
  std::vector<serve::ModelConfig> configs;
  serve::ModelSetOptions set_options;
  set_options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  if (several) {
    auto expanded = model_configs(a);
    if (!expanded) return report_error("serve", expanded.error());
    configs = std::move(*expanded);
    if (configs.size() > 1 && !a.chat_format.empty()) {
      return report_error("serve", "--chat-format applies to one model; with several, each container's chat.json is used");
    }
    set_options.budget = server_budget(a);
    if (set_options.budget) {
      for (const serve::ModelConfig& c : configs) {
        if (c.footprint.floor_bytes > set_options.budget->bytes) {
          std::fprintf(stderr, "waste serve: warning: model '%s' needs %s, more than the budget %s (%s): requests for it "
                               "will get 507\n",
                       c.spec.id.c_str(), format_bytes(c.footprint.floor_bytes).c_str(),
                       format_bytes(set_options.budget->bytes).c_str(), set_options.budget->source.c_str());
        }
      }
    }
    if (a.engine.budget.empty()) set_options.others_bytes = others_in_ledger(configs);
    set_options.idle_unload = std::chrono::seconds(a.idle_unload.value_or(kDefaultIdleUnloadSeconds));
  } else {
    configs.push_back({serve::ModelSpec{a.engine.model, a.http.model_id}, {}});
    set_options.idle_unload = std::chrono::seconds(a.idle_unload.value_or(0));
  }
  std::string ids;
  for (const serve::ModelConfig& c : configs) ids += (ids.empty() ? "'" : ", '") + c.spec.id + "'";
  serve::ModelSet models(std::move(configs), std::move(set_options),
                         [&a](const serve::ModelSpec& spec, std::uint64_t budget_bytes) {
                           return load_model(a, spec, budget_bytes);
                         });

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
  std::fprintf(stderr, "waste serve: listening on http://%s:%d (%s %s)\n", a.http.host.c_str(), server.port(),
               several && models.ids().size() > 1 ? "models" : "model", ids.c_str());

  if (!several) {
    // Meanwhile /health answers 503 "loading model".
    if (Status loaded = models.load_now(a.http.model_id); !loaded) return report_error("serve", loaded.error());
    server.ready(models);
    std::fprintf(stderr, "waste serve: ready (%s)\n", models.summary(a.http.model_id).c_str());
  } else {
    server.ready(models);
    const std::optional<serve::ServerBudget>& budget = models.options().budget;
    const std::string budget_text = budget ? "budget " + format_bytes(budget->bytes) + " from " + budget->source
                                           : std::string("no budget: the machine's RAM is unknown");
    const int idle = a.idle_unload.value_or(kDefaultIdleUnloadSeconds);
    std::fprintf(stderr, "waste serve: ready (%zu %s, loaded on first use; parallel %d, ctx %d; %s; idle unload %s)\n",
                 models.ids().size(), models.ids().size() == 1 ? "model" : "models", a.scheduler.parallel, a.engine.ctx,
                 budget_text.c_str(), idle > 0 ? (std::to_string(idle) + " s").c_str() : "never");
  }
  while (g_stop_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));

  std::fprintf(stderr, "waste serve: draining (%d in flight)\n", models.in_flight());
  server.draining();
  models.drain();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.drain_seconds);
  while (models.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int left = models.in_flight();
  models.stop();
  models.cancel();  // cancels what the deadline left
  server.stop();    // answers in progress write their last bytes; I/O and prepare threads join
  std::fprintf(stderr, "waste serve: stopped (%d cancelled at the deadline)\n", left);
  return 0;  // the models unload here (schedulers, then engines and their daemon leases)
}

const CommandRegistration kRegistration{Command{
    "serve", "OpenAI-compatible HTTP server; concurrent requests decode as one batch",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<ServeArgs>();
      add_engine_options(sub, args->engine);
      // MODEL, or --model (several); serve_main says which is missing or that both were given.
      sub.get_option("model")->required(false)->default_str("none")->description("Container directory (NAME.waste); not with --model");
      sub.add_option("--model", args->models,
                     "A model to serve under ID (default: the folder's name without .waste), loaded when a request "
                     "names it; repeatable. A directory of containers serves each of them. With several models "
                     "--budget is what they share")
          ->type_name("PATH[=ID]")
          ->default_str("none")
          ->allow_extra_args(false);
      sub.add_option("--idle-unload", args->idle_unload,
                     "Unload a model after this many seconds without requests (0 = never); it loads again on the "
                     "next request")
          ->type_name("SECONDS")
          ->default_str("300 with --model, 0 for MODEL")
          ->check(int_range("--idle-unload", 0, 31'536'000));
      sub.add_option("--host", args->http.host, "Address to bind")->type_name("ADDR");
      sub.add_option("--port", args->http.port, "Port (0 = any free port, printed on stderr)")
          ->type_name("PORT")
          ->check(int_range("--port", 0, 65535));
      sub.add_option("--parallel", args->scheduler.parallel, "Sequences decoded together")
          ->type_name("N")
          ->check(int_range("--parallel", 1, 63));
      sub.add_option("--prefill-chunk", args->scheduler.prefill_chunk,
                     "Tokens one pass carries: a token for each decoding request plus prompt tokens up to this; "
                     "the engine's scratch is sized for it (waste plan --prefill-chunk)")
          ->type_name("TOKENS")
          ->check(int_range("--prefill-chunk", 2, sizing::kMaxPrefillChunk));
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
