// waste chat MODEL: a conversation on stdin, one user turn per line, the state kept across turns.
// Lines starting with '/' are commands: /reset, /save FILE, /load FILE, /image FILE, /stats, /quit.
// /image FILE decodes a PNG/JPEG and runs the container's vision tower now; its media block goes
// into the next user turn, before the text (several /image lines: in order).
// Templates are tokenized in markup mode and content in plain mode (build_chat_prompt), so a
// user cannot type a control token; the reply ends at the assistant suffix (its text, or its
// first token when that is a special) or eos. The system prompt is prefilled once per sequence.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "compute/prompt/media_placement.hpp"
#include "compute/prompt/stop_text.hpp"
#include "compute/session/session_file.hpp"
#include "compute/vision/image_decode.hpp"
#include "compute/vision/media_prompt.hpp"
#include "shared/container/container.hpp"

namespace waste::cli {
namespace {

struct ChatArgs {
  EngineArgs engine;
  SamplingArgs sampling;
  int n_tokens = 512;
  std::string system;
  std::string chat_format;
  std::vector<std::string> stop;
  bool quiet = false;
};

class ChatLoop {
 public:
  ChatLoop(const ChatArgs& args, Engine& engine, Tokenizer tokenizer, std::optional<ChatFormat> format)
      : args_(args), engine_(engine), tokenizer_(std::move(tokenizer)), format_(std::move(format)) {
    if (format_) {
      stop_ = chat_stop(tokenizer_, *format_);
      suffix_ids_ = tokenizer_.encode_markup(format_->assistant.suffix);
    } else {
      stop_.ids = tokenizer_.eos_ids();
    }
  }

  // Returns the exit code once stdin ends or /quit.
  int run() {
    if (Status s = prefill_system(); !s) return report_error("chat", s.error());
    const bool interactive = ::isatty(STDIN_FILENO) != 0;
    std::string line;
    while (true) {
      if (interactive) std::fputs("> ", stderr);
      if (!std::getline(std::cin, line)) break;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty() && line[0] == '/') {
        if (!command(line)) break;
        continue;
      }
      if (Status s = turn(line); !s) report_error("chat", s.error());
    }
    return 0;
  }

 private:
  Status prefill_system() {
    if (args_.system.empty()) return ok();
    std::vector<int> ids;
    if (format_) {
      const ChatMessage message{ChatRole::system, args_.system};
      ChatRender render;
      render.open_model_turn = false;
      render.start = !started_;  // the prelude and effort turn come once, at the start
      ids = build_chat_prompt(tokenizer_, *format_, std::span(&message, 1), render);
      started_ = true;
    } else {
      ids = tokenizer_.encode(args_.system);
    }
    if (ids.empty()) return ok();
    auto fed = engine_.eval(ids);
    if (!fed) return std::unexpected(fed.error().with_context("system prompt"));
    return ok();
  }

  // /image FILE: decode, encode with the tower (loaded on first use), keep for the next turn.
  Status add_image(const std::string& path) {
    auto pixels = vision::decode_image_file(path);
    if (!pixels) return std::unexpected(pixels.error());
    if (!tower_) {
      auto encoder = vision::load_media_encoder(engine_.container(), tokenizer_, engine_.config().hidden);
      if (!encoder) return std::unexpected(encoder.error());
      media_ = encoder->tokens;
      tower_.emplace(std::move(encoder->tower));
    }
    auto img = vision::encode_image(*tower_, engine_.exec(), *pixels);
    if (!img) return std::unexpected(img.error().with_context(path));
    std::fprintf(stderr, "[image %s: %dx%d, %d positions in the next turn]\n", path.c_str(), img->width, img->height,
                 img->positions());
    images_.push_back(std::move(*img));
    return ok();
  }

  Status turn(const std::string& text) {
    std::vector<int> prompt;
    const ChatMessage message{ChatRole::user, text};
    if (format_) {
      ChatRender render;
      render.start = !started_;
      prompt = build_chat_prompt(tokenizer_, *format_, std::span(&message, 1), render);
      started_ = true;
    } else {
      prompt = tokenizer_.encode(text);
    }
    if (prompt.empty()) return ok();
    GenerateParams params;
    vision::MediaPrompt media;
    std::vector<vision::EncodedImage> images = std::move(images_);
    images_.clear();
    if (!images.empty()) {
      // The blocks go where the user text starts.
      media = place_media(tokenizer_, media_, format_ ? &*format_ : nullptr, std::span(&message, 1), prompt, images,
                          engine_.config().hidden);
      prompt = media.tokens;
      params.prompt_embeddings = media.embeddings;
    }
    params.max_tokens = args_.n_tokens;
    params.sampling = args_.sampling.params();
    params.stop_tokens = stop_.ids;
    std::vector<std::string> stop_texts = args_.stop;
    if (!stop_.text.empty()) stop_texts.push_back(stop_.text);
    StopTextStream stream(std::move(stop_texts));
    int last = -1;
    auto result = engine_.generate(prompt, params, [&](const TokenEvent& e) {
      last = e.token;
      if (std::find(stop_.ids.begin(), stop_.ids.end(), e.token) != stop_.ids.end()) return true;  // ends it
      const std::string out = stream.push(tokenizer_.decode_token(e.token));
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fflush(stdout);
      return !stream.stopped();
    });
    const std::string tail = stream.finish();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!result) return std::unexpected(result.error());
    WASTE_TRY(close_turn(result->stop, last));
    if (!args_.quiet) {
      RunStats stats;
      stats.tokens = result->tokens.size();
      stats.prompt_tokens = result->prompt_tokens;
      stats.prompt_seconds = result->prompt_seconds;
      stats.generate_seconds = result->generate_seconds;
      stats.experts = engine_.stats();
      std::fprintf(stderr, "[%s  stop %s]\n", stats_line(stats).c_str(), stop_reason_name(result->stop));
    }
    if (result->stop == StopReason::context_full) {
      return make_error(Errc::argument, "the context is full; /reset or --ctx to continue");
    }
    return ok();
  }

