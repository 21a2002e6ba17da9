// The C API (waste.h) over the C++ engine: each entry point checks its pointers, calls the
// same library functions the CLI's commands call (compute/api/engine_open.hpp for opening,
// compute/sampling/token_nll.hpp for eval), and turns an Error or an exception into a
// waste_status plus this thread's message. Nothing throws across the ABI.
#include "compute/capi/waste.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "compute/api/engine.hpp"
#include "compute/api/engine_open.hpp"
#include "compute/io/daemon_connect.hpp"
#include "compute/prompt/constraint_builder.hpp"
#include "compute/prompt/grammar_generate.hpp"
#include "compute/prompt/tool_call_parser.hpp"
#include "compute/prompt/tool_spec.hpp"
#include "compute/sampling/token_nll.hpp"
#include "compute/session/session_file.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "shared/container/container.hpp"
#include "shared/runtime_paths.hpp"

#ifndef WASTE_VERSION
#define WASTE_VERSION "0.0.0"
#endif

struct waste_model {
  std::unique_ptr<waste::Engine> engine;
  std::filesystem::path path;
  std::optional<waste::Tokenizer> tokenizer;   // none: the container has no tokenizer.model
  std::optional<waste::ChatFormat> chat;       // the container's chat.json
  std::atomic<bool> cancel{false};             // writer: waste_cancel (any thread); reader: the generate loop
  int last_tokens = 0;
  double last_generate_seconds = 0;
};

namespace {

using waste::Errc;
using waste::Error;

thread_local std::string t_last_error;

waste_status to_status(Errc code) {
  switch (code) {
    case Errc::io: return WASTE_ERR_IO;
    case Errc::format: return WASTE_ERR_FORMAT;
    case Errc::ram_budget: return WASTE_ERR_RAM_BUDGET;
    case Errc::out_of_memory: return WASTE_ERR_MEMORY;
    case Errc::argument: return WASTE_ERR_ARGUMENT;
    case Errc::unsupported: return WASTE_ERR_UNSUPPORTED;
    case Errc::cancelled: return WASTE_ERR_CANCELLED;
    case Errc::ipc: return WASTE_ERR_IPC;
  }
  return WASTE_ERR_INTERNAL;
}

waste_status fail(waste_status status, std::string message) {
  t_last_error = std::move(message);
  return status;
}
waste_status fail(const Error& error) { return fail(to_status(error.code), error.message); }

// Runs `body` (returning waste_status), turning exceptions into statuses: none crosses the C ABI.
template <class F>
waste_status guarded(const char* function, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(WASTE_ERR_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(WASTE_ERR_INTERNAL, std::string(function) + ": " + e.what());
  } catch (...) {
    return fail(WASTE_ERR_INTERNAL, std::string(function) + ": unknown exception");
  }
}

// A waste_free()-able copy (malloc, so waste_free is free()). n == 0 gives NULL.
template <class T>
T* c_array(const std::vector<T>& v) {
  if (v.empty()) return nullptr;
  auto* out = static_cast<T*>(std::malloc(v.size() * sizeof(T)));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, v.data(), v.size() * sizeof(T));
  return out;
}
char* c_string(const std::string& s) {
  auto* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

void copy_field(char* dst, std::size_t cap, const std::string& src) {
  const std::size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

// A struct of at least the size this library knows; an older caller's smaller struct is refused
// until a later version learns to fill its prefix.
template <class T>
bool sized(const T* p) {
  return p != nullptr && p->struct_size >= sizeof(T);
}

waste_status need_tokenizer(const waste_model* m) {
  if (m->tokenizer) return WASTE_OK;
  return fail(WASTE_ERR_UNSUPPORTED, m->path.string() + ": the container has no tokenizer.model (use token ids)");
}

std::vector<int> to_ints(const int32_t* ids, std::size_t n) { return std::vector<int>(ids, ids + n); }

// The container's tokenizer with config.eos_token_id applied (reference §5.2), as `waste run`.
// From the description the engine was opened with (read once).
waste::Status load_text_side(waste_model& m) {
  const waste::ContainerInfo& info = m.engine->container();
  if (info.has_tokenizer) {
    auto tok = waste::Tokenizer::load(m.path);
    if (!tok) return std::unexpected(tok.error());
    if (info.manifest.config.eos_token_id > 0) tok->set_eos_ids(info.manifest.config.eos_token_ids);
    m.tokenizer.emplace(std::move(*tok));
  }
  auto chat = waste::ChatFormat::load_from_container(m.path);
  if (!chat) return std::unexpected(chat.error());
  m.chat = std::move(*chat);
  return waste::ok();
}

// In-process arena slots: cache_records, else what the budget (given or automatic) leaves.
// A file, or a bare name ("chatml") of one of the installed formats: share/waste/chat/NAME.json.
waste::Result<waste::ChatFormat> chat_format_for(const waste_model* m, const char* format_path) {
  if (format_path != nullptr) {
    const std::string name = format_path;
    std::error_code ec;
    if (!name.empty() && name.find('/') == std::string::npos && !std::filesystem::exists(name, ec)) {
      if (auto dir = waste::find_data_subdir("chat"); dir && std::filesystem::is_regular_file(*dir / (name + ".json"), ec)) {
        return waste::ChatFormat::load(*dir / (name + ".json"));
      }
    }
    return waste::ChatFormat::load(format_path);
  }
  if (!m->chat) {
    return waste::make_error(Errc::unsupported, m->path.string() + ": the container has no chat.json (pass a format file)");
  }
  return *m->chat;
}

waste::Result<waste::ChatRole> to_role(int32_t role, std::size_t index) {
  switch (role) {
    case WASTE_ROLE_SYSTEM: return waste::ChatRole::system;
    case WASTE_ROLE_USER: return waste::ChatRole::user;
    case WASTE_ROLE_ASSISTANT: return waste::ChatRole::assistant;
    case WASTE_ROLE_TOOL: return waste::ChatRole::tool;
    default: break;
  }
  return waste::make_error(Errc::argument, "messages[" + std::to_string(index) + "].role " + std::to_string(role) +
                                               " is not a waste_role (0..3)");
}

// The engine logs through spdlog's default logger, whose built-in one writes to stdout: a host's
// stdout is its own (the examples stream tokens there). As the CLI does (cli/main.cpp): stderr,
// warnings and up, $SPDLOG_LEVEL honoured. A host that installed its own default logger (named)
// keeps it.
void configure_logging_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!spdlog::default_logger()->name().empty()) return;
    if (!spdlog::get("waste")) spdlog::set_default_logger(spdlog::stderr_color_mt("waste"));
    spdlog::set_level(spdlog::level::warn);
    spdlog::cfg::load_env_levels();
  });
}

