#include "compute/prompt/glm_call_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace waste {
namespace {

using nlohmann::json;

std::unexpected<PromptError> refuse(std::string param, std::string message) {
  return std::unexpected(PromptError{std::move(param), std::move(message)});
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// ---- the raw string value: a small automaton written out as EBNF rules ---------------------

constexpr int kReject = -1;

struct RawState {
  bool accept = true;                 // the value may end here
  std::map<std::uint32_t, int> next;  // characters with their own target (kReject: not allowed)
  int fallback = 0;                   // every other character
};

std::string literal_bytes(std::string_view bytes) {
  std::string out = "\"";
  for (const char c : bytes) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02X", unsigned(static_cast<unsigned char>(c)));
    out += hex;
  }
  return out + "\"";
}

std::string class_member(std::uint32_t cp) {
  char hex[12];
  std::snprintf(hex, sizeof hex, "\\u%04X", unsigned(cp));
  return hex;
}

std::string emit_rules(const std::vector<RawState>& states) {
  std::string out;
  for (std::size_t i = 0; i < states.size(); ++i) {
    const RawState& s = states[i];
    std::vector<std::string> alts;
    if (s.accept) alts.emplace_back("\"\"");
    std::string excluded;
    for (const auto& [cp, target] : s.next) {
      if (target == s.fallback) continue;
      excluded += class_member(cp);
      if (target != kReject) alts.push_back(literal_bytes(std::string(1, char(cp))) + " r" + std::to_string(target));
    }
    if (s.fallback != kReject) {
      alts.push_back((excluded.empty() ? std::string(".") : "[^" + excluded + "]") + " r" + std::to_string(s.fallback));
    }
    out += "r" + std::to_string(i) + " ::=";
    for (std::size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : " ") + alts[k];
    out += "\n";
  }
  return out;
}

}  // namespace

std::string glm_raw_string_ebnf(const std::vector<std::string>& forbidden, const std::string& end) {
  std::vector<RawState> states;
  // States 0..: which prefix of a forbidden text the value ends with (0: none). A character that
  // completes a forbidden text is rejected.
  std::vector<std::string> prefixes = {""};
  std::string alphabet;
  for (const std::string& f : forbidden) {
    for (std::size_t k = 1; k < f.size(); ++k) {
      if (std::find(prefixes.begin(), prefixes.end(), f.substr(0, k)) == prefixes.end()) prefixes.push_back(f.substr(0, k));
    }
    for (const char c : f) {
      if (alphabet.find(c) == std::string::npos) alphabet += c;
    }
  }
  auto delta = [&](const std::string& seen, char c) {
    const std::string text = seen + c;
    for (const std::string& f : forbidden) {
      if (text.ends_with(f)) return kReject;
    }
    for (std::size_t from = 0; from < text.size(); ++from) {
      const auto it = std::find(prefixes.begin(), prefixes.end(), text.substr(from));
      if (it != prefixes.end()) return int(it - prefixes.begin());
    }
    return 0;
  };
  for (const std::string& prefix : prefixes) {
    RawState s;
    for (const char c : alphabet) s.next[std::uint32_t(static_cast<unsigned char>(c))] = delta(prefix, c);
    states.push_back(std::move(s));
  }
  // Then the texts nlohmann reads as a JSON value other than a string (a number, true, false or
  // null, trailing whitespace allowed): the value may not end in a state that completes one. Off
  // these paths it is ordinary text (a forbidden text starts with '<', which none of them holds).
  auto add = [&](bool accept) {
    states.push_back(RawState{accept, {}, 0});
    return int(states.size() - 1);
  };
  const int start = add(true);
  const int minus = add(true), zero = add(false), integer = add(false), dot = add(true), fraction = add(false);
  const int exp = add(true), exp_sign = add(true), exp_digits = add(false), trailing = add(false);
  auto on = [&](int from, std::string_view chars, int to) {
    for (const char c : chars) states[std::size_t(from)].next[std::uint32_t(static_cast<unsigned char>(c))] = to;
  };
  constexpr std::string_view kDigits = "0123456789", kNonZero = "123456789", kSpace = " \t\n\r";
  on(start, kSpace, kReject);  // leading whitespace: " 3" reads as 3
  on(start, "{[", kReject);    // an object or array may read as one
  states[std::size_t(start)].next[0xFEFF] = kReject;  // a byte order mark is skipped by the reader
  on(start, "-", minus);
  on(start, "0", zero);
  on(start, kNonZero, integer);
  on(minus, "0", zero);
  on(minus, kNonZero, integer);
  on(zero, ".", dot);
  on(zero, "eE", exp);
  on(zero, kSpace, trailing);
  on(integer, kDigits, integer);
  on(integer, ".", dot);
  on(integer, "eE", exp);
  on(integer, kSpace, trailing);
  on(dot, kDigits, fraction);
  on(fraction, kDigits, fraction);
  on(fraction, "eE", exp);
  on(fraction, kSpace, trailing);
  on(exp, "+-", exp_sign);
  on(exp, kDigits, exp_digits);
  on(exp_sign, kDigits, exp_digits);
  on(exp_digits, kDigits, exp_digits);
  on(exp_digits, kSpace, trailing);
  on(trailing, kSpace, trailing);
  for (const std::string_view word : {"true", "false", "null"}) {
    int at = start;
    for (std::size_t k = 0; k < word.size(); ++k) {
      const int next = add(k + 1 < word.size());
      on(at, word.substr(k, 1), next);
      at = next;
    }
    on(at, kSpace, trailing);
  }
  // Leaving these paths on a forbidden text's first character starts that text's automaton.
  for (std::size_t i = std::size_t(start); i < states.size(); ++i) {
    for (const char c : alphabet) states[i].next.emplace(std::uint32_t(static_cast<unsigned char>(c)), states[0].next[std::uint32_t(static_cast<unsigned char>(c))]);
  }
  return "root ::= r" + std::to_string(start) + (end.empty() ? std::string() : " " + literal_bytes(end)) + "\n" +
         emit_rules(states);
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
  const std::shared_ptr<const grammar::TokenIndex>& index;
  const grammar::CompileLimits& limits;
  std::vector<std::string> forbidden;  // texts no raw value may hold
  std::string end;                     // </arg_value> as grammar bytes, "" when it is the close token
  int close = -1;                      // </arg_value> as a special token
};