  // Leave a well-formed transcript: a reply cut by max_tokens or eos gets the whole assistant
  // suffix, one ended by the suffix's first token gets the rest of it; a reply ended by the
  // suffix text already has it.
  Status close_turn(StopReason stop, int last) {
    if (!format_ || suffix_ids_.empty() || stop == StopReason::cancelled || stop == StopReason::context_full) {
      return ok();
    }
    std::span<const int> rest = suffix_ids_;
    if (last == suffix_ids_.front()) rest = rest.subspan(1);
    if (rest.empty()) return ok();
    if (engine_.position() + std::int64_t(rest.size()) > engine_.run_state().ctx_tokens()) return ok();
    auto fed = engine_.eval(rest);
    if (!fed) return std::unexpected(fed.error().with_context("assistant suffix"));
    return ok();
  }

  // Returns false on /quit.
  bool command(const std::string& line) {
    const auto space = line.find(' ');
    const std::string name = line.substr(0, space);
    std::string arg = space == std::string::npos ? std::string() : line.substr(space + 1);
    while (!arg.empty() && arg.front() == ' ') arg.erase(0, 1);
    while (!arg.empty() && arg.back() == ' ') arg.pop_back();
    if (name == "/quit" || name == "/exit") return false;
    if (name == "/reset") {
      engine_.reset();
      started_ = false;
      if (Status s = prefill_system(); !s) report_error("chat", s.error());
      std::fprintf(stderr, "[reset]\n");
    } else if (name == "/save" || name == "/load") {
      if (arg.empty()) {
        report_error("chat", name + " needs a file name");
        return true;
      }
      Status s = name == "/save" ? session::save(engine_, arg) : session::load(engine_, arg);
      if (!s) {
        report_error("chat", s.error());
      } else {
        if (name == "/load") started_ = engine_.position() > 0;  // a loaded context has its start
        std::fprintf(stderr, "[%s %s at position %d]\n", name == "/save" ? "saved" : "loaded", arg.c_str(),
                     engine_.position());
      }
    } else if (name == "/image") {
      if (arg.empty()) {
        report_error("chat", "/image needs a file name");
      } else if (Status s = add_image(arg); !s) {
        report_error("chat", s.error());
      }
    } else if (name == "/stats") {
      const ExpertSourceStats st = engine_.stats();
      const std::uint64_t total = st.hits + st.misses;
      std::printf("position %d of %d  experts hit %llu (%.1f%%) miss %llu  GB read %.3f\n", engine_.position(),
                  engine_.run_state().ctx_tokens(), static_cast<unsigned long long>(st.hits),
                  total ? 100.0 * double(st.hits) / double(total) : 0.0, static_cast<unsigned long long>(st.misses),
                  double(st.bytes_read) / 1e9);
      std::fflush(stdout);
    } else {
      report_error("chat", "unknown command " + name + " (/reset, /save FILE, /load FILE, /image FILE, /stats, /quit)");
    }
    return true;
  }

  const ChatArgs& args_;
  Engine& engine_;
  Tokenizer tokenizer_;
  std::optional<ChatFormat> format_;
  ChatStop stop_;
  std::vector<int> suffix_ids_;
  bool started_ = false;  // the conversation's start (prelude, effort turn) is in the context
  std::optional<vision::VisionTower> tower_;     // loaded by the first /image
  vision::MediaTokens media_;
  std::vector<vision::EncodedImage> images_;     // waiting for the next turn
};

int run_chat(const ChatArgs& a) {
  auto container = read_container(a.engine.model);  // read once: the tokenizer and the engine share it
  if (!container) return report_error("chat", container.error());
  auto tokenizer = load_tokenizer(**container);
  if (!tokenizer) return report_error("chat", tokenizer.error());
  auto format = load_chat_format(a.engine.model, a.chat_format);
  if (!format) return report_error("chat", format.error());
  if (!*format) std::fprintf(stderr, "waste chat: no chat format (container chat.json or --chat-format): raw text\n");
  auto engine = open_engine(a.engine, *container);
  if (!engine) return report_error("chat", engine.error());
  ChatLoop loop(a, **engine, std::move(*tokenizer), std::move(*format));
  return loop.run();
}

const CommandRegistration kRegistration{Command{
    "chat", "Converse with the model on stdin (/reset /save /load /image /stats /quit)",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<ChatArgs>();
      add_engine_options(sub, args->engine);
      add_sampling_options(sub, args->sampling);
      sub.add_option("-n,--tokens", args->n_tokens, "Most tokens per reply")
          ->type_name("TOKENS")
          ->check(int_range("-n", 0, kMaxCtxTokens));
      sub.add_option("--system", args->system, "System prompt (prefilled once)")->type_name("TEXT")->default_str("none");
      sub.add_option("--chat-format", args->chat_format, "chat.json to use instead of the container's")
          ->type_name("FILE")
          ->default_str("the container's");
      sub.add_option("--stop", args->stop, "Also end a reply at this text (repeatable)")
          ->type_name("TEXT")
          ->default_str("none");
      sub.add_flag("-q,--quiet", args->quiet, "No stats line after each reply");
      return [args] { return run_chat(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
