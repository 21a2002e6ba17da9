// JSON Schema (a subset of draft 2020-12) -> grammar. Output is compact JSON (no whitespace
// between tokens), properties in the schema's key order (nlohmann sorts keys). Every keyword is
// either enforced, an annotation (ignored by validation too), or refused with its name and path.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "compute/sampling/grammar/automaton.hpp"
#include "compute/sampling/grammar/charclass.hpp"
#include "compute/sampling/grammar/grammar.hpp"
#include "compute/sampling/grammar/regex.hpp"

namespace waste::grammar {
namespace {

using json = nlohmann::json;

const std::set<std::string, std::less<>> kAnnotations = {
    "$schema", "$id", "$comment", "$anchor", "title", "description", "default", "examples",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
const std::set<std::string, std::less<>> kKnown = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "anyOf", "oneOf", "$ref", "uniqueItems"};
constexpr std::int64_t kMaxBound = 1000000000000000000LL;  // 1e18: |integer bounds| beyond are refused
constexpr int kMaxCount = 4096;                              // lengths and item counts above are refused

std::string json_escape_key(const std::string& s) { return json(s).dump(); }

std::string pointer_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::uint64_t pow10u(int d) {
  std::uint64_t v = 1;
  for (int i = 0; i < d; ++i) v *= 10;
  return v;
}
int digits(std::uint64_t v) {
  int d = 1;
  while (v >= 10) v /= 10, ++d;
  return d;
}

Expr digit() { return Expr::byte_range('0', '9'); }
Expr digits_n(std::size_t n) { return Expr::repeat(digit(), int(n), int(n)); }

// Decimal strings of equal length, a <= b, no sign: every value between (leading digit may be
// 0 only when the length is 1, which the callers guarantee).
Expr same_length(const std::string& a, const std::string& b) {
  const std::size_t n = a.size();
  const auto r = [](char lo, char hi) { return Expr::byte_range(static_cast<unsigned char>(lo), static_cast<unsigned char>(hi)); };
  if (n == 1) return r(a[0], b[0]);
  const std::string at = a.substr(1), bt = b.substr(1);
  if (a[0] == b[0]) return Expr::seq({Expr::byte(static_cast<unsigned char>(a[0])), same_length(at, bt)});
  if (at == std::string(n - 1, '0') && bt == std::string(n - 1, '9')) return Expr::seq({r(a[0], b[0]), digits_n(n - 1)});
  std::vector<Expr> alts;
  alts.push_back(Expr::seq({Expr::byte(static_cast<unsigned char>(a[0])), same_length(at, std::string(n - 1, '9'))}));
  if (a[0] + 1 <= b[0] - 1) alts.push_back(Expr::seq({r(char(a[0] + 1), char(b[0] - 1)), digits_n(n - 1)}));
  alts.push_back(Expr::seq({Expr::byte(static_cast<unsigned char>(b[0])), same_length(std::string(n - 1, '0'), bt)}));
  return Expr::alt(std::move(alts));
}

Expr nonneg_range(std::uint64_t lo, std::uint64_t hi) {
  std::vector<Expr> alts;
  for (int d = digits(lo); d <= digits(hi); ++d) {
    const std::uint64_t a = std::max(lo, d == 1 ? 0 : pow10u(d - 1));
    const std::uint64_t b = std::min(hi, pow10u(d) - 1);
    if (a <= b) alts.push_back(same_length(std::to_string(a), std::to_string(b)));
  }
  return Expr::alt(std::move(alts));
}

Expr at_least(std::uint64_t lo) {
  const int d = digits(lo);
  return Expr::alt({nonneg_range(lo, pow10u(d) - 1),
                    Expr::seq({Expr::byte_range('1', '9'), digits_n(std::size_t(d - 1) + 1), Expr::repeat(digit(), 0, -1)})});
}

Expr integer_range(std::optional<std::int64_t> lo, std::optional<std::int64_t> hi) {
  std::vector<Expr> alts;
  if (!hi || *hi >= 0) {
    const std::uint64_t l = std::uint64_t(std::max<std::int64_t>(lo.value_or(0), 0));
    alts.push_back(hi ? nonneg_range(l, std::uint64_t(*hi)) : at_least(l));
  }
  if (!lo || *lo < 0) {
    // Magnitudes of the negative values; never "-0".
    const std::uint64_t mlo = (hi && *hi < 0) ? std::uint64_t(-*hi) : 1;
    alts.push_back(Expr::seq({Expr::byte('-'), lo ? nonneg_range(mlo, std::uint64_t(-*lo)) : at_least(mlo)}));
  }
  return Expr::alt(std::move(alts));
}

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, const CompileLimits& limits) : root_(root), limits_(limits) {}

