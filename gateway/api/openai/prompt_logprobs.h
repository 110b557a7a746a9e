// Completions' echo, prompt_logprobs and best_of, over the server's responses: the prompt's
// entries as an echoed choice's logprobs and as vLLM's prompt_logprobs list, and which of a
// prompt's best_of candidates are returned. Pure functions of their inputs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "gateway/api/openai/response_format.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

// The prompt's entries (GenerateResponse::prompt_logprobs, one per prompt token) as logprobs
// of an echoed choice, each with its `top` most likely tokens; the first token's are null.
std::vector<TokenLogprobText> EchoedPromptLogprobs(const std::vector<v1::TokenLogprobs>& entries,
                                                   uint32_t top);

// vLLM's prompt_logprobs: null for the first token, then for each token an object keyed by
// token id (as a string) of {logprob, rank, decoded_token}: the prompt's token and the `top`
// most likely. rank is 1-based: the prompt token's in the whole vocabulary (the server's),
// null only for one outside the top from a server that sends no rank.
nlohmann::json PromptLogprobsJson(const std::vector<v1::TokenLogprobs>& entries, uint32_t top);

// Of one prompt's candidates, the `n` with the highest cumulative logprob (the sum over their
// generated tokens' logprobs), best first; ties keep the lower index. Candidates must have
// their logprobs.
std::vector<size_t> BestCandidates(const std::vector<ChoiceResult>& candidates, uint32_t n);

}  // namespace tokenmill::gateway
