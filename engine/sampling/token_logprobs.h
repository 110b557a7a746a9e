// Log-probabilities reported with generated tokens: the model's raw log-softmax over the
// whole vocabulary (before penalties, bias, temperature or truncation), as vLLM reports by
// default.
#pragma once

#include <span>
#include <vector>

#include "cache/types.h"

namespace tokenmill {

inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprob {
  TokenId token_id = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first; ties: the lower id first
};

// log_softmax(logits)[chosen] and the top_n largest entries (top_n in [0, vocabulary]),
// computed in double.
TokenLogprobs ComputeTokenLogprobs(std::span<const float> logits, TokenId chosen, int top_n);

}  // namespace tokenmill
