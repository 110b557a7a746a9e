#include "gateway/api/openai/beam_search.h"

#include <cmath>
#include <limits>
#include <string>

#include "gateway/api/json_fields.h"

namespace tokenmill::gateway {

using nlohmann::json;

namespace {

constexpr IgnoredField kLengthPenalty{
    "length_penalty", "it weighs beam search's hypotheses, and use_beam_search is not true"};

}  // namespace

const std::set<std::string_view>& BeamSearchFieldParams() {
  static const std::set<std::string_view> kParams = {"use_beam_search", "length_penalty"};
  return kParams;
}

std::optional<HttpError> ParseBeamSearch(const json& body, uint32_t n,
                                         v1::GenerateRequest& generate,
                                         std::vector<IgnoredField>& ignored) {
  std::optional<bool> use_beam_search;
  GW_RETURN_IF_ERROR(Bool(body, "use_beam_search", use_beam_search));
  std::optional<double> length_penalty;
  GW_RETURN_IF_ERROR(Number(body, "length_penalty", length_penalty));
  if (!use_beam_search.value_or(false)) {
    if (length_penalty) ignored.push_back(kLengthPenalty);
    return std::nullopt;
  }
  std::optional<bool> stream;
  GW_RETURN_IF_ERROR(Bool(body, "stream", stream));
  if (stream.value_or(false)) {
    return BadRequest("beam search is not streamed (its best hypotheses are known only at the "
                      "end): drop stream or set it to false, or leave use_beam_search unset",
                      "stream");
  }
  std::optional<int64_t> best_of;
  GW_RETURN_IF_ERROR(Integer(body, "best_of", 1, std::numeric_limits<uint32_t>::max(), best_of));
  if (best_of && *best_of != n) {
    return BadRequest("best_of is not used with beam search: n = " + std::to_string(n) +
                          " is the beam width and the number of choices, best first; set n "
                          "and leave best_of unset",
                      "best_of");
  }
  if (length_penalty && std::abs(*length_penalty) > std::numeric_limits<float>::max()) {
    return BadRequest("length_penalty must be a number within +-3.4e38 (the default is 1)",
                      "length_penalty");
  }
  v1::BeamSearch& beam = *generate.mutable_beam_search();
  if (length_penalty) beam.set_length_penalty(static_cast<float>(*length_penalty));
  return std::nullopt;
}

}  // namespace tokenmill::gateway
