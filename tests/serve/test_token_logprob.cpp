// token_logprob (cli/serve/scheduler.hpp): the log-softmax a served token reports, against one
// computed here in long double, over a real vocabulary; its normaliser is the kernels' sum_exp
// (within 1e-14 relative), so each logprob is within 1e-6 of the exact value.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cli/serve/scheduler.hpp"

namespace {

std::vector<float> logits_like(std::size_t n, std::uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

long double exact_logprob(const std::vector<float>& logits, int id) {
  const long double max = *std::max_element(logits.begin(), logits.end());
  long double total = 0;
  for (const float l : logits) total += std::exp(static_cast<long double>(l) - max);
  return static_cast<long double>(logits[std::size_t(id)]) - max - std::log(total);
}

}  // namespace

TEST_CASE("a token's logprob and its top alternatives are the log-softmax of the logits", "[serve][logprob]") {
  for (const float spread : {0.5f, 3.0f, 30.0f}) {
    std::vector<float> logits = logits_like(163840, 7, spread);
    logits[100] = -std::numeric_limits<float>::infinity();  // a banned token: logprob -inf, no share
    for (const int token : {0, 1234, 163839}) {
      INFO("spread " << spread << ", token " << token);
      const waste::serve::TokenLogprob got = waste::serve::token_logprob(logits, token, 5);
      REQUIRE(got.token == token);
      REQUIRE(std::abs(double(got.logprob) - double(exact_logprob(logits, token))) <= 1e-6 * (1.0 + std::abs(got.logprob)));
      REQUIRE(got.top.size() == 5);
      std::vector<int> order(logits.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = int(i);
      std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int a, int b) { return logits[std::size_t(a)] > logits[std::size_t(b)]; });
      for (int k = 0; k < 5; ++k) {
        REQUIRE(got.top[std::size_t(k)].token == order[std::size_t(k)]);
        REQUIRE(std::abs(double(got.top[std::size_t(k)].logprob) - double(exact_logprob(logits, order[std::size_t(k)]))) <= 1e-6);
      }
    }
    REQUIRE(std::isinf(waste::serve::token_logprob(logits, 100, 0).logprob));
  }
}
