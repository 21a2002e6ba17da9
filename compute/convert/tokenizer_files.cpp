#include "compute/convert/tokenizer_files.hpp"

#include <algorithm>
#include <charconv>
#include <map>

#include <nlohmann/json.hpp>

#include "compute/convert/shipped_chat.hpp"
#include "shared/container/file_io.hpp"

namespace waste::convert {
namespace {
using json = nlohmann::json;

// Same text as configs/chat/kimi-linear.json and configs/chat/kimi-k3.json.
constexpr const char* kKimiLinearChat = R"({
 "system": ["<|im_system|>system<|im_middle|>", "<|im_end|>"],
 "user": ["<|im_user|>user<|im_middle|>", "<|im_end|>"],
 "assistant": ["<|im_assistant|>assistant<|im_middle|>", "<|im_end|>"],
 "open": "<|im_assistant|>assistant<|im_middle|>"
}
)";
constexpr const char* kK3Chat = R"({
 "system": ["<|open|>message role=\"system\"<|sep|>", "<|close|>message<|sep|><|end_of_msg|>"],
 "user": ["<|open|>message role=\"user\"<|sep|>", "<|close|>message<|sep|><|end_of_msg|>"],
 "assistant": ["<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>", "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"],
 "open": "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>"
}
)";
}  // namespace

Result<std::string> specials_from_tokenizer_config(std::string_view text, std::string_view origin) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return make_error(Errc::format, std::string(origin) + ": not a JSON object");
  std::map<long long, std::string> by_id;
  if (auto it = doc.find("added_tokens_decoder"); it != doc.end() && it->is_object()) {
    for (auto t = it->begin(); t != it->end(); ++t) {
      long long id = -1;
      const std::string& key = t.key();
      auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || p != key.data() + key.size() || id < 0) {
        return make_error(Errc::format, std::string(origin) + ": added_tokens_decoder key " + key + " is not a token id");
      }
      if (!t.value().is_object() || !t.value().contains("content") || !t.value()["content"].is_string() ||
          t.value()["content"].get<std::string>().empty()) {
        return make_error(Errc::format, std::string(origin) + ": added_tokens_decoder." + key + ".content missing");
      }
      by_id[id] = t.value()["content"].get<std::string>();
    }
  }
  json out = json::array();
  for (const auto& [id, content] : by_id) out.push_back({{"id", id}, {"text", content}});
  return out.dump(1) + "\n";
}

std::string chat_format_for(const std::string& arch) {
  if (arch == "kimi-linear") return kKimiLinearChat;
  if (arch == "kimi-k3") return kK3Chat;
  // GLM-5.3-Flash: the architecture as its config names it (Glm5NextForConditionalGeneration /
  // Glm5NextForCausalLM) or the short name.
  if (arch == "glm5-next" || arch.starts_with("Glm5Next")) return std::string(kShippedGlmChat);
  // DeepSeek-V4.1-Flash: its config's architecture or model_type.
  if (arch == "deepseek-v4.1" || arch == "DeepseekV41ForCausalLM" || arch == "deepseek_v41") {
    return std::string(kShippedDeepseekV41Chat);
  }
  return {};
}

std::vector<std::string> missing_markers(const std::string& chat, const std::vector<std::string>& specials) {
  std::vector<std::string> missing;
  for (std::size_t pos = chat.find("<|"); pos != std::string::npos; pos = chat.find("<|", pos + 2)) {
    const std::size_t end = chat.find("|>", pos + 2);
    if (end == std::string::npos) break;
    const std::string marker = chat.substr(pos, end + 2 - pos);
    if (std::find(specials.begin(), specials.end(), marker) == specials.end() &&
        std::find(missing.begin(), missing.end(), marker) == missing.end()) {
      missing.push_back(marker);
    }
  }
  return missing;
}