#define WASTE_NEED(cond, message) \
  do {                            \
    if (!(cond)) return fail(WASTE_ERR_ARGUMENT, message); \
  } while (0)

const char* const kNoToolMarkup = "the chat format has no tool-call markup (a \"tools\" object in chat.json)";

// The C tools as the room's ToolDefs; errors name the entry point and the tool's field.
waste::Result<std::vector<waste::ToolDef>> to_tools(const std::string& fn, const waste_tool* tools, std::size_t n) {
  std::vector<waste::ToolDef> out;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string p = fn + ": tools[" + std::to_string(i) + "]";
    const waste_tool& t = tools[i];
    if (t.name == nullptr || !waste::valid_tool_name(t.name)) {
      return waste::make_error(Errc::argument,
                               p + ".name must be a string of 1 to 64 characters from a-z, A-Z, 0-9, _ and -");
    }
    waste::ToolDef tool;
    tool.name = t.name;
    for (const waste::ToolDef& seen : out) {
      if (seen.name == tool.name) return waste::make_error(Errc::argument, p + ".name \"" + tool.name + "\" is declared twice");
    }
    if (t.description != nullptr) tool.description = std::string(t.description);
    tool.parameters = nlohmann::json{{"type", "object"}, {"properties", nlohmann::json::object()}};
    if (t.parameters != nullptr) {
      try {
        tool.parameters = nlohmann::json::parse(t.parameters);
      } catch (const nlohmann::json::exception& e) {
        return waste::make_error(Errc::format, p + ".parameters: not valid JSON: " + e.what());
      }
      if (!tool.parameters.is_object()) {
        return waste::make_error(Errc::argument, p + ".parameters must be a JSON Schema object");
      }
    }
    out.push_back(std::move(tool));
  }
  return out;
}

// waste_generate_params (NULL = defaults) checked and converted; messages begin with `fn`.
waste_status to_generate_params(const std::string& fn, const waste_generate_params* params, waste::GenerateParams& g) {
  waste_generate_params p;
  waste_generate_params_init(&p);
  if (params != nullptr) {
    WASTE_NEED(sized(params), fn + ": params.struct_size " + std::to_string(params->struct_size) +
                                  " is not sizeof(waste_generate_params) (call waste_generate_params_init)");
    p = *params;
  }
  WASTE_NEED(p.stop_tokens != nullptr || p.n_stop_tokens == 0, fn + ": params.stop_tokens is NULL");
  WASTE_NEED(p.temperature >= 0.0f, fn + ": params.temperature must be 0 or more");
  WASTE_NEED(p.top_p > 0.0f && p.top_p <= 1.0f, fn + ": params.top_p must be in (0, 1]");
  WASTE_NEED(p.top_k >= 0, fn + ": params.top_k must be 0 or more");
  g.max_tokens = p.max_tokens;
  g.sampling = waste::SamplingParams{p.temperature, p.top_p, p.top_k, p.seed};
  g.stop_tokens = to_ints(p.stop_tokens, p.n_stop_tokens);
  if (p.ignore_eos) g.eos_token = -2;
  return WASTE_OK;
}

