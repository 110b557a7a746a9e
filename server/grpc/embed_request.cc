#include "server/grpc/embed_request.h"

#include <string>
#include <utility>

#include "common/request_limits.h"

namespace tokenmill::server {
namespace {

// The input's tokens, as Generate's text or token_ids input gives them.
StatusOr<std::vector<TokenId>> InputTokens(const v1::EmbedInput& input, const std::string& name,
                                           const Tokenizer& tokenizer) {
  std::vector<TokenId> ids;
  switch (input.input_case()) {
    case v1::EmbedInput::kText: {
      if (input.text().empty()) return InvalidArgumentError(name + ".text is empty");
      TM_ASSIGN_OR_RETURN(ids, tokenizer.Encode(input.text()));
      break;
    }
    case v1::EmbedInput::kTokenIds:
      ids.assign(input.token_ids().ids().begin(), input.token_ids().ids().end());
      break;
    case v1::EmbedInput::INPUT_NOT_SET:
      return InvalidArgumentError(name + " has no input: set text or token_ids");
  }
  if (ids.empty()) return InvalidArgumentError(name + " has no tokens: give a longer text");
  return ids;
}

}  // namespace

StatusOr<std::vector<ValidatedRequest>> BuildEmbedRequests(const v1::EmbedRequest& request,
                                                           const RequestContext& context,
                                                           Pooling pooling) {
  if (pooling != Pooling::kMean && pooling != Pooling::kCls && pooling != Pooling::kLast) {
    return FailedPreconditionError(
        "this server's model pools nothing for embeddings (pooling " +
        std::string(PoolingName(pooling)) +
        "): start the server with --pooling mean, cls or last, or serve an embedding model");
  }
  if (request.request_id().size() > kMaxRequestIdBytes) {
    return InvalidArgumentError("request_id is longer than " +
                                std::to_string(kMaxRequestIdBytes) + " bytes");
  }
  const int num_inputs = request.inputs_size();
  if (num_inputs == 0 || num_inputs > kMaxEmbedInputs) {
    return InvalidArgumentError("inputs has " + std::to_string(num_inputs) +
                                " entries: give 1 to " + std::to_string(kMaxEmbedInputs));
  }
  std::vector<ValidatedRequest> built;
  built.reserve(static_cast<size_t>(num_inputs));
  for (int i = 0; i < num_inputs; ++i) {
    const std::string name = "inputs[" + std::to_string(i) + "]";
    GenerateRequest out;
    TM_ASSIGN_OR_RETURN(out.prompt_token_ids,
                        InputTokens(request.inputs(i), name, *context.tokenizer));
    out.sampling.max_tokens = 1;  // never sampled: leaves the prompt the room a generation has
    out.priority = request.priority();
    out.tenant = context.tenant;
    out.cache_salt =
        PrefixCacheSalt(context.tenant, request.cache_salt(), context.shared_prefix_cache);
    out.embedding = EmbeddingParams{.pooling = pooling, .normalize = !request.raw()};
    StatusOr<ValidatedRequest> valid = ValidatedRequest::Validate(std::move(out), context.limits());
    if (!valid.ok()) {
      const Status& status = valid.status();
      std::string message = status.message();
      constexpr std::string_view kIds = "prompt_token_ids";
      if (message.starts_with(kIds)) message = ".token_ids.ids" + message.substr(kIds.size());
      else message = ": " + message;
      return Status(status.code(), name + message);
    }
    built.push_back(std::move(valid).value());
  }
  return built;
}

}  // namespace tokenmill::server