  // The schema's value, then `suffix` (bytes, empty = none).
  Result<std::shared_ptr<const Grammar>> run(std::string_view suffix = {}) {
    const int root = b_.declare("root");
    auto e = compile(root_, "");
    if (!e) return std::unexpected(e.error());
    b_.define(root, suffix.empty() ? std::move(*e) : Expr::seq({std::move(*e), Expr::literal(suffix)}));
    return b_.build(root, limits_, started_);
  }

  Result<std::shared_ptr<const Grammar>> any_object() {
    const int root = b_.add("root", Expr::ref(object_rule()));
    return b_.build(root);
  }

 private:
  static std::unexpected<Error> refuse(const std::string& what, const std::string& path) {
    return make_error(Errc::unsupported, what + " at " + (path.empty() ? "the schema root" : path) + " is not supported");
  }
  static std::unexpected<Error> bad(const std::string& what, const std::string& path) {
    return make_error(Errc::format, "JSON Schema " + (path.empty() ? "root" : path) + ": " + what);
  }

  // ---- the generic JSON rules (created on first use) -----------------------------------------

  static std::vector<Expr> string_char_alts() {
    std::vector<Expr> alts;
    ByteSet plain;
    for (unsigned c = 0x20; c < 0x80; ++c) {
      if (c != '"' && c != '\\') plain.set(c);
    }
    alts.push_back(Expr::byte_set(plain));
    CharClass multi;
    multi.add(0x80, 0x10FFFF);
    Expr m = multi.to_expr();
    for (Expr& k : m.kids) alts.push_back(std::move(k));
    ByteSet esc;
    for (char c : std::string("\"\\/bfnrt")) esc.set(static_cast<unsigned char>(c));
    alts.push_back(Expr::seq({Expr::byte('\\'), Expr::byte_set(esc)}));
    // \uXXXX without surrogates (a lone surrogate is not a character; a pair would count as one).
    auto hex = [] {
      ByteSet h;
      for (char c : std::string("0123456789abcdefABCDEF")) h.set(static_cast<unsigned char>(c));
      return Expr::byte_set(h);
    };
    ByteSet first;
    for (char c : std::string("0123456789abcABCefEF")) first.set(static_cast<unsigned char>(c));
    ByteSet d_low;
    for (char c : std::string("01234567")) d_low.set(static_cast<unsigned char>(c));
    ByteSet d;
    d.set('d'), d.set('D');
    alts.push_back(Expr::seq({Expr::literal("\\u"), Expr::byte_set(first), hex(), hex(), hex()}));
    alts.push_back(Expr::seq({Expr::literal("\\u"), Expr::byte_set(d), Expr::byte_set(d_low), hex(), hex()}));
    return alts;
  }

  static Expr quoted(Expr body) { return Expr::seq({Expr::byte('"'), std::move(body), Expr::byte('"')}); }