void fill_result(waste_model* m, const waste::GenerateResult& out, waste_generate_result* result) {
  m->last_tokens = int(out.tokens.size());
  m->last_generate_seconds = out.generate_seconds;
  if (result != nullptr) {
    result->n_tokens = int32_t(out.tokens.size());
    result->stop_reason = int32_t(out.stop);
    result->prompt_tokens = out.prompt_tokens;
    result->prompt_seconds = out.prompt_seconds;
    result->generate_seconds = out.generate_seconds;
  }
}

// waste_chat_apply and waste_chat_apply_tools (`fn` names the entry point in messages).
waste_status chat_apply(const std::string& fn, const waste_model* m, const char* format_path,
                        const waste_chat_message* messages, size_t n_messages, const waste_tool* tools, size_t n_tools,
                        int32_t open_model_turn, char** text, size_t* text_len, int32_t** ids, size_t* n_ids) {
  return guarded(fn.c_str(), [&]() -> waste_status {
    WASTE_NEED(m != nullptr, fn + ": model is NULL");
    if (text != nullptr) *text = nullptr;
    if (text_len != nullptr) *text_len = 0;
    if (ids != nullptr) *ids = nullptr;
    if (n_ids != nullptr) *n_ids = 0;
    WASTE_NEED(messages != nullptr || n_messages == 0, fn + ": messages is NULL");
    WASTE_NEED((ids == nullptr) == (n_ids == nullptr), fn + ": give both ids and n_ids, or neither");
    auto format = chat_format_for(m, format_path);
    if (!format) return fail(format.error());
    std::string tools_json;
    if (n_tools > 0) {
      WASTE_NEED(tools != nullptr, fn + ": tools is NULL");
      if (!format->tools) return fail(WASTE_ERR_UNSUPPORTED, fn + ": " + kNoToolMarkup);
      auto defs = to_tools(fn, tools, n_tools);
      if (!defs) return fail(defs.error());
      tools_json = waste::declare_tools(*defs);
    }
    std::vector<waste::ChatMessage> list;
    for (std::size_t i = 0; i < n_messages; ++i) {
      auto role = to_role(messages[i].role, i);
      if (!role) return fail(role.error());
      WASTE_NEED(messages[i].content != nullptr, fn + ": messages[" + std::to_string(i) + "].content is NULL");
      waste::ChatMessage message;
      message.role = *role;
      message.content = messages[i].content;
      list.push_back(std::move(message));
    }
    if (text != nullptr) {
      std::string rendered;
      for (const auto& seg : waste::render_chat(*format, list, tools_json, open_model_turn != 0)) rendered += seg.text;
      *text = c_string(rendered);
      if (text_len != nullptr) *text_len = rendered.size();
    }
    if (ids != nullptr) {
      if (waste_status s = need_tokenizer(m); s != WASTE_OK) return s;
      const std::vector<int> prompt = waste::build_chat_prompt(*m->tokenizer, *format, list, open_model_turn != 0, tools_json);
      const std::vector<int32_t> copy(prompt.begin(), prompt.end());
      *ids = c_array(copy);
      *n_ids = copy.size();
    }
    return WASTE_OK;
  });
}

// What every waste_generate* does per generated token: hand the caller its id and text (the model's
// tokenizer decodes it; none: empty text), then go on unless the callback or waste_cancel said stop.
std::function<bool(int)> token_relay(waste_model* m, waste_token_callback callback, void* user) {
  return [m, callback, user](int token) {
    if (callback != nullptr) {
      const std::string piece = m->tokenizer ? m->tokenizer->decode_token(token) : std::string();
      if (callback(user, token, piece.data(), piece.size()) != 0) return false;
    }
    return !m->cancel.load(std::memory_order_acquire);
  };
}

}  // namespace

