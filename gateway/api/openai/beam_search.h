// vLLM's beam search on completions and chat completions: use_beam_search (true or false) and
// length_penalty (a number, default 1), n being the beam width and the number of choices, best
// first. Mapped onto GenerateRequest.beam_search; the server refuses what beam search does not
// combine with (sampling, stop strings, logprobs, tools, ...), naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "gateway/api/ignored_fields.h"
#include "gateway/http/http_error.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::gateway {

// The body fields read here (both endpoints).
const std::set<std::string_view>& BeamSearchFieldParams();

// The fields of `body` into `generate`, whose n is `n`: with use_beam_search true, sets
// beam_search (its length_penalty when given); stream true is a 400 (the hypotheses are known
// only at the end), and so is a best_of other than n (n is the width). Without it,
// length_penalty changes nothing, as in vLLM: it joins `ignored`.
std::optional<HttpError> ParseBeamSearch(const nlohmann::json& body, uint32_t n,
                                         v1::GenerateRequest& generate,
                                         std::vector<IgnoredField>& ignored);

}  // namespace tokenmill::gateway
