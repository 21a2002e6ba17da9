// waste detokenize MODEL IDS...: print the text of token ids ("1,2,3", "1 2 3", or --file).
#include <cstdio>
#include <string>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"

namespace waste::cli {
namespace {

struct DetokenizeArgs {
  std::string model;
  std::vector<std::string> ids;
  std::string file;
  bool no_newline = false;
};

int run_detokenize(const DetokenizeArgs& a) {
  auto tokenizer = load_tokenizer(a.model);
  if (!tokenizer) return report_error("detokenize", tokenizer.error());
  std::string text;
  for (const auto& piece : a.ids) text += piece + " ";
  if (!a.file.empty()) {
    auto read = read_text(a.file);
    if (!read) return report_error("detokenize", read.error());
    text += *read;
  }
  auto ids = parse_ids(text);
  if (!ids) return report_error("detokenize", ids.error());
  for (std::size_t i = 0; i < ids->size(); ++i) {
    if (!tokenizer->valid_id((*ids)[i])) {
      return report_error("detokenize", "token id " + std::to_string((*ids)[i]) + " at index " + std::to_string(i) +
                                            " is not in the vocabulary (" + std::to_string(tokenizer->vocab()) +
                                            " tokens)");
    }
  }
  const std::string out = tokenizer->decode(*ids);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!a.no_newline) std::fputc('\n', stdout);
  return 0;
}

const CommandRegistration kRegistration{Command{
    "detokenize", "Print the text of token ids",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<DetokenizeArgs>();
      sub.add_option("model", args->model, "Container directory (NAME.waste)")->type_name("DIR")->required();
      sub.add_option("ids", args->ids, "Token ids (comma or space separated)")->type_name("IDS")->default_str("none");
      sub.add_option("--file", args->file, "Read ids from a file ('-' = stdin)")->type_name("FILE")->default_str("none");
      sub.add_flag("--no-newline", args->no_newline, "Do not end the output with a newline");
      return [args] { return run_detokenize(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
