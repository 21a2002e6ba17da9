#include "shared/synth/synthetic_tokenizer.hpp"

#include <array>
#include <fstream>
#include <map>
#include <string_view>
#include <utility>

namespace waste::synth {
namespace {

// Our own sentences; a few scripts so merges cover multi-byte UTF-8 as well as ASCII.
constexpr std::string_view kCorpus =
    "The quick brown fox jumps over the lazy dog, and the dog does not mind at all.\n"
    "A tokenizer turns text into numbers; the model only ever sees the numbers.\n"
    "Experts are streamed from the disk when the router asks for them, and the cache keeps the "
    "ones that are asked for most often.\n"
    "The weather in Paris is mild in the spring and warm in the summer; the rain comes in the autumn.\n"
    "She said that the train was late again, so they walked to the station and waited together.\n"
    "Reading and writing, counting and thinking: these are the things that the students learn first.\n"
    "The container holds the trunk, the codebooks, the expert banks and the tokenizer files.\n"
    "Hello world! Hello again, world. Is this the world that we wanted to build?\n"
    "It's a small model, but it's enough to test that the engine runs from the first token to the last.\n"
    "We're testing the tokenizer; they've tested the kernels; I'll test the cache, and you'd test the rest.\n"
    "Numbers like 2024, 3.14159, 42 and 1000000 appear in text as often as words do.\n"
    "def encode(text): return [rank[piece] for piece in split(text)]\n"
    "if (count > 0) { total += count; } else { return -1; }\n"
    "Le renard brun saute par-dessus le chien paresseux, et le chien ne dit rien.\n"
    "La m\xC3\xA9t\xC3\xA9o \xC3\xA0 Paris est douce au printemps et chaude en \xC3\xA9t\xC3\xA9.\n"
    "Der schnelle braune Fuchs springt \xC3\xBC" "ber den faulen Hund, und der Hund schl\xC3\xA4" "ft weiter.\n"
    "Die Experten werden von der Festplatte gelesen, wenn der Router sie braucht.\n"
    "El zorro marr\xC3\xB3n salta sobre el perro perezoso, y el perro sigue durmiendo.\n"
    "\xD0\x91\xD1\x8B\xD1\x81\xD1\x82\xD1\x80\xD0\xB0\xD1\x8F \xD0\xBA\xD0\xBE\xD1\x80\xD0\xB8\xD1\x87\xD0\xBD"
    "\xD0\xB5\xD0\xB2\xD0\xB0\xD1\x8F \xD0\xBB\xD0\xB8\xD1\x81\xD0\xB0 \xD0\xBF\xD1\x80\xD1\x8B\xD0\xB3\xD0\xB0"
    "\xD0\xB5\xD1\x82 \xD1\x87\xD0\xB5\xD1\x80\xD0\xB5\xD0\xB7 \xD0\xBB\xD0\xB5\xD0\xBD\xD0\xB8\xD0\xB2\xD1\x83"
    "\xD1\x8E \xD1\x81\xD0\xBE\xD0\xB1\xD0\xB0\xD0\xBA\xD1\x83.\n"
    "\xCE\x97 \xCE\xB3\xCF\x81\xCE\xAE\xCE\xB3\xCE\xBF\xCF\x81\xCE\xB7 \xCE\xBA\xCE\xB1\xCF\x86\xCE\xAD "
    "\xCE\xB1\xCE\xBB\xCE\xB5\xCF\x80\xCE\xBF\xCF\x8D \xCF\x80\xCE\xB7\xCE\xB4\xCE\xAC\xCE\xB5\xCE\xB9.\n"
    "\xE6\x88\x91\xE4\xBB\xAC\xE7\x9A\x84\xE6\xA8\xA1\xE5\x9E\x8B\xE5\xBE\x88\xE5\xB0\x8F\xEF\xBC\x8C\xE4\xBD"
    "\x86\xE6\x98\xAF\xE5\xAE\x83\xE5\x8F\xAF\xE4\xBB\xA5\xE8\xBF\x90\xE8\xA1\x8C\xE3\x80\x82\n"
    "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE3\x80\x81\xE4\xB8\x96\xE7\x95\x8C\xE3\x80"
    "\x82\xE3\x81\x93\xE3\x82\x8C\xE3\x81\xAF\xE3\x83\x86\xE3\x82\xB9\xE3\x83\x88\xE3\x81\xA7\xE3\x81\x99\xE3"
    "\x80\x82\n"
    "The model reads the prompt, the router picks the experts, and the experts answer together.\n"
    "When the cache is too small, the same experts are read again and again from the disk.\n"
    "Thinking about the system as a whole, the slowest part decides how fast the answer comes.\n"
    "The user asks a question, the assistant answers it, and the system message sets the tone.\n"
    "Every message has a role: the system, the user, or the assistant.\n"
    "There is nothing more useful than a test that fails when the code is wrong.\n";

// A word: an optional leading space then the bytes up to the next space or newline; a newline is
// a word of its own. Merges never cross words, as in any BPE trainer.
std::map<std::string, long> count_words() {
  std::map<std::string, long> words;
  std::size_t pos = 0;
  while (pos < kCorpus.size()) {
    std::size_t end = pos;
    if (kCorpus[end] == '\n') {
      ++end;
    } else {
      if (kCorpus[end] == ' ') ++end;
      while (end < kCorpus.size() && kCorpus[end] != ' ' && kCorpus[end] != '\n') ++end;
    }
    ++words[std::string(kCorpus.substr(pos, end - pos))];
    pos = end;
  }
  return words;
}

// splitmix64: a fixed, portable mix so ties break the same way on every platform.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = (std::uint32_t(std::uint8_t(bytes[i])) << 16) |
                            (std::uint32_t(std::uint8_t(bytes[i + 1])) << 8) | std::uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t v = std::uint32_t(std::uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= std::uint32_t(std::uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string json_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& synthetic_special_texts() {
  static const std::vector<std::string> kTexts = {
      "[BOS]",           "[EOS]",           "<|end_of_msg|>",  "<|open|>",
      "<|close|>",       "<|sep|>",         "<|media_begin|>", "<|media_content|>",
      "<|media_pad|>",   "<|media_end|>",   "<|kimi_image_placeholder|>",
  };
  return kTexts;
}

int synthetic_tokenizer_vocab() { return kSyntheticBaseTokens + kSyntheticSpecials; }

Result<std::vector<std::string>> train_synthetic_merges(std::uint64_t seed) {
  std::vector<std::string> vocab;  // id -> bytes
  std::map<std::string, int> id_of;
  for (int b = 0; b < 256; ++b) {
    vocab.emplace_back(1, static_cast<char>(b));
    id_of[vocab.back()] = b;
  }
  struct Word {
    std::vector<int> ids;
    long count;
  };
  std::vector<Word> words;
  for (const auto& [text, count] : count_words()) {
    Word w{{}, count};
    for (const char c : text) w.ids.push_back(static_cast<unsigned char>(c));
    words.push_back(std::move(w));
  }

  std::vector<std::string> merges;
  while (static_cast<int>(merges.size()) < kSyntheticMerges) {
    std::map<std::pair<int, int>, long> pair_counts;
    for (const Word& w : words) {
      for (std::size_t i = 0; i + 1 < w.ids.size(); ++i) pair_counts[{w.ids[i], w.ids[i + 1]}] += w.count;
    }
    std::pair<int, int> best{-1, -1};
    long best_count = 0;
    std::uint64_t best_tie = 0;
    for (const auto& [pair, count] : pair_counts) {
      const std::uint64_t tie = mix(seed ^ mix((std::uint64_t(pair.first) << 32) | std::uint64_t(pair.second)));
      if (count > best_count || (count == best_count && tie < best_tie)) {
        best = pair;
        best_count = count;
        best_tie = tie;
      }
    }
    // Pairs seen once still make valid merges (rare words become tokens); only an exhausted
    // corpus stops training, and the built-in one has thousands of pairs to spare.
    if (best_count < 1) {
      return make_error(Errc::unsupported, "synthetic tokenizer: the built-in corpus ran out of pairs after " +
                                               std::to_string(merges.size()) + " merges");
    }
    const std::string joined = vocab[best.first] + vocab[best.second];
    int joined_id;
    if (const auto it = id_of.find(joined); it != id_of.end()) {
      joined_id = it->second;  // reached before by another split; no new token
    } else {
      joined_id = static_cast<int>(vocab.size());
      vocab.push_back(joined);
      id_of[joined] = joined_id;
      merges.push_back(joined);
    }
    for (Word& w : words) {
      std::vector<int> merged;
      merged.reserve(w.ids.size());
      for (std::size_t i = 0; i < w.ids.size(); ++i) {
        if (i + 1 < w.ids.size() && w.ids[i] == best.first && w.ids[i + 1] == best.second) {
          merged.push_back(joined_id);
          ++i;
        } else {
          merged.push_back(w.ids[i]);
        }
      }
      w.ids = std::move(merged);
    }
  }
  return merges;
}

Status write_synthetic_tokenizer(const std::filesystem::path& dir, std::uint64_t seed) {
  auto merges = train_synthetic_merges(seed);
  if (!merges) return std::unexpected(merges.error());

  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    ranks += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  }
  for (std::size_t i = 0; i < merges->size(); ++i) {
    ranks += base64((*merges)[i]) + " " + std::to_string(256 + i) + "\n";
  }
  std::string specials = "[\n";
  const auto& texts = synthetic_special_texts();
  for (std::size_t i = 0; i < texts.size(); ++i) {
    specials += " {\"id\": " + std::to_string(kSyntheticBaseTokens + static_cast<int>(i)) + ", \"text\": \"" +
                json_escape(texts[i]) + "\"}" + (i + 1 < texts.size() ? ",\n" : "\n");
  }
  specials += "]\n";

  for (const auto& [name, content] : std::array<std::pair<const char*, const std::string*>, 2>{
           {{"tokenizer.model", &ranks}, {"specials.json", &specials}}}) {
    const std::filesystem::path path = dir / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(Errc::io, path.string() + ": cannot create");
    out.write(content->data(), static_cast<std::streamsize>(content->size()));
    out.close();
    if (!out) return make_error(Errc::io, path.string() + ": write failed");
  }
  return ok();
}

}  // namespace waste::synth