using GrammarOr = std::expected<std::shared_ptr<const grammar::Grammar>, PromptError>;

GrammarOr raw_string(const Context& c, const std::string& param) {
  return compile_ebnf_cached(glm_raw_string_ebnf(c.forbidden, c.end), param, c.limits);
}

// One of a list of values: strings raw, the others as JSON.
GrammarOr one_of(const Context& c, const json& values, const std::string& param) {
  std::string rule = "root ::= (";
  for (std::size_t i = 0; i < values.size(); ++i) {
    const json& v = values[i];
    std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    if (v.is_string()) {
      const json read = json::parse(text, nullptr, false);
      if (!read.is_discarded() && !read.is_string()) {
        return refuse(param, "'" + param + "': the string " + v.dump() +
                                 " would read back as another JSON value in the glm tool-call markup (strings are "
                                 "written unquoted)");
      }
      for (const std::string& f : c.forbidden) {
        if (text.find(f) != std::string::npos) {
          return refuse(param, "'" + param + "': the string " + v.dump() + " holds " + f +
                                   ", which ends a value in the glm tool-call markup");
        }
      }
    }
    rule += (i ? " | " : "") + literal_bytes(text);
  }
  rule += ")" + (c.end.empty() ? std::string() : " " + literal_bytes(c.end)) + "\n";
  return compile_ebnf_cached(rule, param, c.limits);
}

GrammarOr value_grammar(const Context& c, const json& schema, const std::string& param) {
  if (schema.is_boolean() && schema.get<bool>()) return raw_string(c, param);
  if (!schema.is_object()) return refuse(param, "'" + param + "': must be a JSON Schema object");
  if (schema.contains("const")) return one_of(c, json::array({schema["const"]}), param);
  if (schema.contains("enum")) {
    const json& values = schema["enum"];
    if (!values.is_array() || values.empty()) return refuse(param, "'" + param + "': \"enum\" must be a non-empty array");
    return one_of(c, values, param);
  }
  if (!schema.contains("type")) {
    for (const auto& [key, value] : schema.items()) {
      if (!annotation(key)) {
        return refuse(param, "'" + param + "': a forced argument in the glm tool-call markup needs a \"type\" or an "
                                           "\"enum\" (strings are written unquoted, other values as JSON)");
      }
    }
    return raw_string(c, param);  // any value: text is one
  }
  const json& type = schema["type"];
  std::vector<std::string> types;
  if (type.is_string()) types.push_back(type.get<std::string>());
  if (type.is_array()) {
    for (const json& t : type) {
      if (t.is_string()) types.push_back(t.get<std::string>());
    }
  }
  if (std::find(types.begin(), types.end(), "string") == types.end()) {
    return compile_schema(schema, param, c.limits, c.end);  // never a string: JSON, as the parser reads it
  }
  if (types.size() != 1) {
    return refuse(param, "'" + param + "': a value that may be a string or another type cannot be forced in the glm "
                                       "tool-call markup (strings are written unquoted, other values as JSON)");
  }
  for (const auto& [key, value] : schema.items()) {
    if (key != "type" && !annotation(key)) {
      return refuse(param, "'" + param + "': \"" + key + "\" on a string cannot be enforced in the glm tool-call "
                                         "markup (strings are written unquoted)");
    }
  }
  return raw_string(c, param);
}

struct GlmArgument {
  std::string key;
  std::shared_ptr<const grammar::Grammar> value;
};

