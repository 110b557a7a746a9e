#include "engine/speculative/spec_config.h"

#include <string>

namespace tokenmill {

std::string_view SpecMethodName(SpecMethod method) {
  switch (method) {
    case SpecMethod::kNone:
      return "none";
    case SpecMethod::kNgram:
      return "ngram";
    case SpecMethod::kDraft:
      return "draft";
  }
  return "unknown";
}

std::optional<SpecMethod> ParseSpecMethod(std::string_view name) {
  for (const SpecMethod m : {SpecMethod::kNone, SpecMethod::kNgram, SpecMethod::kDraft}) {
    if (SpecMethodName(m) == name) return m;
  }
  return std::nullopt;
}

Status ValidateSpecConfig(const SpecConfig& config) {
  if (config.method == SpecMethod::kNone) return OkStatus();
  if (config.num_speculative_tokens < 1 || config.num_speculative_tokens > 16) {
    return InvalidArgumentError("--spec-tokens must be in [1, 16], got " +
                                std::to_string(config.num_speculative_tokens));
  }
  if (config.ngram_min < 1 || config.ngram_max < config.ngram_min) {
    return InvalidArgumentError("the n-gram sizes must satisfy 1 <= min <= max, got " +
                                std::to_string(config.ngram_min) + " and " +
                                std::to_string(config.ngram_max));
  }
  if (!(config.row_cost > 0.0 && config.row_cost <= 1.0)) {
    return InvalidArgumentError("the speculation row cost must be in (0, 1], got " +
                                std::to_string(config.row_cost));
  }
  if (config.max_batch_rows < 2) {
    return InvalidArgumentError("the speculation batch limit must be at least 2 rows, got " +
                                std::to_string(config.max_batch_rows));
  }
  return OkStatus();
}

}  // namespace tokenmill
