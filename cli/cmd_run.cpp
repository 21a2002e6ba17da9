// waste run MODEL --ids 1,2,3 -n 16: generate from token ids, print the generated ids on one
// line (stdout) and a stats line (stderr).
// waste run MODEL "prompt text": text mode (the container's tokenizer): stream the decoded text
// as it is generated, then one stats line (stderr); --chat-format/--system wrap the prompt.
// --json-schema FILE / --grammar FILE (text mode): every step masks the tokens the grammar
// cannot continue with before sampling; the run ends when the match is finished, or at an
// end token (eos / the chat format's stop) once the match is complete.
// --image FILE (repeatable, text mode): PNG/JPEG through the container's vision tower; each image's
// media block goes before the user text, one prompt position per merged patch.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "compute/api/engine.hpp"
#include "compute/prompt/constraint_builder.hpp"
#include "compute/prompt/grammar_generate.hpp"
#include "compute/prompt/media_placement.hpp"
#include "compute/prompt/stop_text.hpp"
#include "compute/sampling/grammar/grammar.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "compute/vision/image_decode.hpp"
#include "compute/vision/media_prompt.hpp"
#include "shared/container/container.hpp"

namespace waste::cli {
namespace {

struct RunArgs {
  EngineArgs engine;        // model, --budget, --ctx, --threads, --verify, daemon or in-process
  SamplingArgs sampling;    // --temp, --top-k, --top-p, --seed
  std::vector<int> ids;
  int n_tokens = 16;
  bool ignore_eos = false;
  std::vector<int> stop;
  std::string prompt;       // text mode
  std::string system;       // text mode: system prompt (with a chat format)
  std::string chat_format;  // text mode: chat.json instead of the container's
  std::string file;         // text mode: the prompt read from this file
  bool quiet = false;       // -q: no stats line
  bool json = false;        // --json: one JSON document on stdout instead of streamed output
  std::string json_schema;  // text mode: constrain the output to this JSON Schema file
  std::string grammar;      // text mode: constrain the output to this EBNF grammar file
  std::vector<std::string> images;          // text mode: --image files, in order
  std::vector<vision::RgbImage> decoded;    // their pixels (decoded before the model opens)
};

// --json-schema / --grammar: the compiled grammar, errors naming the file.
Result<std::shared_ptr<const grammar::Grammar>> load_grammar(const RunArgs& a) {
  const std::string& path = a.json_schema.empty() ? a.grammar : a.json_schema;
  auto text = read_text(path);
  if (!text) return std::unexpected(text.error());
  return compile_grammar_text(a.grammar.empty() ? GrammarSource::json_schema : GrammarSource::ebnf, *text, path);
}

RunStats make_stats(const GenerateResult& result, const Engine& engine) {
  RunStats stats;
  stats.tokens = result.tokens.size();
  stats.prompt_tokens = result.prompt_tokens;
  stats.prompt_seconds = result.prompt_seconds;
  stats.generate_seconds = result.generate_seconds;
  stats.experts = engine.stats();
  return stats;
}

// The end of a run: the stats line on stderr, or with --json the whole result on stdout.
void report(const RunArgs& a, const GenerateResult& result, const Engine& engine, const std::string* text,
            const GrammarReport* g = nullptr) {
  const RunStats stats = make_stats(result, engine);
  if (a.json) {
    nlohmann::json doc;
    doc["tokens"] = result.tokens;
    if (text) doc["text"] = *text;
    doc["stop"] = stop_reason_name(result.stop);
    if (g) {
      doc["grammar"] = {{"complete", g->complete},
                        {"masks", g->masks},
                        {"mask_seconds", g->mask_seconds},
                        {"first_mask_seconds", g->first_mask_seconds}};
    }
    doc["stats"] = stats_json(stats);
    print_json(doc);
  } else if (!a.quiet) {
    std::fprintf(stderr, "%s\n", stats_line(stats).c_str());
  }
}

// The constrained loop (compute/prompt/grammar_generate.hpp), streaming the text it accepts.
int run_constrained(const RunArgs& a, Engine& engine, const GenerateParams& params, const Tokenizer& tokenizer,
                    const std::vector<int>& prompt, int eos) {
  // (params.prompt_embeddings: the media rows of an --image prompt, fed with the prompt)
  auto g = load_grammar(a);
  if (!g) return report_error("run", g.error());
  StopTextStream stream;
  std::string text;
  GrammarReport gr;
  auto result = generate_with_grammar(engine, prompt, params, tokenizer, *g, eos, [&](int token) {
    const std::string out = stream.push(tokenizer.decode_token(token));
    text += out;
    if (!a.json) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  }, gr);
  if (!result) return report_error("run", result.error());
  const std::string tail = stream.finish();
  text += tail;
  if (!a.json) {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  report(a, *result, engine, &text, &gr);
  return 0;
}

// Text mode: tokenize (wrapped in the chat format when there is one), stream complete UTF-8
// characters as tokens arrive, stop at the assistant suffix text; stats on stderr.
int run_text(const RunArgs& a, Engine& engine, GenerateParams params) {
  auto tokenizer = load_tokenizer(engine.container());
  if (!tokenizer) return report_error("run", tokenizer.error());
  auto format = load_chat_format(a.engine.model, a.chat_format);
  if (!format) return report_error("run", format.error());
  std::vector<int> prompt;
  std::vector<std::string> stop_texts;
  std::vector<ChatMessage> messages;  // with a format
  if (*format) {
    if (!a.system.empty()) messages.push_back({ChatRole::system, a.system});
    messages.push_back({ChatRole::user, a.prompt});
    prompt = build_chat_prompt(*tokenizer, **format, messages);
    const ChatStop stop = chat_stop(*tokenizer, **format);
    params.stop_tokens.insert(params.stop_tokens.end(), stop.ids.begin(), stop.ids.end());
    if (!stop.text.empty()) stop_texts.push_back(stop.text);
  } else {
    if (!a.system.empty()) tokenizer->encode(a.system + "\n", prompt);
    tokenizer->encode(a.prompt, prompt);
  }
  // --image: the tower's rows at the media positions, the blocks before the user text.
  std::vector<vision::EncodedImage> encoded;
  vision::MediaPrompt media;
  if (!a.decoded.empty()) {
    auto encoder = vision::load_media_encoder(engine.container(), *tokenizer, engine.config().hidden);
    if (!encoder) return report_error("run", encoder.error());
    const vision::MediaTokens* tokens = &encoder->tokens;
    for (std::size_t i = 0; i < a.decoded.size(); ++i) {
      auto img = vision::encode_image(encoder->tower, engine.exec(), a.decoded[i]);
      if (!img) return report_error("run", img.error().with_context(a.images[i]));
      encoded.push_back(std::move(*img));
    }
    media = place_media(*tokenizer, *tokens, format->has_value() ? &**format : nullptr, messages, prompt, encoded,
                        engine.config().hidden);
    prompt = media.tokens;
    params.prompt_embeddings = media.embeddings;
  }
  const int eos = params.eos_token == -2 ? -1 : tokenizer->eos();
  if (!a.json_schema.empty() || !a.grammar.empty()) return run_constrained(a, engine, params, *tokenizer, prompt, eos);
  StopTextStream stream(std::move(stop_texts));
  std::string text;
  // The config's eos may be a list (GLM): none of them is printed.
  const std::vector<int> eos_ids = eos >= 0 ? tokenizer->eos_ids() : std::vector<int>{};
  auto result = engine.generate(prompt, params, [&](const TokenEvent& e) {
    const bool ends = std::find(eos_ids.begin(), eos_ids.end(), e.token) != eos_ids.end() ||
                      std::find(params.stop_tokens.begin(), params.stop_tokens.end(), e.token) != params.stop_tokens.end();
    if (ends) return true;  // generate() stops after it; the control token is not printed
    const std::string out = stream.push(tokenizer->decode_token(e.token));
    text += out;
    if (!a.json) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fflush(stdout);
    }
    return !stream.stopped();
  });
  const std::string tail = stream.finish();
  text += tail;
  if (!a.json) {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!result) return report_error("run", result.error());
  report(a, *result, engine, &text);
  return 0;
}

int run(RunArgs a) {
  if (!a.file.empty()) {
    if (!a.prompt.empty()) return report_error("run", "give either a prompt text or --file (not both)");
    auto text = read_text(a.file);
    if (!text) return report_error("run", text.error());
    a.prompt = std::move(*text);
  }
  if (a.prompt.empty() == a.ids.empty()) {
    return report_error("run", "give either a prompt text (or --file) or --ids (not both)");
  }
  if (!a.json_schema.empty() && !a.grammar.empty()) return report_error("run", "give either --json-schema or --grammar (not both)");
  if ((!a.json_schema.empty() || !a.grammar.empty()) && a.prompt.empty()) {
    return report_error("run", "--json-schema and --grammar need a prompt text (text mode), not --ids");
  }
  if (!a.json_schema.empty() || !a.grammar.empty()) {
    // Refuse a bad file before the model is opened.
    if (auto g = load_grammar(a); !g) return report_error("run", g.error());
  }
  if (!a.images.empty() && a.prompt.empty()) return report_error("run", "--image needs a prompt text (text mode), not --ids");
  for (const std::string& path : a.images) {
    auto img = vision::decode_image_file(path);
    if (!img) return report_error("run", img.error());
    a.decoded.push_back(std::move(*img));
  }
  auto engine = open_engine(a.engine);
  if (!engine) return report_error("run", engine.error());
  if ((*engine)->engram_stats()) {  // DeepSeek-V4.1 with Engram tables: where the rows come from, once
    std::fprintf(stderr, "waste run: %s; read-ahead %s\n", (*engine)->engram_origin().c_str(),
                 (*engine)->engram_readahead() ? "on" : "off");
  }
  GenerateParams params;
  params.max_tokens = a.n_tokens;
  params.sampling = a.sampling.params();
  params.stop_tokens = a.stop;
  if (a.ignore_eos) params.eos_token = -2;
  if (!a.prompt.empty()) return run_text(a, **engine, params);

  auto result = (*engine)->generate(a.ids, params, [](const TokenEvent&) { return true; });
  if (!result) return report_error("run", result.error());
  if (!a.json) {
    std::printf("%s\n", join_ids(result->tokens).c_str());
    std::fflush(stdout);
  }
  report(a, *result, **engine, nullptr);
  return 0;
}

const CommandRegistration kRegistration{Command{
    "run", "Generate from a prompt (text, or token ids with --ids)",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<RunArgs>();
      add_engine_options(sub, args->engine);
      add_sampling_options(sub, args->sampling);
      sub.add_option("prompt", args->prompt, "Prompt text (text mode; needs the container's tokenizer)")
          ->type_name("TEXT")
          ->default_str("none");
      sub.add_option("--ids", args->ids, "Prompt token ids, comma separated (ids in, ids out)")
          ->type_name("IDS")
          ->default_str("none")
          ->delimiter(',')
          ->check(int_range("--ids", 0, kIntMax));
      sub.add_option("--system", args->system, "System prompt (text mode)")->type_name("TEXT")->default_str("none");
      sub.add_option("--chat-format", args->chat_format, "chat.json wrapping the prompt (text mode)")
          ->type_name("FILE")
          ->default_str("the container's");
      sub.add_option("-n,--tokens", args->n_tokens, "Tokens to generate")
          ->type_name("TOKENS")
          ->check(int_range("-n", 0, kMaxCtxTokens));
      sub.add_option("--stop", args->stop, "Stop after generating one of these ids")
          ->type_name("IDS")
          ->default_str("none")
          ->delimiter(',')
          ->check(int_range("--stop", 0, kIntMax));
      sub.add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the model's eos token");
      sub.add_option("--file", args->file, "Read the prompt text from this file ('-' = stdin)")
          ->type_name("FILE")
          ->default_str("none");
      sub.add_option("--image", args->images, "PNG or JPEG image before the prompt text (repeatable; text mode)")
          ->type_name("FILE")
          ->default_str("none");
      sub.add_flag("-q,--quiet", args->quiet, "No stats line");
      sub.add_flag("--json", args->json, "Print one JSON document (tokens, text, stop, stats) instead");
      sub.add_option("--json-schema", args->json_schema, "Constrain the output to this JSON Schema file (text mode)")
          ->type_name("FILE")
          ->default_str("none");
      sub.add_option("--grammar", args->grammar, "Constrain the output to this GBNF-like grammar file (text mode)")
          ->type_name("FILE")
          ->default_str("none");
      return [args] { return run(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
