// Stop conditions that need only token ids; stop strings (text) are the engine's.
#pragma once

#include <optional>
#include <span>

#include "cache/types.h"
#include "scheduler/request.h"

namespace tokenmill {

// Why `request`, whose last token was just appended, must finish; nullopt to go on.
// A stop token (EOS unless ignore_eos, or a stop token id) wins over a length limit.
std::optional<FinishReason> CheckStop(const Request& request,
                                      std::span<const TokenId> eos_token_ids, int max_model_len);

}  // namespace tokenmill
