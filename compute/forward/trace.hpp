// What the forward pass decided for each token, for tests that compare decisions exactly with an
// oracle (tests/reference/v41_oracle.py's traces): the routed experts of every MoE layer in
// selection order, and with DeepSeek-V4.1's CSA2 the compressed groups each compressed layer
// attended (ascending) and the candidate source's kept blocks (ascending). Off unless a caller
// hands the Forward one (Forward::set_trace, Engine::set_trace); the pass then appends one entry
// per token, in the order the tokens were fed (a batch: its tokens in batch order).
#pragma once

#include <utility>
#include <vector>

namespace waste::forward {

struct ForwardTrace {
  struct Token {
    int token = 0;
    std::vector<std::pair<int, std::vector<int>>> experts;   // (layer, ids)
    std::vector<std::pair<int, std::vector<int>>> attended;  // (layer, groups)
    std::vector<std::pair<int, std::vector<int>>> blocks;    // (layer, blocks)
  };
  std::vector<Token> tokens;
};

}  // namespace waste::forward