Result<std::optional<HfTokenizer>> load_hf_tokenizer(const std::filesystem::path& src) {
  std::error_code ec;
  for (const char* name : {"tiktoken.model", "tokenizer.model"}) {
    if (std::filesystem::exists(src / name, ec)) return std::optional<HfTokenizer>();
  }
  const auto path = src / "tokenizer.json";
  if (!std::filesystem::exists(path, ec)) return std::optional<HfTokenizer>();
  auto text = read_text_file(path, 256ull << 20);
  if (!text) return std::unexpected(text.error());
  auto hf = convert_hf_tokenizer(*text, path.string());
  if (!hf) return std::unexpected(hf.error());
  return std::optional<HfTokenizer>(std::move(*hf));
}

Result<std::optional<int>> hf_eos_token_id(const std::filesystem::path& src, const HfTokenizer& hf) {
  std::error_code ec;
  const auto path = src / "tokenizer_config.json";
  if (!std::filesystem::exists(path, ec)) return std::optional<int>();
  auto text = read_text_file(path, 64ull << 20);
  if (!text) return std::unexpected(text.error());
  json doc = json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return make_error(Errc::format, path.string() + ": not a JSON object");
  auto it = doc.find("eos_token");
  if (it == doc.end() || it->is_null()) return std::optional<int>();
  std::string eos;
  if (it->is_string()) eos = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) eos = (*it)["content"].get<std::string>();
  else return make_error(Errc::format, path.string() + ": eos_token is neither a string nor {\"content\": ...}");
  for (const auto& a : hf.added) if (a.text == eos) return std::optional<int>(a.id);
  return make_error(Errc::format, path.string() + ": eos_token " + json(eos).dump() +
                                      " is not an added token of tokenizer.json");
}

Result<TokenizerOutcome> write_tokenizer_files(const std::filesystem::path& src, const std::filesystem::path& out,
                                               const std::string& arch, const HfTokenizer* hf) {
  TokenizerOutcome r;
  std::error_code ec;
  if (hf) {
    WASTE_TRY(write_file_atomic(out / "tokenizer.model", hf->rank_file));
    r.tokenizer = true;
  }
  for (const char* name : {"tiktoken.model", "tokenizer.model"}) {
    if (hf) break;
    if (std::filesystem::exists(src / name, ec)) {
      auto text = read_text_file(src / name, 256ull << 20);
      if (!text) return std::unexpected(text.error());
      WASTE_TRY(write_file_atomic(out / "tokenizer.model", *text));
      r.tokenizer = true;
      break;
    }
  }
  std::vector<std::string> specials;
  if (hf) {
    for (const auto& a : hf->added) specials.push_back(a.text);
    r.n_specials = int(specials.size());
    WASTE_TRY(write_file_atomic(out / "specials.json", specials_json(hf->added)));
  } else if (std::filesystem::exists(src / "tokenizer_config.json", ec)) {
    auto text = read_text_file(src / "tokenizer_config.json", 64ull << 20);
    if (!text) return std::unexpected(text.error());
    auto js = specials_from_tokenizer_config(*text, (src / "tokenizer_config.json").string());
    if (!js) return std::unexpected(js.error());
    for (const auto& e : json::parse(*js)) specials.push_back(e["text"].get<std::string>());
    r.n_specials = int(specials.size());
    WASTE_TRY(write_file_atomic(out / "specials.json", *js));
  }
  if (std::filesystem::exists(src / "chat_template.jinja", ec)) {
    auto text = read_text_file(src / "chat_template.jinja", 16ull << 20);
    if (!text) return std::unexpected(text.error());
    WASTE_TRY(write_file_atomic(out / "chat_template.jinja", *text));
  }
  const std::string chat = chat_format_for(arch);
  if (!chat.empty() && r.tokenizer) {
    auto missing = missing_markers(chat, specials);
    if (missing.empty()) {
      WASTE_TRY(write_file_atomic(out / "chat.json", chat));
      r.chat = true;
    } else {
      r.chat_refused = "chat.json not written: marker " + missing.front() + " is not a special token of this tokenizer";
    }
  }
  return r;
}

}  // namespace waste::convert
