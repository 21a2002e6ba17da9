#include "shared/container/rope_config.hpp"

#include <cmath>
#include <tuple>

#include <nlohmann/json.hpp>

namespace waste {
namespace {

using nlohmann::json;

std::string num_text(double v) {
  json j = v;
  return j.dump();
}

// A finite number under `key` of `object`, or `fallback` when absent or null.
Result<double> number(const json& object, const char* key, double fallback, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return make_error(Errc::format, where + "." + key + ": expected a number, found " + it->type_name());
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || std::fabs(v) > 1e30) {
    return make_error(Errc::format, where + "." + key + ": " + it->dump() + " is not a finite number");
  }
  return v;
}

Result<RopeConfig> parse_yarn(const json& rs, const json& text, const std::string& where, RopeConfig r) {
  auto refuse = [&](const std::string& what) { return make_error(Errc::format, where + ": " + what); };
  r.yarn = true;
  auto orig = rs.find("original_max_position_embeddings");
  if (orig == rs.end() || !orig->is_number_integer() || orig->get<std::int64_t>() < 1 ||
      orig->get<std::int64_t>() > (std::int64_t(1) << 30)) {
    return refuse("yarn needs original_max_position_embeddings, an integer in 1..2^30");
  }
  r.original_max_pos = int(orig->get<std::int64_t>());
  auto factor = number(rs, "factor", 0.0, where);
  if (!factor) return std::unexpected(factor.error());
  r.factor = *factor;
  if (!rs.contains("factor") || rs["factor"].is_null()) {
    // Newer transformers derive it from the two lengths; without both there is nothing to derive.
    auto max_pos = text.find("max_position_embeddings");
    if (max_pos == text.end() || !max_pos->is_number_integer()) {
      return refuse("yarn needs factor (or max_position_embeddings to derive it from)");
    }
    r.factor = double(max_pos->get<std::int64_t>()) / double(r.original_max_pos);
  }
  if (!(r.factor >= 1.0)) return refuse("yarn factor " + num_text(r.factor) + " is below 1");
  for (auto [key, dst, fallback] : {std::tuple{"beta_fast", &r.beta_fast, 32.0}, std::tuple{"beta_slow", &r.beta_slow, 1.0}}) {
    auto v = number(rs, key, fallback, where);
    if (!v) return std::unexpected(v.error());
    *dst = *v;
  }
  if (!(r.beta_slow > 0.0) || !(r.beta_fast >= r.beta_slow)) {
    return refuse("yarn beta_fast " + num_text(r.beta_fast) + " and beta_slow " + num_text(r.beta_slow) +
                  " contradict each other (need beta_fast >= beta_slow > 0)");
  }
  const bool has_mscale = rs.contains("mscale") && !rs["mscale"].is_null();
  const bool has_all = rs.contains("mscale_all_dim") && !rs["mscale_all_dim"].is_null();
  auto ms = number(rs, "mscale", 1.0, where);
  if (!ms) return std::unexpected(ms.error());
  auto ms_all = number(rs, "mscale_all_dim", 0.0, where);
  if (!ms_all) return std::unexpected(ms_all.error());
  r.mscale = *ms;
  r.mscale_all_dim = *ms_all;
  // transformers scales cos/sin by m(mscale)/m(mscale_all_dim) (and by m(factor) when either is
  // missing); the DeepSeek code has one mscale for the softmax only. They agree only when the
  // two are given and equal, so anything else is refused rather than guessed.
  if (r.factor > 1.0 && (!has_mscale || !has_all || r.mscale != r.mscale_all_dim)) {
    return refuse("yarn mscale (" + (has_mscale ? num_text(r.mscale) : std::string("absent")) +
                  ") and mscale_all_dim (" + (has_all ? num_text(r.mscale_all_dim) : std::string("absent")) +
                  ") must both be given and equal (a cos/sin attention factor other than 1 is not supported)");
  }
  if (auto af = rs.find("attention_factor"); af != rs.end() && !af->is_null()) {
    if (!af->is_number() || af->get<double>() != 1.0) {
      return refuse("yarn attention_factor " + af->dump() + " is not supported (only 1)");
    }
  }
  if (auto t = rs.find("truncate"); t != rs.end() && !t->is_null()) {
    if (!t->is_boolean()) return refuse("truncate: expected a boolean, found " + std::string(t->type_name()));
    r.truncate = t->get<bool>();
  }
  return r;
}

}  // namespace

double RopeConfig::attention_mscale() const {
  if (!enabled || !yarn || factor <= 1.0 || mscale_all_dim == 0.0) return 1.0;
  return 0.1 * mscale_all_dim * std::log(factor) + 1.0;
}

Result<RopeConfig> parse_rope_config(const json& text, const std::string& where, bool deepseek, int qk_rope) {
  RopeConfig r;
  auto nope = text.find("mla_use_nope");
  if (nope != text.end() && !nope->is_null()) {
    if (!nope->is_boolean()) {
      return make_error(Errc::format, where + ".mla_use_nope: expected a boolean, found " + nope->type_name());
    }
    r.enabled = !nope->get<bool>();
  } else {
    r.enabled = deepseek;
  }
  if (qk_rope == 0) r.enabled = false;
  // NoPE models ignore rope_theta and rope_scaling, as the v0 engine does.
  if (!r.enabled) return r;
  if (qk_rope % 2 != 0 || qk_rope > kMaxRopeDim) {
    return make_error(Errc::format, where + ".qk_rope_head_dim: " + std::to_string(qk_rope) +
                                        " must be even and at most " + std::to_string(kMaxRopeDim) + " for rotary");
  }
  auto theta = number(text, "rope_theta", 10000.0, where);
  if (!theta) return std::unexpected(theta.error());
  if (!(*theta > 1.0)) {
    return make_error(Errc::format, where + ".rope_theta: " + num_text(*theta) + " must be above 1");
  }
  r.theta = *theta;

  const std::string rw = where + ".rope_scaling";
  auto rs = text.find("rope_scaling");
  if (rs == text.end() || rs->is_null()) return r;
  if (!rs->is_object()) return make_error(Errc::format, rw + ": expected an object or null");
  std::string type;
  for (const char* key : {"type", "rope_type"}) {
    auto t = rs->find(key);
    if (t == rs->end() || t->is_null()) continue;
    if (!t->is_string()) return make_error(Errc::format, rw + "." + key + ": expected a string");
    if (!type.empty() && type != t->get<std::string>()) {
      return make_error(Errc::format, rw + ": type \"" + type + "\" and rope_type \"" + t->get<std::string>() +
                                          "\" contradict each other");
    }
    type = t->get<std::string>();
  }
  if (type.empty()) return make_error(Errc::format, rw + ": no type (or rope_type) given");
  if (type == "default") return r;
  if (type != "yarn") {
    return make_error(Errc::format, rw + ": type \"" + type + "\" is not supported (only yarn or default)");
  }
  return parse_yarn(*rs, text, rw, r);
}

void rope_config_to_json(const RopeConfig& r, json& j) {
  if (!r.enabled) return;
  j["mla_use_nope"] = false;
  j["rope_theta"] = r.theta;
  if (!r.yarn) return;
  json rs;
  rs["type"] = "yarn";
  rs["factor"] = r.factor;
  rs["original_max_position_embeddings"] = r.original_max_pos;
  rs["beta_fast"] = r.beta_fast;
  rs["beta_slow"] = r.beta_slow;
  rs["mscale"] = r.mscale;
  rs["mscale_all_dim"] = r.mscale_all_dim;
  if (!r.truncate) rs["truncate"] = false;
  j["rope_scaling"] = rs;
}

}  // namespace waste
