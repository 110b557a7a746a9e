// Speculative decoding settings (--spec, --spec-tokens, --draft-model): which proposer drafts
// tokens, how many at most, and when the batch is too large for speculation to pay.
#pragma once

#include <optional>
#include <string_view>

#include "common/status.h"

namespace tokenmill {

enum class SpecMethod {
  kNone,
  kNgram,  // prompt lookup: the tokens that followed an earlier occurrence of the last n
  kDraft,  // a smaller model with the same vocabulary
};

std::string_view SpecMethodName(SpecMethod method);
std::optional<SpecMethod> ParseSpecMethod(std::string_view name);

struct SpecConfig {
  SpecMethod method = SpecMethod::kNone;
  // Most draft tokens per request and step (k); adaptive k stays in [0, this].
  int num_speculative_tokens = 4;
  // N-gram lookup: the suffix lengths tried, longest first.
  int ngram_min = 2;
  int ngram_max = 4;
  // The cost of one more row in a step, relative to a one-row step (adaptive k's cost
  // model; measured on the CPU backend with the grouped int8 matmuls: 5 rows cost 1.95 one-row
  // steps, docs/benchmarks.md, "Speculative decoding").
  double row_cost = 0.25;
  // A hard cap on top: drafts shrink evenly (to none) when the step's decoding requests
  // would need more than this many rows in total (sum of k + 1).
  int max_batch_rows = 16;
};

// InvalidArgument naming the flag when a value cannot work.
Status ValidateSpecConfig(const SpecConfig& config);

}  // namespace tokenmill