extern "C" {

const char* waste_last_error(void) { return t_last_error.c_str(); }

const char* waste_status_name(waste_status status) {
  switch (status) {
    case WASTE_OK: return "ok";
    case WASTE_ERR_ARGUMENT: return "argument";
    case WASTE_ERR_IO: return "io";
    case WASTE_ERR_FORMAT: return "format";
    case WASTE_ERR_RAM_BUDGET: return "ram_budget";
    case WASTE_ERR_MEMORY: return "out_of_memory";
    case WASTE_ERR_UNSUPPORTED: return "unsupported";
    case WASTE_ERR_CANCELLED: return "cancelled";
    case WASTE_ERR_IPC: return "ipc";
    case WASTE_ERR_INTERNAL: return "internal";
  }
  return "unknown";
}

const char* waste_version(void) { return WASTE_VERSION; }

void waste_free(void* ptr) { std::free(ptr); }

void waste_open_options_init(waste_open_options* o) {
  if (o == nullptr) return;
  *o = waste_open_options{};
  o->struct_size = sizeof(waste_open_options);
  o->mode = WASTE_OPEN_DAEMON;
  o->ctx_tokens = 4096;
  o->threads = 0;
  o->budget = nullptr;
  o->verify = 0;
  o->direct_io = 1;
  o->linger_ms = -1;
  o->allow_spawn = 1;
  o->cache_records = -1;
}

waste_status waste_open(const char* path, const waste_open_options* options, waste_model** out) {
  return guarded("waste_open", [&]() -> waste_status {
    configure_logging_once();
    WASTE_NEED(out != nullptr, "waste_open: out is NULL");
    *out = nullptr;
    WASTE_NEED(path != nullptr, "waste_open: path is NULL");
    waste_open_options o;
    waste_open_options_init(&o);
    if (options != nullptr) {
      WASTE_NEED(sized(options), "waste_open: options.struct_size " + std::to_string(options->struct_size) +
                                     " is not sizeof(waste_open_options) (call waste_open_options_init)");
      o = *options;
    }
    WASTE_NEED(o.mode == WASTE_OPEN_DAEMON || o.mode == WASTE_OPEN_IN_PROCESS,
               "waste_open: options.mode " + std::to_string(o.mode) + " is not a waste_open_mode");
    WASTE_NEED(o.ctx_tokens >= 1, "waste_open: options.ctx_tokens " + std::to_string(o.ctx_tokens) + " must be 1 or more");
    WASTE_NEED(o.threads >= 0, "waste_open: options.threads " + std::to_string(o.threads) + " must be 0 or more");
    WASTE_NEED(o.mode == WASTE_OPEN_IN_PROCESS || o.cache_records < 0,
               "waste_open: options.cache_records sizes the in-process cache; with a daemon use options.budget");

    auto model = std::make_unique<waste_model>();
    model->path = path;
    // As `waste run`: the daemon serving the container, or its shareable one started now; or
    // the in-process plane with the arena cache_records or the budget gives.
    waste::OpenRequest r;
    r.engine.model = path;
    r.engine.threads = o.threads;
    r.engine.ctx_tokens = o.ctx_tokens;
    r.engine.verify_records = o.verify != 0;
    r.engine.direct_io = o.direct_io != 0;
    r.in_process = o.mode == WASTE_OPEN_IN_PROCESS;
    r.budget = o.budget != nullptr ? o.budget : "";
    if (o.cache_records >= 0) r.cache_records = std::uint64_t(o.cache_records);
    r.linger_ms = o.linger_ms;
    r.allow_spawn = o.allow_spawn != 0;
    auto opened = waste::open_engine(r);
    if (!opened) return fail(opened.error());
    model->engine = std::move(opened->engine);
    if (auto text = load_text_side(*model); !text) return fail(text.error());
    *out = model.release();
    return WASTE_OK;
  });
}

void waste_close(waste_model* model) {
  // The engine's destructor detaches from the daemon; it does not throw.
  delete model;
}

void waste_model_info_init(waste_model_info* info) {
  if (info == nullptr) return;
  *info = waste_model_info{};
  info->struct_size = sizeof(waste_model_info);
}

waste_status waste_get_model_info(const waste_model* m, waste_model_info* info) {
  return guarded("waste_get_model_info", [&]() -> waste_status {
    WASTE_NEED(m != nullptr, "waste_get_model_info: model is NULL");
    WASTE_NEED(sized(info), "waste_get_model_info: info is NULL or not initialized (waste_model_info_init)");
    const waste::ModelInfo mi = m->engine->info();
    copy_field(info->arch, sizeof info->arch, mi.arch);
    copy_field(info->expert_format, sizeof info->expert_format, mi.expert_format);
    copy_field(info->kernel_isa, sizeof info->kernel_isa, mi.kernel_isa);
    info->n_layers = mi.n_layers;
    info->n_moe_layers = mi.n_moe_layers;
    info->hidden = mi.hidden;
    info->vocab = mi.vocab;
    info->n_experts = mi.n_experts;
    info->top_k = mi.top_k;
    info->ctx_tokens = mi.ctx_tokens;
    info->threads = mi.threads;
    info->position = m->engine->position();
    info->has_tokenizer = m->tokenizer ? 1 : 0;
    info->has_chat_format = m->chat && m->chat->present() ? 1 : 0;
    info->bos = m->tokenizer ? m->tokenizer->bos() : -1;
    info->eos = m->tokenizer ? m->tokenizer->eos() : -1;
    const waste::DaemonConnection* d = m->engine->daemon();
    info->daemon_pid = d != nullptr ? d->daemon().pid : 0;
    info->daemon_spawned = d != nullptr && d->spawned() ? 1 : 0;
    info->record_bytes = mi.record_bytes;
    return WASTE_OK;
  });
}

waste_status waste_tokenize(const waste_model* m, const char* text, size_t len, uint32_t flags, int32_t** ids,
                            size_t* n_ids) {
  return guarded("waste_tokenize", [&]() -> waste_status {
    WASTE_NEED(m != nullptr, "waste_tokenize: model is NULL");
    WASTE_NEED(ids != nullptr && n_ids != nullptr, "waste_tokenize: ids or n_ids is NULL");
    *ids = nullptr;
    *n_ids = 0;
    WASTE_NEED(text != nullptr || len == 0, "waste_tokenize: text is NULL");
    WASTE_NEED((flags & ~(WASTE_TOKENIZE_BOS | WASTE_TOKENIZE_MARKUP)) == 0,
               "waste_tokenize: flags " + std::to_string(flags) + " has unknown bits");
    if (waste_status s = need_tokenizer(m); s != WASTE_OK) return s;
    std::vector<int> out;
    if (flags & WASTE_TOKENIZE_BOS) out.push_back(m->tokenizer->bos());
    const std::string_view view(text == nullptr ? "" : text, len);
    if (flags & WASTE_TOKENIZE_MARKUP) {
      m->tokenizer->encode_markup(view, out);
    } else {
      m->tokenizer->encode(view, out);
    }
    const std::vector<int32_t> copy(out.begin(), out.end());
    *ids = c_array(copy);
    *n_ids = copy.size();
    return WASTE_OK;
  });
}

waste_status waste_detokenize(const waste_model* m, const int32_t* ids, size_t n_ids, char** text, size_t* len) {
  return guarded("waste_detokenize", [&]() -> waste_status {
    WASTE_NEED(m != nullptr, "waste_detokenize: model is NULL");
    WASTE_NEED(text != nullptr, "waste_detokenize: text is NULL");
    *text = nullptr;
    if (len != nullptr) *len = 0;
    WASTE_NEED(ids != nullptr || n_ids == 0, "waste_detokenize: ids is NULL");
    if (waste_status s = need_tokenizer(m); s != WASTE_OK) return s;
    for (std::size_t i = 0; i < n_ids; ++i) {
      WASTE_NEED(m->tokenizer->valid_id(ids[i]), "waste_detokenize: ids[" + std::to_string(i) + "] = " +
                                                     std::to_string(ids[i]) + " is not a token of the vocabulary");
    }
    const std::string bytes = m->tokenizer->decode(to_ints(ids, n_ids));
    *text = c_string(bytes);
    if (len != nullptr) *len = bytes.size();
    return WASTE_OK;
  });
}

waste_status waste_chat_apply(const waste_model* m, const char* format_path, const waste_chat_message* messages,
                              size_t n_messages, int32_t open_model_turn, char** text, size_t* text_len,
                              int32_t** ids, size_t* n_ids) {
  return chat_apply("waste_chat_apply", m, format_path, messages, n_messages, nullptr, 0, open_model_turn, text,
                    text_len, ids, n_ids);
}

waste_status waste_chat_stop_tokens(const waste_model* m, const char* format_path, int32_t** ids, size_t* n_ids) {
  return guarded("waste_chat_stop_tokens", [&]() -> waste_status {
    WASTE_NEED(m != nullptr, "waste_chat_stop_tokens: model is NULL");
    WASTE_NEED(ids != nullptr && n_ids != nullptr, "waste_chat_stop_tokens: ids or n_ids is NULL");
    *ids = nullptr;
    *n_ids = 0;
    if (waste_status s = need_tokenizer(m); s != WASTE_OK) return s;
    auto format = chat_format_for(m, format_path);
    if (!format) return fail(format.error());
    const waste::ChatStop stop = waste::chat_stop(*m->tokenizer, *format);
    const std::vector<int32_t> copy(stop.ids.begin(), stop.ids.end());
    *ids = c_array(copy);
    *n_ids = copy.size();
    return WASTE_OK;
  });
}

void waste_generate_params_init(waste_generate_params* p) {
  if (p == nullptr) return;
  *p = waste_generate_params{};
  p->struct_size = sizeof(waste_generate_params);
  p->max_tokens = 256;
  p->temperature = 0.0f;
  p->top_p = 1.0f;
  p->top_k = 0;
  p->seed = 0;
}

void waste_generate_result_init(waste_generate_result* r) {
  if (r == nullptr) return;
  *r = waste_generate_result{};
  r->struct_size = sizeof(waste_generate_result);
}

waste_status waste_generate(waste_model* m, const int32_t* prompt, size_t n_prompt, const waste_generate_params* params,
                            waste_token_callback callback, void* user, waste_generate_result* result) {
  const waste_status status = guarded("waste_generate", [&]() -> waste_status {
    WASTE_NEED(m != nullptr, "waste_generate: model is NULL");
    WASTE_NEED(prompt != nullptr || n_prompt == 0, "waste_generate: prompt is NULL");
    WASTE_NEED(result == nullptr || sized(result),
               "waste_generate: result is not initialized (waste_generate_result_init)");
    waste::GenerateParams g;
    if (waste_status s = to_generate_params("waste_generate", params, g); s != WASTE_OK) return s;
    const std::vector<int> ids = to_ints(prompt, n_prompt);
    const auto relay = token_relay(m, callback, user);
    auto out = m->engine->generate(ids, g, [&](const waste::TokenEvent& e) { return relay(e.token); });
    if (!out) return fail(out.error());
    fill_result(m, *out, result);
    return WASTE_OK;
  });
  // A cancel is consumed by the generation it stopped (or that was running when it came).
  if (m != nullptr) m->cancel.store(false, std::memory_order_release);
  return status;
}

void waste_constraint_init(waste_constraint* c) {
  if (c == nullptr) return;
  *c = waste_constraint{};
  c->struct_size = sizeof(waste_constraint);
}

waste_status waste_generate_constrained(waste_model* m, const int32_t* prompt, size_t n_prompt,
                                        const waste_generate_params* params, const waste_constraint* constraint,
                                        waste_token_callback callback, void* user, waste_generate_result* result,
                                        int32_t* complete) {
  const waste_status status = guarded("waste_generate_constrained", [&]() -> waste_status {
    const std::string fn = "waste_generate_constrained";
    if (complete != nullptr) *complete = 0;
    WASTE_NEED(m != nullptr, fn + ": model is NULL");
    WASTE_NEED(prompt != nullptr || n_prompt == 0, fn + ": prompt is NULL");
    WASTE_NEED(result == nullptr || sized(result), fn + ": result is not initialized (waste_generate_result_init)");
    WASTE_NEED(sized(constraint), fn + ": constraint is NULL or not initialized (waste_constraint_init)");
    WASTE_NEED((constraint->grammar == nullptr) != (constraint->json_schema == nullptr),
               fn + ": set exactly one of constraint.grammar and constraint.json_schema");
    waste::GenerateParams g;
    if (waste_status s = to_generate_params(fn, params, g); s != WASTE_OK) return s;
    if (waste_status s = need_tokenizer(m); s != WASTE_OK) return s;
    const bool ebnf = constraint->grammar != nullptr;
    auto grammar = waste::compile_grammar_text(ebnf ? waste::GrammarSource::ebnf : waste::GrammarSource::json_schema,
                                               ebnf ? constraint->grammar : constraint->json_schema,
                                               ebnf ? "constraint.grammar" : "constraint.json_schema");
    if (!grammar) return fail(grammar.error());
    const waste::Tokenizer& tokenizer = *m->tokenizer;
    const int eos = g.eos_token == -2 ? -1 : tokenizer.eos();
    const std::vector<int> ids = to_ints(prompt, n_prompt);
    waste::GrammarReport report;
    auto out = waste::generate_with_grammar(*m->engine, ids, g, tokenizer, *grammar, eos, token_relay(m, callback, user),
                                            report);
    if (!out) return fail(out.error());
    fill_result(m, *out, result);
    if (complete != nullptr) *complete = report.complete ? 1 : 0;
    return WASTE_OK;
  });
  if (m != nullptr) m->cancel.store(false, std::memory_order_release);
  return status;
}

waste_status waste_chat_apply_tools(const waste_model* m, const char* format_path, const waste_chat_message* messages,
                                    size_t n_messages, const waste_tool* tools, size_t n_tools, int32_t open_model_turn,
                                    char** text, size_t* text_len, int32_t** ids, size_t* n_ids) {
  return chat_apply("waste_chat_apply_tools", m, format_path, messages, n_messages, tools, n_tools, open_model_turn,
                    text, text_len, ids, n_ids);
}

waste_status waste_generate_tool_call(waste_model* m, const char* format_path, const int32_t* prompt, size_t n_prompt,
                                      const waste_generate_params* params, const waste_tool* tools, size_t n_tools,
                                      const char* tool_name, int32_t calls_in_history, waste_token_callback callback,
                                      void* user, waste_generate_result* result) {
  const waste_status status = guarded("waste_generate_tool_call", [&]() -> waste_status {
    const std::string fn = "waste_generate_tool_call";
    WASTE_NEED(m != nullptr, fn + ": model is NULL");
    WASTE_NEED(prompt != nullptr || n_prompt == 0, fn + ": prompt is NULL");
    WASTE_NEED(result == nullptr || sized(result), fn + ": result is not initialized (waste_generate_result_init)");
    WASTE_NEED(n_tools > 0 && tools != nullptr, fn + ": a forced call needs at least one tool (tools, n_tools)");
    WASTE_NEED(calls_in_history >= 0, fn + ": calls_in_history must be 0 or more");
    waste::GenerateParams g;
    if (waste_status s = to_generate_params(fn, params, g); s != WASTE_OK) return s;
    if (waste_status s = need_tokenizer(m); s != WASTE_OK) return s;
    auto format = chat_format_for(m, format_path);
    if (!format) return fail(format.error());
    if (!format->tools) return fail(WASTE_ERR_UNSUPPORTED, fn + ": " + kNoToolMarkup);
    auto defs = to_tools(fn, tools, n_tools);
    if (!defs) return fail(defs.error());
    waste::OutputSpec spec;
    spec.tools = *defs;
    spec.tool_choice = tool_name == nullptr ? waste::ToolChoice::required : waste::ToolChoice::named;
    if (tool_name != nullptr) {
      spec.tool_choice_name = tool_name;
      const bool known = std::any_of(defs->begin(), defs->end(), [&](const waste::ToolDef& t) { return t.name == tool_name; });
      WASTE_NEED(known, fn + ": tool_name \"" + spec.tool_choice_name + "\" is not one of the tools");
    }
    spec.calls_in_history = calls_in_history;
    const waste::Tokenizer& tokenizer = *m->tokenizer;
    const waste::ChatStop stop = waste::chat_stop(tokenizer, *format);
    std::vector<int> stop_ids;
    for (int id : stop.ids) {
      if (id >= 0) stop_ids.push_back(id);
    }
    // The grammar engine's view of the vocabulary, as `waste serve` builds it (the chat stop ids
    // end a grammar stage where it accepts).
    auto index = waste::grammar::build_token_index(tokenizer, stop.ids);
    if (!index) return fail(index.error());
    auto plan = waste::make_constraint_plan(spec, *format, tokenizer, *index, waste::grammar::CompileLimits{});
    if (!plan) return fail(WASTE_ERR_ARGUMENT, fn + ": " + plan.error().message);
    const std::vector<int> ids = to_ints(prompt, n_prompt);
    auto out = waste::generate_with_plan(*m->engine, ids, g, tokenizer, std::move(*plan), stop_ids,
                                         token_relay(m, callback, user));
    if (!out) return fail(out.error());
    fill_result(m, *out, result);
    return WASTE_OK;
  });
  if (m != nullptr) m->cancel.store(false, std::memory_order_release);
  return status;
}

waste_status waste_parse_tool_calls(const waste_model* m, const char* format_path, const char* text, size_t len,
                                    char** content, char** calls_json) {
  return guarded("waste_parse_tool_calls", [&]() -> waste_status {
    const std::string fn = "waste_parse_tool_calls";
    WASTE_NEED(m != nullptr, fn + ": model is NULL");
    WASTE_NEED(content != nullptr && calls_json != nullptr, fn + ": content or calls_json is NULL");
    *content = nullptr;
    *calls_json = nullptr;
    WASTE_NEED(text != nullptr || len == 0, fn + ": text is NULL");
    auto format = chat_format_for(m, format_path);
    if (!format) return fail(format.error());
    if (!format->tools) return fail(WASTE_ERR_UNSUPPORTED, fn + ": " + kNoToolMarkup);
    const waste::ParsedToolCalls parsed =
        waste::parse_tool_calls(*format->tools, std::string_view(text == nullptr ? "" : text, len), "call_");
    nlohmann::json calls = nlohmann::json::array();
    for (const waste::ChatToolCall& call : parsed.calls) {
      calls.push_back({{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
    }
    char* out_content = c_string(parsed.content);
    try {
      *calls_json = c_string(calls.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } catch (...) {
      std::free(out_content);
      throw;
    }
    *content = out_content;
    return WASTE_OK;
  });
}

void waste_cancel(waste_model* m) {
  if (m != nullptr) m->cancel.store(true, std::memory_order_release);
}

waste_status waste_reset(waste_model* m) {
  return guarded("waste_reset", [&]() -> waste_status {
    WASTE_NEED(m != nullptr, "waste_reset: model is NULL");
    m->engine->reset();
    return WASTE_OK;
  });
}

void waste_eval_result_init(waste_eval_result* r) {
  if (r == nullptr) return;
  *r = waste_eval_result{};
  r->struct_size = sizeof(waste_eval_result);
}

waste_status waste_eval(waste_model* m, const int32_t* ids, size_t n_ids, double* logprobs, waste_eval_result* result) {
  return guarded("waste_eval", [&]() -> waste_status {
    WASTE_NEED(m != nullptr, "waste_eval: model is NULL");
    WASTE_NEED(ids != nullptr || n_ids == 0, "waste_eval: ids is NULL");
    WASTE_NEED(result == nullptr || sized(result), "waste_eval: result is not initialized (waste_eval_result_init)");
    WASTE_NEED(n_ids >= 2, "waste_eval: need at least 2 tokens to score, got " + std::to_string(n_ids));
    const int ctx = m->engine->info().ctx_tokens;
    WASTE_NEED(n_ids <= std::size_t(ctx), "waste_eval: " + std::to_string(n_ids) + " tokens are more than ctx_tokens " +
                                              std::to_string(ctx));
    m->engine->reset();
    double nll_sum = 0;
    for (std::size_t i = 0; i + 1 < n_ids; ++i) {
      const int one[1] = {ids[i]};
      auto logits = m->engine->eval(one);
      if (!logits) return fail(logits.error().with_context("token " + std::to_string(i)));
      WASTE_NEED(ids[i + 1] >= 0 && std::size_t(ids[i + 1]) < logits->size(),
                 "waste_eval: ids[" + std::to_string(i + 1) + "] = " + std::to_string(ids[i + 1]) +
                     " is outside the vocabulary of " + std::to_string(logits->size()));
      const double nll = waste::token_nll(*logits, ids[i + 1]);
      if (logprobs != nullptr) logprobs[i] = -nll;
      nll_sum += nll;
    }
    if (result != nullptr) {
      result->n_tokens = int32_t(n_ids);
      result->n_scored = int32_t(n_ids - 1);
      result->mean_nll = nll_sum / double(n_ids - 1);
      result->perplexity = std::exp(result->mean_nll);
    }
    return WASTE_OK;
  });
}

waste_status waste_session_save(const waste_model* m, const char* path) {
  return guarded("waste_session_save", [&]() -> waste_status {
    WASTE_NEED(m != nullptr && path != nullptr, "waste_session_save: model or path is NULL");
    if (auto s = waste::session::save(*m->engine, path); !s) return fail(s.error());
    return WASTE_OK;
  });
}

waste_status waste_session_load(waste_model* m, const char* path) {
  return guarded("waste_session_load", [&]() -> waste_status {
    WASTE_NEED(m != nullptr && path != nullptr, "waste_session_load: model or path is NULL");
    if (auto s = waste::session::load(*m->engine, path); !s) return fail(s.error());
    return WASTE_OK;
  });
}

void waste_stats_init(waste_stats* s) {
  if (s == nullptr) return;
  *s = waste_stats{};
  s->struct_size = sizeof(waste_stats);
}

waste_status waste_get_stats(const waste_model* m, waste_stats* s) {
  return guarded("waste_get_stats", [&]() -> waste_status {
    WASTE_NEED(m != nullptr, "waste_get_stats: model is NULL");
    WASTE_NEED(sized(s), "waste_get_stats: stats is NULL or not initialized (waste_stats_init)");
    const waste::ExpertSourceStats st = m->engine->stats();
    s->experts_hit = st.hits;
    s->experts_missed = st.misses;
    s->bytes_read = st.bytes_read;
    s->io_wait_seconds = st.wait_seconds;
    s->last_tokens = m->last_tokens;
    s->last_tokens_per_second = m->last_generate_seconds > 0 ? double(m->last_tokens) / m->last_generate_seconds : 0.0;
    return WASTE_OK;
  });
}

}  // extern "C"
