// From Embed's wire to the engine: one embedding request (GenerateRequest::embedding) per
// input, each checked by the engine's validation (engine/request_validation.h). A refusal
// names the input: "inputs[2].token_ids.ids[5] = ...". Pure: no engine, no gRPC.
#pragma once

#include <vector>

#include "common/status.h"
#include "engine/request_validation.h"
#include "model/config.h"
#include "server/grpc/request_builder.h"
#include "tokenmill/v1/inference.pb.h"

namespace tokenmill::server {

// The engine requests (all but their sinks) of `request`'s inputs, in order, pooled with
// `pooling` (the server's). FAILED_PRECONDITION when that pools nothing (kNone, kRank);
// INVALID_ARGUMENT for no inputs or more than kMaxEmbedInputs, an input without tokens, or
// what the engine refuses.
StatusOr<std::vector<ValidatedRequest>> BuildEmbedRequests(const v1::EmbedRequest& request,
                                                           const RequestContext& context,
                                                           Pooling pooling);

}  // namespace tokenmill::server
