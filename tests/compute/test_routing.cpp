// The DeepSeek-V3 router (compute/forward/router.*): group-limited selection with exact expected
// experts, ties, softmax scoring, and the lookahead (top_ids) picking by the same rule.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compute/forward/moe.hpp"
#include "compute/forward/router.hpp"
#include "shared/container/model_config.hpp"

using namespace waste;

namespace {

ModelConfig grouped(int experts, int top_k, int n_group, int topk_group) {
  ModelConfig c;
  c.n_experts = experts;
  c.top_k = top_k;
  c.n_group = n_group;
  c.topk_group = topk_group;
  c.renormalize = true;
  c.routed_scale = 2.5f;
  return c;
}

std::vector<int> rank(const ModelConfig& c, const std::vector<float>& scored, int n, bool has_bias = true) {
  std::vector<unsigned char> taken(scored.size());
  std::vector<int> ids(std::size_t(n), -1);
  const int got = forward::router_rank(c, has_bias, scored.data(), n, taken.data(), ids.data());
  ids.resize(std::size_t(got));
  return ids;
}

forward::MoeScratch scratch(int experts, int top_k) {
  forward::MoeScratch s;
  s.probs.resize(std::size_t(experts));
  s.scored.resize(std::size_t(experts));
  s.taken.resize(std::size_t(experts));
  s.ids.resize(std::size_t(top_k));
  s.weights.resize(std::size_t(top_k));
  return s;
}

}  // namespace

TEST_CASE("Group-limited routing ranks groups by the sum of their two best scores", "[compute][routing]") {
  // 4 groups of 4. Group 0 has the best single score (0.9) but sums 0.9 + 0.1 = 1.0; groups 1
  // (0.8 + 0.7) and 2 (0.6 + 0.6) are kept. A flat top-3 would pick 0, 4, 5.
  const ModelConfig c = grouped(16, 3, 4, 2);
  const std::vector<float> s = {0.9f, 0.1f, 0.0f, 0.0f, 0.8f, 0.7f, 0.0f, 0.0f,
                                0.6f, 0.6f, 0.5f, 0.0f, 0.3f, 0.3f, 0.3f, 0.3f};
  CHECK(rank(c, s, 3) == std::vector<int>{4, 5, 8});
  CHECK(rank(grouped(16, 3, 1, 1), s, 3) == std::vector<int>{0, 4, 5});
  // Without a bias tensor the official code ranks groups by their maximum: groups 0 and 1.
  CHECK(rank(c, s, 3, /*has_bias=*/false) == std::vector<int>{0, 4, 5});
  // The masked groups' experts are never chosen, however many are asked for: 8 at most.
  CHECK(rank(c, s, 20) == std::vector<int>{4, 5, 8, 9, 10, 6, 7, 11});
}

TEST_CASE("Routing ties go to the lower index, for groups and for experts", "[compute][routing]") {
  const ModelConfig c = grouped(8, 2, 4, 2);
  // All groups tie (sum 1.0): groups 0 and 1 kept; inside them 0.5 ties resolve by id.
  CHECK(rank(c, std::vector<float>(8, 0.5f), 2) == std::vector<int>{0, 1});
  // Groups 1 and 3 tie for the second place behind group 2: group 1 is kept, so expert 3
  // (0.6) beats expert 6 (0.6, masked); then the tie between 4 and 5 goes to 4.
  const std::vector<float> s = {0.1f, 0.1f, 0.4f, 0.6f, 0.7f, 0.7f, 0.6f, 0.4f};
  CHECK(rank(grouped(8, 3, 4, 2), s, 3) == std::vector<int>{4, 5, 3});
}

TEST_CASE("route() takes weights from the unbiased scores of the group-limited choice", "[compute][routing]") {
  ModelConfig c = grouped(8, 2, 4, 1);
  model::MoeWeights w;
  // The bias moves the choice to group 3 (experts 6, 7) although group 0 has the larger p.
  w.score_bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f};
  const float logits[8] = {2.0f, 2.0f, 0.0f, 0.0f, 0.0f, 0.0f, -1.0f, -2.0f};
  auto s = scratch(8, 2);
  forward::route(c, w, logits, s);
  CHECK(s.ids == std::vector<int>{6, 7});
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double p6 = sig(-1.0), p7 = sig(-2.0);
  CHECK(s.weights[0] == Approx(p6 / (p6 + p7) * 2.5).epsilon(1e-6));
  CHECK(s.weights[1] == Approx(p7 / (p6 + p7) * 2.5).epsilon(1e-6));

  // The lookahead's top_ids ranks by the same rule and returns the same experts first.
  std::vector<float> scored(8);
  std::vector<unsigned char> taken(8);
  std::vector<int> ids(8);
  CHECK(forward::top_ids(c, w, logits, 8, scored.data(), taken.data(), ids.data()) == 2);
  CHECK(std::vector<int>(ids.begin(), ids.begin() + 2) == std::vector<int>{6, 7});
}

