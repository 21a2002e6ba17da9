// Test helper for the tiktoken equality check: encodes every line of a JSON-lines corpus with our
// tokenizer and prints the ids as one JSON array per line. Also writes the synthetic tokenizer,
// so the check can cover it too.
//
//   waste_tokenize_corpus encode --ranks FILE --pattern kimi|cl100k|o200k [--specials FILE]
//                                --mode plain|markup --corpus FILE.jsonl
//   waste_tokenize_corpus synthetic DIR SEED
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "compute/tokenizer/tokenizer.hpp"
#include "shared/synth/synthetic_tokenizer.hpp"

namespace {

int fail(const std::string& message) {
  std::cerr << "waste_tokenize_corpus: " << message << "\n";
  return 2;
}

int run_encode(const std::map<std::string, std::string>& args) {
  for (const char* key : {"--ranks", "--pattern", "--mode", "--corpus"}) {
    if (!args.contains(key)) return fail(std::string("missing ") + key);
  }
  const std::map<std::string, std::string_view> patterns = {{"kimi", waste::tokenizer::kKimiPattern},
                                                             {"cl100k", waste::tokenizer::kCl100kPattern},
                                                             {"o200k", waste::tokenizer::kO200kPattern}};
  const auto pattern = patterns.find(args.at("--pattern"));
  if (pattern == patterns.end()) return fail("unknown pattern " + args.at("--pattern"));
  const std::string mode = args.at("--mode");
  if (mode != "plain" && mode != "markup") return fail("mode must be plain or markup");
  const auto specials = args.contains("--specials") ? args.at("--specials") : std::string{};
  auto tok = waste::Tokenizer::load_files(args.at("--ranks"), specials, pattern->second);
  if (!tok) return fail(tok.error().message);

  std::ifstream corpus(args.at("--corpus"), std::ios::binary);
  if (!corpus) return fail(args.at("--corpus") + ": cannot open");
  std::string line;
  std::cout << "[";
  bool first = true;
  while (std::getline(corpus, line)) {
    if (line.empty()) continue;
    const auto doc = nlohmann::json::parse(line, nullptr, false);
    if (doc.is_discarded() || !doc.is_string()) return fail("corpus line is not a JSON string: " + line);
    const std::string text = doc.get<std::string>();
    const auto ids = mode == "plain" ? tok->encode(text) : tok->encode_markup(text);
    if (tok->decode(ids) != text) return fail("round trip failed on: " + line);
    std::cout << (first ? "\n" : ",\n") << nlohmann::json(ids).dump();
    first = false;
  }
  std::cout << "\n]\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "synthetic") {
    if (argc != 4) return fail("usage: synthetic DIR SEED");
    const auto status = waste::synth::write_synthetic_tokenizer(argv[2], std::stoull(argv[3]));
    return status ? 0 : fail(status.error().message);
  }
  if (argc < 2 || std::string(argv[1]) != "encode" || argc % 2 != 0) {
    return fail("usage: encode --ranks F --pattern P [--specials F] --mode plain|markup --corpus F | synthetic DIR SEED");
  }
  std::map<std::string, std::string> args;
  for (int i = 2; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  return run_encode(args);
}
