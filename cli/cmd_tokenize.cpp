// waste tokenize MODEL TEXT: print the ids of TEXT (plain mode, or --markup for templates), one
// line separated by spaces; --json adds each id's bytes.
#include <cstdio>
#include <string>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"

namespace waste::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  bool markup = false;
  bool json = false;
};

int run_tokenize(const TokenizeArgs& a) {
  auto tokenizer = load_tokenizer(a.model);
  if (!tokenizer) return report_error("tokenize", tokenizer.error());
  std::string text = a.text;
  if (!a.file.empty()) {
    auto read = read_text(a.file);
    if (!read) return report_error("tokenize", read.error());
    text = std::move(*read);
  }
  const std::vector<int> ids = a.markup ? tokenizer->encode_markup(text) : tokenizer->encode(text);
  if (a.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const int id : ids) pieces.push_back(tokenizer->decode_token(id));
    print_json({{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}});
  } else {
    std::printf("%s\n", join_ids(ids).c_str());
  }
  return 0;
}

const CommandRegistration kRegistration{Command{
    "tokenize", "Print the token ids of a text",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<TokenizeArgs>();
      sub.add_option("model", args->model, "Container directory (NAME.waste)")->type_name("DIR")->required();
      auto* text = sub.add_option("text", args->text, "Text to tokenize")->type_name("TEXT")->default_str("none");
      auto* file = sub.add_option("--file", args->file, "Read the text from a file ('-' = stdin)")
                       ->type_name("FILE")
                       ->default_str("none");
      text->excludes(file);
      sub.add_flag("--markup", args->markup, "Template mode: special-token texts become their ids");
      sub.add_flag("--json", args->json, "JSON output with each token's text");
      return [args] { return run_tokenize(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
