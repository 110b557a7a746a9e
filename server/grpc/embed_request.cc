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

// The engine's refusal of input `name`, its field named as the wire names it.
Status Refusal(const std::string& name, const Status& status) {
  std::string message = status.message();
  constexpr std::string_view kIds = "prompt_token_ids";
  if (message.starts_with(kIds)) {
    message = ".token_ids.ids" + message.substr(kIds.size());
  } else {
    message = ": " + message;
  }
  return Status(status.code(), name + message);
}

// One engine embedding request of `prompt`, validated.
StatusOr<ValidatedRequest> EmbeddingRequest(std::vector<TokenId> prompt, EmbeddingParams params,
                                            int32_t priority, const std::string& client_salt,
                                            const RequestContext& context,
                                            const std::string& name) {
  GenerateRequest out;
  out.prompt_token_ids = std::move(prompt);
  out.sampling.max_tokens = 1;  // never sampled: leaves the prompt the room a generation has
  out.priority = priority;
  out.tenant = context.tenant;
  out.cache_salt = PrefixCacheSalt(context.tenant, client_salt, context.shared_prefix_cache);
  out.embedding = params;
  StatusOr<ValidatedRequest> valid = ValidatedRequest::Validate(std::move(out), context.limits());
  if (!valid.ok()) return Refusal(name, valid.status());
  return valid;
}

// Pieces of a rerank input without a template: the text's tokens, no special tokens added.
StatusOr<std::vector<TokenId>> PlainTokens(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.Encode(text, {.add_special = false, .parse_special = false});
}

void ReplaceAll(std::string& text, std::string_view key, std::string_view value) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size())) {
    text.replace(at, key.size(), value);
  }
}

// The rerank input of `document` (RerankFormat).
StatusOr<std::vector<TokenId>> RerankTokens(const Tokenizer& tokenizer,
                                            const RerankFormat& format, const std::string& query,
                                            const std::string& document) {
  if (format.template_text) {
    // In this order, as llama.cpp's server does.
    std::string prompt = *format.template_text;
    ReplaceAll(prompt, "{query}", query);
    ReplaceAll(prompt, "{document}", document);
    return tokenizer.Encode(prompt, {.add_special = false, .parse_special = true});
  }
  const Vocab& vocab = tokenizer.vocab();
  const TokenId eos = vocab.eos() != kNoToken ? vocab.eos() : vocab.sep();
  std::vector<TokenId> ids;
  if (vocab.add_bos()) ids.push_back(vocab.bos());
  TM_ASSIGN_OR_RETURN(std::vector<TokenId> q, PlainTokens(tokenizer, query));
  ids.insert(ids.end(), q.begin(), q.end());
  if (vocab.add_eos()) ids.push_back(eos);
  if (vocab.add_sep()) ids.push_back(vocab.sep());
  TM_ASSIGN_OR_RETURN(std::vector<TokenId> d, PlainTokens(tokenizer, document));
  ids.insert(ids.end(), d.begin(), d.end());
  if (vocab.add_eos()) ids.push_back(eos);
  return ids;
}

Status CheckInputCount(int count, const std::string& field) {
  if (count == 0 || count > kMaxEmbedInputs) {
    return InvalidArgumentError(field + " has " + std::to_string(count) + " entries: give 1 to " +
                                std::to_string(kMaxEmbedInputs));
  }
  return OkStatus();
}

Status CheckRequestId(const std::string& request_id) {
  if (request_id.size() > kMaxRequestIdBytes) {
    return InvalidArgumentError("request_id is longer than " +
                                std::to_string(kMaxRequestIdBytes) + " bytes");
  }
  return OkStatus();
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
  TM_RETURN_IF_ERROR(CheckRequestId(request.request_id()));
  TM_RETURN_IF_ERROR(CheckInputCount(request.inputs_size(), "inputs"));
  std::vector<ValidatedRequest> built;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string name = "inputs[" + std::to_string(i) + "]";
    TM_ASSIGN_OR_RETURN(std::vector<TokenId> prompt,
                        InputTokens(request.inputs(i), name, *context.tokenizer));
    TM_ASSIGN_OR_RETURN(
        ValidatedRequest valid,
        EmbeddingRequest(std::move(prompt), {.pooling = pooling, .normalize = !request.raw()},
                         request.priority(), request.cache_salt(), context, name));
    built.push_back(std::move(valid));
  }
  return built;
}

StatusOr<std::vector<ValidatedRequest>> BuildRerankRequests(const v1::RerankRequest& request,
                                                            const RequestContext& context,
                                                            Pooling pooling,
                                                            const RerankFormat& format) {
  if (pooling != Pooling::kRank) {
    return FailedPreconditionError(
        "this server's model is no reranker (pooling " + std::string(PoolingName(pooling)) +
        ", not rank): serve one whose GGUF has a classification head and pooling_type 4");
  }
  TM_RETURN_IF_ERROR(CheckRequestId(request.request_id()));
  if (request.query().empty()) return InvalidArgumentError("query is empty");
  TM_RETURN_IF_ERROR(CheckInputCount(request.documents_size(), "documents"));
  // llama.cpp's rank pooling reads an encoder's first row ([CLS]) and a decoder's last.
  const EmbeddingParams params{.pooling = context.embeddings_only ? Pooling::kCls : Pooling::kLast,
                               .normalize = false,
                               .classify = true};
  std::vector<ValidatedRequest> built;
  for (int i = 0; i < request.documents_size(); ++i) {
    const std::string name = "documents[" + std::to_string(i) + "]";
    if (request.documents(i).empty()) return InvalidArgumentError(name + " is empty");
    TM_ASSIGN_OR_RETURN(std::vector<TokenId> prompt,
                        RerankTokens(*context.tokenizer, format, request.query(),
                                     request.documents(i)));
    TM_ASSIGN_OR_RETURN(ValidatedRequest valid,
                        EmbeddingRequest(std::move(prompt), params, request.priority(),
                                         request.cache_salt(), context, name));
    built.push_back(std::move(valid));
  }
  return built;
}

}  // namespace tokenmill::server