std::expected<std::vector<GlmArgument>, PromptError> arguments_of(const Context& c, const ToolDef& tool,
                                                                  std::size_t position) {
  const std::string base = "tools[" + std::to_string(position) + "].function.parameters";
  const json& parameters = tool.parameters;
  std::vector<GlmArgument> out;
  if (parameters.is_null()) return out;
  if (!parameters.is_object()) return refuse(base, "'" + base + "': must be a JSON Schema object");
  for (const char* key : {"$ref", "anyOf", "oneOf", "allOf"}) {
    if (parameters.contains(key)) {
      return refuse(base, "'" + base + "': \"" + key + "\" at the top of the parameters cannot be forced in the glm "
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
    if (std::any_of(out.begin(), out.end(), [&](const GlmArgument& a) { return a.key == key; })) continue;
    if (key.empty() || key.find('<') != std::string::npos || is_space(key.front()) || is_space(key.back())) {
      return refuse(where, "'" + where + "': the key " + name.dump() +
                               " cannot be written between <arg_key> markers (empty, holding '<', or starting or "
                               "ending with whitespace)");
    }
    const json& schema = properties.contains(key) ? properties[key] : kAnyValue;
    auto value = value_grammar(c, schema, base + ".properties." + key);
    if (!value) return std::unexpected(value.error());
    out.push_back({key, std::move(*value)});
  }
  return out;
}

ConstraintStage forced_segments(const Tokenizer& tokenizer, const std::vector<ChatSegment>& segments) {
  ConstraintStage stage;
  stage.forced = tokenize_segments(tokenizer, segments);
  return stage;
}

// The stages from `lead` (forced before the first argument) to the call's close.
std::vector<ConstraintStage> call_stages(const Context& c, std::vector<ChatSegment> lead,
                                         const std::vector<GlmArgument>& arguments) {
  std::vector<ConstraintStage> stages;
  for (const GlmArgument& a : arguments) {
    lead.push_back({std::string(kGlmKeyOpen), true});
    lead.push_back({a.key, false});
    lead.push_back({std::string(kGlmKeyClose) + std::string(kGlmValueOpen), true});
    stages.push_back(forced_segments(c.tokenizer, lead));
    lead.clear();
    ConstraintStage value;
    value.grammar = a.value;
    value.close = c.close;
    stages.push_back(std::move(value));
  }
  lead.push_back({c.markup.call.suffix + c.markup.section.suffix, true});
  stages.push_back(forced_segments(c.tokenizer, lead));
  return stages;
}

}  // namespace

std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> glm_call_plan(
    const OutputSpec& spec, const std::vector<std::size_t>& chosen, const ChatToolMarkup& markup,
    const Tokenizer& tokenizer, const std::shared_ptr<const grammar::TokenIndex>& index,
    const grammar::CompileLimits& limits) {
  Context c{tokenizer, markup, index, limits, {std::string(kGlmValueClose)}, {}, -1};
  if (markup.call.suffix != kGlmValueClose) c.forbidden.push_back(markup.call.suffix);
  for (const std::string& f : c.forbidden) {
    if (f.empty() || f.front() != '<' || f.find('<', 1) != std::string::npos) {
      return refuse("tool_choice", "'tool_choice': the glm call close marker \"" + f +
                                       "\" must start with '<' and hold no other '<' for a call to be forced");
    }
  }
  const std::vector<int> close = tokenizer.encode_markup(kGlmValueClose);
  if (close.size() == 1 && tokenizer.is_special(close.front())) {
    c.close = close.front();
  } else {
    c.end = std::string(kGlmValueClose);
  }
  std::vector<std::vector<GlmArgument>> arguments;
  for (const std::size_t i : chosen) {
    auto a = arguments_of(c, spec.tools[i], i);
    if (!a) return std::unexpected(a.error());
    arguments.push_back(std::move(*a));
  }
  const std::string open = markup.section.prefix + markup.call.prefix;
  auto plan = std::make_shared<ConstraintPlan>();
  plan->index = index;
  if (chosen.size() == 1) {
    plan->stages = call_stages(c, {{open, true}, {spec.tools[chosen[0]].name, false}}, arguments[0]);
    return plan;
  }
  // Several tools: nothing but a special token follows a name, so no name may begin another.
  for (const std::size_t a : chosen) {
    for (const std::size_t b : chosen) {
      const std::string& x = spec.tools[a].name;
      const std::string& y = spec.tools[b].name;
      if (a != b && y.starts_with(x)) {
        return refuse("tool_choice", "'tool_choice': \"required\" in the glm tool-call markup needs tool names none of "
                                     "which begins another (\"" + x + "\" begins \"" + y + "\"); name the tool");
      }
    }
  }
  std::string names_rule = "root ::= ";
  ConstraintStage choice;
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    const std::string& name = spec.tools[chosen[k]].name;
    names_rule += (k ? " | " : "") + literal_bytes(name);
    auto branch = std::make_shared<ConstraintPlan>();
    branch->index = index;
    branch->stages = call_stages(c, {}, arguments[k]);
    choice.branches.emplace_back(name, std::move(branch));
  }
  auto names = compile_ebnf_cached(names_rule + "\n", "tool_choice", limits);
  if (!names) return std::unexpected(names.error());
  choice.grammar = std::move(*names);
  plan->stages.push_back(forced_segments(tokenizer, {{open, true}}));
  plan->stages.push_back(std::move(choice));
  return plan;
}

}  // namespace waste
