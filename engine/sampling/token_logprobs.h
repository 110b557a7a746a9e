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
  // 1-based place in the whole vocabulary, most likely first (ties: the lower id first, as
  // `top` orders them); 0: none (the first prompt token, which nothing precedes).
  int rank = 0;
};

struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first; ties: the lower id first
};

// A run of prompt tokens' logprobs (SamplingParams::prompt_logprobs): entries[i] is prompt
// token first_token + i's, given the tokens before it. Token 0 has nothing before it: its
// entry has logprob 0 and no top.
struct PromptLogprobsChunk {
  int first_token = 0;
  std::vector<TokenLogprobs> entries;
};

// log_softmax(logits)[chosen] and the top_n largest entries (top_n in [0, vocabulary]),
// computed in double, each with its rank (the chosen token's too when outside the top).
TokenLogprobs ComputeTokenLogprobs(std::span<const float> logits, TokenId chosen, int top_n);

}  // namespace tokenmill
