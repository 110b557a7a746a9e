#include "scheduler/stop_conditions.h"

#include <algorithm>

#include "common/check.h"

namespace tokenmill {
namespace {

bool Contains(std::span<const TokenId> ids, TokenId token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

}  // namespace

std::optional<FinishReason> CheckStop(const Request& request,
                                      std::span<const TokenId> eos_token_ids, int max_model_len) {
  TM_CHECK_GT(request.num_output_tokens(), 0);
  const TokenId last = request.token_ids.back();
  if (!request.sampling.ignore_eos && Contains(eos_token_ids, last)) return FinishReason::kStop;
  if (Contains(request.sampling.stop_token_ids, last)) return FinishReason::kStop;
  if (request.num_output_tokens() >= request.sampling.max_tokens) return FinishReason::kLength;
  if (request.num_tokens() >= max_model_len) return FinishReason::kLength;
  return std::nullopt;
}

}  // namespace tokenmill
