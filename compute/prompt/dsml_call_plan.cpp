#include "compute/prompt/dsml_call_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "compute/prompt/dsml.hpp"

namespace waste {
namespace {

using nlohmann::json;

std::unexpected<PromptError> refuse(std::string param, std::string message) {
  return std::unexpected(PromptError{std::move(param), std::move(message)});
}

// ---- UTF-8 as code points (the markers hold non-ASCII characters: ｜ is U+FF5C) ------------------

std::u32string code_points(std::string_view text) {
  std::u32string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
    char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n && i + std::size_t(k) < text.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + std::size_t(k)]) & 0x3F);
    }
    out.push_back(cp);
    i += std::size_t(n);
  }
  return out;
}

std::string utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

// An EBNF literal of these bytes (each a \xHH escape: one raw byte).
std::string literal_bytes(std::string_view bytes) {
  std::string out = "\"";
  for (const char c : bytes) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02X", unsigned(static_cast<unsigned char>(c)));
    out += hex;
  }
  return out + "\"";
}

std::string class_member(char32_t cp) {
  char hex[16];
  if (cp <= 0xFFFF) {
    std::snprintf(hex, sizeof hex, "\\u%04X", unsigned(cp));
  } else {
    std::snprintf(hex, sizeof hex, "\\U%08X", unsigned(cp));
  }
  return hex;
}

}  // namespace

std::string dsml_raw_text_ebnf(const std::vector<std::string>& forbidden, const std::string& end) {
  // State k: the longest prefix of a forbidden text the value ends with (0: none). A character
  // that completes a forbidden text is not allowed; every state may end the value.
  std::vector<std::u32string> texts;
  for (const std::string& f : forbidden) texts.push_back(code_points(f));
  std::vector<std::u32string> prefixes = {U""};
  std::set<char32_t> alphabet;
  for (const std::u32string& t : texts) {
    for (std::size_t k = 1; k < t.size(); ++k) {
      if (std::find(prefixes.begin(), prefixes.end(), t.substr(0, k)) == prefixes.end()) prefixes.push_back(t.substr(0, k));
    }
    alphabet.insert(t.begin(), t.end());
  }
  constexpr int kReject = -1;
  auto delta = [&](const std::u32string& seen, char32_t c) {
    const std::u32string text = seen + c;
    for (const std::u32string& t : texts) {
      if (text.ends_with(t)) return kReject;
    }
    for (std::size_t from = 0; from < text.size(); ++from) {
      const auto it = std::find(prefixes.begin(), prefixes.end(), text.substr(from));
      if (it != prefixes.end()) return int(it - prefixes.begin());
    }
    return 0;
  };
  std::string rules;
  for (std::size_t i = 0; i < prefixes.size(); ++i) {
    std::string alts = "\"\"";
    std::string excluded;
    for (const char32_t c : alphabet) {
      const int target = delta(prefixes[i], c);
      if (target == 0) continue;  // the fallback's target
      excluded += class_member(c);
      if (target != kReject) alts += " | " + literal_bytes(utf8(c)) + " r" + std::to_string(target);
    }
    alts += " | " + (excluded.empty() ? std::string(".") : "[^" + excluded + "]") + " r0";
    rules += "r" + std::to_string(i) + " ::= " + alts + "\n";
  }
  return "root ::= r0" + (end.empty() ? std::string() : " " + literal_bytes(end)) + "\n" + rules;
}

