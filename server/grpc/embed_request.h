// From Embed's and Rerank's wire to the engine: one embedding request
// (GenerateRequest::embedding) per input or document, each checked by the engine's validation
// (engine/request_validation.h). A refusal names the input: "inputs[2].token_ids.ids[5] =
// ...", "documents[3]: ...". Pure: no engine, no gRPC.
#pragma once

#include <optional>
#include <string>
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

// How a reranker's input is written (llama.cpp's server, format_prompt_rerank): the model's
// rerank template (tokenizer.chat_template.rerank) with {query} and {document} replaced,
// tokenized with its special-token text parsed; without one, [BOS] query [EOS] [SEP] document
// [EOS], each special token where the vocabulary adds it (EOS falling back to SEP).
struct RerankFormat {
  std::optional<std::string> template_text;
};

// The engine requests of `request`'s documents, in order: each scored by the model's
// classification head over its first row (an encoder's [CLS]) or its last (a decoder's).
// FAILED_PRECONDITION unless `pooling` is kRank; INVALID_ARGUMENT for an empty query, no
// documents or more than kMaxEmbedInputs, an empty document, or what the engine refuses.
StatusOr<std::vector<ValidatedRequest>> BuildRerankRequests(const v1::RerankRequest& request,
                                                            const RequestContext& context,
                                                            Pooling pooling,
                                                            const RerankFormat& format);

}  // namespace tokenmill::server
