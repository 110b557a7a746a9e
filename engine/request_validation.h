// The checks Submit makes on the caller's thread, so a bad request fails there with a
// message saying what to change and never reaches the engine loop.
#pragma once

#include "common/status.h"
#include "engine/engine.h"

namespace tokenmill {

struct RequestLimits {
  int max_model_len = 0;  // prompt plus generated tokens
  int vocab_size = 0;
};

// InvalidArgument for an empty prompt, a token id outside the vocabulary, a prompt that
// leaves no room to generate, max_tokens < 1, a negative stop token id, an empty stop
// string or a missing sink.
Status ValidateGenerateRequest(const GenerateRequest& request, const RequestLimits& limits);

}  // namespace tokenmill