namespace {

constexpr std::string_view kAnnotations[] = {"title",    "description", "default",   "examples",
                                             "deprecated", "readOnly",  "writeOnly", "$comment"};
bool annotation(const std::string& key) {
  return std::find(std::begin(kAnnotations), std::end(kAnnotations), key) != std::end(kAnnotations);
}

struct Context {
  const Tokenizer& tokenizer;
  const ChatToolMarkup& markup;
  const grammar::CompileLimits& limits;
  std::vector<std::string> forbidden;  // texts no raw value may hold
  std::string end;                     // </｜DSML｜ parameter> as grammar bytes, "" when it is the close token
  int close = -1;                      // </｜DSML｜ parameter> as a special token
};

// One argument: its key, whether it is written string="true" (raw) or "false" (JSON), its grammar.
struct DsmlArgument {
  std::string key;
  bool raw = true;
  std::shared_ptr<const grammar::Grammar> value;
};

using GrammarOr = std::expected<std::shared_ptr<const grammar::Grammar>, PromptError>;

GrammarOr raw_text(const Context& c, const std::string& param) {
  return compile_ebnf_cached(dsml_raw_text_ebnf(c.forbidden, c.end), param, c.limits);
}

GrammarOr raw_one_of(const Context& c, const json& values, const std::string& param) {
  std::string rule = "root ::= (";
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::string text = values[i].get<std::string>();
    for (const std::string& f : c.forbidden) {
      if (text.find(f) != std::string::npos) {
        return refuse(param, "'" + param + "': the string " + values[i].dump() + " holds " + f +
                                 ", which ends a value in the DSML tool-call markup");
      }
    }
    rule += (i ? " | " : "") + literal_bytes(text);
  }
  rule += ")" + (c.end.empty() ? std::string() : " " + literal_bytes(c.end)) + "\n";
  return compile_ebnf_cached(rule, param, c.limits);
}

// Only annotations besides `allowed` (keys that do not constrain a raw string further).
bool only_annotations(const json& schema, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : schema.items()) {
    if (!annotation(key) && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) return false;
  }
  return true;
}

bool string_type(const json& type) {
  if (type.is_string()) return type.get<std::string>() == "string";
  return type.is_array() && type.size() == 1 && type[0].is_string() && type[0].get<std::string>() == "string";
}

std::expected<DsmlArgument, PromptError> argument(const Context& c, const std::string& key, const json& schema,
                                                  const std::string& param) {
  auto with = [&](bool raw, GrammarOr grammar) -> std::expected<DsmlArgument, PromptError> {
    if (!grammar) return std::unexpected(grammar.error());
    return DsmlArgument{key, raw, std::move(*grammar)};
  };
  if (schema.is_boolean() && schema.get<bool>()) return with(true, raw_text(c, param));
  if (schema.is_object()) {
    const bool typed_string = !schema.contains("type") || string_type(schema["type"]);
    if (schema.contains("const") && schema["const"].is_string() && !schema.contains("enum") && typed_string &&
        only_annotations(schema, {"const", "type"})) {
      return with(true, raw_one_of(c, json::array({schema["const"]}), param));
    }
    if (schema.contains("enum") && !schema.contains("const") && typed_string &&
        only_annotations(schema, {"enum", "type"})) {
      const json& values = schema["enum"];
      if (values.is_array() && !values.empty() &&
          std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_string(); })) {
        return with(true, raw_one_of(c, values, param));
      }
    }
    if (typed_string && only_annotations(schema, {"type"})) return with(true, raw_text(c, param));
  } else if (!schema.is_boolean()) {
    return refuse(param, "'" + param + "': must be a JSON Schema object");
  }
  // Everything else is JSON under the schema (a JSON string reads back as a string too).
  return with(false, compile_schema(schema, param, c.limits, c.end));
}

std::expected<std::vector<DsmlArgument>, PromptError> arguments_of(const Context& c, const ToolDef& tool,
                                                                   std::size_t position) {
  const std::string base = "tools[" + std::to_string(position) + "].function.parameters";
  const json& parameters = tool.parameters;
  std::vector<DsmlArgument> out;
  if (parameters.is_null()) return out;
  if (!parameters.is_object()) return refuse(base, "'" + base + "': must be a JSON Schema object");
  for (const char* key : {"$ref", "anyOf", "oneOf", "allOf"}) {
    if (parameters.contains(key)) {
      return refuse(base, "'" + base + "': \"" + key + "\" at the top of the parameters cannot be forced in the DSML "
                                       "tool-call markup (its arguments are the \"required\" properties)");
    }
  }
  if (!parameters.contains("required")) return out;
  const json& required = parameters["required"];
  const std::string where = base + ".required";
  if (!required.is_array()) return refuse(where, "'" + where + "': must be an array of property names");
  static const json kNoProperties = json::object();
  const json& properties =
      parameters.contains("properties") && parameters["properties"].is_object() ? parameters["properties"] : kNoProperties;
  static const json kAnyValue = json::object();
  for (const json& name : required) {
    if (!name.is_string()) return refuse(where, "'" + where + "': must be an array of property names");
    const std::string key = name.get<std::string>();
    if (std::any_of(out.begin(), out.end(), [&](const DsmlArgument& a) { return a.key == key; })) continue;
    if (key.empty() || key.find_first_of("\"<") != std::string::npos) {
      return refuse(where, "'" + where + "': the key " + name.dump() +
                               " cannot be written in a DSML parameter tag (empty, or holding '\"' or '<')");
    }
    const json& schema = properties.contains(key) ? properties[key] : kAnyValue;
    auto a = argument(c, key, schema, base + ".properties." + key);
    if (!a) return std::unexpected(a.error());
    out.push_back(std::move(*a));
  }
  return out;
}

