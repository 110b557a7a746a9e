#include "server/grpc/inference_service.h"

#include <filesystem>
#include <memory>

#include "server/grpc/embed_reactor.h"
#include "server/grpc/embed_request.h"
#include "server/grpc/request_builder.h"
#include "server/grpc/status_conversion.h"
#include "server/grpc/wire_text.h"
#include "text/tokenizer/utf8.h"

namespace tokenmill::server {
namespace {

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// A write reactor that only reports an error.
class RefusedStream final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// `tenant` and `shared_prefix_cache` matter to Generate and Embed alone.
RequestContext ContextOf(const ServingModel& model, std::string tenant = {},
                         bool shared_prefix_cache = false) {
  return RequestContext{
      .tokenizer = &model.tokenizer,
      .chat_template = model.chat_template ? &*model.chat_template : nullptr,
      .max_model_len = model.engine->max_model_len(),
      .grammars = model.grammars.get(),
      .tool_call_format = model.tool_call_format,
      .generic_tool_preamble = model.generic_tool_preamble,
      .reasoning = model.reasoning,
      .harmony = model.harmony,
      .parse_special_in_content = model.parse_special_in_content,
      .speculative_decoding = model.engine->limits().speculative_decoding,
      .embeddings_only = model.engine->limits().embeddings_only,
      .has_classifier = model.engine->limits().has_classifier,
      .tenant = std::move(tenant),
      .shared_prefix_cache = shared_prefix_cache,
      .model_names = model.served_model_names,
      .loras = model.loras.get()};
}

v1::SpecialToken SpecialTokenOf(const Tokenizer& tokenizer, TokenId id) {
  v1::SpecialToken token;
  token.set_id(id);
  if (id >= 0) token.set_text(tokenizer::SanitizeUtf8(tokenizer.Piece(id, true)));
  return token;
}

}  // namespace

grpc::Status InferenceService::CheckCaller(const grpc::CallbackServerContext* context,
                                           CallerIdentity& caller) const {
  const grpc::Status status = IdentifyCaller(context->client_metadata(), api_key_, caller);
  if (!status.ok()) return status;
  if (!open_.load(std::memory_order_acquire)) {
    return grpc::Status(grpc::UNAVAILABLE, "the model is still loading: retry shortly");
  }
  return grpc::Status::OK;
}

StatusOr<int> InferenceService::ModelIndexOf(std::string_view name, bool adapters) const {
  TM_ASSIGN_OR_RETURN(const ModelRegistry::Resolved resolved, models_.Resolve(name));
  if (resolved.adapter && !adapters) {
    return InvalidArgumentError("model " + std::string(name) +
                                " is a LoRA adapter: embeddings and reranking run base models; "
                                "name its base model");
  }
  return resolved.index;
}

namespace {

grpc::Status DrainingStatus() {
  return grpc::Status(grpc::UNAVAILABLE,
                      "the server is shutting down: send the request to another server");
}

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  CallerIdentity caller;
  grpc::Status status = CheckCaller(context, caller);
  if (!status.ok()) return new RefusedStream(status);
  status = CheckPriorityAllowed(request->priority(), caller);
  if (!status.ok()) return new RefusedStream(status);
  if (draining_.load(std::memory_order_acquire)) return new RefusedStream(DrainingStatus());
  // Adapters' names too: the request builder picks the adapter.
  const StatusOr<int> index = ModelIndexOf(request->model(), /*adapters=*/true);
  if (!index.ok()) return new RefusedStream(ToGrpcStatus(index.status()));
  std::string request_id = request->request_id();
  if (request_id.empty()) {
    request_id = "gen-" + std::to_string(next_request_number_.fetch_add(1));
  }
  auto* reactor = new GenerateReactor(*metrics_[*index], streams_, std::move(request_id));
  reactor->Hold();
  if (ModelLease model = models_.TryAcquire(*index)) {
    BuildAndStart(reactor, std::move(model), *request, nullptr, std::move(caller.tenant));
    return reactor;
  }
  // The model loads first: with a copy of the request (gRPC frees its own when the call
  // ends, which a cancel may do first).
  auto copy = std::make_shared<const v1::GenerateRequest>(*request);
  models_.Acquire(*index, [this, reactor, copy, tenant = std::move(caller.tenant)](
                              StatusOr<ModelLease> model) mutable {
    if (!model.ok()) {
      reactor->StartBuilt(nullptr, model.status());
      return;
    }
    BuildAndStart(reactor, std::move(*model), *copy, copy, std::move(tenant));
  });
  return reactor;
}

void InferenceService::BuildAndStart(GenerateReactor* reactor, ModelLease model,
                                     const v1::GenerateRequest& request,
                                     std::shared_ptr<const v1::GenerateRequest> copy,
                                     std::string tenant) {
  if (CompilesGrammar(request)) {
    // Its grammar may take long to compile: on the model's build queue.
    if (copy == nullptr) copy = std::make_shared<const v1::GenerateRequest>(request);
    BuildQueue& queue = *model->build_queue;
    queue.Post([this, reactor, model = std::move(model), copy, tenant = std::move(tenant)] {
      StatusOr<ValidatedRequest> built =
          BuildGenerateRequest(*copy, ContextOf(*model, tenant, shared_prefix_cache_));
      reactor->StartBuilt(model, std::move(built));
    });
    return;
  }
  StatusOr<ValidatedRequest> built =
      BuildGenerateRequest(request, ContextOf(*model, std::move(tenant), shared_prefix_cache_));
  reactor->StartBuilt(std::move(model), std::move(built));
}

template <typename Request>
grpc::ServerUnaryReactor* InferenceService::StartPooling(
    grpc::CallbackServerContext* context, const Request& request, const char* id_prefix,
    StatusOr<std::vector<ValidatedRequest>> (*build)(const Request&, const ServingModel&,
                                                     const RequestContext&),
    std::function<void(const std::string&, std::vector<EmbedReactor::Result>&)> write) {
  CallerIdentity caller;
  grpc::Status status = CheckCaller(context, caller);
  if (!status.ok()) return FinishUnary(context, status);
  status = CheckPriorityAllowed(request.priority(), caller);
  if (!status.ok()) return FinishUnary(context, status);
  if (draining_.load(std::memory_order_acquire)) return FinishUnary(context, DrainingStatus());
  const StatusOr<int> index = ModelIndexOf(request.model(), /*adapters=*/false);
  if (!index.ok()) return FinishUnary(context, ToGrpcStatus(index.status()));
  std::string request_id = request.request_id();
  if (request_id.empty()) {
    request_id = id_prefix + std::to_string(next_request_number_.fetch_add(1));
  }
  auto* reactor = new EmbedReactor(
      *metrics_[*index], streams_,
      [write = std::move(write), request_id](std::vector<EmbedReactor::Result>& results) {
        write(request_id, results);
      },
      request_id);
  reactor->Hold();
  const auto start = [this, reactor, build, tenant = std::move(caller.tenant)](
                         const Request& input, StatusOr<ModelLease> model) {
    if (!model.ok()) {
      reactor->StartBuilt(nullptr, model.status());
      return;
    }
    StatusOr<std::vector<ValidatedRequest>> built =
        build(input, **model, ContextOf(**model, tenant, shared_prefix_cache_));
    reactor->StartBuilt(std::move(*model), std::move(built));
  };
  if (ModelLease loaded = models_.TryAcquire(*index)) {
    start(request, std::move(loaded));
  } else {
    // The model loads first: with a copy of the request, as Generate's.
    models_.Acquire(*index, [start, copy = std::make_shared<const Request>(request)](
                                StatusOr<ModelLease> model) { start(*copy, std::move(model)); });
  }
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Embed(grpc::CallbackServerContext* context,
                                                  const v1::EmbedRequest* request,
                                                  v1::EmbedResponse* response) {
  return StartPooling<v1::EmbedRequest>(
      context, *request, "emb-",
      [](const v1::EmbedRequest& input, const ServingModel& model,
         const RequestContext& request_context) {
        return BuildEmbedRequests(input, request_context, model.pooling);
      },
      [response](const std::string& id, std::vector<EmbedReactor::Result>& results) {
        response->set_request_id(id);
        for (EmbedReactor::Result& result : results) {
          v1::Embedding* embedding = response->add_embeddings();
          embedding->mutable_values()->Add(result.vector.begin(), result.vector.end());
          embedding->set_prompt_tokens(static_cast<uint32_t>(result.prompt_tokens));
        }
      });
}

grpc::ServerUnaryReactor* InferenceService::Rerank(grpc::CallbackServerContext* context,
                                                   const v1::RerankRequest* request,
                                                   v1::RerankResponse* response) {
  return StartPooling<v1::RerankRequest>(
      context, *request, "rerank-",
      [](const v1::RerankRequest& input, const ServingModel& model,
         const RequestContext& request_context) {
        return BuildRerankRequests(input, request_context, model.pooling, model.rerank_format);
      },
      [response](const std::string& id, std::vector<EmbedReactor::Result>& results) {
        response->set_request_id(id);
        for (const EmbedReactor::Result& result : results) {
          v1::RerankResult* scored = response->add_results();
          scored->set_score(result.vector.at(0));
          scored->set_prompt_tokens(static_cast<uint32_t>(result.prompt_tokens));
        }
      });
}

grpc::ServerUnaryReactor* InferenceService::AnswerWithModel(
    grpc::CallbackServerContext* context, std::string_view name,
    std::function<grpc::Status(const ServingModel&)> answer, bool loaded_only) {
  CallerIdentity caller;
  const grpc::Status status = CheckCaller(context, caller);
  if (!status.ok()) return FinishUnary(context, status);
  // An adapter's name means its base model here: the same vocabulary and template.
  const StatusOr<int> index = ModelIndexOf(name, /*adapters=*/true);
  if (!index.ok()) return FinishUnary(context, ToGrpcStatus(index.status()));
  if (loaded_only) {
    const ModelLease model = models_.Peek(*index);
    return FinishUnary(context, model != nullptr
                                    ? answer(*model)
                                    : grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                   "the model is not loaded now"));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // gRPC keeps a unary call's request and response until it is finished.
  models_.Acquire(*index, [reactor, answer = std::move(answer)](StatusOr<ModelLease> model) {
    reactor->Finish(model.ok() ? answer(**model) : ToGrpcStatus(model.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  return AnswerWithModel(context, request->model(), [request, response](const ServingModel& model) {
    StatusOr<TokenizedPrompt> prompt = TokenizeRequestInput(*request, ContextOf(model));
    if (!prompt.ok()) return ToGrpcStatus(prompt.status());
    response->mutable_token_ids()->Add(prompt->token_ids.begin(), prompt->token_ids.end());
    response->set_prompt(std::move(prompt->text));
    response->set_max_model_len(static_cast<uint32_t>(model.engine->max_model_len()));
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* context,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  return AnswerWithModel(context, request->model(), [request, response](const ServingModel& model) {
    const int32_t vocab_size = model.tokenizer.vocab_size();
    for (int i = 0; i < request->token_ids().size(); ++i) {
      const int32_t id = request->token_ids(i);
      if (id < 0 || id >= vocab_size) {
        return grpc::Status(grpc::INVALID_ARGUMENT,
                            "token_ids[" + std::to_string(i) + "] = " + std::to_string(id) +
                                " is outside the vocabulary (0.." +
                                std::to_string(vocab_size - 1) + ")");
      }
    }
    const std::vector<TokenId> ids(request->token_ids().begin(), request->token_ids().end());
    response->set_text(WireText(model.tokenizer, ids, request->render_special()));
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest* request,
                                                         v1::ModelInfo* response) {
  return AnswerWithModel(context, request->model(), [this, response](const ServingModel& model) {
    const ModelConfig& config = model.model->config();
    const Tokenizer& tokenizer = model.tokenizer;
    response->set_name(tokenizer::SanitizeUtf8(model.name));
    response->set_architecture(config.arch_name);
    response->set_context_length(static_cast<uint32_t>(config.context_length));
    response->set_vocab_size(static_cast<uint32_t>(tokenizer.vocab_size()));
    *response->mutable_bos_token() = SpecialTokenOf(tokenizer, tokenizer.bos());
    *response->mutable_eos_token() = SpecialTokenOf(tokenizer, tokenizer.eos());
    for (const TokenId id : tokenizer.end_of_generation_ids()) {
      *response->add_end_of_generation_tokens() = SpecialTokenOf(tokenizer, id);
    }
    response->set_tokenizer_model(std::string(tokenizer.model_name()));
    response->set_kv_block_size(static_cast<uint32_t>(model.block_size));
    response->set_num_kv_blocks(static_cast<uint32_t>(model.engine->Stats().num_kv_blocks));
    response->set_max_model_len(static_cast<uint32_t>(model.engine->max_model_len()));
    response->set_has_chat_template(model.chat_template.has_value());
    for (const std::string& name : model.served_model_names) {
      response->add_served_model_names(name);
    }
    response->set_created(model.created_unix_seconds);
    response->set_pooling(std::string(PoolingName(model.pooling)));
    for (const std::string& name : model.loras->Names()) response->add_lora_adapters(name);
    response->set_embedding_length(static_cast<uint32_t>(config.n_embd));
    response->set_tool_call_format(
        model.generic_tool_preamble ? "generic"
        : model.tool_call_format    ? std::string(ToolCallFormatName(*model.tool_call_format))
                                    : "none");
    for (const std::string& id : models_.Ids()) response->add_models(id);
    return grpc::Status::OK;
  }, request->loaded_only());
}

}  // namespace tokenmill::server