  int string_rule() {
    if (string_ < 0) string_ = b_.add("string", quoted(Expr::repeat(Expr::alt(string_char_alts()), 0, -1)));
    return string_;
  }
  int number_rule() {
    if (number_ < 0) {
      Expr intpart = Expr::alt({Expr::byte('0'), Expr::seq({Expr::byte_range('1', '9'), Expr::repeat(digit(), 0, -1)})});
      ByteSet e, sign;
      e.set('e'), e.set('E'), sign.set('+'), sign.set('-');
      number_ = b_.add("number", Expr::seq({Expr::repeat(Expr::byte('-'), 0, 1), intpart,
                                            Expr::repeat(Expr::seq({Expr::byte('.'), Expr::repeat(digit(), 1, -1)}), 0, 1),
                                            Expr::repeat(Expr::seq({Expr::byte_set(e), Expr::repeat(Expr::byte_set(sign), 0, 1),
                                                                    Expr::repeat(digit(), 1, -1)}),
                                                         0, 1)}));
    }
    return number_;
  }
  int value_rule() {
    if (value_ < 0) {
      value_ = b_.declare("value");
      const int obj = object_rule(), arr = array_rule();
      b_.define(value_, Expr::alt({Expr::ref(obj), Expr::ref(arr), Expr::ref(string_rule()), Expr::ref(number_rule()),
                                   Expr::literal("true"), Expr::literal("false"), Expr::literal("null")}));
    }
    return value_;
  }
  int object_rule() {
    if (object_ < 0) {
      object_ = b_.declare("object");
      const int member = b_.declare("member");
      b_.define(member, Expr::seq({Expr::ref(string_rule()), Expr::byte(':'), Expr::ref(value_rule())}));
      b_.define(object_, Expr::seq({Expr::byte('{'),
                                    Expr::repeat(Expr::seq({Expr::ref(member), Expr::repeat(Expr::seq({Expr::byte(','), Expr::ref(member)}), 0, -1)}), 0, 1),
                                    Expr::byte('}')}));
    }
    return object_;
  }
  int array_rule() {
    if (array_ < 0) {
      array_ = b_.declare("array");
      const int v = value_rule();
      b_.define(array_, Expr::seq({Expr::byte('['),
                                   Expr::repeat(Expr::seq({Expr::ref(v), Expr::repeat(Expr::seq({Expr::byte(','), Expr::ref(v)}), 0, -1)}), 0, 1),
                                   Expr::byte(']')}));
    }
    return array_;
  }

  // ---- schemas --------------------------------------------------------------------------------

  // A sub-schema in a rule of its own (so it is lowered once however often it is referenced).
  Result<int> rule_for(const json& s, const std::string& path) {
    const int id = b_.declare("schema:" + path);
    auto e = compile(s, path);
    if (!e) return std::unexpected(e.error());
    b_.define(id, std::move(*e));
    return id;
  }

