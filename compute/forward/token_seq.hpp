// One token of a batch as the attention blocks see it: whose state, which position.
#pragma once

#include "compute/model/run_state.hpp"

namespace waste::forward {

// Which sequence a token of a batch belongs to, and its position there. A batch mixes tokens of
// several sequences (continuous batching); tokens of one sequence appear in order, at
// consecutive positions. The attention recurrences read and write only their token's state, so
// a batch gives every token the bits it would get alone.
struct TokenSeq {
  model::RunState* state = nullptr;
  int pos = 0;
};

}  // namespace waste::forward
