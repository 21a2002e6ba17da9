#include "compute/prompt/constraint_builder.hpp"

#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compute/prompt/dsml_call_plan.hpp"
#include "compute/prompt/glm_call_plan.hpp"
#include "shared/json_depth.hpp"

namespace waste {
namespace {

// Compiled grammars by their source (a schema's sorted dump, or EBNF text), so requests with the
// same schema share one Grammar and with it the engine's token-set cache (warm masks from the
// second request on). FIFO-bounded; the lock covers lookups and inserts, never a compile.
class GrammarCache {
 public:
  static constexpr std::size_t kMaxEntries = 64;
  std::shared_ptr<const grammar::Grammar> find(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second;
  }
  void insert(const std::string& key, std::shared_ptr<const grammar::Grammar> grammar) {
    std::lock_guard lock(mutex_);
    if (!entries_.emplace(key, std::move(grammar)).second) return;
    order_.push_back(key);
    if (order_.size() > kMaxEntries) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const grammar::Grammar>> entries_;
  std::deque<std::string> order_;
};

GrammarCache& grammar_cache() {
  static GrammarCache cache;
  return cache;
}

std::unexpected<PromptError> refuse(std::string param, std::string message) {
  return std::unexpected(PromptError{std::move(param), std::move(message)});
}

ConstraintStage forced(const Tokenizer& tokenizer, const std::string& markup) {
  ConstraintStage stage;
  stage.forced = tokenizer.encode_markup(markup);
  return stage;
}

ConstraintStage constrained(std::shared_ptr<const grammar::Grammar> grammar) {
  ConstraintStage stage;
  stage.grammar = std::move(grammar);
  return stage;
}

// One forced call: `head` forced (through the arguments marker), the parameters, `tail` forced.
std::vector<ConstraintStage> call_stages(const Tokenizer& tokenizer, const std::string& head,
                                         std::shared_ptr<const grammar::Grammar> parameters, const std::string& tail) {
  std::vector<ConstraintStage> stages;
  if (!head.empty()) stages.push_back(forced(tokenizer, head));
  stages.push_back(constrained(std::move(parameters)));
  if (!tail.empty()) stages.push_back(forced(tokenizer, tail));
  return stages;
}

}  // namespace

// Every schema is compiled under the limits; its nesting is checked first without recursion
// (the cache key's dump() and the compiler both recurse).
std::expected<std::shared_ptr<const grammar::Grammar>, PromptError> compile_schema(
    const nlohmann::json& schema, const std::string& param, const grammar::CompileLimits& limits,
    std::string_view suffix) {
  if (nested_deeper_than(schema, limits.max_depth)) {
    return refuse(param, param + ": nesting deeper than " + std::to_string(limits.max_depth) + " (" +
                             limits.depth_option + ")");
  }
  if (schema.is_null() && !suffix.empty()) return refuse(param, "'" + param + "': no schema to end with a marker");
  // The suffix is part of the key, before the schema (whose dump runs to the end).
  const std::string key =
      schema.is_null() ? std::string("object")
                       : "schema:" + std::to_string(limits.max_depth) + ":" + std::to_string(limits.max_expansion) +
                             ":" + std::to_string(suffix.size()) + ":" + std::string(suffix) + ":" +
                             schema.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (auto cached = grammar_cache().find(key)) return cached;
  auto compiled = schema.is_null()   ? grammar::compile_any_json_object()
                  : suffix.empty()   ? grammar::compile_json_schema(schema, limits)
                                     : grammar::compile_json_schema_then(schema, suffix, limits);
  if (!compiled) return refuse(param, "'" + param + "': " + compiled.error().message);
  grammar_cache().insert(key, *compiled);
  return *compiled;
}

std::expected<std::shared_ptr<const grammar::Grammar>, PromptError> compile_ebnf_cached(
    const std::string& ebnf, const std::string& param, const grammar::CompileLimits& limits) {
  const std::string key = "ebnf:" + std::to_string(limits.max_expansion) + ":" + ebnf;
  if (auto cached = grammar_cache().find(key)) return cached;
  auto compiled = grammar::compile_ebnf(ebnf, limits);
  if (!compiled) return refuse(param, "'" + param + "': " + compiled.error().message);
  grammar_cache().insert(key, *compiled);
  return *compiled;
}

std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> grammar_plan(
    std::string_view ebnf, const std::string& param, const std::shared_ptr<const grammar::TokenIndex>& index,
    const grammar::CompileLimits& limits) {
  auto compiled = grammar::compile_ebnf(ebnf, limits);
  if (!compiled) return refuse(param, "'" + param + "': " + compiled.error().message);
  auto plan = std::make_shared<ConstraintPlan>();
  plan->index = index;
  plan->stages.push_back(constrained(std::move(*compiled)));
  return plan;
}

std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> make_constraint_plan(
    const OutputSpec& spec, const ChatFormat& format, const Tokenizer& tokenizer,
    const std::shared_ptr<const grammar::TokenIndex>& index, const grammar::CompileLimits& limits) {
  const bool tool_forced = spec.tool_choice == ToolChoice::required || spec.tool_choice == ToolChoice::named;
  if (spec.response_format == ResponseFormat::text && !tool_forced) return nullptr;
  auto plan = std::make_shared<ConstraintPlan>();
  plan->index = index;
  if (!tool_forced) {
    static const nlohmann::json kAnyObject;  // both branches lvalues: the schema is not copied
    const nlohmann::json& schema = spec.response_schema ? *spec.response_schema : kAnyObject;
    auto grammar = spec.response_format == ResponseFormat::json_object
                       ? compile_schema(nlohmann::json(), "response_format", limits)
                       : compile_schema(schema, "response_format.json_schema.schema", limits);
    if (!grammar) return std::unexpected(grammar.error());
    plan->stages.push_back(constrained(std::move(*grammar)));
    return plan;
  }

  if (!format.tools) {
    return refuse("tool_choice", "'tool_choice': this model's chat format has no tool-call markup "
                                 "(a \"tools\" object in chat.json)");
  }
  const ChatToolMarkup& markup = *format.tools;
  if (markup.style == ToolCallStyle::glm || markup.style == ToolCallStyle::dsml) {
    std::vector<std::size_t> chosen;
    for (std::size_t i = 0; i < spec.tools.size(); ++i) {
      if (spec.tool_choice != ToolChoice::named || spec.tools[i].name == spec.tool_choice_name) chosen.push_back(i);
    }
    if (chosen.empty()) {
      return refuse("tool_choice", spec.tool_choice == ToolChoice::named
                                       ? "'tool_choice': no tool is named \"" + spec.tool_choice_name + "\""
                                       : "'tool_choice': \"required\" needs at least one tool");
    }
    return markup.style == ToolCallStyle::glm ? glm_call_plan(spec, chosen, markup, tokenizer, index, limits)
                                              : dsml_call_plan(spec, chosen, markup, tokenizer, index, limits);
  }
  const bool kimi = markup.style == ToolCallStyle::kimi;
  const int call_index = spec.calls_in_history;
  // The text around one call to `name` (kimi: the id encodes the name and the call's index).
  const std::string open = markup.section.prefix + markup.call.prefix;
  const std::string close = kimi ? markup.call.suffix + markup.section.suffix : "}" + markup.call.suffix;
  auto name_key = [&](const std::string& name) {
    return kimi ? name + ":" + std::to_string(call_index) : name + "\"";
  };
  auto after_name = [&]() { return kimi ? markup.arguments : std::string(", \"arguments\": "); };
  const std::string name_lead = kimi ? "functions." : "{\"name\": \"";

  std::vector<std::pair<std::size_t, std::shared_ptr<const grammar::Grammar>>> chosen;
  for (std::size_t i = 0; i < spec.tools.size(); ++i) {
    const ToolDef& tool = spec.tools[i];
    if (spec.tool_choice == ToolChoice::named && tool.name != spec.tool_choice_name) continue;
    auto grammar = compile_schema(tool.parameters, "tools[" + std::to_string(i) + "].function.parameters", limits);
    if (!grammar) return std::unexpected(grammar.error());
    chosen.emplace_back(i, std::move(*grammar));
  }
  if (chosen.empty()) {
    return refuse("tool_choice", spec.tool_choice == ToolChoice::named
                                     ? "'tool_choice': no tool is named \"" + spec.tool_choice_name + "\""
                                     : "'tool_choice': \"required\" needs at least one tool");
  }
  if (chosen.size() == 1) {
    const ToolDef& tool = spec.tools[chosen[0].first];
    plan->stages = call_stages(tokenizer, open + name_lead + name_key(tool.name) + after_name(), chosen[0].second, close);
    return plan;
  }
  // Several tools: the markup up to the name is forced, a grammar picks one of the names, and
  // that name's branch forces the rest of the header and constrains its parameters.
  std::string names_rule = "root ::= ";
  ConstraintStage choice;
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    const std::string key = name_key(spec.tools[chosen[k].first].name);
    names_rule += (k ? " | " : "") + nlohmann::json(key).dump();  // names are [A-Za-z0-9_-]: no escapes
    auto branch = std::make_shared<ConstraintPlan>();
    branch->index = index;
    branch->stages = call_stages(tokenizer, after_name(), chosen[k].second, close);
    choice.branches.emplace_back(key, std::move(branch));
  }
  names_rule += "\n";
  choice.grammar = grammar_cache().find("ebnf:" + names_rule);
  if (!choice.grammar) {
    auto names = grammar::compile_ebnf(names_rule);
    if (!names) return refuse("tool_choice", "'tool_choice': the tool-name grammar did not compile: " + names.error().message);
    choice.grammar = std::move(*names);
    grammar_cache().insert("ebnf:" + names_rule, choice.grammar);
  }
  plan->stages.push_back(forced(tokenizer, open + name_lead));
  plan->stages.push_back(std::move(choice));
  return plan;
}

Result<std::shared_ptr<const grammar::Grammar>> compile_grammar_text(GrammarSource source, std::string_view text,
                                                                     const std::string& name) {
  if (source == GrammarSource::ebnf) {
    auto g = grammar::compile_ebnf(text);
    if (!g) return std::unexpected(g.error().with_context(name));
    return g;
  }
  nlohmann::json schema;
  try {
    schema = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::format, name + ": not valid JSON: " + e.what());
  }
  auto g = grammar::compile_json_schema(schema);
  if (!g) return std::unexpected(g.error().with_context(name));
  return g;
}

}  // namespace waste