ConstraintStage forced_segments(const Tokenizer& tokenizer, const std::vector<ChatSegment>& segments) {
  ConstraintStage stage;
  stage.forced = tokenize_segments(tokenizer, segments);
  return stage;
}

// The stages from `lead` (forced before the first argument, through the invoke header's end) to
// the calls block's close, in dsml_invoke()'s layout.
std::vector<ConstraintStage> call_stages(const Context& c, std::vector<ChatSegment> lead,
                                         const std::vector<DsmlArgument>& arguments) {
  std::vector<ConstraintStage> stages;
  for (std::size_t k = 0; k < arguments.size(); ++k) {
    const DsmlArgument& a = arguments[k];
    if (k > 0) lead.push_back({"\n", true});
    lead.push_back({std::string(kDsmlParameterOpen), true});
    lead.push_back({a.key, false});
    lead.push_back({a.raw ? "\" string=\"true\">" : "\" string=\"false\">", true});
    stages.push_back(forced_segments(c.tokenizer, lead));
    lead.clear();
    ConstraintStage value;
    value.grammar = a.value;
    value.close = c.close;
    stages.push_back(std::move(value));
  }
  lead.push_back({"\n" + c.markup.call.suffix + "\n" + c.markup.section.suffix, true});
  stages.push_back(forced_segments(c.tokenizer, lead));
  return stages;
}

}  // namespace

std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> dsml_call_plan(
    const OutputSpec& spec, const std::vector<std::size_t>& chosen, const ChatToolMarkup& markup,
    const Tokenizer& tokenizer, const std::shared_ptr<const grammar::TokenIndex>& index,
    const grammar::CompileLimits& limits) {
  Context c{tokenizer, markup, limits, {std::string(kDsmlParameterClose)}, {}, -1};
  if (!markup.call.suffix.empty() && markup.call.suffix != kDsmlParameterClose) c.forbidden.push_back(markup.call.suffix);
  const std::vector<int> close = tokenizer.encode_markup(kDsmlParameterClose);
  if (close.size() == 1 && tokenizer.is_special(close.front())) {
    c.close = close.front();
  } else {
    c.end = std::string(kDsmlParameterClose);
  }
  std::vector<std::vector<DsmlArgument>> arguments;
  for (const std::size_t i : chosen) {
    auto a = arguments_of(c, spec.tools[i], i);
    if (!a) return std::unexpected(a.error());
    arguments.push_back(std::move(*a));
  }
  const std::string open = markup.section.prefix + "\n" + markup.call.prefix + " name=\"";
  auto plan = std::make_shared<ConstraintPlan>();
  plan->index = index;
  if (chosen.size() == 1) {
    plan->stages = call_stages(c, {{open, true}, {spec.tools[chosen[0]].name, false}, {"\">\n", true}}, arguments[0]);
    return plan;
  }
  // Several tools: a grammar picks the name with its closing quote (the quote ends the choice, so
  // one name may begin another); that name's branch goes on from the header's '>'.
  std::string names_rule = "root ::= ";
  ConstraintStage choice;
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    const std::string key = spec.tools[chosen[k]].name + "\"";
    names_rule += (k ? " | " : "") + literal_bytes(key);
    auto branch = std::make_shared<ConstraintPlan>();
    branch->index = index;
    branch->stages = call_stages(c, {{">\n", true}}, arguments[k]);
    choice.branches.emplace_back(key, std::move(branch));
  }
  auto names = compile_ebnf_cached(names_rule + "\n", "tool_choice", limits);
  if (!names) return std::unexpected(names.error());
  choice.grammar = std::move(*names);
  plan->stages.push_back(forced_segments(tokenizer, {{open, true}}));
  plan->stages.push_back(std::move(choice));
  return plan;
}

}  // namespace waste