TEST_CASE("Softmax scoring normalises over all experts before the top-k", "[compute][routing]") {
  ModelConfig c;
  c.n_experts = 4;
  c.top_k = 2;
  c.scoring = RouterScoring::softmax;
  model::MoeWeights w;
  const float logits[4] = {1.0f, 3.0f, 2.0f, 0.0f};
  auto s = scratch(4, 2);
  forward::route(c, w, logits, s);
  CHECK(s.ids == std::vector<int>{1, 2});
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0);
  CHECK(s.weights[0] == Approx(std::exp(3.0) / z).epsilon(1e-6));
  CHECK(s.weights[1] == Approx(std::exp(2.0) / z).epsilon(1e-6));
}

TEST_CASE("Routing config: DeepSeek and Kimi key names, refusals naming the key", "[compute][routing]") {
  nlohmann::json j = {{"num_hidden_layers", 2}, {"hidden_size", 64},  {"vocab_size", 100},
                      {"num_attention_heads", 2}, {"num_experts", 16}, {"num_experts_per_token", 4},
                      {"moe_intermediate_size", 32}, {"intermediate_size", 64}, {"kv_lora_rank", 16},
                      {"qk_nope_head_dim", 8}, {"qk_rope_head_dim", 8}, {"v_head_dim", 8}};
  {
    auto c = ModelConfig::from_json(j);
    REQUIRE(c);
    CHECK(c->n_group == 1);
    CHECK_FALSE(c->grouped_routing());
    CHECK(c->scoring == RouterScoring::sigmoid);
  }
  auto with = [&](nlohmann::json extra) {
    nlohmann::json k = j;
    k.update(extra);
    return ModelConfig::from_json(k);
  };
  {
    auto c = with({{"n_group", 4}, {"topk_group", 2}, {"scoring_func", "softmax"}});
    REQUIRE(c);
    CHECK(c->grouped_routing());
    CHECK(c->topk_group == 2);
    CHECK(c->scoring == RouterScoring::softmax);
    // Written back and read again: the same routing.
    auto again = ModelConfig::from_json(c->to_json());
    REQUIRE(again);
    CHECK(again->n_group == 4);
    CHECK(again->topk_group == 2);
    CHECK(again->scoring == RouterScoring::softmax);
  }
  CHECK(with({{"num_expert_group", 4}, {"topk_group", 2}})->n_group == 4);
  CHECK(with({{"n_group", 4}, {"topk_method", "greedy"}})->n_group == 1);
  CHECK(with({{"n_group", 3}}).error().message ==
        "config.n_group: 3 does not split 16 experts into groups of at least 2");
  CHECK(with({{"n_group", 4}, {"num_expert_group", 2}}).error().message ==
        "config: n_group 4 and num_expert_group 2 contradict each other");
  CHECK(with({{"n_group", 8}, {"topk_group", 1}}).error().message ==
        "config.topk_group: 1 groups of 2 experts hold fewer than num_experts_per_token 4");
  CHECK(with({{"scoring_func", "relu"}}).error().message ==
        "config.scoring_func: \"relu\" is not sigmoid, softmax or sqrtsoftplus");
  CHECK(with({{"topk_method", "aux"}}).error().message ==
        "config.topk_method: \"aux\" is not noaux_tc, group_limited_greedy or greedy");
}

// DeepSeek-V4.1's gate (route_noaux): sqrtsoftplus scores, selection by score + bias (bias_vl on
// image-span tokens), weights from the unbiased scores over (sum + 1e-20), times route_scale.
TEST_CASE("sqrt(softplus(x)): log1p(e^x) below 20, x itself above (torch's threshold)", "[compute][routing]") {
  CHECK(forward::sqrt_softplus(0.0f) == Approx(std::sqrt(std::log(2.0))).epsilon(1e-7));
  CHECK(forward::sqrt_softplus(1.0f) == Approx(std::sqrt(std::log1p(std::exp(1.0)))).epsilon(1e-7));
  CHECK(forward::sqrt_softplus(-3.0f) == Approx(std::sqrt(std::log1p(std::exp(-3.0)))).epsilon(1e-7));
  CHECK(forward::sqrt_softplus(25.0f) == 5.0f);  // past the threshold: sqrt(25) exactly
  CHECK(forward::sqrt_softplus(21.0f) == std::sqrt(21.0f));
  // Deep in the tail softplus(x) ~ e^x: sqrt(e^-30) = e^-15, still positive (never NaN).
  CHECK(forward::sqrt_softplus(-30.0f) == Approx(std::exp(-15.0)).epsilon(1e-5));
}

