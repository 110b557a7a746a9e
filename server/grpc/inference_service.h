// The tokenmill.v1.Inference service on gRPC's callback API, over the models of a
// ModelRegistry: each call names its model (empty: the default), which may have to load first.
// It answers UNAVAILABLE until it is opened (the server starts listening before the default
// model loads, so health checks see NOT_SERVING) and refuses new calls once draining begins. With an API key, every
// call without "authorization: Bearer <key>" gets UNAUTHENTICATED before anything else runs;
// a call names its tenant only with the key (server/grpc/caller_identity.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/grpc/caller_identity.h"
#include "server/grpc/embed_reactor.h"
#include "server/grpc/generate_reactor.h"
#include "server/grpc/model_registry.h"
#include "server/grpc/request_builder.h"
#include "server/grpc/serving_model.h"
#include "server/grpc/stream_counter.h"
#include "server/metrics/request_metrics.h"
#include "tokenmill/v1/inference.grpc.pb.h"

namespace tokenmill::server {

class InferenceService final : public v1::Inference::CallbackService {
 public:
  // `api_key`: empty for none. `shared_prefix_cache`: tenants share cached prompt prefixes
  // (--shared-prefix-cache); otherwise each tenant's are its own (PrefixCacheSalt).
  // `models` and `metrics` (one per model of `models`, by index: what its requests record)
  // must outlive the calls (wait for the streams to end).
  InferenceService(const std::vector<std::unique_ptr<RequestMetrics>>& metrics,
                   ModelRegistry& models, std::string api_key, bool shared_prefix_cache)
      : metrics_(metrics),
        models_(models),
        api_key_(std::move(api_key)),
        shared_prefix_cache_(shared_prefix_cache) {}

  // Serves calls from now on: the default model is loaded.
  void Open() { open_.store(true, std::memory_order_release); }
  // New Generate, Embed and Rerank calls answer UNAVAILABLE from now on; open calls go on.
  void BeginDrain() { draining_.store(true, std::memory_order_release); }
  StreamCounter& streams() { return streams_; }

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context,
                                  const v1::EmbedRequest* request,
                                  v1::EmbedResponse* response) override;
  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* context,
                                   const v1::RerankRequest* request,
                                   v1::RerankResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

 private:
  // Embed's and Rerank's common path: the caller, its priority, the drain and the model
  // checked, the engine requests built by `build` once the model is loaded, then one
  // EmbedReactor over them whose results `write` puts into the response (with the request id).
  template <typename Request>
  grpc::ServerUnaryReactor* StartPooling(
      grpc::CallbackServerContext* context, const Request& request, const char* id_prefix,
      StatusOr<std::vector<ValidatedRequest>> (*build)(const Request&, const ServingModel&,
                                                       const RequestContext&),
      std::function<void(const std::string&, std::vector<EmbedReactor::Result>&)> write);
  // Builds a Generate request over `model` (on its build queue when its grammar may take
  // long: `copy` is the request there, made here if null) and starts it on `reactor`.
  void BuildAndStart(GenerateReactor* reactor, ModelLease model,
                     const v1::GenerateRequest& request,
                     std::shared_ptr<const v1::GenerateRequest> copy, std::string tenant);
  // Finishes a unary call with `answer`'s status once the model `name` calls for is loaded
  // (no LoRA adapter's name). `loaded_only`: at once, from the model as loaded now, without
  // counting it as used; UNAVAILABLE when it is not loaded.
  grpc::ServerUnaryReactor* AnswerWithModel(
      grpc::CallbackServerContext* context, std::string_view name,
      std::function<grpc::Status(const ServingModel&)> answer, bool loaded_only = false);
  // OK with `caller` set, or why the call cannot be served: a missing or wrong API key, a
  // tenant the call may not name, or a server not open yet.
  grpc::Status CheckCaller(const grpc::CallbackServerContext* context,
                           CallerIdentity& caller) const;
  // The model a call's `name` asks for: NOT_FOUND for a name no model or adapter has,
  // INVALID_ARGUMENT for an adapter's where `adapters` is false.
  StatusOr<int> ModelIndexOf(std::string_view name, bool adapters) const;

  const std::vector<std::unique_ptr<RequestMetrics>>& metrics_;
  ModelRegistry& models_;
  const std::string api_key_;
  const bool shared_prefix_cache_;
  std::atomic<bool> open_{false};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_request_number_{1};
  StreamCounter streams_;
};

}  // namespace tokenmill::server