  Result<Expr> ref(const json& s, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != "$ref" && !kAnnotations.contains(it.key())) return refuse("'$ref' with sibling keyword '" + it.key() + "'", path);
    }
    if (!s["$ref"].is_string()) return bad("'$ref' must be a string", path);
    const std::string target = s["$ref"].get<std::string>();
    if (target.empty() || target[0] != '#') return refuse("'$ref' to '" + target + "' (only local '#...' pointers)", path);
    if (auto it = refs_.find(target); it != refs_.end()) return Expr::ref(it->second);
    const json* node = nullptr;
    try {
      node = &root_.at(json::json_pointer(target.substr(1)));
    } catch (const json::exception&) {
      return bad("'$ref' '" + target + "' does not resolve", path);
    }
    const int id = b_.declare("ref:" + target);
    refs_.emplace(target, id);
    auto e = compile(*node, target.substr(1));
    if (!e) return std::unexpected(e.error());
    b_.define(id, std::move(*e));
    return Expr::ref(id);
  }

  static bool type_matches(const json& v, const std::string& t) {
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    return false;
  }

  Result<std::vector<std::string>> types_of(const json& s, const std::string& path) {
    static const std::set<std::string, std::less<>> kTypes = {"string", "integer", "number", "boolean", "null", "object", "array"};
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      std::vector<json> list = t.is_array() ? t.get<std::vector<json>>() : std::vector<json>{t};
      for (const json& x : list) {
        if (!x.is_string() || !kTypes.contains(x.get<std::string>())) return bad("'type' " + x.dump() + " is not a JSON type", path);
        types.push_back(x.get<std::string>());
      }
      if (types.empty()) return bad("'type' is an empty list", path);
      return types;
    }
    // No type: the keywords say which types are constrained; without any, any value.
    auto has = [&](std::initializer_list<const char*> ks) {
      for (const char* k : ks) {
        if (s.contains(k)) return true;
      }
      return false;
    };
    if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (has({"items", "prefixItems", "minItems", "maxItems", "uniqueItems"})) types.push_back("array");
    if (has({"minLength", "maxLength", "pattern"})) types.push_back("string");
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("integer");
    return types;
  }

  // compile() nests once per sub-schema and per $ref hop: the depth limit bounds its recursion.
  struct Nesting {
    explicit Nesting(int& d) : depth(++d) {}
    ~Nesting() { --depth; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    int& depth;
  };

  Result<Expr> compile(const json& s, const std::string& path) {
    const Nesting nesting(depth_);
    if (depth_ > limits_.max_depth) {
      return make_error(Errc::unsupported, "schema nesting deeper than " + std::to_string(limits_.max_depth) +
                                               (limits_.depth_option.empty() ? "" : " (" + limits_.depth_option + ")") +
                                               " at " + (path.empty() ? "the schema root" : path) +
                                               " ($ref hops count as levels)");
    }
    WASTE_TRY(check_compile_time(limits_, started_));
    if (s.is_boolean()) {
      if (s.get<bool>()) return Expr::ref(value_rule());
      return refuse("the schema 'false' (no value can satisfy it)", path);
    }
    if (!s.is_object()) return bad("a schema must be an object or a boolean", path);
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kKnown.contains(it.key()) && !kAnnotations.contains(it.key())) {
        return make_error(Errc::unsupported, "unsupported JSON Schema keyword '" + it.key() + "' at " +
                                                 (path.empty() ? "the schema root" : path));
      }
    }
    if (s.contains("$ref")) return ref(s, path);
    for (const char* combinator : {"anyOf", "oneOf"}) {
      if (!s.contains(combinator)) continue;
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (it.key() != combinator && !kAnnotations.contains(it.key())) {
          return refuse(std::string("'") + combinator + "' with sibling keyword '" + it.key() + "'", path);
        }
      }
      const json& list = s[combinator];
      if (!list.is_array() || list.empty()) return bad(std::string("'") + combinator + "' must be a non-empty array", path);
      std::vector<Expr> alts;
      for (std::size_t i = 0; i < list.size(); ++i) {
        auto r = rule_for(list[i], path + "/" + combinator + "/" + std::to_string(i));
        if (!r) return std::unexpected(r.error());
        alts.push_back(Expr::ref(*r));
      }
      return Expr::alt(std::move(alts));
    }
    auto types = types_of(s, path);
    if (!types) return std::unexpected(types.error());
    if (s.contains("enum") || s.contains("const")) return literals(s, *types, path);
    if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>())) {
      return refuse("'uniqueItems' true", path);
    }
    if (types->empty()) return Expr::ref(value_rule());
    std::vector<Expr> alts;
    for (const std::string& t : *types) {
      Result<Expr> e = t == "string"    ? string_schema(s, path)
                       : t == "integer" ? integer_schema(s, path)
                       : t == "number"  ? number_schema(s, path)
                       : t == "boolean" ? Result<Expr>(Expr::alt({Expr::literal("true"), Expr::literal("false")}))
                       : t == "null"    ? Result<Expr>(Expr::literal("null"))
                       : t == "object"  ? object_schema(s, path)
                                        : array_schema(s, path);
      if (!e) return e;
      alts.push_back(std::move(*e));
    }
    return Expr::alt(std::move(alts));
  }

  Result<Expr> literals(const json& s, const std::vector<std::string>& types, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != "enum" && it.key() != "const" && it.key() != "type" && !kAnnotations.contains(it.key())) {
        return refuse("'" + std::string(s.contains("enum") ? "enum" : "const") + "' with sibling keyword '" + it.key() + "'", path);
      }
    }
    std::vector<json> values;
    if (s.contains("const")) {
      values.push_back(s["const"]);
    } else {
      if (!s["enum"].is_array() || s["enum"].empty()) return bad("'enum' must be a non-empty array", path);
      values = s["enum"].get<std::vector<json>>();
    }
    std::vector<Expr> alts;
    for (const json& v : values) {
      bool fits = types.empty();
      for (const std::string& t : types) fits = fits || type_matches(v, t);
      if (fits) alts.push_back(Expr::literal(v.dump()));
    }
    if (alts.empty()) return bad("no 'enum'/'const' value has the schema's type", path);
    return Expr::alt(std::move(alts));
  }

  static Result<int> count(const json& s, const char* key, int fallback, const std::string& path) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) return bad(std::string("'") + key + "' must be a non-negative integer", path);
    if (v.get<std::int64_t>() > kMaxCount) {
      return refuse(std::string("'") + key + "' " + v.dump() + " (above " + std::to_string(kMaxCount) + ")", path);
    }
    return int(v.get<std::int64_t>());
  }

  Result<Expr> string_schema(const json& s, const std::string& path) {
    auto min = count(s, "minLength", 0, path);
    if (!min) return std::unexpected(min.error());
    auto max = count(s, "maxLength", -1, path);
    if (!max) return std::unexpected(max.error());
    if (*max >= 0 && *max < *min) return bad("'maxLength' is below 'minLength'", path);
    if (s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength")) return refuse("'pattern' together with 'minLength'/'maxLength'", path);
      if (!s["pattern"].is_string()) return bad("'pattern' must be a string", path);
      CharClass allowed = CharClass::any();
      CharClass no;
      no.add(0, 0x1F), no.add('"', '"'), no.add('\\', '\\');
      auto body = compile_regex(s["pattern"].get<std::string>(), allowed.minus(no));
      if (!body) return std::unexpected(body.error().with_context("JSON Schema " + (path.empty() ? "root" : path)));
      return quoted(std::move(*body));
    }
    if (*min == 0 && *max < 0) return Expr::ref(string_rule());
    return quoted(Expr::repeat(Expr::alt(string_char_alts()), *min, *max));
  }

  static Result<std::optional<std::int64_t>> bound(const json& s, const char* key, bool lower, bool exclusive,
                                                   const std::string& path) {
    if (!s.contains(key)) return std::optional<std::int64_t>();
    const json& v = s[key];
    if (!v.is_number()) return bad(std::string("'") + key + "' must be a number", path);
    const double d = v.get<double>();
    if (std::fabs(d) > double(kMaxBound)) return refuse(std::string("'") + key + "' " + v.dump() + " (beyond +-1e18)", path);
    double r = lower ? std::ceil(d) : std::floor(d);
    if (exclusive && r == d) r += lower ? 1 : -1;
    if (v.is_number_integer()) {
      const std::int64_t i = v.get<std::int64_t>();
      return std::optional<std::int64_t>(exclusive ? (lower ? i + 1 : i - 1) : i);
    }
    return std::optional<std::int64_t>(std::int64_t(r));
  }

  Result<Expr> integer_schema(const json& s, const std::string& path) {
    std::optional<std::int64_t> lo, hi;
    for (auto [key, lower, exclusive] : {std::tuple{"minimum", true, false}, std::tuple{"exclusiveMinimum", true, true},
                                         std::tuple{"maximum", false, false}, std::tuple{"exclusiveMaximum", false, true}}) {
      auto b = bound(s, key, lower, exclusive, path);
      if (!b) return std::unexpected(b.error());
      if (!*b) continue;
      auto& slot = lower ? lo : hi;
      slot = slot ? (lower ? std::max(*slot, **b) : std::min(*slot, **b)) : **b;
    }
    if (lo && hi && *lo > *hi) return bad("the integer range is empty", path);
    return integer_range(lo, hi);
  }

  Result<Expr> number_schema(const json& s, const std::string& path) {
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(k)) return refuse(std::string("'") + k + "' on type number (bounds are enforced for integers only)", path);
    }
    return Expr::ref(number_rule());
  }

  Result<Expr> object_schema(const json& s, const std::string& path) {
    const json empty_props = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty_props;
    if (!props.is_object()) return bad("'properties' must be an object", path);
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return bad("'required' must be an array", path);
      for (const json& r : s["required"]) {
        if (!r.is_string()) return bad("'required' entries must be strings", path);
        required.insert(r.get<std::string>());
      }
    }
    const json additional = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
    const bool closed = additional.is_boolean() && !additional.get<bool>();
    if (!additional.is_boolean()) {
      if (!props.empty() || !required.empty()) {
        return refuse("'additionalProperties' as a schema together with 'properties'/'required'", path);
      }
      auto v = rule_for(additional, path + "/additionalProperties");
      if (!v) return std::unexpected(v.error());
      const int member = b_.add("map-member:" + path, Expr::seq({Expr::ref(string_rule()), Expr::byte(':'), Expr::ref(*v)}));
      return Expr::seq({Expr::byte('{'),
                        Expr::repeat(Expr::seq({Expr::ref(member), Expr::repeat(Expr::seq({Expr::byte(','), Expr::ref(member)}), 0, -1)}), 0, 1),
                        Expr::byte('}')});
    }
    if (props.empty() && required.empty()) return closed ? Expr::literal("{}") : Expr::ref(object_rule());
    // Declared properties in key order, then required names that have no schema (any value).
    struct Prop {
      std::string key;
      int value_rule;
      bool required;
    };
    std::vector<Prop> list;
    for (auto it = props.begin(); it != props.end(); ++it) {
      auto v = rule_for(it.value(), path + "/properties/" + pointer_escape(it.key()));
      if (!v) return std::unexpected(v.error());
      list.push_back({it.key(), *v, required.contains(it.key())});
    }
    for (const std::string& r : required) {
      if (props.contains(r)) continue;
      if (closed) return bad("required property '" + r + "' is not in 'properties' and 'additionalProperties' is false", path);
      list.push_back({r, value_rule(), true});
    }
    // first[i] / rest[i]: the properties from i on, before / after the first one written.
    const std::size_t n = list.size();
    std::vector<int> first(n + 1), rest(n + 1);
    first[n] = rest[n] = b_.add("props-end:" + path, Expr::empty());
    for (std::size_t k = n; k-- > 0;) {
      const Expr kv = Expr::seq({Expr::literal(json_escape_key(list[k].key) + ":"), Expr::ref(list[k].value_rule)});
      std::vector<Expr> fa{Expr::seq({kv, Expr::ref(rest[k + 1])})};
      std::vector<Expr> ra{Expr::seq({Expr::byte(','), kv, Expr::ref(rest[k + 1])})};
      if (!list[k].required) {
        fa.push_back(Expr::ref(first[k + 1]));
        ra.push_back(Expr::ref(rest[k + 1]));
      }
      const std::string tag = path + "#" + std::to_string(k);
      first[k] = b_.add("props-first:" + tag, Expr::alt(std::move(fa)));
      rest[k] = b_.add("props-rest:" + tag, Expr::alt(std::move(ra)));
    }
    return Expr::seq({Expr::byte('{'), Expr::ref(first[0]), Expr::byte('}')});
  }

  Result<Expr> array_schema(const json& s, const std::string& path) {
    auto min = count(s, "minItems", 0, path);
    if (!min) return std::unexpected(min.error());
    auto max = count(s, "maxItems", -1, path);
    if (!max) return std::unexpected(max.error());
    if (*max >= 0 && *max < *min) return bad("'maxItems' is below 'minItems'", path);
    std::vector<int> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) return bad("'prefixItems' must be an array", path);
      for (std::size_t i = 0; i < s["prefixItems"].size(); ++i) {
        auto r = rule_for(s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i));
        if (!r) return std::unexpected(r.error());
        prefix.push_back(*r);
      }
    }
    int item = -1;  // -1: no items beyond the prefix
    int hi = *max;
    if (s.contains("items")) {
      const json& it = s["items"];
      if (it.is_array()) return refuse("'items' as an array (draft 2020-12 uses 'prefixItems')", path);
      if (it.is_boolean() && !it.get<bool>()) {
        hi = hi < 0 ? int(prefix.size()) : std::min(hi, int(prefix.size()));
      } else {
        auto r = rule_for(it, path + "/items");
        if (!r) return std::unexpected(r.error());
        item = *r;
      }
    } else {
      item = value_rule();
    }
    if (item < 0 && hi < 0) hi = int(prefix.size());
    if (hi >= 0 && *min > hi) return bad("'minItems' cannot be met (items are limited)", path);
    // tail(i): the elements from index i on, each after a ',' when i > 0.
    const int k = int(prefix.size());
    const int loop_from = std::max(k, *min);  // from here on the rules repeat
    auto elem = [&](int i) { return Expr::ref(i < k ? prefix[std::size_t(i)] : item); };
    const std::string tag = "array:" + path;
    int next = -1;
    int chain_top = 0;  // indices [0, chain_top) get a rule each
    if (hi < 0) {
      // Beyond loop_from every element is the same: one loop rule.
      const int loop = b_.declare(tag + "#loop");
      b_.define(loop, Expr::alt({Expr::seq({Expr::byte(','), Expr::ref(item), Expr::ref(loop)}), Expr::empty()}));
      if (loop_from == 0) {
        // Index 0 has no comma before it.
        next = b_.add(tag + "#0", Expr::alt({Expr::seq({Expr::ref(item), Expr::ref(loop)}), Expr::empty()}));
        return Expr::seq({Expr::byte('['), Expr::ref(next), Expr::byte(']')});
      }
      next = loop;
      chain_top = loop_from;
    } else {
      next = b_.add(tag + "#end", Expr::empty());
      chain_top = hi;
    }
    for (int i = chain_top - 1; i >= 0; --i) {
      std::vector<Expr> alts;
      alts.push_back(i == 0 ? Expr::seq({elem(i), Expr::ref(next)}) : Expr::seq({Expr::byte(','), elem(i), Expr::ref(next)}));
      if (i >= *min) alts.push_back(Expr::empty());
      next = b_.add(tag + "#" + std::to_string(i), Expr::alt(std::move(alts)));
    }
    return Expr::seq({Expr::byte('['), Expr::ref(next), Expr::byte(']')});
  }

  const json& root_;
  const CompileLimits& limits_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  int depth_ = 0;
  GrammarBuilder b_;
  std::map<std::string, int> refs_;
  int string_ = -1, number_ = -1, value_ = -1, object_ = -1, array_ = -1;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::json& schema, const CompileLimits& limits) {
  return SchemaCompiler(schema, limits).run();
}

Result<std::shared_ptr<const Grammar>> compile_json_schema_then(const nlohmann::json& schema, std::string_view suffix,
                                                                const CompileLimits& limits) {
  return SchemaCompiler(schema, limits).run(suffix);
}

Result<std::shared_ptr<const Grammar>> compile_any_json_object() {
  static const json kEmpty = json::object();
  static const CompileLimits kLimits;
  return SchemaCompiler(kEmpty, kLimits).any_object();
}

}  // namespace waste::grammar