TEST_CASE("route_noaux: the bias picks, the unbiased scores weigh, image tokens use bias_vl", "[compute][routing]") {
  forward::NoauxRouter r;
  r.n_experts = 4;
  r.top_k = 2;
  r.route_scale = 1.5f;
  const float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 2.0f, 0.0f};     // pulls expert 2 in
  const std::vector<float> bias_vl = {0.0f, 0.0f, 0.0f, 3.0f};  // image tokens: expert 3
  std::vector<float> probs(4), scored(4);
  std::vector<unsigned char> taken(4);
  const forward::NoauxScratch s{probs.data(), scored.data(), taken.data()};
  auto p = [](double x) { return std::sqrt(std::log1p(std::exp(x))); };
  int ids[2];
  float w[2];

  // Text token: scores p + bias = (1.0, ..., 0.83 + 2, ...): expert 2 first, then expert 0.
  forward::route_noaux(r, logits, bias, bias_vl, false, s, ids, w);
  CHECK(ids[0] == 2);
  CHECK(ids[1] == 0);
  const double sum = p(0.0) + p(2.0) + 1e-20;
  CHECK(w[0] == Approx(p(0.0) / sum * 1.5).epsilon(1e-6));  // the unbiased p of expert 2
  CHECK(w[1] == Approx(p(2.0) / sum * 1.5).epsilon(1e-6));

  // Image token: bias_vl instead: expert 3 (p(-1) + 3), then expert 0.
  forward::route_noaux(r, logits, bias, bias_vl, true, s, ids, w);
  CHECK(ids[0] == 3);
  CHECK(ids[1] == 0);
  CHECK(w[0] == Approx(p(-1.0) / (p(-1.0) + p(2.0)) * 1.5).epsilon(1e-6));

  // No biases: the plain top-2 (0, 1). gate_temp 2 halves the logits before the score.
  r.gate_temp = 2.0f;
  forward::route_noaux(r, logits, {}, {}, true, s, ids, w);
  CHECK(ids[0] == 0);
  CHECK(ids[1] == 1);
  CHECK(w[0] == Approx(p(1.0) / (p(1.0) + p(0.5)) * 1.5).epsilon(1e-6));

  // Without renormalisation the weights are the scores times route_scale; one expert is never
  // renormalised (the reference's norm_topk_prob applies only from top_k 2).
  r.gate_temp = 1.0f;
  r.renormalize = false;
  forward::route_noaux(r, logits, bias, bias_vl, false, s, ids, w);
  CHECK(w[0] == Approx(p(0.0) * 1.5).epsilon(1e-6));
  r.renormalize = true;
  r.top_k = 1;
  forward::route_noaux(r, logits, bias, bias_vl, false, s, ids, w);
  CHECK(ids[0] == 2);
  CHECK(w[0] == Approx(p(0.0) * 1.5).epsilon(1e-6));
}

TEST_CASE("route_noaux: all scores zero renormalise to zero weights, not NaN (the 1e-20 floor)", "[compute][routing]") {
  // sigmoid scores of -200 underflow to 0: without the +1e-20 the weights would be 0/0.
  forward::NoauxRouter r;
  r.score = RouterScoring::sigmoid;
  r.n_experts = 3;
  r.top_k = 2;
  const float logits[3] = {-200.0f, -200.0f, -200.0f};
  std::vector<float> probs(3), scored(3);
  std::vector<unsigned char> taken(3);
  int ids[2];
  float w[2];
  forward::route_noaux(r, logits, {}, {}, false, {probs.data(), scored.data(), taken.data()}, ids, w);
  CHECK(ids[0] == 0);  // a three-way tie: the lower ids
  CHECK(ids[1] == 1);
  CHECK(w[0] == 0.0f);
  CHECK(w[1] == 0.0f);
}

TEST_CASE("score_experts with temperature 1 gives route()'s bits for every scoring function", "[compute][routing]") {
  ModelConfig c;
  c.n_experts = 5;
  const float logits[5] = {0.3f, -1.7f, 2.25f, 0.0f, 9.0f};
  for (auto scoring : {RouterScoring::sigmoid, RouterScoring::softmax, RouterScoring::sqrtsoftplus}) {
    c.scoring = scoring;
    std::vector<float> probs(5), scored(5), direct(5);
    forward::router_scores(c, {}, logits, probs.data(), scored.data());
    forward::score_experts(scoring, logits, 5, 1.0f, direct.data());
    CHECK(std::memcmp(probs.data(), direct.data(), 5 * sizeof(float)) == 0);
    CHECK(probs[4] > probs[0]);
  }
  // In place (probs aliasing logits) and through the temperature's copy: the same values.
  float in_place[5];
  std::memcpy(in_place, logits, sizeof in_place);
  forward::score_experts(RouterScoring::softmax, in_place, 5, 0.5f, in_place);
  std::vector<float> apart(5);
  forward::score_experts(RouterScoring::softmax, logits, 5, 0.5f, apart.data());
  CHECK(std::memcmp(in_place, apart.data(), sizeof in_place) == 0);
  CHECK(apart[4] == Approx(std::exp(18.0) / (std::exp(0.6) + std::exp(-3.4) + std::exp(4.5) + 1.0 + std::exp(18.0)))
                        .epsilon(1e-6));
}
